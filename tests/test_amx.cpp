// bf16 on AMX tiles: the data gradient (ops/exec_data_amx.cpp) and the
// weight gradient (ops/exec_weights_amx.cpp). Which problems take them,
// equality with the reference over strides (the data gradient's phases
// with and without taps), dilation, padding wider than the kernel, 1D to
// 3D, channel tails both ways and every weights format, no read or write
// past the user's buffers, and results independent of the thread count
// and of concurrent executes. Runs only where the CPU has AMX and the OS
// grants it (elsewhere each case says so and passes).
#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "dot_test_util.hpp"
#include "jit/isa.hpp"
#include "ops/scratch.hpp"
#include "test_util.hpp"
#include "weights_case.hpp"

namespace {

using convgrad::data_type;
using convgrad::dims;

constexpr const char* kAmxData = "jit:amx data";
constexpr const char* kAmxWeights = "jit:amx weights";

bool has_amx() {
    if (convgrad::detail::cpu_isa() == convgrad::detail::Isa::amx) return true;
    WARN("no AMX on this CPU (or no OS permission): the AMX tests are skipped");
    return false;
}

wtest::Case conv(int64_t mb, int64_t ic, int64_t oc, dims in, dims k, dims s = {}, dims d = {}, dims pb = {},
                 dims pe = {}) {
    wtest::Case c;
    c.mb = mb;
    c.ic = ic;
    c.oc = oc;
    c.in = std::move(in);
    c.k = std::move(k);
    c.s = std::move(s);
    c.d = std::move(d);
    c.pb = std::move(pb);
    c.pe = std::move(pe);
    c.dt = data_type::bf16;
    return c;
}

// Small integers (exact sums, one rounding): make(isa) with no ISA cap
// (make("amx")) takes the AMX path (its describe() starts with `note`)
// exactly when `amx`, and its output equals the reference's (make("ref"))
// bit for bit, the inputs and the output each ending (and, in a second
// run, starting) at an inaccessible page.
template <typename Make>
void check_exact(Make make, const char* note, bool amx, uint32_t seed) {
    const convgrad::op ref = make("ref");
    const testutil::Buffer a = testutil::small_ints(ref.dtype(), ref.input0_elems(), seed);
    const testutil::Buffer b = testutil::small_ints(ref.dtype(), ref.input1_elems(), seed + 1);
    const testutil::Buffer expect = testutil::run(ref, a, b);
    const convgrad::op o = make("amx");
    INFO(o.describe());
    CHECK((o.describe().rfind(note, 0) == 0) == amx);
    CHECK(testutil::bitwise_equal(testutil::run(o, a, b), expect));
    for (bool front : {false, true}) {
        const dottest::Guarded ga(a, front), gb(b, front);
        CHECK(testutil::bitwise_equal(dottest::run_guarded(o, ga, gb), expect));
    }
}

void check_data(const wtest::Case& c, bool amx, uint32_t seed) {
    check_exact([&](const std::string& isa) { return dottest::data_op(c, isa); }, kAmxData, amx, seed);
}

// The weight gradient of c, and (transpose) the ConvTranspose's.
void check_weights(wtest::Case c, bool amx, uint32_t seed) {
    for (bool transpose : {false, true}) {
        c.transpose = transpose;
        if (transpose && (c.wfmt == "XIO" || c.wfmt == "OIX")) c.wfmt = c.wfmt == "XIO" ? "XOI" : "IOX";
        INFO((transpose ? "ConvTranspose " : "Convolution ") << c.wfmt);
        check_exact([&](const std::string& isa) { return c.make(isa); }, kAmxWeights, amx, seed);
    }
}

// Random reals through make("amx") (describe() starting with `note`) on
// 1, 2 and 3 threads and from 8 threads at once: all bitwise equal, and
// within the error of f32 sums of `terms` products (tdpbf16ps's own
// order) plus bf16's rounding of the reference.
template <typename Make>
void check_reals(Make make, const char* note, double terms) {
    const convgrad::op ref = make("ref");
    const testutil::Buffer a = testutil::random_reals(ref.dtype(), ref.input0_elems(), 61);
    const testutil::Buffer b = testutil::random_reals(ref.dtype(), ref.input1_elems(), 62);
    const testutil::Buffer expect = testutil::run(ref, a, b);
    const convgrad::op o = make("amx");
    INFO(o.describe());
    REQUIRE(o.describe().rfind(note, 0) == 0);
    const std::vector<testutil::Buffer> outs = dottest::outputs_1_2_3(o, a, b);
    CHECK(testutil::bitwise_equal(outs[0], outs[1]));
    CHECK(testutil::bitwise_equal(outs[0], outs[2]));
    CHECK(dottest::outside_bound(outs[0], expect, terms, 8) == 0);
    std::vector<testutil::Buffer> concurrent(8);
    std::vector<std::thread> pool;
    for (auto& out : concurrent) pool.emplace_back([&] { out = testutil::run(o, a, b); });
    for (auto& t : pool) t.join();
    for (const auto& out : concurrent) CHECK(testutil::bitwise_equal(out, outs[0]));
}

// Shapes both gradients take: channel tails, strides, dilation, pads
// (wider than the kernel, one-sided), 1D to 3D.
std::vector<wtest::Case> shared_cases() {
    return {
            conv(2, 33, 47, {7, 9}, {3, 3}, {}, {}, {1, 1}, {1, 1}),  // tails of both channel blocks
            conv(2, 32, 64, {9, 8}, {3, 3}, {2, 2}, {}, {1, 1}, {1, 1}),  // ResNet-50 v1.5's strided 3x3
            conv(1, 48, 96, {11, 10}, {2, 2}, {3, 3}, {2, 2}, {2, 0}, {0, 3}),  // kernel below the stride
            conv(2, 16, 33, {5, 6}, {3, 3}, {}, {}, {4, 4}, {4, 4}),  // pads wider than the kernel
            conv(3, 16, 33, {29}, {5}, {2}, {3}, {4}, {1}),  // 1D
            conv(2, 17, 32, {4, 5, 6}, {3, 3, 3}, {}, {}, {1, 1, 1}, {1, 1, 1}),  // 3D
            conv(1, 64, 64, {5, 6, 7}, {3, 1, 3}, {2, 1, 2}, {1, 1, 2}, {1, 0, 2}, {0, 0, 1}),
            conv(2, 20, 40, {4, 4}, {4, 4}),  // a kernel covering the input
            conv(1, 130, 70, {3, 3}, {3, 3}, {}, {}, {1, 1}, {1, 1}),  // five channel blocks, three oc blocks
            conv(2, 40, 48, {9, 7}, {3, 3}, {1, 2}, {}, {1, 1}, {1, 1}),  // strided along W only
            conv(2, 40, 48, {9, 7}, {3, 3}, {2, 1}, {2, 1}, {2, 1}, {1, 1}),  // strided along H only
    };
}

}  // namespace

