// Depthwise layers in NCX vectorised along their rows (ops/exec_dw_rows.cpp),
// both gradients: which problems take the path, equality with the
// reference on every ISA and type (planes copied whole and long rows in
// pieces; pads past the taps' reach, dilations, strides along H and D, 1D
// to 3D, every weights format and the ConvTranspose weight gradient), no
// access past any tensor, thread-count independence, and streaming stores.
#include <catch2/catch.hpp>
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "dot_test_util.hpp"
#include "test_util.hpp"
#include "weights_case.hpp"

namespace {

using convgrad::data_type;
using convgrad::dims;

constexpr const char* kNote = "depthwise rows along W in NCX";
const std::vector<data_type> kTypes{data_type::f32, data_type::bf16, data_type::f16};

// A depthwise layer of c channels in NCX.
wtest::Case dw(int64_t c, dims in, dims k) {
    wtest::Case x = wtest::conv2d(c, c, std::move(in), std::move(k));
    x.g = c;
    x.nxc = false;
    return x;
}

// The data gradient and the weight gradient of c, small integers, bitwise
// equal to the reference; through the path exactly when `data` / `weights`.
void check(const wtest::Case& c, bool data, bool weights) {
    INFO(wtest::label(c, ""));
    wtest::Case x = c;
    if (!c.transpose)
        dottest::check_exact(
                [&](data_type dt, const std::string& isa) {
                    x.dt = dt;
                    return dottest::data_op(x, isa);
                },
                kNote, data, kTypes, 31);
    dottest::check_exact(
            [&](data_type dt, const std::string& isa) {
                x.dt = dt;
                return x.make(isa);
            },
            kNote, weights, kTypes, 33);
}

}  // namespace

TEST_CASE("dw rows: planes of short rows copied whole", "[jit][dw_rows]") {
    // Causal k4 (Mamba): 300 pixels (18 vectors + 12), an odd channel count.
    wtest::Case causal = dw(5, {300}, {4});
    causal.pb = {3};
    causal.pe = {0};
    check(causal, true, true);
    // Pads past the taps' reach at both ends: diff_src pixels no tap reads
    // (data) and diff_dst pixels whose taps all read padding (weights).
    wtest::Case wide = dw(3, {260}, {3});
    wide.d = {2};
    wide.pb = {7};
    wide.pe = {6};
    check(wide, true, true);
    // 2D: a stride and a dilation along H (diff_src rows that no diff_dst
    // row reaches), three weights formats.
    wtest::Case h = dw(4, {7, 270}, {3, 3});
    h.s = {2, 1};
    h.d = {2, 1};
    h.pb = {2, 1};
    h.pe = {1, 1};
    for (const char* f : {"XIO", "OIX"}) {
        h.wfmt = f;
        check(h, true, true);
    }
    // Nine (kd, kh) rows a diff_dst row: weight-gradient calls of up to 8
    // src rows (3 on AVX2) and the rest.
    wtest::Case tall = dw(2, {12, 270}, {9, 3});
    tall.pb = {4, 1};
    tall.pe = {4, 1};
    check(tall, true, true);
    // 3D, unpadded along W.
    wtest::Case v = dw(3, {3, 2, 259}, {2, 2, 3});
    v.pb = {1, 0, 0};
    v.pe = {0, 1, 0};
    check(v, true, true);
}

TEST_CASE("dw rows: long rows in pieces read in place", "[jit][dw_rows]") {
    // 5000 pixels: edge pieces from copies, the interior in place in two
    // pieces (at most 4096 pixels each).
    wtest::Case padded = dw(3, {5000}, {3});
    padded.pb = padded.pe = {1};
    check(padded, true, true);
    // Conv-TasNet-style dilation (taps 127 apart), asymmetric pads.
    wtest::Case dilated = dw(2, {1500}, {3});
    dilated.d = {127};
    dilated.pb = {200};
    dilated.pe = {54};
    check(dilated, true, true);
    // A pad longer than the taps' reach: the data gradient's pieces start
    // inside diff_dst.
    wtest::Case far = dw(2, {2100}, {5});
    far.pb = {9};
    far.pe = {0};
    check(far, true, true);
    // 2D rows of 1100 pixels with a stride along H.
    wtest::Case h = dw(2, {5, 1100}, {3, 3});
    h.s = {2, 1};
    h.pb = h.pe = {1, 1};
    check(h, true, true);
}

