// JIT weight gradient vs the reference: block boundaries, geometry, groups,
// depthwise, layouts, both ISAs, thread counts, determinism, concurrency.
#include <catch2/catch.hpp>
#include <tbb/task_arena.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>
#include <utility>

#include "jit/isa.hpp"
#include "ops/scratch.hpp"
#include "test_util.hpp"
#include "weights_case.hpp"

using testutil::Buffer;
using convgrad::dims;
using wtest::Case;
using wtest::conv2d;
using wtest::jit_isas;
using wtest::label;

namespace {

// Small integers: every order of summation is exact, so the JIT must match
// the reference bit for bit.
void check_exact(const Case& c, uint32_t seed = 1) {
    const convgrad::op ref = c.make("ref");
    const Buffer a = testutil::small_ints(convgrad::data_type::f32, ref.input0_elems(), seed);
    const Buffer b = testutil::small_ints(convgrad::data_type::f32, ref.input1_elems(), seed + 7);
    const Buffer want = testutil::run(ref, a, b);
    for (const std::string& isa : jit_isas(false)) {
        const convgrad::op jit = c.make(isa);
        INFO(label(c, isa) << "\n" << jit.describe());
        REQUIRE(jit.describe().rfind("jit:" + isa, 0) == 0);
        CHECK(testutil::bitwise_equal(testutil::run(jit, a, b), want));
    }
}

// Adds cases[1] in NCX / OIX, and `t` with pads of 1 as a ConvTranspose
// (src and diff_dst swapped: the same convolution view).
void add_ncx_and_transpose(std::vector<Case>& cases, Case t) {
    Case ncx = cases[1];
    ncx.nxc = false;
    ncx.wfmt = "OIX";
    cases.push_back(ncx);
    t.transpose = true;
    t.pb = t.pe = dims(t.in.size(), 1);
    cases.push_back(t);
}

// The R of describe()'s "rows=RxSpx": the reduction's rows, more than the
// images once rows are cut into segments.
int64_t described_rows(const std::string& d) {
    const size_t at = d.find(" rows=");
    REQUIRE(at != std::string::npos);
    return std::atoll(d.c_str() + at + 6);
}

// Small integers of the case's type (exact in 16 bits too), every ISA
// including the bf16 one: bitwise equal to the reference.
void check_exact_any_type(const Case& c) {
    const convgrad::op ref = c.make("ref");
    const Buffer a = testutil::small_ints(c.dt, ref.input0_elems(), 5);
    const Buffer b = testutil::small_ints(c.dt, ref.input1_elems(), 8);
    const Buffer want = testutil::run(ref, a, b);
    for (const std::string& isa : jit_isas(true)) {
        INFO(label(c, isa));
        CHECK(testutil::bitwise_equal(testutil::run(c.make(isa), a, b), want));
    }
}

// Random reals: error bounded by the summation length times f32 epsilon.
void check_reals(const Case& c) {
    const convgrad::op ref = c.make("ref");
    const Buffer a = testutil::random_reals(convgrad::data_type::f32, ref.input0_elems(), 3);
    const Buffer b = testutil::random_reals(convgrad::data_type::f32, ref.input1_elems(), 4);
    const Buffer want = testutil::run(ref, a, b);
    const double terms = double(ref.input0_elems() + ref.input1_elems());
    for (const std::string& isa : jit_isas(false)) {
        const convgrad::op jit = c.make(isa);
        INFO(label(c, isa));
        CHECK(testutil::max_abs_diff(testutil::run(jit, a, b), want) < 1e-6 * terms + 1e-5);
    }
}

// Runs c under every JIT cap on inputs of all-ones bytes (NaNs), so that
// stale bytes of a per-thread window would show in the next check.
void run_on_nans(const Case& c) {
    const convgrad::op ref = c.make("ref");
    Buffer nan_a(c.dt, ref.input0_elems()), nan_b(c.dt, ref.input1_elems());
    std::fill(nan_a.bytes.begin(), nan_a.bytes.end(), uint8_t(0xff));
    std::fill(nan_b.bytes.begin(), nan_b.bytes.end(), uint8_t(0xff));
    for (const std::string& isa : jit_isas(true)) testutil::run(c.make(isa), nan_a, nan_b);
}

// Exact in every type on every ISA (nans_first: each type after a run on
// NaN inputs), f32 exact and reals on the f32 ISAs, 1-4 threads bitwise
// alike (with_bf16: on the bf16 ISA too).
void check_every_type(const Case& base, bool with_bf16, bool nans_first = false) {
    for (convgrad::data_type dt : {convgrad::data_type::f32, convgrad::data_type::bf16, convgrad::data_type::f16}) {
        Case t = base;
        t.dt = dt;
        if (nans_first) run_on_nans(t);
        check_exact_any_type(t);
    }
    check_exact(base);
    check_reals(base);
    wtest::check_thread_counts(wtest::split_size(base), with_bf16);
}

}  // namespace

TEST_CASE("weights: channel block boundaries", "[jit][weights]") {
    for (int64_t ch : {1, 2, 15, 16, 17, 31, 33, 65}) {
        Case c = conv2d(ch, 17, {5, 7}, {3, 3});
        c.pb = c.pe = {1, 1};
        check_exact(c);
        c = conv2d(7, ch, {5, 7}, {3, 3});
        check_exact(c);
    }
    check_exact(conv2d(65, 65, {3, 3}, {1, 1}));
    check_exact(conv2d(33, 129, {2, 2}, {1, 1}));
}

TEST_CASE("weights: wide layers walk their tiles in input-channel blocks", "[jit][weights]") {
    // Weights past L2 make chunks long (>= 384 pixels): src slices of 1.5 MB / 2.3 MB.
    Case wide = conv2d(1000, 80, {24, 24}, {1, 1});
    wide.mb = 2;
    Case strided = conv2d(600, 50, {28, 28}, {3, 3});
    strided.s = {2, 2};
    strided.pb = strided.pe = {1, 1};
    for (const Case& c : {wide, strided}) {
        for (const std::string& isa : jit_isas(false)) {
            INFO(label(c, isa));
            CHECK(c.make(isa).describe().find(" ic_block<") != std::string::npos);
        }
        check_exact(c);
    }
    // Threads split the blocked tile order anywhere: still bitwise identical.
    const wtest::ThreadRuns runs = wtest::check_thread_counts(wide, false);
    CHECK(runs.outputs.size() == jit_isas(false).size());
}

TEST_CASE("weights: staged 1x1 layers stage their chunks tile-major", "[jit][weights]") {
    // One src pixel per output pixel: merged rows, W and H strides, groups,
    // channel tails (oc % 16, ic % m), ConvTranspose; padded 1x1 stays on
    // the row-staged path. AVX-512 copies the chunks inside the kernels,
    // for narrow layers too; AVX2 scatters them first, for wide layers only
    // (a pixel stride of 4 KiB or more), and row-stages narrow ones, and
    // wide ones at unit stride whose rows it blocks (70 -> 1030).
    Case merged = conv2d(70, 1030, {5, 6}, {1, 1});
    Case strided = conv2d(1031, 80, {7, 8}, {1, 1});
    strided.s = {2, 3};
    Case grouped = conv2d(2 * 20, 2 * 515, {3, 4}, {1, 1});
    grouped.g = 2;
    Case transposed = conv2d(1040, 80, {5, 6}, {1, 1});
    transposed.transpose = true;
    transposed.s = {2, 2};
    transposed.wfmt = "IOX";
    Case padded = conv2d(48, 1031, {3, 4}, {1, 1});
    padded.pb = padded.pe = {1, 0};
    Case narrow = conv2d(200, 131, {5, 6}, {1, 1});  // (48 -> 131 reads in place on AVX-512)
    // Wide enough for several ic blocks: AVX2's calls run a tap's ic tiles
    // up to the end of their block (and of the thread's tiles).
    Case blocks = conv2d(1030, 128, {14, 14}, {1, 1});
    blocks.s = {2, 2};
    for (Case c : {merged, strided, grouped, transposed, padded, narrow, blocks}) {
        c.mb = c.ic == 1030 ? 4 : 3;
        for (const std::string& isa : jit_isas(false)) {
            const std::string d = c.make(isa).describe();
            INFO(label(c, isa) << "\n" << d);
            const bool avx512 = isa != "avx2";
            const bool blocked = !avx512 && c.ic == 70;
            if (blocked) CHECK(d.find(" blocked") != std::string::npos);
            const bool tile_major = c.pb.empty() && (c.oc != 131 || avx512) && !blocked;
            CHECK((d.find(" tile-major") != std::string::npos) == tile_major);
            CHECK((d.find(" tile-major(in-kernel)") != std::string::npos) == (c.pb.empty() && avx512));
            // One call runs a tap's ic tiles (slices, staged rows or rows in
            // place); where the kernels copy the chunk, once the thread has
            // copied them.
            const bool in_kernel = c.pb.empty() && avx512;
            CHECK((d.find(" (one call once copied)") != std::string::npos) == in_kernel);
            CHECK((d.find(" (one call)") != std::string::npos) == !in_kernel);
            if (c.ic == 1030 && !avx512) CHECK(d.find(" ic_block<") != std::string::npos);
        }
        check_exact(c);
    }
    const wtest::ThreadRuns block_runs = wtest::check_thread_counts(blocks, false);
    CHECK(block_runs.outputs.size() == jit_isas(false).size());
    const wtest::ThreadRuns runs = wtest::check_thread_counts(strided, false);
    CHECK(runs.outputs.size() == jit_isas(false).size());
}

TEST_CASE("weights: AVX2 stages row chunks per tile and runs a tap's ic tiles in one call", "[jit][weights]") {
    // Blocked staging: each ic tile's src and each oc tile's diff_dst in a
    // slice of its own; a call runs the full ic tiles of a tap (an input
    // channel tail, m_last < m, gets a call of its own; ic blocks end a
    // run). Chunks of a few rows, so several per case; channel tails on
    // both sides, strides, dilations, pads, groups, 1D / 3D, ConvTranspose.
    Case tails = conv2d(100, 37, {9, 10}, {3, 3});
    tails.mb = 3;
    tails.pb = tails.pe = {1, 1};
    Case strided = conv2d(99, 20, {11, 13}, {3, 3});
    strided.s = {2, 2};
    strided.d = {2, 1};
    strided.pb = {2, 1};
    strided.pe = {0, 1};
    Case grouped = conv2d(2 * 100, 2 * 24, {8, 9}, {3, 3});
    grouped.g = 2;
    grouped.pb = grouped.pe = {1, 1};
    Case d3 = conv2d(64, 16, {5, 6, 7}, {3, 3, 3});
    d3.pb = d3.pe = {1, 1, 1};
    Case d1 = conv2d(120, 40, {60}, {5});
    d1.pb = {2};
    d1.pe = {2};
    Case transposed = conv2d(100, 96, {7, 8}, {3, 3});
    transposed.transpose = true;
    transposed.s = {2, 2};
    transposed.wfmt = "IOX";
    Case wide = conv2d(600, 50, {28, 28}, {3, 3});  // ic blocks (weights past L2)
    wide.s = {2, 2};
    wide.pb = wide.pe = {1, 1};
    // A strided 1x1 layer, W padded (compressed rows); few tiles but OC/g
    // >= 32 (blocked_ok): a 1x1 layer of 44 tiles (6 pixels a row, merged)
    // and a 3x3 of 6 ic tiles in groups of 36 -> 32.
    Case one_by_one = conv2d(64, 64, {6, 7}, {1, 1});
    Case strided_1x1 = conv2d(100, 70, {13, 17}, {1, 1});  // a pixel per output pixel in the slices
    strided_1x1.s = {2, 3};
    strided_1x1.pb = strided_1x1.pe = {0, 1};
    Case six_tiles = conv2d(2 * 36, 2 * 32, {5, 9}, {3, 3});
    six_tiles.g = 2;
    six_tiles.pb = six_tiles.pe = {1, 1};
    for (Case c : {tails, strided, grouped, d3, d1, transposed, wide, one_by_one, strided_1x1, six_tiles}) {
        for (const std::string& isa : jit_isas(false)) {
            const std::string d = c.make(isa).describe();
            INFO(label(c, isa) << "\n" << d);
            CHECK((d.find(" blocked") != std::string::npos) == (isa == "avx2"));
        }
        check_exact(c);
        for (convgrad::data_type dt : {convgrad::data_type::bf16, convgrad::data_type::f16}) {
            c.dt = dt;
            check_exact_any_type(c);
        }
    }
    CHECK(tails.make("avx2").describe().find(" (1 chunks,") == std::string::npos);
    CHECK(wide.make("avx2").describe().find(" ic_block<") != std::string::npos);
    // Few ic tiles a tap (here 3) keep row staging: little to share per chunk.
    Case narrow = conv2d(33, 20, {11, 13}, {3, 3});
    CHECK(narrow.make("avx2").describe().find(" blocked") == std::string::npos);
    // Threads split the tile order inside a run of ic tiles: still bitwise identical.
    for (const Case& c : {tails, wide}) {
        const wtest::ThreadRuns runs = wtest::check_thread_counts(c, false);
        CHECK(runs.outputs.size() == jit_isas(false).size());
    }
}

