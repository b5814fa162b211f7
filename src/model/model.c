/* model.c: bt_model lifetime (parameter, gradient, bf16 and activation arenas), the batch
 * checks, and bt_forward / bt_backward as lists of tower calls (see model.h).
 *
 * Deliberately not here: the towers themselves (vit.c, text.c, cross.c, heads.c), checkpoint
 * files with key reports, the optimizer. */
#include "model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h"
#include "towers.h"

/* --- parameter views -------------------------------------------------------------------- */

bt_linear model_linear(const bt_model *m, bt_param_id w, bt_param_id b, int layer) {
    const bt_param_field *fw = &m->table.fields[w];
    BT_ASSERTF(fw->present && layer < fw->reps, "parameter %s (layer %d) is not built",
               fw->name, layer);
    bt_linear L;
    memset(&L, 0, sizeof L);
    L.w = bt_param_ptr(&m->table, m->params, w, layer);
    const size_t ow = (size_t)(L.w - m->params);
    L.w16 = m->params_bf16 ? m->params_bf16 + ow : NULL;
    L.dw = m->grads ? m->grads + ow : NULL;
    L.out = (size_t)fw->shape[0];
    L.in = fw->numel / L.out;
    if (b != BT_P_COUNT) {
        const bt_param_field *fb = &m->table.fields[b];
        BT_ASSERT(fb->present && fb->numel == L.out);
        L.b = bt_param_ptr(&m->table, m->params, b, layer);
        L.db = m->grads ? m->grads + (L.b - m->params) : NULL;
    }
    return L;
}

bt_norm model_norm(const bt_model *m, bt_param_id w, bt_param_id b, int layer, float eps) {
    const bt_param_field *fw = &m->table.fields[w];
    BT_ASSERTF(fw->present && layer < fw->reps, "parameter %s (layer %d) is not built",
               fw->name, layer);
    bt_norm N;
    N.w = bt_param_ptr(&m->table, m->params, w, layer);
    N.b = bt_param_ptr(&m->table, m->params, b, layer);
    N.dw = m->grads ? m->grads + (N.w - m->params) : NULL;
    N.db = m->grads ? m->grads + (N.b - m->params) : NULL;
    N.c = fw->numel;
    N.eps = eps;
    return N;
}

bt_dropout model_dropout(const bt_model *m, uint32_t site, float p) {
    bt_dropout d = {0.0f, 0};
    if (!m->training || p <= 0.0f) return d;
    d.p = p;
    d.seed = bt_mix64(bt_mix64(m->dropout_seed + 0x9e3779b97f4a7c15ull * (m->step + 1)) ^
                      (0xd1b54a32d192ed03ull * site));
    return d;
}

void cls_gather(float *out, const float *x, size_t B, size_t T, size_t C) {
    for (size_t b = 0; b < B; b++) memcpy(out + b * C, x + b * T * C, C * sizeof *out);
}

void cls_scatter_add(float *dx, const float *dout, size_t B, size_t T, size_t C) {
    for (size_t b = 0; b < B; b++)
        for (size_t i = 0; i < C; i++) dx[b * T * C + i] += dout[b * C + i];
}

/* --- lifetime --------------------------------------------------------------------------- */

bt_status bt_model_init(bt_model *m, const bt_model_config *c, unsigned heads,
                        bt_precision precision) {
    memset(m, 0, sizeof *m);
    m->cfg = *c;
    m->heads = heads & BT_HEADS_ALL;
    m->precision = precision;
    bt_param_table_init(&m->table, c, m->heads);
    const size_t n = m->table.numel;
    m->params = bt_calloc(n * sizeof *m->params);
    m->grads = bt_calloc(n * sizeof *m->grads);
    if (precision == BT_PRECISION_BF16)
        m->params_bf16 = bt_calloc(n * sizeof *m->params_bf16);
    bt_param_views_bind(&m->p, &m->table, m->params);
    bt_param_views_bind(&m->g, &m->table, m->grads);
    m->hidden_dropout = c->hidden_dropout_prob;
    m->attn_dropout = c->attention_probs_dropout_prob;
    return BT_OK;
}

static void acts_free_arrays(bt_acts *a) {
    free(a->text_h);
    free(a->text_layers);
    free(a->vis_h);
    free(a->vis_layers);
    free(a->bridges);
    free(a->xt);
    free(a->xi);
    memset(a, 0, sizeof *a);
}

