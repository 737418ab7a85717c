// The depthwise weight kernel on whole rows (WeightsKernelDesc::row_px),
// called directly: every W stride, edge shape and kernel-row mask the
// generator handles, whether or not the planner picks it for a layer, is
// checked against a scalar sum (small integers: exact in every type).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "jit/bwd_weights_kernel.hpp"
#include "jit/isa.hpp"
#include "ops/numeric.hpp"

namespace {

using namespace convgrad::detail;
using convgrad::data_type;

struct RowGeometry {
    int ch, ih, iw, kh, kw, sh, sw, dh, ph, pw, pw_end;
    int oh() const { return (ih + 2 * ph - (dh * (kh - 1) + 1)) / sh + 1; }
    int ow() const { return (iw + pw + pw_end - kw) / sw + 1; }
};

// Element i of a small-integer tensor (exact in bf16 and f16 too).
float small_int(int64_t i, int salt) { return static_cast<float>((i * 7 + salt * 3) % 11 - 5); }

std::vector<uint8_t> encode(const std::vector<float>& v, data_type dt) {
    const size_t es = dt == data_type::f32 ? 4 : 2;
    std::vector<uint8_t> out(v.size() * es + 64);  // a vector of slack past the end
    for (size_t i = 0; i < v.size(); ++i) {
        if (dt == data_type::f32) {
            std::memcpy(&out[i * 4], &v[i], 4);
        } else {
            const uint16_t h = dt == data_type::bf16 ? f32_to_bf16(v[i]) : f32_to_f16(v[i]);
            std::memcpy(&out[i * 2], &h, 2);
        }
    }
    return out;
}

// Runs one call over every output row of one image; returns diff_weights
// [kh][kw][ch], or nothing when the tile does not fit the ISA's registers.
// block > 1: row blocks (WeightsKernelDesc::row_block) of `block` output
// rows an entry (H dilation 1, block dividing the output height).
std::vector<float> run_rows(const RowGeometry& g, Isa isa, data_type dt, int vlen, bool* fits, int block = 1) {
    const int n = (g.ch + vlen - 1) / vlen, es = dt == data_type::f32 ? 4 : 2;
    WeightsKernelDesc d{};
    d.isa = static_cast<uint8_t>(isa);
    d.kind = static_cast<uint8_t>(WeightsKernelKind::depthwise);
    d.m = static_cast<uint8_t>(g.kw);
    d.n = static_cast<uint8_t>(n);
    d.tail = static_cast<uint8_t>(g.ch % vlen);
    d.in_dt = static_cast<uint8_t>(dt);
    d.kh = static_cast<uint8_t>(g.kh);
    d.w_stride = static_cast<uint8_t>(g.sw);
    d.row_px = static_cast<uint8_t>(g.ow());
    d.row_lo = static_cast<uint8_t>(g.pw);
    d.row_cut = static_cast<uint8_t>(std::max(0, g.sw * (g.ow() - 1) + g.kw - (g.iw + g.pw)));
    d.tap_disp = g.ch * es;
    d.row_disp = g.kh > 1 ? g.dh * g.iw * g.ch * es : 0;
    d.pf_lines = 1;
    d.edges = 1;
    const int src_rows = g.sh * (block - 1) + g.kh;  // a block's
    if (block > 1) {
        d.row_block = static_cast<uint8_t>(block);
        d.h_stride = static_cast<uint8_t>(g.sh);
        d.row_disp = g.iw * g.ch * es;
        d.dst_row_disp = g.ow() * g.ch * es;
    }
    *fits = weights_kernel_vregs(d) <= (isa >= Isa::avx512_core ? 32 : 16);
    if (!*fits) return {};
    std::vector<float> src(static_cast<size_t>(g.ih * g.iw * g.ch)), dst(static_cast<size_t>(g.oh() * g.ow() * g.ch));
    for (size_t i = 0; i < src.size(); ++i) src[i] = small_int(static_cast<int64_t>(i), 1);
    for (size_t i = 0; i < dst.size(); ++i) dst[i] = small_int(static_cast<int64_t>(i), 2);
    const std::vector<uint8_t> src_bytes = encode(src, dt), dst_bytes = encode(dst, dt);
    std::vector<WeightsRow> rows;
    for (int oh = 0; oh < g.oh() && block > 1; oh += block) {  // bit i: the block's src row i is inside
        const int ih0 = oh * g.sh - g.ph;
        uint64_t mask = 0;
        for (int i = 0; i < src_rows; ++i)
            if (ih0 + i >= 0 && ih0 + i < g.ih) mask |= uint64_t(1) << i;
        if (!mask) continue;
        rows.push_back(
                {(int64_t(ih0) * g.iw - g.pw) * g.ch * es, int64_t(oh) * g.ow() * g.ch * es, block * g.ow(), mask});
    }
    for (int oh = 0; oh < g.oh() && block == 1; ++oh) {
        const int ih0 = oh * g.sh - g.ph;
        uint64_t mask = 0;
        for (int i = 0; i < g.kh; ++i) {
            const int ih = ih0 + i * g.dh;
            if (ih >= 0 && ih < g.ih) mask |= ((uint64_t(1) << g.kw) - 1) << (i * g.kw);
        }
        if (!mask) continue;
        rows.push_back({(int64_t(ih0) * g.iw - g.pw) * g.ch * es, int64_t(oh) * g.ow() * g.ch * es, g.ow(), mask});
    }
    bool hit = false;
    const auto k = get_weights_kernel(d, &hit);
    std::vector<float> w(static_cast<size_t>(g.kh * g.kw * g.ch), -1e9f);
    const PrefetchWalk walk{reinterpret_cast<const char*>(dst_bytes.data()), 0, int64_t(1) << 40};
    WeightsKernelArgs a;
    a.src = reinterpret_cast<const float*>(src_bytes.data());
    a.diff_dst = reinterpret_cast<const float*>(dst_bytes.data());
    a.diff_weights = w.data();
    a.rows = rows.data();
    a.nrows = static_cast<int64_t>(rows.size());
    a.src_step = g.sw * g.ch * es;
    a.dst_step = g.ch * es;
    a.wei_row_stride = g.ch * 4;
    a.wei_kh_stride = g.kw * g.ch * 4;
    a.prefetch_walks = &walk;
    k->run(a);
    return w;
}

std::vector<float> expected(const RowGeometry& g) {
    std::vector<float> w(static_cast<size_t>(g.kh * g.kw * g.ch), 0.0f);
    for (int i = 0; i < g.kh; ++i)
        for (int k = 0; k < g.kw; ++k)
            for (int c = 0; c < g.ch; ++c) {
                double sum = 0;
                for (int oh = 0; oh < g.oh(); ++oh)
                    for (int u = 0; u < g.ow(); ++u) {
                        const int ih = oh * g.sh - g.ph + i * g.dh, iw = u * g.sw - g.pw + k;
                        if (ih < 0 || ih >= g.ih || iw < 0 || iw >= g.iw) continue;
                        sum += double(small_int((int64_t(ih) * g.iw + iw) * g.ch + c, 1)) *
                               small_int((int64_t(oh) * g.ow() + u) * g.ch + c, 2);
                    }
                w[static_cast<size_t>((i * g.kw + k) * g.ch + c)] = static_cast<float>(sum);
            }
    return w;
}

}  // namespace

