#include "jit/bwd_data_cvt.hpp"

#include <memory>
#include <string>

#include "jit/jit_kernel.hpp"
#include "jit/kernel_cache.hpp"
#include "jit/vec_cvt.hpp"
#include "ops/numeric.hpp"

namespace convgrad::detail {
namespace {

struct RoundKernelDesc {
    int32_t isa = 0, dt = 0;
};

// fn(src, dst, nvec): nvec whole vectors of f32 at src rounded to dt at dst.
// Register contract: rdi src, rsi dst, rdx vectors left; vregs 0-2.
class RoundKernel final : public JitKernel {
public:
    explicit RoundKernel(const RoundKernelDesc& d)
        : JitKernel(std::string("round_f32_to_") + dtype_name(static_cast<data_type>(d.dt)) + "_" +
                    isa_name(static_cast<Isa>(d.isa))),
          d_(d) {}
    using Fn = void (*)(const float*, void*, int64_t);
    void operator()(const float* src, void* dst, int64_t nvec) const { entry<Fn>()(src, dst, nvec); }

private:
    void generate() override {
        using namespace Xbyak::util;
        const Isa isa = static_cast<Isa>(d_.isa);
        const data_type dt = static_cast<data_type>(d_.dt);
        VecIsa vi(*this, isa);
        VecCvt cvt(*this, vi, isa);
        Xbyak::Label l_loop, l_done;
        preamble(0);
        test(rdx, rdx);
        jz(l_done);
        L(l_loop);
        vi.load(vi.vreg(0), ptr[rdi]);
        cvt.store(ptr[rsi], vi.vreg(0), dt, vi.vreg(1), vi.vreg(2));
        add(rdi, vi.vbytes());
        add(rsi, vi.vlen() * VecCvt::elem_bytes(dt));
        dec(rdx);
        jnz(l_loop);
        L(l_done);
        postamble();
        cvt.emit_constants();
    }
    RoundKernelDesc d_;
};

}  // namespace

void round_f32_array(Isa isa, data_type dt, const float* src, void* dst, int64_t n) {
    static KernelCache<RoundKernelDesc, RoundKernel> cache;
    RoundKernelDesc d;
    d.isa = static_cast<int32_t>(isa >= Isa::avx512_core ? Isa::avx512_core : Isa::avx2);
    d.dt = static_cast<int32_t>(dt);
    const auto k = cache.get(d, [](const RoundKernelDesc& desc) {
        auto r = std::make_shared<RoundKernel>(desc);
        r->create();
        return std::shared_ptr<const RoundKernel>(std::move(r));
    });
    const int64_t vlen = isa >= Isa::avx512_core ? 16 : 8, whole = n / vlen * vlen;
    (*k)(src, dst, n / vlen);
    for (int64_t i = whole; i < n; ++i) store_elem(dst, i, dt, src[i]);
}

}  // namespace convgrad::detail
