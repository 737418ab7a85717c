// The inner-product path of the data gradient (ConvolutionBackwardData).
//
// A 1x1 layer (unit strides, no padding, one group) with few diff_dst
// pixels and weights that keep oc innermost (XIO, fully connected layers that
// fold_full_kernel runs as 1x1 included) is a product of a
// short diff_dst matrix [P][OC] with W [IC][OC] transposed. The direct path
// first packs all of W into [block][oc][lanes] scratch, and with a large W
// (VGG-16's fc6: 411 MB) that transpose, a pass writing and one reading as
// much again, costs twice the kernel; this path reads W in place instead,
// each W row once, as inner products along oc (jit/bwd_data_dot_kernel.hpp)
// against the P diff_dst rows, which stay in L2.
//
// Threads split the input channels into spans; a span's channels run in
// tiles of c W rows, each tile against the pixels in tiles of p, and every
// output element is one kernel call's inner product (lanes summed in a
// fixed order), so the result does not depend on the thread count.
#include <algorithm>
#include <cmath>
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
#include "ops/parallel.hpp"
#include "ops/problem.hpp"

namespace convgrad::detail {
namespace {

// When the path runs (AMD Zen 4, 2 threads, min of 2 alternating runs of
// convgrad-sweep --mode=P over 1x1 layers on one-pixel images: mb 8-128,
// IC 512 / 4096, OC 256-4096, f32 and bf16, direct path / this one): it
// wins where packing W costs more than its less efficient inner loop
// (about 70 % of peak against the direct kernel's 90 %, and the lane sums)
// saves, so up to a pixel count that grows with W: every layer of 8
// pixels (1.15-5.4x, W from 0.26 MB), 16 pixels from about 1 MB (0.97-2.0x),
// 32 from about 4 MB (1.04-2.05x; 0.87-0.90x below), 64 from about 16 MB
// (1.15x; 0.82-1.03x at 4-8 MB), 128 from about 64 MB (1.29x). Hence at
// most kDotPixelsPerRootMiB · sqrt(W in MiB) pixels (and always
// kDotMinPixels). Inner products of 256 oc lose from 32 pixels on (lane
// sums: 0.69-0.90x) and need kDotMinOcMany beyond kDotMinPixels; below
// kDotMinOc they never pay. Diff_dst of more than kDotMaxDdBytes is read
// from beyond L2 for every channel tile.
constexpr double kDotPixelsPerRootMiB = 16;
constexpr int64_t kDotMinPixels = 8;
constexpr int64_t kDotMinOc = 64;
constexpr int64_t kDotMinOcMany = 512;
constexpr int64_t kDotMaxDdBytes = 2 << 20;
constexpr int64_t kDotPadDdBytes = 512 << 10;  // see JitDataDotExecutor's constructor
// Channels a thread's span holds at least: rounding a span's rows to
// 16 bits runs in whole vectors.
constexpr int64_t kDotSpanChannels = 64;
constexpr int kDotMaxPixelTile = 8;

struct DotPlan {
    Isa isa = Isa::avx2;
    DataCompute compute = DataCompute::f32;
    int p = 1, c = 1;              // register tile
    int64_t pixels = 0;            // P: mb × spatial
    int64_t span = 0;              // channels a work item (multiple of c)
    int64_t spans = 0;             // work items
    int threads = 1;
    double est_cycles = 0;
};

// Cost in FMA-issue cycles of a (p, c) tiling: per oc step a tile issues
// p·c FMAs or (p + c) loads at two a cycle, whichever is more, and ends
// with p·c lane sums.
double dot_cost(int64_t pixels, int64_t ic, int64_t steps, int p, int c) {
    auto tile = [&](int64_t pp, int64_t cc) {
        return double(steps) * std::max<double>(double(pp * cc), double(pp + cc) / 2) + double(pp * cc) * 8 + 20;
    };
    const int64_t fp = pixels / p, rp = pixels % p, fc = ic / c, rc = ic % c;
    return double(fp * fc) * tile(p, c) + (rp ? double(fc) * tile(rp, c) : 0) + (rc ? double(fp) * tile(p, rc) : 0) +
           (rp && rc ? tile(rp, rc) : 0);
}

// Returns false when the path does not serve the problem.
bool make_dot_plan(const Problem& p, Isa isa, int threads, DotPlan* pl) {
    const bool unit = p.g == 1 && plain_axis(p, 0) && plain_axis(p, 1) && plain_axis(p, 2);
    if (p.alg != Alg::data || !unit || isa < Isa::avx2 || p.wei_str.o != 1) return false;
    if (!p.nxc && p.in_sp() != 1) return false;  // one-pixel images: NCX is NXC
    const int64_t es = static_cast<int64_t>(dtype_size(p.dt));
    const int64_t pixels = p.mb * p.in_sp();
    const double w_mib = double(p.ic()) * double(p.oc()) * double(es) / double(1 << 20);
    const double most_pixels = std::max<double>(kDotMinPixels, kDotPixelsPerRootMiB * std::sqrt(w_mib));
    if (p.oc() < kDotMinOc || pixels * p.oc() * es > kDotMaxDdBytes || double(pixels) > most_pixels ||
        (pixels > kDotMinPixels && p.oc() < kDotMinOcMany))
        return false;
    pl->compute = dot_compute(p.dt, isa);
    pl->isa = dot_kernel_isa(isa, pl->compute);
    pl->pixels = pixels;
    const int64_t steps = p.oc() / data_dot_step_oc(isa, pl->compute);
    // Displacements of a tile's last pixel and channel fit 32 bits.
    const int64_t row = p.oc() * es, w_row = p.wei_str.i * es;
    const bool found = choose_dot_tile(
            isa, static_cast<int>(std::min<int64_t>(kDotMaxPixelTile, pixels)), p.ic(), row, w_row,
            [&](int tp, int tc) { return dot_cost(pixels, p.ic(), steps + 1, tp, tc); }, &pl->p, &pl->c,
            &pl->est_cycles);
    if (!found) return false;
    pl->span = div_up(kDotSpanChannels, pl->c) * pl->c;
    pl->spans = div_up(p.ic(), pl->span);
    pl->threads = std::max(1, threads);
    return true;
}

class JitDataDotExecutor final : public Executor {
public:
    JitDataDotExecutor(const Problem& p, const DotPlan& plan);
    void run(const void* in0, const void* in1, void* out) const override;
    std::string describe() const override;
    int threads() const override { return op_threads(p_); }

private:
    // The kernel of a (pixels, channels) tile: the full one, or a last
    // pixel or channel tile.
    const DataDotKernel& kernel(int64_t pp, int64_t cc) const { return kernels_.get(pp, cc); }
    void run_span(const char* dd, const char* w, char* out, int64_t s, float* acc, float* sums) const;

