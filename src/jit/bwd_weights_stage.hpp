// The chunk stager's conversion kernel: 16-bit activations into the 32-bit
// elements the weight-gradient kernels read (see bwd_weights_kernel.hpp).
//  - widen_bf16 / widen_f16: dst[i] = a[i] as f32 (exact), on every ISA;
//    the f32 FMA kernel then sees f32 and each conversion feeds all the
//    multiply-adds of a chunk instead of one.
//  - pair_bf16 (AVX-512): dst[i] = a[i] | b[i] << 16, a pair of the same
//    element of two images, for vdpbf16ps; b == nullptr pairs with zero.
// A row of NXC pixels is one contiguous run of elements, so the executor
// converts whole rows with one call.
#pragma once

#include <cstdint>
#include <memory>

#include "jit/isa.hpp"
#include "jit/jit_kernel.hpp"

namespace convgrad::detail {

enum class StageMode : uint8_t { widen_bf16, widen_f16, pair_bf16 };

struct StageKernelDesc {
    uint8_t isa = 0;   // avx2 or avx512_core (pair_bf16: avx512_core)
    uint8_t mode = 0;  // StageMode
};

class StageKernel : public JitKernel {
public:
    using JitKernel::JitKernel;
    // n elements from a (and b) to dst: whole vectors in the kernel, the last
    // n mod vlen with the same conversion in C++.
    void run(const uint16_t* a, const uint16_t* b, void* dst, int64_t n) const;

protected:
    StageKernelDesc desc_{};
};

// Cached per (isa, mode); throws convgrad::error if generation fails.
std::shared_ptr<const StageKernel> get_stage_kernel(Isa isa, StageMode mode);

}  // namespace convgrad::detail
