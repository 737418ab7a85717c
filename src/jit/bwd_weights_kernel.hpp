// Weight-gradient kernels: the channel-blocked "gemm" kernel and the
// depthwise kernel, their KernelDesc, runtime arguments and cache.
//
// Element formats the kernels read (4 bytes per channel and pixel in all):
//  - f32: plain f32 (the user's f32 tensors, or bf16 / f16 widened by the
//    chunk stager); multiply-add is vfmadd231ps.
//  - bf16 pairs (desc.dot, avx512_core_bf16): each 32-bit element holds the
//    same channel and pixel of two images, low half the first; vdpbf16ps
//    adds both products into one f32 lane, so one instruction covers two
//    pixels of the reduction. Addressing is identical to f32.
//  - bf16 W pairs (depthwise with desc.dot, avx512_core_bf16): the kernel
//    reads bf16 in place and interleaves two consecutive output pixels of a
//    row (vpermt2w) into one 32-bit element per channel, in diff_dst and
//    src alike (src pixels W stride apart); vdpbf16ps then adds both
//    pixels' products into one f32 lane.
//  - bf16 / f16 read in place (desc.in_dt, depthwise only): each vector is
//    widened to f32 as it is loaded (2 bytes per channel and pixel). The
//    depthwise kernel does one FMA per loaded src vector and is bound by
//    memory, so a conversion per load is cheap there, and staging would only
//    add traffic. bf16 with desc.dot 2 (avx512_core_bf16) loads each value
//    zero-extended to 32 bits instead, one instruction where widening takes
//    two, and multiplies on vdpbf16ps: (x, 0) . (y, 0) = x * y.
//
// One call accumulates one weight tile over a list of output rows (a chunk
// of the pixel reduction) and adds (or stores) the register tile into
// diff_weights once at the end.
//  - gemm: tile = m input channels x n vectors of output channels, one tap.
//    Per pixel: n diff_dst vectors, m broadcast src scalars, m*n FMAs.
//    With desc.kw_win = KW: m input channels x KW taps of one vector of
//    output channels; per src pixel one diff_dst vector, m broadcasts,
//    m*KW FMAs (see kw_win). With desc.kw_lanes turned over (W strides, few output channels):
//    m output channels x KW taps of one vector of input channels; per
//    output pixel KW src vectors, m broadcasts, m*KW FMAs (see kw_lanes).
//  - depthwise (g == IC == OC; or lane groups of G = IC/g == OC/g channels):
//    tile = n vectors of channels x `taps` consecutive kw taps (x G input
//    channels of the group) x `kh` kernel rows (all of KH, or one). Per pixel:
//    n diff_dst vectors, kh*taps*n src vectors: with all kernel rows in one
//    tile, each chunk passes through the core once instead of KH times.
//    With desc.window > 1 (W stride s = 1 or 2, dilation 1): blocks of
//    `window` pixels, whose window*n diff_dst vectors stay in registers
//    while each kernel row's s*(window-1)+taps src vectors are loaded once
//    each.
// Both need channel-contiguous (NXC) activations and an OC-contiguous
// diff_weights row; the executor guarantees that (transposing or permuting
// through scratch otherwise).
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>

#include "jit/isa.hpp"
#include "jit/jit_kernel.hpp"

