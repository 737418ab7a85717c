// Descriptor parsing in two phases: a scanner that only records which keys
// were written (and where, for messages), then the derivation rules of
// ../shared/shapes/README.md applied per spatial dimension.
#include "descriptor.hpp"

#include <cctype>
#include <sstream>

namespace convgrad::cli {
namespace {

constexpr int64_t max_value = (int64_t(1) << 31) - 1;  // keeps every product in int64
const char* const axis_letters = "dhw";
const char* const valid_keys =
    "g mb ic oc id ih iw od oh ow kd kh kw sd sh sw pd ph pw dd dh dw, or n (name)";

// One key as written: its value and where it was written.
struct entry {
    int64_t value = 0;
    bool given = false;
    size_t pos = 0;
};

// The keys as the scanner saw them, before any default or derivation.
struct raw_desc {
    entry g, mb, ic, oc;
    std::array<entry, 3> i, o, k, s, p, d;
    std::string name;
    bool has_name = false;
};

std::string printable(std::string_view text) {
    std::string r;
    for (unsigned char c : text) {
        if (std::isprint(c)) {
            r += static_cast<char>(c);
        } else {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\x%02x", c);
            r += buf;
        }
    }
    return r;
}

// The slot a key writes to, or null for an unknown key.
entry* slot(raw_desc& r, std::string_view key) {
    if (key == "g") return &r.g;
    if (key == "mb") return &r.mb;
    if (key == "ic") return &r.ic;
    if (key == "oc") return &r.oc;
    if (key.size() != 2) return nullptr;
    const char* axis = std::char_traits<char>::find(axis_letters, 3, key[1]);
    if (!axis) return nullptr;
    const int a = static_cast<int>(axis - axis_letters);
    switch (key[0]) {
        case 'i': return &r.i[a];
        case 'o': return &r.o[a];
        case 'k': return &r.k[a];
        case 's': return &r.s[a];
        case 'p': return &r.p[a];
        case 'd': return &r.d[a];
        default: return nullptr;
    }
}

class scanner {
public:
    explicit scanner(std::string_view text) : text_(text) {}

    raw_desc scan() {
        if (text_.empty()) fail(0, "empty descriptor");
        bool after_value = false;
        while (pos_ < text_.size()) {
            const char c = text_[pos_];
            if (c == '_') {
                if (!after_value)
                    fail(pos_, pos_ == 0 ? "a descriptor cannot start with '_'"
                                         : "'_' may only follow a value, once ('__' or a misplaced '_')");
                after_value = false;
                ++pos_;
            } else if (c == 'n') {
                raw_.name = std::string(text_.substr(pos_ + 1));
                raw_.has_name = true;
                pos_ = text_.size();
            } else if (c >= 'a' && c <= 'z') {
                read_entry();
                after_value = true;
            } else {
                fail(pos_, "unexpected character '" + printable(text_.substr(pos_, 1)) +
                               "'; expected a key (" + valid_keys + ")");
            }
        }
        return raw_;
    }

    [[noreturn]] void fail(size_t pos, const std::string& why) const {
        throw descriptor_error(text_, pos, why);
    }

private:
    void read_entry() {
        const size_t key_pos = pos_;
        while (pos_ < text_.size() && text_[pos_] >= 'a' && text_[pos_] <= 'z') ++pos_;
        const std::string_view key = text_.substr(key_pos, pos_ - key_pos);
        entry* e = slot(raw_, key);
        if (!e) {
            // "icx1": name the known prefix so the message points at the real mistake.
            for (size_t len = key.size() - 1; len > 0; --len)
                if (slot(raw_, key.substr(0, len)))
                    fail(key_pos + len, "key '" + std::string(key.substr(0, len)) +
                                            "' must be followed by digits");
            fail(key_pos, "unknown key '" + std::string(key) + "'; expected one of " + valid_keys);
        }
        *e = entry{read_value(key), true, key_pos};
    }

