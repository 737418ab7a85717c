#include "jit/bwd_data_kernel.hpp"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <sstream>

#include "jit/kernel_cache.hpp"

namespace convgrad::detail {

using namespace Xbyak::util;  // register names

DataKernelDesc make_data_desc(Isa isa, DataKernelKind kind, int m, int n, int tail, int oc_unroll,
                              bool bcast_in_fma, int64_t dd_pix_bytes, int64_t dst_pix_bytes,
                              const DataKernelTypes& types, int64_t dd_block_bytes) {
    DataKernelDesc d;  // no padding bytes (static_assert), so the raw key is well defined
    d.isa = static_cast<int32_t>(isa);
    d.kind = static_cast<int32_t>(kind);
    d.m = m;
    d.n = n;
    d.tail = tail;
    d.oc_unroll = kind == DataKernelKind::direct ? oc_unroll : 1;
    d.bcast_in_fma = kind == DataKernelKind::direct && isa >= Isa::avx512_core && bcast_in_fma;
    d.compute = static_cast<int32_t>(types.compute);
    d.in_dt = static_cast<int32_t>(types.in);
    d.out_dt = static_cast<int32_t>(types.out);
    d.dd_pix_bytes = dd_pix_bytes;
    d.dd_block_bytes = dd_block_bytes ? dd_block_bytes : m * dd_pix_bytes;
    d.dst_pix_bytes = dst_pix_bytes;
    const bool widen_direct = types.compute == DataCompute::widen && kind == DataKernelKind::direct;
    d.cvt_pix_bytes = widen_direct ? types.cvt_pix_bytes : 0;
    d.store = static_cast<int32_t>(types.store);
    // Direct row taps: f32 or bf16 pairs, the broadcast in a register.
    const bool direct_taps = kind == DataKernelKind::direct && types.row_taps > 1 && !widen_direct && !d.bcast_in_fma;
    d.row_taps = kind == DataKernelKind::depthwise || direct_taps ? types.row_taps : 1;
    d.tap_dil = d.row_taps > 1 ? types.tap_dil : 1;
    d.w_tap_step = d.row_taps > 1 && !direct_taps ? types.w_tap_step : 1;
    const bool dw_edges = kind == DataKernelKind::depthwise && types.row_w > 0;
    d.row_x0 = direct_taps || dw_edges ? types.row_x0 : 0;
    d.row_w = direct_taps || dw_edges ? types.row_w : 0;
    d.row_nblocks = dw_edges ? types.row_nblocks : 0;
    d.tap_seq = kind == DataKernelKind::depthwise && d.row_taps > 1 ? std::min(types.tap_seq, d.row_taps) : 0;
    d.w_tap_bytes = direct_taps || (kind == DataKernelKind::depthwise && types.lane_group == 1) ? types.w_tap_bytes : 0;
    d.block_rows = direct_taps ? std::max(1, types.block_rows) : 1;
    d.row_stride = direct_taps ? std::max(1, types.row_stride) : 1;
    d.tail_m = types.tail_m;
    d.lane_group = kind == DataKernelKind::depthwise ? types.lane_group : 1;
    d.row_pairs = static_cast<int32_t>(kind == DataKernelKind::depthwise ? types.row_pairs : DataRowPairs::none);
    d.pf_lines = kind == DataKernelKind::direct ? std::max(1, types.pf_lines) : 1;
    return d;
}

std::string to_string(const DataKernelDesc& d) {
    static const char* const kCompute[] = {"", "_widen", "_dot"};
    std::ostringstream os;
    os << isa_name(static_cast<Isa>(d.isa))
       << (d.kind == int32_t(DataKernelKind::depthwise) ? "_dw" : "_direct") << "_m" << d.m << "n"
       << d.n << "t" << d.tail << "u" << d.oc_unroll << (d.bcast_in_fma ? "b" : "") << kCompute[d.compute]
       << "_" << dtype_name(static_cast<data_type>(d.in_dt)) << "to" << dtype_name(static_cast<data_type>(d.out_dt))
       << "_dd" << d.dd_pix_bytes << "_dst" << d.dst_pix_bytes;
    if (d.dd_block_bytes != d.m * d.dd_pix_bytes) os << "_blk" << d.dd_block_bytes;
    if (d.cvt_pix_bytes) os << "_cvt" << d.cvt_pix_bytes;
    if (store_prefetches(d.store)) os << "_pfw";
    if (store_may_stream(d.store)) os << "_nt";
    if (d.row_taps > 1)
        os << "_taps" << d.row_taps << "d" << d.tap_dil << (d.tap_seq ? "seq" + std::to_string(d.tap_seq) : "");
    if (d.w_tap_bytes && d.kind == int32_t(DataKernelKind::depthwise)) os << "_wtap" << d.w_tap_bytes;
    if (d.row_w && d.kind == int32_t(DataKernelKind::depthwise))
        os << "_edges" << d.row_x0 << "of" << d.row_w << "b" << d.row_nblocks;
    else if (d.row_w)
        os << "x" << d.row_x0 << "of" << d.row_w << "w" << d.w_tap_bytes;
    if (d.row_stride > 1) os << "s" << d.row_stride;
    if (d.block_rows > 1) os << "_rows" << d.block_rows;
    if (d.tail_m) os << "_tail" << d.tail_m;
    if (d.w_tap_step > 1) os << "w" << d.w_tap_step;
    if (d.lane_group > 1) os << "_lg" << d.lane_group;
    if (d.row_pairs) os << (d.row_pairs == int32_t(DataRowPairs::expand) ? "_khpairs_x" : "_khpairs");
    if (d.pf_lines > 1) os << "_pf" << d.pf_lines;
    return os.str();
}

int data_kernel_vregs(const DataKernelDesc& d) {
    const bool avx2_mask = d.isa < int32_t(Isa::avx512_core) && d.tail != 0;
    // bf16_dot's odd last oc needs a broadcast register: with the pairs
    // broadcast inside the instruction it borrows the second W register, so
    // only n = 1 needs one of its own.
    const bool bcast_reg = !d.bcast_in_fma || (d.compute == int32_t(DataCompute::bf16_dot) && d.n == 1);
    // Depthwise: two diff_dst temporaries, and the permutation index for
    // G >= 8 and bf16_dot (oc pairs of lane groups, or row pairs).
    const bool index = VecIsa::lane_group_needs_index(d.lane_group) ||
                       (d.compute == int32_t(DataCompute::bf16_dot) && d.row_pairs != int32_t(DataRowPairs::expand));
    const int temps = d.kind == int32_t(DataKernelKind::depthwise) ? 2 + index : (bcast_reg ? 1 : 0);
    return d.m * d.n + data_kernel_w_vregs(d) + temps + (avx2_mask ? 1 : 0);
}

namespace {

// The register map shared by every emit function below.
//   rdi  args (read only)            rsi  dd byte offset of the current block
//   rcx  diff_src pointer of block   rdx  blocks left
//   r8   entry pointer               r9   entries left
//   r10  dd pointer of the entry     r11  W pointer of the entry
//   rax  oc left                     rbx  scratch
//   r12  f32 acc pointer of block    r13  widen: element offset; row pairs:
//                                         the partner row's dd pointer
//   r14  widen: f32 scratch base     r15  prefetch pointer (direct)
// Vector registers: accumulators first (pixel-major), then n weights, then
// temporaries; the AVX2 tail mask is the last register. Opmasks: k1 the
// channel tail (VecIsa), k2 VecCvt's NaN lanes, k3 the widen tail.
const Xbyak::Reg64 kArgs = rdi, kBlkOff = rsi, kDst = rcx, kBlocks = rdx, kEntry = r8,
                   kEntries = r9, kDd = r10, kW = r11, kOc = rax, kTmp = rbx, kAcc = r12,
                   kCvtOff = r13, kCvtBuf = r14, kPf = r15, kDd2 = r13;

// The rep loop's stack frame (block_loop): qword slots below the saved
// registers.
enum RepSlot : int { kRepLeft = 0, kRepDst, kRepAcc, kRepDd, kRepW, kRepSlots };
constexpr int kRepFrameBytes = 8 * kRepSlots;
Xbyak::Address rep_slot(int slot) { return Xbyak::util::qword[rsp + 8 * slot]; }

template <typename T>
Xbyak::Address arg(Xbyak::CodeGenerator& cg, T DataKernelArgs::*field) {
    const DataKernelArgs probe;
    const auto off = reinterpret_cast<const char*>(&(probe.*field)) - reinterpret_cast<const char*>(&probe);
    return cg.qword[kArgs + static_cast<int>(off)];
}

// vpermw index interleaving the two halves of a vector: word 2c takes word
// c (the row), word 2c + 1 word 16 + c (its partner row).
struct RowPairIndex {
    alignas(64) uint16_t w[32];
    RowPairIndex() {
        for (int c = 0; c < 16; ++c) {
            w[2 * c] = static_cast<uint16_t>(c);
            w[2 * c + 1] = static_cast<uint16_t>(16 + c);
        }
    }
};
const RowPairIndex kRowPairIndex;

// Opmasks of the first n words, n = 0..16 (AVX-512 widen tail).
const uint16_t kWordMasks[17] = {0x0,   0x1,   0x3,   0x7,    0xf,    0x1f,   0x3f,   0x7f,  0xff,
                                 0x1ff, 0x3ff, 0x7ff, 0xfff, 0x1fff, 0x3fff, 0x7fff, 0xffff};

}  // namespace

DataKernel::DataKernel(const DataKernelDesc& d)
    : JitKernel("bwd_data_" + to_string(d)),
      d_(d),
      index_m_(d.m),
      vi_(*this, static_cast<Isa>(d.isa)),
      cvt_(*this, vi_, static_cast<Isa>(d.isa)) {}

// Everything: prologue, tail mask, the block loop, epilogue, constants.
void DataKernel::generate() {
    if (data_kernel_vregs(d_) > vi_.num_vregs())  // a planner bug, never silently wrong code
        throw error("JIT kernel " + name() + ": needs " + std::to_string(data_kernel_vregs(d_)) +
                    " vector registers");
    preamble(5);  // rbx, r12-r15
    if (d_.tail) vi_.set_tail(d_.tail, kTmp, vi_.num_vregs() - 1);
    if (d_.tail && dot() && d_.kind == int32_t(DataKernelKind::depthwise)) {  // the tail's bf16 words
        mov(ebx, kWordMasks[d_.tail]);
        kmovw(k3, ebx);
    }
    if (widen_direct()) mov(kCvtBuf, arg(*this, &DataKernelArgs::cvt));
    if (d_.row_pairs == int32_t(DataRowPairs::permute)) {  // words 16-31 (k4; the tail's: k5), the index
        mov(ebx, 0xffff0000);
        kmovd(k4, ebx);
        mov(ebx, static_cast<uint32_t>(((uint64_t(1) << d_.tail) - 1) << 16));
        kmovd(k5, ebx);
        mov(kTmp, reinterpret_cast<uintptr_t>(kRowPairIndex.w));
        vi_.load(index_vreg(), ptr[kTmp]);
    } else if (d_.row_pairs == int32_t(DataRowPairs::expand)) {  // the odd words (k4; the tail's: k5)
        mov(ebx, 0xaaaaaaaa);
        kmovd(k4, ebx);
        mov(ebx, static_cast<uint32_t>(0xaaaaaaaaULL & ((uint64_t(1) << (2 * d_.tail)) - 1)));
        kmovd(k5, ebx);
    }
    block_loop();
    postamble();
    cvt_.emit_constants();
}

// Reads args; writes rcx, rdx, rsi, r12; per rep (DataKernelArgs::nreps),
// every block: init, entries, store. The rep's offsets live on the stack
// (kRep*), read once a rep, and the W offset once an entry.
void DataKernel::block_loop() {
    Xbyak::Label l_rep, l_block, l_tail, l_done;
    sub(rsp, kRepFrameBytes);
    mov(kTmp, arg(*this, &DataKernelArgs::nreps));
    test(kTmp, kTmp);
    jle(l_done);
    mov(rep_slot(kRepLeft), kTmp);
    mov(kTmp, arg(*this, &DataKernelArgs::dst));
    mov(rep_slot(kRepDst), kTmp);
    mov(kTmp, arg(*this, &DataKernelArgs::acc));
    mov(rep_slot(kRepAcc), kTmp);
    xor_(kTmp, kTmp);
    mov(rep_slot(kRepDd), kTmp);
    mov(rep_slot(kRepW), kTmp);
    L(l_rep);
    mov(kDst, rep_slot(kRepDst));
    mov(kAcc, rep_slot(kRepAcc));
    mov(kBlkOff, rep_slot(kRepDd));
    if (dw_edges()) {
        edge_row();
    } else {
        mov(kBlocks, arg(*this, &DataKernelArgs::nblocks));
        test(kBlocks, kBlocks);
        jz(l_tail, T_NEAR);
        L(l_block);
        block_body();
        next_block();
        dec(kBlocks);
        jnz(l_block, T_NEAR);
    }
    L(l_tail);
    if (d_.tail_m && !dw_edges()) {  // the partial block: the same body over tail_m pixels
        Xbyak::Label l_no_tail;
        mov(kTmp, arg(*this, &DataKernelArgs::tail));
        test(kTmp, kTmp);
        jz(l_no_tail, T_NEAR);
        const int m = d_.m;
        d_.m = d_.tail_m;
        block_body();
        d_.m = m;
        L(l_no_tail);
    }
    const std::pair<int, int64_t DataKernelArgs::*> steps[] = {{kRepDd, &DataKernelArgs::dd_rep_bytes},
                                                               {kRepW, &DataKernelArgs::w_rep_bytes},
                                                               {kRepDst, &DataKernelArgs::dst_rep_bytes},
                                                               {kRepAcc, &DataKernelArgs::acc_rep_bytes}};
    for (const auto& [slot, field] : steps) {
        mov(kTmp, arg(*this, field));
        add(rep_slot(slot), kTmp);
    }
    dec(rep_slot(kRepLeft));
    jnz(l_rep);
    L(l_done);
    add(rsp, kRepFrameBytes);
}

// rcx / r12 / rsi := the next block's.
void DataKernel::next_block() {
    const int64_t acc_pix_bytes = d_.dst_pix_bytes / VecCvt::elem_bytes(out_dt()) * 4;
    add(kDst, static_cast<int>(d_.m * d_.dst_pix_bytes));
    add(kAcc, static_cast<int>(d_.m * acc_pix_bytes));
    add(kBlkOff, static_cast<int>(d_.dd_block_bytes));
}

// Depthwise W edges (DataKernelDesc::row_x0): a W phase of a row. Block b
// reads row pixels row_x0 + b·m - reach to row_x0 + b·m + m - 1, inside
// the row for the blocks [lo, hi): those run in a loop, the others (and
// the partial block) are emitted each for its position. Clobbers rdx.
void DataKernel::edge_row() {
    const int m = d_.m, nb = d_.row_nblocks, reach = (d_.row_taps - 1) * d_.tap_dil;
    auto inside = [&](int b) { return d_.row_x0 + b * m - reach >= 0 && d_.row_x0 + b * m + m <= d_.row_w; };
    int lo = 0;
    while (lo < nb && !inside(lo)) ++lo;
    int hi = lo;
    while (hi < nb && inside(hi)) ++hi;
    auto edge_block = [&](int b, int pixels) {  // block position b, emitted for its pixels alone
        d_.m = pixels;
        edge_px0_ = b * m;
        block_body();
        edge_px0_ = kInteriorBlock;
        d_.m = m;
    };
    for (int b = 0; b < lo; ++b) {
        edge_block(b, m);
        next_block();
    }
    if (hi > lo) {
        Xbyak::Label l_block;
        mov(kBlocks, hi - lo);
        L(l_block);
        block_body();
        next_block();
        dec(kBlocks);
        jnz(l_block, T_NEAR);
    }
    for (int b = hi; b < nb; ++b) {
        edge_block(b, m);
        next_block();
    }
    if (d_.tail_m) edge_block(nb, d_.tail_m);
}

// Depthwise W edges: the lines of the block's m pixels (n vectors each)
// at args.dd_pf to L2, if set. Reads rsi; clobbers r15.
void DataKernel::prefetch_next_row() {
    Xbyak::Label l_none;
    mov(kPf, arg(*this, &DataKernelArgs::dd_pf));
    test(kPf, kPf);
    jz(l_none, T_NEAR);
    const int64_t bytes = d_.n * vi_.vlen() * VecCvt::elem_bytes(in_dt());
    for (int j = 0; j < d_.m; ++j)
        for (int64_t off = 0; off < bytes; off += 64)
            prefetcht1(ptr[kPf + kBlkOff + static_cast<int>(j * d_.dd_pix_bytes + off)]);
    L(l_none);
}

// One block of m pixels at rcx / r12 / rsi: init, entries, store.
void DataKernel::block_body() {
    if (dw_edges()) prefetch_next_row();
    init_accumulators();
    if (store_prefetches(d_.store)) {
        Xbyak::Label l_streams;
        if (store_may_stream(d_.store)) {  // a streaming call's lines are not read
            mov(kTmp, arg(*this, &DataKernelArgs::streaming));
            test(kTmp, kTmp);
            jnz(l_streams, T_NEAR);
        }
        prefetch_block_dst();
        L(l_streams);
    }
    entry_loop();
    store_accumulators();
}

// Accumulators := 0, or := the f32 sums at acc when args.accumulate. Reads
// r12; clobbers rbx.
void DataKernel::init_accumulators() {
    Xbyak::Label l_load, l_done;
    const int64_t acc_pix_bytes = d_.dst_pix_bytes / VecCvt::elem_bytes(out_dt()) * 4;
    mov(kTmp, arg(*this, &DataKernelArgs::accumulate));
    test(kTmp, kTmp);
    jnz(l_load);
    for (int i = 0; i < d_.m * d_.n; ++i) vi_.zero(vi_.vreg(i));
    jmp(l_done);
    L(l_load);
    for (int j = 0; j < d_.m; ++j)
        for (int v = 0; v < d_.n; ++v) {
            const auto a = ptr[kAcc + static_cast<int>(j * acc_pix_bytes + v * vi_.vbytes())];
            if (d_.tail && v == d_.n - 1)
                vi_.load_tail(vi_.vreg(j * d_.n + v), a);
            else
                vi_.load(vi_.vreg(j * d_.n + v), a);
        }
    L(l_done);
}

// For every entry: r10 = entry.dd + block offset, r11 = entry.w, then the
// taps. Reads rdi, rsi; clobbers r8-r11, rax (and r13, rbx when widening).
void DataKernel::entry_loop() {
    Xbyak::Label l_entry, l_done;
    mov(kEntry, arg(*this, &DataKernelArgs::entries));
    mov(kEntries, arg(*this, &DataKernelArgs::nentries));
    test(kEntries, kEntries);
    jz(l_done);
    L(l_entry);
    mov(kDd, qword[kEntry + offsetof(DataEntry, dd)]);
    add(kDd, kBlkOff);
    lea(kPf, ptr[kDd + static_cast<int>(d_.dd_block_bytes)]);  // see prefetch_next_block
    mov(kW, qword[kEntry + offsetof(DataEntry, w)]);
    add(kW, rep_slot(kRepW));
    if (d_.row_pairs) {
        depthwise_row_pairs();
    } else if (d_.kind == int32_t(DataKernelKind::depthwise)) {
        depthwise_taps();
    } else {
        if (widen_direct()) widen_entry();
        oc_loop();
    }
    const int step = d_.row_pairs ? 2 : 1;  // row pairs: two entries a pass
    add(kEntry, static_cast<int>(step * sizeof(DataEntry)));
    sub(kEntries, step);
    jnz(l_entry);
    L(l_done);
}

// Widen: the m pixels × noc diff_dst values of this entry to f32 in the
// scratch (whole vectors, then the tail), and r10 := the scratch. Reads r10,
// r14; clobbers rax, rbx, r13, the W registers.
void DataKernel::widen_entry() {
    Xbyak::Label l_vec, l_tail, l_done;
    const int es = VecCvt::elem_bytes(in_dt());
    mov(kOc, arg(*this, &DataKernelArgs::noc));
    xor_(kCvtOff, kCvtOff);
    L(l_vec);
    cmp(kOc, vi_.vlen());
    jl(l_tail);
    for (int j = 0; j < d_.m; ++j) {
        const Xbyak::Xmm t = vi_.vreg(d_.m * d_.n + j % d_.n);
        cvt_.load(t, ptr[kDd + kCvtOff * es + static_cast<int>(j * d_.dd_pix_bytes)], in_dt());
        vi_.store(ptr[kCvtBuf + kCvtOff * 4 + static_cast<int>(j * d_.cvt_pix_bytes)], t);
    }
    add(kCvtOff, vi_.vlen());
    sub(kOc, vi_.vlen());
    jmp(l_vec);
    L(l_tail);
    widen_tail(l_done);
    L(l_done);
    mov(kDd, kCvtBuf);
}

// The last noc % vlen values of each pixel (rax of them, at element r13):
// AVX-512 under a word mask from a table (masked lanes are not read), AVX2
// one value at a time through rbx. Jumps to `done`.
void DataKernel::widen_tail(const Xbyak::Label& done) {
    const Xbyak::Xmm t = vi_.vreg(d_.m * d_.n);
    auto src = [&](int j) { return ptr[kDd + kCvtOff * 2 + static_cast<int>(j * d_.dd_pix_bytes)]; };
    auto dst = [&](int j) { return ptr[kCvtBuf + kCvtOff * 4 + static_cast<int>(j * d_.cvt_pix_bytes)]; };
    test(kOc, kOc);
    jz(done);
    if (vi_.avx512()) {
        mov(kTmp, reinterpret_cast<uintptr_t>(kWordMasks));
        movzx(ebx, word[kTmp + kOc * 2]);
        kmovw(k3, ebx);
        for (int j = 0; j < d_.m; ++j) {
            vmovdqu16(Xbyak::Ymm(t.getIdx()) | k3 | T_z, src(j));
            cvt_.widen(t, in_dt());
            vi_.store(dst(j), t);
        }
        jmp(done);
        return;
    }
    Xbyak::Label l_one;
    L(l_one);
    for (int j = 0; j < d_.m; ++j) {
        movzx(ebx, word[src(j).getRegExp()]);
        if (in_dt() == data_type::bf16) {
            shl(ebx, 16);
            mov(dword[dst(j).getRegExp()], ebx);
        } else {
            vmovd(Xbyak::Xmm(t.getIdx()), ebx);
            vcvtph2ps(Xbyak::Xmm(t.getIdx()), Xbyak::Xmm(t.getIdx()));
            vmovss(dword[dst(j).getRegExp()], Xbyak::Xmm(t.getIdx()));
        }
    }
    inc(kCvtOff);
    dec(kOc);
    jnz(l_one);
    jmp(done);
}

// Direct: the oc reduction of one entry, oc_unroll steps per trip then one
// at a time (bf16_dot: steps of an oc pair, then the odd last oc). Reads
// r10, r11; advances them; clobbers rax (and rbx for the odd oc).
void DataKernel::oc_loop() {
    const int u = d_.oc_unroll;
    const int w_oc_bytes = d_.n * vi_.vbytes();  // one oc, or one oc pair of bf16
    Xbyak::Label l_main, l_rem, l_done;
    mov(kOc, arg(*this, &DataKernelArgs::noc));
    if (dot()) shr(kOc, 1);
    if (u > 1) {
        L(l_main);
        cmp(kOc, u);
        jl(l_rem);
        prefetch_next_block();
        for (int i = 0; i < u; ++i) oc_step(i);
        add(kDd, u * 4);
        add(kW, u * w_oc_bytes);
        sub(kOc, u);
        jmp(l_main);
    }
    L(l_rem);
    test(kOc, kOc);
    jz(l_done);
    if (u == 1) prefetch_next_block();
    oc_step(0);
    add(kDd, 4);
    add(kW, w_oc_bytes);
    dec(kOc);
    jmp(l_rem);
    L(l_done);
    if (dot()) {
        Xbyak::Label l_even;
        test(arg(*this, &DataKernelArgs::noc), 1);
        jz(l_even);
        odd_oc_step();
        L(l_even);
    }
}

// Direct, one oc (at offset i from r10/r11): n weight vectors, then per
// pixel one broadcast diff_dst value times the n vectors (bf16_dot: one oc
// pair, 4 bytes of diff_dst either way). Reads r10, r11.
// pf_lines lines of the next block's diff_dst for this entry per trip of
// the oc loop, walking on from its first pixel (r15, set per entry): a
// block of a row is m consecutive pixels, so by the time the next block
// starts its data is in L1 instead of arriving a broadcast at a time.
// (ResNet-50 1x1 64<-256 at 56x56, 2 threads: f32 175 -> 223 GFLOP/s, bf16
// 298 -> 443. One line a trip covered half the next block at m = 16:
// MobileNetV2 16 <- 96 at 112x112 gained 1.19-1.25x from two.)
void DataKernel::prefetch_next_block() {
    for (int i = 0; i < d_.pf_lines; ++i) prefetcht0(ptr[kPf + 64 * i]);
    add(kPf, 64 * d_.pf_lines);
}

void DataKernel::oc_step(int i) {
    if (direct_row_taps()) {
        oc_step_row_taps(i);
        return;
    }
    const int mn = d_.m * d_.n;
    const int w_oc_bytes = d_.n * vi_.vbytes();
    for (int v = 0; v < d_.n; ++v)
        vi_.load(vi_.vreg(mn + v), ptr[kW + i * w_oc_bytes + v * vi_.vbytes()]);
    // The broadcast register: AVX-512 broadcasts inside the FMA instead (its
    // tiles count no register for it; the first W register stands in).
    const Xbyak::Xmm bc = vi_.vreg(d_.bcast_in_fma && vi_.avx512() ? mn : mn + d_.n);
    for (int j = 0; j < d_.m; ++j) {
        const auto a = ptr[kDd + static_cast<int>(j * bcast_pix_bytes() + i * 4)];
        for (int v = 0; v < d_.n && d_.bcast_in_fma; ++v) {
            if (dot())
                cvt_.dot_bf16_bcast(vi_.vreg(j * d_.n + v), vi_.vreg(mn + v), a);
            else
                vi_.fma_bcast(vi_.vreg(j * d_.n + v), vi_.vreg(mn + v), a, bc);
        }
        if (d_.bcast_in_fma) continue;
        vi_.bcast(bc, a);
        for (int v = 0; v < d_.n; ++v) {
            if (dot())
                vdpbf16ps(vi_.vreg(j * d_.n + v), vi_.vreg(mn + v), bc);
            else
                vi_.fma(vi_.vreg(j * d_.n + v), vi_.vreg(mn + v), bc);
        }
    }
}

// bf16_dot, the odd last oc: the pair (diff_dst[oc], 0) against W's (w, 0),
// so the word after the chunk is never read. One W vector at a time in the
// first W register, the pair in the second (or the temporary when n = 1);
// it runs once per entry, so the repeated broadcasts cost nothing. Row taps
// go tap by tap (one tap: row_x0 = 0, pixel x is block pixel x). Reads r10,
// r11; clobbers rbx.
void DataKernel::odd_oc_step() {
    const int mn = d_.m * d_.n;
    const Xbyak::Xmm w = vi_.vreg(mn), bc = vi_.vreg(mn + 1);
    const int pixels = direct_row_taps() ? d_.row_w : d_.m;  // diff_dst pixels an entry reads
    for (int k = 0; k < d_.row_taps; ++k)
        for (int v = 0; v < d_.n; ++v) {
            vi_.load(w, ptr[kW + static_cast<int>(k * d_.w_tap_bytes) + v * vi_.vbytes()]);
            for (int r = 0; r < d_.block_rows; ++r)
                for (int x = 0; x < pixels; ++x) {
                    const int j = row_tap_pixel(x, k);
                    if (j < 0) continue;
                    movzx(ebx, word[kDd + static_cast<int>(r * block_row_dd_bytes() +
                                                           (x - d_.row_x0) * d_.dd_pix_bytes)]);
                    vpbroadcastd(bc, ebx);
                    vdpbf16ps(vi_.vreg((r * row_pixels() + j) * d_.n + v), w, bc);
                }
        }
}

// Direct row taps, one oc (bf16_dot: oc pair) at offset i: the n W vectors
// of each of the row_taps taps, then each diff_dst pixel any (block pixel,
// tap) reads broadcast once and multiplied into every such pair. Reads r10,
// r11.
void DataKernel::oc_step_row_taps(int i) {
    const int mn = d_.m * d_.n, taps = d_.row_taps;
    const int w_oc_bytes = d_.n * vi_.vbytes();
    for (int k = 0; k < taps; ++k)
        for (int v = 0; v < d_.n; ++v)
            vi_.load(vi_.vreg(mn + k * d_.n + v),
                     ptr[kW + static_cast<int>(k * d_.w_tap_bytes) + i * w_oc_bytes + v * vi_.vbytes()]);
    const Xbyak::Xmm bc = vi_.vreg(mn + taps * d_.n);
    for (int r = 0; r < d_.block_rows; ++r)
        for (int x = 0; x < d_.row_w; ++x) {
            bool read = false;
            for (int k = 0; k < taps; ++k) read = read || row_tap_pixel(x, k) >= 0;
            if (!read) continue;
            vi_.bcast(bc, ptr[kDd + static_cast<int>(r * block_row_dd_bytes() + (x - d_.row_x0) * d_.dd_pix_bytes +
                                                     i * 4)]);
            for (int k = 0; k < taps; ++k) {
                const int j = row_tap_pixel(x, k);
                if (j < 0) continue;
                const int acc = (r * row_pixels() + j) * d_.n;
                for (int v = 0; v < d_.n; ++v) {
                    if (dot())
                        vdpbf16ps(vi_.vreg(acc + v), vi_.vreg(mn + k * d_.n + v), bc);
                    else
                        vi_.fma(vi_.vreg(acc + v), vi_.vreg(mn + k * d_.n + v), bc);
                }
            }
        }
}

// Depthwise: bytes from an entry's W to its tap k's (pass 0): packed,
// k·w_tap_step·passes·n vectors; read in place, k·w_tap_step·w_tap_bytes.
int64_t DataKernel::dw_w_tap(int k) const {
    const int64_t tap = int64_t(k) * d_.w_tap_step;
    return d_.w_tap_bytes ? tap * d_.w_tap_bytes : tap * lane_group_passes() * d_.n * vi_.vbytes();
}

// Depthwise, one entry: for each of the G output channels o of a lane
// group (one pass for G = 1; bf16_dot: each of the G / 2 pairs of them),
// row_taps × n weight vectors (tap k at dw_w_tap(k) + o·n vectors from
// r11)
// times the pixels' permuted diff_dst vectors. Reads r10, r11; clobbers rbx
// (G >= 8, bf16_dot).
void DataKernel::depthwise_taps() {
    for (int o = 0; o < lane_group_passes(); ++o) depthwise_lane_group(o);
}

// Row pairs, one pair of entries: the second entry's dd is the partner row
// (r13 := it plus the block offset; its W pointer is not read), or null
// for a row alone. Reads r8, r10, r11, rsi; clobbers r13.
void DataKernel::depthwise_row_pairs() {
    Xbyak::Label l_alone, l_done;
    mov(kDd2, qword[kEntry + static_cast<int>(sizeof(DataEntry) + offsetof(DataEntry, dd))]);
    test(kDd2, kDd2);
    jz(l_alone, T_NEAR);
    add(kDd2, kBlkOff);
    depthwise_lane_group(0, DwRows::pair);
    jmp(l_done, T_NEAR);
    L(l_alone);
    depthwise_lane_group(0, DwRows::alone);
    L(l_done);
}

// Pixel j of tap k reads diff_dst pixel q = j - k·tap_dil from r10, so each
// q is loaded once per pass (widened on load; the tail vector read masked:
// it may end the tensor) and feeds every (j, k) it serves.
void DataKernel::depthwise_lane_group(int o, DwRows rows) {
    const int mn = d_.m * d_.n, taps = d_.row_taps, dil = d_.tap_dil, g = d_.lane_group;
    const int dd_vec_bytes = vi_.vlen() * VecCvt::elem_bytes(in_dt());
    auto load_w = [&](int k, int reg) {
        for (int v = 0; v < d_.n; ++v) {
            const Xbyak::Xmm w = vi_.vreg(mn + reg * d_.n + v);
            if (d_.w_tap_bytes)  // in place, in the kernel's input type (16-bit: widened here)
                cvt_.load(w, ptr[kW + static_cast<int>(dw_w_tap(k)) + v * dd_vec_bytes], in_dt());
            else
                vi_.load(w, ptr[kW + static_cast<int>(dw_w_tap(k)) + (o * d_.n + v) * vi_.vbytes()]);
        }
    };
    // One diff_dst vector (pixel q, vector v) into t: widened, permuted or
    // paired as the kernel reads diff_dst.
    auto load_dd = [&](const Xbyak::Xmm& t, int q, int v) {
        const int disp = static_cast<int>(q * d_.dd_pix_bytes + v * dd_vec_bytes);
        const bool tail = d_.tail && v == d_.n - 1;
        if (rows != DwRows::one)
            load_row_pair(t, disp, tail, rows);
        else if (dot())
            load_pairs(t, disp, tail);
        else
            load_lane_group(t, disp, o, tail);
    };
    auto multiply = [&](int j, int v, int reg, const Xbyak::Xmm& t) {
        if (dot())
            vdpbf16ps(vi_.vreg(j * d_.n + v), vi_.vreg(mn + reg * d_.n + v), t);
        else
            vi_.fma(vi_.vreg(j * d_.n + v), vi_.vreg(mn + reg * d_.n + v), t);
    };
    if (embedded_lane_group()) {
        // Each (pixel, vector) FMA multiplies its own broadcast (a vector is
        // one group): read it inside the FMA, pair o at bytes 4o either way.
        load_w(0, 0);
        for (int j = 0; j < d_.m; ++j)
            for (int v = 0; v < d_.n && dw_pixel_inside(j); ++v) {
                const auto a = ptr[kDd + static_cast<int>(j * d_.dd_pix_bytes + v * dd_vec_bytes + o * 4)];
                if (dot())
                    cvt_.dot_bf16_bcast(vi_.vreg(j * d_.n + v), vi_.vreg(mn + v), a);
                else
                    vi_.fma_bcast(vi_.vreg(j * d_.n + v), vi_.vreg(mn + v), a, vi_.vreg(mn + taps * d_.n));
            }
        return;
    }
    // Row pairs keep their index from the start (generate).
    if (rows == DwRows::one && dot())
        vi_.lane_group_pair_index(index_vreg(), kTmp, g, o);
    else if (rows == DwRows::one && VecIsa::lane_group_needs_index(g) && !bcast_lane_group())
        vi_.lane_group_index(index_vreg(), kTmp, g, o);
    int next_temp = 0;
    auto temp = [&] {
        const Xbyak::Xmm t = vi_.vreg(mn + w_vregs() + next_temp);
        next_temp ^= 1;
        return t;
    };
    // Taps k0 .. k0 + t - 1 at once: their W vectors in W registers 0 ..
    // t - 1, then each diff_dst pixel q = p - k0·dil (p from -(t - 1)·dil)
    // loaded once for every tap u whose pixel j = p + u·dil is in the block
    // (at a W edge only the q inside the row).
    auto group = [&](int k0, int t) {
        for (int u = 0; u < t; ++u) load_w(k0 + u, u);
        for (int pp = -(t - 1) * dil; pp < d_.m; ++pp) {
            bool feeds = false;
            for (int u = 0; u < t; ++u) feeds |= pp + u * dil >= 0 && pp + u * dil < d_.m;
            const int q = pp - k0 * dil;
            for (int v = 0; v < d_.n && feeds && dw_pixel_inside(q); ++v) {
                const Xbyak::Xmm tmp = temp();
                load_dd(tmp, q, v);
                for (int u = 0; u < t; ++u) {
                    const int j = pp + u * dil;
                    if (j >= 0 && j < d_.m) multiply(j, v, u, tmp);
                }
            }
        }
    };
    if (!d_.tap_seq) {
        group(0, taps);
        return;
    }
    // Taps tap_seq at a time (the last group may hold fewer).
    const int gsize = d_.tap_seq, ngroups = (taps + gsize - 1) / gsize;
    auto group_taps = [&](int gi) { return std::min(gsize, taps - gi * gsize); };
    auto tap_pixels = [&](int k, int j) { return dw_pixel_inside(j - k * dil); };
    auto same_pixels = [&](int g0, int g1) {  // full groups whose taps read the same pixels
        if (group_taps(g0) != gsize || group_taps(g1) != gsize) return false;
        for (int u = 0; u < gsize; ++u)
            for (int j = 0; j < d_.m; ++j)
                if (tap_pixels(g0 * gsize + u, j) != tap_pixels(g1 * gsize + u, j)) return false;
        return true;
    };
    auto no_pixels = [&](int gi) {
        for (int u = 0; u < group_taps(gi); ++u)
            for (int j = 0; j < d_.m; ++j)
                if (tap_pixels(gi * gsize + u, j)) return false;
        return true;
    };
    const int per_trip = std::max(1, kDataSeqLoopUnroll / gsize);  // groups a trip
    for (int gi = 0; gi < ngroups;) {
        int end = gi + 1;
        while (end < ngroups && same_pixels(gi, end)) ++end;
        const int run = end - gi;
        if (no_pixels(gi)) {  // taps that read only past a W edge: left out
            gi = end;
            continue;
        }
        if (group_taps(gi) < gsize || run * gsize < kDataSeqLoopTaps || run < 2 * per_trip) {  // unrolled
            for (; gi < end; ++gi) group(gi * gsize, group_taps(gi));
            continue;
        }
        // A run of groups over the same pixels (an interior block's every
        // group; an edge block has at most 2m + 1 runs) loops per_trip
        // groups a trip, the W and diff_dst pointers stepping a trip's taps.
        const int trips = run / per_trip, trip_taps = per_trip * gsize;
        const int w_step = static_cast<int>(dw_w_tap(trip_taps));
        const int dd_step = static_cast<int>(trip_taps * dil * d_.dd_pix_bytes);
        auto step = [&](int sign) {
            add(kW, sign * w_step);
            sub(kDd, sign * dd_step);
            if (rows == DwRows::pair) sub(kDd2, sign * dd_step);
        };
        Xbyak::Label l_trip;
        mov(kOc, trips);
        L(l_trip);
        for (int u = 0; u < per_trip; ++u) group((gi + u) * gsize, gsize);
        step(1);
        dec(kOc);
        jnz(l_trip, T_NEAR);
        for (int u = trips * per_trip; u < run; ++u) group((gi + u - trips * per_trip) * gsize, gsize);
        step(-trips);
        gi = end;
    }
}

// bf16_dot lane groups: t := the 16 bf16 diff_dst channels at r10 + disp
// (32 bytes; the tail's words masked by k3) with dword lane c replaced by
// dword (c - c % G) / 2 + o, its group's channel pair o, by the index the
// pass loaded (VecIsa::lane_group_pair_index).
void DataKernel::load_pairs(const Xbyak::Xmm& t, int disp, bool tail) {
    const Xbyak::Ymm y(t.getIdx());
    if (tail)
        vmovdqu16(y | k3 | T_z, ptr[kDd + disp]);
    else
        vmovdqu16(y, ptr[kDd + disp]);  // EVEX: the temporaries may be ymm16-31
    vpermd(Xbyak::Zmm(t.getIdx()), Xbyak::Zmm(index_vreg().getIdx()), Xbyak::Zmm(t.getIdx()));
}

// Row pairs: dword lane c of t := (word c at r10 + disp, word c at r13 +
// disp), the 16 bf16 channels of the row and of its partner row. permute:
// the row into the low half, the partner into the high half (a masked load
// from 32 bytes before it, words 16-31 under k4, or k5 for the tail's:
// masked words are not read), then vpermw interleaves the halves. expand:
// the row zero-extended into the even words, the partner vpexpandw'ed into
// the odd ones under k4 / k5 (words not selected stay 0). A row alone is
// zero-extended, so the pair's second product is 0 · 0 whatever the row
// holds.
void DataKernel::load_row_pair(const Xbyak::Xmm& t, int disp, bool tail, DwRows rows) {
    const Xbyak::Zmm z(t.getIdx());
    const Xbyak::Opmask partner = tail ? k5 : k4;
    if (rows == DwRows::alone || d_.row_pairs == int32_t(DataRowPairs::expand)) {
        if (tail)
            vpmovzxwd(z | k1 | T_z, ptr[kDd + disp]);
        else
            vpmovzxwd(z, ptr[kDd + disp]);
        if (rows == DwRows::pair) vpexpandw(z | partner, ptr[kDd2 + disp]);
        return;
    }
    const Xbyak::Ymm y(t.getIdx());
    if (tail)
        vmovdqu16(y | k3 | T_z, ptr[kDd + disp]);
    else
        vmovdqu16(y, ptr[kDd + disp]);  // EVEX: the temporaries may be ymm16-31
    vmovdqu16(z | partner, ptr[kDd2 + disp - 32]);
    vpermw(z, Xbyak::Zmm(index_vreg().getIdx()), z);
}

// t := perm_o of the diff_dst vector at r10 + disp, widened to f32. Whole
// f32 vectors permute straight from memory (a group of a whole vector:
// broadcast lane o); 16-bit and tail vectors are loaded (masked lanes read
// 0) and permuted in the register (G >= 8: by index_vreg()).
void DataKernel::load_lane_group(const Xbyak::Xmm& t, int disp, int o, bool tail) {
    const int g = d_.lane_group;
    const auto a = ptr[kDd + disp];
    if (bcast_lane_group()) {
        vi_.bcast(t, ptr[kDd + disp + o * 4]);
        return;
    }
    const bool from_mem = g > 1 && in_dt() == data_type::f32 && !tail;
    if (!from_mem) {
        if (tail)
            cvt_.load_tail(t, a, in_dt(), d_.tail);
        else
            cvt_.load(t, a, in_dt());
        if (g == 1) return;
    }
    const Xbyak::Operand& src = from_mem ? static_cast<const Xbyak::Operand&>(a) : t;
    // (Groups of up to 4 permute by an immediate: no index register to name.)
    vi_.permute_lane_group(t, src, g, o, VecIsa::lane_group_needs_index(g) ? index_vreg() : t);
}

// PREFETCHW of the block's diff_src lines: the first and last byte of each
// vector store (a vector may straddle two lines; the base's alignment is not
// known here). Prefetches never fault, and a line shared with a neighbour
// block or thread is only fetched early.
void DataKernel::prefetch_block_dst() {
    const int es = VecCvt::elem_bytes(out_dt());
    for (int j = 0; j < d_.m; ++j)
        for (int v = 0; v < d_.n; ++v) {
            const int lanes = d_.tail && v == d_.n - 1 ? d_.tail : vi_.vlen();
            const int64_t first = j * d_.dst_pix_bytes + int64_t(v) * vi_.vlen() * es;
            prefetchw(ptr[kDst + static_cast<int>(first)]);
            prefetchw(ptr[kDst + static_cast<int>(first + lanes * es - 1)]);
        }
}

// Accumulators out: f32 output stores to dst; a 16-bit output rounds into
// dst when args.store_final, else keeps f32 partial sums in acc.
void DataKernel::store_accumulators() {
    if (out_dt() == data_type::f32) {
        store_final();
        return;
    }
    Xbyak::Label l_partial, l_done;
    mov(kTmp, arg(*this, &DataKernelArgs::store_final));
    test(kTmp, kTmp);
    jz(l_partial, T_NEAR);
    store_final();
    jmp(l_done, T_NEAR);
    L(l_partial);
    store_block(false, false);
    L(l_done);
}

// The final store to dst: non-temporal when the call streams
// (DataKernelArgs::streaming, a *_or_streaming desc), else ordinary.
void DataKernel::store_final() {
    if (!store_may_stream(d_.store)) {
        store_block(true, false);
        return;
    }
    Xbyak::Label l_plain, l_done;
    mov(kTmp, arg(*this, &DataKernelArgs::streaming));
    test(kTmp, kTmp);
    jz(l_plain, T_NEAR);
    store_block(true, true);
    jmp(l_done, T_NEAR);
    L(l_plain);
    store_block(true, false);
    L(l_done);
}

// One store of the m × n tile, the last vector masked when there is a tail:
// to_dst rounds to out_dt at rcx (nt: non-temporal stores), else f32 at
// r12. Clobbers the W and temporary registers (VecCvt's scratch) and the
// accumulators.
void DataKernel::store_block(bool to_dst, bool nt) {
    const data_type dt = to_dst ? out_dt() : data_type::f32;
    const int64_t pix = to_dst ? d_.dst_pix_bytes : d_.dst_pix_bytes / VecCvt::elem_bytes(out_dt()) * 4;
    const Xbyak::Reg64 base = to_dst ? kDst : kAcc;
    const int mn = d_.m * d_.n;
    const Xbyak::Xmm t0 = vi_.vreg(mn), t1 = vi_.vreg(mn + 1);
    for (int j = 0; j < d_.m; ++j)
        for (int v = 0; v < d_.n; ++v) {
            const auto a = ptr[base + static_cast<int>(j * pix + v * vi_.vlen() * VecCvt::elem_bytes(dt))];
            if (d_.tail && v == d_.n - 1)
                cvt_.store_tail(a, vi_.vreg(j * d_.n + v), dt, d_.tail, t0, t1);
            else
                cvt_.store(a, vi_.vreg(j * d_.n + v), dt, t0, t1, nt);
        }
}

std::shared_ptr<const DataKernel> get_data_kernel(const DataKernelDesc& d, bool* hit) {
    static KernelCache<DataKernelDesc, DataKernel> cache;
    return get_finalized(cache, d, hit);
}

}  // namespace convgrad::detail
