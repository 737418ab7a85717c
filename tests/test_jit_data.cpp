// JIT data gradient (ConvolutionBackwardData) against the reference.
#include <tbb/task_arena.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <catch2/catch.hpp>
#include <string>
#include <thread>
#include <vector>

#include "dot_test_util.hpp"
#include "jit/isa.hpp"
#include "ops/scratch.hpp"
#include "test_util.hpp"
#include "weights_case.hpp"

namespace {

using convgrad::data_type;
using convgrad::dims;
using convgrad::op_kind;

// A data-gradient case: the weight tests' convolution-view case, read as
// ConvolutionBackwardData (input 0 diff_dst, input 1 weights, output diff_src).
struct DCase : wtest::Case {
    data_type dt = data_type::f32;
    convgrad::op make(const std::string& isa) const {
        convgrad::attributes a = attrs();
        a.weights_shape.clear();
        a.dst_shape = data(ic, true);
        return testutil::make_op(isa, op_kind::conv_bwd_data, dt, a, data(oc, false), weights());
    }
};

// A case's spatial attributes, as the tables below list them.
struct Geom {
    dims in, k, s, d, pb, pe;
};
void set_geometry(DCase& c, const Geom& g) {
    c.in = g.in;
    c.k = g.k;
    c.s = g.s;
    c.d = g.d;
    c.pb = g.pb;
    c.pe = g.pe;
}

// A case of two images, g groups, ic -> oc channels in `dt`.
DCase two_images(int64_t g, int64_t ic, int64_t oc, data_type dt) {
    DCase c;
    c.mb = 2;
    c.g = g;
    c.ic = ic;
    c.oc = oc;
    c.dt = dt;
    return c;
}

// A table's case: g groups, ic -> oc channels on a geometry, NXC or NCX.
struct GeomCase {
    int64_t g, ic, oc;
    Geom geo;  // in, k, s, d, pads begin, pads end
    bool nxc;
};

// Whether the CPU (and CONVGRAD_MAX_ISA) allows the cap `isa`.
bool runs(const std::string& isa) {
    const std::vector<std::string> order{"avx2", "avx512_core", "avx512_core_bf16"};
    const auto level = [&](const std::string& s) { return std::find(order.begin(), order.end(), s) - order.begin(); };
    return level(isa) <= level(convgrad::max_isa());
}

// The op runs JIT under the cap: named by the cap, or by avx512_core under
// avx512_core_bf16 when the kernel needs no bf16 instruction.
void require_jit_named(const convgrad::op& jit, const std::string& isa) {
    const std::string d = jit.describe();
    INFO(d);
    REQUIRE((d.rfind("jit:" + isa + " ", 0) == 0 ||
             (isa == "avx512_core_bf16" && d.rfind("jit:avx512_core ", 0) == 0)));
}

const std::vector<std::string> kAllIsas{"avx512_core_bf16", "avx512_core", "avx2"};

// Small integers: the JIT result must equal the reference bit for bit (the
// f32 sums are exact, so the one rounding to bf16 / f16 is the reference's).
void check_exact(const DCase& c, const std::vector<std::string>& isas = {"avx512_core", "avx2"}) {
    const auto ref = c.make("ref");
    const auto dd = testutil::small_ints(c.dt, ref.input0_elems(), 11);
    const auto w = testutil::small_ints(c.dt, ref.input1_elems(), 12);
    const auto expect = testutil::run(ref, dd, w);
    for (const std::string& isa : isas) {
        if (!runs(isa)) continue;
        const auto jit = c.make(isa);
        INFO(jit.describe());
        require_jit_named(jit, isa);
        CHECK(testutil::bitwise_equal(testutil::run(jit, dd, w), expect));
    }
}

// A table's case in f32, bf16 and f16, each exact on every ISA (two
// images); how many of the three avx512_core plans `planned` accepts
// (checked where the CPU has AVX-512).
template <class Pred>
void check_types(const GeomCase& sh, Pred planned) {
    int hits = 0;
    for (data_type dt : {data_type::f32, data_type::bf16, data_type::f16}) {
        DCase c = two_images(sh.g, sh.ic, sh.oc, dt);
        set_geometry(c, sh.geo);
        c.nxc = sh.nxc;
        INFO(wtest::label(c, "") << " " << convgrad::dtype_name(dt));
        const std::string d = c.make("avx512_core").describe();
        INFO(d);
        hits += planned(d);
        check_exact(c, kAllIsas);
    }
    INFO(sh.g << " groups " << sh.ic << " -> " << sh.oc << " in " << sh.geo.in[0] << "x" << sh.geo.in[1]
              << (sh.nxc ? "" : " NCX"));
    if (runs("avx512_core")) CHECK(hits >= 1);
}

// The kernels a data-gradient op built (describe(): "kernels N").
int kernels_built(const convgrad::op& o) {
    const std::string d = o.describe();
    const size_t at = d.rfind("kernels ");
    REQUIRE(at != std::string::npos);
    return std::stoi(d.substr(at + 8));
}

// A plan with streaming stores (AVX-512 plans; AVX2 blocks of half a line
// may not stream), run into an aligned output (streaming) and one 16 bytes
// off (the same kernels, storing plainly), both starting as 0x7f bytes:
// equal to `expect` bit for bit. The plan builds one kernel per W phase
// and channel block kind (full blocks, the last one; a single block: the
// last only), each call choosing its stores. Returns whether the plan
// streams.
bool check_streaming(const DCase& c, const testutil::Buffer& dd, const testutil::Buffer& w,
                     const testutil::Buffer& expect) {
    const auto jit = c.make(testutil::vector_isa());
    INFO(jit.describe());
    const bool streams = jit.describe().find("streaming stores") != std::string::npos;
    if (runs("avx512_core")) CHECK(streams);
    // describe(): "mM nNxV", "for cb in T (L channels/group", "W phase in P"
    const std::string d = jit.describe();
    const auto number_after = [&](const std::string& key) {
        const size_t at = d.find(key);
        REQUIRE(at != std::string::npos);
        return std::stoi(d.substr(at + key.size()));
    };
    const int vecs = number_after(" n"), vlen = number_after(std::to_string(vecs) + "x");
    const int lanes = number_after("for cb in " + std::to_string(number_after("for cb in ")) + " (");
    const int kinds = lanes > vecs * vlen ? 2 : 1;  // blocks a group: one, or full ones and the last
    CHECK(kernels_built(jit) == number_after("W phase in ") * kinds);
    const size_t bytes = expect.bytes.size();
    std::unique_ptr<uint8_t, decltype(&std::free)> out(static_cast<uint8_t*>(std::aligned_alloc(64, (bytes + 64 + 63) / 64 * 64)),
                                                       &std::free);
    for (size_t offset : {0, 16}) {  // aligned: streaming; 16: the kernels without (dw: prefetching)
        std::memset(out.get(), 0x7f, bytes + 64);
        jit.execute(dd.data(), w.data(), out.get() + offset);
        CHECK(std::memcmp(out.get() + offset, expect.data(), bytes) == 0);
    }
    return streams;
}

}  // namespace

TEST_CASE("data: channel block boundaries", "[jit][data]") {
    for (int64_t ic : {1, 2, 15, 16, 17, 31, 33, 65})
        for (int64_t oc : {1, 16, 17, 33}) {
            DCase c;
            c.ic = ic;
            c.oc = oc;
            c.in = {4, 7};
            c.pb = c.pe = {1, 1};
            INFO("ic " << ic << " oc " << oc);
            check_exact(c);
        }
}

TEST_CASE("data: spatial sizes, strides, dilations, pads", "[jit][data]") {
    for (int64_t iw : {1, 2, 7, 13})
        for (int64_t s : {1, 2, 3, 4})
            for (int64_t k : {1, 2, 3}) {
                DCase c;
                c.ic = 17;
                c.oc = 5;
                c.in = {3, iw};
                c.k = {k, k};
                c.s = {s, s};
                c.pb = {k - 1, k / 2};
                c.pe = {0, k - 1};
                if (c.out(0) < 1 || c.out(1) < 1) continue;
                INFO("iw " << iw << " s " << s << " k " << k);
                check_exact(c);
            }
    DCase wide;  // oc >= 64: edge blocks read zero-padded rows instead of running alone
    wide.ic = 40;
    wide.oc = 70;
    wide.in = {5, 11};
    wide.s = {1, 2};
    wide.pb = {2, 0};  // W: tap 2 of phase 0 reads pixel -1
    wide.pe = {1, 2};
    check_exact(wide);
    INFO(wide.make("avx512_core").describe());
    CHECK(wide.make("avx512_core").describe().find("zero-padded rows") != std::string::npos);
    DCase dil;  // dilation 2 and 3, pads larger than the kernel, stride > kernel
    dil.ic = 20;
    dil.oc = 9;
    dil.in = {9, 11};
    dil.k = {3, 2};
    dil.d = {2, 3};
    dil.pb = {5, 4};
    dil.pe = {4, 6};
    check_exact(dil);
    dil.s = {3, 5};
    dil.d = {1, 1};
    dil.k = {2, 2};
    check_exact(dil);  // stride > kernel: pixels no tap reaches are zeros
}

TEST_CASE("data: 1D and 3D", "[jit][data]") {
    DCase d1;
    d1.ic = 33;
    d1.oc = 7;
    d1.in = {29};
    d1.k = {5};
    d1.s = {2};
    d1.pb = {2};
    d1.pe = {3};
    check_exact(d1);
    DCase d3;
    d3.ic = 18;
    d3.oc = 6;
    d3.in = {4, 5, 6};
    d3.k = {3, 2, 3};
    d3.s = {2, 1, 2};
    d3.d = {1, 2, 1};
    d3.pb = {1, 1, 1};
    d3.pe = {1, 0, 2};
    check_exact(d3);
}

TEST_CASE("data: groups and depthwise", "[jit][data]") {
    for (int64_t g : {2, 3}) {
        DCase c;
        c.g = g;
        c.ic = 17 * g;
        c.oc = 5 * g;
        c.in = {6, 9};
        c.pb = c.pe = {1, 1};
        check_exact(c);
    }
    for (int64_t ch : {1, 15, 16, 17, 33}) {
        for (const dims& in : {dims{23}, dims{5, 9}, dims{3, 4, 5}}) {
            DCase c;
            c.g = c.ic = c.oc = ch;
            c.in = in;
            c.k = dims(in.size(), 3);
            c.k.back() = 5;
            c.s = dims(in.size(), 1);
            c.s.back() = 2;
            c.d = dims(in.size(), 1);
            c.d.front() = 2;
            c.pb = dims(in.size(), 2);
            c.pe = dims(in.size(), 3);
            INFO("depthwise ch " << ch << " rank " << in.size());
            check_exact(c);
            if (c.make("avx512_core").describe().find("depthwise") == std::string::npos) FAIL("not depthwise");
        }
    }
    // Unit W stride: one entry per kh row carries all kw taps (dilated too;
    // without padding the 16-bit types widen inside the kernel).
    for (data_type dt : {data_type::f32, data_type::bf16, data_type::f16})
        for (int64_t ch : {1, 17, 33})
            for (int64_t dil : {1, 2})
                for (bool padded : {true, false}) {
                    DCase c;
                    c.dt = dt;
                    c.g = c.ic = c.oc = ch;
                    c.in = {6, 19};
                    c.k = {3, 5};
                    c.d = {1, dil};
                    c.pb = padded ? dims{1, 2 * dil} : dims{0, 0};
                    c.pe = padded ? dims{1, 2 * dil - 1} : dims{0, 0};
                    INFO("depthwise row taps " << convgrad::dtype_name(dt) << " ch " << ch << " dil " << dil
                                               << " padded " << padded);
                    check_exact(c, kAllIsas);
                    CHECK(c.make("avx2").describe().find("per kh: ") != std::string::npos);
                }
}

// A kh row's taps keep a W vector each in registers: from about 27 taps
// (AVX-512; AVX2 sooner) too few accumulators remain, or none, and the
// plan runs an entry per tap instead; a kernel of 31 taps once fell back
// to the reference path.
TEST_CASE("data: long depthwise kernels run an entry per tap", "[jit][data]") {
    for (data_type dt : {data_type::f32, data_type::bf16, data_type::f16})
        for (int64_t k : {21, 29, 31, 64})
            for (const dims& in : {dims{k + 13}, dims{3, k + 2}}) {
                DCase c;
                c.dt = dt;
                c.g = c.ic = c.oc = 17;
                c.in = in;
                c.k = dims(in.size(), 1);
                c.k.back() = k;
                c.pb = c.pe = dims(in.size(), 0);
                c.pb.back() = k / 2;
                c.pe.back() = k - 1 - k / 2;
                INFO(convgrad::dtype_name(dt) << " kw " << k << " rank " << in.size());
                check_exact(c, kAllIsas);
                const std::string d = c.make(testutil::vector_isa()).describe();
                INFO(d);
                CHECK(d.find("depthwise") != std::string::npos);
                if (runs("avx512_core")) CHECK((d.find("per kh: ") != std::string::npos) == (k <= 21));
                else CHECK(d.find("per kh: ") == std::string::npos);  // AVX2: fewer registers
            }
}

