/* model.c: bt_model lifetime (parameter, gradient, bf16 and activation arenas), the layout
 * walk that sizes and places every activation slot, the memory check, row-keyed dropout, the
 * input checks, the phases (bt_towers_forward, bt_cross_forward_pairs and their backwards) as
 * lists of tower calls, and bt_forward / bt_backward on top of them (see model.h).
 *
 * Deliberately not here: the towers themselves (vit.c, text.c, cross.c, heads.c), the
 * trainer's losses (src/train), checkpoint files with key reports, the optimizer. */
#include "model/model.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "mem.h"
#include "rng.h"
#include "settings.h"
#include "model/layout.h"
#include "model/towers.h"

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
    if (m->packed[w]) { /* the shadow, or without one the master, is packed (model.h) */
        L.w_packed = L.w16 ? (const void *)L.w16 : (const void *)L.w;
        if (L.w16) L.w16 = NULL;
        else L.w = NULL;
    }
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

/* --- dropout: site seeds, row keys ------------------------------------------------------
 * site seed = mix(mix(run seed + φ·(step + 1)) ^ c·site); row seed = mix(site seed ^
 * mix(row key ^ c')). The mask of element i of a row is ops' keep(row seed, i), i counted
 * from the row's start, so it depends on (run seed, step, site, row key, i) only. */

bt_dropout model_dropout(const bt_model *m, uint32_t site, float p) {
    bt_dropout d = {0.0f, 0};
    if (!m->training || p <= 0.0f) return d;
    d.p = p;
    d.seed = bt_mix64(bt_mix64(m->dropout_seed + 0x9e3779b97f4a7c15ull * (m->step + 1)) ^
                      (0xd1b54a32d192ed03ull * site));
    return d;
}

bt_dropout row_dropout(const bt_dropout *site, uint64_t key) {
    bt_dropout d = *site;
    if (d.p > 0.0f) d.seed = bt_mix64(site->seed ^ bt_mix64(key ^ 0x94d049bb133111ebull));
    return d;
}

uint64_t bt_pair_key(uint64_t text_key, uint64_t image_key) {
    return bt_mix64(bt_mix64(text_key + 0x2545f4914f6cdd1dull) ^ (image_key * 0xbf58476d1ce4e5b9ull));
}

void rows_dropout_forward(float *out, const float *x, size_t rows, size_t n,
                          const bt_dropout *site, const uint64_t *keys) {
    if (site->p <= 0.0f) {
        dropout_forward(out, x, rows * n, NULL);
        return;
    }
    for (size_t r = 0; r < rows; r++) {
        const bt_dropout d = row_dropout(site, keys[r]);
        dropout_forward(out + r * n, x + r * n, n, &d);
    }
}

void rows_dropout_backward(float *dx, const float *dout, size_t rows, size_t n,
                           const bt_dropout *site, const uint64_t *keys, bt_dx_mode mode) {
    if (site->p <= 0.0f) {
        dropout_backward(dx, dout, rows * n, NULL, mode);
        return;
    }
    for (size_t r = 0; r < rows; r++) {
        const bt_dropout d = row_dropout(site, keys[r]);
        dropout_backward(dx + r * n, dout + r * n, n, &d, mode);
    }
}

void rows_attention_forward(float *out, float *probs, const float *q, const float *k,
                            const float *v, const float *key_bias, const attention_dims *d,
                            const bt_dropout *site, const uint64_t *keys, gemm_compute compute) {
    if (site->p <= 0.0f) {
        attention_forward(out, probs, q, k, v, key_bias, d, NULL, compute);
        return;
    }
    attention_dims d1 = *d;
    d1.B = 1;
    const size_t pb = d->NH * d->Tq * d->Tk;
    for (size_t b = 0; b < d->B; b++) {
        const bt_dropout r = row_dropout(site, keys[b]);
        attention_forward(out + b * d->Tq * d->ldo, probs ? probs + b * pb : NULL,
                          q + b * d->Tq * d->ldq, k + b * d->Tk * d->ldk, v + b * d->Tk * d->ldv,
                          key_bias ? key_bias + b * d->Tk : NULL, &d1, &r, compute);
    }
}

void rows_attention_backward(float *dq, float *dk, float *dv, const float *dout,
                             const float *probs, const float *q, const float *k,
                             const float *v, const float *key_bias, const attention_dims *d,
                             const bt_dropout *site, const uint64_t *keys,
                             gemm_compute compute, bt_dx_mode mode) {
    if (site->p <= 0.0f) {
        attention_backward(dq, dk, dv, dout, probs, q, k, v, key_bias, d, NULL, compute, mode);
        return;
    }
    attention_dims d1 = *d;
    d1.B = 1;
    const size_t pb = d->NH * d->Tq * d->Tk;
    for (size_t b = 0; b < d->B; b++) {
        const bt_dropout r = row_dropout(site, keys[b]);
        const size_t oq = b * d->Tq * d->ldq, ok = b * d->Tk * d->ldk, ov = b * d->Tk * d->ldv;
        attention_backward(dq + oq, dk + ok, dv + ov, dout + b * d->Tq * d->ldo,
                           probs ? probs + b * pb : NULL, q + oq, k + ok, v + ov,
                           key_bias ? key_bias + b * d->Tk : NULL, &d1, &r, compute, mode);
    }
}

void cls_gather(float *out, const float *x, size_t B, size_t T, size_t C) {
    for (size_t b = 0; b < B; b++) memcpy(out + b * C, x + b * T * C, C * sizeof *out);
}

void cls_scatter_add(float *dx, const float *dout, size_t B, size_t T, size_t C) {
    for (size_t b = 0; b < B; b++)
        for (size_t i = 0; i < C; i++) dx[b * T * C + i] += dout[b * C + i];
}

/* --- lifetime --------------------------------------------------------------------------- */

static void acts_alloc_arrays(bt_acts *a, const bt_model_config *c) {
    memset(a, 0, sizeof *a);
    a->text = calloc(1, sizeof *a->text);
    a->vit = calloc(1, sizeof *a->vit);
    a->cross = calloc(1, sizeof *a->cross);
    a->heads = calloc(1, sizeof *a->heads);
    BT_ASSERT(a->text && a->vit && a->cross && a->heads);
    a->text->h = calloc((size_t)c->text_layers + 1, sizeof *a->text->h);
    a->text->layers = calloc((size_t)c->text_layers, sizeof *a->text->layers);
    a->vit->h = calloc((size_t)c->vision_layers + 1, sizeof *a->vit->h);
    a->vit->layers = calloc((size_t)c->vision_layers, sizeof *a->vit->layers);
    a->bridges = calloc((size_t)c->cross_layers, sizeof *a->bridges);
    a->xt = calloc((size_t)c->cross_layers, sizeof *a->xt);
    a->xi = calloc((size_t)c->cross_layers, sizeof *a->xi);
    BT_ASSERT(a->text->h && a->text->layers && a->vit->h && a->vit->layers && a->bridges &&
              a->xt && a->xi);
}

