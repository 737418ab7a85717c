// Executor: what an op runs. Chosen once per op by the dispatch list in
// dispatch.cpp (best ISA first, the reference last).
#pragma once

#include <memory>
#include <string>

#include "ops/problem.hpp"

namespace convgrad::detail {

class Executor {
public:
    virtual ~Executor() = default;
    // The user's buffers in the op's index order. Must be safe to call
    // concurrently from many threads.
    virtual void run(const void* input0, const void* input1, void* output) const = 0;
    // Implementation name first, then the plan.
    virtual std::string describe() const = 0;
};

std::unique_ptr<Executor> make_executor(const Problem& p);

}  // namespace convgrad::detail
