// Static loops over the current task arena's threads (oneTBB): each thread's
// share of the work is fixed by its index, so per-thread scratch can be
// indexed by it and results never depend on which worker ran what.
#pragma once

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/partitioner.h>

#include <atomic>
#include <cstdint>
#include <memory>

#include "problem.hpp"

namespace convgrad::detail {

// Runs fn(t) for t in [0, threads), one task each; on this thread alone
// when threads <= 1.
template <typename Fn>
void for_each_thread(int threads, const Fn& fn) {
    if (threads <= 1) {
        fn(0);
        return;
    }
    tbb::parallel_for(
        tbb::blocked_range<int>(0, threads, 1),
        [&](const tbb::blocked_range<int>& r) {
            for (int t = r.begin(); t != r.end(); ++t) fn(t);
        },
        tbb::static_partitioner());
}

// Runs body(i) for i in [0, n) statically on `threads` threads of the
// arena, or in order on this one when threads <= 1.
template <typename F>
void parallel_static(int threads, int64_t n, F&& body) {
    if (threads <= 1 || n <= 1) {
        for (int64_t i = 0; i < n; ++i) body(i);
        return;
    }
    tbb::parallel_for(
        tbb::blocked_range<int64_t>(0, n, 1),
        [&](const tbb::blocked_range<int64_t>& r) {
            for (int64_t i = r.begin(); i != r.end(); ++i) body(i);
        },
        tbb::static_partitioner());
}

// Items [0, n) shared by `threads` threads: thread t takes the items of its
// contiguous range (spread(n, threads, t)) in order, then helps the others
// one item at a time from the front of the range with the most left. A
// core the host slows (a neighbour on its SMT sibling, a preempted vCPU)
// then holds the op up by one item instead of half of it. Only for items
// whose results do not depend on which thread runs them or in what order.
class ItemQueue {
public:
    ItemQueue(int64_t n, int threads) : threads_(std::max(threads, 1)), ranges_(new Range[static_cast<size_t>(threads_)]) {
        for (int t = 0; t < threads_; ++t) {
            const auto r = spread(n, threads_, t);
            ranges_[t].next.store(r[0], std::memory_order_relaxed);
            ranges_[t].end = r[1];
        }
    }
    // The next item for thread t; false when none is left.
    bool next(int t, int64_t& item) {
        int64_t i = ranges_[t].next.fetch_add(1, std::memory_order_relaxed);
        if (i < ranges_[t].end) {
            item = i;
            return true;
        }
        for (;;) {
            int victim = -1;
            int64_t most = 0;
            for (int v = 0; v < threads_; ++v) {
                const int64_t left = ranges_[v].end - ranges_[v].next.load(std::memory_order_relaxed);
                if (left > most) most = left, victim = v;
            }
            if (victim < 0) return false;
            i = ranges_[victim].next.fetch_add(1, std::memory_order_relaxed);
            if (i < ranges_[victim].end) {
                item = i;
                return true;
            }
        }
    }

private:
    struct alignas(64) Range {
        std::atomic<int64_t> next;
        int64_t end = 0;
    };
    int threads_;
    std::unique_ptr<Range[]> ranges_;
};

}  // namespace convgrad::detail
