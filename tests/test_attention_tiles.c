/* test_attention_tiles.c: attention's hand-written bf16 block products on the tile layouts
 * (AMX tiles, src/kernels/attention_amx.h; AVX512-BF16, attention_dpbf16.h) and the attention
 * kernels running on them (attention.c, BT_ATTENTION_PRODUCTS=amx|avx512_bf16).
 *
 *   1. Each kernel the CPU runs, on each operand layout the attention gives it (AMX: A rows
 *      from fp32, A = xᵀ, B VNNI from fp32 and from bf16 rows, B = xᵀ VNNI, C plain or
 *      transposed; AVX512-BF16: the same A rows and B layouts, and A read from the VNNI layout
 *      of Aᵀ, C plain) against a double-precision product of the SAME bf16 operands, on edge
 *      sizes (m, n, k in 1, 5, 16, 17, 32, 33, 40, 64, 325: no multiple of a tile, or exactly
 *      one), alpha 1 and 1/8, beta 0 (C pre-filled with a NaN sentinel, never read) and 1, C
 *      strided with a sentinel border that must survive.
 *   2. attention_forward / attention_backward with the kernel oneDNN's ISA selects (AMX at
 *      avx512_core_amx, AVX512-BF16 at avx512_core_bf16) against the reference (ops_ref.h) at
 *      test_ops_fast's bf16 tolerances, with dropout and a key mask, self and cross shapes of
 *      the model (325x325, 40x325, 325x40, 40x40 at D 64) and odd ones; and bit for bit
 *      against the gemm route (oneDNN's own products of the same blocks).
 *   3. Determinism: the same bits at 1, 2 and 3 threads and run to run.
 *   4. A capped oneDNN ISA selects what runs there (bt-forward --info, a child process).
 * Skipped (77) when the CPU runs neither kernel (no AMX-BF16 granted, no AVX512-BF16).
 *
 * Built a second time as test_attention_amx_emulated (BT_AMX_EMULATED=1, linked with a kernels
 * library whose AMX tile instructions are src/kernels/attention_amx_emulated.h's C versions):
 * 1-3 for the AMX products alone, on any CPU whose AVX-512 runs their packing and whose
 * oneDNN runs the native bf16 route (else skipped, 77). The emulation adds a bf16 pair as
 * vdpbf16ps does (attention_amx_emulated.h), so where oneDNN runs at avx512_core_bf16 and
 * the CPU's vdpbf16ps is seen to add random pairs that way, the bitwise check against the
 * gemm route holds and checks the kernels' K order; elsewhere it is not made (on AMX it is
 * this binary's), and the output says so. 4 needs bt-forward, which runs the real
 * instructions, and is not run.
 *
 * Deliberately not here: gemm's own tests (test_gemm.c), the oneDNN route of attention
 * (test_ops_fast.c runs both routes against the reference). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "kernels/attention_amx.h"
#include "kernels/attention_dpbf16.h"
#include "kernels/gemm.h"
#include "kernels/ops.h"
#include "kernels/ops_ref.h"
#include "test_attention_case.h"
#include "test_util.h"

#ifndef BT_AMX_EMULATED
#define BT_AMX_EMULATED 0
#endif

static tu_rng rng;

#if BT_AMX_EMULATED
#include <immintrin.h>

#include "kernels/attention_amx_emulated.h"

/* 1 when this CPU's vdpbf16ps adds a bf16 pair as the emulation does (amx_emulated_pair),
 * over `n` x 16 random accumulators and pairs: the premise of the bitwise check against
 * oneDNN's avx512_core_bf16 kernels. Requires AVX512-BF16. */
__attribute__((target("avx512f,avx512bf16"))) static int vdpbf16ps_is_emulated_pair(int n) {
    int same = 1;
    for (int t = 0; t < n; t++) {
        float acc[16], got[16], x[32], y[32];
        bt_bf16 a[32], b[32];
        for (int i = 0; i < 16; i++) acc[i] = (float)tu_rng_uniform(&rng, -2, 2);
        for (int i = 0; i < 32; i++)
            x[i] = (float)tu_rng_uniform(&rng, -2, 2), y[i] = (float)tu_rng_uniform(&rng, -2, 2);
        bf16_from_f32(a, x, 32), bf16_from_f32(b, y, 32);
        const __m512 r = _mm512_dpbf16_ps(_mm512_loadu_ps(acc), (__m512bh)_mm512_loadu_si512(a),
                                          (__m512bh)_mm512_loadu_si512(b));
        _mm512_storeu_ps(got, r);
        for (int i = 0; i < 16; i++) {
            const float want = amx_emulated_pair(acc[i], (const uint8_t *)(a + 2 * i),
                                                 (const uint8_t *)(b + 2 * i));
            same &= memcmp(&got[i], &want, sizeof want) == 0;
        }
    }
    return same;
}
#endif