// bf16 depthwise on avx512_core_bf16: kh rows kh and kh + s / gcd(s, dil)
// go through vdpbf16ps as pairs, a row without a partner alone. Kernel
// heights odd and even, H strides 1-3 with and without H dilation (steps
// 1, 2, 3), pads that leave edge rows 1..KH valid rows, 3D (pairs never
// cross kd), a W stride (row taps of a phase) and one tap per entry,
// channel tails; bit for bit against the reference, and values that are
// not finite where a row alone meets its zero half.
TEST_CASE("data: bf16 depthwise pairs kh rows", "[jit][data]") {
    if (!runs("avx512_core_bf16")) {
        WARN("no avx512_core_bf16 here: row pairs not run");
        return;
    }
    struct Shape {
        Geom geo;
        const char* step;  // the pair step the plan names
    };
    const std::vector<Shape> shapes{
            {{{9, 11}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}}, "(kh, kh+1)"},
            {{{10, 8}, {4, 3}, {1, 1}, {1, 1}, {3, 0}, {1, 2}}, "(kh, kh+1)"},
            {{{12, 9}, {3, 3}, {2, 1}, {1, 1}, {1, 1}, {0, 1}}, "(kh, kh+2)"},
            {{{13, 7}, {3, 3}, {2, 1}, {2, 1}, {2, 1}, {2, 1}}, "(kh, kh+1)"},
            {{{14, 6}, {5, 3}, {3, 1}, {1, 1}, {2, 1}, {2, 1}}, "(kh, kh+3)"},
            {{{11, 9}, {3, 3}, {1, 1}, {2, 1}, {2, 1}, {2, 1}}, "(kh, kh+1)"},
            {{{5, 58}, {5, 5}, {2, 2}, {1, 1}, {2, 2}, {2, 1}}, "(kh, kh+2)"},
            {{{9, 14}, {3, 3}, {1, 2}, {1, 1}, {1, 1}, {1, 1}}, "(kh, kh+1)"},
            {{{4, 6, 7}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}}, "(kh, kh+1)"},
            {{{5, 6, 7}, {2, 3, 3}, {1, 2, 1}, {1, 1, 1}, {1, 1, 1}, {0, 0, 1}}, "(kh, kh+2)"},
    };
    for (const Shape& sh : shapes)
        for (int64_t ch : {1, 17, 48}) {
            DCase c;
            c.dt = data_type::bf16;
            c.g = c.ic = c.oc = ch;
            set_geometry(c, sh.geo);
            const std::string d = c.make("avx512_core_bf16").describe();
            INFO(d);
            CHECK(d.find(std::string("vdpbf16ps on kh row pairs ") + sh.step) != std::string::npos);
            check_exact(c, {"avx512_core_bf16"});
        }
    // Two interleaves: vpermw, and vpexpandw (AVX512_VBMI2) where vpermw's
    // index register would cost 90-96 channels their single block.
    for (int64_t ch : {96, 90}) {  // 90: the tail vector's words
        DCase c;
        c.dt = data_type::bf16;
        c.g = c.ic = c.oc = ch;
        c.in = {12, 12};
        c.pb = c.pe = {1, 1};
        const std::string d = c.make("avx512_core_bf16").describe();
        INFO(d);
        const bool expand = d.find("vpexpandw") != std::string::npos;
        CHECK(expand == convgrad::detail::cpu_has_vbmi2());
        CHECK((expand || d.find("vpermw") != std::string::npos));
        check_exact(c, {"avx512_core_bf16"});
    }
    // Infinities in diff_dst: a row alone adds (dd, 0) · (W, 0), never 0 · inf,
    // so the non-finite outputs are exactly the reference's.
    DCase c;
    c.dt = data_type::bf16;
    c.g = c.ic = c.oc = 33;
    c.in = {9, 10};
    c.pb = c.pe = {1, 1};
    const auto ref = c.make("ref"), jit = c.make("avx512_core_bf16");
    auto dd = testutil::small_ints(c.dt, ref.input0_elems(), 21);
    const auto w = testutil::small_ints(c.dt, ref.input1_elems(), 22, 1, 2);  // positive: no inf - inf
    for (int64_t i = 0; i < ref.input0_elems(); i += 97) dd.set(i, std::numeric_limits<double>::infinity());
    const auto expect = testutil::run(ref, dd, w), got = testutil::run(jit, dd, w);
    CHECK(testutil::bitwise_equal(got, expect));
}

// Groups of G = 2, 4, 8 channels (IC/g == OC/g; 16 with a W stride on
// AVX-512) run the depthwise kernel
// with each group's G output channels permuted into its lanes: group counts
// that end in a channel tail on both ISAs, unit and non-unit W strides (row
// taps or one tap per entry), dilation, 1D / 2D / 3D, every type.
TEST_CASE("data: lane groups of 2, 4 and 8 channels", "[jit][data]") {
    for (const wtest::LaneGroupCase& lc : wtest::lane_group_cases()) {
        DCase c;
        static_cast<wtest::Case&>(c) = lc.c;
        INFO("G " << lc.group_size << " groups " << c.g << " rank " << c.nsp());
        const std::string lg = "(lane groups of " + std::to_string(lc.group_size) + ")";
        if (runs("avx512_core")) CHECK(c.make("avx512_core").describe().find(lg) != std::string::npos);
        CHECK(c.make("avx2").describe().find(lg) != std::string::npos);
        for (data_type dt : {data_type::f32, data_type::bf16, data_type::f16}) {
            c.dt = dt;
            check_exact(c, kAllIsas);
        }
    }
    DCase g16;  // groups of 16 with a W stride: lane groups for bf16 oc pairs only
    g16.g = 3;
    g16.ic = g16.oc = 48;
    g16.in = {6, 13};
    g16.s = {1, 2};
    g16.pb = g16.pe = {1, 1};
    if (runs("avx512_core")) CHECK(g16.make("avx512_core").describe().find("(lane groups of") == std::string::npos);
    if (runs("avx512_core_bf16")) {
        DCase b = g16;
        b.dt = data_type::bf16;
        CHECK(b.make("avx512_core_bf16").describe().find("(lane groups of 16)") != std::string::npos);
    }
    for (data_type dt : {data_type::f32, data_type::bf16, data_type::f16}) {
        g16.dt = dt;
        check_exact(g16, kAllIsas);
    }
    g16.dt = data_type::bf16;  // oc pairs of the group in every lane, vdpbf16ps
    if (runs("avx512_core_bf16"))
        CHECK(g16.make("avx512_core_bf16").describe().find("(lane groups of 16) m") != std::string::npos);
    if (runs("avx512_core_bf16"))
        CHECK(g16.make("avx512_core_bf16").describe().find("for oc pair in 8: ") != std::string::npos);
    DCase mixed;  // IC/g != OC/g: not a lane group
    mixed.g = 4;
    mixed.ic = 16;
    mixed.oc = 32;
    CHECK(mixed.make(testutil::vector_isa()).describe().find("lane groups") == std::string::npos);
    check_exact(mixed);
}

// 16-bit lane groups of 4 or 8 channels on diff_dst rows of 1.5 KiB or more
// (NXC) widen those rows into padded f32 rows once, and their kernels run
// f32 (each diff_dst vector is loaded once per output channel of a group,
// which widened it every time); shorter rows and NCX keep the edges in the
// kernels and widen on load. Unit and W-stride-2 rows, 2D and 3D, f16 and
// bf16 (bf16 widens on avx512_core and AVX2; with BF16 it pairs), exact on
// every ISA.
TEST_CASE("data: 16-bit lane groups widen their diff_dst rows once", "[jit][data]") {
    auto lanes = [](int64_t gs, int64_t groups, dims in, dims s) {
        DCase c;
        c.g = groups;
        c.ic = c.oc = gs * groups;
        c.in = in;
        c.k = dims(in.size(), 3);
        c.s = s;
        c.pb = c.pe = dims(in.size(), 1);
        return c;
    };
    const DCase wide = lanes(8, 8, {5, 28}, {1, 2});          // 14 x 64 x 2 bytes = 1792
    const DCase unit = lanes(8, 8, {4, 13}, {1, 1});          // 13 x 64 x 2 = 1664
    const DCase g4 = lanes(4, 16, {3, 20}, {1, 1});           // groups of 4, 2560
    const DCase vol = lanes(8, 6, {3, 4, 17}, {1, 1, 1});     // 3D, 17 x 48 x 2 = 1632
    const DCase narrow = lanes(8, 8, {5, 16}, {1, 2});        // 8 x 64 x 2 = 1024: edges
    DCase ncx = wide;
    ncx.nxc = false;
    for (const DCase& base : {wide, unit, g4, vol, narrow, ncx}) {
        DCase c = base;
        INFO("G " << c.ic / c.g << " groups " << c.g << " W " << c.in.back() << (c.nxc ? " NXC" : " NCX"));
        const bool widened = c.nxc && base.in.back() != 16;
        for (data_type dt : {data_type::f16, data_type::bf16}) {
            c.dt = dt;
            for (const std::string isa : {"avx512_core", "avx2"}) {
                if (!runs(isa)) continue;
                const std::string d = c.make(isa).describe();
                INFO(isa << ": " << d);
                CHECK(d.find("(lane groups of") != std::string::npos);
                CHECK((d.find("widened to f32 in padded rows") != std::string::npos) == widened);
            }
            check_exact(c, kAllIsas);
        }
        c.dt = data_type::f32;  // (f32 reads its rows in place as before)
        check_exact(c, kAllIsas);
    }
}

// Groups of 6-17 input channels with a kernel larger than 1x1 (RegNetX's
// groups of 16 at 7x7, 3D groups of 6): the direct path with one vector of
// channels per group and the broadcast inside the FMA, not the column path
// (whose col2im costs a masked read-modify-write per group and tap). Odd
// OC/g: the bf16 pairs' last oc; IC/g = 12 and 17: channel tails.
TEST_CASE("data: narrow groups take the direct path with one vector", "[jit][data]") {
    struct Shape {
        int64_t g, icg, ocg;
        dims in, k;
    };
    for (const Shape& sh : {Shape{3, 16, 16, {7, 7}, {3, 3}}, Shape{2, 12, 13, {5, 9}, {3, 3}},
                            Shape{4, 6, 6, {4, 5, 6}, {3, 3, 3}}, Shape{2, 17, 15, {9}, {5}}}) {
        DCase c;
        c.g = sh.g;
        c.ic = sh.g * sh.icg;
        c.oc = sh.g * sh.ocg;
        c.in = sh.in;
        c.k = sh.k;
        c.pb = c.pe = dims(sh.in.size(), 1);
        INFO("g " << sh.g << " icg " << sh.icg << " ocg " << sh.ocg << " rank " << sh.in.size());
        const std::string d = c.make(testutil::vector_isa()).describe();
        INFO(d);
        CHECK(d.find(" direct ") != std::string::npos);
        if (sh.icg <= 16 && runs("avx512_core")) CHECK(d.find("n1x16") != std::string::npos);
        for (data_type dt : {data_type::f32, data_type::bf16, data_type::f16}) {
            c.dt = dt;
            check_exact(c, kAllIsas);
        }
    }
}

