#include "jit/bwd_data_ncx_kernel.hpp"

#include <algorithm>
#include <cstdint>
#include <string>

#include "jit/kernel_cache.hpp"
#include "jit/vec_cvt.hpp"
#include "jit/vec_isa.hpp"

namespace convgrad::detail {

using namespace Xbyak::util;  // register names

int data_ncx_vlen(Isa isa) { return isa >= Isa::avx512_core ? 16 : 8; }

int data_ncx_vregs(Isa isa, int m, int n, bool pairs) {
    return m * n + n + 1 + (isa >= Isa::avx512_core || pairs ? 0 : 1);
}

DataNcxKernel::DataNcxKernel(const DataNcxDesc& d)
    : JitKernel("bwd_d_ncx_" + std::string(isa_name(static_cast<Isa>(d.isa))) + "_" +
                dtype_name(static_cast<data_type>(d.dt)) + (d.pairs ? (d.odd ? "_pairs_odd" : "_pairs") : "") +
                "_m" + std::to_string(d.m) + "n" + std::to_string(d.n) +
                "_t" + std::to_string(d.tail) + "_dd" + std::to_string(d.dd_row_bytes) + "_wo" +
                std::to_string(d.w_o_bytes) + "_wi" + std::to_string(d.w_i_bytes) + "_out" +
                std::to_string(d.out_row_bytes)),
      d_(d) {}

// The end of a step over `rows` output channels: their lines of the next
// strip prefetched, the pointers moved on, back to `loop` while rcx > 0.
void DataNcxKernel::next_step(Xbyak::Label& loop, int rows) {
    for (int r = 0; r < rows; ++r) prefetcht1(ptr[r8 + static_cast<int32_t>(r * d_.dd_row_bytes)]);
    mov(rax, rows * d_.dd_row_bytes);
    add(r8, rax);
    add(rsi, rax);
    mov(rax, d_.w_o_bytes);
    add(rdi, rax);
    dec(rcx);
    jnz(loop);
}

// Register contract: rdi W, rsi diff_dst, rdx diff_src, rcx output
// channels left, r8 the next line to prefetch, rax scratch; vregs [0, n)
// diff_dst, n the broadcast, then the accumulators (AVX2: the last vreg is
// the tail mask).
void DataNcxKernel::generate() {
    if (d_.pairs) {
        generate_pairs();
        return;
    }
    const Isa isa = static_cast<Isa>(d_.isa);
    const data_type dt = static_cast<data_type>(d_.dt);
    VecIsa vi(*this, isa);
    VecCvt cvt(*this, vi, isa);
    const int es = dt == data_type::f32 ? 4 : 2;
    const int vin = vi.vlen() * es;  // bytes of a vector of pixels
    auto acc = [&](int i, int j) { return vi.vreg(d_.n + 1 + i * d_.n + j); };
    auto last = [&](int j) { return d_.tail > 0 && j == d_.n - 1; };
    Xbyak::Label l_loop, l_done;
    preamble(0);
    if (d_.tail > 0) vi.set_tail(d_.tail, rax, vi.num_vregs() - 1);
    for (int i = 0; i < d_.m; ++i)
        for (int j = 0; j < d_.n; ++j) vi.zero(acc(i, j));
    test(rcx, rcx);
    jz(l_done);
    L(l_loop);
    for (int j = 0; j < d_.n; ++j) {
        const Xbyak::Address a = ptr[rsi + j * vin];
        if (last(j))
            dt == data_type::f32 ? vi.load_tail(vi.vreg(j), a) : cvt.load_tail(vi.vreg(j), a, dt, d_.tail);
        else
            cvt.load(vi.vreg(j), a, dt);
    }
    const Xbyak::Xmm t = vi.vreg(d_.n);
    for (int i = 0; i < d_.m; ++i) {
        cvt.bcast(t, ptr[rdi + static_cast<int32_t>(i * d_.w_i_bytes)], dt);
        for (int j = 0; j < d_.n; ++j) vi.fma(acc(i, j), t, vi.vreg(j));
    }
    next_step(l_loop, 1);
    L(l_done);
    const int vout = vi.vlen() * es;
    for (int i = 0; i < d_.m; ++i)
        for (int j = 0; j < d_.n; ++j) {
            const Xbyak::Address a = ptr[rdx + static_cast<int32_t>(i * d_.out_row_bytes + j * vout)];
            if (dt == data_type::f32)
                last(j) ? vi.store_tail(a, acc(i, j)) : vi.store(a, acc(i, j));
            else if (last(j))
                cvt.store_tail(a, acc(i, j), dt, d_.tail, vi.vreg(0), vi.vreg(1 % (d_.n + 1)));
            else
                cvt.store(a, acc(i, j), dt, vi.vreg(0), vi.vreg(1 % (d_.n + 1)));
        }
    postamble();
    cvt.emit_constants();
}

// Pixel order of the pairs' accumulators, back to the pixels': the first
// and the second 16 of a 32-pixel run, as lanes of (lo, hi) for vpermi2ps.
namespace {
constexpr uint32_t kUnpairLanes[2][16] = {{0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23},
                                          {8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31}};
}

// The same contract; vregs [0, n) the interleaved diff_dst pairs, n the
// masked second row or the odd step's zeros; k3 the word mask of the last
// 32 pixels.
void DataNcxKernel::generate_pairs() {
    using Xbyak::Zmm;
    const Isa isa = static_cast<Isa>(d_.isa);
    VecIsa vi(*this, isa);
    VecCvt cvt(*this, vi, isa);
    const int halves = d_.n / 2;
    auto acc = [&](int i, int j) { return Zmm(d_.n + 1 + i * d_.n + j); };
    auto masked = [&](int h) { return d_.tail > 0 && h == halves - 1; };
    const Zmm t(d_.n);
    const int32_t row = static_cast<int32_t>(d_.dd_row_bytes);
    Xbyak::Label l_loop, l_pairs_done, l_unpair;
    preamble(0);
    if (d_.tail > 0) {
        mov(eax, static_cast<uint32_t>((uint64_t(1) << d_.tail) - 1));
        kmovd(k3, eax);
    }
    for (int i = 0; i < d_.m; ++i)
        for (int j = 0; j < d_.n; ++j) vi.zero(acc(i, j));
    // One step: the n pair vectors of rows (oc, oc + 1), or (oc, zeros).
    auto step = [&](bool partner) {
        if (!partner) vpxord(t, t, t);
        for (int h = 0; h < halves; ++h) {
            const Zmm lo(2 * h), hi(2 * h + 1);
            const Xbyak::Address a = ptr[rsi + h * 64], b = ptr[rsi + row + h * 64];
            if (masked(h)) {
                vmovdqu16(lo | k3 | T_z, a);
                if (partner) vmovdqu16(t | k3 | T_z, b);
            } else {
                vmovdqu16(lo, a);
            }
            if (masked(h) || !partner) {
                vpunpckhwd(hi, lo, t);
                vpunpcklwd(lo, lo, t);
            } else {
                vpunpckhwd(hi, lo, b);
                vpunpcklwd(lo, lo, b);
            }
        }
        for (int i = 0; i < d_.m; ++i)
            for (int j = 0; j < d_.n; ++j)
                cvt.dot_bf16_bcast(acc(i, j), Zmm(j), ptr[rdi + static_cast<int32_t>(i * d_.w_i_bytes)]);
    };
    test(rcx, rcx);
    jz(l_pairs_done);
    L(l_loop);
    step(true);
    next_step(l_loop, 2);
    L(l_pairs_done);
    if (d_.odd) step(false);
    // Stores: the two 16-pixel vectors of each 32, of which the last run
    // holds `tail` pixels.
    const Zmm x(0), t0(1);
    for (int i = 0; i < d_.m; ++i)
        for (int h = 0; h < halves; ++h)
            for (int half = 0; half < 2; ++half) {
                const int lanes = masked(h) ? std::min(16, d_.tail - 16 * half) : 16;
                if (lanes <= 0) continue;
                vmovups(x, ptr[rip + l_unpair + 64 * half]);
                vpermi2ps(x, acc(i, 2 * h), acc(i, 2 * h + 1));
                const Xbyak::Address a =
                        ptr[rdx + static_cast<int32_t>(i * d_.out_row_bytes + h * 64 + half * 32)];
                if (lanes == 16) {
                    cvt.store(a, x, data_type::bf16, t0, t0);
                } else {
                    vi.set_tail(lanes, rax, 0);
                    cvt.store_tail(a, x, data_type::bf16, lanes, t0, t0);
                }
            }
    postamble();
    cvt.emit_constants();
    align(64);
    L(l_unpair);
    for (const auto& lanes : kUnpairLanes)
        for (uint32_t l : lanes) dd(l);
}

std::shared_ptr<const DataNcxKernel> get_data_ncx_kernel(const DataNcxDesc& d, bool* hit) {
    static KernelCache<DataNcxDesc, DataNcxKernel> cache;
    return get_finalized(cache, d, hit);
}

}  // namespace convgrad::detail