static void acts_free_arrays(bt_acts *a) {
    if (a->text) {
        free(a->text->h);
        free(a->text->layers);
    }
    if (a->vit) {
        free(a->vit->h);
        free(a->vit->layers);
    }
    free(a->text);
    free(a->vit);
    free(a->cross);
    free(a->heads);
    free(a->bridges);
    free(a->xt);
    free(a->xi);
    memset(a, 0, sizeof *a);
}

static void arena_free(bt_arena *ar) {
    free(ar->mem);
    memset(ar, 0, sizeof *ar);
}

/* The parameter gradients: anonymous pages, zero and backed only when first written, so a
 * model that never trains (bt_model_free_grads) never holds them (peak RSS of inference);
 * bt_model_reserve_phases backs them before a training step (arena_prefault). */
static float *grads_alloc(size_t n) {
    void *p = bt_mem_map_huge(n * sizeof(float)); /* huge pages on request (mem.h) */
    if (!p) bt_abort_at(__FILE__, __LINE__, "out of memory mapping %zu bytes of parameter "
                        "gradients", n * sizeof(float));
    return p;
}

static void grads_free(bt_model *m) {
    if (m->grads) bt_mem_unmap_huge(m->grads, m->table.numel * sizeof *m->grads);
    m->grads = NULL;
}

/* BT_ACT_BF16: unset or "1" = 1, "0" = 0, another value -1. */
static int act_bf16_env(void) {
    const char *v = bt_setting_value(BT_SET_ACT_BF16);
    if (!v || !*v || strcmp(v, "1") == 0) return 1;
    return strcmp(v, "0") == 0 ? 0 : -1;
}

/* BT_ATTENTION_PROBS: unset or "recompute" = 0, "keep" = 1, another value -1. */
static int keep_probs_env(void) {
    const char *v = bt_setting_value(BT_SET_ATTENTION_PROBS);
    if (!v || !*v || strcmp(v, "recompute") == 0) return 0;
    return strcmp(v, "keep") == 0 ? 1 : -1;
}

bt_status bt_model_settings_check(void) {
    if (act_bf16_env() < 0)
        return bt_fail(BT_ERR_ARG, "environment variable BT_ACT_BF16=%s: expected 0 (fp32 "
                       "activations) or 1 (bf16 storage where bf16 GEMMs read them, the "
                       "default)", bt_setting_value(BT_SET_ACT_BF16));
    if (keep_probs_env() < 0)
        return bt_fail(BT_ERR_ARG, "environment variable BT_ATTENTION_PROBS=%s: expected "
                       "'recompute' (the backward recomputes attention probabilities, the "
                       "default) or 'keep' (the forward keeps them)",
                       bt_setting_value(BT_SET_ATTENTION_PROBS));
    return BT_OK;
}

bt_status bt_model_init(bt_model *m, const bt_model_config *c, unsigned heads,
                        bt_precision precision) {
    memset(m, 0, sizeof *m);
    const bt_status st = bt_model_settings_check();
    if (st != BT_OK) return st;
    const int act_bf16 = act_bf16_env(), keep_probs = keep_probs_env();
    m->act_bf16 = act_bf16;
    m->keep_probs = keep_probs;
    m->share_layer_grads = 1;
    m->cfg = *c;
    m->heads = heads & BT_HEADS_ALL;
    m->precision = precision;
    bt_param_table_init(&m->table, c, m->heads);
    /* weights and gradients (+ the bf16 shadow, counted as a third copy): refused with the
     * sizes when the machine lacks them, instead of an allocation abort */
    bt_status s = bt_param_table_check_memory(&m->table, precision == BT_PRECISION_BF16 ? 3 : 2,
                                              "model config");
    if (s != BT_OK) {
        bt_param_table_free(&m->table);
        memset(m, 0, sizeof *m);
        return s;
    }
    const size_t n = m->table.numel;
    /* what every step streams over: in 2 MiB pages, huge on request (mem.h); bt_free frees */
    m->params = bt_calloc_huge(n * sizeof *m->params);
    m->grads = grads_alloc(n);
    /* the bf16 GEMM route (gemm.h: measured once under BT_GEMM_BF16=auto) is chosen here,
     * outside any parallel region and before the first step's clock starts; the bf16 weight
     * copy exists only where bf16 mode computes in bf16 (route FP32: fp32 products) */
    if (precision == BT_PRECISION_BF16 && gemm_bf16_mode_compute() == GEMM_COMPUTE_BF16)
        m->params_bf16 = bt_calloc_huge(n * sizeof *m->params_bf16);
    bt_param_views_bind(&m->p, &m->table, m->params);
    bt_param_views_bind(&m->g, &m->table, m->grads);
    m->hidden_dropout = c->hidden_dropout_prob;
    m->attn_dropout = c->attention_probs_dropout_prob;
    acts_alloc_arrays(&m->acts, c);
    acts_alloc_arrays(&m->dacts, c);
    acts_alloc_arrays(&m->walk_scratch, c);
    return BT_OK;
}

void bt_model_free(bt_model *m) {
    acts_free_arrays(&m->acts);
    acts_free_arrays(&m->dacts);
    acts_free_arrays(&m->walk_scratch);
    arena_free(&m->tower_act);
    arena_free(&m->tower_dact);
    arena_free(&m->pair_act);
    arena_free(&m->pair_dact);
    arena_free(&m->hf_mem);
    arena_free(&m->layer_act);
    arena_free(&m->layer_dact);
    bt_free(m->params);
    grads_free(m);
    bt_free(m->params_bf16);
    bt_param_table_free(&m->table);
    memset(m, 0, sizeof *m);
}

/* Packs field id's weights (every repetition) in place: the bf16 shadow, or without one the
 * fp32 master (model.h bt_model_pack_weights). */
static void pack_field(bt_model *m, int id) {
    const bt_param_field *f = &m->table.fields[id];
    const size_t out = (size_t)f->shape[0], in = f->numel / out;
    for (int r = 0; r < f->reps; r++) {
        const size_t off =
            (size_t)(bt_param_ptr(&m->table, m->params, (bt_param_id)id, r) - m->params);
        if (m->params_bf16) gemm_pack_weight(m->params_bf16 + off, BT_DTYPE_BF16, out, in);
        else gemm_pack_weight(m->params + off, BT_DTYPE_F32, out, in);
    }
}

void bt_model_drop_bf16_shadow(bt_model *m) {
    for (int id = 0; id < BT_P_COUNT; id++)
        BT_ASSERTF(!m->packed[id], "bt_model_drop_bf16_shadow: the weights are packed");
    bt_free(m->params_bf16);
    m->params_bf16 = NULL;
}

void bt_model_refresh_bf16(bt_model *m) {
    if (!m->params_bf16) return;
    bt_params_refresh_bf16(&m->table, m->params_bf16, m->params);
    for (int id = 0; id < BT_P_COUNT; id++)
        if (m->packed[id]) pack_field(m, id);
}

/* The fields model_linear reads as Linear weights and nothing else reads (so packing their
 * master in place breaks no reader): the 2-D weights but the embedding tables (HF names each
 * "...embedding..."). The patch embedding's conv weight (4-D, one product per step) stays
 * row-major. */
static int field_is_linear_weight(const bt_param_field *f) {
    return f->present && f->ndim == 2 && strstr(f->key_pattern, "embedding") == NULL;
}

