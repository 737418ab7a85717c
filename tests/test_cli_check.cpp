// Mode C of the sweep: the comparison passes correct results in every op,
// dtype and layout, and fails a deliberately corrupted one. Also the option
// parser and the case list of the sweep.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <cerrno>
#include <unistd.h>

#include "check.hpp"
#include "json_op.hpp"
#include "sweep.hpp"

using namespace convgrad::cli;
using convgrad::data_type;
using convgrad::op_kind;

namespace {

op_case small_case(op_kind kind, data_type dt, const layout_options& lo = {}) {
    const bool deconv = kind == op_kind::conv_transpose_bwd_weights;
    const conv_desc d = deconv ? parse_descriptor("g2mb2oc4ic6ih5ow12iw5kh3kw3sh1sw2ph1pw0", desc_kind::deconv)
                               : parse_descriptor("g2mb2ic6ih7iw6oc4kh3kw2sh2sw1ph1pw0dw1");
    return make_case(d, kind, dt, lo);
}

}  // namespace

TEST_CASE("cli check: correct results pass in every op, dtype and layout", "[cli][check]") {
    for (op_kind kind : {op_kind::conv_bwd_weights, op_kind::conv_bwd_data, op_kind::conv_transpose_bwd_weights})
        for (data_type dt : {data_type::f32, data_type::bf16, data_type::f16})
            for (const char* df : {"NXC", "NCX"})
                for (bool shape_input : {false, true}) {
                    const op_case c = small_case(kind, dt, {df, "OIX", "none", shape_input});
                    INFO(to_json(c));
                    REQUIRE(c.skip_reason.empty());
                    const check_result r = check_case(c, "", false);
                    CHECK(r.ok);
                    CHECK(r.exact == "ok");
                    CHECK_THAT(r.reals, Catch::StartsWith("err/tol"));
                }
}

namespace {

// Whether the byte at p can be read, without touching it: write(2) to a pipe
// fails with EFAULT when the kernel cannot read the source.
bool readable(const void* p) {
    int fds[2];
    REQUIRE(::pipe(fds) == 0);
    const ssize_t n = ::write(fds[1], p, 1);
    const int err = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    if (n != 1) CHECK(err == EFAULT);
    return n == 1;
}

}  // namespace

TEST_CASE("cli check: guarded buffers sit against an inaccessible page", "[cli][check]") {
    for (data_type dt : {data_type::f32, data_type::bf16})
        for (int64_t elems : {1, 3, 1024, 1025, 5000}) {
            INFO("elems " << elems);
            tensor_buffer end(dt, elems, guard_side::end), begin(dt, elems, guard_side::begin);
            for (tensor_buffer* b : {&end, &begin}) {
                const auto* first = static_cast<const unsigned char*>(b->data());
                CHECK(b->bytes() == static_cast<size_t>(elems) * (dt == data_type::f32 ? 4 : 2));
                CHECK(readable(first));
                CHECK(readable(first + b->bytes() - 1));
                b->set(0, 2.f);
                b->set(elems - 1, -3.f);
                CHECK(b->get(0) == (elems == 1 ? -3.f : 2.f));
                CHECK(b->get(elems - 1) == -3.f);
            }
            const auto* e = static_cast<const unsigned char*>(end.data());
            const auto* s = static_cast<const unsigned char*>(begin.data());
            CHECK_FALSE(readable(e + end.bytes()));
            CHECK_FALSE(readable(s - 1));
            tensor_buffer moved(std::move(end));
            CHECK(moved.data() == e);
            CHECK(moved.get(elems - 1) == -3.f);
            CHECK_FALSE(readable(e + moved.bytes()));
        }
    CHECK(parse_guard_side("end") == guard_side::end);
    CHECK(parse_guard_side("begin") == guard_side::begin);
    CHECK(parse_guard_side("none") == guard_side::none);
    CHECK_THROWS_WITH(parse_guard_side("both"), Catch::Contains("expected none | end | begin"));
}

