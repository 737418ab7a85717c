// Uses only the installed header and library: a 1D weight gradient by hand
// (src [1 2 3 4], diff_dst [1 2], kernel 3 -> [5 8 11]), again after
// release_scratch().
#include <convgrad/convgrad.hpp>

#include <cstdio>
#include <vector>

int main() {
    convgrad::attributes a;
    a.strides = {1};
    a.pads_begin = {0};
    a.pads_end = {0};
    a.weights_shape = {3, 1, 1};  // XIO
    const convgrad::op o(convgrad::parse_op_kind("ConvolutionBackwardWeights"),
                         convgrad::data_type::f32, a, {1, 4, 1}, {1, 2, 1});
    const std::vector<float> src{1, 2, 3, 4}, diff_dst{1, 2};
    std::vector<float> dw(3);
    o.execute(src.data(), diff_dst.data(), dw.data());
    std::printf("%s -> %g %g %g\n", o.describe().c_str(), dw[0], dw[1], dw[2]);
    // The kept scratch released, the op runs again the same.
    std::printf("release_scratch: %zu bytes\n", convgrad::release_scratch());
    std::vector<float> again(3);
    o.execute(src.data(), diff_dst.data(), again.data());
    return dw == std::vector<float>{5, 8, 11} && again == dw ? 0 : 1;
}