/* 1 where the emulated AMX products are compared with oneDNN's bit for bit (set in main) */
static int emulated_bitwise;

static void *xmalloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) abort();
    return p;
}

static float *rand_f(size_t n, float lo, float hi) {
    float *p = xmalloc(n * sizeof(float));
    tu_fill_uniform_f32(&rng, p, n, lo, hi);
    return p;
}

/* random values that are bf16 already (so rounding them is exact) */
static float *rand_bf16_valued(size_t n) {
    float *p = rand_f(n, -2, 2);
    bt_bf16 *t = xmalloc(n * sizeof(bt_bf16));
    bf16_from_f32(t, p, n);
    f32_from_bf16(p, t, n);
    free(t);
    return p;
}

/* --- 1. the kernel ------------------------------------------------------------------------ */

/* The kernels. */
typedef enum { K_AMX, K_DPBF16 } kernel;

static const char *kernel_name(kernel kn) { return kn == K_AMX ? "amx" : "avx512_bf16"; }

/* The layouts of attention (attention.c): which pack function makes A and B. */
typedef enum {
    L_ROWS_VNNIT, /* S = q kᵀ:  A rows (pack_rows), B = kᵀ (pack_vnni_t) */
    L_ROWS_VNNI,  /* out = P v: A rows, B = v rows (pack_vnni, fp32 source) */
    L_T_VNNI16,   /* AMX dvᵀ = doutᵀ Pd: A = doutᵀ (pack_rows_t), B = Pd (pack_vnni16) */
    L_VNNI16T_VNNI, /* AVX512-BF16 dv = Pdᵀ dout: A read from Pd's VNNI layout (pack_vnni16,
                       bf16), B = dout rows (pack_vnni, fp32 source) */
} layout;

static const char *layout_name(layout l) {
    return l == L_ROWS_VNNIT  ? "A rows, B = x^T vnni"
           : l == L_ROWS_VNNI ? "A rows, B vnni"
           : l == L_T_VNNI16  ? "A = x^T, B vnni from bf16"
                              : "A from the vnni of A^T (bf16), B vnni";
}

/* One product C (m x n) = alpha A B + beta C through layout l, C at stride ldc (c_trans:
 * Cᵀ stored), against the double product of the same bf16 values. */
