// The data-gradient planner: a pure function of Problem + ISA + thread count.
//
// Three paths share one kernel (jit/bwd_data_kernel.hpp):
//  - direct: diff_src pixels × vectors of input channels; per (tap, oc) the
//    kernel broadcasts diff_dst and multiplies packed W vectors.
//  - depthwise (IC/g == OC/g == G, G in {1, 2, 4, 8}, 16 with a W stride:
//    the depthwise convolution and groups of few channels): vectors over
//    channels, the G output channels of a lane's group by permuting
//    diff_dst inside the vector (see jit/bwd_data_kernel.hpp).
//  - col (few input channels per group, e.g. a first layer with ic = 3):
//    a GEMM per diff_dst pixel over lanes (tap, ic) = K·ICg, so the vector
//    width is filled by taps instead of padding 3 channels to 16, then the
//    columns are added into diff_src in a fixed order (col2im).
// Everything that changes a bit of the result (path, blocking, oc chunks)
// is chosen without looking at the thread count; only the ThreadGrid
// depends on it, so results are identical for any thread count.
//
// bf16 / f16 (DataKernelTypes): bf16 on avx512_core_bf16 runs the direct
// path and lane groups with vdpbf16ps on oc pairs, the depthwise
// convolution on pairs of kh rows; every other 16-bit case
// widens diff_dst to f32 inside the kernel (once per entry, feeding n FMAs
// per value) with W packed as f32. Sums stay f32 and are rounded once at
// the final store.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "jit/bwd_data_kernel.hpp"
#include "jit/isa.hpp"
#include "ops/problem.hpp"

