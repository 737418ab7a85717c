// The weight-gradient microkernel on AMX tiles (bf16, planned and run by
// ops/exec_weights_amx.cpp). One call adds to a block of 32 input
// channels × 32 output channels of one tap:
//
//   C[i][o] += sum over rows r, positions x of A[i][a_r + x] * B[b_r + x][o]
//
// with tdpbf16ps on four 16 × 16 f32 accumulator tiles (2 input-channel
// tiles × 2 output-channel tiles). A is src staged channel-major: each
// input channel's positions in a row `a_pitch` bytes long, the tap's
// shift already in the A pointer, so a tile is 16 channels × 32
// consecutive positions. B is diff_dst staged in pairs of adjacent
// positions ([positions / 2][32 oc][2], the layout tdpbf16ps takes for its
// second source): 128 bytes a pair row, a step of 32 positions 2 KiB in
// one piece. A row of the list is a run of `steps` steps of 32 positions
// (an output row, or a whole plane) at its own A and B offsets.
//
// The block starts from acc (f32, acc_row bytes between input channels)
// or from zero, and is stored back to acc. Each call loads its tile
// configuration and releases the tiles before it returns.
#pragma once

#include <cstdint>
#include <memory>

#include "jit/jit_kernel.hpp"

namespace convgrad::detail {

struct WeightsAmxArgs {
    const void* a = nullptr;        // staged src of the block's first channel, row offset 0
    const void* b = nullptr;        // staged diff_dst pairs of the block's first oc, row offset 0
    const int64_t* rows = nullptr;  // nrows pairs (A byte offset, B byte offset)
    int64_t nrows = 0;
    int64_t steps = 0;              // steps of 32 positions a row, >= 1
    int64_t a_pitch = 0;            // A bytes between input channels
    float* acc = nullptr;           // the 32 × 32 block
    int64_t acc_row = 0;            // acc bytes between input channels
    int64_t load = 0;               // 1: add to acc's values; 0: to zero
    const void* config = nullptr;   // amx_tile_config()
};

// Nothing varies the emitted bytes: one kernel for all problems.
struct WeightsAmxDesc {
    int32_t reserved = 0;
};

class WeightsAmxKernel final : public JitKernel {
public:
    explicit WeightsAmxKernel(const WeightsAmxDesc&);
    using Fn = void (*)(const WeightsAmxArgs* args);
    void operator()(const WeightsAmxArgs& args) const { fn_(&args); }
    void finalize() { fn_ = entry<Fn>(); }

private:
    void generate() override;
    Fn fn_ = nullptr;
};

std::shared_ptr<const WeightsAmxKernel> get_weights_amx_kernel(bool* hit = nullptr);

}  // namespace convgrad::detail