TEST_CASE("dw rows: the ConvTranspose weight gradient", "[jit][dw_rows]") {
    // ConvTransposeBackwardWeights is the convolution's weight gradient
    // with src and diff_dst swapped: the same path, the IOX / XOI layouts.
    wtest::Case t = dw(3, {400}, {4});
    t.transpose = true;
    t.pb = {2};
    t.pe = {1};
    for (const char* f : {"XIO", "IOX", "OIX"}) {
        t.wfmt = f;
        check(t, false, true);
    }
}

TEST_CASE("dw rows: the problems it leaves", "[jit][dw_rows]") {
    wtest::Case c = dw(4, {600}, {3});
    c.pb = c.pe = {1};
    check(c, true, true);
    wtest::Case nxc = c;
    nxc.nxc = true;
    check(nxc, false, false);
    wtest::Case strided = c;  // stride along W
    strided.s = {2};
    check(strided, false, false);
    wtest::Case short_rows = c;  // small planes keep the NXC windows
    short_rows.in = {40, 40};
    short_rows.k = {3, 3};
    short_rows.pb = short_rows.pe = {1, 1};
    check(short_rows, false, false);
    wtest::Case pairs = c;  // two channels a group
    pairs.g = 2;
    check(pairs, false, false);
    wtest::Case k31 = c;  // the weight gradient's taps need more registers
    k31.k = {31};
    k31.pb = k31.pe = {15};
    check(k31, true, false);
}

TEST_CASE("dw rows: random reals within tolerance, identical for 1, 2 and 3 threads", "[jit][dw_rows]") {
    wtest::Case c = dw(24, {2000}, {4});
    c.pb = {3};
    c.pe = {0};
    c.mb = 3;
    for (const bool weights : {false, true})
        dottest::check_reals(
                [&](data_type dt, const std::string& isa) {
                    c.dt = dt;
                    return weights ? c.make(isa) : dottest::data_op(c, isa);
                },
                kNote, weights ? 4 * 3 * 2000 : 4, 41);
}

TEST_CASE("dw rows: tails touch nothing past the tensors", "[jit][dw_rows]") {
    // Each input ends where an inaccessible page begins (dottest::Guarded),
    // and so does the output; rows of 16·k + 1, 16·k + 15 and whole
    // vectors, planes and pieces.
    for (const int64_t w : {273, 1039, 1280, 4369})
        for (const data_type dt : kTypes)
            for (const bool weights : {false, true}) {
                wtest::Case c = dw(3, {w}, {3});
                c.pb = c.pe = {1};
                c.dt = dt;
                const auto make = [&](const std::string& isa) {
                    return weights ? c.make(isa) : dottest::data_op(c, isa);
                };
                const auto ref = make("ref");
                const auto a = testutil::small_ints(dt, ref.input0_elems(), 43);
                const auto b = testutil::small_ints(dt, ref.input1_elems(), 44);
                const auto expect = testutil::run(ref, a, b);
                const dottest::Guarded ga(a), gb(b);
                for (const std::string isa : {"avx512_core_bf16", "avx512_core", "avx2"}) {
                    if (!dottest::runs(isa)) continue;
                    const auto o = make(isa);
                    INFO(isa << " " << convgrad::dtype_name(dt) << ": " << o.describe());
                    REQUIRE(o.describe().find(kNote) != std::string::npos);
                    CHECK(testutil::bitwise_equal(dottest::run_guarded(o, ga, gb), expect));
                }
            }
}