TEST_CASE("weights: one vector of output channels a group runs kw windows", "[jit][weights]") {
    // The window walks a W phase's src pixels with the tap vectors of
    // diff_dst in registers, its W edges compiled in: the geometries of
    // kw_window_cases, NCX / OIX, ConvTranspose; not for W dilation, W
    // strides past the kernel width, nor wider groups.
    std::vector<Case> cases = wtest::kw_window_cases();
    Case t = conv2d(32, 32, {6, 7}, {3, 3});
    t.g = 2;
    add_ncx_and_transpose(cases, t);
    for (Case c : cases) {
        c.mb = 3;
        const int64_t ocg = (c.transpose ? c.ic : c.oc) / c.g;
        for (const std::string& isa : jit_isas(false)) {
            const std::string d = c.make(isa).describe();
            INFO(label(c, isa) << "\n" << d);
            CHECK((d.find(" kw-window") != std::string::npos) ==
                  (ocg <= (isa == "avx2" ? 8 : 16) && wtest::windowed(c, isa == "avx2" ? 16 : 32) &&
                   !wtest::laned(c, isa)));
            CHECK((d.find(" kw-lanes") != std::string::npos) == wtest::laned(c, isa));
        }
        check_exact(c);
    }
    Case ws = cases[1];  // W stride past the kernel width
    ws.s = {1, 5};
    ws.k = {3, 4};
    Case wd = cases[1];
    wd.d = {1, 2};
    Case wide = conv2d(96, 96, {7, 7}, {3, 3});  // 48 channels a group: three vectors
    wide.g = 2;
    for (const Case& c : {ws, wd, wide}) {
        for (const std::string& isa : jit_isas(false)) {
            INFO(label(c, isa));
            CHECK(c.make(isa).describe().find(" kw-window") == std::string::npos);
        }
        check_exact(c);
    }
    const wtest::ThreadRuns runs = wtest::check_thread_counts(wtest::split_size(cases[1]), false);
    CHECK(runs.outputs.size() == jit_isas(false).size());
}

// On AVX-512, layers of 17-32 output channels a group at unit W stride run
// kw windows of two vectors (each tap's two diff_dst vectors in the
// window): output-channel tails, kernel widths 2-7, pads none to wider
// than the kernel, rows of one pixel (no window), input channels that
// split into tiles, H strides and dilation, 1D and 3D, NCX / OIX,
// ConvTranspose, f16, groups (ResNeXt-50 conv5 in miniature); W strides
// keep their tiles. Bitwise equal to the reference, the same bits on 1-4
// threads.
TEST_CASE("weights: two vectors of output channels run kw windows on AVX-512", "[jit][weights]") {
    std::vector<Case> cases = wtest::w_row_cases({{1, 16, 24, 9, 3, 1, 1, 1},
                                                  {1, 20, 32, 13, 5, 2, 2, 1},
                                                  {1, 19, 17, 7, 7, 3, 3, 1},
                                                  {1, 33, 30, 12, 4, 0, 3, 1},
                                                  {1, 24, 32, 6, 2, 0, 1, 1},
                                                  {1, 18, 20, 1, 3, 1, 1, 1},
                                                  {1, 40, 31, 10, 6, 7, 1, 1}});
    Case c1 = conv2d(24, 28, {23}, {3});
    c1.pb = c1.pe = {1};
    cases.push_back(c1);
    Case c3 = conv2d(20, 32, {4, 5, 6}, {3, 3, 3});
    c3.pb = c3.pe = {1, 1, 1};
    cases.push_back(c3);
    add_ncx_and_transpose(cases, conv2d(24, 20, {6, 9}, {3, 3}));
    Case grouped = conv2d(128, 128, {7, 7}, {3, 3});  // 4 groups of 32 at 7x7
    grouped.g = 4;
    grouped.pb = grouped.pe = {1, 1};
    cases.push_back(grouped);
    Case g24 = conv2d(48, 72, {9, 11}, {3, 3});  // 3 groups of 16 -> 24, a tail of 8
    g24.g = 3;
    g24.pb = g24.pe = {1, 1};
    cases.push_back(g24);
    const bool avx512 = convgrad::detail::cpu_isa() >= convgrad::detail::Isa::avx512_core;
    for (Case c : cases) {
        c.mb = 3;
        if (avx512) {
            const std::string d = c.make("avx512_core").describe();
            INFO(label(c, "avx512_core") << "\n" << d);
            CHECK((d.find(" kw-window") != std::string::npos) == wtest::windowed(c, 32));
            if (wtest::windowed(c, 32)) CHECK(d.find("n2x16") != std::string::npos);
        }
        check_exact(c, 3);
        c.dt = convgrad::data_type::f16;
        check_exact_any_type(c);
    }
    Case strided = cases[0];
    strided.s = {1, 2};
    Case grouped_s2 = grouped;
    grouped_s2.s = {2, 2};
    for (Case c : {strided, grouped_s2}) {
        c.mb = 3;
        if (avx512) CHECK(c.make("avx512_core").describe().find(" kw-window") == std::string::npos);
        check_exact(c, 3);
    }
    const wtest::ThreadRuns runs = wtest::check_thread_counts(wtest::split_size(cases[1]), false);
    CHECK(runs.outputs.size() == jit_isas(false).size());
}

TEST_CASE("weights: W strides over groups of up to 16 channels run kw lanes", "[jit][weights]") {
    // Tiles of output channels x every kw tap over a group's input channels
    // in the lanes, the W edges compiled in, the flush transposing: the
    // geometries of kw_lanes_cases, NCX / OIX, ConvTranspose, and thread
    // counts; not for W dilation, unit W stride, wider groups or the folded
    // first layers.
    std::vector<Case> cases = wtest::kw_lanes_cases();
    Case ncx = cases[3];
    ncx.nxc = false;
    ncx.wfmt = "OIX";
    cases.push_back(ncx);
    Case t = conv2d(32, 24, {6, 13}, {3, 3});  // ConvTranspose: src and diff_dst swapped
    t.transpose = true;
    t.g = 2;
    t.s = {2, 2};
    t.pb = t.pe = {1, 1};
    cases.push_back(t);
    for (Case c : cases) {
        c.mb = 3;
        for (const std::string& isa : jit_isas(false)) {
            const std::string d = c.make(isa).describe();
            INFO(label(c, isa) << "\n" << d);
            CHECK((d.find(" kw-lanes") != std::string::npos) == wtest::laned(c, isa));
            if (isa != "avx2") CHECK(wtest::laned(c, isa));  // every case of the set takes them
        }
        check_exact(c);
    }
    Case wd = cases[0];  // W dilation
    wd.d = {1, 2};
    Case unit = cases[0];  // unit W stride: kw windows
    unit.s = {2, 1};
    Case wide = cases[0];  // 32 channels a group
    wide.ic = wide.oc = 64;
    Case stem = conv2d(3, 16, {9, 15}, {3, 7});  // one group of 3 channels: folded
    stem.s = {2, 2};
    stem.pb = stem.pe = {1, 3};
    for (const Case& c : {wd, unit, wide, stem}) {
        for (const std::string& isa : jit_isas(false)) {
            INFO(label(c, isa));
            CHECK(c.make(isa).describe().find(" kw-lanes") == std::string::npos);
        }
        check_exact(c);
    }
    const wtest::ThreadRuns runs = wtest::check_thread_counts(wtest::split_size(cases[0]), false);
    CHECK(runs.outputs.size() == jit_isas(false).size());
    // Several chunks a slice, so calls add their tiles to the ones before
    // (RegNetX-400MF stage 2 at mb 2, read in place: 8 chunks, 2 slices),
    // and the same over pairs of 8-channel groups (RegNetY-400MF stage 2:
    // 13 groups, six pairs and one alone).
    Case chunks = conv2d(64, 64, {56, 56}, {3, 3});
    chunks.g = 4;
    chunks.s = {2, 2};
    chunks.pb = chunks.pe = {1, 1};
    Case pairs = chunks;
    pairs.ic = pairs.oc = 104;
    pairs.g = 13;
    for (const Case& c : {chunks, pairs}) {
        const char* tag = c.g == 13 ? " kw-lanes(group pairs)" : " kw-lanes";
        for (const std::string& isa : jit_isas(false)) {
            const std::string d = c.make(isa).describe();
            INFO(d);
            if (isa != "avx2") CHECK(d.find(tag) != std::string::npos);
            CHECK(d.find(" (1 chunks") == std::string::npos);
        }
        check_exact(c);
    }
    check_exact(wtest::split_size(cases[10]));
}

TEST_CASE("weights: few output channels over many input channels run kw lanes at any W stride", "[jit][weights]") {
    // Heads into 1-8 maps: output channels as broadcast rows, a vector of
    // input channels a tile (tails of 1 and 4 lanes), every kw tap; W
    // strides 1-3, pads, rows of edges only, 1D / 2D / 3D, NCX / OIX,
    // ConvTranspose, thread counts; 9-15 output channels where the input
    // channels fill the lanes at least an eighth better (32 -> 12, 48 ->
    // 10: two tiles of rows). Not for 9 outputs of 17 inputs, past 15 taps
    // or for fewer than 16 input channels.
    auto make = [](int64_t ic, int64_t oc, dims in, dims k, dims s, dims pad) {
        Case c = conv2d(ic, oc, std::move(in), std::move(k));
        c.s = std::move(s);
        c.pb = c.pe = std::move(pad);
        c.mb = 3;
        return c;
    };
    std::vector<Case> cases = {
            make(64, 1, {9, 11}, {3, 3}, {}, {1, 1}),        make(33, 3, {8, 13}, {5, 5}, {}, {2, 2}),
            make(17, 8, {10, 9}, {3, 3}, {2, 2}, {1, 1}),    make(48, 2, {40}, {7}, {}, {3}),
            make(20, 4, {5, 6, 7}, {3, 3, 3}, {}, {1, 1, 1}), make(16, 8, {4, 3}, {3, 3}, {}, {1, 1}),
            make(32, 5, {6, 30}, {1, 15}, {1, 1}, {0, 7}),   make(36, 6, {7, 20}, {2, 4}, {1, 3}, {0, 1}),
            make(64, 1, {9000}, {9}, {}, {4}),  // a row long enough to be cut: read in place instead
            make(32, 12, {9, 10}, {3, 3}, {}, {1, 1}),       make(48, 10, {6, 13}, {5, 5}, {1, 2}, {2, 2})};
    Case ncx = cases[1];
    ncx.nxc = false;
    ncx.wfmt = "OIX";
    cases.push_back(ncx);
    Case t = cases[0];  // ConvTranspose: src and diff_dst swapped
    t.transpose = true;
    cases.push_back(t);
    Case long_ncx = cases[8];  // the long row in NCX: staged segments, no whole-row windows
    long_ncx.nxc = false;
    Case grouped = make(40, 6, {7, 10}, {3, 3}, {}, {1, 1});  // two groups of 20 -> 3
    grouped.g = 2;
    cases.push_back(grouped);
    for (const Case& c : cases) {
        REQUIRE(wtest::few_oc(c));
        for (const std::string& isa : jit_isas(false)) {
            const std::string d = c.make(isa).describe();
            INFO(label(c, isa) << "\n" << d);
            CHECK((d.find(" kw-lanes") != std::string::npos) == (isa != "avx2"));
            CHECK(wtest::laned(c, isa) == (isa != "avx2"));
            if (c.in[0] == 9000 && isa != "avx2") CHECK(d.find(" staged") == std::string::npos);
        }
        check_exact(c);
        check_reals(c);
    }
    Case nine = cases[2];  // 9 output channels: their own vectors
    nine.oc = 9;
    Case narrow = cases[0];  // 15 input channels
    narrow.ic = 15;
    Case wide = make(32, 2, {4, 40}, {1, 16}, {}, {0, 2});  // 16 taps
    for (const Case& c : {nine, narrow, wide, long_ncx}) {
        for (const std::string& isa : jit_isas(false)) {
            INFO(label(c, isa));
            CHECK(c.make(isa).describe().find(" kw-lanes") == std::string::npos);
        }
        check_exact(c);
    }
    const wtest::ThreadRuns runs = wtest::check_thread_counts(wtest::split_size(cases[1]), false);
    CHECK(runs.outputs.size() == jit_isas(false).size());
}

// Infinities in the first and last src pixel of input row (image 1, row 2)
// of c (NXC f32, 32 channels), at channels 0 and 21, diff_dst small
// integers of one sign: the JIT equals the reference wherever it is not
// NaN and is NaN exactly where it is, so an infinity reaches only the
// weights that read it (0 * inf is never formed); `tag` in the plan on
// AVX-512.
void check_row_edge_infinities(const Case& c, const char* tag) {
    const int64_t h = c.in[0], w = c.in[1];
    const convgrad::op ref = c.make("ref");
    Buffer a = testutil::small_ints(convgrad::data_type::f32, ref.input0_elems(), 3);
    const Buffer b = testutil::small_ints(convgrad::data_type::f32, ref.input1_elems(), 4, 1, 2);  // no zeros
    for (int64_t x : {int64_t(0), w - 1})
        for (int64_t ch : {int64_t(0), int64_t(21)}) a.set(((1 * h + 2) * w + x) * 32 + ch, INFINITY);
    const Buffer want = testutil::run(ref, a, b);
    for (const std::string& isa : jit_isas(false)) {
        const convgrad::op jit = c.make(isa);
        INFO(label(c, isa) << "\n" << jit.describe());
        if (isa != "avx2") CHECK(jit.describe().find(tag) != std::string::npos);
        const Buffer got = testutil::run(jit, a, b);
        int64_t nans = 0, infs = 0;
        for (int64_t i = 0; i < got.size(); ++i) {
            INFO(i);
            nans += std::isnan(want.get(i));
            infs += std::isinf(want.get(i));
            REQUIRE(std::isnan(got.get(i)) == std::isnan(want.get(i)));
            if (!std::isnan(want.get(i))) REQUIRE(got.get(i) == want.get(i));
        }
        CHECK(nans == 0);  // small ints of one sign in diff_dst: infinities, not NaNs
        CHECK(infs > 0);
    }
}

