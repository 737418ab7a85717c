#include "ops/transpose.hpp"

#include <algorithm>
#include <cstdint>

#include "ops/parallel.hpp"
#include "ops/problem.hpp"

namespace convgrad::detail {
namespace {

// f32 results of this many bytes or more are stored streaming (half this
// host's 32 MiB L3: below it the consumer finds much of the result in L3).
// ResNet-50's f32 layers that transpose in NCX, mb 32, 2 threads, against
// ordinary stores (AMD Zen 4, tools/sweep_ab.py --rounds=3 --min): 1.040x
// geomean over 26 cases; 19-51 MB results 1.01-1.19x (conv1 1.09-1.12x,
// 56x56 3x3 1.05-1.06x, res4a_branch2a 1.19x); streaming every size: 12.8
// MB results 0.96-1.05x. 16-bit tiles store half lines (the other half is
// another tile's), which streamed ran 0.78-0.92x.
constexpr int64_t kStreamMinBytes = int64_t(16) << 20;

// Tile (r0, c0) of an image: up to 16 rows × 16 columns, the partial
// edges masked (nothing read or written past them).
// es: 4 or 2, a template argument so the 16 rows stay in registers.
template <int es>
__attribute__((target("avx512f,avx512bw,avx512vl"))) inline void tile16(const char* s, char* d, int64_t rows,
                                                                    int64_t cols, int64_t r0, int64_t c0,
                                                                    bool stream) {
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
    // Whole aligned lines (f32 only: a 16-bit tile row is half a line, and
    // the other half comes from another tile).
    const bool nt = es == 4 && stream && nr == 16 && rows % 16 == 0;
    for (int j = 0; j < nc; ++j) {
        if (nt)
            _mm512_stream_si512(reinterpret_cast<__m512i*>(d + ((c0 + j) * rows + r0) * 4), r[j]);
        else if (es == 4)
            _mm512_mask_storeu_epi32(d + ((c0 + j) * rows + r0) * 4, rm, r[j]);
        else
            _mm256_mask_storeu_epi16(d + ((c0 + j) * rows + r0) * 2, rm, _mm512_maskz_cvtepi32_epi16(0xffff, r[j]));
    }
}

// Every tile of the 16 rows from r0.
__attribute__((target("avx512f,avx512bw,avx512vl"))) void row_block16(const char* s, char* d, int es, int64_t rows,
                                                                  int64_t cols, int64_t r0, bool stream) {
    if (es == 4)
        for (int64_t c0 = 0; c0 < cols; c0 += 16) tile16<4>(s, d, rows, cols, r0, c0, stream);
    else
        for (int64_t c0 = 0; c0 < cols; c0 += 16) tile16<2>(s, d, rows, cols, r0, c0, false);
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
    // Large f32 results bypass the caches (streaming stores need no read
    // of the lines they replace), when every image starts on a line.
    const bool stream = avx512 && es == 4 && mb * rows * cols * es >= kStreamMinBytes &&
                        reinterpret_cast<uintptr_t>(dst) % 64 == 0 && rows * cols * es % 64 == 0;
    auto part = [&](int t) {
        const auto [it0, it1] = spread(items, threads, t);
        for (int64_t it = it0; it < it1; ++it) {
            const int64_t n = it / rt, r0 = it % rt * tile;
            const char* s = s8 + n * rows * cols * es;
            char* d = d8 + n * rows * cols * es;
            if (avx512)
                row_block16(s, d, es, rows, cols, r0, stream);
            else if (es == 4)
                tiles32(reinterpret_cast<const uint32_t*>(s), reinterpret_cast<uint32_t*>(d), rows, cols, r0);
            else
                tiles32(reinterpret_cast<const uint16_t*>(s), reinterpret_cast<uint16_t*>(d), rows, cols, r0);
        }
        _mm_sfence();
    };
    for_each_thread(threads, part);
}


}  // namespace convgrad::detail
