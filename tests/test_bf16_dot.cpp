// Which bf16 arithmetic an op runs on an AVX512_BF16 CPU (jit/dot_probe.hpp,
// ops/dispatch.cpp op_isa): the probe's rates and its break-even, the values
// of CONVGRAD_BF16_DOT, the data gradients that keep vdpbf16ps, and both forms
// equal to the reference.
#include <catch2/catch.hpp>
#include <string>

#include "dot_test_util.hpp"
#include "jit/dot_probe.hpp"
#include "jit/isa.hpp"
#include "ops/executor.hpp"
#include "ops/problem.hpp"
#include "test_util.hpp"
#include "weights_case.hpp"

namespace {

using convgrad::data_type;
using convgrad::detail::Bf16Dot;
using convgrad::detail::DotProbe;
using convgrad::detail::Isa;

// The Problem of a bf16 (or dt) case: its weight or its data gradient.
convgrad::detail::Problem problem_of(const wtest::Case& c, bool data, data_type dt) {
    if (!data) return convgrad::detail::make_problem(c.kind(), dt, c.attrs(), c.input0(), c.input1(), nullptr);
    return convgrad::detail::make_problem(convgrad::op_kind::conv_bwd_data, dt, dottest::data_attrs(c),
                                          c.data(c.oc, false), c.weights(), nullptr);
}

bool has_bf16() { return convgrad::detail::cpu_isa() >= Isa::avx512_core_bf16; }

// The implementation prefix of describe(), e.g. "jit:avx512_core".
std::string impl(const convgrad::op& o) {
    const std::string d = o.describe();
    return d.substr(0, d.find(' '));
}

// A bf16 op of the case, weights or data gradient, created under
// CONVGRAD_BF16_DOT=setting (nullptr: unset) with no ISA cap; checked
// bitwise against the reference on small integers. Returns its implementation.
std::string run_checked(wtest::Case c, bool data, const char* setting) {
    c.dt = data_type::bf16;
    auto make = [&](const std::string& isa) { return data ? dottest::data_op(c, isa) : c.make(isa); };
    const convgrad::op ref = make("ref");
    const testutil::Buffer a = testutil::small_ints(c.dt, ref.input0_elems(), 17);
    const testutil::Buffer b = testutil::small_ints(c.dt, ref.input1_elems(), 18);
    const testutil::ScopedEnv dot("CONVGRAD_BF16_DOT", setting);
    // No ISA cap but one below AMX where the CPU has it: the tile kernels
    // would take these layers, and the setting is about the vector kernels.
    // (testutil::IsaCap would set CONVGRAD_BF16_DOT=on with that cap.)
    const testutil::ScopedEnv cap("CONVGRAD_MAX_ISA", testutil::vector_isa() == convgrad::max_isa()
                                                          ? nullptr
                                                          : testutil::vector_isa().c_str());
    const convgrad::op jit = data ? convgrad::op(convgrad::op_kind::conv_bwd_data, c.dt, dottest::data_attrs(c),
                                                 c.data(c.oc, false), c.weights())
                                  : convgrad::op(c.kind(), c.dt, c.attrs(), c.input0(), c.input1());
    INFO((setting ? setting : "unset") << ": " << jit.describe());
    CHECK(testutil::bitwise_equal(testutil::run(jit, a, b), testutil::run(ref, a, b)));
    return impl(jit);
}

}  // namespace

TEST_CASE("bf16 dot probe: both rates measured, vdpbf16ps pays from 0.8 of the FMA's FLOP rate",
          "[jit][bf16_dot]") {
    DotProbe q;
    q.fma_gflops = 100;
    q.dot_gflops = 80;
    CHECK(q.dot_pays());
    q.dot_gflops = 79;
    CHECK_FALSE(q.dot_pays());
    if (!has_bf16()) {
        WARN("no AVX512_BF16: the probe is not measured");
        return;
    }
    const DotProbe p = convgrad::detail::measure_dot_probe();
    INFO("vdpbf16ps " << p.dot_gflops << " GFLOP/s, vfmadd231ps " << p.fma_gflops << " GFLOP/s");
    // One core issues at least one 512-bit FMA every 4 cycles of 4 GHz.
    CHECK(p.fma_gflops > 1);
    CHECK(p.dot_gflops > 1);
}