// The kernels' coverage runs under CONVGRAD_AMX=all (every layer the
// tiles can run, including those the default leaves to the vector kernels
// as not faster there); the tests of which layers take them by default
// say so.
TEST_CASE("amx: data gradient over stride phases, dilation, padding, 1D to 3D, channel tails", "[jit][data][amx]") {
    if (!has_amx()) return;
    const testutil::ScopedEnv all("CONVGRAD_AMX", "all");
    uint32_t seed = 300;
    for (const wtest::Case& c : shared_cases()) {
        INFO("ic " << c.ic << " oc " << c.oc << " rank " << c.in.size());
        check_data(c, true, seed += 2);
    }
    check_data(conv(2, 40, 32, {6, 7}, {1, 1}, {2, 2}), true, 41);  // phases without taps: zeros
    // 1x1 layers with OC a multiple of 32 read diff_dst in place: 105, 96
    // and 3280 positions (a last partial block copied, or none; runs of
    // several blocks that do not divide the 102 whole ones), pixels 1 KiB
    // apart with W up to 2 MiB; staged: OC 48, and pixels 1 KiB apart
    // with a W of 2.1 MB.
    const std::vector<std::pair<wtest::Case, bool>> one_by_one{
            {conv(3, 40, 64, {5, 7}, {1, 1}), true},         {conv(2, 33, 96, {4, 3, 4}, {1, 1, 1}), true},
            {conv(2, 40, 64, {40, 41}, {1, 1}), true},       {conv(3, 40, 48, {5, 7}, {1, 1}), false},
            {conv(2, 48, 512, {5, 7}, {1, 1}), true},        {conv(1, 2080, 512, {2, 3}, {1, 1}), false},
    };
    for (const auto& [c, in_place] : one_by_one) {
        INFO("ic " << c.ic << " oc " << c.oc);
        check_data(c, true, 43);
        const std::string d = dottest::data_op(c, "amx").describe();
        INFO(d);
        CHECK((d.find("diff_dst read in place") != std::string::npos) == in_place);
    }
}

