// A weight-gradient test case described in convolution view, turned into
// the user's op (ConvolutionBackwardWeights or ConvTransposeBackwardWeights).
#pragma once

#include <catch2/catch.hpp>
#include <convgrad/convgrad.hpp>
#include <tbb/task_arena.h>

#include <sstream>
#include <string>
#include <vector>

#include "jit/isa.hpp"
#include "ops/executor.hpp"
#include "test_util.hpp"

namespace wtest {

using convgrad::dims;
using convgrad::op_kind;

// Weights dims of format `fmt`: `o` and `i` where it names O and I, the
// kernel where it names X.
inline dims weight_dims(const std::string& fmt, int64_t o, int64_t i, const dims& k) {
    dims r;
    for (char ax : fmt) {
        if (ax == 'O') r.push_back(o);
        if (ax == 'I') r.push_back(i);
        if (ax == 'X') r.insert(r.end(), k.begin(), k.end());
    }
    return r;
}

struct Case {
    int64_t mb = 2, g = 1, ic = 4, oc = 4;  // convolution view
    dims in{5, 5}, k{3, 3}, s{}, d{}, pb{}, pe{};  // one entry per spatial dim; empty = 1 / 0
    bool nxc = true;
    std::string wfmt = "XIO";
    bool transpose = false;  // ConvTransposeBackwardWeights
    convgrad::data_type dt = convgrad::data_type::f32;