TEST_CASE("weights: kw lanes form no product outside a row", "[jit][weights]") {
    // Head and tail pixels run only their taps inside src, in both tiles
    // of output channels.
    Case c = conv2d(32, 26, {4, 11}, {3, 3});
    c.g = 2;
    c.s = {1, 2};
    c.pb = c.pe = {1, 1};
    check_row_edge_infinities(c, " kw-lanes");
}

TEST_CASE("weights: kw windows form no product outside a row", "[jit][weights]") {
    // The window's W edges leave the taps outside the row out instead of
    // multiplying by zeros.
    Case c = conv2d(32, 32, {4, 9}, {3, 3});
    c.g = 2;
    c.pb = c.pe = {1, 1};
    check_row_edge_infinities(c, " kw-window");
}

TEST_CASE("weights: few input channels fold their kw taps into the tile rows", "[jit][weights]") {
    // Tile rows (kw, ic): the W edges (output pixels with some tap in the
    // padding) read zero-padded copies. The geometries of fold_kw_cases,
    // every weights layout, NCX, ConvTranspose.
    std::vector<Case> cases = wtest::fold_kw_cases();
    for (const char* f : {"OIX", "XIO"}) {
        Case c = conv2d(3, 24, {9, 10}, {3, 5});
        c.s = {1, 2};
        c.pb = c.pe = {1, 2};
        c.wfmt = f;
        c.nxc = f[0] != 'O';
        cases.push_back(c);
    }
    for (const char* f : {"IOX", "XOI", "XIO"}) {  // ConvTranspose: src and diff_dst swapped
        Case t = conv2d(3, 16, {6, 7}, {4, 4});
        t.transpose = true;
        t.s = {2, 2};
        t.pb = t.pe = {1, 1};
        t.wfmt = f;
        t.nxc = f[0] != 'I';
        cases.push_back(t);
    }
    for (Case c : cases) {
        c.mb = 2;
        for (const std::string& isa : jit_isas(false)) {
            const std::string d = c.make(isa).describe();
            INFO(label(c, isa) << "\n" << d);
            // (1-2 channels under a kernel of several rows: every tap in one tile, see below)
            CHECK((d.find(" fold-kw") != std::string::npos || d.find(" fold-taps=") != std::string::npos));
            // AVX2 tiles of two vectors or more where the vector side has 16+ channels (choose_blocking).
            if (isa == "avx2" && std::max(c.ic, c.oc) >= 16) CHECK(d.find("n1x8") == std::string::npos);
        }
        check_exact(c);
    }
    // Not folded: W dilation (taps not adjacent), groups, 16+ channels.
    Case dil = conv2d(3, 16, {9, 9}, {3, 3});
    dil.d = {1, 2};
    Case grp = conv2d(6, 16, {9, 9}, {3, 3});
    grp.g = 2;
    for (const Case& c : {dil, grp, conv2d(16, 16, {9, 9}, {3, 3})}) {
        for (const std::string& isa : jit_isas(false)) {
            INFO(label(c, isa));
            CHECK(c.make(isa).describe().find(" fold-kw") == std::string::npos);
        }
        check_exact(c);
    }
    const wtest::ThreadRuns runs = wtest::check_thread_counts(wtest::split_size(cases.front()), false);
    CHECK(runs.outputs.size() == jit_isas(false).size());
}

TEST_CASE("weights: tiles of few accumulators spread them over sets", "[jit][weights]") {
    // 1-2 input channels into 6-32 output channels: tiles of 2-6 accumulator
    // chains (m3n1, m2n1, m6n1, m3n2) take 2-4 sets (WeightsKernelDesc::
    // acc_sets), pixels alternating between them; rows of odd and single
    // pixels end on a lone pixel, rows of one pixel have no block at all.
    // (Where the kernel's rows fold into the tile too, fold-taps, the tile
    // has chains enough: AVX-512 there, and AVX2 in 3D.)
    std::vector<Case> cases;
    Case c = conv2d(1, 16, {7, 13}, {3, 3});
    c.pb = c.pe = {1, 1};
    cases.push_back(c);
    c = conv2d(1, 6, {9, 1}, {3, 1});  // an output-channel tail, rows of one pixel
    c.pb = c.pe = {1, 0};
    cases.push_back(c);
    c = conv2d(2, 16, {5, 9}, {1, 1});
    cases.push_back(c);
    c = conv2d(2, 8, {31}, {3});  // 1D
    c.pb = {1};
    cases.push_back(c);
    c = conv2d(1, 32, {6, 11}, {3, 3});
    c.s = {2, 2};
    c.pb = c.pe = {1, 0};
    cases.push_back(c);
    c = conv2d(1, 16, {5, 6, 7}, {3, 3, 3});  // 3D
    c.pb = c.pe = {1, 1, 1};
    cases.push_back(c);
    c = conv2d(1, 16, {7, 7}, {3, 3});  // NCX, OIX
    c.nxc = false;
    c.wfmt = "OIX";
    cases.push_back(c);
    Case t = conv2d(1, 16, {6, 7}, {3, 3});  // ConvTranspose into one channel
    t.transpose = true;
    t.s = {2, 2};
    t.pb = t.pe = {1, 1};
    t.wfmt = "IOX";
    cases.push_back(t);
    for (const Case& x : cases) {
        for (const std::string& isa : jit_isas(false)) {
            const std::string d = x.make(isa).describe();
            INFO(label(x, isa) << "\n" << d);
            if (d.find(" fold-taps=") == std::string::npos) CHECK(d.find(" acc-sets=") != std::string::npos);
        }
        check_exact(x);
        check_reals(x);
    }
    // Tiles of 8 chains or more keep one set.
    for (const std::string& isa : jit_isas(false)) {
        const Case wide = conv2d(16, 16, {9, 9}, {3, 3});
        INFO(label(wide, isa));
        CHECK(wide.make(isa).describe().find(" acc-sets=") == std::string::npos);
    }
    const wtest::ThreadRuns runs = wtest::check_thread_counts(wtest::split_size(cases.front()), false);
    CHECK(runs.outputs.size() == jit_isas(false).size());
}

TEST_CASE("weights: every tap of a 1-2 channel layer in one tile over padded src", "[jit][weights]") {
    // Folded taps (WeightsPlan::fold_kh): the kernel rows (and depth taps)
    // of the folded kw taps in the tile rows too, src copied into a
    // zero-padded scratch first. AVX-512 folds 2D and 3D kernels, AVX2 3D
    // ones (one depth tap a tile). Pads wider than the kernel, asymmetric
    // pads, strides, H / D dilation, output-channel tails, NCX, OIX (an XIO
    // scratch), ConvTranspose.
    std::vector<Case> cases = wtest::fold_taps_cases();
    Case wide = conv2d(2, 48, {6, 11}, {3, 3});
    wide.pb = wide.pe = {1, 1};
    cases.push_back(wide);
    for (Case& x : cases) {
        x.mb = 2;
        for (const std::string& isa : jit_isas(false)) {
            const std::string d = x.make(isa).describe();
            INFO(label(x, isa) << "\n" << d);
            const bool folded = isa != "avx2" || wtest::fold_taps_on_avx2(x);
            CHECK((d.find(" fold-taps=") != std::string::npos) == folded);
            if (folded) CHECK(d.find(" prepad") != std::string::npos);
        }
        check_exact(x);
        check_reals(x);
    }
    // Not folded: 3 input channels, a kernel of one row, W dilation, and
    // pads whose padded copy would be mostly zeros (100 a side under a
    // stride of 16: a 206x207 copy for 6x7 inputs and 13x13 outputs).
    // (16-bit: test_jit_weights_lowp.cpp.)
    Case three = conv2d(3, 16, {6, 7}, {3, 3});
    Case row = conv2d(1, 16, {6, 7}, {1, 3});
    Case wdil = conv2d(1, 16, {6, 9}, {3, 3});
    wdil.d = {1, 2};
    Case pads = conv2d(1, 16, {6, 7}, {3, 3});
    pads.s = {16, 16};
    pads.pb = pads.pe = {100, 100};
    for (const Case& n : {three, row, wdil, pads}) {
        for (const std::string& isa : jit_isas(false)) {
            INFO(label(n, isa));
            CHECK(n.make(isa).describe().find(" fold-taps") == std::string::npos);
        }
        check_exact(n);
    }
    const wtest::ThreadRuns runs = wtest::check_thread_counts(wtest::split_size(cases.front()), false);
    CHECK(runs.outputs.size() == jit_isas(false).size());
}

TEST_CASE("weights: spatial sizes, strides, dilations, pads", "[jit][weights]") {
    for (int64_t sp : {1, 2, 7}) {
        Case c = conv2d(5, 19, {sp, sp + 1}, {1, 1});
        check_exact(c);
        c = conv2d(5, 19, {sp, sp}, {3, 3});
        c.pb = c.pe = {1, 1};
        check_exact(c);
    }
    Case c = conv2d(6, 20, {11, 13}, {3, 3});
    c.s = {2, 3};
    c.d = {2, 1};
    c.pb = {2, 0};
    c.pe = {1, 4};
    check_exact(c);
    // Pads larger than the kernel: taps entirely in padding.
    c = conv2d(3, 18, {4, 5}, {2, 2});
    c.pb = {3, 4};
    c.pe = {5, 3};
    check_exact(c);
    // First layer: IC 3, 7x7 stride 2.
    c = conv2d(3, 64, {23, 21}, {7, 7});
    c.s = {2, 2};
    c.pb = c.pe = {3, 3};
    check_exact(c);
    // 1x1 stride 2 and 1x1 stride 1 (merged rows, segments).
    c = conv2d(6, 72, {9, 11}, {1, 1});  // strided 1x1 with pads: compressed staged rows
    c.s = {2, 3};
    c.pb = {1, 2};
    c.pe = {0, 1};
    check_exact(c);
    c = conv2d(12, 40, {9, 9}, {1, 1});
    c.s = {2, 2};
    check_exact(c);
    c = conv2d(8, 24, {30, 31}, {1, 1});
    check_exact(c);
}

TEST_CASE("weights: 1D and 3D", "[jit][weights]") {
    Case c = conv2d(9, 21, {29}, {5});
    c.s = {2};
    c.d = {3};
    c.pb = {4};
    c.pe = {1};
    check_exact(c);
    c = conv2d(10, 18, {5, 6, 7}, {3, 2, 3});
    c.s = {1, 2, 1};
    c.pb = {1, 0, 2};
    c.pe = {1, 1, 0};
    check_exact(c);
    c = conv2d(4, 16, {3, 4, 4}, {1, 1, 1});
    check_exact(c);
}

TEST_CASE("weights: groups and depthwise", "[jit][weights]") {
    Case c = conv2d(6, 10, {6, 5}, {3, 3});
    c.g = 2;
    c.pb = c.pe = {1, 1};
    check_exact(c);
    c = conv2d(48, 96, {4, 4}, {3, 3});
    c.g = 3;
    check_exact(c);
    for (int64_t ch : {1, 2, 15, 16, 17, 33, 65}) {
        Case dw = conv2d(ch, ch, {6, 9}, {3, 3});
        dw.g = ch;
        dw.pb = dw.pe = {1, 1};
        if (ch > 1) check_exact(dw);
    }
    Case dw = conv2d(40, 40, {9, 12}, {5, 5});  // dilated, strided, wide pads
    dw.g = 40;
    dw.d = {2, 2};
    dw.s = {1, 2};
    dw.pb = {4, 5};
    dw.pe = {4, 6};
    check_exact(dw);
    dw = conv2d(24, 24, {40}, {11});  // 1D, kernel wider than the register budget allows in one tile
    dw.g = 24;
    dw.pb = {5};
    dw.pe = {5};
    check_exact(dw);
    dw = conv2d(20, 20, {4, 5, 6}, {3, 3, 3});
    dw.g = 20;
    dw.pb = dw.pe = {1, 1, 1};
    check_exact(dw);
    dw = conv2d(16, 32, {6, 6}, {3, 3});  // channel multiplier 2: not the depthwise kernel
    dw.g = 16;
    check_exact(dw);
}

// Depthwise edges: the pixels where only taps [a, b) and kernel rows
// [ia, ib) of a tile read inside src run only those (kernel row, tap)
// pairs (WeightsRow::mask), in the call that runs the tile's interior.
// Prefix and suffix intervals (7 taps, pad 3), middle ones (a dilated 1D
// kernel wider than its row), W and H strides with uneven pads, row
// intervals of two lengths (5x5) and of three (7x7); planes large enough
// not to be pre-padded; AVX2 splits the 7 taps over kw tiles.
TEST_CASE("weights: depthwise edges run the taps and kernel rows that read inside src", "[jit][weights]") {
    std::vector<Case> cs;
    Case c = conv2d(20, 20, {16, 48}, {3, 7});
    c.pb = c.pe = {1, 3};
    cs.push_back(c);
    c = conv2d(17, 17, {5}, {3});
    c.d = {4};
    c.pb = c.pe = {4};
    cs.push_back(c);
    c = conv2d(33, 33, {20, 41}, {3, 5});
    c.s = {2, 2};
    c.pb = {1, 2};
    c.pe = {0, 1};
    cs.push_back(c);
    c = conv2d(18, 18, {34, 34}, {5, 5});
    c.pb = c.pe = {2, 2};
    cs.push_back(c);
    c = conv2d(12, 12, {48, 48}, {7, 7});
    c.pb = c.pe = {3, 3};
    cs.push_back(c);
    for (Case& k : cs) {
        k.g = k.ic;
        for (const std::string& isa : jit_isas(false)) {
            const std::string d = k.make(isa).describe();
            INFO(label(k, isa) << "\n" << d);
            CHECK(d.find("prepad") == std::string::npos);
        }
        check_exact(k);
        Case h = k;
        h.dt = convgrad::data_type::f16;  // widened as loaded, the same edge masks
        check_exact_any_type(h);
    }
}

