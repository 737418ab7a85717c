// Scalar reference implementation of the three ops: plain loops over the
// convolution-view Problem, accumulation in double, one rounding at the end.
#pragma once

#include "ops/problem.hpp"

namespace convgrad::detail {

// input0 / input1 / output are the user's buffers, in the op's index order.
void reference_execute(const Problem& p, const void* input0, const void* input1, void* output);

}  // namespace convgrad::detail
