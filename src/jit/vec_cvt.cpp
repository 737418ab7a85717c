#include "jit/vec_cvt.hpp"

namespace convgrad::detail {

using Xbyak::Address;
using Xbyak::Xmm;
using Xbyak::Ymm;
using Xbyak::Zmm;
using Xbyak::util::k1;
using Xbyak::util::k2;
using Xbyak::util::T_z;

namespace {

// The constant table: each entry is 16 equal dwords (64 bytes), so AVX2
// reads a whole ymm and AVX-512 broadcasts the first dword.
enum Constant { kOne = 0, kRoundBias = 1, kQuietBit = 2, kNumConstants = 3 };
constexpr uint32_t kConstantValues[kNumConstants] = {1u, 0x7fffu, 0x40u};

Address word_at(const Address& a, int i) { return Xbyak::util::word[a.getRegExp() + 2 * i]; }

}  // namespace

VecCvt::VecCvt(Xbyak::CodeGenerator& cg, VecIsa& vi, Isa isa) : cg_(cg), vi_(vi), isa_(isa) {}

Address VecCvt::constant(int index) const {
    const auto where = cg_.rip + constants_ + 64 * index;
    return vi_.avx512() ? cg_.ptr_b[where] : cg_.ptr[where];
}

void VecCvt::load(const Xmm& v, const Address& a, data_type dt) {
    switch (dt) {
        case data_type::f32: vi_.load(v, a); break;
        case data_type::bf16:
            cg_.vpmovzxwd(v, a);
            cg_.vpslld(v, v, 16);
            break;
        case data_type::f16: cg_.vcvtph2ps(v, a); break;
    }
}

// 16-bit tails land in the low half of v first, then widen in place.
void VecCvt::load_tail(const Xmm& v, const Address& a, data_type dt, int n) {
    if (dt == data_type::f32) {
        vi_.load_tail(v, a);
        return;
    }
    const Xmm half = vi_.avx512() ? Xmm(Ymm(v.getIdx())) : Xmm(v.getIdx());
    if (vi_.avx512()) {
        cg_.vmovdqu16(Ymm(v.getIdx()) | k1 | T_z, a);
    } else {
        cg_.vpxor(half, half, half);
        for (int i = 0; i < n; ++i) cg_.vpinsrw(half, half, word_at(a, i), static_cast<uint8_t>(i));
    }
    widen(v, dt);
}

void VecCvt::load_zero_ext(const Xmm& v, const Address& a, int n) {
    if (n == 0) {
        cg_.vpmovzxwd(v, a);
        return;
    }
    cg_.vmovdqu16(Ymm(v.getIdx()) | k1 | T_z, a);
    cg_.vpmovzxwd(v, Ymm(v.getIdx()));
}

void VecCvt::widen(const Xmm& v, data_type dt) {
    const Xmm half = vi_.avx512() ? Xmm(Ymm(v.getIdx())) : Xmm(v.getIdx());
    if (dt == data_type::bf16) {
        cg_.vpmovzxwd(v, half);
        cg_.vpslld(v, v, 16);
    } else if (dt == data_type::f16) {
        cg_.vcvtph2ps(v, half);
    }
}

void VecCvt::bcast(const Xmm& v, const Address& a, data_type dt) {
    if (dt == data_type::f32) {
        vi_.bcast(v, a);
        return;
    }
    cg_.vpbroadcastw(v, a);  // every word = h, so every dword = h:h
    if (dt == data_type::bf16)
        cg_.vpslld(v, v, 16);
    else
        cg_.vcvtph2ps(v, vi_.avx512() ? Xmm(Ymm(v.getIdx())) : Xmm(v.getIdx()));
}

// Round to nearest even on the bit pattern: adding 0x7fff plus the lowest
// kept bit carries into the kept half exactly when the dropped half is above
// the halfway point, or at it with an odd kept half. Exact for normal and
// subnormal values alike, and infinities stay infinities; NaNs would carry
// into the sign, so they take their truncated bits with the quiet bit set.
// Result in t0 (one bf16 per dword, low half).
void VecCvt::round_bf16(const Xmm& v, const Xmm& t0, const Xmm& t1) {
    cg_.vpsrld(t0, v, 16);
    if (vi_.avx512()) {
        cg_.vpandd(t0, t0, constant(kOne));
        cg_.vpaddd(t0, t0, v);
        cg_.vpaddd(t0, t0, constant(kRoundBias));
        cg_.vpsrld(t0, t0, 16);
        cg_.vcmpunordps(k2, v, v);
        cg_.vpsrld(t0 | k2, v, 16);
        cg_.vpord(t0 | k2, t0, constant(kQuietBit));
        return;
    }
    cg_.vpand(t0, t0, constant(kOne));
    cg_.vpaddd(t0, t0, v);
    cg_.vpaddd(t0, t0, constant(kRoundBias));
    cg_.vpsrld(t0, t0, 16);
    cg_.vcmpunordps(t1, v, v);
    cg_.vpsrld(v, v, 16);
    cg_.vpor(v, v, constant(kQuietBit));
    cg_.vblendvps(t0, t0, v, t1);
}

// bf16 words of v, packed into the low half of t0. With vcvtneps2bf16
// (native_bf16) one instruction rounds the same way except that it flushes
// subnormal results to zero, so a vector with a subnormal lane (vfpclassps
// class 0x20, practically never) takes the integer path instead.
void VecCvt::round_pack_bf16(const Xmm& v, const Xmm& t0, const Xmm& t1) {
    if (!native_bf16()) {
        round_bf16(v, t0, t1);
        pack_words(t0);
        return;
    }
    Xbyak::Label l_done;
    cg_.vcvtneps2bf16(Ymm(t0.getIdx()), Zmm(v.getIdx()));
    cg_.vfpclassps(k2, Zmm(v.getIdx()), 0x20);
    cg_.kortestw(k2, k2);
    cg_.jz(l_done);
    round_bf16(v, t0, t1);
    pack_words(t0);
    cg_.L(l_done);
}

void VecCvt::pack_words(const Xmm& t) {
    if (vi_.avx512()) {
        cg_.vpmovdw(Ymm(t.getIdx()), Zmm(t.getIdx()));
        return;
    }
    // Saturation never triggers (every dword is below 0x10000); the pack
    // works per 128-bit lane, so gather quadwords 0 and 2 into the low half.
    cg_.vpackusdw(t, t, t);
    cg_.vpermq(Ymm(t.getIdx()), Ymm(t.getIdx()), 0x08);
}

void VecCvt::store_words(const Address& a, const Xmm& w, int n) {
    for (int i = 0; i < n; ++i) cg_.vpextrw(word_at(a, i), Xmm(w.getIdx()), static_cast<uint8_t>(i));
}

void VecCvt::store(const Address& a, const Xmm& v, data_type dt, const Xmm& t0, const Xmm& t1, bool nontemporal) {
    if (dt == data_type::f32) {
        if (nontemporal)
            cg_.vmovntps(a, v);
        else
            vi_.store(a, v);
        return;
    }
    // 16-bit: the vlen words in the low half of t0 (ymm on AVX-512, xmm on AVX2).
    const Xmm half = vi_.avx512() ? Xmm(Ymm(t0.getIdx())) : Xmm(t0.getIdx());
    if (dt == data_type::bf16) {
        round_pack_bf16(v, t0, t1);
    } else {
        if (!nontemporal) {
            cg_.vcvtps2ph(a, v, 0);  // imm 0: nearest even
            return;
        }
        cg_.vcvtps2ph(half, v, 0);
    }
    if (nontemporal)
        cg_.vmovntdq(a, half);
    else if (vi_.avx512())
        cg_.vmovdqu16(a, half);  // EVEX: the register may be ymm16-31
    else
        cg_.vmovdqu(a, half);
}

void VecCvt::store_tail(const Address& a, const Xmm& v, data_type dt, int n, const Xmm& t0,
                        const Xmm& t1) {
    if (dt == data_type::f32) {
        vi_.store_tail(a, v);
        return;
    }
    if (dt == data_type::bf16) {
        round_pack_bf16(v, t0, t1);
    } else {
        cg_.vcvtps2ph(vi_.avx512() ? Xmm(Ymm(t0.getIdx())) : Xmm(t0.getIdx()), v, 0);
    }
    if (vi_.avx512())
        cg_.vmovdqu16(a | k1, Ymm(t0.getIdx()));
    else
        store_words(a, t0, n);
}

void VecCvt::dot_bf16_bcast(const Xmm& acc, const Xmm& a, const Address& m) {
    cg_.vdpbf16ps(acc, a, cg_.ptr_b[m.getRegExp()]);
}

void VecCvt::emit_constants() {
    cg_.align(64);
    cg_.L(constants_);
    for (uint32_t c : kConstantValues)
        for (int i = 0; i < 16; ++i) cg_.dd(c);
}

}  // namespace convgrad::detail
