// Executor: what an op runs. Chosen once per op by the dispatch list in
// dispatch.cpp (best ISA first, the reference last).
#pragma once

#include <memory>
#include <string>

#include "jit/isa.hpp"
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

// The dispatch list: the first implementation that accepts the Problem at
// the effective ISA (CONVGRAD_MAX_ISA) wins; the reference accepts all.
std::unique_ptr<Executor> make_executor(const Problem& p);

// JIT implementations. Each returns nullptr and sets *why (a short reason,
// printed under CONVGRAD_VERBOSE) when it declines the Problem.
std::unique_ptr<Executor> make_jit_weights_executor(const Problem& p, Isa isa, std::string* why);
std::unique_ptr<Executor> make_jit_data_executor(const Problem& p, Isa isa, std::string* why);

}  // namespace convgrad::detail
