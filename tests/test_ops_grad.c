/* test_ops_grad.c: every backward of ops.h checked against central finite differences, in
 * double, on the reference kernels X_ref_f64 (the same source as the float references the
 * fast kernels are tested against, ops_ref.inc).
 *
 * For an op out = f(inputs) the scalar loss is L = Σ_i wt_i out_i with fixed random weights
 * wt, so the analytic gradient is backward(dout = wt). Each gradient buffer is pre-filled
 * with a known nonzero pattern before the backward runs, and the check is
 *     (gradient after backward) - (pre-fill)  ~=  (L(x + h e_j) - L(x - h e_j)) / 2h
 * which also proves the backward ACCUMULATES (an assigning backward fails by the pre-fill).
 * The kernels with a bt_dx_mode are checked once more with BT_DX_SET into a NaN-filled dx,
 * against the numeric derivative directly (check_grad_set): a SET that read dx, or missed
 * an element, leaves NaN.
 *
 * Tolerance (|a-b| <= atol + rtol |b|, b = the numeric derivative), with h = 1e-6 and
 * inputs of magnitude ~1:
 *   - truncation of the central difference: h² |L'''| / 6 ~ 1e-12 · |L'''|, |L'''| = O(10);
 *   - rounding: L is a double sum with magnitude S = Σ|wt_i out_i|, computed with a relative
 *     error of a few ε = 1.1e-16 of S; divided by 2h this is ~ S · 1e-10.
 *   So rtol = 1e-6 with atol = 1e-8 · max(1, S) (a 100x margin on the rounding term) is
 *   safe, while a wrong gradient is off by O(its own size) and fails by orders of magnitude.
 *
 * Deliberately not here: the fast kernels (test_ops_fast.c), PyTorch parity (fixtures). */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/ops.h"
#include "kernels/ops_ref.h"
#include "test_util.h"

#define FD_H 1e-6
#define FD_RTOL 1e-6

static tu_rng rng;

static double *vec(size_t n) {
    double *p = calloc(n ? n : 1, sizeof(double));
    if (!p) abort();
    return p;
}

static double *rand_vec(size_t n, double lo, double hi) {
    double *p = vec(n);
    tu_fill_uniform_f64(&rng, p, n, lo, hi);
    return p;
}

/* A known, nonzero pre-fill for gradient buffers: 0.5 + 0.25 sin(i). */
static void prefill(double *g, size_t n) {
    for (size_t i = 0; i < n; i++) g[i] = 0.5 + 0.25 * sin((double)i);
}

/* Σ wt_i out_i; *mag receives Σ |wt_i out_i| (the magnitude the rounding error scales with). */
static double weighted(const double *out, const double *wt, size_t n, double *mag) {
    double s = 0.0, m = 0.0;
    for (size_t i = 0; i < n; i++) {
        s += wt[i] * out[i];
        m += fabs(wt[i] * out[i]);
    }
    if (mag) *mag = m;
    return s;
}

/* A forward + loss evaluation over the current inputs; returns L, sets *mag. */
typedef double (*loss_fn)(void *ctx, double *mag);

/* Numeric gradient of the loss with respect to x[0..n) (x is perturbed and restored).
 * Returns the largest loss magnitude seen (for the tolerance). */
static double fd_gradient(double *num, double *x, size_t n, loss_fn f, void *ctx, double h) {
    double maxmag = 0.0, mag;
    for (size_t j = 0; j < n; j++) {
        const double x0 = x[j];
        x[j] = x0 + h;
        const double lp = f(ctx, &mag);
        if (mag > maxmag) maxmag = mag;
        x[j] = x0 - h;
        const double lm = f(ctx, &mag);
        if (mag > maxmag) maxmag = mag;
        x[j] = x0;
        num[j] = (lp - lm) / (2.0 * h);
    }
    return maxmag;
}

/* got (after backward on a pre-filled buffer) minus the pre-fill vs the numeric gradient. */
static void check_grad(const char *name, const double *got, size_t n, double *x, loss_fn f,
                       void *ctx, double h) {
    double *num = vec(n), *delta = vec(n), *pre = vec(n);
    const double mag = fd_gradient(num, x, n, f, ctx, h);
    prefill(pre, n);
    for (size_t i = 0; i < n; i++) delta[i] = got[i] - pre[i];
    const double atol = 1e-8 * (mag > 1.0 ? mag : 1.0) * (FD_H / h);
    tu_check_close_f64(name, delta, num, n, atol, FD_RTOL);
    free(num);
    free(delta);
    free(pre);
}

/* dx written by a BT_DX_SET backward into a NaN-filled buffer vs the numeric gradient. */
static void check_grad_set(const char *name, const double *got, size_t n, double *x, loss_fn f,
                           void *ctx) {
    double *num = vec(n);
    const double mag = fd_gradient(num, x, n, f, ctx, FD_H);
    char label[96];
    snprintf(label, sizeof label, "%s (BT_DX_SET)", name);
    tu_check_close_f64(label, got, num, n, 1e-8 * (mag > 1.0 ? mag : 1.0), FD_RTOL);
    free(num);
}

