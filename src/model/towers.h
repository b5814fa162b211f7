/* towers.h: internal glue shared by the tower files (vit.c, text.c, cross.c, heads.c) and
 * model.c: parameter views of one Linear / LayerNorm (master weight, bf16 shadow, gradient),
 * the compute mode, the Linear / LayerNorm / GELU calls on activations that may be stored in
 * bf16 (model.h "bf16 activation storage"), the post-LN output sublayer of the text and cross
 * layers (one forward / backward pair for both), dropout call sites, and the tower entry
 * points.
 *
 * Every tower is a forward/backward pair over the model's named activation slots; the
 * backward restates the forward lines it differentiates, accumulates into the parameter
 * gradients and writes each activation gradient as its slot's layout says (model.c
 * "activation layout", layout.h): BT_DX_SET for layout_slot_set slots (their only or first writer), BT_DX_ADD
 * for the streams that merge; a gradient equal to another one is read where that one lies
 * and has no slot (post_ln_backward, vit.c). Dropout is keyed per row (rows_dropout_*,
 * rows_attention_*), see model.h "Dropout keys".
 *
 * Deliberately not here: anything public (model.h). */
#ifndef BT_TOWERS_H
#define BT_TOWERS_H

#include <stddef.h>
#include <stdint.h>

#include "model/cross.h"
#include "model/heads.h"
#include "model/layout.h"
#include "model/model.h"
#include "kernels/ops.h"
#include "model/text.h"
#include "model/vit.h"

/* One Linear y = x·wᵀ + b as the ops see it. */
typedef struct bt_linear {
    const float *w;      /* (out, in) master weight */
    const bt_bf16 *w16;  /* (out, in) bf16 shadow (bf16 mode) or NULL */
    const void *w_packed; /* the weight packed for the forward's product (model.h
                             bt_model_pack_weights): the bf16 shadow (w16 is then NULL) or,
                             without a shadow, the fp32 master itself (w is then NULL); or
                             NULL */
    const float *b;      /* (out) or NULL */
    float *dw, *db;      /* gradients (NULL: not accumulated) */
    size_t in, out;
} bt_linear;

/* One LayerNorm. */
typedef struct bt_norm {
    const float *w, *b;  /* (c) */
    float *dw, *db;      /* (c) */
    size_t c;
    float eps;
} bt_norm;

/* View of repetition `layer` of a Linear (bias id BT_P_COUNT: no bias). */
bt_linear model_linear(const bt_model *m, bt_param_id w, bt_param_id b, int layer);
bt_norm model_norm(const bt_model *m, bt_param_id w, bt_param_id b, int layer, float eps);

/* bf16 mode computes in bf16 only where that is faster (gemm.h gemm_bf16_mode_compute). */
static inline gemm_compute model_compute(const bt_model *m) {
    return m->precision == BT_PRECISION_BF16 ? gemm_bf16_mode_compute() : GEMM_COMPUTE_F32;
}

/* out (n, L.out) = x (n, L.in) · wᵀ + b; x16: the input stored in bf16 instead (below) */
static inline void lin_forward_act(const bt_model *m, float *out, const float *x,
                                   const bt_bf16 *x16, const bt_linear *L, size_t n) {
    const gemm_compute compute = model_compute(m);
    BT_ASSERTF(!L->w_packed || (m->params_bf16 != NULL) == (compute == GEMM_COMPUTE_BF16),
               "a packed weight is read with the compute it was packed for");
    linear_forward(out, x16 ? NULL : x, x16, L->w, L->w16, L->w_packed, L->b, n, L->in, L->out,
                   compute);
}
static inline void lin_forward(const bt_model *m, float *out, const float *x,
                               const bt_linear *L, size_t n) {
    lin_forward_act(m, out, x, NULL, L, n);
}
/* dx += dout · w (= with BT_DX_SET);  dw += doutᵀ · x;  db += Σ dout */
static inline void lin_backward(const bt_model *m, float *dx, const float *dout, const float *x,
                                const bt_linear *L, size_t n, bt_dx_mode mode) {
    linear_backward(dx, L->dw, L->db, dout, NULL, x, NULL, L->w, L->w16, n, L->in, L->out,
                    model_compute(m), mode);
}
static inline void norm_forward(float *out, float *mean, float *rstd, const float *x,
                                const bt_norm *N, size_t n) {
    layernorm_forward(out, mean, rstd, x, N->w, N->b, n, N->c, N->eps);
}

