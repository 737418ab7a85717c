// Random valid ops of all three kinds against the reference, bit for bit
// with small integers, on every ISA cap the CPU allows: geometry (1D-3D,
// kernels, strides, dilations, asymmetric pads, auto_pad, output_padding,
// a derived or given dst_shape), groups and depthwise, channel counts around
// the vector blocks, every data and weights format, all three types. Table
// tests pin the paths the planners were written for; this one reaches the
// combinations nobody listed (it found the col path's folded-H rows).
#include <catch2/catch.hpp>
#include <string>

#include "random_op.hpp"
#include "test_util.hpp"

using randomop::allowed;
using randomop::draw;
using randomop::RandomOp;
using randomop::Rng;

namespace {

// `ops` random valid ops from r, each with its reference, and every JIT path
// this CPU allows for it: f(ref, jit) once a path. Returns the calls.
template <typename F>
int for_each_jit_op(Rng& r, int ops, F&& f) {
    int checked = 0, jit_runs = 0;
    while (checked < ops) {
        RandomOp op;
        if (!draw(r, op)) continue;
        ++checked;
        INFO("op " << checked << ": " << op.text);
        const randomop::Reference ref = randomop::reference(op, checked);
        for (const std::string isa : {"amx", "avx512_core_bf16", "avx512_core", "avx2"}) {
            // (AMX tiles serve only bf16; other types run as capped below it.)
            if (!allowed(isa) || (isa == "amx" && op.dt != convgrad::data_type::bf16)) continue;
            const auto jit = testutil::make_op(isa, op.kind, op.dt, op.a, op.d0, op.d1);
            INFO(isa << ": " << jit.describe());
            REQUIRE(jit.describe().rfind("jit:", 0) == 0);
            f(ref, jit);
            ++jit_runs;
        }
    }
    return jit_runs;
}

}  // namespace

TEST_CASE("random valid ops: JIT equals the reference on every ISA", "[jit][random]") {
    Rng r = randomop::seeded(20261123u);  // CONVGRAD_RANDOM_SEED / CONVGRAD_RANDOM_OPS
    const int ops = randomop::op_count(2000);
    const int runs = for_each_jit_op(r, ops, [](const randomop::Reference& ref, const convgrad::op& jit) {
        CHECK(testutil::bitwise_equal(testutil::run(jit, ref.in0, ref.in1), ref.expect));
    });
    CHECK(runs >= ops);
}

// Random ops whose inputs and output each lie against an inaccessible page,
// after their last byte or before their first: no kernel, transpose or
// stager reads or writes outside the user's tensors (a masked load or store
// that covered a byte out there would fault). Results equal the reference.
TEST_CASE("random valid ops touch nothing outside the user's tensors", "[jit][random][guard]") {
    Rng r = randomop::seeded(20261206u);  // CONVGRAD_RANDOM_SEED / CONVGRAD_RANDOM_OPS
    const int ops = randomop::op_count(300);
    const int runs = for_each_jit_op(r, ops, [](const randomop::Reference& ref, const convgrad::op& jit) {
        for (const bool at_end : {true, false})
            CHECK(testutil::bitwise_equal(testutil::run_guarded(jit, ref.in0, ref.in1, at_end), ref.expect));
    });
    CHECK(runs >= ops);
}
