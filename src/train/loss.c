/* loss.c: fused loss forward + backward, the ITM hard-negative sampler and the MLM masker
 * (see loss.h for the math and the contracts).
 *
 * Why a cross-entropy of its own instead of ops.h's cross_entropy_forward / _backward: those
 * keep the (N, V) probabilities for a later backward; here the loss and its gradient are one
 * pass (the MLM probabilities of B·T rows × 50265 ids would be hundreds of MB), and ITC
 * needs soft (probability) targets.
 *
 * Deliberately not here: the ITC embeddings' normalization and heads (src/model), gathering
 * across ranks (src/dist). */
#include "train/loss.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/gemm.h"
#include "rng.h"

void bt_loss_ws_free(bt_loss_ws *ws) {
    bt_free(ws->buf);
    bt_free(ws->rowloss);
    memset(ws, 0, sizeof *ws);
}

static float *ws_floats(bt_loss_ws *ws, size_t n) {
    if (n > ws->cap) {
        bt_free(ws->buf);
        ws->buf = bt_alloc(n * sizeof *ws->buf);
        ws->cap = n;
    }
    return ws->buf;
}

static double *ws_rowloss(bt_loss_ws *ws, size_t n) {
    if (n > ws->rowloss_cap) {
        bt_free(ws->rowloss);
        ws->rowloss = bt_alloc((n ? n : 1) * sizeof *ws->rowloss);
        ws->rowloss_cap = n;
    }
    return ws->rowloss;
}

/* --- cross-entropy --------------------------------------------------------------------- */

/* One row: returns CE; dx += g (softmax(x) - y) when dx != NULL. y = onehot(t) when soft is
 * NULL. lse = max + log Σ exp(x - max), the sum in double. */
static double ce_row(float *dx, const float *x, size_t v, int32_t t, const float *soft,
                     float g) {
    float mx = x[0];
    for (size_t j = 1; j < v; j++) mx = x[j] > mx ? x[j] : mx;
    double sum = 0.0;
    for (size_t j = 0; j < v; j++) sum += (double)expf(x[j] - mx);
    const double lse = (double)mx + log(sum);
    double loss;
    if (soft) {
        double ysum = 0.0, yx = 0.0;
        for (size_t j = 0; j < v; j++) {
            ysum += soft[j];
            yx += (double)soft[j] * x[j];
        }
        loss = lse * ysum - yx; /* -Σ y_j (x_j - lse) */
    } else {
        loss = lse - (double)x[t];
    }
    if (dx) {
        const float inv = (float)(1.0 / sum);
        for (size_t j = 0; j < v; j++) {
            const float p = expf(x[j] - mx) * inv;
            dx[j] += g * (p - (soft ? soft[j] : (j == (size_t)t ? 1.0f : 0.0f)));
        }
    }
    return loss;
}

double bt_ce_rows(float *dlogits, const float *logits, size_t n, size_t v, size_t ld,
                  const int32_t *targets, const float *soft, float dscale, bt_loss_ws *ws) {
    BT_ASSERT(v > 0 && ld >= v && (targets || soft));
    double *rl = ws_rowloss(ws, n);
    const long nl = (long)n;
#pragma omp parallel for schedule(static) if (n * v >= 32768)
    for (long i = 0; i < nl; i++) {
        const int32_t t = targets ? targets[i] : 0;
        if (!soft && t == -100) {
            rl[i] = 0.0;
            continue;
        }
        rl[i] = ce_row(dlogits ? dlogits + (size_t)i * ld : NULL, logits + (size_t)i * ld, v, t,
                       soft ? soft + (size_t)i * v : NULL, dscale);
    }
    double total = 0.0;
    for (size_t i = 0; i < n; i++) total += rl[i]; /* in order: deterministic */
    return total;
}

/* --- ITC ------------------------------------------------------------------------------- */

