// The adjoint identity, an independent check of the reference:
//   <conv(x, W), dy> = <x, bwd_data(dy, W)> = <W, bwd_weights(x, dy)>
// and for ConvTranspose: <convT(x, W), dy> = <W, convT_bwd_weights(x, dy)>.
// The forward ops below are written here from their definitions, separately
// from src/ref. Integer data keeps every sum exact, so equality is exact.
#include <catch2/catch.hpp>

#include <random>

#include "test_util.hpp"

using convgrad::attributes;
using convgrad::data_type;
using convgrad::dims;
using convgrad::op_kind;
using testutil::Buffer;

namespace {

struct Case {
    int nsp = 1;
    int64_t mb = 1, g = 1, icg = 1, ocg = 1;
    dims in, out, k, s, d, pb, pe, op;  // per spatial axis
};

// Strides of a dense row-major tensor.
std::vector<int64_t> row_major(const dims& d) {
    std::vector<int64_t> st(d.size(), 1);
    for (int i = static_cast<int>(d.size()) - 2; i >= 0; --i) st[i] = st[i + 1] * d[i + 1];
    return st;
}

// Visits every output position of a convolution (NCX x, OIX W) and every tap
// that lands inside x: f(n, oc, out_index, ic, in_index, w_index).
template <typename F>
void for_each_term(const Case& c, F f) {
    const int64_t ic = c.icg * c.g, oc = c.ocg * c.g;
    dims xd{c.mb, ic}, yd{c.mb, oc}, wd{oc, c.icg};
    for (int a = 0; a < c.nsp; ++a) {
        xd.push_back(c.in[a]);
        yd.push_back(c.out[a]);
        wd.push_back(c.k[a]);
    }
    const auto xs = row_major(xd), ys = row_major(yd), ws = row_major(wd);
    const int64_t out_sp = testutil::prod(c.out), k_sp = testutil::prod(c.k);
    for (int64_t n = 0; n < c.mb; ++n)
    for (int64_t o = 0; o < oc; ++o)
    for (int64_t p = 0; p < out_sp; ++p)
    for (int64_t i = 0; i < c.icg; ++i)
    for (int64_t t = 0; t < k_sp; ++t) {
        int64_t yi = n * ys[0] + o * ys[1], xi = n * xs[0] + ((o / c.ocg) * c.icg + i) * xs[1];
        int64_t wi = o * ws[0] + i * ws[1];
        bool inside = true;
        int64_t prem = p, trem = t;
        for (int a = c.nsp - 1; a >= 0; --a) {
            const int64_t po = prem % c.out[a], tk = trem % c.k[a];
            prem /= c.out[a];
            trem /= c.k[a];
            const int64_t pi = po * c.s[a] - c.pb[a] + tk * c.d[a];
            inside = inside && pi >= 0 && pi < c.in[a];
            yi += po * ys[2 + a];
            xi += pi * xs[2 + a];
            wi += tk * ws[2 + a];
        }
        if (inside) f(xi, yi, wi);
    }
}

double dot(const Buffer& a, const Buffer& b) {
    double s = 0;
    for (int64_t i = 0; i < a.size(); ++i) s += double(a.get(i)) * b.get(i);
    return s;
}

Case random_case(std::mt19937& gen) {
    auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(gen); };
    Case c;
    c.nsp = pick(1, 3);
    c.mb = pick(1, 2);
    c.g = pick(1, 3);
    c.icg = pick(1, 3);
    c.ocg = pick(1, 3);
    for (int a = 0; a < c.nsp; ++a) {
        const int64_t k = pick(1, c.nsp == 3 ? 2 : 3), s = pick(1, 3), d = pick(1, 2);
        const int64_t pb = pick(0, 3), pe = pick(0, 3), e = (k - 1) * d + 1;
        const int64_t in = std::max<int64_t>(e - pb - pe, 1) + pick(0, 5);
        if (in + pb + pe < e) return random_case(gen);
        c.k.push_back(k);
        c.s.push_back(s);
        c.d.push_back(d);
        c.pb.push_back(pb);
        c.pe.push_back(pe);
        c.in.push_back(in);
        c.out.push_back((in + pb + pe - e) / s + 1);
        c.op.push_back((in + pb + pe - e) % s);  // the rows the last window leaves over
    }
    return c;
}

attributes case_attrs(const Case& c) {
    attributes a;
    a.strides = c.s;
    a.dilations = c.d;
    a.pads_begin = c.pb;
    a.pads_end = c.pe;
    a.groups = c.g;
    a.data_format = "NCX";
    a.weights_format = "OIX";
    return a;
}

