// The inner-product path of the weight gradient for 1x1 layers in NCX.
//
// A 1x1 layer (unit strides, no padding) in NCX holds each image's channels
// as rows of its pixels, in src and diff_dst alike, so
//
//   diff_weights[o][i] = sum over images n, pixels x of diff_dst[n][o][x] * src[n][i][x]
//
// is a sum of inner products of rows both read in place, along the pixels.
// The direct path needs NXC (channels innermost) and transposes both
// tensors first, a pass over each that costs as much as the kernels on the
// large planes of early layers; this path runs the data gradient's dot
// microkernel (jit/bwd_data_dot_kernel.hpp) on the rows instead: p diff_dst
// rows (output channels) against c src rows (input channels) a call, the
// image's pixels in chunks: the operand with fewer rows is the one each
// outer tile rereads, and its chunk stays in L2 while every tile runs.
// Each tile's accumulators add into its vectors of lanes, kept per thread
// across chunks and images and summed once at the end.
//
// Strided 1x1 layers (no begin padding: exec_unstrided.cpp's unstride_1x1)
// with more input than output channels run here as their unit-stride
// problem, whose src is the subsampled one: src is the outer operand, and
// each thread copies an outer tile's rows of the chunk from the strided src
// into scratch as the tile starts (ops/subsample.hpp), where its inner
// calls read them from L1; those calls prefetch the next outer tile's src.
// The wrapper's pass over all of src (s = 2: a quarter of it written and
// reread through memory) had taken longer than the kernels there:
// ResNet-50 res3a_branch2a 1.57-1.68x (AMD Zen 5, 2 threads, mb 32).
// With fewer input channels src is the inner operand; taking it outer
// there instead (each thread copying only its own tiles' rows) ran
// 0.85-1.25x against the wrapper's prefetching pass (1.079x geomean over
// 12 cases in the wrapper's favour), so those layers keep the wrapper.
//
// Threads split the (group, outer tile, inner tile) items into contiguous
// ranges; every output element is one tile's lanes over the images in
// order, summed in a fixed order, so the result does not depend on the
// thread count.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "jit/bwd_data_cvt.hpp"
#include "jit/bwd_data_dot_kernel.hpp"
#include "ops/dot_tile.hpp"
#include "ops/executor.hpp"
#include "ops/lane_sum.hpp"
#include "ops/numeric.hpp"
#include "ops/parallel.hpp"
#include "ops/scratch.hpp"
#include "ops/problem.hpp"
#include "ops/subsample.hpp"