// With AVX512-BF16, bf16 columns multiply diff_dst's output-channel pairs
// by W packed in pairs (vdpbf16ps; an odd last output channel pairs with
// zero), f16 and the other ISAs widen to f32.
TEST_CASE("data: small input channels use the column path", "[jit][data]") {
    // pairs: bf16 stays on col with AVX512-BF16 (else direct vdpbf16ps
    // kernels win by the model; never col widened where pairs exist).
    auto check_col = [](const DCase& base, bool pairs_col) {
        for (data_type dt : {data_type::f32, data_type::bf16, data_type::f16}) {
            DCase c = base;
            c.dt = dt;
            check_exact(c, kAllIsas);
            const std::string d = c.make("avx512_core").describe();
            INFO(d);
            CHECK(d.find(" col ") != std::string::npos);
            // 16-bit columns on f32 FMAs of 4 or more lane blocks: diff_dst widened once a
            // chunk, for all of them (fewer widen in each kernel)
            const size_t at = d.find("lane block in ");
            REQUIRE(at != std::string::npos);
            const bool once = dt != data_type::f32 && std::stoi(d.substr(at + 14)) >= 4;
            CHECK((d.find("widened to f32 once a column chunk") != std::string::npos) == once);
            if (dt != data_type::bf16 || !runs("avx512_core_bf16")) continue;
            const std::string pairs = c.make("avx512_core_bf16").describe();
            INFO(pairs);
            CHECK((pairs.find(" col ") != std::string::npos) == pairs_col);
            CHECK(pairs.find("vdpbf16ps on oc pairs") != std::string::npos);
        }
    };
    DCase c;  // a first layer in miniature: ic 3, 7x7 stride 2 pad 3
    c.ic = 3;
    c.oc = 20;
    c.in = {17, 22};
    c.k = {7, 7};
    c.s = {2, 2};
    c.pb = {3, 3};
    c.pe = {2, 3};
    check_col(c, true);
    c.oc = 17;  // an odd last output channel
    check_col(c, true);
    // Rows of several column chunks (115 pixels in chunks of 50, the last
    // partial), three images: each chunk's run list is kept from row to
    // row and image to image, and rebuilt where the rows' (kd, kh) taps
    // change (the top and bottom rows).
    c.mb = 3;
    c.oc = 64;
    c.in = {13, 230};  // the top and bottom rows reach 4 taps each, not the same
    c.pe = {3, 2};
    check_col(c, true);
    CHECK(c.make("avx512_core").describe().find("50-pixel chunk") != std::string::npos);
    c.mb = 2;
    c.g = 2;  // grouped (10 output channels a group), dilated, 3D: a run per group and kw
    c.ic = 4;
    c.oc = 20;
    c.in = {5, 6, 9};
    c.k = {2, 3, 3};
    c.s = {1, 2, 2};
    c.d = {2, 1, 2};
    c.pb = {1, 1, 2};
    c.pe = {0, 2, 1};
    check_col(c, false);
    c.nxc = false;
    c.wfmt = "OIX";
    check_col(c, false);
    // A patch embedding in miniature (16x16 stride 16 from 3 channels: 768
    // lanes, 4 or more lane blocks reading one widened chunk; rows of 28
    // pixels), then in two groups (a group's channels widened pixel by pixel).
    DCase patch;
    static_cast<wtest::Case&>(patch) = wtest::conv2d(3, 40, {16, 448}, {16, 16});
    patch.s = {16, 16};
    check_col(patch, true);
    if (runs("avx512_core")) {
        patch.dt = data_type::f16;
        CHECK(patch.make("avx512_core").describe().find("once a column chunk") != std::string::npos);
    }
    patch.g = 2;  // two groups: each widened pixel by pixel
    patch.ic = 6;
    patch.oc = 34;
    check_col(patch, false);
    // A kernel only in D (3x1x1, a (2+1)D temporal layer): H and W carry no
    // tap, and the col path must still write every (n, id, ih) row.
    DCase t;
    t.ic = 2;
    t.oc = 64;
    t.in = {5, 3, 4};
    t.k = {3, 1, 1};
    t.pb = {1, 0, 0};
    t.pe = {0, 0, 0};
    check_col(t, false);
    // One input channel into one vector (a 3D U-Net's input, 1 -> 16
    // 3x3x3): the direct pairs plan is judged on its widened cost too, and
    // bf16 takes col with pairs (the direct pairs kernels had run 0.45x).
    DCase one;
    static_cast<wtest::Case&>(one) = wtest::conv2d(1, 16, {8, 8, 16}, {3, 3, 3});
    one.pb = one.pe = {1, 1, 1};
    check_col(one, true);
    // The path is chosen on the widened cost: a small dilated plane keeps its
    // row blocks in bf16 (col with pairs ran 0.37x there).
    DCase small;
    static_cast<wtest::Case&>(small) = wtest::conv2d(8, 8, {8, 5}, {3, 3});
    small.mb = 20;
    small.d = {1, 3};
    small.pb = {1, 3};
    small.pe = {1, 0};
    small.dt = data_type::bf16;
    check_exact(small, kAllIsas);
    if (runs("avx512_core_bf16")) CHECK(small.make("avx512_core_bf16").describe().find(" col ") == std::string::npos);
}

TEST_CASE("data: data and weight formats", "[jit][data]") {
    for (bool nxc : {true, false})
        for (const char* wfmt : {"XIO", "OIX"}) {
            DCase c;
            c.g = 2;
            c.ic = 34;
            c.oc = 10;
            c.in = {5, 8};
            c.s = {2, 1};
            c.pb = c.pe = {1, 1};
            c.nxc = nxc;
            c.wfmt = wfmt;
            INFO(nxc << " " << wfmt);
            check_exact(c);
            c.g = 6;  // lane groups of 4: W(oc = group·4 + o, ic) gathered per lane from either format
            c.ic = c.oc = 24;
            check_exact(c);
        }
}

TEST_CASE("data: 1x1 layers fold H into W", "[jit][data]") {
    DCase c;
    c.ic = 40;
    c.oc = 24;
    c.in = {6, 7};
    c.k = {1, 1};
    check_exact(c);
    CHECK(c.make("avx512_core").describe().find("planes") != std::string::npos);
    c.s = {2, 2};  // strided 1x1: odd rows and columns are zeros
    check_exact(c);
}

TEST_CASE("data: plain layers on small planes put several images in a row", "[jit][data]") {
    // 1x1, unit stride, unpadded layers whose image is under 16 pixels run
    // consecutive images as one W row (up to 32 pixels, whole images, every
    // row alike): squeeze-excitation planes of one pixel at mb 32 (one row)
    // and 33 (three rows of 11), 2x2 planes (rows of 8 images), 3D 1x1x3;
    // channel tails, NCX, all three types on every ISA (1-3 threads: "data:
    // bitwise identical for 1, 2 and 3 threads"). Not:
    // a 1x1 kernel with a pad, a stride or a 3D plane of several depths.
    struct Expect {
        int64_t mb, ic, oc;
        dims in;
        int64_t images;  // per row, 0: not batched
    };
    const Expect cases[] = {
            {32, 10, 240, {1, 1}, 32}, {33, 240, 10, {1, 1}, 11}, {8, 17, 40, {2, 2}, 8},
            {6, 33, 20, {1, 1, 3}, 6}, {5, 16, 16, {4, 4}, 0},
    };
    for (const Expect& e : cases) {
        DCase c;
        c.mb = e.mb;
        c.ic = e.ic;
        c.oc = e.oc;
        c.in = e.in;
        c.k = dims(e.in.size(), 1);
        for (bool nxc : {true, false})
            for (data_type dt : {data_type::f32, data_type::bf16, data_type::f16}) {
                c.nxc = nxc;
                c.dt = dt;
                if (runs("avx512_core")) {
                    const std::string d = c.make("avx512_core").describe();
                    INFO(d);
                    const std::string rows = "rows of " + std::to_string(e.images) + " images";
                    CHECK((d.find(e.images ? rows : " images") != std::string::npos) == (e.images > 0));
                }
                check_exact(c, kAllIsas);
            }
    }
    DCase padded;  // 1x1 with a pad: its own geometry
    padded.mb = 16;
    padded.ic = 8;
    padded.oc = 8;
    padded.in = {1, 1};
    padded.k = {1, 1};
    padded.pb = padded.pe = {1, 0};
    DCase strided = padded;
    strided.pb = strided.pe = {0, 0};
    strided.in = {3, 3};
    strided.s = {2, 2};
    DCase deep = strided;
    deep.in = {2, 1, 1};
    deep.k = {1, 1, 1};
    deep.s = {};
    deep.pb = deep.pe = {0, 0, 0};
    for (const DCase& c : {padded, strided, deep}) {
        if (runs("avx512_core")) CHECK(c.make("avx512_core").describe().find(" images") == std::string::npos);
        check_exact(c, kAllIsas);
    }
}

TEST_CASE("data: W packing by gathers and by transposed runs in every weights layout", "[jit][data][dtype]") {
    // AVX-512 packs W with 32-bit gathers (16-bit W widened: the dword
    // ending at each element, the lane of W's first element copied alone),
    // or, where each lane's oc rows are adjacent (XIO) and at least 8, by
    // masked loads of those runs and a 16 x 16 register transpose: f32,
    // widened f16 / bf16, and bf16 oc pairs (vdpbf16ps; in OIX two gathers
    // a pair, the elements ending their dwords). AVX2 packs XIO's runs in
    // 8 x 8 register transposes (f32, widened f16 / bf16), the rest of a
    // run's rows one at a time, and other layouts by 8-lane gathers. One input channel
    // (W a single column), one element, channel tails (dead lanes), groups,
    // 8 rows, whole 16-row tiles with tails, an odd oc count; XIO and OIX.
    struct Shape {
        int64_t g, ic, oc;
        dims in, k;
    };
    const Shape shapes[] = {{1, 1, 3, {5, 5}, {1, 1}},    {1, 1, 1, {1, 1}, {1, 1}},   {3, 3, 6, {4, 4}, {3, 3}},
                            {1, 17, 40, {5, 5}, {3, 3}},  {2, 20, 10, {4, 3}, {1, 1}}, {1, 33, 8, {3, 3}, {1, 1}},
                            {1, 16, 35, {4, 4}, {3, 3}},  {1, 40, 64, {3, 2}, {2, 1}}};
    for (const Shape& sh : shapes)
        for (const char* wfmt : {"XIO", "OIX"})
            for (data_type dt : {data_type::f32, data_type::f16, data_type::bf16}) {
                DCase c;
                c.g = sh.g;
                c.ic = sh.ic;
                c.oc = sh.oc;
                c.in = sh.in;
                c.k = sh.k;
                c.pb = c.pe = dims(sh.k.size(), sh.k[0] / 2);
                c.wfmt = wfmt;
                c.dt = dt;
                INFO(sh.ic << " -> " << sh.oc << " g " << sh.g << " " << wfmt << " " << convgrad::dtype_name(dt));
                if (dt == data_type::bf16)
                    check_exact(c, {"avx2", "avx512_core", "avx512_core_bf16"});  // widened, then oc pairs
                else
                    check_exact(c, {"avx2", "avx512_core"});
            }
}

TEST_CASE("data: row blocks carry a kh row's taps with the W edges compiled in", "[jit][data]") {
    // Planes up to 16 wide under unit strides run a whole diff_src row per
    // block; f32 and bf16 pairs take one entry per kh row, each diff_dst
    // pixel broadcast once for every kw tap reading it, and the (pixel,
    // tap) pairs that read past the diff_dst row left out of the kernel.
    // Kernels 2-5 wide, W dilation, one-sided, wide and no pads, H pads,
    // channel tails, oc cut into
    // L1-sized chunks (f32 sums kept between chunks; bf16 in scratch), an
    // odd oc (the last oc of a pair alone); f32, bf16 pairs, and bf16 / f16
    // widened in the padded rows (AVX-512 without BF16).
    struct Shape {
        int64_t ic, oc, ih, iw, kh, kw, dil, pl, pr, pt;
    };
    const Shape shapes[] = {
            {48, 40, 7, 7, 3, 3, 1, 1, 1, 1},   {16, 9, 5, 6, 3, 2, 1, 1, 0, 1},   {40, 33, 6, 9, 2, 5, 1, 2, 2, 0},
            {17, 20, 4, 8, 3, 3, 2, 2, 2, 1},   {32, 64, 3, 5, 3, 4, 1, 0, 3, 1},  {20, 17, 7, 7, 1, 3, 1, 3, 3, 0},
            {64, 241, 7, 7, 3, 3, 1, 1, 1, 1},  {33, 16, 5, 16, 3, 3, 1, 0, 0, 0}, {16, 31, 14, 14, 3, 3, 1, 1, 1, 1}};
    int row_taps = 0;
    for (const Shape& sh : shapes)
        for (data_type dt : {data_type::f32, data_type::bf16, data_type::f16}) {
            DCase c;
            c.ic = sh.ic;
            c.oc = sh.oc;
            c.in = {sh.ih, sh.iw};
            c.k = {sh.kh, sh.kw};
            c.d = {1, sh.dil};
            c.pb = {sh.pt, sh.pl};
            c.pe = {sh.pt, sh.pr};
            c.dt = dt;
            INFO(sh.ic << " -> " << sh.oc << " " << sh.ih << "x" << sh.iw << " k " << sh.kh << "x" << sh.kw << " dil "
                       << sh.dil << " pads " << sh.pl << "," << sh.pr << "," << sh.pt << " "
                       << convgrad::dtype_name(dt));
            // bf16: oc pairs, and widened to f32 in the padded rows as f16 is.
            const std::vector<std::string> isas = dt == data_type::bf16 ? std::vector<std::string>{"avx512_core_bf16", "avx512_core"}
                                                                        : std::vector<std::string>{"avx512_core"};
            for (const std::string& isa : isas)
                if (runs(isa)) row_taps += c.make(isa).describe().find("W edges compiled in") != std::string::npos;
            check_exact(c, isas);
        }
    // The ResNet-50 res5 3x3 layer's form, narrowed: 48 channels at 7x7.
    DCase c;
    c.ic = 48;
    c.oc = 40;
    c.in = {7, 7};
    c.pb = c.pe = {1, 1};
    if (runs("avx512_core")) {
        const std::string d = c.make("avx512_core").describe();
        INFO(d);
        CHECK(d.find("for valid (kd, kh) row: for oc: 9 W loads, 7 bcasts, 57 FMAs (W edges compiled in)") !=
              std::string::npos);
        CHECK(row_taps >= 16);  // 16 of the 36 when written: the others' blockings cost less by the model
    }
}