// Grouped f32 layers with a spatial kernel read the user's tensors in place
// on AVX-512 (a tile takes ICg / OCg of each pixel's channels), unless the
// pixels of a row crowd one L1 set, which keep staging; kw windows and kw
// lanes (groups of up to 16) read in place at any pitch, and from 256-byte
// pixels a whole number of lines long their calls prefetch the next
// group's lines. Groups of 16 with a W stride and with unit stride, an odd
// group count and channel tails (ICg 12, OCg 20), ConvTranspose, NCX,
// every weights format, 1-4 threads.
TEST_CASE("weights: grouped layers read their tensors in place", "[jit][weights]") {
    const bool avx512 = convgrad::max_isa() != "avx2";
    std::vector<Case> cs;
    Case c = conv2d(48, 48, {9, 14}, {3, 3});
    c.g = 3;
    c.s = {2, 2};
    c.pb = {1, 1};
    c.pe = {0, 1};
    cs.push_back(c);
    c = conv2d(36, 60, {7, 7}, {3, 3});
    c.g = 3;
    c.pb = c.pe = {1, 1};
    cs.push_back(c);
    c.transpose = true;
    cs.push_back(c);
    for (const Case& base : cs)
        for (bool nxc : {true, false})
            for (const char* wfmt : {"XIO", "OIX"}) {
                Case v = base;
                v.nxc = nxc;
                v.wfmt = wfmt;
                const std::string d = v.make("avx512_core").describe();
                INFO(label(v, "avx512_core") << "\n" << d);
                if (avx512) CHECK(d.find(" staged ") == std::string::npos);
                check_exact(v);
            }
    for (int t : {1, 2, 3, 4}) {  // bitwise for any thread count, reals
        const convgrad::op ref = cs[0].make("ref");
        const Buffer a = testutil::random_reals(convgrad::data_type::f32, ref.input0_elems(), 9);
        const Buffer b = testutil::random_reals(convgrad::data_type::f32, ref.input1_elems(), 10);
        tbb::task_arena one(1), arena(t);
        Buffer want, got;
        int used = 0;
        one.execute([&] { want = testutil::run(cs[0].make("avx512_core"), a, b); });
        arena.execute([&] {
            const convgrad::op o = cs[0].make("avx512_core");
            got = testutil::run(o, a, b);
            used = testutil::threads_used(o);
        });
        CHECK(used == t);
        CHECK(testutil::bitwise_equal(got, want));
    }
    // 32 groups, 3x3 s2 with pads 1 / 0 (ResNeXt-50's strided blocks).
    auto strided = [](int64_t channels, int64_t hw, int64_t mb) {
        Case k = conv2d(channels, channels, {hw, hw}, {3, 3});
        k.mb = mb;
        k.g = 32;
        k.s = {2, 2};
        k.pb = {1, 1};
        k.pe = {0, 0};
        return k;
    };
    // 512 channels in groups of 16, 28 -> 14: src pixels 4 KiB apart, the 14
    // of a row in one L1 set; kw lanes read them in place, the calls of each
    // group (of a thread's range, 1-3 threads, more than one chunk)
    // prefetching the next one's lines.
    const Case lanes = strided(512, 28, 3);
    if (avx512) {
        const std::string d = lanes.make("avx512_core").describe();
        INFO(d);
        CHECK(d.find(" staged ") == std::string::npos);
        CHECK(d.find(" kw-lanes ") != std::string::npos);
        CHECK(d.find(" prefetch next group") != std::string::npos);
    }
    for (int t : {1, 2, 3}) {
        tbb::task_arena arena(t);
        arena.execute([&] { check_exact(lanes); });
    }
    // Groups of 8 in pairs on kw lanes: 128 channels (512-byte pixels) take
    // the group walk; 104 (416 bytes, not a whole number of lines: a pair's
    // slice straddles two lines at odd pixels) the walk of the next chunk.
    for (int64_t channels : {int64_t(128), int64_t(104)}) {
        Case k = conv2d(channels, channels, {28, 28}, {3, 3});
        k.mb = 2;
        k.g = channels / 8;
        k.pb = k.pe = {1, 1};
        if (avx512) {
            const std::string d = k.make("avx512_core").describe();
            INFO(d);
            CHECK(d.find(" staged ") == std::string::npos);
            CHECK(d.find(" kw-lanes(group pairs) ") != std::string::npos);
            CHECK((d.find(" prefetch next group") != std::string::npos) == (channels * 4 % 64 == 0));
        }
        check_exact(k);
    }
    // Pairs of groups of 8 at 3x3 s2 (128 channels, 28 -> 14): a pair's three
    // calls step over fewer pixels than the next pair's walk has lines, so
    // each step prefetches three of them (1-3 threads, two chunks).
    Case walk3 = strided(128, 28, 2);
    walk3.g = 16;
    if (avx512) {
        const std::string d = walk3.make("avx512_core").describe();
        INFO(d);
        CHECK(d.find(" kw-lanes(group pairs) ") != std::string::npos);
        CHECK(d.find(" prefetch next group (3 lines/px)") != std::string::npos);
    }
    for (int t : {1, 2, 3}) {
        tbb::task_arena arena(t);
        arena.execute([&] { check_exact(walk3); });
    }
    // Groups of 32 (m x n tiles) at that pitch keep staging.
    const Case crowded = strided(1024, 14, 1);
    if (avx512) CHECK(crowded.make("avx512_core").describe().find(" staged ") != std::string::npos);
    check_exact(crowded);
}

// Grouped layers whose pixels are a multiple of 512 bytes apart stage their
// rows one line further apart (src and diff_dst, every type and ISA), and
// those of 2 KiB or more are staged (not read in place) for it; layers
// without groups keep dense rows.
TEST_CASE("weights: staged grouped rows are spread a line apart", "[jit][weights]") {
    struct Shape {
        int64_t ic, oc, g, h, stride;
    };
    const Shape shapes[] = {{512, 512, 32, 9, 1},  {512, 512, 32, 13, 2}, {128, 256, 8, 7, 1},
                             {1024, 512, 64, 6, 2}, {1024, 1024, 32, 6, 2}};
    for (const Shape& s : shapes)
        for (convgrad::data_type dt : {convgrad::data_type::f32, convgrad::data_type::bf16, convgrad::data_type::f16}) {
            Case c = conv2d(s.ic, s.oc, {s.h, s.h + 1}, {3, 3});
            c.mb = 2;
            c.g = s.g;
            c.s = {s.stride, s.stride};
            c.pb = c.pe = {1, 1};
            c.dt = dt;
            for (const std::string& isa : jit_isas(true)) {
                const std::string d = c.make(isa).describe();
                INFO(label(c, isa) << "\n" << d);
                // 2 KiB pitches are staged (16-bit gemm always is) but for
                // groups of up to 16 on AVX-512 (kw windows / lanes): 128 ->
                // 256 in groups of 16 f32 reads in place too.
                const bool lanes = isa != "avx2" && s.ic / s.g <= 16 && s.oc / s.g <= 16;
                const bool staged =
                        dt != convgrad::data_type::f32 || isa == "avx2" || (s.ic * 4 % 2048 == 0 && !lanes);
                // Blocked staging (AVX2; AVX-512 f32 groups: 1024 -> 1024
                // in groups of 32) lays out tiles, not pixels: no pitch to
                // spread.
                const bool blocked = d.find(" blocked") != std::string::npos;
                if (blocked) CHECK((isa == "avx2" || dt == convgrad::data_type::f32));
                if (isa != "avx2" && dt == convgrad::data_type::f32 && staged) CHECK(blocked);
                CHECK((d.find(" pitch+64") != std::string::npos) == (staged && !blocked));
            }
            check_exact_any_type(c);
        }
    Case plain = conv2d(256, 512, {7, 8}, {3, 3});  // 1 KiB / 2 KiB pitches without groups: dense
    plain.mb = 2;
    plain.pb = plain.pe = {1, 1};
    for (const std::string& isa : jit_isas(true)) CHECK(plain.make(isa).describe().find(" pitch+64") == std::string::npos);
}

// AVX-512 f32 grouped layers that stage rows (pixels a multiple of 2 KiB
// apart, groups too wide for kw windows or lanes) stage their chunks per
// tile ("blocked"): groups of 32 and 64 input channels, output channel
// tails (40 and 24 per group; 48 at unit W stride, where 32 take kw
// windows), W and H strides, 1D and 3D, both weight
// formats, ConvTranspose; bitwise equal to the reference for 1-3 threads.
TEST_CASE("weights: AVX-512 grouped layers stage chunks per tile", "[jit][weights]") {
    const bool avx512 = convgrad::detail::cpu_isa() >= convgrad::detail::Isa::avx512_core;
    std::vector<Case> cases;
    auto add = [&](int64_t ic, int64_t oc, int64_t g, dims in, dims k, dims s) {
        Case c = conv2d(ic, oc, in, k);
        c.g = g;
        c.s = s;
        c.pb = c.pe = dims(in.size(), 1);
        c.mb = 3;
        cases.push_back(c);
    };
    add(512, 768, 16, {9, 7}, {3, 3}, {});       // 32 -> 48 a group (32 -> 32 takes kw windows)
    add(512, 640, 16, {8, 6}, {3, 3}, {2, 2});   // 32 -> 40: a tail vector, strided
    add(1024, 384, 16, {7, 7}, {3, 3}, {1, 2});  // 64 -> 24, W stride 2
    add(512, 768, 16, {29}, {5}, {});            // 1D
    add(512, 512, 8, {4, 5, 4}, {3, 3, 3}, {});  // 3D, 64 a group
    for (Case c : cases) {
        for (const char* wfmt : {"XIO", "OIX"})
            for (bool transpose : {false, true}) {  // ConvTranspose: the same convolution view
                c.wfmt = wfmt;
                c.transpose = transpose;
                if (avx512) {
                    const std::string d = c.make("avx512_core").describe();
                    INFO(label(c, "avx512_core") << "\n" << d);
                    CHECK(d.find(" staged ") != std::string::npos);
                    CHECK(d.find(" blocked ") != std::string::npos);
                }
                for (int t : {1, 2, 3}) {
                    tbb::task_arena arena(t);
                    arena.execute([&] { check_exact(c, 11); });
                }
            }
        // 16-bit inputs keep row staging (widened in one pass).
        c.dt = convgrad::data_type::f16;
        if (avx512) CHECK(c.make("avx512_core").describe().find(" blocked ") == std::string::npos);
        check_exact_any_type(c);
    }
}

// Groups of G = 2, 4, 8 channels (IC/g == OC/g) run the depthwise kernel
// with a tile row per (tap, input channel of the group): group counts that
// end in a channel tail on both ISAs, pixel windows (unit W stride, 3 and 5
// taps) and single pixels (W stride 2), dilation, 1D / 2D / 3D, pre-padding
// (the weights formats: in "weights: data and weight formats").
TEST_CASE("weights: lane groups of 2, 4 and 8 channels", "[jit][weights]") {
    for (const wtest::LaneGroupCase& lc : wtest::lane_group_cases()) {
        INFO("G " << lc.group_size << " groups " << lc.c.g << " rank " << lc.c.nsp());
        const std::string lg = "(lane groups of " + std::to_string(lc.group_size) + ")";
        // Groups of 8 of up to 3 undilated taps a row pair groups in kw lanes on
        // AVX-512, at any W stride.
        const bool pairs = lc.group_size == 8 && lc.c.d.back() == 1 && lc.c.k.back() <= 3;
        if (convgrad::max_isa() != "avx2") {
            CHECK((lc.c.make("avx512_core").describe().find(lg) != std::string::npos) == !pairs);
            CHECK((lc.c.make("avx512_core").describe().find("kw-lanes(group pairs)") != std::string::npos) == pairs);
        }
        // A group of 8 fills an AVX2 vector: the gemm kernel there.
        CHECK((lc.c.make("avx2").describe().find(lg) != std::string::npos) == (lc.group_size < 8));
        check_exact(lc.c);
    }
    Case pre = conv2d(32, 32, {5, 5}, {5, 5});  // taps mostly in the padding: edge masks on lane groups
    pre.g = 8;
    pre.pb = pre.pe = {2, 2};
    CHECK(pre.make("avx512_core").describe().find("prepad") == std::string::npos);
    check_exact(pre);
    Case mixed = conv2d(16, 32, {6, 6}, {3, 3});  // IC/g != OC/g: the gemm kernel
    mixed.g = 4;
    CHECK(mixed.make("avx512_core").describe().find("gemm") != std::string::npos);
    check_exact(mixed);
}

// Kernels of 32 taps and more on lane groups: a tile of m taps holds m x G
// rows, one byte in the kernel desc; 32 taps of groups of 8 once wrapped
// to an empty tile and left diff_weights zero.
TEST_CASE("weights: long kernels on lane groups and strides past a byte", "[jit][weights]") {
    for (int64_t gs : {2, 4, 8})
        for (int64_t k : {31, 33, 64})
            for (int64_t s : {1, 2}) {
                Case c = conv2d(4 * gs, 4 * gs, {k + 9}, {k});
                c.g = 4;
                c.s = {s};
                c.pb = {s == 1 ? k / 2 : 0};
                c.pe = {s == 1 ? k - 1 - k / 2 : 1};  // stride 2: 9 + 1 pixels past the first window
                INFO("G " << gs << " kw " << k << " stride " << s);
                check_exact(c);
            }
    // W strides past a byte of the kernel desc: whole depthwise rows and kw
    // lanes (which carry the stride) step aside.
    for (int64_t g : {1, 16}) {
        Case c = conv2d(16, 16, {700}, {3});
        c.g = g;
        c.s = {300};
        c.pe = {0};  // the last 97 pixels unread
        INFO("groups " << g << " stride 300");
        check_exact(c);
    }
}

