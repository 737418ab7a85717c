// The dispatch list: the best implementation that accepts the Problem wins.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include "jit/isa.hpp"
#include "ops/executor.hpp"
#include "ops/plan_data.hpp"
#include "ops/scratch.hpp"
#include "ops/transpose.hpp"
#include "ref/reference.hpp"

namespace convgrad::detail {
namespace {

class RefExecutor final : public Executor {
public:
    explicit RefExecutor(const Problem& p) : p_(p) {}
    void run(const void* in0, const void* in1, void* out) const override {
        reference_execute(p_, in0, in1, out);
    }
    std::string describe() const override { return "ref: " + p_.to_string(); }
    int threads() const override { return tbb::this_task_arena::max_concurrency(); }

private:
    Problem p_;
};

// An inner plan's describe() with `note` at the end of its first line.
std::string with_note(std::string d, const std::string& note) {
    const size_t eol = d.find('\n');
    return eol == std::string::npos ? d + note : d.insert(eol, note);
}

// A 1x1 weight gradient run as the problem with src and diff_dst in each
// other's roles (swapped_1x1): the same buffers, the inner executor reads
// them swapped (Problem::swap_inputs) and writes the weights as their
// transpose.
class SwappedExecutor final : public Executor {
public:
    explicit SwappedExecutor(std::unique_ptr<Executor> inner) : inner_(std::move(inner)) {}
    void run(const void* in0, const void* in1, void* out) const override { inner_->run(in0, in1, out); }
    std::string describe() const override {
        return with_note(inner_->describe(),
                         " (1x1: src and diff_dst in each other's roles, input channels in the lanes)");
    }
    int threads() const override { return inner_->threads(); }

private:
    std::unique_ptr<Executor> inner_;
};

// A Problem run as its fold_full_kernel form: the same buffers and the
// plan of the 1x1 convolution; with fold.transpose_src, src (weight
// gradients, before) or diff_src (data gradients, after) passes through a
// per-image transpose into the weights' channel order; with fold.permute,
// the weights pass through a dense [c'][OC] copy (after a weight gradient,
// before a data gradient).
class FoldedExecutor final : public Executor {
public:
    FoldedExecutor(const Problem& p, const Problem& q, const FullKernelFold& fold, Isa isa,
                   std::unique_ptr<Executor> inner)
        : p_(p), q_(q), fold_(fold), isa_(isa), inner_(std::move(inner)) {}
    void run(const void* in0, const void* in1, void* out) const override {
        const int64_t es = static_cast<int64_t>(dtype_size(p_.dt));
        if (fold_.transpose_src) {
            // An image in the user's order is K × IC (NXC) or IC × K (NCX);
            // the weights order it the other way.
            const int64_t k = p_.k_sp(), ic = p_.icg;
            const ScratchLease images(Scratch::folded_images, p_.mb * k * ic * es);
            if (p_.alg == Alg::weights) {
                const void* src = p_.swap_inputs ? in1 : in0;
                transpose_images(src, images.get(), static_cast<int>(es), p_.mb, p_.nxc ? k : ic, p_.nxc ? ic : k,
                                 threads(), isa_);
                inner_->run(p_.swap_inputs ? in0 : images.get(), p_.swap_inputs ? images.get() : in1, out);
            } else {
                inner_->run(in0, in1, images.get());
                transpose_images(images.get(), out, static_cast<int>(es), p_.mb, p_.nxc ? ic : k, p_.nxc ? k : ic,
                                 threads(), isa_);
            }
            return;
        }
        if (!fold_.permute) {
            inner_->run(in0, in1, out);
            return;
        }
        const ScratchLease dense(Scratch::folded_weights, q_.icg * q_.oc() * es);
        const Batched bt = batched_transpose();
        if (bt.mb) {
            inner_->run(in0, in1, dense.get());
            transpose_images(dense.get(), out, static_cast<int>(es), bt.mb, bt.rows, bt.cols, threads(), isa_);
        } else if (p_.alg == Alg::weights) {
            inner_->run(in0, in1, dense.get());
            if (es == 4)
                scatter(reinterpret_cast<const uint32_t*>(dense.get()), static_cast<uint32_t*>(out));
            else
                scatter(reinterpret_cast<const uint16_t*>(dense.get()), static_cast<uint16_t*>(out));
        } else {
            if (es == 4)
                gather(static_cast<const uint32_t*>(in1), reinterpret_cast<uint32_t*>(dense.get()));
            else
                gather(static_cast<const uint16_t*>(in1), reinterpret_cast<uint16_t*>(dense.get()));
            inner_->run(in0, dense.get(), out);
        }
    }
    std::string describe() const override {
        const std::string note = " (kernel covers the input: run as 1x1 on " +
                                 std::to_string(fold_.swap_roles ? q_.ocg : q_.icg) + " input channels" +
                                 (fold_.swap_roles ? ", src and diff_dst in each other's roles" : "") +
                                 (fold_.permute ? ", weights permuted" : "") +
                                 (!fold_.transpose_src       ? ""
                                  : p_.alg == Alg::weights   ? ", src transposed per image"
                                                             : ", diff_src transposed per image") +
                                 ")";
        return with_note(inner_->describe(), note);
    }
    int threads() const override { return inner_->threads(); }

private:
    // Weight gradients whose user weights hold, per block of the dense
    // copy's outer axis, an [OC][inner] matrix: the copy back is a batch of
    // transposes, the dense copy mb matrices rows × cols (= inner × OC).
    // NXC with weights [x][o][i] (a ConvTranspose's XIO, the spec's
    // default): per kernel position x, IC × OC. NCX with [i][o][x] (a
    // ConvTranspose's OIX): per input channel, K × OC. Otherwise mb = 0.
    // (No convolution's data gradient meets such weights.)
    struct Batched {
        int64_t mb = 0, rows = 0, cols = 0;
    };
    Batched batched_transpose() const {
        const WeightStrides& w = p_.wei_str;
        const int64_t oc = p_.oc(), ic = p_.icg, k = p_.k_sp();
        const bool k_run = kernel_axes_one_run(p_);
        if (p_.alg != Alg::weights) return {};
        if (k_run && p_.nxc && w.i == 1 && w.o == ic && w.k[2] == oc * ic) return {k, ic, oc};
        if (k_run && !p_.nxc && w.k[2] == 1 && w.o == k && w.i == oc * k) return {ic, k, oc};
        return {};
    }