TEST_CASE("dw rows: the plan names its loop", "[jit][dw_rows]") {
    wtest::Case c = dw(8, {5000}, {3});
    c.pb = c.pe = {1};
    const std::string d = dottest::data_op(c, "avx512_core").describe();
    const std::string w = c.make("avx512_core").describe();
    INFO(d << "\n" << w);
    if (!dottest::runs("avx512_core")) return;
    CHECK(d.find("piece in 4 pieces of 5000 pixels (4998 read in place") != std::string::npos);
    CHECK(d.find("for step of 128 pixels") != std::string::npos);
    // Blocks of up to 64 channels, at least four a thread to share.
    const int threads = testutil::threads_used(c.make("avx512_core"));
    const int64_t block = std::max<int64_t>(1, (8 + 4 * threads - 1) / (4 * threads));
    const std::string loop = "for block of " + std::to_string(block) + " of 8 channels  [contiguous ranges";
    CHECK(w.find(loop + " over threads, then shared]") != std::string::npos);
    CHECK(w.find("12 FMAs a src row into 3 vectors, one a kw tap") != std::string::npos);
    c.in = {700};
    CHECK(dottest::data_op(c, "avx512_core").describe().find("planes") != std::string::npos);
}

TEST_CASE("dw rows: AVX2 takes shorter rows", "[jit][dw_rows]") {
    // Rows of 56 to 255 pixels: the AVX2 kernels take them (their NXC
    // windows run slower), AVX-512 keeps the windows. Exact either way.
    wtest::Case c = dw(6, {5, 60}, {3, 3});
    c.pb = c.pe = {1, 1};
    for (const bool weights : {false, true})
        for (const data_type dt : kTypes) {
            c.dt = dt;
            const auto make = [&](const std::string& isa) { return weights ? c.make(isa) : dottest::data_op(c, isa); };
            const auto ref = make("ref");
            const auto a = testutil::small_ints(dt, ref.input0_elems(), 47);
            const auto b = testutil::small_ints(dt, ref.input1_elems(), 48);
            const auto expect = testutil::run(ref, a, b);
            for (const std::string isa : {"avx512_core", "avx2"}) {
                if (!dottest::runs(isa)) continue;
                const auto o = make(isa);
                INFO(isa << " " << convgrad::dtype_name(dt) << ": " << o.describe());
                CHECK((o.describe().find(kNote) != std::string::npos) == (isa == std::string("avx2")));
                CHECK(testutil::bitwise_equal(testutil::run(o, a, b), expect));
            }
        }
}

TEST_CASE("dw rows: large data gradients stream whole lines", "[jit][dw_rows]") {
    // diff_src of 8 MB and more (f32: 32 MB) is written with streaming
    // stores where it is 64-byte aligned: into an aligned output and one
    // 32 bytes off (ordinary stores), both starting as 0x7f bytes, bit for
    // bit the reference. Rows of 8192 pixels (whole lines). The causal pad
    // leaves pieces [0, 4096), [4096, 8189) and [8189, 8192): the second
    // ends mid-line (its 16-bit tail shares a line with a whole vector),
    // the third starts there; the pad at the end leaves [0, 3), [3, 4099)
    // and [4099, 8192), whose whole vectors start mid-line.
    for (const data_type dt : kTypes)
        for (const bool causal : {true, false}) {
            wtest::Case c = dw(dt == data_type::f32 ? 128 : 64, {8192}, {4});
            c.mb = 8;
            c.pb = {causal ? 3 : 0};
            c.pe = {causal ? 0 : 3};
            c.dt = dt;
            const auto ref = dottest::data_op(c, "ref");
            const auto dd = testutil::small_ints(dt, ref.input0_elems(), 51);
            const auto w = testutil::small_ints(dt, ref.input1_elems(), 52);
            const auto expect = testutil::run(ref, dd, w);
            const size_t bytes = expect.bytes.size();
            std::unique_ptr<uint8_t, decltype(&std::free)> out(
                    static_cast<uint8_t*>(std::aligned_alloc(64, (bytes + 64 + 63) / 64 * 64)), &std::free);
            for (const std::string isa : {"avx512_core_bf16", "avx512_core", "avx2"}) {
                if (!dottest::runs(isa)) continue;
                const auto o = dottest::data_op(c, isa);
                INFO(isa << " " << convgrad::dtype_name(dt) << ": " << o.describe());
                REQUIRE(o.describe().find(kNote) != std::string::npos);
                CHECK(o.describe().find("streaming stores of whole lines") != std::string::npos);
                for (const size_t offset : {0, 32}) {
                    std::memset(out.get(), 0x7f, bytes + 64);
                    o.execute(dd.data(), w.data(), out.get() + offset);
                    CHECK(std::memcmp(out.get() + offset, expect.data(), bytes) == 0);
                }
            }
        }
}
