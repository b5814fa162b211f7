/* test_ops_fast.c: every public (dispatched, fast) kernel of ops.h against its float
 * reference X_ref (ops_ref.h), forward and backward, on random shapes that include 1, 7, 257
 * and sizes that are no multiple of 8/16/64 (rows 1, 7, 257; C 1, 7, 33, 257, 768), plus
 * the fp32 <-> bf16 conversions bit for bit and a few properties (determinism, thread-count
 * independence, in-place forms, dispatch switch).
 *
 * Outputs are pre-filled with tu_fill_sentinel_f32 (a NaN): an element a kernel forgot to
 * write fails. Gradients are pre-filled with the same random values in both runs, since
 * backward accumulates (BT_DX_ADD). The kernels that take a bt_dx_mode are also run with
 * BT_DX_SET into the sentinel, fast and reference alike, which must give exactly the bytes
 * of BT_DX_ADD onto a zeroed dx (ops.h; dout holds -0 and +0 so the sign of zero is checked);
 * the one exception ops.h makes, linear's dx on the native bf16 route, within the bound of two
 * summation orders (dx_modes_check_linear_native).
 *
 * Tolerances for fp32 fast vs reference (|a-b| <= atol + rtol |b|):
 *   The reference accumulates in double and rounds once; the fast kernel sums in float in
 *   another order (OPS_LANES partial sums, GEMM blocking) and evaluates exp/erfc by
 *   polynomials accurate to a few ulps. A float sum of k terms is off by at most ~k·u·Σ|t|
 *   (u = 6e-8), and with 16 partial sums the dependent chain is k ≲ 3072/16 + 16 ≈ 210
 *   additions for the widest row here, so ~1.3e-5 in the worst case and ~√k·u ≈ 1e-6
 *   typically, relative to the magnitude of the summed terms. Results that cancel (a
 *   gradient near zero) are small compared with their terms, so atol is scaled to the
 *   magnitude of the output: atol = RTOL_F32 · max|ref|, rtol = RTOL_F32 = 2e-5. A real bug
 *   (wrong index, missed row, wrong formula) is off by O(1) relative and fails by 1e4x.
 *
 * Deliberately not here: finite differences (test_ops_grad.c), speed (bench_ops.c). */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "kernels/ops.h"
#include "kernels/ops_ref.h"
#include "test_attention_case.h"
#include "test_util.h"

#define RTOL_F32 2e-5

static tu_rng rng;

static float *fvec(size_t n) {
    float *p = malloc((n ? n : 1) * sizeof(float));
    if (!p) abort();
    return p;
}

static float *rand_f(size_t n, float lo, float hi) {
    float *p = fvec(n);
    tu_fill_uniform_f32(&rng, p, n, lo, hi);
    return p;
}

static float *sentinel_f(size_t n) {
    float *p = fvec(n);
    tu_fill_sentinel_f32(p, n);
    return p;
}

static float *copy_f(const float *x, size_t n) {
    float *p = fvec(n);
    memcpy(p, x, n * sizeof(float));
    return p;
}

static double max_abs(const float *x, size_t n) {
    double m = 0.0;
    for (size_t i = 0; i < n; i++)
        if (fabs((double)x[i]) > m) m = fabs((double)x[i]);
    return m;
}

/* dx of one backward in both modes (ops.h bt_dx_mode), for the fast kernel ([0]) and its
 * reference ([1]): add = BT_DX_ADD onto zeros, set = BT_DX_SET into the sentinel (a kernel
 * that read dx, or left an element unwritten, leaves NaN). */
typedef struct {
    float *add[2], *set[2];
    size_t n;
} dx_modes;

static dx_modes dx_modes_new(size_t n) {
    dx_modes d = {.n = n};
    for (int v = 0; v < 2; v++) {
        d.add[v] = fvec(n), d.set[v] = sentinel_f(n);
        memset(d.add[v], 0, n * sizeof(float));
    }
    return d;
}

/* set must be add, byte for byte (0 + v in both; -0 + +0 = +0), for both kernels; frees. */
static void dx_modes_check(const char *name, dx_modes *d) {
    static const char *const who[2] = {"fast", "ref"};
    for (int v = 0; v < 2; v++) {
        char label[320];
        snprintf(label, sizeof label, "%s %s: BT_DX_SET = BT_DX_ADD onto zeros, bitwise", name,
                 who[v]);
        tu_check_bytes_equal(label, d->set[v], d->add[v], d->n * sizeof(float));
        free(d->add[v]), free(d->set[v]);
    }
}

/* linear's dx on the native bf16 route (ops.h bt_dx_mode): oneDNN's AMX kernels may sum over
 * K in another order with beta 0 than with beta 1, so the fast kernel's SET is checked against
 * its ADD onto zeros within the bound of two orders of one sum: each float sum of the k exact
 * products of bf16 values errs by at most gamma_k Σ|dout w| (Higham 3.1, gamma_k ~ k 2^-24),
 * so |set - add| <= 2 k 2^-24 Σ_p |bf16(dout_ip) bf16(w_pj)|; where add is a zero, set must be
 * the same bytes (the sums start from +0, never -0). The reference stays bitwise. The message
 * says how many elements differ in bits (0 is fine too); frees like dx_modes_check.
 * dout (n, oc), w (oc, c) as linear_backward got them. */
static void dx_modes_check_linear_native(const char *name, dx_modes *d, const float *dout,
                                           const float *w, size_t n, size_t c, size_t oc) {
    size_t bad = 0, differ = 0, worst_at = 0;
    double worst = 0.0;
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < c; j++) {
            const size_t e = i * c + j;
            const float set = d->set[0][e], add = d->add[0][e];
            if (memcmp(&set, &add, sizeof set) == 0) continue;
            differ++;
            double s = 0.0;
            for (size_t p = 0; p < oc; p++)
                s += fabs((double)bt_f32_from_bf16(bt_bf16_from_f32(dout[i * oc + p])) *
                          bt_f32_from_bf16(bt_bf16_from_f32(w[p * c + j])));
            const double r = fabs((double)set - add) / (2.0 * (double)oc * 0x1p-24 * s);
            if (add == 0.0f || !(r <= 1.0)) bad++;
            if (!(r <= worst)) worst = r, worst_at = e;
        }
    char label[320];
    snprintf(label, sizeof label, "%s fast: BT_DX_SET = BT_DX_ADD onto zeros within 2 k 2^-24 "
             "sum|dout w| (native bf16 route)", name);
    tu_check(bad == 0, "%s: %zu of %zu elements differ in bits, worst diff/bound %.3g at %zu, "
             "%zu out of bound or a zero changed", label, differ, n * c, worst, worst_at, bad);
    snprintf(label, sizeof label, "%s ref: BT_DX_SET = BT_DX_ADD onto zeros, bitwise", name);
    tu_check_bytes_equal(label, d->set[1], d->add[1], d->n * sizeof(float));
    for (int v = 0; v < 2; v++) free(d->add[v]), free(d->set[v]);
}

/* ops_blocks.h's ops_bf16_native: the route where linear's SET is not bitwise ADD onto zeros */
static int linear_native_route(gemm_compute compute) {
    return compute == GEMM_COMPUTE_BF16 && gemm_get_backend() == GEMM_BACKEND_ONEDNN &&
           gemm_bf16_route_active() == GEMM_BF16_NATIVE;
}

/* A copy of dout with signed zeros at its start: -0, +0 (the sign rule of BT_DX_SET). */
static float *signed_zeros(const float *dout, size_t n) {
    float *g = copy_f(dout, n);
    if (n > 0) g[0] = -0.0f;
    if (n > 1) g[1] = 0.0f;
    return g;
}

/* fast vs reference with the magnitude-scaled tolerance of the header comment */
static int close_f32(const char *name, const float *got, const float *want, size_t n, double rtol) {
    return tu_check_close_f32(name, got, want, n, rtol * max_abs(want, n), rtol);
}

static const size_t ROWS[] = {1, 7, 257};
static const size_t COLS[] = {1, 7, 33, 257, 768};
#define NROWS (sizeof ROWS / sizeof ROWS[0])
#define NCOLS (sizeof COLS / sizeof COLS[0])

/* --- layernorm ------------------------------------------------------------------------------ */

/* layernorm_backward_residual, dx = res + LN'(dout) (BT_DX_SET) or (dx + res) + LN'(dout)
 * (BT_DX_ADD): for each kernel (fast, ref) byte for byte the two passes it replaces, res
 * copied into dx (SET; dx pre-filled by a sentinel) or added by residual_backward (ADD; dx
 * random with -0 at its start), then layernorm_backward(BT_DX_ADD) (dx, dw, db; res with
 * signed zeros at its start), SET also with dx aliasing res; and fast against ref with the
 * tolerance of the header comment. */
static void test_layernorm_residual(const float *x, const float *w, const float *mean,
                                    const float *rstd, const float *dout, size_t n, size_t c) {
    typedef void (*ln_res_fn)(float *, float *, float *, const float *, const float *,
                              const float *, const float *, const float *, const float *,
                              size_t, size_t, bt_dx_mode);
    typedef void (*ln_bwd_fn)(float *, float *, float *, const float *, const float *,
                              const float *, const float *, const float *, size_t, size_t,
                              bt_dx_mode);
    typedef void (*res_bwd_fn)(float *, float *, const float *, size_t, bt_dx_mode);
    static const ln_res_fn fused[2] = {layernorm_backward_residual,
                                       layernorm_backward_residual_ref};
    static const ln_bwd_fn plain[2] = {layernorm_backward, layernorm_backward_ref};
    static const res_bwd_fn resid[2] = {residual_backward, residual_backward_ref};
    static const char *const who[2] = {"fast", "ref"};
    static const char *const mname[2] = {"SET: dx = copy + ADD", "ADD: dx += res, += LN"};
    char name[200];
    float *res = signed_zeros(dout, n * c);
    for (size_t i = 2; i < n * c; i++) res[i] = 0.5f * res[i] - 0.25f; /* not dout itself */
    float *dx0 = rand_f(n * c, -1, 1);
    dx0[0] = -0.0f;
    float *dw0 = rand_f(c, -1, 1), *db0 = rand_f(c, -1, 1);
    for (int mo = 0; mo < 2; mo++) {
        const bt_dx_mode md = mo ? BT_DX_ADD : BT_DX_SET;
        float *dxs[2], *dws[2], *dbs[2];
        for (int v = 0; v < 2; v++) {
            float *dx = md == BT_DX_SET ? sentinel_f(n * c) : copy_f(dx0, n * c);
            float *dw = copy_f(dw0, c), *db = copy_f(db0, c);
            fused[v](dx, dw, db, dout, res, x, w, mean, rstd, n, c, md);
            float *ex = copy_f(md == BT_DX_SET ? res : dx0, n * c);
            float *ew = copy_f(dw0, c), *eb = copy_f(db0, c);
            if (md == BT_DX_ADD) resid[v](ex, NULL, res, n * c, BT_DX_ADD);
            plain[v](ex, ew, eb, dout, x, w, mean, rstd, n, c, BT_DX_ADD);
            const float *const pairs[3][2] = {{dx, ex}, {dw, ew}, {db, eb}};
            static const char *const what[3] = {"dx", "dw", "db"};
            for (int q = 0; q < 3; q++) {
                snprintf(name, sizeof name, "layernorm bwd residual %s n=%zu c=%zu %s %s, bitwise",
                         what[q], n, c, who[v], mname[mo]);
                tu_check_bytes_equal(name, pairs[q][0], pairs[q][1],
                                     (q ? c : n * c) * sizeof(float));
            }
            if (md == BT_DX_SET) { /* dx aliasing res */
                float *in = copy_f(res, n * c);
                fused[v](in, NULL, NULL, dout, in, x, w, mean, rstd, n, c, md);
                snprintf(name, sizeof name, "layernorm bwd residual n=%zu c=%zu %s: dx = res in "
                         "place, bitwise", n, c, who[v]);
                tu_check_bytes_equal(name, in, ex, n * c * sizeof(float));
                free(in);
            }
            dxs[v] = dx, dws[v] = dw, dbs[v] = db;
            free(ex), free(ew), free(eb);
        }
        snprintf(name, sizeof name, "layernorm bwd residual dx n=%zu c=%zu %s", n, c, mname[mo]);
        close_f32(name, dxs[0], dxs[1], n * c, RTOL_F32);
        snprintf(name, sizeof name, "layernorm bwd residual dw n=%zu c=%zu %s", n, c, mname[mo]);
        close_f32(name, dws[0], dws[1], c, RTOL_F32);
        snprintf(name, sizeof name, "layernorm bwd residual db n=%zu c=%zu %s", n, c, mname[mo]);
        close_f32(name, dbs[0], dbs[1], c, RTOL_F32);
        for (int v = 0; v < 2; v++) free(dxs[v]), free(dws[v]), free(dbs[v]);
    }
    free(res), free(dx0), free(dw0), free(db0);
}

/* layernorm_backward_dropout, dx = LN'(dout), ddrop = dropout'(dx) per block: for each
 * kernel (fast, ref) byte for byte layernorm_backward(BT_DX_SET) then dropout_backward
 * (BT_DX_SET) block by block (dx, ddrop pre-filled by a sentinel; dx, ddrop, dw, db), with
 * one block of n rows and n blocks of one row (a block with p = 0 among them); and fast
 * against ref with the tolerance of the header comment. */
