// JIT executor for the data gradient (ConvolutionBackwardData).
//
// execute: pack W (per call, into scratch) -> threads over the plan's
// items. Each thread owns whole diff_src elements, so there is no
// reduction between threads. NCX: each item of a depthwise or direct plan
// (plan.ncx_windows) moves its own rows and channels through per-thread
// NXC windows (open_windows / close_windows); the col path transposes an
// image of diff_dst at a time into per-thread scratch, and its diff_src
// rows back from another; plans of several images a row transpose the
// whole tensors around the threads (scratch.whole_nxc).
//
// Activations keep the problem's element type (f32, bf16, f16) end to end;
// pointers into them are bytes. Sums are f32 until the kernel's final store
// rounds them; between oc chunks a 16-bit output keeps them in a per-thread
// f32 row, and the col path adds into f32 image rows converted at the end.
#include <tbb/task_arena.h>

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <sstream>
#include <tuple>
#include <type_traits>
#include <vector>

#include "jit/bwd_data_cvt.hpp"
#include "jit/bwd_data_kernel.hpp"
#include "ops/executor.hpp"
#include "ops/numeric.hpp"
#include "ops/parallel.hpp"
#include "ops/plan_cache.hpp"
#include "ops/plan_data.hpp"
#include "ops/scratch.hpp"
#include "ops/transpose.hpp"

namespace convgrad::detail {
namespace {

// n zero bytes at p; with `nt` as streaming stores where p and n allow
// (whole aligned lines), as the plan's streaming kernels store.
__attribute__((target("avx512f"))) void stream_zeros_avx512(char* p, int64_t n) {
    for (int64_t i = 0; i < n; i += 64) _mm512_stream_si512(reinterpret_cast<__m512i*>(p + i), _mm512_setzero_si512());
}
__attribute__((target("avx2"))) void stream_zeros_avx2(char* p, int64_t n) {
    for (int64_t i = 0; i < n; i += 32) _mm256_stream_si256(reinterpret_cast<__m256i*>(p + i), _mm256_setzero_si256());
}
// n bytes from `from` to `to`: plain up to to's first line boundary and
// after its last one, streaming stores between.
__attribute__((target("avx512f"))) void stream_copy_avx512(char* to, const char* from, int64_t n) {
    const int64_t head = std::min<int64_t>(n, (64 - reinterpret_cast<uintptr_t>(to) % 64) % 64);
    std::memcpy(to, from, static_cast<size_t>(head));
    int64_t i = head;
    for (; i + 64 <= n; i += 64)
        _mm512_stream_si512(reinterpret_cast<__m512i*>(to + i), _mm512_loadu_si512(from + i));
    std::memcpy(to + i, from + i, static_cast<size_t>(n - i));
}
void zero_bytes(char* p, int64_t n, bool nt, Isa isa) {
    if (nt && reinterpret_cast<uintptr_t>(p) % 64 == 0 && n % 64 == 0) {
        if (isa >= Isa::avx512_core)
            stream_zeros_avx512(p, n);
        else
            stream_zeros_avx2(p, n);
        return;
    }
    std::memset(p, 0, static_cast<size_t>(n));
}

// Dense NXC element strides in a (D, H, W) geometry with c channels.
struct NxcStrides {
    int64_t n, d, h, w;
};
NxcStrides nxc_strides(const std::array<int64_t, 3>& sp, int64_t c) {
    return {sp[0] * sp[1] * sp[2] * c, sp[1] * sp[2] * c, sp[2] * c, c};
}

// A (kd, kh) tap valid for one diff_src row, with its diff_dst row.
struct RowTap {
    int64_t tap_dh;  // kd * KH + kh
    const char* dd_row;
};

// Appends a row tap field by field: a braced temporary was built on the
// stack by two 8-byte stores and copied by one 16-byte load, which waits
// for them (no store forwarding); perf put that load first among the
// executor's instructions in MobileNetV2 b7's data gradient (a call a
// 14-pixel row).
void add_row_tap(std::vector<RowTap>& rts, int64_t tap_dh, const char* dd_row) {
    RowTap& rt = rts.emplace_back();
    rt.tap_dh = tap_dh;
    rt.dd_row = dd_row;
}

// `pixels` pixels of `elems` elements (es bytes each) at src, src_pitch
// elements apart, to `to`, pixel_bytes apart there (plan.dd_pitch): one
// copy when both are dense, else pixel by pixel (the gaps stay as they
// are). `widen` (if any) converts to f32 on the way.
void copy_pixels(const char* src, int64_t es, int64_t pixels, int64_t elems, int64_t src_pitch, char* to,
                 int64_t pixel_bytes, const ArrayConverter* widen) {
    const int64_t to_es = widen ? 4 : es;
    const bool dense = pixel_bytes == elems * to_es && src_pitch == elems;
    const int64_t runs = dense ? 1 : pixels, run_elems = pixels * elems / runs;
    for (int64_t r = 0; r < runs; ++r) {
        const char* s = src + r * src_pitch * es;
        if (widen)
            (*widen)(s, to + r * pixel_bytes, run_elems);
        else
            std::memcpy(to + r * pixel_bytes, s, static_cast<size_t>(run_elems * es));
    }
}

// Per-thread copies of diff_dst rows with zero pixels on both W sides
// (widened to f32 for widen_rows plans), the least recently used replaced.
// One item needs at most KD·KH rows at once, all fetched after any other, so
// with more slots than that a row is never replaced while in use. The pads
// are zeroed once: copies only ever write the middle of a slot.
class PaddedRows {
public:
    // window_rows > 0 (NCX windows): a slot per row of the item's window,
    // keys from forget()'s first_key on (a lookup in place of a search
    // over the group's rows and halo: 3D groups of 80 rows had 248 slots).
    void init(const DataPlan& plan, const Problem& p, int64_t window_rows = 0) {
        dt_ = plan.widen_rows ? p.dt : data_type::f32;
        if (plan.widen_rows) widen_ = ArrayConverter(plan.isa, p.dt, data_type::f32);
        row_bytes_ = plan.scratch.row_bytes;
        pixel_bytes_ = plan.dd_pitch;
        left_bytes_ = plan.pad_left * pixel_bytes_;
        pixels_ = plan.geo.out[2];
        pixel_elems_ = p.oc();
        chan0_ = 0;
        chan1_ = p.oc();
        direct_ = window_rows > 0;
        const int64_t slots = direct_ ? window_rows : plan.scratch.row_slots;
        keys_.assign(static_cast<size_t>(slots), -1);
        used_.assign(keys_.size(), 0);
        buf_ = ScratchLease(Scratch::data_rows, row_bytes_ * slots);
        std::memset(buf_.get(), 0, static_cast<size_t>(row_bytes_ * slots));
    }
    // Drops every cached row (their source changed); window rows from first_key.
    // NCX windows: the item's channels [c0, c1) are all a copy takes.
    void forget(int64_t first_key, int64_t c0, int64_t c1) {
        std::fill(keys_.begin(), keys_.end(), -1);
        first_key_ = first_key;
        chan0_ = c0;
        chan1_ = c1;
    }
    // Pixel ow = 0 of diff_dst row `key` (elements of dtype_size bytes at src).
    const char* get(int64_t key, const char* src, int es) {
        if (direct_) {
            const size_t i = static_cast<size_t>(key - first_key_);
            char* row = buf_.get() + int64_t(i) * row_bytes_ + left_bytes_;
            if (keys_[i] != key) {
                copy_channels(src, es, pixels_, row);
                keys_[i] = key;
            }
            return row;
        }
        char* slot = nullptr;
        if (find(key, &slot)) return slot + left_bytes_;
        copy_channels(src, es, pixels_, slot + left_bytes_);
        // Rows are fetched in order, and a row is short next to DRAM
        // latency: start the next one's lines on their way to L2 now.
        prefetch_next_row(src, pixels_ * pixel_elems_ * es, es);
        return slot + left_bytes_;
    }
    // Segments (DataPlan::segments): pixels [w0, w1) of diff_dst row `key`
    // from the slot's start, zeros outside the row's [0, OW) (first: the
    // row's pixel max(w0, 0)). No prefetch of the next row's window, unlike
    // whole rows: a window is 256 KB of lines issued at once, and without
    // them the copies ran 1.08-1.31x faster on causal depthwise layers,
    // 1.00-1.05x on the other long_1d layers (AMD Zen 5, 2 threads).
    const char* window(int64_t key, const char* first, int es, int64_t w0, int64_t w1) {
        char* slot = nullptr;
        if (find(key, &slot)) return slot;
        const int64_t x0 = std::clamp<int64_t>(w0, 0, pixels_), x1 = std::clamp<int64_t>(w1, x0, pixels_);
        std::memset(slot, 0, static_cast<size_t>((x0 - w0) * pixel_bytes_));
        copy_channels(first, es, x1 - x0, slot + (x0 - w0) * pixel_bytes_);
        std::memset(slot + (x1 - w0) * pixel_bytes_, 0, static_cast<size_t>((w1 - x1) * pixel_bytes_));
        return slot;
    }

private:
    // The slot of `key`: true when it holds the row; else the least
    // recently used one, now `key`'s (*slot its start).
    bool find(int64_t key, char** slot) {
        size_t lru = 0;
        for (size_t i = 0; i < keys_.size(); ++i) {
            if (keys_[i] == key) {
                used_[i] = ++clock_;
                *slot = buf_.get() + int64_t(i) * row_bytes_;
                return true;
            }
            if (used_[i] < used_[lru]) lru = i;
        }
        keys_[lru] = key;
        used_[lru] = ++clock_;
        *slot = buf_.get() + int64_t(lru) * row_bytes_;
        return false;
    }
    const ArrayConverter* converter() const { return dt_ == data_type::f32 ? nullptr : &widen_; }
    // Channels [chan0_, chan1_) of `pixels` pixels at src (pixel 0 of a
    // run, es-byte elements) to `to`.
    void copy_channels(const char* src, int es, int64_t pixels, char* to) const {
        const int64_t to_es = converter() ? 4 : es;
        copy_pixels(src + chan0_ * es, es, pixels, chan1_ - chan0_, pixel_elems_, to + chan0_ * to_es, pixel_bytes_,
                    converter());
    }
    // `bytes` from src one diff_dst row (of es-byte elements) further on, towards L2.
    void prefetch_next_row(const char* src, int64_t bytes, int es) const {
        const char* next = src + pixels_ * pixel_elems_ * es;
        for (int64_t off = 0; off < bytes; off += 64) _mm_prefetch(next + off, _MM_HINT_T1);
    }

