/* attention_dpbf16.c: attention's bf16 block products with AVX512-BF16 (vdpbf16ps), on the
 * operand layouts of the AMX products (contract in attention_dpbf16.h).
 *
 * The unit is compiled with the build's baseline flags: the functions that execute AVX-512
 * instructions carry target attributes (DP_TARGET), and nothing here runs them before
 * attention_dpbf16_available() said yes, so the library still loads on any x86-64 CPU.
 *
 * Blocking: C is walked in blocks of up to 6 rows x 4 vectors of 16 columns: 24 accumulators;
 * per pair of K the block's B row segment (up to 4 loads) and one broadcast dword of A per
 * row. A is read as dwords (a bf16 pair of K) at any row and pair stride, which covers both
 * layouts the attention has: A rows, and the VNNI layout of Aᵀ (the row pass's Pd and dS,
 * whose pairs of query rows are the K of dv = Pdᵀ dout and dk = dSᵀ q: there the 6 rows of a
 * block are 6 neighbouring dwords of one cache line).
 * Each element of C is one accumulator: 0, then one vdpbf16ps per pair of K in order (the
 * instruction adds the odd product, then the even one, each rounded to fp32), then alpha times
 * that, plus C for beta 1. oneDNN 2.6's avx512_core_bf16 brgemm sums the same way, so this is
 * the gemm route's bits (tests/test_attention_tiles.c checks it on every layout the attention
 * uses); only the pairs up to k are summed, as oneDNN does: the zero padding of K past them
 * (the AMX layouts pad K to 32) is not read.
 *
 * Deliberately not here: the reference (the same products run by gemm(), which gives the same
 * bits, and tests/test_attention_tiles.c's double products), the operand layouts and their
 * packing (attention_amx.h, shared with the AMX products), the row passes and the choice of
 * products (attention.c). */
#include "kernels/attention_dpbf16.h"

#include <stdint.h>

#include "kernels/cpu.h"
#include "status.h"

/* gcc 11 and clang 14 are the first with these intrinsics and target names */
#if defined(__x86_64__) && ((defined(__clang__) && __clang_major__ >= 14) ||                  \
                            (defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11))
#define DP_BUILT 1
#include <immintrin.h>
#define DP_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
#define DP_INLINE __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"), always_inline)) \
static inline
#else
#define DP_BUILT 0
#endif

/* Unrolls a loop of constant trip count (MR, NV) whole, so that the block's accumulators stay
 * in registers. gcc does that for "GCC unroll N"; clang 14 reads that pragma as a count and
 * kept the accumulators in memory (91 stack references in dp_block_6_4 against gcc's 5), and
 * its own "loop unroll(full)" gives 5. */
#if defined(__clang__)
#define DP_UNROLL(n) _Pragma("clang loop unroll(full)")
#else
#define DP_PRAGMA(text) _Pragma(#text)
#define DP_UNROLL(n) DP_PRAGMA(GCC unroll n)
#endif

#if DP_BUILT

/* a bf16 pair of K read as one dword from bf16 storage: may alias it, 2-byte aligned */
typedef uint32_t dp_pair __attribute__((may_alias, aligned(2)));

int attention_dpbf16_available(void) {
    return bt_isa_supported(BT_ISA_AVX512_BF16);
}

/* mask of the first `left` of 16 lanes */
DP_INLINE __mmask16 dp_lanes(size_t left) {
    return left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1u);
}

/* alpha acc + beta c into c under mask mk (beta 0: c not read) */
DP_INLINE void dp_store(float *c, __mmask16 mk, __m512 acc, __m512 va, float beta) {
    __m512 v = _mm512_mul_ps(va, acc);
    if (beta != 0.0f) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mk, c));
    _mm512_mask_storeu_ps(c, mk, v);
}

/* Plain C, one block: rows i0 .. i0 + MR - 1 (all < m), vectors j0 .. j0 + 16 NV - 1 of the
 * columns (the last may be partial). MR and NV are constants at every call, so the loops
 * unroll and the accumulators stay in registers. */