TEST_CASE("weights: long rows read in place are cut into segments", "[jit][weights]") {
    // gemm rows read in place (f32, not staged) of 4+ chunks are cut into
    // equal segments: folded kw taps (wav2vec 2.0's first layer: 1 channel,
    // 10 taps, stride 5), with segment boundaries inside the W edges (pads
    // wider than a segment's src reach), and a dilated kernel (not folded),
    // one-sided pad.
    Case wav = conv2d(1, 512, {4800}, {10});
    wav.s = {5};
    wav.mb = 2;
    Case edges = wav;  // left edge 220 pixels, right edge 180
    edges.pb = {1100};
    edges.pe = {900};
    Case dil = conv2d(2, 384, {3001}, {4});
    dil.d = {3};
    dil.s = {2};
    dil.pb = {700};
    dil.pe = {0};
    dil.mb = 1;
    for (const Case& c : {wav, edges, dil}) {
        for (const std::string& isa : jit_isas(false)) {
            const std::string d = c.make(isa).describe();
            INFO(label(c, isa) << "\n" << d);
            CHECK((d.find(" fold-kw") != std::string::npos) == c.d.empty());
            // More rows than images: a segment shorter than the output row.
            // AVX2 tiles carry fewer channels, so its chunks hold more
            // pixels: these rows are under 4 chunks there.
            if (isa != "avx2") CHECK(described_rows(d) > c.mb);
        }
        check_exact(c);
    }
}

TEST_CASE("weights: long staged rows are cut into segments", "[jit][weights]") {
    // Staged gemm rows of 4+ chunks are cut too (each chunk stages the
    // window of src its segment's taps read): a k3 s2 1D layer (wav2vec
    // 2.0's second), a padded k5 layer in NCX with channel tails (the
    // window crosses both W edges), the first one grouped, a dilated
    // strided one, a strided 1x1 one, a 16-bit one with folded kw taps.
    // Exact on every ISA, and in bf16 / f16.
    Case s2 = conv2d(128, 128, {3000}, {3});
    s2.s = {2};
    s2.mb = 2;
    Case padded = conv2d(96, 136, {2500}, {5});
    padded.pb = padded.pe = {2};
    padded.nxc = false;
    padded.wfmt = "OIX";
    padded.mb = 2;
    Case grouped = s2;
    grouped.g = 2;
    // Dilated and strided with pads: segment windows overlap and start
    // inside the left pad.
    Case dilated = conv2d(64, 80, {12000}, {9});
    dilated.s = {5};
    dilated.d = {2};
    dilated.pb = {7};
    dilated.pe = {2};
    dilated.mb = 1;
    // kw windows (16 output channels) and kw lanes (W stride 2) keep whole
    // rows: on rows long enough to cut they give way to plain tiles on
    // segments, except lane pairs (groups of 8); short rows keep windows.
    // In f32 on AVX-512 (16-bit pairs and AVX2 take neither).
    Case window = conv2d(16, 16, {30000}, {3});
    window.pb = window.pe = {1};
    Case lanes = window;
    lanes.s = {2};
    Case pairs = conv2d(32, 32, {30000}, {3});
    pairs.g = 4;
    pairs.s = {2};
    pairs.pb = pairs.pe = {1};
    Case short_window = window;
    short_window.in = {3000};
    for (const Case& c : {window, lanes, pairs, short_window}) {
        const bool kept = c.g > 1 || c.in[0] < 10000;
        for (const std::string& isa : jit_isas(false)) {
            const std::string d = c.make(isa).describe();
            INFO(label(c, isa) << "\n" << d);
            if (isa == "avx2") continue;
            const bool kw = d.find(c.s.empty() ? " kw-window" : " kw-lanes") != std::string::npos;
            CHECK(kw == kept);
            if (kept)
                CHECK(described_rows(d) == c.mb);
            else
                CHECK(described_rows(d) > c.mb);
        }
        check_exact(c);
        Case h = c;
        h.dt = convgrad::data_type::bf16;
        check_exact_any_type(h);
    }
    // 1x1 with a W stride: compressed W rows (the staged row holds the
    // output pixels' src pixels) and tile-major slices.
    Case strided_1x1 = conv2d(192, 256, {8000}, {1});
    strided_1x1.s = {2};
    for (const Case& c : {s2, padded, grouped, dilated, strided_1x1}) {
        for (const std::string& isa : jit_isas(false)) {
            const std::string d = c.make(isa).describe();
            INFO(label(c, isa) << "\n" << d);
            REQUIRE(d.find(" staged") != std::string::npos);
            CHECK(described_rows(d) > c.mb);
        }
        check_exact(c);
    }
    // Folded kw taps staged (16-bit: a first layer of 1 channel, 10 taps,
    // stride 5, padded): a segment's window holds its share of the W pads.
    Case folded = conv2d(1, 128, {24000}, {10});
    folded.s = {5};
    folded.pb = {3};
    folded.pe = {4};
    for (convgrad::data_type dt : {convgrad::data_type::bf16, convgrad::data_type::f16})
        for (Case c : {s2, grouped, folded, strided_1x1}) {
            c.dt = dt;
            if (c.ic == 1)
                for (const std::string& isa : jit_isas(true)) {
                    const std::string d = c.make(isa).describe();
                    INFO(label(c, isa) << "\n" << d);
                    CHECK(d.find(" fold-kw") != std::string::npos);
                    CHECK(described_rows(d) > c.mb);
                }
            check_exact_any_type(c);
        }
}

TEST_CASE("weights: depthwise pre-pads src only for wide bf16 W-pair kernels", "[jit][weights]") {
    // bf16 W pixel pairs (avx512_core_bf16) at W stride and dilation 1 with 7+
    // taps on planes 25-95 % interior run on a zero-padded copy of src;
    // every other depthwise plan reads src in place, its edges gated
    // (planes almost all edge, 5x5, W strides, W dilation, f32, f16, AVX2).
    // Both, with one-sided and wide pads, strides, dilation, 1D / 3D, NCX,
    // all three types.
    auto dw = [](int64_t ch, dims in, dims k) {
        Case c = conv2d(ch, ch, std::move(in), std::move(k));
        c.g = ch;
        return c;
    };
    std::vector<std::pair<Case, bool>> cases;  // case, pre-padded with bf16 W pairs
    Case c = dw(24, {14, 14}, {1, 7});  // 1 x 7 (one row: W pairs), 57 % interior
    c.pb = c.pe = {0, 3};
    cases.push_back({c, true});
    c = dw(24, {14, 14}, {7, 7});  // 7x7: widened, not W pairs, nothing to pre-pad
    c.pb = c.pe = {3, 3};
    cases.push_back({c, false});
    c = dw(17, {2, 28}, {1, 9});  // 71 % interior, one-sided pads, 1 x 9
    c.pb = {0, 5};
    c.pe = {0, 3};
    cases.push_back({c, true});
    c = dw(20, {30, 28}, {1, 7});  // H stride and dilation, W pairs still (56 % interior)
    c.s = {2, 1};
    c.d = {2, 1};
    c.pb = c.pe = {6, 3};
    c.nxc = false;
    c.wfmt = "OIX";
    cases.push_back({c, true});
    c = dw(40, {7, 7}, {1, 7});  // 14 % interior: the copy costs more than the edges
    c.pb = c.pe = {0, 3};
    cases.push_back({c, false});
    c = dw(33, {7, 9}, {5, 5});  // W dilation: no W pairs
    c.s = {2, 1};
    c.d = {1, 2};
    c.pb = {2, 0};
    c.pe = {1, 6};
    cases.push_back({c, false});
    c = dw(17, {5}, {9});  // no output pixel interior
    c.pb = {8};
    c.pe = {0};
    cases.push_back({c, false});
    c = dw(20, {3, 4, 5}, {3, 3, 3});
    c.pb = c.pe = {1, 1, 1};
    c.nxc = false;
    c.wfmt = "OIX";
    cases.push_back({c, false});
    c = dw(24, {7, 7}, {3, 3});
    c.pb = c.pe = {1, 1};
    cases.push_back({c, false});
    c = dw(24, {7, 8}, {7, 7});  // unpadded: nothing to pre-pad
    cases.push_back({c, false});
    c = dw(16, {9, 41}, {1, 7});  // W stride 2: W pairs in place (70 % interior)
    c.s = {1, 2};
    c.pb = {1, 3};
    c.pe = {1, 2};
    cases.push_back({c, false});
    for (const auto& [base, prepad] : cases) {
        for (convgrad::data_type dt : {convgrad::data_type::f32, convgrad::data_type::bf16, convgrad::data_type::f16}) {
            Case t = base;
            t.dt = dt;
            for (const std::string& isa : jit_isas(true)) {
                const std::string d = t.make(isa).describe();
                INFO(label(t, isa) << "\n" << d);
                const bool pairs = d.find(" W-pairs") != std::string::npos;
                auto w_at_most = [](const dims& v, int64_t x) { return v.empty() || v.back() <= x; };  // W stride / dilation
                const bool one_row = std::all_of(base.k.begin(), base.k.end() - 1, [](int64_t k) { return k == 1; });
                const bool taps = one_row ? w_at_most(base.s, 2) : w_at_most(base.s, 1) && base.k.back() <= 5;
                if (isa == "avx512_core_bf16" && dt == convgrad::data_type::bf16)
                    CHECK(pairs == (taps && w_at_most(base.d, 1) && base.k.back() >= 3));
                CHECK((d.find(" prepad") != std::string::npos) == (prepad && pairs));
            }
        }
        check_exact(base);
        for (convgrad::data_type dt : {convgrad::data_type::bf16, convgrad::data_type::f16}) {
            Case t = base;
            t.dt = dt;
            check_exact_any_type(t);
        }
        Case lowp = base;
        lowp.dt = convgrad::data_type::bf16;
        wtest::check_thread_counts(wtest::split_size(lowp), true);
    }
}

TEST_CASE("weights: depthwise pixel windows share src vectors across taps", "[jit][weights]") {
    // W stride 1 or 2, kernels of 5+ taps: blocks of pixels, then single
    // pixels (rows of 5 and 13 pixels), channel tails, 1D / 2D, pre-padded
    // or not, 16-bit types; W dilation and rows of one pixel (no block
    // fits) keep one pixel at a time.
    std::vector<std::pair<Case, bool>> cases;  // case, windows expected on AVX-512
    for (int64_t w : {1, 5, 13}) {
        Case c = conv2d(17, 17, {w + 6}, {7});
        c.g = 17;
        cases.push_back({c, w > 1});
    }
    Case c = conv2d(33, 33, {30, 29}, {5, 5});
    c.g = 33;
    c.pb = c.pe = {2, 2};
    cases.push_back({c, true});
    c = conv2d(40, 40, {9, 9}, {7, 7});
    c.g = 40;
    c.pb = c.pe = {3, 3};
    c.nxc = false;
    c.wfmt = "OIX";
    cases.push_back({c, true});
    c = conv2d(16, 16, {12, 25}, {5, 5});
    c.g = 16;
    c.s = {1, 2};
    cases.push_back({c, true});
    c = conv2d(16, 16, {12, 25}, {5, 5});
    c.g = 16;
    c.d = {1, 2};
    cases.push_back({c, false});
    for (const auto& [base, windows] : cases) {
        for (convgrad::data_type dt : {convgrad::data_type::f32, convgrad::data_type::bf16, convgrad::data_type::f16}) {
            Case t = base;
            t.dt = dt;
            if (convgrad::detail::cpu_isa() >= convgrad::detail::Isa::avx512_core) {
                const std::string d = t.make("avx512_core").describe();
                INFO(label(t, "avx512_core") << "\n" << d);
                const bool shared = d.find(" window=") != std::string::npos || d.find(" whole-rows") != std::string::npos;
                CHECK(shared == windows);
            }
            check_exact_any_type(t);
        }
        check_reals(base);
    }
}

