// Mode C: the op under test against the reference implementation.
//
// Two fills, two comparisons (docs/sweep.md explains the tolerance):
//  1. small integers, compared bitwise: every product and partial sum is an
//     integer below 2^24, so any f32 accumulation order gives the exact sum
//     and both sides round that one value once to the output type;
//  2. random reals in [-1, 1], compared element-wise within
//       tol_i = 2 (L + 1) u_f32 S_i + 2 u_out max(|got_i|, |want_i|) + min_normal_out
//     where L is the reduction length, S_i = sum over the products of |x||y|
//     (the reference run on |inputs|) and u the unit roundoff. This is the
//     classic bound for f32 summation in any order, so it never fails a
//     correct f32 accumulation and catches lower-precision accumulation.
#pragma once

#include <convgrad/convgrad.hpp>

#include <cstddef>
#include <cstdint>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include "guarded_pages.hpp"
#include "op_case.hpp"

namespace convgrad::cli {

// 64-byte (cache line) aligned storage, as frameworks and oneDNN allocate
// tensors: the benchmark then times the kernels' aligned paths (streaming
// stores need 64-byte alignment) on equal terms with oneDNN.
template <typename T>
struct cache_aligned_allocator {
    using value_type = T;
    static constexpr std::size_t kAlign = 64;
    cache_aligned_allocator() = default;
    template <typename U>
    cache_aligned_allocator(const cache_aligned_allocator<U>&) {}
    T* allocate(std::size_t n) {
        return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t(kAlign)));
    }
    void deallocate(T* p, std::size_t) { ::operator delete(p, std::align_val_t(kAlign)); }
    template <typename U>
    bool operator==(const cache_aligned_allocator<U>&) const { return true; }
    template <typename U>
    bool operator!=(const cache_aligned_allocator<U>&) const { return false; }
};

guard_side parse_guard_side(const std::string& name);  // throws std::invalid_argument
const char* guard_side_name(guard_side g);

// A dense buffer of one data type; bf16 / f16 hold raw 16-bit patterns.
class tensor_buffer {
public:
    tensor_buffer(data_type dt, int64_t elems, guard_side guard = guard_side::none);
    tensor_buffer(tensor_buffer&& other) noexcept;
    tensor_buffer& operator=(tensor_buffer&&) = delete;
    tensor_buffer(const tensor_buffer&) = delete;
    tensor_buffer& operator=(const tensor_buffer&) = delete;

    data_type dtype() const { return dt_; }
    int64_t elems() const { return elems_; }
    size_t bytes() const { return bytes_; }
    void* data() { return data_; }
    const void* data() const { return data_; }
    float get(int64_t i) const;
    void set(int64_t i, float v);  // rounds to nearest even for bf16 / f16
    uint32_t bits(int64_t i) const;

private:
    data_type dt_;
    int64_t elems_;
    size_t bytes_;
    std::vector<unsigned char, cache_aligned_allocator<unsigned char>> heap_;  // guard_side::none
    std::optional<guarded_pages> guarded_;                                      // end / begin
    unsigned char* data_ = nullptr;
};

// Uniform integers in [-range, range]; deterministic for a seed.
void fill_integers(tensor_buffer& t, int range, uint64_t seed);
// Uniform reals in [-1, 1], rounded to the buffer's type.
void fill_reals(tensor_buffer& t, uint64_t seed);
tensor_buffer absolute(const tensor_buffer& t);

struct comparison {
    bool ok = true;
    int64_t bad = 0;         // elements out of tolerance (or differing bits)
    int64_t first_bad = -1;  // index of the first one
    double got = 0, want = 0;
    double worst = 0;  // exact: 0 / 1; reals: max |got - want| / tol
    std::string describe() const;
};

comparison compare_bits(const tensor_buffer& got, const tensor_buffer& want);
// abs_sum: the reference's output on |inputs| (S_i above).
comparison compare_reals(const tensor_buffer& got, const tensor_buffer& want,
                         const tensor_buffer& abs_sum, int64_t reduction_length);

// The integer range r so that r * r * L < 2^24 (at most 2); 0 when even
// r = 1 is too large, and the exact check cannot be done.
int exact_fill_range(int64_t reduction_length);

// Sets CONVGRAD_MAX_ISA for the lifetime of the guard (empty: leaves it),
// restoring the previous value after.
class isa_cap_guard {
public:
    explicit isa_cap_guard(const std::string& isa);
    ~isa_cap_guard();
    isa_cap_guard(const isa_cap_guard&) = delete;
    isa_cap_guard& operator=(const isa_cap_guard&) = delete;

private:
    bool active_ = false, had_old_ = false;
    std::string old_;
};

// The implementation an op runs ("ref", "jit:avx512_core", ...): the first
// word of describe().
std::string impl_label(const op& o);

// Constructs the op with CONVGRAD_MAX_ISA = isa ("" = as the environment says).
op make_op_with_isa(const op_case& c, const std::string& isa);

struct check_result {
    bool ok = true;
    std::string exact;  // "ok", "skipped (...)" or the first mismatch
    std::string reals;  // "err/tol 0.01" or the first mismatch
    double worst_ratio = 0;
    std::string impl;   // describe() of the op under test, up to the first space
};

// Runs the case under `isa` and under "ref" with both fills and compares.
// corrupt_for_test changes one output element of the op under test before
// comparing (the test hook proving the comparison can fail).
// guard places the op under test's inputs and output against an
// inaccessible page, so a read or write outside them faults (docs/sweep.md).
// The output starts as 0x7f bytes, so an element left unwritten is caught.
check_result check_case(const op_case& c, const std::string& isa, bool corrupt_for_test,
                        uint64_t seed = 1, guard_side guard = guard_side::none);

}  // namespace convgrad::cli
