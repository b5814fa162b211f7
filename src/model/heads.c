/* heads.c: the ITM, MLM and ITC heads and their losses, as HF computes them (design model.md
 * §4.1-§4.3), forward and backward.
 *   ITM: logits = pooler_output·Wᵀ + b (B, 2); loss = mean CE over labelled rows.
 *   MLM: logits = LN(GELU(X_{X-1}·Wtᵀ + bt))·W_decᵀ + mlm_score.bias (Nt, V); loss = mean
 *        CE over positions whose label is not -100 (0 when there is none; HF gives NaN).
 *   ITC: t = norm(itc_text(T_{Lt}[:,0])), i = norm(itc_image(ui_{X-1}[:,0])) where ui is the
 *        last bridge's Ti(ln_post(I)) + tt1, c = norm(itc_cross(pooler_output));
 *        s = exp(logit_scale) (no clamp);
 *        loss = (CE(s·t·iᵀ) + CE(s·t·cᵀ) + CE(s·i·cᵀ)) / 3,
 *        targets = the diagonal (one-directional: the transposed terms are not included).
 * The head Linears run in the model's precision; the ITC score matrices and all losses are
 * fp32 (part of the loss).
 *
 * Deliberately not here: hard-negative ITM mining and the original repo's symmetric ITC
 * (training loop), cross-rank gathering of ITC embeddings (src/dist). */
#include <math.h>
#include <stddef.h>

#include "towers.h"

/* out (B, B) = alpha · x (B, C) · yᵀ (B, C), fp32 */
static void scores_forward(float *out, const float *x, const float *y, size_t B, size_t C,
                           float alpha) {
    gemm_args g = {.trans_a = 0, .trans_b = 1, .m = B, .n = B, .k = C,
                   .a_type = BT_DTYPE_F32, .b_type = BT_DTYPE_F32, .a = x, .lda = C,
                   .b = y, .ldb = C, .c = out, .ldc = B, .alpha = alpha, .beta = 0.0f,
                   .compute = GEMM_COMPUTE_F32};
    gemm(&g);
}

/* S = alpha · x · yᵀ:  dx += alpha · dS · y;  dy += alpha · dSᵀ · x */
static void scores_backward(float *dx, float *dy, const float *dS, const float *x,
                            const float *y, size_t B, size_t C, float alpha) {
    gemm_args g = {.trans_a = 0, .trans_b = 0, .m = B, .n = C, .k = B,
                   .a_type = BT_DTYPE_F32, .b_type = BT_DTYPE_F32, .a = dS, .lda = B,
                   .b = y, .ldb = C, .c = dx, .ldc = C, .alpha = alpha, .beta = 1.0f,
                   .compute = GEMM_COMPUTE_F32};
    gemm(&g);
    gemm_args h = {.trans_a = 1, .trans_b = 0, .m = B, .n = C, .k = B,
                   .a_type = BT_DTYPE_F32, .b_type = BT_DTYPE_F32, .a = dS, .lda = B,
                   .b = x, .ldb = C, .c = dy, .ldc = C, .alpha = alpha, .beta = 1.0f,
                   .compute = GEMM_COMPUTE_F32};
    gemm(&h);
}

/* The MLM head's weights: transform dense, its LayerNorm, the decoder with mlm_score.bias. */
typedef struct mlm_params {
    bt_linear tr, dec;
    bt_norm ln;
} mlm_params;

static mlm_params mlm_params_get(const bt_model *m) {
    mlm_params p = {
        .tr = model_linear(m, BT_P_MLM_TR_W, BT_P_MLM_TR_B, 0),
        .dec = model_linear(m, BT_P_MLM_DEC_W, BT_P_MLM_BIAS, 0),
        .ln = model_norm(m, BT_P_MLM_LN_W, BT_P_MLM_LN_B, 0, m->cfg.layer_norm_eps),
    };
    return p;
}

/* The ITC head's three projections (text CLS, image CLS, pooler output). */
typedef struct itc_params {
    bt_linear text, image, cross;
} itc_params;

static itc_params itc_params_get(const bt_model *m) {
    itc_params p = {
        .text = model_linear(m, BT_P_ITC_TEXT_W, BT_P_ITC_TEXT_B, 0),
        .image = model_linear(m, BT_P_ITC_IMAGE_W, BT_P_ITC_IMAGE_B, 0),
        .cross = model_linear(m, BT_P_ITC_CROSS_W, BT_P_ITC_CROSS_B, 0),
    };
    return p;
}

