#include "jit/isa.hpp"

#include <algorithm>
#include <cstdlib>
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

Isa cpu_isa() {
    static const Isa detected = [] {
        using Cpu = Xbyak::util::Cpu;
        const Cpu cpu;
        if (!cpu.has(Cpu::tAVX2 | Cpu::tFMA | Cpu::tF16C)) return Isa::ref;
        if (!cpu.has(Cpu::tAVX512F | Cpu::tAVX512BW | Cpu::tAVX512DQ | Cpu::tAVX512VL))
            return Isa::avx2;
        if (!cpu.has(Cpu::tAVX512_BF16)) return Isa::avx512_core;
        // AMX kernels are not part of this build; report the level below.
        return Isa::avx512_core_bf16;
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
