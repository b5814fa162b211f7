/* ops_table.h: every dispatched kernel of ops.h declared ONCE, as an X-macro list. From it
 * are generated: the kernel table's entries (ops.c `ops_kernels`), the reference table
 * (X_ref for every entry, ops.c), the public wrappers that call through the table (ops.c),
 * and the float reference prototypes (ops_ref.h). The documented prototypes in ops.h are
 * checked against the generated wrappers by the compiler (ops.c includes both), so they
 * cannot drift.
 *
 * Adding a kernel: one OPS_KERNEL line here, its prototype with documentation in ops.h, the
 * reference body (ops_ref.inc or ops_ref.c), the fast version (ops.c, or attention.c for
 * attention; set in ops.c's OPS_FILL; a kernel without one keeps the reference), and its
 * tests (test_ops_fast.c against X_ref, test_ops_grad.c for a backward).
 *
 * X(ret, name, (parameters), (arguments)): ret is void, float or double (OPS_KEEP_<ret>,
 * OPS_GIVE_<ret>).
 *
 * Deliberately not here: the non-dispatched entry points (kernels_init, ISA and threading
 * selection, the serial bf16 conversions) and the f64 references (other types). */
#ifndef BT_OPS_TABLE_H
#define BT_OPS_TABLE_H

#define OPS_KERNELS(X)                                                                         \
    X(void, dropout_forward, (float *out, const float *x, size_t n, const bt_dropout *d),      \
      (out, x, n, d))                                                                          \
    X(void, dropout_backward,                                                                  \
      (float *dx, const float *dout, size_t n, const bt_dropout *d, bt_dx_mode mode),          \
      (dx, dout, n, d, mode))                                                                  \
    X(void, linear_forward,                                                                    \
      (float *out, const float *x, const bt_bf16 *x_bf16, const float *w,                      \
       const bt_bf16 *w_bf16, const void *w_packed, const float *b, size_t n, size_t c,        \
       size_t oc, gemm_compute compute),                                                       \
      (out, x, x_bf16, w, w_bf16, w_packed, b, n, c, oc, compute))                             \
    X(void, linear_backward,                                                                   \
      (float *dx, float *dw, float *db, const float *dout, const bt_bf16 *dout_bf16,           \
       const float *x, const bt_bf16 *x_bf16, const float *w, const bt_bf16 *w_bf16, size_t n, \
       size_t c, size_t oc, gemm_compute compute, bt_dx_mode mode),                            \
      (dx, dw, db, dout, dout_bf16, x, x_bf16, w, w_bf16, n, c, oc, compute, mode))            \
    X(void, layernorm_forward,                                                                 \
      (float *out, float *mean, float *rstd, const float *x, const float *w, const float *b,   \
       size_t n, size_t c, float eps),                                                         \
      (out, mean, rstd, x, w, b, n, c, eps))                                                   \
    X(void, layernorm_forward_bf16,                                                            \
      (bt_bf16 *out, float *mean, float *rstd, const float *x, const float *w, const float *b, \
       size_t n, size_t c, float eps),                                                         \
      (out, mean, rstd, x, w, b, n, c, eps))                                                   \
    X(void, layernorm_backward,                                                                \
      (float *dx, float *dw, float *db, const float *dout, const float *x, const float *w,     \
       const float *mean, const float *rstd, size_t n, size_t c, bt_dx_mode mode),             \
      (dx, dw, db, dout, x, w, mean, rstd, n, c, mode))                                        \
    X(void, layernorm_backward_residual,                                                       \
      (float *dx, float *dw, float *db, const float *dout, const float *res, const float *x,   \
       const float *w, const float *mean, const float *rstd, size_t n, size_t c,               \
       bt_dx_mode mode),                                                                       \
      (dx, dw, db, dout, res, x, w, mean, rstd, n, c, mode))                                   \
    X(void, layernorm_backward_dropout,                                                        \
      (float *dx, float *ddrop, float *dw, float *db, const float *dout, const float *x,       \
       const float *w, const float *mean, const float *rstd, size_t n, size_t c,               \
       const bt_dropout *drops, size_t block_rows),                                            \
      (dx, ddrop, dw, db, dout, x, w, mean, rstd, n, c, drops, block_rows))                    \
    X(void, gelu_forward, (float *out, const float *x, size_t n), (out, x, n))                 \
    X(void, gelu_backward,                                                                     \
      (float *dx, const float *dout, const float *x, size_t n, bt_dx_mode mode),               \
      (dx, dout, x, n, mode))                                                                  \
    X(void, gelu_forward_bf16, (bt_bf16 *out, const float *x, size_t n), (out, x, n))          \
    X(void, quick_gelu_forward, (float *out, const float *x, size_t n), (out, x, n))           \
    X(void, quick_gelu_forward_bf16, (bt_bf16 *out, const float *x, size_t n), (out, x, n))    \
    X(void, quick_gelu_backward,                                                               \
      (float *dx, const float *dout, const float *x, size_t n, bt_dx_mode mode),               \
      (dx, dout, x, n, mode))                                                                  \
    X(void, gelu_backward_bias,                                                                \
      (float *dx, bt_bf16 *dx16, float *dbias, const float *dout, const float *x, size_t n,    \
       size_t c, int quick),                                                                   \
      (dx, dx16, dbias, dout, x, n, c, quick))                                                 \
    X(void, tanh_forward, (float *out, const float *x, size_t n), (out, x, n))                 \
    X(void, tanh_backward, (float *dx, const float *dout, const float *y, size_t n),           \
      (dx, dout, y, n))                                                                        \
    X(void, softmax_forward, (float *out, const float *x, size_t n, size_t c), (out, x, n, c)) \
    X(void, softmax_backward,                                                                  \
      (float *dx, const float *dout, const float *y, size_t n, size_t c), (dx, dout, y, n, c)) \
    X(void, attention_forward,                                                                 \
      (float *out, float *probs, const float *q, const float *k, const float *v,               \
       const float *key_bias, const attention_dims *d, const bt_dropout *drop,                 \
       gemm_compute compute),                                                                  \
      (out, probs, q, k, v, key_bias, d, drop, compute))                                       \
    X(void, attention_backward,                                                                \
      (float *dq, float *dk, float *dv, const float *dout, const float *probs, const float *q, \
       const float *k, const float *v, const float *key_bias, const attention_dims *d,         \
       const bt_dropout *drop, gemm_compute compute, bt_dx_mode mode),                         \
      (dq, dk, dv, dout, probs, q, k, v, key_bias, d, drop, compute, mode))                    \
    X(void, attention_key_bias_from_mask, (float *key_bias, const int32_t *mask, size_t n),    \
      (key_bias, mask, n))                                                                     \
    X(void, embedding_forward,                                                                 \
      (float *out, const int32_t *ids, const float *table, size_t n, size_t c, size_t rows),   \
      (out, ids, table, n, c, rows))                                                           \
    X(void, embedding_backward,                                                                \
      (float *dtable, const float *dout, const int32_t *ids, size_t n, size_t c, size_t rows,  \
       int32_t padding_idx),                                                                   \
      (dtable, dout, ids, n, c, rows, padding_idx))                                            \
    X(void, bias_add_forward,                                                                  \
      (float *out, const float *x, const float *bias, size_t n, size_t c), (out, x, bias, n, c)) \
    X(void, bias_add_backward,                                                                 \
      (float *dx, float *dbias, const float *dout, size_t n, size_t c), (dx, dbias, dout, n, c)) \
    X(void, residual_forward, (float *out, const float *a, const float *b, size_t n),          \
      (out, a, b, n))                                                                          \
    X(void, residual_backward,                                                                 \
      (float *da, float *db, const float *dout, size_t n, bt_dx_mode mode),                    \
      (da, db, dout, n, mode))                                                                 \
    X(float, cross_entropy_forward,                                                            \
      (float *probs, const float *logits, const int32_t *targets, size_t n, size_t v,          \
       int32_t ignore_index, size_t *n_valid),                                                 \
      (probs, logits, targets, n, v, ignore_index, n_valid))                                   \
    X(void, cross_entropy_backward,                                                            \
      (float *dlogits, const float *probs, const int32_t *targets, size_t n, size_t v,         \
       int32_t ignore_index, float dloss),                                                     \
      (dlogits, probs, targets, n, v, ignore_index, dloss))                                    \
    X(void, l2_normalize_forward,                                                              \
      (float *out, float *norm, const float *x, size_t n, size_t c), (out, norm, x, n, c))     \
    X(void, l2_normalize_backward,                                                             \
      (float *dx, const float *dout, const float *out, const float *norm, size_t n, size_t c), \
      (dx, dout, out, norm, n, c))                                                             \
    X(void, bf16_from_f32, (bt_bf16 *out, const float *in, size_t n), (out, in, n))            \
    X(void, f32_from_bf16, (float *out, const bt_bf16 *in, size_t n), (out, in, n))            \
    X(double, sum_squares, (const float *x, size_t n), (x, n))                                 \
    X(void, zero_fill, (void *p, size_t bytes), (p, bytes))                                    \
    X(void, adamw_update,                                                                      \
      (float *p, float *m, float *v, bt_bf16 *shadow, const float *grad, size_t n,             \
       const adamw_coefs *k),                                                                  \
      (p, m, v, shadow, grad, n, k))                                                           \
    X(void, adamw_update_zero_grad,                                                            \
      (float *p, float *m, float *v, bt_bf16 *shadow, float *grad, size_t n,                   \
       const adamw_coefs *k),                                                                  \
      (p, m, v, shadow, grad, n, k))

/* A wrapper that does work after the call keeps the kernel's value (OPS_KEEP_<ret> before the
 * call) and returns it at the end (OPS_GIVE_<ret>); nothing for void kernels. */
#define OPS_KEEP_void
#define OPS_KEEP_float const float ret_ =
#define OPS_KEEP_double const double ret_ =
#define OPS_GIVE_void
#define OPS_GIVE_float return ret_;
#define OPS_GIVE_double return ret_;

/* The float reference prototypes: X_ref with the kernel's signature. */
#define OPS_REF_PROTOTYPE(ret, name, params, args) ret name##_ref params;

#endif
