// JIT executor for the weight gradient (ConvolutionBackwardWeights and
// ConvTransposeBackwardWeights, the latter with its inputs swapped).
//
// Phases of one execute:
//  1. NCX only: no whole pass, except under plan.prepad. Depthwise plans
//     (plan.ncx_windows): each thread transposes a chunk's rows of its
//     channels into its NXC windows as the chunk starts (fill_windows);
//     gemm plans (plan.ncx_rows): each thread transposes every channel of
//     a chunk's rows (bf16 pairs: of both images of each pair) into its
//     NXC windows as the chunk starts (fill_gemm_windows).
//     Pre-padded depthwise plans (plan.prepad): transpose src and diff_dst
//     into NXC scratch, then copy src into a zero-padded scratch.
//  2. Threads over (slice, tile) pairs of the plan's grid: every (slice,
//     tile) is accumulated chunk by chunk in chunk order, slice 0 into the
//     target, slice r > 0 into partial r. Staged plans (16-bit gemm, and
//     f32 where measured faster) first copy each chunk into per-thread
//     scratch: bf16 image pairs, widened f32 or an f32 copy (see
//     plan_weights.hpp), as rows in pixel order, or for unpadded 1x1
//     layers tile-major (each tile's channels contiguous over the chunk;
//     f32 on AVX-512 has no copy pass: the first call on each tile copies
//     its slice as it computes); depthwise reads 16-bit tensors in place.
//  3. slices > 1: target += partial 1 + partial 2 + ... in slice order.
//  4. Non OC-contiguous user layout: the target was an XIO scratch; permute.
//  5. 16-bit types: the target was f32 scratch; round once to the user type.
//
// Pointers into activations are bytes (plan.elem_bytes() per channel and
// pixel: 4 for f32 and every staged chunk, 2 for 16-bit depthwise).
#include <tbb/task_arena.h>

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <numeric>
#include <thread>
#include <utility>
#include <vector>

#include "jit/bwd_data_cvt.hpp"
#include "jit/bwd_weights_kernel.hpp"
#include "jit/bwd_weights_stage.hpp"
#include "ops/executor.hpp"
#include "ops/parallel.hpp"
#include "ops/plan_cache.hpp"
#include "ops/plan_weights.hpp"
#include "ops/scratch.hpp"
#include "ops/transpose.hpp"

namespace convgrad::detail {
namespace {

// Input and output channels of a tile of the permute into the user's
// weights layout (reduce_and_store): 16 x 16 x taps f32 (1 KiB a tap),
// 32 x 32 for a single tap.
constexpr int64_t kPermuteTile = 16;

// The permute's tile (reduce_and_store) where the user's taps are the
// innermost axis, contiguous (OIX): for each input channel i < ni, the
// taps' vectors of `no` (<= 16) output channels, tap t at from + i·from_i
// + tap_from[t], transposed in registers, 16 taps at a time, into each
// output channel's run of taps at to + o·to_o + i·to_i. The scalar tile
// read each element from its own line and wrote it alone: 40-60 % of a
// 512 -> 512 3x3 layer's weight gradient at mb 2 in OIX.
__attribute__((target("avx512f"))) void permute_tap_runs(const float* from, int64_t from_i, const int64_t* tap_from,
                                                       int64_t taps, float* to, int64_t to_o, int64_t to_i,
                                                       int64_t no, int64_t ni) {
    const __mmask16 o_mask = static_cast<__mmask16>((1u << no) - 1);
    __m512i r[16];
    for (int64_t i = 0; i < ni; ++i)
        for (int64_t t0 = 0; t0 < taps; t0 += 16) {
            const int64_t n = std::min<int64_t>(16, taps - t0);
            for (int64_t t = 0; t < 16; ++t)
                r[t] = t < n ? _mm512_maskz_loadu_epi32(o_mask, from + i * from_i + tap_from[t0 + t])
                             : _mm512_setzero_si512();
            transpose_16x16(r);
            const __mmask16 t_mask = static_cast<__mmask16>((1u << n) - 1);
            for (int64_t o = 0; o < no; ++o) _mm512_mask_storeu_epi32(to + o * to_o + i * to_i + t0, t_mask, r[o]);
        }
}

// permute_tap_runs on AVX2: 8 output channels (no <= 8) and 8 taps at a time.
__attribute__((target("avx2"))) void permute_tap_runs_avx2(const float* from, int64_t from_i, const int64_t* tap_from,
                                                         int64_t taps, float* to, int64_t to_o, int64_t to_i,
                                                         int64_t no, int64_t ni) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i o_mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(no)), lane);
    __m256 r[8];
    for (int64_t i = 0; i < ni; ++i)
        for (int64_t t0 = 0; t0 < taps; t0 += 8) {
            const int64_t n = std::min<int64_t>(8, taps - t0);
            for (int64_t t = 0; t < 8; ++t)
                r[t] = t < n ? _mm256_maskload_ps(from + i * from_i + tap_from[t0 + t], o_mask) : _mm256_setzero_ps();
            transpose_8x8(r);
            const __m256i t_mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), lane);
            for (int64_t o = 0; o < no; ++o) _mm256_maskstore_ps(to + o * to_o + i * to_i + t0, t_mask, r[o]);
        }
}

// to[i] += from[k·stride + i] for k = 0, 1, ..., count - 1, in that order
// (the fixed-order sum of the slices' partials), each element summed in a
// register and stored once. The baseline build's loop ran 4 floats an
// SSE step, a pass and a store per slice: 15 % of a 576-channel 3x3 s2
// depthwise weight gradient on one 14x14 image (1 thread, perf). Against
// it (AMD Zen 5, tools/sweep_ab.py --rounds=3 --min): depthwise layers on
// 1-4 images at 1 thread 1.09x geomean (1.03-1.26x; AVX2 1.02x), MobileNetV2
// and ResNet-50 at mb 32 and six small-batch layers 1.00-1.01x.
__attribute__((target("avx512f"))) void sum_slices_avx512(float* __restrict to, const float* __restrict from,
                                                         int64_t stride, int64_t count, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 v = _mm512_loadu_ps(to + i);
        for (int64_t k = 0; k < count; ++k) v = _mm512_add_ps(v, _mm512_loadu_ps(from + k * stride + i));
        _mm512_storeu_ps(to + i, v);
    }
    if (i < n) {
        const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
        __m512 v = _mm512_maskz_loadu_ps(m, to + i);
        for (int64_t k = 0; k < count; ++k) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, from + k * stride + i));
        _mm512_mask_storeu_ps(to + i, m, v);
    }
}
__attribute__((target("avx2"))) void sum_slices_avx2(float* __restrict to, const float* __restrict from,
                                                     int64_t stride, int64_t count, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(to + i);
        for (int64_t k = 0; k < count; ++k) v = _mm256_add_ps(v, _mm256_loadu_ps(from + k * stride + i));
        _mm256_storeu_ps(to + i, v);
    }
    for (; i < n; ++i)
        for (int64_t k = 0; k < count; ++k) to[i] += from[k * stride + i];
}
void sum_slices(Isa isa, float* to, const float* from, int64_t stride, int64_t count, int64_t n) {
    if (isa >= Isa::avx512_core)
        sum_slices_avx512(to, from, stride, count, n);
    else
        sum_slices_avx2(to, from, stride, count, n);
}

// Pixels [iw0, iw0 + width) of a W row of `in_w` pixels into `to`,
// `px_bytes` a pixel: copy(first, count, at) writes the pixels inside the
// row, the ones outside (the padding) are zeros.
template <typename Copy>
void copy_padded_run(int64_t iw0, int64_t width, int64_t in_w, int64_t px_bytes, char* to, Copy&& copy) {
    const int64_t lo = std::clamp<int64_t>(-iw0, 0, width), hi = std::clamp<int64_t>(in_w - iw0, lo, width);
    std::memset(to, 0, static_cast<size_t>(lo * px_bytes));
    if (lo < hi) copy(iw0 + lo, hi - lo, to + lo * px_bytes);
    std::memset(to + hi * px_bytes, 0, static_cast<size_t>((width - hi) * px_bytes));
}

// copy_padded_run from `row`, a W row of px_bytes pixels in memory; a null
// row (outside src) gives zeros only.
void copy_row_run(const char* row, int64_t iw0, int64_t width, int64_t in_w, int64_t px_bytes, char* to) {
    if (!row) {
        std::memset(to, 0, static_cast<size_t>(width * px_bytes));
        return;
    }
    copy_padded_run(iw0, width, in_w, px_bytes, to, [&](int64_t first, int64_t count, char* at) {
        std::memcpy(at, row + first * px_bytes, static_cast<size_t>(count * px_bytes));
    });
}

// A thread's walk over the next chunk's memory (its diff_dst rows, then
// the src rows it reads; per image of a bf16 pair), `lines` lines per pixel
// the kernels process (plan.pf_lines): a list of
// walks, each `count` steps of `step` bytes (a contiguous range steps by
// its lines; stage_in_kernel walks a pixel stride, one line a pixel). A
// call takes the steps of its pixels from the current walk (all of a walk
// shorter than that, its step shrunk to match), or, depthwise and ic-loop
// kernels, across walks (take_walks); the first `skip` calls take nothing.
struct Prefetch {
    using Walk = PrefetchWalk;
    std::vector<Walk> walks;  // reused from chunk to chunk
    size_t at = 0;
    int lines = 1;
    // Walk steps a kernel pixel step takes (WeightsKernelDesc::pf_steps).
    // Group walks (strided: a line a step) take a short walk's rest at its
    // own step, the kernel's prefetches past its end touching the lines of
    // the rows after it: a shrunk step would land between the group's
    // lines (against shrinking, the 26 group-walk cells of the shape files,
    // f32, mb 32: 0.96-1.10x, geomean 1.004x).
    int steps_per_px = 1;
    bool strided = false;
    int64_t skip = 0;
    std::vector<Walk> call_walks;  // take_walks' list

    void clear() {
        walks.clear();
        at = 0;
        skip = 0;
    }
    // Contiguous memory [begin, end), `lines` lines a step.
    void add(const char* begin, const char* end) {
        if (begin >= end) return;
        const int64_t step = 64 * lines;
        add_strided(begin, step, (end - begin + step - 1) / step);
    }
    // `count` steps of `step` bytes from begin; merged into the last walk
    // when it continues it (adjacent rows: one walk).
    void add_strided(const char* begin, int64_t step, int64_t count) {
        if (!walks.empty()) {
            Walk& w = walks.back();
            if (w.step == step && w.pos + w.count * step == begin) {
                w.count += count;
                return;
            }
        }
        walks.push_back({begin, step, count});
    }
    // Calls of `pixels` that take every walk.
    int64_t calls_needed(int64_t pixels) const {
        int64_t n = 0;
        for (const Walk& w : walks) n += (w.count + pixels - 1) / pixels;
        return n;
    }
    // The start and step of the next call's `pixels` steps, or nullptr.
    std::pair<const char*, int64_t> take(int64_t pixels) {
        if (skip > 0) {
            --skip;
            return {nullptr, 0};
        }
        while (at < walks.size() && walks[at].count <= 0) ++at;
        if (at == walks.size()) return {nullptr, 0};
        Walk& w = walks[at];
        pixels *= steps_per_px;
        if (w.count < pixels && strided) {
            const std::pair<const char*, int64_t> r{w.pos, w.step};
            w.count = 0;
            return r;
        }
        if (w.count < pixels) {
            // A short walk (one input row of a strided layer) shrinks the
            // call's step so its prefetches cover the walk and end within
            // `pixels` bytes of its end (the step rounded up): at its own
            // step the kernel ran on past it, up to pixels x ic tiles lines
            // (430 KB a call on ResNet-50's strided 1x1 layers, bf16), none
            // of them read.
            const std::pair<const char*, int64_t> r{w.pos, (w.count * w.step + pixels - 1) / pixels};
            w.count = 0;
            return r;
        }
        const std::pair<const char*, int64_t> r{w.pos, w.step};
        w.pos += pixels * w.step;
        w.count -= pixels;
        return r;
    }
    // The next call's `pixels` steps across walks (depthwise and ic-loop
    // kernels), and after them a walk of step 0 at `idle` that never ends.
    const Walk* take_walks(int64_t pixels, const char* idle) {
        size_t k = 0;
        auto put = [&](const char* pos, int64_t step, int64_t count) { put_walk(k++, pos, step, count); };
        if (skip > 0) {
            --skip;
            pixels = 0;
        }
        for (; pixels > 0 && at < walks.size(); ++at) {
            Walk& w = walks[at];
            const int64_t n = std::min(pixels, w.count);
            if (n <= 0) continue;
            put(w.pos, w.step, n);
            w.pos += n * w.step;
            w.count -= n;
            pixels -= n;
            if (w.count > 0) break;
        }
        put(idle, 0, std::numeric_limits<int64_t>::max());
        return call_walks.data();
    }
    // A list of one walk that never ends: take()'s (pos, step) for a kernel
    // that reads a list (ic loops of stage_in_kernel plans).
    const Walk* one_walk(const char* pos, int64_t step) {
        put_walk(0, pos, step, std::numeric_limits<int64_t>::max());
        return call_walks.data();
    }
    // The list's entries are written field by field in place: a braced
    // Walk pushed back went through a stack temporary whose reload missed
    // store forwarding (7 % of a 7x7-plane depthwise layer, 1 thread).
    void put_walk(size_t k, const char* pos, int64_t step, int64_t count) {
        if (call_walks.size() <= k) call_walks.resize(k + 1);
        Walk& to = call_walks[k];
        to.pos = pos;
        to.step = step;
        to.count = count;
    }
};

// Appends a row entry field by field in place: a braced WeightsRow pushed
// back went through a stack temporary whose 16-byte reloads missed store
// forwarding (30 % of the executor's time on a 32-channel 14x14
// depthwise layer, 1 thread). emplace_back, not resize(size() + 1): resize
// is an out-of-line call every time (13 % of a 3-channel 3D first layer's
// time on rows of 5 pixels).
void add_row(std::vector<WeightsRow>& out, int64_t src_offset, int64_t dst_offset, int64_t pixels,
             uint64_t mask = 0) {
    WeightsRow& r = out.emplace_back();
    r.src_offset = src_offset;
    r.dst_offset = dst_offset;
    r.pixels = pixels;
    r.mask = mask;
}

// An output row (segment) of the chunk; n counts image pairs with bf16 pairs.
struct RowPos {
    int64_t n = 0, od = 0, oh = 0, seg = 0;
};

// NCX windows: the rows of the virtual NXC tensors a chunk reads, as
// flattened (image, d, h) row indices: src rows [src_lo, src_hi), diff_dst
// rows [dst_lo, dst_hi). Empty when src_lo >= src_hi.
struct ChunkWindow {
    int64_t src_lo = 0, src_hi = 0, dst_lo = 0, dst_hi = 0;
};

RowPos row_at(const WeightsGeometry& g, int64_t q);
// Rows [q0, q1) of the chunk order into out.
void decode_rows(const WeightsGeometry& g, std::vector<RowPos>& out, int64_t q0, int64_t q1);
ChunkWindow chunk_window(const WeightsPlan& plan, const std::vector<RowPos>& chunk);
// The rows [lo, hi) of one or two pieces: their span, and the pieces as
// filled (two when apart, else their union).
struct WindowPieces {
    int64_t lo = 0, hi = 0;
    std::array<std::array<int64_t, 2>, 2> piece{};
    int count = 0;
};
// The src and diff_dst rows a chunk's windows hold, as pieces: one chunk
// window, or for bf16 pairs (NCX gemm) one in the pairs' first images and
// one in their second images (an odd minibatch's last pair has none).
// `rows` for the scratch.
struct WindowRows {
    WindowPieces src, dst;
};
WindowRows chunk_window_rows(const WeightsPlan& plan, const std::vector<RowPos>& chunk, int64_t mb,
                               std::vector<RowPos>& rows);

// Where one tile reads and writes. src / diff_dst: bytes at the tile's first
// channel, in the user's tensor or in the staged chunk.
struct TileCall {
    const char* src;
    const char* diff_dst;
    float* diff_weights;
    int64_t src_step, dst_step;  // bytes between a row's pixels
    int64_t wei_row_stride;      // elements
    int64_t wei_kh_stride = 0;   // elements (depthwise tiles of several kernel rows)
    char* src_stage = nullptr;   // the kernel's WeightsStage copies, if any
    char* dst_stage = nullptr;
    bool ic_loop = false;        // the kernel's desc.ic_loop
    int64_t ic_tiles = 1;        // desc.ic_loop: tiles run by the call, and the bytes between them
    int64_t src_tile_step = 0;
    int64_t wei_tile_step = 0;   // elements
};