/* A buffer for a BT_DX_SET backward: quiet NaNs, which a read would propagate. */
static double *nan_vec(size_t n) {
    double *p = vec(n);
    for (size_t i = 0; i < n; i++) p[i] = NAN;
    return p;
}

/* --- linear ----------------------------------------------------------------------------- */

typedef struct {
    double *x, *w, *b, *out, *wt;
    size_t n, c, oc;
} linear_ctx;

static double linear_loss(void *p, double *mag) {
    linear_ctx *t = p;
    linear_forward_ref_f64(t->out, t->x, t->w, t->b, t->n, t->c, t->oc);
    return weighted(t->out, t->wt, t->n * t->oc, mag);
}

static void test_linear(void) {
    linear_ctx t = {.n = 3, .c = 4, .oc = 5};
    t.x = rand_vec(t.n * t.c, -1, 1);
    t.w = rand_vec(t.oc * t.c, -1, 1);
    t.b = rand_vec(t.oc, -1, 1);
    t.wt = rand_vec(t.n * t.oc, -1, 1);
    t.out = vec(t.n * t.oc);
    double *dx = vec(t.n * t.c), *dw = vec(t.oc * t.c), *db = vec(t.oc);
    prefill(dx, t.n * t.c);
    prefill(dw, t.oc * t.c);
    prefill(db, t.oc);
    linear_backward_ref_f64(dx, dw, db, t.wt, t.x, t.w, t.n, t.c, t.oc, BT_DX_ADD);
    check_grad("linear dx", dx, t.n * t.c, t.x, linear_loss, &t, FD_H);
    check_grad("linear dw", dw, t.oc * t.c, t.w, linear_loss, &t, FD_H);
    check_grad("linear db", db, t.oc, t.b, linear_loss, &t, FD_H);
    double *dxs = nan_vec(t.n * t.c);
    linear_backward_ref_f64(dxs, NULL, NULL, t.wt, t.x, t.w, t.n, t.c, t.oc, BT_DX_SET);
    check_grad_set("linear dx", dxs, t.n * t.c, t.x, linear_loss, &t);
    free(dxs);
    /* NULL gradients are skipped (nothing to write, nothing to crash on) */
    linear_backward_ref_f64(NULL, NULL, NULL, t.wt, t.x, t.w, t.n, t.c, t.oc, BT_DX_ADD);
    free(t.x), free(t.w), free(t.b), free(t.wt), free(t.out), free(dx), free(dw), free(db);
}

/* --- layernorm ---------------------------------------------------------------------------- */

typedef struct {
    double *x, *w, *b, *out, *mean, *rstd, *wt;
    size_t n, c;
} ln_ctx;

static double ln_loss(void *p, double *mag) {
    ln_ctx *t = p;
    layernorm_forward_ref_f64(t->out, t->mean, t->rstd, t->x, t->w, t->b, t->n, t->c, 1e-5);
    return weighted(t->out, t->wt, t->n * t->c, mag);
}

/* The pre-LN block's loss L = Σ wt·LN(x) + Σ wr·x (x also feeds the residual, whose
 * gradient is wr): layernorm_backward_residual with res = wr is dL/dx, assigned (BT_DX_SET,
 * NaN-filled dx) or added to dx (BT_DX_ADD, pre-filled dx); dw, db as layernorm_backward
 * (the residual term has no weights). */
typedef struct {
    ln_ctx *ln;
    double *wr;
} ln_res_ctx;

static double ln_res_loss(void *p, double *mag) {
    ln_res_ctx *t = p;
    double mag_r;
    const double l = ln_loss(t->ln, mag) +
                     weighted(t->ln->x, t->wr, t->ln->n * t->ln->c, &mag_r);
    if (mag) *mag += mag_r;
    return l;
}

static void test_layernorm_residual(ln_ctx *ln) {
    const size_t nc = ln->n * ln->c;
    ln_res_ctx t = {ln, rand_vec(nc, -1, 1)};
    ln_res_loss(&t, NULL); /* saves mean, rstd */
    double *dx = nan_vec(nc), *dw = vec(ln->c), *db = vec(ln->c);
    prefill(dw, ln->c);
    prefill(db, ln->c);
    layernorm_backward_residual_ref_f64(dx, dw, db, ln->wt, t.wr, ln->x, ln->w, ln->mean,
                                        ln->rstd, ln->n, ln->c, BT_DX_SET);
    check_grad_set("layernorm residual dx", dx, nc, ln->x, ln_res_loss, &t);
    check_grad("layernorm residual dw", dw, ln->c, ln->w, ln_res_loss, &t, FD_H);
    check_grad("layernorm residual db", db, ln->c, ln->b, ln_res_loss, &t, FD_H);
    double *dxa = vec(nc);
    prefill(dxa, nc);
    layernorm_backward_residual_ref_f64(dxa, NULL, NULL, ln->wt, t.wr, ln->x, ln->w, ln->mean,
                                        ln->rstd, ln->n, ln->c, BT_DX_ADD);
    check_grad("layernorm residual dx (BT_DX_ADD)", dxa, nc, ln->x, ln_res_loss, &t, FD_H);
    free(t.wr), free(dx), free(dxa), free(dw), free(db);
}

