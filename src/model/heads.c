/* heads.c: the ITM, MLM and ITC heads (docs/spec.md §4.1-§4.3), forward and backward, split
 * by phase (model.h "Phases"), and the HF-style losses that bt_forward reports.
 *   towers phase, ITC uni-modal: t = norm(itc_text(T_{Lt}[:,0])) per text row (Bt, C),
 *        i = norm(itc_image(ui_{X-1}[:,0])) per image row (Bi, C), where ui is the last
 *        bridge's Ti(ln_post(I)) + tt1.
 *   pairs phase: ITM logits = pooler_output·Wᵀ + b (P, 2); MLM logits = LN(GELU(X_{X-1}·Wtᵀ
 *        + bt))·W_decᵀ + mlm_score.bias on the Pm flagged pairs (Pm*T, V); ITC cross
 *        c = norm(itc_cross(pooler_output)) (P, C).
 *   HF losses (bt_forward only, B = Bt = Bi = P = Pm, m->hf scratch):
 *        ITM mean CE over labelled rows; MLM mean CE over positions whose label is not -100
 *        (0 when there is none; HF gives NaN); ITC with s = exp(logit_scale) (no clamp)
 *        loss = (CE(s·t·iᵀ) + CE(s·t·cᵀ) + CE(s·i·cᵀ)) / 3, targets = the diagonal
 *        (one-directional: the transposed terms are not included). Their backward writes the
 *        phase gradient slots d_itc_*, d_itm_logits, d_mlm_logits and logit_scale's gradient,
 *        as the trainer's losses (src/train) do.
 * The head Linears run in the model's precision; the ITC score matrices and all losses are
 * fp32 (part of the loss).
 *
 * Deliberately not here: the trainer's losses (hard-negative ITM, duplicate-aware ITC,
 * weighting: src/train/loss.c), cross-rank gathering of ITC embeddings (src/dist). */
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "model/towers.h"

/* --- activation layout (layout.h: each slot with its gradient kind) ---------------------- */

void heads_towers_layout(bt_acts *a, layout *L, const bt_model_config *c, size_t Bt,
                         size_t Bi) {
    bt_heads_acts *ha = a->heads;
    arena_walk *w = L->w;
    const size_t H = (size_t)c->hidden, C = (size_t)c->contrastive_hidden;
    ha->itc_t_cls = layout_slot(w, Bt * H);
    ha->itc_i_cls = layout_slot(w, Bi * H);
    ha->itc_t_proj = layout_slot(w, Bt * C);
    ha->itc_i_proj = layout_slot(w, Bi * C);
    ha->itc_t_norm = layout_slot_ng(w, Bt);
    ha->itc_i_norm = layout_slot_ng(w, Bi);
}

void heads_pairs_layout(bt_acts *a, layout *L, const bt_model_config *c, unsigned heads,
                        size_t P, size_t Pm, size_t T) {
    bt_heads_acts *ha = a->heads;
    arena_walk *w = L->w;
    const size_t H = (size_t)c->hidden, C = (size_t)c->contrastive_hidden, Nm = Pm * T;
    if (heads & BT_HEADS_MLM) {
        ha->mlm_x = layout_slot_set(w, Nm * H);
        ha->mlm_tr = layout_slot_set(w, Nm * H);
        ha->mlm_act = layout_slot_set(w, Nm * H);
        ha->mlm_ln = layout_slot_set(w, Nm * H);
        ha->mlm_mean = layout_slot_ng(w, Nm);
        ha->mlm_rstd = layout_slot_ng(w, Nm);
    }
    if (heads & BT_HEADS_ITC) {
        ha->itc_c_proj = layout_slot(w, P * C);
        ha->itc_c_norm = layout_slot_ng(w, P);
    }
}

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

/* --- towers phase: ITC uni-modal embeddings --------------------------------------------- */

void heads_towers_forward(bt_model *m) {
    if (!(m->heads & BT_HEADS_ITC)) return;
    bt_acts *a = &m->acts;
    bt_heads_acts *ha = a->heads;
    const bt_model_config *c = &m->cfg;
    const size_t Bt = m->Bt, Bi = m->Bi, H = (size_t)c->hidden;
    const size_t C = (size_t)c->contrastive_hidden;
    const itc_params p = itc_params_get(m);
    /* text: raw last uni-modal text layer CLS */
    if (Bt) {
        cls_gather(ha->itc_t_cls, a->text->h[c->text_layers], Bt, m->T, H);
        lin_forward(m, ha->itc_t_proj, ha->itc_t_cls, &p.text, Bt);
        l2_normalize_forward(ha->itc_t, ha->itc_t_norm, ha->itc_t_proj, Bt, C);
    }
    /* image: last bridge's Ti(ln_post(I)) + tt1 CLS */
    if (Bi) {
        cls_gather(ha->itc_i_cls, a->bridges[c->cross_layers - 1].ui, Bi, (size_t)c->np, H);
        lin_forward(m, ha->itc_i_proj, ha->itc_i_cls, &p.image, Bi);
        l2_normalize_forward(ha->itc_i, ha->itc_i_norm, ha->itc_i_proj, Bi, C);
    }
}

