// VecCvt (jit/vec_cvt.hpp): tiny kernels that convert arrays, compared with
// the scalar conversions of ops/numeric.hpp, on every ISA this CPU runs.
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "jit/isa.hpp"
#include "jit/jit_kernel.hpp"
#include "jit/vec_cvt.hpp"
#include "ops/numeric.hpp"

namespace {

using convgrad::data_type;
using namespace convgrad::detail;

enum class Mode { convert, convert_nt, bcast };

// fn(src, dst, nvec): converts nvec full vectors then `tail` elements
// (convert), or broadcasts src[0] into one f32 vector (bcast).
class CvtKernel final : public JitKernel {
public:
    CvtKernel(Isa isa, Mode mode, data_type from, data_type to, int tail)
        : JitKernel("test_cvt"), isa_(isa), mode_(mode), from_(from), to_(to), tail_(tail) {
        create();
    }
    void operator()(const void* src, void* dst, int64_t nvec) const {
        entry<void (*)(const void*, void*, int64_t)>()(src, dst, nvec);
    }

private:
    void generate() override {
        using namespace Xbyak::util;
        VecIsa vi(*this, isa_);
        VecCvt cvt(*this, vi, isa_);
        const Xbyak::Xmm v = vi.vreg(0), t0 = vi.vreg(1), t1 = vi.vreg(2);
        preamble(0);
        if (mode_ == Mode::bcast) {
            cvt.bcast(v, ptr[rdi], from_);
            vi.store(ptr[rsi], v);
        } else {
            if (tail_) vi.set_tail(tail_, rax, vi.num_vregs() - 1);
            Xbyak::Label l_loop, l_done;
            L(l_loop);
            test(rdx, rdx);
            jz(l_done);
            cvt.load(v, ptr[rdi], from_);
            cvt.store(ptr[rsi], v, to_, t0, t1, mode_ == Mode::convert_nt);
            add(rdi, vi.vlen() * VecCvt::elem_bytes(from_));
            add(rsi, vi.vlen() * VecCvt::elem_bytes(to_));
            dec(rdx);
            jmp(l_loop);
            L(l_done);
            if (tail_) {
                cvt.load_tail(v, ptr[rdi], from_, tail_);
                cvt.store_tail(ptr[rsi], v, to_, tail_, t0, t1);
            }
        }
        if (mode_ == Mode::convert_nt) sfence();
        postamble();
        cvt.emit_constants();
    }
    Isa isa_;
    Mode mode_;
    data_type from_, to_;
    int tail_;
};

std::vector<Isa> isas() {
    std::vector<Isa> r;
    for (Isa i : {Isa::avx2, Isa::avx512_core, Isa::avx512_core_bf16})
        if (i <= cpu_isa()) r.push_back(i);
    return r;
}
int vlen(Isa isa) { return isa >= Isa::avx512_core ? 16 : 8; }

// Converts `src` (elements of `from`, as raw bytes) with whole vectors and a
// tail; 8 guard bytes after the output must stay untouched.
std::vector<uint8_t> convert(Isa isa, data_type from, data_type to, const std::vector<uint8_t>& src) {
    const int eb_from = VecCvt::elem_bytes(from), eb_to = VecCvt::elem_bytes(to);
    const int64_t n = static_cast<int64_t>(src.size()) / eb_from;
    const CvtKernel k(isa, Mode::convert, from, to, static_cast<int>(n % vlen(isa)));
    std::vector<uint8_t> dst(static_cast<size_t>(n * eb_to + 8), 0xa5);
    k(src.data(), dst.data(), n / vlen(isa));
    for (size_t i = dst.size() - 8; i < dst.size(); ++i) REQUIRE(dst[i] == 0xa5);
    dst.resize(dst.size() - 8);
    return dst;
}

template <typename T>
std::vector<uint8_t> bytes_of(const std::vector<T>& v) {
    const auto* p = reinterpret_cast<const uint8_t*>(v.data());
    return std::vector<uint8_t>(p, p + v.size() * sizeof(T));
}
template <typename T>
std::vector<T> values_of(const std::vector<uint8_t>& b) {
    std::vector<T> v(b.size() / sizeof(T));
    std::memcpy(v.data(), b.data(), b.size());
    return v;
}

bool quiet_nan16(uint16_t h, data_type dt) {
    return dt == data_type::bf16 ? (h & 0x7f80) == 0x7f80 && (h & 0x0040)
                                 : (h & 0x7c00) == 0x7c00 && (h & 0x0200);
}

// Floats that exercise rounding to dt: random bit patterns (NaN, inf,
// subnormals included), exact ties and their neighbours, the overflow edge.
std::vector<float> narrowing_inputs(data_type dt) {
    std::vector<float> r;
    std::mt19937 gen(17);
    for (int i = 0; i < 200000; ++i) r.push_back(bits_to_f32(gen()));
    for (uint32_t h = 0; h < 0x10000; ++h) {
        if (dt == data_type::bf16) {
            const uint32_t tie = h << 16 | 0x8000;  // halfway between h and h + 1
            for (uint32_t b : {tie, tie - 1, tie + 1, h << 16 | 0x7fff}) r.push_back(bits_to_f32(b));
        } else if ((h & 0x7fff) < 0x7c00) {  // finite f16: the midpoint to the next value up
            const float lo = f16_to_f32(static_cast<uint16_t>(h));
            const float hi = (h & 0x7fff) == 0x7bff ? std::copysign(65536.f, lo)  // past max: 65520 ties to inf
                                                    : f16_to_f32(static_cast<uint16_t>(h + 1));
            const float mid = (lo + hi) / 2;  // exact: one bit more than f16 carries
            for (float f : {mid, std::nextafter(mid, 0.f), std::nextafter(mid, 1e30f * mid), lo})
                r.push_back(f);
        }
    }
    for (float f : {0.f, -0.f, 1e-40f, -1e-45f, 6e-8f, 3e-8f, 65504.f, 65519.f, 65520.f, 1e30f}) r.push_back(f);
    return r;
}

}  // namespace

