// Weight-gradient planner: golden plan text and properties (register
// budget, exact coverage of the weights, reduction and thread grid).
#include <catch2/catch.hpp>

#include <climits>
#include <set>

#include "ops/executor.hpp"
#include "ops/plan_weights.hpp"
#include "weights_case.hpp"

using convgrad::data_type;
using convgrad::dims;
using convgrad::detail::Isa;
using convgrad::detail::Problem;
using convgrad::detail::WeightsKernelKind;
using convgrad::detail::WeightsPlan;
using wtest::Case;

namespace {

Problem problem(const Case& c) {
    return convgrad::detail::make_problem(c.kind(), c.dt, c.attrs(), c.input0(),
                                          c.input1(), nullptr);
}

Case resnet(int64_t ic, int64_t oc, int64_t sp, int64_t k, int64_t s = 1) {
    Case c;
    c.mb = 32;
    c.ic = ic;
    c.oc = oc;
    c.in = {sp, sp};
    c.k = {k, k};
    c.s = {s, s};
    const int64_t pad = k / 2;
    c.pb = {pad, pad};
    c.pe = {pad - (s > 1 ? 1 : 0), pad - (s > 1 ? 1 : 0)};
    if (k == 1) c.pe = {0, 0};
    return c;
}

// A ResNet-style square depthwise layer of ch channels at minibatch mb.
Case resnet_dw(int64_t ch, int64_t sp, int64_t k, int64_t mb, int64_t s = 1) {
    Case c = resnet(ch, ch, sp, k, s);
    c.g = ch;
    c.mb = mb;
    return c;
}

Case depthwise(int64_t ch, dims in, dims k) {
    Case c;
    c.mb = 4;
    c.g = c.ic = c.oc = ch;
    c.in = std::move(in);
    c.k = std::move(k);
    return c;
}

std::vector<Case> property_cases() {
    std::vector<Case> r = {resnet(64, 64, 56, 3), resnet(256, 64, 56, 1), resnet(3, 64, 224, 7, 2),
                           resnet(512, 512, 7, 3), resnet(17, 33, 9, 3), resnet(1024, 2048, 14, 1, 2)};
    r.push_back(depthwise(32, {112, 112}, {3, 3}));
    r.push_back(depthwise(33, {20}, {11}));
    r.push_back(depthwise(40, {5, 6, 7}, {3, 3, 3}));
    r.push_back(resnet_dw(144, 56, 3, 32));  // bf16 from DRAM on short rows: widened, whole rows
    Case grouped = resnet(48, 96, 10, 3);
    grouped.g = 3;
    r.push_back(grouped);
    for (int64_t gs : {2, 4, 8}) {  // lane groups, ResNeXt-like
        Case lg = resnet(32 * gs, 32 * gs, 28, 3);
        lg.g = 32;
        r.push_back(lg);
    }
    Case tiny = resnet(2, 3, 5, 1);
    tiny.mb = 1;
    r.push_back(tiny);
    // kw windows: 16-channel groups (ResNeXt conv4), 5 wide with an
    // asymmetric pad, 8 channels a group, one group of 16 output channels.
    Case g16 = resnet(512, 512, 14, 3);
    g16.g = 32;
    r.push_back(g16);
    Case k5 = resnet(40, 40, 11, 5);
    k5.g = 5;
    k5.pb = {2, 3};
    k5.pe = {2, 1};
    r.push_back(k5);
    Case g8 = resnet(440, 440, 7, 3);
    g8.g = 55;
    r.push_back(g8);
    r.push_back(resnet(24, 16, 9, 3));
    Case s2 = resnet(512, 512, 28, 3, 2);  // ResNeXt-50 conv4 s2: W phases
    s2.g = 32;
    r.push_back(s2);
    Case s3 = resnet(30, 24, 20, 5, 3);
    s3.g = 3;
    s3.pb = {2, 1};
    r.push_back(s3);
    for (int64_t groups : {26, 55}) {  // 8 channels a group under a stride: group pairs (RegNetY-400MF)
        Case y = resnet(8 * groups, 8 * groups, 28, 3, 2);
        y.g = groups;
        r.push_back(y);
    }
    Case y5 = resnet(64, 64, 20, 5, 2);  // 5 taps: tiles of 5 channels, no pairs
    y5.g = 8;
    r.push_back(y5);
    return r;
}

// Intervals [first, first + size) of the tiles along one axis cover [0, total) exactly once.
void check_axis(int64_t total, int64_t tiles, int64_t size, int64_t last, int64_t unit) {
    REQUIRE(tiles >= 1);
    REQUIRE(size >= 1);
    REQUIRE(last >= 1);
    REQUIRE(last <= size);
    // Each element index is hit by exactly one tile.
    std::vector<int> hits(static_cast<size_t>(total), 0);
    for (int64_t t = 0; t < tiles; ++t) {
        const int64_t len = (t == tiles - 1 ? last : size) * unit;
        for (int64_t e = t * size * unit; e < std::min(total, t * size * unit + len); ++e) ++hits[e];
    }
    for (int h : hits) REQUIRE(h == 1);
}

}  // namespace