static void test_layernorm_dropout(const float *x, const float *w, const float *mean,
                                   const float *rstd, const float *dout, size_t n, size_t c) {
    typedef void (*ln_drop_fn)(float *, float *, float *, float *, const float *,
                               const float *, const float *, const float *, const float *,
                               size_t, size_t, const bt_dropout *, size_t);
    typedef void (*ln_bwd_fn)(float *, float *, float *, const float *, const float *,
                              const float *, const float *, const float *, size_t, size_t,
                              bt_dx_mode);
    typedef void (*drop_bwd_fn)(float *, const float *, size_t, const bt_dropout *,
                                bt_dx_mode);
    static const ln_drop_fn fused[2] = {layernorm_backward_dropout,
                                        layernorm_backward_dropout_ref};
    static const ln_bwd_fn plain[2] = {layernorm_backward, layernorm_backward_ref};
    static const drop_bwd_fn drop[2] = {dropout_backward, dropout_backward_ref};
    static const char *const who[2] = {"fast", "ref"};
    const size_t block_rows[2] = {n, 1};
    bt_dropout *drops = malloc(n * sizeof *drops);
    BT_ASSERT(drops);
    for (size_t b = 0; b < n; b++) drops[b] = (bt_dropout){b % 3 == 2 ? 0.0f : 0.3f, 1000 + b};
    float *dw0 = rand_f(c, -1, 1), *db0 = rand_f(c, -1, 1);
    char name[200];
    for (int k = 0; k < 2; k++) {
        const size_t br = block_rows[k], nb = n / br;
        float *got[2][2];
        for (int v = 0; v < 2; v++) {
            float *dx = sentinel_f(n * c), *dd = sentinel_f(n * c);
            float *dw = copy_f(dw0, c), *db = copy_f(db0, c);
            fused[v](dx, dd, dw, db, dout, x, w, mean, rstd, n, c, drops, br);
            float *ex = sentinel_f(n * c), *ed = sentinel_f(n * c);
            float *ew = copy_f(dw0, c), *eb = copy_f(db0, c);
            plain[v](ex, ew, eb, dout, x, w, mean, rstd, n, c, BT_DX_SET);
            for (size_t b = 0; b < nb; b++)
                drop[v](ed + b * br * c, ex + b * br * c, br * c, &drops[b], BT_DX_SET);
            const float *const pairs[4][2] = {{dx, ex}, {dd, ed}, {dw, ew}, {db, eb}};
            static const char *const what[4] = {"dx", "ddrop", "dw", "db"};
            for (int q = 0; q < 4; q++) {
                snprintf(name, sizeof name, "layernorm bwd dropout %s n=%zu c=%zu rows/block %zu "
                         "%s: = LN SET + dropout SET, bitwise", what[q], n, c, br, who[v]);
                tu_check_bytes_equal(name, pairs[q][0], pairs[q][1],
                                     (q < 2 ? n * c : c) * sizeof(float));
            }
            got[v][0] = dx, got[v][1] = dd;
            free(dw), free(db), free(ex), free(ed), free(ew), free(eb);
        }
        snprintf(name, sizeof name, "layernorm bwd dropout dx n=%zu c=%zu rows/block %zu", n, c,
                 br);
        close_f32(name, got[0][0], got[1][0], n * c, RTOL_F32);
        snprintf(name, sizeof name, "layernorm bwd dropout ddrop n=%zu c=%zu rows/block %zu", n,
                 c, br);
        close_f32(name, got[0][1], got[1][1], n * c, RTOL_F32);
        for (int v = 0; v < 2; v++) free(got[v][0]), free(got[v][1]);
    }
    free(drops), free(dw0), free(db0);
}

static void test_layernorm(size_t n, size_t c) {
    char name[128];
    float *x = rand_f(n * c, -3, 3), *w = rand_f(c, 0.5f, 1.5f), *b = rand_f(c, -1, 1);
    for (size_t j = 0; j < c; j++) x[j] += 10.0f; /* row 0 has a large mean */
    float *o1 = sentinel_f(n * c), *m1 = sentinel_f(n), *r1 = sentinel_f(n);
    float *o2 = sentinel_f(n * c), *m2 = sentinel_f(n), *r2 = sentinel_f(n);
    layernorm_forward(o1, m1, r1, x, w, b, n, c, 1e-5f);
    layernorm_forward_ref(o2, m2, r2, x, w, b, n, c, 1e-5f);
    snprintf(name, sizeof name, "layernorm fwd out n=%zu c=%zu", n, c);
    close_f32(name, o1, o2, n * c, RTOL_F32);
    snprintf(name, sizeof name, "layernorm fwd mean n=%zu c=%zu", n, c);
    close_f32(name, m1, m2, n, RTOL_F32);
    snprintf(name, sizeof name, "layernorm fwd rstd n=%zu c=%zu", n, c);
    close_f32(name, r1, r2, n, RTOL_F32);

    float *dout = rand_f(n * c, -1, 1);
    float *dx1 = rand_f(n * c, -1, 1), *dw1 = rand_f(c, -1, 1), *db1 = rand_f(c, -1, 1);
    float *dx2 = copy_f(dx1, n * c), *dw2 = copy_f(dw1, c), *db2 = copy_f(db1, c);
    layernorm_backward(dx1, dw1, db1, dout, x, w, m2, r2, n, c, BT_DX_ADD);
    layernorm_backward_ref(dx2, dw2, db2, dout, x, w, m2, r2, n, c, BT_DX_ADD);
    snprintf(name, sizeof name, "layernorm bwd dx n=%zu c=%zu", n, c);
    close_f32(name, dx1, dx2, n * c, RTOL_F32);
    snprintf(name, sizeof name, "layernorm bwd dw n=%zu c=%zu", n, c);
    close_f32(name, dw1, dw2, c, RTOL_F32);
    snprintf(name, sizeof name, "layernorm bwd db n=%zu c=%zu", n, c);
    close_f32(name, db1, db2, c, RTOL_F32);
    /* dx by assignment; a zero dout row (row 0 when n > 1) */
    float *dz = signed_zeros(dout, n * c);
    if (n > 1) memset(dz, 0, c * sizeof(float));
    dx_modes dm = dx_modes_new(n * c);
    for (int mo = 0; mo < 2; mo++) {
        float **dst = mo ? dm.set : dm.add;
        const bt_dx_mode md = mo ? BT_DX_SET : BT_DX_ADD;
        layernorm_backward(dst[0], NULL, NULL, dz, x, w, m2, r2, n, c, md);
        layernorm_backward_ref(dst[1], NULL, NULL, dz, x, w, m2, r2, n, c, md);
    }
    snprintf(name, sizeof name, "layernorm bwd dx n=%zu c=%zu", n, c);
    dx_modes_check(name, &dm);
    free(dz);
    test_layernorm_residual(x, w, m2, r2, dout, n, c);
    test_layernorm_dropout(x, w, m2, r2, dout, n, c);

    /* in place (out aliases x) */
    float *xi = copy_f(x, n * c);
    layernorm_forward(xi, m1, r1, xi, w, b, n, c, 1e-5f);
    snprintf(name, sizeof name, "layernorm fwd in place n=%zu c=%zu", n, c);
    close_f32(name, xi, o2, n * c, RTOL_F32);
    free(x), free(w), free(b), free(o1), free(m1), free(r1), free(o2), free(m2), free(r2);
    free(dout), free(dx1), free(dw1), free(db1), free(dx2), free(dw2), free(db2), free(xi);
}

/* --- pointwise ----------------------------------------------------------------------------- */

typedef void (*pw_fwd)(float *, const float *, size_t);
typedef void (*pw_bwd)(float *, const float *, const float *, size_t);
typedef void (*pw_bwd_mode)(float *, const float *, const float *, size_t, bt_dx_mode);

/* The backward is fast_b / ref_b (no mode: accumulates) or fast_bm / ref_bm (a bt_dx_mode:
 * BT_DX_ADD as the former, and BT_DX_SET checked against it). */
static void test_pointwise(const char *op, pw_fwd fast_f, pw_fwd ref_f, pw_bwd fast_b,
                           pw_bwd ref_b, pw_bwd_mode fast_bm, pw_bwd_mode ref_bm,
                           int bwd_uses_out, size_t n, float range) {
    char name[128];
    float *x = rand_f(n, -range, range);
    if (n > 8) { /* the tails and the centre */
        x[0] = 0.0f, x[1] = -0.0f, x[2] = 1e-6f, x[3] = -1e-6f;
        x[4] = 30.0f, x[5] = -30.0f, x[6] = 90.0f, x[7] = -90.0f;
    }
    float *o1 = sentinel_f(n), *o2 = sentinel_f(n);
    fast_f(o1, x, n);
    ref_f(o2, x, n);
    snprintf(name, sizeof name, "%s fwd n=%zu", op, n);
    close_f32(name, o1, o2, n, RTOL_F32);
    float *dout = rand_f(n, -1, 1), *dx1 = rand_f(n, -1, 1), *dx2 = copy_f(dx1, n);
    const float *saved = bwd_uses_out ? o2 : x;
    if (fast_bm) {
        fast_bm(dx1, dout, saved, n, BT_DX_ADD);
        ref_bm(dx2, dout, saved, n, BT_DX_ADD);
    } else {
        fast_b(dx1, dout, saved, n);
        ref_b(dx2, dout, saved, n);
    }
    snprintf(name, sizeof name, "%s bwd n=%zu", op, n);
    close_f32(name, dx1, dx2, n, RTOL_F32);
    if (fast_bm) {
        float *dz = signed_zeros(dout, n);
        dx_modes dm = dx_modes_new(n);
        for (int mo = 0; mo < 2; mo++) {
            float **dst = mo ? dm.set : dm.add;
            fast_bm(dst[0], dz, saved, n, mo ? BT_DX_SET : BT_DX_ADD);
            ref_bm(dst[1], dz, saved, n, mo ? BT_DX_SET : BT_DX_ADD);
        }
        dx_modes_check(name, &dm);
        free(dz);
    }
    float *xi = copy_f(x, n);
    fast_f(xi, xi, n);
    snprintf(name, sizeof name, "%s fwd in place n=%zu", op, n);
    close_f32(name, xi, o2, n, RTOL_F32);
    free(x), free(o1), free(o2), free(dout), free(dx1), free(dx2), free(xi);
}

/* Elementwise relative accuracy of the polynomial exp/erfc inside gelu/quick_gelu, where the
 * outputs are tiny (x < 0): scaled atol would hide errors there, so check them relatively.
 * Float results of a few-ulp function: rtol 2e-6 (~30 ulps) is generous. */
static void test_activation_tails(void) {
    const size_t n = 2001;
    float *x = fvec(n), *o1 = sentinel_f(n), *o2 = sentinel_f(n);
    for (size_t i = 0; i < n; i++) x[i] = -12.0f + 12.0f * (float)i / (float)(n - 1);
    gelu_forward(o1, x, n);
    gelu_forward_ref(o2, x, n);
    tu_check_close_f32("gelu fwd, x in [-12, 0], relative", o1, o2, n, 1e-37, 2e-6);
    quick_gelu_forward(o1, x, n);
    quick_gelu_forward_ref(o2, x, n);
    tu_check_close_f32("quick_gelu fwd, x in [-12, 0], relative", o1, o2, n, 1e-37, 2e-6);
    softmax_forward(o1, x, 1, n); /* probabilities spanning e^-12 .. 1 */
    softmax_forward_ref(o2, x, 1, n);
    tu_check_close_f32("softmax fwd, one row spanning e^-12, relative", o1, o2, n, 1e-37, 2e-6);
    free(x), free(o1), free(o2);
}

/* --- softmax ------------------------------------------------------------------------------- */

static void test_softmax(size_t n, size_t c) {
    char name[128];
    float *x = rand_f(n * c, -8, 8);
    if (c > 3) x[1] = -FLT_MAX, x[2] = -FLT_MAX; /* masked-like entries */
    float *o1 = sentinel_f(n * c), *o2 = sentinel_f(n * c);
    softmax_forward(o1, x, n, c);
    softmax_forward_ref(o2, x, n, c);
    snprintf(name, sizeof name, "softmax fwd n=%zu c=%zu", n, c);
    close_f32(name, o1, o2, n * c, RTOL_F32);
    float *dout = rand_f(n * c, -1, 1), *dx1 = rand_f(n * c, -1, 1), *dx2 = copy_f(dx1, n * c);
    softmax_backward(dx1, dout, o2, n, c);
    softmax_backward_ref(dx2, dout, o2, n, c);
    snprintf(name, sizeof name, "softmax bwd n=%zu c=%zu", n, c);
    close_f32(name, dx1, dx2, n * c, RTOL_F32);
    softmax_forward(x, x, n, c);
    snprintf(name, sizeof name, "softmax fwd in place n=%zu c=%zu", n, c);
    close_f32(name, x, o2, n * c, RTOL_F32);
    free(x), free(o1), free(o2), free(dout), free(dx1), free(dx2);
}

/* --- linear --------------------------------------------------------------------------------- */

/* A bf16 input x_bf16 = bf16(x) is what a BF16 product makes of x itself (gemm.h), so fast and
 * reference give the bytes they give for x: out (want_out, the fast forward on x), dx, dw and
 * db bit for bit, from the same pre-filled gradients. */