TEST_CASE("weights kernel: depthwise whole rows against a scalar sum", "[jit][weights]") {
    // {ch, ih, iw, kh, kw, sh, sw, dh, ph, pw, pw_end}
    const RowGeometry geometries[] = {
            {17, 7, 7, 3, 3, 1, 1, 1, 1, 1, 1},    // 3x3 pad 1: first and last pixels lose a tap
            {31, 14, 14, 3, 3, 2, 2, 1, 1, 1, 1},  // stride 2, even width: the right pad is never read
            {16, 6, 15, 3, 3, 2, 2, 1, 1, 1, 1},   // stride 2, odd width: both pads read
            {13, 9, 11, 3, 5, 1, 1, 2, 2, 4, 0},   // one-sided W pad, H dilation
            {16, 6, 5, 3, 3, 1, 1, 1, 1, 3, 3},    // W pads of 3: pixels that read only padding
            {24, 3, 23, 1, 7, 1, 3, 1, 0, 2, 5},   // stride 3, 1x7
            {8, 4, 20, 1, 5, 1, 2, 1, 0, 0, 0},    // unpadded
            {16, 3, 64, 3, 3, 1, 1, 1, 1, 1, 1},   // 64-pixel rows
            {5, 2, 1, 1, 3, 1, 1, 1, 0, 1, 1},     // one src column, 5 channels (a tail only)
            {16, 5, 9, 3, 1, 1, 4, 1, 1, 0, 0},    // one tap, stride 4
            // Rows of 32 pixels or more loop over their interior columns:
            {16, 3, 40, 3, 5, 1, 1, 1, 1, 2, 2},   // 5 taps, pads 2
            {8, 2, 37, 1, 7, 1, 1, 1, 0, 3, 1},    // 7 taps, uneven pads: 34 pixels
            {16, 3, 34, 3, 3, 1, 1, 1, 1, 0, 0},   // unpadded, 32 pixels
            {16, 2, 34, 1, 1, 1, 1, 1, 0, 0, 0},   // one tap: a period of one column
            {9, 2, 40, 2, 3, 1, 1, 1, 0, 3, 3},    // W pads of 3, a tail
    };
    std::vector<std::pair<Isa, int>> isas;  // ISA, vector length
    if (cpu_isa() >= Isa::avx512_core) isas.push_back({Isa::avx512_core, 16});
    if (cpu_isa() >= Isa::avx2) isas.push_back({Isa::avx2, 8});
    int ran = 0;
    for (const RowGeometry& g : geometries)
        for (const auto& [isa, vlen] : isas)
            for (data_type dt : {data_type::f32, data_type::bf16, data_type::f16}) {
                INFO("ch " << g.ch << " in " << g.ih << "x" << g.iw << " k " << g.kh << "x" << g.kw << " s " << g.sh
                           << "x" << g.sw << " W pads " << g.pw << "/" << g.pw_end << " isa " << isa_name(isa)
                           << " " << convgrad::dtype_name(dt));
                bool fits = false;
                const std::vector<float> got = run_rows(g, isa, dt, vlen, &fits);
                if (isa >= Isa::avx512_core) REQUIRE(fits);  // AVX2 fits the smaller tiles only
                if (!fits) continue;
                ++ran;
                CHECK(got == expected(g));
            }
    // Every AVX-512 case; on AVX2, five geometries' tiles fit 16 registers.
    CHECK(ran == 15 + (cpu_isa() >= Isa::avx512_core ? 45 : 0));
}