/* out (m, n) = alpha · x (m, C) · y (n, C)ᵀ */
static void scores_forward(float *out, const float *x, const float *y, size_t m, size_t n,
                           size_t C, float alpha) {
    gemm_args g = {.trans_a = 0, .trans_b = 1, .m = m, .n = n, .k = C,
                   .a_type = BT_DTYPE_F32, .b_type = BT_DTYPE_F32, .a = x, .lda = C,
                   .b = y, .ldb = C, .c = out, .ldc = n, .alpha = alpha, .beta = 0.0f,
                   .compute = GEMM_COMPUTE_F32};
    gemm(&g);
}

/* S = alpha · x·yᵀ:  dx (m, C) += alpha · dS·y;  dy (n, C) += alpha · dSᵀ·x */
static void scores_backward(float *dx, float *dy, const float *dS, const float *x,
                            const float *y, size_t m, size_t n, size_t C, float alpha) {
    if (dx) {
        gemm_args g = {.trans_a = 0, .trans_b = 0, .m = m, .n = C, .k = n,
                       .a_type = BT_DTYPE_F32, .b_type = BT_DTYPE_F32, .a = dS, .lda = n,
                       .b = y, .ldb = C, .c = dx, .ldc = C, .alpha = alpha, .beta = 1.0f,
                       .compute = GEMM_COMPUTE_F32};
        gemm(&g);
    }
    if (dy) {
        gemm_args h = {.trans_a = 1, .trans_b = 0, .m = n, .n = C, .k = m,
                       .a_type = BT_DTYPE_F32, .b_type = BT_DTYPE_F32, .a = dS, .lda = n,
                       .b = x, .ldb = C, .c = dy, .ldc = C, .alpha = alpha, .beta = 1.0f,
                       .compute = GEMM_COMPUTE_F32};
        gemm(&h);
    }
}

/* pair j is a positive of pair g: the same pair, or a shared image or caption key */
static int is_positive(const uint64_t *image_key, const uint64_t *caption_key, size_t g,
                       size_t j) {
    if (j == g) return 1;
    if (image_key && image_key[j] == image_key[g]) return 1;
    if (caption_key && caption_key[j] == caption_key[g]) return 1;
    return 0;
}

float bt_itc_loss(const bt_itc_args *a, bt_loss_ws *ws) {
    const size_t R = a->n_rows, N = a->n_cols, C = a->C;
    BT_ASSERT(R > 0 && N > 0 && a->row_offset + R <= N && a->n_total > 0);
    BT_ASSERT(a->text_rows && a->image_rows && a->image_cols && a->cross_cols);
    const int soft = a->image_key && a->caption_key;
    /* scratch: S (R, N), dS (R, N), y (R, N) when soft, hard targets (R) */
    float *S = ws_floats(ws, 3 * R * N + R);
    float *dS = S + R * N, *y = dS + R * N;
    int32_t *targets = (int32_t *)(y + R * N);
    BT_ASSERT(sizeof(int32_t) == sizeof(float));
    for (size_t r = 0; r < R; r++) targets[r] = (int32_t)(a->row_offset + r);
    if (soft) {
        for (size_t r = 0; r < R; r++) {
            const size_t g = a->row_offset + r;
            size_t cnt = 0;
            for (size_t j = 0; j < N; j++) cnt += is_positive(a->image_key, a->caption_key, g, j);
            const float w = 1.0f / (float)cnt;
            for (size_t j = 0; j < N; j++)
                y[r * N + j] = is_positive(a->image_key, a->caption_key, g, j) ? w : 0.0f;
        }
    }
    const float s = expf(a->logit_scale);
    const float *lhs[3] = {a->text_rows, a->text_rows, a->image_rows};
    const float *rhs[3] = {a->image_cols, a->cross_cols, a->cross_cols};
    float *dlhs[3] = {a->d_text_rows, a->d_text_rows, a->d_image_rows};
    float *drhs[3] = {a->d_image_cols, a->d_cross_cols, a->d_cross_cols};
    /* loss = (1/3) Σ_k (1/n_total) Σ_rows CE_k:  dS_k = weight/(3 n_total) (softmax - y) */
    const float dscale = (float)((double)a->weight / (3.0 * (double)a->n_total));
    double loss = 0.0, dlogit = 0.0;
    for (int k = 0; k < 3; k++) {
        scores_forward(S, lhs[k], rhs[k], R, N, C, s);
        if (k == 0 && a->scores_ti) memcpy(a->scores_ti, S, R * N * sizeof *S);
        memset(dS, 0, R * N * sizeof *dS);
        loss += bt_ce_rows(dS, S, R, N, N, soft ? NULL : targets, soft ? y : NULL, dscale, ws);
        /* S = exp(logit_scale) · x·yᵀ:  d logit_scale = Σ dS ⊙ S */
        for (size_t e = 0; e < R * N; e++) dlogit += (double)dS[e] * S[e];
        scores_backward(dlhs[k], drhs[k], dS, lhs[k], rhs[k], R, N, C, s);
    }
    if (a->d_logit_scale) *a->d_logit_scale += (float)dlogit;
    return (float)(loss / (3.0 * (double)a->n_total));
}