void heads_towers_backward(bt_model *m) {
    if (!(m->heads & BT_HEADS_ITC)) return;
    const bt_acts *a = &m->acts;
    bt_acts *d = &m->dacts;
    bt_heads_acts *ha = a->heads;
    bt_heads_acts *hd = d->heads;
    const bt_model_config *c = &m->cfg;
    const size_t Bt = m->Bt, Bi = m->Bi, H = (size_t)c->hidden;
    const size_t C = (size_t)c->contrastive_hidden;
    const itc_params p = itc_params_get(m);
    if (Bt) {
        l2_normalize_backward(hd->itc_t_proj, hd->itc_t, ha->itc_t, ha->itc_t_norm, Bt, C);
        lin_backward(m, hd->itc_t_cls, hd->itc_t_proj, ha->itc_t_cls, &p.text, Bt, BT_DX_ADD);
        cls_scatter_add(d->text->h[c->text_layers], hd->itc_t_cls, Bt, m->T, H);
    }
    if (Bi) {
        l2_normalize_backward(hd->itc_i_proj, hd->itc_i, ha->itc_i, ha->itc_i_norm, Bi, C);
        lin_backward(m, hd->itc_i_cls, hd->itc_i_proj, ha->itc_i_cls, &p.image, Bi, BT_DX_ADD);
        cls_scatter_add(d->bridges[c->cross_layers - 1].ui, hd->itc_i_cls, Bi, (size_t)c->np, H);
    }
}

/* --- pairs phase: ITM, MLM, ITC cross ----------------------------------------------------- */

void heads_pairs_forward(bt_model *m) {
    bt_acts *a = &m->acts;
    bt_heads_acts *ha = a->heads;
    const bt_model_config *c = &m->cfg;
    const size_t P = m->P, T = m->T, H = (size_t)c->hidden;
    if (m->heads & BT_HEADS_ITM) {
        const bt_linear fc = model_linear(m, BT_P_ITM_W, BT_P_ITM_B, 0);
        lin_forward(m, ha->itm_logits, a->cross->pooler, &fc, P);
    }
    if ((m->heads & BT_HEADS_MLM) && m->Pm) {
        const size_t Nm = m->Pm * T;
        const mlm_params p = mlm_params_get(m);
        const float *x = a->xt[c->cross_layers - 1].out; /* text_features (P*T, H) */
        /* the flagged pairs' rows, in pair order */
        for (size_t j = 0; j < m->Pm; j++)
            memcpy(ha->mlm_x + j * T * H, x + (size_t)m->mlm_rows[j] * T * H,
                   T * H * sizeof *ha->mlm_x);
        /* transform: LN(GELU(dense(x))); decoder (no bias) + the separate mlm_score.bias */
        lin_forward(m, ha->mlm_tr, ha->mlm_x, &p.tr, Nm);
        gelu_forward(ha->mlm_act, ha->mlm_tr, Nm * H);
        norm_forward(ha->mlm_ln, ha->mlm_mean, ha->mlm_rstd, ha->mlm_act, &p.ln, Nm);
        lin_forward(m, ha->mlm_logits, ha->mlm_ln, &p.dec, Nm);
    }
    if (m->heads & BT_HEADS_ITC) {
        const itc_params p = itc_params_get(m);
        lin_forward(m, ha->itc_c_proj, a->cross->pooler, &p.cross, P);
        l2_normalize_forward(ha->itc_c, ha->itc_c_norm, ha->itc_c_proj, P,
                             (size_t)c->contrastive_hidden);
    }
}

void heads_pairs_backward(bt_model *m) {
    const bt_acts *a = &m->acts;
    bt_acts *d = &m->dacts;
    bt_heads_acts *ha = a->heads;
    bt_heads_acts *hd = d->heads;
    const bt_model_config *c = &m->cfg;
    const size_t P = m->P, T = m->T, H = (size_t)c->hidden;
    if (m->heads & BT_HEADS_ITC) {
        const itc_params p = itc_params_get(m);
        l2_normalize_backward(hd->itc_c_proj, hd->itc_c, ha->itc_c, ha->itc_c_norm, P,
                              (size_t)c->contrastive_hidden);
        lin_backward(m, d->cross->pooler, hd->itc_c_proj, a->cross->pooler, &p.cross, P, BT_DX_ADD);
    }
    if ((m->heads & BT_HEADS_MLM) && m->Pm) {
        const size_t Nm = m->Pm * T;
        const mlm_params p = mlm_params_get(m);
        /* the transform's gradients: one writer each (assigned, model.c layout) */
        lin_backward(m, hd->mlm_ln, hd->mlm_logits, ha->mlm_ln, &p.dec, Nm, BT_DX_SET);
        norm_backward(hd->mlm_act, hd->mlm_ln, ha->mlm_act, ha->mlm_mean, ha->mlm_rstd, &p.ln, Nm,
                      BT_DX_SET);
        act_lin_backward(m, hd->mlm_x, hd->mlm_tr, hd->mlm_act, ha->mlm_tr, 0, ha->mlm_x, NULL,
                         &p.tr, Nm, BT_DX_SET);
        float *dx = d->xt[c->cross_layers - 1].out;
        for (size_t j = 0; j < m->Pm; j++) {
            float *dst = dx + (size_t)m->mlm_rows[j] * T * H;
            const float *src = hd->mlm_x + j * T * H;
            for (size_t i = 0; i < T * H; i++) dst[i] += src[i];
        }
    }
    if (m->heads & BT_HEADS_ITM) {
        const bt_linear fc = model_linear(m, BT_P_ITM_W, BT_P_ITM_B, 0);
        lin_backward(m, d->cross->pooler, hd->itm_logits, a->cross->pooler, &fc, P, BT_DX_ADD);
    }
}

