// Depthwise weight-gradient generator (g == IC == OC, and lane groups of
// G = IC/g == OC/g channels): vectorises over channels. Tile = n channel
// vectors x `taps` consecutive kw taps, so each diff_dst vector loaded is
// used by `taps` FMAs; with desc.window (W stride
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
    // n diff_dst vectors into temp(1..n); for kernel row ir, tap k, vector
    // v: one multiply-add with the src vector at ir * row_disp + k *
    // tap_disp + v * vbytes (the planner keeps it within 32 bits) (through
    // temp(0) on AVX2). With bf16 pairs each lane is one channel of two
    // images in both operands, so vdpbf16ps sums exactly the right products.
    // 16-bit inputs (in_dt) are widened as they are loaded.
    // A block of window() pixels (W stride 1: pixel u's tap k reads src
    // vector u + k of the kernel row): the block's diff_dst vectors in
    // temp(1 + u*n + v); per kernel row, each of its window+taps-1 src
    // vectors is loaded once (into temp(0)) and multiplied into every
    // (pixel, tap) pair that reads it.
    // Lane groups (G > 1): all of the above once per input channel i of
    // the group, each src vector permuted as it is loaded; tile row
    // (tap k, i) is k * G + i.
    int block_pixels() const override { return std::max<int>(1, desc_.window); }
    int64_t block_step() const override { return desc_.tap_disp; }
    int group() const { return desc_.lane_group; }
    int taps() const { return desc_.m / group(); }
    Xbyak::Xmm index_reg() const { return temp(block_pixels() * vecs() + 1); }
    void block_body() override {
        const int u_count = block_pixels(), n = vecs();
        const int64_t step = desc_.tap_disp;
        for (int u = 0; u < u_count; ++u)
            for (int v = 0; v < n; ++v) load_vec(temp(1 + u * n + v), ptr[reg_dst_ + u * step + v * in_vbytes()], v);
        for (int ir = 0; ir < std::max<int>(1, desc_.kh); ++ir)
            for (int i = 0; i < group(); ++i) {
                set_index(i);
                for (int j = 0; j < u_count + taps() - 1; ++j)
                    for (int v = 0; v < n; ++v) {
                        load_src(ptr[reg_src_ + ir * int64_t(desc_.row_disp) + j * step + v * in_vbytes()], v, i);
                        for (int u = std::max(0, j - taps() + 1); u <= std::min(j, u_count - 1); ++u)
                            mac(acc(ir * desc_.m + (j - u) * group() + i, v), temp(1 + u * n + v), temp(0));
                    }
            }
    }
    void pixel_body() override {
        for (int v = 0; v < vecs(); ++v) load_vec(temp(1 + v), ptr[reg_dst_ + v * in_vbytes()], v);
        for (int i = 0; i < group(); ++i) {
            set_index(i);
            for (int tr = 0; tr < rows() / group(); ++tr) {  // (kernel row, tap)
                const int ir = tr / taps(), k = tr % taps();
                const int64_t disp = ir * int64_t(desc_.row_disp) + k * int64_t(desc_.tap_disp);
                for (int v = 0; v < vecs(); ++v) {
                    const Xbyak::Address s = ptr[reg_src_ + disp + v * in_vbytes()];
                    const Xbyak::Xmm a = acc(ir * desc_.m + k * group() + i, v);
                    if (in_dt() == data_type::f32 && group() == 1) {
                        mac_mem(a, temp(1 + v), s, v, temp(0));
                    } else {  // widened and / or permuted through temp(0); a masked tail lane reads 0
                        load_src(s, v, i);
                        mac(a, temp(1 + v), temp(0));
                    }
                }
            }
        }
    }
    // Lane groups of 8: the index of input channel i. Clobbers r12 (free
    // outside the flush in a depthwise kernel, which never stages).
    void set_index(int i) {
        if (VecIsa::lane_group_needs_index(group())) vec_.lane_group_index(index_reg(), reg_scratch_, group(), i);
    }
    // temp(0) := src vector v at s, widened, permuted to the group's channel
    // i: whole f32 vectors straight from memory, others loaded first.
    void load_src(const Xbyak::Address& s, int v, int i) {
        if (group() > 1 && in_dt() == data_type::f32 && !is_tail(v)) {
            vec_.permute_lane_group(temp(0), s, group(), i, index_reg());
            return;
        }
        load_vec(temp(0), s, v);
        if (group() > 1) vec_.permute_lane_group(temp(0), temp(0), group(), i, index_reg());
    }
};

}  // namespace

std::shared_ptr<const WeightsKernel> make_dw_weights_kernel(const WeightsKernelDesc& d) {
    auto k = std::make_shared<DwWeightsKernel>(d);
    k->create();
    return k;
}

}  // namespace convgrad::detail
