#include "ops/transpose.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "ops/parallel.hpp"
#include "ops/problem.hpp"

namespace convgrad::detail {
namespace {

// f32 results of this many bytes or more are stored streaming (half this
// host's 32 MiB L3: below it the consumer finds much of the result in L3).
// ResNet-50's f32 layers that transpose in NCX, mb 32, 2 threads, against
// ordinary stores (AMD Zen 4, tools/sweep_ab.py --rounds=3 --min): 1.040x
// geomean over 26 cases; 19-51 MB results 1.01-1.19x (conv1 1.09-1.12x,
// 56x56 3x3 1.05-1.06x, res4a_branch2a 1.19x); streaming every size: 12.8
// MB results 0.96-1.05x. 16-bit tiles of 16 rows store half lines (the other
// half is another tile's), which streamed ran 0.78-0.92x: they stream in
// tiles of 32 rows (rows a multiple of 32), whole lines: bf16 depthwise
// layers of 26-77 MB in NCX 0.98-1.71x (1.22x geomean over 14 cases,
// --rounds=3).
constexpr int64_t kStreamMinBytes = int64_t(16) << 20;
// Streamed results whose rows are a multiple of 1 KiB apart, up to 8 KiB
// (NCX -> NXC with 256-2048 f32 channels, 512-4096 16-bit ones), are
// written in blocks of this many source columns (result rows), every strip
// of a block before the next block: a strip's tiles otherwise sweep the
// whole image's result a line per row, every line at the same 1 KiB-aliased
// offset, and ran at about 22 GB/s (read + write). Throwaway harness, AMD
// Zen 5, 2 threads, mb 32, best of 15, NCX -> NXC: 512 ch x 784 px f32
// 22.5 -> 72.6 GB/s, 1024 x 196 26.4 -> 95.1, 256 x 784 24.1 -> 84.3, 256 x
// 3136 22.4 -> 49.4, bf16 512 x 3136 21.9 -> 48.9, 1024 x 196 23.9 -> 36.6.
// Other pitches lose (64 ch x 12544 px 58.1 -> 38.7, 576 x 196 108.5 ->
// 71.2), as do results with rows of other lengths (NXC -> NCX) and results
// that are not streamed (in ops: ResNeXt-50 conv4 3x3, 12.8 MB, 0.89-0.94x).
constexpr int64_t kBlockColumns = 32;
bool column_blocks(int64_t pitch_bytes) { return pitch_bytes % 1024 == 0 && pitch_bytes <= 8192; }

// Rows first .. first + nr - 1 (nr <= 16; the rest zeros) of a matrix of
// rows `ld` elements apart, the columns c0 + (lanes of cm), as dwords
// (16-bit elements widened), transposed into r: r[j] holds column c0 + j.
// es: 4 or 2, a template argument so the 16 rows stay in registers.
template <int es>
__attribute__((target("avx512f,avx512bw,avx512vl"))) inline void load_transposed(const char* s, int64_t ld,
                                                                             int64_t first, int64_t nr, int64_t c0,
                                                                             __mmask16 cm, __m512i r[16]) {
    for (int i = 0; i < 16; ++i) {
        if (i >= nr) {
            r[i] = _mm512_setzero_si512();
            continue;
        }
        const char* row = s + ((first + i) * ld + c0) * es;
        // The row's line two tiles on (f32): 1.0-1.7x on one thread over
        // 3-3136 rows x 49-50176 columns (a throwaway harness, min of 9).
        _mm_prefetch(row + 128, _MM_HINT_T0);
        if (es == 4)
            r[i] = _mm512_maskz_loadu_epi32(cm, row);
        else
            r[i] = _mm512_maskz_cvtepu16_epi32(0xffff, _mm256_maskz_loadu_epi16(cm, row));
    }
    transpose_16x16(r);
}

// Tile (r0, c0) of a rows x cols matrix (rows s_ld elements apart) into
// its transpose (rows d_ld apart): up to 16 rows x 16 columns, the partial
// edges masked (nothing read or written past them).
template <int es>
__attribute__((target("avx512f,avx512bw,avx512vl"))) inline void tile16(const char* s, int64_t s_ld, char* d,
                                                                    int64_t d_ld, int64_t rows, int64_t cols,
                                                                    int64_t r0, int64_t c0, bool stream) {
    const int64_t nr = std::min<int64_t>(16, rows - r0), nc = std::min<int64_t>(16, cols - c0);
    const __mmask16 cm = static_cast<__mmask16>((1u << nc) - 1), rm = static_cast<__mmask16>((1u << nr) - 1);
    __m512i r[16];
    load_transposed<es>(s, s_ld, r0, nr, c0, cm, r);
    // Whole aligned lines (f32; 16-bit elements stream from tile32_words).
    const bool nt = es == 4 && stream && nr == 16 && rows % 16 == 0;
    for (int j = 0; j < nc; ++j) {
        if (nt)
            _mm512_stream_si512(reinterpret_cast<__m512i*>(d + ((c0 + j) * d_ld + r0) * 4), r[j]);
        else if (es == 4)
            _mm512_mask_storeu_epi32(d + ((c0 + j) * d_ld + r0) * 4, rm, r[j]);
        else
            _mm256_mask_storeu_epi16(d + ((c0 + j) * d_ld + r0) * 2, rm, _mm512_maskz_cvtepi32_epi16(0xffff, r[j]));
    }
}

// 32 rows of 16-bit elements (r0 .. r0 + 31, all inside) × up to 16
// columns from c0: each result row is 32 elements, one 64-byte store
// (streaming: a whole aligned line). Rows s_ld elements apart in s, d_ld
// in d.
__attribute__((target("avx512f,avx512bw,avx512vl"))) inline void tile32_words(const char* s, int64_t s_ld, char* d,
                                                                          int64_t d_ld, int64_t cols, int64_t r0,
                                                                          int64_t c0, bool stream) {
    const int64_t nc = std::min<int64_t>(16, cols - c0);
    const __mmask16 cm = static_cast<__mmask16>((1u << nc) - 1);
    __m512i a[16], b[16];  // rows r0 .. r0 + 15 and the next 16, transposed (dwords)
    load_transposed<2>(s, s_ld, r0, 16, c0, cm, a);
    load_transposed<2>(s, s_ld, r0 + 16, 16, c0, cm, b);
    // The low word of each dword: a's 16, then b's.
    const __m512i low_words = _mm512_set_epi16(62, 60, 58, 56, 54, 52, 50, 48, 46, 44, 42, 40, 38, 36, 34, 32, 30,
                                               28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    for (int j = 0; j < nc; ++j) {
        char* to = d + ((c0 + j) * d_ld + r0) * 2;
        const __m512i v = _mm512_permutex2var_epi16(a[j], low_words, b[j]);
        if (stream)
            _mm512_stream_si512(reinterpret_cast<__m512i*>(to), v);
        else
            _mm512_storeu_si512(to, v);
    }
}

// Rows [r0, r0 + 32) of a rows x cols matrix (rows s_ld elements apart)
// into its transpose (rows d_ld apart), scalar in 32 x 32 tiles.
template <typename T>
void tiles32(const T* s, int64_t s_ld, T* d, int64_t d_ld, int64_t rows, int64_t cols, int64_t r0) {
    constexpr int64_t kTile = 32;
    const int64_t r1 = std::min(rows, r0 + kTile);
    for (int64_t c0 = 0; c0 < cols; c0 += kTile)
        for (int64_t c = c0; c < std::min(cols, c0 + kTile); ++c)
            for (int64_t r = r0; r < r1; ++r) d[c * d_ld + r] = s[r * s_ld + c];
}

// Rows a strip takes: AVX-512 f32 tiles of 16, 16-bit ones of 32 (a
// result row's 32 elements one 64-byte store), scalar tiles of 32.
int64_t strip_rows(int es, bool avx512) { return !avx512 || es == 2 ? 32 : 16; }

// AVX-512: every tile of the strip of rows from r0 (strip_rows of them, or
// the rows left) of a rows x cols matrix (rows s_ld elements apart) into
// its transpose (rows d_ld apart). A partial 16-bit strip takes 16-row
// tiles, masked. (32-row tiles against 16-row ones, which store half lines,
// AMD Zen 5, 2 threads, NCX bf16: ResNet-50 conv1 weight gradient at mb 32
// 1.06x, min of 9; 34 MobileNet / EfficientNet-B0 / GoogLeNet-v3 cells at
// mb 8 1.05x geomean, min of 3.)
__attribute__((target("avx512f,avx512bw,avx512vl"))) void strip16(const char* s, int64_t s_ld, char* d,
                                                              int64_t d_ld, int es, int64_t rows, int64_t cols,
                                                              int64_t r0, bool stream) {
    if (es == 4) {
        for (int64_t c0 = 0; c0 < cols; c0 += 16) tile16<4>(s, s_ld, d, d_ld, rows, cols, r0, c0, stream);
    } else if (r0 + 32 <= rows) {
        for (int64_t c0 = 0; c0 < cols; c0 += 16) tile32_words(s, s_ld, d, d_ld, cols, r0, c0, stream);
    } else {
        for (int64_t c0 = 0; c0 < cols; c0 += 16)
            for (int64_t h = r0; h < rows; h += 16) tile16<2>(s, s_ld, d, d_ld, rows, cols, h, c0, false);
    }
}

// Narrow transposes: one side at most kNarrow elements, the other side's
// rows contiguous (a first layer's 1-4 channels between NCX planes and
// packed NXC pixels). A 16 x 16 tile there loads or stores 16 rows of
// which 1-4 hold data; instead each vector of L = 64 / es results takes
// its lanes from at most four source vectors: two two-source permutes and
// a blend. Result lane j of vector k comes from lane `lane` of source
// vector `vec`: the permute index lane + L * (vec & 1), the blend taking
// the second permute (vectors 2, 3) where vec >= 2. (A throwaway harness,
// AMD Zen 5, one thread, 8064 cached pixels, against the tiles: 3 channels
// bf16 into packed pixels 3.6x, back 2.0x; f32 1.8x / 1.4x. In ops the
// copies are a few percent of a first layer's time: ResNet-50 conv1 bf16
// NCX, its src windows 3.8 -> 3.2 % of the samples.)
constexpr int64_t kNarrow = 4;
struct NarrowTables {
    // [es == 2][c - 1][deinterleave][k]: the permute indices (16-bit
    // elements: 32 words; f32: 16 dwords) and the blend mask.
    alignas(64) uint8_t idx[2][kNarrow][2][kNarrow][64];
    uint32_t high[2][kNarrow][2][kNarrow];
};
const NarrowTables& narrow_tables() {
    static const NarrowTables t = [] {
        NarrowTables r{};
        for (int w = 0; w < 2; ++w)
            for (int64_t c = 1; c <= kNarrow; ++c)
                for (int de = 0; de < 2; ++de)
                    for (int64_t k = 0; k < c; ++k) {
                        const int64_t lanes = w ? 32 : 16;
                        for (int64_t j = 0; j < lanes; ++j) {
                            // Interleave: result k lane j is pixel f / c of
                            // channel f % c (channel vectors, a lane a pixel);
                            // deinterleave: result k (channel k) lane j is
                            // element j * c + k of the packed pixels.
                            const int64_t f = de ? j * c + k : k * lanes + j;
                            const int64_t vec = de ? f / lanes : f % c, lane = de ? f % lanes : f / c;
                            const int64_t at = lane + lanes * (vec & 1);
                            if (w)
                                reinterpret_cast<uint16_t*>(r.idx[w][c - 1][de][k])[j] = static_cast<uint16_t>(at);
                            else
                                reinterpret_cast<uint32_t*>(r.idx[w][c - 1][de][k])[j] = static_cast<uint32_t>(at);
                            if (vec >= 2) r.high[w][c - 1][de][k] |= uint32_t(1) << j;
                        }
                    }
        return r;
    }();
    return t;
}

template <int es>
__attribute__((target("avx512f,avx512bw,avx512vl"))) inline __m512i narrow_masked_load(const char* p, int64_t n) {
    // n <= 0: a vector wholly past a short strip's data (narrow_deinterleave's
    // last vectors). Nothing is read: a mask built from a negative count was
    // a full one, and the load could fault past the end of the tensor.
    if (n <= 0) return _mm512_setzero_si512();
    if (es == 4) return _mm512_maskz_loadu_epi32(static_cast<__mmask16>((uint32_t(1) << n) - 1), p);
    return _mm512_maskz_loadu_epi16(static_cast<__mmask32>((uint64_t(1) << n) - 1), p);
}

template <int es>
__attribute__((target("avx512f,avx512bw,avx512vl"))) inline void narrow_masked_store(char* p, int64_t n, __m512i v,
                                                                                 bool stream) {
    constexpr int64_t lanes = 64 / es;
    if (n >= lanes && stream)
        _mm512_stream_si512(reinterpret_cast<__m512i*>(p), v);
    else if (n >= lanes)
        _mm512_storeu_si512(p, v);
    else if (n <= 0)
        return;
    else if (es == 4)
        _mm512_mask_storeu_epi32(p, static_cast<__mmask16>((uint32_t(1) << n) - 1), v);
    else
        _mm512_mask_storeu_epi16(p, static_cast<__mmask32>((uint64_t(1) << n) - 1), v);
}

// Result vector k of `c` from the source vectors v (see NarrowTables).
template <int es>
__attribute__((target("avx512f,avx512bw,avx512vl"))) inline __m512i narrow_vector(const __m512i v[kNarrow], int64_t c,
                                                                                 int de, int64_t k) {
    const NarrowTables& t = narrow_tables();
    const int w = es == 2;
    const __m512i idx = _mm512_load_si512(t.idx[w][c - 1][de][k]);
    const uint32_t high = t.high[w][c - 1][de][k];
    if (es == 4) {
        const __m512i lo = _mm512_permutex2var_epi32(v[0], idx, v[1]);
        if (!high) return lo;
        return _mm512_mask_mov_epi32(lo, static_cast<__mmask16>(high), _mm512_permutex2var_epi32(v[2], idx, v[3]));
    }
    const __m512i lo = _mm512_permutex2var_epi16(v[0], idx, v[1]);
    if (!high) return lo;
    return _mm512_mask_mov_epi16(lo, static_cast<__mmask32>(high), _mm512_permutex2var_epi16(v[2], idx, v[3]));
}

// rows <= kNarrow rows of cols elements (s_ld apart) into cols packed
// result rows of `rows` elements (d_ld == rows).
template <int es>
__attribute__((target("avx512f,avx512bw,avx512vl"))) void narrow_interleave(const char* s, int64_t s_ld, char* d,
                                                                          int64_t rows, int64_t cols) {
    constexpr int64_t lanes = 64 / es;
    __m512i v[kNarrow] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(),
                          _mm512_setzero_si512()};
    for (int64_t x = 0; x < cols; x += lanes) {
        const int64_t n = std::min(lanes, cols - x);
        for (int64_t r = 0; r < rows; ++r) v[r] = narrow_masked_load<es>(s + (r * s_ld + x) * es, n);
        for (int64_t k = 0; k < rows; ++k)
            narrow_masked_store<es>(d + (x * rows + k * lanes) * es, n * rows - k * lanes,
                                    narrow_vector<es>(v, rows, 0, k), false);
    }
}

// Rows [r0, r1) (r1 - r0 <= L) of packed rows of cols <= kNarrow elements
// (s_ld == cols) into the cols result rows (d_ld apart).
template <int es>
__attribute__((target("avx512f,avx512bw,avx512vl"))) void narrow_deinterleave(const char* s, char* d, int64_t d_ld,
                                                                            int64_t cols, int64_t r0, int64_t r1,
                                                                            bool stream) {
    constexpr int64_t lanes = 64 / es;
    __m512i v[kNarrow] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(),
                          _mm512_setzero_si512()};
    const int64_t n = r1 - r0;
    for (int64_t q = 0; q < cols; ++q)
        v[q] = narrow_masked_load<es>(s + (r0 * cols + q * lanes) * es, std::min(lanes, n * cols - q * lanes));
    for (int64_t c = 0; c < cols; ++c)
        narrow_masked_store<es>(d + (c * d_ld + r0) * es, n, narrow_vector<es>(v, cols, 1, c), stream);
}

// The narrow forms of a strip (rows [r0, r0 + strip_rows)), where they apply.
bool narrow_strip(const char* s, int64_t s_ld, char* d, int64_t d_ld, int es, int64_t rows, int64_t cols, int64_t r0,
                  bool stream) {
    if (rows <= kNarrow && d_ld == rows) {
        if (es == 4)
            narrow_interleave<4>(s, s_ld, d, rows, cols);
        else
            narrow_interleave<2>(s, s_ld, d, rows, cols);
        return true;
    }
    if (cols <= kNarrow && s_ld == cols) {  // an AVX-512 strip's rows are one vector of them
        const int64_t r1 = std::min(rows, r0 + strip_rows(es, true));
        if (es == 4)
            narrow_deinterleave<4>(s, d, d_ld, cols, r0, r1, stream);
        else
            narrow_deinterleave<2>(s, d, d_ld, cols, r0, r1, stream);
        return true;
    }
    return false;
}

// The strip of rows from r0 (strip_rows of them), on either path. `stream`
// only with avx512 and rows a whole number of lines.
void strip(const char* s, int64_t s_ld, char* d, int64_t d_ld, int es, int64_t rows, int64_t cols, int64_t r0,
           bool stream, bool avx512) {
    if (avx512 && narrow_strip(s, s_ld, d, d_ld, es, rows, cols, r0, stream)) return;
    if (avx512)
        strip16(s, s_ld, d, d_ld, es, rows, cols, r0, stream);
    else if (es == 4)
        tiles32(reinterpret_cast<const uint32_t*>(s), s_ld, reinterpret_cast<uint32_t*>(d), d_ld, rows, cols, r0);
    else
        tiles32(reinterpret_cast<const uint16_t*>(s), s_ld, reinterpret_cast<uint16_t*>(d), d_ld, rows, cols, r0);
}

}  // namespace