    data_type dt_ = data_type::f32;  // f32: copy bytes as they are; else widen from dt_
    ArrayConverter widen_;
    int64_t row_bytes_ = 0, pixel_bytes_ = 0, left_bytes_ = 0, pixels_ = 0, pixel_elems_ = 0;
    int64_t chan0_ = 0, chan1_ = 0;  // the channels copies take
    std::vector<int64_t> keys_, used_;
    int64_t clock_ = 0;
    bool direct_ = false;  // a slot per window row
    int64_t first_key_ = 0;
    ScratchLease buf_;
};

// NCX windows: an item's diff_dst rows [dd_lo, dd_hi) and diff_src rows
// [dst_lo, dst_hi) (flattened (n, d, h) rows of the plan's geometry), and
// the channels it reads of diff_dst [dd_c0, dd_c1) and writes of diff_src
// [dst_c0, dst_c1).
struct ItemWindow {
    int64_t dd_lo = 0, dd_hi = 0, dst_lo = 0, dst_hi = 0;
    int64_t dd_c0 = 0, dd_c1 = 0, dst_c0 = 0, dst_c1 = 0;
    // Segments: the pixels [x0, x1) of those rows (diff_dst: the window
    // inside the row); else x1 = 0, whole rows.
    int64_t dd_x0 = 0, dd_x1 = 0, dst_x0 = 0, dst_x1 = 0;
};

// Per-thread state: row taps and entries of the current call, padded rows,
// the f32 partial sums of a row between oc chunks, the widen scratch.
struct ThreadCtx {
    bool nt = false;  // the non-temporal kernels (diff_src is aligned for them)
    ScratchLease slab;  // row blocks: the current plane's padded rows
    int64_t slab_plane = -1;
    std::vector<RowTap> row_taps;
    int64_t row_taps_row = -1;  // the diff_src row row_taps belong to
    std::vector<DataEntry> entries;
    PaddedRows rows;
    ScratchLease acc, cvt;
    // NCX windows (plan.ncx_windows): the item's diff_dst and diff_src
    // rows in NXC, and the (n, id, ih) rows their first rows are.
    // dd_held: the window diff_dst holds (the next item of a row group may
    // read the same rows and channels: dense layers' channel blocks).
    ScratchLease dd_win, dst_win;
    ScratchLease rows_out;  // stream_rows: the item's diff_src rows
    ItemWindow dd_held{0, -1};
    int64_t dd_row0 = 0, dst_row0 = 0;
    // Where the rows the kernels read and write lie: elements from one row
    // to the next, and the pixel a row starts with (NCX windows of a
    // segment: its pixels; else whole rows of the tensor from pixel 0).
    int64_t dd_row_elems = 0, dst_row_elems = 0, dd_px0 = 0, dst_px0 = 0;
    int64_t dd_c0 = 0, dd_c1 = 0;  // the diff_dst channels padded copies take (windows: the item's)
};

// f(kd * KH + kh, diff_dst row) for each (kd, kh) row of diff_src row
// `row` (an (n, id, ih) row of g) that reads a diff_dst row, in that order.
template <typename F>
void for_each_tap_row(const DataGeometry& g, int64_t row, F&& f) {
    const int64_t n = row / (g.in[0] * g.in[1]), id = row / g.in[1] % g.in[0], ih = row % g.in[1];
    for (int64_t kd = 0; kd < g.k[0]; ++kd) {
        const int64_t td = id + g.pad[0] - kd * g.dil[0];
        if (td < 0 || td % g.stride[0] || td / g.stride[0] >= g.out[0]) continue;
        for (int64_t kh = 0; kh < g.k[1]; ++kh) {
            const int64_t th = ih + g.pad[1] - kh * g.dil[1];
            if (th < 0 || th % g.stride[1] || th / g.stride[1] >= g.out[1]) continue;
            f(kd * g.k[1] + kh, (n * g.out[0] + td / g.stride[0]) * g.out[1] + th / g.stride[1]);
        }
    }
}

// NCX windows: the rows of an item of diff_src rows [r0, r1): the diff_dst
// rows its taps read (row blocks: build_slab's plane), and [r0, r1).
ItemWindow item_rows(const DataPlan& pl, int64_t r0, int64_t r1) {
    const DataGeometry& g = pl.geo;
    ItemWindow w{INT64_MAX, INT64_MIN, r0, r1};
    if (pl.row_blocks) {
        w.dd_lo = r0 / g.in[1] * g.out[1];
        w.dd_hi = w.dd_lo + g.out[1];
        return w;
    }
    for (int64_t row = r0; row < r1; ++row)
        for_each_tap_row(g, row, [&](int64_t, int64_t dd_row) {
            w.dd_lo = std::min(w.dd_lo, dd_row);
            w.dd_hi = std::max(w.dd_hi, dd_row + 1);
        });
    if (w.dd_lo >= w.dd_hi) w.dd_lo = w.dd_hi = 0;
    return w;
}

// Appends a kernel entry field by field. A braced temporary is built on the
// stack with two 8-byte stores and copied in with one 16-byte load, which
// cannot be forwarded from them and waits until they reach the cache: on
// AMD Zen 4 that stall was a quarter of a strided 16-channel-group layer's
// time (the entries are rebuilt for every kernel call).
void add_entry(std::vector<DataEntry>& entries, const void* dd, const void* w) {
    DataEntry& e = entries.emplace_back();
    e.dd = dd;
    e.w = w;
}

// A diff_src row that one diff_dst row reaches through taps (kd, kh).
struct ColTarget {
    int64_t tap_dh;  // kd * KH + kh
    float* row;      // diff_src row (NXC), channel 0
};

// One col2im run: d[i] += s[i], i < n, with d = rows[target] + d_off (the
// target's diff_src row) and s = col + s_off (the column buffer).
struct ColRun {
    int64_t target;
    int64_t d_off;
    int64_t s_off;
    int64_t n;
};

// A chunk's run list, kept while the next diff_dst row has the same
// pattern: the same chunk (ow0, px), group and target taps. The rows of a
// plane's interior reach the same (kd, kh) taps, so their list is built
// once per (group, chunk of the row) (building it per row was 10 % of a
// bf16 first layer).
struct ColRuns {
    std::vector<ColRun> list;
    size_t count = 0;
    std::vector<int64_t> key;  // ow0, px, grp, then each target's tap_dh
    std::vector<float*> rows;  // the current targets' rows
};

// The runs in order, elementwise (the same bits whatever the vector width).
// The executor only runs on CPUs with the plan's ISA, so these are safe to
// call. Runs are short (ICg = 16 for a group of 16, KW·ICg = 21 for a first
// layer): AVX-512 ends each with one masked vector, and the loop over a
// whole list keeps the per-run cost to a few instructions (a call per run
// cost about as much as the FMAs of a 16-channel group's column).
__attribute__((target("avx512f"))) void add_runs_avx512(const ColRun* runs, size_t count, float* const* rows,
                                                        const float* col) {
    for (size_t r = 0; r < count; ++r) {
        float* d = rows[runs[r].target] + runs[r].d_off;
        const float* s = col + runs[r].s_off;
        const int64_t n = runs[r].n;
        int64_t i = 0;
        for (; i + 16 <= n; i += 16)
            _mm512_storeu_ps(d + i, _mm512_add_ps(_mm512_loadu_ps(d + i), _mm512_loadu_ps(s + i)));
        if (i == n) continue;
        const __mmask16 k = static_cast<__mmask16>((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(d + i, k,
                              _mm512_add_ps(_mm512_maskz_loadu_ps(k, d + i), _mm512_maskz_loadu_ps(k, s + i)));
    }
}
__attribute__((target("avx2"))) void add_runs_avx2(const ColRun* runs, size_t count, float* const* rows,
                                                   const float* col) {
    for (size_t r = 0; r < count; ++r) {
        float* d = rows[runs[r].target] + runs[r].d_off;
        const float* s = col + runs[r].s_off;
        const int64_t n = runs[r].n;
        int64_t i = 0;
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_ps(d + i, _mm256_add_ps(_mm256_loadu_ps(d + i), _mm256_loadu_ps(s + i)));
        for (; i < n; ++i) d[i] += s[i];
    }
}

class JitDataExecutor final : public Executor {
public:
    JitDataExecutor(const Problem& p, const DataPlan& plan);
    void run(const void* in0, const void* in1, void* out) const override;
    std::string describe() const override;
    int threads() const override { return op_threads(p_); }

private:
    void build_kernels();
    // Row blocks and col: the kernel of blocks of mb pixels.
    const DataKernel& kernel(int64_t mb, bool last) const { return *kernels_[kernel_slot(mb, last)]; }
    size_t kernel_slot(int64_t mb, bool last) const { return static_cast<size_t>(mb * 2 + last); }
    void pack_weights(const void* w, char* wp, int threads) const;
    template <typename T>
    void pack_weights_as(const T* w, char* wp, int threads) const;
    template <typename T>
    void pack_dw_runs(const T* w, char* wp, int64_t it0, int64_t it1) const;
    void pack_row_sources(int64_t g, int64_t b, int64_t x, int64_t width, std::vector<int64_t>& src) const;
    int64_t w_tap_offset(int64_t tap) const;  // elements of the user's W to spatial tap `tap`
    // Bytes between the kernels' diff_dst pixels: col_widened plans read a
    // chunk's f32 copy of the group's channels, the others diff_dst itself.
    int64_t kernel_dd_pitch() const { return plan_.col_widened ? p_.ocg * 4 : plan_.dd_pitch; }
    void run_direct(const char* dd, const char* wp, char* dst, int threads) const;
    void run_col(const char* dd, const char* wp, char* dst, int threads) const;
    void direct_item(const char* dd, const char* wp, char* dst, int64_t row, int64_t seg, int64_t cb,
                     const DataKernelArgs& rep, int64_t chunk, float* acc_row, ThreadCtx& ctx) const;
    DataKernelArgs rep_steps(int64_t reps) const;
    DataKernelArgs call_args(const DataKernelArgs& rep, int64_t noc, int64_t chunk, const ThreadCtx& ctx) const;
    void build_slab(const char* dd, int64_t plane, ThreadCtx& ctx) const;
    void row_block_item(const char* dd, const char* wp, char* dst, int64_t plane, int64_t cb,
                        const DataKernelArgs& rep, ThreadCtx& ctx) const;
    // Builds the entries of a phase's row and runs its kernel: nblocks full
    // blocks, then (tail) the phase's partial block (the kernel's tail_m).
    // Tap t's entry reads from pixel t.base + shift of the row taps' rows.
    struct PhaseCall {
        int64_t nblocks = 0, shift = 0;
        bool tail = true;
    };
    void direct_call(const std::vector<RowTap>& rts, const std::vector<PhaseTap>& taps, const PhaseCall& pc,
                     const DataKernel& k, const char* wblock, int64_t chan_dd, char* dst, float* acc, bool last,
                     int64_t noc, int64_t chunk, const DataKernelArgs& reps, ThreadCtx& ctx) const;
    // Direct and depthwise (not row blocks, not col): W phase r's kernel.
    const DataKernel& phase_kernel(int64_t r, bool last) const {
        return *phase_kernels_[static_cast<size_t>(r * 2 + last)];
    }
    void col_rows(const char* dd, const char* wp, float* image, int64_t n, int64_t ra, int64_t rb,
                  float* colbuf, float* cvt, std::vector<ColRuns>& runs) const;
    int64_t col_row_chunks() const { return (p_.out[2] + plan_.col_pixels - 1) / plan_.col_pixels; }
    void scatter_columns(const float* col, int64_t px, int64_t ow0, int64_t grp,
                         const std::vector<ColTarget>& targets, ColRuns& runs) const;
    // oc rows of packed W per tap (depthwise: the G of a lane group; row
    // pairs: 2 forms × 2 bf16, see DataPlan::dw_row_pairs()).
    int64_t w_oc_rows() const {
        if (plan_.dw_row_pairs()) return 4;
        return plan_.path == DataPath::depthwise ? plan_.lane_group : plan_.ocg_w;
    }
    void pack_row_pairs(const uint16_t* w, char* wp, int threads) const;
    // Direct 1x1 plans whose input channels are consecutive elements of W
    // (OIX, a folded full kernel's OIX): rows copied in tiles.
    bool w_rows_contiguous() const {
        return plan_.path == DataPath::direct && p_.k_sp() == 1 && p_.wei_str.i == 1;
    }
    template <typename T>
    void pack_contiguous(const T* w, char* wp, int threads) const;
    int64_t chunks() const {
        const int64_t ocg = plan_.path == DataPath::depthwise ? 1 : p_.ocg;
        return (ocg + plan_.oc_chunk - 1) / plan_.oc_chunk;
    }

    // NCX windows: the rows item rows [r0, r1) reads and writes; channels
    // [c0, c1) of diff_dst rows into ctx.dd_win (before the item), of
    // ctx.dst_win into the user's diff_src (after it).
    ItemWindow item_window(int64_t r0, int64_t r1, int64_t seg, int64_t cb0, int64_t cb1) const;
    void open_windows(const char* dd, const ItemWindow& w, ThreadCtx& ctx) const;
    void close_windows(char* dst, const ItemWindow& w, const ThreadCtx& ctx) const;
    int64_t win_dd_bytes_ = 0, win_dst_bytes_ = 0;  // the largest item's windows

    Problem p_;
    DataPlan plan_;
    int es_ = 4;                   // bytes of an activation element (diff_dst and diff_src)
    int64_t w_bytes_ = 0;          // the user's W
    ArrayConverter widen_, round_;  // 16-bit plans: rows to f32, f32 sums to the output type
    NxcStrides dd_str_, dst_str_;  // dense NXC in the plan's geometry, elements (NCX windows: window_pad wider pixels)
    std::vector<std::vector<PhaseTap>> phases_;
    // Segments: seg_windows, and the part of each inside the row.
    std::vector<std::pair<int64_t, int64_t>> seg_windows_, seg_inside_;
    std::vector<std::shared_ptr<const DataKernel>> kernels_;
    std::vector<std::shared_ptr<const DataKernel>> phase_kernels_;  // see phase_kernel
    // Direct and depthwise: each channel run's steps (rep_steps of
    // DataPlan::cb_run(r)), once: a cleared DataKernelArgs per item had been
    // a rep stos a call, and depthwise rows on small planes are calls of a
    // few hundred cycles.
    std::vector<DataKernelArgs> run_steps_;
    int built_ = 0, hits_ = 0;
};

JitDataExecutor::JitDataExecutor(const Problem& p, const DataPlan& plan)
    : p_(p),
      plan_(plan),
      es_(static_cast<int>(dtype_size(p.dt))),
      w_bytes_(p.input1_elems * static_cast<int64_t>(dtype_size(p.dt))),
      dd_str_(nxc_strides(plan.geo.out, p.oc() + plan.window_pad / es_)),
      dst_str_(nxc_strides(plan.geo.in, p.ic() + plan.window_pad / es_)) {
    const DataGeometry& g = plan_.geo;
    for (int64_t r = 0; r < g.stride[2]; ++r) phases_.push_back(phase_taps(g, r));
    if (plan_.segments > 1) seg_windows_ = seg_windows(plan_);
    for (const auto& w : seg_windows_) seg_inside_.push_back(window_inside(plan_, w));
    if (plan_.path != DataPath::col)
        for (int64_t run = 0; run < plan_.cb_runs(); ++run) {
            const auto [cb0, cb1] = plan_.cb_run(run);
            run_steps_.push_back(rep_steps(cb1 - cb0));
        }
    win_dd_bytes_ = plan_.scratch.window_dd_rows * plan_.scratch.window_dd_px * dd_str_.w * es_;
    win_dst_bytes_ = plan_.scratch.window_dst_rows * plan_.scratch.window_dst_px * dst_str_.w * es_;
    if (p.dt != data_type::f32) {
        widen_ = ArrayConverter(plan_.isa, p.dt, data_type::f32);
        round_ = ArrayConverter(plan_.isa, data_type::f32, p.dt);
    }
    build_kernels();
}

// Every kernel the plan can call. Direct and depthwise plans: one per W
// phase (its full blocks and its partial block) and channel block kind
// (phase_kernel); with streaming stores, each call chooses them or the
// others (DataStore), so a misaligned diff_src needs no kernel of its own.
// Row blocks (a block of block_rows rows, and of one row) and the col
// path (full and partial pixel blocks, f32 columns): kernel(mb, last);
// their items make no streaming stores.
void JitDataExecutor::build_kernels() {
    const DataBlocking& b = plan_.blk;
    const DataGeometry& g = plan_.geo;
    const bool col = plan_.path == DataPath::col;
    const bool dw = plan_.path == DataPath::depthwise;
    const int64_t dd_pix = kernel_dd_pitch();
    const int64_t row_px = g.in[2];  // row blocks: a block's rows of row_px pixels
    // (Row taps: a block's pixels are a row's, every W phase.)
    const int64_t dst_pix =
            col ? plan_.cb.padded() * 4 : (plan_.direct_row_taps ? 1 : g.stride[2]) * dst_str_.w * es_;
    // mb pixels a block, the last (narrower) channel block or not, an
    // entry's row taps, the pixels of a partial block, the W phase.
    auto build = [&](int64_t mb, bool last, int64_t taps, int64_t tail_m, int64_t r = 0) {
        DataKernelTypes types = data_kernel_types(plan_, std::max<int64_t>(1, taps));
        if (col) types.out = data_type::f32;
        if (plan_.w_in_place) types.w_tap_bytes = p_.wei_str.k[2] * es_;  // the user's kw stride
        if (plan_.direct_row_taps) {  // W taps one [oc][lanes] block apart; whole rows a block
            types.w_tap_bytes = plan_.ocg_w * plan_.cb.width(last) * plan_.w_elem_bytes;
            types.block_rows = static_cast<int>(mb / row_px);
        }
        // Row blocks: the next block starts block_rows rows further in the slab.
        const int64_t dd_block = plan_.row_blocks ? plan_.scratch.row_bytes * std::max<int64_t>(1, mb / row_px) : 0;
        const bool nt = plan_.nt_store && !col && !plan_.row_blocks;
        types.store = plan_.pf_store ? (nt ? DataStore::prefetched_or_streaming : DataStore::prefetched)
                                     : (nt ? DataStore::plain_or_streaming : DataStore::plain);
        types.tail_m = static_cast<int>(tail_m);
        if (plan_.dw_edges) {  // phase r's row: tap 0 of pixel 0 reads pixel row_x0
            const std::vector<PhaseTap>& pt = phases_[static_cast<size_t>(r)];
            types.row_x0 = pt.empty() ? 0 : static_cast<int>(pt[0].base);
            types.row_w = static_cast<int>(g.out[2]);
            types.row_nblocks = static_cast<int>(phase_pixel_count(g, r) / mb);
        }
        const DataKernelDesc d = make_data_desc(
                plan_.isa, dw ? DataKernelKind::depthwise : DataKernelKind::direct, static_cast<int>(mb),
                last ? plan_.cb.tail_n : b.n, last ? plan_.cb.tail_lanes : 0, b.oc_unroll, b.bcast_in_fma, dd_pix,
                dst_pix, types, dd_block);
        bool hit = false;
        std::shared_ptr<const DataKernel> k = get_data_kernel(d, &hit);
        ++built_;
        hits_ += hit;
        return k;
    };
    if (!col && !plan_.row_blocks) {
        phase_kernels_.assign(static_cast<size_t>(2 * g.stride[2]), nullptr);
        for (int64_t r = 0; r < g.stride[2]; ++r) {
            const int64_t taps = plan_.dw_row_taps ? static_cast<int64_t>(phases_[static_cast<size_t>(r)].size()) : 0;
            for (int last = 0; last < 2; ++last)
                if (last || plan_.cb.per_group > 1)
                    phase_kernels_[static_cast<size_t>(r * 2 + last)] =
                            build(b.m, last, taps, phase_pixel_count(g, r) % b.m, r);
        }
        return;
    }
    kernels_.assign(static_cast<size_t>(2 * (b.m + 1)), nullptr);
    for (int64_t mb : {int64_t(b.m), (col ? p_.out[2] : g.in[2]) % b.m})
        for (int last = 0; last < 2; ++last)
            if (mb > 0 && (last || plan_.cb.per_group > 1) && !kernels_[kernel_slot(mb, last)])
                kernels_[kernel_slot(mb, last)] = build(mb, last, 0, 0);
}

void JitDataExecutor::run(const void* in0, const void* in1, void* out) const {
    const int threads = this->threads();
    const char* dd = static_cast<const char*>(in0);
    const ScratchLease wp(Scratch::data_wpack, plan_.scratch.wpack_elems * plan_.w_elem_bytes);
    if (!plan_.w_in_place) pack_weights(in1, wp.get(), threads);
    const char* w = plan_.w_in_place ? static_cast<const char*>(in1) : wp.get();
    char* dst = static_cast<char*>(out);
    ScratchLease dd_nxc, dst_nxc;
    if (plan_.scratch.whole_nxc) {  // NCX rows of several images: whole tensors
        dd_nxc = ScratchLease(Scratch::data_dd_nxc, plan_.scratch.dd_nxc_elems * es_);
        dst_nxc = ScratchLease(Scratch::data_dst_nxc, plan_.scratch.dst_nxc_elems * es_);
        transpose_images(dd, dd_nxc.get(), es_, p_.mb, p_.oc(), p_.out_sp(), threads, plan_.isa);
        dd = dd_nxc.get();
        dst = dst_nxc.get();
    }
    if (plan_.path == DataPath::col)
        run_col(dd, w, dst, threads);
    else
        run_direct(dd, w, dst, threads);
    if (plan_.scratch.whole_nxc) transpose_images(dst, out, es_, p_.mb, p_.in_sp(), p_.ic(), threads, plan_.isa);
}

// How gather_rows turns each gathered dword into its output.
enum class GatherWiden { none, f16, bf16, pairs };

// W packing prefetches its sources this many rows (gather_rows) or tiles
// of rows (transpose_runs) ahead: each lane reads its own line, a W row
// apart from the next lane's, which the hardware does not stream from L3 /
// DRAM. AMD Zen 5, 2 threads, f32 bwd_d on 512 -> 512 3x3 layers at mb 2-16:
// the pack 31 -> 23 % of a 7x7 layer's time in perf, 0.98-1.07x over three
// A/Bs (the host's noise), OIX (gathers) 1.00-1.05x; 2, 4 and 8 ahead even,
// 16 0.96x.
constexpr int64_t kPackPrefetchRows = 4;

// Prefetches the sources of `lanes` lanes in a W row (gather_rows: the row
// kPackPrefetchRows ahead).
inline void prefetch_lanes(const char* row, const int32_t* offset, int lanes) {
    for (int l = 0; l < lanes; ++l) _mm_prefetch(row + offset[l], _MM_HINT_T0);
}

// Packs `rows` rows of 16·`groups` 32-bit values: out[r][l] = the 32 bits
// at base + offset[l] + r·row_step (bytes), or 0 for a lane outside its
// group's `live` mask. One gather per 16 values: the lanes' sources are a W
// row apart, so scalar copies touch a line per value. f16 / bf16: the
// dword's high half is a 16-bit element, stored widened to f32. pairs
// (bf16 oc pairs from a layout whose oc rows are not adjacent): the
// elements ending the dwords at offset[l] + r·row_step and half a row step
// further (oc 2r and 2r + 1), low half the first.
__attribute__((target("avx512f"))) void gather_rows(const char* base, const int32_t* offset, const uint16_t* live,
                                                  int64_t groups, int64_t rows, int64_t row_step, int64_t out_row,
                                                  GatherWiden widen, uint32_t* out) {
    const __m512i high = _mm512_set1_epi32(int32_t(0xffff0000u));
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t g = 0; g < groups; ++g) {
            if (r + kPackPrefetchRows < rows) prefetch_lanes(base + (r + kPackPrefetchRows) * row_step, offset + 16 * g, 16);
            const __m512i idx = _mm512_loadu_si512(offset + 16 * g);
            __m512i v = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), live[g], idx, base + r * row_step, 1);
            // (zero-masked forms: GCC 12 flags the plain ones' undefined pass-through)
            if (widen == GatherWiden::f16) {
                v = _mm512_castps_si512(_mm512_maskz_cvtph_ps(
                        0xffff, _mm512_maskz_cvtepi32_epi16(0xffff, _mm512_maskz_srlv_epi32(0xffff, v, _mm512_set1_epi32(16)))));
            } else if (widen == GatherWiden::bf16) {
                v = _mm512_and_si512(v, high);
            } else if (widen == GatherWiden::pairs) {
                const __m512i hi = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), live[g], idx,
                                                               base + r * row_step + row_step / 2, 1);
                v = _mm512_or_si512(_mm512_maskz_srli_epi32(0xffff, v, 16), _mm512_and_si512(hi, high));
            }
            _mm512_storeu_si512(out + r * out_row + 16 * g, v);
        }
}