static void model_free_acts(bt_model *m) {
    acts_free_arrays(&m->acts);
    acts_free_arrays(&m->dacts);
    bt_free(m->act_mem);
    bt_free(m->dact_mem);
    free(m->ids);
    free(m->mask);
    free(m->pos_ids);
    free(m->mlm_labels);
    free(m->itm_labels);
    free(m->itc_targets);
    m->act_mem = m->dact_mem = NULL;
    m->ids = m->mask = m->pos_ids = m->mlm_labels = m->itm_labels = m->itc_targets = NULL;
    m->B = m->T = 0;
}

void bt_model_free(bt_model *m) {
    model_free_acts(m);
    bt_free(m->params);
    bt_free(m->grads);
    bt_free(m->params_bf16);
    bt_param_table_free(&m->table);
    memset(m, 0, sizeof *m);
}

void bt_model_refresh_bf16(bt_model *m) {
    if (m->params_bf16) bt_params_refresh_bf16(&m->table, m->params_bf16, m->params);
}

void bt_model_init_params(bt_model *m, uint64_t seed) {
    bt_params_init(&m->table, m->params, seed);
    bt_model_refresh_bf16(m);
}

bt_status bt_model_load_safetensors(bt_model *m, const char *path) {
    bt_status s = bt_params_load_safetensors(&m->table, m->params, path, NULL);
    if (s == BT_OK) bt_model_refresh_bf16(m);
    return s;
}

void bt_model_set_dropout(bt_model *m, int training, uint64_t seed, uint64_t step) {
    m->training = training;
    m->dropout_seed = seed;
    m->step = step;
}

void bt_zero_grad(bt_model *m) {
    if (m->grads) memset(m->grads, 0, m->table.numel * sizeof *m->grads);
}

/* --- activation layout -------------------------------------------------------------------
 * One walk assigns every slot of an arena; slot() is a slot with a gradient, slot_ng() one
 * without (statistics, probabilities, gathered rows): in the gradient walk it is NULL and
 * takes no space. A walk with base NULL only counts. */

typedef struct arena_walk {
    float *base;
    size_t off;
    int grad;
} arena_walk;

static float *slot(arena_walk *w, size_t n) {
    w->off = (w->off + 15) / 16 * 16; /* 64-byte aligned slots */
    float *p = w->base ? w->base + w->off : NULL;
    w->off += n;
    return p;
}

static float *slot_ng(arena_walk *w, size_t n) {
    return w->grad ? NULL : slot(w, n);
}

static void cross_layer_layout(bt_cross_layer_acts *x, arena_walk *w, const bt_model_config *c,
                               size_t B, size_t T1, size_t T2) {
    const size_t H = (size_t)c->hidden, I = (size_t)c->text_intermediate;
    const size_t NH = (size_t)c->text_heads, N1 = B * T1, N2 = B * T2;
    x->q = slot(w, N1 * H);
    x->k = slot(w, N1 * H);
    x->v = slot(w, N1 * H);
    x->probs = slot_ng(w, B * NH * T1 * T1);
    x->ctx = slot(w, N1 * H);
    x->attn_lin = slot(w, N1 * H);
    x->res1 = slot(w, N1 * H);
    x->mean1 = slot_ng(w, N1);
    x->rstd1 = slot_ng(w, N1);
    x->a = slot(w, N1 * H);
    x->cq = slot(w, N1 * H);
    x->ck = slot(w, N2 * H);
    x->cv = slot(w, N2 * H);
    x->cprobs = slot_ng(w, B * NH * T1 * T2);
    x->cctx = slot(w, N1 * H);
    x->cattn_lin = slot(w, N1 * H);
    x->res2 = slot(w, N1 * H);
    x->mean2 = slot_ng(w, N1);
    x->rstd2 = slot_ng(w, N1);
    x->c = slot(w, N1 * H);
    x->f_pre = slot(w, N1 * I);
    x->f = slot(w, N1 * I);
    x->ffn_lin = slot(w, N1 * H);
    x->res3 = slot(w, N1 * H);
    x->mean3 = slot_ng(w, N1);
    x->rstd3 = slot_ng(w, N1);
    x->out = slot(w, N1 * H);
}