    Problem p_;
    DotPlan plan_;
    int64_t es_ = 4, steps_ = 0, dd_pitch_ = 0;
    ArrayConverter round_;
    DotKernelSet kernels_;
};

JitDataDotExecutor::JitDataDotExecutor(const Problem& p, const DotPlan& plan)
    : p_(p), plan_(plan), es_(static_cast<int64_t>(dtype_size(p.dt))) {
    const int step_oc = data_dot_step_oc(plan.isa, plan.compute);
    steps_ = p.oc() / step_oc;
    // Diff_dst rows a multiple of 4 KiB apart put the lines a tile reads
    // at one oc into few L2 sets (OC 4096 f32: 16 KiB rows, the 32 rows of
    // VGG-16 fc6 at mb 32 in 8 of 2048 set positions, beside the W rows of
    // the same stride); where diff_dst fills half of L2 or more, a copy one
    // line longer a row spreads them (AMD Zen 4, 2 threads, min of 3: VGG-16
    // fc6 f32 1.21x, AlexNet fc6 1.28x, 8192 -> 4096 at mb 32 1.22x; at 256
    // KiB: VGG-16 fc6 bf16 1.05x, 2048 -> 2048 f32 0.98x).
    dd_pitch_ = p.oc() * es_;
    if (dd_pitch_ % kL1SetSpan == 0 && plan.pixels > plan.p && plan.pixels * dd_pitch_ >= kDotPadDdBytes)
        dd_pitch_ += kCacheLineBytes;
    if (p.dt != data_type::f32) round_ = ArrayConverter(plan.isa, data_type::f32, p.dt);
    const int64_t last_p = (plan.pixels - 1) % plan.p + 1, last_c = (p.ic() - 1) % plan.c + 1;
    DataDotDesc d;
    d.isa = static_cast<int32_t>(plan.isa);
    d.compute = static_cast<int32_t>(plan.compute);
    d.dt = static_cast<int32_t>(p.dt);
    d.p = plan.p;
    d.c = plan.c;
    d.tail = static_cast<int32_t>(p.oc() % step_oc);
    d.dd_pix_bytes = dd_pitch_;
    d.w_row_bytes = p.wei_str.i * es_;
    kernels_ = DotKernelSet(d, static_cast<int>(last_p), static_cast<int>(last_c), false);
}

// Span s: its channels in tiles of c, each against every pixel tile (the
// tile's sums in `sums`); the lane sums into acc [P][span] (f32), then the
// span's columns of diff_src.
void JitDataDotExecutor::run_span(const char* dd, const char* w, char* out, int64_t s, float* acc,
                                  float* sums) const {
    const int64_t ic = p_.ic(), c0 = s * plan_.span, width = std::min(plan_.span, ic - c0);
    const int vlen = data_dot_vlen(plan_.isa);
    const int64_t w_row = p_.wei_str.i * es_;
    for (int64_t cj = 0; cj < width; cj += plan_.c) {
        const int64_t cc = std::min<int64_t>(plan_.c, width - cj);
        const char* wt = w + (c0 + cj) * w_row;
        for (int64_t p0 = 0; p0 < plan_.pixels; p0 += plan_.p) {
            const int64_t pp = std::min<int64_t>(plan_.p, plan_.pixels - p0);
            // Pixel tile t prefetches lines [t·steps, (t + 1)·steps) of the
            // next tile's W (the span's, or the next span's first), or of
            // this tile's when W ends here.
            const int64_t next_rows = std::min<int64_t>(plan_.c, ic - (c0 + cj + cc));
            const char* next = next_rows > 0 ? wt + cc * w_row : wt;
            const int64_t next_bytes = (next_rows > 0 ? next_rows : cc) * w_row;
            const char* pf = next + std::min<int64_t>(p0 / plan_.p * steps_ * 64, next_bytes - 64);
            kernel(pp, cc)(dd + p0 * dd_pitch_, wt, sums, steps_, pf);
            for (int64_t i = 0; i < pp; ++i)
                for (int64_t j = 0; j < cc; ++j)
                    acc[(p0 + i) * plan_.span + cj + j] = lane_sum(sums + (i * cc + j) * vlen, vlen);
        }
    }
    for (int64_t px = 0; px < plan_.pixels; ++px) {
        char* dst = out + (px * ic + c0) * es_;
        if (p_.dt == data_type::f32)
            std::memcpy(dst, acc + px * plan_.span, static_cast<size_t>(width) * 4);
        else
            round_(acc + px * plan_.span, dst, width);
    }
}

void JitDataDotExecutor::run(const void* in0, const void* in1, void* out) const {
    const int threads = this->threads();
    const char* dd = static_cast<const char*>(in0);
    const char* w = static_cast<const char*>(in1);
    char* dst = static_cast<char*>(out);
    std::unique_ptr<char[]> padded;
    if (dd_pitch_ != p_.oc() * es_) {
        padded.reset(new char[static_cast<size_t>(plan_.pixels * dd_pitch_ + 64)]);
        char* base = padded.get() + (64 - reinterpret_cast<uintptr_t>(padded.get()) % 64) % 64;
        for (int64_t px = 0; px < plan_.pixels; ++px)
            std::memcpy(base + px * dd_pitch_, dd + px * p_.oc() * es_, static_cast<size_t>(p_.oc() * es_));
        dd = base;
    }
    ItemQueue queue(plan_.spans, threads);
    for_each_thread(threads, [&](int t) {
        std::vector<float> acc(static_cast<size_t>(plan_.pixels * plan_.span));
        alignas(64) float sums[32 * 16];
        for (int64_t s = 0; queue.next(t, s);) run_span(dd, w, dst, s, acc.data(), sums);
    });
}

std::string JitDataDotExecutor::describe() const {
    const int step_oc = data_dot_step_oc(plan_.isa, plan_.compute);
    const bool pairs = plan_.compute == DataCompute::bf16_dot;
    std::ostringstream os;
    os << "jit:" << isa_name(plan_.isa) << " dot p" << plan_.p << " c" << plan_.c << "x" << data_dot_vlen(plan_.isa);
    if (p_.dt != data_type::f32) os << " " << dtype_name(p_.dt) << (pairs ? " vdpbf16ps on oc pairs" : " widened to f32");
    os << " threads " << plan_.threads << " (inner products along oc, W read in place)\n";
    if (dd_pitch_ != p_.oc() * es_) os << "  diff_dst copied to rows " << dd_pitch_ << " bytes apart\n";
    os << "  for span in " << plan_.spans << " (" << plan_.span << " of " << p_.ic()
       << " channels)  [split over threads]\n"
       << "    for tile of " << plan_.c << " channels, tile of " << plan_.p << " of " << plan_.pixels << " pixels\n"
       << "      for oc step of " << step_oc << " in " << p_.oc() << ": " << plan_.c << " W loads, " << plan_.p
       << " dd loads, " << plan_.p * plan_.c << (pairs ? " vdpbf16ps" : " FMAs")
       << ", a line of the next tile's W prefetched\n"
       << "      " << plan_.p * plan_.c << " lane sums\n"
       << "    span's rows to diff_src" << (p_.dt == data_type::f32 ? "" : " (rounded)") << "\n"
       << "  kernels " << kernels_.built() << " (cache hits " << kernels_.hits() << ")";
    return os.str();
}

}  // namespace

std::unique_ptr<Executor> make_jit_data_dot_executor(const Problem& p, Isa isa) {
    DotPlan plan;
    if (!make_dot_plan(p, isa, op_threads(p), &plan)) return nullptr;
    return std::make_unique<JitDataDotExecutor>(p, plan);
}

}  // namespace convgrad::detail
