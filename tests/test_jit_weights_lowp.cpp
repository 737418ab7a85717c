// JIT weight gradient in bf16 and f16 vs the reference, on every ISA cap:
// bitwise with small integers (the f32 sums are then exact, so the single
// rounding must equal the reference's), the single-rounding bound of
// docs/ACCURACY.md with reals, bitwise determinism over thread counts, and
// the implementation each type and cap gets.
#include <catch2/catch.hpp>
#include <tbb/task_arena.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "dot_test_util.hpp"
#include "jit/isa.hpp"
#include "test_util.hpp"
#include "weights_case.hpp"

using convgrad::data_type;
using convgrad::dims;
using testutil::Buffer;
using wtest::Case;
using wtest::conv2d;
using wtest::jit_isas;
using wtest::label;

namespace {

// The implementation prefix describe() must start with: bf16 on
// avx512_core_bf16 runs vdpbf16ps kernels there (image pairs, W pixel
// pairs, or depthwise single products of zero-extended loads), but for
// taps folded on a padded src (" fold-taps=" in the plan), which widen
// bf16 as f16; f16 runs the f32 FMA kernels.
std::string expected_impl(const Case& c, const std::string& isa, const std::string& plan) {
    const bool widened = plan.find(" fold-taps=") != std::string::npos;
    if (isa == "avx512_core_bf16")
        return c.dt == data_type::bf16 && !widened ? "jit:avx512_core_bf16" : "jit:avx512_core ";
    return "jit:" + isa + " ";
}

void check_exact(Case c, uint32_t seed = 1) {
    for (data_type dt : {data_type::bf16, data_type::f16}) {
        c.dt = dt;
        const convgrad::op ref = c.make("ref");
        const Buffer a = testutil::small_ints(dt, ref.input0_elems(), seed);
        const Buffer b = testutil::small_ints(dt, ref.input1_elems(), seed + 7);
        const Buffer want = testutil::run(ref, a, b);
        for (const std::string& isa : jit_isas(true)) {
            const convgrad::op jit = c.make(isa);
            INFO(label(c, isa) << "\n" << jit.describe());
            REQUIRE(jit.describe().rfind(expected_impl(c, isa, jit.describe()), 0) == 0);
            CHECK(testutil::bitwise_equal(testutil::run(jit, a, b), want));
        }
    }
}

// bf16 and f16 on every ISA cap: the plan text names `tag` exactly when
// want(dt, isa).
template <typename F>
void check_plan_tag(const Case& c, const char* tag, F&& want) {
    for (data_type dt : {data_type::bf16, data_type::f16}) {
        Case d = c;
        d.dt = dt;
        for (const std::string& isa : jit_isas(true)) {
            const std::string text = d.make(isa).describe();
            INFO(label(d, isa) << "\n" << text);
            CHECK((text.find(tag) != std::string::npos) == want(dt, isa));
        }
    }
}

// One unit in the last place of dt at |x| (the larger of two neighbours'
// spacings is what a single rounding of nearby sums can differ by).
double ulp(data_type dt, double x) {
    const int mant = dt == data_type::bf16 ? 7 : 10;
    const int emin = dt == data_type::bf16 ? -126 : -14;
    int e = 0;
    std::frexp(std::fabs(x), &e);  // |x| in [2^(e-1), 2^e)
    return std::ldexp(1.0, std::max(e - 1, emin) - mant);
}

// docs/ACCURACY.md: |jit - ref| <= gamma_L * A + ulp_out, A = sum |products|
// per element, computed by the reference on |src| and |diff_dst| (rounded
// to dt, hence the 2^-7 margin), L the reduction length.
void check_bound(Case c, data_type dt) {
    c.dt = dt;
    const convgrad::op ref = c.make("ref");
    const Buffer a = testutil::random_reals(dt, ref.input0_elems(), 3);
    const Buffer b = testutil::random_reals(dt, ref.input1_elems(), 4);
    Buffer abs_a = a, abs_b = b;
    for (int64_t i = 0; i < a.size(); ++i) abs_a.set(i, std::fabs(a.get(i)));
    for (int64_t i = 0; i < b.size(); ++i) abs_b.set(i, std::fabs(b.get(i)));
    const Buffer want = testutil::run(ref, a, b), mag = testutil::run(ref, abs_a, abs_b);
    double length = c.mb;
    for (size_t ax = 0; ax < c.nsp(); ++ax) length *= double(c.out(ax));
    const double gamma = length * std::ldexp(1.0, -24) / (1 - length * std::ldexp(1.0, -24));
    for (const std::string& isa : jit_isas(true)) {
        const Buffer got = testutil::run(c.make(isa), a, b);
        INFO(label(c, isa) << " L=" << length);
        int64_t bad = 0, off_by_one = 0;
        for (int64_t i = 0; i < got.size(); ++i) {
            const double diff = std::fabs(double(got.get(i)) - want.get(i));
            const double bound = gamma * mag.get(i) * (1 + 1.0 / 128) +
                                 ulp(dt, std::max(std::fabs(got.get(i)), std::fabs(want.get(i))));
            bad += diff > bound;
            off_by_one += diff > 0;
        }
        CHECK(bad == 0);
        // Almost everything rounds to the reference's own value.
        CHECK(off_by_one * 10 < got.size());
    }
}

}  // namespace

