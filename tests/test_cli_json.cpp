// JSON op descriptions: round trips from descriptors, oneDNN Graph dumps as
// a framework would paste them, and clear errors for bad JSON.
#include <catch2/catch.hpp>

#include <random>

#include "json_op.hpp"
#include "test_cli_util.hpp"

using namespace convgrad::cli;
using convgrad::data_type;
using convgrad::op_kind;

namespace {

void require_round_trip(const op_case& c) {
    const std::string text = to_json(c);
    INFO(text);
    const std::vector<op_case> back = parse_json_ops(text);
    REQUIRE(back.size() == 1);
    CHECK(same_op(back[0], c));
    CHECK(back[0].descriptor == c.descriptor);
    CHECK(to_json(back[0]) == text);
}

}  // namespace

TEST_CASE("cli json: descriptors round-trip through JSON in every format", "[cli][json]") {
    const char* conv[] = {"mb2ic16ih10oc16oh10kh3n\"a\"", "g4ic16oc8iw9kw3sw2dw1",
                          "g1mb50ic256ih56iw56oc512oh28ow28kh1kw1sh2sw2ph0pw0",
                          "ic16oc16_ih13kh3ph1_iw50kw3pw1_id10kd3pd1"};
    for (const char* text : conv) {
        const conv_desc d = parse_descriptor(text);
        for (op_kind kind : {op_kind::conv_bwd_weights, op_kind::conv_bwd_data})
            for (const char* df : {"NXC", "NCX"})
                for (const char* wf : {"XIO", "OIX"})
                    for (bool shape_input : {false, true})
                        for (data_type dt : {data_type::f32, data_type::bf16})
                            require_round_trip(make_case(d, kind, dt, {df, wf, "none", shape_input}));
    }
    const conv_desc deconv = parse_descriptor("g2mb1oc4ic6ow12iw5kw3sw2pw0", desc_kind::deconv);
    REQUIRE(deconv.p_end[2] == -1);
    for (const char* wf : {"XIO", "OIX", "IOX", "XOI"}) {
        const op_case c = make_case(deconv, op_kind::conv_transpose_bwd_weights, data_type::f16, {"NXC", wf});
        CHECK(c.attrs.output_padding == convgrad::dims{1});
        require_round_trip(c);
    }
    for (const char* pad : {"same_upper", "same_lower", "valid"})
        require_round_trip(make_case(parse_descriptor("ic4oc4ih7kh3sh2"), op_kind::conv_bwd_data,
                                     data_type::f32, {"NXC", "", pad}));
}

TEST_CASE("cli json: every shape-file descriptor round-trips", "[cli][json][shapes]") {
    const auto dir = shapes_dir();
    if (!dir) {
        WARN("../shared/shapes not found; skipping");
        return;
    }
    size_t n = 0;
    for (const char* rel : {"conv/shapes_basic", "conv/shapes_3d", "conv/shapes_dilated", "deconv/shapes_2d",
                            "deconv/shapes_dilated"}) {
        const bool deconv = std::string(rel).rfind("deconv", 0) == 0;
        for (const shape_entry& e : parse_shape_file(read_text(*dir / rel),
                                                     deconv ? desc_kind::deconv : desc_kind::conv, rel)) {
            const op_kind kind = deconv ? op_kind::conv_transpose_bwd_weights : op_kind::conv_bwd_data;
            require_round_trip(make_case(e.desc, kind, data_type::f32, {}));
            ++n;
        }
    }
    CHECK(n > 200);
}

TEST_CASE("cli json: a oneDNN Graph serialized op is read as the framework wrote it", "[cli][json]") {
    // The shape of a benchdnn --graph input: typed attributes, logical
    // tensors, a legacy op kind and benchdnn's negative pads_end.
    const char* graph = R"({
      "version": "3.0.0", "engine_kind": "cpu",
      "graph": [
        {"id": 0, "name": "CONV_0", "kind": "ConvolutionBackpropFilters",
         "attrs": {
           "data_format": {"type": "string", "value": "NCX"},
           "pads_end": {"type": "s64[]", "value": [-1, -1]},
           "auto_pad": {"type": "string", "value": "None"},
           "filter_format": {"type": "string", "value": "OIX"},
           "dilations": {"type": "s64[]", "value": [1, 1]},
           "pads_begin": {"type": "s64[]", "value": [0, 0]},
           "filter_shape": {"type": "s64[]", "value": [128, 32, 1, 1]},
           "groups": {"type": "s64", "value": 1},
           "strides": {"type": "s64[]", "value": [2, 2]}},
         "inputs": [{"id": 0, "dtype": "bf16", "shape": [1, 32, 28, 28], "layout_type": "strided"},
                    {"id": 1, "dtype": "bf16", "shape": [1, 128, 14, 14], "layout_type": "strided"}],
         "outputs": [{"id": 2, "dtype": "bf16", "shape": [128, 32, 1, 1]}]},
        {"id": 1, "name": "RELU", "kind": "ReLU", "attrs": {}, "inputs": [], "outputs": []}
      ]})";
    const std::vector<op_case> cases = parse_json_ops(graph, "graph.json");
    REQUIRE(cases.size() == 2);
    const op_case& c = cases[0];
    CHECK(c.kind == op_kind::conv_bwd_weights);
    CHECK(c.dt == data_type::bf16);
    CHECK(c.name == "CONV_0");
    CHECK(c.attrs.pads_end == convgrad::dims{0, 0});
    CHECK_THAT(c.note, Catch::Contains("raised to 0"));
    CHECK(c.attrs.weights_shape == convgrad::dims{128, 32, 1, 1});
    CHECK(c.make_op().output_dims() == convgrad::dims{128, 32, 1, 1});
    CHECK_THAT(cases[1].skip_reason, Catch::Contains("ReLU"));
}

