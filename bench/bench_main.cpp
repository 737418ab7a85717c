// convgrad-bench: convgrad's JIT path, its reference path (small shapes) and
// oneDNN 2.6 (preferred blocked layouts, and fed convgrad's plain tensors,
// NXC / XIO or as --data-format / --weights-format say, with its reorders
// timed), interleaved per shape in one process.
// See docs/bench.md. Usage:
//   convgrad-bench [--benchmark_*] [DESCRIPTOR... | --batch=FILE] [--op=..]
//                  [--dt=..] [--mb=N] [--threads=N] [--isa=..] [--peaks=FILE|measure]
//                  [--impl=jit,ref,onednn,onednn_plain,create] [--ref-max-gflop=X]
#include <benchmark/benchmark.h>
#include <tbb/task_arena.h>

#include <chrono>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <sstream>

#include "check.hpp"
#include "sweep.hpp"
#ifdef CONVGRAD_HAVE_DNNL
#include "onednn_conv.hpp"
#endif

namespace {

using namespace convgrad::cli;
using convgrad::op_kind;

bool same_layer_op(const op_case& a, const op_case& b) { return a.kind == b.kind && a.name == b.name; }

// The peer anchors of ../shared/peers/RESULTS.md (our own descriptors of
// the shapes measured there), so the bench reproduces that table.
const char* const anchor_conv[] = {
    "mb32ic64ih56oc64oh56kh3ph1n\"a\"",    "mb32ic64ih56oc256oh56kh1n\"b\"",
    "mb32ic256ih56oc64oh56kh1n\"c\"",      "mb32ic128ih28oc128oh28kh3ph1n\"d\"",
    "mb32ic256ih14oc256oh14kh3ph1n\"e\"",  "mb32ic512ih7oc512oh7kh3ph1n\"f\"",
    "mb32ic3ih224oc64oh112kh7sh2ph3n\"g\"", "mb32ic256ih56oc512oh28kh1sh2n\"h\"",
    "g32mb32ic32ih112oc32oh112kh3ph1n\"dw\"",
    "mb2ic32id16ih64iw64oc32od16oh64ow64kd3kh3kw3pd1ph1pw1n\"3d\"",
    "mb32ic64ih56oc64oh56kh3ph2dh1n\"dil\""};
const char* const anchor_deconv = "mb32ic64ih28oc32oh56kh4sh2ph1n\"dc\"";

struct bench_options {
    sweep_options sweep;
    std::set<std::string> impls{"jit", "ref", "onednn", "onednn_plain"};
    double ref_max_gflop = 1.0;
};

bench_options parse_bench_args(int argc, char** argv) {
    bench_options b;
    std::vector<std::string> rest;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if (arg.rfind("--impl=", 0) == 0) {
            b.impls.clear();
            std::stringstream ss(arg.substr(7));
            for (std::string name; std::getline(ss, name, ',');) {
                if (name != "jit" && name != "ref" && name != "onednn" && name != "onednn_plain" && name != "create")
                    throw std::invalid_argument("option " + arg + ": expected jit, ref, onednn, onednn_plain, create");
                b.impls.insert(name);
            }
        } else if (arg.rfind("--ref-max-gflop=", 0) == 0) {
            b.ref_max_gflop = std::stod(arg.substr(16));
        } else {
            rest.push_back(arg);
        }
    }
    b.sweep = parse_sweep_args(rest);
    return b;
}

std::vector<op_case> bench_cases(const bench_options& b) {
    if (!b.sweep.inputs.empty() || !b.sweep.batch_files.empty()) return collect_cases(b.sweep);
    sweep_options conv = b.sweep, deconv = b.sweep;
    conv.inputs.assign(std::begin(anchor_conv), std::end(anchor_conv));
    if (conv.ops.empty()) conv.ops = {op_kind::conv_bwd_weights, op_kind::conv_bwd_data};
    deconv.inputs = {anchor_deconv};
    deconv.ops = {op_kind::conv_transpose_bwd_weights};
    std::vector<op_case> cases = collect_cases(conv);
    if (b.sweep.ops.empty()) {
        const std::vector<op_case> more = collect_cases(deconv);
        cases.insert(cases.end(), more.begin(), more.end());
    }
    return cases;
}

