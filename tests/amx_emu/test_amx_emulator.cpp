// Tile programs written here against the SDM's semantics: every
// addressing form the encodings allow, tiles smaller than 16 x 64 (what
// lies past a tile's rows and columns reads as zero and is not stored),
// TDPBF16PS exact on small integers and bit for bit in the SDM's order on
// random reals, denormal inputs and sums, the configuration stored back,
// and per-thread tile state. Built into both test executables: in
// convgrad-amx-emu-tests they check the emulator (amx_emulator.hpp), on any
// x86-64 CPU with FMA; in convgrad-tests, on a CPU with AMX (the process
// holds the tile state), they check the silicon against the same
// expectations, which is what makes the emulator's model trustworthy.
#include <ucontext.h>
#include <xbyak/xbyak.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "amx_emu/amx_emulator.hpp"
#include "jit/isa.hpp"

namespace {

// Emulated (this process installed the emulator) or on the hardware (the
// library holds the tile state); neither: skip.
bool tiles_run() {
    if (convgrad::amxemu::installed() || convgrad::detail::cpu_isa() == convgrad::detail::Isa::amx)
        return true;
    WARN("no AMX on this CPU and no emulator in this process: the tile programs are skipped");
    return false;
}

struct alignas(64) Config {
    uint8_t bytes[64] = {};
    void tile(int t, int rows, int colsb) {
        bytes[16 + 2 * t] = static_cast<uint8_t>(colsb);
        bytes[48 + t] = static_cast<uint8_t>(rows);
    }
};

uint16_t to_bf16(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    // (test values are exact in bf16, or truncated on purpose)
    return static_cast<uint16_t>(u >> 16);
}
float from_bf16(uint16_t h) {
    const uint32_t u = uint32_t(h) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

// C (M x N f32, ldc floats) += A (M x 2K bf16, lda elements) x B (K x 2N
// bf16 pairs, ldb elements): tmm0 = C (M rows, 4N bytes), tmm1 = A (M rows,
// 4K bytes), tmm2 = B (K rows, 4N bytes). Arguments: rdi config, rsi A,
// rdx B, rcx C; the strides are immediates in registers chosen to exercise
// VEX.X / VEX.B, scales and displacements.
struct Gemm : Xbyak::CodeGenerator {
    Gemm(int64_t lda_bytes, int64_t ldb_bytes, int64_t ldc_bytes, int steps)
        : Xbyak::CodeGenerator(4096, Xbyak::DontSetProtectRWE) {
        using namespace Xbyak;
        push(r12);
        push(r13);
        push(r14);
        push(r15);
        ldtilecfg(ptr[rdi]);
        mov(r14, ldc_bytes / 4);
        mov(r15, rcx);
        tileloadd(tmm0, ptr[r15 + r14 * 4]);  // VEX.B, scale 4
        mov(r12, lda_bytes / 2);
        lea(r13, ptr[rsi - 0x10]);
        mov(rax, ldb_bytes);
        // Each step a further K block: A 64 bytes on, B 16 rows on.
        for (int s = 0; s < steps; ++s) {
            tileloadd(tmm1, ptr[r13 + r12 * 2 + 0x10]);  // VEX.X and B, scale 2, disp8
            tileloaddt1(tmm2, ptr[rdx + rax]);
            tdpbf16ps(tmm0, tmm1, tmm2);
            add(r13, 64);
            lea(rdx, ptr[rdx + rax * 8]);
            lea(rdx, ptr[rdx + rax * 8]);
        }
        lea(r8, ptr[rcx + 0x1000]);
        tilestored(ptr[r8 + r14 * 4 - 0x1000], tmm0);  // disp32
        tilerelease();
        pop(r15);
        pop(r14);
        pop(r13);
        pop(r12);
        ret();
        setProtectModeRE();
    }
};

// The SDM's TDPBF16PS on one row and output column: even and odd products
// in two chains from zero, fused, then their sum into c.
float sdm_dot(float c, const uint16_t* a, const uint16_t* b, int k, int ldb) {
    float even = 0, odd = 0;
    for (int kk = 0; kk < k; ++kk) {
        even = std::fma(from_bf16(a[2 * kk]), from_bf16(b[kk * ldb]), even);
        odd = std::fma(from_bf16(a[2 * kk + 1]), from_bf16(b[kk * ldb + 1]), odd);
    }
    return c + (even + odd);
}

struct GemmCase {
    int m, k, n, steps;
};

// One step of Gemm with nothing but tile instructions (the configuration
// RIP-relative, in the code), for emulate(): the caller sets the registers
// Gemm computes and steps through the instructions. Then STTILECFG to rdi,
// TILERELEASE and STTILECFG to rdi + 64.
struct TilesOnly : Xbyak::CodeGenerator {
    explicit TilesOnly(const Config& c) : Xbyak::CodeGenerator(4096, Xbyak::DontSetProtectRWE) {
        using namespace Xbyak;
        Label data;
        ldtilecfg(ptr[rip + data]);
        tileloadd(tmm0, ptr[r15 + r14 * 4]);
        tileloadd(tmm1, ptr[r13 + r12 * 2 + 0x10]);
        tileloaddt1(tmm2, ptr[rdx + rax]);
        tdpbf16ps(tmm0, tmm1, tmm2);
        tilestored(ptr[r8 + r14 * 4 - 0x1000], tmm0);
        sttilecfg(ptr[rdi]);
        tilerelease();
        sttilecfg(ptr[rdi + 64]);
        end = getSize();
        align(64);
        L(data);
        db(c.bytes, 64);
    }
    size_t end = 0;
};

void step_through(const TilesOnly& code, const void* a, int64_t lda_bytes, const void* b,
                  int64_t ldb_bytes, void* c, int64_t ldc_bytes, void* cfg_out) {
    ucontext_t uc = {};
    greg_t* g = uc.uc_mcontext.gregs;
    g[REG_R15] = reinterpret_cast<greg_t>(c);
    g[REG_R14] = ldc_bytes / 4;
    g[REG_R13] = reinterpret_cast<greg_t>(a) - 0x10;
    g[REG_R12] = lda_bytes / 2;
    g[REG_RDX] = reinterpret_cast<greg_t>(b);
    g[REG_RAX] = ldb_bytes;
    g[REG_R8] = reinterpret_cast<greg_t>(c) + 0x1000;
    g[REG_RDI] = reinterpret_cast<greg_t>(cfg_out);
    const auto* begin = code.getCode();
    g[REG_RIP] = reinterpret_cast<greg_t>(begin);
    int count = 0;
    while (g[REG_RIP] != reinterpret_cast<greg_t>(begin + code.end)) {
        REQUIRE(++count <= 9);
        convgrad::amxemu::emulate(&uc);
    }
    CHECK(count == 9);
}

void run_gemm(const GemmCase& g, bool reals, uint32_t seed, bool stepped = false) {
    const int kt = g.k * g.steps;                                   // pairs in all
    const int lda = 2 * kt + 6, ldb = 2 * g.n + 10, ldc = g.n + 3;  // elements; padded rows
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> small(-3, 3);
    std::uniform_real_distribution<float> real(-2.0f, 2.0f);
    auto value = [&] { return reals ? real(rng) : float(small(rng)); };
    std::vector<uint16_t> a(size_t(g.m * lda)), b(size_t(kt * ldb));
    std::vector<float> c(size_t(16 * ldc + 64));
    for (auto& x : a) x = to_bf16(value());
    for (auto& x : b) x = to_bf16(value());
    for (auto& x : c) x = value();
    std::vector<float> expect = c;
    for (int m = 0; m < g.m; ++m)
        for (int j = 0; j < g.n; ++j) {
            float acc = c[size_t(m * ldc + j)];
            for (int s = 0; s < g.steps; ++s)
                acc = sdm_dot(acc, &a[size_t(m * lda + 2 * g.k * s)],
                              &b[size_t((g.k * s) * ldb + 2 * j)], g.k, ldb);
            expect[size_t(m * ldc + j)] = acc;
        }
    if (!reals)  // small integers: every sum exact, so any order gives the integer dot product
        for (int m = 0; m < g.m; ++m)
            for (int j = 0; j < g.n; ++j) {
                double acc = c[size_t(m * ldc + j)];
                for (int kk = 0; kk < kt; ++kk)
                    for (int h = 0; h < 2; ++h)
                        acc += double(from_bf16(a[size_t(m * lda + 2 * kk + h)])) *
                               from_bf16(b[size_t(kk * ldb + 2 * j + h)]);
                REQUIRE(expect[size_t(m * ldc + j)] == float(acc));
            }
    Config cfg;
    cfg.bytes[0] = 1;
    cfg.tile(0, g.m, 4 * g.n);
    cfg.tile(1, g.m, 4 * g.k);
    cfg.tile(2, g.k, 4 * g.n);
    // The kernels step B by 16 rows and A by 64 bytes (32 elements) a K
    // block, whatever K: copies of a and b laid out so.
    std::vector<uint16_t> b16(size_t(16 * g.steps * ldb));
    for (int s = 0; s < g.steps; ++s)
        for (int kk = 0; kk < g.k; ++kk)
            std::memcpy(&b16[size_t((16 * s + kk) * ldb)], &b[size_t((g.k * s + kk) * ldb)],
                        size_t(ldb) * 2);
    const int lda64 = 32 * g.steps + 8;
    std::vector<uint16_t> a64(size_t(g.m * lda64));
    for (int m = 0; m < g.m; ++m)
        for (int s = 0; s < g.steps; ++s)
            std::memcpy(&a64[size_t(m * lda64 + 32 * s)], &a[size_t(m * lda + 2 * g.k * s)],
                        size_t(4 * g.k));
    std::vector<float> got = c;
    const uint64_t before = convgrad::amxemu::emulated_count();
    if (stepped) {
        REQUIRE(g.steps == 1);
        alignas(64) uint8_t stored[128];
        std::memset(stored, 0xAB, sizeof(stored));
        step_through(TilesOnly(cfg), a64.data(), int64_t(lda64) * 2, b16.data(), int64_t(ldb) * 2,
                     got.data(), int64_t(ldc) * 4, stored);
        CHECK(std::memcmp(stored, cfg.bytes, 64) == 0);
        for (int i = 64; i < 128; ++i) CHECK(stored[i] == 0);  // released: the INIT configuration
        CHECK(convgrad::amxemu::emulated_count() - before == 5);
    } else {
        Gemm gen(int64_t(lda64) * 2, int64_t(ldb) * 2, int64_t(ldc) * 4, g.steps);
        gen.getCode<void (*)(const void*, const void*, const void*, void*)>()(
            cfg.bytes, a64.data(), b16.data(), got.data());
        if (convgrad::amxemu::installed())  // every tile-data instruction trapped once
            CHECK(convgrad::amxemu::emulated_count() - before == uint64_t(2 + 3 * g.steps));
    }
    for (size_t i = 0; i < got.size(); ++i) {
        const size_t m = i / size_t(ldc), j = i % size_t(ldc);
        const bool inside = m < size_t(g.m) && j < size_t(g.n);
        INFO("m " << m << " n " << j);
        uint32_t gb, eb;
        const float e = inside ? expect[i] : c[i];  // outside the tile: not stored
        std::memcpy(&gb, &got[i], 4);
        std::memcpy(&eb, &e, 4);
        CHECK(gb == eb);
    }
}

}  // namespace

TEST_CASE("AMX tiles: TDPBF16PS over full and partial tiles, every addressing form",
          "[amx][tiles]") {
    if (!tiles_run()) return;
    for (const GemmCase& g :
         {GemmCase{16, 16, 16, 1}, GemmCase{16, 16, 16, 3}, GemmCase{12, 10, 7, 2},
          GemmCase{1, 1, 1, 1}, GemmCase{5, 16, 3, 2}}) {
        INFO("M " << g.m << " K " << g.k << " N " << g.n << " steps " << g.steps);
        run_gemm(g, false, 7u + uint32_t(g.m));
        run_gemm(g, true, 11u + uint32_t(g.n));
    }
}

TEST_CASE("AMX tiles: the emulator stepped through every instruction, configuration included",
          "[amx][tiles]") {
    // No trap and no tile hardware involved: runs on every CPU, and is how
    // a CPU with AMX checks the emulator's LDTILECFG (RIP-relative here),
    // STTILECFG and TILERELEASE, which run on its hardware under a trap.
    for (const GemmCase& g :
         {GemmCase{16, 16, 16, 1}, GemmCase{12, 10, 7, 1}, GemmCase{1, 1, 1, 1}}) {
        INFO("M " << g.m << " K " << g.k << " N " << g.n);
        run_gemm(g, false, 21u + uint32_t(g.m), true);
        run_gemm(g, true, 23u + uint32_t(g.n), true);
    }
}

TEST_CASE("AMX tiles: denormal inputs read as zero, denormal sums flushed", "[amx][tiles]") {
    if (!tiles_run()) return;
    // One 1 x 1 x 1 product pair per case: C = c + (a0 b0 + a1 b1).
    struct Dot : Xbyak::CodeGenerator {
        Dot() : Xbyak::CodeGenerator(4096, Xbyak::DontSetProtectRWE) {
            ldtilecfg(ptr[rdi]);
            mov(rax, 0);
            tileloadd(tmm0, ptr[rcx + rax]);
            tileloadd(tmm1, ptr[rsi + rax]);
            tileloadd(tmm2, ptr[rdx + rax]);
            tdpbf16ps(tmm0, tmm1, tmm2);
            tilestored(ptr[rcx + rax], tmm0);
            tilerelease();
            ret();
            setProtectModeRE();
        }
    } gen;
    Config cfg;
    cfg.bytes[0] = 1;
    cfg.tile(0, 1, 4);
    cfg.tile(1, 1, 4);
    cfg.tile(2, 1, 4);
    auto dot = [&](float c, uint16_t a0, uint16_t a1, uint16_t b0, uint16_t b1) {
        const uint16_t a[2] = {a0, a1}, b[2] = {b0, b1};
        gen.getCode<void (*)(const void*, const void*, const void*, float*)>()(cfg.bytes, a, b, &c);
        return c;
    };
    const uint16_t one = to_bf16(1.0f), denormal = 0x0040;       // 2^-127 as bf16: an f32 denormal
    CHECK(dot(0.0f, denormal, 0, to_bf16(1024.0f), 0) == 0.0f);  // read as zero (else 2^-117)
    CHECK(dot(2.0f, one, one, one, one) == 4.0f);
    const uint16_t tiny = to_bf16(0x1p-70f);  // tiny * tiny = 2^-140: below FLT_MIN, flushed
    CHECK(dot(0.0f, tiny, 0, tiny, 0) == 0.0f);
    CHECK(dot(1.0f, tiny, 0, tiny, 0) == 1.0f);
}

TEST_CASE("AMX tiles: configuration stored back, RIP-relative, per thread", "[amx][tiles]") {
    if (!tiles_run()) return;
    // ldtilecfg from a configuration in the code itself; sttilecfg to rdi;
    // tilezero then store tmm3 to rsi (stride rdx).
    struct Cfg : Xbyak::CodeGenerator {
        Cfg(const Config& c) : Xbyak::CodeGenerator(4096, Xbyak::DontSetProtectRWE) {
            Xbyak::Label data;
            ldtilecfg(ptr[rip + data]);
            sttilecfg(ptr[rdi]);
            tilezero(tmm3);
            tilestored(ptr[rsi + rdx], tmm3);
            tilerelease();
            sttilecfg(ptr[rdi + 64]);
            ret();
            align(64);
            L(data);
            db(c.bytes, 64);
            setProtectModeRE();
        }
    };
    auto check = [](int rows, int colsb) {
        Config c;
        c.bytes[0] = 1;
        for (int t = 0; t < 8; ++t) c.tile(t, rows, colsb);
        Cfg gen(c);
        alignas(64) uint8_t stored[128];
        std::memset(stored, 0xAB, sizeof(stored));
        std::vector<uint8_t> out(16 * 100, 0xCD);
        gen.getCode<void (*)(void*, void*, int64_t)>()(stored, out.data(), 100);
        CHECK(std::memcmp(stored, c.bytes, 64) == 0);
        for (int i = 64; i < 128; ++i) CHECK(stored[i] == 0);  // released: INIT stores zeros
        for (size_t i = 0; i < out.size(); ++i) {
            const bool inside = i / 100 < size_t(rows) && i % 100 < size_t(colsb);
            CHECK(out[i] == (inside ? 0 : 0xCD));
        }
    };
    std::thread other([&] { check(3, 20); });
    check(16, 64);
    other.join();
}
