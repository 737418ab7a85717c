// The data-gradient microkernel on AMX tiles (bf16, planned and run by
// ops/exec_data_amx.cpp). One call computes a block of 32 diff_src
// positions × 32 input channels:
//
//   C[m][c] = sum over taps t, oc of A[m + a_t][oc] * W_t[oc][c]
//
// with tdpbf16ps on four 16 × 16 f32 accumulator tiles (2 position tiles ×
// 2 channel tiles). A is diff_dst: positions `a_row` bytes apart, the next
// oc step `a_step` bytes on, a tap a byte offset. Staged, it is in blocks
// of 32 channels (zeros past OC), each block its pixels' 64 bytes in a row
// (a zero border around each image), so the 16 positions of an A tile are
// 1 KiB in one piece; read in place (1x1 layers), its NXC pixels.
// W_t is the tap's weights for the block's 32 channels in pairs of
// adjacent oc ([OCp / 2][32][2], the layout tdpbf16ps takes for its second
// source): 128 bytes a pair row, an oc step 2 KiB in one piece. Per oc
// step of 32: two A loads, two W loads, four tdpbf16ps.
//
// The accumulators go through a 4 KiB f32 block (acc) and are rounded to
// bf16 (jit/vec_cvt.hpp: nearest even, subnormals kept) into the rows[m]
// the caller names: diff_src pixels, channel block start; a null row is
// not stored (positions past the image, or the staging's garbage columns).
// The last channel block may hold only `channels` (< 32) valid channels.
//
// Block i reads A a_block bytes and rows 32 entries after block i - 1's.
// Each call loads its tile configuration and releases the tiles before it
// returns, so any thread may call it and none keeps AMX state between ops.
#pragma once

#include <cstdint>
#include <memory>

#include "jit/jit_kernel.hpp"

namespace convgrad::detail {

// Only what changes the emitted bytes; no padding (the cache key is its
// raw bytes).
struct DataAmxDesc {
    int32_t channels = 32;  // valid channels of the block, 1..32
    int32_t reserved = 0;
};
static_assert(sizeof(DataAmxDesc) == 8, "DataAmxDesc must have no padding");

// Positions and channels of a call's block, and oc a step.
inline constexpr int kAmxBlockM = 32;
inline constexpr int kAmxBlockC = 32;
inline constexpr int kAmxStepOc = 32;

struct DataAmxArgs {
    const void* a = nullptr;         // staged diff_dst of block 0's position 0 (tap offset 0)
    const void* b = nullptr;         // W pairs of the block's first channel (tap offset 0)
    const int64_t* taps = nullptr;   // ntaps pairs: (A byte offset, W byte offset)
    int64_t ntaps = 0;               // >= 1
    int64_t steps = 0;               // oc steps of kAmxStepOc, >= 1
    int64_t a_step = 0;              // A bytes between oc steps
    int64_t a_row = 0;               // A bytes between positions
    int64_t a_half = 0;              // 16 · a_row
    int64_t a_block = 0;             // A bytes between blocks (32 · a_row)
    float* acc = nullptr;            // 32 × 32 f32, 64-byte aligned
    void* const* rows = nullptr;     // 32 destinations a block (bf16), null to skip
    int64_t blocks = 0;              // >= 1
    const void* config = nullptr;    // the 64-byte tile configuration (amx_tile_config)
};

// The palette-1 configuration the AMX kernels load: eight tiles of 16 rows
// of 64 bytes, 64-byte aligned.
const void* amx_tile_config();

// One step of both AMX kernels (tiles 0-3 the accumulators, 2i + j for A
// tile i and B tile j): A tiles 4 and 5 from a0 and a1 (addresses with
// the row stride as index), B tiles 6 and 7 from b and b + 64 (b_pitch
// bytes between rows), four tdpbf16ps.
void amx_step_2x2(Xbyak::CodeGenerator& g, const Xbyak::Address& a0, const Xbyak::Address& a1,
                  const Xbyak::Reg64& b, const Xbyak::Reg64& b_pitch);

class DataAmxKernel final : public JitKernel {
public:
    explicit DataAmxKernel(const DataAmxDesc& d);
    using Fn = void (*)(const DataAmxArgs* args);
    void operator()(const DataAmxArgs& args) const { fn_(&args); }
    const DataAmxDesc& desc() const { return d_; }
    void finalize() { fn_ = entry<Fn>(); }

private:
    void generate() override;
    DataAmxDesc d_;
    Fn fn_ = nullptr;
};

std::shared_ptr<const DataAmxKernel> get_data_amx_kernel(const DataAmxDesc& d, bool* hit = nullptr);

}  // namespace convgrad::detail