TEST_CASE("weights bf16/f16: channel block boundaries, odd minibatch", "[jit][weights][lowp]") {
    for (int64_t ch : {1, 2, 15, 17, 33, 65}) {
        Case c = conv2d(ch, 17, {5, 7}, {3, 3});
        c.pb = c.pe = {1, 1};
        check_exact(c);
        c = conv2d(7, ch, {5, 7}, {3, 3});
        c.mb = 3;  // the last image of a bf16 pair is paired with zeros
        check_exact(c);
    }
    Case c = conv2d(33, 129, {2, 3}, {1, 1});
    c.mb = 1;
    check_exact(c);
}

TEST_CASE("weights bf16: staged image pairs read diff_dst in place, paired in registers", "[jit][weights][lowp]") {
    // Row-staged bf16 pairs (NXC) stage src only; the kernels pair the two
    // images' diff_dst in registers: whole vector pairs (64 channels), a
    // lone vector and a tail (40: 2 + 8 lanes; 48: 3 vectors), one lane
    // (the embedded broadcast's tile), an odd minibatch (the lone image's
    // chunks stage both, the others not), 1x1 at a W stride (compressed src
    // rows), groups, ConvTranspose. NCX rows, tile-major chunks and tiles of
    // one vector read by many taps keep staged (or copied) pairs.
    struct Want {
        Case c;
        bool in_regs;
    };
    std::vector<Want> cases;
    auto add = [&](Case c, bool in_regs) { cases.push_back({c, in_regs}); };
    Case c = conv2d(24, 64, {6, 7}, {3, 3});
    c.pb = c.pe = {1, 1};
    add(c, true);
    for (int64_t oc : {40, 48, 1}) {
        // (kw 1: few output channels would take kw lanes; one vector: a
        // 1x1, whose two ic tiles read a diff_dst vector twice)
        Case o = conv2d(33, oc, {5, 9}, oc == 1 ? dims{1, 1} : dims{3, 1});
        o.mb = 3;
        add(o, true);
    }
    Case lone9 = conv2d(4 * 8, 4 * 8, {6, 7}, {3, 3});  // one vector read by 9 taps: staged
    lone9.g = 4;
    add(lone9, false);
    Case strided = conv2d(40, 96, {9, 9}, {1, 1});
    strided.s = {2, 2};
    add(strided, true);
    Case grouped = conv2d(2 * 20, 2 * 40, {5, 6}, {3, 3});
    grouped.g = 2;
    add(grouped, true);
    Case transposed = conv2d(48, 36, {5, 6}, {3, 3});
    transposed.transpose = true;
    transposed.mb = 5;
    add(transposed, true);
    Case ncx = c;
    ncx.nxc = false;
    add(ncx, false);
    add(conv2d(33, 1030, {3, 5}, {1, 1}), false);  // tile-major
    const char* tag = "bf16-pairs(diff_dst in registers)";
    for (const Want& w : cases) {
        check_plan_tag(w.c, tag,
                       [&](data_type dt, const std::string& isa) {
                           return w.in_regs && dt == data_type::bf16 && isa == "avx512_core_bf16";
                       });
        check_exact(w.c);
        // The partner image's reads stay inside diff_dst: both inputs end
        // where an inaccessible page begins.
        if (!dottest::runs("avx512_core_bf16")) continue;
        Case b = w.c;
        b.dt = data_type::bf16;
        const convgrad::op ref = b.make("ref");
        const Buffer x = testutil::small_ints(b.dt, ref.input0_elems(), 31);
        const Buffer y = testutil::small_ints(b.dt, ref.input1_elems(), 32);
        const dottest::Guarded gx(x), gy(y);
        INFO(label(b, "avx512_core_bf16"));
        CHECK(testutil::bitwise_equal(dottest::run_guarded(b.make("avx512_core_bf16"), gx, gy),
                                      testutil::run(ref, x, y)));
    }
}