/* Activations that only GEMMs read (model.h "bf16 activation storage"): the layout gives
 * each either an fp32 slot x or, bf16 storage on, a bf16 slot x16 (x then NULL, or for an
 * attention output the fp32 staging buffer attention writes). The helpers below take both
 * and use x16 when the layout made one. */
static inline void lin_backward_act(const bt_model *m, float *dx, const float *dout,
                                    const float *x, const bt_bf16 *x16, const bt_linear *L,
                                    size_t n, bt_dx_mode mode) {
    linear_backward(dx, L->dw, L->db, dout, NULL, x16 ? NULL : x, x16, L->w, L->w16, n, L->in,
                    L->out, model_compute(m), mode);
}
/* An MLP's activation and fc Linear backward, for f = act(pre), pre (n, L.out) = x·wᵀ + b:
 * dpre = dout act'(pre) (assigned), then lin_backward_act from it, with gelu_backward_bias
 * making in one pass dpre, fc's bias sums and, on the native bf16 route
 * (linear_backward_dout_bf16), dpre's bf16 rounding that both products read; there dpre's
 * fp32 slot is not written (nothing else reads it). quick: QuickGELU, else GELU. */
static inline void act_lin_backward(const bt_model *m, float *dx, float *dpre,
                                    const float *dout, const float *pre, int quick,
                                    const float *x, const bt_bf16 *x16, const bt_linear *L,
                                    size_t n, bt_dx_mode mode) {
    const gemm_compute cp = model_compute(m);
    bt_bf16 *d16 = NULL;
    if (dx && L->dw && linear_backward_dout_bf16(cp)) {
        d16 = gemm_caller_scratch(n * L->out * sizeof *d16); /* linear_backward's own buffer */
        dpre = NULL;
    }
    gelu_backward_bias(dpre, d16, L->db, dout, pre, n, L->out, quick);
    linear_backward(dx, L->dw, NULL, dpre, d16, x16 ? NULL : x, x16, L->w, L->w16, n, L->in,
                    L->out, cp, mode);
}
/* out or out16 (n, c) = LN(x) */
static inline void norm_forward_act(float *out, bt_bf16 *out16, float *mean, float *rstd,
                                    const float *x, const bt_norm *N, size_t n) {
    if (out16) layernorm_forward_bf16(out16, mean, rstd, x, N->w, N->b, n, N->c, N->eps);
    else layernorm_forward(out, mean, rstd, x, N->w, N->b, n, N->c, N->eps);
}
/* out or out16 (n) = GELU(x) / QuickGELU(x) */
static inline void gelu_forward_act(float *out, bt_bf16 *out16, const float *x, size_t n) {
    if (out16) gelu_forward_bf16(out16, x, n);
    else gelu_forward(out, x, n);
}
static inline void quick_gelu_forward_act(float *out, bt_bf16 *out16, const float *x, size_t n) {
    if (out16) quick_gelu_forward_bf16(out16, x, n);
    else quick_gelu_forward(out, x, n);
}
/* An attention output x (n, fp32 staging) saved as x16 = bf16(x) for its out-projection's
 * forward and backward (bf16 storage; no-op otherwise). */
static inline void act_keep_bf16(bt_bf16 *x16, const float *x, size_t n) {
    if (x16) bf16_from_f32(x16, x, n);
}
/* dx += LN backward (= with BT_DX_SET);  dw, db += ... */
static inline void norm_backward(float *dx, const float *dout, const float *x, const float *mean,
                                 const float *rstd, const bt_norm *N, size_t n,
                                 bt_dx_mode mode) {
    layernorm_backward(dx, N->dw, N->db, dout, x, N->w, mean, rstd, n, N->c, mode);
}

/* Dropout call sites: site = tower << 16 | layer << 4 | what. */
enum {
    BT_SITE_TEXT_EMB = 1,
    BT_SITE_TEXT_LAYER = 2,
    BT_SITE_CROSS_TEXT = 3,
    BT_SITE_CROSS_IMAGE = 4,
};
enum {
    BT_SITE_ATTN_PROBS = 0,
    BT_SITE_ATTN_OUT = 1,
    BT_SITE_CROSS_PROBS = 2,
    BT_SITE_CROSS_OUT = 3,
    BT_SITE_FFN_OUT = 4,
};
static inline uint32_t bt_site(uint32_t tower, uint32_t layer, uint32_t what) {
    return tower << 16 | layer << 4 | what;
}
/* {p, seed(run seed, step, site)} in training mode, {0, 0} (identity) otherwise. */
bt_dropout model_dropout(const bt_model *m, uint32_t site, float p);
/* The mask seed of one row at a site: seed(site seed, row key); identity stays identity. */
bt_dropout row_dropout(const bt_dropout *site, uint64_t key);

