#include "jit/bwd_data_dot_kernel.hpp"

#include <algorithm>
#include <string>

#include "jit/kernel_cache.hpp"
#include "jit/vec_cvt.hpp"
#include "jit/vec_isa.hpp"

namespace convgrad::detail {

using namespace Xbyak::util;  // register names
using Xbyak::Zmm;

int data_dot_vlen(Isa isa) { return isa >= Isa::avx512_core ? 16 : 8; }

int data_dot_step_oc(Isa isa, DataCompute compute) {
    return data_dot_vlen(isa) * (compute == DataCompute::bf16_dot ? 2 : 1);
}

int data_dot_vregs(Isa isa, int p, int c) { return p * c + c + 2 + (isa >= Isa::avx512_core ? 0 : 1); }

DataDotKernel::DataDotKernel(const DataDotDesc& d)
    : JitKernel(std::string(d.accumulate ? "dot_acc_" : "dot_") + std::string(isa_name(static_cast<Isa>(d.isa))) + "_" +
                dtype_name(static_cast<data_type>(d.dt)) + (d.compute == int32_t(DataCompute::bf16_dot) ? "dot" : "") +
                "_p" + std::to_string(d.p) + "c" + std::to_string(d.c) + "_t" + std::to_string(d.tail) + "_dd" +
                std::to_string(d.dd_pix_bytes) + "_w" + std::to_string(d.w_row_bytes)),
      d_(d) {}

// Register contract: rdi diff_dst, rsi W, rdx out, rcx steps left, r8
// the next line to prefetch, rax scratch; vregs [0, c) W, c and c + 1 diff_dst, then the accumulators
// (AVX2: the last vreg is the tail mask).
void DataDotKernel::generate() {
    const Isa isa = static_cast<Isa>(d_.isa);
    VecIsa vi(*this, isa);
    const DataCompute compute = static_cast<DataCompute>(d_.compute);
    const int es = d_.dt == int32_t(data_type::f32) ? 4 : 2;
    const int64_t step_bytes = int64_t(data_dot_step_oc(isa, compute)) * es;
    Xbyak::Label l_loop, l_tail;
    preamble(0);
    for (int a = 0; a < d_.p * d_.c; ++a) vi.zero(vi.vreg(d_.c + 2 + a));
    test(rcx, rcx);
    jz(l_tail);
    L(l_loop);
    step(false);
    prefetcht2(ptr[r8]);
    add(r8, 64);
    add(rdi, static_cast<uint32_t>(step_bytes));
    add(rsi, static_cast<uint32_t>(step_bytes));
    dec(rcx);
    jnz(l_loop);
    L(l_tail);
    if (d_.tail > 0) step(true);
    for (int a = 0; a < d_.p * d_.c; ++a) {
        const Xbyak::Xmm acc = vi.vreg(d_.c + 2 + a);
        if (d_.accumulate) vaddps(acc, acc, ptr[rdx + a * vi.vbytes()]);
        vi.store(ptr[rdx + a * vi.vbytes()], acc);
    }
    postamble();
}

// One oc step: the c W vectors, then per pixel its diff_dst vector against
// each of them.
void DataDotKernel::step(bool tail) {
    const Isa isa = static_cast<Isa>(d_.isa);
    const DataCompute compute = static_cast<DataCompute>(d_.compute);
    const data_type dt = static_cast<data_type>(d_.dt);
    VecIsa vi(*this, isa);
    VecCvt cvt(*this, vi, isa);
    if (tail && compute == DataCompute::bf16_dot) {  // a mask of words: up to 31 bf16
        mov(eax, static_cast<uint32_t>((uint64_t(1) << d_.tail) - 1));
        kmovd(k1, eax);
    } else if (tail) {
        vi.set_tail(d_.tail, rax, vi.num_vregs() - 1);
    }
    auto load = [&](const Xbyak::Xmm& v, const Xbyak::Address& a) {
        if (compute == DataCompute::bf16_dot)
            tail ? vmovdqu16(Zmm(v.getIdx()) | k1 | T_z, a) : vmovups(Zmm(v.getIdx()), a);
        else if (tail)
            cvt.load_tail(v, a, dt, d_.tail);
        else
            cvt.load(v, a, dt);
    };
    for (int j = 0; j < d_.c; ++j) load(vi.vreg(j), ptr[rsi + static_cast<int32_t>(j * d_.w_row_bytes)]);
    for (int i = 0; i < d_.p; ++i) {
        const Xbyak::Xmm t = vi.vreg(d_.c + i % 2);
        load(t, ptr[rdi + static_cast<int32_t>(i * d_.dd_pix_bytes)]);
        for (int j = 0; j < d_.c; ++j) {
            const Xbyak::Xmm acc = vi.vreg(d_.c + 2 + i * d_.c + j);
            if (compute == DataCompute::bf16_dot)
                vdpbf16ps(Zmm(acc.getIdx()), Zmm(j), Zmm(t.getIdx()));
            else
                vi.fma(acc, vi.vreg(j), t);
        }
    }
}

std::shared_ptr<const DataDotKernel> get_data_dot_kernel(const DataDotDesc& d, bool* hit) {
    static KernelCache<DataDotDesc, DataDotKernel> cache;
    return get_finalized(cache, d, hit);
}

DataCompute dot_compute(data_type dt, Isa isa) {
    return dt == data_type::f32                                   ? DataCompute::f32
           : dt == data_type::bf16 && isa >= Isa::avx512_core_bf16 ? DataCompute::bf16_dot
                                                                   : DataCompute::widen;
}

Isa dot_kernel_isa(Isa isa, DataCompute compute) {
    return std::min(isa, compute == DataCompute::bf16_dot ? Isa::avx512_core_bf16 : Isa::avx512_core);
}

DotKernelSet::DotKernelSet(const DataDotDesc& d, int last_p, int last_c, bool untailed)
    : p_(d.p), c_(d.c), untailed_(untailed && d.tail > 0) {
    for (int slot = 0; slot < 8; ++slot) {
        const bool tail = slot & 4, lp = slot & 2, lc = slot & 1;
        if ((lp && last_p == d.p) || (lc && last_c == d.c) || (tail && !untailed_)) continue;
        DataDotDesc k = d;
        k.p = lp ? last_p : d.p;
        k.c = lc ? last_c : d.c;
        k.tail = !untailed_ || tail ? d.tail : 0;
        bool hit = false;
        k_[slot] = get_data_dot_kernel(k, &hit);
        ++built_;
        hits_ += hit;
    }
}

}  // namespace convgrad::detail