TEST_CASE("weights bf16/f16: wide layers in input-channel blocks, with groups", "[jit][weights][lowp]") {
    Case wide = conv2d(1000, 80, {24, 24}, {1, 1});
    wide.mb = 3;
    Case grouped = conv2d(2400, 600, {14, 14}, {1, 1});
    grouped.g = 2;
    grouped.mb = 2;
    for (const Case& c : {wide, grouped}) {
        Case b = c;
        b.dt = data_type::bf16;
        for (const std::string& isa : jit_isas(true)) {
            INFO(label(b, isa));
            CHECK(b.make(isa).describe().find(" ic_block<") != std::string::npos);
        }
        check_exact(c);
    }
}

TEST_CASE("weights bf16/f16: tile-major 1x1 chunks, odd minibatch and strides", "[jit][weights][lowp]") {
    // Wide layers (a pixel stride of 4 KiB or more). An odd minibatch leaves
    // bf16 pairs a lone last image, whose chunks the copy pass stages.
    Case merged = conv2d(33, 1030, {3, 5}, {1, 1});
    merged.mb = 3;  // bf16 pairs: the last image with zeros
    Case strided = conv2d(1025, 17, {7, 9}, {1, 1});
    strided.s = {2, 2};
    strided.mb = 1;
    Case grouped = conv2d(3 * 10, 3 * 344, {3, 4}, {1, 1});
    grouped.g = 3;
    // Several chunks: pairs copied inside the kernels, then the lone image's
    // chunks through the pass (AVX2: blocked rows, plan_weights).
    Case chunks = conv2d(40, 1030, {20, 24}, {1, 1});
    chunks.mb = 3;
    for (const Case& c : {merged, strided, grouped, chunks}) {
        for (data_type dt : {data_type::bf16, data_type::f16}) {
            Case t = c;
            t.dt = dt;
            for (const std::string& isa : jit_isas(true)) {
                INFO(label(t, isa));
                const std::string d = t.make(isa).describe();
                const bool blocked = isa == "avx2" && c.ic == 40;
                CHECK((d.find(" blocked") != std::string::npos) == blocked);
                CHECK((d.find(" tile-major") != std::string::npos) == !blocked);
                // AVX-512 widens (or pairs) the chunk inside the kernels.
                CHECK((d.find(" tile-major(in-kernel)") != std::string::npos) == (isa != "avx2"));
            }
        }
        check_exact(c);
    }
    Case t = chunks;
    t.dt = data_type::bf16;
    for (const std::string& isa : jit_isas(true)) {
        const std::string d = t.make(isa).describe();
        INFO(d);
        CHECK(d.find(" (1 chunks,") == std::string::npos);  // several chunks
    }
    const wtest::ThreadRuns runs = wtest::check_thread_counts(t, true);
    CHECK(runs.outputs.size() == jit_isas(true).size());
}

TEST_CASE("weights bf16/f16: geometry", "[jit][weights][lowp]") {
    Case c = conv2d(6, 20, {11, 13}, {3, 3});
    c.s = {2, 3};
    c.d = {2, 1};
    c.pb = {2, 0};
    c.pe = {1, 4};
    check_exact(c);
    c = conv2d(3, 18, {4, 5}, {2, 2});  // taps entirely in padding
    c.pb = {3, 4};
    c.pe = {5, 3};
    check_exact(c);
    c = conv2d(3, 32, {23, 21}, {7, 7});  // first layer
    c.s = {2, 2};
    c.pb = c.pe = {3, 3};
    check_exact(c);
    c = conv2d(6, 72, {9, 11}, {1, 1});  // strided 1x1 with pads: compressed staged rows
    c.s = {2, 3};
    c.pb = {1, 2};
    c.pe = {0, 1};
    c.mb = 3;
    check_exact(c);
    c = conv2d(12, 40, {9, 9}, {1, 1});  // 1x1 stride 2
    c.s = {2, 2};
    check_exact(c);
    c = conv2d(8, 24, {30, 31}, {1, 1});  // merged rows, segments
    c.mb = 3;
    check_exact(c);
    c = conv2d(9, 21, {29}, {5});  // 1D
    c.s = {2};
    c.d = {3};
    c.pb = {4};
    c.pe = {1};
    check_exact(c);
    c = conv2d(10, 18, {5, 6, 7}, {3, 2, 3});  // 3D
    c.s = {1, 2, 1};
    c.pb = {1, 0, 2};
    c.pe = {1, 1, 0};
    check_exact(c);
    c = conv2d(4, 16, {3, 4, 4}, {1, 1, 1});
    c.mb = 3;
    check_exact(c);
}

