// The data gradient of 1x1 layers in NCX, read and written in place.
//
// A 1x1 layer (unit strides, no padding) in NCX holds each image's channels
// as rows of its pixels, in diff_dst and diff_src alike, so
//
//   diff_src[n][i][x] = sum over oc of W[oc][i] * diff_dst[n][oc][x]
//
// vectorises along the pixels with no transpose: the direct path needs
// NXC and transposes diff_dst in and diff_src out, passes that cost as much
// as the kernels on the large planes of early layers. This path runs
// jit/bwd_data_ncx_kernel.hpp on tiles of m input channels × a strip of n
// pixel vectors, each call summing every output channel of its group (W's
// m broadcasts and the strip's n vectors a step), so each output element is
// one call's sum, stored once: no partial sums, no scratch.
//
// Work items are (image, group, strip); threads take contiguous ranges,
// each item running every input-channel tile of its group against the
// strip (which stays in L1 / L2 between the tiles). The result does not
// depend on the thread count. Strided 1x1 layers come here and spread
// the result back with zeros (exec_unstrided.cpp).
#include <algorithm>
#include <cstdint>
#include <memory>
#include <sstream>
#include <string>

#include "jit/bwd_data_ncx_kernel.hpp"
#include "ops/executor.hpp"
#include "ops/parallel.hpp"
#include "ops/problem.hpp"

