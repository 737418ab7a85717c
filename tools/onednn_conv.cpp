// oneDNN 2.6 C++ API: convolution_backward_weights / _data and
// deconvolution_backward_weights, each with its forward hint. oneDNN's
// dilations count skipped taps, as benchdnn's do, so a descriptor's d goes
// in unchanged; so does its derived (possibly negative) end padding.
#include "onednn_conv.hpp"

#include <oneapi/dnnl/dnnl.hpp>
#include <omp.h>

#include <array>
#include <unordered_map>
#include <stdexcept>

namespace convgrad::cli::onednn {
namespace {

using dnnl::memory;
using tag = memory::format_tag;

memory::data_type to_dnnl(data_type dt) {
    switch (dt) {
        case data_type::f32: return memory::data_type::f32;
        case data_type::bf16: return memory::data_type::bf16;
        case data_type::f16: return memory::data_type::f16;
    }
    return memory::data_type::undef;
}

memory::dims spatial(const std::array<int64_t, 3>& v, int nsp) {
    return memory::dims(v.end() - nsp, v.end());
}

// Logical (mb, c, x...) dims with NXC or NCX strides.
memory::desc data_desc(int64_t mb, int64_t c, const memory::dims& x, memory::data_type dt, bool ncx) {
    memory::dims dims{mb, c}, strides(2 + x.size());
    dims.insert(dims.end(), x.begin(), x.end());
    int64_t stride = ncx ? 1 : c;
    for (size_t a = x.size(); a-- > 0;) strides[2 + a] = stride, stride *= x[a];
    if (ncx) {
        strides[1] = stride;
        stride *= c;
    } else {
        strides[1] = 1;
    }
    strides[0] = stride;
    return memory::desc(dims, dt, strides);
}

// oneDNN weights dims ((g), o, i, k...) laid out as convgrad's weights
// format (docs/SEMANTICS.md): per group g, output channel o and input
// channel i of the group, the element's offset is g * sg + o * so + i * si
// plus the kernel position's (row-major, `unit` for the last axis).
// Conv (OC = g*ocg + o): XIO (X..., IC/g, OC), OIX (OC, IC/g, X...).
// ConvTranspose (IC = g*icg + i): XIO (X..., IC, OC/g), IOX (IC, OC/g, X...),
// XOI (X..., OC/g, IC), OIX (OC/g, IC, X...).
memory::desc weights_desc(const conv_desc& d, bool transpose, const std::string& format, memory::data_type dt) {
    const int64_t g = d.g, ocg = d.oc / g, icg = d.ic / g;
    const memory::dims k = spatial(d.k, d.nsp);
    int64_t ksize = 1;
    for (int64_t v : k) ksize *= v;
    int64_t sg = 0, so = 0, si = 0, unit = 0;
    if (!transpose && format == "XIO") {
        so = 1, sg = ocg, si = g * ocg, unit = icg * g * ocg;
    } else if (!transpose && format == "OIX") {
        si = ksize, so = icg * ksize, sg = ocg * icg * ksize, unit = 1;
    } else if (transpose && format == "XIO") {
        so = 1, si = ocg, sg = icg * ocg, unit = g * icg * ocg;
    } else if (transpose && format == "IOX") {
        so = ksize, si = ocg * ksize, sg = icg * ocg * ksize, unit = 1;
    } else if (transpose && format == "XOI") {
        si = 1, sg = icg, so = g * icg, unit = ocg * g * icg;
    } else if (transpose && format == "OIX") {
        si = ksize, sg = icg * ksize, so = g * icg * ksize, unit = 1;
    } else {
        throw std::runtime_error("oneDNN peer: no weights format " + format);
    }
    memory::dims dims, strides;
    if (g > 1) dims.push_back(g), strides.push_back(sg);
    dims.push_back(ocg), strides.push_back(so);
    dims.push_back(icg), strides.push_back(si);
    std::vector<int64_t> kstr(k.size());
    int64_t s = unit;
    for (size_t a = k.size(); a-- > 0;) kstr[a] = s, s *= k[a];
    dims.insert(dims.end(), k.begin(), k.end());
    strides.insert(strides.end(), kstr.begin(), kstr.end());
    return memory::desc(dims, dt, strides);
}

memory::desc any_like(const memory::desc& md) {
    return memory::desc(md.dims(), md.data_type(), tag::any);
}

struct geometry {
    memory::dims strides, dilates, pad_l, pad_r;
};

geometry geometry_of(const conv_desc& d) {
    return {spatial(d.s, d.nsp), spatial(d.d, d.nsp), spatial(d.p, d.nsp), spatial(d.p_end, d.nsp)};
}

}  // namespace

struct backward_op::state {
    dnnl::engine eng{dnnl::engine::kind::cpu, 0};
    dnnl::stream strm{eng};
    layouts mode = layouts::preferred;
    dnnl::primitive prim;
    std::string impl;

