// The weight gradient's inner-product path (ops/exec_weights_dot.cpp): 1x1
// layers in NCX with planes of 512 pixels or more, src and diff_dst read in
// place as rows of pixels. Which problems take it, equality with the
// reference on every ISA and type (pixel, channel and group tails; both
// item orders; ConvTranspose in every weights format), no read past either
// tensor, and thread-count independence.
#include <tbb/task_arena.h>

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "dot_test_util.hpp"
#include "test_util.hpp"
#include "weights_case.hpp"

namespace {

using convgrad::data_type;
using convgrad::dims;

constexpr const char* kDotNote = "NCX read in place";

using dottest::runs;

wtest::Case ncx_1x1(int64_t mb, int64_t ic, int64_t oc, const dims& in) {
    return dottest::one_by_one(mb, ic, oc, in, false);
}

// dottest::check_exact of the case's op.
void check(wtest::Case c, bool dot,
           const std::vector<data_type>& dts = {data_type::f32, data_type::bf16, data_type::f16}) {
    INFO(wtest::label(c, ""));
    dottest::check_exact(
            [&](data_type dt, const std::string& isa) {
                c.dt = dt;
                return c.make(isa);
            },
            kDotNote, dot, dts, 51);
}

}  // namespace

TEST_CASE("weights dot: 1x1 layers in NCX read src and diff_dst in place", "[jit][weights][dot]") {
    // Pixel tails of every step (529 = 33·16 + 1 = 16·32 + 17: an odd bf16
    // pair; 600 = 37·16 + 8; 576 none), channels that leave partial tiles
    // on both sides, more input than output channels and the reverse (the
    // two item orders), 1D to 3D.
    check(ncx_1x1(2, 37, 19, {23, 23}), true);
    check(ncx_1x1(2, 19, 37, {23, 23}), true);
    check(ncx_1x1(3, 16, 16, {600}), true);
    check(ncx_1x1(2, 21, 12, {8, 8, 9}), true);
    // Groups: the tiles stay inside a group's channels.
    wtest::Case g = ncx_1x1(2, 34, 18, {23, 23});
    g.g = 2;
    check(g, true);
    g.ic = 3 * 9;
    g.oc = 3 * 11;
    g.g = 3;
    check(g, true);
    // Planes past a chunk: three chunks of the image at 64 input channels
    // (f32: 384 KiB hold 1536 pixels).
    check(ncx_1x1(2, 64, 40, {48, 70}), true, {data_type::f32});
}

TEST_CASE("weights dot: weights formats, ConvTranspose and the problems it leaves", "[jit][weights][dot]") {
    const wtest::Case c = ncx_1x1(2, 24, 40, {25, 25});
    for (const char* wfmt : {"XIO", "OIX"}) {
        wtest::Case f = c;
        f.wfmt = wfmt;
        check(f, true);
    }
    for (const char* wfmt : {"XIO", "OIX", "IOX", "XOI"}) {  // src and diff_dst in each other's roles
        wtest::Case f = c;
        f.wfmt = wfmt;
        f.transpose = true;
        check(f, true);
    }
    wtest::Case nxc = c;
    nxc.nxc = true;
    check(nxc, false);
    wtest::Case strided = c;
    strided.s = {2, 1};
    check(strided, false);
    wtest::Case padded = c;
    padded.pb = padded.pe = {0, 1};
    check(padded, false);
    wtest::Case k3 = c;
    k3.k = {1, 3};
    check(k3, false);
    check(ncx_1x1(2, 24, 40, {22, 23}), false);  // 506 pixels
    check(ncx_1x1(2, 24, 7, {25, 25}), false);   // 7 output channels
    wtest::Case narrow = c;                       // 6 input channels a group
    narrow.g = 4;
    check(narrow, false);
    // 512 -> 512 on 28 x 28: AVX-512 f32 chunks of 160 pixels (10 steps)
    // are too short (the plan only: the reference would take long).
    if (runs("avx512_core")) {
        const convgrad::op wide = ncx_1x1(2, 512, 512, {28, 28}).make("avx512_core");
        INFO(wide.describe());
        CHECK(wide.describe().rfind("jit:", 0) == 0);
        CHECK(wide.describe().find(kDotNote) == std::string::npos);
    }
}

