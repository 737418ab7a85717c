// The weight-gradient skeleton, the gemm generator and the kernel cache.
#include "jit/bwd_weights_kernel.hpp"

#include <algorithm>
#include <cstddef>
#include <sstream>
#include <vector>

#include "jit/bwd_weights_skeleton.hpp"
#include "jit/kernel_cache.hpp"

namespace convgrad::detail {

using Xbyak::Xmm;

namespace {

bool avx512(const WeightsKernelDesc& d) { return static_cast<Isa>(d.isa) >= Isa::avx512_core; }

// gemm: n diff_dst vectors + one broadcast register, except AVX-512 with a
// single vector, which broadcasts inside the FMA; copies that pair bf16
// images need a second register there.
int gemm_temps(const WeightsKernelDesc& d) {
    // The diff_dst window, two broadcast registers; lane pairs: the pixel's
    // diff_dst vector in two lane orders.
    if (d.kw_win > 0) return d.kw_win * d.n + 2 + (d.lane_pairs ? 2 : 0);
    const bool embedded = avx512(d) && d.n == 1;
    return d.n + (embedded ? 0 : 1) + (embedded && (d.stage || d.pair_dst) && d.dot ? 1 : 0);
}
// depthwise: n diff_dst vectors + one src register (AVX2 loads through it)
// + the permutation index of a lane group of 8.
// W pixel pairs (desc.dot): a second src register and the interleave index,
// and a window at W stride s a ring of s + 1 src registers.
int dw_temps(const WeightsKernelDesc& d) {
    const bool pairs = d.dot == 1;  // (dot 2, zero-extended single products, loads as widened 16 bits do)
    const int ring = pairs && d.window > 1 ? std::max<int>(1, d.w_stride) - 1 : 0;
    // Whole rows: the pixels whose diff_dst is live at one src column.
    // Row blocks: those of each of the block's rows.
    const int held = d.row_px ? ((d.m - 1) / std::max<int>(1, d.w_stride) + 1) * std::max<int>(1, d.row_block)
                              : std::max<int>(1, d.window);
    return held * d.n + 1 + VecIsa::lane_group_needs_index(d.lane_group) + (pairs ? 2 + ring : 0);
}

}  // namespace

int weights_kernel_vregs(const WeightsKernelDesc& d) {
    const bool dw = d.kind == static_cast<uint8_t>(WeightsKernelKind::depthwise);
    const int mask = (!avx512(d) && d.tail) ? 1 : 0;
    return weights_tile_rows(d) * d.n * std::max<int>(1, d.acc_sets) + (dw ? dw_temps(d) : gemm_temps(d)) + mask;
}

std::string weights_kernel_name(const WeightsKernelDesc& d) {
    std::ostringstream os;
    const bool dw = d.kind == static_cast<uint8_t>(WeightsKernelKind::depthwise);
    os << (dw ? "wdw_" : "wgemm_") << isa_name(static_cast<Isa>(d.isa)) << (dw ? "_k" : "_m")
       << int(d.m) << 'n' << int(d.n) << 't' << int(d.tail);
    if (dw) os << "_d" << d.tap_disp;
    if (d.kh > 1) os << "_kh" << int(d.kh) << "r" << d.row_disp;
    if (d.kd > 1) os << "_kd" << int(d.kd) << "p" << d.plane_disp;
    if (d.kw_win > 0) os << "_kw" << int(d.kw_win) << 'h' << int(d.kw_head) << 't' << int(d.kw_tail) << 'p' << int(d.kw_pad);
    if (d.kw_lanes) os << "_lanes" << int(d.kw_last) << "d" << d.tap_disp << (d.lane_pairs ? "_pairs" : "");
    if (dw && d.window > 1) os << "_w" << int(d.window);
    if (d.row_px) os << "_row" << int(d.row_px) << '_' << int(d.row_lo) << '_' << int(d.row_cut);
    if (d.row_block > 1)
        os << "_blk" << int(d.row_block) << 'h' << std::max<int>(1, d.h_stride) << 'r' << d.dst_row_disp;
    if (d.w_stride > 1) os << "_ws" << int(d.w_stride);
    if (d.lane_group > 1) os << "_lg" << int(d.lane_group);
    if (d.dot) os << (d.dot == 2 ? "_zx" : "_dot");
    if (d.in_dt) os << '_' << dtype_name(static_cast<data_type>(d.in_dt));
    if (d.stage) os << "_s" << int(d.stage);
    if (d.pf_lines != 1) os << "_pf" << int(d.pf_lines);
    if (d.pf_steps > 1) os << "_walk" << int(d.pf_steps);
    if (d.edges) os << "_e";
    if (d.la_dst) os << "_la" << d.la_src << '_' << d.la_dst << 'h' << std::max<int>(1, d.h_stride);
    if (d.ic_loop) os << "_icl";
    if (d.store_dt) os << "_to" << dtype_name(static_cast<data_type>(d.store_dt));
    if (d.pair_dst) os << "_pd";
    if (d.acc_sets > 1) os << "_a" << int(d.acc_sets);
    return os.str();
}

// ---- skeleton ---------------------------------------------------------------

WeightsSkeleton::WeightsSkeleton(const WeightsKernelDesc& d)
    : WeightsKernel(weights_kernel_name(d)),
      desc_(d),
      vec_(*this, static_cast<Isa>(d.isa)),
      cvt_(*this, vec_, static_cast<Isa>(d.isa)) {}

void WeightsSkeleton::load_vec(const Xmm& r, const Xbyak::Address& a, int v) {
    if (zero_ext())
        cvt_.load_zero_ext(r, a, is_tail(v) ? desc_.tail : 0);
    else if (is_tail(v))
        cvt_.load_tail(r, a, in_dt(), desc_.tail);
    else
        cvt_.load(r, a, in_dt());
}

void WeightsSkeleton::mac(const Xmm& acc, const Xmm& a, const Xmm& b) {
    if (dot() || zero_ext())
        vdpbf16ps(acc, a, b);
    else
        vec_.fma(acc, a, b);
}

void WeightsSkeleton::mac_mem(const Xmm& acc, const Xmm& a, const Xbyak::Address& m, int v, const Xmm& tmp) {
    if (!dot()) {
        if (is_tail(v))
            vec_.fma_mem_tail(acc, a, m, tmp);
        else
            vec_.fma_mem(acc, a, m, tmp);
        return;
    }
    // Masked lanes keep acc; the stager pads its buffers, so the full-width
    // read of a tail vector stays inside them either way.
    if (is_tail(v))
        vdpbf16ps(Xbyak::Zmm(acc.getIdx()) | Xbyak::util::k1, Xbyak::Zmm(a.getIdx()), m);
    else
        vdpbf16ps(acc, a, m);
}

void WeightsSkeleton::mac_bcast(const Xmm& acc, const Xmm& a, const Xbyak::Address& m, const Xmm& tmp) {
    if (!dot()) {
        vec_.fma_bcast(acc, a, m, tmp);
        return;
    }
    vdpbf16ps(acc, a, ptr_b[m.getRegExp()]);
}

void WeightsSkeleton::generate() {
    if (desc_.dot > 2 || (zero_ext() && (!dw() || in_dt() != data_type::bf16 || !cvt_.native_bf16())))
        throw error("JIT kernel " + name() + ": zero-extended bf16 products need a bf16 depthwise kernel on "
                    "avx512_core_bf16");
    if (desc_.stage && (!vec_.avx512() || desc_.kind != static_cast<uint8_t>(WeightsKernelKind::gemm) ||
                        (dot() && in_dt() != data_type::bf16)))
        throw error("JIT kernel " + name() + ": stage copies need a gemm kernel on AVX-512 (pairs: of bf16)");
    if (desc_.edges && (desc_.stage || desc_.kind != static_cast<uint8_t>(WeightsKernelKind::depthwise) ||
                        mask_pairs() > 31))
        throw error("JIT kernel " + name() + ": edge masks need a depthwise kernel of at most 31 (row, tap) pairs");
    const bool window_edges_ok =
            desc_.kw_lanes ? desc_.kw_pad < desc_.kw_win && desc_.kw_last < desc_.kw_win && desc_.w_stride >= 1
                           : desc_.kw_pad < desc_.kw_win && desc_.kw_tail < desc_.kw_win &&
                                     desc_.kw_head + desc_.kw_pad <= desc_.kw_win - 1;
    const bool window_vecs_ok = desc_.n == 1 || (desc_.n == 2 && vec_.avx512() && !desc_.kw_lanes);
    if (desc_.kw_win > 0 && (dw() || desc_.stage || !window_vecs_ok || desc_.kh > 1 || desc_.in_dt ||
                             desc_.edges || !window_edges_ok))
        throw error("JIT kernel " + name() + ": kw windows need a gemm kernel of 32-bit elements and one vector "
                    "(two on AVX-512 without lanes), without copies, and edges shorter than the kernel");
    if (desc_.kw_lanes && (desc_.kw_win == 0 || !vec_.avx512() || desc_.m > 8 ||
                           (desc_.lane_pairs && (desc_.m != 8 || desc_.tail))))
        throw error("JIT kernel " + name() + ": kw lanes need a kw window on AVX-512 and at most 8 output channels");
    if (desc_.row_px && (!dw() || dot() || desc_.lane_group > 1 || desc_.window > 1))
        throw error("JIT kernel " + name() + ": whole rows need a depthwise kernel without pairs, groups or windows");
    if (desc_.row_block > 1 && (!desc_.row_px || desc_.row_disp <= 0 || desc_.dst_row_disp <= 0))
        throw error("JIT kernel " + name() + ": row blocks need whole rows and both row displacements");
    if (desc_.ic_loop && (desc_.stage || desc_.kw_win || (!dw() && (desc_.edges || desc_.row_px))))
        throw error("JIT kernel " + name() + ": ic tile loops need a depthwise kernel, or a gemm kernel without "
                    "copies or windows");
    if (store16() && (!vec_.avx512() || dw() || desc_.kw_lanes || desc_.ic_loop ||
                      (desc_.store_dt != static_cast<uint8_t>(data_type::bf16) &&
                       desc_.store_dt != static_cast<uint8_t>(data_type::f16))))
        throw error("JIT kernel " + name() + ": 16-bit tile stores need a bf16 / f16 gemm kernel on AVX-512");
    const bool folded = desc_.kh > 1 || desc_.kd > 1;
    if (!dw() && folded &&
        (desc_.kd == 0 || desc_.stage || desc_.kw_win || desc_.dot || desc_.ic_loop || desc_.pair_dst ||
         desc_.row_disp <= 0 || (desc_.kd > 1 && desc_.plane_disp <= 0)))
        throw error("JIT kernel " + name() + ": folded taps need a gemm kernel of FMAs without copies, windows or "
                    "ic loops, and their displacements");
    if (!dw() && desc_.in_dt && !desc_.stage && !desc_.pair_dst && !folded)
        throw error("JIT kernel " + name() + ": a gemm kernel widens diff_dst in place only with folded taps");
    if (dw() && desc_.kd != 1)
        throw error("JIT kernel " + name() + ": depthwise tiles take one depth tap");
    if (weights_kernel_vregs(desc_) > vec_.num_vregs())
        throw error("JIT kernel " + name() + ": needs " + std::to_string(weights_kernel_vregs(desc_)) +
                    " vector registers, the ISA has " + std::to_string(vec_.num_vregs()));
    if (desc_.pair_dst && (dw() || !vec_.avx512() || !dot() || in_dt() != data_type::bf16 || desc_.stage ||
                           desc_.kw_win || desc_.edges))
        throw error("JIT kernel " + name() + ": diff_dst paired in registers needs a bf16 pair gemm kernel on "
                    "AVX-512 without copies or windows");
    if (desc_.acc_sets > 4 || (desc_.acc_sets > 1 && (dw() || dot() || desc_.in_dt || desc_.stage || desc_.kw_win ||
                                                      desc_.kw_lanes || desc_.pair_dst)))
        throw error("JIT kernel " + name() + ": accumulator sets need an f32 gemm kernel in place without windows, "
                    "lanes or pairs, and at most 4 sets");
    preamble(desc_.stage || desc_.edges || desc_.pair_dst ? 5 : 4);  // rbx, r12, r13, r14 (+ r15)
    if (desc_.tail) vec_.set_tail(desc_.tail, reg_scratch_, vec_.num_vregs() - 1);
    if (stage_src() && desc_.m % vec_.vlen()) {
        mov(reg_scratch_.cvt32(), (1u << (desc_.m % vec_.vlen())) - 1);
        kmovw(Xbyak::util::k2, reg_scratch_.cvt32());
    }
    Xbyak::Label tile;
    if (desc_.ic_loop) {  // the tile's src (diff_dst), diff_weights and tiles left live in the red zone
        for (const auto& [slot, field] : {std::pair{kIcSrc, offsetof(WeightsKernelArgs, src)},
                                         std::pair{kIcDst, offsetof(WeightsKernelArgs, diff_dst)},
                                         std::pair{kIcWeights, offsetof(WeightsKernelArgs, diff_weights)},
                                         std::pair{kIcLeft, offsetof(WeightsKernelArgs, ic_tiles)}}) {
            mov(reg_scratch_, qword[reg_args_ + field]);
            mov(qword[rsp + slot], reg_scratch_);
        }
        mov(reg_dst_pair_, qword[reg_args_ + offsetof(WeightsKernelArgs, prefetch_walks)]);
        next_walk();
        L(tile);
    }
    prefetch_tile();
    load_args();
    prologue();
    for (acc_set_ = 0; acc_set_ < acc_sets(); ++acc_set_)
        for (int r = 0; r < rows(); ++r)
            for (int v = 0; v < vecs(); ++v) vec_.zero(acc(r, v));
    acc_set_ = 0;
    row_loop();
    fold_acc_sets();
    flush_tile();
    if (desc_.ic_loop) {
        mov(reg_scratch_, qword[reg_args_ + offsetof(WeightsKernelArgs, src_tile_step)]);
        add(qword[rsp + kIcSrc], reg_scratch_);
        if (dw()) add(qword[rsp + kIcDst], reg_scratch_);  // (channel tiles: the same step in both)
        mov(reg_scratch_, qword[reg_args_ + offsetof(WeightsKernelArgs, wei_tile_step)]);
        add(qword[rsp + kIcWeights], reg_scratch_);
        dec(qword[rsp + kIcLeft]);
        jnz(tile, T_NEAR);
    }
    postamble();
    if (store16()) cvt_.emit_constants();
}

// desc.acc_sets: sets 1.. added into set 0 (which the flush reads).
void WeightsSkeleton::fold_acc_sets() {
    for (int set = 1; set < acc_sets(); ++set)
        for (int r = 0; r < rows(); ++r)
            for (int v = 0; v < vecs(); ++v) {
                acc_set_ = set;
                const Xmm other = acc(r, v);
                acc_set_ = 0;
                vec_.add(acc(r, v), acc(r, v), other);
            }
    acc_set_ = 0;
}

// The tile's diff_weights: args.diff_weights, or its red-zone slot in ic loops.
Xbyak::Address WeightsSkeleton::tile_weights() {
    return desc_.ic_loop ? qword[rsp + kIcWeights] : qword[reg_args_ + offsetof(WeightsKernelArgs, diff_weights)];
}

// Reads: rdi. Writes: rcx, r8, r9, r10, r13, r14 (and the stage registers).
void WeightsSkeleton::load_args() {
    auto field = [&](size_t off) { return qword[reg_args_ + off]; };
    if (stage_pairs()) {
        mov(reg_src_pair_, field(offsetof(WeightsKernelArgs, src_pair)));
        mov(reg_dst_pair_, field(offsetof(WeightsKernelArgs, dst_pair)));
    }
    mov(reg_row_, field(offsetof(WeightsKernelArgs, rows)));
    mov(reg_nrows_, field(offsetof(WeightsKernelArgs, nrows)));
    mov(reg_src_step_, field(offsetof(WeightsKernelArgs, src_step)));
    mov(reg_dst_step_, field(offsetof(WeightsKernelArgs, dst_step)));
    if (!desc_.ic_loop) {  // (ic loops: the walk is loaded once before the tile loop, the tiles prefetch on)
        if (dw()) {
            mov(reg_dst_pair_, field(offsetof(WeightsKernelArgs, prefetch_walks)));
            next_walk();
        } else {
            mov(reg_prefetch_, field(offsetof(WeightsKernelArgs, prefetch)));
            mov(reg_prefetch_step_, field(offsetof(WeightsKernelArgs, prefetch_step)));
        }
    }
    if (desc_.pair_dst) mov(reg_dst_partner_, field(offsetof(WeightsKernelArgs, dst_pair)));
    if (stage_src()) mov(reg_src_stage_, field(offsetof(WeightsKernelArgs, src_stage)));
    if (stage_dst()) mov(reg_dst_stage_, field(offsetof(WeightsKernelArgs, dst_stage)));
}

void WeightsSkeleton::next_walk() {
    mov(reg_prefetch_, qword[reg_dst_pair_ + offsetof(PrefetchWalk, pos)]);
    mov(reg_prefetch_step_, qword[reg_dst_pair_ + offsetof(PrefetchWalk, step)]);
    mov(reg_src_pair_, qword[reg_dst_pair_ + offsetof(PrefetchWalk, count)]);
    add(reg_dst_pair_, sizeof(PrefetchWalk));
}

// For every row: point r11/rax at its first pixel, rbx = its pixel count,
// then the pixel loop. Reads/advances rcx, r8; clobbers r11, rax, rbx.
void WeightsSkeleton::row_loop() {
    Xbyak::Label row, done;
    test(reg_nrows_, reg_nrows_);
    jz(done);
    L(row);
    mov(reg_src_, desc_.ic_loop ? qword[rsp + kIcSrc] : qword[reg_args_ + offsetof(WeightsKernelArgs, src)]);
    add(reg_src_, qword[reg_row_ + offsetof(WeightsRow, src_offset)]);
    mov(reg_dst_, desc_.ic_loop && dw() ? qword[rsp + kIcDst]
                                        : qword[reg_args_ + offsetof(WeightsKernelArgs, diff_dst)]);
    add(reg_dst_, qword[reg_row_ + offsetof(WeightsRow, dst_offset)]);
    if (!desc_.row_px) mov(reg_npix_, qword[reg_row_ + offsetof(WeightsRow, pixels)]);
    row_prologue();
    // Whole rows compile their W edges in: their masks name whole kernel rows.
    auto body = [&] {
        if (desc_.row_px)
            row_body();
        else
            pixel_loop();
    };
    if (desc_.edges) {  // a pixel loop per Gate (see gate_row)
        Xbyak::Label some_rows, some_pairs, next;
        mov(reg_mask_, qword[reg_row_ + offsetof(WeightsRow, mask)]);
        cmp(reg_mask_, static_cast<uint32_t>((uint64_t(1) << mask_pairs()) - 1));
        jne(some_rows, T_NEAR);
        body();
        jmp(next, T_NEAR);
        L(some_rows);
        if (!desc_.row_px) {
            bt(reg_mask_, 63);
            jc(some_pairs, T_NEAR);
        }
        gate_ = Gate::kernel_row;
        body();
        gate_ = Gate::none;
        jmp(next, T_NEAR);
        if (!desc_.row_px) {
            L(some_pairs);
            partial_taps_loops(next);
        }
        L(next);
    } else {
        body();
    }
    row_epilogue();
    add(reg_row_, sizeof(WeightsRow));
    dec(reg_nrows_);
    jnz(row);
    L(done);
}

// Variant v of a row's taps (see WeightsRow::mask) jumps through a table
// to its loop; r8 is spilled to the red zone (the kernel calls nothing).
// Clobbers r12. Kernels reading 16-bit tensors only: against the pair
// tests, 1 thread mb 8 min of 5, bf16 3x3 at 7x7-28x28 1.05-1.16x; f32
// measured 0.94-0.99x (MobileNetV2 56x56, EfficientNet 5x5 s2).
void WeightsSkeleton::partial_taps_loops(const Xbyak::Label& next) {
    const int taps = mask_taps();
    const bool variants = taps <= kEdgeVariantMaxTaps && in_dt() != data_type::f32;
    std::vector<Xbyak::Label> loops(static_cast<size_t>(variants ? 2 * taps - 1 : 1));
    Xbyak::Label table;
    if (loops.size() > 1) {
        mov(reg_scratch_, reg_mask_);
        shr(reg_scratch_, kEdgeVariantShift);
        and_(reg_scratch_.cvt32(), 0xff);
        mov(qword[rsp - 8], reg_nrows_);
        lea(reg_nrows_, ptr[rip + table]);
        mov(reg_scratch_, qword[reg_nrows_ + reg_scratch_ * 8]);
        mov(reg_nrows_, qword[rsp - 8]);
        jmp(reg_scratch_);
    }
    for (size_t v = 0; v < loops.size(); ++v) {
        L(loops[v]);
        if (v == 0) {
            gate_ = Gate::pair;
        } else {  // 1..taps-1: prefix [0, v); taps..2*taps-2: suffix [v - taps + 1, taps)
            gate_ = Gate::taps;
            const int vi = static_cast<int>(v);
            gate_a_ = vi < taps ? 0 : vi - taps + 1;
            gate_b_ = vi < taps ? vi : taps;
        }
        pixel_loop();
        jmp(next, T_NEAR);
    }
    gate_ = Gate::none;
    if (loops.size() > 1) {
        align(8);
        L(table);
        for (const Xbyak::Label& l : loops) putL(l);
    }
}

void WeightsSkeleton::prefetch_pixels(int count) {
    if (desc_.pf_lines == 0) return;  // no walk (streamed depthwise passes prefetch ahead in their rows)
    if (count > 1 && desc_.row_block > 1) {  // a loop: blocks step R pixels a column (rbx is free in whole rows)
        Xbyak::Label step;
        mov(reg_npix_.cvt32(), count);
        L(step);
        prefetch_pixels(1);
        dec(reg_npix_.cvt32());
        jnz(step, T_NEAR);
        return;
    }
    for (int p = 0; p < count; ++p) {
        if (desc_.pf_steps > 1 && !dw() && !desc_.ic_loop) {  // (2 or 3: the steps by scaled index)
            prefetcht1(ptr[reg_prefetch_]);
            prefetcht1(ptr[reg_prefetch_ + reg_prefetch_step_]);
            if (desc_.pf_steps > 2) prefetcht1(ptr[reg_prefetch_ + reg_prefetch_step_ * 2]);
            lea(reg_prefetch_, ptr[reg_prefetch_ + reg_prefetch_step_ * 2]);
            if (desc_.pf_steps > 2) add(reg_prefetch_, reg_prefetch_step_);
            continue;
        }
        for (int line = 0; line < desc_.pf_lines; ++line) prefetcht1(ptr[reg_prefetch_ + 64 * line]);
        add(reg_prefetch_, reg_prefetch_step_);
        if (dw() || desc_.ic_loop) {  // the walk's last step: on to the next walk
            Xbyak::Label same_walk;
            dec(reg_src_pair_);
            jnz(same_walk);
            next_walk();
            L(same_walk);
        }
    }
}

// rbx (> 0) pixels from r11/rax, stepping by r9/r10; desc.pf_lines
// prefetches per pixel at r13, then r13 += r14 (depthwise: rsi steps, then
// the next walk); the stage pointers move one
// pixel's copy (they run on across rows). Clobbers rbx, r11, rax, r13.
void WeightsSkeleton::pixel_loop() {
    Xbyak::Label pixel, done;
    if (block_pixels() > 1 && (gate_ == Gate::none || gate_ == Gate::kernel_row)) {  // blocks first, then one pixel at a time
        Xbyak::Label block, singles;
        const int u = block_pixels();
        align(16);
        L(block);
        cmp(reg_npix_, u);
        jl(singles);
        prefetch_pixels(u);
        block_body();
        if (block_src_step()) add(reg_src_, static_cast<uint32_t>(u * block_src_step()));
        if (block_step()) add(reg_dst_, static_cast<uint32_t>(u * block_step()));
        sub(reg_npix_, u);
        jmp(block);
        L(singles);
        test(reg_npix_, reg_npix_);
        jz(done, T_NEAR);
    }
    align(16);
    L(pixel);
    if (body_pixels() == 2) {  // pairs while two pixels are left, then the odd one
        Xbyak::Label odd;
        cmp(reg_npix_, 2);
        jl(odd, T_NEAR);
        prefetch_pixels(2);
        pixel_body();
        for (int p = 0; p < 2; ++p) {
            add(reg_src_, reg_src_step_);
            add(reg_dst_, reg_dst_step_);
        }
        sub(reg_npix_, 2);
        jmp(pixel, T_NEAR);
        L(odd);
        test(reg_npix_, reg_npix_);
        jz(done, T_NEAR);
        odd_pixel_body();
        L(done);
        return;
    }
    prefetch_pixels(1);
    pixel_body();
    add(reg_src_, reg_src_step_);
    add(reg_dst_, reg_dst_step_);
    if (stage_src()) add(reg_src_stage_, qword[reg_args_ + offsetof(WeightsKernelArgs, src_stage_step)]);
    if (stage_dst()) add(reg_dst_stage_, qword[reg_args_ + offsetof(WeightsKernelArgs, dst_stage_step)]);
    dec(reg_npix_);
    jnz(pixel);
    L(done);
}

// Writes the tile's lines of diff_weights ahead (prefetchw), so the flush
// at the end of the call finds them in cache instead of stalling on them:
// a call's tile rows are OC*4 bytes apart, and across a chunk's tiles the
// diff_weights of a wide layer (1-9 MiB) fall out of L2 between a tile's
// flushes. ResNet-50 bwd_w f32 (2 threads, mb 32, min of 3): AVX-512 the
// wide 1x1 layers 1.02-1.07x, AVX2 3x3 1.01-1.09x. Clobbers r12, rcx, r8
// (before load_args). kw lanes flush another layout, and depthwise tiles
// are small and stay cached (MobileNet v1 depthwise, f32: 0.83-1.10x, no
// gain): left out.
void WeightsSkeleton::prefetch_tile() {
    if (desc_.kw_lanes || dw()) return;
    mov(reg_scratch_, tile_weights());
    mov(reg_row_, qword[reg_args_ + offsetof(WeightsKernelArgs, wei_row_stride)]);
    if (rows() > desc_.m) mov(r8, reg_scratch_);
    const int bytes = vecs() * vec_.vlen() * (store16() ? 2 : 4);
    for (int r = 0; r < rows(); ++r) {
        if (r > 0 && r % desc_.m == 0) {
            add(r8, qword[reg_args_ + offsetof(WeightsKernelArgs, wei_kh_stride)]);
            mov(reg_scratch_, r8);
        }
        for (int o = 0; o < bytes; o += 64) prefetchw(ptr[reg_scratch_ + o]);
        prefetchw(ptr[reg_scratch_ + bytes - 1]);
        if ((r + 1) % desc_.m != 0) add(reg_scratch_, reg_row_);
    }
}

// Adds (args.accumulate != 0) or stores the tile at args.diff_weights.
// Clobbers r12, rcx, r8 and the temporaries.
void WeightsSkeleton::flush_tile() {
    Xbyak::Label store_only, done;
    if (desc_.pair_dst) unpair_lanes();
    mov(reg_scratch_, tile_weights());
    mov(reg_row_, qword[reg_args_ + offsetof(WeightsKernelArgs, wei_row_stride)]);
    if (store16()) {  // one call per tile: always a store
        flush_rows(false);
        return;
    }
    cmp(qword[reg_args_ + offsetof(WeightsKernelArgs, accumulate)], 0);
    je(store_only);
    flush_rows(true);
    jmp(done);
    L(store_only);
    flush_rows(false);
    L(done);
}

// desc.pair_dst: vectors v, v + 1 of a row hold 128-bit blocks (4 output
// channels) lo = {0, 2, 4, 6}, hi = {1, 3, 5, 7} of their 32 channels; in
// order, v = (lo 0, hi 0, lo 1, hi 1) and v + 1 = (lo 2, hi 2, lo 3, hi 3).
void WeightsSkeleton::unpair_lanes() {
    const Xbyak::Zmm t(temp(0).getIdx());
    for (int r = 0; r < rows(); ++r)
        for (int v = 0; v + 1 < vecs(); v += 2) {
            if (!dst_pair_vecs(v)) continue;
            const Xbyak::Zmm lo(acc(r, v).getIdx()), hi(acc(r, v + 1).getIdx());
            vshuff32x4(t, lo, hi, 0x44);  // lo 0, lo 1, hi 0, hi 1
            vshuff32x4(hi, lo, hi, 0xEE);  // lo 2, lo 3, hi 2, hi 3
            vshuff32x4(lo, t, t, 0xD8);
            vshuff32x4(hi, hi, hi, 0xD8);
        }
}

void WeightsSkeleton::flush_rows(bool accumulate) {
    if (desc_.kw_lanes)
        flush_lanes(accumulate);
    else
        flush_tap_rows(accumulate);
}

// Row r = (kernel row i, tap k) of the tile at args.diff_weights +
// i * args.wei_kh_stride + k * rcx. Clobbers r12, r8 and temp(0).
void WeightsSkeleton::flush_tap_rows(bool accumulate) {
    const Xmm t = temp(0);
    if (rows() > desc_.m) mov(r8, reg_scratch_);
    for (int r = 0; r < rows(); ++r) {
        if (r > 0 && r % desc_.m == 0) {  // next kernel row's block
            add(r8, qword[reg_args_ + offsetof(WeightsKernelArgs, wei_kh_stride)]);
            mov(reg_scratch_, r8);
        }
        for (int v = 0; v < vecs(); ++v) {
            if (store16()) {  // AVX-512: the rounding needs only t
                const data_type dt = static_cast<data_type>(desc_.store_dt);
                const Xbyak::Address a = ptr[reg_scratch_ + v * vec_.vlen() * 2];
                if (is_tail(v))
                    cvt_.store_tail(a, acc(r, v), dt, desc_.tail, t, t);
                else
                    cvt_.store(a, acc(r, v), dt, t, t);
                continue;
            }
            const Xbyak::Address a = ptr[reg_scratch_ + v * vec_.vbytes()];
            if (accumulate) {  // the target is f32 whatever the kernel reads
                if (is_tail(v))
                    vec_.load_tail(t, a);
                else
                    vec_.load(t, a);
                vec_.add(acc(r, v), acc(r, v), t);
            }
            if (is_tail(v))
                vec_.store_tail(a, acc(r, v));
            else
                vec_.store(a, acc(r, v));
        }
        if ((r + 1) % desc_.m != 0) add(reg_scratch_, reg_row_);
    }
}

// kw_lanes: acc(k * m + j) holds (tap k, output channel j) over the input
// channels in its lanes. Per tap the m rows (zeros past m) are transposed
// 8 x 16 in registers, two unpack stages within 128-bit blocks and a block
// shuffle, into ymm columns of 8 output channels, and input channel i's
// column goes to r8 + i * rcx (r8 = args.diff_weights + k *
// args.wei_kh_stride), m floats under k3. Spare registers: the temporaries
// and those past them, then each flushed tap's accumulators. Clobbers r8,
// r11, rbx, k3.
void WeightsSkeleton::flush_lanes(bool accumulate) {
    using Xbyak::Ymm;
    using Xbyak::Zmm;
    const int m = desc_.m, taps = desc_.kw_win, live = desc_.tail ? desc_.tail : vec_.vlen();
    std::vector<int> pool;
    for (int r = rows() * vecs(); r < vec_.num_vregs(); ++r) pool.push_back(r);
    auto take = [&] {
        if (pool.empty()) throw error("JIT kernel " + name() + ": no register left to transpose the tile");
        const Zmm z(pool.back());
        pool.pop_back();
        return z;
    };
    auto give = [&](const Zmm& z) { pool.push_back(z.getIdx()); };
    const bool masked = m < 8;
    if (masked) {
        mov(reg_npix_.cvt32(), (1u << m) - 1);
        kmovw(Xbyak::util::k3, reg_npix_.cvt32());
    }
    // Column c (ymm half `half` of z) at r8 + c * rcx.
    auto store_column = [&](int c, const Zmm& z, int half) {
        if (c >= live) return;
        const int pair = desc_.lane_pairs ? c / 8 : 0;  // lane pairs: group G+1's channels
        imul(reg_src_, reg_row_, c - 8 * pair);
        add(reg_src_, r8);
        if (pair) add(reg_src_, 32);
        const Zmm t = half ? take() : z;  // the high half goes through a spare register
        const Ymm y(t.getIdx());
        if (half) vextractf32x8(y, z, 1);
        const Xbyak::Address a = ptr[reg_src_];
        if (accumulate) {
            if (masked)
                vaddps(y | Xbyak::util::k3 | Xbyak::util::T_z, y, a);
            else
                vaddps(y, y, a);
        }
        if (masked)
            vmovups(a | Xbyak::util::k3, y);
        else
            vmovups(a, y);
        if (half) give(t);
    };
    mov(r8, reg_scratch_);
    for (int k = 0; k < taps; ++k) {
        if (k > 0) add(r8, qword[reg_args_ + offsetof(WeightsKernelArgs, wei_kh_stride)]);
        Zmm r[8];
        for (int j = 0; j < 8; ++j) {
            if (j < m) {
                r[j] = Zmm(acc(k * m + j, 0).getIdx());
            } else {
                r[j] = take();
                vpxord(r[j], r[j], r[j]);
            }
        }
        // Within each 128-bit block b: t[2q] = (r[2q][4b], r[2q+1][4b], r[2q][4b+1], r[2q+1][4b+1]),
        // t[2q+1] the same of lanes 4b+2, 4b+3.
        Zmm t[8];
        for (int q = 0; q < 4; ++q) {
            const Zmm a = r[2 * q], b = r[2 * q + 1], lo = take();
            vunpcklps(lo, a, b);
            vunpckhps(b, a, b);
            give(a);
            t[2 * q] = lo;
            t[2 * q + 1] = b;
        }
        // u[e] (e < 4): block b = lane 4b + e of rows 0-3; u[4 + e] of rows 4-7.
        Zmm u[8];
        for (int h = 0; h < 2; ++h)
            for (int e = 0; e < 2; ++e) {
                const Zmm a = t[4 * h + e], b = t[4 * h + e + 2], lo = take();
                vunpcklpd(lo, a, b);
                vunpckhpd(b, a, b);
                give(a);
                u[4 * h + 2 * e] = lo;
                u[4 * h + 2 * e + 1] = b;
            }
        // Blocks (u[e].b, u[4+e].b) side by side: columns e, 4 + e, then 8 + e, 12 + e.
        for (int e = 0; e < 4; ++e) {
            const Zmm lo = take(), hi = u[4 + e];
            vshuff32x4(lo, u[e], hi, 0x44);
            vshuff32x4(lo, lo, lo, 0xD8);
            vshuff32x4(hi, u[e], hi, 0xEE);
            vshuff32x4(hi, hi, hi, 0xD8);
            give(u[e]);
            // High halves first: an add into the low half's ymm clears the zmm above it.
            store_column(4 + e, lo, 1);
            store_column(e, lo, 0);
            store_column(12 + e, hi, 1);
            store_column(8 + e, hi, 0);
            give(lo);
            give(hi);
        }
    }
}

// ---- gemm generator -----------------------------------------------------------

namespace {

// Tile = m input channels x n vectors of output channels, one tap.
class GemmWeightsKernel final : public WeightsSkeleton {
public:
    explicit GemmWeightsKernel(const WeightsKernelDesc& d) : WeightsSkeleton(d) {}

private:
    // n diff_dst vectors into temp(1..n); per input channel i one broadcast
    // of src[i] (temp(0), or inside the FMA on AVX-512 when n == 1) and n
    // multiply-adds. src channels are contiguous: channel i is at byte 4 * i.
    //
    // desc.stage: this call reads an operand from the user's tensors (type
    // in_dt) and copies it, as the kernel's 32-bit elements, to its stage
    // pointer: the pixel's m src channels (through temp(0) before it holds
    // anything; from 16-bit, the broadcasts then read the copy) and its
    // diff_dst vectors. bf16 pairs build each element from the pixel in two
    // images, the partner rsi / rdx bytes further. It also prefetches (to
    // L2) what the thread's next copying calls read of the same pixel: src
    // 128 bytes further along its row (a few ic tiles on), diff_dst the next
    // oc tile's vectors. Tiles that copy come in runs (every ic tile of a
    // block for its first oc tile; an oc tile's first call per block), so
    // this pulls their data in calls ahead of use. (ResNet-50 1024->256 at
    // 14x14, f32: a copying call took 2.2x a plain one without the src
    // prefetch, 1.1x with it.)
    void pixel_body() override {
        if (lanes()) {
            lane_step(0, kw_win() - 1);
            return;
        }
        if (windowed()) {  // one pixel at phase P, then the window shifts by moves
            window_step(phase(), 0, kw_win() - 1, true);
            for (int k = kw_win() - 1; k >= 1; --k)
                for (int v = 0; v < vecs(); ++v) vec_.mov(window(k, phase(), v), window(k - 1, phase(), v));
            return;
        }
        const bool embedded = vec_.avx512() && vecs() == 1;
        const int first_dd = embedded ? 0 : 1;
        if (stage_src()) {
            prefetch_user(reg_src_, kSrcLookahead, 1, reg_src_pair_);
            copy_src();
        }
        // diff_dst: the user's (in_dt) when this call copies it, else a slice;
        // or the user's 16-bit tensor widened as it loads (folded taps).
        const bool widen_dd = !desc_.stage && !desc_.pair_dst && in_dt() != data_type::f32;
        const int dd_vbytes = stage_dst() || desc_.pair_dst || widen_dd ? in_vbytes() : vec_.vbytes();
        if (stage_dst()) prefetch_user(reg_dst_, vecs() * dd_vbytes, (vecs() * dd_vbytes + 63) / 64, reg_dst_pair_);
        for (int v = 0; v < vecs(); ++v) {
            const Xbyak::Xmm d = temp(first_dd + v);
            const Xbyak::Address a = ptr[reg_dst_ + v * dd_vbytes];
            if (dst_pair_vecs(v)) {  // (v + 1 too; temp(0) is free until the broadcasts)
                const Xbyak::Zmm lo(d.getIdx()), hi(temp(first_dd + v + 1).getIdx()), other(temp(0).getIdx());
                vmovdqu16(lo, a);
                vmovdqu16(other, ptr[reg_dst_ + reg_dst_partner_ + v * dd_vbytes]);
                vpunpckhwd(hi, lo, other);
                vpunpcklwd(lo, lo, other);
                ++v;
            } else if (desc_.pair_dst || (stage_dst() && stage_pairs())) {
                const Xbyak::Reg64 partner = desc_.pair_dst ? reg_dst_partner_ : reg_dst_pair_;
                load_pair(d, a, ptr[reg_dst_ + partner + v * dd_vbytes], is_tail(v) ? Xbyak::util::k1 : Xbyak::Opmask(),
                          embedded ? temp(1) : temp(0));
            } else if (stage_dst() || widen_dd) {
                load_vec(d, a, v);
            } else {
                load_slice_vec(d, a, v);
            }
            if (stage_dst()) vec_.store(ptr[reg_dst_stage_ + v * vec_.vbytes()], d);
        }
        // 16-bit src is broadcast from its copy (32-bit elements).
        const bool from_copy = stage_src() && in_dt() != data_type::f32;
        for (int i = 0; i < rows(); ++i) {
            const Xbyak::Address s = from_copy ? ptr[reg_src_stage_ + 4 * i] : ptr[reg_src_ + src_disp(i)];
            if (embedded) {
                mac_bcast(acc(i, 0), temp(0), s, temp(0));
                continue;
            }
            vec_.bcast(temp(0), s);  // 32 bits: one f32 or one bf16 pair
            for (int v = 0; v < vecs(); ++v) mac(acc(i, v), temp(1 + v), temp(0));
        }
    }