size_t bt_model_pack_weights(bt_model *m) {
    BT_ASSERTF(!m->grads, "bt_model_pack_weights: only for a model that never trains "
                          "(bt_model_free_grads first)");
    /* the shadow where bf16 products read one, else the fp32 master itself: that has no
     * row-major copy left, so only where the fast kernels run (ops.h linear_forward) */
    const int shadow = m->params_bf16 != NULL;
    const bt_dtype type = shadow ? BT_DTYPE_BF16 : BT_DTYPE_F32;
    if (!shadow && strcmp(ops_kernels_name(), "fast") != 0) return 0;
    size_t tensors = 0;
    for (int id = 0; id < BT_P_COUNT; id++) {
        const bt_param_field *f = &m->table.fields[id];
        if (!m->packed[id] && field_is_linear_weight(f)) {
            const size_t out = (size_t)f->shape[0], in = f->numel / out;
            m->packed[id] = gemm_packed_weight_bytes(type, out, in) > 0;
            if (m->packed[id] && !shadow) pack_field(m, id); /* the master: once, here */
        }
        if (m->packed[id]) tensors += (size_t)f->reps;
    }
    bt_model_refresh_bf16(m); /* the shadow from the master, every marked field packed */
    return tensors;
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
    if (m->grads) zero_fill(m->grads, m->table.numel * sizeof *m->grads); /* threaded memset */
}

void bt_model_set_act_mode(bt_model *m, bt_act_mode mode) {
    BT_ASSERT(mode == BT_ACTS_FULL || mode == BT_ACTS_CHECKPOINT ||
              mode == BT_ACTS_FORWARD_ONLY);
    if (mode == m->act_mode) return;
    m->act_mode = mode;
    m->have_towers = m->have_pairs = 0; /* the slots move: the next forward places them */
}

void bt_model_set_act_bf16(bt_model *m, int on) {
    if (!on == !m->act_bf16) return;
    m->act_bf16 = on != 0;
    m->have_towers = m->have_pairs = 0; /* the slots move: the next forward places them */
}

void bt_model_set_share_layer_grads(bt_model *m, int on) {
    if (!on == !m->share_layer_grads) return;
    m->share_layer_grads = on != 0;
    m->have_towers = m->have_pairs = 0; /* the slots move: the next forward places them */
}

void bt_model_set_keep_probs(bt_model *m, int on) {
    if (!on == !m->keep_probs) return;
    m->keep_probs = on != 0;
    m->have_towers = m->have_pairs = 0; /* the slots move: the next forward places them */
}

void bt_model_set_cross_features(bt_model *m, int on) { m->cross_features = on != 0; }

int bt_model_act_bf16(const bt_model *m) {
    return m->act_bf16 && m->precision == BT_PRECISION_BF16 &&
           model_compute(m) == GEMM_COMPUTE_BF16;
}

const char *bt_act_mode_name(bt_act_mode mode) {
    return mode == BT_ACTS_CHECKPOINT     ? "checkpoint"
           : mode == BT_ACTS_FORWARD_ONLY ? "forward-only"
                                          : "full";
}

void bt_model_free_grads(bt_model *m) {
    grads_free(m);
    memset(&m->g, 0, sizeof m->g);
    bt_model_set_act_mode(m, BT_ACTS_FORWARD_ONLY);
}

/* The layers' internal gradients live in the shared layer gradient scratch (layer_dact):
 * always when checkpointing, and in BT_ACTS_FULL unless bt_model_set_share_layer_grads(m, 0)
 * (model.h "Memory modes"). */
static int layer_grads_shared(const bt_model *m, bt_act_mode mode) {
    return mode == BT_ACTS_CHECKPOINT || (mode == BT_ACTS_FULL && m->share_layer_grads);
}

int model_layer_recompute(bt_model *m, int group) {
    /* the group's accumulated slots (its assigned ones need no zeroing, model.c layout) */
    if (layer_grads_shared(m, m->act_mode) && m->group_grad_bytes[group])
        memset(m->layer_dact.mem, 0, m->group_grad_bytes[group]);
    return m->act_mode == BT_ACTS_CHECKPOINT;
}

/* --- activation layout -------------------------------------------------------------------
 * The slot walk (layout.h) places every activation of a phase: bt_model_activation_bytes, the
 * memory check and the allocation all use the same walks. Gradient arenas: [d_* outputs |
 * accumulated | assigned]. The d_* output slots come first (bt_arena.head; zeroed by the
 * forward, a loss accumulates into them); the accumulated slots are the streams that merge
 * (hidden states that a layer and a bridge both feed, the bridges' tower rows ut / ui,
 * X'_k / Y'_k, the cross layers' outputs, heads' rows), zeroed by the backward before it
 * starts ([head, acc_end)); the assigned ones (every internal of a ViT block, text layer and
 * cross layer, the GEMM-only inputs, the embeddings' LayerNorm slots, the link towers' sums,
 * the MLM transform) are written by their first writer and never zeroed (at base B 8 T 40
 * they were 2.91 of the 3.20 GB of internal gradient slots, which a threaded memset once
 * cleared each step; the layers' share now lives in the layer gradient scratch, one layer's
 * worth).
 *
 * Memory modes (model.h): in BT_ACTS_FULL every activation goes to the phase arena's walk,
 * and the layer internals' gradients (unless bt_model_set_share_layer_grads(m, 0)) to the
 * shared layer gradient scratch's. In the other modes a second walk lays out the shared
 * scratch as a union of groups (BT_GROUP_*):
 * each group starts at offset 0, the scratch's size is the largest group. A group's slots are
 * used by one stage of the forward (and, checkpointing, of the backward) only. */
_Static_assert((int)BT_GROUP_COUNT <= (int)LAYOUT_MAX_GROUPS, "layout.h: too few groups");

typedef struct phase_dims {
    size_t Bt, Bi, T, P, Pm;
} phase_dims;

/* Where a walk puts the copied-input slots (bt_model's fields when placing). */
typedef struct input_slots {
    int32_t *ids, *mask, *pos_ids, *mlm_rows;
    uint64_t *text_keys, *image_keys, *pair_keys;
    bt_pair *pairs;
} input_slots;

/* The towers arena: (Bt, Bi, T). *head = end of the d_* output slots. */
static void towers_layout(const bt_model *m, bt_acts *a, input_slots *in, layout *L,
                          const phase_dims *d, size_t *head) {
    const bt_model_config *c = &m->cfg;
    arena_walk *w = L->w;
    const size_t Bt = d->Bt, Bi = d->Bi, T = d->T;
    const size_t Ht = (size_t)c->text_hidden, Hv = (size_t)c->vision_hidden;
    const size_t Nt = Bt * T, Nv = Bi * (size_t)c->np, C = (size_t)c->contrastive_hidden;
    const int itc = (m->heads & BT_HEADS_ITC) != 0, full = !L->shared;
    /* outputs whose gradient a loss writes */
    a->heads->itc_t = itc ? layout_slot(w, Bt * C) : NULL;
    a->heads->itc_i = itc ? layout_slot(w, Bi * C) : NULL;
    layout_walk_end(w);
    *head = w->off;
    /* copied inputs */
    if (!w->grad) {
        in->ids = layout_take(w, Nt, sizeof(int32_t));
        in->mask = layout_take(w, Nt, sizeof(int32_t));
        in->pos_ids = layout_take(w, Nt, sizeof(int32_t));
        in->text_keys = layout_take(w, Bt, sizeof(uint64_t));
        in->image_keys = layout_take(w, Bi, sizeof(uint64_t));
    }
    a->key_bias = layout_slot_ng(w, Nt);
    /* bf16 storage, BT_ACTS_FULL: the fp32 attention output of the layer running now, before
     * its out-projection rounds it (layout_attn_out_slot) */
    attn_stage stage = {full, NULL, m->keep_probs && !L->forward_only};
    if (full && w->bf16) stage.p = layout_slot_ng(w, Nt * Ht > Nv * Hv ? Nt * Ht : Nv * Hv);
    text_layout(a, L, c, Bt, T, &stage);
    vit_layout(a, L, c, Bi, &stage);
    cross_towers_layout(a, L, c, Bt, T, Bi);
    if (itc) heads_towers_layout(a, L, c, Bt, Bi);
    if (!full) layout_group_close(L);
    layout_walk_end(w);
}

