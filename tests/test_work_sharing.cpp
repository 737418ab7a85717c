// Work sharing: a thread that runs out of its own items takes the items
// other threads have left, and results never depend on who ran what.
#include <catch2/catch.hpp>
#include <tbb/global_control.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <thread>
#include <vector>

#include "ops/parallel.hpp"
#include "test_util.hpp"
#include "weights_case.hpp"

using convgrad::data_type;
using convgrad::op_kind;
using testutil::Buffer;
using wtest::Case;
using wtest::conv2d;

namespace {

// The op of c: its weight gradient, or (data) its data gradient.
convgrad::op make(const Case& c, bool data, const std::string& isa) {
    if (!data) return c.make(isa);
    convgrad::attributes a = c.attrs();
    a.weights_shape.clear();
    a.dst_shape = c.data(c.ic, true);
    return testutil::make_op(isa, op_kind::conv_bwd_data, c.dt, a, c.data(c.oc, false), c.weights());
}

// A strided 1x1 layer and a depthwise one whose rows run along W (NCX).
Case strided_1x1() {
    Case c = conv2d(64, 96, {14, 14}, {1, 1});
    c.s = {2, 2};
    c.mb = 4;
    return c;
}
Case depthwise_rows() {
    Case c = conv2d(24, 24, {5000}, {3});
    c.g = 24;
    c.nxc = false;
    c.pb = c.pe = {1};
    return c;
}

// o's output in an arena of `threads`, on the pool's threads or (`one`)
// with the process held to one thread: the op still plans for `threads`
// and its tasks run one after another on this thread, so the first takes
// every item the others were given.
Buffer run_in_arena(const convgrad::op& o, const Buffer& a, const Buffer& b, int threads, bool one) {
    std::unique_ptr<tbb::global_control> cap;
    if (one) cap = std::make_unique<tbb::global_control>(tbb::global_control::max_allowed_parallelism, 1);
    tbb::task_arena arena(threads);
    Buffer out;
    arena.execute([&] {
        out = testutil::run(o, a, b);
        CHECK(testutil::threads_used(o) == threads);
    });
    return out;
}

void check_shared(const Case& c, bool data) {
    const convgrad::op ref = make(c, data, "ref");
    const Buffer a = testutil::small_ints(c.dt, ref.input0_elems(), 3);
    const Buffer b = testutil::small_ints(c.dt, ref.input1_elems(), 4);
    const Buffer want = testutil::run(ref, a, b);
    const convgrad::op jit = make(c, data, testutil::vector_isa());
    INFO(wtest::label(c, testutil::vector_isa()) << (data ? " data" : " weights") << "\n" << jit.describe());
    REQUIRE(jit.describe().rfind("jit:", 0) == 0);
    for (int t : {2, 3})
        for (bool one : {false, true}) {
            INFO("threads " << t << (one ? ", all tasks on one thread" : ""));
            CHECK(testutil::bitwise_equal(run_in_arena(jit, a, b, t, one), want));
        }
}

}  // namespace

TEST_CASE("work sharing: a queue hands out each item once, own items first", "[parallel]") {
    using convgrad::detail::ItemQueue;
    ItemQueue q(10, 3);  // ranges [0, 3), [3, 6), [6, 10)
    std::vector<int64_t> got;
    for (int64_t i = 0; q.next(1, i);) got.push_back(i);
    // Thread 1's own items, then the later half of the fullest range
    // ([8, 10) of [6, 10)), then of whichever has most left: [1, 3) of
    // [0, 3), [7, 8) of [6, 8), then [0, 1) and [6, 7) (ties: the first).
    REQUIRE(got.size() == 10);
    CHECK(got == std::vector<int64_t>{3, 4, 5, 8, 9, 1, 2, 7, 0, 6});
    std::vector<int64_t> sorted = got;
    std::sort(sorted.begin(), sorted.end());
    for (int64_t i = 0; i < 10; ++i) CHECK(sorted[static_cast<size_t>(i)] == i);
    int64_t none = -1;
    CHECK_FALSE(q.next(0, none));
    CHECK_FALSE(q.next(2, none));
    ItemQueue empty(0, 2);
    CHECK_FALSE(empty.next(0, none));
    // Many items go out in units of several, each unit in order.
    ItemQueue many(100000, 2);
    got.clear();
    for (int64_t i = 0; many.next(0, i);) got.push_back(i);
    REQUIRE(got.size() == 100000);
    CHECK(got[0] == 0);
    CHECK(got[1] == 1);
    sorted = got;
    std::sort(sorted.begin(), sorted.end());
    CHECK(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end());
    CHECK(sorted.back() == 99999);
}

