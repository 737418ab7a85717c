// The sum of an accumulator vector's lanes, in a fixed order (the dot
// paths' results do not depend on how the work was split).
#pragma once

#include <immintrin.h>

namespace convgrad::detail {

__attribute__((target("avx2"))) inline float lane_sum8(__m256 x) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

// The vlen (8 or 16) floats at v, 32-byte aligned.
__attribute__((target("avx2"))) inline float lane_sum(const float* v, int vlen) {
    const __m256 x = _mm256_load_ps(v);
    return lane_sum8(vlen == 16 ? _mm256_add_ps(x, _mm256_load_ps(v + 8)) : x);
}

}  // namespace convgrad::detail