static void acts_layout(bt_acts *a, arena_walk *w, const bt_model_config *c, unsigned heads,
                        size_t B, size_t T) {
    const size_t Ht = (size_t)c->text_hidden, It = (size_t)c->text_intermediate;
    const size_t Hv = (size_t)c->vision_hidden, Np = (size_t)c->np, H = (size_t)c->hidden;
    const size_t Nt = B * T, Nv = B * Np, Gp = B * (size_t)c->num_patches;
    const size_t V = (size_t)c->vocab_size, C = (size_t)c->contrastive_hidden;
    const size_t P = (size_t)c->patch_size, CH = (size_t)c->num_channels;
    /* text */
    a->text_emb = slot(w, Nt * Ht);
    a->text_pos_rows = slot_ng(w, Nt * Ht);
    a->text_emb_mean = slot_ng(w, Nt);
    a->text_emb_rstd = slot_ng(w, Nt);
    a->text_emb_ln = slot(w, Nt * Ht);
    for (int l = 0; l <= c->text_layers; l++) a->text_h[l] = slot(w, Nt * Ht);
    for (int l = 0; l < c->text_layers; l++) {
        bt_text_layer_acts *x = &a->text_layers[l];
        const size_t NH = (size_t)c->text_heads;
        x->q = slot(w, Nt * Ht);
        x->k = slot(w, Nt * Ht);
        x->v = slot(w, Nt * Ht);
        x->probs = slot_ng(w, B * NH * T * T);
        x->ctx = slot(w, Nt * Ht);
        x->attn_lin = slot(w, Nt * Ht);
        x->res1 = slot(w, Nt * Ht);
        x->mean1 = slot_ng(w, Nt);
        x->rstd1 = slot_ng(w, Nt);
        x->a = slot(w, Nt * Ht);
        x->f_pre = slot(w, Nt * It);
        x->f = slot(w, Nt * It);
        x->ffn_lin = slot(w, Nt * Ht);
        x->res2 = slot(w, Nt * Ht);
        x->mean2 = slot_ng(w, Nt);
        x->rstd2 = slot_ng(w, Nt);
    }
    a->key_bias = slot_ng(w, Nt);
    /* vision */
    a->patches = slot_ng(w, Gp * CH * P * P);
    a->patch_emb = slot(w, Gp * Hv);
    a->vis_emb = slot(w, Nv * Hv);
    a->vis_emb_mean = slot_ng(w, Nv);
    a->vis_emb_rstd = slot_ng(w, Nv);
    for (int l = 0; l <= c->vision_layers; l++) a->vis_h[l] = slot(w, Nv * Hv);
    for (int l = 0; l < c->vision_layers; l++) {
        bt_vit_layer_acts *x = &a->vis_layers[l];
        const size_t NH = (size_t)c->vision_heads;
        x->y1 = slot(w, Nv * Hv);
        x->mean1 = slot_ng(w, Nv);
        x->rstd1 = slot_ng(w, Nv);
        x->qkv = slot(w, Nv * 3 * Hv);
        x->probs = slot_ng(w, B * NH * Np * Np);
        x->ctx = slot(w, Nv * Hv);
        x->attn_out = slot(w, Nv * Hv);
        x->x_mid = slot(w, Nv * Hv);
        x->y2 = slot(w, Nv * Hv);
        x->mean2 = slot_ng(w, Nv);
        x->rstd2 = slot_ng(w, Nv);
        x->f_pre = slot(w, Nv * 4 * Hv);
        x->f = slot(w, Nv * 4 * Hv);
        x->mlp_out = slot(w, Nv * Hv);
    }
    /* bridges and cross layers */
    for (int k = 0; k < c->cross_layers; k++) {
        bt_bridge_acts *br = &a->bridges[k];
        br->ut = slot(w, Nt * H);
        br->t_sum = k > 0 ? slot(w, Nt * H) : NULL;
        br->t_mean = slot_ng(w, Nt);
        br->t_rstd = slot_ng(w, Nt);
        br->xin = slot(w, Nt * H);
        br->lnp = slot(w, Nv * Hv);
        br->lnp_mean = slot_ng(w, Nv);
        br->lnp_rstd = slot_ng(w, Nv);
        br->ui = slot(w, Nv * H);
        br->i_sum = k > 0 ? slot(w, Nv * H) : NULL;
        br->i_mean = slot_ng(w, Nv);
        br->i_rstd = slot_ng(w, Nv);
        br->yin = slot(w, Nv * H);
        cross_layer_layout(&a->xt[k], w, c, B, T, Np);
        cross_layer_layout(&a->xi[k], w, c, B, Np, T);
    }
    /* poolers */
    a->cls_t = slot(w, B * H);
    a->cls_i = slot(w, B * H);
    a->pool_t_pre = slot(w, B * H);
    a->pool_i_pre = slot(w, B * H);
    a->pool_t = slot(w, B * H);
    a->pool_i = slot(w, B * H);
    a->pooler = slot(w, B * 2 * H);
    if (heads & BT_HEADS_ITM) {
        a->itm_logits = slot(w, B * 2);
        a->itm_probs = slot_ng(w, B * 2);
    }
    if (heads & BT_HEADS_MLM) {
        a->mlm_tr = slot(w, Nt * H);
        a->mlm_act = slot(w, Nt * H);
        a->mlm_ln = slot(w, Nt * H);
        a->mlm_mean = slot_ng(w, Nt);
        a->mlm_rstd = slot_ng(w, Nt);
        a->mlm_logits = slot(w, Nt * V);
        a->mlm_probs = slot_ng(w, Nt * V);
    }
    if (heads & BT_HEADS_ITC) {
        a->itc_t_cls = slot(w, B * H);
        a->itc_i_cls = slot(w, B * H);
        a->itc_t_proj = slot(w, B * C);
        a->itc_i_proj = slot(w, B * C);
        a->itc_c_proj = slot(w, B * C);
        a->itc_t = slot(w, B * C);
        a->itc_i = slot(w, B * C);
        a->itc_c = slot(w, B * C);
        a->itc_t_norm = slot_ng(w, B);
        a->itc_i_norm = slot_ng(w, B);
        a->itc_c_norm = slot_ng(w, B);
        a->itc_scores = slot(w, 3 * B * B);
        a->itc_probs = slot_ng(w, 3 * B * B);
    }
    w->off = (w->off + 15) / 16 * 16;
}

