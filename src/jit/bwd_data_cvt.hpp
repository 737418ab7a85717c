// Rounding an array of f32 sums to bf16 / f16 (nearest even) with a small
// cached JIT kernel built on VecCvt: whole vectors in the kernel, the last
// n mod vlen elements with the scalar conversion of ops/numeric.hpp (the
// same rounding). The data gradient's column path uses it for its f32 rows.
#pragma once

#include <cstdint>

#include "convgrad/convgrad.hpp"
#include "jit/isa.hpp"

namespace convgrad::detail {

// dst[i] := src[i] rounded to dt, i < n. isa: avx2 or an AVX-512 level.
void round_f32_array(Isa isa, data_type dt, const float* src, void* dst, int64_t n);

}  // namespace convgrad::detail
