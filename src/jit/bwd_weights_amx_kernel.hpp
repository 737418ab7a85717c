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
//
// The half kernels (WeightsAmxDesc::taps = 1-3) serve grouped layers whose
// groups fit a half block (icg == ocg, dividing 16): one tile of 16 input
// channels × the 16 output channels of the same groups, for `taps` taps
// that share the list of rows (a tap only shifts A):
//
//   C_t[i][o] += sum over rows r, positions x of A[i][a_r + shift_t + x] * B[b_r + x][o]
//
// one B tile and a tile of A per tap a step (4 loads, 3 tdpbf16ps for 3
// taps), every product inside a group, where the 2 x 2 block of a layer
// with groups of 16 computes the products across its two groups too and
// reloads B for each tap. C_t starts from and is stored to acc + t·acc_tap.
#pragma once

#include <cstdint>
#include <memory>

#include "jit/jit_kernel.hpp"

namespace convgrad::detail {

struct WeightsAmxArgs {
    const void* a = nullptr;        // staged src of the block's (half's) first channel, row offset 0
    const void* b = nullptr;        // staged diff_dst pairs of the block's first oc, row offset 0
    const int64_t* rows = nullptr;  // nrows pairs (A byte offset, B byte offset)
    int64_t nrows = 0;
    int64_t steps = 0;              // steps of 32 positions a row, >= 1
    int64_t a_pitch = 0;            // A bytes between input channels
    int64_t a_half = 0;             // A bytes from channel 0's tile to channel 16's (2 x 2 kernel)
    int64_t shift[3] = {};          // half kernels: A bytes of each tap
    int64_t a_step = 0;             // A bytes from a step of 32 positions to the next
    float* acc = nullptr;           // the 32 × 32 block (half kernels: tap 0's 16 × 16)
    int64_t acc_row = 0;            // acc bytes between input channels
    int64_t acc_tap = 0;            // half kernels: acc bytes from a tap's tile to the next
    int64_t load = 0;               // 1: add to acc's values; 0: to zero
    const void* config = nullptr;   // amx_tile_config()
};

// 0: the 2 x 2 block kernel; 1-3: the half kernel of that many taps.
struct WeightsAmxDesc {
    int32_t taps = 0;
};

class WeightsAmxKernel final : public JitKernel {
public:
    explicit WeightsAmxKernel(const WeightsAmxDesc& d);
    using Fn = void (*)(const WeightsAmxArgs* args);
    void operator()(const WeightsAmxArgs& args) const { fn_(&args); }
    void finalize() { fn_ = entry<Fn>(); }

private:
    void generate() override;
    WeightsAmxDesc d_;
    Fn fn_ = nullptr;
};

std::shared_ptr<const WeightsAmxKernel> get_weights_amx_kernel(const WeightsAmxDesc& d = {}, bool* hit = nullptr);

}  // namespace convgrad::detail