// The threads' work: each thread's tiles (balance over grid.tile_threads)
// of its slices (over grid.slice_threads), cut into `units` runs of tiles,
// in the order the static loops ran them: per slice, per chunk, per unit.
// A unit's chunks of a slice must run in order (the first stores, the
// later ones accumulate). A thread that runs out takes about half of what
// another has left: the later half of its whole slices, or else the later
// half of the units of the slice it is at (or would start) from the chunk
// it is at on (units it has not started there; their earlier chunks are
// done, or the one its owner still runs is waited for). A core the host
// slows then holds the op up by about one item, and whoever runs an item
// reads and writes the same memory in the same order: results do not
// depend on the schedule. (Depthwise NCX
// windows hold the channels of the tiles a part cuts: a thread that takes
// another's part fills its windows with those.)
class WeightsWork {
public:
    struct Item {
        int64_t slice = 0, chunk = 0, first_chunk = 0, tile0 = 0, tile1 = 0, chain = 0;
        std::array<int64_t, 2> part{};  // the tiles of the units of the part it was taken from
    };

    // unit_tiles: tiles a unit holds at least.
    WeightsWork(const WeightsReduction& red, const WeightsThreadGrid& grid, int64_t tiles, int64_t unit_tiles)
        : red_(red), share_(grid.nthr > 1), threads_(grid.nthr),
          own_(new Own[static_cast<size_t>(threads_)]) {
        int64_t longest = 1;
        for (int tt = 0; tt < grid.tile_threads; ++tt) {
            const auto r = balance(tiles, grid.tile_threads, tt);
            longest = std::max(longest, r[1] - r[0]);
        }
        units_ = share_ ? std::clamp<int64_t>(longest / unit_tiles, 1, kUnits) : 1;
        tile_threads_ = grid.tile_threads;
        const int64_t chains = red.slices * tile_threads_ * units_;
        done_.reset(new std::atomic<int64_t>[static_cast<size_t>(chains)]);
        for (int64_t i = 0; i < chains; ++i) done_[i].store(0, std::memory_order_relaxed);
        for (int t = 0; t < threads_; ++t) {
            Part& w = own_[t].part;
            const auto sl = balance(red.slices, grid.slice_threads, t / grid.tile_threads);
            w.tt = t % grid.tile_threads;
            w.tiles = balance(tiles, grid.tile_threads, w.tt);
            w.sn = sl[0];
            w.se = sl[1];
        }
    }

    // The next item for thread t; false when every item is taken. Returns
    // once the item's previous chunk is done (a part taken while its owner
    // ran the chunk before: the one wait there is).
    bool next(int t, Item& item) {
        if (!take(t, item)) return false;
        // (Yielding after a while: with more threads than cores the owner
        // may be waiting for this core.)
        for (int spins = 0; done_[item.chain].load(std::memory_order_acquire) < item.chunk - item.first_chunk;)
            if (++spins < kSpins)
                _mm_pause();
            else
                std::this_thread::yield();
        return true;
    }
    // Item done: its unit's next chunk may start, and sees its sums.
    void finish(const Item& item) {
        done_[item.chain].store(item.chunk - item.first_chunk + 1, std::memory_order_release);
    }

private:
    bool take(int t, Item& item) {
        if (claim(t, item)) return true;
        while (share_) {
            int victim = -1;
            int64_t most = 0;
            for (int v = 0; v < threads_; ++v) {
                if (v == t) continue;
                std::lock_guard<std::mutex> lock(own_[v].m);
                const Part& w = own_[v].part;
                const int64_t n = left(w);
                if (n > most && splittable(w)) most = n, victim = v;
            }
            if (victim < 0) return false;
            Part taken;
            {
                std::lock_guard<std::mutex> lock(own_[victim].m);
                if (!splittable(own_[victim].part)) continue;
                taken = split(own_[victim].part);
            }
            {
                std::lock_guard<std::mutex> lock(own_[t].m);  // (no nested locks: no thread waits on another's)
                own_[t].part = taken;
            }
            if (claim(t, item)) return true;
        }
        return false;
    }

    static constexpr int kSpins = 4096;        // pauses before a waiting thread yields
    static constexpr int64_t kUnits = 8;       // units of a thread's tiles, at most
    // A run of work: slice s from chunk c (before c_end), units [ua, ub) of
    // `tiles` from unit u on in chunk c and whole after it; then the whole
    // slices [sn, se), every unit.
    struct Part {
        std::array<int64_t, 2> tiles{};  // of tile thread tt
        int64_t tt = 0;
        int64_t s = 0, c = 0, c_end = 0, ua = 0, ub = 0, u = 0, sn = 0, se = 0;
    };
    struct Own {
        std::mutex m;
        Part part;
    };
    int64_t slice_chunks(int64_t s) const {
        const auto ch = spread(red_.chunks, red_.slices, s);
        return ch[1] - ch[0];
    }
    int64_t left(const Part& w) const {
        int64_t n = w.c < w.c_end ? (w.c_end - w.c) * (w.ub - w.ua) - (w.u - w.ua) : 0;
        for (int64_t s = w.sn; s < w.se; ++s) n += slice_chunks(s) * units_;
        return n;
    }
    // Whole slices to give: two or more, or one beside a current part.
    static bool gives_slices(const Part& w) { return w.se - w.sn >= 2 || (w.se > w.sn && w.c < w.c_end); }
    // Whole slices to give, or units of the current one not started (of
    // a lone whole slice: its units).
    bool splittable(const Part& w) const {
        if (gives_slices(w)) return true;
        if (w.c >= w.c_end) return w.se > w.sn && units_ >= 2;
        return w.ub - w.ua >= 2 && std::max(w.u, (w.ua + w.ub + 1) / 2) < w.ub;
    }
    // w's first whole slice becomes its current part, every unit.
    void start_slice(Part& w) const {
        const auto ch = spread(red_.chunks, red_.slices, w.sn);
        w.s = w.sn++;
        w.c = ch[0];
        w.c_end = ch[1];
        w.ua = w.u = 0;
        w.ub = units_;
    }
    bool claim(int t, Item& item) {
        std::lock_guard<std::mutex> lock(own_[t].m);
        Part& w = own_[t].part;
        while (w.c >= w.c_end) {  // the next whole slice
            if (w.sn >= w.se) return false;
            start_slice(w);
        }
        const auto ut = spread(w.tiles[1] - w.tiles[0], units_, w.u);
        const int64_t part0 = w.tiles[0] + spread(w.tiles[1] - w.tiles[0], units_, w.ua)[0];
        const int64_t part1 = w.tiles[0] + spread(w.tiles[1] - w.tiles[0], units_, w.ub - 1)[1];
        item = {w.s, w.c, spread(red_.chunks, red_.slices, w.s)[0], w.tiles[0] + ut[0], w.tiles[0] + ut[1],
                (w.s * tile_threads_ + w.tt) * units_ + w.u, {part0, part1}};
        if (++w.u == w.ub) {
            w.u = w.ua;
            ++w.c;
        }
        return true;
    }
    // About half of w's work, taken from it (splittable(w)).
    Part split(Part& w) const {
        Part o;
        o.tiles = w.tiles;
        o.tt = w.tt;
        if (gives_slices(w)) {  // the later half of the whole slices
            o.sn = (w.sn + w.se) / 2;
            o.se = w.se;
            w.se = o.sn;
            return o;
        }
        if (w.c >= w.c_end) start_slice(w);  // one whole slice: w's current part, whose units are split
        // Units [m, ub) from chunk c on: m at the middle, or past the units
        // w has started in c (then w's part starts at chunk c + 1).
        const int64_t m = std::max(w.u, (w.ua + w.ub + 1) / 2);
        o.s = w.s;
        o.c = w.c;
        o.c_end = w.c_end;
        o.ua = o.u = m;
        o.ub = w.ub;
        w.ub = m;
        if (w.u >= w.ub) {
            w.u = w.ua;
            ++w.c;
        }
        return o;
    }

    const WeightsReduction& red_;
    bool share_;
    int threads_;
    int64_t units_ = 1, tile_threads_ = 1;
    std::unique_ptr<Own[]> own_;
    std::unique_ptr<std::atomic<int64_t>[]> done_;  // per (slice, tile thread, unit): its chunks done
};

// A thread's staged chunk (16-bit types): the chunk's diff_dst rows in
// chunk order, and every src row some tap of the chunk reads, each once.
struct StagedChunk {
    std::vector<int64_t> src_keys;  // input row keys (see src_key), sorted
    char* src = nullptr;
    char* diff_dst = nullptr;
    ScratchLease src_lease, dst_lease;
};

// Per-thread state, reused from chunk to chunk.
struct ThreadState {
    std::vector<RowPos> chunk;
    std::vector<std::vector<WeightsRow>> tap_rows;  // gemm: one list per tap
    std::vector<uint8_t> tap_built;
    // group_prefetch: the windows of this chunk and the next, the thread's
    // first and last group, the group whose calls hold the walk.
    ChunkWindow win_cur, win_next;
    bool has_next = false;
    int64_t first_grp = 0, last_grp = 0, pf_grp = -1;
    // Tile-major chunks: the row list by which operands come from the user's
    // tensors (WeightsStage bits), and (stage_in_kernel) which ic / oc tile
    // slices this thread has filled in this chunk.
    std::vector<WeightsRow> tm_rows[4];
    uint8_t tm_built[4] = {};
    std::vector<uint8_t> src_filled, dst_filled;
    // stage_in_kernel: the thread's calls on its current chunk and on the
    // one before (0: none yet), for handing out the next chunk's walk.
    int64_t chunk_calls = 0, last_chunk_calls = 0;
    std::vector<RowPos> next_chunk;  // stage_in_kernel prefetch: the next chunk's rows
    std::vector<RowPos> pair_rows;   // NCX gemm windows of bf16 pairs: one image's rows of the chunk
    std::vector<WeightsRow> next_rows;
    // Depthwise: the row list of one (kd, kernel-row block, kw tile) over
    // the chunk, which its channel tiles (consecutive tiles) share; each row
    // a run of pixels with one set of (kernel row, tap) pairs inside src
    // (WeightsRow::mask). key -1: none.
    struct DwRows {
        int64_t key = -1;
        std::vector<WeightsRow> rows;
    } dw;
    // fold_kw: zero-padded src runs of the W edges, a slot per input row
    // segment of the chunk (edge_slot: the slot of key - edge_key0, -1 none
    // yet; edge_used slots taken, -1 before the chunk's first tap), or,
    // edge_slot empty, per (row, kd, kh) (no overlap, or keys spanning more
    // than kEdgeKeySpan).
    static constexpr int64_t kEdgeKeySpan = 1 << 16;
    std::vector<float> edges;
    std::vector<int32_t> edge_slot;
    int64_t edge_key0 = 0;
    int32_t edge_used = -1;
    // NCX windows (plan.ncx_windows): bytes from the virtual NXC tensors'
    // starts to the windows' (the depthwise row offsets subtract them).
    int64_t src_shift = 0, dst_shift = 0;
    StagedChunk staged;
    const StagedChunk* view = nullptr;  // staged chunk, or nullptr: user tensors
    // WeightsPlan::pair_dst: this chunk's kernels read the user's diff_dst
    // (no lone image in it), staging src only.
    bool dst_in_regs = false;
};

class JitWeightsExecutor final : public Executor {
public:
    JitWeightsExecutor(const Problem& p, const WeightsPlan& plan)
        : user_(p), p_(plan.prepad ? padded_problem(p) : p), plan_(plan) {
        // Target strides: the user's when OC-contiguous, else an XIO scratch.
        wei_str_ = p.wei_str;
        if (!plan.direct_weights) {
            wei_str_.o = 1;
            wei_str_.i = p.oc();
            wei_str_.k[2] = p.icg * p.oc();
            wei_str_.k[1] = wei_str_.k[2] * p.k[2];
            wei_str_.k[0] = wei_str_.k[1] * p.k[1];
        }
        user_es_ = static_cast<int64_t>(dtype_size(p_.dt));
        if (plan.blk.kind == WeightsKernelKind::depthwise) plan_dw_edges();
        src_px_ = p_.ic() * (plan.src_widened() ? 4 : user_es_) + plan.window_pad;
        dst_px_ = p_.oc() * user_es_ + plan.window_pad;
        win_src_bytes_ = plan.window_src_rows * plan.geo.in[2] * src_px_;
        win_dst_bytes_ = plan.window_dst_rows * plan.geo.out[2] * dst_px_;
        load_kernels();
    }

