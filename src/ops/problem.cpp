// Validation and canonicalisation: the one place where user input is checked.
// The rules are those of docs/SEMANTICS.md.
#include "ops/problem.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <climits>
#include <sstream>
#include <utility>

// Checks a condition; the message parts are evaluated only on failure, so a
// valid op pays for no string building.
#define CONVGRAD_CHECK(checker, cond, what, expected, given) \
    do {                                                     \
        if (!(cond)) (checker).fail(what, expected, given);  \
    } while (0)

namespace convgrad::detail {
namespace {

std::string lower(std::string_view s) {
    std::string r(s);
    for (char& c : r) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return r;
}

std::string list(const dims& v) {
    std::ostringstream os;
    os << '[';
    for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
    os << ']';
    return os.str();
}

// Collects the op name so every message starts with it.
class Checker {
public:
    explicit Checker(op_kind kind) : op_(op_name(kind)) {}

    [[noreturn]] void fail(const std::string& what, const std::string& expected,
                           const std::string& given) const {
        throw error(op_ + ": " + what + ": expected " + expected + ", given " + given);
    }
    int64_t mul(int64_t a, int64_t b, const char* what) const {
        int64_t r = 0;
        if (__builtin_mul_overflow(a, b, &r))
            fail(what, "a value that fits in int64", std::to_string(a) + " * " + std::to_string(b));
        return r;
    }
    int64_t add(int64_t a, int64_t b, const char* what) const {
        int64_t r = 0;
        if (__builtin_add_overflow(a, b, &r))
            fail(what, "a value that fits in int64", std::to_string(a) + " + " + std::to_string(b));
        return r;
    }
    // Element count of a tensor, checked against int64 and against the
    // byte size a pointer can address.
    int64_t elems(const dims& d, const std::string& tensor, size_t esize) const {
        int64_t n = 1;
        for (int64_t v : d)
            if (__builtin_mul_overflow(n, v, &n))
                fail(tensor + " element count", "a value that fits in int64", list(d));
        int64_t bytes = 0;
        if (__builtin_mul_overflow(n, static_cast<int64_t>(esize), &bytes))
            fail(tensor + " size in bytes", "a value that fits in int64", list(d));
        return n;
    }
    // Every entry of a user vector: count and minimum.
    void vec(const dims& v, const std::string& name, int nsp, int64_t min_value) const {
        CONVGRAD_CHECK(*this, static_cast<int>(v.size()) == nsp, name,
                std::to_string(nsp) + " entries (one per spatial dim)",
                std::to_string(v.size()) + " entries " + list(v));
        for (size_t i = 0; i < v.size(); ++i)
            CONVGRAD_CHECK(*this, v[i] >= min_value, name + "[" + std::to_string(i) + "]",
                    ">= " + std::to_string(min_value), std::to_string(v[i]));
    }

private:
    std::string op_;
};

enum class AutoPad { none, same_upper, same_lower, valid };

AutoPad parse_auto_pad(const Checker& ck, const std::string& s) {
    const std::string l = lower(s);
    if (l == "none" || l.empty()) return AutoPad::none;
    if (l == "same_upper") return AutoPad::same_upper;
    if (l == "same_lower") return AutoPad::same_lower;
    if (l == "valid") return AutoPad::valid;
    ck.fail("auto_pad", "one of none, same_upper, same_lower, valid", "\"" + s + "\"");
}

// Activation tensor dims in data_format -> (n, c, spatial).
struct DataDims {
    int64_t n = 0, c = 0;
    std::array<int64_t, 3> sp{1, 1, 1};
};

DataDims split_data(const dims& d, bool nxc, int nsp) {
    DataDims r;
    r.n = d[0];
    r.c = nxc ? d.back() : d[1];
    for (int a = 0; a < nsp; ++a) r.sp[3 - nsp + a] = d[(nxc ? 1 : 2) + a];
    return r;
}

dims join_data(const DataDims& dd, bool nxc, int nsp) {
    dims r{dd.n};
    if (!nxc) r.push_back(dd.c);
    for (int a = 0; a < nsp; ++a) r.push_back(dd.sp[3 - nsp + a]);
    if (nxc) r.push_back(dd.c);
    return r;
}

DataStrides data_strides(const DataDims& dd, bool nxc) {
    DataStrides s;
    int64_t run = 1;
    if (nxc) {
        s.c = 1;
        run = dd.c;
    }
    for (int a = 2; a >= 0; --a) {
        s.sp[a] = run;
        run *= dd.sp[a];
    }
    if (!nxc) {
        s.c = run;
        run *= dd.c;
    }
    s.n = run;
    return s;
}

// Convolution-view weight dims: O (total), I (per group), K.
struct WeiDims {
    int64_t o = 0, i = 0;
    std::array<int64_t, 3> k{1, 1, 1};
};

// Axis order of each layout, outermost first; 'X' stands for all kernel axes.
const char* layout_axes(WeightLayout l) {
    switch (l) {
        case WeightLayout::OIX: return "OIX";
        case WeightLayout::XIO: return "XIO";
        case WeightLayout::IOX: return "IOX";
        case WeightLayout::XOI: return "XOI";
    }
    return "";
}

WeiDims split_weights(const dims& d, WeightLayout l, int nsp) {
    WeiDims r;
    size_t pos = 0;
    for (const char* ax = layout_axes(l); *ax; ++ax) {
        if (*ax == 'O') r.o = d[pos++];
        if (*ax == 'I') r.i = d[pos++];
        if (*ax == 'X')
            for (int a = 0; a < nsp; ++a) r.k[3 - nsp + a] = d[pos++];
    }
    return r;
}

WeightStrides weight_strides(const WeiDims& w, WeightLayout l) {
    WeightStrides s;
    int64_t run = 1;
    const std::string axes = layout_axes(l);
    for (auto it = axes.rbegin(); it != axes.rend(); ++it) {
        if (*it == 'O') { s.o = run; run *= w.o; }
        if (*it == 'I') { s.i = run; run *= w.i; }
        if (*it == 'X')
            for (int a = 2; a >= 0; --a) { s.k[a] = run; run *= w.k[a]; }
    }
    return s;
}

// The user's weights_format string -> convolution-view layout. For
// ConvTranspose the user's I/O name the ConvTranspose's channels, which are
// the convolution view's O/I: the layout letters swap.
WeightLayout parse_weights_format(const Checker& ck, op_kind kind, const std::string& s) {
    const std::string u = [&] {
        std::string r(s);
        for (char& c : r) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
        return r;
    }();
    if (kind == op_kind::conv_transpose_bwd_weights) {
        if (u == "IOX") return WeightLayout::OIX;
        if (u == "XOI") return WeightLayout::XIO;
        if (u == "OIX") return WeightLayout::IOX;
        if (u == "XIO") return WeightLayout::XOI;
        ck.fail("weights_format", "one of XIO, OIX, IOX, XOI", "\"" + s + "\"");
    }
    if (u == "XIO") return WeightLayout::XIO;
    if (u == "OIX") return WeightLayout::OIX;
    ck.fail("weights_format", "one of XIO, OIX", "\"" + s + "\"");
}

bool parse_data_format(const Checker& ck, const std::string& s) {
    const std::string l = lower(s);
    if (l == "nxc") return true;
    if (l == "ncx") return false;
    ck.fail("data_format", "one of NXC, NCX", "\"" + s + "\"");
}

// The optional shape (input 2 wins over the attribute); empty = not given.
dims shape_source(const Checker& ck, const std::vector<int32_t>* shape_input,
                  const dims& attr, const std::string& name) {
    if (shape_input && !shape_input->empty()) {
        dims r(shape_input->begin(), shape_input->end());
        for (size_t i = 0; i < r.size(); ++i)
            CONVGRAD_CHECK(ck, r[i] > 0, name + " input[" + std::to_string(i) + "]", "> 0",
                       std::to_string(r[i]));
        return r;
    }
    for (size_t i = 0; i < attr.size(); ++i)
        CONVGRAD_CHECK(ck, attr[i] > 0, name + "[" + std::to_string(i) + "]", "> 0",
                   std::to_string(attr[i]));
    return attr;
}

void check_tensor(const Checker& ck, const dims& d, const std::string& name, size_t rank) {
    CONVGRAD_CHECK(ck, d.size() == rank, name + " rank", std::to_string(rank) + " dims",
               std::to_string(d.size()) + " dims " + list(d));
    for (size_t i = 0; i < d.size(); ++i)
        CONVGRAD_CHECK(ck, d[i] > 0, name + " dim " + std::to_string(i), "> 0", std::to_string(d[i]));
}

const char* sp_name(int nsp, int a) {
    static const char* names[3] = {"D", "H", "W"};
    return names[3 - nsp + a];
}

// Resolved spatial attributes of one problem (indices 0..2 = D, H, W).
struct Spatial {
    std::array<int64_t, 3> stride{1, 1, 1}, dil{1, 1, 1}, pb{}, pe{}, op{};
};

Spatial read_spatial(const Checker& ck, const attributes& at, int nsp, AutoPad ap) {
    Spatial s;
    ck.vec(at.strides, "strides", nsp, 1);
    if (!at.dilations.empty()) ck.vec(at.dilations, "dilations", nsp, 1);
    if (ap == AutoPad::none) {
        ck.vec(at.pads_begin, "pads_begin", nsp, 0);
        ck.vec(at.pads_end, "pads_end", nsp, 0);
    }
    if (!at.output_padding.empty()) ck.vec(at.output_padding, "output_padding", nsp, 0);
    for (int a = 0; a < nsp; ++a) {
        const int x = 3 - nsp + a;
        s.stride[x] = at.strides[a];
        if (!at.dilations.empty()) s.dil[x] = at.dilations[a];
        if (ap == AutoPad::none) {
            s.pb[x] = at.pads_begin[a];
            s.pe[x] = at.pads_end[a];
        }
        if (!at.output_padding.empty()) {
            s.op[x] = at.output_padding[a];
            CONVGRAD_CHECK(ck, s.op[x] < s.stride[x], "output_padding[" + std::to_string(a) + "]",
                       "< strides[" + std::to_string(a) + "] = " + std::to_string(s.stride[x]),
                       std::to_string(s.op[x]));
        }
    }
    return s;
}

// Effective kernel extent (K-1)*D + 1 on axis x, overflow-checked.
int64_t extent(const Checker& ck, const WeiDims& w, const Spatial& s, int x) {
    return ck.add(ck.mul(w.k[x] - 1, s.dil[x], "kernel extent"), 1, "kernel extent");
}

// auto_pad: total padding T split begin/end (odd unit at the end for
// same_upper, at the beginning for same_lower).
void apply_auto_pad(AutoPad ap, int64_t total, int64_t& pb, int64_t& pe) {
    if (ap == AutoPad::none) return;
    if (ap == AutoPad::valid) total = 0;
    total = std::max<int64_t>(total, 0);
    pb = ap == AutoPad::same_lower ? (total + 1) / 2 : total / 2;
    pe = total - pb;
}

}  // namespace

size_t dtype_size(data_type dt) { return dt == data_type::f32 ? 4 : 2; }

double Problem::flops() const {
    return 2.0 * static_cast<double>(mb) * g * icg * ocg * k_sp() * out_sp();
}

std::string Problem::to_string() const {
    std::ostringstream os;
    auto sp = [&](const char* tag, const std::array<int64_t, 3>& v) {
        os << ' ' << tag;
        for (int a = 3 - nsp; a < 3; ++a) os << (a > 3 - nsp ? "x" : "") << v[a];
    };
    os << op_name(kind) << ' ' << dtype_name(dt) << " mb" << mb << " g" << g << " ic" << ic()
       << " oc" << oc();
    sp("i", in);
    sp("o", out);
    sp("k", k);
    sp("s", stride);
    sp("d", dil);
    sp("pb", pad_begin);
    sp("pe", pad_end);
    os << ' ' << (nxc ? "NXC" : "NCX") << '/' << layout_axes(wlayout);
    return os.str();
}

Problem make_problem(op_kind kind, data_type dt, const attributes& at, const dims& in0,
                     const dims& in1, const std::vector<int32_t>* shape_input) {
    const Checker ck(kind);
    Problem p;
    p.kind = kind;
    p.dt = dt;
    p.alg = kind == op_kind::conv_bwd_data ? Alg::data : Alg::weights;

    const AutoPad ap = parse_auto_pad(ck, at.auto_pad);
    p.nxc = parse_data_format(ck, at.data_format);
    p.wlayout = parse_weights_format(ck, kind, at.weights_format);
    CONVGRAD_CHECK(ck, at.groups >= 1, "groups", ">= 1", std::to_string(at.groups));
    p.g = at.groups;

    const bool bwd_w = p.alg == Alg::weights;
    const std::string name0 = bwd_w ? "src (input 0)" : "diff_dst (input 0)";
    const std::string name1 = bwd_w ? "diff_dst (input 1)" : "weights (input 1)";
    CONVGRAD_CHECK(ck, in0.size() >= 3 && in0.size() <= 5, name0 + " rank",
               "3, 4 or 5 dims (N, C and 1 to 3 spatial dims)",
               std::to_string(in0.size()) + " dims " + list(in0));
    const int nsp = static_cast<int>(in0.size()) - 2;
    p.nsp = nsp;
    check_tensor(ck, in0, name0, in0.size());
    check_tensor(ck, in1, name1, in0.size());
    Spatial s = read_spatial(ck, at, nsp, ap);
    const size_t es = dtype_size(dt);
    p.input0_elems = ck.elems(in0, name0, es);
    p.input1_elems = ck.elems(in1, name1, es);

    DataDims src, dst;  // convolution view
    WeiDims wei;
    if (bwd_w) {
        const DataDims a = split_data(in0, p.nxc, nsp), b = split_data(in1, p.nxc, nsp);
        CONVGRAD_CHECK(ck, b.n == a.n, "diff_dst (input 1) minibatch", std::to_string(a.n) + " (as src)",
                   std::to_string(b.n));
        const dims ws = shape_source(ck, shape_input, at.weights_shape, "weights_shape");
        CONVGRAD_CHECK(ck, !ws.empty(), "weights_shape",
                   "a shape from input 2 or the weights_shape attribute", "neither");
        check_tensor(ck, ws, "weights_shape", in0.size());
        ck.elems(ws, "diff_weights", es);
        wei = split_weights(ws, p.wlayout, nsp);
        p.output_dims = ws;
        // ConvTranspose: its src (x, small side) is the convolution's diff_dst.
        p.swap_inputs = kind == op_kind::conv_transpose_bwd_weights;
        src = p.swap_inputs ? b : a;
        dst = p.swap_inputs ? a : b;
        const std::string src_name = p.swap_inputs ? "diff_dst (input 1)" : "src (input 0)";
        const std::string dst_name = p.swap_inputs ? "src (input 0)" : "diff_dst (input 1)";
        // In convolution view: src has IC, diff_dst has OC; weights O = OC, I = IC/g.
        CONVGRAD_CHECK(ck, src.c % p.g == 0, "groups", "a divisor of " + src_name + " channels " +
                   std::to_string(src.c), std::to_string(p.g));
        CONVGRAD_CHECK(ck, dst.c % p.g == 0, "groups", "a divisor of " + dst_name + " channels " +
                   std::to_string(dst.c), std::to_string(p.g));
        const bool tr = p.swap_inputs;
        CONVGRAD_CHECK(ck, wei.i == src.c / p.g,
                   std::string("weights_shape ") + (tr ? "output-channel (O) dim" : "input-channel (I) dim"),
                   std::to_string(src.c / p.g) + " (" + src_name + " channels / groups)",
                   std::to_string(wei.i) + " in " + list(ws));
        CONVGRAD_CHECK(ck, wei.o == dst.c,
                   std::string("weights_shape ") + (tr ? "input-channel (I) dim" : "output-channel (O) dim"),
                   std::to_string(dst.c) + " (" + dst_name + " channels)",
                   std::to_string(wei.o) + " in " + list(ws));
    } else {
        dst = split_data(in0, p.nxc, nsp);
        wei = split_weights(in1, p.wlayout, nsp);
        CONVGRAD_CHECK(ck, wei.o == dst.c, "weights (input 1) output-channel (O) dim",
                   std::to_string(dst.c) + " (diff_dst channels)",
                   std::to_string(wei.o) + " in " + list(in1));
        CONVGRAD_CHECK(ck, dst.c % p.g == 0, "groups",
                   "a divisor of diff_dst channels " + std::to_string(dst.c), std::to_string(p.g));
        src.n = dst.n;
        src.c = ck.mul(wei.i, p.g, "diff_src channels");
        const dims ds = shape_source(ck, shape_input, at.dst_shape, "dst_shape");
        if (!ds.empty()) {
            check_tensor(ck, ds, "dst_shape", in0.size());
            const DataDims d = split_data(ds, p.nxc, nsp);
            CONVGRAD_CHECK(ck, d.n == dst.n, "dst_shape minibatch", std::to_string(dst.n) + " (as diff_dst)",
                       std::to_string(d.n) + " in " + list(ds));
            CONVGRAD_CHECK(ck, d.c == src.c, "dst_shape channels",
                       std::to_string(src.c) + " (weights I * groups)", std::to_string(d.c) + " in " + list(ds));
            src.sp = d.sp;
        } else {
            CONVGRAD_CHECK(ck, ap == AutoPad::none || ap == AutoPad::valid, "dst_shape",
                       "a shape from input 2 or the dst_shape attribute when auto_pad is " + at.auto_pad,
                       "neither");
            for (int x = 3 - nsp; x < 3; ++x) {
                const int64_t e = extent(ck, wei, s, x);
                int64_t i = ck.add(ck.mul(s.stride[x], dst.sp[x] - 1, "diff_src size"), e, "diff_src size");
                i = ck.add(i, s.op[x], "diff_src size");
                i = ck.add(ck.add(i, -s.pb[x], "diff_src size"), -s.pe[x], "diff_src size");
                CONVGRAD_CHECK(ck, i > 0, std::string("diff_src spatial ") + sp_name(nsp, x - (3 - nsp)) +
                           " = strides*(diff_dst-1) + extent - pads_begin - pads_end + output_padding",
                           "> 0", std::to_string(i));
                src.sp[x] = i;
            }
        }
        p.output_dims = join_data(src, p.nxc, nsp);
        ck.elems(p.output_dims, "diff_src", es);
    }
    // Spatial relation, per axis. I = convolution input size, O = output.
    for (int x = 3 - nsp; x < 3; ++x) {
        const int a = x - (3 - nsp);
        const std::string ax = std::string(sp_name(nsp, a)) + " (spatial axis " + std::to_string(a) + ")";
        const int64_t e = extent(ck, wei, s, x);
        const int64_t in = src.sp[x], out = dst.sp[x], st = s.stride[x];
        if (kind == op_kind::conv_transpose_bwd_weights) {
            apply_auto_pad(ap, e - st, s.pb[x], s.pe[x]);
            // Y = S*(X-1) + E - pb - pe + output_padding, Y = the large side.
            int64_t y = ck.add(ck.mul(st, out - 1, "ConvTranspose output size"), e, "ConvTranspose output size");
            y = ck.add(y, s.op[x], "ConvTranspose output size");
            y = ck.add(ck.add(y, -s.pb[x], "ConvTranspose output size"), -s.pe[x], "ConvTranspose output size");
            CONVGRAD_CHECK(ck, in == y, "diff_dst (input 1) spatial " + ax,
                       std::to_string(y) + " = strides*(src-1) + (kernel-1)*dilations + 1 - pads_begin"
                       " - pads_end + output_padding",
                       std::to_string(in));
        } else {
            const int64_t rem = in % st;
            apply_auto_pad(ap, e - (rem ? rem : st), s.pb[x], s.pe[x]);
            const int64_t padded = ck.add(ck.add(in, s.pb[x], "padded size"), s.pe[x], "padded size");
            const std::string in_name = bwd_w ? "src" : "dst_shape";
            CONVGRAD_CHECK(ck, padded >= e, in_name + " spatial " + ax + " + pads_begin + pads_end",
                       ">= kernel extent " + std::to_string(e), std::to_string(padded));
            const int64_t o = (padded - e) / st + 1;
            const std::string out_name = bwd_w ? "diff_dst (input 1)" : "diff_dst (input 0)";
            CONVGRAD_CHECK(ck, out == o, out_name + " spatial " + ax,
                       std::to_string(o) + " = (input + pads_begin + pads_end - extent) / strides + 1",
                       std::to_string(out));
        }
        p.in[x] = in;
        p.out[x] = out;
        p.k[x] = wei.k[x];
        p.stride[x] = st;
        p.dil[x] = s.dil[x];
        p.pad_begin[x] = s.pb[x];
        p.pad_end[x] = s.pe[x];
    }
    for (int x = 0; x < 3 - nsp; ++x) {
        p.in[x] = p.out[x] = p.k[x] = p.stride[x] = p.dil[x] = 1;
    }
    p.mb = src.n;
    p.icg = src.c / p.g;
    p.ocg = dst.c / p.g;
    p.src_str = data_strides(src, p.nxc);
    p.dst_str = data_strides(dst, p.nxc);
    p.wei_str = weight_strides(wei, p.wlayout);
    p.output_elems = ck.elems(p.output_dims, bwd_w ? "diff_weights" : "diff_src", es);
    // Work count must be representable too (flop counters, loop bounds).
    ck.mul(ck.mul(ck.mul(p.mb, p.oc(), "work size"), p.icg, "work size"),
           ck.mul(p.k_sp(), std::max(p.in_sp(), p.out_sp()), "work size"), "work size");
    return p;
}

bool kernel_axes_one_run(const Problem& p) {
    const WeightStrides& w = p.wei_str;
    return w.k[1] == p.k[2] * w.k[2] && w.k[0] == p.k[1] * w.k[1];
}

Problem nxc_view(const Problem& p) {
    if (p.nxc) return p;
    Problem q = p;
    q.nxc = true;
    q.src_str = data_strides({p.mb, p.ic(), p.in}, true);
    q.dst_str = data_strides({p.mb, p.oc(), p.out}, true);
    return q;
}

Problem fold_full_kernel(const Problem& p, FullKernelFold* fold) {
    *fold = FullKernelFold{};
    if (p.g != 1 || p.k_sp() == 1) return p;
    for (int a = 0; a < 3; ++a)
        if (p.out[a] != 1 || p.pad_begin[a] != 0 || p.in[a] != p.k[a] || (p.k[a] > 1 && p.dil[a] != 1)) return p;
    const WeightStrides& w = p.wei_str;
    const int64_t ic = p.icg;
    const bool k_run = kernel_axes_one_run(p);
    const bool w_xi = k_run && w.k[2] == ic * w.i;          // XIO: (x, i) at x * IC + i
    const bool w_ix = k_run && w.i == p.k_sp() * w.k[2];    // OIX: (i, x) at i * K + x
    const bool own = p.nxc ? w_xi : w_ix;
    fold->transpose_src = !own && (w_xi || w_ix) && p.mb < p.oc();
    Problem q = p;
    q.icg = ic * p.k_sp();
    q.in = q.out = q.k = q.stride = q.dil = {1, 1, 1};
    q.pad_begin = q.pad_end = {0, 0, 0};
    q.nxc = true;  // one pixel: NCX is NXC
    q.src_str = {q.icg, 1, {q.icg, q.icg, q.icg}};
    q.dst_str = {p.oc(), 1, {p.oc(), p.oc(), p.oc()}};
    if (own || fold->transpose_src) {  // c' in the weights' order
        q.wei_str.i = w_xi ? w.i : w.k[2];
    } else {  // dense [c'][OC]
        q.wlayout = WeightLayout::XIO;
        q.wei_str.o = 1;
        q.wei_str.i = p.oc();
    }
    // A weight gradient into weights with c' innermost (OIX, its rows
    // dense; or one output channel in the user's own layout, its c'
    // dense): the 1x1 problem with the roles of src and diff_dst swapped
    // (input channels OC, output channels c') writes them as its XIO. (One
    // output channel in the lanes of c' input channels had left 15 of 16
    // lanes idle.)
    if (p.alg == Alg::weights && q.wei_str.i == 1 && (q.wei_str.o == q.icg || (own && q.ocg == 1))) {
        std::swap(q.icg, q.ocg);
        std::swap(q.src_str, q.dst_str);
        q.swap_inputs = !q.swap_inputs;
        q.wlayout = WeightLayout::XIO;
        q.wei_str.o = 1;
        q.wei_str.i = q.ocg;
        fold->swap_roles = true;
    }
    q.wei_str.k = {q.wei_str.i * q.icg, q.wei_str.i * q.icg, q.wei_str.i * q.icg};
    fold->folded = true;
    fold->permute = !own && !fold->transpose_src;
    return q;
}

// The share of a tile's vector lanes that c channels fill (vectors of vlen).
double lane_fill(int64_t c, int vlen) { return double(c) / double((c + vlen - 1) / vlen * vlen); }

bool swap_lanes_1x1(const Problem& p, int vlen) {
    if (p.alg != Alg::weights || p.g != 1) return false;
    for (int a = 0; a < 3; ++a)
        if (!plain_axis(p, a)) return false;
    return lane_fill(p.icg, vlen) - lane_fill(p.ocg, vlen) >= kSwapLaneGain;
}

Problem swapped_1x1(const Problem& p) {
    Problem q = p;
    std::swap(q.icg, q.ocg);
    std::swap(q.src_str, q.dst_str);
    std::swap(q.wei_str.i, q.wei_str.o);
    q.swap_inputs = !p.swap_inputs;
    switch (p.wlayout) {  // the same memory, its I and O exchanged
        case WeightLayout::XIO: q.wlayout = WeightLayout::XOI; break;
        case WeightLayout::XOI: q.wlayout = WeightLayout::XIO; break;
        case WeightLayout::OIX: q.wlayout = WeightLayout::IOX; break;
        case WeightLayout::IOX: q.wlayout = WeightLayout::OIX; break;
    }
    return q;
}

int64_t user_weights_offset(const Problem& p, int64_t o, int64_t c) {
    const int64_t ksp = p.k_sp();
    const int64_t x = p.nxc ? c / p.icg : c % ksp, i = p.nxc ? c % p.icg : c / ksp;
    const int64_t kw = x % p.k[2], kh = x / p.k[2] % p.k[1], kd = x / (p.k[2] * p.k[1]);
    const WeightStrides& w = p.wei_str;
    return o * w.o + i * w.i + kd * w.k[0] + kh * w.k[1] + kw * w.k[2];
}

bool plain_axis(const Problem& p, int a) {
    return p.k[a] == 1 && p.stride[a] == 1 && p.pad_begin[a] == 0 && p.in[a] == p.out[a];
}

SpatialView fold_plain_axes(const Problem& p, int max_axes) {
    SpatialView v;
    v.in = p.in;
    v.out = p.out;
    v.k = p.k;
    v.stride = p.stride;
    v.dil = p.dil;
    v.pad = p.pad_begin;
    for (int a = 1; a >= 0 && v.merged < max_axes; --a) {
        if (!plain_axis(p, a) || !plain_axis(p, 2) || (a == 0 && v.out[1] != 1)) break;
        v.out[2] *= v.out[a];
        v.in[2] *= v.in[a];
        v.out[a] = v.in[a] = 1;
        ++v.merged;
    }
    return v;
}

int lines_per_l1_set(int64_t m, int64_t stride) {
    std::array<int, kL1SetSpan / kCacheLineBytes> count{};
    int most = 0;
    int64_t last_line = -1;
    for (int64_t j = 0; j < m; ++j) {
        const int64_t line = j * stride / kCacheLineBytes;  // rows in one line share it
        if (line == last_line) continue;
        last_line = line;
        most = std::max(most, ++count[static_cast<size_t>(line % (kL1SetSpan / kCacheLineBytes))]);
    }
    return most;
}

}  // namespace convgrad::detail
