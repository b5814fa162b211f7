/* test_model_phases.c: the phased model API (model.h "Phases") on the tiny config, random
 * init moved off its zero/one values (test_model_fd.h):
 *
 *   1. cross on arbitrary pairs = bt_forward on the gathered batch (text[t_p], image[i_p]):
 *      pooler, ITM logits, ITC cross, MLM logits of the flagged pairs, ITC text / image
 *      embeddings of the rows, in fp32 and bf16;
 *   2. re-used rows: with a text row and an image row read by several pairs (one pair listed
 *      twice), (a) the parameter gradient equals the sum of separate one-pair runs, and the
 *      same pairs in two cross rounds on one tower pass (a'), and (b) finite differences through the whole phased model (towers + pairs, dropout off and
 *      on) agree with the phase backwards, for a pair loss and for the ITC tower loss alone
 *      (bt_towers_backward without a cross phase);
 *   3. Bt != Bi: 2B texts (B captions + B masked copies, keys | 1<<63), B images, B positive
 *      + B negative pairs + B MLM pairs on the masked copies, checked as in 1;
 *   4. dropout keyed by sample: permuted rows and pairs, and a batch split into a smaller
 *      tower pass, give the same outputs per sample / pair, bit for bit; controls: dropout is
 *      active (outputs differ from dropout off) and changing one key changes only its rows;
 *   5. memory: bt_model_activation_bytes equals what bt_model_reserve_phases allocates, a
 *      step at or below the reserved shapes allocates nothing, bt_forward's loss scratch
 *      equals bt_model_hf_loss_bytes, and impossible shapes give BT_ERR_NOMEM (naming what
 *      to reduce) without touching the model; bad pair indices are named errors;
 *   6. one tower only (Bt = 0 or Bi = 0): the same ITC embeddings, a text-only backward.
 *
 * Bitwise vs tolerance (1, 3, 4): under the reference GEMM (gemm_ref.c: every output element
 * a double-accumulated dot product rounded once) an output row depends on its own input rows
 * only, and every other kernel (LayerNorm, softmax, attention per (batch item, head),
 * element-wise ops, keyed dropout) works per row; so the phased run and the gathered run are
 * the same arithmetic on the same numbers and must agree bit for bit, in fp32 and bf16. The
 * optimized backends may block a product differently for a different row count M, so there
 * the comparison is |a-b| <= 1e-5·max|b| + 1e-5·|b| (fp32; the fixture parity of the whole
 * model holds to that bound against float64, test_model_parity.c, so two fp32 runs differ by
 * less) and 4e-2·max|b| in bf16 (the bf16 forward bound of test_model_parity.c: a product
 * rounded differently can flip bf16 roundings downstream).
 * Gradient sums (2a): the same per-row arithmetic, but each parameter gradient is a sum over
 * rows in a different grouping (one run of 5 pairs vs 5 runs of 1), so fp32 rounding of the
 * sums differs: |a-b| <= 1e-5·max|b| + 1e-5·|b| per tensor (measured worst printed).
 *
 * Deliberately not here: fixture parity (test_model_parity.c), losses (src/train). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/config.h"
#include "kernels/gemm.h"
#include "model/cross.h"
#include "model/heads.h"
#include "model/model.h"
#include "model/params.h"
#include "test_model_fd.h"
#include "test_util.h"

enum { T = 8, MAXR = 8, MAXP = 12 };

/* A pool of texts and images with their sample keys; runs pick rows from it. */
typedef struct pool {
    size_t nt, ni, R;
    int32_t ids[MAXR * T], mask[MAXR * T];
    uint64_t tkeys[MAXR], ikeys[MAXR];
    float *pix; /* (ni, 3, R, R) */
} pool;

static void pool_init(pool *pl, const bt_model_config *c, size_t nt, size_t ni, tu_rng *r) {
    memset(pl, 0, sizeof *pl);
    pl->nt = nt;
    pl->ni = ni;
    pl->R = (size_t)c->image_size;
    for (size_t b = 0; b < nt; b++) {
        const size_t len = T - (b * 3) % 5; /* 8, 5, 7, 4, 6, ... real tokens, pads after */
        for (size_t t = 0; t < T; t++) {
            const int real = t < len;
            pl->ids[b * T + t] = !real       ? c->pad_token_id
                                 : t == 0    ? 0
                                 : t == len - 1
                                     ? 2
                                     : 3 + (int32_t)(tu_rng_next(r) % (uint64_t)(c->vocab_size - 3));
            pl->mask[b * T + t] = real;
        }
        pl->tkeys[b] = 1000 + 17 * b;
    }
    for (size_t i = 0; i < ni; i++) pl->ikeys[i] = 5000 + 31 * i;
    const size_t n = ni * 3 * pl->R * pl->R;
    pl->pix = malloc(n * sizeof *pl->pix);
    for (size_t i = 0; i < n; i++) pl->pix[i] = (float)tu_rng_normal(r);
}

/* Texts `rows` (n) of the pool, in that order, as one input (buffers in *buf). */
typedef struct gathered {
    int32_t ids[MAXP * T], mask[MAXP * T];
    uint64_t tkeys[MAXP], ikeys[MAXP];
    float *pix;
} gathered;

static void gather(gathered *g, const pool *pl, const int *trows, size_t nt, const int *irows,
                   size_t ni) {
    const size_t img = 3 * pl->R * pl->R;
    for (size_t j = 0; j < nt; j++) {
        memcpy(g->ids + j * T, pl->ids + (size_t)trows[j] * T, T * sizeof *g->ids);
        memcpy(g->mask + j * T, pl->mask + (size_t)trows[j] * T, T * sizeof *g->mask);
        g->tkeys[j] = pl->tkeys[trows[j]];
    }
    g->pix = realloc(g->pix, (ni ? ni : 1) * img * sizeof *g->pix);
    for (size_t j = 0; j < ni; j++) {
        memcpy(g->pix + j * img, pl->pix + (size_t)irows[j] * img, img * sizeof *g->pix);
        g->ikeys[j] = pl->ikeys[irows[j]];
    }
}

