// Bad input: every row must throw convgrad::error whose message names the op,
// the attribute or tensor, and the expected and given values, and the output
// buffer must be left exactly as it was.
#include <catch2/catch.hpp>

#include <functional>

#include "test_util.hpp"

using convgrad::attributes;
using convgrad::data_type;
using convgrad::dims;
using convgrad::op_kind;

namespace {

struct Desc {
    op_kind kind = op_kind::conv_bwd_weights;
    attributes a;
    dims in0, in1;
    std::vector<int32_t> shape;
    bool use_shape = false;
};

// A valid 2D ConvolutionBackwardWeights: NXC src 2x8x8x4, diff_dst 2x8x8x6, XIO 3x3x4x6.
Desc good_bwd_w() {
    Desc d;
    d.a.strides = {1, 1};
    d.a.pads_begin = {1, 1};
    d.a.pads_end = {1, 1};
    d.a.dilations = {1, 1};
    d.a.weights_shape = {3, 3, 4, 6};
    d.in0 = {2, 8, 8, 4};
    d.in1 = {2, 8, 8, 6};
    return d;
}

Desc good_bwd_d() {
    Desc d = good_bwd_w();
    d.kind = op_kind::conv_bwd_data;
    d.a.weights_shape.clear();
    d.a.dst_shape = {2, 8, 8, 4};
    d.in0 = {2, 8, 8, 6};
    d.in1 = {3, 3, 4, 6};
    return d;
}

// ConvTranspose 1D: src 1x5x4 (NXC, IC_T 4), stride 2, k3 -> diff_dst W = 11, OC_T 2; IOX (4, 2, 3).
Desc good_deconv() {
    Desc d;
    d.kind = op_kind::conv_transpose_bwd_weights;
    d.a.strides = {2};
    d.a.pads_begin = {0};
    d.a.pads_end = {0};
    d.a.dilations = {1};
    d.a.weights_format = "IOX";
    d.a.weights_shape = {4, 2, 3};
    d.in0 = {1, 5, 4};
    d.in1 = {1, 11, 2};
    return d;
}

struct Row {
    std::string what;
    Desc desc;
    std::vector<std::string> must_contain;
};

template <typename F>
Desc with(Desc d, F f) {
    f(d);
    return d;
}

void expect_error_and_untouched(const Row& r) {
    INFO(r.what);
    std::vector<uint8_t> out(1 << 16, 0xA5);
    std::vector<float> in(1 << 14, 1.f);
    std::string msg;
    try {
        const convgrad::op o(r.desc.kind, data_type::f32, r.desc.a, r.desc.in0, r.desc.in1,
                             r.desc.use_shape ? &r.desc.shape : nullptr);
        o.execute(in.data(), in.data(), out.data());
    } catch (const convgrad::error& e) {
        msg = e.what();
    }
    INFO("message: " << msg);
    REQUIRE_FALSE(msg.empty());
    CHECK(msg.find(convgrad::op_name(r.desc.kind)) == 0);
    CHECK(msg.find("expected") != std::string::npos);
    CHECK(msg.find("given") != std::string::npos);
    for (const std::string& s : r.must_contain) CHECK(msg.find(s) != std::string::npos);
    CHECK(std::all_of(out.begin(), out.end(), [](uint8_t b) { return b == 0xA5; }));
}

}  // namespace

TEST_CASE("valid descriptors of the table are accepted", "[validation]") {
    // The bad rows below are one change away from these.
    for (const Desc& d : {good_bwd_w(), good_bwd_d(), good_deconv()}) {
        const convgrad::op o(d.kind, data_type::f32, d.a, d.in0, d.in1);
        CHECK(o.output_elems() > 0);
    }
}

