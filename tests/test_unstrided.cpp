// Strided 1x1 layers in NCX run at unit stride (ops/exec_unstrided.cpp):
// src subsampled for weight gradients, diff_src spread back with zeros for
// data gradients (a few images a pass), around the unit-stride problem's
// executor. Which problems take it,
// and bitwise equality with the reference (every output element, the
// zeros included) on every ISA and type; thread-count independence; the
// in-place NCX paths under concurrent calls.
#include <catch2/catch.hpp>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "dot_test_util.hpp"
#include "ops/scratch.hpp"
#include "test_util.hpp"
#include "weights_case.hpp"

namespace {

using convgrad::data_type;
using convgrad::dims;
using dottest::data_op;

constexpr const char* kNote = "strided 1x1 in NCX";

wtest::Case strided(int64_t ic, int64_t oc, const dims& in, const dims& s) {
    wtest::Case c = dottest::one_by_one(2, ic, oc, in, false);
    c.s = s;
    return c;
}

// Weight gradient and ConvTranspose's, small integers, every ISA cap:
// describe() holds `note` exactly when `taken`.
void check_weights(wtest::Case c, const char* note, bool taken, uint32_t seed) {
    INFO(wtest::label(c, ""));
    for (bool transpose : {false, true}) {
        c.transpose = transpose;
        dottest::check_exact(
                [&](data_type dt, const std::string& isa) {
                    c.dt = dt;
                    return c.make(isa);
                },
                note, taken, {data_type::f32, data_type::bf16, data_type::f16}, seed);
    }
}

// Both weight gradients and the data gradient: through the path exactly
// when `taken`.
void check(wtest::Case c, bool taken) {
    check_weights(c, kNote, taken, 101);
    INFO(wtest::label(c, ""));
    dottest::check_exact(
            [&](data_type dt, const std::string& isa) {
                c.dt = dt;
                return data_op(c, isa);
            },
            kNote, taken, {data_type::f32, data_type::bf16, data_type::f16}, 103);
}

}  // namespace

TEST_CASE("unstrided: strided 1x1 layers in NCX run at unit stride", "[jit][unstrided]") {
    // Strides 2 and 3, inputs with rows and columns past the last pixel
    // read (odd sizes: the spread writes zeros there), 1D and 3D, groups,
    // both weights formats; output rows of 14, 16, 17 and 1 pixels (the
    // vector passes' masked ends), planes of 7x7 and 1x2.
    check(strided(24, 40, {50, 46}, {2, 2}), true);
    check(strided(24, 40, {28, 28}, {2, 2}), true);
    check(strided(12, 20, {14, 14}, {2, 2}), true);
    check(strided(12, 20, {33, 32}, {2, 2}), true);
    check(strided(12, 20, {9, 34}, {2, 2}), true);
    check(strided(12, 20, {7, 2}, {2, 2}), true);
    check(strided(12, 20, {2, 3}, {2, 2}), true);
    check(strided(13, 9, {51, 47}, {2, 2}), true);
    check(strided(13, 9, {70, 75}, {3, 3}), true);
    check(strided(16, 24, {26, 47}, {1, 2}), true);
    check(strided(8, 12, {1201}, {2}), true);
    check(strided(8, 12, {5, 22, 23}, {1, 2, 2}), true);
    wtest::Case g = strided(18, 34, {50, 46}, {2, 2});
    g.g = 2;
    check(g, true);
    wtest::Case oix = strided(24, 40, {50, 46}, {2, 2});
    oix.wfmt = "OIX";
    check(oix, true);
}