TEST_CASE("amx: weight gradient over strides, dilation, padding, 1D to 3D, channel tails", "[jit][weights][amx]") {
    if (!has_amx()) return;
    const testutil::ScopedEnv all("CONVGRAD_AMX", "all");
    uint32_t seed = 400;
    for (const wtest::Case& c : shared_cases()) {
        INFO("ic " << c.ic << " oc " << c.oc << " rank " << c.in.size());
        check_weights(c, true, seed += 2);
    }
    // Strided rows narrower than a step, packed several to a run: a last
    // pack of fewer rows, pad rows inside a pack, dilation, unit H stride
    // with W stride 2, 3D, a 1 x 5 kernel at W stride 4 (each tap its own
    // phase).
    for (const wtest::Case& c :
         {conv(2, 32, 48, {14, 14}, {3, 3}, {2, 2}, {}, {1, 1}, {1, 1}),
          conv(3, 40, 32, {17, 17}, {3, 3}, {2, 2}),
          conv(2, 32, 32, {15, 13}, {3, 3}, {2, 2}, {2, 2}, {2, 2}, {1, 2}),
          conv(2, 48, 32, {9, 16}, {3, 3}, {1, 2}, {}, {1, 1}, {1, 1}),
          conv(2, 32, 40, {6, 9, 9}, {3, 3, 3}, {2, 2, 2}, {}, {1, 1, 1}, {1, 1, 1}),
          conv(2, 32, 32, {5, 30}, {1, 5}, {1, 4}, {}, {0, 2}, {0, 2})}) {
        INFO("packed ic " << c.ic << " oc " << c.oc << " rank " << c.in.size());
        check_weights(c, true, seed += 2);
        const std::string d = c.make("amx").describe();
        INFO(d);
        CHECK(d.find("runs of packs of") != std::string::npos);
    }
    // Planes of more than one chunk (1 MiB: one image a chunk, the sums
    // carried across chunks).
    check_weights(conv(3, 32, 48, {40, 60}, {3, 3}, {}, {}, {1, 1}, {1, 1}), true, 423);
    // 1x1 kernels: the chunk's positions in one run, blocks crossing from
    // image to image (35 and 20 positions an image); strides, padding on
    // both sides (positions reading it: zeros), 3D, channel tails, and
    // images of more than one chunk.
    for (const wtest::Case& c : {conv(3, 24, 40, {9, 11}, {1, 1}, {2, 3}), conv(3, 33, 47, {5, 7}, {1, 1}),
                                 conv(2, 40, 32, {7, 6}, {1, 1}, {2, 2}, {}, {1, 2}, {2, 1}),
                                 conv(2, 17, 64, {4, 5, 6}, {1, 1, 1}, {2, 1, 2}, {}, {1, 0, 0}, {0, 1, 1}),
                                 conv(2, 64, 96, {70, 80}, {1, 1})}) {
        INFO("ic " << c.ic << " oc " << c.oc << " rank " << c.in.size());
        check_weights(c, true, seed += 2);
        const std::string d = c.make("amx").describe();
        INFO(d);
        CHECK(d.find("1x1: src staged in blocks") != std::string::npos);
    }
}