TEST_CASE("weights plan: golden text", "[jit][weights][plan]") {
    const Problem a = problem(resnet(64, 64, 56, 3));
    CHECK(plan_weights(a, Isa::avx512_core, 2).to_string() ==
          "gemm staged m13n2x16 tiles=90 (ic 5x13 last 12, oc 2x2v last 2v tail 0) rows=1792x56px chunk=18 rows "
          "(100 chunks, 1008 KiB) slices=2 grid=1x2 direct est=1161cyc/px\n"
          "  parallel slice<2 (2 thr) x tile<90 (1 thr):\n"
          "    for chunk in slice (18 rows):\n"
          "      for g<1 oc_tile<2 kd<1 kh<3 kw<3 ic_tile<5 (one call):\n"
          "        for row, px: acc[13 ic][2v] += bcast(src[px+tap][ic]) * diff_dst[px][oc]\n"
          "  sum slices in order");
    Case bf = resnet(64, 64, 56, 3);
    bf.dt = convgrad::data_type::bf16;
    CHECK(plan_weights(problem(bf), Isa::avx512_core_bf16, 2).to_string() ==
          "gemm bf16-pairs(diff_dst in registers) m13n2x16 tiles=90 (ic 5x13 last 12, oc 2x2v last 2v tail 0) "
          "rows=896x56px chunk=18 rows (50 chunks, 1008 KiB) slices=2 grid=1x2 direct est=1161cyc/px\n"
          "  parallel slice<2 (2 thr) x tile<90 (1 thr):\n"
          "    for chunk in slice (18 rows):\n"
          "      for g<1 oc_tile<2 kd<1 kh<3 kw<3 ic_tile<5 (one call):\n"
          "        for row, px: acc[13 ic][2v] += bcast(src[px+tap][ic]) * diff_dst[px][oc]\n"
          "  sum slices in order");
    const Problem c = problem(resnet(256, 64, 56, 1));
    CHECK(plan_weights(c, Isa::avx512_core, 2).to_string() ==
          "gemm m14n2x16 tiles=38 (ic 19x14 last 4, oc 2x2v last 2v tail 0) rows=608x170px merged chunk=1 rows "
          "(608 chunks, 213 KiB) slices=8 grid=1x2 direct est=534cyc/px\n"
          "  parallel slice<8 (2 thr) x tile<38 (1 thr):\n"
          "    for chunk in slice (1 rows):\n"
          "      for g<1 oc_tile<2 kd<1 kh<1 kw<1 ic_tile<19 (one call):\n"
          "        for row, px: acc[14 ic][2v] += bcast(src[px+tap][ic]) * diff_dst[px][oc]\n"
          "  sum slices in order");
    const Problem first = problem(resnet(3, 64, 224, 7, 2));  // AVX2: two-vector tiles (choose_blocking)
    CHECK(plan_weights(first, Isa::avx2, 2).to_string() ==
          "gemm m6n2x8 tiles=112 (kw.ic 4x6 last 3, oc 4x2v last 2v tail 0) rows=3584x112px chunk=9 rows "
          "(399 chunks, 417 KiB) slices=8 grid=1x2 fold-kw direct est=680cyc/px\n"
          "  parallel slice<8 (2 thr) x tile<112 (1 thr):\n"
          "    for chunk in slice (9 rows):\n"
          "      for g<1 oc_tile<4 kd<1 kh<7 kw.ic_tile<4:\n"
          "        for row, px: acc[6 kw.ic][2v] += bcast(src[px+tap][kw.ic]) (W edges: zero-padded copies)"
          " * diff_dst[px][oc]\n"
          "  sum slices in order");
    CHECK(plan_weights(first, Isa::avx512_core, 2).to_string() ==
          "gemm m11n2x16 tiles=28 (kw.ic 2x11 last 10, oc 2x2v last 2v tail 0) rows=3584x112px chunk=6 rows "
          "(598 chunks, 278 KiB) slices=8 grid=1x2 fold-kw direct est=298cyc/px\n"
          "  parallel slice<8 (2 thr) x tile<28 (1 thr):\n"
          "    for chunk in slice (6 rows):\n"
          "      for g<1 oc_tile<2 kd<1 kh<7 kw.ic_tile<2:\n"
          "        for row, px: acc[11 kw.ic][2v] += bcast(src[px+tap][kw.ic]) (W edges: zero-padded copies)"
          " * diff_dst[px][oc]\n"
          "  sum slices in order");
    Case vol = resnet(1, 16, 16, 3);  // a 3D U-Net's 1-channel input: every tap in one tile
    vol.mb = 2;
    vol.in = {16, 16, 16};
    vol.k = {3, 3, 3};
    vol.s = {1, 1, 1};
    vol.pb = vol.pe = {1, 1, 1};
    CHECK(plan_weights(problem(vol), Isa::avx512_core, 2).to_string() ==
          "gemm m27n1x16 tiles=1 (taps.ic 1x27 last 27, oc 1x1v last 1v tail 0) rows=512x16px chunk=16 rows "
          "(32 chunks, 19 KiB) slices=16 grid=1x2 fold-taps=3x3x3 prepad direct prefetch 2 lines/px "
          "est=14cyc/px\n"
          "  parallel slice<16 (2 thr) x tile<1 (1 thr):\n"
          "    for chunk in slice (16 rows):\n"
          "      for g<1 oc_tile<1 kd<1 kh<1 taps.ic_tile<1:\n"
          "        for row, px: acc[27 kd.kh.kw.ic][1v] += bcast(src[px+tap][kw.ic]) (src padded) * diff_dst[px][oc]\n"
          "  sum slices in order");
    CHECK(plan_weights(problem(vol), Isa::avx2, 2).to_string() ==  // AVX2: one depth tap a tile
          "gemm m9n1x8 tiles=6 (taps.ic 1x9 last 9, oc 2x1v last 1v tail 0) rows=512x16px chunk=16 rows "
          "(32 chunks, 19 KiB) slices=8 grid=1x2 fold-taps=1x3x3 prepad direct est=37cyc/px\n"
          "  parallel slice<8 (2 thr) x tile<6 (1 thr):\n"
          "    for chunk in slice (16 rows):\n"
          "      for g<1 oc_tile<2 kd<3 kh<1 taps.ic_tile<1:\n"
          "        for row, px: acc[9 kh.kw.ic][1v] += bcast(src[px+tap][kw.ic]) (src padded) * diff_dst[px][oc]\n"
          "  sum slices in order");
    Case g16 = resnet(512, 512, 14, 3);  // ResNeXt-50 conv4: 16 channels a group, read in place
    g16.g = 32;
    CHECK(plan_weights(problem(g16), Isa::avx512_core, 2).to_string() ==
          "gemm m8n1x16 tiles=192 (ic 2x8 last 8, oc 1x1v last 1v tail 0) rows=448x14px chunk=18 rows "
          "(25 chunks, 2016 KiB) slices=1 grid=2x1 kw-window direct prefetch next group est=2304cyc/px\n"
          "  parallel slice<1 (1 thr) x tile<192 (2 thr):\n"
          "    for chunk in slice (18 rows):\n"
          "      for g<32 oc_tile<1 kd<1 kh<3 ic_tile<2:\n"
          "        for row, src px q: acc[3 kw][8 ic][1v] += bcast(src[q][ic]) * diff_dst[q+pad-kw][oc] (q<14, edges "
          "1+1 px)\n"
          "  no reduction");
    Case g16s2 = resnet(512, 512, 28, 3, 2);  // its strided first block: kw lanes
    g16s2.g = 32;
    CHECK(plan_weights(problem(g16s2), Isa::avx512_core, 2).to_string() ==
          "gemm m8n1x16 tiles=192 (oc 2x8 last 8, ic 1x1v last 1v tail 0) rows=448x14px chunk=14 rows "
          "(32 chunks, 2744 KiB) slices=8 grid=1x2 kw-lanes direct prefetch next group est=2304cyc/px\n"
          "  parallel slice<8 (2 thr) x tile<192 (1 thr):\n"
          "    for chunk in slice (14 rows):\n"
          "      for g<32 kd<1 kh<3 oc_tile<2:\n"
          "        for row, output px t (14 from 0, edges 1+0): acc[3 kw][8 oc][1v ic] += bcast(diff_dst[t][oc]) * "
          "src[s*t - pad + kw][ic]\n"
          "  sum slices in order");
    Case head = resnet(64, 1, 128, 3);  // a head into one map: kw lanes over 4 vectors of input channels
    head.mb = 8;
    CHECK(plan_weights(problem(head), Isa::avx512_core, 2).to_string() ==
          "gemm staged m1n1x16 tiles=12 (oc 1x1 last 1, ic 4x1v last 1v tail 0) rows=1024x128px chunk=16 rows "
          "(64 chunks, 1544 KiB) slices=8 grid=1x2 kw-lanes direct est=48cyc/px\n"
          "  parallel slice<8 (2 thr) x tile<12 (1 thr):\n"
          "    for chunk in slice (16 rows):\n"
          "      for g<1 ic_tile<4 kd<1 kh<3 oc_tile<1:\n"
          "        for row, output px t (128 from 0, edges 1+1): acc[3 kw][1 oc][1v ic] += bcast(diff_dst[t][oc]) * "
          "src[s*t - pad + kw][ic]\n"
          "  sum slices in order");
    Case dwc = depthwise(32, {112, 112}, {3, 3});
    dwc.mb = 32;
    dwc.pb = dwc.pe = {1, 1};
    dwc.wfmt = "OIX";
    CHECK(plan_weights(problem(dwc), Isa::avx512_core, 2).to_string() ==
          "depthwise m3n2x16 tiles=1 (kw 1x3 last 3, ch 1x2v last 2v tail 0) rows=3584x112px chunk=9 rows "
          "(399 chunks, 504 KiB) slices=16 grid=1x2 permute prefetch 6 lines/px est=18cyc/px\n"
          "  parallel slice<16 (2 thr) x tile<1 (1 thr):\n"
          "    for chunk in slice (9 rows):\n"
          "      for kd<1 kh_tile<1 kw_tile<1 ch_tile<1:\n"
          "        for row, px: acc[3x3 taps][2v] += src[px+tap][ch] * diff_dst[px][ch]\n"
          "  sum slices in order, permute XIO -> user layout");
}

