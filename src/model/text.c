/* text.c: the RoBERTa text tower of BridgeTower (docs/spec.md §3.1-§3.3): embeddings
 * (word + RoBERTa positions + type 0, LayerNorm, dropout) and Lt post-LN BERT layers.
 *
 * Runs on the Bt texts of the towers phase; dropout masks are keyed by each row's sample key
 * (m->text_keys). The outputs of every layer stay in m->acts.text->h[l+1]; the bridges
 * (cross.c) read the last X of them and the ITC head reads the CLS row of the last one, and
 * their gradients arrive in m->dacts.text->h[] before text_backward runs.
 *
 * Deliberately not here: the text pooler (text_model.pooler is in the weights but unused by
 * BridgeTowerModel), token_type_ids (HF ignores them: every token has type 0). */
#include <stddef.h>

#include "model/towers.h"

/* --- activation layout (layout.h: each slot with its gradient kind) ---------------------- */

/* One layer's internals: written by text_layer_forward, read by text_layer_backward, whose
 * every activation gradient here is assigned (BT_DX_SET) by its first writer. */
static void text_layer_layout(bt_text_layer_acts *x, arena_walk *w, const bt_model_config *c,
                              size_t Bt, size_t T, const attn_stage *stage) {
    const size_t Ht = (size_t)c->text_hidden, It = (size_t)c->text_intermediate;
    const size_t NH = (size_t)c->text_heads, Nt = Bt * T;
    x->q = layout_slot_set(w, Nt * Ht);
    x->k = layout_slot_set(w, Nt * Ht);
    x->v = layout_slot_set(w, Nt * Ht);
    x->probs = layout_probs_slot(w, Bt * NH * T * T, stage);
    layout_attn_out_slot(w, Nt * Ht, stage, &x->ctx, &x->ctx_16);
    x->attn_lin = layout_slot_set(w, Nt * Ht);
    x->res1 = layout_slot_set(w, Nt * Ht);
    x->mean1 = layout_slot_ng(w, Nt);
    x->rstd1 = layout_slot_ng(w, Nt);
    x->a = layout_slot_set(w, Nt * Ht);
    x->f_pre = layout_slot_set(w, Nt * It);
    layout_gemm_input_slot(w, Nt * It, &x->f, &x->f_16);
    x->ffn_lin = layout_slot_set(w, Nt * Ht);
    x->res2 = layout_slot_ng(w, Nt * Ht); /* d res2 is written into d a (post_ln_backward) */
    x->mean2 = layout_slot_ng(w, Nt);
    x->rstd2 = layout_slot_ng(w, Nt);
}

void text_layout(bt_acts *a, layout *L, const bt_model_config *c, size_t Bt, size_t T,
                 const attn_stage *stage) {
    const size_t Ht = (size_t)c->text_hidden, Nt = Bt * T;
    /* embeddings (LN input / output), hidden states, layers */
    arena_walk *e = layout_forward_group(L, BT_GROUP_FORWARD);
    a->text->emb = layout_slot_set(e, Nt * Ht);
    a->text->pos_rows = layout_slot_ng(e, Nt * Ht);
    a->text->emb_mean = layout_slot_ng(e, Nt);
    a->text->emb_rstd = layout_slot_ng(e, Nt);
    a->text->emb_ln = layout_slot_set(e, Nt * Ht);
    layout_hidden(a->text->h, L, c->text_layers, c->split, Nt * Ht);
    for (int l = 0; l < c->text_layers; l++) {
        if (l == 0 || !L->shared)
            text_layer_layout(&a->text->layers[l], layout_group_open(L, BT_GROUP_TEXT), c, Bt, T,
                              stage);
        else
            a->text->layers[l] = a->text->layers[0];
    }
}

typedef struct text_layer_params {
    bt_linear q, k, v, o, fc1, fc2;
    bt_norm ln1, ln2;
} text_layer_params;