TEST_CASE("amx: weights formats, large images and the problems left to the vector kernels", "[jit][amx]") {
    if (!has_amx()) return;
    std::unique_ptr<testutil::ScopedEnv> all = std::make_unique<testutil::ScopedEnv>("CONVGRAD_AMX", "all");
    for (const char* wfmt : {"XIO", "OIX"}) {
        for (int64_t oc : {64, 65}) {  // an odd OC: the data gradient's pairs of one channel
            wtest::Case c = conv(2, 24, oc, {6, 5}, {3, 2}, {1, 2}, {}, {1, 0}, {1, 1});
            c.wfmt = wfmt;
            INFO(wfmt << " oc " << oc);
            check_data(c, true, 41);
            check_weights(c, true, 43);
        }
    }
    // Images of more than the 1 MiB chunk (one image a chunk) and planes of
    // more position blocks than a run.
    check_data(conv(3, 32, 128, {40, 70}, {3, 3}, {}, {}, {1, 1}, {1, 1}), true, 45);
    // Declined by the kernels: other types, too few channels.
    for (data_type dt : {data_type::f32, data_type::f16}) {
        wtest::Case c = conv(2, 32, 32, {5, 5}, {3, 3});
        c.dt = dt;
        check_data(c, false, 47);
        check_weights(c, false, 49);
    }
    check_data(conv(2, 15, 64, {5, 5}, {3, 3}), false, 51);
    check_data(conv(2, 64, 31, {5, 5}, {3, 3}), false, 53);
    check_weights(conv(2, 15, 64, {5, 5}, {3, 3}), false, 55);
    check_weights(conv(2, 64, 15, {5, 5}, {3, 3}), false, 57);
    all.reset();
    // By default also: depthwise (a 32nd of the products useful); weight
    // gradients of under half their products useful (16 channels both
    // ways; a strided layer's 2 x 2 output in a step of 32 positions) and 1x1 layers of
    // fewer than 32 channels either way. The same layers of more channels
    // or wider rows take the tiles.
    wtest::Case dw = conv(2, 64, 64, {5, 5}, {3, 3});
    dw.g = 64;
    check_data(dw, false, 501);
    check_weights(dw, false, 503);
    check_weights(conv(2, 16, 16, {20, 20}, {3, 3}, {}, {}, {1, 1}, {1, 1}), false, 505);
    check_weights(conv(2, 64, 64, {20, 20}, {3, 3}, {}, {}, {1, 1}, {1, 1}), true, 507);
    check_weights(conv(2, 64, 64, {14, 14}, {3, 3}, {2, 2}, {}, {1, 1}, {1, 1}), true, 509);  // rows of 7, 4 a run
    check_weights(conv(2, 64, 64, {4, 4}, {3, 3}, {2, 2}, {}, {1, 1}, {1, 1}), false, 519);   // 4 of 32 positions
    check_weights(conv(2, 64, 64, {56, 56}, {3, 3}, {2, 2}, {}, {1, 1}, {1, 1}), true, 511);
    check_weights(conv(2, 24, 144, {10, 10}, {1, 1}), false, 513);
    check_weights(conv(2, 144, 24, {10, 10}, {1, 1}), false, 515);
    check_weights(conv(2, 64, 144, {10, 10}, {1, 1}), true, 517);
    // Capped below amx, bf16 takes the vector kernels.
    const wtest::Case c = conv(2, 32, 32, {5, 5}, {3, 3});
    CHECK(dottest::data_op(c, "avx512_core_bf16").describe().rfind(kAmxData, 0) != 0);
    CHECK(c.make("avx512_core_bf16").describe().rfind(kAmxWeights, 0) != 0);
}