TEST_CASE("weights plan: properties", "[jit][weights][plan]") {
    for (Case c : property_cases()) {
      for (convgrad::data_type dt : {convgrad::data_type::f32, convgrad::data_type::bf16, convgrad::data_type::f16}) {
        c.dt = dt;
        const Problem p = problem(c);
        for (Isa isa : {Isa::avx2, Isa::avx512_core, Isa::avx512_core_bf16}) {
            const WeightsPlan base = plan_weights(p, isa, 1);
            const auto& b = base.blk;
            const bool dw = b.kind == WeightsKernelKind::depthwise;
            INFO(p.to_string() << " " << convgrad::detail::isa_name(isa) << "\n" << base.to_string());
            // Lane groups of 2 and 4; of 8 only narrower than a vector, without
            // bf16 pairs, on output rows of 14 pixels or more.
            const bool bf16_dot = dt == convgrad::data_type::bf16 && isa >= Isa::avx512_core_bf16;
            const bool wide8 = isa != Isa::avx2 && !bf16_dot && p.out[2] >= 14;
            // Groups of 8 on AVX-512 at any W stride (kernels of 2 or 3 taps,
            // the kw lanes edges) pair groups in the gemm kernel instead (bf16
            // on avx512_core_bf16 too, its image pairs in kw lanes).
            const bool pair8 = isa != Isa::avx2 && p.icg == 8 && p.ocg == 8 && p.g > 1 &&
                               p.dil[2] == 1 && p.k[2] >= 2 && p.k[2] <= 3;
            const bool lanes = p.icg == p.ocg && (p.icg == 1 || p.icg == 2 || p.icg == 4 || (p.icg == 8 && wide8));
            CHECK(dw == (p.g > 1 && lanes && !pair8));
            CHECK(b.lane_group == (dw ? p.icg : 1));
            // Register budget of every kernel the executor may build.
            const int budget = isa == Isa::avx2 ? 16 : 32;
            // (pair_dst: variant kDstInRegs pairs diff_dst in registers.)
            for (int m : {b.m, b.m_last, 1})
                for (int n : {b.n, b.n_last})
                    for (int kh : {b.kh, 1})
                        for (int variant = 0;
                             variant <= (base.pair_dst ? WeightsPlan::kDstInRegs : 0); ++variant)
                            CHECK(weights_kernel_vregs(base.desc(m, n, b.tail, 0, kh, 0, variant)) <= budget);
            if (dw) CHECK(base.desc(b.m, b.n, b.tail, 0, b.kh).m == b.m * b.lane_group);  // rows (tap, ic)
            // Prefetch distance: staged gemm one line a pixel, depthwise 2-16
            // (its calls read a few lines of each pixel; streamed passes
            // none, they prefetch their own rows ahead; none either on data
            // that stays cached), gemm on the user's tensors 1-16 (likewise),
            // carried by every kernel.
            const double data_bytes = double(p.activation_elems() * int64_t(convgrad::detail::dtype_size(p.dt)));
            const bool cached = data_bytes <= convgrad::detail::kDwPrefetchBytes;
            if (base.dw_stream) CHECK(base.pf_lines == 0);
            else if (dw && cached) CHECK(base.pf_lines == 0);
            else if (dw) CHECK((base.pf_lines >= 2 && base.pf_lines <= 16));
            else if (base.staged) CHECK(base.pf_lines == 1);
            else CHECK((base.pf_lines >= 1 && base.pf_lines <= 16));
            CHECK(base.desc(b.m, b.n, b.tail, 0, b.kh).pf_lines == base.pf_lines);
            // Exact cover: rows of the tile (ic or kw taps) and its vectors.
            const int64_t channels = dw ? p.ic() : p.ocg;
            // kw folded into the rows: f32 in place, one group, no W dilation, few channels.
            CHECK((base.fold_kw == 1 || base.fold_kw == p.k[2]));
            if (base.fold_kw > 1) {
                CHECK(!dw);
                CHECK(base.staged == (dt != convgrad::data_type::f32));
                CHECK(p.g == 1);
                CHECK(p.dil[2] == 1);
                CHECK(p.icg < 16);
            }
            if (base.prepad) CHECK(dw);  // only depthwise pre-pads
            // kw windows: gemm tiles of a W phase's taps and one vector of
            // output channels, W stride up to the kernel (and 4), dilation 1,
            // 32-bit elements, W edges the kernel compiles in (each phase's
            // first pixel's output pixel inside the row, OW >= T - 1);
            // exactly where all of that holds. Each phase's row, head and
            // tail counted by brute force over the input row.
            const int64_t vlen = isa == Isa::avx2 ? 8 : 16;
            const bool bf16_pairs = dt == convgrad::data_type::bf16 && isa >= Isa::avx512_core_bf16 && !dw;
            const int64_t pad = p.pad_begin[2], ow = p.out[2], kw = p.k[2], sw = p.stride[2];
            const int regs = isa == Isa::avx2 ? 16 : 32, mask = isa == Isa::avx2 && p.ocg % 8 ? 1 : 0;
            // (kw windows: n vectors of output channels, two on AVX-512 at unit W stride)
            const int64_t win_n = (p.ocg + vlen - 1) / vlen;
            auto max_m = [&](int64_t taps) { return (regs - mask - taps * win_n - 2) / (taps * win_n); };
            bool window = !dw && (!bf16_pairs || sw == 1) && base.fold_kw == 1 && kw >= 2 &&
                          sw <= std::min<int64_t>(kw, 4) && p.dil[2] == 1 &&
                          p.ocg <= (isa != Isa::avx2 && sw == 1 ? 2 : 1) * vlen && !base.geo.merged &&
                          max_m((kw + sw - 1) / sw) >= 1 &&
                          (sw == 1 || isa != Isa::avx2);
            struct Phase {
                int64_t taps = 0, first = -1, pad = 0, row = 0, head = 0, tail = 0;
            };
            std::vector<Phase> phases(static_cast<size_t>(sw));
            for (int64_t r = 0; window && r < sw; ++r) {
                Phase& f = phases[static_cast<size_t>(r)];
                f.taps = (kw - r + sw - 1) / sw;
                for (int64_t q = 0; q < p.in[2]; ++q) {
                    if ((q + pad - r) % sw != 0 || q + pad - r < 0) continue;
                    const int64_t i = (q + pad - r) / sw;  // tap j reads output pixel i - j
                    if (f.first < 0) {
                        f.first = q;
                        f.pad = i;
                    }
                    bool any = false;
                    for (int64_t j = 0; j < f.taps; ++j) any = any || (i - j >= 0 && i - j < ow);
                    if (!any && i >= ow) break;
                    CHECK(any);
                    ++f.row;
                    f.head += i < f.taps - 1;
                    f.tail += i >= ow;
                    CHECK(!(i < f.taps - 1 && i >= ow));
                }
                if (f.row > 0 && (f.pad >= ow || ow < f.taps - 1)) window = false;
            }
            // kw lanes (AVX-512, W stride > 1, or any for group pairs): every
            // tap of m output channels over one vector of input channels,
            // output pixels walked; those with a tap inside src form the row,
            // its head those with a tap left of src, its tail those with one
            // right of it (brute force).
            const int64_t in_w = p.in[2];
            bool laned = !dw && (!bf16_pairs || pair8) && isa != Isa::avx2 && base.fold_kw == 1 && !base.geo.merged &&
                         kw >= 2 && (sw >= 2 || pair8) && p.dil[2] == 1 && p.icg <= 16 && p.ocg <= 16;
            struct Lanes {
                int64_t first = -1, row = 0, head = 0, tail = 0, pad = 0, last = 0;
            } ln;
            for (int64_t t = 0; laned && t < ow; ++t) {
                int64_t lo = kw, hi = -1;  // taps inside src
                for (int64_t k = 0; k < kw; ++k)
                    if (sw * t - pad + k >= 0 && sw * t - pad + k < in_w) {
                        lo = std::min(lo, k);
                        hi = k;
                    }
                if (hi < 0) {
                    CHECK((ln.first < 0 || sw * t - pad >= in_w));  // the row's pixels are consecutive
                    continue;
                }
                if (ln.first < 0) ln.first = t;
                ++ln.row;
                if (lo > 0) {
                    if (ln.head == 0) ln.pad = lo + sw * (t - ln.first);
                    ++ln.head;
                }
                if (hi < kw - 1) {
                    if (ln.tail == 0) ln.last = hi;
                    ++ln.tail;
                }
                if (lo > 0 && hi < kw - 1) laned = false;  // taps missing at both ends
            }
            laned = laned && ln.row > 0 && ln.head <= kw && ln.tail <= kw;
            const int64_t lanes_max_m = std::min<int64_t>(8, (32 - kw - 2) / kw);
            laned = laned && lanes_max_m >= 1;
            window = window && !laned;
            CHECK(base.kw_lanes == laned);
            CHECK(base.lane_pairs == (laned && pair8));
            if (laned) {
                CHECK(base.lanes.first == ln.first);
                CHECK(base.lanes.row_px == ln.row);
                CHECK(base.lanes.head == ln.head);
                CHECK(base.lanes.tail == ln.tail);
                const auto d = base.desc(b.m, b.n, b.tail, 4 * p.ic());
                CHECK(d.kw_lanes == 1);
                CHECK(d.lane_pairs == (pair8 ? 1 : 0));
                if (pair8) CHECK(b.m == 8);
                CHECK(d.kw_win == kw);
                CHECK(d.kw_head == ln.head);
                CHECK(d.kw_tail == ln.tail);
                CHECK(d.kw_pad == ln.pad);
                CHECK(d.kw_last == ln.last);
                CHECK(d.w_stride == sw);
                CHECK(d.tap_disp == 4 * p.ic());
                CHECK(d.stage == 0);
                CHECK(b.n == 1);
                CHECK(b.n_tiles == 1);
                CHECK(b.m_block == b.m_tiles);
                CHECK(b.m_tiles == (p.ocg + std::min(p.ocg, lanes_max_m) - 1) / std::min(p.ocg, lanes_max_m));
                for (int m : {b.m, b.m_last}) CHECK(weights_kernel_vregs(base.desc(m, 1, b.tail, 0)) <= regs);
            }
            CHECK(base.kw_phases == (window ? sw : 0));
            if (base.kw_phases > 0) {
                CHECK(b.n == win_n);
                CHECK(b.n_tiles == 1);
                for (int64_t r = 0; r < sw; ++r) {
                    INFO("phase " << r);
                    const Phase& f = phases[static_cast<size_t>(r)];
                    const auto& got = base.kw_phase[static_cast<size_t>(r)];
                    CHECK(got.taps == f.taps);
                    CHECK(got.row_px == f.row);
                    if (f.row > 0) {
                        CHECK(got.first == f.first);
                        CHECK(got.pad == f.pad);
                    }
                    CHECK(got.head == f.head);
                    CHECK(got.tail == f.tail);
                    const auto d = base.desc(static_cast<int>(got.m), b.n, b.tail, 0, 1, 0, static_cast<int>(r));
                    CHECK(d.kw_win == f.taps);
                    CHECK(d.kw_head == f.head);
                    CHECK(d.kw_tail == f.tail);
                    CHECK(d.kw_pad == std::min(f.pad, f.taps - 1));
                    CHECK(d.stage == 0);
                    // The phase's own channel tiles: as few as its register
                    // budget allows, even, none past the blocking's count.
                    CHECK(got.m_tiles == (p.icg + std::min(p.icg, max_m(f.taps)) - 1) / std::min(p.icg, max_m(f.taps)));
                    check_axis(p.icg, got.m_tiles, got.m, got.m_last, 1);
                    CHECK(got.m - got.m_last < got.m_tiles);
                    CHECK(got.m_tiles <= b.m_tiles);
                    for (int64_t m : {got.m, got.m_last}) {
                        const auto dm = base.desc(static_cast<int>(m), b.n, b.tail, 0, 1, 0, static_cast<int>(r));
                        CHECK(weights_kernel_vregs(dm) <= regs);
                    }
                }
            } else if (!laned) {
                CHECK(base.desc(b.m, b.n, b.tail, 0).kw_win == 0);
            }
            // (kw lanes: the rows are output channels, the vector input channels)
            check_axis(dw ? p.k[2] : laned ? p.ocg : p.icg * base.fold_kw, b.m_tiles, b.m, b.m_last, 1);
            // (lane pairs: a vector of two groups' 8 channels, no tail)
            check_axis(base.lane_pairs ? 16 : laned ? p.icg : channels, b.n_tiles, b.n, b.n_last, b.vlen);
            CHECK(b.tail == (base.lane_pairs ? 0 : (laned ? p.icg : channels) % b.vlen));
            CHECK(p.k[1] % b.kh == 0);
            CHECK(b.tiles == p.k[0] * (p.k[1] / b.kh) * b.m_tiles * b.n_tiles *
                                     (dw ? 1 : (base.kw_phases > 0 ? base.kw_phases : laned ? 1 : p.k[2] / base.fold_kw) *
                                                   (base.lane_pairs ? (p.g + 1) / 2 : p.g)));
            CHECK(b.m_block >= 1);
            CHECK(b.m_block <= b.m_tiles);
            if (dw) CHECK(b.m_block == b.m_tiles);
            if (dw) {
                const int64_t tap_disp = p.dil[2] * p.ic() * 4, row_disp = p.dil[1] * p.in[2] * p.ic() * 4;
                CHECK((b.kh - 1) * row_disp + (b.m - 1) * tap_disp + 64 * b.n <= INT32_MAX);
                if (b.whole_rows) {  // one kw tile of every tap, rows the desc can name, no windows
                    CHECK(b.window == 1);
                    CHECK(b.m_tiles == 1);
                    CHECK(base.geo.out[2] <= 64);
                    CHECK(!base.w_pairs);
                }
            } else {
                CHECK(b.kh == 1);
                CHECK(!b.whole_rows);
            }
            // Reduction: chunks cover the rows, slices never exceed them.
            const auto& r = base.red;
            CHECK(r.chunk_rows >= 1);
            CHECK(r.chunks * r.chunk_rows >= r.rows);
            CHECK((r.chunks - 1) * r.chunk_rows < r.rows);
            CHECK(r.slices >= 1);
            CHECK(r.slices <= r.chunks);
            CHECK((r.slices - 1) * base.weights_elems * 4 <= convgrad::detail::WeightsCostModel::max_partial_bytes);
            CHECK(r.rows == base.geo.rows());
            // 16-bit types: pairs of images exactly for bf16 gemm on
            // avx512_core_bf16, pairs of W pixels for bf16 depthwise there
            // (W stride 1 or 2, W dilation 1, 3+ taps; not from DRAM on rows
            // of up to 64 pixels with kernels up to 5 wide); staged for gemm,
            // read in place for depthwise.
            const bool bf16_isa = dt == convgrad::data_type::bf16 && isa == Isa::avx512_core_bf16;
            const bool pairs = bf16_isa && !dw;
            const double bf16_bytes = 2.0 * double(p.mb) * double(p.in_sp() * p.ic() + p.out_sp() * p.oc());
            const bool dram_short_rows =
                    bf16_bytes > 32.0 * 1024 * 1024 && p.k[2] <= 5 && p.in[2] <= 64 && p.out[2] <= 64;
            const bool w_pairs = bf16_isa && dw && p.icg == 1 && p.stride[2] <= 2 && p.dil[2] == 1 && p.k[2] >= 3 &&
                                 !dram_short_rows;
            CHECK(base.pairs == pairs);
            CHECK(base.w_pairs == w_pairs);
            CHECK(base.geo.mb == (pairs ? (p.mb + 1) / 2 : p.mb));
            // bf16 depthwise keeps avx512_core_bf16 with or without W pairs:
            // without them, tiles of 12 accumulators or more multiply on
            // vdpbf16ps from zero-extended loads (dot 2).
            CHECK((base.isa == Isa::avx512_core_bf16) == (pairs || (bf16_isa && dw)));
            if (dt != convgrad::data_type::f32) CHECK(base.staged == !dw);
            const bool zero_ext = bf16_isa && dw && !w_pairs && int64_t(b.m) * b.lane_group * b.n >= 12;
            CHECK(base.desc(b.m, b.n, b.tail, 0).dot == (pairs || w_pairs ? 1 : zero_ext ? 2 : 0));
            if (w_pairs) {  // a block of `window` pairs reads s(2 x window - 1) + m src pixels
                const int64_t tap = p.ic() * 2, row = p.dil[1] * p.in[2] * p.ic() * 2;
                const int64_t s = b.window > 1 ? p.stride[2] : 1;
                CHECK((b.kh - 1) * row + (b.m + s * (2 * b.window - 1)) * tap + 64 * b.n <= INT32_MAX);
            }
            for (int t : {1, 2, 3, 4, 8}) {
                const WeightsPlan pt = plan_weights(p, isa, t);
                // Determinism: nothing but the grid depends on the thread count.
                CHECK(pt.red.chunk_rows == r.chunk_rows);
                CHECK(pt.red.slices == r.slices);
                CHECK(pt.blk.m == b.m);
                CHECK(pt.blk.n == b.n);
                const auto& grid = pt.grid;
                CHECK(grid.nthr == grid.tile_threads * grid.slice_threads);
                CHECK(grid.nthr <= t);
                // Every (slice, tile) pair runs on exactly one thread.
                std::set<std::pair<int64_t, int64_t>> seen;
                int64_t count = 0;
                for (int tid = 0; tid < grid.nthr; ++tid) {
                    const auto tiles = convgrad::detail::balance(b.tiles, grid.tile_threads, tid % grid.tile_threads);
                    const auto slices = convgrad::detail::balance(r.slices, grid.slice_threads, tid / grid.tile_threads);
                    for (int64_t s = slices[0]; s < slices[1]; ++s)
                        for (int64_t w = tiles[0]; w < tiles[1]; ++w, ++count) seen.insert({s, w});
                }
                CHECK(count == r.slices * b.tiles);
                CHECK(static_cast<int64_t>(seen.size()) == count);
            }
        }
      }
    }
}

