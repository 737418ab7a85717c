// The gemm weight kernel's copying calls (WeightsKernelDesc::stage): the
// tile it accumulates, the slots it copies, what it leaves alone, and that
// a plain call over the copied slices gives the same tile. Run on the
// kernel directly, for every tile shape the copies treat differently
// (m below, at and past a vector; oc tails) and every element form (f32,
// bf16 / f16 widened to f32, bf16 pairs of two images), on AVX-512 only.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <vector>

#include "jit/bwd_weights_kernel.hpp"
#include "jit/isa.hpp"
#include "ops/numeric.hpp"

namespace {

using convgrad::data_type;
using namespace convgrad::detail;

constexpr float kCanary = -1234.5f;

enum class Form { f32, widen_bf16, widen_f16, pairs };

struct Setup {
    Form form;
    int m, n, tail;
    // Two rows of the "user" tensors with a gap between them, pixel strides
    // wider than the tile (the tile reads channels [0, m) / [0, n*16)); for
    // pairs the partner image follows the first one.
    int64_t src_stride = 0, dst_stride = 0, src_image = 0, dst_image = 0;
    std::vector<float> src, dst;       // values, both images
    std::vector<uint16_t> src16, dst16;  // the same as bf16 / f16
    std::vector<WeightsRow> user_rows, slice_rows;
    int64_t pixels = 0;