    void run(const void* input0, const void* input1, void* output) const override;
    int threads() const override { return op_threads(p_); }
    std::string describe() const override {
        return std::string("jit:") + isa_name(plan_.isa) + " " + plan_.to_string();
    }

private:
    void load_kernels();
    const WeightsKernel& kernel(int rows, bool last_n, int stage = 0) const;
    void compute_thread(int64_t tid, const WeightsThreadGrid& grid, WeightsWork& work, const char* src,
                        const char* diff_dst, float* target, float* partials) const;
    // Runs tile `tile` (blocked plans: with the ic tiles after it, up to
    // `end`, that one call takes) and returns how many tiles it ran.
    int64_t run_gemm_tile(int64_t tile, int64_t end, bool accumulate, float* target, const char* src,
                          const char* diff_dst, ThreadState& ts, Prefetch& pf) const;
    int64_t run_dw_tile(int64_t tile, int64_t end, bool accumulate, float* target, const char* src,
                        const char* diff_dst, ThreadState& ts, Prefetch& pf) const;
    void call(const WeightsKernel& k, const TileCall& c, const std::vector<WeightsRow>& rows,
              bool accumulate, Prefetch& pf) const;
    void prefetch_chunk(Prefetch& pf, int64_t chunk, const char* src, const char* diff_dst) const;
    void prefetch_first_call(Prefetch& pf, ThreadState& ts, int64_t chunk, int64_t first_tile, int64_t calls,
                             int64_t call_pixels, const char* src, const char* diff_dst) const;
    // A gemm tile index, decoded (see run_gemm_tile for the order).
    struct GemmTile {
        int64_t grp, it, ot, tap, kd, kh, kw;
    };
    GemmTile gemm_tile(int64_t tile) const;
    // Output row q of the reduction, decoded; the chunk's rows decoded once,
    // then the kernel rows of one tap restricted to output pixels [ow_lo, ow_hi).
    RowPos row_at(int64_t q) const { return detail::row_at(plan_.geo, q); }
    void decode_rows(std::vector<RowPos>& out, int64_t q0, int64_t q1) const {
        detail::decode_rows(plan_.geo, out, q0, q1);
    }
    void decode_chunk(std::vector<RowPos>& out, int64_t chunk) const {
        const int64_t q0 = chunk * plan_.red.chunk_rows;
        decode_rows(out, q0, std::min(plan_.red.rows, q0 + plan_.red.chunk_rows));
    }
    // f(id, ih) for every input row the taps of output row r read inside
    // src, in (kd, kh) order.
    template <typename F>
    void for_each_src_row(const RowPos& r, F&& f) const {
        const WeightsGeometry& g = plan_.geo;
        for (int64_t kd = 0; kd < g.k[0]; ++kd) {
            const int64_t id = r.od * g.stride[0] - g.pad[0] + kd * g.dil[0];
            if (id < 0 || id >= g.in[0]) continue;
            for (int64_t kh = 0; kh < g.k[1]; ++kh) {
                const int64_t ih = r.oh * g.stride[1] - g.pad[1] + kh * g.dil[1];
                if (ih >= 0 && ih < g.in[1]) f(id, ih);
            }
        }
    }
    // The input row (id, ih) that tap (kd, kh) of output row r reads; false
    // when it lies in the padding.
    bool tap_src_row(const RowPos& r, int64_t kd, int64_t kh, int64_t& id, int64_t& ih) const {
        const WeightsGeometry& g = plan_.geo;
        id = r.od * g.stride[0] - g.pad[0] + kd * g.dil[0];
        ih = r.oh * g.stride[1] - g.pad[1] + kh * g.dil[1];
        return id >= 0 && id < g.in[0] && ih >= 0 && ih < g.in[1];
    }
    // Staged chunk st: the index of input row (id, ih)'s first staged pixel.
    int64_t staged_src_row(const StagedChunk& st, const RowPos& r, int64_t id, int64_t ih) const {
        const auto key = std::lower_bound(st.src_keys.begin(), st.src_keys.end(), src_key(r, id, ih));
        return (key - st.src_keys.begin()) * staged_row_pixels();
    }
    // The rows of `chunk` for tap (kd, kh, kw), as offsets into the staged
    // chunk `st`, or into the user's tensors when st is null. Tile-major
    // chunks: offsets into the tile slices, except for the operands `user`
    // (WeightsStage bits) names, which are read from the user's tensors.
    void build_rows(std::vector<WeightsRow>& out, const std::vector<RowPos>& chunk, const StagedChunk* st,
                    int64_t kd, int64_t kh, int64_t kw,
                    int64_t ow_lo, int64_t ow_hi, int user = 0) const;
    // Depthwise: the rows of the chunk for kw tile kt of kernel-row block
    // kh0 at depth tap kd, as WeightsRow::mask runs from the tile's first
    // (kernel row, tap) pair; offsets less the NCX windows' shifts.
    void build_dw_rows(std::vector<WeightsRow>& out, const std::vector<RowPos>& chunk, int64_t kd, int64_t kh0,
                       int64_t kt, int64_t src_shift, int64_t dst_shift) const;
    // fold_kw: the rows of tap (kd, kh) over the chunk. Output pixels where
    // every kw tap reads inside src read the user's src; the W edges read
    // zero-padded copies of their src runs in ts.edges (pixel stride as in
    // src), written here.
    void build_folded_rows(std::vector<WeightsRow>& out, ThreadState& ts, const char* src, int64_t kd,
                           int64_t kh) const;
    // kw windows: the rows of (kd, kh) and W phase `phase` over the chunk
    // (staged in `st`, or in the user's tensors when st is null), one per
    // chunk row whose input row exists: the phase's row_px src pixels from
    // its first, whose tap-0 output pixel is its pad (the kernel takes the
    // W edges' taps apart); none where the phase reads no pixel.
    void build_window_rows(std::vector<WeightsRow>& out, const std::vector<RowPos>& chunk, const StagedChunk* st,
                           int64_t kd, int64_t kh, int64_t phase) const;
    // kw lanes: the rows of (kd, kh) over the chunk, one per chunk row whose
    // input row exists: its lanes.row_px output pixels from lanes.first,
    // src at that pixel's tap 0 (s * first - pad: left of the row when the
    // head reads padding; the kernel reads only its taps inside).
    void build_lane_rows(std::vector<WeightsRow>& out, const std::vector<RowPos>& chunk, const StagedChunk* st,
                         int64_t kd, int64_t kh) const;
    // Pixels of a staged src row: the input row (merged rows: a segment's
    // pixels; staged segments: the window a segment's taps read, see
    // src_row_first / src_row_width), or with fold_kw every pixel the taps
    // read, W padding included as zeros, so the folded rows need no edges.
    int64_t staged_row_pixels() const {
        const WeightsGeometry& g = plan_.geo;
        const int64_t reach = (g.segment - 1) * g.stride[2] + (g.k[2] - 1) * g.dil[2] + 1;  // a segment's taps
        if (plan_.fold_kw > 1) return reach;
        if (plan_.staged_segments()) return plan_.compress_w ? g.segment : std::min(g.in[2], reach);
        return std::max(g.segment, g.in[2]);
    }
    // Staging (16-bit types).
    int64_t src_key(const RowPos& r, int64_t id, int64_t ih) const;
    int64_t src_row_first(int64_t seg) const;
    int64_t src_row_width(int64_t seg) const;
    // The input pixels [first, end) of a row that output pixels [ow0, ow1)
    // read through their taps: from the first tap of ow0 through the last
    // of ow1 - 1, inside the row [0, IW) unless `padded`.
    std::pair<int64_t, int64_t> src_span(int64_t ow0, int64_t ow1, bool padded) const {
        const WeightsGeometry& g = plan_.geo;
        const int64_t first = ow0 * g.stride[2] - g.pad[2];
        const int64_t end = (ow1 - 1) * g.stride[2] - g.pad[2] + (g.k[2] - 1) * g.dil[2] + 1;
        if (padded) return {first, end};
        return {std::max<int64_t>(0, first), std::min(g.in[2], end)};
    }
    // Segment seg's output pixels.
    int64_t seg_end(int64_t seg) const { return std::min(plan_.geo.out[2], (seg + 1) * plan_.geo.segment); }
    // Blocked plans scatter each pixel run into the tile slices (16-bit
    // runs widened in row_buf first).
    void stage_chunk(StagedChunk& st, const std::vector<RowPos>& chunk, const uint16_t* src,
                     const uint16_t* diff_dst, float* row_buf, bool dst_in_regs = false) const;
    // `count` pixels from `pixel` of image (pair) n as f32: the user's, or
    // widened / paired into row_buf.
    const float* f32_pixels(const uint16_t* tensor, int64_t channels, int64_t image_pixels, int64_t n,
                            int64_t pixel, int64_t count, float* row_buf) const;
    // `count` pixels of `channels` floats (from `from`) split into the
    // tiles of width w (tiles_per_group per group of cg channels; slices
    // of slice_bytes from `to`), from slot `slot` of each slice.
    void scatter_tiles(const float* from, int64_t count, int64_t channels, int64_t cg, int64_t tiles_per_group,
                       int64_t w, int64_t slice_bytes, char* to, int64_t slot) const;
    // Blocked chunks: one ic tile's src slice (every staged src pixel,
    // src_pitch = m*4 bytes each) and one oc tile's diff_dst slice, each
    // with a vector of slack, 64-byte aligned.
    int64_t blocked_src_slice_bytes() const {
        const WeightsGeometry& g = plan_.geo;
        return (plan_.red.chunk_rows * g.k[0] * g.k[1] * staged_row_pixels() * plan_.src_pitch + 64 + 63) / 64 * 64;
    }
    int64_t blocked_dst_slice_bytes() const {
        return (plan_.red.chunk_rows * plan_.geo.segment * plan_.dst_pitch + 64 + 63) / 64 * 64;
    }
    // ... `pitch` bytes a pixel apart at `to` (0: dense).
    void stage_pixels(const uint16_t* tensor, int64_t channels, int64_t image_pixels, int64_t n,
                      int64_t pixel, int64_t count, char* to, int64_t pitch = 0) const;
    void reduce_and_store(float* target, const float* partials, void* user, int threads) const;
    // Bytes of a kernel target element: f32, or the user's 16-bit type
    // when the kernels store it rounded (WeightsPlan::store_rounded).
    int64_t weights_elem_bytes() const { return plan_.store_rounded ? 2 : 4; }
    float* weights_at(float* target, int64_t elem) const {
        return reinterpret_cast<float*>(reinterpret_cast<char*>(target) + elem * weights_elem_bytes());
    }
    // plan.prepad: the user's NXC src into the zero-padded src of p_.
    void pad_src(const char* src, char* to, int threads) const;
    // NCX windows (plan.ncx_windows).
    ChunkWindow chunk_window(const std::vector<RowPos>& chunk) const { return detail::chunk_window(plan_, chunk); }
    std::array<int64_t, 2> thread_channels(const std::array<int64_t, 2>& tiles) const;
    // NCX gemm (plan.ncx_rows): every channel of the chunk's rows into the
    // windows, whose shifts then put them in virtual NXC tensors.
    void fill_gemm_windows(ThreadState& ts, const char* src, const char* diff_dst, char* src_win,
                           char* dst_win) const;
    // src channels src_ch, diff_dst channels dst_ch.
    void fill_windows(ThreadState& ts, const ChunkWindow& w, const std::array<int64_t, 2>& src_ch,
                      const std::array<int64_t, 2>& dst_ch, const char* src, const char* diff_dst, char* src_win,
                      char* dst_win) const;
    int64_t win_src_bytes_ = 0, win_dst_bytes_ = 0;  // the largest chunk's windows
    // Bytes between pixels of the activations as the kernels read them
    // (not staged): the user's tensors, the NXC scratch, or the windows.
    int64_t src_px_ = 0, dst_px_ = 0;
    // Staged strided 1x1 rows keep only the pixels read: one per output
    // pixel. Tile-major chunks: one tile's channels per pixel.
    // Bytes between consecutive src pixels of a row as the kernels read it
    // (staged or the user's tensor; not tile-major).
    int64_t src_pixel_bytes() const { return plan_.staged ? plan_.src_pitch : src_px_; }
    int64_t src_step_bytes() const {
        if (plan_.tile_major) return plan_.blk.m * 4;
        return (plan_.compress_w ? 1 : plan_.geo.stride[2]) * src_pixel_bytes();
    }
    int64_t dst_step_bytes() const {
        return plan_.tile_major ? plan_.blk.n * plan_.blk.vlen * 4
               : plan_.staged   ? plan_.dst_pitch
                                : dst_px_;
    }
    // The same in the user's tensors (NXC, or the NXC scratch).
    int64_t user_elem_bytes() const { return user_es_; }
    // Bytes from the user's (NXC) src / diff_dst to a pixel of an image;
    // with windows (WeightsPlan::windows), in virtual NXC tensors of the
    // windows' pixel pitch.
    int64_t user_src_bytes(int64_t n, int64_t id, int64_t ih, int64_t iw) const {
        const WeightsGeometry& g = plan_.geo;
        return (((n * g.in[0] + id) * g.in[1] + ih) * g.in[2] + iw) * src_px_;
    }
    int64_t user_dst_bytes(int64_t n, int64_t od, int64_t oh, int64_t ow) const {
        const WeightsGeometry& g = plan_.geo;
        return (((n * g.out[0] + od) * g.out[1] + oh) * g.out[2] + ow) * dst_px_;
    }
    int64_t user_src_step() const { return plan_.geo.stride[2] * p_.ic() * user_elem_bytes(); }
    int64_t user_dst_step() const { return p_.oc() * user_elem_bytes(); }
    // bf16 pairs: bytes from an image to its partner (the next image).
    int64_t src_pair_bytes() const { return p_.in_sp() * p_.ic() * user_elem_bytes(); }
    int64_t dst_pair_bytes() const { return p_.out_sp() * p_.oc() * user_elem_bytes(); }
    // bf16 pairs of an odd minibatch: the chunk holds the last image, whose
    // partner is zeros (staged by the copy pass, not by the kernels).
    bool has_lone_image(const std::vector<RowPos>& chunk) const {
        return plan_.pairs && p_.mb % 2 == 1 && !chunk.empty() && chunk.back().n == plan_.geo.mb - 1;
    }
    // Tile-major slices: each ic tile's src, each oc tile's diff_dst.
    int64_t src_slice_bytes() const { return plan_.tile_slice_bytes(plan_.blk.m); }
    int64_t dst_slice_bytes() const { return plan_.tile_slice_bytes(plan_.blk.n * plan_.blk.vlen); }
    void stage_tile_major(StagedChunk& st, const std::vector<RowPos>& chunk, const uint16_t* src,
                          const uint16_t* diff_dst, float* row_buf) const;

    Problem user_;  // as the user's tensors are
    Problem p_;     // as the kernels walk them: the pads in src with plan.prepad
    WeightsPlan plan_;
    WeightStrides wei_str_;
    int64_t user_es_ = 4;  // bytes of an element of the user's (NXC) activations
    // [rows kind][n kind]: rows kind 0 = full m, 1 = last m tile (x blk.kh
    // kernel rows); n kind 0 = full tile, 1 = last (tail) tile.
    enum RowsKind { kFull, kLast, kRowsKinds };
    // [..][..][WeightsStage bits]: stage_in_kernel gemm only, else 0.
    // [rows kind][last n tile][WeightsStage bits, or the W phase of kw windows]
    std::shared_ptr<const WeightsKernel> kernels_[kRowsKinds][2][std::max(4, WeightsPlan::kMaxKwPhases)];
    // Depthwise edges. Per kw tile, its pieces: the runs of an output
    // row's pixels where taps [a, b) of the tile read inside src, in pixel
    // order (each tap's valid pixels are an interval that shrinks as the
    // tap moves right, so a pixel's taps are an interval too, and so are an
    // output row's kernel rows inside src).
    struct TapRun {
        int64_t ow_lo, ow_hi;
        int a, b;
    };
    std::vector<std::vector<TapRun>> kw_pieces_;
    // Some pixel reads outside src with some pair of its tile: the kernels
    // take WeightsRow::mask (desc.edges).
    bool dw_edges_ = false;
    void plan_dw_edges();
    // The kernel row interval [ia, ib) of block kh0 inside src for output row oh.
    std::array<int, 2> kernel_rows_inside(int64_t kh0, int64_t oh) const;
    // Row blocks: bit i = the src row i of the block from output row oh is inside src.
    uint64_t block_src_mask(int64_t oh) const;
    std::shared_ptr<const StageKernel> stager_;
    // lane pairs of an odd group count: the last group's kernel (8 lanes)
    std::shared_ptr<const WeightsKernel> lone_;
};

void JitWeightsExecutor::load_kernels() {
    const WeightsBlocking& b = plan_.blk;
    const bool dw = b.kind == WeightsKernelKind::depthwise;
    const int64_t tap_disp = plan_.kw_lanes ? src_pixel_bytes()  // kw lanes: one src pixel
                                            : plan_.geo.dil[2] * src_px_;
    const int64_t row_disp = plan_.geo.dil[1] * plan_.geo.in[2] * src_px_;
    const int row_kinds[kRowsKinds] = {b.m, b.m_last};
    for (int r = 0; r < kRowsKinds; ++r) {
        for (int last = 0; last < 2; ++last) {
            if (!last && b.n_tiles == 1) continue;  // the only n tile is the last
            const int n = last ? b.n_last : b.n;
            const int tail = (last || b.n_tiles == 1) ? b.tail : 0;
            // The last index: WeightsStage bits, the W phase of kw windows,
            // or (pair_dst) kDstInRegs for diff_dst paired in registers.
            const int variants = plan_.stage_in_kernel ? 4
                                 : plan_.kw_phases > 0 ? static_cast<int>(plan_.kw_phases)
                                 : plan_.pair_dst      ? WeightsPlan::kDstInRegs + 1
                                                       : 1;
            for (int stage = 0; stage < variants; ++stage) {
                int rows = row_kinds[r];
                if (plan_.kw_phases > 0) {  // a phase's own channel tiles
                    const WeightsPlan::KwPhase& f = plan_.kw_phase[static_cast<size_t>(stage)];
                    rows = r == kFull ? f.m : f.m_last;
                }
                WeightsKernelDesc d = plan_.desc(rows, n, tail, tap_disp, dw ? b.kh : 1, row_disp, stage);
                d.edges = dw_edges_ ? 1 : 0;
                bool hit = false;
                auto& k = kernels_[r][last][stage];
                k = get_weights_kernel(d, &hit);
                if (verbose_log())
                    std::fprintf(stderr, "convgrad,jit_cache,%s,%s\n", k->name().c_str(), hit ? "hit" : "miss");
            }
        }
    }
    if (plan_.lane_pairs && plan_.geo.g % 2) {
        WeightsKernelDesc d = plan_.desc(b.m, 1, 0, tap_disp);
        d.lane_pairs = 0;
        d.tail = 8;
        bool hit = false;
        lone_ = get_weights_kernel(d, &hit);
        if (verbose_log())
            std::fprintf(stderr, "convgrad,jit_cache,%s,%s\n", lone_->name().c_str(), hit ? "hit" : "miss");
    }
    if (!dw && plan_.rounded() && (plan_.staged || plan_.src_widened())) {
        const StageMode mode = plan_.pairs                     ? StageMode::pair_bf16
                               : plan_.dt == data_type::bf16 ? StageMode::widen_bf16
                                                             : StageMode::widen_f16;
        stager_ = get_stage_kernel(plan_.isa, mode);
    }
}

const WeightsKernel& JitWeightsExecutor::kernel(int rows, bool last_n, int stage) const {
    const int full = plan_.kw_phases > 0 ? static_cast<int>(plan_.kw_phase[static_cast<size_t>(stage)].m) : plan_.blk.m;
    return *kernels_[rows == full ? kFull : kLast][last_n || plan_.blk.n_tiles == 1][stage];
}

