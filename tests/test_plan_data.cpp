// The data-gradient planner: golden plan text and properties.
#include <catch2/catch.hpp>
#include <algorithm>
#include <climits>
#include <random>
#include <string>
#include <vector>

#include "jit/bwd_data_kernel.hpp"
#include "ops/plan_data.hpp"

namespace {

using namespace convgrad;
using namespace convgrad::detail;

// A square 2D NXC/XIO problem at mb = 32 given like a benchdnn line.
Problem square(int64_t g, int64_t ic, int64_t oc, int64_t ih, int64_t k, int64_t s, int64_t p, int64_t oh,
               data_type dt = data_type::f32) {
    attributes a;
    a.strides = {s, s};
    a.pads_begin = {p, p};
    const int64_t pe = std::max<int64_t>(0, (oh - 1) * s + k - ih - p);
    a.pads_end = {pe, pe};
    a.groups = g;
    a.dst_shape = {32, ih, ih, ic};
    return make_problem(op_kind::conv_bwd_data, dt, a, {32, oh, oh, oc}, {k, k, ic / g, oc}, nullptr);
}

DataPlan plan_of(const Problem& p, Isa isa, int threads) {
    DataPlan pl;
    std::string why;
    REQUIRE(make_data_plan(p, isa, threads, &pl, &why));
    return pl;
}

}  // namespace

TEST_CASE("data plan: golden text", "[jit][data][plan]") {
    CHECK(plan_of(square(1, 64, 64, 56, 3, 1, 1, 56), Isa::avx512_core, 2).to_string() ==
          "jit:avx512_core direct m4 n4x16 threads 2\n"
          "  for row in 1792 (n, id, ih) rows  [items split over threads]\n"
          "    for cb in 1 (64 channels/group, tail 4 vec 0 lanes)\n"
          "      for oc chunk of 64\n"
          "        for W phase in 1, block of 4 pixels (zero-padded rows)\n"
          "          for valid tap (kd, kh, kw): for oc: 4 W loads, 4 bcasts, 16 FMAs\n");
    CHECK(plan_of(square(1, 3, 64, 224, 7, 2, 3, 112), Isa::avx512_core, 2).to_string() ==
          "jit:avx512_core col m4 n5x16 threads 2\n"
          "  for row in 7168 (n, id, ih) rows, split over threads\n"
          "    for dd row touching it, g, 48-pixel chunk\n"
          "      for lane block in 2 (147 (tap, ic) lanes, tail 5 vec)\n"
          "        for 4-pixel block: for oc in 64: 5 W loads, 4 bcasts, 20 FMAs\n"
          "      col2im: add columns into diff_src rows\n");
    CHECK(plan_of(square(32, 32, 32, 112, 3, 1, 1, 112), Isa::avx512_core, 2).to_string() ==
          "jit:avx512_core depthwise m12 n2x16 threads 2\n"
          "  for row in 3584 (n, id, ih) rows  [items split over threads]\n"
          "    for cb in 1 (32 channels/group, tail 2 vec 0 lanes)\n"
          "      for oc chunk of 1\n"
          "        for W phase in 1, block of 12 pixels (W edges compiled in, rows read in place, the next one "
          "prefetched to L2), streaming stores\n"
          "          for valid tap (kd, kh, kw): per kh: 6 W loads, 28 dd loads, 72 FMAs\n");
    // ResNet-50 res4b_branch2a in bf16: a dozen blockings tie at the FMA
    // bound; the tie goes to the fewest loads per FMA with W in L1 (m6 x n4,
    // 32 KiB a channel block), not to m4 x n6 (48 KiB, from L2).
    CHECK(plan_of(square(1, 1024, 256, 14, 1, 1, 0, 14, data_type::bf16), Isa::avx512_core_bf16, 2).to_string().rfind(
                  "jit:avx512_core_bf16 direct m6 n4x16 bf16 vdpbf16ps on oc pairs threads 2\n", 0) == 0);
    // bf16 depthwise on kh row pairs (MobileNetV2 b2, 144 channels at
    // 56x56): blocks of 48 channels split lines, so no streaming stores.
    CHECK(plan_of(square(144, 144, 144, 56, 3, 1, 1, 56, data_type::bf16), Isa::avx512_core_bf16, 2).to_string() ==
          "jit:avx512_core_bf16 depthwise m6 n3x16 bf16 vdpbf16ps on kh row pairs (kh, kh+1) threads 2\n"
          "  for row in 1792 (n, id, ih) rows  [items split over threads]\n"
          "    for cb in 3 (144 channels/group, tail 3 vec 0 lanes), up to 3 a call\n"
          "      for oc chunk of 1\n"
          "        for W phase in 1, block of 6 pixels (W edges compiled in, rows read in place, the next one "
          "prefetched to L2), diff_src lines prefetched for writing\n"
          "          for valid tap (kd, kh, kw): per kh pair: 9 W loads, 24 dd pairs (2 loads + vpermw; a kh alone: "
          "vpmovzxwd), 54 FMAs\n");
    // RegNetX-400MF stage 4: 24 groups of 16 at 7x7. One vector per group,
    // two whole rows a block (14 accumulator chains instead of 7), a kh
    // row's taps per entry, every group of a plane in one call; the column
    // path's col2im (a masked read-modify-write per group and tap) costs
    // more.
    CHECK(plan_of(square(24, 384, 384, 7, 3, 1, 1, 7), Isa::avx512_core, 2).to_string() ==
          "jit:avx512_core direct m14 n1x16 threads 2\n"
          "  for group in 32 groups of 7 of the 224 (n, id, ih) rows  [items split over threads]\n"
          "    for cb in 24 (16 channels/group, tail 1 vec 0 lanes), up to 24 a call\n"
          "      for oc chunk of 16, row in group\n"
          "        for W phase in 1, block of 14 pixels = 2 rows, rows of a plane sharing their taps in one call "
          "(zero-padded rows)\n"
          "          for valid (kd, kh) row: for oc: 3 W loads, 14 bcasts, 38 FMAs (W edges compiled in)\n");
    // ResNeXt-50's grouped 3x3 layers: 32 groups of 8 (stride 2) and of 4.
    CHECK(plan_of(square(32, 256, 256, 56, 3, 2, 1, 28), Isa::avx512_core, 2).to_string() ==
          "jit:avx512_core depthwise (lane groups of 8) m5 n4x16 threads 2\n"
          "  for row in 1792 (n, id, ih) rows  [items split over threads]\n"
          "    for cb in 4 (256 channels/group, tail 4 vec 0 lanes), up to 4 a call\n"
          "      for oc chunk of 8\n"
          "        for W phase in 2, block of 5 pixels (W edges compiled in, rows read in place, the next one "
          "prefetched to L2), streaming stores\n"
          "          for valid tap (kd, kh, kw): per kh, up to 2 taps of the phase: for o in 8: 8 W loads, 24 permuted "
          "dd loads, 40 FMAs\n");
    CHECK(plan_of(square(32, 128, 128, 56, 3, 1, 1, 56), Isa::avx2, 2).to_string() ==
          "jit:avx2 depthwise (lane groups of 4) m10 n1x8 threads 2\n"
          "  for row in 1792 (n, id, ih) rows  [items split over threads]\n"
          "    for cb in 16 (128 channels/group, tail 1 vec 0 lanes), up to 16 a call\n"
          "      for oc chunk of 4\n"
          "        for W phase in 1, block of 10 pixels (W edges compiled in, rows read in place, the next one "
          "prefetched to L2), diff_src lines prefetched for writing\n"
          "          for valid tap (kd, kh, kw): per kh: for o in 4: 3 W loads, 12 permuted dd loads, 30 FMAs\n");
    CHECK(plan_of(square(1, 64, 64, 56, 3, 1, 1, 56), Isa::avx2, 2).to_string() ==
          "jit:avx2 direct m6 n2x8 threads 2\n"
          "  for row in 1792 (n, id, ih) rows  [items split over threads]\n"
          "    for cb in 4 (64 channels/group, tail 2 vec 0 lanes), up to 4 a call\n"
          "      for oc chunk of 64\n"
          "        for W phase in 1, block of 6 pixels (zero-padded rows)\n"
          "          for valid tap (kd, kh, kw): for oc: 2 W loads, 6 bcasts, 12 FMAs\n");
}