namespace convgrad::detail {

enum class DataPath { direct, depthwise, col };
const char* data_path_name(DataPath p);

// The spatial view the executor walks: D, H, W of diff_src (in) and
// diff_dst (out). A 1x1, stride-1, unpadded problem folds H into W so the
// whole plane is one long row of pixels.
struct DataGeometry : SpatialView {
    bool folded_hw = false;
    // Whole images of a plain layer (every axis 1x1, unit stride, no pad)
    // shorter than kBatchRowPixels per W row: this many consecutive images
    // make one W row (NXC keeps them contiguous), so blocks of pixels span
    // images (EfficientNet's squeeze-excitation layers: one pixel an image).
    int64_t images_per_row = 1;
    int64_t k_sp() const { return k[0] * k[1] * k[2]; }
};

// Register blocking: m pixels × n vectors (vlen lanes each).
struct DataBlocking {
    int m = 1, n = 1, vlen = 16;
    int oc_unroll = 2;
    bool bcast_in_fma = false;
    int lanes() const { return n * vlen; }
};

// Channel blocks: `lanes` per group (ICg, C for depthwise, K·ICg for col)
// cut into blocks of blocking.lanes(); the last one is `tail_n` vectors
// whose last vector has `tail_lanes` valid lanes (0 = full).
struct DataChannelBlocks {
    int64_t lanes = 0, per_group = 0, total = 0;
    int64_t block = 0;  // lanes of a full block
    int vlen = 16;
    int tail_n = 0, tail_lanes = 0;
    int64_t padded() const;  // lanes per group rounded up to whole vectors
    // Lanes of a block in packed W: a full block, or the last one's whole vectors.
    int64_t width(bool last) const { return last ? int64_t(tail_n) * vlen : block; }
};

// Thread partition over items (row group, channel block), group-major:
// contiguous ranges.
struct DataThreadGrid {
    int threads = 1;
    int64_t items = 0;
    // Items [first, second) of thread t (< threads): contiguous, in order,
    // together exactly [0, items).
    std::pair<int64_t, int64_t> range(int t) const {
        const auto r = spread(items, threads, t);
        return {r[0], r[1]};
    }
};

// Sizes in elements: W of the packed type (f32, or bf16 for bf16_dot),
// activations of the problem's type, f32 for acc / cvt / col rows.
struct DataScratch {
    int64_t wpack_elems = 0;    // packed weights, shared
    // NCX: diff_dst transposed, and diff_src before its transpose back;
    // whole tensors where neither windows nor the col path's images
    // serve (several images a row), else for col plans an image of each
    // per thread.
    int64_t dd_nxc_elems = 0;
    int64_t dst_nxc_elems = 0;
    bool whole_nxc = false;  // the whole tensors
    int64_t row_slots = 0;      // per thread: padded diff_dst rows kept
    int64_t row_bytes = 0;      // bytes of one padded row
    int64_t slab_bytes = 0;     // per thread, row blocks: a plane's padded diff_dst rows
    int64_t acc_floats = 0;     // per thread: f32 partial sums of a row between oc chunks
    int64_t cvt_floats = 0;     // per thread: widened diff_dst of one kernel entry
    int64_t col_rows_floats = 0;  // per thread, col path with a 16-bit output: f32 image rows
    int64_t rows_out_bytes = 0;   // per thread, stream_rows: a row group's diff_src rows
    // per thread, NCX windows: the largest item's diff_dst and diff_src rows
    // (set with the plan, so a cached plan does not walk the items again)
    int64_t window_dd_rows = 0, window_dst_rows = 0;
    // and the pixels of their rows (whole rows, or a segment's: the diff_dst
    // window inside the row, the segment's diff_src pixels)
    int64_t window_dd_px = 0, window_dst_px = 0;
};

struct DataPlan {
    Isa isa = Isa::avx512_core;  // the ISA the kernels require
    DataPath path = DataPath::direct;
    data_type dt = data_type::f32;  // the problem's
    DataKernelTypes types;       // the kernels' compute form and element types
    int w_elem_bytes = 4;        // packed W: f32, or bf16 pairs
    int64_t ocg_w = 0;           // oc rows of packed W per tap (bf16_dot: ocg rounded up to even)
    DataGeometry geo;
    DataBlocking blk;
    DataChannelBlocks cb;
    int64_t rows = 0;          // (n, id, ih) rows of diff_src
    int64_t oc_chunk = 0;      // direct: oc per pass (W chunk stays in L2)
    // Rows per item. 1 when all of W stays in L2; else enough rows that a
    // channel block's W, streamed once per group, serves many pixels, while
    // the group's diff_dst rows stay in the row cache across channel blocks.
    int64_t group_rows = 1;
    // Small planes (no depth taps; width <= 16 at unit strides, with
    // direct_row_taps up to 28 and strided too): a block is a
    // whole row (m = width), the plane's diff_dst rows are padded once into
    // a contiguous slab, and one kernel call runs every row that shares the
    // same valid taps, against an oc chunk of W small enough for L1; so W
    // serves the whole plane from L1 instead of one row from L2 (with
    // direct_row_taps, few W loads per FMA: a chunk of up to 256 KiB in L2).
    bool row_blocks = false;
    // Row blocks (f32, bf16 pairs, or 16-bit widened in the padded rows):
    // one kernel entry per (kd, kh) row carrying its KW taps, the row's W
    // edges compiled into the kernel (DataKernelDesc::row_x0): per oc, KW·n
    // W loads and one broadcast per diff_dst pixel for every tap reading
    // it, and no FMA on the zero pads.
    bool direct_row_taps = false;
    // Row taps: diff_src rows a block (blk.m / the row's pixels): the
    // rows share each oc step's W loads and add independent chains; a
    // run's leftover rows go through the one-row kernel.
    int64_t block_rows() const { return direct_row_taps ? blk.m / geo.in[2] : 1; }
    // Depthwise, unit W stride: one kernel entry per kh row carrying all KW
    // taps, so each diff_dst vector is loaded once for every tap it meets.
    bool dw_row_taps = false;
    // ... the taps one after another, each with the registers of one tap an
    // entry (DataKernelDesc::tap_seq): plans whose blocking left no room
    // for a row's W vectors, or short strided phases.
    bool dw_tap_seq = false;
    // ... in groups of this many taps (DataKernelDesc::tap_seq): each
    // diff_dst vector loaded once for a group's taps.
    int dw_tap_group = 1;
    // Depthwise bf16 with vdpbf16ps (G = 1, types.row_pairs set): a
    // diff_src row's valid kh rows of one kd, kh and kh + row_pair_step, go
    // through the kernel in pairs (DataKernelDesc::row_pairs), W packed as
    // [block][pair, alone][tap][lanes] dword pairs: (W[kh], W[kh + step])
    // and (W[kh], 0).
    bool dw_row_pairs() const { return types.row_pairs != DataRowPairs::none; }
    int64_t row_pair_step = 0;
    // Depthwise (G = 1, not vdpbf16ps) with W's channels adjacent (XIO)
    // in whole vectors: the kernels read W where it is (16-bit: widened as
    // loaded), each tap's vectors at the channel block's offset in its tap
    // (DataKernelDesc::w_tap_bytes), so no packing per execute
    // (make_data_plan).
    bool w_in_place = false;
    int lane_group = 1;  // depthwise: channels per group G (1: a depthwise convolution)
    // Edges read per-thread copies of the diff_dst rows with zero pixels on
    // both W sides (widened to f32 when widen_rows), so a phase runs as one
    // sequence of blocks; without edges the kernels read diff_dst itself.
    bool padded_rows = false, widen_rows = false;
    // Col path, 16-bit f32-compute plans of kColWidenMinBlocks lane blocks
    // or more: the executor widens a (group, column chunk)'s diff_dst
    // pixels to f32 once, and every lane block's kernel reads them as f32
    // (widened in the kernels, each lane block converts them again: 24
    // times a chunk for ViT-B/16's 768 lanes). See choose_cache_blocking.
    bool col_widened = false;
    int64_t pad_left = 0, pad_right = 0;  // zero pixels before / after a padded row
    // Depthwise plans with one entry a kh row (dw_row_taps, or kernels one
    // tap wide), rows not long: no padded copies; each W phase's kernel has
    // the row's geometry compiled in (DataKernelDesc::row_x0, row_w,
    // row_nblocks) and leaves out the taps past the W edges, so the kernels
    // read diff_dst rows where they are.
    bool dw_edges = false;
    bool dw_prefetch_rows = false;
    // Bytes between diff_dst pixels as the kernels read them: OC elements,
    // or in padded rows one line more where a block's taps would otherwise
    // crowd one L1 set (see choose_padded_rows).
    int64_t dd_pitch = 0;
    bool dd_pitch_spread = false;  // the line added
    // A large output with few FMAs per byte (depthwise, short 1x1): diff_src
    // is written with streaming stores when its address allows (saves
    // reading every line first).
    bool nt_store = false;
    // Kernels without streaming stores prefetch each block's diff_src lines
    // for writing (DataStore::prefetched).
    bool pf_store = false;
    // Large f32 NXC depthwise outputs whose kernels cannot stream whole
    // lines (see make_data_plan): an item is a row group with all its
    // channel blocks, computed into a per-thread copy of its rows
    // (scratch.rows_out_bytes) and then streamed to diff_src, one
    // contiguous run of whole lines.
    bool stream_rows = false;
    // NCX depthwise and direct plans (one image a row): no whole-tensor
    // transposes; each item transposes the diff_dst rows it reads, for its
    // channels (a direct plan: its groups' output channels, every one when
    // dense, kept for the row group's next channel block), into a
    // per-thread NXC window, computes its diff_src rows into another and
    // transposes them back into the user's NCX diff_src. Row groups are
    // whole images on small planes (see make_data_plan).
    bool ncx_windows = false;
    bool window_nt = false;  // large outputs: the write-back streams whole lines
    // Bytes added to the windows' pixels (both windows; 0: channels apart):
    // Depthwise plans reading their rows in place where pixels a
    // multiple of 512 bytes apart would crowd a few L1 sets (make_data_plan).
    int64_t window_pad = 0;
    int64_t col_pixels = 0;    // col: diff_dst pixels per GEMM chunk
    // Channel blocks per kernel call (direct and depthwise paths, row
    // blocks too): consecutive channel blocks that share a kernel and lie a
    // constant step apart in diff_dst, W and diff_src (the groups of a
    // direct plan with one block a group; a depthwise or lane-group plan's
    // blocks, a narrower last one alone) run in one call through the same
    // entries (DataKernelArgs::nreps). Items are (row group, run of up to
    // cb_reps blocks); see cb_runs().
    int64_t cb_reps = 1;
    // Runs of channel blocks a row group splits into, and the blocks
    // [first, second) of run `r`.
    int64_t cb_runs() const;
    bool last_block_alone() const;  // a group's last block narrower than the others
    std::pair<int64_t, int64_t> cb_run(int64_t r) const;
    // Long rows (direct and depthwise plans on padded rows whose rows do
    // not fit L2; see choose_segments): each row's W phases cut into
    // `segments` segments of seg_pixels phase pixels (whole blocks; the
    // last segment takes the rest and the partial block). An item is
    // (segment, row group, run of channel blocks), segment-major; its rows
    // read padded copies of just the diff_dst window the segment's taps
    // reach (seg_windows), which stay in L2 for every channel block. NCX
    // windows hold the segment's pixels of their rows.
    int64_t segments = 1, seg_pixels = 0;
    // Phase r's pixels [first, second) in segment s.
    std::pair<int64_t, int64_t> seg_range(int64_t r, int64_t s) const;
    // The diff_src pixel segment s starts at (s = segments: the row's end);
    // its pixels are every phase's seg_range.
    int64_t seg_first(int64_t s) const {
        return s >= segments ? geo.in[2] : s * seg_pixels * geo.stride[2];
    }
    DataThreadGrid grid;
    DataScratch scratch;
    double est_cycles = 0;     // cost model, whole problem, one thread