// gather_rows where each lane's values are contiguous (XIO: oc innermost):
// out[r][l] = element r of the run at base + offset[l] (4-byte elements,
// or 16-bit ones widened to f32), 0 for a dead lane. Per 16 rows × 16
// lanes one masked load a lane (never past a run's end) and a register
// transpose, instead of 16 gathers that each touch 16 lines.
__attribute__((target("avx512f,avx512bw,avx512vl"))) void transpose_runs(const char* base, const int32_t* offset, const uint16_t* live,
                                                     int64_t groups, int64_t rows, int64_t out_row,
                                                     GatherWiden widen, uint32_t* out) {
    const int64_t es = widen == GatherWiden::none ? 4 : 2;
    __m512i r[16];
    for (int64_t r0 = 0; r0 < rows; r0 += 16) {
        const int64_t valid = std::min<int64_t>(16, rows - r0);
        const __mmask16 rows_mask = static_cast<__mmask16>((1u << valid) - 1);
        for (int64_t g = 0; g < groups; ++g) {
            for (int l = 0; l < 16; ++l) {
                const __mmask16 m = (live[g] >> l & 1) ? rows_mask : __mmask16(0);
                const char* at = base + offset[16 * g + l] + r0 * es;
                _mm_prefetch(at + kPackPrefetchRows * 16 * es, _MM_HINT_T0);
                if (widen == GatherWiden::none)
                    r[l] = _mm512_maskz_loadu_epi32(m, at);
                else if (widen == GatherWiden::f16)
                    r[l] = _mm512_castps_si512(_mm512_maskz_cvtph_ps(0xffff, _mm256_maskz_loadu_epi16(m, at)));
                else
                    r[l] = _mm512_maskz_slli_epi32(0xffff, _mm512_maskz_cvtepu16_epi32(0xffff, _mm256_maskz_loadu_epi16(m, at)), 16);
            }
            transpose_16x16(r);
            for (int64_t i = 0; i < valid; ++i) _mm512_storeu_si512(out + (r0 + i) * out_row + 16 * g, r[i]);
        }
    }
}