RowPos row_at(const WeightsGeometry& g, int64_t q) {
    RowPos r;
    r.seg = q % g.segs_per_row;
    q /= g.segs_per_row;
    r.oh = q % g.out[1];
    q /= g.out[1];
    r.od = q % g.out[0];
    r.n = q / g.out[0];
    return r;
}

void decode_rows(const WeightsGeometry& g, std::vector<RowPos>& out, int64_t q0, int64_t q1) {
    out.clear();
    if (q0 >= q1) return;
    RowPos r = row_at(g, q0);  // then counted on, without divisions
    for (int64_t q = q0; q < q1; ++q) {
        out.push_back(r);
        if (++r.seg < g.segs_per_row) continue;
        r.seg = 0;
        if (++r.oh < g.out[1]) continue;
        r.oh = 0;
        if (++r.od < g.out[0]) continue;
        r.od = 0;
        ++r.n;
    }
}

// A staged src row is one (image (pair), id, ih, segment): merged rows are
// staged segment by segment (what the segment's pixels read, as taps and
// strides are 1 there), as are staged segments (the window the segment's
// taps read, src_row_first / src_row_width), the others whole.
int64_t JitWeightsExecutor::src_key(const RowPos& r, int64_t id, int64_t ih) const {
    const WeightsGeometry& g = plan_.geo;
    return ((r.n * g.in[0] + id) * g.in[1] + ih) * g.segs_per_row + (g.merged || plan_.staged_segments() ? r.seg : 0);
}

// The input pixels a staged row holds: from src_row_first, src_row_width
// of them. Folded kw rows and staged segments: from the first tap of the
// segment's (or row's) first pixel through the last tap of its last; a
// folded row keeps the W padding (iw < 0 or >= IW, staged as zeros), the
// others only the pixels inside the row.
int64_t JitWeightsExecutor::src_row_first(int64_t seg) const {
    const WeightsGeometry& g = plan_.geo;
    if (plan_.fold_kw > 1 || plan_.staged_segments())
        return src_span(seg * g.segment, seg_end(seg), plan_.fold_kw > 1).first;
    return g.merged ? seg * g.segment : 0;
}

int64_t JitWeightsExecutor::src_row_width(int64_t seg) const {
    const WeightsGeometry& g = plan_.geo;
    if (plan_.fold_kw > 1 || plan_.staged_segments()) {
        const auto [first, end] = src_span(seg * g.segment, seg_end(seg), plan_.fold_kw > 1);
        return std::max<int64_t>(0, end - first);
    }
    return g.merged ? std::min(g.segment, g.in[2] - seg * g.segment) : g.in[2];
}

void JitWeightsExecutor::build_rows(std::vector<WeightsRow>& out, const std::vector<RowPos>& chunk,
                                    const StagedChunk* st, int64_t kd, int64_t kh, int64_t kw, int64_t ow_lo,
                                    int64_t ow_hi, int user) const {
    const WeightsGeometry& g = plan_.geo;
    int64_t slot = 0;  // tile-major: the chunk's pixels in row order
    for (size_t j = 0; j < chunk.size(); ++j) {
        const RowPos& r = chunk[j];
        int64_t id = 0, ih = 0;
        if (!tap_src_row(r, kd, kh, id, ih)) continue;
        const int64_t a = std::max(ow_lo, r.seg * g.segment);
        const int64_t b = std::min(ow_hi, (r.seg + 1) * g.segment);
        if (a >= b) continue;
        const int64_t iw = a * g.stride[2] - g.pad[2] + kw * g.dil[2];
        const int64_t image = plan_.pairs ? 2 * r.n : r.n;  // a pair's first image
        const int64_t user_src = user_src_bytes(image, id, ih, iw);
        const int64_t user_dst = user_dst_bytes(image, r.od, r.oh, a);
        if (plan_.tile_major) {  // slices: slot x tile step (see src_step_bytes)
            add_row(out, user & kCopySrc ? user_src : slot * src_step_bytes(),
                           user & kCopyDst ? user_dst : slot * dst_step_bytes(), b - a);
            slot += b - a;
            continue;
        }
        if (!st) {
            add_row(out, user_src, user_dst, b - a);
            continue;
        }
        // Staged rows: [key index][width], [chunk row][segment].
        const int64_t seg0 = plan_.staged_segments() ? r.seg * g.segment : 0;  // compressed: slot ow - seg0
        const int64_t src_pix = staged_src_row(*st, r, id, ih) + (plan_.compress_w ? a - seg0 : iw - src_row_first(r.seg));
        const int64_t dst_pix = static_cast<int64_t>(j) * g.segment + a - r.seg * g.segment;
        add_row(out, src_pix * plan_.src_pitch, user & kCopyDst ? user_dst : dst_pix * plan_.dst_pitch, b - a);
    }
}

void JitWeightsExecutor::build_window_rows(std::vector<WeightsRow>& out, const std::vector<RowPos>& chunk,
                                           const StagedChunk* st, int64_t kd, int64_t kh, int64_t phase) const {
    const WeightsGeometry& g = plan_.geo;
    const WeightsPlan::KwPhase& f = plan_.kw_phase[static_cast<size_t>(phase)];
    if (f.row_px == 0) return;
    for (size_t j = 0; j < chunk.size(); ++j) {
        const RowPos& r = chunk[j];
        int64_t id = 0, ih = 0;
        if (!tap_src_row(r, kd, kh, id, ih)) continue;
        if (!st) {  // (windows never pair images)
            add_row(out, user_src_bytes(r.n, id, ih, f.first), user_dst_bytes(r.n, r.od, r.oh, f.pad), f.row_px);
            continue;
        }
        const int64_t src_pix = staged_src_row(*st, r, id, ih) + f.first;
        const int64_t dst_pix = static_cast<int64_t>(j) * g.segment + f.pad;
        add_row(out, src_pix * plan_.src_pitch, dst_pix * plan_.dst_pitch, f.row_px);
    }
}

void JitWeightsExecutor::build_lane_rows(std::vector<WeightsRow>& out, const std::vector<RowPos>& chunk,
                                         const StagedChunk* st, int64_t kd, int64_t kh) const {
    const WeightsGeometry& g = plan_.geo;
    const WeightsPlan::KwLanes& f = plan_.lanes;
    const int64_t iw = g.stride[2] * f.first - g.pad[2];
    for (size_t j = 0; j < chunk.size(); ++j) {
        const RowPos& r = chunk[j];
        int64_t id = 0, ih = 0;
        if (!tap_src_row(r, kd, kh, id, ih)) continue;
        if (!st) {
            add_row(out, user_src_bytes(r.n, id, ih, iw), user_dst_bytes(r.n, r.od, r.oh, f.first), f.row_px);
            continue;
        }
        const int64_t src_pix = staged_src_row(*st, r, id, ih) + iw;
        const int64_t dst_pix = static_cast<int64_t>(j) * g.segment + f.first;
        add_row(out, src_pix * plan_.src_pitch, dst_pix * plan_.dst_pitch, f.row_px);
    }
}

void JitWeightsExecutor::build_folded_rows(std::vector<WeightsRow>& out, ThreadState& ts, const char* src,
                                           int64_t kd, int64_t kh) const {
    const WeightsGeometry& g = plan_.geo;
    const int64_t ic = p_.ic(), s = g.stride[2];
    const WeightsPlan::WEdges e = plan_.w_edges();
    const int64_t slot_floats = (e.left_w + e.right_w) * ic;
    const float* fsrc = reinterpret_cast<const float*>(src);
    // Bytes from the user's src to `to`, as a row's src_offset.
    auto offset_of = [&](const float* to) {
        return static_cast<int64_t>(reinterpret_cast<intptr_t>(to) - reinterpret_cast<intptr_t>(src));
    };
    // src pixels [iw0, iw0 + width) of an input row, zeros outside it.
    auto pad_copy = [&](const float* row, int64_t iw0, int64_t width, float* to) {
        copy_row_run(reinterpret_cast<const char*>(row), iw0, width, g.in[2], ic * 4, reinterpret_cast<char*>(to));
    };
    // An input row segment's edge copies depend on it alone: made once a
    // chunk where the chunk's keys fit edge_slot and several output rows
    // read an input row (kernels that overlap from one output row to the
    // next; 1D rows and patch kernels never do). conv_basic_3d:1st (3 ->
    // 16 channels, 3x3x3 on 5x5x5) made 9 copies of each edge, 29 % of its
    // time (AMD Zen 5, f32, mb 8, 2 threads, min of 5: 1.32x).
    // (src_key leaves the segment out where rows are read in place; the
    // edges of segments differ.)
    auto key_of = [&](const RowPos& r, int64_t id, int64_t ih) {
        return ((r.n * g.in[0] + id) * g.in[1] + ih) * g.segs_per_row + r.seg;
    };
    // No W edges on a padded src (folded taps): every row in place, no copies or slots.
    const bool edges = e.left > 0 || e.right < g.out[2];
    if (edges && ts.edge_used < 0) {  // the chunk's first tap
        const bool overlap =
                (g.k[0] - 1) * g.dil[0] + 1 > g.stride[0] || (g.k[1] - 1) * g.dil[1] + 1 > g.stride[1];
        int64_t lo = INT64_MAX, hi = -1;
        if (overlap)
            for (const RowPos& r : ts.chunk)
                for_each_src_row(r, [&](int64_t id, int64_t ih) {
                    lo = std::min(lo, key_of(r, id, ih));
                    hi = std::max(hi, key_of(r, id, ih));
                });
        ts.edge_key0 = lo;
        ts.edge_slot.clear();
        if (hi >= lo && hi - lo < ThreadState::kEdgeKeySpan) ts.edge_slot.assign(static_cast<size_t>(hi - lo + 1), -1);
        ts.edge_used = 0;
    }
    for (size_t j = 0; j < ts.chunk.size(); ++j) {
        const RowPos& r = ts.chunk[j];
        int64_t id = 0, ih = 0;
        if (!tap_src_row(r, kd, kh, id, ih)) continue;
        const float* row = fsrc + ((r.n * g.in[0] + id) * g.in[1] + ih) * g.in[2] * ic;
        const int64_t dst = ((r.n * g.out[0] + r.od) * g.out[1] + r.oh) * g.out[2] * dst_px_;
        bool copy = edges;
        float* slot = nullptr;  // (no edges: copied() gets empty ranges only)
        if (edges) {
            int64_t index = (static_cast<int64_t>(j) * g.k[0] + kd) * g.k[1] + kh;
            if (!ts.edge_slot.empty()) {
                int32_t& known = ts.edge_slot[static_cast<size_t>(key_of(r, id, ih) - ts.edge_key0)];
                copy = known < 0;
                if (copy) known = ts.edge_used++;
                index = known;
            }
            slot = ts.edges.data() + index * slot_floats;
        }
        // The row's segment [a, b) cut at the W edges: pixels below e.left
        // and from e.right on read zero-padded copies, the rest src itself.
        const int64_t a = r.seg * g.segment, b = std::min(g.out[2], a + g.segment);
        auto copied = [&](int64_t lo, int64_t hi, float* to) {  // pixels [lo, hi) of an edge
            if (lo >= hi) return;
            if (copy) pad_copy(row, lo * s - g.pad[2], (hi - lo - 1) * s + (g.k[2] - 1) * g.dil[2] + 1, to);
            add_row(out, offset_of(to), dst + lo * dst_px_, hi - lo);
        };
        copied(a, std::min(b, e.left), slot);
        const int64_t lo = std::max(a, e.left), hi = std::min(b, e.right);
        if (hi > lo) add_row(out, offset_of(row + (lo * s - g.pad[2]) * ic), dst + lo * dst_px_, hi - lo);
        copied(std::max(a, e.right), b, edges ? slot + e.left_w * ic : nullptr);
    }
}

// `count` pixels from pixel `pixel` of image (pair) n into `to`: one
// contiguous run of channels * count elements per image.
void JitWeightsExecutor::stage_pixels(const uint16_t* tensor, int64_t channels, int64_t image_pixels, int64_t n,
                                      int64_t pixel, int64_t count, char* to, int64_t pitch) const {
    const int64_t image = plan_.pairs ? 2 * n : n;
    if (pitch == 0) pitch = channels * 4;
    for (int64_t q = 0; q < count;) {
        // Dense runs: the whole range, or a pixel at a time under a wider pitch.
        const int64_t run = pitch == channels * 4 ? count : 1;
        if (!stager_) {  // f32: a plain copy
            const float* from = reinterpret_cast<const float*>(tensor) + (image * image_pixels + pixel + q) * channels;
            std::memcpy(to + q * pitch, from, static_cast<size_t>(run * channels) * 4);
        } else {
            const uint16_t* a = tensor + (image * image_pixels + pixel + q) * channels;
            const uint16_t* b = plan_.pairs && image + 1 < p_.mb ? a + image_pixels * channels : nullptr;
            stager_->run(a, b, to + q * pitch, run * channels);
        }
        q += run;
    }
}

void JitWeightsExecutor::stage_chunk(StagedChunk& st, const std::vector<RowPos>& chunk, const uint16_t* src,
                                     const uint16_t* diff_dst, float* row_buf, bool dst_in_regs) const {
    const WeightsGeometry& g = plan_.geo;
    const WeightsBlocking& b = plan_.blk;
    const int64_t ic = p_.ic(), oc = p_.oc();
    const int64_t out_pixels = g.out[0] * g.out[1] * g.out[2], in_pixels = g.in[0] * g.in[1] * g.in[2];
    st.src_keys.clear();
    for (size_t j = 0; j < chunk.size(); ++j) {
        const RowPos& r = chunk[j];
        const int64_t first = r.seg * g.segment, count = std::min(g.segment, g.out[2] - first);
        const int64_t pixel = ((r.od * g.out[1]) + r.oh) * g.out[2] + first;
        if (plan_.blocked)
            scatter_tiles(f32_pixels(diff_dst, oc, out_pixels, r.n, pixel, count, row_buf), count, oc, g.ocg,
                          b.n_tiles, b.n * b.vlen, blocked_dst_slice_bytes(), st.diff_dst,
                          static_cast<int64_t>(j) * g.segment);
        else if (!dst_in_regs)
            stage_pixels(diff_dst, oc, out_pixels, r.n, pixel, count,
                         st.diff_dst + static_cast<int64_t>(j) * g.segment * plan_.dst_pitch, plan_.dst_pitch);
        for_each_src_row(r, [&](int64_t id, int64_t ih) { st.src_keys.push_back(src_key(r, id, ih)); });
    }
    std::sort(st.src_keys.begin(), st.src_keys.end());
    st.src_keys.erase(std::unique(st.src_keys.begin(), st.src_keys.end()), st.src_keys.end());
    const int64_t row_pixels = staged_row_pixels();
    const auto valid = valid_ow(g, 0);  // compress_w: the output pixels whose src exists
    for (size_t i = 0; i < st.src_keys.size(); ++i) {
        const int64_t key = st.src_keys[i], seg = key % g.segs_per_row, row = key / g.segs_per_row;
        const int64_t n = row / (g.in[0] * g.in[1]), plane_row = row % (g.in[0] * g.in[1]);
        char* to = st.src + static_cast<int64_t>(i) * row_pixels * plan_.src_pitch;
        if (plan_.fold_kw > 1) {  // zeros outside the input row
            copy_padded_run(src_row_first(seg), src_row_width(seg), g.in[2], ic * 4, to,
                            [&](int64_t first, int64_t count, char* at) {
                stage_pixels(src, ic, in_pixels, n, plane_row * g.in[2] + first, count, at);
            });
            continue;
        }
        const int64_t slot0 = static_cast<int64_t>(i) * row_pixels;  // the row's first pixel slot
        if (!plan_.compress_w) {
            const int64_t first = plane_row * g.in[2] + src_row_first(seg), count = src_row_width(seg);
            if (plan_.blocked)
                scatter_tiles(f32_pixels(src, ic, in_pixels, n, first, count, row_buf), count, ic, g.icg, b.m_tiles,
                              b.m, blocked_src_slice_bytes(), st.src, slot0);
            else
                stage_pixels(src, ic, in_pixels, n, first, count, to, plan_.src_pitch);
            continue;
        }
        // iw = ow * stride - pad, in slot ow - ow0; staged segments: the segment's pixels, from slot 0
        const int64_t ow0 = plan_.staged_segments() ? seg * g.segment : 0;
        const int64_t ow1 = plan_.staged_segments() ? ow0 + g.segment : g.out[2];
        for (int64_t ow = std::max(valid[0], ow0); ow < std::min(valid[1], ow1); ++ow) {
            const int64_t pixel = plane_row * g.in[2] + ow * g.stride[2] - g.pad[2];
            if (plan_.blocked)
                scatter_tiles(f32_pixels(src, ic, in_pixels, n, pixel, 1, row_buf), 1, ic, g.icg, b.m_tiles, b.m,
                              blocked_src_slice_bytes(), st.src, slot0 + ow - ow0);
            else
                stage_pixels(src, ic, in_pixels, n, pixel, 1, to + (ow - ow0) * plan_.src_pitch);
        }
    }
}