/* Towers on pool rows trows (nt) / irows (ni) with their sample keys. */
static bt_status towers_on(bt_model *m, gathered *g, const pool *pl, const int *trows,
                           size_t nt, const int *irows, size_t ni) {
    gather(g, pl, trows, nt, irows, ni);
    bt_text_input ti = {nt, T, g->ids, g->mask, g->tkeys};
    bt_image_input ii = {ni, g->pix, g->ikeys};
    return bt_towers_forward(m, &ti, &ii);
}

static int identity[MAXR] = {0, 1, 2, 3, 4, 5, 6, 7};

/* "ok" or the error message of a status (the thread's message may be stale on success). */
static const char *msg(bt_status s) {
    return s == BT_OK ? "ok" : bt_error_message();
}

/* --- model set-up -------------------------------------------------------------------------- */

static int model_make(bt_model *m, bt_precision prec, uint64_t seed) {
    bt_model_config c;
    if (!fd_tiny_config(&c)) return 0;
    bt_model_init(m, &c, BT_HEADS_ALL, prec);
    bt_model_init_params(m, seed);
    tu_rng r;
    tu_rng_seed(&r, seed + 100);
    fd_move_off_init(m, &r);
    bt_model_refresh_bf16(m);
    return 1;
}

/* Outputs of one pair / row, copied out of the model. */
typedef struct snap {
    size_t P, Pm, Bt, Bi, H2, C, TV;
    float *pooler, *itm, *itc_c, *mlm, *itc_t, *itc_i;
} snap;

static float *dup(const float *x, size_t n) {
    float *y = malloc((n ? n : 1) * sizeof *y);
    if (n) memcpy(y, x, n * sizeof *y);
    return y;
}

static void snap_take(snap *s, const bt_model *m) {
    const bt_model_config *c = &m->cfg;
    s->P = m->P;
    s->Pm = m->Pm;
    s->Bt = m->Bt;
    s->Bi = m->Bi;
    s->H2 = 2 * (size_t)c->hidden;
    s->C = (size_t)c->contrastive_hidden;
    s->TV = m->T * (size_t)c->vocab_size;
    s->pooler = dup(m->pooler_out, s->P * s->H2);
    s->itm = dup(m->itm_logits_out, s->P * 2);
    s->itc_c = dup(m->itc_cross, s->P * s->C);
    s->mlm = dup(m->mlm_logits_out, s->Pm * s->TV);
    s->itc_t = dup(m->itc_text, s->Bt * s->C);
    s->itc_i = dup(m->itc_image, s->Bi * s->C);
}

static void snap_free(snap *s) {
    free(s->pooler);
    free(s->itm);
    free(s->itc_c);
    free(s->mlm);
    free(s->itc_t);
    free(s->itc_i);
}

/* got vs want: bitwise, or |a-b| <= atol_frac·max|want| + rtol·|b| (header comment). */
static int same(const char *name, const float *got, const float *want, size_t n, int bitwise,
                double atol_frac, double rtol) {
    if (bitwise) return tu_check_bytes_equal(name, got, want, n * sizeof *got);
    double mx = 0;
    for (size_t i = 0; i < n; i++) mx = fmax(mx, fabs(want[i]));
    return tu_check_close_f32(name, got, want, n, atol_frac * mx, rtol);
}

/* --- 1 and 3: pairs vs bt_forward on the gathered batch ------------------------------------ */

static void check_pairs_vs_gathered(const char *title, bt_precision prec, const pool *pl,
                                    const bt_pair *pairs, size_t P, int bitwise) {
    bt_model m;
    if (!model_make(&m, prec, 21)) return;
    gathered g;
    memset(&g, 0, sizeof g);
    bt_status s = towers_on(&m, &g, pl, identity, pl->nt, identity, pl->ni);
    if (tu_check(s == BT_OK, "%s: towers: %s", title, msg(s)))
        s = bt_cross_forward_pairs(&m, pairs, P);
    if (!tu_check(s == BT_OK, "%s: pairs: %s", title, msg(s))) {
        bt_model_free(&m);
        free(g.pix);
        return;
    }
    snap a;
    snap_take(&a, &m);
    /* the gathered batch: row p = (text t_p, image i_p) */
    int trows[MAXP], irows[MAXP];
    for (size_t p = 0; p < P; p++) {
        trows[p] = pairs[p].text_row;
        irows[p] = pairs[p].image_row;
    }
    gather(&g, pl, trows, P, irows, P);
    bt_batch b = {P, T, g.ids, g.mask, g.pix, NULL, NULL};
    s = bt_forward(&m, &b);
    if (tu_check(s == BT_OK, "%s: bt_forward on the gathered batch: %s", title, msg(s))) {
        const double af = prec == BT_PRECISION_BF16 ? 4e-2 : 1e-5;
        const double rt = prec == BT_PRECISION_BF16 ? 0.0 : 1e-5;
        char name[160];
        snprintf(name, sizeof name, "%s: pooler (P, 2H)", title);
        same(name, a.pooler, m.acts.cross->pooler, P * a.H2, bitwise, af, rt);
        snprintf(name, sizeof name, "%s: ITM logits (P, 2)", title);
        same(name, a.itm, m.acts.heads->itm_logits, P * 2, bitwise, af, rt);
        snprintf(name, sizeof name, "%s: ITC cross (P, C)", title);
        same(name, a.itc_c, m.acts.heads->itc_c, P * a.C, bitwise, af, rt);
        for (size_t p = 0, j = 0; p < P; p++) {
            if (pairs[p].mlm) {
                snprintf(name, sizeof name, "%s: MLM logits of pair %zu (MLM row %zu)", title, p, j);
                same(name, a.mlm + j * a.TV, m.acts.heads->mlm_logits + p * a.TV, a.TV, bitwise,
                     af, rt);
                j++;
            }
            snprintf(name, sizeof name, "%s: ITC text of row %d (pair %zu)", title,
                     pairs[p].text_row, p);
            same(name, a.itc_t + (size_t)pairs[p].text_row * a.C, m.acts.heads->itc_t + p * a.C,
                 a.C, bitwise, af, rt);
            snprintf(name, sizeof name, "%s: ITC image of row %d (pair %zu)", title,
                     pairs[p].image_row, p);
            same(name, a.itc_i + (size_t)pairs[p].image_row * a.C, m.acts.heads->itc_i + p * a.C,
                 a.C, bitwise, af, rt);
        }
    }
    snap_free(&a);
    free(g.pix);
    bt_model_free(&m);
}

