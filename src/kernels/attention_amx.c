/* attention_amx.c: attention's bf16 block products on AMX tiles, and the packing of their
 * operands (contract in attention_amx.h).
 *
 * The unit is compiled with the build's baseline flags: the functions that execute AMX or
 * AVX-512 instructions carry target attributes (AMX_TARGET), and nothing here runs them before
 * attention_amx_available() said yes, so the library still loads and runs on any x86-64 CPU.
 *
 * Blocking: C is walked in 32 x 32 blocks (2 x 2 accumulator tiles, tmm0-3), A's two 16-row
 * tiles (tmm4-5) and B's two 16-column tiles (tmm6-7) loaded once per 32-deep step of K and
 * used twice each; a block on the m or n edge uses 1 x 2, 2 x 1 or 1 x 1 tiles. A whole
 * 16 x 16 tile of a plain C = A·B (alpha 1, beta 0, not transposed) is stored straight into
 * C; the others go through a 16 x 16 buffer, from which only the valid rows and columns
 * reach C (alpha, beta, transposed or not). The K order inside a block is fixed (k = 0, 32,
 * 64, ...), so a result depends on the operands and sizes only.
 * Speed: every tile row should be whole cache lines (operands and C 64-byte aligned, row
 * strides multiples of 64 bytes): a row that straddles two lines made a 325 x 64 x 325
 * product 2.5x slower (docs/benchmarks.md, "Session 7: AMX attention products").
 *
 * Emulated tiles (BT_AMX_EMULATED=1, the test build only): the tile instructions below are
 * written as AMX_TILE_* macros, which are the instructions themselves in bt's library and
 * attention_amx_emulated.h's C versions in the library of test_attention_amx_emulated, where
 * attention_amx_available() says yes wherever the packing's AVX-512 runs. So the kernels and
 * attention.c's AMX route are tested on CPUs without AMX; the instructions' own bits are tested
 * where AMX runs (test_attention_tiles).
 *
 * Deliberately not here: the reference (the same products run by gemm(), attention.c and
 * tests/test_attention_tiles.c's double products), anything but bf16 operands. */
#include "kernels/attention_amx.h"

#include <stdint.h>
#include <string.h>

#include "kernels/ops.h"
#include "status.h"

/* gcc 11 and clang 14 are the first with these intrinsics and target names */
#if defined(__x86_64__) && ((defined(__clang__) && __clang_major__ >= 14) ||                  \
                            (defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11))
#define AMX_BUILT 1
#include <immintrin.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>
#define AVX512_TARGET __attribute__((target("avx512f,avx512bw")))
#if BT_AMX_EMULATED
#include "kernels/attention_amx_emulated.h"
#define AMX_TARGET AVX512_TARGET
#define AMX_TILE_LOADCONFIG(cfg) amx_emulated_loadconfig(cfg)
#define AMX_TILE_ZERO(t) amx_emulated_zero(t)
#define AMX_TILE_LOADD(t, base, stride) amx_emulated_loadd(t, base, stride)
#define AMX_TILE_STORED(t, base, stride) amx_emulated_stored(t, base, stride)
#define AMX_TILE_DPBF16PS(c, a, b) amx_emulated_dpbf16ps(c, a, b)
#define AMX_TILE_RELEASE() amx_emulated_release()
#else
#define AMX_TARGET __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw")))
#define AMX_TILE_LOADCONFIG(cfg) _tile_loadconfig(cfg)
#define AMX_TILE_ZERO(t) _tile_zero(t)
#define AMX_TILE_LOADD(t, base, stride) _tile_loadd(t, base, stride)
#define AMX_TILE_STORED(t, base, stride) _tile_stored(t, base, stride)
#define AMX_TILE_DPBF16PS(c, a, b) _tile_dpbf16ps(c, a, b)
#define AMX_TILE_RELEASE() _tile_release()
#endif
#else
#define AMX_BUILT 0
#endif

#if AMX_BUILT

/* --- availability -------------------------------------------------------------------------- */

#define AMX_ARCH_REQ_XCOMP_PERM 0x1023 /* asm/prctl.h */
#define AMX_XFEATURE_XTILEDATA 18

static int amx_ok;
static pthread_once_t amx_once = PTHREAD_ONCE_INIT;