static void test_product(kernel kn, layout l, size_t m, size_t n, size_t k, float alpha,
                         float beta, int c_trans) {
    const size_t m16 = attention_amx_r16(m), n16 = attention_amx_r16(n);
    const size_t kp = attention_amx_r32(k);
    /* mathematical operands: A (m x k), B (k x n), bf16-valued */
    float *A = rand_bf16_valued(m * k), *B = rand_bf16_valued(k * n);
    /* tile layouts, from the source the attention would have */
    const size_t lda = kp + 32 * (m % 2); /* a row stride wider than kp for odd m */
    const size_t ldt = 2 * m16 + 32 * (m % 2); /* the row stride of Aᵀ's VNNI layout */
    const size_t a_n = m16 * lda > kp / 2 * ldt ? m16 * lda : kp / 2 * ldt;
    bt_bf16 *a = xmalloc(a_n * sizeof(bt_bf16));
    bt_bf16 *b = xmalloc(kp / 2 * 2 * n16 * sizeof(bt_bf16));
    size_t tmp_n = 2 * n16 + attention_amx_rows_t_tmp(m, kp) + attention_amx_vnni_t_tmp(n, kp);
    bt_bf16 *tmp = xmalloc(tmp_n * sizeof(bt_bf16));
    memset(a, 0x7f, a_n * sizeof(bt_bf16)); /* rows [m, m16): finite garbage */
    memset(b, 0xff, kp / 2 * 2 * n16 * sizeof(bt_bf16)); /* NaN: pack must overwrite all */
    if (l == L_VNNI16T_VNNI) {
        bt_bf16 *At16 = xmalloc(k * (m + 3) * sizeof(bt_bf16)); /* Aᵀ's rows at stride m + 3 */
        for (size_t t = 0; t < k; t++)
            for (size_t i = 0; i < m; i++) {
                const float x = A[i * k + t];
                bf16_from_f32(At16 + t * (m + 3) + i, &x, 1);
            }
        attention_amx_pack_vnni16(a, ldt, At16, m + 3, k, m, kp);
        free(At16);
        attention_amx_pack_vnni(b, 2 * n16, B, n, k, n, kp, tmp);
    } else if (l == L_T_VNNI16) {
        float *At = xmalloc(k * m * sizeof(float)); /* the source holds Aᵀ (k x m) */
        for (size_t i = 0; i < m; i++)
            for (size_t j = 0; j < k; j++) At[j * m + i] = A[i * k + j];
        attention_amx_pack_rows_t(a, lda, At, m, k, m, kp, tmp);
        free(At);
        bt_bf16 *B16 = xmalloc(k * (n + 3) * sizeof(bt_bf16)); /* rows at stride n + 3 */
        for (size_t i = 0; i < k; i++) bf16_from_f32(B16 + i * (n + 3), B + i * n, n);
        attention_amx_pack_vnni16(b, 2 * n16, B16, n + 3, k, n, kp);
        free(B16);
    } else {
        attention_amx_pack_rows(a, lda, A, k, m, k, kp);
        if (l == L_ROWS_VNNI) {
            attention_amx_pack_vnni(b, 2 * n16, B, n, k, n, kp, tmp);
        } else {
            float *Bt = xmalloc(n * k * sizeof(float)); /* the source holds Bᵀ (n x k) */
            for (size_t i = 0; i < k; i++)
                for (size_t j = 0; j < n; j++) Bt[j * k + i] = B[i * n + j];
            attention_amx_pack_vnni_t(b, 2 * n16, Bt, k, n, k, kp, tmp);
            free(Bt);
        }
    }
    /* C: rows x cols of the stored matrix at stride ldc = cols + 7, sentinel around */
    const size_t rows = c_trans ? n : m, cols = c_trans ? m : n, ldc = cols + 7;
    const size_t cn = rows * ldc;
    float *c = xmalloc(cn * sizeof(float)), *c0 = rand_f(cn, -4, 4);
    if (beta != 0.0f) memcpy(c, c0, cn * sizeof(float));
    else tu_fill_sentinel_f32(c, cn);
    for (size_t i = 0; i < rows; i++) /* the border of each stored row */
        for (size_t j = cols; j < ldc; j++) c[i * ldc + j] = tu_sentinel_f32();
    if (kn == K_AMX) {
        attention_amx_gemm(c, ldc, c_trans, a, lda, b, 2 * n16, m, n, kp, alpha, beta);
    } else {
        /* the padding of K past its last pair, up to kp, made NaN: the kernel reads only the
         * ceil(k/2) pairs (attention_dpbf16.h), so none of it may reach C */
        const size_t pairs = (k + 1) / 2;
        memset(b + pairs * 2 * n16, 0xff, (kp / 2 - pairs) * 2 * n16 * sizeof(bt_bf16));
        attention_dpbf16_a av = {a, 1, ldt / 2};
        if (l == L_VNNI16T_VNNI) {
            memset(a + pairs * ldt, 0xff, (kp / 2 - pairs) * ldt * sizeof(bt_bf16));
        } else {
            av = (attention_dpbf16_a){a, lda / 2, 1};
            for (size_t i = 0; i < m; i++)
                memset(a + i * lda + 2 * pairs, 0xff, (kp - 2 * pairs) * sizeof(bt_bf16));
        }
        attention_dpbf16_gemm(c, ldc, av, b, 2 * n16, m, n, k, alpha, beta);
    }

    /* Tolerance: tdpbf16ps and vdpbf16ps form each bf16 product exactly (8-bit significands)
     * and add in fp32 with round to nearest: a sum of k terms in some order is within
     * k·2^-24·Σ|a||b| of the exact sum (one rounding per addition, bound γ_k ≈ k·u,
     * u = 2^-24); we allow twice that (2^-23, as the hardware's internal pairing is not
     * documented), plus the scaling by alpha and the add of beta C: 2 more roundings of the
     * result. A wrong index or a missed K block is off by O(Σ|a||b|) and fails by ~1e5x. */
    double worst = 0;
    size_t worst_at = 0, bad = 0, border_bad = 0;
    for (size_t i = 0; i < m; i++)
        for (size_t j = 0; j < n; j++) {
            double s = 0, sabs = 0;
            for (size_t t = 0; t < k; t++) {
                const double p = (double)A[i * k + t] * (double)B[t * n + j];
                s += p, sabs += fabs(p);
            }
            const size_t at = c_trans ? j * ldc + i : i * ldc + j;
            const double cin = beta != 0.0f ? (double)c0[at] : 0.0;
            const double want = (double)alpha * s + cin;
            const double tol = (double)k * ldexp(1.0, -23) * fabs((double)alpha) * sabs +
                               2 * ldexp(1.0, -24) * (fabs(want) + fabs(cin)) + 1e-30;
            const double r = fabs((double)c[at] - want) / tol;
            if (!(r <= 1.0)) bad++;
            if (!(r <= worst)) worst = r, worst_at = at;
        }
    for (size_t i = 0; i < rows; i++)
        for (size_t j = cols; j < ldc; j++) border_bad += !isnan(c[i * ldc + j]);
    tu_check(bad == 0 && border_bad == 0,
             "%s %s m=%zu n=%zu k=%zu alpha=%g beta=%g %s: %zu over tolerance (worst %.3g of "
             "it at %zu), %zu border elements written",
             kernel_name(kn), layout_name(l), m, n, k, alpha, beta, c_trans ? "C^T" : "C", bad,
             worst, worst_at, border_bad);
    free(A), free(B), free(a), free(b), free(tmp), free(c), free(c0);
}

