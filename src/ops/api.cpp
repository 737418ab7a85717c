// The public API: names, attributes by spec name, and convgrad::op.
#include <tbb/task_arena.h>

#include <chrono>
#include <cstdio>
#include <sstream>

#include "convgrad/convgrad.hpp"
#include "jit/isa.hpp"
#include "jit/kernel_cache.hpp"
#include "ops/executor.hpp"
#include "ops/plan_cache.hpp"
#include "ops/problem.hpp"
#include "ops/scratch.hpp"

namespace convgrad {

using detail::Problem;

const char* op_name(op_kind kind) {
    switch (kind) {
        case op_kind::conv_bwd_weights: return "ConvolutionBackwardWeights";
        case op_kind::conv_transpose_bwd_weights: return "ConvTransposeBackwardWeights";
        case op_kind::conv_bwd_data: return "ConvolutionBackwardData";
    }
    return "?";
}

op_kind parse_op_kind(std::string_view name) {
    if (name == "ConvolutionBackwardWeights" || name == "ConvolutionBackpropWeights-1" ||
        name == "ConvolutionBackpropFilters-1")
        return op_kind::conv_bwd_weights;
    if (name == "ConvTransposeBackwardWeights") return op_kind::conv_transpose_bwd_weights;
    if (name == "ConvolutionBackwardData") return op_kind::conv_bwd_data;
    throw error("op name: expected one of ConvolutionBackwardWeights, ConvTransposeBackwardWeights, "
                "ConvolutionBackwardData, ConvolutionBackpropWeights-1, ConvolutionBackpropFilters-1, "
                "given \"" + std::string(name) + "\"");
}

const char* dtype_name(data_type dt) {
    switch (dt) {
        case data_type::f32: return "f32";
        case data_type::bf16: return "bf16";
        case data_type::f16: return "f16";
    }
    return "?";
}

data_type parse_data_type(std::string_view name) {
    for (data_type dt : {data_type::f32, data_type::bf16, data_type::f16})
        if (name == dtype_name(dt)) return dt;
    throw error("data type: expected one of f32, bf16, f16, given \"" + std::string(name) + "\"");
}

std::string max_isa() { return detail::isa_name(detail::effective_isa()); }

size_t clear_kernel_cache() {
    detail::clear_plan_caches();
    return detail::clear_kernel_caches();
}

size_t release_scratch() { return detail::release_scratch(); }

namespace {

// Plans print as multi-line loop nests; a verbose record stays on one line.
std::string one_line(std::string s) {
    for (size_t pos = 0; (pos = s.find('\n', pos)) != std::string::npos;) s.replace(pos, 1, " | ");
    return s;
}

double ms_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

[[noreturn]] void bad_kind(std::string_view name, const char* expected) {
    throw error("attribute " + std::string(name) + ": expected " + expected);
}

dims* list_attr(attributes& a, std::string_view name) {
    if (name == "strides") return &a.strides;
    if (name == "pads_begin") return &a.pads_begin;
    if (name == "pads_end") return &a.pads_end;
    if (name == "dilations") return &a.dilations;
    if (name == "weights_shape" || name == "filter_shape") return &a.weights_shape;
    if (name == "dst_shape") return &a.dst_shape;
    if (name == "output_padding") return &a.output_padding;
    return nullptr;
}

std::string* string_attr(attributes& a, std::string_view name) {
    if (name == "auto_pad") return &a.auto_pad;
    if (name == "data_format") return &a.data_format;
    if (name == "weights_format" || name == "filter_format") return &a.weights_format;
    return nullptr;
}

[[noreturn]] void unknown_attr(std::string_view name) {
    throw error("attribute name: expected one of strides, pads_begin, pads_end, dilations, auto_pad, "
                "groups, data_format, weights_format (filter_format), weights_shape (filter_shape), "
                "dst_shape, output_padding, given \"" + std::string(name) + "\"");
}

}  // namespace

void attributes::set(std::string_view name, const dims& value) {
    if (dims* d = list_attr(*this, name)) {
        *d = value;
        return;
    }
    if (string_attr(*this, name) || name == "groups") bad_kind(name, "a single value, given a list");
    unknown_attr(name);
}

void attributes::set(std::string_view name, int64_t value) {
    if (name == "groups") {
        groups = value;
        return;
    }
    if (list_attr(*this, name)) bad_kind(name, "a list of integers, given a single integer");
    if (string_attr(*this, name)) bad_kind(name, "a string, given an integer");
    unknown_attr(name);
}

void attributes::set(std::string_view name, std::string_view value) {
    if (std::string* s = string_attr(*this, name)) {
        *s = std::string(value);
        return;
    }
    if (list_attr(*this, name) || name == "groups") bad_kind(name, "integers, given a string");
    unknown_attr(name);
}

struct op::impl {
    Problem problem;
    std::unique_ptr<detail::Executor> exec;
};

op::op(op_kind kind, data_type dt, const attributes& attrs, const dims& input0_dims,
       const dims& input1_dims, const std::vector<int32_t>* shape_input) {
    const auto t0 = std::chrono::steady_clock::now();
    auto p = std::make_shared<impl>();
    p->problem = detail::make_problem(kind, dt, attrs, input0_dims, input1_dims, shape_input);
    p->exec = detail::make_executor(p->problem);
    impl_ = std::move(p);
    if (detail::verbose_log())  // CONVGRAD_VERBOSE: a line per op created
        std::fprintf(stderr, "convgrad,create,%s,%.3f ms\n", one_line(describe()).c_str(),
                     ms_since(t0));
}

op_kind op::kind() const { return impl_->problem.kind; }
data_type op::dtype() const { return impl_->problem.dt; }
const dims& op::output_dims() const { return impl_->problem.output_dims; }
int64_t op::input0_elems() const { return impl_->problem.input0_elems; }
int64_t op::input1_elems() const { return impl_->problem.input1_elems; }
int64_t op::output_elems() const { return impl_->problem.output_elems; }
double op::flops() const { return impl_->problem.flops(); }

void op::execute(const void* input0, const void* input1, void* output) const {
    const Problem& p = impl_->problem;
    const std::string_view name = op_name(p.kind);  // no allocation unless an error is thrown
    if (!input0) throw error(std::string(name) + ": input 0: expected a buffer, given a null pointer");
    if (!input1) throw error(std::string(name) + ": input 1: expected a buffer, given a null pointer");
    if (!output) throw error(std::string(name) + ": output: expected a buffer, given a null pointer");
    const size_t es = detail::dtype_size(p.dt);
    auto overlaps = [&](const void* in, int64_t in_elems) {
        const auto a = reinterpret_cast<uintptr_t>(in), b = reinterpret_cast<uintptr_t>(output);
        return a < b + static_cast<size_t>(p.output_elems) * es &&
               b < a + static_cast<size_t>(in_elems) * es;
    };
    if (overlaps(input0, p.input0_elems) || overlaps(input1, p.input1_elems))
        throw error(std::string(name) + ": output: expected a buffer disjoint from the inputs, given one that overlaps");
    const auto t0 = std::chrono::steady_clock::now();
    impl_->exec->run(input0, input1, output);
    if (detail::verbose_log())  // a line per execute, with the scratch all threads keep (release_scratch)
        std::fprintf(stderr, "convgrad,execute,%s,%.3f ms,%.2f MiB scratch kept\n",
                     one_line(impl_->exec->describe()).c_str(), ms_since(t0),
                     static_cast<double>(detail::kept_scratch_bytes()) / (1 << 20));
}

std::string op::describe() const {
    std::ostringstream os;
    os << impl_->exec->describe() << " threads=" << impl_->exec->threads();
    return os.str();
}

}  // namespace convgrad
