#include "jit/bwd_data_ncx_kernel.hpp"

#include <string>

#include "jit/kernel_cache.hpp"
#include "jit/vec_cvt.hpp"
#include "jit/vec_isa.hpp"

namespace convgrad::detail {

using namespace Xbyak::util;  // register names

int data_ncx_vlen(Isa isa) { return isa >= Isa::avx512_core ? 16 : 8; }

int data_ncx_vregs(Isa isa, int m, int n) { return m * n + n + 1 + (isa >= Isa::avx512_core ? 0 : 1); }

DataNcxKernel::DataNcxKernel(const DataNcxDesc& d)
    : JitKernel("bwd_d_ncx_" + std::string(isa_name(static_cast<Isa>(d.isa))) + "_" +
                dtype_name(static_cast<data_type>(d.dt)) + "_m" + std::to_string(d.m) + "n" + std::to_string(d.n) +
                "_t" + std::to_string(d.tail) + "_dd" + std::to_string(d.dd_row_bytes) + "_wo" +
                std::to_string(d.w_o_bytes) + "_wi" + std::to_string(d.w_i_bytes) + "_out" +
                std::to_string(d.out_row_bytes)),
      d_(d) {}

// Register contract: rdi W, rsi diff_dst, rdx diff_src, rcx output
// channels left, r8 the next line to prefetch, rax scratch; vregs [0, n)
// diff_dst, n the broadcast, then the accumulators (AVX2: the last vreg is
// the tail mask).
void DataNcxKernel::generate() {
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
    prefetcht1(ptr[r8]);
    mov(rax, d_.dd_row_bytes);
    add(r8, rax);
    add(rsi, rax);
    mov(rax, d_.w_o_bytes);
    add(rdi, rax);
    dec(rcx);
    jnz(l_loop);
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

std::shared_ptr<const DataNcxKernel> get_data_ncx_kernel(const DataNcxDesc& d, bool* hit) {
    static KernelCache<DataNcxDesc, DataNcxKernel> cache;
    return cache.get(
            d,
            [](const DataNcxDesc& desc) {
                auto k = std::make_shared<DataNcxKernel>(desc);
                k->create();
                k->finalize();
                return std::shared_ptr<const DataNcxKernel>(std::move(k));
            },
            hit);
}

}  // namespace convgrad::detail
