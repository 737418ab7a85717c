// convgrad-sweep: options, the case list, and running one case in modes C
// and P. main() (sweep_main.cpp) only wires these together, so tests drive
// the same code paths.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include "check.hpp"
#include "op_case.hpp"
#include "perf.hpp"

namespace convgrad::cli {

struct sweep_options {
    std::vector<std::string> inputs;       // descriptors or JSON text, in order
    std::vector<std::string> batch_files;  // --batch=FILE, in order
    std::vector<op_kind> ops;              // empty: per source default
    std::vector<data_type> dtypes;         // empty: f32 (JSON: its own dtype)
    layout_options layout;
    int64_t mb = 0;        // 0: the descriptor's
    int64_t check_mb = 2;  // CP mode: minibatch of the C part
    double check_max_gsteps = 5.0;  // skip checks whose reference run is longer
    int threads = 0;       // 0: every core
    std::string isa;       // cap for the op under test; "": the environment's
    bool check = true, perf = false;
    bool describe = false;  // mode D: print each op's plan (op::describe())
    std::string csv_file, json_file, peaks_file;
    double max_mem_gb = 8.0;
    // A full-minibatch run predicted to take longer is timed at a smaller
    // minibatch (the reference path on big shapes); see docs/sweep.md.
    double perf_budget_s = 2.0;
    bool corrupt_for_test = false;
    guard_side guard = guard_side::none;  // mode C: tensors against an inaccessible page
    bool emit_json = false;
    bool help = false;
};

// Parses argv[1..]. Throws std::invalid_argument naming the bad option.
sweep_options parse_sweep_args(const std::vector<std::string>& args);
std::string sweep_usage();

// Every case the options describe (the embedded ResNet-50 list when no
// input is given). Throws std::invalid_argument (descriptor_error included)
// with the source and position of the first bad input.
std::vector<op_case> collect_cases(const sweep_options& o);

struct case_result {
    std::string status;  // PASS | FAIL | SKIP
    std::string op, dtype, name, descriptor, impl;
    int64_t mb = 0, check_mb = 0, timed_mb = 0;
    std::string exact, reals;  // C-mode outcomes ("" when not run)
    double err_over_tol = 0;
    double ms = 0, gflops = 0, peak_pct = 0, peak_gflops = 0, flops = 0;
    int reps = 0;
    bool single_run = false;
    std::string detail;  // reason for FAIL / SKIP, or a note
    std::string plan;    // mode D: op::describe()
};

// The case's name as lines show it: its name unquoted, else its descriptor.
std::string display_name(const op_case& c);

// Runs one case (call inside the task_arena that fixes the thread count).
case_result run_case(const op_case& c, const sweep_options& o, const peak_table& peaks);

// "PASS bwd_w f32 mb50 resnet_50:conv1 | C(mb2) exact ok, reals err/tol 0.01 | P ..."
std::string format_line(const case_result& r);

void write_csv(std::ostream& out, const std::vector<case_result>& results);
void write_json(std::ostream& out, const std::vector<case_result>& results, const std::string& peaks_source);

}  // namespace convgrad::cli