void transpose_images(const void* src, void* dst, int es, int64_t mb, int64_t rows, int64_t cols, int threads,
                      Isa isa) {
    const bool avx512 = isa >= Isa::avx512_core;
    // Large results bypass the caches (streaming stores need no read of the
    // lines they replace) where every store is a whole aligned line: f32
    // tiles of 16 rows, 16-bit ones of 32 (rows a multiple of either).
    const bool stream = avx512 && mb * rows * cols * es >= kStreamMinBytes &&
                        reinterpret_cast<uintptr_t>(dst) % 64 == 0 && rows % (64 / es) == 0;
    const int64_t tile = strip_rows(es, avx512);
    const int64_t rt = (rows + tile - 1) / tile, items = mb * rt;
    const char* s8 = static_cast<const char*>(src);
    char* d8 = static_cast<char*>(dst);
    const int64_t block = stream && column_blocks(rows * es) ? kBlockColumns : cols;
    auto part = [&](int t) {
        const auto [it0, it1] = spread(items, threads, t);
        // The thread's strips of an image, [it, end), block by block.
        for (int64_t it = it0; it < it1;) {
            const int64_t n = it / rt, image = n * rows * cols * es, end = std::min(it1, (n + 1) * rt);
            for (int64_t c0 = 0; c0 < cols; c0 += block)
                for (int64_t j = it; j < end; ++j)
                    strip(s8 + image + c0 * es, cols, d8 + image + c0 * rows * es, rows, es, rows,
                          std::min(block, cols - c0), j % rt * tile, stream, avx512);
            it = end;
        }
        _mm_sfence();
    };
    for_each_thread(threads, part);
}

