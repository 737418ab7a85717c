// The weight gradient (ConvolutionBackwardWeights, ConvTransposeBackwardWeights)
// of bf16 on AMX tiles (jit/bwd_weights_amx_kernel.hpp): any kernel,
// stride, dilation and padding, 1D to 3D, any weights layout; a grouped
// layer whole, each block of 32 input channels with only the blocks of 32
// output channels that hold its groups' (amx_group_blocks; the products
// across groups are computed and not stored). NXC activations are staged
// as they are; NCX ones are transposed to NXC in scratch a chunk of
// images at a time, as the chunk starts (amx_takes_ncx: ResNet-50's 3x3
// layers 1.84-2.68x the vector kernels' NCX paths, docs/PERFORMANCE.md).
//
// Per tap, diff_weights[tap] is a product of src (channel-major: input
// channels × positions) with diff_dst (positions × output channels) over
// the output positions. src is staged channel-major in blocks of 32
// channels, each channel's positions in one run, and diff_dst in pairs of
// adjacent positions in blocks of 32 oc, so that a tap is a constant
// shift along src's runs:
//  - unit strides along H and W ("planes"): a run is a whole plane padded
//    with zeros (rows of the padded width, the pads written out), the
//    output positions flattened with the same row pitch (the positions
//    past a row's end have diff_dst 0), and a tap (kh, kw) the shift
//    kh·dil·pitch + kw·dil;
//  - otherwise ("rows"): a run is one input row, split into its W stride
//    phases, an output row's positions (rounded up to 32, diff_dst 0 past
//    the end) and a tap kw the phase and shift of kw·dil; a tap kh reads
//    the input row oh·s - pad + kh·dil, and rows outside src are skipped;
//  - rows narrower than a step ("packed rows"): a run holds several output
//    rows, OW + the widest tap shift of a phase apart (diff_dst 0 between),
//    and its src a run per kh: each W phase holds the pack's input rows
//    oh·s - pad + kh·dil at the same pitch (rows outside src: zeros), so a
//    tap kw is again a phase and shift. ResNet-50 v1.5's res5a_branch2b (7
//    wide) steps over 64 positions for 49 where one row a run stepped over
//    224 (a row of 7 in a step of 32).
// Along D (and along H for rows), input rows outside src are skipped, not
// multiplied.
//  - a 1x1 kernel ("flat", any stride and padding): one run over the
//    output positions of all the chunk's images, in blocks of 32 channels
//    × 32 positions (each tile load one piece of 1 KiB, where the long
//    runs above spread it over 16 rows), src subsampled as it is staged
//    (positions reading padding: zeros), no position wasted but the last
//    block's tail.
// Staging takes 32 positions at a time for all channel blocks, so src and
// diff_dst are read in whole pixels: src by 32 x 32 transposes in
// registers (writing the zeros of the padding too), diff_dst by pair
// shuffles. (Per channel block, 64 bytes of each pixel a pass, diff_dst
// pairing was 19 % of res2a_branch1's profile on the Intel AMX guest.)
//
// Work: chunks of images whose staged src and diff_dst fit kChunkBytes;
// each chunk's items (input-channel block, oc block, tap) split statically
// over the threads, each a kernel call over the chunk's runs that adds to
// its f32 block of the accumulator. Every accumulator element is summed
// by one item a chunk, chunks in order, so the result does not depend on
// the thread count. Finally the accumulator is rounded to bf16 into the
// user's weights.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "jit/bwd_data_amx_kernel.hpp"
#include "jit/bwd_data_cvt.hpp"
#include "jit/bwd_weights_amx_kernel.hpp"
#include "ops/executor.hpp"
#include "ops/parallel.hpp"
#include "ops/problem.hpp"
#include "ops/scratch.hpp"
#include "ops/transpose.hpp"

