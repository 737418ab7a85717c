// Problem: an op after validation and canonicalisation.
//
// Every op is expressed in "convolution view": a convolution with input
// `src` (IC channels, spatial I), output `diff_dst` (OC channels, spatial O)
// and weights W (OC x IC/g x K), groups folded into OC.
//  - ConvolutionBackwardWeights: computes W from src and diff_dst.
//  - ConvTransposeBackwardWeights: the same computation with the user's
//    src and diff_dst swapped (the ConvTranspose's large side is the
//    convolution's src). Its IOX weights are the convolution's OIX.
//  - ConvolutionBackwardData: computes src (diff_src) from diff_dst and W.
// Spatial dims are always three (D, H, W); absent ones have size 1, kernel 1,
// stride 1, dilation 1 and no padding. Memory layouts are element strides,
// so the math never depends on data_format or weights_format.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "convgrad/convgrad.hpp"

namespace convgrad::detail {

// Which gradient is computed, in convolution view.
enum class Alg { weights, data };

// Element strides of an activation tensor (n, c, d, h, w).
struct DataStrides {
    int64_t n = 0, c = 0;
    std::array<int64_t, 3> sp{};
};

// Element strides of a weights tensor: o indexes the total OC (group-major),
// i indexes IC/g, k the three kernel axes.
struct WeightStrides {
    int64_t o = 0, i = 0;
    std::array<int64_t, 3> k{};
};

// Convolution-view weight layouts (O = OC total, I = IC/g, X = spatial).
enum class WeightLayout { OIX, XIO, IOX, XOI };

struct Problem {
    op_kind kind = op_kind::conv_bwd_weights;
    data_type dt = data_type::f32;
    Alg alg = Alg::weights;
    int nsp = 0;  // spatial rank of the user's tensors: 1, 2 or 3

    int64_t mb = 0, g = 1, icg = 0, ocg = 0;  // convolution view
    // Index 0 = D, 1 = H, 2 = W.
    std::array<int64_t, 3> in{}, out{}, k{}, stride{}, dil{}, pad_begin{}, pad_end{};

    bool nxc = true;  // data layout of all activation tensors
    WeightLayout wlayout = WeightLayout::XIO;
    DataStrides src_str, dst_str;  // convolution view src and diff_dst
    WeightStrides wei_str;
    // ConvTransposeBackwardWeights: the user's input0 is the convolution
    // view's diff_dst and input1 its src.
    bool swap_inputs = false;

    // The user-facing output dims (in data_format / weights_format).
    dims output_dims;
    int64_t input0_elems = 0, input1_elems = 0, output_elems = 0;