void transpose_block(const void* src, int64_t src_ld, void* dst, int64_t dst_ld, int es, int64_t rows, int64_t cols,
                     Isa isa, bool stream) {
    // (Prefetching the rows 2-8 tiles of rows ahead as well: 0.89-1.01x on
    // NCX depthwise windows of 14x14-28x28 planes. Columns outermost for the
    // write-back, so each 16 planes are written in order: 0.99x.)
    const bool avx512 = isa >= Isa::avx512_core;
    stream = stream && avx512 && rows % (64 / es) == 0;
    const int64_t tile = strip_rows(es, avx512);
    for (int64_t r0 = 0; r0 < rows; r0 += tile)
        strip(static_cast<const char*>(src), src_ld, static_cast<char*>(dst), dst_ld, es, rows, cols, r0, stream,
              avx512);
}

namespace {

// Calls f(image n, first row a, end row z) over the images rows [lo, hi) cross.
template <typename F>
void for_each_image_run(const NcxRows& r, F&& f) {
    for (int64_t n = r.lo / r.rows_per_image; n * r.rows_per_image < r.hi; ++n)
        f(n, std::max(r.lo, n * r.rows_per_image), std::min(r.hi, (n + 1) * r.rows_per_image));
}

// Pixels [x0, x1) of a row in the window (either way): the pixels a window
// row holds, and where in it pixel x0 sits (see NcxRows::whole_rows).
struct WindowRow {
    int64_t px, pitch, at;
};
WindowRow window_row(const NcxRows& r) {
    const int64_t px = (r.x1 ? r.x1 : r.row_px) - r.x0;
    if (r.whole_rows || px == r.row_px) return {px, r.row_px, r.x0};
    return {px, px, 0};
}

}  // namespace

