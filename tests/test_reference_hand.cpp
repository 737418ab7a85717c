// Hand-computed cases for the reference path, one or more per op and rank.
// Every expected value below was worked out by hand from the definitions in
// docs/SEMANTICS.md (the arithmetic is in the comments).
#include <catch2/catch.hpp>

#include "test_util.hpp"

using convgrad::attributes;
using convgrad::data_type;
using convgrad::dims;
using convgrad::op_kind;
using testutil::Buffer;

namespace {

Buffer f32(const std::vector<float>& v) {
    Buffer b(data_type::f32, static_cast<int64_t>(v.size()));
    for (size_t i = 0; i < v.size(); ++i) b.set(static_cast<int64_t>(i), v[i]);
    return b;
}

std::vector<float> values(const Buffer& b) {
    std::vector<float> r;
    for (int64_t i = 0; i < b.size(); ++i) r.push_back(b.get(i));
    return r;
}

attributes attrs_ncx(const dims& s, const dims& pb, const dims& pe, const dims& d) {
    attributes a;
    a.strides = s;
    a.pads_begin = pb;
    a.pads_end = pe;
    a.dilations = d;
    a.data_format = "NCX";
    a.weights_format = "OIX";
    return a;
}

std::vector<float> run_ref(op_kind kind, const attributes& a, const dims& d0, const dims& d1,
                           const std::vector<float>& x0, const std::vector<float>& x1) {
    const auto o = testutil::make_op("ref", kind, data_type::f32, a, d0, d1);
    return values(testutil::run(o, f32(x0), f32(x1)));
}

}  // namespace

TEST_CASE("reference: 1D weight gradient by hand", "[ref][hand]") {
    // src = [1 2 3 4], diff_dst = [1 2], k3: dW[k] = src[k] + 2 src[k+1].
    attributes a = attrs_ncx({1}, {0}, {0}, {1});
    a.weights_shape = {1, 1, 3};
    CHECK(run_ref(op_kind::conv_bwd_weights, a, {1, 1, 4}, {1, 1, 2}, {1, 2, 3, 4}, {1, 2}) ==
          std::vector<float>{5, 8, 11});
}

TEST_CASE("reference: 1D data gradient by hand", "[ref][hand]") {
    // W = [1 10 100], diff_dst = [1 2]: dx[i] = sum over o + k = i.
    attributes a = attrs_ncx({1}, {0}, {0}, {1});
    CHECK(run_ref(op_kind::conv_bwd_data, a, {1, 1, 2}, {1, 1, 3}, {1, 2}, {1, 10, 100}) ==
          std::vector<float>{1, 12, 120, 200});
    // Stride 2, pads 1/1, I = 5: i = 2o - 1 + k.
    // i0: (o0,k1)=10; i1: (o0,k2)+(o1,k0)=100+2; i2: (o1,k1)=20; i3: (o1,k2)+(o2,k0)=200+3; i4: (o2,k1)=30.
    a = attrs_ncx({2}, {1}, {1}, {1});
    a.dst_shape = {1, 1, 5};
    CHECK(run_ref(op_kind::conv_bwd_data, a, {1, 1, 3}, {1, 1, 3}, {1, 2, 3}, {1, 10, 100}) ==
          std::vector<float>{10, 102, 20, 203, 30});
}

TEST_CASE("reference: 1D dilated, grouped weight gradient by hand", "[ref][hand]") {
    // g2, src channels c0 = [1 2 3], c1 = [4 5 6]; diff_dst o0 = [1], o1 = [10];
    // k2 dilation 2 (taps at 0 and 2): dW[o0][0] = [1 3], dW[o1][0] = 10 * [4 6].
    attributes a = attrs_ncx({1}, {0}, {0}, {2});
    a.groups = 2;
    a.weights_shape = {2, 1, 2};
    CHECK(run_ref(op_kind::conv_bwd_weights, a, {1, 2, 3}, {1, 2, 1}, {1, 2, 3, 4, 5, 6}, {1, 10}) ==
          std::vector<float>{1, 3, 40, 60});
}

TEST_CASE("reference: 2D by hand", "[ref][hand]") {
    // src 3x3 = 1..9, diff_dst 2x2 of ones, k2x2: dW = sums of the four 2x2 windows.
    attributes a = attrs_ncx({1, 1}, {0, 0}, {0, 0}, {1, 1});
    a.weights_shape = {1, 1, 2, 2};
    CHECK(run_ref(op_kind::conv_bwd_weights, a, {1, 1, 3, 3}, {1, 1, 2, 2},
                  {1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 1, 1, 1}) == std::vector<float>{12, 16, 24, 28});
    // Data gradient, 2x2 diff_dst [1 2; 3 4], W 2x2 [1 10; 100 1000], stride 1: the full
    // correlation transpose onto 3x3.
    a.dst_shape = {1, 1, 3, 3};
    CHECK(run_ref(op_kind::conv_bwd_data, a, {1, 1, 2, 2}, {1, 1, 2, 2}, {1, 2, 3, 4},
                  {1, 10, 100, 1000}) ==
          std::vector<float>{1, 12, 20, 103, 1234, 2040, 300, 3400, 4000});
}