TEST_CASE("cli check: guarded checks pass in every op, dtype and layout", "[cli][check]") {
    for (op_kind kind : {op_kind::conv_bwd_weights, op_kind::conv_bwd_data, op_kind::conv_transpose_bwd_weights})
        for (data_type dt : {data_type::f32, data_type::bf16, data_type::f16})
            for (const char* df : {"NXC", "NCX"})
                for (guard_side g : {guard_side::end, guard_side::begin}) {
                    const op_case c = small_case(kind, dt, {df, "XIO", "none", false});
                    INFO(to_json(c) << " guard " << guard_side_name(g));
                    const check_result r = check_case(c, "", false, 1, g);
                    CHECK(r.ok);
                    CHECK(r.exact == "ok");
                    CHECK_FALSE(check_case(c, "", true, 1, g).ok);
                }
    const sweep_options o = parse_sweep_args({"--guard=begin", "ic3oc4iw5kw3"});
    CHECK(o.guard == guard_side::begin);
    CHECK_THROWS_WITH(parse_sweep_args({"--guard=left"}), Catch::Contains("option --guard=left: expected none"));
    CHECK_THROWS_WITH(parse_sweep_args({"--guard=end", "--mode=P"}), Catch::Contains("--mode has no C"));
    CHECK(parse_sweep_args({"--guard=end", "--mode=CP"}).guard == guard_side::end);
}

TEST_CASE("cli check: a corrupted result is detected", "[cli][check]") {
    for (op_kind kind : {op_kind::conv_bwd_weights, op_kind::conv_bwd_data, op_kind::conv_transpose_bwd_weights})
        for (data_type dt : {data_type::f32, data_type::bf16}) {
            const op_case c = small_case(kind, dt);
            INFO(to_json(c));
            const check_result r = check_case(c, "", true);
            CHECK_FALSE(r.ok);
            CHECK_THAT(r.exact, Catch::Contains("1 element wrong"));
            CHECK_THAT(r.reals, Catch::Contains("1 element wrong"));
        }
}

TEST_CASE("cli check: the real-valued tolerance", "[cli][check]") {
    tensor_buffer want(data_type::f32, 2), got(data_type::f32, 2), sum(data_type::f32, 2);
    want.set(0, 1.0f);
    want.set(1, -3.0f);
    sum.set(0, 100.0f);
    sum.set(1, 100.0f);
    // L = 1000: tol ~ 2 * 1001 * 2^-24 * 100 = 1.19e-2.
    got.set(0, 1.0f + 1e-2f);
    got.set(1, -3.0f);
    CHECK(compare_reals(got, want, sum, 1000).ok);
    got.set(0, 1.0f + 2e-2f);
    const comparison c = compare_reals(got, want, sum, 1000);
    CHECK_FALSE(c.ok);
    CHECK(c.first_bad == 0);
    got.set(0, NAN);
    CHECK_FALSE(compare_reals(got, want, sum, 1000).ok);

    CHECK(exact_fill_range(1000) == 2);
    CHECK(exact_fill_range(5000000) == 1);  // 4 * 5e6 >= 2^24
    CHECK(exact_fill_range(20000000) == 0);
}

TEST_CASE("cli check: bf16 and f16 buffers round to nearest even", "[cli][check]") {
    tensor_buffer b(data_type::bf16, 1), h(data_type::f16, 1);
    b.set(0, 1.0f + 1.0f / 256);  // halfway between bf16 1 and 1 + 2^-7: ties to even
    CHECK(b.get(0) == 1.0f);
    b.set(0, 1.0f + 3.0f / 256);
    CHECK(b.get(0) == 1.0f + 4.0f / 256);
    h.set(0, 0.1f);
    CHECK(h.bits(0) == 0x2e66);
    CHECK(absolute(h).get(0) == h.get(0));
}