TEST_CASE("weights kernel: depthwise row blocks against a scalar sum", "[jit][weights]") {
    // {ch, ih, iw, kh, kw, sh, sw, dh, ph, pw, pw_end}, output rows per block
    const std::pair<RowGeometry, int> cases[] = {
            {{17, 7, 7, 3, 3, 1, 1, 1, 1, 1, 1}, 7},    // the whole 7x7 plane in one block, both H edges
            {{16, 14, 14, 3, 3, 1, 1, 1, 1, 1, 1}, 7},  // two blocks: top and bottom edge
            {{33, 12, 9, 3, 3, 1, 1, 1, 1, 1, 1}, 3},   // interior blocks (ungated) between edge ones, a tail
            {{16, 8, 8, 3, 3, 1, 1, 1, 0, 0, 0}, 2},    // unpadded: no edges
            {{16, 13, 10, 3, 3, 2, 2, 1, 1, 1, 1}, 7},  // H and W stride 2, odd height: the last src row unread
            {{8, 10, 12, 3, 5, 1, 1, 1, 2, 2, 2}, 3},   // 3x5, pads of 2: a block row with no src row
            {{16, 10, 6, 1, 3, 1, 1, 1, 0, 1, 1}, 5},   // one kernel row
            {{16, 6, 5, 3, 3, 3, 1, 1, 1, 3, 3}, 2},    // H stride = kernel height: no src row shared
            {{16, 11, 7, 2, 3, 3, 1, 1, 0, 1, 1}, 2},   // H stride 3 over 2 kernel rows: a src row no block row reads
            {{16, 6, 40, 3, 3, 1, 1, 1, 1, 1, 1}, 2},   // 40-pixel rows: the interior columns a loop
            {{8, 6, 36, 3, 5, 1, 1, 1, 1, 2, 2}, 3},    // 5 taps, 36 pixels, top and bottom blocks
    };
    std::vector<std::pair<Isa, int>> isas;  // ISA, vector length
    if (cpu_isa() >= Isa::avx512_core) isas.push_back({Isa::avx512_core, 16});
    if (cpu_isa() >= Isa::avx2) isas.push_back({Isa::avx2, 8});
    int ran = 0;
    for (const auto& [g, block] : cases)
        for (const auto& [isa, vlen] : isas)
            for (data_type dt : {data_type::f32, data_type::bf16, data_type::f16}) {
                INFO("ch " << g.ch << " in " << g.ih << "x" << g.iw << " k " << g.kh << "x" << g.kw << " s " << g.sh
                           << "x" << g.sw << " block " << block << " isa " << isa_name(isa) << " "
                           << convgrad::dtype_name(dt));
                REQUIRE(g.oh() % block == 0);
                // A vector of channels: the tile of each of the block's rows fits.
                const RowGeometry one{std::min(g.ch, vlen), g.ih, g.iw, g.kh, g.kw, g.sh, g.sw,
                                      g.dh, g.ph, g.pw, g.pw_end};
                for (const RowGeometry& t : {one, g}) {
                    bool fits = false;
                    const std::vector<float> got = run_rows(t, isa, dt, vlen, &fits, block);
                    if (isa >= Isa::avx512_core && t.ch <= vlen) REQUIRE(fits);
                    if (!fits) continue;
                    ++ran;
                    CHECK(got == expected(t));
                }
            }
    // AVX-512: every case on one vector (and some on all); AVX2 where 16 registers hold the tile.
    CHECK(ran >= (cpu_isa() >= Isa::avx512_core ? 11 * 3 : 0));
}
