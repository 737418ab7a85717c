// The plan caches: an op created again reuses its plan (same plan, same
// results), the key tells apart every field of the problem, the ISA and the
// thread count, the least recently used plan goes beyond the capacity, and
// clear_kernel_cache() empties them.
#include <catch2/catch.hpp>
#include <tbb/task_arena.h>

#include <functional>
#include <set>
#include <thread>
#include <vector>

#include "ops/plan_cache.hpp"
#include "weights_case.hpp"

using convgrad::detail::data_plan_cache;
using convgrad::detail::plan_key;
using convgrad::detail::PlanCache;
using convgrad::detail::Problem;
using convgrad::detail::weights_plan_cache;
using testutil::Buffer;
using wtest::Case;
using wtest::conv2d;
using wtest::jit_isas;

namespace {

// ConvolutionBackwardData of c's convolution (diff_dst, weights -> diff_src).
convgrad::op make_data_op(const Case& c, const std::string& isa) {
    convgrad::attributes a = c.attrs();
    a.weights_shape.clear();
    a.dst_shape = c.data(c.ic, true);
    return testutil::make_op(isa, convgrad::op_kind::conv_bwd_data, c.dt, a, c.data(c.oc, false), c.weights());
}

// describe() without the data gradient's kernel-cache counts.
std::string plan_text(const convgrad::op& o) {
    const std::string d = o.describe();
    return d.substr(0, d.rfind("kernels "));
}

}  // namespace

TEST_CASE("plan cache: an op created again reuses its plan", "[plan][cache]") {
    Case c = conv2d(24, 40, {9, 11}, {3, 3});
    c.pb = c.pe = {1, 1};
    for (const std::string& isa : jit_isas(false)) {
        CAPTURE(isa);
        convgrad::clear_kernel_cache();
        REQUIRE(weights_plan_cache().size() == 0);
        REQUIRE(data_plan_cache().size() == 0);
        const convgrad::op w1 = c.make(isa);
        CHECK(weights_plan_cache().size() == 1);
        const convgrad::op w2 = c.make(isa);
        CHECK(weights_plan_cache().size() == 1);  // found, not planned again
        CHECK(w1.describe() == w2.describe());
        const convgrad::op d1 = make_data_op(c, isa);
        CHECK(data_plan_cache().size() == 1);
        const convgrad::op d2 = make_data_op(c, isa);
        CHECK(data_plan_cache().size() == 1);
        CHECK(plan_text(d1) == plan_text(d2));

        const convgrad::op ref = c.make("ref");
        const Buffer a = testutil::small_ints(c.dt, ref.input0_elems(), 5);
        const Buffer b = testutil::small_ints(c.dt, ref.input1_elems(), 6);
        const Buffer want = testutil::run(ref, a, b);
        CHECK(testutil::bitwise_equal(testutil::run(w1, a, b), want));
        CHECK(testutil::bitwise_equal(testutil::run(w2, a, b), want));
        const convgrad::op dref = make_data_op(c, "ref");
        const Buffer dd = testutil::small_ints(c.dt, dref.input0_elems(), 7);
        const Buffer wei = testutil::small_ints(c.dt, dref.input1_elems(), 8);
        const Buffer dwant = testutil::run(dref, dd, wei);
        CHECK(testutil::bitwise_equal(testutil::run(d1, dd, wei), dwant));
        CHECK(testutil::bitwise_equal(testutil::run(d2, dd, wei), dwant));

        // Cleared with the kernels: planned again, the same plan.
        CHECK(convgrad::clear_kernel_cache() > 0);
        CHECK(weights_plan_cache().size() == 0);
        CHECK(data_plan_cache().size() == 0);
        CHECK(c.make(isa).describe() == w1.describe());
        CHECK(weights_plan_cache().size() == 1);
    }
}

TEST_CASE("plan cache: the thread count and the ISA are part of the key", "[plan][cache]") {
    // Large enough to run on every thread of the arena (op_threads).
    Case c = conv2d(64, 64, {24, 24}, {3, 3});
    c.mb = 4;
    c.pb = c.pe = {1, 1};
    convgrad::clear_kernel_cache();
    const std::vector<std::string> isas = jit_isas(false);
    std::vector<convgrad::op> ops;
    std::vector<std::string> plans;
    for (const std::string& isa : isas)
        for (int threads : {1, 2, 3}) {
            tbb::task_arena arena(threads);
            arena.execute([&] {
                ops.push_back(c.make(isa));
                plans.push_back(ops.back().describe());
                CHECK(testutil::threads_used(ops.back()) == threads);
            });
        }
    CHECK(weights_plan_cache().size() == ops.size());  // one plan each
    const convgrad::op ref = c.make("ref");
    const Buffer a = testutil::random_reals(c.dt, ref.input0_elems(), 9);
    const Buffer b = testutil::random_reals(c.dt, ref.input1_elems(), 10);
    const Buffer first = testutil::run(ops.front(), a, b);
    for (size_t i = 0; i < ops.size(); ++i) {
        CAPTURE(plans[i]);
        // Each finds its own plan again in its own arena.
        tbb::task_arena arena(static_cast<int>(i % 3) + 1);
        arena.execute([&] { CHECK(c.make(isas[i / 3]).describe() == plans[i]); });
        if (i / 3 == 0) CHECK(testutil::bitwise_equal(testutil::run(ops[i], a, b), first));
    }
    CHECK(weights_plan_cache().size() == ops.size());
}

