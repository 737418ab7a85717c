// The (p, c) tile search of the dot microkernel (jit/bwd_data_dot_kernel.hpp),
// shared by the paths that run it: the data gradient's inner products
// (exec_data_dot.cpp: p pixels x c input channels) and the 1x1 weight
// gradient's in NCX (exec_weights_dot.cpp: p output x c input channel rows).
#pragma once

#include <cstdint>

#include "jit/bwd_data_dot_kernel.hpp"
#include "jit/isa.hpp"

namespace convgrad::detail {

// The (tp, tc) of lowest cost(tp, tc) with 1 <= tp <= max_p, 1 <= tc <= max_c,
// whose accumulators and operands fit the ISA's vector registers and whose
// last row (tp - 1 rows of p_row bytes) and last channel (tc - 1 of c_row
// bytes) are 32-bit displacements. Ties (within 0.1 %) go to the tile with
// fewer loads per FMA, (tp + tc) / (tp * tc). Returns false when no tile fits;
// else sets *tp, *tc and *best (its cost).
template <class Cost>
bool choose_dot_tile(Isa isa, int max_p, int64_t max_c, int64_t p_row, int64_t c_row, Cost cost, int* tp, int* tc,
                     double* best) {
    const int regs = isa >= Isa::avx512_core ? 32 : 16;
    bool found = false;
    for (int p = 1; p <= max_p; ++p)
        for (int c = 1; c <= max_c && data_dot_vregs(isa, p, c) <= regs; ++c) {
            if ((p - 1) * p_row > INT32_MAX || (c - 1) * c_row > INT32_MAX) continue;
            const double v = cost(p, c);
            if (!found || v < *best * 0.999 || (v <= *best * 1.001 && (p + c) * *tp * *tc < (*tp + *tc) * p * c)) {
                *tp = p;
                *tc = c;
                *best = v;
                found = true;
            }
        }
    return found;
}

}  // namespace convgrad::detail
