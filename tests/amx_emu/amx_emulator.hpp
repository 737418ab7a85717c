// A software model of the AMX tile instructions the kernels emit, for tests
// on CPUs without AMX (the project's AMD Zen 5 machines among them): a
// SIGILL handler decodes the faulting instruction, runs it on a per-thread
// tile file and steps over it. Everything around the tile instructions
// (address arithmetic, loops, the AVX-512 rounding into bf16) runs natively,
// so what is tested is the byte stream production runs.
//
// Covered: LDTILECFG, STTILECFG, TILERELEASE, TILEZERO, TILELOADD,
// TILELOADDT1, TILESTORED and TDPBF16PS, with every ModRM / SIB / VEX.X,B /
// disp8 / disp32 / RIP-relative form the encodings allow. Semantics follow
// the Intel SDM pseudocode: palette 1 (8 tiles of up to 16 rows of 64
// bytes); a tile load zeroes what lies past its configured rows and
// columns; TDPBF16PS sums each output's even and odd products in two f32
// chains from zero (fused multiply-adds, round to nearest even, input
// denormals read as zero, output denormals flushed), then adds their sum to
// the accumulator. Anything the hardware would fault on (a tile instruction
// before LDTILECFG, an invalid configuration, TDPBF16PS on tiles whose
// shapes do not chain, a tile index past 7) prints the instruction and
// aborts; so does any other instruction that raises SIGILL.
//
// Each emulated instruction costs a signal round trip (microseconds), so
// the tests it serves keep their shapes small. Under gdb: `handle SIGILL
// nostop noprint pass`. AddressSanitizer builds check every emulated tile
// load and store (they are memcpys here). Not a check of the silicon:
// docs/ACCURACY.md says what was compared with real AMX hardware.
#pragma once

#include <cstdint>

namespace convgrad::amxemu {

// Installs the SIGILL handler (once a process; later calls do nothing).
void install();
// Whether install() has run in this process.
bool installed();

// Runs the tile instruction at the RIP of `context` (a ucontext_t) as the
// handler would, without a trap, and steps RIP over it; aborts on anything
// else. Lets a test drive LDTILECFG, STTILECFG and TILERELEASE through the
// emulator on a CPU where they would run on the hardware. A context
// without an XSAVE image (null fpregs) keeps the emulator's own
// configuration.
void emulate(void* context);

// Tile-data instructions (TILELOADD, TILESTORED, TILEZERO, TDPBF16PS) the
// calling thread has had emulated so far.
uint64_t emulated_count();

}  // namespace convgrad::amxemu
