// The data gradient of 1x1 layers in NCX read and written in place
// (ops/exec_data_ncx.cpp): which problems take it, equality with the
// reference on every ISA and type (pixel, channel and group tails, 1D to
// 3D, both weights formats), no access past diff_dst, W or diff_src, and
// thread-count independence.
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
using dottest::data_op;
using dottest::runs;

constexpr const char* kNote = "NCX read and written in place";

wtest::Case ncx_1x1(int64_t mb, int64_t ic, int64_t oc, const dims& in) {
    return dottest::one_by_one(mb, ic, oc, in, false);
}

// dottest::check_exact of the case's data gradient. bf16 takes the path
// from 512 pixels (oc pairs by vdpbf16ps where the ISA has it, widened
// elsewhere): the types default to f32 and f16 (from 128 pixels).
void check(wtest::Case c, bool taken, const std::vector<data_type>& dts = {data_type::f32, data_type::f16}) {
    INFO(wtest::label(c, ""));
    dottest::check_exact(
            [&](data_type dt, const std::string& isa) {
                c.dt = dt;
                return data_op(c, isa);
            },
            kNote, taken, dts, 81);
}

}  // namespace

TEST_CASE("data ncx: 1x1 layers in NCX read diff_dst and write diff_src in place", "[jit][data][ncx]") {
    // Pixel tails (150 = 9·16 + 6; 529 = 33·16 + 1; 576 none; 1D 600),
    // input channels that leave a partial tile, one output channel, 3D.
    check(ncx_1x1(2, 37, 19, {10, 15}), true);
    check(ncx_1x1(2, 19, 37, {23, 23}), true);
    check(ncx_1x1(3, 16, 1, {24, 24}), true);
    check(ncx_1x1(2, 5, 64, {600}), true);
    check(ncx_1x1(2, 21, 12, {4, 6, 7}), true);
    // Groups: the sums stay inside a group's channels.
    wtest::Case g = ncx_1x1(2, 34, 18, {12, 12});
    g.g = 2;
    check(g, true);
    g.ic = 3 * 9;
    g.oc = 3 * 11;
    g.g = 3;
    check(g, true);
    // bf16 on planes every ISA takes (40 x 40).
    check(ncx_1x1(2, 13, 11, {40, 40}), true, {data_type::bf16});
    check(ncx_1x1(2, 256, 64, {24, 24}), true, {data_type::bf16});
    for (const char* wfmt : {"XIO", "OIX"}) {
        wtest::Case f = ncx_1x1(2, 24, 40, {13, 13});
        f.wfmt = wfmt;
        check(f, true);
    }
}

TEST_CASE("data ncx: the problems it leaves", "[jit][data][ncx]") {
    const wtest::Case c = ncx_1x1(2, 24, 40, {13, 13});
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
    check(ncx_1x1(2, 24, 40, {11, 11}), false);  // 121 pixels
    // bf16 below 512 pixels.
    check(ncx_1x1(2, 24, 40, {22, 23}), false, {data_type::bf16});
}

TEST_CASE("data ncx: the plan names its tile and loop", "[jit][data][ncx]") {
    if (!runs("avx512_core")) return;
    tbb::task_arena arena(2);
    arena.execute([&] {
        const std::string d = data_op(ncx_1x1(32, 64, 256, {56, 56}), "avx512_core").describe();
        INFO(d);
        // 3136 pixels: 39 strips of 80 and a last one of 16 (one vector).
        CHECK(d.substr(0, d.find("  kernels")) ==
              "jit:avx512_core ncx m5n5x16 threads 2 (pixel vectors, NCX read and written in place)\n"
              "  for image in 32, group in 1, strip in 40 of 80 of 3136 pixels (the last: 1 vector)"
              "  [contiguous ranges over threads, then shared]\n"
              "    for tile of 5 of 64 input channels\n"
              "      for oc in 256: 5 diff_dst loads, 5 W broadcasts, 25 FMAs, a line of the next strip prefetched\n"
              "      5 rows of diff_src stored\n"
              "  W copied each call in the kernels' order (group, tile of 5 input channels, oc)\n");
    });
}

