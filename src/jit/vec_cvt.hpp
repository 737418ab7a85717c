// VecCvt: loads that widen bf16 / f16 to f32 vectors and stores that round
// f32 vectors to bf16 / f16, on top of VecIsa's registers and tails. Any
// generator can own one next to its VecIsa.
//
// Rounding is to nearest, ties to even, exactly as ops/numeric.hpp rounds
// (so a JIT result can equal the reference bit for bit); a NaN stays a NaN
// and becomes quiet. bf16 is rounded with integer operations (add 0x7fff
// plus the lowest kept bit); avx512_core_bf16 uses vcvtneps2bf16, which
// rounds the same way but flushes subnormal results to zero (Intel SDM:
// "output denormals are always flushed to zero"), so a vector holding a
// subnormal branches to the integer form. f16 uses F16C
// (vcvtps2ph with imm 0 = round to nearest even, MXCSR not consulted).
//
// Tails: AVX-512 reads and writes the first n lanes under opmask k1, which
// VecIsa::set_tail(n, ...) must have set (its mask covers n words as well
// as n dwords). AVX2 moves 16-bit tails one element at a time (no masked
// 16-bit moves there) and f32 tails through VecIsa's mask register. No tail
// touches memory past its n elements.
#pragma once

#include <xbyak/xbyak.h>

#include "convgrad/convgrad.hpp"
#include "jit/isa.hpp"
#include "jit/vec_isa.hpp"

namespace convgrad::detail {

class VecCvt {
public:
    // `vi` must outlive this object and belong to the same generator.
    VecCvt(Xbyak::CodeGenerator& cg, VecIsa& vi, Isa isa);

    static int elem_bytes(data_type dt) { return dt == data_type::f32 ? 4 : 2; }
    // vdpbf16ps and vcvtne2ps2bf16 are available.
    bool native_bf16() const { return isa_ >= Isa::avx512_core_bf16; }

    // v := vlen elements of type dt at a, widened to f32 (exact).
    void load(const Xbyak::Xmm& v, const Xbyak::Address& a, data_type dt);
    // The first n lanes (0 < n < vlen) from a, the other lanes 0.
    void load_tail(const Xbyak::Xmm& v, const Xbyak::Address& a, data_type dt, int n);
    // v := vlen bf16 elements at a, each zero-extended to 32 bits (the bf16
    // in a dword's low half: the (x, 0) pairs of a one-product vdpbf16ps);
    // 0 < n < vlen: the first n lanes only, the others 0. AVX-512 only.
    void load_zero_ext(const Xbyak::Xmm& v, const Xbyak::Address& a, int n = 0);
    // v := its own low half (vlen 16-bit elements) widened to f32.
    void widen(const Xbyak::Xmm& v, data_type dt);
    // v := the element at a widened to f32, in every lane.
    void bcast(const Xbyak::Xmm& v, const Xbyak::Address& a, data_type dt);

    // a := v rounded to dt. Clobbers v, t0, t1 (t1 only AVX2 bf16) and, on
    // AVX-512, opmask k2. `nontemporal`: a streaming store that bypasses the
    // caches; a must then be aligned to the stored size (vlen elements).
    void store(const Xbyak::Address& a, const Xbyak::Xmm& v, data_type dt, const Xbyak::Xmm& t0,
               const Xbyak::Xmm& t1, bool nontemporal = false);
    // The first n lanes only (0 < n < vlen); the same clobbers.
    void store_tail(const Xbyak::Address& a, const Xbyak::Xmm& v, data_type dt, int n,
                    const Xbyak::Xmm& t0, const Xbyak::Xmm& t1);

    // acc += pairwise bf16 products of `a` with the 32-bit pair at m
    // broadcast to every lane (vdpbf16ps, native_bf16() only).
    void dot_bf16_bcast(const Xbyak::Xmm& acc, const Xbyak::Xmm& a, const Xbyak::Address& m);

    // The constant table the bf16 rounding reads (rip-relative). Emit once,
    // after the generator's last instruction; create() fails with an
    // undefined label if a bf16 store was emitted and this was not.
    void emit_constants();

private:
    // t0 := the bf16 rounding of v (f32 bits) in the low half of every dword.
    void round_bf16(const Xbyak::Xmm& v, const Xbyak::Xmm& t0, const Xbyak::Xmm& t1);
    // The same, packed into the low half of t0 (the fast form on native_bf16).
    void round_pack_bf16(const Xbyak::Xmm& v, const Xbyak::Xmm& t0, const Xbyak::Xmm& t1);
    // The low words of t's dwords, packed: AVX-512 in-register into ymm t,
    // AVX2 into the low xmm of t.
    void pack_words(const Xbyak::Xmm& t);
    // Writes the first n words of xmm/ymm `w` to a, one at a time (AVX2).
    void store_words(const Xbyak::Address& a, const Xbyak::Xmm& w, int n);
    Xbyak::Address constant(int index) const;

    Xbyak::CodeGenerator& cg_;
    VecIsa& vi_;
    Isa isa_;
    Xbyak::Label constants_;
};

}  // namespace convgrad::detail
