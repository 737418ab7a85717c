// The data gradient's inner-product path (ops/exec_data_dot.cpp): 1x1
// layers with few pixels and weights whose oc is innermost, W read in
// place. Which problems take it, equality with the reference on every ISA
// and type (oc, channel and pixel tails), no read past W or diff_dst, and
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
using convgrad::op_kind;

constexpr const char* kDotNote = "W read in place";

using dottest::runs;

using dottest::data_op;

using dottest::one_by_one;

// dottest::check_exact of the case's data gradient.
void check(wtest::Case c, bool dot,
           const std::vector<data_type>& dts = {data_type::f32, data_type::bf16, data_type::f16}) {
    dottest::check_exact(
            [&](data_type dt, const std::string& isa) {
                c.dt = dt;
                return data_op(c, isa);
            },
            kDotNote, dot, dts, 21);
}

}  // namespace

TEST_CASE("data dot: 1x1 layers with few pixels read W in place", "[jit][data][dot]") {
    // oc tails of every step (100 = 6·16 + 4 = 3·32 + 4; 65 odd: a bf16
    // pair of one element; 127), channels that leave a partial tile, 1D to
    // 3D planes of 1-8 pixels in all.
    struct Shape {
        int64_t mb, ic, oc;
        dims in;
    };
    for (const Shape& s : {Shape{3, 37, 100, {1, 1}}, Shape{2, 20, 65, {2, 2}}, Shape{1, 129, 64, {3}},
                           Shape{2, 17, 127, {1, 1, 2}}, Shape{8, 6, 96, {1, 1}}}) {
        INFO("mb " << s.mb << " ic " << s.ic << " oc " << s.oc << " rank " << s.in.size());
        check(one_by_one(s.mb, s.ic, s.oc, s.in), true);
    }
    // Up to 16·sqrt(W in MiB) pixels: 13 at 1.15 MiB of f32 (pixel tiles
    // of 5, 5, 3); the same W in bf16 (0.57 MiB) allows 12, so direct.
    check(one_by_one(13, 301, 1000, {1, 1}), true, {data_type::f32});
    check(one_by_one(13, 301, 1000, {1, 1}), false, {data_type::bf16});
    // 32 diff_dst rows of 16 KiB (512 KiB): copied one line apart more.
    wtest::Case wide = one_by_one(32, 260, 4096, {1, 1});
    check(wide, true, {data_type::f32});
    if (runs("avx512_core")) {
        const std::string d = data_op(wide, "avx512_core").describe();
        INFO(d);
        CHECK(d.find("diff_dst copied to rows 16448 bytes apart") != std::string::npos);
    }
}

TEST_CASE("data dot: weights formats, layouts and the problems it leaves", "[jit][data][dot]") {
    wtest::Case c = one_by_one(3, 40, 80, {1, 1});
    for (const char* wfmt : {"XIO", "OIX"}) {  // oc innermost in XIO only
        wtest::Case f = c;
        f.wfmt = wfmt;
        INFO(wfmt);
        check(f, std::string(wfmt) != "OIX");
    }
    wtest::Case ncx = c;  // NCX of one-pixel images is NXC
    ncx.nxc = false;
    check(ncx, true);
    ncx.in = {2, 1};
    check(ncx, false);
    wtest::Case strided = one_by_one(2, 40, 80, {3, 3});
    strided.s = {2, 2};
    check(strided, false);
    wtest::Case padded = c;
    padded.pb = padded.pe = {0, 1};
    check(padded, false);
    wtest::Case grouped = c;
    grouped.g = 2;
    check(grouped, false);
    check(one_by_one(3, 40, 48, {1, 1}), false);    // oc below 64
    check(one_by_one(40, 40, 1024, {1, 1}), false);  // 40 pixels against 160 KiB of W
    // A kernel covering the input runs as 1x1 on IC·K channels, then here.
    wtest::Case full = one_by_one(4, 8, 128, {3, 3});
    full.k = {3, 3};
    for (const auto& d : {data_type::f32, data_type::bf16}) {
        full.dt = d;
        const auto o = data_op(full, testutil::vector_isa());
        INFO(o.describe());
        CHECK(o.describe().find("kernel covers the input") != std::string::npos);
    }
    check(full, true);
}

TEST_CASE("data dot: the plan names its tile and loop", "[jit][data][dot]") {
    if (!runs("avx512_core")) return;
    wtest::Case c = one_by_one(8, 300, 1000, {1, 1});
    tbb::task_arena arena(2);
    arena.execute([&] {
        const auto o = data_op(c, "avx512_core");
        const std::string d = o.describe();
        INFO(d);
        // 8 pixels: two tiles of 4 against tiles of 6 channels (the same
        // FMAs as 8 x 3, fewer loads per FMA); spans of 66 channels.
        CHECK(d.substr(0, d.find("  kernels")) ==
              "jit:avx512_core dot p4 c6x16 threads 2 (inner products along oc, W read in place)\n"
              "  for span in 5 (66 of 300 channels)  [split over threads]\n"
              "    for tile of 6 channels, tile of 4 of 8 pixels\n"
              "      for oc step of 16 in 1000: 6 W loads, 4 dd loads, 24 FMAs, a line of the next tile's W "
              "prefetched\n"
              "      24 lane sums\n"
              "    span's rows to diff_src\n");
    });
    c.dt = data_type::bf16;
    if (runs("avx512_core_bf16")) {
        const std::string d = data_op(c, "avx512_core_bf16").describe();
        INFO(d);
        CHECK(d.find("vdpbf16ps on oc pairs") != std::string::npos);
        CHECK(d.find("for oc step of 32 in 1000: ") != std::string::npos);
    }
}

TEST_CASE("data dot: random reals within tolerance, identical for 1, 2 and 3 threads", "[jit][data][dot]") {
    // 8 pixels × 200 channels × 1000 oc: 3.2 Mflop, above the serial bound.
    wtest::Case c = one_by_one(8, 203, 1000, {1, 1});
    dottest::check_reals(
            [&](data_type dt, const std::string& isa) {
                c.dt = dt;
                return data_op(c, isa);
            },
            kDotNote, 1000, 31);
}

TEST_CASE("data dot: oc tails read nothing past W and diff_dst", "[jit][data][dot]") {
    // W and diff_dst each end where an inaccessible page begins, and so does the output
    // (dottest::run_guarded).
    for (const int64_t oc : {int64_t(65), int64_t(100), int64_t(127)})
        for (const data_type dt : {data_type::f32, data_type::bf16, data_type::f16}) {
            wtest::Case c = one_by_one(3, 19, oc, {1, 1});
            c.dt = dt;
            const auto ref = data_op(c, "ref");
            const auto dd = testutil::small_ints(dt, ref.input0_elems(), 41);
            const auto w = testutil::small_ints(dt, ref.input1_elems(), 42);
            const auto expect = testutil::run(ref, dd, w);
            const dottest::Guarded gdd(dd), gw(w);
            for (const std::string isa : {"avx512_core_bf16", "avx512_core", "avx2"}) {
                if (!runs(isa)) continue;
                const auto o = data_op(c, isa);
                INFO(isa << " " << convgrad::dtype_name(dt) << " oc " << oc << ": " << o.describe());
                REQUIRE(o.describe().find(kDotNote) != std::string::npos);
                CHECK(testutil::bitwise_equal(dottest::run_guarded(o, gdd, gw), expect));
            }
        }
}