static void test_linear_x_bf16(const float *x, const float *w, const bt_bf16 *wb, const float *b,
                               const float *want_out, const float *dout, size_t n, size_t c,
                               size_t oc) {
    char name[160];
    const gemm_compute bf = GEMM_COMPUTE_BF16;
    bt_bf16 *xb = malloc((n * c > 0 ? n * c : 1) * sizeof(bt_bf16));
    bf16_from_f32_ref(xb, x, n * c);
    float *o1 = sentinel_f(n * oc), *o2 = sentinel_f(n * oc), *o3 = sentinel_f(n * oc);
    linear_forward(o1, NULL, xb, w, wb, NULL, b, n, c, oc, bf);
    snprintf(name, sizeof name, "linear fwd x_bf16 = fwd x, bitwise n=%zu c=%zu oc=%zu", n, c, oc);
    tu_check_bytes_equal(name, o1, want_out, n * oc * sizeof(float));
    linear_forward_ref(o2, NULL, xb, w, wb, NULL, b, n, c, oc, bf);
    linear_forward_ref(o3, x, NULL, w, wb, NULL, b, n, c, oc, bf);
    snprintf(name, sizeof name, "linear_ref fwd x_bf16 = fwd x, bitwise n=%zu c=%zu oc=%zu", n, c,
             oc);
    tu_check_bytes_equal(name, o2, o3, n * oc * sizeof(float));
    float *g[2][3];
    for (int v = 0; v < 2; v++) {
        tu_rng r;
        tu_rng_seed(&r, 5); /* the same pre-filled gradients in both runs */
        g[v][0] = fvec(n * c), g[v][1] = fvec(oc * c), g[v][2] = fvec(oc);
        tu_fill_uniform_f32(&r, g[v][0], n * c, -1, 1);
        tu_fill_uniform_f32(&r, g[v][1], oc * c, -1, 1);
        tu_fill_uniform_f32(&r, g[v][2], oc, -1, 1);
        linear_backward(g[v][0], g[v][1], g[v][2], dout, NULL, v ? NULL : x, v ? xb : NULL, w, wb,
                        n, c, oc, bf, BT_DX_ADD);
    }
    static const char *const gn[3] = {"dx", "dw", "db"};
    const size_t gsz[3] = {n * c, oc * c, oc};
    for (int k = 0; k < 3; k++) {
        snprintf(name, sizeof name, "linear bwd %s x_bf16 = bwd x, bitwise n=%zu c=%zu oc=%zu",
                 gn[k], n, c, oc);
        tu_check_bytes_equal(name, g[1][k], g[0][k], gsz[k] * sizeof(float));
    }
    for (int v = 0; v < 2; v++) free(g[v][0]), free(g[v][1]), free(g[v][2]);
    /* dout_bf16 = bf16(dout) instead of dout: the same dx and dw, fast and reference */
    bt_bf16 *db16 = malloc((n * oc > 0 ? n * oc : 1) * sizeof(bt_bf16));
    bf16_from_f32_ref(db16, dout, n * oc);
    for (int r = 0; r < 2; r++) {
        for (int v = 0; v < 2; v++) {
            tu_rng rg;
            tu_rng_seed(&rg, 6);
            g[v][0] = fvec(n * c), g[v][1] = fvec(oc * c);
            tu_fill_uniform_f32(&rg, g[v][0], n * c, -1, 1);
            tu_fill_uniform_f32(&rg, g[v][1], oc * c, -1, 1);
            if (r)
                linear_backward_ref(g[v][0], g[v][1], NULL, v ? NULL : dout, v ? db16 : NULL, x,
                                    NULL, w, wb, n, c, oc, bf, BT_DX_ADD);
            else
                linear_backward(g[v][0], g[v][1], NULL, v ? NULL : dout, v ? db16 : NULL, x,
                                NULL, w, wb, n, c, oc, bf, BT_DX_ADD);
        }
        for (int k = 0; k < 2; k++) {
            snprintf(name, sizeof name,
                     "linear%s bwd %s dout_bf16 = bwd dout, bitwise n=%zu c=%zu oc=%zu",
                     r ? "_ref" : "", gn[k], n, c, oc);
            tu_check_bytes_equal(name, g[1][k], g[0][k], gsz[k] * sizeof(float));
        }
        for (int v = 0; v < 2; v++) free(g[v][0]), free(g[v][1]);
    }
    free(db16);
    free(xb), free(o1), free(o2), free(o3);
}

/* linear's dx by assignment at a size where oneDNN's AMX kernels sum K in another order with
 * beta 0 (measured, oneDNN 2.6, 2 threads: 256 x 768 from K 1536 gives other bits in 45% of
 * the elements): SET into the sentinel vs ADD onto zeros within the bound above (fast kernel
 * only: the reference's double loops would cost seconds here). Only on the native route. */
static void test_linear_set_native(size_t n, size_t c, size_t oc) {
    if (!linear_native_route(GEMM_COMPUTE_BF16)) return;
    char name[160];
    float *dout = rand_f(n * oc, -1, 1), *w = rand_f(oc * c, -1, 1), *x = rand_f(n * c, -1, 1);
    for (size_t o = 0; o < oc; o++) dout[o] = -0.0f; /* row 0: sums of -0 products */
    dx_modes dm = dx_modes_new(n * c);
    linear_backward(dm.add[0], NULL, NULL, dout, NULL, x, NULL, w, NULL, n, c, oc,
                    GEMM_COMPUTE_BF16, BT_DX_ADD);
    linear_backward(dm.set[0], NULL, NULL, dout, NULL, x, NULL, w, NULL, n, c, oc,
                    GEMM_COMPUTE_BF16, BT_DX_SET);
    /* the reference's pair is the add buffer twice over (nothing to compare for it here) */
    memcpy(dm.set[1], dm.add[1], n * c * sizeof(float));
    snprintf(name, sizeof name, "linear bwd dx bf16 n=%zu c=%zu oc=%zu", n, c, oc);
    dx_modes_check_linear_native(name, &dm, dout, w, n, c, oc);
    free(dout), free(w), free(x);
}

static void test_linear(size_t n, size_t c, size_t oc, gemm_compute compute, int with_bf16_copy) {
    char name[160];
    const char *mode =
        compute == GEMM_COMPUTE_BF16 ? (with_bf16_copy ? "bf16+w_bf16" : "bf16") : "f32";
    float *x = rand_f(n * c, -1, 1), *w = rand_f(oc * c, -1, 1), *b = rand_f(oc, -1, 1);
    bt_bf16 *wb = NULL;
    if (with_bf16_copy) {
        wb = malloc(oc * c * sizeof(bt_bf16));
        bf16_from_f32_ref(wb, w, oc * c);
    }
    float *o1 = sentinel_f(n * oc), *o2 = sentinel_f(n * oc);
    linear_forward(o1, x, NULL, w, wb, NULL, b, n, c, oc, compute);
    linear_forward_ref(o2, x, NULL, w, wb, NULL, b, n, c, oc, compute);
    /* The reference rounds the operands to bf16 exactly as gemm.h specifies, so even in bf16
     * mode the two differ only in summation order: the fp32 tolerance applies. */
    snprintf(name, sizeof name, "linear fwd %s n=%zu c=%zu oc=%zu", mode, n, c, oc);
    close_f32(name, o1, o2, n * oc, RTOL_F32);
    float *dout = rand_f(n * oc, -1, 1);
    float *dx1 = rand_f(n * c, -1, 1), *dw1 = rand_f(oc * c, -1, 1), *db1 = rand_f(oc, -1, 1);
    float *dx2 = copy_f(dx1, n * c), *dw2 = copy_f(dw1, oc * c), *db2 = copy_f(db1, oc);
    linear_backward(dx1, dw1, db1, dout, NULL, x, NULL, w, wb, n, c, oc, compute, BT_DX_ADD);
    linear_backward_ref(dx2, dw2, db2, dout, NULL, x, NULL, w, wb, n, c, oc, compute, BT_DX_ADD);
    snprintf(name, sizeof name, "linear bwd dx %s n=%zu c=%zu oc=%zu", mode, n, c, oc);
    close_f32(name, dx1, dx2, n * c, RTOL_F32);
    snprintf(name, sizeof name, "linear bwd dw %s n=%zu c=%zu oc=%zu", mode, n, c, oc);
    close_f32(name, dw1, dw2, oc * c, RTOL_F32);
    snprintf(name, sizeof name, "linear bwd db %s n=%zu c=%zu oc=%zu", mode, n, c, oc);
    close_f32(name, db1, db2, oc, RTOL_F32);
    /* dx by assignment (the GEMM's beta 0); dout row 0 all -0 against positive weights, whose
     * products are all -0: a sum that did not start from +0 would store -0 */
    float *dz = copy_f(dout, n * oc), *wp = rand_f(oc * c, 0.25f, 1);
    for (size_t o = 0; o < oc; o++) dz[o] = -0.0f;
    dx_modes dm = dx_modes_new(n * c);
    for (int mo = 0; mo < 2; mo++) {
        float **dst = mo ? dm.set : dm.add;
        const bt_dx_mode md = mo ? BT_DX_SET : BT_DX_ADD;
        linear_backward(dst[0], NULL, NULL, dz, NULL, x, NULL, wp, NULL, n, c, oc, compute, md);
        linear_backward_ref(dst[1], NULL, NULL, dz, NULL, x, NULL, wp, NULL, n, c, oc, compute, md);
    }
    snprintf(name, sizeof name, "linear bwd dx %s n=%zu c=%zu oc=%zu", mode, n, c, oc);
    if (linear_native_route(compute))
        dx_modes_check_linear_native(name, &dm, dz, wp, n, c, oc);
    else
        dx_modes_check(name, &dm);
    free(dz), free(wp);
    if (compute == GEMM_COMPUTE_BF16) test_linear_x_bf16(x, w, wb, b, o1, dout, n, c, oc);
    free(x), free(w), free(b), free(wb), free(o1), free(o2), free(dout);
    free(dx1), free(dw1), free(db1), free(dx2), free(dw2), free(db2);
}

/* --- attention ------------------------------------------------------------------------------ */


/* Gradient buffers laid out like the inputs (packed where the inputs are). */
static void attn_grads(const attn_case *a, float *gq, float *gkv, float **dq, float **dk,
                       float **dv) {
    const size_t C = a->d.NH * a->d.D;
    if (a->kvbuf) *dq = gq, *dk = gkv, *dv = gkv + C;
    else *dq = gq, *dk = gq + C, *dv = gq + 2 * C;
}

/* The backward without probs (P recomputed per block from q, k and the key bias) against
 * the backward reading the forward's own probs p_fast: the same bits, in both dx modes,
 * since the recompute runs the forward's product and row pass. The reference likewise
 * recomputes P in double; against the reference reading p_ref (P rounded to fp32, a
 * relative change of 2^-24 per probability) it agrees to fp32 rounding. The check can
 * fail: with a key mask, recomputing without the key bias must change the gradients. */
static void test_attention_recompute(const char *label, const attn_case *a, const float *p_fast,
                                     const float *p_ref, const float *dout,
                                     const bt_dropout *drop, gemm_compute compute) {
    char name[240];
    const attention_dims *d = &a->d;
    float *g[2][2]; /* [kept, recomputed][q, kv] */
    for (int mo = 0; mo < 2; mo++) {
        const bt_dx_mode md = mo ? BT_DX_SET : BT_DX_ADD;
        for (int r = 0; r < 2; r++) {
            g[r][0] = md == BT_DX_SET ? sentinel_f(a->qn) : calloc(a->qn, sizeof(float));
            g[r][1] = !a->kvn ? NULL : md == BT_DX_SET ? sentinel_f(a->kvn)
                                                      : calloc(a->kvn, sizeof(float));
            float *eq, *ek, *ev;
            attn_grads(a, g[r][0], g[r][1], &eq, &ek, &ev);
            attention_backward(eq, ek, ev, dout, r ? NULL : p_fast, a->q, a->k, a->v,
                               a->key_bias, d, drop, compute, md);
        }
        snprintf(name, sizeof name, "attention bwd, P recomputed = P kept, bitwise (%s) %s",
                 mo ? "set" : "add", label);
        tu_check(memcmp(g[1][0], g[0][0], a->qn * sizeof(float)) == 0 &&
                     (!a->kvn || memcmp(g[1][1], g[0][1], a->kvn * sizeof(float)) == 0),
                 "%s", name);
        if (mo == 0 && a->key_bias) { /* the control: the mask left out must show */
            float *w0 = calloc(a->qn, sizeof(float)), *w1 = a->kvn ? calloc(a->kvn, sizeof(float)) : NULL;
            float *eq, *ek, *ev;
            attn_grads(a, w0, w1, &eq, &ek, &ev);
            attention_backward(eq, ek, ev, dout, NULL, a->q, a->k, a->v, NULL, d, drop, compute,
                               BT_DX_ADD);
            snprintf(name, sizeof name, "attention bwd recomputed without the key bias differs %s",
                     label);
            tu_check(memcmp(w0, g[0][0], a->qn * sizeof(float)) != 0, "%s", name);
            free(w0), free(w1);
        }
        for (int r = 0; r < 2; r++) free(g[r][0]), free(g[r][1]);
    }
    /* the reference: recomputed (double P) against P read back from fp32 */
    for (int r = 0; r < 2; r++) {
        g[r][0] = calloc(a->qn, sizeof(float));
        g[r][1] = a->kvn ? calloc(a->kvn, sizeof(float)) : NULL;
        float *eq, *ek, *ev;
        attn_grads(a, g[r][0], g[r][1], &eq, &ek, &ev);
        attention_backward_ref(eq, ek, ev, dout, r ? NULL : p_ref, a->q, a->k, a->v, a->key_bias,
                               d, drop, compute, BT_DX_ADD);
    }
    snprintf(name, sizeof name, "attention bwd reference, P recomputed ~ P kept %s", label);
    close_f32(name, g[1][0], g[0][0], a->qn, RTOL_F32);
    if (a->kvn) close_f32(name, g[1][1], g[0][1], a->kvn, RTOL_F32);
    for (int r = 0; r < 2; r++) free(g[r][0]), free(g[r][1]);
}

