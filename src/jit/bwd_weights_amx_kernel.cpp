#include "jit/bwd_weights_amx_kernel.hpp"

#include <cstddef>
#include <string>

#include "jit/bwd_data_amx_kernel.hpp"
#include "jit/kernel_cache.hpp"

namespace convgrad::detail {

using namespace Xbyak::util;  // register names
using Xbyak::Reg64;
using Xbyak::Tmm;

WeightsAmxKernel::WeightsAmxKernel(const WeightsAmxDesc& d)
    : JitKernel(d.taps == 0 ? std::string("weights_amx") : "weights_amx_half_t" + std::to_string(d.taps)), d_(d) {}

// The 2 x 2 kernel's tiles: 0-3 the accumulators (input-channel tile i,
// oc tile j in 2i + j), 4-5 the A tiles, 6-7 the B tiles; its two A
// pointers 0 and a_half apart. The half kernels': 0 .. taps-1 the
// accumulators, 3 .. 3+taps-1 the A tiles, 6 the B tile; an A pointer a
// tap, its shift apart from the row's A. Registers: rsi args, r8 the row
// pairs, r9 rows left, rcx steps left, rax / rdx / rdi the A pointers,
// rbx the B rows, r10 the A pitch, r11 the B pitch (128), r15 / r12 / r13
// the A pointers' shifts (2 x 2: r12 the A half), r14 the A step.
void WeightsAmxKernel::generate() {
    const bool half = d_.taps != 0;
    const int na = half ? d_.taps : 2;  // A pointers
    const Reg64 args = rsi, rows = r8, rows_left = r9, steps = rcx, b = rbx, a_pitch = r10, b_pitch = r11,
                a_step = r14;
    const Reg64 a[3] = {rax, rdx, rdi}, shift[3] = {r15, r12, r13};
    Xbyak::Label l_zero, l_rows, l_row, l_step, l_done;
    preamble(5);  // rbx, r12-r15
    mov(args, rdi);
    mov(rax, ptr[args + offsetof(WeightsAmxArgs, config)]);
    ldtilecfg(ptr[rax]);
    // The accumulators from or to acc (rax, rows rdx apart): 2 x 2, two
    // rows of two tiles, 16 input channels (rdi) apart; halves, a tile a
    // tap, acc_tap (rdi) apart.
    const int groups = half ? d_.taps : 2, per = half ? 1 : 2;
    auto acc_tiles = [&](bool store) {
        mov(rax, ptr[args + offsetof(WeightsAmxArgs, acc)]);
        mov(rdx, ptr[args + offsetof(WeightsAmxArgs, acc_row)]);
        if (half) {
            mov(rdi, ptr[args + offsetof(WeightsAmxArgs, acc_tap)]);
        } else {
            mov(rdi, rdx);
            shl(rdi, 4);
        }
        for (int g = 0; g < groups; ++g) {
            for (int j = 0; j < per; ++j) {
                if (store)
                    tilestored(ptr[rax + rdx + 64 * j], Tmm(per * g + j));
                else
                    tileloadd(Tmm(per * g + j), ptr[rax + rdx + 64 * j]);
            }
            if (g + 1 < groups) add(rax, rdi);
        }
    };
    cmp(qword[args + offsetof(WeightsAmxArgs, load)], 0);
    je(l_zero);
    acc_tiles(false);
    jmp(l_rows);
    L(l_zero);
    for (int t = 0; t < groups * per; ++t) tilezero(Tmm(t));
    L(l_rows);
    mov(a_pitch, ptr[args + offsetof(WeightsAmxArgs, a_pitch)]);
    mov(b_pitch, 128);
    mov(a_step, ptr[args + offsetof(WeightsAmxArgs, a_step)]);
    if (half)
        for (int t = 0; t < na; ++t) mov(shift[t], ptr[args + offsetof(WeightsAmxArgs, shift) + 8 * t]);
    else
        mov(shift[1], ptr[args + offsetof(WeightsAmxArgs, a_half)]);
    mov(rows, ptr[args + offsetof(WeightsAmxArgs, rows)]);
    mov(rows_left, ptr[args + offsetof(WeightsAmxArgs, nrows)]);
    test(rows_left, rows_left);
    jz(l_done);
    L(l_row);
    mov(a[0], ptr[rows]);
    add(a[0], ptr[args + offsetof(WeightsAmxArgs, a)]);
    for (int t = na - 1; t > 0; --t) lea(a[t], ptr[a[0] + shift[t]]);
    if (half) add(a[0], shift[0]);
    mov(b, ptr[rows + 8]);
    add(b, ptr[args + offsetof(WeightsAmxArgs, b)]);
    mov(steps, ptr[args + offsetof(WeightsAmxArgs, steps)]);
    L(l_step);
    if (half) {
        tileloadd(Tmm(6), ptr[b + b_pitch]);
        for (int t = 0; t < na; ++t) {
            tileloadd(Tmm(3 + t), ptr[a[t] + a_pitch]);
            tdpbf16ps(Tmm(t), Tmm(3 + t), Tmm(6));
        }
    } else {
        amx_step_2x2(*this, ptr[a[0] + a_pitch], ptr[a[1] + a_pitch], b, b_pitch);
    }
    for (int t = 0; t < na; ++t) add(a[t], a_step);
    add(b, 16 * 128);
    dec(steps);
    jnz(l_step);
    add(rows, 16);
    dec(rows_left);
    jnz(l_row);
    L(l_done);
    acc_tiles(true);
    tilerelease();
    postamble();
}

std::shared_ptr<const WeightsAmxKernel> get_weights_amx_kernel(const WeightsAmxDesc& d, bool* hit) {
    static KernelCache<WeightsAmxDesc, WeightsAmxKernel> cache;
    return get_finalized(cache, d, hit);
}

}  // namespace convgrad::detail
