// ops/transpose: per-image transposes of activations, on both paths
// (AVX-512 register tiles with masked edges, 16-bit strips of 32 rows and
// their partial last strips, scalar tiles), against the definition, for
// sizes around the tile edges and 2- and 4-byte elements,
// and results whose rows are 1-2 KiB apart (written in blocks of columns).
#include <catch2/catch.hpp>
#include <tbb/task_arena.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "jit/isa.hpp"
#include "dot_test_util.hpp"
#include "ops/transpose.hpp"
#include "test_util.hpp"
#include "weights_case.hpp"

using convgrad::detail::Isa;

namespace {

// The definition: each of mb images, rows x cols elements of es bytes, transposed.
std::vector<uint8_t> transposed(const uint8_t* src, int es, int64_t mb, int64_t rows, int64_t cols) {
    std::vector<uint8_t> t(static_cast<size_t>(mb * rows * cols * es));
    for (int64_t img = 0; img < mb; ++img)
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t c = 0; c < cols; ++c)
                std::memcpy(&t[static_cast<size_t>(((img * cols + c) * rows + r) * es)],
                            &src[((img * rows + r) * cols + c) * es], static_cast<size_t>(es));
    return t;
}

}  // namespace

TEST_CASE("transpose_images equals the definition on every path", "[transpose]") {
    std::vector<Isa> isas{Isa::avx2};
    if (convgrad::detail::cpu_isa() >= Isa::avx512_core) isas.push_back(Isa::avx512_core);
    const int64_t mb = 3;
    for (const Isa isa : isas)
        for (const int es : {2, 4})
            for (const int64_t rows : {1, 2, 3, 4, 15, 16, 17, 31, 33, 48, 64, 256, 512})
                for (const int64_t cols : {1, 2, 3, 4, 16, 31, 49, 85}) {
                    const int64_t n = mb * rows * cols;
                    std::vector<uint8_t> src(static_cast<size_t>(n * es));
                    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 7 + i / 251);
                    const std::vector<uint8_t> want = transposed(src.data(), es, mb, rows, cols);
                    for (const int threads : {1, 2, 3}) {
                        // One guard element past the end: nothing may be written there.
                        std::vector<uint8_t> got(src.size() + static_cast<size_t>(es), 0xa5);
                        tbb::task_arena arena(threads);
                        arena.execute([&] {
                            convgrad::detail::transpose_images(src.data(), got.data(), es, mb, rows, cols, threads,
                                                               isa);
                        });
                        INFO("isa " << convgrad::detail::isa_name(isa) << " es " << es << " " << rows << " x "
                                    << cols << " threads " << threads);
                        CHECK(std::memcmp(got.data(), want.data(), want.size()) == 0);
                        CHECK(got.back() == 0xa5);
                    }
                }
}

// Images of up to 4 columns (AVX-512's narrow deinterleave: a strip's rows
// are one vector of them) whose last strip is short, from a source that
// ends at an inaccessible page: no vector past the strip's data is read.
TEST_CASE("transpose_images reads nothing past the end of its source", "[transpose]") {
    std::vector<Isa> isas{Isa::avx2};
    if (convgrad::detail::cpu_isa() >= Isa::avx512_core) isas.push_back(Isa::avx512_core);
    for (const Isa isa : isas)
        for (const int es : {2, 4})
            for (const int64_t rows : {1, 2, 3, 5, 7, 17, 33, 35})
                for (const int64_t cols : {1, 2, 3, 4}) {
                    const int64_t mb = 2, n = mb * rows * cols;
                    const auto src = testutil::guarded_bytes(static_cast<size_t>(n * es), true);
                    for (int64_t i = 0; i < n * es; ++i) src.data()[i] = static_cast<uint8_t>(i * 5 + 1);
                    std::vector<uint8_t> got(static_cast<size_t>(n * es));
                    convgrad::detail::transpose_images(src.data(), got.data(), es, mb, rows, cols, 1, isa);
                    INFO("isa " << convgrad::detail::isa_name(isa) << " es " << es << " " << rows << " x " << cols);
                    CHECK(got == transposed(src.data(), es, mb, rows, cols));
                }
}

