// Static loops over the current task arena's threads (oneTBB): each thread's
// share of the work is fixed by its index, so per-thread scratch can be
// indexed by it and results never depend on which worker ran what.
#pragma once

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/partitioner.h>

#include <cstdint>

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

}  // namespace convgrad::detail
