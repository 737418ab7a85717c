// Mode P: timing an op and relating it to the machine's peak.
#pragma once

#include <convgrad/convgrad.hpp>

#include <map>
#include <string>

namespace convgrad::cli {

// Peak GFLOP/s per data type and thread count, and of the AVX2 path. The
// defaults are the figures measured on the project's machine (2-core Zen 5,
// see ../shared/peers/RESULTS.md); convgrad-peak measures another machine.
class peak_table {
public:
    peak_table();  // the measured defaults
    // Measured now, on this machine (measure_peaks_json, the best of 5 runs
    // of about 0.05 s: 1-5 s in all).
    static peak_table measure();
    // --peaks: a convgrad-peak JSON file, "measure", or empty: the defaults
    // on the kind of machine they were measured on (reference_host), else
    // measured now; their figures cannot hold for another CPU.
    static peak_table from_option(const std::string& peaks);
    // Reads the JSON written by convgrad-peak:
    //   {"f32": {"1": 238.6, "2": 469.4}, "bf16": {"1": 471.0, "2": 948.2},
    //    "avx2": {"1": 117.2, "2": 231.0}}
    // "avx2" (ymm FMA) is optional; without it the AVX2 path uses "f32".
    // "amx_bf16" (tdpbf16ps) is optional: the peak of bf16 on AMX tiles.
    // Throws std::invalid_argument naming the file and the problem.
    static peak_table load(const std::string& path);
    static peak_table parse(const std::string& json_text, const std::string& source);
    // f16 has no native FMA without avx512_fp16: its peak is the f32 one;
    // bf16 the faster of "bf16" (vdpbf16ps) and "f32" (bf16 widened).
    // impl: the implementation's label. AVX2 kernels (is_avx2_impl: every
    // dtype is an f32 ymm FMA there) take "avx2"; bf16 on AMX tiles
    // (is_amx_impl) takes "amx_bf16" where the table has it. Thread counts
    // not measured scale the 1-thread figure.
    double gflops(data_type dt, int threads, const std::string& impl = "") const;
    // An implementation label naming AVX2 kernels: convgrad's "jit:avx2",
    // oneDNN's "jit:avx2" / "jit_1x1:avx2".
    static bool is_avx2_impl(const std::string& impl) { return impl.find(":avx2") != std::string::npos; }
    // AMX tiles: convgrad's "jit:amx", oneDNN's "jit:avx512_core_amx_bf16".
    static bool is_amx_impl(const std::string& impl) { return impl.find("amx") != std::string::npos; }
    std::string source() const { return source_; }

private:
    std::map<std::string, std::map<int, double>> table_;
    std::string source_;
};

// The CPU is of the kind the default peaks were measured on: AVX-512 with
// BF16, family 26 (AMD Zen 5).
constexpr unsigned kReferenceFamily = 26;
bool reference_host();
// How each peak figure is taken: `runs` runs of about `seconds_per_run`,
// their median (convgrad-peak, the method of ../shared/peers/RESULTS.md) or
// their best (at the start of a sweep or bench, in less time: a busy moment
// only lowers a run).
struct peak_method {
    double seconds_per_run = 0.2;
    int runs = 3;
    bool best = false;
};
// convgrad-peak's JSON for this machine (peak_table::parse reads it); a
// line per thread count appended to *log. Throws std::runtime_error
// without AVX2/FMA.
std::string measure_peaks_json(const peak_method& m, std::string* log = nullptr);

struct timing {
    double median_ms = 0;
    int reps = 0;
    bool single_run = false;  // the only run was also the warm-up (slow implementations)
};

// Warm-up, then repetitions until both a count and a time budget are met;
// reports the median. A run longer than `single_run_limit_s` is reported as
// it is (one run), so the reference path stays affordable on big shapes.
struct timing_budget {
    int min_reps = 5;
    double min_seconds = 0.5;
    double max_seconds = 5.0;
    double single_run_limit_s = 1.0;
};

timing time_op(const op& o, const void* input0, const void* input1, void* output,
               const timing_budget& budget = {});

}  // namespace convgrad::cli
