// Kernels that cover the whole input (every output axis of size 1): the
// JIT runs them as 1x1 convolutions of IC·K channels (fold_full_kernel),
// on the user's weights when the layouts agree, else through a permuted
// copy, and must equal the reference either way.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "test_util.hpp"
#include "weights_case.hpp"

namespace {

using convgrad::data_type;
using convgrad::dims;
using convgrad::op_kind;

bool runs(const std::string& isa) {
    const std::vector<std::string> order{"avx2", "avx512_core", "avx512_core_bf16"};
    const auto level = [&](const std::string& s) { return std::find(order.begin(), order.end(), s) - order.begin(); };
    return level(isa) <= level(convgrad::max_isa());
}

constexpr const char* kFoldNote = "kernel covers the input";
// How a folded layer meets weights that order (spatial, channel) unlike
// src: not at all (the same order), by transposing src / diff_src per
// image, or by a permuted copy of the weights.
enum class Meet { own, images, weights };
constexpr const char* kPermuteNote = ", weights permuted";
constexpr const char* kImagesNote = " transposed per image";
constexpr const char* kSwapNote = "src and diff_dst in each other's roles";

// A full-kernel case: the kernel equals the input on every axis.
wtest::Case full(int64_t ic, int64_t oc, const dims& in) {
    wtest::Case c = wtest::conv2d(ic, oc, in, in);
    c.mb = 3;  // odd: a bf16 image pair without its partner
    return c;
}

// Weight gradient (both weight ops) and data gradient of `c`: JIT equal
// to the reference bit for bit on small integers on every ISA, folded
// (describe() carries the note) exactly when `fold`, meeting the weights
// as `meet` says.
void check(const wtest::Case& c, bool fold, Meet meet = Meet::own) {
    for (const data_type dt : {data_type::f32, data_type::bf16, data_type::f16}) {
        wtest::Case w = c;
        w.dt = dt;
        std::vector<convgrad::op> refs, ops;
        auto data_op = [&](const std::string& isa) {
            convgrad::attributes a = w.attrs();
            a.weights_shape.clear();
            a.output_padding.clear();
            a.dst_shape = w.data(w.ic, true);
            return testutil::make_op(isa, op_kind::conv_bwd_data, dt, a, w.data(w.oc, false), w.weights());
        };
        for (const std::string isa : {"avx512_core_bf16", "avx512_core", "avx2"}) {
            if (!runs(isa)) continue;
            for (int which = 0; which < (w.transpose ? 1 : 2); ++which) {
                const auto ref = which ? data_op("ref") : w.make("ref");
                const auto jit = which ? data_op(isa) : w.make(isa);
                INFO(isa << " " << (which ? "data" : "weights") << " " << jit.describe());
                REQUIRE(jit.describe().rfind("jit:", 0) == 0);
                CHECK((jit.describe().find(kFoldNote) != std::string::npos) == fold);
                CHECK((jit.describe().find(kPermuteNote) != std::string::npos) == (meet == Meet::weights));
                CHECK((jit.describe().find(kImagesNote) != std::string::npos) == (meet == Meet::images));
                // Weight gradients into weights with c' innermost (the
                // view's OIX), or of one output channel in the weights'
                // own order, swap the roles of src and diff_dst.
                const bool c_inner = w.wfmt == (w.transpose ? "IOX" : "OIX");
                CHECK((jit.describe().find(kSwapNote) != std::string::npos) ==
                      (!which && ((c_inner && meet != Meet::weights) || (w.oc == 1 && meet == Meet::own))));
                const auto in0 = testutil::small_ints(dt, ref.input0_elems(), 5);
                const auto in1 = testutil::small_ints(dt, ref.input1_elems(), 6);
                CHECK(testutil::bitwise_equal(testutil::run(jit, in0, in1), testutil::run(ref, in0, in1)));
            }
        }
    }
}

}  // namespace

