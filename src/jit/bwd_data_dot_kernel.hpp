// The data-gradient microkernel of the inner-product path (planned and run
// by ops/exec_data_dot.cpp): a 1x1 layer whose few diff_dst pixels meet
// weights with oc innermost (XIO, fully connected layers that
// fold_full_kernel runs as 1x1 included) computes
//
//   diff_src[p][c] = sum over oc of diff_dst[p][oc] * W[c][oc]
//
// as inner products along oc, both operands read in place: vectors of
// consecutive oc from a diff_dst pixel and from a W row. One call takes
// `p` pixels × `c` channels (W rows), each pair's products summed in the
// lanes of one accumulator over the whole oc range, and stores the
// accumulators as they are: lane l of out[i·c + j] holds the partial sum of
// pixel i and channel j over the oc of lane l (the caller adds the lanes).
// Per oc step: c W loads, p diff_dst loads and p·c FMAs, the W vectors
// held in registers across the pixels, and one prefetch. With `accumulate`
// the sums are added to out's vectors instead of replacing them.
//
// The weight gradient of a 1x1 layer in NCX (ops/exec_weights_dot.cpp)
// runs the same kernel on other rows: diff_dst's output-channel rows as
// the "pixels" and src's input-channel rows as the "channels", both
// contiguous along the image's pixels, which take the place of oc.
//
// Types (DataCompute): f32; widen (bf16 / f16 loads widened to f32, FMA);
// bf16_dot (vdpbf16ps on the pairs of adjacent oc that both operands hold
// already, 2·vlen oc a step). The last, partial step reads only its `tail`
// elements (masked loads, nothing past them).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "convgrad/convgrad.hpp"
#include "jit/bwd_data_kernel.hpp"
#include "jit/isa.hpp"
#include "jit/jit_kernel.hpp"

namespace convgrad::detail {

// Only what changes the emitted bytes; no padding (the cache key is its
// raw bytes).
struct DataDotDesc {
    int32_t isa = 0;      // Isa: avx2 or an AVX-512 level
    int32_t compute = 0;  // DataCompute
    int32_t dt = 0;       // data_type of diff_dst and W
    int32_t p = 1;        // pixels a call
    int32_t c = 1;        // channels (W rows) a call
    int32_t tail = 0;     // oc of the last, partial step (0: none)
    int64_t dd_pix_bytes = 0;  // diff_dst bytes between pixels
    int64_t w_row_bytes = 0;   // W bytes between channels
    int32_t accumulate = 0;    // 1: out += the sums (else out = them)
    int32_t reserved = 0;
};
static_assert(sizeof(DataDotDesc) == 48, "DataDotDesc must have no padding");

// f32 lanes of the ISA's vectors, and oc a step (bf16_dot: pairs).
int data_dot_vlen(Isa isa);
int data_dot_step_oc(Isa isa, DataCompute compute);
// Vector registers a (p, c) tile needs: accumulators, W, two diff_dst
// registers and AVX2's tail mask.
int data_dot_vregs(Isa isa, int p, int c);

class DataDotKernel final : public JitKernel {
public:
    explicit DataDotKernel(const DataDotDesc& d);
    // steps: whole oc steps before the tail; dd, w: the first pixel's and
    // channel's first oc; out: p·c vectors of f32. Each whole step also
    // prefetches one line towards L2, pf and the lines after it: the
    // caller's next W tile, so that its DRAM reads overlap this tile's
    // FMAs instead of stalling its first pass.
    using Fn = void (*)(const void* dd, const void* w, float* out, int64_t steps, const void* pf);
    void operator()(const void* dd, const void* w, float* out, int64_t steps, const void* pf) const {
        fn_(dd, w, out, steps, pf);
    }
    const DataDotDesc& desc() const { return d_; }
    void finalize() { fn_ = entry<Fn>(); }

private:
    void generate() override;
    void step(bool tail);
    DataDotDesc d_;
    Fn fn_ = nullptr;
};

std::shared_ptr<const DataDotKernel> get_data_dot_kernel(const DataDotDesc& d, bool* hit = nullptr);

// The compute of type dt on `isa` (vdpbf16ps pairs for bf16 where the ISA
// has it), and the ISA its kernels require (so that equal kernels share a
// cache entry).
DataCompute dot_compute(data_type dt, Isa isa);
Isa dot_kernel_isa(Isa isa, DataCompute compute);

// The kernels of a tiling into tiles of d.p × d.c whose last tiles hold
// last_p and last_c rows: the full tile, the last of either, both; each
// with the tail step d.tail, and with `untailed` also without it.
class DotKernelSet {
public:
    DotKernelSet() = default;
    DotKernelSet(const DataDotDesc& d, int last_p, int last_c, bool untailed);
    // The kernel of a tile of pp × cc rows (the full or the last), with the
    // tail step or (untailed sets) without it.
    const DataDotKernel& get(int64_t pp, int64_t cc, bool tail = true) const {
        return *k_[(tail && untailed_ ? 4 : 0) + (pp == p_ ? 0 : 2) + (cc == c_ ? 0 : 1)];
    }
    int built() const { return built_; }
    int hits() const { return hits_; }

private:
    std::shared_ptr<const DataDotKernel> k_[8];
    int p_ = 1, c_ = 1, built_ = 0, hits_ = 0;
    bool untailed_ = false;
};

}  // namespace convgrad::detail