    static constexpr int kSrcLookahead = 128;

    // Bytes from the pixel's src to tile row i's element: channel i, or
    // with folded taps row j of run (a, b) (see WeightsKernelDesc::kd).
    int64_t src_disp(int i) const {
        const int kh = std::max<int>(1, desc_.kh), run = i / desc_.m;
        return int64_t(run / kh) * desc_.plane_disp + int64_t(run % kh) * desc_.row_disp + 4 * (i % desc_.m);
    }

    // kw_win: tap k's diff_dst vector v at src pixel u of the row (phase u
    // mod KW) lives in register n ((u - k) mod KW) + v: blocks of KW pixels rename
    // instead of moving, and advance the pointers themselves (block_step
    // 0). The loops run at phase P = kw_head mod KW (the head's
    // straight-line pixels come first); a single pixel shifts the window by
    // moves to stay at P.
    bool windowed() const { return desc_.kw_win > 0; }
    int kw_win() const { return std::max<int>(1, desc_.kw_win); }
    int phase() const { return desc_.kw_head % kw_win(); }
    // kw_lanes: blocks of two pixels (the skeleton then tests for a row of edges only).
    // desc.acc_sets: blocks of one pixel a set.
    int block_pixels() const override { return lanes() ? 2 : windowed() ? kw_win() : acc_sets(); }
    Xbyak::Xmm window(int k, int u, int v) const {
        return temp(((u - k) % kw_win() + kw_win()) % kw_win() * vecs() + v);
    }
    Xbyak::Xmm bcast_reg(int i) const { return temp(kw_win() * vecs() + i % 2); }
    // Src pixel at phase u: its tap-0 diff_dst vector (when `load`), then per
    // channel a broadcast and the FMAs of taps [k0, k1].
    void window_step(int u, int k0, int k1, bool load) {
        for (int v = 0; load && v < vecs(); ++v) load_slice_vec(window(0, u, v), ptr[reg_dst_ + v * vec_.vbytes()], v);
        for (int i = 0; i < desc_.m; ++i) {
            vec_.bcast(bcast_reg(i), ptr[reg_src_ + 4 * i]);
            for (int k = k0; k <= k1; ++k)
                for (int v = 0; v < vecs(); ++v) mac(acc(k * desc_.m + i, v), window(k, u, v), bcast_reg(i));
        }
    }
    void next_pixel(bool dst) {
        add(reg_src_, reg_src_step_);
        if (dst) add(reg_dst_, reg_dst_step_);
    }
    // The window of src pixel 0 (taps 1..kw_pad: diff_dst pixels pad - k),
    // then the head: pixel i (t = pad + i < KW - 1) runs taps 0..t. The
    // pixel loop then takes the pixels between head and tail. kw lanes: the
    // head pixels with their taps inside src.
    void row_prologue() override {
        if (lanes()) {
            lane_edges(desc_.kw_head, [&](int t) { return std::max(0, desc_.kw_pad - stride() * t); },
                       [&](int) { return kw_win() - 1; });
            if (desc_.kw_head + desc_.kw_tail) sub(reg_npix_, desc_.kw_head + desc_.kw_tail);
            return;
        }
        if (!windowed()) return;
        const int pad = desc_.kw_pad;
        if (pad > 0) mov(reg_scratch_, reg_dst_);
        for (int k = 1; k <= pad; ++k) {
            sub(reg_scratch_, reg_dst_step_);
            for (int v = 0; v < vecs(); ++v) load_slice_vec(window(k, 0, v), ptr[reg_scratch_ + v * vec_.vbytes()], v);
        }
        for (int i = 0; i < desc_.kw_head; ++i) {
            window_step(i, 0, std::min(kw_win() - 1, pad + i), true);
            next_pixel(true);
        }
        if (desc_.kw_head + desc_.kw_tail) sub(reg_npix_, desc_.kw_head + desc_.kw_tail);
    }
    // The tail: pixel j (t = OW + j) runs taps j + 1..KW - 1, loading nothing.
    void row_epilogue() override {
        if (lanes()) {
            lane_edges(desc_.kw_tail, [](int) { return 0; },
                       [&](int j) { return std::min(kw_win() - 1, desc_.kw_last - stride() * j); });
            return;
        }
        for (int j = 0; j < desc_.kw_tail; ++j) {
            window_step(phase() + j, j + 1, kw_win() - 1, false);
            if (j + 1 < desc_.kw_tail) next_pixel(false);
        }
    }
    void block_body() override {
        if (lanes()) {
            for (int u = 0; u < block_pixels(); ++u) {
                lane_step(0, kw_win() - 1);
                next_pixel(true);
            }
            return;
        }
        if (!windowed()) {  // accumulator sets
            for (acc_set_ = 0; acc_set_ < acc_sets(); ++acc_set_) {
                pixel_body();
                next_pixel(true);
            }
            acc_set_ = 0;
            return;
        }
        for (int u = 0; u < kw_win(); ++u) {
            window_step(phase() + u, 0, kw_win() - 1, true);
            next_pixel(true);
        }
    }