    // The dense [c'][OC] copy into the user's weights (weight gradients),
    // or the user's weights into it (data gradients). Blocks of 16 along o,
    // i and the kernel position x, so that both sides move whole lines
    // whichever of o, i, x the user's layout keeps innermost.
    template <typename T>
    void scatter(const T* dense, T* user) const {
        blocks([&](int64_t d, int64_t u) { user[u] = dense[d]; });
    }
    template <typename T>
    void gather(const T* user, T* dense) const {
        blocks([&](int64_t d, int64_t u) { dense[d] = user[u]; });
    }
    template <typename F>
    void blocks(F&& move) const {
        constexpr int64_t b = 16;
        const int64_t oc = q_.oc(), ic = p_.icg, ksp = p_.k_sp();
        const WeightStrides& w = p_.wei_str;
        std::vector<int64_t> xoff(static_cast<size_t>(ksp));
        for (int64_t x = 0; x < ksp; ++x)
            xoff[static_cast<size_t>(x)] = user_weights_offset(p_, 0, p_.nxc ? x * ic : x);  // (o, i) = (0, 0)
        const int64_t ob = (oc + b - 1) / b, ib = (ic + b - 1) / b;
        auto run = [&](int64_t t) {
            const int64_t o0 = t / ib * b, i0 = t % ib * b;
            const int64_t o1 = std::min(oc, o0 + b), i1 = std::min(ic, i0 + b);
            for (int64_t x0 = 0; x0 < ksp; x0 += b)
                for (int64_t i = i0; i < i1; ++i)
                    for (int64_t x = x0; x < std::min(ksp, x0 + b); ++x) {
                        const int64_t c = p_.nxc ? x * ic + i : i * ksp + x;
                        const int64_t u = xoff[static_cast<size_t>(x)] + i * w.i;
                        for (int64_t o = o0; o < o1; ++o) move(c * oc + o, u + o * w.o);
                    }
        };
        if (oc * ic * ksp < (int64_t(1) << 16)) {
            for (int64_t t = 0; t < ob * ib; ++t) run(t);
            return;
        }
        tbb::parallel_for(tbb::blocked_range<int64_t>(0, ob * ib), [&](const tbb::blocked_range<int64_t>& r) {
            for (int64_t t = r.begin(); t != r.end(); ++t) run(t);
        });
    }