/* Row-keyed dropout (model.h "Dropout keys"): x holds `rows` blocks of n elements, block r
 * masked with row_dropout(site, keys[r]) (element index within the block).
 * out = dropout(x) (out may alias x);  dx += dropout(dout) (= with BT_DX_SET). */
void rows_dropout_forward(float *out, const float *x, size_t rows, size_t n,
                          const bt_dropout *site, const uint64_t *keys);
void rows_dropout_backward(float *dx, const float *dout, size_t rows, size_t n,
                           const bt_dropout *site, const uint64_t *keys, bt_dx_mode mode);
/* attention_forward / _backward (ops.h) whose probability dropout is keyed per batch item:
 * one call over all d->B items when the site is off, else one call per item b with
 * row_dropout(site, keys[b]) (mask index within the item's (NH, Tq, Tk) block). */
void rows_attention_forward(float *out, float *probs, const float *q, const float *k,
                            const float *v, const float *key_bias, const attention_dims *d,
                            const bt_dropout *site, const uint64_t *keys, gemm_compute compute);
void rows_attention_backward(float *dq, float *dk, float *dv, const float *dout,
                             const float *probs, const float *q, const float *k,
                             const float *v, const float *key_bias, const attention_dims *d,
                             const bt_dropout *site, const uint64_t *keys,
                             gemm_compute compute, bt_dx_mode mode);

/* Where an attention forward keeps P for the backward: the layer's probs slot, or NULL in
 * BT_ACTS_FORWARD_ONLY, where no backward reads it (ops.h attention_forward: the output is
 * the same bits), which saves writing B·NH·Tq·Tk floats per layer. */
static inline float *kept_probs(const bt_model *m, float *probs) {
    return m->act_mode == BT_ACTS_FORWARD_ONLY ? NULL : probs;
}

/* --- post-LN output sublayers ----------------------------------------------------------
 * The text layers and both sides of the cross layers close each attention block and the
 * FFN with the same sublayer (HF BertSelfOutput / BertOutput):
 *   out (n, c) = LN(res),  res = dropout(lin) + in,  lin = x·Wᵀ + b
 * with x the attention output (n, c) or, in the FFN, GELU(f_pre) (n, I) with
 * f_pre = in·W1ᵀ + b1. One forward/backward pair here serves every tower that has it; the
 * towers pass their own weights, slots and dropout site (the ViT's pre-LN blocks differ). */

/* One sublayer's slots in one arena: the activations, or their gradient twins (the same
 * struct from m->dacts: mean / rstd are NULL there, and res only where a slot exists). */
typedef struct post_ln_slots {
    float *x;            /* (n, in) projection input, fp32 (NULL with bf16 storage) */
    const bt_bf16 *x16;  /* (n, in) bf16 storage of x, or NULL */
    float *lin;          /* (n, c) x·Wᵀ + b, then dropout in place */
    float *res;          /* (n, c) dropout(lin) + in */
    float *mean, *rstd;  /* (n) LN statistics */
} post_ln_slots;

/* A layer's rows as its dropout sites key them: n = blocks · block_rows rows, block b (a
 * text or a pair) masked with row_dropout(site, keys[b]) (model.h "Dropout keys"). */
typedef struct keyed_rows {
    size_t blocks, block_rows;
    const uint64_t *keys;
} keyed_rows;

/* out (n, c) = LN(dropout(x·Wᵀ + b) + in), statistics and intermediates into a. */
static inline void post_ln_forward(const bt_model *m, float *out, const float *in,
                                   const post_ln_slots *a, const bt_linear *W,
                                   const bt_norm *N, const bt_dropout *site,
                                   const keyed_rows *r) {
    const size_t c = N->c, n = r->blocks * r->block_rows;
    lin_forward_act(m, a->lin, a->x, a->x16, W, n);
    rows_dropout_forward(a->lin, a->lin, r->blocks, r->block_rows * c, site, r->keys);
    residual_forward(a->res, a->lin, in, n * c);
    norm_forward(out, a->mean, a->rstd, a->res, N, n);
}

