/* attention_amx_emulated.h: the six AMX tile instructions attention_amx.c uses, written in C,
 * so that its kernels and attention.c's AMX route run and are tested on CPUs without AMX.
 *
 * Only the test build includes this: tests/meson.build compiles the kernels' sources a
 * second time with BT_AMX_EMULATED=1 (attention_amx.c then includes this header, and
 * attention.c lets the emulated tiles run beside oneDNN's avx512_core_bf16) into the library of
 * test_attention_amx_emulated. The product's library always runs the instructions
 * themselves; nothing here is linked into bt's programs.
 *
 * What it models (Intel SDM, "TILELOADD", "TILESTORED", "TILEZERO", "TDPBF16PS"): eight tiles
 * per thread, each rows x colsb bytes as the last loaded palette-1 configuration set them;
 * a load fills the configured rows from memory and zeroes the rest; tdpbf16ps adds, for
 * each row m of C and each dword k of A's row, the two products of the bf16 pair with
 * row k of B's pair at the same column, in the order k = 0, 1, ..., each addition in fp32
 * with round to nearest even, denormal inputs and results flushed to zero. The products of
 * two bf16 values are exact in fp32, so the only roundings are those additions.
 *
 * Within a pair the odd element's product is added first. That is the SDM's order for
 * VDPBF16PS; for TDPBF16PS the intrinsics guide lists the even one first and the SDM sums
 * the two lanes apart, so which order AMX hardware uses is not known here, and the
 * instruction's own bits are tested only where it runs (test_attention_tiles). With this
 * order the emulated products gave the bits of oneDNN's avx512_core_bf16 kernels (vdpbf16ps)
 * in every case test_attention_amx_emulated runs, on the Zen 4 of session 22; with the even
 * element first they differed by up to 6.6e-7 of outputs near 1. So where oneDNN runs at
 * avx512_core_bf16 and the CPU's vdpbf16ps adds random pairs as amx_emulated_pair does (the
 * test checks that first), that test compares bitwise: the pair arithmetic is the same on
 * both sides, and what it checks is that the AMX kernels sum K in oneDNN's order.
 *
 * Deliberately not here: palettes other than 1, the tile configuration's start_row
 * (interrupted loads), any speed. */
#ifndef BT_ATTENTION_AMX_EMULATED_H
#define BT_ATTENTION_AMX_EMULATED_H

#include <stdint.h>
#include <string.h>

#include "status.h"

typedef struct amx_emulated_tile {
    unsigned rows, colsb;
    uint8_t data[16][64];
} amx_emulated_tile;

/* the calling thread's tiles (each OpenMP thread configures its own, as on the hardware) */
static _Thread_local amx_emulated_tile amx_emulated_tiles[8];

/* palette 1: byte 0 the palette, bytes 16 + 2 t the bytes of tile t's rows, 48 + t its rows */
static inline void amx_emulated_loadconfig(const void *config) {
    const uint8_t *c = (const uint8_t *)config;
    BT_ASSERTF(c[0] == 1, "amx emulation: palette %u (only palette 1 is modelled)", c[0]);
    for (int t = 0; t < 8; t++) {
        amx_emulated_tile *x = &amx_emulated_tiles[t];
        x->colsb = (unsigned)c[16 + 2 * t] | (unsigned)c[17 + 2 * t] << 8;
        x->rows = c[48 + t];
        BT_ASSERT(x->rows <= 16 && x->colsb <= 64 && x->colsb % 4 == 0);
        memset(x->data, 0, sizeof x->data);
    }
}

static inline void amx_emulated_zero(int t) {
    memset(amx_emulated_tiles[t].data, 0, sizeof amx_emulated_tiles[t].data);
}

static inline void amx_emulated_loadd(int t, const void *base, long stride) {
    amx_emulated_tile *x = &amx_emulated_tiles[t];
    memset(x->data, 0, sizeof x->data);
    for (unsigned r = 0; r < x->rows; r++)
        memcpy(x->data[r], (const uint8_t *)base + (long)r * stride, x->colsb);
}

static inline void amx_emulated_stored(int t, void *base, long stride) {
    const amx_emulated_tile *x = &amx_emulated_tiles[t];
    for (unsigned r = 0; r < x->rows; r++)
        memcpy((uint8_t *)base + (long)r * stride, x->data[r], x->colsb);
}

/* fp32 with a denormal flushed to a zero of the same sign */
static inline float amx_emulated_flush(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7f800000u) == 0) u &= 0x80000000u;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* bf16 (the high half of an fp32) widened exactly, a denormal input taken as zero */
static inline float amx_emulated_bf16(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, sizeof h);
    const uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, sizeof x);
    return amx_emulated_flush(x);
}

/* acc + the products of the bf16 pairs at a and b (two bf16 each), the odd element first */
static inline float amx_emulated_pair(float acc, const uint8_t *a, const uint8_t *b) {
    for (unsigned e = 2; e-- > 0;)
        acc = amx_emulated_flush(acc + amx_emulated_bf16(a + 2 * e) * amx_emulated_bf16(b + 2 * e));
    return acc;
}

/* C (tile c, fp32) += A (tile a, bf16 pairs) · B (tile b, bf16 pairs in VNNI rows) */
static inline void amx_emulated_dpbf16ps(int c, int a, int b) {
    amx_emulated_tile *tc = &amx_emulated_tiles[c];
    const amx_emulated_tile *ta = &amx_emulated_tiles[a], *tb = &amx_emulated_tiles[b];
    const unsigned K = ta->colsb / 4, N = tc->colsb / 4;
    BT_ASSERT(ta->rows == tc->rows && tb->rows == K && tb->colsb == tc->colsb);
    for (unsigned m = 0; m < tc->rows; m++)
        for (unsigned n = 0; n < N; n++) {
            float acc;
            memcpy(&acc, tc->data[m] + 4 * n, sizeof acc);
            for (unsigned k = 0; k < K; k++)
                acc = amx_emulated_pair(acc, ta->data[m] + 4 * k, tb->data[k] + 4 * n);
            memcpy(tc->data[m] + 4 * n, &acc, sizeof acc);
        }
}

static inline void amx_emulated_release(void) {
    memset(amx_emulated_tiles, 0, sizeof amx_emulated_tiles);
}

#endif
