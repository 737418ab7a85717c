// The data gradient's inner-product path (ops/exec_data_dot.cpp): 1x1
// layers with few pixels and weights whose oc is innermost, W read in
// place. Which problems take it, equality with the reference on every ISA
// and type (oc, channel and pixel tails), no read past W or diff_dst, and
// thread-count independence.
#include <sys/mman.h>
#include <tbb/task_arena.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>
#include <string>
#include <vector>

#include "jit/isa.hpp"
#include "ops/executor.hpp"
#include "test_util.hpp"
#include "weights_case.hpp"

namespace {

using convgrad::data_type;
using convgrad::dims;
using convgrad::op_kind;

constexpr const char* kDotNote = "W read in place";

bool runs(const std::string& isa) {
    const std::vector<std::string> order{"avx2", "avx512_core", "avx512_core_bf16"};
    const auto level = [&](const std::string& s) { return std::find(order.begin(), order.end(), s) - order.begin(); };
    return level(isa) <= level(convgrad::max_isa());
}

// ConvolutionBackwardData of a convolution-view case.
convgrad::op data_op(const wtest::Case& c, const std::string& isa) {
    convgrad::attributes a = c.attrs();
    a.weights_shape.clear();
    a.dst_shape = c.data(c.ic, true);
    return testutil::make_op(isa, op_kind::conv_bwd_data, c.dt, a, c.data(c.oc, false), c.weights());
}

wtest::Case one_by_one(int64_t mb, int64_t ic, int64_t oc, const dims& in) {
    wtest::Case c;
    c.mb = mb;
    c.ic = ic;
    c.oc = oc;
    c.in = in;
    c.k = dims(in.size(), 1);
    return c;
}

// Small integers on every ISA cap and type: equal to the reference bit for
// bit (exact sums, one rounding), through the path exactly when `dot`.
void check(wtest::Case c, bool dot, const std::vector<data_type>& dts = {data_type::f32, data_type::bf16,
                                                                        data_type::f16}) {
    for (const data_type dt : dts) {
        c.dt = dt;
        const auto ref = data_op(c, "ref");
        const auto dd = testutil::small_ints(dt, ref.input0_elems(), 21);
        const auto w = testutil::small_ints(dt, ref.input1_elems(), 22);
        const auto expect = testutil::run(ref, dd, w);
        for (const std::string isa : {"avx512_core_bf16", "avx512_core", "avx2"}) {
            if (!runs(isa)) continue;
            const auto jit = data_op(c, isa);
            INFO(isa << " " << convgrad::dtype_name(dt) << ": " << jit.describe());
            REQUIRE(jit.describe().rfind("jit:", 0) == 0);
            CHECK((jit.describe().find(kDotNote) != std::string::npos) == dot);
            CHECK(testutil::bitwise_equal(testutil::run(jit, dd, w), expect));
        }
    }
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
        const auto o = data_op(full, convgrad::max_isa());
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
    for (const data_type dt : {data_type::f32, data_type::bf16, data_type::f16}) {
        c.dt = dt;
        const auto ref = data_op(c, "ref");
        const auto dd = testutil::random_reals(dt, ref.input0_elems(), 31);
        const auto w = testutil::random_reals(dt, ref.input1_elems(), 32);
        const auto expect = testutil::run(ref, dd, w);
        const int precision = dt == data_type::f32 ? 24 : dt == data_type::bf16 ? 8 : 11;
        for (const std::string isa : {"avx512_core_bf16", "avx512_core", "avx2"}) {
            if (!runs(isa)) continue;
            const auto o = data_op(c, isa);
            INFO(isa << " " << convgrad::dtype_name(dt) << ": " << o.describe());
            REQUIRE(o.describe().find(kDotNote) != std::string::npos);
            std::vector<testutil::Buffer> outs;
            for (int t : {1, 2, 3}) {
                tbb::task_arena arena(t);
                arena.execute([&] {
                    outs.push_back(testutil::run(o, dd, w));
                    CHECK(testutil::threads_used(o) == t);
                });
            }
            CHECK(testutil::bitwise_equal(outs[0], outs[1]));
            CHECK(testutil::bitwise_equal(outs[0], outs[2]));
            // Sums of 1000 products of magnitude <= 1 in f32 (any order:
            // 1000 · 2^-24 relative to the terms), then one rounding.
            int64_t bad = 0;
            for (int64_t i = 0; i < outs[0].size(); ++i) {
                const double r = expect.get(i);
                const double ulp = std::ldexp(1.0, std::ilogb(std::max(std::fabs(r), 1e-30)) - (precision - 1));
                bad += std::fabs(outs[0].get(i) - r) > 1000 * std::ldexp(1.0, -23) + ulp;
            }
            CHECK(bad == 0);
        }
    }
}

TEST_CASE("data dot: oc tails read nothing past W and diff_dst", "[jit][data][dot]") {
    // W and diff_dst each end where an inaccessible page begins; a load of
    // any element past either end faults.
    const int64_t page = sysconf(_SC_PAGESIZE);
    struct Guarded {
        char* base = nullptr;
        size_t len = 0;
        Guarded(int64_t bytes, int64_t page) {
            const int64_t pages = (bytes + page - 1) / page + 1;
            len = static_cast<size_t>(pages * page);
            base = static_cast<char*>(mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
            REQUIRE(base != MAP_FAILED);
            REQUIRE(mprotect(base + len - page, static_cast<size_t>(page), PROT_NONE) == 0);
        }
        ~Guarded() { munmap(base, len); }
        char* end() const { return base + len - static_cast<size_t>(sysconf(_SC_PAGESIZE)); }
    };
    for (const int64_t oc : {int64_t(65), int64_t(100), int64_t(127)})
        for (const data_type dt : {data_type::f32, data_type::bf16, data_type::f16}) {
            wtest::Case c = one_by_one(3, 19, oc, {1, 1});
            c.dt = dt;
            const auto ref = data_op(c, "ref");
            const auto dd = testutil::small_ints(dt, ref.input0_elems(), 41);
            const auto w = testutil::small_ints(dt, ref.input1_elems(), 42);
            const auto expect = testutil::run(ref, dd, w);
            Guarded gdd(static_cast<int64_t>(dd.bytes.size()), page), gw(static_cast<int64_t>(w.bytes.size()), page);
            char* pdd = gdd.end() - dd.bytes.size();
            char* pw = gw.end() - w.bytes.size();
            std::memcpy(pdd, dd.data(), dd.bytes.size());
            std::memcpy(pw, w.data(), w.bytes.size());
            for (const std::string isa : {"avx512_core_bf16", "avx512_core", "avx2"}) {
                if (!runs(isa)) continue;
                const auto o = data_op(c, isa);
                INFO(isa << " " << convgrad::dtype_name(dt) << " oc " << oc << ": " << o.describe());
                REQUIRE(o.describe().find(kDotNote) != std::string::npos);
                testutil::Buffer out(dt, o.output_elems());
                o.execute(pdd, pw, out.data());
                CHECK(testutil::bitwise_equal(out, expect));
            }
        }
}
