/* ops_ref.c: instantiates the reference kernels of ops_ref.inc twice, as X_ref (float, the
 * signatures of ops.h) and X_ref_f64 (double, for the finite-difference tests), and adds
 * the scalar bf16 conversion references.
 *
 * Deliberately not here: the kernel bodies (ops_ref.inc, written once), dispatch and the
 * fast kernels (ops.c). */
#include "kernels/ops_ref.h"

#include <float.h>
#include <math.h>
#include <string.h>

#include "status.h"

/* Constants of the activations and of F.normalize, as doubles (exact enough for both). */
#define REF_SQRT1_2 0.70710678118654752440        /* 1/√2 */
#define REF_INV_SQRT_2PI 0.39894228040143267794   /* 1/√(2π) */
#define REF_QUICK_GELU_A 1.702                     /* CLIP's quick_gelu: x·sigmoid(1.702x) */
#define REF_L2_EPS 1e-12                           /* torch.nn.functional.normalize */

/* A GEMM operand as a bf16 GEMM sees it (gemm.h: round to nearest even) or unchanged. */
static inline double ref_operand(double v, int bf16) {
    return bf16 ? (double)bt_f32_from_bf16(bt_bf16_from_f32((float)v)) : v;
}

static void ref_attention_check(const attention_dims *d) {
    BT_ASSERT(d != NULL);
    BT_ASSERT(d->B > 0 && d->Tq > 0 && d->Tk > 0 && d->NH > 0 && d->D > 0);
    const size_t c = d->NH * d->D;
    BT_ASSERT(d->ldq >= c && d->ldk >= c && d->ldv >= c && d->ldo >= c);
    BT_ASSERT(d->drop_tq == 0 || d->drop_tq >= d->Tq);
}

#define REF_REAL float
#define REF_NAME(x) x##_ref
#define REF_HAS_BF16 1
#include "kernels/ops_ref.inc"
#undef REF_REAL
#undef REF_NAME
#undef REF_HAS_BF16

#define REF_REAL double
#define REF_NAME(x) x##_ref_f64
#define REF_HAS_BF16 0
#include "kernels/ops_ref.inc"
#undef REF_REAL
#undef REF_NAME
#undef REF_HAS_BF16

void bf16_from_f32_ref(bt_bf16 *out, const float *in, size_t n) {
    BT_ASSERT(n == 0 || (out && in));
    for (size_t i = 0; i < n; i++) out[i] = bt_bf16_from_f32(in[i]);
}

void f32_from_bf16_ref(float *out, const bt_bf16 *in, size_t n) {
    BT_ASSERT(n == 0 || (out && in));
    for (size_t i = 0; i < n; i++) out[i] = bt_f32_from_bf16(in[i]);
}

/* The bf16-output forwards: by definition the bf16 rounding of the float reference's output,
 * one row (or element) at a time through a small float buffer. */
void layernorm_forward_bf16_ref(bt_bf16 *out, float *mean, float *rstd, const float *x,
                                const float *w, const float *b, size_t n, size_t c, float eps) {
    BT_ASSERT(out && mean && rstd && x && w && b && c > 0);
    float *row = bt_alloc(c * sizeof *row);
    for (size_t i = 0; i < n; i++) {
        layernorm_forward_ref(row, mean + i, rstd + i, x + i * c, w, b, 1, c, eps);
        bf16_from_f32_ref(out + i * c, row, c);
    }
    bt_free(row);
}

static void ref_pointwise_bf16(void (*f)(float *, const float *, size_t), bt_bf16 *out,
                               const float *x, size_t n) {
    BT_ASSERT(n == 0 || (out && x));
    for (size_t i = 0; i < n; i++) {
        float v;
        f(&v, x + i, 1);
        out[i] = bt_bf16_from_f32(v);
    }
}

void gelu_forward_bf16_ref(bt_bf16 *out, const float *x, size_t n) {
    ref_pointwise_bf16(gelu_forward_ref, out, x, n);
}

void quick_gelu_forward_bf16_ref(bt_bf16 *out, const float *x, size_t n) {
    ref_pointwise_bf16(quick_gelu_forward_ref, out, x, n);
}

void zero_fill_ref(void *p, size_t bytes) {
    BT_ASSERT(bytes == 0 || p);
    if (bytes) memset(p, 0, bytes);
}

double sum_squares_ref(const float *x, size_t n) {
    BT_ASSERT(n == 0 || x);
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    return s;
}

void adamw_update_ref(float *p, float *m, float *v, bt_bf16 *shadow, const float *grad, size_t n,
                      const adamw_coefs *k) {
    BT_ASSERT(n == 0 || (p && m && v && grad && k));
    for (size_t i = 0; i < n; i++) {
        const float gi = grad[i] * k->grad_scale;
        float pi = p[i] * k->decay;                                /* p.mul_(1 - lr*wd) */
        const float mi = m[i] * k->b1 + gi * k->ob1;               /* exp_avg.lerp_ */
        const float vi = v[i] * k->b2 + k->ob2 * gi * gi;          /* exp_avg_sq.addcmul_ */
        const float denom = sqrtf(vi) / k->bc2_sqrt + k->eps;      /* (sqrt(v)/sqrt(bc2)) + eps */
        pi = pi - k->step_size * (mi / denom);                     /* p.addcdiv_(m, denom) */
        m[i] = mi;
        v[i] = vi;
        p[i] = pi;
        if (shadow) shadow[i] = bt_bf16_from_f32(pi);
    }
}

void adamw_update_zero_grad_ref(float *p, float *m, float *v, bt_bf16 *shadow, float *grad,
                                size_t n, const adamw_coefs *k) {
    adamw_update_ref(p, m, v, shadow, grad, n, k);
    if (n) memset(grad, 0, n * sizeof *grad); /* optimizer.zero_grad(set_to_none=False) */
}
