// Depthwise layers in NCX along their rows (both gradients).
//
// A depthwise layer (one input and one output channel a group) in NCX keeps
// each channel's rows contiguous along W. With unit stride along W both
// gradients vectorise along the row itself (jit/dw_row_kernel.hpp): f32
// lanes hold consecutive pixels of one channel, each tap a vector load
// one dilation further along the same row. The other paths vectorise over
// channels and so need NXC: they transpose every row they touch into
// per-thread NXC windows and diff_src back, which on long rows (Mamba's
// causal k4 convolutions, Conv-TasNet's dilated k3 ones) cost 3-6 times
// the NXC layer. Rows of fewer than kMinRowPixels keep those paths.
//
// The lines a call reads (diff_dst for the data gradient, src for the
// weight gradient) need their padding written out only where taps reach
// past them. Planes of short rows (at most kPlaneRowPixels, weight
// gradients kPlaneRowPixelsWeights; the plane's copy at most kPlaneBytes)
// are copied whole into per-thread rows, each line once, the padding
// columns zeroed once a run: one call a row. Longer
// rows are cut into pieces of at most kPiecePixels: the pixels whose taps
// all read inside the line read it in place; the ones at either end read a
// per-thread copy of their part of the line with the padding as zeros.
//
// Data gradient: work items are (diff_src row, piece), or (image, channel)
// planes, contiguous ranges over the threads that a thread which runs out
// takes from (ItemQueue); a call sums every (kd, kh) diff_dst row that
// reaches its row, so each pixel is stored once, final.
// Weight gradient: work items are blocks of channels (shared the same way),
// each run image by image; a call takes the (kd, kh) src rows one diff_dst
// row reaches (as many as the registers hold) and adds into one f32 vector
// a tap in a fixed order (image, output row, piece, kd, kh), whose lanes
// are summed at the end.
// Neither result depends on the thread count.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "jit/dw_row_kernel.hpp"
#include "ops/executor.hpp"
#include "ops/lane_sum.hpp"
#include "ops/numeric.hpp"
#include "ops/parallel.hpp"
#include "ops/problem.hpp"
#include "ops/scratch.hpp"

