// JSON <-> op_case with nlohmann::json (Debian nlohmann-json3-dev).
#include "json_op.hpp"

#include <nlohmann/json.hpp>

#include <stdexcept>

namespace convgrad::cli {
namespace {

using json = nlohmann::json;

[[noreturn]] void fail(const std::string& where, const std::string& why) {
    throw std::invalid_argument(where + ": " + why);
}

std::string type_of(const json& v) { return v.type_name(); }

// Kinds oneDNN Graph used before the spec names settled.
op_kind parse_kind(const std::string& name, const std::string& where) {
    if (name == "ConvolutionBackpropFilters") return op_kind::conv_bwd_weights;
    if (name == "ConvolutionBackpropData") return op_kind::conv_bwd_data;
    if (name == "ConvTransposeBackpropFilters") return op_kind::conv_transpose_bwd_weights;
    try {
        return parse_op_kind(name);
    } catch (const error& e) {
        fail(where, e.what());
    }
}

bool is_supported_kind(const std::string& name) {
    try {
        parse_kind(name, "");
        return true;
    } catch (const std::invalid_argument&) {
        return false;
    }
}

dims int_list(const json& v, const std::string& where) {
    if (!v.is_array()) fail(where, "expected a list of integers, given " + type_of(v));
    dims r;
    for (size_t i = 0; i < v.size(); ++i) {
        if (!v[i].is_number_integer())
            fail(where + "[" + std::to_string(i) + "]", "expected an integer, given " + type_of(v[i]));
        r.push_back(v[i].get<int64_t>());
    }
    return r;
}

// A Graph attribute is {"type": "s64[]", "value": [...]}; ours is the value.
void set_attribute(attributes& a, const std::string& name, const json& raw, const std::string& where) {
    const json& v = raw.is_object() && raw.contains("value") ? raw.at("value") : raw;
    try {
        if (v.is_array()) a.set(name, int_list(v, where));
        else if (v.is_number_integer()) a.set(name, v.get<int64_t>());
        else if (v.is_string()) a.set(name, v.get<std::string>());
        else fail(where, "expected a list of integers, an integer or a string, given " + type_of(v));
    } catch (const error& e) {
        fail(where, e.what());
    }
}

// Input i: a list of dims, or a Graph logical tensor {"dtype", "shape"}.
dims input_dims(const json& v, const std::string& where, std::string* dtype) {
    if (v.is_array()) return int_list(v, where);
    if (!v.is_object() || !v.contains("shape"))
        fail(where, "expected a list of dims or an object with \"shape\", given " + type_of(v));
    if (dtype && v.contains("dtype") && v.at("dtype").is_string()) *dtype = v.at("dtype").get<std::string>();
    return int_list(v.at("shape"), where + ".shape");
}

const json& member(const json& obj, std::initializer_list<const char*> names, const std::string& where) {
    for (const char* n : names)
        if (obj.contains(n)) return obj.at(n);
    fail(where, "missing \"" + std::string(*names.begin()) + "\"");
}

// Graph dumps may carry a negative pads_end (benchdnn's derived end
// padding). Express it the way ../shared/shapes/README.md does.
void normalize_pads_end(op_case& c) {
    dims& pe = c.attrs.pads_end;
    bool negative = false;
    for (int64_t v : pe) negative = negative || v < 0;
    if (!negative) return;
    if (c.kind == op_kind::conv_transpose_bwd_weights) {
        dims& op = c.attrs.output_padding;
        op.resize(pe.size(), 0);
        for (size_t i = 0; i < pe.size(); ++i)
            if (pe[i] < 0) op[i] -= pe[i], pe[i] = 0;
        c.note = "negative pads_end read as output_padding";
    } else {
        for (int64_t& v : pe) v = std::max<int64_t>(v, 0);
        c.note = "negative pads_end raised to 0 (the floor rule keeps the output size)";
    }
}

op_case parse_op(const json& j, const std::string& where) {
    if (!j.is_object()) fail(where, "expected an op object, given " + type_of(j));
    op_case c;
    const json& kind = member(j, {"op", "kind"}, where);
    if (!kind.is_string()) fail(where + ".op", "expected a string, given " + type_of(kind));
    c.kind = parse_kind(kind.get<std::string>(), where + ".op");
    if (j.contains("name") && j.at("name").is_string()) c.name = j.at("name").get<std::string>();
    if (j.contains("descriptor") && j.at("descriptor").is_string())
        c.descriptor = j.at("descriptor").get<std::string>();

    const json& attrs = member(j, {"attributes", "attrs"}, where);
    if (!attrs.is_object()) fail(where + ".attributes", "expected an object, given " + type_of(attrs));
    for (auto it = attrs.begin(); it != attrs.end(); ++it)
        set_attribute(c.attrs, it.key(), it.value(), where + ".attributes." + it.key());

    const json& inputs = member(j, {"inputs"}, where);
    if (!inputs.is_array() || inputs.size() < 2 || inputs.size() > 3)
        fail(where + ".inputs", "expected 2 or 3 inputs (the third is the s32 shape), given " +
                                    (inputs.is_array() ? std::to_string(inputs.size()) : type_of(inputs)));
    std::string dtype = "f32";
    c.input0 = input_dims(inputs[0], where + ".inputs[0]", &dtype);
    c.input1 = input_dims(inputs[1], where + ".inputs[1]", nullptr);
    if (j.contains("dtype")) {
        if (!j.at("dtype").is_string()) fail(where + ".dtype", "expected a string, given " + type_of(j.at("dtype")));
        dtype = j.at("dtype").get<std::string>();
    }
    try {
        c.dt = parse_data_type(dtype);
    } catch (const error& e) {
        fail(where + ".dtype", e.what());
    }
    if (j.contains("shape_input")) {
        const dims s = int_list(j.at("shape_input"), where + ".shape_input");
        c.has_shape_input = true;
        for (int64_t v : s) {
            if (v < INT32_MIN || v > INT32_MAX) fail(where + ".shape_input", "value out of s32 range");
            c.shape_input.push_back(static_cast<int32_t>(v));
        }
    }
    normalize_pads_end(c);
    return c;
}

// One entry of a Graph's op list: a case, or a skipped case for other kinds.
op_case parse_graph_op(const json& j, const std::string& where) {
    if (j.is_object() && j.contains("kind") && j.at("kind").is_string() &&
        !is_supported_kind(j.at("kind").get<std::string>())) {
        op_case skipped;
        skipped.name = j.value("name", std::string());
        skipped.skip_reason = "op kind " + j.at("kind").get<std::string>() + " is not a backward convolution";
        return skipped;
    }
    return parse_op(j, where);
}

}  // namespace

std::vector<op_case> parse_json_ops(std::string_view text, const std::string& source) {
    json j;
    try {
        j = json::parse(text.begin(), text.end());
    } catch (const json::parse_error& e) {
        fail(source, std::string("invalid JSON: ") + e.what());
    }
    std::vector<op_case> cases;
    if (j.is_object() && j.contains("graph")) {
        const json& g = j.at("graph");
        if (!g.is_array()) fail(source + ".graph", "expected a list of ops, given " + type_of(g));
        for (size_t i = 0; i < g.size(); ++i)
            cases.push_back(parse_graph_op(g[i], source + ".graph[" + std::to_string(i) + "]"));
    } else if (j.is_array()) {
        for (size_t i = 0; i < j.size(); ++i)
            cases.push_back(parse_op(j[i], source + "[" + std::to_string(i) + "]"));
    } else {
        cases.push_back(parse_op(j, source));
    }
    return cases;
}

std::string to_json(const op_case& c, int indent) {
    const attributes& a = c.attrs;
    json attrs = {{"strides", a.strides},           {"pads_begin", a.pads_begin},
                  {"pads_end", a.pads_end},         {"dilations", a.dilations},
                  {"auto_pad", a.auto_pad},         {"groups", a.groups},
                  {"data_format", a.data_format},   {"weights_format", a.weights_format}};
    if (!a.weights_shape.empty()) attrs["weights_shape"] = a.weights_shape;
    if (!a.dst_shape.empty()) attrs["dst_shape"] = a.dst_shape;
    if (!a.output_padding.empty()) attrs["output_padding"] = a.output_padding;
    json j = {{"op", op_name(c.kind)}, {"dtype", dtype_name(c.dt)}, {"name", c.name},
              {"attributes", attrs},   {"inputs", {c.input0, c.input1}}};
    if (!c.descriptor.empty()) j["descriptor"] = c.descriptor;
    if (c.has_shape_input) j["shape_input"] = c.shape_input;
    return j.dump(indent);
}

}  // namespace convgrad::cli
