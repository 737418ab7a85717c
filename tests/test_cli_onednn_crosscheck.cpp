// convgrad against oneDNN 2.6 (when CMake found it): the same plain tensors
// through both, in oneDNN's preferred and plain layouts, on small shapes
// covering groups, dilation, strides, negative end padding and ConvTranspose,
// in every data and weights format convgrad takes.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <random>
#include <sstream>
#include <stdexcept>

#include "check.hpp"
#include "op_case.hpp"

#ifdef CONVGRAD_HAVE_DNNL
#include "onednn_conv.hpp"

using namespace convgrad::cli;
using convgrad::data_type;
using convgrad::op_kind;

namespace {

// One descriptor through convgrad and through oneDNN (which must accept it),
// the tensors in the formats `lo` names.
void cross_check(const conv_desc& d, op_kind kind, onednn::layouts mode, const layout_options& lo = {}) {
    const op_case c = make_case(d, kind, data_type::f32, lo);
    REQUIRE(c.skip_reason.empty());
    const convgrad::op ours = c.make_op();
    tensor_buffer in0(data_type::f32, ours.input0_elems()), in1(data_type::f32, ours.input1_elems());
    tensor_buffer want(data_type::f32, ours.output_elems()), got(data_type::f32, ours.output_elems());
    tensor_buffer abs_sum(data_type::f32, ours.output_elems());
    fill_reals(in0, 5);
    fill_reals(in1, 6);
    ours.execute(in0.data(), in1.data(), want.data());
    const tensor_buffer abs0 = absolute(in0), abs1 = absolute(in1);
    ours.execute(abs0.data(), abs1.data(), abs_sum.data());

    onednn::backward_op theirs(d, kind, data_type::f32, mode, c.attrs.data_format, c.attrs.weights_format);
    theirs.bind(in0.data(), in1.data(), got.data());
    theirs.execute();
    theirs.finish();
    const comparison cmp = compare_reals(got, want, abs_sum, reduction_length(c));
    INFO("oneDNN " << theirs.impl() << ": " << cmp.describe());
    CHECK(cmp.ok);
}

// A random small descriptor in benchdnn syntax: 1D / 2D / 3D, groups
// (depthwise a quarter of the time), 1-40 channels a group, kernels 1-4 (3D: 1-3), strides 1-3,
// dilation a third of the time, begin pads up to the kernel's extent less
// one, and now and then an output one pixel shorter than the pads allow
// (a negative end pad). Deconvolutions read the same fields the other way
// round (ic / i the small side).
std::string random_descriptor(std::mt19937& rng, desc_kind kind) {
    auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    const int nsp = uni(1, 3);
    // Channels: mostly a vector's tail, a quarter of the time past one or two vectors.
    auto channels = [&](int few) { return uni(0, 3) == 0 ? uni(8, 40) : uni(1, few); };
    const bool dw = uni(0, 3) == 0;
    const int g = dw ? channels(24) : uni(1, 3);
    const int icg = dw ? 1 : channels(7), ocg = dw ? 1 : channels(7);
    std::ostringstream os;
    os << 'g' << g << "mb" << uni(1, 3) << "ic" << g * icg << "oc" << g * ocg;
    const char* axes[3] = {"d", "h", "w"};
    for (int a = 3 - nsp; a < 3; ++a) {
        const int k = uni(1, nsp == 3 ? 3 : 4), s = uni(1, 3), dil = uni(0, 2) == 0 ? uni(1, 2) : 0;
        const int ext = (k - 1) * (dil + 1) + 1, p = uni(0, ext - 1);
        const int i = kind == desc_kind::conv ? uni(std::max(1, ext - 2 * p), ext + 9) : uni(1, 7);
        os << 'i' << axes[a] << i << 'k' << axes[a] << k << 's' << axes[a] << s << 'p' << axes[a] << p;
        if (dil) os << 'd' << axes[a] << dil;
        if (kind == desc_kind::conv && uni(0, 5) == 0) {  // one pixel short: a negative end pad
            const int o = (i - ext + 2 * p) / s + 1;
            if (o > 1) os << 'o' << axes[a] << o - 1;
        }
    }
    return os.str();
}

// Formats for an op: NXC or NCX; XIO or OIX, and for ConvTranspose also
// IOX and XOI.
layout_options random_formats(std::mt19937& rng, op_kind kind) {
    const char* conv[] = {"XIO", "OIX"};
    const char* deconv[] = {"XIO", "OIX", "IOX", "XOI"};
    const bool transpose = kind == op_kind::conv_transpose_bwd_weights;
    layout_options lo;
    lo.data_format = std::uniform_int_distribution<int>(0, 1)(rng) ? "NCX" : "NXC";
    lo.weights_format = transpose ? deconv[std::uniform_int_distribution<int>(0, 3)(rng)]
                                  : conv[std::uniform_int_distribution<int>(0, 1)(rng)];
    return lo;
}

}  // namespace

