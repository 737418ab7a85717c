// Runs of a strided 1x1 layer's src pixels in NCX: the pixels (od·s, oh·s,
// ow·s) of one (image, channel) plane, in output order. The unit-stride
// wrapper (exec_unstrided.cpp) copies whole planes; the weight gradient's
// inner-product path (exec_weights_dot.cpp) copies the runs of a chunk of
// output pixels as its kernels need them.
#pragma once

#include <array>
#include <cstdint>

namespace convgrad::detail {

struct SubsampleGeometry {
    std::array<int64_t, 3> in{}, out{}, stride{};
    int es = 4;             // element bytes
    bool avx512 = false;    // vector passes for W stride 2
    bool prefetch = false;  // prefetch the rows a few KiB ahead (callers whose kernels do not)
};

// The element of a plane that output pixel x (in output order) reads.
int64_t subsample_source(const SubsampleGeometry& g, int64_t x);

// to[x - x0] = plane[subsample_source(g, x)] for x in [x0, x0 + len):
// row by row, a W stride of 1 as one copy, 2 by vectors of 16 (AVX-512,
// the row's end masked; nothing past the last pixel read is touched),
// others element by element.
void subsample_run(const SubsampleGeometry& g, const char* plane, int64_t x0, int64_t len, char* to);

// dst[2x] = src[x] for x < n, every other element of dst's `len` zero
// (AVX-512; the data gradient's spread, exec_unstrided.cpp).
void spread_even(const char* src, char* dst, int64_t n, int64_t len, int es);

}  // namespace convgrad::detail