static text_layer_params text_layer_params_get(const bt_model *m, int l) {
    float eps = m->cfg.text_layer_norm_eps;
    text_layer_params p = {
        .q = model_linear(m, BT_P_TL_Q_W, BT_P_TL_Q_B, l),
        .k = model_linear(m, BT_P_TL_K_W, BT_P_TL_K_B, l),
        .v = model_linear(m, BT_P_TL_V_W, BT_P_TL_V_B, l),
        .o = model_linear(m, BT_P_TL_AO_W, BT_P_TL_AO_B, l),
        .fc1 = model_linear(m, BT_P_TL_FC1_W, BT_P_TL_FC1_B, l),
        .fc2 = model_linear(m, BT_P_TL_FC2_W, BT_P_TL_FC2_B, l),
        .ln1 = model_norm(m, BT_P_TL_LN1_W, BT_P_TL_LN1_B, l, eps),
        .ln2 = model_norm(m, BT_P_TL_LN2_W, BT_P_TL_LN2_B, l, eps),
    };
    return p;
}

/* The layer's dropout sites; the backward regenerates the forward's masks from them. */
typedef struct text_layer_drops {
    bt_dropout probs, attn_out, ffn_out;
} text_layer_drops;

static text_layer_drops text_layer_drops_get(const bt_model *m, int l) {
    text_layer_drops d = {
        .probs =
            model_dropout(m, bt_site(BT_SITE_TEXT_LAYER, l, BT_SITE_ATTN_PROBS), m->attn_dropout),
        .attn_out =
            model_dropout(m, bt_site(BT_SITE_TEXT_LAYER, l, BT_SITE_ATTN_OUT), m->hidden_dropout),
        .ffn_out =
            model_dropout(m, bt_site(BT_SITE_TEXT_LAYER, l, BT_SITE_FFN_OUT), m->hidden_dropout),
    };
    return d;
}

/* The layer's two post-LN output sublayers (towers.h), in the activations or the gradients. */
static post_ln_slots text_attn_out_slots(bt_text_layer_acts *s) {
    return (post_ln_slots){s->ctx, s->ctx_16, s->attn_lin, s->res1, s->mean1, s->rstd1};
}
static post_ln_slots text_ffn_out_slots(bt_text_layer_acts *s) {
    return (post_ln_slots){s->f, s->f_16, s->ffn_lin, s->res2, s->mean2, s->rstd2};
}

/* The Bt·T rows of a layer, their dropout keyed per text (m->text_keys). */
static keyed_rows text_rows(const bt_model *m) {
    return (keyed_rows){m->Bt, m->T, m->text_keys};
}

/* RoBERTa positions (HF create_position_ids_from_input_ids): m_t = id_t != pad,
 * pos_t = cumsum(m)_t * m_t + pad, so real tokens get pad+1, pad+2, ... and pads get pad. */
static void text_position_ids(int32_t *pos, const int32_t *ids, size_t B, size_t T,
                              int32_t pad) {
    for (size_t b = 0; b < B; b++) {
        int32_t run = 0;
        for (size_t t = 0; t < T; t++) {
            int keep = ids[b * T + t] != pad;
            run += keep;
            pos[b * T + t] = run * keep + pad;
        }
    }
}

static attention_dims text_attn_dims(const bt_model *m) {
    size_t Ht = (size_t)m->cfg.text_hidden;
    attention_dims d = {.B = m->Bt, .Tq = m->T, .Tk = m->T, .NH = (size_t)m->cfg.text_heads,
                        .D = (size_t)m->cfg.text_head_size,
                        .ldq = Ht, .ldk = Ht, .ldv = Ht, .ldo = Ht};
    return d;
}