TEST_CASE("data: random reals within tolerance", "[jit][data]") {
    DCase c;
    c.ic = 48;
    c.oc = 400;  // long enough to be cut into oc chunks (W chunk > the L2 budget)
    c.in = {6, 6};
    c.pb = c.pe = {1, 1};
    const auto ref = c.make("ref");
    const auto dd = testutil::random_reals(data_type::f32, ref.input0_elems(), 5);
    const auto w = testutil::random_reals(data_type::f32, ref.input1_elems(), 6);
    const auto expect = testutil::run(ref, dd, w);
    for (const char* isa : {"avx512_core", "avx2"}) {
        if (!runs(isa)) continue;
        const auto o = c.make(isa);
        INFO(o.describe());
        // A 6-pixel row: AVX-512 takes whole rows as blocks, oc cut into
        // L1-sized chunks; AVX2 groups of rows.
        if (std::string(isa) == "avx512_core") {
            CHECK(o.describe().find("= a row") != std::string::npos);
            CHECK(o.describe().find("oc chunk of 400") == std::string::npos);
        } else {
            CHECK(o.describe().find("for group in") != std::string::npos);
        }
        // 3600 products of magnitude <= 1 per element, sums up to ~60:
        // f32 rounding of the chain stays well below 2e-3.
        CHECK(testutil::max_abs_diff(testutil::run(o, dd, w), expect) < 2e-3);
    }
}

TEST_CASE("data: bitwise identical for 1, 2 and 3 threads", "[jit][data]") {
    std::vector<DCase> cases(5);
    cases[0].ic = 35;
    cases[0].oc = 20;
    cases[0].in = {9, 10};
    cases[0].pb = cases[0].pe = {1, 1};
    // Each case is above kSerialMaxFlopsData, so it really runs on t threads.
    cases[1].g = cases[1].ic = cases[1].oc = 40;  // depthwise
    cases[1].in = {18, 20};
    cases[1].mb = 4;
    cases[2].ic = 3;  // column path, rows of one image split between threads
    cases[2].oc = 16;
    cases[2].mb = 1;
    cases[2].in = {30, 24};
    cases[2].k = {7, 7};
    cases[2].s = {2, 2};
    cases[2].pb = cases[2].pe = {3, 3};
    cases[3].g = 10;  // lane groups of 4
    cases[3].ic = cases[3].oc = 40;
    cases[3].in = {18, 20};
    cases[3].pb = cases[3].pe = {1, 1};
    cases[4].mb = 96;  // 1x1 planes: rows of 32 images, three of them
    cases[4].ic = 64;
    cases[4].oc = 512;
    cases[4].in = {1, 1};
    cases[4].k = {1, 1};
    for (const DCase& c : cases) {
        const auto o = c.make("avx512_core");
        const auto dd = testutil::random_reals(data_type::f32, o.input0_elems(), 1);
        const auto w = testutil::random_reals(data_type::f32, o.input1_elems(), 2);
        std::vector<testutil::Buffer> outs;
        INFO(o.flops() << " flop: " << o.describe());
        for (int t : {1, 2, 3}) {
            tbb::task_arena arena(t);
            arena.execute([&] {
                outs.push_back(testutil::run(o, dd, w));
                CHECK(testutil::threads_used(o) == t);  // large enough to split (op_threads)
            });
        }
        CHECK(testutil::bitwise_equal(outs[0], outs[1]));
        CHECK(testutil::bitwise_equal(outs[0], outs[2]));
    }
}

TEST_CASE("small ops run on the calling thread alone", "[jit][data][weights]") {
    // Weight gradients of at most 0.5 Mflop, data gradients of at most 0.3
    // Mflop (ops/executor.hpp): EfficientNet-B0 squeeze-excitation shapes (1x1
    // planes, 16 and 153 kflop), 64 -> 64 (262 and 524 kflop) and 128 -> 128
    // (1 Mflop) 1x1 layers, in an arena of 2. The runs match the reference.
    struct Shape {
        int64_t ic, oc, mb;
    };
    for (const Shape& sh : {Shape{32, 8, 32}, Shape{8, 32, 32}, Shape{240, 10, 32}, Shape{10, 240, 32},
                            Shape{64, 64, 32}, Shape{64, 64, 64}, Shape{128, 128, 32}}) {
        DCase d;
        d.ic = sh.ic;
        d.oc = sh.oc;
        d.mb = sh.mb;
        d.in = {1, 1};
        d.k = {1, 1};
        const wtest::Case& w = d;
        const double flops = 2.0 * sh.mb * sh.ic * sh.oc;
        struct Run {
            convgrad::op jit, ref;
            bool serial;
        };
        const Run runs[] = {{d.make("avx512_core"), d.make("ref"), flops <= 3e5},
                            {w.make("avx512_core"), w.make("ref"), flops <= 5e5}};
        for (const Run& r : runs) {
            INFO(sh.ic << " -> " << sh.oc << " mb " << sh.mb << ", " << flops << " flop, " << r.jit.describe());
            CHECK(r.jit.flops() == flops);
            const auto a = testutil::random_reals(data_type::f32, r.jit.input0_elems(), 3);
            const auto b = testutil::random_reals(data_type::f32, r.jit.input1_elems(), 4);
            tbb::task_arena arena(2);
            int used = 0;
            testutil::Buffer got;
            arena.execute([&] {
                got = testutil::run(r.jit, a, b);
                used = testutil::threads_used(r.jit);
            });
            CHECK(used == (r.serial ? 1 : 2));
            CHECK(testutil::max_abs_diff(got, testutil::run(r.ref, a, b)) < 1e-3);
        }
    }
}

TEST_CASE("data: concurrent execute from 8 threads on one op", "[jit][data]") {
    DCase c;
    c.ic = 24;
    c.oc = 16;
    c.in = {8, 8};
    c.pb = c.pe = {1, 1};
    const auto o = c.make("avx512_core");
    const auto dd = testutil::small_ints(data_type::f32, o.input0_elems(), 3);
    const auto w = testutil::small_ints(data_type::f32, o.input1_elems(), 4);
    const auto expect = testutil::run(c.make("ref"), dd, w);
    std::vector<testutil::Buffer> outs(8);
    std::vector<std::thread> threads;
    for (int i = 0; i < 8; ++i)
        threads.emplace_back([&, i] {
            for (int rep = 0; rep < 5; ++rep) outs[static_cast<size_t>(i)] = testutil::run(o, dd, w);
        });
    for (auto& t : threads) t.join();
    for (const auto& out : outs) CHECK(testutil::bitwise_equal(out, expect));
}

// ---- bf16 and f16 -------------------------------------------------------

namespace {

// The cases the f32 tests cover, in miniature: channel tails and odd oc
// (the last bf16 pair), strides / dilation / pads, groups, depthwise, the
// column path, folded 1x1, NCX / OIX, 3D, and oc cut into chunks.
std::vector<DCase> typed_cases() {
    std::vector<DCase> cs;
    DCase c;
    c.ic = 33;
    c.oc = 7;
    c.in = {5, 9};
    c.pb = c.pe = {1, 1};
    cs.push_back(c);
    c.ic = 17;
    c.oc = 70;
    c.s = {1, 2};
    c.pb = {2, 2};
    c.pe = {1, 2};
    cs.push_back(c);
    c = DCase();
    c.ic = 20;
    c.oc = 9;
    c.in = {9, 11};
    c.k = {3, 2};
    c.d = {2, 3};
    c.pb = {5, 4};
    c.pe = {4, 6};
    cs.push_back(c);
    c = DCase();
    c.g = 2;
    c.ic = 34;
    c.oc = 10;
    c.in = {5, 8};
    c.s = {2, 1};
    c.pb = c.pe = {1, 1};
    c.nxc = false;
    c.wfmt = "OIX";
    cs.push_back(c);
    c = DCase();
    c.g = c.ic = c.oc = 33;  // depthwise with a channel tail
    c.in = {5, 9};
    c.k = {3, 5};
    c.s = {1, 2};
    c.pb = {2, 2};
    c.pe = {3, 3};
    cs.push_back(c);
    c = DCase();
    c.ic = 3;  // column path
    c.oc = 20;
    c.in = {17, 22};
    c.k = {7, 7};
    c.s = {2, 2};
    c.pb = {3, 3};
    c.pe = {2, 3};
    cs.push_back(c);
    c = DCase();
    c.ic = 40;  // folded 1x1
    c.oc = 25;
    c.in = {6, 7};
    c.k = {1, 1};
    cs.push_back(c);
    c = DCase();
    c.ic = 18;  // 3D
    c.oc = 6;
    c.in = {4, 5, 6};
    c.k = {3, 2, 3};
    c.s = {2, 1, 2};
    c.pb = {1, 1, 1};
    c.pe = {1, 0, 2};
    cs.push_back(c);
    c = DCase();
    c.ic = 24;  // long reduction: oc chunks with f32 partial sums between them
    c.oc = 601;
    c.in = {4, 5};
    c.pb = c.pe = {1, 1};
    cs.push_back(c);
    return cs;
}

// o's output on the same random dt inputs at 1, 2 and 3 threads, each in its
// own task_arena; `split`: each run must also use all of its arena's threads.
std::vector<testutil::Buffer> outputs_at_1_2_3_threads(const convgrad::op& o, data_type dt, bool split) {
    const auto dd = testutil::random_reals(dt, o.input0_elems(), 1);
    const auto w = testutil::random_reals(dt, o.input1_elems(), 2);
    std::vector<testutil::Buffer> outs;
    for (int t : {1, 2, 3}) {
        tbb::task_arena arena(t);
        arena.execute([&] {
            outs.push_back(testutil::run(o, dd, w));
            if (split) CHECK(testutil::threads_used(o) == t);
        });
    }
    return outs;
}

}  // namespace

TEST_CASE("data bf16/f16: bitwise with small integers on every ISA", "[jit][data][dtype]") {
    for (data_type dt : {data_type::bf16, data_type::f16})
        for (DCase c : typed_cases()) {
            c.dt = dt;
            INFO(convgrad::dtype_name(dt) << " ic " << c.ic << " oc " << c.oc << " g " << c.g);
            check_exact(c, kAllIsas);
        }
}

TEST_CASE("data bf16: vdpbf16ps names its ISA, the others widen", "[jit][data][dtype]") {
    DCase c;
    c.ic = 32;
    c.oc = 33;
    c.pb = c.pe = {1, 1};
    c.dt = data_type::bf16;
    if (runs("avx512_core_bf16")) {
        const std::string d = c.make("avx512_core_bf16").describe();
        CHECK(d.rfind("jit:avx512_core_bf16 direct", 0) == 0);
        CHECK(d.find("vdpbf16ps on oc pairs") != std::string::npos);
    }
    if (runs("avx512_core")) CHECK(c.make("avx512_core").describe().find("bf16 widened to f32") != std::string::npos);
    CHECK(c.make("avx2").describe().rfind("jit:avx2 direct", 0) == 0);
    c.dt = data_type::f16;
    CHECK(c.make("avx2").describe().find("f16 widened to f32") != std::string::npos);
}

// Random reals: one f32 accumulation of L = OC·taps products of magnitude
// <= 1, then one rounding. Bound (docs/ACCURACY.md): |jit - ref| <=
// L·2^-23 (f32 sum error, generous) + one ulp of the output type at |ref|.
TEST_CASE("data bf16/f16: random reals within the single-rounding bound", "[jit][data][dtype]") {
    DCase c;
    c.ic = 48;
    c.oc = 300;
    c.in = {6, 6};
    c.pb = c.pe = {1, 1};
    const double reduction = double(c.oc) * 9;
    for (data_type dt : {data_type::bf16, data_type::f16}) {
        c.dt = dt;
        const auto ref = c.make("ref");
        const auto dd = testutil::random_reals(dt, ref.input0_elems(), 5);
        const auto w = testutil::random_reals(dt, ref.input1_elems(), 6);
        const auto expect = testutil::run(ref, dd, w);
        const int precision = dt == data_type::bf16 ? 8 : 11;
        for (const std::string& isa : kAllIsas) {
            if (!runs(isa)) continue;
            const auto o = c.make(isa);
            INFO(o.describe());
            const auto got = testutil::run(o, dd, w);
            int64_t bad = 0;
            for (int64_t i = 0; i < got.size(); ++i) {
                const double r = expect.get(i);
                const double ulp = std::ldexp(1.0, std::ilogb(std::max(std::fabs(r), 1e-30)) - (precision - 1));
                bad += std::fabs(got.get(i) - r) > reduction * std::ldexp(1.0, -23) + ulp;
            }
            CHECK(bad == 0);
        }
    }
}

