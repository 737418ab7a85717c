// Helpers of the tests of the in-place 1x1 paths (test_jit_data_dot.cpp,
// test_jit_weights_dot.cpp, test_jit_data_ncx.cpp).
#pragma once

#include <tbb/task_arena.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "jit/isa.hpp"
#include "test_util.hpp"
#include "weights_case.hpp"

namespace dottest {

// Whether this machine (and CONVGRAD_MAX_ISA) runs `isa`.
inline bool runs(const std::string& isa) {
    const std::vector<std::string> order{"avx2", "avx512_core", "avx512_core_bf16"};
    const auto level = [&](const std::string& s) { return std::find(order.begin(), order.end(), s) - order.begin(); };
    return level(isa) <= level(convgrad::max_isa());
}

// A 1x1 layer (unit strides, no padding) in NXC or NCX.
inline wtest::Case one_by_one(int64_t mb, int64_t ic, int64_t oc, const convgrad::dims& in, bool nxc = true) {
    wtest::Case c;
    c.mb = mb;
    c.ic = ic;
    c.oc = oc;
    c.in = in;
    c.k = convgrad::dims(in.size(), 1);
    c.nxc = nxc;
    return c;
}

// The attributes of a convolution-view case's ConvolutionBackwardData.
inline convgrad::attributes data_attrs(const wtest::Case& c) {
    convgrad::attributes a = c.attrs();
    a.weights_shape.clear();
    a.dst_shape = c.data(c.ic, true);
    return a;
}

// ConvolutionBackwardData of a convolution-view case.
inline convgrad::op data_op(const wtest::Case& c, const std::string& isa) {
    return testutil::make_op(isa, convgrad::op_kind::conv_bwd_data, c.dt, data_attrs(c), c.data(c.oc, false),
                             c.weights());
}

// Small integers of each type in `dts` on every ISA cap this machine runs:
// make(dt, isa) ("ref" for the reference) bitwise equal to the reference
// (exact sums, one rounding), through the path (its describe() holds
// `note`) exactly when `dot`.
template <typename Make>
void check_exact(Make make, const char* note, bool dot, const std::vector<convgrad::data_type>& dts,
                 uint32_t seed) {
    for (const convgrad::data_type dt : dts) {
        const convgrad::op ref = make(dt, "ref");
        const testutil::Buffer a = testutil::small_ints(dt, ref.input0_elems(), seed);
        const testutil::Buffer b = testutil::small_ints(dt, ref.input1_elems(), seed + 1);
        const testutil::Buffer expect = testutil::run(ref, a, b);
        for (const std::string isa : {"avx512_core_bf16", "avx512_core", "avx2"}) {
            if (!runs(isa)) continue;
            const convgrad::op jit = make(dt, isa);
            INFO(isa << " " << convgrad::dtype_name(dt) << ": " << jit.describe());
            REQUIRE(jit.describe().rfind("jit:", 0) == 0);
            CHECK((jit.describe().find(note) != std::string::npos) == dot);
            CHECK(testutil::bitwise_equal(testutil::run(jit, a, b), expect));
        }
    }
}

// A copy of a buffer's bytes that ends where an inaccessible page begins
// (front: that starts where one ends): a load of any byte past its end
// (before its start) faults.
class Guarded {
public:
    explicit Guarded(const testutil::Buffer& b, bool front = false)
        : pages_(b.bytes.size(), front ? convgrad::cli::guard_side::begin : convgrad::cli::guard_side::end) {
        std::memcpy(pages_.data(), b.data(), b.bytes.size());
    }
    const char* data() const { return reinterpret_cast<const char*>(pages_.data()); }
    char* data() { return reinterpret_cast<char*>(pages_.data()); }

private:
    convgrad::cli::guarded_pages pages_;
};

// o on inputs a and b into an output that each end where an inaccessible
// page begins: a read or a write past any of them crashes the test.
// Returns the output.
inline testutil::Buffer run_guarded(const convgrad::op& o, const Guarded& a, const Guarded& b) {
    Guarded out(testutil::Buffer(o.dtype(), o.output_elems()));
    o.execute(a.data(), b.data(), out.data());
    testutil::Buffer got(o.dtype(), o.output_elems());
    std::memcpy(got.data(), out.data(), got.bytes.size());
    return got;
}

// o's outputs on a and b in arenas of 1, 2 and 3 threads, each run checked
// to use that many.
inline std::vector<testutil::Buffer> outputs_1_2_3(const convgrad::op& o, const testutil::Buffer& a,
                                                   const testutil::Buffer& b) {
    std::vector<testutil::Buffer> outs;
    for (int t : {1, 2, 3}) {
        tbb::task_arena arena(t);
        arena.execute([&] {
            outs.push_back(testutil::run(o, a, b));
            CHECK(testutil::threads_used(o) == t);
        });
    }
    return outs;
}

// Elements of got farther from expect than the error of sums of `terms`
// products of magnitude <= 1 in f32 (any order: terms · 2^-24 relative to
// the terms, doubled) plus one rounding to `precision` bits.
inline int64_t outside_bound(const testutil::Buffer& got, const testutil::Buffer& expect, double terms,
                             int precision) {
    int64_t bad = 0;
    for (int64_t i = 0; i < got.size(); ++i) {
        const double r = expect.get(i);
        const double ulp = std::ldexp(1.0, std::ilogb(std::max(std::fabs(r), 1e-30)) - (precision - 1));
        bad += std::fabs(got.get(i) - r) > terms * std::ldexp(1.0, -23) + ulp;
    }
    return bad;
}

// Random reals of every type on every ISA cap this machine runs, through
// the path (describe() holds `note`): make(dt, isa) on 1, 2 and 3 threads
// (each using that many) bitwise equal, and every element within the
// error of sums of `terms` products of magnitude <= 1 in f32 (any order:
// terms · 2^-24 relative to the terms, doubled) plus one rounding to dt.
template <typename Make>
void check_reals(Make make, const char* note, double terms, uint32_t seed) {
    for (const convgrad::data_type dt :
         {convgrad::data_type::f32, convgrad::data_type::bf16, convgrad::data_type::f16}) {
        const convgrad::op ref = make(dt, "ref");
        const testutil::Buffer a = testutil::random_reals(dt, ref.input0_elems(), seed);
        const testutil::Buffer b = testutil::random_reals(dt, ref.input1_elems(), seed + 1);
        const testutil::Buffer expect = testutil::run(ref, a, b);
        const int precision = dt == convgrad::data_type::f32 ? 24 : dt == convgrad::data_type::bf16 ? 8 : 11;
        for (const std::string isa : {"avx512_core_bf16", "avx512_core", "avx2"}) {
            if (!runs(isa)) continue;
            const convgrad::op o = make(dt, isa);
            INFO(isa << " " << convgrad::dtype_name(dt) << ": " << o.describe());
            REQUIRE(o.describe().find(note) != std::string::npos);
            const std::vector<testutil::Buffer> outs = outputs_1_2_3(o, a, b);
            CHECK(testutil::bitwise_equal(outs[0], outs[1]));
            CHECK(testutil::bitwise_equal(outs[0], outs[2]));
            CHECK(outside_bound(outs[0], expect, terms, precision) == 0);
        }
    }
}

}  // namespace dottest