static void acts_alloc_arrays(bt_acts *a, const bt_model_config *c) {
    a->text_h = calloc((size_t)c->text_layers + 1, sizeof *a->text_h);
    a->text_layers = calloc((size_t)c->text_layers, sizeof *a->text_layers);
    a->vis_h = calloc((size_t)c->vision_layers + 1, sizeof *a->vis_h);
    a->vis_layers = calloc((size_t)c->vision_layers, sizeof *a->vis_layers);
    a->bridges = calloc((size_t)c->cross_layers, sizeof *a->bridges);
    a->xt = calloc((size_t)c->cross_layers, sizeof *a->xt);
    a->xi = calloc((size_t)c->cross_layers, sizeof *a->xi);
    BT_ASSERT(a->text_h && a->text_layers && a->vis_h && a->vis_layers && a->bridges && a->xt &&
              a->xi);
}

bt_status bt_model_reserve(bt_model *m, size_t B, size_t T) {
    const bt_model_config *c = &m->cfg;
    if (B == 0 || T == 0)
        return bt_fail(BT_ERR_SHAPE, "batch: B=%zu, T=%zu: both must be positive", B, T);
    /* RoBERTa positions run up to T + pad_token_id */
    if (T + (size_t)c->pad_token_id >= (size_t)c->max_position_embeddings)
        return bt_fail(BT_ERR_SHAPE,
                       "batch: text length T=%zu exceeds the position table (max_position_"
                       "embeddings %d allows at most %d tokens)", T, c->max_position_embeddings,
                       c->max_position_embeddings - c->pad_token_id - 1);
    if (m->B == B && m->T == T && m->act_mem) return BT_OK;
    model_free_acts(m);
    acts_alloc_arrays(&m->acts, c);
    acts_alloc_arrays(&m->dacts, c);
    arena_walk wa = {NULL, 0, 0}, wd = {NULL, 0, 1};
    acts_layout(&m->acts, &wa, c, m->heads, B, T);
    acts_layout(&m->dacts, &wd, c, m->heads, B, T);
    m->act_numel = wa.off;
    m->dact_numel = wd.off;
    m->act_mem = bt_calloc(m->act_numel * sizeof(float));
    m->dact_mem = bt_calloc(m->dact_numel * sizeof(float));
    wa = (arena_walk){m->act_mem, 0, 0};
    wd = (arena_walk){m->dact_mem, 0, 1};
    acts_layout(&m->acts, &wa, c, m->heads, B, T);
    acts_layout(&m->dacts, &wd, c, m->heads, B, T);
    BT_ASSERT(wa.off == m->act_numel && wd.off == m->dact_numel);
    m->ids = calloc(B * T, sizeof *m->ids);
    m->mask = calloc(B * T, sizeof *m->mask);
    m->pos_ids = calloc(B * T, sizeof *m->pos_ids);
    m->mlm_labels = calloc(B * T, sizeof *m->mlm_labels);
    m->itm_labels = calloc(B, sizeof *m->itm_labels);
    m->itc_targets = calloc(B, sizeof *m->itc_targets);
    BT_ASSERT(m->ids && m->mask && m->pos_ids && m->mlm_labels && m->itm_labels &&
              m->itc_targets);
    m->B = B;
    m->T = T;
    return BT_OK;
}