TEST_CASE("cli check: minibatch changes keep the op consistent", "[cli][check]") {
    for (op_kind kind : {op_kind::conv_bwd_weights, op_kind::conv_bwd_data, op_kind::conv_transpose_bwd_weights})
        for (bool shape_input : {false, true}) {
            const op_case c = small_case(kind, data_type::f32, {"NXC", "", "none", shape_input});
            const op_case one = with_minibatch(c, 1);
            CHECK(one.minibatch() == 1);
            CHECK(one.make_op().flops() == Approx(c.make_op().flops() / 2));
            CHECK(one.expected_flops == Approx(c.expected_flops / 2));
        }
}

TEST_CASE("cli sweep: options are parsed or rejected clearly", "[cli][sweep]") {
    const sweep_options o = parse_sweep_args({"--op=bwd_w,ConvolutionBackwardData", "--dt=bf16,f16", "--mb=3",
                                              "--threads=2", "--isa=avx2", "--mode=cp", "--check-mb=1",
                                              "ic3oc4iw5kw3", "--data-format=NCX"});
    CHECK(o.ops == std::vector<op_kind>{op_kind::conv_bwd_weights, op_kind::conv_bwd_data});
    CHECK(o.dtypes == std::vector<data_type>{data_type::bf16, data_type::f16});
    CHECK((o.mb == 3 && o.threads == 2 && o.isa == "avx2" && o.check && o.perf && o.check_mb == 1));
    const std::vector<op_case> cases = collect_cases(o);
    REQUIRE(cases.size() == 4);
    CHECK(cases[0].minibatch() == 3);
    CHECK(cases[0].attrs.data_format == "NCX");

    struct bad {
        std::vector<std::string> args;
        const char* message;
    };
    const std::vector<bad> table = {
        {{"--op=fwd"}, "option --op=fwd: op: expected bwd_w | bwd_d | deconv_bwd_w"},
        {{"--dt=f64"}, "option --dt=f64: data type"},
        {{"--mb=0"}, "option --mb=0: expected an integer from 1"},
        {{"--threads=two"}, "expected an integer"},
        {{"--isa=sse"}, "option --isa=sse: expected ref | avx2"},
        {{"--mode=X"}, "expected C, P, CP, D, CD, PD or CPD"},
        {{"--mode=CC"}, "expected C, P, CP, D"},
        {{"--mode="}, "empty value"},
        {{"--frobnicate=1"}, "unknown option"},
        {{"--verbose"}, "unknown option"},
        {{"--csv="}, "empty value"},
    };
    for (const bad& b : table) {
        INFO(b.args[0]);
        CHECK_THROWS_WITH(parse_sweep_args(b.args), Catch::Contains(b.message));
    }
    CHECK_THROWS_WITH(collect_cases(parse_sweep_args({"--data-format=NHWC", "ic3oc4iw5kw3"})),
                      Catch::Contains("data format: expected NXC | NCX"));
    CHECK_THROWS_WITH(collect_cases(parse_sweep_args({"--weights-format=IOX", "ic3oc4iw5kw3"})),
                      Catch::Contains("weights format: expected XIO | OIX"));
    CHECK_THROWS_WITH(collect_cases(parse_sweep_args({"ic3oc4iw5kw3", "ic3oc-4iw5kw3"})),
                      Catch::Contains("argument 2: \"ic3oc-4iw5kw3\": at column 6: negative value"));
    CHECK_THROWS_WITH(collect_cases(parse_sweep_args({"--batch=/nonexistent/file"})),
                      Catch::Contains("cannot read"));
}

TEST_CASE("cli sweep: the default list is ResNet-50, both conv ops", "[cli][sweep]") {
    const std::vector<op_case> cases = collect_cases(parse_sweep_args({}));
    REQUIRE(cases.size() == 40);
    CHECK(cases[0].kind == op_kind::conv_bwd_weights);
    CHECK(cases[1].kind == op_kind::conv_bwd_data);
    CHECK(cases[0].name == "\"resnet_50:conv1\"");
}