TEST_CASE("data bf16/f16: bitwise identical for 1, 2 and 3 threads", "[jit][data][dtype]") {
    for (data_type dt : {data_type::bf16, data_type::f16})
        for (DCase c : typed_cases()) {
            c.dt = dt;
            // The smallest minibatch above kSerialMaxFlopsData, so the op runs on t threads.
            for (c.mb = 1; c.make("ref").flops() <= convgrad::detail::kSerialMaxFlopsData;) c.mb *= 2;
            const auto o = c.make(testutil::vector_isa());
            // (large enough to split: op_threads)
            const std::vector<testutil::Buffer> outs = outputs_at_1_2_3_threads(o, dt, true);
            INFO(o.describe());
            CHECK(testutil::bitwise_equal(outs[0], outs[1]));
            CHECK(testutil::bitwise_equal(outs[0], outs[2]));
        }
}

// Under a W stride the taps of one phase (s kw and one diff_dst pixel
// apart) share each entry's loads and permutes: lane groups of 2-8 and wide
// depthwise rows, strides 2 and 3, phases with 1-3 taps; bit for bit as the
// reference on every ISA and type.
TEST_CASE("data: strided row taps", "[jit][data][dtype]") {
    struct Shape {
        int64_t g, c, in, k, s, pad;
    };
    for (const Shape& sh : {Shape{16, 128, 60, 3, 2, 1}, Shape{8, 32, 61, 7, 3, 3}, Shape{48, 48, 64, 5, 2, 2}})
        for (data_type dt : {data_type::f32, data_type::bf16, data_type::f16}) {
            DCase c;
            c.dt = dt;
            c.mb = 2;
            c.g = sh.g;
            c.ic = c.oc = sh.c;
            c.in = {7, sh.in};
            c.k = {3, sh.k};
            c.s = {1, sh.s};
            c.pb = c.pe = {1, sh.pad};
            const auto jit = c.make(testutil::vector_isa());
            INFO(jit.describe());
            if (runs("avx512_core")) CHECK(jit.describe().find("taps of the phase") != std::string::npos);
            check_exact(c, kAllIsas);
        }
}

// 1024 channels put every diff_dst pixel 4 KiB apart, in one L1 set: the
// padded rows space their pixels a line further apart (f16 widened into
// them as f32), on every ISA, bit for bit as the reference.
TEST_CASE("data: padded rows spread pixels out of one L1 set", "[jit][data][dtype]") {
    for (data_type dt : {data_type::f32, data_type::f16}) {
        DCase c;
        c.dt = dt;
        c.mb = 2;
        c.g = 32;
        c.ic = c.oc = 1024;
        c.in = {7, 7};
        c.pb = c.pe = {1, 1};
        for (const std::string& isa : kAllIsas) {
            if (!runs(isa)) continue;
            const auto jit = c.make(isa);
            INFO(isa << ": " << jit.describe());
            if (isa != "avx2") CHECK(jit.describe().find("pixels spaced out of one L1 set") != std::string::npos);
        }
        check_exact(c, kAllIsas);
    }
}

// Depthwise lane groups whose channels end in half a vector (RegNetY's 104
// in groups of 8) cannot stream their stores: their blocks prefetch the
// diff_src lines for writing instead, at every W stride and data type,
// and equal the reference bit for bit.
TEST_CASE("data: lane groups with a partial vector prefetch diff_src for writing", "[jit][data][dtype]") {
    if (!runs("avx512_core")) return;
    for (data_type dt : {data_type::f32, data_type::bf16})
        for (int64_t stride : {1, 2}) {
            DCase c;
            c.dt = dt;
            c.mb = dt == data_type::f32 ? 4 : 8;  // 5.2 MB of diff_src
            c.g = 13;
            c.ic = c.oc = 104;
            c.in = {56, 56};
            c.s = {stride, stride};
            c.pb = c.pe = {1, 1};
            const auto jit = c.make(testutil::vector_isa());
            INFO(jit.describe());
            CHECK(jit.describe().find("lane groups of 8") != std::string::npos);
            CHECK(jit.describe().find("diff_src lines prefetched for writing") != std::string::npos);
            check_exact(c, {"avx512_core_bf16", "avx512_core"});
        }
}

// Large f32 depthwise outputs under a W stride whose pixels are not whole
// lines (72 channels: 288 bytes; RegNetY's 104 in groups of 8: 416)
// cannot stream from the kernels, whose phases write every other pixel:
// on AVX-512 an item computes its rows into scratch and streams them out
// whole. Into an output 64-byte aligned, 16 and 4 bytes off (the plain
// head and tail of the copy), on 1-3 threads, bit for bit as the
// reference, nothing written past the tensor.
TEST_CASE("data: depthwise rows that split lines are streamed out from scratch", "[jit][data]") {
    if (!runs("avx512_core")) return;
    struct Shape {
        int64_t g, c, hw, k, mb;
    };
    for (const Shape& sh : {Shape{72, 72, 112, 5, 8}, Shape{13, 104, 112, 3, 6}}) {  // over 32 MiB together
        DCase c;
        c.mb = sh.mb;
        c.g = sh.g;
        c.ic = c.oc = sh.c;
        c.in = {sh.hw, sh.hw};
        c.k = {sh.k, sh.k};
        c.s = {2, 2};
        c.pb = c.pe = {sh.k / 2, sh.k / 2};
        const auto ref = c.make("ref");
        const auto dd = testutil::small_ints(data_type::f32, ref.input0_elems(), 23);
        const auto w = testutil::small_ints(data_type::f32, ref.input1_elems(), 24);
        const auto expect = testutil::run(ref, dd, w);
        const size_t bytes = expect.bytes.size();
        std::unique_ptr<uint8_t, decltype(&std::free)> out(
                static_cast<uint8_t*>(std::aligned_alloc(64, (bytes + 128 + 63) / 64 * 64)), &std::free);
        for (int t : {1, 2, 3}) {
            tbb::task_arena arena(t);
            arena.execute([&] {
                const auto jit = c.make("avx512_core");
                INFO(sh.c << " channels, " << t << " threads: " << jit.describe());
                CHECK(jit.describe().find("row groups computed in scratch and streamed out") != std::string::npos);
                for (size_t offset : {0, 16, 4}) {
                    std::memset(out.get(), 0x7f, bytes + 128);
                    jit.execute(dd.data(), w.data(), out.get() + offset);
                    CHECK(std::memcmp(out.get() + offset, expect.data(), bytes) == 0);
                    size_t past = 0;
                    for (size_t i = offset + bytes; i < bytes + 128; ++i) past += out.get()[i] != 0x7f;
                    CHECK(past == 0);
                }
            });
        }
    }
}

// A large output with few FMAs per byte (depthwise; 1x1 with a short
// reduction) is written with streaming stores when its address is 64-byte
// aligned, with ordinary stores otherwise; both equal the reference. On
// AVX-512 every case streams; on AVX2 the f32 1x1 at least.
TEST_CASE("data: streaming stores, aligned and not", "[jit][data][dtype]") {
    int streamed = 0;
    for (data_type dt : {data_type::f32, data_type::bf16})
        for (bool dw : {true, false}) {
            DCase c;
            c.dt = dt;
            if (dw) {
                c.mb = dt == data_type::f32 ? 2 : 4;  // 16 MiB of diff_src
                c.g = c.ic = c.oc = 32;
                c.in = {256, 256};
                c.pb = c.pe = {1, 1};
            } else {
                c.mb = dt == data_type::f32 ? 6 : 12;  // 18 MiB
                c.ic = 256;
                c.oc = 16;
                c.in = {56, 56};
                c.k = {1, 1};
            }
            const auto ref = c.make("ref");
            const auto dd = testutil::small_ints(dt, ref.input0_elems(), 21);
            const auto w = testutil::small_ints(dt, ref.input1_elems(), 22);
            const auto expect = testutil::run(ref, dd, w);
            streamed += check_streaming(c, dd, w, expect);
        }
    CHECK(streamed >= (runs("avx512_core") ? 4 : 1));
}

// A depthwise case of g groups, c channels in every type, bit for bit as
// the reference on every ISA with diff_dst ending at an inaccessible page
// and, in a second run, starting right after one; seen(dt, isa, plan text)
// for each plan.
template <typename Seen>
void check_guarded_dw(int64_t g, int64_t c, const Geom& geo, Seen seen) {
    for (data_type dt : {data_type::f32, data_type::bf16, data_type::f16}) {
        DCase dc;
        dc.dt = dt;
        dc.g = g;
        dc.ic = dc.oc = c;
        set_geometry(dc, geo);
        const auto ref = dc.make("ref");
        const auto dd = testutil::small_ints(dt, ref.input0_elems(), 51);
        const auto w = testutil::small_ints(dt, ref.input1_elems(), 52);
        const auto expect = testutil::run(ref, dd, w);
        const dottest::Guarded dd_front(dd, true), dd_end(dd), gw(w);
        for (const std::string& isa : kAllIsas) {
            if (!runs(isa)) continue;
            const auto jit = dc.make(isa);
            INFO(g << " groups, " << c << " ch, " << convgrad::dtype_name(dt) << ", " << isa << ": "
                   << jit.describe());
            require_jit_named(jit, isa);
            seen(dt, isa, jit.describe());
            CHECK(testutil::bitwise_equal(dottest::run_guarded(jit, dd_front, gw), expect));
            CHECK(testutil::bitwise_equal(dottest::run_guarded(jit, dd_end, gw), expect));
        }
    }
}

// Depthwise and lane-group plans with an entry per kh row (or kernels
// one tap wide) read the diff_dst rows in place: each W phase's kernel has
// the row compiled in and leaves out the taps past its ends, block by block
// (rows of one to three pixels, where every block is an edge; wide and
// asymmetric pads; W dilation; W strides of 2 and 3 with the phase's taps
// in one entry; 1x1 at stride 2, whose odd pixels no tap reaches; lane
// groups; 1D and 3D; channel tails). diff_dst starts right after an
// inaccessible page and, in a second run, ends right before one: a read
// of a pixel outside the tensor faults, and one outside the row but inside
// the tensor adds a wrong value. Bit for bit as the reference, every type
// and ISA.
TEST_CASE("data: depthwise kernels compile the W edges in and read diff_dst in place", "[jit][data][dtype]") {
    // edges: the f32 AVX-512 plan compiles them in (the 1x1 has none, nor
    // has the 5-pixel row padded by 3: every tap lands inside diff_dst).
    // Rows too short for the accumulators a kh row's W vectors leave, and
    // W strides of 3, run a row's taps one at a time: "one at a time".
    struct Shape {
        int64_t g, c;
        Geom geo;
        bool edges;
    };
    const Shape shapes[] = {
            {32, 32, {{3, 1}, {3, 3}, {}, {}, {1, 1}, {1, 1}}, true},
            {16, 16, {{4, 2}, {3, 3}, {}, {}, {1, 1}, {1, 1}}, true},
            {17, 17, {{3, 3}, {3, 5}, {}, {}, {1, 2}, {1, 2}}, true},
            {48, 48, {{5, 14}, {3, 3}, {}, {}, {1, 1}, {1, 1}}, true},
            {40, 40, {{7, 7}, {7, 7}, {}, {}, {3, 3}, {3, 3}}, true},
            {24, 24, {{4, 9}, {3, 5}, {}, {1, 2}, {1, 4}, {1, 4}}, true},
            {33, 33, {{3, 11}, {3, 3}, {}, {}, {0, 2}, {2, 0}}, true},
            {20, 20, {{3, 5}, {3, 3}, {}, {}, {1, 3}, {1, 3}}, false},
            {48, 48, {{3, 60}, {3, 3}, {2, 2}, {}, {1, 1}, {1, 1}}, true},
            {32, 32, {{3, 64}, {3, 5}, {1, 2}, {}, {1, 2}, {1, 2}}, true},
            {16, 16, {{3, 61}, {3, 7}, {1, 3}, {}, {1, 3}, {1, 3}}, true},
            {32, 32, {{3, 9}, {1, 1}, {1, 2}, {}, {}, {}}, false},
            {8, 32, {{4, 10}, {3, 3}, {}, {}, {1, 1}, {1, 1}}, true},
            {4, 32, {{4, 13}, {3, 3}, {}, {}, {1, 1}, {1, 1}}, true},
            {64, 64, {{37}, {5}, {}, {}, {2}, {2}}, true},
            {24, 24, {{4, 5, 6}, {3, 3, 3}, {}, {}, {1, 1, 1}, {1, 1, 1}}, true},
    };
    int seq = 0;
    for (const Shape& sh : shapes)
        check_guarded_dw(sh.g, sh.c, sh.geo, [&](data_type dt, const std::string& isa, const std::string& d) {
            if (isa == "avx512_core" && dt == data_type::f32)
                CHECK((d.find("W edges compiled in, rows read in place") != std::string::npos) == sh.edges);
            seq += d.find("one at a time") != std::string::npos;
        });
    CHECK(seq >= 12);  // the one-at-a-time form ran (rows of one and two pixels, the W stride of 3, ...)
}