    // The loop nest, starting with "jit:<isa>".
    std::string to_string() const;
    std::string body_text() const;
};

inline int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

// Row blocks: f(kh, oh) for each kh tap of diff_src row ih and the
// diff_dst row oh it reads, ih + pad - kh·dil = oh·SH.
template <class F>
void for_each_row_kh(const DataGeometry& g, int64_t ih, F f) {
    for (int64_t kh = 0; kh < g.k[1]; ++kh) {
        const int64_t t = ih + g.pad[1] - kh * g.dil[1];
        if (t >= 0 && t % g.stride[1] == 0 && t / g.stride[1] < g.out[1]) f(kh, t / g.stride[1]);
    }
}
// Row blocks under a unit H stride: the kh taps valid for diff_src row ih,
// 0 <= ih + pad - kh·dil < OH, a contiguous range [first, second); and the
// end of the run of rows from ih that share them (one kernel call; under
// an H stride each row reads its own diff_dst rows, a call a row).
inline std::pair<int64_t, int64_t> row_kh_range(const DataGeometry& g, int64_t ih) {
    const int64_t t = ih + g.pad[1];
    const int64_t lo = t < g.out[1] ? 0 : (t - g.out[1] + g.dil[1]) / g.dil[1];
    return {lo, std::min(g.k[1], t / g.dil[1] + 1)};
}
inline int64_t row_kh_run_end(const DataGeometry& g, int64_t ih) {
    if (g.stride[1] > 1) return ih + 1;
    const auto kh = row_kh_range(g, ih);
    // Every kh valid: so are the rows up to the last that reads diff_dst row
    // OH - 1 through kh = 0 (the plane's long middle run, found at once).
    if (kh.first == 0 && kh.second == g.k[1]) return std::min(g.in[1], g.out[1] - g.pad[1]);
    int64_t end = ih + 1;
    while (end < g.in[1] && row_kh_range(g, end) == kh) ++end;
    return end;
}

// One W tap along the geometry's W axis for a stride phase: diff_src pixel
// j of the phase reads diff_dst pixel base + j.
struct PhaseTap {
    int64_t kw, base;
};
std::vector<PhaseTap> phase_taps(const DataGeometry& g, int64_t r);
// diff_src pixels of stride phase r along the geometry's W axis.
inline int64_t phase_pixel_count(const DataGeometry& g, int64_t r) {
    return r < g.in[2] ? (g.in[2] - r + g.stride[2] - 1) / g.stride[2] : 0;
}

// Per segment s of the plan, the diff_dst pixels [first, second) of a W
// row that it reads (before 0 or from OW on: zero pads).
std::vector<std::pair<int64_t, int64_t>> seg_windows(const DataPlan& pl);
// The part of a segment's window inside the row, [0, OW).
std::pair<int64_t, int64_t> window_inside(const DataPlan& pl, std::pair<int64_t, int64_t> w);

// The types of the plan's kernels: its compute form and lane group, and
// for row-taps plans entries of `row_taps` taps (a phase's count).
DataKernelTypes data_kernel_types(const DataPlan& pl, int64_t row_taps);

// Whether make_data_plan takes the depthwise path (one channel a group, or
// lane groups: several small groups in a vector).
bool data_depthwise_path(const Problem& p, Isa isa);

// Returns false (with *why) when no JIT plan exists for the problem.
bool make_data_plan(const Problem& p, Isa isa, int threads, DataPlan* plan, std::string* why);

}  // namespace convgrad::detail
