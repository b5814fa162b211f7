/* test_gemm.c: every GEMM backend against the reference (gemm_ref.c), plus the reference
 * itself against hand-computed products, the bf16 semantics, batching, threading, the
 * oneDNN primitive cache and BT_GEMM parsing.
 *
 * Tolerances are per element, derived from the data (see elem_bound()):
 *
 *   same precision (backend vs ref with the same `compute`): the ref is exact up to one final
 *   rounding (products of fp32 or bf16 values are exact in double and the sum is in double),
 *   so the backend's error is its own fp32 rounding: summing k exact-or-rounded products in
 *   any order (blocked, split-k, FMA) errs by at most gamma_k * sum_p |a_ip b_pj| with
 *   gamma_k ~= k * 2^-24 (Higham, Accuracy and Stability, 3.1), then alpha, beta*C (+), bias
 *   (+) add at most 4 roundings of 2^-24 relative and the ref's own rounding half of one:
 *       |got - ref| <= (k + 5) * 2^-24 * (|alpha| S + |beta c0| + |bias|),  S = sum_p |a b|
 *   For bf16 compute this also pins the rounding of the operands: the products of bf16
 *   values are exact in fp32 (8 + 8 significant bits), so any other rounding of the operands
 *   (truncation, round-half-up) would show up as errors of order 2^-9 * S, far above the
 *   bound for the k used here (k + 5 <= 305 gives 305 * 2^-24 ~= 2^-15.7).
 *
 *   bf16 compute vs the fp32 ref: rounding an operand to bf16 (8 significant bits, round to
 *   nearest) changes it by at most 2^-8 relative, so each product a*b moves by at most
 *   (2 * 2^-8 + 2^-16) |a b|; over the sum and with alpha that is (2 * 2^-8 + 2^-16) |alpha| S,
 *   plus the fp32 accumulation term above, evaluated with the rounded operands.
 *
 * Outputs are pre-filled: with beta == 0 by the NaN sentinel (proves C is not read: any read
 * would propagate NaN, any unwritten element stays NaN); every element of the C buffer that
 * no product owns (ldc padding, gaps between batch items) must come back bit-identical.
 *
 * Deliberately not here: speed (tests/bench_gemm.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bt_config.h"
#include "kernels/gemm.h"
#include "test_util.h"

#if BT_HAVE_OPENMP
#include <omp.h>
#endif

static tu_rng rng;

/* One test product: geometry and options; buffers are made by run_case(). */
typedef struct tcase {
    int ta, tb;
    size_t m, n, k;
    size_t pad_a, pad_b, pad_c; /* extra row stride beyond the minimum */
    size_t batch;
    /* batch strides; SIZE_MAX = dense (rows * ld), other values used as given (0 broadcasts) */
    size_t sa, sb, sc;
    bt_dtype at, bt;
    gemm_compute compute;
    float alpha, beta;
    int bias;
} tcase;

typedef enum { MODE_SAME, MODE_BF16_VS_F32 } cmp_mode;

#define DENSE ((size_t)-1)

static size_t span(size_t items, size_t stride, size_t rows, size_t ld) {
    return (items - 1) * stride + rows * ld;
}

/* Fills an operand buffer with uniform [-1, 1) values (bf16 buffers get rounded values). */
static void *make_operand(bt_dtype t, size_t n) {
    if (t == BT_DTYPE_F32) {
        float *x = malloc((n ? n : 1) * sizeof *x);
        tu_fill_uniform_f32(&rng, x, n, -1.0f, 1.0f);
        return x;
    }
    bt_bf16 *x = malloc((n ? n : 1) * sizeof *x);
    for (size_t i = 0; i < n; i++) x[i] = bt_bf16_from_f32((float)tu_rng_uniform(&rng, -1.0, 1.0));
    return x;
}

/* Value of an operand element as a product under `compute` uses it. */
static double load(const void *p, bt_dtype t, size_t idx, gemm_compute compute) {
    if (t == BT_DTYPE_BF16) return bt_f32_from_bf16(((const bt_bf16 *)p)[idx]);
    float v = ((const float *)p)[idx];
    if (compute == GEMM_COMPUTE_BF16) v = bt_f32_from_bf16(bt_bf16_from_f32(v));
    return v;
}

/* Sum over p of |op(A)_ip op(B)_pj| with operand values as `compute` sees them. */
static double abs_dot(const gemm_args *g, size_t i, size_t j, gemm_compute compute) {
    double s = 0.0;
    for (size_t p = 0; p < g->k; p++) {
        size_t ia = g->trans_a ? p * g->lda + i : i * g->lda + p;
        size_t ib = g->trans_b ? j * g->ldb + p : p * g->ldb + j;
        s += fabs(load(g->a, g->a_type, ia, compute) * load(g->b, g->b_type, ib, compute));
    }
    return s;
}

static double elem_bound(const gemm_args *g, size_t i, size_t j, float c0, cmp_mode mode) {
    const double u = 0x1p-24;
    double rest = (g->beta != 0.0f ? fabs((double)g->beta * c0) : 0.0) +
                  (g->bias ? fabs((double)g->bias[j]) : 0.0);
    double s_used = abs_dot(g, i, j, g->compute);
    double b = (double)(g->k + 5) * u * (fabs((double)g->alpha) * s_used + rest);
    if (mode == MODE_BF16_VS_F32)
        b += (2.0 * 0x1p-8 + 0x1p-16) * fabs((double)g->alpha) * abs_dot(g, i, j, GEMM_COMPUTE_F32);
    return b;
}

static const char *tname(bt_dtype t) {
    return t == BT_DTYPE_BF16 ? "bf16" : "f32";
}

/* Runs `backend` on tc and compares with the ref (mode MODE_SAME: same compute;
 * MODE_BF16_VS_F32: the ref runs in fp32 on the same operands). Returns 1 on pass. */
static int run_case(gemm_backend backend, const tcase *tc, cmp_mode mode, const char *label) {
    size_t batch = tc->batch ? tc->batch : 1;
    size_t a_rows = tc->ta ? tc->k : tc->m, a_cols = tc->ta ? tc->m : tc->k;
    size_t b_rows = tc->tb ? tc->n : tc->k, b_cols = tc->tb ? tc->k : tc->n;
    size_t lda = a_cols + tc->pad_a, ldb = b_cols + tc->pad_b, ldc = tc->n + tc->pad_c;
    size_t sa = tc->sa == DENSE ? a_rows * lda : tc->sa;
    size_t sb = tc->sb == DENSE ? b_rows * ldb : tc->sb;
    size_t sc = tc->sc == DENSE ? tc->m * ldc : tc->sc;
    size_t na = span(batch, sa, a_rows, lda), nb = span(batch, sb, b_rows, ldb);
    size_t nc = span(batch, sc, tc->m, ldc);
    void *a = make_operand(tc->at, na);
    void *b = make_operand(tc->bt, nb);
    float *bias = NULL;
    if (tc->bias) {
        bias = malloc(tc->n * sizeof *bias);
        tu_fill_uniform_f32(&rng, bias, tc->n, -1.0f, 1.0f);
    }
    float *c0 = malloc(nc * sizeof *c0), *got = malloc(nc * sizeof *got), *want = malloc(nc * sizeof *want);
    unsigned char *owned = calloc(nc, 1);
    if (tc->beta == 0.0f) tu_fill_sentinel_f32(c0, nc);
    else tu_fill_uniform_f32(&rng, c0, nc, -1.0f, 1.0f);
    /* gaps are always sentinel, so a stray write of any value is visible */
    for (size_t bi = 0; bi < batch; bi++)
        for (size_t i = 0; i < tc->m; i++)
            for (size_t j = 0; j < tc->n; j++) owned[bi * sc + i * ldc + j] = 1;
    for (size_t x = 0; x < nc; x++)
        if (!owned[x]) c0[x] = tu_sentinel_f32();
    memcpy(got, c0, nc * sizeof *got);
    memcpy(want, c0, nc * sizeof *want);

    gemm_args g = {
        .trans_a = tc->ta, .trans_b = tc->tb, .m = tc->m, .n = tc->n, .k = tc->k,
        .a_type = tc->at, .b_type = tc->bt, .a = a, .lda = lda, .b = b, .ldb = ldb,
        .c = got, .ldc = ldc, .alpha = tc->alpha, .beta = tc->beta, .bias = bias,
        .compute = tc->compute, .batch = tc->batch, .stride_a = sa, .stride_b = sb, .stride_c = sc,
    };
    gemm_with(backend, &g);
    gemm_args gr = g;
    gr.c = want;
    if (mode == MODE_BF16_VS_F32) {
        BT_ASSERT(tc->at == BT_DTYPE_F32 && tc->bt == BT_DTYPE_F32);
        gr.compute = GEMM_COMPUTE_F32;
    }
    gemm_with(GEMM_BACKEND_REF, &gr);

    double worst = 0.0;
    size_t worst_at = 0, gaps_bad = 0;
    double worst_bound = 0.0;
    for (size_t bi = 0; bi < batch; bi++) {
        gemm_args gi = g; /* item bi, for the bound */
        gi.a = (const char *)a + bi * sa * bt_dtype_size(tc->at);
        gi.b = (const char *)b + bi * sb * bt_dtype_size(tc->bt);
        for (size_t i = 0; i < tc->m; i++) {
            for (size_t j = 0; j < tc->n; j++) {
                size_t x = bi * sc + i * ldc + j;
                double bound = elem_bound(&gi, i, j, c0[x], mode) + 1e-37;
                double err = fabs((double)got[x] - (double)want[x]);
                double r = err / bound;
                if (isnan(r)) r = INFINITY; /* an unwritten (NaN) element is the worst */
                if (r > worst || (r == INFINITY && worst < INFINITY)) {
                    worst = r;
                    worst_at = x;
                    worst_bound = bound;
                }
            }
        }
    }
    for (size_t x = 0; x < nc; x++)
        if (!owned[x] && memcmp(&got[x], &c0[x], sizeof(float)) != 0) gaps_bad++;
    int ok = worst <= 1.0 && gaps_bad == 0;
    tu_check(ok,
             "%s %s %s%s m=%zu n=%zu k=%zu ld+(%zu,%zu,%zu) batch=%zu s=(%zu,%zu,%zu) %s*%s %s "
             "alpha=%g beta=%g bias=%d: worst err/bound %.3g (got %.9g want %.9g bound %.3g "
             "at %zu), untouched-gap writes %zu",
             label, gemm_backend_name(backend), tc->ta ? "T" : "N", tc->tb ? "T" : "N", tc->m,
             tc->n, tc->k, tc->pad_a, tc->pad_b, tc->pad_c, batch, sa, sb, sc, tname(tc->at),
             tname(tc->bt), tc->compute == GEMM_COMPUTE_BF16 ? "bf16-compute" : "f32-compute",
             (double)tc->alpha, (double)tc->beta, tc->bias, worst, (double)got[worst_at],
             (double)want[worst_at], worst_bound, worst_at, gaps_bad);
    free(a);
    free(b);
    free(bias);
    free(c0);
    free(got);
    free(want);
    free(owned);
    return ok;
}