void ncx_rows_to_window(const char* ncx, char* window, const NcxRows& r, Isa isa) {
    const int64_t plane = r.rows_per_image * r.row_px, wpx = r.window_pitch();
    if (const WindowRow w = window_row(r); w.px < r.row_px) {  // a run per row
        for_each_image_run(r, [&](int64_t n, int64_t a, int64_t z) {
            for (int64_t row = a; row < z; ++row)
                transpose_block(ncx + ((n * r.channels + r.c0) * plane + (row - n * r.rows_per_image) * r.row_px + r.x0) * r.es,
                                plane, window + (((row - r.lo) * w.pitch + w.at) * wpx + r.c0) * r.es, wpx, r.es,
                                r.c1 - r.c0, w.px, isa);
        });
        return;
    }
    for_each_image_run(r, [&](int64_t n, int64_t a, int64_t z) {
        transpose_block(ncx + ((n * r.channels + r.c0) * plane + (a - n * r.rows_per_image) * r.row_px) * r.es, plane,
                        window + ((a - r.lo) * r.row_px * wpx + r.c0) * r.es, wpx, r.es, r.c1 - r.c0,
                        (z - a) * r.row_px, isa);
    });
}

void nxc_rows_to_window(const char* nxc, char* window, const NcxRows& r) {
    const WindowRow w = window_row(r);
    const int64_t wpx = r.window_pitch();
    const size_t bytes = static_cast<size_t>((r.c1 - r.c0) * r.es);
    for (int64_t row = r.lo; row < r.hi; ++row) {
        const char* from = nxc + ((row * r.row_px + r.x0) * r.channels + r.c0) * r.es;
        char* to = window + (((row - r.lo) * w.pitch + w.at) * wpx + r.c0) * r.es;
        for (int64_t x = 0; x < w.px; ++x, from += r.channels * r.es, to += wpx * r.es) std::memcpy(to, from, bytes);
    }
}