dims shape(int64_t n, int64_t ch, const dims& sp) {
    dims r{n, ch};
    r.insert(r.end(), sp.begin(), sp.end());
    return r;
}

}  // namespace

TEST_CASE("adjoint identity: conv forward, bwd data, bwd weights", "[ref][adjoint]") {
    std::mt19937 gen(1234);
    for (int iter = 0; iter < 300; ++iter) {
        const Case c = random_case(gen);
        const dims xd = shape(c.mb, c.icg * c.g, c.in), yd = shape(c.mb, c.ocg * c.g, c.out);
        const dims wd = shape(c.ocg * c.g, c.icg, c.k);
        const Buffer x = testutil::small_ints(data_type::f32, testutil::prod(xd), 3 * iter, -3, 3);
        const Buffer w = testutil::small_ints(data_type::f32, testutil::prod(wd), 3 * iter + 1, -3, 3);
        const Buffer dy = testutil::small_ints(data_type::f32, testutil::prod(yd), 3 * iter + 2, -3, 3);

        // <conv(x, W), dy> computed term by term.
        double fwd = 0;
        for_each_term(c, [&](int64_t xi, int64_t yi, int64_t wi) {
            fwd += double(x.get(xi)) * w.get(wi) * dy.get(yi);
        });

        attributes a = case_attrs(c);
        a.weights_shape = wd;
        const auto bw = testutil::make_op("ref", op_kind::conv_bwd_weights, data_type::f32, a, xd, yd);
        a.dst_shape = xd;
        const auto bd = testutil::make_op("ref", op_kind::conv_bwd_data, data_type::f32, a, yd, wd);
        INFO("case " << iter << ": " << bw.describe());
        CHECK(dot(w, testutil::run(bw, x, dy)) == fwd);
        CHECK(dot(x, testutil::run(bd, dy, w)) == fwd);

        // Without dst_shape, output_padding recovers the rows the last window leaves over.
        a.dst_shape.clear();
        a.output_padding = c.op;
        const auto bd2 = testutil::make_op("ref", op_kind::conv_bwd_data, data_type::f32, a, yd, wd);
        CHECK(bd2.output_dims() == xd);
    }
}

TEST_CASE("adjoint identity: ConvTranspose bwd weights, and the swapped-roles equivalence",
          "[ref][adjoint]") {
    std::mt19937 gen(99);
    for (int iter = 0; iter < 200; ++iter) {
        // A convolution case read backwards: the ConvTranspose maps the
        // convolution's output side (x, IC_T = c.oc) to its input side (y, OC_T = c.ic).
        const Case c = random_case(gen);
        const int64_t ic_t = c.ocg * c.g, oc_t = c.icg * c.g;
        const dims xd = shape(c.mb, ic_t, c.out), yd = shape(c.mb, oc_t, c.in);
        const dims wd = shape(ic_t, c.icg, c.k);  // IOX: (IC_T, OC_T/g, K)
        const Buffer x = testutil::small_ints(data_type::f32, testutil::prod(xd), 5 * iter, -3, 3);
        const Buffer w = testutil::small_ints(data_type::f32, testutil::prod(wd), 5 * iter + 1, -3, 3);
        const Buffer dy = testutil::small_ints(data_type::f32, testutil::prod(yd), 5 * iter + 2, -3, 3);

        // ConvTranspose forward y[j] += x[i] W[i][o][k] for j = i*S - pb + k*D: the same
        // (x-index, y-index, w-index) triples as the convolution with the roles of its
        // input and output swapped.
        double fwd = 0;
        for_each_term(c, [&](int64_t conv_x, int64_t conv_y, int64_t wi) {
            fwd += double(x.get(conv_y)) * w.get(wi) * dy.get(conv_x);
        });

        attributes a = case_attrs(c);
        a.weights_format = "IOX";
        a.weights_shape = wd;
        a.output_padding = c.op;
        const auto tw = testutil::make_op("ref", op_kind::conv_transpose_bwd_weights, data_type::f32,
                                          a, xd, yd);
        INFO("case " << iter << ": " << tw.describe());
        const Buffer dw_t = testutil::run(tw, x, dy);
        CHECK(dot(w, dw_t) == fwd);

        // ConvolutionBackwardWeights(src = dy, diff_dst = x) read as OIX is the same tensor.
        attributes ac = case_attrs(c);
        ac.weights_shape = wd;
        const auto cw = testutil::make_op("ref", op_kind::conv_bwd_weights, data_type::f32, ac, yd, xd);
        CHECK(testutil::bitwise_equal(testutil::run(cw, dy, x), dw_t));
    }
}