#if BT_AMX_EMULATED
/* the emulated tiles need only what the packing runs */
static void amx_probe(void) {
    __builtin_cpu_init();
    amx_ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
}
#else
static void amx_probe(void) {
    unsigned a, b, c, d;
    __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(0), "c"(0));
    if (a < 7) return;
    __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(7), "c"(0));
    const int tile = (d >> 24) & 1, bf16 = (d >> 22) & 1, avx512bw = (b >> 30) & 1;
    if (!tile || !bf16 || !avx512bw) return;
    /* the OS enables the tile state in XCR0 (bits 17, 18) and AVX-512's (5-7) */
    __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(1), "c"(0));
    if (!((c >> 27) & 1)) return; /* OSXSAVE */
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    const unsigned need = (1u << 17) | (1u << 18) | 0xe0u | 0x6u;
    if ((lo & need) != need) return;
    /* Linux hands out the 8 KiB tile data state only on request (once per process) */
    if (syscall(SYS_arch_prctl, AMX_ARCH_REQ_XCOMP_PERM, AMX_XFEATURE_XTILEDATA) != 0) return;
    amx_ok = 1;
}
#endif

int attention_amx_available(void) {
    pthread_once(&amx_once, amx_probe);
    return amx_ok;
}

/* --- the product --------------------------------------------------------------------------- */

/* palette 1, tiles 0-7 all 16 rows x 64 bytes */
typedef struct amx_config {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_config;

/* c block (rows x cols <= 16 x 16) from acc (16 x 16): alpha acc + beta c */
AVX512_TARGET static void amx_store(float *c, size_t ldc, int c_trans, const float *acc,
                                    size_t rows, size_t cols, float alpha, float beta) {
    float t[16 * 16];
    if (c_trans) { /* C's element (i, j) goes to c[j ldc + i]: write accᵀ */
        for (size_t i = 0; i < 16; i++)
            for (size_t j = 0; j < 16; j++) t[j * 16 + i] = acc[i * 16 + j];
        acc = t;
        const size_t r = rows;
        rows = cols, cols = r;
    }
    const __mmask16 mask = (__mmask16)((1u << cols) - 1u);
    const __m512 va = _mm512_set1_ps(alpha);
    for (size_t i = 0; i < rows; i++) {
        __m512 v = _mm512_mul_ps(va, _mm512_loadu_ps(acc + i * 16));
        if (beta != 0.0f) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask, c + i * ldc));
        _mm512_mask_storeu_ps(c + i * ldc, mask, v);
    }
}

/* 1 when a tile of C (rows x cols) is the accumulator itself, stored with no buffer */
#define AMX_DIRECT(c_trans, alpha, beta, rows, cols)                                           \
    (!(c_trans) && (alpha) == 1.0f && (beta) == 0.0f && (rows) == 16 && (cols) == 16)

/* One C block of mt x nt tiles (1 or 2 each) at tile row i0, tile column j0. The tile numbers
 * of the intrinsics are immediates, so each shape is its own instantiation. */