TEST_CASE("cli sweep: a deconv file under a convolution op says how it was read", "[cli][sweep]") {
    const std::filesystem::path dir = std::filesystem::temp_directory_path() / "convgrad_cli_test" / "deconv";
    std::filesystem::create_directories(dir);
    const std::filesystem::path file = dir / "up";
    std::ofstream(file) << "mb2ic8ih4oc4oh8kh2sh2ph0n\"up\"\n";
    const std::vector<op_case> cases =
            collect_cases(parse_sweep_args({"--op=deconv_bwd_w,bwd_w", "--batch=" + file.string()}));
    std::filesystem::remove_all(dir.parent_path());
    REQUIRE(cases.size() == 2);
    CHECK(cases[0].kind == op_kind::conv_transpose_bwd_weights);
    CHECK(cases[0].note.find("read as a convolution") == std::string::npos);
    CHECK(cases[1].kind == op_kind::conv_bwd_weights);
    CHECK(cases[1].note.find("read as a convolution") != std::string::npos);
}

TEST_CASE("cli sweep: run_case passes, fails a corrupted result, and skips the inexpressible", "[cli][sweep]") {
    sweep_options o = parse_sweep_args({"--mode=CP", "--op=bwd_w,bwd_d,deconv_bwd_w", "g2mb3ic4oc6iw9kw3sw2"});
    const peak_table peaks;
    for (const op_case& c : collect_cases(o)) {
        const case_result r = run_case(c, o, peaks);
        INFO(format_line(r));
        CHECK(r.status == "PASS");
        CHECK(r.check_mb == 2);
        CHECK(r.reps > 0);
        CHECK(r.gflops > 0);
        CHECK(r.flops == Approx(c.expected_flops));
    }
    o.corrupt_for_test = true;
    o.perf = false;
    for (const op_case& c : collect_cases(o)) {
        const case_result r = run_case(c, o, peaks);
        CHECK(r.status == "FAIL");
        CHECK_THAT(format_line(r), Catch::StartsWith("FAIL"));
    }
    // p_end = -3 with stride 2: raising it to 0 would change the output size.
    const op_case skip = make_case(parse_descriptor("ic1oc1iw8ow3kw1sw2pw0"), op_kind::conv_bwd_weights,
                                   data_type::f32, {});
    CHECK_THAT(skip.skip_reason, Catch::Contains("cannot be raised to 0"));
    CHECK(run_case(skip, o, peaks).status == "SKIP");
}

TEST_CASE("cli sweep: mode D prints each op's plan, alone or with a check", "[cli][sweep]") {
    const char* dw = "g64mb2ic64oc64ih9kh3n\"dw\"";
    sweep_options o = parse_sweep_args({"--mode=D", "--op=bwd_w,bwd_d", "--dt=f32,bf16", dw});
    CHECK((o.describe && !o.check && !o.perf));
    for (const op_case& c : collect_cases(o)) {
        const case_result r = run_case(c, o, peak_table());
        INFO(format_line(r));
        CHECK(r.status == "PASS");
        CHECK_THAT(r.plan, Catch::StartsWith("jit:") && Catch::Contains("depthwise"));
        CHECK(r.exact.empty());  // nothing ran
        CHECK(r.reps == 0);
        // The line, then the plan a line at a time, indented.
        const std::string line = format_line(r);
        CHECK_THAT(line, Catch::StartsWith("PASS"));
        CHECK_THAT(line, Catch::Contains("\n    " + r.plan.substr(0, r.plan.find('\n'))));
    }
    o = parse_sweep_args({"--mode=cd", "--op=bwd_w", dw});
    CHECK((o.describe && o.check && !o.perf));
    const case_result r = run_case(collect_cases(o).at(0), o, peak_table());
    CHECK(r.status == "PASS");
    CHECK(r.exact == "ok");
    CHECK_THAT(r.plan, Catch::Contains("depthwise"));
    std::ostringstream json;
    write_json(json, {r}, "defaults");
    CHECK_THAT(json.str(), Catch::Contains("\"plan\": \"jit:"));
}