    struct argument {
        int id = 0;
        memory::desc plain, internal;
        memory plain_mem, internal_mem;
        dnnl::reorder to_internal, to_plain;
        bool needs_reorder() const { return plain != internal; }
    };
    static argument arg(int id, const memory::desc& plain, const memory::desc& internal) {
        argument a;
        a.id = id;
        a.plain = plain;
        a.internal = internal;
        return a;
    }
    std::array<argument, 3> args;  // input0, input1, output

};

namespace {

// The backward primitive with its forward hint. `tensors` are the plain
// (src, weights, dst) descs of the convolution or deconvolution; oneDNN
// chooses its layouts (format any); ids / plain name the op's input0,
// input1 and output.
template <class Fwd, class Bwd>
void build(backward_op::state& s, dnnl::algorithm alg, const std::array<memory::desc, 3>& tensors,
           const geometry& g, const std::array<int, 3>& ids, const std::array<memory::desc, 3>& plain) {
    const memory::desc src = any_like(tensors[0]), wei = any_like(tensors[1]), dst = any_like(tensors[2]);
    const typename Fwd::primitive_desc hint(
        {dnnl::prop_kind::forward_training, alg, src, wei, dst, g.strides, g.dilates, g.pad_l, g.pad_r}, s.eng);
    const typename Bwd::primitive_desc pd({alg, src, wei, dst, g.strides, g.dilates, g.pad_l, g.pad_r}, s.eng, hint);
    s.prim = Bwd(pd);
    s.impl = pd.impl_info_str();
    for (int a = 0; a < 3; ++a)
        s.args[a] = backward_op::state::arg(ids[a], plain[a], pd.query_md(dnnl::query::exec_arg_md, ids[a]));
}

}  // namespace

backward_op::backward_op(const conv_desc& d, op_kind kind, data_type dt, layouts mode,
                         const std::string& data_format, const std::string& weights_format)
    : s_(std::make_unique<state>()) {
    using namespace dnnl;
    if (kind == op_kind::conv_transpose_bwd_weights ? d.kind != desc_kind::deconv : d.kind != desc_kind::conv)
        throw std::runtime_error("oneDNN: descriptor kind does not match the op");
    s_->mode = mode;
    const memory::data_type t = to_dnnl(dt);
    const bool transpose = kind == op_kind::conv_transpose_bwd_weights;
    if (data_format != "NXC" && data_format != "NCX")
        throw std::runtime_error("oneDNN peer: no data format " + data_format);
    const bool ncx = data_format == "NCX";
    const memory::desc src = data_desc(d.mb, d.ic, spatial(d.i, d.nsp), t, ncx);
    const memory::desc dst = data_desc(d.mb, d.oc, spatial(d.o, d.nsp), t, ncx);
    const memory::desc wei = weights_desc(d, transpose, weights_format.empty() ? "XIO" : weights_format, t);
    const geometry geo = geometry_of(d);
    const auto alg = transpose ? algorithm::deconvolution_direct : algorithm::convolution_direct;
    try {
        if (kind == op_kind::conv_bwd_data)
            build<convolution_forward, convolution_backward_data>(
                *s_, alg, {src, wei, dst}, geo, {DNNL_ARG_DIFF_DST, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_SRC}, {dst, wei, src});
        else if (!transpose)
            build<convolution_forward, convolution_backward_weights>(
                *s_, alg, {src, wei, dst}, geo, {DNNL_ARG_SRC, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_WEIGHTS}, {src, dst, wei});
        else
            build<deconvolution_forward, deconvolution_backward_weights>(
                *s_, alg, {src, wei, dst}, geo, {DNNL_ARG_SRC, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_WEIGHTS}, {src, dst, wei});
    } catch (const dnnl::error& e) {
        throw std::runtime_error(std::string("oneDNN: no implementation (") + e.what() + ")");
    }
}

backward_op::~backward_op() = default;
backward_op::backward_op(backward_op&&) noexcept = default;

void backward_op::bind(const void* input0, const void* input1, void* output) {
    void* ptrs[3] = {const_cast<void*>(input0), const_cast<void*>(input1), output};
    for (int a = 0; a < 3; ++a) {
        state::argument& arg = s_->args[a];
        arg.plain_mem = memory(arg.plain, s_->eng, ptrs[a]);
        arg.internal_mem = arg.needs_reorder() ? memory(arg.internal, s_->eng) : arg.plain_mem;
        if (!arg.needs_reorder()) continue;
        if (a < 2) arg.to_internal = dnnl::reorder(arg.plain_mem, arg.internal_mem);
        else arg.to_plain = dnnl::reorder(arg.internal_mem, arg.plain_mem);
    }
    if (s_->mode == layouts::preferred)
        for (int a = 0; a < 2; ++a)
            if (s_->args[a].needs_reorder())
                s_->args[a].to_internal.execute(s_->strm, s_->args[a].plain_mem, s_->args[a].internal_mem);
    s_->strm.wait();
}

void backward_op::execute() {
    const bool plain = s_->mode == layouts::plain;
    if (plain)
        for (int a = 0; a < 2; ++a)
            if (s_->args[a].needs_reorder())
                s_->args[a].to_internal.execute(s_->strm, s_->args[a].plain_mem, s_->args[a].internal_mem);
    std::unordered_map<int, memory> exec_args;
    for (const state::argument& arg : s_->args) exec_args[arg.id] = arg.internal_mem;
    s_->prim.execute(s_->strm, exec_args);
    if (plain && s_->args[2].needs_reorder())
        s_->args[2].to_plain.execute(s_->strm, s_->args[2].internal_mem, s_->args[2].plain_mem);
    s_->strm.wait();
}

void backward_op::finish() {
    if (s_->mode == layouts::preferred && s_->args[2].needs_reorder())
        s_->args[2].to_plain.execute(s_->strm, s_->args[2].internal_mem, s_->args[2].plain_mem);
    s_->strm.wait();
}

std::string backward_op::impl() const { return s_->impl; }

void set_threads(int threads) { omp_set_num_threads(threads); }

}  // namespace convgrad::cli::onednn