// transpose_runs on AVX2 (f32 and widened 16-bit W): 8 x 8 tiles, whole
// tiles of rows only (the caller copies the rest); `live` per 8 lanes.
__attribute__((target("avx2,f16c"))) void transpose_runs_avx2(const char* base, const int32_t* offset,
                                                          const uint16_t* live, int64_t groups, int64_t rows,
                                                          int64_t out_row, GatherWiden widen, float* out) {
    const int64_t es = widen == GatherWiden::none ? 4 : 2;
    __m256 r[8];
    for (int64_t r0 = 0; r0 + 8 <= rows; r0 += 8)
        for (int64_t g = 0; g < groups; ++g) {
            for (int l = 0; l < 8; ++l) {
                const char* at = base + offset[8 * g + l] + r0 * es;
                _mm_prefetch(at + kPackPrefetchRows * 8 * es, _MM_HINT_T0);
                if (!(live[g] >> l & 1)) {
                    r[l] = _mm256_setzero_ps();
                } else if (widen == GatherWiden::none) {
                    r[l] = _mm256_loadu_ps(reinterpret_cast<const float*>(at));
                } else {
                    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(at));
                    r[l] = widen == GatherWiden::f16 ? _mm256_cvtph_ps(h)
                                                     : _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
                }
            }
            transpose_8x8(r);
            for (int i = 0; i < 8; ++i) _mm256_storeu_ps(out + (r0 + i) * out_row + 8 * g, r[i]);
        }
}

// gather_rows on AVX2 (f32 and widened 16-bit W, no pairs): 8 lanes a
// gather, `live` per 8 lanes.
__attribute__((target("avx2,f16c"))) void gather_rows_avx2(const char* base, const int32_t* offset,
                                                       const uint16_t* live, int64_t groups, int64_t rows,
                                                       int64_t row_step, int64_t out_row, GatherWiden widen,
                                                       float* out) {
    const __m256i bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    const __m256i high = _mm256_set1_epi32(int32_t(0xffff0000u));
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t g = 0; g < groups; ++g) {
            if (r + kPackPrefetchRows < rows) prefetch_lanes(base + (r + kPackPrefetchRows) * row_step, offset + 8 * g, 8);
            const __m256i idx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(offset + 8 * g));
            const __m256i m = _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32(live[g]), bit), bit);
            __m256i v = _mm256_mask_i32gather_epi32(_mm256_setzero_si256(),
                                                    reinterpret_cast<const int*>(base + r * row_step), idx, m, 1);
            if (widen == GatherWiden::f16) {  // the high halves, packed to 8 halfs, widened
                const __m256i h = _mm256_packus_epi32(_mm256_srli_epi32(v, 16), _mm256_setzero_si256());
                v = _mm256_castps_si256(_mm256_cvtph_ps(_mm256_castsi256_si128(_mm256_permute4x64_epi64(h, 0x08))));
            } else if (widen == GatherWiden::bf16) {
                v = _mm256_and_si256(v, high);
            }
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + r * out_row + 8 * g), v);
        }
}

// Element i of the user's W as f32 (T = float or the 16-bit bits).
template <typename T>
float weight_f32(const T* w, int64_t i, data_type dt) {
    if constexpr (std::is_same_v<T, float>) {
        (void)dt;
        return w[i];
    } else {
        return dt == data_type::bf16 ? bf16_to_f32(w[i]) : f16_to_f32(w[i]);
    }
}

// Packs the user's W (any layout, through its strides) into the plan's
// blocks: direct [g][ic block][tap][oc][lanes], depthwise [block][tap][o][lanes]
// (o < G: lane c holds W(oc = c - c % G + o, ic = c % G)),
// col [g][lane block][oc][lanes] with lane = tap * ICg + ic; f32, except
// bf16_dot: the direct layout with oc in pairs, [..][oc/2][lanes][2] bf16
// (an odd last oc pairs with 0). Lanes past the channels are zero, so the
// kernel never needs a masked W load.
void JitDataExecutor::pack_weights(const void* w, char* wp, int threads) const {
    if (w_rows_contiguous() && p_.dt == data_type::f32)
        pack_contiguous(static_cast<const float*>(w), wp, threads);
    else if (w_rows_contiguous())
        pack_contiguous(static_cast<const uint16_t*>(w), wp, threads);
    else if (plan_.dw_row_pairs())
        pack_row_pairs(static_cast<const uint16_t*>(w), wp, threads);
    else if (p_.dt == data_type::f32)
        pack_weights_as(static_cast<const float*>(w), wp, threads);
    else
        pack_weights_as(static_cast<const uint16_t*>(w), wp, threads);
}

int64_t JitDataExecutor::w_tap_offset(int64_t tap) const {
    const WeightStrides& ws = p_.wei_str;
    const int64_t kh = p_.k[1], kw = p_.k[2];
    return tap / (kh * kw) * ws.k[0] + tap / kw % kh * ws.k[1] + tap % kw * ws.k[2];
}

// For pack row (g, lane block b, x = tap; col: x = 0): the element of
// (lane l, oc row 0) in the user's W, -1 for lanes past the channels; oc
// rows step by wei_str.o.
void JitDataExecutor::pack_row_sources(int64_t g, int64_t b, int64_t x, int64_t width, std::vector<int64_t>& src) const {
    const WeightStrides& ws = p_.wei_str;
    const DataChannelBlocks& cb = plan_.cb;
    src.assign(static_cast<size_t>(width), -1);
    const int64_t tap_x = plan_.path == DataPath::col ? 0 : w_tap_offset(x);  // once: it divides
    const int64_t lane0 = b * cb.block, lanes = std::clamp<int64_t>(cb.lanes - lane0, 0, width);
    const int64_t G = plan_.lane_group;
    // (one loop per path: the lanes of a pack row are its inner loop)
    if (plan_.path == DataPath::depthwise && G == 1)
        for (int64_t l = 0, lane = lane0; l < lanes; ++l, ++lane) src[l] = lane * ws.o + tap_x;
    else if (plan_.path == DataPath::depthwise)  // oc row o adds o·ws.o
        for (int64_t l = 0, lane = lane0; l < lanes; ++l, ++lane)
            src[l] = (lane - lane % G) * ws.o + lane % G * ws.i + tap_x;
    else if (plan_.path == DataPath::col)
        for (int64_t l = 0, lane = lane0; l < lanes; ++l, ++lane)
            src[l] = g * p_.ocg * ws.o + lane % p_.icg * ws.i + w_tap_offset(lane / p_.icg);
    else
        for (int64_t l = 0, lane = lane0; l < lanes; ++l, ++lane) src[l] = g * p_.ocg * ws.o + lane * ws.i + tap_x;
}

// Depthwise (G = 1) with W's output channels adjacent (XIO): pack rows
// (block b, tap x), x fastest, items [it0, it1); each the block's channels
// of tap x, a run of W, copied (16-bit: widened), zeros past them. The
// taps are walked by counters: one small layer's pack (1024 channels, a
// 13x13 kernel, 10816 runs of 64 bytes) had spent most of its time in
// the per-run divisions and calls.
template <typename T>
void JitDataExecutor::pack_dw_runs(const T* w, char* wp, int64_t it0, int64_t it1) const {
    const WeightStrides& ws = p_.wei_str;
    const DataChannelBlocks& cb = plan_.cb;
    const int64_t kh = p_.k[1], kw = p_.k[2], inner = p_.k_sp();
    int64_t b = it0 / inner, x = it0 % inner;
    int64_t d = x / (kh * kw), h = x / kw % kh, c = x % kw;
    for (int64_t it = it0; it < it1; ++it) {
        const int64_t width = cb.width(b + 1 == cb.per_group);
        float* out = reinterpret_cast<float*>(wp) + (b * cb.block * inner + x * width);
        const int64_t live = std::clamp<int64_t>(cb.lanes - b * cb.block, 0, width);
        const T* from = w + b * cb.block + d * ws.k[0] + h * ws.k[1] + c * ws.k[2];
        if constexpr (std::is_same_v<T, float>) {
            if (live == 16) {
                for (int i = 0; i < 16; ++i) out[i] = from[i];
            } else {
                std::copy_n(from, live, out);
            }
        } else {
            widen_(from, out, live);
        }
        std::fill(out + live, out + width, 0.0f);
        if (++x == inner) {
            x = d = h = c = 0;
            ++b;
        } else if (++c == kw) {
            c = 0;
            if (++h == kh) {
                h = 0;
                ++d;
            }
        }
    }
}