/* The post-LN sublayer's loss L = Σ wt·LN(res), res = dropout(z) + in, masked per row (block
 * of one row, its own seed; p 0.5): layernorm_backward_dropout's dx is dL/d in, its ddrop
 * dL/dz (both assigned, NaN-filled), dw, db as layernorm_backward. */
typedef struct {
    ln_ctx *ln;
    double *z, *in;
    bt_dropout *drops;
} ln_drop_ctx;

static double ln_drop_loss(void *p, double *mag) {
    ln_drop_ctx *t = p;
    const size_t c = t->ln->c;
    for (size_t i = 0; i < t->ln->n; i++) {
        dropout_forward_ref_f64(t->ln->x + i * c, t->z + i * c, c, &t->drops[i]);
        for (size_t j = 0; j < c; j++) t->ln->x[i * c + j] += t->in[i * c + j];
    }
    return ln_loss(t->ln, mag);
}

static void test_layernorm_dropout(ln_ctx *ln) {
    const size_t nc = ln->n * ln->c;
    bt_dropout drops[3] = {{0.5f, 11}, {0.5f, 12}, {0.5f, 13}};
    BT_ASSERT(ln->n == 3);
    ln_drop_ctx t = {ln, rand_vec(nc, -2, 2), rand_vec(nc, -1, 1), drops};
    double *x0 = vec(nc);
    memcpy(x0, ln->x, nc * sizeof *x0);
    ln_drop_loss(&t, NULL); /* res into ln->x; saves mean, rstd */
    double *dx = nan_vec(nc), *dd = nan_vec(nc), *dw = vec(ln->c), *db = vec(ln->c);
    prefill(dw, ln->c);
    prefill(db, ln->c);
    layernorm_backward_dropout_ref_f64(dx, dd, dw, db, ln->wt, ln->x, ln->w, ln->mean, ln->rstd,
                                       ln->n, ln->c, drops, 1);
    size_t dropped = 0;
    for (size_t i = 0; i < nc; i++) dropped += dd[i] == 0.0;
    tu_check(dropped > 0 && dropped < nc, "layernorm dropout: %zu of %zu elements dropped",
             dropped, nc);
    check_grad_set("layernorm dropout dx (d in)", dx, nc, t.in, ln_drop_loss, &t);
    check_grad_set("layernorm dropout ddrop (d z)", dd, nc, t.z, ln_drop_loss, &t);
    check_grad("layernorm dropout dw", dw, ln->c, ln->w, ln_drop_loss, &t, FD_H);
    check_grad("layernorm dropout db", db, ln->c, ln->b, ln_drop_loss, &t, FD_H);
    memcpy(ln->x, x0, nc * sizeof *x0);
    free(t.z), free(t.in), free(x0), free(dx), free(dd), free(dw), free(db);
}

static void test_layernorm(void) {
    ln_ctx t = {.n = 3, .c = 7};
    t.x = rand_vec(t.n * t.c, -2, 2);
    t.w = rand_vec(t.c, 0.5, 1.5);
    t.b = rand_vec(t.c, -1, 1);
    t.wt = rand_vec(t.n * t.c, -1, 1);
    t.out = vec(t.n * t.c);
    t.mean = vec(t.n);
    t.rstd = vec(t.n);
    ln_loss(&t, NULL); /* saves mean, rstd */
    double *dx = vec(t.n * t.c), *dw = vec(t.c), *db = vec(t.c);
    prefill(dx, t.n * t.c);
    prefill(dw, t.c);
    prefill(db, t.c);
    layernorm_backward_ref_f64(dx, dw, db, t.wt, t.x, t.w, t.mean, t.rstd, t.n, t.c, BT_DX_ADD);
    check_grad("layernorm dx", dx, t.n * t.c, t.x, ln_loss, &t, FD_H);
    check_grad("layernorm dw", dw, t.c, t.w, ln_loss, &t, FD_H);
    check_grad("layernorm db", db, t.c, t.b, ln_loss, &t, FD_H);
    double *dxs = nan_vec(t.n * t.c);
    layernorm_backward_ref_f64(dxs, NULL, NULL, t.wt, t.x, t.w, t.mean, t.rstd, t.n, t.c,
                               BT_DX_SET);
    check_grad_set("layernorm dx", dxs, t.n * t.c, t.x, ln_loss, &t);
    free(dxs);
    test_layernorm_residual(&t);
    test_layernorm_dropout(&t);

    /* forward property (independent of the backward): each output row, before w and b, has
     * mean 0 and biased variance var/(var+eps) */
    double *ones = vec(t.c), *zeros = vec(t.c);
    for (size_t j = 0; j < t.c; j++) ones[j] = 1.0;
    layernorm_forward_ref_f64(t.out, t.mean, t.rstd, t.x, ones, zeros, t.n, t.c, 1e-5);
    double worst = 0.0;
    for (size_t i = 0; i < t.n; i++) {
        double m = 0.0, v = 0.0, xm = 0.0, xv = 0.0;
        for (size_t j = 0; j < t.c; j++) xm += t.x[i * t.c + j] / (double)t.c;
        for (size_t j = 0; j < t.c; j++) {
            m += t.out[i * t.c + j] / (double)t.c;
            xv += (t.x[i * t.c + j] - xm) * (t.x[i * t.c + j] - xm) / (double)t.c;
        }
        for (size_t j = 0; j < t.c; j++)
            v += (t.out[i * t.c + j] - m) * (t.out[i * t.c + j] - m) / (double)t.c;
        worst = fmax(worst, fmax(fabs(m), fabs(v - xv / (xv + 1e-5))));
    }
    tu_check(worst < 1e-12,
             "layernorm forward rows have mean 0, variance var/(var+eps) (worst %.2g)", worst);
    free(ones), free(zeros);
    free(t.x), free(t.w), free(t.b), free(t.wt), free(t.out), free(t.mean), free(t.rstd);
    free(dx), free(dw), free(db);
}

