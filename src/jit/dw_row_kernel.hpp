// The microkernel of depthwise rows in NCX (planned and run by
// ops/exec_dw_rows.cpp): one channel's pixels along W are contiguous, so
// with unit stride along W both gradients vectorise along the row itself,
// f32 lanes holding consecutive pixels, with no transpose.
//
// Data gradient (`weights` = 0): a call writes `len` consecutive pixels x
// of one diff_src row,
//
//   out[x] = sum over rows r, taps t of w_r[t] · line_r[x + (taps - 1 - t) · dil]
//
// where line_r is a diff_dst row seen from the pixel the last tap of x = 0
// reads (in place, or a copy with the padding written out) and w_r that
// row's taps widened to f32. The rows are a runtime list of (line, taps)
// pointer pairs: one output row sums the (kd, kh) rows that reach it. The
// sums are final: stored once (16-bit types: rounded once).
//
// Weight gradient (`weights` = 1): a call adds, for `rows` src rows r and
// every tap t,
//
//   acc_r[t][lane] += sum over x ≡ lane of dd[x] · line_r[x + t · dil]
//
// over `len` consecutive output pixels x of one diff_dst row, line_r a src
// row seen from the pixel tap 0 of x = 0 reads (the (kd, kh) rows that
// diff_dst row reaches). acc_r holds one f32 vector a tap; the caller sums
// its lanes once at the end.
//
// A call runs `steps` steps of n vectors, then `rest` vectors of which the
// last holds `tail` pixels (0: whole): the pixels past len are neither read
// nor written. f16 / bf16 are widened to f32 as they load.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "convgrad/convgrad.hpp"
#include "jit/isa.hpp"
#include "jit/jit_kernel.hpp"

namespace convgrad::detail {

class VecIsa;
class VecCvt;

// Only what changes the emitted bytes; no padding (the cache key is its
// raw bytes).
struct DwRowDesc {
    int32_t isa = 0;      // Isa: avx2 or an AVX-512 level
    int32_t dt = 0;       // data_type of every tensor
    int32_t weights = 0;  // 1: weight gradient, 0: data gradient
    int32_t n = 1;        // vectors a step
    int32_t rest = 0;     // vectors after the steps (0 .. n)
    int32_t tail = 0;     // pixels of the last of them (0: whole)
    int32_t taps = 1;     // kw taps of the call
    int32_t stream = 0;   // data gradient: streaming stores of the whole vectors (aligned to their size)
    int32_t rows = 0;     // weight gradient: src rows of the call
    int32_t reserved = 0;
    int64_t tap_bytes = 0;  // bytes between taps in a line (dilation · element size)
};
static_assert(sizeof(DwRowDesc) == 48, "DwRowDesc must have no padding");

// Arguments in memory (one pointer to them is the call's only argument).
struct DwRowArgs {
    // Data gradient: `nrows` pairs (line, f32 taps); weight gradient: the
    // desc's `rows` pairs (src line, accumulators: `taps` f32 vectors, added
    // to). Lines at the call's first pixel.
    const void* const* rows = nullptr;
    int64_t nrows = 0;
    void* out = nullptr;
    const void* dd = nullptr;  // weight gradient: diff_dst at the call's first pixel
    int64_t steps = 0;  // steps of n vectors before the `rest` ones
};

// f32 lanes of the ISA's vectors; the most taps a weight-gradient call of
// n vectors a step can take, and the most src rows of `taps` taps.
int dw_row_vlen(Isa isa);
int dw_row_max_taps(Isa isa, int n);
int dw_row_max_rows(Isa isa, int n, int taps);
inline constexpr int kDwRowMaxRows = 9;  // a general register a src row

class DwRowKernel final : public JitKernel {
public:
    explicit DwRowKernel(const DwRowDesc& d);
    using Fn = void (*)(const DwRowArgs* args);
    void operator()(const DwRowArgs& a) const { fn_(&a); }
    const DwRowDesc& desc() const { return d_; }
    void finalize() { fn_ = entry<Fn>(); }

private:
    void generate() override;
    void generate_data();
    void generate_weights();
    void run_steps(const std::function<void(int, int)>& step, const std::vector<Xbyak::Reg64>& regs, int step_bytes);
    void fma_load(VecIsa& vi, VecCvt& cvt, const Xbyak::Xmm& acc, const Xbyak::Xmm& m, const Xbyak::Address& a,
                  int tail, const Xbyak::Xmm& x);
    DwRowDesc d_;
    Fn fn_ = nullptr;
};

std::shared_ptr<const DwRowKernel> get_dw_row_kernel(const DwRowDesc& d, bool* hit = nullptr);

}  // namespace convgrad::detail
