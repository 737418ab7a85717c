// Which bf16 arithmetic pays on this CPU: vdpbf16ps, or bf16 widened to f32
// for the FMA.
//
// vdpbf16ps does two products a lane per instruction. Where it issues at the
// FMA's rate (AMD Zen 4 / Zen 5: two a cycle) it doubles the FLOP rate, and the
// bf16 kernels built on it win. Not every CPU with AVX512_BF16 runs it that fast:
// an Intel Xeon guest with AMX issued about one vdpbf16ps every two cycles next
// to two FMAs a cycle, so it gave half the FMA's FLOP rate, and the avx512_core
// kernels, which widen bf16 to f32, ran ResNet-50's bf16 layers 1.48x faster
// (docs/PERFORMANCE.md). Instruction tables cannot be trusted to say which kind
// of CPU this is (a guest may report any model), so the rates are measured: two
// JIT loops of independent vfmadd231ps zmm and vdpbf16ps zmm, alternated, the
// fastest of three runs of each, about 0.1 ms in all, once per process and only
// when a bf16 op is created on an AVX512_BF16 CPU.
#pragma once

namespace convgrad::detail {

struct DotProbe {
    double fma_gflops = 0;  // one thread, vfmadd231ps zmm (32 flops an instruction)
    double dot_gflops = 0;  // one thread, vdpbf16ps zmm (64 flops an instruction)
    // vdpbf16ps pays when its FLOP rate is at least kDotPays of the FMA's. The
    // widening kernels reach about 0.8 of the FMA rate where vdpbf16ps kernels
    // reach their own peak (1.48x measured against a 1.8x FLOP-rate gap), so
    // that is the break-even.
    static constexpr double kDotPays = 0.8;
    bool dot_pays() const { return dot_gflops >= kDotPays * fma_gflops; }
};

// Measures the two rates now, on the calling thread. Needs AVX512_BF16.
// (ops/dispatch.cpp keeps the first measurement: bf16_dot_pays.)
DotProbe measure_dot_probe();

// CONVGRAD_BF16_DOT (read on every call, as CONVGRAD_MAX_ISA): `auto` or
// unset asks the probe, `on` and `off` decide without it. Throws
// convgrad::error naming the variable for another value.
enum class Bf16Dot { automatic, on, off };
Bf16Dot bf16_dot_setting();

}  // namespace convgrad::detail