    // kw_lanes (see WeightsKernelDesc): src vectors of the taps in temp(k),
    // the broadcasts alternating between two registers. Lane pairs: the
    // pixel's diff_dst of both groups (16 elements, G's 8 then G+1's) in
    // one load, its 128-bit quarters copied to (q0 q0 q2 q2) and (q1 q1 q3
    // q3); channel j is element j % 4 of every quarter of one of them.
    // Against a broadcast of G+1's value and a masked one of G's (AMD Zen 4,
    // min of 5): f32 with the data in cache (mb 2, 1 thread) 1.08-1.13x,
    // bf16 at mb 32 (staged pairs) 1.04-1.16x.
    bool lanes() const { return desc_.kw_lanes != 0; }
    int stride() const { return std::max<int>(1, desc_.w_stride); }
    Xbyak::Xmm tap_src(int k) const { return temp(k); }
    // An output pixel's taps [k0, k1]: their src vectors, then per output
    // channel a broadcast and an FMA per tap.
    void lane_step(int k0, int k1) {
        for (int k = k0; k <= k1; ++k) load_slice_vec(tap_src(k), ptr[reg_src_ + k * desc_.tap_disp], 0);
        const int low = desc_.lane_pairs ? temp(kw_win() + 2).getIdx() : 0;
        const int high = desc_.lane_pairs ? temp(kw_win() + 3).getIdx() : 0;
        if (desc_.lane_pairs) {
            vmovups(Xbyak::Zmm(high), ptr[reg_dst_]);
            vshuff32x4(Xbyak::Zmm(low), Xbyak::Zmm(high), Xbyak::Zmm(high), 0xA0);   // quarters 0 0 2 2
            vshuff32x4(Xbyak::Zmm(high), Xbyak::Zmm(high), Xbyak::Zmm(high), 0xF5);  // quarters 1 1 3 3
        }
        for (int j = 0; j < desc_.m; ++j) {
            if (desc_.lane_pairs)
                vpermilps(Xbyak::Zmm(bcast_reg(j).getIdx()), Xbyak::Zmm(j < 4 ? low : high), (j % 4) * 0x55);
            else
                vec_.bcast(bcast_reg(j), ptr[reg_dst_ + 4 * j]);
            for (int k = k0; k <= k1; ++k) mac(acc(k * desc_.m + j, 0), tap_src(k), bcast_reg(j));
        }
    }
    // `count` straight-line pixels, pixel t with taps [first(t), last(t)]
    // (none when empty), the pointers advanced past each.
    template <typename First, typename Last>
    void lane_edges(int count, First&& first, Last&& last) {
        for (int t = 0; t < count; ++t) {
            if (first(t) <= last(t)) lane_step(first(t), last(t));
            next_pixel(true);
        }
    }

