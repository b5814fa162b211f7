/* optim.h: fused AdamW with decoupled weight decay and global grad-norm clipping, over the
 * flat arenas laid out by the parameter table (src/model/params.h): parameters, gradients,
 * first and second moments share one layout, so each pass is a few flat loops.
 *
 * Semantics are torch.optim.AdamW's (torch 1.13, single-tensor path), element by element:
 *     g  = grad * grad_scale                        (grad_scale = clip coefficient or 1)
 *     p *= 1 - lr * wd                              (wd = 0 for no-decay tensors)
 *     m  = beta1 * m + (1 - beta1) * g
 *     v  = beta2 * v + (1 - beta2) * g * g
 *     p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
 * with t the 1-based step count. Clipping is torch.nn.utils.clip_grad_norm_'s: the global L2
 * norm over all gradients, coefficient max_norm / (norm + 1e-6), applied only when < 1.
 * No-decay tensors come from the table (biases and LayerNorm parameters, the HF Trainer
 * rule); the pass also rewrites the bf16 shadow of the weights when one is given, so GEMMs in
 * bf16 mode read fresh weights without a separate cast pass.
 *
 * Determinism: the grad norm sums fixed-size chunks in double and adds the chunk sums in
 * order, so it does not depend on the thread count; the update is elementwise.
 *
 * Deliberately not here: learning-rate schedules, per-parameter-group learning rates,
 * gradient all-reduce (src/dist), loss scaling (bf16 needs none), optimizer-state files. */
#ifndef BT_OPTIM_H
#define BT_OPTIM_H

#include <stddef.h>
#include <stdint.h>

#include "dtype.h"
#include "params.h"

/* Doubles, like the Python floats torch receives: scalars such as 1 - beta2 are formed in
 * double and rounded to fp32 once (1.0f - 0.999f would differ from torch by 1e-5). */
typedef struct bt_adamw_hparams {
    double lr;
    double beta1, beta2;
    double eps;
    double weight_decay; /* applied to tensors whose table decay flag is 1 */
} bt_adamw_hparams;

/* A run of the arena with one decay flag (adjacent tensors with equal flags merged; the
 * alignment padding between tensors is 0 in every arena and stays 0). */
typedef struct bt_optim_segment {
    size_t offset, numel;
    int decay;
} bt_optim_segment;

typedef struct bt_adamw {
    size_t numel;            /* arena length (table numel) */
    float *m, *v;            /* (numel) first and second moments, same layout as params */
    uint64_t t;              /* steps taken */
    bt_optim_segment *segs;
    size_t n_segs;
} bt_adamw;

/* Zeroed moments for the table's layout. */
void bt_adamw_init(bt_adamw *o, const bt_param_table *table);
void bt_adamw_free(bt_adamw *o);

/* Global L2 norm of g (n), accumulated in double (deterministic for any thread count). */
double bt_grad_norm(const float *g, size_t n);
/* clip_grad_norm_'s coefficient: min(1, max_norm / (norm + 1e-6)); 1 when max_norm <= 0. */
float bt_clip_coef(double norm, float max_norm);

/* One AdamW step on params (numel) with gradients grads * grad_scale; shadow (numel) gets the
 * bf16 copy of the new weights when non-NULL. */
void bt_adamw_step(bt_adamw *o, float *params, const float *grads, float grad_scale,
                   const bt_adamw_hparams *h, bt_bf16 *shadow);

#endif