static gemm_backend fast_backends[2];
static int n_fast;

/* The reference itself, against products computed by hand (exact small integers). */
static void test_ref_by_hand(void) {
    /* A = [1 2; 3 4], B = [5 6; 7 8] (row-major).
     * AB   = [1*5+2*7 1*6+2*8; 3*5+4*7 3*6+4*8] = [19 22; 43 50]
     * AᵀB  = [1*5+3*7 1*6+3*8; 2*5+4*7 2*6+4*8] = [26 30; 38 44]
     * ABᵀ  = [1*5+2*6 1*7+2*8; 3*5+4*6 3*7+4*8] = [17 23; 39 53]
     * AᵀBᵀ = (BA)ᵀ, BA = [5+18 10+24; 7+24 14+32] = [23 34; 31 46] -> [23 31; 34 46]
     * With alpha = 2, beta = -1 on C0 = [1 1; 1 1] and bias [10 20]:
     * 2*AB - 1 + bias = [47 63; 95 119]. */
    const float a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8};
    const float want[4][4] = {{19, 22, 43, 50}, {26, 30, 38, 44}, {17, 23, 39, 53}, {23, 31, 34, 46}};
    for (int t = 0; t < 4; t++) {
        float c[4];
        tu_fill_sentinel_f32(c, 4);
        gemm_args g = {.trans_a = t & 1, .trans_b = t >> 1, .m = 2, .n = 2, .k = 2,
                       .a_type = BT_DTYPE_F32, .b_type = BT_DTYPE_F32, .a = a, .lda = 2,
                       .b = b, .ldb = 2, .c = c, .ldc = 2, .alpha = 1, .beta = 0};
        gemm_with(GEMM_BACKEND_REF, &g);
        tu_check(memcmp(c, want[t], sizeof c) == 0, "ref by hand trans_a=%d trans_b=%d: %g %g %g %g",
                 t & 1, t >> 1, c[0], c[1], c[2], c[3]);
    }
    float c[4] = {1, 1, 1, 1};
    const float bias[2] = {10, 20}, want2[4] = {47, 63, 95, 119};
    gemm_args g = {.m = 2, .n = 2, .k = 2, .a_type = BT_DTYPE_F32, .b_type = BT_DTYPE_F32,
                   .a = a, .lda = 2, .b = b, .ldb = 2, .c = c, .ldc = 2, .alpha = 2,
                   .beta = -1, .bias = bias};
    gemm_with(GEMM_BACKEND_REF, &g);
    tu_check(memcmp(c, want2, sizeof c) == 0, "ref by hand alpha/beta/bias: %g %g %g %g", c[0],
             c[1], c[2], c[3]);

    /* bf16 compute: 1 + 2^-8 is the tie between the bf16 neighbours 1 and 1 + 2^-7 and
     * rounds to even (1); 1 + 3*2^-8 is the tie between 1 + 2^-7 and 1 + 2^-6 and rounds to
     * even (1 + 2^-6). With x = [1+2^-8, 1+3*2^-8] and w = [1, -1]:
     *   fp32: (1 + 2^-8) - (1 + 3*2^-8) = -2^-7;   bf16: 1 - (1 + 2^-6) = -2^-6
     * (truncation would give 1 - (1 + 2^-7) = -2^-7, so this separates the roundings). */
    const float x[2] = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f}, w[2] = {1.0f, -1.0f};
    for (int backend = 0; backend < GEMM_BACKEND_COUNT; backend++) {
        if (!gemm_backend_available((gemm_backend)backend)) continue;
        float r32, r16;
        gemm_args h = {.m = 1, .n = 1, .k = 2, .a_type = BT_DTYPE_F32, .b_type = BT_DTYPE_F32,
                       .a = x, .lda = 2, .b = w, .ldb = 1, .c = &r32, .ldc = 1, .alpha = 1};
        gemm_with((gemm_backend)backend, &h);
        h.c = &r16;
        h.compute = GEMM_COMPUTE_BF16;
        gemm_with((gemm_backend)backend, &h);
        tu_check(r32 == -0x1p-7f && r16 == -0x1p-6f,
                 "%s: bf16 compute rounds operands to nearest even (f32 %g want %g, bf16 %g want %g)",
                 gemm_backend_name((gemm_backend)backend), r32, -0x1p-7, r16, -0x1p-6);
    }
}

/* m/n/k mixes of {1, 7, 64, 257, 300}, every transpose combination, padded lds, rotating
 * alpha/beta/bias. */
static void test_sweep_f32(void) {
    static const size_t shapes[][3] = {
        {1, 1, 1},   {7, 1, 300}, {1, 257, 7},   {64, 7, 257},  {257, 300, 1}, {300, 64, 64},
        {7, 257, 300}, {257, 257, 64}, {300, 300, 300}, {64, 300, 7}, {1, 64, 257}, {300, 7, 257},
    };
    static const float alphas[] = {1.0f, 0.5f, -1.25f};
    static const float betas[] = {0.0f, 1.0f, 0.75f, 0.0f};
    static const size_t pads[] = {0, 3, 16};
    int v = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        for (int t = 0; t < 4; t++, v++) {
            tcase tc = {.ta = t & 1, .tb = t >> 1, .m = shapes[s][0], .n = shapes[s][1],
                        .k = shapes[s][2], .pad_a = pads[v % 3], .pad_b = pads[(v + 1) % 3],
                        .pad_c = pads[(v + 2) % 3], .batch = 1, .sa = DENSE, .sb = DENSE,
                        .sc = DENSE, .at = BT_DTYPE_F32, .bt = BT_DTYPE_F32,
                        .compute = GEMM_COMPUTE_F32, .alpha = alphas[v % 3],
                        .beta = betas[v % 4], .bias = (v % 5) < 2};
            for (int f = 0; f < n_fast; f++) run_case(fast_backends[f], &tc, MODE_SAME, "f32");
        }
    }
}

/* The explicitly named cases: beta 0 on a NaN-filled C, beta 1, bias with alpha != 1. */
static void test_named_cases(void) {
    for (int f = 0; f < n_fast; f++) {
        for (int compute = 0; compute < 2; compute++) {
            tcase tc = {.m = 65, .n = 96, .k = 130, .pad_a = 5, .pad_b = 7, .pad_c = 9,
                        .batch = 1, .sa = DENSE, .sb = DENSE, .sc = DENSE, .at = BT_DTYPE_F32,
                        .bt = BT_DTYPE_F32, .compute = (gemm_compute)compute, .alpha = 1.0f};
            tc.beta = 0.0f;
            run_case(fast_backends[f], &tc, MODE_SAME, "beta0-on-NaN");
            tc.beta = 1.0f;
            run_case(fast_backends[f], &tc, MODE_SAME, "beta1");
            tc.beta = 0.0f;
            tc.bias = 1;
            tc.alpha = 0.125f;
            run_case(fast_backends[f], &tc, MODE_SAME, "bias+alpha");
            tc.beta = -0.5f;
            tc.tb = 1;
            run_case(fast_backends[f], &tc, MODE_SAME, "bias+alpha+beta");
            /* plain B with a 4 KiB row stride: oneDNN takes another implementation there */
            tcase al = {.m = 33, .n = 1000, .k = 40, .pad_b = 24, .batch = 1, .sa = DENSE,
                        .sb = DENSE, .sc = DENSE, .at = BT_DTYPE_F32, .bt = BT_DTYPE_F32,
                        .compute = (gemm_compute)compute, .alpha = 1.0f, .beta = 1.0f, .bias = 1};
            run_case(fast_backends[f], &al, MODE_SAME, "ldb-4KiB");
        }
    }
}

/* Long sums without transposes, which the oneDNN backend runs as k chunks of
 * GEMM_SPLIT_K_CHUNK where its fp32 brgemm kernels run (gemm.h gemm_split_k_request; under
 * the AVX2 cap and on the native bf16 route the same cases run whole): a k of whole chunks
 * and one with a short last chunk, beta 0 on NaN, beta 1 and 0.75, bias with alpha != 1,
 * padded rows, fp32 and bf16 compute; with the split on and off, each against the ref
 * within the bound of the whole product. */