    // Vector v of a staged slice or the f32 user tensor: 32-bit elements.
    void load_slice_vec(const Xbyak::Xmm& r, const Xbyak::Address& a, int v) {
        if (is_tail(v))
            vec_.load_tail(r, a);
        else
            vec_.load(r, a);
    }

    // `lines` lines from `at` + disp (and at the partner image).
    void prefetch_user(const Xbyak::Reg64& at, int disp, int lines, const Xbyak::Reg64& pair) {
        for (int l = 0; l < lines; ++l) {
            prefetcht1(ptr[at + disp + 64 * l]);
            if (stage_pairs()) prefetcht1(ptr[at + pair + disp + 64 * l]);
        }
    }

    // v := 32-bit pairs of the 16 bf16 at a (low halves) and b (high halves),
    // lanes outside `mask` (if any) zero; clobbers u.
    void load_pair(const Xbyak::Xmm& v, const Xbyak::Address& a, const Xbyak::Address& b, const Xbyak::Opmask& mask,
                   const Xbyak::Xmm& u) {
        const Xbyak::Zmm z(v.getIdx()), w(u.getIdx());
        if (mask.getIdx() != 0) {
            vpmovzxwd(z | mask | Xbyak::util::T_z, a);
            vpmovzxwd(w | mask | Xbyak::util::T_z, b);
        } else {
            vpmovzxwd(z, a);
            vpmovzxwd(w, b);
        }
        vpslld(w, w, 16);
        vpord(z, z, w);
    }

