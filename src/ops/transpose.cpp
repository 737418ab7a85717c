#include "ops/transpose.hpp"

#include <algorithm>

#include "ops/parallel.hpp"
#include "ops/problem.hpp"

namespace convgrad::detail {
namespace {

// Tile (r0, c0) of an image: up to 16 rows × 16 columns, the partial
// edges masked (nothing read or written past them).
// es: 4 or 2, a template argument so the 16 rows stay in registers.
template <int es>
__attribute__((target("avx512f,avx512bw,avx512vl"))) inline void tile16(const char* s, char* d, int64_t rows,
                                                                    int64_t cols, int64_t r0, int64_t c0) {
    const int64_t nr = std::min<int64_t>(16, rows - r0), nc = std::min<int64_t>(16, cols - c0);
    const __mmask16 cm = static_cast<__mmask16>((1u << nc) - 1), rm = static_cast<__mmask16>((1u << nr) - 1);
    __m512i r[16];
    for (int i = 0; i < 16; ++i) {
        if (i >= nr) {
            r[i] = _mm512_setzero_si512();
            continue;
        }
        const char* row = s + ((r0 + i) * cols + c0) * es;
        // The row's line two tiles on (f32): 1.0-1.7x on one thread over
        // 3-3136 rows x 49-50176 columns (a throwaway harness, min of 9).
        _mm_prefetch(row + 128, _MM_HINT_T0);
        if (es == 4)
            r[i] = _mm512_maskz_loadu_epi32(cm, row);
        else
            r[i] = _mm512_maskz_cvtepu16_epi32(0xffff, _mm256_maskz_loadu_epi16(cm, row));
    }
    transpose_16x16(r);
    for (int j = 0; j < nc; ++j) {
        if (es == 4)
            _mm512_mask_storeu_epi32(d + ((c0 + j) * rows + r0) * 4, rm, r[j]);
        else
            _mm256_mask_storeu_epi16(d + ((c0 + j) * rows + r0) * 2, rm, _mm512_maskz_cvtepi32_epi16(0xffff, r[j]));
    }
}

// Every tile of the 16 rows from r0.
__attribute__((target("avx512f,avx512bw,avx512vl"))) void row_block16(const char* s, char* d, int es, int64_t rows,
                                                                  int64_t cols, int64_t r0) {
    if (es == 4)
        for (int64_t c0 = 0; c0 < cols; c0 += 16) tile16<4>(s, d, rows, cols, r0, c0);
    else
        for (int64_t c0 = 0; c0 < cols; c0 += 16) tile16<2>(s, d, rows, cols, r0, c0);
}

template <typename T>
void tiles32(const T* s, T* d, int64_t rows, int64_t cols, int64_t r0) {
    constexpr int64_t kTile = 32;
    const int64_t r1 = std::min(rows, r0 + kTile);
    for (int64_t c0 = 0; c0 < cols; c0 += kTile)
        for (int64_t c = c0; c < std::min(cols, c0 + kTile); ++c)
            for (int64_t r = r0; r < r1; ++r) d[c * rows + r] = s[r * cols + c];
}

}  // namespace

void transpose_images(const void* src, void* dst, int es, int64_t mb, int64_t rows, int64_t cols, int threads,
                      Isa isa) {
    const bool avx512 = isa >= Isa::avx512_core;
    const int64_t tile = avx512 ? 16 : 32;
    const int64_t rt = (rows + tile - 1) / tile, items = mb * rt;
    const char* s8 = static_cast<const char*>(src);
    char* d8 = static_cast<char*>(dst);
    auto part = [&](int t) {
        const auto [it0, it1] = spread(items, threads, t);
        for (int64_t it = it0; it < it1; ++it) {
            const int64_t n = it / rt, r0 = it % rt * tile;
            const char* s = s8 + n * rows * cols * es;
            char* d = d8 + n * rows * cols * es;
            if (avx512)
                row_block16(s, d, es, rows, cols, r0);
            else if (es == 4)
                tiles32(reinterpret_cast<const uint32_t*>(s), reinterpret_cast<uint32_t*>(d), rows, cols, r0);
            else
                tiles32(reinterpret_cast<const uint16_t*>(s), reinterpret_cast<uint16_t*>(d), rows, cols, r0);
        }
    };
    for_each_thread(threads, part);
}


}  // namespace convgrad::detail