namespace convgrad::detail {
namespace {

// Rows of at least kMinRowPixels pixels along W take the path (AMD Zen 5,
// 2 threads, f32 / bf16, against the NXC windows; docs/PERFORMANCE.md):
// 1D rows of 256-8000 pixels 1.3-8.8x, 2D 3x3 rows of 256-4096 pixels
// 0.91-6.0x; rows of 112 pixels (MobileNet-style planes) 0.25-1.18x, 128
// 0.81-2.5x. AVX2 from kMinRowPixelsAvx2: its windows run slower (rows of
// 56 and 112 pixels 1.2-3.4x, 28 0.59-2.1x, 14 0.2-1.9x).
constexpr int64_t kMinRowPixels = 256;
constexpr int64_t kMinRowPixelsAvx2 = 56;
// Weight gradients: vectors a step (n) and the kernels' register budget
// for one f32 vector a tap: longer kernels keep the other paths (31 taps
// in two chunks ran 0.66-0.94x of them).
constexpr int kWeightsStep = 4;
constexpr int kDataStep = 8;
// The longest piece: balances rows few and long over the threads.
constexpr int64_t kPiecePixels = 4096;
// Weight gradients: channels whose tap vectors a thread keeps at once.
constexpr int64_t kChannelBlock = 64;
// Planes whose rows are at most kPlaneRowPixels and whose padded copy is at
// most kPlaneBytes are copied whole, each line once, into per-thread rows
// with the padding written out: one call a row, no pieces.
constexpr int64_t kPlaneRowPixels = 1024;
// Weight gradients copy planes of rows of at most kPlaneRowPixelsWeights:
// rows of 1024 pixels read in place ran 1.13-1.38x (1D, 2D 3x3), of 256-512
// pixels 0.65-0.89x (1D).
constexpr int64_t kPlaneRowPixelsWeights = 512;
constexpr int64_t kPlaneBytes = int64_t(512) << 10;
// Data gradients with at least this much diff_src (f32: kStreamingF32Bytes)
// stream it, where diff_src is 64-byte aligned, from the pieces that start
// on a line (AMD Zen 5, 2 threads, 27 layers, against ordinary stores, min
// of 3: 16-bit 1.0-1.5x from 8 MB; f32 1.11-1.26x from 33 MB, 0.79-0.93x
// at 4-25 MB, whose outputs the timing loop keeps in L3).
constexpr int64_t kStreamingOutputBytes = int64_t(8) << 20;
constexpr int64_t kStreamingF32Bytes = int64_t(32) << 20;

struct Piece {
    int64_t x0 = 0, x1 = 0;  // pixels of the row the calls write (data) or walk (weights)
    bool inside = true;      // every tap reads inside the line: read in place
    int kernel = 0;          // its length's kernels: kernel(kernel, ...)
};

struct DwRowPlan {
    Isa isa = Isa::avx2;
    bool weights = false;
    int n = 1, vlen = 8;
    int64_t row_px = 0;   // pixels of the rows calls walk: diff_src (data) or diff_dst (weights)
    int64_t line_px = 0;  // pixels of the lines they read: diff_dst (data) or src (weights)
    // A call's pixel x reads line pixels [x + lo, x + lo + halo].
    int64_t lo = 0, halo = 0;
    std::vector<Piece> pieces;
    int64_t items = 0;  // data: diff_src rows × pieces (planes: images × channels); weights: channels
    int64_t max_piece = 0;
    // Data gradients: diff_src written with streaming stores (where it is
    // 64-byte aligned) by the pieces that start on a line.
    bool stream = false;
    // Planes copied whole: `lines` rows of line_pitch pixels, pixel q of a
    // row the line's pixel q + lo, the line's pixels at [qa, qb).
    bool planes = false;
    int64_t lines = 0, line_pitch = 0, qa = 0, qb = 0;
    int max_rows = 1;  // weights: src rows a call (data: 1)
};

// The kernels' ISA: only bf16 stores use avx512_core_bf16.
Isa kernel_isa(const Problem& p, Isa isa) {
    return std::min(isa, p.dt == data_type::bf16 ? Isa::avx512_core_bf16 : Isa::avx512_core);
}

bool accepts(const Problem& p, Isa isa) {
    if (isa < Isa::avx2 || p.nxc || p.icg != 1 || p.ocg != 1 || p.stride[2] != 1) return false;
    if (p.src_str.sp[2] != 1 || p.dst_str.sp[2] != 1) return false;
    const bool weights = p.alg == Alg::weights;
    if ((weights ? p.out[2] : p.in[2]) < (isa >= Isa::avx512_core ? kMinRowPixels : kMinRowPixelsAvx2)) return false;
    if (p.k[2] > (weights ? dw_row_max_taps(kernel_isa(p, isa), kWeightsStep) : 64)) return false;
    // Displacements of a call's farthest tap fit 32 bits.
    return p.ext(2) * 4 < (int64_t(1) << 30);
}

void add_pieces(DwRowPlan* pl, int64_t x0, int64_t x1, bool inside) {
    for (int64_t x = x0; x < x1; x += kPiecePixels)
        pl->pieces.push_back({x, std::min(x1, x + kPiecePixels), inside, 0});
}

DwRowPlan make_plan(const Problem& p, Isa isa) {
    DwRowPlan pl;
    pl.weights = p.alg == Alg::weights;
    pl.isa = kernel_isa(p, isa);
    pl.vlen = dw_row_vlen(pl.isa);
    pl.n = pl.weights ? kWeightsStep : kDataStep;
    if (pl.weights)
        pl.max_rows = static_cast<int>(std::min<int64_t>(p.k[0] * p.k[1], dw_row_max_rows(pl.isa, pl.n, int(p.k[2]))));
    pl.row_px = pl.weights ? p.out[2] : p.in[2];
    pl.line_px = pl.weights ? p.in[2] : p.out[2];
    pl.halo = p.ext(2) - 1;
    pl.lo = pl.weights ? -p.pad_begin[2] : p.pad_begin[2] - pl.halo;
    const int64_t es = static_cast<int64_t>(dtype_size(p.dt));
    const int64_t out_bytes = p.mb * p.ic() * p.in_sp() * es;
    const bool lines = p.src_str.n * es % kCacheLineBytes == 0 && p.src_str.c * es % kCacheLineBytes == 0 &&
                       p.src_str.sp[0] * es % kCacheLineBytes == 0 && p.src_str.sp[1] * es % kCacheLineBytes == 0;
    const int64_t least = p.dt == data_type::f32 ? kStreamingF32Bytes : kStreamingOutputBytes;
    pl.stream = !pl.weights && out_bytes >= least && lines;
    pl.lines = pl.weights ? p.in[0] * p.in[1] : p.out[0] * p.out[1];
    pl.line_pitch = pl.row_px + pl.halo;
    pl.qa = std::clamp<int64_t>(-pl.lo, 0, pl.line_pitch);
    pl.qb = std::clamp<int64_t>(pl.line_px - pl.lo, pl.qa, pl.line_pitch);
    const int64_t plane_rows = pl.weights ? kPlaneRowPixelsWeights : kPlaneRowPixels;
    if (pl.row_px <= plane_rows && pl.lines * pl.line_pitch * es <= kPlaneBytes) {
        pl.planes = true;
        pl.pieces.push_back({0, pl.row_px, true, 0});
        pl.max_piece = pl.row_px;
        pl.items = pl.weights ? p.oc() : p.mb * p.ic();
        return pl;
    }
    // Pixels [a, b) read inside the line.
    const int64_t a = std::clamp<int64_t>(-pl.lo, 0, pl.row_px);
    const int64_t b = std::clamp<int64_t>(pl.line_px - pl.halo - pl.lo, a, pl.row_px);
    add_pieces(&pl, 0, a, false);
    add_pieces(&pl, a, b, true);
    add_pieces(&pl, b, pl.row_px, false);
    for (const Piece& pc : pl.pieces) pl.max_piece = std::max(pl.max_piece, pc.x1 - pc.x0);
    pl.items = pl.weights ? p.oc() : p.mb * p.ic() * p.in[0] * p.in[1] * int64_t(pl.pieces.size());
    return pl;
}

class DwRowExecutor final : public Executor {
public:
    DwRowExecutor(const Problem& p, const DwRowPlan& plan);
    void run(const void* in0, const void* in1, void* out) const override;
    std::string describe() const override;
    int threads() const override { return op_threads(p_); }

private:
    // nt: diff_src is 64-byte aligned and the plan streams.
    void run_data(const char* dd, const float* w, char* out, ItemQueue& items, int t, bool nt) const;
    void run_weights(const char* src, const char* dd, char* out, ItemQueue& blocks, int t, int64_t block) const;
    // Weight gradients: channels a block, up to kChannelBlock, and at
    // least four blocks a thread to share.
    int64_t weights_block(int threads) const {
        return std::clamp<int64_t>(div_up(plan_.items, 4 * int64_t(threads)), 1, kChannelBlock);
    }
    // plane: the channel's src rows copied whole (planes), or null.
    // pairs: room for a (line, tap vectors) pair a (kd, kh) row; copy: for
    // a padded line copy a (kd, kh) row.
    void add_channel(const char* src, const char* dd, int64_t img, int64_t c, float* v, char* copy,
                     const char* plane, const void** pairs) const;
    // Planes: the `lines` rows of one channel's line plane at `from` into
    // `to`, pitch line_pitch; zero_pads: the padding columns of `to`.
    void copy_plane(const char* from, const DataStrides& str, char* to) const;
    void zero_pads(char* to) const;
    void store_channel(const float* v, int64_t c, char* out) const;
    // The piece's part of a line (pixels [x0 + lo, x1 + lo + halo)) into
    // `to`, the pixels outside the line zero.
    void copy_line(const char* line, const Piece& pc, char* to) const;
    int64_t line_copy_bytes() const { return (plan_.max_piece + plan_.halo) * es_; }
    // A piece's kernel: weight gradients by their src rows a call (1 ..
    // max_rows), data gradients with streaming stores or not.
    const DwRowKernel& kernel(const Piece& pc, int rows, bool nt) const {
        return *(nt ? kernels_nt_ : kernels_)[static_cast<size_t>(pc.kernel * plan_.max_rows + rows - 1)];
    }
    // Row (d, h) of channel c of image img of an activation tensor.
    template <typename T>
    T* row(T* base, const DataStrides& str, int64_t img, int64_t c, int64_t d, int64_t h) const {
        return base + (img * str.n + c * str.c + d * str.sp[0] + h * str.sp[1]) * es_;
    }