static void test_attention(const char *label, size_t B, size_t NH, size_t Tq, size_t Tk, size_t D,
                           int self, int masked, const bt_dropout *drop, gemm_compute compute) {
    char name[200];
    attn_case a;
    attn_case_init(&a, &rng, B, NH, Tq, Tk, D, self, masked);
    const attention_dims *d = &a.d;
    const size_t C = NH * D, on = B * Tq * C, pn = B * NH * Tq * Tk;
    float *o1 = sentinel_f(on), *p1 = sentinel_f(pn), *o2 = sentinel_f(on), *p2 = sentinel_f(pn);
    attention_forward(o1, p1, a.q, a.k, a.v, a.key_bias, d, drop, compute);
    attention_forward_ref(o2, p2, a.q, a.k, a.v, a.key_bias, d, drop, compute);
    /* bf16: each GEMM operand is rounded to bf16 (relative error 2^-9 each, 2^-8 per
     * product), twice in a chain for out (S, then P·v), and exp turns an absolute score
     * error δ into a relative probability error δ (scores here are O(1..4)). So errors are
     * up to ~4·2^-8 ≈ 1.6e-2 of the magnitude of the terms; compare with rtol = atol-scale
     * = 2^-5 (3.1e-2) against the exact-math reference. The backward chains three more
     * products (dP, dS, then dq/dk/dv): 2^-4. */
    const double rt_f = compute == GEMM_COMPUTE_BF16 ? 1.0 / 32 : RTOL_F32;
    const double rt_b = compute == GEMM_COMPUTE_BF16 ? 1.0 / 16 : RTOL_F32;
    snprintf(name, sizeof name, "attention fwd out %s", label);
    close_f32(name, o1, o2, on, rt_f);
    snprintf(name, sizeof name, "attention fwd probs %s", label);
    close_f32(name, p1, p2, pn, rt_f);

    float *dout = rand_f(on, -1, 1);
    float *gq1 = rand_f(a.qn, -1, 1), *gkv1 = rand_f(a.kvn, -1, 1);
    float *gq2 = copy_f(gq1, a.qn), *gkv2 = copy_f(gkv1, a.kvn);
    float *dq1, *dk1, *dv1, *dq2, *dk2, *dv2;
    attn_grads(&a, gq1, gkv1, &dq1, &dk1, &dv1);
    attn_grads(&a, gq2, gkv2, &dq2, &dk2, &dv2);
    /* both backwards read the same (reference) probs, so only the backward is compared */
    attention_backward(dq1, dk1, dv1, dout, p2, a.q, a.k, a.v, a.key_bias, d, drop, compute,
                       BT_DX_ADD);
    attention_backward_ref(dq2, dk2, dv2, dout, p2, a.q, a.k, a.v, a.key_bias, d, drop, compute,
                           BT_DX_ADD);
    if (self) {
        snprintf(name, sizeof name, "attention bwd d(qkv) %s", label);
        close_f32(name, gq1, gq2, a.qn, rt_b);
    } else {
        snprintf(name, sizeof name, "attention bwd dq %s", label);
        close_f32(name, gq1, gq2, a.qn, rt_b);
        snprintf(name, sizeof name, "attention bwd d(kv) %s", label);
        close_f32(name, gkv1, gkv2, a.kvn, rt_b);
    }
    /* dq, dk, dv by assignment (beta 0; the packed buffers' columns are all dq, dk or dv);
     * batch item 0's dout all -0 */
    float *dz = copy_f(dout, on);
    for (size_t i = 0; i < Tq * C; i++) dz[i] = -0.0f;
    float *gm[2][2][2]; /* [mode][fast, ref][q, kv] */
    for (int mo = 0; mo < 2; mo++)
        for (int v = 0; v < 2; v++) {
            gm[mo][v][0] = mo ? sentinel_f(a.qn) : calloc(a.qn, sizeof(float));
            gm[mo][v][1] = !a.kvn ? NULL : mo ? sentinel_f(a.kvn) : calloc(a.kvn, sizeof(float));
            float *eq, *ek, *ev;
            attn_grads(&a, gm[mo][v][0], gm[mo][v][1], &eq, &ek, &ev);
            (v ? attention_backward_ref : attention_backward)(eq, ek, ev, dz, p2, a.q, a.k, a.v,
                                                              a.key_bias, d, drop, compute,
                                                              mo ? BT_DX_SET : BT_DX_ADD);
        }
    for (int v = 0; v < 2; v++) {
        snprintf(name, sizeof name, "attention bwd %s %s: BT_DX_SET = BT_DX_ADD onto zeros, "
                 "bitwise", label, v ? "ref" : "fast");
        tu_check(memcmp(gm[1][v][0], gm[0][v][0], a.qn * sizeof(float)) == 0 &&
                     (!a.kvn || memcmp(gm[1][v][1], gm[0][v][1], a.kvn * sizeof(float)) == 0),
                 "%s", name);
        for (int mo = 0; mo < 2; mo++) free(gm[mo][v][0]), free(gm[mo][v][1]);
    }
    free(dz);
    test_attention_recompute(label, &a, p1, p2, dout, drop, compute);

    /* determinism: the same call again gives the same bits (fp32 and bf16 alike) */
    float *o3 = sentinel_f(on), *p3 = sentinel_f(pn);
    attention_forward(o3, p3, a.q, a.k, a.v, a.key_bias, d, drop, compute);
    snprintf(name, sizeof name, "attention fwd repeatable %s", label);
    tu_check_bytes_equal(name, o3, o1, on * sizeof(float));
    /* probs NULL (inference: P not kept): the same output bytes, fast and reference */
    float *o4 = sentinel_f(on);
    attention_forward(o4, NULL, a.q, a.k, a.v, a.key_bias, d, drop, compute);
    snprintf(name, sizeof name, "attention fwd without probs %s", label);
    tu_check_bytes_equal(name, o4, o1, on * sizeof(float));
    attention_forward_ref(o4, NULL, a.q, a.k, a.v, a.key_bias, d, drop, compute);
    snprintf(name, sizeof name, "attention fwd reference without probs %s", label);
    tu_check_bytes_equal(name, o4, o2, on * sizeof(float));
    free(o4);
    free(o1), free(p1), free(o2), free(p2), free(o3), free(p3), free(dout);
    free(gq1), free(gkv1), free(gq2), free(gkv2);
    attn_case_free(&a);
}

/* A batch item whose keys are ALL masked: HF's additive -FLT_MAX mask then gives every key
 * the same score, i.e. uniform probabilities (torch's result), never NaN. */
static void test_attention_fully_masked(void) {
    char name[128];
    attn_case a;
    attn_case_init(&a, &rng, 2, 3, 7, 9, 8, 0, 0);
    const size_t C = 24, on = 2 * 7 * C, pn = 2 * 3 * 7 * 9;
    int32_t mask[18];
    for (int i = 0; i < 18; i++) mask[i] = i < 9; /* item 1: every key masked */
    a.key_bias = fvec(18);
    attention_key_bias_from_mask(a.key_bias, mask, 18);
    float *o1 = sentinel_f(on), *p1 = sentinel_f(pn), *o2 = sentinel_f(on), *p2 = sentinel_f(pn);
    attention_forward(o1, p1, a.q, a.k, a.v, a.key_bias, &a.d, NULL, GEMM_COMPUTE_F32);
    attention_forward_ref(o2, p2, a.q, a.k, a.v, a.key_bias, &a.d, NULL, GEMM_COMPUTE_F32);
    double worst = 0.0;
    for (size_t e = pn / 2; e < pn; e++) worst = fmax(worst, fabs((double)p2[e] - 1.0 / 9.0));
    tu_check(worst < 1e-7, "attention reference: fully masked item is uniform (worst %.2g)", worst);
    snprintf(name, sizeof name, "attention fwd probs, fully masked item [%s]",
             ops_attention_threads_name());
    close_f32(name, p1, p2, pn, RTOL_F32);
    snprintf(name, sizeof name, "attention fwd out, fully masked item [%s]",
             ops_attention_threads_name());
    close_f32(name, o1, o2, on, RTOL_F32);
    free(o1), free(p1), free(o2), free(p2);
    attn_case_free(&a);
}

/* NULL gradient pointers are skipped: dv only must equal the dv of a full backward. */
static void test_attention_partial_grads(void) {
    attn_case a;
    attn_case_init(&a, &rng, 2, 3, 9, 13, 8, 0, 1);
    const bt_dropout drop = {.p = 0.2f, .seed = 5};
    const size_t C = 24, on = 2 * 9 * C, pn = 2 * 3 * 9 * 13;
    float *o = sentinel_f(on), *p = sentinel_f(pn), *dout = rand_f(on, -1, 1);
    attention_forward_ref(o, p, a.q, a.k, a.v, a.key_bias, &a.d, &drop, GEMM_COMPUTE_F32);
    float *g1 = rand_f(a.kvn, -1, 1), *g2 = copy_f(g1, a.kvn), *gq = rand_f(a.qn, -1, 1);
    attention_backward(NULL, NULL, g1 + C, dout, p, a.q, a.k, a.v, a.key_bias, &a.d, &drop,
                       GEMM_COMPUTE_F32, BT_DX_ADD);
    attention_backward_ref(gq, g2, g2 + C, dout, p, a.q, a.k, a.v, a.key_bias, &a.d, &drop,
                           GEMM_COMPUTE_F32, BT_DX_ADD);
    /* compare the dv columns only; the dk columns of g1 must be untouched */
    float *dv1 = fvec(2 * 13 * C), *dv2 = fvec(2 * 13 * C);
    int dk_untouched = 1;
    float *orig = copy_f(g1, a.kvn);
    for (size_t row = 0; row < 2 * 13; row++)
        for (size_t e = 0; e < C; e++) {
            dv1[row * C + e] = g1[row * 2 * C + C + e];
            dv2[row * C + e] = g2[row * 2 * C + C + e];
        }
    for (size_t row = 0; row < 2 * 13; row++)
        for (size_t e = 0; e < C; e++) dk_untouched &= g1[row * 2 * C + e] == orig[row * 2 * C + e];
    close_f32("attention bwd dv only (dq, dk NULL)", dv1, dv2, 2 * 13 * C, RTOL_F32);
    tu_check(dk_untouched, "attention bwd with dk NULL leaves the packed dk columns alone");
    free(o), free(p), free(dout), free(g1), free(g2), free(gq), free(dv1), free(dv2), free(orig);
    attn_case_free(&a);
}

/* The fast attention's block products read what gemm() itself would read: on the native
 * bf16 route attention.c rounds the operands (P, v_h, dout_h) once, to the bytes and dense
 * layout of gemm's own rounding, and hands gemm bf16 copies. So, without dropout, out_h
 * equals gemm(P_h, v_h) and dv_h equals dv0_h + gemm(P_hᵀ, dout_h) BIT FOR BIT on every route, with
 * P read back from probs. The check products run as attention's do: on the calling thread
 * of a parallel region that is active when the machine gives more than one thread (oneDNN
 * plans a primitive for that context). oneDNN and ref backends only (OpenBLAS may split a
 * product differently when called from a parallel region). */
static void test_attention_block_products(gemm_compute compute) {
    const char *mode = compute == GEMM_COMPUTE_BF16 ? "bf16" : "f32";
    if (gemm_get_backend() == GEMM_BACKEND_OPENBLAS) {
        printf("# attention block products vs gemm [%s]: not run on OpenBLAS\n", mode);
        return;
    }
    /* large enough for attention's parallel loop: 4 blocks, Tq Tk D = 65536 */
    const size_t B = 2, NH = 2, T = 64, D = 16, C = NH * D;
    const attention_dims d = {.B = B, .Tq = T, .Tk = T, .NH = NH, .D = D,
                              .ldq = 3 * C, .ldk = 3 * C, .ldv = 3 * C, .ldo = C};
    float *qkv = rand_f(B * T * 3 * C, -2, 2), *dout = rand_f(B * T * C, -1, 1);
    float *out = sentinel_f(B * T * C), *probs = sentinel_f(B * NH * T * T);
    float *dg = rand_f(B * T * 3 * C, -1, 1), *dg2 = copy_f(dg, B * T * 3 * C);
    float *out2 = sentinel_f(B * T * C);
    attention_forward(out, probs, qkv, qkv + C, qkv + 2 * C, NULL, &d, NULL, compute);
    attention_backward(NULL, NULL, dg + 2 * C, dout, probs, qkv, qkv + C, qkv + 2 * C, NULL, &d,
                       NULL, compute, BT_DX_ADD);
#ifdef _OPENMP
#pragma omp parallel if (omp_get_max_threads() > 1)
#endif
    {
#ifdef _OPENMP
        const int me = omp_get_thread_num();
#else
        const int me = 0;
#endif
        for (size_t blk = 0; me == 0 && blk < B * NH; blk++) {
            const size_t b = blk / NH, h = blk % NH;
            const float *p = probs + blk * T * T;
            gemm_args o = {.m = T, .n = D, .k = T, .a_type = BT_DTYPE_F32, .a = p, .lda = T,
                           .b_type = BT_DTYPE_F32, .b = qkv + b * T * 3 * C + 2 * C + h * D,
                           .ldb = 3 * C, .c = out2 + b * T * C + h * D, .ldc = C,
                           .alpha = 1.0f, .beta = 0.0f, .compute = compute};
            gemm(&o);
            gemm_args v = {.trans_a = 1, .m = T, .n = D, .k = T, .a_type = BT_DTYPE_F32, .a = p,
                           .lda = T, .b_type = BT_DTYPE_F32, .b = dout + b * T * C + h * D,
                           .ldb = C, .c = dg2 + b * T * 3 * C + 2 * C + h * D, .ldc = 3 * C,
                           .alpha = 1.0f, .beta = 1.0f, .compute = compute};
            gemm(&v);
        }
    }
    char name[128];
    snprintf(name, sizeof name, "attention out == gemm(P, v) per block [%s] (bitwise)", mode);
    tu_check_bytes_equal(name, out, out2, B * T * C * sizeof(float));
    snprintf(name, sizeof name, "attention dv == dv0 + gemm(Pt, dout) per block [%s] (bitwise)",
             mode);
    tu_check_bytes_equal(name, dg, dg2, B * T * 3 * C * sizeof(float));
    free(qkv), free(dout), free(out), free(probs), free(dg), free(dg2), free(out2);
}

/* --- embedding ------------------------------------------------------------------------------ */

static void test_embedding(size_t n, size_t c) {
    char name[128];
    const size_t rows = 50;
    int32_t *ids = malloc(n * sizeof(int32_t));
    for (size_t i = 0; i < n; i++) ids[i] = (int32_t)(tu_rng_next(&rng) % 9); /* many repeats */
    if (n > 2) ids[1] = 1, ids[2] = 1; /* padding id, twice */
    float *table = rand_f(rows * c, -1, 1), *o1 = sentinel_f(n * c), *o2 = sentinel_f(n * c);
    embedding_forward(o1, ids, table, n, c, rows);
    embedding_forward_ref(o2, ids, table, n, c, rows);
    snprintf(name, sizeof name, "embedding fwd n=%zu c=%zu (bitwise)", n, c);
    tu_check_bytes_equal(name, o1, o2, n * c * sizeof(float));
    float *dout = rand_f(n * c, -1, 1), *dt1 = rand_f(rows * c, -1, 1),
          *dt2 = copy_f(dt1, rows * c);
    embedding_backward(dt1, dout, ids, n, c, rows, 1);
    embedding_backward_ref(dt2, dout, ids, n, c, rows, 1);
    /* same additions in the same row order: bitwise (float adds vs double-then-round agree
     * only to rounding when an id repeats, so compare with the fp32 tolerance) */
    snprintf(name, sizeof name, "embedding bwd n=%zu c=%zu (padding_idx 1)", n, c);
    close_f32(name, dt1, dt2, rows * c, RTOL_F32);
    free(ids), free(table), free(o1), free(o2), free(dout), free(dt1), free(dt2);
}

