/* gemm.h: the one interface through which every matrix product in bt runs.
 *
 *   C[m x n] = alpha * op(A)[m x k] * op(B)[k x n] + beta * C  (+ bias[n] on every row)
 *
 * Row-major. op(X) = X or Xᵀ (trans_a / trans_b). Leading dimensions are in elements of the
 * stored (untransposed) row-major matrix: A is (m x k) with lda >= k, or, transposed, stored
 * (k x m) with lda >= m; likewise B. C is always fp32, ldc >= n.
 *
 * Batched/strided: `batch` products (0 counts as 1), item i using a + i*stride_a,
 * b + i*stride_b, c + i*stride_c (strides in elements; a stride of 0 broadcasts).
 *
 * Operand types: A and B are each F32 or BF16 (bt_bf16 raw bits). `compute` says what the
 * product rounds its operands to: GEMM_COMPUTE_F32 requires F32 operands and is exact fp32
 * math; GEMM_COMPUTE_BF16 rounds each operand to bf16 (round to nearest even; a no-op for
 * operands already BF16) and accumulates in fp32. Every backend implements exactly these
 * semantics; they differ only in summation order.
 *
 * Backends (chosen at run time): REF (plain loops, the oracle tests use), OPENBLAS (fp32
 * sgemm; bf16 compute rounds operands into scratch, then sgemm), ONEDNN (fp32 and bf16 matmul
 * primitives, cached per shape so the hot loop creates nothing). Where the CPU has no native
 * bf16 instructions oneDNN still runs bf16 (emulated, slower): the engine never refuses.
 *
 * Deliberately not here: fused activations (kernels in ops.h do that work), int8. */
#ifndef BT_GEMM_H
#define BT_GEMM_H

#include <stddef.h>

#include "dtype.h"
#include "status.h"

typedef enum {
    GEMM_BACKEND_REF,
    GEMM_BACKEND_OPENBLAS,
    GEMM_BACKEND_ONEDNN,
    GEMM_BACKEND_COUNT,
} gemm_backend;

typedef enum {
    GEMM_COMPUTE_F32,
    GEMM_COMPUTE_BF16,
} gemm_compute;

typedef struct gemm_args {
    int trans_a, trans_b;            /* 0 or 1 */
    size_t m, n, k;
    bt_dtype a_type, b_type;         /* BT_DTYPE_F32 or BT_DTYPE_BF16 */
    const void *a;                   /* (m, k) or, trans_a, (k, m); row stride lda */
    size_t lda;
    const void *b;                   /* (k, n) or, trans_b, (n, k); row stride ldb */
    size_t ldb;
    float *c;                        /* (m, n); row stride ldc */
    size_t ldc;
    float alpha, beta;               /* beta = 0 means C is not read (may hold garbage/NaN) */
    const float *bias;               /* (n) added to every row after alpha*AB + beta*C; or NULL */
    gemm_compute compute;
    size_t batch;                    /* 0 or 1: a single product */
    size_t stride_a, stride_b, stride_c;
} gemm_args;

/* Reads BT_GEMM (ref | openblas | onednn) if set, else picks the fastest available backend
 * (oneDNN when built, else OpenBLAS). Returns an error naming the value if BT_GEMM is not a
 * backend name or names one not built. Safe to call more than once. */
bt_status gemm_init_from_env(void);

/* Backend by name ("ref", "openblas", "onednn"); error naming the value otherwise. */
bt_status gemm_backend_from_name(const char *name, gemm_backend *out);
const char *gemm_backend_name(gemm_backend b);
int gemm_backend_available(gemm_backend b);
bt_status gemm_set_backend(gemm_backend b);
gemm_backend gemm_get_backend(void);

/* 1 if the CPU executes bf16 dot products natively (oneDNN's detected ISA is
 * avx512_core_bf16 or better), 0 otherwise. */
int gemm_cpu_has_bf16(void);
/* Text describing the CPU ISA oneDNN dispatches to (for benchmark and log headers). */
const char *gemm_cpu_isa_name(void);

/* Runs the product on the current backend / on a given backend. Shapes are checked by
 * BT_ASSERT (they are programming errors, not user input). */
void gemm(const gemm_args *g);
void gemm_with(gemm_backend backend, const gemm_args *g);

/* Releases cached oneDNN primitives and scratch (tests and tools call it before exit so
 * valgrind sees no leak). */
void gemm_release(void);

#endif
