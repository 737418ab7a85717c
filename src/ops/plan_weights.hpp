// The weight-gradient planner: a pure function of Problem + ISA (+ thread
// count for the ThreadGrid only).
//
// Work decomposition. dW[tap][ic][oc] = sum over output pixels P of
// src_tap[p][ic] * diff_dst[p][oc]. P is enumerated as rows (n, od, oh,
// ow-segment) of contiguous output pixels; rows are grouped into chunks
// (cache blocking: a chunk of src + diff_dst fits in L2) and chunks into
// `slices` (the reduction split). A weight tile is one kernel call's output
// (gemm: tap x m ic x n oc vectors; depthwise: kd,kh x taps kw x n channel
// vectors).
//
// 16-bit types: the executor stages each chunk (the src rows it reads and
// its diff_dst rows) into per-thread scratch in the kernels' 32-bit element
// format: bf16 on avx512_core_bf16 as pairs of images for vdpbf16ps (the
// rows then enumerate image pairs: the reduction runs over two pixels per
// element), everything else widened to f32 for the FMA kernels. The sums
// stay f32 until one final rounding to the output type.
//
// Determinism: the chunking and the slice count depend on the Problem only,
// never on the thread count; each (slice, tile) is summed chunk by chunk in
// a fixed order and the slices are added in slice order. Threads only pick
// which (slice, tile) pairs they run, so diff_weights are bitwise identical
// for any thread count.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "jit/bwd_weights_kernel.hpp"
#include "jit/isa.hpp"
#include "ops/problem.hpp"

namespace convgrad::detail {

// The Problem's geometry as the executor walks it: dense NXC activations,
// and for 1x1 / stride-1 / unpadded layers the spatial axes merged into W
// (one long row per image, split into segments).
struct WeightsGeometry : SpatialView {  // merged: axes folded into W
    int64_t mb = 0;  // images, or image pairs with bf16 pairs
    int64_t g = 1, icg = 0, ocg = 0;
    int64_t segment = 0;      // output pixels per row (last one of an image may be shorter)
    int64_t segs_per_row = 1;
    int64_t rows() const { return mb * out[0] * out[1] * segs_per_row; }
};

// Register and channel blocking.
struct WeightsBlocking {
    WeightsKernelKind kind = WeightsKernelKind::gemm;
    int vlen = 16;
    int m = 1;  // gemm: input channels per tile; depthwise: kw taps per tile
    int kh = 1;  // depthwise: kernel rows per tile (KH: each chunk passes once; or 1)
    int n = 1;  // vectors of output channels (gemm) / channels (depthwise) per tile
    int window = 1;  // depthwise, W stride 1 or 2: pixels per block sharing src vectors (WeightsKernelDesc::window)
    bool whole_rows = false;  // depthwise: a call entry per output row, W edges in the kernel (WeightsKernelDesc::row_px)
    int row_block = 1;  // depthwise whole rows: output rows per call entry (WeightsKernelDesc::row_block)
    // depthwise: channels per group G (WeightsKernelDesc::lane_group); a
    // tile's m kw taps are m x G rows of diff_weights
    int lane_group = 1;
    int64_t m_tiles = 1;  // per group (gemm) / per kernel row (depthwise)
    int64_t n_tiles = 1;  // per group (gemm) / over all channels (depthwise)
    int64_t m_block = 1;  // gemm: ic tiles per cache block (== m_tiles: no blocking)
    int m_last = 1;       // rows of the last m tile
    int n_last = 1;       // vectors of the last n tile
    int tail = 0;         // live lanes of the last vector, 0 = all
    int64_t tiles = 0;    // weight tiles in total (the parallel space)
    double cycles_per_pixel = 0;  // cost model estimate for the whole weight space
};

// Cache blocking of the reduction and its split.
struct WeightsReduction {
    int64_t rows = 0, chunk_rows = 0, chunks = 0;
    int64_t slices = 1;  // > 1: per-slice f32 partials + fixed-order sum; slice s sums chunks spread(chunks, slices, s)
    int64_t chunk_bytes = 0;
};

struct WeightsThreadGrid {
    int nthr = 1;           // threads that get work
    int tile_threads = 1;   // split of the tiles
    int slice_threads = 1;  // split of the slices
};

struct WeightsPlan {
    Isa isa = Isa::avx2;            // avx512_core_bf16 only for bf16 pairs (of images, or w_pairs)
    data_type dt = data_type::f32;  // of the user's tensors
    bool pairs = false;             // bf16 pairs of images + vdpbf16ps kernels
    // Depthwise bf16 on avx512_core_bf16: vdpbf16ps over pairs of
    // consecutive pixels of a row, interleaved in the kernels as they load
    // the user's tensors (WeightsKernelDesc::dot on a depthwise kernel).
    bool w_pairs = false;
    WeightsGeometry geo;
    WeightsBlocking blk;
    WeightsReduction red;
    WeightsThreadGrid grid;
    bool transpose_inputs = false;  // NCX: src and diff_dst to NXC scratch first
    // NCX depthwise (not prepad): no whole-tensor transposes; each thread
    // transposes a chunk's rows of its channels into an NXC window (per
    // thread scratch) as the chunk starts, and the kernels read the window.
    bool ncx_windows = false;
    // NCX gemm: no whole-tensor transposes either. Each thread transposes
    // every channel of the rows its chunk reads into NXC windows as the
    // chunk starts (bf16 pairs: those rows of both images of each pair, a
    // window from the first's to the second's), and the kernels and
    // stagers read the windows as the NXC tensors.
    bool ncx_rows = false;
    // AVX2 depthwise (and lane groups) in NXC whose pixels are a multiple
    // of 2 KiB apart (512 or 1024 f32 channels, 1024 16-bit ones): each
    // thread copies a chunk's rows of its channels into windows as the
    // chunk starts, as NCX windows do, and the kernels read the windows. A
    // channel tile's half lines of every pixel fell into one or two L1 sets
    // and missed there at every tap; see window_pad.
    bool nxc_windows = false;
    // Bytes added to each window pixel (NCX or NXC windows): a line where
    // the user's pixels are a multiple of 2 KiB apart (AVX2 only), else 0.
    int64_t window_pad = 0;
    bool windows() const { return ncx_windows || nxc_windows; }
    // The largest chunk's windows: src rows and diff_dst rows (set with the
    // plan, so a cached plan does not walk the chunks again).
    int64_t window_src_rows = 0, window_dst_rows = 0;
    bool direct_weights = true;     // OC-contiguous user layout: kernels write it directly
    // 16-bit diff_weights that the kernels write rounded (WeightsKernelDesc::
    // store_dt): gemm plans on AVX-512 whose tiles each take one call over
    // the whole reduction (one chunk, one slice) into a direct layout. No
    // f32 copy of diff_weights, no rounding pass (a fully connected layer's
    // weights as a convolution: 100+ MiB of fresh f32 pages a call).
    bool store_rounded = false;
    int64_t weights_elems = 0;      // diff_weights elements (target and each partial)

