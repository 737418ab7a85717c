// Depthwise weight-gradient generator (g == IC == OC): vectorises over
// channels. Tile = n channel vectors x `taps` consecutive kw taps, so each
// diff_dst vector loaded is used by `taps` FMAs. The executor calls it only
// on the pixel range where every tap of the tile reads inside src, and
// covers the edge pixels with single-tap calls.
#include "jit/bwd_weights_kernel.hpp"
#include "jit/bwd_weights_skeleton.hpp"

namespace convgrad::detail {
namespace {

class DwWeightsKernel final : public WeightsSkeleton {
public:
    explicit DwWeightsKernel(const WeightsKernelDesc& d) : WeightsSkeleton(d) {}

private:
    // n diff_dst vectors into temp(1..n); for kernel row i, tap k, vector v:
    // one multiply-add with the src vector at i * row_disp + k * tap_disp +
    // v * vbytes (the planner keeps it within 32 bits) (through
    // temp(0) on AVX2). With bf16 pairs each lane is one channel of two
    // images in both operands, so vdpbf16ps sums exactly the right products.
    // 16-bit inputs (in_dt) are widened as they are loaded.
    void pixel_body() override {
        for (int v = 0; v < vecs(); ++v) load_vec(temp(1 + v), ptr[reg_dst_ + v * in_vbytes()], v);
        for (int r = 0; r < rows(); ++r) {
            const int64_t disp = (r / desc_.m) * int64_t(desc_.row_disp) + (r % desc_.m) * int64_t(desc_.tap_disp);
            for (int v = 0; v < vecs(); ++v) {
                const Xbyak::Address s = ptr[reg_src_ + disp + v * in_vbytes()];
                if (in_dt() == data_type::f32) {
                    mac_mem(acc(r, v), temp(1 + v), s, v, temp(0));
                } else {  // widened through temp(0); a masked tail lane reads 0
                    load_vec(temp(0), s, v);
                    mac(acc(r, v), temp(1 + v), temp(0));
                }
            }
        }
    }
};

}  // namespace

std::shared_ptr<const WeightsKernel> make_dw_weights_kernel(const WeightsKernelDesc& d) {
    auto k = std::make_shared<DwWeightsKernel>(d);
    k->create();
    return k;
}

}  // namespace convgrad::detail