TEST_CASE("weights plan: kernel descs are independent of the shape", "[jit][weights][plan]") {
    // Two shapes that differ only in sizes the kernel takes at run time
    // share their gemm kernel descs (the cache stays small).
    const WeightsPlan a = plan_weights(problem(resnet(64, 64, 56, 3)), Isa::avx512_core, 2);
    const WeightsPlan b = plan_weights(problem(resnet(64, 64, 28, 3)), Isa::avx512_core, 2);
    const auto da = a.desc(a.blk.m, a.blk.n, 0, 0), db = b.desc(b.blk.m, b.blk.n, 0, 0);
    CHECK(std::memcmp(&da, &db, sizeof da) == 0);
}

TEST_CASE("weights plan: accumulator sets where a gemm tile has few chains", "[jit][weights][plan]") {
    using convgrad::detail::gemm_acc_sets;
    using convgrad::detail::weights_kernel_vregs;
    using convgrad::detail::WeightsKernelDesc;
    auto gemm = [](Isa isa, int m, int n, int tail = 0) {
        WeightsKernelDesc d{};
        d.isa = static_cast<uint8_t>(isa);
        d.kind = static_cast<uint8_t>(WeightsKernelKind::gemm);
        d.m = static_cast<uint8_t>(m);
        d.n = static_cast<uint8_t>(n);
        d.tail = static_cast<uint8_t>(tail);
        return d;
    };
    // Enough sets for 8 chains (2 FMAs a cycle x latency 4), up to 4.
    CHECK(gemm_acc_sets(gemm(Isa::avx512_core, 3, 1)) == 3);
    CHECK(gemm_acc_sets(gemm(Isa::avx512_core, 3, 2)) == 2);
    CHECK(gemm_acc_sets(gemm(Isa::avx512_core, 1, 1)) == 4);
    CHECK(gemm_acc_sets(gemm(Isa::avx512_core, 8, 1)) == 0);
    CHECK(gemm_acc_sets(gemm(Isa::avx2, 3, 2)) == 2);
    CHECK(gemm_acc_sets(gemm(Isa::avx2, 2, 1, 5)) == 4);
    // ... as the registers allow: AVX2 7 x 1 with a tail mask would need 17.
    CHECK(gemm_acc_sets(gemm(Isa::avx2, 7, 1, 3)) == 0);
    for (Isa isa : {Isa::avx2, Isa::avx512_core})
        for (int m = 1; m <= 8; ++m)
            for (int n = 1; n <= 4; ++n) {
                WeightsKernelDesc d = gemm(isa, m, n);
                if (weights_kernel_vregs(d) > (isa == Isa::avx2 ? 16 : 32)) continue;  // (no such tile)
                d.acc_sets = static_cast<uint8_t>(gemm_acc_sets(d));
                INFO("m" << m << "n" << n << " sets " << int(d.acc_sets));
                CHECK(weights_kernel_vregs(d) <= (isa == Isa::avx2 ? 16 : 32));
                CHECK((d.acc_sets == 0 || m * n * d.acc_sets >= 8 || d.acc_sets == 4));
            }
    // Only f32 gemm kernels in place: not depthwise, bf16 pairs, copies,
    // kw windows or lanes, diff_dst pairs, widened 16-bit inputs.
    std::vector<WeightsKernelDesc> others(7, gemm(Isa::avx512_core, 2, 1));
    others[0].kind = static_cast<uint8_t>(WeightsKernelKind::depthwise);
    others[1].dot = 1;
    others[2].stage = 1;
    others[3].kw_win = 3;
    others[4].kw_lanes = 1;
    others[5].pair_dst = 1;
    others[6].in_dt = static_cast<uint8_t>(data_type::bf16);
    for (const WeightsKernelDesc& d : others) CHECK(gemm_acc_sets(d) == 0);
}

