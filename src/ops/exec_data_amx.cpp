// The data gradient (ConvolutionBackwardData) of bf16 on AMX tiles
// (jit/bwd_data_amx_kernel.hpp): any kernel, stride, dilation and
// padding, 1D to 3D, any weights layout. NCX layers run on NXC copies in
// scratch, a chunk of images at a time: diff_dst transposed before,
// diff_src after. A grouped layer runs whole, as the dense layer whose
// weights are zero across groups: each block of 32 input channels takes
// only the oc steps that hold its groups' output channels
// (amx_group_blocks), its staged W zero between groups (two groups of 16
// to a block: half the products useful).
//
// Each stride phase (the diff_src positions i ≡ r mod s along every axis)
// is a unit-stride problem: its taps are those with (r + pad - k·dil)
// divisible by s, and position j of the phase reads diff_dst position
// j + e, e = (r + pad - k·dil) / s. diff_dst is staged per image with a
// zero border wide enough for every phase's taps ("lead" positions before
// position 0 along each axis), in blocks of 32 channels (zeros past OC),
// so that along a phase's rows, flattened with the staged row pitch, every
// tap is one constant offset: a block of 32 consecutive flat positions is
// one A tile pair per tap and oc step (the positions past a row's end are
// computed and not stored). The weights are staged once an execute in oc
// pairs, [channel block][tap][OCp / 2][32][2].
//
// Both stagings keep each tile load in one piece of 1 or 2 KiB. With
// whole pixels (OCp channels) and W pair rows (ICp channels) between a
// tile's rows, OC = IC = 512 put the 16 rows 1 and 2 KiB apart, in 4 and 2
// of L1's 64 sets and across pages: 210-285 GFLOP/s on ResNet-50's
// res5a_branch2b at mb 32 (Intel Xeon guest, 2 threads).
//
// A 1x1 layer with unit strides, no padding and OC a multiple of 32 (and
// pixels not a multiple of 1 KiB apart) reads diff_dst in place instead
// ("direct"): its positions, flattened over the
// images, are the A tiles' rows, OC·2 bytes apart; only a last partial
// block of 32 positions is copied. (Staging is a pass over diff_dst, about
// as long as the 1x1 products themselves at 64-256 channels.)
//
// Work: chunks of images whose staged diff_dst fits kChunkBytes; within
// a chunk, items of (phase, channel block, image, plane, run of position
// blocks), split statically over the threads. Every diff_src element is
// written by exactly one kernel call (positions of a phase without taps:
// zeros), so the result does not depend on the thread count.
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
#include "ops/executor.hpp"
#include "ops/parallel.hpp"
#include "ops/problem.hpp"
#include "ops/scratch.hpp"
#include "ops/transpose.hpp"