// The oc loop's trips prefetch the next block's diff_dst: over one chunk
// they cover its m pixels (MobileNetV2's 16 <- 96 expansion at 112x112,
// m16: 2 lines a trip), one line where a trip already does (ResNet-50's
// 64 <- 256), and one line where the chunk is not the whole pixel.
TEST_CASE("data plan: strided depthwise layers within L3 keep ordinary stores", "[jit][data][plan]") {
    // Outputs of 4 MiB or more with few FMAs a byte stream their stores,
    // except strided depthwise layers (no D stride) whose diff_dst and
    // diff_src fit in L3 (32 MiB; AVX2: 8 MiB, kDwCachedBytesAvx2): those
    // prefetch each block's lines for writing and store them into the cache.
    struct Expect {
        Problem p;
        const char* what;
        bool streaming, streaming_avx2;
    };
    const std::vector<Expect> cases = {
        // (AVX2: blocks of 56 channels, 224 bytes, split lines: no streaming either)
        {square(576, 576, 576, 14, 3, 2, 1, 7), "MobileNetV2 b13 f32: 18 MB", false, false},
        {square(576, 576, 576, 14, 3, 2, 1, 7, data_type::bf16), "... bf16: 9 MB", false, false},
        {square(192, 192, 192, 28, 3, 2, 1, 14), "b6 f32: 24 MB", false, true},
        {square(168, 168, 168, 14, 3, 2, 1, 7), "168 channels 14 -> 7 f32: 5.3 MB", false, false},
        {square(144, 144, 144, 56, 3, 2, 1, 28), "b3 f32: 72 MB", true, true},
        {square(576, 576, 576, 14, 3, 1, 1, 14), "b11 (unit stride) f32: 29 MB", true, true},
        {square(32, 256, 256, 56, 3, 2, 1, 28), "ResNeXt-50 groups of 8, s2: 128 MB", true, true},
    };
    for (const Expect& e : cases)
        for (const Isa isa : {Isa::avx512_core, Isa::avx2}) {
            const bool streaming = isa == Isa::avx2 ? e.streaming_avx2 : e.streaming;
            const std::string text = plan_of(e.p, isa, 2).to_string();
            INFO(e.what << "\n" << text);
            CHECK((text.find("streaming stores") != std::string::npos) == streaming);
            if (!streaming) CHECK(text.find("diff_src lines prefetched for writing") != std::string::npos);
        }
}

