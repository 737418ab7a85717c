#include "jit/vec_isa.hpp"

#include <string>

#include "convgrad/convgrad.hpp"

namespace convgrad::detail {

using Xbyak::Address;
using Xbyak::Xmm;
using Xbyak::Ymm;
using Xbyak::Zmm;

VecIsa::VecIsa(Xbyak::CodeGenerator& cg, Isa isa) : cg_(cg), avx512_(isa >= Isa::avx512_core) {}

// Out of range, Xbyak would encode the register's low bits (zmm32 as zmm0):
// a generator that miscounts its registers fails here, not in its results.
Xmm VecIsa::vreg(int i) const {
    if (i < 0 || i >= num_vregs())
        throw error("JIT: vector register " + std::to_string(i) + " requested, the ISA has " +
                    std::to_string(num_vregs()));
    return avx512_ ? Xmm(Zmm(i)) : Xmm(Ymm(i));
}

void VecIsa::zero(const Xmm& v) { cg_.vxorps(v, v, v); }

void VecIsa::load(const Xmm& v, const Address& a) { cg_.vmovups(v, a); }

void VecIsa::store(const Address& a, const Xmm& v) { cg_.vmovups(a, v); }

void VecIsa::mov(const Xmm& dst, const Xmm& src) { cg_.vmovaps(dst, src); }

void VecIsa::add(const Xmm& dst, const Xmm& a, const Xmm& b) { cg_.vaddps(dst, a, b); }

void VecIsa::bcast(const Xmm& v, const Address& a) { cg_.vbroadcastss(v, a); }

void VecIsa::fma(const Xmm& acc, const Xmm& a, const Xmm& b) { cg_.vfmadd231ps(acc, a, b); }

void VecIsa::fma_bcast(const Xmm& acc, const Xmm& a, const Address& m, const Xmm& tmp) {
    if (avx512_) {
        cg_.vfmadd231ps(acc, a, cg_.ptr_b[m.getRegExp()]);
    } else {
        cg_.vbroadcastss(tmp, m);
        cg_.vfmadd231ps(acc, a, tmp);
    }
}

void VecIsa::set_tail(int n, const Xbyak::Reg64& gpr, int mask_vreg) {
    if (avx512_) {
        cg_.mov(gpr.cvt32(), (1u << n) - 1);
        cg_.kmovw(Xbyak::util::k1, gpr.cvt32());
        return;
    }
    // AVX2: lanes [0, n) all-ones, read from a static table of 8 ones then
    // 8 zeros at offset 8 - n.
    static const int32_t kMaskTable[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
    mask_vreg_ = mask_vreg;
    cg_.mov(gpr, reinterpret_cast<uintptr_t>(kMaskTable + 8 - n));
    cg_.vmovups(Ymm(mask_vreg), cg_.ptr[gpr]);
}

void VecIsa::load_tail(const Xmm& v, const Address& a) {
    if (avx512_)
        cg_.vmovups(Zmm(v.getIdx()) | Xbyak::util::k1 | Xbyak::util::T_z, a);
    else
        cg_.vmaskmovps(Ymm(v.getIdx()), Ymm(mask_vreg_), a);
}

void VecIsa::store_tail(const Address& a, const Xmm& v) {
    if (avx512_)
        cg_.vmovups(a | Xbyak::util::k1, Zmm(v.getIdx()));
    else
        cg_.vmaskmovps(a, Ymm(mask_vreg_), Ymm(v.getIdx()));
}

void VecIsa::fma_mem(const Xmm& acc, const Xmm& a, const Address& m, const Xmm& tmp) {
    if (avx512_) {
        cg_.vfmadd231ps(acc, a, m);
    } else {
        cg_.vmovups(tmp, m);
        cg_.vfmadd231ps(acc, a, tmp);
    }
}

void VecIsa::fma_mem_tail(const Xmm& acc, const Xmm& a, const Address& m, const Xmm& tmp) {
    if (avx512_) {
        cg_.vfmadd231ps(Zmm(acc.getIdx()) | Xbyak::util::k1, Zmm(a.getIdx()), m);
    } else {
        load_tail(tmp, m);
        cg_.vfmadd231ps(acc, a, tmp);
    }
}

namespace {

// vpermps indices of lane groups of 8 and 16: row o of a group of G puts
// lane c - c % G + o into lane c (an AVX2 vector reads the first 8); and
// vpermd indices of bf16 pairs in groups of 2..16 (lane_group_pair_index).
struct LaneGroupIndex {
    alignas(64) int32_t g8[8][16];
    alignas(64) int32_t g16[16][16];
    alignas(64) int32_t pairs[4][8][16];  // G = 2, 4, 8, 16; o < G / 2
    LaneGroupIndex() {
        for (int o = 0; o < 16; ++o)
            for (int c = 0; c < 16; ++c) {
                if (o < 8) g8[o][c] = c - c % 8 + o;
                g16[o][c] = o;
            }
        for (int lg = 0; lg < 4; ++lg)
            for (int o = 0; o < 8; ++o)
                for (int c = 0; c < 16; ++c) {
                    const int g = 2 << lg;
                    pairs[lg][o][c] = o < g / 2 ? (c - c % g) / 2 + o : 0;
                }
    }
    const int32_t* row(int g, int o) const { return g == 8 ? g8[o] : g16[o]; }
    const int32_t* pair_row(int g, int o) const { return pairs[g == 2 ? 0 : g == 4 ? 1 : g == 8 ? 2 : 3][o]; }
};
const LaneGroupIndex kLaneGroupIndex;

// vpermilps immediate of a lane group of G <= 4, channel o: each of the
// four lanes of a 128-bit quarter takes its group's lane o.
uint8_t lane_group_imm(int g, int o) {
    int imm = 0;
    for (int i = 0; i < 4; ++i) imm |= ((i & ~(g - 1)) + o) << (2 * i);
    return static_cast<uint8_t>(imm);
}

}  // namespace

void VecIsa::lane_group_index(const Xmm& idx, const Xbyak::Reg64& gpr, int g, int o) {
    cg_.mov(gpr, reinterpret_cast<uintptr_t>(kLaneGroupIndex.row(g, o)));
    load(idx, cg_.ptr[gpr]);
}

void VecIsa::lane_group_pair_index(const Xmm& idx, const Xbyak::Reg64& gpr, int g, int o) {
    cg_.mov(gpr, reinterpret_cast<uintptr_t>(kLaneGroupIndex.pair_row(g, o)));
    load(idx, cg_.ptr[gpr]);
}

void VecIsa::permute_lane_group(const Xmm& t, const Xbyak::Operand& src, int g, int o, const Xmm& idx) {
    if (g <= 4) {
        cg_.vpermilps(t, src, lane_group_imm(g, o));
    } else if (avx512_) {
        cg_.vpermps(Zmm(t.getIdx()), Zmm(idx.getIdx()), src);
    } else {
        cg_.vpermps(Ymm(t.getIdx()), Ymm(idx.getIdx()), src);
    }
}

}  // namespace convgrad::detail
