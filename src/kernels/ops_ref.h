/* ops_ref.h: the plain reference kernels behind ops.h, in two precisions.
 *
 *   X_ref      float, the same signature as the public X in ops.h. It is what the dispatch
 *              table starts with (BT_KERNELS=ref keeps it) and the oracle that
 *              tests/test_ops_fast.c pits every fast kernel against.
 *   X_ref_f64  double everywhere (inputs, outputs, saved statistics), for the central
 *              finite-difference checks of every backward (tests/test_ops_grad.c). The f64
 *              linear and attention kernels have no bf16 arguments (no x_bf16 / w_bf16, no
 *              compute).
 *
 * Both are generated from ONE body per kernel in ops_ref.inc (included twice by ops_ref.c
 * with a different real type and name suffix), so the f64 kernel the gradient tests check is
 * the same code as the float oracle. Every kernel is a simple single-threaded loop that
 * accumulates in double and, in the float version, rounds once when it stores.
 *
 * Conventions are those of ops.h (outputs first, forward assigns, backward accumulates, NULL
 * gradient pointers are skipped), with two precisions of meaning for `compute`:
 *   - linear_*_ref honors GEMM_COMPUTE_BF16 exactly as gemm.h defines it: each GEMM operand
 *     is rounded to bf16 (w_bf16 / x_bf16 are used for w / x when given), products are
 *     summed in double.
 *     So a fast bf16 linear differs from it only by summation order.
 *   - attention_*_ref ignores `compute`: it is the exact-math oracle. ops.h only PERMITS the
 *     attention block GEMMs to run in bf16, so the fast bf16 attention is compared against
 *     it with a bf16 tolerance.
 *
 * Deliberately not here: speed (no threads, no vector code), dispatch (ops.c), f64 versions
 * of the bf16 conversions (they are exact bit operations; the float reference is scalar). */
#ifndef BT_OPS_REF_H
#define BT_OPS_REF_H

#include "kernels/ops.h"
#include "kernels/ops_table.h"

/* --- float references (same signatures as ops.h) ---------------------------------------
 * X_ref for every kernel of ops_table.h, declared from that list. Besides the ops_ref.inc
 * bodies: bf16_from_f32_ref / f32_from_bf16_ref are scalar loops over bt_bf16_from_f32 /
 * bt_f32_from_bf16 (dtype.h); layernorm_forward_bf16_ref, gelu_forward_bf16_ref and
 * quick_gelu_forward_bf16_ref round the float reference's output (bf16 outputs have no f64
 * twin: their backwards are the fp32 kernels'); sum_squares_ref is one sequential double sum; zero_fill_ref
 * is memset;
 * adamw_update_ref is the AdamW element loop in torch's fp32 order (float only: the
 * optimizer has no gradient to check, its oracle is PyTorch's AdamW in optim_parity /
 * step_parity); adamw_update_zero_grad_ref is that loop, then memset of the gradient. All in
 * ops_ref.c. */
OPS_KERNELS(OPS_REF_PROTOTYPE)

/* --- double references (finite-difference oracles) -------------------------------------- */

void dropout_forward_ref_f64(double *out, const double *x, size_t n, const bt_dropout *d);
void dropout_backward_ref_f64(double *dx, const double *dout, size_t n, const bt_dropout *d,
                              bt_dx_mode mode);

void linear_forward_ref_f64(double *out, const double *x, const double *w, const double *b,
                            size_t n, size_t c, size_t oc);
void linear_backward_ref_f64(double *dx, double *dw, double *db, const double *dout,
                             const double *x, const double *w, size_t n, size_t c, size_t oc,
                             bt_dx_mode mode);

void layernorm_forward_ref_f64(double *out, double *mean, double *rstd, const double *x,
                               const double *w, const double *b, size_t n, size_t c,
                               double eps);
void layernorm_backward_ref_f64(double *dx, double *dw, double *db, const double *dout,
                                const double *x, const double *w, const double *mean,
                                const double *rstd, size_t n, size_t c, bt_dx_mode mode);
void layernorm_backward_residual_ref_f64(double *dx, double *dw, double *db,
                                         const double *dout, const double *res,
                                         const double *x, const double *w, const double *mean,
                                         const double *rstd, size_t n, size_t c,
                                         bt_dx_mode mode);
void layernorm_backward_dropout_ref_f64(double *dx, double *ddrop, double *dw, double *db,
                                        const double *dout, const double *x, const double *w,
                                        const double *mean, const double *rstd, size_t n,
                                        size_t c, const bt_dropout *drops, size_t block_rows);

void gelu_forward_ref_f64(double *out, const double *x, size_t n);
void gelu_backward_ref_f64(double *dx, const double *dout, const double *x, size_t n,
                           bt_dx_mode mode);
void quick_gelu_forward_ref_f64(double *out, const double *x, size_t n);
void quick_gelu_backward_ref_f64(double *dx, const double *dout, const double *x, size_t n,
                                 bt_dx_mode mode);
void gelu_backward_bias_ref_f64(double *dx, bt_bf16 *dx16, double *dbias, const double *dout,
                                const double *x, size_t n, size_t c, int quick);
void tanh_forward_ref_f64(double *out, const double *x, size_t n);
void tanh_backward_ref_f64(double *dx, const double *dout, const double *y, size_t n);

void softmax_forward_ref_f64(double *out, const double *x, size_t n, size_t c);
void softmax_backward_ref_f64(double *dx, const double *dout, const double *y, size_t n,
                              size_t c);

void attention_forward_ref_f64(double *out, double *probs, const double *q, const double *k,
                               const double *v, const double *key_bias,
                               const attention_dims *d, const bt_dropout *drop);
void attention_backward_ref_f64(double *dq, double *dk, double *dv, const double *dout,
                                const double *probs, const double *q, const double *k,
                                const double *v, const double *key_bias,
                                const attention_dims *d, const bt_dropout *drop,
                                bt_dx_mode mode);
void attention_key_bias_from_mask_ref_f64(double *key_bias, const int32_t *mask, size_t n);

void embedding_forward_ref_f64(double *out, const int32_t *ids, const double *table, size_t n,
                               size_t c, size_t rows);
void embedding_backward_ref_f64(double *dtable, const double *dout, const int32_t *ids,
                                size_t n, size_t c, size_t rows, int32_t padding_idx);

void bias_add_forward_ref_f64(double *out, const double *x, const double *bias, size_t n,
                              size_t c);
void bias_add_backward_ref_f64(double *dx, double *dbias, const double *dout, size_t n,
                               size_t c);
void residual_forward_ref_f64(double *out, const double *a, const double *b, size_t n);
void residual_backward_ref_f64(double *da, double *db, const double *dout, size_t n,
                               bt_dx_mode mode);

double cross_entropy_forward_ref_f64(double *probs, const double *logits,
                                     const int32_t *targets, size_t n, size_t v,
                                     int32_t ignore_index, size_t *n_valid);
void cross_entropy_backward_ref_f64(double *dlogits, const double *probs,
                                    const int32_t *targets, size_t n, size_t v,
                                    int32_t ignore_index, double dloss);

void l2_normalize_forward_ref_f64(double *out, double *norm, const double *x, size_t n,
                                  size_t c);
void l2_normalize_backward_ref_f64(double *dx, const double *dout, const double *out,
                                   const double *norm, size_t n, size_t c);

#endif