TEST_CASE("cli json: the sweep form with an s32 shape input", "[cli][json]") {
    const char* text = R"({"op": "ConvolutionBackwardData", "dtype": "f32",
      "attributes": {"strides": [1, 1], "pads_begin": [1, 1], "pads_end": [1, 1], "dilations": [1, 1]},
      "inputs": [[2, 5, 5, 8], [3, 3, 4, 8]], "shape_input": [2, 5, 5, 4]})";
    const op_case c = parse_json_ops(text).at(0);
    CHECK(c.has_shape_input);
    CHECK(c.make_op().output_dims() == convgrad::dims{2, 5, 5, 4});
    CHECK(reduction_length(c) == 8 * 9);
}

TEST_CASE("cli json: bad JSON is rejected naming the field", "[cli][json]") {
    struct bad {
        const char* text;
        const char* message;
    };
    const bad table[] = {
        {"{", "invalid JSON"},
        {"42", "expected an op object, given number"},
        {R"({"attributes": {}, "inputs": [[1], [1]]})", "missing \"op\""},
        {R"({"op": "Convolution", "attributes": {}, "inputs": [[1], [1]]})", "json.op: op name"},
        {R"({"op": "ConvolutionBackwardData", "inputs": [[1], [1]]})", "missing \"attributes\""},
        {R"({"op": "ConvolutionBackwardData", "attributes": {"stride": [1]}, "inputs": [[1], [1]]})",
         "json.attributes.stride: attribute name"},
        {R"({"op": "ConvolutionBackwardData", "attributes": {"groups": [1]}, "inputs": [[1], [1]]})",
         "attribute groups: expected a single value"},
        {R"({"op": "ConvolutionBackwardData", "attributes": {"strides": [1, "a"]}, "inputs": [[1], [1]]})",
         "json.attributes.strides[1]: expected an integer, given string"},
        {R"({"op": "ConvolutionBackwardData", "attributes": {}, "inputs": [[1]]})", "expected 2 or 3 inputs"},
        {R"({"op": "ConvolutionBackwardData", "attributes": {}, "inputs": [[1], 5]})",
         "json.inputs[1]: expected a list of dims"},
        {R"({"op": "ConvolutionBackwardData", "dtype": "f64", "attributes": {}, "inputs": [[1], [1]]})",
         "json.dtype: data type"},
        {R"([{"op": "ConvolutionBackwardData", "attributes": {}, "inputs": [[1], [1]]}, 3])", "json[1]"},
        {R"({"graph": 3})", "json.graph: expected a list of ops"},
    };
    for (const bad& b : table) {
        INFO(b.text);
        CHECK_THROWS_WITH(parse_json_ops(b.text), Catch::Contains(b.message));
    }
}

TEST_CASE("cli json: mutated JSON never crashes the reader or the op", "[cli][json][fuzz]") {
    const std::string valid = to_json(make_case(parse_descriptor("g2mb2ic4ih6oc6kh3ph1sh2"),
                                                op_kind::conv_bwd_data, data_type::f32, {}));
    const std::string alphabet = "{}[]\",:0123456789-. abcdefnrstu";
    std::mt19937 gen(3);
    std::uniform_int_distribution<size_t> where(0, valid.size() - 1), what(0, alphabet.size() - 1), count(1, 4);
    int accepted = 0;
    for (int iter = 0; iter < 3000; ++iter) {
        std::string s = valid;
        for (size_t n = count(gen); n > 0; --n) s[where(gen)] = alphabet[what(gen)];
        try {
            for (const op_case& c : parse_json_ops(s)) {
                ++accepted;
                try {
                    c.make_op();
                } catch (const convgrad::error& e) {
                    REQUIRE(std::string(e.what()).size() > 0);
                }
            }
        } catch (const std::invalid_argument& e) {
            REQUIRE(std::string(e.what()).size() > 0);
        }
    }
    CHECK(accepted > 0);
}
