// Instruction-set levels, CPU detection and the CONVGRAD_MAX_ISA cap.
#pragma once

#include <string>

namespace convgrad::detail {

// Ordered: each level includes the ones before it.
enum class Isa { ref, avx2, avx512_core, avx512_core_bf16, amx };

const char* isa_name(Isa isa);
// The best level this CPU supports (FMA/F16C for avx2; AVX-512 F/BW/DQ/VL for
// avx512_core; plus AVX512-BF16; plus AMX tiles with OS permission).
Isa cpu_isa();
// cpu_isa() capped by CONVGRAD_MAX_ISA (read on every call, so a process may
// change it between op creations). Throws convgrad::error for an unknown value.
Isa effective_isa();
// Tests only (tests/amx_emu): before the process's first cpu_isa() call,
// makes an avx512_core_bf16 CPU report amx without asking the OS for the
// tile state, for a process whose SIGILL handler emulates the tile
// instructions. Returns whether cpu_isa() now reports amx.
bool assume_emulated_amx();
// AVX512_VBMI2 (vpexpandw), which some avx512_core_bf16 CPUs lack (Cooper
// Lake): kernels use it only as an alternative form.
bool cpu_has_vbmi2();

}  // namespace convgrad::detail