DP_INLINE void dp_block(float *c, size_t ldc, const dp_pair *a, size_t a_row, size_t a_pair,
                        const bt_bf16 *b, size_t ldb, size_t n, size_t pairs, size_t i0,
                        size_t j0, float alpha, float beta, const int MR, const int NV) {
    __m512 acc[6][4];
DP_UNROLL(6)
    for (int r = 0; r < MR; r++)
DP_UNROLL(4)
        for (int v = 0; v < NV; v++) acc[r][v] = _mm512_setzero_ps();
    const dp_pair *ak = a + i0 * a_row;
    const bt_bf16 *bk = b + 2 * j0;
    for (size_t kk = 0; kk < pairs; kk++, ak += a_pair, bk += ldb) {
        __m512bh bv[4];
DP_UNROLL(4)
        for (int v = 0; v < NV; v++) bv[v] = (__m512bh)_mm512_loadu_si512(bk + 32 * v);
DP_UNROLL(6)
        for (int r = 0; r < MR; r++) {
            const __m512bh av = (__m512bh)_mm512_set1_epi32((int)ak[(size_t)r * a_row]);
DP_UNROLL(4)
            for (int v = 0; v < NV; v++) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], av, bv[v]);
        }
    }
    const __m512 va = _mm512_set1_ps(alpha);
DP_UNROLL(6)
    for (int r = 0; r < MR; r++)
DP_UNROLL(4)
        for (int v = 0; v < NV; v++) {
            const size_t j = j0 + 16 * (size_t)v;
            dp_store(c + (i0 + (size_t)r) * ldc + j, dp_lanes(n - j), acc[r][v], va, beta);
        }
}

/* the instantiations: dp_block_<MR>_<NV> */
#define DP_BLOCK(MR, NV)                                                                       \
    DP_TARGET static void dp_block_##MR##_##NV(                                                \
        float *c, size_t ldc, const dp_pair *a, size_t a_row, size_t a_pair, const bt_bf16 *b, \
        size_t ldb, size_t n, size_t pairs, size_t i0, size_t j0, float alpha, float beta) {   \
        dp_block(c, ldc, a, a_row, a_pair, b, ldb, n, pairs, i0, j0, alpha, beta, MR, NV);     \
    }
#define DP_BLOCKS(MR) DP_BLOCK(MR, 1) DP_BLOCK(MR, 2) DP_BLOCK(MR, 3) DP_BLOCK(MR, 4)
DP_BLOCKS(1)
DP_BLOCKS(2)
DP_BLOCKS(3)
DP_BLOCKS(4)
DP_BLOCKS(5)
DP_BLOCKS(6)
#undef DP_BLOCKS
#undef DP_BLOCK

typedef void (*dp_block_fn)(float *, size_t, const dp_pair *, size_t, size_t, const bt_bf16 *,
                            size_t, size_t, size_t, size_t, size_t, float, float);
#define DP_ROW(MR) {dp_block_##MR##_1, dp_block_##MR##_2, dp_block_##MR##_3, dp_block_##MR##_4}
static const dp_block_fn dp_blocks[6][4] = {DP_ROW(1), DP_ROW(2), DP_ROW(3),
                                            DP_ROW(4), DP_ROW(5), DP_ROW(6)};
#undef DP_ROW

DP_TARGET void attention_dpbf16_gemm(float *c, size_t ldc, attention_dpbf16_a a,
                                     const bt_bf16 *b, size_t ldb, size_t m, size_t n, size_t k,
                                     float alpha, float beta) {
    BT_ASSERT(ldb >= 2 * ((n + 15) / 16 * 16));
    BT_ASSERT(beta == 0.0f || beta == 1.0f);
    if (m == 0 || n == 0) return;
    const dp_pair *a32 = (const dp_pair *)(const void *)a.p;
    const size_t pairs = (k + 1) / 2, nv = (n + 15) / 16;
    for (size_t i0 = 0; i0 < m; i0 += 6) {
        const size_t mr = m - i0 < 6 ? m - i0 : 6;
        for (size_t v = 0; v < nv; v += 4) {
            const size_t w = nv - v < 4 ? nv - v : 4;
            dp_blocks[mr - 1][w - 1](c, ldc, a32, a.row, a.pair, b, ldb, n, pairs, i0, 16 * v,
                                     alpha, beta);
        }
    }
}

#else /* !DP_BUILT */

int attention_dpbf16_available(void) { return 0; }

void attention_dpbf16_gemm(float *c, size_t ldc, attention_dpbf16_a a, const bt_bf16 *b,
                           size_t ldb, size_t m, size_t n, size_t k, float alpha, float beta) {
    (void)c, (void)ldc, (void)a, (void)b, (void)ldb, (void)m, (void)n;
    (void)k, (void)alpha, (void)beta;
    BT_ASSERTF(0, "attention_dpbf16_gemm: this build has no AVX512-BF16 kernels");
}

#endif