TEST_CASE("data ncx: bf16 output channels in pairs by vdpbf16ps", "[jit][data][ncx]") {
    // Pixels of the last 32: 17 (529), 8 (520), 16 (528), none (544), 24
    // (1D 600); ocg odd (the last row paired with zeros), 1 (no pair at
    // all), 2; input-channel tiles with a tail; groups; both weights
    // formats; 3D. Small integers: the pairs' sums are exact.
    const std::vector<data_type> bf16{data_type::bf16};
    check(ncx_1x1(2, 37, 19, {23, 23}), true, bf16);
    check(ncx_1x1(2, 19, 37, {20, 26}), true, bf16);
    check(ncx_1x1(2, 13, 1, {24, 22}), true, bf16);
    check(ncx_1x1(2, 13, 2, {17, 32}), true, bf16);
    check(ncx_1x1(3, 5, 64, {600}), true, bf16);
    check(ncx_1x1(2, 21, 12, {5, 7, 15}), true, bf16);
    for (const char* wfmt : {"XIO", "OIX"})
        for (const int64_t g : {1, 2, 3}) {
            wtest::Case c = ncx_1x1(2, 9 * g, 7 * g, {23, 23});
            c.g = g;
            c.wfmt = wfmt;
            check(c, true, bf16);
        }
}

TEST_CASE("data ncx: the bf16 pairs plan names its loop", "[jit][data][ncx]") {
    if (!runs("avx512_core_bf16")) return;
    tbb::task_arena arena(2);
    arena.execute([&] {
        wtest::Case c = ncx_1x1(32, 64, 255, {23, 23});
        c.dt = data_type::bf16;
        const std::string d = data_op(c, "avx512_core_bf16").describe();
        INFO(d);
        // 529 pixels: 16 strips of 32, the last 17 pixels in 2 vectors
        // (their last 32); 64 input channels: 5 tiles of 12 and one of 4.
        CHECK(d.substr(0, d.find("  kernels")) ==
              "jit:avx512_core_bf16 ncx m12n2x16 bf16 vdpbf16ps on oc pairs threads 2 (pixel vectors, NCX read and "
              "written in place)\n"
              "  for image in 32, group in 1, strip in 17 of 32 of 529 pixels (the last: 2 vectors, 17 pixels in "
              "the last 32)  [contiguous ranges over threads, then shared]\n"
              "    for tile of 12 of 64 input channels\n"
              "      for oc pair in 128 (the last with zeros): 3 diff_dst loads, 2 interleaves, 12 W pair broadcasts, "
              "24 vdpbf16ps, two lines of the next strip prefetched\n"
              "      12 rows of diff_src stored in pixel order (rounded)\n"
              "  W copied each call in the kernels' order (group, tile of 12 input channels, oc pair)\n");
    });
}

TEST_CASE("data ncx: random reals within tolerance, identical for 1, 2 and 3 threads", "[jit][data][ncx]") {
    // 40 x 40 pixels (every type takes the path), 300 output channels.
    wtest::Case c = ncx_1x1(2, 23, 300, {40, 40});
    dottest::check_reals(
            [&](data_type dt, const std::string& isa) {
                c.dt = dt;
                return data_op(c, isa);
            },
            kNote, 300, 91);
}

TEST_CASE("data ncx: pixel tails touch nothing past diff_dst, W and diff_src", "[jit][data][ncx]") {
    // Each tensor ends where an inaccessible page begins (dottest::Guarded).
    // 13 output channels end on bf16's unpaired row, 12 on a pair.
    for (const dims& in : {dims{40, 41}, dims{1601}, dims{40, 40}})  // tails 8, 1, none
        for (const data_type dt : {data_type::f32, data_type::bf16, data_type::f16})
            for (const int64_t oc : {13, 12}) {
                wtest::Case c = ncx_1x1(2, 11, oc, in);
                c.dt = dt;
                const auto ref = data_op(c, "ref");
                const auto dd = testutil::small_ints(dt, ref.input0_elems(), 93);
                const auto w = testutil::small_ints(dt, ref.input1_elems(), 94);
                const auto expect = testutil::run(ref, dd, w);
                const dottest::Guarded gdd(dd), gw(w);
                for (const std::string isa : {"avx512_core_bf16", "avx512_core", "avx2"}) {
                    if (!runs(isa)) continue;
                    const auto o = data_op(c, isa);
                    INFO(isa << " " << convgrad::dtype_name(dt) << ": " << o.describe());
                    REQUIRE(o.describe().find(kNote) != std::string::npos);
                    CHECK(testutil::bitwise_equal(dottest::run_guarded(o, gdd, gw), expect));
                }
            }
}