// Long depthwise kernels take a kh row's taps one at a time or in groups
// of 2-4 (the last group of a row holding fewer), and a run of
// kDataSeqLoopTaps or more taps over the same pixels of a block loops
// (bwd_data_kernel.hpp): the interior blocks' every tap, and the runs of an
// edge block between the taps where its first or last valid pixel moves.
// Rows with interior blocks and without (shorter than the kernel's reach),
// dilations 1-3 (runs of one tap at the edges), a W stride (phases), pads
// one-sided and past the kernel, lane groups, 2D rows (bf16: kh row pairs),
// channel tails. diff_dst ends at an inaccessible page (and, in a second
// run, starts right after one): a tap looped over a pixel past the row
// faults or adds a wrong value. Bit for bit as the reference.
TEST_CASE("data: long depthwise kernels loop over runs of taps", "[jit][data][dtype]") {
    struct Shape {
        int64_t g, c;
        Geom geo;
    };
    const Shape shapes[] = {
            {17, 17, {{60}, {33}, {}, {}, {16}, {16}}},
            {16, 16, {{50}, {19}, {}, {2}, {18}, {18}}},
            {9, 9, {{45}, {9}, {}, {3}, {12}, {12}}},
            {16, 16, {{10}, {25}, {}, {}, {12}, {12}}},
            {20, 20, {{80}, {33}, {2}, {}, {16}, {16}}},
            {16, 16, {{41}, {21}, {}, {}, {3}, {17}}},
            {24, 24, {{30}, {12}, {}, {}, {15}, {15}}},
            {8, 32, {{40}, {15}, {}, {}, {7}, {7}}},
            {16, 16, {{5, 40}, {3, 31}, {}, {}, {1, 15}, {1, 15}}},
            {33, 33, {{4, 23}, {2, 17}, {}, {1, 2}, {1, 16}, {0, 16}}},
    };
    int looped = 0, grouped = 0;
    for (const Shape& sh : shapes)
        check_guarded_dw(sh.g, sh.c, sh.geo, [&](data_type, const std::string&, const std::string& d) {
            looped += d.find("looped where they read the same pixels") != std::string::npos;
            grouped += d.find("in groups of") != std::string::npos;
        });
    CHECK(looped >= 20);
    CHECK(grouped >= 20);
}

// Small depthwise layers (few diff_dst pixels a channel) read W where it
// is instead of packing it every execute (DataPlan::w_in_place; 16-bit:
// widened as loaded, but for vdpbf16ps plans, whose pack pairs it): each
// tap's vectors at the channel block's offset in the user's tap, a tap a
// kw stride apart. Kernels of 1-13 taps a row, a W stride (phases: taps
// two kw apart) and dilation, 1D / 2D / 3D, several channel blocks run in
// one call, looped taps; XIO, and a 1x1 in OIX (its channels adjacent
// too: one input channel a group). W starts right after an
// inaccessible page and, in a second run, ends right before one; diff_dst
// likewise: bit for bit as the reference. Channel tails, OIX with taps
// and large layers keep the pack.
TEST_CASE("data: small depthwise layers read their weights in place", "[jit][data]") {
    struct Shape {
        int64_t mb, c;
        Geom geo;
        std::string wfmt;
        bool in_place;  // f32: the plan reads W in place
    };
    const Shape shapes[] = {
            {1, 1024, {{7, 7}, {3, 3}, {}, {}, {1, 1}, {1, 1}}, "XIO", true},
            {2, 256, {{14, 14}, {3, 3}, {2, 2}, {}, {1, 1}, {1, 1}}, "XIO", true},
            {1, 64, {{7, 7}, {13, 13}, {}, {}, {6, 6}, {6, 6}}, "XIO", true},
            {1, 48, {{9, 11}, {5, 5}, {1, 2}, {1, 1}, {4, 3}, {3, 4}}, "XIO", true},
            {1, 32, {{40}, {33}, {}, {1}, {32}, {32}}, "XIO", true},
            {2, 80, {{3, 4, 5}, {2, 2, 2}, {}, {}, {1, 1, 1}, {0, 0, 0}}, "XIO", true},
            {1, 96, {{6, 6}, {1, 1}, {}, {}, {}, {}}, "OIX", true},
            {1, 64, {{7, 7}, {3, 3}, {}, {}, {1, 1}, {1, 1}}, "OIX", false},  // a channel's taps adjacent: packed
            {1, 40, {{7, 7}, {3, 3}, {}, {}, {1, 1}, {1, 1}}, "XIO", false},  // AVX-512: a tail of 8 lanes
            {64, 32, {{16, 16}, {3, 3}, {}, {}, {1, 1}, {1, 1}}, "XIO", false},  // 16384 pixels a channel
    };
    int in_place = 0;
    for (const Shape& sh : shapes)
        for (data_type dt : {data_type::f32, data_type::bf16, data_type::f16}) {
            DCase dc;
            dc.dt = dt;
            dc.mb = sh.mb;
            dc.g = dc.ic = dc.oc = sh.c;
            dc.wfmt = sh.wfmt;
            set_geometry(dc, sh.geo);
            const auto ref = dc.make("ref");
            const auto dd = testutil::small_ints(dt, ref.input0_elems(), 61);
            const auto w = testutil::small_ints(dt, ref.input1_elems(), 62);
            const auto expect = testutil::run(ref, dd, w);
            const dottest::Guarded dd_front(dd, true), dd_end(dd), w_front(w, true), w_end(w);
            for (const std::string& isa : kAllIsas) {
                if (!runs(isa)) continue;
                const auto jit = dc.make(isa);
                const std::string d = jit.describe();
                INFO(sh.c << " ch, " << sh.wfmt << ", " << convgrad::dtype_name(dt) << ", " << isa << ": " << d);
                require_jit_named(jit, isa);
                const bool reads = d.find("W read in place") != std::string::npos;
                in_place += reads;
                if (isa == "avx512_core") CHECK(reads == sh.in_place);  // (bf16: widened, no vdpbf16ps)
                if (d.find("vdpbf16ps") != std::string::npos) CHECK_FALSE(reads);
                CHECK(testutil::bitwise_equal(dottest::run_guarded(jit, dd_front, w_end), expect));
                CHECK(testutil::bitwise_equal(dottest::run_guarded(jit, dd_end, w_front), expect));
            }
        }
    CHECK(in_place >= (runs("avx512_core") ? 30 : 3));
}

// Depthwise layers whose diff_dst and diff_src together exceed 8 MiB
// (kDwPrefetchBytes) prefetch the row each next diff_src row reads first,
// block by block, to L2.
TEST_CASE("data: large depthwise layers prefetch the next diff_dst row", "[jit][data]") {
    DCase c;
    c.mb = 3;  // 24 MiB each
    c.g = c.ic = c.oc = 32;
    c.in = {256, 256};
    c.pb = c.pe = {1, 1};
    const std::vector<std::string> isas{"avx2", "avx512_core"};
    auto prefetches = [&](const DCase& x, const std::string& isa) {
        const std::string d = x.make(isa).describe();
        INFO(isa << ": " << d);
        CHECK(d.find("W edges compiled in, rows read in place") != std::string::npos);
        return d.find("rows read in place, the next one prefetched to L2") != std::string::npos;
    };
    for (const std::string& isa : isas) {
        if (!runs(isa)) continue;
        CHECK(prefetches(c, isa));
        DCase small = c;  // 4 MiB each: 8 MiB together
        small.mb = 1;
        small.in = {128, 256};
        CHECK_FALSE(prefetches(small, isa));
        small.in = {129, 256};  // just over
        CHECK(prefetches(small, isa));
    }
    check_exact(c, isas);
}

namespace {

// An NCX case in every type: describe() on avx512_core names `marker`; a
// run on NaN inputs first (a window's stale bytes would show), then exact
// on every ISA at 2 and 3 threads, and 1-3 threads bitwise alike.
void check_ncx_case(const DCase& base, const std::string& marker) {
    for (data_type dt : {data_type::f32, data_type::bf16, data_type::f16}) {
        DCase t = base;
        t.dt = dt;
        const auto ref = t.make("ref");
        if (runs("avx512_core")) {
            const std::string d = t.make("avx512_core").describe();
            INFO(d);
            CHECK(d.find(marker) != std::string::npos);
        }
        testutil::Buffer nan_dd(dt, ref.input0_elems()), nan_w(dt, ref.input1_elems());
        std::fill(nan_dd.bytes.begin(), nan_dd.bytes.end(), uint8_t(0xff));
        std::fill(nan_w.bytes.begin(), nan_w.bytes.end(), uint8_t(0xff));
        for (const std::string& isa : kAllIsas)
            if (runs(isa)) testutil::run(t.make(isa), nan_dd, nan_w);
        for (int threads : {2, 3}) {  // a thread's first item need not start a row group
            tbb::task_arena arena(threads);
            arena.execute([&] { check_exact(t, kAllIsas); });
        }
        const std::vector<testutil::Buffer> outs = outputs_at_1_2_3_threads(t.make(testutil::vector_isa()), dt, false);
        CHECK(testutil::bitwise_equal(outs[0], outs[1]));
        CHECK(testutil::bitwise_equal(outs[0], outs[2]));
    }
}

}  // namespace

TEST_CASE("data: NCX depthwise goes through per-item NXC windows", "[jit][data][dtype]") {
    // Each item transposes the diff_dst rows it reads into an NXC window and
    // its diff_src rows back (DataPlan::ncx_windows): row groups that cross
    // images, whole images, strides (16-bit: phases no tap reaches, zeroed
    // apart), dilation, one-sided pads, 1D / 3D, row blocks, channel runs
    // split between items, lane groups, grouped direct plans, every type and
    // ISA, 1-3 threads bitwise alike;
    // after a run on NaN inputs (a window's stale bytes would show); and a
    // large output streamed back, into an aligned buffer and one 16 bytes
    // off (ordinary stores), starting as 0x7f bytes.
    auto dw = [](int64_t ch, dims in, dims k) {
        DCase c;
        c.g = c.ic = c.oc = ch;
        c.in = std::move(in);
        c.k = std::move(k);
        c.nxc = false;
        c.mb = 3;
        return c;
    };
    std::vector<DCase> cases;
    DCase c = dw(17, {34, 33}, {3, 3});  // 4.5 KB f32 planes: groups of rows across images
    c.pb = c.pe = {1, 1};
    cases.push_back(c);
    c = dw(40, {9, 9}, {3, 3});  // strides 2, whole images
    c.s = {2, 2};
    c.pb = c.pe = {1, 1};
    cases.push_back(c);
    c = dw(24, {12, 13}, {1, 2});  // W stride 3: phases no tap reaches
    c.s = {2, 3};
    cases.push_back(c);
    c = dw(160, {120, 121}, {1, 2});  // and in items of channel runs, rows split between threads
    c.s = {2, 3};
    c.mb = 1;
    cases.push_back(c);
    c = dw(20, {40, 31}, {5, 5});  // H stride and dilation, one-sided pads
    c.s = {2, 1};
    c.d = {2, 1};
    c.pb = {4, 2};
    c.pe = {0, 2};
    c.wfmt = "OIX";
    cases.push_back(c);
    c = dw(18, {4, 5, 6}, {3, 3, 3});  // 3D
    c.pb = c.pe = {1, 1, 1};
    cases.push_back(c);
    c = dw(32, {250}, {3});  // 1D (longer rows: ops/exec_dw_rows.cpp)
    c.pb = c.pe = {1};
    cases.push_back(c);
    c = dw(32, {7, 7}, {3, 3});  // row blocks
    c.pb = c.pe = {1, 1};
    cases.push_back(c);
    c = dw(512, {20, 20}, {3, 3});  // one image: items of channel runs
    c.mb = 1;
    c.pb = c.pe = {1, 1};
    cases.push_back(c);
    c = dw(96, {30, 30}, {3, 3});  // lane groups of 4, W stride 2
    c.g = 24;
    c.s = {2, 2};
    c.pb = c.pe = {1, 1};
    cases.push_back(c);
    c = dw(72, {15, 14}, {3, 3});  // grouped direct: 3 groups of 24 -> 40 (blocks of a group, runs of groups)
    c.g = 3;
    c.oc = 120;
    c.pb = c.pe = {1, 1};
    cases.push_back(c);
    c.ic = 3 * 80;  // several channel blocks a group
    c.oc = 3 * 200;
    c.mb = 2;
    cases.push_back(c);
    c = dw(128, {12, 12}, {3, 3});  // groups of 16: one block a group, runs of several groups
    c.g = 8;
    c.pb = c.pe = {1, 1};
    cases.push_back(c);
    for (const DCase& base : cases) check_ncx_case(base, "NCX rows through NXC windows");
    for (data_type dt : {data_type::f32, data_type::bf16}) {
        DCase big = dw(32, {64, 64}, {3, 3});  // 4 MiB of diff_src, planes of whole lines
        big.dt = dt;
        big.mb = dt == data_type::f32 ? 8 : 16;
        big.pb = big.pe = {1, 1};
        const auto jit = big.make(testutil::vector_isa());
        INFO(jit.describe());
        if (runs("avx512_core"))
            CHECK(jit.describe().find("NCX rows through NXC windows (streamed back)") != std::string::npos);
        const auto ref = big.make("ref");
        const auto dd = testutil::small_ints(dt, ref.input0_elems(), 21);
        const auto w = testutil::small_ints(dt, ref.input1_elems(), 22);
        const auto expect = testutil::run(ref, dd, w);
        const size_t bytes = expect.bytes.size();
        std::unique_ptr<uint8_t, decltype(&std::free)> out(static_cast<uint8_t*>(std::aligned_alloc(64, (bytes + 64 + 63) / 64 * 64)),
                                                           &std::free);
        for (size_t offset : {0, 16}) {
            std::memset(out.get(), 0x7f, bytes + 64);
            jit.execute(dd.data(), w.data(), out.get() + offset);
            CHECK(std::memcmp(out.get() + offset, expect.data(), bytes) == 0);
        }
    }
}

