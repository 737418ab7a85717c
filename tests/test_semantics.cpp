// Semantics of docs/SEMANTICS.md: auto_pad per op, layouts, groups, shape
// inputs, output_padding and the rounding of 16-bit outputs.
#include <catch2/catch.hpp>

#include "test_util.hpp"

using convgrad::attributes;
using convgrad::data_type;
using convgrad::dims;
using convgrad::op_kind;
using testutil::Buffer;

namespace {

attributes base_attrs(int nsp) {
    attributes a;
    a.strides = dims(nsp, 1);
    a.pads_begin = dims(nsp, 0);
    a.pads_end = dims(nsp, 0);
    a.dilations = dims(nsp, 1);
    return a;
}

// Reorders a dense tensor: result dim j is source dim perm[j].
Buffer permute(const Buffer& src, const dims& src_dims, const std::vector<int>& perm) {
    const size_t r = src_dims.size();
    dims dst_dims(r);
    for (size_t j = 0; j < r; ++j) dst_dims[j] = src_dims[perm[j]];
    std::vector<int64_t> sstr(r, 1);
    for (int i = static_cast<int>(r) - 2; i >= 0; --i) sstr[i] = sstr[i + 1] * src_dims[i + 1];
    Buffer dst(src.dt, src.size());
    std::vector<int64_t> idx(r, 0);
    for (int64_t lin = 0; lin < dst.size(); ++lin) {
        int64_t rem = lin, off = 0;
        for (int j = static_cast<int>(r) - 1; j >= 0; --j) {
            idx[j] = rem % dst_dims[j];
            rem /= dst_dims[j];
            off += idx[j] * sstr[perm[j]];
        }
        std::memcpy(dst.bytes.data() + lin * Buffer::esize(src.dt),
                    src.bytes.data() + off * Buffer::esize(src.dt), Buffer::esize(src.dt));
    }
    return dst;
}

dims apply(const dims& d, const std::vector<int>& perm) {
    dims r;
    for (int p : perm) r.push_back(d[p]);
    return r;
}

std::vector<int> inverse(const std::vector<int>& perm) {
    std::vector<int> inv(perm.size());
    for (size_t j = 0; j < perm.size(); ++j) inv[perm[j]] = static_cast<int>(j);
    return inv;
}

// NCX -> NXC.
std::vector<int> to_nxc(int nsp) {
    std::vector<int> p{0};
    for (int a = 0; a < nsp; ++a) p.push_back(2 + a);
    p.push_back(1);
    return p;
}

// From a weights tensor in (A, B, X...) order: "AB" keeps it, "BA" swaps the
// channel axes, "XBA" / "XAB" put the kernel axes first.
std::vector<int> weights_perm(const std::string& order, int nsp) {
    std::vector<int> p;
    for (char ch : order) {
        if (ch == 'A') p.push_back(0);
        if (ch == 'B') p.push_back(1);
        if (ch == 'X')
            for (int a = 0; a < nsp; ++a) p.push_back(2 + a);
    }
    return p;
}

}  // namespace