TEST_CASE("weights plan: f32 depthwise shares src vectors across taps only from L3", "[jit][weights][plan]") {
    // 3x3 f32 depthwise shares each src vector between the taps that read
    // it (pixel windows on rows of up to 28 pixels at W stride 1, whole
    // rows of up to 64 pixels) only where src and diff_dst fit in L3 and
    // the pixel stride is not a multiple of 2 KiB, or (row blocks, from L3
    // or DRAM) where it is; 5+ taps take windows everywhere. bf16 / f16 read in place
    // widen each load and share from 3 taps regardless.
    auto dw = [](int64_t ch, int64_t sp, int64_t k, int64_t mb, int64_t s = 1) { return resnet_dw(ch, sp, k, mb, s); };
    struct Expect {
        Case c;
        bool f32_shared;
    };
    const std::vector<Expect> cases = {
        {dw(384, 14, 3, 32), true},    // 19 MB
        {dw(960, 7, 3, 32), true},     // 12 MB
        {dw(192, 28, 3, 8), true},     // 10 MB
        {dw(192, 28, 3, 32), false},   // 38 MB: from DRAM
        {dw(512, 14, 3, 8), true},     // 2 KiB pixels: row blocks
        {dw(1024, 7, 3, 8), true},     // 4 KiB pixels: row blocks
        {dw(512, 14, 3, 64), true},    // 2 KiB pixels from DRAM (51 MB): row blocks too
        {dw(144, 56, 3, 2), true},     // 56-pixel rows: whole rows
        {dw(144, 112, 3, 1), false},   // 112-pixel rows: neither
        {dw(192, 56, 5, 32), true},    // 5 taps: windows regardless
    };
    for (const Expect& e : cases) {
        for (convgrad::data_type dt : {convgrad::data_type::f32, convgrad::data_type::f16}) {
            Case c = e.c;
            c.dt = dt;
            const WeightsPlan plan = plan_weights(problem(c), Isa::avx512_core, 2);
            INFO(c.ic << " channels " << c.in[1] << " px mb " << c.mb << "\n" << plan.to_string());
            const bool shared = plan.blk.window > 1 || plan.blk.whole_rows;
            CHECK(shared == (dt == convgrad::data_type::f32 ? e.f32_shared : true));
            CHECK(!(plan.blk.window > 1 && plan.blk.whole_rows));
            if (plan.blk.whole_rows) CHECK(c.in[1] <= 64);
        }
    }
}