// NCX runs on NXC copies of a chunk of images at a time: both gradients
// and ConvTranspose's, every mode of the weight gradient (planes, rows,
// flat), the data gradient's phases and its in-place 1x1, channel tails,
// both weights layouts, several chunks with a short last one; layers of
// fewer than 96 flops an element copied are left to the vector kernels.
TEST_CASE("amx: NCX activations through NXC copies", "[jit][amx]") {
    if (!has_amx()) return;
    std::vector<wtest::Case> cases{
            conv(2, 33, 47, {7, 9}, {3, 3}, {}, {}, {1, 1}, {1, 1}),
            conv(2, 32, 64, {9, 8}, {3, 3}, {2, 2}, {}, {1, 1}, {1, 1}),
            conv(2, 17, 32, {4, 5, 6}, {3, 3, 3}, {}, {}, {1, 1, 1}, {1, 1, 1}),
            conv(3, 128, 96, {5, 7}, {1, 1}),  // in place (data), flat (weights): 110 flops an element
            conv(2, 160, 192, {7, 6}, {1, 1}, {2, 2}, {}, {1, 2}, {2, 1}),  // 133
            // several chunks (2 images each, then 1), both gradients
            conv(3, 64, 64, {56, 56}, {3, 3}, {}, {}, {1, 1}, {1, 1}),
            conv(3, 128, 96, {48, 48}, {1, 1}),
    };
    cases[1].wfmt = "OIX";
    uint32_t seed = 700;
    {
        const testutil::ScopedEnv all("CONVGRAD_AMX", "all");
        for (wtest::Case c : cases) {
            c.nxc = false;
            INFO("ic " << c.ic << " oc " << c.oc << " rank " << c.in.size() << " " << c.wfmt);
            check_data(c, true, seed += 2);
            check_weights(c, true, seed += 2);
            const std::string w = c.make("amx").describe(), d = dottest::data_op(c, "amx").describe();
            CHECK(w.find("(NCX src and diff_dst: each chunk's images transposed to NXC") != std::string::npos);
            CHECK(d.find("(NCX: by chunks of ") != std::string::npos);
            if (c.in[0] >= 48) {  // chunks shorter than the minibatch
                CHECK(w.find("for chunk of 2 of 3 images") != std::string::npos);
                CHECK(d.find("(NCX: by chunks of 2 images") != std::string::npos);
            }
        }
    }
    wtest::Case few = conv(3, 40, 64, {5, 7}, {1, 1});  // 49 flops an element
    few.nxc = false;
    check_data(few, false, 751);
    check_weights(few, false, 753);
    few.nxc = true;
    check_data(few, true, 755);
}

// NCX copies are a chunk's: the scratch an execute keeps on the calling
// thread (the AMX executors lease only there) stays well under the size of
// whole-tensor copies of the activations, both gradients.
TEST_CASE("amx: NCX scratch does not grow with the minibatch", "[jit][amx]") {
    if (!has_amx()) return;
    const testutil::ScopedEnv all("CONVGRAD_AMX", "all");
    wtest::Case c = conv(16, 64, 64, {56, 56}, {3, 3}, {}, {}, {1, 1}, {1, 1});
    c.nxc = false;
    for (const bool data : {false, true}) {
        INFO((data ? "data" : "weights"));
        const convgrad::op o = data ? dottest::data_op(c, "amx") : c.make("amx");
        REQUIRE(o.describe().rfind(data ? kAmxData : kAmxWeights, 0) == 0);
        REQUIRE(o.describe().find("(NCX") != std::string::npos);
        const testutil::Buffer in0(data_type::bf16, o.input0_elems()), in1(data_type::bf16, o.input1_elems());
        const int64_t whole = (data ? o.input0_elems() + o.output_elems() : o.input0_elems() + o.input1_elems()) * 2;
        convgrad::detail::release_scratch();
        (void)testutil::run(o, in0, in1);
        CHECK(convgrad::detail::kept_scratch_bytes() > 0);
        CHECK(convgrad::detail::kept_scratch_bytes() < static_cast<size_t>(whole / 2));
        convgrad::detail::release_scratch();
    }
}