TEST_CASE("bf16 dot rule: where the probe says widen, which ops keep vdpbf16ps", "[jit][bf16_dot]") {
    using convgrad::detail::op_isa;
    const Isa bf16 = Isa::avx512_core_bf16, core = Isa::avx512_core;
    wtest::Case dense = wtest::conv2d(24, 40, {9, 9}, {3, 3});
    wtest::Case dw = wtest::conv2d(32, 32, {10, 10}, {3, 3});
    dw.g = 32;
    wtest::Case dw_s2 = dw;
    dw_s2.s = {2, 2};
    wtest::Case lanes = wtest::conv2d(32, 32, {10, 10}, {3, 3});  // 4 channels a group
    lanes.g = 8;
    for (wtest::Case* c : {&dense, &dw, &dw_s2, &lanes}) c->pb = c->pe = {1, 1};
    auto isa_of = [&](const wtest::Case& c, bool data, Bf16Dot setting, bool pays, data_type dt = data_type::bf16,
                      Isa effective = Isa::avx512_core_bf16) {
        return op_isa(problem_of(c, data, dt), effective, setting, pays);
    };
    // The probe's verdict: widen, except the data gradients of lane groups
    // and strided depthwise layers.
    CHECK(isa_of(dense, false, Bf16Dot::automatic, false) == core);
    CHECK(isa_of(dense, true, Bf16Dot::automatic, false) == core);
    CHECK(isa_of(dw, false, Bf16Dot::automatic, false) == core);
    CHECK(isa_of(dw, true, Bf16Dot::automatic, false) == core);
    CHECK(isa_of(dw_s2, false, Bf16Dot::automatic, false) == core);
    CHECK(isa_of(dw_s2, true, Bf16Dot::automatic, false) == bf16);
    CHECK(isa_of(lanes, false, Bf16Dot::automatic, false) == core);
    CHECK(isa_of(lanes, true, Bf16Dot::automatic, false) == bf16);
    for (const wtest::Case* c : {&dense, &dw, &dw_s2, &lanes})
        for (const bool data : {false, true}) {
            CHECK(isa_of(*c, data, Bf16Dot::automatic, true) == bf16);  // it pays: everything keeps it
            CHECK(isa_of(*c, data, Bf16Dot::on, false) == bf16);
            CHECK(isa_of(*c, data, Bf16Dot::off, true) == core);  // off: never
            CHECK(isa_of(*c, data, Bf16Dot::off, false, data_type::f32) == bf16);  // other types untouched
            CHECK(isa_of(*c, data, Bf16Dot::off, false, data_type::f16) == bf16);
            CHECK(isa_of(*c, data, Bf16Dot::automatic, false, data_type::bf16, core) == core);  // a cap below
            CHECK(isa_of(*c, data, Bf16Dot::on, false, data_type::bf16, Isa::avx2) == Isa::avx2);
        }
}

TEST_CASE("CONVGRAD_BF16_DOT: auto, on and off pick the bf16 kernels, unknown values are rejected",
          "[jit][bf16_dot][validation]") {
    {
        const testutil::ScopedEnv bad("CONVGRAD_BF16_DOT", "yes");
        CHECK_THROWS_WITH(convgrad::detail::bf16_dot_setting(),
                          Catch::Contains("CONVGRAD_BF16_DOT") && Catch::Contains("\"yes\""));
        // Every op checks it, f32 too, on any CPU.
        const wtest::Case c = wtest::conv2d(8, 8, {6, 6}, {3, 3});
        CHECK_THROWS_WITH(convgrad::op(c.kind(), data_type::f32, c.attrs(), c.input0(), c.input1()),
                          Catch::Contains("CONVGRAD_BF16_DOT"));
    }
    for (const char* v : {"auto", "on", "off"}) {
        const testutil::ScopedEnv env("CONVGRAD_BF16_DOT", v);
        CHECK(convgrad::detail::bf16_dot_setting() ==
              (std::string(v) == "on" ? Bf16Dot::on : std::string(v) == "off" ? Bf16Dot::off : Bf16Dot::automatic));
    }
    if (!has_bf16()) {
        WARN("no AVX512_BF16: every bf16 op widens");
        return;
    }
    const bool pays = convgrad::detail::bf16_dot_pays();
    const std::string dot = "jit:avx512_core_bf16", widen = "jit:avx512_core";
    // Ops created with no ISA cap (but AMX's), both gradients, equal to the
    // reference: the setting decides (unset is auto).
    wtest::Case dense = wtest::conv2d(24, 40, {9, 9}, {3, 3});
    wtest::Case lanes = wtest::conv2d(32, 32, {10, 10}, {3, 3});
    lanes.g = 8;
    for (wtest::Case* c : {&dense, &lanes}) c->pb = c->pe = {1, 1};
    for (const bool data : {false, true}) {
        CHECK(run_checked(dense, data, "on") == dot);
        CHECK(run_checked(dense, data, "off") == widen);
        CHECK(run_checked(dense, data, "auto") == (pays ? dot : widen));
        CHECK(run_checked(dense, data, nullptr) == (pays ? dot : widen));
        CHECK(run_checked(lanes, data, "off") == widen);
        CHECK(run_checked(lanes, data, "auto") == (pays || data ? dot : widen));
    }
}
