// The AMX tests (tests/test_amx.cpp) and the emulator's own, with every
// tile instruction emulated (amx_emulator.hpp): on CPUs without AMX, and on
// CPUs with it too, since this process never asks the OS for the tile
// state (the instructions then trap as well). The kernels' code around the
// tiles needs AVX-512 with BF16; without it the AMX tests skip, as they do
// on any CPU without AMX.
#define CATCH_CONFIG_RUNNER
#define CATCH_CONFIG_NO_POSIX_SIGNALS  // the emulator owns SIGILL
#include <catch2/catch.hpp>

#include "amx_emu/amx_emulator.hpp"
#include "jit/isa.hpp"

int main(int argc, char** argv) {
    convgrad::amxemu::install();
    convgrad::detail::assume_emulated_amx();
    return Catch::Session().run(argc, argv);
}