TEST_CASE("data: NCX depthwise windows space pixels a multiple of 512 bytes apart a line further", "[jit][data][dtype]") {
    // DataPlan::window_pad: the windows' pixels one line wider where the
    // tensor's pixels (channels x element bytes) are a multiple of 512
    // bytes, on both ISAs and for every type: strides, dilation, lane
    // groups, 3D; channels between (136) keep the windows unpadded. Each
    // is checked as the other NCX cases are (every ISA, 1-3 threads, NaN
    // runs before).
    struct Case {
        int64_t g, ch;
        dims in, k, s, d, p;
    };
    const std::vector<Case> cases = {
            {1024, 1024, {7, 7}, {3, 3}, {1, 1}, {1, 1}, {1, 1}},   // 4 / 2 KiB
            {512, 512, {9, 9}, {3, 3}, {2, 2}, {1, 1}, {1, 1}},     // 2 / 1 KiB, W phases
            {128, 128, {12, 11}, {3, 3}, {1, 1}, {2, 2}, {2, 2}},   // 512 / 256 bytes, dilated
            {64, 256, {10, 10}, {3, 3}, {1, 1}, {1, 1}, {1, 1}},    // lane groups of 4
            {256, 256, {3, 4, 5}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}},
            {256, 256, {7, 9}, {1, 2}, {2, 3}, {1, 1}, {0, 0}},     // pixels no tap reaches (zeroed apart)
            {136, 136, {8, 8}, {3, 3}, {1, 1}, {1, 1}, {1, 1}},     // 544 / 272 bytes
    };
    for (const Case& e : cases) {
        DCase c;
        c.g = e.g;
        c.ic = c.oc = e.ch;
        c.in = e.in;
        c.k = e.k;
        c.s = e.s;
        c.d = e.d;
        c.pb = c.pe = e.p;
        c.nxc = false;
        c.mb = 2;
        for (data_type dt : {data_type::f32, data_type::bf16, data_type::f16}) {
            c.dt = dt;
            const bool pad = e.ch * (dt == data_type::f32 ? 4 : 2) % 512 == 0;
            for (const std::string isa : {"avx2", "avx512_core"}) {
                if (!runs(isa)) continue;
                const std::string plan = c.make(isa).describe();
                INFO(isa << ": " << plan);
                CHECK(plan.find("NCX rows through NXC windows") != std::string::npos);
                CHECK((plan.find("windows of pixels +64 bytes") != std::string::npos) == pad);
            }
        }
        check_ncx_case(c, "NCX rows through NXC windows");
    }
}

TEST_CASE("data: NCX dense layers copy per item or per image, never whole tensors", "[jit][data][dtype]") {
    // Dense direct plans take the per-item windows too, every output
    // channel of the item's diff_dst rows, kept for the next channel block
    // of the row group (several blocks: the window read again, not filled
    // again); column plans (first layers) transpose an image of diff_dst at
    // a time and write their diff_src rows back (threads splitting an
    // image: each its rows). Strides, pads, 3D, every type and ISA.
    auto dense = [](int64_t ic, int64_t oc, dims in, dims k) {
        DCase c;
        c.ic = ic;
        c.oc = oc;
        c.in = std::move(in);
        c.k = std::move(k);
        c.nxc = false;
        c.mb = 3;
        return c;
    };
    std::vector<DCase> direct;
    DCase c = dense(40, 24, {17, 15}, {3, 3});
    c.pb = c.pe = {1, 1};
    direct.push_back(c);
    c = dense(200, 48, {9, 10}, {3, 3});  // several channel blocks a row group
    c.pb = {1, 0};
    c.pe = {0, 2};
    direct.push_back(c);
    c = dense(64, 48, {21, 20}, {3, 3});  // strides 2
    c.s = {2, 2};
    c.pb = c.pe = {1, 1};
    direct.push_back(c);
    c = dense(48, 32, {5, 6, 7}, {3, 3, 3});  // 3D
    c.pb = c.pe = {1, 1, 1};
    direct.push_back(c);
    c = dense(48, 64, {4200}, {3});  // 1D rows over 1 MiB (f32): windows of segments
    c.pb = c.pe = {1};
    c.mb = 2;
    direct.push_back(c);
    for (const DCase& base : direct) check_ncx_case(base, "NCX rows through NXC windows");
    c = dense(3, 32, {30, 29}, {7, 7});  // first layer: columns
    c.s = {2, 2};
    c.pb = c.pe = {3, 3};
    check_ncx_case(c, "NCX: each image's diff_dst to NXC scratch");
    c.mb = 1;  // threads split the image
    check_ncx_case(c, "NCX: each image's diff_dst to NXC scratch");

    // What every thread keeps after an execute at mb 16 stays well under
    // whole-tensor copies of diff_dst and diff_src.
    c = dense(64, 64, {56, 56}, {3, 3});
    c.pb = c.pe = {1, 1};
    DCase first = dense(3, 64, {112, 112}, {7, 7});
    first.s = {2, 2};
    first.pb = first.pe = {3, 3};
    DCase long1d = dense(32, 64, {4200}, {3});
    long1d.pb = long1d.pe = {1};
    for (DCase big : {c, first, long1d}) {
        big.mb = 16;
        for (const char* isa : {"avx512_core", "avx2"}) {
            if (!runs(isa)) continue;
            const auto jit = big.make(isa);
            INFO(isa << "\n" << jit.describe());
            const auto dd = testutil::random_reals(data_type::f32, jit.input0_elems(), 1);
            const auto w = testutil::random_reals(data_type::f32, jit.input1_elems(), 2);
            const size_t whole = (jit.input0_elems() + jit.output_elems()) * 4;
            convgrad::detail::release_scratch();
            (void)testutil::run(jit, dd, w);
            CHECK(convgrad::detail::kept_scratch_bytes() > 0);
            CHECK(convgrad::detail::kept_scratch_bytes() < whole / 2);
            convgrad::detail::release_scratch();
        }
    }
}

// 16-bit outputs of strided layers, and AVX2's f32 ones: the W phases no
// tap reaches, and the rows no kernel row reaches, are zeroed apart from
// the kernels, once for every channel (see direct_item; AVX-512 f32 keeps
// them in the kernels, and runs here too). Every such pixel must be
// written: the output starts as 0x7f bytes. Phases of 1x1 s2 / s3 and of 2
// taps at stride 3 (some phases reached, some not), a D stride (whole
// planes of zero rows), groups, both data formats, every ISA; and large
// layers (bf16, f32) with streaming stores, at an aligned output (zeros
// streamed) and one 16 bytes off (plain stores).
TEST_CASE("data: strided layers' inserted zeros are written apart from the kernels", "[jit][data][dtype]") {
    std::vector<DCase> cs;
    DCase c;
    c.mb = 2;
    c.ic = 48;
    c.oc = 40;
    c.in = {9, 11};
    c.k = {1, 1};
    c.s = {2, 2};
    cs.push_back(c);
    c.s = {3, 3};
    c.g = 2;
    cs.push_back(c);
    c.g = 1;
    c.k = {2, 2};
    c.in = {11, 10};
    cs.push_back(c);
    DCase d3;
    d3.mb = 1;
    d3.ic = 32;
    d3.oc = 24;
    d3.in = {5, 7, 9};
    d3.k = {1, 2, 1};
    d3.s = {3, 2, 2};
    d3.pb = d3.pe = {0, 0, 0};
    cs.push_back(d3);
    for (DCase v : cs)
        for (data_type dt : {data_type::bf16, data_type::f16, data_type::f32})
            for (bool nxc : {true, false}) {
                v.dt = dt;
                v.nxc = nxc;
                INFO(wtest::label(v, "") << " " << convgrad::dtype_name(dt));
                check_exact(v, kAllIsas);
            }
    for (data_type dt : {data_type::bf16, data_type::f32}) {
        DCase big;
        big.mb = dt == data_type::f32 ? 3 : 6;  // 9.6 MB of diff_src, 3/4 of it zeros
        big.ic = 256;
        big.oc = 128;
        big.in = {56, 56};
        big.k = {1, 1};
        big.s = {2, 2};
        big.dt = dt;
        INFO(convgrad::dtype_name(dt));
        const auto ref = big.make("ref");
        const auto dd = testutil::small_ints(big.dt, ref.input0_elems(), 31);
        const auto w = testutil::small_ints(big.dt, ref.input1_elems(), 32);
        const auto expect = testutil::run(ref, dd, w);
        check_streaming(big, dd, w, expect);
    }
}

// One kernel call runs several channel blocks of a row (DataPlan::cb_reps):
// the groups of a direct plan with one block a group (row blocks too: a
// plane's rows), a depthwise plan's
// blocks with a narrower last block alone (lane groups of 8 and 16, the
// depthwise convolution), a dense layer's blocks (a strided 1x1 on short
// rows, in NXC and NCX; 3x3 taps, 200 channels whose last block is
// narrower), and runs cut short so that few rows still give
// every thread items (mb 1, two rows). 16-bit outputs of a direct plan
// whose oc comes in several chunks carry f32 partial sums per rep. Bit for
// bit with small integers on every ISA and on 1, 2 and 3 threads.
TEST_CASE("data: a row's channel blocks run in one call", "[jit][data][dtype]") {
    std::vector<DCase> cs;
    DCase c;
    c.g = 6;  // direct, one block of 40 channels a group
    c.ic = 6 * 40;
    c.oc = 6 * 20;
    c.in = {7, 12};
    c.s = {1, 2};
    c.pb = c.pe = {1, 1};
    cs.push_back(c);
    c.s = {2, 3};
    c.k = {3, 4};
    cs.push_back(c);
    DCase planes;  // row blocks: 16 planes of 5x5, every group of a plane in one call
    planes.mb = 16;
    planes.g = 4;
    planes.ic = planes.oc = 4 * 16;
    planes.in = {5, 5};
    planes.pb = planes.pe = {1, 1};
    cs.push_back(planes);
    DCase chunks;  // 5x5 taps of 208 oc a group: f32 and f16 W in two oc chunks
    chunks.mb = 4;
    chunks.g = 4;
    chunks.ic = 4 * 32;
    chunks.oc = 4 * 208;
    chunks.in = {4, 20};
    chunks.k = {5, 5};
    chunks.s = {1, 2};
    chunks.pb = chunks.pe = {2, 2};
    cs.push_back(chunks);
    for (int64_t lg : {8, 16}) {  // lane groups, the last block narrower
        DCase l;
        l.g = lg == 8 ? 41 : 9;
        l.ic = l.oc = l.g * lg;
        l.mb = 4;
        l.in = {6, 10};
        l.s = {2, 2};
        l.pb = l.pe = {1, 1};
        cs.push_back(l);
    }
    for (int64_t s : {1, 2}) {  // depthwise, 400 channels
        DCase d;
        d.g = d.ic = d.oc = 400;
        d.in = {5, 9};
        d.s = {s, s};
        d.pb = d.pe = {1, 1};
        cs.push_back(d);
    }
    DCase dense;  // strided 1x1 on 7-pixel rows, 512 channels in blocks
    dense.mb = 8;
    dense.ic = 512;
    dense.oc = 96;
    set_geometry(dense, {{14, 14}, {1, 1}, {2, 2}, {}, {}, {}});
    cs.push_back(dense);
    dense.nxc = false;
    cs.push_back(dense);
    DCase narrow_last = dense;  // 3x3 taps, 200 channels: the last block narrower
    narrow_last.nxc = true;
    narrow_last.ic = 200;
    narrow_last.oc = 40;
    set_geometry(narrow_last, {{5, 9}, {3, 3}, {}, {}, {1, 1}, {1, 1}});
    cs.push_back(narrow_last);
    DCase cut;  // two rows of 1040 channels: runs cut for the threads
    cut.mb = 1;
    cut.g = cut.ic = cut.oc = 1040;
    cut.in = {2, 9};
    cut.pb = cut.pe = {1, 1};
    cs.push_back(cut);
    for (DCase v : cs) {
        INFO(wtest::label(v, ""));
        int together = 0;  // types whose plan runs blocks together (the blockings differ by type)
        for (data_type dt : {data_type::f32, data_type::bf16, data_type::f16}) {
            v.dt = dt;
            INFO(convgrad::dtype_name(dt));
            check_exact(v, kAllIsas);
            const auto ref = v.make("ref");
            const auto dd = testutil::small_ints(dt, ref.input0_elems(), 41);
            const auto w = testutil::small_ints(dt, ref.input1_elems(), 42);
            const auto expect = testutil::run(ref, dd, w);
            const auto jit = v.make(testutil::vector_isa());
            INFO(jit.describe());
            together += jit.describe().find(" a call") != std::string::npos;
            if (v.oc == chunks.oc && dt == data_type::f16 && runs("avx512_core"))  // f32 partial sums between chunks
                CHECK(jit.describe().find("oc chunk of 208") == std::string::npos);
            for (int t : {1, 2, 3}) {
                tbb::task_arena arena(t);
                arena.execute([&] { CHECK(testutil::bitwise_equal(testutil::run(jit, dd, w), expect)); });
            }
        }
        // The direct groups and dense layers: every type. Not the groups of
        // 16 (g 9): lane groups in bf16 only, whose calls run a block each.
        if (runs("avx512_core") && v.g != 9) CHECK(together >= (v.g == 6 || v.g == 4 || v.g == 1 ? 3 : 1));
    }
}

