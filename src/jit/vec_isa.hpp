// VecIsa: the small set of emit hooks through which one kernel skeleton
// serves AVX-512 (zmm, 32 registers, opmask tails) and AVX2 (ymm, 16
// registers, vmaskmov tails). Generators call these instead of naming
// instructions of one ISA; anything not here is ISA-independent code.
#pragma once

#include <xbyak/xbyak.h>

#include "jit/isa.hpp"

namespace convgrad::detail {

class VecIsa {
public:
    // isa must be avx2 or an AVX-512 level.
    VecIsa(Xbyak::CodeGenerator& cg, Isa isa);

    bool avx512() const { return avx512_; }
    int vlen() const { return avx512_ ? 16 : 8; }  // f32 lanes
    int vbytes() const { return vlen() * 4; }
    int num_vregs() const { return avx512_ ? 32 : 16; }
    // Vector register i as zmm or ymm.
    Xbyak::Xmm vreg(int i) const;

    void zero(const Xbyak::Xmm& v);
    void load(const Xbyak::Xmm& v, const Xbyak::Address& a);
    void store(const Xbyak::Address& a, const Xbyak::Xmm& v);
    void mov(const Xbyak::Xmm& dst, const Xbyak::Xmm& src);  // register copy
    void add(const Xbyak::Xmm& dst, const Xbyak::Xmm& a, const Xbyak::Xmm& b);
    void bcast(const Xbyak::Xmm& v, const Xbyak::Address& a);  // one f32 to all lanes
    // acc += a * b
    void fma(const Xbyak::Xmm& acc, const Xbyak::Xmm& a, const Xbyak::Xmm& b);
    // acc += a * broadcast(f32 at m). AVX-512 uses an embedded {1to16}
    // broadcast; AVX2 broadcasts into `tmp` first.
    void fma_bcast(const Xbyak::Xmm& acc, const Xbyak::Xmm& a, const Xbyak::Address& m,
                   const Xbyak::Xmm& tmp);

    // Tails: a mask for the first n lanes (0 < n < vlen()). AVX-512 keeps it
    // in opmask k1; AVX2 in the vector register `mask_vreg` (which the
    // generator must then not use for anything else). Clobbers `gpr`.
    void set_tail(int n, const Xbyak::Reg64& gpr, int mask_vreg);
    void load_tail(const Xbyak::Xmm& v, const Xbyak::Address& a);  // masked lanes read 0
    void store_tail(const Xbyak::Address& a, const Xbyak::Xmm& v);

    // acc += a * (vector at m). AVX-512 reads memory inside the FMA; AVX2
    // loads into `tmp` first (its FMA could, but the tail variant cannot,
    // and one shape for both keeps register budgets simple).
    void fma_mem(const Xbyak::Xmm& acc, const Xbyak::Xmm& a, const Xbyak::Address& m,
                 const Xbyak::Xmm& tmp);
    // The same on the first lanes set by set_tail: masked lanes of m are not
    // read (m may end at the tail); they leave acc unchanged on AVX-512 and
    // add a * 0 on AVX2.
    void fma_mem_tail(const Xbyak::Xmm& acc, const Xbyak::Xmm& a, const Xbyak::Address& m,
                      const Xbyak::Xmm& tmp);

    // Lane groups (grouped convolutions with G channels per group, G a power
    // of two up to vlen): t := perm_o(src), lane c taking src lane
    // c - c % G + o, its group's channel o. G <= 4: vpermilps by immediate
    // (src may be memory); otherwise vpermps by the index that
    // lane_group_index put in `idx`.
    static bool lane_group_needs_index(int g) { return g >= 8; }
    void lane_group_index(const Xbyak::Xmm& idx, const Xbyak::Reg64& gpr, int g, int o);  // clobbers gpr
    // vpermd index of bf16 channel pairs (G even, AVX-512): dword lane c takes
    // dword (c - c % G) / 2 + o of 16 bf16 channels, the pair (2o, 2o + 1)
    // of its group. Clobbers gpr.
    void lane_group_pair_index(const Xbyak::Xmm& idx, const Xbyak::Reg64& gpr, int g, int o);
    void permute_lane_group(const Xbyak::Xmm& t, const Xbyak::Operand& src, int g, int o, const Xbyak::Xmm& idx);

private:
    Xbyak::CodeGenerator& cg_;
    bool avx512_;
    int mask_vreg_ = -1;
};

}  // namespace convgrad::detail