TEST_CASE("data plan: groups narrower than a line keep ordinary stores", "[jit][data][plan]") {
    // RegNetX-400MF s2's grouped 3x3 s2 layer (groups of 16 at 56 -> 28,
    // 25 MB of f32 diff_src at mb 32): each group's pixels are a rep of their
    // own, so a 16-bit group's 32 bytes stream half a line at a time while
    // f32 groups of 16 fill their lines.
    const Problem f32 = square(4, 64, 64, 56, 3, 2, 1, 28);
    const Problem f16 = square(4, 64, 64, 56, 3, 2, 1, 28, data_type::f16);
    const DataPlan a = plan_of(f32, Isa::avx512_core, 2), b = plan_of(f16, Isa::avx512_core, 2);
    INFO(a.to_string() << b.to_string());
    CHECK(a.path == DataPath::direct);
    CHECK(b.path == DataPath::direct);
    CHECK(a.nt_store);
    CHECK_FALSE(b.nt_store);
    // Groups of 32 fill a line in 16 bits too.
    CHECK(plan_of(square(4, 128, 128, 56, 3, 2, 1, 28, data_type::f16), Isa::avx512_core, 2).nt_store);
}

TEST_CASE("data plan: prefetch lines cover the next block", "[jit][data][plan]") {
    for (data_type dt : {data_type::f32, data_type::bf16}) {
        const Isa isa = dt == data_type::f32 ? Isa::avx512_core : Isa::avx512_core_bf16;
        for (const Problem& p : {square(1, 16, 96, 112, 1, 1, 0, 112, dt), square(1, 64, 256, 56, 1, 1, 0, 56, dt),
                                 square(1, 64, 64, 56, 3, 1, 1, 56, dt)}) {
            INFO(p.to_string());
            const DataPlan pl = plan_of(p, isa, 2);
            INFO(pl.to_string());
            const int64_t steps = pl.blk.oc_unroll * (dt == data_type::bf16 ? 2 : 1);
            const int64_t trips = pl.oc_chunk / steps, lines = (pl.blk.m * pl.dd_pitch + 63) / 64;
            CHECK(pl.types.pf_lines * trips >= lines);
            CHECK((pl.types.pf_lines - 1) * trips < lines);  // no more than that
        }
        const DataPlan grouped = plan_of(square(24, 384, 384, 7, 3, 1, 1, 7, dt), isa, 2);
        CHECK(grouped.types.pf_lines == 1);
    }
}