namespace convgrad::detail {
namespace {

// Staged diff_dst a chunk of images may take (it is read once for each
// channel block).
constexpr int64_t kChunkBytes = 1 << 20;
// Items a thread gets at least where the position blocks allow, and the
// blocks an item takes at most.
constexpr int64_t kItemsPerThread = 8;
constexpr int64_t kMaxRun = 64;
// diff_dst bytes of a direct run (in L2 for the channel blocks after the first).
constexpr int64_t kDirectRunBytes = 256 << 10;
// W bytes up to which 1x1 layers read diff_dst in place whatever their
// pixel pitch. bf16, mb 32, 2 threads, in place against staged (Intel AMX
// guest, tools/sweep_ab.py --min, 5-9 rounds): ResNet-50's res3a/4a/5a
// branch2c (512-2048 oc, W 128 KiB-2 MiB) 1.13-1.55x, 256 -> 512 at 56x56
// 1.22-1.86x; W 4 MiB (1024 -> 2048) 0.87-1.24x, 8 MiB 1.01x, 16 MiB
// (2048 -> 4096 at mb 8) 0.58x. (Earlier, before a run called every
// channel block: 512-1024 oc 0.47-0.52x of oneDNN in place, 0.80-0.87x
// staged.)
constexpr int64_t kDirectWeightBytes = 2 << 20;
// A grouped layer takes the tiles when at least this share of their
// products is useful (amx_used_share; the rest multiply zero weights
// across groups). bf16, mb 32, 2 threads, against the vector kernels
// (Intel AMX guest, tools/sweep_ab.py --rounds=3 --min): groups of 16
// (half useful; RegNetX-400MF, ResNeXt-50 conv4) 0.91-1.86x, 1.2x geomean
// over 9 layers; groups of 8 (a quarter) 0.60-1.23x; groups of 32 and 64,
// whole against group by group, 0.87-1.48x.
constexpr double kAmxGroupMinShare = 0.5;

// A pixel's channels in blocks of 32 (zeros past `channels`), block ob at
// out + ob·step.
__attribute__((target("avx512f,avx512bw"))) void split_pixel(const uint16_t* px, int64_t channels, int64_t step,
                                                              char* out) {
    for (int64_t c0 = 0; c0 < channels; c0 += kAmxStepOc, out += step) {
        const int64_t n = channels - c0;
        const __mmask32 m = n >= 32 ? ~__mmask32(0) : (__mmask32(1) << n) - 1;
        _mm512_storeu_si512(out, _mm512_maskz_loadu_epi16(m, px + c0));
    }
}

struct Phase {
    std::array<int64_t, 3> r{};   // first diff_src position along each axis
    std::array<int64_t, 3> j{};   // positions along each axis
    std::vector<int64_t> taps;    // pairs (A byte offset, W byte offset)
    int64_t flat = 0;             // flat positions of a plane: (j[1] - 1) · pitch + j[2]
    int64_t blocks = 0;           // position blocks of a plane
    int64_t run = 1;              // position blocks an item
};

class AmxDataExecutor final : public Executor {
public:
    AmxDataExecutor(const Problem& p, int threads);
    void run(const void* in0, const void* in1, void* out) const override;
    std::string describe() const override;
    int threads() const override { return op_threads(p_); }

private:
    std::string oc_steps(bool taps) const;
    std::string ncx_note() const;
    // Bytes of a channel block's staged W a tap: steps_ of oc pairs.
    int64_t w_tap_bytes() const { return steps_ * kAmxStepOc / 2 * kAmxBlockC * 4; }
    // Images [0, mb) of NXC diff_dst at dd into diff_src at dsrc (each
    // pointing at its first image), with W staged in wv.
    void run_images(const char* dd, const char* wv, char* staged, char* dsrc, int64_t mb) const;
    void stage_weights(const uint16_t* w, uint32_t* wv) const;
    void stage_chunk(const char* dd, int64_t n0, int64_t nc, char* out) const;
    void zero_untapped(char* out, int64_t mb) const;
    void run_direct(const char* dd, const char* wv, char* out, int64_t mb) const;
    // The kernel arguments every call shares.
    DataAmxArgs base_args(const char* wv, int64_t cb, float* acc, void* const* rows) const;

