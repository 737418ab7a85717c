// The scalar 16-bit conversions of src/ops/numeric.hpp against independent
// implementations: the integer rounding trick for bf16 and the F16C
// instructions for f16.
#include <catch2/catch.hpp>

#include <immintrin.h>

#include <random>

#include "ops/numeric.hpp"

using namespace convgrad::detail;

namespace {

uint16_t bf16_by_bits(float f) {
    const uint32_t b = f32_to_bits(f);
    if ((b & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;  // NaN
    return static_cast<uint16_t>((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
}

__attribute__((target("f16c"))) uint16_t f16_by_f16c(float f) {
    return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
}

__attribute__((target("f16c"))) float f32_from_f16c(uint16_t h) { return _cvtsh_ss(h); }

}  // namespace

TEST_CASE("bf16 and f16 round trips are exact for every bit pattern", "[numeric]") {
    for (uint32_t h = 0; h < 0x10000; ++h) {
        const auto v = static_cast<uint16_t>(h);
        const float b = bf16_to_f32(v), f = f16_to_f32(v);
        if (!std::isnan(b)) REQUIRE(f32_to_bf16(b) == v);
        if (!std::isnan(f)) {
            REQUIRE(f32_to_f16(f) == v);
            REQUIRE(f32_to_bits(f) == f32_to_bits(f32_from_f16c(v)));
        }
    }
}

TEST_CASE("f32 to bf16 / f16 rounds to nearest even like the independent versions", "[numeric]") {
    std::mt19937 gen(7);
    std::uniform_int_distribution<uint32_t> bits;
    for (int i = 0; i < 2000000; ++i) {
        const float f = bits_to_f32(bits(gen));
        if (std::isnan(f)) continue;
        REQUIRE(f32_to_bf16(f) == bf16_by_bits(f));
        REQUIRE(f32_to_f16(f) == f16_by_f16c(f));
    }
    // Ties and boundaries.
    for (float f : {1.0f + 1.0f / 256, 1.0f + 3.0f / 256, 65504.f, 65519.f, 65520.f, 6.1035156e-05f,
                    5.9604645e-08f, 2.9802322e-08f, 8.940697e-08f, -0.f, INFINITY, -INFINITY}) {
        CHECK(f32_to_bf16(f) == bf16_by_bits(f));
        CHECK(f32_to_f16(f) == f16_by_f16c(f));
    }
}