/* --- pointwise ------------------------------------------------------------------------------ */

typedef struct {
    double *x, *out, *wt;
    size_t n;
    void (*fwd)(double *, const double *, size_t);
} pw_ctx;

static double pw_loss(void *p, double *mag) {
    pw_ctx *t = p;
    t->fwd(t->out, t->x, t->n);
    return weighted(t->out, t->wt, t->n, mag);
}

/* bwd (accumulates) or bwd_mode (a bt_dx_mode: BT_DX_ADD, then BT_DX_SET) */
static void test_pointwise(const char *name, void (*fwd)(double *, const double *, size_t),
                           void (*bwd)(double *, const double *, const double *, size_t),
                           void (*bwd_mode)(double *, const double *, const double *, size_t,
                                            bt_dx_mode),
                           int bwd_uses_output) {
    pw_ctx t = {.n = 17, .fwd = fwd};
    t.x = rand_vec(t.n, -4, 4);
    t.x[0] = 0.0; /* the kink-free centre of every activation */
    t.wt = rand_vec(t.n, -1, 1);
    t.out = vec(t.n);
    fwd(t.out, t.x, t.n);
    double *dx = vec(t.n);
    prefill(dx, t.n);
    const double *saved = bwd_uses_output ? t.out : t.x;
    if (bwd_mode) bwd_mode(dx, t.wt, saved, t.n, BT_DX_ADD);
    else bwd(dx, t.wt, saved, t.n);
    char label[64];
    snprintf(label, sizeof label, "%s dx", name);
    check_grad(label, dx, t.n, t.x, pw_loss, &t, FD_H);
    if (bwd_mode) {
        double *dxs = nan_vec(t.n);
        bwd_mode(dxs, t.wt, saved, t.n, BT_DX_SET);
        check_grad_set(label, dxs, t.n, t.x, pw_loss, &t);
        free(dxs);
    }
    free(t.x), free(t.wt), free(t.out), free(dx);
}

/* --- softmax -------------------------------------------------------------------------------- */

typedef struct {
    double *x, *out, *wt;
    size_t n, c;
} sm_ctx;

static double sm_loss(void *p, double *mag) {
    sm_ctx *t = p;
    softmax_forward_ref_f64(t->out, t->x, t->n, t->c);
    return weighted(t->out, t->wt, t->n * t->c, mag);
}

static void test_softmax(void) {
    sm_ctx t = {.n = 3, .c = 6};
    t.x = rand_vec(t.n * t.c, -3, 3);
    t.wt = rand_vec(t.n * t.c, -1, 1);
    t.out = vec(t.n * t.c);
    sm_loss(&t, NULL);
    double *dx = vec(t.n * t.c);
    prefill(dx, t.n * t.c);
    softmax_backward_ref_f64(dx, t.wt, t.out, t.n, t.c);
    check_grad("softmax dx", dx, t.n * t.c, t.x, sm_loss, &t, FD_H);
    double worst = 0.0;
    for (size_t i = 0; i < t.n; i++) {
        double s = 0.0;
        for (size_t j = 0; j < t.c; j++) s += t.out[i * t.c + j];
        worst = fmax(worst, fabs(s - 1.0));
    }
    tu_check(worst < 1e-15, "softmax rows sum to 1 (worst %.2g)", worst);
    free(t.x), free(t.wt), free(t.out), free(dx);
}

/* --- attention ------------------------------------------------------------------------------ */

typedef struct {
    attention_dims d;
    double *q, *k, *v, *key_bias, *out, *probs, *wt;
    const bt_dropout *drop;
} attn_ctx;

static double attn_loss(void *p, double *mag) {
    attn_ctx *t = p;
    attention_forward_ref_f64(t->out, t->probs, t->q, t->k, t->v, t->key_bias, &t->d, t->drop);
    /* only the head columns of out are outputs (ldo may exceed NH*D) */
    double s = 0.0, m = 0.0;
    for (size_t r = 0; r < t->d.B * t->d.Tq; r++)
        for (size_t e = 0; e < t->d.NH * t->d.D; e++) {
            const double term = t->wt[r * t->d.ldo + e] * t->out[r * t->d.ldo + e];
            s += term;
            m += fabs(term);
        }
    *mag = m;
    return s;
}

/* self: q, k, v are slices of one packed (B*T, 3C) buffer, and so are dq, dk, dv.
 * cross: q (B*Tq, C) alone; k, v slices of a packed (B*Tk, 2C) buffer. */