TEST_CASE("weights plan: depthwise row blocks", "[jit][weights][plan]") {
    // Whole rows R output rows an entry (WeightsKernelDesc::row_block):
    // f32 only on pixel strides of a multiple of 2 KiB (AVX2: of 512 bytes,
    // H strides up to 2), 16-bit read in place (whole lines: an even number
    // of vectors) wherever whole rows are possible, H stride 1, R dividing
    // the output height; chunks of whole blocks, descs within the registers.
    auto dw = [](int64_t ch, int64_t sp, int64_t k, int64_t mb, int64_t s = 1) { return resnet_dw(ch, sp, k, mb, s); };
    struct Expect {
        Case c;
        convgrad::data_type dt;
        int block;  // 1: none
        Isa isa = Isa::avx512_core;
    };
    using convgrad::data_type;
    std::vector<Expect> cases = {
        {dw(1024, 7, 3, 8), data_type::f32, 7},   // 4 KiB pixels, one vector: the whole plane a block
        {dw(512, 14, 3, 8), data_type::f32, 7},   // 2 KiB pixels: two blocks an image
        {dw(512, 14, 3, 64), data_type::f32, 7},  // from DRAM too
        {dw(384, 14, 3, 8), data_type::f32, 1},   // 1.5 KiB pixels: L1 sets are not the limit
        {dw(1024, 7, 3, 8, 2), data_type::f32, 1},  // H stride 2
        {dw(144, 56, 3, 8), data_type::f16, 2},   // two vectors (a line), two rows
        {dw(144, 28, 3, 8), data_type::bf16, 2},  // (on avx512_core: widened)
        {dw(192, 7, 3, 8), data_type::f16, 1},    // 7 rows: no block of 2 divides them
        {dw(144, 112, 3, 1), data_type::f16, 1},  // rows past 64 pixels
        {dw(192, 14, 5, 8), data_type::f16, 1},   // 5x5: the tile leaves no registers for a block
        {dw(128, 56, 3, 8), data_type::f32, 2, Isa::avx2},     // AVX2, 512-byte pixels: 8 L1 sets a tile
        {dw(256, 28, 3, 8, 2), data_type::f32, 2, Isa::avx2},  // 1 KiB pixels, H stride 2
        {dw(384, 14, 3, 8), data_type::f32, 2, Isa::avx2},     // 1.5 KiB
        {dw(128, 56, 3, 8), data_type::f32, 1},                // AVX-512: a tile is a whole line
        {dw(136, 28, 3, 8), data_type::f32, 1, Isa::avx2},     // 544-byte pixels
        {dw(128, 28, 3, 8, 3), data_type::f32, 1, Isa::avx2},  // H stride 3
        {dw(512, 14, 3, 8, 2), data_type::f32, 1, Isa::avx2},  // 2 KiB pixels keep H stride 1 (windows)
    };
    Case c3 = dw(1024, 7, 3, 2);  // 3D: blocks of the H rows of each depth
    c3.in = {3, 7, 7};
    c3.k = {3, 3, 3};
    c3.s = {1, 1, 1};
    c3.pb = c3.pe = {1, 1, 1};
    cases.push_back({c3, data_type::f32, 7});
    for (const Expect& e : cases) {
        Case c = e.c;
        c.dt = e.dt;
        const Problem p = problem(c);
        const WeightsPlan plan = plan_weights(p, e.isa, 2);
        INFO(c.ic << " channels " << c.in[1] << " px mb " << c.mb << " " << convgrad::dtype_name(e.dt) << " "
                  << (e.isa == Isa::avx2 ? "avx2" : "avx512_core") << "\n"
                  << plan.to_string());
        CHECK(plan.blk.row_block == e.block);
        CHECK((plan.to_string().find(" row-blocks=") != std::string::npos) == (e.block > 1));
        if (plan.blk.row_block == 1) continue;
        CHECK(plan.blk.whole_rows);
        CHECK(plan.geo.out[1] % plan.blk.row_block == 0);
        CHECK(plan.red.chunk_rows % plan.blk.row_block == 0);
        CHECK(plan.blk.kh == c.k[c.k.size() - 2]);
        CHECK(plan.blk.m == c.k.back());
        if (e.dt != data_type::f32) CHECK(plan.blk.n % 2 == 0);
        const convgrad::detail::WeightsKernelDesc d = plan.desc(plan.blk.m, plan.blk.n, plan.blk.tail, 4 * c.ic, plan.blk.kh,
                                              4 * c.ic * c.in.back(), 0);
        CHECK(d.row_block == plan.blk.row_block);
        CHECK(convgrad::detail::weights_kernel_vregs(d) <= (e.isa == Isa::avx2 ? 16 : 32));
    }
}

TEST_CASE("weights plan: depthwise streamed passes", "[jit][weights][plan]") {
    // Whole rows whose chunk calls would take fewer than 48 output pixels
    // (every channel of a chunk's rows within its budget: many channels on
    // a small plane) run a chunk per slice, src and diff_dst within 0.6 of
    // L3; f32 tiles with every kernel row. No next-chunk walk (pf_lines 0);
    // the kernels prefetch the rows two output rows on. Layers whose cost
    // model takes other tiles take whole rows where those stream.
    using convgrad::data_type;
    struct Expect {
        Case c;
        data_type dt;
        Isa isa;
        bool streamed;
    };
    Case h_dilated_s2 = resnet_dw(960, 7, 3, 32, 2);
    h_dilated_s2.d = {2, 1};
    const std::vector<Expect> cases = {
        {resnet_dw(960, 7, 3, 32), data_type::f32, Isa::avx512_core, true},    // MobileNetV2 b14: 35-pixel calls
        {resnet_dw(960, 7, 3, 32), data_type::f16, Isa::avx512_core, true},    // widened
        {resnet_dw(1152, 7, 5, 32), data_type::f32, Isa::avx512_core, true},   // EfficientNet-B0 5x5, 14.5 MB
        {resnet_dw(1152, 7, 5, 64), data_type::f32, Isa::avx512_core, false},  // 29 MB: over 0.6 of L3
        {resnet_dw(384, 14, 3, 32), data_type::f32, Isa::avx512_core, false},  // 84-pixel calls
        {resnet_dw(960, 7, 3, 32, 2), data_type::f32, Isa::avx512_core, true},   // H stride 2 (7 -> 3)
        {h_dilated_s2, data_type::f32, Isa::avx512_core, false},                 // ... with H dilation 2
        {resnet_dw(576, 14, 3, 32, 2), data_type::f32, Isa::avx512_core, true},  // b13: whole rows (not pixels) to stream
        {resnet_dw(672, 14, 5, 8, 2), data_type::f32, Isa::avx512_core, true},    // ... 5x5 s2: whole rows
        {resnet_dw(1024, 7, 3, 32), data_type::f32, Isa::avx512_core, false},  // 4 KiB pixels: row blocks
        {resnet_dw(768, 7, 7, 32), data_type::f32, Isa::avx2, false},  // f32 tiles of one kernel row
        {resnet_dw(768, 7, 7, 32), data_type::f16, Isa::avx2, true},   // ... widened from 16 bits
        {resnet_dw(960, 7, 3, 1), data_type::f32, Isa::avx512_core, false},  // a chunk per slice already
        // bf16 widened where that streams, instead of W pairs (W stride 2: never pairs)
        {resnet_dw(960, 7, 3, 32), data_type::bf16, Isa::avx512_core_bf16, true},
        {resnet_dw(672, 14, 5, 32, 2), data_type::bf16, Isa::avx512_core_bf16, true},
        {resnet_dw(576, 14, 3, 32, 2), data_type::bf16, Isa::avx512_core_bf16, true},
    };
    for (const Expect& e : cases) {
        Case c = e.c;
        c.dt = e.dt;
        const Problem p = problem(c);
        const WeightsPlan plan = plan_weights(p, e.isa, 2);
        INFO(c.ic << " channels " << c.in[1] << " px k" << c.k[1] << " s" << c.s[1] << " mb " << c.mb << " "
                  << convgrad::dtype_name(e.dt) << " " << isa_name(e.isa) << "\n"
                  << plan.to_string());
        CHECK(plan.dw_stream == e.streamed);
        if (e.isa == Isa::avx512_core_bf16) CHECK(plan.w_pairs == !e.streamed);
        CHECK((plan.to_string().find(" streamed (prefetch 2 rows ahead)") != std::string::npos) == e.streamed);
        const convgrad::detail::WeightsKernelDesc d =
            plan.desc(plan.blk.m, plan.blk.n, plan.blk.tail, 4 * c.ic, plan.blk.kh, 4 * c.ic * c.in.back(), 0);
        if (!e.streamed) {
            CHECK(d.la_src == 0);
            CHECK(d.la_dst == 0);
            continue;
        }
        CHECK(plan.blk.whole_rows);
        CHECK(plan.blk.row_block <= 1);
        CHECK(plan.red.chunks == plan.red.slices);
        CHECK(plan.red.chunk_rows * plan.red.slices >= plan.red.rows);
        CHECK(plan.pf_lines == 0);
        CHECK(d.pf_lines == 0);
        const int64_t pixel = c.ic * int64_t(plan.elem_bytes()), row = c.in[1] * pixel;  // a src row
        const int64_t ow = (c.in[1] + c.pb[1] + c.pe[1] - c.k[1]) / c.s[1] + 1;
        CHECK(d.la_dst == 2 * ow * pixel);
        CHECK(d.la_src == (2 * c.s[0] + plan.blk.kh - 1) * row);
        CHECK(std::max<int>(1, d.h_stride) == c.s[0]);
    }
}