    Problem p_, q_;
    FullKernelFold fold_;
    Isa isa_;
    std::unique_ptr<Executor> inner_;
};

}  // namespace

bool verbose_log() {
    const char* v = std::getenv("CONVGRAD_VERBOSE");
    return v && *v && *v != '0';
}

bool runs_serial(const Problem& p) {
    if (p.kind == op_kind::conv_bwd_data) return p.flops() <= kSerialMaxFlopsData;
    return p.flops() <= kSerialMaxFlops && double(p.activation_elems()) * double(dtype_size(p.dt)) <= kSerialMaxBytes;
}

int op_threads(const Problem& p) { return runs_serial(p) ? 1 : tbb::this_task_arena::max_concurrency(); }

// Measured where vdpbf16ps does not pay (an Intel Xeon guest, vdpbf16ps at
// 0.55x the FMA's FLOP rate, 2 threads, widened / vdpbf16ps): ResNet-50
// 1.48x over 40 cells, weight gradients of depthwise and grouped layers
// 1.16-2.0x. Data gradients on the depthwise path keep vdpbf16ps where
// widening lost: lane groups (RegNet, ResNeXt-50 groups of 2-16: 0.49-1.02x,
// the widened kernel permutes diff_dst for each FMA) and strided depthwise
// (0.88-0.95x); unit-stride depthwise gained 1.06-1.37x.
Isa op_isa(const Problem& p, Isa isa, Bf16Dot setting, bool dot_pays) {
    if (p.dt != data_type::bf16 || isa < Isa::avx512_core_bf16 || setting == Bf16Dot::on) return isa;
    if (setting == Bf16Dot::off) return Isa::avx512_core;
    const bool strided = std::any_of(p.stride.begin(), p.stride.end(), [](int64_t s) { return s > 1; });
    const bool keeps_dot = p.alg == Alg::data && data_depthwise_path(p, isa) && (p.icg > 1 || strided);
    return dot_pays || keeps_dot ? isa : Isa::avx512_core;
}

bool bf16_dot_pays() {
    static const bool pays = [] {
        const DotProbe p = measure_dot_probe();
        if (verbose_log())
            std::fprintf(stderr, "convgrad,bf16_dot,vdpbf16ps %.1f GFLOP/s vs vfmadd231ps %.1f GFLOP/s: %s\n",
                         p.dot_gflops, p.fma_gflops, p.dot_pays() ? "vdpbf16ps" : "bf16 widened to f32");
        return p.dot_pays();
    }();
    return pays;
}

Isa op_isa(const Problem& p) {
    const Isa isa = std::min(effective_isa(), Isa::avx512_core_bf16);
    const Bf16Dot setting = bf16_dot_setting();  // checked for every op
    // The probe runs only for a bf16 op that could use vdpbf16ps.
    const bool probe = p.dt == data_type::bf16 && isa >= Isa::avx512_core_bf16 && setting == Bf16Dot::automatic;
    return op_isa(p, isa, setting, probe && bf16_dot_pays());
}

bool amx_takes_all() {
    const char* env = std::getenv("CONVGRAD_AMX");
    const std::string v = env ? env : "";
    if (v.empty() || v == "auto") return false;
    if (v == "all") return true;
    throw error("CONVGRAD_AMX: expected auto or all, given \"" + v + "\"");
}

std::unique_ptr<Executor> make_executor(const Problem& p) {
    const bool amx = effective_isa() == Isa::amx;
    auto make_amx = [&](const Problem& x) {
        return amx ? x.alg == Alg::weights ? make_jit_weights_amx_executor(x) : make_jit_data_amx_executor(x)
                   : nullptr;
    };
    bf16_dot_setting();  // checked for every op
    amx_takes_all();
    if (auto tiles = make_amx(p)) return tiles;  // (before op_isa: no probe for them)
    const Isa isa = op_isa(p);
    if (isa >= Isa::avx2) {
        std::string why;
        FullKernelFold fold;
        Problem q = fold_full_kernel(p, &fold);
        const bool unstrided = !fold.folded && unstride_1x1(p, &q);
        // Weight gradients of strided 1x1 layers on the inner-product path
        // subsample src as they go; the others run q between two passes.
        if (unstrided && p.alg == Alg::weights)
            if (auto dot = make_jit_weights_dot_executor(q, isa, &p)) return dot;
        auto make_jit = [&](const Problem& x) -> std::unique_ptr<Executor> {
            if (auto tiles = make_amx(x)) return tiles;
            return x.alg == Alg::weights ? make_jit_weights_executor(x, isa, &why)
                                         : make_jit_data_executor(x, isa, &why);
        };
        std::unique_ptr<Executor> jit;
        if (swap_lanes_1x1(p, isa >= Isa::avx512_core ? 16 : 8)) {
            if ((jit = make_jit(swapped_1x1(p)))) return std::make_unique<SwappedExecutor>(std::move(jit));
        } else if (unstrided) {
            jit = make_unstrided_executor(p, q, isa, make_jit);
            if (!jit) jit = make_jit(p);  // the strided problem itself
        } else {
            jit = make_jit(q);
            if (jit && fold.folded) return std::make_unique<FoldedExecutor>(p, q, fold, isa, std::move(jit));
        }
        if (jit) return jit;
        if (verbose_log())
            std::fprintf(stderr, "convgrad,dispatch,%s declined: %s\n", isa_name(isa), why.c_str());
    }
    return std::make_unique<RefExecutor>(p);
}

}  // namespace convgrad::detail
