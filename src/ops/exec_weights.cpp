// JIT executor for the weight gradient (ConvolutionBackwardWeights and
// ConvTransposeBackwardWeights, the latter with its inputs swapped).
//
// Phases of one execute:
//  1. NCX only: transpose src and diff_dst into NXC scratch.
//  2. Threads over (slice, tile) pairs of the plan's grid: every (slice,
//     tile) is accumulated chunk by chunk in chunk order, slice 0 into the
//     target, slice r > 0 into partial r.
//  3. slices > 1: target += partial 1 + partial 2 + ... in slice order.
//  4. Non OC-contiguous user layout: the target was an XIO scratch; permute.
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/partitioner.h>
#include <tbb/task_arena.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "jit/bwd_weights_kernel.hpp"
#include "ops/executor.hpp"
#include "ops/plan_weights.hpp"

namespace convgrad::detail {
namespace {

using FloatBuffer = std::unique_ptr<float[]>;
FloatBuffer alloc_floats(int64_t n) { return FloatBuffer(new float[static_cast<size_t>(std::max<int64_t>(n, 1))]); }

bool verbose() {
    const char* v = std::getenv("CONVGRAD_VERBOSE");
    return v && *v && *v != '0';
}

// Runs body(i) for i in [0, n) on up to max_concurrency threads, statically.
template <typename F>
void parallel_static(int64_t n, F&& body) {
    tbb::parallel_for(tbb::blocked_range<int64_t>(0, n, 1),
                      [&](const tbb::blocked_range<int64_t>& r) {
                          for (int64_t i = r.begin(); i != r.end(); ++i) body(i);
                      },
                      tbb::static_partitioner());
}

// NCX (n, c, sp) -> dense NXC (n, sp, c).
void to_nxc(const float* in, float* out, int64_t mb, int64_t c, int64_t sp) {
    constexpr int64_t block = 64;
    const int64_t blocks = (sp + block - 1) / block;
    parallel_static(mb * blocks, [&](int64_t nb) {
        const int64_t n = nb / blocks, s0 = (nb % blocks) * block, s1 = std::min(sp, s0 + block);
        for (int64_t ch = 0; ch < c; ++ch)
            for (int64_t s = s0; s < s1; ++s) out[(n * sp + s) * c + ch] = in[(n * c + ch) * sp + s];
    });
}

// Output pixels [lo, hi) of a W row that tap kw reads inside src.
std::array<int64_t, 2> valid_ow(const WeightsGeometry& g, int64_t kw) {
    const int64_t shift = kw * g.dil[2] - g.pad[2];  // iw = ow * s + shift
    const int64_t s = g.stride[2];
    const int64_t lo = shift >= 0 ? 0 : (-shift + s - 1) / s;
    const int64_t last = g.in[2] - 1 - shift;  // ow * s <= last
    const int64_t hi = last < 0 ? 0 : std::min(g.out[2], last / s + 1);
    return {lo, std::max(lo, hi)};
}

// A thread's walk over the next chunk's memory (diff_dst rows, then src
// rows), one cache line per pixel the kernels process.
struct Prefetch {
    const char* pos = nullptr;  // nullptr: nothing left to prefetch
    const char* dst_end = nullptr;
    const char* src_begin = nullptr;
    const char* src_end = nullptr;