namespace convgrad::detail {
namespace {

// When the path runs (AMD Zen 4, 2 threads, mb 32, tools/sweep_ab.py
// --rounds=2 --min against the direct path's transposes, ResNet-50's
// stride-1 1x1 layers in NCX): f32 and f16 from kNcxMinPixels pixels an
// image (14x14: 1.05-1.12x, 28x28 1.3x, 56x56 1.4-2.7x; 7x7: 0.81-0.94x).
// bf16 widens here, where the direct path multiplies pairs with vdpbf16ps
// at twice the rate: with vdpbf16ps from kNcxMinPixelsBf16 (32x32 0.93-0.97x,
// 40x40 1.06-1.62x, 56x56 1.06-1.51x, 28x28 0.85-0.90x) and only for
// narrow layers, whose transposes weigh most against the products: at
// most kNcxBf16MaxChannels of icg·ocg / (icg + ocg) (56x56: 16 -> 96 and
// 96 -> 24 1.44-2.14x, 64 -> 64 1.27x, 64 <-> 256 0.94-1.05x, 96 <-> 384
// 0.89-0.95x, 128 <-> 256 0.83-0.87x); without vdpbf16ps (AVX2, both
// widen) from kNcxMinPixelsBf16Widen (14x14 0.76-1.08x, 28x28 1.2-1.3x).
constexpr int64_t kNcxMinPixels = 128;
constexpr int64_t kNcxMinPixelsBf16 = 1536;
constexpr int64_t kNcxBf16MaxChannels = 48;
constexpr int64_t kNcxMinPixelsBf16Widen = 512;

struct NcxDataPlan {
    Isa isa = Isa::avx2;
    int m = 1, n = 1;         // register tile: input channels × pixel vectors
    int vlen = 8;
    int64_t pixels = 0;       // of an image
    int64_t strips = 0;       // of an image: full strips of n vectors, then the rest
    int last_n = 0, tail = 0; // the last strip's vectors and its last vector's pixels (0: none / whole)
    int64_t items = 0;        // mb × g × strips
    int threads = 1;
};

// Cost in FMA-issue cycles of one output channel's step over an image:
// each (m, n) call issues m·n FMAs, or its n loads and m broadcasts at two
// a cycle, whichever is more, and (amortised over the oc it sums) its
// stores.
double ncx_cost(int64_t icg, int64_t pixels, int64_t ocg, int vlen, int m, int n) {
    auto call = [&](int64_t mm, int64_t nn) {
        return double(ocg) * std::max(double(mm * nn), double(mm + nn) / 2) + double(mm * nn) + 20;
    };
    const int64_t strip = int64_t(n) * vlen, full = pixels / strip, rem = pixels % strip;
    const int64_t rest_n = (rem + vlen - 1) / vlen;
    auto row = [&](int64_t mm) { return double(full) * call(mm, n) + (rem ? call(mm, rest_n) : 0); };
    return double(icg / m) * row(m) + (icg % m ? row(icg % m) : 0);
}

bool make_ncx_data_plan(const Problem& p, Isa isa, int threads, NcxDataPlan* pl) {
    const bool unit = plain_axis(p, 0) && plain_axis(p, 1) && plain_axis(p, 2);
    if (p.alg != Alg::data || p.nxc || !unit || isa < Isa::avx2) return false;
    const int64_t least = p.dt != data_type::bf16            ? kNcxMinPixels
                          : isa >= Isa::avx512_core_bf16 ? kNcxMinPixelsBf16
                                                         : kNcxMinPixelsBf16Widen;
    if (p.in_sp() < least) return false;
    if (p.dt == data_type::bf16 && isa >= Isa::avx512_core_bf16 &&
        p.icg * p.ocg > kNcxBf16MaxChannels * (p.icg + p.ocg))
        return false;
    const int64_t es = static_cast<int64_t>(dtype_size(p.dt));
    // The kernels' ISA: only bf16 stores use avx512_core_bf16.
    pl->isa = std::min(isa, p.dt == data_type::bf16 ? Isa::avx512_core_bf16 : Isa::avx512_core);
    pl->vlen = data_ncx_vlen(pl->isa);
    pl->pixels = p.in_sp();
    const int regs = isa >= Isa::avx512_core ? 32 : 16;
    // Displacements of a tile's last weight and row fit 32 bits.
    const int64_t w_i = p.wei_str.i * es, row = p.in_sp() * es;
    bool found = false;
    double best = 0;
    for (int m = 1; m <= 12 && m <= p.icg; ++m)
        for (int n = 1; data_ncx_vregs(isa, m, n) <= regs; ++n) {
            if ((m - 1) * std::max(w_i, row) + n * 64 > INT32_MAX) continue;
            const double cost = ncx_cost(p.icg, pl->pixels, p.ocg, pl->vlen, m, n);
            // Ties: fewer loads per FMA.
            if (!found || cost < best * 0.999 ||
                (cost <= best * 1.001 && (m + n) * pl->m * pl->n < (pl->m + pl->n) * m * n)) {
                pl->m = m;
                pl->n = n;
                best = cost;
                found = true;
            }
        }
    if (!found) return false;
    const int64_t strip = int64_t(pl->n) * pl->vlen, rem = pl->pixels % strip;
    pl->strips = div_up(pl->pixels, strip);
    pl->last_n = rem ? static_cast<int>(div_up(rem, pl->vlen)) : 0;
    pl->tail = static_cast<int>(rem % pl->vlen);
    pl->items = p.mb * p.g * pl->strips;
    pl->threads = std::max(1, threads);
    return true;
}

class JitDataNcxExecutor final : public Executor {
public:
    JitDataNcxExecutor(const Problem& p, const NcxDataPlan& plan);
    void run(const void* in0, const void* in1, void* out) const override;
    std::string describe() const override;
    int threads() const override { return op_threads(p_); }
    bool ncx_in_place() const override { return true; }

private:
    // Slot: (last input-channel tile ? 1 : 0) + (last strip ? 2 : 0).
    const DataNcxKernel& kernel(bool last_m, bool last_strip) const {
        return *kernels_[(last_m ? 1 : 0) + (last_strip ? 2 : 0)];
    }
    void run_item(const char* dd, const char* w, char* out, int64_t item) const;