namespace convgrad::detail {
namespace {

// Staged src and diff_dst a chunk of images may take (both are read once
// for each item), unless its images hold fewer than kMinSteps steps of
// 32 positions a run: a call loads and stores its accumulators once, and
// small planes (ResNet-50's 7x7: 2 steps a plane) would make that most of
// its work.
constexpr int64_t kChunkBytes = 1 << 20;
constexpr int64_t kMinSteps = 128;
constexpr int64_t kBlock = 32;  // channels a block, positions a step
// A layer takes the tiles when at least this share of their products is
// useful: amx_used_share (channel tails; the products across groups)
// times position_share (rows padded to 32 positions, pad columns). bf16,
// mb 32, 2 threads, against the vector kernels (Intel AMX guest,
// tools/sweep_ab.py --rounds=3 --min): dense 3x3 16 -> 16 at 112x112
// (0.25) 0.34x, strided to 56 wide (0.22) 0.14x, 64 -> 16 (0.48) 0.81x,
// 16 -> 64 (0.48) 1.18x, 24 -> 24 (0.54) 1.22x; strided rows 7, 8 and 14
// wide (0.22-0.44) 0.64-0.99x, 17 and 28 wide (0.53, 0.88) 1.05-1.25x.
// Grouped: ResNeXt-50 conv5 (groups of 32 at 7x7, 0.78) 1.84-2.19x, conv4
// (16 at 14x14, 0.44) 1.22x; 0.39-0.47 (groups of 16 at 7x7 to 28x28, 16
// strided to 28 wide) 0.67-0.95x; groups of 8 (0.19-0.23) 0.14-0.97x.
// Groups of 32-64 at 28x28-56x56, whole against group by group: 1.00-1.36x.
// (The strided rows above ran one to a run; packed, the layers of 7-17
// wide rows have 0.67-0.77 and ran 1.25-3.6x the vector kernels.)
constexpr double kAmxMinShare = 0.5;
// 1x1 layers of fewer channels a group either way are left to the vector
// kernels: 16 -> 96-128 and 32 -> 16 or 128 -> 16 at 28x28-112x112
// 0.36-0.60x, 24 -> 144 and 96 -> 24 0.75-0.87x; 64 -> 384 and 80 -> 480
// at 14x14 1.37-1.56x, the 7x7 heads and projections 1.8-3.0x
// (EfficientNet-B0, MobileNetV2; same measurements).
constexpr int64_t kAmxMinChannels1x1 = 32;
// Strided rows packed several to a run where that raises the share of
// output positions at least this much, a run up to kMaxPackSteps steps
// (both chosen, not tuned: 11 strided layers of 7-17 wide rows ran packed
// 1.07-4.05x one row a run but one, 0.88x before a short last pack was
// counted in the choice; docs/PERFORMANCE.md).
constexpr double kPackGain = 1.25;
constexpr int64_t kMaxPackSteps = 4;
// Halves (groups of 16 or fewer) have a share of their own: of mb 32
// RegNetX / RegNetY / ResNeXt-50 3x3 layers (2 threads, tools/sweep_ab.py
// --rounds=3 --min, CONVGRAD_AMX=all against the vector kernels), groups
// of 16 at 7x7-28x28 (0.77-0.88) 1.14-1.92x, groups of 8 at 14x14 and
// 28x28 (0.44-0.45) 1.25-1.52x, at 7x7 (0.38) 0.81x, groups of 4 (0.23)
// 0.84x. Strided layers (rows) stage four times the src a product there:
// 0.41-0.88x, so they stay on the vector kernels.
constexpr double kAmxMinShareHalves = 0.4;

// One step of staged diff_dst: the 32 positions px (each at its channel
// 0; null: zeros) in pairs, out[ob·block + 64·k + 2c + h] = px[2k + h][32·ob
// + c] for each block ob of 32 channels (zeros past `channels`). Pixel by
// pixel, all blocks at once: diff_dst is read in whole pixels, in order.
__attribute__((target("avx512f,avx512bw"))) void pair_step(const uint16_t* const* px, int64_t channels,
                                                            int64_t block, uint16_t* out) {
    struct Index {
        alignas(64) uint16_t lo[32], hi[32];
    };
    static const Index index = [] {
        Index x{};
        for (int i = 0; i < 32; ++i) {
            x.lo[i] = static_cast<uint16_t>((i % 2 ? 32 : 0) + i / 2);
            x.hi[i] = static_cast<uint16_t>((i % 2 ? 32 : 0) + 16 + i / 2);
        }
        return x;
    }();
    const __m512i lo = _mm512_load_si512(index.lo), hi = _mm512_load_si512(index.hi);
    for (int64_t k = 0; k < kBlock; k += 2)
        for (int64_t c0 = 0; c0 < channels; c0 += kBlock) {
            const int64_t n = channels - c0;
            const __mmask32 m = n >= 32 ? ~__mmask32(0) : (__mmask32(1) << n) - 1;
            const __m512i a = px[k] ? _mm512_maskz_loadu_epi16(m, px[k] + c0) : _mm512_setzero_si512();
            const __m512i b = px[k + 1] ? _mm512_maskz_loadu_epi16(m, px[k + 1] + c0) : _mm512_setzero_si512();
            uint16_t* o = out + c0 / kBlock * block + k * kBlock;
            _mm512_storeu_si512(o, _mm512_permutex2var_epi16(a, lo, b));
            _mm512_storeu_si512(o + 32, _mm512_permutex2var_epi16(a, hi, b));
        }
}

// 32 positions px (each at its channel 0; null: zeros) of 16-bit elements,
// transposed: out[ob·block + c·row + k] = px[k][32·ob + c] for k < np, each
// block ob of 32 channels (channels past `channels`: zeros), 32 rows a
// block. A 32 x 32 transpose in registers (in-lane 8 x 8 word transposes,
// then 4 x 4 transposes of 128-bit lanes), src read in whole pixels.
__attribute__((target("avx512f,avx512bw"))) void transpose_step(const uint16_t* const* px, int64_t np,
                                                                 int64_t channels, int64_t block, int64_t row,
                                                                 uint16_t* out) {
    const __mmask32 store = np >= 32 ? ~__mmask32(0) : (__mmask32(1) << np) - 1;
    for (int64_t c0 = 0; c0 < channels; c0 += kBlock) {
        const int64_t n = channels - c0;
        const __mmask32 m = n >= 32 ? ~__mmask32(0) : (__mmask32(1) << n) - 1;
        __m512i d[4][8];  // group g of 8 positions, column j: lane L holds channel 8L + j
        for (int g = 0; g < 4; ++g) {
            __m512i a[8], b[8];
            for (int i = 0; i < 8; ++i) {
                const int k = 8 * g + i;
                a[i] = k < np && px[k] ? _mm512_maskz_loadu_epi16(m, px[k] + c0) : _mm512_setzero_si512();
            }
            for (int i = 0; i < 4; ++i) {
                b[2 * i] = _mm512_unpacklo_epi16(a[2 * i], a[2 * i + 1]);
                b[2 * i + 1] = _mm512_unpackhi_epi16(a[2 * i], a[2 * i + 1]);
            }
            const int pairs[4][2] = {{0, 2}, {1, 3}, {4, 6}, {5, 7}};
            for (int i = 0; i < 4; ++i) {
                a[2 * i] = _mm512_maskz_unpacklo_epi32(0xffff, b[pairs[i][0]], b[pairs[i][1]]);
                a[2 * i + 1] = _mm512_maskz_unpackhi_epi32(0xffff, b[pairs[i][0]], b[pairs[i][1]]);
            }
            for (int i = 0; i < 4; ++i) {
                d[g][2 * i] = _mm512_maskz_unpacklo_epi64(0xff, a[i], a[i + 4]);
                d[g][2 * i + 1] = _mm512_maskz_unpackhi_epi64(0xff, a[i], a[i + 4]);
            }
        }
        uint16_t* o = out + c0 / kBlock * block;
        for (int j = 0; j < 8; ++j) {
            const __m512i t0 = _mm512_maskz_shuffle_i32x4(0xffff, d[0][j], d[1][j], 0x44);
            const __m512i t1 = _mm512_maskz_shuffle_i32x4(0xffff, d[0][j], d[1][j], 0xee);
            const __m512i t2 = _mm512_maskz_shuffle_i32x4(0xffff, d[2][j], d[3][j], 0x44);
            const __m512i t3 = _mm512_maskz_shuffle_i32x4(0xffff, d[2][j], d[3][j], 0xee);
            _mm512_mask_storeu_epi16(o + j * row, store, _mm512_maskz_shuffle_i32x4(0xffff, t0, t2, 0x88));
            _mm512_mask_storeu_epi16(o + (8 + j) * row, store, _mm512_maskz_shuffle_i32x4(0xffff, t0, t2, 0xdd));
            _mm512_mask_storeu_epi16(o + (16 + j) * row, store, _mm512_maskz_shuffle_i32x4(0xffff, t1, t3, 0x88));
            _mm512_mask_storeu_epi16(o + (24 + j) * row, store, _mm512_maskz_shuffle_i32x4(0xffff, t1, t3, 0xdd));
        }
    }
}

class AmxWeightsExecutor final : public Executor {
public:
    explicit AmxWeightsExecutor(const Problem& p);
    void run(const void* in0, const void* in1, void* out) const override;
    std::string describe() const override;
    int threads() const override { return op_threads(p_); }
    // The share of the positions the kernel steps over that are output
    // positions (the rest: row ends padded to a step, a plane's pad columns).
    double position_share() const {
        const double steps = flat_ ? double(flat_steps(chunk_)) / double(chunk_) : double(b_runs_ * steps_);
        return double(p_.out[1] * p_.out[2]) / (steps * kBlock);
    }
    bool halves() const { return halves_; }
    bool rows() const { return !planes_ && !flat_; }
    // The share of the tile products that are useful: channel tails and
    // the products across groups (amx_used_share; halves: 16 x 16 tiles).
    double used_share() const { return halves_ ? halves_used_share(p_) : amx_used_share(p_, ob0_, nob_); }
    // Groups of 16 or fewer channels on 16 x 16 tiles (halves_).
    static bool takes_halves(const Problem& p) { return p.g > 1 && p.icg == p.ocg && 16 % p.icg == 0; }
    static double halves_used_share(const Problem& p) {
        return double(p.ic()) * double(p.ocg) / (double(div_up(p.ic(), 16)) * 256.0);
    }

private:
    // Stage a chunk of nc images (src / dd: NXC, at the chunk's first image).
    void stage_src(const char* src, int64_t nc, char* out) const;
    void stage_dd(const char* dd, int64_t nc, char* out) const;
    // The runs of row key `key` (kd, or kd·KH + kh for rows) in a chunk
    // of nc images: pairs (A byte offset, B byte offset).
    std::vector<int64_t> runs(int64_t key, int64_t nc) const;
    void round_out(const float* acc, char* out) const;
    // "ocb_", or for groups "nob_ (its groups') of ocb_"
    std::string blocks_text() const {
        return p_.g == 1 ? std::to_string(ocb_) : std::to_string(nob_) + " (its groups') of " + std::to_string(ocb_);
    }

