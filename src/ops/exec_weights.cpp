// JIT executor for the weight gradient (ConvolutionBackwardWeights and
// ConvTransposeBackwardWeights).
#include "ops/executor.hpp"

namespace convgrad::detail {

std::unique_ptr<Executor> make_jit_weights_executor(const Problem&, Isa, std::string* why) {
    *why = "no JIT weight-gradient kernel yet";
    return nullptr;
}

}  // namespace convgrad::detail