static void test_split_k(void) {
    static const size_t ks[] = {3 * GEMM_SPLIT_K_CHUNK, 2 * GEMM_SPLIT_K_CHUNK + 301};
    static const float betas[] = {0.0f, 1.0f, 0.75f};
    for (int on = 1; on >= 0; on--) {
        gemm_split_k_request(on);
        for (size_t s = 0; s < 2; s++)
            for (int c = 0; c < 2; c++) {
                tcase tc = {.m = 37, .n = 96, .k = ks[s], .pad_a = 3, .pad_b = 16 * s,
                            .pad_c = 5, .batch = 1, .sa = DENSE, .sb = DENSE, .sc = DENSE,
                            .at = BT_DTYPE_F32, .bt = c ? BT_DTYPE_BF16 : BT_DTYPE_F32,
                            .compute = (gemm_compute)c, .alpha = s ? 0.5f : 1.0f,
                            .beta = betas[(s + (size_t)c) % 3], .bias = 1};
                for (int f = 0; f < n_fast; f++)
                    run_case(fast_backends[f], &tc, MODE_SAME, on ? "split-k on" : "split-k off");
            }
    }
    gemm_split_k_request(1);
    /* the environment switch: a bad value is an error naming variable and value */
    tu_setenv("BT_GEMM_SPLIT_K", "maybe", 1);
    bt_status st = gemm_init_from_env();
    tu_check(st == BT_ERR_ARG && strstr(bt_error_message(), "BT_GEMM_SPLIT_K") != NULL &&
                 strstr(bt_error_message(), "maybe") != NULL,
             "BT_GEMM_SPLIT_K=maybe is an error naming variable and value: %s",
             bt_error_message());
    tu_setenv("BT_GEMM_SPLIT_K", "off", 1);
    tu_check(gemm_init_from_env() == BT_OK && !gemm_split_k_requested(),
             "BT_GEMM_SPLIT_K=off turns the split off");
    tu_setenv("BT_GEMM_SPLIT_K", "on", 1);
    tu_check(gemm_init_from_env() == BT_OK && gemm_split_k_requested(),
             "BT_GEMM_SPLIT_K=on turns it on");
    tu_unsetenv("BT_GEMM_SPLIT_K");
}

/* Blocked B (gemm.h gemm_pack_b_request): on the native bf16 route a single product with m >=
 * GEMM_PACK_B_MIN_M reorders B into oneDNN's blocked layout and runs the same kernel, so with
 * the reorder on and off the outputs must be the same bits, and within the bound of the ref (on
 * AMX, where AUTO keeps the reorder off, only the bound is claimed). Cases: B bf16 read
 * transposed (a Linear forward), B bf16 plain with padded rows (an input gradient), B fp32
 * rounded first, with bias, alpha, beta 1 and beta 0 on NaN. The implementation name shows the
 * reorder ran, so the comparison is never between two unblocked runs. Where the native route
 * does not exist (no avx512_core_bf16, or oneDNN not built) only the setting and its parsing
 * are checked. */
/* An auto | on | off switch of the native bf16 route (BT_GEMM_PACK_B, BT_GEMM_SPLIT_M): a bad
 * value is an error naming variable and value, each name is read as its mode (0, 1, 2), and
 * once turned on (left on) it is active exactly where native bf16 exists. */
static void check_switch_setting(const char *var, int (*requested)(void), void (*turn_on)(void),
                                 int (*active)(void)) {
    tu_setenv(var, "maybe", 1);
    bt_status st = gemm_init_from_env();
    tu_check(st == BT_ERR_ARG && strstr(bt_error_message(), var) != NULL &&
                 strstr(bt_error_message(), "maybe") != NULL,
             "%s=maybe is an error naming variable and value: %s", var, bt_error_message());
    static const char *const names[3] = {"auto", "on", "off"};
    for (int mode = 0; mode < 3; mode++) {
        tu_setenv(var, names[mode], 1);
        tu_check(gemm_init_from_env() == BT_OK && requested() == mode, "%s=%s is read", var,
                 names[mode]);
    }
    tu_unsetenv(var);
    turn_on();
    tu_check(active() == gemm_cpu_has_bf16(),
             "%s=on is active (%d) exactly where native bf16 exists (%d)", var, active(),
             gemm_cpu_has_bf16());
}

static int pack_b_mode(void) { return (int)gemm_pack_b_requested(); }
static void pack_b_on(void) { gemm_pack_b_request(GEMM_PACK_B_ON); }
static int split_m_mode(void) { return (int)gemm_split_m_requested(); }
static void split_m_on(void) { gemm_split_m_request(GEMM_SPLIT_M_ON); }

/* One single (batch 1) case's operands for running it two ways and comparing the bits: A and
 * B as stored (tc's types, transposes and pads, random), bias (n, random), c0 (m x ldc: random,
 * or NaN sentinels for beta 0) and the two outputs. */
typedef struct two_way {
    size_t lda, ldb, ldc;
    void *a, *b;
    float *bias, *c0, *out[2];
} two_way;

static two_way two_way_make(const tcase *tc) {
    const size_t a_rows = tc->ta ? tc->k : tc->m, a_cols = tc->ta ? tc->m : tc->k;
    const size_t b_rows = tc->tb ? tc->n : tc->k, b_cols = tc->tb ? tc->k : tc->n;
    two_way w = {.lda = a_cols + tc->pad_a, .ldb = b_cols + tc->pad_b, .ldc = tc->n + tc->pad_c};
    w.a = make_operand(tc->at, a_rows * w.lda), w.b = make_operand(tc->bt, b_rows * w.ldb);
    w.bias = malloc(tc->n * sizeof *w.bias), w.c0 = malloc(tc->m * w.ldc * sizeof *w.c0);
    for (int i = 0; i < 2; i++) w.out[i] = malloc(tc->m * w.ldc * sizeof(float));
    tu_fill_uniform_f32(&rng, w.bias, tc->n, -1.0f, 1.0f);
    if (tc->beta == 0.0f) tu_fill_sentinel_f32(w.c0, tc->m * w.ldc);
    else tu_fill_uniform_f32(&rng, w.c0, tc->m * w.ldc, -1.0f, 1.0f);
    return w;
}

static void two_way_free(two_way *w) {
    free(w->a), free(w->b), free(w->bias), free(w->c0), free(w->out[0]), free(w->out[1]);
}

static void test_blocked_b(void) {
    check_switch_setting("BT_GEMM_PACK_B", pack_b_mode, pack_b_on, gemm_pack_b_active);
    if (!gemm_cpu_has_bf16()) {
        printf("# NOTE: blocked B: no native bf16 here; the bitwise cases are NOT RUN\n");
        gemm_pack_b_request(GEMM_PACK_B_AUTO);
        return;
    }
    /* AUTO leaves the reorder off exactly where the ISA has AMX */
    gemm_pack_b_request(GEMM_PACK_B_AUTO);
    const int amx = !gemm_pack_b_active();
    gemm_bf16_route_request(GEMM_BF16_NATIVE);
    /* clang-format off */
    const tcase cases[] = {
        {.tb = 1, .m = GEMM_PACK_B_MIN_M, .n = 200, .k = 96, .batch = 1, .sa = DENSE, .sb = DENSE,
         .sc = DENSE, .at = BT_DTYPE_F32, .bt = BT_DTYPE_BF16, .compute = GEMM_COMPUTE_BF16,
         .alpha = 1.0f, .beta = 0.0f, .bias = 1},
        {.tb = 0, .m = GEMM_PACK_B_MIN_M + 37, .n = 72, .k = 130, .pad_b = 8, .pad_c = 3,
         .batch = 1, .sa = DENSE, .sb = DENSE, .sc = DENSE, .at = BT_DTYPE_BF16,
         .bt = BT_DTYPE_BF16, .compute = GEMM_COMPUTE_BF16, .alpha = 0.5f, .beta = 1.0f,
         .bias = 1},
        {.tb = 0, .m = GEMM_PACK_B_MIN_M + 3, .n = 64, .k = 90, .pad_a = 5, .batch = 1,
         .sa = DENSE, .sb = DENSE, .sc = DENSE, .at = BT_DTYPE_F32, .bt = BT_DTYPE_F32,
         .compute = GEMM_COMPUTE_BF16, .alpha = 1.0f, .beta = 1.0f},
    };
    /* clang-format on */
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const tcase *tc = &cases[ci];
        two_way w = two_way_make(tc);
        const size_t ldc = w.ldc;
        float **out = w.out;
        int blocked_impl[2] = {0, 0};
        char impl_on[128] = "";
        for (int on = 0; on < 2; on++) {
            gemm_pack_b_request(on ? GEMM_PACK_B_ON : GEMM_PACK_B_OFF);
            gemm_release(); /* the choice applies to primitives created from now on */
            memcpy(out[on], w.c0, tc->m * ldc * sizeof(float));
            gemm_args g = {.trans_a = tc->ta, .trans_b = tc->tb, .m = tc->m, .n = tc->n,
                           .k = tc->k, .a_type = tc->at, .b_type = tc->bt, .a = w.a,
                           .lda = w.lda, .b = w.b, .ldb = w.ldb, .c = out[on], .ldc = ldc,
                           .alpha = tc->alpha, .beta = tc->beta, .bias = tc->bias ? w.bias : NULL,
                           .compute = tc->compute, .batch = 1};
            gemm_with(GEMM_BACKEND_ONEDNN, &g);
            blocked_impl[on] = strstr(gemm_onednn_impl_name(&g), "(blocked B)") != NULL;
            if (on) snprintf(impl_on, sizeof impl_on, "%s", gemm_onednn_impl_name(&g));
        }
        tu_check(blocked_impl[1] && !blocked_impl[0],
                 "blocked B case %zu: the reorder runs with the setting on (%d: %s) and not "
                 "off (%d)",
                 ci, blocked_impl[1], impl_on, blocked_impl[0]);
        if (amx) /* session 7 saw other bits with k 3072 on AMX; the bound below still holds */
            printf("# blocked B case %zu: AMX: the same-bits claim is not made (AUTO keeps the "
                   "reorder off there); checked against the ref only\n", ci);
        else
            tu_check(memcmp(out[0], out[1], tc->m * ldc * sizeof(float)) == 0,
                     "blocked B case %zu (%s%s m=%zu n=%zu k=%zu): same bits as B as given", ci,
                     tc->ta ? "T" : "N", tc->tb ? "T" : "N", tc->m, tc->n, tc->k);
        two_way_free(&w);
        /* and against the ref within its bound, blocked (fresh operands) */
        run_case(GEMM_BACKEND_ONEDNN, tc, MODE_SAME, "blocked B");
    }
    /* below GEMM_PACK_B_MIN_M, with A transposed (a weight gradient) and batched, B runs as
     * given (the descriptions are planned, not run: no operand is read) */
    gemm_pack_b_request(GEMM_PACK_B_ON);
    gemm_args plain[3];
    for (int i = 0; i < 3; i++)
        plain[i] = (gemm_args){.trans_b = 1, .m = GEMM_PACK_B_MIN_M, .n = 64, .k = 64,
                               .a_type = BT_DTYPE_F32, .b_type = BT_DTYPE_BF16, .a = plain,
                               .lda = 64, .b = plain, .ldb = 64, .c = (float *)plain, .ldc = 64,
                               .alpha = 1.0f, .compute = GEMM_COMPUTE_BF16, .batch = 1};
    plain[0].m = GEMM_PACK_B_MIN_M - 1;
    plain[1].trans_a = 1;
    plain[1].lda = GEMM_PACK_B_MIN_M;
    plain[2].batch = 2;
    plain[2].stride_a = plain[2].stride_c = GEMM_PACK_B_MIN_M * 64;
    plain[2].stride_b = 64 * 64;
    static const char *const why[3] = {"m below the threshold", "A transposed", "batch 2"};
    for (int i = 0; i < 3; i++)
        tu_check(strstr(gemm_onednn_impl_name(&plain[i]), "(blocked B)") == NULL,
                 "blocked B: %s runs B as given (%s)", why[i], gemm_onednn_impl_name(&plain[i]));
    gemm_pack_b_request(GEMM_PACK_B_AUTO);
    gemm_bf16_route_request(GEMM_BF16_AUTO);
    gemm_release();
}

