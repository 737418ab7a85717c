#include "ops/subsample.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

namespace convgrad::detail {
namespace {

// Masks of the first k (<= 16 / 32) lanes.
inline __mmask16 first16(int64_t k) { return static_cast<__mmask16>(k >= 16 ? 0xffff : (1u << k) - 1); }
inline __mmask32 first32(int64_t k) { return k >= 32 ? 0xffffffffu : (1u << k) - 1; }

// dst[x] = src[2x], x < n (AVX-512), reading nothing past src[2n - 2].
__attribute__((target("avx512f,avx512bw,avx512vl"))) void take_even(const char* src, char* dst, int64_t n, int es) {
    for (int64_t x = 0; x < n; x += 16) {
        const int64_t k = std::min<int64_t>(16, n - x), reads = 2 * k - 1;  // outputs, source elements
        if (es == 4) {
            const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
            const __m512 a = _mm512_maskz_loadu_ps(first16(reads), src + 2 * x * 4);
            const __m512 b = _mm512_maskz_loadu_ps(first16(std::max<int64_t>(reads - 16, 0)), src + (2 * x + 16) * 4);
            _mm512_mask_storeu_ps(dst + x * 4, first16(k), _mm512_permutex2var_ps(a, even, b));
        } else {  // the low word of each dword (zero-masked forms: GCC 12 flags the plain ones)
            const __m512i w = _mm512_maskz_loadu_epi16(first32(reads), src + 2 * x * 2);
            _mm256_mask_storeu_epi16(dst + x * 2, first16(k), _mm512_maskz_cvtepi32_epi16(0xffff, w));
        }
    }
}

// SubsampleGeometry::prefetch: the rows a run reads kPrefetchBytes or so
// ahead of the one it copies are prefetched. Without it the wrapper's pass
// waited on each row's load (perf on a 28x28 -> 14x14 bf16 layer: about 6
// GB/s); with it ResNet-50's strided 1x1 weight gradients on that pass ran
// 1.15-1.72x (AMD Zen 5, 2 threads, mb 32). The inner-product path's
// kernels prefetch its rows themselves (0.94-0.99x with both).
constexpr int64_t kPrefetchBytes = 4096;

// The plane element output pixel (od, oh, ow) reads.
int64_t source_of(const SubsampleGeometry& g, int64_t od, int64_t oh, int64_t ow) {
    return (od * g.stride[0] * g.in[1] + oh * g.stride[1]) * g.in[2] + ow * g.stride[2];
}

}  // namespace

int64_t subsample_source(const SubsampleGeometry& g, int64_t x) {
    return source_of(g, x / g.out[2] / g.out[1], x / g.out[2] % g.out[1], x % g.out[2]);
}

void subsample_run(const SubsampleGeometry& g, const char* plane, int64_t x0, int64_t len, char* to) {
    const int64_t es = g.es, ow_n = g.out[2], oh_n = g.out[1];
    int64_t ow = x0 % ow_n, oh = x0 / ow_n % oh_n, od = x0 / ow_n / oh_n;
    const int64_t row_step = g.stride[1] * g.in[2] * es;  // src bytes from an output row's pixels to the next's
    const int64_t ahead = std::max<int64_t>(1, kPrefetchBytes / row_step) * row_step;
    for (int64_t left = len; left > 0;) {
        const int64_t k = std::min(left, ow_n - ow);
        const char* from = plane + source_of(g, od, oh, ow) * es;
        for (int64_t b = 0; g.prefetch && b < k * g.stride[2] * es; b += 64) _mm_prefetch(from + ahead + b, _MM_HINT_T0);
        if (g.stride[2] == 1)
            std::memcpy(to, from, static_cast<size_t>(k * es));
        else if (g.stride[2] == 2 && g.avx512)
            take_even(from, to, k, static_cast<int>(es));
        else
            for (int64_t x = 0; x < k; ++x) std::memcpy(to + x * es, from + x * g.stride[2] * es, static_cast<size_t>(es));
        to += k * es;
        left -= k;
        ow = 0;
        if (++oh == oh_n) {
            oh = 0;
            ++od;
        }
    }
}

__attribute__((target("avx512f,avx512bw,avx512vl"))) void spread_even(const char* src, char* dst, int64_t n, int64_t len,
                                                            int es) {
    int64_t x = 0;
    for (; x < n && 2 * x < len; x += 16) {
        const int64_t k = std::min<int64_t>(16, n - x), w = std::min<int64_t>(32, len - 2 * x);  // values, writes
        if (es == 4) {
            const __m512i lo = _mm512_set_epi32(16, 7, 16, 6, 16, 5, 16, 4, 16, 3, 16, 2, 16, 1, 16, 0);
            const __m512i hi = _mm512_set_epi32(16, 15, 16, 14, 16, 13, 16, 12, 16, 11, 16, 10, 16, 9, 16, 8);
            const __m512 a = _mm512_maskz_loadu_ps(first16(k), src + x * 4);
            _mm512_mask_storeu_ps(dst + 2 * x * 4, first16(w), _mm512_permutex2var_ps(a, lo, _mm512_setzero_ps()));
            if (w > 16)
                _mm512_mask_storeu_ps(dst + (2 * x + 16) * 4, first16(w - 16),
                                      _mm512_permutex2var_ps(a, hi, _mm512_setzero_ps()));
        } else {  // words zero-extended to dwords
            const __m256i a = _mm256_maskz_loadu_epi16(first16(k), src + x * 2);
            _mm512_mask_storeu_epi16(dst + 2 * x * 2, first32(w), _mm512_maskz_cvtepu16_epi32(0xffff, a));
        }
    }
    if (2 * x < len) std::memset(dst + 2 * x * es, 0, static_cast<size_t>((len - 2 * x) * es));
}

}  // namespace convgrad::detail