template <typename T>
void JitDataExecutor::pack_weights_as(const T* w, char* wp, int threads) const {
    const WeightStrides& ws = p_.wei_str;
    const DataChannelBlocks& cb = plan_.cb;
    const int64_t ksp = p_.k_sp();
    const bool col = plan_.path == DataPath::col, dw = plan_.path == DataPath::depthwise;
    const bool pairs = plan_.types.compute == DataCompute::bf16_dot;
    // Rows of the pack: (g, block, tap) for direct and depthwise, (g, block)
    // for col, each of `reps` oc rows (their sources one oc stride apart).
    const int64_t groups = dw ? 1 : p_.g, inner = col ? 1 : ksp;
    const int64_t reps = dw ? plan_.lane_group : plan_.ocg_w;  // oc rows per pack row
    const int64_t real_reps = dw ? plan_.lane_group : p_.ocg;
    const int64_t items = groups * cb.per_group * inner;
    // Depthwise (G = 1) with W's output channels adjacent (XIO): each pack
    // row is a run of W. MobileNet v1's 1024 channels at 7x7 on one image
    // had spent more than half of its data gradient in the general path's
    // per-lane sources and gathers.
    const bool dw_runs = dw && plan_.lane_group == 1 && ws.o == 1 && !pairs;
    for_each_thread(threads, [&](int t) {
        std::vector<int64_t> src;
        std::vector<int32_t> offsets;
        std::vector<uint16_t> live;
        // offsets / live for `per` lanes a mask (16 AVX-512, 8 AVX2), each
        // lane's source `back` bytes before its element; the lane of W's
        // first element, or -1.
        auto set_lanes = [&](int64_t width, int64_t back, int per) {
            int64_t first_lane = -1;
            offsets.resize(static_cast<size_t>(width));
            live.resize(static_cast<size_t>(width / per));
            for (int64_t l0 = 0; l0 < width; l0 += per) {  // (a mask's bits in a register: no store chain)
                uint32_t bits = 0;
                for (int64_t l = l0; l < l0 + per; ++l) {
                    const int64_t i = src[static_cast<size_t>(l)], at = i * int64_t(sizeof(T)) - back;
                    offsets[static_cast<size_t>(l)] = static_cast<int32_t>(std::max<int64_t>(at, 0));
                    if (i >= 0 && at >= 0) bits |= 1u << (l - l0);
                    if (i == 0 && back) first_lane = l;
                }
                live[static_cast<size_t>(l0 / per)] = static_cast<uint16_t>(bits);
            }
            return first_lane;
        };
        const auto [it0, it1] = spread(items, threads, t);
        if (dw_runs) {
            pack_dw_runs(w, wp, it0, it1);
            return;
        }
        for (int64_t it = it0; it < it1; ++it) {
            const int64_t g = it / (cb.per_group * inner), b = it / inner % cb.per_group, x = it % inner;
            const int64_t width = cb.width(b + 1 == cb.per_group);
            const int64_t row0 = (g * cb.padded() + b * cb.block) * inner * reps + x * reps * width;
            float* out32 = reinterpret_cast<float*>(wp) + row0;
            uint32_t* out_pairs = reinterpret_cast<uint32_t*>(reinterpret_cast<uint16_t*>(wp) + row0);
            pack_row_sources(g, b, x, width, src);
            // AVX-512, f32, 16-bit widened to f32, or bf16 pairs: the whole
            // oc rows (pairs: oc pairs) by gathers or, oc adjacent (XIO), by
            // transposes (lanes past the channels masked to 0), then only
            // the odd last oc and the padded oc rows below. 16-bit gathers:
            // each lane reads the dword ending at its element (never before
            // W, never past its end), so the lane of W's first element,
            // which no dword ends at, is copied alone.
            int64_t o_start = 0;
            const bool widen16 = !pairs && std::is_same_v<T, uint16_t>;
            const GatherWiden widened = !widen16                 ? GatherWiden::none
                                        : p_.dt == data_type::f16 ? GatherWiden::f16
                                                                  : GatherWiden::bf16;
            int64_t first_lane = -1;  // 16-bit gathers: the lane of W's first element, copied below
            const bool gather = plan_.isa >= Isa::avx512_core && width % 16 == 0 && w_bytes_ < (int64_t(1) << 31);
            // Runs: each lane's oc rows are adjacent elements (oc pairs:
            // dwords), transposed even when few: gathers of 1-7 rows had
            // cost small heads 4-36 % (1024 -> 5 fc, EfficientNet-B0's SE
            // 240 -> 10; f32 / bf16, mb 8, 2 threads, min of 7); layers of
            // a few MB 0.96-1.01x.
            const int64_t rows = pairs ? real_reps / 2 : real_reps;
            const bool runs = gather && ws.o == 1 && rows >= 1;
            if (gather) {
                const bool halves = (widen16 || pairs) && !runs;  // 16-bit elements gathered
                first_lane = set_lanes(width, halves ? 2 : 0, 16);
                const int64_t step = int64_t(sizeof(T)) * ws.o * (pairs ? 2 : 1);
                const GatherWiden widen = !pairs ? widened : runs ? GatherWiden::none : GatherWiden::pairs;
                uint32_t* out = pairs ? out_pairs : reinterpret_cast<uint32_t*>(out32);
                if (runs)
                    transpose_runs(reinterpret_cast<const char*>(w), offsets.data(), live.data(), width / 16, rows,
                                   width, widen, out);
                else
                    gather_rows(reinterpret_cast<const char*>(w), offsets.data(), live.data(), width / 16, rows, step,
                                width, widen, out);
                o_start = pairs ? rows * 2 : rows;
            } else if (plan_.isa == Isa::avx2 && !pairs && width % 8 == 0 && w_bytes_ < (int64_t(1) << 31)) {
                // AVX2: XIO's whole 8-row tiles of each lane's oc run by 8 x 8
                // transposes (the rest of a run below), other layouts by
                // 8-lane gathers (16-bit: the dword ending at each element).
                const bool runs8 = ws.o == 1 && real_reps >= 8;
                first_lane = set_lanes(width, widen16 && !runs8 ? 2 : 0, 8);
                if (runs8) {
                    transpose_runs_avx2(reinterpret_cast<const char*>(w), offsets.data(), live.data(), width / 8,
                                        real_reps, width, widened, out32);
                    o_start = real_reps / 8 * 8;
                } else {
                    gather_rows_avx2(reinterpret_cast<const char*>(w), offsets.data(), live.data(), width / 8,
                                     real_reps, int64_t(sizeof(T)) * ws.o, width, widened, out32);
                    o_start = real_reps;
                }
            }
            for (int64_t o = 0; o < rows && first_lane >= 0; ++o) {  // (AVX2 has no pairs: rows = real_reps)
                if (pairs)
                    out_pairs[o * width + first_lane] = uint32_t(static_cast<uint16_t>(w[2 * o * ws.o])) |
                                                        uint32_t(static_cast<uint16_t>(w[(2 * o + 1) * ws.o])) << 16;
                else
                    out32[o * width + first_lane] = weight_f32(w, o * ws.o, p_.dt);
            }
            // oc outer, lanes inner: the output is written in order, and the
            // lanes' reads come back to the same lines for the next oc.
            // (Rows whose oc are all past W: zeros; the lanes' sources and
            // W in locals, which the stores would otherwise reload.)
            const int64_t* lane_src = src.data();
            const T* wt = w;
            for (int64_t o = o_start; o < reps; o += pairs ? 2 : 1) {
                const int64_t live_oc = std::clamp<int64_t>(real_reps - o, 0, pairs ? 2 : 1);
                const T* w0 = wt + o * ws.o;
                const T* w1 = w0 + ws.o;
                if (pairs) {
                    uint32_t* row = out_pairs + o / 2 * width;
                    for (int64_t l = 0; l < width; ++l) {
                        const int64_t i = lane_src[l];
                        const uint32_t lo = i < 0 || live_oc < 1 ? 0 : static_cast<uint16_t>(w0[i]);
                        const uint32_t hi = i < 0 || live_oc < 2 ? 0 : static_cast<uint16_t>(w1[i]);
                        row[l] = lo | hi << 16;
                    }
                } else {
                    float* row = out32 + o * width;
                    for (int64_t l = 0; l < width; ++l) {
                        const int64_t i = lane_src[l];
                        row[l] = i < 0 || live_oc < 1 ? 0.f : weight_f32(w0, i, p_.dt);
                    }
                }
            }
        }
    });
}

// n halfs at s widened to f32 at d (F16C). pack_contiguous widens short
// runs (a block's lanes) inline: the executor's ArrayConverter, a call per
// run, ran those packs at 0.72-0.95x (VGG-16 / AlexNet fc6, 7x7 head in
// NCX + OIX, bf16 / f16 on avx512_core, 2 threads, min of 3).
__attribute__((target("avx2,f16c"))) void widen_f16_run(const uint16_t* s, float* d, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(d + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i))));
    for (; i < n; ++i) d[i] = _cvtsh_ss(s[i]);
}

// W's oc rows hold a group's input channels consecutively (a 1x1 layer in
// OIX): each packed row of a block is a run of one W row, copied (16-bit:
// widened, or interleaved with the next row into bf16 pairs). Gathers there
// fetched 16 adjacent values each, and a block's oc rows, a whole W row
// apart, touched a page each: tiles of kTileRows rows × the blocks of about
// kTileBytes of a row read each W page a few times and write each block in
// runs instead (VGG-16 fc6 as 1x1 in OIX: 411 MB of W).
template <typename T>
void JitDataExecutor::pack_contiguous(const T* w, char* wp, int threads) const {
    constexpr int64_t kTileRows = 64, kTileBytes = 4096;
    const DataChannelBlocks& cb = plan_.cb;
    const bool pairs = plan_.types.compute == DataCompute::bf16_dot;
    const int64_t reps = plan_.ocg_w, real = p_.ocg, step = pairs ? 2 : 1;
    const int64_t bt = std::max<int64_t>(1, kTileBytes / (cb.block * int64_t(sizeof(T))));  // blocks a tile
    const int64_t btiles = (cb.per_group + bt - 1) / bt, rtiles = (reps / step + kTileRows - 1) / kTileRows;
    const int64_t items = p_.g * btiles * rtiles;
    for_each_thread(threads, [&](int t) {
        const auto [it0, it1] = spread(items, threads, t);
        for (int64_t it = it0; it < it1; ++it) {
            const int64_t g = it / (btiles * rtiles), b0 = it / rtiles % btiles * bt, r0 = it % rtiles * kTileRows;
            const int64_t b1 = std::min(cb.per_group, b0 + bt), r1 = std::min(reps / step, r0 + kTileRows);
            for (int64_t r = r0; r < r1; ++r)
                for (int64_t b = b0; b < b1; ++b) {
                    const int64_t width = cb.width(b + 1 == cb.per_group);
                    const int64_t valid = std::min(width, cb.lanes - b * cb.block);
                    const int64_t row0 = (g * cb.padded() + b * cb.block) * reps;
                    const int64_t o = r * step;
                    const T* s = w + (g * p_.ocg + o) * p_.wei_str.o + b * cb.block;
                    if (pairs) {
                        const uint16_t* lo = reinterpret_cast<const uint16_t*>(s);
                        const uint16_t* hi = lo + p_.wei_str.o;
                        uint32_t* d = reinterpret_cast<uint32_t*>(reinterpret_cast<uint16_t*>(wp) + row0) + r * width;
                        const bool has_hi = o + 1 < real;
                        for (int64_t l = 0; l < valid; ++l) d[l] = lo[l] | (has_hi ? uint32_t(hi[l]) << 16 : 0u);
                        std::fill(d + valid, d + width, 0u);
                        continue;
                    }
                    float* d = reinterpret_cast<float*>(wp) + row0 + o * width;
                    if (o >= real) {
                        std::fill(d, d + width, 0.f);
                        continue;
                    }
                    if constexpr (std::is_same_v<T, float>) {
                        std::memcpy(d, s, static_cast<size_t>(valid) * 4);
                    } else if (p_.dt == data_type::f16) {
                        widen_f16_run(s, d, valid);
                    } else {
                        uint32_t* du = reinterpret_cast<uint32_t*>(d);
                        for (int64_t l = 0; l < valid; ++l) du[l] = uint32_t(s[l]) << 16;
                    }
                    std::fill(d + valid, d + width, 0.f);
                }
        }
    });
}

// Depthwise row pairs (bf16): per channel block of `width` lanes,
// [form][tap][lanes] dwords, form 0 the pair (W[kd][kh][kw], W[kd][kh +
// step][kw]) (zero where kh + step is past the kernel) and form 1 the row
// alone (W[kd][kh][kw], 0); lanes past the channels are zero.
void JitDataExecutor::pack_row_pairs(const uint16_t* w, char* wp, int threads) const {
    const DataChannelBlocks& cb = plan_.cb;
    const int64_t ksp = p_.k_sp(), step_taps = plan_.row_pair_step * p_.k[2], kh_n = p_.k[1];
    const int64_t items = cb.per_group * ksp;
    const int64_t so = p_.wei_str.o;  // W elements from one channel to the next (G = 1: output channels)
    for_each_thread(threads, [&](int t) {
        const auto [it0, it1] = spread(items, threads, t);
        for (int64_t it = it0; it < it1; ++it) {
            const int64_t b = it / ksp, tap = it % ksp;
            const int64_t width = cb.width(b + 1 == cb.per_group);
            const int64_t live = std::clamp<int64_t>(cb.lanes - b * cb.block, 0, width);
            uint32_t* block = reinterpret_cast<uint32_t*>(wp) + b * cb.block * ksp * 2;
            uint32_t* pair = block + tap * width;
            uint32_t* alone = block + (ksp + tap) * width;
            const bool has_partner = tap / p_.k[2] % kh_n + plan_.row_pair_step < kh_n;
            const uint16_t* lo_w = w + b * cb.block * so + w_tap_offset(tap);
            const uint16_t* hi_w = has_partner ? w + b * cb.block * so + w_tap_offset(tap + step_taps) : nullptr;
            for (int64_t l = 0; l < live; ++l) {
                const uint32_t lo = lo_w[l * so], hi = hi_w ? hi_w[l * so] : 0;
                pair[l] = lo | hi << 16;
                alone[l] = lo;
            }
            std::fill(pair + live, pair + width, 0u);
            std::fill(alone + live, alone + width, 0u);
        }
    });
}

ItemWindow JitDataExecutor::item_window(int64_t r0, int64_t r1, int64_t seg, int64_t cb0, int64_t cb1) const {
    const DataChannelBlocks& cbs = plan_.cb;
    ItemWindow w = item_rows(plan_, r0, r1);
    if (plan_.segments > 1) {
        std::tie(w.dd_x0, w.dd_x1) = seg_inside_[static_cast<size_t>(seg)];
        w.dst_x0 = plan_.seg_first(seg);
        w.dst_x1 = plan_.seg_first(seg + 1);
    }
    if (plan_.path == DataPath::depthwise) {  // one group in the geometry; a lane group within a block
        w.dst_c0 = w.dd_c0 = cb0 * cbs.block;
        w.dst_c1 = w.dd_c1 = std::min(p_.ic(), cb1 * cbs.block);
    } else {  // blocks of one group, or whole groups (one block a group)
        const int64_t g0 = cb0 / cbs.per_group, g1 = (cb1 - 1) / cbs.per_group;
        w.dst_c0 = g0 * p_.icg + cb0 % cbs.per_group * cbs.block;
        w.dst_c1 = g0 == g1 ? g0 * p_.icg + std::min(p_.icg, ((cb1 - 1) % cbs.per_group + 1) * cbs.block)
                            : (g1 + 1) * p_.icg;
        w.dd_c0 = g0 * p_.ocg;
        w.dd_c1 = (g1 + 1) * p_.ocg;
    }
    return w;
}