/* Split M (gemm.h gemm_split_m_request): on the native bf16 route a single product with A
 * transposed, called with two or more threads, runs as one single-threaded product per thread
 * over slices of m (multiples of GEMM_SPLIT_M_ROWS), an fp32 B rounded once before them. Each
 * case must equal, bit for bit, those slices run by hand (each thread's gemm() inside a
 * parallel region, where oneDNN plans single-threaded products and nothing is split): the
 * split ran exactly them. And with the split on and off, each against the ref within the bound
 * of the whole product. Cases: the model's weight-gradient form (bf16, beta 1, k 2600, where
 * the unsplit call sums in another order), an uneven m with padded rows, an fp32 B, alpha,
 * bias and beta 0 on NaN (k 320), fp32 A and B with beta 0.75 (k 1300). With one thread, or
 * without the native route, only the setting is checked (NOT RUN notes). */
static void split_m_by_hand(const gemm_args *g, int nthr) {
    const size_t rows = (g->m + (size_t)nthr - 1) / (size_t)nthr;
    const size_t per = (rows + GEMM_SPLIT_M_ROWS - 1) / GEMM_SPLIT_M_ROWS * GEMM_SPLIT_M_ROWS;
#pragma omp parallel num_threads(nthr)
    {
        const size_t lo = (size_t)omp_get_thread_num() * per;
        if (lo < g->m) {
            gemm_args part = *g;
            part.m = g->m - lo < per ? g->m - lo : per;
            part.a = (const char *)g->a + lo * bt_dtype_size(g->a_type);
            part.c = g->c + lo * g->ldc;
            gemm_with(GEMM_BACKEND_ONEDNN, &part);
        }
    }
}

static void test_split_m(void) {
    check_switch_setting("BT_GEMM_SPLIT_M", split_m_mode, split_m_on, gemm_split_m_active);
    const int nthr = omp_get_max_threads();
    if (!gemm_cpu_has_bf16() || nthr < 2) {
        printf("# NOTE: split M: %s; the by-hand cases are NOT RUN\n",
               nthr < 2 ? "one thread, nothing to split" : "no native bf16 here");
        gemm_split_m_request(GEMM_SPLIT_M_AUTO);
        return;
    }
    gemm_bf16_route_request(GEMM_BF16_NATIVE);
    /* clang-format off */
    const tcase cases[] = {
        {.ta = 1, .m = 768, .n = 200, .k = 2600, .batch = 1, .sa = DENSE, .sb = DENSE,
         .sc = DENSE, .at = BT_DTYPE_BF16, .bt = BT_DTYPE_BF16, .compute = GEMM_COMPUTE_BF16,
         .alpha = 1.0f, .beta = 1.0f},
        {.ta = 1, .m = 2 * GEMM_SPLIT_M_ROWS + 72, .n = 96, .k = 320, .pad_a = 5, .pad_b = 8,
         .pad_c = 3, .batch = 1, .sa = DENSE, .sb = DENSE, .sc = DENSE, .at = BT_DTYPE_BF16,
         .bt = BT_DTYPE_F32, .compute = GEMM_COMPUTE_BF16, .alpha = 0.5f, .beta = 0.0f,
         .bias = 1},
        {.ta = 1, .m = 3 * GEMM_SPLIT_M_ROWS + 1, .n = 64, .k = 1300, .batch = 1, .sa = DENSE,
         .sb = DENSE, .sc = DENSE, .at = BT_DTYPE_F32, .bt = BT_DTYPE_F32,
         .compute = GEMM_COMPUTE_BF16, .alpha = 1.0f, .beta = 0.75f},
    };
    /* clang-format on */
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const tcase *tc = &cases[ci];
        two_way w = two_way_make(tc);
        const size_t ldc = w.ldc;
        float **out = w.out;
        gemm_args g = {.trans_a = 1, .m = tc->m, .n = tc->n, .k = tc->k, .a_type = tc->at,
                       .b_type = tc->bt, .a = w.a, .lda = w.lda, .b = w.b, .ldb = w.ldb,
                       .ldc = ldc, .alpha = tc->alpha, .beta = tc->beta,
                       .bias = tc->bias ? w.bias : NULL, .compute = tc->compute, .batch = 1};
        for (int by_hand = 0; by_hand < 2; by_hand++) {
            memcpy(out[by_hand], w.c0, tc->m * ldc * sizeof(float));
            g.c = out[by_hand];
            if (by_hand) split_m_by_hand(&g, nthr);
            else gemm_with(GEMM_BACKEND_ONEDNN, &g);
        }
        tu_check(memcmp(out[0], out[1], tc->m * ldc * sizeof(float)) == 0,
                 "split M case %zu (m=%zu n=%zu k=%zu, %s x %s, %d threads): the same bits as "
                 "its slices run by hand", ci, tc->m, tc->n, tc->k, tname(tc->at), tname(tc->bt),
                 nthr);
        two_way_free(&w);
        for (int on = 1; on >= 0; on--) { /* and against the ref, split and whole */
            gemm_split_m_request(on ? GEMM_SPLIT_M_ON : GEMM_SPLIT_M_OFF);
            run_case(GEMM_BACKEND_ONEDNN, tc, MODE_SAME, on ? "split M on" : "split M off");
        }
        gemm_split_m_request(GEMM_SPLIT_M_ON);
    }
    gemm_split_m_request(GEMM_SPLIT_M_AUTO);
    gemm_bf16_route_request(GEMM_BF16_AUTO);
    gemm_release();
}

/* Packed weights (gemm.h gemm_pack_weight): a Linear's weight W (out, in) packed in place into
 * oneDNN's blocked layout must give the same bits as W row-major, at the row counts the model
 * runs (1, 8, 40, 320: below GEMM_PACK_B_MIN_M, where oneDNN copies a plain B inside the
 * primitive; 1024 and 2600: Blocked B's per-call reorder), with a bias: bf16 weights (fp32 and
 * bf16 activations, compute BF16) and fp32 weights (compute F32). The packed bytes must differ
 * from the row-major ones and the plan must run without a per-call reorder, so the comparison
 * is never between two plain runs. Packing is refused (0 bytes) with BT_GEMM_PACK_B=off, bf16
 * on the widened route, and where the layout would need padding (the ITM head's 2 x 1536).
 * bf16 cases need the native route with Blocked B (NOT RUN elsewhere, e.g. AMX under AUTO);
 * fp32 cases need oneDNN's fp32 brgemm (ISA avx512_core or better: required there, NOT RUN
 * under the AVX2 cap, where gemm:jit reads B plain and nothing is packed). */