/* The pairs arena: (P, Pm, T). *head = end of the d_* output slots. */
static void pairs_layout(const bt_model *m, bt_acts *a, input_slots *in, layout *L,
                         const phase_dims *d, size_t *head) {
    const bt_model_config *c = &m->cfg;
    arena_walk *w = L->w;
    const size_t P = d->P, Pm = d->Pm, T = d->T;
    const size_t Np = (size_t)c->np, H = (size_t)c->hidden, V = (size_t)c->vocab_size;
    const size_t Nt = P * T, Nv = P * Np, Nm = Pm * T, C = (size_t)c->contrastive_hidden;
    const int itc = (m->heads & BT_HEADS_ITC) != 0, itm = (m->heads & BT_HEADS_ITM) != 0;
    const int mlm = (m->heads & BT_HEADS_MLM) != 0;
    const int full = !L->shared;
    /* outputs whose gradient a loss writes */
    a->heads->itc_c = itc ? layout_slot(w, P * C) : NULL;
    a->heads->itm_logits = itm ? layout_slot(w, P * 2) : NULL;
    a->heads->mlm_logits = mlm ? layout_slot(w, Nm * V) : NULL;
    layout_walk_end(w);
    *head = w->off;
    /* copied inputs */
    if (!w->grad) {
        in->pairs = layout_take(w, P, sizeof(bt_pair));
        in->mlm_rows = layout_take(w, Pm, sizeof(int32_t));
        in->pair_keys = layout_take(w, P, sizeof(uint64_t));
    }
    a->pair_key_bias = layout_slot_ng(w, Nt);
    /* bf16 storage, BT_ACTS_FULL: the fp32 attention output of the cross layer side running
     * now (towers_layout) */
    attn_stage stage = {full, NULL, m->keep_probs && !L->forward_only};
    if (full && w->bf16) stage.p = layout_slot_ng(w, (Nt > Nv ? Nt : Nv) * H);
    cross_pairs_layout(a, L, c, P, T, &stage);
    heads_pairs_layout(a, L, c, m->heads, P, Pm, T);
    if (!full) layout_group_close(L);
    layout_walk_end(w);
}

/* bt_forward's HF loss scratch for B x T (one arena, no gradient twin). */
static void hf_layout(bt_model *m, arena_walk *w, size_t B, size_t T) {
    const bt_model_config *c = &m->cfg;
    bt_hf_loss *h = &m->hf;
    const int itc = (m->heads & BT_HEADS_ITC) != 0, itm = (m->heads & BT_HEADS_ITM) != 0;
    const int mlm = (m->heads & BT_HEADS_MLM) != 0;
    h->itc_scores = itc ? layout_slot(w, 3 * B * B) : NULL;
    h->d_itc_scores = itc ? layout_slot(w, 3 * B * B) : NULL;
    h->itc_probs = itc ? layout_slot(w, 3 * B * B) : NULL;
    h->itm_probs = itm ? layout_slot(w, B * 2) : NULL;
    h->mlm_probs = mlm ? layout_slot(w, B * T * (size_t)c->vocab_size) : NULL;
    h->itc_targets = layout_take(w, B, sizeof(int32_t));
    h->itm_labels = layout_take(w, B, sizeof(int32_t));
    h->mlm_labels = layout_take(w, B * T, sizeof(int32_t));
    h->pairs = layout_take(w, B, sizeof(bt_pair));
    layout_walk_end(w);
}

enum { PHASE_TOWERS, PHASE_PAIRS };

/* One pass of the layout: layout_slot_set slots of a gradient walk go to wa->set / ws->set. */
static void phase_walk_pass(const bt_model *m, bt_act_mode mode, bt_acts *a, input_slots *in,
                            int phase, arena_walk *wa, arena_walk *ws, const phase_dims *d,
                            size_t *head, size_t *groups) {
    layout L;
    memset(&L, 0, sizeof L);
    wa->bf16 = ws->bf16 = bt_model_act_bf16(m);
    L.w = wa;
    /* FULL: the activations of every layer kept; their gradients shared (or not) */
    L.shared = mode != BT_ACTS_FULL || (wa->grad && layer_grads_shared(m, mode));
    L.s = L.shared ? ws : wa;
    L.forward_only = mode == BT_ACTS_FORWARD_ONLY;
    L.group = -1;
    if (phase == PHASE_TOWERS) towers_layout(m, a, in, &L, d, head);
    else pairs_layout(m, a, in, &L, d, head);
    layout_walk_end(L.s);
    for (int g = 0; groups && g < BT_GROUP_COUNT; g++)
        if (L.groups[g]) groups[g] = L.groups[g];
}

/* One walk of a phase's activation (grad = 0) or gradient (grad = 1) layout in `mode`, slots
 * written to `a`; wa over the phase arena, ws over the shared scratch (unused in FULL).
 * A gradient walk lays out [outputs | accumulated | assigned] (see the layout comment) in
 * each of wa and ws: where the assigned region starts is the accumulated slots' size, so
 * placing first counts it in a pass without bases (the same walk; `a` is overwritten).
 * After it wa->acc / ws->acc = that size, top / top_approx include the assigned region, and
 * groups[] hold each group's accumulated bytes. */
static void phase_walk(const bt_model *m, bt_act_mode mode, bt_acts *a, input_slots *in,
                       int phase, arena_walk *wa, arena_walk *ws, const phase_dims *d,
                       size_t *head, size_t *groups) {
    if (!wa->grad) {
        phase_walk_pass(m, mode, a, in, phase, wa, ws, d, head, groups);
        return;
    }
    arena_walk set_a = {NULL, 0, 0, 0.0, 0.0, 1, 0, NULL, 0}, set_s = set_a;
    if (wa->base || ws->base) {
        arena_walk ca = set_a, cs = set_a, cas = set_a, css = set_a;
        ca.set = &cas;
        cs.set = &css;
        phase_walk_pass(m, mode, a, in, phase, &ca, &cs, d, head, NULL);
        set_a.base = wa->base ? wa->base + ca.top : NULL;
        set_s.base = ws->base ? ws->base + cs.top : NULL;
    }
    wa->set = &set_a;
    ws->set = &set_s;
    phase_walk_pass(m, mode, a, in, phase, wa, ws, d, head, groups);
    layout_walk_end(&set_a);
    layout_walk_end(&set_s);
    arena_walk *const both[2] = {wa, ws};
    const arena_walk *const sets[2] = {&set_a, &set_s};
    for (int i = 0; i < 2; i++) {
        arena_walk *w = both[i];
        w->acc = w->top;
        w->top += sets[i]->top;
        w->top_approx += sets[i]->top_approx;
        w->set = NULL;
    }
}