static void test_attention(const char *label, size_t B, size_t NH, size_t Tq, size_t Tk,
                           size_t D, int self, const bt_dropout *drop) {
    const size_t C = NH * D;
    attn_ctx t = {.drop = drop};
    attention_dims *d = &t.d;
    d->B = B, d->Tq = Tq, d->Tk = Tk, d->NH = NH, d->D = D, d->ldo = C;
    double *qbuf, *kvbuf, *dqbuf, *dkvbuf;
    size_t qn, kvn;
    if (self) {
        BT_ASSERT(Tq == Tk);
        d->ldq = d->ldk = d->ldv = 3 * C;
        qn = B * Tq * 3 * C, kvn = 0;
        qbuf = rand_vec(qn, -1.5, 1.5), kvbuf = NULL;
        t.q = qbuf, t.k = qbuf + C, t.v = qbuf + 2 * C;
    } else {
        d->ldq = C, d->ldk = d->ldv = 2 * C;
        qn = B * Tq * C, kvn = B * Tk * 2 * C;
        qbuf = rand_vec(qn, -1.5, 1.5), kvbuf = rand_vec(kvn, -1.5, 1.5);
        t.q = qbuf, t.k = kvbuf, t.v = kvbuf + C;
    }
    /* key padding: batch item b masks its last b keys (item 0 masks none) */
    int32_t *mask = calloc(B * Tk, sizeof(int32_t));
    for (size_t b = 0; b < B; b++)
        for (size_t j = 0; j < Tk; j++) mask[b * Tk + j] = j + b < Tk;
    t.key_bias = vec(B * Tk);
    attention_key_bias_from_mask_ref_f64(t.key_bias, mask, B * Tk);
    t.out = vec(B * Tq * C);
    t.probs = vec(B * NH * Tq * Tk);
    t.wt = rand_vec(B * Tq * C, -1, 1);
    double mag;
    attn_loss(&t, &mag);

    /* masked keys get exactly zero probability */
    int masked_ok = 1;
    for (size_t b = 0; b < B; b++)
        for (size_t h = 0; h < NH; h++)
            for (size_t i = 0; i < Tq; i++)
                for (size_t j = 0; j < Tk; j++)
                    if (!mask[b * Tk + j] && t.probs[((b * NH + h) * Tq + i) * Tk + j] != 0.0)
                        masked_ok = 0;
    tu_check(masked_ok, "attention %s: masked keys have probability 0", label);

    dqbuf = vec(qn), dkvbuf = vec(kvn);
    prefill(dqbuf, qn);
    prefill(dkvbuf, kvn);
    double *dq, *dk, *dv;
    if (self) dq = dqbuf, dk = dqbuf + C, dv = dqbuf + 2 * C;
    else dq = dqbuf, dk = dkvbuf, dv = dkvbuf + C;
    char name[128];
    /* P kept (t.probs), then P recomputed from q, k and the key bias (probs NULL) */
    for (int recompute = 0; recompute < 2; recompute++) {
        const char *how = recompute ? ", P recomputed" : "";
        prefill(dqbuf, qn);
        prefill(dkvbuf, kvn);
        attention_backward_ref_f64(dq, dk, dv, t.wt, recompute ? NULL : t.probs, t.q, t.k, t.v,
                                   t.key_bias, d, drop, BT_DX_ADD);
        if (self) {
            snprintf(name, sizeof name, "attention %s: d(qkv) packed%s", label, how);
            check_grad(name, dqbuf, qn, qbuf, attn_loss, &t, FD_H);
        } else {
            snprintf(name, sizeof name, "attention %s: dq%s", label, how);
            check_grad(name, dqbuf, qn, qbuf, attn_loss, &t, FD_H);
            snprintf(name, sizeof name, "attention %s: d(kv) packed%s", label, how);
            check_grad(name, dkvbuf, kvn, kvbuf, attn_loss, &t, FD_H);
        }
    }
    /* BT_DX_SET: every column of the packed buffers is one of dq, dk, dv */
    double *sq = nan_vec(qn), *skv = nan_vec(kvn);
    if (self) dq = sq, dk = sq + C, dv = sq + 2 * C;
    else dq = sq, dk = skv, dv = skv + C;
    attention_backward_ref_f64(dq, dk, dv, t.wt, t.probs, t.q, t.k, t.v, t.key_bias, d, drop,
                               BT_DX_SET);
    snprintf(name, sizeof name, "attention %s: dq%s", label, self ? ", dk, dv" : "");
    check_grad_set(name, sq, qn, qbuf, attn_loss, &t);
    if (!self) {
        snprintf(name, sizeof name, "attention %s: dk, dv", label);
        check_grad_set(name, skv, kvn, kvbuf, attn_loss, &t);
    }
    free(sq), free(skv);
    free(qbuf), free(kvbuf), free(dqbuf), free(dkvbuf), free(mask);
    free(t.key_bias), free(t.out), free(t.probs), free(t.wt);
}

/* --- embedding ------------------------------------------------------------------------------ */

typedef struct {
    double *table, *out, *wt;
    const int32_t *ids;
    size_t n, c, rows;
} emb_ctx;