void JitDataExecutor::open_windows(const char* dd, const ItemWindow& w, ThreadCtx& ctx) const {
    const DataGeometry& g = plan_.geo;
    const ItemWindow& h = ctx.dd_held;
    if (std::tie(h.dd_lo, h.dd_hi, h.dd_c0, h.dd_c1, h.dd_x0, h.dd_x1) !=
        std::tie(w.dd_lo, w.dd_hi, w.dd_c0, w.dd_c1, w.dd_x0, w.dd_x1))
        ncx_rows_to_window(dd, ctx.dd_win.get(),
                           {es_, p_.oc(), g.out[0] * g.out[1], g.out[2], w.dd_c0, w.dd_c1, w.dd_lo, w.dd_hi, w.dd_x0,
                            w.dd_x1, false, dd_str_.w},
                           plan_.isa);
    ctx.dd_held = w;
    ctx.dd_row0 = w.dd_lo;
    ctx.dst_row0 = w.dst_lo;
    ctx.dd_px0 = w.dd_x0;
    ctx.dst_px0 = w.dst_x0;
    ctx.dd_row_elems = (w.dd_x1 ? w.dd_x1 - w.dd_x0 : g.out[2]) * dd_str_.w;
    ctx.dst_row_elems = (w.dst_x1 ? w.dst_x1 - w.dst_x0 : g.in[2]) * dst_str_.w;
    ctx.dd_c0 = w.dd_c0;
    ctx.dd_c1 = w.dd_c1;
    // Copies made from the previous window (row taps point into it).
    ctx.slab_plane = -1;
    ctx.row_taps_row = -1;
    if (plan_.padded_rows) ctx.rows.forget(w.dd_lo, w.dd_c0, w.dd_c1);
}

void JitDataExecutor::close_windows(char* dst, const ItemWindow& w, const ThreadCtx& ctx) const {
    const DataGeometry& g = plan_.geo;
    window_to_ncx_rows(ctx.dst_win.get(), dst,
                       {es_, p_.ic(), g.in[0] * g.in[1], g.in[2], w.dst_c0, w.dst_c1, w.dst_lo, w.dst_hi, w.dst_x0,
                        w.dst_x1, false, dst_str_.w},
                       plan_.isa, plan_.window_nt);
}

// Items are (row group, channel block) pairs, group-major; each thread
// takes a contiguous range and runs an item's oc chunks in order, every row
// of the group per chunk (a 16-bit output keeps the group's f32 sums in
// ctx.acc between chunks).
void JitDataExecutor::run_direct(const char* dd, const char* wp, char* dst, int threads) const {
    const int64_t nruns = plan_.cb_runs(), rows = plan_.rows, group = plan_.group_rows;
    // stream_rows: an item runs all of its row group's channel blocks.
    const int64_t item_runs = plan_.stream_rows ? nruns : 1, group_items = nruns / item_runs;
    const int64_t seg_items = div_up(rows, group) * group_items;  // items of a segment
    const int64_t row_elems = dst_str_.h;
    DataThreadGrid grid = plan_.grid;
    grid.threads = threads;
    const int64_t nchunks = chunks();
    const bool nt = plan_.nt_store && reinterpret_cast<uintptr_t>(dst) % 64 == 0;
    const bool rows_nt = plan_.stream_rows;
    ItemQueue queue(grid.items, threads);
    for_each_thread(threads, [&](int t) {
        ThreadCtx ctx;
        ctx.nt = nt;
        ctx.dd_c1 = p_.oc();
        ctx.dd_row_elems = dd_str_.h;
        ctx.dst_row_elems = dst_str_.h;
        ctx.entries.reserve(static_cast<size_t>(2 * p_.k_sp()));  // row pairs: two a row
        if (plan_.scratch.acc_floats)
            ctx.acc = ScratchLease(Scratch::data_acc, plan_.scratch.acc_floats * 4);
        if (plan_.scratch.cvt_floats)
            ctx.cvt = ScratchLease(Scratch::data_cvt, plan_.scratch.cvt_floats * 4);
        if (plan_.row_blocks) {
            ctx.slab = ScratchLease(Scratch::data_rows, plan_.scratch.slab_bytes);
            std::memset(ctx.slab.get(), 0, static_cast<size_t>(plan_.scratch.slab_bytes));  // the pads
        } else if (plan_.padded_rows) {
            ctx.rows.init(plan_, p_, plan_.ncx_windows ? plan_.scratch.window_dd_rows : 0);
        }
        if (plan_.ncx_windows) {
            ctx.dd_win = ScratchLease(Scratch::data_dd_nxc, win_dd_bytes_);
            ctx.dst_win = ScratchLease(Scratch::data_dst_nxc, win_dst_bytes_);
        }
        if (rows_nt) ctx.rows_out = ScratchLease(Scratch::data_dst_nxc, plan_.scratch.rows_out_bytes);
        const char* item_dd = plan_.ncx_windows ? ctx.dd_win.get() : dd;
        char* item_dst = plan_.ncx_windows ? ctx.dst_win.get() : rows_nt ? ctx.rows_out.get() : dst;
        for (int64_t i = 0; queue.next(t, i);) {
            const int64_t seg = i / seg_items, rest = i % seg_items;  // segment-major
            const int64_t r0 = rest / group_items * group, r1 = std::min(rows, r0 + group);
            if (rows_nt) ctx.dst_row0 = r0;
            for (int64_t run = rest % group_items * item_runs; run < (rest % group_items + 1) * item_runs; ++run) {
                const auto [cb0, cb1] = plan_.cb_run(run);
                ItemWindow w;
                if (plan_.ncx_windows) {
                    w = item_window(r0, r1, seg, cb0, cb1);
                    open_windows(dd, w, ctx);
                }
                if (plan_.row_blocks) {
                    row_block_item(item_dd, wp, item_dst, rest / group_items, cb0, run_steps_[static_cast<size_t>(run)],
                                   ctx);
                } else {
                    const DataKernelArgs& rep = run_steps_[static_cast<size_t>(run)];
                    for (int64_t ch = 0; ch < nchunks; ++ch)
                        for (int64_t row = r0; row < r1; ++row) {
                            float* acc_row = ctx.acc.get() ? ctx.acc.floats() + (row - r0) * row_elems : nullptr;
                            direct_item(item_dd, wp, item_dst, row, seg, cb0, rep, ch, acc_row, ctx);
                        }
                }
                if (plan_.ncx_windows) close_windows(dst, w, ctx);
            }
            if (rows_nt)
                stream_copy_avx512(dst + r0 * row_elems * es_, ctx.rows_out.get(), (r1 - r0) * row_elems * es_);
        }
        if (nt || plan_.window_nt || rows_nt) _mm_sfence();  // streaming stores visible before the join
    });
}

// Row blocks: the diff_dst rows of plane (n, id) padded into the slab, row
// after row (widened to f32 for widen_rows plans). The pads were zeroed once.
void JitDataExecutor::build_slab(const char* dd, int64_t plane, ThreadCtx& ctx) const {
    const DataGeometry& g = plan_.geo;
    const int64_t row_bytes = plan_.scratch.row_bytes;
    for (int64_t oh = 0; oh < g.out[1]; ++oh) {
        const char* src = dd + (plane * g.out[1] + oh - ctx.dd_row0) * dd_str_.h * es_;
        char* row = ctx.slab.get() + oh * row_bytes + plan_.pad_left * plan_.dd_pitch;
        const int64_t to_es = plan_.widen_rows ? 4 : es_;
        copy_pixels(src + ctx.dd_c0 * es_, es_, g.out[2], ctx.dd_c1 - ctx.dd_c0, p_.oc(), row + ctx.dd_c0 * to_es,
                    plan_.dd_pitch, plan_.widen_rows ? &widen_ : nullptr);
    }
    ctx.slab_plane = plane;
}

// Row blocks, one plane × run of channel blocks from `cb` (its steps `rep`): per oc
// chunk, the plane's rows in runs that read the same range of kh taps (top
// and bottom rows lose some to padding), a kernel call per run whose blocks
// are block_rows whole rows, and one for its leftover rows.
void JitDataExecutor::row_block_item(const char* dd, const char* wp, char* dst, int64_t plane, int64_t cb,
                                     const DataKernelArgs& rep, ThreadCtx& ctx) const {
    const DataGeometry& g = plan_.geo;
    const DataChannelBlocks& cbs = plan_.cb;
    if (ctx.slab_plane != plane) build_slab(dd, plane, ctx);
    const bool last = cb % cbs.per_group + 1 == cbs.per_group;
    const int64_t grp = cb / cbs.per_group, blk = cb % cbs.per_group;
    const int64_t width = cbs.width(last), ksp = p_.k_sp();
    const int64_t row_es = plan_.widen_rows ? 4 : es_, pix_bytes = plan_.dd_pitch;
    const int64_t w_tap_bytes = plan_.ocg_w * width * plan_.w_elem_bytes;
    const int64_t row_elems = g.in[2] * p_.ic(), chan_off = grp * p_.icg + blk * cbs.block;
    const int64_t plane_off = (plane * g.in[1] - ctx.dst_row0) * row_elems + chan_off;  // diff_src elements
    const std::vector<PhaseTap>& taps = phases_[0];
    for (int64_t chunk = 0; chunk < chunks(); ++chunk) {
        const int64_t oc0 = chunk * plan_.oc_chunk, noc = std::min(plan_.oc_chunk, p_.ocg - oc0);
        const char* wblock = wp + ((grp * cbs.padded() + blk * cbs.block) * ksp * plan_.ocg_w + oc0 * width) *
                                          plan_.w_elem_bytes;
        const char* dd_chunk = ctx.slab.get() + plan_.pad_left * pix_bytes + (grp * p_.ocg + oc0) * row_es;
        for (int64_t ih = 0; ih < g.in[1];) {
            const int64_t end = row_kh_run_end(g, ih);
            ctx.entries.clear();
            for_each_row_kh(g, ih, [&](int64_t kh, int64_t oh) {
                const char* dd_row = dd_chunk + oh * plan_.scratch.row_bytes;
                const char* w_row = wblock + kh * g.k[2] * w_tap_bytes;
                if (plan_.direct_row_taps)  // tap kw = 0 stands for the row's taps (DataKernelDesc::row_x0)
                    add_entry(ctx.entries, dd_row + g.pad[2] * pix_bytes, w_row);
                else
                    for (const PhaseTap& pt : taps)
                        add_entry(ctx.entries, dd_row + pt.base * pix_bytes, w_row + pt.kw * w_tap_bytes);
            });
            // Blocks of block_rows rows from row r0 (the entries read its
            // diff_dst rows), one row a block for the run's leftover rows.
            auto call = [&](int64_t r0, int64_t rows_a_block, int64_t nblocks) {
                DataKernelArgs a = call_args(rep, noc, chunk, ctx);
                a.dst = dst + (plane_off + r0 * row_elems) * es_;
                a.acc = ctx.acc.get() ? ctx.acc.floats() + chan_off + r0 * row_elems : static_cast<float*>(a.dst);
                a.nblocks = nblocks;
                kernel(rows_a_block * g.in[2], last)(a);
            };
            const int64_t br = plan_.block_rows(), full = (end - ih) / br, left = (end - ih) % br;
            if (full) call(ih, br, full);
            if (left) {
                for (DataEntry& e : ctx.entries)
                    e.dd = static_cast<const char*>(e.dd) + full * br * plan_.scratch.row_bytes;
                call(ih + full * br, 1, left);
            }
            ih = end;
        }
    }
}

// A run of `reps` channel blocks (DataPlan::cb_run): the steps to the next
// block, the next group's (one block a group) or the group's next block.
DataKernelArgs JitDataExecutor::rep_steps(int64_t reps) const {
    const DataChannelBlocks& cbs = plan_.cb;
    const bool dw = plan_.path == DataPath::depthwise;
    const int64_t ocg = dw ? 1 : p_.ocg;
    DataKernelArgs rep;
    rep.nreps = reps;
    const int64_t rep_chans = cbs.per_group == 1 ? p_.icg : cbs.block;
    rep.dd_rep_bytes = (cbs.per_group == 1 ? ocg : cbs.block * dw) * (plan_.widen_rows ? 4 : es_);
    rep.w_rep_bytes = plan_.w_in_place ? cbs.block * es_  // the next block's channels of the same tap
                                       : (cbs.per_group == 1 ? cbs.padded() : cbs.block) * p_.k_sp() * w_oc_rows() *
                                                 plan_.w_elem_bytes;
    rep.dst_rep_bytes = rep_chans * es_;
    rep.acc_rep_bytes = rep_chans * 4;
    return rep;
}