/* --- forward / backward ----------------------------------------------------------------- */

static bt_status batch_check(const bt_model *m, const bt_batch *b) {
    const bt_model_config *c = &m->cfg;
    if (!b->input_ids) return bt_fail(BT_ERR_ARG, "batch: input_ids is NULL");
    if (!b->pixel_values) return bt_fail(BT_ERR_ARG, "batch: pixel_values is NULL");
    for (size_t i = 0; i < b->B * b->T; i++) {
        if (b->input_ids[i] < 0 || b->input_ids[i] >= c->vocab_size)
            return bt_fail(BT_ERR_ARG, "batch: input_ids[%zu][%zu] = %d is outside [0, %d)",
                           i / b->T, i % b->T, b->input_ids[i], c->vocab_size);
        if (b->attention_mask && b->attention_mask[i] != 0 && b->attention_mask[i] != 1)
            return bt_fail(BT_ERR_ARG, "batch: attention_mask[%zu][%zu] = %d (expected 0 or 1)",
                           i / b->T, i % b->T, b->attention_mask[i]);
        if (b->mlm_labels && b->mlm_labels[i] != -100 &&
            (b->mlm_labels[i] < 0 || b->mlm_labels[i] >= c->vocab_size))
            return bt_fail(BT_ERR_ARG,
                           "batch: mlm_labels[%zu][%zu] = %d (expected -100 or an id below %d)",
                           i / b->T, i % b->T, b->mlm_labels[i], c->vocab_size);
    }
    for (size_t i = 0; b->itm_labels && i < b->B; i++)
        if (b->itm_labels[i] != 0 && b->itm_labels[i] != 1 && b->itm_labels[i] != -100)
            return bt_fail(BT_ERR_ARG, "batch: itm_labels[%zu] = %d (expected 0, 1 or -100)", i,
                           b->itm_labels[i]);
    return BT_OK;
}

bt_status bt_forward(bt_model *m, const bt_batch *b) {
    bt_status s = bt_model_reserve(m, b->B, b->T);
    if (s != BT_OK) return s;
    s = batch_check(m, b);
    if (s != BT_OK) return s;
    const size_t n = b->B * b->T;
    memcpy(m->ids, b->input_ids, n * sizeof *m->ids);
    for (size_t i = 0; i < n; i++) m->mask[i] = b->attention_mask ? b->attention_mask[i] : 1;
    m->has_mlm_labels = b->mlm_labels != NULL;
    if (b->mlm_labels) memcpy(m->mlm_labels, b->mlm_labels, n * sizeof *m->mlm_labels);
    m->has_itm_labels = b->itm_labels != NULL;
    if (b->itm_labels) memcpy(m->itm_labels, b->itm_labels, b->B * sizeof *m->itm_labels);
    for (size_t i = 0; i < b->B; i++) m->itc_targets[i] = (int32_t)i;
    m->loss_itc = m->loss_itm = m->loss_mlm = 0.0f;

    vit_forward(m, b->pixel_values);
    text_forward(m);
    cross_forward(m);
    heads_forward(m);
    return BT_OK;
}

void bt_backward(bt_model *m, const bt_loss_weights *w) {
    BT_ASSERTF(m->dact_mem, "bt_backward before bt_forward");
    memset(m->dact_mem, 0, m->dact_numel * sizeof *m->dact_mem);
    heads_backward(m, w);
    cross_backward(m);
    text_backward(m);
    vit_backward(m);
}