static void packed_weight_cases(bt_dtype type) {
    const int bf16 = type == BT_DTYPE_BF16;
    static const size_t shapes[][2] = {{768, 768}, {3072, 768}, {768, 3072}, {2304, 768},
                                       {192, 96}};
    static const size_t rows[] = {1, 8, 40, 320, GEMM_PACK_B_MIN_M, 2600};
    const size_t max_m = 2600, max_in = 3072, max_out = 3072, es = bt_dtype_size(type);
    float *x = malloc(max_m * max_in * sizeof *x), *bias = malloc(max_out * sizeof *bias);
    bt_bf16 *x16 = malloc(max_m * max_in * sizeof *x16);
    float *c[2] = {malloc(max_m * max_out * sizeof(float)),
                   malloc(max_m * max_out * sizeof(float))};
    tu_fill_uniform_f32(&rng, x, max_m * max_in, -1.0f, 1.0f);
    tu_fill_uniform_f32(&rng, bias, max_out, -1.0f, 1.0f);
    for (size_t i = 0; i < max_m * max_in; i++) x16[i] = bt_bf16_from_f32(x[i]);
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const size_t out = shapes[si][0], in = shapes[si][1];
        void *w = make_operand(type, out * in), *wp = malloc(out * in * es);
        memcpy(wp, w, out * in * es);
        const size_t bytes = gemm_packed_weight_bytes(type, out, in);
        if (!tu_check(bytes == out * in * es, "packed %s weights %zu x %zu: %zu bytes, the "
                      "row-major size", bt_dtype_name(type), out, in, bytes)) {
            free(w);
            free(wp);
            continue;
        }
        gemm_pack_weight(wp, type, out, in);
        tu_check(memcmp(w, wp, out * in * es) != 0,
                 "packed %s weights %zu x %zu: the packed bytes are not the row-major ones",
                 bt_dtype_name(type), out, in);
        for (size_t ri = 0; ri < sizeof rows / sizeof rows[0]; ri++) {
            for (int act16 = 0; act16 < 1 + bf16; act16++) {
                const size_t m = rows[ri];
                for (int packed = 0; packed < 2; packed++) {
                    tu_fill_sentinel_f32(c[packed], m * out);
                    gemm_args g = {.trans_b = 1, .m = m, .n = out, .k = in,
                                   .a_type = act16 ? BT_DTYPE_BF16 : BT_DTYPE_F32,
                                   .a = act16 ? (const void *)x16 : (const void *)x, .lda = in,
                                   .b_type = type, .b = packed ? wp : w, .ldb = in,
                                   .c = c[packed], .ldc = out, .alpha = 1.0f, .bias = bias,
                                   .compute = bf16 ? GEMM_COMPUTE_BF16 : GEMM_COMPUTE_F32,
                                   .b_packed = packed};
                    gemm(&g);
                    /* the plan reads the packed bytes as they lie */
                    if (packed && ri == 0 && !act16)
                        tu_check(strstr(gemm_onednn_impl_name(&g), "(blocked B)") == NULL,
                                 "packed %s weights %zu x %zu: no reorder per call (%s)",
                                 bt_dtype_name(type), out, in, gemm_onednn_impl_name(&g));
                }
                tu_check(memcmp(c[0], c[1], m * out * sizeof(float)) == 0,
                         "packed %s weights: x%s (%zu, %zu) · Wᵀ (%zu, %zu) + b: same bits as "
                         "W row-major", bt_dtype_name(type), act16 ? " bf16" : "", m, in, out,
                         in);
            }
        }
        free(w);
        free(wp);
    }
    free(x);
    free(x16);
    free(bias);
    free(c[0]);
    free(c[1]);
}

static void test_packed_weights(void) {
    const gemm_backend be = gemm_get_backend();
    if (gemm_backend_available(GEMM_BACKEND_ONEDNN)) gemm_set_backend(GEMM_BACKEND_ONEDNN);
    gemm_pack_b_request(GEMM_PACK_B_OFF);
    tu_check(gemm_packed_weight_bytes(BT_DTYPE_BF16, 768, 768) == 0 &&
                 gemm_packed_weight_bytes(BT_DTYPE_F32, 768, 768) == 0,
             "packed weights: none with BT_GEMM_PACK_B=off");
    gemm_pack_b_request(GEMM_PACK_B_AUTO);
    gemm_bf16_route_request(GEMM_BF16_WIDENED);
    tu_check(gemm_packed_weight_bytes(BT_DTYPE_BF16, 768, 768) == 0,
             "packed weights: no bf16 ones on the widened route");
    gemm_bf16_route_request(GEMM_BF16_NATIVE);
    if (gemm_bf16_route_active() == GEMM_BF16_NATIVE && gemm_pack_b_active()) {
        tu_check(gemm_packed_weight_bytes(BT_DTYPE_BF16, 2, 1536) == 0,
                 "packed weights: a 2 x 1536 bf16 weight would need padding: not packed");
        packed_weight_cases(BT_DTYPE_BF16);
    } else {
        tu_check(gemm_packed_weight_bytes(BT_DTYPE_BF16, 768, 768) == 0,
                 "packed weights: no bf16 ones without the native route and Blocked B");
        printf("# NOTE: packed weights: no native bf16 route with Blocked B here (%s); the "
               "bf16 cases are NOT RUN\n", gemm_cpu_isa_name());
    }
    gemm_bf16_route_request(GEMM_BF16_AUTO);
    if (gemm_get_backend() == GEMM_BACKEND_ONEDNN && gemm_split_k_isa()) {
        tu_check(gemm_packed_weight_bytes(BT_DTYPE_F32, 768, 768) > 0,
                 "packed weights: fp32 ones where oneDNN runs fp32 brgemm (%s)",
                 gemm_cpu_isa_name());
        packed_weight_cases(BT_DTYPE_F32);
    } else {
        tu_check(gemm_packed_weight_bytes(BT_DTYPE_F32, 768, 768) == 0,
                 "packed weights: no fp32 ones below oneDNN's avx512_core (gemm:jit reads B "
                 "plain)");
        printf("# NOTE: packed weights: no fp32 brgemm here (%s); the fp32 cases are NOT RUN\n",
               gemm_cpu_isa_name());
    }
    gemm_set_backend(be);
    gemm_release();
}

/* bf16: rounding of fp32 operands, bf16 operands, mixed operands; vs the ref in the same
 * compute precision and vs the fp32 ref. */
static void test_bf16(void) {
    static const size_t shapes[][3] = {
        {7, 64, 257}, {257, 7, 64}, {64, 257, 7}, {300, 300, 300}, {1, 300, 64}, {300, 1, 257},
    };
    static const bt_dtype types[][2] = {
        {BT_DTYPE_F32, BT_DTYPE_F32}, {BT_DTYPE_BF16, BT_DTYPE_BF16},
        {BT_DTYPE_F32, BT_DTYPE_BF16}, {BT_DTYPE_BF16, BT_DTYPE_F32},
    };
    int v = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        for (int t = 0; t < 4; t++, v++) {
            tcase tc = {.ta = t & 1, .tb = t >> 1, .m = shapes[s][0], .n = shapes[s][1],
                        .k = shapes[s][2], .pad_a = (size_t)(v % 3) * 5, .pad_b = (size_t)(v % 2) * 3,
                        .pad_c = (size_t)(v % 4), .batch = 1, .sa = DENSE, .sb = DENSE,
                        .sc = DENSE, .at = types[v % 4][0], .bt = types[v % 4][1],
                        .compute = GEMM_COMPUTE_BF16, .alpha = v % 2 ? 1.0f : 0.75f,
                        .beta = v % 3 ? 0.0f : 1.0f, .bias = v % 2};
            for (int f = 0; f < n_fast; f++) run_case(fast_backends[f], &tc, MODE_SAME, "bf16");
            if (tc.at == BT_DTYPE_F32 && tc.bt == BT_DTYPE_F32)
                for (int f = 0; f < n_fast; f++)
                    run_case(fast_backends[f], &tc, MODE_BF16_VS_F32, "bf16-vs-f32ref");
        }
    }
}

/* bf16 products into a strided C at the attention's shapes (one head's (T, 64) slice of a
 * (T, 768) or (T, 2304) buffer): oneDNN plans gemm:jit for those and gemm_onednn.c runs them
 * on the brgemm kernel into a dense scratch copied into C (reading C first when beta != 0).
 * Same bounds against the ref as any bf16 product; bytes of C outside the product untouched
 * (run_case checks both); with batch items the gaps between items too. Where the CPU has
 * native bf16 the planned implementation is brgemm. */