    // The pixel's m src channels from [r11] to [r15] as 32-bit elements:
    // whole vectors of 16, then the rest under k2 (the store writes the
    // vector whole, a ymm when the rest fits one).
    void copy_src() {
        const int full = desc_.m / 16, rest = desc_.m % 16, es = VecCvt::elem_bytes(in_dt());
        const Xbyak::Zmm t(temp(0).getIdx());
        for (int c = 0; c <= full; ++c) {
            const int lanes = c < full ? 16 : rest;
            if (lanes == 0) break;
            const Xbyak::Opmask mask = lanes < 16 ? Xbyak::util::k2 : Xbyak::Opmask();
            const Xbyak::Address a = ptr[reg_src_ + 16 * es * c];
            if (stage_pairs()) {
                load_pair(t, a, ptr[reg_src_ + reg_src_pair_ + 16 * es * c], mask, temp(1));
            } else if (in_dt() == data_type::f32) {
                if (mask.getIdx() != 0)
                    vmovups(t | mask | Xbyak::util::T_z, a);
                else
                    vmovups(t, a);
            } else {
                const Xbyak::Ymm h(t.getIdx());
                if (mask.getIdx() != 0)
                    vmovdqu16(h | mask | Xbyak::util::T_z, a);
                else
                    vmovdqu16(h, a);
                cvt_.widen(t, in_dt());
            }
            const Xbyak::Xmm stored = lanes <= 8 ? Xbyak::Xmm(Xbyak::Ymm(t.getIdx())) : Xbyak::Xmm(t);
            vmovups(ptr[reg_src_stage_ + 64 * c], stored);
        }
    }
};

}  // namespace

std::shared_ptr<const WeightsKernel> make_gemm_weights_kernel(const WeightsKernelDesc& d) {
    auto k = std::make_shared<GemmWeightsKernel>(d);
    k->create();
    return k;
}

// ---- cache ------------------------------------------------------------------

std::shared_ptr<const WeightsKernel> get_weights_kernel(const WeightsKernelDesc& d, bool* hit) {
    static KernelCache<WeightsKernelDesc, WeightsKernel> cache;
    return cache.get(
            d,
            [](const WeightsKernelDesc& desc) {
                return desc.kind == static_cast<uint8_t>(WeightsKernelKind::depthwise)
                               ? make_dw_weights_kernel(desc)
                               : make_gemm_weights_kernel(desc);
            },
            hit);
}

}  // namespace convgrad::detail