/* --- bias add, residual, dropout ----------------------------------------------------------- */

static void test_bias_residual(size_t n, size_t c) {
    char name[128];
    float *x = rand_f(n * c, -1, 1), *bias = rand_f(c, -1, 1), *y = rand_f(n * c, -1, 1);
    float *o1 = sentinel_f(n * c), *o2 = sentinel_f(n * c);
    bias_add_forward(o1, x, bias, n, c);
    bias_add_forward_ref(o2, x, bias, n, c);
    snprintf(name, sizeof name, "bias_add fwd n=%zu c=%zu (bitwise)", n, c);
    tu_check_bytes_equal(name, o1, o2, n * c * sizeof(float));
    float *dout = rand_f(n * c, -1, 1), *dx1 = rand_f(n * c, -1, 1), *db1 = rand_f(c, -1, 1);
    float *dx2 = copy_f(dx1, n * c), *db2 = copy_f(db1, c);
    bias_add_backward(dx1, db1, dout, n, c);
    bias_add_backward_ref(dx2, db2, dout, n, c);
    snprintf(name, sizeof name, "bias_add bwd dx n=%zu c=%zu (bitwise)", n, c);
    tu_check_bytes_equal(name, dx1, dx2, n * c * sizeof(float));
    snprintf(name, sizeof name, "bias_add bwd dbias n=%zu c=%zu", n, c);
    close_f32(name, db1, db2, c, RTOL_F32);

    residual_forward(o1, x, y, n * c);
    residual_forward_ref(o2, x, y, n * c);
    snprintf(name, sizeof name, "residual fwd n=%zu (bitwise)", n * c);
    tu_check_bytes_equal(name, o1, o2, n * c * sizeof(float));
    float *da1 = rand_f(n * c, -1, 1), *da2 = copy_f(da1, n * c);
    memcpy(dx1, dx2, n * c * sizeof(float));
    residual_backward(da1, dx1, dout, n * c, BT_DX_ADD);
    residual_backward_ref(da2, dx2, dout, n * c, BT_DX_ADD);
    snprintf(name, sizeof name, "residual bwd n=%zu (bitwise)", n * c);
    tu_check(memcmp(da1, da2, n * c * sizeof(float)) == 0 &&
                 memcmp(dx1, dx2, n * c * sizeof(float)) == 0, "%s", name);
    /* by assignment: both outputs, and one of them alone */
    float *dz = signed_zeros(dout, n * c);
    for (int which = 0; which < 3; which++) {
        dx_modes dm = dx_modes_new(n * c), dm2 = dx_modes_new(n * c);
        for (int mo = 0; mo < 2; mo++) {
            float **a1 = mo ? dm.set : dm.add, **b1 = mo ? dm2.set : dm2.add;
            const bt_dx_mode md = mo ? BT_DX_SET : BT_DX_ADD;
            residual_backward(which != 2 ? a1[0] : NULL, which != 1 ? b1[0] : NULL, dz, n * c,
                              md);
            residual_backward_ref(which != 2 ? a1[1] : NULL, which != 1 ? b1[1] : NULL, dz,
                                  n * c, md);
        }
        if (which == 1) memcpy(dm2.set[0], dm2.add[0], n * c * sizeof(float)), /* untouched */
            memcpy(dm2.set[1], dm2.add[1], n * c * sizeof(float));
        if (which == 2) memcpy(dm.set[0], dm.add[0], n * c * sizeof(float)),
            memcpy(dm.set[1], dm.add[1], n * c * sizeof(float));
        snprintf(name, sizeof name, "residual bwd da (%d) n=%zu", which, n * c);
        dx_modes_check(name, &dm);
        snprintf(name, sizeof name, "residual bwd db (%d) n=%zu", which, n * c);
        dx_modes_check(name, &dm2);
    }
    free(dz);
    /* in place: out aliases a */
    float *xi = copy_f(x, n * c);
    residual_forward(xi, xi, y, n * c);
    residual_forward_ref(o2, x, y, n * c);
    snprintf(name, sizeof name, "residual fwd in place n=%zu (bitwise)", n * c);
    tu_check_bytes_equal(name, xi, o2, n * c * sizeof(float));
    free(x), free(bias), free(y), free(o1), free(o2), free(dout), free(dx1), free(db1);
    free(dx2), free(db2), free(da1), free(da2), free(xi);
}

/* AdamW: the fast update gives the reference's bytes (same expressions, no contraction, IEEE
 * sqrt and division in every lane), for p, m, v and the bf16 shadow, with and without the
 * shadow; edge values in the gradient (0, +-Inf, NaN, huge, tiny) and v = 0 included. `off`
 * (< 16) shifts the five arrays by different amounts, so their heads and tails sit at
 * different places of a 64-byte line (from 65536 elements the fast update streams the
 * shadow: ops.c OPS_STREAM_MIN). */
static void test_adamw(size_t n, size_t off) {
    char name[128];
    const size_t na = n + 16, op = off, om = off * 3 % 16, ov = off * 5 % 16, os = off * 7 % 16;
    const size_t og = off * 9 % 16;
    float *p1a = rand_f(na, -1, 1), *m1a = rand_f(na, -0.1f, 0.1f), *v1a = rand_f(na, 0, 0.01f);
    float *ga = rand_f(na, -2, 2);
    float *p1 = p1a + op, *m1 = m1a + om, *v1 = v1a + ov, *g = ga + og;
    static const float edge[] = {0.0f, INFINITY, -INFINITY, NAN, 3e38f, 1e-30f, -0.0f};
    for (size_t i = 0; i < n; i += 5) g[i] = edge[(i / 5) % (sizeof edge / sizeof edge[0])];
    for (size_t i = 3; i < n; i += 11) v1[i] = 0.0f;
    float *p2a = copy_f(p1a, na), *m2a = copy_f(m1a, na), *v2a = copy_f(v1a, na);
    float *p2 = p2a + op, *m2 = m2a + om, *v2 = v2a + ov;
    bt_bf16 *s1a = malloc(na * sizeof *s1a), *s2a = malloc(na * sizeof *s2a);
    if (!s1a || !s2a) abort();
    for (size_t i = 0; i < na; i++) s1a[i] = s2a[i] = 0x7fc1; /* sentinel: a NaN pattern */
    bt_bf16 *s1 = s1a + os, *s2 = s2a + os;
    /* torch's scalars for step 3, lr 1e-3, wd 0.01, betas (0.9, 0.999), eps 1e-8, clip 0.5 */
    const adamw_coefs k = {.grad_scale = 0.5f, .decay = (float)(1.0 - 1e-3 * 0.01),
                           .b1 = 0.9f, .ob1 = (float)(1.0 - 0.9), .b2 = 0.999f,
                           .ob2 = (float)(1.0 - 0.999), .bc2_sqrt = (float)sqrt(1.0 - pow(0.999, 3)),
                           .eps = 1e-8f, .step_size = (float)(1e-3 / (1.0 - pow(0.9, 3)))};
    for (int with_shadow = 0; with_shadow < 2; with_shadow++) {
        adamw_update(p1, m1, v1, with_shadow ? s1 : NULL, g, n, &k);
        adamw_update_ref(p2, m2, v2, with_shadow ? s2 : NULL, g, n, &k);
        /* whole allocations: the elements around the span must be untouched too */
        snprintf(name, sizeof name, "adamw n=%zu off %zu shadow %d: p, m, v (bitwise)", n, off,
                 with_shadow);
        tu_check(memcmp(p1a, p2a, na * sizeof *p1a) == 0 &&
                     memcmp(m1a, m2a, na * sizeof *m1a) == 0 &&
                     memcmp(v1a, v2a, na * sizeof *v1a) == 0, "%s", name);
        snprintf(name, sizeof name, "adamw n=%zu off %zu shadow %d: bf16 shadow (bitwise)", n, off,
                 with_shadow);
        tu_check_bytes_equal(name, s1a, s2a, na * sizeof *s1a);
    }
    /* the fused zeroing: the same p, m, v and shadow bytes as the reference, and the gradient
     * +0.0f exactly over the span (memcmp against zeros: -0.0f fails), untouched around it */
    float *g1a = copy_f(ga, na), *g2a = copy_f(ga, na);
    for (int with_shadow = 0; with_shadow < 2; with_shadow++) {
        float *gz1 = g1a + og, *gz2 = g2a + og;
        memcpy(g1a, ga, na * sizeof *ga);
        memcpy(g2a, ga, na * sizeof *ga);
        adamw_update_zero_grad(p1, m1, v1, with_shadow ? s1 : NULL, gz1, n, &k);
        adamw_update_zero_grad_ref(p2, m2, v2, with_shadow ? s2 : NULL, gz2, n, &k);
        snprintf(name, sizeof name, "adamw zero_grad n=%zu off %zu shadow %d: p, m, v (bitwise)",
                 n, off, with_shadow);
        tu_check(memcmp(p1a, p2a, na * sizeof *p1a) == 0 &&
                     memcmp(m1a, m2a, na * sizeof *m1a) == 0 &&
                     memcmp(v1a, v2a, na * sizeof *v1a) == 0, "%s", name);
        snprintf(name, sizeof name, "adamw zero_grad n=%zu off %zu shadow %d: bf16 shadow "
                 "(bitwise)", n, off, with_shadow);
        tu_check_bytes_equal(name, s1a, s2a, na * sizeof *s1a);
        size_t bad = 0;
        const float zero = 0.0f;
        for (size_t i = 0; i < na; i++) {
            const int inside = i >= og && i < og + n;
            bad += memcmp(&g1a[i], inside ? &zero : &ga[i], sizeof zero) != 0;
        }
        tu_check(bad == 0, "adamw zero_grad n=%zu off %zu shadow %d: %zu gradient elements "
                 "wrong (+0 inside the span, untouched outside)", n, off, with_shadow, bad);
        snprintf(name, sizeof name, "adamw zero_grad n=%zu off %zu shadow %d: gradient = the "
                 "reference's (bitwise)", n, off, with_shadow);
        tu_check_bytes_equal(name, g1a, g2a, na * sizeof *g1a);
    }
    free(g1a), free(g2a);
    int written = 1, finite = 1; /* the shadow was written; finite inputs stay finite */
    for (size_t i = 0; i < n; i++) {
        written &= s1[i] == bt_bf16_from_f32(p1[i]);
        if (i % 5 != 0) finite &= isfinite(p1[i]) && isfinite(m1[i]) && isfinite(v1[i]);
    }
    tu_check(written && finite, "adamw n=%zu off %zu: shadow = bf16(p), finite rows finite", n,
             off);
    free(p1a), free(m1a), free(v1a), free(ga), free(p2a), free(m2a), free(v2a), free(s1a);
    free(s2a);
}

/* sum of squares: within n·2⁻⁵³ (relative to the sum, all terms >= 0) of the sequential
 * double sum; exact where every partial sum is representable (x = ±0.5: n/4); the same
 * bytes at every ISA level (16 fixed lanes) is checked by running this test under each
 * isa_* setup against the same exact value. */
static void test_sum_squares(size_t n) {
    float *x = rand_f(n, -3, 3);
    const double got = sum_squares(x, n), want = sum_squares_ref(x, n);
    tu_check(fabs(got - want) <= (double)n * 0x1p-53 * want, "sum_squares n=%zu: %.17g vs %.17g",
             n, got, want);
    for (size_t i = 0; i < n; i++) x[i] = i % 3 ? 0.5f : -0.5f;
    tu_check(sum_squares(x, n) == 0.25 * (double)n, "sum_squares of n=%zu halves = n/4", n);
    free(x);
}

/* zero_fill: every byte of the span zero, the bytes around it untouched (sizes below and
 * across the 2 MiB pieces the fast version threads over, and from the 64 MiB where it streams:
 * ops_blocks.h OPS_STREAM_MIN_BYTES), the span starting `off` (< 64) bytes into a line. */
static void test_zero_fill(size_t bytes, size_t off) {
    unsigned char *buf = malloc(bytes + 128);
    if (!buf) abort();
    for (size_t i = 0; i < bytes + 128; i++) buf[i] = (unsigned char)(i % 251 + 1);
    const size_t lo = 64 - (uintptr_t)buf % 64 + off; /* buf + lo: off bytes into a line */
    zero_fill(buf + lo, bytes);
    size_t bad = 0;
    for (size_t i = 0; i < bytes + 128; i++) {
        const int inside = i >= lo && i < lo + bytes;
        bad += inside ? buf[i] != 0 : buf[i] != (unsigned char)(i % 251 + 1);
    }
    tu_check(bad == 0, "zero_fill %zu bytes: %zu wrong bytes (inside zero, outside untouched)",
             bytes, bad);
    free(buf);
}

static void test_dropout(size_t n) {
    char name[128];
    const bt_dropout d = {.p = 0.1f, .seed = 0xfeedull + n};
    float *x = rand_f(n, -1, 1), *o1 = sentinel_f(n), *o2 = sentinel_f(n);
    dropout_forward(o1, x, n, &d);
    dropout_forward_ref(o2, x, n, &d);
    /* both scale in double and round once: bitwise */
    snprintf(name, sizeof name, "dropout fwd n=%zu (bitwise)", n);
    tu_check_bytes_equal(name, o1, o2, n * sizeof(float));
    float *dout = rand_f(n, -1, 1), *dx1 = rand_f(n, -1, 1), *dx2 = copy_f(dx1, n);
    dropout_backward(dx1, dout, n, &d, BT_DX_ADD);
    dropout_backward_ref(dx2, dout, n, &d, BT_DX_ADD);
    snprintf(name, sizeof name, "dropout bwd n=%zu (bitwise)", n);
    tu_check_bytes_equal(name, dx1, dx2, n * sizeof(float));
    float *dz = signed_zeros(dout, n);
    for (int on = 0; on < 2; on++) { /* with the mask, and NULL (identity) */
        dx_modes dm = dx_modes_new(n);
        for (int mo = 0; mo < 2; mo++) {
            float **dst = mo ? dm.set : dm.add;
            dropout_backward(dst[0], dz, n, on ? &d : NULL, mo ? BT_DX_SET : BT_DX_ADD);
            dropout_backward_ref(dst[1], dz, n, on ? &d : NULL, mo ? BT_DX_SET : BT_DX_ADD);
        }
        snprintf(name, sizeof name, "dropout bwd%s n=%zu", on ? "" : " (identity)", n);
        dx_modes_check(name, &dm);
    }
    free(dz);
    float *xi = copy_f(x, n);
    dropout_forward(xi, xi, n, &d);
    snprintf(name, sizeof name, "dropout fwd in place n=%zu (bitwise)", n);
    tu_check_bytes_equal(name, xi, o2, n * sizeof(float));
    dropout_forward(o1, x, n, NULL);
    snprintf(name, sizeof name, "dropout NULL is identity n=%zu", n);
    tu_check_bytes_equal(name, o1, x, n * sizeof(float));
    free(x), free(o1), free(o2), free(dout), free(dx1), free(dx2), free(xi);
}

