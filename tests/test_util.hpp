// Shared helpers for the Catch2 tests: fills, typed buffers, running an op
// under a chosen ISA cap, and comparisons.
#pragma once

#include <convgrad/convgrad.hpp>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "guarded_pages.hpp"
#include "ops/numeric.hpp"

namespace testutil {

using convgrad::data_type;
using convgrad::dims;

// Sets an environment variable (or, with nullptr, unsets it) for the
// lifetime of the object, then restores it.
class ScopedEnv {
public:
    ScopedEnv(const char* name, const char* value) : name_(name) {
        const char* old = std::getenv(name);
        had_ = old != nullptr;
        if (had_) old_ = old;
        if (value)
            setenv(name, value, 1);
        else
            unsetenv(name);
    }
    ~ScopedEnv() {
        if (had_)
            setenv(name_.c_str(), old_.c_str(), 1);
        else
            unsetenv(name_.c_str());
    }
    ScopedEnv(const ScopedEnv&) = delete;
    ScopedEnv& operator=(const ScopedEnv&) = delete;

private:
    std::string name_;
    bool had_ = false;
    std::string old_;
};

// Sets CONVGRAD_MAX_ISA for the lifetime of the object, then restores it.
// Capped at avx512_core_bf16, bf16 ops run the vdpbf16ps kernels
// (CONVGRAD_BF16_DOT=on) even where the CPU's probe would widen bf16 to f32,
// so every machine with AVX512_BF16 tests them; below it the setting is left
// alone.
class IsaCap {
public:
    explicit IsaCap(const std::string& isa) : isa_("CONVGRAD_MAX_ISA", isa.c_str()) {
        if (isa == "avx512_core_bf16") dot_ = std::make_unique<ScopedEnv>("CONVGRAD_BF16_DOT", "on");
    }

private:
    ScopedEnv isa_;
    std::unique_ptr<ScopedEnv> dot_;
};

// The best ISA of this machine's vector kernels: max_isa() below amx (whose
// tile kernels serve only some problems), for tests of those kernels' plans.
inline std::string vector_isa() {
    const std::string m = convgrad::max_isa();
    return m == "amx" ? "avx512_core_bf16" : m;
}

// A raw buffer of n elements of type dt.
struct Buffer {
    data_type dt = data_type::f32;
    std::vector<uint8_t> bytes;

    Buffer() = default;
    Buffer(data_type t, int64_t n) : dt(t), bytes(static_cast<size_t>(n) * esize(t), 0) {}
    static size_t esize(data_type t) { return t == data_type::f32 ? 4 : 2; }
    int64_t size() const { return static_cast<int64_t>(bytes.size() / esize(dt)); }
    void* data() { return bytes.data(); }
    const void* data() const { return bytes.data(); }
    float get(int64_t i) const { return convgrad::detail::load_elem(bytes.data(), i, dt); }
    void set(int64_t i, double v) { convgrad::detail::store_elem(bytes.data(), i, dt, v); }
};

// Small integers in [lo, hi]: exact in every type, and sums stay exact.
inline Buffer small_ints(data_type dt, int64_t n, uint32_t seed, int lo = -2, int hi = 2) {
    Buffer b(dt, n);
    std::mt19937 gen(seed);
    std::uniform_int_distribution<int> dist(lo, hi);
    for (int64_t i = 0; i < n; ++i) b.set(i, dist(gen));
    return b;
}

// Uniform reals in [-1, 1], rounded to dt.
inline Buffer random_reals(data_type dt, int64_t n, uint32_t seed) {
    Buffer b(dt, n);
    std::mt19937 gen(seed);
    std::uniform_real_distribution<double> dist(-1.0, 1.0);
    for (int64_t i = 0; i < n; ++i) b.set(i, dist(gen));
    return b;
}

// Runs `o` on the inputs into a fresh output filled with a sentinel.
inline Buffer run(const convgrad::op& o, const Buffer& in0, const Buffer& in1) {
    Buffer out(o.dtype(), o.output_elems());
    std::memset(out.data(), 0x7f, out.bytes.size());
    o.execute(in0.data(), in1.data(), out.data());
    return out;
}

// Creates the op under an ISA cap ("ref" = the reference path).
inline convgrad::op make_op(const std::string& isa, convgrad::op_kind kind, data_type dt,
                            const convgrad::attributes& a, const dims& d0, const dims& d1,
                            const std::vector<int32_t>* shape = nullptr) {
    IsaCap cap(isa);
    return convgrad::op(kind, dt, a, d0, d1, shape);
}

inline bool bitwise_equal(const Buffer& a, const Buffer& b) { return a.bytes == b.bytes; }

// The thread count the op runs on in the current arena: describe()'s last
// field, "threads=N" (1 for problems too small to split).
inline int threads_used(const convgrad::op& o) {
    const std::string d = o.describe();
    const size_t at = d.rfind("threads=");
    return at == std::string::npos ? -1 : std::atoi(d.c_str() + at + 8);
}

// Largest |a - b| over all elements.
inline double max_abs_diff(const Buffer& a, const Buffer& b) {
    double m = 0;
    for (int64_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(double(a.get(i)) - b.get(i)));
    return m;
}

inline int64_t prod(const dims& d) {
    int64_t n = 1;
    for (int64_t v : d) n *= v;
    return n;
}

// n bytes against an inaccessible page: their end touches it (at_end) or
// their start does; a read or write past that end faults.
inline convgrad::cli::guarded_pages guarded_bytes(size_t n, bool at_end) {
    return {n, at_end ? convgrad::cli::guard_side::end : convgrad::cli::guard_side::begin};
}

// run() on copies of in0 and in1 and into an output, each against an
// inaccessible page (guarded_bytes, at_end): any access outside them faults.
// The output starts as run()'s 0x7f bytes, so an unwritten element shows.
inline Buffer run_guarded(const convgrad::op& o, const Buffer& in0, const Buffer& in1, bool at_end) {
    const auto a = guarded_bytes(in0.bytes.size(), at_end), b = guarded_bytes(in1.bytes.size(), at_end);
    Buffer out(o.dtype(), o.output_elems());
    const auto c = guarded_bytes(out.bytes.size(), at_end);
    std::memset(c.data(), 0x7f, out.bytes.size());
    std::memcpy(a.data(), in0.data(), in0.bytes.size());
    std::memcpy(b.data(), in1.data(), in1.bytes.size());
    o.execute(a.data(), b.data(), c.data());
    std::memcpy(out.data(), c.data(), out.bytes.size());
    return out;
}

}  // namespace testutil