static void test_pairs_vs_gathered(const bt_model_config *c) {
    tu_rng r;
    tu_rng_seed(&r, 31);
    pool pl;
    pool_init(&pl, c, 3, 2, &r);
    /* text 2 and 0 twice, image 1 three times, MLM on three of five */
    const bt_pair pairs[] = {{2, 0, 1}, {0, 1, 0}, {1, 1, 1}, {2, 1, 0}, {0, 0, 1}};
    const size_t P = sizeof pairs / sizeof pairs[0];
    gemm_backend be = gemm_get_backend();
    gemm_set_backend(GEMM_BACKEND_REF);
    check_pairs_vs_gathered("1 fp32 (ref GEMM, bitwise)", BT_PRECISION_FP32, &pl, pairs, P, 1);
    check_pairs_vs_gathered("1 bf16 (ref GEMM, bitwise)", BT_PRECISION_BF16, &pl, pairs, P, 1);
    gemm_set_backend(be);
    if (be != GEMM_BACKEND_REF) {
        char t[96];
        snprintf(t, sizeof t, "1 fp32 (%s GEMM)", gemm_backend_name(be));
        check_pairs_vs_gathered(t, BT_PRECISION_FP32, &pl, pairs, P, 0);
        snprintf(t, sizeof t, "1 bf16 (%s GEMM)", gemm_backend_name(be));
        check_pairs_vs_gathered(t, BT_PRECISION_BF16, &pl, pairs, P, 0);
    }
    free(pl.pix);
}

/* 3: 2B texts (B captions, B masked copies), B images. */
static void test_bt_ne_bi(const bt_model_config *c) {
    enum { B = 3 };
    tu_rng r;
    tu_rng_seed(&r, 37);
    pool pl;
    pool_init(&pl, c, 2 * B, B, &r);
    for (size_t b = 0; b < B; b++) {
        /* row B+b = caption b with every third real token after <s> replaced by id 4 */
        memcpy(pl.ids + (B + b) * T, pl.ids + b * T, T * sizeof *pl.ids);
        memcpy(pl.mask + (B + b) * T, pl.mask + b * T, T * sizeof *pl.mask);
        for (size_t t = 1; t < T; t += 3)
            if (pl.mask[b * T + t]) pl.ids[(B + b) * T + t] = 4;
        pl.tkeys[B + b] = pl.tkeys[b] | 1ull << 63;
    }
    bt_pair pairs[3 * B + B];
    size_t P = 0;
    for (int b = 0; b < B; b++) pairs[P++] = (bt_pair){b, b, 0};             /* positives */
    for (int b = 0; b < B; b++) pairs[P++] = (bt_pair){b, (b + 1) % B, 0};   /* neg. images */
    for (int b = 0; b < B; b++) pairs[P++] = (bt_pair){(b + 2) % B, b, 0};   /* neg. texts */
    for (int b = 0; b < B; b++) pairs[P++] = (bt_pair){B + b, b, 1};         /* MLM */
    gemm_backend be = gemm_get_backend();
    gemm_set_backend(GEMM_BACKEND_REF);
    check_pairs_vs_gathered("3 Bt=2B, Bi=B (ref GEMM, bitwise)", BT_PRECISION_FP32, &pl, pairs, P,
                            1);
    gemm_set_backend(be);
    if (be != GEMM_BACKEND_REF)
        check_pairs_vs_gathered("3 Bt=2B, Bi=B", BT_PRECISION_FP32, &pl, pairs, P, 0);
    free(pl.pix);
}

/* --- 2: re-used rows: gradients ----------------------------------------------------------- */

/* A fixed linear read-out of the outputs: L_pairs = Σ R·(ITM, ITC cross, MLM of the pair),
 * L_towers = Σ R·(ITC text, ITC image). R rows belong to pairs / rows, so a one-pair run can
 * apply its pair's rows. Scaled by 1/sqrt(count) per group so each term is O(1). */
typedef struct readout {
    float itm[MAXP * 2], itc_c[MAXP * 16], itc_t[MAXR * 16], itc_i[MAXR * 16];
    float *mlm; /* (Pm, T*V) */
} readout;

typedef struct reuse_case {
    pool pl;
    gathered g;
    const bt_pair *pairs;
    size_t P;
    readout ro;
} reuse_case;

static double dot(const float *a, const float *b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

static void add_to(float *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] += src[i];
}

/* Loss 0 over pairs[0..P) (MLM rows of the read-out starting at mlm0), from the outputs; its
 * gradient into the d_* slots when grad. */
static double pair_loss(bt_model *m, const readout *ro, const size_t *pidx, size_t mlm0,
                        int grad) {
    const size_t C = (size_t)m->cfg.contrastive_hidden, TV = m->T * (size_t)m->cfg.vocab_size;
    double L = 0;
    for (size_t p = 0; p < m->P; p++) {
        const size_t q = pidx[p]; /* the pair's index in the full list */
        L += dot(m->itm_logits_out + p * 2, ro->itm + q * 2, 2);
        L += dot(m->itc_cross + p * C, ro->itc_c + q * C, C);
        if (grad) {
            add_to(m->d_itm_logits + p * 2, ro->itm + q * 2, 2);
            add_to(m->d_itc_cross + p * C, ro->itc_c + q * C, C);
        }
    }
    for (size_t j = 0; j < m->Pm; j++) {
        L += dot(m->mlm_logits_out + j * TV, ro->mlm + (mlm0 + j) * TV, TV);
        if (grad) add_to(m->d_mlm_logits + j * TV, ro->mlm + (mlm0 + j) * TV, TV);
    }
    return L;
}

