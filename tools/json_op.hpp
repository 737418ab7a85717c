// Ops as JSON, so an op can be pasted from a framework graph. Two shapes are
// read:
//  - the sweep's own form (what to_json writes):
//      {"op": "ConvolutionBackwardData", "dtype": "f32", "name": "...",
//       "attributes": {"strides": [1, 1], "pads_begin": [1, 1], ...},
//       "inputs": [[2, 14, 14, 32], [3, 3, 16, 32]], "shape_input": [...]}
//  - a oneDNN Graph serialized op or whole graph ({"graph": [op, ...]}),
//    where attributes are {"type": ..., "value": ...} and inputs are
//    {"dtype": ..., "shape": [...]} objects. Ops of other kinds in a graph
//    become skipped cases.
// Attribute names are the spec's (attributes::set accepts them, legacy names
// included). Errors name the JSON path and what was expected.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "op_case.hpp"

namespace convgrad::cli {

// Reads one op object, an array of them, or a graph. `source` prefixes
// messages. Throws std::invalid_argument.
std::vector<op_case> parse_json_ops(std::string_view text, const std::string& source = "json");

// The sweep form of one op (round-trips through parse_json_ops).
std::string to_json(const op_case& c, int indent = -1);

}  // namespace convgrad::cli
