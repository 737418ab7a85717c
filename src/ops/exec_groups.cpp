// Grouped layers on the AMX tiles (executor.hpp): the blocks of 32 output
// channels each block of 32 input channels reads.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "jit/bwd_data_amx_kernel.hpp"
#include "ops/executor.hpp"

namespace convgrad::detail {

int64_t amx_group_blocks(const Problem& p, std::vector<int64_t>* first) {
    const int64_t ic = p.ic(), blocks = div_up(ic, kAmxBlockC), all = div_up(p.oc(), kAmxStepOc);
    int64_t n = 0;
    first->clear();
    for (int64_t ib = 0; ib < blocks; ++ib) {
        const int64_t g0 = ib * kAmxBlockC / p.icg, g1 = (std::min(ib * kAmxBlockC + kAmxBlockC, ic) - 1) / p.icg;
        first->push_back(g0 * p.ocg / kAmxStepOc);
        n = std::max(n, div_up((g1 + 1) * p.ocg, kAmxStepOc) - first->back());
    }
    for (int64_t& f : *first) f = std::min(f, all - n);
    return n;
}

double amx_used_share(const Problem& p, const std::vector<int64_t>& first, int64_t blocks) {
    const double tiles = double(static_cast<int64_t>(first.size()) * kAmxBlockC) * double(blocks * kAmxStepOc);
    return double(p.ic()) * double(p.ocg) / tiles;
}

double amx_used_share(const Problem& p) {
    std::vector<int64_t> first;
    const int64_t blocks = amx_group_blocks(p, &first);
    return amx_used_share(p, first, blocks);
}

}  // namespace convgrad::detail