static double tower_loss(bt_model *m, const readout *ro, int grad) {
    const size_t C = (size_t)m->cfg.contrastive_hidden;
    double L = dot(m->itc_text, ro->itc_t, m->Bt * C) + dot(m->itc_image, ro->itc_i, m->Bi * C);
    if (grad) {
        add_to(m->d_itc_text, ro->itc_t, m->Bt * C);
        add_to(m->d_itc_image, ro->itc_i, m->Bi * C);
    }
    return L;
}

static size_t all_idx[MAXP] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};

/* fd_losses_fn: [L_pairs, L_towers] of the phased model on the case. */
static void reuse_losses(bt_model *m, void *ctx, double *out) {
    reuse_case *rc = ctx;
    bt_status s = towers_on(m, &rc->g, &rc->pl, identity, rc->pl.nt, identity, rc->pl.ni);
    BT_ASSERT(s == BT_OK);
    s = bt_cross_forward_pairs(m, rc->pairs, rc->P);
    BT_ASSERT(s == BT_OK);
    out[0] = pair_loss(m, &rc->ro, all_idx, 0, 0);
    out[1] = tower_loss(m, &rc->ro, 0);
}

/* Analytic gradients: [0] pairs loss (cross + towers backward), [1] tower ITC loss (towers
 * backward alone). */
static void reuse_grads(bt_model *m, reuse_case *rc, float **grads, double *l0) {
    const size_t n = m->table.numel;
    bt_zero_grad(m);
    reuse_losses(m, rc, l0);
    pair_loss(m, &rc->ro, all_idx, 0, 1);
    bt_cross_backward_pairs(m);
    bt_towers_backward(m);
    memcpy(grads[0], m->grads, n * sizeof(float));
    bt_zero_grad(m);
    reuse_losses(m, rc, l0);
    tower_loss(m, &rc->ro, 1);
    bt_towers_backward(m);
    memcpy(grads[1], m->grads, n * sizeof(float));
}

static void readout_init(readout *ro, const bt_model_config *c, size_t P, size_t Pm, size_t Bt,
                         size_t Bi, tu_rng *r) {
    const size_t C = (size_t)c->contrastive_hidden, TV = T * (size_t)c->vocab_size;
    BT_ASSERT(C <= 16 && P <= MAXP);
    for (size_t i = 0; i < P * 2; i++) ro->itm[i] = (float)(tu_rng_normal(r) / sqrt(2.0 * P));
    for (size_t i = 0; i < P * C; i++) ro->itc_c[i] = (float)(tu_rng_normal(r) / sqrt((double)P * C));
    for (size_t i = 0; i < Bt * C; i++) ro->itc_t[i] = (float)(tu_rng_normal(r) / sqrt((double)Bt * C));
    for (size_t i = 0; i < Bi * C; i++) ro->itc_i[i] = (float)(tu_rng_normal(r) / sqrt((double)Bi * C));
    ro->mlm = malloc((Pm ? Pm : 1) * TV * sizeof *ro->mlm);
    for (size_t i = 0; i < Pm * TV; i++) ro->mlm[i] = (float)(tu_rng_normal(r) / sqrt((double)Pm * TV));
}

static double absmax(const float *x, size_t n) {
    double mx = 0;
    for (size_t i = 0; i < n; i++) mx = fmax(mx, fabs(x[i]));
    return mx;
}

/* Per-tensor comparison of two parameter gradients (2a); prints the worst error. Attention
 * key biases have an exact gradient of 0 (softmax is shift invariant), so both sides hold
 * rounding noise; their scale is the matching key.weight gradient's (as test_model_parity.c). */
static void check_grads_equal(const char *title, const char *ref, const bt_model *m,
                              const float *got, const float *want) {
    const bt_param_table *t = &m->table;
    double worst = 0;
    const char *worst_key = "";
    int ok = 1;
    for (size_t i = 0; i < t->n_tensors; i++) {
        const bt_param_tensor *x = &t->tensors[i];
        double mx = absmax(want + x->offset, x->numel), md = 0;
        const size_t len = strlen(x->key);
        if (len > 9 && strcmp(x->key + len - 9, ".key.bias") == 0) {
            char wkey[256];
            snprintf(wkey, sizeof wkey, "%.*s.key.weight", (int)(len - 9), x->key);
            const bt_param_tensor *kw = bt_param_table_find(t, wkey);
            BT_ASSERT(kw);
            mx = absmax(want + kw->offset, kw->numel);
        }
        for (size_t e = 0; e < x->numel; e++)
            md = fmax(md, fabs((double)got[x->offset + e] - want[x->offset + e]));
        for (size_t e = 0; e < x->numel; e++) {
            const double d = fabs((double)got[x->offset + e] - want[x->offset + e]);
            if (!(d <= 1e-5 * mx + 1e-5 * fabs(want[x->offset + e]))) {
                if (ok)
                    tu_check(0, "%s: %s[%zu] = %.8e, %s %.8e (max|b| %.2e)", title, x->key, e,
                             got[x->offset + e], ref, want[x->offset + e], mx);
                ok = 0;
                break;
            }
        }
        if (mx > 0 && md / mx > worst) {
            worst = md / mx;
            worst_key = x->key;
        }
    }
    printf("# %s: worst max|a-b|/max|b| over the tensors %.2e (%s)\n", title, worst, worst_key);
    tu_check(ok, "%s: every parameter gradient within 1e-5 of the %s", title, ref);
}