TEST_CASE("weights dot: the plan names its tiles and loop", "[jit][weights][dot]") {
    if (!runs("avx512_core")) return;
    tbb::task_arena arena(2);
    arena.execute([&] {
        const auto o = ncx_1x1(32, 64, 256, {56, 56}).make("avx512_core");
        const std::string d = o.describe();
        INFO(d);
        // 64 input channels: chunks of the image of at most 1536 pixels,
        // three of 1056 (66 steps each, the last 64).
        CHECK(d.substr(0, d.find("  kernels")) ==
              "jit:avx512_core dot p5 c5x16 threads 2 (inner products along the pixels, NCX read in place)\n"
              "  items 676: g 1 x oc tile 52 x ic tile 13  [contiguous ranges over threads]\n"
              "    for image in 32, chunk of 1056 of 3136 pixels\n"
              "      for item in the thread's range (5 oc x 5 ic)\n"
              "        for pixel step of 16: 5 src loads, 5 diff_dst loads, 25 FMAs, a line of the next outer "
              "tile prefetched\n"
              "        lanes += the accumulators\n"
              "    lane sums of the thread's items\n"
              "  sums to the weights\n");
    });
    wtest::Case c = ncx_1x1(32, 256, 64, {56, 56});  // more input channels: ic tiles outside
    c.dt = data_type::bf16;
    if (runs("avx512_core_bf16")) {
        const std::string d = c.make("avx512_core_bf16").describe();
        INFO(d);
        CHECK(d.find("items 676: g 1 x ic tile 52 x oc tile 13") != std::string::npos);
        CHECK(d.find("vdpbf16ps on pixel pairs") != std::string::npos);
        CHECK(d.find("for pixel step of 32: ") != std::string::npos);
        CHECK(d.find("sums to the weights (rounded)") != std::string::npos);
    }
}

TEST_CASE("weights dot: random reals within tolerance, identical for 1, 2 and 3 threads", "[jit][weights][dot]") {
    // 2 images of 40 x 40 pixels: 3200 products an output.
    wtest::Case c = ncx_1x1(2, 43, 29, {40, 40});
    dottest::check_reals(
            [&](data_type dt, const std::string& isa) {
                c.dt = dt;
                return c.make(isa);
            },
            kDotNote, 3200, 61);
}

TEST_CASE("weights dot: pixel tails read nothing past src and diff_dst", "[jit][weights][dot]") {
    // Both inputs end where an inaccessible page begins, and so does the output
    // (dottest::run_guarded).
    for (const dims& in : {dims{23, 23}, dims{521}, dims{25, 25}})  // tails 1 / 17, 9 / 9, 1 / 17
        for (const data_type dt : {data_type::f32, data_type::bf16, data_type::f16}) {
            wtest::Case c = ncx_1x1(2, 11, 13, in);
            c.dt = dt;
            const auto ref = c.make("ref");
            const auto a = testutil::small_ints(dt, ref.input0_elems(), 71);
            const auto b = testutil::small_ints(dt, ref.input1_elems(), 72);
            const auto expect = testutil::run(ref, a, b);
            const dottest::Guarded ga(a), gb(b);
            for (const std::string isa : {"avx512_core_bf16", "avx512_core", "avx2"}) {
                if (!runs(isa)) continue;
                const auto o = c.make(isa);
                INFO(isa << " " << convgrad::dtype_name(dt) << ": " << o.describe());
                REQUIRE(o.describe().find(kDotNote) != std::string::npos);
                CHECK(testutil::bitwise_equal(dottest::run_guarded(o, ga, gb), expect));
            }
        }
}