static void test_bf16_strided_c(void) {
    static const size_t shapes[][4] = {/* m, n, k, pad_c */
                                       {325, 64, 325, 704}, {325, 64, 325, 2240}, {40, 64, 40, 704},
                                       {40, 64, 325, 704}, {325, 64, 40, 704}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        for (int v = 0; v < 4; v++) {
            tcase tc = {.ta = v == 1, .tb = 0, .m = shapes[s][0], .n = shapes[s][1],
                        .k = shapes[s][2], .pad_a = 0, .pad_b = 2240, .pad_c = shapes[s][3],
                        .batch = v == 3 ? 2 : 1, .sa = DENSE, .sb = DENSE, .sc = DENSE,
                        .at = BT_DTYPE_F32, .bt = BT_DTYPE_F32, .compute = GEMM_COMPUTE_BF16,
                        .alpha = v == 2 ? 0.5f : 1.0f, .beta = v >= 1 ? 1.0f : 0.0f,
                        .bias = v == 2};
            if (v == 3) tc.sc = tc.m * (tc.n + tc.pad_c) + 64; /* a gap between the items */
            for (int f = 0; f < n_fast; f++) run_case(fast_backends[f], &tc, MODE_SAME, "bf16-strided-c");
            run_case(GEMM_BACKEND_ONEDNN, &tc, MODE_BF16_VS_F32, "bf16-strided-c-vs-f32ref");
        }
    }
    if (!gemm_backend_available(GEMM_BACKEND_ONEDNN) ||
        gemm_bf16_route_active() != GEMM_BF16_NATIVE)
        return;
    /* the strided C runs the kernel the dense C gets (brgemm where the CPU has AMX or
     * avx512_core_bf16 brgemm), not a slower one */
    static float a[325 * 325], c[325 * 768];
    gemm_args g = {.m = 325, .n = 64, .k = 325, .a_type = BT_DTYPE_F32, .b_type = BT_DTYPE_F32,
                   .a = a, .lda = 325, .b = a, .ldb = 64, .c = c, .ldc = 64, .alpha = 1.0f,
                   .beta = 1.0f, .compute = GEMM_COMPUTE_BF16, .batch = 1};
    char dense[96];
    snprintf(dense, sizeof dense, "%s", gemm_onednn_impl_name(&g));
    g.ldc = 768;
    const char *impl = gemm_onednn_impl_name(&g);
    tu_check(strcmp(impl, dense) == 0,
             "bf16 325x64x325 into C with ldc 768 runs '%s', as with a dense C ('%s')", impl,
             dense);
}

/* Batched products: dense strides with padding, broadcast A or B (stride 0), and the
 * attention layout where heads interleave inside rows (item stride D < row stride C). */
static void test_batched(void) {
    for (int compute = 0; compute < 2; compute++) {
        gemm_compute cp = (gemm_compute)compute;
        for (int t = 0; t < 4; t++) {
            tcase tc = {.ta = t & 1, .tb = t >> 1, .m = 33, .n = 20, .k = 47, .pad_a = 2,
                        .pad_b = 1, .pad_c = 3, .batch = 5, .sa = DENSE, .sb = DENSE, .sc = DENSE,
                        .at = BT_DTYPE_F32, .bt = BT_DTYPE_F32, .compute = cp, .alpha = 0.5f,
                        .beta = t == 2 ? 1.0f : 0.0f, .bias = t == 1};
            for (int f = 0; f < n_fast; f++) run_case(fast_backends[f], &tc, MODE_SAME, "batch-dense");
            /* item strides larger than dense (a gap between items) */
            tcase gap = tc;
            gap.sa = (tc.ta ? tc.k : tc.m) * ((tc.ta ? tc.m : tc.k) + 2) + 11;
            gap.sb = (tc.tb ? tc.n : tc.k) * ((tc.tb ? tc.k : tc.n) + 1) + 5;
            gap.sc = tc.m * (tc.n + 3) + 7;
            for (int f = 0; f < n_fast; f++) run_case(fast_backends[f], &gap, MODE_SAME, "batch-gaps");
            tcase ba = tc;
            ba.sa = 0;
            for (int f = 0; f < n_fast; f++) run_case(fast_backends[f], &ba, MODE_SAME, "batch-bcast-A");
            tcase bb = tc;
            bb.sb = 0;
            bb.at = BT_DTYPE_BF16; /* only meaningful under bf16 compute */
            if (cp == GEMM_COMPUTE_F32) bb.at = BT_DTYPE_F32;
            for (int f = 0; f < n_fast; f++) run_case(fast_backends[f], &bb, MODE_SAME, "batch-bcast-B");
            tcase bab = tc; /* both broadcast: every item the same product, into its own C */
            bab.sa = bab.sb = 0;
            for (int f = 0; f < n_fast; f++) run_case(fast_backends[f], &bab, MODE_SAME, "batch-bcast-AB");
        }
        /* attention scores: Q, K (T, NH*D), per head h: S_h (T, T) = Q_h K_hᵀ / sqrt(D) where
         * Q_h = Q + h*D with row stride NH*D; then the value product O_h = P_h V_h written
         * back into (T, NH*D) at column h*D. T = 37, NH = 4, D = 16. */
        size_t T = 37, NH = 4, D = 16;
        tcase qk = {.ta = 0, .tb = 1, .m = T, .n = T, .k = D, .pad_a = NH * D - D,
                    .pad_b = NH * D - D, .pad_c = 0, .batch = NH, .sa = D, .sb = D, .sc = DENSE,
                    .at = BT_DTYPE_F32, .bt = BT_DTYPE_F32, .compute = cp, .alpha = 0.25f,
                    .beta = 0.0f};
        for (int f = 0; f < n_fast; f++) run_case(fast_backends[f], &qk, MODE_SAME, "attn-scores");
        tcase pv = {.ta = 0, .tb = 0, .m = T, .n = D, .k = T, .pad_a = 0, .pad_b = NH * D - D,
                    .pad_c = NH * D - D, .batch = NH, .sa = DENSE, .sb = D, .sc = D,
                    .at = BT_DTYPE_F32, .bt = BT_DTYPE_F32, .compute = cp, .alpha = 1.0f,
                    .beta = 0.0f};
        for (int f = 0; f < n_fast; f++) run_case(fast_backends[f], &pv, MODE_SAME, "attn-values");
        /* backward of the value product: dP_h = dO_h V_hᵀ, dV_h += P_hᵀ dO_h (beta 1) */
        tcase dv = {.ta = 1, .tb = 0, .m = T, .n = D, .k = T, .pad_a = 0, .pad_b = NH * D - D,
                    .pad_c = NH * D - D, .batch = NH, .sa = DENSE, .sb = D, .sc = D,
                    .at = BT_DTYPE_F32, .bt = BT_DTYPE_F32, .compute = cp, .alpha = 1.0f,
                    .beta = 1.0f};
        for (int f = 0; f < n_fast; f++) run_case(fast_backends[f], &dv, MODE_SAME, "attn-dV");
    }
}

/* Trivial shapes handled in gemm.c for every backend: m == 0 and n == 0 touch nothing,
 * k == 0 gives beta*C + bias (checked against values computed here). */
static void test_degenerate(void) {
    for (int backend = 0; backend < GEMM_BACKEND_COUNT; backend++) {
        if (!gemm_backend_available((gemm_backend)backend)) continue;
        float c[6], c0[6];
        for (int i = 0; i < 6; i++) c[i] = c0[i] = (float)(i + 1);
        const float one = 1.0f, bias[3] = {0.5f, -1.0f, 2.0f};
        gemm_args g = {.m = 0, .n = 3, .k = 4, .a_type = BT_DTYPE_F32, .b_type = BT_DTYPE_F32,
                       .a = &one, .lda = 4, .b = &one, .ldb = 3, .c = c, .ldc = 3, .alpha = 1};
        gemm_with((gemm_backend)backend, &g);
        g.m = 2;
        g.n = 0;
        gemm_with((gemm_backend)backend, &g);
        tu_check(memcmp(c, c0, sizeof c) == 0, "%s: m == 0 and n == 0 write nothing",
                 gemm_backend_name((gemm_backend)backend));
        g.n = 3;
        g.k = 0;
        g.lda = 0;
        g.beta = 2.0f;
        g.bias = bias;
        gemm_with((gemm_backend)backend, &g);
        int ok = 1;
        for (int i = 0; i < 6; i++) ok &= c[i] == 2.0f * c0[i] + bias[i % 3];
        tu_fill_sentinel_f32(c, 6);
        g.beta = 0.0f;
        gemm_with((gemm_backend)backend, &g);
        for (int i = 0; i < 6; i++) ok &= c[i] == bias[i % 3];
        tu_check(ok, "%s: k == 0 gives beta*C + bias, beta 0 does not read C",
                 gemm_backend_name((gemm_backend)backend));
        /* alpha == 0: A and B are not read (BLAS convention), so NaN there does not leak */
        const float nan_ab[12] = {NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN};
        for (int i = 0; i < 6; i++) c[i] = c0[i];
        gemm_args z = {.m = 2, .n = 3, .k = 4, .a_type = BT_DTYPE_F32, .b_type = BT_DTYPE_F32,
                       .a = nan_ab, .lda = 4, .b = nan_ab, .ldb = 3, .c = c, .ldc = 3,
                       .alpha = 0.0f, .beta = 0.5f, .bias = bias};
        gemm_with((gemm_backend)backend, &z);
        ok = 1;
        for (int i = 0; i < 6; i++) ok &= c[i] == 0.5f * c0[i] + bias[i % 3];
        tu_check(ok, "%s: alpha == 0 gives beta*C + bias without reading A, B (NaN there)",
                 gemm_backend_name((gemm_backend)backend));
    }
}