TEST_CASE("work sharing: weight gradients give the reference on any schedule", "[parallel][weights]") {
    Case big = conv2d(40, 70, {12, 12}, {3, 3});  // many tiles: split over tiles
    big.mb = 3;
    big.pb = big.pe = {1, 1};
    Case few = conv2d(3, 8, {40, 40}, {1, 1});  // few tiles: split over slices
    few.mb = 8;
    Case wide = conv2d(256, 384, {7, 7}, {1, 1});  // 1x1, many tiles over a few chunks
    wide.mb = 6;
    // 1x1 staged in the kernels whose tiles of a thread end inside the first
    // pass over the ic tiles (2 oc tiles): a thread that takes a later range of
    // the chunk runs ic tiles it has not copied yet apart from those it has.
    Case long_pass = conv2d(1024, 96, {7, 7}, {1, 1});
    long_pass.mb = 6;
    const Case strided = strided_1x1();
    Case dw = conv2d(32, 32, {30, 30}, {3, 3});
    dw.g = 32;
    dw.mb = 4;
    dw.pb = dw.pe = {1, 1};
    Case ncx = big;
    ncx.nxc = false;
    const Case rows = depthwise_rows();
    Case dw_ncx = dw;  // NCX windows of the channels of a thread's tiles
    dw_ncx.ic = dw_ncx.oc = dw_ncx.g = 96;
    dw_ncx.nxc = false;
    for (data_type dt : {data_type::f32, data_type::bf16})
        for (Case c : {big, few, wide, long_pass, strided, dw, ncx, rows, dw_ncx}) {
            c.dt = dt;
            check_shared(c, false);
        }
}

TEST_CASE("work sharing: data gradients give the reference on any schedule", "[parallel][data]") {
    Case direct = conv2d(48, 64, {14, 14}, {3, 3});
    direct.mb = 4;
    direct.pb = direct.pe = {1, 1};
    const Case strided = strided_1x1();
    Case fc = conv2d(300, 500, {1, 1}, {1, 1});  // one pixel an image
    fc.mb = 8;
    Case ncx = direct;
    ncx.nxc = false;
    Case rows = depthwise_rows();
    rows.mb = 3;
    for (data_type dt : {data_type::f32, data_type::bf16})
        for (Case c : {direct, strided, fc, ncx, rows}) {
            c.dt = dt;
            check_shared(c, true);
        }
}

TEST_CASE("work sharing: ops in several arenas at once, more threads than cores", "[parallel]") {
    Case w = conv2d(40, 70, {12, 12}, {3, 3});
    w.mb = 3;
    w.pb = w.pe = {1, 1};
    const bool data[] = {false, true};
    for (bool d : data) {
        const convgrad::op ref = make(w, d, "ref");
        const Buffer a = testutil::small_ints(w.dt, ref.input0_elems(), 5);
        const Buffer b = testutil::small_ints(w.dt, ref.input1_elems(), 6);
        const Buffer want = testutil::run(ref, a, b);
        const convgrad::op jit = make(w, d, testutil::vector_isa());
        std::vector<Buffer> outs(6);
        std::vector<std::thread> callers;
        for (size_t i = 0; i < outs.size(); ++i)
            callers.emplace_back([&, i] {
                tbb::task_arena arena(2);
                arena.execute([&] {
                    for (int rep = 0; rep < 4; ++rep) outs[i] = testutil::run(jit, a, b);
                });
            });
        for (std::thread& c : callers) c.join();
        for (const Buffer& o : outs) CHECK(testutil::bitwise_equal(o, want));
    }
}
