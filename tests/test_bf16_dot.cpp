// Which bf16 arithmetic an op runs on an AVX512_BF16 CPU (jit/dot_probe.hpp,
// ops/dispatch.cpp op_isa): the probe's rates and its break-even, the values
// of CONVGRAD_BF16_DOT, the data gradients that keep vdpbf16ps, and both forms
// equal to the reference.
#include <catch2/catch.hpp>
#include <string>

#include "dot_test_util.hpp"
#include "jit/dot_probe.hpp"
#include "jit/isa.hpp"
#include "test_util.hpp"
#include "weights_case.hpp"

namespace {

using convgrad::data_type;
using convgrad::detail::Bf16Dot;
using convgrad::detail::DotProbe;
using convgrad::detail::Isa;

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
    const convgrad::op jit = make("");  // no ISA cap
    INFO((setting ? setting : "unset") << ": " << jit.describe());
    CHECK(testutil::bitwise_equal(testutil::run(jit, a, b), testutil::run(ref, a, b)));
    return impl(jit);
}

}  // namespace

TEST_CASE("bf16 dot probe: both rates measured; vdpbf16ps pays from 0.8 of the FMA's FLOP rate",
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

TEST_CASE("CONVGRAD_BF16_DOT: auto, on and off pick the bf16 kernels; unknown values are rejected",
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
    const bool pays = convgrad::detail::bf16_dot_products(Bf16Dot::automatic);
    const std::string dot = "jit:avx512_core_bf16", widen = "jit:avx512_core";
    // A dense 3x3 layer, both gradients: the setting decides; unset is auto.
    wtest::Case dense = wtest::conv2d(24, 40, {9, 9}, {3, 3});
    dense.pb = dense.pe = {1, 1};
    for (const bool data : {false, true}) {
        CHECK(run_checked(dense, data, "on") == dot);
        CHECK(run_checked(dense, data, "off") == widen);
        CHECK(run_checked(dense, data, "auto") == (pays ? dot : widen));
        CHECK(run_checked(dense, data, nullptr) == (pays ? dot : widen));
    }
    // Depthwise: the weight gradient and the unit-stride data gradient widen
    // under off; the strided data gradient keeps vdpbf16ps.
    wtest::Case dw = wtest::conv2d(32, 32, {10, 10}, {3, 3});
    dw.g = 32;
    dw.pb = dw.pe = {1, 1};
    CHECK(run_checked(dw, false, "off") == widen);
    CHECK(run_checked(dw, true, "off") == widen);
    dw.s = {2, 2};
    CHECK(run_checked(dw, true, "off") == dot);
    CHECK(run_checked(dw, false, "off") == widen);
    // Lane groups (4 channels a group): the data gradient keeps vdpbf16ps,
    // with or without a stride; the weight gradient widens.
    wtest::Case lanes = wtest::conv2d(32, 32, {10, 10}, {3, 3});
    lanes.g = 8;
    lanes.pb = lanes.pe = {1, 1};
    CHECK(run_checked(lanes, true, "off") == dot);
    CHECK(run_checked(lanes, false, "off") == widen);
}