// Row blocks of narrow channel blocks take several diff_src rows a block
// (DataKernelDesc::block_rows): the rows share each oc step's W loads and
// add accumulator chains, and a call's leftover rows (top and bottom rows
// read fewer kh taps) run one a block. Planes 4-8 wide (2 and 3 rows a
// block), groups, H dilation, an odd oc (bf16's last oc alone), oc in
// chunks (bf16 partial sums in f32); exact on every ISA.
TEST_CASE("data: row blocks of several rows", "[jit][data][dtype]") {
    struct Shape {
        int64_t g, ic, oc, ih, iw, dh;
    };
    const Shape shapes[] = {{1, 16, 17, 7, 7, 1}, {3, 48, 48, 7, 7, 1}, {1, 4, 6, 8, 8, 2},
                            {1, 16, 40, 9, 4, 1}, {1, 16, 1200, 7, 7, 1}};
    for (const Shape& sh : shapes) {
        int blocks = 0;
        for (data_type dt : {data_type::f32, data_type::bf16, data_type::f16}) {
            DCase c = two_images(sh.g, sh.ic, sh.oc, dt);
            c.in = {sh.ih, sh.iw};
            c.d = {sh.dh, 1};
            c.pb = c.pe = {sh.dh, 1};
            INFO(wtest::label(c, "") << " " << convgrad::dtype_name(dt));
            const std::string d = c.make(testutil::vector_isa()).describe();
            INFO(d);
            blocks += d.find(" rows, rows of a plane") != std::string::npos;
            check_exact(c, kAllIsas);
        }
        if (runs("avx512_core")) CHECK(blocks >= 1);  // (AVX2 plans take rows one at a time)
    }
}

// Under a stride, planes up to 28 wide run a whole diff_src row a block,
// every W phase of it (DataKernelDesc::row_stride): each diff_dst pixel
// broadcast once for the taps that read it, the (pixel, tap) pairs of
// another phase or past the row left out of the kernel, and under an H
// stride each row a call with its own kh taps. Groups of 16 at 14 and 28
// wide (RegNetX-400MF's and ResNeXt-50's grouped 3x3 s2 layers, fewer
// groups), W stride 3 with a kernel of 2 (every third pixel and row takes no
// tap: zeros), W dilation 2 under stride 2 (odd pixels: zeros), asymmetric
// pads, an H stride alone and a W stride alone (rows of a plane sharing
// their kh taps), channel tails, oc in chunks (f32 sums kept between
// them; bf16 in scratch), an odd oc; NCX; exact on every ISA and type,
// the output starting as 0x7f bytes.
TEST_CASE("data: strided rows run their W phases in one block", "[jit][data][dtype]") {
    const GeomCase shapes[] = {
            {3, 48, 48, {{14, 14}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {0, 0}}, true},
            {2, 32, 32, {{28, 28}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {0, 0}}, true},
            {1, 32, 9, {{9, 9}, {2, 2}, {3, 3}, {1, 1}, {0, 0}, {0, 0}}, true},
            {2, 32, 34, {{8, 11}, {3, 3}, {2, 2}, {1, 2}, {1, 2}, {1, 2}}, true},
            {1, 20, 17, {{7, 12}, {3, 3}, {2, 1}, {1, 1}, {1, 1}, {1, 1}}, true},
            {1, 16, 33, {{6, 13}, {1, 3}, {1, 2}, {1, 1}, {0, 2}, {0, 1}}, true},
            {1, 32, 1201, {{9, 9}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}}, true},
            {3, 48, 48, {{14, 14}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {0, 0}}, false}};
    for (const GeomCase& sh : shapes)
        check_types(sh, [&](const std::string& d) {
            return d.find(" W phases together") != std::string::npos ||
                   (sh.geo.s[1] == 1 && d.find("for valid (kd, kh) row") != std::string::npos);
        });
    // RegNetX-400MF s4's grouped 3x3 s2 layer, fewer groups: a row of 14
    // pixels a block, 3 W loads, the 7 pixels of a diff_dst row
    // broadcast, 20 FMAs (pixel 0 reads no tap 0), each row a call.
    DCase c;
    c.g = 2;
    c.ic = c.oc = 32;
    c.in = {14, 14};
    c.s = {2, 2};
    c.pb = {1, 1};
    c.pe = {0, 0};
    if (runs("avx512_core")) {
        const std::string d = c.make("avx512_core").describe();
        INFO(d);
        CHECK(d.find("direct m14 n1x16 threads") != std::string::npos);
        CHECK(d.find("for block of 14 pixels = a row, its 2 W phases together, a call a row") != std::string::npos);
        CHECK(d.find("for valid (kd, kh) row: for oc: 3 W loads, 7 bcasts, 20 FMAs (W edges compiled in)") !=
              std::string::npos);
    }
}

// Unit-stride rows of 17-28 pixels, too wide for a row block without
// them, take row taps too (a row a block, n = 1): ResNet-50's res3 3x3
// and Inception-v3's 1x7 layers narrowed, W dilation with pads wider than
// the kernel, channel tails, an odd oc in chunks, groups of 16; NCX; exact
// on every ISA and type.
TEST_CASE("data: unit-stride rows of 17-28 pixels run row taps", "[jit][data][dtype]") {
    const GeomCase shapes[] = {{1, 48, 40, {{6, 28}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}}, true},
                               {1, 40, 56, {{4, 17}, {1, 7}, {1, 1}, {1, 1}, {0, 3}, {0, 3}}, true},
                               {1, 24, 17, {{5, 20}, {3, 3}, {1, 1}, {2, 3}, {2, 4}, {2, 2}}, true},
                               {1, 32, 1201, {{3, 19}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}}, true},
                               {2, 32, 32, {{5, 28}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}}, true},
                               {1, 48, 40, {{6, 28}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}}, false}};
    for (const GeomCase& sh : shapes)
        check_types(sh, [&](const std::string& d) {
            return d.find("block of " + std::to_string(sh.geo.in[1]) + " pixels = a row") != std::string::npos;
        });
}

// Rows whose padded diff_dst rows exceed L2 are cut into segments, each
// padding only the window of diff_dst its taps read (DataPlan::segments):
// grouped 16-channel groups, a padded stride (windows overlap, phases of
// unequal length), dilation with a stride and asymmetric pads (windows
// reaching into both pads), 2D rows (three windows a row, kept across
// rows), a causal depthwise layer, oc in several chunks (16-bit partial
// sums), a W stride with a phase of inserted zeros and an H stride with
// rows of them (16-bit: written apart, per segment); each in NCX too
// (grouped and depthwise plans: NXC windows of the segment's pixels, 2D
// groups: windows of several rows).
// Bit for bit with small integers on every ISA in f32, bf16 and f16; each
// cut on every ISA; a short row stays whole.
TEST_CASE("data: long rows are cut into segments", "[jit][data][dtype]") {
    auto one_d = [](int64_t g, int64_t ic, int64_t oc, int64_t iw, int64_t k) {
        DCase c;
        c.mb = 2;
        c.g = g;
        c.ic = ic;
        c.oc = oc;
        c.in = {iw};
        c.k = {k};
        c.s = {1};
        c.d = {1};
        c.pb = c.pe = {(k - 1) / 2};
        return c;
    };
    std::vector<DCase> cs;
    cs.push_back(one_d(8, 128, 128, 9000, 3));
    DCase strided = one_d(1, 32, 96, 12000, 3);
    strided.s = {2};
    cs.push_back(strided);
    DCase dilated = one_d(1, 32, 128, 22000, 5);
    dilated.mb = 1;
    dilated.s = {5};
    dilated.d = {2};
    dilated.pb = {7};
    dilated.pe = {2};
    cs.push_back(dilated);
    DCase wide = one_d(1, 16, 64, 4100, 3);
    wide.mb = 1;
    wide.in = {3, 4100};
    wide.k = {3, 3};
    wide.s = wide.d = {1, 1};
    wide.pb = wide.pe = {1, 1};
    cs.push_back(wide);
    DCase wide_groups = wide;  // NCX: windows of several rows, each row's segment a run
    wide_groups.g = 4;
    wide_groups.oc = 64;
    cs.push_back(wide_groups);
    DCase causal = one_d(64, 64, 64, 20001, 4);
    causal.pb = {3};
    causal.pe = {0};
    cs.push_back(causal);
    cs.push_back(one_d(1, 32, 1200, 1100, 5));  // oc chunks (f32, f16); NCX 16-bit windows: runs of 1 KiB
    DCase zeros = one_d(1, 32, 256, 8000, 2);  // phase 0 reads no tap, phase 1 the right pad
    zeros.s = {3};
    zeros.pb = {2};
    zeros.pe = {0};
    cs.push_back(zeros);
    DCase zero_rows = one_d(1, 32, 256, 3000, 3);  // H stride 2: odd rows read no diff_dst row
    zero_rows.in = {4, 3000};
    zero_rows.k = {1, 3};
    zero_rows.s = {2, 1};
    zero_rows.d = {1, 1};
    zero_rows.pb = zero_rows.pe = {0, 1};
    cs.push_back(zero_rows);
    for (size_t i = 0, n = cs.size(); i < n; ++i) {  // NCX: windows of segments (groups, depthwise) or transposes
        DCase ncx = cs[i];
        ncx.nxc = false;
        ncx.wfmt = i % 2 ? "OIX" : "XIO";
        // Depthwise rows of unit W stride run along the rows in NCX
        // (test_jit_dw_rows.cpp): the windows serve W strides.
        if (ncx.g == ncx.ic && ncx.g == ncx.oc) ncx.s = {2};
        cs.push_back(ncx);
    }
    for (const DCase& base : cs)
        for (data_type dt : {data_type::f32, data_type::bf16, data_type::f16}) {
            DCase c = base;
            c.dt = dt;
            INFO(wtest::label(c, "") << " " << convgrad::dtype_name(dt));
            for (const std::string& isa : kAllIsas) {
                if (!runs(isa)) continue;
                const std::string d = c.make(isa).describe();
                INFO(d);
                CHECK(d.find("for segment in ") != std::string::npos);
            }
            check_exact(c, kAllIsas);
        }
    DCase whole = one_d(8, 128, 128, 1500, 3);
    CHECK(whole.make(testutil::vector_isa()).describe().find("segment") == std::string::npos);
    check_exact(whole, kAllIsas);
    // Streaming stores into segments' pixels, aligned and not.
    const DCase& big = cs.front();
    const auto ref = big.make("ref");
    const auto dd = testutil::small_ints(big.dt, ref.input0_elems(), 41);
    const auto w = testutil::small_ints(big.dt, ref.input1_elems(), 42);
    check_streaming(big, dd, w, testutil::run(ref, dd, w));
}