/* The backward of post_ln_forward from dout (n, c), complete:
 *   d res = LN'(dout)          into din itself when din is assigned (in_mode BT_DX_SET: a
 *                              layer internal, whose later writers add to it), else into
 *                              d->res, its own slot, and din += d res (the merging stream);
 *   d lin = dropout'(d res)    into d->lin when the site is active, written by LayerNorm's
 *                              backward in the same pass (layernorm_backward_dropout); with
 *                              the site off it is d res bit for bit, and W's backward reads
 *                              d res where it lies;
 *   d x = d lin·W (assigned), dW, db += ...
 * The same bits as LN'(SET) into d res, residual_backward(SET) copying it into din and
 * dropout_backward(SET) copying it into d lin: a SET writes 0 + v, so d res holds no -0 and
 * the copies (0 + d res) are d res itself. d->res may be NULL (no slot) when in_mode is
 * BT_DX_SET. */
static inline void post_ln_backward(const bt_model *m, float *din, bt_dx_mode in_mode,
                                    const float *dout, const post_ln_slots *a,
                                    const post_ln_slots *d, const bt_linear *W,
                                    const bt_norm *N, const bt_dropout *site,
                                    const keyed_rows *r) {
    const size_t c = N->c, n = r->blocks * r->block_rows;
    float *dres = in_mode == BT_DX_SET ? din : d->res;
    BT_ASSERT(dres); /* a merging din needs d res's own slot (model.c layout) */
    const float *dlin = dres;
    if (site->p > 0.0f) { /* d res and d lin in one pass (the rows' masks as rows_dropout_*) */
        bt_dropout *drops = bt_alloc(r->blocks * sizeof *drops);
        for (size_t b = 0; b < r->blocks; b++) drops[b] = row_dropout(site, r->keys[b]);
        layernorm_backward_dropout(dres, d->lin, N->dw, N->db, dout, a->res, N->w, a->mean,
                                   a->rstd, n, c, drops, r->block_rows);
        bt_free(drops);
        dlin = d->lin;
    } else {
        norm_backward(dres, dout, a->res, a->mean, a->rstd, N, n, BT_DX_SET);
    }
    if (in_mode != BT_DX_SET) residual_backward(din, NULL, dres, n * c, in_mode);
    lin_backward_act(m, d->x, dlin, a->x, a->x16, W, n, BT_DX_SET);
}

/* The FFN sublayer, x = GELU(f_pre), f_pre = in·W1ᵀ + b1 (a->x / d->x are GELU's output f):
 * post_ln_backward with din assigned, then fc1 and GELU's backward add into din (in is both
 * the residual and fc1's input). */
static inline void post_ln_ffn_backward(const bt_model *m, float *din, const float *dout,
                                        const float *in, const float *f_pre, float *df_pre,
                                        const post_ln_slots *a, const post_ln_slots *d,
                                        const bt_linear *fc1, const bt_linear *fc2,
                                        const bt_norm *N, const bt_dropout *site,
                                        const keyed_rows *r) {
    post_ln_backward(m, din, BT_DX_SET, dout, a, d, fc2, N, site, r);
    act_lin_backward(m, din, df_pre, d->x, f_pre, 0, in, NULL, fc1, r->blocks * r->block_rows,
                     BT_DX_ADD);
}

/* Gradient checkpointing (model.h "Memory modes"): in BT_ACTS_CHECKPOINT, zeroes the shared
 * accumulated gradient slots of `group` (BT_GROUP_*; its assigned slots need none) and
 * returns 1: the caller then recomputes the layer's forward into the shared scratch before
 * its backward. 0 in the other modes. */
int model_layer_recompute(bt_model *m, int group);

/* Copies row 0 of each of B sequences: out (B, C) = x[b*T + 0]; x (B*T, C). */
void cls_gather(float *out, const float *x, size_t B, size_t T, size_t C);
/* dx[b*T + 0] += dout[b] */
void cls_scatter_add(float *dx, const float *dout, size_t B, size_t T, size_t C);

/* Phase pieces. Forwards read the phase inputs (m->ids / m->mask / pixel values, m->pairs)
 * and write m->acts; backwards read m->acts and m->dacts (gradient of their outputs already
 * accumulated), write m->dacts (assigned slots: =, accumulated ones: +=; model.c "activation
 * layout") and accumulate into m->grads.
 *   towers: vit (Bi images), text (Bt texts), cross_towers (ut_k, lnp_k, ui_k per tower row),
 *           heads_towers (ITC text / image embeddings);
 *   pairs:  cross_pairs (link towers, cross layers, poolers on P pairs), heads_pairs (ITM
 *           logits, MLM logits of the flagged pairs, ITC cross embeddings);
 *   bt_forward only: hf_losses (the HF head losses from the phase outputs into the d_*
 *           slots, m->hf scratch).
 * Each is declared, with its block's activation struct and slot layout, in the block's header
 * (vit.h, text.h, cross.h, heads.h). */

#endif