/* A repeated shape reuses the cached primitive; a new shape adds exactly one. */
static void test_cache(void) {
    if (!gemm_backend_available(GEMM_BACKEND_ONEDNN)) return;
    size_t m = 29, n = 31, k = 37;
    float *a = malloc(m * k * sizeof *a), *b = malloc(k * n * sizeof *b), *c = malloc(m * n * sizeof *c);
    tu_fill_uniform_f32(&rng, a, m * k, -1, 1);
    tu_fill_uniform_f32(&rng, b, k * n, -1, 1);
    gemm_args g = {.m = m, .n = n, .k = k, .a_type = BT_DTYPE_F32, .b_type = BT_DTYPE_F32,
                   .a = a, .lda = k, .b = b, .ldb = n, .c = c, .ldc = n, .alpha = 1};
    size_t before = gemm_onednn_cache_size();
    gemm_with(GEMM_BACKEND_ONEDNN, &g);
    size_t after1 = gemm_onednn_cache_size();
    for (int i = 0; i < 5; i++) gemm_with(GEMM_BACKEND_ONEDNN, &g);
    size_t after2 = gemm_onednn_cache_size();
    g.beta = 1.0f; /* a different primitive (sum post-op) */
    gemm_with(GEMM_BACKEND_ONEDNN, &g);
    size_t after3 = gemm_onednn_cache_size();
    tu_check(after1 == before + 1 && after2 == after1 && after3 == after1 + 1,
             "oneDNN cache: new shape +1 (%zu -> %zu), 5 repeats +0 (%zu), beta != 0 +1 (%zu)",
             before, after1, after2, after3);
    printf("# oneDNN impl for %zux%zux%zu f32: %s\n", m, n, k, gemm_onednn_impl_name(&g));
    g.compute = GEMM_COMPUTE_BF16;
    printf("# oneDNN impl for %zux%zux%zu bf16: %s\n", m, n, k, gemm_onednn_impl_name(&g));
    gemm_release();
    tu_check(gemm_onednn_cache_size() == 0, "gemm_release empties the cache");
    /* everything is re-created after a release */
    tcase tc = {.m = 20, .n = 21, .k = 22, .batch = 1, .sa = DENSE, .sb = DENSE, .sc = DENSE,
                .at = BT_DTYPE_F32, .bt = BT_DTYPE_F32, .compute = GEMM_COMPUTE_BF16,
                .alpha = 1.0f};
    run_case(GEMM_BACKEND_ONEDNN, &tc, MODE_SAME, "after-release");
    free(a);
    free(b);
    free(c);
}

/* Concurrent calls from an OpenMP parallel region, same and different shapes per thread. */
static void test_threads(void) {
#if BT_HAVE_OPENMP
    enum { NT = 4, REPS = 3 };
    size_t ms[NT] = {48, 48, 17, 65}, n = 40, k = 72;
    float *a[NT], *b[NT], *got[NT], *want[NT];
    for (int t = 0; t < NT; t++) {
        a[t] = malloc(ms[t] * k * sizeof(float));
        b[t] = malloc(k * n * sizeof(float));
        got[t] = malloc(ms[t] * n * sizeof(float));
        want[t] = malloc(ms[t] * n * sizeof(float));
        tu_fill_uniform_f32(&rng, a[t], ms[t] * k, -1, 1);
        tu_fill_uniform_f32(&rng, b[t], k * n, -1, 1);
    }
    for (int f = 0; f < n_fast; f++) {
        for (int compute = 0; compute < 2; compute++) {
            size_t cache_before = gemm_onednn_cache_size(), cache_mid = 0;
            for (int round = 0; round < 2; round++) {
#pragma omp parallel for num_threads(NT) schedule(static, 1)
                for (int t = 0; t < NT; t++) {
                    gemm_args g = {.m = ms[t], .n = n, .k = k, .a_type = BT_DTYPE_F32,
                                   .b_type = BT_DTYPE_F32, .a = a[t], .lda = k, .b = b[t],
                                   .ldb = n, .c = got[t], .ldc = n, .alpha = 1,
                                   .compute = (gemm_compute)compute};
                    for (int r = 0; r < REPS; r++) {
                        tu_fill_sentinel_f32(got[t], ms[t] * n);
                        gemm_with(fast_backends[f], &g);
                    }
                }
                if (round == 0) cache_mid = gemm_onednn_cache_size();
                for (int t = 0; t < NT; t++) {
                    gemm_args g = {.m = ms[t], .n = n, .k = k, .a_type = BT_DTYPE_F32,
                                   .b_type = BT_DTYPE_F32, .a = a[t], .lda = k, .b = b[t],
                                   .ldb = n, .c = want[t], .ldc = n, .alpha = 1,
                                   .compute = (gemm_compute)compute};
                    gemm_with(GEMM_BACKEND_REF, &g);
                    double worst = 0;
                    for (size_t i = 0; i < ms[t]; i++) {
                        for (size_t j = 0; j < n; j++) {
                            double bound = elem_bound(&g, i, j, 0.0f, MODE_SAME) + 1e-37;
                            double r = fabs((double)got[t][i * n + j] - want[t][i * n + j]) / bound;
                            if (!(r <= worst)) worst = isnan(r) ? INFINITY : r;
                        }
                    }
                    tu_check(worst <= 1.0,
                             "threads: %s %s round %d thread-item %d (%zux%zux%zu): worst "
                             "err/bound %.3g",
                             gemm_backend_name(fast_backends[f]), compute ? "bf16" : "f32", round,
                             t, ms[t], n, k, worst);
                }
            }
            if (fast_backends[f] == GEMM_BACKEND_ONEDNN)
                tu_check(gemm_onednn_cache_size() == cache_mid,
                         "threads: second parallel round creates no primitive (%zu -> %zu -> %zu)",
                         cache_before, cache_mid, gemm_onednn_cache_size());
        }
    }
    for (int t = 0; t < NT; t++) {
        free(a[t]);
        free(b[t]);
        free(got[t]);
        free(want[t]);
    }
#else
    tu_check(1, "threads: NOT RUN (built without OpenMP)");
#endif
}

/* BT_GEMM_BF16: the routes and what bf16 mode requests on each. Explicit GEMM_COMPUTE_BF16
 * calls keep bf16 semantics on every route (native, or widened to fp32 primitives: always so
 * where the ISA lacks native bf16), so the same bounds hold. */
static void test_bf16_widen(void) {
    if (!gemm_backend_available(GEMM_BACKEND_ONEDNN)) return;
    /* the routes are oneDNN's: a BT_GEMM from the environment (the gemm_openblas test setup)
     * would make each gemm_init_from_env below pick another backend */
    char saved_gemm[64] = "";
    if (getenv("BT_GEMM")) snprintf(saved_gemm, sizeof saved_gemm, "%s", getenv("BT_GEMM"));
    tu_unsetenv("BT_GEMM");
    tu_setenv("BT_GEMM_BF16", "fp16", 1);
    bt_status s = gemm_init_from_env();
    tu_check(s == BT_ERR_ARG && strstr(bt_error_message(), "BT_GEMM_BF16") != NULL &&
                 strstr(bt_error_message(), "'fp16'") != NULL,
             "BT_GEMM_BF16=fp16 is an error naming variable and value: %s", bt_error_message());
    /* the AUTO rule: native only when clearly (10%) faster */
    tu_check(gemm_bf16_route_pick(1.0, 2.0) == GEMM_BF16_NATIVE &&
                 gemm_bf16_route_pick(2.0, 1.0) == GEMM_BF16_FP32 &&
                 gemm_bf16_route_pick(1.0, 1.05) == GEMM_BF16_FP32 &&
                 gemm_bf16_route_pick(1.0, 1.2) == GEMM_BF16_NATIVE,
             "gemm_bf16_route_pick: native only when >= 10%% faster");
    /* the AUTO measurement: both routes timed (where the CPU has native bf16), and the route
     * it picked is the one the next primitive is built on */
    tu_setenv("BT_GEMM_BF16", "auto", 1);
    tu_check(gemm_init_from_env() == BT_OK, "BT_GEMM_BF16=auto accepted");
    gemm_release();
    double ns = -1.0, fs = -1.0;
    const int measured = gemm_bf16_route_measure(&ns, &fs);
    tu_check(measured == gemm_cpu_has_bf16(), "AUTO measures exactly where native bf16 exists");
    tu_check(!measured || (ns > 0.0 && fs > 0.0 && ns < 10.0 && fs < 10.0),
             "AUTO measurement: native %.3g s, fp32 %.3g s per 512x3072x768 product", ns, fs);
    const gemm_bf16_route active = gemm_bf16_route_active();
    tu_check(active == (measured ? gemm_bf16_route_pick(ns, fs) : GEMM_BF16_FP32),
             "AUTO keeps the measured pick: %s", gemm_bf16_route_describe());
    const int has = gemm_cpu_has_bf16();
    for (int mode = 0; mode < 4; mode++) {
        static const char *const names[4] = {"native", "fp32", "auto", "widened"};
        /* native falls back to widened (same semantics) without native bf16; AUTO is FP32
         * there (nothing measured) */
        const gemm_bf16_route want[4] = {has ? GEMM_BF16_NATIVE : GEMM_BF16_WIDENED,
                                         GEMM_BF16_FP32, active, GEMM_BF16_WIDENED};
        tu_setenv("BT_GEMM_BF16", names[mode], 1);
        tu_check(gemm_init_from_env() == BT_OK, "BT_GEMM_BF16=%s accepted", names[mode]);
        tu_check(gemm_bf16_route_active() == want[mode], "BT_GEMM_BF16=%s: active route %s",
                 names[mode], gemm_bf16_route_name(gemm_bf16_route_active()));
        tu_check(gemm_bf16_mode_compute() ==
                     (want[mode] == GEMM_BF16_FP32 ? GEMM_COMPUTE_F32 : GEMM_COMPUTE_BF16),
                 "BT_GEMM_BF16=%s: bf16 mode requests %s compute", names[mode],
                 gemm_bf16_mode_compute() == GEMM_COMPUTE_F32 ? "fp32" : "bf16");
        /* backends without native bf16: a pinned bf16 route keeps bf16 semantics, else fp32 */
        tu_check(gemm_set_backend(GEMM_BACKEND_REF) == BT_OK, "select ref");
        const gemm_bf16_route on_ref = gemm_bf16_route_active();
        tu_check(on_ref == (mode == 0 || mode == 3 ? GEMM_BF16_WIDENED : GEMM_BF16_FP32) &&
                     strstr(gemm_bf16_route_describe(), gemm_bf16_route_name(on_ref)) != NULL,
                 "BT_GEMM_BF16=%s on the ref backend: %s", names[mode],
                 gemm_bf16_route_describe());
        tu_check(gemm_set_backend(GEMM_BACKEND_ONEDNN) == BT_OK, "select onednn");
        const int want_widen = want[mode] != GEMM_BF16_NATIVE;
        gemm_release(); /* the choice applies to primitives created from now on */
        tcase tc = {.ta = 1, .tb = 0, .m = 70, .n = 1024, .k = 90, .pad_a = 3, .batch = 1,
                    .sa = DENSE, .sb = DENSE, .sc = DENSE, .at = BT_DTYPE_F32, .bt = BT_DTYPE_F32,
                    .compute = GEMM_COMPUTE_BF16, .alpha = 0.5f, .beta = 1.0f, .bias = 1};
        gemm_args probe = {.trans_a = 1, .m = 70, .n = 1024, .k = 90, .a_type = BT_DTYPE_F32,
                           .b_type = BT_DTYPE_F32, .a = &probe, .lda = 73, .b = &probe,
                           .ldb = 1024, .c = (float *)&probe, .ldc = 1024, .alpha = 0.5f,
                           .beta = 1.0f, .compute = GEMM_COMPUTE_BF16};
        const char *impl = gemm_onednn_impl_name(&probe);
        int widened = strstr(impl, "widened") != NULL;
        tu_check(widened == want_widen, "BT_GEMM_BF16=%s, native bf16 %d: implementation '%s'",
                 names[mode], gemm_cpu_has_bf16(), impl);
        run_case(GEMM_BACKEND_ONEDNN, &tc, MODE_SAME, widened ? "bf16-widen" : "bf16-native");
        run_case(GEMM_BACKEND_ONEDNN, &tc, MODE_BF16_VS_F32, widened ? "bf16-widen-vs-f32ref" : "bf16-native-vs-f32ref");
        tcase mixed = tc;
        mixed.at = BT_DTYPE_BF16;
        mixed.tb = 1;
        mixed.batch = 3;
        mixed.sb = 0;
        run_case(GEMM_BACKEND_ONEDNN, &mixed, MODE_SAME, widened ? "bf16-widen" : "bf16-native");
    }
    tu_check(gemm_bf16_route_from_name("widened", &(gemm_bf16_route){0}) == BT_OK &&
                 strcmp(gemm_bf16_route_name(GEMM_BF16_WIDENED), "widened") == 0,
             "route name widened round-trips");
    tu_unsetenv("BT_GEMM_BF16");
    if (saved_gemm[0]) tu_setenv("BT_GEMM", saved_gemm, 1);
    gemm_init_from_env();
    gemm_release();
}