/* The kept fraction is 1-p within statistical error, masks differ between seeds, and the
 * mask does not depend on the number of threads. */
static void test_dropout_properties(void) {
    const size_t n = 200003;
    const bt_dropout d = {.p = 0.1f, .seed = 42}, d2 = {.p = 0.1f, .seed = 43};
    size_t kept = 0, same = 0;
    for (size_t i = 0; i < n; i++) {
        kept += dropout_keep(&d, i);
        same += dropout_keep(&d, i) == dropout_keep(&d2, i);
    }
    const double frac = (double)kept / (double)n, sigma = sqrt(0.1 * 0.9 / (double)n);
    tu_check(fabs(frac - 0.9) < 6 * sigma,
             "dropout keeps %.5f of elements (p = 0.1; 6 sigma = %.5f)", frac, 6 * sigma);
    /* independent masks agree on 0.9² + 0.1² = 82% of elements; neighbours are independent:
     * both kept with probability 0.81 */
    size_t pairs = 0;
    for (size_t i = 0; i + 1 < n; i++) pairs += dropout_keep(&d, i) && dropout_keep(&d, i + 1);
    const double both = (double)pairs / (double)(n - 1);
    tu_check(fabs(both - 0.81) < 0.005,
             "dropout keeps neighbours i, i+1 together %.4f (expect 0.81)", both);
    const double agree = (double)same / (double)n;
    tu_check(fabs(agree - 0.82) < 0.01,
             "dropout masks of seeds 42 and 43 agree on %.4f (expect 0.82)", agree);
    /* the mask multiplies: a dropped NaN stays NaN, a dropped negative value becomes -0 */
    {
        float v[64], o[64];
        int nan_ok = 1, negzero_ok = 1, dropped = 0;
        for (int i = 0; i < 64; i++) v[i] = (i % 2) ? NAN : -2.0f;
        dropout_forward(o, v, 64, &d);
        for (int i = 0; i < 64; i++) {
            if (i % 2) nan_ok &= isnan(o[i]);
            else if (!dropout_keep(&d, (uint64_t)i)) {
                dropped++;
                negzero_ok &= o[i] == 0.0f && signbit(o[i]);
            }
        }
        tu_check(nan_ok && negzero_ok && dropped > 0,
                 "dropout: NaN stays NaN, dropped -2 becomes -0 (%d dropped)", dropped);
    }
    /* special values, kept and dropped, bit for bit as the reference (which multiplies by
     * the double 0 or 1/(1-p); the fast kernels select between the kept double product and
     * the float x * 0): NaN payloads of both signs, ±Inf, ±0, subnormals, ±FLT_MAX */
    {
        enum { NS = 12, NSV = 32 * NS };
        const uint32_t bits[NS] = {0x7fc00001u, 0xffa00002u, 0x7f800000u, 0xff800000u,
                                   0x00000000u, 0x80000000u, 0x00000001u, 0x807fffffu,
                                   0x7f7fffffu, 0xff7fffffu, 0x3f800000u, 0xbf000000u};
        float v[NSV], g[NSV], o[2][NSV], dx[2][NSV];
        for (int i = 0; i < NSV; i++) {
            memcpy(&v[i], &bits[i % NS], 4);
            memcpy(&g[i], &bits[(i / NS) % NS], 4); /* every pair of the values */
        }
        dropout_forward(o[0], v, NSV, &d);
        dropout_forward_ref(o[1], v, NSV, &d);
        tu_check_bytes_equal("dropout fwd special values (bitwise)", o[0], o[1], sizeof o[0]);
        for (int mo = 0; mo < 2; mo++) {
            memcpy(dx[0], g, sizeof g);
            memcpy(dx[1], g, sizeof g);
            dropout_backward(dx[0], v, NSV, &d, mo ? BT_DX_SET : BT_DX_ADD);
            dropout_backward_ref(dx[1], v, NSV, &d, mo ? BT_DX_SET : BT_DX_ADD);
            tu_check_bytes_equal(mo ? "dropout bwd SET special values (bitwise)"
                                    : "dropout bwd ADD special values (bitwise)",
                                 dx[0], dx[1], sizeof dx[0]);
        }
    }
#ifdef _OPENMP
    float *x = rand_f(n, -1, 1), *o1 = sentinel_f(n), *o2 = sentinel_f(n);
    const int nt = omp_get_max_threads();
    omp_set_num_threads(1);
    dropout_forward(o1, x, n, &d);
    omp_set_num_threads(3);
    dropout_forward(o2, x, n, &d);
    omp_set_num_threads(nt);
    tu_check_bytes_equal("dropout fwd: 1 thread == 3 threads", o1, o2, n * sizeof(float));
    free(x), free(o1), free(o2);
#endif
}

/* Column sums (layernorm dw, bias_add dbias, linear db) and embedding scatter use fixed
 * blocks, so 1 and 3 threads give the same bits. */
static void test_thread_independence(void) {
#ifdef _OPENMP
    const size_t n = 257, c = 768;
    float *x = rand_f(n * c, -1, 1), *w = rand_f(c, 0.5f, 1.5f), *b = rand_f(c, -1, 1);
    float *out = fvec(n * c), *mean = fvec(n), *rstd = fvec(n), *dout = rand_f(n * c, -1, 1);
    layernorm_forward(out, mean, rstd, x, w, b, n, c, 1e-5f);
    float *g[2][3];
    const int nt = omp_get_max_threads();
    for (int t = 0; t < 2; t++) {
        omp_set_num_threads(t ? 3 : 1);
        g[t][0] = calloc(n * c, sizeof(float)), g[t][1] = calloc(c, sizeof(float)),
        g[t][2] = calloc(c, sizeof(float));
        layernorm_backward(g[t][0], g[t][1], g[t][2], dout, x, w, mean, rstd, n, c, BT_DX_ADD);
        bias_add_backward(NULL, g[t][2], dout, n, c);
    }
    omp_set_num_threads(nt);
    tu_check(memcmp(g[0][0], g[1][0], n * c * sizeof(float)) == 0 &&
                 memcmp(g[0][1], g[1][1], c * sizeof(float)) == 0 &&
                 memcmp(g[0][2], g[1][2], c * sizeof(float)) == 0,
             "layernorm bwd + bias_add dbias: 1 thread == 3 threads, bitwise");
    for (int t = 0; t < 2; t++) free(g[t][0]), free(g[t][1]), free(g[t][2]);
    free(x), free(w), free(b), free(out), free(mean), free(rstd), free(dout);
#else
    tu_check(1, "thread independence: built without OpenMP, one thread only");
#endif
}

/* Column sums (bias_add dbias; linear db shares the code, ops.c colsum_run): each column's
 * double accumulator is summed over the rows in order, as the reference does, so the fast
 * sums equal the reference's bit for bit, whatever the column grouping and thread count:
 * odd widths, widths above one task's 4096 columns, 2600 rows (base's image FFN), and
 * non-finite and extreme inputs (NaN, +-Inf, 3e38 whose sum overflows float, subnormals). */
static void test_colsum(size_t n, size_t c) {
    char name[128];
    float *dout = rand_f(n * c, -1, 1);
    static const float special[] = {NAN, INFINITY, -INFINITY, 3e38f, 1e-40f, -0.0f};
    for (size_t s = 0; s < sizeof special / sizeof special[0] && c > 2 * s; s++)
        dout[(n / 2) * c + 2 * s] = special[s]; /* one special value in columns 0, 2, 4, ... */
    if (c > 13 && n > 1) dout[c + 13] = 3e38f; /* column 13: 2 x 3e38 overflows a float sum */
    if (c > 13) dout[13] = 3e38f;
    float *db1 = rand_f(c, -1, 1), *db2 = copy_f(db1, c);
    bias_add_backward(NULL, db1, dout, n, c);
    bias_add_backward_ref(NULL, db2, dout, n, c);
    snprintf(name, sizeof name, "column sums n=%zu c=%zu with NaN/Inf (bitwise)", n, c);
    tu_check_bytes_equal(name, db1, db2, c * sizeof(float));
#ifdef _OPENMP
    const int nt = omp_get_max_threads();
    float *db3 = copy_f(db1, c); /* db1 and db3 each get the sums once more */
    omp_set_num_threads(3);
    bias_add_backward(NULL, db3, dout, n, c);
    omp_set_num_threads(1);
    bias_add_backward(NULL, db1, dout, n, c);
    omp_set_num_threads(nt);
    snprintf(name, sizeof name, "column sums n=%zu c=%zu: 1 thread == 3 threads (bitwise)", n, c);
    tu_check_bytes_equal(name, db1, db3, c * sizeof(float));
    free(db3);
#endif
    free(dout), free(db1), free(db2);
}

/* The MLP activation backward fused with its bias sums and bf16 rounding (ops.h
 * gelu_backward_bias): for the fast kernels and for the references, bit for bit the three
 * separate passes it replaces (the act backward with BT_DX_SET, bias_add_backward's column
 * sums of its output, bf16_from_f32 of it), with dx or dx16 or dbias left out; fast vs
 * reference with the fp32 tolerance; 1 thread == 3 threads. Outputs pre-filled with NaN
 * sentinels; x and dout hold NaN, +-Inf, signed zeros and the activation tails. */
typedef void (*bias_bwd)(float *, float *, const float *, size_t, size_t);
typedef void (*to_bf16)(bt_bf16 *, const float *, size_t);
typedef void (*gelu_bias)(float *, bt_bf16 *, float *, const float *, const float *, size_t,
                          size_t, int);

static bt_bf16 *sentinel_h(size_t n); /* (n) bf16 NaN sentinels (bf16 outputs, below) */

/* got == want bitwise except that any NaN equals any NaN: where the input is NaN the same
 * expression may propagate another NaN operand (its sign) in a vector lane than in the
 * scalar remainder, so a NaN's bits depend on its position in the call (quick_gelu's
 * sigmoid). An unwritten output keeps its sentinel's bits and still fails. n elements of
 * 4 (float) or 2 (bf16) bytes. */
static void check_bits_nan(const char *name, const void *got, const void *want, size_t n,
                           size_t esize) {
    unsigned char *g = malloc(n * esize + 1), *w = malloc(n * esize + 1);
    if (!g || !w) abort();
    memcpy(g, got, n * esize), memcpy(w, want, n * esize);
    const float sent = tu_sentinel_f32();
    for (size_t i = 0; i < n; i++) {
        float a, b;
        if (esize == 4) {
            memcpy(&a, g + 4 * i, 4), memcpy(&b, w + 4 * i, 4);
            if (memcmp(&a, &sent, 4) == 0) continue; /* unwritten: compared as is */
        } else {
            bt_bf16 ha, hb;
            memcpy(&ha, g + 2 * i, 2), memcpy(&hb, w + 2 * i, 2);
            if (ha == 0xffff) continue; /* sentinel_h's value */
            a = bt_f32_from_bf16(ha), b = bt_f32_from_bf16(hb);
        }
        if (isnan(a) && isnan(b)) memcpy(g + esize * i, w + esize * i, esize);
    }
    tu_check_bytes_equal(name, g, w, n * esize);
    free(g), free(w);
}

/* fused (dx, dx16, dbias: each given or not, bits [0..2] of `give`) == separate, bitwise */
static void check_gelu_bias_split(const char *who, pw_bwd_mode act, bias_bwd bias, to_bf16 round,
                                  gelu_bias fused, const float *dout, const float *x,
                                  const float *db0, size_t n, size_t c, int quick, int give) {
    char name[200];
    const size_t nc = n * c;
    float *g = sentinel_f(nc), *dbs = copy_f(db0, c);
    bt_bf16 *g16 = sentinel_h(nc);
    act(g, dout, x, nc, BT_DX_SET);
    bias(NULL, dbs, g, n, c);
    round(g16, g, nc);
    float *dx = (give & 1) ? sentinel_f(nc) : NULL, *db = (give & 4) ? copy_f(db0, c) : NULL;
    bt_bf16 *dx16 = (give & 2) ? sentinel_h(nc) : NULL;
    fused(dx, dx16, db, dout, x, n, c, quick);
    const char *op = quick ? "quick_gelu" : "gelu";
    if (dx) {
        snprintf(name, sizeof name, "%s_backward_bias %s dx = act bwd SET n=%zu c=%zu give=%d",
                 op, who, n, c, give);
        check_bits_nan(name, dx, g, nc, sizeof *dx);
    }
    if (dx16) {
        snprintf(name, sizeof name, "%s_backward_bias %s dx16 = bf16(act bwd) n=%zu c=%zu give=%d",
                 op, who, n, c, give);
        check_bits_nan(name, dx16, g16, nc, sizeof *dx16);
    }
    if (db) {
        snprintf(name, sizeof name, "%s_backward_bias %s dbias = bias_add sums n=%zu c=%zu give=%d",
                 op, who, n, c, give);
        check_bits_nan(name, db, dbs, c, sizeof *db);
    }
    free(g), free(dbs), free(g16), free(dx), free(db), free(dx16);
}