static double emb_loss(void *p, double *mag) {
    emb_ctx *t = p;
    embedding_forward_ref_f64(t->out, t->ids, t->table, t->n, t->c, t->rows);
    return weighted(t->out, t->wt, t->n * t->c, mag);
}

static void test_embedding(void) {
    static const int32_t ids[] = {3, 0, 2, 3, 5, 2, 3, 1}; /* repeats; 2 is the padding id */
    const int32_t padding_idx = 2;
    emb_ctx t = {.ids = ids, .n = 8, .c = 3, .rows = 6};
    t.table = rand_vec(t.rows * t.c, -1, 1);
    t.wt = rand_vec(t.n * t.c, -1, 1);
    t.out = vec(t.n * t.c);
    double *dt = vec(t.rows * t.c);
    prefill(dt, t.rows * t.c);
    embedding_backward_ref_f64(dt, t.wt, ids, t.n, t.c, t.rows, padding_idx);
    /* The forward still gathers the padding row (as torch does), so its numeric gradient is
     * not zero; by contract the backward leaves that row alone. Check the other rows
     * against finite differences and the padding row against its pre-fill, exactly. */
    double *num = vec(t.rows * t.c), *pre = vec(t.rows * t.c);
    const double mag = fd_gradient(num, t.table, t.rows * t.c, emb_loss, &t, FD_H);
    prefill(pre, t.rows * t.c);
    double *got = vec(t.rows * t.c);
    int pad_ok = 1;
    for (size_t r = 0; r < t.rows; r++)
        for (size_t j = 0; j < t.c; j++) {
            const size_t e = r * t.c + j;
            if ((int32_t)r == padding_idx) {
                pad_ok &= dt[e] == pre[e];
                got[e] = num[e] = 0.0;
            } else {
                got[e] = dt[e] - pre[e];
            }
        }
    tu_check_close_f64("embedding dtable (repeated ids summed)", got, num, t.rows * t.c,
                       1e-8 * fmax(1.0, mag), FD_RTOL);
    tu_check(pad_ok, "embedding dtable: padding_idx row untouched");
    /* padding_idx -1 (none): every row gets its gradient */
    prefill(dt, t.rows * t.c);
    embedding_backward_ref_f64(dt, t.wt, ids, t.n, t.c, t.rows, -1);
    check_grad("embedding dtable (no padding_idx)", dt, t.rows * t.c, t.table, emb_loss, &t, FD_H);
    free(t.table), free(t.wt), free(t.out), free(dt), free(num), free(pre), free(got);
}

/* --- bias add, residual --------------------------------------------------------------------- */

typedef struct {
    double *x, *bias, *out, *wt;
    size_t n, c;
} ba_ctx;

static double ba_loss(void *p, double *mag) {
    ba_ctx *t = p;
    bias_add_forward_ref_f64(t->out, t->x, t->bias, t->n, t->c);
    return weighted(t->out, t->wt, t->n * t->c, mag);
}

static void test_bias_add(void) {
    ba_ctx t = {.n = 4, .c = 5};
    t.x = rand_vec(t.n * t.c, -1, 1);
    t.bias = rand_vec(t.c, -1, 1);
    t.wt = rand_vec(t.n * t.c, -1, 1);
    t.out = vec(t.n * t.c);
    double *dx = vec(t.n * t.c), *db = vec(t.c);
    prefill(dx, t.n * t.c);
    prefill(db, t.c);
    bias_add_backward_ref_f64(dx, db, t.wt, t.n, t.c);
    check_grad("bias_add dx", dx, t.n * t.c, t.x, ba_loss, &t, FD_H);
    check_grad("bias_add dbias", db, t.c, t.bias, ba_loss, &t, FD_H);
    free(t.x), free(t.bias), free(t.wt), free(t.out), free(dx), free(db);
}

/* gelu_backward_bias: the backward of L = Σ wt act(z + b) (act after the fc Linear's bias
 * add): dx = dL/dz assigned (into NaNs), dbias += dL/db (pre-filled), dx16 = bf16(dx). */
typedef struct {
    double *z, *bias, *pre, *out, *wt;
    size_t n, c;
    int quick;
} gb_ctx;

static double gb_loss(void *p, double *mag) {
    gb_ctx *t = p;
    bias_add_forward_ref_f64(t->pre, t->z, t->bias, t->n, t->c);
    if (t->quick) quick_gelu_forward_ref_f64(t->out, t->pre, t->n * t->c);
    else gelu_forward_ref_f64(t->out, t->pre, t->n * t->c);
    return weighted(t->out, t->wt, t->n * t->c, mag);
}

