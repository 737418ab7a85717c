// convgrad: JIT-compiled CPU kernels for the backward convolution ops of the
// oneDNN Graph spec (ConvolutionBackwardWeights, ConvTransposeBackwardWeights,
// ConvolutionBackwardData).
//
// The public surface is this one header. Every validation failure throws
// convgrad::error with a message naming the op, the attribute or tensor, and
// the expected and given values; nothing is ever written to an output buffer
// when an error is thrown.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace convgrad {

enum class op_kind { conv_bwd_weights, conv_transpose_bwd_weights, conv_bwd_data };
enum class data_type { f32, bf16, f16 };
using dims = std::vector<int64_t>;

// Op attributes with the spec's names. Vectors have one entry per spatial
// dimension; an empty pads_begin/pads_end is allowed only when auto_pad is not
// "none", an empty dilations means all ones, an empty output_padding all zeros.
struct attributes {
    dims strides, pads_begin, pads_end, dilations;  // one entry per spatial dim
    std::string auto_pad = "none";   // none | same_upper | same_lower | valid (any letter case)
    int64_t groups = 1;
    std::string data_format = "NXC";     // NXC | NCX
    std::string weights_format = "XIO";  // XIO | OIX; conv_transpose_bwd_weights also IOX | XOI
    dims weights_shape;  // bwd-weights ops: diff_weights dims in weights_format
    dims dst_shape;      // conv_bwd_data: diff_src dims in data_format
    dims output_padding; // empty = zeros

    // Set an attribute by its spec name (as in a framework graph). Accepts the
    // legacy names filter_format / filter_shape for weights_format /
    // weights_shape. Throws convgrad::error for an unknown name or a value of
    // the wrong kind (e.g. a list for "groups").
    void set(std::string_view name, const dims& value);
    void set(std::string_view name, int64_t value);
    void set(std::string_view name, std::string_view value);
};

// Every validation failure. what() names the op, the attribute or tensor, and
// the expected and the given value.
class error : public std::invalid_argument {
public:
    using std::invalid_argument::invalid_argument;
};

// Spec op names -> op_kind. Accepts ConvolutionBackwardWeights,
// ConvTransposeBackwardWeights, ConvolutionBackwardData and the legacy
// aliases ConvolutionBackpropWeights-1 and ConvolutionBackpropFilters-1
// (both ConvolutionBackwardWeights). Throws convgrad::error otherwise.
op_kind parse_op_kind(std::string_view spec_name);
// The spec name of an op kind ("ConvolutionBackwardWeights", ...).
const char* op_name(op_kind kind);
const char* dtype_name(data_type dt);  // "f32" | "bf16" | "f16"
data_type parse_data_type(std::string_view name);  // throws convgrad::error

// The best implementation this process may use: the CPU's, capped by the
// environment variable CONVGRAD_MAX_ISA = ref | avx2 | avx512_core |
// avx512_core_bf16 | amx. Returns one of those names.
std::string max_isa();

// Drops every JIT kernel the process has cached and returns how many there
// were (0 when only the reference path ran), and every cached plan with
// them. Ops already created keep their kernels; the next op that needs one
// builds it again. For embedders that want the code memory back, and for
// timing op creation from cold (convgrad-bench --impl=create). Safe to call
// from any thread at any time.
//
// Creating an op whose problem (shapes, attributes, layouts, type), ISA and
// thread count equal an earlier op's reuses that op's plan and kernels: a
// few microseconds (frameworks creating their ops on every step pay the
// planner's search once per layer). Plans are kept for the last
// CONVGRAD_PLAN_CACHE_CAPACITY distinct problems (default 1024; 0: none).
size_t clear_kernel_cache();

// Scratch memory: execute() needs scratch on some plans (NCX transposes,
// packed weights, f32 partial sums of weight gradients, ...). Each thread
// that runs part of an execute keeps its scratch buffers, up to 512 MiB
// each, for its next execute, since fresh pages cost as much as a
// memory-bound layer's work; a larger buffer is freed when the execute
// ends. This frees every kept buffer that no running execute is using, on
// every thread, and returns their total bytes. Safe to call from any
// thread at any time; the next execute allocates again.
size_t release_scratch();

class op {
public:
    // input0_dims / input1_dims: logical dims of inputs 0 and 1 in the spec's
    // index order (bwd weights: src, diff_dst; bwd data: diff_dst, weights),
    // in data_format / weights_format.
    // shape_input: the optional input 2 (s32 values); when given it wins over
    // the attribute.
    op(op_kind kind, data_type dt, const attributes& attrs, const dims& input0_dims,
       const dims& input1_dims, const std::vector<int32_t>* shape_input = nullptr);

    op_kind kind() const;
    data_type dtype() const;
    const dims& output_dims() const;
    // Element counts of the two inputs and of the output.
    int64_t input0_elems() const;
    int64_t input1_elems() const;
    int64_t output_elems() const;
    // Multiply-add count times two over every kernel tap, padding taps included
    // (2·mb·g·(oc/g)·(ic/g)·k_spatial·o_spatial; benchdnn's own count leaves
    // the padding taps out).
    double flops() const;

    // Dense row-major buffers in the logical dims' order; bf16/f16 elements
    // are uint16_t bit patterns. Safe to call concurrently from many threads
    // on one op. Uses tbb::this_task_arena::max_concurrency() threads (the
    // calling thread alone for JIT weight gradients of at most 0.5 Mflop and
    // data gradients of at most 0.05 Mflop); the results are bitwise the
    // same for any thread count.
    // Throws convgrad::error (writing nothing) for a null pointer or an output
    // buffer that overlaps an input buffer.
    void execute(const void* input0, const void* input1, void* output) const;

    // Implementation first ("ref", "jit:avx512_core", ...), then the plan
    // and the thread count.
    std::string describe() const;

    struct impl;

private:
    std::shared_ptr<const impl> impl_;
};

}  // namespace convgrad
