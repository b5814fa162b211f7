/* gemm_ref.c: the reference GEMM, the oracle every other backend is tested against.
 *
 * One product (gemm.c loops over the batch). Operands are widened to double (after rounding
 * to bf16 with bt_bf16_from_f32 when compute is BF16), so every product a*b is exact (24+24
 * or 8+8 significant bits fit a double's 53) and the dot product is summed in double; the
 * result alpha*sum + beta*C + bias is formed in double and rounded to fp32 once. That makes
 * it "the exact answer up to a double-rounding error" for the sizes tests use, which is what
 * the tolerance derivations in tests/test_gemm.c rely on.
 *
 * Deliberately not here: speed (no blocking, no threads), batching (gemm.c). */
#include <stddef.h>

#include "kernels/gemm_backend.h"

/* The value of one stored operand element under the product's compute precision. */
static double gemm_ref_load(const void *p, bt_dtype t, size_t idx, gemm_compute compute) {
    if (t == BT_DTYPE_BF16) return (double)bt_f32_from_bf16(((const bt_bf16 *)p)[idx]);
    float v = ((const float *)p)[idx];
    if (compute == GEMM_COMPUTE_BF16) v = bt_f32_from_bf16(bt_bf16_from_f32(v));
    return (double)v;
}

void gemm_ref_run(const gemm_args *g) {
    size_t m = g->m, n = g->n, k = g->k;
    /* op(A) as (m, k) and op(B)ᵀ as (n, k), both row-major doubles, so the inner loop reads
     * two contiguous rows. */
    double *a = bt_alloc(m * k * sizeof(double)); // (m, k)
    double *bt = bt_alloc(n * k * sizeof(double)); // (n, k)
    for (size_t i = 0; i < m; i++)
        for (size_t p = 0; p < k; p++)
            a[i * k + p] = gemm_ref_load(g->a, g->a_type, g->trans_a ? p * g->lda + i : i * g->lda + p,
                                         g->compute);
    for (size_t j = 0; j < n; j++)
        for (size_t p = 0; p < k; p++)
            bt[j * k + p] = gemm_ref_load(g->b, g->b_type, g->trans_b ? j * g->ldb + p : p * g->ldb + j,
                                          g->compute);
    for (size_t i = 0; i < m; i++) {
        for (size_t j = 0; j < n; j++) {
            double s = 0.0;
            for (size_t p = 0; p < k; p++) s += a[i * k + p] * bt[j * k + p];
            double r = (double)g->alpha * s;
            /* beta == 0: C is not read (it may hold NaN) */
            if (g->beta != 0.0f) r += (double)g->beta * (double)g->c[i * g->ldc + j];
            if (g->bias) r += (double)g->bias[j];
            g->c[i * g->ldc + j] = (float)r;
        }
    }
    bt_free(a);
    bt_free(bt);
}