    bool staged = false;  // chunks go through per-thread scratch (always for 16-bit types)
    // Staged 1x1 with a W stride: src rows are staged with only the pixels
    // read (one per output pixel), halving (s = 2) their staging and space.
    bool compress_w = false;
    // Staged rows (not tile-major): bytes between staged pixels, IC (OC)
    // f32 elements or one line more (see staged_pitch in plan_weights.cpp).
    int64_t src_pitch = 0, dst_pitch = 0;
    // Grouped tiles in place: each group's calls prefetch the next group's
    // lines of the chunk (src and diff_dst rows, one line a pixel; after the
    // thread's last group, the next chunk's first), not the next chunk.
    bool group_prefetch = false;
    // ... at this many lines a pixel step (WeightsKernelDesc::pf_steps; 1:
    // one): the walk has more lines than the group's calls take steps.
    int pf_steps = 1;
    // Depthwise whole rows whose chunk calls would be short (dw_stream_ok
    // in plan_weights.cpp): one chunk per slice, so each channel tile's call
    // streams the slice's rows, prefetching (prefetcht0) the rows it reads
    // dw_stream_rows_ahead output rows later; no next-chunk walk.
    bool dw_stream = false;
    // Staged unpadded 1x1 (one src pixel per output pixel) with a pixel
    // stride of tile_major_stride_bytes or more: each chunk is staged tile-major, every ic tile's src as [pixel][m] and every oc
    // tile's diff_dst as [pixel][n vectors], so a kernel call streams two
    // contiguous slices instead of two strided ones (pixel strides of
    // IC*4 / OC*4 bytes put a tile's lines into a few L1 sets).
    bool tile_major = false;
    // Tile-major f32 on AVX-512: no staging pass. A thread's first call on
    // each ic tile (oc tile) of a chunk reads the user's src (diff_dst) and
    // copies it into the tile's slice as it goes (WeightsStage), so the copy
    // overlaps the FMAs and the chunk is read from memory once; later calls
    // read the slices.
    bool stage_in_kernel = false;
    // bf16 pairs on staged rows (not tile-major or blocked, NXC, no kw
    // windows, lanes or folds): only src is staged; the kernels read the
    // user's diff_dst of both images of a pair and pair it in registers
    // (WeightsKernelDesc::pair_dst, kernel variant 1). A chunk holding a
    // lone image (odd minibatch) stages both as before (variant 0).
    bool pair_dst = false;
    // pair_dst plans: desc()'s last argument for the in-register variant.
    static constexpr int kDstInRegs = 1;
    // Blocked staging (AVX2 gemm plans that stage rows; see blocked_ok): each
    // chunk is staged per tile, every ic tile's src as [staged pixel][m]
    // (the staged rows of src_pitch = m*4 bytes a pixel) and every oc tile's
    // diff_dst as [chunk pixel][n vectors] (dst_pitch = n*vlen*4), so each
    // call streams two contiguous slices, the diff_dst one small enough to
    // stay in L1 (Cost::blocked_l1_budget sizes the chunk) across the ic
    // tiles of a tap, which one call runs back to back (desc.ic_loop). Row
    // staging keeps the user's pixel stride (1 KiB and more): a call's
    // lines then crowd a few L1 sets and its pages the L1 TLB, and every
    // call streams both operands from L2, 2 lines per 12 FMAs on AVX2.
    bool blocked = false;
    // One call runs consecutive ic tiles of a tap (desc.ic_loop): blocked
    // chunks, and tile-major ones staged by a copy pass (AVX2), whose ic
    // tiles of a tap read the same rows from slices a fixed step apart, and
    // rows (rows_ic_runs).
    bool ic_runs() const {
        if (blocked || (tile_major && !stage_in_kernel && !store_rounded)) return true;
        return rows_ic_runs() || dw_channel_runs();
    }
    // Depthwise: a kernel row block's and kw tile's consecutive channel
    // tiles read the same rows, their src, diff_dst and diff_weights a
    // tile's channels apart: one call runs them (the last channel tile,
    // on a kernel of its own, apart). A call of one tile was a few dozen
    // to a few hundred pixels on small planes of many channels, and the
    // host's set-up of each (its tile, row list and prefetch walk) took
    // 12-15 % of such a layer (see PERFORMANCE.md).
    bool dw_channel_runs() const { return blk.kind == WeightsKernelKind::depthwise && blk.n_tiles > 1; }
    // Gemm rows, staged or in place (NXC), read by a tap's consecutive ic
    // tiles m channels apart with the same row list: one call runs them
    // too. Not kw windows or lanes, folded kw taps, NCX rows or lane pairs,
    // whose tiles lay their channels out otherwise.
    bool rows_ic_runs() const {
        return blk.kind == WeightsKernelKind::gemm && !tile_major && !blocked && !store_rounded && kw_phases == 0 &&
               !kw_lanes && fold_kw <= 1 && !ncx_rows && !lane_pairs;
    }
    // stage_in_kernel: the calls that copy nothing (every ic tile's slice
    // after a thread's first oc tile of the chunk) run an ic block's filled
    // tiles as one call too, so the host sets up a call per oc tile and ic
    // block, not one per (oc, ic) tile.
    bool ic_runs_after_copies() const { return stage_in_kernel && !store_rounded; }
    // Whether the kernels of a stage (WeightsStage bits) loop over ic tiles.
    bool ic_loop(int stage) const { return ic_runs() || (ic_runs_after_copies() && stage == 0); }
    // kw taps folded into the tile rows (gemm, one group, few input
    // channels, no W dilation): 1, or KW. In NXC src a pixel's KW taps read
    // KW*IC consecutive elements, and XIO diff_weights hold rows (kw, ic)
    // consecutively too, so a tile takes m of those KW*IC rows and the taps
    // loop only over (kd, kh): a 3-channel first layer gets tiles of up to
    // 32 rows instead of 3. f32 in place: output pixels where some tap falls
    // in the W padding read a zero-padded copy of their src run (the
    // edges); staged (16-bit): the staged src rows include the W padding.
    int64_t fold_kw = 1;
    // Folded taps (in place, with prepad): fold_kh = KH (then fold_kd 1 or
    // KD) puts the kernel rows (and depth taps) of the folded kw taps into
    // the tile rows too, a run of IC x KW rows per (kd, kh), so a tile of
    // one input channel takes every tap of a 3x3 / 3x3x3 kernel (1-3
    // channels: Cost::fold_taps_max_ic): per pixel one diff_dst load feeds
    // 9 or 27 FMAs x n vectors, and each chunk is walked once instead of
    // KD x KH times. The runs'
    // src rows are compile-time displacements from the tile's first
    // (WeightsKernelDesc::kd), which needs every tap inside src: src is
    // padded (prepad), so rows have no W edges either. m_tiles is 1.
    // 16-bit types (not bf16 pairs) are not staged then: see src_widened.
    int64_t fold_kh = 1, fold_kd = 1;
    // gemm kw windows (WeightsKernelDesc::kw_win). One vector of output
    // channels per group (groups of up to 16 channels, 8 on AVX2; on
    // AVX-512 two vectors, up to 32 channels, for layers without groups at
    // unit W stride), W dilation 1, 32-bit elements: a tile holds the kw
    // taps of one W phase
    // (taps k = phase + s * j at W stride s; every tap at stride 1) of m
    // input channels, and a row entry walks the phase's src pixels of its
    // input row (s apart), each broadcast feeding one FMA per tap of the
    // phase, each diff_dst vector loaded once. kw_phases: 0 (no window) or
    // s, the phase tiles replacing the kw tiles; kw_phase[r] the geometry
    // of phase r (see KwPhase).
    struct KwPhase {
        int64_t taps = 0;    // ceil((KW - r) / s)
        int64_t first = 0;   // the row's first src pixel of the phase (iw)
        int64_t pad = 0;     // its tap-0 output pixel
        int64_t row_px = 0;  // src pixels a row entry walks (0: none, the phase's weights are 0)
        int64_t head = 0;    // of which the first ones lack taps (output pixels below 0) ...
        int64_t tail = 0;    // ... and the last ones (output pixels past OW - 1)
        // Its channel tiles: m_tiles of m input channels, the last m_last
        // (phases of fewer taps fit more channels; blk.m_tiles is the most
        // of any phase, the rest of a phase's tiles are empty).
        int64_t m = 0, m_last = 0, m_tiles = 0;
    };
    static constexpr int kMaxKwPhases = 4;
    int64_t kw_phases = 0;
    std::array<KwPhase, kMaxKwPhases> kw_phase{};
    // gemm kw lanes (WeightsKernelDesc::kw_lanes; W strides > 1 on AVX-512,
    // instead of phases, and any W stride for few output channels, see
    // few_oc_lanes): tiles of m output channels x every kw tap over one
    // vector of a group's input channels (blk.n_tiles of them), each diff_dst broadcast
    // feeding KW FMAs. A row entry walks the row_px output pixels from
    // `first` (those with a tap inside src); the first `head` lack taps
    // below k = pad - s * t (t from first), the last `tail` above k = last
    // - s * j (tail pixel j). blk.m / m_tiles count output channels then.
    struct KwLanes {
        int64_t first = 0, row_px = 0, head = 0, tail = 0, pad = 0, last = 0;
    };
    bool kw_lanes = false;
    KwLanes lanes{};
    // kw lanes over pairs of groups of 8 channels (WeightsKernelDesc::
    // lane_pairs): a tile's vector holds groups 2q and 2q + 1, blk.m = 8;
    // an odd group count leaves the last group alone (8 lanes, its own
    // kernel). Tiles count group pairs then.
    bool lane_pairs = false;
    // Depthwise whose taps mostly reach into the padding (large kernels on
    // small planes): the executor first copies src into a zero-padded NXC
    // scratch, and this plan is for that unpadded problem (padded_problem),
    // so every pixel runs every tap, ungated, instead of the pairs its
    // edge mask names (ConvNeXt 7x7 at 7x7: most pixels are edges).
    bool prepad = false;
    // Output pixels [0, left) and [right, OW) of a W row are its edges (some
    // kw tap reads outside src); a run of q of them reads (q - 1) * stride +
    // the dilated kernel width src pixels: left_w, right_w.
    struct WEdges {
        int64_t left, right, left_w, right_w;
    };
    WEdges w_edges() const;
    // Rows of the gemm tile space per group: input channels (x KW folded).
    int64_t gemm_rows() const { return geo.icg * fold_kw * fold_kh * fold_kd; }
    // Kernel rows (and depth taps) folded into the gemm tiles; the tap
    // tiles per group are then (KD / fold_kd) x (KH / fold_kh) x (KW / fold_kw).
    bool folded_taps() const { return fold_kh * fold_kd > 1; }
    // 16-bit folded taps: the pad pass widens src to f32 (1-3 channels),
    // the kernels widen diff_dst as they load it (WeightsKernelDesc::in_dt).
    bool src_widened() const { return prepad && folded_taps() && dt != data_type::f32; }
    // Chunk pixels (tile_major): rows x segment, the staged slices' length.
    int64_t chunk_pixels() const { return red.chunk_rows * geo.segment; }
    // Bytes of one tile's slice of a tile-major chunk, `w` floats a pixel:
    // the chunk's pixels, one vector of slack (a staging store may write a
    // vector whole past the last pixel), 64-byte aligned.
    int64_t tile_slice_bytes(int64_t w) const { return (chunk_pixels() * w * 4 + 64 + 63) / 64 * 64; }
    // The output is 16-bit: the kernels sum into f32 scratch, rounded at the end.
    bool rounded() const { return dt != data_type::f32; }
    // Staged rows cut into segments (not merged: plain staged rows, see
    // choose_reduction): a chunk stages, per input row, only the window of
    // pixels its segment's taps read.
    bool staged_segments() const { return staged && !geo.merged && geo.segs_per_row > 1; }
    // Bytes per channel and pixel of the activations the kernels read: 4
    // (f32, staged f32 or bf16 pairs), or 2 (depthwise on 16-bit in place).
    int elem_bytes() const { return staged || dt == data_type::f32 ? 4 : 2; }

