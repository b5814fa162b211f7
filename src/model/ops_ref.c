/* ops_ref.c: instantiates the reference kernels of ops_ref.inc twice, as X_ref (float, the
 * signatures of ops.h) and X_ref_f64 (double, for the finite-difference tests), and adds
 * the scalar bf16 conversion references.
 *
 * Deliberately not here: the kernel bodies (ops_ref.inc, written once), dispatch and the
 * fast kernels (ops.c). */
#include "ops_ref.h"

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
}

#define REF_REAL float
#define REF_NAME(x) x##_ref
#define REF_HAS_BF16 1
#include "ops_ref.inc"
#undef REF_REAL
#undef REF_NAME
#undef REF_HAS_BF16

#define REF_REAL double
#define REF_NAME(x) x##_ref_f64
#define REF_HAS_BF16 0
#include "ops_ref.inc"
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
