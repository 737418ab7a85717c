// The data-gradient microkernel (ConvolutionBackwardData), one generator for
// AVX-512 and AVX2 through VecIsa.
//
// One call computes `nblocks` consecutive blocks of `m` diff_src pixels ×
// `n` vectors of input channels (block b at b·m·dst_pix_bytes in diff_src
// and b·dd_block_bytes in diff_dst: the next m pixels of a row, or, with
// m = the row's width, the next row), each block as
//
//   acc[j][v] = sum over entries e, sum over oc < noc of
//               dd(e, j, oc) * W(e, oc, v)          (direct)
//   acc[j][v] = sum over entries e, sum over o < G of
//               perm_o(dd(e, j, v)) * W(e, o, v)   (depthwise, lane groups;
//               with row_taps > 1 an entry is a kh row of KW taps, see
//               DataKernelDesc::row_taps)
//
// Depthwise covers grouped convolutions with G = IC/g = OC/g channels per
// group, G in {1, 2, 4, 8, 16} and G <= vlen (DataKernelDesc::lane_group):
// lane c of a vector is diff_src channel c (group c / G, input channel
// c % G), and
// perm_o(dd)[c] = dd[c - c % G + o] is that group's output channel o, a
// permutation inside each G lanes of the diff_dst vector at the same
// channels (vpermilps by immediate for G <= 4, vpermps across 128-bit
// lanes for G = 8; a broadcast load when G is the vector length), with W
// packed per lane as W(oc = group·G + o, ic = c % G).
// G = 1 is the depthwise convolution (no permutation). bf16_dot lane
// groups (G >= 2) run G / 2 passes, one per pair of output channels: the
// 16 bf16 channels are loaded as 8 dwords and vpermd puts the group's pair
// (2o, 2o + 1) in every dword lane, against W packed as pairs
// [tap][o][lanes][2] for vdpbf16ps. bf16_dot with G = 1 pairs kernel rows
// instead (DataKernelDesc::row_pairs): one interleave of two diff_dst rows
// serves every W tap of the entry.
//
// An entry is one tap that is valid for every pixel of every block of the
// call: a diff_dst pointer (pixel 0 of block 0, first oc of the chunk) and a
// pointer into the pre-packed weights. The executor builds the entries, so
// stride phases, dilation and padding never reach the kernel: taps that hit
// an inserted zero are simply not entries, and edge pixels read a
// zero-padded staging copy (depthwise kernels with row_w > 0 instead leave
// the taps past the W edges out, see DataKernelDesc::row_x0). A call with
// no entries writes zeros.
//
// The sum over one pixel is a single running chain in entry order then oc
// order (depthwise: entry, then o, then the row's taps; direct row taps:
// entry, then oc, then the taps by their diff_dst pixel); with `accumulate`
// the chain continues from the f32 partial sums in `acc`, so splitting oc
// into chunks never changes a bit.
//
// Data types (DataCompute): f32 multiplies f32 diff_dst by f32 W; `widen`
// takes bf16 / f16 diff_dst, converts the m pixels × noc values of each entry
// once into an f32 scratch (one convert feeds n FMAs per oc, so the FMA loop
// runs as for f32) against W packed as f32; `bf16_dot` multiplies bf16 pairs
// of consecutive oc with vdpbf16ps: the 32-bit pair diff_dst[p][oc, oc+1]
// (adjacent in NXC) broadcast against W packed as [oc/2][lanes][2], f32
// accumulation. A final store rounds the f32 sums once to out_dt; otherwise
// they go to `acc` as f32 for the next oc chunk.
#pragma once

#include <climits>
#include <cstdint>
#include <memory>
#include <string>

#include "convgrad/convgrad.hpp"
#include "jit/isa.hpp"
#include "jit/jit_kernel.hpp"
#include "jit/vec_cvt.hpp"
#include "jit/vec_isa.hpp"