static void test_gelu_bias(size_t n, size_t c, int quick) {
    char name[160];
    const size_t nc = n * c;
    float *x = rand_f(nc, -6, 6), *dout = rand_f(nc, -1, 1);
    dout[0] = -0.0f; /* the sign rule of BT_DX_SET: 0 + (-0 act') = +0 */
    static const float xs[] = {0.0f, -0.0f, 1e-6f, -1e-6f, 30.0f, -30.0f, 90.0f, -90.0f};
    for (size_t s = 0; s < sizeof xs / sizeof xs[0] && s < nc; s++) x[nc - 1 - s] = xs[s];
    if (nc > 16) {
        dout[nc / 2] = NAN, dout[nc / 2 + 1] = INFINITY, x[nc / 3] = NAN, x[nc / 3 + 1] = -INFINITY;
        dout[2] = 3e38f, x[2] = 5.0f; /* with a column 2 of 3e38 and 2 rows: overflowing sums */
        if (n > 1) dout[c + 2] = 3e38f, x[c + 2] = 5.0f;
    }
    float *db0 = rand_f(c, -1, 1);
    const pw_bwd_mode act_f = quick ? quick_gelu_backward : gelu_backward;
    const pw_bwd_mode act_r = quick ? quick_gelu_backward_ref : gelu_backward_ref;
    for (int give = 1; give < 8; give++) {
        if (!(give & 3)) continue; /* dx or dx16 required */
        check_gelu_bias_split("fast", act_f, bias_add_backward, bf16_from_f32, gelu_backward_bias,
                              dout, x, db0, n, c, quick, give);
        check_gelu_bias_split("ref", act_r, bias_add_backward_ref, bf16_from_f32_ref,
                              gelu_backward_bias_ref, dout, x, db0, n, c, quick, give);
    }
    /* fast vs reference, on finite data (the specials' NaN positions agree above) */
    float *xf = rand_f(nc, -6, 6), *df = rand_f(nc, -1, 1);
    float *dx1 = sentinel_f(nc), *dx2 = sentinel_f(nc);
    float *db1 = copy_f(db0, c), *db2 = copy_f(db0, c);
    const char *op = quick ? "quick_gelu" : "gelu";
    gelu_backward_bias(dx1, NULL, db1, df, xf, n, c, quick);
    gelu_backward_bias_ref(dx2, NULL, db2, df, xf, n, c, quick);
    snprintf(name, sizeof name, "%s_backward_bias fast vs ref dx n=%zu c=%zu", op, n, c);
    close_f32(name, dx1, dx2, nc, RTOL_F32);
    snprintf(name, sizeof name, "%s_backward_bias fast vs ref dbias n=%zu c=%zu", op, n, c);
    close_f32(name, db1, db2, c, RTOL_F32);
#ifdef _OPENMP
    const int nt = omp_get_max_threads();
    float *dx3 = sentinel_f(nc), *db3 = copy_f(db0, c);
    memcpy(db1, db0, c * sizeof *db1);
    omp_set_num_threads(1);
    gelu_backward_bias(dx1, NULL, db1, df, xf, n, c, quick);
    omp_set_num_threads(3);
    gelu_backward_bias(dx3, NULL, db3, df, xf, n, c, quick);
    omp_set_num_threads(nt);
    snprintf(name, sizeof name, "%s_backward_bias n=%zu c=%zu: 1 thread == 3 threads (bitwise)",
             op, n, c);
    tu_check(memcmp(dx1, dx3, nc * sizeof *dx1) == 0 && memcmp(db1, db3, c * sizeof *db1) == 0,
             "%s", name);
    free(dx3), free(db3);
#endif
    free(x), free(dout), free(db0), free(xf), free(df), free(dx1), free(dx2), free(db1), free(db2);
}

/* --- cross entropy, l2 normalize ---------------------------------------------------------- */

static void test_cross_entropy(size_t n, size_t v) {
    char name[128];
    float *logits = rand_f(n * v, -6, 6);
    int32_t *t = malloc(n * sizeof(int32_t));
    for (size_t i = 0; i < n; i++) t[i] = (int32_t)(tu_rng_next(&rng) % v);
    if (n > 1) t[n - 1] = -100; /* ignored */
    if (n > 3) t[1] = -100;
    float *p1 = sentinel_f(n * v), *p2 = sentinel_f(n * v);
    size_t nv1 = 0, nv2 = 0;
    const float l1 = cross_entropy_forward(p1, logits, t, n, v, -100, &nv1);
    const float l2 = cross_entropy_forward_ref(p2, logits, t, n, v, -100, &nv2);
    snprintf(name, sizeof name, "cross entropy loss n=%zu v=%zu", n, v);
    tu_check(nv1 == nv2 && fabs((double)l1 - (double)l2) <= RTOL_F32 * fabs((double)l2),
             "%s: %.9g vs %.9g, n_valid %zu vs %zu", name, (double)l1, (double)l2, nv1, nv2);
    snprintf(name, sizeof name, "cross entropy probs n=%zu v=%zu", n, v);
    close_f32(name, p1, p2, n * v, RTOL_F32);
    int untouched = 1; /* ignored rows keep the sentinel in the fast output */
    for (size_t i = 0; i < n; i++)
        if (t[i] == -100)
            for (size_t j = 0; j < v; j++) untouched &= isnan(p1[i * v + j]);
    tu_check(untouched, "cross entropy n=%zu v=%zu: ignored rows of probs untouched", n, v);
    float *inplace = copy_f(logits, n * v); /* probs aliasing logits */
    const float l3 = cross_entropy_forward(inplace, inplace, t, n, v, -100, NULL);
    for (size_t i = 0; i < n; i++) /* ignored rows keep their logits; compare valid rows */
        if (t[i] == -100) memcpy(inplace + i * v, p2 + i * v, v * sizeof(float));
    snprintf(name, sizeof name, "cross entropy in place n=%zu v=%zu", n, v);
    tu_check(l3 == l1, "%s: loss %.9g vs %.9g", name, (double)l3, (double)l1);
    close_f32(name, inplace, p2, n * v, RTOL_F32);
    free(inplace);
    float *d1 = rand_f(n * v, -1, 1), *d2 = copy_f(d1, n * v);
    cross_entropy_backward(d1, p2, t, n, v, -100, 1.3f);
    cross_entropy_backward_ref(d2, p2, t, n, v, -100, 1.3f);
    snprintf(name, sizeof name, "cross entropy bwd n=%zu v=%zu", n, v);
    close_f32(name, d1, d2, n * v, RTOL_F32);
    free(logits), free(t), free(p1), free(p2), free(d1), free(d2);
}

static void test_l2_normalize(size_t n, size_t c) {
    char name[128];
    float *x = rand_f(n * c, -1, 1);
    if (n > 2)
        for (size_t j = 0; j < c; j++) x[c + j] = 0.0f; /* a zero row: norm 0 < eps */
    float *o1 = sentinel_f(n * c), *o2 = sentinel_f(n * c), *m1 = sentinel_f(n),
          *m2 = sentinel_f(n);
    l2_normalize_forward(o1, m1, x, n, c);
    l2_normalize_forward_ref(o2, m2, x, n, c);
    snprintf(name, sizeof name, "l2_normalize fwd n=%zu c=%zu", n, c);
    close_f32(name, o1, o2, n * c, RTOL_F32);
    snprintf(name, sizeof name, "l2_normalize fwd norm n=%zu c=%zu", n, c);
    close_f32(name, m1, m2, n, RTOL_F32);
    float *dout = rand_f(n * c, -1, 1), *d1 = rand_f(n * c, -1, 1), *d2 = copy_f(d1, n * c);
    l2_normalize_backward(d1, dout, o2, m2, n, c);
    l2_normalize_backward_ref(d2, dout, o2, m2, n, c);
    snprintf(name, sizeof name, "l2_normalize bwd n=%zu c=%zu", n, c);
    close_f32(name, d1, d2, n * c, RTOL_F32);
    free(x), free(o1), free(o2), free(m1), free(m2), free(dout), free(d1), free(d2);
}

/* --- fp32 <-> bf16 -------------------------------------------------------------------------- */

static float f32_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Inputs with the expected bf16, derived by hand from round-to-nearest-even on the top 16
 * bits (the low 16 bits are the discarded part; 0x8000 is exactly half an ulp). */
static const struct {
    uint32_t in;
    uint16_t want;
} BF16_CASES[] = {
    {0x3f800000u, 0x3f80}, /* 1.0 exact */
    {0x3f808000u, 0x3f80}, /* tie, kept part even (…80): stays */
    {0x3f818000u, 0x3f82}, /* tie, kept part odd (…81): rounds up to even */
    {0x3f808001u, 0x3f81}, /* just above the tie: up */
    {0x3f807fffu, 0x3f80}, /* just below the tie: down */
    {0xbf818000u, 0xbf82}, /* negative tie, odd: magnitude up */
    {0x7f7fffffu, 0x7f80}, /* FLT_MAX rounds up to +Inf */
    {0x7f800000u, 0x7f80}, /* +Inf */
    {0xff800000u, 0xff80}, /* -Inf */
    {0x7fc00000u, 0x7fc0}, /* quiet NaN */
    {0x7f800001u, 0x7fc0}, /* signalling NaN, payload only in low bits: quieted, stays NaN */
    {0xff812345u, 0xffc1}, /* negative NaN: sign and top payload kept, quiet bit set */
    {0x00000000u, 0x0000}, /* +0 */
    {0x80000000u, 0x8000}, /* -0 */
    {0x00000001u, 0x0000}, /* smallest subnormal: below half an ulp */
    {0x00008000u, 0x0000}, /* subnormal tie, even: down */
    {0x00018000u, 0x0002}, /* subnormal tie, odd: up */
    {0x007fffffu, 0x0080}, /* largest subnormal rounds up to FLT_MIN's bf16 */
    {0x80400000u, 0x8040}, /* negative subnormal, exact */
};
#define NBF16_CASES (sizeof BF16_CASES / sizeof BF16_CASES[0])

static void test_bf16_impl(const char *impl) {
    char name[160];
    if (!ops_bf16_conversion_select(impl)) {
        printf("# bf16 conversion '%s' not supported by this CPU: not tested here\n", impl);
        return;
    }
    /* the special cases, at every offset of buffers of 64, 53 and 5 elements: the vector
     * body (32 at a time) and the tails past it (here 21 and 5 elements) */
    int ok = 1;
    float in[64];
    bt_bf16 out[64], want[64];
    static const size_t lens[] = {64, 53, 5};
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
        const size_t len = lens[li];
        for (size_t pos = 0; pos < len; pos++) {
            tu_fill_uniform_f32(&rng, in, len, -4, 4);
            for (size_t c = 0; c < NBF16_CASES; c++) {
                in[pos] = f32_bits(BF16_CASES[c].in);
                bf16_from_f32(out, in, len);
                bf16_from_f32_ref(want, in, len);
                ok &= out[pos] == BF16_CASES[c].want &&
                      memcmp(out, want, len * sizeof *out) == 0;
            }
        }
    }
    snprintf(name, sizeof name,
             "bf16_from_f32 [%s]: ties-to-even, NaN, Inf, subnormals at every offset of 64, "
             "53 and 5 elements", impl);
    tu_check(ok, "%s", name);
    /* every length 0..200 (all odd ones included) and a large odd one, random bits */
    ok = 1;
    const size_t big = 100003;
    uint32_t *bits = malloc(big * sizeof(uint32_t));
    float *x = fvec(big), *y1 = sentinel_f(big), *y2 = sentinel_f(big);
    bt_bf16 *h1 = malloc(big * sizeof(bt_bf16)), *h2 = malloc(big * sizeof(bt_bf16));
    for (size_t i = 0; i < big; i++) bits[i] = (uint32_t)tu_rng_next(&rng);
    memcpy(x, bits, big * sizeof(float));
    for (size_t len = 0; len <= 200 && ok; len++) {
        memset(h1, 0xab, (len + 8) * sizeof(bt_bf16));
        bf16_from_f32(h1 + 3, x, len);
        bf16_from_f32_ref(h2, x, len);
        ok &= memcmp(h1 + 3, h2, len * sizeof(bt_bf16)) == 0 && h1[3 + len] == 0xabab &&
              h1[2] == 0xabab;
    }
    snprintf(name, sizeof name,
             "bf16_from_f32 [%s]: random bits, lengths 0..200, unaligned, no overrun", impl);
    tu_check(ok, "%s", name);
    bf16_from_f32(h1, x, big);
    bf16_from_f32_ref(h2, x, big);
    snprintf(name, sizeof name, "bf16_from_f32 [%s]: random bits, n=%zu", impl, big);
    tu_check_bytes_equal(name, h1, h2, big * sizeof(bt_bf16));
    /* f32_from_bf16: all 65536 bit patterns, bitwise (NaNs compared as bits) */
    for (size_t i = 0; i < 65536; i++) h1[i] = (bt_bf16)i;
    f32_from_bf16(y1, h1, 65536);
    f32_from_bf16_ref(y2, h1, 65536);
    snprintf(name, sizeof name, "f32_from_bf16 [%s]: all 65536 values", impl);
    tu_check_bytes_equal(name, y1, y2, 65536 * sizeof(float));
    ok = 1;
    for (size_t len = 0; len <= 67; len++) {
        tu_fill_sentinel_f32(y1, len + 4);
        f32_from_bf16(y1 + 1, h1 + 7, len);
        f32_from_bf16_ref(y2, h1 + 7, len);
        ok &= memcmp(y1 + 1, y2, len * sizeof(float)) == 0 && isnan(y1[0]) && isnan(y1[len + 1]);
    }
    snprintf(name, sizeof name, "f32_from_bf16 [%s]: lengths 0..67, unaligned, no overrun", impl);
    tu_check(ok, "%s", name);
    /* the serial forms (GEMM operand packing): same bytes, odd unaligned lengths */
    ok = 1;
    for (size_t len = 0; len <= 67; len++) {
        memset(h1, 0xab, (len + 8) * sizeof(bt_bf16));
        bf16_from_f32_serial(h1 + 1, x + 5, len);
        bf16_from_f32_ref(h2, x + 5, len);
        ok &= memcmp(h1 + 1, h2, len * sizeof(bt_bf16)) == 0 && h1[1 + len] == 0xabab;
        tu_fill_sentinel_f32(y1, len + 4);
        f32_from_bf16_serial(y1 + 1, h2, len);
        f32_from_bf16_ref(y2, h2, len);
        ok &= memcmp(y1 + 1, y2, len * sizeof(float)) == 0 && isnan(y1[len + 1]);
    }
    bf16_from_f32_serial(h1, x, big);
    bf16_from_f32_ref(h2, x, big);
    ok &= memcmp(h1, h2, big * sizeof(bt_bf16)) == 0;
    snprintf(name, sizeof name, "bf16_from_f32_serial / f32_from_bf16_serial [%s]: bytes of the "
             "reference, lengths 0..67 and %zu, no overrun", impl, big);
    tu_check(ok, "%s", name);
    free(bits), free(x), free(y1), free(y2), free(h1), free(h2);
}