TEST_CASE("vec_cvt: widening every bf16 and f16 bit pattern", "[vec_cvt]") {
    std::vector<uint16_t> all(0x10000 + 5);  // + 5: a tail after the whole vectors
    for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
    for (Isa isa : isas())
        for (data_type dt : {data_type::bf16, data_type::f16}) {
            INFO(isa_name(isa) << " " << convgrad::dtype_name(dt));
            const auto got = values_of<uint32_t>(convert(isa, dt, data_type::f32, bytes_of(all)));
            int64_t bad = 0;
            for (size_t i = 0; i < all.size(); ++i) {
                const float want = dt == data_type::bf16 ? bf16_to_f32(all[i]) : f16_to_f32(all[i]);
                // NaNs: F16C returns the quiet form of a signalling NaN.
                const bool ok = std::isnan(want) ? std::isnan(bits_to_f32(got[i])) : got[i] == f32_to_bits(want);
                bad += !ok;
            }
            CHECK(bad == 0);
        }
}

TEST_CASE("vec_cvt: narrowing rounds to nearest even like numeric.hpp", "[vec_cvt]") {
    for (data_type dt : {data_type::bf16, data_type::f16}) {
        std::vector<float> in = narrowing_inputs(dt);
        in.resize(in.size() / 16 * 16 + 7);  // whole vectors and a tail on every ISA
        for (Isa isa : isas()) {
            INFO(isa_name(isa) << " " << convgrad::dtype_name(dt));
            const auto got = values_of<uint16_t>(convert(isa, data_type::f32, dt, bytes_of(in)));
            int64_t bad = 0;
            for (size_t i = 0; i < in.size(); ++i) {
                const uint16_t want = dt == data_type::bf16 ? f32_to_bf16(in[i]) : f32_to_f16(in[i]);
                const bool ok = std::isnan(in[i]) ? quiet_nan16(got[i], dt) : got[i] == want;
                if (!ok && bad < 5) UNSCOPED_INFO("in " << std::hex << f32_to_bits(in[i]) << " got " << got[i] << " want " << want);
                bad += !ok;
            }
            CHECK(bad == 0);
        }
    }
}