TEST_CASE("unstrided: data gradients go a few images a pass, their scratch bounded", "[jit][unstrided]") {
    // 64 channels at 65x65 unit-stride pixels: 1.08 MB an image in f32 (3
    // images a pass of 4 MiB: 3 + 3 + 2 at mb 8), half that in 16 bits (7
    // + 1): every element against the reference, every ISA and type; at mb
    // 16 the scratch kept stays under half the whole unit-stride diff_src.
    wtest::Case c = strided(64, 24, {130, 130}, {2, 2});
    c.mb = 8;
    dottest::check_exact(
            [&](data_type dt, const std::string& isa) {
                c.dt = dt;
                return data_op(c, isa);
            },
            "images a pass", true, {data_type::f32, data_type::bf16, data_type::f16}, 107);
    c.mb = 16;
    c.dt = data_type::f32;
    const convgrad::op o = data_op(c, testutil::vector_isa());
    INFO(o.describe());
    const testutil::Buffer dd(data_type::f32, o.input0_elems()), w(data_type::f32, o.input1_elems());
    const size_t whole = static_cast<size_t>(c.mb * 64 * 65 * 65 * 4);
    convgrad::detail::release_scratch();
    (void)testutil::run(o, dd, w);
    CHECK(convgrad::detail::kept_scratch_bytes() > 0);
    CHECK(convgrad::detail::kept_scratch_bytes() < whole / 2);
    convgrad::detail::release_scratch();
}

TEST_CASE("unstrided: weight gradients of 512+ output pixels subsample src tile by tile", "[jit][unstrided]") {
    // With more input than output channels the inner-product path reads
    // the strided src itself, copying each outer (input-channel) tile's
    // rows as the tile starts: a last partial tile, groups, W strides 1, 2
    // and 3, 1D / 3D, and images of several chunks whose boundaries fall
    // inside output rows (80x80 -> 40x40 with 130 output channels: chunks
    // of 544 pixels).
    constexpr const char* kTiles = "subsampled as it starts";
    auto weights = [&](const wtest::Case& c) { check_weights(c, kTiles, true, 131); };
    weights(strided(40, 24, {50, 46}, {2, 2}));
    weights(strided(13, 9, {51, 47}, {2, 2}));
    weights(strided(136, 130, {80, 80}, {2, 2}));
    weights(strided(13, 9, {70, 75}, {3, 3}));
    weights(strided(24, 16, {26, 47}, {1, 2}));
    weights(strided(12, 8, {1201}, {2}));
    weights(strided(12, 8, {5, 22, 23}, {1, 2, 2}));
    wtest::Case g = strided(34, 18, {50, 46}, {2, 2});
    g.g = 2;
    weights(g);
    // Fewer input than output channels, or output channels whose chunks
    // would be short: the subsampling pass.
    for (const wtest::Case& c : {strided(24, 40, {50, 46}, {2, 2}), strided(8, 600, {50, 46}, {2, 2})}) {
        const convgrad::op o = c.make(testutil::vector_isa());
        INFO(o.describe());
        CHECK(o.describe().find(kNote) != std::string::npos);
        CHECK(o.describe().find(kTiles) == std::string::npos);
    }
}

TEST_CASE("unstrided: the problems it leaves", "[jit][unstrided]") {
    wtest::Case nxc = strided(24, 40, {50, 46}, {2, 2});
    nxc.nxc = true;
    check(nxc, false);
    wtest::Case padded = strided(24, 40, {50, 46}, {2, 2});
    padded.pb = {1, 0};
    check(padded, false);
    wtest::Case edge = strided(24, 40, {50, 46}, {2, 2});  // the last output reads the end padding
    edge.pe = {0, 1};
    check(edge, false);
    wtest::Case k3 = strided(24, 40, {50, 46}, {2, 2});
    k3.k = {1, 3};
    check(k3, false);
}

TEST_CASE("unstrided: random reals within tolerance, identical for 1, 2 and 3 threads", "[jit][unstrided]") {
    // 2 images of 25 x 23 output pixels: 1150 products an output.
    wtest::Case c = strided(43, 29, {50, 46}, {2, 2});
    dottest::check_reals(
            [&](data_type dt, const std::string& isa) {
                c.dt = dt;
                return c.make(isa);
            },
            kNote, 1150, 105);
}

