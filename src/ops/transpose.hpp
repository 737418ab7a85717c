// Per-image transposes of activations (NCX <-> NXC, and the (x, i) <->
// (i, x) orders of a folded full-kernel layer's channels).
#pragma once

#include <cstdint>

namespace convgrad::detail {

// dst[n][c][r] = src[n][r][c] for mb images of rows × cols elements of
// `es` bytes (2 or 4), in tiles so that both sides stream whole cache
// lines, on `threads` threads of the current arena.
void transpose_images(const void* src, void* dst, int es, int64_t mb, int64_t rows, int64_t cols, int threads);

}  // namespace convgrad::detail
