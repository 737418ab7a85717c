#include "jit/bwd_data_cvt.hpp"

#include <memory>
#include <string>

#include "jit/jit_kernel.hpp"
#include "jit/kernel_cache.hpp"
#include "jit/vec_cvt.hpp"
#include "ops/numeric.hpp"

namespace convgrad::detail {

// The cache key of an ArrayCvtKernel.
struct ArrayCvtDesc {
    int32_t isa = 0, from = 0, to = 0;
};

// fn(src, dst, nvec): nvec whole vectors of `from` at src converted to `to`
// at dst (through f32). Register contract: rdi src, rsi dst, rdx vectors
// left; vregs 0-2.
class ArrayCvtKernel final : public JitKernel {
public:
    explicit ArrayCvtKernel(const ArrayCvtDesc& d)
        : JitKernel(std::string("cvt_") + dtype_name(static_cast<data_type>(d.from)) + "_to_" +
                    dtype_name(static_cast<data_type>(d.to)) + "_" + isa_name(static_cast<Isa>(d.isa))),
          d_(d) {}
    using Fn = void (*)(const void*, void*, int64_t);
    void operator()(const void* src, void* dst, int64_t nvec) const { entry<Fn>()(src, dst, nvec); }

private:
    void generate() override {
        using namespace Xbyak::util;
        const Isa isa = static_cast<Isa>(d_.isa);
        const data_type from = static_cast<data_type>(d_.from), to = static_cast<data_type>(d_.to);
        VecIsa vi(*this, isa);
        VecCvt cvt(*this, vi, isa);
        Xbyak::Label l_loop, l_done;
        preamble(0);
        test(rdx, rdx);
        jz(l_done);
        L(l_loop);
        cvt.load(vi.vreg(0), ptr[rdi], from);
        cvt.store(ptr[rsi], vi.vreg(0), to, vi.vreg(1), vi.vreg(2));
        add(rdi, vi.vlen() * VecCvt::elem_bytes(from));
        add(rsi, vi.vlen() * VecCvt::elem_bytes(to));
        dec(rdx);
        jnz(l_loop);
        L(l_done);
        postamble();
        cvt.emit_constants();
    }
    ArrayCvtDesc d_;
};

ArrayConverter::ArrayConverter(Isa isa, data_type from, data_type to)
    : vlen_(isa >= Isa::avx512_core ? 16 : 8), from_(from), to_(to) {
    static KernelCache<ArrayCvtDesc, ArrayCvtKernel> cache;
    ArrayCvtDesc d;
    d.isa = static_cast<int32_t>(isa >= Isa::avx512_core ? Isa::avx512_core : Isa::avx2);
    d.from = static_cast<int32_t>(from);
    d.to = static_cast<int32_t>(to);
    kernel_ = cache.get(d, [](const ArrayCvtDesc& desc) {
        auto r = std::make_shared<ArrayCvtKernel>(desc);
        r->create();
        return std::shared_ptr<const ArrayCvtKernel>(std::move(r));
    });
}

// Whole vectors in the kernel, the rest with numeric.hpp's conversions.
void ArrayConverter::operator()(const void* src, void* dst, int64_t n) const {
    (*kernel_)(src, dst, n / vlen_);
    for (int64_t i = n / vlen_ * vlen_; i < n; ++i) store_elem(dst, i, to_, load_elem(src, i, from_));
}

void round_f32_array(Isa isa, data_type dt, const float* src, void* dst, int64_t n) {
    ArrayConverter(isa, data_type::f32, dt)(src, dst, n);
}

void widen_to_f32_array(Isa isa, data_type dt, const void* src, float* dst, int64_t n) {
    ArrayConverter(isa, dt, data_type::f32)(src, dst, n);
}

}  // namespace convgrad::detail
