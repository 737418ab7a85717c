#include "jit/dw_row_kernel.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "jit/kernel_cache.hpp"
#include "jit/vec_cvt.hpp"
#include "jit/vec_isa.hpp"

namespace convgrad::detail {

using namespace Xbyak::util;  // register names

int dw_row_vlen(Isa isa) { return isa >= Isa::avx512_core ? 16 : 8; }

// Vector registers: data calls n accumulators, a broadcast, a load and
// (AVX2) the tail mask; weight calls rows · taps accumulators, n diff_dst
// vectors, a load and the mask.
int dw_row_max_taps(Isa isa, int n) { return (isa >= Isa::avx512_core ? 32 : 16) - n - 2; }
int dw_row_max_rows(Isa isa, int n, int taps) { return std::min(kDwRowMaxRows, dw_row_max_taps(isa, n) / taps); }

DwRowKernel::DwRowKernel(const DwRowDesc& d)
    : JitKernel("dw_rows_" + std::string(d.weights ? "bwd_w_" : "bwd_d_") + isa_name(static_cast<Isa>(d.isa)) + "_" +
                dtype_name(static_cast<data_type>(d.dt)) + "_n" + std::to_string(d.n) + "_r" + std::to_string(d.rest) +
                "t" + std::to_string(d.tail) + "_k" + std::to_string(d.taps) + "_tb" + std::to_string(d.tap_bytes) +
                (d.weights ? "_rows" + std::to_string(d.rows) : "") + (d.stream ? "_nt" : "")),
      d_(d) {}

void DwRowKernel::generate() {
    if (d_.weights)
        generate_weights();
    else
        generate_data();
}

namespace {
int32_t disp(int64_t bytes) { return static_cast<int32_t>(bytes); }
// The weight gradient's src lines, one a row (kMaxRows).
const Xbyak::Reg64 kLineRegs[] = {r9, r10, r11, r12, r13, r14, r15, rsi, rdx};
static_assert(sizeof(kLineRegs) / sizeof(kLineRegs[0]) == kDwRowMaxRows, "a register a src row");
}  // namespace

// rcx steps of n vectors, each advancing `regs` by step_bytes, then the
// `rest` vectors.
void DwRowKernel::run_steps(const std::function<void(int, int)>& step, const std::vector<Xbyak::Reg64>& regs,
                            int step_bytes) {
    Xbyak::Label l_step, l_steps_done;
    test(rcx, rcx);
    jz(l_steps_done);
    L(l_step);
    step(d_.n, 0);
    for (const Xbyak::Reg64& r : regs) add(r, step_bytes);
    dec(rcx);
    jnz(l_step);
    L(l_steps_done);
    if (d_.rest > 0) step(d_.rest, d_.tail);
}

// acc += m · (the vector at a), the first `tail` lanes only when tail > 0;
// x: the widened load (clobbered).
void DwRowKernel::fma_load(VecIsa& vi, VecCvt& cvt, const Xbyak::Xmm& acc, const Xbyak::Xmm& m, const Xbyak::Address& a,
                           int tail, const Xbyak::Xmm& x) {
    const data_type dt = static_cast<data_type>(d_.dt);
    if (dt == data_type::f32) {
        tail > 0 ? vi.fma_mem_tail(acc, m, a, x) : vi.fma_mem(acc, m, a, x);
        return;
    }
    tail > 0 ? cvt.load_tail(x, a, dt, tail) : cvt.load(x, a, dt);
    vi.fma(acc, m, x);
}

// Register contract: rdi the arguments, r8 the row list, r9 its length,
// r10 diff_src, rcx steps left, rsi the step's pixel offset in the lines
// (bytes); per row rbx walks the list, r11 the rows left, rax the line
// and rdx its taps. Vregs [0, n) accumulators, n the broadcast, n + 1 the
// widened load, the last (AVX2) the tail mask.
void DwRowKernel::generate_data() {
    const Isa isa = static_cast<Isa>(d_.isa);
    const data_type dt = static_cast<data_type>(d_.dt);
    VecIsa vi(*this, isa);
    VecCvt cvt(*this, vi, isa);
    const int es = VecCvt::elem_bytes(dt);
    const int vin = vi.vlen() * es;
    const Xbyak::Xmm t = vi.vreg(d_.n), x = vi.vreg(d_.n + 1);
    preamble(1);
    mov(r8, ptr[rdi + offsetof(DwRowArgs, rows)]);
    mov(r9, ptr[rdi + offsetof(DwRowArgs, nrows)]);
    mov(r10, ptr[rdi + offsetof(DwRowArgs, out)]);
    mov(rcx, ptr[rdi + offsetof(DwRowArgs, steps)]);
    xor_(esi, esi);
    if (d_.tail > 0) vi.set_tail(d_.tail, rax, vi.num_vregs() - 1);
    // One step of `vecs` vectors, the last of them `tail` pixels.
    auto step = [&](int vecs, int tail) {
        Xbyak::Label l_row, l_rows_done;
        for (int j = 0; j < vecs; ++j) vi.zero(vi.vreg(j));
        mov(rbx, r8);
        mov(r11, r9);
        test(r11, r11);
        jz(l_rows_done);
        L(l_row);
        mov(rax, ptr[rbx]);
        mov(rdx, ptr[rbx + 8]);
        add(rax, rsi);
        for (int k = 0; k < d_.taps; ++k) {
            vi.bcast(t, ptr[rdx + 4 * k]);
            const int64_t at = (d_.taps - 1 - k) * d_.tap_bytes;
            for (int j = 0; j < vecs; ++j)
                fma_load(vi, cvt, vi.vreg(j), t, ptr[rax + disp(at + j * vin)], j == vecs - 1 ? tail : 0, x);
        }
        add(rbx, 16);
        dec(r11);
        jnz(l_row);
        L(l_rows_done);
        // Streaming stores write whole lines only: a 16-bit vector is half
        // a line, and a line written partly by ordinary stores (the tail,
        // an odd last vector) must not be streamed (bf16 rows of 2048
        // pixels: 0.63x).
        const int vout = vi.vlen() * es;
        const int whole = vecs - (tail > 0 ? 1 : 0);
        const int streamed = !d_.stream ? 0 : vout < 64 ? whole - whole % (64 / vout) : whole;
        for (int j = 0; j < vecs; ++j) {
            const Xbyak::Address a = ptr[r10 + j * vout];
            if (j >= whole)
                cvt.store_tail(a, vi.vreg(j), dt, tail, t, x);
            else
                cvt.store(a, vi.vreg(j), dt, t, x, j < streamed);
        }
    };
    run_steps(step, {rsi, r10}, d_.n * vin);
    postamble();
    cvt.emit_constants();
}

// Register contract: rdi the arguments, r8 diff_dst, rbx the (line,
// accumulators) pairs of the `rows` src rows, the lines in kLineRegs, rcx
// steps left, rax an accumulator pointer. Vregs [0, rows · taps)
// accumulators (row-major), then n diff_dst vectors, the widened load, the
// last (AVX2) the tail mask.
void DwRowKernel::generate_weights() {
    const Isa isa = static_cast<Isa>(d_.isa);
    const data_type dt = static_cast<data_type>(d_.dt);
    VecIsa vi(*this, isa);
    VecCvt cvt(*this, vi, isa);
    const int es = VecCvt::elem_bytes(dt);
    const int vin = vi.vlen() * es;
    const int accs = d_.rows * d_.taps;
    auto acc = [&](int r, int k) { return vi.vreg(r * d_.taps + k); };
    auto ddv = [&](int j) { return vi.vreg(accs + j); };
    const Xbyak::Xmm x = vi.vreg(accs + d_.n);
    preamble(5);
    mov(r8, ptr[rdi + offsetof(DwRowArgs, dd)]);
    mov(rbx, ptr[rdi + offsetof(DwRowArgs, rows)]);
    mov(rcx, ptr[rdi + offsetof(DwRowArgs, steps)]);
    if (d_.tail > 0) vi.set_tail(d_.tail, rax, vi.num_vregs() - 1);
    std::vector<Xbyak::Reg64> moving{r8};
    for (int r = 0; r < d_.rows; ++r) {
        mov(kLineRegs[r], ptr[rbx + 16 * r]);
        moving.push_back(kLineRegs[r]);
        mov(rax, ptr[rbx + 16 * r + 8]);
        for (int k = 0; k < d_.taps; ++k) vi.load(acc(r, k), ptr[rax + k * vi.vbytes()]);
    }
    auto step = [&](int vecs, int tail) {
        for (int j = 0; j < vecs; ++j) {
            const Xbyak::Address a = ptr[r8 + j * vin];
            if (tail > 0 && j == vecs - 1)
                cvt.load_tail(ddv(j), a, dt, tail);
            else
                cvt.load(ddv(j), a, dt);
        }
        // The src lanes past the tail are not read (their diff_dst lanes
        // are zero).
        for (int r = 0; r < d_.rows; ++r)
            for (int k = 0; k < d_.taps; ++k)
                for (int j = 0; j < vecs; ++j)
                    fma_load(vi, cvt, acc(r, k), ddv(j), ptr[kLineRegs[r] + disp(k * d_.tap_bytes + j * vin)],
                             j == vecs - 1 ? tail : 0, x);
    };
    run_steps(step, moving, d_.n * vin);
    for (int r = 0; r < d_.rows; ++r) {
        mov(rax, ptr[rbx + 16 * r + 8]);
        for (int k = 0; k < d_.taps; ++k) vi.store(ptr[rax + k * vi.vbytes()], acc(r, k));
    }
    postamble();
    cvt.emit_constants();
}

std::shared_ptr<const DwRowKernel> get_dw_row_kernel(const DwRowDesc& d, bool* hit) {
    static KernelCache<DwRowDesc, DwRowKernel> cache;
    return get_finalized(cache, d, hit);
}

}  // namespace convgrad::detail