namespace convgrad::detail {

enum class DataKernelKind : int32_t {
    direct = 0,     // broadcast one diff_dst scalar per pixel, W vectors over ic
    depthwise = 1,  // diff_dst vectors over channels times W vectors
};

// How a block's final stores reach diff_src. The *_or_streaming kinds
// choose per call: non-temporal stores, which bypass the caches (whole
// aligned vectors only), when DataKernelArgs::streaming is set, else the
// other kind; one kernel serves both (the executor streams only into a
// 64-byte-aligned diff_src, known at execute), so creation builds one.
enum class DataStore : int32_t {
    plain = 0,
    plain_or_streaming = 1,
    prefetched = 2,  // before its FMAs, each block prefetches its diff_src lines for writing
    prefetched_or_streaming = 3,
};
inline bool store_may_stream(int32_t store) { return store & 1; }
inline bool store_prefetches(int32_t store) { return store & 2; }

// Depthwise bf16_dot with G = 1 (DataKernelDesc::row_pairs): how the two
// rows of a pair become dword pairs.
enum class DataRowPairs : int32_t {
    none = 0,
    permute = 1,  // row into the low half, partner into the high half, vpermw (needs the index register)
    expand = 2,   // row zero-extended, partner vpexpandw'ed into the odd words (AVX512_VBMI2; no index)
};

enum class DataCompute : int32_t {
    f32 = 0,       // f32 in, f32 FMA
    widen = 1,     // bf16 / f16 diff_dst widened to f32 (per entry, or per load for depthwise), f32 FMA
    bf16_dot = 2,  // vdpbf16ps on pairs of oc (direct, and depthwise lane groups; avx512_core_bf16)
};

// Depthwise taps one at a time or in groups (DataKernelDesc::tap_seq): a
// run of at least kDataSeqLoopTaps consecutive taps (whole groups) over the
// same pixels of a block (every tap of a block away from the W edges) runs
// in a loop of kDataSeqLoopUnroll taps (or one group) a trip instead of
// unrolled. Against the taps unrolled (one at a time; Intel Xeon, 2
// threads, min of 5, f32 / bf16 / f16): QuartzNet's
// 1D kernels of 33-87 taps 0.98-1.55x (87 taps at dilation 2: 1.55x f32,
// 1.22x bf16), the other kernels of 9-31 taps 0.93-1.09x (unchanged ones
// read 0.85-1.14x); the code 3-9 times smaller (63 taps 168 -> 28 KB, 87
// taps 486 -> 50 KB), so cold creation (at some 40-70 ns an instruction
// emitted) 2-9 times faster. Four taps a trip measured as two.
inline constexpr int kDataSeqLoopTaps = 8;
inline constexpr int kDataSeqLoopUnroll = 2;

// Only what changes the emitted bytes. All fields are 4 or 8 bytes, ordered
// so that the struct has no padding (the cache key is its raw bytes; the
// builder also zero-fills it).
struct DataKernelDesc {
    int32_t isa = 0;      // Isa
    int32_t kind = 0;     // DataKernelKind
    int32_t m = 1;        // pixels per block
    int32_t n = 1;        // vectors of channels per block
    int32_t tail = 0;     // valid lanes of the last vector, 0 = all
    int32_t oc_unroll = 1;        // direct: oc steps (bf16_dot: oc pairs) per loop trip
    int32_t bcast_in_fma = 0;     // direct, AVX-512: {1toN} memory operand instead of a bcast register
    int32_t compute = 0;          // DataCompute
    int32_t in_dt = 0;            // data_type of diff_dst
    int32_t out_dt = 0;           // data_type of the final store
    int32_t store = 0;            // DataStore of the final stores
    // Depthwise: W taps per entry (a kh row's kw taps, tap k reading the
    // pixel tap_dil·k before tap 0's and the W tap w_tap_step·k after tap
    // 0's: a unit W stride's KW taps, or under a W stride s the taps of one
    // phase, s kw apart and one pixel apart), each diff_dst vector loaded
    // once for all of them; 1 = one tap per entry.
    int32_t row_taps = 1;
    int32_t tap_dil = 1;
    int32_t w_tap_step = 1;
    // Depthwise bf16_dot with G = 1: entries come in pairs, the second one's
    // dd being the partner kh row of the first (the same pixels, kh + d),
    // or null for a row without one; the kernel interleaves the two rows'
    // bf16 channels into dword pairs (DataRowPairs; a row alone:
    // zero-extended)
    // against W packed as (W[kh], W[kh + d]) pairs (alone: (W[kh], 0)).
    int32_t row_pairs = 0;        // DataRowPairs
    int32_t lane_group = 1;       // depthwise: channels per group G, see the top of this file
    // Direct: lines of the next block's diff_dst prefetched per trip of the
    // oc loop (prefetch_next_block), enough that a whole oc chunk's trips
    // cover the next block's m pixels.
    int32_t pf_lines = 1;
    // Direct with row_taps > 1 (row blocks: a block is a whole diff_src
    // row, all its W stride phases): an entry is a kh row of row_taps kw
    // taps, tap k's W w_tap_bytes·k after tap 0's. Block pixel j's tap k
    // reads diff_dst pixel x of a row of row_w pixels where
    // row_stride·x = j + row_x0 - tap_dil·k, at the entry's dd plus
    // (x - row_x0) pixels: the (j, k) with no such x inside the row are
    // left out at generation (the W edges and the stride compiled in), and
    // each pixel is broadcast once per oc for every tap that reads it.
    // Depthwise with row_w > 0: the same for the pixels of a whole W phase
    // of a row, read in place (no zero-padded copy): block b's pixel j,
    // tap k reads x = b·m + j + row_x0 - tap_dil·k. A call runs the row's
    // row_nblocks full blocks and its tail_m pixels (the args' nblocks and
    // tail are not read); the blocks whose taps reach past either end of
    // the row are emitted one by one, those loads and FMAs left out, the
    // others run in a loop.
    int32_t row_x0 = 0;
    int32_t row_w = 0;
    // Direct row taps: a block is block_rows consecutive diff_src rows of
    // m / block_rows pixels (contiguous in diff_src), row r reading the
    // diff_dst row dd_block_bytes / block_rows after row 0's (the next row
    // of the padded slab); the rows share the entries (the same kh taps).
    int32_t block_rows = 1;
    // Pixels of one more block after the nblocks full ones (0: none): a
    // row's partial last block, run in the same rep so that each channel
    // block of a run finishes its row before the next one starts.
    int32_t tail_m = 0;
    int32_t row_nblocks = 0;      // depthwise W edges (row_w > 0): full blocks a row
    // Depthwise with row_taps > 1: 0, every tap's W vectors in registers
    // at once; else the taps in groups of tap_seq one group after another,
    // each group's W vectors in tap_seq·n W registers and every diff_dst
    // vector the group reads loaded for it (1: one tap at a time; row_taps
    // carries the taps' offsets, and with them the W edges).
    int32_t tap_seq = 0;
    int32_t row_stride = 1;       // direct row taps: the W stride (see row_x0)
    // Direct row taps: W bytes between taps k and k+1. Depthwise (G = 1):
    // nonzero, W read in place in in_dt (16-bit: widened as loaded), tap
    // k's vectors k·w_tap_step·w_tap_bytes after tap 0's; 0, packed (f32
    // or bf16 pairs, n vectors a tap).
    int64_t w_tap_bytes = 0;
    int64_t dd_pix_bytes = 0;     // diff_dst bytes between pixels j and j+1
    int64_t dst_pix_bytes = 0;    // final diff_src bytes between pixels j and j+1 (acc: the same in f32)
    int64_t cvt_pix_bytes = 0;    // widen, direct: f32 scratch bytes between pixels
    int64_t dd_block_bytes = 0;   // diff_dst bytes between blocks (m pixels of a row, or a whole row)
};
static_assert(sizeof(DataKernelDesc) == 136, "DataKernelDesc must have no padding");

// The element types and compute form of a kernel; f32 by default.
struct DataKernelTypes {
    DataCompute compute = DataCompute::f32;
    data_type in = data_type::f32, out = data_type::f32;
    int64_t cvt_pix_bytes = 0;
    // *_or_streaming: non-temporal moves in the calls that set
    // DataKernelArgs::streaming; every vector store must then cover whole
    // 64-byte-aligned halves or lines of diff_src (the executor checks the
    // alignment), and the caller must sfence before others read it.
    // prefetched: PREFETCHW of every line the block will store, issued before
    // the block's FMAs, so the lines' reads for ownership overlap them (not
    // in the calls that stream).
    DataStore store = DataStore::plain;
    int row_taps = 1, tap_dil = 1, w_tap_step = 1;  // depthwise, direct row taps: see DataKernelDesc
    int row_x0 = 0, row_w = 0;      // direct row taps, depthwise W edges: see DataKernelDesc
    int row_nblocks = 0;            // depthwise W edges: see DataKernelDesc
    int tap_seq = 0;                // depthwise: see DataKernelDesc
    int64_t w_tap_bytes = 0;        // direct row taps: see DataKernelDesc
    int block_rows = 1;             // direct row taps: see DataKernelDesc
    int tail_m = 0;                 // see DataKernelDesc
    int row_stride = 1;             // direct row taps: see DataKernelDesc
    int lane_group = 1;             // depthwise: see DataKernelDesc
    DataRowPairs row_pairs = DataRowPairs::none;  // depthwise: see DataKernelDesc
    int pf_lines = 1;               // direct: see DataKernelDesc
};

DataKernelDesc make_data_desc(Isa isa, DataKernelKind kind, int m, int n, int tail, int oc_unroll,
                              bool bcast_in_fma, int64_t dd_pix_bytes, int64_t dst_pix_bytes,
                              const DataKernelTypes& types = {}, int64_t dd_block_bytes = 0);
std::string to_string(const DataKernelDesc& d);

// Vector registers a desc needs (accumulators, weights, temporaries, AVX2 mask).
int data_kernel_vregs(const DataKernelDesc& d);
// ... of them the W vectors (n a tap held at once).
inline int data_kernel_w_vregs(const DataKernelDesc& d) { return (d.tap_seq ? d.tap_seq : d.row_taps) * d.n; }

// Direct row taps: the pixel of an m-pixel block that tap k of diff_dst
// pixel x adds to, or -1 (see DataKernelDesc::row_x0, tap_dil and
// row_stride). The generator leaves the other (pixel, tap) pairs out, and
// the planner's cost counts the same pairs.
inline int data_row_tap_pixel(int x, int k, int row_x0, int tap_dil, int m, int stride = 1) {
    const int j = x * stride - row_x0 + k * tap_dil;
    return j >= 0 && j < m ? j : -1;
}

struct DataEntry {
    const void* dd;  // diff_dst: pixel 0 of block 0 at the chunk's first oc / channel
    const void* w;   // packed weights: this tap, this channel block, the chunk's first oc
};

// Runtime arguments, passed by pointer.
struct DataKernelArgs {
    const DataEntry* entries = nullptr;
    int64_t nentries = 0;
    int64_t noc = 0;          // direct: oc count of the chunk (bf16_dot: may be odd)
    void* dst = nullptr;      // diff_src (NXC, out_dt): pixel 0 of block 0, first channel of the block
    int64_t nblocks = 0;
    int64_t accumulate = 0;   // nonzero: continue the f32 sums in acc
    float* acc = nullptr;     // f32 partial sums, dst's layout in f32 (f32: the same as dst)
    int64_t store_final = 1;  // nonzero: store to dst rounded to out_dt; else f32 to acc
    float* cvt = nullptr;     // widen, direct: m × cvt_pix_bytes of f32 scratch (64-byte aligned)
    // The call runs the whole block range nreps times, rep r with every
    // entry's dd and W and the dst / acc pointers advanced by r times these
    // byte steps: the next channel blocks (or groups) of the same row,
    // read through the same entries.
    int64_t nreps = 1;
    int64_t dd_rep_bytes = 0, w_rep_bytes = 0, dst_rep_bytes = 0, acc_rep_bytes = 0;
    // Zero: the call leaves out the desc's partial block (tail_m), a row
    // segment that ends before its phase does (DataPlan::segments).
    int64_t tail = 1;
    // Depthwise W edges (rows read in place): entry 0's diff_dst pointer
    // one row further on (the row the next diff_src row reads first), whose
    // lines under each block's pixels the block prefetches to L2; null: none.
    const void* dd_pf = nullptr;
    // Nonzero (a desc's *_or_streaming store): the final stores to dst are
    // non-temporal, dst 64-byte aligned; zero: the desc's other kind.
    int64_t streaming = 0;
};

class DataKernel final : public JitKernel {
public:
    explicit DataKernel(const DataKernelDesc& d);
    using Fn = void (*)(const DataKernelArgs*);
    void operator()(const DataKernelArgs& a) const { fn_(&a); }
    const DataKernelDesc& desc() const { return d_; }
    void finalize() { fn_ = entry<Fn>(); }

private:
    void generate() override;
    void block_loop();
    void edge_row();
    void prefetch_next_row();
    void next_block();
    void block_body();
    void init_accumulators();
    void entry_loop();
    void oc_loop();
    void oc_step(int u);
    void prefetch_next_block();
    void odd_oc_step();
    void oc_step_row_taps(int i);
    bool direct_row_taps() const { return d_.kind == int32_t(DataKernelKind::direct) && d_.row_taps > 1; }
    bool dw_edges() const { return d_.kind == int32_t(DataKernelKind::depthwise) && d_.row_w > 0; }
    // Depthwise W edges: whether the block being emitted reads diff_dst
    // pixel q (q = j - tap_dil·k of its tap-0 pixel 0, see
    // DataKernelDesc::row_x0) inside the row; always true in the loop.
    bool dw_pixel_inside(int q) const {
        if (edge_px0_ == kInteriorBlock) return true;
        const int x = d_.row_x0 + edge_px0_ + q;
        return x >= 0 && x < d_.row_w;
    }
    // Direct: the block pixel tap k of diff_dst pixel x adds to (-1: none;
    // see DataKernelDesc::row_x0; one tap per entry: pixel x itself).
    // Direct row taps: pixels of one diff_src row of a block, and the
    // diff_dst bytes between a block's rows (DataKernelDesc::block_rows).
    int row_pixels() const { return d_.m / d_.block_rows; }
    int64_t block_row_dd_bytes() const { return d_.dd_block_bytes / d_.block_rows; }
    int row_tap_pixel(int x, int k) const {
        return data_row_tap_pixel(x, k, d_.row_x0, d_.tap_dil, row_pixels(), d_.row_stride);
    }
    void widen_entry();
    void widen_tail(const Xbyak::Label& done);
    // How a depthwise pass reads diff_dst: one row (permuted for lane
    // groups), the interleaved rows of a row pair, or a row zero-extended
    // into dword pairs (row_pairs, a row without a partner).
    enum class DwRows { one, pair, alone };
    void depthwise_taps();
    void depthwise_row_pairs();
    void depthwise_lane_group(int o, DwRows rows = DwRows::one);
    void load_lane_group(const Xbyak::Xmm& t, int disp, int o, bool tail);
    void load_pairs(const Xbyak::Xmm& t, int disp, bool tail);
    void load_row_pair(const Xbyak::Xmm& t, int disp, bool tail, DwRows rows);
    // Depthwise: bytes from an entry's W to its tap k's.
    int64_t dw_w_tap(int k) const;
    // Depthwise passes per entry: G output channels, or G / 2 pairs (bf16_dot
    // lane groups; row pairs: one).
    int lane_group_passes() const { return dot() && d_.lane_group > 1 ? d_.lane_group / 2 : d_.lane_group; }
    // Depthwise: the permutation index (lane groups of 8+, bf16_dot pairs),
    // the register after the two diff_dst temporaries.
    // Loaded once in the prologue: placed after the full blocks' registers
    // (index_m_, the desc's m) also while a partial block's body is emitted.
    Xbyak::Xmm index_vreg() const { return vi_.vreg(index_m_ * d_.n + w_vregs() + 2); }
    int w_vregs() const { return data_kernel_w_vregs(d_); }
    // A lane group fills the vector and f32 diff_dst: perm_o is a broadcast load.
    bool bcast_lane_group() const { return d_.lane_group == vi_.vlen() && in_dt() == data_type::f32; }
    // ... and one tap per entry (no broadcast to share between taps), f32 or
    // bf16 pairs on AVX-512: the broadcast goes inside the FMA / vdpbf16ps
    // (on AMD Zen 4 a separate broadcast per FMA ran at about half the rate).
    bool embedded_lane_group() const {
        return d_.lane_group == vi_.vlen() && d_.row_taps == 1 && d_.tail == 0 && vi_.avx512() &&
               (in_dt() == data_type::f32 || dot());
    }
    void prefetch_block_dst();
    void store_accumulators();
    void store_final();
    void store_block(bool to_dst, bool nt);

