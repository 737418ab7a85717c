#include "jit/bwd_data_amx_kernel.hpp"

#include <string>

#include "convgrad/convgrad.hpp"
#include "jit/isa.hpp"
#include "jit/kernel_cache.hpp"
#include "jit/vec_cvt.hpp"
#include "jit/vec_isa.hpp"

namespace convgrad::detail {

using namespace Xbyak::util;  // register names
using Xbyak::Reg64;
using Xbyak::Tmm;
using Xbyak::Zmm;

const void* amx_tile_config() {
    struct alignas(64) Config {
        uint8_t bytes[64];
    };
    static const Config config = [] {
        Config c{};
        c.bytes[0] = 1;  // palette 1
        for (int t = 0; t < 8; ++t) {
            c.bytes[16 + 2 * t] = 64;  // colsb[t] (u16, little-endian)
            c.bytes[48 + t] = 16;      // rows[t]
        }
        return c;
    }();
    return config.bytes;
}

void amx_step_2x2(Xbyak::CodeGenerator& g, const Xbyak::Address& a0, const Xbyak::Address& a1,
                  const Xbyak::Reg64& b, const Xbyak::Reg64& b_pitch) {
    g.tileloadd(Tmm(4), a0);
    g.tileloadd(Tmm(6), g.ptr[b + b_pitch]);
    g.tileloadd(Tmm(7), g.ptr[b + b_pitch + 64]);
    g.tdpbf16ps(Tmm(0), Tmm(4), Tmm(6));
    g.tileloadd(Tmm(5), a1);
    g.tdpbf16ps(Tmm(1), Tmm(4), Tmm(7));
    g.tdpbf16ps(Tmm(2), Tmm(5), Tmm(6));
    g.tdpbf16ps(Tmm(3), Tmm(5), Tmm(7));
}

DataAmxKernel::DataAmxKernel(const DataAmxDesc& d)
    : JitKernel("data_amx_c" + std::to_string(d.channels)),
      d_(d) {}

// Tiles: 0-3 the accumulators (position tile i, channel tile j in 2i + j),
// 4-5 the A tiles, 6-7 the W tiles. Registers: rsi args, r13 the block's
// A, r14 blocks left, r15 the block's rows; in the tap loop r8 the tap
// pairs, r9 taps left, rcx steps left, rax / rdi the two A tiles' rows,
// rdx a_step, rbx the W rows, r10 / r11 the A / W row strides; r12 acc.
void DataAmxKernel::generate() {
    const Reg64 args = rsi, a_blk = r13, blocks = r14, rows = r15, taps = r8, taps_left = r9, steps = rcx, a0 = rax,
                a_step = rdx, b = rbx, a_row = r10, b_row = r11, acc = r12, tmp = rdi, a1 = rdi;
    Xbyak::Label l_block, l_tap, l_step;
    preamble(5);  // rbx, r12-r15
    mov(args, rdi);
    mov(tmp, ptr[args + offsetof(DataAmxArgs, config)]);
    ldtilecfg(ptr[tmp]);
    mov(a_blk, ptr[args + offsetof(DataAmxArgs, a)]);
    mov(blocks, ptr[args + offsetof(DataAmxArgs, blocks)]);
    mov(rows, ptr[args + offsetof(DataAmxArgs, rows)]);
    mov(acc, ptr[args + offsetof(DataAmxArgs, acc)]);
    VecIsa vi(*this, Isa::avx512_core_bf16);
    VecCvt cvt(*this, vi, Isa::avx512_core_bf16);
    const int full = d_.channels / 16, tail = d_.channels % 16;
    if (tail) vi.set_tail(tail, tmp, 0);  // k1 for every block's stores

    L(l_block);
    for (int t = 0; t < 4; ++t) tilezero(Tmm(t));
    mov(a_row, ptr[args + offsetof(DataAmxArgs, a_row)]);
    mov(b_row, kAmxBlockC * 4);
    mov(a_step, ptr[args + offsetof(DataAmxArgs, a_step)]);
    mov(taps, ptr[args + offsetof(DataAmxArgs, taps)]);
    mov(taps_left, ptr[args + offsetof(DataAmxArgs, ntaps)]);
    L(l_tap);
    mov(a0, ptr[taps]);
    add(a0, a_blk);
    mov(a1, a0);
    add(a1, ptr[args + offsetof(DataAmxArgs, a_half)]);  // 16 positions on
    mov(b, ptr[taps + 8]);
    add(b, ptr[args + offsetof(DataAmxArgs, b)]);
    mov(steps, ptr[args + offsetof(DataAmxArgs, steps)]);
    L(l_step);
    amx_step_2x2(*this, ptr[a0 + a_row], ptr[a1 + a_row], b, b_row);
    add(a0, a_step);
    add(a1, a_step);
    add(b, kAmxStepOc / 2 * kAmxBlockC * 4);
    dec(steps);
    jnz(l_step);
    add(taps, 16);
    dec(taps_left);
    jnz(l_tap);

    // The accumulators to acc ([32][32] f32, 128 bytes a row), then rounded
    // row by row into the named destinations.
    mov(a_row, kAmxBlockC * 4);
    for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 2; ++j) tilestored(ptr[acc + a_row + (i * 16 * kAmxBlockC + j * 16) * 4], Tmm(2 * i + j));
    const Zmm v(0), t0(1), t1(2);
    for (int m = 0; m < kAmxBlockM; ++m) {
        Xbyak::Label l_skip;
        mov(a0, ptr[rows + m * 8]);
        test(a0, a0);
        jz(l_skip);
        for (int h = 0; h < full; ++h) {
            vmovups(v, ptr[acc + (m * kAmxBlockC + h * 16) * 4]);
            cvt.store(ptr[a0 + h * 32], v, data_type::bf16, t0, t1);
        }
        if (tail) {
            vmovups(v, ptr[acc + (m * kAmxBlockC + full * 16) * 4]);
            cvt.store_tail(ptr[a0 + full * 32], v, data_type::bf16, tail, t0, t1);
        }
        L(l_skip);
    }
    add(a_blk, ptr[args + offsetof(DataAmxArgs, a_block)]);
    add(rows, kAmxBlockM * 8);
    dec(blocks);
    jnz(l_block, T_NEAR);
    tilerelease();
    postamble();
    cvt.emit_constants();
}

std::shared_ptr<const DataAmxKernel> get_data_amx_kernel(const DataAmxDesc& d, bool* hit) {
    static KernelCache<DataAmxDesc, DataAmxKernel> cache;
    return get_finalized(cache, d, hit);
}

}  // namespace convgrad::detail
