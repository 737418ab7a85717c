#include "jit/bwd_weights_amx_kernel.hpp"

#include <cstddef>

#include "jit/bwd_data_amx_kernel.hpp"
#include "jit/kernel_cache.hpp"

namespace convgrad::detail {

using namespace Xbyak::util;  // register names
using Xbyak::Reg64;
using Xbyak::Tmm;

WeightsAmxKernel::WeightsAmxKernel(const WeightsAmxDesc&) : JitKernel("weights_amx") {}

// Tiles: 0-3 the accumulators (input-channel tile i, oc tile j in
// 2i + j), 4-5 the A tiles, 6-7 the B tiles. Registers: rsi args, r8 the
// row pairs, r9 rows left, rcx steps left, rax / rdx the two A tiles'
// rows, rbx the B rows, r10 the A pitch, r11 the B pitch (128), r12 the
// A half, r13 acc, r14 the A step.
void WeightsAmxKernel::generate() {
    const Reg64 args = rsi, rows = r8, rows_left = r9, steps = rcx, a0 = rax, a1 = rdx, b = rbx, a_pitch = r10,
                b_pitch = r11, a_half = r12, acc = r13, a_step = r14;
    Xbyak::Label l_zero, l_rows, l_row, l_step, l_done;
    preamble(4);  // rbx, r12, r13, r14
    mov(args, rdi);
    mov(a0, ptr[args + offsetof(WeightsAmxArgs, config)]);
    ldtilecfg(ptr[a0]);
    mov(acc, ptr[args + offsetof(WeightsAmxArgs, acc)]);
    mov(a1, ptr[args + offsetof(WeightsAmxArgs, acc_row)]);
    cmp(qword[args + offsetof(WeightsAmxArgs, load)], 0);
    je(l_zero);
    lea(a0, ptr[acc + a1 * 8]);
    lea(a0, ptr[a0 + a1 * 8]);  // acc + 16 rows
    tileloadd(Tmm(0), ptr[acc + a1]);
    tileloadd(Tmm(1), ptr[acc + a1 + 64]);
    tileloadd(Tmm(2), ptr[a0 + a1]);
    tileloadd(Tmm(3), ptr[a0 + a1 + 64]);
    jmp(l_rows);
    L(l_zero);
    for (int t = 0; t < 4; ++t) tilezero(Tmm(t));
    L(l_rows);
    mov(a_pitch, ptr[args + offsetof(WeightsAmxArgs, a_pitch)]);
    mov(b_pitch, 128);
    mov(a_half, ptr[args + offsetof(WeightsAmxArgs, a_half)]);
    mov(a_step, ptr[args + offsetof(WeightsAmxArgs, a_step)]);
    mov(rows, ptr[args + offsetof(WeightsAmxArgs, rows)]);
    mov(rows_left, ptr[args + offsetof(WeightsAmxArgs, nrows)]);
    test(rows_left, rows_left);
    jz(l_done);
    L(l_row);
    mov(a0, ptr[rows]);
    add(a0, ptr[args + offsetof(WeightsAmxArgs, a)]);
    lea(a1, ptr[a0 + a_half]);
    mov(b, ptr[rows + 8]);
    add(b, ptr[args + offsetof(WeightsAmxArgs, b)]);
    mov(steps, ptr[args + offsetof(WeightsAmxArgs, steps)]);
    L(l_step);
    amx_step_2x2(*this, ptr[a0 + a_pitch], ptr[a1 + a_pitch], b, b_pitch);
    add(a0, a_step);
    add(a1, a_step);
    add(b, 16 * 128);
    dec(steps);
    jnz(l_step);
    add(rows, 16);
    dec(rows_left);
    jnz(l_row);
    L(l_done);
    mov(a1, ptr[args + offsetof(WeightsAmxArgs, acc_row)]);
    lea(a0, ptr[acc + a1 * 8]);
    lea(a0, ptr[a0 + a1 * 8]);
    tilestored(ptr[acc + a1], Tmm(0));
    tilestored(ptr[acc + a1 + 64], Tmm(1));
    tilestored(ptr[a0 + a1], Tmm(2));
    tilestored(ptr[a0 + a1 + 64], Tmm(3));
    tilerelease();
    postamble();
}

std::shared_ptr<const WeightsAmxKernel> get_weights_amx_kernel(bool* hit) {
    static KernelCache<WeightsAmxDesc, WeightsAmxKernel> cache;
    return get_finalized(cache, WeightsAmxDesc{}, hit);
}

}  // namespace convgrad::detail
