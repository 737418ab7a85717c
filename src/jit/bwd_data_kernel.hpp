// The data-gradient microkernel (ConvolutionBackwardData), one generator for
// AVX-512 and AVX2 through VecIsa.
//
// One call computes `nblocks` consecutive blocks of `m` diff_src pixels ×
// `n` vectors of input channels, each block as
//
//   acc[j][v] = sum over entries e, sum over oc < noc of
//               dd(e, j, oc) * W(e, oc, v)          (direct)
//   acc[j][v] = sum over entries e of dd(e, j, v) * W(e, v)   (depthwise)
//
// An entry is one tap that is valid for every pixel of every block of the
// call: a diff_dst pointer (pixel 0 of block 0, first oc of the chunk) and a
// pointer into the pre-packed weights. The executor builds the entries, so
// stride phases, dilation and padding never reach the kernel: taps that hit
// an inserted zero are simply not entries, and edge pixels read a
// zero-padded staging copy. A call with no entries writes zeros.
//
// The sum over one pixel is a single running chain in entry order then oc
// order; with `accumulate` the chain continues from the value in diff_src,
// so splitting oc into chunks never changes a bit.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "jit/isa.hpp"
#include "jit/jit_kernel.hpp"
#include "jit/vec_isa.hpp"

namespace convgrad::detail {

enum class DataKernelKind : int32_t {
    direct = 0,     // broadcast one diff_dst scalar per pixel, W vectors over ic
    depthwise = 1,  // diff_dst vectors over channels times W vectors
};

// Only what changes the emitted bytes. All fields are 4 or 8 bytes, ordered
// so that the struct has no padding (the cache key is its raw bytes; the
// builder also zero-fills it).
struct DataKernelDesc {
    int32_t isa = 0;      // Isa
    int32_t kind = 0;     // DataKernelKind
    int32_t m = 1;        // pixels per block
    int32_t n = 1;        // vectors of channels per block
    int32_t tail = 0;     // valid lanes of the last vector, 0 = all
    int32_t oc_unroll = 1;        // direct: oc steps per loop trip
    int32_t bcast_in_fma = 0;     // direct, AVX-512: {1toN} memory operand instead of a bcast register
    int32_t pad_ = 0;
    int64_t dd_pix_bytes = 0;     // diff_dst bytes between pixels j and j+1
    int64_t dst_pix_bytes = 0;    // diff_src bytes between pixels j and j+1
};
static_assert(sizeof(DataKernelDesc) == 48, "DataKernelDesc must have no padding");

DataKernelDesc make_data_desc(Isa isa, DataKernelKind kind, int m, int n, int tail, int oc_unroll,
                              bool bcast_in_fma, int64_t dd_pix_bytes, int64_t dst_pix_bytes);
std::string to_string(const DataKernelDesc& d);

// Vector registers a desc needs (accumulators, weights, temporaries, AVX2 mask).
int data_kernel_vregs(const DataKernelDesc& d);

struct DataEntry {
    const float* dd;  // diff_dst: pixel 0 of block 0 at the chunk's first oc / channel
    const float* w;   // packed weights: this tap, this channel block, the chunk's first oc
};

// Runtime arguments, passed by pointer.
struct DataKernelArgs {
    const DataEntry* entries = nullptr;
    int64_t nentries = 0;
    int64_t noc = 0;          // direct: oc count of the chunk
    float* dst = nullptr;     // diff_src (NXC, f32): pixel 0 of block 0, first channel of the block
    int64_t nblocks = 0;
    int64_t accumulate = 0;   // nonzero: continue the sums already in dst
};

class DataKernel final : public JitKernel {
public:
    explicit DataKernel(const DataKernelDesc& d);
    using Fn = void (*)(const DataKernelArgs*);
    void operator()(const DataKernelArgs& a) const { fn_(&a); }
    const DataKernelDesc& desc() const { return d_; }
    void finalize() { fn_ = entry<Fn>(); }

private:
    void generate() override;
    void block_loop();
    void init_accumulators();
    void entry_loop();
    void oc_loop();
    void oc_step(int u);
    void depthwise_taps();
    void store_accumulators();

    DataKernelDesc d_;
    VecIsa vi_;
    Fn fn_ = nullptr;
};

// The process-wide cache: builds on a miss, never caches a failed build.
std::shared_ptr<const DataKernel> get_data_kernel(const DataKernelDesc& d, bool* hit = nullptr);

}  // namespace convgrad::detail
