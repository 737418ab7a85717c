// The machine's arithmetic peak, measured, so the sweep's and the bench's
// "% of peak" columns are honest on any machine (convgrad-peak, and
// --peaks=measure or the default on other machines than the project's).
//
// Method (as ../shared/peers/RESULTS.md): a JIT loop of independent
// vfmadd231ps zmm (f32) or vdpbf16ps zmm (bf16) instructions, one per
// accumulator, on 1 thread and on all hardware threads started together;
// rate = total flops / wall time; the median of 3 runs of 0.2 s
// (convgrad-peak) or the best of 5 of 0.05 s (measured at start); the best
// accumulator count wins. Without AVX-512 the f32 loop uses ymm FMA; without
// AVX512_BF16 the bf16 entry repeats the f32 one (bf16 is then converted).
// "avx2" is the ymm FMA loop: the peak of convgrad's AVX2 kernels.
// "amx_bf16" (where convgrad runs AMX tiles: max_isa() "amx", which also
// asks the OS for the tile state) is a loop of tdpbf16ps on four
// accumulator tiles, 16 × 16 × 32 products each, no loads: the peak of
// convgrad's (and oneDNN's) AMX kernels.
#include "perf.hpp"

#include <convgrad/convgrad.hpp>

#include <xbyak/xbyak.h>
#include <xbyak/xbyak_util.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