TEST_CASE("weights bf16/f16: few input channels fold their kw taps, staged rows padded", "[jit][weights][lowp]") {
    // The staged src rows carry the W padding as zeros: the geometries of
    // fold_kw_cases at an odd minibatch (a lone bf16 image), OIX, ConvTranspose.
    std::vector<Case> cases = wtest::fold_kw_cases();
    for (Case& c : cases) c.mb = 3;
    Case oix = conv2d(3, 24, {9, 10}, {3, 5});
    oix.s = {1, 2};
    oix.pb = oix.pe = {1, 2};
    oix.wfmt = "OIX";
    oix.nxc = false;
    cases.push_back(oix);
    Case t = conv2d(3, 16, {6, 7}, {4, 4});
    t.transpose = true;
    t.s = {2, 2};
    t.pb = t.pe = {1, 1};
    t.wfmt = "IOX";
    cases.push_back(t);
    for (const Case& c : cases) {
        // (" fold-kw", or with 1-2 channels " fold-taps=": the test below)
        check_plan_tag(c, " fold-", [](data_type, const std::string&) { return true; });
        check_exact(c);
    }
    for (data_type dt : {data_type::bf16, data_type::f16}) {
        Case c = wtest::split_size(cases.front());
        c.dt = dt;
        wtest::check_thread_counts(c, true);
    }
}

TEST_CASE("weights bf16/f16: 1-2 channel layers fold every tap, diff_dst widened in the kernels",
          "[jit][weights][lowp]") {
    // Folded taps (WeightsPlan::src_widened): the pad pass widens src to
    // f32, the kernels widen diff_dst as they load it in place (no staging);
    // bf16 on avx512_core_bf16 keeps its image pairs but where the estimate
    // favours the folded taps (one input channel into one vector of output
    // channels, rows of 3 taps: pairs would tile one kernel row's taps on
    // that vector; a 5x5 kernel's 5-tap rows keep the pairs),
    // AVX2 folds 3D kernels only. The cases of fold_taps_cases at an odd
    // minibatch.
    std::vector<Case> cases = wtest::fold_taps_cases();
    Case rgb = conv2d(3, 24, {7, 9}, {3, 3});  // 3 channels fold in 16 bits (27 rows), not in f32
    rgb.s = {2, 1};
    rgb.pb = rgb.pe = {1, 1};
    cases.push_back(rgb);
    for (Case& x : cases) {
        x.mb = 3;
        const bool pairs_lose = x.ic == 1 && x.oc <= 16 && x.k[x.nsp() - 1] == 3;
        check_plan_tag(x, " fold-taps=", [&](data_type dt, const std::string& isa) {
            if (dt == data_type::bf16 && isa == "avx512_core_bf16") return pairs_lose;
            return isa != "avx2" || wtest::fold_taps_on_avx2(x);
        });
        check_exact(x);
        check_bound(x, data_type::bf16);
        check_bound(x, data_type::f16);
    }
    for (data_type dt : {data_type::bf16, data_type::f16}) {
        Case x = wtest::split_size(cases.front());
        x.dt = dt;
        wtest::check_thread_counts(x, true);
    }
}

TEST_CASE("weights bf16/f16: kw windows on widened rows and on image pairs", "[jit][weights][lowp]") {
    // f16 (and bf16 below avx512_core_bf16) stage rows widened to f32 and
    // run kw windows; bf16 pairs on avx512_core_bf16 at unit W stride.
    for (Case c : wtest::kw_window_cases()) {
        c.mb = 3;
        const int64_t ocg = c.oc / c.g;
        const size_t w = c.nsp() - 1;
        check_plan_tag(c, " kw-window", [&](data_type dt, const std::string& isa) {
            const bool pairs = dt == data_type::bf16 && isa == "avx512_core_bf16";
            Case typed = c;
            typed.dt = dt;
            return (!pairs || c.at(c.s, w, 1) == 1) && ocg <= (isa == "avx2" ? 8 : 16) &&
                   wtest::windowed(c, isa == "avx2" ? 16 : 32) && !wtest::laned(typed, isa);
        });
        check_exact(c);
    }
    for (Case c : wtest::kw_lanes_cases()) {  // W strides: kw lanes, on widened rows too
        c.mb = 3;
        check_plan_tag(c, " kw-lanes", [&](data_type dt, const std::string& isa) {
            Case typed = c;
            typed.dt = dt;
            return wtest::laned(typed, isa);
        });
        check_exact(c);
    }
    for (data_type dt : {data_type::bf16, data_type::f16}) {
        Case c = wtest::split_size(wtest::kw_window_cases()[1]);
        c.dt = dt;
        wtest::check_thread_counts(c, true);
    }
}

