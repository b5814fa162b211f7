/* cross.h: the bridges and the cross-modal stack (cross.c): the activations one cross layer
 * side and one bridge save, their slot layout in both phases and the forwards / backwards.
 * The layouts (cross_towers_layout, cross_pairs_layout, in cross.c beside the forwards and
 * backwards) state each slot's gradient kind (layout.h). */
#ifndef BT_CROSS_H
#define BT_CROSS_H

#include <stddef.h>

#include "model/layout.h"
#include "model/model.h"

/* The poolers' slots (pair arena, P pairs). */
struct bt_cross_acts {
    float *cls_t, *cls_i;   /* (P, H) CLS rows of X_{X-1}, Y_{X-1} */
    float *pool_t_pre, *pool_i_pre; /* (P, H) pooler dense outputs */
    float *pool_t, *pool_i; /* (P, H) tanh */
    float *pooler;          /* (P, 2H) [text | image] = pooler_output = m->pooler_out */
};

/* One cross-modal layer of one side (pair arena): rows N1 = P*T1 (this modality),
 * N2 = P*T2 (other). The query rows Nq = P*Tq are N1, or P when the layer runs only each
 * pair's CLS query (the last layer's image side, and its text side without an MLM head:
 * cross.c cross_query_rows); every (N1, ...) slot below but k and v then holds Nq rows. */
struct bt_cross_layer_acts {
    float *x_cls;           /* (P, H) each pair's CLS row of the layer input, when only those
                               rows are queried (cross.c cross_query_rows); else unused */
    float *q, *k, *v;       /* (N1, H) self-attention (q: (Nq, H), Nq = P * query rows) */
    float *probs;           /* (P, NHt, T1, T1) */
    float *ctx, *attn_lin, *res1;  /* (N1, H) */
    bt_bf16 *ctx_16;        /* (N1, H) bf16 storage: bf16(ctx), ctx the phase's staging */
    float *mean1, *rstd1;   /* (N1) */
    float *a;               /* (N1, H) LN1 output */
    float *cq;              /* (N1, H) cross-attention query (from a) */
    float *ck, *cv;         /* (N2, H) keys/values from the other modality's input */
    float *cprobs;          /* (P, NHt, T1, T2) */
    float *cctx, *cattn_lin, *res2; /* (N1, H); res2 no grad: d res2 is d a's first value */
    bt_bf16 *cctx_16;       /* (N1, H) bf16 storage: bf16(cctx), cctx the phase's staging */
    float *mean2, *rstd2;   /* (N1) */
    float *c;               /* (N1, H) LN2 output */
    float *f_pre, *f;       /* (N1, It) */
    bt_bf16 *f_16;          /* (N1, It) bf16 storage: GELU output (f NULL) */
    float *ffn_lin, *res3;  /* (N1, H); res3 no grad: d res3 is d c's first value */
    float *mean3, *rstd3;   /* (N1) */
    float *out;             /* (N1, H) X_k or Y_k */
};

/* Bridge k (docs/spec.md §3.6): inputs of cross layer k. The uni-modal halves (ut, lnp,
 * ui) are per tower row (tower arena); the rest per pair (pair arena), reading the ut / ui
 * rows of the pair's text and image row. */
struct bt_bridge_acts {
    float *ut;              /* (Bt*T, H) Tt(T_k) + tt0                          [tower] */
    float *lnp;             /* (Bi*Np, Hv) ln_post(I_k)                         [tower] */
    bt_bf16 *lnp_16;        /* (Bi*Np, Hv) bf16 storage: ln_post(I_k) (lnp NULL) [tower] */
    float *lnp_mean, *lnp_rstd; /* (Bi*Np)                                      [tower] */
    float *ui;              /* (Bi*Np, H) Ti(ln_post(I_k)) + tt1                [tower] */
    float *t_sum;           /* (P*T, H) link-tower mix (k >= 1; LN input)        [pair] */
    float *t_mean, *t_rstd; /* (P*T)                                              [pair] */
    float *xin;             /* (P*T, H) X'_k                                      [pair] */
    float *i_sum;           /* (P*Np, H) (k >= 1)                                 [pair] */
    float *i_mean, *i_rstd; /* (P*Np)                                             [pair] */
    float *yin;             /* (P*Np, H) Y'_k                                     [pair] */
};

/* Towers phase: the uni-modal halves of every bridge (ut per text row, ln_post and ui per
 * image row) for Bt texts of T tokens and Bi images. */
void cross_towers_layout(bt_acts *a, layout *L, const bt_model_config *c, size_t Bt, size_t T,
                         size_t Bi);
/* Pairs phase: the per-pair halves of the bridges, the cross layers (internals and outputs)
 * and the poolers for P pairs; stage: the phase's attention staging. */
void cross_pairs_layout(bt_acts *a, layout *L, const bt_model_config *c, size_t P, size_t T,
                        const attn_stage *stage);
void cross_towers_forward(bt_model *m);
void cross_towers_backward(bt_model *m);
void cross_pairs_forward(bt_model *m);
void cross_pairs_backward(bt_model *m);

#endif
