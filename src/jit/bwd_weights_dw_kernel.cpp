// Depthwise weight-gradient generator (g == IC == OC): vectorises over
// channels. Tile = n channel vectors x `taps` consecutive kw taps, so each
// diff_dst vector loaded is used by `taps` FMAs; with desc.window (W stride
// 1) each src vector loaded is used by every tap that reads it within a
// block of pixels too. The executor calls it only on the pixel range where
// every tap of the tile reads inside src, and covers the edge pixels with
// single-tap calls.
#include "jit/bwd_weights_kernel.hpp"
#include "jit/bwd_weights_skeleton.hpp"

#include <algorithm>

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
    // A block of window() pixels (W stride 1: pixel u's tap k reads src
    // vector u + k of the kernel row): the block's diff_dst vectors in
    // temp(1 + u*n + v); per kernel row, each of its window+taps-1 src
    // vectors is loaded once (into temp(0)) and multiplied into every
    // (pixel, tap) pair that reads it.
    int block_pixels() const override { return std::max<int>(1, desc_.window); }
    int64_t block_step() const override { return desc_.tap_disp; }
    void block_body() override {
        const int u_count = block_pixels(), n = vecs();
        const int64_t step = desc_.tap_disp;
        for (int u = 0; u < u_count; ++u)
            for (int v = 0; v < n; ++v) load_vec(temp(1 + u * n + v), ptr[reg_dst_ + u * step + v * in_vbytes()], v);
        for (int i = 0; i < std::max<int>(1, desc_.kh); ++i)
            for (int j = 0; j < u_count + desc_.m - 1; ++j)
                for (int v = 0; v < n; ++v) {
                    load_vec(temp(0), ptr[reg_src_ + i * int64_t(desc_.row_disp) + j * step + v * in_vbytes()], v);
                    for (int u = std::max(0, j - desc_.m + 1); u <= std::min(j, u_count - 1); ++u)
                        mac(acc(i * desc_.m + (j - u), v), temp(1 + u * n + v), temp(0));
                }
    }
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