// Groups of 8 channels pair two groups in the kw lanes' vectors; bf16 on
// avx512_core_bf16 keeps its image pairs there (vdpbf16ps on staged pairs).
// RegNetY-400MF-like: 13 groups (six pairs and one alone) under a W
// stride, 7 groups at unit stride, an odd minibatch (a last image paired
// with zeros), weight and ConvTranspose weight gradients, NCX too.
TEST_CASE("weights bf16: image pairs over kw lanes of group pairs", "[jit][weights][lowp]") {
    Case s2 = conv2d(104, 104, {13, 14}, {3, 3});
    s2.g = 13;
    s2.s = {2, 2};
    s2.pb = s2.pe = {1, 1};
    Case s1 = conv2d(56, 56, {9, 7}, {3, 2});
    s1.g = 7;
    s1.pb = {1, 0};
    s1.pe = {1, 1};
    for (Case c : {s2, s1}) {
        c.mb = 3;
        for (bool transpose : {false, true})
            for (bool nxc : {true, false}) {
                c.transpose = transpose;
                c.nxc = nxc;
                check_plan_tag(c, " bf16-pairs m8n1x16", [](data_type dt, const std::string& isa) {
                    return dt == data_type::bf16 && isa == "avx512_core_bf16";
                });
                check_plan_tag(c, " kw-lanes(group pairs)",
                               [](data_type, const std::string& isa) { return isa != "avx2"; });
                check_exact(c);
            }
    }
    Case t = wtest::split_size(s2);
    t.dt = data_type::bf16;
    wtest::check_thread_counts(t, true);
}

TEST_CASE("weights bf16/f16: few output channels run kw lanes", "[jit][weights][lowp]") {
    // f16 (and bf16 below avx512_core_bf16) on rows the stager widens to
    // f32; bf16 on avx512_core_bf16 on its staged image pairs (vdpbf16ps
    // on kw lanes). Input channels ending in a tail (40: 8 lanes, 17: 1),
    // W stride 2, 12 output channels over 32 inputs, odd minibatch (a
    // last image paired with zeros), ConvTranspose (the stem's view: 3
    // maps), NCX.
    Case a = conv2d(40, 1, {7, 9}, {3, 3});
    a.pb = a.pe = {1, 1};
    Case b = conv2d(17, 6, {6, 11}, {5, 5});
    b.s = {1, 2};
    b.pb = b.pe = {2, 2};
    Case twelve = conv2d(32, 12, {7, 9}, {3, 3});
    twelve.pb = twelve.pe = {1, 1};
    Case stem = conv2d(24, 3, {23, 21}, {7, 7});  // ConvTranspose of 3 maps and 7x7 s2 (a stem's view)
    stem.s = {2, 2};
    stem.pb = stem.pe = {3, 3};
    stem.transpose = true;
    for (Case c : {a, b, twelve, stem}) {
        c.mb = 3;
        for (bool nxc : {true, false}) {
            c.nxc = nxc;
            check_plan_tag(c, " kw-lanes", [&](data_type, const std::string& isa) { return isa != "avx2"; });
            check_plan_tag(c, " bf16-pairs", [&](data_type dt, const std::string& isa) {
                return dt == data_type::bf16 && isa == "avx512_core_bf16";
            });
            check_exact(c);
        }
    }
    for (data_type dt : {data_type::bf16, data_type::f16}) {
        Case c = wtest::split_size(a);
        c.dt = dt;
        wtest::check_thread_counts(c, true);
    }
    // Rows long enough to be cut into segments keep the plain tiles, and
    // bf16 there its image pairs.
    Case longrow = conv2d(64, 1, {9000}, {9});
    longrow.pb = longrow.pe = {4};
    longrow.mb = 3;
    check_plan_tag(longrow, " kw-lanes", [](data_type, const std::string&) { return false; });
    check_plan_tag(longrow, " bf16-pairs", [](data_type dt, const std::string& isa) {
        return dt == data_type::bf16 && isa == "avx512_core_bf16";
    });
    for (data_type dt : {data_type::bf16, data_type::f16}) {  // (check_exact's impl model has no cut rows)
        longrow.dt = dt;
        const convgrad::op ref = longrow.make("ref");
        const Buffer x = testutil::small_ints(dt, ref.input0_elems(), 1);
        const Buffer y = testutil::small_ints(dt, ref.input1_elems(), 8);
        const Buffer want = testutil::run(ref, x, y);
        for (const std::string& isa : jit_isas(true)) {
            INFO(label(longrow, isa));
            CHECK(testutil::bitwise_equal(testutil::run(longrow.make(isa), x, y), want));
        }
    }
}