TEST_CASE("weights: depthwise whole rows compile their W edges in", "[jit][weights]") {
    // Rows of up to 64 output pixels run as one straight-line body each,
    // the pixels' out-of-src taps skipped at generation (the generator's
    // edge shapes and strides: "weights kernel: depthwise whole rows against
    // a scalar sum"). Here the plans around it: H edges (kernel rows outside
    // src masked per row), H stride and dilation, pads wider than the
    // kernel's reach, 3D, NCX, channel tails, rows of 64 pixels (whole) and
    // 65 (not), merged unpadded 1D rows (not), W strides where the cost
    // model keeps one pixel at a time; all three types on every ISA (bf16
    // on avx512_core_bf16 pairs pixels instead), 1-4 threads bitwise alike.
    auto dw = [](int64_t ch, dims in, dims k) {
        Case c = conv2d(ch, ch, std::move(in), std::move(k));
        c.g = ch;
        return c;
    };
    enum Expect { whole, not_whole, either };  // f32 on avx512_core
    std::vector<std::pair<Case, Expect>> cases;
    Case c = dw(17, {7, 7}, {3, 3});
    c.pb = c.pe = {1, 1};
    cases.push_back({c, whole});
    c = dw(20, {9, 11}, {5, 5});  // one-sided pads, H stride and dilation
    c.s = {2, 1};
    c.d = {2, 1};
    c.pb = {2, 4};
    c.pe = {0, 0};
    cases.push_back({c, whole});
    c = dw(16, {6, 5}, {3, 3});  // W pads of 3: the first and last pixels read only padding
    c.pb = {1, 3};
    c.pe = {1, 3};
    cases.push_back({c, whole});
    c = dw(18, {4, 5, 6}, {3, 3, 3});  // 3D, NCX
    c.pb = c.pe = {1, 1, 1};
    c.nxc = false;
    c.wfmt = "OIX";
    cases.push_back({c, whole});
    c = dw(16, {3, 64}, {3, 3});  // 64-pixel rows
    c.pb = c.pe = {1, 1};
    cases.push_back({c, whole});
    c = dw(16, {3, 65}, {3, 3});  // 65: windows instead
    c.pb = c.pe = {1, 1};
    cases.push_back({c, not_whole});
    c = dw(32, {40}, {3});  // 1D unpadded: one merged row per image
    cases.push_back({c, not_whole});
    c = dw(33, {14, 14}, {3, 3});  // W stride 2
    c.s = {2, 2};
    c.pb = c.pe = {1, 1};
    cases.push_back({c, either});
    c = dw(24, {10, 23}, {1, 7});  // W stride 3
    c.s = {1, 3};
    c.pb = {0, 2};
    c.pe = {0, 5};
    cases.push_back({c, either});
    const bool avx512 = convgrad::detail::cpu_isa() >= convgrad::detail::Isa::avx512_core;
    for (const auto& [base, expect] : cases) {
        if (avx512 && expect != either) {
            const std::string d = base.make("avx512_core").describe();
            INFO(label(base, "avx512_core") << "\n" << d);
            CHECK((d.find(" whole-rows") != std::string::npos) == (expect == whole));
        }
        check_every_type(base, false);
    }
}

namespace {
// A case read through per-thread windows: in every type after a run on NaN
// inputs (a window's stale bytes would show), exact on every ISA; f32
// reals; 1-4 threads bitwise alike.
void check_windowed_case(const Case& base) { check_every_type(base, true, true); }
}  // namespace

TEST_CASE("weights: NCX depthwise reads per-chunk NXC windows", "[jit][weights]") {
    // NCX depthwise plans transpose each chunk's rows into per-thread NXC
    // windows (no whole-tensor transposes): chunks of rows that cross
    // images (planes over Cost::ncx_window_plane_bytes) and of whole
    // images, strides, dilation, pads past the kernel's reach, 1D / 3D,
    // lane groups (every channel), ConvTranspose, OIX; threads splitting
    // channel tiles (one image: one chunk) read only their channels. Run
    // first on NaN inputs, so a window's stale bytes would show.
    auto dw = [](int64_t ch, dims in, dims k) {
        Case c = conv2d(ch, ch, std::move(in), std::move(k));
        c.g = ch;
        c.nxc = false;
        c.mb = 3;
        return c;
    };
    enum Chunks { rows_across_images, whole_images, any };  // f32 on avx512_core
    std::vector<std::pair<Case, Chunks>> cases;
    Case c = dw(17, {34, 33}, {3, 3});  // 4.5 KB f32 planes: rows
    c.pb = c.pe = {1, 1};
    cases.push_back({c, rows_across_images});
    c = dw(40, {9, 9}, {3, 3});  // H and W stride 2, whole images
    c.s = {2, 2};
    c.pb = c.pe = {1, 1};
    cases.push_back({c, whole_images});
    c = dw(20, {40, 31}, {5, 5});  // H stride and dilation, one-sided pads, OIX
    c.s = {2, 1};
    c.d = {2, 1};
    c.pb = {4, 2};
    c.pe = {0, 2};
    c.wfmt = "OIX";
    cases.push_back({c, any});
    c = dw(16, {6, 5}, {3, 3});  // W pads of 3: pixels that read only padding
    c.pb = {1, 3};
    c.pe = {1, 3};
    cases.push_back({c, whole_images});
    c = dw(18, {4, 5, 6}, {3, 3, 3});  // 3D
    c.pb = c.pe = {1, 1, 1};
    cases.push_back({c, whole_images});
    c = dw(32, {250}, {3});  // 1D, unpadded (merged rows; longer rows: ops/exec_dw_rows.cpp)
    cases.push_back({c, any});
    c = dw(33, {30, 40}, {3, 3});  // ConvTranspose
    c.pb = c.pe = {1, 1};
    c.transpose = true;
    cases.push_back({c, any});
    c = conv2d(32, 32, {12, 14}, {3, 3});  // lane groups of 4
    c.g = 8;
    c.nxc = false;
    c.pb = c.pe = {1, 1};
    cases.push_back({c, any});
    c = dw(512, {20, 20}, {3, 3});  // one image: threads split the channel tiles
    c.mb = 1;
    c.pb = c.pe = {1, 1};
    cases.push_back({c, whole_images});
    const bool avx512 = convgrad::detail::cpu_isa() >= convgrad::detail::Isa::avx512_core;
    for (const auto& [base, chunks] : cases) {
        if (avx512) {
            const std::string d = base.make("avx512_core").describe();
            INFO(label(base, "avx512_core") << "\n" << d);
            CHECK(d.find(" ncx->nxc(windows)") != std::string::npos);
            const size_t at = d.find(" chunk=");
            REQUIRE(at != std::string::npos);
            const int64_t chunk_rows = std::atoll(d.c_str() + at + 7);
            const int64_t image_rows = base.nsp() == 3 ? base.out(0) * base.out(1) : base.out(0);
            if (chunks == whole_images) CHECK(chunk_rows == image_rows);
            if (chunks == rows_across_images) CHECK(chunk_rows % image_rows != 0);
            if (chunks == rows_across_images) CHECK(chunk_rows < image_rows);
        }
        check_windowed_case(base);
    }
}

TEST_CASE("weights: NCX gemm layers copy only the rows a chunk reads", "[jit][weights]") {
    // Dense and grouped NCX layers make no whole-tensor transposes: each
    // thread transposes every channel of its chunk's rows into NXC windows
    // (bf16 image pairs: those rows of both images of each pair, an odd
    // minibatch's last image alone), chunks within an image and across
    // images. Strides, dilation, one-sided pads, 1D rows cut into segments,
    // 3D, kw taps folded into the tile rows (3 input channels), groups,
    // ConvTranspose, OIX. Run first on NaN inputs, so a window's stale
    // bytes would show.
    auto ncx = [](int64_t ic, int64_t oc, dims in, dims k, int64_t mb) {
        Case c = conv2d(ic, oc, std::move(in), std::move(k));
        c.nxc = false;
        c.mb = mb;
        return c;
    };
    std::vector<Case> cases;
    Case c = ncx(24, 40, {30, 26}, {3, 3}, 5);
    c.pb = c.pe = {1, 1};
    cases.push_back(c);
    c = ncx(20, 36, {33, 29}, {3, 5}, 3);  // H stride, W dilation, one-sided pads, OIX
    c.s = {2, 1};
    c.d = {1, 2};
    c.pb = {2, 0};
    c.pe = {0, 3};
    c.wfmt = "OIX";
    cases.push_back(c);
    c = ncx(64, 64, {48, 44}, {3, 3}, 3);  // chunks of part of an image (bf16 pairs: two windows apart)
    c.pb = c.pe = {1, 1};
    cases.push_back(c);
    c = ncx(64, 48, {5, 5}, {3, 3}, 9);  // small planes: a chunk of several images
    c.pb = c.pe = {1, 1};
    cases.push_back(c);
    c = ncx(16, 24, {6, 7, 8}, {3, 3, 3}, 3);  // 3D
    c.pb = c.pe = {1, 1, 1};
    cases.push_back(c);
    c = ncx(48, 64, {6000}, {3}, 2);  // 1D rows cut into segments
    c.pb = c.pe = {1};
    cases.push_back(c);
    c = ncx(3, 32, {40, 36}, {7, 7}, 3);  // first layer: kw taps folded (f32 reads the windows in place)
    c.s = {2, 2};
    c.pb = c.pe = {3, 3};
    cases.push_back(c);
    c = ncx(32, 64, {14, 12}, {3, 3}, 3);  // 2 groups
    c.g = 2;
    c.pb = c.pe = {1, 1};
    cases.push_back(c);
    c = ncx(33, 20, {18, 17}, {3, 3}, 4);  // ConvTranspose
    c.pb = c.pe = {1, 1};
    c.transpose = true;
    cases.push_back(c);
    using convgrad::data_type;
    bool segments = false, pairs = false;
    for (const Case& base : cases) {
        for (const std::string& isa : jit_isas(true)) {
            for (data_type dt : {data_type::f32, data_type::bf16}) {
                Case t = base;
                t.dt = dt;
                const std::string d = t.make(isa).describe();
                INFO(label(t, isa) << "\n" << d);
                if (d.rfind("jit:", 0) != 0 || d.find(" gemm ") == std::string::npos) continue;  // other executors
                CHECK(d.find(" ncx->nxc(chunk rows)") != std::string::npos);
                const size_t px = d.find('x', d.find(" rows="));
                segments |= std::atoll(d.c_str() + px + 1) < t.out(t.nsp() - 1);
                const bool split = std::atoll(d.c_str() + d.find(" chunk=") + 7) < t.out(0);  // (2D)
                pairs |= d.find(" bf16-pairs ") != std::string::npos && t.mb % 2 == 1 && t.nsp() == 2 && split;
            }
        }
        check_windowed_case(base);
    }
    CHECK(segments);
    if (convgrad::detail::cpu_isa() >= convgrad::detail::Isa::avx512_core_bf16) CHECK(pairs);
}

TEST_CASE("weights: NCX scratch does not grow with the minibatch", "[jit][weights]") {
    // What every thread keeps after an NCX execute at mb 16 stays well under
    // whole-tensor NXC copies of src and diff_dst, on every ISA and type.
    Case c = conv2d(64, 64, {56, 56}, {3, 3});
    c.pb = c.pe = {1, 1};
    c.nxc = false;
    c.mb = 16;
    for (const std::string& isa : jit_isas(true)) {
        for (convgrad::data_type dt : {convgrad::data_type::f32, convgrad::data_type::bf16}) {
            c.dt = dt;
            const convgrad::op o = c.make(isa);
            INFO(label(c, isa) << "\n" << o.describe());
            REQUIRE(o.describe().find(" gemm ") != std::string::npos);
            const Buffer a = testutil::random_reals(dt, o.input0_elems(), 1);
            const Buffer b = testutil::random_reals(dt, o.input1_elems(), 2);
            const size_t whole = a.bytes.size() + b.bytes.size();
            convgrad::detail::release_scratch();
            (void)testutil::run(o, a, b);
            CHECK(convgrad::detail::kept_scratch_bytes() > 0);
            CHECK(convgrad::detail::kept_scratch_bytes() < whole / 2);
            convgrad::detail::release_scratch();
        }
    }
}

TEST_CASE("weights: depthwise row blocks", "[jit][weights]") {
    // Whole rows R output rows an entry (the generator's shapes: "weights
    // kernel: depthwise row blocks against a scalar sum"); here the plans
    // and executor around it: blocks at the top and bottom of an image
    // (src rows masked), unpadded, 3D depths outside src, NCX, channel
    // tails, the types whose plans take them (f32 on 2 / 4 KiB pixels, on
    // AVX2 from 512 bytes with H strides up to 2; 16-bit widened), every
    // ISA, 1-4 threads bitwise alike.
    auto dw = [](int64_t ch, dims in, dims k) {
        Case c = conv2d(ch, ch, std::move(in), std::move(k));
        c.g = ch;
        return c;
    };
    std::vector<Case> cases;
    Case c = dw(1024, {7, 7}, {3, 3});
    c.pb = c.pe = {1, 1};
    cases.push_back(c);
    c = dw(512, {14, 14}, {3, 3});
    c.pb = c.pe = {1, 1};
    cases.push_back(c);
    c = dw(512, {10, 9}, {3, 3});  // unpadded: 8 rows
    cases.push_back(c);
    c = dw(512, {3, 7, 7}, {3, 3, 3});  // 3D, NCX
    c.pb = c.pe = {1, 1, 1};
    c.nxc = false;
    c.wfmt = "OIX";
    cases.push_back(c);
    c = dw(33, {12, 12}, {3, 3});  // 16-bit: a channel tail, asymmetric pads
    c.pb = {2, 1};
    c.pe = {0, 1};
    cases.push_back(c);
    c = dw(128, {11, 13}, {3, 3});  // AVX2 f32: 512-byte pixels, H and W stride 2, odd sizes
    c.s = {2, 2};
    c.pb = c.pe = {1, 1};
    cases.push_back(c);
    c = dw(256, {10, 9}, {3, 3});  // 1 KiB pixels, unpadded, ConvTranspose
    c.transpose = true;
    cases.push_back(c);
    c = dw(384, {2, 8, 6}, {2, 3, 3});  // 1.5 KiB pixels, 3D, H stride 2, NCX
    c.s = {1, 2, 1};
    c.pb = c.pe = {0, 1, 1};
    c.nxc = false;
    c.wfmt = "OIX";
    cases.push_back(c);
    const bool avx512 = convgrad::detail::cpu_isa() >= convgrad::detail::Isa::avx512_core;
    const bool avx2 = convgrad::detail::cpu_isa() >= convgrad::detail::Isa::avx2;
    for (const Case& base : cases) {
        for (convgrad::data_type dt : {convgrad::data_type::f32, convgrad::data_type::bf16, convgrad::data_type::f16}) {
            Case t = base;
            t.dt = dt;
            // f32 on 2 / 4 KiB pixels in NXC (NCX windows widen those pixels
            // instead); 16-bit blocks of 2 rows (a line of channels).
            // (The AVX2 cases of 128-384 channels: their plans on AVX2 below.)
            const bool avx2_case = base.ic % 128 == 0 && base.ic < 512;
            const bool blocks =
                    dt == convgrad::data_type::f32 ? base.ic >= 512 && base.nxc : t.out(t.nsp() - 2) % 2 == 0;
            if (avx512 && blocks && !avx2_case) {
                const std::string d = t.make("avx512_core").describe();
                INFO(label(t, "avx512_core") << "\n" << d);
                CHECK(d.find(" row-blocks=") != std::string::npos);
            }
            if (avx2 && dt == convgrad::data_type::f32 && base.ic < 512) {  // (2 / 4 KiB pixels: see above)
                const std::string d = t.make("avx2").describe();
                INFO(label(t, "avx2") << "\n" << d);
                CHECK((d.find(" row-blocks=") != std::string::npos) == avx2_case);
            }
            check_exact_any_type(t);
            if (dt != convgrad::data_type::f32) wtest::check_thread_counts(wtest::split_size(t), false);
        }
        check_exact(base);
        check_reals(base);
        wtest::check_thread_counts(wtest::split_size(base), false);
    }
}

