// The bf16 data gradient on AMX tiles (ops/exec_data_amx.cpp): which
// problems take it, equality with the reference over stride phases (with
// and without taps), dilation, padding wider than the kernel, 1D to 3D,
// channel tails both ways and every weights format, no read or write past
// the user's buffers, and results independent of the thread count and of
// concurrent executes. Runs only where the CPU has AMX and the OS grants
// it (elsewhere each case says so and passes).
#include <catch2/catch.hpp>
#include <string>
#include <thread>
#include <vector>

#include "dot_test_util.hpp"
#include "jit/isa.hpp"
#include "test_util.hpp"
#include "weights_case.hpp"

namespace {

using convgrad::data_type;
using convgrad::dims;

constexpr const char* kAmxNote = "jit:amx data";

bool has_amx() {
    if (convgrad::detail::cpu_isa() == convgrad::detail::Isa::amx) return true;
    WARN("no AMX on this CPU (or no OS permission): the AMX data-gradient tests are skipped");
    return false;
}

wtest::Case conv(int64_t mb, int64_t ic, int64_t oc, dims in, dims k, dims s = {}, dims d = {}, dims pb = {},
                 dims pe = {}) {
    wtest::Case c;
    c.mb = mb;
    c.ic = ic;
    c.oc = oc;
    c.in = std::move(in);
    c.k = std::move(k);
    c.s = std::move(s);
    c.d = std::move(d);
    c.pb = std::move(pb);
    c.pe = std::move(pe);
    c.dt = data_type::bf16;
    return c;
}

// Small integers (exact sums, one rounding): the op made with no ISA cap
// takes the AMX path exactly when `amx`, and its output equals the
// reference's bit for bit, the inputs and the output each ending (and, in
// a second run, starting) at an inaccessible page.
void check_exact(const wtest::Case& c, bool amx, uint32_t seed) {
    const convgrad::op ref = dottest::data_op(c, "ref");
    const testutil::Buffer a = testutil::small_ints(c.dt, ref.input0_elems(), seed);
    const testutil::Buffer b = testutil::small_ints(c.dt, ref.input1_elems(), seed + 1);
    const testutil::Buffer expect = testutil::run(ref, a, b);
    const convgrad::op o = dottest::data_op(c, "amx");
    INFO(o.describe());
    CHECK((o.describe().rfind(kAmxNote, 0) == 0) == amx);
    CHECK(testutil::bitwise_equal(testutil::run(o, a, b), expect));
    for (bool front : {false, true}) {
        const dottest::Guarded ga(a, front), gb(b, front);
        CHECK(testutil::bitwise_equal(dottest::run_guarded(o, ga, gb), expect));
    }
}

}  // namespace

TEST_CASE("data amx: stride phases, dilation, padding, 1D to 3D, channel tails", "[jit][data][amx]") {
    if (!has_amx()) return;
    const std::vector<wtest::Case> cases{
            conv(2, 33, 47, {7, 9}, {3, 3}, {}, {}, {1, 1}, {1, 1}),  // tails of both channel blocks
            conv(2, 32, 64, {9, 8}, {3, 3}, {2, 2}, {}, {1, 1}, {1, 1}),  // ResNet-50 v1.5's strided 3x3
            conv(2, 40, 32, {6, 7}, {1, 1}, {2, 2}),  // phases without taps: zeros
            conv(1, 48, 96, {11, 10}, {2, 2}, {3, 3}, {2, 2}, {2, 0}, {0, 3}),  // kernel below the stride
            conv(2, 16, 33, {5, 6}, {3, 3}, {}, {}, {4, 4}, {4, 4}),  // pads wider than the kernel
            conv(3, 16, 33, {29}, {5}, {2}, {3}, {4}, {1}),  // 1D
            conv(2, 17, 32, {4, 5, 6}, {3, 3, 3}, {}, {}, {1, 1, 1}, {1, 1, 1}),  // 3D
            conv(1, 64, 64, {5, 6, 7}, {3, 1, 3}, {2, 1, 2}, {1, 1, 2}, {1, 0, 2}, {0, 0, 1}),
            conv(2, 20, 40, {4, 4}, {4, 4}),  // a kernel covering the input
            conv(1, 130, 70, {3, 3}, {3, 3}, {}, {}, {1, 1}, {1, 1}),  // five channel blocks, three oc steps
    };
    uint32_t seed = 300;
    for (const wtest::Case& c : cases) {
        INFO("ic " << c.ic << " oc " << c.oc << " rank " << c.in.size());
        check_exact(c, true, seed += 2);
    }
}