TEST_CASE("weights bf16/f16: groups, depthwise, formats", "[jit][weights][lowp]") {
    Case c = conv2d(48, 96, {4, 4}, {3, 3});
    c.g = 3;
    check_exact(c);
    for (int64_t ch : {2, 17, 33}) {
        Case dw = conv2d(ch, ch, {6, 9}, {3, 3});
        dw.g = ch;
        dw.mb = 3;
        dw.pb = dw.pe = {1, 1};
        check_exact(dw);
    }
    Case dw = conv2d(40, 40, {9, 12}, {5, 5});
    dw.g = 40;
    dw.d = {2, 2};
    dw.s = {1, 2};
    dw.pb = {4, 5};
    dw.pe = {4, 6};
    check_exact(dw);
    dw = conv2d(24, 24, {40}, {11});
    dw.g = 24;
    dw.pb = dw.pe = {5};
    check_exact(dw);
    for (int64_t gs : {2, 4, 8}) {  // lane groups, widened as loaded; a channel tail
        Case lg = conv2d(3 * gs, 3 * gs, {6, 9}, {3, 3});
        lg.g = 3;
        lg.mb = 3;
        lg.pb = lg.pe = {1, 1};
        check_exact(lg);
        lg.s = {2, 2};
        check_exact(lg);
    }
    // Windowed 16-bit depthwise W edges (kernels of the taps that read
    // inside src, in windows and W pairs too): one- and two-sided pads,
    // H-edge rows, a row with no interior pixel, 3D, lane groups. Planes
    // large enough not to be pre-padded.
    {
        std::vector<Case> edges;
        Case e = conv2d(40, 40, {30, 40}, {3, 5});
        e.g = 40;
        e.pb = {2, 3};
        e.pe = {0, 1};
        edges.push_back(e);
        e = conv2d(17, 17, {20, 2}, {1, 3});  // every output pixel an edge
        e.g = 17;
        e.pb = {0, 1};
        e.pe = {0, 1};
        edges.push_back(e);
        e = conv2d(24, 24, {3, 24, 24}, {2, 3, 3});
        e.g = 24;
        e.pb = e.pe = {0, 1, 1};
        edges.push_back(e);
        e = conv2d(12, 12, {8, 10}, {3, 3});
        e.g = 3;
        e.pb = e.pe = {1, 1};
        edges.push_back(e);
        for (const Case& c : edges) {
            Case t = c;
            t.dt = data_type::bf16;
            const std::string d = t.make("avx512_core").describe();
            INFO(label(t, "avx512_core") << "\n" << d);
            CHECK(d.find("prepad") == std::string::npos);
            check_exact(c);
        }
    }
    // bf16 depthwise on avx512_core_bf16: vdpbf16ps over pairs of
    // consecutive pixels of a row (W stride 1, kernels 3-5 wide; kernels of
    // one row at W stride 1 or 2). Odd rows (the last pixel pairs with
    // zeros), rows shorter than a block, channel tails, H stride and
    // dilation, asymmetric pads, 5x5 at 7x7 (nearly every pixel an edge),
    // W-edge tap intervals, 1D with an even kernel, 3D; W stride 2 (pairs
    // of src pixels 2 apart, 1 x K kernels): odd rows, a 1x5 window (a ring
    // of three src registers), 7 taps (a src pair feeding two taps).
    {
        std::vector<Case> pairs;
        Case e = conv2d(33, 33, {7, 9}, {3, 3});
        e.mb = 3;
        e.pb = e.pe = {1, 1};
        pairs.push_back(e);
        e = conv2d(16, 16, {11, 30}, {5, 5});
        e.s = {2, 1};
        e.d = {2, 1};
        e.pb = {2, 1};
        e.pe = {3, 3};
        pairs.push_back(e);
        e = conv2d(24, 24, {7, 7}, {5, 5});
        e.mb = 3;
        e.pb = e.pe = {2, 2};
        pairs.push_back(e);
        e = conv2d(20, 20, {41}, {4});
        e.pb = {2};
        e.pe = {1};
        pairs.push_back(e);
        e = conv2d(40, 40, {12, 31}, {3, 3});
        e.pb = e.pe = {1, 1};
        pairs.push_back(e);
        e = conv2d(24, 24, {3, 10, 11}, {2, 3, 3});
        e.pb = e.pe = {0, 1, 1};
        pairs.push_back(e);
        e = conv2d(24, 24, {9, 29}, {1, 3});
        e.mb = 3;
        e.s = {2, 2};
        e.pb = e.pe = {0, 1};
        pairs.push_back(e);
        const size_t strided_window = pairs.size();
        e = conv2d(64, 64, {10, 60}, {1, 5});
        e.mb = 3;
        e.s = {1, 2};
        e.pb = e.pe = {0, 2};
        pairs.push_back(e);
        e = conv2d(20, 20, {41}, {7});
        e.s = {2};
        e.pb = {3};
        e.pe = {2};
        pairs.push_back(e);
        const std::vector<std::string> isas = jit_isas(true);
        const bool bf16_isa = std::find(isas.begin(), isas.end(), "avx512_core_bf16") != isas.end();
        for (size_t i = 0; i < pairs.size(); ++i) {
            Case& c = pairs[i];
            c.g = c.ic;
            Case t = c;
            t.dt = data_type::bf16;
            if (bf16_isa) {
                const std::string d = t.make("avx512_core_bf16").describe();
                INFO(label(t, "avx512_core_bf16") << "\n" << d);
                CHECK(d.find("W-pairs") != std::string::npos);
                if (i == strided_window) CHECK(d.find("window=") != std::string::npos);
            }
            check_exact(c);
        }
    }
    // bf16 depthwise on avx512_core_bf16 without W pairs (W stride 2 over
    // several kernel rows, kernels wider than 5, W dilation): loads
    // zero-extended to 32 bits, one product a lane on vdpbf16ps, in tiles
    // of 12 accumulators or more (narrower tiles widen to f32 for the FMA).
    // Channel tails, odd rows, 7x7 edges, 3D at stride 2, lane groups of 4,
    // one vector of 3x3 taps (9 accumulators), dilation.
    {
        std::vector<Case> single;
        Case e = conv2d(40, 40, {9, 11}, {3, 3});
        e.mb = 3;
        e.s = {2, 2};
        e.pb = e.pe = {1, 1};
        e.g = 40;
        single.push_back(e);
        e = conv2d(24, 24, {10, 12}, {7, 7});
        e.pb = e.pe = {3, 3};
        e.g = 24;
        single.push_back(e);
        e = conv2d(48, 48, {6, 7, 8}, {3, 3, 3});
        e.s = {2, 2, 2};
        e.pb = e.pe = {1, 1, 1};
        e.g = 48;
        single.push_back(e);
        e = conv2d(32, 32, {9, 9}, {3, 3});  // groups of 4 channels
        e.s = {1, 2};
        e.pb = e.pe = {1, 1};
        e.g = 8;
        single.push_back(e);
        e = conv2d(16, 16, {9, 9}, {3, 3});  // 9 accumulators
        e.s = {1, 2};
        e.g = 16;
        single.push_back(e);
        e = conv2d(33, 33, {8, 13}, {3, 3});
        e.d = {1, 2};
        e.pb = e.pe = {1, 2};
        e.g = 33;
        single.push_back(e);
        const std::vector<std::string> isas = jit_isas(true);
        const bool bf16_isa = std::find(isas.begin(), isas.end(), "avx512_core_bf16") != isas.end();
        for (const Case& c : single) {
            Case t = c;
            t.dt = data_type::bf16;
            if (bf16_isa) {
                const std::string d = t.make("avx512_core_bf16").describe();
                INFO(label(t, "avx512_core_bf16") << "\n" << d);
                CHECK(d.rfind("jit:avx512_core_bf16 depthwise ", 0) == 0);
                CHECK(d.find(" widened-in-kernel ") != std::string::npos);
            }
            check_exact(c);
            check_bound(c, data_type::bf16);
        }
    }
    for (bool nxc : {true, false}) {
        Case f = conv2d(6, 20, {7, 6}, {3, 2});
        f.g = 2;
        f.nxc = nxc;
        f.wfmt = "OIX";
        f.pb = {1, 0};
        check_exact(f);
        for (const char* w : {"IOX", "XIO"}) {
            Case t = conv2d(6, 20, {9, 8}, {3, 3});
            t.g = 2;
            t.s = {2, 2};
            t.pb = t.pe = {1, 1};
            t.nxc = nxc;
            t.wfmt = w;
            t.transpose = true;
            check_exact(t);
        }
    }
}