    size_t nsp() const { return in.size(); }
    int64_t at(const dims& v, size_t a, int64_t def) const { return v.empty() ? def : v[a]; }
    int64_t out(size_t a) const {
        const int64_t ext = (k[a] - 1) * at(d, a, 1) + 1;
        return (in[a] + at(pb, a, 0) + at(pe, a, 0) - ext) / at(s, a, 1) + 1;
    }
    dims data(int64_t c, bool conv_src) const {
        dims r{mb};
        if (!nxc) r.push_back(c);
        for (size_t a = 0; a < nsp(); ++a) r.push_back(conv_src ? in[a] : out(a));
        if (nxc) r.push_back(c);
        return r;
    }
    // Weights dims in wfmt. Conv: O = oc, I = ic/g. ConvTranspose: its
    // I = our oc (groups fold there), its O = our ic (per group).
    dims weights() const {
        return weight_dims(wfmt, transpose ? ic / g : oc, transpose ? oc : ic / g, k);
    }
    convgrad::attributes attrs() const {
        convgrad::attributes a;
        auto fill = [&](const dims& v, int64_t def) { return v.empty() ? dims(nsp(), def) : v; };
        a.strides = fill(s, 1);
        a.dilations = fill(d, 1);
        a.pads_begin = fill(pb, 0);
        a.pads_end = fill(pe, 0);
        a.groups = g;
        a.data_format = nxc ? "NXC" : "NCX";
        a.weights_format = wfmt;
        a.weights_shape = weights();
        if (transpose) {
            a.output_padding.resize(nsp());
            for (size_t i = 0; i < nsp(); ++i) {
                const int64_t ext = (k[i] - 1) * at(d, i, 1) + 1;
                a.output_padding[i] = (in[i] + at(pb, i, 0) + at(pe, i, 0) - ext) % at(s, i, 1);
            }
        }
        return a;
    }
    op_kind kind() const {
        return transpose ? op_kind::conv_transpose_bwd_weights : op_kind::conv_bwd_weights;
    }
    // User inputs: conv (src, diff_dst); ConvTranspose (its src = our
    // diff_dst, its diff_dst = our src).
    dims input0() const { return transpose ? data(oc, false) : data(ic, true); }
    dims input1() const { return transpose ? data(ic, true) : data(oc, false); }
    convgrad::op make(const std::string& isa) const {
        return testutil::make_op(isa, kind(), dt, attrs(), input0(), input1());
    }
};

inline Case conv2d(int64_t ic, int64_t oc, dims in, dims k) {
    Case c;
    c.ic = ic;
    c.oc = oc;
    c.in = std::move(in);
    c.k = std::move(k);
    return c;
}

// Grouped convolutions with G = IC/g == OC/g of 2, 4 or 8 channels (the
// kernels' lane groups) over group counts that end in a channel tail on
// both ISAs: unit strides, W stride 2 (groups = 3), dilated W with uneven
// pads (groups = 5); 1D, 2D and 3D; rows wide enough for the weight
// gradient's groups of 8.
struct LaneGroupCase {
    int64_t group_size;
    Case c;
};
inline std::vector<LaneGroupCase> lane_group_cases() {
    std::vector<LaneGroupCase> r;
    for (int64_t gs : {2, 4, 8})
        for (int64_t groups : {2, 3, 5, 16})
            for (const dims& in : {dims{31}, dims{6, 29}, dims{3, 4, 29}}) {  // W: 14+ outputs at stride 2
                Case c = conv2d(gs * groups, gs * groups, in, dims(in.size(), 3));
                c.g = groups;
                c.s = c.d = dims(in.size(), 1);
                c.pb = c.pe = dims(in.size(), 1);
                if (groups == 3) c.s.back() = 2;
                if (groups == 5) {
                    c.d.back() = 2;
                    c.pb.back() = 2;
                    c.pe.back() = 0;
                }
                r.push_back({gs, c});
            }
    for (int64_t gs : {2, 4, 8}) {  // 5 taps a row at unit stride: pixel windows (groups of 8 too)
        Case c = conv2d(gs * 4, gs * 4, {5, 23}, {3, 5});
        c.g = 4;
        c.s = c.d = {1, 1};
        c.pb = c.pe = {1, 2};
        r.push_back({gs, c});
    }
    return r;
}

// Few-channel layers whose kw taps fold into the tile rows (fold_kw): W
// pads of 0, 1, KW-1 and past the kernel, one-sided pads, strides 1..16,
// outputs 1..3 pixels wide (every pixel an edge), 1D and 3D.
inline std::vector<Case> fold_kw_cases() {
    std::vector<Case> cases;
    struct W {
        int64_t ic, iw, kw, s, pl, pr;
    };
    for (const W& w : std::vector<W>{{3, 23, 7, 2, 3, 3}, {1, 9, 3, 1, 1, 1}, {2, 10, 5, 1, 0, 4},
                                     {5, 12, 4, 4, 0, 0}, {15, 7, 3, 2, 2, 0}, {3, 4, 7, 1, 6, 2},
                                     {3, 3, 7, 3, 4, 4}, {4, 2, 16, 1, 8, 7}, {3, 32, 16, 16, 0, 0}}) {
        Case c = conv2d(w.ic, 33, {5, w.iw}, {3, w.kw});
        c.s = {2, w.s};
        c.pb = {1, w.pl};
        c.pe = {0, w.pr};
        cases.push_back(c);
    }
    Case c1 = conv2d(3, 20, {17}, {4});
    c1.s = {2};
    c1.pb = {2};
    c1.pe = {1};
    cases.push_back(c1);
    Case c3 = conv2d(3, 16, {4, 5, 6}, {3, 3, 3});
    c3.pb = c3.pe = {1, 1, 1};
    cases.push_back(c3);
    return cases;
}

// Layers of 1-2 input channels whose taps all fold into one tile over a
// padded src (WeightsPlan::fold_kh): 3D with pads wider on one side, 2
// channels (18 rows, an output-channel tail), s2 with D dilation, a 5x5 of
// 25 rows with H dilation and pads wider than half the kernel, NCX + OIX,
// ConvTranspose IOX / XOI. AVX2 folds those of 3D kernels and one channel
// (fold_taps_on_avx2).
inline std::vector<Case> fold_taps_cases() {
    std::vector<Case> cases;
    Case c = conv2d(1, 16, {5, 6, 7}, {3, 3, 3});
    c.pb = c.pe = {1, 1, 1};
    cases.push_back(c);
    c = conv2d(2, 20, {5, 6, 7}, {3, 3, 3});
    c.pb = {2, 0, 1};
    c.pe = {0, 3, 1};
    cases.push_back(c);
    c = conv2d(1, 33, {7, 8, 9}, {3, 3, 3});
    c.s = {2, 2, 2};
    c.d = {2, 1, 1};
    c.pb = c.pe = {2, 1, 1};
    cases.push_back(c);
    c = conv2d(1, 7, {9, 10}, {5, 5});
    c.s = {1, 2};
    c.d = {2, 1};
    c.pb = {5, 2};
    c.pe = {3, 4};
    cases.push_back(c);
    c = conv2d(1, 16, {5, 6, 7}, {3, 3, 3});
    c.pb = c.pe = {1, 1, 1};
    c.nxc = false;
    c.wfmt = "OIX";
    cases.push_back(c);
    for (const char* f : {"IOX", "XOI"}) {
        Case t = conv2d(1, 16, {4, 5, 6}, {3, 3, 3});
        t.transpose = true;
        t.s = {2, 2, 2};
        t.pb = t.pe = {1, 1, 1};
        t.wfmt = f;
        t.nxc = f[0] != 'I';
        cases.push_back(t);
    }
    return cases;
}
// AVX2's 16 registers hold one depth tap's 3x3 rows of one channel.
inline bool fold_taps_on_avx2(const Case& c) { return c.k.size() == 3 && c.ic == 1; }

// Grouped 2D cases from W geometries: g groups of icg -> ocg channels, an
// input row of iw pixels, kw taps, pads pl / pr, W stride sw (H: 5 rows, 3
// taps, stride and dilation 2, pads 2 / 1).
struct WRow {
    int64_t g, icg, ocg, iw, kw, pl, pr, sw;
};
inline std::vector<Case> w_row_cases(const std::vector<WRow>& rows) {
    std::vector<Case> cases;
    for (const WRow& w : rows) {
        Case c = conv2d(w.g * w.icg, w.g * w.ocg, {5, w.iw}, {3, w.kw});
        c.g = w.g;
        c.s = {2, w.sw};
        c.d = {2, 1};
        c.pb = {2, w.pl};
        c.pe = {1, w.pr};
        cases.push_back(c);
    }
    return cases;
}

// Layers whose tiles take the kw taps of a W phase in a window (one vector
// of output channels a group, W dilation 1; AVX2 from 8 output channels a
// group down): kernel widths 2-7, W strides 1-4 (phases of one tap and
// more, phases reading no pixel), pads none, symmetric, asymmetric and
// wider than the kernel, W edges of 0-6 pixels at either end (a row of
// edges only), rows of 1 and 2 pixels (no window), input channels that
// split into tiles with a remainder, output-channel tails, groups, H
// stride and dilation, 1D and 3D.
inline std::vector<Case> kw_window_cases() {
    std::vector<Case> cases = w_row_cases({
                 {1, 16, 16, 9, 3, 1, 1, 1},  {4, 16, 16, 7, 3, 1, 1, 1}, {3, 17, 13, 11, 3, 0, 0, 1},
                 {2, 5, 8, 13, 5, 2, 2, 1},   {5, 8, 8, 7, 7, 3, 3, 1},   {2, 9, 1, 6, 2, 0, 1, 1},
                 {3, 4, 6, 1, 3, 1, 1, 1},    {2, 19, 7, 2, 3, 2, 0, 1},  {1, 24, 16, 12, 4, 0, 3, 1},
                 {2, 6, 8, 5, 3, 4, 4, 1},    {1, 33, 9, 10, 6, 1, 4, 1}, {6, 3, 5, 8, 3, 2, 1, 1},
                 {2, 8, 8, 9, 5, 2, 1, 1},    {1, 16, 16, 12, 7, 0, 0, 1}, {4, 16, 16, 14, 3, 1, 0, 2},
                 {2, 16, 16, 13, 3, 1, 1, 2}, {3, 8, 8, 11, 3, 0, 0, 2},  {2, 7, 11, 15, 4, 1, 2, 2},
                 {2, 9, 8, 17, 5, 2, 1, 3},   {1, 16, 16, 10, 3, 0, 2, 3}, {2, 5, 16, 16, 4, 0, 0, 4},
                 {2, 8, 8, 9, 2, 0, 1, 2},    {1, 20, 16, 12, 7, 3, 3, 4}, {2, 8, 8, 3, 3, 1, 1, 2}});
    Case c1 = conv2d(32, 32, {19}, {3});
    c1.g = 2;
    c1.pb = c1.pe = {1};
    cases.push_back(c1);
    Case c3 = conv2d(24, 24, {4, 5, 6}, {3, 3, 3});
    c3.g = 3;
    c3.pb = c3.pe = {1, 1, 1};
    cases.push_back(c3);
    return cases;
}

// The W geometry of kw windows (see WeightsPlan::kw_phases) on `vregs`
// vector registers: W stride up to the kernel width and 4 (1 on AVX2), dilation 1, a
// tile of one channel fitting, and per W phase r (taps r + s j) that reads
// a src pixel, its first pixel's tap-0 output pixel inside the row and OW
// >= its taps - 1.
inline bool windowed(const Case& c, int vregs) {
    const size_t w = c.nsp() - 1;
    const int64_t pad = c.at(c.pb, w, 0), kw = c.k[w], s = c.at(c.s, w, 1), ow = c.out(w);
    if (c.at(c.d, w, 1) != 1 || kw < 2 || s > std::min<int64_t>(kw, 4)) return false;
    const int64_t t0 = (kw + s - 1) / s, ocg = (c.transpose ? c.ic : c.oc) / c.g;
    if ((vregs - (vregs == 16 && ocg % 8 ? 1 : 0) - t0 - 2) / t0 < 1) return false;
    if (s > 1 && vregs == 16) return false;  // AVX2: unit W stride only
    for (int64_t r = 0; r < s; ++r) {
        const int64_t taps = (kw - r + s - 1) / s;
        for (int64_t q = 0; q < c.in[w]; ++q) {
            if (q + pad - r < 0 || (q + pad - r) % s != 0) continue;
            const int64_t i = (q + pad - r) / s;  // the first pixel of the phase
            if (i >= ow || ow < taps - 1) return false;
            break;
        }
    }
    return true;
}

// Geometries for kw lanes (see WeightsPlan::kw_lanes): groups of up to 16
// input and output channels (channel tails, tiles of output channels split
// in two), W strides 2-5 with kernels of 2-7 taps (strides past the kernel
// width too), pads of 0-3 on either side, rows of edges only, H strides
// and dilations; 1D and 3D.
inline std::vector<Case> kw_lanes_cases() {
    std::vector<Case> cases = w_row_cases({
                 {2, 16, 16, 13, 3, 1, 1, 2}, {4, 16, 16, 14, 3, 1, 0, 2}, {3, 8, 8, 11, 3, 0, 0, 2},
                 {2, 7, 11, 15, 4, 1, 2, 2},  {2, 9, 8, 17, 5, 2, 1, 3},  {2, 16, 16, 10, 3, 0, 2, 3},
                 {2, 5, 16, 16, 4, 0, 0, 4},  {2, 8, 8, 9, 2, 0, 1, 2},   {2, 8, 8, 3, 3, 1, 1, 2},
                 {3, 1, 3, 12, 3, 1, 1, 2},   {2, 16, 13, 21, 7, 3, 3, 3}, {2, 12, 16, 20, 6, 2, 3, 2},
                 {2, 16, 9, 11, 2, 0, 0, 3},  {2, 4, 15, 23, 3, 1, 1, 5}, {2, 16, 16, 5, 5, 2, 2, 2},
                 {2, 3, 2, 4, 3, 1, 1, 2},    {5, 2, 1, 8, 4, 3, 0, 2},   {1, 16, 16, 30, 4, 1, 2, 3}});
    Case c1 = conv2d(32, 24, {23}, {5});
    c1.g = 2;
    c1.s = {3};
    c1.pb = c1.pe = {2};
    cases.push_back(c1);
    Case c3 = conv2d(24, 24, {5, 6, 9}, {3, 3, 3});
    c3.g = 3;
    c3.s = {2, 2, 2};
    c3.pb = c3.pe = {1, 1, 1};
    cases.push_back(c3);
    return cases;
}

// Where the plan takes kw lanes (WeightsPlan::kw_lanes): AVX-512, W
// dilation 1, kernels of 2-15 taps, and either up to 8 output channels a
// group over 16 or more input channels at any W stride (few_oc_lanes; 9-15
// output channels too where the input channels fill 16 lanes at least an
// eighth better; bf16 on avx512_core_bf16 with its image pairs), or W
// stride 2 or more (not bf16 pairs) with up to 16 input and output
// channels a group (not the folded single groups of fewer than 16 input
// channels), or pairs of groups of 8 channels at any W stride with up to 3
// taps (bf16 pairs too); and W edges the kernel compiles in: the output pixels
// with a tap inside src, at most KW of them with taps left of src and KW
// with taps right of it, none with both.
// (ic / oc: the Case's, of the convolution form for ConvTranspose too.)
inline double lane_fill16(int64_t c) { return double(c) / double((c + 15) / 16 * 16); }
inline bool few_oc(const Case& c) {
    const int64_t icg = c.ic / c.g, ocg = c.oc / c.g;
    if (icg < 16) return false;
    if (ocg <= 8) return true;
    return ocg < 16 && lane_fill16(icg) - lane_fill16(ocg) >= 0.125;
}
inline bool laned(const Case& c, const std::string& isa) {
    const int64_t icg = c.ic / c.g, ocg = c.oc / c.g;
    const bool few_oc = wtest::few_oc(c);
    const bool group_pairs = c.g >= 2 && icg == 8 && ocg == 8 && c.k[c.nsp() - 1] <= 3;
    const bool bf16_pairs = c.dt == convgrad::data_type::bf16 && isa == "avx512_core_bf16";
    if (isa.rfind("avx512", 0) != 0 || (bf16_pairs && !few_oc && !group_pairs))
        return false;
    const size_t w = c.nsp() - 1;
    const int64_t pad = c.at(c.pb, w, 0), kw = c.k[w], s = c.at(c.s, w, 1), ow = c.out(w), in = c.in[w];
    if (c.at(c.d, w, 1) != 1 || kw < 2 || kw > 15 || s < (few_oc || group_pairs ? 1 : 2)) return false;
    if (!few_oc && (icg > 16 || ocg > 16 || (c.g == 1 && icg < 16))) return false;
    int64_t row = 0, head = 0, tail = 0;
    for (int64_t t = 0; t < ow; ++t) {
        const bool left = s * t - pad < 0, right = s * t - pad + kw > in;
        if (s * t - pad + kw <= 0 || s * t - pad >= in) continue;  // no tap inside src
        if (left && right) return false;
        ++row;
        head += left;
        tail += right;
    }
    return row > 0 && head <= kw && tail <= kw;
}

// The JIT ISA caps this CPU can run, best first; avx512_core_bf16 only when
// asked (f32 runs the avx512_core kernels there).
inline std::vector<std::string> jit_isas(bool with_bf16) {
    using convgrad::detail::Isa;
    std::vector<std::string> r;
    const Isa hw = convgrad::detail::cpu_isa();
    if (with_bf16 && hw >= Isa::avx512_core_bf16) r.push_back("avx512_core_bf16");
    if (hw >= Isa::avx512_core) r.push_back("avx512_core");
    if (hw >= Isa::avx2) r.push_back("avx2");
    return r;
}

inline std::string label(const Case& c, const std::string& isa) {
    std::ostringstream os;
    os << convgrad::dtype_name(c.dt) << ' ' << isa << (c.transpose ? " deconv" : " conv") << " mb" << c.mb
       << " g" << c.g << " ic" << c.ic << " oc" << c.oc << " in";
    for (auto v : c.in) os << v << ',';
    os << " k";
    for (auto v : c.k) os << v << ',';
    os << (c.nxc ? " NXC " : " NCX ") << c.wfmt;
    return os.str();
}

// Runs c (random reals, in its dtype) under every JIT cap at 1, 2, 3 and 4
// threads and checks the outputs are bitwise identical. Returns the inputs
// and each cap's output, for further checks.
// The case at a larger minibatch of the same parity, if needed, to exceed
// the serial threshold (kSerialMaxFlops): thread-count tests must really
// split the work.
inline Case split_size(Case c) {
    while (c.make("ref").flops() <= convgrad::detail::kSerialMaxFlops) c.mb = 2 * c.mb + c.mb % 2;
    return c;
}

struct ThreadRuns {
    testutil::Buffer a, b;
    std::vector<testutil::Buffer> outputs;  // per jit_isas(with_bf16) entry
};
inline ThreadRuns check_thread_counts(const Case& c, bool with_bf16) {
    ThreadRuns r;
    r.a = testutil::random_reals(c.dt, c.make("ref").input0_elems(), 5);
    r.b = testutil::random_reals(c.dt, c.make("ref").input1_elems(), 6);
    for (const std::string& isa : jit_isas(with_bf16)) {
        const convgrad::op jit = c.make(isa);
        for (int t : {1, 2, 3, 4}) {
            tbb::task_arena arena(t);
            testutil::Buffer out;
            int used = 0;
            arena.execute([&] {
                out = testutil::run(jit, r.a, r.b);
                used = testutil::threads_used(jit);
            });
            INFO(label(c, isa) << " threads " << t << ", " << jit.flops() << " flop");
            CHECK(used == t);  // large enough to split (op_threads)
            if (t == 1)
                r.outputs.push_back(out);
            else
                CHECK(testutil::bitwise_equal(out, r.outputs.back()));
        }
    }
    return r;
}

}  // namespace wtest