/* Bytes of a phase's activation (grad = 0) or gradient (grad = 1) arena and of its shared
 * scratch (*scratch, 0 in FULL; doubles in *approx / *approx_s for overflow detection),
 * without allocating: the slots go to `scratch_acts` (config-sized pointer arrays), so
 * neither the model's slots nor its inputs move. Forward-only mode has no gradient walk. */
static size_t phase_count(const bt_model *m, bt_act_mode mode, bt_acts *scratch_acts,
                          int phase, int grad, const phase_dims *d, double *approx,
                          size_t *scratch, double *approx_s) {
    input_slots in;
    arena_walk wa = {.grad = grad}, ws = wa;
    size_t head;
    if (!(grad && mode == BT_ACTS_FORWARD_ONLY))
        phase_walk(m, mode, scratch_acts, &in, phase, &wa, &ws, d, &head, NULL);
    if (approx) *approx = wa.top_approx;
    if (scratch) *scratch = ws.top; /* 0 where the walk shares nothing */
    if (approx_s) *approx_s = ws.top_approx;
    return wa.top;
}

/* The shared scratch of a forward-only pass over the given phases at dims d (the largest
 * of theirs; doubles, for overflow detection). BT_ACTS_FULL sizes its layer gradient scratch
 * to host it at least, so that evaluation inside a training run allocates nothing (the
 * scratch goes to an idle gradient arena: phases_fit). */
static double forward_only_scratch(const bt_model *m, bt_acts *scratch_acts, int towers,
                                   int pairs, const phase_dims *d) {
    double most = 0.0;
    for (int phase = PHASE_TOWERS; phase <= PHASE_PAIRS; phase++) {
        if ((phase == PHASE_TOWERS && !towers) || (phase == PHASE_PAIRS && !pairs)) continue;
        double s;
        phase_count(m, BT_ACTS_FORWARD_ONLY, scratch_acts, phase, 0, d, NULL, NULL, &s);
        if (s > most) most = s;
    }
    return most;
}

size_t bt_model_activation_bytes_mode(const bt_model_config *c, unsigned heads,
                                      bt_precision prec, bt_act_mode mode, size_t Bt,
                                      size_t Bi, size_t P, size_t Pm, size_t T) {
    bt_model m;
    memset(&m, 0, sizeof m);
    m.cfg = *c;
    m.heads = heads & BT_HEADS_ALL;
    m.precision = prec;
    m.act_bf16 = act_bf16_env() != 0; /* what bt_model_init sets (a bad value: it refuses) */
    m.keep_probs = keep_probs_env() > 0;
    m.share_layer_grads = 1; /* what bt_model_init sets */
    const phase_dims d = {Bt, Bi, T, P, Pm};
    bt_acts scratch;
    acts_alloc_arrays(&scratch, c);
    size_t total = 0, shared[2] = {0, 0};
    for (int phase = PHASE_TOWERS; phase <= PHASE_PAIRS; phase++)
        for (int grad = 0; grad <= 1; grad++) {
            size_t s;
            total += phase_count(&m, mode, &scratch, phase, grad, &d, NULL, &s, NULL);
            if (s > shared[grad]) shared[grad] = s;
        }
    if (layer_grads_shared(&m, mode) && mode == BT_ACTS_FULL) { /* as phases_fit sizes it */
        const double fo = forward_only_scratch(&m, &scratch, 1, 1, &d);
        if (fo > (double)shared[1]) shared[1] = (size_t)fo;
    }
    acts_free_arrays(&scratch);
    return total + shared[0] + shared[1];
}

size_t bt_model_activation_bytes(const bt_model_config *c, unsigned heads, bt_precision prec,
                                 size_t Bt, size_t Bi, size_t P, size_t Pm, size_t T) {
    return bt_model_activation_bytes_mode(c, heads, prec, BT_ACTS_FULL, Bt, Bi, P, Pm, T);
}

size_t bt_model_hf_loss_bytes(const bt_model_config *c, unsigned heads, size_t B, size_t T) {
    bt_model m;
    memset(&m, 0, sizeof m);
    m.cfg = *c;
    m.heads = heads & BT_HEADS_ALL;
    arena_walk w = {0};
    hf_layout(&m, &w, B, T);
    return w.off;
}

/* --- memory ------------------------------------------------------------------------------ */

/* "the activations for ..." naming the shapes, for the out-of-memory messages. */
static void plan_text(char *buf, size_t cap, const bt_model *m, const phase_dims *d,
                      double need) {
    char all[32];
    bt_mem_format(all, sizeof all, need < 0x1p63 ? (uint64_t)need : UINT64_MAX);
    snprintf(buf, cap,
             "growing the activations to %zu texts x %zu tokens, %zu images of %d px and %zu "
             "pairs (%zu with MLM) (%s in all)",
             d->Bt, d->T, d->Bi, m->cfg.image_size, d->P, d->Pm, all);
}

static const char *const REDUCE = "the batch size, the max text length or the image size";

/* Backs a new arena with memory now (MADV_POPULATE_WRITE, else a write per page): its page
 * faults are paid where it is reserved, not scattered over the kernels of the first step
 * that writes it (measured, base B 8 bf16: 1.96 M faults made the first step 3x a steady
 * one; docs/benchmarks.md "First step"). */
static void arena_prefault(void *mem, size_t bytes) {
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif
    const uintptr_t page = 4096, lo = ((uintptr_t)mem + page - 1) & ~(page - 1);
    const uintptr_t hi = ((uintptr_t)mem + bytes) & ~(page - 1);
    const size_t piece = (size_t)64 << 20; /* 64 MiB per call, spread over the threads */
    const long n = hi > lo ? (long)((hi - lo + piece - 1) / piece) : 0;
#pragma omp parallel for schedule(dynamic)
    for (long i = 0; i < n; i++) {
        const uintptr_t a = lo + (uintptr_t)i * piece, b = a + piece < hi ? a + piece : hi;
        if (madvise((void *)a, b - a, MADV_POPULATE_WRITE) != 0) /* kernel < 5.14 */
            for (uintptr_t p = a; p < b; p += page) *(volatile char *)p = 0;
    }
    if (lo > (uintptr_t)mem) *(volatile char *)mem = 0; /* the partial first page */
}

/* Grows the n arenas to need[i] bytes (grow-only; contents are lost when an arena grows),
 * refusing growth beyond MemAvailable and reporting a failed allocation, before changing
 * anything. */
