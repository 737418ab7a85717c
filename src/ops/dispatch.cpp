// The dispatch list: the best implementation that accepts the Problem wins.
#include <tbb/task_arena.h>

#include "jit/isa.hpp"
#include "ops/executor.hpp"
#include "ref/reference.hpp"

namespace convgrad::detail {
namespace {

class RefExecutor final : public Executor {
public:
    explicit RefExecutor(const Problem& p) : p_(p) {}
    void run(const void* in0, const void* in1, void* out) const override {
        reference_execute(p_, in0, in1, out);
    }
    std::string describe() const override { return "ref: " + p_.to_string(); }

private:
    Problem p_;
};

}  // namespace

std::unique_ptr<Executor> make_executor(const Problem& p) {
    (void)effective_isa();  // validates CONVGRAD_MAX_ISA even before JIT paths exist
    return std::make_unique<RefExecutor>(p);
}

}  // namespace convgrad::detail
