// ops/transpose: per-image transposes of activations, on both paths
// (AVX-512 register tiles with masked edges, scalar tiles), against the
// definition, for sizes around the tile edges and 2- and 4-byte elements.
#include <catch2/catch.hpp>
#include <tbb/task_arena.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "jit/isa.hpp"
#include "ops/transpose.hpp"

using convgrad::detail::Isa;

TEST_CASE("transpose_images equals the definition on every path", "[transpose]") {
    std::vector<Isa> isas{Isa::avx2};
    if (convgrad::detail::cpu_isa() >= Isa::avx512_core) isas.push_back(Isa::avx512_core);
    const int64_t mb = 3;
    for (const Isa isa : isas)
        for (const int es : {2, 4})
            for (const int64_t rows : {1, 15, 16, 17, 33, 64})
                for (const int64_t cols : {1, 2, 16, 31, 49}) {
                    const int64_t n = mb * rows * cols;
                    std::vector<uint8_t> src(static_cast<size_t>(n * es)), want(src.size());
                    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 7 + i / 251);
                    for (int64_t img = 0; img < mb; ++img)
                        for (int64_t r = 0; r < rows; ++r)
                            for (int64_t c = 0; c < cols; ++c)
                                std::memcpy(&want[static_cast<size_t>(((img * cols + c) * rows + r) * es)],
                                            &src[static_cast<size_t>(((img * rows + r) * cols + c) * es)],
                                            static_cast<size_t>(es));
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