TEST_CASE("auto_pad matches the explicit pads of its rule, odd and even totals", "[semantics][auto_pad]") {
    struct Row {
        int64_t in, k, s, d;
        std::string mode;
        int64_t pb, pe;  // worked out by hand from the forward rule
    };
    // Convolution family: T = max(E - (I % S ? I % S : S), 0).
    const std::vector<Row> rows = {
            {7, 4, 1, 1, "same_upper", 1, 2},   // T = 3 (odd): extra unit at the end
            {7, 4, 1, 1, "SAME_LOWER", 2, 1},   // ... at the beginning; case-insensitive
            {7, 3, 1, 1, "Same_Upper", 1, 1},   // T = 2 (even)
            {7, 3, 1, 1, "same_lower", 1, 1},
            {7, 3, 2, 1, "same_upper", 1, 1},   // I % S = 1: T = 3 - 1 = 2
            {8, 3, 2, 1, "same_upper", 0, 1},   // I % S = 0: T = 3 - 2 = 1
            {8, 3, 2, 1, "same_lower", 1, 0},
            {9, 3, 2, 2, "same_upper", 2, 2},   // E = 5, I % S = 1: T = 4
            {6, 1, 3, 1, "same_upper", 0, 0},   // T = max(1 - 3, 0) = 0
            {7, 4, 1, 1, "valid", 0, 0},
    };
    for (const Row& r : rows) {
        for (op_kind kind : {op_kind::conv_bwd_weights, op_kind::conv_bwd_data}) {
            INFO(r.mode << " in " << r.in << " k " << r.k << " s " << r.s << " d " << r.d << " "
                        << convgrad::op_name(kind));
            const int64_t e = (r.k - 1) * r.d + 1, out = (r.in + r.pb + r.pe - e) / r.s + 1;
            attributes expl = base_attrs(1);
            expl.strides = {r.s};
            expl.dilations = {r.d};
            expl.pads_begin = {r.pb};
            expl.pads_end = {r.pe};
            expl.data_format = "NCX";
            expl.weights_format = "OIX";
            attributes aut = expl;
            aut.pads_begin.clear();  // ignored (and may be absent) under auto_pad
            aut.pads_end = {99};
            aut.auto_pad = r.mode;
            const dims x{2, 3, r.in}, y{2, 4, out}, w{4, 3, r.k};
            expl.weights_shape = aut.weights_shape = w;
            expl.dst_shape = aut.dst_shape = x;
            const bool bw = kind == op_kind::conv_bwd_weights;
            const dims d0 = bw ? x : y, d1 = bw ? y : w;
            const auto oe = testutil::make_op("ref", kind, data_type::f32, expl, d0, d1);
            const auto oa = testutil::make_op("ref", kind, data_type::f32, aut, d0, d1);
            const Buffer a = testutil::small_ints(data_type::f32, testutil::prod(d0), 1);
            const Buffer b = testutil::small_ints(data_type::f32, testutil::prod(d1), 2);
            CHECK(testutil::bitwise_equal(testutil::run(oe, a, b), testutil::run(oa, a, b)));
        }
    }
}

TEST_CASE("auto_pad same_upper and same_lower differ for odd totals", "[semantics][auto_pad]") {
    // Guards the previous test against a rule that ignores the mode.
    attributes a = base_attrs(1);
    a.weights_shape = {4, 3, 2};
    a.auto_pad = "same_upper";
    const dims x{1, 6, 3}, y{1, 6, 4};  // NXC: I = 6, k4 -> T = 3
    a.weights_shape = {4, 3, 4};
    const auto up = testutil::make_op("ref", op_kind::conv_bwd_weights, data_type::f32, a, x, y);
    a.auto_pad = "same_lower";
    const auto lo = testutil::make_op("ref", op_kind::conv_bwd_weights, data_type::f32, a, x, y);
    const Buffer s = testutil::small_ints(data_type::f32, 18, 5), d = testutil::small_ints(data_type::f32, 24, 6);
    CHECK_FALSE(testutil::bitwise_equal(testutil::run(up, s, d), testutil::run(lo, s, d)));
}

TEST_CASE("auto_pad for ConvTranspose uses T = E - S", "[semantics][auto_pad]") {
    // k5 s2: T = 3, same_upper pads 1/2, same_lower 2/1; Y = S*X (the 'same' size).
    for (const auto& [mode, pb, pe] : std::vector<std::tuple<std::string, int64_t, int64_t>>{
                 {"same_upper", 1, 2}, {"same_lower", 2, 1}, {"valid", 0, 0}}) {
        INFO(mode);
        const int64_t xs = 5, ys = mode == "valid" ? 2 * (xs - 1) + 5 : 2 * xs;
        attributes aut = base_attrs(1);
        aut.strides = {2};
        aut.auto_pad = mode;
        aut.data_format = "NCX";
        aut.weights_format = "IOX";
        aut.weights_shape = {3, 2, 5};
        attributes expl = aut;
        expl.auto_pad = "none";
        expl.pads_begin = {pb};
        expl.pads_end = {pe};
        const dims x{1, 3, xs}, y{1, 2, ys};
        const auto oa = testutil::make_op("ref", op_kind::conv_transpose_bwd_weights, data_type::f32, aut, x, y);
        const auto oe = testutil::make_op("ref", op_kind::conv_transpose_bwd_weights, data_type::f32, expl, x, y);
        const Buffer a = testutil::small_ints(data_type::f32, 15, 3), b = testutil::small_ints(data_type::f32, 2 * ys, 4);
        CHECK(testutil::bitwise_equal(testutil::run(oa, a, b), testutil::run(oe, a, b)));
    }
}

