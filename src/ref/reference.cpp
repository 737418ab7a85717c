// The reference path. Obviously correct over clever: every output element is
// one double-precision sum written exactly once. Parallel over output slices
// with oneTBB only so that validation runs stay fast.
#include "ref/reference.hpp"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <vector>

#include "ops/numeric.hpp"

namespace convgrad::detail {
namespace {

// Copies a tensor, given by its element strides, into a dense f32 array in
// canonical order: (n, c, d, h, w) for activations, (o, i, kd, kh, kw) for
// weights. The loops below then index canonical arrays only, and their
// innermost loop (w) reads contiguous memory whatever the user's layout.
std::vector<float> canonical(const void* data, data_type dt, const std::array<int64_t, 5>& extent,
                             const std::array<int64_t, 5>& stride) {
    std::vector<float> r(static_cast<size_t>(extent[0] * extent[1] * extent[2] * extent[3] * extent[4]));
    size_t pos = 0;
    for (int64_t a = 0; a < extent[0]; ++a)
    for (int64_t b = 0; b < extent[1]; ++b)
    for (int64_t d = 0; d < extent[2]; ++d)
    for (int64_t h = 0; h < extent[3]; ++h)
    for (int64_t w = 0; w < extent[4]; ++w)
        r[pos++] = load_elem(data, a * stride[0] + b * stride[1] + d * stride[2] + h * stride[3] + w * stride[4], dt);
    return r;
}

std::vector<float> canonical_data(const void* data, const Problem& p, const DataStrides& s, int64_t c,
                                  const std::array<int64_t, 3>& sp) {
    return canonical(data, p.dt, {p.mb, c, sp[0], sp[1], sp[2]}, {s.n, s.c, s.sp[0], s.sp[1], s.sp[2]});
}

std::vector<float> canonical_weights(const void* data, const Problem& p) {
    const WeightStrides& s = p.wei_str;
    return canonical(data, p.dt, {p.oc(), p.icg, p.k[0], p.k[1], p.k[2]}, {s.o, s.i, s.k[0], s.k[1], s.k[2]});
}

// Strides of a dense canonical (n, c, d, h, w) array with c channels.
using Dense = DataStrides;
Dense dense(int64_t c, const std::array<int64_t, 3>& sp) {
    Dense s;
    s.sp = {sp[1] * sp[2], sp[2], 1};
    s.c = sp[0] * sp[1] * sp[2];
    s.n = c * s.c;
    return s;
}

// Input index on one axis touched by output index o and tap k, or -1 in padding.
int64_t input_index(const Problem& p, int a, int64_t o, int64_t k) {
    const int64_t i = o * p.stride[a] - p.pad_begin[a] + k * p.dil[a];
    return (i >= 0 && i < p.in[a]) ? i : -1;
}

// Output index on one axis that reads input index i through tap k, or -1.
int64_t output_index(const Problem& p, int a, int64_t i, int64_t k) {
    const int64_t t = i + p.pad_begin[a] - k * p.dil[a];
    if (t < 0 || t % p.stride[a] != 0) return -1;
    const int64_t o = t / p.stride[a];
    return o < p.out[a] ? o : -1;
}

// diff_W[o][i][k] = sum_{n, out} src[n][g*icg + i][in(out, k)] * diff_dst[n][o][out]
void weights_grad(const Problem& p, const float* src, const float* dd, void* dw) {
    const Dense ss = dense(p.ic(), p.in), ds = dense(p.oc(), p.out);
    const WeightStrides& ws = p.wei_str;
    tbb::parallel_for(int64_t(0), p.oc() * p.icg, [&](int64_t oi) {
        const int64_t o = oi / p.icg, i = oi % p.icg;
        const int64_t c = (o / p.ocg) * p.icg + i;
        for (int64_t kd = 0; kd < p.k[0]; ++kd)
        for (int64_t kh = 0; kh < p.k[1]; ++kh)
        for (int64_t kw = 0; kw < p.k[2]; ++kw) {
            double acc = 0.0;
            for (int64_t n = 0; n < p.mb; ++n)
            for (int64_t od = 0; od < p.out[0]; ++od) {
                const int64_t id = input_index(p, 0, od, kd);
                if (id < 0) continue;
                for (int64_t oh = 0; oh < p.out[1]; ++oh) {
                    const int64_t ih = input_index(p, 1, oh, kh);
                    if (ih < 0) continue;
                    for (int64_t ow = 0; ow < p.out[2]; ++ow) {
                        const int64_t iw = input_index(p, 2, ow, kw);
                        if (iw < 0) continue;
                        const float x = src[n * ss.n + c * ss.c + id * ss.sp[0] + ih * ss.sp[1] + iw * ss.sp[2]];
                        const float y = dd[n * ds.n + o * ds.c + od * ds.sp[0] + oh * ds.sp[1] + ow * ds.sp[2]];
                        acc += static_cast<double>(x) * y;
                    }
                }
            }
            store_elem(dw, o * ws.o + i * ws.i + kd * ws.k[0] + kh * ws.k[1] + kw * ws.k[2], p.dt, acc);
        }
    });
}

// diff_src[n][c][in] = sum_{o in group, k} diff_dst[n][o][out(in, k)] * W[o][c % icg][k]
void data_grad(const Problem& p, const float* dd, const float* w, void* dsrc) {
    const DataStrides& ss = p.src_str;
    const Dense ds = dense(p.oc(), p.out);
    const Dense ws = dense(p.icg, p.k);  // o, i, k of the canonical weights
    tbb::parallel_for(int64_t(0), p.mb * p.ic(), [&](int64_t nc) {
        const int64_t n = nc / p.ic(), c = nc % p.ic();
        const int64_t grp = c / p.icg, i = c % p.icg;
        for (int64_t id = 0; id < p.in[0]; ++id)
        for (int64_t ih = 0; ih < p.in[1]; ++ih)
        for (int64_t iw = 0; iw < p.in[2]; ++iw) {
            double acc = 0.0;
            for (int64_t kd = 0; kd < p.k[0]; ++kd) {
                const int64_t od = output_index(p, 0, id, kd);
                if (od < 0) continue;
                for (int64_t kh = 0; kh < p.k[1]; ++kh) {
                    const int64_t oh = output_index(p, 1, ih, kh);
                    if (oh < 0) continue;
                    for (int64_t kw = 0; kw < p.k[2]; ++kw) {
                        const int64_t ow = output_index(p, 2, iw, kw);
                        if (ow < 0) continue;
                        for (int64_t o = grp * p.ocg; o < (grp + 1) * p.ocg; ++o) {
                            const float y = dd[n * ds.n + o * ds.c + od * ds.sp[0] + oh * ds.sp[1] + ow * ds.sp[2]];
                            const float x = w[o * ws.n + i * ws.c + kd * ws.sp[0] + kh * ws.sp[1] + kw * ws.sp[2]];
                            acc += static_cast<double>(x) * y;
                        }
                    }
                }
            }
            store_elem(dsrc, n * ss.n + c * ss.c + id * ss.sp[0] + ih * ss.sp[1] + iw * ss.sp[2], p.dt, acc);
        }
    });
}

}  // namespace

void reference_execute(const Problem& p, const void* input0, const void* input1, void* output) {
    if (p.alg == Alg::data) {
        const std::vector<float> dd = canonical_data(input0, p, p.dst_str, p.oc(), p.out);
        data_grad(p, dd.data(), canonical_weights(input1, p).data(), output);
        return;
    }
    const void* src = p.swap_inputs ? input1 : input0;
    const void* dd = p.swap_inputs ? input0 : input1;
    weights_grad(p, canonical_data(src, p, p.src_str, p.ic(), p.in).data(),
                 canonical_data(dd, p, p.dst_str, p.oc(), p.out).data(), output);
}

}  // namespace convgrad::detail