    int64_t read_value(std::string_view key) {
        const std::string k(key);
        if (pos_ >= text_.size()) fail(pos_, "key '" + k + "' has no value (expected digits)");
        if (text_[pos_] == '-') fail(pos_, "negative value for '" + k + "'; values are non-negative");
        if (!std::isdigit(static_cast<unsigned char>(text_[pos_])))
            fail(pos_, "key '" + k + "' must be followed by digits, found '" +
                           printable(text_.substr(pos_, 1)) + "'");
        const size_t start = pos_;
        int64_t v = 0;
        while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
            v = v * 10 + (text_[pos_] - '0');
            if (v > max_value) fail(start, "value of '" + k + "' is too large (limit 2147483647)");
            ++pos_;
        }
        return v;
    }

    std::string_view text_;
    size_t pos_ = 0;
    raw_desc raw_;
};

std::string key_name(char key, int axis) { return std::string(1, key) + axis_letters[axis]; }

// Is spatial axis a present in the descriptor (README "mentioned")?
bool mentioned(const raw_desc& r, int a) {
    return r.i[a].value != 0 || r.k[a].value != 0 || r.o[a].value != 0 || r.d[a].value != 0 ||
           (r.s[a].given && r.s[a].value != 1) || (r.p[a].given && r.p[a].value >= 1);
}

size_t first_pos(const raw_desc& r, int a) {
    size_t pos = std::string::npos;
    for (const entry* e : {&r.i[a], &r.o[a], &r.k[a], &r.s[a], &r.p[a], &r.d[a]})
        if (e->given && e->pos < pos) pos = e->pos;
    return pos;
}

// Output size and paddings of one present axis, by the conv or deconv rule.
void derive_axis(const scanner& sc, const raw_desc& r, int a, conv_desc& d) {
    const size_t where = first_pos(r, a);
    if (r.i[a].value == 0) sc.fail(where, key_name('i', a) + " is required (axis is used) and must be positive");
    if (r.k[a].value == 0) sc.fail(where, key_name('k', a) + " is required (axis is used) and must be positive");
    const int64_t i = r.i[a].value, k = r.k[a].value, s = r.s[a].given ? r.s[a].value : 1;
    const int64_t dil = r.d[a].value, ext = (k - 1) * (dil + 1) + 1;
    const bool deconv = d.kind == desc_kind::deconv;
    int64_t o = r.o[a].value, p = r.p[a].given ? r.p[a].value : 0;
    if (o != 0 && !r.p[a].given) {
        p = deconv ? ((i - 1) * s - o + ext) / 2 : ((o - 1) * s - i + ext) / 2;
        if (p < 0)
            sc.fail(r.o[a].pos, "padding derived from " + key_name('o', a) + " is negative (" +
                                    std::to_string(p) + "); give " + key_name('p', a) + " explicitly");
    } else if (o == 0) {
        o = deconv ? (i - 1) * s + ext - 2 * p : (i - ext + 2 * p) / s + 1;
        if (o <= 0)
            sc.fail(where, "derived " + key_name('o', a) + " is " + std::to_string(o) +
                               ": the kernel extent " + std::to_string(ext) + " does not fit");
    }
    d.i[a] = i;
    d.o[a] = o;
    d.k[a] = k;
    d.s[a] = s;
    d.p[a] = p;
    d.d[a] = dil;
    d.p_end[a] = deconv ? (i - 1) * s - o + ext - p : (o - 1) * s - i + ext - p;
}

void copy_axis(conv_desc& d, int from, int to) {
    for (auto* v : {&d.i, &d.o, &d.k, &d.s, &d.p, &d.d, &d.p_end}) (*v)[to] = (*v)[from];
}

void check_scalars(const scanner& sc, const raw_desc& r, std::string_view text) {
    if (r.g.given && r.g.value < 1) sc.fail(r.g.pos, "g must be at least 1");
    if (r.mb.given && r.mb.value < 1) sc.fail(r.mb.pos, "mb must be at least 1");
    if (!r.ic.given || r.ic.value < 1)
        sc.fail(r.ic.given ? r.ic.pos : text.size(), "ic is required and must be positive");
    if (!r.oc.given || r.oc.value < 1)
        sc.fail(r.oc.given ? r.oc.pos : text.size(), "oc is required and must be positive");
    for (int a = 0; a < 3; ++a)
        if (r.s[a].given && r.s[a].value == 0)
            sc.fail(r.s[a].pos, key_name('s', a) + " is 0; strides must be at least 1");
    const int64_t g = r.g.given ? r.g.value : 1;
    if (r.ic.value % g != 0 || r.oc.value % g != 0)
        sc.fail(r.g.pos, "g" + std::to_string(g) + " must divide ic" + std::to_string(r.ic.value) +
                             " and oc" + std::to_string(r.oc.value));
}

}  // namespace