    int64_t ic() const { return icg * g; }
    int64_t oc() const { return ocg * g; }
    int64_t ext(int a) const { return (k[a] - 1) * dil[a] + 1; }
    int64_t in_sp() const { return in[0] * in[1] * in[2]; }
    int64_t out_sp() const { return out[0] * out[1] * out[2]; }
    int64_t k_sp() const { return k[0] * k[1] * k[2]; }
    // Elements of src and diff_dst together (the convolution view).
    int64_t activation_elems() const { return mb * (in_sp() * ic() + out_sp() * oc()); }
    double flops() const;
    // "mb2 g1 ic3 oc4 i5x5 o3x3 k3x3 s1x1 d1x1 pb0x0 pe0x0 NXC/XIO f32"
    std::string to_string() const;
};

// Validates the user's description and builds the Problem. Throws
// convgrad::error naming the op, the attribute or tensor, and the expected
// and given values.
Problem make_problem(op_kind kind, data_type dt, const attributes& attrs,
                     const dims& input0_dims, const dims& input1_dims,
                     const std::vector<int32_t>* shape_input);

size_t dtype_size(data_type dt);

// A kernel that covers the whole input (every output axis of size 1, no
// begin padding, taps one pixel apart, one group) multiplies each image's
// src as one vector of IC·K values: the op is a 1x1 convolution of IC·K
// input channels on one-pixel images, channel c' in src's order (NXC: x·IC
// + i; NCX: i·K + x). Its weights are the user's own when they order
// (spatial, channel) alike (NXC with XIO, NCX with OIX). When they order
// them the other way (NXC with OIX, NCX with XIO: x and i adjacent in the
// weights, but swapped) and there are fewer images than output channels,
// c' takes the weights' order instead and `transpose_src` is set: the
// caller transposes each image of src (weight gradients, before) or
// diff_src (data gradients, after) between the K × IC and IC × K orders,
// which moves fewer bytes than the weights would. Otherwise the 1x1
// problem takes dense [c'][OC] weights and `permute` is set: the caller
// moves them between that layout and the user's (user_weights_offset).
// A weight gradient whose weights keep c' innermost (OIX) gets the 1x1
// problem with src and diff_dst in each other's roles (`swap_roles`):
// input channels OC, output channels c', its XIO the user's layout.
// Returns that Problem, or `p` itself (folded false) when it is not one.
// (VGG's fc6 as a 7x7 convolution on a 7x7 input; a DCGAN's 4x4 first and
// last layers.)
// The weights' kernel axes form one run of stride wei_str.k[2] (kd, kh, kw
// in that order, nothing between them), as the input's spatial axes do.
bool kernel_axes_one_run(const Problem& p);
struct FullKernelFold {
    bool folded = false;
    bool permute = false;
    bool transpose_src = false;
    bool swap_roles = false;
};
Problem fold_full_kernel(const Problem& p, FullKernelFold* fold);
// permute: weights element (o, c') of the folded problem's dense [c'][OC]
// layout is the user's element at user_weights_offset(p, o, c') (element
// offsets; p the original Problem).
int64_t user_weights_offset(const Problem& p, int64_t o, int64_t c);

// The same problem on NXC activations: p itself, or for NCX the problem
// on dense NXC copies of its tensors (transposed image by image into
// scratch).
Problem nxc_view(const Problem& p);
// The spatial axes as the planners walk them, plain axes folded into W: an
// axis with no tap, stride or padding and in == out merges into W when W is
// plain too (H first, then D once H has merged), at most `max_axes` of them.
// A 1x1 stride-1 unpadded layer's plane (or volume) becomes one long row.
struct SpatialView {
    std::array<int64_t, 3> in{}, out{}, k{}, stride{}, dil{}, pad{};
    int merged = 0;  // axes folded into W
};
SpatialView fold_plain_axes(const Problem& p, int max_axes);
// Axis a (0 = D, 1 = H, 2 = W) has no tap, stride or padding, and in == out.
bool plain_axis(const Problem& p, int a);

// A 1x1 weight gradient of unit strides and no padding (every axis plain,
// one group) is symmetric in its operands: dW[i][o] = sum over pixels of
// src[i] * diff_dst[o], so it runs as well as the 1x1 problem with src and
// diff_dst in each other's roles (IC and OC exchanged, the same weights
// memory read as its transpose). The gemm tiles hold output channels in
// their vector lanes; where OC fills them much worse than IC does (96 ->
// 24: a second vector half idle; heads into 1-3 maps: 13-19 % of the
// lanes; ConvTranspose of a 3-channel RGB point cloud), the swapped problem
// runs instead: swap_lanes_1x1 says when (lane fill gain of at least
// kSwapLaneGain at vectors of vlen floats), swapped_1x1 builds it. Against
// the problem as given, AMD Zen 4, 2 threads, mb 32, tools/sweep_ab.py
// --rounds=5 --min, every layer of the shape files it moves (weight and
// ConvTranspose weight gradients), f32: MobileNetV2 / EfficientNet-B0 96
// -> 24 at 56x56 1.34x, U-Net's head (64 -> 2 at 256x256) 1.18x, MobileNet's
// 1024 -> 5 classifier 1.46x, ConvTranspose views of DenseNet-121's 1000
// -> 128 1.11x, GoogLeNet's 24 -> 512 1.28x, PointNet's 3 -> 64 3.44x, SE
// layers 1.00-1.33x; bf16 / f16 up to 2.09x / 1.47x (U-Net head) and 5.49x /
// 2.86x (PointNet); nothing below 0.99x but a 3-microsecond SE layer.
constexpr double kSwapLaneGain = 0.125;
double lane_fill(int64_t c, int vlen);
bool swap_lanes_1x1(const Problem& p, int vlen);
Problem swapped_1x1(const Problem& p);

// L1d has 64 sets of 64-byte lines on every target (32 KiB 8-way, 48 KiB
// 12-way): lines 4 KiB apart share a set. Lines the kernels read in step
// (a block's broadcast rows, a row's pixels) that put more than
// kL1LinesPerSet into one set evict each other.
constexpr int64_t kCacheLineBytes = 64;
// The L3 of the project's hosts (AMD Zen 4 and Zen 5 guests), for the
// planners' rules on data that stays cached between passes.
constexpr double kL3Bytes = 32.0 * 1024 * 1024;
// Depthwise kernels prefetch ahead only where their two activation tensors
// together exceed this many bytes (a guest's share of a shared L3 is
// smaller than the L3): the data gradient's rows read in place the next
// row's diff_dst (make_data_plan, dw_prefetch_rows), the weight gradient's
// calls the next chunk (plan_prefetch_lines).
constexpr double kDwPrefetchBytes = 8 << 20;
constexpr int64_t kL1SetSpan = 4096;
constexpr int kL1LinesPerSet = 8;
// The most distinct lines that m rows `stride` bytes apart, read at one
// offset, put into one L1 set.
int lines_per_l1_set(int64_t m, int64_t stride);
// Pixels a multiple of 2 KiB apart: a channel vector's line of every pixel
// falls in one or two L1 sets.
inline bool pixels_share_l1_sets(int64_t pixel_bytes) { return pixel_bytes % (kL1SetSpan / 2) == 0; }
// ... a multiple of 512 bytes: in at most 8 of the 64 sets.
inline bool pixels_in_few_l1_sets(int64_t pixel_bytes) { return pixel_bytes % (kL1SetSpan / 8) == 0; }

// a / b rounded up (a >= 0, b > 0).
inline int64_t div_up(int64_t a, int64_t b) { return (a + b - 1) / b; }

// [begin, end) of part `i` of `n` of `total` items, the larger parts spread
// out (sizes 12, 13, 12, 13, ... rather than 13, ..., 13, 12, ..., 12), so
// any run of consecutive parts is within one item of its share.
inline std::array<int64_t, 2> spread(int64_t total, int64_t n, int64_t i) {
    return {i * total / n, (i + 1) * total / n};
}

}  // namespace convgrad::detail
