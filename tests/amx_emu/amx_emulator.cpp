#include "amx_emu/amx_emulator.hpp"

#include <immintrin.h>
#include <signal.h>
#include <ucontext.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace convgrad::amxemu {
namespace {

constexpr int kTiles = 8, kMaxRows = 16, kMaxColsb = 64;

// One thread's tile state (XTILECFG and XTILEDATA). Zero-initialised POD in
// the executable's static TLS, so the handler never allocates.
struct TileFile {
    bool configured;
    uint8_t start_row;
    uint16_t colsb[kTiles];
    uint8_t rows[kTiles];
    alignas(64) uint8_t t[kTiles][kMaxRows][kMaxColsb];
};
thread_local TileFile tiles;
thread_local uint64_t count;

// The x86 register number's slot in the signal context.
constexpr int kGreg[16] = {REG_RAX, REG_RCX, REG_RDX, REG_RBX, REG_RSP, REG_RBP, REG_RSI, REG_RDI,
                           REG_R8,  REG_R9,  REG_R10, REG_R11, REG_R12, REG_R13, REG_R14, REG_R15};

// Async-signal-safe report: the message and the instruction's bytes, then abort.
[[noreturn]] void fail(const char* what, const uint8_t* ip) {
    const char head[] = "AMX emulator: ";
    (void)!write(STDERR_FILENO, head, sizeof(head) - 1);
    (void)!write(STDERR_FILENO, what, strlen(what));
    char bytes[3 * 10 + 16] = " at bytes";
    size_t n = strlen(bytes);
    for (int i = 0; i < 10; ++i) {
        const char* hex = "0123456789abcdef";
        bytes[n++] = ' ';
        bytes[n++] = hex[ip[i] >> 4];
        bytes[n++] = hex[ip[i] & 15];
    }
    bytes[n++] = '\n';
    (void)!write(STDERR_FILENO, bytes, n);
    abort();
}

struct Insn {
    const uint8_t* ip = nullptr;
    int op = 0, pp = 0, reg = 0, rm = 0, vvvv = 0, mod = 0;
    bool sib = false;
    uint64_t addr = 0;   // memory forms: base + disp (or RIP + disp)
    int64_t stride = 0;  // SIB forms: index << scale, 0 without an index
    size_t len = 0;
};

// Decodes a VEX-encoded AMX instruction (C4, map 0F38, W0, L0); false if
// it is not one.
bool decode(const uint8_t* ip, const greg_t* g, Insn& d) {
    if (ip[0] != 0xC4) return false;
    const uint8_t b1 = ip[1], b2 = ip[2];
    const int r = (b1 & 0x80) ? 0 : 8, x = (b1 & 0x40) ? 0 : 8, b = (b1 & 0x20) ? 0 : 8;
    if ((b1 & 0x1f) != 2 || (b2 & 0x80) || (b2 & 0x04)) return false;
    d.ip = ip;
    d.vvvv = (~b2 >> 3) & 15;
    d.pp = b2 & 3;
    d.op = ip[3];
    if (d.op != 0x49 && d.op != 0x4B && d.op != 0x5C) return false;
    const uint8_t modrm = ip[4];
    d.mod = modrm >> 6;
    d.reg = ((modrm >> 3) & 7) | r;
    d.rm = (modrm & 7) | b;
    d.len = 5;
    if (d.mod == 3) return true;
    const auto reg64 = [&](int i) { return static_cast<uint64_t>(g[kGreg[i]]); };
    int64_t disp = 0;
    bool rip = false, has_base = true;
    int base = d.rm;
    if ((modrm & 7) == 4) {
        d.sib = true;
        const uint8_t sib = ip[d.len++];
        const int index = ((sib >> 3) & 7) | x;
        base = (sib & 7) | b;
        has_base = !((sib & 7) == 5 && d.mod == 0);
        if (index != 4) d.stride = static_cast<int64_t>(reg64(index) << (sib >> 6));
    } else if ((modrm & 7) == 5 && d.mod == 0) {
        rip = true;
        has_base = false;
    }
    if (d.mod == 1) {
        disp = static_cast<int8_t>(ip[d.len]);
        d.len += 1;
    } else if (d.mod == 2 || !has_base) {
        int32_t v;
        std::memcpy(&v, ip + d.len, 4);
        disp = v;
        d.len += 4;
    }
    d.addr = (has_base ? reg64(base) : 0) + static_cast<uint64_t>(disp);
    if (rip) d.addr += reinterpret_cast<uint64_t>(ip) + d.len;
    return true;
}

// On a CPU with AMX the tiles trap only because this process has not asked
// for the tile data (Linux arms XFD for it): LDTILECFG and TILERELEASE run
// on the hardware and set its configuration, and only the instructions
// that touch tile data trap. The emulator then takes the configuration from
// the interrupted context's XSAVE image (component 17, XTILECFG, at the
// offset CPUID leaf 0xD gives; INIT when its XSTATE_BV bit is clear) before
// each instruction it runs; a changed one starts from zeroed tiles, as
// LDTILECFG does (a LDTILECFG of the same configuration goes unseen: its
// zeroing is checked where it traps, on CPUs without AMX). The offset is
// -1 without AMX-TILE or without XTILECFG in XCR0; it is read before main,
// so the handler only loads it.
int64_t find_xtilecfg_offset() {
    unsigned a, b, c, d;
    __asm__("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(7), "c"(0));
    if (!((d >> 24) & 1)) return -1;
    // (An OS that does not manage the tile state leaves XTILECFG out of XCR0:
    // there LDTILECFG traps as on a CPU without AMX.)
    unsigned lo, hi;
    __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if (!((lo >> 17) & 1)) return -1;
    __asm__("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(0xd), "c"(17));
    return int64_t(b);
}
const int64_t xtilecfg_offset = find_xtilecfg_offset();

void load_config_bytes(const uint8_t* c, const uint8_t* ip);
void config_bytes(uint8_t* c);

void sync_from_context(const ucontext_t* uc, const uint8_t* ip) {
    const int64_t offset = xtilecfg_offset;
    if (offset < 0 || !uc->uc_mcontext.fpregs) return;
    const auto* xsave = reinterpret_cast<const uint8_t*>(uc->uc_mcontext.fpregs);
    uint64_t xstate_bv;
    std::memcpy(&xstate_bv, xsave + 512, 8);
    uint8_t c[64] = {}, mine[64];
    if ((xstate_bv >> 17) & 1) std::memcpy(c, xsave + offset, 64);
    config_bytes(mine);
    if (std::memcmp(c, mine, 64) != 0) load_config_bytes(c, ip);
}

int tile_index(const Insn& d, int i) {
    if (i >= kTiles) fail("tile index past tmm7", d.ip);
    if (!tiles.configured) fail("tile instruction before LDTILECFG", d.ip);
    if (tiles.rows[i] == 0) fail("tile not configured (0 rows)", d.ip);
    return i;
}

void release() {
    std::memset(&tiles, 0, sizeof(tiles));
}

void load_config_bytes(const uint8_t* c, const uint8_t* ip) {
    release();
    if (c[0] == 0) return;  // palette 0: the INIT state
    if (c[0] != 1) fail("LDTILECFG: palette other than 0 or 1", ip);
    for (int i = 2; i < 16; ++i)
        if (c[i]) fail("LDTILECFG: reserved byte set", ip);
    for (int i = 32; i < 48; ++i)
        if (c[i]) fail("LDTILECFG: reserved byte set", ip);
    for (int i = 56; i < 64; ++i)
        if (c[i]) fail("LDTILECFG: reserved byte set", ip);
    for (int i = 0; i < kTiles; ++i) {
        uint16_t colsb;
        std::memcpy(&colsb, c + 16 + 2 * i, 2);
        const uint8_t rows = c[48 + i];
        if (colsb > kMaxColsb || rows > kMaxRows || (colsb == 0) != (rows == 0))
            fail("LDTILECFG: invalid tile shape", ip);
        tiles.colsb[i] = colsb;
        tiles.rows[i] = rows;
    }
    tiles.start_row = c[1];
    tiles.configured = true;
}

void load_config(const Insn& d) {
    uint8_t c[64];
    std::memcpy(c, reinterpret_cast<const void*>(d.addr), 64);
    load_config_bytes(c, d.ip);
}

// The 64 bytes STTILECFG stores: the configuration, or zeros in INIT.
void config_bytes(uint8_t* c) {
    std::memset(c, 0, 64);
    if (tiles.configured) {
        c[0] = 1;
        c[1] = tiles.start_row;
        for (int i = 0; i < kTiles; ++i) {
            std::memcpy(c + 16 + 2 * i, &tiles.colsb[i], 2);
            c[48 + i] = tiles.rows[i];
        }
    }
}

void store_config(const Insn& d) {
    uint8_t c[64];
    config_bytes(c);
    std::memcpy(reinterpret_cast<void*>(d.addr), c, 64);
}

void load_tile(const Insn& d) {
    const int t = tile_index(d, d.reg);
    if (tiles.start_row >= tiles.rows[t]) fail("TILELOADD: start_row past the tile's rows", d.ip);
    std::memset(tiles.t[t], 0, sizeof(tiles.t[t]));
    for (int r = tiles.start_row; r < tiles.rows[t]; ++r)
        std::memcpy(tiles.t[t][r],
                    reinterpret_cast<const void*>(d.addr + static_cast<uint64_t>(r * d.stride)),
                    tiles.colsb[t]);
    tiles.start_row = 0;
}

void store_tile(const Insn& d) {
    const int t = tile_index(d, d.reg);
    if (tiles.start_row >= tiles.rows[t]) fail("TILESTORED: start_row past the tile's rows", d.ip);
    for (int r = tiles.start_row; r < tiles.rows[t]; ++r)
        std::memcpy(reinterpret_cast<void*>(d.addr + static_cast<uint64_t>(r * d.stride)),
                    tiles.t[t][r], tiles.colsb[t]);
    tiles.start_row = 0;
}

float bf16(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    const uint32_t bits = uint32_t(h) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

// Under MXCSR round-to-nearest-even with DAZ and FTZ (set by the caller),
// single-rounding multiply-adds.
__attribute__((target("fma"))) float fma_ftz(float a, float b, float c) {
    return _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(a), _mm_set_ss(b), _mm_set_ss(c)));
}
float add_ftz(float a, float b) {
    return _mm_cvtss_f32(_mm_add_ss(_mm_set_ss(a), _mm_set_ss(b)));
}

void dot_bf16(const Insn& d) {
    const int dst = tile_index(d, d.reg), a = tile_index(d, d.rm), b = tile_index(d, d.vvvv);
    if (dst == a || dst == b || a == b) fail("TDPBF16PS: tiles not distinct", d.ip);
    const int m_rows = tiles.rows[dst], n = tiles.colsb[dst] / 4, k = tiles.colsb[a] / 4;
    if (tiles.colsb[dst] % 4 || tiles.colsb[a] % 4 || tiles.rows[a] != m_rows ||
        tiles.colsb[b] != tiles.colsb[dst] || tiles.rows[b] != k || n > 16 || k > 16)
        fail("TDPBF16PS: tile shapes do not chain (M x K, K x N, M x N)", d.ip);
    const unsigned csr = _mm_getcsr();
    _mm_setcsr(0x9FC0);  // all exceptions masked, nearest even, FTZ, DAZ
    for (int m = 0; m < m_rows; ++m) {
        float even[16] = {}, odd[16] = {};
        for (int kk = 0; kk < k; ++kk)
            for (int j = 0; j < n; ++j) {
                even[j] =
                    fma_ftz(bf16(&tiles.t[a][m][4 * kk]), bf16(&tiles.t[b][kk][4 * j]), even[j]);
                odd[j] = fma_ftz(bf16(&tiles.t[a][m][4 * kk + 2]), bf16(&tiles.t[b][kk][4 * j + 2]),
                                 odd[j]);
            }
        for (int j = 0; j < n; ++j) {
            float c;
            std::memcpy(&c, &tiles.t[dst][m][4 * j], 4);
            c = add_ftz(c, add_ftz(even[j], odd[j]));
            std::memcpy(&tiles.t[dst][m][4 * j], &c, 4);
        }
        std::memset(&tiles.t[dst][m][4 * n], 0, static_cast<size_t>(kMaxColsb - 4 * n));
    }
    for (int m = m_rows; m < kMaxRows; ++m) std::memset(tiles.t[dst][m], 0, kMaxColsb);
    _mm_setcsr(csr);
    tiles.start_row = 0;
}

void handler(int, siginfo_t*, void* context) {
    greg_t* g = static_cast<ucontext_t*>(context)->uc_mcontext.gregs;
    const auto* ip = reinterpret_cast<const uint8_t*>(g[REG_RIP]);
    Insn d;
    if (!decode(ip, g, d)) fail("SIGILL on an instruction that is not AMX", ip);
    const bool mem = d.mod != 3;
    sync_from_context(static_cast<const ucontext_t*>(context), ip);
    if (d.op == 0x49 && d.pp == 0 && mem && (d.reg & 7) == 0)
        load_config(d);
    else if (d.op == 0x49 && d.pp == 1 && mem && (d.reg & 7) == 0)
        store_config(d);
    else if (d.op == 0x49 && d.pp == 0 && ip[4] == 0xC0)
        release();
    else if (d.op == 0x49 && d.pp == 3 && !mem && (d.rm & 7) == 0) {
        std::memset(tiles.t[tile_index(d, d.reg)], 0, sizeof(tiles.t[0]));
        tiles.start_row = 0;
    } else if (d.op == 0x4B && mem && d.sib && (d.pp == 3 || d.pp == 1))
        load_tile(d);
    else if (d.op == 0x4B && mem && d.sib && d.pp == 2)
        store_tile(d);
    else if (d.op == 0x5C && d.pp == 2 && !mem)
        dot_bf16(d);
    else
        fail("unsupported AMX form", ip);
    if (d.op != 0x49 || d.pp == 3) ++count;  // tile data: loads, stores, TILEZERO, TDPBF16PS
    g[REG_RIP] += static_cast<greg_t>(d.len);
}

std::atomic<bool> handler_installed{false};

}  // namespace

void install() {
    static const bool ok = [] {
        struct sigaction sa = {};
        sa.sa_sigaction = handler;
        sa.sa_flags = SA_SIGINFO;
        sigemptyset(&sa.sa_mask);
        return sigaction(SIGILL, &sa, nullptr) == 0;
    }();
    if (!ok) abort();
    handler_installed = true;
}

bool installed() {
    return handler_installed;
}

void emulate(void* context) {
    handler(SIGILL, nullptr, context);
}

uint64_t emulated_count() {
    return count;
}

}  // namespace convgrad::amxemu
