// Strided 1x1 layers in NCX as unit-stride ones.
//
// A 1x1 kernel with strides s and no begin padding reads src only at the
// pixels (od·s, oh·s, ow·s): its weight gradient is the unit-stride one of
// the subsampled src, and its data gradient is the unit-stride one's
// diff_src spread back to those pixels, zeros elsewhere. In NCX the
// unit-stride problems run in place (exec_weights_dot.cpp,
// exec_data_ncx.cpp) or transpose a quarter as much (s = 2), where the
// strided problem transposed all of src or diff_src around the NXC
// kernels. The subsampling and the spreading are one pass each over the
// rows of the pixels read (16 of them a vector step for s = 2 on AVX-512,
// the row's end masked; ops/subsample.hpp).
//
// Every such layer takes it, but for weight gradients with more input than
// output channels that the inner-product path takes: that path subsamples
// each tile's rows itself (exec_weights_dot.cpp). AMD Zen 4, 2 threads, mb 32, against the
// strided problem (tools/sweep_ab.py --min): ResNet-50's res3a 1x1 layers
// (28x28 outputs) 1.03-1.43x in f32 / f16 (--rounds=2); its 14x14 and
// 7x7 outputs 1.036x geomean over 24 cases (f32 / bf16 / f16, both
// gradients, --rounds=3; res4a_branch2a 0.96-1.20x, the wide layers
// 0.94-1.07x) once the vector passes masked their rows' ends: with 14- or
// 7-pixel rows done element by element they had run 0.55-0.91x.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ops/executor.hpp"
#include "ops/parallel.hpp"
#include "ops/scratch.hpp"
#include "ops/problem.hpp"
#include "ops/subsample.hpp"

namespace convgrad::detail {
namespace {

// The spread reads the unit-stride diff_src this far ahead of the row it
// spreads, prefetched: its masked loads left the hardware prefetchers
// behind (ResNet-50's strided 1x1 data gradients 1.06-1.23x, AMD Zen 5, 2
// threads, mb 32; prefetching the rows it writes as well: 0.93-0.98x).
constexpr int64_t kSpreadPrefetchBytes = 4096;
// A data gradient's unit-stride diff_src goes through scratch this many
// bytes of images at a time (at least one image), so the scratch does not
// grow with the minibatch: whole, ResNet-50's strided layers kept 9-25 MiB
// at mb 32 and 1D audio layers 16-32 MiB at mb 4.
constexpr int64_t kUnstridedPassBytes = int64_t(4) << 20;

// q (the unit-stride problem of p's minibatch) for n of its images.
Problem with_images(const Problem& p, const Problem& q, int64_t n) {
    Problem r = q;
    r.mb = n;
    r.input0_elems = p.input0_elems / p.mb * n;
    r.output_elems = q.output_elems / p.mb * n;
    return r;
}

class UnstridedExecutor final : public Executor {
public:
    // q: the unit-stride problem of the images a pass (weight gradients:
    // all of them); `last` for the minibatch's last pass where it has
    // fewer images, else null.
    UnstridedExecutor(const Problem& p, const Problem& q, Isa isa, std::unique_ptr<Executor> inner,
                      std::unique_ptr<Executor> last)
        : p_(p), q_(q), avx512_(isa >= Isa::avx512_core), inner_(std::move(inner)), last_(std::move(last)) {}

