// A small end-to-end example: the weight and data gradients of a 3x3
// convolution layer through the public API, in the default NXC / XIO layouts.
#include <convgrad/convgrad.hpp>

#include <cstdio>
#include <vector>

int main() {
    convgrad::attributes attrs;
    attrs.strides = {1, 1};
    attrs.pads_begin = {1, 1};
    attrs.pads_end = {1, 1};
    attrs.dilations = {1, 1};
    attrs.weights_shape = {3, 3, 16, 32};  // XIO: KH, KW, IC, OC

    const convgrad::dims src = {2, 14, 14, 16}, diff_dst = {2, 14, 14, 32};  // NXC
    convgrad::op bwd_w(convgrad::op_kind::conv_bwd_weights, convgrad::data_type::f32, attrs, src,
                       diff_dst);
    std::vector<float> x(bwd_w.input0_elems(), 1.f), dy(bwd_w.input1_elems(), 1.f);
    std::vector<float> dw(bwd_w.output_elems());
    bwd_w.execute(x.data(), dy.data(), dw.data());
    std::printf("%s\n  diff_weights[center tap] = %g (expected 2*14*14 = 392)\n",
                bwd_w.describe().c_str(), dw[(1 * 3 + 1) * 16 * 32]);

    attrs.dst_shape = src;
    convgrad::op bwd_d(convgrad::op_kind::conv_bwd_data, convgrad::data_type::f32, attrs, diff_dst,
                       bwd_w.output_dims());
    std::vector<float> dx(bwd_d.output_elems());
    bwd_d.execute(dy.data(), dw.data(), dx.data());
    std::printf("%s\n  diff_src[0] = %g\n", bwd_d.describe().c_str(), dx[0]);
    return 0;
}