namespace convgrad::cli {
namespace {

enum class loop_kind { fma_zmm, fma_ymm, dpbf16_zmm, tdpbf16 };

// rdi = iteration count. Each iteration issues `unroll` rounds of one
// instruction per accumulator; the two sources stay in the top registers.
class peak_loop : public Xbyak::CodeGenerator {
public:
    peak_loop(loop_kind kind, int accumulators)
        : Xbyak::CodeGenerator(8192, Xbyak::DontSetProtectRWE), kind_(kind), acc_(accumulators) {
        unroll_ = std::max(1, 48 / acc_);
        generate();
        setProtectModeRE();
    }
    double flops_per_iteration() const {
        const int per_instr = kind_ == loop_kind::tdpbf16  ? 16 * 16 * 32 * 2
                              : kind_ == loop_kind::fma_ymm ? 16
                              : kind_ == loop_kind::fma_zmm ? 32
                                                            : 64;
        return static_cast<double>(per_instr) * acc_ * unroll_;
    }
    void run(uint64_t iterations) const { getCode<void (*)(uint64_t)>()(iterations); }

private:
    void generate() {
        using namespace Xbyak;
        if (kind_ == loop_kind::tdpbf16) return generate_tiles();
        const bool ymm = kind_ == loop_kind::fma_ymm;
        for (int i = 0; i < acc_; ++i) {
            if (ymm) vxorps(Ymm(i), Ymm(i), Ymm(i));
            else vpxord(Zmm(i), Zmm(i), Zmm(i));
        }
        Label loop, done;
        test(rdi, rdi);
        jz(done, T_NEAR);
        L(loop);
        for (int u = 0; u < unroll_; ++u)
            for (int i = 0; i < acc_; ++i) {
                if (ymm) vfmadd231ps(Ymm(i), Ymm(14), Ymm(15));
                else if (kind_ == loop_kind::fma_zmm) vfmadd231ps(Zmm(i), Zmm(30), Zmm(31));
                else vdpbf16ps(Zmm(i), Zmm(30), Zmm(31));
            }
        dec(rdi);
        jnz(loop, T_NEAR);
        L(done);
        vzeroupper();
        ret();
    }
    // Tiles 0-3 accumulate (acc_ = 4), 4-7 are the sources (zeros).
    void generate_tiles() {
        using namespace Xbyak;
        Label loop, done, config;
        ldtilecfg(ptr[rip + config]);
        for (int t = 0; t < 8; ++t) tilezero(Tmm(t));
        test(rdi, rdi);
        jz(done, T_NEAR);
        L(loop);
        for (int u = 0; u < unroll_; ++u)
            for (int i = 0; i < 4; ++i) tdpbf16ps(Tmm(i), Tmm(4 + i / 2), Tmm(6 + i % 2));
        dec(rdi);
        jnz(loop, T_NEAR);
        L(done);
        tilerelease();
        ret();
        align(64);
        L(config);  // palette 1, eight tiles of 16 rows of 64 bytes
        for (int b = 0; b < 64; ++b) {
            const bool colsb = b >= 16 && b < 32 && b % 2 == 0, rows = b >= 48 && b < 56;
            db(b == 0 ? 1 : colsb ? 64 : rows ? 16 : 0);
        }
    }
    loop_kind kind_;
    int acc_, unroll_ = 1;
};

// GFLOP/s of `threads` copies of the loop started together.
double measure(const peak_loop& loop, int threads, uint64_t iterations) {
    std::atomic<int> ready{0};
    std::atomic<bool> go{false};
    std::vector<std::thread> pool;
    using clock = std::chrono::steady_clock;
    std::vector<clock::time_point> ends(threads);
    for (int t = 0; t < threads; ++t)
        pool.emplace_back([&, t] {
            ++ready;
            while (!go.load()) {
            }
            loop.run(iterations);
            ends[t] = clock::now();
        });
    while (ready.load() < threads) {
    }
    const auto start = clock::now();
    go = true;
    for (std::thread& th : pool) th.join();
    const auto last = *std::max_element(ends.begin(), ends.end());
    const double seconds = std::chrono::duration<double>(last - start).count();
    return loop.flops_per_iteration() * static_cast<double>(iterations) * threads / seconds / 1e9;
}

// The median (or best) of m.runs runs.
double figure(const peak_loop& loop, int threads, uint64_t iterations, const peak_method& m) {
    std::vector<double> r(static_cast<size_t>(std::max(1, m.runs)));
    for (double& v : r) v = measure(loop, threads, iterations);
    std::sort(r.begin(), r.end());
    return m.best ? r.back() : r[r.size() / 2];
}

// Best over accumulator counts (latency x throughput needs 8..24).
double peak(loop_kind kind, int threads, const peak_method& m) {
    const int max_acc = kind == loop_kind::fma_ymm ? 14 : 24;
    double best = 0;
    for (int acc : {4, 8, 12, 16, 24}) {
        if (acc > max_acc || (kind == loop_kind::tdpbf16) != (acc == 4)) continue;
        const peak_loop loop(kind, acc);
        // Calibrate to about m.seconds_per_run a run.
        const auto t0 = std::chrono::steady_clock::now();
        loop.run(100000);
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        const uint64_t iterations = static_cast<uint64_t>(100000 * m.seconds_per_run / std::max(s, 1e-6)) + 1;
        best = std::max(best, figure(loop, threads, iterations, m));
    }
    return best;
}

}  // namespace

bool reference_host() {
    using Cpu = Xbyak::util::Cpu;
    const Cpu cpu;
    return cpu.has(Cpu::tAVX512F) && cpu.has(Cpu::tAVX512_BF16) && cpu.displayFamily == kReferenceFamily;
}

std::string measure_peaks_json(const peak_method& m, std::string* log) {
    using Cpu = Xbyak::util::Cpu;
    const Cpu cpu;
    if (!cpu.has(Cpu::tFMA | Cpu::tAVX2)) throw std::runtime_error("peaks: this CPU has no AVX2/FMA to measure");
    const bool avx512 = cpu.has(Cpu::tAVX512F);
    const bool bf16 = avx512 && cpu.has(Cpu::tAVX512_BF16);
    const int all = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    std::vector<int> counts{1};
    if (all > 1) counts.push_back(all);
    const bool amx = convgrad::max_isa() == std::string("amx");
    std::string f32_json, bf16_json, avx2_json, amx_json;
    auto append = [](std::string& row, int t, double v) {
        char buf[96];
        std::snprintf(buf, sizeof buf, "%s\"%d\": %.1f", row.empty() ? "" : ", ", t, v);
        row += buf;
    };
    for (int t : counts) {
        const double ymm = peak(loop_kind::fma_ymm, t, m);
        const double f32 = avx512 ? peak(loop_kind::fma_zmm, t, m) : ymm;
        const double b16 = bf16 ? peak(loop_kind::dpbf16_zmm, t, m) : f32;
        if (log) {
            char line[192];
            std::snprintf(line, sizeof line,
                          "%d thread(s): f32 %.1f GFLOP/s, bf16 %.1f GFLOP/s%s, AVX2 path %.1f GFLOP/s\n", t, f32,
                          b16, bf16 ? "" : " (no vdpbf16ps: f32 figure)", ymm);
            *log += line;
        }
        append(f32_json, t, f32);
        append(bf16_json, t, b16);
        append(avx2_json, t, ymm);
        if (amx) {
            const double tiles = peak(loop_kind::tdpbf16, t, m);
            if (log) {
                char line[96];
                std::snprintf(line, sizeof line, "%d thread(s): AMX bf16 %.1f GFLOP/s\n", t, tiles);
                *log += line;
            }
            append(amx_json, t, tiles);
        }
    }
    return std::string("{\"f32\": {") + f32_json + "}, \"bf16\": {" + bf16_json + "}, \"avx2\": {" + avx2_json +
           (amx ? "}, \"amx_bf16\": {" + amx_json : std::string()) +
           "}, \"method\": \"convgrad-peak: " + (avx512 ? "vfmadd231ps zmm" : "vfmadd231ps ymm") +
           (bf16 ? ", vdpbf16ps zmm" : "") + (avx512 ? ", vfmadd231ps ymm" : "") + (amx ? ", tdpbf16ps" : "") +
           (m.best ? ", best of " : ", median of ") + std::to_string(m.runs) + "\"}\n";
}

}  // namespace convgrad::cli