void window_to_ncx_rows(const char* window, char* ncx, const NcxRows& r, Isa isa, bool stream) {
    const int64_t plane = r.rows_per_image * r.row_px, wpx = r.window_pitch();
    if (const WindowRow w = window_row(r); w.px < r.row_px) {  // a run per row
        for_each_image_run(r, [&](int64_t n, int64_t a, int64_t z) {
            for (int64_t row = a; row < z; ++row) {
                char* to = ncx + ((n * r.channels + r.c0) * plane + (row - n * r.rows_per_image) * r.row_px + r.x0) * r.es;
                const bool lines =
                    reinterpret_cast<uintptr_t>(to) % 64 == 0 && plane * r.es % 64 == 0 && w.px * r.es % 64 == 0;
                transpose_block(window + (((row - r.lo) * w.pitch + w.at) * wpx + r.c0) * r.es, wpx, to, plane, r.es,
                                w.px, r.c1 - r.c0, isa, stream && lines);
            }
        });
        return;
    }
    for_each_image_run(r, [&](int64_t n, int64_t a, int64_t z) {
        char* to = ncx + ((n * r.channels + r.c0) * plane + (a - n * r.rows_per_image) * r.row_px) * r.es;
        const int64_t px = (z - a) * r.row_px;
        const bool lines = reinterpret_cast<uintptr_t>(to) % 64 == 0 && plane * r.es % 64 == 0 && px * r.es % 64 == 0;
        transpose_block(window + ((a - r.lo) * r.row_px * wpx + r.c0) * r.es, wpx, to, plane, r.es, px,
                        r.c1 - r.c0, isa, stream && lines);
    });
}

}  // namespace convgrad::detail
