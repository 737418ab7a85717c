// benchdnn problem descriptors ("mb2ic16ih10oc16oh10kh3n\"x\"") and shape
// files, exactly as ../shared/shapes/README.md specifies them: key order,
// defaults, the dilation convention (0 = dense), derived output size and
// padding, square/cubic fill-in. Parsing never crashes: every problem is a
// descriptor_error that names the position and the reason.
#pragma once

#include <array>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace convgrad::cli {

// How a descriptor's output size and end padding are derived: convolution
// files (conv/) and transposed-convolution files (deconv/) differ.
enum class desc_kind { conv, deconv };

// A descriptor after derivation. Spatial arrays are indexed 0 = D, 1 = H,
// 2 = W; dimensions that do not exist hold i = o = k = s = 1, p = 0, d = 0.
struct conv_desc {
    desc_kind kind = desc_kind::conv;
    bool has_groups = false;  // `g` written (even g1): weights carry a group dim
    int64_t g = 1, mb = 2, ic = 0, oc = 0;
    int nsp = 0;  // 1, 2 or 3 spatial dims; the last nsp entries of the arrays
    std::array<int64_t, 3> i{1, 1, 1}, o{1, 1, 1}, k{1, 1, 1}, s{1, 1, 1};
    std::array<int64_t, 3> p{0, 0, 0}, d{0, 0, 0};  // d: benchdnn convention
    std::array<int64_t, 3> p_end{0, 0, 0};  // derived, may be negative
    std::string name;                       // verbatim, quotes kept

    int64_t ext(int a) const { return (k[a] - 1) * (d[a] + 1) + 1; }
    // benchdnn's flop count: 2 * mb * g * (oc/g) * (ic/g) * K * O, where O is
    // the convolution output (for deconv: its source, the small side).
    double flops() const;
};

// A parse failure. position is the 0-based character offset in the
// descriptor text; what() reads "at column N (near "..."): reason".
class descriptor_error : public std::invalid_argument {
public:
    // where: an optional "FILE:LINE:COLUMN" prefix.
    descriptor_error(std::string_view text, size_t position, const std::string& reason,
                     const std::string& where = "");
    size_t position() const { return position_; }
    const std::string& reason() const { return reason_; }

private:
    size_t position_;
    std::string reason_;
};

conv_desc parse_descriptor(std::string_view text, desc_kind kind = desc_kind::conv);

// The canonical descriptor text: every key written (p_end is never written,
// it is always derived), so parse_descriptor(to_string(d)) == d.
std::string to_string(const conv_desc& d);
bool operator==(const conv_desc& a, const conv_desc& b);

// One token of a shape file, with its place for error messages.
struct shape_token {
    std::string text;
    int line = 0, column = 0;  // 1-based
};

// Splits a shape file into descriptor tokens: whitespace-separated, `#`
// tokens comment out the rest of the line, a trailing `\` joins the next
// token. Option tokens (`--...`) are returned as they are for the caller.
std::vector<shape_token> tokenize_shape_file(std::string_view text);

// A parsed shape-file entry.
struct shape_entry {
    conv_desc desc;
    shape_token token;
};

// Parses every descriptor of a shape file. Throws descriptor_error whose
// message starts with "SOURCE:LINE:COLUMN: " for the first bad token.
std::vector<shape_entry> parse_shape_file(std::string_view text, desc_kind kind,
                                          const std::string& source);

// ResNet-50 (the 20 descriptors of oneDNN's benchdnn shapes_resnet_50),
// compiled in so the default sweep needs no files.
const std::vector<std::string>& resnet50_descriptors();

}  // namespace convgrad::cli
