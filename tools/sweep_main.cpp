// convgrad-sweep: see sweep_usage() and docs/sweep.md.
#include <tbb/task_arena.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <iostream>

#include "json_op.hpp"
#include "sweep.hpp"

namespace {

using namespace convgrad::cli;

// A one-line progress bar on stderr, only when stderr is a terminal.
class progress_bar {
public:
    explicit progress_bar(size_t total) : total_(total), enabled_(::isatty(STDERR_FILENO) != 0) {}
    void show(size_t done, const std::string& what) const {
        if (!enabled_) return;
        const int width = 30, filled = static_cast<int>(width * done / (total_ ? total_ : 1));
        std::fprintf(stderr, "\r\033[K[%s%s] %zu/%zu %.40s", std::string(filled, '#').c_str(),
                     std::string(width - filled, '.').c_str(), done, total_, what.c_str());
        std::fflush(stderr);
    }
    void clear() const {
        if (enabled_) std::fprintf(stderr, "\r\033[K");
    }

private:
    size_t total_;
    bool enabled_;
};

// Under --guard an access outside a tensor faults; the handler names the
// case that faulted (the line for it is never printed), then the default
// action ends the process. Only async-signal-safe calls in the handler.
char fault_message[512];
size_t fault_message_length = 0;

void on_fault(int) {
    if (fault_message_length == 0) return;
    [[maybe_unused]] const ssize_t n = ::write(STDERR_FILENO, fault_message, fault_message_length);
}

void install_fault_reporter() {
    struct sigaction sa = {};
    sa.sa_handler = on_fault;
    sa.sa_flags = SA_RESETHAND;  // the fault repeats on return, with the default action
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, nullptr);
    sigaction(SIGBUS, &sa, nullptr);
}

void set_fault_case(const op_case& c, const sweep_options& o) {
    const int n = std::snprintf(fault_message, sizeof fault_message,
                                "\nFAULT %s %s %s: access outside a tensor placed with --guard=%s\n",
                                short_op_name(c.kind), convgrad::dtype_name(c.dt), display_name(c).c_str(),
                                guard_side_name(o.guard));
    fault_message_length = n > 0 ? std::min(static_cast<size_t>(n), sizeof fault_message - 1) : 0;
}

template <class Writer>
void write_file(const std::string& path, Writer write) {
    if (path.empty()) return;
    std::ofstream out(path);
    if (!out) throw std::invalid_argument("cannot write \"" + path + "\"");
    write(out);
}

int run(const sweep_options& o) {
    const std::vector<op_case> cases = collect_cases(o);
    if (o.emit_json) {
        for (const op_case& c : cases) std::cout << to_json(c) << '\n';
        return 0;
    }
    // Only timing needs the peaks (measuring them takes 1-4 s).
    const peak_table peaks = o.perf || !o.peaks_file.empty() ? peak_table::from_option(o.peaks_file) : peak_table();
    if (o.perf) std::cout << "peaks: " << peaks.source() << std::endl;
    const auto start = std::chrono::steady_clock::now();
    std::vector<case_result> results;
    const progress_bar bar(cases.size());
    tbb::task_arena arena(o.threads ? o.threads : tbb::task_arena::automatic);
    arena.execute([&] {
        const bool guarded = o.guard != guard_side::none;  // parse_sweep_args: only with a check
        if (guarded) install_fault_reporter();
        for (const op_case& c : cases) {
            bar.show(results.size(), c.name.empty() ? c.descriptor : c.name);
            if (guarded) set_fault_case(c, o);
            results.push_back(run_case(c, o, peaks));
            bar.clear();
            std::cout << format_line(results.back()) << std::endl;
        }
    });
    int passed = 0, failed = 0, skipped = 0;
    for (const case_result& r : results) {
        passed += r.status == "PASS";
        failed += r.status == "FAIL";
        skipped += r.status == "SKIP";
    }
    write_file(o.csv_file, [&](std::ostream& out) { write_csv(out, results); });
    write_file(o.json_file, [&](std::ostream& out) { write_json(out, results, peaks.source()); });
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::cout << "total time " << static_cast<int>(seconds + 0.5) << " s\n"
              << passed << " passed, " << failed << " failed, " << skipped << " skipped" << std::endl;
    return failed ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
    try {
        const sweep_options o = parse_sweep_args(std::vector<std::string>(argv + 1, argv + argc));
        if (o.help) {
            std::cout << sweep_usage();
            return 0;
        }
        return run(o);
    } catch (const std::exception& e) {
        std::cerr << "convgrad-sweep: " << e.what() << '\n';
        return 2;
    }
}
