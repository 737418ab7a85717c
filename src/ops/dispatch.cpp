// The dispatch list: the best implementation that accepts the Problem wins.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>

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
    int threads() const override { return tbb::this_task_arena::max_concurrency(); }

private:
    Problem p_;
};

// A Problem run as its fold_full_kernel form: the same buffers, the plan
// of the 1x1 convolution.
class FoldedExecutor final : public Executor {
public:
    FoldedExecutor(std::unique_ptr<Executor> inner, int64_t channels)
        : inner_(std::move(inner)), channels_(channels) {}
    void run(const void* in0, const void* in1, void* out) const override { inner_->run(in0, in1, out); }
    std::string describe() const override {
        std::string d = inner_->describe();
        const size_t eol = d.find('\n');
        const std::string note =
                " (kernel covers the input: run as 1x1 on " + std::to_string(channels_) + " input channels)";
        return eol == std::string::npos ? d + note : d.insert(eol, note);
    }
    int threads() const override { return inner_->threads(); }

private:
    std::unique_ptr<Executor> inner_;
    int64_t channels_;
};

}  // namespace

bool verbose_log() {
    const char* v = std::getenv("CONVGRAD_VERBOSE");
    return v && *v && *v != '0';
}

int op_threads(const Problem& p) {
    const double most = p.kind == op_kind::conv_bwd_data ? kSerialMaxFlopsData : kSerialMaxFlops;
    return p.flops() <= most ? 1 : tbb::this_task_arena::max_concurrency();
}

std::unique_ptr<Executor> make_executor(const Problem& p) {
    const Isa isa = effective_isa();
    if (isa >= Isa::avx2) {
        std::string why;
        bool folded = false;
        const Problem q = fold_full_kernel(p, &folded);
        auto jit = q.alg == Alg::weights ? make_jit_weights_executor(q, isa, &why)
                                         : make_jit_data_executor(q, isa, &why);
        if (jit && folded) return std::make_unique<FoldedExecutor>(std::move(jit), q.icg);
        if (jit) return jit;
        if (verbose_log())
            std::fprintf(stderr, "convgrad,dispatch,%s declined: %s\n", isa_name(isa), why.c_str());
    }
    return std::make_unique<RefExecutor>(p);
}

}  // namespace convgrad::detail
