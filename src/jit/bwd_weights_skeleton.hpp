// The skeleton shared by the weight-gradient generators: argument loading,
// the row and pixel loops, and the final add of the register tile into
// diff_weights. A generator supplies only the pixel body and its register
// needs; AVX-512 vs AVX2 goes through VecIsa.
//
// Register map (fixed for every weight-gradient kernel):
//   rdi  args             rsi  src pair delta    rdx  diff_dst pair delta
//   rcx  row cursor       r8   rows left         r9   src step (bytes)
//   r10  diff_dst step    r11  src pixel ptr     rax  diff_dst pixel ptr
//   rbx  pixels left      r12  scratch (tail mask set-up, flush pointer)
//   (flush: rcx row stride, r8 kernel-row block pointer)
//   r13  prefetch ptr     r14  prefetch step
//   depthwise: rsi the walk's steps left, rdx the next PrefetchWalk
//   desc.stage: r15 src stage ptr, r12 diff_dst stage ptr (during the
//   loops), k2 the mask of a copied src pixel's last vector; desc.edges:
//   r15 the row's mask (WeightsRow::mask); desc.pair_dst: r15 the bytes
//   from an image's diff_dst to its partner's; bf16 pairs:
//   rsi / rdx the bytes from an image's src / diff_dst to its partner's
//   desc.ic_loop: the tile's src, diff_weights and the tiles left in the
//   red zone (kIcSrc, kIcWeights, kIcLeft); r13 / r14 loaded once a call
//   vregs [0, rows*n): accumulators, acc(row, v) = rows-major (desc.acc_sets
//   S > 1: S such blocks, set j at j*rows*n);
//   vregs [S*rows*n, ...): body temporaries; AVX2 tail mask in the last vreg.
#pragma once

#include <algorithm>

#include "jit/bwd_weights_kernel.hpp"
#include "jit/vec_cvt.hpp"
#include "jit/vec_isa.hpp"

namespace convgrad::detail {

class WeightsSkeleton : public WeightsKernel {
protected:
    explicit WeightsSkeleton(const WeightsKernelDesc& d);

    void generate() final;
    // Emits the work for one pixel: reads [reg_src_], [reg_dst_]; updates
    // the accumulators; may clobber vregs from first_temp() up to (not
    // including) the AVX2 mask register. Must not move the pointers.
    virtual void pixel_body() = 0;
    // Blocks of block_pixels() > 1 pixels (consecutive: diff_dst pixels
    // block_step() bytes apart, src pixels block_src_step()) go to
    // block_body() first, the rest to pixel_body(). Same contract as
    // pixel_body(), except that a block_step() of 0 means block_body()
    // advances the pointers itself (by the runtime steps r9 / r10).
    virtual int block_pixels() const { return 1; }
    virtual int64_t block_step() const { return 0; }
    virtual int64_t block_src_step() const { return block_step(); }
    virtual void block_body() {}
    // Pixels pixel_body() takes (1 or 2: consecutive pixels, src_step /
    // dst_step apart); with 2, a row's odd last pixel goes to
    // odd_pixel_body().
    virtual int body_pixels() const { return 1; }
    // Emitted once before the row loop (after the arguments are loaded).
    virtual void prologue() {}
    // Emitted per row entry, before its pixel loop (reg_src_ / reg_dst_ at
    // the entry's first pixel; may run pixels itself, advance the pointers
    // and lower reg_npix_), and after it (the pointers at the loop's last
    // pixel + 1).
    virtual void row_prologue() {}
    virtual void row_epilogue() {}
    virtual void odd_pixel_body() {}
    // desc.row_px: the work of one whole output row at [reg_src_] /
    // [reg_dst_] (pixel_loop's contract), under gate_ none or kernel_row,
    // including desc.pf_lines prefetches for each of its row_px pixels
    // (prefetch_pixels).
    virtual void row_body() {}
    // desc.pf_lines lines for each of `count` pixels at r13, stepping r14
    // (depthwise: rsi steps a walk, then the next walk); row blocks run
    // the steps as a loop on rbx.
    void prefetch_pixels(int count);

    // desc.edges: the bodies emit the work of kernel row ir through
    // gate_row(ir, ...) and of its tap k through gate_pair(ir, k, ...);
    // the skeleton emits the pixel loop once per Gate. A row whose mask
    // names every pair runs ungated; one with whole kernel rows (no
    // kPartialTaps) tests each kernel row once per block; the others run a
    // pixel at a time: a loop per prefix and suffix interval of taps
    // (Gate::taps: only its taps emitted, each kernel row tested), entered
    // through a jump table on the row's variant, or testing each pair.
    enum class Gate { none, kernel_row, taps, pair };
    template <typename F>
    void gate_row(int ir, F&& emit) {
        if (gate_ == Gate::none) return emit();
        Xbyak::Label skip;
        test(reg_mask_, static_cast<uint32_t>(((uint64_t(1) << mask_taps()) - 1) << (ir * mask_taps())));
        jz(skip, T_NEAR);
        emit();
        L(skip);
    }
    template <typename F>
    void gate_pair(int ir, int k, F&& emit) {
        if (gate_ == Gate::taps) {
            if (k >= gate_a_ && k < gate_b_) emit();
            return;
        }
        if (gate_ != Gate::pair) return emit();
        Xbyak::Label skip;
        test(reg_mask_, static_cast<uint32_t>(uint64_t(1) << (ir * mask_taps() + k)));
        jz(skip, T_NEAR);
        emit();
        L(skip);
    }