std::string case_key(const op_case& c) {
    std::string name = c.name.empty() ? c.descriptor : c.name;
    if (name.size() >= 2 && name.front() == '"') name = name.substr(1, name.size() - 2);
    return std::string(short_op_name(c.kind)) + "/" + convgrad::dtype_name(c.dt) + "/" + name;
}

// Seconds per iteration of every implementation, by case key, for the ratio
// columns of the rows registered after it.
std::map<std::string, std::map<std::string, double>> seconds_per_iteration;

struct context {
    const peak_table* peaks;
    int threads;
    std::string isa;
};

// Times `body` (one execution) in the benchmark loop; records the rate.
template <class Body>
void timed_loop(benchmark::State& state, const op_case& c, double flops, const std::string& impl,
                const context& ctx, const std::string& label, Body body) {
    using clock = std::chrono::steady_clock;
    const auto t0 = clock::now();
    for (auto _ : state) body();
    const double seconds = std::chrono::duration<double>(clock::now() - t0).count() /
                           static_cast<double>(std::max<int64_t>(state.iterations(), 1));
    const double gflops = flops / seconds / 1e9, peak = ctx.peaks->gflops(c.dt, ctx.threads, label);
    state.counters["GFLOPS"] = gflops;
    state.counters["peak_pct"] = 100.0 * gflops / peak;
    state.counters["peak"] = peak;
    state.counters["flops"] = flops;
    std::map<std::string, double>& row = seconds_per_iteration[case_key(c)];
    row[impl] = seconds;
    if (impl == "jit")
        for (const auto& [other, s] : row)
            if (other != "jit") state.counters["x_" + other] = s / seconds;  // > 1: convgrad faster
}

void bench_convgrad(benchmark::State& state, const op_case& c, const std::string& impl, const context& ctx) {
    tbb::task_arena arena(ctx.threads);
    arena.execute([&] {
        const convgrad::op o = make_op_with_isa(c, impl == "ref" ? "ref" : ctx.isa);
        tensor_buffer in0(c.dt, o.input0_elems()), in1(c.dt, o.input1_elems()), out(c.dt, o.output_elems());
        fill_reals(in0, 1);
        fill_reals(in1, 2);
        const std::string label = impl_label(o);
        state.SetLabel(label);
        timed_loop(state, c, o.flops(), impl, ctx, label,
                   [&] { o.execute(in0.data(), in1.data(), out.data()); });
    });
}

// Op creation (validation, plan, kernels) as dispatched: `create_cold`
// empties the process's kernel cache before each creation (not timed), so
// every kernel the op needs is generated; `create_cached` finds them all
// cached. Manual time: only the constructor is timed.
void bench_create(benchmark::State& state, const op_case& c, bool cold, const context& ctx) {
    using clock = std::chrono::steady_clock;
    tbb::task_arena arena(ctx.threads);
    arena.execute([&] {
        const isa_cap_guard cap(ctx.isa);
        const convgrad::op first = c.make_op();  // cached: its kernels stay in the cache
        state.SetLabel(impl_label(first));
        size_t kernels = 0;
        for (auto _ : state) {
            if (cold) kernels = convgrad::clear_kernel_cache();
            const auto t0 = clock::now();
            const convgrad::op o = c.make_op();
            const auto t1 = clock::now();
            benchmark::DoNotOptimize(&o);
            state.SetIterationTime(std::chrono::duration<double>(t1 - t0).count());
        }
        if (cold) state.counters["kernels"] = static_cast<double>(kernels);  // generated per creation
    });
}