descriptor_error::descriptor_error(std::string_view text, size_t position, const std::string& reason,
                                   const std::string& where)
    : std::invalid_argument((where.empty() ? "" : where + ": ") + "\"" +
                            printable(text.substr(0, 200)) + "\": at column " +
                            std::to_string(position + 1) + ": " + reason),
      position_(position),
      reason_(reason) {}

double conv_desc::flops() const {
    const std::array<int64_t, 3>& out_side = kind == desc_kind::deconv ? i : o;
    double sp = 1.0;
    for (int a = 0; a < 3; ++a) sp *= static_cast<double>(k[a]) * out_side[a];
    return 2.0 * mb * g * (oc / g) * (ic / g) * sp;
}

conv_desc parse_descriptor(std::string_view text, desc_kind kind) {
    scanner sc(text);
    const raw_desc r = sc.scan();
    check_scalars(sc, r, text);

    conv_desc d;
    d.kind = kind;
    d.has_groups = r.g.given;
    d.g = r.g.given ? r.g.value : 1;
    d.mb = r.mb.given ? r.mb.value : 2;
    d.ic = r.ic.value;
    d.oc = r.oc.value;
    d.name = r.name;
    if (r.has_name && r.name.empty()) sc.fail(text.size() - 1, "'n' must be followed by a name");

    const bool md = mentioned(r, 0), mh = mentioned(r, 1), mw = mentioned(r, 2);
    for (int a = 0; a < 3; ++a)
        if (mentioned(r, a)) derive_axis(sc, r, a, d);
    if (md) {
        if (mh != mw)
            sc.fail(first_pos(r, mh ? 1 : 2), "a 3D descriptor must give both H and W, or neither");
        if (!mh) copy_axis(d, 0, 1), copy_axis(d, 0, 2);
        d.nsp = 3;
    } else if (mh) {
        if (!mw) copy_axis(d, 1, 2);
        d.nsp = 2;
    } else if (mw) {
        d.nsp = 1;
    } else {
        sc.fail(text.size(), "no spatial dimension: give at least iw and kw (or ih/kh, id/kd)");
    }
    return d;
}

std::string to_string(const conv_desc& d) {
    std::ostringstream os;
    auto axes = [&](char key, const std::array<int64_t, 3>& v) {
        for (int a = 3 - d.nsp; a < 3; ++a) os << key_name(key, a) << v[a];
    };
    if (d.has_groups) os << 'g' << d.g;
    os << "mb" << d.mb << "ic" << d.ic;
    axes('i', d.i);
    os << "oc" << d.oc;
    axes('o', d.o);
    axes('k', d.k);
    axes('s', d.s);
    axes('p', d.p);
    axes('d', d.d);
    if (!d.name.empty()) os << 'n' << d.name;
    return os.str();
}

bool operator==(const conv_desc& a, const conv_desc& b) {
    return a.kind == b.kind && a.has_groups == b.has_groups && a.g == b.g && a.mb == b.mb &&
           a.ic == b.ic && a.oc == b.oc && a.nsp == b.nsp && a.i == b.i && a.o == b.o &&
           a.k == b.k && a.s == b.s && a.p == b.p && a.d == b.d && a.p_end == b.p_end &&
           a.name == b.name;
}

std::vector<shape_token> tokenize_shape_file(std::string_view text) {
    std::vector<shape_token> tokens;
    int line = 1, column = 1;
    bool joining = false;  // the previous token ended in '\'
    size_t pos = 0;
    auto advance = [&] {
        if (text[pos] == '\n') ++line, column = 1;
        else ++column;
        ++pos;
    };
    while (pos < text.size()) {
        if (std::isspace(static_cast<unsigned char>(text[pos]))) {
            advance();
            continue;
        }
        if (text[pos] == '#') {
            while (pos < text.size() && text[pos] != '\n') advance();
            continue;
        }
        shape_token t{"", line, column};
        while (pos < text.size() && !std::isspace(static_cast<unsigned char>(text[pos]))) {
            t.text += text[pos];
            advance();
        }
        const bool continues = t.text.back() == '\\';
        if (continues) t.text.pop_back();
        if (joining) tokens.back().text += t.text;
        else tokens.push_back(t);
        joining = continues;
    }
    return tokens;
}