static void test_products(void) {
    static const size_t sizes[][3] = {
        {1, 1, 1},     {5, 17, 33},  {16, 16, 32}, {17, 33, 5},   {32, 32, 64},
        {33, 40, 17},  {40, 40, 64}, {325, 325, 64}, {325, 64, 325}, {40, 325, 64},
        {325, 40, 64}, {64, 325, 40}, {64, 40, 325}, {1, 325, 325}, {325, 1, 64},
    };
    for (int kn = K_AMX; kn <= K_DPBF16; kn++) {
        if (BT_AMX_EMULATED && kn == K_DPBF16) {
            printf("# avx512_bf16 products: in test_attention_tiles (this binary emulates AMX)\n");
            continue;
        }
        if (!(kn == K_AMX ? attention_amx_available() : attention_dpbf16_available())) {
            printf("# %s products: not run (the CPU does not run them)\n",
                   kernel_name((kernel)kn));
            continue;
        }
        /* AMX: C plain and transposed (its dv, dk form); AVX512-BF16: C plain, its dv, dk
         * form reading A from Pd's and dS's VNNI layout */
        static const layout amx[] = {L_ROWS_VNNIT, L_ROWS_VNNI, L_T_VNNI16};
        static const layout dp[] = {L_ROWS_VNNIT, L_ROWS_VNNI, L_VNNI16T_VNNI};
        const layout *ls = kn == K_AMX ? amx : dp;
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
            for (int li = 0; li < 3; li++)
                for (int v = 0; v < 4; v++) { /* (alpha, beta, c_trans) variants */
                    const float alpha = v & 1 ? 0.125f : 1.0f, beta = v & 2 ? 1.0f : 0.0f;
                    const int c_trans =
                        kn == K_AMX && (ls[li] == L_T_VNNI16 ? (v != 3) : (v == 3));
                    test_product((kernel)kn, ls[li], sizes[s][0], sizes[s][1], sizes[s][2],
                                 alpha, beta, c_trans);
                }
    }
}

/* --- 2. attention on the hand-written products vs the reference ------------------------- */


/* the outputs of one forward and backward (gradients by assignment, BT_DX_SET, then a second
 * backward adding onto them, BT_DX_ADD) */
typedef struct {
    float *out, *probs, *gq, *gkv;
} attn_result;