TEST_CASE("unstrided: the NCX paths under concurrent execute from 8 threads", "[jit][unstrided]") {
    // Each keeps per-thread buffers between calls (the dot path's lanes,
    // this path's subsampled or unit-stride tensor): 8 threads run three ops
    // of each kind at once, every result equal to the reference.
    std::vector<convgrad::op> ops;
    std::vector<testutil::Buffer> as, bs, wants;
    wtest::Case w = strided(24, 40, {50, 46}, {2, 2});
    wtest::Case unit = dottest::one_by_one(2, 24, 40, {25, 23}, false);
    for (const wtest::Case& c : {w, unit}) {
        ops.push_back(c.make(testutil::vector_isa()));
        ops.push_back(data_op(c, testutil::vector_isa()));
    }
    for (size_t i = 0; i < ops.size(); ++i) {
        INFO(ops[i].describe());
        CHECK(ops[i].describe().find("NCX read") != std::string::npos);
        as.push_back(testutil::small_ints(data_type::f32, ops[i].input0_elems(), 111 + static_cast<uint32_t>(i)));
        bs.push_back(testutil::small_ints(data_type::f32, ops[i].input1_elems(), 121 + static_cast<uint32_t>(i)));
    }
    wants.push_back(testutil::run(w.make("ref"), as[0], bs[0]));
    wants.push_back(testutil::run(data_op(w, "ref"), as[1], bs[1]));
    wants.push_back(testutil::run(unit.make("ref"), as[2], bs[2]));
    wants.push_back(testutil::run(data_op(unit, "ref"), as[3], bs[3]));
    std::vector<std::vector<testutil::Buffer>> outs(8, std::vector<testutil::Buffer>(ops.size()));
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t)
        threads.emplace_back([&, t] {
            for (int rep = 0; rep < 3; ++rep)
                for (size_t i = 0; i < ops.size(); ++i) {
                    const size_t k = (i + static_cast<size_t>(t)) % ops.size();
                    outs[static_cast<size_t>(t)][k] = testutil::run(ops[k], as[k], bs[k]);
                }
        });
    for (auto& t : threads) t.join();
    for (const auto& per_thread : outs)
        for (size_t i = 0; i < ops.size(); ++i) CHECK(testutil::bitwise_equal(per_thread[i], wants[i]));
}

TEST_CASE("unstrided: the vector passes touch nothing past src or diff_src", "[jit][unstrided]") {
    // src (weight gradients) and diff_src (data gradients) end where an
    // inaccessible page begins (dottest::Guarded): output rows of 5 and 7
    // pixels on inputs of 9 and 14 (the last pair's zero falls past an
    // odd row), 17 on 33.
    // Outputs of 552 and 602 pixels: weight gradients subsampling per tile.
    for (const dims& in : {dims{7, 9}, dims{14, 14}, dims{3, 33}, dims{47, 45}, dims{1203}})
        for (const data_type dt : {data_type::f32, data_type::bf16, data_type::f16}) {
            wtest::Case c = strided(20, 12, in, in.size() == 1 ? dims{2} : dims{2, 2});
            c.dt = dt;
            for (const bool data : {false, true}) {
                const convgrad::op ref = data ? data_op(c, "ref") : c.make("ref");
                const auto a = testutil::small_ints(dt, ref.input0_elems(), 107);
                const auto b = testutil::small_ints(dt, ref.input1_elems(), 108);
                const auto expect = testutil::run(ref, a, b);
                const dottest::Guarded ga(a), gb(b);
                for (const std::string isa : {"avx512_core_bf16", "avx512_core", "avx2"}) {
                    if (!dottest::runs(isa)) continue;
                    const convgrad::op o = data ? data_op(c, isa) : c.make(isa);
                    INFO(isa << " " << convgrad::dtype_name(dt) << ": " << o.describe());
                    REQUIRE(o.describe().find(kNote) != std::string::npos);
                    CHECK(testutil::bitwise_equal(dottest::run_guarded(o, ga, gb), expect));
                }
            }
        }
}
