// Loops over the current task arena's threads (oneTBB): static ones, where
// each thread's share of the work is fixed by its index, so per-thread
// scratch can be indexed by it, and ItemQueue, where a thread that runs out
// takes the others' items. Results never depend on which worker ran what.
#pragma once

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/partitioner.h>

#include <algorithm>
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
// contiguous range (spread(n, threads, t)) in order, then the later half of
// what is left of the fullest other range, and so on. A core the host
// slows (a neighbour on its SMT sibling, a preempted vCPU) then holds the
// op up by about one unit instead of its whole range. Items go out in units
// of `grain` (at least 64 units a thread) so that tiny items cost no atomic
// each, and a thread takes from another only a whole half, not item by item
// beside it. Only for items whose results do not depend on which thread
// runs them or in what order.
class ItemQueue {
public:
    ItemQueue(int64_t n, int threads)
        : n_(std::max<int64_t>(n, 0)), threads_(std::max(threads, 1)),
          grain_(std::max<int64_t>(1, n_ / (int64_t(threads_) * kUnitsPerThread))),
          ranges_(new Range[static_cast<size_t>(threads_)]), local_(new Local[static_cast<size_t>(threads_)]) {
        const int64_t units = (n_ + grain_ - 1) / grain_;  // < 2^32: grain_ >= n / 128
        for (int t = 0; t < threads_; ++t) {
            const auto r = spread(units, threads_, t);
            ranges_[t].units.store(pack(r[0], r[1]), std::memory_order_relaxed);
        }
    }
    // The next item for thread t; false when none is left.
    bool next(int t, int64_t& item) {
        Local& l = local_[t];
        if (l.next < l.end) {
            item = l.next++;
            return true;
        }
        int64_t unit = 0;
        if (!take_own(t, unit) && !take_other(t, unit)) return false;
        l.next = unit * grain_;
        l.end = std::min(n_, l.next + grain_);
        item = l.next++;
        return true;
    }

private:
    static constexpr int64_t kUnitsPerThread = 64;
    static uint64_t pack(int64_t begin, int64_t end) { return uint64_t(begin) << 32 | uint64_t(end); }
    static int64_t begin_of(uint64_t r) { return int64_t(r >> 32); }
    static int64_t end_of(uint64_t r) { return int64_t(r & 0xffffffffu); }
    // The first unit of t's range.
    bool take_own(int t, int64_t& unit) {
        std::atomic<uint64_t>& a = ranges_[t].units;
        uint64_t r = a.load(std::memory_order_relaxed);
        while (begin_of(r) < end_of(r))
            if (a.compare_exchange_weak(r, pack(begin_of(r) + 1, end_of(r)), std::memory_order_relaxed)) {
                unit = begin_of(r);
                return true;
            }
        return false;
    }
    // The later half of the fullest other range: its first unit now, the
    // rest as t's range (empty until now, so only t writes it here).
    bool take_other(int t, int64_t& unit) {
        for (;;) {
            int victim = -1;
            int64_t most = 0;
            for (int v = 0; v < threads_; ++v) {
                const uint64_t r = ranges_[v].units.load(std::memory_order_relaxed);
                if (v != t && end_of(r) - begin_of(r) > most) most = end_of(r) - begin_of(r), victim = v;
            }
            if (victim < 0) return false;
            std::atomic<uint64_t>& a = ranges_[victim].units;
            uint64_t r = a.load(std::memory_order_relaxed);
            const int64_t b = begin_of(r), e = end_of(r);
            if (b >= e) continue;
            const int64_t mid = b + (e - b) / 2;
            if (!a.compare_exchange_weak(r, pack(b, mid), std::memory_order_relaxed)) continue;
            unit = mid;
            ranges_[t].units.store(pack(mid + 1, e), std::memory_order_relaxed);
            return true;
        }
    }

    struct alignas(64) Range {
        std::atomic<uint64_t> units;  // [begin, end) packed, 32 bits each
    };
    struct alignas(64) Local {  // the unit a thread is running through
        int64_t next = 0, end = 0;
    };
    int64_t n_;
    int threads_;
    int64_t grain_;
    std::unique_ptr<Range[]> ranges_;
    std::unique_ptr<Local[]> local_;
};

}  // namespace convgrad::detail
