// The benchdnn descriptor parser of tools/: README worked examples, every
// shape file of ../shared/shapes, a table of malformed descriptors, and a
// fuzz loop that only accepts "parsed and round-trips" or a descriptor_error.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include "descriptor.hpp"
#include "op_case.hpp"
#include "test_cli_util.hpp"

using namespace convgrad::cli;
using A3 = std::array<int64_t, 3>;

TEST_CASE("cli descriptor: the worked examples of shapes/README.md", "[cli][descriptor]") {
    SECTION("1x1, padding given") {
        const conv_desc d = parse_descriptor("mb50ic64ih56oc256oh56kh1ph0");
        CHECK(d.nsp == 2);
        CHECK(d.mb == 50);
        CHECK(d.i == A3{1, 56, 56});
        CHECK(d.o == A3{1, 56, 56});
        CHECK(d.k == A3{1, 1, 1});
        CHECK(d.p == A3{0, 0, 0});
        CHECK(d.p_end == A3{0, 0, 0});
        CHECK_FALSE(d.has_groups);
    }
    SECTION("g1, stride 2, negative end padding") {
        const conv_desc d = parse_descriptor("g1mb50ic256ih56iw56oc512oh28ow28kh1kw1sh2sw2ph0pw0");
        CHECK(d.has_groups);
        CHECK(d.g == 1);
        CHECK(d.s == A3{1, 2, 2});
        CHECK(d.p_end == A3{0, -1, -1});
    }
    SECTION("padding derived from the output") {
        const conv_desc d = parse_descriptor("ic16ih10oc16oh10kh3");
        CHECK(d.mb == 2);
        CHECK(d.p == A3{0, 1, 1});
        CHECK(d.p_end == A3{0, 1, 1});
    }
    SECTION("output derived") {
        const conv_desc d = parse_descriptor("ic3ih5oc4kh3sh2");
        CHECK(d.o == A3{1, 2, 2});
        CHECK(d.p == A3{0, 0, 0});
        CHECK(d.p_end == A3{0, 0, 0});
    }
    SECTION("1D with groups and cosmetic underscores") {
        const conv_desc d = parse_descriptor("g2_ic32oc32_iw27kw2");
        CHECK(d.nsp == 1);
        CHECK(d.g == 2);
        CHECK(d.i == A3{1, 1, 27});
        CHECK(d.o == A3{1, 1, 26});
    }
    SECTION("3D, entries in any order") {
        const conv_desc d = parse_descriptor("ic16oc16_ih13kh3ph1_iw50kw3pw1_id10kd3pd1");
        CHECK(d.nsp == 3);
        CHECK(d.i == A3{10, 13, 50});
        CHECK(d.o == A3{10, 13, 50});
        CHECK(d.p_end == A3{1, 1, 1});
    }
    SECTION("dilation counts skipped taps") {
        const conv_desc d = parse_descriptor("mb20ic4ih8oc6oh5kh3ph1dh1");
        CHECK(d.d == A3{0, 1, 1});
        CHECK(d.ext(1) == 5);
        CHECK(d.p == A3{0, 1, 1});
        CHECK(d.p_end == A3{0, 0, 0});
    }
    SECTION("deconv: source 27x27 -> destination 27x27") {
        const conv_desc d = parse_descriptor("g2mb256oc96oh27ic256ih27kh5ph2", desc_kind::deconv);
        CHECK(d.p == A3{0, 2, 2});
        CHECK(d.p_end == A3{0, 2, 2});
        CHECK(d.g == 2);
    }
    SECTION("deconv: negative end padding is one extra output column") {
        const conv_desc d = parse_descriptor("mb1_g1oc3ic64_ow1030iw512kw7sw2dw0pw0", desc_kind::deconv);
        CHECK(d.nsp == 1);
        CHECK(d.p_end == A3{0, 0, -1});
    }
    SECTION("the name is verbatim, quotes kept, and the later duplicate wins") {
        const conv_desc d = parse_descriptor("ic3ic5oc4iw5kw3n\"net:layer*3\"");
        CHECK(d.ic == 5);
        CHECK(d.name == "\"net:layer*3\"");
    }
    SECTION("an explicit pd0 does not make a problem 3D") {
        CHECK(parse_descriptor("ic3oc4ih5kh3pd0").nsp == 2);
    }
}

TEST_CASE("cli descriptor: deconv derivations", "[cli][descriptor]") {
    const conv_desc d = parse_descriptor("ic8oc4iw5kw3sw2", desc_kind::deconv);
    CHECK(d.o == A3{1, 1, 11});  // (5 - 1) * 2 + 3
    CHECK(d.flops() == 2.0 * 2 * 4 * 8 * 3 * 5);  // counted on the small (source) side
}