#define AMX_BLOCK(MT, NT)                                                                      \
    AMX_TARGET static void amx_block_##MT##NT(float *c, size_t ldc, int c_trans,             \
                                              const bt_bf16 *a, size_t lda, const bt_bf16 *b, \
                                              size_t ldb, size_t m, size_t n, size_t kp,       \
                                              size_t i0, size_t j0, float alpha, float beta) { \
        AMX_TILE_ZERO(0);                                                                      \
        if (NT > 1) AMX_TILE_ZERO(1);                                                          \
        if (MT > 1) AMX_TILE_ZERO(2);                                                          \
        if (MT > 1 && NT > 1) AMX_TILE_ZERO(3);                                                \
        const int sa = (int)(lda * sizeof(bt_bf16)), sb = (int)(ldb * sizeof(bt_bf16));       \
        for (size_t k = 0; k < kp; k += 32) {                                                  \
            const bt_bf16 *ak = a + i0 * lda + k, *bk = b + (k / 2) * ldb + 2 * j0;            \
            AMX_TILE_LOADD(4, ak, sa);                                                         \
            AMX_TILE_LOADD(6, bk, sb);                                                         \
            if (NT > 1) AMX_TILE_LOADD(7, bk + 32, sb);                                        \
            AMX_TILE_DPBF16PS(0, 4, 6);                                                        \
            if (NT > 1) AMX_TILE_DPBF16PS(1, 4, 7);                                            \
            if (MT > 1) {                                                                      \
                AMX_TILE_LOADD(5, ak + 16 * lda, sa);                                          \
                AMX_TILE_DPBF16PS(2, 5, 6);                                                    \
                if (NT > 1) AMX_TILE_DPBF16PS(3, 5, 7);                                        \
            }                                                                                  \
        }                                                                                      \
        float acc[16 * 16];                                                                    \
        for (int t = 0; t < MT * NT; t++) {                                                    \
            const size_t ti = (size_t)(t / NT), tj = (size_t)(t % NT);                         \
            const size_t i = i0 + 16 * ti, j = j0 + 16 * tj;                                   \
            const size_t rows = m - i < 16 ? m - i : 16, cols = n - j < 16 ? n - j : 16;       \
            /* C = A B exactly as accumulated: a whole tile goes straight to C */              \
            const int direct = AMX_DIRECT(c_trans, alpha, beta, rows, cols);                   \
            float *dst = direct ? c + i * ldc + j : acc;                                       \
            const int ld = direct ? (int)(ldc * sizeof(float)) : 64;                           \
            if (t == 0) AMX_TILE_STORED(0, dst, ld);                                           \
            if (t == 1) AMX_TILE_STORED(1, dst, ld);                                           \
            if (t == 2) AMX_TILE_STORED(2, dst, ld);                                           \
            if (t == 3) AMX_TILE_STORED(3, dst, ld);                                           \
            if (!direct)                                                                       \
                amx_store(c_trans ? c + j * ldc + i : c + i * ldc + j, ldc, c_trans, acc,      \
                          rows, cols, alpha, beta);                                            \
        }                                                                                      \
    }
/* (2 x 1 would use accumulators 0 and 2 here, stored as 0 and 1: written out below) */
AMX_BLOCK(2, 2)
AMX_BLOCK(1, 2)
AMX_BLOCK(1, 1)
#undef AMX_BLOCK

/* 2 x 1 tiles: accumulators 0 and 2 (A tiles 4, 5; B tile 6) */
AMX_TARGET static void amx_block_21(float *c, size_t ldc, int c_trans, const bt_bf16 *a,
                                    size_t lda, const bt_bf16 *b, size_t ldb, size_t m,
                                    size_t n, size_t kp, size_t i0, size_t j0, float alpha,
                                    float beta) {
    AMX_TILE_ZERO(0);
    AMX_TILE_ZERO(2);
    const int sa = (int)(lda * sizeof(bt_bf16)), sb = (int)(ldb * sizeof(bt_bf16));
    for (size_t k = 0; k < kp; k += 32) {
        const bt_bf16 *ak = a + i0 * lda + k, *bk = b + (k / 2) * ldb + 2 * j0;
        AMX_TILE_LOADD(6, bk, sb);
        AMX_TILE_LOADD(4, ak, sa);
        AMX_TILE_LOADD(5, ak + 16 * lda, sa);
        AMX_TILE_DPBF16PS(0, 4, 6);
        AMX_TILE_DPBF16PS(2, 5, 6);
    }
    float acc[16 * 16];
    for (size_t ti = 0; ti < 2; ti++) {
        const size_t i = i0 + 16 * ti, j = j0;
        const size_t rows = m - i < 16 ? m - i : 16, cols = n - j < 16 ? n - j : 16;
        const int direct = AMX_DIRECT(c_trans, alpha, beta, rows, cols);
        float *dst = direct ? c + i * ldc + j : acc;
        const int ld = direct ? (int)(ldc * sizeof(float)) : 64;
        if (ti == 0) AMX_TILE_STORED(0, dst, ld);
        else AMX_TILE_STORED(2, dst, ld);
        if (!direct)
            amx_store(c_trans ? c + j * ldc + i : c + i * ldc + j, ldc, c_trans, acc, rows, cols,
                      alpha, beta);
    }
}

