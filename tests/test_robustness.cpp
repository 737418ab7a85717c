// Random, mostly invalid descriptors: creating the op either throws
// convgrad::error or gives an op that runs and agrees with the adjoint-free
// reference checks; never a crash, never another exception type. Run under
// the asan preset this also catches out-of-bounds reads and UB.
#include <catch2/catch.hpp>

#include <random>

#include "test_util.hpp"

using convgrad::attributes;
using convgrad::data_type;
using convgrad::dims;
using convgrad::op_kind;

namespace {

struct Gen {
    std::mt19937 rng;
    int64_t pick(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); }
    bool coin(int percent) { return pick(0, 99) < percent; }
    dims vec(size_t n, int64_t lo, int64_t hi) {
        dims v;
        for (size_t i = 0; i < n; ++i) v.push_back(pick(lo, hi));
        return v;
    }
    // Mostly the right length, sometimes not.
    dims attr_vec(int nsp, int64_t lo, int64_t hi) {
        const size_t n = coin(90) ? static_cast<size_t>(nsp) : static_cast<size_t>(pick(0, 4));
        return vec(n, lo, hi);
    }
    std::string one_of(const std::vector<std::string>& v) { return v[static_cast<size_t>(pick(0, v.size() - 1))]; }
};

// A valid descriptor of `kind` in NCX / canonical weights order, then
// converted to random formats by the op's own rules (it is valid before mutation).
struct Built {
    attributes a;
    dims d0, d1;
};

Built valid_descriptor(Gen& g, op_kind kind, int nsp) {
    Built b;
    const int64_t grp = g.pick(1, 3), icg = g.pick(1, 3), ocg = g.pick(1, 3), mb = g.pick(1, 2);
    dims in, out, k;
    for (int a = 0; a < nsp; ++a) {
        const int64_t kk = g.pick(1, 3), s = g.pick(1, 3), d = g.pick(1, 2), pb = g.pick(0, 2), pe = g.pick(0, 2);
        const int64_t e = (kk - 1) * d + 1, i = std::max<int64_t>(e - pb - pe, 1) + g.pick(0, 4);
        b.a.strides.push_back(s);
        b.a.dilations.push_back(d);
        b.a.pads_begin.push_back(pb);
        b.a.pads_end.push_back(pe);
        in.push_back(i);
        k.push_back(kk);
        out.push_back((i + pb + pe - e) / s + 1);
        if (kind == op_kind::conv_transpose_bwd_weights) b.a.output_padding.push_back((i + pb + pe - e) % s);
    }
    b.a.groups = grp;
    b.a.data_format = "NCX";
    auto data = [&](int64_t c, const dims& sp) {
        dims r{mb, c};
        r.insert(r.end(), sp.begin(), sp.end());
        return r;
    };
    auto wei = [&](int64_t c0, int64_t c1) {
        dims r{c0, c1};
        r.insert(r.end(), k.begin(), k.end());
        return r;
    };
    if (kind == op_kind::conv_bwd_weights) {
        b.a.weights_format = "OIX";
        b.a.weights_shape = wei(ocg * grp, icg);
        b.d0 = data(icg * grp, in);
        b.d1 = data(ocg * grp, out);
    } else if (kind == op_kind::conv_bwd_data) {
        b.a.weights_format = "OIX";
        b.a.dst_shape = data(icg * grp, in);
        b.d0 = data(ocg * grp, out);
        b.d1 = wei(ocg * grp, icg);
    } else {  // ConvTranspose: x = the convolution's output side
        b.a.weights_format = "IOX";
        b.a.weights_shape = wei(ocg * grp, icg);
        b.d0 = data(ocg * grp, out);
        b.d1 = data(icg * grp, in);
    }
    return b;
}

// One random change to a valid descriptor: mostly makes it invalid.
void mutate(Gen& g, Built& b, std::vector<int32_t>& shape) {
    const int nsp = static_cast<int>(b.a.strides.size());
    auto poke = [&](dims& v) {
        if (v.empty() || g.coin(10)) {
            v = g.vec(static_cast<size_t>(g.pick(0, 4)), -1, 4);
        } else {
            v[static_cast<size_t>(g.pick(0, v.size() - 1))] = g.pick(-2, 6);
        }
    };
    switch (g.pick(0, 13)) {
        case 0: poke(b.a.strides); break;
        case 1: poke(b.a.dilations); break;
        case 2: poke(b.a.pads_begin); break;
        case 3: poke(b.a.pads_end); break;
        case 4: poke(b.a.output_padding); break;
        case 5: b.a.groups = g.pick(-1, 7); break;
        case 6: b.a.auto_pad = g.one_of({"same_upper", "SAME_LOWER", "valid", "bogus", ""}); break;
        case 7: b.a.data_format = g.one_of({"NXC", "nhwc", "ncx"}); break;
        case 8: b.a.weights_format = g.one_of({"XIO", "OIX", "IOX", "XOI", "OI"}); break;
        case 9: poke(b.a.weights_shape); break;
        case 10: poke(b.a.dst_shape); break;
        case 11: poke(g.coin(50) ? b.d0 : b.d1); break;
        case 12: b.d0.resize(static_cast<size_t>(g.pick(1, 6)), 2); break;
        default:
            for (int64_t v : g.vec(static_cast<size_t>(nsp + 2), -1, 6)) shape.push_back(static_cast<int32_t>(v));
    }
}

}  // namespace

TEST_CASE("random descriptors never crash and valid ones execute", "[robustness]") {
    Gen g{std::mt19937(2024)};
    int accepted = 0, rejected = 0;
    for (int iter = 0; iter < 3000; ++iter) {
        const op_kind kind = static_cast<op_kind>(g.pick(0, 2));
        const data_type dt = static_cast<data_type>(g.pick(0, 2));
        Built b = valid_descriptor(g, kind, static_cast<int>(g.pick(1, 3)));
        std::vector<int32_t> shape;
        const int mutations = static_cast<int>(g.pick(0, 2));
        for (int m = 0; m < mutations; ++m) mutate(g, b, shape);
        INFO("iteration " << iter << ", " << mutations << " mutations");
        try {
            const auto o = testutil::make_op("ref", kind, dt, b.a, b.d0, b.d1, shape.empty() ? nullptr : &shape);
            ++accepted;
            REQUIRE(o.output_elems() == testutil::prod(o.output_dims()));
            const auto in0 = testutil::small_ints(dt, o.input0_elems(), iter);
            const auto in1 = testutil::small_ints(dt, o.input1_elems(), iter + 1);
            const auto out = testutil::run(o, in0, in1);
            // Every element was written: the 0x7f7f... sentinel would read as a huge value.
            for (int64_t i = 0; i < out.size(); ++i) REQUIRE(std::fabs(out.get(i)) < 1e6);
        } catch (const convgrad::error&) {
            ++rejected;
            REQUIRE(mutations > 0);  // an unmutated descriptor is valid
        }
    }
    INFO("accepted " << accepted << ", rejected " << rejected);
    CHECK(accepted > 1000);
    CHECK(rejected > 500);
}