TEST_CASE("weights bf16/f16: single rounding of an f32 sum", "[jit][weights][lowp]") {
    Case c = conv2d(37, 45, {14, 14}, {3, 3});
    c.mb = 3;
    c.pb = c.pe = {1, 1};
    Case flat = conv2d(24, 40, {30, 30}, {1, 1});  // L = 2700, several slices
    flat.mb = 3;
    Case dw = conv2d(35, 35, {20, 20}, {3, 3});
    dw.g = 35;
    dw.pb = dw.pe = {1, 1};
    for (data_type dt : {data_type::bf16, data_type::f16})
        for (const Case& k : {c, flat, dw}) check_bound(k, dt);
}

TEST_CASE("weights bf16/f16: bitwise identical for 1 to 4 threads", "[jit][weights][lowp]") {
    Case big = conv2d(40, 70, {12, 12}, {3, 3});
    big.mb = 3;
    big.pb = big.pe = {1, 1};
    Case few = conv2d(3, 8, {40, 40}, {1, 1});
    few.mb = 9;  // odd, and above the serial threshold (0.5 Mflop)
    Case dw = conv2d(32, 32, {30, 30}, {3, 3});
    dw.g = 32;
    dw.mb = 4;
    dw.pb = dw.pe = {1, 1};
    for (data_type dt : {data_type::bf16, data_type::f16}) {
        for (Case c : {big, few, dw}) {
            c.dt = dt;
            wtest::check_thread_counts(c, true);
        }
    }
}