TEST_CASE("cli descriptor: every shape file parses, builds valid ops and round-trips", "[cli][descriptor][shapes]") {
    const auto dir = shapes_dir();
    if (!dir) {
        WARN("../shared/shapes not found; skipping");
        return;
    }
    // The descriptor counts of shapes/README.md (comments excluded).
    const std::map<std::string, size_t> expected = {
        {"conv/shapes_resnet_50", 20}, {"conv/shapes_googlenet_v3", 43}, {"conv/shapes_mobilenet", 11},
        {"conv/shapes_mobilenet_dw", 9}, {"conv/shapes_1d", 31},         {"conv/shapes_3d", 21},
        {"conv/shapes_dilated", 42},     {"conv/shapes_basic", 54},      {"deconv/shapes_1d", 8},
        {"deconv/shapes_2d", 60},        {"deconv/shapes_3d", 1},        {"deconv/shapes_dilated", 57}};
    size_t files = 0;
    for (const auto& [rel, count] : expected) {
        const std::filesystem::path path = *dir / rel;
        const bool deconv = rel.rfind("deconv", 0) == 0;
        INFO(path.string());
        const std::vector<shape_entry> entries =
            parse_shape_file(read_text(path), deconv ? desc_kind::deconv : desc_kind::conv, path.string());
        CHECK(entries.size() == count);
        ++files;
        for (const shape_entry& e : entries) {
            INFO(e.token.text);
            CHECK(parse_descriptor(to_string(e.desc), e.desc.kind) == e.desc);
            const std::vector<convgrad::op_kind> kinds =
                deconv ? std::vector<convgrad::op_kind>{convgrad::op_kind::conv_transpose_bwd_weights}
                       : std::vector<convgrad::op_kind>{convgrad::op_kind::conv_bwd_weights,
                                                        convgrad::op_kind::conv_bwd_data};
            for (convgrad::op_kind kind : kinds) {
                const op_case c = make_case(e.desc, kind, convgrad::data_type::f32, {});
                REQUIRE(c.skip_reason.empty());
                // The library accepts the op, and counts flops as benchdnn does.
                const convgrad::op o = c.make_op();
                CHECK(o.flops() == Approx(e.desc.flops()).epsilon(1e-12));
            }
        }
    }
    CHECK(files == expected.size());
}

TEST_CASE("cli descriptor: the embedded ResNet-50 list is the shape file's", "[cli][descriptor][shapes]") {
    REQUIRE(resnet50_descriptors().size() == 20);
    const auto dir = shapes_dir();
    if (!dir) {
        WARN("../shared/shapes not found; skipping the comparison");
        return;
    }
    const auto path = *dir / "conv/shapes_resnet_50";
    const std::vector<shape_entry> file = parse_shape_file(read_text(path), desc_kind::conv, path.string());
    REQUIRE(file.size() == 20);
    for (size_t i = 0; i < 20; ++i) CHECK(file[i].token.text == resnet50_descriptors()[i]);
}

TEST_CASE("cli descriptor: an auto_pad override a layer cannot take skips that layer", "[cli][descriptor]") {
    // valid pads nothing: a kernel extent past the input leaves no output.
    // The case names why and is skipped; a layer that fits runs.
    layout_options lo;
    lo.auto_pad = "valid";
    const op_case unfit = make_case(parse_descriptor("mb2ic3oc4iw9ow9kw11pw5"), convgrad::op_kind::conv_bwd_weights,
                                    convgrad::data_type::f32, lo);
    CHECK_THAT(unfit.skip_reason, Catch::Contains("auto_pad=valid") && Catch::Contains("kernel extent 11") &&
                                          Catch::Contains("input 9"));
    const op_case fits = make_case(parse_descriptor("mb2ic3oc4iw9ow9kw3pw1"), convgrad::op_kind::conv_bwd_data,
                                   convgrad::data_type::f32, lo);
    CHECK(fits.skip_reason.empty());
    CHECK(fits.make_op().flops() > 0);
    lo.auto_pad = "same_upper";  // same pads any kernel to keep the input's size
    CHECK(make_case(parse_descriptor("mb2ic3oc4iw9ow9kw11pw5"), convgrad::op_kind::conv_bwd_weights,
                    convgrad::data_type::f32, lo)
                  .skip_reason.empty());
}

