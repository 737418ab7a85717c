#include "jit/dot_probe.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "convgrad/convgrad.hpp"
#include "jit/jit_kernel.hpp"

namespace convgrad::detail {
namespace {

constexpr int kAccumulators = 16;  // covers latency x rate of both (4-6 cycles x 2 a cycle)
constexpr int kUnroll = 3;

// void loop(uint64_t iterations): kUnroll rounds a iteration of one
// instruction per accumulator, sources in zmm30 / zmm31 (zeros).
class RateLoop : public JitKernel {
public:
    explicit RateLoop(bool dot) : JitKernel(dot ? "dot_probe_vdpbf16ps" : "dot_probe_vfmadd231ps"), dot_(dot) {}
    double flops_per_iteration() const { return (dot_ ? 64.0 : 32.0) * kAccumulators * kUnroll; }

private:
    void generate() override {
        using namespace Xbyak;
        for (int i = 0; i < kAccumulators; ++i) vpxord(Zmm(i), Zmm(i), Zmm(i));
        vpxord(zmm30, zmm30, zmm30);
        vpxord(zmm31, zmm31, zmm31);
        Label loop, done;
        test(rdi, rdi);
        jz(done);
        L(loop);
        for (int u = 0; u < kUnroll; ++u)
            for (int i = 0; i < kAccumulators; ++i) {
                if (dot_) vdpbf16ps(Zmm(i), zmm30, zmm31);
                else vfmadd231ps(Zmm(i), zmm30, zmm31);
            }
        dec(rdi);
        jnz(loop);
        L(done);
        vzeroupper();
        ret();
    }
    bool dot_;
};

double seconds_of(const RateLoop& loop, uint64_t iterations) {
    using clock = std::chrono::steady_clock;
    const auto t0 = clock::now();
    loop.entry<void (*)(uint64_t)>()(iterations);
    return std::chrono::duration<double>(clock::now() - t0).count();
}

}  // namespace

DotProbe measure_dot_probe() {
    RateLoop fma(false), dot(true);
    fma.create();
    dot.create();
    // 400 iterations: 19200 instructions, about 4 us of FMAs at two a cycle.
    // One warm-up run each wakes the 512-bit units; preemption only lengthens
    // a run, so the fastest of the alternated runs is the rate.
    constexpr uint64_t kIterations = 400;
    seconds_of(fma, kIterations);
    seconds_of(dot, kIterations);
    double t_fma = 1e30, t_dot = 1e30;
    for (int r = 0; r < 3; ++r) {
        t_fma = std::min(t_fma, seconds_of(fma, kIterations));
        t_dot = std::min(t_dot, seconds_of(dot, kIterations));
    }
    DotProbe p;
    p.fma_gflops = fma.flops_per_iteration() * kIterations / std::max(t_fma, 1e-9) / 1e9;
    p.dot_gflops = dot.flops_per_iteration() * kIterations / std::max(t_dot, 1e-9) / 1e9;
    return p;
}

Bf16Dot bf16_dot_setting() {
    const char* env = std::getenv("CONVGRAD_BF16_DOT");
    const std::string v = env ? env : "";
    if (v.empty() || v == "auto") return Bf16Dot::automatic;
    if (v == "on") return Bf16Dot::on;
    if (v == "off") return Bf16Dot::off;
    throw error("CONVGRAD_BF16_DOT: expected auto, on or off, given \"" + v + "\"");
}

}  // namespace convgrad::detail