    // Row blocks (desc.row_block): the src rows a block reads.
    int block_src_rows() const {
        return std::max<int>(1, desc_.h_stride) * (desc_.row_block - 1) + std::max<int>(1, desc_.kh);
    }
    // Tile rows (ic, or taps: kh kernel rows of m kw taps, row-major).
    // gemm kw_win: KW blocks of m rows (tap k, channel i), wei_kh_stride apart.
    // gemm folded taps: kd x kh runs of m rows, wei_kh_stride apart.
    int rows() const { return weights_tile_rows(desc_); }
    int vecs() const { return desc_.n; }
    // Accumulator (row, v) of the current set (desc.acc_sets: acc_set_).
    Xbyak::Xmm acc(int row, int v) const { return vec_.vreg((acc_set_ * rows() + row) * vecs() + v); }
    Xbyak::Xmm temp(int i) const { return vec_.vreg(acc_sets() * rows() * vecs() + i); }
    int acc_sets() const { return std::max<int>(1, desc_.acc_sets); }
    bool is_tail(int v) const { return desc_.tail != 0 && v == vecs() - 1; }
    // Loads vector v of a row (masked if it is the tail vector), widened to
    // f32 from desc.in_dt.
    void load_vec(const Xbyak::Xmm& r, const Xbyak::Address& a, int v);
    data_type in_dt() const { return static_cast<data_type>(desc_.in_dt); }
    // Bytes of one activation vector as the kernel reads it.
    int in_vbytes() const { return vec_.vlen() * VecCvt::elem_bytes(in_dt()); }
    bool dot() const { return desc_.dot == 1; }
    // Depthwise bf16 single products on vdpbf16ps (WeightsKernelDesc::dot 2).
    bool zero_ext() const { return desc_.dot == 2; }
    // The tile goes out rounded to 16 bits (WeightsKernelDesc::store_dt).
    bool store16() const { return desc_.store_dt != 0; }
    // Multiply-add on the desc's element format: acc += a * b lane by lane
    // (f32: vfmadd231ps; bf16 pairs: vdpbf16ps, two products per lane).
    void mac(const Xbyak::Xmm& acc, const Xbyak::Xmm& a, const Xbyak::Xmm& b);
    // acc += a * (vector v of a row at m); the tail vector reads only its
    // live lanes. AVX2 loads through tmp.
    void mac_mem(const Xbyak::Xmm& acc, const Xbyak::Xmm& a, const Xbyak::Address& m, int v,
                 const Xbyak::Xmm& tmp);
    // acc += a * (the 32 bits at m in every lane): AVX-512 broadcasts inside
    // the instruction, AVX2 through tmp.
    void mac_bcast(const Xbyak::Xmm& acc, const Xbyak::Xmm& a, const Xbyak::Address& m,
                   const Xbyak::Xmm& tmp);

    WeightsKernelDesc desc_;
    VecIsa vec_;
    VecCvt cvt_;
    const Xbyak::Reg64 reg_args_ = rdi, reg_src_pair_ = rsi, reg_dst_pair_ = rdx;
    const Xbyak::Reg64 reg_row_ = rcx, reg_nrows_ = r8, reg_src_step_ = r9, reg_dst_step_ = r10;
    const Xbyak::Reg64 reg_src_ = r11, reg_dst_ = rax, reg_npix_ = rbx, reg_scratch_ = r12;
    const Xbyak::Reg64 reg_prefetch_ = r13, reg_prefetch_step_ = r14;
    const Xbyak::Reg64 reg_src_stage_ = r15, reg_dst_stage_ = r12;
    bool stage_src() const { return (desc_.stage & kCopySrc) != 0; }
    bool stage_dst() const { return (desc_.stage & kCopyDst) != 0; }
    // Copies build bf16 pairs from two images (dot kernels read pairs).
    bool stage_pairs() const { return desc_.stage && dot(); }
    // desc.pair_dst: r15 = bytes from an image's diff_dst to its partner's;
    // vectors v and v + 1 are paired in one pass (interleaved lanes).
    const Xbyak::Reg64 reg_dst_partner_ = r15;
    bool dst_pair_vecs(int v) const {
        return desc_.pair_dst && v % 2 == 0 && v + 1 < vecs() && !is_tail(v + 1);
    }
    const Xbyak::Reg64 reg_mask_ = r15;
    Gate gate_ = Gate::none;
    int gate_a_ = 0, gate_b_ = 0;  // Gate::taps: the taps [a, b) emitted
    int acc_set_ = 0;              // the accumulator set acc() names (desc.acc_sets)

private:
    // Mask bits per kernel row: the tile's kw taps.
    int mask_taps() const { return desc_.m / std::max<int>(1, desc_.lane_group); }
    // Mask bits of the tile: (kernel row, tap) pairs; row blocks: src rows.
    int mask_pairs() const {
        return desc_.row_block > 1 ? block_src_rows() : mask_taps() * std::max<int>(1, desc_.kh);
    }
    bool dw() const { return desc_.kind == static_cast<uint8_t>(WeightsKernelKind::depthwise); }
    // Depthwise: r13, r14, rsi := the walk at rdx; rdx := the next one.
    void next_walk();
    void load_args();
    void row_loop();
    // desc.edges: the pixel loops of a row with part of its taps (r15 its
    // mask), then a jump to `next`.
    void partial_taps_loops(const Xbyak::Label& next);
    void pixel_loop();
    void flush_tile();
    void fold_acc_sets();
    void unpair_lanes();
    void prefetch_tile();
    // desc.ic_loop: red-zone slots (below rsp; the kernels call nothing)
    // of the current tile's src, its diff_weights, the tiles left and
    // (depthwise) its diff_dst.
    static constexpr int kIcSrc = -16, kIcWeights = -24, kIcLeft = -32, kIcDst = -40;
    Xbyak::Address tile_weights();
    void flush_rows(bool accumulate);
    void flush_tap_rows(bool accumulate);
    void flush_lanes(bool accumulate);
};

}  // namespace convgrad::detail