// Grouped layers run whole, as dense layers whose weights are zero across
// groups, each block of 32 input channels over the blocks of output
// channels its groups hold: groups of 32 (one block each), 64, 16 (two to
// a block), 48 (blocks straddling two groups), unequal widths (an OC tail,
// and ConvTranspose's swapped inputs), 3x3 planes, strided rows and the
// data gradient's phases, 1x1 (in place and staged), NCX through copies,
// both weights layouts. Taken by default where half the tiles' products
// are useful (weights: counting the positions stepped over too; groups of
// 16 or fewer on half tiles, 0.4 of them and unstrided): data gradients of
// groups of 8 and depthwise are left to the vector kernels, as are weight
// gradients of small planes of groups of 48.
TEST_CASE("amx: grouped layers whole, weights zero across groups", "[jit][amx]") {
    if (!has_amx()) return;
    struct Grouped {
        wtest::Case c;
        int64_t g;
        bool weights;  // the weight gradient takes the tiles
        bool ncx = true;  // in NCX too (1x1 layers: too few flops an element copied)
    };
    const std::vector<Grouped> cases{
            {conv(2, 64, 64, {16, 16}, {3, 3}, {}, {}, {1, 1}, {1, 1}), 2, true},     // 32 a group
            {conv(2, 128, 128, {14, 12}, {3, 3}, {}, {}, {1, 1}, {1, 1}), 2, true},  // 64
            {conv(2, 64, 64, {12, 12}, {3, 3}, {}, {}, {1, 1}, {1, 1}), 4, true},    // 16: half tiles (weights)
            {conv(2, 96, 96, {12, 12}, {3, 3}, {}, {}, {1, 1}, {1, 1}), 2, false},   // 48: blocks of two groups
            {conv(2, 64, 80, {16, 16}, {3, 3}, {}, {}, {1, 1}, {1, 1}), 2, true},    // 32 and 40: an OC tail
            {conv(2, 128, 128, {21, 56}, {3, 3}, {2, 2}, {}, {1, 1}, {1, 1}), 4, true},  // rows; phases
            {conv(3, 128, 96, {9, 11}, {1, 1}), 2, true, false},  // in place (data), flat (weights)
            {conv(2, 64, 128, {9, 7}, {1, 1}, {2, 2}, {}, {1, 0}, {0, 1}), 2, true, false},  // strided 1x1: staged
    };
    uint32_t seed = 800;
    for (const Grouped& x : cases)
        for (const char* wfmt : {"XIO", "OIX"})
            for (bool nxc : {true, false}) {
                wtest::Case c = x.c;
                c.g = x.g;
                c.wfmt = wfmt;
                c.nxc = nxc;
                INFO("g " << c.g << " ic " << c.ic << " oc " << c.oc << " " << wfmt << (nxc ? " NXC" : " NCX"));
                check_data(c, nxc || x.ncx, seed += 2);
                check_weights(c, x.weights && (nxc || x.ncx), seed += 2);
                if (x.weights && (nxc || x.ncx) && c.ic / c.g > 16)
                    CHECK(c.make("amx").describe().find("(its groups') of") != std::string::npos);
            }
    wtest::Case eight = conv(2, 64, 64, {16, 16}, {3, 3}, {}, {}, {1, 1}, {1, 1});
    eight.g = 8;  // a quarter of the products useful; half on half tiles
    check_data(eight, false, 861);
    check_weights(eight, true, 863);
    eight.in = {7, 7};  // 0.38 of the half tiles' products useful
    check_weights(eight, false, 865);
    eight.in = {16, 16};
    eight.s = {2, 2};  // strided: stays on the vector kernels
    check_weights(eight, false, 867);
    eight.s = {};
    eight.g = 16;  // groups of 4: a quarter on half tiles
    check_weights(eight, false, 869);
}