TEST_CASE("NXC/NCX and every weights format give the same numbers", "[semantics][layout]") {
    // 2D, groups 2, stride 2, dilation 2, asymmetric pads.
    const int nsp = 2;
    attributes a = base_attrs(nsp);
    a.strides = {2, 1};
    a.dilations = {2, 1};
    a.pads_begin = {1, 0};
    a.pads_end = {2, 1};
    a.groups = 2;
    const dims x_ncx{2, 4, 7, 5};  // IC = 4, OC = 6
    const int64_t oh = (7 + 1 + 2 - 5) / 2 + 1, ow = (5 + 0 + 1 - 3) / 1 + 1;
    const dims y{2, 6, oh, ow}, w_oix{6, 2, 3, 3};
    const Buffer xb = testutil::small_ints(data_type::f32, testutil::prod(x_ncx), 11);
    const Buffer yb = testutil::small_ints(data_type::f32, testutil::prod(y), 12);
    const Buffer wb = testutil::small_ints(data_type::f32, testutil::prod(w_oix), 13);
    const auto nxc = to_nxc(nsp);

    // Canonical results: NCX data, OIX weights.
    a.data_format = "NCX";
    a.weights_format = "OIX";
    a.weights_shape = w_oix;
    a.dst_shape = x_ncx;
    const Buffer dw_ref = testutil::run(
            testutil::make_op("ref", op_kind::conv_bwd_weights, data_type::f32, a, x_ncx, y), xb, yb);
    const Buffer dx_ref = testutil::run(
            testutil::make_op("ref", op_kind::conv_bwd_data, data_type::f32, a, y, w_oix), yb, wb);

    for (const std::string df : {"NCX", "NXC"}) {
        for (const std::string wf : {"OIX", "XIO"}) {
            INFO(df << " / " << wf);
            const std::vector<int> dp = df == "NXC" ? nxc : std::vector<int>{0, 1, 2, 3};
            const std::vector<int> wp = weights_perm(wf == "OIX" ? "ABX" : "XBA", nsp);
            attributes b = a;
            b.data_format = df;
            b.weights_format = wf;
            b.weights_shape = apply(w_oix, wp);
            b.dst_shape = apply(x_ncx, dp);
            const auto bw = testutil::make_op("ref", op_kind::conv_bwd_weights, data_type::f32, b,
                                              apply(x_ncx, dp), apply(y, dp));
            const Buffer dw = testutil::run(bw, permute(xb, x_ncx, dp), permute(yb, y, dp));
            CHECK(testutil::bitwise_equal(permute(dw, bw.output_dims(), inverse(wp)), dw_ref));
            const auto bd = testutil::make_op("ref", op_kind::conv_bwd_data, data_type::f32, b,
                                              apply(y, dp), apply(w_oix, wp));
            const Buffer dx = testutil::run(bd, permute(yb, y, dp), permute(wb, w_oix, wp));
            CHECK(testutil::bitwise_equal(permute(dx, bd.output_dims(), inverse(dp)), dx_ref));
        }
    }
}

TEST_CASE("ConvTranspose weights formats are axis permutations of IOX", "[semantics][layout]") {
    // IC_T = 4, OC_T = 6, g = 2, 1D k3 s2: IOX (4, 3, 3).
    const int nsp = 1;
    attributes a = base_attrs(nsp);
    a.strides = {2};
    a.groups = 2;
    a.data_format = "NCX";
    const dims x{2, 4, 5}, y{2, 6, 2 * 4 + 3}, w_iox{4, 3, 3};
    const Buffer xb = testutil::small_ints(data_type::f32, testutil::prod(x), 21);
    const Buffer yb = testutil::small_ints(data_type::f32, testutil::prod(y), 22);
    a.weights_format = "IOX";
    a.weights_shape = w_iox;
    const Buffer ref = testutil::run(
            testutil::make_op("ref", op_kind::conv_transpose_bwd_weights, data_type::f32, a, x, y), xb, yb);
    // The documented example dims, IC_T = 8, OC_T = 6, g = 2, 3x3 are checked in test_validation.
    const std::vector<std::pair<std::string, std::string>> formats = {
            {"IOX", "ABX"}, {"XOI", "XBA"}, {"OIX", "BAX"}, {"XIO", "XAB"}};
    for (const auto& [fmt, order] : formats) {
        INFO(fmt);
        const auto wp = weights_perm(order, nsp);
        attributes b = a;
        b.weights_format = fmt;
        b.weights_shape = apply(w_iox, wp);
        const auto o = testutil::make_op("ref", op_kind::conv_transpose_bwd_weights, data_type::f32, b, x, y);
        CHECK(o.output_dims() == apply(w_iox, wp));
        CHECK(testutil::bitwise_equal(permute(testutil::run(o, xb, yb), o.output_dims(), inverse(wp)), ref));
    }
}

