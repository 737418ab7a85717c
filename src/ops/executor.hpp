// Executor: what an op runs. Chosen once per op by the dispatch list in
// dispatch.cpp (best ISA first, the reference last).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "jit/dot_probe.hpp"
#include "jit/isa.hpp"
#include "ops/problem.hpp"

namespace convgrad::detail {

class Executor {
public:
    virtual ~Executor() = default;
    // The user's buffers in the op's index order. Must be safe to call
    // concurrently from many threads.
    virtual void run(const void* input0, const void* input1, void* output) const = 0;
    // Implementation name first, then the plan.
    virtual std::string describe() const = 0;
    // The threads run() uses in the current arena.
    virtual int threads() const = 0;
};

// The threads a JIT op runs on: the arena's (tbb::this_task_arena), or one
// for a problem small enough to finish before a second thread pays for its
// wake-up: weight gradients of at most kSerialMaxFlops (and
// kSerialMaxBytes, below), data gradients of at most kSerialMaxFlopsData.
// The results do not depend on it (both gradients are bitwise identical
// for any thread count). AMD Zen 4, one thread against two
// (tools/sweep_ab.py, min of 5, f32 and bf16): weight gradients of
// EfficientNet-B0's squeeze-excitation layers (16-153 kflop)
// 1.06-1.43x, a 64 -> 64 1x1 layer on a 1x1 plane at mb 32 (262 kflop)
// 1.28-1.48x, 128 -> 128 (1 Mflop) 1.00x. Data gradients since their
// small-plane images share rows (DataGeometry::images_per_row), one
// thread against two, three alternating runs each (convgrad-sweep
// --mode=P --threads=1 / 2, microseconds): SE 240 -> 10 f32 3.3-3.4 /
// 4.0-4.1, bf16 2.3 / 3.1-3.4; 10 -> 240 f32 4.0 / 4.2, bf16 2.2 / 2.5-3.1;
// a 64-channel depthwise 3x3 at 4x4, mb 8 (147 kflop), 5.1-5.4 / 5.3-11.1;
// 64 -> 64 (262 kflop) f32 4.3 / 4.7-5.5, bf16 2.4 / 2.8-3.6.
//
// Weight gradients also need their src and diff_dst within kSerialMaxBytes:
// a layer of few flops a byte (depthwise, strided) takes longer on one
// thread than its flops say. MobileNet v1 conv5_6 (512 channels 3x3 s2 at
// 14x14, one image, 452 kflop, 501 KB in f32), AMD Zen 5, two threads
// against one (tools/sweep_ab.py --rounds=7..9 --min, three runs):
// 1.16-1.48x (7.3 -> 4.9-6.3 us); below the bytes, two threads against
// one: depthwise 3x3 of 128-384 channels at 7x7-14x14 (226-452 kflop,
// 100-250 KB, f32 and bf16) 0.36-0.69x, 512 channels at 7x7 and 96 at
// 14x14 0.80-1.12x.
inline constexpr double kSerialMaxFlops = 5e5;
inline constexpr double kSerialMaxFlopsData = 3e5;
inline constexpr double kSerialMaxBytes = 384 << 10;
// Whether op_threads runs p on one thread whatever the arena.
bool runs_serial(const Problem& p);
int op_threads(const Problem& p);

// CONVGRAD_VERBOSE is set and not "0", read on each call (the log lines
// of dispatch, the plan and kernel caches; tests switch it at run time).
bool verbose_log();

// The ISA the problem's vector kernels may use: the effective ISA
// (CONVGRAD_MAX_ISA) up to avx512_core_bf16 (amx has its own path, tried
// first by make_executor), below avx512_core_bf16 for bf16 where vdpbf16ps does
// not pay on this CPU (jit/dot_probe.hpp, CONVGRAD_BF16_DOT).
Isa op_isa(const Problem& p);
// The rule itself, for effective ISA `isa`: bf16 at avx512_core_bf16 stays
// there under `on`, drops to avx512_core (bf16 widened to f32) under `off`,
// and under `automatic` stays where dot_pays (the probe's verdict) or where
// the widened kernels lost: data gradients on the depthwise path with lane
// groups or a stride.
Isa op_isa(const Problem& p, Isa isa, Bf16Dot setting, bool dot_pays);
// The probe's verdict (DotProbe::dot_pays), measured at the first call and
// then kept; logged under CONVGRAD_VERBOSE. Needs AVX512_BF16.
bool bf16_dot_pays();

// The dispatch list: the first implementation that accepts the Problem at
// op_isa wins; the reference accepts all.
std::unique_ptr<Executor> make_executor(const Problem& p);

// JIT implementations. Each returns nullptr and sets *why (a short reason,
// printed under CONVGRAD_VERBOSE) when it declines the Problem.
std::unique_ptr<Executor> make_jit_weights_executor(const Problem& p, Isa isa, std::string* why);
std::unique_ptr<Executor> make_jit_data_executor(const Problem& p, Isa isa, std::string* why);
// The data gradient's inner-product path (exec_data_dot.cpp), tried first
// by make_jit_data_executor; nullptr when it does not serve the Problem.
std::unique_ptr<Executor> make_jit_data_dot_executor(const Problem& p, Isa isa);
// The weight gradient's inner-product path for 1x1 layers in NCX
// (exec_weights_dot.cpp), tried first by make_jit_weights_executor; with
// `strided`, p is that strided layer's unit-stride problem (unstride_1x1)
// and the path reads the strided src, subsampling it chunk by chunk.
std::unique_ptr<Executor> make_jit_weights_dot_executor(const Problem& p, Isa isa, const Problem* strided = nullptr);
// The data gradient of 1x1 layers in NCX in place (exec_data_ncx.cpp),
// tried by make_jit_data_executor after the inner-product path.
std::unique_ptr<Executor> make_jit_data_ncx_executor(const Problem& p, Isa isa);
// bf16 gradients on AMX tiles (exec_data_amx.cpp, exec_weights_amx.cpp),
// tried first where the effective ISA is amx (NCX through NXC copies).
std::unique_ptr<Executor> make_jit_data_amx_executor(const Problem& p);
std::unique_ptr<Executor> make_jit_weights_amx_executor(const Problem& p);
// An NCX problem the AMX executors take through NXC copies of both
// activation tensors (a chunk of images at a time): at least this many
// flops per element copied. ResNet-50's bf16 layers against the vector
// kernels' NCX paths (Intel AMX guest, 2 threads, mb 32, tools/sweep_ab.py,
// whole-tensor copies then): 57-64 flops an element 0.46-1.48x (64x64 1x1
// at 56x56: 0.46 data, 0.81 weights), 102-114 1.04-2.65x, the 3x3 layers
// (288-2304) 1.84-2.68x.
constexpr double kAmxNcxMinFlops = 96;
inline bool amx_takes_ncx(const Problem& p) {
    return p.nxc || p.flops() >= kAmxNcxMinFlops * static_cast<double>(p.activation_elems());
}
// CONVGRAD_AMX (read for every op): "auto" or unset, the AMX paths take
// the layers where they were measured faster than the vector kernels;
// "all", every bf16 layer their kernels can run (for tests and
// comparisons). Throws convgrad::error naming the variable for another value.
bool amx_takes_all();
// The AMX paths run a grouped layer whole, as the dense layer whose
// weights are zero across groups, each block of 32 input channels taking
// only the blocks of 32 output channels that hold its groups' (exec_groups.cpp).
// Returns how many blocks that is (the most any input block needs, taken by
// all; every output block for one group) and each input block's first in
// *first.
int64_t amx_group_blocks(const Problem& p, std::vector<int64_t>* first);
// The share of those blocks' products that are not across groups (given
// amx_group_blocks' result, or computing it).
double amx_used_share(const Problem& p, const std::vector<int64_t>& first, int64_t blocks);
double amx_used_share(const Problem& p);
// Depthwise layers in NCX with unit stride along W, vectorised along the
// rows (exec_dw_rows.cpp), both gradients: tried after the paths above.
std::unique_ptr<Executor> make_jit_dw_rows_executor(const Problem& p, Isa isa);
// A strided 1x1 layer in NCX (no begin padding, every pixel read inside
// src) as the unit-stride problem *q on subsampled src / spread diff_src
// (exec_unstrided.cpp): false when p is not one. The executor runs
// executors that `make` builds for q (data gradients: for a few images of
// it at a time) between the two passes; null where `make` declines.
bool unstride_1x1(const Problem& p, Problem* q);
std::unique_ptr<Executor> make_unstrided_executor(
        const Problem& p, const Problem& q, Isa isa,
        const std::function<std::unique_ptr<Executor>(const Problem&)>& make);

}  // namespace convgrad::detail
