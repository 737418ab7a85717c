// Scalar conversions between f32/f64 and the 16-bit float formats.
// Rounding is to nearest, ties to even, done once from the wide value.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "convgrad/convgrad.hpp"

namespace convgrad::detail {

inline float bits_to_f32(uint32_t b) {
    float f;
    std::memcpy(&f, &b, 4);
    return f;
}

inline uint32_t f32_to_bits(float f) {
    uint32_t b;
    std::memcpy(&b, &f, 4);
    return b;
}

inline float bf16_to_f32(uint16_t h) { return bits_to_f32(static_cast<uint32_t>(h) << 16); }

inline float f16_to_f32(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ffu;
    if (exp == 0x1f) return bits_to_f32(sign | 0x7f800000u | (man << 13));  // inf / nan
    if (exp == 0) {  // zero or subnormal: man * 2^-24
        const float v = std::ldexp(static_cast<float>(man), -24);
        return sign ? -v : v;
    }
    return bits_to_f32(sign | ((exp + 112) << 23) | (man << 13));
}

// Rounds x to a binary format with `precision` significant bits, smallest
// normal exponent `emin` (value 2^emin) and largest finite value `max_finite`.
// Returns the rounded value as a double (exact), or +-inf on overflow.
inline double round_to_format(double x, int precision, int emin, double max_finite) {
    if (!std::isfinite(x) || x == 0.0) return x;
    int e = 0;
    std::frexp(x, &e);  // x = m * 2^e, 0.5 <= |m| < 1, so the leading bit is 2^(e-1)
    const int quantum = std::max(e - precision, emin - precision + 1);
    const double r = std::ldexp(std::nearbyint(std::ldexp(x, -quantum)), quantum);
    if (std::fabs(r) > max_finite) return std::copysign(INFINITY, x);
    return r;
}

inline uint16_t f64_to_bf16(double x) {
    if (std::isnan(x)) return 0x7fc0;
    const double r = round_to_format(x, 8, -126, 3.38953138925153547590470800371487867e38);
    return static_cast<uint16_t>(f32_to_bits(static_cast<float>(r)) >> 16);
}

inline uint16_t f64_to_f16(double x) {
    if (std::isnan(x)) return 0x7e00;
    const double r = round_to_format(x, 11, -14, 65504.0);
    const uint16_t sign = std::signbit(r) ? 0x8000 : 0;
    const double a = std::fabs(r);
    if (std::isinf(a)) return sign | 0x7c00;
    if (a == 0.0) return sign;
    if (a < std::ldexp(1.0, -14))  // subnormal: exact multiple of 2^-24
        return sign | static_cast<uint16_t>(std::ldexp(a, 24));
    int e = 0;
    const double m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
    const uint16_t man = static_cast<uint16_t>(std::ldexp(m, 11)) & 0x3ff;
    return sign | static_cast<uint16_t>((e - 1 + 15) << 10) | man;
}

inline uint16_t f32_to_bf16(float x) { return f64_to_bf16(x); }
inline uint16_t f32_to_f16(float x) { return f64_to_f16(x); }

// Element load/store for any data type.
inline float load_elem(const void* base, int64_t idx, data_type dt) {
    switch (dt) {
        case data_type::f32: return static_cast<const float*>(base)[idx];
        case data_type::bf16: return bf16_to_f32(static_cast<const uint16_t*>(base)[idx]);
        case data_type::f16: return f16_to_f32(static_cast<const uint16_t*>(base)[idx]);
    }
    return 0.f;
}

inline void store_elem(void* base, int64_t idx, data_type dt, double v) {
    switch (dt) {
        case data_type::f32: static_cast<float*>(base)[idx] = static_cast<float>(v); break;
        case data_type::bf16: static_cast<uint16_t*>(base)[idx] = f64_to_bf16(v); break;
        case data_type::f16: static_cast<uint16_t*>(base)[idx] = f64_to_f16(v); break;
    }
}

}  // namespace convgrad::detail