static void itm_forward(bt_model *m) {
    bt_acts *a = &m->acts;
    const bt_linear fc = model_linear(m, BT_P_ITM_W, BT_P_ITM_B, 0);
    lin_forward(m, a->itm_logits, a->pooler, &fc, m->B);
    m->loss_itm = 0.0f;
    if (m->has_itm_labels)
        m->loss_itm = cross_entropy_forward(a->itm_probs, a->itm_logits, m->itm_labels, m->B, 2,
                                            -100, NULL);
}

static void itm_backward(bt_model *m, float w) {
    const bt_acts *a = &m->acts;
    bt_acts *d = &m->dacts;
    const bt_linear fc = model_linear(m, BT_P_ITM_W, BT_P_ITM_B, 0);
    cross_entropy_backward(d->itm_logits, a->itm_probs, m->itm_labels, m->B, 2, -100, w);
    lin_backward(m, d->pooler, d->itm_logits, a->pooler, &fc, m->B);
}

static void mlm_forward(bt_model *m) {
    bt_acts *a = &m->acts;
    const bt_model_config *c = &m->cfg;
    const size_t Nt = m->B * m->T, H = (size_t)c->hidden, V = (size_t)c->vocab_size;
    const mlm_params p = mlm_params_get(m);
    const float *x = a->xt[c->cross_layers - 1].out; /* text_features (Nt, H) */
    /* transform: LN(GELU(dense(x))); decoder (no bias) + the separate mlm_score.bias */
    lin_forward(m, a->mlm_tr, x, &p.tr, Nt);
    gelu_forward(a->mlm_act, a->mlm_tr, Nt * H);
    norm_forward(a->mlm_ln, a->mlm_mean, a->mlm_rstd, a->mlm_act, &p.ln, Nt);
    lin_forward(m, a->mlm_logits, a->mlm_ln, &p.dec, Nt);
    m->loss_mlm = 0.0f;
    m->mlm_valid = 0;
    if (m->has_mlm_labels)
        m->loss_mlm = cross_entropy_forward(a->mlm_probs, a->mlm_logits, m->mlm_labels, Nt, V,
                                            -100, &m->mlm_valid);
}

static void mlm_backward(bt_model *m, float w) {
    const bt_acts *a = &m->acts;
    bt_acts *d = &m->dacts;
    const bt_model_config *c = &m->cfg;
    const size_t Nt = m->B * m->T, H = (size_t)c->hidden, V = (size_t)c->vocab_size;
    const mlm_params p = mlm_params_get(m);
    const int last = c->cross_layers - 1;
    if (m->mlm_valid == 0) return; /* the loss is a constant 0 */
    cross_entropy_backward(d->mlm_logits, a->mlm_probs, m->mlm_labels, Nt, V, -100, w);
    lin_backward(m, d->mlm_ln, d->mlm_logits, a->mlm_ln, &p.dec, Nt);
    norm_backward(d->mlm_act, d->mlm_ln, a->mlm_act, a->mlm_mean, a->mlm_rstd, &p.ln, Nt);
    gelu_backward(d->mlm_tr, d->mlm_act, a->mlm_tr, Nt * H);
    lin_backward(m, d->xt[last].out, d->mlm_tr, a->xt[last].out, &p.tr, Nt);
}