static void test_reuse(const bt_model_config *c, int training) {
    const char *mode = training ? "dropout on" : "dropout off";
    /* Bt = 4 texts, Bi = 2 images; text 0 in three pairs (one pair twice), image 1 in three */
    static const bt_pair pairs[] = {{0, 0, 1}, {0, 1, 0}, {1, 1, 1}, {0, 0, 0}, {3, 1, 0},
                                    {2, 0, 1}};
    const size_t P = sizeof pairs / sizeof pairs[0], Pm = 3;
    reuse_case rc;
    memset(&rc, 0, sizeof rc);
    tu_rng r;
    tu_rng_seed(&r, 41 + (uint64_t)training);
    pool_init(&rc.pl, c, 4, 2, &r);
    rc.pairs = pairs;
    rc.P = P;
    readout_init(&rc.ro, c, P, Pm, 4, 2, &r);
    /* a loss never reads MLM logits at padding positions (labels -100): the padding rows of
     * the word and position tables get no gradient (HF padding_idx), so reading there would
     * make the finite differences see a dependence the backward deliberately drops */
    const size_t TV = T * (size_t)c->vocab_size, V = (size_t)c->vocab_size;
    for (size_t p = 0, j = 0; p < P; p++) {
        if (!pairs[p].mlm) continue;
        for (size_t t = 0; t < T; t++)
            if (!rc.pl.mask[(size_t)pairs[p].text_row * T + t])
                memset(rc.ro.mlm + j * TV + t * V, 0, V * sizeof(float));
        j++;
    }
    bt_model m;
    if (!model_make(&m, BT_PRECISION_FP32, 23)) return;
    bt_model_set_dropout(&m, training, 77, 5);
    const size_t n = m.table.numel;
    float *grads[2] = {malloc(n * sizeof(float)), malloc(n * sizeof(float))};
    double l0[2];
    reuse_grads(&m, &rc, grads, l0);

    /* (a) sum of separate one-pair runs (each its own tower pass on the pair's two rows, with
     * the same sample keys, hence the same dropout masks) */
    float *sum = calloc(n, sizeof *sum);
    size_t mlm0 = 0;
    for (size_t p = 0; p < P; p++) {
        const int tr = pairs[p].text_row, ir = pairs[p].image_row;
        bt_zero_grad(&m);
        bt_status s = towers_on(&m, &rc.g, &rc.pl, &tr, 1, &ir, 1);
        const bt_pair one = {0, 0, pairs[p].mlm};
        if (s == BT_OK) s = bt_cross_forward_pairs(&m, &one, 1);
        if (!tu_check(s == BT_OK, "2a one-pair run %zu: %s", p, msg(s))) break;
        pair_loss(&m, &rc.ro, &p, mlm0, 1);
        mlm0 += (size_t)pairs[p].mlm;
        bt_cross_backward_pairs(&m);
        bt_towers_backward(&m);
        add_to(sum, m.grads, n);
    }
    char title[128];
    snprintf(title, sizeof title, "2a %s: reused rows, gradient of the pair loss", mode);
    check_grads_equal(title, "sum of separate runs", &m, grads[0], sum);

    /* (a') one tower pass, the pairs in two cross rounds (pairs 0-2, then 3-5), each with its
     * own loss and backward, then one bt_towers_backward: the rounds' row gradients add up */
    bt_zero_grad(&m);
    bt_status s = towers_on(&m, &rc.g, &rc.pl, identity, rc.pl.nt, identity, rc.pl.ni);
    for (size_t lo = 0, mlm_lo = 0; lo < P && s == BT_OK; lo += 3) {
        s = bt_cross_forward_pairs(&m, pairs + lo, 3);
        if (s != BT_OK) break;
        pair_loss(&m, &rc.ro, all_idx + lo, mlm_lo, 1);
        mlm_lo += m.Pm;
        bt_cross_backward_pairs(&m);
    }
    if (tu_check(s == BT_OK, "2a' rounds: %s", msg(s))) {
        bt_towers_backward(&m);
        snprintf(title, sizeof title, "2a' %s: two cross rounds on one tower pass", mode);
        check_grads_equal(title, "one-round gradient", &m, m.grads, grads[0]);
    }
    free(sum);

    /* (b) finite differences through the phased model */
    static const struct {
        bt_param_id id;
        int layer;
    } picks[] = {{BT_P_COUNT, -1},     {BT_P_TEXT_WORD_EMB, 0}, {BT_P_TL_Q_W, 1},
                 {BT_P_VL_FC_W, 2},    {BT_P_VIS_LN_POST_W, 0}, {BT_P_TYPE_EMB, 0},
                 {BT_P_XT_TRANSFORM_W, 0}, {BT_P_XTL_CQ_W, 0}, {BT_P_XI_LINK_LN_W, 1},
                 {BT_P_ITC_TEXT_W, 0}, {BT_P_MLM_TR_W, 0}};
    float *v = malloc(n * sizeof *v);
    tu_rng rd;
    tu_rng_seed(&rd, 43);
    for (size_t i = 0; i < sizeof picks / sizeof picks[0]; i++) {
        fd_direction(&m.table, m.params, v, &rd, picks[i].id, picks[i].layer);
        double fd[2], an[2];
        fd_along(&m, v, 2, reuse_losses, &rc, grads, fd, an);
        char label[160];
        snprintf(label, sizeof label, "2b %s: %s", mode,
                 picks[i].id == BT_P_COUNT ? "all parameters" : m.table.fields[picks[i].id].name);
        fd_check(label, "pairs (ITM+ITC cross+MLM)", fd[0], an[0], l0[0]);
        fd_check(label, "towers (ITC text+image)", fd[1], an[1], l0[1]);
    }
    free(v);
    free(grads[0]);
    free(grads[1]);
    free(rc.ro.mlm);
    free(rc.pl.pix);
    free(rc.g.pix);
    bt_model_free(&m);
}

/* --- 4: dropout keyed by sample ----------------------------------------------------------- */