TEST_CASE("transpose_block: a block of a larger matrix, nothing around it touched", "[transpose]") {
    // A rows x cols block at (3, 5) of a 70 x 90 matrix (rows src_ld = 90
    // apart) into a 100 x 80 one at (2, 7) (rows dst_ld = 80 apart): every
    // element of the block's transpose where it belongs, every other
    // element of the destination as it was.
    std::vector<Isa> isas{Isa::avx2};
    if (convgrad::detail::cpu_isa() >= Isa::avx512_core) isas.push_back(Isa::avx512_core);
    const int64_t src_ld = 90, dst_ld = 80, src_rows = 70, dst_rows = 100;
    for (const Isa isa : isas)
        for (const int es : {2, 4})
            for (const int64_t rows : {1, 15, 16, 17, 31, 33, 48, 64})
                for (const int64_t cols : {1, 2, 16, 31, 49, 85}) {
                    std::vector<uint8_t> src(static_cast<size_t>(src_rows * src_ld * es));
                    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 7 + i / 251);
                    std::vector<uint8_t> want(static_cast<size_t>(dst_rows * dst_ld * es), 0xa5), got = want;
                    const int64_t s0 = 3 * src_ld + 5, d0 = 2 * dst_ld + 7;
                    for (int64_t r = 0; r < rows; ++r)
                        for (int64_t c = 0; c < cols; ++c)
                            std::memcpy(&want[static_cast<size_t>((d0 + c * dst_ld + r) * es)],
                                        &src[static_cast<size_t>((s0 + r * src_ld + c) * es)], static_cast<size_t>(es));
                    convgrad::detail::transpose_block(src.data() + s0 * es, src_ld, got.data() + d0 * es, dst_ld, es,
                                                      rows, cols, isa);
                    INFO("isa " << convgrad::detail::isa_name(isa) << " es " << es << " " << rows << " x " << cols);
                    CHECK(got == want);
                }
}

TEST_CASE("transpose: 1-4 channels between planes and packed pixels, nothing around them touched", "[transpose]") {
    // The narrow forms: rows <= 4 into packed result rows (dst_ld == rows),
    // and packed rows of cols <= 4 (src_ld == cols) into planes dst_ld
    // apart, as blocks of larger buffers (guards before and after), and
    // 16-bit packed rows of 3 of 2.1 M pixels (17 MB: planes streamed).
    std::vector<Isa> isas{Isa::avx2};
    if (convgrad::detail::cpu_isa() >= Isa::avx512_core) isas.push_back(Isa::avx512_core);
    auto fill = [](std::vector<uint8_t>& v) {
        for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<uint8_t>((i * 2654435761u) >> 11);
    };
    for (const Isa isa : isas)
        for (const int es : {2, 4})
            for (const int64_t narrow : {1, 2, 3, 4})
                for (const int64_t wide : {1, 15, 16, 17, 31, 32, 33, 100})
                    for (const bool planes_out : {false, true}) {
                        // planes_out: packed rows (wide x narrow) into planes (narrow x wide, 7 extra
                        // elements a plane); else planes (narrow x wide, 5 extra) into packed rows.
                        const int64_t rows = planes_out ? wide : narrow, cols = planes_out ? narrow : wide;
                        const int64_t src_ld = planes_out ? narrow : wide + 5, dst_ld = planes_out ? wide + 7 : narrow;
                        const int64_t guard = 64;
                        std::vector<uint8_t> src(static_cast<size_t>((rows * src_ld + 2 * guard) * es));
                        fill(src);
                        std::vector<uint8_t> want(static_cast<size_t>((cols * dst_ld + 2 * guard) * es), 0xa5);
                        std::vector<uint8_t> got = want;
                        for (int64_t r = 0; r < rows; ++r)
                            for (int64_t c = 0; c < cols; ++c)
                                std::memcpy(&want[static_cast<size_t>((guard + c * dst_ld + r) * es)],
                                            &src[static_cast<size_t>((guard + r * src_ld + c) * es)],
                                            static_cast<size_t>(es));
                        convgrad::detail::transpose_block(src.data() + guard * es, src_ld, got.data() + guard * es,
                                                          dst_ld, es, rows, cols, isa);
                        INFO("isa " << convgrad::detail::isa_name(isa) << " es " << es << " " << rows << " x "
                                    << cols << " src_ld " << src_ld << " dst_ld " << dst_ld);
                        CHECK(got == want);
                    }
    if (convgrad::detail::cpu_isa() < Isa::avx512_core) return;
    const int64_t mb = 2, rows = int64_t(1) << 21, cols = 3, n = mb * rows * cols;
    std::vector<uint8_t> src(static_cast<size_t>(n * 2));
    fill(src);
    std::unique_ptr<char, decltype(&std::free)> buf(static_cast<char*>(std::aligned_alloc(64, n * 2 + 64)),
                                                    &std::free);
    std::memset(buf.get(), 0xa5, static_cast<size_t>(n * 2 + 64));
    tbb::task_arena arena(2);
    arena.execute(
            [&] { convgrad::detail::transpose_images(src.data(), buf.get(), 2, mb, rows, cols, 2, Isa::avx512_core); });
    int64_t wrong = 0;
    for (int64_t img = 0; img < mb; ++img)
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t c = 0; c < cols; ++c)
                wrong += std::memcmp(buf.get() + ((img * cols + c) * rows + r) * 2,
                                     &src[static_cast<size_t>(((img * rows + r) * cols + c) * 2)], 2) != 0;
    CHECK(wrong == 0);
    CHECK(static_cast<unsigned char>(buf.get()[n * 2]) == 0xa5);
}