    Problem p_;         // on NXC activations
    bool ncx_ = false;  // the user's are NCX: transposed to NXC first
    bool planes_ = false;
    bool flat_ = false;
    int64_t icp_ = 0, ocp_ = 0, icb_ = 0, ocb_ = 0;
    // Output blocks each input block takes (amx_group_blocks: all of them
    // for one group), from ob0_[input block]; acc_w_ = 32·nob_.
    int64_t nob_ = 0, acc_w_ = 0;
    std::vector<int64_t> ob0_;
    int64_t pitch_ = 0;      // planes: padded row width
    int64_t colsp_ = 0;      // rows: columns a W phase
    // Rows packed (pack_ > 1): a run holds pack_ output rows, ppitch_
    // positions apart (OW and the phase's widest tap shift), and an A run
    // is one (pack, kh): its rows' src, each W phase the same layout.
    int64_t pack_ = 1, ppitch_ = 0;
    int64_t a_len_ = 0;      // positions of a staged src run
    int64_t a_runs_ = 0;     // src runs an input plane: 1 (planes), IH, or packs · KH
    int64_t b_runs_ = 0;     // diff_dst runs an output plane: 1 (planes), OH, or packs
    int64_t steps_ = 0;      // steps of 32 positions a run
    int64_t chunk_ = 1;
    std::vector<int64_t> tap_shift_;  // A byte offset of each tap
    // Halves (groups of icg == ocg dividing 16): the half kernels' items are
    // (input block, half, tap set); a tap set is up to 3 consecutive taps
    // of one row key, (first tap, count).
    bool halves_ = false;
    std::vector<std::array<int64_t, 2>> tap_sets_;
    ArrayConverter round_;
    std::shared_ptr<const WeightsAmxKernel> kernel_;
    std::array<std::shared_ptr<const WeightsAmxKernel>, 4> half_kernels_;  // by taps

