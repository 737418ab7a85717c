// Depthwise weight-gradient generator (g == IC == OC, and lane groups of
// G = IC/g == OC/g channels): vectorises over channels. Tile = n channel
// vectors x `taps` consecutive kw taps, so each diff_dst vector loaded is
// used by `taps` FMAs; with desc.window (W stride
// 1 or 2) each src vector loaded is used by every tap that reads it within
// a block of pixels too. With desc.edges a row runs only the (kernel row,
// tap) pairs its mask names: the interior of a chunk and its edges in one
// call, one flush (see WeightsSkeleton::gate_row). With desc.row_px each
// row entry is a whole output row, one body with its W edges compiled in
// (its interior columns a loop on long rows, see row_pass() below); with
// desc.row_block, R output rows
// (each src vector loaded once for all of them). bf16 on avx512_core_bf16
// (desc.dot): vdpbf16ps over pairs of consecutive output pixels of a row
// (see pairs() below).
#include "jit/bwd_weights_kernel.hpp"
#include "jit/bwd_weights_skeleton.hpp"

#include <algorithm>
#include <utility>
#include <vector>

namespace convgrad::detail {
namespace {

// Whole rows at least this long loop over their interior columns (row_pass).
constexpr int kRowLoopMinPixels = 32;

class DwWeightsKernel final : public WeightsSkeleton {
public:
    explicit DwWeightsKernel(const WeightsKernelDesc& d) : WeightsSkeleton(d) {}

private:
    // n diff_dst vectors into temp(1..n); for kernel row ir, tap k, vector
    // v: one multiply-add with the src vector at ir * row_disp + k *
    // tap_disp + v * vbytes (the planner keeps it within 32 bits) (through
    // temp(0) on AVX2). With bf16 pairs each lane is one channel of two
    // images in both operands, so vdpbf16ps sums exactly the right products.
    // 16-bit inputs (in_dt) are widened as they are loaded (bf16 with
    // desc.dot 2: zero-extended, multiplied on vdpbf16ps).
    // A block of window() pixels (W stride s, dilation 1: pixel u's tap k
    // reads src vector s*u + k of the kernel row): the block's diff_dst
    // vectors in temp(1 + u*n + v); per kernel row, each of its
    // s*(window-1)+taps src vectors is loaded once (into temp(0)) and
    // multiplied into every (pixel, tap) pair that reads it.
    // Lane groups (G > 1): all of the above once per input channel i of
    // the group, each src vector permuted as it is loaded; tile row
    // (tap k, i) is k * G + i.
    int block_pixels() const override {
        return desc_.window > 1 ? (pairs() ? 2 : 1) * desc_.window : 1;
    }
    int64_t block_step() const override { return desc_.tap_disp; }
    int w_stride() const { return std::max<int>(1, desc_.w_stride); }
    int64_t block_src_step() const override { return w_stride() * int64_t(desc_.tap_disp); }
    int body_pixels() const override { return pairs() ? 2 : 1; }
    int group() const { return desc_.lane_group; }
    int taps() const { return desc_.m / group(); }
    Xbyak::Xmm index_reg() const { return temp(std::max<int>(1, desc_.window) * vecs() + 1); }
    void block_body() override {
        if (pairs()) {
            pair_block_body();
            return;
        }
        const int u_count = block_pixels(), n = vecs();
        const int64_t step = desc_.tap_disp;
        for (int u = 0; u < u_count; ++u)
            for (int v = 0; v < n; ++v) load_vec(temp(1 + u * n + v), ptr[reg_dst_ + u * step + v * in_vbytes()], v);
        for (int ir = 0; ir < std::max<int>(1, desc_.kh); ++ir)
            gate_row(ir, [&] {
                for (int i = 0; i < group(); ++i) {
                    set_index(i);
                    const int s = w_stride();
                    for (int j = 0; j < s * (u_count - 1) + taps(); ++j)
                        for (int v = 0; v < n; ++v) {
                            load_src(ptr[reg_src_ + ir * int64_t(desc_.row_disp) + j * step + v * in_vbytes()], v, i);
                            for (int u = 0; u < u_count; ++u) {  // (u, k) with s * u + k = j
                                const int k = j - s * u;
                                if (k >= 0 && k < taps()) mac(acc(ir * desc_.m + k * group() + i, v), temp(1 + u * n + v), temp(0));
                            }
                        }
                }
            });
    }
    void pixel_body() override {
        if (pairs()) {
            pair_pixel_body(true);
            return;
        }
        for (int v = 0; v < vecs(); ++v) load_vec(temp(1 + v), ptr[reg_dst_ + v * in_vbytes()], v);
        for (int i = 0; i < group(); ++i) {
            set_index(i);
            for (int ir = 0; ir < std::max<int>(1, desc_.kh); ++ir)
                gate_row(ir, [&] {
                    for (int k = 0; k < taps(); ++k)
                        gate_pair(ir, k, [&] { tap_body(ir, k, i); });
                });
        }
    }
    // Pixel body of (kernel row ir, tap k, group channel i).
    void tap_body(int ir, int k, int i) {
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
    // ---- W pixel pairs (desc.dot; bf16 on avx512_core_bf16, G = 1) ----
    // Each dword lane c holds channel c of two consecutive output pixels of
    // a row (low half the first), in diff_dst and in src alike, so one
    // vdpbf16ps adds both pixels' products: diff_dst pair (p, p+1) times,
    // for tap k, src pair (sp + k, s(p + 1) + k) at W stride s (src_step /
    // dst_step apart; in a block, tap_disp apart per src pixel). vpermt2w interleaves two 16-channel loads by the word
    // index pair_index(); a row's odd last pixel pairs with zeros
    // (vpmovzxwd). Lanes stay in channel order: the flush is the f32 one.
    bool pairs() const { return dot(); }
    Xbyak::Zmm pair_second() const { return Xbyak::Zmm(index_reg().getIdx()); }
    Xbyak::Zmm pair_index() const { return Xbyak::Zmm(index_reg().getIdx() + 1); }
    // Register of src vector j in a block's ring of w_stride() + 1: temp(0),
    // pair_second(), then the registers after pair_index().
    Xbyak::Zmm ring_reg(int j) const {
        const int i = j % (w_stride() + 1);
        return Xbyak::Zmm(i == 0 ? temp(0).getIdx() : i == 1 ? pair_second().getIdx() : index_reg().getIdx() + i);
    }
    // 16 bf16 channels (vector v: the tail's live lanes) of a pixel at `a`
    // into the low half of r (the rest zeros).
    void load_words(const Xbyak::Xmm& r, const Xbyak::Address& a, int v) {
        const Xbyak::Ymm y(r.getIdx());
        if (is_tail(v))
            vmovdqu16(y | Xbyak::util::k1 | T_z, a);
        else
            vmovdqu16(y, a);
    }
    // r := the pairs (a[c], b[c]) of vector v; no b: (a[c], 0).
    void load_pair(const Xbyak::Xmm& r, const Xbyak::Address& a, const Xbyak::Address* b, int v) {
        const Xbyak::Zmm z(r.getIdx());
        if (!b) {
            if (is_tail(v))
                vpmovzxwd(z | Xbyak::util::k1 | T_z, a);
            else
                vpmovzxwd(z, a);
            return;
        }
        load_words(z, a, v);
        load_words(pair_second(), *b, v);
        vpermt2w(z, pair_index(), pair_second());
    }
    // Two pixels (or the odd last one: `both` false) at reg_src_ / reg_dst_.
    void pair_pixel_body(bool both) {
        for (int v = 0; v < vecs(); ++v) {
            const Xbyak::Address second = ptr[reg_dst_ + reg_dst_step_ + v * in_vbytes()];
            load_pair(temp(1 + v), ptr[reg_dst_ + v * in_vbytes()], both ? &second : nullptr, v);
        }
        for (int ir = 0; ir < std::max<int>(1, desc_.kh); ++ir)
            gate_row(ir, [&] {
                for (int k = 0; k < taps(); ++k)
                    gate_pair(ir, k, [&] {
                        const int64_t disp = ir * int64_t(desc_.row_disp) + k * int64_t(desc_.tap_disp);
                        for (int v = 0; v < vecs(); ++v) {
                            const Xbyak::Address second = ptr[reg_src_ + reg_src_step_ + disp + v * in_vbytes()];
                            load_pair(temp(0), ptr[reg_src_ + disp + v * in_vbytes()], both ? &second : nullptr, v);
                            vdpbf16ps(acc(ir * desc_.m + k, v), temp(1 + v), temp(0));
                        }
                    });
            });
    }
    void odd_pixel_body() override { pair_pixel_body(false); }
    // ---- whole rows (desc.row_px) ----
    // Ungated: one pass over the row's src columns inside src, every kernel
    // row per column; gated (kernel rows outside src): a pass per kernel
    // row, each behind its mask test, the row's prefetches first. Row
    // blocks (desc.row_block): one pass over the block's src rows, each
    // behind its mask bit when gated.
    void row_body() override {
        const int kh = std::max<int>(1, desc_.kh);
        if (desc_.row_block > 1) {
            row_pass(0, block_src_rows(), true);
            return;
        }
        if (gate_ == Gate::none) {
            row_pass(0, kh, true);
            return;
        }
        prefetch_pixels(desc_.row_px);
        for (int ir = 0; ir < kh; ++ir) gate_row(ir, [&] { row_pass(ir, ir + 1, false); });
    }
    // Src rows [i0, i1) (kernel rows; in a row block of R output rows, the
    // block's src rows: row i feeds each output row j with kernel row
    // i - h_stride * j in the kernel) over the src columns inside src, in
    // order: column c's src vector (per src row, vector) is loaded once and
    // multiplied into every (output row j, kernel row, pixel u, tap k) with
    // s * u + k = c. A pixel's diff_dst vectors (of every output row) are
    // loaded at its first column and held (in one of (m - 1) / s + 1 slots)
    // until its last; with `prefetch`, its prefetches go with that load
    // (and a row's pixels that read nothing inside src prefetch at the end).
    // At W stride 1 the interior columns (every tap's pixel inside the row
    // and src) repeat with period `taps`: each loads one pixel into the slot
    // the pixel `taps` before it freed. On rows of kRowLoopMinPixels or more
    // those columns run as a loop of one period (r12 counts, the src and
    // diff_dst pointers step a period), so a row's code is its edges and one
    // period, not every column: MobileNetV2 b2 (144 channels, 56x56, row
    // blocks of 2) bf16 was 89 KiB of code (two kernels) and 0.92-1.33 ms
    // of cold op creation, now 9 KiB and 0.11-0.14 ms. Against every column written out (AMD Zen 4, 2
    // threads, mb 32, min of 7): 56-pixel rows 1.02-1.23x (MobileNetV2 b2,
    // MobileNet v1 conv3_1, f16 / bf16), 28 pixels 0.97-1.02x, but 14-pixel
    // f32 row blocks of 7 (conv5_1) 0.79-0.89x: shorter rows stay unrolled.
    void row_pass(int i0, int i1, bool prefetch) {
        const int row = desc_.row_px, s = w_stride(), taps = desc_.m, n = vecs();
        const int rb = std::max<int>(1, desc_.row_block), sh = std::max<int>(1, desc_.h_stride);
        const int kh = std::max<int>(1, desc_.kh);
        const int first = desc_.row_lo, row_end = s * (row - 1) + taps - desc_.row_cut;
        const int64_t px = desc_.tap_disp;  // bytes per pixel, in src and diff_dst alike
        const int slots = row_slots();
        // The periods in a loop (0: none): from column c0 on, `iters` of them,
        // provided the slots repeat (checked on the columns as written out).
        const int c0 = std::max(first, taps - 1);
        int iters = s == 1 && row >= kRowLoopMinPixels ? (std::min(row, row_end) - c0) / taps : 0;
        const std::vector<int> written = pixel_slots(row, row_end);
        if (iters >= 2) {
            const int shift = (iters - 1) * taps;
            const std::vector<int> looped = pixel_slots(row - shift, row_end - shift);
            for (int q = std::max(0, c0 - taps + 1); q < row - shift && iters > 0; ++q) {
                // Pixel q of the loop's code is pixel q + i * taps in period i
                // (q in or before the period), q + shift after the loop.
                const int last = q < c0 + taps ? iters - 1 : 0;
                for (int i = q < c0 + taps ? 1 : 0; i <= last; ++i)
                    if (written[static_cast<size_t>(q + i * taps)] != written[static_cast<size_t>(q)]) iters = 0;
                if (looped[static_cast<size_t>(q)] != written[static_cast<size_t>(q > c0 ? q + shift : q)]) iters = 0;
            }
        }
        if (iters < 2) iters = 0;
        const int shift = iters ? (iters - 1) * taps : 0;
        const int ow = row - shift, end = row_end - shift;
        const std::vector<int> slot_of = shift ? pixel_slots(ow, end) : written;
        // The registers, once (each is an Xbyak object built per use otherwise).
        std::vector<Xbyak::Xmm> dd_regs, acc_regs;
        for (int i = 0; i < rb * slots * n; ++i) dd_regs.push_back(temp(1 + i));
        for (int i = 0; i < kh * taps * n; ++i) acc_regs.push_back(acc(i / n, i % n));
        auto dd = [&](int j, int slot, int v) { return dd_regs[static_cast<size_t>((j * slots + slot) * n + v)]; };
        auto acc_of = [&](int r, int v) { return acc_regs[static_cast<size_t>(r * n + v)]; };
        const Xbyak::Xmm src_reg = temp(0);
        std::vector<bool> loaded(static_cast<size_t>(ow), false);
        std::vector<std::vector<std::pair<int, int>>> rows_of(static_cast<size_t>(i1));  // src row: (output row j, kernel row)
        for (int i = i0; i < i1; ++i)
            for (int j = 0; j < rb; ++j)
                if (i - sh * j >= 0 && i - sh * j < kh) rows_of[static_cast<size_t>(i)].push_back({j, i - sh * j});
        std::vector<std::pair<int, int>> uses;  // (pixel, tap) of a column
        int prefetched = 0;
        Xbyak::Label period;
        for (int c = first; c < end; ++c) {
            if (iters && c == c0) {
                mov(reg_scratch_.cvt32(), iters);
                L(period);
            }
            column_uses(c, ow, uses);
            for (const auto& [u, k] : uses) {
                if (loaded[static_cast<size_t>(u)]) continue;
                loaded[static_cast<size_t>(u)] = true;
                if (prefetch) {
                    prefetch_pixels(rb);
                    ++prefetched;
                    if (desc_.la_dst)  // a streamed pass: this pixel's diff_dst lines rows ahead
                        for (int b = 0; b < n * in_vbytes(); b += 64)
                            prefetcht0(ptr[reg_dst_ + desc_.la_dst + u * px + b]);
                }
                for (int j = 0; j < rb; ++j)
                    for (int v = 0; v < n; ++v)
                        load_vec(dd(j, slot_of[static_cast<size_t>(u)], v),
                                 ptr[reg_dst_ + j * int64_t(desc_.dst_row_disp) + u * px + v * in_vbytes()], v);
            }
            if (prefetch && desc_.la_dst && !uses.empty())  // ... and this column's new src rows' lines
                for (int j = 0; j < std::min(sh, kh); ++j)
                    for (int b = 0; b < n * in_vbytes(); b += 64)
                        prefetcht0(ptr[reg_src_ + desc_.la_src - j * int64_t(desc_.row_disp) + c * px + b]);
            for (int i = i0; i < i1 && !uses.empty(); ++i) {
                const std::vector<std::pair<int, int>>& rows = rows_of[static_cast<size_t>(i)];
                if (rows.empty()) continue;  // between kernel rows (H stride above the kernel height)
                Xbyak::Label skip;
                if (rb > 1 && gate_ != Gate::none) {
                    test(reg_mask_, static_cast<uint32_t>(1u << i));
                    jz(skip, T_NEAR);
                }
                for (int v = 0; v < n; ++v) {
                    const Xbyak::Address a = ptr[reg_src_ + i * int64_t(desc_.row_disp) + c * px + v * in_vbytes()];
                    if (rows.size() == 1 && uses.size() == 1 && in_dt() == data_type::f32) {  // one product reads memory
                        const auto [u, k] = uses[0];
                        mac_mem(acc_of(rows[0].second * taps + k, v), dd(rows[0].first, slot_of[static_cast<size_t>(u)], v),
                                a, v, src_reg);
                        continue;
                    }
                    load_vec(src_reg, a, v);
                    for (const auto& [j, ir] : rows)
                        for (const auto& [u, k] : uses)
                            mac(acc_of(ir * taps + k, v), dd(j, slot_of[static_cast<size_t>(u)], v), src_reg);
                }
                L(skip);
            }
            if (iters && c == c0 + taps - 1) {  // the period's end: step on, then stay a period short of the last
                add(reg_src_, static_cast<uint32_t>(taps * px));
                add(reg_dst_, static_cast<uint32_t>(taps * px));
                dec(reg_scratch_.cvt32());
                jnz(period, T_NEAR);
                sub(reg_src_, static_cast<uint32_t>(taps * px));
                sub(reg_dst_, static_cast<uint32_t>(taps * px));
            }
        }
        if (shift) {  // back to the row's first pixel (a pass per kernel row reads them again)
            sub(reg_src_, static_cast<uint32_t>(shift * px));
            sub(reg_dst_, static_cast<uint32_t>(shift * px));
        }
        if (prefetch) prefetch_pixels(rb * (ow - prefetched));
    }
    // The diff_dst slots of a whole row: the pixels a src column feeds.
    int row_slots() const { return (desc_.m - 1) / w_stride() + 1; }
    // The (pixel, tap) pairs of column c in a row of `row` pixels: s * u + k = c.
    void column_uses(int c, int row, std::vector<std::pair<int, int>>& uses) const {
        const int s = w_stride();
        uses.clear();
        for (int k = c % s; k < desc_.m; k += s)
            if ((c - k) / s < row && c >= k) uses.push_back({(c - k) / s, k});
    }
    // The diff_dst slot of each pixel of a row of `row` pixels over its
    // columns [row_lo, end) (see row_pass): the first free one at the
    // pixel's first column, free again after its last.
    std::vector<int> pixel_slots(int row, int end) const {
        const int slots = row_slots();
        std::vector<int> slot_of(static_cast<size_t>(row), -1);
        std::vector<bool> busy(static_cast<size_t>(slots), false);
        std::vector<std::pair<int, int>> uses;
        for (int c = desc_.row_lo; c < end; ++c) {
            column_uses(c, row, uses);
            for (const auto& [u, k] : uses) {
                if (slot_of[static_cast<size_t>(u)] >= 0) continue;
                const int slot = static_cast<int>(std::find(busy.begin(), busy.end(), false) - busy.begin());
                if (slot == slots) throw error("JIT kernel " + name() + ": whole row ran out of diff_dst slots");
                busy[static_cast<size_t>(slot)] = true;
                slot_of[static_cast<size_t>(u)] = slot;
            }
            for (const auto& [u, k] : uses)  // pixels whose last column this is
                if (std::min(w_stride() * u + desc_.m, end) - 1 == c) busy[static_cast<size_t>(slot_of[static_cast<size_t>(u)])] = false;
        }
        return slot_of;
    }
    // A block of `window` pairs (2 x window pixels, W stride s): the
    // diff_dst pairs D(u) (pixels 2u, 2u+1) in temp(1 + u*n + v); per kernel
    // row and vector, the row's src vectors s_0, s_1, ... are loaded once
    // each (into a ring of s + 1 registers), and pair P_j = (s_j, s_{j+s})
    // feeds every (pair u, tap k) with 2su + k = j. At s = 2 and 3 taps a
    // P_j with j % 4 == 3 feeds nothing and is never built.
    void pair_block_body() {
        const int w = desc_.window, n = vecs(), s = w_stride();
        const int64_t step = desc_.tap_disp;
        for (int u = 0; u < w; ++u)
            for (int v = 0; v < n; ++v) {
                const Xbyak::Address second = ptr[reg_dst_ + (2 * u + 1) * step + v * in_vbytes()];
                load_pair(temp(1 + u * n + v), ptr[reg_dst_ + 2 * u * step + v * in_vbytes()], &second, v);
            }
        auto used = [&](int j) {  // some (u, k) reads P_j
            for (int k = 0; k < taps(); ++k)
                if (j - k >= 0 && (j - k) % (2 * s) == 0 && (j - k) / (2 * s) < w) return true;
            return false;
        };
        for (int ir = 0; ir < std::max<int>(1, desc_.kh); ++ir)
            gate_row(ir, [&] {
                for (int v = 0; v < n; ++v) {
                    auto src_at = [&](int j) {
                        return ptr[reg_src_ + ir * int64_t(desc_.row_disp) + j * step + v * in_vbytes()];
                    };
                    for (int j = 0; j <= 2 * s * (w - 1) + taps() - 1; ++j) {
                        if (!used(j)) continue;
                        if (!used(j - s)) load_words(ring_reg(j), src_at(j), v);  // else loaded as P_{j-s}'s second
                        load_words(ring_reg(j + s), src_at(j + s), v);
                        vpermt2w(ring_reg(j), pair_index(), ring_reg(j + s));  // ring_reg(j) := P_j
                        for (int k = j % (2 * s); k < taps(); k += 2 * s) {
                            const int u = (j - k) / (2 * s);
                            if (u >= 0 && u < w) vdpbf16ps(acc(ir * desc_.m + k, v), temp(1 + u * n + v), ring_reg(j));
                        }
                    }
                }
            });
    }
    // Pairs: the word index of vpermt2w (word 2c from the first source's
    // word c, word 2c + 1 from the second's: table index 32 + c), once.
    // Clobbers r12.
    void prologue() override {
        if (!pairs()) return;
        if (static_cast<Isa>(desc_.isa) < Isa::avx512_core_bf16 || group() > 1 || in_dt() != data_type::bf16)
            throw error("JIT kernel " + name() + ": W pairs need bf16 depthwise on avx512_core_bf16");
        static const uint16_t kIndex[32] = {0, 32, 1, 33, 2,  34, 3,  35, 4,  36, 5,  37, 6,  38, 7,  39,
                                            8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
        mov(reg_scratch_, reinterpret_cast<uintptr_t>(kIndex));
        vmovdqu16(pair_index(), ptr[reg_scratch_]);
    }

    // Lane groups of 8: the index of input channel i. Clobbers r12 (free
    // outside the flush in a depthwise kernel, which never stages).
    void set_index(int i) {
        if (VecIsa::lane_group_needs_index(group())) vec_.lane_group_index(index_reg(), reg_scratch_, group(), i);
    }
    // temp(0) := src vector v at s, widened, permuted to the group's channel
    // i: whole f32 vectors straight from memory, others loaded first.
    void load_src(const Xbyak::Address& s, int v, int i) {
        // (Groups of up to 4 permute by an immediate: no index register to name.)
        const Xbyak::Xmm index = VecIsa::lane_group_needs_index(group()) ? index_reg() : temp(0);
        if (group() > 1 && in_dt() == data_type::f32 && !is_tail(v)) {
            vec_.permute_lane_group(temp(0), s, group(), i, index);
            return;
        }
        load_vec(temp(0), s, v);
        if (group() > 1) vec_.permute_lane_group(temp(0), temp(0), group(), i, index);
    }
};

}  // namespace

std::shared_ptr<const WeightsKernel> make_dw_weights_kernel(const WeightsKernelDesc& d) {
    auto k = std::make_shared<DwWeightsKernel>(d);
    k->create();
    return k;
}

}  // namespace convgrad::detail