namespace convgrad::detail {
namespace {

// When the path runs (AMD Zen 4, 2 threads, mb 32, tools/sweep_ab.py
// --rounds=3 --min against the direct path's transposes, f32 / bf16): from
// 512 pixels an image. 1x1 layers of 256 channels on 16x16 / 20x20 planes
// ran 1.06-1.08x in f32 but 0.89-0.92x in bf16, 24x24 1.06-1.08x, 28x28
// 1.29-1.30x, 32x32 1.5-2.0x; on 14x14 (1024 -> 256) 0.54x: with few
// steps a call, adding each tile's lanes costs more than the transposes.
// Groups of fewer than kWDotMinChannels channels would run narrow tiles.
constexpr int64_t kWDotMinPixels = 512;
constexpr int64_t kWDotMinChannels = 8;
// Chunk bytes of the operand the inner tiles reread (the one with fewer
// rows: see WeightsDotPlan::ic_outer), which stay in L2 while every tile
// runs: 384 KiB, 768 KiB and whole images measured alike (1.01-1.03x over
// ResNet-50's 1x1 layers of 28x28 and 56x56), chunks cut to keep the
// outer tile's rows in L1 (768 pixels) 0.93x.
constexpr int64_t kWDotChunkBytes = 384 << 10;
// Wide layers get short chunks, and each call's lane additions weigh more:
// 512 -> 512 at 28x28 (10 / 12 steps a call, f32 / bf16) ran 0.74x / 0.52x,
// 384 -> 384 at 56x56 (16) 0.98x / 1.06x, 256 -> 256 (22 / 24) 1.02x / 1.19x
// (tools/sweep_ab.py --rounds=2 --min against the transposes).
constexpr int64_t kWDotMinChunkSteps = 16;

struct WeightsDotPlan {
    Isa isa = Isa::avx2;
    DataCompute compute = DataCompute::f32;
    int p = 1, c = 1;         // register tile: output channels × input channels
    int64_t pixels = 0;       // of an image
    int64_t step = 16;        // pixels a kernel step
    int64_t chunk = 0;        // pixels a pass over the tiles (a multiple of step)
    int64_t oc_tiles = 0, ic_tiles = 0, items = 0;  // items: g × oc_tiles × ic_tiles
    // Items in (group, ic tile, oc tile) order, else (group, oc tile, ic
    // tile): the inner tiles reread the chunk of the operand with fewer
    // rows from L2, the outer tile's rows stay in L1.
    bool ic_outer = false;
    int threads = 1;
    // Strided 1x1 (see the top): the strided src's geometry, and the bytes
    // between the subsampled rows in a thread's scratch (0: src in place).
    SubsampleGeometry sub;
    int64_t sub_pitch = 0;
    int64_t sub_plane = 0, sub_image = 0;  // elements between the strided src's channels, images
};

// Cost in FMA-issue cycles of an image on an ocg × icg grid in (p, c)
// tiles: a step of a tile issues p·c FMAs, or (p + c) loads at two a
// cycle, or waits for the FMA latency (about 4 cycles) on its accumulators,
// whichever takes longest; each call (a tile over a chunk) adds its lanes
// (a load and a store a vector) and its overhead.
double wdot_cost(int64_t ocg, int64_t icg, int64_t steps, int64_t calls, int p, int c) {
    auto tile = [&](int64_t pp, int64_t cc) {
        const double step = std::max({double(pp * cc), double(pp + cc) / 2, 4.0});
        return double(steps) * step + double(calls) * (20 + 2 * double(pp * cc));
    };
    const int64_t fp = ocg / p, rp = ocg % p, fc = icg / c, rc = icg % c;
    return double(fp * fc) * tile(p, c) + (rp ? double(fc) * tile(rp, c) : 0) + (rc ? double(fp) * tile(p, rc) : 0) +
           (rp && rc ? tile(rp, rc) : 0);
}

// strided: p is that strided layer's unit-stride problem (see the top).
bool make_weights_dot_plan(const Problem& p, Isa isa, int threads, const Problem* strided, WeightsDotPlan* pl) {
    const bool unit = plain_axis(p, 0) && plain_axis(p, 1) && plain_axis(p, 2);
    if (p.alg != Alg::weights || p.nxc || !unit || isa < Isa::avx2) return false;
    if (p.in_sp() < kWDotMinPixels || p.icg < kWDotMinChannels || p.ocg < kWDotMinChannels) return false;
    const int64_t es = static_cast<int64_t>(dtype_size(p.dt));
    pl->compute = dot_compute(p.dt, isa);
    pl->isa = dot_kernel_isa(isa, pl->compute);
    pl->pixels = p.in_sp();
    pl->step = data_dot_step_oc(pl->isa, pl->compute);
    pl->ic_outer = p.icg > p.ocg;
    if (strided && !pl->ic_outer) return false;  // (see the top)
    // Chunks of equal steps (the last one short by the tail at most).
    const int64_t fit = std::max<int64_t>(1, kWDotChunkBytes / (std::min(p.icg, p.ocg) * es) / pl->step);
    const int64_t all_steps = div_up(pl->pixels, pl->step);
    pl->chunk = div_up(all_steps, div_up(all_steps, fit)) * pl->step;
    if (pl->chunk < kWDotMinChunkSteps * pl->step) return false;
    const int64_t steps = div_up(pl->pixels, pl->step), calls = div_up(pl->pixels, pl->chunk);
    if (strided) {
        pl->sub = {strided->in, strided->out, strided->stride, static_cast<int>(es), isa >= Isa::avx512_core};
        pl->sub_plane = strided->src_str.c;
        pl->sub_image = strided->src_str.n;
        // Subsampled rows: a chunk each, a line more at multiples of 4 KiB
        // (a tile's rows would share one L1 set).
        pl->sub_pitch = pl->chunk * es + (pl->chunk * es % 4096 == 0 ? 64 : 0);
    }
    const int64_t row = pl->sub_pitch > 0 ? pl->sub_pitch : p.in_sp() * es;  // bytes between src channel rows
    double best = 0;
    const bool found = choose_dot_tile(
            isa, static_cast<int>(std::min<int64_t>(8, p.ocg)), p.icg, row, row,
            [&](int tp, int tc) { return wdot_cost(p.ocg, p.icg, steps, calls, tp, tc); }, &pl->p, &pl->c, &best);
    if (!found) return false;
    pl->oc_tiles = div_up(p.ocg, pl->p);
    pl->ic_tiles = div_up(p.icg, pl->c);
    pl->items = p.g * pl->oc_tiles * pl->ic_tiles;
    pl->threads = std::max(1, threads);
    return true;
}

class JitWeightsDotExecutor final : public Executor {
public:
    JitWeightsDotExecutor(const Problem& p, const WeightsDotPlan& plan);
    void run(const void* in0, const void* in1, void* out) const override;
    std::string describe() const override;
    int threads() const override { return op_threads(p_); }

private:
    // The kernel of a (rows, channels) tile, with the pixel tail or not.
    const DataDotKernel& kernel(int64_t pp, int64_t cc, bool tail) const { return kernels_.get(pp, cc, tail); }
    struct Item {
        int64_t grp, ot, it;  // group, oc tile, ic tile
        int64_t o0, c0;       // first output / input channel (of all groups)
        int64_t pp, cc;       // rows of each
    };
    Item item(int64_t i) const {
        Item r;
        const int64_t per_group = plan_.oc_tiles * plan_.ic_tiles, k = i % per_group;
        const int64_t inner = plan_.ic_outer ? plan_.oc_tiles : plan_.ic_tiles;
        r.grp = i / per_group;
        r.ot = plan_.ic_outer ? k % inner : k / inner;
        r.it = plan_.ic_outer ? k / inner : k % inner;
        r.o0 = r.grp * p_.ocg + r.ot * plan_.p;
        r.c0 = r.grp * p_.icg + r.it * plan_.c;
        r.pp = std::min<int64_t>(plan_.p, p_.ocg - r.ot * plan_.p);
        r.cc = std::min<int64_t>(plan_.c, p_.icg - r.it * plan_.c);
        return r;
    }
    // Items [i0, i1) over every image into `lanes` (zeroed), then their
    // lane sums into sums[g][ocg][icg].
    void run_items(const char* src, const char* dd, int64_t i0, int64_t i1, float* lanes, float* sums) const;
    void store(const float* sums, char* out, int threads) const;