/* Runs towers on pool rows and pairs (pool indices mapped to the run's rows). */
static int keyed_run(bt_model *m, gathered *g, const pool *pl, const int *trows, size_t nt,
                     const int *irows, size_t ni, const bt_pair *pool_pairs, size_t P, snap *out) {
    bt_pair pairs[MAXP];
    for (size_t p = 0; p < P; p++) {
        pairs[p] = pool_pairs[p];
        for (size_t j = 0; j < nt; j++)
            if (trows[j] == pool_pairs[p].text_row) pairs[p].text_row = (int32_t)j;
        for (size_t j = 0; j < ni; j++)
            if (irows[j] == pool_pairs[p].image_row) pairs[p].image_row = (int32_t)j;
    }
    bt_status s = towers_on(m, g, pl, trows, nt, irows, ni);
    if (s == BT_OK) s = bt_cross_forward_pairs(m, pairs, P);
    if (!tu_check(s == BT_OK, "4: run: %s", msg(s))) return 0;
    snap_take(out, m);
    return 1;
}

/* Pair p of run a (pool pair pa[p]) equals pair q of run b; rows likewise. */
static int pair_equal(const snap *a, size_t p, size_t mp, const snap *b, size_t q, size_t mq,
                      int mlm) {
    int eq = memcmp(a->pooler + p * a->H2, b->pooler + q * b->H2, a->H2 * sizeof(float)) == 0 &&
             memcmp(a->itm + p * 2, b->itm + q * 2, 2 * sizeof(float)) == 0 &&
             memcmp(a->itc_c + p * a->C, b->itc_c + q * b->C, a->C * sizeof(float)) == 0;
    if (mlm) eq = eq && memcmp(a->mlm + mp * a->TV, b->mlm + mq * b->TV, a->TV * sizeof(float)) == 0;
    return eq;
}

static void test_dropout_keys(const bt_model_config *c) {
    tu_rng r;
    tu_rng_seed(&r, 47);
    pool pl;
    pool_init(&pl, c, 3, 2, &r);
    /* pool pairs (pool rows); MLM on two */
    static const bt_pair pp[] = {{0, 0, 1}, {1, 1, 0}, {2, 0, 0}, {1, 0, 1}, {2, 1, 0}};
    const size_t P = sizeof pp / sizeof pp[0];
    gemm_backend be = gemm_get_backend();
    gemm_set_backend(GEMM_BACKEND_REF);
    bt_model m;
    if (!model_make(&m, BT_PRECISION_FP32, 29)) return;
    bt_model_set_dropout(&m, 1, 123, 9);
    gathered g;
    memset(&g, 0, sizeof g);
    snap a, b, cs, off, k2;
    const int ta[] = {0, 1, 2}, ia[] = {0, 1};
    if (!keyed_run(&m, &g, &pl, ta, 3, ia, 2, pp, P, &a)) return;

    /* permuted: texts (2, 0, 1), images (1, 0), pairs reversed */
    const int tb[] = {2, 0, 1}, ib[] = {1, 0};
    bt_pair rev[MAXP];
    for (size_t p = 0; p < P; p++) rev[p] = pp[P - 1 - p];
    if (keyed_run(&m, &g, &pl, tb, 3, ib, 2, rev, P, &b)) {
        int ok = 1;
        /* MLM row of a pair = number of flagged pairs before it, in each run's order */
        for (size_t p = 0, ma = 0; p < P; p++) {
            const size_t q = P - 1 - p;
            size_t mb = 0;
            for (size_t j = 0; j < q; j++) mb += (size_t)rev[j].mlm;
            ok = ok && pair_equal(&a, p, ma, &b, q, mb, pp[p].mlm);
            ma += (size_t)pp[p].mlm;
        }
        for (size_t j = 0; j < 3; j++)
            ok = ok && memcmp(a.itc_t + (size_t)tb[j] * a.C, b.itc_t + j * b.C,
                              a.C * sizeof(float)) == 0;
        for (size_t j = 0; j < 2; j++)
            ok = ok && memcmp(a.itc_i + (size_t)ib[j] * a.C, b.itc_i + j * b.C,
                              a.C * sizeof(float)) == 0;
        tu_check(ok, "4: permuted texts, images and pairs give the same outputs per sample and "
                     "pair, bit for bit (dropout on)");
        snap_free(&b);
    }

    /* batch split: a tower pass on texts {2, 1}, image {0} only, pairs (2,0) and (1,0) */
    const int tc[] = {2, 1}, ic[] = {0};
    const bt_pair sub[] = {pp[3], pp[2]}; /* (1,0,mlm), (2,0) */
    if (keyed_run(&m, &g, &pl, tc, 2, ic, 1, sub, 2, &cs)) {
        /* pp[3] is MLM row 1 of run a (after pp[0]) */
        const int ok = pair_equal(&a, 3, 1, &cs, 0, 0, 1) && pair_equal(&a, 2, 0, &cs, 1, 0, 0) &&
                       memcmp(a.itc_t + 2 * a.C, cs.itc_t, a.C * sizeof(float)) == 0 &&
                       memcmp(a.itc_i, cs.itc_i, a.C * sizeof(float)) == 0;
        tu_check(ok, "4: a split batch (2 of 3 texts, 1 of 2 images, 2 of 5 pairs) reproduces "
                     "those rows and pairs bit for bit (dropout on)");
        snap_free(&cs);
    }

    /* controls: dropout is active; a changed key changes its own rows only */
    bt_model_set_dropout(&m, 0, 123, 9);
    if (keyed_run(&m, &g, &pl, ta, 3, ia, 2, pp, P, &off)) {
        tu_check(memcmp(a.pooler, off.pooler, P * a.H2 * sizeof(float)) != 0 &&
                     memcmp(a.itc_t, off.itc_t, 3 * a.C * sizeof(float)) != 0,
                 "4 control: dropout on changes the outputs (the masks are applied)");
        snap_free(&off);
    }
    bt_model_set_dropout(&m, 1, 123, 9);
    pl.tkeys[1] ^= 0x5555;
    if (keyed_run(&m, &g, &pl, ta, 3, ia, 2, pp, P, &k2)) {
        /* text 1 is in pairs 1 and 3 */
        const int own = memcmp(a.itc_t + a.C, k2.itc_t + k2.C, a.C * sizeof(float)) != 0 &&
                        !pair_equal(&a, 1, 0, &k2, 1, 0, 0) && !pair_equal(&a, 3, 1, &k2, 3, 1, 1);
        const int others = memcmp(a.itc_t, k2.itc_t, a.C * sizeof(float)) == 0 &&
                           pair_equal(&a, 0, 0, &k2, 0, 0, 1) && pair_equal(&a, 2, 0, &k2, 2, 0, 0) &&
                           pair_equal(&a, 4, 0, &k2, 4, 0, 0);
        tu_check(own && others, "4 control: a new key for text 1 changes its row and its pairs "
                                "only (own rows changed %d, others identical %d)", own, others);
        snap_free(&k2);
    }
    snap_free(&a);
    gemm_set_backend(be);
    free(g.pix);
    free(pl.pix);
    bt_model_free(&m);
}

