// The process-wide kernel cache: clear_kernel_cache() drops every kernel,
// ops already created keep theirs, and a build that fails after a clear
// evicts only its own entry.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "jit/kernel_cache.hpp"
#include "weights_case.hpp"

using testutil::Buffer;
using wtest::Case;
using wtest::conv2d;
using wtest::jit_isas;

TEST_CASE("kernel cache: clearing drops every kernel and ops keep theirs", "[jit][cache]") {
    Case c = conv2d(5, 21, {7, 7}, {3, 3});
    c.pb = c.pe = {1, 1};
    const std::string isa = jit_isas(false).front();
    const convgrad::op ref = c.make("ref");
    const Buffer a = testutil::small_ints(c.dt, ref.input0_elems(), 3);
    const Buffer b = testutil::small_ints(c.dt, ref.input1_elems(), 4);
    const Buffer want = testutil::run(ref, a, b);

    const convgrad::op jit = c.make(isa);
    CHECK(convgrad::clear_kernel_cache() > 0);  // at least this op's kernels
    CHECK(convgrad::clear_kernel_cache() == 0);
    CHECK(testutil::bitwise_equal(testutil::run(jit, a, b), want));  // still runs its own kernels

    // The reference path builds nothing; a new JIT op builds its kernels again.
    c.make("ref");
    CHECK(convgrad::clear_kernel_cache() == 0);
    const convgrad::op again = c.make(isa);
    CHECK(convgrad::clear_kernel_cache() > 0);
    CHECK(testutil::bitwise_equal(testutil::run(again, a, b), want));
}

TEST_CASE("kernel cache: a build failing after a clear leaves the newer entry", "[jit][cache]") {
    using Cache = convgrad::detail::KernelCache<int, int>;
    Cache cache;
    std::promise<void> cleared;
    std::shared_future<void> go = cleared.get_future().share();
    std::atomic<int> builds{0};
    // The first build waits for the clear and a second, successful build, then fails.
    auto failing = [&](const int&) -> Cache::Ptr {
        ++builds;
        go.wait();
        throw std::runtime_error("build failed");
    };
    auto working = [&](const int& d) -> Cache::Ptr {
        ++builds;
        return std::make_shared<const int>(d * 10);
    };
    auto first = std::async(std::launch::async, [&] { return cache.get(7, failing); });
    while (builds.load() == 0) std::this_thread::yield();
    CHECK(cache.clear() == 1);
    bool hit = true;
    CHECK(*cache.get(7, working, &hit) == 70);
    CHECK_FALSE(hit);
    cleared.set_value();
    CHECK_THROWS_WITH(first.get(), "build failed");
    // The successful build's entry survived the failed one's eviction.
    CHECK(*cache.get(7, working, &hit) == 70);
    CHECK(hit);
    CHECK(builds.load() == 2);
    CHECK(cache.size() == 1);
    // A failed build with no clear in between is evicted: the next get retries.
    CHECK_THROWS(cache.get(8, [](const int&) -> Cache::Ptr { throw std::runtime_error("no"); }));
    CHECK(*cache.get(8, working, &hit) == 80);
    CHECK_FALSE(hit);
}

TEST_CASE("kernel cache: clears racing with caches being built and destroyed", "[jit][cache]") {
    // Every cache is registered for clear_kernel_caches() only while fully
    // built: a clear in between must find either no cache or a whole one.
    using Cache = convgrad::detail::KernelCache<int, int>;
    std::atomic<bool> stop{false};
    std::atomic<long> clears{0};
    std::thread clearer([&] {
        while (!stop) {
            convgrad::clear_kernel_cache();
            ++clears;
        }
    });
    int wrong = 0;
    for (int rep = 0; rep < 20000; ++rep) {
        Cache cache;
        if (*cache.get(rep, [](const int& d) { return std::make_shared<const int>(d); }) != rep) ++wrong;
    }
    stop = true;
    clearer.join();
    CHECK(clears.load() > 0);
    CHECK(wrong == 0);
}

TEST_CASE("kernel cache: clears racing with op creation and execution", "[jit][cache]") {
    Case c = conv2d(9, 18, {6, 6}, {3, 3});
    c.pb = c.pe = {1, 1};
    const std::string isa = jit_isas(false).front();
    const Buffer a = testutil::small_ints(c.dt, c.make("ref").input0_elems(), 5);
    const Buffer b = testutil::small_ints(c.dt, c.make("ref").input1_elems(), 6);
    const Buffer want = testutil::run(c.make("ref"), a, b);
    const testutil::IsaCap cap(isa);  // set once: the workers create ops without touching the environment
    std::atomic<bool> stop{false};
    std::thread clearer([&] {
        while (!stop) convgrad::clear_kernel_cache();
    });
    std::vector<std::thread> workers;
    std::atomic<int> wrong{0};
    for (int t = 0; t < 4; ++t)
        workers.emplace_back([&] {
            for (int rep = 0; rep < 10; ++rep)
                if (!testutil::bitwise_equal(
                            testutil::run(convgrad::op(c.kind(), c.dt, c.attrs(), c.input0(), c.input1()), a, b),
                            want))
                    ++wrong;
        });
    for (auto& w : workers) w.join();
    stop = true;
    clearer.join();
    CHECK(wrong.load() == 0);
}

// CONVGRAD_PERF_MAP: kernels freed (cache cleared, op gone) keep their code,
// so no two entries of /tmp/perf-<pid>.map overlap and perf names every
// address after the one kernel that ever lived there. Run in a child process
// (the variable is read when the first kernel is built): the hidden case
// builds, runs and frees kernels of a few layers in turn, then reads its map.
TEST_CASE("kernel cache: perf map child", "[.perf_map_child]") {
    if (!std::getenv("CONVGRAD_PERF_MAP")) return;
    const std::string isa = jit_isas(false).front();
    const std::string map = "/tmp/perf-" + std::to_string(getpid()) + ".map";
    std::remove(map.c_str());
    for (int round = 0; round < 3; ++round)
        for (int64_t ch : {5, 21, 40}) {
            Case c = conv2d(ch, ch + 3, {6, 7}, {3, 3});
            c.pb = c.pe = {1, 1};
            const convgrad::op jit = c.make(isa);
            const Buffer a = testutil::small_ints(c.dt, jit.input0_elems(), 3);
            const Buffer b = testutil::small_ints(c.dt, jit.input1_elems(), 4);
            testutil::run(jit, a, b);
            convgrad::clear_kernel_cache();  // the op's kernels go with it, at the end of the scope
        }
    std::ifstream in(map);
    std::vector<std::pair<uint64_t, uint64_t>> ranges;
    std::string addr, size, name;
    while (in >> addr >> size >> name) ranges.emplace_back(std::stoull(addr, nullptr, 16), std::stoull(size, nullptr, 16));
    std::sort(ranges.begin(), ranges.end());
    REQUIRE(ranges.size() >= 9);
    for (size_t i = 1; i < ranges.size(); ++i) {
        INFO("entry " << i << " of " << ranges.size());
        CHECK(ranges[i].first >= ranges[i - 1].first + ranges[i - 1].second);
    }
    std::remove(map.c_str());
}

TEST_CASE("kernel cache: perf map entries never overlap", "[jit][cache]") {
    const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
    const std::string cmd = "CONVGRAD_PERF_MAP=1 '" + self + "' '[.perf_map_child]' > /dev/null 2>&1";
    CHECK(std::system(cmd.c_str()) == 0);
}