#ifdef CONVGRAD_HAVE_DNNL
void bench_onednn(benchmark::State& state, const op_case& c, const conv_desc& d, const std::string& impl,
                  const context& ctx) {
    onednn::set_threads(ctx.threads);
    const auto mode = impl == "onednn" ? onednn::layouts::preferred : onednn::layouts::plain;
    try {
        onednn::backward_op o(d, c.kind, c.dt, mode, c.attrs.data_format, c.attrs.weights_format);
        const convgrad::op ours = c.make_op();
        tensor_buffer in0(c.dt, ours.input0_elems()), in1(c.dt, ours.input1_elems()), out(c.dt, ours.output_elems());
        fill_reals(in0, 1);
        fill_reals(in1, 2);
        o.bind(in0.data(), in1.data(), out.data());
        state.SetLabel(o.impl());
        timed_loop(state, c, ours.flops(), impl, ctx, o.impl(), [&] { o.execute(); });
        o.finish();
    } catch (const std::exception& e) {
        state.SkipWithError(e.what());
    }
}
#endif

// The descriptor oneDNN needs (explicit pads: no auto_pad).
bool onednn_desc(const op_case& c, conv_desc& d) {
    if (c.descriptor.empty() || c.attrs.auto_pad != "none") return false;
    d = parse_descriptor(c.descriptor, descriptor_kind(c.kind));
    d.mb = c.minibatch();
    return true;
}

void register_case(const op_case& c, const bench_options& b, const context& ctx) {
    const std::string key = case_key(c);
    auto add = [&](const std::string& impl, auto fn) {
        benchmark::RegisterBenchmark((key + "/" + impl).c_str(), fn)->UseRealTime()->Unit(benchmark::kMillisecond);
    };
    conv_desc d;
    const bool have_desc = onednn_desc(c, d);
#ifdef CONVGRAD_HAVE_DNNL
    for (const char* impl : {"onednn", "onednn_plain"})
        if (b.impls.count(impl) && have_desc && c.dt != convgrad::data_type::f16)
            add(impl, [c, d, impl, ctx](benchmark::State& s) { bench_onednn(s, c, d, impl, ctx); });
#else
    (void)have_desc;
#endif
    if (b.impls.count("ref") && c.make_op().flops() <= b.ref_max_gflop * 1e9)
        add("ref", [c, ctx](benchmark::State& s) { bench_convgrad(s, c, "ref", ctx); });
    if (b.impls.count("jit")) add("jit", [c, ctx](benchmark::State& s) { bench_convgrad(s, c, "jit", ctx); });
    if (b.impls.count("create"))
        for (const bool cold : {true, false})
            benchmark::RegisterBenchmark((key + (cold ? "/create_cold" : "/create_cached")).c_str(),
                                         [c, cold, ctx](benchmark::State& s) { bench_create(s, c, cold, ctx); })
                    ->UseManualTime()
                    ->Unit(benchmark::kMicrosecond);
}

}  // namespace

int main(int argc, char** argv) {
    benchmark::Initialize(&argc, argv);
    bench_options b;
    std::vector<op_case> cases;
    static peak_table peaks;  // outlives the registered benchmarks
    try {
        b = parse_bench_args(argc, argv);
        cases = bench_cases(b);
        peaks = peak_table::from_option(b.sweep.peaks_file);
    } catch (const std::exception& e) {
        std::cerr << "convgrad-bench: " << e.what() << '\n';
        return 2;
    }
    const context ctx{&peaks, b.sweep.threads ? b.sweep.threads : tbb::this_task_arena::max_concurrency(),
                      b.sweep.isa};
#ifndef CONVGRAD_HAVE_DNNL
    std::cerr << "convgrad-bench: built without oneDNN (libdnnl-dev not found at configure time); "
                 "oneDNN rows are skipped\n";
#endif
    benchmark::AddCustomContext("convgrad.threads", std::to_string(ctx.threads));
    benchmark::AddCustomContext("convgrad.peaks", peaks.source());
    for (size_t i = 0; i < cases.size(); ++i) {
        const op_case& c = cases[i];
        if (!c.skip_reason.empty()) continue;
        // What the reader changed or how it read the descriptor (once per op, not per dtype).
        if (!c.note.empty() && (i == 0 || !same_layer_op(c, cases[i - 1])))
            std::cerr << "convgrad-bench: " << short_op_name(c.kind) << ' ' << c.name << ": " << c.note << '\n';
        register_case(c, b, ctx);
    }
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
