/* optim.h: fused AdamW with decoupled weight decay, per-segment learning-rate multipliers and
 * frozen segments, and the global grad norm / clip coefficient, over the flat arenas laid
 * out by the parameter table (src/model/params.h): parameters and gradients share one
 * layout, so each pass is a few flat loops over segments.
 *
 * Semantics are torch.optim.AdamW's (torch 1.13, single-tensor path) with one parameter
 * group per (lr multiplier, decay) pair, element by element:
 *     lr_g = lr · mult                              (mult of the tensor's group, see below)
 *     g  = grad * grad_scale                        (grad_scale = clip coefficient or 1)
 *     p *= 1 - lr_g * wd                            (wd = 0 for no-decay tensors)
 *     m  = beta1 * m + (1 - beta1) * g
 *     v  = beta2 * v + (1 - beta2) * g * g
 *     p -= lr_g / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
 * with t the 1-based count of steps taken. Clipping is torch.nn.utils.clip_grad_norm_'s: the
 * global L2 norm over the gradients of the trained (not frozen) parameters, coefficient
 * max_norm / (norm + 1e-6), applied only when < 1.
 *
 * Groups (the original BridgeTower / METER recipe, docs/spec.md §4.5): a head tensor
 * (itm_score, mlm_score, itc_*_head, logit_scale) gets lr_mult_heads; any other tensor whose
 * HF key contains "cross_modal" (transforms, first-layer and link-tower LayerNorms, cross
 * layers, poolers) gets lr_mult_cross; everything else 1 (the towers, and the top-level
 * token_type_embeddings, whose key does not contain "cross_modal", as in the original code).
 * Frozen: every tensor under text_model. (freeze_text) or vision_model. (freeze_vision) is
 * neither updated nor decayed, has no moments (m and v are compact over the trained
 * segments) and is left out of the grad norm, as torch does for requires_grad=False.
 * No-decay tensors come from the table (biases and LayerNorm parameters, the HF Trainer
 * rule). The pass also rewrites the bf16 shadow of the updated weights when one is given.
 *
 * Determinism: the grad norm sums fixed-size chunks of each trained segment in double and
 * adds the chunk sums in order, so it does not depend on the thread count; the update is
 * elementwise.
 *
 * Deliberately not here: learning-rate schedules (schedule.h), gradient all-reduce
 * (src/dist), loss scaling (bf16 needs none), optimizer-state files (the checkpoint module
 * reads m / v through bt_adamw_moments). */
#ifndef BT_OPTIM_H
#define BT_OPTIM_H

#include <stddef.h>
#include <stdint.h>

#include "dtype.h"
#include "model/params.h"
#include "status.h"

/* Doubles, like the Python floats torch receives: scalars such as 1 - beta2 are formed in
 * double and rounded to fp32 once (1.0f - 0.999f would differ from torch by 1e-5). */
typedef struct bt_adamw_hparams {
    double lr;            /* scheduled base lr; each segment uses lr · its multiplier */
    double beta1, beta2;
    double eps;
    double weight_decay; /* applied to tensors whose table decay flag is 1 */
} bt_adamw_hparams;

/* Parameter groups: multipliers and frozen towers (all-default = one plain group). */
typedef struct bt_optim_groups {
    double lr_mult_cross; /* keys containing "cross_modal" (not heads); 1 = none */
    double lr_mult_heads; /* head tensors; 1 = none */
    int freeze_text;      /* text_model.* */
    int freeze_vision;    /* vision_model.* */
} bt_optim_groups;

/* { 1, 1, 0, 0 } */
bt_optim_groups bt_optim_groups_default(void);

/* A run of the arena with one (decay, multiplier, frozen) triple (adjacent tensors merged;
 * the alignment padding between tensors is 0 in every arena and stays 0). */
typedef struct bt_optim_segment {
    size_t offset, numel; /* in the parameter arena */
    size_t moff;          /* offset of its moments in m / v (trained segments only) */
    int decay;
    int frozen;
    double lr_mult;
} bt_optim_segment;

typedef struct bt_adamw {
    size_t numel;            /* parameter arena length (table numel) */
    int sharded;             /* 1: bt_adamw_init_shard (segs cover part of the arena only) */
    bt_optim_segment *fsegs; /* (n_fsegs) sharded: the full layout's segments (which
                                elements are trained at all) */
    size_t n_fsegs;
    size_t mnumel;           /* moment arena length: Σ numel of the trained segments */
    float *m, *v;            /* (mnumel) first and second moments, compact */
    uint64_t t;              /* steps taken */
    bt_optim_segment *segs;
    size_t n_segs;
    size_t *chunk_off, *chunk_len; /* grad-norm chunks over the trained segments */
    size_t n_chunks;
    double *chunk_sum;
} bt_adamw;

