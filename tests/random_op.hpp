// Random valid ops of all three kinds (tests/test_random_ops.cpp and
// tests/amx_emu/test_amx_random.cpp): geometry (1D-3D, kernels, strides,
// dilations, asymmetric pads, auto_pad, output_padding, a derived or given
// dst_shape), groups and depthwise, channel counts around the vector
// blocks, every data and weights format, all three types.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.hpp"
#include "weights_case.hpp"

namespace randomop {

using convgrad::attributes;
using convgrad::data_type;
using convgrad::dims;
using convgrad::op_kind;

struct Rng {
    std::mt19937 gen;
    int64_t pick(int64_t lo, int64_t hi) {
        return std::uniform_int_distribution<int64_t>(lo, hi)(gen);
    }
    template <typename T>
    T one_of(const std::vector<T>& v) {
        return v[static_cast<size_t>(pick(0, static_cast<int64_t>(v.size()) - 1))];
    }
    bool coin(int percent) { return pick(0, 99) < percent; }
};

struct RandomOp {
    op_kind kind = op_kind::conv_bwd_weights;
    data_type dt = data_type::f32;
    attributes a;
    dims d0, d1;
    std::string text;  // for the failure message
};

inline dims data_dims(const std::string& fmt, int64_t mb, int64_t c, const dims& sp) {
    dims r{mb};
    if (fmt == "NCX") r.push_back(c);
    r.insert(r.end(), sp.begin(), sp.end());
    if (fmt == "NXC") r.push_back(c);
    return r;
}

using wtest::weight_dims;

inline std::string str(const dims& v) {
    std::ostringstream os;
    for (size_t i = 0; i < v.size(); ++i) os << (i ? "x" : "") << v[i];
    return os.str();
}

// A valid op, or false when the drawn geometry has no output.
// tiles: bf16 only, with the channel counts the AMX kernels take (16 and
// more each way, around their 32-channel blocks), no depthwise.
inline bool draw(Rng& r, RandomOp& op, bool tiles = false) {
    op.kind = static_cast<op_kind>(r.pick(0, 2));
    op.dt = tiles ? data_type::bf16
                  : r.one_of<data_type>(
                        {data_type::f32, data_type::f32, data_type::bf16, data_type::f16});
    const bool convt = op.kind == op_kind::conv_transpose_bwd_weights;
    const int nsp = static_cast<int>(r.one_of<int64_t>({1, 2, 2, 3}));
    int64_t g = r.one_of<int64_t>({1, 1, 1, 2, 3}), icg, ocg;
    if (tiles) {  // groups of 16 (half tiles) now and then
        const std::vector<int64_t> ch{16, 17, 24, 31, 32, 33, 48, 64, 65};
        icg = ocg = 16;
        if (g == 1 || !r.coin(30)) {
            icg = std::min(r.one_of(ch), 128 / g);
            ocg = std::min(r.one_of(ch), 128 / g);
        }
    } else if (r.coin(20)) {  // depthwise
        g = r.one_of<int64_t>({3, 16, 17, 40});
        icg = ocg = 1;
    } else if (r.coin(10)) {  // lane groups
        g = r.pick(2, 6);
        icg = ocg = r.one_of<int64_t>({2, 4, 8, 16});
    } else {
        const std::vector<int64_t> ch{1, 2, 3, 5, 8, 15, 16, 17, 24, 31, 33, 48, 65};
        icg = std::min(r.one_of(ch), 96 / g);
        ocg = std::min(r.one_of(ch), 96 / g);
    }
    const int64_t mb = r.one_of<int64_t>({1, 2, 3});
    attributes& a = op.a;
    a.groups = g;
    a.auto_pad = r.one_of<std::string>(
        {"none", "none", "none", "none", "same_upper", "SAME_LOWER", "valid"});
    const bool autopad = a.auto_pad != "none";
    // The W axis of a 1D or 2D op now and then: a long kernel (up to 70
    // taps, past what a tile's registers or a desc's byte fields hold) or
    // a stride past a byte.
    const int64_t w_kind =
        nsp < 3 ? r.one_of<int64_t>({0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 2}) : 0;
    dims k, in, out, ext;
    for (int ax = 0; ax < nsp; ++ax) {
        const bool w = ax == nsp - 1;
        k.push_back(w && w_kind == 1 ? r.pick(6, 70)
                    : nsp == 3       ? r.pick(1, 3)
                                     : r.one_of<int64_t>({1, 1, 2, 3, 3, 5}));
        a.strides.push_back(w && w_kind == 2 ? r.pick(250, 300) : r.one_of<int64_t>({1, 1, 2, 3}));
        a.dilations.push_back(w && w_kind == 1 ? 1 : r.one_of<int64_t>({1, 1, 1, 2, 3}));
        ext.push_back((k[ax] - 1) * a.dilations[ax] + 1);
        const int64_t pad = w && w_kind == 1 ? ext[ax] : 3;
        a.pads_begin.push_back(r.pick(0, std::min<int64_t>(pad, ext[ax])));
        a.pads_end.push_back(r.pick(0, std::min<int64_t>(pad, ext[ax])));
        a.output_padding.push_back(convt && !autopad && r.coin(40)
                                       ? r.pick(0, std::min<int64_t>(a.strides[ax] - 1, 3))
                                       : 0);
        // conv input / ConvTranspose src
        in.push_back(w && w_kind == 1   ? r.pick(1, 2 * k[ax] + 10)
                     : w && w_kind == 2 ? (convt ? r.pick(1, 3) : r.pick(1, 3 * a.strides[ax]))
                                        : r.pick(1, nsp == 1   ? 30
                                                    : nsp == 2 ? 12
                                                               : 6));
    }
    // The pads auto_pad implies (docs/SEMANTICS.md), to size the tensors.
    dims pb = a.pads_begin, pe = a.pads_end;
    if (autopad) {
        for (int ax = 0; ax < nsp; ++ax) {
            const int64_t s = a.strides[ax];
            const int64_t rest = in[ax] % s ? in[ax] % s : s;
            int64_t t = a.auto_pad == "valid" ? 0
                        : convt               ? std::max<int64_t>(ext[ax] - s, 0)
                                              : std::max<int64_t>(ext[ax] - rest, 0);
            pb[ax] = a.auto_pad == "same_upper" ? t / 2 : (t + 1) / 2;
            pe[ax] = t - pb[ax];
        }
        if (r.coin(50)) a.pads_begin.clear(), a.pads_end.clear();  // ignored anyway
    }
    for (int ax = 0; ax < nsp; ++ax) {
        const int64_t s = a.strides[ax];
        const int64_t o = convt
                              ? s * (in[ax] - 1) + ext[ax] - pb[ax] - pe[ax] + a.output_padding[ax]
                              : in[ax] + pb[ax] + pe[ax] - ext[ax];
        if (o < (convt ? 1 : 0)) return false;
        out.push_back(convt ? o : o / s + 1);
    }
    a.data_format = r.coin(70) ? "NXC" : "NCX";
    const std::string& df = a.data_format;
    if (op.kind == op_kind::conv_bwd_weights) {
        a.weights_format = r.one_of<std::string>({"XIO", "OIX"});
        a.weights_shape = weight_dims(a.weights_format, g * ocg, icg, k);
        op.d0 = data_dims(df, mb, g * icg, in);
        op.d1 = data_dims(df, mb, g * ocg, out);
    } else if (op.kind == op_kind::conv_bwd_data) {
        a.weights_format = r.one_of<std::string>({"XIO", "OIX"});
        // Else derived: S*(O-1) + E - pb - pe, which may differ from `in`
        // (a stride that skips the last pixels), unless it is empty.
        bool derived = !autopad && r.coin(50);
        for (int ax = 0; ax < nsp; ++ax)
            derived = derived && a.strides[ax] * (out[ax] - 1) + ext[ax] - pb[ax] - pe[ax] > 0;
        if (!derived) a.dst_shape = data_dims(df, mb, g * icg, in);
        op.d0 = data_dims(df, mb, g * ocg, out);
        op.d1 = weight_dims(a.weights_format, g * ocg, icg, k);
    } else {  // ConvTranspose: src = IC_T = g*icg channels at `in`, diff_dst at `out`
        a.weights_format = r.one_of<std::string>({"XIO", "OIX", "IOX", "XOI"});
        a.weights_shape = weight_dims(a.weights_format, ocg, g * icg, k);
        op.d0 = data_dims(df, mb, g * icg, in);
        op.d1 = data_dims(df, mb, g * ocg, out);
    }
    std::ostringstream os;
    os << "kind " << static_cast<int>(op.kind) << " dt " << static_cast<int>(op.dt) << " g" << g
       << " icg" << icg << " ocg" << ocg << " mb" << mb << " k" << str(k) << " in" << str(in)
       << " out" << str(out) << " s" << str(a.strides) << " d" << str(a.dilations) << " pb"
       << str(pb) << " pe" << str(pe) << " op" << str(a.output_padding) << " auto_pad "
       << a.auto_pad << " " << df << "/" << a.weights_format
       << (a.dst_shape.empty() ? "" : " dst_shape");
    op.text = os.str();
    return true;
}

inline bool allowed(const std::string& isa) {
    const std::vector<std::string> order{"avx2", "avx512_core", "avx512_core_bf16", "amx"};
    const auto level = [&](const std::string& s) {
        return std::find(order.begin(), order.end(), s) - order.begin();
    };
    return level(isa) <= level(convgrad::max_isa());
}

// A generator seeded by CONVGRAD_RANDOM_SEED, else `seed`, and the number
// of ops to check, CONVGRAD_RANDOM_OPS, else `ops`: to hunt further than a
// suite's fixed draw.
inline Rng seeded(uint32_t seed) {
    const char* env = std::getenv("CONVGRAD_RANDOM_SEED");
    return Rng{std::mt19937(env ? static_cast<uint32_t>(std::strtoul(env, nullptr, 10)) : seed)};
}
inline int op_count(int ops) {
    const char* env = std::getenv("CONVGRAD_RANDOM_OPS");
    return env ? std::atoi(env) : ops;
}

// A draw's small-integer inputs (seeded by the draw's number n) and the
// reference result.
struct Reference {
    testutil::Buffer in0, in1, expect;
};
inline Reference reference(const RandomOp& op, int n) {
    const auto ref = testutil::make_op("ref", op.kind, op.dt, op.a, op.d0, op.d1);
    Reference r{testutil::small_ints(op.dt, ref.input0_elems(), static_cast<uint32_t>(n)),
                testutil::small_ints(op.dt, ref.input1_elems(), static_cast<uint32_t>(n) + 7),
                {}};
    r.expect = testutil::run(ref, r.in0, r.in1);
    return r;
}

}  // namespace randomop
