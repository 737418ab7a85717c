// The weight-gradient microkernel on AMX tiles (bf16, planned and run by
// ops/exec_weights_amx.cpp). One call adds to a block of 32 input
// channels × 32 output channels of one tap:
//
//   C[i][o] += sum over rows r, positions x of A[i][a_r + x] * B[b_r + x][o]
//
// with tdpbf16ps on four 16 × 16 f32 accumulator tiles (2 input-channel
// tiles × 2 output-channel tiles). A is src staged channel-major, the
// tap's shift already in the A pointer: a tile is 16 channels × 32
// consecutive positions, its rows `a_pitch` bytes apart, the second
// input-channel tile `a_half` bytes after the first, a step of 32
// positions `a_step` bytes further (each channel's positions in one long
// row: a_pitch the row, a_half 16 rows, a_step 64; or blocks of 32
// channels × 32 positions: 64, 1024 and 2048). B is diff_dst staged in pairs of adjacent
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
    int64_t a_half = 0;             // A bytes from channel 0's tile to channel 16's
    int64_t a_step = 0;             // A bytes from a step of 32 positions to the next
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