TEST_CASE("reference: 3D by hand", "[ref][hand]") {
    // src 2x2x2 = 1..8, one output pixel with diff 2, k2x2x2: dW = 2 * src.
    attributes a = attrs_ncx({1, 1, 1}, {0, 0, 0}, {0, 0, 0}, {1, 1, 1});
    a.weights_shape = {1, 1, 2, 2, 2};
    CHECK(run_ref(op_kind::conv_bwd_weights, a, {1, 1, 2, 2, 2}, {1, 1, 1, 1, 1},
                  {1, 2, 3, 4, 5, 6, 7, 8}, {2}) ==
          std::vector<float>{2, 4, 6, 8, 10, 12, 14, 16});
    // Data gradient of the same: diff_src = 2 * W.
    a.dst_shape = {1, 1, 2, 2, 2};
    CHECK(run_ref(op_kind::conv_bwd_data, a, {1, 1, 1, 1, 1}, {1, 1, 2, 2, 2}, {2},
                  {1, 2, 3, 4, 5, 6, 7, 8}) == std::vector<float>{2, 4, 6, 8, 10, 12, 14, 16});
}

TEST_CASE("reference: ConvTranspose weight gradient by hand", "[ref][hand]") {
    // ConvTranspose x = [1 2] -> y (stride 2, k2): y[2i + k] += x[i] W[k], so
    // dW[k] = sum_i x[i] dy[2i + k]; dy = [1 10 100 1000] gives [201 2010].
    attributes a = attrs_ncx({2}, {0}, {0}, {1});
    a.weights_format = "IOX";
    a.weights_shape = {1, 1, 2};
    CHECK(run_ref(op_kind::conv_transpose_bwd_weights, a, {1, 1, 2}, {1, 1, 4}, {1, 2},
                  {1, 10, 100, 1000}) == std::vector<float>{201, 2010});
}

TEST_CASE("reference: padding taps read zeros, strides skip pixels", "[ref][hand]") {
    // 1D, I = 3, k3, pads 2/2, stride 3: O = (3 + 4 - 3)/3 + 1 = 2; output o reads
    // i = 3o - 2 + k. o0 reads i = k - 2 (only k2 -> i0); o1 reads i = k + 1 (k0 -> i1, k1 -> i2).
    // src = [1 2 3], diff_dst = [10 100]: dW = [100*2, 100*3, 10*1].
    attributes a = attrs_ncx({3}, {2}, {2}, {1});
    a.weights_shape = {1, 1, 3};
    CHECK(run_ref(op_kind::conv_bwd_weights, a, {1, 1, 3}, {1, 1, 2}, {1, 2, 3}, {10, 100}) ==
          std::vector<float>{200, 300, 10});
    // Stride larger than the kernel: I = 7, k2, stride 3 -> O = 2 (reads i0,i1 and i3,i4);
    // diff_src at i2, i5, i6 is never reached and must be exactly 0.
    a = attrs_ncx({3}, {0}, {0}, {1});
    a.dst_shape = {1, 1, 7};
    CHECK(run_ref(op_kind::conv_bwd_data, a, {1, 1, 2}, {1, 1, 2}, {1, 2}, {5, 7}) ==
          std::vector<float>{5, 7, 0, 10, 14, 0, 0});
}

TEST_CASE("reference: ConvTranspose weight gradient 2D and 3D by hand", "[ref][hand]") {
    // 2D: x (1x2) = [1 2], stride (1, 2), k (1, 2): y[0][2j + k] += x[j] W[k], so
    // dW[0][k] = dy[k] + 2 dy[2 + k]; dy (1x4) = [1 10 100 1000] gives [201 2010].
    attributes a = attrs_ncx({1, 2}, {0, 0}, {0, 0}, {1, 1});
    a.weights_format = "IOX";
    a.weights_shape = {1, 1, 1, 2};
    CHECK(run_ref(op_kind::conv_transpose_bwd_weights, a, {1, 1, 1, 2}, {1, 1, 1, 4}, {1, 2},
                  {1, 10, 100, 1000}) == std::vector<float>{201, 2010});
    // 3D: a single x = 3 spread by a 2x2x2 kernel onto a 2x2x2 y: dW = 3 * dy.
    a = attrs_ncx({1, 1, 1}, {0, 0, 0}, {0, 0, 0}, {1, 1, 1});
    a.weights_format = "IOX";
    a.weights_shape = {1, 1, 2, 2, 2};
    CHECK(run_ref(op_kind::conv_transpose_bwd_weights, a, {1, 1, 1, 1, 1}, {1, 1, 2, 2, 2}, {3},
                  {1, 2, 3, 4, 5, 6, 7, 8}) == std::vector<float>{3, 6, 9, 12, 15, 18, 21, 24});
    // Two input channels, groups 2 (depthwise ConvTranspose), 2D k1x1: dW[c] = x[c] * dy[c].
    a = attrs_ncx({1, 1}, {0, 0}, {0, 0}, {1, 1});
    a.weights_format = "IOX";
    a.groups = 2;
    a.weights_shape = {2, 1, 1, 1};
    CHECK(run_ref(op_kind::conv_transpose_bwd_weights, a, {1, 2, 1, 1}, {1, 2, 1, 1}, {3, 5}, {7, 11}) ==
          std::vector<float>{21, 55});
}