TEST_CASE("weights: depthwise on 2 KiB-multiple pixels reads windows of wider pixels", "[jit][weights]") {
    // 512 / 1024 f32 channels (1024 16-bit ones): plans copy each chunk's
    // rows into per-thread windows whose pixels are a line further apart
    // (WeightsPlan::nxc_windows, window_pad), in NXC from the user's
    // tensors, in NCX through the windows' transposes. NCX on both ISAs
    // from pixels of 512 bytes (AVX2: where row blocks do not fit in
    // place). AVX2 NXC: row blocks stay in place where they fit. AVX-512
    // NXC: f32 only where the tiles in place are one or two vectors without
    // row blocks; 16-bit in place but for dilated rows whose taps' lines
    // crowd an L1 set. Strides, dilation, pads past the kernel's reach,
    // 1D / 3D, merged 1x1 rows, ConvTranspose, OIX, lane groups; threads
    // splitting the channel tiles (one image) and the chunks. Run first on
    // NaN inputs, so a window's stale bytes would show; 1-4 threads bitwise
    // alike.
    auto dw = [](int64_t ch, dims in, dims k) {
        Case c = conv2d(ch, ch, std::move(in), std::move(k));
        c.g = ch;
        c.mb = 2;
        return c;
    };
    enum Expect { windows, row_blocks, none };  // the f32 plan
    struct Expected {
        Case c;
        Expect avx2, avx512;
    };
    std::vector<Expected> cases;
    Case c = dw(1024, {7, 7}, {3, 3});  // MobileNet v1 conv6/dw
    c.pb = c.pe = {1, 1};
    cases.push_back({c, windows, row_blocks});
    c.mb = 1;  // one image: threads split the channel tiles
    cases.push_back({c, windows, row_blocks});
    c = dw(512, {14, 14}, {3, 3});  // row blocks fit: in place
    c.pb = c.pe = {1, 1};
    cases.push_back({c, row_blocks, row_blocks});
    c = dw(512, {13, 11}, {3, 3});  // H and W stride 2 (MobileNet v1 conv5_6/dw, odd sizes)
    c.s = {2, 2};
    c.pb = c.pe = {1, 1};
    cases.push_back({c, windows, none});  // (AVX-512: tiles of three vectors in place)
    c = dw(512, {12, 15}, {5, 5});  // dilation, pads past the kernel's reach, OIX
    c.d = {1, 2};
    c.pb = {2, 5};
    c.pe = {3, 5};
    c.wfmt = "OIX";
    cases.push_back({c, windows, windows});
    c = dw(1024, {9, 8}, {3, 3});  // NCX (row blocks in NXC)
    c.pb = c.pe = {1, 1};
    c.nxc = false;
    cases.push_back({c, windows, windows});
    c = dw(512, {90}, {5});  // 1D, W stride 2
    c.s = {2};
    c.pb = c.pe = {2};
    cases.push_back({c, windows, windows});
    c = dw(512, {3, 5, 6}, {3, 3, 3});  // 3D
    c.pb = c.pe = {1, 1, 1};
    cases.push_back({c, windows, row_blocks});
    c = dw(1024, {6, 7}, {1, 1});  // 1x1: merged rows
    cases.push_back({c, windows, none});
    c = dw(1536, {5, 6}, {3, 3});  // ConvTranspose, 1536 channels
    c.pb = c.pe = {1, 1};
    c.transpose = true;
    cases.push_back({c, windows, row_blocks});
    c.nxc = false;  // ... in NCX
    cases.push_back({c, windows, windows});
    c = dw(1024, {14, 14}, {3, 3});  // NCX, AVX-512 16-bit: row blocks on the windows' wider pixels
    c.pb = c.pe = {1, 1};
    c.nxc = false;
    cases.push_back({c, row_blocks, windows});
    c = dw(1000, {7, 7}, {3, 3});  // 4000-byte pixels: in place
    c.pb = c.pe = {1, 1};
    cases.push_back({c, none, none});
    c = dw(256, {12, 12}, {5, 5});  // 1 KiB pixels: NCX windows only
    c.pb = c.pe = {2, 2};
    cases.push_back({c, none, none});
    c.nxc = false;
    cases.push_back({c, windows, windows});
    c = dw(512, {70}, {31});  // 1D, 31 taps at W dilation 2: 16-bit NXC windows on AVX-512 too
    c.d = {2};
    c.pb = c.pe = {30};
    cases.push_back({c, windows, windows});
    c = dw(1024, {7, 8}, {3, 3});  // lane groups of 4
    c.g = 256;
    c.pb = c.pe = {1, 1};
    cases.push_back({c, windows, windows});
    const bool avx2 = convgrad::detail::cpu_isa() >= convgrad::detail::Isa::avx2;
    const bool avx512 = convgrad::detail::cpu_isa() >= convgrad::detail::Isa::avx512_core;
    for (const auto& [base, expect, expect512] : cases) {
        for (convgrad::data_type dt : {convgrad::data_type::f32, convgrad::data_type::bf16, convgrad::data_type::f16}) {
            Case t = base;
            t.dt = dt;
            // 16-bit pixels of 1024 and 1536 channels are 2 KiB multiples, of 512 not.
            const bool wide = dt == convgrad::data_type::f32 ? base.ic % 512 == 0 : base.ic % 1024 == 0;
            for (const auto& [isa, f32_plan] : {std::pair{std::string("avx2"), expect}, {"avx512_core", expect512}}) {
                if (!(isa == "avx2" ? avx2 : avx512)) continue;
                const std::string d = t.make(isa).describe();
                INFO(label(t, isa) << "\n" << d);
                const bool win = d.find(" window-pixels+64") != std::string::npos;
                if (dt == convgrad::data_type::f32) {
                    CHECK(win == (f32_plan == windows));
                    CHECK((d.find(" row-blocks=") != std::string::npos) == (f32_plan == row_blocks));
                } else if (!base.nxc) {  // 16-bit NCX: from 512-byte pixels (AVX2 2 KiB: row blocks if they fit)
                    if (isa != "avx2" || !wide) CHECK(win == (base.ic % 256 == 0));
                    if (isa != "avx2" && base.ic == 1024 && base.in[0] == 14)
                        CHECK(d.find(" row-blocks=2") != std::string::npos);
                } else if (isa == "avx2") {
                    if (!wide) CHECK_FALSE(win);
                } else {  // 16-bit NXC on AVX-512: in place but for dilated rows crowding an L1 set
                    // (the taps' lines of a channel vector per set of a 64-set, 8-way L1)
                    const int64_t w = base.nsp() - 1, dil = base.at(base.d, w, 1);
                    std::array<int, 64> per_set{};
                    int most = 0;
                    for (int64_t k = 0; k < base.k[w]; ++k)
                        most = std::max(most, ++per_set[static_cast<size_t>(k * dil * base.ic * 2 / 64 % 64)]);
                    CHECK(win == (dil > 1 && most > 8));
                }
                if (win) CHECK(d.find(base.nxc ? " windows" : " ncx->nxc(windows)") != std::string::npos);
            }
            run_on_nans(t);
            check_exact_any_type(t);
            if (dt != convgrad::data_type::f32) wtest::check_thread_counts(wtest::split_size(t), false);
        }
        check_reals(base);
        wtest::check_thread_counts(wtest::split_size(base), false);
    }
}

namespace {
// A depthwise 2D/1D/3D case of `ch` channels with pads `pad` on both sides.
Case padded_dw(int64_t ch, dims in, dims k, dims pad) {
    Case c = conv2d(ch, ch, std::move(in), std::move(k));
    c.g = ch;
    c.pb = c.pe = std::move(pad);
    return c;
}
}  // namespace

TEST_CASE("weights: depthwise channel tiles of a call run in one kernel call", "[jit][weights]") {
    // A tile's consecutive channel tiles share its row list: one call runs
    // them, stepping src, diff_dst and diff_weights a tile's channels on
    // (WeightsPlan::dw_channel_runs); the last channel tile runs on its own
    // kernel. Whole rows, pixel windows, row blocks (threads split the
    // tiles: runs end where a thread's tiles do), streamed passes, lane
    // groups, NCX windows, channel tails, one image; every type and ISA,
    // 1-4 threads bitwise alike. A single channel tile has no run.
    std::vector<Case> cases;
    cases.push_back(padded_dw(88, {9, 9}, {3, 3}, {1, 1}));     // whole rows, a tail tile
    cases.push_back(padded_dw(160, {3, 70}, {3, 3}, {1, 1}));   // rows past 64 pixels: windows
    cases.push_back(padded_dw(512, {14, 14}, {3, 3}, {1, 1}));  // row blocks; threads split the tiles
    cases.push_back(padded_dw(963, {7, 7}, {3, 3}, {1, 1}));    // streamed passes
    Case c = padded_dw(80, {11, 10}, {5, 5}, {2, 2});           // NCX windows, H stride 2
    c.nxc = false;
    c.wfmt = "OIX";
    c.s = {2, 1};
    cases.push_back(c);
    c = conv2d(96, 96, {8, 8}, {3, 3});  // lane groups of 4
    c.g = 24;
    c.pb = c.pe = {1, 1};
    cases.push_back(c);
    c = padded_dw(256, {12, 12}, {3, 3}, {1, 1});  // one image
    c.mb = 1;
    cases.push_back(c);
    const bool avx512 = convgrad::detail::cpu_isa() >= convgrad::detail::Isa::avx512_core;
    for (const Case& base : cases) {
        for (const std::string& isa : jit_isas(false)) {
            if (isa != "avx2" && !avx512) continue;
            const std::string d = base.make(isa).describe();
            INFO(label(base, isa) << "\n" << d);
            CHECK(d.find(" depthwise ") != std::string::npos);
            CHECK(d.find(" (one call):") != std::string::npos);
        }
        check_every_type(base, true);
    }
    const Case one = padded_dw(16, {7, 7}, {3, 3}, {1, 1});  // one channel tile (of 16 lanes)
    if (avx512) CHECK(one.make("avx512_core").describe().find(" (one call)") == std::string::npos);
    check_exact(one);
}

TEST_CASE("weights: depthwise streamed passes prefetch their own rows ahead", "[jit][weights]") {
    // Whole rows at high channel counts on small planes (WeightsPlan::
    // dw_stream): a chunk per slice, each tile's call over all of its rows,
    // prefetching the rows it reads two output rows on (past the slice's
    // and the tensors' ends too: prefetches never fault). Channel tails,
    // 5x5 and 7x3 kernels, asymmetric pads, H dilation, H stride 2, 1D,
    // rows of 32 pixels and more (their interior columns a loop), W stride
    // 2; all three types on every ISA, 1-4 threads bitwise alike.
    std::vector<std::pair<Case, bool>> cases;  // streamed in f32 on avx512_core
    cases.push_back({padded_dw(963, {7, 7}, {3, 3}, {1, 1}), true});
    cases.push_back({padded_dw(970, {7, 7}, {5, 5}, {2, 2}), true});
    Case c = padded_dw(960, {8, 7}, {3, 3}, {1, 1});  // one-sided H pad: 7 output rows
    c.pe = {0, 1};
    cases.push_back({c, true});
    c = padded_dw(960, {9, 7}, {3, 3}, {2, 1});  // H dilation 2
    c.d = {2, 1};
    cases.push_back({c, true});
    c = padded_dw(960, {9, 7}, {7, 3}, {2, 1});  // 7 kernel rows, 3 taps
    cases.push_back({c, true});
    c = padded_dw(960, {7}, {3}, {1});  // 1D: rows are images (one thread: a slice; see kSerialMaxBytes)
    c.mb = 6;
    cases.push_back({c, true});
    c = padded_dw(1000, {33, 33}, {3, 3}, {1, 1});  // 33-pixel rows
    c.mb = 1;
    cases.push_back({c, true});
    c = padded_dw(960, {7, 13}, {3, 3}, {1, 1});  // W stride 2 (whole rows where they stream)
    c.s = {1, 2};
    cases.push_back({c, true});
    c = padded_dw(672, {14, 13}, {5, 5}, {2, 2});  // H and W stride 2: two new src rows an output row
    c.s = {2, 2};
    cases.push_back({c, true});
    c = padded_dw(384, {14, 14}, {3, 3}, {1, 1});  // 84-pixel calls: chunks
    c.mb = 4;
    cases.push_back({c, false});
    const bool avx512 = convgrad::detail::cpu_isa() >= convgrad::detail::Isa::avx512_core;
    for (const auto& [base, streamed] : cases) {
        if (avx512) {
            const std::string d = base.make("avx512_core").describe();
            INFO(label(base, "avx512_core") << "\n" << d);
            CHECK((d.find(" streamed (prefetch 2 rows ahead)") != std::string::npos) == streamed);
        }
        for (convgrad::data_type dt : {convgrad::data_type::f32, convgrad::data_type::bf16, convgrad::data_type::f16}) {
            Case t = base;
            t.dt = dt;
            check_exact_any_type(t);
            if (dt != convgrad::data_type::f32) wtest::check_thread_counts(wtest::split_size(t), false);
        }
        check_exact(base);
        check_reals(base);
        wtest::check_thread_counts(wtest::split_size(base), false);
    }
}

