// Scratch kept between executes (ops/scratch.hpp): leases of one use on one
// thread, what is kept and what release_scratch() frees, and the public
// convgrad::release_scratch() between and during executes.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "dot_test_util.hpp"
#include "ops/scratch.hpp"
#include "test_util.hpp"
#include "weights_case.hpp"

namespace {

using convgrad::detail::kept_scratch_bytes;
using convgrad::detail::kMaxKeptBytes;
using convgrad::detail::Scratch;
using convgrad::detail::ScratchLease;

bool aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % 64 == 0; }

// NCX layers whose JIT plans take scratch on every path: a 3x3 weight
// gradient (transposes, an f32 target for bf16) and data gradient (packed
// W, transposes), small integers so results are exact.
struct Layer {
    convgrad::op op;
    testutil::Buffer a, b, expect;
};
std::vector<Layer> ncx_layers() {
    wtest::Case c = wtest::conv2d(24, 40, {9, 11}, {3, 3});
    c.nxc = false;
    c.pb = c.pe = {1, 1};
    std::vector<Layer> r;
    for (const convgrad::data_type dt : {convgrad::data_type::f32, convgrad::data_type::bf16}) {
        c.dt = dt;
        for (bool data : {false, true}) {
            const convgrad::op ref = data ? dottest::data_op(c, "ref") : c.make("ref");
            Layer l{data ? dottest::data_op(c, "") : c.make(""), testutil::small_ints(dt, ref.input0_elems(), 5),
                    testutil::small_ints(dt, ref.input1_elems(), 6), {}};
            l.expect = testutil::run(ref, l.a, l.b);
            r.push_back(std::move(l));
        }
    }
    return r;
}

}  // namespace

TEST_CASE("scratch: a use leased twice on one thread gets two buffers and a returned one is reused", "[scratch]") {
    ScratchLease a(Scratch::dot_lanes, 1000);
    REQUIRE(a.get() != nullptr);
    CHECK(aligned(a.get()));
    char* const first = a.get();
    std::memset(first, 1, 1000 + 64);  // the slack past the bytes is there too
    {
        ScratchLease nested(Scratch::dot_lanes, 100);  // as an execute nested on this thread
        REQUIRE(nested.get() != nullptr);
        CHECK(nested.get() != first);
        CHECK(aligned(nested.get()));
        std::memset(nested.get(), 2, 100);
    }
    CHECK(first[999] == 1);
    a.reset();
    CHECK(a.get() == nullptr);
    ScratchLease again(Scratch::dot_lanes, 600);  // smaller: the kept buffer
    CHECK(again.get() == first);
    ScratchLease moved = std::move(again);
    CHECK(moved.get() == first);
    CHECK(again.get() == nullptr);  // NOLINT(bugprone-use-after-move): a moved-from lease is empty
    CHECK(ScratchLease(Scratch::unstrided, 0).get() == nullptr);
    CHECK(ScratchLease(Scratch::unstrided, -5).get() == nullptr);
}

TEST_CASE("scratch: release_scratch frees the kept buffers no lease holds", "[scratch]") {
    convgrad::detail::release_scratch();
    REQUIRE(kept_scratch_bytes() == 0);  // the tests run one at a time: no lease is live
    ScratchLease held(Scratch::data_col, 4096);
    ScratchLease(Scratch::data_cvt, 8192).reset();
    CHECK(kept_scratch_bytes() == 4096 + 8192);
    CHECK(convgrad::detail::release_scratch() == 8192);
    CHECK(kept_scratch_bytes() == 4096);
    std::memset(held.get(), 3, 4096);  // still the holder's
    {
        // Above the bound: the lease's own buffer, freed with it.
        ScratchLease big(Scratch::data_cvt, kMaxKeptBytes + 1);
        REQUIRE(big.get() != nullptr);
        CHECK(aligned(big.get()));
        CHECK(kept_scratch_bytes() == 4096);
    }
    held.reset();
    CHECK(kept_scratch_bytes() == 4096);
    CHECK(convgrad::release_scratch() == 4096);
    CHECK(kept_scratch_bytes() == 0);
}

TEST_CASE("scratch: executes after release_scratch give the same results", "[scratch]") {
    for (Layer& l : ncx_layers()) {
        INFO(l.op.describe());
        if (l.op.describe().rfind("jit:", 0) != 0) {
            WARN("no JIT on this machine: nothing kept");
            return;
        }
        CHECK(testutil::bitwise_equal(testutil::run(l.op, l.a, l.b), l.expect));
        CHECK(kept_scratch_bytes() > 0);
        CHECK(convgrad::release_scratch() > 0);
        CHECK(convgrad::release_scratch() == 0);
        CHECK(testutil::bitwise_equal(testutil::run(l.op, l.a, l.b), l.expect));
    }
}

TEST_CASE("scratch: release_scratch from another thread during executes from four", "[scratch]") {
    const std::vector<Layer> layers = ncx_layers();
    std::atomic<bool> done{false};
    std::atomic<int> wrong{0};
    std::atomic<size_t> freed{0};
    std::thread releaser([&] {
        while (!done.load()) freed += convgrad::release_scratch();
    });
    std::vector<std::thread> callers;
    for (int t = 0; t < 4; ++t)
        callers.emplace_back([&, t] {
            // At least 24 executes each, and on until the releaser has freed
            // something (a loaded host may not run it for a while).
            for (int i = 0; i < 24 || (freed.load() == 0 && i < 20000); ++i) {
                const Layer& l = layers[static_cast<size_t>(t + i) % layers.size()];
                if (!testutil::bitwise_equal(testutil::run(l.op, l.a, l.b), l.expect)) ++wrong;
            }
        });
    for (std::thread& c : callers) c.join();
    done = true;
    releaser.join();
    CHECK(wrong.load() == 0);
    if (layers[0].op.describe().rfind("jit:", 0) == 0) CHECK(freed.load() > 0);
}