/* --- 5: memory ------------------------------------------------------------------------------ */

/* the phase arenas and the layer gradient scratch (BT_ACTS_FULL shares the layers' internal
 * gradients there: model.h "Memory modes") */
static size_t arenas_bytes(const bt_model *m) {
    return m->tower_act.bytes + m->tower_dact.bytes + m->pair_act.bytes + m->pair_dact.bytes +
           m->layer_dact.bytes;
}

static void test_memory(const bt_model_config *c) {
    bt_model m;
    if (!model_make(&m, BT_PRECISION_FP32, 3)) return;
    enum { Bt = 6, Bi = 3, P = 7, Pm = 2 };
    const size_t want = bt_model_activation_bytes(c, BT_HEADS_ALL, BT_PRECISION_FP32, Bt, Bi, P,
                                                  Pm, T);
    bt_status s = bt_model_reserve_phases(&m, Bt, Bi, P, Pm, T);
    tu_check(s == BT_OK && arenas_bytes(&m) == want,
             "5: bt_model_activation_bytes(6 texts, 3 images, 7 pairs, 2 MLM, T=8) = %zu = bytes "
             "bt_model_reserve_phases allocated (%zu)", want, arenas_bytes(&m));
    /* bf16 mode stores the activations only bf16 GEMMs read in bf16 where it computes its
     * GEMMs in bf16 (model.h "bf16 activation storage"; BT_ACT_BF16=0 turns it off), else its
     * activations are fp32 */
    const size_t want16 =
        bt_model_activation_bytes(c, BT_HEADS_ALL, BT_PRECISION_BF16, Bt, Bi, P, Pm, T);
    const char *act_env = getenv("BT_ACT_BF16");
    const int stored16 = gemm_bf16_mode_compute() == GEMM_COMPUTE_BF16 &&
                         !(act_env && strcmp(act_env, "0") == 0);
    tu_check(stored16 ? want16 < want : want16 == want,
             "5: bf16 mode: %s activation bytes (%zu, fp32 %zu)",
             stored16 ? "fewer (bf16 storage)" : "the same (fp32)", want16, want);
    tu_check(bt_model_activation_bytes(c, BT_HEADS_ALL, BT_PRECISION_FP32, Bt + 1, Bi, P, Pm, T) >
                     want &&
                 bt_model_activation_bytes(c, BT_HEADS_ALL, BT_PRECISION_FP32, Bt, Bi, P + 1, Pm,
                                           T) > want &&
                 bt_model_activation_bytes(c, BT_HEADS_ITC, BT_PRECISION_FP32, Bt, Bi, P, Pm, T) <
                     want,
             "5: more texts or pairs need more bytes, fewer heads fewer");

    /* steps at and below the reserved shapes allocate nothing */
    void *mem[4] = {m.tower_act.mem, m.tower_dact.mem, m.pair_act.mem, m.pair_dact.mem};
    tu_rng r;
    tu_rng_seed(&r, 53);
    pool pl;
    pool_init(&pl, c, Bt, Bi, &r);
    gathered g;
    memset(&g, 0, sizeof g);
    bt_pair pairs[P];
    for (int p = 0; p < P; p++) pairs[p] = (bt_pair){p % Bt, p % Bi, p < Pm};
    int ok = 1;
    for (int round = 0; round < 2; round++) {
        const size_t nt = round ? 2 : Bt, ni = round ? 1 : Bi, np = round ? 2 : P;
        for (size_t p = 0; p < np && round; p++) pairs[p] = (bt_pair){(int)p, 0, (int)p};
        s = towers_on(&m, &g, &pl, identity, nt, identity, ni);
        if (s == BT_OK) s = bt_cross_forward_pairs(&m, pairs, np);
        if (s == BT_OK) {
            bt_cross_backward_pairs(&m);
            bt_towers_backward(&m);
        }
        ok = ok && s == BT_OK && m.tower_act.mem == mem[0] && m.tower_dact.mem == mem[1] &&
             m.pair_act.mem == mem[2] && m.pair_dact.mem == mem[3] && arenas_bytes(&m) == want;
    }
    tu_check(ok, "5: a step at the reserved shapes and a smaller one reuse the arenas (no "
                 "allocation): %s", msg(s));

    /* impossible shapes: a status, the model unchanged */
    s = bt_model_reserve_phases(&m, (size_t)1 << 36, Bi, P, Pm, T);
    const char *err = bt_error_message();
    tu_check(s == BT_ERR_NOMEM && strstr(err, "reduce the batch size") &&
                 strstr(err, "available") && m.tower_act.mem == mem[0] &&
                 arenas_bytes(&m) == want,
             "5: 2^36 texts -> BT_ERR_NOMEM, model untouched (%s)", err);
    s = bt_model_reserve_phases(&m, Bt, Bi, (size_t)1 << 60, Pm, T);
    tu_check(s == BT_ERR_NOMEM && arenas_bytes(&m) == want,
             "5: 2^60 pairs -> BT_ERR_NOMEM (%s)", bt_error_message());
    s = towers_on(&m, &g, &pl, identity, Bt, identity, Bi);
    tu_check(s == BT_OK, "5: the model still runs after a refused reserve");
    {
        /* the weights themselves: a machine with 64 KiB free cannot hold the tiny model's
         * weights and gradients; bt_model_init says so instead of aborting in calloc */
        tu_setenv("BT_MEM_AVAILABLE", "65536", 1);
        bt_model small;
        s = bt_model_init(&small, &m.cfg, BT_HEADS_ALL, BT_PRECISION_FP32);
        tu_unsetenv("BT_MEM_AVAILABLE");
        tu_check(s == BT_ERR_NOMEM && strstr(bt_error_message(), "model config") &&
                     small.params == NULL,
                 "5: weights beyond the machine's memory -> BT_ERR_NOMEM at init (%s)",
                 bt_error_message());
    }

    /* bad inputs are named errors */
    const bt_pair bad[] = {{0, 0, 0}, {1, (int)Bi, 0}};
    s = bt_cross_forward_pairs(&m, bad, 2);
    tu_check(s == BT_ERR_ARG && strstr(bt_error_message(), "pairs[1].image_row"),
             "5: an image row out of range is named (%s)", bt_error_message());
    const bt_pair badm[] = {{0, 0, 2}};
    s = bt_cross_forward_pairs(&m, badm, 1);
    tu_check(s == BT_ERR_ARG && strstr(bt_error_message(), "pairs[0].mlm"),
             "5: an mlm flag other than 0/1 is named (%s)", bt_error_message());

    /* bt_forward's loss scratch */
    gather(&g, &pl, identity, 2, identity, 2);
    bt_batch b = {2, T, g.ids, g.mask, g.pix, NULL, NULL};
    s = bt_forward(&m, &b);
    tu_check(s == BT_OK && m.hf_mem.bytes == bt_model_hf_loss_bytes(c, BT_HEADS_ALL, 2, T) &&
                 arenas_bytes(&m) == want,
             "5: bt_forward (B=2) allocates bt_model_hf_loss_bytes = %zu for its losses and "
             "reuses the phase arenas", bt_model_hf_loss_bytes(c, BT_HEADS_ALL, 2, T));
    free(g.pix);
    free(pl.pix);
    bt_model_free(&m);
}

