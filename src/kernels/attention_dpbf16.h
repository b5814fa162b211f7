/* attention_dpbf16.h: attention's per-(batch, head) bf16 block products with AVX512-BF16
 * (vdpbf16ps), for CPUs with native bf16 and no AMX (attention.c).
 *
 * A product is C (m x n fp32, plain, row stride ldc) = alpha A·B + beta C, beta 0 or 1, with
 * bf16 operands in the layouts of the AMX products' pack functions (attention_amx.h):
 *   A: read as dwords, each a pair of K (elements 2kk and 2kk + 1 of a row of A, the first in
 *      the low half): dword (i, kk) at ((const uint32_t *)a.p)[i a.row + kk a.pair]. A rows
 *      (m rows of K at row stride lda, K padded to even with zero) are a.row = lda / 2,
 *      a.pair = 1; the VNNI layout of Aᵀ (as attention_amx_pack_vnni makes of Aᵀ, row stride
 *      ldt) is a.row = 1, a.pair = ldt / 2.
 *   B: "VNNI" layout, rows of 2 n16 bf16 (row stride ldb >= 2 n16, n16 = round16(n)):
 *      element (kk, j) of B at b[(kk/2) ldb + 2 j + kk%2]; K padded to even with zero.
 * beta 0 does not read C. Only the first ceil(k/2) pairs of K are read, so the operands may be
 * padded further (the AMX layouts pad K to 32).
 * Numerics: vdpbf16ps multiplies bf16 pairs exactly and adds them to an fp32 accumulator
 * (round to nearest even, denormals flushed), one accumulator per element summing the pairs
 * of K in order, then alpha times it, plus C: oneDNN 2.6's avx512_core_bf16 kernels give the
 * same bits on the same operands. Results do not depend on the thread count.
 *
 * Deliberately not here: the layouts' packing (attention_amx.h), the row passes and the choice
 * of products (attention.c). */
#ifndef BT_ATTENTION_DPBF16_H
#define BT_ATTENTION_DPBF16_H

#include <stddef.h>

#include "dtype.h"

/* 1 when this CPU runs AVX512-BF16 (and this build has the kernels); 0 otherwise. */
int attention_dpbf16_available(void);

/* How A is read: its data and the dword strides of a row and of a pair of K (above). */
typedef struct attention_dpbf16_a {
    const bt_bf16 *p;
    size_t row, pair;
} attention_dpbf16_a;

/* C = alpha A·B + beta C (layouts above). Requires attention_dpbf16_available(). */
void attention_dpbf16_gemm(float *c, size_t ldc, attention_dpbf16_a a, const bt_bf16 *b,
                           size_t ldb, size_t m, size_t n, size_t k, float alpha, float beta);

#endif