    // Where the next call starts, and advance past its `pixels` lines.
    const char* take(int64_t pixels) {
        const char* at = pos;
        if (!pos) return nullptr;
        pos += 64 * kPrefetchLinesPerPixel * pixels;
        if (dst_end && pos >= dst_end) {
            pos = src_begin + (pos - dst_end);
            dst_end = nullptr;
        }
        if (!dst_end && pos >= src_end) pos = nullptr;
        return at;
    }
};

// An output row (segment) of the chunk.
struct RowPos {
    int64_t n = 0, od = 0, oh = 0, seg = 0;
};

// Where one tile reads and writes; pointers are element-exact.
struct TileCall {
    const float* src;
    const float* diff_dst;
    float* diff_weights;
    int64_t wei_row_stride;  // elements
};

class JitWeightsExecutor final : public Executor {
public:
    JitWeightsExecutor(const Problem& p, const WeightsPlan& plan) : p_(p), plan_(plan) {
        // Target strides: the user's when OC-contiguous, else an XIO scratch.
        wei_str_ = p.wei_str;
        if (!plan.direct_weights) {
            wei_str_.o = 1;
            wei_str_.i = p.oc();
            wei_str_.k[2] = p.icg * p.oc();
            wei_str_.k[1] = wei_str_.k[2] * p.k[2];
            wei_str_.k[0] = wei_str_.k[1] * p.k[1];
        }
        load_kernels();
    }

    void run(const void* input0, const void* input1, void* output) const override;
    std::string describe() const override {
        return std::string("jit:") + isa_name(plan_.isa) + " " + plan_.to_string();
    }

private:
    void load_kernels();
    const WeightsKernel& kernel(int rows, bool last_n) const;
    void compute_thread(int64_t tid, const WeightsThreadGrid& grid, const float* src,
                        const float* diff_dst, float* target, float* partials) const;
    // Per-thread row lists of the current chunk, one per tap (gemm).
    struct TapRows {
        std::vector<std::vector<WeightsRow>> rows;
        std::vector<bool> built;
    };
    void run_gemm_tile(int64_t tile, const std::vector<RowPos>& chunk, bool accumulate, float* target,
                       const float* src, const float* diff_dst, TapRows& tap_rows, Prefetch& pf) const;
    void run_dw_tile(int64_t tile, const std::vector<RowPos>& chunk, bool accumulate, float* target,
                     const float* src, const float* diff_dst, std::vector<WeightsRow>& rows,
                     Prefetch& pf) const;
    void call(const WeightsKernel& k, const TileCall& c, const std::vector<WeightsRow>& rows,
              bool accumulate, Prefetch& pf) const;
    Prefetch prefetch_chunk(int64_t chunk, const float* src, const float* diff_dst) const;
    // The chunk's rows decoded once, then the kernel rows of one tap
    // restricted to output pixels [ow_lo, ow_hi).
    std::vector<RowPos>& decode_rows(std::vector<RowPos>& out, int64_t q0, int64_t q1) const;
    void build_rows(std::vector<WeightsRow>& out, const std::vector<RowPos>& chunk, int64_t kd, int64_t kh,
                    int64_t kw, int64_t ow_lo, int64_t ow_hi) const;
    void reduce_and_store(float* target, const float* partials, float* user) const;