TEST_CASE("cli sweep: checks the reference cannot finish are skipped, not hung", "[cli][sweep]") {
    // oneDNN's 3d_conv_large_shape:2 at mb1: the data gradient's reference
    // would try 192^3 taps for each of 32 * 192^3 diff_src elements.
    const sweep_options o = parse_sweep_args({"--mode=C", "--op=bwd_d", "g1mb1_ic32oc1_id192kd192"});
    const std::vector<op_case> cases = collect_cases(o);
    REQUIRE(cases.size() == 1);
    CHECK(reference_steps(cases[0]) > 1e15);
    const case_result r = run_case(cases[0], o, peak_table());
    CHECK(r.status == "SKIP");
    CHECK_THAT(r.detail, Catch::Contains("check skipped"));
    // Ordinary shapes are far below the limit.
    const op_case small = small_case(op_kind::conv_bwd_data, data_type::f32);
    CHECK(reference_steps(small) == Approx(small.make_op().flops() / 2 + 2 * 6 * 7 * 6 * 3 * 2));
}

TEST_CASE("cli sweep: CSV and JSON results", "[cli][sweep]") {
    const sweep_options o = parse_sweep_args({"--mode=C", "--op=bwd_w", "ic3oc4iw5kw3n\"with,comma\""});
    std::vector<case_result> results;
    for (const op_case& c : collect_cases(o)) results.push_back(run_case(c, o, peak_table()));
    std::ostringstream csv, json;
    write_csv(csv, results);
    write_json(json, results, "defaults");
    CHECK_THAT(csv.str(), Catch::StartsWith("status,op,dtype,name,descriptor,mb,check_mb,timed_mb,exact"));
    CHECK_THAT(csv.str(), Catch::Contains("PASS,bwd_w,f32,\"with,comma\","));
    CHECK_THAT(json.str(), Catch::Contains("\"passed\": 1"));
    CHECK_THAT(json.str(), Catch::Contains("\"exact\": \"ok\""));
}