/* Zeroed moments for the table's layout, one group (no multipliers, nothing frozen). */
void bt_adamw_init(bt_adamw *o, const bt_param_table *table);
/* The same with parameter groups. */
void bt_adamw_init_groups(bt_adamw *o, const bt_param_table *table, const bt_optim_groups *g);
/* ZeRO-1 shard (docs/distributed.md): the optimizer of the trained parameters inside the
 * arena ranges [lohi[2i], lohi[2i+1]) only (sorted, disjoint; bt_dist_shard_ranges): its
 * segments are those ranges cut at the group segments' edges, moments (and memory) for
 * those elements only; bt_adamw_step, bt_adamw_grad_sumsq and bt_adamw_moments then work on
 * the shard alone, element by element as the full optimizer does. */
void bt_adamw_init_shard(bt_adamw *o, const bt_param_table *table, const bt_optim_groups *g,
                         const size_t *lohi, size_t n_ranges);
/* Moments the full (unsharded) optimizer of (table, g) holds: the trained elements. */
size_t bt_adamw_trained_numel(const bt_param_table *table, const bt_optim_groups *g);
/* 1 when the parameter at arena offset `offset` is trained (not frozen) in o's groups,
 * whether or not o is a shard that holds its moments. */
int bt_adamw_trained_at(const bt_adamw *o, size_t offset);
/* Copies a shard's moments and t into the full optimizer of the same arena. Errors:
 * BT_ERR_SHAPE when a piece of the shard is not a run of trained elements of full (their
 * groups' frozen towers differ). */
bt_status bt_adamw_shard_to_full(const bt_adamw *shard, bt_adamw *full);
void bt_adamw_free(bt_adamw *o);

/* The group rules above for one tensor: its lr multiplier and whether it is frozen. */
double bt_optim_lr_mult(const bt_param_tensor *x, const bt_optim_groups *g);
int bt_optim_frozen(const bt_param_tensor *x, const bt_optim_groups *g);

/* Moments of the tensor at arena offset `offset` (a tensor start): *m, *v point into the
 * compact arenas; returns 0 (and NULLs) when the tensor is frozen (or, for a shard, not in
 * it). For checkpoint files. */
int bt_adamw_moments(const bt_adamw *o, size_t offset, float **m, float **v);

/* Global L2 norm of g (n), accumulated in double (deterministic for any thread count). */
double bt_grad_norm(const float *g, size_t n);
/* Global L2 norm over the trained segments of grads (the arena layout), deterministic. */
double bt_adamw_grad_norm(const bt_adamw *o, const float *grads);
/* Its square before the root (a shard's share of the global sum under ZeRO-1). */
double bt_adamw_grad_sumsq(const bt_adamw *o, const float *grads);
/* clip_grad_norm_'s coefficient: min(1, max_norm / (norm + 1e-6)); 1 when max_norm <= 0. */
float bt_clip_coef(double norm, float max_norm);

/* One AdamW step on params (numel) with gradients grads * grad_scale; frozen segments are not
 * touched; shadow (numel) gets the bf16 copy of the new weights when non-NULL. */
void bt_adamw_step(bt_adamw *o, float *params, const float *grads, float grad_scale,
                   const bt_adamw_hparams *h, bt_bf16 *shadow);
/* The same step (the same bytes in params, moments and shadow), and grads set to +0 over every
 * element the step updates (the trained segments; a shard's own pieces), in the same pass
 * (ops.h adamw_update_zero_grad). The rest of the arena (frozen segments, padding outside
 * the segments, the other ranks' pieces) keeps its values: bt_adamw_zero_untouched zeroes
 * exactly that, so the two together leave the arena as bt_zero_grad does. */
void bt_adamw_step_zero_grad(bt_adamw *o, float *params, float *grads, float grad_scale,
                             const bt_adamw_hparams *h, bt_bf16 *shadow);
/* grads (numel) = +0 outside the elements bt_adamw_step_zero_grad zeroes. */
void bt_adamw_zero_untouched(const bt_adamw *o, float *grads);

#endif