    void stage_flat_src(const char* src, int64_t nc, char* out) const;
    void stage_flat_dd(const char* dd, int64_t nc, char* out) const;
    int64_t flat_steps(int64_t nc) const { return div_up(nc * p_.out_sp(), kBlock); }
    int64_t row_key(int64_t t) const { return planes_ || flat_ ? t / (p_.k[1] * p_.k[2]) : t / p_.k[2]; }
    void call(const char* a, const char* b, const std::vector<std::vector<int64_t>>& lists, int64_t nc, bool load,
              float* acc, int64_t x) const;

    int64_t a_run_bytes() const { return kBlock * a_len_ * 2; }
    int64_t b_run_bytes() const { return steps_ * kBlock * kBlock * 2; }
    int64_t a_block_bytes(int64_t nc) const {
        return flat_ ? flat_steps(nc) * kBlock * kBlock * 2 : nc * p_.in[0] * a_runs_ * a_run_bytes();
    }
    int64_t b_block_bytes(int64_t nc) const {
        return flat_ ? flat_steps(nc) * kBlock * kBlock * 2 : nc * p_.out[0] * b_runs_ * b_run_bytes();
    }
};

AmxWeightsExecutor::AmxWeightsExecutor(const Problem& p)
    : p_(nxc_view(p)), ncx_(!p.nxc), round_(Isa::avx512_core_bf16, data_type::f32, data_type::bf16) {
    icp_ = div_up(p.ic(), kBlock) * kBlock;
    ocp_ = div_up(p.oc(), kBlock) * kBlock;
    icb_ = icp_ / kBlock;
    ocb_ = ocp_ / kBlock;
    nob_ = amx_group_blocks(p, &ob0_);
    acc_w_ = nob_ * kBlock;
    flat_ = p.k_sp() == 1;
    planes_ = !flat_ && p.stride[1] == 1 && p.stride[2] == 1;
    halves_ = takes_halves(p);
    if (halves_) {
        for (int64_t t = 0; t < p.k_sp();) {
            int64_t n = 1;
            while (n < 3 && t + n < p.k_sp() && row_key(t + n) == row_key(t)) ++n;
            tap_sets_.push_back({t, n});
            half_kernels_[static_cast<size_t>(n)] = get_weights_amx_kernel(WeightsAmxDesc{static_cast<int32_t>(n)});
            t += n;
        }
    } else {
        kernel_ = get_weights_amx_kernel();
    }
    const int64_t ow = p.out[2], kh = p.k[1], kw = p.k[2];
    if (flat_) {
        tap_shift_.push_back(0);
        const int64_t image = p.out_sp() * (icp_ + ocp_) * 2;
        chunk_ = std::clamp<int64_t>(
                std::max(kChunkBytes / std::max<int64_t>(image, 1), div_up(kMinSteps * kBlock, p.out_sp())), 1, p.mb);
        return;
    }
    if (planes_) {
        pitch_ = p.in[2] + p.pad_begin[2] + p.pad_end[2];
        const int64_t rows = p.in[1] + p.pad_begin[1] + p.pad_end[1];
        steps_ = div_up((p.out[1] - 1) * pitch_ + ow, kBlock);
        // The last step's positions past the plane read up to 31 more.
        a_len_ = rows * pitch_ + kBlock;
        a_runs_ = b_runs_ = 1;
    } else {
        const int64_t sw = p.stride[2], shift = (kw - 1) * p.dil[2] / sw;
        // Rows narrower than a step: the pack of rows with the most of its
        // positions output positions (one row unless a pack does
        // kPackGain better), up to kMaxPackSteps steps.
        ppitch_ = ow + shift;
        auto share = [&](int64_t r) {
            return double(p.out[1] * ow) / double(div_up(p.out[1], r) * div_up(r * ppitch_, kBlock) * kBlock);
        };
        for (int64_t r = 2; r <= p.out[1] && div_up(r * ppitch_, kBlock) <= kMaxPackSteps; ++r)
            if (share(r) > share(pack_) * (pack_ == 1 ? kPackGain : 1.0)) pack_ = r;
        if (pack_ == 1) {
            steps_ = div_up(ow, kBlock);
            colsp_ = std::max(shift + steps_ * kBlock, div_up(p.in[2] + p.pad_begin[2], sw));
            a_runs_ = p.in[1];
            b_runs_ = p.out[1];
        } else {
            steps_ = div_up(pack_ * ppitch_, kBlock);
            colsp_ = shift + steps_ * kBlock;
            b_runs_ = div_up(p.out[1], pack_);
            a_runs_ = b_runs_ * kh;
        }
        a_len_ = sw * colsp_;
    }
    // Tap (d, h, w) in (KD, KH, KW) order: a kw tap's shift, then a kernel
    // row's (no divisions a tap: 32x32 kernels have 1024).
    std::vector<int64_t> w_shift(static_cast<size_t>(kw));
    for (int64_t w = 0; w < kw; ++w) {
        const int64_t u = w * p.dil[2];
        w_shift[static_cast<size_t>(w)] = planes_ ? u : u % p.stride[2] * colsp_ + u / p.stride[2];
    }
    tap_shift_.reserve(static_cast<size_t>(p.k_sp()));
    for (int64_t d = 0; d < p.k[0]; ++d)
        for (int64_t h = 0; h < kh; ++h)
            for (int64_t w = 0; w < kw; ++w)
                tap_shift_.push_back(2 * ((planes_ ? h * p.dil[1] * pitch_ : 0) + w_shift[static_cast<size_t>(w)]));
    const int64_t image = p.in[0] * a_runs_ * a_run_bytes() / kBlock * icp_ +
                          p.out[0] * b_runs_ * b_run_bytes() / kBlock * ocp_;
    const int64_t image_steps = p.out[0] * b_runs_ * steps_;  // (a bound: runs reading outside src are skipped)
    chunk_ = std::clamp<int64_t>(std::max(kChunkBytes / std::max<int64_t>(image, 1), div_up(kMinSteps, image_steps)), 1,
                                 p.mb);
}

// Every staged position is written by a transpose (zeros where it reads
// padding) but the pad rows of planes and the slack past them. Planes: an
// item is an input row of a plane, its padded row for every channel block
// (the first and last rows zero the pad rows above and below); rows: an
// item is a run, its W phases.
void AmxWeightsExecutor::stage_src(const char* src, int64_t nc, char* out) const {
    const DataStrides& s = p_.src_str;
    const int64_t id_n = p_.in[0], runs = nc * id_n * a_runs_, ih_n = p_.in[1], iw_n = p_.in[2];
    const int64_t block = a_block_bytes(nc) / 2, rows = planes_ ? ih_n : 1;
    parallel_static(threads(), runs * rows, [&](int64_t x) {
        const int64_t r = x / rows, n = r / (id_n * a_runs_), id = r / a_runs_ % id_n;
        uint16_t* run = reinterpret_cast<uint16_t*>(out) + r * a_run_bytes() / 2;
        const char* plane = src + (n * s.n + id * s.sp[0]) * 2;
        // `count` positions to dst and on, position q from src pixel (ih,
        // iw) = at(q) (outside src: zeros): 32 a transpose.
        auto positions = [&](int64_t count, uint16_t* dst, auto&& at) {
            const uint16_t* px[kBlock];
            for (int64_t k0 = 0; k0 < count; k0 += kBlock) {
                for (int64_t k = 0; k < kBlock; ++k) {
                    const std::array<int64_t, 2> hw = at(k0 + k);
                    px[k] = hw[0] >= 0 && hw[0] < ih_n && hw[1] >= 0 && hw[1] < iw_n
                                    ? reinterpret_cast<const uint16_t*>(plane + (hw[0] * s.sp[1] + hw[1] * s.sp[2]) * 2)
                                    : nullptr;
                }
                transpose_step(px, std::min(kBlock, count - k0), p_.ic(), block, a_len_, dst + k0);
            }
        };
        if (!planes_ && pack_ > 1) {
            // Position q of phase ph: row q / ppitch_ of the pack, column c
            // = q % ppitch_ (iw = c·sw + ph - pad); zeros past the pack.
            const int64_t pack = r % a_runs_ / p_.k[1], kh = r % a_runs_ % p_.k[1];
            for (int64_t ph = 0; ph < p_.stride[2]; ++ph)
                positions(colsp_, run + ph * colsp_, [&](int64_t q) -> std::array<int64_t, 2> {
                    const int64_t rr = q / ppitch_, oh = pack * pack_ + rr;
                    if (rr >= pack_ || oh >= p_.out[1]) return {-1, -1};
                    return {oh * p_.stride[1] - p_.pad_begin[1] + kh * p_.dil[1],
                            q % ppitch_ * p_.stride[2] + ph - p_.pad_begin[2]};
                });
            return;
        }
        if (!planes_) {
            for (int64_t ph = 0; ph < p_.stride[2]; ++ph)  // column c of phase ph: iw = c·sw + ph - pad
                positions(colsp_, run + ph * colsp_, [&](int64_t c) -> std::array<int64_t, 2> {
                    return {r % a_runs_, c * p_.stride[2] + ph - p_.pad_begin[2]};
                });
            return;
        }
        const int64_t ih = x % rows, pt = p_.pad_begin[1];
        if (ih == 0 || ih == ih_n - 1)
            for (int64_t c = 0; c < icb_ * kBlock; ++c) {
                uint16_t* ch = run + c / kBlock * block + c % kBlock * a_len_;
                if (ih == 0) std::memset(ch, 0, static_cast<size_t>(pt * pitch_ * 2));
                if (ih == ih_n - 1)
                    std::memset(ch + (ih_n + pt) * pitch_, 0, static_cast<size_t>((a_len_ - (ih_n + pt) * pitch_) * 2));
            }
        positions(pitch_, run + (ih + pt) * pitch_,
                  [&](int64_t c) -> std::array<int64_t, 2> { return {ih, c - p_.pad_begin[2]}; });
    });
}

void AmxWeightsExecutor::stage_dd(const char* dd, int64_t nc, char* out) const {
    const DataStrides& s = p_.dst_str;
    const int64_t od_n = p_.out[0], runs = nc * od_n * b_runs_;
    // Positions q = oh·width + ow of a run (a plane's rows `width` apart, a
    // pack's rows, or one row); past OW in a row or past OH, zeros.
    const int64_t width = planes_ ? pitch_ : pack_ > 1 ? ppitch_ : kBlock * steps_;
    parallel_static(threads(), runs * steps_, [&](int64_t x) {
        const int64_t r = x / steps_, st = x % steps_;
        const int64_t n = r / (od_n * b_runs_), od = r / b_runs_ % od_n;
        const char* plane = dd + (n * s.n + od * s.sp[0]) * 2;
        const uint16_t* px[kBlock];
        for (int64_t k = 0; k < kBlock; ++k) {
            const int64_t q = st * kBlock + k, ow = q % width;
            const int64_t oh = planes_ ? q / width : pack_ > 1 ? r % b_runs_ * pack_ + q / width : r % b_runs_;
            px[k] = ow < p_.out[2] && oh < p_.out[1] && (pack_ == 1 || q / width < pack_)
                            ? reinterpret_cast<const uint16_t*>(plane + (oh * s.sp[1] + ow * s.sp[2]) * 2)
                            : nullptr;
        }
        pair_step(px, p_.oc(), b_block_bytes(nc) / 2,
                  reinterpret_cast<uint16_t*>(out + r * b_run_bytes()) + st * kBlock * kBlock);
    });
}

// Flat: block (cb, step) of the staged src holds channels [32·cb, +32) of
// the chunk's output positions [32·step, +32), flattened over its images,
// each position's input pixel (zeros where it is padding or past the end).
void AmxWeightsExecutor::stage_flat_src(const char* src, int64_t nc, char* out) const {
    const DataStrides& s = p_.src_str;
    const int64_t steps = flat_steps(nc), total = nc * p_.out_sp(), ow_n = p_.out[2];
    const int64_t sw = p_.stride[2], pw = p_.pad_begin[2];
    // ow with iw = ow·sw - pw inside src: [ow_lo, ow_hi)
    const int64_t ow_lo = pw > 0 ? div_up(pw, sw) : 0, ow_hi = (p_.in[2] - 1 + pw) / sw + 1;
    parallel_static(threads(), steps, [&](int64_t st) {
        const uint16_t* px[kBlock] = {};
        const int64_t q0 = st * kBlock, end = std::min(total, q0 + kBlock);
        for (int64_t q = q0, len = 0; q < end; q += len) {  // a segment of one output row a pass
            const int64_t row = q / ow_n, ow0 = q % ow_n;
            len = std::min(end - q, ow_n - ow0);
            const int64_t n = row / (p_.out[0] * p_.out[1]), od = row / p_.out[1] % p_.out[0];
            const int64_t id = od * p_.stride[0] - p_.pad_begin[0];
            const int64_t ih = row % p_.out[1] * p_.stride[1] - p_.pad_begin[1];
            const int64_t lo = std::max(ow0, ow_lo), hi = std::min(ow0 + len, ow_hi);
            if (id < 0 || id >= p_.in[0] || ih < 0 || ih >= p_.in[1]) continue;
            const uint16_t* first = reinterpret_cast<const uint16_t*>(src) + n * s.n + id * s.sp[0] + ih * s.sp[1];
            for (int64_t ow = lo; ow < hi; ++ow) px[q - q0 + ow - ow0] = first + (ow * sw - pw) * s.sp[2];
        }
        transpose_step(px, kBlock, p_.ic(), a_block_bytes(nc) / 2, kBlock,
                       reinterpret_cast<uint16_t*>(out) + st * kBlock * kBlock);
    });
}

// Flat: step st of the staged diff_dst holds the chunk's output positions
// [32·st, +32) in pairs (zeros past the end).
void AmxWeightsExecutor::stage_flat_dd(const char* dd, int64_t nc, char* out) const {
    const DataStrides& s = p_.dst_str;
    const int64_t steps = flat_steps(nc), total = nc * p_.out_sp(), sp = p_.out_sp();
    parallel_static(threads(), steps, [&](int64_t st) {
        const uint16_t* px[kBlock];
        const int64_t q0 = st * kBlock, r = q0 % sp;
        int64_t n = q0 / sp, od = r / (p_.out[1] * p_.out[2]), oh = r / p_.out[2] % p_.out[1], ow = r % p_.out[2];
        for (int64_t k = 0; k < kBlock; ++k) {
            px[k] = q0 + k < total ? reinterpret_cast<const uint16_t*>(
                                             dd + (n * s.n + od * s.sp[0] + oh * s.sp[1] + ow * s.sp[2]) * 2)
                                   : nullptr;
            if (++ow < p_.out[2]) continue;
            ow = 0;
            if (++oh < p_.out[1]) continue;
            oh = 0;
            if (++od < p_.out[0]) continue;
            od = 0;
            ++n;
        }
        pair_step(px, p_.oc(), b_block_bytes(nc) / 2, reinterpret_cast<uint16_t*>(out) + st * kBlock * kBlock);
    });
}

std::vector<int64_t> AmxWeightsExecutor::runs(int64_t key, int64_t nc) const {
    if (flat_) return {0, 0};
    const int64_t kd = planes_ ? key : key / p_.k[1], kh = planes_ ? 0 : key % p_.k[1];
    std::vector<int64_t> v;
    for (int64_t n = 0; n < nc; ++n)
        for (int64_t od = 0; od < p_.out[0]; ++od) {
            const int64_t id = od * p_.stride[0] - p_.pad_begin[0] + kd * p_.dil[0];
            if (id < 0 || id >= p_.in[0]) continue;
            for (int64_t oh = 0; oh < b_runs_; ++oh) {  // (packed: a pack)
                const int64_t ih = planes_    ? 0
                                   : pack_ > 1 ? oh * p_.k[1] + kh
                                               : oh * p_.stride[1] - p_.pad_begin[1] + kh * p_.dil[1];
                if (ih < 0 || ih >= a_runs_) continue;
                v.push_back(((n * p_.in[0] + id) * a_runs_ + ih) * a_run_bytes());
                v.push_back(((n * p_.out[0] + od) * b_runs_ + oh) * b_run_bytes());
            }
        }
    return v;
}

// acc [tap][ICp][acc_w_] rounded into the user's weights: input channel
// i's output channels of its group g from acc column g·OC/G - 32·ob0_[i / 32].
void AmxWeightsExecutor::round_out(const float* acc, char* out) const {
    const WeightStrides& w = p_.wei_str;
    const int64_t ic = p_.ic(), icg = p_.icg, ocg = p_.ocg, taps = p_.k_sp();
    parallel_static(threads(), taps, [&](int64_t t) {
        const int64_t kd = t / (p_.k[1] * p_.k[2]), kh = t / p_.k[2] % p_.k[1], kw = t % p_.k[2];
        uint16_t* wt = reinterpret_cast<uint16_t*>(out) + kd * w.k[0] + kh * w.k[1] + kw * w.k[2];
        std::vector<uint16_t> row(w.o == 1 ? 0 : static_cast<size_t>(ocg));
        for (int64_t i = 0; i < ic; ++i) {
            const int64_t g = i / icg;
            const float* a = acc + (t * icp_ + i) * acc_w_ + g * ocg - ob0_[static_cast<size_t>(i / kBlock)] * kBlock;
            uint16_t* wi = wt + g * ocg * w.o + (i - g * icg) * w.i;
            if (w.o == 1) {
                round_(a, wi, ocg);
                continue;
            }
            round_(a, row.data(), ocg);
            for (int64_t o = 0; o < ocg; ++o) wi[o * w.o] = row[static_cast<size_t>(o)];
        }
    });
}

// Item x of a chunk of nc images: a kernel call adding to its block (or
// half's taps) of acc.
void AmxWeightsExecutor::call(const char* a, const char* b, const std::vector<std::vector<int64_t>>& lists,
                              int64_t nc, bool load, float* acc, int64_t x) const {
    const int64_t taps = p_.k_sp();
    WeightsAmxArgs args;
    args.steps = flat_ ? flat_steps(nc) : steps_;
    args.a_pitch = flat_ ? kBlock * 2 : a_len_ * 2;
    args.a_half = flat_ ? 16 * kBlock * 2 : 16 * args.a_pitch;
    args.a_step = flat_ ? kBlock * kBlock * 2 : kBlock * 2;
    args.acc_row = acc_w_ * 4;
    args.load = load;
    args.config = amx_tile_config();
    if (halves_) {
        const int64_t sets = static_cast<int64_t>(tap_sets_.size());
        const auto& set = tap_sets_[static_cast<size_t>(x % sets)];
        const int64_t ib = x / sets / 2, i0 = ib * kBlock + x / sets % 2 * 16;
        if (i0 >= p_.ic()) return;  // a half past the channels
        // The half's groups' output channels, i0 .. i0 + 15, at column c of
        // the block's accumulator and of its staged diff_dst.
        const int64_t ob = ob0_[static_cast<size_t>(ib)], c = i0 - ob * kBlock;
        const std::vector<int64_t>& list = lists[static_cast<size_t>(row_key(set[0]))];
        args.a = a + ib * a_block_bytes(nc) + (i0 - ib * kBlock) / 16 * args.a_half;
        for (int64_t k = 0; k < set[1]; ++k) args.shift[k] = tap_shift_[static_cast<size_t>(set[0] + k)];
        args.b = b + ob * b_block_bytes(nc) + c * 4;
        args.rows = list.data();
        args.nrows = static_cast<int64_t>(list.size() / 2);
        args.acc = acc + (set[0] * icp_ + i0) * acc_w_ + c;
        args.acc_tap = icp_ * acc_w_ * 4;
        (*half_kernels_[static_cast<size_t>(set[1])])(args);
        return;
    }
    const int64_t t = x % taps, j = x / taps % nob_, ib = x / taps / nob_;
    const int64_t ob = ob0_[static_cast<size_t>(ib)] + j;
    const std::vector<int64_t>& list = lists[static_cast<size_t>(row_key(t))];
    args.a = a + ib * a_block_bytes(nc) + tap_shift_[static_cast<size_t>(t)];
    args.b = b + ob * b_block_bytes(nc);
    args.rows = list.data();
    args.nrows = static_cast<int64_t>(list.size() / 2);
    args.acc = acc + (t * icp_ + ib * kBlock) * acc_w_ + j * kBlock;
    (*kernel_)(args);
}

void AmxWeightsExecutor::run(const void* in0, const void* in1, void* out) const {
    const char* src = static_cast<const char*>(p_.swap_inputs ? in1 : in0);
    const char* dd = static_cast<const char*>(p_.swap_inputs ? in0 : in1);
    const int64_t src_image = p_.ic() * p_.in_sp() * 2, dd_image = p_.oc() * p_.out_sp() * 2;
    // NCX: each chunk's images transposed to NXC as the chunk starts.
    const ScratchLease src_nxc = ncx_ ? ScratchLease(Scratch::amx_src_nxc, chunk_ * src_image) : ScratchLease();
    const ScratchLease dd_nxc = ncx_ ? ScratchLease(Scratch::amx_dst_nxc, chunk_ * dd_image) : ScratchLease();
    const ScratchLease acc(Scratch::amx_weights_acc, p_.k_sp() * icp_ * acc_w_ * 4);
    const ScratchLease a(Scratch::amx_weights_src, icb_ * a_block_bytes(chunk_));
    const ScratchLease b(Scratch::amx_weights_dst, ocb_ * b_block_bytes(chunk_));
    const int64_t keys = planes_ || flat_ ? p_.k[0] : p_.k[0] * p_.k[1], taps = p_.k_sp();
    std::vector<std::vector<int64_t>> lists(static_cast<size_t>(keys));
    for (int64_t n0 = 0; n0 < p_.mb; n0 += chunk_) {
        const int64_t nc = std::min(chunk_, p_.mb - n0);
        const char* csrc = src + n0 * src_image;  // the chunk's first image
        const char* cdd = dd + n0 * dd_image;
        if (ncx_) {
            transpose_images(csrc, src_nxc.get(), 2, nc, p_.ic(), p_.in_sp(), threads(), Isa::avx512_core);
            transpose_images(cdd, dd_nxc.get(), 2, nc, p_.oc(), p_.out_sp(), threads(), Isa::avx512_core);
            csrc = src_nxc.get();
            cdd = dd_nxc.get();
        }
        if (flat_) {
            stage_flat_src(csrc, nc, a.get());
            stage_flat_dd(cdd, nc, b.get());
        } else {
            stage_src(csrc, nc, a.get());
            stage_dd(cdd, nc, b.get());
        }
        for (int64_t k = 0; k < keys; ++k) lists[static_cast<size_t>(k)] = runs(k, nc);
        const int64_t items = halves_ ? icb_ * 2 * static_cast<int64_t>(tap_sets_.size()) : icb_ * nob_ * taps;
        parallel_static(threads(), items,
                        [&](int64_t x) { call(a.get(), b.get(), lists, nc, n0 > 0, acc.floats(), x); });
    }
    round_out(acc.floats(), static_cast<char*>(out));
}

std::string AmxWeightsExecutor::describe() const {
    std::ostringstream os;
    os << "jit:amx weights bf16 tdpbf16ps";
    if (flat_)
        os << ", 1x1: src staged in blocks of 32 of " << icp_ << " channels x 32 positions, ";
    else
        os << " (src staged channel-major in blocks of 32 of " << icp_ << " channels, "
           << (planes_     ? "runs of whole padded planes " + std::to_string(pitch_) + " wide"
               : pack_ > 1 ? "runs of packs of " + std::to_string(pack_) + " output rows " + std::to_string(ppitch_) +
                                     " positions apart, their input rows a kh in " + std::to_string(p_.stride[2]) +
                                     " W phases of " + std::to_string(colsp_)
                           : "runs of input rows in " + std::to_string(p_.stride[2]) + " W phases of " +
                                     std::to_string(colsp_))
           << "; ";
    os << "diff_dst in position pairs, blocks of 32 of " << ocp_ << " channels" << (flat_ ? "" : ")") << "\n"
       << "  for chunk of " << chunk_ << " of " << p_.mb << " images: stage src and diff_dst\n";
    if (halves_) {
        int64_t most = 0;
        for (const auto& set : tap_sets_) most = std::max(most, set[1]);
        os << "    for input half (16 channels, its groups' 16 output channels), tap set in " << div_up(p_.ic(), 16)
           << " x " << tap_sets_.size() << " (up to " << most << " taps of a row key)  [split over threads]\n";
    } else {
        os << "    for input block, output block" << (flat_ ? "" : ", tap") << " in " << icb_ << " x " << blocks_text()
           << (flat_ ? "" : " x " + std::to_string(p_.k_sp())) << "  [split over threads]\n";
    }
    if (flat_)
        os << "      for step of 32 in the chunk's " << chunk_ * p_.out_sp() << " positions: ";
    else
        os << "      for run (" << (planes_ ? "a plane" : pack_ > 1 ? "a pack of output rows" : "an output row")
           << "), step of 32 positions in "
           << steps_ * kBlock << ": ";
    os << (halves_ ? "1 + taps tile loads, a tdpbf16ps a tap (16 x 16 f32)\n" : "4 tile loads, 4 tdpbf16ps (32 x 32 f32)\n")
       << "  f32 sums rounded to bf16 into diff_weights";
    if (ncx_) os << "\n  (NCX src and diff_dst: each chunk's images transposed to NXC as it starts)";
    return os.str();
}

}  // namespace

// bf16 layers with at least half a tile of channels both ways (1x1:
// kAmxMinChannels1x1 a group) and kAmxMinShare of their products useful;
// NCX ones with work enough for their copies (amx_takes_ncx); all of
// them under CONVGRAD_AMX=all. Grouped layers run whole, their groups'
// blocks only (amx_group_blocks).
std::unique_ptr<Executor> make_jit_weights_amx_executor(const Problem& p) {
    if (p.alg != Alg::weights || p.dt != data_type::bf16) return nullptr;
    if (p.ic() < 16 || p.oc() < 16) return nullptr;
    const bool all = amx_takes_all();
    if (!all && p.k_sp() == 1 && std::min(p.icg, p.ocg) < kAmxMinChannels1x1) return nullptr;
    if (!all && !amx_takes_ncx(p)) return nullptr;
    // (Positions only lower the share: depthwise layers leave before their
    // executor builds a tap set per few taps.)
    if (!all && AmxWeightsExecutor::takes_halves(p) &&
        AmxWeightsExecutor::halves_used_share(p) < kAmxMinShareHalves)
        return nullptr;
    auto e = std::make_unique<AmxWeightsExecutor>(p);
    if (!all) {
        const double share = e->used_share() * e->position_share();
        if (e->halves() ? e->rows() || share < kAmxMinShareHalves : share < kAmxMinShare) return nullptr;
    }
    return e;
}

}  // namespace convgrad::detail