/* BT_GEMM and the selection API. */
static void test_selection(void) {
    gemm_backend b = GEMM_BACKEND_COUNT;
    tu_check(gemm_backend_from_name("openblas", &b) == BT_OK && b == GEMM_BACKEND_OPENBLAS,
             "gemm_backend_from_name(openblas)");
    for (int i = 0; i < GEMM_BACKEND_COUNT; i++) {
        gemm_backend r;
        tu_check(gemm_backend_from_name(gemm_backend_name((gemm_backend)i), &r) == BT_OK &&
                     r == (gemm_backend)i,
                 "backend name round trip: %s", gemm_backend_name((gemm_backend)i));
    }
    bt_status s = gemm_backend_from_name("OpenBLAS", &b);
    tu_check(s == BT_ERR_ARG && strstr(bt_error_message(), "'OpenBLAS'") != NULL,
             "names are exact (case-sensitive): %s", bt_error_message());

    gemm_backend prev = gemm_get_backend();
    tu_setenv("BT_GEMM", "fastest", 1);
    s = gemm_init_from_env();
    tu_check(s == BT_ERR_ARG && strstr(bt_error_message(), "BT_GEMM") != NULL &&
                 strstr(bt_error_message(), "'fastest'") != NULL && gemm_get_backend() == prev,
             "BT_GEMM=fastest is an error naming variable and value, backend unchanged: %s",
             bt_error_message());
    tu_setenv("BT_GEMM", "ref", 1);
    tu_check(gemm_init_from_env() == BT_OK && gemm_get_backend() == GEMM_BACKEND_REF,
             "BT_GEMM=ref selects ref");
    tu_setenv("BT_GEMM", "onednn", 1);
    s = gemm_init_from_env();
    if (BT_HAVE_ONEDNN)
        tu_check(s == BT_OK && gemm_get_backend() == GEMM_BACKEND_ONEDNN, "BT_GEMM=onednn selects onednn");
    else
        tu_check(s == BT_ERR_UNSUPPORTED && strstr(bt_error_message(), "onednn") != NULL,
                 "BT_GEMM=onednn without oneDNN is an error: %s", bt_error_message());
    tu_unsetenv("BT_GEMM");
    tu_check(gemm_init_from_env() == BT_OK &&
                 gemm_get_backend() == (BT_HAVE_ONEDNN ? GEMM_BACKEND_ONEDNN : GEMM_BACKEND_OPENBLAS),
             "BT_GEMM unset selects the fastest built backend (%s)", gemm_backend_name(gemm_get_backend()));

    /* gemm() runs the selected backend: results are bit-identical to gemm_with() on it */
    size_t m = 50, n = 45, k = 300;
    float *a = malloc(m * k * sizeof *a), *bb = malloc(k * n * sizeof *bb);
    float *c1 = malloc(m * n * sizeof *c1), *c2 = malloc(m * n * sizeof *c2);
    tu_fill_uniform_f32(&rng, a, m * k, -1, 1);
    tu_fill_uniform_f32(&rng, bb, k * n, -1, 1);
    for (int i = 0; i < GEMM_BACKEND_COUNT; i++) {
        if (!gemm_backend_available((gemm_backend)i)) continue;
        gemm_args g = {.m = m, .n = n, .k = k, .a_type = BT_DTYPE_F32, .b_type = BT_DTYPE_F32,
                       .a = a, .lda = k, .b = bb, .ldb = n, .c = c1, .ldc = n, .alpha = 1};
        tu_check(gemm_set_backend((gemm_backend)i) == BT_OK, "gemm_set_backend(%s)",
                 gemm_backend_name((gemm_backend)i));
        gemm(&g);
        g.c = c2;
        gemm_with((gemm_backend)i, &g);
        tu_check(memcmp(c1, c2, m * n * sizeof *c1) == 0, "gemm() runs the selected backend %s",
                 gemm_backend_name((gemm_backend)i));
    }
    gemm_init_from_env();
    free(a);
    free(bb);
    free(c1);
    free(c2);
}

static void test_isa(void) {
    const char *isa = gemm_cpu_isa_name();
    int has = gemm_cpu_has_bf16();
    int named_bf16 = strstr(isa, "bf16") != NULL || strstr(isa, "amx") != NULL;
    printf("# CPU ISA (oneDNN): %s, native bf16: %d, DNNL_MAX_CPU_ISA=%s\n", isa, has,
           getenv("DNNL_MAX_CPU_ISA") ? getenv("DNNL_MAX_CPU_ISA") : "(unset)");
    if (BT_HAVE_ONEDNN) {
        tu_check(has == named_bf16, "gemm_cpu_has_bf16 (%d) agrees with the ISA name %s", has, isa);
        const char *cap = getenv("DNNL_MAX_CPU_ISA");
        if (cap && (strcmp(cap, "AVX2") == 0 || strcmp(cap, "AVX512_CORE") == 0))
            tu_check(has == 0, "DNNL_MAX_CPU_ISA=%s hides native bf16 (reported %d)", cap, has);
#if defined(__GNUC__) && defined(__x86_64__)
        else if (!cap)
            tu_check(has == (__builtin_cpu_supports("avx512bf16") ? 1 : 0),
                     "gemm_cpu_has_bf16 (%d) matches cpuid avx512bf16", has);
#endif
    }
}

int main(void) {
    tu_rng_seed(&rng, 20240611);
    /* Availability is checked, not assumed: a build without oneDNN says so here instead of
     * silently running fewer cases. */
    tu_check(gemm_backend_available(GEMM_BACKEND_REF) && gemm_backend_available(GEMM_BACKEND_OPENBLAS),
             "ref and openblas backends are available");
    tu_check(gemm_backend_available(GEMM_BACKEND_ONEDNN) == BT_HAVE_ONEDNN,
             "oneDNN backend available (%d) iff built with oneDNN (BT_HAVE_ONEDNN=%d)",
             gemm_backend_available(GEMM_BACKEND_ONEDNN), BT_HAVE_ONEDNN);
    if (!BT_HAVE_ONEDNN)
        printf("# NOTE: oneDNN not built: every oneDNN case below is NOT RUN; only openblas is "
               "tested against ref\n");
    fast_backends[n_fast++] = GEMM_BACKEND_OPENBLAS;
    if (gemm_backend_available(GEMM_BACKEND_ONEDNN)) fast_backends[n_fast++] = GEMM_BACKEND_ONEDNN;

    test_isa();
    test_ref_by_hand();
    test_degenerate();
    test_named_cases();
    test_split_k();
    test_sweep_f32();
    test_bf16();
    test_bf16_strided_c();
    test_blocked_b();
    test_split_m();
    test_packed_weights();
    test_batched();
    test_cache();
    test_threads();
    test_bf16_widen();
    test_selection();
    gemm_release();
    return tu_finish();
}