    Problem p_;
    DwRowPlan plan_;
    int64_t es_ = 4;
    std::vector<std::shared_ptr<const DwRowKernel>> kernels_, kernels_nt_;  // ordinary / streaming stores
    int built_ = 0, hits_ = 0;
};

DwRowExecutor::DwRowExecutor(const Problem& p, const DwRowPlan& plan)
    : p_(p), plan_(plan), es_(static_cast<int64_t>(dtype_size(p.dt))) {
    // A kernel a piece length: pieces of equal length share it.
    std::vector<int64_t> lengths;
    for (Piece& pc : plan_.pieces) {
        const int64_t len = pc.x1 - pc.x0;
        const auto at = std::find(lengths.begin(), lengths.end(), len);
        pc.kernel = static_cast<int>(at - lengths.begin());
        if (at != lengths.end()) continue;
        lengths.push_back(len);
        const int64_t step = int64_t(plan_.n) * plan_.vlen, rem = len % step;
        DwRowDesc d;
        d.isa = static_cast<int32_t>(plan_.isa);
        d.dt = static_cast<int32_t>(p.dt);
        d.weights = plan_.weights;
        d.n = plan_.n;
        d.rest = static_cast<int32_t>(div_up(rem, plan_.vlen));
        d.tail = static_cast<int32_t>(rem % plan_.vlen);
        d.taps = static_cast<int32_t>(p.k[2]);
        d.tap_bytes = p.dil[2] * es_;
        // Data: ordinary and streaming stores; weights: 1 .. max_rows src
        // rows a call.
        for (int nt = 0; nt <= int(plan_.stream); ++nt)
            for (int rows = 1; rows <= plan_.max_rows; ++rows) {
                d.stream = nt;
                d.rows = plan_.weights ? rows : 0;
                bool hit = false;
                (nt ? kernels_nt_ : kernels_).push_back(get_dw_row_kernel(d, &hit));
                ++built_;
                hits_ += hit;
            }
    }
}

void DwRowExecutor::copy_line(const char* line, const Piece& pc, char* to) const {
    const int64_t first = pc.x0 + plan_.lo, end = pc.x1 + plan_.lo + plan_.halo;
    const int64_t in0 = std::clamp<int64_t>(first, 0, plan_.line_px),
                  in1 = std::clamp<int64_t>(end, in0, plan_.line_px);
    std::memset(to, 0, static_cast<size_t>((in0 - first) * es_));
    std::memcpy(to + (in0 - first) * es_, line + in0 * es_, static_cast<size_t>((in1 - in0) * es_));
    std::memset(to + (in1 - first) * es_, 0, static_cast<size_t>((end - in1) * es_));
}

void DwRowExecutor::copy_plane(const char* from, const DataStrides& str, char* to) const {
    const int64_t h = plan_.weights ? p_.in[1] : p_.out[1];
    for (int64_t r = 0; r < plan_.lines; ++r)
        std::memcpy(to + (r * plan_.line_pitch + plan_.qa) * es_,
                    from + (r / h * str.sp[0] + r % h * str.sp[1] + plan_.qa + plan_.lo) * es_,
                    static_cast<size_t>((plan_.qb - plan_.qa) * es_));
}

void DwRowExecutor::zero_pads(char* to) const {
    for (int64_t r = 0; r < plan_.lines; ++r) {
        char* row = to + r * plan_.line_pitch * es_;
        std::memset(row, 0, static_cast<size_t>(plan_.qa * es_));
        std::memset(row + plan_.qb * es_, 0, static_cast<size_t>((plan_.line_pitch - plan_.qb) * es_));
    }
}

// The items `items` hands thread t: (diff_src row, piece), or (image,
// channel) with planes; w: [channel][kd][kh][kw] f32.
void DwRowExecutor::run_data(const char* dd, const float* w, char* out, ItemQueue& items, int t, bool nt) const {
    const int64_t kdh = p_.k[0] * p_.k[1];
    const ScratchLease lines(Scratch::dw_rows_lines,
                             plan_.planes ? plan_.lines * plan_.line_pitch * es_ : kdh * line_copy_bytes());
    if (plan_.planes) zero_pads(lines.get());
    std::vector<const void*> rows(static_cast<size_t>(2 * kdh));
    // Diff_src row (id, ih) of channel c of image img, piece pc:
    // line_at(od, oh, n) the line of diff_dst row (od, oh), the call's n-th,
    // at the piece's first pixel (a padded copy where the piece needs one).
    auto run_row = [&](int64_t img, int64_t c, int64_t id, int64_t ih, const Piece& pc, auto&& line_at) {
        // The diff_dst rows that reach row (id, ih): od · s = id + pad - kd · dil.
        int64_t nrows = 0;
        for (int64_t kd = 0; kd < p_.k[0]; ++kd) {
            const int64_t zd = id + p_.pad_begin[0] - kd * p_.dil[0];
            if (zd < 0 || zd % p_.stride[0] || zd / p_.stride[0] >= p_.out[0]) continue;
            for (int64_t kh = 0; kh < p_.k[1]; ++kh) {
                const int64_t zh = ih + p_.pad_begin[1] - kh * p_.dil[1];
                if (zh < 0 || zh % p_.stride[1] || zh / p_.stride[1] >= p_.out[1]) continue;
                rows[static_cast<size_t>(2 * nrows)] = line_at(zd / p_.stride[0], zh / p_.stride[1], nrows);
                rows[static_cast<size_t>(2 * nrows + 1)] = w + (c * kdh + kd * p_.k[1] + kh) * p_.k[2];
                ++nrows;
            }
        }
        DwRowArgs a;
        a.rows = rows.data();
        a.nrows = nrows;
        a.out = row(out, p_.src_str, img, c, id, ih) + pc.x0 * es_;
        a.steps = (pc.x1 - pc.x0) / (int64_t(plan_.n) * plan_.vlen);
        kernel(pc, 1, nt && pc.x0 * es_ % kCacheLineBytes == 0)(a);
    };
    if (plan_.planes) {
        const Piece& pc = plan_.pieces[0];
        for (int64_t it = 0; items.next(t, it);) {
            const int64_t c = it % p_.ic(), img = it / p_.ic();
            copy_plane(row(dd, p_.dst_str, img, c, 0, 0), p_.dst_str, lines.get());
            for (int64_t id = 0; id < p_.in[0]; ++id)
                for (int64_t ih = 0; ih < p_.in[1]; ++ih)
                    run_row(img, c, id, ih, pc, [&](int64_t od, int64_t oh, int64_t) {
                        return lines.get() + (od * p_.out[1] + oh) * plan_.line_pitch * es_;
                    });
        }
        return;
    }
    const int64_t np = static_cast<int64_t>(plan_.pieces.size());
    for (int64_t it = 0; items.next(t, it);) {
        const Piece& pc = plan_.pieces[static_cast<size_t>(it % np)];
        int64_t r = it / np;
        const int64_t ih = r % p_.in[1], id = r / p_.in[1] % p_.in[0];
        r /= p_.in[0] * p_.in[1];
        const int64_t c = r % p_.ic(), img = r / p_.ic();
        run_row(img, c, id, ih, pc, [&](int64_t od, int64_t oh, int64_t nrow) -> const char* {
            const char* line = row(dd, p_.dst_str, img, c, od, oh);
            if (pc.inside) return line + (pc.x0 + plan_.lo) * es_;
            char* copy = lines.get() + nrow * line_copy_bytes();
            copy_line(line, pc, copy);
            return copy;
        });
    }
}

// Blocks of `block` channels, as `blocks` hands them out: each channel's taps
// summed in f32 vectors in a fixed order (image, diff_dst row, piece, kd,
// kh), their lanes summed and rounded once into the user's weights. A
// block runs image by image, so that its channels' rows are read in memory
// order (channel-major with the images inner jumped a whole image between
// rows: Mamba-style causal k4, 1536 channels x 2048 samples, f32 0.66x).
void DwRowExecutor::run_weights(const char* src, const char* dd, char* out, ItemQueue& blocks, int t,
                                int64_t block) const {
    const int64_t taps = p_.k_sp(), vlen = plan_.vlen;
    const ScratchLease acc(Scratch::dw_rows_acc, block * taps * vlen * 4);
    const int64_t kdh = p_.k[0] * p_.k[1];
    const ScratchLease line(Scratch::dw_rows_lines,
                            plan_.planes ? plan_.lines * plan_.line_pitch * es_ : kdh * line_copy_bytes());
    std::vector<const void*> pairs(static_cast<size_t>(2 * kdh));
    if (plan_.planes) zero_pads(line.get());
    for (int64_t b = 0; blocks.next(t, b);) {
        const int64_t c0 = b * block, c1 = std::min(p_.oc(), c0 + block);
        std::fill(acc.floats(), acc.floats() + (c1 - c0) * taps * vlen, 0.0f);
        for (int64_t img = 0; img < p_.mb; ++img)
            for (int64_t c = c0; c < c1; ++c) {
                if (plan_.planes)
                    copy_plane(row(src, p_.src_str, img, c, 0, 0), p_.src_str, line.get());
                add_channel(src, dd, img, c, acc.floats() + (c - c0) * taps * vlen, line.get(),
                            plan_.planes ? line.get() : nullptr, pairs.data());
            }
        for (int64_t c = c0; c < c1; ++c) store_channel(acc.floats() + (c - c0) * taps * vlen, c, out);
    }
}

// Image img's part of channel c's sums into its tap vectors v.
void DwRowExecutor::add_channel(const char* src, const char* dd, int64_t img, int64_t c, float* v, char* copy,
                                const char* plane, const void** pairs) const {
    const int64_t vlen = plan_.vlen;
    for (int64_t od = 0; od < p_.out[0]; ++od)
        for (int64_t oh = 0; oh < p_.out[1]; ++oh) {
            const char* d = row(dd, p_.dst_str, img, c, od, oh);
            for (const Piece& pc : plan_.pieces) {
                // The src rows the diff_dst row reaches: (line, tap vectors).
                int nrows = 0;
                for (int64_t kd = 0; kd < p_.k[0]; ++kd) {
                    const int64_t id = od * p_.stride[0] - p_.pad_begin[0] + kd * p_.dil[0];
                    if (id < 0 || id >= p_.in[0]) continue;
                    for (int64_t kh = 0; kh < p_.k[1]; ++kh) {
                        const int64_t ih = oh * p_.stride[1] - p_.pad_begin[1] + kh * p_.dil[1];
                        if (ih < 0 || ih >= p_.in[1]) continue;
                        const char* s = row(src, p_.src_str, img, c, id, ih);
                        const char* l = s + (pc.x0 + plan_.lo) * es_;
                        if (plane) {
                            l = plane + (id * p_.in[1] + ih) * plan_.line_pitch * es_;
                        } else if (!pc.inside) {
                            char* to = copy + nrows * line_copy_bytes();
                            copy_line(s, pc, to);
                            l = to;
                        }
                        pairs[2 * nrows] = l;
                        pairs[2 * nrows + 1] = v + (kd * p_.k[1] + kh) * p_.k[2] * vlen;
                        ++nrows;
                    }
                }
                DwRowArgs a;
                a.dd = d + pc.x0 * es_;
                a.steps = (pc.x1 - pc.x0) / (int64_t(plan_.n) * vlen);
                for (int r0 = 0; r0 < nrows; r0 += plan_.max_rows) {
                    const int rows = std::min(plan_.max_rows, nrows - r0);
                    a.rows = pairs + 2 * r0;
                    kernel(pc, rows, false)(a);
                }
            }
        }
}

// Channel c's tap vectors v: lanes summed, rounded once into the weights.
void DwRowExecutor::store_channel(const float* v, int64_t c, char* out) const {
    const int64_t vlen = plan_.vlen;
    for (int64_t kd = 0; kd < p_.k[0]; ++kd)
        for (int64_t kh = 0; kh < p_.k[1]; ++kh)
            for (int64_t kw = 0; kw < p_.k[2]; ++kw) {
                const float sum = lane_sum(v + ((kd * p_.k[1] + kh) * p_.k[2] + kw) * vlen, static_cast<int>(vlen));
                const int64_t e = c * p_.wei_str.o + kd * p_.wei_str.k[0] + kh * p_.wei_str.k[1] + kw * p_.wei_str.k[2];
                store_elem(out, e, p_.dt, sum);
            }
}

void DwRowExecutor::run(const void* in0, const void* in1, void* out) const {
    const int threads = this->threads();
    char* o = static_cast<char*>(out);
    if (plan_.weights) {
        const char* src = static_cast<const char*>(p_.swap_inputs ? in1 : in0);
        const char* dd = static_cast<const char*>(p_.swap_inputs ? in0 : in1);
        const int64_t block = weights_block(threads);
        ItemQueue blocks(div_up(plan_.items, block), threads);
        for_each_thread(threads, [&](int t) { run_weights(src, dd, o, blocks, t, block); });
        return;
    }
    // W widened to f32, [channel][kd][kh][kw].
    const int64_t taps = p_.k_sp(), c = p_.ic();
    const ScratchLease wl(Scratch::dw_rows_w, c * taps * 4);
    float* w = wl.floats();
    for (int64_t ch = 0; ch < c; ++ch)
        for (int64_t kd = 0; kd < p_.k[0]; ++kd)
            for (int64_t kh = 0; kh < p_.k[1]; ++kh)
                for (int64_t kw = 0; kw < p_.k[2]; ++kw) {
                    const int64_t e =
                            ch * p_.wei_str.o + kd * p_.wei_str.k[0] + kh * p_.wei_str.k[1] + kw * p_.wei_str.k[2];
                    w[((ch * p_.k[0] + kd) * p_.k[1] + kh) * p_.k[2] + kw] = load_elem(in1, e, p_.dt);
                }
    const char* dd = static_cast<const char*>(in0);
    const bool nt = plan_.stream && reinterpret_cast<uintptr_t>(out) % kCacheLineBytes == 0;
    ItemQueue items(plan_.items, threads);
    for_each_thread(threads, [&](int t) {
        run_data(dd, w, o, items, t, nt);
        if (nt) _mm_sfence();  // streaming stores visible before the join
    });
}

std::string DwRowExecutor::describe() const {
    std::ostringstream os;
    const int64_t step = int64_t(plan_.n) * plan_.vlen;
    os << "jit:" << isa_name(plan_.isa) << " depthwise rows along W in NCX, " << plan_.n << " vectors of " << plan_.vlen
       << " pixels a step";
    if (p_.dt != data_type::f32) os << ", " << dtype_name(p_.dt) << " widened to f32";
    os << ", threads " << threads() << "\n";
    int64_t inside = 0;
    for (const Piece& pc : plan_.pieces) inside += pc.inside ? pc.x1 - pc.x0 : 0;
    const std::string pieces = plan_.planes
                                       ? "1 (whole rows of " + std::to_string(plan_.row_px) + " pixels)"
                                       : std::to_string(plan_.pieces.size()) + " pieces of " +
                                                 std::to_string(plan_.row_px) + " pixels (" + std::to_string(inside) +
                                                 " read in place, the rest from padded copies)";
    const std::string planes = "the channel's " + std::to_string(plan_.lines) + (plan_.weights ? " src" : " diff_dst") +
                               " rows copied whole (planes), padded to " + std::to_string(plan_.line_pitch) +
                               " pixels\n";
    if (plan_.weights) {
        os << "  for block of " << weights_block(threads()) << " of " << p_.oc()
           << " channels  [contiguous ranges over threads, then shared]\n"
           << "    for image in " << p_.mb << ", channel in the block\n"
           << (plan_.planes ? "      " + planes : "") << "      for diff_dst row in " << p_.out[0] * p_.out[1]
           << ", piece in " << pieces << ", call of up to " << plan_.max_rows << " of the " << p_.k[0] * p_.k[1]
           << " (kd, kh) src rows inside\n"
           << "        for step of " << step << " pixels: " << plan_.n << " diff_dst loads, " << p_.k[2] * plan_.n
           << " FMAs a src row into " << p_.k[2] << " vectors, one a kw tap\n"
           << "  each channel's lanes summed" << (p_.dt == data_type::f32 ? "" : ", rounded") << " into the weights";
    } else {
        if (plan_.planes)
            os << "  for image in " << p_.mb << ", channel in " << p_.ic()
               << "  [contiguous ranges over threads, then shared]\n"
               << "    " << planes << "    for diff_src row in " << p_.in[0] * p_.in[1] << ", piece in " << pieces
               << "\n";
        else
            os << "  for image in " << p_.mb << ", channel in " << p_.ic() << ", diff_src row in "
               << p_.in[0] * p_.in[1] << ", piece in " << pieces << "  [contiguous ranges over threads, then shared]\n";
        const std::string in(plan_.planes ? 6 : 4, ' ');
        os << in << "for step of " << step << " pixels: for (kd, kh) diff_dst row that reaches the row: " << p_.k[2]
           << " W broadcasts, " << p_.k[2] * plan_.n << " FMAs\n"
           << in << "stored once" << (p_.dt == data_type::f32 ? "" : " (rounded)")
           << (plan_.stream ? ", streaming stores of whole lines where diff_src is 64-byte aligned" : "") << "\n"
           << "  W widened to f32 each call";
    }
    os << "\n  kernels " << built_ << " (cache hits " << hits_ << ")";
    return os.str();
}

}  // namespace

std::unique_ptr<Executor> make_jit_dw_rows_executor(const Problem& p, Isa isa) {
    if (!accepts(p, isa)) return nullptr;
    return std::make_unique<DwRowExecutor>(p, make_plan(p, isa));
}

}  // namespace convgrad::detail