// CONVGRAD_CROSSCHECK_SEED / CONVGRAD_CROSSCHECK_CASES hunt further than the
// suite's fixed draw.
TEST_CASE("cli onednn: convgrad agrees with oneDNN on random small f32 problems", "[cli][onednn][random]") {
    const char* seed = std::getenv("CONVGRAD_CROSSCHECK_SEED");
    const char* count = std::getenv("CONVGRAD_CROSSCHECK_CASES");
    const uint32_t seed_value = seed ? static_cast<uint32_t>(std::strtoul(seed, nullptr, 10)) : 20261127u;
    std::mt19937 rng(seed_value);
    std::mt19937 format_rng(seed_value ^ 0x9e3779b9u);  // its own stream: the shapes drawn stay the seed's
    const int cases = count ? std::atoi(count) : 120;
    int checked = 0;
    for (int n = 0; n < cases; ++n) {
        const desc_kind kind = n % 3 == 2 ? desc_kind::deconv : desc_kind::conv;
        const std::string text = random_descriptor(rng, kind);
        conv_desc d;
        try {
            d = parse_descriptor(text, kind);
        } catch (const std::invalid_argument&) {
            continue;  // no output pixel: not a problem
        }
        const onednn::layouts mode = n % 2 ? onednn::layouts::plain : onednn::layouts::preferred;
        const std::vector<op_kind> kinds = kind == desc_kind::deconv
                                                   ? std::vector<op_kind>{op_kind::conv_transpose_bwd_weights}
                                                   : std::vector<op_kind>{op_kind::conv_bwd_weights, op_kind::conv_bwd_data};
        for (op_kind k : kinds) {
            // A negative end pad the spec cannot express (docs/sweep.md).
            if (!make_case(d, k, data_type::f32, {}).skip_reason.empty()) continue;
            const layout_options lo = random_formats(format_rng, k);
            INFO("case " << n << ": " << text << " " << short_op_name(k)
                         << (mode == onednn::layouts::plain ? " plain " : " preferred ") << lo.data_format << " "
                         << lo.weights_format);
            cross_check(d, k, mode, lo);
            ++checked;
        }
    }
    CHECK(checked >= cases);  // most draws are problems, and conv draws check two ops
}

TEST_CASE("cli onednn: convgrad agrees with oneDNN on small f32 problems", "[cli][onednn]") {
    const char* conv[] = {
        "mb2ic8ih9iw7oc12kh3kw2sh2sw1ph1pw0",  // strides, asymmetric kernel
        "g3mb2ic6ih6oc9kh3ph1",                // groups
        "g4mb2ic4ih6oc4kh3ph1",                // depthwise
        "mb2ic4ih9oc4kh3dh1ph2",               // dilation 2
        "mb2ic4ih8oc4oh4kh1sh2ph0",            // p_end = -1
        "mb2ic5iw11oc3kw3sw2",                 // 1D
        "mb1ic3id4ih5iw4oc2kd2kh3kw2pd1",      // 3D
    };
    const char* deconv[] = {
        "g2mb2oc4ic6ih5ow12iw5kh3kw3sh1sw2ph1pw0",  // groups, output_padding 1
        "mb2ic4oc3ih4kh3sh2ph1",
        "mb2ic3oc5iw6kw3sw1dw1pw1",
    };
    // (data format, conv weights format, ConvTranspose weights format)
    const char* formats[][3] = {{"NXC", "XIO", "XIO"}, {"NCX", "OIX", "IOX"}, {"NCX", "XIO", "XOI"}, {"NXC", "OIX", "OIX"}};
    for (onednn::layouts mode : {onednn::layouts::preferred, onednn::layouts::plain})
        for (const auto& f : formats) {
            layout_options lo;
            lo.data_format = f[0];
            lo.weights_format = f[1];
            for (const char* text : conv)
                for (op_kind kind : {op_kind::conv_bwd_weights, op_kind::conv_bwd_data}) {
                    INFO(text << " " << short_op_name(kind) << (mode == onednn::layouts::plain ? " plain " : " ")
                              << f[0] << " " << f[1]);
                    cross_check(parse_descriptor(text), kind, mode, lo);
                }
            lo.weights_format = f[2];
            for (const char* text : deconv) {
                INFO(text << " deconv_bwd_w " << f[0] << " " << f[2]);
                cross_check(parse_descriptor(text, desc_kind::deconv), op_kind::conv_transpose_bwd_weights, mode, lo);
            }
        }
}

#else

TEST_CASE("cli onednn: convgrad agrees with oneDNN on small f32 problems", "[cli][onednn]") {
    WARN("oneDNN was not found at configure time; the cross-check is skipped");
}

#endif