static void itc_forward(bt_model *m) {
    bt_acts *a = &m->acts;
    const bt_model_config *c = &m->cfg;
    const size_t B = m->B, H = (size_t)c->hidden, C = (size_t)c->contrastive_hidden;
    const itc_params p = itc_params_get(m);
    /* text: raw last uni-modal text layer CLS; image: last bridge's Ti(ln_post(I)) + tt1 CLS */
    cls_gather(a->itc_t_cls, a->text_h[c->text_layers], B, m->T, H);
    cls_gather(a->itc_i_cls, a->bridges[c->cross_layers - 1].ui, B, (size_t)c->np, H);
    lin_forward(m, a->itc_t_proj, a->itc_t_cls, &p.text, B);
    lin_forward(m, a->itc_i_proj, a->itc_i_cls, &p.image, B);
    lin_forward(m, a->itc_c_proj, a->pooler, &p.cross, B);
    l2_normalize_forward(a->itc_t, a->itc_t_norm, a->itc_t_proj, B, C);
    l2_normalize_forward(a->itc_i, a->itc_i_norm, a->itc_i_proj, B, C);
    l2_normalize_forward(a->itc_c, a->itc_c_norm, a->itc_c_proj, B, C);
    /* s = exp(logit_scale); three one-directional score matrices with diagonal targets */
    const float s = expf(*m->p.logit_scale);
    const float *lhs[3] = {a->itc_t, a->itc_t, a->itc_i};
    const float *rhs[3] = {a->itc_i, a->itc_c, a->itc_c};
    double loss = 0.0;
    for (int j = 0; j < 3; j++) {
        float *S = a->itc_scores + (size_t)j * B * B;
        scores_forward(S, lhs[j], rhs[j], B, C, s);
        loss += cross_entropy_forward(a->itc_probs + (size_t)j * B * B, S, m->itc_targets, B, B,
                                      -100, NULL);
    }
    m->loss_itc = (float)(loss / 3.0);
}

static void itc_backward(bt_model *m, float w) {
    const bt_acts *a = &m->acts;
    bt_acts *d = &m->dacts;
    const bt_model_config *c = &m->cfg;
    const size_t B = m->B, H = (size_t)c->hidden, C = (size_t)c->contrastive_hidden;
    const itc_params p = itc_params_get(m);
    const float s = expf(*m->p.logit_scale);
    const float *lhs[3] = {a->itc_t, a->itc_t, a->itc_i};
    const float *rhs[3] = {a->itc_i, a->itc_c, a->itc_c};
    float *dlhs[3] = {d->itc_t, d->itc_t, d->itc_i};
    float *drhs[3] = {d->itc_i, d->itc_c, d->itc_c};
    double dlogit = 0.0;
    for (int j = 0; j < 3; j++) {
        const float *S = a->itc_scores + (size_t)j * B * B;
        float *dS = d->itc_scores + (size_t)j * B * B;
        /* loss = (CE_0 + CE_1 + CE_2) / 3 */
        cross_entropy_backward(dS, a->itc_probs + (size_t)j * B * B, m->itc_targets, B, B, -100,
                               w / 3.0f);
        /* S = s · x·yᵀ with s = exp(logit_scale): d logit_scale = Σ dS ⊙ S */
        for (size_t e = 0; e < B * B; e++) dlogit += (double)dS[e] * S[e];
        scores_backward(dlhs[j], drhs[j], dS, lhs[j], rhs[j], B, C, s);
    }
    if (m->g.logit_scale) *m->g.logit_scale += (float)dlogit;
    l2_normalize_backward(d->itc_t_proj, d->itc_t, a->itc_t, a->itc_t_norm, B, C);
    l2_normalize_backward(d->itc_i_proj, d->itc_i, a->itc_i, a->itc_i_norm, B, C);
    l2_normalize_backward(d->itc_c_proj, d->itc_c, a->itc_c, a->itc_c_norm, B, C);
    lin_backward(m, d->itc_t_cls, d->itc_t_proj, a->itc_t_cls, &p.text, B);
    lin_backward(m, d->itc_i_cls, d->itc_i_proj, a->itc_i_cls, &p.image, B);
    lin_backward(m, d->pooler, d->itc_c_proj, a->pooler, &p.cross, B);
    cls_scatter_add(d->text_h[c->text_layers], d->itc_t_cls, B, m->T, H);
    cls_scatter_add(d->bridges[c->cross_layers - 1].ui, d->itc_i_cls, B, (size_t)c->np, H);
}

void heads_forward(bt_model *m) {
    if (m->heads & BT_HEADS_ITM) itm_forward(m);
    if (m->heads & BT_HEADS_MLM) mlm_forward(m);
    if (m->heads & BT_HEADS_ITC) itc_forward(m);
}

void heads_backward(bt_model *m, const bt_loss_weights *w) {
    if ((m->heads & BT_HEADS_ITC) && w->itc != 0.0f) itc_backward(m, w->itc);
    if ((m->heads & BT_HEADS_MLM) && m->has_mlm_labels && w->mlm != 0.0f) mlm_backward(m, w->mlm);
    if ((m->heads & BT_HEADS_ITM) && m->has_itm_labels && w->itm != 0.0f) itm_backward(m, w->itm);
}