static void test_bf16(void) {
    char best[32];
    snprintf(best, sizeof best, "%s", ops_bf16_conversion_name());
    printf("# bf16 conversion chosen for this CPU: %s\n", best);
    test_bf16_impl("scalar");
    test_bf16_impl("avx512f");
    test_bf16_impl("avx512bf16");
    tu_check(!ops_bf16_conversion_select("no-such-isa"), "an unknown conversion name is refused");
    ops_bf16_conversion_select(best);
}

/* --- bf16-output forwards ------------------------------------------------------------------
 * layernorm_forward_bf16, gelu_forward_bf16, quick_gelu_forward_bf16 (ops.h): each must give
 * the bytes bf16_from_f32 makes of its fp32 kernel's output (fast of fast, reference of
 * reference; the statistics bit for bit too), every element written (outputs pre-filled with
 * 0xffff, a NaN no rounded finite value equals). Fast vs reference: their fp32 values differ
 * by the RTOL_F32 of the header, which rounding to bf16 can turn into one bf16 ulp (2⁻⁸
 * relative) where a value sits near a rounding boundary: rtol 2⁻⁸ + RTOL_F32. */
#define RTOL_BF16_OUT (0.00390625 + RTOL_F32)

static bt_bf16 *sentinel_h(size_t n) {
    bt_bf16 *p = malloc((n ? n : 1) * sizeof(bt_bf16));
    if (!p) abort();
    memset(p, 0xff, (n ? n : 1) * sizeof(bt_bf16));
    return p;
}

/* got (bf16) equals bf16_from_f32(want32), bitwise */
static void check_rounded(const char *name, const bt_bf16 *got, const float *want32, size_t n) {
    bt_bf16 *want = sentinel_h(n);
    bf16_from_f32(want, want32, n);
    tu_check_bytes_equal(name, got, want, n * sizeof(bt_bf16));
    free(want);
}

/* fast vs reference bf16 outputs, widened, with RTOL_BF16_OUT */
static void check_bf16_close(const char *name, const bt_bf16 *got, const bt_bf16 *want, size_t n) {
    float *g = fvec(n), *w = fvec(n);
    f32_from_bf16_ref(g, got, n);
    f32_from_bf16_ref(w, want, n);
    close_f32(name, g, w, n, RTOL_BF16_OUT);
    free(g), free(w);
}

static void test_layernorm_bf16(size_t n, size_t c) {
    char name[128];
    float *x = rand_f(n * c, -3, 3), *w = rand_f(c, 0.5f, 1.5f), *b = rand_f(c, -1, 1);
    for (size_t j = 0; j < c; j++) x[j] += 10.0f; /* row 0 has a large mean */
    float *o32 = sentinel_f(n * c), *m32 = sentinel_f(n), *r32 = sentinel_f(n);
    float *m16 = sentinel_f(n), *r16 = sentinel_f(n);
    bt_bf16 *h1 = sentinel_h(n * c), *h2 = sentinel_h(n * c);
    layernorm_forward(o32, m32, r32, x, w, b, n, c, 1e-5f);
    layernorm_forward_bf16(h1, m16, r16, x, w, b, n, c, 1e-5f);
    snprintf(name, sizeof name, "layernorm_forward_bf16 = bf16(layernorm_forward) n=%zu c=%zu", n,
             c);
    check_rounded(name, h1, o32, n * c);
    snprintf(name, sizeof name, "layernorm_forward_bf16 mean, rstd bitwise n=%zu c=%zu", n, c);
    tu_check(memcmp(m16, m32, n * sizeof(float)) == 0 && memcmp(r16, r32, n * sizeof(float)) == 0,
             "%s", name);
    layernorm_forward_ref(o32, m32, r32, x, w, b, n, c, 1e-5f);
    layernorm_forward_bf16_ref(h2, m16, r16, x, w, b, n, c, 1e-5f);
    snprintf(name, sizeof name, "layernorm_forward_bf16_ref = bf16(ref) n=%zu c=%zu", n, c);
    check_rounded(name, h2, o32, n * c);
    snprintf(name, sizeof name, "layernorm_forward_bf16 fast vs ref n=%zu c=%zu", n, c);
    check_bf16_close(name, h1, h2, n * c);
    free(x), free(w), free(b), free(o32), free(m32), free(r32), free(m16), free(r16);
    free(h1), free(h2);
}

typedef void (*pw_fwd_bf16)(bt_bf16 *, const float *, size_t);

static void test_pointwise_bf16(const char *op, pw_fwd fast_f, pw_fwd ref_f, pw_fwd_bf16 fast_h,
                                pw_fwd_bf16 ref_h, size_t n) {
    char name[128];
    float *x = rand_f(n, -6, 6), *o32 = sentinel_f(n);
    if (n > 9) { /* the tails, the centre and a NaN */
        x[0] = 0.0f, x[1] = -0.0f, x[2] = 1e-6f, x[3] = -1e-6f;
        x[4] = 30.0f, x[5] = -30.0f, x[6] = 90.0f, x[7] = -90.0f, x[8] = NAN;
    }
    bt_bf16 *h1 = sentinel_h(n), *h2 = sentinel_h(n);
    fast_f(o32, x, n);
    fast_h(h1, x, n);
    snprintf(name, sizeof name, "%s_forward_bf16 = bf16(%s_forward) n=%zu", op, op, n);
    check_rounded(name, h1, o32, n);
    ref_f(o32, x, n);
    ref_h(h2, x, n);
    snprintf(name, sizeof name, "%s_forward_bf16_ref = bf16(ref) n=%zu", op, n);
    check_rounded(name, h2, o32, n);
    if (n > 9) x[8] = 0.5f; /* the tolerance check below compares numbers */
    fast_h(h1, x, n);
    ref_h(h2, x, n);
    snprintf(name, sizeof name, "%s_forward_bf16 fast vs ref n=%zu", op, n);
    check_bf16_close(name, h1, h2, n);
    free(x), free(o32), free(h1), free(h2);
}

static void test_bf16_outputs(void) {
    for (size_t i = 0; i < NROWS; i++)
        for (size_t j = 0; j < NCOLS; j++) test_layernorm_bf16(ROWS[i], COLS[j]);
    test_layernorm_bf16(3, 2500); /* rows longer than the kernel's 1024-element span */
    static const size_t N[] = {0, 1, 7, 33, 1025, 8191, 100003};
    for (size_t i = 0; i < sizeof N / sizeof N[0]; i++) {
        test_pointwise_bf16("gelu", gelu_forward, gelu_forward_ref, gelu_forward_bf16,
                            gelu_forward_bf16_ref, N[i]);
        test_pointwise_bf16("quick_gelu", quick_gelu_forward, quick_gelu_forward_ref,
                            quick_gelu_forward_bf16, quick_gelu_forward_bf16_ref, N[i]);
    }
}

/* ops_use_reference(1) routes the public kernels to the references (bitwise). */
static void test_dispatch_switch(void) {
    const size_t n = 7, c = 33;
    float *x = rand_f(n * c, -3, 3), *o1 = sentinel_f(n * c), *o2 = sentinel_f(n * c);
    ops_use_reference(1);
    gelu_forward(o1, x, n * c);
    ops_use_reference(0);
    gelu_forward_ref(o2, x, n * c);
    tu_check_bytes_equal("ops_use_reference(1): public gelu is the reference", o1, o2,
                         n * c * sizeof(float));
    free(x), free(o1), free(o2);
}

int main(void) {
    tu_rng_seed(&rng, 77);
    kernels_init();
    ops_use_reference(0);

    for (size_t i = 0; i < NROWS; i++)
        for (size_t j = 0; j < NCOLS; j++) {
            test_layernorm(ROWS[i], COLS[j]);
            test_softmax(ROWS[i], COLS[j]);
            test_bias_residual(ROWS[i], COLS[j]);
            test_l2_normalize(ROWS[i], COLS[j]);
            test_embedding(ROWS[i], COLS[j]);
        }
    static const size_t PW_N[] = {1, 7, 33, 257, 8191, 100003};
    for (size_t i = 0; i < sizeof PW_N / sizeof PW_N[0]; i++) {
        const size_t n = PW_N[i];
        test_pointwise("gelu", gelu_forward, gelu_forward_ref, NULL, NULL, gelu_backward,
                       gelu_backward_ref, 0, n, 6);
        test_pointwise("quick_gelu", quick_gelu_forward, quick_gelu_forward_ref, NULL, NULL,
                       quick_gelu_backward, quick_gelu_backward_ref, 0, n, 6);
        test_pointwise("tanh", tanh_forward, tanh_forward_ref, tanh_backward, tanh_backward_ref,
                       NULL, NULL, 1, n, 4);
        test_dropout(n);
        test_adamw(n, 0);
        test_sum_squares(n);
    }
    test_adamw(65536, 0); /* the first size that streams the shadow */
    for (size_t off = 1; off < 16; off += 7) test_adamw(65536 + 8192 + 13, off);
    test_zero_fill(0, 0);
    test_zero_fill(7, 32);
    test_zero_fill(((size_t)1 << 21) - 3, 32);
    test_zero_fill(((size_t)5 << 21) + 12345, 32);
    test_zero_fill((size_t)64 << 20, 0); /* the first size that streams */
    test_zero_fill(((size_t)64 << 20) + 12345, 37);
    test_activation_tails();
    test_dropout_properties();
    test_thread_independence();
    test_colsum(1, 1);
    test_colsum(3, 17);
    test_colsum(257, 33);
    test_colsum(2600, 771);
    test_colsum(5, 8200); /* three and more tasks of at most 4096 columns */
    for (int q = 0; q < 2; q++) { /* odd sizes, 2600 x 3072 (base's image MLP), > 4096 cols */
        test_gelu_bias(1, 1, q);
        test_gelu_bias(7, 33, q);
        test_gelu_bias(257, 771, q);
        test_gelu_bias(3, 8200, q);
        test_gelu_bias(2600, 3072, q);
    }

    test_cross_entropy(1, 7);
    test_cross_entropy(7, 33);
    test_cross_entropy(5, 257);
    test_cross_entropy(3, 50265); /* the RoBERTa vocabulary (MLM) */
    test_cross_entropy(257, 1);

    for (int cm = 0; cm < 2; cm++) {
        const gemm_compute comp = cm ? GEMM_COMPUTE_BF16 : GEMM_COMPUTE_F32;
        test_linear(1, 1, 1, comp, 0);
        test_linear(7, 33, 17, comp, 0);
        test_linear(257, 65, 33, comp, cm);
        test_linear(33, 768, 7, comp, cm);
        /* several 64-column blocks of the bias sums, threaded (on the native bf16 route the
         * sums share a pass with dout's bf16 rounding) */
        test_linear(650, 96, 200, comp, cm);
    }
    test_linear_set_native(256, 768, 1536);

    /* both threading strategies of attention (ops.h), fp32 and bf16 */
    const bt_dropout drop = {.p = 0.1f, .seed = 2024};
    static const char *modes[] = {"blocks", "gemm"};
    for (int md = 0; md < 2; md++) {
        tu_check(ops_attention_threads_select(modes[md]), "attention threading '%s' selected",
                 modes[md]);
        for (int cm = 0; cm < 2; cm++) {
            const gemm_compute comp = cm ? GEMM_COMPUTE_BF16 : GEMM_COMPUTE_F32;
            char label[160];
#define ATT(desc, ...)                                                                     \
    do {                                                                                   \
        snprintf(label, sizeof label, "%s [%s, %s]", desc, cm ? "bf16" : "f32", modes[md]); \
        test_attention(label, __VA_ARGS__, comp);                                          \
    } while (0)
            ATT("B1 NH1 T1 D1", 1, 1, 1, 1, 1, 1, 0, NULL);
            ATT("self B2 NH3 T7 D8 masked", 2, 3, 7, 7, 8, 1, 1, NULL);
            ATT("self B2 NH3 T7 D8 masked dropout", 2, 3, 7, 7, 8, 1, 1, &drop);
            ATT("cross B2 NH2 Tq7 Tk33 D16 masked dropout", 2, 2, 7, 33, 16, 0, 1, &drop);
            ATT("self B2 NH12 T40 D64 masked (text)", 2, 12, 40, 40, 64, 1, 1, NULL);
            ATT("self B1 NH2 T257 D64 dropout", 1, 2, 257, 257, 64, 1, 0, &drop);
#undef ATT
        }
        test_attention_fully_masked();
    }
    tu_check(!ops_attention_threads_select("no-such-mode"), "an unknown threading name is refused");
    ops_attention_threads_select("auto");

    /* the OpenBLAS backend behind linear and attention (auto picks the gemm strategy) */
    if (gemm_set_backend(GEMM_BACKEND_OPENBLAS) == BT_OK) {
        tu_check(strcmp(ops_attention_threads_name(), "auto (gemm)") == 0,
                 "with OpenBLAS, auto threading resolves to gemm (got '%s')",
                 ops_attention_threads_name());
        test_linear(33, 768, 7, GEMM_COMPUTE_F32, 0);
        test_attention("cross B2 NH2 Tq7 Tk33 D16 masked dropout [f32, openblas]", 2, 2, 7, 33,
                       16, 0, 1, &drop, GEMM_COMPUTE_F32);
        gemm_init_from_env(); /* back to the default backend */
    }
    test_attention_partial_grads();
    test_attention_block_products(GEMM_COMPUTE_F32);
    test_attention_block_products(GEMM_COMPUTE_BF16);
    test_bf16();
    test_bf16_outputs();
    test_dispatch_switch();
    gemm_release();
    return tu_finish();
}