    Problem p_;
    WeightsDotPlan plan_;
    int64_t es_ = 4, tail_ = 0;
    ArrayConverter round_;
    DotKernelSet kernels_;
};

JitWeightsDotExecutor::JitWeightsDotExecutor(const Problem& p, const WeightsDotPlan& plan)
    : p_(p), plan_(plan), es_(static_cast<int64_t>(dtype_size(p.dt))), tail_(plan.pixels % plan.step) {
    if (p.dt != data_type::f32) round_ = ArrayConverter(plan.isa, data_type::f32, p.dt);
    const int64_t last_p = (p.ocg - 1) % plan.p + 1, last_c = (p.icg - 1) % plan.c + 1;
    DataDotDesc d;
    d.isa = static_cast<int32_t>(plan.isa);
    d.compute = static_cast<int32_t>(plan.compute);
    d.dt = static_cast<int32_t>(p.dt);
    d.p = plan.p;
    d.c = plan.c;
    d.tail = static_cast<int32_t>(tail_);
    d.dd_pix_bytes = p.dst_str.c * es_;
    d.w_row_bytes = plan.sub_pitch > 0 ? plan.sub_pitch : p.src_str.c * es_;
    d.accumulate = 1;
    kernels_ = DotKernelSet(d, static_cast<int>(last_p), static_cast<int>(last_c), true);
}

void JitWeightsDotExecutor::run_items(const char* src, const char* dd, int64_t i0, int64_t i1, float* lanes,
                                      float* sums) const {
    const int vlen = data_dot_vlen(plan_.isa);
    const int64_t tile_floats = int64_t(plan_.p) * plan_.c * vlen;
    const bool sub = plan_.sub_pitch > 0;  // (only with ic_outer)
    const int64_t src_row = sub ? plan_.sub_pitch : p_.src_str.c * es_, dd_row = p_.dst_str.c * es_;
    // Strided: the outer tile's subsampled rows.
    const ScratchLease rows_buf(Scratch::dot_src_rows, sub ? plan_.c * plan_.sub_pitch : 0);
    char* const rows = rows_buf.get();
    const SubsampleGeometry& sg = plan_.sub;
    auto plane = [&](int64_t n, int64_t c) { return src + (n * plan_.sub_image + c * plan_.sub_plane) * es_; };
    for (int64_t n = 0; n < p_.mb; ++n)
        for (int64_t x0 = 0; x0 < plan_.pixels; x0 += plan_.chunk) {
            const int64_t len = std::min(plan_.chunk, plan_.pixels - x0);
            const bool tail = x0 + len == plan_.pixels && tail_ > 0;
            const int64_t steps = len / plan_.step;
            const char* s_n = src + (n * p_.src_str.n + x0) * es_;  // in place
            const char* d_n = dd + (n * p_.dst_str.n + x0) * es_;
            // Strided: the src bytes a channel's chunk spans (its rows
            // between), in pieces of what a call prefetches.
            const int64_t first = sub ? subsample_source(sg, x0) : 0;
            const int64_t span = sub ? (subsample_source(sg, x0 + len - 1) - first + 1) * es_ : 0;
            const int64_t pieces = steps > 0 ? div_up(span, steps * 64) : 0;
            int64_t held = -1;  // strided: the first channel of the tile whose rows are in `rows`
            for (int64_t i = i0; i < i1; ++i) {
                const Item t = item(i);
                if (sub && t.c0 != held) {
                    for (int64_t r = 0; r < t.cc; ++r)
                        subsample_run(sg, plane(n, t.c0 + r), x0, len, rows + r * plan_.sub_pitch);
                    held = t.c0;
                }
                // The inner tiles of an outer tile prefetch, a row each, the
                // next outer tile's rows of this chunk (strided: the src
                // span of its channels, a piece each).
                const int64_t k = plan_.ic_outer ? t.ot : t.it;  // inner index
                const int64_t outer_rows = plan_.ic_outer ? t.cc : t.pp, next_rows = plan_.ic_outer ? plan_.c : plan_.p;
                const int64_t row = k % next_rows;  // of the next outer tile, if it has one
                const bool next = plan_.ic_outer ? t.c0 + outer_rows + row < (t.grp + 1) * p_.icg
                                                 : t.o0 + outer_rows + row < (t.grp + 1) * p_.ocg;
                const char* s_t = sub ? rows : s_n + t.c0 * src_row;
                const char* pf = s_t;
                if (sub && next && k < next_rows * pieces)
                    pf = plane(n, t.c0 + outer_rows + row) + first * es_ + k / next_rows * steps * 64;
                else if (!sub && next && k < next_rows)
                    pf = plan_.ic_outer ? s_n + (t.c0 + outer_rows + k) * src_row
                                        : d_n + (t.o0 + outer_rows + k) * dd_row;
                kernel(t.pp, t.cc, tail)(d_n + t.o0 * dd_row, s_t, lanes + (i - i0) * tile_floats, steps, pf);
            }
        }
    for (int64_t i = i0; i < i1; ++i) {
        const Item t = item(i);
        const float* l = lanes + (i - i0) * tile_floats;
        for (int64_t a = 0; a < t.pp; ++a)
            for (int64_t b = 0; b < t.cc; ++b)
                sums[(t.o0 + a) * p_.icg + t.c0 - t.grp * p_.icg + b] = lane_sum(l + (a * t.cc + b) * vlen, vlen);
    }
}

// sums [g][ocg][icg] into the user's weights: rows of input channels
// where the layout keeps them contiguous (OIX, XOI), else columns of output
// channels (XIO, IOX), rounded to a 16-bit type once.
void JitWeightsDotExecutor::store(const float* sums, char* out, int threads) const {
    const WeightStrides& w = p_.wei_str;
    const int64_t oc = p_.oc(), icg = p_.icg;
    const bool rows = w.i == 1;  // else columns (or, neither contiguous, elements)
    const int64_t lines = rows ? oc : icg, len = rows ? icg : oc;
    for_each_thread(threads, [&](int t) {
        const auto range = spread(lines, threads, t);
        std::vector<float> col(rows ? 0 : static_cast<size_t>(len));
        for (int64_t l = range[0]; l < range[1]; ++l) {
            if (!rows && w.o != 1) {
                for (int64_t o = 0; o < oc; ++o) store_elem(out, o * w.o + l * w.i, p_.dt, sums[o * icg + l]);
                continue;
            }
            const float* from = sums + l * icg;
            if (!rows) {
                for (int64_t o = 0; o < oc; ++o) col[static_cast<size_t>(o)] = sums[o * icg + l];
                from = col.data();
            }
            char* to = out + (rows ? l * w.o : l * w.i) * es_;
            if (p_.dt == data_type::f32)
                std::memcpy(to, from, static_cast<size_t>(len) * 4);
            else
                round_(from, to, len);
        }
    });
}

void JitWeightsDotExecutor::run(const void* in0, const void* in1, void* out) const {
    const int threads = this->threads();
    const char* src = static_cast<const char*>(p_.swap_inputs ? in1 : in0);
    const char* dd = static_cast<const char*>(p_.swap_inputs ? in0 : in1);
    const int vlen = data_dot_vlen(plan_.isa);
    const int64_t tile_floats = int64_t(plan_.p) * plan_.c * vlen;
    std::vector<float> sums(static_cast<size_t>(p_.oc() * p_.icg));
    for_each_thread(threads, [&](int t) {
        const auto range = spread(plan_.items, threads, t);
        if (range[1] <= range[0]) return;
        // The thread's lanes, zeroed.
        const int64_t bytes = (range[1] - range[0]) * tile_floats * 4;
        const ScratchLease lanes(Scratch::dot_lanes, bytes);
        std::memset(lanes.get(), 0, static_cast<size_t>(bytes));
        run_items(src, dd, range[0], range[1], lanes.floats(), sums.data());
    });
    store(sums.data(), static_cast<char*>(out), threads);
}

std::string JitWeightsDotExecutor::describe() const {
    const bool pairs = plan_.compute == DataCompute::bf16_dot;
    std::ostringstream os;
    os << "jit:" << isa_name(plan_.isa) << " dot p" << plan_.p << " c" << plan_.c << "x" << data_dot_vlen(plan_.isa);
    if (p_.dt != data_type::f32)
        os << " " << dtype_name(p_.dt) << (pairs ? " vdpbf16ps on pixel pairs" : " widened to f32");
    os << " threads " << plan_.threads << " (inner products along the pixels, NCX read in place)\n"
       << "  items " << plan_.items << ": g " << p_.g
       << (plan_.ic_outer ? " x ic tile " : " x oc tile ") << (plan_.ic_outer ? plan_.ic_tiles : plan_.oc_tiles)
       << (plan_.ic_outer ? " x oc tile " : " x ic tile ") << (plan_.ic_outer ? plan_.oc_tiles : plan_.ic_tiles)
       << "  [contiguous ranges over threads]\n"
       << "    for image in " << p_.mb << ", chunk of " << std::min(plan_.chunk, plan_.pixels) << " of " << plan_.pixels
       << " pixels\n"
       << "      for item in the thread's range (" << plan_.p << " oc x " << plan_.c << " ic)\n"
       << "        for pixel step of " << plan_.step << ": " << plan_.c << " src loads, " << plan_.p
       << " diff_dst loads, " << plan_.p * plan_.c << (pairs ? " vdpbf16ps" : " FMAs")
       << ", a line of the next outer tile prefetched\n"
       << "        lanes += the accumulators\n"
       << "    lane sums of the thread's items\n"
       << "  sums to the weights" << (p_.dt == data_type::f32 ? "" : " (rounded)") << "\n"
       << "  kernels " << kernels_.built() << " (cache hits " << kernels_.hits() << ")";
    if (plan_.sub_pitch > 0)
        os << "\n  strided 1x1 in NCX: run at unit stride, each outer tile's src rows subsampled as it starts";
    return os.str();
}

}  // namespace

std::unique_ptr<Executor> make_jit_weights_dot_executor(const Problem& p, Isa isa, const Problem* strided) {
    WeightsDotPlan plan;
    if (!make_weights_dot_plan(p, isa, op_threads(p), strided, &plan)) return nullptr;
    return std::make_unique<JitWeightsDotExecutor>(p, plan);
}

}  // namespace convgrad::detail
