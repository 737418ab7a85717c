#include "jit/bwd_weights_stage.hpp"

#include <string>

#include "jit/kernel_cache.hpp"
#include "jit/vec_cvt.hpp"
#include "jit/vec_isa.hpp"
#include "ops/numeric.hpp"

namespace convgrad::detail {
namespace {

int vlen_of(const StageKernelDesc& d) { return static_cast<Isa>(d.isa) >= Isa::avx512_core ? 16 : 8; }

const char* mode_name(StageMode m) {
    switch (m) {
        case StageMode::widen_bf16: return "widen_bf16";
        case StageMode::widen_f16: return "widen_f16";
        case StageMode::pair_bf16: return "pair_bf16";
    }
    return "?";
}

// fn(a, b, dst, nvec). Register contract: rdi a, rsi b (pair_bf16 only;
// 0 = pair with zero), rdx dst, rcx vectors left; vregs 0-7.
class StageKernelImpl final : public StageKernel {
public:
    explicit StageKernelImpl(const StageKernelDesc& d)
        : StageKernel(std::string("wstage_") + mode_name(static_cast<StageMode>(d.mode)) + "_" +
                      isa_name(static_cast<Isa>(d.isa))) {
        desc_ = d;
    }

private:
    static constexpr int kUnroll = 4;  // vectors per main-loop trip: independent chains

    void generate() override {
        preamble(0);
        if (static_cast<StageMode>(desc_.mode) == StageMode::pair_bf16) {
            Xbyak::Label with_zero, done;
            test(rsi, rsi);
            jz(with_zero);
            loops(true);
            jmp(done);
            L(with_zero);
            loops(false);
            L(done);
        } else {
            loops(false);
        }
        postamble();
    }

    // kUnroll vectors per trip while enough are left, then one at a time.
    // Advances rdi, rsi (when paired), rdx; counts rcx down to 0.
    void loops(bool paired) {
        const int vlen = vlen_of(desc_);
        Xbyak::Label big, one, done;
        L(big);
        cmp(rcx, kUnroll);
        jl(one);
        for (int u = 0; u < kUnroll; ++u) convert(u, u * vlen, paired);
        advance(kUnroll * vlen, paired);
        sub(rcx, kUnroll);
        jmp(big);
        L(one);
        test(rcx, rcx);
        jz(done);
        convert(0, 0, paired);
        advance(vlen, paired);
        dec(rcx);
        jmp(one);
        L(done);
    }

    void advance(int elems, bool paired) {
        add(rdi, 2 * elems);
        if (paired) add(rsi, 2 * elems);
        add(rdx, 4 * elems);
    }

    // Vector u (vregs 2u, 2u+1) at element offset `at`.
    void convert(int u, int at, bool paired) {
        const Isa isa = static_cast<Isa>(desc_.isa);
        VecIsa vi(*this, isa);
        VecCvt cvt(*this, vi, isa);
        const Xbyak::Xmm v = vi.vreg(2 * u), w = vi.vreg(2 * u + 1);
        switch (static_cast<StageMode>(desc_.mode)) {
            case StageMode::widen_bf16: cvt.load(v, ptr[rdi + 2 * at], data_type::bf16); break;
            case StageMode::widen_f16: cvt.load(v, ptr[rdi + 2 * at], data_type::f16); break;
            case StageMode::pair_bf16:
                vpmovzxwd(v, ptr[rdi + 2 * at]);
                if (paired) {
                    cvt.load(w, ptr[rsi + 2 * at], data_type::bf16);  // b << 16
                    vpord(v, v, w);
                }
                break;
        }
        vi.store(ptr[rdx + 4 * at], v);
    }
};

uint32_t stage_scalar(StageMode mode, const uint16_t* a, const uint16_t* b, int64_t i) {
    switch (mode) {
        case StageMode::widen_bf16: return static_cast<uint32_t>(a[i]) << 16;
        case StageMode::widen_f16: return f32_to_bits(f16_to_f32(a[i]));
        case StageMode::pair_bf16: return a[i] | (b ? static_cast<uint32_t>(b[i]) << 16 : 0u);
    }
    return 0;
}

}  // namespace

void StageKernel::run(const uint16_t* a, const uint16_t* b, void* dst, int64_t n) const {
    const int64_t vlen = vlen_of(desc_), whole = n / vlen * vlen;
    using Fn = void (*)(const uint16_t*, const uint16_t*, void*, int64_t);
    if (whole) entry<Fn>()(a, b, dst, n / vlen);
    const StageMode mode = static_cast<StageMode>(desc_.mode);
    uint32_t* out = static_cast<uint32_t*>(dst);
    for (int64_t i = whole; i < n; ++i) out[i] = stage_scalar(mode, a, b, i);
}

std::shared_ptr<const StageKernel> get_stage_kernel(Isa isa, StageMode mode) {
    static KernelCache<StageKernelDesc, StageKernel> cache;
    StageKernelDesc d;
    d.isa = static_cast<uint8_t>(isa >= Isa::avx512_core ? Isa::avx512_core : Isa::avx2);
    d.mode = static_cast<uint8_t>(mode);
    return cache.get(d, [](const StageKernelDesc& desc) {
        auto k = std::make_shared<StageKernelImpl>(desc);
        k->create();
        return std::shared_ptr<const StageKernel>(std::move(k));
    });
}

}  // namespace convgrad::detail