TEST_CASE("depthwise equals one single-channel convolution per channel", "[semantics][groups]") {
    // 2D NXC, C = 5 = groups, k3x2, dilation (1, 2), stride (2, 1), pads 1/0 and 0/2.
    attributes a = base_attrs(2);
    a.strides = {2, 1};
    a.dilations = {1, 2};
    a.pads_begin = {1, 0};
    a.pads_end = {0, 2};
    a.data_format = "NCX";
    a.weights_format = "OIX";
    const int64_t c = 5, ih = 6, iw = 5, oh = (6 + 1 - 3) / 2 + 1, ow = (5 + 2 - 3) + 1;
    const dims x{1, c, ih, iw}, y{1, c, oh, ow};
    const Buffer xb = testutil::small_ints(data_type::f32, testutil::prod(x), 31);
    const Buffer yb = testutil::small_ints(data_type::f32, testutil::prod(y), 32);
    a.groups = c;
    a.weights_shape = {c, 1, 3, 2};
    const Buffer dw = testutil::run(
            testutil::make_op("ref", op_kind::conv_bwd_weights, data_type::f32, a, x, y), xb, yb);
    a.groups = 1;
    a.weights_shape = {1, 1, 3, 2};
    for (int64_t ch = 0; ch < c; ++ch) {
        Buffer xs(data_type::f32, ih * iw), ys(data_type::f32, oh * ow);
        for (int64_t i = 0; i < ih * iw; ++i) xs.set(i, xb.get(ch * ih * iw + i));
        for (int64_t i = 0; i < oh * ow; ++i) ys.set(i, yb.get(ch * oh * ow + i));
        const Buffer one = testutil::run(testutil::make_op("ref", op_kind::conv_bwd_weights, data_type::f32,
                                                           a, {1, 1, ih, iw}, {1, 1, oh, ow}),
                                         xs, ys);
        for (int64_t t = 0; t < 6; ++t) CHECK(dw.get(ch * 6 + t) == one.get(t));
    }
}

TEST_CASE("shape input wins over the attribute", "[semantics][shape]") {
    attributes a = base_attrs(1);
    a.weights_shape = {1, 1, 1};  // wrong on purpose: the input must win
    const std::vector<int32_t> shape{3, 2, 4};  // XIO: k3, ic 2, oc 4
    const dims x{1, 5, 2}, y{1, 3, 4};
    const auto from_input = testutil::make_op("ref", op_kind::conv_bwd_weights, data_type::f32, a, x, y, &shape);
    CHECK(from_input.output_dims() == dims{3, 2, 4});
    a.weights_shape = {3, 2, 4};
    const auto from_attr = testutil::make_op("ref", op_kind::conv_bwd_weights, data_type::f32, a, x, y);
    const Buffer s = testutil::small_ints(data_type::f32, 10, 1), d = testutil::small_ints(data_type::f32, 12, 2);
    CHECK(testutil::bitwise_equal(testutil::run(from_input, s, d), testutil::run(from_attr, s, d)));
    // An empty shape input means "not given": the attribute is used.
    const std::vector<int32_t> empty;
    CHECK(testutil::make_op("ref", op_kind::conv_bwd_weights, data_type::f32, a, x, y, &empty).output_dims() ==
          dims{3, 2, 4});

    // ConvolutionBackwardData: dst_shape from input 2.
    attributes b = base_attrs(1);
    b.strides = {2};
    const std::vector<int32_t> dst{1, 6, 2};  // NXC: W = 6, C = 2
    const auto bd = testutil::make_op("ref", op_kind::conv_bwd_data, data_type::f32, b, {1, 2, 3},
                                      {3, 2, 3}, &dst);
    CHECK(bd.output_dims() == dims{1, 6, 2});
    // Without it the size is S*(O-1) + E = 2*1 + 3 = 5; output_padding 1 gives 6.
    CHECK(testutil::make_op("ref", op_kind::conv_bwd_data, data_type::f32, b, {1, 2, 3}, {3, 2, 3})
                  .output_dims() == dims{1, 5, 2});
    b.output_padding = {1};
    CHECK(testutil::make_op("ref", op_kind::conv_bwd_data, data_type::f32, b, {1, 2, 3}, {3, 2, 3})
                  .output_dims() == dims{1, 6, 2});
}