// Groups of 3 input and 10 output channels, and lane groups of 4 (whose
// diff_weights rows (kw, ic) must be consecutive to be written in place).
TEST_CASE("weights: data and weight formats", "[jit][weights]") {
    const std::pair<int64_t, int64_t> groupings[] = {{2, 20}, {10, 40}};  // (groups, oc); ic = 6 / 40
    for (bool nxc : {true, false}) {
        for (const auto& [g, oc] : groupings) {
            for (const char* f : {"XIO", "OIX"}) {
                Case c = conv2d(g == 2 ? 6 : 40, oc, {7, 6}, {3, 2});
                c.g = g;
                c.nxc = nxc;
                c.wfmt = f;
                c.pb = {1, 0};
                check_exact(c);
            }
            for (const char* f : {"IOX", "XOI", "OIX", "XIO"}) {
                Case c = conv2d(g == 2 ? 6 : 40, oc, {9, 8}, {3, 3});
                c.g = g;
                c.s = {2, 2};
                c.pb = c.pe = {1, 1};
                c.nxc = nxc;
                c.wfmt = f;
                c.transpose = true;
                check_exact(c);
            }
        }
        Case dw = conv2d(18, 18, {7, 7}, {3, 3});
        dw.g = 18;
        dw.nxc = nxc;
        dw.wfmt = "OIX";
        check_exact(dw);
    }
    // ConvTranspose's layouts over several 16 x 16 permute tiles with
    // channel tails, one tap to nine: XIO transposes each tap's plane, OIX
    // (input channels outermost to the convolution) and IOX transpose runs
    // of taps, XOI is written directly (and OIX of one tap, which is
    // the convolution's XIO).
    for (const char* f : {"XIO", "OIX", "IOX", "XOI"})
        for (int64_t k : {1, 2, 3}) {
            Case c = conv2d(37, 70, {8, 8}, {k, k});
            c.transpose = true;
            c.mb = 2;
            if (k == 2) c.s = {2, 2};
            c.wfmt = f;
            for (const std::string& isa : jit_isas(true)) {
                const std::string d = c.make(isa).describe();
                INFO(label(c, isa) << "\n" << d);
                const bool direct = std::string(f) == "XOI" || (k == 1 && std::string(f) == "OIX");
                CHECK((d.find(" direct") != std::string::npos) == direct);
            }
            check_exact(c);
        }
}

// 1x1 weight gradients of unit strides, no padding and one group whose
// output channels fill the vector lanes at least an eighth worse than their
// input channels run with src and diff_dst in each other's roles
// (swap_lanes_1x1): 48 -> 24 on AVX-512 only (24 fill three 8-lane
// vectors), 32 -> 2 and a ConvTranspose whose convolution view is 64 -> 3
// on both ISAs, a 3D 1x1x1 case; every weights format the op takes, both
// data formats, all three types, 1 and 3 threads: equal to the reference.
// Layers that fill the lanes alike, strided, padded or grouped 1x1
// layers, and kernels wider than one tap keep their roles.
TEST_CASE("weights: 1x1 layers swap src and diff_dst where input channels fill the lanes better", "[jit][weights]") {
    const std::string note = "src and diff_dst in each other's roles, input channels in the lanes";
    struct Shape {
        int64_t ic, oc;
        dims in, s, pb;
        int64_t g;
        bool transpose, avx512, avx2;  // swapped on each ISA
    };
    const Shape shapes[] = {
            {48, 24, {5, 6}, {}, {}, 1, false, true, false},   {32, 2, {7, 3}, {}, {}, 1, false, true, true},
            {64, 3, {9, 5}, {}, {}, 1, true, true, true},      {40, 4, {3, 2, 3}, {}, {}, 1, false, true, true},
            {64, 64, {5, 6}, {}, {}, 1, false, false, false},  {48, 24, {6, 6}, {2, 2}, {}, 1, false, false, false},
            {48, 24, {5, 6}, {}, {1, 0}, 1, false, false, false}, {48, 24, {5, 6}, {}, {}, 2, false, false, false},
    };
    for (const Shape& sh : shapes)
        for (const std::string wfmt : {"XIO", "OIX", "IOX", "XOI"})
            for (bool nxc : {true, false}) {
                if (!sh.transpose && (wfmt == "IOX" || wfmt == "XOI")) continue;  // ConvTranspose's formats
                Case c = conv2d(sh.ic, sh.oc, sh.in, dims(sh.in.size(), 1));
                c.mb = 3;
                c.s = sh.s;
                c.pb = sh.pb;
                c.g = sh.g;
                c.transpose = sh.transpose;
                c.wfmt = wfmt;
                c.nxc = nxc;
                for (const std::string& isa : jit_isas(true)) {
                    const std::string d = c.make(isa).describe();
                    INFO(label(c, isa) << "\n" << d);
                    CHECK((d.find(note) != std::string::npos) == (isa == "avx2" ? sh.avx2 : sh.avx512));
                }
                check_exact(c);
                for (convgrad::data_type dt : {convgrad::data_type::bf16, convgrad::data_type::f16}) {
                    Case w = c;
                    w.dt = dt;
                    check_exact_any_type(w);
                }
                tbb::task_arena arena(3);
                arena.execute([&] { check_exact(c, 4); });
            }
    Case wide = conv2d(48, 24, {5, 6}, {1, 2});  // two taps: roles kept
    for (const std::string& isa : jit_isas(true)) CHECK(wide.make(isa).describe().find(note) == std::string::npos);
}

TEST_CASE("weights: random reals within tolerance", "[jit][weights]") {
    Case c = conv2d(37, 45, {14, 14}, {3, 3});
    c.mb = 3;
    c.pb = c.pe = {1, 1};
    check_reals(c);
    Case dw = conv2d(35, 35, {20, 20}, {3, 3});
    dw.g = 35;
    dw.pb = dw.pe = {1, 1};
    check_reals(dw);
}

TEST_CASE("weights: bitwise identical for 1, 2, 3 and 4 threads", "[jit][weights]") {
    Case big = conv2d(40, 70, {12, 12}, {3, 3});  // many tiles: split over tiles
    big.mb = 3;
    big.pb = big.pe = {1, 1};
    Case few = conv2d(3, 8, {40, 40}, {1, 1});  // few tiles: split over slices
    few.mb = 8;  // above the serial threshold (0.5 Mflop)
    Case dw = conv2d(32, 32, {30, 30}, {3, 3});
    dw.g = 32;
    dw.mb = 4;
    dw.pb = dw.pe = {1, 1};
    Case lanes = conv2d(48, 48, {14, 14}, {3, 5});  // lane groups of 8 (5 taps: not group pairs)
    lanes.g = 6;
    lanes.mb = 4;
    lanes.pb = lanes.pe = {1, 2};
    Case pairs = conv2d(48, 48, {14, 14}, {3, 3});  // group pairs in kw lanes
    pairs.g = 6;
    pairs.mb = 4;
    pairs.pb = pairs.pe = {1, 1};
    for (const Case& c : {big, few, dw, lanes, pairs}) {
        const wtest::ThreadRuns runs = wtest::check_thread_counts(c, false);
        // Thread counts also give the reference answer (not just agree).
        const Buffer want = testutil::run(c.make("ref"), runs.a, runs.b);
        for (const Buffer& out : runs.outputs) CHECK(testutil::max_abs_diff(out, want) < 1e-3);
    }
}

TEST_CASE("weights: concurrent execute from 8 threads on one op", "[jit][weights]") {
    Case c = conv2d(20, 36, {9, 9}, {3, 3});
    c.mb = 2;
    c.pb = c.pe = {1, 1};
    const convgrad::op jit = c.make(jit_isas(false).front());
    const Buffer a = testutil::small_ints(convgrad::data_type::f32, jit.input0_elems(), 8);
    const Buffer b = testutil::small_ints(convgrad::data_type::f32, jit.input1_elems(), 9);
    const Buffer want = testutil::run(c.make("ref"), a, b);
    std::vector<Buffer> outs(8);
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t)
        threads.emplace_back([&, t] {
            for (int rep = 0; rep < 3; ++rep) outs[t] = testutil::run(jit, a, b);
        });
    for (auto& t : threads) t.join();
    for (const Buffer& o : outs) CHECK(testutil::bitwise_equal(o, want));
}

TEST_CASE("weights: describe and verbose cache lines", "[jit][weights]") {
    Case c = conv2d(13, 29, {6, 6}, {3, 3});
    for (const std::string& isa : jit_isas(false))
        CHECK(c.make(isa).describe().rfind("jit:" + isa + " gemm", 0) == 0);
    Case dw = conv2d(16, 16, {6, 6}, {3, 3});
    dw.g = 16;
    CHECK(dw.make("avx2").describe().rfind("jit:avx2 depthwise", 0) == 0);
    CHECK(c.make("avx512_core_bf16").describe().find("jit:avx512_core_bf16") == std::string::npos);

    // Capture stderr while creating the same op twice: a miss, then a hit.
    char path[] = "/tmp/convgrad_verbose_XXXXXX";
    const int fd = mkstemp(path);
    REQUIRE(fd >= 0);
    std::fflush(stderr);
    const int saved = dup(2);
    dup2(fd, 2);
    setenv("CONVGRAD_VERBOSE", "1", 1);
    Case unique = conv2d(3, 3 * 16 + 5, {4, 4}, {2, 2});  // desc used by no other test: m3, tail 5
    unique.make("avx2");
    const convgrad::op second = unique.make("avx2");
    (void)testutil::run(second, testutil::Buffer(second.dtype(), second.input0_elems()),
                        testutil::Buffer(second.dtype(), second.input1_elems()));
    unsetenv("CONVGRAD_VERBOSE");
    std::fflush(stderr);
    dup2(saved, 2);
    close(saved);
    close(fd);
    std::ifstream f(path);
    const std::string log((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    std::remove(path);
    INFO(log);
    // The first build of a kernel is a miss; the second op finds it cached.
    const std::string tag = "convgrad,jit_cache,";
    REQUIRE(log.find(tag) != std::string::npos);
    const size_t miss = log.find(",miss", log.find(tag));  // the first kernel's
    REQUIRE(miss != std::string::npos);
    const size_t name_at = log.rfind(tag, miss) + tag.size();
    const std::string name = log.substr(name_at, miss - name_at);
    CHECK(name.rfind("wgemm_avx2_m", 0) == 0);
    CHECK(log.find(tag + name + ",hit", miss) != std::string::npos);
    // Its plan too: planned once, found by the second op.
    const size_t plan_miss = log.find("convgrad,plan_cache,weights,miss");
    REQUIRE(plan_miss != std::string::npos);
    CHECK(log.find("convgrad,plan_cache,weights,hit", plan_miss) != std::string::npos);
    // An execute: its plan, time and the scratch kept.
    const size_t exec = log.find("convgrad,execute,jit:avx2 gemm");
    REQUIRE(exec != std::string::npos);
    CHECK(log.find(" MiB scratch kept\n", exec) != std::string::npos);
}

TEST_CASE("weights: NCX depthwise long rows are cut into segments", "[jit][weights]") {
    // Depthwise rows in NCX windows: a chunk transposes only its segment's
    // pixels (and the src its taps read) into the window, each in its
    // place. A padded k3 layer, a causal dilated one (windows starting
    // inside the left pad), a 2D one (three src rows a chunk row); f32 and
    // 16-bit on every ISA, exact; a short row stays whole. All strided
    // along W: unit W strides run along the rows (test_jit_dw_rows.cpp).
    auto dw = [](int64_t c, dims in, dims k) {
        Case x = conv2d(c, c, in, k);
        x.g = c;
        x.nxc = false;
        x.mb = 2;
        return x;
    };
    Case padded = dw(64, {5000}, {3});
    padded.s = {2};
    padded.pb = padded.pe = {1};
    Case causal = dw(48, {9001}, {4});
    causal.s = {2};
    causal.d = {2};
    causal.pb = {6};
    causal.pe = {0};
    Case wide = dw(128, {3, 3000}, {3, 3});
    wide.s = {1, 2};
    wide.pb = wide.pe = {1, 1};
    wide.mb = 1;
    Case short_row = padded;
    short_row.in = {900};
    for (const Case& c : {padded, causal, wide, short_row}) {
        const int64_t rows = c.mb * (c.in.size() == 2 ? 3 : 1);
        for (const std::string& isa : jit_isas(false)) {
            const std::string d = c.make(isa).describe();
            INFO(label(c, isa) << "\n" << d);
            REQUIRE(d.find("ncx->nxc(windows)") != std::string::npos);
            if (c.in.back() < 1000)
                CHECK(described_rows(d) == rows);
            else
                CHECK(described_rows(d) > rows);
        }
        check_exact(c);
        for (convgrad::data_type dt : {convgrad::data_type::bf16, convgrad::data_type::f16}) {
            Case h = c;
            h.dt = dt;
            check_exact_any_type(h);
        }
    }
}
