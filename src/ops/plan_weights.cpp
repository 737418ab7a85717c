// The weight-gradient planner. Cost model (cycles, one core):
//  - a kernel tile of r rows x v vectors costs, per pixel, the largest of
//      FMA throughput      r*v / fma_per_cycle
//      load throughput     loads / loads_per_cycle   (gemm: v + r; depthwise: v + r*v)
//      FMA latency         fma_latency (every accumulator chain gets one FMA per pixel)
//      front end           instructions / instr_per_cycle
//    plus, once per chunk, the flush (1.5 * r*v) and the call overhead;
//  - blocking candidates: every (r, v) that fits the vector registers
//    (weights_kernel_vregs); the cheapest total over the weight space wins,
//    ties to the larger tile;
//  - chunks (gemm): as many pixels as keep the chunk's diff_dst slice of one tile
//    (n vectors per pixel) plus the src lines it broadcasts from in
//    l1_budget: a thread runs every tile of its range over one chunk, oc
//    tile outermost, so that slice is read from L1 by all taps and ic tiles;
//  - ic blocks (gemm): a thread walks its tiles input-channel block by block
//    (g, ic block, oc tile, tap, ic tile), each block's src slice of the
//    chunk within src_block_bytes: wide layers (IC 512-2048) otherwise read
//    the chunk's whole src from L3 once per oc tile (ResNet-50 res4/res5 1x1,
//    2 threads: +4 to +30 %). Only the order of tiles changes, never a sum;
//  - slices: 1 when there are tiles_for_balance tiles or more (threads split
//    the tiles: no reduction at all), else enough slices to reach that many
//    (slice, tile) pairs; stream_slices when the layer does fewer than
//    stream_intensity flop per byte of src + diff_dst (threads then split
//    the DRAM traffic too); at most max_slices and max_partial_bytes; 1
//    for problems that always run on one thread (runs_serial).
#include "ops/plan_weights.hpp"

#include <algorithm>
#include <array>
#include <climits>
#include <cmath>
#include <sstream>
#include <stdexcept>
#include <string>

#include "ops/executor.hpp"