namespace convgrad::detail {

// One output row of the chunk, restricted to the pixels this tap reads
// inside the src tensor: byte offsets from the call's base pointers.
struct WeightsRow {
    int64_t src_offset = 0;  // bytes from WeightsKernelArgs::src to the row's first pixel
    int64_t dst_offset = 0;  // bytes from WeightsKernelArgs::diff_dst
    int64_t pixels = 0;      // > 0
    // desc.edges (depthwise): the (kernel row, tap) pairs of the tile these
    // pixels read inside src, bit ir * taps + k (taps = the tile's kw taps),
    // plus kPartialTaps when some kernel row has only part of its taps,
    // and then in bits 32-39 the row's tap interval [a, b) as a variant
    // (tiles of up to kEdgeVariantMaxTaps taps; kernels reading f32 ignore
    // it): b for a prefix (a = 0),
    // taps - 1 + a for a suffix (b = taps), 0 for any other (each pair
    // tested). src_offset is the tile's first pair's pixel, inside src or not.
    uint64_t mask = 0;
};
constexpr uint64_t kPartialTaps = uint64_t(1) << 63;
constexpr int kEdgeVariantShift = 32;
constexpr int kEdgeVariantMaxTaps = 8;

// `count` prefetch steps of `step` bytes from `pos` (see
// WeightsKernelArgs::prefetch_walks).
struct PrefetchWalk {
    const char* pos = nullptr;
    int64_t step = 0;
    int64_t count = 0;
};

// Runtime arguments: everything that depends on the shape but not on the
// emitted bytes. Offsets are in bytes. The executor fills every field in
// declaration order (aggregate initialisation): keep the order.
struct WeightsKernelArgs {
    const float* src = nullptr;       // tile's first channel (and tap, for depthwise)
    const float* diff_dst = nullptr;  // tile's first output channel
    float* diff_weights = nullptr;    // tile's first element
    const WeightsRow* rows = nullptr;
    int64_t nrows = 0;
    int64_t src_step = 0;        // bytes between consecutive pixels of a row in src
    int64_t dst_step = 0;        // bytes between consecutive pixels in diff_dst
    int64_t wei_row_stride = 0;  // bytes between tile rows: next ic (gemm), next kw tap (depthwise)
    int64_t wei_kh_stride = 0;   // depthwise with desc.kh > 1: bytes between kernel rows
    int64_t accumulate = 0;      // 0: store the tile, else add it to diff_weights
    // desc.pf_lines consecutive lines per pixel (prefetcht1) from
    // `prefetch`, advancing by prefetch_step:
    // the executor points it at data of the thread's next chunk, so DRAM
    // traffic overlaps the FMAs instead of stalling the next chunk's first
    // tile. Prefetches never fault; step 0 repeats one line.
    const char* prefetch = nullptr;
    int64_t prefetch_step = 0;
    // Depthwise instead: the walks to follow, one after the other (a call
    // covers a whole chunk, whose next-chunk memory is many walks: strided
    // layers prefetch only the src rows the taps read); the last has
    // count > the call's pixels.
    const PrefetchWalk* prefetch_walks = nullptr;
    // desc.stage (gemm): where the pixels this call reads from the user's
    // tensors are copied to, pixel after pixel (m floats / n vectors each,
    // in slots of *_stage_step bytes): the tile's slice of a tile-major
    // chunk, which later calls read.
    float* src_stage = nullptr;
    float* dst_stage = nullptr;
    int64_t src_stage_step = 0;
    int64_t dst_stage_step = 0;
    // bf16 pairs, copying calls (and desc.pair_dst: dst_pair): bytes from
    // an image's src / diff_dst to the same place in its partner image.
    int64_t src_pair = 0;
    int64_t dst_pair = 0;
    // desc.ic_loop: tiles to run (>= 1) and the bytes from one to the next
    // (depthwise: in src and diff_dst alike).
    int64_t ic_tiles = 1;
    int64_t src_tile_step = 0;
    int64_t wei_tile_step = 0;
};

enum class WeightsKernelKind : uint8_t { gemm, depthwise };

// WeightsKernelDesc::stage bits (gemm, AVX-512): the call reads this
// operand from the user's tensor (desc.in_dt; bf16 pairs: the pixel in two
// images) and copies it to args.src_stage / args.dst_stage as it goes, in
// the kernel's 32-bit element format. A copied src pixel is m elements; a
// copied diff_dst pixel is n whole vectors (a tail vector's dead lanes 0);
// either store may write up to one vector past its pixel's m floats / n
// vectors, so a slot is at least that wide or the next slot is written
// later, and a slice needs one vector of slack after its last slot.
enum WeightsStage : uint8_t { kCopySrc = 1, kCopyDst = 2 };

// Everything that changes the emitted bytes, and nothing else: the cache key
// is the raw bytes, so fields are laid out without padding.
struct WeightsKernelDesc {
    uint8_t isa = 0;   // Isa
    uint8_t kind = 0;  // WeightsKernelKind
    uint8_t m = 0;     // gemm: input channels per tile; depthwise: kw taps x lane_group per tile
    uint8_t n = 0;     // vectors of output channels (gemm) / channels (depthwise)
    uint8_t tail = 0;  // live lanes of the last vector, 0 = all
    // 1: bf16 pairs with vdpbf16ps (gemm: of images; depthwise: W pixels);
    // 2: depthwise bf16 one product a lane with vdpbf16ps: each bf16 loaded
    // zero-extended to 32 bits (vpmovzxwd, no shift to f32), so a lane's
    // pair is (x, 0) . (y, 0) = x * y, exact as the FMA's product;
    // 0: f32 FMA (16-bit inputs widened to f32 as they are loaded).
    uint8_t dot = 0;
    // data_type the kernel reads and widens (depthwise; gemm: its stage
    // copies, or diff_dst read in place with folded taps); 0 = f32
    uint8_t in_dt = 0;
    uint8_t kh = 1;     // depthwise, gemm folded taps: kernel rows per tile (src rows row_disp apart)
    uint8_t stage = 0;  // gemm: WeightsStage bits
    // depthwise: pixels per block (1: none). A block of `window` pixels
    // loads each src vector of a kernel row once and uses it for every tap
    // that reads it (pixel u, tap k read the same vector when w_stride * u
    // + k is the same): only for dst_step == tap_disp and src_step == w_stride *
    // tap_disp (W dilation 1), which the executor guarantees.
    uint8_t window = 1;
    // depthwise: channels per group G (1, 2, 4, 8; grouped convolutions with
    // IC/g == OC/g == G): a tile row per (tap, input channel i of the
    // group), m = taps x G rows per kernel row, in diff_weights order
    // (XIO: (kw, i) rows are consecutive); src vectors are permuted so lane
    // c holds the group's channel i (see VecIsa::permute_lane_group).
    uint8_t lane_group = 1;
    // Lines of the next chunk prefetched per pixel (WeightsPlan::pf_lines).
    uint8_t pf_lines = 1;
    // depthwise: 1 = rows carry a WeightsRow::mask, and the kernel runs
    // only the pairs it names (the tile's W and H edges in the call that
    // does its interior); 0 = every pair of every row.
    uint8_t edges = 0;
    // depthwise with window > 1: the W stride (src pixels between output
    // pixels; 0 = 1). Pixel u's tap k reads src vector stride * u + k of
    // the block (taps 1 pixel apart: W dilation 1).
    uint8_t w_stride = 0;
    // depthwise whole rows (f32 or widened 16-bit, G = 1, W dilation 1,
    // the tile's m taps all of KW): row_px > 0 = each WeightsRow is a whole
    // output row of row_px pixels, its W edges compiled in. Pixel u's tap k
    // reads src column c = w_stride * u + k of the row (from the entry's
    // src_offset, tap_disp bytes a column), inside src for c in [row_lo,
    // w_stride * (row_px - 1) + m - row_cut). Straight-line code: each
    // diff_dst vector and each src vector of a kernel row loaded once.
    uint8_t row_px = 0;
    uint8_t row_lo = 0;
    int32_t tap_disp = 0;  // depthwise: src bytes between consecutive kw taps
    int32_t row_disp = 0;  // kh > 1: src bytes between kernel rows
    uint8_t row_cut = 0;   // see row_px
    // gemm: 0, or the kw taps of a window (a W phase's: see
    // WeightsPlan::kw_phases; taps s apart in src, which src_step carries).
    // With kw_win = KW > 0 (32-bit elements: f32, or bf16 image pairs
    // multiplied on vdpbf16ps; n == 1, or 2 on AVX-512 without
    // kw_lanes: each tap's n diff_dst vectors in the window) the tile is m
    // input channels x KW taps, rows (tap k, channel i) at diff_weights + k *
    // wei_kh_stride + i * wei_row_stride, and a row entry walks src pixels
    // q from its src_offset, the tap-0 output pixel t = q + pad at its
    // dst_offset: src pixel q's m broadcasts each feed the FMAs of taps k
    // with t - k in [0, OW), tap k with diff_dst pixel t - k. The KW
    // diff_dst vectors of a window stay in registers (one new load per src
    // pixel), so a pixel costs m + 1 loads for up to m * KW FMAs instead of
    // KW * (m + 1). The row's first kw_head pixels (t < KW - 1: taps k > t
    // left out) and last kw_tail pixels (t >= OW: tail pixel j has taps
    // k > j only, and loads nothing) run as straight-line code, so no
    // product outside the row is formed and nothing outside it is read;
    // kw_pad = min(pad, KW - 1). The entry's pixels count both.
    uint8_t kw_win = 0;
    uint8_t kw_head = 0;
    uint8_t kw_tail = 0;
    uint8_t kw_pad = 0;
    // gemm kw_lanes = 1 (with kw_win = KW, AVX-512, m <= 8): the tile turned
    // over for W strides > 1 or few output channels, input channels in the
    // vector lanes (one vector of a group's channels) and m output channels as rows, every kw
    // tap. A row entry walks output pixels t (diff_dst pixel t at its
    // dst_offset + t * dst_step; src pixel s * t + k - kw_pad of tap k at
    // its src_offset + t * src_step + k * tap_disp, where w_stride = s):
    // per pixel its KW src vectors, then per output channel j one
    // broadcast of diff_dst[t][j] feeding the FMAs of all KW taps. So a
    // pixel costs m + KW loads for m * KW FMAs whatever the stride (with
    // src broadcast, a W stride s leaves each broadcast KW / s taps). The
    // first kw_head pixels run only taps k >= kw_pad - s * t, the last
    // kw_tail only taps k <= kw_last - s * j (tail pixel j), as
    // straight-line code: nothing outside the row is read. The flush
    // transposes: (tap k, channel j, lane i) goes to diff_weights + k *
    // wei_kh_stride + i * wei_row_stride + 4 * j (m floats per input channel).
    // With dot (bf16 image pairs, staged): the same addressing, a src vector
    // and a broadcast each hold both images, and vdpbf16ps adds both products.
    uint8_t kw_lanes = 0;
    uint8_t kw_last = 0;
    // kw_lanes over two groups of 8 channels (m == 8): lanes 0-7 hold group
    // G's input channels, 8-15 group G+1's (consecutive in NXC src), row j
    // broadcasts diff_dst channel j of each group into its half (G's at the
    // entry's diff_dst + 4 j, G+1's 32 bytes on), and input channel i of
    // group G+1 goes to diff_weights + 32 + i * wei_row_stride (XIO: the
    // next group's 8 output channels).
    uint8_t lane_pairs = 0;
    // depthwise whole rows in blocks: row_block = R > 1 consecutive output
    // rows of one image per WeightsRow (its offsets at the block's first
    // output row and src row; pixels R * row_px). Output row j's diff_dst
    // row is j * dst_row_disp bytes on, and it reads src rows h_stride * j
    // + kernel row (H dilation 1, rows row_disp bytes apart), so block src
    // row i is read by every (j, kernel row) with h_stride * j + kh = i.
    // Per src column each of the block's h_stride * (R - 1) + kh src rows
    // is loaded once and feeds all of those (and every tap reading that
    // column), while the R rows' diff_dst vectors of the live columns stay
    // in registers: a src vector is loaded about (R + 2) / R times per
    // chunk instead of kh times, and L1 reuse across rows (which pixel
    // strides of 1 KiB and more defeat through L1 sets) is not needed.
    // desc.edges: WeightsRow::mask bit i = block src row i inside src.
    int32_t dst_row_disp = 0;
    uint8_t row_block = 0;
    uint8_t h_stride = 0;  // row blocks and streamed passes (la_dst): src rows between output rows (0 = 1)
    // gemm, 1: the call runs args.ic_tiles tiles of the same rows one after
    // the other, the next one's src args.src_tile_step bytes on and its
    // diff_weights args.wei_tile_step bytes on (each tile zeroed, run and
    // flushed as a call of its own would be), so a blocked chunk's diff_dst
    // slice is read from L1 by every ic tile of a tap in one call.
    // Depthwise, 1: the same over channel tiles, diff_dst stepping as src
    // does; the prefetch walk runs on from tile to tile.
    uint8_t ic_loop = 0;
    // gemm on AVX-512: 0, or bf16 / f16: every call stores its tile rounded
    // to this type (args.accumulate is ignored), 2-byte elements at
    // args.diff_weights with byte strides as usual. For plans whose tiles
    // take one call each over the whole reduction (one chunk, one slice),
    // so a 16-bit diff_weights needs no f32 copy and no rounding pass.
    uint8_t store_dt = 0;
    // depthwise whole rows (row_px, row_block <= 1), ungated rows: la_dst
    // != 0 = each pixel also prefetches (prefetcht0) its diff_dst vectors'
    // lines la_dst bytes on, and each src column the src row la_src bytes
    // past the row's first kernel row and the min(h_stride, kh) - 1 rows
    // before it (row_disp apart: H dilation 1 there): the rows a streamed
    // pass reads first a few output rows later (WeightsPlan::dw_stream).
    // pf_lines is then 0.
    int32_t la_src = 0;
    int32_t la_dst = 0;
    // gemm bf16 pairs (dot 1, in_dt bf16, AVX-512, no copies): 1 = diff_dst
    // read in place, the user's bf16 of an image (rows' dst_offset) and of
    // its partner args.dst_pair bytes on, paired in registers. Vectors 2j
    // and 2j + 1 (both whole) come from one 64-byte load of each image and
    // vpunpcklwd / vpunpckhwd, so their lanes hold output channels {0-3,
    // 8-11, 16-19, 24-27} and {4-7, ...} of the 32; the flush puts them back
    // in order. A lone vector (odd n, or a tail) pairs by zero-extension.
    // What the staged pairs cost otherwise: a pass writing 4 bytes per
    // channel, pixel and image pair that the kernels then read.
    uint8_t pair_dst = 0;
    // gemm, f32 in place (no copies, windows, lanes or pairs): 0 or 1, or
    // S = 2..4 sets of accumulators, pixel j of a row's blocks of S into
    // set j (a lone pixel into set 0), the sets added into the first before
    // the flush. For tiles of fewer accumulators than the FMA latency
    // times the FMAs issued a cycle (first layers of 1-2 input channels
    // into 16-32 output channels: m3n1, m3n2, m6n1): their chains no longer
    // wait on each other from pixel to pixel.
    uint8_t acc_sets = 0;
    // gemm, folded taps (WeightsPlan::fold_kh): the tile's rows are kd x kh
    // runs of m rows, run (a, b) reading src plane_disp * a + row_disp * b
    // bytes from the call's src (the src rows of kernel rows a and b of
    // the tile: the executor pads src so that every tap of every pixel is
    // inside it), row j of a run 4 j bytes further; run r's rows go to
    // diff_weights + r * wei_kh_stride (+ j * wei_row_stride). So one tile
    // takes all the taps of a 1-channel 3x3x3 layer: per pixel one
    // diff_dst vector for 27 FMAs, instead of nine passes of three.
    uint8_t kd = 1;
    // gemm: 2 or 3 = each pixel step prefetches that many steps of the
    // walk, a line at prefetch + k * prefetch_step for each, then advances
    // past them (pf_lines 1: a strided walk of one line a pixel with more
    // lines than the calls take steps, WeightsPlan::pf_steps); else 0.
    uint8_t pf_steps = 0;
    int32_t plane_disp = 0;
};
static_assert(sizeof(WeightsKernelDesc) == 56, "WeightsKernelDesc must have no padding");

// Rows of a desc's register tile (one accumulator set): m, times its
// kernel rows and depth taps (depthwise kh; gemm folded taps kh x kd) or
// its kw window's taps.
inline int weights_tile_rows(const WeightsKernelDesc& d) {
    return d.m * std::max<int>(1, d.kh) * std::max<int>(1, d.kd) * std::max<int>(1, d.kw_win);
}
// Accumulator registers a desc needs next to its other vector registers.
int weights_kernel_vregs(const WeightsKernelDesc& d);
// "wgemm_avx512_core_m6n4t0" / "wdw_avx2_k3n2t0_d384" / "wgemm_avx512_core_bf16_m13n2t0_dot" /
// "wgemm_avx512_core_m6n4t0_s3"
std::string weights_kernel_name(const WeightsKernelDesc& d);

class WeightsKernel : public JitKernel {
public:
    using Fn = void (*)(const WeightsKernelArgs*);
    using JitKernel::JitKernel;
    void run(const WeightsKernelArgs& a) const { entry<Fn>()(&a); }
};

// The process-wide cache. Builds on a miss; *hit tells which. Throws
// convgrad::error if generation fails (and caches nothing).
std::shared_ptr<const WeightsKernel> get_weights_kernel(const WeightsKernelDesc& d, bool* hit);

// Generators (one per file), used by get_weights_kernel.
std::shared_ptr<const WeightsKernel> make_gemm_weights_kernel(const WeightsKernelDesc& d);
std::shared_ptr<const WeightsKernel> make_dw_weights_kernel(const WeightsKernelDesc& d);

}  // namespace convgrad::detail