// The arguments of an item's calls: the thread's entries and widen
// scratch, the oc chunk, the run's steps (rep_steps); the caller adds
// dst, acc and nblocks.
DataKernelArgs JitDataExecutor::call_args(const DataKernelArgs& rep, int64_t noc, int64_t chunk,
                                          const ThreadCtx& ctx) const {
    DataKernelArgs a = rep;
    a.entries = ctx.entries.data();
    a.nentries = static_cast<int64_t>(ctx.entries.size());
    a.noc = noc;
    a.accumulate = chunk > 0;
    a.store_final = chunk + 1 == chunks();
    a.cvt = ctx.cvt.floats();
    a.streaming = ctx.nt;
    return a;
}

// One diff_src row × run of `reps` channel blocks from `cb` × oc chunk
// (acc_row: the row's f32 partial sums, or null when they live in
// diff_src): every W phase in one call, its blocks of m pixels, then its
// partial block. Every tap of every pixel
// reads real memory: the row itself when no pixel reaches past an edge
// (or where the kernels leave those taps out: DataPlan::dw_edges), else
// its zero-padded copy.
void JitDataExecutor::direct_item(const char* dd, const char* wp, char* dst, int64_t row, int64_t seg, int64_t cb,
                                  const DataKernelArgs& rep, int64_t chunk, float* acc_row, ThreadCtx& ctx) const {
    const DataGeometry& g = plan_.geo;
    const DataChannelBlocks& cbs = plan_.cb;
    std::vector<RowTap>& rts = ctx.row_taps;
    const int64_t segs = plan_.segments;
    // Segments: the row taps' rows hold the segment's window from pixel w0.
    const int64_t w0 = segs > 1 ? seg_windows_[static_cast<size_t>(seg)].first : 0;
    // The same row's taps serve its next channel block or oc chunk: no row
    // was fetched since, so the padded copies are still where they were.
    if (ctx.row_taps_row != row * segs + seg) {
        rts.clear();
        for_each_tap_row(g, row, [&](int64_t tap, int64_t dd_row) {
            const char* src = dd + (dd_row - ctx.dd_row0) * ctx.dd_row_elems * es_;
            if (segs > 1) {
                const auto [a, b] = seg_windows_[static_cast<size_t>(seg)];
                const int64_t first = seg_inside_[static_cast<size_t>(seg)].first;
                const char* from = src + (first - ctx.dd_px0) * dd_str_.w * es_;
                add_row_tap(rts, tap, ctx.rows.window(dd_row * segs + seg, from, es_, a, b));
            } else {
                add_row_tap(rts, tap, plan_.padded_rows ? ctx.rows.get(dd_row, src, es_) : src);
            }
        });
        ctx.row_taps_row = row * segs + seg;
    }
    const bool dw = plan_.path == DataPath::depthwise, last = cb % cbs.per_group + 1 == cbs.per_group;
    const int64_t grp = dw ? 0 : cb / cbs.per_group, blk = cb % cbs.per_group;
    const int64_t width = cbs.width(last);
    const int64_t ocg = dw ? 1 : p_.ocg, ocg_w = w_oc_rows(), oc0 = chunk * plan_.oc_chunk;
    const int64_t noc = std::min(plan_.oc_chunk, ocg - oc0);
    const int64_t ksp = p_.k_sp();
    // (W in place: the user's, the block's channels of every tap.)
    const char* wblock = plan_.w_in_place
                                 ? wp + blk * cbs.block * es_
                                 : wp + (grp * cbs.padded() * ksp * ocg_w + blk * cbs.block * ksp * ocg_w + oc0 * width) *
                                                plan_.w_elem_bytes;
    const int64_t chan_dd = dw ? blk * cbs.block : grp * ocg + oc0;
    // Elements of the row's pixel 0 (NCX windows of a segment: before the
    // window's start; every offset from it lies inside).
    const int64_t row_off = (row - ctx.dst_row0) * ctx.dst_row_elems - ctx.dst_px0 * dst_str_.w;
    const int64_t chan_off = dw ? blk * cbs.block : grp * p_.icg + blk * cbs.block;
    const int64_t m = plan_.blk.m;
    // 16-bit outputs and AVX2: the W phases no tap reaches (all of them in
    // a row no kernel row reaches: a strided layer's inserted zeros) are
    // written once for every channel, by the row's first channel block and
    // oc chunk, instead of by a kernel call per phase, channel block and
    // chunk (a phase's pixels are never another's: no item writes what
    // another computes). AMD Zen 5, ResNet-50 1x1 s2 layers, mb 32, 2
    // threads, min of 5 per case: bf16 / f16 0.96-1.16x (512 -> 1024 and
    // 1024 -> 2048: 1.05-1.16x). AVX-512 f32 rows, twice the bytes, ran
    // 0.91-1.06x: their zeros stay with the kernels, where the streaming
    // stores of each channel block interleave with the others' FMAs.
    // AVX2's channel blocks are 96 bytes (three vectors), and its kernels
    // zeroed each pixel in pieces of that, block after block: zeros apart
    // in f32 against that (AMD Zen 3, 2 threads, tools/sweep_ab.py --min,
    // the six ResNet-50 1x1 s2 layers) 1.07-1.44x at mb 8 (geomean 1.18x,
    // min of 7), 0.93-1.27x at mb 32 (1.15x, min of 5).
    // Rows no kernel row reaches are zeroed apart in every case: a call per
    // phase and channel block saves nothing there, and the row's host work
    // was half a 3D strided 1x1 layer's time (17 channels, 8-pixel rows).
    // AVX-512 f32, 2 threads, min of 5, NXC: that layer 1.15-1.18x (mb 8 /
    // 32), ResNet-50's 1x1 s2 layers 0.99-1.05x; NCX 0.99-1.02x.
    const bool zeros_apart = es_ == 2 || plan_.isa == Isa::avx2 || rts.empty();
    auto zero_phase = [&](int64_t r) { return rts.empty() || phases_[static_cast<size_t>(r)].empty(); };
    // (NCX windows: every item, into its own window.)
    // (Segments: the segment's pixels, which are those of its phase ranges.)
    if (zeros_apart && (cb == 0 || plan_.ncx_windows) && chunk == 0) {
        const int64_t px_bytes = dst_str_.w * es_;
        auto zero = [&](int64_t x, int64_t n) {
            zero_bytes(dst + (row_off * es_ + x * px_bytes), n * px_bytes, ctx.nt, plan_.isa);
        };
        if (rts.empty()) {
            zero(plan_.seg_first(seg), plan_.seg_first(seg + 1) - plan_.seg_first(seg));
        } else {
            for (int64_t r = 0; r < g.stride[2]; ++r) {
                const auto [j0, j1] = plan_.seg_range(r, seg);
                for (int64_t j = j0; zero_phase(r) && j < j1; ++j) zero(r + j * g.stride[2], 1);
            }
        }
    }
    for (int64_t r = 0; r < g.stride[2]; ++r) {
        if (zeros_apart && zero_phase(r)) continue;
        const auto [j0, j1] = plan_.seg_range(r, seg);
        const std::vector<PhaseTap>& taps = phases_[static_cast<size_t>(r)];
        // One call: the phase's full blocks, then its partial block (the
        // kernel's tail_m) in the same rep, unless a later segment has it.
        // Element offsets of the first pixel; the f32 partial sums use the
        // same offsets in the per-thread row.
        const int64_t off = chan_off + (r + j0 * g.stride[2]) * dst_str_.w;
        float* acc = acc_row ? acc_row + off : reinterpret_cast<float*>(dst + (row_off + off) * es_);
        const PhaseCall pc{(j1 - j0) / m, j0 - w0, seg + 1 == segs};
        direct_call(rts, taps, pc, phase_kernel(r, last), wblock, chan_dd, dst + (row_off + off) * es_, acc,
                    last, noc, chunk, rep, ctx);
    }
}

// Builds the entries (every valid (kd, kh) row × W tap of the phase) from
// the row's first pixel and calls the phase's kernel.
void JitDataExecutor::direct_call(const std::vector<RowTap>& rts, const std::vector<PhaseTap>& taps,
                                  const PhaseCall& pc, const DataKernel& k, const char* wblock, int64_t chan_dd, char* dst, float* acc,
                                  bool last, int64_t noc, int64_t chunk, const DataKernelArgs& reps,
                                  ThreadCtx& ctx) const {
    const int64_t kw_n = plan_.geo.k[2];
    const int64_t ocg_w = w_oc_rows();
    const int64_t width = plan_.cb.width(last);
    const int64_t row_es = plan_.widen_rows ? 4 : es_;
    const int64_t pix_bytes = plan_.dd_pitch;
    ctx.entries.clear();
    if (plan_.dw_row_pairs()) {
        // Pairs of entries: the row and its partner kh + step of the same kd
        // (the next valid row, if any), or the row alone (partner null).
        const int64_t kh_n = plan_.geo.k[1], step = plan_.row_pair_step, ksp = p_.k_sp();
        for (size_t i = 0; i < rts.size();) {
            const RowTap& a = rts[i];
            const bool paired = i + 1 < rts.size() && rts[i + 1].tap_dh == a.tap_dh + step &&
                                rts[i + 1].tap_dh / kh_n == a.tap_dh / kh_n;
            const char* b = paired ? rts[i + 1].dd_row : nullptr;
            i += paired ? 2 : 1;
            for (const PhaseTap& pt : taps) {
                const int64_t off = chan_dd * row_es + (pt.base + pc.shift) * pix_bytes;
                const int64_t tap = (paired ? 0 : ksp) + a.tap_dh * kw_n + pt.kw;  // dwords of lanes
                add_entry(ctx.entries, a.dd_row + off, wblock + tap * width * 4);
                add_entry(ctx.entries, b ? b + off : nullptr, nullptr);
                if (plan_.dw_row_taps) break;
            }
        }
    } else {
        for (const RowTap& rt : rts)
            for (const PhaseTap& pt : taps) {
                const int64_t tap = rt.tap_dh * kw_n + pt.kw;
                const char* w = plan_.w_in_place ? wblock + w_tap_offset(tap) * es_
                                                 : wblock + tap * ocg_w * width * plan_.w_elem_bytes;
                add_entry(ctx.entries, rt.dd_row + chan_dd * row_es + (pt.base + pc.shift) * pix_bytes, w);
                if (plan_.dw_row_taps) break;  // the phase's first tap stands for the row's taps
            }
    }
    DataKernelArgs a = call_args(reps, noc, chunk, ctx);
    a.dst = dst;
    a.acc = acc;
    a.nblocks = pc.nblocks;
    a.tail = pc.tail;
    if (plan_.dw_prefetch_rows && !ctx.entries.empty())
        a.dd_pf = static_cast<const char*>(ctx.entries[0].dd) + ctx.dd_row_elems * es_;
    k(a);
}