    Setup(Form f, int m_, int n_, int tail_) : form(f), m(m_), n(n_), tail(tail_) {
        src_stride = m + 11;
        dst_stride = n * 16 + 7;
        const int64_t row_pixels[2] = {7, 5}, gap = 3;
        int64_t at = 0;
        for (int64_t len : row_pixels) {
            user_rows.push_back({at * src_stride * es(), at * dst_stride * es(), len});
            slice_rows.push_back({pixels * m * 4, pixels * n * 64, len});
            at += len + gap;
            pixels += len;
        }
        src_image = at * src_stride + 64;
        dst_image = at * dst_stride + 64;
        src.resize(static_cast<size_t>(2 * src_image));
        dst.resize(static_cast<size_t>(2 * dst_image));
        // Small integers: exact in every form and in every order of summation.
        for (size_t i = 0; i < src.size(); ++i) src[i] = float(int(i * 7 % 13) - 6);
        for (size_t i = 0; i < dst.size(); ++i) dst[i] = float(int(i * 5 % 11) - 5);
        for (float v : src) src16.push_back(f == Form::widen_f16 ? f32_to_f16(v) : f32_to_bf16(v));
        for (float v : dst) dst16.push_back(f == Form::widen_f16 ? f32_to_f16(v) : f32_to_bf16(v));
    }
    int64_t es() const { return form == Form::f32 ? 4 : 2; }
    int images() const { return form == Form::pairs ? 2 : 1; }
    const void* user_src() const { return form == Form::f32 ? static_cast<const void*>(src.data()) : src16.data(); }
    const void* user_dst() const { return form == Form::f32 ? static_cast<const void*>(dst.data()) : dst16.data(); }
    int live_lanes(int v) const { return (v == n - 1 && tail) ? tail : 16; }
    // Element e (channel c of pixel p of row r) as the kernel's 32-bit element.
    uint32_t element(const std::vector<float>& t, const std::vector<uint16_t>& t16, int64_t image, int64_t e) const {
        if (form == Form::f32) return f32_to_bits(t[e]);
        if (form == Form::pairs) return t16[e] | uint32_t(t16[image + e]) << 16;
        return f32_to_bits(t[e]);  // widened: exact
    }
    uint32_t src_el(const WeightsRow& r, int64_t p, int i) const {
        return element(src, src16, src_image, r.src_offset / es() + p * src_stride + i);
    }
    uint32_t dst_el(const WeightsRow& r, int64_t p, int v, int l) const {
        if (l >= live_lanes(v)) return 0;
        return element(dst, dst16, dst_image, r.dst_offset / es() + p * dst_stride + v * 16 + l);
    }
    // The tile the kernel must produce, [ic][oc lane].
    std::vector<float> expected() const {
        std::vector<float> w(static_cast<size_t>(m * n * 16), 0.f);
        for (const WeightsRow& r : user_rows)
            for (int64_t p = 0; p < r.pixels; ++p)
                for (int img = 0; img < images(); ++img)
                    for (int i = 0; i < m; ++i)
                        for (int v = 0; v < n; ++v)
                            for (int l = 0; l < live_lanes(v); ++l) {
                                const int64_t s = img * src_image + r.src_offset / es() + p * src_stride + i;
                                const int64_t d = img * dst_image + r.dst_offset / es() + p * dst_stride + v * 16 + l;
                                w[(i * n + v) * 16 + l] += src[s] * dst[d];
                            }
        return w;
    }
};

WeightsKernelDesc gemm_desc(const Setup& s, int stage) {
    WeightsKernelDesc d{};
    d.isa = static_cast<uint8_t>(s.form == Form::pairs ? Isa::avx512_core_bf16 : Isa::avx512_core);
    d.kind = static_cast<uint8_t>(WeightsKernelKind::gemm);
    d.m = static_cast<uint8_t>(s.m);
    d.n = static_cast<uint8_t>(s.n);
    d.tail = static_cast<uint8_t>(s.tail);
    d.dot = s.form == Form::pairs;
    const data_type user = s.form == Form::f32 ? data_type::f32 : s.form == Form::widen_f16 ? data_type::f16
                                                                                          : data_type::bf16;
    d.in_dt = static_cast<uint8_t>(stage ? user : data_type::f32);
    d.kh = 1;
    d.stage = static_cast<uint8_t>(stage);
    return d;
}

// Runs one call; lanes of the tile past the oc tail keep kCanary.
std::vector<float> run(const WeightsKernelDesc& d, const Setup& s, const std::vector<WeightsRow>& rows,
                       const void* src, int64_t src_step, const void* dst, int64_t dst_step, float* src_slice,
                       float* dst_slice) {
    bool hit = false;
    const auto k = get_weights_kernel(d, &hit);
    std::vector<float> w(static_cast<size_t>(s.m * s.n * 16), kCanary);
    WeightsKernelArgs a;
    a.src = static_cast<const float*>(src);
    a.diff_dst = static_cast<const float*>(dst);
    a.diff_weights = w.data();
    a.rows = rows.data();
    a.nrows = static_cast<int64_t>(rows.size());
    a.src_step = src_step;
    a.dst_step = dst_step;
    a.wei_row_stride = s.n * 64;
    a.prefetch = static_cast<const char*>(dst);
    a.src_stage = src_slice;
    a.dst_stage = dst_slice;
    a.src_stage_step = s.m * 4;
    a.dst_stage_step = s.n * 64;
    a.src_pair = s.src_image * s.es();
    a.dst_pair = s.dst_image * s.es();
    k->run(a);
    return w;
}

bool tile_equal(const Setup& s, const std::vector<float>& got, const std::vector<float>& want) {
    for (int i = 0; i < s.m; ++i)
        for (int v = 0; v < s.n; ++v)
            for (int l = 0; l < 16; ++l) {
                const size_t e = static_cast<size_t>((i * s.n + v) * 16 + l);
                const float expect = l < s.live_lanes(v) ? want[e] : kCanary;
                if (std::memcmp(&got[e], &expect, 4) != 0) return false;
            }
    return true;
}

}  // namespace

