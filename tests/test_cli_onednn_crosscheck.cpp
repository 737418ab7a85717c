// convgrad against oneDNN 2.6 (when CMake found it): the same plain tensors
// through both, in oneDNN's preferred and plain layouts, on small shapes
// covering groups, dilation, strides, negative end padding and ConvTranspose.
#include <catch2/catch.hpp>

#include "check.hpp"
#include "op_case.hpp"

#ifdef CONVGRAD_HAVE_DNNL
#include "onednn_conv.hpp"

using namespace convgrad::cli;
using convgrad::data_type;
using convgrad::op_kind;

namespace {

// One descriptor through convgrad and through oneDNN; returns err/tol.
void cross_check(const conv_desc& d, op_kind kind, onednn::layouts mode) {
    const op_case c = make_case(d, kind, data_type::f32, {});
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

    onednn::backward_op theirs(d, kind, data_type::f32, mode);
    theirs.bind(in0.data(), in1.data(), got.data());
    theirs.execute();
    theirs.finish();
    const comparison cmp = compare_reals(got, want, abs_sum, reduction_length(c));
    INFO("oneDNN " << theirs.impl() << ": " << cmp.describe());
    CHECK(cmp.ok);
}

}  // namespace

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
    for (onednn::layouts mode : {onednn::layouts::preferred, onednn::layouts::plain}) {
        for (const char* text : conv)
            for (op_kind kind : {op_kind::conv_bwd_weights, op_kind::conv_bwd_data}) {
                INFO(text << " " << short_op_name(kind) << (mode == onednn::layouts::plain ? " plain" : ""));
                cross_check(parse_descriptor(text), kind, mode);
            }
        for (const char* text : deconv) {
            INFO(text << " deconv_bwd_w");
            cross_check(parse_descriptor(text, desc_kind::deconv), op_kind::conv_transpose_bwd_weights, mode);
        }
    }
}

#else

TEST_CASE("cli onednn: convgrad agrees with oneDNN on small f32 problems", "[cli][onednn]") {
    WARN("oneDNN was not found at configure time; the cross-check is skipped");
}

#endif