    // Lines of the next chunk the kernels prefetch per pixel they process
    // (prefetcht1; see plan_prefetch_lines in plan_weights.cpp).
    int pf_lines = 1;
    // The kernel desc for a tile of `m` rows (x `kh` kernel rows) and `n`
    // vectors, `tail` lanes; `stage`: WeightsStage bits, or with kw windows
    // the W phase.
    WeightsKernelDesc desc(int m, int n, int tail, int64_t tap_disp, int kh = 1, int64_t row_disp = 0,
                           int stage = 0) const;
    // One line, then the loop nest.
    std::string to_string() const;
};

// Named constants of the cost model (see plan_weights.cpp).
struct WeightsCostModel {
    static constexpr double fma_per_cycle = 2;
    static constexpr double loads_per_cycle = 2;
    // Whole-vector loads (depthwise src): a depthwise tile of 7 kernel rows
    // x 4 taps, one load per FMA, ran at 43 % of the 1-core FMA peak with
    // its data in L1 (about 0.9 loads a cycle; a probe calling the kernel
    // on one L1-resident row, 16 channels).
    static constexpr double vec_loads_per_cycle = 1;
    // vdpbf16ps and vpermt2w issue to one pipe, one a cycle together (AMD
    // Zen 4: a 1:1 mix of independent ones ran at 1 a cycle; each alone 1).
    static constexpr double dot_shuffle_per_cycle = 1;
    static constexpr int64_t dw_window_min_kw = 5;  // depthwise pixel windows from this kernel width
    static constexpr int64_t dw_window_max_stride = 2;  // ... and up to this W stride
    static constexpr int64_t dw_window_min_kw_16bit = 3;  // ... when 16-bit loads are widened in the kernel
    static constexpr int64_t dw_window_3tap_max_ow = 28;  // ... and in f32 on rows this short (dw_f32_short_windows)
    // Depthwise whole rows (WeightsKernelDesc::row_px): code per output row
    // (rows of 32 pixels or more loop over their interior columns at W
    // stride 1), so rows up to this long.
    static constexpr int64_t dw_row_max_px = 64;
    static constexpr int64_t dw_block_max_h_stride = 1;  // row blocks (WeightsKernelDesc::row_block) up to this H stride
    // ... and AVX2 f32 on pixel strides of a multiple of dw_block_avx2_pitch (choose_row_block)
    static constexpr int64_t dw_block_avx2_pitch = 512;
    static constexpr int64_t dw_block_max_h_stride_avx2 = 2;
    // ... and up to this many FMAs in a block's body (R rows x row pixels x
    // taps x vectors): about 85 ns of generation per instruction written
    // out, so a cold op stayed within 1 ms (MobileNet-sized 512 channels at
    // 56x64 with R = 7: 4032 FMAs, 1.0-1.3 ms). Rows of 32 pixels or more now
    // loop over their interior columns, so the bound is loose there; raising
    // it changes plans and is not measured.
    static constexpr int64_t dw_block_max_fmas = 2048;
    // bf16 from DRAM on short rows: kernels up to this wide widen instead of pairing W pixels (w_pairs).
    static constexpr int64_t dw_pairs_dram_max_kw = 5;
    static constexpr int64_t dw_pairs_max_kw = 5;  // bf16 W pairs of kernels of several rows: W stride 1, this wide
    static constexpr double fma_latency = 4;
    // AVX2 counts it 6: with 16 registers its tiles are small, and one of 8
    // accumulators (4 chains in flight a cycle at most) leaves the FMA ports
    // idle next to its loads; 12 keep them busy (2 threads, ResNet-50 res3a
    // 3x3: m2n4 116, m6n2 160-165 GFLOP/s; AVX2 bwd_w over the 20 layers
    // +11 % geomean, +68 % res3a_branch2b, +46 % res3a_branch2c). AVX-512
    // tiles are large already (counted 6 there, res4/res5 measured 0.87-0.90).
    static constexpr double fma_latency_avx2 = 6;
    static constexpr double dot_latency = 6;  // vdpbf16ps
    static constexpr double instr_per_cycle = 6;
    static constexpr double l2_bytes_per_cycle = 32;
    static constexpr double call_cycles = 60;       // kernel call + argument set-up
    static constexpr double l1_budget = 32 << 10;    // bytes of one tile's chunk data (L1d is 48 KiB)
    // ... and of fold-kw chunks whose kernel rows overlap (fold_kw_halo),
    // which copy their src rows' halo once a chunk. Against l1_budget (AMD
    // Zen 5, 2 threads, f32, min of 3): I3D's 7x7x7 s2 stem 1.33x,
    // R(2+1)D's 1x7x7 1.15-1.17x; over 5 rounds ESPCN 5x5 from 1 channel
    // 1.07x, YOLO 3x3 1.10x, EfficientNet-B0 / MobileNetV2 3x3 s2 stems
    // 1.09-1.10x, U-Net's first layer 1.08x, Inception-v3 1.07x, ResNet-50
    // conv1 1.06x, MobileNet v1 1.04x, YOLOv5 6x6 s2 1.01x. Kernels equal
    // to their stride (ViT, Swin, ConvNeXt patch embeddings: 0.92-0.93x),
    // 1D layers (0.83-0.89x) and rows shorter than fold_halo_min_px (a
    // 20-image 8-pixel dilated layer on one thread, one 45 KiB chunk:
    // 0.80x) keep l1_budget. AVX2 (min of 5): the 2D layers 1.00-1.13x
    // (YOLO 1.13, U-Net 1.07, ResNet-50 conv1 / ESPCN 1.06), the 3D stems
    // 0.98-1.01x.
    static constexpr double fold_halo_budget = 128 << 10;
    static constexpr int64_t fold_halo_min_px = 32;
    // Folded taps (WeightsPlan::fold_kh) up to this many input channels:
    // in f32, RGB 3x3 layers keep their fold-kw tiles of several vectors
    // (Intel Xeon, 2 threads, min of 5, folded against them: VGG-16
    // conv1_1 and 3x3 s2 stems of 32 channels 0.84-0.88x, YOLO 3x3 1.05x);
    // 16-bit ones fold (they stop staging: min of 7, f16 / bf16, VGG-16
    // conv1_1 1.27 / 1.26x, YOLO 1.16x, a 3x3x3 RGB video layer 1.11 /
    // 1.12x, stems 0.99-1.04x).
    static constexpr int64_t fold_taps_max_ic = 2;
    static constexpr int64_t fold_taps_max_ic_16bit = 3;
    static constexpr double dw_l2_budget = 256 << 10;  // depthwise: src + diff_dst bytes per chunk
    // NCX windows (WeightsPlan::ncx_windows) take chunks of whole images
    // when a channel's src plane is at most this many bytes. MobileNetV2 /
    // EfficientNet-B0 depthwise weight gradients, NCX, mb 32, 2 threads,
    // against chunks of rows (AMD Zen 5, tools/sweep_ab.py --rounds=3 --min):
    // 7x7-28x28 planes 1.08-1.63x (f32 and bf16); on 56x56 and larger
    // planes (runs of 2 KiB or more a channel) 0.82-1.26x, noise: rows.
    static constexpr int64_t ncx_window_plane_bytes = 4 << 10;
    // Staged chunks: bytes per chunk. Staged data is in L2 (unlike the
    // direct path's user memory), so chunks are L2-sized; but every chunk
    // adds each tile into the f32 target once, and weights beyond
    // l2_weights_bytes make that a read-modify-write from L3 or DRAM costing
    // about as much as 1/32 of a pixel per weight: chunks of at least
    // flush_chunk_pixels kernel pixels keep it below ~10 %.
    static constexpr double stage_budget = 512 << 10;
    // A staged chunk and the next chunk's user rows, which the kernels
    // prefetch while they read it, within L2. Binds where the walk reads
    // more than is staged: 16-bit 1x1 at W stride 2 (every other src pixel
    // staged, whole rows walked). ResNet-50 res3a_branch2a bf16 (256 -> 128,
    // s2) 12 -> 8 rows a chunk: 1.11x at mb 32, 1.00x at mb 8 (2 threads,
    // min of 5); its stager had waited on src lines that a walk of 860 KB
    // next to 840 KiB staged had pushed out of L2.
    static constexpr double stage_walk_budget = 1 << 20;
    // bf16 pairs pair diff_dst in registers (WeightsPlan::pair_dst) on
    // chunks of at most this many bytes (as staged): see plan_weights_with.
    static constexpr int64_t pair_dst_max_chunk = 1 << 20;
    // ... and, for tiles of one vector, where a diff_dst vector is read at
    // most this many times (taps x ic tiles).
    static constexpr int64_t pair_dst_max_lone_reads = 5;
    static constexpr double l2_weights_bytes = 256 << 10;
    // gemm: the src of one chunk for one block of input channels, which
    // every oc tile of a thread then reads, stays within this (L2) budget.
    static constexpr double src_block_bytes = 512 << 10;
    static constexpr double flush_chunk_pixels = 384;
    static constexpr double stage_budget_max = 8 << 20;
    static constexpr int64_t lane_in_place_max_w = 256;  // see lane_tiles_in_place
    static constexpr int64_t few_oc_max = 8;              // output channels a group for kw lanes (few_oc_lanes)
    static constexpr int64_t group_prefetch_min_pitch = 256;  // bytes a pixel, see group_prefetch_steps
    static constexpr int group_walk_max_steps = 3;  // walk lines a kernel pixel step (a scaled index reaches 2)
    // Blocked chunks: bytes of one oc tile's diff_dst slice plus one ic
    // tile's src slice (a fraction of L1d: the flushes and the next slice
    // come through too).
    static constexpr double blocked_l1_budget = 16 << 10;
    static constexpr int64_t blocked_min_ic_tiles = 8;  // per group and tap (see blocked_ok)
    static constexpr int64_t blocked_min_tiles = 128;
    static constexpr int64_t blocked_wide_min_ic_tiles = 6;  // ... or this many, with OC/g of at least
    static constexpr int64_t blocked_wide_oc = 32;
    static constexpr int64_t tiles_for_balance = 32;  // below this, split the reduction
    static constexpr int64_t max_slices = 16;
    static constexpr int64_t slice_multiple = 2;  // 12 slices split evenly over 2, 3, 4 and 6 threads
    static constexpr double stream_intensity = 64;  // flop/byte below which slices split DRAM traffic
    static constexpr int64_t stream_slices = 8;
    static constexpr int64_t staged_slices = 2;  // the machine's core count; never the run's thread count
    static constexpr double staged_partial_ratio = 8;  // data bytes per weight byte above which they pay
    static constexpr int64_t max_partial_bytes = int64_t(64) << 20;
    // f32 1x1 layers (AVX-512, no groups) read in place rather than staged
    // with at most this many input channels, or with both at most
    // in_place_1x1_max_ic and in_place_1x1_max_oc (see stage_f32).
    static constexpr int64_t in_place_1x1_narrow_ic = 48;
    static constexpr int64_t in_place_1x1_max_ic = 160;
    static constexpr int64_t in_place_1x1_max_oc = 192;
    static constexpr int64_t tile_major_stride_bytes = 4096;  // staged pixel stride from which 1x1 goes tile-major
    // Depthwise pre-pads src for bf16 W pairs with kernels this wide, when
    // the share of interior pixels is in [min, max) (see prepad_src).
    static constexpr int64_t dw_prepad_min_kw = 7;
    static constexpr double dw_prepad_interior_min = 0.25;
    static constexpr double dw_prepad_interior_max = 0.95;
    static constexpr int64_t segment_min_chunks = 4;  // in-place gemm rows cut when this many chunks long
    // Depthwise rows in NCX windows: segments whose channel runs are at
    // least this long (choose_reduction).
    static constexpr int64_t ncx_segment_run_bytes = 1024;
    // Streamed depthwise passes (WeightsPlan::dw_stream): where a chunk's
    // calls would take fewer output pixels than this, and how many output
    // rows ahead each pass prefetches.
    static constexpr int64_t dw_stream_max_call_px = 48;
    static constexpr int64_t dw_stream_rows_ahead = 2;
    static constexpr double dw_stream_max_l3_share = 0.6;  // ... src and diff_dst within this share of L3
    // bf16 depthwise tiles multiply on vdpbf16ps (WeightsKernelDesc::dot 2)
    // from this many accumulators: it takes 6 cycles to the FMA's 4 at the
    // same 2 a cycle (AMD Zen 5), so fewer chains wait on it.
    static constexpr int64_t zero_ext_min_accumulators = 12;
    static constexpr double prefetch_ahead = 1.25;  // next chunk prefetched within 1/1.25 of this one
    static constexpr int max_prefetch_lines = 16;
};

// A streamed depthwise pass (WeightsPlan::dw_stream): the bytes from a
// row's first src row (of a tile of kh kernel rows) to the last src row
// that the output row dw_stream_rows_ahead rows later reads, and from the
// row's diff_dst row to that row's (WeightsKernelDesc::la_src / la_dst).
inline std::array<int64_t, 2> dw_stream_ahead(const WeightsPlan& plan, int64_t kh) {
    const WeightsGeometry& g = plan.geo;
    const int64_t ahead = WeightsCostModel::dw_stream_rows_ahead, pixel = g.g * g.icg * plan.elem_bytes();
    return {(ahead * g.stride[1] + (kh - 1) * g.dil[1]) * g.in[2] * pixel, ahead * g.out[2] * pixel};
}

// Output pixels [lo, hi) of a W row that tap kw reads inside src.
std::array<int64_t, 2> valid_ow(const WeightsGeometry& g, int64_t kw);
// Depthwise whole rows: a row's src columns c (iw = c - pad, all KW taps)
// inside src are [lo, columns - cut) (WeightsKernelDesc::row_lo / row_cut).
struct WholeRowEdges {
    int64_t lo, cut;
};
WholeRowEdges whole_row_edges(const WeightsGeometry& g);
// The accumulator sets WeightsPlan::desc gives a kernel (WeightsKernelDesc::acc_sets).
int gemm_acc_sets(WeightsKernelDesc d);
// Depthwise row blocks of r output rows: the src rows a block reads (H
// dilation 1; WeightsKernelDesc::row_block).
inline int64_t row_block_src_rows(const WeightsGeometry& g, int64_t r) { return g.stride[1] * (r - 1) + g.k[1]; }
WeightsPlan plan_weights(const Problem& p, Isa isa, int nthreads);
// The problem with its pads made part of src: in + pads, no padding (the
// same output, taps and weights).
Problem padded_problem(const Problem& p);
WeightsThreadGrid plan_thread_grid(int64_t tiles, int64_t slices, int nthreads);
// [begin, end) of part `i` of `n` of `total` items, balanced.
std::array<int64_t, 2> balance(int64_t total, int64_t n, int64_t i);

}  // namespace convgrad::detail
