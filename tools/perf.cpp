#include "perf.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <vector>

namespace convgrad::cli {

peak_table::peak_table()
    // ../shared/peers/RESULTS.md: vfmadd231ps zmm and vdpbf16ps zmm, best
    // accumulator count, median of 3 runs.
    // vfmadd231ps ymm, 12 accumulators, for the AVX2 path.
    : table_{{"f32", {{1, 238.6}, {2, 469.4}}}, {"bf16", {{1, 471.0}, {2, 948.2}}}, {"avx2", {{1, 117.2}, {2, 231.0}}}},
      source_("measured 2-core Zen 5 peaks (../shared/peers/RESULTS.md)") {}

peak_table peak_table::measure() {
    std::string log;
    const std::string json = measure_peaks_json(peak_method{0.05, 5, true}, &log);
    std::string figures;  // "1 thread(s): f32 ..., 2 thread(s): ..." on one line
    for (char c : log) figures += c == '\n' ? std::string("; ") : std::string(1, c);
    if (figures.size() >= 2) figures.resize(figures.size() - 2);
    return parse(json, "measured at start on this machine (" + figures + ")");
}

peak_table peak_table::from_option(const std::string& peaks) {
    if (peaks == "measure") return measure();
    if (!peaks.empty()) return load(peaks);
    return reference_host() ? peak_table() : measure();
}

peak_table peak_table::load(const std::string& path) {
    std::ifstream in(path);
    if (!in) throw std::invalid_argument("--peaks: cannot read \"" + path + "\"");
    std::stringstream ss;
    ss << in.rdbuf();
    return parse(ss.str(), path);
}

peak_table peak_table::parse(const std::string& json_text, const std::string& source) {
    using json = nlohmann::json;
    json j;
    try {
        j = json::parse(json_text);
    } catch (const json::parse_error& e) {
        throw std::invalid_argument(source + ": invalid JSON: " + e.what());
    }
    peak_table t;
    t.source_ = source;
    t.table_.erase("avx2");  // optional: falls back to "f32"
    for (const char* dt : {"f32", "bf16", "avx2", "amx_bf16"}) {
        const bool optional = std::string(dt) == "avx2" || std::string(dt) == "amx_bf16";
        if (optional && j.is_object() && !j.contains(dt)) continue;
        if (!j.is_object() || !j.contains(dt) || !j.at(dt).is_object())
            throw std::invalid_argument(source + ": expected an object \"" + std::string(dt) +
                                        "\": {\"1\": GFLOPS, ...}");
        std::map<int, double>& row = t.table_[dt];
        row.clear();
        for (auto it = j.at(dt).begin(); it != j.at(dt).end(); ++it) {
            int threads = 0;
            try {
                threads = std::stoi(it.key());
            } catch (const std::exception&) {
            }
            if (threads < 1 || !it.value().is_number() || it.value().get<double>() <= 0)
                throw std::invalid_argument(source + ": " + dt + "." + it.key() +
                                            ": expected a thread count and a positive GFLOP/s");
            row[threads] = it.value().get<double>();
        }
        if (!row.count(1)) throw std::invalid_argument(source + ": " + dt + " needs the 1-thread figure \"1\"");
    }
    return t;
}

double peak_table::gflops(data_type dt, int threads, const std::string& impl) const {
    auto at = [&](const char* key) {
        const std::map<int, double>& row = table_.at(key);
        const auto it = row.find(threads);
        return it != row.end() ? it->second : row.at(1) * threads;
    };
    if (is_avx2_impl(impl)) return at(table_.count("avx2") ? "avx2" : "f32");  // every dtype is an f32 ymm FMA there
    if (dt == data_type::bf16 && is_amx_impl(impl) && table_.count("amx_bf16")) return at("amx_bf16");
    // bf16 runs on vdpbf16ps or, where that is slower, widened to f32 for
    // the FMA (convgrad's bf16 dot probe): its peak is the faster of the two.
    return dt == data_type::bf16 ? std::max(at("bf16"), at("f32")) : at("f32");
}

timing time_op(const op& o, const void* input0, const void* input1, void* output,
               const timing_budget& budget) {
    using clock = std::chrono::steady_clock;
    auto run_seconds = [&] {
        const auto t0 = clock::now();
        o.execute(input0, input1, output);
        return std::chrono::duration<double>(clock::now() - t0).count();
    };
    timing t;
    const double warm = run_seconds();
    if (warm >= budget.single_run_limit_s) {
        t.median_ms = warm * 1e3;
        t.reps = 1;
        t.single_run = true;
        return t;
    }
    std::vector<double> runs;
    double total = 0;
    while ((static_cast<int>(runs.size()) < budget.min_reps || total < budget.min_seconds) &&
           total < budget.max_seconds) {
        runs.push_back(run_seconds());
        total += runs.back();
    }
    std::sort(runs.begin(), runs.end());
    const size_t n = runs.size();
    t.median_ms = 1e3 * (n % 2 ? runs[n / 2] : 0.5 * (runs[n / 2 - 1] + runs[n / 2]));
    t.reps = static_cast<int>(n);
    return t;
}

}  // namespace convgrad::cli