    Problem p_;
    WeightsPlan plan_;
    WeightStrides wei_str_;
    // [rows kind][n kind]: rows kind 0 = full m, 1 = last m tile, 2 = one
    // tap (depthwise edges); n kind 0 = full tile, 1 = last (tail) tile.
    std::shared_ptr<const WeightsKernel> kernels_[3][2];
};

void JitWeightsExecutor::load_kernels() {
    const WeightsBlocking& b = plan_.blk;
    const int64_t tap_disp = plan_.geo.dil[2] * p_.ic() * 4;
    const int row_kinds[3] = {b.m, b.m_last, 1};
    for (int r = 0; r < 3; ++r) {
        if (r == 2 && b.kind != WeightsKernelKind::depthwise) continue;
        for (int last = 0; last < 2; ++last) {
            const int n = last ? b.n_last : b.n;
            const int tail = (last || b.n_tiles == 1) ? b.tail : 0;
            if (!last && b.n_tiles == 1) continue;  // the only n tile is the last
            bool hit = false;
            kernels_[r][last] = get_weights_kernel(plan_.desc(row_kinds[r], n, tail, tap_disp), &hit);
            if (verbose())
                std::fprintf(stderr, "convgrad,jit_cache,%s,%s\n", kernels_[r][last]->name().c_str(),
                             hit ? "hit" : "miss");
        }
    }
}

const WeightsKernel& JitWeightsExecutor::kernel(int rows, bool last_n) const {
    const int r = rows == plan_.blk.m ? 0 : rows == plan_.blk.m_last ? 1 : 2;
    return *kernels_[r][last_n || plan_.blk.n_tiles == 1];
}

std::vector<RowPos>& JitWeightsExecutor::decode_rows(std::vector<RowPos>& out, int64_t q0, int64_t q1) const {
    const WeightsGeometry& g = plan_.geo;
    out.clear();
    for (int64_t q = q0; q < q1; ++q) {
        RowPos r;
        int64_t rest = q;
        r.seg = rest % g.segs_per_row;
        rest /= g.segs_per_row;
        r.oh = rest % g.out[1];
        rest /= g.out[1];
        r.od = rest % g.out[0];
        r.n = rest / g.out[0];
        out.push_back(r);
    }
    return out;
}

void JitWeightsExecutor::build_rows(std::vector<WeightsRow>& out, const std::vector<RowPos>& chunk,
                                    int64_t kd, int64_t kh, int64_t kw, int64_t ow_lo, int64_t ow_hi) const {
    const WeightsGeometry& g = plan_.geo;
    const int64_t ic = p_.ic(), oc = p_.oc();
    for (const RowPos& r : chunk) {
        const int64_t id = r.od * g.stride[0] - g.pad[0] + kd * g.dil[0];
        const int64_t ih = r.oh * g.stride[1] - g.pad[1] + kh * g.dil[1];
        if (id < 0 || id >= g.in[0] || ih < 0 || ih >= g.in[1]) continue;
        const int64_t a = std::max(ow_lo, r.seg * g.segment);
        const int64_t b = std::min(ow_hi, (r.seg + 1) * g.segment);
        if (a >= b) continue;
        const int64_t iw = a * g.stride[2] - g.pad[2] + kw * g.dil[2];
        const int64_t src_pix = ((r.n * g.in[0] + id) * g.in[1] + ih) * g.in[2] + iw;
        const int64_t dst_pix = ((r.n * g.out[0] + r.od) * g.out[1] + r.oh) * g.out[2] + a;
        out.push_back({src_pix * ic * 4, dst_pix * oc * 4, b - a});
    }
}

void JitWeightsExecutor::call(const WeightsKernel& k, const TileCall& c,
                              const std::vector<WeightsRow>& rows, bool accumulate, Prefetch& pf) const {
    WeightsKernelArgs a;
    int64_t pixels = 0;
    for (const WeightsRow& r : rows) pixels += r.pixels;
    const char* at = pf.take(pixels);
    a.prefetch = at ? at : reinterpret_cast<const char*>(c.diff_dst);
    a.prefetch_step = at ? 64 * kPrefetchLinesPerPixel : 0;
    a.src = c.src;
    a.diff_dst = c.diff_dst;
    a.diff_weights = c.diff_weights;
    a.rows = rows.data();
    a.nrows = static_cast<int64_t>(rows.size());
    a.src_step = plan_.geo.stride[2] * p_.ic() * 4;
    a.dst_step = p_.oc() * 4;
    a.wei_row_stride = c.wei_row_stride * 4;
    a.accumulate = accumulate ? 1 : 0;
    k.run(a);
}

// Tile order (outermost first): g, oc tile, tap, ic tile, so a thread's
// consecutive tiles share the chunk's diff_dst slice (kept in L1). Row
// lists depend on the tap only and are built once per chunk.
void JitWeightsExecutor::run_gemm_tile(int64_t tile, const std::vector<RowPos>& chunk, bool accumulate,
                                       float* target, const float* src, const float* diff_dst,
                                       TapRows& tap_rows, Prefetch& pf) const {
    const WeightsGeometry& g = plan_.geo;
    const WeightsBlocking& b = plan_.blk;
    const int64_t taps = g.k[0] * g.k[1] * g.k[2];
    const int64_t it = tile % b.m_tiles;
    const int64_t tap = (tile / b.m_tiles) % taps;
    const int64_t ot = (tile / (b.m_tiles * taps)) % b.n_tiles;
    const int64_t grp = tile / (b.m_tiles * taps * b.n_tiles);
    const int64_t kw = tap % g.k[2], kh = (tap / g.k[2]) % g.k[1], kd = tap / (g.k[2] * g.k[1]);
    std::vector<WeightsRow>& rows = tap_rows.rows[static_cast<size_t>(tap)];
    if (!tap_rows.built[static_cast<size_t>(tap)]) {
        rows.clear();
        const auto ow = valid_ow(g, kw);
        build_rows(rows, chunk, kd, kh, kw, ow[0], ow[1]);
        tap_rows.built[static_cast<size_t>(tap)] = true;
    }
    const int64_t ic0 = it * b.m, oc0 = grp * g.ocg + ot * b.n * b.vlen;
    const TileCall c{src + grp * g.icg + ic0, diff_dst + oc0,
                     target + oc0 * wei_str_.o + ic0 * wei_str_.i + kd * wei_str_.k[0] +
                             kh * wei_str_.k[1] + kw * wei_str_.k[2],
                     wei_str_.i};
    const int m = it == b.m_tiles - 1 ? b.m_last : b.m;
    call(kernel(m, ot == b.n_tiles - 1), c, rows, accumulate, pf);
}

// Tile order: kd, kh, kw tile, channel tile. The interior pixels, where all
// taps of the tile read inside src, go to the multi-tap kernel; the edge
// pixels of each tap to the single-tap kernel (always accumulating).
void JitWeightsExecutor::run_dw_tile(int64_t tile, const std::vector<RowPos>& chunk, bool accumulate,
                                     float* target, const float* src, const float* diff_dst,
                                     std::vector<WeightsRow>& rows, Prefetch& pf) const {
    const WeightsGeometry& g = plan_.geo;
    const WeightsBlocking& b = plan_.blk;
    const int64_t ct = tile % b.n_tiles;
    const int64_t kt = (tile / b.n_tiles) % b.m_tiles;
    const int64_t kh = (tile / (b.n_tiles * b.m_tiles)) % g.k[1];
    const int64_t kd = tile / (b.n_tiles * b.m_tiles * g.k[1]);
    const int taps = kt == b.m_tiles - 1 ? b.m_last : b.m;
    const int64_t kw0 = kt * b.m, c0 = ct * b.n * b.vlen;
    const bool last_n = ct == b.n_tiles - 1;
    int64_t lo = 0, hi = g.out[2];
    for (int64_t kw = kw0; kw < kw0 + taps; ++kw) {
        const auto r = valid_ow(g, kw);
        lo = std::max(lo, r[0]);
        hi = std::min(hi, r[1]);
    }
    auto at_tap = [&](int64_t kw) {
        return TileCall{src + c0, diff_dst + c0,
                        target + c0 * wei_str_.o + kd * wei_str_.k[0] + kh * wei_str_.k[1] + kw * wei_str_.k[2],
                        wei_str_.k[2]};
    };
    rows.clear();
    if (lo < hi) build_rows(rows, chunk, kd, kh, kw0, lo, hi);
    call(kernel(taps, last_n), at_tap(kw0), rows, accumulate, pf);
    for (int64_t kw = kw0; kw < kw0 + taps; ++kw) {
        const auto r = valid_ow(g, kw);
        rows.clear();
        if (lo < hi) {
            build_rows(rows, chunk, kd, kh, kw, r[0], std::min(r[1], lo));
            build_rows(rows, chunk, kd, kh, kw, std::max(r[0], hi), r[1]);
        } else {
            build_rows(rows, chunk, kd, kh, kw, r[0], r[1]);
        }
        if (!rows.empty()) call(*kernels_[2][last_n || b.n_tiles == 1], at_tap(kw), rows, true, pf);
    }
}

void JitWeightsExecutor::compute_thread(int64_t tid, const WeightsThreadGrid& grid, const float* src,
                                        const float* diff_dst, float* target, float* partials) const {
    const WeightsReduction& red = plan_.red;
    const auto tiles = balance(plan_.blk.tiles, grid.tile_threads, tid % grid.tile_threads);
    const auto slices = balance(red.slices, grid.slice_threads, tid / grid.tile_threads);
    std::vector<WeightsRow> rows;  // depthwise
    rows.reserve(static_cast<size_t>(red.chunk_rows * 2 + 2));
    std::vector<RowPos> chunk_rows;
    TapRows tap_rows;  // gemm
    tap_rows.rows.resize(static_cast<size_t>(p_.k_sp()));
    for (int64_t s = slices[0]; s < slices[1]; ++s) {
        float* out = s == 0 ? target : partials + (s - 1) * plan_.weights_elems;
        const auto chunks = balance(red.chunks, red.slices, s);
        for (int64_t c = chunks[0]; c < chunks[1]; ++c) {
            const int64_t q0 = c * red.chunk_rows, q1 = std::min(red.rows, q0 + red.chunk_rows);
            const std::vector<RowPos>& chunk = decode_rows(chunk_rows, q0, q1);
            const bool has_next = c + 1 < chunks[1] || s + 1 < slices[1];
            Prefetch pf = has_next ? prefetch_chunk(c + 1, src, diff_dst) : Prefetch{};
            tap_rows.built.assign(tap_rows.rows.size(), false);
            for (int64_t t = tiles[0]; t < tiles[1]; ++t) {
                if (plan_.blk.kind == WeightsKernelKind::depthwise)
                    run_dw_tile(t, chunk, c != chunks[0], out, src, diff_dst, rows, pf);
                else
                    run_gemm_tile(t, chunk, c != chunks[0], out, src, diff_dst, tap_rows, pf);
            }
        }
    }
}

// The memory of chunk `chunk`: its diff_dst pixels are contiguous (rows
// in order), its src rows span from the first row's top tap to the last
// row's bottom tap.
Prefetch JitWeightsExecutor::prefetch_chunk(int64_t chunk, const float* src, const float* diff_dst) const {
    const WeightsGeometry& g = plan_.geo;
    const int64_t q0 = chunk * plan_.red.chunk_rows, q1 = std::min(plan_.red.rows, q0 + plan_.red.chunk_rows);
    auto dst_pixel = [&](int64_t q) { return (q / g.segs_per_row) * g.out[2] + (q % g.segs_per_row) * g.segment; };
    auto src_row = [&](int64_t q, bool last) {  // index of an input (n, d, h) row
        const int64_t r = q / g.segs_per_row, oh = r % g.out[1], od = (r / g.out[1]) % g.out[0];
        const int64_t n = r / (g.out[1] * g.out[0]);
        auto in = [&](int a, int64_t o) {
            const int64_t i = o * g.stride[a] - g.pad[a] + (last ? (g.k[a] - 1) * g.dil[a] : 0);
            return std::clamp<int64_t>(i, 0, g.in[a] - 1);
        };
        return (n * g.in[0] + in(0, od)) * g.in[1] + in(1, oh);
    };
    Prefetch pf;
    const char* dst = reinterpret_cast<const char*>(diff_dst);
    const char* s = reinterpret_cast<const char*>(src);
    pf.pos = dst + dst_pixel(q0) * p_.oc() * 4;
    pf.dst_end = dst + dst_pixel(q1) * p_.oc() * 4;
    const int64_t src_pixels = g.merged ? 0 : g.in[2];  // merged: rows are pixel ranges
    pf.src_begin = s + (g.merged ? dst_pixel(q0) : src_row(q0, false) * src_pixels) * p_.ic() * 4;
    pf.src_end = s + (g.merged ? dst_pixel(q1) : (src_row(q1 - 1, true) + 1) * src_pixels) * p_.ic() * 4;
    return pf;
}

// Phases 3 and 4: fixed-order sum of the partials, then the permutation.
void JitWeightsExecutor::reduce_and_store(float* target, const float* partials, float* user) const {
    const int64_t elems = plan_.weights_elems, slices = plan_.red.slices;
    if (slices > 1) {
        constexpr int64_t block = 4096;
        parallel_static((elems + block - 1) / block, [&](int64_t bi) {
            const int64_t e1 = std::min(elems, (bi + 1) * block);
            for (int64_t e = bi * block; e < e1; ++e) {
                float sum = target[e];
                for (int64_t s = 1; s < slices; ++s) sum += partials[(s - 1) * elems + e];
                target[e] = sum;
            }
        });
    }
    if (plan_.direct_weights) return;
    const WeightStrides& u = p_.wei_str;
    parallel_static(p_.k_sp() * p_.icg, [&](int64_t ti) {
        const int64_t tap = ti / p_.icg, i = ti % p_.icg;
        const int64_t kw = tap % p_.k[2], kh = (tap / p_.k[2]) % p_.k[1], kd = tap / (p_.k[2] * p_.k[1]);
        const float* from = target + tap * wei_str_.k[2] + i * wei_str_.i;
        float* to = user + kd * u.k[0] + kh * u.k[1] + kw * u.k[2] + i * u.i;
        for (int64_t o = 0; o < p_.oc(); ++o) to[o * u.o] = from[o];
    });
}

void JitWeightsExecutor::run(const void* input0, const void* input1, void* output) const {
    const int nthreads = tbb::this_task_arena::max_concurrency();
    const WeightsThreadGrid grid = nthreads == plan_.grid.nthr
                                           ? plan_.grid
                                           : plan_thread_grid(plan_.blk.tiles, plan_.red.slices, nthreads);
    const float* src = static_cast<const float*>(p_.swap_inputs ? input1 : input0);
    const float* diff_dst = static_cast<const float*>(p_.swap_inputs ? input0 : input1);
    FloatBuffer src_nxc, dst_nxc, xio, partials;
    if (plan_.transpose_inputs) {
        src_nxc = alloc_floats(p_.mb * p_.ic() * p_.in_sp());
        dst_nxc = alloc_floats(p_.mb * p_.oc() * p_.out_sp());
        to_nxc(src, src_nxc.get(), p_.mb, p_.ic(), p_.in_sp());
        to_nxc(diff_dst, dst_nxc.get(), p_.mb, p_.oc(), p_.out_sp());
        src = src_nxc.get();
        diff_dst = dst_nxc.get();
    }
    float* user = static_cast<float*>(output);
    float* target = user;
    if (!plan_.direct_weights) {
        xio = alloc_floats(plan_.weights_elems);
        target = xio.get();
    }
    if (plan_.red.slices > 1) partials = alloc_floats((plan_.red.slices - 1) * plan_.weights_elems);
    parallel_static(grid.nthr, [&](int64_t tid) {
        compute_thread(tid, grid, src, diff_dst, target, partials.get());
    });
    reduce_and_store(target, partials.get(), user);
}

}  // namespace

std::unique_ptr<Executor> make_jit_weights_executor(const Problem& p, Isa isa, std::string* why) {
    if (p.dt != data_type::f32) {
        *why = std::string("weight gradient: ") + dtype_name(p.dt) + " not implemented yet (f32 only)";
        return nullptr;
    }
    if (isa < Isa::avx2) {
        *why = "weight gradient: needs avx2";
        return nullptr;
    }
    const WeightsPlan plan = plan_weights(p, isa, tbb::this_task_arena::max_concurrency());
    return std::make_unique<JitWeightsExecutor>(p, plan);
}

}  // namespace convgrad::detail