void bt_itc_scores(float *out, const float *rows, const float *cols, size_t n_rows,
                   size_t n_cols, size_t C, float logit_scale) {
    scores_forward(out, rows, cols, n_rows, n_cols, C, expf(logit_scale));
}

/* --- ITM / MLM ------------------------------------------------------------------------- */

float bt_itm_loss(float *d_logits, const float *logits, const int32_t *labels, size_t P,
                  float weight, bt_loss_ws *ws) {
    BT_ASSERT(P > 0 && logits && labels);
    for (size_t i = 0; i < P; i++) BT_ASSERTF(labels[i] == 0 || labels[i] == 1,
                                              "ITM label %d at pair %zu", labels[i], i);
    const double loss = bt_ce_rows(d_logits, logits, P, 2, 2, labels, NULL,
                                   (float)((double)weight / (double)P), ws);
    return (float)(loss / (double)P);
}

float bt_mlm_loss(float *d_logits, const float *logits, const int32_t *labels, size_t n,
                  size_t V, float weight, size_t *n_valid, bt_loss_ws *ws) {
    size_t cnt = 0;
    for (size_t i = 0; i < n; i++) {
        BT_ASSERTF(labels[i] == -100 || (labels[i] >= 0 && (size_t)labels[i] < V),
                   "MLM label %d at position %zu (vocab %zu)", labels[i], i, V);
        cnt += labels[i] != -100;
    }
    if (n_valid) *n_valid = cnt;
    if (cnt == 0) return 0.0f;
    const double loss = bt_ce_rows(d_logits, logits, n, V, V, labels, NULL,
                                   (float)((double)weight / (double)cnt), ws);
    return (float)(loss / (double)cnt);
}

/* --- hard negatives -------------------------------------------------------------------- */

/* One draw for anchor g: candidates j with w[j] > 0 (weights in double, w = exp(sim - max)
 * or 1); falls back to uniform over candidates when the weights underflow, and to uniform
 * over j != g when there is no candidate. */
static int32_t draw_negative(bt_rng *r, const double *w, const unsigned char *cand, size_t B,
                             size_t g, size_t *n_fallback) {
    double sum = 0.0;
    size_t n_cand = 0;
    for (size_t j = 0; j < B; j++) {
        if (!cand[j]) continue;
        sum += w[j];
        n_cand++;
    }
    if (n_cand == 0) { /* every other pair shares the image or caption: uniform over j != g */
        if (n_fallback) (*n_fallback)++;
        size_t k = (size_t)bt_rng_below(r, B - 1);
        return (int32_t)(k >= g ? k + 1 : k);
    }
    if (!(sum > 0.0)) { /* all weights underflowed: uniform over the candidates */
        size_t k = (size_t)bt_rng_below(r, n_cand);
        for (size_t j = 0; j < B; j++)
            if (cand[j] && k-- == 0) return (int32_t)j;
    }
    const double u = bt_rng_uniform(r) * sum;
    double cum = 0.0;
    size_t last = 0;
    for (size_t j = 0; j < B; j++) {
        if (!cand[j]) continue;
        cum += w[j];
        last = j;
        if (u < cum) return (int32_t)j;
    }
    return (int32_t)last; /* u rounded up to the total */
}