static bt_status arenas_grow(const bt_model *m, bt_arena **ars, const double *need, int n,
                             const phase_dims *d) {
    double total = 0.0, extra = 0.0;
    for (int i = 0; i < n; i++) {
        total += need[i];
        if (need[i] > (double)ars[i]->bytes) extra += need[i] - (double)ars[i]->bytes;
    }
    if (extra == 0.0) return BT_OK;
    char what[320];
    plan_text(what, sizeof what, m, d, total);
    if (total > 0x1p62)
        return bt_fail(BT_ERR_NOMEM, "%s: beyond any address space; reduce %s", what, REDUCE);
    /* the machine's available memory (src/mem.h: MemAvailable, cgroup limits) */
    bt_status s = bt_mem_check((uint64_t)extra, what, REDUCE);
    if (s != BT_OK) return s;
    for (int i = 0; i < n; i++) {
        if (need[i] <= (double)ars[i]->bytes) continue;
        const size_t bytes = (size_t)need[i];
        free(ars[i]->mem);
        ars[i]->mem = bt_mem_alloc_huge(bytes); /* huge pages on request (mem.h) */
        ars[i]->bytes = ars[i]->mem ? bytes : 0;
        ars[i]->used = ars[i]->head = ars[i]->acc_end = 0;
        if (!ars[i]->mem)
            return bt_fail(BT_ERR_NOMEM, "%s: allocating %zu bytes failed; reduce %s", what,
                           bytes, REDUCE);
        arena_prefault(ars[i]->mem, bytes);
    }
    return BT_OK;
}

/* Places the slots of one phase for dims d in its (large enough) arenas and the shared
 * scratch (model.h "Memory modes"). Forward-only: the gradient slots are all NULL. */
static void phase_place(bt_model *m, int phase, const phase_dims *d) {
    const bt_act_mode mode = m->act_mode;
    const int fo = mode == BT_ACTS_FORWARD_ONLY, shared = mode != BT_ACTS_FULL;
    bt_arena *act = phase == PHASE_TOWERS ? &m->tower_act : &m->pair_act;
    bt_arena *dact = phase == PHASE_TOWERS ? &m->tower_dact : &m->pair_dact;
    BT_ASSERTF(!shared || m->scratch, "shared scratch not sized before placing");
    arena_walk wa = {.base = act->mem};
    arena_walk wd = {.base = fo ? NULL : dact->mem, .grad = 1};
    arena_walk sa = {.base = shared ? m->scratch->mem : NULL};
    arena_walk sd = {.base = layer_grads_shared(m, mode) ? m->layer_dact.mem : NULL, .grad = 1};
    size_t head_a, head_d;
    input_slots in, unused;
    phase_walk(m, mode, &m->acts, &in, phase, &wa, &sa, d, &head_a, NULL);
    phase_walk(m, mode, &m->dacts, &unused, phase, &wd, &sd, d, &head_d, m->group_grad_bytes);
    if (phase == PHASE_TOWERS) {
        m->ids = in.ids;
        m->mask = in.mask;
        m->pos_ids = in.pos_ids;
        m->text_keys = in.text_keys;
        m->image_keys = in.image_keys;
    } else {
        m->pairs = in.pairs;
        m->mlm_rows = in.mlm_rows;
        m->pair_keys = in.pair_keys;
    }
    BT_ASSERT(wa.top <= act->bytes && (fo || wd.top <= dact->bytes));
    BT_ASSERT(!shared || sa.top <= m->scratch->bytes);
    BT_ASSERT(!layer_grads_shared(m, mode) || sd.top <= m->layer_dact.bytes);
    act->used = wa.top;
    act->head = head_a;
    dact->used = fo ? 0 : wd.top;
    dact->head = fo ? 0 : head_d;
    dact->acc_end = fo ? 0 : wd.acc;
    m->act_numel = (m->tower_act.used + m->pair_act.used) / sizeof(float);
    m->dact_numel = (m->tower_dact.used + m->pair_dact.used) / sizeof(float);
}

/* Makes the arenas of the given phases and the shared scratch large enough for d (no
 * placement). Forward-only: no gradient arenas; the scratch goes to the first of layer_act,
 * tower_dact, pair_dact, layer_dact already large enough (unused in this mode), else
 * layer_act grows. */
static bt_status phases_fit(bt_model *m, int towers, int pairs, const phase_dims *d) {
    const bt_act_mode mode = m->act_mode;
    bt_arena *ars[6];
    double need[6], shared[2] = {0.0, 0.0};
    int n = 0;
    for (int phase = PHASE_TOWERS; phase <= PHASE_PAIRS; phase++) {
        if ((phase == PHASE_TOWERS && !towers) || (phase == PHASE_PAIRS && !pairs)) continue;
        for (int grad = 0; grad <= 1; grad++) {
            if (grad && mode == BT_ACTS_FORWARD_ONLY) continue;
            double approx, approx_s;
            phase_count(m, mode, &m->walk_scratch, phase, grad, d, &approx, NULL, &approx_s);
            ars[n] = phase == PHASE_TOWERS ? (grad ? &m->tower_dact : &m->tower_act)
                                           : (grad ? &m->pair_dact : &m->pair_act);
            need[n++] = approx;
            if (approx_s > shared[grad]) shared[grad] = approx_s;
        }
    }
    if (mode == BT_ACTS_CHECKPOINT) {
        m->scratch = &m->layer_act;
        ars[n] = &m->layer_act;
        need[n++] = shared[0];
    }
    if (layer_grads_shared(m, mode)) {
        /* FULL: also large enough to host the scratch of a forward-only pass at these shapes,
         * so that evaluation inside a training run allocates nothing (see below) */
        const double fo = mode == BT_ACTS_FULL ? forward_only_scratch(m, &m->walk_scratch,
                                                                      towers, pairs, d)
                                               : 0.0;
        ars[n] = &m->layer_dact;
        need[n++] = fo > shared[1] ? fo : shared[1];
    } else if (mode == BT_ACTS_FORWARD_ONLY) {
        bt_arena *const host[4] = {&m->layer_act, &m->tower_dact, &m->pair_dact, &m->layer_dact};
        bt_arena *h = m->scratch && (double)m->scratch->bytes >= shared[0] ? m->scratch : NULL;
        for (int i = 0; i < 4 && !h; i++)
            if ((double)host[i]->bytes >= shared[0]) h = host[i];
        if (!h) {
            h = &m->layer_act;
            ars[n] = h;
            need[n++] = shared[0];
        }
        m->scratch = h;
    }
    const size_t before[4] = {m->tower_act.bytes, m->tower_dact.bytes, m->pair_act.bytes,
                              m->pair_dact.bytes};
    bt_status s = arenas_grow(m, ars, need, n, d);
    if (s != BT_OK) return s;
    /* a grown arena lost its contents (a phase's scratch slots are re-placed before they are
     * read again: the next forward, or the checkpointed backward) */
    if (towers && (m->tower_act.bytes != before[0] || m->tower_dact.bytes != before[1]))
        m->have_towers = 0;
    if (pairs && (m->pair_act.bytes != before[2] || m->pair_dact.bytes != before[3]))
        m->have_pairs = 0;
    return BT_OK;
}