TEST_CASE("data plan: properties over random problems", "[jit][data][plan]") {
    std::mt19937 gen(7);
    auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(gen); };
    int direct_row_taps = 0, strided_row_taps = 0;
    for (int iter = 0; iter < 300; ++iter) {
        const int64_t g = pick(0, 3) == 0 ? pick(2, 4) : 1;
        const bool dw = pick(0, 4) == 0;
        const int64_t lane_group = dw ? int64_t(1) << pick(0, 4) : 0;  // G of 1, 2, 4, 8, 16
        const int64_t icg = dw ? lane_group : pick(1, 80), ocg = dw ? lane_group : pick(1, 600);
        const int64_t groups = dw ? pick(1, 40) : g;
        const int64_t k = pick(1, 7), s = pick(1, 4), ih = pick(1, 30), p = pick(0, k);
        const int64_t oh = (ih + 2 * p - k) / s + 1;
        if (ih + 2 * p < k) continue;
        attributes a;
        a.strides = {s, s};
        a.pads_begin = a.pads_end = {p, p};
        a.groups = groups;
        a.dst_shape = {2, ih, ih, icg * groups};
        const Problem pr = make_problem(op_kind::conv_bwd_data, data_type::f32, a, {2, oh, oh, ocg * groups},
                                        {k, k, icg, ocg * groups}, nullptr);
        for (Isa isa : {Isa::avx512_core, Isa::avx2}) {
            INFO(pr.to_string() << " " << isa_name(isa));
            const DataPlan pl = plan_of(pr, isa, 3);
            const DataChannelBlocks& cb = pl.cb;
            // Register budget of every kernel the plan can emit.
            const int nregs = isa == Isa::avx2 ? 16 : 32;
            const auto kind = pl.path == DataPath::depthwise ? DataKernelKind::depthwise : DataKernelKind::direct;
            // Equal channels per group of 1, 2, 4 or 8 always take the lane
            // groups; 16 only for bf16 oc pairs with a W stride.
            const bool g16 = icg == 16 && s > 1 && isa >= Isa::avx512_core_bf16 && pr.dt == data_type::bf16;
            const bool lanes = icg == ocg && (icg == 1 || (groups > 1 && (icg == 2 || icg == 4 || icg == 8 || g16)));
            CHECK(lanes == (pl.path == DataPath::depthwise));
            CHECK(pl.lane_group == (lanes ? icg : 1));
            DataKernelTypes types = pl.types;
            types.lane_group = pl.lane_group;
            if (pl.dw_row_taps) {  // a phase's taps: all KW with a unit W stride (one at a time: tap_seq)
                types.row_taps = static_cast<int>((pl.geo.k[2] + pl.geo.stride[2] - 1) / pl.geo.stride[2]);
                types.tap_seq = pl.dw_tap_seq ? pl.dw_tap_group : 0;
            }
            CHECK((!pl.dw_tap_seq || pl.dw_row_taps));
            if (pl.direct_row_taps) {  // whole rows, a kh row's KW taps per entry, one broadcast register
                CHECK(pl.row_blocks);
                CHECK(pl.path == DataPath::direct);
                CHECK(pl.types.compute != DataCompute::widen);
                CHECK(!pl.blk.bcast_in_fma);
                types.row_taps = static_cast<int>(pl.geo.k[2]);
                types.row_w = static_cast<int>(pl.geo.out[2]);
                types.row_stride = static_cast<int>(pl.geo.stride[2]);
                // Rows of at most 28 pixels (16 at unit strides with more
                // than one row a block); under an H stride a block of one
                // row (each row its own kh taps).
                CHECK(pl.geo.in[2] <= 28);
                if (pl.block_rows() > 1) CHECK(pl.blk.m <= 16);
                if (pl.geo.stride[1] > 1) CHECK(pl.block_rows() == 1);
                if (pl.geo.stride[1] > 1 || pl.geo.stride[2] > 1) ++strided_row_taps;
                ++direct_row_taps;
            }
            for (int m = 1; m <= pl.blk.m; ++m) {
                CHECK(data_kernel_vregs(make_data_desc(isa, kind, m, pl.blk.n, 0, pl.blk.oc_unroll,
                                                       pl.blk.bcast_in_fma, 0, 0, types)) <= nregs);
                CHECK(data_kernel_vregs(make_data_desc(isa, kind, m, cb.tail_n, cb.tail_lanes, pl.blk.oc_unroll,
                                                       pl.blk.bcast_in_fma, 0, 0, types)) <= nregs);
            }
            // Channel blocks cover the lanes exactly once, tails included.
            const int64_t covered = (cb.per_group - 1) * cb.block + (cb.tail_lanes ? (cb.tail_n - 1) * cb.vlen + cb.tail_lanes
                                                                                   : cb.tail_n * cb.vlen);
            if (pl.path == DataPath::col)
                CHECK(cb.padded() >= cb.lanes);
            else
                CHECK(covered == cb.lanes);
            CHECK(cb.tail_n <= pl.blk.n);
            // oc chunks tile the reduction.
            CHECK(pl.oc_chunk >= 1);
            CHECK(pl.oc_chunk <= pr.ocg);  // depthwise: all G of a lane group in one pass
            // Scratch: packed W holds every lane of every block and tap;
            // W read in place (depthwise f32, whole vectors): none.
            const int64_t per_block_rows = pl.path == DataPath::col ? pr.ocg : pr.k_sp() * pr.ocg;
            if (pl.w_in_place) {
                CHECK(pl.path == DataPath::depthwise);
                CHECK(pr.dt == data_type::f32);
                CHECK(cb.tail_lanes == 0);
                CHECK(pl.scratch.wpack_elems == 0);
            } else {
                CHECK(pl.scratch.wpack_elems == (lanes ? 1 : pr.g) * cb.padded() * per_block_rows);
            }
            // Padded diff_dst pixels: OC f32 elements, one line more when spread out of an L1 set.
            if (pl.padded_rows) CHECK(pl.dd_pitch == pr.oc() * 4 + (pl.dd_pitch_spread ? 64 : 0));
            if (pl.row_blocks) {  // whole rows as blocks; a slab holds the plane; W chunks fit L1 (row taps: L2)
                // A row a block, or with row taps several rows of the plane.
                CHECK(pl.blk.m % pl.geo.in[2] == 0);
                CHECK(pl.block_rows() == pl.blk.m / pl.geo.in[2]);
                CHECK((pl.block_rows() == 1 || (pl.direct_row_taps && pl.block_rows() <= pl.geo.in[1])));
                CHECK(pl.group_rows == pl.geo.in[1]);
                CHECK(pl.scratch.slab_bytes == pl.geo.out[1] * pl.scratch.row_bytes);
                const int64_t w_budget = (pl.direct_row_taps ? 256 : 32) * 1024;  // row taps: from L2
                CHECK((pl.oc_chunk * pr.k_sp() * pl.blk.lanes() * 4 <= w_budget || pl.oc_chunk <= pl.blk.oc_unroll));
            } else if (pl.padded_rows) {  // a row with both pads; more slots than one item's rows
                CHECK(pl.scratch.row_bytes == (pl.pad_left + pl.geo.out[2] + pl.pad_right) * pl.dd_pitch);
                CHECK(pl.scratch.row_slots > pr.k[0] * pr.k[1]);
            }
            // Threads: contiguous item ranges that tile [0, items) exactly once.
            const int64_t groups = (pl.rows + pl.group_rows - 1) / pl.group_rows;
            CHECK(pl.grid.items == (pl.path == DataPath::col ? pl.rows : groups * pl.cb_runs()));
            // Runs of channel blocks tile [0, total) in order; a run holds
            // blocks of one group that share a kernel, at most cb_reps: the
            // groups of a direct plan with one block a group, a depthwise
            // plan's blocks (a narrower last one alone), a group's blocks
            // whose W chunks fit 640 KiB together, else single blocks.
            CHECK(pl.cb_reps >= 1);
            if (pl.path == DataPath::col || (pl.path == DataPath::direct && pr.g == 1 && cb.per_group == 1))
                CHECK(pl.cb_reps == 1);
            if (pl.path == DataPath::direct && cb.per_group > 1) {
                const int64_t chunk_bytes = cb.block * pr.k_sp() * pl.oc_chunk * pl.w_elem_bytes;
                CHECK((pl.cb_reps == 1 || pl.cb_reps * chunk_bytes <= 640 * 1024));
                CHECK(pl.cb_reps <= cb.per_group);
            }
            int64_t next_cb = 0;
            for (int64_t r = 0; r < pl.cb_runs(); ++r) {
                const auto [c0, c1] = pl.cb_run(r);
                CHECK(c0 == next_cb);
                CHECK(c1 > c0);
                CHECK(c1 - c0 <= pl.cb_reps);
                if (cb.per_group > 1) {
                    CHECK(c0 / cb.per_group == (c1 - 1) / cb.per_group);
                    const bool narrow_last = cb.tail_n != pl.blk.n || cb.tail_lanes != 0;
                    if (narrow_last && c1 % cb.per_group == 0) CHECK(c1 - c0 == 1);
                }
                next_cb = c1;
            }
            CHECK(next_cb == cb.total);
            int64_t next = 0;
            for (int t = 0; t < pl.grid.threads; ++t) {
                const auto r = pl.grid.range(t);
                CHECK(r.first == next);
                CHECK(r.second >= r.first);
                next = r.second;
            }
            CHECK(next == pl.grid.items);
            // Everything that can change a bit is independent of the thread count.
            const DataPlan one = plan_of(pr, isa, 1);
            CHECK(one.path == pl.path);
            CHECK(one.blk.m == pl.blk.m);
            CHECK(one.blk.n == pl.blk.n);
            CHECK(one.oc_chunk == pl.oc_chunk);
            CHECK(one.padded_rows == pl.padded_rows);
            CHECK(one.group_rows == pl.group_rows);
            CHECK(one.direct_row_taps == pl.direct_row_taps);
        }
    }
    CHECK(direct_row_taps > 0);  // the generator reaches the row-taps form
    CHECK(strided_row_taps > 0);  // ... and under a stride
}