TEST_CASE("output_padding changes sizes only", "[semantics][output_padding]") {
    // The extra diff_src row is never read by the forward op: its gradient is 0,
    // and the other rows equal those of the unpadded op.
    attributes a = base_attrs(1);
    a.strides = {3};
    a.data_format = "NCX";
    a.weights_format = "OIX";
    const dims y{1, 1, 3}, w{1, 1, 2};
    const Buffer yb = testutil::small_ints(data_type::f32, 3, 7), wb = testutil::small_ints(data_type::f32, 2, 8);
    const Buffer plain = testutil::run(testutil::make_op("ref", op_kind::conv_bwd_data, data_type::f32, a, y, w), yb, wb);
    a.output_padding = {2};
    const auto padded_op = testutil::make_op("ref", op_kind::conv_bwd_data, data_type::f32, a, y, w);
    REQUIRE(padded_op.output_dims() == dims{1, 1, 10});
    const Buffer padded = testutil::run(padded_op, yb, wb);
    for (int64_t i = 0; i < 8; ++i) CHECK(padded.get(i) == plain.get(i));
    CHECK(padded.get(8) == 0.f);
    CHECK(padded.get(9) == 0.f);
}

TEST_CASE("empty dilations mean ones", "[semantics]") {
    attributes a = base_attrs(2);
    a.weights_shape = {2, 2, 3, 4};
    const dims x{1, 4, 4, 3}, y{1, 3, 3, 4};
    const auto with = testutil::make_op("ref", op_kind::conv_bwd_weights, data_type::f32, a, x, y);
    a.dilations.clear();
    const auto without = testutil::make_op("ref", op_kind::conv_bwd_weights, data_type::f32, a, x, y);
    const Buffer s = testutil::small_ints(data_type::f32, 48, 1), d = testutil::small_ints(data_type::f32, 36, 2);
    CHECK(testutil::bitwise_equal(testutil::run(with, s, d), testutil::run(without, s, d)));
}

TEST_CASE("16-bit outputs are rounded once to nearest even", "[semantics][dtype]") {
    // 1D, k1: diff_W = sum_o src[o] * diff_dst[o] with src = [1 1].
    attributes a = base_attrs(1);
    a.weights_shape = {1, 1, 1};
    struct Row {
        data_type dt;
        double d1;
        uint16_t expected;
    };
    const std::vector<Row> rows = {
            {data_type::bf16, 1.0 / 256, 0x3f80},      // 1 + 2^-8: tie -> even (1.0)
            {data_type::bf16, 3.0 / 256, 0x3f82},      // 1 + 3*2^-8: tie -> even (1 + 2^-6)
            {data_type::bf16, 1.0 / 128, 0x3f81},      // exact
            {data_type::f16, 1.0 / 2048, 0x3c00},      // 1 + 2^-11: tie -> 1.0
            {data_type::f16, 3.0 / 2048, 0x3c02},      // tie -> 1 + 2^-9
            {data_type::f16, 1.0 / 1024, 0x3c01},      // exact
    };
    for (const Row& r : rows) {
        INFO(convgrad::dtype_name(r.dt) << " 1 + " << r.d1);
        const auto o = testutil::make_op("ref", op_kind::conv_bwd_weights, r.dt, a, {1, 2, 1}, {1, 2, 1});
        Buffer s(r.dt, 2), d(r.dt, 2);
        s.set(0, 1);
        s.set(1, 1);
        d.set(0, 1);
        d.set(1, r.d1);
        const Buffer out = testutil::run(o, s, d);
        uint16_t bits;
        std::memcpy(&bits, out.data(), 2);
        CHECK(bits == r.expected);
    }
    // f16 overflow: 65504 + 16 = 65520 rounds to infinity; 65504 + 8 stays 65504.
    const auto o = testutil::make_op("ref", op_kind::conv_bwd_weights, data_type::f16, a, {1, 2, 1}, {1, 2, 1});
    Buffer s(data_type::f16, 2), d(data_type::f16, 2);
    s.set(0, 1);
    s.set(1, 1);
    d.set(0, 65504);
    d.set(1, 16);
    uint16_t bits;
    std::memcpy(&bits, testutil::run(o, s, d).data(), 2);
    CHECK(bits == 0x7c00);
    d.set(1, 8);
    std::memcpy(&bits, testutil::run(o, s, d).data(), 2);
    CHECK(bits == 0x7bff);
}