// Col path: threads own contiguous ranges of diff_src rows (n, id, ih). A
// 16-bit output accumulates in f32 image rows, rounded once at the end.
void JitDataExecutor::run_col(const char* dd, const char* wp, char* dst, int threads) const {
    const int64_t per_image = p_.in[0] * p_.in[1];
    const int64_t row_elems = p_.in[2] * p_.ic();
    DataThreadGrid grid = plan_.grid;
    grid.threads = threads;
    const bool ncx = !p_.nxc && !plan_.scratch.whole_nxc;
    const int64_t dd_rows = p_.out[0] * p_.out[1];  // an image's
    for_each_thread(threads, [&](int t) {
        const ScratchLease colbuf(Scratch::data_col, plan_.col_pixels * plan_.cb.padded() * 4);
        const ScratchLease rows(Scratch::data_col_rows, plan_.scratch.col_rows_floats * 4);
        const ScratchLease cvt(Scratch::data_cvt, plan_.scratch.cvt_floats * 4);
        const ScratchLease dd_nxc(Scratch::data_dd_nxc, plan_.scratch.dd_nxc_elems * es_);
        const ScratchLease dst_nxc(Scratch::data_dst_nxc, plan_.scratch.dst_nxc_elems * es_);
        // One run list per (group, chunk of a row), each kept from row to
        // row (and image to image) while its pattern holds.
        std::vector<ColRuns> runs(static_cast<size_t>(p_.g * col_row_chunks()));
        const auto [lo, hi] = grid.range(t);
        for (int64_t n = lo / per_image; n * per_image < hi; ++n) {
            const int64_t ra = std::max(lo, n * per_image) - n * per_image;
            const int64_t rb = std::min(hi, (n + 1) * per_image) - n * per_image;
            const char* image_dd = dd;
            char* image = dst + n * per_image * row_elems * es_;
            if (ncx) {  // image n in NXC, at its place in a virtual NXC diff_dst; diff_src rows in scratch
                ncx_rows_to_window(dd, dd_nxc.get(),
                                   {es_, p_.oc(), dd_rows, p_.out[2], 0, p_.oc(), n * dd_rows, (n + 1) * dd_rows},
                                   plan_.isa);
                image_dd = bytes_before(dd_nxc.get(), n * dd_rows * p_.out[2] * p_.oc() * es_);
                image = dst_nxc.get();
            }
            float* target = rows.get() ? rows.floats() : reinterpret_cast<float*>(image);
            col_rows(image_dd, wp, target, n, ra, rb, colbuf.floats(), cvt.floats(), runs);
            if (rows.get())
                round_(rows.floats() + ra * row_elems, image + ra * row_elems * es_, (rb - ra) * row_elems);
            if (ncx)
                window_to_ncx_rows(image + ra * row_elems * es_, dst,
                                   {es_, p_.ic(), per_image, p_.in[2], 0, p_.ic(), n * per_image + ra,
                                    n * per_image + rb},
                                   plan_.isa, plan_.window_nt);
        }
        if (plan_.window_nt) _mm_sfence();  // streaming stores visible before the join
    });
}

// diff_src rows [ra, rb) (flattened id * IH + ih) of image n, f32 rows of
// `image` (row 0 first): zero them, then for every diff_dst row that reaches
// them, in increasing order, the column GEMM and the scatter of its columns
// into the owned rows.
void JitDataExecutor::col_rows(const char* dd, const char* wp, float* image, int64_t n, int64_t ra, int64_t rb,
                               float* colbuf, float* cvt, std::vector<ColRuns>& runs) const {
    const Problem& p = p_;
    const int64_t ic = p.ic(), oc = p.oc(), iw_n = p.in[2], row_floats = iw_n * ic;
    const NxcStrides ds = nxc_strides(p.out, oc), ss = nxc_strides(p.in, ic);
    for (int64_t r = ra; r < rb; ++r)
        std::memset(image + r * ss.h, 0, static_cast<size_t>(row_floats) * 4);
    const DataChannelBlocks& cb = plan_.cb;
    const int64_t padded = cb.padded(), m = plan_.blk.m;
    std::vector<ColTarget> targets;
    const int64_t row_chunks = col_row_chunks(), dd_pix = kernel_dd_pitch();
    for (int64_t od = 0; od < p.out[0]; ++od)
        for (int64_t oh = 0; oh < p.out[1]; ++oh) {
            targets.clear();
            for (int64_t kd = 0; kd < p.k[0]; ++kd)
                for (int64_t kh = 0; kh < p.k[1]; ++kh) {
                    const int64_t id = od * p.stride[0] - p.pad_begin[0] + kd * p.dil[0];
                    const int64_t ih = oh * p.stride[1] - p.pad_begin[1] + kh * p.dil[1];
                    const int64_t r = id * p.in[1] + ih;
                    if (id < 0 || id >= p.in[0] || ih < 0 || ih >= p.in[1] || r < ra || r >= rb) continue;
                    targets.push_back({kd * p.k[1] + kh, image + r * ss.h});
                }
            if (targets.empty()) continue;
            const char* dd_row = dd + (n * ds.n + od * ds.d + oh * ds.h) * es_;
            for (int64_t grp = 0; grp < p.g; ++grp)
                for (int64_t ow0 = 0; ow0 < p.out[2]; ow0 += plan_.col_pixels) {
                    const int64_t px = std::min(plan_.col_pixels, p.out[2] - ow0);
                    const char* chunk_dd = dd_row + (ow0 * oc + grp * p.ocg) * es_;
                    if (plan_.col_widened) {  // px pixels of ocg channels, f32, once for every lane block
                        if (p.g == 1)
                            widen_(chunk_dd, cvt, px * oc);
                        else
                            for (int64_t j = 0; j < px; ++j) widen_(chunk_dd + j * oc * es_, cvt + j * p.ocg, p.ocg);
                        chunk_dd = reinterpret_cast<const char*>(cvt);
                    }
                    for (int64_t b = 0; b < cb.per_group; ++b) {
                        const bool last = b + 1 == cb.per_group;
                        const DataEntry e{chunk_dd,
                                          wp + (grp * padded + b * cb.block) * plan_.ocg_w * plan_.w_elem_bytes};
                        DataKernelArgs a;
                        a.entries = &e;
                        a.nentries = 1;
                        a.noc = p.ocg;
                        a.dst = colbuf + b * cb.block;
                        a.acc = colbuf + b * cb.block;
                        a.cvt = cvt;
                        a.nblocks = px / m;
                        if (a.nblocks) kernel(m, last)(a);
                        if (px % m == 0) continue;
                        const DataEntry er{static_cast<const char*>(e.dd) + px / m * m * dd_pix, e.w};
                        a.entries = &er;
                        a.dst = colbuf + b * cb.block + px / m * m * padded;
                        a.acc = static_cast<float*>(a.dst);
                        a.nblocks = 1;
                        kernel(px % m, last)(a);
                    }
                    scatter_columns(colbuf, px, ow0, grp, targets,
                                    runs[static_cast<size_t>(grp * row_chunks + ow0 / plan_.col_pixels)]);
                }
        }
}

// col2im for px diff_dst pixels from ow0: column lanes (kd, kh, kw, ic)
// added into the target rows in a fixed order (independent of the thread
// partition). Pixels j and j+1 write overlapping runs of a row, and a load
// that half-overlaps an earlier store waits for it to reach the cache; so
// the pixels go in `spread` passes, j = pass, pass + spread, ..., whose
// runs' vectors are disjoint (consecutive read-modify-writes never overlap;
// counting the masked tail vectors' reach, not only the taps' pixels: one
// thread, EfficientNet-B0 stem 10 % faster, 1D 7-tap first layers 12 %).
void JitDataExecutor::scatter_columns(const float* col, int64_t px, int64_t ow0, int64_t grp,
                                      const std::vector<ColTarget>& targets, ColRuns& runs) const {
    const Problem& p = p_;
    const int64_t ic = p.ic(), icg = p.icg, padded = plan_.cb.padded(), kw_n = p.k[2], dil = p.dil[2];
    // Pixels whose runs' vectors (whole vectors: the masked tail's too) may
    // overlap go in different passes.
    const int64_t vlen = plan_.isa >= Isa::avx512_core ? 16 : 8;
    auto whole = [&](int64_t n) { return (n + vlen - 1) / vlen * vlen; };
    const int64_t reach = p.g == 1 && dil == 1 ? whole(p.ext(2) * ic)  // floats a pixel's runs may touch
                                               : (p.ext(2) - 1) * ic + whole(icg);
    const int64_t spread = std::min(px, (reach + p.stride[2] * ic - 1) / (p.stride[2] * ic));
    runs.rows.clear();
    for (const ColTarget& t : targets) runs.rows.push_back(t.row);
    const std::array<int64_t, 3> head{ow0, px, grp};
    bool same = runs.key.size() == head.size() + targets.size() &&
                std::equal(head.begin(), head.end(), runs.key.begin());
    for (size_t i = 0; same && i < targets.size(); ++i) same = runs.key[head.size() + i] == targets[i].tap_dh;
    if (!same) {
        runs.key.assign(head.begin(), head.end());
        for (const ColTarget& t : targets) runs.key.push_back(t.tap_dh);
        // At most a run per (pixel, target, kw); written field by field (a
        // temporary copied in whole stalls on its own stores).
        const auto most = static_cast<size_t>(px * static_cast<int64_t>(targets.size()) * kw_n);
        if (runs.list.size() < most) runs.list.resize(most);  // never shrinks: no refill per call
        size_t count = 0;
        auto add = [&](int64_t target, int64_t d, int64_t c, int64_t n) {
            ColRun& r = runs.list[count++];
            r.target = target;
            r.d_off = d;
            r.s_off = c;
            r.n = n;
        };
        for (int64_t pass = 0; pass < spread; ++pass)
        for (int64_t j = pass; j < px; j += spread) {
            const int64_t iw0 = (ow0 + j) * p.stride[2] - p.pad_begin[2];
            const int64_t kw_lo = iw0 >= 0 ? 0 : (-iw0 + dil - 1) / dil;
            const int64_t kw_hi = iw0 >= p.in[2] ? 0 : std::min(kw_n, (p.in[2] - 1 - iw0) / dil + 1);
            for (size_t ti = 0; ti < targets.size(); ++ti) {
                const int64_t t = static_cast<int64_t>(ti);
                const int64_t c = j * padded + targets[ti].tap_dh * kw_n * icg, d = grp * icg;
                if (dil == 1 && icg == ic) {  // the taps' pixels are adjacent: one run
                    if (kw_hi > kw_lo) add(t, d + (iw0 + kw_lo) * ic, c + kw_lo * icg, (kw_hi - kw_lo) * icg);
                    continue;
                }
                for (int64_t kw = kw_lo; kw < kw_hi; ++kw) add(t, d + (iw0 + kw * dil) * ic, c + kw * icg, icg);
            }
        }
        runs.count = count;
    }
    if (plan_.isa >= Isa::avx512_core)
        add_runs_avx512(runs.list.data(), runs.count, runs.rows.data(), col);
    else
        add_runs_avx2(runs.list.data(), runs.count, runs.rows.data(), col);
}

std::string JitDataExecutor::describe() const {
    std::ostringstream os;
    os << plan_.to_string() << "  kernels " << built_ << " (cache hits " << hits_ << ")";
    return os.str();
}

// NCX windows: the largest item's rows. Items start every group_rows rows,
// so their windows repeat after lcm(group_rows, rows an image) rows (a
// truncated last item reads a subset of a full one's rows): one period.
void size_windows(DataPlan* pl) {
    const int64_t image = pl->geo.in[0] * pl->geo.in[1];
    const int64_t period = pl->group_rows / std::gcd(pl->group_rows, image) * image;
    for (int64_t r0 = 0; r0 < std::min(pl->rows, period); r0 += pl->group_rows) {
        const ItemWindow w = item_rows(*pl, r0, std::min(pl->rows, r0 + pl->group_rows));
        pl->scratch.window_dd_rows = std::max(pl->scratch.window_dd_rows, w.dd_hi - w.dd_lo);
        pl->scratch.window_dst_rows = std::max(pl->scratch.window_dst_rows, w.dst_hi - w.dst_lo);
    }
    const DataGeometry& g = pl->geo;
    pl->scratch.window_dd_px = pl->segments > 1 ? 0 : g.out[2];
    pl->scratch.window_dst_px = pl->segments > 1 ? 0 : g.in[2];
    const auto windows = pl->segments > 1 ? seg_windows(*pl) : std::vector<std::pair<int64_t, int64_t>>();
    for (int64_t s = 0; s < static_cast<int64_t>(windows.size()); ++s) {
        const auto [x0, x1] = window_inside(*pl, windows[static_cast<size_t>(s)]);
        pl->scratch.window_dd_px = std::max(pl->scratch.window_dd_px, x1 - x0);
        pl->scratch.window_dst_px = std::max(pl->scratch.window_dst_px, pl->seg_first(s + 1) - pl->seg_first(s));
    }
}

}  // namespace

std::unique_ptr<Executor> make_jit_data_executor(const Problem& p, Isa isa, std::string* why) {
    if (auto dot = make_jit_data_dot_executor(p, isa)) return dot;
    if (auto ncx = make_jit_data_ncx_executor(p, isa)) return ncx;
    if (auto dw = make_jit_dw_rows_executor(p, isa)) return dw;
    const int threads = op_threads(p);
    DataPlan plan;
    if (!find_or_make_plan(data_plan_cache(), "data", p, isa, threads, &plan, [&](DataPlan* made) {
            if (!make_data_plan(p, isa, threads, made, why)) return false;
            if (made->ncx_windows) size_windows(made);
            return true;
        }))
        return nullptr;
    return std::make_unique<JitDataExecutor>(p, plan);
}

}  // namespace convgrad::detail