    void run(const void* in0, const void* in1, void* out) const override {
        const int64_t es = static_cast<int64_t>(dtype_size(p_.dt));
        const ScratchLease buf(Scratch::unstrided, q_.mb * p_.ic() * q_.in_sp() * es);
        char* sub = buf.get();
        if (p_.alg == Alg::weights) {
            subsample(static_cast<const char*>(p_.swap_inputs ? in1 : in0), sub);
            inner_->run(p_.swap_inputs ? in0 : sub, p_.swap_inputs ? sub : in1, out);
            return;
        }
        const char* dd = static_cast<const char*>(in0);
        char* diff_src = static_cast<char*>(out);
        for (int64_t n0 = 0; n0 < p_.mb; n0 += q_.mb) {
            const int64_t n = std::min(q_.mb, p_.mb - n0);
            (n == q_.mb ? *inner_ : *last_).run(dd + n0 * p_.dst_str.n * es, in1, sub);
            spread(sub, diff_src + n0 * p_.src_str.n * es, n);
        }
    }
    std::string describe() const override {
        std::string s = inner_->describe() + "\n  strided 1x1 in NCX: run at unit stride on " +
                        (p_.alg == Alg::weights ? "src subsampled" : "diff_src spread back with zeros");
        if (q_.mb < p_.mb) s += ", " + std::to_string(q_.mb) + (q_.mb == 1 ? " image a pass" : " images a pass");
        return s;
    }
    int threads() const override { return inner_->threads(); }

private:
    // Over the (image, channel) planes of `images` images, on the op's threads.
    template <typename F>
    void planes(int64_t images, F&& body) const {
        parallel_static(threads(), images * p_.ic(), body);
    }
    // The src row (id, ih) of plane `plane` of a tensor with src's dims.
    int64_t row_offset(int64_t plane, int64_t id, int64_t ih) const {
        return ((plane * p_.in[0] + id) * p_.in[1] + ih) * p_.in[2];
    }
    void subsample(const char* src, char* sub) const {
        const SubsampleGeometry g{p_.in, p_.out, p_.stride, static_cast<int>(dtype_size(p_.dt)), avx512_, true};
        planes(p_.mb, [&](int64_t plane) {
            subsample_run(g, src + plane * p_.in_sp() * g.es, 0, q_.in_sp(), sub + plane * q_.in_sp() * g.es);
        });
    }
    // The unit-stride diff_src of `images` images into theirs.
    void spread(const char* sub, char* diff_src, int64_t images) const {
        const int es = static_cast<int>(dtype_size(p_.dt));
        const std::array<int64_t, 3>& s = p_.stride;
        const size_t row_bytes = static_cast<size_t>(p_.in[2] * es);
        planes(images, [&](int64_t plane) {
            const char* from = sub + plane * q_.in_sp() * es;
            for (int64_t id = 0; id < p_.in[0]; ++id)
                for (int64_t ih = 0; ih < p_.in[1]; ++ih) {
                    char* to = diff_src + row_offset(plane, id, ih) * es;
                    const int64_t od = id / s[0], oh = ih / s[1];
                    if (id % s[0] || ih % s[1] || od >= p_.out[0] || oh >= p_.out[1]) {
                        std::memset(to, 0, row_bytes);
                        continue;
                    }
                    const char* row = from + (od * p_.out[1] + oh) * p_.out[2] * es;
                    // The unit-stride rows a few KiB on (see kSpreadPrefetchBytes).
                    for (int64_t b = 0; b < p_.out[2] * es; b += 64)
                        _mm_prefetch(row + kSpreadPrefetchBytes + b, _MM_HINT_T0);
                    if (s[2] == 2 && avx512_) {
                        spread_even(row, to, p_.out[2], p_.in[2], es);
                        continue;
                    }
                    std::memset(to, 0, row_bytes);
                    for (int64_t x = 0; x < p_.out[2]; ++x)
                        std::memcpy(to + x * s[2] * es, row + x * es, static_cast<size_t>(es));
                }
        });
    }

    Problem p_, q_;
    bool avx512_;
    std::unique_ptr<Executor> inner_, last_;
};

}  // namespace


bool unstride_1x1(const Problem& p, Problem* q) {
    if (p.nxc) return false;
    bool strided = false;
    for (int a = 0; a < 3; ++a) {
        if (p.k[a] != 1 || p.pad_begin[a] != 0 || (p.out[a] - 1) * p.stride[a] >= p.in[a]) return false;
        strided |= p.stride[a] > 1;
    }
    if (!strided) return false;
    *q = p;
    q->in = p.out;
    q->stride = q->dil = {1, 1, 1};
    q->pad_begin = q->pad_end = {0, 0, 0};
    q->src_str.sp = {p.out[1] * p.out[2], p.out[2], 1};
    q->src_str.c = p.out_sp();
    q->src_str.n = p.ic() * p.out_sp();
    const int64_t src_elems = p.mb * p.ic() * p.out_sp();
    if (p.alg == Alg::data)
        q->output_elems = src_elems;
    else if (p.swap_inputs)
        q->input1_elems = src_elems;
    else
        q->input0_elems = src_elems;
    return true;
}

std::unique_ptr<Executor> make_unstrided_executor(
        const Problem& p, const Problem& q, Isa isa,
        const std::function<std::unique_ptr<Executor>(const Problem&)>& make) {
    int64_t n = p.mb;
    if (p.alg == Alg::data) {
        const int64_t image = p.ic() * q.in_sp() * static_cast<int64_t>(dtype_size(p.dt));
        n = std::clamp<int64_t>(kUnstridedPassBytes / image, 1, p.mb);
    }
    const Problem a = n < p.mb ? with_images(p, q, n) : q;
    std::unique_ptr<Executor> inner = make(a), last;
    if (inner && p.mb % n) last = make(with_images(p, q, p.mb % n));
    if (!inner || (p.mb % n && !last)) return nullptr;
    return std::make_unique<UnstridedExecutor>(p, a, isa, std::move(inner), std::move(last));
}

}  // namespace convgrad::detail
