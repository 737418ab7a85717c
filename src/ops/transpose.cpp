#include "ops/transpose.hpp"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/partitioner.h>

#include <algorithm>

#include "ops/problem.hpp"

namespace convgrad::detail {
namespace {

template <typename T>
void transpose_as(const T* src, T* dst, int64_t mb, int64_t rows, int64_t cols, int threads) {
    constexpr int64_t kTile = 32;
    const int64_t rt = (rows + kTile - 1) / kTile, ct = (cols + kTile - 1) / kTile;
    const int64_t items = mb * rt;
    auto part = [&](int t) {
        const auto [it0, it1] = spread(items, threads, t);
        for (int64_t it = it0; it < it1; ++it) {
            const int64_t n = it / rt, r0 = it % rt * kTile, r1 = std::min(rows, r0 + kTile);
            const T* s = src + n * rows * cols;
            T* d = dst + n * rows * cols;
            for (int64_t c0 = 0; c0 < ct * kTile; c0 += kTile)
                for (int64_t c = c0; c < std::min(cols, c0 + kTile); ++c)
                    for (int64_t r = r0; r < r1; ++r) d[c * rows + r] = s[r * cols + c];
        }
    };
    if (threads <= 1) {
        part(0);
        return;
    }
    tbb::parallel_for(tbb::blocked_range<int>(0, threads, 1),
                      [&](const tbb::blocked_range<int>& r) {
                          for (int t = r.begin(); t != r.end(); ++t) part(t);
                      },
                      tbb::static_partitioner());
}

}  // namespace

void transpose_images(const void* src, void* dst, int es, int64_t mb, int64_t rows, int64_t cols, int threads) {
    if (es == 4)
        transpose_as(static_cast<const uint32_t*>(src), static_cast<uint32_t*>(dst), mb, rows, cols, threads);
    else
        transpose_as(static_cast<const uint16_t*>(src), static_cast<uint16_t*>(dst), mb, rows, cols, threads);
}

}  // namespace convgrad::detail