// Groups of 16 or fewer (icg == ocg): the half kernels, 16 input channels
// with their groups' 16 output channels, 1-3 taps a call that share a row
// key: planes (any taps of a kd), rows (the kw of a kh), 1x1; a half past
// the channels skipped, half tiles of several groups, dilation, 3D.
TEST_CASE("amx: grouped weight gradients on half tiles", "[jit][weights][amx]") {
    if (!has_amx()) return;
    const testutil::ScopedEnv all("CONVGRAD_AMX", "all");
    struct Half {
        wtest::Case c;
        int64_t g;
    };
    const std::vector<Half> cases{
            {conv(2, 48, 48, {10, 9}, {3, 3}, {}, {}, {1, 1}, {1, 1}), 3},          // 16: a half past the channels
            {conv(2, 64, 64, {11, 12}, {5, 5}, {}, {2, 2}, {4, 4}, {4, 3}), 8},     // 8: 25 taps in sets of 3 and 1
            {conv(3, 32, 32, {7, 13}, {1, 3}, {1, 2}, {}, {0, 1}, {0, 1}), 16},     // 2: rows, the kw of a kh
            {conv(2, 40, 40, {9, 8}, {3, 1}, {2, 1}, {}, {1, 0}, {1, 0}), 5},       // 8: rows, sets of 1
            {conv(2, 64, 64, {5, 6, 4}, {2, 3, 2}, {2, 1, 1}, {}, {1, 1, 1}, {0, 1, 0}), 4},  // 3D, stride along D
            {conv(2, 64, 64, {9, 7}, {1, 1}), 4},                                  // 1x1: one tap a call
            {conv(2, 32, 32, {23}, {3}, {}, {}, {1}, {1}), 2},                      // 1D
            {conv(3, 64, 64, {40, 60}, {3, 3}, {}, {}, {1, 1}, {1, 1}), 4},         // an image a chunk: sums carried
    };
    uint32_t seed = 900;
    for (const Half& x : cases)
        for (const char* wfmt : {"XIO", "OIX"}) {
            wtest::Case c = x.c;
            c.g = x.g;
            c.wfmt = wfmt;
            INFO("g " << c.g << " ic " << c.ic << " k " << c.k.size() << " " << wfmt);
            check_weights(c, true, seed += 2);
            const std::string d = c.make("amx").describe();
            INFO(d);
            CHECK(d.find("for input half (16 channels") != std::string::npos);
        }
    // Random reals: 3 images of 12 x 14, 504 terms a sum.
    wtest::Case w = conv(3, 48, 48, {12, 14}, {3, 3}, {}, {}, {1, 1}, {1, 1});
    w.g = 6;
    check_reals([&](const std::string& isa) { return w.make(isa); }, kAmxWeights, 504);
}

TEST_CASE("amx: random reals on 1, 2 and 3 threads and concurrent executes", "[jit][amx]") {
    if (!has_amx()) return;
    const testutil::ScopedEnv all("CONVGRAD_AMX", "all");
    // 3x3 over 96 oc: 864 terms a diff_src sum.
    const wtest::Case d = conv(4, 48, 96, {13, 11}, {3, 3}, {2, 1}, {}, {1, 1}, {1, 1});
    check_reals([&](const std::string& isa) { return dottest::data_op(d, isa); }, kAmxData, 864);
    // 5 images of 12x14 positions: 840 terms a diff_weights sum.
    wtest::Case w = conv(5, 40, 72, {12, 14}, {3, 3}, {}, {}, {1, 1}, {1, 1});
    check_reals([&](const std::string& isa) { return w.make(isa); }, kAmxWeights, 840);
    w.s = {2, 2};  // rows
    check_reals([&](const std::string& isa) { return w.make(isa); }, kAmxWeights, 210);
    w.k = {1, 1};  // 1x1: the five images' positions in one run
    w.s = w.pb = w.pe = {};
    check_reals([&](const std::string& isa) { return w.make(isa); }, kAmxWeights, 840);
}

TEST_CASE("CONVGRAD_AMX: auto and all, unknown values are rejected", "[jit][amx][validation]") {
    const wtest::Case c = conv(2, 16, 16, {20, 20}, {3, 3}, {}, {}, {1, 1}, {1, 1});
    {
        // Every op checks it, f32 too, on any CPU.
        const testutil::ScopedEnv bad("CONVGRAD_AMX", "always");
        CHECK_THROWS_WITH(c.make("amx"), Catch::Contains("CONVGRAD_AMX") && Catch::Contains("\"always\""));
        wtest::Case f = c;
        f.dt = data_type::f32;
        CHECK_THROWS_WITH(f.make("amx"), Catch::Contains("CONVGRAD_AMX"));
    }
    if (!has_amx()) return;
    // 16 channels both ways: a quarter of the weight gradient's products useful.
    for (const char* v : {"auto", "", "all"}) {
        const testutil::ScopedEnv env("CONVGRAD_AMX", v);
        INFO("CONVGRAD_AMX=" << v);
        check_weights(c, std::string(v) == "all", 901);
    }
}