/* --- 6: one tower only (Bt = 0 or Bi = 0) ------------------------------------------------- */

static void test_one_tower(const bt_model_config *c) {
    tu_rng r;
    tu_rng_seed(&r, 59);
    pool pl;
    pool_init(&pl, c, 3, 2, &r);
    gemm_backend be = gemm_get_backend();
    gemm_set_backend(GEMM_BACKEND_REF);
    bt_model m;
    if (!model_make(&m, BT_PRECISION_FP32, 31)) return;
    gathered g;
    memset(&g, 0, sizeof g);
    const size_t C = (size_t)c->contrastive_hidden;
    bt_status s = towers_on(&m, &g, &pl, identity, 3, identity, 2);
    float *t_both = s == BT_OK ? dup(m.itc_text, 3 * C) : NULL;
    float *i_both = s == BT_OK ? dup(m.itc_image, 2 * C) : NULL;
    if (tu_check(s == BT_OK, "6: both towers: %s", msg(s))) {
        s = towers_on(&m, &g, &pl, identity, 3, identity, 0);
        tu_check(s == BT_OK && m.Bi == 0 && memcmp(m.itc_text, t_both, 3 * C * sizeof(float)) == 0,
                 "6: texts only (Bi = 0): the same ITC text embeddings, bit for bit (%s)",
                 msg(s));
        /* an ITC-text-only backward runs without a cross phase */
        bt_zero_grad(&m);
        for (size_t i = 0; i < 3 * C; i++) m.d_itc_text[i] = 1.0f;
        bt_towers_backward(&m);
        tu_check(absmax(m.g.itc_text_w, C * (size_t)c->hidden) > 0 &&
                     absmax(m.g.text_word_emb, m.table.fields[BT_P_TEXT_WORD_EMB].numel) > 0 &&
                     absmax(m.g.vis_patch_w, m.table.fields[BT_P_VIS_PATCH_W].numel) == 0,
                 "6: texts only: the backward reaches the text side and leaves vision alone");
        const bt_pair one = {0, 0, 0};
        s = bt_cross_forward_pairs(&m, &one, 1);
        tu_check(s == BT_ERR_ARG && strstr(bt_error_message(), "image_row"),
                 "6: texts only: a pair has no image row to read (%s)", bt_error_message());
        s = towers_on(&m, &g, &pl, identity, 0, identity, 2);
        tu_check(s == BT_OK && m.Bt == 0 && memcmp(m.itc_image, i_both, 2 * C * sizeof(float)) == 0,
                 "6: images only (Bt = 0): the same ITC image embeddings, bit for bit (%s)",
                 msg(s));
        s = towers_on(&m, &g, &pl, identity, 0, identity, 0);
        tu_check(s == BT_ERR_SHAPE, "6: no rows at all is an error (%s)", bt_error_message());
    }
    free(t_both);
    free(i_both);
    gemm_set_backend(be);
    free(g.pix);
    free(pl.pix);
    bt_model_free(&m);
}

int main(void) {
    if (gemm_init_from_env() != BT_OK) {
        fprintf(stderr, "%s\n", bt_error_message());
        return 1;
    }
    bt_model_config c;
    if (fd_tiny_config(&c)) {
        test_pairs_vs_gathered(&c);
        test_bt_ne_bi(&c);
        test_reuse(&c, 0);
        test_reuse(&c, 1);
        test_dropout_keys(&c);
        test_memory(&c);
        test_one_tower(&c);
    }
    gemm_release();
    return tu_finish();
}
