#include "ops/plan_data.hpp"

#include <algorithm>
#include <array>
#include <climits>
#include <numeric>
#include <sstream>

#include "jit/bwd_data_kernel.hpp"

namespace convgrad::detail {

std::vector<PhaseTap> phase_taps(const DataGeometry& g, int64_t r) {
    std::vector<PhaseTap> taps;
    for (int64_t kw = 0; kw < g.k[2]; ++kw) {
        const int64_t t = r + g.pad[2] - kw * g.dil[2];
        if (((t % g.stride[2]) + g.stride[2]) % g.stride[2] == 0) taps.push_back({kw, floor_div(t, g.stride[2])});
    }
    return taps;
}

namespace {

// Cost model constants (one core, cycles). The machine retires two vector
// FMAs per cycle with a 4-cycle latency; measured, 8 independent
// accumulators reach only 90 % of peak and 12 all of it, and in the data
// kernel 14 (1x1 256->64: m7 x n2) ran 12 % slower than 16 (m4 x n4), so
// each accumulator is modelled as one FMA per 6 cycles (vdpbf16ps, latency
// 6, too); loads (vectors and broadcasts alike) sustain about two per
// cycle in the FMA loop (measured: m8 x n1 broadcast-bound blocks lose).
constexpr double kFmaPerCycle = 2.0;
constexpr double kFmaLatency = 6.0;
constexpr double kDotLatency = 6.0;  // vdpbf16ps: measured 5.9 cycles, 6 with the margin above
constexpr double kVecLoadsPerCycle = 2.0;
constexpr double kLoadsPerCycle = 2.0;
// AVX2 broadcasts (vbroadcastss from memory, no broadcast inside the FMA)
// count as this many loads: at 1, the broadcast-bound m14 x n1 (15 loads
// for 14 FMAs) modelled even with its FMAs and won ResNet-50
// res4a_branch2b, yet ran below m4 x n3 / m6 x n2 (AMD Zen 4, 2 threads,
// min of 3: 1.20x / 1.18x). At 1.25, 20 of 329 f32 network layers change
// plan, all of the measurable ones faster (res4a 1.21x, ResNeXt-50
// conv4 1.40x, ConvNeXt-T down3 1.19x; geomean 1.18x), and 40 bf16 / f16
// ones (1.09-1.40x over 0.4 ms, geomean 1.13x); 1.5 changes one more.
constexpr double kAvx2BcastLoads = 1.25;
// W vectors stream from L2 when a channel block's W does not fit L1.
constexpr double kL2BytesPerCycle = 32.0;
// ... and from L3 when the col path's W (every group's: each column chunk
// reads all of it) exceeds the L2 budget kWChunkBytes. ViT-B/16's patch
// embedding (768 <- 16x16x3, 2.3 MB of W) ran m5 x n5 blocks, L2-bound in
// the model, at 38-46 % of peak: one core streamed W from this host's L3
// at 8 bytes a cycle (a probe: m1 x n8 FMAs on 8 MiB of W vectors). Zen
// 4 / 5 cores read L3 at up to 32 bytes a cycle; 16 is between.
constexpr double kL3BytesPerCycle = 16.0;
constexpr int64_t kL1WBytes = 32 * 1024;
// Row-taps plans' W chunk, from L2 (ResNet-50 res5 3x3 at 7x7, 2 threads:
// f32 240-251 -> 254-267 GFLOP/s, bf16 482-487 -> 490-496 against the L1
// budget; wider chunks measured no better).
constexpr int64_t kRowTapsWBytes = 256 * 1024;
constexpr double kCallCycles = 60.0;         // one kernel call incl. entry list setup
// Instructions a core keeps in flight from consecutive blocks of one call
// (about half a Zen 4 / 5 reorder buffer): a block of few accumulators and
// a short reduction is not latency-bound when the next block overlaps it.
constexpr double kOpsInFlight = 200.0;
// Depthwise taps one at a time: the most taps a group holds (DataPlan::dw_tap_group).
constexpr int kMaxDwTapGroup = 4;
constexpr double kEntryCycles = 8.0;         // one kernel entry per block: pointers, W loads issue
// Depthwise rows read in place whose pixels are a multiple of 2 KiB apart
// (f32: 512, 1024, 1536 channels; 16-bit: 1024) put a channel vector's
// line of every pixel into two L1 sets (4 KiB apart: one). Along rows
// longer than those sets' ways hold, the pixels an entry reads (a tap
// group's, or a row's taps at once) are gone from L1 by the next entry or
// block and come from L2, at about this many cycles each however many
// vectors it holds: AMD Zen 4, one thread, mb 2, QuartzNet's 51-tap 1D
// layer (500 pixels) at 512 channels against 480 at the same blocking, 4
// taps a group, 0.44 / 0.65 / 0.88 / 0.95x at 1 / 2 / 3 / 4 vectors, at
// any m. A row's taps at once (m + KW - 1 pixels an entry) paid about twice
// that a pixel (7-15 taps at 512 channels: 0.48-0.65x). Charged as a bound
// beside the FMAs, so the search takes wider blocks of fewer pixels there
// (make_data_plan).
constexpr double kSharedSetPixelCycles = 4.0;  // pixels 2 KiB apart
constexpr double kOneSetPixelCycles = 6.0;     // 4 KiB apart
constexpr double kRowTapsSetFactor = 2.0;      // a row's taps at once
// Depthwise rows read in place emit the blocks whose taps reach past the W
// edges one by one (DataKernel::edge_row): about reach x taps (pixel, tap)
// pairs of n vectors each, all FMAs written out. Blocks whose edge code
// would exceed this many FMAs are left out of the search (n = 1 stays):
// QuartzNet c2 (87 taps at dilation 2, 172 pixels of reach) took m3 x n6
// under the set charge above, and its two kernels took 2.1 ms of cold
// creation (m10 x n2: 0.54 ms; AMD Zen 4, convgrad-bench --impl=create).
constexpr int64_t kMaxDwEdgeFmas = 32768;
// col2im: a run of one target row (a masked read-modify-write of diff_src
// and its set-up; measured 11-23 cycles on AMD Zen 4, one thread: RegNetX
// 7x7 groups of 16, 3D groups of 6, 3-channel first layers), and each
// column value added.
constexpr double kScatterCyclesPerRun = 12.0;
constexpr double kScatterCyclesPerLane = 0.2;
// A scatter call: the row's targets, the run list checked (or rebuilt) and
// walked. Measured through the col / direct choice on planes of 1-8 pixel
// rows (AMD Zen 5, 2 threads, shapes_dilated / shapes_basic at mb 8): with one
// kernel call's cost, col was still taken on 15 of 73 layers where direct ran
// 1.1-2.1x faster; with three, on 11, none above 1.77x.
constexpr double kScatterCallCycles = 180.0;
// Cache budgets: the W chunk of one channel block stays in L2 beside the
// diff_dst rows it meets; all of W stays resident when it is this small.
constexpr int64_t kWChunkBytes = 640 * 1024;
constexpr int64_t kWResidentBytes = 512 * 1024;
// Rows segmented (DataPlan::segments) when the diff_dst rows a diff_src
// row reads take more than kLongRowBytes padded; a segment's windows take
// about kSegmentBytes, beside a W chunk in L2.
constexpr int64_t kLongRowBytes = 1 << 20;
// 16-bit lane groups of 4 or more channels widen their diff_dst rows into
// padded f32 rows from rows of this many bytes (choose_padded_rows).
constexpr int64_t kLaneWidenRowBytes = 1536;
constexpr int64_t kSegmentBytes = 256 * 1024;
// Depthwise W read in place (DataPlan::w_in_place) up to this many
// diff_dst pixels a channel (f32 kernels of at most 9 taps: the first; see
// make_data_plan).
constexpr int64_t kWInPlaceSmallPixels = 1024;
constexpr int64_t kWInPlacePixels = 256;
// NCX windows of segments: a channel's run at least this long (AMD Zen 5,
// 2 threads, 1D depthwise and grouped layers in NCX: runs of 512 / 1024 /
// 2048 bytes 1.08 / 1.11 / 1.04x against segments sized for L2 alone,
// 44-pixel windows of 1536 channels were 0.55-0.87x whole rows).
constexpr int64_t kWindowSegmentRunBytes = 1024;
// A row group covers at least this many diff_src pixels a kernel tap
// reaches per channel block (group_rows_for).
constexpr int64_t kGroupPixels = 56;
// Items a thread should get at least, where the plan can cut its work finer.
constexpr int64_t kItemsPerThread = 8;
// Plain layers' images shorter than half this many pixels share W rows
// (DataGeometry::images_per_row).
constexpr int64_t kBatchRowPixels = 32;
constexpr double kRowBlockSlack = 1.1;
// Outputs at least this big (twice a core's L2) with fewer flops per output
// byte than this are written with streaming stores. Strided 1x1 layers,
// whose diff_src is three quarters zeros, gain most (ResNet-50 1x1 s2 at 2
// threads: bf16 1.25-1.64x, f32 1.12-1.49x over the former 16 MiB / 64
// thresholds). Unit-stride 1x1 layers (2·OC / element bytes flops per
// output byte) that now qualify measured neutral; 3x3 layers (at least
// 4.5·OC >= 288) keep ordinary stores.
constexpr int64_t kStreamingOutputBytes = 4 << 20;
constexpr double kStreamingFlopsPerByte = 256.0;
// ... but not strided depthwise layers (H or W stride, no D stride) whose
// diff_dst and diff_src fit in L3 (kL3Bytes): their stores, with
// each block's lines prefetched for writing, hit lines that stay in L3,
// where streaming sends all of diff_src to DRAM (AMD Zen 5, 2 threads, min
// of 3, ordinary against streaming: MobileNetV2 b6 / b13 f32 1.43-2.18x /
// 1.69-1.70x, bf16 1.31-1.34x / 1.17x; 56 -> 28 3x3 and 5x5 s2 at mb 8
// 1.45-2.13x, 112 -> 56 bf16 at mb 8 1.24-1.26x, ShuffleNet s2
// 1.03-1.88x; beyond L3 0.72-0.91x; X3D 5x5x5 s2 at 12 MB 0.94x, so
// not with a D stride; unit strides 0.88-1.06x, so they keep streaming).
// On AVX2 only within kDwCachedBytesAvx2: on the AMD Zen 3 guest (32 MiB
// L3 shared with other guests; two threads read 16 MiB at 20 GB/s)
// streaming won on the strided layers of 16-33 MB that the L3 rule kept
// cached (tools/sweep_ab.py --rounds=7 --min, f32, mb 8, 2 / 1 threads:
// EfficientNet-B0 5x5 s2 b3 2.11 / 2.76x, MobileNet v1 conv2_2 2.45 /
// 2.99x, conv3_2 1.41 / 3.69x, MobileNetV2 b3 1.84 / 2.46x; at mb 16 conv3_2
// f32 2.92x, bf16 conv2_2 / conv3_2 1.35 / 1.13x, and layers of 10-12 MB
// 0.93-0.96x). AVX-512 keeps the Zen 5's rule, against which these layers
// measured the other way.
constexpr double kDwCachedBytesAvx2 = 8 << 20;
// stream_rows: a thread's copy of its row group's diff_src rows at most this big.
constexpr int64_t kStreamRowsMaxBytes = 512 << 10;
constexpr int64_t kColBufferBytes = 32 * 1024;  // column chunk kept in L1
// 16-bit col plans widen a chunk's diff_dst once for all lane blocks from
// this many (DataPlan::col_widened). Against widening in each lane block's
// kernel (Intel Xeon, 2 threads, mb 8, min of 5): ViT / DeiT patch
// embeddings (10-24 lane blocks) 1.06-1.26x, AlexNet conv1, the I3D stem
// and small 3D test layers 0.93-1.08x; with every block count, stems and
// first layers of 1-2 blocks ran 0.73-0.96x (a pass over a chunk of up to
// 512 pixels, where the kernels widen in L1 a block at a time).
constexpr int64_t kColWidenMinBlocks = 4;
// NCX windows (DataPlan::ncx_windows): row groups of whole images where a
// channel's diff_src plane is at most kWindowPlaneBytes, else of at least
// kWindowRunBytes a channel. Both taken from the weight gradient's measured
// threshold (WeightsCostModel::ncx_window_plane_bytes), not measured apart
// for the data gradient.
constexpr int64_t kWindowPlaneBytes = 4 << 10;
constexpr int64_t kWindowRunBytes = 4 << 10;
constexpr int64_t kRowTapsMinPhasePixels = 28;   // depthwise under a W stride, see make_data_plan
constexpr int kMaxM = 16, kMaxN = 8;
// Row taps of strided rows, and of unit-stride rows wider than kMaxM: a
// block is a whole row of up to this many pixels (n = 1: 28 accumulators,
// 3 W vectors of a 3-wide kernel and the broadcast fill the 32 registers).
constexpr int kMaxRowTapsM = 28;
// Depthwise row taps need this many accumulators, else an entry per tap
// (AMD Zen 5, 2 threads, 144 ch at 200 (1D) / 256 ch at 28x28, mb 32:
// kw 27 with m3 x n1 0.64-0.84x and kw 29 with m1 x n1 0.26-0.60x the
// per-tap form; kw 21 with m7 / m9 1.2-1.5x faster, kw 25 with m5 0.89x
// (2D f32) to 1.32x (1D)).
constexpr int kMinRowTapAccs = 4;
// A block broadcasts from m pixel rows in step (problem.hpp, lines_per_l1_set):
// AVX2 1x1 512<-1024 s2, 4 KiB rows: m14 x n1 ran at 56 GFLOP/s, m4 x n3 at
// 186; AVX-512 m7 at 4-8 KiB rows runs at peak.
// Widen: the per-entry f32 scratch (m pixels × oc chunk) stays in L1.
constexpr int64_t kWidenMaxOcChunk = 256;

// Cycles of one oc step (direct; bf16_dot: an oc pair) or one tap
// (depthwise) of an m × n block of `vbytes`-byte vectors; `w_rate`: the
// bytes a cycle the W vectors arrive at from L2 or L3 (0: from L1).
// Depthwise: `dd_rows` diff_dst vectors per pixel and vector (row pairs:
// the two rows of a pair, on average).
double step_cycles(DataPath path, int m, int n, bool bcast_in_fma, int vbytes, double w_rate,
                   double latency = kFmaLatency, double dd_rows = 1) {
    const double fma = m * n / kFmaPerCycle;
    double loads = 0;
    if (path == DataPath::depthwise)
        loads = (n + m * n * dd_rows) / kVecLoadsPerCycle;
    else  // AVX2 (32-byte vectors) weighs its broadcasts (see kAvx2BcastLoads)
        loads = std::max(n / kVecLoadsPerCycle,
                         (n + (bcast_in_fma ? m * n : m) * (vbytes == 32 ? kAvx2BcastLoads : 1.0)) / kLoadsPerCycle);
    const double w = w_rate > 0 ? n * vbytes / w_rate : 0.0;
    return std::max({fma, loads, latency, w});
}

bool is_dot(const DataPlan& pl) { return pl.types.compute == DataCompute::bf16_dot; }

// Reduction steps per entry: oc (bf16_dot: oc pairs), G for depthwise.
double reduction_steps(const Problem& p, const DataPlan& pl) {
    if (pl.path == DataPath::depthwise) return is_dot(pl) && !pl.dw_row_pairs() ? pl.lane_group / 2 : pl.lane_group;
    return is_dot(pl) ? double(div_up(p.ocg, 2)) : double(p.ocg);
}

// Whether one channel block's W (all taps, all oc) exceeds the L1 budget
// (row blocks: the oc chunk is cut to fit).
bool w_block_in_l2(const Problem& p, const DataPlan& pl, const DataBlocking& b) {
    if (pl.row_blocks) return false;
    // Row pairs: W pair and alone forms, each a dword of two bf16.
    const int64_t red = pl.path != DataPath::depthwise ? p.ocg : pl.dw_row_pairs() ? 4 : pl.lane_group;
    const int64_t taps = pl.path == DataPath::col ? 1 : p.k_sp();
    return taps * red * b.lanes() * pl.w_elem_bytes > kL1WBytes;
}

// Folds H into W (not D: the executor's rows are (n, id, ih)); max_folds 0: no folding.
// A plain layer whose image is one short W row takes DataGeometry::images_per_row images a row.
DataGeometry make_geometry(const Problem& p, int max_folds = 1) {
    DataGeometry g;
    static_cast<SpatialView&>(g) = fold_plain_axes(p, max_folds);
    g.folded_hw = g.merged > 0 && p.in[1] > 1;
    const bool plain = plain_axis(p, 0) && plain_axis(p, 1) && plain_axis(p, 2);
    if (max_folds > 0 && plain && g.in[0] == 1 && g.in[1] == 1 && 2 * g.in[2] <= kBatchRowPixels) {
        int64_t d = kBatchRowPixels / g.in[2];
        while (p.mb % d != 0) --d;  // whole images per row, every row alike
        g.images_per_row = d;
        g.in[2] *= d;
        g.out[2] *= d;
    }
    return g;
}

// The executor's images: groups of images_per_row.
int64_t row_images(const Problem& p, const DataGeometry& g) { return p.mb / g.images_per_row; }

DataChannelBlocks make_channel_blocks(int64_t lanes, int64_t groups, int n, int vlen) {
    DataChannelBlocks c;
    const int64_t block = int64_t(n) * vlen;
    c.lanes = lanes;
    c.block = block;
    c.vlen = vlen;
    c.per_group = div_up(lanes, block);
    c.total = c.per_group * groups;
    const int64_t last = lanes - (c.per_group - 1) * block;
    c.tail_n = static_cast<int>(div_up(last, vlen));
    c.tail_lanes = static_cast<int>(last % vlen);
    return c;
}

// Depthwise row taps: diff_dst pixels between consecutive taps of an entry
// (a phase's taps under a W stride are one pixel apart), and the most taps
// an entry carries.
int64_t row_tap_pixels(const DataGeometry& g) { return g.stride[2] == 1 ? g.dil[2] : 1; }
int64_t row_tap_count(const DataGeometry& g) { return div_up(g.k[2], g.stride[2]); }

// Rows that only direct row taps run as blocks: strided ones, and
// unit-stride rows too wide for a row block without them.
bool taps_alone_rows(const DataGeometry& g) { return g.stride[1] > 1 || g.stride[2] > 1 || g.in[2] > kMaxM; }

// Average (kd, kh) taps per diff_src row.
double row_taps(const DataGeometry& g) {
    return double(g.k[0]) / double(g.stride[0]) * double(g.k[1]) / double(g.stride[1]);
}

// Pixels and valid W taps of each stride phase (computed once per search).
struct PhaseSize {
    int64_t pixels, taps;
};
std::vector<PhaseSize> phase_sizes(const DataGeometry& g) {
    std::vector<PhaseSize> r;
    for (int64_t ph = 0; ph < g.stride[2]; ++ph)
        r.push_back({phase_pixel_count(g, ph), static_cast<int64_t>(phase_taps(g, ph).size())});
    return r;
}

// Direct row taps (a block = the row's m pixels, every W phase): the
// (pixel, kw tap) pairs that read inside the diff_dst row, and the row's
// pixels they read.
struct RowTapWork {
    int64_t pairs = 0, pixels = 0;
};
RowTapWork direct_row_tap_work(const DataGeometry& g, int64_t m) {
    RowTapWork w;
    for (int64_t x = 0; x < g.out[2]; ++x) {  // the row's pixels, as the generator walks them
        bool read = false;
        for (int64_t k = 0; k < g.k[2]; ++k) {
            if (data_row_tap_pixel(static_cast<int>(x), static_cast<int>(k), static_cast<int>(g.pad[2]),
                                   static_cast<int>(g.dil[2]), static_cast<int>(m), static_cast<int>(g.stride[2])) < 0)
                continue;
            ++w.pairs;
            read = true;
        }
        w.pixels += read;
    }
    return w;
}

// Row blocks: the lengths of a plane's runs of rows that read the same kh
// taps (top and bottom rows lose some to padding), one kernel call each;
// computed once per search.
std::vector<int64_t> row_kh_runs(const DataGeometry& g) {
    std::vector<int64_t> runs;
    for (int64_t ih = 0; ih < g.in[1];) {
        const int64_t end = row_kh_run_end(g, ih);
        runs.push_back(end - ih);
        ih = end;
    }
    return runs;
}

// The share of a plane's rows that run in blocks of r rows: a call runs r
// rows a block, and its leftover rows one a block.
double rows_in_blocks(const std::vector<int64_t>& runs, int64_t r) {
    if (r <= 1) return 1;
    int64_t rows = 0, in_blocks = 0;
    for (int64_t n : runs) {
        rows += n;
        in_blocks += n / r * r;
    }
    return double(in_blocks) / double(rows);
}

// Bytes between the user's diff_dst pixels (NXC).
int64_t dd_pixel_bytes(const Problem& p) { return p.oc() * static_cast<int64_t>(dtype_size(p.dt)); }

// Whether a row of row_px pixels `pitch` bytes apart puts more of a channel
// vector's lines into its L1 sets than they hold, where the pixels share
// one or two sets (a multiple of 2 KiB apart; 17 pixels decide it).
bool row_overflows_shared_sets(int64_t row_px, int64_t pitch) {
    return pixels_share_l1_sets(pitch) &&
           lines_per_l1_set(std::min<int64_t>(row_px, 2 * kL1LinesPerSet + 1), pitch) > kL1LinesPerSet;
}

// 16-bit depthwise lane groups of 4 or more channels whose rows are
// widened into padded f32 rows (see choose_padded_rows).
bool dw_lane_widen(const Problem& p, const DataPlan& pl) {
    return p.nxc && pl.path == DataPath::depthwise && pl.lane_group >= 4 &&
           pl.types.compute == DataCompute::widen && pl.geo.out[2] * dd_pixel_bytes(p) >= kLaneWidenRowBytes;
}

// Whether a depthwise plan reads diff_dst rows in place, its W edges
// compiled in (DataPlan::dw_edges; see choose_padded_rows): entries of a
// kh row's taps (or kernels one tap wide), rows not long, not widened.
bool dw_rows_in_place(const Problem& p, const DataPlan& pl) {
    const DataGeometry& g = pl.geo;
    return pl.path == DataPath::depthwise && (pl.dw_row_taps || g.k[2] == 1) && !dw_lane_widen(p, pl) &&
           g.k[0] * g.k[1] * g.out[2] * dd_pixel_bytes(p) <= kLongRowBytes;
}

// The cycles each diff_dst pixel an entry reads costs where rows read in
// place (NXC) share L1 sets (kSharedSetPixelCycles); zero elsewhere.
double dw_pixel_set_cycles(const Problem& p, const DataPlan& pl) {
    const int64_t pitch = dd_pixel_bytes(p);
    if (!p.nxc || pl.path != DataPath::depthwise || !row_overflows_shared_sets(pl.geo.out[2], pitch) ||
        !dw_rows_in_place(p, pl))
        return 0.0;
    return pitch % kL1SetSpan == 0 ? kOneSetPixelCycles : kSharedSetPixelCycles;
}

// Cost of the direct or depthwise path, one thread, whole problem;
// set_px: dw_pixel_set_cycles of the plan.
double direct_cycles(const Problem& p, const DataPlan& pl, const DataBlocking& b, const DataChannelBlocks& cb,
                     const std::vector<PhaseSize>& phases, const std::vector<int64_t>& kh_runs, double set_px) {
    const DataGeometry& g = pl.geo;
    const DataPath path = pl.path;
    const double red = reduction_steps(p, pl);
    const double lat = is_dot(pl) ? kDotLatency : kFmaLatency;
    const double w_rate = w_block_in_l2(p, pl, b) ? kL2BytesPerCycle : 0.0;
    const int vb = b.vlen * 4;
    // Entries per diff_src row: its (kd, kh) rows, or with row pairs about
    // half of each kd's kh rows rounded up, each reading 2 rows but the
    // last alone.
    const double rows = row_taps(g);
    const double kh_rows = double(g.k[1]) / double(g.stride[1]);
    const double entries =
            pl.dw_row_pairs() ? double(g.k[0]) / double(g.stride[0]) * std::max(1.0, kh_rows / 2 + 0.5) : rows;
    const double dd_rows = rows / entries;
    // Pixels an entry reads at most: a row's (W edges: taps past them left out).
    auto set_cycles = [&](int64_t px) { return set_px * double(std::min(px, g.out[2])) * dd_rows; };
    double per_row = 0;
    // Row blocks: a call per run of rows reading the same kh taps, not per row.
    const double calls_per_row = pl.row_blocks ? double(kh_runs.size()) / double(g.in[1]) : 1.0;
    for (const PhaseSize& ph : phases) {
        const int64_t j = ph.pixels, taps = ph.taps;
        const int64_t full = j / b.m, rem = j % b.m;
        const double blocks_per_call = double(full + (rem > 0)) / calls_per_row;
        // A group's channel blocks: per_group - 1 of n vectors, the last of tail_n.
        auto channel_block = [&](int n) {
            auto block = [&](int m) {
                if (pl.direct_row_taps) {
                    // One entry for a kh row's taps, per oc step: the
                    // (pixel, tap) pairs inside the row, a W load per tap
                    // and vector, a broadcast per pixel read; each
                    // accumulator's taps are one dependent chain. A block
                    // of R rows shares the W loads and has R times the
                    // chains: the cost of one row is 1 / R of it.
                    const int64_t r = std::max<int64_t>(1, m / g.in[2]);
                    const RowTapWork w = direct_row_tap_work(g, m / r);
                    auto rows_cost = [&](int64_t k) {
                        const double loads = double(taps * n + k * w.pixels) / kLoadsPerCycle;
                        return std::max({double(k * w.pairs * n) / kFmaPerCycle, loads, taps * lat}) / double(k);
                    };
                    const double f = rows_in_blocks(kh_runs, r);  // the rest: one row a block
                    return f * rows_cost(r) + (1 - f) * rows_cost(1);
                }
                if (pl.dw_tap_seq) {
                    // Groups of t taps (DataPlan::dw_tap_group): a group's W
                    // loads, and each diff_dst vector it reads loaded (16-bit:
                    // widened, an FMA-port operation) once for its taps.
                    auto group = [&](int64_t t) {
                        const double dd = double((m + (t - 1) * row_tap_pixels(g)) * n) * dd_rows;
                        const double cvt = pl.types.compute == DataCompute::widen ? dd : 0.0;
                        return std::max({(double(t * m * n) + cvt) / kFmaPerCycle,
                                         (double(t * n) + dd) / kVecLoadsPerCycle, double(t) * lat,
                                         set_cycles(m + (t - 1) * row_tap_pixels(g))});
                    };
                    const int64_t t = std::min<int64_t>(pl.dw_tap_group, taps);  // the last group: the rest
                    return double(taps / t) * group(t) + (taps % t ? group(taps % t) : 0.0) + kEntryCycles;
                }
                if (!pl.dw_row_taps) {
                    // A block's chains overlap the next block's of the same
                    // call as far as the core keeps both in flight.
                    const double ops = double(taps) * entries * red * (m * n + m + n);
                    const double overlap = std::max(1.0, std::min(blocks_per_call, kOpsInFlight / ops));
                    return taps * step_cycles(path, m, n, b.bcast_in_fma, vb, w_rate, lat / overlap, dd_rows);
                }
                // One entry for the row's taps: each diff_dst vector loaded
                // once; the entry's fixed cost (W loads, loop) favours long blocks.
                const double loads =
                        ((m + (taps - 1) * row_tap_pixels(g)) * n * dd_rows + taps * n) / kVecLoadsPerCycle;
                return std::max({taps * m * n / kFmaPerCycle, loads, lat,
                                 kRowTapsSetFactor * set_cycles(m + (taps - 1) * row_tap_pixels(g))}) +
                       kEntryCycles;
            };
            const double blocks = pl.direct_row_taps ? block(b.m)  // per row, whole rows a block
                                                     : full * block(b.m) + (rem ? block(static_cast<int>(rem)) : 0);
            return blocks * entries * red + 3 * kCallCycles * calls_per_row;
        };
        per_row += double(cb.per_group - 1) * channel_block(b.n) + channel_block(cb.tail_n);
    }
    const int64_t groups = path == DataPath::depthwise ? 1 : p.g;
    return per_row * groups * row_images(p, g) * g.in[0] * g.in[1];
}

// The col path's chunk of a diff_dst row (DataPlan::col_pixels): whole
// blocks of m pixels whose columns of `padded` lanes fit kColBufferBytes,
// at least one block, at most the row's blocks.
int64_t col_chunk_pixels(int64_t padded, int m, int64_t ow) {
    const int64_t px = std::max<int64_t>(m, kColBufferBytes / (padded * 4) / m * m);
    return std::min(px, div_up(ow, m) * m);
}

// Cost of the col path: a GEMM per diff_dst pixel, then the scatter.
double col_cycles(const Problem& p, const DataPlan& pl, const DataBlocking& b, const DataChannelBlocks& cb) {
    const bool w_in_l3 = p.g * cb.padded() * p.ocg * pl.w_elem_bytes > kWChunkBytes;
    const double w_rate = w_in_l3 ? kL3BytesPerCycle : w_block_in_l2(p, pl, b) ? kL2BytesPerCycle : 0.0;
    auto channel_block = [&](int n) {  // per_group - 1 blocks of n vectors, the last of tail_n
        const double lat = is_dot(pl) ? kDotLatency : kFmaLatency;
        return step_cycles(DataPath::col, b.m, n, b.bcast_in_fma, b.vlen * 4, w_rate, lat) / b.m * reduction_steps(p, pl);
    };
    double per_pixel = double(cb.per_group - 1) * channel_block(b.n) + channel_block(cb.tail_n);
    // Runs per pixel: a target row's taps are one run when they are adjacent
    // in diff_src (one group, no W dilation), else one per kw.
    const double runs = double(p.k[0] * p.k[1] * (p.g == 1 && p.dil[2] == 1 ? 1 : p.k[2]));
    per_pixel += runs * kScatterCyclesPerRun + cb.lanes * kScatterCyclesPerLane;
    // Per diff_dst row, group and chunk of col_pixels (choose_cache_blocking):
    // a scatter, and per lane block a call for the chunk's whole blocks and
    // one for its leftover pixels. Rows of a few pixels are mostly these.
    const int64_t ow = p.out[2], chunk = col_chunk_pixels(cb.padded(), b.m, ow);
    const int64_t full_chunks = ow / chunk, last = ow % chunk;
    const int64_t calls = full_chunks + (last >= b.m) + (last % b.m > 0);
    const double per_row = double(cb.per_group * calls) * kCallCycles + double(div_up(ow, chunk)) * kScatterCallCycles;
    return (per_pixel * double(ow) + per_row) * double(p.g * p.mb * p.out[0] * p.out[1]);
}

int vregs(const DataPlan& pl, const DataBlocking& b, int tail, const DataKernelTypes& types) {
    const DataKernelKind kind = pl.path == DataPath::depthwise ? DataKernelKind::depthwise : DataKernelKind::direct;
    return data_kernel_vregs(make_data_desc(pl.isa, kind, b.m, b.n, tail, b.oc_unroll, b.bcast_in_fma, 0, 0, types));
}

// The step cost is the maximum of the FMA, load, latency and L2 bounds, so
// most direct blockings of a long reduction tie at the FMA bound (ResNet-50's
// 1x1 layers: a dozen m × n within 0.5 %) though they do not run alike. Near
// ties go to fewer loads per FMA (each is an issue slot and an L1 access the
// bound does not count) and then to W served from L1. Weights of a blocking's
// cost for the comparison only, at most a few percent apart, so a real
// difference in the model still decides. Measured against the first of the
// tied blockings (m ascending within n), AMD Zen 5, 2 threads, ResNet-50 at
// mb 32, min of 3 interleaved rounds: bf16 1.013x over 20 layers (res2a_branch1
// m6 x n2 -> m6 x n4 1.13x), f32 / f16 1.014x over 40 cases (f16 1x1 layers
// 1.07-1.10x). AVX2 keeps the first of the tied (its 16 registers leave
// few ties, and the ones it broke ran slower: ResNet-50 res4a_branch2a
// m2 x n5 -> m4 x n3 0.96x, RegNetX-400MF s4 m4 x n2 -> m6 x n2 0.93-0.95x,
// min of 5).
double tie_weight(const Problem& p, const DataPlan& pl, const DataBlocking& b) {
    if (pl.isa < Isa::avx512_core || pl.path == DataPath::depthwise || pl.direct_row_taps) return 1;
    constexpr double kPerLoadPerFma = 0.02, kWFromL2 = 0.01;
    const double loads_per_fma = double(b.n + (b.bcast_in_fma ? b.m * b.n : b.m)) / double(b.m * b.n);
    return 1 + kPerLoadPerFma * loads_per_fma + (w_block_in_l2(p, pl, b) ? kWFromL2 : 0.0);
}

// Searches m × n (× broadcast form) for the lowest estimated cycles.
bool choose_blocking(const Problem& p, DataPlan* pl) {
    const int vlen = pl->isa >= Isa::avx512_core ? 16 : 8;
    const int nregs = pl->isa >= Isa::avx512_core ? 32 : 16;
    const int64_t lanes = pl->path == DataPath::direct ? p.icg
                          : pl->path == DataPath::col  ? p.k_sp() * p.icg
                                                       : p.ic();
    const int max_n = static_cast<int>(std::min<int64_t>(kMaxN, div_up(lanes, vlen)));
    // Row taps: a block is a whole row, its W phases together.
    const std::vector<PhaseSize> phases =
            pl->direct_row_taps ? std::vector<PhaseSize>{{pl->geo.in[2], pl->geo.k[2]}} : phase_sizes(pl->geo);
    const std::vector<int64_t> kh_runs = pl->row_blocks ? row_kh_runs(pl->geo) : std::vector<int64_t>{};
    // Broadcast rows: diff_dst pixels (f32, or widened to f32; bf16 pairs: 2
    // bytes a channel); blocks whose m rows crowd one L1 set are left out.
    const int64_t bcast_stride = p.oc() * (is_dot(*pl) ? 2 : 4);
    // (More rows never crowd a set less, so one count settles the common case.)
    // Row taps alone (strided or wide rows) read their row's diff_dst
    // pixels from the slab, whose pitch choose_padded_rows spreads where
    // they crowd a set.
    const bool taps_alone = pl->direct_row_taps && taps_alone_rows(pl->geo);
    const int max_m = taps_alone ? kMaxRowTapsM : kMaxM;
    std::array<bool, kMaxRowTapsM + 1> crowded{};
    if (pl->path != DataPath::depthwise && !taps_alone && lines_per_l1_set(kMaxM, bcast_stride) > kL1LinesPerSet)
        for (int m = 1; m <= kMaxM; ++m) crowded[m] = lines_per_l1_set(m, bcast_stride) > kL1LinesPerSet;
    const DataKernelTypes types = data_kernel_types(*pl, row_tap_count(pl->geo));
    const double set_px = dw_pixel_set_cycles(p, *pl);  // (the same for every blocking)
    // Depthwise rows read in place: the vectors whose edge code fits kMaxDwEdgeFmas.
    const int64_t edge_pairs =
            std::max<int64_t>(1, (row_tap_count(pl->geo) - 1) * row_tap_pixels(pl->geo) * row_tap_count(pl->geo));
    const int max_edge_n =
            dw_rows_in_place(p, *pl) ? static_cast<int>(std::max<int64_t>(1, kMaxDwEdgeFmas / edge_pairs)) : max_n;
    double best = -1, best_key = 0;  // the cost, and the cost weighed by tie_weight
    bool best_preferred = false;
    for (int bif = 0; bif <= (pl->isa >= Isa::avx512_core && pl->path != DataPath::depthwise); ++bif)
        for (int n = 1; n <= std::min(max_n, max_edge_n); ++n)
            for (int m = 1; m <= max_m; ++m) {
                // Row blocks: a row a block, or with row taps several rows.
                if (pl->row_blocks && m != pl->geo.in[2] &&
                    !(pl->direct_row_taps && m % pl->geo.in[2] == 0 && rows_in_blocks(kh_runs, m / pl->geo.in[2]) > 0))
                    continue;
                if (pl->direct_row_taps && bif) continue;  // one broadcast serves several taps
                DataBlocking b;
                b.m = m;
                b.n = n;
                b.vlen = vlen;
                b.bcast_in_fma = bif;
                const DataChannelBlocks cb = make_channel_blocks(lanes, pl->path == DataPath::depthwise ? 1 : p.g, n, vlen);
                const int tail = pl->path == DataPath::col ? 0 : cb.tail_lanes;
                if (vregs(*pl, b, tail, types) > nregs) break;  // more pixels only add registers
                // Pixel displacements inside the kernel are 32-bit.
                const int64_t pix_bytes = std::max(p.oc(), pl->path == DataPath::col ? cb.padded() : p.stride[2] * p.ic()) * 4;
                if (m * pix_bytes + b.lanes() * 4 >= INT32_MAX) continue;
                // Row blocks step a padded slab row (or block_rows of them) a
                // block, and read up to a row's pads and pixels from an entry.
                if (pl->row_blocks) {
                    const DataGeometry& g = pl->geo;
                    const int64_t row_max = (g.in[2] + g.out[2] + 2 * (g.k[2] - 1) * g.dil[2] + 2) *
                                            (p.oc() * 4 + kCacheLineBytes);
                    if ((m / g.in[2] + 1) * row_max >= INT32_MAX) continue;
                }
                if (crowded[m]) continue;
                const double c = pl->path == DataPath::col ? col_cycles(p, *pl, b, cb)
                                                           : direct_cycles(p, *pl, b, cb, phases, kh_runs, set_px);
                // Ties go to one vector with the broadcast inside the FMA:
                // the register form then spends an instruction per FMA, and
                // cores that split 512-bit operations run it well below
                // (AMD Zen 4, 2 threads, f32 groups of 16: RegNetX-400MF
                // 7x7 m7 x n1 165 -> 220 GFLOP/s).
                const bool preferred = bif && n == 1;
                const double key = c * tie_weight(p, *pl, b);
                if (best < 0 || key < best_key * 0.999 || (preferred && !best_preferred && key <= best_key * 1.001)) {
                    best = c;
                    best_key = key;
                    best_preferred = preferred;
                    pl->blk = b;
                    pl->cb = cb;
                    if (pl->path == DataPath::col) pl->cb.tail_lanes = 0;  // the column buffer is padded
                }
            }
    pl->est_cycles = best;
    return best >= 0;
}

int64_t wpack_elems(const Problem& p, const DataPlan& pl) {
    const int64_t padded = pl.cb.padded();
    switch (pl.path) {
        case DataPath::direct: return p.g * padded * p.k_sp() * pl.ocg_w;
        case DataPath::depthwise: return padded * p.k_sp() * (pl.dw_row_pairs() ? 4 : pl.lane_group);
        case DataPath::col: return p.g * padded * pl.ocg_w;
    }
    return 0;
}

// Row blocks need a plane whose rows read only rows of the same diff_dst
// plane (no depth taps or padding, not folded) and, without row taps, one
// W phase (unit strides) of at most kMaxM pixels. `taps_alone`: the rows
// only row taps take instead (taps_alone_rows, up to kMaxRowTapsM pixels;
// a block a row, each row its own kh taps under an H stride).
bool row_blocks_fit(const Problem& p, const DataGeometry& g, bool taps_alone = false) {
    const bool fits = taps_alone ? taps_alone_rows(g) && g.in[2] <= kMaxRowTapsM && g.k[2] > 1
                                 : g.stride[1] == 1 && g.stride[2] == 1 && g.in[2] <= kMaxM;
    return !g.folded_hw && fits && g.k[0] == 1 &&
           g.stride[0] == 1 && g.pad[0] == 0 && g.out[0] == g.in[0] && p.k_sp() > 1;
}

// Direct and depthwise paths with edges (a pixel whose tap reads past the
// row): pad the diff_dst rows once per thread, so every pixel runs in full
// blocks of real memory (a row copy costs less than staging windows per
// block, channel block and oc chunk, or running edge pixels alone). 16-bit
// widen plans widen the rows while copying, so their kernels run exactly as
// for f32.
//
// A block's taps read m + KW - 1 pixels of each of KH rows; with OC
// elements a multiple of 4 KiB apart (ResNeXt-50's 1024 channels) they all
// fall into one L1 set and evict each other, so the copy spaces its pixels
// one line further apart (AMD Zen 4, 32 groups of 32 channels at 7x7: f32
// 1.08x on one thread, 1.15x on two; bf16 1.00-1.08x). Two sets (2 KiB
// apart, ResNet-50's 512 channels at 7x7) measured 0.96-1.01x: left alone.
// Depthwise copies (the segment windows of long rows) are spaced where
// their pixels share sets (2 KiB apart) along a row longer than the sets'
// ways hold (AMD Zen 4, 2 threads, min of 3, against the same plans
// unspaced: 1D causal 1024 channels at 8000 pixels f32 / bf16 / f16
// 1.38 / 1.27 / 1.23x, Citrinet's 41 taps at 1024 channels bf16 / f16
// 1.73 / 1.85x; 16-bit 512 channels, 1 KiB apart in four sets, 0.88x).
void choose_padded_rows(const Problem& p, DataPlan* pl) {
    pl->dd_pitch = dd_pixel_bytes(p);
    if (pl->path == DataPath::col) return;
    const DataGeometry& g = pl->geo;
    for (int64_t r = 0; r < g.stride[2]; ++r) {
        const int64_t npx = phase_pixel_count(g, r);
        for (const PhaseTap& t : phase_taps(g, r)) {
            if (npx == 0) break;
            pl->pad_left = std::max(pl->pad_left, -t.base);
            pl->pad_right = std::max(pl->pad_right, t.base + npx - g.out[2]);
        }
    }
    pl->padded_rows = pl->pad_left > 0 || pl->pad_right > 0 || pl->row_blocks;
    if (!pl->padded_rows) return;
    // Depthwise plans whose entries carry a kh row's taps (or one kw tap)
    // compile the W edges into their kernels instead (DataPlan::dw_edges),
    // unless rows are long (segments pad just their windows). The copies
    // had been a quarter of MobileNetV2 b7's time (f32, mb 32, perf); AMD
    // Zen 5, 2 threads, min of 3, 28 depthwise layers x f32 / bf16:
    // geomean 1.16x at mb 32 (L3-resident 3x3 / 5x5 / 7x7 layers at unit
    // stride 1.2-1.46x, X3D 3x3x3 1.22-1.94x), 1.19x at mb 8; lane groups
    // (ResNeXt-50, RegNetY) 1.00-1.39x.
    // 16-bit lane groups of G >= 4 channels pad and widen instead: their
    // kernels load each diff_dst vector G times (permuted per output
    // channel), which widened every load. Against edges in the kernels,
    // Intel Xeon, 2 threads, f16, min of 5, each file's minibatch: groups
    // of 8 (RegNetY-400MF, ResNeXt-50 conv3, synthetic 2D / 3D / 5x5 s2)
    // 1.14-1.54x, RegNetY s4 at 7x7 0.97x, a synthetic 1D s2 0.98x;
    // ResNeXt-50 conv2 (G 4) 1.24x; AVX2 f16 1.06-1.55x (0.94x RegNetY s4),
    // AVX2 bf16 1.04-2.80x, bf16 without the BF16 ISA 1.03-1.35x. Rows under
    // kLaneWidenRowBytes keep the edges: the shape files' small grouped
    // layers (6-64 channels, rows of 160 bytes to 1 KiB) ran 0.75-0.96x
    // padded, 1.75 KiB rows (32 and 64 channels of 28 / 14 pixels at W
    // stride 2) 1.28-1.40x. NXC only: NCX, whose windows copy each row
    // already, ran 0.87-1.29x (geomean 1.11x, five layers of 15 slower).
    const bool lane_widen = dw_lane_widen(p, *pl);
    if (dw_rows_in_place(p, *pl)) {
        pl->dw_edges = true;
        pl->padded_rows = false;
        pl->pad_left = pl->pad_right = 0;
        return;
    }
    // Depthwise keeps 16-bit rows and widens on load instead: each value is
    // loaded once per kh row there, and copying half the bytes measured
    // 10-15 % faster for bf16 (equal for f16). Not the lane groups above.
    if (pl->types.compute == DataCompute::widen && (pl->path != DataPath::depthwise || lane_widen)) {
        pl->widen_rows = true;
        pl->types.compute = DataCompute::f32;
        pl->types.in = data_type::f32;
    }
    const int64_t es = pl->widen_rows ? 4 : static_cast<int64_t>(dtype_size(p.dt));
    pl->dd_pitch = p.oc() * es;
    const int64_t reach = pl->blk.m + (g.k[2] - 1) * g.dil[2];
    pl->dd_pitch_spread = lines_per_l1_set(reach, pl->dd_pitch) * g.k[1] > 2 * kL1LinesPerSet ||
                          (pl->path == DataPath::depthwise && row_overflows_shared_sets(g.out[2], pl->dd_pitch));
    if (pl->dd_pitch_spread) pl->dd_pitch += 64;
    pl->scratch.row_bytes = (pl->pad_left + g.out[2] + pl->pad_right) * pl->dd_pitch;
    if (pl->row_blocks) {
        pl->scratch.slab_bytes = g.out[1] * pl->scratch.row_bytes;
        return;
    }
    // The group's rows and their halo stay cached across channel blocks.
    pl->scratch.row_slots = g.k[0] * (pl->group_rows + (g.k[1] - 1) * g.dil[1]) + 2;
}

// Rows of a row group (W not resident): enough that kGroupPixels diff_src
// pixels a kernel tap reaches share each channel block's W. A strided
// layer's rows and W phases no tap reaches (a 1x1 s2 layer's inserted
// zeros: three pixels of four) do not count: ResNet-50 res5a_branch1
// (1x1 s2, 8 MiB of W), counting all pixels, ran groups of 4 rows, 14
// computed pixels a pass over W (see docs/PERFORMANCE.md).
int64_t group_rows_for(const DataGeometry& g) {
    int64_t pixels = 0;  // a row's pixels in W phases with taps
    for (const PhaseSize& ph : phase_sizes(g)) pixels += ph.taps > 0 ? ph.pixels : 0;
    int64_t hit_rows = 1, rows = 1;  // rows with taps: the residues (k·dil - pad) mod stride of D and H
    for (int a = 0; a < 2; ++a) {
        std::vector<bool> hit(static_cast<size_t>(g.stride[a]));
        for (int64_t k = 0; k < g.k[a]; ++k)
            hit[static_cast<size_t>(((k * g.dil[a] - g.pad[a]) % g.stride[a] + g.stride[a]) % g.stride[a])] = true;
        hit_rows *= std::count(hit.begin(), hit.end(), true);
        rows *= g.stride[a];
    }
    return std::max<int64_t>(1, div_up(kGroupPixels * rows, std::max<int64_t>(rows, pixels * hit_rows)));
}

// oc chunks (the W chunk of a channel block stays in L2; widen: the scratch
// in L1), the loop order, edge handling, col chunk.
void choose_cache_blocking(const Problem& p, DataPlan* pl) {
    const int64_t lane_bytes = int64_t(pl->blk.lanes()) * pl->w_elem_bytes;
    const int64_t u = pl->blk.oc_unroll * (is_dot(*pl) ? 2 : 1);  // whole unrolled trips
    if (pl->row_blocks) {
        // Row taps load a W vector per tap for all of a row's pixels, few
        // enough to come from L2: fewer, longer chunks.
        const int64_t budget = pl->direct_row_taps ? kRowTapsWBytes : kL1WBytes;
        pl->oc_chunk = std::min(p.ocg, std::max(u, budget / (p.k_sp() * lane_bytes) / u * u));
    } else if (pl->path == DataPath::direct) {
        const int64_t chunk_bytes = p.k_sp() * p.ocg * lane_bytes;
        int64_t chunks = div_up(chunk_bytes, kWChunkBytes);
        if (pl->types.compute == DataCompute::widen) chunks = std::max(chunks, div_up(p.ocg, kWidenMaxOcChunk));
        pl->oc_chunk = std::min(p.ocg, div_up(div_up(p.ocg, chunks), u) * u);
    } else {
        pl->oc_chunk = p.ocg;
    }
    const bool w_resident = wpack_elems(p, *pl) * pl->w_elem_bytes <= kWResidentBytes;
    if (pl->row_blocks)
        pl->group_rows = pl->geo.in[1];
    else if (!w_resident && pl->path != DataPath::col)
        pl->group_rows = group_rows_for(pl->geo);
    if (pl->ncx_windows && !pl->row_blocks) {
        // NCX windows: each item reads a run of every channel's planes; a
        // whole image on small planes (one sequential read), else rows
        // enough for runs of kWindowRunBytes.
        const DataGeometry& g = pl->geo;
        const int64_t es = static_cast<int64_t>(dtype_size(p.dt)), plane = g.in[0] * g.in[1] * g.in[2] * es;
        pl->group_rows = plane <= kWindowPlaneBytes
                                 ? g.in[0] * g.in[1]
                                 : std::max(pl->group_rows, div_up(kWindowRunBytes, g.in[2] * es));
        // Whole lines of every plane a group (planes of whole lines): the
        // write-back can stream them.
        const int64_t step = kCacheLineBytes / std::gcd(kCacheLineBytes, g.in[2] * es);
        if (plane % kCacheLineBytes == 0) pl->group_rows = div_up(pl->group_rows, step) * step;
    }
    choose_padded_rows(p, pl);
    // (As widen_rows: the executor widens, the kernels run f32.)
    if (pl->path == DataPath::col && pl->types.compute == DataCompute::widen &&
        pl->cb.per_group >= kColWidenMinBlocks) {
        pl->col_widened = true;
        pl->types.compute = DataCompute::f32;
        pl->types.in = data_type::f32;
    }
    if (pl->types.compute == DataCompute::widen && pl->path != DataPath::depthwise)
        pl->types.cvt_pix_bytes = div_up(pl->oc_chunk, pl->blk.vlen) * pl->blk.vlen * 4;
    // The oc loop's trips prefetch the next block's m pixels of diff_dst,
    // a linear walk: where a chunk is each pixel's whole dd_pitch (one
    // group, one oc chunk), enough lines a trip that the chunk's trips
    // cover them; else one line a trip (the walk then reads past the
    // chunk's channels).
    if (pl->path != DataPath::depthwise && p.g == 1 && pl->oc_chunk == p.ocg && !pl->dd_pitch_spread) {
        const int64_t trips = std::max<int64_t>(1, pl->oc_chunk / u);
        pl->types.pf_lines = static_cast<int>(std::max<int64_t>(1, div_up(div_up(pl->blk.m * pl->dd_pitch, kCacheLineBytes), trips)));
    }
    if (pl->path == DataPath::col) pl->col_pixels = col_chunk_pixels(pl->cb.padded(), pl->blk.m, p.out[2]);
}

void size_scratch(const Problem& p, DataPlan* pl) {
    DataScratch& s = pl->scratch;
    s.wpack_elems = pl->w_in_place ? 0 : wpack_elems(p, *pl);
    const bool ncx_col = !p.nxc && pl->path == DataPath::col;
    s.whole_nxc = !p.nxc && !pl->ncx_windows && !ncx_col;
    const int64_t images = s.whole_nxc ? p.mb : ncx_col ? 1 : 0;
    s.dd_nxc_elems = images * p.oc() * p.out_sp();
    s.dst_nxc_elems = images * p.ic() * p.in_sp();
    const bool narrow_out = p.dt != data_type::f32;
    const int64_t ocg = pl->path == DataPath::depthwise ? 1 : p.ocg;
    if (narrow_out && pl->path != DataPath::col && div_up(ocg, pl->oc_chunk) > 1)
        s.acc_floats = pl->group_rows * pl->geo.in[2] * p.ic();  // the group's diff_src rows (planes when folded)
    s.cvt_floats = pl->col_widened ? pl->col_pixels * p.ocg : pl->types.cvt_pix_bytes / 4 * pl->blk.m;
    if (narrow_out && pl->path == DataPath::col) s.col_rows_floats = p.in_sp() * p.ic();
}

// Long rows: a diff_src row reads its (kd, kh) diff_dst rows, each padded
// whole into per-thread scratch and kept there while every channel block
// runs over it. Rows longer than L2 (1D layers over audio: 128 channels
// of 30000 samples, 15 MB f32) made that a copy out to L3 / DRAM and a
// read back per channel block. Segments of such rows are items of their
// own: each pads just its window, which stays in L2 for the channel
// blocks. Depthwise and grouped plans read a fraction of each pixel a
// channel block, where the whole-row copy cost most. NCX windows (see
// DataPlan::ncx_windows) of segments hold just the segment's pixels of
// the item's rows: 1D layers of groups and depthwise layers in NCX had
// transposed whole rows into windows as wide as the tensor's pixels
// (8-16 MB a row at 512-1536 channels, of which an item's channels touch
// a few lines per pixel, spread over the whole row) and ran 4-8x slower
// than in NXC; with segments 1.03-4.5x faster (see PERFORMANCE.md).
void choose_segments(const Problem& p, DataPlan* pl) {
    const DataGeometry& g = pl->geo;
    const int64_t tap_rows = g.k[0] * g.k[1];
    if (!pl->padded_rows || pl->row_blocks || pl->path == DataPath::col ||
        tap_rows * pl->scratch.row_bytes <= kLongRowBytes)
        return;
    int64_t npx = INT64_MAX;
    for (int64_t r = 0; r < g.stride[2]; ++r) npx = std::min(npx, phase_pixel_count(g, r));
    const int64_t m = pl->blk.m;
    int64_t target = std::max<int64_t>(4 * m, kSegmentBytes / (tap_rows * pl->dd_pitch));
    // NCX windows: the transposes read and write runs of each channel of
    // at least kWindowSegmentRunBytes.
    if (pl->ncx_windows) target = std::max<int64_t>(target, kWindowSegmentRunBytes / int64_t(dtype_size(p.dt)));
    const int64_t segs = npx / target;
    if (segs < 2) return;
    pl->segments = segs;
    pl->seg_pixels = npx / segs / m * m;
    int64_t widest = 0;
    for (const auto& w : seg_windows(*pl)) widest = std::max(widest, w.second - w.first);
    pl->scratch.row_bytes = widest * pl->dd_pitch;
}

// Channel blocks per call (DataPlan::cb_reps): a depthwise plan's blocks,
// or the groups of a direct plan with one block a group. Their calls are
// short (a few taps of G or ocg reductions), and per call the executor
// builds the entries and the kernel sets up and stores its tile. Measured
// (AMD Zen 5, 2 threads, mb 32, min of 3, 84 f32 / bf16 layers of
// RegNet, ResNeXt-50, MobileNetV2, EfficientNet-B0, ConvNeXt-T): 1.10-1.55x
// on small planes and strided groups (ResNeXt-50 conv5 s2 1.47 / 1.55,
// ConvNeXt-T s4 7x7 depthwise 1.24 / 1.48, MobileNetV2 b14 1.15 / 1.40),
// even on large planes. RegNetY-400MF s2 / s3 f32 (lane groups of 8 at
// 28x28 / 14x14) first lost 0.87x on two threads: a phase's partial pixel
// block came after every channel block's full ones; with the partial block
// in the same rep (DataKernelDesc::tail_m) they gain 1.16 / 1.21x.
// Row blocks (a plane's rows in a call) gained 1.08-1.18x on RegNetX-400MF
// s4 (16-channel groups at 7x7) and read even (0.98-1.04x) on 14x14 and
// ResNeXt-50 conv4 / conv5. A group's blocks (dense layers, and groups of
// several blocks) run as many a call as keep their W chunks in L2 together
// (kWChunkBytes): each call carries the whole oc reduction, yet on short
// rows its set-up still weighed (ResNet-50 res5a_branch2a bf16, 7-pixel
// rows: 8 % of the samples outside the kernels, 2 % in runs of ten).
// AMD Zen 5, 2 threads, min of 3, against one block a call: ResNet-50 at
// mb 32, f32 and bf16, 1.014x over 40 cells (1x1 s2 res5a_branch2a
// 1.09-1.14x, res4a_branch2a 1.06x, res3a_branch2a 1.02-1.07x; the rest
// 0.98-1.04x); AVX2 at mb 16 1.024x; 56 layers of seven other networks at
// mb 16 1.009x over 112 cells (docs/PERFORMANCE.md). Runs are cut where the
// row groups alone leave fewer than kItemsPerThread items a thread.
void choose_cb_reps(const Problem& p, DataPlan* pl) {
    if (pl->path == DataPath::col) return;
    const DataChannelBlocks& cb = pl->cb;
    const int64_t shared = cb.per_group - pl->last_block_alone();  // a group's blocks that share a kernel
    int64_t run = 1;
    if (pl->path == DataPath::depthwise) {
        run = shared;
    } else if (cb.per_group == 1 && p.g > 1) {
        run = cb.total;
    } else if (cb.per_group > 1) {
        const int64_t chunk_bytes = cb.block * p.k_sp() * pl->oc_chunk * pl->w_elem_bytes;
        run = std::clamp<int64_t>(kWChunkBytes / chunk_bytes, 1, shared);
    }
    const int64_t row_groups = div_up(pl->rows, pl->group_rows) * pl->segments;
    const int64_t runs = div_up(kItemsPerThread * pl->grid.threads, row_groups);
    pl->cb_reps = std::max<int64_t>(1, div_up(run, runs));
}

// The compute form for the path: vdpbf16ps for bf16 direct when the ISA has
// it, else f32 FMAs on widened diff_dst; the kernels' ISA follows.
void choose_types(const Problem& p, Isa isa, DataPlan* pl) {
    pl->types = DataKernelTypes();
    pl->dt = pl->types.in = pl->types.out = p.dt;
    const Isa base = isa >= Isa::avx512_core ? Isa::avx512_core : Isa::avx2;
    pl->isa = base;
    // The depthwise convolution pairs kh rows: kh and kh + step are valid
    // together for a diff_src row (a kh stride of s / gcd(s, dilation)).
    const DataGeometry& g = pl->geo;
    const int64_t step = g.stride[1] / std::gcd(g.stride[1], g.dil[1]);
    const bool dw = pl->path == DataPath::depthwise;
    pl->row_pair_step = 0;
    if (p.dt == data_type::f32)
        pl->types.compute = DataCompute::f32;
    else if (p.dt == data_type::bf16 && isa >= Isa::avx512_core_bf16 &&
             (pl->path != DataPath::depthwise || pl->lane_group >= 2 || step < g.k[1]))
        pl->types.compute = DataCompute::bf16_dot;
    else
        pl->types.compute = DataCompute::widen;
    if (is_dot(*pl) && dw && pl->lane_group == 1) {
        pl->types.row_pairs = DataRowPairs::permute;
        pl->row_pair_step = step;
    }
    if (is_dot(*pl)) pl->isa = Isa::avx512_core_bf16;
    pl->w_elem_bytes = is_dot(*pl) ? 2 : 4;
    pl->ocg_w = is_dot(*pl) ? div_up(p.ocg, 2) * 2 : p.ocg;
}

}  // namespace

// Depthwise kernel entries per (kh, kw) tap, or per kh row (dw_row_taps):
// then `row_taps` taps s kw apart (see DataKernelDesc::row_taps).
DataKernelTypes data_kernel_types(const DataPlan& pl, int64_t row_taps) {
    DataKernelTypes t = pl.types;
    if (pl.dw_row_taps) {
        t.row_taps = static_cast<int>(row_taps);
        t.tap_dil = static_cast<int>(row_tap_pixels(pl.geo));
        t.w_tap_step = static_cast<int>(pl.geo.stride[2]);
        t.tap_seq = pl.dw_tap_seq ? pl.dw_tap_group : 0;
    }
    if (pl.direct_row_taps) {
        if (t.compute == DataCompute::widen) {  // widened in the padded rows (choose_padded_rows)
            t.compute = DataCompute::f32;
            t.in = data_type::f32;
        }
        t.row_taps = static_cast<int>(pl.geo.k[2]);
        t.tap_dil = static_cast<int>(pl.geo.dil[2]);
        t.row_x0 = static_cast<int>(pl.geo.pad[2]);
        t.row_w = static_cast<int>(pl.geo.out[2]);
        t.row_stride = static_cast<int>(pl.geo.stride[2]);
    }
    t.lane_group = pl.lane_group;
    return t;
}

const char* data_path_name(DataPath p) {
    switch (p) {
        case DataPath::direct: return "direct";
        case DataPath::depthwise: return "depthwise";
        case DataPath::col: return "col";
    }
    return "?";
}

// Runs: a direct plan with one block a group runs over the groups; else
// over a group's blocks, the last one alone where it is narrower (its own
// kernel).
bool DataPlan::last_block_alone() const { return cb.per_group > 1 && (cb.tail_n != blk.n || cb.tail_lanes != 0); }

int64_t DataPlan::cb_runs() const {
    if (cb.per_group == 1) return div_up(cb.total, cb_reps);
    const bool alone = last_block_alone();
    return cb.total / cb.per_group * (div_up(cb.per_group - alone, cb_reps) + alone);
}

std::pair<int64_t, int64_t> DataPlan::cb_run(int64_t r) const {
    if (cb.per_group == 1) return {r * cb_reps, std::min(cb.total, (r + 1) * cb_reps)};
    const int64_t alone = last_block_alone(), full = cb.per_group - alone;
    const int64_t per = div_up(full, cb_reps) + alone;  // runs a group
    const int64_t g0 = r / per * cb.per_group, k = r % per;
    if (alone && k + 1 == per) return {g0 + full, g0 + cb.per_group};
    return {g0 + k * cb_reps, g0 + std::min(full, (k + 1) * cb_reps)};
}

std::pair<int64_t, int64_t> DataPlan::seg_range(int64_t r, int64_t s) const {
    const int64_t npx = phase_pixel_count(geo, r);
    if (segments == 1) return {0, npx};
    return {std::min(npx, s * seg_pixels), s + 1 == segments ? npx : std::min(npx, (s + 1) * seg_pixels)};
}

std::vector<std::pair<int64_t, int64_t>> seg_windows(const DataPlan& pl) {
    // Per phase, the least and greatest tap base (a phase's taps computed
    // once: long rows have hundreds of segments).
    std::vector<std::pair<int64_t, int64_t>> bases;
    for (int64_t r = 0; r < pl.geo.stride[2]; ++r) {
        int64_t lo = INT64_MAX, hi = INT64_MIN;
        for (const PhaseTap& t : phase_taps(pl.geo, r)) {
            lo = std::min(lo, t.base);
            hi = std::max(hi, t.base);
        }
        bases.emplace_back(lo, hi);
    }
    std::vector<std::pair<int64_t, int64_t>> out;
    for (int64_t s = 0; s < pl.segments; ++s) {
        int64_t lo = INT64_MAX, hi = INT64_MIN;
        for (int64_t r = 0; r < pl.geo.stride[2]; ++r) {
            const auto [j0, j1] = pl.seg_range(r, s);
            const auto [b0, b1] = bases[static_cast<size_t>(r)];
            if (j0 == j1 || b0 > b1) continue;
            lo = std::min(lo, b0 + j0);
            hi = std::max(hi, b1 + j1);
        }
        out.push_back(lo < hi ? std::make_pair(lo, hi) : std::make_pair(int64_t(0), int64_t(0)));
    }
    return out;
}

std::pair<int64_t, int64_t> window_inside(const DataPlan& pl, std::pair<int64_t, int64_t> w) {
    const int64_t x0 = std::clamp<int64_t>(w.first, 0, pl.geo.out[2]);
    return {x0, std::clamp<int64_t>(w.second, x0, pl.geo.out[2])};
}

int64_t DataChannelBlocks::padded() const {
    return per_group == 0 ? 0 : (per_group - 1) * block + int64_t(tail_n) * vlen;
}

// Lane groups (G > 1 only for grouped layers): one vector holds 16 / G
// groups (AVX2: 8 / G). A group of 16 on AVX-512 only for bf16 oc pairs
// with a W stride: with unit strides the direct path ran 3-8 % faster
// (ResNeXt-50 512 ch, 32 groups, 14x14; bf16 oc pairs 7 %). Under a W
// stride, once the direct path's row blocks and its col / direct choice
// came (2026-12-05), it led in f32 and f16 (RegNet-X and ResNeXt-50
// 3x3 s2 groups of 16, AMD Zen 5, 2 threads, min of 5: f32 1.02-1.25x at
// mb 8 / 32, f16 1.75-2.10x, NCX f32 0.99-1.10x), not bf16 (0.82-1.10x).
bool data_depthwise_path(const Problem& p, Isa isa) {
    const bool pow2 = (p.icg & (p.icg - 1)) == 0;
    const bool g16 = isa >= Isa::avx512_core_bf16 && p.dt == data_type::bf16 && p.icg == 16 && p.stride.back() > 1;
    return p.icg == p.ocg && pow2 && (p.icg == 1 || (p.g > 1 && (p.icg <= 8 || g16)));
}

// A depthwise plan of an entry per tap (blocking chosen) as tap groups
// (DataPlan::dw_tap_seq), where the kernels take them.
void take_tap_seq(const Problem& p, DataPlan* pl) {
    const DataGeometry& g = pl->geo;
    // Plans left with an entry per tap (too few accumulators for a
    // row's W vectors, short strided phases) take a kh row's taps one
    // after another instead (DataPlan::dw_tap_seq): the same loads and
    // FMAs, fewer entries, and the W edges compiled in. Against an
    // entry per tap (AMD Zen 5, 2 threads, min of 5, f32 / bf16, the 8
    // such layers of the depthwise sets): 1.185x at mb 32 (MobileNetV2
    // b6 / b13 1.13-1.29x, EfficientNet b6 s2 1.15-1.27x, MobileNet
    // v1 conv4_2 / conv5_6 1.07-1.45x, X3D 5x5x5 s2 0.99-1.51x), 1.161x
    // at mb 8; AVX2 over MobileNetV2's 10, 1.054x (s2 1.07-1.33x).
    if (!pl->dw_row_taps && g.k[2] > 1 && pl->lane_group < pl->blk.vlen &&
        (g.stride[2] == 1 || g.dil[2] == 1)) {
        pl->dw_row_taps = true;
        pl->dw_tap_seq = true;
    }
    // Long kernels' taps one at a time load (16-bit: widen) a diff_dst
    // vector per FMA; groups of 2 or 4 taps share each (DataPlan::
    // dw_tap_group), at fewer pixels a block. The model picks the group
    // and the blocking. Groups forced (Intel Xeon, 2 threads, min of 5,
    // Conformer dw31, QuartzNet 33-87 taps, RepLKNet 29x29): 2 against 1
    // geomean 1.21x (bf16 / f16 1.20-1.50x), 4 against 2 1.16x, 6
    // against 4 1.01x. As chosen, against one at a time over QuartzNet,
    // the Conformer and RepLKNet (30 cells): f32 0.98-1.51x, bf16 / f16
    // 1.45-1.89x (RepLKNet 13x13 and QuartzNet's stride-2 layer, whose
    // plans hold a row's taps at once, unchanged: 0.95-1.01x). bf16
    // vdpbf16ps plans (kh row pairs) keep one tap at a time.
    if (pl->dw_tap_seq && row_tap_count(g) >= kDataSeqLoopTaps && !is_dot(*pl)) {
        DataPlan best = *pl;
        best.est_cycles = -1;
        for (int t = 1; t <= kMaxDwTapGroup; t *= 2) {
            DataPlan x = *pl;
            x.dw_tap_group = t;
            // Within 2 %, the larger group: fewer loads, which the
            // bound does not count where the FMAs bind (f32: 4 against
            // 2, modelled even, ran 1.10x).
            if (choose_blocking(p, &x) && (best.est_cycles < 0 || x.est_cycles <= best.est_cycles * 1.02)) best = x;
        }
        if (best.est_cycles >= 0) *pl = best;
    }
}

bool make_data_plan(const Problem& p, Isa isa, int threads, DataPlan* pl, std::string* why) {
    *pl = DataPlan();
    pl->geo = make_geometry(p);
    bool ok = false;
    if (data_depthwise_path(p, isa)) {
        pl->path = DataPath::depthwise;
        pl->lane_group = static_cast<int>(p.icg);
        choose_types(p, isa, pl);
        // Under a W stride s (dilation 1) a phase's taps are s kw and one
        // diff_dst pixel apart, and an entry carries them all when some
        // phase has two. Measured (AMD Zen 4, 2 threads, against one entry
        // per tap): permuting lane groups of 2-8 1.05-1.24x (RegNetY,
        // ResNeXt-50 conv3_g3x3_s2, groups of 2 and 4 at 112 -> 56 and
        // 56 -> 28); depthwise 1.08-1.56x on phases of 28-56 pixels
        // (EfficientNet-B0 b2, b3) but 0.79-0.93x on 7 (b6) and even on 14;
        // groups filling the vector 0.75-0.98x (they lose the broadcast
        // inside the FMA). With AVX2's 16 registers the taps' W vectors
        // shrink the blocks: 16-bit 0.70-0.93x, f32 lane groups and 3x3
        // depthwise 0.93-1.00x, but f32 5x5 depthwise (3 taps a phase)
        // 2.6-2.7x (EfficientNet-B0 b3, 240 channels at 56 -> 28).
        const DataGeometry& g = pl->geo;
        const bool avx512 = isa >= Isa::avx512_core;
        const bool strided_taps =
                g.stride[2] > 1 && g.dil[2] == 1 && g.k[2] > g.stride[2] &&
                (avx512 ? p.icg < 16 && (p.icg > 1 || phase_pixel_count(g, 0) >= kRowTapsMinPhasePixels)
                        : p.icg == 1 && p.dt == data_type::f32 && row_tap_count(g) >= 3);
        pl->dw_row_taps = g.k[2] > 1 && (g.stride[2] == 1 || strided_taps);
        ok = choose_blocking(p, pl);
        // A row's taps hold a W vector each in registers: long kernels
        // leave few accumulators, or none (kw >= 31 on AVX-512), and then
        // run an entry per tap.
        if (pl->dw_row_taps && (!ok || pl->blk.m * pl->blk.n < kMinRowTapAccs)) {
            DataPlan taps = *pl;
            taps.dw_row_taps = false;
            if (choose_blocking(p, &taps)) {
                *pl = taps;
                ok = true;
            }
        }
        // Row pairs: vpermw beat vpexpandw at equal blockings (AMD Zen 4, 2
        // threads, 21 MobileNetV2 / EfficientNet-B0 / ConvNeXt-T layers:
        // 0.72-1.01x with vpexpandw), but its index register can cost the
        // channels their single block: 96 channels at 112 -> 56 in 2 blocks
        // ran at 0.46x the vpexpandw form's one. (Where the register costs
        // a block a pixel instead, neither form wins throughout: 144
        // channels at 56 -> 28 m4 x n5 1.47x, 672 at 14 -> 7 0.76x, 96
        // at 56x56 7x7 0.82x.)
        if (ok && pl->dw_row_pairs() && pl->cb.per_group > 1 && cpu_has_vbmi2()) {
            DataPlan x = *pl;
            x.types.row_pairs = DataRowPairs::expand;
            if (choose_blocking(p, &x) && x.cb.per_group == 1) *pl = x;
        }
        if (ok) take_tap_seq(p, pl);
        // Where the rows' pixels share L1 sets (dw_pixel_set_cycles), the
        // entries of a row's taps read their windows from L2, and tap
        // groups, whose windows are shorter, are planned too: the cheaper
        // by the model is taken (AMD Zen 4, one thread, mb 2, 500 pixels:
        // 9 / 15 / 25 taps at 512 channels 1.88 / 1.25 / 1.91x, 9 / 31 taps
        // at 1024 channels (256 pixels) 1.75 / 1.81x). Shorter kernels
        // keep a row's taps: their groups are not searched (kDataSeqLoopTaps).
        if (ok && pl->dw_row_taps && !pl->dw_tap_seq && !is_dot(*pl) && row_tap_count(pl->geo) >= kDataSeqLoopTaps &&
            dw_pixel_set_cycles(p, *pl) > 0) {
            DataPlan taps = *pl;
            taps.dw_row_taps = false;
            if (choose_blocking(p, &taps)) {
                take_tap_seq(p, &taps);
                if (taps.dw_tap_seq && taps.est_cycles < pl->est_cycles) *pl = taps;
            }
        }
    } else {
        pl->path = DataPath::direct;
        choose_types(p, isa, pl);
        ok = choose_blocking(p, pl);
        // Whole rows when a blocking holding one costs at most kRowBlockSlack
        // more by the model, which does not see W served from L1 instead of
        // L2 (measured: 256 ch at 14x14, bf16, 2 threads: m14 x n2 rows 883
        // GFLOP/s vs m5 x n4 808); never when the row leaves too few
        // accumulators (AVX2, 7 wide: m7 x n1) or a broadcast per FMA (AVX2,
        // 14 wide: m14 x n1 ran 15 % below m6 x n2): AVX-512 only.
        if (pl->isa >= Isa::avx512_core && row_blocks_fit(p, pl->geo)) {
            DataPlan rows = *pl;
            rows.row_blocks = true;
            if (choose_blocking(p, &rows) && (!ok || rows.est_cycles <= pl->est_cycles * kRowBlockSlack)) {
                *pl = rows;
                ok = true;
            }
            // Row taps where they cost less by the model. Row blocks read
            // padded rows, which a widen plan widens to f32 as it copies
            // them (choose_padded_rows), so its kernels run f32 too.
            DataPlan taps = *pl;
            taps.direct_row_taps = true;
            if (pl->row_blocks && p.k[2] > 1 && choose_blocking(p, &taps) && taps.est_cycles < pl->est_cycles)
                *pl = taps;
        }
        // Under a stride, row taps take a whole row's W phases in one block
        // (its accumulators the row's pixels, each diff_dst pixel broadcast
        // once for the taps that read it) instead of a block per phase of
        // half or fewer pixels, each tap its own pass. Against the phases
        // (Intel Xeon, 2 threads, mb 32, min of 3): grouped 3x3 s2 layers
        // in groups of 16 (RegNetX-400MF s3 / s4, ResNeXt-50 conv4) f32
        // 1.13-1.36x; a 3D 3x3 s2 layer 1.05-1.09x. So do
        // unit-stride rows of 17-28 pixels: against blocks of a row's
        // pixels (same host, f32 / f16): ResNet-50 res3 3x3 (128 channels,
        // 28x28) 1.15 / 1.14x, Inception-v3's 1x7 layers at 17x17
        // 1.09-1.29x, RegNetX-400MF's groups of 16 at 28x28 1.07 / 1.08x,
        // DeepLab-v3's 3x3 dilated 17 at 17x17 2.0 / 2.2x, a 1D k3 dilated
        // 5 on 19 samples 1.38x; geomean 1.25x over 22.
        if (pl->isa >= Isa::avx512_core && row_blocks_fit(p, pl->geo, true)) {
            DataPlan taps = *pl;
            taps.row_blocks = true;
            taps.direct_row_taps = true;
            if (choose_blocking(p, &taps) && (!ok || taps.est_cycles < pl->est_cycles)) {
                *pl = taps;
                ok = true;
            }
        }
        const int vlen = pl->isa >= Isa::avx512_core ? 16 : 8;
        if (p.icg < 2 * vlen && p.k_sp() > 1) {
            DataPlan col = *pl;
            col.path = DataPath::col;
            col.row_blocks = false;
            col.direct_row_taps = false;
            // The col executor walks the Problem's own (n, id, ih) rows: a
            // folded H (3D, kernel only in D) would leave rows unwritten.
            col.geo = make_geometry(p, 0);
            // Chosen on its f32 / widened cost: bf16 pairs (the compute
            // where the CPU has vdpbf16ps) halve the column GEMM but not the
            // scatter, and with the GEMM halved the model took col over row
            // blocks on small planes that then ran 0.37x (8x5 pixels).
            // One input channel: a direct plan on vdpbf16ps pairs is
            // judged on its widened cost too (its tiles keep one live lane
            // a vector; the halved GEMM of its estimate had kept the 3D
            // U-Net's 1 -> 16 3x3x3 input off col, which ran 2.30x faster
            // at mb 32, AMD Zen 4, 2 threads, min of 5). With 3-17 input
            // channels the same judgement moved 14 small or dilated layers
            // to col at 0.33-1.28x: they keep the rule above.
            DataPlan judged = col;
            choose_types(p, std::min(isa, Isa::avx512_core), &judged);
            double against = ok ? pl->est_cycles : 0.0;
            if (ok && p.icg == 1 && is_dot(*pl)) {
                DataPlan widened = *pl;
                choose_types(p, std::min(isa, Isa::avx512_core), &widened);
                if (choose_blocking(p, &widened)) against = widened.est_cycles;
            }
            if (choose_blocking(p, &judged) && (!ok || judged.est_cycles < against)) {
                choose_types(p, isa, &col);
                *pl = is_dot(col) && choose_blocking(p, &col) ? col : judged;
                ok = true;
            }
        }
    }
    if (!ok) {
        *why = "pixel strides exceed 32-bit displacements";
        return false;
    }
    // Dense layers of long rows (their taps' diff_dst rows over
    // kLongRowBytes) are cut into segments (choose_segments), whose windows
    // hold the segment's pixels of every channel of the item's rows. Where
    // kernels reach several rows (kh or kd > 1) each item would transpose
    // rows its neighbours transposed too: those keep whole transposes (a
    // 3x3 layer of 64 channels on 8 x 4096 planes, bf16: 0.86x with
    // windows). 1D layers of 80-512 channels on 3000-20000 samples (AMD Zen
    // 5, 2 threads, f32 and bf16, min of 3): 1.00x geomean over 18 cells,
    // their scratch 33-259 MiB -> 1.5-20 MiB.
    const DataGeometry& geo = pl->geo;
    const int64_t tap_rows = geo.k[0] * geo.k[1];
    const bool long_dense = p.g == 1 && tap_rows > 1 && tap_rows * geo.out[2] * p.oc() * 4 > kLongRowBytes;
    pl->ncx_windows = !p.nxc && geo.images_per_row == 1 &&
                      (pl->path == DataPath::depthwise || (pl->path == DataPath::direct && !long_dense));
    choose_cache_blocking(p, pl);
    // Packing a depthwise layer's W (a run of a block's channels per tap,
    // every execute) had been 40-65 % of the data gradient of
    // RepLKNet-31B's 27x27 / 13x13 stages and of MobileNet v1's last 7x7
    // layers on one image (Intel Xeon, 2 threads: a throwaway switch
    // leaving the pack out, timed against it); there the kernels read XIO
    // W in place. Its share falls with the diff_dst pixels a channel, and
    // W in place, its taps a channel count apart, crowds a few L1 sets:
    // against packing (same host, min of 5), 3x3 layers 1.04-2.07x up to
    // 784 pixels, 0.98-1.03x at 3136; 13x13 / 27x27 kernels 1.31-1.77x up
    // to 196, 0.95 / 1.00x at 784, 0.88x at 3136. 16-bit W is widened as
    // the kernel loads it, a conversion per W vector a block, on the FMA
    // ports: f16 1.07-1.68x up to 196 pixels, 3x3 layers 0.88-1.03x at
    // 784. (bf16 row pairs and lane groups interleave W in the pack: those
    // keep it.)
    const WeightStrides& ws = p.wei_str;
    const int64_t w_es = static_cast<int64_t>(dtype_size(p.dt));
    const int64_t tap_span = (p.k[2] - 1) * ws.k[2] * w_es;  // a kh row's taps, in one displacement
    const int64_t dd_pixels = p.mb * p.out_sp();
    const bool pack_costly =
            dd_pixels <= (p.dt == data_type::f32 && p.k_sp() <= 9 ? kWInPlaceSmallPixels : kWInPlacePixels);
    // A large kernel's taps crowd their L1 sets beyond the ways: its W
    // loads come from L2, which blocks of few pixels (a W load per one or
    // two FMAs) do not hide (AVX2, RepLKNet 13x13 at 1024 channels, m2:
    // 0.85x in place; m5 27x27 1.31x).
    const bool w_loads_hidden = p.k_sp() <= 9 || pl->blk.m >= 4;
    // (The kernel reads W as its diff_dst: not where padded rows widen that.)
    pl->w_in_place = pl->path == DataPath::depthwise && pl->lane_group == 1 && !is_dot(*pl) &&
                     !pl->dw_row_pairs() && !pl->widen_rows && ws.o == 1 && pl->cb.tail_lanes == 0 &&
                     tap_span < (int64_t(1) << 30) && pack_costly && w_loads_hidden;
    size_scratch(p, pl);
    pl->rows = row_images(p, pl->geo) * pl->geo.in[0] * pl->geo.in[1];
    pl->grid.threads = std::max(1, threads);
    choose_segments(p, pl);
    // NCX windows of depthwise rows read in place, their pixels a multiple
    // of 512 bytes apart: a channel vector's line of every pixel the taps
    // read falls into at most 8 of the 64 L1 sets, where they evict each
    // other (as in the weight gradient's windows, WeightsPlan::window_pad).
    // The transposes write the windows' pixels a line further apart
    // instead. AMD Zen 5, 2 threads, min of 3, MobileNet v1 / V2,
    // EfficientNet-B0, ConvNeXt-T depthwise layers on such pixels against
    // unpadded windows (docs/PERFORMANCE.md): f32 pixels of 2 and 4 KiB
    // 1.09-1.84x, 1 KiB 1.05-1.21x, bf16 2 KiB 1.20-1.27x, 1 KiB
    // 1.02-1.06x; 512 bytes and odd multiples of it 0.98-1.03x; AVX2
    // 1.13-1.72x and 0.98-1.04x.
    // (Only where a block's reach at the wider pitch stays far inside the
    // kernels' 32-bit displacements, which choose_blocking checked at the
    // tensor's pitch.)
    const int64_t reach = (pl->blk.m + geo.k[2] * geo.dil[2]) * geo.stride[2] * (pl->dd_pitch + kCacheLineBytes);
    if (pl->ncx_windows && pl->path == DataPath::depthwise && !pl->padded_rows && !pl->row_blocks &&
        pixels_in_few_l1_sets(pl->dd_pitch) && reach < INT32_MAX / 2) {
        pl->window_pad = kCacheLineBytes;
        pl->dd_pitch += kCacheLineBytes;
    }
    choose_cb_reps(p, pl);
    pl->grid.items = pl->path == DataPath::col ? pl->rows
                                               : pl->segments * div_up(pl->rows, pl->group_rows) * pl->cb_runs();
    // Streaming stores for outputs far bigger than the caches whose FMAs are
    // few per output byte (depthwise, 1x1 with a short reduction): there
    // the read of every line before it is written costs a third of the
    // traffic. They need every vector store aligned to its size (whole
    // vectors only, pixels and group offsets whole vectors) and one final
    // store per element (a single oc chunk, or a 16-bit output whose partial
    // sums live in scratch).
    const int64_t out_bytes = p.mb * p.in_sp() * p.ic() * static_cast<int64_t>(dtype_size(p.dt));
    const bool one_store = pl->path == DataPath::depthwise || p.ocg <= pl->oc_chunk || p.dt != data_type::f32;
    const bool big = pl->path != DataPath::col && out_bytes >= kStreamingOutputBytes &&
                     p.flops() / double(out_bytes) < kStreamingFlopsPerByte;
    // Each line's stores come together or the write-combining buffers flush
    // it in parts: a W stride interleaves the phases' pixels (RegNetY 48
    // channels in groups of 8, 112 -> 56, bf16: 96-byte pixels, 1.21x with
    // ordinary stores), and channel blocks narrower than a line, written by
    // separate items, leave every line in parts (AVX2 lane groups of 4,
    // 32-byte blocks: 1.38x). Wider blocks split only some lines, and there
    // streaming still won (ResNet-50 res4a_branch2a bf16, 96-byte blocks:
    // 0.86x without).
    const int64_t es = static_cast<int64_t>(dtype_size(p.dt));
    // The depthwise convolution (G = 1) lost even there: 144 channels in
    // blocks of 48 at 56x56, bf16 and f16, 1.33-1.36x with ordinary stores
    // and write prefetches (EfficientNet-B0 240 channels in blocks of 48,
    // 672 in blocks of 112: 1.05-1.09x; AMD Zen 4, 2 threads, min of 5).
    const bool dw_split = pl->path == DataPath::depthwise && pl->lane_group == 1 && pl->cb.per_group > 1 &&
                          pl->cb.block * es % kCacheLineBytes != 0;
    // Direct groups narrower than a line leave it in parts too, each
    // group's pixels a rep of their own: f16 groups of 16 (32 bytes) ran
    // 6-10x faster with ordinary stores (Intel Xeon, 2 threads, mb 32, min
    // of 3: RegNetX-400MF s1 / s2 3x3 s2 10.1x, 8 groups of a 1D layer on
    // 30000 samples 6.1x, unit stride 56x56 3.1x).
    const bool narrow_groups = pl->path == DataPath::direct && p.g > 1 && p.icg * es < kCacheLineBytes;
    const bool whole_lines = (pl->geo.stride[2] == 1 || p.ic() * es % kCacheLineBytes == 0) &&
                             (pl->cb.per_group == 1 || pl->cb.block * es >= kCacheLineBytes) && !dw_split &&
                             !narrow_groups;
    const double dd_bytes = double(p.mb * p.out_sp() * p.oc()) * double(es);
    const double data_bytes = double(out_bytes) + dd_bytes;  // diff_dst and diff_src together
    const bool data_cached = data_bytes <= (pl->isa == Isa::avx2 ? kDwCachedBytesAvx2 : kL3Bytes);
    const bool strided_dw_cached = pl->path == DataPath::depthwise && p.stride[0] == 1 &&
                                   (p.stride[1] > 1 || p.stride[2] > 1) && data_cached;
    // (Row blocks store plainly: build_kernels.)
    pl->nt_store = big && !pl->row_blocks && !strided_dw_cached && one_store && whole_lines && !pl->ncx_windows &&
                   (pl->path == DataPath::depthwise || p.icg % pl->blk.vlen == 0) && p.ic() % pl->blk.vlen == 0;
    // Where streaming stores cannot serve (channels not whole vectors, or
    // diff_src not 64-byte aligned at run time), depthwise kernels prefetch
    // each block's lines for writing before its FMAs: their few FMAs per
    // block otherwise wait on the reads for ownership at the stores (AMD
    // Zen 4, one thread, RegNetY 104 channels in groups of 8: 1.35x with
    // stride 2, 1.13x without).
    pl->pf_store = big && pl->path == DataPath::depthwise && !pl->ncx_windows;  // (windows: in cache)
    // Where the kernels' stores leave lines in parts, f32 depthwise row
    // groups are computed into scratch and streamed out whole
    // (DataPlan::stream_rows): every line of diff_src is then written once,
    // without its read for ownership. AMD Zen 4, 2 threads, mb 32, min of 7,
    // against the prefetched plain stores: 3x3 / 5x5 s2 on 40-120 channels
    // at 160-480-byte pixels (MobileNetV3 dw5x5_s2 1.50x) 1.50-1.76x,
    // RegNetY-400MF s2 3x3 s2 (lane groups of 8, 416 bytes) 1.11-1.21x;
    // 16-bit outputs 0.92-1.07x, direct (dense and grouped) plans
    // 0.83-1.04x and a 3D layer with a D stride (6 channels) 0.96x, so not
    // those.
    const int64_t rows_out = pl->group_rows * pl->geo.in[2] * p.ic() * es;  // (geometry rows: 1x1 planes merged)
    pl->stream_rows = big && !pl->nt_store && !whole_lines && !strided_dw_cached && p.nxc && !pl->ncx_windows &&
                      !pl->row_blocks && pl->segments == 1 && pl->isa >= Isa::avx512_core &&
                      pl->path == DataPath::depthwise && p.dt == data_type::f32 && p.stride[0] == 1 &&
                      rows_out <= kStreamRowsMaxBytes;
    if (pl->stream_rows) {
        pl->scratch.rows_out_bytes = rows_out;
        pl->grid.items = div_up(pl->rows, pl->group_rows);
    }
    pl->window_nt = (pl->ncx_windows || (!p.nxc && pl->path == DataPath::col)) && out_bytes >= kStreamingOutputBytes;
    // Rows read in place come from DRAM where the tensors exceed L3: the
    // blocks prefetch the row the next diff_src row reads first (AMD Zen 5,
    // 2 threads, mb 32, min of 5, against no prefetch: MobileNetV2 b0 / b2
    // 1.09-1.82x, b1 1.06-1.20x, b4 1.00-1.09x; within L3 (b7, b11, b14)
    // 0.93-1.00x). A guest's share of a shared L3 is smaller than the L3:
    // on the AMD Zen 3 guest (32 MiB L3; two threads read 16 MiB at 20
    // GB/s, 128 MiB at 14) the f32 layers of 9-29 MB at mb 8, diff_dst and
    // diff_src together, ran 1.2-7x faster with the prefetch
    // (tools/sweep_ab.py --rounds=5 --min, 2 threads: MobileNetV2 b0 / b2
    // 5.5-7.0x, MobileNet v1 conv2_1 / conv3_1 3.8-6.2x, EfficientNet-B0 b1
    // 5.2x, b3 5x5 1.22-1.47x, MobileNetV2 b4 1.17-1.22x; at mb 32 b7 /
    // b11 / EfficientNet-B0 b4 3.5-4.9x; strided 0.89-1.55x; bf16 0.88-4.4x),
    // where MobileNetV2 b6-b14 at mb 8 (3-7 MB) read 0.90-0.97x with it:
    // so from kDwPrefetchBytes.
    pl->dw_prefetch_rows = pl->dw_edges && !pl->ncx_windows && data_bytes > kDwPrefetchBytes;
    return true;
}

// The innermost loop of to_string: what one entry of a block does.
std::string DataPlan::body_text() const {
    const std::string n = std::to_string(blk.n);
    if (direct_row_taps) {
        const int64_t r = block_rows();
        const RowTapWork w = direct_row_tap_work(geo, blk.m / r);
        return std::string(is_dot(*this) ? "for oc pair: " : "for oc: ") +
               std::to_string(geo.k[2] * blk.n) + " W loads, " + std::to_string(r * w.pixels) + " bcasts, " +
               std::to_string(r * w.pairs * blk.n) + " FMAs (W edges compiled in)";
    }
    if (path != DataPath::depthwise)
        return std::string(is_dot(*this) ? "for oc pair: " : "for oc: ") + n + " W loads, " +
               std::to_string(blk.m) + " bcasts, " + std::to_string(blk.m * blk.n) + " FMAs" +
               (types.pf_lines > 1 ? ", " + std::to_string(types.pf_lines) + " lines of the next block prefetched per " +
                                             std::to_string(blk.oc_unroll) + " steps"
                                   : "");
    const std::string per_o = lane_group <= 1 ? ""
                              : is_dot(*this)  ? "for oc pair in " + std::to_string(lane_group / 2) + ": "
                                               : "for o in " + std::to_string(lane_group) + ": ";
    const std::string dd =
            lane_group > 1    ? " permuted dd loads"
            : !dw_row_pairs() ? " dd loads"
            : types.row_pairs == DataRowPairs::expand
                    ? " dd pairs (vpmovzxwd + vpexpandw; a kh alone: vpmovzxwd)"
                    : " dd pairs (2 loads + vpermw; a kh alone: vpmovzxwd)";
    const std::string kh = dw_row_pairs() ? "per kh pair" : "per kh";
    if (dw_row_taps) {
        const int64_t taps = row_tap_count(geo);
        const int64_t t = dw_tap_seq ? std::min<int64_t>(dw_tap_group, taps) : taps;  // taps a group
        const std::string seq = (!dw_tap_seq ? ""
                                 : t > 1     ? " in groups of " + std::to_string(t)
                                             : " one at a time") +
                                (dw_tap_seq && taps >= kDataSeqLoopTaps ? ", looped where they read the same pixels"
                                                                        : "");
        const std::string head = geo.stride[2] > 1 ? kh + ", up to " + std::to_string(taps) + " taps of the phase" + seq
                                 : dw_tap_seq       ? kh + ", " + std::to_string(taps) + " taps" + seq
                                                    : kh;
        if (dw_tap_seq && t > 1)
            return head + ": " + per_o + "per group " + std::to_string(t * blk.n) + " W loads, " +
                   std::to_string((blk.m + (t - 1) * row_tap_pixels(geo)) * blk.n) + dd + ", " +
                   std::to_string(t * blk.m * blk.n) + " FMAs";
        if (dw_tap_seq)
            return head + ": " + per_o + "per tap " + std::to_string(blk.n) + " W loads, " +
                   std::to_string(blk.m * blk.n) + dd + ", " + std::to_string(blk.m * blk.n) + " FMAs";
        return head + ": " + per_o + std::to_string(taps * blk.n) + " W loads, " +
               std::to_string((blk.m + (taps - 1) * row_tap_pixels(geo)) * blk.n) + dd + ", " +
               std::to_string(taps * blk.m * blk.n) + " FMAs";
    }
    // A group filling the vector (AVX-512, f32 or bf16 pairs): the kernel
    // broadcasts each diff_dst value inside its FMA.
    if (lane_group == blk.vlen && blk.vlen == 16 && (dt == data_type::f32 || is_dot(*this)))
        return per_o + n + " W loads, " + std::to_string(blk.m * blk.n) + " FMAs with a dd broadcast";
    return (dw_row_pairs() ? kh + " and kw: " : per_o) + n + " W loads, " + std::to_string(blk.m * blk.n) + dd +
           " + FMAs";
}

std::string DataPlan::to_string() const {
    std::ostringstream os;
    os << "jit:" << isa_name(isa) << " " << data_path_name(path);
    if (lane_group > 1) os << " (lane groups of " << lane_group << ")";
    os << " m" << blk.m << " n" << blk.n << "x"
       << blk.vlen << (blk.bcast_in_fma ? " bcast-in-fma" : "") << (w_in_place ? " W read in place" : "");
    if (dt != data_type::f32)
        os << " " << dtype_name(dt)
           << (dw_row_pairs()  ? " vdpbf16ps on kh row pairs (kh, kh+" + std::to_string(row_pair_step) + ")"
               : is_dot(*this) ? " vdpbf16ps on oc pairs"
               : widen_rows    ? " widened to f32 in padded rows"
               : col_widened   ? " widened to f32 once a column chunk"
                               : " widened to f32");
    os << " threads " << grid.threads << "\n";
    const char* lane_name = path == DataPath::col ? "(tap, ic) lanes" : "channels";
    if (path == DataPath::col) {
        if (scratch.dd_nxc_elems > 0 && !scratch.whole_nxc)
            os << "  NCX: each image's diff_dst to NXC scratch, its diff_src rows back"
               << (window_nt ? " (streamed)" : "") << ", a thread at a time\n";
        os << "  for row in " << rows << " (n, id, ih) rows, split over threads\n"
           << "    for dd row touching it, g, " << col_pixels << "-pixel chunk\n"
           << "      for lane block in " << cb.per_group << " (" << cb.lanes << " " << lane_name << ", tail "
           << cb.tail_n << " vec)\n"
           << "        for " << blk.m << "-pixel block: "
           << (is_dot(*this) ? "for oc pair in " + std::to_string(div_up(oc_chunk, 2))
                             : "for oc in " + std::to_string(oc_chunk))
           << ": " << blk.n << " W loads, " << blk.m << " bcasts, " << blk.m * blk.n << " FMAs\n"
           << "      col2im: add columns into diff_src rows\n";
    } else {
        const std::string row_kind = geo.images_per_row > 1 ? " rows of " + std::to_string(geo.images_per_row) + " images"
                                     : geo.folded_hw        ? " (n, id) planes"
                                                            : " (n, id, ih) rows";
        const std::string row = "for row in " + std::to_string(rows) + row_kind;
        const std::string cbl = "for cb in " + std::to_string(cb.total) + " (" + std::to_string(cb.lanes) + " " +
                                lane_name + "/group, tail " + std::to_string(cb.tail_n) + " vec " +
                                std::to_string(cb.tail_lanes) + " lanes)" +
                                (cb_reps > 1 ? ", up to " + std::to_string(cb_reps) + " a call" : "");
        // Segments (items segment-major): one level more, the rest indented.
        std::ostringstream nest;
        const std::string items = "  [items split over threads]";
        if (segments > 1)
            os << "  for segment in " << segments << " of " << seg_pixels
               << " pixels a W phase (the last: the rest), diff_dst windows padded per segment" << items << "\n";
        const std::string row_items = segments > 1 ? "" : items;
        if (group_rows == 1) {
            nest << "  " << row << row_items << "\n"
               << "    " << cbl << "\n"
               << "      for oc chunk of " << oc_chunk << "\n";
        } else {
            nest << "  for group in " << div_up(rows, group_rows) << " groups of " << group_rows << " of the " << rows
               << row_kind << row_items << "\n"
               << "    " << cbl << "\n"
               << "      for oc chunk of " << oc_chunk << ", row in group\n";
        }
        const std::string share = geo.stride[1] > 1 ? ", a call a row (an H stride: its own kh taps)"
                                                    : ", rows of a plane sharing their taps in one call";
        nest
           << (row_blocks && geo.stride[2] > 1
                       ? "        for block of " + std::to_string(blk.m) + " pixels = a row, its " +
                                 std::to_string(geo.stride[2]) + " W phases together"
                       : "        for W phase in " + std::to_string(geo.stride[2]) + ", block of " +
                                 std::to_string(blk.m) + " pixels")
           << (!row_blocks        ? ""
               : block_rows() > 1 ? " = " + std::to_string(block_rows()) + " rows" + share
               : geo.stride[2] > 1 ? share
                                  : " = a row" + share)
           << (dw_prefetch_rows   ? " (W edges compiled in, rows read in place, the next one prefetched to L2)"
               : dw_edges          ? " (W edges compiled in, rows read in place)"
               : !padded_rows      ? " (no edges)"
               : dd_pitch_spread ? " (zero-padded rows, pixels spaced out of one L1 set)"
                                 : " (zero-padded rows)")
           << (!ncx_windows ? ""
               : window_nt   ? ", NCX rows through NXC windows (streamed back)"
                             : ", NCX rows through NXC windows")
           << (window_pad ? " of pixels +" + std::to_string(window_pad) + " bytes" : std::string())
           << (nt_store      ? ", streaming stores\n"
                : stream_rows ? ", row groups computed in scratch and streamed out\n"
                : pf_store    ? ", diff_src lines prefetched for writing\n"
                              : "\n")
           << (direct_row_taps ? "          for valid (kd, kh) row: " : "          for valid tap (kd, kh, kw): ")
           << body_text() << "\n";
        std::istringstream lines(nest.str());
        for (std::string line; std::getline(lines, line);) os << (segments > 1 ? "  " : "") << line << "\n";
    }
    return os.str();
}

}  // namespace convgrad::detail