TEST_CASE("bad inputs are rejected with a clear message and nothing written", "[validation]") {
    const int64_t big = int64_t(1) << 40;
    const std::vector<Row> rows = {
            {"src rank too small", with(good_bwd_w(), [](Desc& d) { d.in0 = {2, 8}; }), {"src (input 0) rank", "[2, 8]"}},
            {"src rank too large", with(good_bwd_w(), [](Desc& d) { d.in0 = {1, 1, 1, 1, 1, 1}; }), {"src (input 0) rank", "6 dims"}},
            {"diff_dst rank differs", with(good_bwd_w(), [](Desc& d) { d.in1 = {2, 8, 6}; }), {"diff_dst (input 1) rank", "4 dims", "3 dims"}},
            {"zero dim", with(good_bwd_w(), [](Desc& d) { d.in0[1] = 0; }), {"src (input 0) dim 1", "> 0", "given 0"}},
            {"negative dim", with(good_bwd_w(), [](Desc& d) { d.in1[2] = -3; }), {"diff_dst (input 1) dim 2", "given -3"}},
            {"minibatch mismatch", with(good_bwd_w(), [](Desc& d) { d.in1[0] = 3; }), {"minibatch", "given 3"}},
            {"weights I mismatch", with(good_bwd_w(), [](Desc& d) { d.a.weights_shape = {3, 3, 5, 6}; }), {"weights_shape input-channel (I) dim", "expected 4", "given 5"}},
            {"weights O mismatch", with(good_bwd_w(), [](Desc& d) { d.a.weights_shape = {3, 3, 4, 7}; }), {"weights_shape output-channel (O) dim", "expected 6", "given 7"}},
            {"groups do not divide IC", with(good_bwd_w(), [](Desc& d) { d.a.groups = 3; d.a.weights_shape = {3, 3, 1, 6}; }), {"groups", "divisor of src (input 0) channels 4", "given 3"}},
            {"groups do not divide OC", with(good_bwd_w(), [](Desc& d) { d.a.groups = 4; d.a.weights_shape = {3, 3, 1, 6}; }), {"groups", "diff_dst (input 1) channels 6", "given 4"}},
            {"groups zero", with(good_bwd_w(), [](Desc& d) { d.a.groups = 0; }), {"groups", ">= 1", "given 0"}},
            {"stride zero", with(good_bwd_w(), [](Desc& d) { d.a.strides = {1, 0}; }), {"strides[1]", ">= 1", "given 0"}},
            {"stride negative", with(good_bwd_w(), [](Desc& d) { d.a.strides = {-2, 1}; }), {"strides[0]", "given -2"}},
            {"stride count", with(good_bwd_w(), [](Desc& d) { d.a.strides = {1}; }), {"strides", "2 entries", "1 entries"}},
            {"dilation zero", with(good_bwd_w(), [](Desc& d) { d.a.dilations = {0, 1}; }), {"dilations[0]", ">= 1", "given 0"}},
            {"negative pad", with(good_bwd_w(), [](Desc& d) { d.a.pads_begin = {1, -1}; }), {"pads_begin[1]", ">= 0", "given -1"}},
            {"pads missing", with(good_bwd_w(), [](Desc& d) { d.a.pads_end.clear(); }), {"pads_end", "2 entries", "0 entries"}},
            {"diff_dst spatial inconsistent", with(good_bwd_w(), [](Desc& d) { d.in1 = {2, 7, 8, 6}; }), {"diff_dst (input 1) spatial H", "expected 8", "given 7"}},
            {"input smaller than kernel", with(good_bwd_w(), [](Desc& d) { d.a.pads_begin = {0, 0}; d.a.pads_end = {0, 0}; d.in0 = {2, 2, 8, 4}; d.in1 = {2, 1, 8, 6}; }), {"src spatial H", "kernel extent 3", "given 2"}},
            {"output_padding >= stride", with(good_bwd_w(), [](Desc& d) { d.a.output_padding = {0, 1}; }), {"output_padding[1]", "< strides[1] = 1", "given 1"}},
            {"output_padding negative", with(good_bwd_w(), [](Desc& d) { d.a.output_padding = {-1, 0}; }), {"output_padding[0]", ">= 0", "given -1"}},
            {"unknown data_format", with(good_bwd_w(), [](Desc& d) { d.a.data_format = "NHWC"; }), {"data_format", "NXC, NCX", "\"NHWC\""}},
            {"unknown weights_format", with(good_bwd_w(), [](Desc& d) { d.a.weights_format = "OIHW"; }), {"weights_format", "XIO, OIX", "\"OIHW\""}},
            {"ConvTranspose format on a convolution", with(good_bwd_w(), [](Desc& d) { d.a.weights_format = "IOX"; }), {"weights_format", "\"IOX\""}},
            {"unknown auto_pad", with(good_bwd_w(), [](Desc& d) { d.a.auto_pad = "same"; }), {"auto_pad", "same_upper", "\"same\""}},
            {"element count overflows", with(good_bwd_w(), [big](Desc& d) { d.in0 = {big, big, big, 4}; d.in1 = {big, big, big, 6}; }), {"src (input 0) element count", "int64"}},
            {"byte size overflows", with(good_bwd_w(), [](Desc& d) { d.in0 = {int64_t(1) << 31, 8, 8, int64_t(1) << 24}; }), {"src (input 0) size in bytes"}},
            {"weights_shape missing", with(good_bwd_w(), [](Desc& d) { d.a.weights_shape.clear(); }), {"weights_shape", "neither"}},
            {"weights_shape rank", with(good_bwd_w(), [](Desc& d) { d.a.weights_shape = {3, 4, 6}; }), {"weights_shape rank", "4 dims", "3 dims"}},
            {"weights_shape input negative", with(good_bwd_w(), [](Desc& d) { d.shape = {3, -3, 4, 6}; d.use_shape = true; }), {"weights_shape input[1]", "> 0", "given -3"}},
            {"weights_shape attribute zero", with(good_bwd_w(), [](Desc& d) { d.a.weights_shape = {3, 0, 4, 6}; }), {"weights_shape[1]", "> 0", "given 0"}},
            {"bwd data: weights O mismatch", with(good_bwd_d(), [](Desc& d) { d.in1 = {3, 3, 4, 5}; }), {"weights (input 1) output-channel (O) dim", "expected 6", "given 5"}},
            {"bwd data: dst_shape channels", with(good_bwd_d(), [](Desc& d) { d.a.dst_shape = {2, 8, 8, 5}; }), {"dst_shape channels", "expected 4", "given 5"}},
            {"bwd data: dst_shape minibatch", with(good_bwd_d(), [](Desc& d) { d.a.dst_shape = {3, 8, 8, 4}; }), {"dst_shape minibatch", "expected 2", "given 3"}},
            {"bwd data: dst_shape rank", with(good_bwd_d(), [](Desc& d) { d.a.dst_shape = {2, 8, 4}; }), {"dst_shape rank", "4 dims"}},
            {"bwd data: diff_dst inconsistent with dst_shape", with(good_bwd_d(), [](Desc& d) { d.a.dst_shape = {2, 8, 9, 4}; d.a.strides = {1, 2}; }), {"diff_dst (input 0) spatial W", "expected 5", "given 8"}},
            {"bwd data: dst_shape needed with same_upper", with(good_bwd_d(), [](Desc& d) { d.a.dst_shape.clear(); d.a.auto_pad = "same_upper"; }), {"dst_shape", "auto_pad is same_upper", "neither"}},
            {"bwd data: derived size not positive", with(good_bwd_d(), [](Desc& d) { d.a.dst_shape.clear(); d.a.pads_begin = {9, 1}; d.a.pads_end = {9, 1}; }), {"diff_src spatial H", "> 0", "given -8"}},
            {"bwd data: groups do not divide OC", with(good_bwd_d(), [](Desc& d) { d.a.groups = 4; d.in1 = {3, 3, 1, 6}; }), {"groups", "diff_dst channels 6", "given 4"}},
            {"deconv: diff_dst size inconsistent", with(good_deconv(), [](Desc& d) { d.in1 = {1, 12, 2}; }), {"diff_dst (input 1) spatial W", "expected 11", "given 12"}},
            {"deconv: output_padding accounted", with(good_deconv(), [](Desc& d) { d.a.output_padding = {1}; }), {"diff_dst (input 1) spatial W", "expected 12", "given 11"}},
            {"deconv: weights I mismatch", with(good_deconv(), [](Desc& d) { d.a.weights_shape = {3, 2, 3}; }), {"weights_shape input-channel (I) dim", "expected 4", "given 3"}},
            {"deconv: weights O mismatch", with(good_deconv(), [](Desc& d) { d.a.weights_shape = {4, 3, 3}; }), {"weights_shape output-channel (O) dim", "expected 2", "given 3"}},
            {"deconv: unknown weights_format", with(good_deconv(), [](Desc& d) { d.a.weights_format = "OI"; }), {"weights_format", "IOX, XOI", "\"OI\""}},
            {"deconv: groups do not divide", with(good_deconv(), [](Desc& d) { d.a.groups = 3; }), {"groups", "given 3"}},
    };
    for (const Row& r : rows) expect_error_and_untouched(r);
}

