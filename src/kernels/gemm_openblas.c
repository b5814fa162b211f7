/* gemm_openblas.c: the OpenBLAS backend: one product through cblas_sgemm.
 *
 * fp32 operands with GEMM_COMPUTE_F32 go straight to sgemm. Otherwise each operand that is
 * not already plain fp32 at the requested precision is copied into a per-thread scratch
 * buffer (gemm_thread_scratch) as fp32: bf16 operands are widened exactly, fp32 operands
 * under GEMM_COMPUTE_BF16 are rounded to bf16 (bt_bf16_from_f32, nearest even) and widened
 * back, so sgemm then computes exactly the bf16-operand product with fp32 accumulation.
 * sgemm applies alpha and beta (OpenBLAS does not read C when beta == 0: it zeroes C first,
 * see tests/test_gemm.c's NaN-sentinel case); the bias is added afterwards, row by row.
 *
 * Threads: OpenBLAS (Debian's pthreads build) runs its own thread pool and is safe to call
 * concurrently; the scratch buffers are per calling thread.
 *
 * Deliberately not here: batching (gemm.c loops), native bf16 math (OpenBLAS 0.3.21's
 * sbgemm is not used: bf16 speed is oneDNN's job). */
#include <cblas.h>

#include "bt_config.h"
#include "kernels/gemm_backend.h"

#if BT_HAVE_OPENMP
#include <omp.h>
#endif

/* Copies the stored operand (rows, cols) with row stride ld into dst (rows, cols) dense
 * fp32, widening bf16 or rounding fp32 to bf16 as the compute precision requires. */
static void gemm_openblas_pack(float *dst, const void *src, bt_dtype t, size_t rows, size_t cols,
                               size_t ld, gemm_compute compute) {
    long long nrows = (long long)rows;
    /* Parallel only when it pays and we are not already inside a parallel region (then
     * the caller's threads are the parallelism). */
    int par = rows * cols >= (1u << 16);
#if BT_HAVE_OPENMP
    par = par && !omp_in_parallel();
#pragma omp parallel for schedule(static) if (par)
#endif
    for (long long i = 0; i < nrows; i++) {
        float *d = dst + (size_t)i * cols;
        if (t == BT_DTYPE_BF16) {
            const bt_bf16 *s = (const bt_bf16 *)src + (size_t)i * ld;
            for (size_t j = 0; j < cols; j++) d[j] = bt_f32_from_bf16(s[j]);
        } else {
            const float *s = (const float *)src + (size_t)i * ld;
            if (compute == GEMM_COMPUTE_BF16) {
                for (size_t j = 0; j < cols; j++) d[j] = bt_f32_from_bf16(bt_bf16_from_f32(s[j]));
            } else {
                for (size_t j = 0; j < cols; j++) d[j] = s[j];
            }
        }
    }
    (void)par;
}

void gemm_openblas_run(const gemm_args *g) {
    BT_ASSERT(g->batch <= 1 && g->m > 0 && g->n > 0 && g->k > 0);
    size_t a_rows = g->trans_a ? g->k : g->m, a_cols = g->trans_a ? g->m : g->k; // stored A
    size_t b_rows = g->trans_b ? g->n : g->k, b_cols = g->trans_b ? g->k : g->n; // stored B
    const float *a = g->a;
    size_t lda = g->lda;
    if (g->a_type != BT_DTYPE_F32 || g->compute == GEMM_COMPUTE_BF16) {
        float *s = gemm_thread_scratch(GEMM_SCRATCH_A, a_rows * a_cols * sizeof(float));
        gemm_openblas_pack(s, g->a, g->a_type, a_rows, a_cols, g->lda, g->compute);
        a = s;
        lda = a_cols;
    }
    const float *b = g->b;
    size_t ldb = g->ldb;
    if (g->b_type != BT_DTYPE_F32 || g->compute == GEMM_COMPUTE_BF16) {
        float *s = gemm_thread_scratch(GEMM_SCRATCH_B, b_rows * b_cols * sizeof(float));
        gemm_openblas_pack(s, g->b, g->b_type, b_rows, b_cols, g->ldb, g->compute);
        b = s;
        ldb = b_cols;
    }
    /* blasint is 32-bit in Debian's build; every dimension must fit */
    BT_ASSERT(g->m <= 0x7fffffff && g->n <= 0x7fffffff && g->k <= 0x7fffffff &&
              lda <= 0x7fffffff && ldb <= 0x7fffffff && g->ldc <= 0x7fffffff);
    cblas_sgemm(CblasRowMajor, g->trans_a ? CblasTrans : CblasNoTrans,
                g->trans_b ? CblasTrans : CblasNoTrans, (blasint)g->m, (blasint)g->n,
                (blasint)g->k, g->alpha, a, (blasint)(lda ? lda : 1), b,
                (blasint)(ldb ? ldb : 1), g->beta, g->c, (blasint)g->ldc);
    if (g->bias) {
        for (size_t i = 0; i < g->m; i++) {
            float *c = g->c + i * g->ldc;
            for (size_t j = 0; j < g->n; j++) c[j] += g->bias[j];
        }
    }
}

const char *gemm_openblas_core(void) { return openblas_get_corename(); }
