// Scratch memory that outlives one execute. Each OS thread keeps one buffer
// per use, grown on demand and reused by its next execute: large
// allocations come from fresh mmap'ed pages, and their first touch (the
// kernel zeroing them) cost as much as a memory-bound layer's whole work
// when every execute allocated anew (AMD Zen 4: a quarter of ResNet-50
// res2a_branch1's NCX weight gradient, 1.8-2.2x on the early NCX 1x1
// layers). A use already leased on the thread (an execute nested in
// another one's parallel loop, run by a thread that waits there) gets a
// buffer of its own, as does a request above kMaxKeptBytes; both are freed
// with their lease. release_scratch() frees the kept buffers no lease holds.
#pragma once

#include <cstddef>
#include <cstdint>

namespace convgrad::detail {

enum class Scratch {
    // exec_data.cpp
    data_wpack,     // packed W
    data_dd_nxc,    // NCX diff_dst transposed
    data_dst_nxc,   // diff_src in NXC before its transpose; stream_rows: an item's rows
    data_rows,      // padded diff_dst rows / row-block slabs
    data_acc,       // f32 partial rows between oc chunks
    data_cvt,       // widened operands
    data_col,       // the col path's columns
    data_col_rows,  // the col path's f32 image rows
    // exec_weights.cpp
    weights_stage_src,
    weights_stage_dst,
    weights_target,    // the f32 XIO target
    weights_partials,  // the reduction slices after the first
    weights_permuted,  // f32 in the user's layout before rounding
    weights_src_nxc,   // NCX inputs transposed
    weights_dst_nxc,
    weights_src_pad,  // src with its padding written out
    // the others
    dot_lanes,       // exec_weights_dot.cpp: the lane vectors of a thread's tiles
    dot_src_rows,    // exec_weights_dot.cpp: a thread's subsampled src rows (strided 1x1)
    unstrided,       // exec_unstrided.cpp: subsampled src / unit-stride diff_src
    folded_images,   // dispatch.cpp: images in the weights' channel order
    folded_weights,  // dispatch.cpp: dense weights of a permuted fold
    ncx_w,           // exec_data_ncx.cpp: W packed (bf16: oc pairs)
    dw_rows_w,       // exec_dw_rows.cpp: W widened to f32
    dw_rows_lines,   // exec_dw_rows.cpp: a thread's padded line copies
    dw_rows_acc,     // exec_dw_rows.cpp: a channel's tap vectors
    amx_data_weights,    // exec_data_amx.cpp: W in oc pairs
    amx_data_diff_dst,   // exec_data_amx.cpp: a chunk's staged diff_dst
    amx_weights_acc,     // exec_weights_amx.cpp: the f32 sums
    amx_weights_src,     // exec_weights_amx.cpp: a chunk's staged src
    amx_weights_dst,     // exec_weights_amx.cpp: a chunk's staged diff_dst pairs
    amx_src_nxc,         // exec_*_amx.cpp: NCX src or diff_src in NXC
    amx_dst_nxc,         // exec_*_amx.cpp: NCX diff_dst in NXC
    count
};

// Buffers larger than this are not kept after their lease: up to it, the
// largest seen in the shape sets (VGG-16 fc6's 411 MB W pack in OIX) stay.
inline constexpr int64_t kMaxKeptBytes = int64_t(512) << 20;

// `bytes` of scratch, 64-byte aligned, with 64 bytes of slack after them
// (kernels' tail vectors may read, never use, lanes past the data). Not
// zeroed. Null for bytes <= 0. Destroy it before the thread that made it
// ends (its kept buffers go with the thread).
class ScratchLease {
public:
    ScratchLease() = default;
    ScratchLease(Scratch use, int64_t bytes);
    ~ScratchLease() { reset(); }
    ScratchLease(ScratchLease&& o) noexcept;
    ScratchLease& operator=(ScratchLease&& o) noexcept;
    ScratchLease(const ScratchLease&) = delete;
    ScratchLease& operator=(const ScratchLease&) = delete;

    char* get() const { return ptr_; }
    float* floats() const { return reinterpret_cast<float*>(ptr_); }
    template <typename T>
    T* as() const {
        return reinterpret_cast<T*>(ptr_);
    }
    // Gives the buffer back (kept for the thread's next lease, or freed).
    void reset();

private:
    char* ptr_ = nullptr;
    void* slot_ = nullptr;   // the kept slot, or null: ptr_ is owned
    void* owner_ = nullptr;  // the slot's thread's buffers
};

// Frees every kept buffer of every thread that no lease holds; returns their
// bytes. Safe from any thread at any time.
size_t release_scratch();
// Bytes kept by all threads, leased or not (for tests and CONVGRAD_VERBOSE).
size_t kept_scratch_bytes();

}  // namespace convgrad::detail