/* One post-LN BERT layer: x (Nt, Ht) -> out (Nt, Ht). */
static void text_layer_forward(bt_model *m, int l, float *out, const float *x) {
    bt_text_layer_acts *a = &m->acts.text->layers[l];
    const text_layer_params p = text_layer_params_get(m, l);
    const size_t N = m->Bt * m->T, C = (size_t)m->cfg.text_hidden;
    const size_t I = (size_t)m->cfg.text_intermediate;
    const attention_dims ad = text_attn_dims(m);
    const text_layer_drops dr = text_layer_drops_get(m, l);
    const keyed_rows rows = text_rows(m);
    /* self-attention */
    lin_forward(m, a->q, x, &p.q, N);
    lin_forward(m, a->k, x, &p.k, N);
    lin_forward(m, a->v, x, &p.v, N);
    rows_attention_forward(a->ctx, kept_probs(m, a->probs), a->q, a->k, a->v, m->acts.key_bias,
                           &ad, &dr.probs, m->text_keys, model_compute(m));
    /* attention.output: a = LN1(dropout(ctx·Woᵀ + bo) + x) */
    act_keep_bf16(a->ctx_16, a->ctx, N * C); /* ctx, f: bf16 with bf16 storage (model.h) */
    const post_ln_slots attn_out = text_attn_out_slots(a), ffn_out = text_ffn_out_slots(a);
    post_ln_forward(m, a->a, x, &attn_out, &p.o, &p.ln1, &dr.attn_out, &rows);
    /* intermediate + output: out = LN2(dropout(GELU(a·W1ᵀ + b1)·W2ᵀ + b2) + a) */
    lin_forward(m, a->f_pre, a->a, &p.fc1, N);
    gelu_forward_act(a->f, a->f_16, a->f_pre, N * I);
    post_ln_forward(m, out, a->a, &ffn_out, &p.fc2, &p.ln2, &dr.ffn_out, &rows);
}

/* dout: gradient of the layer output (complete); dx += gradient of the layer input. */
static void text_layer_backward(bt_model *m, int l, float *dx, const float *dout,
                                const float *x) {
    /* checkpointing: the internals again, same dropout masks (the output gets the same bits) */
    if (model_layer_recompute(m, BT_GROUP_TEXT))
        text_layer_forward(m, l, m->acts.text->h[l + 1], x);
    bt_text_layer_acts *a = &m->acts.text->layers[l]; /* only read (non-const for post_ln_slots) */
    bt_text_layer_acts *d = &m->dacts.text->layers[l];
    const text_layer_params p = text_layer_params_get(m, l);
    const size_t N = m->Bt * m->T;
    const attention_dims ad = text_attn_dims(m);
    const text_layer_drops dr = text_layer_drops_get(m, l);
    const keyed_rows rows = text_rows(m);
    const post_ln_slots attn_out = text_attn_out_slots(a), d_attn_out = text_attn_out_slots(d);
    const post_ln_slots ffn_out = text_ffn_out_slots(a), d_ffn_out = text_ffn_out_slots(d);
    /* (the layer's internal gradients are assigned by their first writer; dx, the stream,
     * accumulates: model.c "activation layout") */
    /* out = LN2(dropout(f·W2ᵀ + b2) + a), f = GELU(f_pre), f_pre = a·W1ᵀ + b1 */
    post_ln_ffn_backward(m, d->a, dout, a->a, a->f_pre, d->f_pre, &ffn_out, &d_ffn_out, &p.fc1,
                         &p.fc2, &p.ln2, &dr.ffn_out, &rows);
    /* a = LN1(dropout(ctx·Woᵀ + bo) + x) */
    post_ln_backward(m, dx, BT_DX_ADD, d->a, &attn_out, &d_attn_out, &p.o, &p.ln1, &dr.attn_out,
                     &rows);
    /* ctx = attention(q, k, v) */
    rows_attention_backward(d->q, d->k, d->v, d->ctx, a->probs, a->q, a->k, a->v,
                            m->acts.key_bias, &ad, &dr.probs, m->text_keys, model_compute(m),
                            BT_DX_SET);
    /* q, k, v = x·Wᵀ + b */
    lin_backward(m, dx, d->q, x, &p.q, N, BT_DX_ADD);
    lin_backward(m, dx, d->k, x, &p.k, N, BT_DX_ADD);
    lin_backward(m, dx, d->v, x, &p.v, N, BT_DX_ADD);
}