namespace convgrad::detail {
namespace {

using Cost = WeightsCostModel;

// The depthwise kernel serves depthwise layers and groups of G = 2, 4, 8
// channels narrower than a vector (lane groups: grouped convolutions such as
// ResNeXt's, whose groups would fill a quarter or half of a gemm tile's
// vectors). Where the gemm kernel measured faster (2 threads, A/B medians of
// 2-3), groups of 8 keep it:
//  - AVX2, where a group of 8 fills the vector: ResNeXt-50 conv3 (28x28) 113
//    vs 62 GFLOP/s, its s2 variant 84 vs 52;
//  - bf16 with vdpbf16ps pairs (the lane groups widen to f32): ResNeXt-50
//    conv3 188 vs 156, s2 136 vs 86, RegNetY-400MF 0.44-0.68x;
//  - output rows narrower than 14 pixels (W edges and short pixel windows):
//    RegNetY-400MF stage 4 at 7x7, f32 0.61-0.80x, f16 0.76-0.93x.
// f32 / f16 groups of 8 on wider planes gain 0.78-1.54x (ResNeXt-50 conv3
// 1.36-1.54x, RegNetY stages 1-3 0.78-1.38x, geomean about 1.15x); groups of
// 2 and 4 fill at most a quarter of a gemm vector (ResNeXt-50 conv2, G 4:
// f32 37 -> 136, bf16 pairs 61 -> 148). Groups of 8 of up to 3 taps a row
// at W dilation 1 on AVX-512 go to kw lanes over pairs of groups
// (lane_pairs_ok), so the lane groups of 8 serve wider kernels, dilated
// rows and 1-tap rows there.
bool lane_pairs_ok(const Problem& p, Isa isa);
bool few_oc_lanes(const Problem& p, Isa isa);

bool is_depthwise(const Problem& p, Isa isa) {
    const int64_t vlen = isa >= Isa::avx512_core ? 16 : 8, gs = p.icg;
    if (p.g < 2 || p.icg != p.ocg || lane_pairs_ok(p, isa)) return false;
    if (gs == 1) return true;
    if (gs != 2 && gs != 4 && gs != 8) return false;
    if (gs < 8) return true;
    const bool pairs = p.dt == data_type::bf16 && isa >= Isa::avx512_core_bf16;
    return gs < vlen && !pairs && p.out[2] >= 14;
}

// Merges H (and then D) into W when they carry no tap, stride or padding.
WeightsGeometry make_geometry(const Problem& p, bool pairs) {
    WeightsGeometry g;
    g.mb = pairs ? (p.mb + 1) / 2 : p.mb;
    g.g = p.g;
    g.icg = p.icg;
    g.ocg = p.ocg;
    static_cast<SpatialView&>(g) = fold_plain_axes(p, 2);
    g.segment = g.out[2];  // merged rows are cut to the chunk size later
    return g;
}

// kw taps folded into the tile rows (see WeightsPlan::fold_kw) where the
// input channels alone give short tiles: one group (a group's channels are
// not contiguous across taps), no W dilation, and a (kw, ic)-contiguous
// target (XIO, or the XIO scratch of other weight layouts). f32 reads the
// user's tensors in place (W edges from zero-padded copies); 16-bit types
// stage their src rows with the W padding as zeros. ResNet-50 conv1 (ic 3,
// 7x7 s2) then runs m11n2 tiles over 21 rows instead of m3n4 over 3
// (AVX-512 f32, 2 threads: +27 %; 3x3 s2, 4x4 s4, 16x16 s16 stems and a
// 1-channel 3x3 layer: +48..+76 %).
bool foldable(const Problem& p) { return p.g == 1 && p.k[2] > 1 && p.dil[2] == 1 && p.icg < 16; }

// The user's diff_weights hold a kw tap's ic rows consecutively, kw after
// kw (XIO), as fold_kw tiles and lane-group tiles write them.
bool kw_ic_rows_consecutive(const Problem& p) { return p.wei_str.k[2] == p.icg * p.wei_str.i; }

bool fold_kw(const Problem& p, const WeightsPlan& plan) {
    if (plan.blk.kind != WeightsKernelKind::gemm || !foldable(p)) return false;
    return !plan.direct_weights || kw_ic_rows_consecutive(p);
}

// Folded taps (WeightsPlan::fold_kh): foldable kw taps and kernel rows to
// fold, on src padded by the executor first (IC of at most 2, 3 in 16
// bits: Cost::fold_taps_max_ic; the padded copy is small next to
// diff_dst); f32, f16, and bf16 where it is not paired on vdpbf16ps
// (WeightsPlan::src_widened). A direct diff_weights must hold the (kd, kh,
// kw, ic) rows of a tile evenly apart (XIO; other layouts go through an
// XIO scratch). Intel Xeon (family 6 model 207), 2 threads, f32,
// tools/sweep_ab.py --rounds=5 --min against fold-kw plans: AVX-512 3D
// layers of 1-2 channels 1.35-2.27x (a 3D U-Net's 32^3 input 2.27x, 64^3
// 2.09x, nnU-Net-like 48^3 1.84x), 2D 1.05-1.91x (ESPCN 5x5 1.25x, U-Net's
// 1-channel input 1.22x). AVX2 (mb 4; 16 registers: 3D tiles of one depth
// tap's 9 rows) 3D 1.12-1.43x, one tiny layer 0.92x, but 2D 0.82-1.18x
// (1 -> 16 at 64x512 0.91x, 256x256 0.93x): AVX2 folds 3D kernels only.
// `pair_images`: bf16 on avx512_core_bf16 keeps its image pairs (see
// plan_weights for where folded widened taps win over them).
bool fold_taps_ok(const Problem& p, Isa isa, bool pair_images = true) {
    const bool even_rows = kw_ic_rows_consecutive(p) && p.wei_str.k[1] == p.k[2] * p.wei_str.k[2] &&
                           p.wei_str.k[0] == p.k[1] * p.wei_str.k[1];
    const bool pairs = pair_images && p.dt == data_type::bf16 && isa >= Isa::avx512_core_bf16;
    const int64_t max_ic = p.dt == data_type::f32 ? Cost::fold_taps_max_ic : Cost::fold_taps_max_ic_16bit;
    if (pairs || (isa < Isa::avx512_core && p.k[0] == 1) || !foldable(p) || p.icg > max_ic || p.k[1] == 1 ||
        (p.wei_str.o == 1 && !even_rows))
        return false;
    // The padded copy within twice the activations the op reads anyway
    // (pads far wider than the kernel under strides well above it keep the
    // unpadded plan instead of a scratch of mostly zeros).
    const Problem q = padded_problem(p);
    return q.in_sp() * q.ic() <= 2 * (p.in_sp() * p.ic() + p.out_sp() * p.oc());
}

// gemm kw windows (WeightsPlan::kw_phases): the kernel's m * T * n
// accumulators (T = ceil(KW / s), phase 0's taps; n vectors of output
// channels, two on AVX-512), T * n diff_dst vectors and two broadcast
// registers in the vector file, for m of at least 1.
int64_t kw_window_vecs(const Problem& p, Isa isa) { return div_up(p.ocg, isa >= Isa::avx512_core ? 16 : 8); }
int64_t kw_window_max_m(const Problem& p, Isa isa, int64_t taps) {
    const int64_t vlen = isa >= Isa::avx512_core ? 16 : 8, regs = isa >= Isa::avx512_core ? 32 : 16;
    const int64_t mask = isa < Isa::avx512_core && p.ocg % vlen ? 1 : 0, n = kw_window_vecs(p, isa);
    return (regs - mask - taps * n - 2) / (taps * n);
}
int64_t kw_window_max_m(const Problem& p, Isa isa) {
    return kw_window_max_m(p, isa, div_up(p.k[2], std::max<int64_t>(1, p.stride[2])));
}

// Phase r of a W stride s: taps k = r + s j; src pixel iw = s i + r - pad
// pairs tap j with output pixel i - j, a unit-stride window over the
// phase's pixels i (tap-0 output pixel i) from i0, the first inside src.
// Its row: the pixels some tap reads for an output pixel in [0, OW), the
// first `head` lacking taps below output pixel 0 (i < T - 1), the last
// `tail` past OW - 1 (i >= OW).
WeightsPlan::KwPhase kw_phase(const WeightsGeometry& g, int64_t r) {
    const int64_t s = g.stride[2], kw = g.k[2], pad = g.pad[2];
    WeightsPlan::KwPhase f;
    f.taps = div_up(kw - r, s);
    f.pad = pad >= r ? div_up(pad - r, s) : 0;
    f.first = s * f.pad + r - pad;
    const int64_t in = f.first < g.in[2] ? (g.in[2] - 1 - f.first) / s + 1 : 0;
    f.row_px = std::max<int64_t>(0, std::min(in, g.out[2] + f.taps - 1 - f.pad));
    f.head = std::min(f.row_px, std::max<int64_t>(0, f.taps - 1 - f.pad));
    f.tail = std::max<int64_t>(0, f.row_px - 1 + f.pad - (g.out[2] - 1));
    return f;
}

// Where kw windows replace the per-tap tiles: one vector of output
// channels per group (the tiles' n = 1: each FMA of a per-tap tile needs
// its own broadcast), W stride up to the kernel width (and
// kMaxKwPhases), W dilation 1, not folded, 32-bit elements (f32, 16-bit
// widened by the stager, or bf16 image pairs at unit W stride), and W
// edges the kernel compiles in: per phase its first pixel's tap-0 output
// pixel inside the row and OW >= T - 1, so that no pixel lacks taps at
// both ends (head and tail apart). Each phase splits the channels into
// its own tiles (a phase of fewer taps fits more). Against per-tap tiles,
// AMD Zen 5, 2 threads, min
// of 5, every changed layer of the shape sets, f32 and f16, unit stride:
// 1.15-2.27x (geomean 1.44x; ResNeXt-50 conv4 1.17x, RegNetX s3 / s4 1.28 /
// 1.33x, RegNetY s4 1.54x); AVX2 8-channel groups 1.09-1.85x. W stride 2,
// three runs each: 16 channels a group even in f32 (ResNeXt-50 conv4 s2
// 0.89-1.14x, RegNetX s1-s4 s2 0.95-1.09x) and 0.99-1.27x in f16, 8
// channels (RegNetY s4 s2) 1.17-1.20x; with one tile size for all phases
// the 16-channel groups had measured 0.91-0.98x. The staging rule stays:
// staging the in-place ones measured 0.93x. bf16 image pairs (vdpbf16ps on
// the staged pairs) against their per-tap tiles, AMD Zen 4, 2 threads, mb
// 8, min of 5, every plan of the shape files that moved, weight and
// ConvTranspose weight gradients: HRNet-W18 branch1 1.40 / 1.44x, 3D
// grouped 1.03-1.21x, the benchdnn basic 2D / 3D cases 0.92-1.62x,
// GoogLeNet v1 / v3, DenseNet-121, RegNetX-400MF and ResNeXt-50 conv4 /
// conv5 0.98-1.09x, 32-channel 1D layers of 2-120 us 0.87-0.96x (0.97-1.11x
// at mb 1); at W stride 2 0.87-0.93x (RegNetX-400MF, ResNeXt-50 conv4):
// not there.
bool kw_window_ok(const Problem& p, const WeightsPlan& plan) {
    const int64_t vlen = plan.isa >= Isa::avx512_core ? 16 : 8;
    const WeightsGeometry& g = plan.geo;
    if (plan.blk.kind != WeightsKernelKind::gemm || (plan.pairs && g.stride[2] != 1) || plan.fold_kw > 1 ||
        g.k[2] < 2 || g.merged)
        return false;
    // Two vectors of output channels (17-32) on AVX-512 at unit W stride.
    // Against their m x n tiles (m11 x n2: 0.59 loads an FMA; m4 x n2
    // windows over 3 taps: 0.25), Intel Xeon, 2
    // threads, each file's minibatch, min of 3: the 23 f32 weight gradients
    // of the shape files this changes 0.96-1.53x, geomean 1.17x (GoogLeNet v1
    // 5x5 1.15-1.23x, GoogLeNet v3 conv_1_1 1.19x, HRNet-W18 branch1 1.46x,
    // DenseNet-121 growth 3x3 1.16x; the losses 3-8 us 1D layers), the 16
    // ConvTranspose ones 1.00-1.5x (1.15x), bf16 / f16 0.99-1.4x (1.19x). W
    // strides keep their plain tiles (phases of one or two taps: 0.92-1.08x;
    // ResNeXt-50 conv5 3x3 s2 0.94x). Grouped layers, against their blocked
    // staged tiles (same host and command, min of 5): ResNeXt-50 conv5 3x3
    // (32 a group at 7x7) f32 1.00x / f16 1.31x, as ConvTranspose 1.05x /
    // 1.29x; 32-, 24- and 20-channel groups at 7x7-56x56 (3x3, one 5x5)
    // 1.09-1.24x in f32 and f16.
    const int64_t max_vecs = plan.isa >= Isa::avx512_core && g.stride[2] == 1 ? 2 : 1;
    if (g.stride[2] > std::min<int64_t>(g.k[2], WeightsPlan::kMaxKwPhases) || g.dil[2] != 1 ||
        p.ocg > max_vecs * vlen || kw_window_max_m(p, plan.isa) < 1)
        return false;
    // AVX2 under a W stride: 0.92-1.14x (RegNetY-400MF, ResNeXt-50 conv3
    // s2, 8 channels a group: phase 0 in tiles of 4), even overall: not taken.
    if (g.stride[2] > 1 && plan.isa < Isa::avx512_core) return false;
    for (int64_t r = 0; r < g.stride[2]; ++r) {
        const WeightsPlan::KwPhase f = kw_phase(g, r);
        if (f.row_px > 0 && (f.pad >= g.out[2] || g.out[2] < f.taps - 1)) return false;
    }
    return true;
}

// kw lanes (WeightsPlan::kw_lanes): output pixel t reads src pixels s t -
// pad + k; the row's pixels are those with some tap inside src, its head
// those with a tap left of it, its tail those with a tap right of it.
int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
WeightsPlan::KwLanes kw_lanes_geometry(const WeightsGeometry& g) {
    const int64_t s = g.stride[2], kw = g.k[2], pad = g.pad[2], in = g.in[2];
    WeightsPlan::KwLanes f;
    const int64_t lo = std::max<int64_t>(0, -floor_div(kw - 1 - pad, s));  // s t - pad + KW - 1 >= 0
    const int64_t hi = std::min(g.out[2] - 1, floor_div(in - 1 + pad, s));  // s t - pad <= IW - 1
    if (hi < lo) return f;
    f.first = lo;
    f.row_px = hi - lo + 1;
    f.head = std::min(hi + 1, std::max(lo, -floor_div(-pad, s))) - lo;  // s t < pad
    const int64_t tail_first = std::max(lo, floor_div(in - kw + pad, s) + 1);  // s t - pad + KW > IW
    f.tail = std::max<int64_t>(0, hi + 1 - tail_first);
    f.pad = f.head > 0 ? pad - s * lo : 0;
    f.last = f.tail > 0 ? in - 1 + pad - s * tail_first : 0;
    return f;
}
// m output channels x KW taps of accumulators, KW src vectors and two
// broadcast registers in 32 zmm; the flush transposes up to 8 channels.
int64_t kw_lanes_max_m(int64_t kw) { return std::min<int64_t>(8, (32 - kw - 2) / kw); }
// The W geometry kw lanes take: rows not merged, W strides of min_stride
// or more, W dilation 1, 2 taps or more, edges of at most KW pixels each
// side that never meet in a pixel.
bool kw_lanes_w_ok(const WeightsGeometry& g, int64_t min_stride = 2) {
    // (The stride is a byte of the kernel desc.)
    if (g.merged || g.k[2] < 2 || g.stride[2] < min_stride || g.stride[2] > UINT8_MAX || g.dil[2] != 1) return false;
    const WeightsPlan::KwLanes f = kw_lanes_geometry(g);
    return f.row_px > 0 && f.head + f.tail <= f.row_px && f.head <= g.k[2] && f.tail <= g.k[2];
}

// Where kw lanes replace the W phases (or the per-tap tiles): AVX-512, one
// vector of input channels and up to one of output channels a group (the
// kw windows' groups), 32-bit elements, their W geometry. With src
// broadcast, a W phase of one tap (3x3 s2: tap 1) pays a broadcast per
// FMA; turned over, each broadcast feeds KW FMAs at any stride. Against
// the W phases, AMD Zen 5, 2 threads, min of 5, every layer of the shape
// sets that changed, f32 / f16: RegNetX-400MF s1-s4 s2 1.16-1.30 / 1.04-1.25x,
// RegNetY-400MF s4 s2 (8 channels a group, half the lanes) 1.28 / 1.13x,
// ResNeXt-50 conv4 s2 1.09 / 1.10x; one 16 -> 16 group at 14x14 s2 on one
// core (L2-resident): 130 -> 141 GFLOP/s. bf16 image pairs take kw lanes
// only for few output channels (few_oc_lanes) and over group pairs
// (lane_pairs_ok): groups of 16 under a W stride ran 0.90-1.12x their
// paired tiles (RegNetX-400MF s1-s4 s2, ResNeXt-50 conv4 s2, weight and
// ConvTranspose weight gradients, AMD Zen 4, 2 threads, mb 32, min of 5).
bool kw_lanes_ok(const Problem& p, const WeightsPlan& plan) {
    const bool few_oc = few_oc_lanes(p, plan.isa);  // any width of input channels, any W stride
    const bool any_stride = few_oc || lane_pairs_ok(p, plan.isa);
    if (plan.isa < Isa::avx512_core || plan.blk.kind != WeightsKernelKind::gemm || plan.fold_kw > 1 ||
        (plan.pairs && !any_stride))
        return false;
    if (!few_oc && (p.icg > 16 || p.ocg > 16)) return false;
    return kw_lanes_max_m(p.k[2]) >= 1 && kw_lanes_w_ok(plan.geo, any_stride ? 1 : 2);
}

// Few output channels a group over a vector or more of input channels
// (heads into 1-4 maps: segmentation, depth, super-resolution into RGB):
// output channels in the lanes would leave three quarters of them or more
// idle, so kw lanes take every stride there, a vector of input channels a
// tile (blk.n_tiles of them). 9-15 output channels too where the input
// channels fill 16 lanes at least kSwapLaneGain better (super-resolution
// heads before a pixel shuffle: ESPCN 32 -> 12 3x3 at 64x64, against two
// vectors of output channels a quarter idle, AMD Zen 4, 2 threads, mb 32,
// tools/sweep_ab.py --rounds=5 --min: f32 1.30x, f16 1.32x, bf16 on
// avx512_core 1.32x). Groups of 16 (a full vector of output channels) keep
// their tiles (kw lanes 0.64-1.00x). bf16 on avx512_core_bf16 keeps its
// image pairs on the kw lanes (WeightsKernelDesc::kw_lanes); against the
// widened kw lanes of 1-3 output channels, AMD Zen 4, 2 threads, mb 8,
// min of 5, every plan of the shape files that moved (GoogLeNet v1 conv1,
// AlexNet and Mask R-CNN first layers, DCGAN's RGB layer as convolutions
// into 3 maps) 1.35-1.89x; against its paired gemm tiles of 9-12 output
// channels (which widened kw lanes had run at 0.69x), mb 32: ESPCN conv3
// (32 -> 12) 1.31x, 32 -> 12 / 48 -> 10 / 64 -> 9 3x3 1.32 / 1.55 / 1.72x.
bool few_oc_lanes(const Problem& p, Isa isa) {
    if (isa < Isa::avx512_core || p.icg < 16) return false;
    if (p.ocg <= Cost::few_oc_max) return true;
    return p.ocg < 16 && lane_fill(p.icg, 16) - lane_fill(p.ocg, 16) >= kSwapLaneGain;
}

// kw lanes over pairs of groups of 8 channels (WeightsPlan::lane_pairs):
// AVX-512, kernels of up to 3 taps (tiles of all 8
// output channels), the kw lanes W geometry at any W stride. These leave
// the depthwise lane groups of 8 (against them, AMD Zen 5, 2 threads, min
// of 5, f32 / f16: RegNetY-400MF s1-s4 s2 1.42-2.00 / 1.31-1.58x, ResNeXt-50
// conv3 s2 1.09 / 1.23x; kw lanes of one group, half the lanes idle, had
// measured 0.89-1.13x there). At W stride 1 too: the lane groups permute
// a src vector per 2-3 FMAs (the FMA port's on Intel) and leave 7x7 rows
// to one group's kw windows (half the lanes idle); against them, Intel
// Xeon (KVM), 2 threads, min of 5, mb 32, every plan of the shape files
// that moved (RegNetY-400MF s2-s4, ResNeXt-50 conv3, the 1D / 3D
// channel-block-8 cases), weight and ConvTranspose weight gradients:
// f32 1.06-1.43x, f16 1.18-1.61x (geomean 1.29x over 24 cells), bf16
// without the BF16 ISA 1.17-1.47x. Not measured on Zen 5. bf16 on
// avx512_core_bf16 keeps its image pairs there (vdpbf16ps on the staged
// pairs, WeightsKernelDesc::kw_lanes): against gemm tiles of one group's
// 8 output channels (half the lanes idle), AMD Zen 4, 2 threads, mb 32,
// min of 5, weight and ConvTranspose weight gradients of every plan of
// the shape files that moved: RegNetY-400MF s1-s4 1.25-2.80x, ResNeXt-50
// conv3 1.33-1.67x, 3D channel-block-8 1.35 / 1.47x, the 1D one (6 us)
// 0.87 / 0.93x; widened f32 kw lanes there had run 0.69-1.50x (geomean
// 0.92x).
bool lane_pairs_ok(const Problem& p, Isa isa) {
    if (isa < Isa::avx512_core) return false;
    return p.g >= 2 && p.icg == 8 && p.ocg == 8 && kw_lanes_max_m(p.k[2]) >= 8 &&
           kw_lanes_w_ok(make_geometry(p, false), 1);
}

// f32 is staged (copied) where measured faster than reading the user's
// tensors in place: L2-sized chunks amortise the flush and the call set-up,
// and the kernels then read L2 instead of DRAM. Not for depthwise (memory
// bound: the copy is pure extra traffic; even where pixels a multiple of
// 1 KiB apart share L1 sets, per-thread copies with a line of padding a
// pixel ran 0.57-0.89x, MobileNet v1 at mb 1 and 16), nor on AVX-512 for
// 1x1 layers with few output channels, whose L1-sized chunks keep a tile's diff_dst
// slice in L1 across all ic tiles (ResNet-50 256->64: 8 % slower staged),
// nor for narrow 1x1 layers (few input channels, or few of both: below),
// nor for a first layer's few input channels on AVX-512 (7x7 s2 ic 3: 10 %
// slower), nor where they fold their kw taps into the tile rows, which
// needs the user's tensors (fold_kw; first layers on AVX2, against staged
// without folding: 7x7 s2 +3 %, 3x3 s2 +37 %, 16x16 s16 +19 %, ic 1 3x3 +70 %).
//
// Grouped layers with a spatial kernel on AVX-512 read in place too (1x1
// layers keep their tile-major staging), unless a row's pixels crowd an L1
// set: staging copies every channel of a chunk while a tile reads
// ICg / OCg of them, and the staged rows keep the user's pixel stride. A/B
// on AMD Zen 4, min of 3, 2 threads: RegNetX-400MF strided layers
// 1.06-1.37x, groups of 16 with 256-1024 channels at 7x7 and 14x14
// 1.05-1.34x, ResNeXt-50 conv4 / conv5 1.06-1.29x; cases that moved between
// 0.88 and 1.13x in 2-thread runs measured 0.99-1.28x on one thread (min of
// 7). The 14 pixels of a 28 -> 14 row of 512 channels, 4 KiB apart in src,
// share one set and ran 0.81x in place: they stay staged. So do all
// grouped layers with pixels a multiple of 2 KiB apart in src or diff_dst:
// in place, all of a call's rows crowd a few sets; staged, their rows are
// spread a line apart (staged_pitch). AMD Zen 5, against the previous rule,
// min of 5-7, f32: ResNeXt-50 conv5 (1024 channels) 3x3 s2 1.20-1.22x, 3x3
// 1.01-1.02x (2 threads), conv4 (512) 1.01-1.08x.
//
// Grouped layers whose tiles are kw windows or kw lanes (AVX-512, groups
// of up to 16 channels) read in place at any pixel stride, on rows of up to
// Cost::lane_in_place_max_w pixels: a tile reads one line of a pixel and
// its neighbours' taps at once, so few lines are live however the pixels
// share sets, and the staging pass costs more than the conflicts. Against
// staging (AMD Zen 5, min of 5, 2 / 1 threads, f32): ResNeXt-50 conv4 3x3
// (2 KiB pitch) 1.17 / 1.20x, conv3 3x3 s2 (lane pairs) 1.14 / 1.24x, conv4
// 3x3 s2 1.01 / 0.92x, 1.15-1.18x with group_prefetch_steps. Long 1D rows
// keep their staged segments (8 groups of 16 at 30000 samples in place:
// 0.36x).
bool lane_tiles_in_place(const Problem& p, const WeightsPlan& plan) {
    return plan.isa >= Isa::avx512_core && p.g > 1 && p.icg <= 16 && p.ocg <= 16 &&
           p.out[2] <= Cost::lane_in_place_max_w && (kw_window_ok(p, plan) || kw_lanes_ok(p, plan));
}

bool stage_f32(const Problem& p, const WeightsPlan& plan) {
    if (plan.blk.kind == WeightsKernelKind::depthwise) return false;
    if (foldable(p)) return false;
    if (plan.isa == Isa::avx2) return true;
    if (lane_tiles_in_place(p, plan)) return false;
    const int64_t ow = p.out[2];
    if (p.g > 1 && p.k_sp() > 1 && (p.ic() * 4 % 2048 == 0 || p.oc() * 4 % 2048 == 0)) return true;
    if (p.g > 1 && p.k_sp() > 1 && lines_per_l1_set(ow, p.stride[2] * p.ic() * 4) <= kL1LinesPerSet &&
        lines_per_l1_set(ow, p.oc() * 4) <= kL1LinesPerSet)
        return false;
    if (p.ic() < 16) return false;
    if (p.k_sp() > 1) return true;
    if (p.oc() <= 64) return false;
    // Narrow 1x1 layers: the copy costs (IC + OC) per pixel against IC x OC
    // FMAs, so staging costs most where either side is small, and their
    // data (little compute per byte) streams from DRAM while the chunk's
    // first call copies it instead of under all of its tiles' FMAs.
    // In place against staged, AMD Zen 5, 2 threads, mb 32 unless said, min
    // of 3: 16 -> 96 at 112x112 (MobileNetV2, EfficientNet-B0) 1.42-1.80x,
    // 1.61x at mb 8; 24 -> 144 at 56x56 1.52x; 32 -> 256 1.34x; 48 -> 256
    // 1.13x; 40 -> 240 at 28x28 1.09x; 24 -> 512 at 14x14 1.09x, 32 -> 512
    // at 28x28 0.99x; 64 -> 128 at 56x56 1.08-1.39x, 64 -> 160 1.22x, 64 ->
    // 192 1.08x; 96 -> 128 1.10x; 128 -> 128 1.10-1.15x; 128 -> 192 at
    // 28x28 1.13x; 160 -> 160 1.15x; stride 2: 24 -> 96 2.33x, 32 -> 128
    // 1.96x, 64 -> 128 1.41x, 128 -> 192 1.00x. Staging stays where it
    // measured faster: 64 -> 256 0.89-0.94x (ResNet-50 res2a_branch1), 128 ->
    // 256 0.85-0.88x, 64 -> 384 at 14x14 0.68x, 96 -> 384 0.92x, 80 -> 480
    // 0.84x, 192 -> 192 0.98x, 256 -> 128 0.96x, and the wider layers.
    if (p.g == 1 && (p.ic() <= Cost::in_place_1x1_narrow_ic ||
                     (p.ic() <= Cost::in_place_1x1_max_ic && p.oc() <= Cost::in_place_1x1_max_oc)))
        return false;
    return true;
}

// Staged rows: the pixel pitch of `bytes` (f32 channels), one line more
// where a walk's pixels would all fall into a few L1 sets. A tile reads a
// line or two of every pixel of the chunk, tap after tap, for each of the
// ic (oc) tiles that share the rows; lines that share a set evict each
// other (and the lines prefetched ahead of the walk) before they are
// reread.
// - Grouped layers: pitches that are multiples of 512 bytes (L1: 8 of 64
//   sets; L2 at a 4 KiB pitch: 16 of 1024). The kernel alone, on one
//   L2-resident call of 19 rows x 14 pixels (AMD Zen 5, f32, m16n1, the
//   2 KiB-pitch ResNeXt-50 conv4 3x3 s2): 117 -> 162 GFLOP/s; m11n2 at a
//   4 KiB pitch (conv5 s2): 139 -> 199.
// - Layers without groups, where a walk steps a multiple of 4 KiB from one
//   output pixel to the next (`pixels_a_step` staged pixels: the W stride
//   for src, unless compressed): then every pixel of the walk lands in one
//   set of a 64-set L1 (12 ways on AMD Zen 5 and on the Intel Xeon below: a
//   dozen pixels' lines, the ones prefetched ahead included). At 1-2 KiB
//   steps a walk's lines fill 2-4 sets, and a dense tile reads fewer
//   pixels' lines per FMA than a grouped one: those stay dense (ResNet-50
//   3x3 and 16-bit 1x1, 1-2 KiB: 0.94-1.03x on AMD Zen 5; U-Net enc4_b and
//   ResNet-50 res4a / res5a_branch2b 0.95-1.00x on the Intel Xeon). Intel
//   Xeon (family 6 model 207), 2 threads, f32, min of 3, against dense
//   rows: U-Net dec4_a (1024 -> 512 3x3) 1.17x, bottleneck_a (512 -> 1024)
//   1.20x, 2048 -> 512 3x3 at 7x7 2.12x, wav2vec 2.0 feat1 / feat6 (512
//   channels, s2) 1.09 / 1.12x; ConvTranspose U-Net up4 2.0x, HiFi-GAN up8
//   1.29x (min of 5); PERFORMANCE.md.
int64_t staged_pitch(const WeightsPlan& plan, const Problem& p, int64_t bytes, int64_t pixels_a_step) {
    if (!plan.staged || plan.tile_major || plan.fold_kw != 1) return bytes;
    const bool spread = p.g > 1 ? bytes % 512 == 0 : bytes * pixels_a_step % 4096 == 0;
    return bytes + (spread ? 64 : 0);
}

// Blocked staging (WeightsPlan::blocked) for AVX2 gemm plans that stage
// rows: not 1x1 layers going tile-major or folded kw taps (their staged
// rows are laid out otherwise), nor kw windows or lanes (tiles of their
// own shape). Strided 1x1 rows (compress_w) keep a pixel per output pixel
// in their slices: AMD Zen 3, 2 threads, mb 32, min of 5, against their
// row staging: ResNet-50 res3a_branch2a 1.15x, res3a_branch1 1.41x,
// res4a_branch2a 1.42x. AVX-512 keeps row staging: its tiles
// read half the lines per FMA and stay at 88-95 % of peak. Its chunks are
// L1-sized, so each costs its staging and calls for fewer pixels: it pays
// where a tap has many ic tiles to share its diff_dst slice, and many
// tiles in all. AMD Zen 4, 2 threads, mb 8, min of 3, against row
// staging over 310 network layers: 8+ ic tiles 1.05-1.39x geomean per
// bucket (ResNet-50 3x3 at mb 32: 1.17-1.72x), 2-7 ic tiles 0.57-0.94x,
// 1x1 layers of fewer than 128 tiles 0.71-1.08x.
// On a core whose L2 feeds L1 at half Zen 4's rate (AMD Zen 3, a host
// with AVX2 only: the AVX2 path's real users), a row-staged tile's two
// lines a pixel (6 of 16 src floats, 16 diff_dst) bound the FMAs, and
// blocking pays wider: those 74 layers' blocked plans ran 1.32x row
// staging (geomean; 1.00-1.92x, 2 threads, min of 5), and layers of 6-7
// ic tiles or fewer than 128 tiles, with OC/g >= 32, 1.08-1.49x (12
// layers, geomean 1.20x, min of 7: GoogLeNet-v3 1x1 and 3x3, ResNeXt-50
// conv5 3x3, MobileNet 1x1, WaveNet / TCN 1D, ResNet-50 res2a_branch2a
// 1.18x). Narrower OC lost there (EfficientNet-B0 32 -> 16 0.68x, U-Net's
// 64 -> 2 head 0.54x), as did 3-5 ic tiles (16 -> 96 0.91x).
// AVX-512 f32 grouped layers (groups wider than the depthwise lanes) take
// blocked staging too: row staging keeps every group's channels of a pixel
// together, so a group's tile reads 2-4 lines of each pixel a whole
// staged pixel apart (4 KiB + 64 for ResNeXt-50 conv5's 1024 channels),
// and those lines leave L1 between the group's tap and ic-tile calls.
// Intel Xeon (2 MiB L2), 2 threads, each file's minibatch, min of 5, the 8
// grouped layers of the shape files whose f32 plans stage rows, two runs:
// 1.02-1.33x (ResNeXt-50 conv5_g3x3 / _s2 1.25-1.27 / 1.16-1.17x, long 1D
// g8_k3 1.29-1.33x, wav2vec 2.0 pos_conv 1.17-1.21x). 16-bit inputs keep
// row staging, which widens them in one pass (blocked: 0.84-1.22x, two
// layers lost 8-16 %).
bool blocked_ok(const WeightsPlan& plan) {
    const WeightsBlocking& b = plan.blk;
    const bool shares = (b.m_tiles >= Cost::blocked_min_ic_tiles && b.tiles >= Cost::blocked_min_tiles) ||
                        (b.m_tiles >= Cost::blocked_wide_min_ic_tiles && plan.geo.ocg >= Cost::blocked_wide_oc);
    const bool avx512_groups = plan.isa >= Isa::avx512_core && plan.geo.g > 1 && plan.dt == data_type::f32;
    return (avx512_groups || (plan.isa == Isa::avx2 && shares)) && plan.staged && b.kind == WeightsKernelKind::gemm &&
           !plan.tile_major && plan.fold_kw == 1 && plan.kw_phases == 0 && !plan.kw_lanes && !plan.pairs;
}

double tile_cycles(double fmas, double loads, double instrs, double latency) {
    return std::max({fmas / Cost::fma_per_cycle, loads / Cost::loads_per_cycle, latency,
                     instrs / Cost::instr_per_cycle});
}

// Output pixels per chunk for tiles of v vectors (see the header comment).
// Depthwise has no channel reduction to keep in L1; each call runs over a
// whole chunk of every channel instead, so chunks are L2-sized to amortise
// the per-call and per-edge work.
// Src pixels of whole input rows per output pixel: the src rows a long run
// of output rows adds (min(stride, kernel) per row and axis) times their
// width ratio.
double src_row_pixels_per_output_pixel(const WeightsGeometry& g) {
    const double src_rows = double(std::min(g.stride[0], g.k[0]) * std::min(g.stride[1], g.k[1]));
    return src_rows * (double(g.in[2]) / double(g.out[2]));
}

// Staged src pixels per output pixel: those rows' pixels, or one pixel per
// output pixel when strided 1x1 rows are compressed.
double src_pixels_per_output_pixel(const WeightsPlan& plan) {
    const WeightsGeometry& g = plan.geo;
    if (!plan.compress_w) return src_row_pixels_per_output_pixel(g);
    return double(std::min(g.stride[0], g.k[0]) * std::min(g.stride[1], g.k[1]));
}

// fold-kw plans whose kernel rows overlap from one output row to
// the next (KH > SH or KD > SD): each chunk copies its src rows with their
// halo (the W edges zero-padded), so longer chunks copy fewer rows per
// output row (see Cost::fold_halo_budget). Rows of fold_halo_min_px pixels
// or more: on short rows the L1 budget wins.
bool fold_kw_halo(const WeightsPlan& plan) {
    const WeightsGeometry& g = plan.geo;
    return plan.fold_kw > 1 && g.out[2] >= Cost::fold_halo_min_px &&
           (g.k[0] > g.stride[0] || g.k[1] > g.stride[1]);
}

double chunk_pixels(const WeightsPlan& plan, int v) {
    if (plan.blk.kind == WeightsKernelKind::depthwise) {
        const double px_bytes = 4.0 * plan.geo.g * plan.geo.icg * (1 + plan.geo.stride[2]);
        return std::max(16.0, Cost::dw_l2_budget / px_bytes);
    }
    if (plan.blocked) {  // one oc tile's diff_dst and one ic tile's src per pixel
        const double px_bytes = 4.0 * (plan.blk.n * plan.blk.vlen + plan.blk.m * src_pixels_per_output_pixel(plan));
        return std::max(16.0, Cost::blocked_l1_budget / px_bytes);
    }
    if (plan.staged) {
        // Staged bytes per output pixel: its diff_dst and its share of src.
        const WeightsGeometry& g = plan.geo;
        const double px_bytes = 4.0 * g.g * (g.ocg + g.icg * src_pixels_per_output_pixel(plan));
        const double weights_bytes = 4.0 * double(plan.weights_elems);
        double pixels = Cost::stage_budget / px_bytes;
        if (!plan.stage_in_kernel) {
            // While the kernels read this chunk's staged bytes, the walk
            // (prefetch_chunk) brings the next chunk's user rows into L2:
            // whole input rows, the pixels a W stride skips included.
            const double walk_px = double(dtype_size(plan.dt)) * (plan.pairs ? 2 : 1) * g.g *
                                   (g.ocg + g.icg * src_row_pixels_per_output_pixel(g));
            pixels = std::min(pixels, Cost::stage_walk_budget / (px_bytes + walk_px));
        }
        if (weights_bytes > Cost::l2_weights_bytes)
            pixels = std::min(std::max(pixels, Cost::flush_chunk_pixels), Cost::stage_budget_max / px_bytes);
        return std::max(16.0, pixels);
    }
    const double vbytes = 4.0 * plan.blk.vlen * v;
    return std::max(16.0, (fold_kw_halo(plan) ? Cost::fold_halo_budget : Cost::l1_budget) / (vbytes + 64.0));
}

// Cycles per output pixel of r x v tiles, amortising a flush over `pixels`.
// (The search leaves accumulator sets out: they take spare registers in
// the tile it picks, see gemm_acc_sets.)
double gemm_tile(int r, int v, double pixels, double latency) {
    const double px = tile_cycles(r * v, v + r, r * v + r + v + 4, latency);
    return px + (1.5 * r * v + Cost::call_cycles) / pixels;
}

// Depthwise: m taps x kh kernel rows x v vectors (x G input channels of a
// lane group, each src vector loaded and permuted once per channel); a
// window of w pixels at W stride s loads each kernel row's s(w - 1) + m
// src vectors once (per pixel: (s(w - 1) + m) / w of them, against m).
double dw_tile(int m, int kh, int v, int w, bool windows, double pixels, double latency, int group, bool w_pairs,
               int64_t stride) {
    const int r = m * kh * group;
    if (w_pairs) {  // per pixel: half a vdpbf16ps per (tap, vector), and the vpermt2w that pair the loads
        // a block of w pairs builds P_j = (s_j, s_{j+stride}) for each j = 2 * stride * u + k
        // (the j in [0, 2 * stride * (w - 1) + m) with j % (2 * stride) < m)
        const int64_t period = 2 * stride, count = period * (w - 1) + m;
        const int64_t built = count / period * std::min<int64_t>(m, period) + std::min<int64_t>(count % period, m);
        const double src_loads = windows ? kh * v * double(built + stride) / (2 * w) : double(r * v);
        const double perms = (windows ? kh * v * double(built) / (2 * w) : src_loads / 2) + v / 2.0,
                     dots = r * v / 2.0;
        const double px = std::max({(dots + perms) / Cost::dot_shuffle_per_cycle, (v + src_loads) / Cost::loads_per_cycle,
                                    latency, (dots + perms + v + src_loads + 4) / Cost::instr_per_cycle});
        return px + (1.5 * r * v + Cost::call_cycles) / pixels;
    }
    const double src_loads = kh * v * double(stride * (w - 1) + m) / w * group;
    const double px = windows ? std::max(tile_cycles(r * v, v, r * v + v + src_loads + 4, latency),
                                         (v + src_loads) / Cost::vec_loads_per_cycle)
                              // small kernels: memory bound, loads counted at the scalar rate
                              : tile_cycles(r * v, v + r * v, r * v + v + 4, latency);
    return px + (1.5 * r * v + Cost::call_cycles) / pixels;
}

// A row of `total` split in tiles of `size`: {full tiles, last tile's size
// or 0}.
std::array<int64_t, 2> tile_split(int64_t total, int64_t size) { return {total / size, total % size}; }

// Sum over the tiles of one row split as `split` (tile_split): full tiles
// of `size` plus the last.
template <typename F>
double over_tiles(std::array<int64_t, 2> split, int size, F&& cost) {
    return split[0] * cost(size) + (split[1] ? cost(static_cast<int>(split[1])) : 0.0);
}

// The widest tile of m rows (kh kernel rows) and at most max_n vectors
// whose kernel fits the vector registers (0: none). Tiles differ in their
// desc only by n, and more vectors only add registers.
int widest_fitting_n(const WeightsPlan& plan, int m, int tail, int kh, int max_n) {
    // A depthwise tile's taps x lane group are one byte of the desc (and
    // past 255 far more registers than there are).
    if (plan.blk.kind == WeightsKernelKind::depthwise && m * plan.blk.lane_group > UINT8_MAX) return 0;
    // (The variant of the most registers: copies in the kernels, or diff_dst paired in registers.)
    const int variant = plan.stage_in_kernel ? kCopySrc | kCopyDst
                        : plan.pair_dst      ? WeightsPlan::kDstInRegs
                                             : 0;
    WeightsKernelDesc d = plan.desc(m, 1, tail, 0, kh, 0, variant);
    d.acc_sets = 0;  // (sets take spare registers only)
    const int regs = plan.isa >= Isa::avx512_core ? 32 : 16;
    int n = 0;
    for (; n < max_n; ++n) {
        d.n = static_cast<uint8_t>(n + 1);
        if (weights_kernel_vregs(d) > regs) break;
    }
    return n;
}
bool fits(const WeightsPlan& plan, int m, int n, int tail, int kh = 1) {
    return widest_fitting_n(plan, m, tail, kh, n) == n;
}

// On the padded problem (plan_weights_with's fold_taps branch): every tap
// in one tile of one vector where that fits the registers, else the kernel
// rows with kd outside; neither: no fold (the caller plans the layer as
// it is). The runs' displacements are 32-bit.
// Folded taps: src bytes from a run of tile rows to the next kernel row's
// and to the next depth tap's (the padded src, f32: WeightsKernelDesc::
// row_disp / plane_disp).
std::array<int64_t, 2> fold_run_disps(const WeightsGeometry& g) {
    const int64_t pixel = g.g * g.icg * 4;
    return {g.dil[1] * g.in[2] * pixel, g.dil[0] * g.in[1] * g.in[2] * pixel};
}

void choose_fold_taps(WeightsPlan& plan) {
    if (plan.fold_kw <= 1 || plan.staged || plan.blk.kind != WeightsKernelKind::gemm) return;
    const WeightsGeometry& g = plan.geo;
    const auto [row, plane] = fold_run_disps(g);
    const int64_t tail = g.ocg % plan.blk.vlen;
    for (const int64_t kd : {g.k[0], int64_t(1)}) {
        plan.fold_kh = g.k[1];
        plan.fold_kd = kd;
        const int64_t rows = plan.gemm_rows(), reach = (kd - 1) * plane + (g.k[1] - 1) * row + 4 * g.icg * g.k[2];
        if (rows <= 32 && reach <= INT32_MAX &&
            fits(plan, static_cast<int>(rows), 1, static_cast<int>(tail)))
            return;
        if (kd == 1) break;
    }
    plan.fold_kh = plan.fold_kd = 1;
}

// Depthwise src displacements (bytes) between kw taps and kernel rows.
int64_t dw_pixel_bytes(const WeightsPlan& plan) {
    return plan.geo.g * plan.geo.icg * plan.elem_bytes() + plan.window_pad;
}
int64_t dw_tap_disp(const WeightsPlan& plan) { return plan.geo.dil[2] * dw_pixel_bytes(plan); }
int64_t dw_row_disp(const WeightsPlan& plan) { return plan.geo.dil[1] * plan.geo.in[2] * dw_pixel_bytes(plan); }

// The kernel's largest displacement, (kh-1)*row + (m-1)*tap + n vectors,
// must fit in 32 bits.
bool dw_disp_fits(const WeightsPlan& plan, int m, int n, int kh, int window) {
    const int block = plan.w_pairs ? 2 * window : window;  // pixels
    const int64_t s = window > 1 ? plan.geo.stride[2] : 1;
    return (kh - 1) * dw_row_disp(plan) + (m + s * (block - 1)) * dw_tap_disp(plan) + 64 * n <= INT32_MAX;
}

bool dw_f32_src_shared(const WeightsPlan& plan);

// src and diff_dst bytes of a depthwise problem.
double dw_data_bytes(const WeightsPlan& plan) {
    const WeightsGeometry& g = plan.geo;
    return double(g.mb) * double(g.g * plan.elem_bytes()) *
           double(g.in[0] * g.in[1] * g.in[2] * g.icg + g.out[0] * g.out[1] * g.out[2] * g.ocg);
}

// f32 depthwise windows from 3 taps (not 5): at W stride 1 on rows of up
// to dw_window_3tap_max_ow pixels whose src and diff_dst fit in L3
// together (kL3Bytes), pixel strides not a multiple of 2 KiB. 3x3 windows
// against none, AMD Zen 4, f32, 1 thread, min of 3-5: at mb 8, 14x14-28x28
// planes of 192-960 channels 1.04-1.29x; at mb 32 1.04-1.14x in L3 (384,
// 480 at 14x14, 960 at 7x7) but 0.77-0.84x from DRAM (192 at 28x28,
// 38 MB; 256 at 28x28, 51 MB); 56x56 planes 0.77-1.52x from run to run,
// 112x112 0.70-0.92x; W stride 2 0.82-0.93x; 512 channels at 14x14 (2 KiB
// pixels: a row's lines in two L1 sets) 0.74-0.88x, 1024 at 7x7 0.87x.
bool dw_f32_short_windows(const WeightsPlan& plan) {
    const WeightsGeometry& g = plan.geo;
    return g.stride[2] == 1 && g.out[2] <= Cost::dw_window_3tap_max_ow && dw_f32_src_shared(plan);
}

// f32 depthwise src vectors shared across taps (windows from 3 taps, whole
// rows) need src and diff_dst in L3 together and a pixel stride not a
// multiple of 2 KiB. Whole rows against pixels one at a time on 3-vector
// tiles (AMD Zen 4, 2 threads, mb 32, min of 5): 0.74x from DRAM
// (MobileNetV2 192 channels at 28x28, 38 MB), 0.68x at 512 channels
// (14x14, 26 MB).
bool dw_f32_src_shared(const WeightsPlan& plan) {
    return dw_data_bytes(plan) <= kL3Bytes && !pixels_share_l1_sets(dw_tap_disp(plan));
}

// Depthwise whole rows: f32 or 16-bit widened per load (not W pairs), no
// lane groups, W dilation 1, rows of at most dw_row_max_px unmerged
// pixels, edges that fit the desc's bytes; f32 where dw_f32_src_shared.
bool whole_row_geometry_ok(const WeightsPlan& plan) {
    const WeightsGeometry& g = plan.geo;
    const WholeRowEdges e = whole_row_edges(g);
    return plan.blk.kind == WeightsKernelKind::depthwise && plan.blk.lane_group == 1 && !plan.w_pairs &&
           !plan.pairs && !plan.staged && !plan.prepad && !g.merged && g.dil[2] == 1 &&
           g.out[2] <= Cost::dw_row_max_px && e.lo <= UINT8_MAX && e.cut <= UINT8_MAX && g.stride[2] <= UINT8_MAX &&
           e.lo < g.stride[2] * (g.out[2] - 1) + g.k[2] - e.cut;
}
bool whole_rows_ok(const WeightsPlan& plan) {
    if (plan.elem_bytes() == 4 && !dw_f32_src_shared(plan)) return false;
    return whole_row_geometry_ok(plan);
}

// The share of a row's output pixels in whole blocks of `block` pixels of
// its interior (every kw tap of the tile inside src; the edges run a pixel
// at a time), over the kw tiles of m taps.
double windowed_share(const WeightsPlan& plan, int m, int block) {
    const WeightsGeometry& g = plan.geo;
    int64_t in_blocks = 0, tiles = 0;
    for (int64_t kw0 = 0; kw0 < g.k[2]; kw0 += m, ++tiles) {
        const int64_t lo = valid_ow(g, kw0)[0], hi = valid_ow(g, std::min<int64_t>(g.k[2], kw0 + m) - 1)[1];
        in_blocks += std::max<int64_t>(0, hi - lo) / block * block;
    }
    return double(in_blocks) / double(tiles * g.out[2]);
}

// Search over (m, n) (and, depthwise, kh: all kernel rows in one tile or
// one): every candidate that fits, cheapest estimate wins. Depthwise also
// pays, per pass over a chunk (KH / kh passes), reading its diff_dst and
// src vectors from L2.
void choose_blocking(WeightsPlan& plan, bool rows_only = false) {
    const WeightsGeometry& g = plan.geo;
    WeightsBlocking& b = plan.blk;
    const bool dw = b.kind == WeightsKernelKind::depthwise;
    const int64_t channels = dw ? g.g * g.icg : g.ocg;
    const int64_t vecs = div_up(channels, b.vlen);
    const int64_t rows_total = dw ? g.k[2] : plan.gemm_rows();  // depthwise tile rows are kw taps
    b.tail = static_cast<int>(channels % b.vlen);
    const double latency = plan.pairs || plan.w_pairs ? Cost::dot_latency
                           : plan.isa == Isa::avx2 ? Cost::fma_latency_avx2
                                                   : Cost::fma_latency;
    // Kernel rows a tile: depthwise all of them (up to 32), or one.
    const int kh_all = dw ? static_cast<int>(std::min<int64_t>(g.k[1], 32)) : 1;
    // Depthwise with W dilation 1 (stride 1; 2 below) and kernels of 5 taps or more
    // (compute-heavy enough for load counts to matter): pixel windows (see
    // dw_tile). ResNet-50-sized 3x3 layers measured 17-33 % slower with them
    // in f32; f32 takes them from 3 taps only on short rows in L3
    // (dw_f32_short_windows). 16-bit tensors read in place widen every src load, which
    // windows do once per vector instead of once per tap: from 3 taps there
    // (AMD Zen 4, 1 thread, min of 5, bf16: EfficientNet-B0 32 channels at
    // 112x112 1.37x, 480 at 14x14 1.15x, MobileNetV2 384-576 at 14x14
    // 1.09-1.16x, 960 at 7x7 1.20x, 192 at 28x28 1.01x; f32 0.73-1.12x).
    const int64_t window_min_kw = b.lane_group > 1        ? 2
                                  : plan.elem_bytes() == 2 ? Cost::dw_window_min_kw_16bit
                                  : dw_f32_short_windows(plan) ? Cost::dw_window_min_kw_16bit
                                                               : Cost::dw_window_min_kw;
    // W stride 2 too (pixel u's tap k reads src vector 2u + k): 1 thread,
    // mb 8, min of 5, against stride-1-only windows: 16-bit depthwise 3x3 /
    // 5x5 s2 1.07-1.36x (MobileNetV2 b13, 576 channels 14 -> 7, 0.96x),
    // f32 5x5 s2 1.06-1.08x, f32 lane groups (RegNetY, ResNeXt-50 conv3)
    // 1.08-1.37x; bf16 lane groups 0.95-1.00x keep stride 1.
    const bool strided_ok = g.stride[2] <= Cost::dw_window_max_stride && (b.lane_group == 1 || plan.elem_bytes() == 4);
    const bool windows = dw && (g.stride[2] == 1 || strided_ok) && g.dil[2] == 1 && g.k[2] >= window_min_kw;
    // Whole rows (option 0): every pixel as in a window of the row's width.
    const int window_options[] = {1, 2, 3, 4, 6, 8, 0};
    const bool rows_ok = whole_rows_ok(plan);
    std::array<double, 9> chunk_px{};  // chunk pixels per tile width n (1..8)
    for (int n = 1; n <= 8; ++n) chunk_px[n] = chunk_pixels(plan, n);
    double best = 1e300;
    int best_window = 1;
    // windowed_share per (window option, m), for both kh options (-1: not yet).
    std::array<std::array<double, 33>, std::size(window_options)> shares;
    for (auto& per_m : shares) per_m.fill(-1.0);
    // Depthwise tiles a pixel at a time, per (tile rows r, tile width n,
    // full tile or the last of a row): the same for every window option
    // of one kh (-1: not yet).
    const int m_cap = static_cast<int>(std::min<int64_t>(rows_total, 32));
    std::array<double, 33 * 9 * 2> single;
    // The rows split in tiles of m rows, the vectors in tiles of n (their
    // divisions out of the search).
    std::array<std::array<int64_t, 2>, 33> row_split{};
    std::array<std::array<int64_t, 2>, 9> vec_split{};
    for (int m = 1; m <= m_cap; ++m) row_split[size_t(m)] = tile_split(rows_total, m);
    for (int n = 1; n <= 8; ++n) vec_split[size_t(n)] = tile_split(vecs, n);
    // AVX2 folded kw taps (first layers: KW x IC tile rows) take tiles of
    // two vectors or more where OC/g spans two. The model rates one-vector
    // tiles of 9-14 rows (m9n1, m11n1, m14n1) within 0.5 % of the two-vector
    // ones (m5n2, m6n2), and they measured slower: AMD Zen 3, f32,
    // tools/sweep_ab.py --rounds=5 --min against m*n1, 2 threads mb 8 / 1
    // thread mb 4: ResNet-50 conv1 1.20 / 1.17x, 7x7 s2 stems of 256 pixels
    // or 4 channels 1.15-1.27x, MobileNet v1 conv1 1.22 / 1.22x, VGG-16
    // conv1_1 1.13 / 1.16x, Inception-v3 and YOLOv3 first layers 0.99-1.06x,
    // 24 channels (m3n3) 1.31 / 1.12x; 1D k7 from 3 channels 1.12-1.30x (one
    // 0.99x); ConvTranspose into 3 channels (AlexNet, GoogLeNet v1, Mask
    // R-CNN) 1.25-1.52x at 2 threads, 0.96-1.24x at 1. Layers whose plans
    // were the same on both sides read 0.90-1.09x in those runs. A probe of
    // the two loops alone, with their data in L1, ran both near the FMA
    // peak: the loss is in how one-vector passes read the chunk, not found.
    const int n_min = plan.isa == Isa::avx2 && !dw && plan.fold_kw > 1 && !plan.folded_taps() && vecs >= 2 ? 2 : 1;
    for (int kh : {kh_all, kh_all > 1 ? 1 : 0}) {
        if (kh == 0) continue;  // kh_all is 1 already
        const double passes = double(g.k[1]) / kh;
        if (dw && g.k[1] % kh != 0) continue;
        if (dw) std::fill_n(single.begin(), (m_cap + 1) * 9 * 2, -1.0);
        for (size_t o = 0; o < std::size(window_options); ++o) {
            const int option = window_options[o];
            if ((option > 1 && !windows) || (option == 0 && !rows_ok) || (rows_only && option != 0)) continue;
            const bool rows = option == 0;
            const int w = rows ? static_cast<int>(g.out[2]) : option;
            b.window = rows ? 1 : w;  // fits() reads both
            b.whole_rows = rows;
            for (int m = 1; m <= m_cap; ++m) {
                if ((rows || plan.folded_taps()) && m != rows_total) continue;  // one kw tile / one tap tile
                // Depthwise windows take blocks of a row's interior pixels
                // (pairs: 2w pixels a block); the rest run one (pair) at a time.
                const int n_max = widest_fitting_n(plan, m, b.tail, kh, static_cast<int>(std::min<int64_t>(vecs, 8)));
                if (n_max == 0) continue;
                double& share = shares[o][static_cast<size_t>(m)];
                if (share < 0) share = rows ? 1 : w > 1 ? windowed_share(plan, m, plan.w_pairs ? 2 * w : w) : 0;
                const double in_blocks = share;
                for (int n = n_min; n <= n_max; ++n) {
                    if (dw && !dw_disp_fits(plan, m, n, kh, w)) continue;
                    const double pixels = chunk_px[n];
                    auto row_cost = [&](int r) {
                        return over_tiles(vec_split[size_t(n)], n, [&](int v) {
                            if (!dw) return gemm_tile(r, v, pixels, latency);
                            const double l2 = 2.0 * v * b.vlen * plan.elem_bytes() / Cost::l2_bytes_per_cycle;
                            auto tile = [&](int ww) {
                                return dw_tile(r, kh, v, ww, windows || rows, pixels, latency, b.lane_group,
                                               plan.w_pairs, g.stride[2]);
                            };
                            // (rows: every pixel in the block of the row)
                            if (rows) return tile(w) + l2;
                            double& one = single[(size_t(r) * 9 + size_t(n)) * 2 + (v == n ? 0 : 1)];
                            if (one < 0) one = tile(1);
                            if (w == 1 || in_blocks == 0) return one + l2;
                            return in_blocks * tile(w) + (1 - in_blocks) * one + l2;
                        });
                    };
                    const double cost = over_tiles(row_split[size_t(m)], m, row_cost) * (dw ? passes : g.g);
                    if (cost < best * 0.999) {
                        best = cost;
                        b.m = m;
                        b.n = n;
                        b.kh = kh;
                        best_window = option;
                    }
                }
            }
        }
    }
    b.window = std::max(1, best_window);
    b.whole_rows = best_window == 0;
    // gemm: the tap tiles of a group (kw, and with folded taps kh and kd, in the tile rows)
    const int64_t taps = dw ? g.k[0] * (g.k[1] / b.kh)
                            : g.k[0] / plan.fold_kd * (g.k[1] / plan.fold_kh) * (g.k[2] / plan.fold_kw) * g.g;
    b.cycles_per_pixel = best * (dw ? g.k[0] : taps / g.g);
    b.m_tiles = div_up(rows_total, b.m);
    b.n_tiles = div_up(vecs, b.n);
    b.m_last = static_cast<int>(rows_total - (b.m_tiles - 1) * b.m);
    b.n_last = static_cast<int>(vecs - (b.n_tiles - 1) * b.n);
    b.tiles = taps * b.m_tiles * b.n_tiles;
}

// Depthwise row blocks (WeightsKernelDesc::row_block): whole rows, R output
// rows an entry, every tap of one kernel, n channel vectors. Per output
// pixel and vector: one diff_dst load, (SH * (R - 1) + KH) / R src loads
// per src column the pixel adds (W stride), KH * KW FMAs. Among the (n, R)
// that fit the registers, with R dividing the output height (a block never
// leaves its image) and R >= 2, the fewest loads per FMA; ties go to the
// wider tile (fewer passes over a chunk). f32 only on pixel strides of a
// multiple of 2 KiB, in L3 or from DRAM (AMD Zen 4, 2 threads, min of 5:
// 512 / 1024 channels 1.02-1.78x at mb 8, 1.21-2.00x at mb 96; 192-960
// channels on other strides 0.89-0.94x in L3, 0.82-0.87x from DRAM); 16-bit
// tensors read in place on an even number of vectors (one vector is half a
// line: 0.56-0.91x from DRAM); H stride 1 (3x3 s2: 0.957 geomean).
// AVX2 f32 also on pixel strides of a multiple of 512 bytes (128, 256, 384
// channels; a one-vector tile's half lines in 8 L1 sets or fewer, which
// the kernel rows' reuse from one output row to the next outgrows), H
// strides up to 2: AMD Zen 3, tools/sweep_ab.py --min of 5, mb 8, against
// one pixel at a time: MobileNet v1 conv3_1 / conv3_2 / conv4_1 / conv4_2
// 1.21 / 1.11 / 1.24 / 1.20x at 2 threads, 1.30 / 1.06 / 1.28 / 1.18x at
// 1; 256 channels at 56x56 1.04-1.21x; from DRAM (mb 32) 0.91-1.13x. Other
// strides stay off (MobileNetV2 144 channels 3x3 s2: 0.48x).
// Runs before choose_blocking, which a layer with row blocks skips (its
// search is the larger part of cached op creation); returns whether it
// chose them.
bool choose_row_block(WeightsPlan& plan) {
    WeightsBlocking& b = plan.blk;
    const WeightsGeometry& g = plan.geo;
    const int64_t pitch = dw_tap_disp(plan);
    const bool shared_sets = pixels_share_l1_sets(pitch);
    const bool avx2_sets = plan.isa == Isa::avx2 && plan.elem_bytes() == 4 && !shared_sets &&
                           pitch % Cost::dw_block_avx2_pitch == 0;
    const int64_t max_h_stride = avx2_sets ? Cost::dw_block_max_h_stride_avx2 : Cost::dw_block_max_h_stride;
    if (!whole_row_geometry_ok(plan) || g.dil[1] != 1 || g.stride[1] > max_h_stride || g.k[1] > 32 || g.k[2] > 32 ||
        (plan.elem_bytes() == 4 && !shared_sets && !avx2_sets))
        return false;
    // Loads per output pixel and vector (see above).
    auto loads = [&](int r) {
        return 1.0 + double(std::min(g.stride[2], g.k[2])) * double(row_block_src_rows(g, r)) / r;
    };
    const int64_t channels = g.g * g.icg, vecs = div_up(channels, b.vlen);
    b.tail = static_cast<int>(channels % b.vlen);
    const int64_t row_bytes = g.in[2] * dw_pixel_bytes(plan);  // (windows: padded pixels)
    const int64_t dst_row_bytes = g.out[2] * dw_pixel_bytes(plan);
    double best = 1e300;
    int best_n = 0, best_r = 0;
    const bool rows0 = b.whole_rows;
    const int window0 = b.window;
    const int n_step = plan.elem_bytes() == 2 ? 2 : 1;  // 16-bit: whole lines
    for (int n = n_step; n <= std::min<int64_t>(vecs, 4); n += n_step)
        for (int r = static_cast<int>(std::min<int64_t>(g.out[1], 16)); r >= 2; --r) {
            if (g.out[1] % r || r * n * g.out[2] * g.k[1] * g.k[2] > Cost::dw_block_max_fmas) continue;
            const int64_t src_rows = row_block_src_rows(g, r);
            if (src_rows > 31 || (src_rows - 1) * row_bytes + g.stride[2] * g.out[2] * dw_tap_disp(plan) > INT32_MAX ||
                (r - 1) * dst_row_bytes + g.out[2] * dw_tap_disp(plan) > INT32_MAX)
                continue;
            b.whole_rows = true;
            b.window = 1;
            b.row_block = r;
            const bool ok = fits(plan, static_cast<int>(g.k[2]), n, b.tail, static_cast<int>(g.k[1]));
            b.row_block = 1;
            b.whole_rows = rows0;
            b.window = window0;
            if (!ok) continue;
            const double cost = loads(r) / double(g.k[1] * g.k[2]) - 1e-3 * n;
            if (cost < best) {
                best = cost;
                best_n = n;
                best_r = r;
            }
            break;  // the largest R for this n
        }
    if (best_r == 0) return false;
    b.whole_rows = true;
    b.window = 1;
    b.row_block = best_r;
    b.m = static_cast<int>(g.k[2]);
    b.kh = static_cast<int>(g.k[1]);
    b.n = best_n;
    b.m_tiles = 1;
    b.m_last = b.m;
    b.n_tiles = div_up(vecs, b.n);
    b.n_last = static_cast<int>(vecs - (b.n_tiles - 1) * b.n);
    b.tiles = g.k[0] * b.n_tiles;
    b.cycles_per_pixel = double(g.k[0]) * double(vecs) *
                         std::max(double(g.k[1] * g.k[2]) / Cost::fma_per_cycle, loads(best_r) / Cost::loads_per_cycle);
    return true;
}

// Rows long enough to cut into segments: more than segment_min_chunks
// chunks of `target` pixels (see choose_reduction).
bool long_rows(const WeightsGeometry& g, int64_t target) { return g.out[2] > Cost::segment_min_chunks * target; }

// The bytes of src and diff_dst rows one chunk reads.
int64_t chunk_bytes(const WeightsPlan& plan, const Problem& p) {
    const WeightsGeometry& g = plan.geo;
    const int64_t src_row = std::min(g.in[2], g.segment * g.stride[2] + g.k[2] * g.dil[2]) * p.ic();
    return plan.red.chunk_rows * plan.elem_bytes() * (g.segment * p.oc() + src_row * g.k[1]);
}

void choose_reduction(WeightsPlan& plan, const Problem& p) {
    WeightsGeometry& g = plan.geo;
    WeightsReduction& r = plan.red;
    const int64_t target = static_cast<int64_t>(chunk_pixels(plan, plan.blk.n));
    // Rows longer than a chunk are cut into segments: merged rows (pixel
    // ranges), and gemm rows read in place, whose row lists take a
    // segment's pixels per tap (1D speech encoders: wav2vec 2.0's first
    // layer has rows of 3199 pixels, 6.4 MB of f32 diff_dst at 512
    // channels, which every oc tile streamed from DRAM), or plain staged
    // rows (WeightsPlan::staged_segments: a chunk stages the src window of
    // its segments, halo included) instead of whole rows of many MB:
    // wav2vec 2.0's second layer (512 -> 512, k3 s2, 1599-pixel rows: 9.4
    // MB chunks -> 1.9 MB) 1.39x f32 / 1.54x bf16, 1D layers of 3000-20000
    // pixels 0.99-3.66x (k5 at 16000 pixels, 64 MB chunks: 3.66x), NCX
    // 1.18-3.49x, 1D layers of 2-8 groups 1.35-1.82x (AMD Zen 5, 2 threads,
    // min of 3; bench/shapes/long_1d); AVX2's blocked chunks (segments of
    // 150-400 pixels) 1.03-1.23x; 16-bit folded kw taps (wav2vec 2.0's
    // first layer, 1 channel, k10 s5, staged with its W pads) 1.32-1.49x,
    // AVX2 1.14-1.17x; strided 1x1 (compressed W rows, tile-major slices)
    // 1.47-3.38x in 16 bits, 1.63x f32 at 256 -> 512, AVX2 1.16-4.36x. Rows
    // of kw windows and kw lanes stay whole (their row builders take whole
    // rows), so long rows leave those for the plain tiles (see plan_weights).
    // Those are cut only when a row holds several chunks, into equal
    // segments (U-Net's 256-pixel rows in 204 + 52 or 102 x 2 + 52 ran
    // 0.68-0.88x, as one row 67 KiB).
    // Depthwise rows in NCX windows are cut too, into segments whose
    // channel runs are at least Cost::ncx_segment_run_bytes: a chunk of a
    // whole 1D row transposed every channel of it into the window (8 MB
    // at 512 channels of 4000 samples), out to L3 / DRAM, before the
    // kernels read it back; a segment's window stays in L2 (see
    // PERFORMANCE.md).
    const bool whole_rows = plan.kw_phases > 0 || plan.kw_lanes;  // staged or read in place
    const bool cut_gemm = plan.blk.kind == WeightsKernelKind::gemm && !whole_rows;
    const int64_t ncx_target = std::max(target, Cost::ncx_segment_run_bytes / plan.elem_bytes());
    if (g.merged)
        g.segment = std::min(g.out[2], target);
    else if (cut_gemm && long_rows(g, target))
        g.segment = div_up(g.out[2], div_up(g.out[2], target));
    else if (plan.blk.kind == WeightsKernelKind::depthwise && plan.ncx_windows && long_rows(g, ncx_target))
        g.segment = div_up(g.out[2], div_up(g.out[2], ncx_target));
    g.segs_per_row = div_up(g.out[2], g.segment);
    r.rows = g.rows();
    r.chunk_rows = std::clamp<int64_t>((target + g.segment / 2) / g.segment, 1, r.rows);
    const double wei_bytes = 4.0 * plan.weights_elems;
    const double data_bytes = 4.0 * double(p.activation_elems());
    int64_t slices = 1;
    // An even count (slice_multiple): threads take whole slices, and 11 of
    // them ran 6 against 5 on 2 threads.
    if (plan.blk.tiles < Cost::tiles_for_balance)
        slices = div_up(div_up(Cost::tiles_for_balance, plan.blk.tiles), Cost::slice_multiple) * Cost::slice_multiple;
    // Little compute per byte (1x1 layers): threads splitting tiles would
    // each stream all of src and diff_dst from DRAM; slices let them split
    // the pixels instead, for a reduction of small weights.
    if (p.flops() / data_bytes < Cost::stream_intensity && wei_bytes * Cost::stream_slices < data_bytes / 16)
        slices = std::max(slices, Cost::stream_slices);
    // Staged chunks: threads splitting tiles would each stage every chunk;
    // with slices each stages only its own (ResNet-50 1024->256 f32 at 2
    // threads: +12 %), for partials that are small next to the data.
    if (plan.staged && wei_bytes * Cost::staged_partial_ratio < data_bytes)
        slices = std::max(slices, Cost::staged_slices);
    // A problem that always runs on one thread (op_threads: the rule reads
    // only the problem, so every arena gives the same plan and the same
    // sums) gains nothing from slices, and pays their partials and reduction.
    if (runs_serial(p)) slices = 1;
    if (slices > 1) {
        const int64_t by_memory = 1 + static_cast<int64_t>(Cost::max_partial_bytes / std::max(wei_bytes, 4.0));
        slices = std::min({slices, Cost::max_slices, by_memory, r.rows});
        r.chunk_rows = std::min(r.chunk_rows, div_up(r.rows, slices));
    }
    r.chunks = div_up(r.rows, r.chunk_rows);
    r.slices = std::min(slices, r.chunks);
    if (r.slices > 1) {  // the same number of chunks in every slice (5 chunks in 2 slices: 3 + 2)
        const int64_t per_slice = div_up(r.chunks, r.slices);
        r.chunk_rows = div_up(r.rows, r.slices * per_slice);
        r.chunks = div_up(r.rows, r.chunk_rows);
        r.slices = std::min(r.slices, r.chunks);
    }
    // Row blocks: chunks of whole blocks (R divides the output height, so
    // no block leaves its image).
    if (const int64_t rb = plan.blk.row_block; rb > 1) {
        r.chunk_rows = div_up(r.chunk_rows, rb) * rb;
        r.chunks = div_up(r.rows, r.chunk_rows);
        r.slices = std::min(r.slices, r.chunks);
    }
    // NCX windows on small planes: chunks of whole images. A chunk of a
    // few rows reads a short run of each channel's plane (MobileNetV2's
    // 14x14 layers: 4-6 rows, 224-336 bytes a channel) and the transposes
    // waited on memory; a whole image is one sequential read (see
    // Cost::ncx_window_plane_bytes).
    if (plan.ncx_windows && g.in[0] * g.in[1] * g.in[2] * plan.elem_bytes() <= Cost::ncx_window_plane_bytes) {
        r.chunk_rows = g.out[0] * g.out[1] * g.segs_per_row;
        r.chunks = div_up(r.rows, r.chunk_rows);
        r.slices = std::min(r.slices, r.chunks);
    }
    r.chunk_bytes = chunk_bytes(plan, p);
    WeightsBlocking& b = plan.blk;
    b.m_block = b.m_tiles;
    if (b.kind == WeightsKernelKind::gemm && !plan.kw_lanes) {  // (kw lanes: every tile reads all of a group's src)
        const double tile_src_bytes = double(r.chunk_rows * g.segment) * src_pixels_per_output_pixel(plan) *
                                      plan.elem_bytes() * b.m;
        b.m_block = std::clamp<int64_t>(static_cast<int64_t>(Cost::src_block_bytes / tile_src_bytes), 1, b.m_tiles);
    }
}

// bf16 depthwise pairs W pixels (see plan_weights) on avx512_core_bf16,
// W dilation 1, kernels of dw_window_min_kw_16bit taps or more: at W
// stride 1 up to dw_pairs_max_kw taps, and kernels of one row (1D, 1 x K)
// at W stride up to dw_window_max_stride. Other kernels widen their loads,
// zero-extended for vdpbf16ps' single products (WeightsKernelDesc::dot 2):
// against W pairs (AMD Zen 5, min of 3, mb 8 / 32 at 2 threads and mb 8 at
// 1): 3x3 s2 (MobileNetV2, EfficientNet-B0, ShuffleNet) 1.08-1.17x / 1.01-
// 1.15x / 1.10-1.31x, 7x7 (ConvNeXt-T s1-s3) 1.08-2.18x / 1.14-1.49x /
// 1.10-1.48x, 9x9 and 11x11 (MixNet) 1.05-1.19x, 512 channels 7x7 at 14x14
// 2.74x, 5x5x5 s2 (X3D) 1.15-1.19x; 5x5 s2 0.97-1.01x. Pairs stay ahead at
// 3x3 and 5x5 s1 (32 channels at 112x112 and mb 8: 1.14-1.16x) and on one
// row (Conformer's 31 taps 1.25-1.30x, 15 taps s2 1.09x). Nor where src and diff_dst
// exceed L3 on short rows (src and output rows of up to dw_row_max_px
// pixels) with kernels up to dw_pairs_dram_max_kw wide: widened whole rows
// stream those from DRAM faster (AMD Zen 4, 2 threads, mb 32, min of 5,
// two runs: MobileNetV2 144 channels at 56x56 1.61x, 56 -> 28 3x3 s2
// 1.14-1.34x, EfficientNet-B0 5x5 s2 1.35-1.91x; against that, 112-pixel
// src rows 0.88-0.96x at W stride 2, ConvNeXt 7x7 at 56x56 0.74-0.77x).
// Nor on pixel strides of a multiple of 2 KiB (1024, 2048 channels), where
// the widened kernels take row blocks or whole rows: against pairs (AMD
// Zen 4, 2 threads, mb 32, min of 5) MobileNet v1 conv6 1.27x, 1024
// channels at 14x14 1.54x, 2048 at 8x8 / 7x7 1.67x / 1.37x, 3x3 s2
// 1.19-1.29x, 5x5 1.35x, 7x7 at 7x7 3.18x.
bool w_pairs(const Problem& p, Isa isa) {
    const bool dram_short_rows = 2.0 * double(p.activation_elems()) > kL3Bytes &&
                                 p.k[2] <= Cost::dw_pairs_dram_max_kw && p.in[2] <= Cost::dw_row_max_px &&
                                 p.out[2] <= Cost::dw_row_max_px;
    const bool set_conflicts = pixels_share_l1_sets(p.ic() * int64_t(dtype_size(p.dt)));
    const bool one_row = p.k[0] == 1 && p.k[1] == 1;
    const bool taps = one_row ? p.stride[2] <= Cost::dw_window_max_stride
                              : p.stride[2] == 1 && p.k[2] <= Cost::dw_pairs_max_kw;
    return p.dt == data_type::bf16 && isa >= Isa::avx512_core_bf16 && p.icg == 1 && taps && p.dil[2] == 1 &&
           p.k[2] >= Cost::dw_window_min_kw_16bit && !dram_short_rows && !set_conflicts;
}

// Depthwise pre-pads src (copies it into a zero-padded scratch and plans
// the unpadded problem) only for bf16 W pixel pairs at W stride 1 (the
// measured case) with kernels of
// dw_prepad_min_kw taps or more, when the share of output pixels with every
// tap inside src is in [dw_prepad_interior_min, dw_prepad_interior_max):
// there a row's kw - 1 W-edge pixels each run a pixel at a time (no
// partner to pair with), while the copy gives long rows of pairs. Since
// the edges run gated in the interior's call (WeightsRow::mask) every other
// plan is faster reading src in place: pre-padding off against on, AMD Zen
// 4, 1 thread, mb 8, min of 5 (3 for AVX2 and 16-bit), the 21 depthwise
// layers of MobileNetV2 / EfficientNet-B0 / ConvNeXt-T: AVX-512 f32
// 1.33-3.41x, bf16 3x3 / 5x5 1.20-2.14x, 7x7 at 7x7 (2 % interior) 1.34x;
// AVX2 f32 1.15-2.68x; f16 3x3-9x9 1.14-1.32x. Pre-padding wins for bf16 W
// pairs at 7x7 on 28x28 (62 %) and 14x14 (33 %) planes, 1.12-1.15x, 9x9 at
// 28x28 (51 %) 1.18x; even at 7x7 on 56x56 (80 %), 1.00x.
bool prepad_src(const Problem& p, Isa isa) {
    if (!is_depthwise(p, isa) || !w_pairs(p, isa) || p.stride[2] != 1 || p.k[2] < Cost::dw_prepad_min_kw) return false;
    bool padded = false;
    double interior = 1;
    for (int a = 0; a < 3; ++a) {
        if (p.pad_begin[a] < 0 || p.pad_end[a] < 0) return false;
        padded = padded || p.pad_begin[a] > 0 || p.pad_end[a] > 0;
        int64_t inside = 0;  // outputs whose first and last taps are inside src
        for (int64_t o = 0; o < p.out[a]; ++o) {
            const int64_t first = o * p.stride[a] - p.pad_begin[a];
            inside += first >= 0 && first + p.ext(a) <= p.in[a];
        }
        interior *= double(inside) / double(p.out[a]);
    }
    return padded && interior >= Cost::dw_prepad_interior_min && interior < Cost::dw_prepad_interior_max;
}

// Grouped tiles read in place (lane_tiles_in_place) prefetch the next
// group's lines of the chunk, one a pixel (WeightsPlan::group_prefetch),
// where the group's calls step over enough pixels to walk them all: src
// rows and diff_dst rows, one line of each pixel a group (pair) of up to
// 16 f32 channels. ResNeXt-50 conv4 3x3 s2 at 2 KiB a pixel (AMD Zen 5,
// min of 5, in place with and without): 1.15x at 2 threads, 1.18x at 1;
// the walk of the whole next chunk, which it replaces, fetches lines no
// faster than the kernels' own misses there (1 thread: 49 % of the peak
// against 84 % with the data in L3).
// Pixels that are not a whole number of lines apart take the walk of the
// whole next chunk instead: a group's slice then straddles two lines at
// some pixels, and the walk of the next group fell far behind it. AMD Zen
// 4, 2 threads, mb 32, min of 5, f32, against the group walk: groups of 8
// at 416 / 864 / 288 / 480-byte pitches (RegNetY-400MF s2 3x3, 27 and 9
// groups at 28x28 and 56x56, 15 groups at 28x28) 1.39-1.62x, groups of 12
// at 480 / 960 bytes 1.08-1.19x; 440 and 168 channels at 7x7 and 14x14,
// whose data stays in L3, 0.98-1.01x. Prefetching both lines of each
// straddling slice in the group walk ran 0.96-1.05x. Whole-line pitches
// keep the group walk (RegNetX-400MF s3, ResNeXt-50 conv3 / conv4 3x3:
// the chunk walk 0.77-0.90x).
// Returns the walk's lines a pixel step (WeightsPlan::pf_steps), 0 for no
// group walk. Where a group's calls have fewer pixel steps than the walk
// has lines (ResNeXt-50 conv3 3x3 s2 and RegNetY-400MF s3 3x3 s2: 56 / 28-
// pixel input rows, twice the output rows, three calls a pair), each step
// prefetches 2 or 3 lines of it, as few as let every walk (src, then
// diff_dst) start in a call of its own, a call taking its steps from one
// walk. Against the walk of the next chunk they had, AMD Zen 4, f32, min of
// 5: 1.32 / 1.02x at mb 32 and 2 threads (RegNetY s3 / ResNeXt conv3),
// 1.20 / 1.07x at 1 thread, 1.29 / 1.10x at mb 64, 1.02 / 1.44x at mb 4 and
// 1 thread (data in L3).
int group_prefetch_steps(const WeightsPlan& plan, const Problem& p) {
    const WeightsGeometry& g = plan.geo;
    const WeightsBlocking& b = plan.blk;
    const int64_t per = plan.lane_pairs ? 2 : 1, es = static_cast<int64_t>(dtype_size(p.dt));
    if (plan.staged || p.g < 2 || b.kind != WeightsKernelKind::gemm || !(plan.kw_lanes || plan.kw_phases > 0) ||
        plan.windows() || plan.ncx_rows || plan.prepad || g.merged || g.segs_per_row > 1 || g.k[0] > 1 || g.out[0] > 1)
        return 0;
    if (per * g.icg * es > 64 || per * g.ocg * es > 64) return 0;
    if (p.ic() * es < Cost::group_prefetch_min_pitch || p.oc() * es < Cost::group_prefetch_min_pitch) return 0;
    if (p.ic() * es % 64 != 0 || p.oc() * es % 64 != 0) return 0;
    const int64_t rows = plan.red.chunk_rows, groups = div_up(g.g, per);
    const int64_t src_steps = (rows * g.stride[1] + (g.k[1] - 1) * g.dil[1]) * g.in[2];
    const int64_t call_px = rows * g.out[2], calls = b.tiles / groups;  // a group's calls
    if (src_steps + call_px <= calls * call_px) return 1;
    // A call takes its steps from one walk: the src walk's calls, then one
    // for diff_dst (call_px lines).
    for (int n = 2; n <= Cost::group_walk_max_steps; ++n)
        if (div_up(src_steps, n * call_px) + 1 <= calls) return n;
    return 0;
}

// Streamed depthwise passes (WeightsPlan::dw_stream). A chunk holds every
// channel of its rows, so at high channel counts on small planes it is a
// few rows, and each channel tile's call a few dozen pixels: MobileNetV2's
// 960 channels at 7x7 (mb 32, 2 threads) took 5 rows a chunk, 35 pixels a
// call, the executor's per-call work 12 % of the layer and the kernel
// waiting at each row's first loads. With one chunk per slice, a tile's
// call runs all of the slice's rows and prefetches, per pixel and src
// column, its lines dw_stream_rows_ahead output rows on (prefetcht0:
// prefetcht1 lost the gain); data from L3 rather than a chunk in L2.
// Against chunks, AMD Zen 5, f32, 2 threads, min of 3-5 (tools/sweep_ab.py;
// docs/PERFORMANCE.md): 960 / 1152 channels at 7x7 (35 / 28 pixels a call)
// 1.09-1.27x / 1.27-1.37x at mb 32, 1.29-1.40x / 1.28-1.65x at mb 8,
// 1.05-1.21x / 1.22-1.38x at mb 64 (before the L3 share below); 576 channels at
// 14x14 (56 pixels a call) 1.25x at mb 32 but 0.94x at mb 8 and 0.82x at
// mb 64 (58 MB, from DRAM), 480 at 14x14 (70) 0.98x / 0.80x at mb 64, 384
// at 14x14 (84) 0.83x: longer calls keep their chunks. f16 (widened in
// the kernels) 1.12-1.91x on the same layers at mb 8-64. Against that,
// EfficientNet-B0's 1152-channel 5x5 at 7x7 in f32 (1.46x at mb 32, 14.5
// MB) ran 0.94x at mb 48 (21.7 MB) and 0.71x at mb 64 (29 MB, src and
// diff_dst close to all of L3): a streamed pass reads a tile's lines of
// each pixel, which from DRAM cost more than a chunk's whole rows. So src
// and diff_dst within 0.6 of L3 (dw_stream_max_l3_share): against half,
// the layers between, 16-19 MB, 1.12-1.50x (MobileNetV2 b13 f32 at mb 32,
// b14 at mb 48, 1152 channels 3x3 and 5x5 at mb 40, f16 5x5 / 3x3 s2 at
// 672 / 960 channels; min of 5). On AVX2,
// ConvNeXt-T's 768-channel 7x7 at 7x7 (tiles of one kernel row: each
// pass reads the slice's rows again for each kernel row) ran 0.77x / 0.83x
// at mb 32 / 8 in f32, 1.15-1.34x widened from 16 bits (half the bytes):
// f32 tiles take every kernel row (AVX-512's f32 ones here do). H strides
// above 1 prefetch the min(stride, kernel rows) src rows each output row
// adds (H dilation 1): against streaming only at H stride 1, at mb 8 / 32,
// EfficientNet-B0's 672-channel 5x5 s2 f32 1.55x / 0.97x (chunks at mb 32),
// f16 1.51x / 1.27x, 960 channels 3x3 s2 f16 1.23x / 1.28x, MobileNetV2 b13
// f16 1.14x / 1.00x. Whole rows only (their kernels carry the prefetches),
// not row blocks, 2D / 1D in NXC, and only where chunks would be more than
// one per slice.
bool dw_stream_ok(const WeightsPlan& plan) {
    const WeightsGeometry& g = plan.geo;
    const WeightsBlocking& b = plan.blk;
    const std::array<int64_t, 2> ahead = dw_stream_ahead(plan, b.kh);  // (the kernel adds a row's columns)
    return b.kind == WeightsKernelKind::depthwise && b.whole_rows && b.row_block <= 1 && !plan.w_pairs &&
           !plan.pairs && !plan.staged && !plan.prepad && !plan.transpose_inputs && !plan.windows() &&
           g.k[0] == 1 && g.stride[0] == 1 && (g.stride[1] == 1 || g.dil[1] == 1) && g.stride[1] <= UINT8_MAX &&
           g.segs_per_row == 1 &&
           (b.kh == g.k[1] || plan.elem_bytes() == 2) &&
           plan.red.chunks > plan.red.slices && plan.red.chunk_rows * g.segment < Cost::dw_stream_max_call_px &&
           dw_data_bytes(plan) <= kL3Bytes * Cost::dw_stream_max_l3_share &&
           std::max(ahead[0], ahead[1]) <= INT32_MAX / 2;
}

// Lines of the next chunk the kernels prefetch per pixel (while a chunk
// runs, the executor walks the thread's next chunk: its diff_dst rows,
// then the src rows its taps read). Staged gemm: 1 (ResNet-50 1x1 at 2
// threads, 1 line vs 2: bf16 +0..14 %, f32 -2..+12 %, 3x3 even).
// Depthwise calls and gemm calls on the user's tensors read a few lines of
// each pixel (one tile's channels), so a thread makes tiles x pixels calls
// per chunk over the chunk's bytes: enough lines that the next chunk is in
// L2 by about 4/5 of this one, at least 2 for depthwise (memory bound), 1
// for gemm. EfficientNet-B0 480 channels 3x3 at 14x14 (10 tiles, 2 lines
// then) ran its kernels on lines that missed L2; in-place gemm with 1 line
// had prefetched half of wav2vec 2.0's first-layer chunks (2 threads, f32,
// AVX-512: 1.25-2.8x with 3 lines, U-Net's 1x1 head and first layer
// 1.20-1.25x; AVX2 with 1 line again 0.85x on wav2vec).
// Tile-major chunks copied inside the kernels prefetch what the next
// chunk's first call on a tile reads (2 src lines and the tile's diff_dst
// lines a pixel, per image) over the calls before it, `lines` lines of a
// pixel per step: the fewest that fit in all but one of a thread's calls.
// Depthwise layers whose src and diff_dst stay cached between calls (at
// most kDwPrefetchBytes together) take no walk: its prefetches share
// the load ports with the kernels' own loads of lines already in L2 or L3.
// Without it (AMD Zen 5, 2 threads, tools/sweep_ab.py --rounds=5 --min, the
// MobileNet v1 / v2 and EfficientNet-B0 depthwise layers at mb 1 and 8, f32
// and bf16): up to 8 MiB geomean 1.10x over 80 cells (0.83-1.86x; MobileNet
// v1 conv2_2 1.24x, MobileNetV2 b4 f32 1.86x), AVX2 1.07x over 38;
// 8-16 MiB 1.06x over 12; at 23-28 MiB 0.35-0.86x, so not there.
int plan_prefetch_lines(const WeightsPlan& plan, const Problem& p) {
    const bool dw = plan.blk.kind == WeightsKernelKind::depthwise;
    if (plan.stage_in_kernel) {
        const int64_t calls = div_up(plan.blk.tiles, plan.grid.tile_threads), images = plan.pairs ? 2 : 1;
        const int64_t dst_lines = div_up(int64_t(plan.blk.n) * plan.blk.vlen * dtype_size(p.dt), 64);
        for (int lines = 1; lines < Cost::max_prefetch_lines; ++lines)
            if (images * (div_up(2, lines) + div_up(dst_lines, lines)) <= calls - 1) return lines;
        return Cost::max_prefetch_lines;
    }
    if (!dw && plan.staged) return 1;
    if (dw && dw_data_bytes(plan) <= kDwPrefetchBytes) return 0;
    const WeightsGeometry& g = plan.geo;
    const double es = plan.elem_bytes(), pixels = double(plan.red.chunk_rows * g.segment);
    double src_rows = double(plan.red.chunk_rows);
    for (int a = 0; a < 2; ++a) {  // the input rows (and planes) a run of output rows reads
        const double ext = double((g.k[a] - 1) * g.dil[a] + 1);
        src_rows *= double(std::min(g.stride[a], g.k[a]));
        src_rows += std::max(0.0, ext - double(g.stride[a])) * (a == 1 ? 1.0 : double(g.in[1]));
    }
    const double src_w = double(std::min(g.in[2], g.segment * g.stride[2] + (g.k[2] - 1) * g.dil[2] + 1));
    const double bytes = pixels * double(p.oc()) * es + src_rows * src_w * double(p.ic()) * es;
    const double calls_px = pixels * double(div_up(plan.blk.tiles, plan.grid.tile_threads));
    const double lines = std::ceil(Cost::prefetch_ahead * bytes / 64.0 / calls_px);
    return static_cast<int>(std::clamp(lines, dw ? 2.0 : 1.0, double(Cost::max_prefetch_lines)));
}

}  // namespace

Problem padded_problem(const Problem& p) {
    Problem q = p;
    for (int a = 0; a < 3; ++a) {
        q.in[a] = p.in[a] + p.pad_begin[a] + p.pad_end[a];
        q.pad_begin[a] = q.pad_end[a] = 0;
    }
    return q;
}

std::array<int64_t, 2> balance(int64_t total, int64_t n, int64_t i) {
    const int64_t base = total / n, extra = total % n;
    const int64_t begin = i * base + std::min(i, extra);
    return {begin, begin + base + (i < extra ? 1 : 0)};
}

WeightsThreadGrid plan_thread_grid(int64_t tiles, int64_t slices, int nthreads) {
    WeightsThreadGrid best;
    int64_t best_work = INT64_MAX;
    for (int t = 1; t <= nthreads; ++t) {
        for (int s = 1; t * s <= nthreads; ++s) {
            if (t > tiles || s > slices) continue;
            // Busiest thread's (slice, tile) pairs; ties to more slice
            // threads: each thread then streams less src / diff_dst.
            const int64_t work = div_up(tiles, t) * div_up(slices, s);
            if (work < best_work || (work == best_work && s > best.slice_threads)) {
                best_work = work;
                best.tile_threads = t;
                best.slice_threads = s;
                best.nthr = t * s;
            }
        }
    }
    return best;
}

namespace {

// A kernel descriptor's byte-wide field; a value past it is a planner bug
// that would emit the wrong kernel, never a silent truncation.
[[noreturn]] __attribute__((noinline)) void u8_overflow(int64_t v, const char* field) {
    throw std::logic_error(std::string("weights kernel descriptor: ") + field + " = " + std::to_string(v) +
                           " does not fit its byte");
}
// (The throw out of line: the plan search builds a desc per candidate tile.)
inline uint8_t u8(int64_t v, const char* field) {
    if (v < 0 || v > UINT8_MAX) u8_overflow(v, field);
    return static_cast<uint8_t>(v);
}
inline int32_t i32(int64_t v, const char* field) {
    if (v < INT32_MIN || v > INT32_MAX)
        throw std::logic_error(std::string("weights kernel descriptor: ") + field + " = " + std::to_string(v) +
                               " does not fit 32 bits");
    return static_cast<int32_t>(v);
}

}  // namespace

WeightsKernelDesc WeightsPlan::desc(int m, int n, int tail_lanes, int64_t tap_disp, int kh, int64_t row_disp,
                                    int stage) const {
    // kw windows: the last argument names the W phase (no stage copies
    // there); pair_dst plans: kDstInRegs = diff_dst paired in registers.
    const int phase = kw_phases > 0 ? stage : 0;
    const bool in_regs = pair_dst && stage == kDstInRegs;
    if (kw_phases > 0 || pair_dst) stage = 0;
    WeightsKernelDesc d{};  // every byte is a field (static_assert on its size): no padding to clear
    d.isa = static_cast<uint8_t>(isa);
    d.kind = static_cast<uint8_t>(blk.kind);
    const bool dw = blk.kind == WeightsKernelKind::depthwise;
    d.m = u8(dw ? m * blk.lane_group : m, "m");
    d.lane_group = u8(dw ? blk.lane_group : 1, "lane_group");
    d.n = u8(n, "n");
    d.tail = u8(tail_lanes, "tail");
    d.dot = pairs || w_pairs ? 1 : 0;
    // bf16 depthwise on avx512_core_bf16 without W pairs: one product a lane
    // on vdpbf16ps from zero-extended loads (a load each, where widening
    // to f32 takes a load and a shift), in tiles whose accumulators cover
    // its latency (Cost::zero_ext_min_accumulators).
    if (dw && !w_pairs && dt == data_type::bf16 && isa >= Isa::avx512_core_bf16 &&
        int64_t(d.m) * kh * n >= Cost::zero_ext_min_accumulators)
        d.dot = 2;
    // The kernels read 32-bit elements (f32, staged, pairs), or widen 16-bit
    // ones as they load them (depthwise in place; gemm stage copies).
    d.in_dt = static_cast<uint8_t>(elem_bytes() == 4 && !stage && !in_regs ? data_type::f32 : dt);
    d.pair_dst = in_regs ? 1 : 0;
    d.window = u8(blk.kind == WeightsKernelKind::depthwise ? blk.window : 1, "window");
    if (blk.kind == WeightsKernelKind::depthwise && blk.whole_rows) {
        const WholeRowEdges e = whole_row_edges(geo);
        d.row_px = u8(geo.out[2], "row_px");
        d.row_lo = u8(e.lo, "row_lo");
        d.row_cut = u8(e.cut, "row_cut");
    }
    d.w_stride = u8(d.window > 1 || d.row_px ? geo.stride[2] : 0, "w_stride");
    // A single-tap depthwise tile without windows (which step by it) never
    // uses the displacement: share it.
    const bool uses_disp = blk.kind == WeightsKernelKind::depthwise && (m > 1 || d.window > 1 || d.row_px);
    d.tap_disp = uses_disp ? static_cast<int32_t>(tap_disp) : 0;
    d.kh = u8(kh, "kh");
    d.row_disp = kh > 1 ? static_cast<int32_t>(row_disp) : 0;
    if (d.row_px && blk.row_block > 1) {
        d.row_block = u8(blk.row_block, "row_block");
        d.h_stride = u8(geo.stride[1], "h_stride");
        d.row_disp = static_cast<int32_t>(row_disp);
        d.dst_row_disp = static_cast<int32_t>(geo.out[2] * (geo.g * geo.ocg * elem_bytes() + window_pad));
    }
    d.stage = u8(stage, "stage");
    d.pf_lines = u8(pf_lines, "pf_lines");
    d.pf_steps = pf_steps > 1 && blk.kind == WeightsKernelKind::gemm ? u8(pf_steps, "pf_steps") : 0;
    if (dw_stream && d.row_px) {
        const auto [la_src, la_dst] = dw_stream_ahead(*this, kh);
        d.la_src = static_cast<int32_t>(la_src);
        d.la_dst = static_cast<int32_t>(la_dst);
        d.h_stride = u8(geo.stride[1], "h_stride");
    }
    d.ic_loop = ic_loop(stage) ? 1 : 0;
    d.store_dt = static_cast<uint8_t>(store_rounded ? dt : data_type::f32);
    if (blk.kind == WeightsKernelKind::gemm && kw_phases > 0) {
        const KwPhase& f = kw_phase[static_cast<size_t>(phase)];
        d.kw_win = u8(f.taps, "kw_win");
        d.kw_head = u8(f.head, "kw_head");
        d.kw_tail = u8(f.tail, "kw_tail");
        d.kw_pad = u8(std::min(f.pad, f.taps - 1), "kw_pad");
    }
    if (blk.kind == WeightsKernelKind::gemm && kw_lanes) {
        d.kw_lanes = 1;
        d.lane_pairs = lane_pairs ? 1 : 0;
        d.kw_win = u8(geo.k[2], "kw_win");
        d.kw_head = u8(lanes.head, "kw_head");
        d.kw_tail = u8(lanes.tail, "kw_tail");
        d.kw_pad = u8(lanes.pad, "kw_pad");
        d.kw_last = u8(lanes.last, "kw_last");
        d.w_stride = u8(geo.stride[2], "w_stride");
        d.tap_disp = static_cast<int32_t>(tap_disp);  // a src pixel
    }
    if (blk.kind == WeightsKernelKind::gemm && folded_taps()) {  // m: the tile's rows, fold_kd x fold_kh runs
        const int64_t runs = fold_kh * fold_kd;
        if (m % runs) throw std::logic_error("weights plan: a folded-tap tile of " + std::to_string(m) + " rows");
        const auto [row, plane] = fold_run_disps(geo);
        d.m = u8(m / runs, "m");
        d.kh = u8(fold_kh, "kh");
        d.kd = u8(fold_kd, "kd");
        d.row_disp = i32(row, "row_disp");
        d.plane_disp = fold_kd > 1 ? i32(plane, "plane_disp") : 0;
    }
    d.acc_sets = u8(gemm_acc_sets(d), "acc_sets");
    return d;
}

// Accumulator sets of a gemm kernel (WeightsKernelDesc::acc_sets; 0 = one):
// f32 in place, without windows, lanes or pairs, enough sets that the
// tile's chains cover the FMA latency times the FMAs a cycle, as many as
// the registers hold (up to 4).
int gemm_acc_sets(WeightsKernelDesc d) {
    if (d.kind != static_cast<uint8_t>(WeightsKernelKind::gemm) || d.dot || d.in_dt || d.stage || d.kw_win ||
        d.kw_lanes || d.pair_dst)
        return 0;
    const double chains = Cost::fma_per_cycle * Cost::fma_latency;
    const int regs = static_cast<Isa>(d.isa) >= Isa::avx512_core ? 32 : 16;
    const int rows = weights_tile_rows(d);
    for (int sets = std::min(4, static_cast<int>(std::ceil(chains / (rows * d.n)))); sets > 1; --sets) {
        d.acc_sets = static_cast<uint8_t>(sets);
        if (weights_kernel_vregs(d) <= regs) return sets;
    }
    return 0;
}

// Depthwise whole rows: the src columns a row reads inside src (see
// WeightsKernelDesc::row_px; one kw tile of every tap).
WholeRowEdges whole_row_edges(const WeightsGeometry& g) {
    const int64_t columns = g.stride[2] * (g.out[2] - 1) + g.k[2];  // column c is iw = c - pad
    return {std::max<int64_t>(0, g.pad[2]), std::max<int64_t>(0, columns - (g.in[2] + g.pad[2]))};
}

std::array<int64_t, 2> valid_ow(const WeightsGeometry& g, int64_t kw) {
    const int64_t shift = kw * g.dil[2] - g.pad[2];  // iw = ow * s + shift
    const int64_t s = g.stride[2];
    const int64_t lo = shift >= 0 ? 0 : (-shift + s - 1) / s;
    const int64_t last = g.in[2] - 1 - shift;  // ow * s <= last
    const int64_t hi = last < 0 ? 0 : std::min(g.out[2], last / s + 1);
    return {lo, std::max(lo, hi)};
}

// Tap 0 has the latest first valid pixel, the last tap the earliest end.
WeightsPlan::WEdges WeightsPlan::w_edges() const {
    const int64_t s = geo.stride[2], ext = (geo.k[2] - 1) * geo.dil[2] + 1;
    const int64_t left = std::min(valid_ow(geo, 0)[0], geo.out[2]);
    const int64_t right = std::max(left, valid_ow(geo, geo.k[2] - 1)[1]);
    auto width = [&](int64_t q) { return q > 0 ? (q - 1) * s + ext : 0; };
    return {left, right, width(left), width(geo.out[2] - right)};
}

namespace {

// The plan after its blocking: the reduction, the thread grid, streamed
// depthwise passes, the prefetch distance.
void finish_plan(WeightsPlan& plan, const Problem& p, int nthreads) {
    if (blocked_ok(plan)) {
        plan.blocked = true;
        plan.src_pitch = 4 * plan.blk.m;
        plan.dst_pitch = 4 * plan.blk.n * plan.blk.vlen;
    }
    choose_reduction(plan, p);
    plan.store_rounded = plan.rounded() && plan.direct_weights && plan.isa >= Isa::avx512_core &&
                         plan.blk.kind == WeightsKernelKind::gemm && !plan.kw_lanes && !plan.blocked &&
                         plan.red.slices == 1 && plan.red.chunks == 1;
    plan.grid = plan_thread_grid(plan.blk.tiles, plan.red.slices, std::max(nthreads, 1));
    plan.dw_stream = dw_stream_ok(plan);
    if (plan.dw_stream) {  // a chunk per slice
        WeightsReduction& r = plan.red;
        r.chunk_rows = div_up(r.rows, r.slices);
        r.chunks = div_up(r.rows, r.chunk_rows);
        r.slices = std::min(r.slices, r.chunks);
        r.chunk_bytes = chunk_bytes(plan, p);
    }
    plan.pf_lines = plan.dw_stream ? 0 : plan_prefetch_lines(plan, p);
    const int group_steps = group_prefetch_steps(plan, p);
    plan.group_prefetch = group_steps > 0;
    plan.pf_steps = std::max(1, group_steps);
    if (plan.group_prefetch) plan.pf_lines = 1;
}

// What plan_weights_with may choose; plan_weights compares the alternatives.
struct PlanChoices {
    bool pairs = true;        // bf16 depthwise W pairs (w_pairs)
    bool tile_major = true;   // the tile-major pass for AVX2's wide 1x1 layers
    bool pad_windows = true;  // AVX2 depthwise windows of wider pixels (WeightsPlan::window_pad)
    bool fold_taps = true;    // folded taps on a padded src (fold_taps_ok)
    bool pair_images = true;  // bf16 image pairs on avx512_core_bf16 (WeightsPlan::pairs)
    bool folding = false;     // (set by the fold_taps branch: this is the padded problem; fold if a tile fits)
};

// Every choice open but `closed` (named, not a row of positional bools).
PlanChoices without(bool PlanChoices::*closed) {
    PlanChoices c;
    c.*closed = false;
    return c;
}

WeightsPlan plan_weights_with(const Problem& p, Isa isa, int nthreads, const PlanChoices& choices = {}) {
    const bool pairs_ok = choices.pairs, tile_major_ok = choices.tile_major;
    if (choices.fold_taps && fold_taps_ok(p, isa, choices.pair_images)) {
        PlanChoices inner = choices;
        inner.fold_taps = false;
        inner.folding = true;
        WeightsPlan plan = plan_weights_with(padded_problem(p), isa, nthreads, inner);
        if (plan.folded_taps() && plan.blk.m == plan.gemm_rows()) {  // (one tile of them: the search found it)
            plan.prepad = true;
            plan.ncx_windows = plan.nxc_windows = plan.ncx_rows = false;  // the pad pass reads whole NXC images
            plan.window_pad = 0;
            return plan;
        }
    }
    if (pairs_ok && prepad_src(p, isa)) {
        WeightsPlan plan = plan_weights_with(padded_problem(p), isa, nthreads, choices);
        plan.prepad = true;
        plan.ncx_windows = plan.nxc_windows = plan.ncx_rows = false;  // the pad pass reads whole NXC images
        plan.window_pad = 0;
        return plan;
    }
    WeightsPlan plan;
    plan.dt = p.dt;
    // Depthwise reads 16-bit tensors in place (memory bound: no staging, no
    // image pairs). bf16 with vdpbf16ps pairs consecutive pixels of a row
    // instead, where a pixel window shares each paired src vector between
    // taps (W stride 1 or 2, dilation 1, kernels of 3 taps or more; depthwise
    // only, lane groups permute their loads): the widened FMAs of a 3x3
    // depthwise tile are bound by the FMA pipe, and W pairs halve its work
    // (AMD Zen 4, bf16, 1 thread, min of 5 at mb 8: MobileNetV2 / EfficientNet
    // 32 channels at 112x112 1.33-1.34x, 144 at 56x56 1.26x; 2 threads, mb
    // 32: 3x3 at 7x7-28x28 1.13-1.18x, 5x5 1.15-1.24x, ConvNeXt 7x7 1.09-1.50x,
    // the DRAM-bound 112x112 layers 0.94-1.01x). At W stride 2 pair u's tap
    // k reads src pair (4u + k, 4u + k + 2), one vpermt2w per vdpbf16ps
    // whether or not the loads are shared: against widened FMAs, 1 thread,
    // mb 8, min of 5: MobileNetV2 3x3 s2 at 7-28 px 1.24-1.37x, EfficientNet
    // 5x5 s2 1.25-1.36x, 96 channels at 112x112 (DRAM-bound) 0.90-1.03x
    // (1.35x at mb 1).
    const bool dw = is_depthwise(p, isa);
    plan.pairs = choices.pair_images && p.dt == data_type::bf16 && isa >= Isa::avx512_core_bf16 && !dw;
    plan.w_pairs = dw && pairs_ok && w_pairs(p, isa);
    // bf16 depthwise without W pairs keeps avx512_core_bf16 where it has
    // it: its kernels of enough accumulators multiply on vdpbf16ps (desc()).
    const bool bf16_dw = dw && p.dt == data_type::bf16 && isa >= Isa::avx512_core_bf16;
    plan.isa = plan.pairs || plan.w_pairs || bf16_dw ? Isa::avx512_core_bf16
               : isa >= Isa::avx512_core            ? Isa::avx512_core
                                                    : Isa::avx2;
    plan.geo = make_geometry(p, plan.pairs);
    plan.blk.kind = dw ? WeightsKernelKind::depthwise : WeightsKernelKind::gemm;
    if (dw) plan.blk.lane_group = static_cast<int>(p.icg);
    // (Folded taps read 16-bit diff_dst in place: see WeightsPlan::src_widened.)
    plan.staged = p.dt == data_type::f32 ? stage_f32(p, plan)
                                         : plan.blk.kind == WeightsKernelKind::gemm && !choices.folding;
    plan.compress_w = plan.staged && p.k[2] == 1 && p.stride[2] > 1;
    // Staged unpadded 1x1 chunks go tile-major. AVX-512 copies them inside
    // the kernels (stage_in_kernel; 16-bit types widened or paired as they
    // are copied). f32 gains on every such layer (ResNet-50 1x1 layers, 2
    // threads, against row staging: +3..+10 % on the narrow ones, up to +34 %
    // on the wide ones). A separate pass that scatters each chunk costs
    // about as much as the FMAs of a narrow layer (ResNet-50 64->256 at
    // 56x56: -10 %), and 16-bit copies inside the kernels cost narrow layers
    // too (bf16 pairs: 64->64 -12 %, 512->128 -9 %), so those go tile-major
    // only where a row-major pixel stride reaches 4 KiB (one L1 set per line
    // of a tile), where it gains (pass: 1024->2048 s2 at 7x7 +67 %, 256->1024
    // +42 %; bf16 pairs in the kernels over the pass: +5..+13 %).
    const bool wide = std::max(p.ic(), p.oc()) * 4 >= Cost::tile_major_stride_bytes;
    const bool in_kernel = plan.isa >= Isa::avx512_core && (p.dt == data_type::f32 || wide);
    plan.tile_major = plan.staged && p.k_sp() == 1 && (tile_major_ok || in_kernel) &&  // staged: gemm only
                      p.pad_begin == std::array<int64_t, 3>{} && p.pad_end == std::array<int64_t, 3>{} &&
                      (in_kernel || wide);
    plan.stage_in_kernel = plan.tile_major && in_kernel;
    plan.blk.vlen = plan.isa == Isa::avx2 ? 8 : 16;
    plan.transpose_inputs = !p.nxc;
    plan.ncx_windows = plan.transpose_inputs && dw;
    plan.ncx_rows = plan.transpose_inputs && !dw;
    // Depthwise on pixels a multiple of 2 KiB apart: windows whose pixels
    // are a line further apart (WeightsPlan::window_pad; in NXC copied from
    // the user's tensors, nxc_windows; in NCX the transposes write them so).
    // AVX2 in every type; AVX-512 NXC f32, where plan_weights keeps the
    // in-place plan when it reads better; and NCX windows on both ISAs in
    // every type from pixels a multiple of 512 bytes (AVX2 on AMD Zen 5, 2
    // threads, min of 3-5, 1 KiB and 1.5 KiB pitches: MobileNet v1 conv4_x
    // f32 and 16-bit, conv5_x 16-bit, ConvNeXt-T s3 / s4 1.02-1.24x; EfficientNet-B0
    // 1152 channels 5x5 0.88-1.02x by run). AMD Zen 3, 1 thread, 3x3 at
    // 7x7, mb 8, in place: 1024 channels ran 6-7x slower than 1032 or 1040
    // (1.0 ms against 0.12-0.16 ms), 512 channels 2.5x slower than 520 or 528.
    const int64_t pitch = p.ic() * plan.elem_bytes();
    const bool pad_ncx = plan.ncx_windows && pixels_in_few_l1_sets(pitch);
    // AVX-512 NXC 16-bit: only dilated rows whose taps' lines crowd an L1
    // set past its ways (with W dilation no src vector is shared between
    // taps, so each tap's load misses there). AMD Zen 4, 2 threads, mb 8,
    // min of 5, against in place: QuartzNet c2 (512 channels, 87 taps at
    // dilation 2) bf16 1.89x, f16 1.73x; undilated rows that crowd a set
    // (QuartzNet b3-b5, 51-75 taps) f16 0.85-0.89x, and 16-bit windows
    // from 512-byte pitches on the other depthwise layers 0.55-0.96x
    // (MobileNet v1 conv4-conv6, ConvNeXt-T s4, RepLKNet-31B s2 / s4), but
    // RepLKNet-31B s3 (27x27 at 14x14, one-tap tiles) 1.52x.
    const bool dilated_crowd = plan.isa >= Isa::avx512_core && p.nxc && p.dt != data_type::f32 && p.dil[2] > 1 &&
                               lines_per_l1_set(p.k[2], pitch * p.dil[2]) > kL1LinesPerSet;
    const bool pad =
            (pixels_share_l1_sets(pitch) && (plan.isa == Isa::avx2 || p.dt == data_type::f32)) || dilated_crowd;
    if (choices.pad_windows && dw && (pad || pad_ncx)) {
        plan.window_pad = kCacheLineBytes;
        plan.nxc_windows = !plan.ncx_windows;
    }
    // Lane groups flush (kw, ic) rows as one run.
    plan.direct_weights = p.wei_str.o == 1 && (plan.blk.lane_group == 1 || kw_ic_rows_consecutive(p));
    plan.weights_elems = p.output_elems;
    if (fold_kw(p, plan)) plan.fold_kw = p.k[2];
    if (choices.folding) choose_fold_taps(plan);
    // Staged rows long enough to be cut into segments (choose_reduction)
    // leave kw windows and kw lanes, whose rows stay whole, for the plain
    // tiles on segments: AMD Zen 5, 2 threads, f32, min of 3: 8 groups of
    // 16 channels at 30000 samples (30 MB chunks) 2.71x, 16 channels 1.11x
    // (30000 samples, k3) / 1.14x (15000, s2). Lane pairs (groups of 8)
    // keep theirs: without them half the lanes idle (32 groups at 4000
    // samples, s2, 0.91x).
    bool cut = plan.staged && !plan.geo.merged && long_rows(plan.geo, int64_t(chunk_pixels(plan, 1)));
    // f32 of few output channels on such rows in NXC reads them in place
    // instead, on kw lanes over whole rows (each line of a row is read by
    // one tile once): AMD Zen 5, 2 threads, mb 8, min of 3, 1D heads of 1-4
    // output channels on 16000-60000 samples 1.06-3.47x. (Not NCX: its
    // windows would then hold whole rows, 61 MB a thread at 256 channels x
    // 60000 samples.)
    if (cut && p.nxc && p.dt == data_type::f32 && few_oc_lanes(p, plan.isa) && kw_lanes_ok(p, plan)) {
        plan.staged = false;
        cut = false;
    }
    if (kw_window_ok(p, plan) && !cut) {
        plan.kw_phases = plan.geo.stride[2];
        for (int64_t r = 0; r < plan.kw_phases; ++r) plan.kw_phase[static_cast<size_t>(r)] = kw_phase(plan.geo, r);
    }
    if (kw_lanes_ok(p, plan) && (!cut || lane_pairs_ok(p, plan.isa))) {
        plan.kw_phases = 0;
        plan.kw_lanes = true;
        plan.lanes = kw_lanes_geometry(plan.geo);
        plan.lane_pairs = lane_pairs_ok(p, plan.isa);
    }
    plan.src_pitch = staged_pitch(plan, p, p.ic() * 4, plan.compress_w ? 1 : p.stride[2]);
    plan.dst_pitch = staged_pitch(plan, p, p.oc() * 4, 1);
    // Row-staged bf16 pairs in NXC pair diff_dst in the kernels (set before
    // the blocking, which then counts the kernels' registers; pairs are
    // never blocked, that is AVX2's) on chunks of up to an L2: see below.
    plan.pair_dst = plan.pairs && plan.staged && p.nxc && !plan.tile_major && plan.kw_phases == 0 && !plan.kw_lanes &&
                    plan.fold_kw <= 1 && !plan.ncx_rows;
    const WeightsPlan before_blocking = plan;
    if (!dw || !choose_row_block(plan)) choose_blocking(plan);
    if (plan.kw_phases > 0) {  // the taps of a W phase in the tile, the channels split evenly
        WeightsBlocking& b = plan.blk;
        const WeightsGeometry& g = plan.geo;
        b.n = b.n_last = static_cast<int>(kw_window_vecs(p, plan.isa));
        b.n_tiles = 1;
        b.m_tiles = 0;
        for (int64_t r = 0; r < plan.kw_phases; ++r) {
            WeightsPlan::KwPhase& f = plan.kw_phase[static_cast<size_t>(r)];
            const int64_t max_m = std::min(g.icg, kw_window_max_m(p, plan.isa, f.taps));
            f.m_tiles = div_up(g.icg, max_m);
            f.m = div_up(g.icg, f.m_tiles);
            f.m_last = g.icg - (f.m_tiles - 1) * f.m;
            if (f.m_tiles > b.m_tiles) {  // the blocking's rows: the phase of the most tiles
                b.m_tiles = f.m_tiles;
                b.m = static_cast<int>(f.m);
                b.m_last = static_cast<int>(f.m_last);
            }
        }
        b.tiles = g.k[0] * g.k[1] * plan.kw_phases * b.m_tiles * g.g;
        // Per src pixel and tile: m * T FMAs, m broadcasts and a diff_dst load.
        const double latency = plan.isa == Isa::avx2 ? Cost::fma_latency_avx2 : Cost::fma_latency;
        double cycles = 0;
        for (int64_t r = 0; r < plan.kw_phases; ++r) {
            const WeightsPlan::KwPhase& f = plan.kw_phase[static_cast<size_t>(r)];
            const double n = b.n;
            auto tile = [&](double m) {
                return tile_cycles(m * f.taps * n, m + n, m * f.taps * n + m + n + 2, latency);
            };
            cycles += (double(f.m_tiles - 1) * tile(double(f.m)) + tile(double(f.m_last))) * double(f.row_px);
        }
        b.cycles_per_pixel = double(g.k[0] * g.k[1] * g.g) * cycles / double(g.out[2]);
    }
    if (plan.kw_lanes) {  // every kw tap of m output channels, a group's input channels in the lanes
        WeightsBlocking& b = plan.blk;
        const WeightsGeometry& g = plan.geo;
        b.n = b.n_last = 1;
        b.n_tiles = plan.lane_pairs ? 1 : div_up(g.icg, b.vlen);  // a vector of input channels a tile
        b.tail = plan.lane_pairs ? 0 : static_cast<int>(g.icg % b.vlen);
        b.m_tiles = div_up(g.ocg, std::min(g.ocg, kw_lanes_max_m(g.k[2])));
        b.m = static_cast<int>(div_up(g.ocg, b.m_tiles));
        b.m_last = static_cast<int>(g.ocg - (b.m_tiles - 1) * b.m);
        b.tiles = g.k[0] * g.k[1] * b.m_tiles * b.n_tiles * (plan.lane_pairs ? div_up(g.g, 2) : g.g);
        // Per output pixel and tile: m * KW FMAs, m broadcasts and KW src loads.
        const double kw = double(g.k[2]);
        auto tile = [&](double m) { return tile_cycles(m * kw, m + kw, m * kw + m + kw + 3, Cost::fma_latency); };
        const double cycles = double(b.m_tiles - 1) * tile(b.m) + tile(b.m_last);
        const int64_t groups = plan.lane_pairs ? div_up(g.g, 2) : g.g;
        b.cycles_per_pixel =
                double(g.k[0] * g.k[1] * groups * b.n_tiles) * cycles * double(plan.lanes.row_px) / double(g.out[2]);
    }
    finish_plan(plan, p, nthreads);
    // diff_dst paired in registers instead of staged pairs: the kernels
    // read both images' bf16 and interleave them (two loads and two
    // shuffles per pair of vectors, where staged pairs are two loads), and
    // no pass writes 4 bytes per channel and pixel pair for them to read
    // back. AMD Zen 5, 2 threads, tools/sweep_ab.py --min against staging
    // both: 80 such layers of the shape sets at mb 8 1.045x (chunks of up
    // to 1 MiB 1.056x, larger ones 1.008x); ResNet-50 at mb 32 (5 rounds)
    // res2a_branch2a 1.18x, res2a_branch1 1.11x, res3a_branch2c 1.08x, the
    // others on chunks of up to 1 MiB 0.98-1.02x, but those on chunks past
    // L2 (1.5-3 MiB, W stride 2) 0.89-0.93x.
    // Tiles of one vector pair it by zero-extension (two loads, a shift and
    // an or per read), against staging once: only where each diff_dst
    // vector is read a few times (taps x ic tiles). One-vector layers, same
    // runs at mb 32, 5 rounds: grouped 3x3 of 8 channels a group
    // (RegNetY s3, ResNeXt-50 conv3) 0.92-0.97x, 16 -> 16 3x3x3 0.95x;
    // 1D kernels of 2-5 taps at mb 8 1.04-1.42x.
    if (plan.blk.n == 1 && p.k_sp() * plan.blk.m_tiles > Cost::pair_dst_max_lone_reads) plan.pair_dst = false;
    if (plan.red.chunk_bytes > Cost::pair_dst_max_chunk) plan.pair_dst = false;
    // Depthwise whose cost model chose pixels one at a time or windows
    // where whole rows would stream: whole rows. Against those (AMD Zen 5,
    // 2 threads, min of 3-5): MobileNetV2 b13 (576 channels 14 -> 7) f32 at
    // mb 8 / 16 / 32 1.13x / 1.48x / 1.50x, 960 channels 3x3 s2 1.14x / 1.44x;
    // on AVX2 (windows there) 1.03-1.73x at mb 8-32 (EfficientNet-B0's 5x5
    // layers widened from 16 bits 1.13-1.73x), none below 0.96x.
    if (dw && !plan.dw_stream && !plan.blk.whole_rows && plan.blk.row_block <= 1 && whole_rows_ok(before_blocking)) {
        WeightsPlan rows = before_blocking;
        choose_blocking(rows, true);
        if (rows.blk.whole_rows) {
            finish_plan(rows, p, nthreads);
            if (rows.dw_stream) return rows;
        }
    }
    return plan;
}

}  // namespace

WeightsPlan plan_weights(const Problem& p, Isa isa, int nthreads) {
    WeightsPlan plan = plan_weights_with(p, isa, nthreads);
    // bf16 image pairs against widened taps folded into one tile on a
    // padded src (fold_taps_ok), by the estimate of the whole reduction
    // (pairs run half the rows): pairs double the FMA rate, but a layer of
    // one input channel and one vector of output channels pairs into tiles
    // of a kernel row's taps only (3D U-Net's 1 -> 16 3x3x3 input: m3 x n1,
    // 54 cycles a pixel pair, against m27 x n1 at 14 a pixel). The folded
    // plan must be estimated kFoldWidenedMargin times cheaper. Against the
    // pairs, AMD Zen 4, 2 threads, min of 5 (tools/sweep_ab.py): estimated
    // 1.93x cheaper, the 3D U-Net input 1.65x at mb 32 (1.39x at mb 2), 1 ->
    // 16 3x3x3 at 64^3 1.37x; 1.8x cheaper, 1 -> 16 3x3 at 256x256 1.30x;
    // 1.15x cheaper, 1 -> 8 5x5 at 128x128 0.67x; the RGB stems, ESPCN's
    // and U-Net's 1-channel inputs (within 1.1x, or pairs cheaper)
    // 0.60-0.94x when forced to fold.
    constexpr double kFoldWidenedMargin = 1.5;
    if (plan.pairs && !plan.prepad && fold_taps_ok(p, isa, false)) {
        const WeightsPlan widened = plan_weights_with(p, isa, nthreads, without(&PlanChoices::pair_images));
        auto cycles = [](const WeightsPlan& x) {
            return x.blk.cycles_per_pixel * double(x.red.rows) * double(x.geo.segment);
        };
        if (widened.prepad && kFoldWidenedMargin * cycles(widened) < cycles(plan)) return widened;
    }
    // bf16 depthwise W pairs (W stride 1 here, but for kernels of one row:
    // w_pairs) against bf16 widened as it is loaded, where the widened plan
    // streams (WeightsPlan::dw_stream): AMD Zen 5, 2 threads, min of 5, mb 8
    // / 32: MobileNetV2 b14 1.31x / 1.32x, 1152 channels 3x3 1.86x / 1.25x
    // and 5x5 (EfficientNet-B0 b6) 1.80x / 2.37x, 672 channels 5x5 at 14x14
    // 1.49x / 1.29x (measured before widened loads fed vdpbf16ps, which
    // adds to them). One-row kernels of 3 taps at W stride 2 keep pairs.
    if (plan.w_pairs && !plan.prepad && (p.stride[2] == 1 || p.k[2] > 3)) {
        WeightsPlan widened = plan_weights_with(p, isa, nthreads, without(&PlanChoices::pairs));
        if (widened.dw_stream) return widened;
    }
    // Depthwise on pixels a multiple of 2 KiB apart (AVX-512 NCX: of 512
    // bytes; see plan_weights_with): the windows of wider pixels against the
    // plan in place.
    // - AVX2: row blocks in place where they fit (their measured remedy for
    //   those pitches, see choose_row_block), windows where not. Against in
    //   place, AMD Zen 3, 2 threads, min of 5-7: MobileNet v1 conv6/dw (1024
    //   channels at 7x7) 2.71x at mb 8, 1.58x at mb 32; conv5_6/dw (512,
    //   14 -> 7) 1.62x at mb 8; 512 channels 5x5 at 28x28 2.23x and a 1D k5
    //   layer of 400 pixels 1.37x at mb 32. The row-block layers against
    //   windows: 512 / 1024 channels at 14x14 0.86-1.73x, too noisy to move
    //   them.
    // - AVX-512 NCX: always (its windows are copies either way). Against
    //   the unpadded windows, AMD Zen 5, 2 threads, min of 5, f32: 5x5 and 1D
    //   k31 layers of 512-2048 channels 2.6-4.8x at mb 1 and 8, 3x3 s2 and
    //   dilated ones (MobileNet v1 conv5_6/dw, 1024 / 2048 channels) 2.4-5.1x
    //   at mb 1, 8 and 32, the row-block layers (conv5_1/dw, conv6/dw, 1024
    //   channels 3x3x3) 1.9-3.5x; bf16 / f16 at mb 8, 1024 / 2048 channels:
    //   1.3-3.0x. Pixels of 512 bytes to 1.5 KiB (min of 3-5, mb 8 / 32):
    //   f32 MobileNet v1 conv3_x / conv4_x 1.05-1.45x, 256 / 768 channels 5x5
    //   and 1D k31 1.01-1.55x, ConvNeXt-T s3 1.07x, MobileNetV2 b7 0.94 /
    //   0.99x; bf16 / f16 at mb 8 1.01-1.12x. (At 256-byte multiples of 16
    //   sets, MobileNet v1 conv2_2 and 192-960 channels: 0.91-1.16x, left.)
    // - AVX-512 NXC, f32: where the tiles in place are at most two vectors
    //   wide and take no row blocks (a tile's line of each pixel then sits
    //   in one or two L1 sets). Same host, mb 1 / 8 / 32: 1024 / 2048
    //   channels 5x5 (s1, s2) 1.10-1.59x, 1D k31 1.06-1.56x, 1D k5 0.94 /
    //   1.16 / 1.41x, 512 channels 5x5 at 28x28 0.97 / 1.12 / 1.12x. Against
    //   three-vector tiles (3x3 s2, dilated) the copy costs what it saves
    //   (0.68-1.54x, geomean 0.88 over 12 cells), against row blocks too
    //   (0.56-1.42x, 0.86), and against the 16-bit kernels (0.58-1.27x).
    if (plan.window_pad) {
        WeightsPlan in_place = plan_weights_with(p, isa, nthreads, without(&PlanChoices::pad_windows));
        const bool keep = plan.isa == Isa::avx2 ? in_place.blk.row_block > 1
                                                : !plan.ncx_windows && (in_place.blk.row_block > 1 || in_place.blk.n > 2);
        if (keep) return in_place;
    }
    // AVX2's wide 1x1 layers at unit stride: blocked rows where they can be
    // blocked (blocked_ok), not the tile-major pass. AMD Zen 3 (AVX2 only),
    // 2 threads, mb 32, min of 5: 1.02-1.63x over 23 layers (ResNet-50
    // res5a_branch2c 1.22x, res4a_branch2c 1.07x, GoogLeNet-v3 mixed_10
    // 1.63x, ConvNeXt-T s3 / s4 pointwise 1.09-1.16x, MobileNetV2 /
    // EfficientNet-B0 heads 1.27-1.34x). Strided ones keep the pass: row
    // staging of their compressed rows ran 0.44-0.69x (ResNet-50 res4a / res5a
    // branch1, res5a_branch2a), and blocked rows even with it (1.00-1.07x
    // over 7 rounds).
    const bool unit_stride = p.stride == std::array<int64_t, 3>{1, 1, 1};
    if (plan.tile_major && !plan.stage_in_kernel && unit_stride) {
        WeightsPlan rows = plan_weights_with(p, isa, nthreads, without(&PlanChoices::tile_major));
        if (rows.blocked) return rows;
    }
    return plan;
}

std::string WeightsPlan::to_string() const {
    std::ostringstream os;
    const bool dw = blk.kind == WeightsKernelKind::depthwise;
    // The accumulator sets of the first tile's kernel (those calls that copy nothing).
    const int main_sets = dw ? 0 : desc(blk.m, blk.n, blk.n_tiles == 1 ? blk.tail : 0, 0).acc_sets;
    os << (dw ? "depthwise" : "gemm")
       << (blk.lane_group > 1 ? " (lane groups of " + std::to_string(blk.lane_group) + ")" : std::string())
       << (pair_dst  ? " bf16-pairs(diff_dst in registers)"
           : pairs     ? " bf16-pairs"
                                                   : staged    ? (rounded() ? " widened" : " staged")
                                                   : w_pairs   ? " paired-in-kernel"
                                                   : rounded() ? " widened-in-kernel"
                                                               : "") << " m" << blk.m << "n" << blk.n << "x" << blk.vlen
       << (main_sets > 1 ? " acc-sets=" + std::to_string(main_sets) : std::string())
       << (dw && blk.window > 1 ? " window=" + std::to_string(blk.window) : std::string())
       << (dw && blk.whole_rows ? " whole-rows" : "")
       << (dw && blk.row_block > 1 ? " row-blocks=" + std::to_string(blk.row_block) : std::string())
       << " tiles=" << blk.tiles << " ("
       << (dw ? "kw" : folded_taps() ? "taps.ic" : fold_kw > 1 ? "kw.ic" : kw_lanes ? "oc" : "ic") << ' '
       << blk.m_tiles << "x" << blk.m
       << " last " << blk.m_last << ", " << (dw ? "ch" : kw_lanes ? "ic" : "oc") << ' ' << blk.n_tiles << "x" << blk.n
       << "v last " << blk.n_last << "v tail " << blk.tail << ")"
       << " rows=" << red.rows << "x" << geo.segment << "px" << (geo.merged ? " merged" : "")
       << " chunk=" << red.chunk_rows << " rows (" << red.chunks << " chunks, " << (red.chunk_bytes >> 10)
       << " KiB) slices=" << red.slices << " grid=" << grid.tile_threads << "x" << grid.slice_threads
       << (stage_in_kernel ? " tile-major(in-kernel)" : tile_major ? " tile-major" : blocked ? " blocked" : "")
       << (src_pitch > geo.g * geo.icg * 4 || dst_pitch > geo.g * geo.ocg * 4 ? " pitch+64" : "")
       << (folded_taps() ? " fold-taps=" + std::to_string(fold_kd) + "x" + std::to_string(fold_kh) + "x" +
                                  std::to_string(fold_kw)
           : fold_kw > 1 ? std::string(" fold-kw")
                         : std::string())
       << (kw_phases > 0 ? " kw-window" : "")
       << (kw_lanes ? (lane_pairs ? " kw-lanes(group pairs)" : " kw-lanes") : "") << (prepad ? " prepad" : "")
       << (w_pairs ? " W-pairs" : "")
       << (ncx_windows        ? std::string(" ncx->nxc(windows)")
           : ncx_rows         ? std::string(" ncx->nxc(chunk rows)")
           : transpose_inputs ? std::string(" ncx->nxc")
           : nxc_windows      ? std::string(" windows")
                              : std::string())
       << (window_pad ? " window-pixels+" + std::to_string(window_pad) : std::string())
       << (direct_weights ? " direct" : " permute")
       << (pf_lines > 1 ? " prefetch " + std::to_string(pf_lines) + " lines/px" : std::string())
       << (dw_stream ? " streamed (prefetch " + std::to_string(Cost::dw_stream_rows_ahead) + " rows ahead)"
                     : std::string())
       << (!group_prefetch  ? ""
           : pf_steps > 1   ? " prefetch next group (" + std::to_string(pf_steps) + " lines/px)"
                            : " prefetch next group")
       << " est=" << static_cast<int64_t>(blk.cycles_per_pixel + 0.5) << "cyc/px\n";
    os << "  parallel slice<" << red.slices << " (" << grid.slice_threads << " thr)";
    os << " x tile<" << blk.tiles << " (" << grid.tile_threads << " thr):\n";
    os << "    for chunk in slice (" << red.chunk_rows << " rows):\n";
    if (dw)
        os << "      for kd<" << geo.k[0] << " kh_tile<" << geo.k[1] / blk.kh << " kw_tile<" << blk.m_tiles
           << " ch_tile<" << blk.n_tiles << (dw_channel_runs() ? " (one call)" : "") << ":\n        for row, px: acc["
           << blk.kh << "x" << blk.m << " taps"
           << (blk.lane_group > 1 ? "x" + std::to_string(blk.lane_group) + " ic" : std::string()) << "]["
           << blk.n << "v] += " << (blk.lane_group > 1 ? "perm_ic(src[px+tap])[ch]" : "src[px+tap][ch]")
           << " * diff_dst[px][ch]\n";
    if (!dw && kw_lanes) {
        os << (lane_pairs ? "      for g_pair<" + std::to_string((geo.g + 1) / 2) : "      for g<" + std::to_string(geo.g))
           << (blk.n_tiles > 1 ? " ic_tile<" + std::to_string(blk.n_tiles) : std::string()) << " kd<" << geo.k[0]
           << " kh<" << geo.k[1] << " oc_tile<" << blk.m_tiles << ":\n        for row, output px t (" << lanes.row_px
           << " from " << lanes.first << ", edges " << lanes.head << "+" << lanes.tail << "): acc[" << geo.k[2]
           << " kw][" << blk.m << " oc][1v ic] += bcast(diff_dst[t][oc]) * src[s*t - pad + kw][ic]\n";
    } else if (!dw) {
        os << "      for g<" << geo.g;
        if (blk.m_block < blk.m_tiles) os << " ic_block<" << (blk.m_tiles + blk.m_block - 1) / blk.m_block;
        const bool fold = fold_kw > 1;  // tile rows are (kw, ic): the kw loop is inside the tile
        os << " oc_tile<" << blk.n_tiles << " kd<" << geo.k[0] / fold_kd << " kh<" << geo.k[1] / fold_kh;
        if (!fold && kw_phases == 0) os << " kw<" << geo.k[2];
        if (kw_phases == 1) {
            const KwPhase& f = kw_phase[0];
            os << " ic_tile<" << blk.m_block << ":\n        for row, src px q: acc[" << f.taps << " kw][" << blk.m
               << " ic][1v] += bcast(src[q][ic]) * diff_dst[q+pad-kw][oc] (q<" << f.row_px << ", edges " << f.head
               << "+" << f.tail << " px)\n";
        } else if (kw_phases > 1) {
            os << " kw_phase<" << kw_phases << " ic_tile<" << blk.m_block
               << ":\n        for row, src px q = s*i + phase - pad: acc[kw = phase + s*j][" << blk.m
               << " ic][1v] += bcast(src[q][ic]) * diff_dst[i-j][oc] (phases:";
            for (int64_t r = 0; r < kw_phases; ++r) {
                const KwPhase& f = kw_phase[static_cast<size_t>(r)];
                os << ' ' << f.taps << " taps i<" << f.row_px << " edges " << f.head << "+" << f.tail
                   << (r + 1 < kw_phases ? ";" : ")\n");
            }
        } else
            os << (folded_taps() ? " taps.ic_tile<" : fold ? " kw.ic_tile<" : " ic_tile<") << blk.m_block
               << (ic_runs() ? " (one call)" : ic_runs_after_copies() ? " (one call once copied)" : "")
               << ":\n        for row, px: acc[" << blk.m
               << (fold_kd > 1 ? " kd.kh.kw.ic][" : folded_taps() ? " kh.kw.ic][" : fold ? " kw.ic][" : " ic][")
               << blk.n << "v] += bcast(src[px+tap]["
               << (folded_taps() ? "kw.ic]) (src padded)"
                   : fold        ? "kw.ic]) (W edges: zero-padded copies)"
                                 : "ic])")
               << " * diff_dst[px][oc]\n";
    }
    os << "  " << (red.slices > 1 ? "sum slices in order" : "no reduction")
       << (store_rounded ? ", tiles stored rounded to " + std::string(dtype_name(dt)) : "")
       << (direct_weights ? "" : ", permute XIO -> user layout");
    return os.str();
}

}  // namespace convgrad::detail
