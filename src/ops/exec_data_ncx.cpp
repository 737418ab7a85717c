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
// one call's sum, stored once: no partial sums. bf16 with vdpbf16ps takes
// output channels in pairs, interleaved in registers. The only scratch is
// W, copied each call in the order the kernels read it (pack_w).
//
// Work items are (image, group, strip); threads take contiguous ranges
// (then the items other threads have left), each item running every
// input-channel tile of its group against the strip (which stays in L1 /
// L2 between the tiles). The result does not depend on the thread count.
// Strided 1x1 layers come here and spread the result back with zeros
// (exec_unstrided.cpp).
#include <algorithm>
#include <cstdint>
#include <memory>
#include <sstream>
#include <string>

#include "jit/bwd_data_ncx_kernel.hpp"
#include "ops/executor.hpp"
#include "ops/parallel.hpp"
#include "ops/problem.hpp"
#include "ops/scratch.hpp"

namespace convgrad::detail {
namespace {

// When the path runs (AMD Zen 4, 2 threads, mb 32, tools/sweep_ab.py
// --rounds=2 --min against the direct path's transposes, ResNet-50's
// stride-1 1x1 layers in NCX): f32 and f16 from kNcxMinPixels pixels an
// image (14x14: 1.05-1.12x, 28x28 1.3x, 56x56 1.4-2.7x; 7x7: 0.81-0.94x).
// bf16 with vdpbf16ps on oc pairs from kNcxMinPixelsPairs (56x56
// 1.48-1.79x, 28x28 1.17-1.34x; below: 14x14 0.87-1.09x, 17x17 0.81-1.06x,
// 20x20 1.08x, against the transposes with the direct path's vdpbf16ps);
// bf16 without vdpbf16ps (AVX2, AVX-512 without BF16: both paths widen)
// from kNcxMinPixelsBf16Widen (14x14 0.76-1.08x, 28x28 1.2-1.3x).
constexpr int64_t kNcxMinPixels = 128;
constexpr int64_t kNcxMinPixelsPairs = 512;
constexpr int64_t kNcxMinPixelsBf16Widen = 512;

struct NcxDataPlan {
    Isa isa = Isa::avx2;
    bool pairs = false;       // bf16 oc pairs by vdpbf16ps
    int m = 1, n = 1;         // register tile: input channels × pixel vectors
    int vlen = 8;
    int64_t pixels = 0;       // of an image
    int64_t strips = 0;       // of an image: full strips of n vectors, then the rest
    int last_n = 0, tail = 0; // the last strip's vectors and its last vector's pixels (0: none / whole;
                              // pairs: of its last 32)
    int64_t items = 0;        // mb × g × strips
    int threads = 1;
};

// Cost in FMA-issue cycles of the layer's image: each (m, n) call issues
// m·n FMAs a step, or its n loads and m broadcasts at two a cycle,
// whichever is more, and (amortised over the oc it sums) its stores. Pairs
// take half the steps, each with 1.5·n loads and n shuffles, the shuffles
// issuing with the vdpbf16ps (AMD Zen 4 and Zen 5 run them on the same
// pipes): counted apart, m4 x n6 (6 shuffles to 24 vdpbf16ps) won where
// m12 x n2 (2 to 24) runs 1.13-1.38x on ResNet-50's 56x56 / 28x28 1x1
// layers and 1.09-1.31x on MobileNetV2-style ones (Zen 5, 2 threads, bf16
// data gradients; 0.93-1.04x on 16- and 32-channel outputs). (A term for
// a strip's diff_dst rows streaming from L2 once they outgrow L1, at 32
// bytes a cycle, picked 12 x 2 tiles on 14x14 and 28x28 planes: 0.995x
// geomean over ResNet-50's stride-1 1x1 layers, f32 256 -> 1024 on 14x14
// 0.90x.)
double ncx_cost(int64_t icg, int64_t pixels, int64_t ocg, int vlen, int m, int n, bool pairs) {
    const int64_t steps = pairs ? div_up(ocg, 2) : ocg;
    auto call = [&](int64_t mm, int64_t nn) {
        const double loads = pairs ? 1.5 * double(nn) : double(nn);
        const double issue = std::max(double(mm * nn) + (pairs ? double(nn) : 0.0), (double(mm) + loads) / 2);
        return double(steps) * issue + double(mm * nn) + 20;
    };
    const int64_t strip = int64_t(n) * vlen, full = pixels / strip, rem = pixels % strip;
    const int64_t rest_n = pairs ? 2 * div_up(rem, 2 * vlen) : div_up(rem, vlen);
    auto row = [&](int64_t mm) { return double(full) * call(mm, n) + (rem ? call(mm, rest_n) : 0); };
    return double(icg / m) * row(m) + (icg % m ? row(icg % m) : 0);
}

bool make_ncx_data_plan(const Problem& p, Isa isa, int threads, NcxDataPlan* pl) {
    const bool unit = plain_axis(p, 0) && plain_axis(p, 1) && plain_axis(p, 2);
    if (p.alg != Alg::data || p.nxc || !unit || isa < Isa::avx2) return false;
    pl->pairs = p.dt == data_type::bf16 && isa >= Isa::avx512_core_bf16;
    const int64_t least = p.dt != data_type::bf16 ? kNcxMinPixels
                          : pl->pairs               ? kNcxMinPixelsPairs
                                                    : kNcxMinPixelsBf16Widen;
    if (p.in_sp() < least) return false;
    const int64_t es = static_cast<int64_t>(dtype_size(p.dt));
    // The kernels' ISA: only bf16 stores use avx512_core_bf16.
    pl->isa = std::min(isa, p.dt == data_type::bf16 ? Isa::avx512_core_bf16 : Isa::avx512_core);
    pl->vlen = data_ncx_vlen(pl->isa);
    pl->pixels = p.in_sp();
    const int regs = isa >= Isa::avx512_core ? 32 : 16;
    // Displacements of a tile's last weight and row (pairs: the partner
    // row) fit 32 bits.
    const int64_t w_i = pl->pairs ? 4 : es;  // packed W
    const int64_t row = p.in_sp() * es * (pl->pairs ? 2 : 1);
    bool found = false;
    double best = 0;
    for (int m = 1; m <= 12 && m <= p.icg; ++m)
        for (int n = pl->pairs ? 2 : 1; data_ncx_vregs(isa, m, n, pl->pairs) <= regs; n += pl->pairs ? 2 : 1) {
            if ((m - 1) * std::max(w_i, row) + n * 64 > INT32_MAX) continue;
            const double cost = ncx_cost(p.icg, pl->pixels, p.ocg, pl->vlen, m, n, pl->pairs);
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
    const int64_t run = pl->pairs ? 2 * pl->vlen : pl->vlen;  // pixels a load covers
    pl->strips = div_up(pl->pixels, strip);
    pl->last_n = rem ? static_cast<int>(div_up(rem, run) * (run / pl->vlen)) : 0;
    pl->tail = static_cast<int>(rem % run);
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

private:
    // Slot: (last input-channel tile ? 1 : 0) + (last strip ? 2 : 0).
    const DataNcxKernel& kernel(bool last_m, bool last_strip) const {
        return *kernels_[(last_m ? 1 : 0) + (last_strip ? 2 : 0)];
    }
    void run_item(const char* dd, const char* w, char* out, int64_t item) const;
    // W in the order the kernels read it: [g][input-channel tile][step][the
    // tile's m], a step's weights of consecutive input channels adjacent
    // and the steps of a tile one run; pairs: dwords (W[2s][i], W[2s +
    // 1][i]) of bf16, the second zero past an odd ocg. Read in place, an XIO
    // W put the m broadcasts OC elements apart, at a 4 KiB multiple all in
    // one L1 set (1024 output channels, f32, m = 12: 0.63x against m = 5),
    // and [step][icg] put a tile's steps a row apart (bf16 512 -> 128:
    // 0.79x).
    void pack_w(const char* w, char* to, int threads) const;
    int64_t oc_pairs() const { return div_up(p_.ocg, 2); }
    int64_t packed_steps() const { return plan_.pairs ? oc_pairs() : p_.ocg; }
    int64_t packed_unit() const { return plan_.pairs ? 4 : es_; }  // bytes of a packed step's weight

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
        d.pairs = plan.pairs;
        d.odd = plan.pairs && p.ocg % 2;
        d.dd_row_bytes = p.dst_str.c * es_;
        d.w_o_bytes = d.m * packed_unit();
        d.w_i_bytes = packed_unit();
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
    // The group's packed W; the kernel's loop steps (pairs: whole pairs,
    // an odd last channel is its extra step).
    const char* wg = w + grp * packed_steps() * p_.icg * packed_unit();
    const int64_t steps = plan_.pairs ? p_.ocg / 2 : p_.ocg;
    char* o = out + (img * p_.src_str.n + grp * p_.icg * p_.src_str.c + x0) * es_;
    int64_t t = 0;
    for (int64_t i0 = 0; i0 < p_.icg; i0 += plan_.m, ++t) {
        const bool last_m = i0 + plan_.m > p_.icg;
        const char* pf = t < lines ? next + t * 64 : d;
        kernel(last_m, last_strip)(wg + i0 * packed_steps() * packed_unit(), d, o + i0 * p_.src_str.c * es_, steps,
                                   pf);
    }
}

void JitDataNcxExecutor::run(const void* in0, const void* in1, void* out) const {
    const int threads = this->threads();
    const char* dd = static_cast<const char*>(in0);
    const char* w = static_cast<const char*>(in1);
    char* dst = static_cast<char*>(out);
    const ScratchLease packed(Scratch::ncx_w, p_.g * packed_steps() * p_.icg * packed_unit());
    pack_w(w, packed.get(), threads);
    w = packed.get();
    ItemQueue queue(plan_.items, threads);
    for_each_thread(threads, [&](int t) {
        for (int64_t it = 0; queue.next(t, it);) run_item(dd, w, dst, it);
    });
}

void JitDataNcxExecutor::pack_w(const char* w, char* to, int threads) const {
    const int64_t steps = packed_steps(), wo = p_.wei_str.o, wi = p_.wei_str.i, unit = packed_unit();
    const int64_t tiles = div_up(p_.icg, int64_t(plan_.m));
    // Steps [s0, s1) of group grp's tile of input channels from i0 into
    // their slots: for each step its mt input channels, one element each.
    auto copy = [&](int64_t grp, int64_t i0, int64_t s0, int64_t s1) {
        const int64_t mt = std::min<int64_t>(plan_.m, p_.icg - i0);
        char* at = to + (grp * steps * p_.icg + i0 * steps + s0 * mt) * unit;
        for (int64_t s = s0; s < s1; ++s, at += mt * unit) {
            const int64_t o = grp * p_.ocg + s * (plan_.pairs ? 2 : 1);  // the step's first output channel
            const int64_t e = o * wo + i0 * wi;
            if (plan_.pairs) {
                const uint16_t* from = reinterpret_cast<const uint16_t*>(w) + e;
                const int64_t hi = s * 2 + 1 < p_.ocg ? wo : -1;
                for (int64_t i = 0; i < mt; ++i) {
                    const uint32_t partner = hi < 0 ? 0u : from[i * wi + hi];
                    reinterpret_cast<uint32_t*>(at)[i] = from[i * wi] | partner << 16;
                }
            } else if (es_ == 4) {
                const uint32_t* from = reinterpret_cast<const uint32_t*>(w) + e;
                for (int64_t i = 0; i < mt; ++i) reinterpret_cast<uint32_t*>(at)[i] = from[i * wi];
            } else {
                const uint16_t* from = reinterpret_cast<const uint16_t*>(w) + e;
                for (int64_t i = 0; i < mt; ++i) reinterpret_cast<uint16_t*>(at)[i] = from[i * wi];
            }
        }
    };
    // Reads run along W's inner axis: output channels (XIO, IOX) a tile of
    // input channels at a time, else a step's input channels at a time.
    // (XIO read a step at a time touched a line per element, 4 KiB apart:
    // 9 % of ResNet-50 res4a_branch1's strided data gradient in NCX, f32,
    // mb 32.)
    if (wo < wi) {
        parallel_static(threads, p_.g * tiles, [&](int64_t gt) { copy(gt / tiles, gt % tiles * plan_.m, 0, steps); });
        return;
    }
    parallel_static(threads, p_.g * steps, [&](int64_t gs) {
        for (int64_t i0 = 0; i0 < p_.icg; i0 += plan_.m) copy(gs / steps, i0, gs % steps, gs % steps + 1);
    });
}

std::string JitDataNcxExecutor::describe() const {
    std::ostringstream os;
    os << "jit:" << isa_name(plan_.isa) << " ncx m" << plan_.m << "n" << plan_.n << "x" << plan_.vlen;
    if (plan_.pairs)
        os << " bf16 vdpbf16ps on oc pairs";
    else if (p_.dt != data_type::f32)
        os << " " << dtype_name(p_.dt) << " widened to f32";

    const int run = plan_.pairs ? 2 * plan_.vlen : plan_.vlen;  // pixels of the last strip's last load
    os << " threads " << plan_.threads << " (pixel vectors, NCX read and written in place)\n"
       << "  for image in " << p_.mb << ", group in " << p_.g << ", strip in " << plan_.strips << " of "
       << plan_.n * plan_.vlen << " of " << plan_.pixels << " pixels";
    if (plan_.last_n > 0)
        os << " (the last: " << plan_.last_n << (plan_.last_n == 1 ? " vector" : " vectors")
           << (plan_.tail ? ", " + std::to_string(plan_.tail) + " pixels in the last " + std::to_string(run)
                          : std::string())
           << ")";
    os << "  [contiguous ranges over threads, then shared]\n"
       << "    for tile of " << plan_.m << " of " << p_.icg << " input channels\n";
    if (plan_.pairs)
        os << "      for oc pair in " << oc_pairs() << (p_.ocg % 2 ? " (the last with zeros)" : "") << ": "
           << plan_.n + plan_.n / 2 << " diff_dst loads, " << plan_.n << " interleaves, " << plan_.m
           << " W pair broadcasts, " << plan_.m * plan_.n << " vdpbf16ps, two lines of the next strip prefetched\n"
           << "      " << plan_.m << " rows of diff_src stored in pixel order (rounded)\n";
    else
        os << "      for oc in " << p_.ocg << ": " << plan_.n << " diff_dst loads, " << plan_.m << " W broadcasts, "
           << plan_.m * plan_.n << " FMAs, a line of the next strip prefetched\n"
           << "      " << plan_.m << " rows of diff_src stored" << (p_.dt == data_type::f32 ? "" : " (rounded)")
           << "\n";
    os << "  W copied each call in the kernels' order (group, tile of " << plan_.m << " input channels, "
       << (plan_.pairs ? "oc pair" : "oc") << ")\n"
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
