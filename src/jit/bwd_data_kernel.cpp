#include "jit/bwd_data_kernel.hpp"

#include <cstddef>
#include <cstring>
#include <sstream>

#include "jit/kernel_cache.hpp"

namespace convgrad::detail {

using namespace Xbyak::util;  // register names

DataKernelDesc make_data_desc(Isa isa, DataKernelKind kind, int m, int n, int tail, int oc_unroll,
                              bool bcast_in_fma, int64_t dd_pix_bytes, int64_t dst_pix_bytes) {
    DataKernelDesc d;  // no padding bytes (static_assert), so the raw key is well defined
    d.isa = static_cast<int32_t>(isa);
    d.kind = static_cast<int32_t>(kind);
    d.m = m;
    d.n = n;
    d.tail = tail;
    d.oc_unroll = kind == DataKernelKind::direct ? oc_unroll : 1;
    d.bcast_in_fma = kind == DataKernelKind::direct && isa >= Isa::avx512_core && bcast_in_fma;
    d.dd_pix_bytes = dd_pix_bytes;
    d.dst_pix_bytes = dst_pix_bytes;
    return d;
}

std::string to_string(const DataKernelDesc& d) {
    std::ostringstream os;
    os << isa_name(static_cast<Isa>(d.isa))
       << (d.kind == int32_t(DataKernelKind::depthwise) ? "_dw" : "_direct") << "_m" << d.m << "n"
       << d.n << "t" << d.tail << "u" << d.oc_unroll << (d.bcast_in_fma ? "b" : "") << "_dd"
       << d.dd_pix_bytes << "_dst" << d.dst_pix_bytes;
    return os.str();
}

int data_kernel_vregs(const DataKernelDesc& d) {
    const bool avx2_mask = d.isa < int32_t(Isa::avx512_core) && d.tail != 0;
    const int temps = d.kind == int32_t(DataKernelKind::depthwise) ? 2 : (d.bcast_in_fma ? 0 : 1);
    return d.m * d.n + d.n + temps + (avx2_mask ? 1 : 0);
}

namespace {

// The register map shared by every emit function below.
//   rdi  args (read only)            rsi  dd byte offset of the current block
//   rcx  diff_src pointer of block   rdx  blocks left
//   r8   entry pointer               r9   entries left
//   r10  dd pointer of the entry     r11  W pointer of the entry
//   rax  oc left                     rbx  scratch
// Vector registers: accumulators first (pixel-major), then n weights, then
// temporaries; the AVX2 tail mask is the last register.
const Xbyak::Reg64 kArgs = rdi, kBlkOff = rsi, kDst = rcx, kBlocks = rdx, kEntry = r8,
                   kEntries = r9, kDd = r10, kW = r11, kOc = rax, kTmp = rbx;

template <typename T>
Xbyak::Address arg(Xbyak::CodeGenerator& cg, T DataKernelArgs::*field) {
    const DataKernelArgs probe;
    const auto off = reinterpret_cast<const char*>(&(probe.*field)) - reinterpret_cast<const char*>(&probe);
    return cg.qword[kArgs + static_cast<int>(off)];
}

}  // namespace

DataKernel::DataKernel(const DataKernelDesc& d)
    : JitKernel("bwd_data_" + to_string(d)), d_(d), vi_(*this, static_cast<Isa>(d.isa)) {}

// Everything: prologue, tail mask, the block loop, epilogue.
void DataKernel::generate() {
    preamble(1);  // rbx
    if (d_.tail) vi_.set_tail(d_.tail, kTmp, vi_.num_vregs() - 1);
    block_loop();
    postamble();
}

// Reads args; writes rcx, rdx, rsi; every block: init, entries, store.
void DataKernel::block_loop() {
    Xbyak::Label l_block, l_done;
    mov(kDst, arg(*this, &DataKernelArgs::dst));
    mov(kBlocks, arg(*this, &DataKernelArgs::nblocks));
    xor_(kBlkOff, kBlkOff);
    test(kBlocks, kBlocks);
    jz(l_done);
    L(l_block);
    init_accumulators();
    entry_loop();
    store_accumulators();
    add(kDst, static_cast<int>(d_.m * d_.dst_pix_bytes));
    add(kBlkOff, static_cast<int>(d_.m * d_.dd_pix_bytes));
    dec(kBlocks);
    jnz(l_block);
    L(l_done);
}

// Accumulators := 0, or := diff_src when args.accumulate. Reads rcx; clobbers rbx.
void DataKernel::init_accumulators() {
    Xbyak::Label l_load, l_done;
    mov(kTmp, arg(*this, &DataKernelArgs::accumulate));
    test(kTmp, kTmp);
    jnz(l_load);
    for (int i = 0; i < d_.m * d_.n; ++i) vi_.zero(vi_.vreg(i));
    jmp(l_done);
    L(l_load);
    for (int j = 0; j < d_.m; ++j)
        for (int v = 0; v < d_.n; ++v) {
            const auto a = ptr[kDst + static_cast<int>(j * d_.dst_pix_bytes + v * vi_.vbytes())];
            if (d_.tail && v == d_.n - 1)
                vi_.load_tail(vi_.vreg(j * d_.n + v), a);
            else
                vi_.load(vi_.vreg(j * d_.n + v), a);
        }
    L(l_done);
}

// For every entry: r10 = entry.dd + block offset, r11 = entry.w, then the
// taps. Reads rdi, rsi; clobbers r8-r11, rax.
void DataKernel::entry_loop() {
    Xbyak::Label l_entry, l_done;
    mov(kEntry, arg(*this, &DataKernelArgs::entries));
    mov(kEntries, arg(*this, &DataKernelArgs::nentries));
    test(kEntries, kEntries);
    jz(l_done);
    L(l_entry);
    mov(kDd, qword[kEntry + offsetof(DataEntry, dd)]);
    add(kDd, kBlkOff);
    mov(kW, qword[kEntry + offsetof(DataEntry, w)]);
    if (d_.kind == int32_t(DataKernelKind::depthwise))
        depthwise_taps();
    else
        oc_loop();
    add(kEntry, static_cast<int>(sizeof(DataEntry)));
    dec(kEntries);
    jnz(l_entry);
    L(l_done);
}

// Direct: the oc reduction of one entry, oc_unroll steps per trip then one
// at a time. Reads r10, r11; advances them; clobbers rax.
void DataKernel::oc_loop() {
    const int u = d_.oc_unroll;
    const int w_oc_bytes = d_.n * vi_.vbytes();
    Xbyak::Label l_main, l_rem, l_done;
    mov(kOc, arg(*this, &DataKernelArgs::noc));
    if (u > 1) {
        L(l_main);
        cmp(kOc, u);
        jl(l_rem);
        for (int i = 0; i < u; ++i) oc_step(i);
        add(kDd, u * 4);
        add(kW, u * w_oc_bytes);
        sub(kOc, u);
        jmp(l_main);
    }
    L(l_rem);
    test(kOc, kOc);
    jz(l_done);
    oc_step(0);
    add(kDd, 4);
    add(kW, w_oc_bytes);
    dec(kOc);
    jmp(l_rem);
    L(l_done);
}

// Direct, one oc (at offset i from r10/r11): n weight vectors, then per
// pixel one broadcast diff_dst scalar times the n vectors. Reads r10, r11.
void DataKernel::oc_step(int i) {
    const int mn = d_.m * d_.n;
    const int w_oc_bytes = d_.n * vi_.vbytes();
    for (int v = 0; v < d_.n; ++v)
        vi_.load(vi_.vreg(mn + v), ptr[kW + i * w_oc_bytes + v * vi_.vbytes()]);
    const Xbyak::Xmm bc = vi_.vreg(mn + d_.n);
    for (int j = 0; j < d_.m; ++j) {
        const auto a = ptr[kDd + static_cast<int>(j * d_.dd_pix_bytes + i * 4)];
        if (d_.bcast_in_fma) {
            for (int v = 0; v < d_.n; ++v) vi_.fma_bcast(vi_.vreg(j * d_.n + v), vi_.vreg(mn + v), a, bc);
        } else {
            vi_.bcast(bc, a);
            for (int v = 0; v < d_.n; ++v) vi_.fma(vi_.vreg(j * d_.n + v), vi_.vreg(mn + v), bc);
        }
    }
}

// Depthwise, one entry: n weight vectors times the pixels' diff_dst vectors
// (the tail vector read masked: it may end the tensor). Reads r10, r11.
void DataKernel::depthwise_taps() {
    const int mn = d_.m * d_.n;
    for (int v = 0; v < d_.n; ++v) vi_.load(vi_.vreg(mn + v), ptr[kW + v * vi_.vbytes()]);
    for (int j = 0; j < d_.m; ++j)
        for (int v = 0; v < d_.n; ++v) {
            const Xbyak::Xmm t = vi_.vreg(mn + d_.n + (j * d_.n + v) % 2);
            const auto a = ptr[kDd + static_cast<int>(j * d_.dd_pix_bytes + v * vi_.vbytes())];
            if (d_.tail && v == d_.n - 1)
                vi_.load_tail(t, a);
            else
                vi_.load(t, a);
            vi_.fma(vi_.vreg(j * d_.n + v), vi_.vreg(mn + v), t);
        }
}

// Accumulators to diff_src, the last vector masked when there is a tail. Reads rcx.
void DataKernel::store_accumulators() {
    for (int j = 0; j < d_.m; ++j)
        for (int v = 0; v < d_.n; ++v) {
            const auto a = ptr[kDst + static_cast<int>(j * d_.dst_pix_bytes + v * vi_.vbytes())];
            if (d_.tail && v == d_.n - 1)
                vi_.store_tail(a, vi_.vreg(j * d_.n + v));
            else
                vi_.store(a, vi_.vreg(j * d_.n + v));
        }
}

std::shared_ptr<const DataKernel> get_data_kernel(const DataKernelDesc& d, bool* hit) {
    static KernelCache<DataKernelDesc, DataKernel> cache;
    return cache.get(
            d,
            [](const DataKernelDesc& desc) {
                auto k = std::make_shared<DataKernel>(desc);
                k->create();
                k->finalize();
                return std::shared_ptr<const DataKernel>(std::move(k));
            },
            hit);
}

}  // namespace convgrad::detail
