// The data-gradient microkernel of 1x1 layers in NCX (planned and run by
// ops/exec_data_ncx.cpp):
//
//   diff_src[i][x] = sum over oc of W[oc][i] * diff_dst[oc][x]
//
// with x, an image's pixels, contiguous in both activations: one call
// takes m input channels × n vectors of pixels in accumulators and runs
// the whole oc range, each step loading the n diff_dst vectors of one
// output channel's row and broadcasting the m weights W[oc][i .. i + m)
// (any weights layout: the strides are compile-time displacements) into
// m·n FMAs. The sums are final, stored (16-bit types: rounded once) to m
// rows of diff_src. f16 / bf16 are widened to f32 as they load. The last
// vector of a call may be partial (`tail` pixels: masked loads and stores,
// nothing past them).
//
// `pairs` (bf16 with vdpbf16ps): each step takes two output channels. A
// 32-pixel load of row oc and the same pixels of row oc + 1 interleave by
// word (vpunpcklwd / vpunpckhwd, within 128-bit lanes) into two vectors of
// (oc, oc + 1) pairs, pixels {0-3, 8-11, 16-19, 24-27} and {4-7, 12-15,
// 20-23, 28-31}; W's pair (W[oc][i], W[oc + 1][i]) is one dword, broadcast
// into m·n vdpbf16ps. The accumulators keep that pixel order until the
// store puts it back (vpermi2ps). n counts f32 vectors and is even; `tail`
// is the pixels of the last 32 (0: whole); `odd`: one more step after the
// pairs pairs the last row with zeros.
#pragma once

#include <cstdint>
#include <memory>

#include "convgrad/convgrad.hpp"
#include "jit/isa.hpp"
#include "jit/jit_kernel.hpp"

namespace convgrad::detail {

// Only what changes the emitted bytes; no padding (the cache key is its
// raw bytes).
struct DataNcxDesc {
    int32_t isa = 0;       // Isa: avx2 or an AVX-512 level
    int32_t dt = 0;        // data_type of every tensor
    int32_t m = 1;         // input channels a call
    int32_t n = 1;         // pixel vectors a call (the last partial when tail > 0)
    int32_t tail = 0;      // pixels of the last vector (pairs: of the last 32; 0: whole)
    int32_t pairs = 0;     // bf16 oc pairs by vdpbf16ps (see above)
    int32_t odd = 0;       // pairs: a last output channel without a partner
    int32_t reserved = 0;
    int64_t dd_row_bytes = 0;   // diff_dst bytes between output channels
    int64_t w_o_bytes = 0;      // W bytes between output channels (pairs: between pairs)
    int64_t w_i_bytes = 0;      // W bytes between input channels
    int64_t out_row_bytes = 0;  // diff_src bytes between input channels
};
static_assert(sizeof(DataNcxDesc) == 64, "DataNcxDesc must have no padding");

// f32 lanes of the ISA's vectors; vector registers an (m, n) tile needs
// (accumulators, n diff_dst vectors, a broadcast, AVX2's tail mask).
int data_ncx_vlen(Isa isa);
int data_ncx_vregs(Isa isa, int m, int n, bool pairs = false);

class DataNcxKernel final : public JitKernel {
public:
    explicit DataNcxKernel(const DataNcxDesc& d);
    // w: W at the first output channel and the tile's first input channel;
    // dd: diff_dst at the first output channel and the first pixel; out:
    // diff_src at the tile's first channel and first pixel; oc: output
    // channels to sum (pairs: oc pairs, the odd row not counted). Each
    // output channel also prefetches the line at pf towards L2, pf
    // advancing by dd_row_bytes (the caller's next pixel strip).
    using Fn = void (*)(const void* w, const void* dd, void* out, int64_t oc, const void* pf);
    void operator()(const void* w, const void* dd, void* out, int64_t oc, const void* pf) const {
        fn_(w, dd, out, oc, pf);
    }
    const DataNcxDesc& desc() const { return d_; }
    void finalize() { fn_ = entry<Fn>(); }

private:
    void generate() override;
    void generate_pairs();
    void next_step(Xbyak::Label& loop, int rows);
    DataNcxDesc d_;
    Fn fn_ = nullptr;
};

std::shared_ptr<const DataNcxKernel> get_data_ncx_kernel(const DataNcxDesc& d, bool* hit = nullptr);

}  // namespace convgrad::detail
