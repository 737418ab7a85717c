// Command line of convgrad-sweep and the list of cases it describes.
#include <algorithm>
#include <cctype>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "json_op.hpp"
#include "sweep.hpp"

namespace convgrad::cli {
namespace {

[[noreturn]] void bad_option(const std::string& arg, const std::string& why) {
    throw std::invalid_argument("option " + arg + ": " + why);
}

std::vector<std::string> split_commas(const std::string& s) {
    std::vector<std::string> parts;
    std::stringstream ss(s);
    for (std::string part; std::getline(ss, part, ',');) parts.push_back(part);
    if (parts.empty()) parts.emplace_back();
    return parts;
}

int64_t parse_count(const std::string& arg, const std::string& value, int64_t min, int64_t max) {
    size_t used = 0;
    int64_t v = 0;
    try {
        v = std::stoll(value, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    if (used == 0 || used != value.size() || v < min || v > max)
        bad_option(arg, "expected an integer from " + std::to_string(min) + " to " +
                            std::to_string(max) + ", given \"" + value + "\"");
    return v;
}

std::string upper(std::string s) {
    for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return s;
}

void set_mode(sweep_options& o, const std::string& arg, const std::string& value) {
    const std::string m = upper(value);
    const bool letters = !m.empty() && m.find_first_not_of("CPD") == std::string::npos;
    const bool once = std::count(m.begin(), m.end(), 'C') <= 1 && std::count(m.begin(), m.end(), 'P') <= 1 &&
                      std::count(m.begin(), m.end(), 'D') <= 1;
    if (!letters || !once) bad_option(arg, "expected C, P, CP, D, CD, PD or CPD, given \"" + value + "\"");
    o.check = m.find('C') != std::string::npos;
    o.perf = m.find('P') != std::string::npos;
    o.describe = m.find('D') != std::string::npos;
}

void set_isa(sweep_options& o, const std::string& arg, const std::string& value) {
    for (const char* isa : {"ref", "avx2", "avx512_core", "avx512_core_bf16", "amx"})
        if (value == isa) {
            o.isa = value;
            return;
        }
    bad_option(arg, "expected ref | avx2 | avx512_core | avx512_core_bf16 | amx, given \"" + value + "\"");
}

// Applies one --key=value option. Returns false for an unknown key.
bool apply_option(sweep_options& o, const std::string& arg, const std::string& key, const std::string& value) {
    if (key == "batch") o.batch_files.push_back(value);
    else if (key == "op") {
        o.ops.clear();
        for (const std::string& name : split_commas(value)) {
            try {
                o.ops.push_back(parse_op_name(name));
            } catch (const std::invalid_argument& e) {
                bad_option(arg, e.what());
            }
        }
    } else if (key == "dt") {
        o.dtypes.clear();
        for (const std::string& name : split_commas(value)) {
            try {
                o.dtypes.push_back(parse_data_type(name));
            } catch (const error& e) {
                bad_option(arg, e.what());
            }
        }
    } else if (key == "data-format") o.layout.data_format = value;
    else if (key == "weights-format") o.layout.weights_format = value;
    else if (key == "auto-pad") o.layout.auto_pad = value;
    else if (key == "mb") o.mb = parse_count(arg, value, 1, 1 << 20);
    else if (key == "check-mb") o.check_mb = parse_count(arg, value, 1, 1 << 20);
    else if (key == "check-max-gsteps") o.check_max_gsteps = static_cast<double>(parse_count(arg, value, 1, 1 << 30));
    else if (key == "threads") o.threads = static_cast<int>(parse_count(arg, value, 1, 4096));
    else if (key == "isa") set_isa(o, arg, value);
    else if (key == "guard") {
        try {
            o.guard = parse_guard_side(value);
        } catch (const std::invalid_argument& e) {
            bad_option(arg, e.what());
        }
    }
    else if (key == "mode") set_mode(o, arg, value);
    else if (key == "csv") o.csv_file = value;
    else if (key == "json") o.json_file = value;
    else if (key == "peaks") o.peaks_file = value;
    else if (key == "perf-budget") o.perf_budget_s = static_cast<double>(parse_count(arg, value, 1, 86400));
    else if (key == "max-mem-gb") o.max_mem_gb = static_cast<double>(parse_count(arg, value, 1, 1 << 20));
    else return false;
    return true;
}

bool apply_flag(sweep_options& o, const std::string& arg) {
    if (arg == "--help" || arg == "-h") o.help = true;
    else if (arg == "--corrupt-for-test") o.corrupt_for_test = true;
    else if (arg == "--emit-json") o.emit_json = true;
    else if (arg == "--shape-input") o.layout.shape_as_input = true;
    else return false;
    return true;
}

bool looks_like_json(const std::string& text) {
    const size_t first = text.find_first_not_of(" \t\r\n");
    return first != std::string::npos && (text[first] == '{' || text[first] == '[');
}

std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::invalid_argument("--batch: cannot read \"" + path + "\"");
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

std::vector<op_kind> default_ops(const std::string& path) {
    // Transposed-convolution files live in deconv/ (benchdnn's layout).
    if (path.find("deconv") != std::string::npos) return {op_kind::conv_transpose_bwd_weights};
    return {op_kind::conv_bwd_weights, op_kind::conv_bwd_data};
}

class case_builder {
public:
    explicit case_builder(const sweep_options& o) : o_(o) {}

    // One descriptor, every requested op and dtype.
    void add_descriptor(const std::string& text, const std::vector<op_kind>& ops,
                        const std::string& where) {
        for (op_kind kind : ops) {
            conv_desc d;
            try {
                d = parse_descriptor(text, descriptor_kind(kind));
            } catch (const descriptor_error& e) {
                throw descriptor_error(text, e.position(), e.reason(), where);
            }
            add_desc(d, kind);
        }
    }

    void add_shape_file(const std::string& path) {
        const std::string text = read_file(path);
        if (looks_like_json(text)) return add_json(text, path);
        const std::vector<op_kind> ops = o_.ops.empty() ? default_ops(path) : o_.ops;
        std::vector<std::vector<shape_entry>> per_op;
        for (op_kind kind : ops) per_op.push_back(parse_shape_file(text, descriptor_kind(kind), path));
        // Shape-major order: every op of a descriptor before the next one.
        // A deconv file's transposed convolutions under a convolution op are
        // read by the convolution rule (other sizes and pads): said on the line.
        const bool deconv_file = default_ops(path).front() == op_kind::conv_transpose_bwd_weights;
        for (size_t i = 0; i < per_op.front().size(); ++i)
            for (size_t k = 0; k < ops.size(); ++k)
                add_desc(per_op[k][i].desc, ops[k],
                         deconv_file && ops[k] != op_kind::conv_transpose_bwd_weights
                                 ? "read as a convolution: the file is under a deconv path (default op deconv_bwd_w)"
                                 : "");
    }

    void add_json(const std::string& text, const std::string& source) {
        for (op_case c : parse_json_ops(text, source)) {
            const bool wanted = o_.ops.empty() || !c.skip_reason.empty() ||
                                std::find(o_.ops.begin(), o_.ops.end(), c.kind) != o_.ops.end();
            if (!wanted) continue;
            if (o_.mb) c = with_minibatch(c, o_.mb);
            for (data_type dt : o_.dtypes.empty() ? std::vector<data_type>{c.dt} : o_.dtypes) {
                c.dt = dt;
                cases_.push_back(c);
            }
        }
    }

    std::vector<op_case> take() { return std::move(cases_); }

private:
    void add_desc(conv_desc d, op_kind kind, const std::string& note = "") {
        if (o_.mb) d.mb = o_.mb;
        for (data_type dt : o_.dtypes.empty() ? std::vector<data_type>{data_type::f32} : o_.dtypes) {
            cases_.push_back(make_case(d, kind, dt, o_.layout));
            if (!note.empty()) {
                std::string& n = cases_.back().note;
                n = n.empty() ? note : note + "; " + n;
            }
        }
    }

    const sweep_options& o_;
    std::vector<op_case> cases_;
};

}  // namespace

sweep_options parse_sweep_args(const std::vector<std::string>& args) {
    sweep_options o;
    for (const std::string& arg : args) {
        if (apply_flag(o, arg)) continue;
        if (arg.rfind("--", 0) == 0) {
            const size_t eq = arg.find('=');
            if (eq == std::string::npos) bad_option(arg, "unknown option (options are --key=value; see --help)");
            const std::string key = arg.substr(2, eq - 2), value = arg.substr(eq + 1);
            if (value.empty()) bad_option(arg, "empty value");
            if (!apply_option(o, arg, key, value)) bad_option(arg, "unknown option (see --help)");
            continue;
        }
        o.inputs.push_back(arg);
    }
    if (o.guard != guard_side::none && !o.check)
        throw std::invalid_argument(std::string("option --guard=") + guard_side_name(o.guard) +
                                    ": guards the check, but --mode has no C");
    return o;
}

std::vector<op_case> collect_cases(const sweep_options& o) {
    case_builder b(o);
    const std::vector<op_kind> conv_ops =
        o.ops.empty() ? std::vector<op_kind>{op_kind::conv_bwd_weights, op_kind::conv_bwd_data} : o.ops;
    for (size_t i = 0; i < o.inputs.size(); ++i) {
        const std::string where = "argument " + std::to_string(i + 1);
        if (looks_like_json(o.inputs[i])) b.add_json(o.inputs[i], where);
        else b.add_descriptor(o.inputs[i], conv_ops, where);
    }
    for (const std::string& path : o.batch_files) b.add_shape_file(path);
    if (o.inputs.empty() && o.batch_files.empty())
        for (const std::string& d : resnet50_descriptors()) b.add_descriptor(d, conv_ops, "resnet-50 list");
    return b.take();
}

std::string sweep_usage() {
    return R"(usage: convgrad-sweep [options] [DESCRIPTOR | JSON ...]

Checks (mode C) and times (mode P) convgrad's backward convolutions.
With no descriptor and no --batch: the embedded ResNet-50 list (20 shapes).

inputs
  DESCRIPTOR            benchdnn syntax, e.g. mb2ic16ih10oc16oh10kh3n"name"
  JSON                  an op as JSON (starts with '{' or '['), see docs/sweep.md
  --batch=FILE          a benchdnn shape file or a JSON file (repeatable);
                        files under a "deconv" path default to --op=deconv_bwd_w
problem
  --op=LIST             bwd_w, bwd_d, deconv_bwd_w or spec names, comma-separated
                        (default bwd_w,bwd_d; deconv_bwd_w reads deconv descriptors)
  --dt=LIST             f32 | bf16 | f16, comma-separated (default f32)
  --data-format=F       NXC (default) | NCX
  --weights-format=F    XIO (default) | OIX; ConvTranspose also IOX | XOI
  --auto-pad=P          none (default) | same_upper | same_lower | valid
  --mb=N                override the minibatch
  --shape-input         pass weights_shape / dst_shape as the s32 input 2
run
  --mode=C|P|CP         check, time, or both (default C); add D (CD, PD, CPD)
                        to print each op's plan, D alone prints plans only
  --check-mb=N          minibatch of the check in CP mode (default 2)
  --check-max-gsteps=N  skip the check when one reference run needs more than
                        N*10^9 loop steps (default 5)
  --threads=N           run in a task_arena of N threads (default: all cores)
  --isa=ISA             cap the op under test: ref | avx2 | avx512_core |
                        avx512_core_bf16 | amx (the check always uses ref)
  --guard=SIDE          mode C: place the tested op's inputs and output with
                        their end (SIDE=end) or their start (begin) against an
                        inaccessible page, so any access outside them faults
  --perf-budget=S       time at a smaller minibatch when a full run is predicted
                        to take more than S seconds (default 2; the reference)
  --peaks=FILE|measure  peak GFLOP/s from convgrad-peak, or measured at start
                        (default: the measured Zen 5 figures on a Zen 5 with
                        AVX-512 BF16, measured at start on other machines)
  --max-mem-gb=N        skip cases needing more memory (default 8)
output
  --csv=FILE  --json=FILE   write every result
  --emit-json           print each case as JSON and exit
  --corrupt-for-test    corrupt one output element before comparing (C must FAIL)
Exit status: 0 all passed or skipped, 1 a case failed, 2 bad usage or input.
)";
}

}  // namespace convgrad::cli