const float* JitWeightsExecutor::f32_pixels(const uint16_t* tensor, int64_t channels, int64_t image_pixels,
                                           int64_t n, int64_t pixel, int64_t count, float* row_buf) const {
    if (stager_) {
        stage_pixels(tensor, channels, image_pixels, n, pixel, count, reinterpret_cast<char*>(row_buf));
        return row_buf;
    }
    return reinterpret_cast<const float*>(tensor) + (n * image_pixels + pixel) * channels;
}

namespace {

// scatter_tiles for tiles of W floats (W > 0: a copy of constant size) or
// of `width` (W == 0): pixel by pixel, the source row read once, in order;
// a group's partial last tile copies its `rest` channels.
template <int W>
void scatter_pixels(const float* from, int64_t count, int64_t channels, int64_t groups, int64_t cg,
                    int64_t tiles_per_group, int64_t width, int64_t slice, float* base) {
    const int64_t w = W > 0 ? W : width;
    const size_t bytes = sizeof(float) * static_cast<size_t>(w);
    const int64_t full = std::min(tiles_per_group, cg / w), rest = tiles_per_group > full ? cg - full * w : 0;
    for (int64_t q = 0; q < count; ++q, from += channels, base += w) {
        float* d = base;
        for (int64_t grp = 0; grp < groups; ++grp) {
            const float* s = from + grp * cg;
            for (int64_t t = 0; t < full; ++t, s += w, d += slice) std::memcpy(d, s, bytes);
            if (rest) {
                std::memcpy(d, s, sizeof(float) * static_cast<size_t>(rest));
                d += slice;
            }
        }
    }
}

// n floats with 16-lane loads and stores, the last one masked.
__attribute__((target("avx512f"))) inline void copy_floats_avx512(float* to, const float* from, int64_t n) {
    for (; n >= 16; n -= 16, from += 16, to += 16) _mm512_storeu_ps(to, _mm512_loadu_ps(from));
    if (n > 0) {
        const __mmask16 m = static_cast<__mmask16>((1u << n) - 1);
        _mm512_mask_storeu_ps(to, m, _mm512_maskz_loadu_ps(m, from));
    }
}

// scatter_pixels<0> on AVX-512: every copy (the partial last tile's too)
// in masked vectors instead of a memcpy call.
__attribute__((target("avx512f"))) void scatter_pixels_avx512(const float* from, int64_t count, int64_t channels,
                                                             int64_t groups, int64_t cg, int64_t tiles_per_group,
                                                             int64_t w, int64_t slice, float* base) {
    const int64_t full = std::min(tiles_per_group, cg / w), rest = tiles_per_group > full ? cg - full * w : 0;
    for (int64_t q = 0; q < count; ++q, from += channels, base += w) {
        float* d = base;
        for (int64_t grp = 0; grp < groups; ++grp) {
            const float* s = from + grp * cg;
            for (int64_t t = 0; t < full; ++t, s += w, d += slice) copy_floats_avx512(d, s, w);
            if (rest) {
                copy_floats_avx512(d, s, rest);
                d += slice;
            }
        }
    }
}

}  // namespace

void JitWeightsExecutor::scatter_tiles(const float* from, int64_t count, int64_t channels, int64_t cg,
                                       int64_t tiles_per_group, int64_t w, int64_t slice_bytes, char* to,
                                       int64_t slot) const {
    // The common widths as fixed-size (inlined) copies, chosen once a call:
    // a memcpy call per (pixel, tile) of 24-64 bytes cost ResNet-50 res2a
    // (64 channels at 56x56) 9 % of its time; with a switch on the width
    // per (pixel, tile), GoogLeNet-v3's 192 -> 48 at 35x35 (AVX2, 4-float
    // tiles) spent 26 % of its time in this copy, 15 % without. Other
    // widths on AVX-512 copy in masked vectors: ResNeXt-50 conv5 3x3 s2
    // (tiles of 11 and 10 input channels) spent 16 % of its time (1
    // thread) in memcpy calls; against them (AMD Zen 4, 2 threads, mb 16,
    // min of 5) 1.08x, the other blocked layers of the shape files
    // 0.99-1.05x.
    const int64_t slice = slice_bytes / 4, g = plan_.geo.g;
    float* base = reinterpret_cast<float*>(to) + slot * w;
    switch (w) {
        case 4: return scatter_pixels<4>(from, count, channels, g, cg, tiles_per_group, w, slice, base);
        case 6: return scatter_pixels<6>(from, count, channels, g, cg, tiles_per_group, w, slice, base);
        case 8: return scatter_pixels<8>(from, count, channels, g, cg, tiles_per_group, w, slice, base);
        case 16: return scatter_pixels<16>(from, count, channels, g, cg, tiles_per_group, w, slice, base);
        case 24: return scatter_pixels<24>(from, count, channels, g, cg, tiles_per_group, w, slice, base);
        default:
            if (plan_.isa >= Isa::avx512_core)
                return scatter_pixels_avx512(from, count, channels, g, cg, tiles_per_group, w, slice, base);
            return scatter_pixels<0>(from, count, channels, g, cg, tiles_per_group, w, slice, base);
    }
}

// Tile-major chunk: output pixel j of the chunk (rows in order, `segment`
// slots each) goes to slot j of every tile's slice: ic tile t of group grp
// holds channels [grp*ICg + t*m, +m) of its src pixel (one per output
// pixel: 1x1, no padding), oc tile t its diff_dst channels [grp*OCg +
// t*n*vlen, +n*vlen). Lanes past a group's channels are never used (the
// kernels mask the oc tail and broadcast only m_last rows): not written.
void JitWeightsExecutor::stage_tile_major(StagedChunk& st, const std::vector<RowPos>& chunk, const uint16_t* src,
                                          const uint16_t* diff_dst, float* row_buf) const {
    const WeightsGeometry& g = plan_.geo;
    const WeightsBlocking& b = plan_.blk;
    const int64_t ic = p_.ic(), oc = p_.oc();
    const int64_t out_pixels = g.out[0] * g.out[1] * g.out[2], in_pixels = g.in[0] * g.in[1] * g.in[2];
    const int64_t dst_w = b.n * b.vlen;
    auto scatter = [&](const float* from, int64_t count, int64_t channels, int64_t cg, int64_t tiles_per_group,
                       int64_t w, float* to, int64_t slot) {
        scatter_tiles(from, count, channels, cg, tiles_per_group, w, plan_.tile_slice_bytes(w),
                      reinterpret_cast<char*>(to), slot);
    };
    auto pixels = [&](const uint16_t* tensor, int64_t channels, int64_t image_pixels, int64_t n, int64_t pixel,
                      int64_t count) { return f32_pixels(tensor, channels, image_pixels, n, pixel, count, row_buf); };
    float* sdst = reinterpret_cast<float*>(st.diff_dst);
    float* ssrc = reinterpret_cast<float*>(st.src);
    int64_t slot = 0;  // the chunk's pixels in row order (as build_rows numbers them)
    for (const RowPos& r : chunk) {
        const int64_t first = r.seg * g.segment, count = std::min(g.segment, g.out[2] - first);
        const int64_t out_pixel = (r.od * g.out[1] + r.oh) * g.out[2] + first;
        scatter(pixels(diff_dst, oc, out_pixels, r.n, out_pixel, count), count, oc, g.ocg, b.n_tiles, dst_w, sdst,
                slot);
        // The src pixels: (od*sd, oh*sh, ow*sw), one per output pixel.
        const int64_t row = (r.od * g.stride[0] * g.in[1] + r.oh * g.stride[1]) * g.in[2];
        if (g.stride[2] == 1)
            scatter(pixels(src, ic, in_pixels, r.n, row + first, count), count, ic, g.icg, b.m_tiles, b.m, ssrc,
                    slot);
        else
            for (int64_t q = 0; q < count; ++q)
                scatter(pixels(src, ic, in_pixels, r.n, row + (first + q) * g.stride[2], 1), 1, ic, g.icg,
                        b.m_tiles, b.m, ssrc, slot + q);
        slot += count;
    }
}

void JitWeightsExecutor::call(const WeightsKernel& k, const TileCall& c,
                              const std::vector<WeightsRow>& rows, bool accumulate, Prefetch& pf) const {
    int64_t pixels = 0;
    for (const WeightsRow& r : rows) pixels += r.pixels;
    // Depthwise and ic-loop kernels step through a list of walks (an ic
    // loop's pixels can span several: the next chunk's diff_dst rows, then
    // its src rows); the others step through one. stage_in_kernel hands
    // its walks out one a call over the chunk's last calls (skip): a list
    // of that one.
    const bool walks = plan_.blk.kind == WeightsKernelKind::depthwise || (c.ic_loop && !plan_.stage_in_kernel);
    const auto [at, step] = walks ? std::pair<const char*, int64_t>{} : pf.take(pixels * c.ic_tiles);
    // Every field, in declaration order (a default-initialised struct is
    // cleared first: a rep stos per call).
    const WeightsKernelArgs a{reinterpret_cast<const float*>(c.src),
                              reinterpret_cast<const float*>(c.diff_dst),
                              c.diff_weights,
                              rows.data(),
                              static_cast<int64_t>(rows.size()),
                              c.src_step,
                              c.dst_step,
                              c.wei_row_stride * weights_elem_bytes(),
                              c.wei_kh_stride * weights_elem_bytes(),
                              accumulate ? 1 : 0,
                              at ? at : c.diff_dst,
                              at ? step : 0,
                              walks       ? pf.take_walks(pixels * c.ic_tiles, c.diff_dst)
                              : c.ic_loop ? pf.one_walk(at ? at : c.diff_dst, at ? step : 0)
                                          : nullptr,
                              reinterpret_cast<float*>(c.src_stage),
                              reinterpret_cast<float*>(c.dst_stage),
                              src_step_bytes(),  // a tile-major slice's slot
                              dst_step_bytes(),
                              src_pair_bytes(),
                              dst_pair_bytes(),
                              c.ic_tiles,
                              c.src_tile_step,
                              c.wei_tile_step * weights_elem_bytes()};
    k.run(a);
}

// Tile order (outermost first): g, ic block, oc tile, tap, ic tile, so a
// thread's consecutive tiles share the chunk's diff_dst slice (kept in L1)
// and an ic block's src slice stays in L2 across oc tiles; the last ic block
// may be short.
JitWeightsExecutor::GemmTile JitWeightsExecutor::gemm_tile(int64_t tile) const {
    const WeightsGeometry& g = plan_.geo;
    const WeightsBlocking& b = plan_.blk;
    // kw taps outside the tile rows (kw windows: W phases, one a tile)
    const int64_t kws = plan_.kw_phases > 0 ? plan_.kw_phases : plan_.kw_lanes ? 1 : g.k[2] / plan_.fold_kw;
    const int64_t khs = g.k[1] / plan_.fold_kh, taps = g.k[0] / plan_.fold_kd * khs * kws;  // (folded taps: tiles)
    const int64_t per_group = b.m_tiles * taps * b.n_tiles, per_block = b.m_block * taps * b.n_tiles;
    const int64_t grp = tile / per_group, in_group = tile % per_group;
    const int64_t blk = in_group / per_block, in_block = in_group % per_block;
    const int64_t blk_tiles = std::min(b.m_block, b.m_tiles - blk * b.m_block);
    const int64_t tap = (in_block / blk_tiles) % taps;
    return {grp, blk * b.m_block + in_block % blk_tiles, in_block / (blk_tiles * taps), tap,
            tap / (kws * khs) * plan_.fold_kd, (tap / kws) % khs * plan_.fold_kh, tap % kws};
}