TEST_CASE("cli perf: the peak table", "[cli][perf]") {
    const peak_table defaults;
    CHECK(defaults.gflops(data_type::f32, 2) == 469.4);
    CHECK(defaults.gflops(data_type::bf16, 1) == 471.0);
    CHECK(defaults.gflops(data_type::f16, 2) == 469.4);
    CHECK(defaults.gflops(data_type::f32, 4) == Approx(4 * 238.6));
    const peak_table t = peak_table::parse(R"({"f32": {"1": 100, "8": 700}, "bf16": {"1": 200}})", "p");
    CHECK(t.gflops(data_type::f32, 8) == 700);
    CHECK(t.gflops(data_type::bf16, 3) == 600);
    // A CPU whose vdpbf16ps is slower than its FMA: bf16 widens, so its peak
    // is the f32 one.
    const peak_table slow = peak_table::parse(R"({"f32": {"1": 150, "2": 280}, "bf16": {"1": 80, "2": 150}})", "p");
    CHECK(slow.gflops(data_type::bf16, 2) == 280);
    CHECK(slow.gflops(data_type::bf16, 4) == 600);
    // The AVX2 kernels: their own row (every dtype is an f32 ymm FMA there),
    // or the f32 row when a file has none.
    CHECK(defaults.gflops(data_type::f32, 2, "jit:avx2") == 231.0);
    CHECK(defaults.gflops(data_type::bf16, 1, "jit_1x1:avx2") == 117.2);
    CHECK(t.gflops(data_type::bf16, 8, "jit:avx2") == 700);
    const peak_table a = peak_table::parse(R"({"f32": {"1": 100}, "bf16": {"1": 200}, "avx2": {"1": 50}})", "p");
    CHECK(a.gflops(data_type::f16, 2, "jit:avx2") == 100);
    CHECK(a.gflops(data_type::f32, 2, "jit:avx512_core") == 200);
    CHECK_THROWS_WITH(peak_table::parse(R"({"f32": {"1": 1}, "bf16": {"1": 1}, "avx2": {"1": -1}})", "p"),
                      Catch::Contains("avx2.1"));
    CHECK(peak_table::is_avx2_impl("jit:avx2"));
    CHECK(peak_table::is_avx2_impl("jit_1x1:avx2"));
    CHECK_FALSE(peak_table::is_avx2_impl("jit:avx512_core"));
    // AMX tiles: bf16 only, from their own row where the file has one.
    const peak_table x = peak_table::parse(R"({"f32": {"1": 100}, "bf16": {"1": 200}, "amx_bf16": {"1": 900}})", "p");
    CHECK(x.gflops(data_type::bf16, 2, "jit:amx") == 1800);
    CHECK(x.gflops(data_type::bf16, 1, "jit:avx512_core_amx_bf16") == 900);
    CHECK(x.gflops(data_type::f32, 1, "jit:amx") == 100);
    CHECK(x.gflops(data_type::bf16, 1, "jit:avx512_core_bf16") == 200);
    CHECK(a.gflops(data_type::bf16, 1, "jit:amx") == 200);
    CHECK_THROWS_WITH(peak_table::parse(R"({"f32": {"1": 1}, "bf16": {"1": 1}, "amx_bf16": {"1": 0}})", "p"),
                      Catch::Contains("amx_bf16.1"));
    CHECK_THROWS_WITH(peak_table::parse(R"({"f32": {"1": 100}})", "p.json"), Catch::Contains("p.json"));
    CHECK_THROWS_WITH(peak_table::parse(R"({"f32": {"x": 1}, "bf16": {"1": 1}})", "p"),
                      Catch::Contains("f32.x"));
}

// --peaks=measure measures this machine; no --peaks keeps the defaults only
// on the kind of machine they were measured on.
TEST_CASE("cli perf: peaks measured on this machine", "[cli][perf]") {
    const peak_table m = peak_table::from_option("measure");
    CHECK_THAT(m.source(), Catch::StartsWith("measured at start on this machine (1 thread(s): f32 "));
    const int all = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    for (const char* impl : {"jit:avx512_core", "jit:avx2"})
        for (data_type dt : {data_type::f32, data_type::bf16}) {
            // An FMA a cycle at 0.5 GHz or more, and no more than 4 a cycle
            // of 16 lanes at 8 GHz.
            CHECK(m.gflops(dt, 1, impl) > 8);
            CHECK(m.gflops(dt, 1, impl) < 2048);
            CHECK(m.gflops(dt, all, impl) > 0);
        }
    // The AVX2 path's ymm FMAs: at most the f32 figure (zmm where there is AVX-512).
    CHECK(m.gflops(data_type::f32, 1, "jit:avx2") <= 1.25 * m.gflops(data_type::f32, 1));
    // AMX tiles, where convgrad runs them: above the vector units' bf16
    // (1024 flops a cycle a core where vdpbf16ps gives 64 to 128).
    if (convgrad::max_isa() == std::string("amx"))
        CHECK(m.gflops(data_type::bf16, 1, "jit:amx") > 2 * m.gflops(data_type::bf16, 1));
    const peak_table d = peak_table::from_option("");
    if (convgrad::cli::reference_host()) CHECK(d.gflops(data_type::f32, 2) == 469.4);
    else CHECK_THAT(d.source(), Catch::StartsWith("measured at start"));
    CHECK_THROWS_WITH(peak_table::from_option("/nonexistent/peaks.json"), Catch::Contains("/nonexistent/peaks.json"));
}