TEST_CASE("weights plan: bf16 depthwise pairs W pixels only where they measured ahead", "[jit][weights][plan]") {
    // On avx512_core_bf16, bf16 depthwise pairs W pixels for vdpbf16ps at
    // W stride 1 with kernels 3-5 wide, and on kernels of one row (1D) at W
    // stride 1 or 2; except where src and diff_dst exceed L3 on rows of up
    // to 64 pixels with kernels up to 5 wide (those read bf16 widened, in
    // whole rows) and on pixel strides of a multiple of 2 KiB (widened, in
    // row blocks or whole rows). Other kernels widen their loads.
    auto dw = [](int64_t ch, int64_t sp, int64_t k, int64_t mb, int64_t s = 1) {
        Case c = resnet_dw(ch, sp, k, mb, s);
        c.dt = convgrad::data_type::bf16;
        return c;
    };
    struct Expect {
        Case c;
        bool pairs;
    };
    std::vector<Expect> cases = {
        {dw(144, 56, 3, 32), false},    // 58 MB
        {dw(144, 56, 3, 32, 2), false}, // 36 MB, W stride 2
        {dw(144, 56, 5, 32, 2), false}, // 5x5
        {dw(144, 56, 3, 2), true},      // 3.6 MB: in L3
        {dw(144, 56, 5, 2), true},      // ... 5x5
        {dw(144, 56, 3, 2, 2), false},  // ... W stride 2
        {dw(96, 112, 3, 32, 2), false}, // 112-pixel src rows, W stride 2
        {dw(96, 112, 3, 32), true},     // ... W stride 1
        {dw(96, 56, 7, 32), false},     // 7x7
        {dw(1024, 7, 3, 2), false},     // 2 KiB pixels
        {dw(2048, 7, 7, 2), false},     // 4 KiB pixels, 7x7
        {dw(1024, 14, 3, 2, 2), false}, // 2 KiB pixels, W stride 2
        {dw(512, 14, 3, 2), true},      // 1 KiB pixels
        {dw(1536, 7, 3, 2), false},     // 3 KiB pixels: widened rows stream (depthwise streamed passes)
    };
    // Kernels of one row: 1D (Conformer's 31 taps) at W stride 1 and 2.
    for (int64_t s : {1, 2}) {
        Case c = depthwise(144, {200}, {31});
        c.mb = 8;
        c.s = {s};
        c.pb = c.pe = {15};
        c.dt = convgrad::data_type::bf16;
        cases.push_back({c, true});
    }
    for (const Expect& e : cases) {
        const WeightsPlan plan = plan_weights(problem(e.c), Isa::avx512_core_bf16, 2);
        INFO(e.c.ic << " channels " << e.c.in.back() << " px k " << e.c.k.back() << " mb " << e.c.mb << "\n"
                    << plan.to_string());
        CHECK(plan.w_pairs == e.pairs);
        if (!e.pairs) CHECK((plan.blk.whole_rows || plan.blk.window > 1));
    }
}

TEST_CASE("weights plan: problems that always run on one thread have no slices", "[jit][weights][plan]") {
    // op_threads runs weight gradients of at most kSerialMaxFlops on one
    // thread whatever the arena, so their plans take no slices (partials
    // and a reduction for threads that never come); above it the same
    // layers split the pixels into slices again.
    for (int64_t mb : {32, 1024}) {
        for (const auto& [ic, oc] : {std::pair<int64_t, int64_t>{32, 8}, {240, 10}, {64, 64}}) {
            Case c = resnet(ic, oc, 1, 1);
            c.mb = mb;
            const Problem p = problem(c);
            const WeightsPlan plan = plan_weights(p, Isa::avx512_core, 2);
            INFO(ic << " -> " << oc << " mb " << mb << ", " << p.flops() << " flop\n" << plan.to_string());
            CHECK(convgrad::detail::runs_serial(p) == (p.flops() <= convgrad::detail::kSerialMaxFlops));
            if (convgrad::detail::runs_serial(p))
                CHECK(plan.red.slices == 1);
            else
                CHECK(plan.red.slices > 1);
        }
    }
}

TEST_CASE("weights: few flops over many bytes run on every thread", "[jit][weights][plan]") {
    // MobileNet v1 conv5_6 on one image: below kSerialMaxFlops, but its f32
    // src and diff_dst exceed kSerialMaxBytes, so it runs on the arena's
    // threads (and its 16-bit twin, half the bytes, on one), and its
    // result does not depend on that.
    Case c = resnet_dw(512, 14, 3, 1, 2);
    for (data_type dt : {data_type::f32, data_type::bf16}) {
        c.dt = dt;
        const Problem p = problem(c);
        const double bytes = double(p.activation_elems()) * double(convgrad::detail::dtype_size(dt));
        INFO(convgrad::dtype_name(dt) << ": " << p.flops() << " flop, " << bytes << " bytes");
        REQUIRE(p.flops() <= convgrad::detail::kSerialMaxFlops);
        const bool serial = bytes <= convgrad::detail::kSerialMaxBytes;
        CHECK(serial == (dt != data_type::f32));
        CHECK(convgrad::detail::runs_serial(p) == serial);
        const convgrad::op o = c.make("");
        REQUIRE(o.describe().rfind("jit:", 0) == 0);
        const auto a = testutil::random_reals(dt, o.input0_elems(), 1);
        const auto b = testutil::random_reals(dt, o.input1_elems(), 2);
        std::vector<testutil::Buffer> outs;
        for (int t : {1, 2, 3}) {
            tbb::task_arena arena(t);
            arena.execute([&] {
                outs.push_back(testutil::run(o, a, b));
                CHECK(testutil::threads_used(o) == (serial ? 1 : t));
            });
        }
        CHECK(testutil::bitwise_equal(outs[0], outs[1]));
        CHECK(testutil::bitwise_equal(outs[0], outs[2]));
    }
}