TEST_CASE("execute rejects null and overlapping buffers before writing", "[validation]") {
    const Desc d = good_bwd_w();
    const convgrad::op o(d.kind, data_type::f32, d.a, d.in0, d.in1);
    std::vector<float> src(o.input0_elems(), 1.f), dst(o.input1_elems(), 1.f);
    std::vector<float> out(o.output_elems(), 42.f);
    CHECK_THROWS_WITH(o.execute(nullptr, dst.data(), out.data()), Catch::Contains("input 0") && Catch::Contains("null"));
    CHECK_THROWS_WITH(o.execute(src.data(), nullptr, out.data()), Catch::Contains("input 1"));
    CHECK_THROWS_WITH(o.execute(src.data(), dst.data(), nullptr), Catch::Contains("output"));
    CHECK(std::all_of(out.begin(), out.end(), [](float v) { return v == 42.f; }));
    // Output overlapping an input.
    CHECK_THROWS_WITH(o.execute(src.data(), dst.data(), src.data() + 10), Catch::Contains("overlaps"));
    CHECK(std::all_of(src.begin(), src.end(), [](float v) { return v == 1.f; }));
}

TEST_CASE("names, data types and attributes by spec name", "[validation][api]") {
    CHECK(convgrad::parse_op_kind("ConvolutionBackwardWeights") == op_kind::conv_bwd_weights);
    CHECK(convgrad::parse_op_kind("ConvolutionBackpropWeights-1") == op_kind::conv_bwd_weights);
    CHECK(convgrad::parse_op_kind("ConvolutionBackpropFilters-1") == op_kind::conv_bwd_weights);
    CHECK(convgrad::parse_op_kind("ConvTransposeBackwardWeights") == op_kind::conv_transpose_bwd_weights);
    CHECK(convgrad::parse_op_kind("ConvolutionBackwardData") == op_kind::conv_bwd_data);
    CHECK_THROWS_AS(convgrad::parse_op_kind("Convolution"), convgrad::error);
    CHECK_THROWS_WITH(convgrad::parse_op_kind("ConvolutionBackwardInput"),
                      Catch::Contains("\"ConvolutionBackwardInput\""));
    CHECK(convgrad::parse_data_type("bf16") == data_type::bf16);
    CHECK_THROWS_WITH(convgrad::parse_data_type("f64"), Catch::Contains("\"f64\""));

    attributes a;
    a.set("filter_format", "OIX");
    a.set("filter_shape", dims{4, 2, 3});
    a.set("groups", int64_t(2));
    a.set("auto_pad", "SAME_UPPER");
    a.set("strides", dims{2});
    CHECK(a.weights_format == "OIX");
    CHECK(a.weights_shape == dims{4, 2, 3});
    CHECK(a.groups == 2);
    CHECK(a.strides == dims{2});
    CHECK_THROWS_WITH(a.set("kernel", dims{3}), Catch::Contains("\"kernel\""));
    CHECK_THROWS_WITH(a.set("groups", dims{1}), Catch::Contains("groups"));
    CHECK_THROWS_WITH(a.set("strides", int64_t(1)), Catch::Contains("list"));
    CHECK_THROWS_WITH(a.set("data_format", int64_t(1)), Catch::Contains("string"));
}

TEST_CASE("CONVGRAD_MAX_ISA caps the implementation and rejects unknown values", "[validation][api]") {
    const Desc d = good_bwd_w();
    {
        testutil::IsaCap cap("ref");
        CHECK(convgrad::max_isa() == "ref");
        const convgrad::op o(d.kind, data_type::f32, d.a, d.in0, d.in1);
        CHECK(o.describe().rfind("ref", 0) == 0);
    }
    testutil::IsaCap cap("avx9000");
    CHECK_THROWS_WITH(convgrad::op(d.kind, data_type::f32, d.a, d.in0, d.in1),
                      Catch::Contains("CONVGRAD_MAX_ISA") && Catch::Contains("\"avx9000\""));
}