TEST_CASE("data amx: weights formats, large images and the problems it leaves", "[jit][data][amx]") {
    if (!has_amx()) return;
    for (const char* wfmt : {"XIO", "OIX"}) {
        for (int64_t oc : {64, 65}) {  // an odd OC: pairs of one channel, not a dword transpose
            wtest::Case c = conv(2, 24, oc, {6, 5}, {3, 2}, {1, 2}, {}, {1, 0}, {1, 1});
            c.wfmt = wfmt;
            INFO(wfmt << " oc " << oc);
            check_exact(c, true, 41);
        }
    }
    // Images of more than the 1 MiB chunk (one image a chunk) and planes of
    // more blocks than a run.
    check_exact(conv(3, 32, 128, {40, 70}, {3, 3}, {}, {}, {1, 1}, {1, 1}), true, 43);
    // Declined: groups, NCX, too few channels either way, other types.
    wtest::Case grouped = conv(2, 64, 64, {5, 5}, {3, 3});
    grouped.g = 2;
    check_exact(grouped, false, 45);
    wtest::Case ncx = conv(2, 32, 32, {5, 5}, {3, 3});
    ncx.nxc = false;
    check_exact(ncx, false, 47);
    check_exact(conv(2, 15, 64, {5, 5}, {3, 3}), false, 49);
    check_exact(conv(2, 64, 31, {5, 5}, {3, 3}), false, 51);
    for (data_type dt : {data_type::f32, data_type::f16}) {
        wtest::Case c = conv(2, 32, 32, {5, 5}, {3, 3});
        c.dt = dt;
        check_exact(c, false, 53);
    }
    // Capped below amx, bf16 takes the vector kernels.
    const wtest::Case c = conv(2, 32, 32, {5, 5}, {3, 3});
    CHECK(dottest::data_op(c, "avx512_core_bf16").describe().rfind(kAmxNote, 0) != 0);
}

TEST_CASE("data amx: random reals on 1, 2 and 3 threads and concurrent executes", "[jit][data][amx]") {
    if (!has_amx()) return;
    // 3x3 over 96 oc: 864 terms a sum.
    const wtest::Case c = conv(4, 48, 96, {13, 11}, {3, 3}, {2, 1}, {}, {1, 1}, {1, 1});
    const convgrad::op ref = dottest::data_op(c, "ref");
    const testutil::Buffer a = testutil::random_reals(c.dt, ref.input0_elems(), 61);
    const testutil::Buffer b = testutil::random_reals(c.dt, ref.input1_elems(), 62);
    const testutil::Buffer expect = testutil::run(ref, a, b);
    const convgrad::op o = dottest::data_op(c, "amx");
    INFO(o.describe());
    REQUIRE(o.describe().rfind(kAmxNote, 0) == 0);
    const std::vector<testutil::Buffer> outs = dottest::outputs_1_2_3(o, a, b);
    CHECK(testutil::bitwise_equal(outs[0], outs[1]));
    CHECK(testutil::bitwise_equal(outs[0], outs[2]));
    // tdpbf16ps sums in f32 in its own order: 864 terms, bf16's 8 bits.
    CHECK(dottest::outside_bound(outs[0], expect, 864, 8) == 0);
    std::vector<testutil::Buffer> concurrent(8);
    std::vector<std::thread> pool;
    for (auto& out : concurrent) pool.emplace_back([&] { out = testutil::run(o, a, b); });
    for (auto& t : pool) t.join();
    for (const auto& out : concurrent) CHECK(testutil::bitwise_equal(out, outs[0]));
}