static void attn_run(attn_result *r, const attn_case *a, const float *dout,
                     const bt_dropout *drop, int ref) {
    const size_t C = a->d.NH * a->d.D;
    r->out = xmalloc(a->on * sizeof(float)), r->probs = xmalloc(a->pn * sizeof(float));
    tu_fill_sentinel_f32(r->out, a->on), tu_fill_sentinel_f32(r->probs, a->pn);
    r->gq = xmalloc(a->qn * sizeof(float));
    r->gkv = a->kvn ? xmalloc(a->kvn * sizeof(float)) : NULL;
    tu_fill_sentinel_f32(r->gq, a->qn);
    if (r->gkv) tu_fill_sentinel_f32(r->gkv, a->kvn);
    (ref ? attention_forward_ref : attention_forward)(r->out, r->probs, a->q, a->k, a->v,
                                                      a->key_bias, &a->d, drop, GEMM_COMPUTE_BF16);
    float *dq = r->gq, *dk = r->gkv ? r->gkv : r->gq + C, *dv = r->gkv ? r->gkv + C : r->gq + 2 * C;
    for (int pass = 0; pass < 2; pass++)
        (ref ? attention_backward_ref : attention_backward)(
            dq, dk, dv, dout, r->probs, a->q, a->k, a->v, a->key_bias, &a->d, drop,
            GEMM_COMPUTE_BF16,
            pass ? BT_DX_ADD : BT_DX_SET);
}

static void attn_result_free(attn_result *r) {
    free(r->out), free(r->probs), free(r->gq), free(r->gkv);
}

static double max_abs(const float *x, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fabs(x[i]) > m ? fabs(x[i]) : m;
    return m;
}

/* |got - want| <= rtol (max|want| + |want|) (test_ops_fast's close_f32) */
static void close_f32(const char *name, const float *got, const float *want, size_t n,
                      double rtol) {
    tu_check_close_f32(name, got, want, n, rtol * max_abs(want, n), rtol);
}

