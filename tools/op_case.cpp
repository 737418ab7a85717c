// Descriptor -> Graph op, following ../shared/shapes/README.md "Reading a
// descriptor as a oneDNN Graph backward op".
#include "op_case.hpp"

#include <algorithm>
#include <cctype>
#include <functional>
#include <numeric>
#include <stdexcept>

namespace convgrad::cli {
namespace {

std::string upper(std::string s) {
    for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return s;
}

std::string lower(std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

dims spatial(const std::array<int64_t, 3>& v, int nsp) { return dims(v.end() - nsp, v.end()); }

// Activation dims (mb, c, x...) in data_format.
dims data_dims(int64_t mb, int64_t c, const dims& x, const std::string& format) {
    dims r{mb};
    if (format == "NCX") r.push_back(c);
    r.insert(r.end(), x.begin(), x.end());
    if (format == "NXC") r.push_back(c);
    return r;
}

// Builds a weights shape from named axes: each letter of `format` is one
// axis, 'X' standing for all kernel axes.
dims weights_dims(const std::string& format, int64_t o, int64_t i, const dims& k) {
    dims r;
    for (char axis : format) {
        if (axis == 'O') r.push_back(o);
        if (axis == 'I') r.push_back(i);
        if (axis == 'X') r.insert(r.end(), k.begin(), k.end());
    }
    return r;
}

void check_format(const std::string& value, std::initializer_list<const char*> allowed,
                  const std::string& what) {
    for (const char* a : allowed)
        if (value == a) return;
    std::string list;
    for (const char* a : allowed) list += (list.empty() ? "" : " | ") + std::string(a);
    throw std::invalid_argument(what + ": expected " + list + ", given \"" + value + "\"");
}

// Total padding of the auto_pad rule (../shared/SEMANTICS.md).
int64_t auto_pad_total(const conv_desc& d, int a, bool transpose) {
    const int64_t e = d.ext(a), s = d.s[a];
    if (transpose) return std::max<int64_t>(e - s, 0);
    const int64_t r = d.i[a] % s;
    return std::max<int64_t>(e - (r ? r : s), 0);
}

// The descriptor as the auto_pad rule sees it: pads from the rule, output
// size recomputed from them (the descriptor's own padding is ignored).
conv_desc apply_auto_pad(conv_desc d, const std::string& mode, bool transpose) {
    for (int a = 3 - d.nsp; a < 3; ++a) {
        const int64_t total = mode == "valid" ? 0 : auto_pad_total(d, a, transpose);
        d.p[a] = mode == "same_lower" ? (total + 1) / 2 : total / 2;
        d.p_end[a] = total - d.p[a];
        const int64_t e = d.ext(a), s = d.s[a];
        if (transpose)
            d.o[a] = s * (d.i[a] - 1) + e - total;
        else
            d.o[a] = (d.i[a] + total - e) / s + 1;
        if (d.o[a] <= 0 || (!transpose && d.i[a] + total < e))
            throw std::invalid_argument("auto_pad=" + mode + ": the kernel extent " +
                                        std::to_string(e) + " does not fit the input " +
                                        std::to_string(d.i[a]));
    }
    return d;
}

// Graph needs pads_end >= 0. Convolution: raise a negative end padding to 0
// when the floor rule keeps the output size. Returns a skip reason or "".
std::string conv_pads_end(const conv_desc& d, dims& pads_end) {
    for (int a = 3 - d.nsp; a < 3; ++a) {
        const int64_t pe = std::max<int64_t>(d.p_end[a], 0);
        pads_end.push_back(pe);
        const int64_t span = d.i[a] + d.p[a] + pe - d.ext(a);
        if (span < 0 || span / d.s[a] + 1 != d.o[a])
            return "end padding " + std::to_string(d.p_end[a]) +
                   " cannot be raised to 0 without changing the output size";
    }
    return "";
}

// ConvTranspose: a negative end padding is extra output, i.e. output_padding.
std::string deconv_pads_end(const conv_desc& d, dims& pads_end, dims& output_padding) {
    bool any = false;
    for (int a = 3 - d.nsp; a < 3; ++a) {
        pads_end.push_back(std::max<int64_t>(d.p_end[a], 0));
        output_padding.push_back(std::max<int64_t>(-d.p_end[a], 0));
        any = any || d.p_end[a] < 0;
        if (-d.p_end[a] >= d.s[a])
            return "end padding " + std::to_string(d.p_end[a]) +
                   " needs output_padding >= stride, which Graph does not allow";
    }
    if (!any) output_padding.clear();
    return "";
}

int64_t product(const dims& v) {
    return std::accumulate(v.begin(), v.end(), int64_t(1), std::multiplies<int64_t>());
}

int64_t channels(const dims& v, const std::string& data_format) {
    if (v.size() < 2) return 1;
    return upper(data_format) == "NCX" ? v[1] : v.back();
}

}  // namespace

op op_case::make_op() const {
    return op(kind, dt, attrs, input0, input1, has_shape_input ? &shape_input : nullptr);
}

bool same_op(const op_case& a, const op_case& b) {
    const attributes &x = a.attrs, &y = b.attrs;
    return a.name == b.name && a.kind == b.kind && a.dt == b.dt && a.input0 == b.input0 &&
           a.input1 == b.input1 && a.has_shape_input == b.has_shape_input &&
           a.shape_input == b.shape_input && x.strides == y.strides &&
           x.pads_begin == y.pads_begin && x.pads_end == y.pads_end && x.dilations == y.dilations &&
           x.auto_pad == y.auto_pad && x.groups == y.groups && x.data_format == y.data_format &&
           x.weights_format == y.weights_format && x.weights_shape == y.weights_shape &&
           x.dst_shape == y.dst_shape && x.output_padding == y.output_padding;
}

const char* short_op_name(op_kind kind) {
    switch (kind) {
        case op_kind::conv_bwd_weights: return "bwd_w";
        case op_kind::conv_bwd_data: return "bwd_d";
        case op_kind::conv_transpose_bwd_weights: return "deconv_bwd_w";
    }
    return "?";
}

op_kind parse_op_name(const std::string& name) {
    for (op_kind k : {op_kind::conv_bwd_weights, op_kind::conv_bwd_data,
                      op_kind::conv_transpose_bwd_weights})
        if (name == short_op_name(k)) return k;
    try {
        return parse_op_kind(name);
    } catch (const error&) {
        throw std::invalid_argument("op: expected bwd_w | bwd_d | deconv_bwd_w or a spec name "
                                    "(ConvolutionBackwardWeights, ConvolutionBackwardData, "
                                    "ConvTransposeBackwardWeights), given \"" + name + "\"");
    }
}

desc_kind descriptor_kind(op_kind kind) {
    return kind == op_kind::conv_transpose_bwd_weights ? desc_kind::deconv : desc_kind::conv;
}

namespace {

// The normalised format names, after checking them for this op.
layout_options checked_layout(const layout_options& lo, bool transpose) {
    layout_options r = lo;
    r.data_format = upper(lo.data_format);
    r.weights_format = lo.weights_format.empty() ? "XIO" : upper(lo.weights_format);
    r.auto_pad = lower(lo.auto_pad);
    check_format(r.data_format, {"NXC", "NCX"}, "data format");
    if (transpose)
        check_format(r.weights_format, {"XIO", "OIX", "IOX", "XOI"}, "weights format (ConvTranspose)");
    else
        check_format(r.weights_format, {"XIO", "OIX"}, "weights format");
    check_format(r.auto_pad, {"none", "same_upper", "same_lower", "valid"}, "auto_pad");
    return r;
}

// strides, pads, dilations, groups, formats. Returns a skip reason or "".
std::string set_geometry(attributes& at, const conv_desc& d, const layout_options& lo, bool transpose) {
    at.strides = spatial(d.s, d.nsp);
    at.dilations = spatial(d.d, d.nsp);
    for (int64_t& v : at.dilations) v += 1;  // benchdnn counts skipped taps
    at.groups = d.g;
    at.data_format = lo.data_format;
    at.weights_format = lo.weights_format;
    at.auto_pad = lo.auto_pad;
    if (lo.auto_pad != "none") return "";
    at.pads_begin = spatial(d.p, d.nsp);
    return transpose ? deconv_pads_end(d, at.pads_end, at.output_padding) : conv_pads_end(d, at.pads_end);
}

// Inputs 0 and 1 and the shape (attribute, or s32 input 2) of the op.
void set_tensors(op_case& c, const conv_desc& d, const layout_options& lo) {
    const int n = d.nsp;
    const dims src = data_dims(d.mb, d.ic, spatial(d.i, n), lo.data_format);
    const dims dst = data_dims(d.mb, d.oc, spatial(d.o, n), lo.data_format);
    // Conv weights: O = OC (groups folded in), I = IC/g. ConvTranspose: I = its
    // src channels (groups folded in), O = its dst channels / g.
    const dims weights = c.kind == op_kind::conv_transpose_bwd_weights
                             ? weights_dims(lo.weights_format, d.oc / d.g, d.ic, spatial(d.k, n))
                             : weights_dims(lo.weights_format, d.oc, d.ic / d.g, spatial(d.k, n));
    const bool data = c.kind == op_kind::conv_bwd_data;
    c.input0 = data ? dst : src;
    c.input1 = data ? weights : dst;
    dims& shape = data ? c.attrs.dst_shape : c.attrs.weights_shape;
    shape = data ? src : weights;
    if (lo.shape_as_input) {
        c.has_shape_input = true;
        c.shape_input.assign(shape.begin(), shape.end());
        shape.clear();
    }
}

}  // namespace

op_case make_case(const conv_desc& desc, op_kind kind, data_type dt, const layout_options& options) {
    const bool transpose = kind == op_kind::conv_transpose_bwd_weights;
    if (desc.kind != descriptor_kind(kind))
        throw std::invalid_argument(std::string(short_op_name(kind)) + " reads " +
                                    (transpose ? "transposed-convolution (deconv/)" : "convolution (conv/)") +
                                    " descriptors");
    const layout_options lo = checked_layout(options, transpose);
    // An auto_pad override the layer cannot take (a kernel longer than its
    // input under valid) skips that layer, naming why; the others run.
    conv_desc d = desc;
    std::string unfit;
    if (lo.auto_pad != "none") {
        try {
            d = apply_auto_pad(desc, lo.auto_pad, transpose);
        } catch (const std::invalid_argument& e) {
            unfit = e.what();
        }
    }
    op_case c;
    c.name = d.name;
    c.descriptor = to_string(desc);
    c.kind = kind;
    c.dt = dt;
    c.expected_flops = d.flops();
    c.skip_reason = unfit.empty() ? set_geometry(c.attrs, d, lo, transpose) : unfit;
    set_tensors(c, d, lo);
    return c;
}

op_case with_minibatch(const op_case& c, int64_t mb) {
    op_case r = c;
    const int64_t old_mb = c.minibatch();
    if (mb == old_mb || old_mb <= 0) return r;
    r.input0[0] = mb;
    if (c.kind == op_kind::conv_bwd_data) {
        if (!r.attrs.dst_shape.empty()) r.attrs.dst_shape[0] = mb;
        if (r.has_shape_input && !r.shape_input.empty()) r.shape_input[0] = static_cast<int32_t>(mb);
    } else {
        r.input1[0] = mb;
    }
    r.expected_flops = c.expected_flops * static_cast<double>(mb) / static_cast<double>(old_mb);
    return r;
}

int64_t reduction_length(const op_case& c) {
    const std::string& fmt = c.attrs.data_format;
    switch (c.kind) {
        case op_kind::conv_bwd_weights: return product(c.input1) / channels(c.input1, fmt);
        case op_kind::conv_transpose_bwd_weights: return product(c.input0) / channels(c.input0, fmt);
        case op_kind::conv_bwd_data: {
            dims diff_src = c.attrs.dst_shape;
            if (c.has_shape_input) diff_src.assign(c.shape_input.begin(), c.shape_input.end());
            const int64_t ic = diff_src.empty() ? 1 : channels(diff_src, fmt);
            return product(c.input1) / std::max<int64_t>(ic, 1);
        }
    }
    return 1;
}

double reference_steps(const op_case& c) {
    double steps = c.make_op().flops() / 2;
    if (c.kind != op_kind::conv_bwd_data) return steps;
    dims diff_src = c.attrs.dst_shape;
    if (c.has_shape_input) diff_src.assign(c.shape_input.begin(), c.shape_input.end());
    const std::string& fmt = c.attrs.data_format;
    const double oc = static_cast<double>(channels(c.input0, fmt));
    const double icg = static_cast<double>(channels(diff_src, fmt)) / static_cast<double>(c.attrs.groups);
    const double kernel = static_cast<double>(product(c.input1)) / (oc * icg);
    return steps + static_cast<double>(product(diff_src)) * kernel;
}

}  // namespace convgrad::cli