/* --- HF losses (bt_forward) ----------------------------------------------------------------- */

void hf_losses_forward(bt_model *m) {
    bt_hf_loss *h = &m->hf;
    const size_t B = m->B, C = (size_t)m->cfg.contrastive_hidden;
    m->loss_itc = m->loss_itm = m->loss_mlm = 0.0f;
    m->mlm_valid = 0;
    if ((m->heads & BT_HEADS_ITM) && h->has_itm_labels)
        m->loss_itm =
            cross_entropy_forward(h->itm_probs, m->itm_logits_out, h->itm_labels, B, 2, -100, NULL);
    if ((m->heads & BT_HEADS_MLM) && h->has_mlm_labels)
        m->loss_mlm = cross_entropy_forward(h->mlm_probs, m->mlm_logits_out, h->mlm_labels,
                                            B * m->T, (size_t)m->cfg.vocab_size, -100,
                                            &m->mlm_valid);
    if (m->heads & BT_HEADS_ITC) {
        /* s = exp(logit_scale); three one-directional score matrices with diagonal targets */
        const float s = expf(*m->p.logit_scale);
        const float *lhs[3] = {m->itc_text, m->itc_text, m->itc_image};
        const float *rhs[3] = {m->itc_image, m->itc_cross, m->itc_cross};
        double loss = 0.0;
        for (int j = 0; j < 3; j++) {
            float *S = h->itc_scores + (size_t)j * B * B;
            scores_forward(S, lhs[j], rhs[j], B, C, s);
            loss += cross_entropy_forward(h->itc_probs + (size_t)j * B * B, S, h->itc_targets, B,
                                          B, -100, NULL);
        }
        m->loss_itc = (float)(loss / 3.0);
    }
}

void hf_losses_backward(bt_model *m, const bt_loss_weights *w) {
    bt_hf_loss *h = &m->hf;
    const size_t B = m->B, C = (size_t)m->cfg.contrastive_hidden;
    if ((m->heads & BT_HEADS_ITC) && w->itc != 0.0f) {
        const float s = expf(*m->p.logit_scale);
        const float *lhs[3] = {m->itc_text, m->itc_text, m->itc_image};
        const float *rhs[3] = {m->itc_image, m->itc_cross, m->itc_cross};
        float *dlhs[3] = {m->d_itc_text, m->d_itc_text, m->d_itc_image};
        float *drhs[3] = {m->d_itc_image, m->d_itc_cross, m->d_itc_cross};
        double dlogit = 0.0;
        memset(h->d_itc_scores, 0, 3 * B * B * sizeof *h->d_itc_scores);
        for (int j = 0; j < 3; j++) {
            const float *S = h->itc_scores + (size_t)j * B * B;
            float *dS = h->d_itc_scores + (size_t)j * B * B;
            /* loss = (CE_0 + CE_1 + CE_2) / 3 */
            cross_entropy_backward(dS, h->itc_probs + (size_t)j * B * B, h->itc_targets, B, B,
                                   -100, w->itc / 3.0f);
            /* S = s · x·yᵀ with s = exp(logit_scale): d logit_scale = Σ dS ⊙ S */
            for (size_t e = 0; e < B * B; e++) dlogit += (double)dS[e] * S[e];
            scores_backward(dlhs[j], drhs[j], dS, lhs[j], rhs[j], B, C, s);
        }
        if (m->g.logit_scale) *m->g.logit_scale += (float)dlogit;
    }
    /* MLM: a loss over no position is a constant 0 */
    if ((m->heads & BT_HEADS_MLM) && h->has_mlm_labels && m->mlm_valid > 0 && w->mlm != 0.0f)
        cross_entropy_backward(m->d_mlm_logits, h->mlm_probs, h->mlm_labels, B * m->T,
                               (size_t)m->cfg.vocab_size, -100, w->mlm);
    if ((m->heads & BT_HEADS_ITM) && h->has_itm_labels && w->itm != 0.0f)
        cross_entropy_backward(m->d_itm_logits, h->itm_probs, h->itm_labels, B, 2, -100, w->itm);
}
