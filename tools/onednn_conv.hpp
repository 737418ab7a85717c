// The same backward op on oneDNN 2.6 (Debian libdnnl-dev), as a peer for the
// bench and a cross-check for the tests. Compiled only when CMake found
// oneDNN (then CONVGRAD_HAVE_DNNL is defined); this header needs no oneDNN.
//
// Buffers are in convgrad's layouts (docs/SEMANTICS.md): NXC (default) or
// NCX activations, XIO (default) or OIX weights (ConvTranspose also IOX and
// XOI), dense, bf16 as raw bits.
#pragma once

#include <convgrad/convgrad.hpp>

#include <memory>
#include <string>

#include "descriptor.hpp"

namespace convgrad::cli::onednn {

enum class layouts {
    preferred,  // oneDNN picks blocked layouts; reorders happen outside execute()
    plain,      // fed the plain tensors as they are; the reorders are part of execute()
};

class backward_op {
public:
    // kind bwd_w / bwd_d read a conv descriptor, deconv_bwd_w a deconv one;
    // the plain buffers' formats as convgrad names them (empty weights
    // format: XIO). Throws std::runtime_error when oneDNN has no
    // implementation or a format is unknown.
    backward_op(const conv_desc& d, op_kind kind, data_type dt, layouts mode, const std::string& data_format = "NXC",
                const std::string& weights_format = "");
    ~backward_op();
    backward_op(backward_op&&) noexcept;

    // Binds the plain buffers (input0, input1 in the spec's order; output).
    // preferred: also reorders the inputs into oneDNN's layouts (untimed).
    void bind(const void* input0, const void* input1, void* output);
    void execute();  // the timed part
    // preferred: reorders the result into the plain output buffer (untimed).
    void finish();
    std::string impl() const;  // oneDNN's implementation name, e.g. "jit:avx512_core"

    struct state;  // oneDNN objects (defined in onednn_conv.cpp only)

private:
    std::unique_ptr<state> s_;
};

// Sets oneDNN's (OpenMP) thread count.
void set_threads(int threads);

}  // namespace convgrad::cli::onednn
