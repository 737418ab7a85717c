// One op to run: everything convgrad::op's constructor needs, plus where it
// came from. Built from a benchdnn descriptor (make_case) or read from JSON
// (json_op.hpp).
#pragma once

#include <convgrad/convgrad.hpp>

#include <string>
#include <vector>

#include "descriptor.hpp"

namespace convgrad::cli {

// How a descriptor becomes logical dims and attributes.
struct layout_options {
    std::string data_format = "NXC";  // NXC | NCX
    std::string weights_format;       // empty: XIO (the spec default for all three ops)
    std::string auto_pad = "none";    // none | same_upper | same_lower | valid
    bool shape_as_input = false;      // pass weights_shape / dst_shape as the s32 input 2
};

struct op_case {
    std::string name;        // the descriptor's or the JSON op's name
    std::string descriptor;  // canonical benchdnn text when built from one
    op_kind kind = op_kind::conv_bwd_weights;
    data_type dt = data_type::f32;
    attributes attrs;
    dims input0, input1;  // spec index order, in data_format / weights_format
    bool has_shape_input = false;
    std::vector<int32_t> shape_input;  // input 2 when has_shape_input
    std::string skip_reason;  // non-empty: the case cannot be expressed, do not run
    std::string note;         // something the reader changed (e.g. pads_end -1 -> 0)
    double expected_flops = 0;  // benchdnn's count from the descriptor; 0 = unknown

    // The constructed op (throws convgrad::error like the library does).
    op make_op() const;
    int64_t minibatch() const { return input0.empty() ? 0 : input0[0]; }
};

// Same op: kind, dtype, attributes, dims, shape input and name.
bool same_op(const op_case& a, const op_case& b);

// Short op names used on the command line and in reports.
const char* short_op_name(op_kind kind);  // bwd_w | bwd_d | deconv_bwd_w
// bwd_w | bwd_d | deconv_bwd_w or any spec name (and legacy aliases).
op_kind parse_op_name(const std::string& name);
// Which descriptor rule an op reads: deconv/ files for ConvTranspose.
desc_kind descriptor_kind(op_kind kind);

// The op a descriptor describes, in the requested formats. Throws
// std::invalid_argument for a descriptor of the wrong kind or a bad format
// name; sets skip_reason when Graph attributes cannot express the problem.
op_case make_case(const conv_desc& desc, op_kind kind, data_type dt, const layout_options& lo);

// The same op with a different minibatch (every activation tensor's N).
op_case with_minibatch(const op_case& c, int64_t mb);

// Number of products summed into one output element (at most), from dims.
int64_t reduction_length(const op_case& c);

// Inner-loop steps of one run of the scalar reference: one per product, and
// for the data gradient one per (diff_src element, kernel tap) as well, as
// it tries every tap. Lets the sweep skip checks the reference cannot
// finish (a 192^3 kernel is 10^15 steps).
double reference_steps(const op_case& c);

}  // namespace convgrad::cli