static void test_gelu_backward_bias(int quick) {
    gb_ctx t = {.n = 4, .c = 5, .quick = quick};
    const size_t nc = t.n * t.c;
    t.z = rand_vec(nc, -3, 3), t.bias = rand_vec(t.c, -1, 1), t.wt = rand_vec(nc, -1, 1);
    t.pre = vec(nc), t.out = vec(nc);
    gb_loss(&t, NULL); /* t.pre: the saved pre-activation */
    double *dx = nan_vec(nc), *db = vec(t.c);
    bt_bf16 *dx16 = malloc(nc * sizeof *dx16);
    if (!dx16) abort();
    prefill(db, t.c);
    gelu_backward_bias_ref_f64(dx, dx16, db, t.wt, t.pre, t.n, t.c, quick);
    char label[64];
    snprintf(label, sizeof label, "%s_backward_bias dx", quick ? "quick_gelu" : "gelu");
    check_grad_set(label, dx, nc, t.z, gb_loss, &t);
    snprintf(label, sizeof label, "%s_backward_bias dbias", quick ? "quick_gelu" : "gelu");
    check_grad(label, db, t.c, t.bias, gb_loss, &t, FD_H);
    int same = 1;
    for (size_t i = 0; i < nc; i++) same &= dx16[i] == bt_bf16_from_f32((float)dx[i]);
    tu_check(same, "%s_backward_bias dx16 = bf16(dx)", quick ? "quick_gelu" : "gelu");
    free(t.z), free(t.bias), free(t.wt), free(t.pre), free(t.out), free(dx), free(db), free(dx16);
}

typedef struct {
    double *a, *b, *out, *wt;
    size_t n;
} res_ctx;

static double res_loss(void *p, double *mag) {
    res_ctx *t = p;
    residual_forward_ref_f64(t->out, t->a, t->b, t->n);
    return weighted(t->out, t->wt, t->n, mag);
}

static void test_residual(void) {
    res_ctx t = {.n = 9};
    t.a = rand_vec(t.n, -1, 1);
    t.b = rand_vec(t.n, -1, 1);
    t.wt = rand_vec(t.n, -1, 1);
    t.out = vec(t.n);
    double *da = vec(t.n), *db = vec(t.n);
    prefill(da, t.n);
    prefill(db, t.n);
    residual_backward_ref_f64(da, db, t.wt, t.n, BT_DX_ADD);
    check_grad("residual da", da, t.n, t.a, res_loss, &t, FD_H);
    check_grad("residual db", db, t.n, t.b, res_loss, &t, FD_H);
    double *sa = nan_vec(t.n), *sb = nan_vec(t.n);
    residual_backward_ref_f64(sa, sb, t.wt, t.n, BT_DX_SET);
    check_grad_set("residual da", sa, t.n, t.a, res_loss, &t);
    check_grad_set("residual db", sb, t.n, t.b, res_loss, &t);
    free(sa), free(sb);
    free(t.a), free(t.b), free(t.wt), free(t.out), free(da), free(db);
}

/* --- cross entropy -------------------------------------------------------------------------- */

typedef struct {
    double *logits, *probs, wt;
    const int32_t *targets;
    size_t n, v;
} ce_ctx;

static double ce_loss(void *p, double *mag) {
    ce_ctx *t = p;
    const double l = cross_entropy_forward_ref_f64(t->probs, t->logits, t->targets, t->n, t->v,
                                                   -100, NULL);
    *mag = fabs(t->wt * l);
    return t->wt * l;
}

static void test_cross_entropy(void) {
    static const int32_t targets[] = {2, -100, 0, 6, -100};
    ce_ctx t = {.targets = targets, .n = 5, .v = 7, .wt = 0.7};
    t.logits = rand_vec(t.n * t.v, -3, 3);
    t.probs = vec(t.n * t.v);
    size_t n_valid = 0;
    const double loss = cross_entropy_forward_ref_f64(t.probs, t.logits, targets, t.n, t.v, -100,
                                                      &n_valid);
    tu_check(n_valid == 3, "cross entropy n_valid = %zu (expected 3: two rows ignored)", n_valid);
    /* independent value: -log softmax from the definition, rows 0, 2, 3 */
    double want = 0.0;
    for (size_t i = 0; i < t.n; i++) {
        if (targets[i] == -100) continue;
        double s = 0.0;
        for (size_t j = 0; j < t.v; j++) s += exp(t.logits[i * t.v + j]);
        want += -log(exp(t.logits[i * t.v + (size_t)targets[i]]) / s) / 3.0;
    }
    tu_check(fabs(loss - want) <= 1e-12 * fabs(want), "cross entropy value %.15g vs %.15g", loss,
             want);
    double *dl = vec(t.n * t.v);
    prefill(dl, t.n * t.v);
    cross_entropy_backward_ref_f64(dl, t.probs, targets, t.n, t.v, -100, t.wt);
    /* FD covers the ignored rows too: their numeric gradient is 0, so must be the analytic */
    check_grad("cross entropy dlogits (ignore_index rows)", dl, t.n * t.v, t.logits, ce_loss, &t,
               FD_H);

    static const int32_t all_ignored[] = {-100, -100};
    const double l0 = cross_entropy_forward_ref_f64(t.probs, t.logits, all_ignored, 2, t.v, -100,
                                                    &n_valid);
    tu_check(l0 == 0.0 && n_valid == 0, "cross entropy with every row ignored: loss 0, n_valid 0");
    free(t.logits), free(t.probs), free(dl);
}

/* --- L2 normalize --------------------------------------------------------------------------- */

typedef struct {
    double *x, *out, *norm, *wt;
    size_t n, c;
} l2_ctx;

static double l2_loss(void *p, double *mag) {
    l2_ctx *t = p;
    l2_normalize_forward_ref_f64(t->out, t->norm, t->x, t->n, t->c);
    return weighted(t->out, t->wt, t->n * t->c, mag);
}