TEST_CASE("weights plan: slices split evenly over the threads", "[jit][weights][plan]") {
    // Threads take runs of whole slices, so a slice count split unevenly
    // (11 on 2 threads: 6 against 5) or slices of uneven chunk counts
    // bunched together (13, ..., 13, 12, ..., 12) leave one thread idle
    // at the end. Depthwise layers of a few channel tiles split the
    // reduction most (MobileNet v1 conv3_2: 3 tiles).
    using convgrad::detail::spread;
    for (int64_t total : {1, 7, 12, 150, 151, 1000003})
        for (int64_t n : {1, 2, 3, 11, 12, 16}) {
            if (n > total) continue;
            int64_t next = 0;
            for (int64_t i = 0; i < n; ++i) {
                const auto r = spread(total, n, i);
                CHECK(r[0] == next);
                CHECK(r[1] > r[0]);
                next = r[1];
                for (int64_t j = i; j < n; ++j) {  // parts i..j: within one item of their share
                    const int64_t got = spread(total, n, j)[1] - r[0];
                    const double share = double(total) * double(j - i + 1) / double(n);
                    CHECK(std::abs(double(got) - share) < 1.0);
                }
            }
            CHECK(next == total);
        }
    for (const auto& [ch, sp, s] : {std::array<int64_t, 3>{128, 56, 2}, {128, 56, 1}, {144, 56, 2}, {48, 28, 1},
                                    {80, 14, 1}}) {
        const Problem p = problem(resnet_dw(ch, sp, 3, 32, s));
        const WeightsPlan plan = plan_weights(p, Isa::avx512_core, 2);
        INFO(plan.to_string());
        if (plan.red.slices == 1) continue;
        CHECK(plan.red.slices % 2 == 0);
        const auto& r = plan.red;
        auto rows_of = [&](int64_t s0, int64_t s1) {  // output rows of slices [s0, s1)
            const int64_t c0 = spread(r.chunks, r.slices, s0)[0], c1 = spread(r.chunks, r.slices, s1 - 1)[1];
            return std::min(r.rows, c1 * r.chunk_rows) - c0 * r.chunk_rows;
        };
        const int64_t half = r.slices / 2;
        CHECK(std::abs(rows_of(0, half) - rows_of(half, r.slices)) <= 2 * r.chunk_rows);
        CHECK(rows_of(0, r.slices) == r.rows);
    }
}

TEST_CASE("weights plan: f32 1x1 layers narrow on a side read in place", "[jit][weights][plan]") {
    // AVX-512: in place with at most 48 input channels, or at most 160 in
    // and 192 out (or 64 out, any in); staged beyond. AVX2 stages them all.
    struct Width {
        int64_t ic, oc;
        bool in_place;
    };
    for (const Width& w : {Width{16, 96, true}, Width{24, 144, true}, Width{48, 512, true}, Width{64, 128, true},
                           Width{160, 192, true}, Width{1024, 64, true}, Width{64, 256, false}, Width{128, 256, false},
                           Width{161, 160, false}, Width{160, 193, false}, Width{256, 128, false}}) {
        for (int64_t s : {1, 2}) {
            const Problem p = problem(resnet(w.ic, w.oc, 28, 1, s));
            INFO(w.ic << " -> " << w.oc << " stride " << s);
            CHECK(plan_weights(p, Isa::avx512_core, 2).staged == !w.in_place);
            CHECK(plan_weights(p, Isa::avx2, 2).staged);
        }
    }
}

TEST_CASE("weights plan: staged rows of dense layers spread a line where a walk steps 4 KiB", "[jit][weights][plan]") {
    // Staged rows without groups take a line more a pixel only where one
    // output pixel to the next steps a multiple of 4 KiB in that tensor's
    // rows (every pixel of a walk in one L1 set): src by IC * 4 bytes times
    // the W stride, diff_dst by OC * 4.
    struct Layer {
        Case c;
        bool src_spread, dst_spread;
    };
    Case feat1;  // wav2vec 2.0: 512 channels, k3 s2 along W
    feat1.mb = 4;
    feat1.ic = feat1.oc = 512;
    feat1.in = {3199};
    feat1.k = {3};
    feat1.s = {2};
    feat1.pb = feat1.pe = {0};
    const std::vector<Layer> layers = {
            {resnet(1024, 512, 32, 3), true, false},   // U-Net dec4_a: 4 KiB src pixels
            {resnet(512, 1024, 16, 3), false, true},   // bottleneck_a: 4 KiB diff_dst pixels
            {resnet(2048, 2048, 7, 3), true, true},    // 8 KiB both
            {feat1, true, false},                      // 2 KiB src pixels, two a step
            {resnet(512, 512, 7, 3), false, false},    // ResNet-50 res5a_branch2b: 2 KiB
            {resnet(256, 256, 14, 3), false, false},   // res4a_branch2b: 1 KiB
            {resnet(256, 256, 28, 3, 2), false, false},  // 1 KiB, two a step
    };
    for (const Layer& l : layers) {
        for (data_type dt : {data_type::f32, data_type::f16}) {
            Case c = l.c;
            c.dt = dt;
            const Problem p = problem(c);
            const WeightsPlan pl = plan_weights(p, Isa::avx512_core, 2);
            INFO(c.ic << " -> " << c.oc << " " << convgrad::dtype_name(dt) << ": " << pl.to_string());
            REQUIRE(pl.staged);
            REQUIRE_FALSE(pl.tile_major);
            CHECK(pl.src_pitch == p.ic() * 4 + (l.src_spread ? 64 : 0));
            CHECK(pl.dst_pitch == p.oc() * 4 + (l.dst_spread ? 64 : 0));
        }
        // AVX2 stages these blocked, [pixel][tile] slices of their own pitch.
        const WeightsPlan avx2 = plan_weights(problem(l.c), Isa::avx2, 2);
        if (avx2.blocked) CHECK(avx2.src_pitch == 4 * avx2.blk.m);
    }
}

TEST_CASE("weights plan: prefetch lines cover the next chunk", "[jit][weights][plan]") {
    // Tile-major chunks copied inside the kernels: per image 2 src lines and
    // the tile's diff_dst lines a pixel, prefetched `lines` lines a step
    // over all but one of a thread's calls. In-place gemm: enough lines for
    // the next chunk's bytes over the thread's calls. Staged rows: 1.
    struct Expect {
        Case c;
        bool in_kernel;
    };
    Case expand = resnet(16, 96, 112, 1);   // MobileNetV2 b1_expand: narrow, in place
    Case branch1 = resnet(64, 256, 56, 1);  // ResNet-50 res2a_branch1: tile-major, copied in the kernels
    Case wav;                              // wav2vec 2.0's first layer: folded, in place
    wav.mb = 4;
    wav.ic = 1;
    wav.oc = 512;
    wav.in = {16000};
    wav.k = {10};
    wav.s = {5};
    wav.pb = wav.pe = {0};
    for (const Case& c : {expand, branch1, resnet(256, 64, 56, 1), resnet(64, 64, 56, 3), wav}) {
        for (int threads : {1, 2}) {
            const WeightsPlan plan = plan_weights(problem(c), Isa::avx512_core, threads);
            INFO(c.ic << " -> " << c.oc << " k" << c.k[0] << ", " << threads << " threads\n" << plan.to_string());
            const int64_t calls = (plan.blk.tiles + plan.grid.tile_threads - 1) / plan.grid.tile_threads;
            const int lines = plan.pf_lines;
            REQUIRE(lines >= 1);
            if (plan.stage_in_kernel) {
                const int64_t dst_lines = (plan.blk.n * plan.blk.vlen * 4 + 63) / 64;
                auto steps = [&](int l) { return (2 + l - 1) / l + (dst_lines + l - 1) / l; };
                CHECK((steps(lines) <= calls - 1 || lines == 16));
                if (lines > 1) CHECK(steps(lines - 1) > calls - 1);  // the fewest that fit
            } else if (plan.staged) {
                CHECK(lines == 1);
            } else {  // in place: the next chunk's bytes within the thread's calls
                const auto& g = plan.geo;
                const double pixels = double(plan.red.chunk_rows * g.segment);
                const double dst_bytes = pixels * double(c.oc) * 4;
                CHECK(double(lines) * 64 * pixels * double(calls) >= dst_bytes);
            }
        }
    }
    CHECK(plan_weights(problem(branch1), Isa::avx512_core, 2).stage_in_kernel);
    const WeightsPlan e = plan_weights(problem(expand), Isa::avx512_core, 2);
    CHECK((!e.staged && e.pf_lines > 1));  // 6 lines of diff_dst a pixel, 4 ic tiles
    const WeightsPlan w = plan_weights(problem(wav), Isa::avx512_core, 2);
    CHECK((!w.staged && w.geo.segs_per_row > 1));
}