AMX_TARGET void attention_amx_gemm(float *c, size_t ldc, int c_trans, const bt_bf16 *a,
                                   size_t lda, const bt_bf16 *b, size_t ldb, size_t m,
                                   size_t n, size_t kp, float alpha, float beta) {
    BT_ASSERT(amx_ok);
    BT_ASSERT(kp > 0 && kp % 32 == 0 && lda >= kp && ldb >= 2 * attention_amx_r16(n));
    BT_ASSERT(beta == 0.0f || beta == 1.0f);
    if (m == 0 || n == 0) return;
    amx_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) cfg.colsb[t] = 64, cfg.rows[t] = 16;
    AMX_TILE_LOADCONFIG(&cfg);
    const size_t mt = (m + 15) / 16, nt = (n + 15) / 16;
    for (size_t ti = 0; ti < mt; ti += 2) {
        const int two_m = ti + 1 < mt;
        for (size_t tj = 0; tj < nt; tj += 2) {
            const int two_n = tj + 1 < nt;
            const size_t i0 = 16 * ti, j0 = 16 * tj;
            if (two_m && two_n)
                amx_block_22(c, ldc, c_trans, a, lda, b, ldb, m, n, kp, i0, j0, alpha, beta);
            else if (two_n)
                amx_block_12(c, ldc, c_trans, a, lda, b, ldb, m, n, kp, i0, j0, alpha, beta);
            else if (two_m)
                amx_block_21(c, ldc, c_trans, a, lda, b, ldb, m, n, kp, i0, j0, alpha, beta);
            else
                amx_block_11(c, ldc, c_trans, a, lda, b, ldb, m, n, kp, i0, j0, alpha, beta);
        }
    }
    AMX_TILE_RELEASE();
}

/* --- packing ------------------------------------------------------------------------------- */

/* 16 x 16 dwords: d[j ldd + i] = s[i lds + j] (strides in dwords); unpack within 128-bit
 * lanes, then move 128-bit lanes in two steps */
AVX512_TARGET static void amx_transpose16(uint32_t *d, size_t ldd, const uint32_t *s,
                                          size_t lds) {
    __m512 r[16], t[16];
    for (int i = 0; i < 16; i++) r[i] = _mm512_castsi512_ps(_mm512_loadu_si512(s + i * lds));
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int g = 0; g < 4; g++) {
        r[4 * g] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], 0x44);
        r[4 * g + 1] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], 0xee);
        r[4 * g + 2] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0x44);
        r[4 * g + 3] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0xee);
    }
    for (int h = 0; h < 2; h++)
        for (int j = 0; j < 4; j++) {
            t[8 * h + j] = _mm512_shuffle_f32x4(r[8 * h + j], r[8 * h + 4 + j], 0x88);
            t[8 * h + 4 + j] = _mm512_shuffle_f32x4(r[8 * h + j], r[8 * h + 4 + j], 0xdd);
        }
    for (int j = 0; j < 8; j++) {
        r[j] = _mm512_shuffle_f32x4(t[j], t[8 + j], 0x88);
        r[8 + j] = _mm512_shuffle_f32x4(t[j], t[8 + j], 0xdd);
    }
    for (int j = 0; j < 16; j++) _mm512_storeu_si512(d + j * ldd, _mm512_castps_si512(r[j]));
}