// Where a channel block's W does not stay in L2, a row group holds at
// least 56 diff_src pixels that some kernel tap reaches, so that each
// block's W serves them all: a strided 1x1 layer's rows of inserted zeros
// and its zero pixels do not count.
TEST_CASE("data plan: row groups count the pixels a kernel tap reaches", "[jit][data][plan]") {
    // ResNet-50 res5a_branch1 (1x1 s2, 1024 -> 2048 at 14 -> 7, 8 MiB of W):
    // 7 pixels on every other row, 16 rows a group.
    const DataPlan s2 = plan_of(square(1, 1024, 2048, 14, 1, 2, 0, 7), Isa::avx512_core, 2);
    CHECK(s2.group_rows == 16);
    CHECK(s2.to_string().find("for group in 28 groups of 16 of the 448 (n, id, ih) rows") != std::string::npos);
    // 512 -> 1024 at 28 -> 14: 14 pixels on every other row, 8 rows.
    CHECK(plan_of(square(1, 512, 1024, 28, 1, 2, 0, 14), Isa::avx2, 2).group_rows == 8);
    // A 3x3 s2 layer's taps reach every row and pixel: 56 / 14 -> 4 rows.
    CHECK(plan_of(square(1, 1024, 1024, 14, 3, 2, 1, 7), Isa::avx512_core, 2).group_rows == 4);
    // 1x1 s3 at 21 -> 7: 7 pixels on every third row, 24 rows.
    CHECK(plan_of(square(1, 1024, 1024, 21, 1, 3, 0, 7), Isa::avx512_core, 2).group_rows == 24);
}

TEST_CASE("data plan: the col path's W beyond L2 streams from L3", "[jit][data][plan]") {
    // ViT-B/16's patch embedding (768 <- 16x16x3 s16): each column chunk
    // reads all 2.3 MB of W, so blocks load few W vectors per FMA (m5 x n5
    // loaded one per 5 FMAs and ran 1.4-1.6x slower than m14 x n2).
    for (data_type dt : {data_type::f32, data_type::bf16, data_type::f16}) {
        const DataPlan pl = plan_of(square(1, 3, 768, 224, 16, 16, 0, 14, dt), Isa::avx512_core, 2);
        INFO(dtype_name(dt) << "\n" << pl.to_string());
        REQUIRE(pl.path == DataPath::col);
        CHECK(pl.blk.m >= 8);  // W vectors per FMA: 1 / m
    }
}

