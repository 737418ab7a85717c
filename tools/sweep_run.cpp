// Running one sweep case, and reporting results as text, CSV and JSON.
#include <nlohmann/json.hpp>
#include <tbb/task_arena.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iomanip>
#include <ostream>
#include <sstream>

#include "check.hpp"
#include "sweep.hpp"

namespace convgrad::cli {

std::string display_name(const op_case& c) {
    std::string n = c.name.empty() ? c.descriptor : c.name;
    if (n.size() >= 2 && n.front() == '"' && n.back() == '"') n = n.substr(1, n.size() - 2);
    return n.empty() ? "(unnamed)" : n;
}

namespace {

std::string format_ms(double ms) {
    char buf[32];
    std::snprintf(buf, sizeof buf, ms >= 100 ? "%.0f" : ms >= 1 ? "%.2f" : "%.4f", ms);
    return buf;
}

double bytes_needed(const op& o, data_type dt) {
    const double es = dt == data_type::f32 ? 4 : 2;
    // Inputs, output, and for the check a second output and |input| copies.
    return es * (2.0 * (o.input0_elems() + o.input1_elems()) + 3.0 * o.output_elems());
}

// The reference is scalar: time it with a smaller budget (docs/sweep.md).
timing_budget budget_for(const std::string& impl) {
    timing_budget b;
    if (impl.rfind("ref", 0) == 0) {
        b.min_reps = 3;
        b.min_seconds = 0.3;
        b.single_run_limit_s = 0.5;
    }
    return b;
}

void run_check(const op_case& c, const sweep_options& o, case_result& r) {
    const op_case small = o.perf ? with_minibatch(c, std::min(c.minibatch(), o.check_mb)) : c;
    r.check_mb = small.minibatch();
    const double steps = reference_steps(small);
    if (steps > o.check_max_gsteps * 1e9) {
        r.exact = r.reals = "skipped";
        char buf[160];
        std::snprintf(buf, sizeof buf, "check skipped: one reference run needs %.1f billion steps (> --check-max-gsteps=%g)",
                      steps / 1e9, o.check_max_gsteps);
        r.detail = buf;
        if (!o.perf) r.status = "SKIP";
        return;
    }
    const check_result cr = check_case(small, o.isa, o.corrupt_for_test, 1, o.guard);
    r.exact = cr.exact;
    r.reals = cr.reals;
    r.err_over_tol = cr.worst_ratio;
    if (!cr.ok) r.status = "FAIL";
}

double seconds_of_one_run(const op& o, data_type dt) {
    tensor_buffer in0(dt, o.input0_elems()), in1(dt, o.input1_elems()), out(dt, o.output_elems());
    fill_reals(in0, 11);
    fill_reals(in1, 12);
    const auto t0 = std::chrono::steady_clock::now();
    o.execute(in0.data(), in1.data(), out.data());
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The minibatch to time at: the case's own, unless a one-image probe
// predicts a full run longer than the budget (the scalar reference on big
// shapes); then the largest minibatch that fits.
int64_t timed_minibatch(const op_case& c, const sweep_options& o) {
    const int64_t mb = c.minibatch();
    if (mb <= 1) return mb;
    const double one = seconds_of_one_run(make_op_with_isa(with_minibatch(c, 1), o.isa), c.dt);
    if (one * static_cast<double>(mb) <= o.perf_budget_s) return mb;
    return std::clamp<int64_t>(static_cast<int64_t>(o.perf_budget_s / one), 1, mb);
}

void run_perf(const op_case& c, const sweep_options& o, const peak_table& peaks, case_result& r) {
    r.timed_mb = timed_minibatch(c, o);
    const op tested = make_op_with_isa(with_minibatch(c, r.timed_mb), o.isa);
    tensor_buffer in0(c.dt, tested.input0_elems()), in1(c.dt, tested.input1_elems());
    tensor_buffer out(c.dt, tested.output_elems());
    fill_reals(in0, 11);
    fill_reals(in1, 12);
    const timing t = time_op(tested, in0.data(), in1.data(), out.data(), budget_for(r.impl));
    r.ms = t.median_ms;
    r.reps = t.reps;
    r.single_run = t.single_run;
    r.gflops = tested.flops() / (t.median_ms * 1e6);
    const int threads = o.threads ? o.threads : tbb::this_task_arena::max_concurrency();
    r.peak_gflops = peaks.gflops(c.dt, threads, impl_label(tested));
    r.peak_pct = 100.0 * r.gflops / r.peak_gflops;
}

}  // namespace

case_result run_case(const op_case& c, const sweep_options& o, const peak_table& peaks) {
    case_result r;
    r.status = "PASS";
    r.op = short_op_name(c.kind);
    r.dtype = dtype_name(c.dt);
    r.name = display_name(c);
    r.descriptor = c.descriptor;
    r.mb = c.minibatch();
    r.detail = c.note;
    if (!c.skip_reason.empty()) {
        r.status = "SKIP";
        r.detail = c.skip_reason;
        return r;
    }
    try {
        const op tested = make_op_with_isa(c, o.isa);
        r.impl = impl_label(tested);
        r.flops = tested.flops();
        if (c.expected_flops > 0 && std::fabs(r.flops - c.expected_flops) > 1e-9 * c.expected_flops) {
            r.status = "FAIL";
            r.detail = "op::flops() " + std::to_string(r.flops) + " differs from benchdnn's " +
                       std::to_string(c.expected_flops);
            return r;
        }
        if (o.describe) r.plan = tested.describe();
        if ((o.check || o.perf) && bytes_needed(tested, c.dt) > o.max_mem_gb * 1e9) {
            r.status = "SKIP";
            r.detail = "needs more than --max-mem-gb=" + std::to_string(o.max_mem_gb);
            return r;
        }
        if (o.check) run_check(c, o, r);
        if (o.perf) run_perf(c, o, peaks, r);
    } catch (const std::exception& e) {
        r.status = "FAIL";
        r.detail = e.what();
    }
    return r;
}

std::string format_line(const case_result& r) {
    std::ostringstream os;
    os << std::left << std::setw(5) << r.status << std::setw(13) << r.op << std::setw(5) << r.dtype
       << "mb" << std::setw(5) << r.mb << r.name;
    if (!r.exact.empty() || !r.reals.empty())
        os << " | C(mb" << r.check_mb << ") exact " << r.exact << ", reals " << r.reals;
    if (r.reps > 0) {
        os << " | P";
        if (r.timed_mb != r.mb) os << "(at mb" << r.timed_mb << ", slow path)";
        os << ' ' << format_ms(r.ms) << " ms " << std::fixed << std::setprecision(1) << r.gflops << " GFLOP/s "
           << r.peak_pct << "% of " << std::setprecision(0) << r.peak_gflops << " [" << r.impl << ", "
           << r.reps << (r.reps == 1 ? " run" : " runs") << "]";
        os.unsetf(std::ios::fixed);
    }
    if (!r.detail.empty()) os << " | " << r.detail;
    std::istringstream plan(r.plan);
    for (std::string line; std::getline(plan, line);) os << "\n    " << line;
    return os.str();
}

void write_csv(std::ostream& out, const std::vector<case_result>& results) {
    auto quoted = [](const std::string& s) {
        std::string q = "\"";
        for (char ch : s) q += ch == '"' ? std::string("\"\"") : std::string(1, ch);
        return q + "\"";
    };
    out << "status,op,dtype,name,descriptor,mb,check_mb,timed_mb,exact,reals,err_over_tol,impl,ms,reps,"
           "gflops,peak_gflops,peak_pct,flops,detail\n";
    for (const case_result& r : results)
        out << r.status << ',' << r.op << ',' << r.dtype << ',' << quoted(r.name) << ','
            << quoted(r.descriptor) << ',' << r.mb << ',' << r.check_mb << ',' << r.timed_mb << ','
            << quoted(r.exact)
            << ',' << quoted(r.reals) << ',' << r.err_over_tol << ',' << r.impl << ',' << r.ms << ','
            << r.reps << ',' << r.gflops << ',' << r.peak_gflops << ',' << r.peak_pct << ','
            << r.flops << ',' << quoted(r.detail) << '\n';
}

void write_json(std::ostream& out, const std::vector<case_result>& results, const std::string& peaks_source) {
    nlohmann::json rows = nlohmann::json::array();
    int passed = 0, failed = 0, skipped = 0;
    for (const case_result& r : results) {
        passed += r.status == "PASS";
        failed += r.status == "FAIL";
        skipped += r.status == "SKIP";
        rows.push_back({{"status", r.status}, {"op", r.op}, {"dtype", r.dtype}, {"name", r.name},
                        {"descriptor", r.descriptor}, {"mb", r.mb}, {"check_mb", r.check_mb}, {"timed_mb", r.timed_mb},
                        {"exact", r.exact}, {"reals", r.reals}, {"err_over_tol", r.err_over_tol},
                        {"impl", r.impl}, {"ms", r.ms}, {"reps", r.reps}, {"single_run", r.single_run},
                        {"gflops", r.gflops}, {"peak_gflops", r.peak_gflops}, {"peak_pct", r.peak_pct},
                        {"flops", r.flops}, {"detail", r.detail}});
        if (!r.plan.empty()) rows.back()["plan"] = r.plan;
    }
    const nlohmann::json doc = {
        {"summary", {{"passed", passed}, {"failed", failed}, {"skipped", skipped}, {"peaks", peaks_source}}},
        {"results", rows}};
    out << doc.dump(2) << '\n';
}

}  // namespace convgrad::cli