// Row lists depend on the tap only (tile-major: on the operands read from
// the user's tensors) and are built once per chunk. src / diff_dst are the
// user's tensors (NXC); staged chunks are in ts.view. stage_in_kernel: the
// thread's first call on an ic (oc) tile of the chunk reads the user's src
// (diff_dst) and fills the tile's slice.
int64_t JitWeightsExecutor::run_gemm_tile(int64_t tile, int64_t end, bool accumulate, float* target,
                                          const char* src, const char* diff_dst, ThreadState& ts,
                                          Prefetch& pf) const {
    const WeightsGeometry& g = plan_.geo;
    const WeightsBlocking& b = plan_.blk;
    const auto [tile_grp, it, ot, tap, kd, kh, kw] = gemm_tile(tile);
    const int64_t grp = plan_.lane_pairs ? 2 * tile_grp : tile_grp;  // lane pairs: the pair's first group
    // kw windows: the phase's channel tiles (fewer than m_tiles for phases
    // of fewer taps: the rest of its tiles are empty).
    const WeightsPlan::KwPhase* phase = plan_.kw_phases > 0 ? &plan_.kw_phase[static_cast<size_t>(kw)] : nullptr;
    if (phase && it >= phase->m_tiles) return 1;
    const int64_t tile_m = phase ? phase->m : b.m;
    // kw lanes: m tile `it` is output channels, n tile `ot` a vector of the group's inputs.
    const int64_t ic0 = plan_.kw_lanes ? ot * b.vlen : it * tile_m;
    const int64_t oc0 = grp * g.ocg + (plan_.kw_lanes ? it * tile_m : ot * b.n * b.vlen);
    const int64_t src_tile = grp * b.m_tiles + it, dst_tile = grp * b.n_tiles + ot;
    if (plan_.group_prefetch && ts.pf_grp != grp) {
        // The next group's lines (one a pixel), which this group's calls
        // prefetch: after the thread's last group, the next chunk's first.
        ts.pf_grp = grp;
        pf.clear();
        int64_t next = grp + (plan_.lane_pairs ? 2 : 1);
        const ChunkWindow* w = &ts.win_cur;
        if (next > ts.last_grp) {
            next = ts.first_grp;
            w = ts.has_next ? &ts.win_next : nullptr;
        }
        if (w) {
            const int64_t es = user_elem_bytes(), ic = p_.ic(), oc = p_.oc();
            pf.add_strided(src + (w->src_lo * g.in[2] * ic + next * g.icg) * es, ic * es,
                           (w->src_hi - w->src_lo) * g.in[2]);
            pf.add_strided(diff_dst + (w->dst_lo * g.out[2] * oc + next * g.ocg) * es, oc * es,
                           (w->dst_hi - w->dst_lo) * g.out[2]);
        }
    }
    int stage = 0;
    if (plan_.stage_in_kernel) {
        if (!ts.src_filled[src_tile]) stage |= kCopySrc;
        if (!ts.dst_filled[dst_tile]) stage |= kCopyDst;
        ts.src_filled[src_tile] = ts.dst_filled[dst_tile] = 1;
        ++ts.chunk_calls;
    }
    // Rows: per tap, or for tile-major chunks (one tap) per user-read set.
    std::vector<WeightsRow>& rows = plan_.tile_major ? ts.tm_rows[stage] : ts.tap_rows[static_cast<size_t>(tap)];
    uint8_t& built = plan_.tile_major ? ts.tm_built[stage] : ts.tap_built[static_cast<size_t>(tap)];
    if (!built) {
        rows.clear();
        const auto ow = valid_ow(g, kw);
        if (plan_.kw_phases > 0)
            build_window_rows(rows, ts.chunk, ts.view, kd, kh, kw);
        else if (plan_.kw_lanes)
            build_lane_rows(rows, ts.chunk, ts.view, kd, kh);
        else if (plan_.fold_kw > 1 && !ts.view)
            build_folded_rows(rows, ts, src, kd, kh);
        else if (plan_.fold_kw > 1)  // staged rows hold the W padding: every pixel reads inside them
            build_rows(rows, ts.chunk, ts.view, kd, kh, 0, 0, g.out[2]);
        else
            build_rows(rows, ts.chunk, ts.view, kd, kh, kw, ow[0], ow[1], ts.dst_in_regs ? kCopyDst : stage);
        built = 1;
    }
    TileCall c{};
    c.diff_weights = weights_at(target, oc0 * wei_str_.o + ic0 * wei_str_.i + kd * wei_str_.k[0] +
                                                kh * wei_str_.k[1] + kw * wei_str_.k[2]);
    c.wei_row_stride = wei_str_.i;
    // kw windows: a phase's taps; kw lanes: every tap
    // folded taps: the next run of (kw, ic) rows, the next kernel row's
    c.wei_kh_stride = plan_.kw_phases > 0   ? g.stride[2] * wei_str_.k[2]
                      : plan_.kw_lanes      ? wei_str_.k[2]
                      : plan_.folded_taps() ? wei_str_.k[1]
                                            : 0;
    const char* user_src = src + (grp * g.icg + ic0) * user_elem_bytes();
    const char* user_dst = diff_dst + oc0 * user_elem_bytes();
    c.ic_loop = plan_.ic_loop(plan_.kw_phases > 0 ? 0 : stage);
    int64_t run = 1;
    // ic runs (WeightsPlan::ic_loop): the full ic tiles that follow in the
    // tap's run (and in its ic block) share the call, their src slices
    // `slice` bytes apart.
    auto ic_run = [&](int64_t slice) {
        const int64_t block_end = std::min(b.m_tiles, (it / b.m_block + 1) * b.m_block);
        const int64_t full_end = b.m_last == b.m ? block_end : std::min(block_end, b.m_tiles - 1);
        run = std::max<int64_t>(1, std::min(full_end - it, end - tile));
        c.ic_tiles = run;
        c.src_tile_step = slice;
        c.wei_tile_step = b.m * wei_str_.i;
    };
    if (plan_.blocked) {  // the tile slices
        c.src = ts.view->src + src_tile * blocked_src_slice_bytes();
        c.diff_dst = ts.view->diff_dst + dst_tile * blocked_dst_slice_bytes();
        c.src_step = src_step_bytes();
        c.dst_step = dst_step_bytes();
        ic_run(blocked_src_slice_bytes());
    } else if (!plan_.tile_major) {
        c.src = ts.view ? ts.view->src + (grp * g.icg + ic0) * 4 : user_src;
        c.diff_dst = ts.view && !ts.dst_in_regs ? ts.view->diff_dst + oc0 * 4 : user_dst;
        c.src_step = src_step_bytes();
        c.dst_step = ts.dst_in_regs ? user_dst_step() : dst_step_bytes();
        if (c.ic_loop) ic_run(b.m * (ts.view ? 4 : user_elem_bytes()));
    } else {
        char* src_slice = ts.staged.src + src_tile * src_slice_bytes();
        char* dst_slice = ts.staged.diff_dst + dst_tile * dst_slice_bytes();
        c.src = stage & kCopySrc ? user_src : src_slice;
        c.diff_dst = stage & kCopyDst ? user_dst : dst_slice;
        c.src_step = stage & kCopySrc ? user_src_step() : src_step_bytes();
        c.dst_step = stage & kCopyDst ? user_dst_step() : dst_step_bytes();
        c.src_stage = stage & kCopySrc ? src_slice : nullptr;
        c.dst_stage = stage & kCopyDst ? dst_slice : nullptr;
        if (c.ic_loop) ic_run(src_slice_bytes());
        // Copies in the kernels: up to the first ic tile this thread has not
        // copied yet (its call copies it).
        if (c.ic_loop && plan_.stage_in_kernel) {
            int64_t filled = 1;
            while (filled < run && ts.src_filled[static_cast<size_t>(src_tile + filled)]) ++filled;
            run = c.ic_tiles = filled;
        }
    }
    const int m = phase ? static_cast<int>(it == phase->m_tiles - 1 ? phase->m_last : phase->m)
                        : it == b.m_tiles - 1 ? b.m_last : b.m;
    const bool lone = plan_.lane_pairs && grp + 1 == g.g;
    const int variant = plan_.kw_phases > 0 ? static_cast<int>(kw)
                        : ts.dst_in_regs    ? WeightsPlan::kDstInRegs
                                            : stage;
    call(lone ? *lone_ : kernel(m, ot == b.n_tiles - 1, variant), c, rows, accumulate, pf);
    return run;
}

std::array<int, 2> JitWeightsExecutor::kernel_rows_inside(int64_t kh0, int64_t oh) const {
    const WeightsGeometry& g = plan_.geo;
    int ia = plan_.blk.kh, ib = 0;
    for (int i = 0; i < plan_.blk.kh; ++i) {
        const int64_t ih = oh * g.stride[1] - g.pad[1] + (kh0 + i) * g.dil[1];
        if (ih >= 0 && ih < g.in[1]) {
            ia = std::min(ia, i);
            ib = i + 1;
        }
    }
    return {ia, ib};
}

void JitWeightsExecutor::plan_dw_edges() {
    const WeightsGeometry& g = plan_.geo;
    const WeightsBlocking& b = plan_.blk;
    kw_pieces_.resize(static_cast<size_t>(b.m_tiles));
    // Whole rows: one piece of every tap, the kernel skips the W edges.
    if (b.whole_rows) kw_pieces_[0] = {{0, g.out[2], 0, b.m}};
    for (int64_t kt = 0; kt < b.m_tiles && !b.whole_rows; ++kt) {
        const int taps = kt == b.m_tiles - 1 ? b.m_last : b.m;
        std::vector<std::array<int64_t, 2>> valid;  // per tap of the tile
        for (int k = 0; k < taps; ++k) valid.push_back(valid_ow(g, kt * b.m + k));
        // The taps reading inside src, [a, e), change only where a tap's
        // valid range starts or ends: one piece between such points (a
        // walk over the pixels took 30 us on 8000-pixel rows).
        std::vector<int64_t> cuts = {0, g.out[2]};
        for (const auto& v : valid)
            for (const int64_t c : v)
                if (c > 0 && c < g.out[2]) cuts.push_back(c);
        std::sort(cuts.begin(), cuts.end());
        cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
        std::vector<TapRun>& pieces = kw_pieces_[static_cast<size_t>(kt)];
        for (size_t c = 0; c + 1 < cuts.size(); ++c) {
            const int64_t ow = cuts[c], ow_end = cuts[c + 1];
            int a = taps, e = 0;
            for (int k = 0; k < taps; ++k)
                if (valid[static_cast<size_t>(k)][0] <= ow && ow < valid[static_cast<size_t>(k)][1]) {
                    a = std::min(a, k);
                    e = k + 1;
                }
            if (a >= e) continue;  // no work
            dw_edges_ = dw_edges_ || e - a < taps;
            if (!pieces.empty() && pieces.back().ow_hi == ow && pieces.back().a == a && pieces.back().b == e)
                pieces.back().ow_hi = ow_end;
            else
                pieces.push_back({ow, ow_end, a, e});
        }
    }
    if (b.row_block > 1) {
        const uint64_t all = (uint64_t(1) << row_block_src_rows(g, b.row_block)) - 1;
        for (int64_t oh = 0; oh < g.out[1]; oh += b.row_block) dw_edges_ = dw_edges_ || block_src_mask(oh) != all;
        return;
    }
    for (int64_t kh0 = 0; kh0 < g.k[1]; kh0 += b.kh)
        for (int64_t oh = 0; oh < g.out[1]; ++oh) {
            const auto [ia, ib] = kernel_rows_inside(kh0, oh);
            dw_edges_ = dw_edges_ || (ia < ib && ib - ia < b.kh);
        }
}

uint64_t JitWeightsExecutor::block_src_mask(int64_t oh) const {
    const WeightsGeometry& g = plan_.geo;
    const int64_t ih0 = oh * g.stride[1] - g.pad[1], rows = row_block_src_rows(g, plan_.blk.row_block);
    uint64_t mask = 0;
    for (int64_t i = 0; i < rows; ++i)
        if (ih0 + i >= 0 && ih0 + i < g.in[1]) mask |= uint64_t(1) << i;
    return mask;
}

// WeightsRow::mask's variant of taps [a, b) of a tile of `taps`.
uint64_t tap_variant(int a, int b, int taps) {
    if (taps > kEdgeVariantMaxTaps) return 0;
    const int v = a == 0 ? b : b == taps ? taps - 1 + a : 0;
    return static_cast<uint64_t>(v) << kEdgeVariantShift;
}

void JitWeightsExecutor::build_dw_rows(std::vector<WeightsRow>& out, const std::vector<RowPos>& chunk, int64_t kd,
                                       int64_t kh0, int64_t kt, int64_t src_shift, int64_t dst_shift) const {
    const WeightsGeometry& g = plan_.geo;
    const WeightsBlocking& b = plan_.blk;
    const int taps = kt == b.m_tiles - 1 ? b.m_last : b.m;
    const int64_t kw0 = kt * b.m;
    out.clear();
    if (b.row_block > 1) {  // an entry per block of R rows: its first row's, mask bit i = src row i inside
        for (const RowPos& r : chunk) {
            const int64_t id = r.od * g.stride[0] - g.pad[0] + kd * g.dil[0];
            if (r.oh % b.row_block || id < 0 || id >= g.in[0]) continue;
            const uint64_t mask = block_src_mask(r.oh);
            if (!mask) continue;
            add_row(out, user_src_bytes(r.n, id, r.oh * g.stride[1] - g.pad[1], kw0 - g.pad[2]) - src_shift,
                    user_dst_bytes(r.n, r.od, r.oh, 0) - dst_shift, b.row_block * g.out[2], mask);
        }
        return;
    }
    for (const RowPos& r : chunk) {
        const int64_t id = r.od * g.stride[0] - g.pad[0] + kd * g.dil[0];
        const auto [ia, ib] = kernel_rows_inside(kh0, r.oh);
        if (id < 0 || id >= g.in[0] || ia >= ib) continue;
        const int64_t ih = r.oh * g.stride[1] - g.pad[1] + kh0 * g.dil[1];
        const int64_t image = plan_.pairs ? 2 * r.n : r.n;  // a pair's first image
        for (const TapRun& piece : kw_pieces_[static_cast<size_t>(kt)]) {
            const int64_t lo = std::max(piece.ow_lo, r.seg * g.segment);
            const int64_t hi = std::min(piece.ow_hi, (r.seg + 1) * g.segment);
            if (lo >= hi) continue;
            const uint64_t row_taps = ((uint64_t(1) << (piece.b - piece.a)) - 1) << piece.a;
            uint64_t mask = piece.b - piece.a < taps ? kPartialTaps | tap_variant(piece.a, piece.b, taps) : 0;
            for (int i = ia; i < ib; ++i) mask |= row_taps << (i * taps);
            const int64_t iw = lo * g.stride[2] - g.pad[2] + kw0 * g.dil[2];
            add_row(out, user_src_bytes(image, id, ih, iw) - src_shift, user_dst_bytes(image, r.od, r.oh, lo) - dst_shift,
                    hi - lo, mask);
        }
    }
}

// Tile order: kd, kernel-row block, kw tile, channel tile. A tile covers
// blk.kh kernel rows x (m taps) x (n vectors), in one call over the chunk:
// each row of the call names the (kernel row, tap) pairs its pixels read
// inside src (desc.edges). The call stores (not accumulates) on the first
// chunk: it writes the whole tile, even with no rows. Returns the tiles
// the call ran (channel runs: up to `end`).
int64_t JitWeightsExecutor::run_dw_tile(int64_t tile, int64_t end, bool accumulate, float* target,
                                        const char* src, const char* diff_dst, ThreadState& ts, Prefetch& pf) const {
    const WeightsGeometry& g = plan_.geo;
    const WeightsBlocking& b = plan_.blk;
    const int64_t blocks = g.k[1] / b.kh;
    const int64_t ct = tile % b.n_tiles;
    const int64_t kt = (tile / b.n_tiles) % b.m_tiles;
    const int64_t kh0 = (tile / (b.n_tiles * b.m_tiles)) % blocks * b.kh;
    const int64_t kd = tile / (b.n_tiles * b.m_tiles * blocks);
    const int64_t kw0 = kt * b.m, c0 = ct * b.n * b.vlen;
    const int last_n = ct == b.n_tiles - 1 || b.n_tiles == 1;
    const int64_t es = plan_.elem_bytes();
    ThreadState::DwRows& dw = ts.dw;
    if (dw.key != tile / b.n_tiles) {  // rows do not depend on the channel tile
        dw.key = tile / b.n_tiles;
        build_dw_rows(dw.rows, ts.chunk, kd, kh0, kt, ts.src_shift, ts.dst_shift);
    }
    TileCall c{src + c0 * es,
               diff_dst + c0 * es,
               target + c0 * wei_str_.o + kd * wei_str_.k[0] + kh0 * wei_str_.k[1] + kw0 * wei_str_.k[2],
               src_step_bytes(),
               dst_step_bytes(),
               b.lane_group > 1 ? wei_str_.i : wei_str_.k[2],  // lane groups: rows (kw, ic)
               wei_str_.k[1]};
    // Channel runs (WeightsPlan::dw_channel_runs): the full channel tiles
    // from this one up to `end` in one call; the last runs alone.
    c.ic_loop = plan_.dw_channel_runs();
    if (c.ic_loop) {
        c.ic_tiles = last_n ? 1 : std::max<int64_t>(1, std::min(b.n_tiles - 1 - ct, end - tile));
        c.src_tile_step = b.n * b.vlen * es;  // (diff_dst steps alike)
        c.wei_tile_step = b.n * b.vlen * wei_str_.o;
    }
    call(*kernels_[kt == b.m_tiles - 1 ? kLast : kFull][last_n][0], c, dw.rows, accumulate, pf);
    return c.ic_tiles;
}