TEST_CASE("plan cache: the key differs in every field of the problem", "[plan][cache]") {
    Case c = conv2d(8, 12, {6, 7}, {3, 2});
    const Problem base = convgrad::detail::make_problem(c.kind(), c.dt, c.attrs(), c.input0(), c.input1(), nullptr);
    const std::string key = plan_key(base, convgrad::detail::Isa::avx512_core, 2);
    CHECK(plan_key(base, convgrad::detail::Isa::avx2, 2) != key);
    CHECK(plan_key(base, convgrad::detail::Isa::avx512_core, 1) != key);
    CHECK(plan_key(base, convgrad::detail::Isa::avx512_core, 2) == key);
    std::vector<std::function<void(Problem&)>> changes = {
        [](Problem& p) { p.kind = convgrad::op_kind::conv_transpose_bwd_weights; },
        [](Problem& p) { p.dt = convgrad::data_type::bf16; },
        [](Problem& p) { p.alg = convgrad::detail::Alg::data; },
        [](Problem& p) { p.nsp = 3; },
        [](Problem& p) { p.mb += 1; },
        [](Problem& p) { p.g += 1; },
        [](Problem& p) { p.icg += 1; },
        [](Problem& p) { p.ocg += 1; },
        [](Problem& p) { p.nxc = !p.nxc; },
        [](Problem& p) { p.wlayout = convgrad::detail::WeightLayout::OIX; },
        [](Problem& p) { p.swap_inputs = !p.swap_inputs; },
        [](Problem& p) { p.src_str.n += 1; },
        [](Problem& p) { p.src_str.c += 1; },
        [](Problem& p) { p.dst_str.n += 1; },
        [](Problem& p) { p.dst_str.c += 1; },
        [](Problem& p) { p.wei_str.o += 1; },
        [](Problem& p) { p.wei_str.i += 1; },
        [](Problem& p) { p.input0_elems += 1; },
        [](Problem& p) { p.input1_elems += 1; },
        [](Problem& p) { p.output_elems += 1; },
        [](Problem& p) { p.output_dims.back() += 1; },
        [](Problem& p) { p.output_dims.push_back(1); },
    };
    for (int a = 0; a < 3; ++a)
        for (auto field : {&Problem::in, &Problem::out, &Problem::k, &Problem::stride, &Problem::dil,
                           &Problem::pad_begin, &Problem::pad_end})
            changes.push_back([a, field](Problem& p) { (p.*field)[static_cast<size_t>(a)] += 1; });
    for (int a = 0; a < 3; ++a) {
        changes.push_back([a](Problem& p) { p.src_str.sp[static_cast<size_t>(a)] += 1; });
        changes.push_back([a](Problem& p) { p.dst_str.sp[static_cast<size_t>(a)] += 1; });
        changes.push_back([a](Problem& p) { p.wei_str.k[static_cast<size_t>(a)] += 1; });
    }
    std::set<std::string> keys{key};
    for (size_t i = 0; i < changes.size(); ++i) {
        CAPTURE(i);
        Problem p = base;
        changes[i](p);
        CHECK(keys.insert(plan_key(p, convgrad::detail::Isa::avx512_core, 2)).second);  // new, and unlike the others
    }
}

TEST_CASE("plan cache: the least recently used plan goes beyond the capacity", "[plan][cache]") {
    PlanCache<int> cache(2);
    int plan = 0;
    cache.insert("a", 1);
    cache.insert("b", 2);
    REQUIRE(cache.find("a", &plan));  // a is now the most recently used
    CHECK(plan == 1);
    cache.insert("c", 3);  // b goes
    CHECK(cache.size() == 2);
    CHECK_FALSE(cache.find("b", &plan));
    CHECK((cache.find("a", &plan) && plan == 1));
    CHECK((cache.find("c", &plan) && plan == 3));
    cache.insert("c", 4);  // already there (planned twice by racing creations): kept
    CHECK((cache.find("c", &plan) && plan == 3));
    CHECK(cache.clear() == 2);
    CHECK_FALSE(cache.find("a", &plan));

    PlanCache<int> off(0);  // CONVGRAD_PLAN_CACHE_CAPACITY=0
    off.insert("a", 1);
    CHECK(off.size() == 0);
    CHECK_FALSE(off.find("a", &plan));
}

TEST_CASE("plan cache: concurrent creation of the same and of different ops", "[plan][cache]") {
    const std::string isa = jit_isas(false).front();
    std::vector<Case> cases;
    for (int64_t ic : {5, 16, 33}) {
        Case c = conv2d(ic, 20, {8, 9}, {3, 3});
        c.pb = c.pe = {1, 1};
        cases.push_back(c);
    }
    std::vector<Buffer> in0, in1, want;
    for (const Case& c : cases) {
        const convgrad::op ref = c.make("ref");
        in0.push_back(testutil::small_ints(c.dt, ref.input0_elems(), 11));
        in1.push_back(testutil::small_ints(c.dt, ref.input1_elems(), 12));
        want.push_back(testutil::run(ref, in0.back(), in1.back()));
    }
    convgrad::clear_kernel_cache();
    std::vector<std::thread> threads;
    std::vector<int> ok(8, 0);
    {
        testutil::IsaCap cap(isa);  // for every thread's creations (the cap is process-wide)
        for (int t = 0; t < 8; ++t)
            threads.emplace_back([&, t] {
                int good = 0;
                for (int rep = 0; rep < 20; ++rep) {
                    const size_t i = static_cast<size_t>(t + rep) % cases.size();
                    const Case& c = cases[i];
                    const convgrad::op o(c.kind(), c.dt, c.attrs(), c.input0(), c.input1());
                    good += testutil::bitwise_equal(testutil::run(o, in0[i], in1[i]), want[i]);
                }
                ok[static_cast<size_t>(t)] = good;
            });
        for (std::thread& t : threads) t.join();
    }
    for (int good : ok) CHECK(good == 20);
    CHECK(weights_plan_cache().size() == cases.size());
}