static void test_attention(const char *products, const char *label, size_t B, size_t NH,
                           size_t Tq, size_t Tk, size_t D, int self, const bt_dropout *drop) {
    char name[200];
    attn_case a;
    attn_case_init(&a, &rng, B, NH, Tq, Tk, D, self, 1);
    float *dout = rand_f(a.on, -1, 1);
    attn_result f, r, g;
    tu_check(ops_attention_products_select(products), "products '%s' selected", products);
    attn_run(&f, &a, dout, drop, 0);
    attn_run(&r, &a, dout, drop, 1);
    /* test_ops_fast's bf16 tolerances (derived there): every product reads bf16-rounded
     * operands (2^-8 relative per product), chained twice in the forward (S, then P v) with
     * exp turning an absolute score error into a relative one: rtol 2^-5; the backward chains
     * three more products: 2^-4. The fp32 summation order of the AMX products changes results
     * by ~k·2^-24 relative, far below these. The backward here reads each kernel's own probs
     * (both are within the forward's tolerance), so its tolerance covers both. */
    snprintf(name, sizeof name, "attention %s fwd out vs reference %s", products, label);
    close_f32(name, f.out, r.out, a.on, 1.0 / 32);
    snprintf(name, sizeof name, "attention %s fwd probs vs reference %s", products, label);
    close_f32(name, f.probs, r.probs, a.pn, 1.0 / 32);
    snprintf(name, sizeof name, "attention %s bwd dq (or dqkv) vs reference %s", products,
             label);
    close_f32(name, f.gq, r.gq, a.qn, 1.0 / 16);
    if (a.kvn) {
        snprintf(name, sizeof name, "attention %s bwd dkv vs reference %s", products, label);
        close_f32(name, f.gkv, r.gkv, a.kvn, 1.0 / 16);
    }
    /* The oneDNN products of the same blocks: within the same tolerance of the reference, and
     * in fact the same bits: oneDNN 2.6's AMX brgemm sums K in blocks of 32 in order in one
     * accumulator tile, its avx512_core_bf16 brgemm the pairs of K in order in one register,
     * and both apply alpha and beta afterwards, as attention_amx_gemm and
     * attention_dpbf16_gemm do, on the same bf16 operands. A oneDNN that sums in another
     * order fails the bitwise check (the routes then differ by ~k·2^-24 relative, which the
     * tolerances above cover): then this check, not the kernel, is what to change. */
    tu_check(ops_attention_products_select("gemm"), "products 'gemm' selected");
    attn_run(&g, &a, dout, drop, 0);
    double dmax = 0;
    for (size_t i = 0; i < a.on; i++)
        dmax = fabs((double)f.out[i] - g.out[i]) > dmax ? fabs((double)f.out[i] - g.out[i]) : dmax;
    printf("# %s: %s vs gemm products, forward out: largest difference %.3g of max|out| %.3g\n",
           label, products, dmax, max_abs(g.out, a.on));
    if (BT_AMX_EMULATED && !emulated_bitwise) {
        printf("# %s: bitwise equality with the gemm route not checked (emulated tiles; main "
               "says why)\n", label);
    } else {
        snprintf(name, sizeof name,
                 "attention %s = gemm products bitwise (out, probs, grads) %s", products, label);
        tu_check(memcmp(f.out, g.out, a.on * sizeof(float)) == 0 &&
                     memcmp(f.probs, g.probs, a.pn * sizeof(float)) == 0 &&
                     memcmp(f.gq, g.gq, a.qn * sizeof(float)) == 0 &&
                     (!a.kvn || memcmp(f.gkv, g.gkv, a.kvn * sizeof(float)) == 0),
                 "%s", name);
    }
    snprintf(name, sizeof name, "attention gemm fwd out vs reference %s", label);
    close_f32(name, g.out, r.out, a.on, 1.0 / 32);

    /* each gradient alone (the others NULL: the row pass then skips dS, or Pd) is the same
     * bits as with all three: the products are independent of each other (on `products`
     * again: the gemm route just above need not give their bits, e.g. with emulated tiles) */
    tu_check(ops_attention_products_select(products), "products '%s' selected", products);
    {
        const size_t C = a.d.NH * a.d.D;
        float *gq = xmalloc(a.qn * sizeof(float));
        float *gkv = a.kvn ? xmalloc(a.kvn * sizeof(float)) : NULL;
        for (int which = 0; which < 3; which++) {
            tu_fill_sentinel_f32(gq, a.qn);
            if (gkv) tu_fill_sentinel_f32(gkv, a.kvn);
            float *dq = gq, *dk = gkv ? gkv : gq + C, *dv = gkv ? gkv + C : gq + 2 * C;
            const float *fq = f.gq, *fk = f.gkv ? f.gkv : f.gq + C;
            const float *fv = f.gkv ? f.gkv + C : f.gq + 2 * C;
            for (int pass = 0; pass < 2; pass++)
                attention_backward(which == 0 ? dq : NULL, which == 1 ? dk : NULL,
                                   which == 2 ? dv : NULL, dout, f.probs, a.q, a.k, a.v,
                                   a.key_bias, &a.d, drop, GEMM_COMPUTE_BF16,
                                   pass ? BT_DX_ADD : BT_DX_SET);
            const float *got = which == 0 ? dq : which == 1 ? dk : dv;
            const float *want = which == 0 ? fq : which == 1 ? fk : fv;
            const size_t rows = which == 0 ? a.d.B * a.d.Tq : a.d.B * a.d.Tk;
            const size_t ld = which == 0 ? a.d.ldq : which == 1 ? a.d.ldk : a.d.ldv;
            int same = 1;
            for (size_t i = 0; i < rows; i++)
                same &= memcmp(got + i * ld, want + i * ld, C * sizeof(float)) == 0;
            tu_check(same, "attention %s bwd %s alone = with all three, bitwise %s", products,
                     which == 0 ? "dq" : which == 1 ? "dk" : "dv", label);
        }
        /* without probs: each block recomputes P on AMX tiles (ops.h), the same bits */
        tu_fill_sentinel_f32(gq, a.qn);
        if (gkv) tu_fill_sentinel_f32(gkv, a.kvn);
        float *dq = gq, *dk = gkv ? gkv : gq + C, *dv = gkv ? gkv + C : gq + 2 * C;
        for (int pass = 0; pass < 2; pass++)
            attention_backward(dq, dk, dv, dout, NULL, a.q, a.k, a.v, a.key_bias, &a.d, drop,
                               GEMM_COMPUTE_BF16, pass ? BT_DX_ADD : BT_DX_SET);
        tu_check(memcmp(gq, f.gq, a.qn * sizeof(float)) == 0 &&
                     (!a.kvn || memcmp(gkv, f.gkv, a.kvn * sizeof(float)) == 0),
                 "attention %s bwd, P recomputed = P kept, bitwise %s", products, label);
        free(gq), free(gkv);
    }

    /* 3. determinism: 1, 2, 3 threads, and again */
    tu_check(ops_attention_products_select(products), "products '%s' selected", products);
#ifdef _OPENMP
    const int nthr0 = omp_get_max_threads();
    for (int t = 1; t <= 3; t++) {
        omp_set_num_threads(t);
        attn_result x;
        attn_run(&x, &a, dout, drop, 0);
        snprintf(name, sizeof name, "attention %s %d thread(s) = first run, out %s",
                 products, t, label);
        tu_check_bytes_equal(name, x.out, f.out, a.on * sizeof(float));
        snprintf(name, sizeof name, "attention %s %d thread(s) = first run, probs %s",
                 products, t, label);
        tu_check_bytes_equal(name, x.probs, f.probs, a.pn * sizeof(float));
        snprintf(name, sizeof name, "attention %s %d thread(s) = first run, grads %s",
                 products, t, label);
        tu_check(memcmp(x.gq, f.gq, a.qn * sizeof(float)) == 0 &&
                     (!a.kvn || memcmp(x.gkv, f.gkv, a.kvn * sizeof(float)) == 0),
                 "%s", name);
        attn_result_free(&x);
    }
    omp_set_num_threads(nthr0);
#endif
    attn_result_free(&f), attn_result_free(&r), attn_result_free(&g);
    free(dout);
    attn_case_free(&a);
}