bt_status bt_itm_sample_negatives(int32_t *neg_image, int32_t *neg_text, const float *sim,
                                  const uint64_t *image_key, const uint64_t *caption_key,
                                  size_t B, uint64_t seed, size_t *n_fallback,
                                  bt_loss_ws *ws) {
    if (B < 2)
        return bt_fail(BT_ERR_ARG, "ITM hard negatives need a batch of at least 2 pairs, got %zu",
                       B);
    /* scratch: weights (B doubles) + candidate flags (B bytes) */
    float *buf = ws_floats(ws, 2 * B + B / sizeof(float) + 1);
    double *w = (double *)(void *)buf;
    unsigned char *cand = (unsigned char *)(buf + 2 * B);
    bt_rng r;
    bt_rng_seed(&r, seed);
    if (n_fallback) *n_fallback = 0;
    for (int dir = 0; dir < 2; dir++) { /* 0: negative image per text, 1: text per image */
        for (size_t b = 0; b < B; b++) {
            /* dir 0 reads row b of sim (text b -> images j); dir 1 column b (texts j -> b) */
            float mx = -INFINITY;
            for (size_t j = 0; j < B; j++) {
                cand[j] = !is_positive(image_key, caption_key, b, j);
                const float x = sim ? (dir == 0 ? sim[b * B + j] : sim[j * B + b]) : 0.0f;
                if (x > mx) mx = x;
            }
            for (size_t j = 0; j < B; j++) {
                const float x = sim ? (dir == 0 ? sim[b * B + j] : sim[j * B + b]) : 0.0f;
                w[j] = exp((double)x - (double)mx);
            }
            const int32_t k = draw_negative(&r, w, cand, B, b, n_fallback);
            if (dir == 0) neg_image[b] = k;
            else neg_text[b] = k;
        }
    }
    return BT_OK;
}

/* --- MLM masking ----------------------------------------------------------------------- */

size_t bt_mlm_mask(int32_t *out_ids, int32_t *labels, const int32_t *ids,
                   const int32_t *attention_mask, size_t B, size_t T, const uint64_t *row_keys,
                   uint64_t seed, const bt_mlm_spec *spec) {
    BT_ASSERT(spec->vocab_size > 0 && spec->mask_id >= 0 && spec->mask_id < spec->vocab_size &&
              spec->n_special <= 8);
    size_t selected = 0;
    for (size_t b = 0; b < B; b++) {
        bt_rng r;
        bt_rng_seed(&r, seed ^ bt_mix64(row_keys ? row_keys[b] : (uint64_t)b));
        for (size_t t = 0; t < T; t++) {
            const size_t i = b * T + t;
            const int32_t id = ids[i];
            out_ids[i] = id;
            labels[i] = -100;
            int maskable = !attention_mask || attention_mask[i] != 0;
            for (size_t k = 0; maskable && k < spec->n_special; k++)
                if (id == spec->special[k]) maskable = 0;
            if (!maskable || !(bt_rng_uniform(&r) < spec->probability)) continue;
            labels[i] = id;
            selected++;
            const double u = bt_rng_uniform(&r);
            if (u < 0.8) out_ids[i] = spec->mask_id;
            else if (u < 0.9) out_ids[i] = (int32_t)bt_rng_below(&r, (uint64_t)spec->vocab_size);
            /* else: unchanged */
        }
    }
    return selected;
}