    bool dot() const { return d_.compute == int32_t(DataCompute::bf16_dot); }
    bool widen_direct() const {
        return d_.compute == int32_t(DataCompute::widen) && d_.kind == int32_t(DataKernelKind::direct);
    }
    data_type in_dt() const { return static_cast<data_type>(d_.in_dt); }
    data_type out_dt() const { return static_cast<data_type>(d_.out_dt); }
    // Bytes between the broadcast diff_dst values of pixels j and j+1.
    int64_t bcast_pix_bytes() const { return widen_direct() ? d_.cvt_pix_bytes : d_.dd_pix_bytes; }

    DataKernelDesc d_;  // d_.m is the partial block's while its body is emitted (block_loop)
    int index_m_ = 1;   // the full blocks' m
    // Depthwise W edges: the row pixel of the emitted block's pixel 0, or
    // kInteriorBlock while the loop's body (or any other kernel) is emitted.
    static constexpr int kInteriorBlock = INT_MIN;
    int edge_px0_ = kInteriorBlock;
    VecIsa vi_;
    VecCvt cvt_;
    Fn fn_ = nullptr;
};

// The process-wide cache: builds on a miss, never caches a failed build.
std::shared_ptr<const DataKernel> get_data_kernel(const DataKernelDesc& d, bool* hit = nullptr);

}  // namespace convgrad::detail
