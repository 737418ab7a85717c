// A grouped layer in NXC as its groups' dense problems, one after another
// on the same executor: group g's src, diff_dst and diff_src channels start
// g·(IC/G) and g·(OC/G) elements into each pixel, its weights at output
// channel g·(OC/G). The one-group problem keeps the tensors' strides, so
// its kernels step over the other groups' channels.
#include <cstdint>
#include <memory>
#include <sstream>
#include <string>

#include "ops/executor.hpp"

namespace convgrad::detail {
namespace {

class GroupLoopExecutor final : public Executor {
public:
    GroupLoopExecutor(const Problem& p, std::unique_ptr<Executor> inner) : p_(p), inner_(std::move(inner)) {
        const int64_t src = p.icg, dd = p.ocg, w = p.ocg * p.wei_str.o;
        if (p.alg == Alg::data) {
            step_ = {dd, w, src};
        } else {
            step_ = p.swap_inputs ? Steps{dd, src, w} : Steps{src, dd, w};
        }
    }
    void run(const void* in0, const void* in1, void* out) const override {
        const int64_t es = static_cast<int64_t>(dtype_size(p_.dt));
        for (int64_t g = 0; g < p_.g; ++g)
            inner_->run(static_cast<const char*>(in0) + g * step_.in0 * es,
                        static_cast<const char*>(in1) + g * step_.in1 * es,
                        static_cast<char*>(out) + g * step_.out * es);
    }
    std::string describe() const override {
        std::ostringstream os;
        os << inner_->describe() << "\n  for each of " << p_.g << " groups in turn (the above on the group's channels)";
        return os.str();
    }
    int threads() const override { return inner_->threads(); }

private:
    struct Steps {
        int64_t in0, in1, out;  // elements a group
    };
    Problem p_;
    std::unique_ptr<Executor> inner_;
    Steps step_{};
};

}  // namespace

Problem one_group(const Problem& p) {
    Problem q = p;
    q.g = 1;
    return q;
}

std::unique_ptr<Executor> make_group_loop_executor(const Problem& p, std::unique_ptr<Executor> inner) {
    return std::make_unique<GroupLoopExecutor>(p, std::move(inner));
}

}  // namespace convgrad::detail
