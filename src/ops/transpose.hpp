// Per-image transposes of activations (NCX <-> NXC, and the (x, i) <->
// (i, x) orders of a folded full-kernel layer's channels).
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "jit/isa.hpp"

namespace convgrad::detail {

// Transposes 16 rows of 16 dwords in place: r[i][j] becomes r[j][i].
__attribute__((target("avx512f"))) inline void transpose_16x16(__m512i r[16]) {
    __m512i t[16];  // (zero-masked forms: GCC 12 flags the plain ones' undefined pass-through)
    for (int i = 0; i < 8; ++i) {  // dword pairs of rows 2i, 2i + 1
        t[2 * i] = _mm512_maskz_unpacklo_epi32(0xffff, r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_maskz_unpackhi_epi32(0xffff, r[2 * i], r[2 * i + 1]);
    }
    // r[4i + j], 128-bit lane k: rows 4i .. 4i + 3 of column 4k + j
    for (int i = 0; i < 4; ++i) {
        r[4 * i] = _mm512_maskz_unpacklo_epi64(0xff, t[4 * i], t[4 * i + 2]);
        r[4 * i + 1] = _mm512_maskz_unpackhi_epi64(0xff, t[4 * i], t[4 * i + 2]);
        r[4 * i + 2] = _mm512_maskz_unpacklo_epi64(0xff, t[4 * i + 1], t[4 * i + 3]);
        r[4 * i + 3] = _mm512_maskz_unpackhi_epi64(0xff, t[4 * i + 1], t[4 * i + 3]);
    }
    for (int j = 0; j < 4; ++j) {
        const __m512i even_lo = _mm512_maskz_shuffle_i32x4(0xffff, r[j], r[4 + j], 0x88);  // lanes 0, 2 of rows 0-7
        const __m512i odd_lo = _mm512_maskz_shuffle_i32x4(0xffff, r[j], r[4 + j], 0xdd);
        const __m512i even_hi = _mm512_maskz_shuffle_i32x4(0xffff, r[8 + j], r[12 + j], 0x88);
        const __m512i odd_hi = _mm512_maskz_shuffle_i32x4(0xffff, r[8 + j], r[12 + j], 0xdd);
        t[j] = _mm512_maskz_shuffle_i32x4(0xffff, even_lo, even_hi, 0x88);
        t[8 + j] = _mm512_maskz_shuffle_i32x4(0xffff, even_lo, even_hi, 0xdd);
        t[4 + j] = _mm512_maskz_shuffle_i32x4(0xffff, odd_lo, odd_hi, 0x88);
        t[12 + j] = _mm512_maskz_shuffle_i32x4(0xffff, odd_lo, odd_hi, 0xdd);
    }
    for (int i = 0; i < 16; ++i) r[i] = t[i];
}

// Transposes 8 rows of 8 floats in place (AVX2): r[i][j] becomes r[j][i].
__attribute__((target("avx2"))) inline void transpose_8x8(__m256 r[8]) {
    __m256 t[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {  // 128-bit lane k of r[i + j]: rows i .. i + 3 of column 4k + j
        r[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
        r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xee);
        r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xee);
    }
    for (int j = 0; j < 4; ++j) {
        t[j] = _mm256_permute2f128_ps(r[j], r[4 + j], 0x20);
        t[4 + j] = _mm256_permute2f128_ps(r[j], r[4 + j], 0x31);
    }
    for (int i = 0; i < 8; ++i) r[i] = t[i];
}

// dst[n][c][r] = src[n][r][c] for mb images of rows × cols elements of
// `es` bytes (2 or 4), on `threads` threads of the current arena. AVX-512
// (isa): 16 x 16 tiles through registers (16-bit elements widened to
// dwords for it); otherwise scalar 32 x 32 tiles, so that both sides
// stream whole cache lines.
void transpose_images(const void* src, void* dst, int es, int64_t mb, int64_t rows, int64_t cols, int threads,
                      Isa isa);

// dst[c * dst_ld + r] = src[r * src_ld + c] for r < rows, c < cols, on the
// calling thread: a block of a larger matrix (elements of `es` bytes, 2 or
// 4), nothing outside it read or written. Same tiles as transpose_images.
// `stream` (AVX-512, rows a whole number of lines): streaming stores, for
// which dst and dst_ld must put every result row at a 64-byte line start;
// the caller fences (_mm_sfence) before others read dst.
void transpose_block(const void* src, int64_t src_ld, void* dst, int64_t dst_ld, int es, int64_t rows, int64_t cols,
                     Isa isa, bool stream = false);

// Rows of an activation tensor between its NCX form and an NXC window, on
// the calling thread. The tensor: images of `channels` planes of
// rows_per_image rows (the flattened D x H) of row_px pixels; the window:
// its rows [lo, hi) (flattened over images too: row n * rows_per_image + r)
// in NXC, pixels `channels` elements apart (or window_px), window row 0 =
// row lo. Only channels [c0, c1) are read and written.
struct NcxRows {
    int es;  // element bytes, 2 or 4
    int64_t channels, rows_per_image, row_px;
    int64_t c0, c1;
    int64_t lo, hi;
    // Pixels [x0, x1) of each row (x1 = 0: the whole row); a window row
    // holds those, pixel x0 first, or (whole_rows) keeps every pixel's
    // place in a row of row_px pixels.
    int64_t x0 = 0, x1 = 0;
    bool whole_rows = false;
    int64_t window_px = 0;  // elements between window pixels; 0: channels
    int64_t window_pitch() const { return window_px ? window_px : channels; }
};
void ncx_rows_to_window(const char* ncx, char* window, const NcxRows& r, Isa isa);
// `p` less `bytes`: where a virtual NXC tensor starts whose rows from some
// row on a window holds, for offsets computed in the whole tensor. Integer
// arithmetic: the address may lie outside every allocation.
inline const char* bytes_before(const char* p, int64_t bytes) {
    return reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(p) - static_cast<uintptr_t>(bytes));
}
// The same from an NXC tensor (the rows' pixels `channels` elements apart)
// into a window of window_px elements a pixel: a copy of each pixel's
// channels [c0, c1).
void nxc_rows_to_window(const char* nxc, char* window, const NcxRows& r);
// `stream`: streaming stores for the image runs whose rows are whole
// aligned lines (ordinary stores for the others).
void window_to_ncx_rows(const char* window, char* ncx, const NcxRows& r, Isa isa, bool stream);

}  // namespace convgrad::detail