TEST_CASE("vec_cvt: tails touch exactly n elements", "[vec_cvt]") {
    std::mt19937 gen(3);
    for (Isa isa : isas())
        for (data_type dt : {data_type::f32, data_type::bf16, data_type::f16})
            for (int n = 1; n < vlen(isa); ++n) {
                INFO(isa_name(isa) << " " << convgrad::dtype_name(dt) << " n " << n);
                std::vector<float> in(static_cast<size_t>(n));
                for (float& f : in) f = static_cast<float>(static_cast<int>(gen() % 255) - 127) / 4.f;
                const auto narrow = convert(isa, data_type::f32, dt, bytes_of(in));  // guard checked inside
                const auto wide = values_of<float>(convert(isa, dt, data_type::f32, narrow));
                CHECK(wide == in);  // exactly representable in every type
            }
}

TEST_CASE("vec_cvt: broadcast one element of each type", "[vec_cvt]") {
    for (Isa isa : isas())
        for (data_type dt : {data_type::f32, data_type::bf16, data_type::f16}) {
            const float x = -3.75f;
            std::vector<uint8_t> src(4, 0);
            if (dt == data_type::f32)
                std::memcpy(src.data(), &x, 4);
            else {
                const uint16_t h = dt == data_type::bf16 ? f32_to_bf16(x) : f32_to_f16(x);
                std::memcpy(src.data(), &h, 2);
                src[2] = src[3] = 0xff;  // the neighbour must not leak in
            }
            const CvtKernel k(isa, Mode::bcast, dt, data_type::f32, 0);
            std::vector<float> out(16, 0.f);
            k(src.data(), out.data(), 0);
            for (int i = 0; i < vlen(isa); ++i) CHECK(out[static_cast<size_t>(i)] == x);
        }
}

TEST_CASE("vec_cvt: streaming stores equal ordinary ones", "[vec_cvt]") {
    std::vector<float> in = narrowing_inputs(data_type::bf16);
    in.resize(4096);
    for (Isa isa : isas())
        for (data_type dt : {data_type::f32, data_type::bf16, data_type::f16}) {
            INFO(isa_name(isa) << " " << convgrad::dtype_name(dt));
            const auto want = convert(isa, data_type::f32, dt, bytes_of(in));
            const CvtKernel k(isa, Mode::convert_nt, data_type::f32, dt, 0);
            std::unique_ptr<uint8_t, decltype(&std::free)> out(static_cast<uint8_t*>(std::aligned_alloc(64, (want.size() + 63) / 64 * 64)),
                                                               &std::free);
            k(in.data(), out.get(), static_cast<int64_t>(in.size()) / vlen(isa));
            int64_t bad = 0;
            for (size_t i = 0; i < want.size(); i += 2) {  // NaNs: any quiet NaN, as above
                uint16_t a, b;
                std::memcpy(&a, want.data() + i, 2);
                std::memcpy(&b, out.get() + i, 2);
                bad += a != b && !(dt != data_type::f32 && quiet_nan16(a, dt) && quiet_nan16(b, dt));
            }
            CHECK(bad == 0);
        }
}

TEST_CASE("vec_isa: a register past the ISA's count is an error, not a wrapped encoding", "[vec_cvt]") {
    // Xbyak would encode zmm32 as zmm0 (ymm16 on AVX2 as an EVEX register):
    // a generator that miscounts its registers must fail when it names one.
    Xbyak::CodeGenerator cg;
    for (const auto& [isa, count] : {std::pair{Isa::avx2, 16}, std::pair{Isa::avx512_core, 32}}) {
        const VecIsa vi(cg, isa);
        CHECK(vi.num_vregs() == count);
        CHECK(vi.vreg(count - 1).getIdx() == count - 1);
        CHECK_THROWS_WITH(vi.vreg(count), Catch::Contains("vector register " + std::to_string(count) + " requested"));
        CHECK_THROWS_AS(vi.vreg(-1), convgrad::error);
    }
}