static void test_l2_normalize(int tiny) {
    l2_ctx t = {.n = 3, .c = 5};
    t.x = rand_vec(t.n * t.c, -1, 1);
    /* tiny: row 1 has norm < 1e-12, where out = x / 1e-12 (linear) */
    if (tiny)
        for (size_t j = 0; j < t.c; j++) t.x[t.c + j] *= 1e-14;
    t.wt = rand_vec(t.n * t.c, -1, 1);
    t.out = vec(t.n * t.c);
    t.norm = vec(t.n);
    l2_loss(&t, NULL);
    double *dx = vec(t.n * t.c);
    prefill(dx, t.n * t.c);
    l2_normalize_backward_ref_f64(dx, t.wt, t.out, t.norm, t.n, t.c);
    if (!tiny) {
        check_grad("l2_normalize dx", dx, t.n * t.c, t.x, l2_loss, &t, FD_H);
        double worst = 0.0;
        for (size_t i = 0; i < t.n; i++) {
            double s = 0.0;
            for (size_t j = 0; j < t.c; j++) s += t.out[i * t.c + j] * t.out[i * t.c + j];
            worst = fmax(worst, fabs(sqrt(s) - 1.0));
        }
        tu_check(worst < 1e-15, "l2_normalize rows have unit norm (worst %.2g)", worst);
    } else {
        /* The loss is linear in the tiny row with slope wt/1e-12 = O(1e12); the step must
         * keep the row below eps (h = 1e-22 << 1e-14). Relative to the gradient the FD
         * rounding is ε·|L|/(2h·|g|) ~ 1e-16·O(1)/(1e-22·1e12) = 1e-6: compare only the
         * tiny row with rtol 1e-5. */
        double *num = vec(t.c), *got = vec(t.c), *pre = vec(t.n * t.c);
        prefill(pre, t.n * t.c);
        fd_gradient(num, t.x + t.c, t.c, l2_loss, &t, 1e-22);
        for (size_t j = 0; j < t.c; j++) got[j] = dx[t.c + j] - pre[t.c + j];
        tu_check_close_f64("l2_normalize dx, row with norm < eps", got, num, t.c, 0.0, 1e-5);
        free(num), free(got), free(pre);
    }
    free(t.x), free(t.wt), free(t.out), free(t.norm), free(dx);
}

/* --- dropout -------------------------------------------------------------------------------- */

typedef struct {
    double *x, *out, *wt;
    size_t n;
    const bt_dropout *d;
} do_ctx;

static double do_loss(void *p, double *mag) {
    do_ctx *t = p;
    dropout_forward_ref_f64(t->out, t->x, t->n, t->d);
    return weighted(t->out, t->wt, t->n, mag);
}

static void test_dropout(void) {
    const bt_dropout d = {.p = 0.4f, .seed = 1234};
    do_ctx t = {.n = 50, .d = &d};
    t.x = rand_vec(t.n, -1, 1);
    t.wt = rand_vec(t.n, -1, 1);
    t.out = vec(t.n);
    double *dx = vec(t.n);
    prefill(dx, t.n);
    dropout_backward_ref_f64(dx, t.wt, t.n, &d, BT_DX_ADD);
    check_grad("dropout dx", dx, t.n, t.x, do_loss, &t, FD_H);
    double *dxs = nan_vec(t.n);
    dropout_backward_ref_f64(dxs, t.wt, t.n, &d, BT_DX_SET);
    check_grad_set("dropout dx", dxs, t.n, t.x, do_loss, &t);
    free(dxs);
    size_t kept = 0;
    for (size_t i = 0; i < t.n; i++) kept += dropout_keep(&d, i);
    tu_check(kept > 0 && kept < t.n, "dropout p=0.4 keeps some and drops some (%zu of %zu)", kept,
             t.n);
    free(t.x), free(t.wt), free(t.out), free(dx);
}

int main(void) {
    tu_rng_seed(&rng, 20240611);
    test_linear();
    test_layernorm();
    test_pointwise("gelu", gelu_forward_ref_f64, NULL, gelu_backward_ref_f64, 0);
    test_pointwise("quick_gelu", quick_gelu_forward_ref_f64, NULL, quick_gelu_backward_ref_f64,
                   0);
    test_pointwise("tanh", tanh_forward_ref_f64, tanh_backward_ref_f64, NULL, 1);
    test_softmax();
    const bt_dropout drop = {.p = 0.25f, .seed = 99};
    test_attention("self B2 NH2 T5 D3", 2, 2, 5, 5, 3, 1, NULL);
    test_attention("cross B2 NH2 Tq3 Tk6 D4", 2, 2, 3, 6, 4, 0, NULL);
    test_attention("self + dropout", 2, 2, 5, 5, 3, 1, &drop);
    test_attention("cross + dropout", 2, 2, 3, 6, 4, 0, &drop);
    test_embedding();
    test_bias_add();
    test_gelu_backward_bias(0);
    test_gelu_backward_bias(1);
    test_residual();
    test_cross_entropy();
    test_l2_normalize(0);
    test_l2_normalize(1);
    test_dropout();
    return tu_finish();
}