static bt_status check_text_length(const bt_model *m, size_t T) {
    const bt_model_config *c = &m->cfg;
    /* RoBERTa positions run up to T + pad_token_id */
    if (T + (size_t)c->pad_token_id >= (size_t)c->max_position_embeddings)
        return bt_fail(BT_ERR_SHAPE,
                       "batch: text length T=%zu exceeds the position table (max_position_"
                       "embeddings %d allows at most %d tokens)",
                       T, c->max_position_embeddings,
                       c->max_position_embeddings - c->pad_token_id - 1);
    return BT_OK;
}

bt_status bt_model_reserve_phases(bt_model *m, size_t Bt, size_t Bi, size_t P, size_t Pm,
                                  size_t T) {
    bt_status s = check_text_length(m, T);
    if (s != BT_OK) return s;
    const phase_dims d = {Bt, Bi, T, P, Pm};
    s = phases_fit(m, 1, 1, &d);
    if (s != BT_OK) return s;
    /* placed for d so every arena's bytes are in use; the next forward places again */
    if (!m->have_towers) phase_place(m, PHASE_TOWERS, &d);
    if (!m->have_pairs) phase_place(m, PHASE_PAIRS, &d);
    /* a model that will run a backward: its gradient pages backed now, not in the first step */
    if (m->grads && m->act_mode != BT_ACTS_FORWARD_ONLY && !m->grads_backed) {
        arena_prefault(m->grads, m->table.numel * sizeof *m->grads);
        m->grads_backed = 1;
    }
    return BT_OK;
}

bt_status bt_model_reserve(bt_model *m, size_t B, size_t T) {
    if (B == 0 || T == 0)
        return bt_fail(BT_ERR_SHAPE, "batch: B=%zu, T=%zu: both must be positive", B, T);
    const size_t Pm = (m->heads & BT_HEADS_MLM) ? B : 0;
    bt_status s = bt_model_reserve_phases(m, B, B, B, Pm, T);
    if (s != BT_OK) return s;
    arena_walk w = {0};
    hf_layout(m, &w, B, T);
    bt_arena *ar = &m->hf_mem;
    const double need = w.approx;
    const phase_dims d = {B, B, T, B, Pm};
    s = arenas_grow(m, &ar, &need, 1, &d);
    if (s != BT_OK) return s;
    w = (arena_walk){.base = m->hf_mem.mem};
    hf_layout(m, &w, B, T);
    m->hf_mem.used = w.off;
    return BT_OK;
}

/* --- phases ------------------------------------------------------------------------------ */

static bt_status text_check(const bt_model *m, const bt_text_input *t) {
    const bt_model_config *c = &m->cfg;
    if (!t->input_ids) return bt_fail(BT_ERR_ARG, "texts: input_ids is NULL");
    if (t->T == 0) return bt_fail(BT_ERR_SHAPE, "texts: T=0 tokens per row");
    for (size_t i = 0; i < t->B * t->T; i++) {
        if (t->input_ids[i] < 0 || t->input_ids[i] >= c->vocab_size)
            return bt_fail(BT_ERR_ARG, "texts: input_ids[%zu][%zu] = %d is outside [0, %d)",
                           i / t->T, i % t->T, t->input_ids[i], c->vocab_size);
        if (t->attention_mask && t->attention_mask[i] != 0 && t->attention_mask[i] != 1)
            return bt_fail(BT_ERR_ARG, "texts: attention_mask[%zu][%zu] = %d (expected 0 or 1)",
                           i / t->T, i % t->T, t->attention_mask[i]);
    }
    return check_text_length(m, t->T);
}

/* Zeroes the accumulated internal slots of a gradient arena, [head, acc_end) (the assigned
 * slots after acc_end are written before they are read; see the layout comment). */
static void grad_internal_zero(bt_arena *ar) {
    if (ar->acc_end > ar->head)
        zero_fill((unsigned char *)ar->mem + ar->head, ar->acc_end - ar->head); /* threaded */
}

static void outputs_bind(bt_model *m) {
    m->itc_text = m->acts.heads->itc_t;
    m->d_itc_text = m->dacts.heads->itc_t;
    m->itc_image = m->acts.heads->itc_i;
    m->d_itc_image = m->dacts.heads->itc_i;
    m->pooler_out = m->acts.cross->pooler;
    m->itc_cross = m->acts.heads->itc_c;
    m->d_itc_cross = m->dacts.heads->itc_c;
    m->itm_logits_out = m->acts.heads->itm_logits;
    m->d_itm_logits = m->dacts.heads->itm_logits;
    m->mlm_logits_out = m->acts.heads->mlm_logits;
    m->d_mlm_logits = m->dacts.heads->mlm_logits;
}

bt_status bt_towers_forward(bt_model *m, const bt_text_input *t, const bt_image_input *im) {
    const size_t Bt = t ? t->B : 0, Bi = im ? im->B : 0, T = Bt ? t->T : 0;
    if (Bt == 0 && Bi == 0) return bt_fail(BT_ERR_SHAPE, "towers: no text and no image rows");
    if (Bt) {
        bt_status s = text_check(m, t);
        if (s != BT_OK) return s;
    }
    if (Bi && !im->pixel_values) return bt_fail(BT_ERR_ARG, "images: pixel_values is NULL");
    const phase_dims d = {Bt, Bi, T, 0, 0};
    bt_status s = phases_fit(m, 1, 0, &d);
    if (s != BT_OK) return s;
    m->have_towers = m->have_pairs = 0;
    phase_place(m, PHASE_TOWERS, &d);
    m->Bt = Bt;
    m->Bi = Bi;
    m->T = T;
    m->P = m->Pm = m->B = 0;
    if (Bt) {
        memcpy(m->ids, t->input_ids, Bt * T * sizeof *m->ids);
        for (size_t i = 0; i < Bt * T; i++) m->mask[i] = t->attention_mask ? t->attention_mask[i] : 1;
    }
    for (size_t r = 0; r < Bt; r++) m->text_keys[r] = t->sample_keys ? t->sample_keys[r] : r;
    for (size_t r = 0; r < Bi; r++) m->image_keys[r] = im->sample_keys ? im->sample_keys[r] : r;
    /* d_itc_text / d_itc_image = 0; the rest of the gradient arena when the backward starts */
    if (m->tower_dact.head) memset(m->tower_dact.mem, 0, m->tower_dact.head);
    m->tower_grad_dirty = 1;

    if (Bi) vit_forward(m, im->pixel_values);
    if (Bt) text_forward(m);
    cross_towers_forward(m);
    heads_towers_forward(m);
    m->have_towers = 1;
    outputs_bind(m);
    return BT_OK;
}