TEST_CASE("weights kernel: copying calls fill tile-major slices", "[jit][weights]") {
    if (cpu_isa() < Isa::avx512_core) {
        WARN("no AVX-512: copying calls are not used");
        return;
    }
    struct Shape {
        int m, n, tail;
    };
    // m: below a ymm, a ymm, a masked zmm, a zmm, past one (xmm / ymm / zmm rest).
    const Shape shapes[] = {{1, 2, 0}, {5, 3, 0}, {6, 4, 0}, {8, 2, 5}, {13, 2, 0}, {16, 1, 0},
                            {17, 1, 3}, {20, 1, 0}, {24, 1, 9}, {29, 1, 0}};
    for (Form form : {Form::f32, Form::widen_bf16, Form::widen_f16, Form::pairs}) {
        if (form == Form::pairs && cpu_isa() < Isa::avx512_core_bf16) continue;
        for (const Shape& sh : shapes) {
            for (int stage : {int(kCopySrc), int(kCopyDst), kCopySrc | kCopyDst}) {
                const Setup s(form, sh.m, sh.n, sh.tail);
                INFO("form " << int(form) << " m " << sh.m << " n " << sh.n << " tail " << sh.tail << " stage "
                             << stage);
                // Slices with canaries: one vector of slack after the last slot
                // may be written, nothing past it.
                const int64_t src_slots = s.pixels * s.m, dst_slots = s.pixels * s.n * 16;
                std::vector<float> src_slice(static_cast<size_t>(src_slots + 32), kCanary);
                std::vector<float> dst_slice(static_cast<size_t>(dst_slots + 32), kCanary);
                auto slot_bits = [](std::vector<float>& v, int64_t e) -> uint32_t& {
                    return *reinterpret_cast<uint32_t*>(&v[static_cast<size_t>(e)]);
                };
                const bool copy_src = stage & kCopySrc, copy_dst = stage & kCopyDst;
                // Operands this call does not copy are read from slices filled beforehand.
                for (size_t j = 0; j < s.user_rows.size(); ++j) {
                    const WeightsRow& r = s.user_rows[j];
                    const int64_t slot0 = s.slice_rows[j].src_offset / (s.m * 4);
                    for (int64_t p = 0; p < r.pixels; ++p) {
                        for (int i = 0; i < s.m && !copy_src; ++i)
                            slot_bits(src_slice, (slot0 + p) * s.m + i) = s.src_el(r, p, i);
                        for (int v = 0; v < s.n && !copy_dst; ++v)
                            for (int l = 0; l < 16; ++l)
                                slot_bits(dst_slice, ((slot0 + p) * s.n + v) * 16 + l) = s.dst_el(r, p, v, l);
                    }
                }
                std::vector<WeightsRow> rows;
                for (size_t j = 0; j < s.user_rows.size(); ++j)
                    rows.push_back({copy_src ? s.user_rows[j].src_offset : s.slice_rows[j].src_offset,
                                    copy_dst ? s.user_rows[j].dst_offset : s.slice_rows[j].dst_offset,
                                    s.user_rows[j].pixels});
                const std::vector<float> want = s.expected();
                const std::vector<float> got =
                        run(gemm_desc(s, stage), s, rows, copy_src ? s.user_src() : src_slice.data(),
                            copy_src ? s.src_stride * s.es() : s.m * 4, copy_dst ? s.user_dst() : dst_slice.data(),
                            copy_dst ? s.dst_stride * s.es() : s.n * 64, copy_src ? src_slice.data() : nullptr,
                            copy_dst ? dst_slice.data() : nullptr);
                CHECK(tile_equal(s, got, want));
                // The copies: every slot holds its pixel as 32-bit elements (src:
                // m channels; diff_dst: n vectors, dead tail lanes 0); the
                // slack's second vector is untouched.
                int64_t slot = 0;
                bool slots_ok = true;
                for (const WeightsRow& r : s.user_rows)
                    for (int64_t p = 0; p < r.pixels; ++p, ++slot) {
                        for (int i = 0; i < s.m; ++i)
                            slots_ok &= slot_bits(src_slice, slot * s.m + i) == s.src_el(r, p, i);
                        for (int v = 0; v < s.n; ++v)
                            for (int l = 0; l < 16; ++l)
                                slots_ok &= slot_bits(dst_slice, (slot * s.n + v) * 16 + l) == s.dst_el(r, p, v, l);
                    }
                CHECK(slots_ok);
                for (int64_t e = src_slots + 16; e < src_slots + 32; ++e) CHECK(src_slice[e] == kCanary);
                for (int64_t e = dst_slots + 16; e < dst_slots + 32; ++e) CHECK(dst_slice[e] == kCanary);
                // A plain call over the filled slices: the same tile.
                const std::vector<float> again = run(gemm_desc(s, 0), s, s.slice_rows, src_slice.data(), s.m * 4,
                                                     dst_slice.data(), s.n * 64, nullptr, nullptr);
                CHECK(tile_equal(s, again, want));
            }
        }
    }
}
