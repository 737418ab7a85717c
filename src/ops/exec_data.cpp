// JIT executor for the data gradient (ConvolutionBackwardData).
#include "ops/executor.hpp"

namespace convgrad::detail {

std::unique_ptr<Executor> make_jit_data_executor(const Problem&, Isa, std::string* why) {
    *why = "no JIT data-gradient kernel yet";
    return nullptr;
}

}  // namespace convgrad::detail