TEST_CASE("data plan: a block's broadcast rows fit the L1 sets", "[jit][data][plan]") {
    // diff_dst pixels 1, 2, 4 and 8 KiB apart (256..2048 oc in f32): the m
    // rows a block broadcasts from must not put more lines into one of the
    // 64 L1 sets than 8 ways hold (AVX2 once picked m14 here: 4x slower).
    for (int64_t oc : {256, 512, 1024, 2048})
        for (int64_t s : {1, 2})
            for (Isa isa : {Isa::avx2, Isa::avx512_core}) {
                const int64_t oh = 14, ih = oh * s;
                const DataPlan pl = plan_of(square(1, 512, oc, ih, 1, s, 0, oh), isa, 2);
                INFO("oc " << oc << " stride " << s << " " << isa_name(isa) << "\n" << pl.to_string());
                std::vector<int> lines(64, 0);
                int64_t last = -1;
                for (int j = 0; j < pl.blk.m; ++j) {
                    const int64_t line = j * oc * 4 / 64;
                    if (line != last) ++lines[static_cast<size_t>(line % 64)];
                    last = line;
                }
                for (int n : lines) CHECK(n <= 8);
            }
}

TEST_CASE("data plan: AVX2 blocks broadcast fewer than one pixel per FMA", "[jit][data][plan]") {
    // AVX2 broadcasts from memory, one load per pixel and oc step: m x 1
    // blocks load once per FMA and run below m x 2 / m x 3 ones at the same
    // accumulator count (ResNet-50 res4a_branch2b: m14 x n1 1.2x slower).
    for (data_type dt : {data_type::f32, data_type::bf16, data_type::f16}) {
        const DataPlan pl = plan_of(square(1, 256, 256, 14, 3, 1, 1, 14, dt), Isa::avx2, 2);
        INFO(dtype_name(dt) << "\n" << pl.to_string());
        CHECK(pl.blk.n >= 2);
        CHECK(pl.blk.m * pl.blk.n >= 12);  // still enough accumulators for the FMA latency
    }
}

TEST_CASE("data plan: bf16 and f16 compute forms and ISA names", "[jit][data][plan]") {
    attributes a;
    a.strides = {1, 1};
    a.pads_begin = a.pads_end = {1, 1};
    a.dst_shape = {2, 8, 8, 64};
    attributes unpadded = a;  // 1x1: no edges, so diff_dst is widened inside the kernel
    unpadded.pads_begin = unpadded.pads_end = {0, 0};
    for (data_type dt : {data_type::bf16, data_type::f16}) {
        const Problem p = make_problem(op_kind::conv_bwd_data, dt, a, {2, 8, 8, 33}, {3, 3, 64, 33}, nullptr);
        const Problem p1 = make_problem(op_kind::conv_bwd_data, dt, unpadded, {2, 8, 8, 33}, {1, 1, 64, 33}, nullptr);
        const bool bf16 = dt == data_type::bf16;
        const DataPlan nat = plan_of(p, Isa::avx512_core_bf16, 2);
        CHECK(nat.isa == (bf16 ? Isa::avx512_core_bf16 : Isa::avx512_core));
        CHECK(nat.types.compute == (bf16 ? DataCompute::bf16_dot : DataCompute::f32));
        CHECK(nat.widen_rows == !bf16);
        CHECK(nat.ocg_w == (bf16 ? 34 : 33));  // oc pairs: the odd last oc pairs with zero
        CHECK(nat.to_string().find(bf16 ? "bf16 vdpbf16ps on oc pairs" : "f16 widened to f32 in padded rows") !=
              std::string::npos);
        for (Isa isa : {Isa::avx512_core, Isa::avx2}) {
            const DataPlan pl = plan_of(p, isa, 2);
            CHECK(pl.isa == isa);
            CHECK(pl.widen_rows);  // the kernels see f32 rows
            CHECK(pl.types.in == data_type::f32);
            CHECK(pl.types.out == dt);
            const DataPlan pl1 = plan_of(p1, isa, 2);
            CHECK(pl1.types.compute == DataCompute::widen);
            // The widen scratch holds m pixels of a whole oc chunk in f32.
            CHECK(pl1.scratch.cvt_floats * 4 >= pl1.blk.m * pl1.oc_chunk * 4);
        }
    }
    // A long reduction: 16-bit outputs keep f32 partial sums between chunks.
    const Problem big = make_problem(op_kind::conv_bwd_data, data_type::f16, unpadded, {2, 8, 8, 600},
                                     {1, 1, 64, 600}, nullptr);
    const DataPlan pl = plan_of(big, Isa::avx512_core, 2);
    CHECK(pl.oc_chunk <= 256);
    CHECK(pl.scratch.acc_floats == 64 * 64);  // one folded plane
}