TEST_CASE("transpose_images: results of 16 MiB and more, streamed when lines allow", "[transpose]") {
    if (convgrad::detail::cpu_isa() < Isa::avx512_core) return;
    // 2 images of 64 x 33000 f32 or 64 x 66000 16-bit elements (16.9 MB):
    // whole lines, streamed (16-bit in tiles of 32 rows); 63 or 48 rows
    // (rows end mid-line, or no whole tiles of 32) and a destination 4
    // bytes off a line: stored as usual. 1 KiB result rows (256 f32 / 512
    // 16-bit rows, 8250 columns): streamed in blocks of columns.
    const int64_t mb = 2;
    for (const int es : {4, 2})
        for (const int64_t rows : {int64_t(64), es == 4 ? int64_t(63) : int64_t(48), int64_t(1024 / es)})
            for (const size_t offset : {size_t(0), size_t(4)}) {
                const int64_t cols = 33000 * 4 / es * 64 / std::max<int64_t>(64, rows), n = mb * rows * cols;
                std::vector<uint8_t> src(static_cast<size_t>(n * es));
                for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>((i * 2654435761u) >> 13);
                const size_t bytes = src.size() + 64 + offset;
                // (aligned_alloc takes a whole number of alignments)
                std::unique_ptr<char, decltype(&std::free)> buf(
                        static_cast<char*>(std::aligned_alloc(64, (bytes + 64 + 63) / 64 * 64)), &std::free);
                char* dst = buf.get() + offset;
                std::memset(buf.get(), 0xa5, bytes + 64);
                tbb::task_arena arena(2);
                arena.execute([&] {
                    convgrad::detail::transpose_images(src.data(), dst, es, mb, rows, cols, 2, Isa::avx512_core);
                });
                int64_t wrong = 0;
                for (int64_t img = 0; img < mb; ++img)
                    for (int64_t r = 0; r < rows; ++r)
                        for (int64_t c = 0; c < cols; ++c)
                            wrong += std::memcmp(dst + ((img * cols + c) * rows + r) * es,
                                                 &src[static_cast<size_t>(((img * rows + r) * cols + c) * es)],
                                                 static_cast<size_t>(es)) != 0;
                INFO(es << "-byte elements, " << rows << " rows, destination " << offset << " bytes off a line");
                CHECK(wrong == 0);
                CHECK(static_cast<unsigned char>(dst[n * es]) == 0xa5);
            }
}

TEST_CASE("transpose_images: NCX layers whose transposes stream equal the reference", "[transpose]") {
    if (convgrad::detail::cpu_isa() < Isa::avx512_core) return;
    // A depthwise 3x3 layer of 32 channels on 112x112 planes at mb 22: src
    // and diff_src are 35 MB in f32 and 17.7 MB in bf16 / f16 (32 channels:
    // whole 32-row tiles), both above the streaming bound; weight and data
    // gradients, small integers (exact sums).
    wtest::Case c = wtest::conv2d(32, 32, {112, 112}, {3, 3});
    c.mb = 22;
    c.g = 32;
    c.nxc = false;
    c.pb = c.pe = {1, 1};
    for (const convgrad::data_type dt : {convgrad::data_type::f32, convgrad::data_type::bf16,
                                         convgrad::data_type::f16}) {
        c.dt = dt;
        for (const bool data : {false, true}) {
            const convgrad::op ref = data ? dottest::data_op(c, "ref") : c.make("ref");
            const convgrad::op jit = data ? dottest::data_op(c, "") : c.make("");
            INFO(jit.describe());
            REQUIRE(jit.describe().rfind("jit:", 0) == 0);
            const auto a = testutil::small_ints(dt, ref.input0_elems(), 11);
            const auto b = testutil::small_ints(dt, ref.input1_elems(), 12);
            CHECK(testutil::bitwise_equal(testutil::run(jit, a, b), testutil::run(ref, a, b)));
        }
    }
}
