#include "jit/isa.hpp"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <sys/syscall.h>
#include <unistd.h>
#include <xbyak/xbyak_util.h>

#include "convgrad/convgrad.hpp"

namespace convgrad::detail {

const char* isa_name(Isa isa) {
    switch (isa) {
        case Isa::ref: return "ref";
        case Isa::avx2: return "avx2";
        case Isa::avx512_core: return "avx512_core";
        case Isa::avx512_core_bf16: return "avx512_core_bf16";
        case Isa::amx: return "amx";
    }
    return "?";
}

namespace {

// AMX-TILE and AMX-BF16 in CPUID (all Xbyak checks), the OS saving the tile
// state (XCR0 bits 17 and 18), a palette of at least 1 (CPUID leaf 0x1D:
// some hypervisors advertise AMX with none), and this process's permission
// to use the tile data (Linux 5.16+: arch_prctl ARCH_REQ_XCOMP_PERM, once
// a process, before any thread's first tile instruction).
bool amx_usable(const Xbyak::util::Cpu& cpu) {
    using Cpu = Xbyak::util::Cpu;
    if (!cpu.has(Cpu::tAMX_TILE | Cpu::tAMX_BF16)) return false;
    uint32_t lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    const uint64_t xcr0 = (uint64_t(hi) << 32) | lo;
    if ((xcr0 & (uint64_t(3) << 17)) != (uint64_t(3) << 17)) return false;
    uint32_t leaf[4] = {};
    Cpu::getCpuidEx(0x1d, 0, leaf);
    if (leaf[0] < 1) return false;
    constexpr long kReqXcompPerm = 0x1023, kXfeatureTileData = 18;
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureTileData) == 0;
}

std::atomic<bool> amx_emulated{false};

}  // namespace

bool assume_emulated_amx() {
    amx_emulated = true;
    return cpu_isa() == Isa::amx;
}

Isa cpu_isa() {
    static const Isa detected = [] {
        using Cpu = Xbyak::util::Cpu;
        const Cpu cpu;
        if (!cpu.has(Cpu::tAVX2 | Cpu::tFMA | Cpu::tF16C)) return Isa::ref;
        if (!cpu.has(Cpu::tAVX512F | Cpu::tAVX512BW | Cpu::tAVX512DQ | Cpu::tAVX512VL))
            return Isa::avx2;
        if (!cpu.has(Cpu::tAVX512_BF16)) return Isa::avx512_core;
        return amx_emulated || amx_usable(cpu) ? Isa::amx : Isa::avx512_core_bf16;
    }();
    return detected;
}

bool cpu_has_vbmi2() {
    static const bool has = Xbyak::util::Cpu().has(Xbyak::util::Cpu::tAVX512_VBMI2);
    return has;
}

Isa effective_isa() {
    const Isa hw = cpu_isa();
    const char* env = std::getenv("CONVGRAD_MAX_ISA");
    if (!env || !*env) return hw;
    for (Isa cap : {Isa::ref, Isa::avx2, Isa::avx512_core, Isa::avx512_core_bf16, Isa::amx})
        if (std::string(env) == isa_name(cap)) return std::min(hw, cap);
    throw error(std::string("CONVGRAD_MAX_ISA: expected one of ref, avx2, avx512_core, "
                            "avx512_core_bf16, amx, given \"") + env + "\"");
}

}  // namespace convgrad::detail