void JitWeightsExecutor::compute_thread(int64_t tid, const WeightsThreadGrid& grid, WeightsWork& work,
                                        const char* src, const char* diff_dst, float* target,
                                        float* partials) const {
    const WeightsReduction& red = plan_.red;
    const WeightsGeometry& g = plan_.geo;
    const auto tiles = balance(plan_.blk.tiles, grid.tile_threads, tid % grid.tile_threads);
    const auto slices = balance(red.slices, grid.slice_threads, tid / grid.tile_threads);
    ThreadState ts;
    std::vector<float> row_buf;
    ts.tap_rows.resize(static_cast<size_t>(p_.k_sp()));
    if (plan_.fold_kw > 1 && !plan_.staged) {  // one edge slot per (chunk row, kd, kh), and a vector of slack
        const WeightsPlan::WEdges e = plan_.w_edges();
        ts.edges.resize(static_cast<size_t>(red.chunk_rows * g.k[0] * g.k[1] * (e.left_w + e.right_w) * p_.ic() + 16));
    }
    if (plan_.staged) {
        const int64_t row_pixels = staged_row_pixels();
        // compute_thread never nests on a thread: the stage slots are free.
        const WeightsBlocking& b = plan_.blk;
        const int64_t src_bytes = plan_.tile_major ? g.g * b.m_tiles * src_slice_bytes()
                                  : plan_.blocked  ? g.g * b.m_tiles * blocked_src_slice_bytes()
                                                   : red.chunk_rows * g.k[0] * g.k[1] * row_pixels * plan_.src_pitch;
        // (pair_dst: only chunks holding an odd minibatch's lone image stage diff_dst.)
        const int64_t dst_bytes = plan_.tile_major ? g.g * b.n_tiles * dst_slice_bytes()
                                  : plan_.blocked  ? g.g * b.n_tiles * blocked_dst_slice_bytes()
                                  : plan_.pair_dst && p_.mb % 2 == 0
                                      ? 0
                                      : red.chunk_rows * g.segment * plan_.dst_pitch;
        ts.staged.src_lease = ScratchLease(Scratch::weights_stage_src, src_bytes);
        ts.staged.dst_lease = ScratchLease(Scratch::weights_stage_dst, dst_bytes);
        ts.staged.src = ts.staged.src_lease.get();
        ts.staged.diff_dst = ts.staged.dst_lease.get();
        // Tile-major 16-bit: a chunk row is widened (or paired) here first.
        if ((plan_.tile_major || plan_.blocked) && stager_)
            row_buf.resize(static_cast<size_t>(std::max(g.segment, row_pixels) * std::max(p_.ic(), p_.oc()) + 16));
        ts.view = &ts.staged;
        ts.src_filled.resize(static_cast<size_t>(g.g * b.m_tiles));
        ts.dst_filled.resize(static_cast<size_t>(g.g * b.n_tiles));
    }
    // Windows (depthwise, NCX gemm): the user's tensors here, the kernels
    // read the thread's copies.
    const char* const user_src = src;
    const char* const user_dst = diff_dst;
    ScratchLease src_win, dst_win;
    std::array<int64_t, 2> channels{};  // depthwise: those of the tiles whose items the thread runs
    if (plan_.windows() || plan_.ncx_rows) {
        src_win = ScratchLease(Scratch::weights_src_nxc, win_src_bytes_);
        dst_win = ScratchLease(Scratch::weights_dst_nxc, win_dst_bytes_);
        src = src_win.get();
        diff_dst = dst_win.get();
    }
    Prefetch pf;  // the next chunk's memory (group_prefetch: the next group's), while this one runs
    pf.steps_per_px = plan_.pf_steps;
    pf.strided = plan_.group_prefetch;
    if (plan_.group_prefetch && tiles[1] > tiles[0]) {
        const int64_t per = plan_.lane_pairs ? 2 : 1;
        ts.first_grp = per * gemm_tile(tiles[0]).grp;
        ts.last_grp = per * gemm_tile(tiles[1] - 1).grp;
    }
    WeightsWork::Item item;
    int64_t cur_slice = -1, cur_chunk = -1;
    std::array<int64_t, 2> cur_part{};
    float* out = nullptr;
    while (work.next(static_cast<int>(tid), item)) {
        const int64_t s = item.slice, c = item.chunk;
        // Set the chunk up: the first item, another chunk's, or (depthwise
        // windows, which hold the channels of a thread's tiles) another
        // thread's tiles'.
        if (s != cur_slice || c != cur_chunk || (plan_.windows() && item.part != cur_part)) {
            cur_slice = s;
            cur_chunk = c;
            cur_part = item.part;
            if (plan_.windows()) channels = thread_channels(item.part);
            out = s == 0 ? target : partials + (s - 1) * plan_.weights_elems;
            const auto chunks = spread(red.chunks, red.slices, s);
            const int64_t q0 = c * red.chunk_rows, q1 = std::min(red.rows, q0 + red.chunk_rows);
            decode_rows(ts.chunk, q0, q1);
            if (plan_.windows())
                fill_windows(ts, chunk_window(ts.chunk), channels, channels, user_src, user_dst, src_win.get(),
                             dst_win.get());
            if (plan_.ncx_rows) {  // the windows at their places in virtual NXC tensors
                fill_gemm_windows(ts, user_src, user_dst, src_win.get(), dst_win.get());
                src = bytes_before(src_win.get(), ts.src_shift);
                diff_dst = bytes_before(dst_win.get(), ts.dst_shift);
            }
            // stage_in_kernel: the kernels fill the slices, unless a copy
            // pass stages the chunk (a lone bf16 image pairs with zeros).
            const bool copy_pass = ts.view && (!plan_.stage_in_kernel || has_lone_image(ts.chunk));
            if (plan_.stage_in_kernel) {
                std::fill(ts.src_filled.begin(), ts.src_filled.end(), copy_pass ? 1 : 0);
                std::fill(ts.dst_filled.begin(), ts.dst_filled.end(), copy_pass ? 1 : 0);
            }
            ts.dst_in_regs = plan_.pair_dst && !has_lone_image(ts.chunk);
            if (copy_pass && plan_.tile_major)
                stage_tile_major(ts.staged, ts.chunk, reinterpret_cast<const uint16_t*>(src),
                                 reinterpret_cast<const uint16_t*>(diff_dst), row_buf.data());
            else if (copy_pass)
                stage_chunk(ts.staged, ts.chunk, reinterpret_cast<const uint16_t*>(src),
                            reinterpret_cast<const uint16_t*>(diff_dst), row_buf.data(), ts.dst_in_regs);
            // The next chunk's user memory (which the stager reads next;
            // NCX gemm: not in the windows).
            const bool has_next = (c + 1 < chunks[1] || s + 1 < slices[1]) && !plan_.ncx_rows;
            pf.clear();
            if (ts.chunk_calls > 0) ts.last_chunk_calls = ts.chunk_calls;
            ts.chunk_calls = 0;
            if (has_next && plan_.stage_in_kernel) {
                // Calls on this chunk: as many as on the last (ic runs
                // merge calls), or at most one a tile.
                const int64_t calls = ts.last_chunk_calls > 0 ? ts.last_chunk_calls : tiles[1] - tiles[0];
                prefetch_first_call(pf, ts, c + 1, tiles[0], calls, (q1 - q0) * g.segment, src, diff_dst);
            } else if (plan_.group_prefetch) {
                ts.win_cur = chunk_window(ts.chunk);
                ts.has_next = has_next;
                if (has_next) {  // chunk c + 1 (the next slice's first: slices are consecutive)
                    decode_chunk(ts.next_chunk, c + 1);
                    ts.win_next = chunk_window(ts.next_chunk);
                }
                ts.pf_grp = -1;
            } else if (has_next && !plan_.windows() && plan_.pf_lines > 0) {  // (streamed passes: no walk)
                // (Windows: the transposes prefetch as they read. The
                // kernels also walking the next chunk's NCX runs, a line
                // or two per channel and image, cost 5-25 % on 56x56 and
                // larger planes and up to half on 14x14 ones.)
                prefetch_chunk(pf, c + 1, src, diff_dst);
            }
            ts.tap_built.assign(ts.tap_rows.size(), 0);
            ts.edge_used = -1;
            ts.dw.key = -1;
            std::fill(std::begin(ts.tm_built), std::end(ts.tm_built), 0);
        }
        const bool accumulate = c != item.first_chunk;
        for (int64_t t = item.tile0; t < item.tile1;) {
            if (plan_.blk.kind == WeightsKernelKind::depthwise)
                t += run_dw_tile(t, item.tile1, accumulate, out, src, diff_dst, ts, pf);
            else
                t += run_gemm_tile(t, item.tile1, accumulate, out, src, diff_dst, ts, pf);
        }
        work.finish(item);
    }
}

// The src rows chunk rows read (each row's first and last tap rows inside
// src: every tap's rows lie between), the diff_dst rows they are (row
// blocks: the whole block).
ChunkWindow chunk_window(const WeightsPlan& plan, const std::vector<RowPos>& chunk) {
    const WeightsGeometry& g = plan.geo;
    const int64_t rb = plan.blk.row_block;
    ChunkWindow w{INT64_MAX, INT64_MIN, INT64_MAX, INT64_MIN};
    for (const RowPos& r : chunk) {
        const int64_t oh_last = std::min(g.out[1] - 1, rb > 1 ? r.oh / rb * rb + rb - 1 : r.oh);
        const int64_t dst_row = (r.n * g.out[0] + r.od) * g.out[1];
        w.dst_lo = std::min(w.dst_lo, dst_row + r.oh);
        w.dst_hi = std::max(w.dst_hi, dst_row + oh_last + 1);
        const int64_t d0 = std::max<int64_t>(0, r.od * g.stride[0] - g.pad[0]);
        const int64_t d1 = std::min(g.in[0] - 1, r.od * g.stride[0] - g.pad[0] + (g.k[0] - 1) * g.dil[0]);
        const int64_t h0 = std::max<int64_t>(0, r.oh * g.stride[1] - g.pad[1]);
        const int64_t h1 = std::min(g.in[1] - 1, oh_last * g.stride[1] - g.pad[1] + (g.k[1] - 1) * g.dil[1]);
        if (d0 > d1 || h0 > h1) continue;  // every tap outside src
        w.src_lo = std::min(w.src_lo, (r.n * g.in[0] + d0) * g.in[1] + h0);
        w.src_hi = std::max(w.src_hi, (r.n * g.in[0] + d1) * g.in[1] + h1 + 1);
    }
    if (w.src_lo >= w.src_hi) w.src_lo = w.src_hi = 0;
    if (w.dst_lo >= w.dst_hi) w.dst_lo = w.dst_hi = 0;
    return w;
}

WindowPieces window_pieces(std::array<int64_t, 2> a, std::array<int64_t, 2> b) {
    WindowPieces w;
    if (a[0] >= a[1]) std::swap(a, b);  // a empty: b alone (or nothing)
    if (a[0] >= a[1]) return w;
    if (b[0] >= b[1]) {
        w.lo = a[0];
        w.hi = a[1];
        w.piece[0] = a;
        w.count = 1;
        return w;
    }
    if (b[0] < a[0]) std::swap(a, b);
    w.lo = a[0];
    w.hi = std::max(a[1], b[1]);
    if (a[1] < b[0]) {
        w.piece = {a, b};
        w.count = 2;
    } else {
        w.piece[0] = {w.lo, w.hi};
        w.count = 1;
    }
    return w;
}

WindowRows chunk_window_rows(const WeightsPlan& plan, const std::vector<RowPos>& chunk, int64_t mb,
                               std::vector<RowPos>& rows) {
    std::array<ChunkWindow, 2> w{};
    if (!plan.pairs) w[0] = chunk_window(plan, chunk);
    for (int k = 0; k < 2 && plan.pairs; ++k) {
        rows.clear();
        for (RowPos r : chunk) {
            r.n = 2 * r.n + k;
            if (r.n < mb) rows.push_back(r);
        }
        w[static_cast<size_t>(k)] = chunk_window(plan, rows);
    }
    return {window_pieces({w[0].src_lo, w[0].src_hi}, {w[1].src_lo, w[1].src_hi}),
            window_pieces({w[0].dst_lo, w[0].dst_hi}, {w[1].dst_lo, w[1].dst_hi})};
}

void JitWeightsExecutor::fill_gemm_windows(ThreadState& ts, const char* src, const char* diff_dst, char* src_win,
                                           char* dst_win) const {
    const WeightsGeometry& g = plan_.geo;
    const auto [s, d] = chunk_window_rows(plan_, ts.chunk, p_.mb, ts.pair_rows);
    const int64_t src_row = g.in[2] * src_px_, dst_row = g.out[2] * dst_px_;
    for (size_t i = 0; i < 2; ++i) {
        const auto none = std::array<int64_t, 2>{0, 0};
        const std::array<int64_t, 2> sp = int(i) < s.count ? s.piece[i] : none;
        const std::array<int64_t, 2> dp = int(i) < d.count ? d.piece[i] : none;
        if (sp[0] >= sp[1] && dp[0] >= dp[1]) continue;
        fill_windows(ts, {sp[0], sp[1], dp[0], dp[1]}, {0, p_.ic()}, {0, p_.oc()}, src, diff_dst,
                     src_win + (sp[0] - s.lo) * src_row, dst_win + (dp[0] - d.lo) * dst_row);
    }
    ts.src_shift = s.lo * src_row;
    ts.dst_shift = d.lo * dst_row;
}

// The channels [c0, c1) of a thread's tiles [t0, t1): one pass over
// consecutive channel tiles, else all (lane groups: all).
std::array<int64_t, 2> JitWeightsExecutor::thread_channels(const std::array<int64_t, 2>& tiles) const {
    const WeightsBlocking& b = plan_.blk;
    const int64_t nt = b.n_tiles, width = int64_t(b.n) * b.vlen;
    if (b.lane_group > 1 || tiles[1] - tiles[0] >= nt || tiles[0] / nt != (tiles[1] - 1) / nt)
        return {0, p_.ic()};
    return {tiles[0] % nt * width, std::min(p_.ic(), ((tiles[1] - 1) % nt + 1) * width)};
}

// Chunk window w of channels src_ch / dst_ch from the user's tensors (NCX, or NXC with
// nxc_windows) into the thread's NXC windows (pixels src_px_ / dst_px_
// bytes apart).
void JitWeightsExecutor::fill_windows(ThreadState& ts, const ChunkWindow& w, const std::array<int64_t, 2>& src_ch,
                                      const std::array<int64_t, 2>& dst_ch, const char* src, const char* diff_dst,
                                      char* src_win, char* dst_win) const {
    const WeightsGeometry& g = plan_.geo;
    const int64_t es = user_es_;
    const int e = static_cast<int>(es);
    NcxRows s{e, p_.ic(), g.in[0] * g.in[1], g.in[2], src_ch[0], src_ch[1], w.src_lo, w.src_hi};
    NcxRows d{e, p_.oc(), g.out[0] * g.out[1], g.out[2], dst_ch[0], dst_ch[1], w.dst_lo, w.dst_hi};
    s.window_px = src_px_ / es;
    d.window_px = dst_px_ / es;
    if (g.segs_per_row > 1) {  // the chunk's segments: their pixels, each in its place
        int64_t a = g.out[2], b = 0;
        for (const RowPos& r : ts.chunk) {
            a = std::min(a, r.seg * g.segment);
            b = std::max(b, seg_end(r.seg));
        }
        if (a < b) {
            d.x0 = a;
            d.x1 = b;
            const auto [first, end] = src_span(a, b, false);
            s.x0 = std::min(first, g.in[2]);
            s.x1 = std::max(s.x0, end);
            s.whole_rows = d.whole_rows = true;
            if (s.x0 == s.x1) s.lo = s.hi;  // every tap outside src
        }
    }
    if (plan_.nxc_windows) {
        nxc_rows_to_window(src, src_win, s);
        nxc_rows_to_window(diff_dst, dst_win, d);
    } else {
        ncx_rows_to_window(src, src_win, s, plan_.isa);
        ncx_rows_to_window(diff_dst, dst_win, d, plan_.isa);
    }
    ts.src_shift = w.src_lo * g.in[2] * src_px_;
    ts.dst_shift = w.dst_lo * g.out[2] * dst_px_;
}

// The user memory of chunk `chunk`, per image (two for a bf16 pair): its
// diff_dst pixels are contiguous (rows in order); its src is a pixel range
// (merged rows), the input rows the taps read (1D / 2D: a stride skips
// rows), or every input row from the first row's top tap to the last row's
// bottom tap (3D).
void JitWeightsExecutor::prefetch_chunk(Prefetch& pf, int64_t chunk, const char* src, const char* diff_dst) const {
    const WeightsGeometry& g = plan_.geo;
    const int64_t q0 = chunk * plan_.red.chunk_rows, q1 = std::min(plan_.red.rows, q0 + plan_.red.chunk_rows);
    const int64_t es = static_cast<int64_t>(dtype_size(p_.dt)), plane = g.out[0] * g.out[1];
    // Image of row q's (pair) index n, k-th of the pair.
    auto image = [&](int64_t q, int k) {
        const int64_t n = q / g.segs_per_row / plane;
        return plan_.pairs ? 2 * n + k : n;
    };
    auto dst_pixel = [&](int64_t q, int k) {  // first pixel of row q in image k
        const int64_t r = q / g.segs_per_row, seg = q % g.segs_per_row;
        return (image(q, k) * plane + r % plane) * g.out[2] + seg * g.segment;
    };
    auto src_row = [&](int64_t q, int k, bool last) {  // index of an input (n, d, h) row
        const int64_t r = q / g.segs_per_row, oh = r % g.out[1], od = (r / g.out[1]) % g.out[0];
        auto in = [&](int a, int64_t o) {
            const int64_t i = o * g.stride[a] - g.pad[a] + (last ? (g.k[a] - 1) * g.dil[a] : 0);
            return std::clamp<int64_t>(i, 0, g.in[a] - 1);
        };
        return (image(q, k) * g.in[0] + in(0, od)) * g.in[1] + in(1, oh);
    };
    const int64_t last_seg = (q1 - 1) % g.segs_per_row;
    const int64_t last_len = std::min(g.segment, g.out[2] - last_seg * g.segment);
    const int images = plan_.pairs ? 2 : 1;
    pf.lines = plan_.pf_lines;
    for (int k = 0; k < images; ++k)
        if (image(q1 - 1, k) < p_.mb)
            pf.add(diff_dst + dst_pixel(q0, k) * p_.oc() * es, diff_dst + (dst_pixel(q1 - 1, k) + last_len) * p_.oc() * es);
    for (int k = 0; k < images; ++k) {
        if (image(q1 - 1, k) >= p_.mb) continue;
        const int64_t src_es = plan_.src_widened() ? 4 : es;  // (a padded src widened to f32)
        const int64_t row_bytes = g.in[2] * p_.ic() * src_es;
        if (plan_.staged_segments()) {  // each segment's window of the input rows its taps read
            for (int64_t q = q0; q < q1; ++q) {
                const RowPos r = row_at(q);
                const int64_t iw0 = std::max<int64_t>(0, src_row_first(r.seg));  // (folded: pads not read)
                const int64_t iw1 = std::min(g.in[2], src_row_first(r.seg) + src_row_width(r.seg));
                for_each_src_row(r, [&](int64_t id, int64_t ih) {
                    const char* row = src + ((image(q, k) * g.in[0] + id) * g.in[1] + ih) * row_bytes;
                    pf.add(row + iw0 * p_.ic() * es, row + iw1 * p_.ic() * es);
                });
            }
        } else if (g.merged) {  // rows are pixel ranges
            pf.add(src + dst_pixel(q0, k) * p_.ic() * es, src + (dst_pixel(q1 - 1, k) + last_len) * p_.ic() * es);
        } else if (g.k[0] > 1 || g.stride[1] <= (g.k[1] - 1) * g.dil[1] + 1) {
            // Every input row from the first tap's to the last's: 3D, and
            // kernels that span their H stride (which read nearly all of
            // them; one range costs no per-row walk of the chunk).
            pf.add(src + src_row(q0, k, false) * row_bytes, src + (src_row(q1 - 1, k, true) + 1) * row_bytes);
        } else {  // only the input rows the taps read: strided layers skip the others
            int64_t last = -1;  // rows only grow here (one kd): skip the ones already added
            for (int64_t q = q0; q < q1; ++q)
                for_each_src_row(row_at(q), [&](int64_t id, int64_t ih) {
                    const int64_t row = (image(q, k) * g.in[0] + id) * g.in[1] + ih;
                    if (row <= last) return;
                    last = row;
                    pf.add(src + row * row_bytes, src + (row + 1) * row_bytes);
                });
        }
    }
}