TEST_CASE("data plan: 32-bit displacements", "[jit][data][plan]") {
    attributes a;
    a.strides = {1};
    a.pads_begin = a.pads_end = {0};
    // Pixel strides near 2 GiB: the planner keeps displacements in 32 bits.
    a.dst_shape = {1, 2, 16};
    const Problem p = make_problem(op_kind::conv_bwd_data, data_type::f32, a, {1, 2, int64_t(1) << 28},
                                   {1, 16, int64_t(1) << 28}, nullptr);
    DataPlan pl;
    std::string why;
    REQUIRE(make_data_plan(p, Isa::avx512_core, 2, &pl, &why));
    CHECK(pl.blk.m * (int64_t(4) << 28) < (int64_t(1) << 31));
    // A small plane (row blocks) with wide W pads and 2^17 oc: a padded
    // diff_dst row is about 1 GiB, so blocks of several rows (or any row
    // block) would step past 32 bits.
    for (int64_t pad : {1000, 4000}) {
        attributes b;
        b.strides = {1, 1};
        b.pads_begin = b.pads_end = {1, pad};
        b.dst_shape = {1, 3, 8, 16};
        const int64_t ow = 8 + 2 * pad - 2;
        const Problem q = make_problem(op_kind::conv_bwd_data, data_type::f32, b, {1, 3, ow, int64_t(1) << 17},
                                       {3, 3, 16, int64_t(1) << 17}, nullptr);
        DataPlan ql;
        REQUIRE(make_data_plan(q, Isa::avx512_core, 2, &ql, &why));
        INFO(ql.to_string());
        if (ql.row_blocks)
            CHECK(ql.block_rows() * ql.scratch.row_bytes + ql.dd_pitch < (int64_t(1) << 31));
    }
}

TEST_CASE("data plan: row runs of equal kh taps", "[jit][data][plan]") {
    // row_kh_run_end finds the plane's middle run (every kh valid) at once:
    // the same ends as walking the rows one by one, over heights, kernels,
    // dilations and pads on both sides (pads wider than the kernel too).
    int checked = 0;
    for (int64_t ih = 1; ih <= 12; ++ih)
        for (int64_t kh = 1; kh <= 5; ++kh)
            for (int64_t dil = 1; dil <= 3; ++dil)
                for (int64_t pb = 0; pb <= 6; ++pb)
                    for (int64_t pe = 0; pe <= 6; ++pe) {
                        DataGeometry g;
                        g.in = {1, ih, 4};
                        g.k = {1, kh, 3};
                        g.dil = {1, dil, 1};
                        g.pad = {0, pb, 1};
                        g.stride = {1, 1, 1};
                        const int64_t oh = ih + pb + pe - (kh - 1) * dil;
                        if (oh < 1) continue;
                        g.out = {1, oh, 4};
                        for (int64_t r = 0; r < ih; ++r) {
                            int64_t end = r + 1;
                            while (end < ih && row_kh_range(g, end) == row_kh_range(g, r)) ++end;
                            INFO("ih " << ih << " kh " << kh << " dil " << dil << " pads " << pb << "," << pe
                                       << " row " << r);
                            CHECK(row_kh_run_end(g, r) == end);
                            ++checked;
                        }
                    }
    CHECK(checked > 10000);
}