std::vector<shape_entry> parse_shape_file(std::string_view text, desc_kind kind,
                                          const std::string& source) {
    std::vector<shape_entry> entries;
    for (const shape_token& t : tokenize_shape_file(text)) {
        auto where = [&](size_t pos) {
            return source + ":" + std::to_string(t.line) + ":" + std::to_string(t.column + pos);
        };
        if (t.text.rfind("--", 0) == 0)
            throw descriptor_error(t.text, 0, "option tokens are not supported in shape files; "
                                              "give options on the command line", where(0));
        try {
            entries.push_back({parse_descriptor(t.text, kind), t});
        } catch (const descriptor_error& e) {
            throw descriptor_error(t.text, e.position(), e.reason(), where(e.position()));
        }
    }
    return entries;
}

const std::vector<std::string>& resnet50_descriptors() {
    // From oneDNN tests/benchdnn/inputs/conv/shapes_resnet_50 (Apache-2.0).
    static const std::vector<std::string> list = {
        "g1mb50ic3ih224iw224oc64oh112ow112kh7kw7sh2sw2ph3pw3n\"resnet_50:conv1\"",
        "mb50ic64ih56oc256oh56kh1ph0n\"resnet_50:res2a_branch1*4\"",
        "mb50ic64ih56oc64oh56kh1ph0n\"resnet_50:res2a_branch2a\"",
        "mb50ic64ih56oc64oh56kh3ph1n\"resnet_50:res2a_branch2b*3\"",
        "mb50ic256ih56oc64oh56kh1ph0n\"resnet_50:res2b_branch2a*2\"",
        "g1mb50ic256ih56iw56oc512oh28ow28kh1kw1sh2sw2ph0pw0n\"resnet_50:res3a_branch1\"",
        "g1mb50ic256ih56iw56oc128oh28ow28kh1kw1sh2sw2ph0pw0n\"resnet_50:res3a_branch2a\"",
        "mb50ic128ih28oc128oh28kh3ph1n\"resnet_50:res3a_branch2b*4\"",
        "mb50ic128ih28oc512oh28kh1ph0n\"resnet_50:res3a_branch2c*4\"",
        "mb50ic512ih28oc128oh28kh1ph0n\"resnet_50:res3b_branch2a*3\"",
        "g1mb50ic512ih28iw28oc1024oh14ow14kh1kw1sh2sw2ph0pw0n\"resnet_50:res4a_branch1\"",
        "g1mb50ic512ih28iw28oc256oh14ow14kh1kw1sh2sw2ph0pw0n\"resnet_50:res4a_branch2a\"",
        "mb50ic256ih14oc256oh14kh3ph1n\"resnet_50:res4a_branch2b*6\"",
        "mb50ic256ih14oc1024oh14kh1ph0n\"resnet_50:res4a_branch2c*6\"",
        "mb50ic1024ih14oc256oh14kh1ph0n\"resnet_50:res4b_branch2a*5\"",
        "g1mb50ic1024ih14iw14oc2048oh7ow7kh1kw1sh2sw2ph0pw0n\"resnet_50:res5a_branch1\"",
        "g1mb50ic1024ih14iw14oc512oh7ow7kh1kw1sh2sw2ph0pw0n\"resnet_50:res5a_branch2a\"",
        "mb50ic512ih7oc512oh7kh3ph1n\"resnet_50:res5a_branch2b*3\"",
        "mb50ic512ih7oc2048oh7kh1ph0n\"resnet_50:res5a_branch2c*3\"",
        "mb50ic2048ih7oc512oh7kh1ph0n\"resnet_50:res5b_branch2a*2\"",
    };
    return list;
}

}  // namespace convgrad::cli