/* --- 4. a capped oneDNN ISA keeps the AMX products off ------------------------------------- */

/* `bt-forward --info` under the environment `env_args`: its "attention products" line starts
 * with `want` */
static void check_info(const char *bt_forward, const char *env_args, const char *want) {
    static char out[16384];
    static char err[4096];
    tu_check(tu_run_env_captured(out, sizeof out, err, sizeof err, "%s '%s' --info", env_args,
                                 bt_forward) == 0,
             "bt-forward --info runs (%s)", env_args);
    const char *line = strstr(out, "attention products: ");
    tu_check(line && strncmp(line + strlen("attention products: "), want, strlen(want)) == 0,
             "%s: attention products '%s...' (--info says '%.80s')", env_args, want,
             line ? line : "none");
}

int main(int argc, char **argv) {
    tu_rng_seed(&rng, 20261124);
    const int amx = attention_amx_available(), dp = attention_dpbf16_available();
    if (BT_AMX_EMULATED && !amx) {
        tu_skip("the emulated AMX products' packing needs AVX-512 (F, BW): not on this CPU");
        return tu_finish();
    }
    if (!amx && !dp) {
        tu_skip("the CPU runs neither kernel (no AMX-BF16 granted, no AVX512-BF16)");
        return tu_finish();
    }
    test_products();

    gemm_init_from_env();
    /* the products oneDNN's ISA selects (those whose bits its own kernels give); the emulated
     * AMX products wherever oneDNN runs bf16 products natively */
    const char *isa = gemm_cpu_isa_name();
    const int bf16_isa =
        strcmp(isa, "avx512_core_amx") == 0 || strcmp(isa, "avx512_core_bf16") == 0;
    const char *products = BT_AMX_EMULATED ? (bf16_isa ? "amx" : NULL)
                           : amx && strcmp(isa, "avx512_core_amx") == 0 ? "amx"
                           : dp && strcmp(isa, "avx512_core_bf16") == 0 ? "avx512_bf16"
                                                                         : NULL;
    if (gemm_get_backend() != GEMM_BACKEND_ONEDNN || !products ||
        strcmp(ops_kernels_name(), "fast") != 0) {
        printf("# attention with hand-written products: not run (backend %s, oneDNN ISA %s, "
               "kernels %s)\n",
               gemm_backend_name(gemm_get_backend()), isa, ops_kernels_name());
    } else {
        gemm_bf16_route_request(GEMM_BF16_NATIVE);
        tu_check(gemm_bf16_route_active() == GEMM_BF16_NATIVE, "native bf16 route active");
#if BT_AMX_EMULATED
        /* bitwise against oneDNN's avx512_core_bf16 kernels when their instruction adds a
         * pair as the emulation does (then only the K order can differ) */
        if (strcmp(isa, "avx512_core_bf16") != 0)
            printf("# bitwise equality with the gemm route not checked: oneDNN runs at %s, "
                   "not vdpbf16ps (test_attention_tiles checks it where AMX runs)\n", isa);
        else if (!(emulated_bitwise = vdpbf16ps_is_emulated_pair(256)))
            printf("# bitwise equality with the gemm route not checked: this CPU's vdpbf16ps "
                   "adds a bf16 pair otherwise than the emulation\n");
        else
            printf("# this CPU's vdpbf16ps adds a bf16 pair as the emulation does (4096 random "
                   "cases): the gemm route is compared bit for bit\n");
#endif
        tu_check(ops_attention_threads_select("blocks"), "attention threading 'blocks'");
        char want[32];
        snprintf(want, sizeof want, "%s (", products);
        tu_check(ops_attention_products_select(products) &&
                     strncmp(ops_attention_products_name(), want, strlen(want)) == 0,
                 "products: %s", ops_attention_products_name());
        const bt_dropout drop = {.p = 0.1f, .seed = 2024};
        const char *p = products;
        test_attention(p, "self B1 NH2 T325 D64 masked dropout", 1, 2, 325, 325, 64, 1, &drop);
        test_attention(p, "self B2 NH3 T325 D64 masked", 2, 3, 325, 325, 64, 1, NULL);
        test_attention(p, "cross B2 NH2 Tq40 Tk325 D64 masked dropout", 2, 2, 40, 325, 64, 0,
                       &drop);
        test_attention(p, "cross B2 NH2 Tq325 Tk40 D64 masked dropout", 2, 2, 325, 40, 64, 0,
                       &drop);
        test_attention(p, "self B2 NH12 T40 D64 masked (text)", 2, 12, 40, 40, 64, 1, NULL);
        test_attention(p, "cross B2 NH3 Tq7 Tk33 D8 masked dropout", 2, 3, 7, 33, 8, 0, &drop);
        test_attention(p, "self B1 NH1 T1 D1", 1, 1, 1, 1, 1, 1, &drop);
        test_attention(p, "self B3 NH2 T17 D48 masked dropout", 3, 2, 17, 17, 48, 1, &drop);
        tu_check(!ops_attention_products_select("no-such"), "an unknown products name is refused");
        ops_attention_products_select("auto");
        ops_attention_threads_select("auto");
    }

    if (argc > 1 && !BT_AMX_EMULATED) { /* bt-forward: the --info line, capped and not */
        const char *bin = argv[1];
        if (amx) {
            check_info(bin, "-u BT_ATTENTION_PRODUCTS -u BT_CPU_ISA -u DNNL_MAX_CPU_ISA",
                       "auto (amx");
            check_info(bin, "-u BT_ATTENTION_PRODUCTS -u DNNL_MAX_CPU_ISA BT_CPU_ISA=avx512_bf16",
                       dp ? "auto (avx512_bf16" : "auto (gemm");
            check_info(bin, "BT_ATTENTION_PRODUCTS=amx DNNL_MAX_CPU_ISA=AVX512_CORE_BF16",
                       "amx requested, gemm");
        }
        if (dp) {
            if (!amx)
                check_info(bin, "-u BT_ATTENTION_PRODUCTS -u BT_CPU_ISA -u DNNL_MAX_CPU_ISA",
                           "auto (avx512_bf16");
            check_info(bin, "-u BT_ATTENTION_PRODUCTS -u DNNL_MAX_CPU_ISA BT_CPU_ISA=avx512",
                       "auto (gemm");
            check_info(bin, "BT_ATTENTION_PRODUCTS=avx512_bf16 DNNL_MAX_CPU_ISA=AVX512_CORE",
                       "avx512_bf16 requested, gemm");
            check_info(bin, "-u BT_CPU_ISA -u DNNL_MAX_CPU_ISA BT_ATTENTION_PRODUCTS=gemm", "gemm");
        }
    }
    gemm_release();
    return tu_finish();
}
