#include "check.hpp"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <stdexcept>
#include <utility>

namespace convgrad::cli {
namespace {

size_t elem_size(data_type dt) { return dt == data_type::f32 ? 4 : 2; }

uint16_t to_bf16(float v) {
    uint32_t b;
    std::memcpy(&b, &v, 4);
    if (std::isnan(v)) return 0x7fc0;
    b += 0x7fff + ((b >> 16) & 1);  // round to nearest, ties to even
    return static_cast<uint16_t>(b >> 16);
}

float from_bf16(uint16_t h) {
    const uint32_t b = static_cast<uint32_t>(h) << 16;
    float v;
    std::memcpy(&v, &b, 4);
    return v;
}

// The compiler's _Float16 conversions (GCC >= 12 on x86-64) round correctly.
uint16_t to_f16(float v) {
    const _Float16 h = static_cast<_Float16>(v);
    uint16_t b;
    std::memcpy(&b, &h, 2);
    return b;
}

float from_f16(uint16_t b) {
    _Float16 h;
    std::memcpy(&h, &b, 2);
    return static_cast<float>(h);
}

// Unit roundoff and smallest normal of a type.
double unit_roundoff(data_type dt) {
    switch (dt) {
        case data_type::f32: return std::ldexp(1.0, -24);
        case data_type::bf16: return std::ldexp(1.0, -8);
        case data_type::f16: return std::ldexp(1.0, -11);
    }
    return 1.0;
}

double min_normal(data_type dt) {
    return dt == data_type::f16 ? std::ldexp(1.0, -14) : std::ldexp(1.0, -126);
}

// Makes one element plainly wrong: v -> v + 1 + |v| (0 if that overflows).
void corrupt_one(tensor_buffer& t) {
    if (t.elems() == 0) return;
    const int64_t i = t.elems() / 2;
    const float v = t.get(i);
    const float w = v + 1.f + std::fabs(v);
    t.set(i, std::isfinite(w) && w != v ? w : 0.f);
}

}  // namespace

guard_side parse_guard_side(const std::string& name) {
    if (name == "none") return guard_side::none;
    if (name == "end") return guard_side::end;
    if (name == "begin") return guard_side::begin;
    throw std::invalid_argument("expected none | end | begin, given \"" + name + "\"");
}

const char* guard_side_name(guard_side g) {
    return g == guard_side::end ? "end" : g == guard_side::begin ? "begin" : "none";
}

tensor_buffer::tensor_buffer(data_type dt, int64_t elems, guard_side guard)
    : dt_(dt), elems_(elems), bytes_(static_cast<size_t>(elems) * elem_size(dt)) {
    if (guard == guard_side::none) {
        heap_.resize(bytes_);
        data_ = heap_.data();
        return;
    }
    guarded_.emplace(bytes_, guard);
    data_ = guarded_->data();
}

tensor_buffer::tensor_buffer(tensor_buffer&& other) noexcept
    : dt_(other.dt_), elems_(other.elems_), bytes_(other.bytes_), heap_(std::move(other.heap_)),
      guarded_(std::move(other.guarded_)), data_(guarded_ ? guarded_->data() : heap_.data()) {
    other.guarded_.reset();
    other.data_ = nullptr;
    other.bytes_ = 0;
    other.elems_ = 0;
}

float tensor_buffer::get(int64_t i) const {
    const uint32_t b = bits(i);
    if (dt_ == data_type::f32) {
        float v;
        std::memcpy(&v, &b, 4);
        return v;
    }
    return dt_ == data_type::bf16 ? from_bf16(static_cast<uint16_t>(b)) : from_f16(static_cast<uint16_t>(b));
}

void tensor_buffer::set(int64_t i, float v) {
    unsigned char* p = data_ + static_cast<size_t>(i) * elem_size(dt_);
    if (dt_ == data_type::f32) {
        std::memcpy(p, &v, 4);
        return;
    }
    const uint16_t h = dt_ == data_type::bf16 ? to_bf16(v) : to_f16(v);
    std::memcpy(p, &h, 2);
}

uint32_t tensor_buffer::bits(int64_t i) const {
    const unsigned char* p = data_ + static_cast<size_t>(i) * elem_size(dt_);
    if (dt_ == data_type::f32) {
        uint32_t b;
        std::memcpy(&b, p, 4);
        return b;
    }
    uint16_t h;
    std::memcpy(&h, p, 2);
    return h;
}

void fill_integers(tensor_buffer& t, int range, uint64_t seed) {
    std::mt19937_64 gen(seed);
    std::uniform_int_distribution<int> dist(-range, range);
    for (int64_t i = 0; i < t.elems(); ++i) t.set(i, static_cast<float>(dist(gen)));
}

void fill_reals(tensor_buffer& t, uint64_t seed) {
    std::mt19937_64 gen(seed);
    std::uniform_real_distribution<float> dist(-1.f, 1.f);
    for (int64_t i = 0; i < t.elems(); ++i) t.set(i, dist(gen));
}

tensor_buffer absolute(const tensor_buffer& t) {
    tensor_buffer r(t.dtype(), t.elems());
    for (int64_t i = 0; i < t.elems(); ++i) r.set(i, std::fabs(t.get(i)));  // exact in every type
    return r;
}

std::string comparison::describe() const {
    if (ok) return "ok";
    std::ostringstream os;
    os << bad << " element" << (bad == 1 ? "" : "s") << " wrong, first [" << first_bad
       << "] got " << got << " want " << want;
    return os.str();
}

comparison compare_bits(const tensor_buffer& got, const tensor_buffer& want) {
    comparison c;
    for (int64_t i = 0; i < want.elems(); ++i) {
        const bool both_nan = std::isnan(got.get(i)) && std::isnan(want.get(i));
        if (got.bits(i) == want.bits(i) || both_nan) continue;
        if (c.bad++ == 0) c.first_bad = i, c.got = got.get(i), c.want = want.get(i);
    }
    c.ok = c.bad == 0;
    c.worst = c.ok ? 0 : 1;
    return c;
}

comparison compare_reals(const tensor_buffer& got, const tensor_buffer& want,
                         const tensor_buffer& abs_sum, int64_t reduction_length) {
    const data_type dt = want.dtype();
    const double acc_term = 2.0 * static_cast<double>(reduction_length + 1) * unit_roundoff(data_type::f32);
    comparison c;
    for (int64_t i = 0; i < want.elems(); ++i) {
        const double g = got.get(i), w = want.get(i);
        const double tol = acc_term * abs_sum.get(i) +
                           2.0 * unit_roundoff(dt) * std::max(std::fabs(g), std::fabs(w)) + min_normal(dt);
        const double err = std::fabs(g - w);
        const bool good = std::isfinite(g) && err <= tol;
        if (std::isfinite(err)) c.worst = std::max(c.worst, err / tol);
        if (good) continue;
        if (c.bad++ == 0) c.first_bad = i, c.got = g, c.want = w;
    }
    c.ok = c.bad == 0;
    return c;
}

int exact_fill_range(int64_t reduction_length) {
    const double limit = std::ldexp(1.0, 24);
    for (int r = 2; r >= 1; --r)
        if (static_cast<double>(r) * r * static_cast<double>(reduction_length) < limit) return r;
    return 0;
}

isa_cap_guard::isa_cap_guard(const std::string& isa) {
    if (isa.empty()) return;
    active_ = true;
    if (const char* old = std::getenv("CONVGRAD_MAX_ISA")) had_old_ = true, old_ = old;
    ::setenv("CONVGRAD_MAX_ISA", isa.c_str(), 1);
}

isa_cap_guard::~isa_cap_guard() {
    if (!active_) return;
    if (had_old_) ::setenv("CONVGRAD_MAX_ISA", old_.c_str(), 1);
    else ::unsetenv("CONVGRAD_MAX_ISA");
}

std::string impl_label(const op& o) {
    std::string d = o.describe();
    d = d.substr(0, d.find(' '));
    if (!d.empty() && d.back() == ':') d.pop_back();
    return d;
}

op make_op_with_isa(const op_case& c, const std::string& isa) {
    isa_cap_guard guard(isa);
    return c.make_op();
}

check_result check_case(const op_case& c, const std::string& isa, bool corrupt_for_test, uint64_t seed,
                        guard_side guard) {
    const op tested = make_op_with_isa(c, isa);
    const op reference = make_op_with_isa(c, "ref");
    const data_type dt = c.dt;
    tensor_buffer in0(dt, tested.input0_elems(), guard), in1(dt, tested.input1_elems(), guard);
    tensor_buffer got(dt, tested.output_elems(), guard), want(dt, tested.output_elems());
    auto run_both = [&] {
        std::memset(got.data(), 0x7f, got.bytes());
        tested.execute(in0.data(), in1.data(), got.data());
        if (corrupt_for_test) corrupt_one(got);
        reference.execute(in0.data(), in1.data(), want.data());
    };

    check_result r;
    r.impl = impl_label(tested);
    const int64_t length = reduction_length(c);
    if (const int range = exact_fill_range(length)) {
        fill_integers(in0, range, seed);
        fill_integers(in1, range, seed + 1);
        run_both();
        const comparison cmp = compare_bits(got, want);
        r.ok = cmp.ok;
        r.exact = cmp.describe();
    } else {
        r.exact = "skipped (reduction length " + std::to_string(length) + " >= 2^24)";
    }

    fill_reals(in0, seed + 2);
    fill_reals(in1, seed + 3);
    run_both();
    // |want_i| <= S_i, so a pass with |want| in place of S is a pass; the
    // extra reference run on |inputs| is only needed when that is not enough.
    tensor_buffer abs_sum = absolute(want);
    comparison cmp = compare_reals(got, want, abs_sum, length);
    if (!cmp.ok) {
        const tensor_buffer abs0 = absolute(in0), abs1 = absolute(in1);
        reference.execute(abs0.data(), abs1.data(), abs_sum.data());
        cmp = compare_reals(got, want, abs_sum, length);
    }
    r.ok = r.ok && cmp.ok;
    r.worst_ratio = cmp.worst;
    std::ostringstream os;
    os.precision(2);
    if (cmp.ok) os << "err/tol " << cmp.worst;
    else os << cmp.describe();
    r.reals = os.str();
    return r;
}

}  // namespace convgrad::cli