bt_status bt_cross_forward_pairs(bt_model *m, const bt_pair *pairs, size_t P) {
    if (!m->have_towers) return bt_fail(BT_ERR_ARG, "pairs: no tower pass to read rows from");
    if (P == 0 || !pairs) return bt_fail(BT_ERR_SHAPE, "pairs: no pairs (P=%zu)", P);
    size_t Pm = 0;
    for (size_t p = 0; p < P; p++) {
        const bt_pair *x = &pairs[p];
        if (x->text_row < 0 || (size_t)x->text_row >= m->Bt)
            return bt_fail(BT_ERR_ARG, "pairs[%zu].text_row = %d is outside [0, %zu) texts", p,
                           x->text_row, m->Bt);
        if (x->image_row < 0 || (size_t)x->image_row >= m->Bi)
            return bt_fail(BT_ERR_ARG, "pairs[%zu].image_row = %d is outside [0, %zu) images", p,
                           x->image_row, m->Bi);
        if (x->mlm != 0 && x->mlm != 1)
            return bt_fail(BT_ERR_ARG, "pairs[%zu].mlm = %d (expected 0 or 1)", p, x->mlm);
        Pm += x->mlm;
    }
    if (!(m->heads & BT_HEADS_MLM)) Pm = 0; /* no MLM head: flags ignored */
    const phase_dims d = {m->Bt, m->Bi, m->T, P, Pm};
    bt_status s = phases_fit(m, 0, 1, &d);
    if (s != BT_OK) return s;
    m->have_pairs = 0;
    phase_place(m, PHASE_PAIRS, &d);
    m->P = P;
    m->Pm = Pm;
    m->B = 0;
    const size_t T = m->T;
    for (size_t p = 0, j = 0; p < P; p++) {
        m->pairs[p] = pairs[p];
        if (Pm && pairs[p].mlm) m->mlm_rows[j++] = (int32_t)p;
        m->pair_keys[p] =
            bt_pair_key(m->text_keys[pairs[p].text_row], m->image_keys[pairs[p].image_row]);
        memcpy(m->acts.pair_key_bias + p * T, m->acts.key_bias + (size_t)pairs[p].text_row * T,
               T * sizeof(float));
    }
    /* d_itc_cross / d_itm_logits / d_mlm_logits = 0; the rest when the backward starts */
    if (m->pair_dact.head) memset(m->pair_dact.mem, 0, m->pair_dact.head);
    m->pair_grad_dirty = 1;

    cross_pairs_forward(m);
    heads_pairs_forward(m);
    m->have_pairs = 1;
    outputs_bind(m);
    return BT_OK;
}

/* A backward needs gradient arenas and the parameter gradients (model.h "Memory modes"). */
static void backward_check(const bt_model *m, const char *who) {
    BT_ASSERTF(m->act_mode != BT_ACTS_FORWARD_ONLY,
               "%s on a model in forward-only mode (bt_model_set_act_mode BT_ACTS_FORWARD_ONLY "
               "keeps no activations for a backward): set BT_ACTS_FULL or BT_ACTS_CHECKPOINT "
               "before the forward", who);
    BT_ASSERTF(m->grads, "%s: the parameter gradients were freed (bt_model_free_grads)", who);
}

/* A shared layer (gradient) scratch may have grown (and moved) since this phase was placed
 * (checkpointing; FULL with shared layer gradients): the phase is placed again (the same
 * addresses in its own arenas). */
static void checkpoint_replace(bt_model *m, int phase) {
    if (!layer_grads_shared(m, m->act_mode)) return;
    const phase_dims d = {m->Bt, m->Bi, m->T, m->P, m->Pm};
    phase_place(m, phase, &d);
}

void bt_cross_backward_pairs(bt_model *m) {
    backward_check(m, "bt_cross_backward_pairs");
    BT_ASSERTF(m->have_pairs && m->have_towers, "bt_cross_backward_pairs before its forwards");
    checkpoint_replace(m, PHASE_PAIRS);
    if (m->pair_grad_dirty) grad_internal_zero(&m->pair_dact);
    if (m->tower_grad_dirty) grad_internal_zero(&m->tower_dact);
    m->pair_grad_dirty = m->tower_grad_dirty = 0;
    heads_pairs_backward(m);
    bt_grads_final(m, BT_GRAD_EV_PAIR_HEADS, 0);
    cross_pairs_backward(m);
    m->pair_grad_dirty = 1; /* a second call starts again from the d_* slots */
}

void bt_towers_backward(bt_model *m) {
    backward_check(m, "bt_towers_backward");
    BT_ASSERTF(m->have_towers, "bt_towers_backward before bt_towers_forward");
    checkpoint_replace(m, PHASE_TOWERS);
    if (m->tower_grad_dirty) grad_internal_zero(&m->tower_dact);
    m->tower_grad_dirty = 0;
    heads_towers_backward(m);
    bt_grads_final(m, BT_GRAD_EV_ITC_HEADS, 0);
    cross_towers_backward(m);
    bt_grads_final(m, BT_GRAD_EV_BRIDGES, 0);
    if (m->Bt) text_backward(m);
    if (m->Bi) vit_backward(m);
    m->tower_grad_dirty = 1;
}

int bt_grad_event_order(const bt_model_config *c, bt_grad_event ev, int layer) {
    const int X = c->cross_layers, Lt = c->text_layers, Lv = c->vision_layers;
    switch (ev) {
    case BT_GRAD_EV_NONE: return -1;
    case BT_GRAD_EV_PAIR_HEADS: return 0;
    case BT_GRAD_EV_CROSS_LAYER: return 1 + (X - 1 - layer);
    case BT_GRAD_EV_ITC_HEADS: return X + 1;
    case BT_GRAD_EV_BRIDGES: return X + 2;
    case BT_GRAD_EV_TEXT_LAYER: return X + 3 + (Lt - 1 - layer);
    case BT_GRAD_EV_TEXT_EMB: return X + Lt + 3;
    case BT_GRAD_EV_VIT_LAYER: return X + Lt + 4 + (Lv - 1 - layer);
    case BT_GRAD_EV_VIT_EMB: return X + Lt + Lv + 4;
    }
    return -1;
}

/* --- bt_forward / bt_backward ------------------------------------------------------------ */

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
    const size_t B = b->B, T = b->T;
    const bt_text_input ti = {B, T, b->input_ids, b->attention_mask, NULL};
    const bt_image_input ii = {B, b->pixel_values, NULL};
    s = bt_towers_forward(m, &ti, &ii);
    if (s != BT_OK) return s;
    bt_hf_loss *h = &m->hf;
    const int32_t mlm = (m->heads & BT_HEADS_MLM) != 0;
    for (size_t i = 0; i < B; i++) h->pairs[i] = (bt_pair){(int32_t)i, (int32_t)i, mlm};
    s = bt_cross_forward_pairs(m, h->pairs, B);
    if (s != BT_OK) return s;
    m->B = B;
    h->has_mlm_labels = b->mlm_labels != NULL;
    if (b->mlm_labels) memcpy(h->mlm_labels, b->mlm_labels, B * T * sizeof *h->mlm_labels);
    h->has_itm_labels = b->itm_labels != NULL;
    if (b->itm_labels) memcpy(h->itm_labels, b->itm_labels, B * sizeof *h->itm_labels);
    for (size_t i = 0; i < B; i++) h->itc_targets[i] = (int32_t)i;
    hf_losses_forward(m);
    return BT_OK;
}

void bt_backward(bt_model *m, const bt_loss_weights *w) {
    backward_check(m, "bt_backward");
    BT_ASSERTF(m->B && m->have_pairs, "bt_backward without a bt_forward");
    memset(m->tower_dact.mem, 0, m->tower_dact.head);
    memset(m->pair_dact.mem, 0, m->pair_dact.head);
    m->tower_grad_dirty = m->pair_grad_dirty = 1;
    hf_losses_backward(m, w);
    bt_cross_backward_pairs(m);
    bt_towers_backward(m);
}