TEST_CASE("data plan: depthwise rows whose pixels share L1 sets take wider blocks", "[jit][data][plan]") {
    // QuartzNet's 1D depthwise blocks (500 pixels, 51 taps, mb 8), read in
    // place: at 512 f32 / 1024 16-bit channels the pixels are 2 KiB apart
    // and a channel vector's lines of a long row fill two L1 sets, so the
    // pixels a tap group reads come from L2 and the search takes blocks of
    // more vectors (and fewer pixels) than at 32 channels less, whose lines
    // spread over the sets (AMD Zen 4: 1.3-1.8x, docs/PERFORMANCE.md).
    auto dw_1d = [](int64_t c, int64_t w, int64_t k, data_type dt, int64_t dil = 1) {
        attributes a;
        a.strides = {1};
        a.dilations = {dil};
        a.pads_begin = {(k - 1) * dil / 2};
        a.pads_end = {(k - 1) * dil / 2};
        a.groups = c;
        a.dst_shape = {8, w, c};
        return make_problem(op_kind::conv_bwd_data, dt, a, {8, w, c}, {k, 1, c}, nullptr);
    };
    for (data_type dt : {data_type::f32, data_type::bf16, data_type::f16})
        for (Isa isa : {Isa::avx512_core_bf16, Isa::avx2}) {
            if (isa == Isa::avx2 && dt != data_type::f32) continue;  // (16-bit AVX2: 1024 channels are 2 KiB there too)
            const int64_t shared = dt == data_type::f32 ? 512 : 1024;
            const DataPlan a = plan_of(dw_1d(shared, 500, 51, dt), isa, 2);
            const DataPlan b = plan_of(dw_1d(shared - 32, 500, 51, dt), isa, 2);
            INFO(dtype_name(dt) << " " << isa_name(isa) << "\n" << a.to_string() << b.to_string());
            REQUIRE(a.path == DataPath::depthwise);
            CHECK(a.dw_edges);  // rows read in place
            CHECK(a.blk.n > b.blk.n);
            // f32 on AVX-512: a tap group's pixels fit the two sets' ways
            // (16-bit plans widen each diff_dst vector on the FMA ports,
            // which bind first; AVX2 has 16 registers for the blocks).
            if (isa != Isa::avx2 && dt == data_type::f32) CHECK(a.blk.m + a.dw_tap_group - 1 <= kL1LinesPerSet);
        }
    // The blocks whose taps reach past the W edges are written out one by
    // one: the search keeps their FMAs within 32768 (kMaxDwEdgeFmas; cold
    // creation within 1 ms) however the set charge ranks wider blocks
    // (QuartzNet c2: 87 taps at dilation 2, 172 pixels of reach).
    for (Isa isa : {Isa::avx512_core, Isa::avx2})
        for (const auto& [k, dil] : std::vector<std::pair<int64_t, int64_t>>{{87, 2}, {87, 1}, {51, 1}}) {
            const DataPlan pl = plan_of(dw_1d(512, 500, k, data_type::f32, dil), isa, 2);
            INFO(isa_name(isa) << " k" << k << " dil " << dil << "\n" << pl.to_string());
            REQUIRE(pl.dw_edges);
            CHECK((pl.blk.n == 1 || (k - 1) * dil * k * pl.blk.n <= 32768));
        }
    // Rows too long to read in place (segment windows copied): the copies
    // space their pixels a line further apart where they share sets (f32
    // and 16-bit 1024 channels at 8000 pixels), not at 1 KiB (four sets).
    for (data_type dt : {data_type::f32, data_type::bf16})
        for (int64_t c : {1024, 512}) {
            const DataPlan pl = plan_of(dw_1d(c, 8000, 5, dt), Isa::avx512_core_bf16, 2);
            const int64_t pitch = c * static_cast<int64_t>(dtype_size(dt));
            INFO(dtype_name(dt) << " " << c << "\n" << pl.to_string());
            REQUIRE(pl.padded_rows);
            CHECK(pl.segments > 1);
            CHECK(pl.dd_pitch_spread == (pitch % 2048 == 0));
            CHECK(pl.dd_pitch == pitch + (pitch % 2048 == 0 ? 64 : 0));
        }
}

TEST_CASE("data plan: segment windows hold every pixel their taps read, and no more", "[jit][data][plan]") {
    // Long 1D rows cut into segments over strides, dilations, kernels and
    // pads (wider than the kernel too): per segment, the diff_dst pixels
    // [lo, hi) that seg_windows names are exactly those some phase pixel
    // of the segment reads with some tap (pixel j of phase r, tap t: t.base + j).
    std::mt19937 gen(11);
    auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(gen); };
    int segmented = 0;
    for (int iter = 0; iter < 60; ++iter) {
        const int64_t k = pick(1, 9), s = pick(1, 4), dil = pick(1, 3), pb = pick(0, 10), pe = pick(0, 10);
        const int64_t iw = pick(3000, 20000), c = 64 * pick(1, 4);
        const int64_t ow = (iw + pb + pe - (k - 1) * dil - 1) / s + 1;
        attributes a;
        a.strides = {s};
        a.dilations = {dil};
        a.pads_begin = {pb};
        a.pads_end = {(ow - 1) * s + (k - 1) * dil + 1 - iw - pb};
        if (a.pads_end[0] < 0) continue;
        a.dst_shape = {2, iw, c};
        const Problem pr = make_problem(op_kind::conv_bwd_data, data_type::f32, a, {2, ow, c}, {k, c, c}, nullptr);
        const DataPlan pl = plan_of(pr, Isa::avx512_core, 2);
        INFO(pr.to_string() << " " << pl.to_string());
        if (pl.segments < 2) continue;
        ++segmented;
        const auto windows = seg_windows(pl);
        REQUIRE(static_cast<int64_t>(windows.size()) == pl.segments);
        for (int64_t seg = 0; seg < pl.segments; ++seg) {
            int64_t lo = INT64_MAX, hi = INT64_MIN;
            for (int64_t r = 0; r < pl.geo.stride[2]; ++r) {
                const auto [j0, j1] = pl.seg_range(r, seg);
                for (const PhaseTap& t : phase_taps(pl.geo, r))
                    for (int64_t j = j0; j < j1; ++j) {
                        lo = std::min(lo, t.base + j);
                        hi = std::max(hi, t.base + j + 1);
                    }
            }
            INFO("segment " << seg);
            if (lo > hi) {
                CHECK(windows[static_cast<size_t>(seg)] == std::make_pair(int64_t(0), int64_t(0)));
                continue;
            }
            CHECK(windows[static_cast<size_t>(seg)] == std::make_pair(lo, hi));
            const auto inside = window_inside(pl, windows[static_cast<size_t>(seg)]);
            CHECK(inside.first == std::clamp<int64_t>(lo, 0, ow));
            CHECK(inside.second == std::clamp<int64_t>(hi, inside.first, ow));
        }
    }
    CHECK(segmented > 10);  // the generator reaches segmented plans
}