TEST_CASE("weights bf16/f16: tiles of one call each are stored rounded", "[jit][weights][lowp]") {
    // One chunk and one slice: AVX-512 kernels round their tiles into the
    // user's 16-bit diff_weights (no f32 copy, no rounding pass); the
    // result is the one rounding of the same f32 sums, for every thread
    // count. A kernel covering the input (run as 1x1 on 1200 channels), a
    // small 1x1 layer with channel tails, a small 3x3 layer.
    // (fc and small above the serial threshold, so that threads split them;
    // flat runs on one.)
    Case fc = conv2d(48, 80, {5, 5}, {5, 5});
    fc.mb = 5;
    Case flat = conv2d(90, 70, {2, 2}, {1, 1});
    flat.mb = 4;
    Case small = conv2d(40, 48, {5, 5}, {3, 3});
    small.mb = 3;
    small.pb = small.pe = {1, 1};
    for (const Case& c : {fc, flat, small}) {
        check_plan_tag(c, "tiles stored rounded", [](data_type, const std::string& isa) { return isa != "avx2"; });
        check_exact(c);
        for (data_type dt : {data_type::bf16, data_type::f16}) {
            check_bound(c, dt);
            Case d = c;
            d.dt = dt;
            if (c.ic != flat.ic) wtest::check_thread_counts(d, true);
        }
    }
    // ConvTranspose into a permuted user layout keeps the f32 target.
    Case deconv = flat;
    deconv.transpose = true;
    check_plan_tag(deconv, "tiles stored rounded", [](data_type, const std::string&) { return false; });
}

TEST_CASE("weights bf16/f16: special values", "[jit][weights][lowp]") {
    // A NaN or infinity in src reaches exactly the weights that read it; the
    // zero partner of an odd minibatch's last image must not make NaNs.
    Case c = conv2d(5, 18, {6, 7}, {3, 3});
    c.mb = 3;
    c.pb = c.pe = {1, 1};
    for (data_type dt : {data_type::bf16, data_type::f16}) {
        c.dt = dt;
        const convgrad::op ref = c.make("ref");
        Buffer a = testutil::small_ints(dt, ref.input0_elems(), 11);
        const Buffer b = testutil::small_ints(dt, ref.input1_elems(), 12, 1, 2);  // no zeros
        a.set(5 * 6 * 7 * 2 + 3, INFINITY);  // last image, a pixel inside
        const Buffer want = testutil::run(ref, a, b);
        for (const std::string& isa : jit_isas(true)) {
            INFO(label(c, isa));
            const Buffer got = testutil::run(c.make(isa), a, b);
            for (int64_t i = 0; i < got.size(); ++i) {
                INFO(i);
                REQUIRE(std::isnan(got.get(i)) == std::isnan(want.get(i)));
                if (!std::isnan(want.get(i))) REQUIRE(got.get(i) == want.get(i));
            }
        }
    }
}
