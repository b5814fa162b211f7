/* attention_amx.h: bf16 block products on Intel AMX tiles (tdpbf16ps) for attention's
 * per-(batch, head) products on the native bf16 route (attention.c).
 *
 * A product is C (m x n fp32) = alpha A·B + beta C with bf16 operands already laid out the
 * way the tiles load them:
 *   A: "rows" layout, m rows of kp bf16 (row stride lda >= kp elements), kp a multiple of 32,
 *      the columns [k, kp) zero; rows up to round16(m) readable (their values only reach
 *      rows of C that are not stored).
 *   B: "VNNI" layout, kp/2 rows of 2 n16 bf16 (row stride ldb >= 2 n16, n16 = round16(n)):
 *      element (k, j) of B at b[(k/2) ldb + 2 j + k%2]; the rows k in [K, kp) zero.
 * C is written at c[i ldc + j] (c_trans 0) or c[j ldc + i] (c_trans 1: the caller wants
 * Cᵀ, e.g. dv = Pdᵀ dout computed as dvᵀ = doutᵀ Pd); beta 0 does not read C.
 * The pack functions below round fp32 operands to bf16 (bf16_from_f32_serial: the bytes
 * every other bf16 product of bt reads) into these layouts, zero padding included.
 *
 * Numerics: tdpbf16ps multiplies bf16 pairs exactly and accumulates in fp32 (round to
 * nearest even; denormal inputs and results flushed to zero), in a fixed order for given
 * sizes: results do not depend on the thread count.
 *
 * Deliberately not here: the softmax / dropout row passes and the choice of route (attention.c),
 * a general GEMM (gemm.h: oneDNN or OpenBLAS); operands other than bf16. */
#ifndef BT_ATTENTION_AMX_H
#define BT_ATTENTION_AMX_H

#include <stddef.h>

#include "dtype.h"

/* 1 when this CPU runs AMX-BF16 and Linux granted the tile data state (asked once per
 * process: arch_prctl ARCH_REQ_XCOMP_PERM); 0 otherwise, or in a build without AMX. */
int attention_amx_available(void);

/* round up to a multiple of 16 / 32 */
static inline size_t attention_amx_r16(size_t x) { return (x + 15) / 16 * 16; }
static inline size_t attention_amx_r32(size_t x) { return (x + 31) / 32 * 32; }

/* bf16 elements of the tmp of pack_rows_t and pack_vnni_t (they transpose 16 x 16 dwords) */
static inline size_t attention_amx_rows_t_tmp(size_t cols, size_t kp) {
    return 2 * attention_amx_r16(kp / 2) * attention_amx_r16(cols) + 2 * attention_amx_r16(cols);
}
static inline size_t attention_amx_vnni_t_tmp(size_t n, size_t kp) {
    return 2 * attention_amx_r16(n) * attention_amx_r16(kp / 2);
}

/* C = alpha A·B + beta C, beta 0 or 1, kp > 0 (layouts above). Loads its tile configuration on
 * entry and releases the tiles on return (the caller's thread may run oneDNN's own AMX
 * kernels in between). Requires attention_amx_available(). */
void attention_amx_gemm(float *c, size_t ldc, int c_trans, const bt_bf16 *a, size_t lda,
                        const bt_bf16 *b, size_t ldb, size_t m, size_t n, size_t kp,
                        float alpha, float beta);

/* A rows (rows x kp at stride lda) = bf16 of x (rows x k fp32 at stride ldx), columns
 * [k, kp) zero. */
void attention_amx_pack_rows(bt_bf16 *a, size_t lda, const float *x, size_t ldx, size_t rows,
                             size_t k, size_t kp);
/* A rows = xᵀ: a[j lda + i] = bf16(x[i ldx + j]) for x (k x cols fp32): cols rows of kp,
 * columns [k, kp) zero. tmp: attention_amx_rows_t_tmp(cols, kp) bf16. */
void attention_amx_pack_rows_t(bt_bf16 *a, size_t lda, const float *x, size_t ldx, size_t k,
                               size_t cols, size_t kp, bt_bf16 *tmp);
/* B VNNI (kp/2 rows at stride ldb) from x (k x n fp32 at stride ldx, row-major: B = x);
 * columns [n, n16) and rows [k, kp) zero. tmp: room for 2 n16 bf16. */
void attention_amx_pack_vnni(bt_bf16 *b, size_t ldb, const float *x, size_t ldx, size_t k,
                             size_t n, size_t kp, bt_bf16 *tmp);
/* One row of B VNNI from two bf16 rows: dst[2 j + t] = (t ? r1 : r0)[j] for j < n (r1 NULL:
 * zeros), then zeros up to 2 n16 (the row passes of attention.c call it per row pair). */
void attention_amx_interleave(bt_bf16 *dst, const bt_bf16 *r0, const bt_bf16 *r1, size_t n,
                              size_t n16);
/* The same from bf16 rows (x16: k x n at stride ldx), no rounding. */
void attention_amx_pack_vnni16(bt_bf16 *b, size_t ldb, const bt_bf16 *x16, size_t ldx,
                               size_t k, size_t n, size_t kp);
/* B VNNI = xᵀ for x (n x k fp32 at stride ldx): B(kk, j) = bf16(x[j ldx + kk]); columns
 * [n, n16) and rows [k, kp) zero. tmp: attention_amx_vnni_t_tmp(n, kp) bf16. */
void attention_amx_pack_vnni_t(bt_bf16 *b, size_t ldb, const float *x, size_t ldx, size_t n,
                               size_t k, size_t kp, bt_bf16 *tmp);

#endif