TEST_CASE("cli descriptor: malformed descriptors are rejected with where and why", "[cli][descriptor]") {
    struct bad {
        const char* text;
        size_t position;
        const char* reason;
    };
    const bad table[] = {
        {"", 0, "empty descriptor"},
        {"_mb2ic3oc4iw5kw3", 0, "cannot start with '_'"},
        {"mb2__ic3oc4iw5kw3", 4, "'_' may only follow a value"},
        {"mb2ic-3oc4iw5kw3", 5, "negative value for 'ic'"},
        {"mb2ic3oc4iw5kw", 14, "key 'kw' has no value"},
        {"mb2icxoc4iw5kw3", 5, "key 'ic' must be followed by digits"},
        {"mb2ic3oc4iw5kw3zz1", 15, "unknown key 'zz'"},
        {"mb2ic3oc4iw5kw3 ", 15, "unexpected character ' '"},
        {"MB2ic3oc4iw5kw3", 0, "unexpected character 'M'"},
        {"ic3oc4iw5kw3\x01", 12, "unexpected character '\\x01'"},
        {"ic3oc4", 6, "no spatial dimension"},
        {"mb2oc4iw5kw3", 12, "ic is required"},
        {"ic3iw5kw3", 9, "oc is required"},
        {"ic3oc4iw5", 6, "kw is required"},
        {"ic3oc4kw3", 6, "iw is required"},
        {"ic3oc4iw5kw3sw0", 12, "sw is 0"},
        {"g0ic3oc4iw5kw3", 0, "g must be at least 1"},
        {"g2ic3oc4iw5kw3", 0, "g2 must divide ic3"},
        {"mb0ic3oc4iw5kw3", 0, "mb must be at least 1"},
        {"ic3oc4iw2kw5", 6, "does not fit"},
        {"ic3oc4iw10ow2kw3", 10, "padding derived from ow is negative"},
        {"ic3oc4id5kd3ih5kh3", 12, "must give both H and W"},
        {"ic3oc4iw5kw3n", 12, "'n' must be followed by a name"},
        {"ic99999999999oc4iw5kw3", 2, "too large"},
    };
    for (const bad& b : table) {
        INFO("descriptor: " << b.text);
        try {
            parse_descriptor(b.text);
            FAIL("accepted");
        } catch (const descriptor_error& e) {
            CHECK(e.position() == b.position);
            CHECK_THAT(e.reason(), Catch::Contains(b.reason));
            CHECK_THAT(e.what(), Catch::Contains("at column " + std::to_string(b.position + 1)));
        }
    }
}

TEST_CASE("cli descriptor: shape-file comments, continuations and error places", "[cli][descriptor]") {
    const std::string text =
        "# a comment line\n"
        "ic3oc4iw5kw3n\"one\"   # trailing remark ic9oc9iw9kw9\n"
        "\n"
        "  ic3oc4\\\n"
        "iw5kw3\n";
    const std::vector<shape_entry> e = parse_shape_file(text, desc_kind::conv, "f");
    REQUIRE(e.size() == 2);
    CHECK(e[0].desc.name == "\"one\"");
    CHECK(e[0].token.line == 2);
    CHECK(e[1].token.text == "ic3oc4iw5kw3");
    CHECK(e[1].token.line == 4);
    CHECK(e[1].token.column == 3);

    try {
        parse_shape_file("ic3oc4iw5kw3\n   ic3oc-4iw5kw3\n", desc_kind::conv, "shapes.txt");
        FAIL("accepted");
    } catch (const descriptor_error& err) {
        CHECK_THAT(err.what(), Catch::StartsWith("shapes.txt:2:9: "));
        CHECK_THAT(err.what(), Catch::Contains("negative value for 'oc'"));
    }
    CHECK_THROWS_WITH(parse_shape_file("--mb=2 ic3oc4iw5kw3", desc_kind::conv, "s"),
                      Catch::Contains("option tokens are not supported"));
}

TEST_CASE("cli descriptor: random strings never crash the parser", "[cli][descriptor][fuzz]") {
    // Mostly key+value entries (so valid descriptors do occur), with junk.
    const std::vector<std::string> keys = {"g",  "mb", "ic", "oc", "id", "ih", "iw", "od", "oh", "ow", "kd",
                                           "kh", "kw", "sd", "sh", "sw", "pd", "ph", "pw", "dd", "dh", "dw"};
    const std::vector<std::string> junk = {"n", "_", "-", "\"", "99999999999", "x", "#", " ", "\xff", "\\", ""};
    std::mt19937 gen(7);
    std::uniform_int_distribution<size_t> pick_key(0, keys.size() - 1), pick_junk(0, junk.size() - 1);
    std::uniform_int_distribution<int> value(0, 9), entries(0, 8), percent(0, 99);
    int parsed = 0;
    for (int iter = 0; iter < 20000; ++iter) {
        std::string s = percent(gen) < 50 ? "ic4oc4" : "";
        for (int n = entries(gen); n > 0; --n) {
            if (percent(gen) < 85) s += keys[pick_key(gen)] + std::to_string(value(gen));
            else s += junk[pick_junk(gen)];
        }
        for (desc_kind kind : {desc_kind::conv, desc_kind::deconv}) {
            try {
                const conv_desc d = parse_descriptor(s, kind);
                ++parsed;
                REQUIRE(parse_descriptor(to_string(d), kind) == d);
            } catch (const descriptor_error& e) {
                REQUIRE(e.position() <= s.size());
                REQUIRE_FALSE(e.reason().empty());
            }
        }
        try {
            parse_shape_file(s + "\n" + s, desc_kind::conv, "fuzz");
        } catch (const descriptor_error&) {
        }
    }
    CHECK(parsed > 0);  // the generator does reach valid descriptors
}