void text_forward(bt_model *m) {
    bt_acts *a = &m->acts;
    const bt_model_config *c = &m->cfg;
    const size_t N = m->Bt * m->T, C = (size_t)c->text_hidden;
    const bt_norm ln = model_norm(m, BT_P_TEXT_EMB_LN_W, BT_P_TEXT_EMB_LN_B, 0,
                                  c->text_layer_norm_eps);
    const bt_dropout de = model_dropout(m, bt_site(BT_SITE_TEXT_EMB, 0, 0), m->hidden_dropout);

    /* extended mask as an additive key bias: (1 - mask) * finfo.min */
    attention_key_bias_from_mask(a->key_bias, m->mask, N);
    /* e = word[id] + position[pos] + type[0]; h0 = dropout(LN(e)) */
    text_position_ids(m->pos_ids, m->ids, m->Bt, m->T, c->pad_token_id);
    embedding_forward(a->text->emb, m->ids, m->p.text_word_emb, N, C, (size_t)c->vocab_size);
    embedding_forward(a->text->pos_rows, m->pos_ids, m->p.text_pos_emb, N, C,
                      (size_t)c->max_position_embeddings);
    residual_forward(a->text->emb, a->text->emb, a->text->pos_rows, N * C);
    bias_add_forward(a->text->emb, a->text->emb, m->p.text_type_emb, N, C);
    norm_forward(a->text->emb_ln, a->text->emb_mean, a->text->emb_rstd, a->text->emb, &ln, N);
    rows_dropout_forward(a->text->h[0], a->text->emb_ln, m->Bt, m->T * C, &de, m->text_keys);

    for (int l = 0; l < c->text_layers; l++)
        text_layer_forward(m, l, a->text->h[l + 1], a->text->h[l]);
}

void text_backward(bt_model *m) {
    const bt_acts *a = &m->acts;
    bt_acts *d = &m->dacts;
    const bt_model_config *c = &m->cfg;
    const size_t N = m->Bt * m->T, C = (size_t)c->text_hidden;
    const bt_norm ln = model_norm(m, BT_P_TEXT_EMB_LN_W, BT_P_TEXT_EMB_LN_B, 0,
                                  c->text_layer_norm_eps);
    const bt_dropout de = model_dropout(m, bt_site(BT_SITE_TEXT_EMB, 0, 0), m->hidden_dropout);

    for (int l = c->text_layers - 1; l >= 0; l--) {
        text_layer_backward(m, l, d->text->h[l], d->text->h[l + 1], a->text->h[l]);
        bt_grads_final(m, BT_GRAD_EV_TEXT_LAYER, l); /* model.h: gradients-final events */
    }

    /* h0 = dropout(emb_ln), emb_ln = LN(e) */
    rows_dropout_backward(d->text->emb_ln, d->text->h[0], m->Bt, m->T * C, &de, m->text_keys,
                          BT_DX_SET);
    norm_backward(d->text->emb, d->text->emb_ln, a->text->emb, a->text->emb_mean, a->text->emb_rstd,
                  &ln, N, BT_DX_SET);
    const float *d_e = d->text->emb;
    /* e = word[id] + pos[pos] + type[0]: padding rows (padding_idx = pad) get no gradient */
    embedding_backward(m->g.text_word_emb, d_e, m->ids, N, C, (size_t)c->vocab_size,
                       c->pad_token_id);
    embedding_backward(m->g.text_pos_emb, d_e, m->pos_ids, N, C,
                       (size_t)c->max_position_embeddings, c->pad_token_id);
    bias_add_backward(NULL, m->g.text_type_emb, d_e, N, C);
    bt_grads_final(m, BT_GRAD_EV_TEXT_EMB, 0);
}