    Problem p_;         // on NXC activations
    bool ncx_ = false;  // the user's are NCX: diff_dst and diff_src transposed
    int threads_ = 1;  // the arena's at creation: sizes the runs (the results do not depend on it)
    int64_t ocp_ = 0, icp_ = 0, cblocks_ = 0;
    // oc steps of 32 each channel block reads (the same for all), from
    // its first, oc_step0_[cb]: all of OCp for one group; for several,
    // the steps holding the block's groups' output channels.
    int64_t steps_ = 0;
    std::vector<int64_t> oc_step0_;
    int64_t a_step_ = 0;  // bytes between the staged oc blocks
    bool direct_ = false;
    int64_t direct_run_ = 1;  // direct: blocks a call
    std::array<int64_t, 3> lead_{}, ext_{};  // staged border and extent along each axis
    int64_t image_px_ = 0, slack_px_ = 0, chunk_ = 1;
    std::vector<Phase> phases_;      // with taps
    std::vector<Phase> untapped_;    // without: zeros
    std::shared_ptr<const DataAmxKernel> full_, tail_;
};

AmxDataExecutor::AmxDataExecutor(const Problem& p, int threads)
    : p_(nxc_view(p)), ncx_(!p.nxc), threads_(threads) {
    ocp_ = div_up(p.oc(), kAmxStepOc) * kAmxStepOc;
    icp_ = div_up(p.ic(), kAmxBlockC) * kAmxBlockC;
    cblocks_ = icp_ / kAmxBlockC;
    steps_ = amx_group_blocks(p, &oc_step0_);
    // Per axis: the phases (r, J) and their taps (k, e), taps that read no
    // diff_dst position for any j dropped.
    struct AxisTap {
        int64_t k, e;
    };
    struct AxisPhase {
        int64_t r, j;
        std::vector<AxisTap> taps;
    };
    std::array<std::vector<AxisPhase>, 3> axes;
    for (int a = 0; a < 3; ++a) {
        const int64_t in = p.in[a], out = p.out[a], s = p.stride[a];
        int64_t lead = 0, end = out;
        for (int64_t r = 0; r < std::min(s, in); ++r) {
            AxisPhase ph{r, (in - r + s - 1) / s, {}};
            for (int64_t k = 0; k < p.k[a]; ++k) {
                const int64_t v = r + p.pad_begin[a] - k * p.dil[a];
                if (v % s != 0) continue;
                const int64_t e = v / s;
                if (e > out - 1 || ph.j - 1 + e < 0) continue;
                ph.taps.push_back({k, e});
                lead = std::max(lead, -e);
                end = std::max(end, ph.j + e);
            }
            end = std::max(end, ph.j);
            axes[a].push_back(std::move(ph));
        }
        lead_[a] = lead;
        ext_[a] = lead + end;
    }
    image_px_ = ext_[0] * ext_[1] * ext_[2];
    // A block's last tile reads up to 31 positions past the last valid
    // one, and a row's garbage positions up to a row further.
    slack_px_ = ext_[2] + 2 * kAmxBlockM;
    const int64_t image_bytes = image_px_ * ocp_ * 2;
    chunk_ = std::clamp<int64_t>(kChunkBytes / std::max<int64_t>(image_bytes, 1), 1, p.mb);
    a_step_ = (chunk_ * image_px_ + slack_px_) * kAmxStepOc * 2;

    const int64_t pitch = ext_[2], plane = ext_[1] * ext_[2];
    int64_t blocks_total = 0;
    for (const AxisPhase& pd : axes[0])
        for (const AxisPhase& ph : axes[1])
            for (const AxisPhase& pw : axes[2]) {
                Phase f;
                f.r = {pd.r, ph.r, pw.r};
                f.j = {pd.j, ph.j, pw.j};
                for (const AxisTap& td : pd.taps)
                    for (const AxisTap& th : ph.taps)
                        for (const AxisTap& tw : pw.taps) {
                            const int64_t px =
                                    (td.e + lead_[0]) * plane + (th.e + lead_[1]) * pitch + tw.e + lead_[2];
                            const int64_t tap = (td.k * p.k[1] + th.k) * p.k[2] + tw.k;
                            f.taps.push_back(px * kAmxStepOc * 2);
                            f.taps.push_back(tap * w_tap_bytes());
                        }
                f.flat = (f.j[1] - 1) * pitch + f.j[2];
                f.blocks = div_up(f.flat, kAmxBlockM);
                if (f.taps.empty()) {
                    untapped_.push_back(std::move(f));
                    continue;
                }
                blocks_total += f.blocks * f.j[0];
                phases_.push_back(std::move(f));
            }
    // Runs of position blocks: as long as the items still number
    // kItemsPerThread a thread (a kernel call then loads its tile
    // configuration once for many blocks).
    const int64_t per_chunk = blocks_total * chunk_ * cblocks_;
    const int64_t run = std::clamp<int64_t>(per_chunk / (int64_t(threads_) * kItemsPerThread), 1, kMaxRun);
    for (Phase& f : phases_) f.run = std::min(f.blocks, run);

    // Pixels a multiple of 1 KiB apart put a block's 32 rows 8 or more to
    // an L1 set, which the staged blocks avoid, unless W fits
    // kDirectWeightBytes: a run calls every channel block in turn, so its
    // W is read once a run.
    direct_ = p.k_sp() == 1 && p.in == p.out && p.oc() % kAmxStepOc == 0 && p_.dst_str.sp[2] == p.oc() &&
              p_.src_str.sp[2] == p.ic() &&
              (lines_per_l1_set(kAmxBlockM, p.oc() * 2) <= kL1LinesPerSet / 2 ||
               p.ic() * p.oc() * 2 <= kDirectWeightBytes) &&
              std::all_of(p.stride.begin(), p.stride.end(), [](int64_t v) { return v == 1; }) &&
              std::all_of(p.pad_begin.begin(), p.pad_begin.end(), [](int64_t v) { return v == 0; });
    // Runs whose diff_dst (read by every channel block) fits kDirectRunBytes.
    const int64_t whole = (ncx_ ? chunk_ : p.mb) * p.in_sp() / kAmxBlockM;  // NCX: a chunk's
    const int64_t fit = std::max<int64_t>(1, kDirectRunBytes / (kAmxBlockM * p.oc() * 2));
    direct_run_ = std::clamp<int64_t>(whole / (int64_t(threads_) * kItemsPerThread), 1, std::min(kMaxRun, fit));

    DataAmxDesc d;
    full_ = get_data_amx_kernel(d);
    if (p.ic() % kAmxBlockC) {
        d.channels = static_cast<int32_t>(p.ic() % kAmxBlockC);
        tail_ = get_data_amx_kernel(d);
    }
}

// wv[block][tap][pair][c] = (W(o, i), W(o + 1, i)) as one dword, o =
// 32·oc_step0_[block] + 2·pair, i = 32·block + c, zeros past OC and IC and
// where o and i are in different groups. Weights of one group with oc
// innermost and an even OC (XIO) are dword matrices [IC][OC / 2] a tap,
// transposed by 16 x 16 tiles.
void AmxDataExecutor::stage_weights(const uint16_t* w, uint32_t* wv) const {
    const WeightStrides& s = p_.wei_str;
    const int64_t oc = p_.oc(), ic = p_.ic(), pairs = steps_ * kAmxStepOc / 2, taps = p_.k_sp();
    const bool dwords = s.o == 1 && oc % 2 == 0 && s.i % 2 == 0;
    parallel_static(threads(), cblocks_ * taps, [&](int64_t x) {
        const int64_t cb = x / taps, t = x % taps;
        const int64_t kd = t / (p_.k[1] * p_.k[2]), kh = t / p_.k[2] % p_.k[1], kw = t % p_.k[2];
        const int64_t i0 = cb * kAmxBlockC, ni = std::min<int64_t>(kAmxBlockC, ic - i0);
        const uint16_t* wt = w + kd * s.k[0] + kh * s.k[1] + kw * s.k[2];
        uint32_t* out = wv + x * pairs * kAmxBlockC;
        if (p_.g > 1) {  // each group's weights in the block, the rest zero
            std::memset(out, 0, static_cast<size_t>(pairs * kAmxBlockC * 4));
            uint16_t* halves = reinterpret_cast<uint16_t*>(out);
            const int64_t o0 = oc_step0_[static_cast<size_t>(cb)] * kAmxStepOc, o_end = std::min(o0 + 2 * pairs, oc);
            for (int64_t g = i0 / p_.icg; g <= (i0 + ni - 1) / p_.icg; ++g) {
                const int64_t i_lo = std::max(i0, g * p_.icg), i_hi = std::min(i0 + ni, (g + 1) * p_.icg);
                const int64_t o_lo = std::max(o0, g * p_.ocg), o_hi = std::min(o_end, (g + 1) * p_.ocg);
                for (int64_t i = i_lo; i < i_hi; ++i) {
                    const uint16_t* wi = wt + (i - g * p_.icg) * s.i;
                    for (int64_t o = o_lo; o < o_hi; ++o)
                        halves[((o - o0) / 2 * kAmxBlockC + i - i0) * 2 + (o - o0) % 2] = wi[o * s.o];
                }
            }
            return;
        }
        wt += i0 * s.i;
        if (ocp_ != oc || ni < kAmxBlockC) std::memset(out, 0, static_cast<size_t>(pairs * kAmxBlockC * 4));
        if (dwords) {
            transpose_block(wt, s.i / 2, out, kAmxBlockC, 4, ni, oc / 2, Isa::avx512_core);
            return;
        }
        for (int64_t q = 0; q < div_up(oc, 2); ++q)
            for (int64_t i = 0; i < ni; ++i) {
                const uint32_t lo = wt[2 * q * s.o + i * s.i];
                const uint32_t hi = 2 * q + 1 < oc ? wt[(2 * q + 1) * s.o + i * s.i] : 0;
                out[q * kAmxBlockC + i] = lo | hi << 16;
            }
    });
}

// Images [n0, n0 + nc) of diff_dst into staged rows of ext_[2] pixels,
// each oc block's rows a_step_ bytes after the previous block's, the
// border and the channels past OC zero.
void AmxDataExecutor::stage_chunk(const char* dd, int64_t n0, int64_t nc, char* out) const {
    const DataStrides& s = p_.dst_str;
    const int64_t oc = p_.oc(), pitch = ext_[2], rows = nc * ext_[0] * ext_[1], oblocks = ocp_ / kAmxStepOc;
    constexpr int64_t px_bytes = kAmxStepOc * 2;
    parallel_static(threads(), rows, [&](int64_t row) {
        const int64_t n = n0 + row / (ext_[0] * ext_[1]);
        const int64_t od = row / ext_[1] % ext_[0] - lead_[0], oh = row % ext_[1] - lead_[1];
        char* line = out + row * pitch * px_bytes;
        const bool border = od < 0 || od >= p_.out[0] || oh < 0 || oh >= p_.out[1];
        const int64_t ow = border ? 0 : p_.out[2], lead = border ? pitch : lead_[2];
        const char* src = dd + (n * s.n + od * s.sp[0] + oh * s.sp[1]) * 2;
        // Pixel by pixel, all blocks at once: diff_dst is read in whole
        // pixels, in order.
        for (int64_t ob = 0; ob < oblocks; ++ob) {
            char* dst = line + ob * a_step_;
            std::memset(dst, 0, static_cast<size_t>(lead * px_bytes));
            if (!border)
                std::memset(dst + (lead + ow) * px_bytes, 0, static_cast<size_t>((pitch - lead - ow) * px_bytes));
        }
        for (int64_t x = 0; x < ow; ++x)
            split_pixel(reinterpret_cast<const uint16_t*>(src + x * s.sp[2] * 2), oc, a_step_,
                        line + (lead + x) * px_bytes);
    });
}

void AmxDataExecutor::zero_untapped(char* out, int64_t mb) const {
    const DataStrides& s = p_.src_str;
    for (const Phase& f : untapped_)
        parallel_static(threads(), mb * f.j[0] * f.j[1], [&](int64_t row) {
            const int64_t n = row / (f.j[0] * f.j[1]), jd = row / f.j[1] % f.j[0], jh = row % f.j[1];
            const int64_t id = f.r[0] + jd * p_.stride[0], ih = f.r[1] + jh * p_.stride[1];
            for (int64_t jw = 0; jw < f.j[2]; ++jw) {
                const int64_t iw = f.r[2] + jw * p_.stride[2];
                std::memset(out + (n * s.n + id * s.sp[0] + ih * s.sp[1] + iw * s.sp[2]) * 2, 0,
                            static_cast<size_t>(p_.ic() * 2));
            }
        });
}

DataAmxArgs AmxDataExecutor::base_args(const char* wv, int64_t cb, float* acc, void* const* rows) const {
    DataAmxArgs args;
    args.b = wv + cb * p_.k_sp() * w_tap_bytes();
    args.steps = steps_;
    args.acc = acc;
    args.rows = rows;
    args.config = amx_tile_config();
    return args;
}

// Blocks of 32 positions over all images (diff_src rows IC apart), runs of
// direct_run_ an item, a call for each channel block in turn (the run's
// diff_dst, read from memory by the first, is in cache for the others);
// the last partial block from a copy.
void AmxDataExecutor::run_direct(const char* dd, const char* wv, char* out, int64_t mb) const {
    static const int64_t tap[2] = {0, 0};
    const int64_t positions = mb * p_.in_sp(), whole = positions / kAmxBlockM, tail = positions % kAmxBlockM;
    const int64_t pitch = p_.oc() * 2, runs = div_up(whole, direct_run_), items = runs + (tail > 0);
    parallel_static(threads(), items, [&](int64_t r) {
        const bool last = r == runs;
        const int64_t q0 = (last ? whole : r * direct_run_) * kAmxBlockM;
        const int64_t nb = last ? 1 : std::min(direct_run_, whole - r * direct_run_);
        const int64_t count = last ? tail : nb * kAmxBlockM;
        alignas(64) float acc[kAmxBlockM * kAmxBlockC];
        void* rows[kAmxBlockM * kMaxRun];
        std::vector<char> copy;
        const char* a = dd + q0 * pitch;
        if (last) {
            copy.assign(static_cast<size_t>(kAmxBlockM * pitch), 0);
            std::memcpy(copy.data(), a, static_cast<size_t>(tail * pitch));
            a = copy.data();
        }
        for (int64_t cb = 0; cb < cblocks_; ++cb) {
            for (int64_t m = 0; m < nb * kAmxBlockM; ++m)
                rows[m] = m < count ? out + ((q0 + m) * p_.ic() + cb * kAmxBlockC) * 2 : nullptr;
            DataAmxArgs args = base_args(wv, cb, acc, rows);
            args.a = a + oc_step0_[static_cast<size_t>(cb)] * kAmxStepOc * 2;
            args.taps = tap;
            args.ntaps = 1;
            args.a_step = kAmxStepOc * 2;
            args.a_row = pitch;
            args.a_half = 16 * pitch;
            args.a_block = kAmxBlockM * pitch;
            args.blocks = nb;
            (tail_ && cb == cblocks_ - 1 ? *tail_ : *full_)(args);
        }
    });
}

void AmxDataExecutor::run(const void* in0, const void* in1, void* out) const {
    const char* dd = static_cast<const char*>(in0);
    char* dsrc = static_cast<char*>(out);
    // Every buffer before the first write to diff_src (a failed allocation
    // leaves it untouched). NCX: a chunk of images at a time, diff_dst
    // transposed to NXC before and diff_src back after.
    const ScratchLease wv(Scratch::amx_data_weights, cblocks_ * p_.k_sp() * w_tap_bytes());
    const ScratchLease staged =
            direct_ ? ScratchLease() : ScratchLease(Scratch::amx_data_diff_dst, ocp_ / kAmxStepOc * a_step_);
    const int64_t dd_image = p_.oc() * p_.out_sp() * 2, dsrc_image = p_.ic() * p_.in_sp() * 2;
    const ScratchLease dd_nxc = ncx_ ? ScratchLease(Scratch::amx_dst_nxc, chunk_ * dd_image) : ScratchLease();
    const ScratchLease dsrc_nxc = ncx_ ? ScratchLease(Scratch::amx_src_nxc, chunk_ * dsrc_image) : ScratchLease();
    stage_weights(static_cast<const uint16_t*>(in1), wv.as<uint32_t>());
    if (!direct_)
        for (int64_t ob = 0; ob < ocp_ / kAmxStepOc; ++ob)  // the slack after each block
            std::memset(staged.get() + (ob + 1) * a_step_ - slack_px_ * kAmxStepOc * 2, 0,
                        static_cast<size_t>(slack_px_ * kAmxStepOc * 2));
    if (!ncx_) return run_images(dd, wv.get(), staged.get(), dsrc, p_.mb);
    for (int64_t n0 = 0; n0 < p_.mb; n0 += chunk_) {
        const int64_t nc = std::min(chunk_, p_.mb - n0);
        transpose_images(dd + n0 * dd_image, dd_nxc.get(), 2, nc, p_.oc(), p_.out_sp(), threads(), Isa::avx512_core);
        run_images(dd_nxc.get(), wv.get(), staged.get(), dsrc_nxc.get(), nc);
        transpose_images(dsrc_nxc.get(), dsrc + n0 * dsrc_image, 2, nc, p_.in_sp(), p_.ic(), threads(),
                         Isa::avx512_core);
    }
}

void AmxDataExecutor::run_images(const char* dd, const char* wv, char* staged, char* dsrc, int64_t mb) const {
    if (direct_) return run_direct(dd, wv, dsrc, mb);
    zero_untapped(dsrc, mb);
    const DataStrides& s = p_.src_str;
    const int64_t pitch = ext_[2], plane = ext_[1] * ext_[2];
    for (int64_t n0 = 0; n0 < mb; n0 += chunk_) {
        const int64_t nc = std::min(chunk_, mb - n0);
        stage_chunk(dd, n0, nc, staged);
        // Items: phase, channel block, image, plane, run (the phase's
        // items contiguous, in that order).
        std::vector<int64_t> first(phases_.size() + 1, 0);
        for (size_t i = 0; i < phases_.size(); ++i) {
            const Phase& f = phases_[i];
            first[i + 1] = first[i] + cblocks_ * nc * f.j[0] * div_up(f.blocks, f.run);
        }
        parallel_static(threads(), first.back(), [&](int64_t item) {
            const auto at = std::upper_bound(first.begin(), first.end(), item);
            const size_t ph = static_cast<size_t>(at - first.begin() - 1);
            const Phase& f = phases_[ph];
            const int64_t runs = div_up(f.blocks, f.run);
            int64_t x = item - first[ph];
            const int64_t run = x % runs;
            x /= runs;
            const int64_t jd = x % f.j[0];
            x /= f.j[0];
            const int64_t n = x % nc, cb = x / nc;
            const int64_t b0 = run * f.run, nb = std::min(f.run, f.blocks - b0);
            alignas(64) float acc[kAmxBlockM * kAmxBlockC];
            void* rows[kAmxBlockM * kMaxRun];
            const int64_t id = f.r[0] + jd * p_.stride[0];
            char* base = dsrc + ((n0 + n) * s.n + id * s.sp[0] + cb * kAmxBlockC) * 2;
            for (int64_t m = 0; m < nb * kAmxBlockM; ++m) {
                const int64_t q = b0 * kAmxBlockM + m, jh = q / pitch, jw = q % pitch;
                rows[m] = q < f.flat && jw < f.j[2]
                                  ? base + ((f.r[1] + jh * p_.stride[1]) * s.sp[1] +
                                            (f.r[2] + jw * p_.stride[2]) * s.sp[2]) * 2
                                  : nullptr;
            }
            DataAmxArgs args = base_args(wv, cb, acc, rows);
            args.a = staged + oc_step0_[static_cast<size_t>(cb)] * a_step_ +
                     ((n * ext_[0] + jd) * plane + b0 * kAmxBlockM) * kAmxStepOc * 2;
            args.taps = f.taps.data();
            args.ntaps = static_cast<int64_t>(f.taps.size() / 2);
            args.a_step = a_step_;
            args.a_row = kAmxStepOc * 2;
            args.a_half = 16 * args.a_row;
            args.a_block = kAmxBlockM * args.a_row;
            args.blocks = nb;
            const bool last = tail_ && cb == cblocks_ - 1;
            (last ? *tail_ : *full_)(args);
        });
    }
}

std::string AmxDataExecutor::ncx_note() const {
    if (!ncx_) return "";
    return "\n  (NCX: by chunks of " + std::to_string(chunk_) + (chunk_ == 1 ? " image" : " images") +
           ", diff_dst transposed to NXC before, diff_src back after)";
}

std::string AmxDataExecutor::oc_steps(bool taps) const {
    std::ostringstream os;
    os << "for " << (taps ? "tap, " : "") << "oc step of 32 in ";
    if (p_.g == 1) return os.str() + std::to_string(ocp_);
    os << "the block's groups' " << steps_ * kAmxStepOc << " of " << ocp_ << " (W zero across groups)";
    return os.str();
}

std::string AmxDataExecutor::describe() const {
    std::ostringstream os;
    if (direct_) {
        os << "jit:amx data bf16 tdpbf16ps, 1x1: diff_dst read in place (weights in oc pairs, blocks of 32 of "
           << icp_ << " channels)\n"
           << "  for run of up to " << direct_run_ << " blocks of 32 of " << p_.mb * p_.in_sp()
           << " positions  [split over threads]\n"
           << "    for channel block of 32 in " << p_.ic() << ", block of 32 positions in the run\n"
           << "      " << oc_steps(false) << ": 4 tile loads, 4 tdpbf16ps (32 x 32 f32)\n"
           << "      rounded to bf16 into diff_src";
        return os.str() + ncx_note();
    }
    int64_t taps = 0;
    for (const Phase& f : phases_) taps += static_cast<int64_t>(f.taps.size() / 2);
    os << "jit:amx data bf16 tdpbf16ps (diff_dst staged " << ext_[0] << "x" << ext_[1]
       << "x" << ext_[2] << " an image in blocks of 32 of " << ocp_
       << " channels; weights in oc pairs, blocks of 32 of " << icp_ << " channels)\n"
       << "  for chunk of " << chunk_ << " of " << p_.mb << " images: stage diff_dst\n"
       << "    for phase in " << phases_.size() << " (" << taps << " taps in all";
    if (!untapped_.empty()) os << "; " << untapped_.size() << " without taps written as zeros";
    os << "), channel block of 32 in " << p_.ic() << ", image, plane  [split over threads]\n"
       << "      for block of 32 positions (runs of up to " << (phases_.empty() ? 0 : phases_[0].run) << ")\n"
       << "        " << oc_steps(true) << ": 4 tile loads, 4 tdpbf16ps (32 x 32 f32)\n"
       << "        rounded to bf16 into diff_src";
    return os.str() + ncx_note();
}

}  // namespace

// bf16 layers with at least a tile of channels both ways (fewer leave most
// of each tile's rows or columns empty); NCX ones with work enough for
// their copies (amx_takes_ncx). Grouped layers run whole, W zero across
// groups, where that leaves enough of the tiles' products useful. Under
// CONVGRAD_AMX=all, every layer of the channels above.
std::unique_ptr<Executor> make_jit_data_amx_executor(const Problem& p) {
    if (p.alg != Alg::data || p.dt != data_type::bf16) return nullptr;
    if (p.oc() < kAmxStepOc || p.ic() < 16) return nullptr;
    if (amx_takes_all()) return std::make_unique<AmxDataExecutor>(p, op_threads(p));
    if (!amx_takes_ncx(p)) return nullptr;
    if (p.g > 1 && amx_used_share(p) < kAmxGroupMinShare) return nullptr;
    return std::make_unique<AmxDataExecutor>(p, op_threads(p));
}

}  // namespace convgrad::detail
