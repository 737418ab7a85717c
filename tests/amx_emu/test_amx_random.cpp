// Random valid bf16 ops with the channel counts the AMX kernels take
// (tests/random_op.hpp, tiles), on the tiles wherever they can run
// (CONVGRAD_AMX=all), bit for bit against the reference with small
// integers: all three kinds, 1D-3D, strides, dilations, asymmetric pads,
// auto_pad, output_padding, groups of 16, every data and weights format.
// Every op's tensors lie against an inaccessible page (testutil::run_guarded).
// In both test executables: on the hardware in convgrad-tests where the CPU
// has AMX, emulated in convgrad-amx-emu-tests (fewer ops there: each tile
// instruction is a trap).
#include <catch2/catch.hpp>
#include <string>

#include "amx_emu/amx_emulator.hpp"
#include "jit/isa.hpp"
#include "random_op.hpp"
#include "test_util.hpp"

TEST_CASE("random bf16 ops on the AMX tiles: JIT equals the reference", "[jit][amx][random]") {
    const bool emulated = convgrad::amxemu::installed();
    if (!emulated && convgrad::detail::cpu_isa() != convgrad::detail::Isa::amx) {
        WARN("no AMX on this CPU and no emulator in this process: skipped");
        return;
    }
    randomop::Rng r = randomop::seeded(20261205u);  // CONVGRAD_RANDOM_SEED / CONVGRAD_RANDOM_OPS
    const int ops = randomop::op_count(emulated ? 300 : 1000);
    const testutil::ScopedEnv all("CONVGRAD_AMX", "all");
    int checked = 0, on_tiles = 0;
    while (checked < ops) {
        randomop::RandomOp op;
        if (!randomop::draw(r, op, true)) continue;
        ++checked;
        INFO("op " << checked << ": " << op.text);
        const randomop::Reference ref = randomop::reference(op, checked);
        const auto jit = testutil::make_op("amx", op.kind, op.dt, op.a, op.d0, op.d1);
        INFO(jit.describe());
        REQUIRE(jit.describe().rfind("jit:", 0) == 0);
        on_tiles += jit.describe().rfind("jit:amx", 0) == 0;
        // Tensors against an inaccessible page, after them or before them in
        // turn: a tile load or store outside them faults.
        CHECK(testutil::bitwise_equal(testutil::run_guarded(jit, ref.in0, ref.in1, checked % 2 == 0), ref.expect));
    }
    // Most draws reach the tiles (the rest: data gradients of fewer than
    // 32 output channels, and the like, on the vector kernels).
    CHECK(on_tiles * 2 >= checked);
}
