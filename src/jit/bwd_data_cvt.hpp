// Converting arrays between f32 and bf16 / f16 with a small cached JIT
// kernel built on VecCvt: whole vectors in the kernel, the last n mod vlen
// elements with the scalar conversions of ops/numeric.hpp (the same
// rounding). The data gradient rounds its column path's f32 rows with it and
// widens diff_dst rows into its padded-row cache.
#pragma once

#include <cstdint>
#include <memory>

#include "convgrad/convgrad.hpp"
#include "jit/isa.hpp"

namespace convgrad::detail {

// dst[i] := src[i] rounded to dt, i < n (isa: avx2 or an AVX-512 level).
// Looks the kernel up on every call: hold an ArrayConverter for many calls.
void round_f32_array(Isa isa, data_type dt, const float* src, void* dst, int64_t n);
// dst[i] := src[i] (elements of dt) widened to f32, i < n.
void widen_to_f32_array(Isa isa, data_type dt, const void* src, float* dst, int64_t n);

class ArrayCvtKernel;

// Converts arrays from one type to another (through f32; to bf16 / f16:
// rounded to nearest even). Holds its kernel, so a call costs no cache
// lookup; const and thread-safe. isa: avx2 or an AVX-512 level.
class ArrayConverter {
public:
    ArrayConverter() = default;
    ArrayConverter(Isa isa, data_type from, data_type to);
    // dst[i] := src[i] converted, i < n.
    void operator()(const void* src, void* dst, int64_t n) const;

private:
    std::shared_ptr<const ArrayCvtKernel> kernel_;
    int vlen_ = 16;
    data_type from_ = data_type::f32, to_ = data_type::f32;
};

}  // namespace convgrad::detail