// stage_in_kernel: what the thread's first call on chunk `chunk` reads from
// the user's tensors, per pixel: the first two lines of its ic tile (later
// copying calls prefetch their own src, see the gemm kernel) and its oc
// tile's n vectors, as strided walks of one line a pixel. Handed out over
// the last of the `calls` calls (of `call_pixels` pixels) the thread runs
// on the current chunk, so it is still in L2 when the next one starts.
void JitWeightsExecutor::prefetch_first_call(Prefetch& pf, ThreadState& ts, int64_t chunk, int64_t first_tile,
                                             int64_t calls, int64_t call_pixels, const char* src,
                                             const char* diff_dst) const {
    const WeightsGeometry& g = plan_.geo;
    const WeightsBlocking& b = plan_.blk;
    decode_chunk(ts.next_chunk, chunk);
    ts.next_rows.clear();
    const auto ow = valid_ow(g, 0);
    build_rows(ts.next_rows, ts.next_chunk, nullptr, 0, 0, 0, ow[0], ow[1], kCopySrc | kCopyDst);
    const GemmTile t = gemm_tile(first_tile);
    const int64_t es = user_elem_bytes();
    const char* tile_src = src + (t.grp * g.icg + t.it * b.m) * es;
    const char* tile_dst = diff_dst + (t.grp * g.ocg + t.ot * b.n * b.vlen) * es;
    const int64_t dst_lines = (b.n * b.vlen * es + 63) / 64;
    const int lines = plan_.pf_lines;  // the kernels prefetch `lines` consecutive lines a step
    pf.lines = lines;
    for (int image = 0; image < (plan_.pairs ? 2 : 1); ++image) {  // a bf16 pair's second image
        for (int line = 0; line < 2; line += lines)
            for (const WeightsRow& r : ts.next_rows)
                pf.add_strided(tile_src + image * src_pair_bytes() + r.src_offset + 64 * line, user_src_step(),
                               r.pixels);
        for (int64_t line = 0; line < dst_lines; line += lines)
            for (const WeightsRow& r : ts.next_rows)
                pf.add_strided(tile_dst + image * dst_pair_bytes() + r.dst_offset + 64 * line, user_dst_step(),
                               r.pixels);
    }
    pf.skip = std::max<int64_t>(0, calls - pf.calls_needed(call_pixels) - 1);
}

// Phases 3 to 5: fixed-order sum of the partials, the permutation, the
// rounding to a 16-bit user type.
void JitWeightsExecutor::reduce_and_store(float* target, const float* partials, void* user,
                                          int threads) const {
    const int64_t elems = plan_.weights_elems, slices = plan_.red.slices;
    constexpr int64_t block = 4096;  // a multiple of every vector length
    const bool round_here = plan_.rounded() && plan_.direct_weights;
    if (slices > 1 || round_here) {
        parallel_static(threads, (elems + block - 1) / block, [&](int64_t bi) {
            const int64_t e0 = bi * block, e1 = std::min(elems, e0 + block);
            // Block by block, each element adds its slices in order.
            if (slices > 1) sum_slices(plan_.isa, target + e0, partials + e0, elems, slices - 1, e1 - e0);
            if (round_here)
                round_f32_array(plan_.isa, plan_.dt, target + e0, static_cast<char*>(user) + e0 * 2, e1 - e0);
        });
    }
    if (plan_.direct_weights) return;
    // Permute from the XIO target, into f32 scratch first for 16-bit types.
    const ScratchLease lease(Scratch::weights_permuted, plan_.rounded() ? elems * 4 : 0);
    float* permuted = lease.floats();
    float* to_base = plan_.rounded() ? permuted : static_cast<float*>(user);
    // Tiles of kPermuteTile input x output channels with all their taps:
    // read as rows of output channels, written along the user's inner
    // axes (OIX: a run of (input channel, tap) per output channel), in L1.
    // An element at a time along the output channels wrote each to its own
    // line (ResNet-50 512 -> 2048 bf16 in OIX: the permute 27 % of the call).
    const WeightStrides& u = p_.wei_str;
    const int64_t taps = p_.k_sp();
    std::vector<int64_t> tap_from(static_cast<size_t>(taps)), tap_to(static_cast<size_t>(taps));
    for (int64_t t = 0; t < taps; ++t) {
        const int64_t kw = t % p_.k[2], kh = (t / p_.k[2]) % p_.k[1], kd = t / (p_.k[2] * p_.k[1]);
        tap_from[static_cast<size_t>(t)] = t * wei_str_.k[2];
        tap_to[static_cast<size_t>(t)] = kd * u.k[0] + kh * u.k[1] + kw * u.k[2];
    }
    const int64_t tile = taps == 1 ? 2 * kPermuteTile : kPermuteTile;
    const int64_t it = div_up(p_.icg, tile), ot = div_up(p_.oc(), tile);
    const bool o_outer = u.o >= u.i;  // the user's outer channel axis outermost
    // Taps innermost and contiguous in the user's layout (OIX; ConvTranspose's
    // IOX, and its OIX with input channels outermost to the convolution):
    // register transposes.
    bool tap_runs = taps > 1;
    for (int64_t t = 0; t < taps; ++t) tap_runs = tap_runs && tap_to[static_cast<size_t>(t)] == t;
    // Input channels contiguous, taps (if more than one) outside the
    // channels: a plain transpose per tap, 16 x 16 register tiles on
    // AVX-512. One tap: 2048 -> 512 at mb 4 had spent 24 % of the call in
    // the element-by-element permute (1.15-1.18x); ConvTranspose's default
    // XIO (XOI to the convolution here), whose element-by-element stores
    // landed a whole tap plane apart: DCGAN's 512 -> 256 4x4 up-convolution
    // at mb 32, 8 MB of weights, 38 % of the call.
    const bool tap_planes = !tap_runs && o_outer && u.i == 1;
    parallel_static(threads, it * ot, [&](int64_t ti) {
        const int64_t i0 = ti / ot * tile, o0 = ti % ot * tile;
        const int64_t i1 = std::min(p_.icg, i0 + tile), o1 = std::min(p_.oc(), o0 + tile);
        if (tap_runs && plan_.isa >= Isa::avx512_core) {
            permute_tap_runs(target + o0 + i0 * wei_str_.i, wei_str_.i, tap_from.data(), taps,
                             to_base + o0 * u.o + i0 * u.i, u.o, u.i, o1 - o0, i1 - i0);
        } else if (tap_runs) {  // AVX2: the tile's two halves of 8 output channels
            for (int64_t h = o0; h < o1; h += 8)
                permute_tap_runs_avx2(target + h + i0 * wei_str_.i, wei_str_.i, tap_from.data(), taps,
                                      to_base + h * u.o + i0 * u.i, u.o, u.i, std::min<int64_t>(8, o1 - h), i1 - i0);
        } else if (tap_planes) {
            for (int64_t t = 0; t < taps; ++t)
                transpose_block(target + tap_from[static_cast<size_t>(t)] + o0 + i0 * wei_str_.i, wei_str_.i,
                                to_base + tap_to[static_cast<size_t>(t)] + o0 * u.o + i0, u.o, 4, i1 - i0, o1 - o0,
                                plan_.isa);
        }
        if (tap_runs || tap_planes) return;
        const int64_t a1 = o_outer ? o1 : i1, b0 = o_outer ? i0 : o0, b1 = o_outer ? i1 : o1;
        const int64_t sa = o_outer ? u.o : u.i, sb = o_outer ? u.i : u.o;  // user strides of a, b
        const int64_t fa = o_outer ? 1 : wei_str_.i, fb = o_outer ? wei_str_.i : 1;  // target strides
        for (int64_t a = o_outer ? o0 : i0; a < a1; ++a) {
            float* to = to_base + a * sa;
            const float* from = target + a * fa;
            if (taps == 1) {
                for (int64_t b = b0; b < b1; ++b) to[b * sb + tap_to[0]] = from[b * fb + tap_from[0]];
                continue;
            }
            for (int64_t b = b0; b < b1; ++b)
                for (int64_t t = 0; t < taps; ++t)
                    to[b * sb + tap_to[static_cast<size_t>(t)]] = from[b * fb + tap_from[static_cast<size_t>(t)]];
        }
    });
    if (plan_.rounded())
        parallel_static(threads, (elems + block - 1) / block, [&](int64_t bi) {
            const int64_t e0 = bi * block, e1 = std::min(elems, e0 + block);
            round_f32_array(plan_.isa, plan_.dt, permuted + e0, static_cast<char*>(user) + e0 * 2, e1 - e0);
        });
}

void JitWeightsExecutor::pad_src(const char* src, char* to, int threads) const {
    const int64_t es = static_cast<int64_t>(dtype_size(p_.dt)), px = p_.ic() * es;
    const std::array<int64_t, 3>& in = user_.in;
    const std::array<int64_t, 3>& pb = user_.pad_begin;
    const int64_t rows = p_.mb * p_.in[0] * p_.in[1], row_bytes = p_.in[2] * src_px_;
    parallel_static(threads, rows, [&](int64_t r) {
        char* out = to + r * row_bytes;
        const int64_t ih = r % p_.in[1] - pb[1], id = (r / p_.in[1]) % p_.in[0] - pb[0], n = r / (p_.in[1] * p_.in[0]);
        const bool inside = id >= 0 && id < in[0] && ih >= 0 && ih < in[1];
        const char* from = inside ? src + ((n * in[0] + id) * in[1] + ih) * in[2] * px : nullptr;
        if (!plan_.src_widened()) return copy_row_run(from, -pb[2], p_.in[2], in[2], px, out);
        if (!from) return void(std::memset(out, 0, static_cast<size_t>(row_bytes)));
        copy_padded_run(-pb[2], p_.in[2], in[2], src_px_, out, [&](int64_t first, int64_t count, char* at) {
            stager_->run(reinterpret_cast<const uint16_t*>(from + first * px), nullptr, at, count * p_.ic());
        });
    });
}

void JitWeightsExecutor::run(const void* input0, const void* input1, void* output) const {
    const int nthreads = threads();
    const WeightsThreadGrid grid = nthreads == plan_.grid.nthr
                                           ? plan_.grid
                                           : plan_thread_grid(plan_.blk.tiles, plan_.red.slices, nthreads);
    const char* src = static_cast<const char*>(p_.swap_inputs ? input1 : input0);
    const char* diff_dst = static_cast<const char*>(p_.swap_inputs ? input0 : input1);
    const int64_t es = static_cast<int64_t>(dtype_size(p_.dt));
    ScratchLease src_nxc, dst_nxc, padded, target_lease, partials_lease;
    if (plan_.transpose_inputs && !plan_.ncx_windows && !plan_.ncx_rows) {
        src_nxc = ScratchLease(Scratch::weights_src_nxc, p_.mb * p_.ic() * user_.in_sp() * es);
        dst_nxc = ScratchLease(Scratch::weights_dst_nxc, p_.mb * p_.oc() * p_.out_sp() * es);
        // NCX (n, c, sp) -> dense NXC (n, sp, c)
        transpose_images(src, src_nxc.get(), static_cast<int>(es), p_.mb, p_.ic(), user_.in_sp(), nthreads,
                         plan_.isa);
        transpose_images(diff_dst, dst_nxc.get(), static_cast<int>(es), p_.mb, p_.oc(), p_.out_sp(), nthreads,
                         plan_.isa);
        src = src_nxc.get();
        diff_dst = dst_nxc.get();
    }
    if (plan_.prepad) {  // (16-bit folded taps: widened to f32)
        padded = ScratchLease(Scratch::weights_src_pad, p_.mb * p_.in_sp() * src_px_);
        pad_src(src, padded.get(), nthreads);
        src = padded.get();
    }
    // The kernels' f32 target: the user's buffer when it is f32 XIO-like,
    // else scratch.
    const int64_t wbytes = plan_.weights_elems * 4;
    float* target = static_cast<float*>(output);  // (store_rounded: the user's 16-bit elements)
    if (!plan_.direct_weights || (plan_.rounded() && !plan_.store_rounded)) {
        target_lease = ScratchLease(Scratch::weights_target, wbytes);
        target = target_lease.floats();
    }
    if (plan_.red.slices > 1) partials_lease = ScratchLease(Scratch::weights_partials, (plan_.red.slices - 1) * wbytes);
    float* partials = partials_lease.floats();
    // Gemm calls run consecutive ic tiles: units of at least 4 tiles there.
    WeightsWork work(plan_.red, grid, plan_.blk.tiles, plan_.blk.kind == WeightsKernelKind::depthwise ? 1 : 4);
    parallel_static(grid.nthr, grid.nthr,
                    [&](int64_t tid) { compute_thread(tid, grid, work, src, diff_dst, target, partials); });
    if (!plan_.store_rounded) reduce_and_store(target, partials, output, nthreads);
}

// NCX windows: the largest chunk's rows. Chunks start every chunk_rows
// rows, so their windows repeat after lcm(chunk_rows, rows an image) rows
// (a truncated last chunk reads a subset of a full one's rows): one period.
void size_windows(WeightsPlan* plan, int64_t mb) {
    const WeightsGeometry& g = plan->geo;
    const WeightsReduction& red = plan->red;
    const int64_t image = g.out[0] * g.out[1] * g.segs_per_row;
    const int64_t period = red.chunk_rows / std::gcd(red.chunk_rows, image) * image;
    std::vector<RowPos> chunk, rows;
    for (int64_t q0 = 0; q0 < std::min(red.rows, period); q0 += red.chunk_rows) {
        decode_rows(g, chunk, q0, std::min(red.rows, q0 + red.chunk_rows));
        const auto [s, d] = chunk_window_rows(*plan, chunk, mb, rows);
        plan->window_src_rows = std::max(plan->window_src_rows, s.hi - s.lo);
        plan->window_dst_rows = std::max(plan->window_dst_rows, d.hi - d.lo);
    }
}

}  // namespace

std::unique_ptr<Executor> make_jit_weights_executor(const Problem& p, Isa isa, std::string* why) {
    if (isa < Isa::avx2) {
        *why = "weight gradient: needs avx2";
        return nullptr;
    }
    if (auto dot = make_jit_weights_dot_executor(p, isa)) return dot;
    if (auto dw = make_jit_dw_rows_executor(p, isa)) return dw;
    const int threads = op_threads(p);
    WeightsPlan plan;
    find_or_make_plan(weights_plan_cache(), "weights", p, isa, threads, &plan, [&](WeightsPlan* made) {
        *made = plan_weights(p, isa, threads);
        if (made->windows() || made->ncx_rows) size_windows(made, p.mb);
        return true;
    });
    return std::make_unique<JitWeightsExecutor>(p, plan);
}

}  // namespace convgrad::detail