    Problem p_;
    NcxDataPlan plan_;
    int64_t es_ = 4;
    std::shared_ptr<const DataNcxKernel> kernels_[4];
    int built_ = 0, hits_ = 0;
};

JitDataNcxExecutor::JitDataNcxExecutor(const Problem& p, const NcxDataPlan& plan)
    : p_(p), plan_(plan), es_(static_cast<int64_t>(dtype_size(p.dt))) {
    const int last_m = static_cast<int>((p.icg - 1) % plan.m + 1);
    const bool full_strips = plan.last_n == 0 || plan.strips > 1;
    for (int slot = 0; slot < 4; ++slot) {
        const bool lm = slot & 1, ls = slot & 2;
        if ((lm && last_m == plan.m) || (ls && plan.last_n == 0) || (!ls && !full_strips)) continue;
        DataNcxDesc d;
        d.isa = static_cast<int32_t>(plan.isa);
        d.dt = static_cast<int32_t>(p.dt);
        d.m = lm ? last_m : plan.m;
        d.n = ls ? plan.last_n : plan.n;
        d.tail = ls ? plan.tail : 0;
        d.dd_row_bytes = p.dst_str.c * es_;
        d.w_o_bytes = p.wei_str.o * es_;
        d.w_i_bytes = p.wei_str.i * es_;
        d.out_row_bytes = p.src_str.c * es_;
        bool hit = false;
        kernels_[slot] = get_data_ncx_kernel(d, &hit);
        ++built_;
        hits_ += hit;
    }
}

// Item (image, group, strip): every input-channel tile of the group
// against the strip. Tile t prefetches line t of each of the next item's
// diff_dst rows (while the strip has that many lines).
void JitDataNcxExecutor::run_item(const char* dd, const char* w, char* out, int64_t item) const {
    const int64_t s = item % plan_.strips, grp = item / plan_.strips % p_.g, img = item / plan_.strips / p_.g;
    const int64_t strip = int64_t(plan_.n) * plan_.vlen, x0 = s * strip;
    const bool last_strip = s == plan_.strips - 1 && plan_.last_n > 0;
    const int64_t lines = ((last_strip ? plan_.last_n : plan_.n) * plan_.vlen * es_ + 63) / 64;
    auto dd_of = [&](int64_t it) {
        const int64_t is = it % plan_.strips, ig = it / plan_.strips % p_.g, in = it / plan_.strips / p_.g;
        return dd + (in * p_.dst_str.n + ig * p_.ocg * p_.dst_str.c + is * strip) * es_;
    };
    const char* d = dd_of(item);
    const char* next = item + 1 < plan_.items ? dd_of(item + 1) : d;
    const char* wg = w + grp * p_.ocg * p_.wei_str.o * es_;
    char* o = out + (img * p_.src_str.n + grp * p_.icg * p_.src_str.c + x0) * es_;
    int64_t t = 0;
    for (int64_t i0 = 0; i0 < p_.icg; i0 += plan_.m, ++t) {
        const bool last_m = i0 + plan_.m > p_.icg;
        const char* pf = t < lines ? next + t * 64 : d;
        kernel(last_m, last_strip)(wg + i0 * p_.wei_str.i * es_, d, o + i0 * p_.src_str.c * es_, p_.ocg, pf);
    }
}

void JitDataNcxExecutor::run(const void* in0, const void* in1, void* out) const {
    const int threads = this->threads();
    const char* dd = static_cast<const char*>(in0);
    const char* w = static_cast<const char*>(in1);
    char* dst = static_cast<char*>(out);
    for_each_thread(threads, [&](int t) {
        const auto range = spread(plan_.items, threads, t);
        for (int64_t it = range[0]; it < range[1]; ++it) run_item(dd, w, dst, it);
    });
}

std::string JitDataNcxExecutor::describe() const {
    std::ostringstream os;
    os << "jit:" << isa_name(plan_.isa) << " ncx m" << plan_.m << "n" << plan_.n << "x" << plan_.vlen;
    if (p_.dt != data_type::f32) os << " " << dtype_name(p_.dt) << " widened to f32";
    os << " threads " << plan_.threads << " (pixel vectors, NCX read and written in place)\n"
       << "  for image in " << p_.mb << ", group in " << p_.g << ", strip in " << plan_.strips << " of "
       << plan_.n * plan_.vlen << " of " << plan_.pixels << " pixels";
    if (plan_.last_n > 0)
        os << " (the last: " << plan_.last_n << (plan_.last_n == 1 ? " vector" : " vectors")
           << (plan_.tail ? ", " + std::to_string(plan_.tail) + " pixels in the last" : std::string()) << ")";
    os << "  [contiguous ranges over threads]\n"
       << "    for tile of " << plan_.m << " of " << p_.icg << " input channels\n"
       << "      for oc in " << p_.ocg << ": " << plan_.n << " diff_dst loads, " << plan_.m << " W broadcasts, "
       << plan_.m * plan_.n << " FMAs, a line of the next strip prefetched\n"
       << "      " << plan_.m << " rows of diff_src stored" << (p_.dt == data_type::f32 ? "" : " (rounded)") << "\n"
       << "  kernels " << built_ << " (cache hits " << hits_ << ")";
    return os.str();
}

}  // namespace

std::unique_ptr<Executor> make_jit_data_ncx_executor(const Problem& p, Isa isa) {
    NcxDataPlan plan;
    if (!make_ncx_data_plan(p, isa, op_threads(p), &plan)) return nullptr;
    return std::make_unique<JitDataNcxExecutor>(p, plan);
}

}  // namespace convgrad::detail