AVX512_TARGET void attention_amx_interleave(bt_bf16 *dst, const bt_bf16 *r0, const bt_bf16 *r1,
                                           size_t n, size_t n16) {
    static const uint16_t lo_idx[32] = {0,  32, 1,  33, 2,  34, 3,  35, 4,  36, 5,
                                        37, 6,  38, 7,  39, 8,  40, 9,  41, 10, 42,
                                        11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
    const __m512i lo = _mm512_loadu_si512(lo_idx);
    const __m512i hi = _mm512_add_epi16(lo, _mm512_set1_epi16(16));
    size_t j = 0;
    for (; j < n16; j += 32) {
        const size_t left = n > j ? n - j : 0;
        const __mmask32 mk = left >= 32 ? ~(__mmask32)0 : (__mmask32)((1u << left) - 1u);
        const __m512i x0 = _mm512_maskz_loadu_epi16(mk, r0 + j);
        const __m512i x1 = r1 ? _mm512_maskz_loadu_epi16(mk, r1 + j) : _mm512_setzero_si512();
        const size_t out = 2 * (n16 - j); /* elements of dst left */
        const __mmask32 m0 = out >= 32 ? ~(__mmask32)0 : (__mmask32)((1u << out) - 1u);
        _mm512_mask_storeu_epi16(dst + 2 * j, m0, _mm512_permutex2var_epi16(x0, lo, x1));
        if (out > 32) {
            const size_t o1 = out - 32;
            const __mmask32 m1 = o1 >= 32 ? ~(__mmask32)0 : (__mmask32)((1u << o1) - 1u);
            _mm512_mask_storeu_epi16(dst + 2 * j + 32, m1, _mm512_permutex2var_epi16(x0, hi, x1));
        }
    }
}

void attention_amx_pack_rows(bt_bf16 *a, size_t lda, const float *x, size_t ldx, size_t rows,
                             size_t k, size_t kp) {
    for (size_t i = 0; i < rows; i++) {
        bf16_from_f32_serial(a + i * lda, x + i * ldx, k);
        memset(a + i * lda + k, 0, (kp - k) * sizeof(bt_bf16));
    }
}

void attention_amx_pack_rows_t(bt_bf16 *a, size_t lda, const float *x, size_t ldx, size_t k,
                               size_t cols, size_t kp, bt_bf16 *tmp) {
    /* x's rows in pairs, interleaved (B VNNI of x: kp/2 rows of cols16 dwords, the pair
     * (x[2r][j], x[2r+1][j]) in dword j of row r), then transposed as dwords: row j of A is
     * dword column j. tmp: (kp/2 rounded to 16) x cols16 dwords, + 2 cols16 bf16 */
    const size_t c16 = attention_amx_r16(cols), r16 = attention_amx_r16(kp / 2);
    bt_bf16 *v = tmp, *row = tmp + 2 * r16 * c16;
    attention_amx_pack_vnni(v, 2 * c16, x, ldx, k, cols, kp, row);
    memset(v + kp / 2 * 2 * c16, 0, (r16 - kp / 2) * 2 * c16 * sizeof(bt_bf16));
    uint32_t *t = (uint32_t *)tmp;
    for (size_t i = 0; i < r16; i += 16)
        for (size_t j = 0; j < c16; j += 16) {
            uint32_t blk[16 * 16]; /* A's rows j..j+15 may be fewer than 16 (cols) */
            amx_transpose16(blk, 16, t + i * c16 + j, c16);
            for (size_t jj = 0; jj < 16 && j + jj < cols; jj++) {
                const size_t n = kp / 2 - i < 16 ? kp / 2 - i : 16;
                memcpy(a + (j + jj) * lda + 2 * i, blk + jj * 16, n * sizeof(uint32_t));
            }
        }
}

void attention_amx_pack_vnni(bt_bf16 *b, size_t ldb, const float *x, size_t ldx, size_t k,
                             size_t n, size_t kp, bt_bf16 *tmp) {
    const size_t n16 = attention_amx_r16(n);
    for (size_t r = 0; r < kp / 2; r++) {
        const size_t i = 2 * r;
        bt_bf16 *r0 = NULL, *r1 = NULL;
        if (i < k) bf16_from_f32_serial(r0 = tmp, x + i * ldx, n);
        if (i + 1 < k) bf16_from_f32_serial(r1 = tmp + n16, x + (i + 1) * ldx, n);
        if (r0) attention_amx_interleave(b + r * ldb, r0, r1, n, n16);
        else memset(b + r * ldb, 0, 2 * n16 * sizeof(bt_bf16));
    }
}

void attention_amx_pack_vnni16(bt_bf16 *b, size_t ldb, const bt_bf16 *x16, size_t ldx,
                               size_t k, size_t n, size_t kp) {
    const size_t n16 = attention_amx_r16(n);
    for (size_t r = 0; r < kp / 2; r++) {
        const size_t i = 2 * r;
        if (i < k)
            attention_amx_interleave(b + r * ldb, x16 + i * ldx,
                                     i + 1 < k ? x16 + (i + 1) * ldx : NULL, n, n16);
        else
            memset(b + r * ldb, 0, 2 * n16 * sizeof(bt_bf16));
    }
}

void attention_amx_pack_vnni_t(bt_bf16 *b, size_t ldb, const float *x, size_t ldx, size_t n,
                               size_t k, size_t kp, bt_bf16 *tmp) {
    /* B's row r holds, for column j, the bf16 pair (x[j][2r], x[j][2r+1]) as one dword: x's
     * rows rounded (n16 x kp bf16 = n16 x kp/2 dwords, rows [n, n16) zero), then transposed
     * as dwords. tmp: n16 x (kp/2 rounded to 16) dwords */
    const size_t n16 = attention_amx_r16(n), w = attention_amx_r16(kp / 2);
    for (size_t j = 0; j < n16; j++) {
        bt_bf16 *row = tmp + j * 2 * w;
        if (j < n) bf16_from_f32_serial(row, x + j * ldx, k);
        memset(row + (j < n ? k : 0), 0, (2 * w - (j < n ? k : 0)) * sizeof(bt_bf16));
    }
    const uint32_t *t = (const uint32_t *)tmp;
    for (size_t r = 0; r < kp / 2; r += 16)
        for (size_t j = 0; j < n16; j += 16) {
            uint32_t blk[16 * 16]; /* B's rows r..r+15 may be fewer than 16 (kp/2) */
            amx_transpose16(blk, 16, t + j * w + r, w);
            for (size_t rr = 0; rr < 16 && r + rr < kp / 2; rr++)
                memcpy(b + (r + rr) * ldb + 2 * j, blk + rr * 16, 16 * sizeof(uint32_t));
        }
}

#else /* !AMX_BUILT */

int attention_amx_available(void) { return 0; }

void attention_amx_gemm(float *c, size_t ldc, int c_trans, const bt_bf16 *a, size_t lda,
                        const bt_bf16 *b, size_t ldb, size_t m, size_t n, size_t kp,
                        float alpha, float beta) {
    (void)c, (void)ldc, (void)c_trans, (void)a, (void)lda, (void)b, (void)ldb, (void)m, (void)n;
    (void)kp, (void)alpha, (void)beta;
    BT_ASSERTF(0, "attention_amx_gemm: this build has no AMX kernels");
}
#define AMX_NO_PACK(...) BT_ASSERTF(0, "attention_amx: this build has no AMX kernels")
void attention_amx_interleave(bt_bf16 *dst, const bt_bf16 *r0, const bt_bf16 *r1, size_t n,
                              size_t n16) {
    (void)dst, (void)r0, (void)r1, (void)n, (void)n16;
    AMX_NO_PACK();
}
void attention_amx_pack_rows(bt_bf16 *a, size_t lda, const float *x, size_t ldx, size_t rows,
                             size_t k, size_t kp) {
    (void)a, (void)lda, (void)x, (void)ldx, (void)rows, (void)k, (void)kp;
    AMX_NO_PACK();
}
void attention_amx_pack_rows_t(bt_bf16 *a, size_t lda, const float *x, size_t ldx, size_t k,
                               size_t cols, size_t kp, bt_bf16 *tmp) {
    (void)a, (void)lda, (void)x, (void)ldx, (void)k, (void)cols, (void)kp, (void)tmp;
    AMX_NO_PACK();
}
void attention_amx_pack_vnni(bt_bf16 *b, size_t ldb, const float *x, size_t ldx, size_t k,
                             size_t n, size_t kp, bt_bf16 *tmp) {
    (void)b, (void)ldb, (void)x, (void)ldx, (void)k, (void)n, (void)kp, (void)tmp;
    AMX_NO_PACK();
}
void attention_amx_pack_vnni16(bt_bf16 *b, size_t ldb, const bt_bf16 *x16, size_t ldx,
                               size_t k, size_t n, size_t kp) {
    (void)b, (void)ldb, (void)x16, (void)ldx, (void)k, (void)n, (void)kp;
    AMX_NO_PACK();
}
void attention_amx_pack_vnni_t(bt_bf16 *b, size_t ldb, const float *x, size_t ldx, size_t n,
                               size_t k, size_t kp, bt_bf16 *tmp) {
    (void)b, (void)ldb, (void)x, (void)ldx, (void)n, (void)k, (void)kp, (void)tmp;
    AMX_NO_PACK();
}
#undef AMX_NO_PACK

#endif