TEST_CASE("full kernels: run as 1x1 in every layout pair, images transposed or weights permuted where they disagree", "[jit][fold]") {
    // 1D, 2D, 3D; channel tails on every vector length; a stride and an end
    // pad that leave the output at one pixel.
    std::vector<wtest::Case> cases{full(5, 17, {4, 4}), full(3, 33, {16}), full(2, 16, {2, 3, 4}),
                                   full(24, 40, {7, 7})};
    wtest::Case strided = full(8, 9, {5, 3});
    strided.s = {2, 3};
    strided.pe = {1, 2};
    cases.push_back(strided);
    for (const wtest::Case& base : cases) {
        INFO("ic " << base.ic << " oc " << base.oc << " rank " << base.nsp());
        // (data format, weights format, how): the user's weights serve as
        // they are when the kernel axes order with the input's, outside the
        // channel in NXC, inside it in NCX; where they order the other way,
        // the images are transposed (fewer images than output channels).
        struct Layout {
            bool nxc;
            const char* wfmt;
            Meet meet;
        };
        for (const Layout l : {Layout{true, "XIO", Meet::own}, Layout{false, "OIX", Meet::own},
                               Layout{true, "OIX", Meet::images}, Layout{false, "XIO", Meet::images}}) {
            wtest::Case c = base;
            c.nxc = l.nxc;
            c.wfmt = l.wfmt;
            INFO((l.nxc ? "NXC " : "NCX ") << l.wfmt);
            check(c, true, l.meet);
        }
        // ConvTranspose from one pixel to the kernel: its XOI is the
        // convolution view's XIO, its IOX the view's OIX; its XIO (the
        // spec's default) and OIX put the output channel between the kernel
        // axes and the input channel, so the weights are permuted.
        for (const Layout l : {Layout{true, "XOI", Meet::own}, Layout{false, "IOX", Meet::own},
                               Layout{true, "XIO", Meet::weights}, Layout{false, "OIX", Meet::weights},
                               Layout{true, "IOX", Meet::images}, Layout{false, "XOI", Meet::images}}) {
            wtest::Case c = base;
            c.transpose = true;
            c.nxc = l.nxc;
            c.wfmt = l.wfmt;
            INFO("ConvTranspose " << (l.nxc ? "NXC " : "NCX ") << l.wfmt);
            check(c, true, l.meet);
        }
    }
    // One output channel (a GAN discriminator's last layer; 33^3 kernels):
    // where the weights keep the input's order, the roles swapped (the c'
    // channels in the lanes); elsewhere the weights permuted (as many
    // images as output channels).
    for (const wtest::Case& base : {full(24, 1, {4, 4}), full(3, 1, {5, 6, 7})}) {
        for (const bool transpose : {false, true}) {
            for (const bool nxc : {true, false}) {
                for (const bool own : {true, false}) {
                    wtest::Case c = base;
                    c.transpose = transpose;
                    c.nxc = nxc;
                    c.wfmt = transpose ? (nxc == own ? "XOI" : "IOX") : (nxc == own ? "XIO" : "OIX");
                    INFO((transpose ? "ConvTranspose " : "") << (nxc ? "NXC " : "NCX ") << c.wfmt << " ic " << c.ic
                                                             << " rank " << c.nsp());
                    check(c, true, own ? Meet::own : Meet::weights);
                }
            }
        }
    }
    // As many images as output channels or more: the weights are the
    // smaller tensor to move.
    for (const bool nxc : {true, false}) {
        wtest::Case c = full(6, 3, {4, 4});
        c.nxc = nxc;
        c.wfmt = nxc ? "OIX" : "XIO";
        INFO((nxc ? "NXC OIX" : "NCX XIO") << ", mb 3, oc 3");
        check(c, true, Meet::weights);
        c.transpose = true;
        c.wfmt = nxc ? "IOX" : "XOI";
        check(c, true, Meet::weights);
    }
}

TEST_CASE("full kernels: padding, dilation, groups or a wider output keep the convolution", "[jit][fold]") {
    wtest::Case pad = full(4, 16, {3, 3});  // a begin pad: tap 0 reads padding
    pad.k = {4, 4};
    pad.pb = {1, 1};
    check(pad, false);
    wtest::Case dil = full(4, 16, {5, 5});  // taps two pixels apart
    dil.k = {3, 3};
    dil.d = {2, 2};
    check(dil, false);
    wtest::Case grouped = full(8, 16, {3, 3});
    grouped.g = 2;
    check(grouped, false);
    wtest::Case wider = full(4, 16, {3, 4});  // two output pixels along W
    wider.k = {3, 3};
    check(wider, false);
}
