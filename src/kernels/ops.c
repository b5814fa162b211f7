/* ops.c: the kernel table behind ops.h and the fast fp32 kernels it dispatches to.
 *
 * Dispatch: a table of function pointers starts as the reference kernels (ops_ref.h) and the
 * fast versions below override its entries; BT_KERNELS=ref (or ops_use_reference(1)) keeps
 * the reference table.
 *
 * The fast kernels are plain C that gcc vectorizes without -ffast-math:
 *   - The fast kernels are compiled once per ISA level (cpu.h): this file is the library's
 *     unit (kernels at the x86-64 baseline, level "scalar", plus the dispatch), and on x86-64
 *     meson compiles it again with -march=x86-64-v3 / -v4 and OPS_VARIANT set (see "ISA
 *     variants" below). kernels_init() fills the table from the level bt_cpu_isa_active()
 *     names (the CPU's best, capped by BT_CPU_ISA), so the build needs no -march flag, runs
 *     anywhere, and every level can be tested on one machine.
 *   - ISO C (-std=c11) compiles with -ffp-contract=off and gcc never reassociates float sums
 *     on its own, so reductions (sum, dot, max) keep OPS_LANES partial results in GNU C
 *     vectors of the level's register width, folded by a fixed tree (ops_sum & co.). The summation order is therefore fixed
 *     by this source: every ISA level and every thread count gives the same bits
 *     (tests/test_determinism.c).
 *   - exp and erfc are evaluated by branch-free polynomials (ops_exp2part, ops_upper_tail) that
 *     vectorize; libm's scalar calls would not. Their accuracy is stated where they are.
 *     Their selects are bit blends (ops_sel), not float ternaries, which gcc compiles to
 *     branches that only AVX-512's masked operations if-convert.
 *   - OpenMP parallelizes over rows, fixed-size chunks or column chunks, never over a
 *     reduction whose grouping would depend on the thread count (column sums use fixed row
 *     blocks or column ownership). Small problems run on the calling thread (OPS_PAR_MIN).
 *
 * Attention runs per (batch, head) block: the block's scores q kᵀ/√D come from one gemm()
 * into a per-thread Tq x Tk tile that stays in cache (the probs slice itself is cold memory),
 * the rows get + key_bias, are softmaxed in place (dropout into a second tile), P is streamed
 * to the block's slice of probs, and a second gemm() forms the value product from the tile. On
 * the native bf16 route this file hands the products bf16 operands, each rounded once per
 * block (dout_h and dS each feed two products) to the bytes and dense layout gemm's own
 * packing would make, so the results are the same bits; P's bf16 copy is written by the row
 * pass (softmax, dropout) while the row is in L1.
 * The OpenMP loop runs over the B*NH blocks and each gemm() runs on its calling thread (see
 * ATTENTION THREADING below for the measurement behind it). Where oneDNN runs at its AMX
 * level, the native route's block products are attention_amx.c's tile kernels instead of
 * gemm() calls, and where it runs at avx512_core_bf16 attention_dpbf16.c's, on operands the
 * rounding and the row passes write in the tiles' layouts (same bits; BT_ATTENTION_PRODUCTS,
 * "the block products on AMX tiles" below).
 *
 * Deliberately not here: the reference kernels (ops_ref.inc), the GEMM itself (gemm*.c), the
 * hand-written block products (attention_amx.c, attention_dpbf16.c), any fast-math. */
#include "kernels/ops.h"

#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "kernels/attention_amx.h"
#include "kernels/attention_dpbf16.h"
#include "kernels/kernel_clock.h"
#include "kernels/ops_blocks.h"
#include "kernels/ops_ref.h"
#include "rng.h"
#include "settings.h"
#include "status.h"

/* --- dropout (the mask and its spans: ops_blocks.h) ----------------------------------------- */

#ifndef OPS_VARIANT
int dropout_keep(const bt_dropout *d, uint64_t i) {
    const ops_drop dr = ops_drop_make(d);
    return !dr.on || ops_keep(&dr, i);
}
#endif

/* dx[j] += dout[j] * m(base + j); add 0 (BT_DX_SET): dx[j] = 0 + dout[j] * m(base + j).
 * The sum in double, rounded once; dropped: dx + dout * 0 (or 0 + dout * 0) in float, the
 * same bits (see ops_drop_apply: adding ±0 or NaN to a float is exact in either width). */
OPS_INLINE void dropout_span_acc_body(float *dx, const float *dout, size_t n,
                                      const ops_drop *dr, uint64_t base, int add) {
    const ops_drop r = *dr;
    OPS_DROP_EACH(r, base, n, j, keep, {
        const float x = add ? dx[j] : 0.0f;
        dx[j] = ops_sel(keep, (float)((double)x + (double)dout[j] * r.scale),
                        x + dout[j] * 0.0f);
    });
}

OPS_VEC static void dropout_span_acc(float *dx, const float *dout, size_t n,
                                     const ops_drop *dr, uint64_t base, int add) {
    if (add) dropout_span_acc_body(dx, dout, n, dr, base, 1);
    else dropout_span_acc_body(dx, dout, n, dr, base, 0);
}

static void dropout_forward_fast(float *out, const float *x, size_t n, const bt_dropout *d) {
    BT_ASSERT(n == 0 || (out && x));
    const ops_drop dr = ops_drop_make(d);
    if (!dr.on) {
        if (out != x) OPS_FOR_CHUNKS(n, lo, len, memcpy(out + lo, x + lo, len * sizeof(float)));
        return;
    }
    OPS_FOR_CHUNKS(n, lo, len, dropout_span(out + lo, x + lo, len, &dr, lo));
}

static void dropout_backward_fast(float *dx, const float *dout, size_t n, const bt_dropout *d,
                                  bt_dx_mode mode) {
    if (!dx) return;
    BT_ASSERT(n == 0 || dout);
    const ops_drop dr = ops_drop_make(d);
    const int add = mode == BT_DX_ADD;
    OPS_FOR_CHUNKS(n, lo, len, dropout_span_acc(dx + lo, dout + lo, len, &dr, lo, add));
}

/* --- column sums: dst[j] += Σ_i src[i*ld + j] ----------------------------------------------
 * Each column has one double accumulator, summed over the rows in order, so the result does
 * not depend on the thread count or on how the columns are grouped. A task owns a run of up
 * to OPS_COLSUM_W adjacent columns and walks the rows in order, reading its part of each row
 * contiguously (the accumulators, 8 bytes a column, stay in L1). The previous grouping, 64
 * columns a task, read 256 bytes per row at a row stride of 3-12 KiB: 1.4-2x slower for the
 * sums and 2.1-2.9x with dout's bf16 rounding at 2600 x 3072 on one thread
 * (docs/benchmarks.md, "Session 4: attention operands and column sums"). */
#define OPS_COLSUM_W ((size_t)4096)
/* Column block of the other column-owning kernels (LayerNorm and embedding backward). */
#define OPS_COLS 64

/* acc[j] += (double)g[j], j < n: one row of the column sums */
OPS_VEC static void colsum_add_row(double *restrict acc, const float *restrict g, size_t n) {
    for (size_t j = 0; j < n; j++) acc[j] += (double)g[j];
}

/* acc[j] += Σ_i src[i*ld + j] for j < w (w <= OPS_COLSUM_W), rows in order; with out16, also
 * out16[i*ld + j] = bf16(src[i*ld + j]) in the same pass (bf16_from_f32_serial: round to
 * nearest even, NaN kept quiet). */
OPS_VEC static void colsum_rows(double *restrict acc, bt_bf16 *out16, const float *src,
                                size_t n, size_t ld, size_t w) {
    for (size_t i = 0; i < n; i++) {
        const float *restrict row = src + i * ld;
        colsum_add_row(acc, row, w);
        if (out16) bf16_from_f32_serial(out16 + i * ld, row, w);
    }
}

/* The rows of one column task of gelu_backward_bias (below, with the activations). */
static void gelu_bias_rows(double *acc, float *dx, bt_bf16 *dx16, const float *dout,
                           const float *x, size_t n, size_t ld, size_t w, int quick);
#define OPS_ACT_NONE (-1) /* colsum_run: sum src itself */

/* dst[j] += Σ_i v[i*c + j] over (n, c) with v = src (act OPS_ACT_NONE), or v = the GELU
 * (act 0) / QuickGELU (act 1) backward of dout = src at x, then also dx = v when dx, and dst
 * may be NULL (gelu_backward_bias); with out16 (n, c), also out16 = bf16(v); one pass. */
static void colsum_run(float *dst, float *dx, bt_bf16 *out16, const float *src, const float *x,
                       int act, size_t n, size_t c) {
    const int par = n * c >= OPS_PAR_MIN && c >= 32;
    /* tasks: a multiple of the thread count, each at most OPS_COLSUM_W columns, widths a
     * multiple of 16 (whole 64-byte lines of a row when ld is) */
    const size_t nthr = par ? (size_t)ops_max_threads() : 1;
    size_t ntask = nthr;
    while ((c + ntask - 1) / ntask > OPS_COLSUM_W) ntask += nthr;
    const size_t w = ((c + ntask - 1) / ntask + 15) / 16 * 16;
    ntask = (c + w - 1) / w;
    OPS_OMP(omp parallel for schedule(static) if (par && ntask > 1))
    for (size_t t = 0; t < ntask; t++) {
        const size_t j0 = t * w, wt = ops_min(w, c - j0);
        double acc[OPS_COLSUM_W];
        for (size_t j = 0; dst && j < wt; j++) acc[j] = 0.0;
        if (act == OPS_ACT_NONE)
            colsum_rows(acc, out16 ? out16 + j0 : NULL, src + j0, n, c, wt);
        else
            gelu_bias_rows(dst ? acc : NULL, dx ? dx + j0 : NULL, out16 ? out16 + j0 : NULL,
                           src + j0, x + j0, n, c, wt, act);
        for (size_t j = 0; dst && j < wt; j++)
            dst[j0 + j] = (float)((double)dst[j0 + j] + acc[j]);
    }
}

static void colsum_accumulate(float *dst, const float *src, size_t n, size_t c) {
    colsum_run(dst, NULL, NULL, src, NULL, OPS_ACT_NONE, n, c);
}

/* dst[j] += Σ_i src[i*c + j] (as colsum_accumulate) and out16 = bf16(src), one pass. */
static void colsum_accumulate_bf16(float *dst, bt_bf16 *out16, const float *src, size_t n,
                                   size_t c) {
    colsum_run(dst, NULL, out16, src, NULL, OPS_ACT_NONE, n, c);
}

/* --- Linear --------------------------------------------------------------------------------
 * Both directions are GEMMs (gemm.h); with compute BF16 the weight operand is the caller's
 * bf16 copy when there is one, else gemm rounds w itself, and the input x likewise (x_bf16,
 * the same bits gemm's rounding of x would make). */

/* The input operand: x_bf16 when given (compute BF16 only), else x. */
static void linear_input(bt_dtype *type, const void **op, const float *x, const bt_bf16 *x_bf16,
                         gemm_compute compute) {
    BT_ASSERT(x || x_bf16);
    BT_ASSERTF(!x_bf16 || compute == GEMM_COMPUTE_BF16, "linear: a bf16 input needs compute BF16");
    *type = x_bf16 ? BT_DTYPE_BF16 : BT_DTYPE_F32;
    *op = x_bf16 ? (const void *)x_bf16 : (const void *)x;
}

static void linear_forward_fast(float *out, const float *x, const bt_bf16 *x_bf16,
                                const float *w, const bt_bf16 *w_bf16, const void *w_packed,
                                const float *b, size_t n, size_t c, size_t oc,
                                gemm_compute compute) {
    bt_dtype x_type;
    const void *x_op;
    linear_input(&x_type, &x_op, x, x_bf16, compute);
    /* a packed weight where the product can read it (ops.h); fp32 has no other copy then */
    const int packed = w_packed && (compute == GEMM_COMPUTE_F32
                                        ? gemm_get_backend() == GEMM_BACKEND_ONEDNN
                                        : ops_bf16_native(compute));
    BT_ASSERTF(out && (w || packed), "linear: no weight this product can read (w %s, w_packed "
               "%s)", w ? "given" : "NULL", w_packed ? "given off the oneDNN backend" : "NULL");
    /* the weight operand: the packed copy (of the compute's type), else the bf16 copy under
     * compute BF16, else w (rounded by gemm under compute BF16) */
    const void *w_op = w;
    bt_dtype w_type = BT_DTYPE_F32;
    if (packed) {
        w_op = w_packed;
        w_type = compute == GEMM_COMPUTE_BF16 ? BT_DTYPE_BF16 : BT_DTYPE_F32;
    } else if (compute == GEMM_COMPUTE_BF16 && w_bf16) {
        w_op = w_bf16;
        w_type = BT_DTYPE_BF16;
    }
    gemm_args g = {
        .trans_a = 0, .trans_b = 1, .m = n, .n = oc, .k = c,
        .a_type = x_type, .a = x_op, .lda = c, .b_type = w_type, .b = w_op, .ldb = c,
        .c = out, .ldc = oc, .alpha = 1.0f, .beta = 0.0f, .bias = b, .compute = compute,
        .b_packed = packed,
    };
    gemm(&g);
}

/* forward: out = x·wᵀ + b  ->  dx += dout·w (SET: beta 0);  dw += doutᵀ·x;  db += Σ dout */
static void linear_backward_fast(float *dx, float *dw, float *db, const float *dout,
                                 const bt_bf16 *dout_bf16, const float *x,
                                 const bt_bf16 *x_bf16, const float *w, const bt_bf16 *w_bf16,
                                 size_t n, size_t c, size_t oc, gemm_compute compute,
                                 bt_dx_mode mode) {
    BT_ASSERT((dout || dout_bf16) && w && (!db || dout));
    BT_ASSERTF(!dout_bf16 || compute == GEMM_COMPUTE_BF16,
               "linear: a bf16 dout needs compute BF16");
    bt_dtype x_type;
    const void *x_op;
    linear_input(&x_type, &x_op, x, x_bf16, compute);
    const int use_bf16_w = compute == GEMM_COMPUTE_BF16 && w_bf16;
    /* the caller's bf16 dout when given; else both products round dout to bf16 on the native
     * route: round it once here (the bytes gemm's own packing makes) and hand both the bf16
     * copy (n x oc x 2 bytes of per-thread scratch); with a bias, in the same pass over dout
     * as its column sums */
    bt_dtype dout_type = dout_bf16 ? BT_DTYPE_BF16 : BT_DTYPE_F32;
    const void *dout_op = dout_bf16 ? (const void *)dout_bf16 : (const void *)dout;
    if (!dout_bf16 && dx && dw && ops_bf16_native(compute)) {
        bt_bf16 *d16 = gemm_caller_scratch(n * oc * sizeof *d16);
        if (db) {
            colsum_accumulate_bf16(db, d16, dout, n, oc);
            db = NULL; /* done */
        } else {
            bf16_from_f32(d16, dout, n * oc);
        }
        dout_type = BT_DTYPE_BF16;
        dout_op = d16;
    }
    if (dx) {
        /* BT_DX_SET: beta 0, dx not read. On the native bf16 route oneDNN's AMX brgemm sums
         * over K in another order when the sum post-op of beta 1 is absent (oneDNN 2.6: dx of
         * K = 1536 or 2304 at 650 rows and K = 50265 at 320 rows get other bits, within
         * 1.1e-4 of the 2 k u Σ|a b| bound; fp32 and the widened route never did), so there
         * SET is not bit for bit ADD onto zeros (ops.h bt_dx_mode says so; nothing in the
         * model compares the two). Zeroing dx and accumulating kept the bits but cost the
         * zeroing and the sum post-op's read of 1.1 GB per base B 8 step: per dx (2 threads,
         * cold dx) 2600x3072 from K 768 11.5 -> 9.8 ms, 2600x768 from K 2304 7.4 -> 6.9 ms;
         * bench_step --kernels: zero_fill 2.7% -> 1.0% of the step (docs/benchmarks.md
         * "Session 7"). */
        const float beta = mode == BT_DX_SET ? 0.0f : 1.0f;
        gemm_args g = {
            .trans_a = 0, .trans_b = 0, .m = n, .n = c, .k = oc,
            .a_type = dout_type, .a = dout_op, .lda = oc,
            .b_type = use_bf16_w ? BT_DTYPE_BF16 : BT_DTYPE_F32,
            .b = use_bf16_w ? (const void *)w_bf16 : (const void *)w, .ldb = c,
            .c = dx, .ldc = c, .alpha = 1.0f, .beta = beta, .compute = compute,
        };
        gemm(&g);
    }
    if (dw) {
        gemm_args g = {
            .trans_a = 1, .trans_b = 0, .m = oc, .n = c, .k = n,
            .a_type = dout_type, .a = dout_op, .lda = oc,
            .b_type = x_type, .b = x_op, .ldb = c,
            .c = dw, .ldc = c, .alpha = 1.0f, .beta = 1.0f, .compute = compute,
        };
        gemm(&g);
    }
    if (db) colsum_accumulate(db, dout, n, oc);
}

/* --- LayerNorm ------------------------------------------------------------------------------ */

/* mean and rstd = 1/sqrt(var + eps) of one row of c >= 1 */
OPS_INLINE void layernorm_stats(float *mean, float *rstd, const float *x, size_t c, float eps) {
    const float m = ops_sum(x, c) / (float)c;
    const float var = ops_sum_sq_dev(x, m, c) / (float)c; /* two passes: no cancellation */
    *mean = m;
    *rstd = 1.0f / sqrtf(var + eps);
}

/* out[j] = (x[j] - m) * r * w[j] + b[j], j < len */
OPS_INLINE void layernorm_apply(float *out, const float *x, const float *w, const float *b,
                                float m, float r, size_t len) {
    for (size_t j = 0; j < len; j++) out[j] = (x[j] - m) * r * w[j] + b[j];
}

OPS_VEC static void layernorm_row(float *out, float *mean, float *rstd, const float *x,
                                  const float *w, const float *b, size_t c, float eps) {
    float m, r;
    layernorm_stats(&m, &r, x, c, eps);
    layernorm_apply(out, x, w, b, m, r, c);
    *mean = m;
    *rstd = r;
}

/* Elements a bf16-output kernel computes into an fp32 buffer on the stack (L1) before
 * rounding them with bf16_from_f32_serial: the fp32 kernel's own code, then the rounding
 * bf16_from_f32 makes, so the bits are those of bf16_from_f32(fp32 kernel's output). */
#define OPS_BF16_SPAN ((size_t)1024)

OPS_VEC static void layernorm_row_bf16(bt_bf16 *out, float *mean, float *rstd, const float *x,
                                       const float *w, const float *b, size_t c, float eps) {
    float m, r, tmp[OPS_BF16_SPAN];
    layernorm_stats(&m, &r, x, c, eps);
    for (size_t j0 = 0; j0 < c; j0 += OPS_BF16_SPAN) {
        const size_t len = ops_min(OPS_BF16_SPAN, c - j0);
        layernorm_apply(tmp, x + j0, w + j0, b + j0, m, r, len);
        bf16_from_f32_serial(out + j0, tmp, len);
    }
    *mean = m;
    *rstd = r;
}

/* The rows of either forward: fp32 out, or (out16 given) its bf16 rounding. */
static void layernorm_rows(float *out, bt_bf16 *out16, float *mean, float *rstd, const float *x,
                           const float *w, const float *b, size_t n, size_t c, float eps) {
    BT_ASSERT((out || out16) && mean && rstd && x && w && b && c > 0);
    OPS_OMP(omp parallel for schedule(static) if (n * c >= OPS_PAR_MIN))
    for (size_t i = 0; i < n; i++) {
        if (out16) layernorm_row_bf16(out16 + i * c, mean + i, rstd + i, x + i * c, w, b, c, eps);
        else layernorm_row(out + i * c, mean + i, rstd + i, x + i * c, w, b, c, eps);
    }
}

static void layernorm_forward_fast(float *out, float *mean, float *rstd, const float *x,
                                   const float *w, const float *b, size_t n, size_t c,
                                   float eps) {
    layernorm_rows(out, NULL, mean, rstd, x, w, b, n, c, eps);
}

static void layernorm_forward_bf16_fast(bt_bf16 *out, float *mean, float *rstd, const float *x,
                                        const float *w, const float *b, size_t n, size_t c,
                                        float eps) {
    layernorm_rows(NULL, out, mean, rstd, x, w, b, n, c, eps);
}

/* Where layernorm_backward_dropout's second output goes: ddrop (N, C), the rows' masks
 * (drs[g / block_rows] for global row g, element index (g % block_rows) c + j). */
typedef struct ln_drop_out {
    float *ddrop;
    const ops_drop *drs;
    size_t block_rows;
} ln_drop_out;

/* Rows row0.. of one block: dx (if any) for each row, v its LayerNorm gradient:
 *   dx += v (add), dx = 0 + v (assigned), and with a residual gradient res:
 *   dx = (dx + res) + v (add: residual_backward's sum, then LayerNorm's), dx = res + v;
 * res may alias dx (each element read before it is written); with dr, ddrop = 0 + dx m
 * (dropout_backward's SET) while the row is in cache; and the block's partial dw/db
 * (assigned). dx, dout, x, res: this block's rows. */
OPS_VEC static void layernorm_backward_rows(float *dx, float *pdw, float *pdb, const float *dout,
                                            int add, const float *res, const float *x,
                                            const float *w, const float *mean, const float *rstd,
                                            size_t rows, size_t c, const ln_drop_out *dr,
                                            size_t row0) {
    for (size_t j = 0; j < c; j++) pdw[j] = pdb[j] = 0.0f;
    for (size_t i = 0; i < rows; i++) {
        const float *xi = x + i * c, *gi = dout + i * c;
        const float m = mean[i], r = rstd[i];
        ops_vf a1[OPS_NV] = {{0}}, a2[OPS_NV] = {{0}}, vx, vg, vw;
        size_t j = 0;
        for (; j + OPS_LANES <= c; j += OPS_LANES) /* Σ g and Σ g xhat, g = dout w */
            OPS_EACH_VEC(k, {
                OPS_LOAD(vx, xi + j + k * OPS_VN);
                OPS_LOAD(vg, gi + j + k * OPS_VN);
                OPS_LOAD(vw, w + j + k * OPS_VN);
                vg *= vw;
                a1[k] += vg;
                a2[k] += vg * ((vx - m) * r);
            });
        float t1 = 0.0f, t2 = 0.0f;
        for (; j < c; j++) {
            const float xhat = (xi[j] - m) * r, g = gi[j] * w[j];
            t1 += g;
            t2 += g * xhat;
        }
        const float mg = ops_fold(a1, t1) / (float)c, mgx = ops_fold(a2, t2) / (float)c;
        float *dxi = dx ? dx + i * c : NULL;
        const float *ri = res ? res + i * c : NULL;
        for (j = 0; j < c; j++) {
            const float xhat = (xi[j] - m) * r;
            pdw[j] += gi[j] * xhat;
            pdb[j] += gi[j];
        }
        if (dxi && add && !ri)
            for (j = 0; j < c; j++) {
                const float xhat = (xi[j] - m) * r;
                dxi[j] += r * (gi[j] * w[j] - mg - xhat * mgx);
            }
        else if (dxi && add)
            for (j = 0; j < c; j++) {
                const float xhat = (xi[j] - m) * r, s = dxi[j] + ri[j];
                dxi[j] = s + r * (gi[j] * w[j] - mg - xhat * mgx);
            }
        else if (dxi && ri)
            for (j = 0; j < c; j++) {
                const float xhat = (xi[j] - m) * r;
                dxi[j] = ri[j] + r * (gi[j] * w[j] - mg - xhat * mgx);
            }
        else if (dxi)
            for (j = 0; j < c; j++) {
                const float xhat = (xi[j] - m) * r;
                dxi[j] = 0.0f + r * (gi[j] * w[j] - mg - xhat * mgx);
            }
        if (dxi && dr) {
            const size_t g = row0 + i;
            dropout_span_acc(dr->ddrop + g * c, dxi, c, &dr->drs[g / dr->block_rows],
                             (uint64_t)(g % dr->block_rows) * c, 0);
        }
    }
}

/* Rows per block of partial dw/db: fixed (not per thread), so sums do not depend on the
 * thread count. */
#define OPS_LN_ROWS ((size_t)32)

OPS_VEC static void layernorm_reduce_cols(float *dst, const float *part, size_t nblk,
                                          size_t stride, size_t j0, size_t w) {
    double acc[OPS_COLS] = {0};
    for (size_t blk = 0; blk < nblk; blk++)
        for (size_t j = 0; j < w; j++) acc[j] += (double)part[blk * stride + j0 + j];
    for (size_t j = 0; j < w; j++) dst[j0 + j] = (float)((double)dst[j0 + j] + acc[j]);
}

/* forward: out = xhat*w + b, xhat = (x - mean)*rstd. With g = dout*w:
 *   dx (+)= [res +] rstd (g - mean_j g - xhat mean_j(g xhat));  dw += Σ_rows dout*xhat;
 *   db += Σ dout  (add, res, dr as layernorm_backward_rows) */
static void layernorm_backward_base(float *dx, float *dw, float *db, const float *dout, int add,
                                    const float *res, const float *x, const float *w,
                                    const float *mean, const float *rstd, size_t n, size_t c,
                                    const ln_drop_out *dr) {
    BT_ASSERT(dout && x && w && mean && rstd && c > 0);
    if (n == 0) return;
    const size_t nblk = (n + OPS_LN_ROWS - 1) / OPS_LN_ROWS;
    float *part = bt_alloc(nblk * 2 * c * sizeof(float)); /* (nblk, 2, C): dw then db */
    OPS_OMP(omp parallel for schedule(static) if (n * c >= OPS_PAR_MIN))
    for (size_t blk = 0; blk < nblk; blk++) {
        const size_t i0 = blk * OPS_LN_ROWS, rows = ops_min(OPS_LN_ROWS, n - i0);
        layernorm_backward_rows(dx ? dx + i0 * c : NULL, part + blk * 2 * c,
                                part + blk * 2 * c + c, dout + i0 * c, add,
                                res ? res + i0 * c : NULL, x + i0 * c, w, mean + i0, rstd + i0,
                                rows, c, dr, i0);
    }
    const size_t ncb = (c + OPS_COLS - 1) / OPS_COLS;
    OPS_OMP(omp parallel for schedule(static) if (nblk * c >= OPS_PAR_MIN))
    for (size_t cb = 0; cb < ncb; cb++) {
        const size_t j0 = cb * OPS_COLS, wd = ops_min(OPS_COLS, c - j0);
        if (dw) layernorm_reduce_cols(dw, part, nblk, 2 * c, j0, wd);
        if (db) layernorm_reduce_cols(db, part + c, nblk, 2 * c, j0, wd);
    }
    bt_free(part);
}

static void layernorm_backward_fast(float *dx, float *dw, float *db, const float *dout,
                                    const float *x, const float *w, const float *mean,
                                    const float *rstd, size_t n, size_t c, bt_dx_mode mode) {
    layernorm_backward_base(dx, dw, db, dout, mode == BT_DX_ADD, NULL, x, w, mean, rstd, n, c,
                            NULL);
}

/* dx = res + LN'(dout) (SET) or (dx + res) + LN'(dout) (ADD): the same bits as res copied
 * into (SET) or added to (ADD) dx and then LN'(dout) added, the same float sums in order */
static void layernorm_backward_residual_fast(float *dx, float *dw, float *db, const float *dout,
                                             const float *res, const float *x, const float *w,
                                             const float *mean, const float *rstd, size_t n,
                                             size_t c, bt_dx_mode mode) {
    BT_ASSERT(dx && res);
    layernorm_backward_base(dx, dw, db, dout, mode == BT_DX_ADD, res, x, w, mean, rstd, n, c,
                            NULL);
}

/* dx = LN'(dout) assigned, ddrop = dropout'(dx) per block: the same bits as
 * layernorm_backward(BT_DX_SET) then dropout_backward(BT_DX_SET) per block (the same
 * dropout_span_acc on the same values and indices), in one pass over the rows */
static void layernorm_backward_dropout_fast(float *dx, float *ddrop, float *dw, float *db,
                                            const float *dout, const float *x, const float *w,
                                            const float *mean, const float *rstd, size_t n,
                                            size_t c, const bt_dropout *drops,
                                            size_t block_rows) {
    BT_ASSERT(dx && ddrop && drops && block_rows > 0 && n % block_rows == 0);
    const size_t nb = n / block_rows;
    ops_drop *drs = bt_alloc((nb ? nb : 1) * sizeof *drs);
    for (size_t b = 0; b < nb; b++) drs[b] = ops_drop_make(&drops[b]);
    const ln_drop_out dr = {ddrop, drs, block_rows};
    layernorm_backward_base(dx, dw, db, dout, 0, NULL, x, w, mean, rstd, n, c, &dr);
    bt_free(drs);
}

/* --- pointwise activations ------------------------------------------------------------------ */

#define OPS_QUICK_GELU_A 1.702f

OPS_VEC static void gelu_span(float *out, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = x[i] * ops_normal_cdf(x[i]);
}

/* forward: out = x Φ(x)  ->  dx += dout (Φ(x) + x φ(x)), φ(x) = e^{-x²/2}/√(2π);
 * add 0 (BT_DX_SET): dx = 0 + dout (...) (a constant at each call: two loops) */
OPS_INLINE void gelu_span_backward_body(float *dx, const float *dout, const float *x, size_t n,
                                        int add) {
    for (size_t i = 0; i < n; i++) {
        const float v = x[i], a = ops_sel(v < 0.0f, -v, v);
        const ops_gauss g = ops_gauss_split(a);
        const float tail = ops_upper_tail(a, g), cdf = ops_sel(v < 0.0f, tail, 1.0f - tail);
        const float pdf = ops_exp2part(g.big, -g.s) * 0.39894228040143268f;
        dx[i] = (add ? dx[i] : 0.0f) + dout[i] * (cdf + v * pdf);
    }
}

OPS_VEC static void gelu_span_backward(float *dx, const float *dout, const float *x, size_t n,
                                       int add) {
    if (add) gelu_span_backward_body(dx, dout, x, n, 1);
    else gelu_span_backward_body(dx, dout, x, n, 0);
}

/* sigmoid(a x) from e = exp(-|a x|) <= 1, so no overflow in either tail. */
OPS_INLINE float ops_sigmoid(float z) {
    const float e = ops_exp(ops_sel(z < 0.0f, z, -z));
    return ops_sel(z >= 0.0f, 1.0f, e) / (1.0f + e); /* one division, either numerator */
}

OPS_VEC static void quick_gelu_span(float *out, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = x[i] * ops_sigmoid(OPS_QUICK_GELU_A * x[i]);
}

/* forward: out = x s, s = sigmoid(a x)  ->  dx += dout (s + a x s (1 - s)); add 0: as gelu */
OPS_INLINE void quick_gelu_span_backward_body(float *dx, const float *dout, const float *x,
                                              size_t n, int add) {
    for (size_t i = 0; i < n; i++) {
        const float s = ops_sigmoid(OPS_QUICK_GELU_A * x[i]);
        dx[i] = (add ? dx[i] : 0.0f) + dout[i] * (s + OPS_QUICK_GELU_A * x[i] * s * (1.0f - s));
    }
}

OPS_VEC static void quick_gelu_span_backward(float *dx, const float *dout, const float *x,
                                             size_t n, int add) {
    if (add) quick_gelu_span_backward_body(dx, dout, x, n, 1);
    else quick_gelu_span_backward_body(dx, dout, x, n, 0);
}

static void gelu_forward_fast(float *out, const float *x, size_t n) {
    BT_ASSERT(n == 0 || (out && x));
    OPS_FOR_CHUNKS(n, lo, len, gelu_span(out + lo, x + lo, len));
}

static void gelu_backward_fast(float *dx, const float *dout, const float *x, size_t n,
                               bt_dx_mode mode) {
    if (!dx) return;
    BT_ASSERT(n == 0 || (dout && x));
    const int add = mode == BT_DX_ADD;
    OPS_FOR_CHUNKS(n, lo, len, gelu_span_backward(dx + lo, dout + lo, x + lo, len, add));
}

static void quick_gelu_forward_fast(float *out, const float *x, size_t n) {
    BT_ASSERT(n == 0 || (out && x));
    OPS_FOR_CHUNKS(n, lo, len, quick_gelu_span(out + lo, x + lo, len));
}

/* out (n) = bf16(span(x)): the fp32 span OPS_BF16_SPAN elements at a time into an L1 buffer,
 * rounded by bf16_from_f32_serial (see OPS_BF16_SPAN). */
static void span_bf16(void (*span)(float *, const float *, size_t), bt_bf16 *out,
                      const float *x, size_t n) {
    float tmp[OPS_BF16_SPAN];
    for (size_t j0 = 0; j0 < n; j0 += OPS_BF16_SPAN) {
        const size_t len = ops_min(OPS_BF16_SPAN, n - j0);
        span(tmp, x + j0, len);
        bf16_from_f32_serial(out + j0, tmp, len);
    }
}

static void gelu_forward_bf16_fast(bt_bf16 *out, const float *x, size_t n) {
    BT_ASSERT(n == 0 || (out && x));
    OPS_FOR_CHUNKS(n, lo, len, span_bf16(gelu_span, out + lo, x + lo, len));
}

static void quick_gelu_forward_bf16_fast(bt_bf16 *out, const float *x, size_t n) {
    BT_ASSERT(n == 0 || (out && x));
    OPS_FOR_CHUNKS(n, lo, len, span_bf16(quick_gelu_span, out + lo, x + lo, len));
}

static void quick_gelu_backward_fast(float *dx, const float *dout, const float *x, size_t n,
                                     bt_dx_mode mode) {
    if (!dx) return;
    BT_ASSERT(n == 0 || (dout && x));
    const int add = mode == BT_DX_ADD;
    OPS_FOR_CHUNKS(n, lo, len, quick_gelu_span_backward(dx + lo, dout + lo, x + lo, len, add));
}

/* The rows of one column task of gelu_backward_bias: w columns of rows 0..n-1 at a row
 * stride ld, OPS_BF16_SPAN columns at a time; g is the span's value (dx's row, or an L1
 * buffer when dx is NULL), summed into acc (when given) and rounded into dx16 while in L1. */
static void gelu_bias_rows(double *acc, float *dx, bt_bf16 *dx16, const float *dout,
                           const float *x, size_t n, size_t ld, size_t w, int quick) {
    float tmp[OPS_BF16_SPAN];
    for (size_t i = 0; i < n; i++) {
        for (size_t j0 = 0; j0 < w; j0 += OPS_BF16_SPAN) {
            const size_t k = i * ld + j0, len = ops_min(OPS_BF16_SPAN, w - j0);
            float *g = dx ? dx + k : tmp;
            if (quick) quick_gelu_span_backward(g, dout + k, x + k, len, 0);
            else gelu_span_backward(g, dout + k, x + k, len, 0);
            if (acc) colsum_add_row(acc + j0, g, len);
            if (dx16) bf16_from_f32_serial(dx16 + k, g, len);
        }
    }
}

/* gelu_backward (BT_DX_SET) then colsum_accumulate / colsum_accumulate_bf16 of its output
 * in one pass (colsum_run's column tasks): the same per-element expressions (the span
 * kernels above), the same per-column double sums over the rows in order, so the same bits
 * as the separate passes. */
static void gelu_backward_bias_fast(float *dx, bt_bf16 *dx16, float *dbias, const float *dout,
                                    const float *x, size_t n, size_t c, int quick) {
    BT_ASSERT(dx || dx16);
    BT_ASSERT(n == 0 || c == 0 || (dout && x));
    colsum_run(dbias, dx, dx16, dout, x, quick ? 1 : 0, n, c);
}

/* tanh only runs in the poolers (B x C elements): libm's tanhf (correctly handled tails, no
 * cancellation near 0) in float, threaded for large n, is all it needs. */
static void tanh_forward_fast(float *out, const float *x, size_t n) {
    BT_ASSERT(n == 0 || (out && x));
    OPS_OMP(omp parallel for schedule(static) if (n >= OPS_PAR_MIN))
    for (size_t i = 0; i < n; i++) out[i] = tanhf(x[i]);
}

/* forward: y = tanh(x)  ->  dx += dout (1 - y²) */
OPS_VEC static void tanh_span_backward(float *dx, const float *dout, const float *y, size_t n) {
    for (size_t i = 0; i < n; i++) dx[i] += dout[i] * (1.0f - y[i] * y[i]);
}

static void tanh_backward_fast(float *dx, const float *dout, const float *y, size_t n) {
    if (!dx) return;
    BT_ASSERT(n == 0 || (dout && y));
    OPS_FOR_CHUNKS(n, lo, len, tanh_span_backward(dx + lo, dout + lo, y + lo, len));
}

/* --- softmax -------------------------------------------------------------------------------- */

/* out = softmax(x) over one row of c >= 1 (out may alias x). Returns Σ exp(x - max) and
 * stores the max, for the cross entropy. */
OPS_INLINE float softmax_row_inline(float *out, const float *x, size_t c, float *max_out) {
    const float mx = ops_max(x, c);
    for (size_t j = 0; j < c; j++) out[j] = ops_exp(x[j] - mx);
    const float sum = ops_sum(out, c), inv = 1.0f / sum;
    for (size_t j = 0; j < c; j++) out[j] *= inv;
    if (max_out) *max_out = mx;
    return sum;
}

OPS_VEC static void softmax_rows(float *out, const float *x, size_t rows, size_t c) {
    for (size_t i = 0; i < rows; i++) softmax_row_inline(out + i * c, x + i * c, c, NULL);
}

/* forward: y = softmax(x)  ->  dx += y ⊙ (dout - Σ_j dout_j y_j) */
OPS_VEC static void softmax_rows_backward(float *dx, const float *dout, const float *y,
                                          size_t rows, size_t c) {
    for (size_t i = 0; i < rows; i++) {
        const float *gi = dout + i * c, *yi = y + i * c;
        float *dxi = dx + i * c;
        const float dot = ops_dot(gi, yi, c);
        for (size_t j = 0; j < c; j++) dxi[j] += yi[j] * (gi[j] - dot);
    }
}

/* Rows per parallel task for row kernels: about OPS_CHUNK elements, at least one row. */
static size_t ops_rows_per_task(size_t c) {
    const size_t r = OPS_CHUNK / (c ? c : 1);
    return r ? r : 1;
}

#define OPS_FOR_ROWS(n, c, i0, rows, body)                                                 \
    do {                                                                                   \
        const size_t ops_n_ = (n), ops_rpt_ = ops_rows_per_task(c);                        \
        const size_t ops_nt_ = (ops_n_ + ops_rpt_ - 1) / ops_rpt_;                         \
        OPS_OMP(omp parallel for schedule(static) if (ops_n_ * (c) >= OPS_PAR_MIN))        \
        for (size_t ops_t_ = 0; ops_t_ < ops_nt_; ops_t_++) {                              \
            const size_t i0 = ops_t_ * ops_rpt_, rows = ops_min(ops_rpt_, ops_n_ - i0);    \
            body;                                                                          \
        }                                                                                  \
    } while (0)

static void softmax_forward_fast(float *out, const float *x, size_t n, size_t c) {
    BT_ASSERT(n == 0 || (out && x && c > 0));
    OPS_FOR_ROWS(n, c, i0, rows, softmax_rows(out + i0 * c, x + i0 * c, rows, c));
}

static void softmax_backward_fast(float *dx, const float *dout, const float *y, size_t n,
                                  size_t c) {
    if (!dx) return;
    BT_ASSERT(n == 0 || (dout && y));
    OPS_FOR_ROWS(n, c, i0, rows,
                 softmax_rows_backward(dx + i0 * c, dout + i0 * c, y + i0 * c, rows, c));
}

/* --- attention ------------------------------------------------------------------------------
 * ATTENTION THREADING. Two ways to use the cores, both kept and selectable
 * (ops_attention_threads_select, BT_ATTENTION_THREADS):
 *   (a) "blocks": one OpenMP loop over the B*NH blocks, each gemm() on its calling thread
 *       (oneDNN sees omp_in_parallel() and stays on it: no nested threading); one fork/join
 *       per call, 24 equal blocks for 2 threads at base size.
 *   (b) "gemm": batch items one after another; per item one batched gemm() over the NH
 *       heads (threaded inside the GEMM) and an OpenMP loop over heads for the row work;
 *       3-5 fork/joins per batch item.
 * Measured with tests/bench_ops.c (docs/benchmarks.md, "Memory-bound kernels and
 * attention"), 2 threads, base shapes, oneDNN: self-attention T=325 fp32 forward/backward
 * 12.4/16.2 ms with (a) vs 36.4/63.3 ms with (b); text T=40 0.14/0.24 vs 0.23/0.27 ms;
 * cross 40x325 even within noise. (a) is the default ("auto"), except under OpenBLAS,
 * whose calls from inside a parallel region fan out to its own threads (gemm.h). */

/* Which of the two is used. AUTO: (a) unless the GEMM backend is OpenBLAS, then (b). */
typedef enum { OPS_ATTN_AUTO, OPS_ATTN_BLOCKS, OPS_ATTN_GEMM } ops_attn_mode;
/* One setting shared by every ISA variant unit (defined in the library's unit). */
extern ops_attn_mode ops_attention_mode;
#ifndef OPS_VARIANT
ops_attn_mode ops_attention_mode = OPS_ATTN_AUTO;
#endif

static ops_attn_mode ops_attention_resolve(void) {
    if (ops_attention_mode != OPS_ATTN_AUTO) return ops_attention_mode;
    return gemm_get_backend() == GEMM_BACKEND_OPENBLAS ? OPS_ATTN_GEMM : OPS_ATTN_BLOCKS;
}

/* Operand slices the forward's value product reads and writes (rows x D floats at row
 * stride ld: v_h and out_h), fetched into cache while the row pass computes: the product's
 * loads and its stores into cold lines of out otherwise wait on memory, while the row pass
 * is bound by arithmetic (exp, the dropout hash). Row i of a pass over n rows fetches rows
 * [i step, (i + 1) step) of each slice, step = ceil(rows / n) (attention_ahead_begin). A
 * hint only: no result depends on it. Measured (1 thread, B 8, T 325, no dropout or mask,
 * min of 3): native bf16 forward 23.0 -> 21.5 ms per call, AVX2 fp32 42.1 -> 41.1; the same
 * for the backward (its dv, dq, dk output rows, k_h and q_h during its row pass) gained
 * nothing measurable, so it is not done. */
typedef struct attention_ahead {
    const float *x[2];
    size_t ld[2], rows[2], step[2];
    size_t D;
} attention_ahead;

OPS_INLINE void attention_ahead_begin(attention_ahead *a, size_t n) {
    for (int k = 0; k < 2; k++) a->step[k] = (a->rows[k] + n - 1) / n;
}

OPS_INLINE void attention_ahead_row(const attention_ahead *a, size_t i) {
    if (!a) return;
    for (int k = 0; k < 2; k++) {
        if (!a->x[k]) continue;
        const size_t r0 = i * a->step[k], r1 = ops_min(r0 + a->step[k], a->rows[k]);
        for (size_t t = r0; t < r1; t++)
            for (size_t j = 0; j < a->D; j += 64 / sizeof(float))
                __builtin_prefetch(a->x[k] + t * a->ld[k] + j, 0, 3);
    }
}

/* The block's Tq score rows s in place (row i at s + i lds, lds >= tk; columns [tk, lds) are
 * scratch: the exp loop, and without dropout the scaling, run over them too, so that with
 * lds a multiple of OPS_LANES they have no scalar remainder; their values are never read;
 * the caller zeroes them once, as subnormal garbage would slow the exp): S += key_bias (if
 * any), P = softmax(S); then P·V's operand: with dropout, pd = dropout(P) (fp32, row i at
 * pd + i*pd_step: a Tq x Tk tile, or with pd_step 0 one row of scratch); with tile16 (the
 * native bf16 route), tile16 (Tq x Tk) = bf16(dropout(P)) or bf16(P), the bytes gemm's own
 * rounding of that operand gives. Row by row, while the row is in L1.
 * The passes of softmax_row_inline with the key-bias add folded into the max pass
 * (ops_max_add) and the scaling by 1/Σ into the dropout pass: the same expressions and
 * sums in the same order, the same max (ops_max_add: up to the sign of a zero, which
 * exp(x - max) does not see), so the same bits.
 * The key bias is added here rather than as the GEMM's bias:
 * with alpha = 1/√D a GEMM may scale the bias by 1/alpha internally (oneDNN does), which
 * turns HF's -FLT_MAX mask into -Inf and a row whose keys are all masked into NaN instead
 * of the uniform distribution torch gives. */
OPS_VEC static void attention_rows_forward(float *s, size_t lds, float *pd, size_t pd_step,
                                           bt_bf16 *tile16, size_t ld16, const float *key_bias,
                                           size_t tq, size_t tk, const ops_drop *dr,
                                           uint64_t base, const attention_ahead *ahead) {
    const ops_drop r = *dr;
    for (size_t i = 0; i < tq; i++) {
        attention_ahead_row(ahead, i);
        float *si = s + i * lds;
        const float mx = ops_max_add(si, key_bias, tk);
        for (size_t j = 0; j < lds; j++) si[j] = ops_exp(si[j] - mx);
        const float inv = 1.0f / ops_sum(si, tk);
        const float *op = si; /* row i of P·V's operand */
        if (r.on) {
            float *pdi = pd + i * pd_step;
            OPS_DROP_EACH(r, base + i * tk, tk, j, keep, {
                const float y = si[j] * inv;
                si[j] = y;
                pdi[j] = ops_drop_apply(&r, y, keep);
            });
            op = pdi;
        } else {
            for (size_t j = 0; j < lds; j++) si[j] *= inv;
        }
        if (tile16) { /* columns [tk, ld16): the zero K padding of the AMX products */
            bf16_from_f32_serial(tile16 + i * ld16, op, tk);
            memset(tile16 + i * ld16 + tk, 0, (ld16 - tk) * sizeof(bt_bf16));
        }
    }
}

/* On entry ds (or NULL; row i at ds + i lds) holds dPd = dout vᵀ for the block; on exit dS:
 *   dP = dropout(dPd) (mask and scale of the forward);  dS = P ⊙ (dP - Σ_j dP_j P_j)
 * Also, row by row while the row is in L1, the dv product's operand: with dropout and pd,
 * Pd = dropout(P) into pd (row i at pd + i*pd_step: the Tq x Tk tile, or with pd_step 0 one
 * row of scratch), in the same loop as dP, so the row's mask is made once for both; on the
 * native bf16 route pd16 (or NULL) = bf16(Pd) (or bf16(P) without dropout) and ds16 =
 * bf16(dS), the operands of the dv and of the dq and dk products (the bytes gemm would round
 * them to).
 * With vnni (the AMX products, else NULL), the rows also go, in pairs while they are in L1,
 * to the VNNI layouts the products read as B (attention_amx.h): vnni->pd (Pd, whose row-major
 * copy is then only needed two rows at a time: pd16 holds rows i at pd16 + (i % 2) ld16)
 * and vnni->ds (dS; ds16 keeps every row, the dq product's A), their rows past ceil(tq/2)
 * zeroed up to vnni->rows. */
typedef struct attention_vnni {
    bt_bf16 *pd, *ds; /* (rows, 2 n16) each, or NULL */
    size_t ld, n16, rows;
} attention_vnni;

OPS_VEC static void attention_rows_backward(float *ds, size_t lds, float *pd, size_t pd_step,
                                            bt_bf16 *pd16, bt_bf16 *ds16, size_t ld16,
                                            const float *p, size_t ldp, size_t tq, size_t tk,
                                            const ops_drop *dr, uint64_t base,
                                            const attention_vnni *vnni) {
    const ops_drop r = *dr;
    const int ring = vnni && vnni->pd; /* pd16: two rows */
    /* P is the saved probs slice, cold since the forward: its row OPS_ATTN_P_AHEAD rows on is
     * fetched while this one is worked (the pages of a row pass change every ~3 rows, where
     * the hardware's stream prefetch starts over). Measured (1 thread, B 8, T 325, no dropout,
     * min of 4): fp32 backward 60.5 -> 58.9 ms per call under the AVX2 caps, 40.9 -> 39.7 under
     * AVX512-BF16 without AMX; native bf16 within noise. A hint: no result depends on it. */
    enum { OPS_ATTN_P_AHEAD = 6 };
    for (size_t i = 0; i < tq; i++) {
        const float *pi = p + i * ldp;
        if (i + OPS_ATTN_P_AHEAD < tq)
            for (size_t j = 0; j < tk; j += 64 / sizeof(float))
                __builtin_prefetch(pi + OPS_ATTN_P_AHEAD * ldp + j, 0, 3);
        float *pdi = r.on && pd ? pd + i * pd_step : NULL, *dsi = ds ? ds + i * lds : NULL;
        if (pdi && dsi) dropout_span_pair(pdi, pi, dsi, dsi, tk, &r, base + i * tk);
        else if (pdi) dropout_span(pdi, pi, tk, &r, base + i * tk);
        else if (dsi && r.on) dropout_span(dsi, dsi, tk, &r, base + i * tk);
        const int pair = vnni && (i % 2 == 1 || i + 1 == tq); /* a VNNI row is complete */
        if (pd16) bf16_from_f32_serial(pd16 + (ring ? i % 2 : i) * ld16, pdi ? pdi : pi, tk);
        if (ring && pair)
            attention_amx_interleave(vnni->pd + i / 2 * vnni->ld, pd16,
                                     i % 2 ? pd16 + ld16 : NULL, tk, vnni->n16);
        if (!dsi) continue;
        const float dot = ops_dot(dsi, pi, tk);
        for (size_t j = 0; j < tk; j++) dsi[j] = pi[j] * (dsi[j] - dot);
        if (ds16) { /* columns [tk, ld16): the zero K padding of the AMX products */
            bf16_from_f32_serial(ds16 + i * ld16, dsi, tk);
            memset(ds16 + i * ld16 + tk, 0, (ld16 - tk) * sizeof(bt_bf16));
        }
        if (pair && vnni->ds)
            attention_amx_interleave(vnni->ds + i / 2 * vnni->ld, ds16 + (i - i % 2) * ld16,
                                     i % 2 ? ds16 + i * ld16 : NULL, tk, vnni->n16);
    }
    for (size_t v = (tq + 1) / 2; vnni && v < vnni->rows; v++) { /* the K padding of B */
        if (vnni->pd) memset(vnni->pd + v * vnni->ld, 0, 2 * vnni->n16 * sizeof(bt_bf16));
        if (vnni->ds) memset(vnni->ds + v * vnni->ld, 0, 2 * vnni->n16 * sizeof(bt_bf16));
    }
}

/* x16 (T, D) = bf16 of x_h (T rows at stride ldx): the bytes and the dense layout gemm's own
 * packing makes of an fp32 operand on the native bf16 route (gemm_onednn.c dn_pack_operand),
 * so a product reading x16 gives the bits it gives reading x_h. Returns x16. */
static const bt_bf16 *attention_round(bt_bf16 *x16, const float *x_h, size_t ldx, size_t T,
                                      size_t D) {
    for (size_t t = 0; t < T; t++) bf16_from_f32_serial(x16 + t * D, x_h + t * ldx, D);
    return x16;
}

/* One operand of a block product: its type, data and row stride. */
typedef struct attention_operand {
    bt_dtype type;
    const void *p;
    size_t ld;
} attention_operand;

/* x_h (T x D at stride ld) as a product reads it: the fp32 slice itself, or, with x16 (the
 * native bf16 route; room for T x D), its bf16 rounding (attention_round). */
static attention_operand attention_operand_of(bt_bf16 *x16, const float *x_h, size_t ld,
                                              size_t T, size_t D) {
    if (!x16) return (attention_operand){BT_DTYPE_F32, x_h, ld};
    return (attention_operand){BT_DTYPE_BF16, attention_round(x16, x_h, ld, T, D), D};
}

/* c (m x n, row stride ldc) = alpha op(a) op(b) + beta c: one block product. */
static void attention_product(int trans_a, int trans_b, size_t m, size_t n, size_t k,
                              attention_operand a, attention_operand b, float *c, size_t ldc,
                              float alpha, float beta, gemm_compute compute) {
    gemm_args g = {
        .trans_a = trans_a, .trans_b = trans_b, .m = m, .n = n, .k = k,
        .a_type = a.type, .a = a.p, .lda = a.ld, .b_type = b.type, .b = b.p, .ldb = b.ld,
        .c = c, .ldc = ldc, .alpha = alpha, .beta = beta, .compute = compute,
    };
    gemm(&g);
}

/* Row stride of the forward's per-thread fp32 tile on the gemm() routes: Tk rounded up to
 * OPS_LANES floats, so that every row starts on a 64-byte line (rows of Tk = 325 floats
 * straddle lines: the S product's C stores and P·V's A loads) and the row pass's exp and
 * scaling loops have no scalar remainder; P goes to probs by ops_stream_rows. Measured
 * (tests/bench_ops --only attention --rounds 3, 1 thread, "self image T=325 blocks", B 2,
 * dropout 0.1, key mask; with the row pass's fused passes, attention_rows_forward): forward
 * at the AVX512-BF16 caps 7.30-7.38 -> 6.81-6.84 ms per call fp32, 7.71-7.74 -> 6.95-7.02
 * bf16; AVX2 within noise. The backward's dPd/dS tile at this stride measured no faster
 * (10.55 ms per call either way at the AVX512-BF16 caps), so it keeps stride Tk. */
static size_t attention_ldt(size_t Tk) { return (Tk + OPS_LANES - 1) / OPS_LANES * OPS_LANES; }

/* tile (per thread): Tq x Tk fp32 S, then P, at row stride ldt (attention_ldt; columns
 * [Tk, ldt) are the row pass's scratch, zeroed when the tile is allocated), then with dropout room for dropout(P) (Tq x ldt fp32, P·V's
 * operand; one row on the native route, where tile16 is the operand).
 * The scores go to this per-thread tile, which stays in cache from one block to the next,
 * rather than straight into the probs slice: that slice is cold (B*NH*Tq*Tk floats per call,
 * not read again until the backward), and the product stalled on its stores' line reads.
 * After the row pass P goes to probs in one streaming copy (the slice is contiguous: whole
 * lines, no line read; ops_stream_rows packs the padded rows on the way). Measured (1 thread, B 8, T 325, no dropout or mask, min of 3-4):
 * scores into probs 28.4 ms per call native bf16, 41.5 AVX2 fp32; into the tile with each P
 * row copied by the row pass 22.9 / 41.2 (streaming that row copy: 48 ms under AVX2, its
 * rows' partial lines); with the block's streaming copy after the pass, 20.1 -> 19.1 /
 * 40.3 -> 38.3 (with dropout and mask 23.1 -> 21.6 / 43.5 -> 43.3). Same products (only
 * C's address differs), same bits.
 * tile16, on the native bf16 route only (else NULL): Tq x Tk + (Tq + 2 Tk) x D bf16, P·V's
 * operand written in bf16 by the row pass (the bytes gemm would round P or dropout(P) to,
 * without a second pass over it), then the bf16 q_h, k_h, v_h. */
/* S = q_h k_hᵀ / √D into tile (row stride ldt) for block (b, h); q16 / k16 (Tq x D, Tk x D
 * bf16, the native route's rounded operands) or NULL. The forward's product, and the
 * backward's when it recomputes P (probs NULL): one call, so the same bits. */
static void attention_block_scores(float *tile, size_t ldt, const float *q, const float *k,
                                   const attention_dims *d, gemm_compute compute, bt_bf16 *q16,
                                   bt_bf16 *k16, size_t b, size_t h) {
    const size_t Tq = d->Tq, Tk = d->Tk, D = d->D;
    attention_product(0, 1, Tq, Tk, D,
                      attention_operand_of(q16, q + b * Tq * d->ldq + h * D, d->ldq, Tq, D),
                      attention_operand_of(k16, k + b * Tk * d->ldk + h * D, d->ldk, Tk, D),
                      tile, ldt, (float)(1.0 / sqrt((double)D)), 0.0f, compute);
}

static void attention_block_forward(float *out, float *probs, const float *q, const float *k,
                                    const float *v, const float *key_bias,
                                    const attention_dims *d, const ops_drop *dr,
                                    gemm_compute compute, float *tile, size_t ldt,
                                    bt_bf16 *tile16, size_t b, size_t h) {
    const size_t Tq = d->Tq, Tk = d->Tk, D = d->D;
    const size_t pbase = (b * d->NH + h) * Tq * Tk, dbase = attention_drop_base(d, b, h);
    bt_bf16 *q16 = tile16 ? tile16 + Tq * Tk : NULL, *k16 = tile16 ? q16 + Tq * D : NULL;
    bt_bf16 *v16 = tile16 ? k16 + Tk * D : NULL;
    /* S = q_h k_hᵀ / √D + key_bias[b] */
    attention_block_scores(tile, ldt, q, k, d, compute, q16, k16, b, h);
    /* fetched during the row pass: v_h (P·V's operand, or on the native route the rows
     * rounded into v16 after the pass) and the product's cold output rows */
    attention_ahead ahead = {.x = {v + b * Tk * d->ldv + h * D, out + b * Tq * d->ldo + h * D},
                             .ld = {d->ldv, d->ldo}, .rows = {Tk, Tq}, .D = D};
    attention_ahead_begin(&ahead, Tq);
    float *pd = dr->on ? tile + Tq * ldt : NULL;
    attention_rows_forward(tile, ldt, pd, tile16 ? 0 : ldt, tile16, Tk,
                           key_bias ? key_bias + b * Tk : NULL, Tq, Tk, dr, dbase, &ahead);
    if (probs) { /* P to the block's probs slice (contiguous), for the backward */
        ops_stream_rows(probs + pbase, tile, Tq, Tk, ldt);
        ops_stream_fence();
    }
    /* out_h = dropout(P) v_h */
    const attention_operand pv = tile16 ? (attention_operand){BT_DTYPE_BF16, tile16, Tk}
                                        : (attention_operand){BT_DTYPE_F32, pd ? pd : tile, ldt};
    attention_product(0, 0, Tq, D, Tk, pv,
                      attention_operand_of(v16, v + b * Tk * d->ldv + h * D, d->ldv, Tk, D),
                      out + b * Tq * d->ldo + h * D, d->ldo, 1.0f, 0.0f, compute);
}

/* Recomputing P in the backward (probs NULL: the forward kept none; ops.h). ptile: Tq x ldt
 * fp32 (ldt = attention_ldt(Tk), the padding columns zeroed by the caller). The forward's
 * score product (attention_block_scores) and its row pass without a dropout output: the row
 * pass writes P as y = e * (1/Σ) with or without dropout, so P has the bits the forward's
 * had (tests/test_ops_fast.c checks the whole backward against the kept-probs one).
 * Returns ptile. */
static const float *attention_probs_of_scores(float *ptile, size_t ldt, const float *key_bias,
                                              const attention_dims *d, size_t b) {
    const ops_drop none = ops_drop_make(NULL);
    attention_rows_forward(ptile, ldt, NULL, 0, NULL, 0, key_bias ? key_bias + b * d->Tk : NULL,
                           d->Tq, d->Tk, &none, 0, NULL);
    return ptile;
}

static const float *attention_block_recompute(float *ptile, const float *q, const float *k,
                                              const float *key_bias, const attention_dims *d,
                                              gemm_compute compute, bt_bf16 *q16, bt_bf16 *k16,
                                              size_t b, size_t h) {
    const size_t ldt = attention_ldt(d->Tk);
    attention_block_scores(ptile, ldt, q, k, d, compute, q16, k16, b, h);
    return attention_probs_of_scores(ptile, ldt, key_bias, d, b);
}

/* forward, per block: S = q kᵀ/√D + bias, P = softmax(S), Pd = dropout(P), out = Pd v.
 * (beta: 1 accumulates into dq, dk, dv (BT_DX_ADD), 0 assigns them (BT_DX_SET))
 *   dv += Pdᵀ dout;  dPd = dout vᵀ;  dS = P ⊙ (dP - rowsum(dP ⊙ P)), dP = dropout(dPd);
 *   dq += dS k/√D;  dk += dSᵀ q/√D.
 * The dPd product runs first, so one row pass (attention_rows_backward) makes dS and Pd
 * with one mask per row; each product accumulates into its own output, so the order changes
 * no bit. tile: Tq x Tk floats (dPd, then dS), then Tq x Tk more: fp32 Pd (dropout only), or
 * with t16 the bf16 Pd and bf16 dS; prow: Tk floats (one row of fp32 Pd with t16). t16, on
 * the native bf16 route only (else NULL): (2 Tq + 2 Tk) x D bf16 for dout_h, q_h, k_h, v_h.
 * With t16 every product reads bf16 operands, each rounded once (dout_h and dS feed two
 * products each) to the bytes and dense layout gemm's own packing would make
 * (attention_round), so the results are the same bits. */
static void attention_block_backward(float *dq, float *dk, float *dv, const float *dout,
                                     const float *probs, const float *q, const float *k,
                                     const float *v, const float *key_bias,
                                     const attention_dims *d, const ops_drop *dr,
                                     gemm_compute compute, float beta, float *tile, float *prow,
                                     bt_bf16 *t16, float *ptile, size_t b, size_t h) {
    const size_t Tq = d->Tq, Tk = d->Tk, D = d->D;
    const size_t pbase = (b * d->NH + h) * Tq * Tk, dbase = attention_drop_base(d, b, h);
    const float scale = (float)(1.0 / sqrt((double)D));
    bt_bf16 *q16 = t16 ? t16 + Tq * D : NULL, *k16 = t16 ? q16 + Tq * D : NULL;
    bt_bf16 *v16 = t16 ? k16 + Tk * D : NULL;
    /* P: the kept probs slice, or recomputed into ptile (which leaves q16 / k16 holding the
     * forward's rounding of q_h / k_h: the dk and dq products below read them as they are) */
    const float *p = probs ? probs + pbase
                           : attention_block_recompute(ptile, q, k, key_bias, d, compute, q16,
                                                       k16, b, h);
    const int qk16_made = t16 && !probs;
    const size_t ldp = probs ? Tk : attention_ldt(Tk);
    float *ds = dq || dk ? tile : NULL;
    bt_bf16 *pd16 = t16 && dv ? (bt_bf16 *)(tile + Tq * Tk) : NULL;
    bt_bf16 *ds16 = t16 ? (bt_bf16 *)(tile + Tq * Tk) + Tq * Tk : NULL;
    float *pd = dr->on && dv ? (t16 ? prow : tile + Tq * Tk) : NULL;
    const attention_operand od =
        attention_operand_of(t16, dout + b * Tq * d->ldo + h * D, d->ldo, Tq, D);
    if (ds) /* dPd = dout_h v_hᵀ */
        attention_product(0, 1, Tq, Tk, D, od,
                          attention_operand_of(v16, v + b * Tk * d->ldv + h * D, d->ldv, Tk, D),
                          ds, Tk, 1.0f, 0.0f, compute);
    attention_rows_backward(ds, Tk, pd, t16 ? 0 : Tk, pd16, ds16, Tk, p, ldp, Tq, Tk, dr, dbase,
                            NULL);
    if (dv) { /* dv_h += Pdᵀ dout_h */
        const attention_operand a = pd16 ? (attention_operand){BT_DTYPE_BF16, pd16, Tk}
                                 : pd    ? (attention_operand){BT_DTYPE_F32, pd, Tk}
                                         : (attention_operand){BT_DTYPE_F32, p, ldp};
        attention_product(1, 0, Tk, D, Tq, a, od, dv + b * Tk * d->ldv + h * D, d->ldv, 1.0f,
                          beta, compute);
    }
    const attention_operand dS = ds16 ? (attention_operand){BT_DTYPE_BF16, ds16, Tk}
                                      : (attention_operand){BT_DTYPE_F32, ds, Tk};
    if (dq) /* dq_h += dS k_h / √D */
        attention_product(0, 0, Tq, D, Tk, dS,
                          qk16_made ? (attention_operand){BT_DTYPE_BF16, k16, D}
                                    : attention_operand_of(k16, k + b * Tk * d->ldk + h * D,
                                                           d->ldk, Tk, D),
                          dq + b * Tq * d->ldq + h * D, d->ldq, scale, beta, compute);
    if (dk) /* dk_h += dSᵀ q_h / √D */
        attention_product(1, 0, Tk, D, Tq, dS,
                          qk16_made ? (attention_operand){BT_DTYPE_BF16, q16, D}
                                    : attention_operand_of(q16, q + b * Tq * d->ldq + h * D,
                                                           d->ldq, Tq, D),
                          dk + b * Tk * d->ldk + h * D, d->ldk, scale, beta, compute);
}

/* --- the block products on AMX tiles (attention_amx.h) or AVX512-BF16 (attention_dpbf16.h) ---
 * On the native bf16 route, when the CPU has AMX-BF16 and oneDNN itself runs at its AMX level
 * (a DNNL_MAX_CPU_ISA / BT_CPU_ISA cap below AMX keeps these off), the block's products run
 * as attention_amx_gemm() calls instead of gemm(): no primitive lookup, no packing into
 * oneDNN's layouts, no copy of a strided C. Each operand is rounded to bf16 once per block
 * (bf16_from_f32_serial, the bytes of the gemm route's operands) straight into the layout
 * the tiles load: A "rows" (K contiguous, padded to 32 with zeros), B "VNNI" (pairs of K
 * rows interleaved). The row passes write P and dS as A rows (row stride padded to 32, the
 * padding zero) and, in the backward, Pd and dS as VNNI B a row pair at a time while the
 * rows are in L1. Rows of an A past its m (up to the next 16) are loaded but reach no stored
 * element of C, so they are left as they are. Products whose A would be a transpose (dv =
 * Pdᵀ dout, dk = dSᵀ q) are computed transposed (dvᵀ = doutᵀ Pd, stored transposed).
 * Where oneDNN runs at avx512_core_bf16 instead (a CPU with AVX512-BF16 and no AMX, or AMX
 * capped to it), the same operands go to attention_dpbf16_gemm() (vdpbf16ps), which reads
 * the A of dv and dk straight from Pd's and dS's VNNI layout (attention_tile_gemm_at) and
 * stores every C plain.
 * The results are the same bits as the gemm route's (oneDNN 2.6's AMX and avx512_core_bf16
 * kernels sum K in the same order; tests/test_attention_tiles.c checks it and compares both
 * with the reference). Selected by ops_attention_products_select / BT_ATTENTION_PRODUCTS
 * ("auto", "amx", "avx512_bf16", "gemm"); auto is whichever of the two may run
 * (docs/benchmarks.md, "Session 7: AMX attention products" and "Session 16: attention's
 * block products on AVX512-BF16", for the measurements). */

/* Which products the blocks use. One setting shared by every ISA variant unit. */
typedef enum { OPS_PROD_AUTO, OPS_PROD_AMX, OPS_PROD_DPBF16, OPS_PROD_GEMM } ops_prod_mode;
extern ops_prod_mode ops_attention_products;
#ifndef OPS_VARIANT
ops_prod_mode ops_attention_products = OPS_PROD_AUTO;
#endif
/* 1 when AMX products may run: AMX-BF16 granted and oneDNN's ISA is avx512_core_amx (the
 * library's unit; cached). */
int ops_attention_amx_eligible(void);
/* 1 when AVX512-BF16 products (attention_dpbf16.h) may run: the CPU runs AVX512-BF16 and
 * oneDNN's ISA is avx512_core_bf16, whose kernels they give the bits of (cached). */
int ops_attention_dpbf16_eligible(void);

/* 1 when a call with this compute runs its block products on the tile layouts: AMX products
 * where those may run, else AVX512-BF16 ones (at most one of the two is eligible: each needs
 * its own oneDNN ISA), each unless the setting names another. */
static int attention_tiles_use(gemm_compute compute) {
    if (ops_attention_products == OPS_PROD_GEMM || !ops_bf16_native(compute)) return 0;
    if (ops_attention_amx_eligible()) return ops_attention_products != OPS_PROD_DPBF16;
    return ops_attention_products != OPS_PROD_AMX && ops_attention_dpbf16_eligible();
}

/* One block product on the tile layouts (attention_amx.h): C = alpha A·B + beta C, K = k
 * (the operands padded to attention_amx_r32(k)); AMX tiles where they may run, else
 * AVX512-BF16 (attention_tiles_use said one of them runs). */
static void attention_tile_gemm(float *c, size_t ldc, int c_trans, const bt_bf16 *a, size_t lda,
                                const bt_bf16 *b, size_t ldb, size_t m, size_t n, size_t k,
                                float alpha, float beta) {
    if (ops_attention_amx_eligible())
        attention_amx_gemm(c, ldc, c_trans, a, lda, b, ldb, m, n, attention_amx_r32(k), alpha,
                           beta);
    else
        attention_dpbf16_gemm(c, ldc, (attention_dpbf16_a){a, lda / 2, 1}, b, ldb, m, n, k,
                              alpha, beta);
}

/* c (Tk x D at stride ldc) = alpha xᵀ y + beta c: the backward's dv = Pdᵀ dout_h and
 * dk = dSᵀ q_h, with xv the VNNI layout of x (Tq x Tk: K = Tq in pairs of rows, row stride
 * ldxv; the row pass writes it) and y (Tq x D fp32 at stride ldy), packed into yp (room for
 * attention_amx_r16(D) x attention_amx_r32(Tq) bf16; tmp: the packing scratch). AMX tiles
 * compute cᵀ = yᵀ x (yᵀ as A rows, xv as B, C stored transposed); AVX512-BF16 reads xv as the
 * A of the plain product (dword (j, r) at r ldxv/2 + j: the six rows of a block are neighbours
 * in one line) with y as VNNI B. The same pairs of K in the same order: the same sums. */
static void attention_tile_gemm_at(float *c, size_t ldc, const bt_bf16 *xv, size_t ldxv,
                                   const float *y, size_t ldy, bt_bf16 *yp, bt_bf16 *tmp,
                                   size_t D, size_t Tk, size_t Tq, float alpha, float beta) {
    const size_t D16 = attention_amx_r16(D), Tqp = attention_amx_r32(Tq);
    if (ops_attention_amx_eligible()) {
        attention_amx_pack_rows_t(yp, Tqp, y, ldy, Tq, D, Tqp, tmp);
        attention_amx_gemm(c, ldc, 1, yp, Tqp, xv, ldxv, D, Tk, Tqp, alpha, beta);
    } else {
        attention_amx_pack_vnni(yp, 2 * D16, y, ldy, Tq, D, Tqp, tmp);
        attention_dpbf16_gemm(c, ldc, (attention_dpbf16_a){xv, 1, ldxv / 2}, yp, 2 * D16, Tk, D,
                              Tq, alpha, beta);
    }
}

/* Sizes of a block's tile operands: r16 / r32 are the sizes rounded up to 16 (an m or n
 * edge: whole tiles are loaded) and 32 (a K: bf16 pairs of 16 dwords). */
typedef struct attention_tiles_dims {
    size_t Tq16, Tk16, D16, Tqp, Tkp, Dp;
} attention_tiles_dims;

static attention_tiles_dims attention_tiles_dims_of(const attention_dims *d) {
    return (attention_tiles_dims){attention_amx_r16(d->Tq), attention_amx_r16(d->Tk),
                                  attention_amx_r16(d->D),  attention_amx_r32(d->Tq),
                                  attention_amx_r32(d->Tk), attention_amx_r32(d->D)};
}

/* bf16 elements of packing scratch (the most any pack call of a block needs) */
static size_t attention_tiles_tmp_n(const attention_tiles_dims *z) {
    size_t n = 2 * (z->Tk16 > z->D16 ? z->Tk16 : z->D16); /* pack_vnni */
    const size_t t = attention_amx_rows_t_tmp(z->D16, z->Tqp),
                 v = attention_amx_vnni_t_tmp(z->Tk16, z->Dp);
    return n > t ? (n > v ? n : v) : (t > v ? t : v);
}

/* Per-thread bf16 elements of the forward: P (Tq16 x Tkp, A rows), q_h (Tq16 x Dp, A rows),
 * k_hᵀ (Dp/2 x 2 Tk16, VNNI), v_h (Tkp/2 x 2 D16, VNNI), packing row. */
static size_t attention_tiles_fwd_n(const attention_dims *d) {
    const attention_tiles_dims z = attention_tiles_dims_of(d);
    return z.Tq16 * z.Tkp + z.Tq16 * z.Dp + z.Dp * z.Tk16 + z.Tkp * z.D16 +
           attention_tiles_tmp_n(&z);
}

/* Bytes of one thread's scratch for the tile blocks: `floats` fp32, then `bf16` bf16 from
 * *tile_b on. Both parts start on a cache line, so every tile row is whole lines (the row
 * strides are multiples of 32 bf16); misaligned, each row of a tile load spans two lines,
 * and the products took 2.5x as long (325 x 64 x 325: 24 -> 9.3 us). */
static size_t attention_tiles_thread_bytes(size_t floats, size_t bf16, size_t *tile_b) {
    *tile_b = (floats * sizeof(float) + 63) / 64 * 64;
    return (*tile_b + bf16 * sizeof(bt_bf16) + 63) / 64 * 64;
}

/* S = q_h k_hᵀ / √D into tile (row stride ldt) by a tile product: q_h packed as A rows into qa
 * (Tq16 x Dp), k_hᵀ as VNNI B into kb (Dp/2 x 2 Tk16), tmp the packing scratch. The
 * forward's product and, with probs NULL, the backward's recompute of it (the same bits). */
static void attention_tiles_scores(float *tile, size_t ldt, bt_bf16 *qa, bt_bf16 *kb,
                                   bt_bf16 *tmp, const float *q, const float *k,
                                   const attention_dims *d, size_t b, size_t h) {
    const size_t Tq = d->Tq, Tk = d->Tk, D = d->D;
    const attention_tiles_dims z = attention_tiles_dims_of(d);
    attention_amx_pack_rows(qa, z.Dp, q + b * Tq * d->ldq + h * D, d->ldq, Tq, D, z.Dp);
    attention_amx_pack_vnni_t(kb, 2 * z.Tk16, k + b * Tk * d->ldk + h * D, d->ldk, Tk, D, z.Dp,
                              tmp);
    attention_tile_gemm(tile, ldt, 0, qa, z.Dp, kb, 2 * z.Tk16, Tq, Tk, D,
                        (float)(1.0 / sqrt((double)D)), 0.0f);
}

/* attention_block_forward with tile products (AMX or AVX512-BF16). tile: Tq x Tk fp32 (S,
 * then P) at row stride attention_ldt(Tk) (as on the gemm() routes; measured on AMX 4.50-4.55
 * -> 4.02-4.04 ms per forward call, native bf16, 1 thread, B 2, T 325, dropout 0.1, key mask,
 * min of 20 calls; 4.47-4.49 -> 3.94-4.05 without the mask), + Tk (one row of dropout(P));
 * w: attention_tiles_fwd_n bf16, 64-byte aligned. */
static void attention_block_forward_tiles(float *out, float *probs, const float *q,
                                          const float *k, const float *v, const float *key_bias,
                                          const attention_dims *d, const ops_drop *dr,
                                          float *tile, bt_bf16 *w, size_t b, size_t h) {
    const size_t Tq = d->Tq, Tk = d->Tk, D = d->D;
    const attention_tiles_dims z = attention_tiles_dims_of(d);
    const size_t pbase = (b * d->NH + h) * Tq * Tk, ldt = attention_ldt(Tk);
    const size_t dbase = attention_drop_base(d, b, h);
    bt_bf16 *p16 = w, *qa = p16 + z.Tq16 * z.Tkp, *kb = qa + z.Tq16 * z.Dp;
    bt_bf16 *vb = kb + z.Dp * z.Tk16, *tmp = vb + z.Tkp * z.D16;
    const float *v_h = v + b * Tk * d->ldv + h * D;
    float *out_h = out + b * Tq * d->ldo + h * D;
    /* S = q_h k_hᵀ / √D */
    attention_tiles_scores(tile, ldt, qa, kb, tmp, q, k, d, b, h);
    attention_ahead ahead = {.x = {v_h, out_h}, .ld = {d->ldv, d->ldo}, .rows = {Tk, Tq}, .D = D};
    attention_ahead_begin(&ahead, Tq);
    attention_rows_forward(tile, ldt, dr->on ? tile + Tq * ldt : NULL, 0, p16, z.Tkp,
                           key_bias ? key_bias + b * Tk : NULL, Tq, Tk, dr, dbase, &ahead);
    if (probs) {
        ops_stream_rows(probs + pbase, tile, Tq, Tk, ldt);
        ops_stream_fence();
    }
    /* out_h = dropout(P) v_h */
    attention_amx_pack_vnni(vb, 2 * z.D16, v_h, d->ldv, Tk, D, z.Tkp, tmp);
    attention_tile_gemm(out_h, d->ldo, 0, p16, z.Tkp, vb, 2 * z.D16, Tq, D, Tk, 1.0f, 0.0f);
}

/* Per-thread bf16 elements of the backward: two rows of bf16 Pd (2 x Tkp), dS as A rows
 * (Tq16 x Tkp), Pd and dS as VNNI B (2 x Tqp/2 x 2 Tk16), dout_h as A rows (Tq16 x Dp) and
 * transposed (D16 x Tqp), v_hᵀ VNNI (Dp/2 x 2 Tk16), k_h VNNI (Tkp/2 x 2 D16), q_hᵀ A rows
 * (D16 x Tqp), packing scratch. */
static size_t attention_tiles_bwd_n(const attention_dims *d) {
    const attention_tiles_dims z = attention_tiles_dims_of(d);
    return 2 * z.Tkp + z.Tq16 * z.Tkp + 2 * z.Tqp * z.Tk16 + z.Tq16 * z.Dp + 2 * z.D16 * z.Tqp +
           z.Dp * z.Tk16 + z.Tkp * z.D16 + attention_tiles_tmp_n(&z);
}

/* attention_block_backward with tile products (the same formulas, in the same order).
 * tile: Tq x Tk16 fp32 (dPd, then dS; rows of whole cache lines, where the product's tile
 * stores go: 325 x 325 x 64 took 17.7 us into rows of 325 floats, 12.5 us into rows of 336),
 * + Tk (one row of fp32 Pd); w: attention_tiles_bwd_n bf16, 64-byte aligned. */
static void attention_block_backward_tiles(float *dq, float *dk, float *dv, const float *dout,
                                           const float *probs, const float *q, const float *k,
                                           const float *v, const float *key_bias,
                                           const attention_dims *d, const ops_drop *dr,
                                           float beta, float *tile, bt_bf16 *w, float *ptile,
                                           size_t b, size_t h) {
    const size_t Tq = d->Tq, Tk = d->Tk, D = d->D;
    const attention_tiles_dims z = attention_tiles_dims_of(d);
    const size_t pbase = (b * d->NH + h) * Tq * Tk, dbase = attention_drop_base(d, b, h);
    const float scale = (float)(1.0 / sqrt((double)D));
    bt_bf16 *pd16 = w, *ds16 = pd16 + 2 * z.Tkp, *pdv = ds16 + z.Tq16 * z.Tkp;
    bt_bf16 *dsv = pdv + z.Tqp * z.Tk16, *oa = dsv + z.Tqp * z.Tk16, *ot = oa + z.Tq16 * z.Dp;
    bt_bf16 *vt = ot + z.D16 * z.Tqp, *kv = vt + z.Dp * z.Tk16, *qt = kv + z.Tkp * z.D16;
    bt_bf16 *tmp = qt + z.D16 * z.Tqp;
    const float *dout_h = dout + b * Tq * d->ldo + h * D, *q_h = q + b * Tq * d->ldq + h * D;
    const float *k_h = k + b * Tk * d->ldk + h * D, *v_h = v + b * Tk * d->ldv + h * D;
    /* P: the kept probs slice, or recomputed into ptile (Tq x attention_ldt(Tk)) with oa and
     * vt, packed again below, as the score product's operands */
    const float *p = probs + pbase;
    size_t ldp = Tk;
    if (!probs) {
        ldp = attention_ldt(Tk);
        attention_tiles_scores(ptile, ldp, oa, vt, tmp, q, k, d, b, h);
        p = attention_probs_of_scores(ptile, ldp, key_bias, d, b);
    }
    float *ds = dq || dk ? tile : NULL;
    if (ds) { /* dPd = dout_h v_hᵀ */
        attention_amx_pack_rows(oa, z.Dp, dout_h, d->ldo, Tq, D, z.Dp);
        attention_amx_pack_vnni_t(vt, 2 * z.Tk16, v_h, d->ldv, Tk, D, z.Dp, tmp);
        attention_tile_gemm(ds, z.Tk16, 0, oa, z.Dp, vt, 2 * z.Tk16, Tq, Tk, D, 1.0f, 0.0f);
    }
    /* dS (and Pd) as A rows and, in the same pass, as VNNI B */
    const attention_vnni vnni = {.pd = dv ? pdv : NULL, .ds = dk ? dsv : NULL,
                                 .ld = 2 * z.Tk16, .n16 = z.Tk16, .rows = z.Tqp / 2};
    attention_rows_backward(ds, z.Tk16, dr->on && dv ? tile + Tq * z.Tk16 : NULL, 0,
                            dv ? pd16 : NULL, ds ? ds16 : NULL, z.Tkp, p, ldp, Tq, Tk, dr, dbase,
                            &vnni);
    if (dv) /* dv_h += Pdᵀ dout_h (AMX: dv_hᵀ += dout_hᵀ Pd) */
        attention_tile_gemm_at(dv + b * Tk * d->ldv + h * D, d->ldv, pdv, 2 * z.Tk16, dout_h,
                               d->ldo, ot, tmp, D, Tk, Tq, 1.0f, beta);
    if (dq) { /* dq_h += dS k_h / √D */
        attention_amx_pack_vnni(kv, 2 * z.D16, k_h, d->ldk, Tk, D, z.Tkp, tmp);
        attention_tile_gemm(dq + b * Tq * d->ldq + h * D, d->ldq, 0, ds16, z.Tkp, kv, 2 * z.D16,
                            Tq, D, Tk, scale, beta);
    }
    if (dk) /* dk_h += dSᵀ q_h / √D (AMX: dk_hᵀ += q_hᵀ dS / √D) */
        attention_tile_gemm_at(dk + b * Tk * d->ldk + h * D, d->ldk, dsv, 2 * z.Tk16, q_h,
                               d->ldq, qt, tmp, D, Tk, Tq, scale, beta);
}

/* S of batch item b's NH heads into pb (NH, Tq, Tk): one batched gemm(). The forward's and,
 * with probs NULL, the backward's recompute of it. */
static void attention_batched_scores(float *pb, const float *q, const float *k,
                                     const attention_dims *d, gemm_compute compute, size_t b) {
    const size_t Tq = d->Tq, Tk = d->Tk, D = d->D;
    gemm_args s = {
        .trans_a = 0, .trans_b = 1, .m = Tq, .n = Tk, .k = D,
        .a_type = BT_DTYPE_F32, .a = q + b * Tq * d->ldq, .lda = d->ldq,
        .b_type = BT_DTYPE_F32, .b = k + b * Tk * d->ldk, .ldb = d->ldk,
        .c = pb, .ldc = Tk, .alpha = (float)(1.0 / sqrt((double)D)), .beta = 0.0f,
        .compute = compute, .batch = d->NH, .stride_a = D, .stride_b = D, .stride_c = Tq * Tk,
    };
    gemm(&s);
}

/* Strategy (b): batch items one after another; per item, the NH heads' products are one
 * batched gemm() (heads are column slices: stride D), which threads internally; the row
 * work is an OpenMP loop over heads. Scratch holds NH tiles. */
static void attention_forward_batched(float *out, float *probs, const float *q, const float *k,
                                      const float *v, const float *key_bias,
                                      const attention_dims *d, const ops_drop *dr,
                                      gemm_compute compute) {
    const size_t Tq = d->Tq, Tk = d->Tk, D = d->D, NH = d->NH, blk = Tq * Tk;
    float *tile = dr->on ? bt_alloc(NH * blk * sizeof(float)) : NULL;
    float *own = probs ? NULL : bt_alloc(NH * blk * sizeof(float)); /* P not kept: one item's */
    for (size_t b = 0; b < d->B; b++) {
        float *pb = probs ? probs + b * NH * blk : own; /* (NH, Tq, Tk) */
        attention_batched_scores(pb, q, k, d, compute, b);
        OPS_OMP(omp parallel for schedule(static) if (NH * blk >= OPS_PAR_MIN))
        for (size_t h = 0; h < NH; h++)
            attention_rows_forward(pb + h * blk, Tk, tile ? tile + h * blk : NULL, Tk, NULL, 0,
                                   key_bias ? key_bias + b * Tk : NULL, Tq, Tk, dr,
                                   attention_drop_base(d, b, h), NULL);
        gemm_args o = {
            .trans_a = 0, .trans_b = 0, .m = Tq, .n = D, .k = Tk,
            .a_type = BT_DTYPE_F32, .a = tile ? tile : pb, .lda = Tk,
            .b_type = BT_DTYPE_F32, .b = v + b * Tk * d->ldv, .ldb = d->ldv,
            .c = out + b * Tq * d->ldo, .ldc = d->ldo, .alpha = 1.0f, .beta = 0.0f,
            .compute = compute, .batch = NH, .stride_a = blk, .stride_b = D, .stride_c = D,
        };
        gemm(&o);
    }
    bt_free(tile);
    bt_free(own);
}

static void attention_backward_batched(float *dq, float *dk, float *dv, const float *dout,
                                       const float *probs, const float *q, const float *k,
                                       const float *v, const float *key_bias,
                                       const attention_dims *d, const ops_drop *dr,
                                       gemm_compute compute, float beta) {
    const size_t Tq = d->Tq, Tk = d->Tk, D = d->D, NH = d->NH, blk = Tq * Tk;
    const float scale = (float)(1.0 / sqrt((double)D));
    float *ds = bt_alloc(NH * blk * sizeof(float));
    float *pd = dr->on && dv ? bt_alloc(NH * blk * sizeof(float)) : NULL;
    float *own = probs ? NULL : bt_alloc(NH * blk * sizeof(float)); /* P recomputed: one item's */
    const ops_drop none = ops_drop_make(NULL);
    for (size_t b = 0; b < d->B; b++) {
        const float *pb = probs ? probs + b * NH * blk : own;
        if (!probs) { /* the forward's products and row passes, without a dropout output */
            attention_batched_scores(own, q, k, d, compute, b);
            OPS_OMP(omp parallel for schedule(static) if (NH * blk >= OPS_PAR_MIN))
            for (size_t h = 0; h < NH; h++)
                attention_rows_forward(own + h * blk, Tk, NULL, 0, NULL, 0,
                                       key_bias ? key_bias + b * Tk : NULL, Tq, Tk, &none, 0, NULL);
        }
        const float *dout_b = dout + b * Tq * d->ldo;
        if (dv) { /* dv_h += Pd_hᵀ dout_h */
            if (pd)
                OPS_FOR_CHUNKS(NH * blk, lo, len,
                               dropout_span(pd + lo, pb + lo, len, dr, b * NH * blk + lo));
            gemm_args g = {
                .trans_a = 1, .trans_b = 0, .m = Tk, .n = D, .k = Tq,
                .a_type = BT_DTYPE_F32, .a = pd ? pd : pb, .lda = Tk,
                .b_type = BT_DTYPE_F32, .b = dout_b, .ldb = d->ldo,
                .c = dv + b * Tk * d->ldv, .ldc = d->ldv, .alpha = 1.0f, .beta = beta,
                .compute = compute, .batch = NH, .stride_a = blk, .stride_b = D, .stride_c = D,
            };
            gemm(&g);
        }
        if (!dq && !dk) continue;
        gemm_args g = { /* dPd_h = dout_h v_hᵀ */
            .trans_a = 0, .trans_b = 1, .m = Tq, .n = Tk, .k = D,
            .a_type = BT_DTYPE_F32, .a = dout_b, .lda = d->ldo,
            .b_type = BT_DTYPE_F32, .b = v + b * Tk * d->ldv, .ldb = d->ldv,
            .c = ds, .ldc = Tk, .alpha = 1.0f, .beta = 0.0f, .compute = compute,
            .batch = NH, .stride_a = D, .stride_b = D, .stride_c = blk,
        };
        gemm(&g);
        OPS_OMP(omp parallel for schedule(static) if (NH * blk >= OPS_PAR_MIN))
        for (size_t h = 0; h < NH; h++)
            attention_rows_backward(ds + h * blk, Tk, NULL, 0, NULL, NULL, 0, pb + h * blk, Tk, Tq,
                                    Tk, dr, attention_drop_base(d, b, h), NULL);
        if (dq) { /* dq_h += dS_h k_h / √D */
            gemm_args gq = {
                .trans_a = 0, .trans_b = 0, .m = Tq, .n = D, .k = Tk,
                .a_type = BT_DTYPE_F32, .a = ds, .lda = Tk,
                .b_type = BT_DTYPE_F32, .b = k + b * Tk * d->ldk, .ldb = d->ldk,
                .c = dq + b * Tq * d->ldq, .ldc = d->ldq, .alpha = scale, .beta = beta,
                .compute = compute, .batch = NH, .stride_a = blk, .stride_b = D, .stride_c = D,
            };
            gemm(&gq);
        }
        if (dk) { /* dk_h += dS_hᵀ q_h / √D */
            gemm_args gk = {
                .trans_a = 1, .trans_b = 0, .m = Tk, .n = D, .k = Tq,
                .a_type = BT_DTYPE_F32, .a = ds, .lda = Tk,
                .b_type = BT_DTYPE_F32, .b = q + b * Tq * d->ldq, .ldb = d->ldq,
                .c = dk + b * Tk * d->ldk, .ldc = d->ldk, .alpha = scale, .beta = beta,
                .compute = compute, .batch = NH, .stride_a = blk, .stride_b = D, .stride_c = D,
            };
            gemm(&gk);
        }
    }
    bt_free(ds);
    bt_free(pd);
    bt_free(own);
}

static void attention_check(const attention_dims *d) {
    BT_ASSERT(d != NULL);
    BT_ASSERT(d->B > 0 && d->Tq > 0 && d->Tk > 0 && d->NH > 0 && d->D > 0);
    const size_t c = d->NH * d->D;
    BT_ASSERT(d->ldq >= c && d->ldk >= c && d->ldv >= c && d->ldo >= c);
}

/* Zeroes the padding columns [Tk, ldt) of each thread's Tq x ldt tile (at tiles + t stride):
 * the row pass's exp runs over them, and uninitialized bytes could be subnormal (slow). */
static void attention_tiles_pad(char *tiles, int nthr, size_t stride, size_t Tq, size_t Tk,
                                size_t ldt) {
    for (int t = 0; t < nthr; t++)
        for (size_t i = 0; i < Tq; i++)
            memset((float *)(tiles + (size_t)t * stride) + i * ldt + Tk, 0,
                   (ldt - Tk) * sizeof(float));
}

static void attention_forward_fast(float *out, float *probs, const float *q, const float *k,
                                   const float *v, const float *key_bias,
                                   const attention_dims *d, const bt_dropout *drop,
                                   gemm_compute compute) {
    attention_check(d);
    BT_ASSERT(out && q && k && v); /* probs NULL: P not kept (ops.h) */
    const ops_drop dr = ops_drop_make(drop);
    if (ops_attention_resolve() == OPS_ATTN_GEMM) {
        attention_forward_batched(out, probs, q, k, v, key_bias, d, &dr, compute);
        return;
    }
    const size_t nblk = d->B * d->NH;
    const int par = nblk > 1 && d->Tq * d->Tk * d->D >= OPS_PAR_MIN / 8;
    const int nthr = par ? ops_max_threads() : 1;
    const size_t ldt = attention_ldt(d->Tk);
    if (attention_tiles_use(compute)) { /* per thread: Tq x ldt + Tk floats, then the bf16 */
        size_t tile_b;
        const size_t stride =
            attention_tiles_thread_bytes(d->Tq * ldt + d->Tk, attention_tiles_fwd_n(d), &tile_b);
        char *tiles = bt_alloc((size_t)nthr * stride);
        attention_tiles_pad(tiles, nthr, stride, d->Tq, d->Tk, ldt);
        OPS_OMP(omp parallel for schedule(dynamic, 1) if (par))
        for (size_t blk = 0; blk < nblk; blk++) {
            char *mine = tiles + (size_t)ops_thread_num() * stride;
            attention_block_forward_tiles(out, probs, q, k, v, key_bias, d, &dr, (float *)mine,
                                          (bt_bf16 *)(mine + tile_b), blk / d->NH, blk % d->NH);
        }
        bt_free(tiles);
        return;
    }
    /* per thread: the fp32 tile (Tq x ldt), dropout(P) (Tq x ldt, or one row on the native
     * route) and tile16 */
    const int native = ops_bf16_native(compute);
    const size_t tile_n = d->Tq * ldt + (dr.on ? (native ? ldt : d->Tq * ldt) : 0);
    const size_t tile16_n = native ? d->Tq * d->Tk + (d->Tq + 2 * d->Tk) * d->D : 0;
    const size_t stride = (tile_n * sizeof(float) + tile16_n * sizeof(bt_bf16) + 63) / 64 * 64;
    char *tiles = bt_alloc((size_t)nthr * stride);
    attention_tiles_pad(tiles, nthr, stride, d->Tq, d->Tk, ldt);
    OPS_OMP(omp parallel for schedule(dynamic, 1) if (par))
    for (size_t blk = 0; blk < nblk; blk++) {
        char *mine = tiles + (size_t)ops_thread_num() * stride;
        bt_bf16 *tile16 = tile16_n ? (bt_bf16 *)(mine + tile_n * sizeof(float)) : NULL;
        attention_block_forward(out, probs, q, k, v, key_bias, d, &dr, compute, (float *)mine,
                                ldt, tile16, blk / d->NH, blk % d->NH);
    }
    bt_free(tiles);
}

static void attention_backward_fast(float *dq, float *dk, float *dv, const float *dout,
                                    const float *probs, const float *q, const float *k,
                                    const float *v, const float *key_bias,
                                    const attention_dims *d, const bt_dropout *drop,
                                    gemm_compute compute, bt_dx_mode mode) {
    attention_check(d);
    BT_ASSERT(dout && q && k && v); /* probs NULL: P recomputed (ops.h) */
    if (!dq && !dk && !dv) return;
    const ops_drop dr = ops_drop_make(drop);
    const float beta = mode == BT_DX_ADD ? 1.0f : 0.0f;
    if (ops_attention_resolve() == OPS_ATTN_GEMM) {
        attention_backward_batched(dq, dk, dv, dout, probs, q, k, v, key_bias, d, &dr, compute,
                                   beta);
        return;
    }
    const size_t nblk = d->B * d->NH;
    const int par = nblk > 1 && d->Tq * d->Tk * d->D >= OPS_PAR_MIN / 8;
    const int nthr = par ? ops_max_threads() : 1;
    /* without probs, per thread also the recomputed P: Tq x ldt floats, the padding zeroed */
    const size_t ldt = attention_ldt(d->Tk);
    const size_t ptile_b = probs ? 0 : (d->Tq * ldt * sizeof(float) + 63) / 64 * 64;
    if (attention_tiles_use(compute)) { /* per thread: Tq x Tk16 + Tk floats, then the bf16 */
        size_t tile_b;
        const size_t stride = ptile_b + attention_tiles_thread_bytes(
                                            d->Tq * attention_amx_r16(d->Tk) + d->Tk,
                                            attention_tiles_bwd_n(d), &tile_b);
        char *tiles = bt_alloc((size_t)nthr * stride);
        if (ptile_b) attention_tiles_pad(tiles, nthr, stride, d->Tq, d->Tk, ldt);
        OPS_OMP(omp parallel for schedule(dynamic, 1) if (par))
        for (size_t blk = 0; blk < nblk; blk++) {
            char *mine = tiles + (size_t)ops_thread_num() * stride, *rest = mine + ptile_b;
            attention_block_backward_tiles(dq, dk, dv, dout, probs, q, k, v, key_bias, d, &dr,
                                           beta, (float *)rest, (bt_bf16 *)(rest + tile_b),
                                           (float *)mine, blk / d->NH, blk % d->NH);
        }
        bt_free(tiles);
        return;
    }
    /* per thread: the recomputed P (ptile_b), 2 Tq x Tk floats (tile), Tk floats (row
     * scratch), and on the native route (2 Tq + 2 Tk) x D bf16 */
    const int native = ops_bf16_native(compute);
    const size_t tile_b = 2 * d->Tq * d->Tk * sizeof(float);
    const size_t rows_b = d->Tk * sizeof(float);
    const size_t t16_b = native ? 2 * (d->Tq + d->Tk) * d->D * sizeof(bt_bf16) : 0;
    const size_t stride = (ptile_b + tile_b + rows_b + t16_b + 63) / 64 * 64;
    char *tiles = bt_alloc((size_t)nthr * stride);
    if (ptile_b) attention_tiles_pad(tiles, nthr, stride, d->Tq, d->Tk, ldt);
    OPS_OMP(omp parallel for schedule(dynamic, 1) if (par))
    for (size_t blk = 0; blk < nblk; blk++) {
        char *mine = tiles + (size_t)ops_thread_num() * stride, *rest = mine + ptile_b;
        const size_t b = blk / d->NH, h = blk % d->NH;
        attention_block_backward(dq, dk, dv, dout, probs, q, k, v, key_bias, d, &dr, compute,
                                 beta, (float *)rest, (float *)(rest + tile_b),
                                 native ? (bt_bf16 *)(rest + tile_b + rows_b) : NULL,
                                 (float *)mine, b, h);
    }
    bt_free(tiles);
}

/* --- embedding ------------------------------------------------------------------------------ */

static void embedding_check_ids(const int32_t *ids, size_t n, size_t rows) {
    for (size_t i = 0; i < n; i++)
        BT_ASSERTF(ids[i] >= 0 && (size_t)ids[i] < rows,
                   "embedding id %d at %zu outside [0, %zu)", (int)ids[i], i, rows);
}

static void embedding_forward_fast(float *out, const int32_t *ids, const float *table, size_t n,
                                   size_t c, size_t rows) {
    BT_ASSERT(n == 0 || (out && ids && table));
    embedding_check_ids(ids, n, rows);
    OPS_OMP(omp parallel for schedule(static) if (n * c >= OPS_PAR_MIN))
    for (size_t i = 0; i < n; i++)
        memcpy(out + i * c, table + (size_t)ids[i] * c, c * sizeof(float));
}

OPS_VEC static void embedding_scatter_cols(float *dtable, const float *dout, const int32_t *ids,
                                           size_t n, size_t c, int32_t padding_idx, size_t j0,
                                           size_t w) {
    for (size_t i = 0; i < n; i++) {
        if (ids[i] == padding_idx) continue;
        float *dst = dtable + (size_t)ids[i] * c + j0;
        const float *src = dout + i * c + j0;
        for (size_t j = 0; j < w; j++) dst[j] += src[j];
    }
}

/* forward: out[i] = table[ids[i]]  ->  dtable[ids[i]] += dout[i]. Threads own column ranges
 * and walk the rows in order: repeated ids never race and sums are deterministic. */
static void embedding_backward_fast(float *dtable, const float *dout, const int32_t *ids,
                                    size_t n, size_t c, size_t rows, int32_t padding_idx) {
    if (!dtable) return;
    BT_ASSERT(n == 0 || (dout && ids));
    embedding_check_ids(ids, n, rows);
    const size_t ncb = (c + OPS_COLS - 1) / OPS_COLS;
    OPS_OMP(omp parallel for schedule(static) if (n * c >= OPS_PAR_MIN && ncb > 1))
    for (size_t cb = 0; cb < ncb; cb++)
        embedding_scatter_cols(dtable, dout, ids, n, c, padding_idx, cb * OPS_COLS,
                               ops_min(OPS_COLS, c - cb * OPS_COLS));
}

/* --- bias add, residual --------------------------------------------------------------------- */

OPS_VEC static void bias_add_rows(float *out, const float *x, const float *bias, size_t rows,
                                  size_t c) {
    for (size_t i = 0; i < rows; i++)
        for (size_t j = 0; j < c; j++) out[i * c + j] = x[i * c + j] + bias[j];
}

static void bias_add_forward_fast(float *out, const float *x, const float *bias, size_t n,
                                  size_t c) {
    BT_ASSERT((n == 0 || c == 0) || (out && x && bias));
    OPS_FOR_ROWS(n, c, i0, rows, bias_add_rows(out + i0 * c, x + i0 * c, bias, rows, c));
}

OPS_VEC static void add_span(float *out, const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

/* forward: out = x + bias  ->  dx += dout;  dbias += Σ_rows dout */
static void bias_add_backward_fast(float *dx, float *dbias, const float *dout, size_t n,
                                   size_t c) {
    BT_ASSERT((n == 0 || c == 0) || dout);
    if (dx) OPS_FOR_CHUNKS(n * c, lo, len, add_span(dx + lo, dx + lo, dout + lo, len));
    if (dbias) colsum_accumulate(dbias, dout, n, c);
}

static void residual_forward_fast(float *out, const float *a, const float *b, size_t n) {
    BT_ASSERT(n == 0 || (out && a && b));
    OPS_FOR_CHUNKS(n, lo, len, add_span(out + lo, a + lo, b + lo, len));
}

/* out[i] = 0 + b[i]: the bits add_span leaves in a zeroed out (-0 becomes +0) */
OPS_VEC static void zero_add_span(float *out, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = 0.0f + b[i];
}

/* forward: out = a + b  ->  da += dout;  db += dout  (BT_DX_SET: = 0 + dout) */
static void residual_backward_fast(float *da, float *db, const float *dout, size_t n,
                                   bt_dx_mode mode) {
    BT_ASSERT(n == 0 || dout);
    const int add = mode == BT_DX_ADD;
    if (da && add) OPS_FOR_CHUNKS(n, lo, len, add_span(da + lo, da + lo, dout + lo, len));
    if (db && add) OPS_FOR_CHUNKS(n, lo, len, add_span(db + lo, db + lo, dout + lo, len));
    if (da && !add) OPS_FOR_CHUNKS(n, lo, len, zero_add_span(da + lo, dout + lo, len));
    if (db && !add) OPS_FOR_CHUNKS(n, lo, len, zero_add_span(db + lo, dout + lo, len));
}

/* --- sum of squares ------------------------------------------------------------------------- */

/* 16 double lanes (lane = i mod 16), then a fixed pairwise combine: a loop the compiler
 * vectorizes at every level with the same association, so the same result everywhere. */
static double sum_squares_fast(const float *x, size_t n) {
    BT_ASSERT(n == 0 || x);
    double acc[16] = {0};
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int j = 0; j < 16; j++) acc[j] += (double)x[i + j] * (double)x[i + j];
    for (int j = 0; i + (size_t)j < n; j++) acc[j] += (double)x[i + j] * (double)x[i + j];
    for (int w = 8; w >= 1; w /= 2)
        for (int j = 0; j < w; j++) acc[j] += acc[j + w];
    return acc[0];
}

/* --- zero fill ------------------------------------------------------------------------------ */

#define OPS_ZERO_PIECE ((size_t)1 << 21)

/* Threaded over 2 MiB pieces; streamed from OPS_STREAM_MIN_BYTES (e.g. the base model's 1.3 GB
 * parameter-gradient arena: memset's ordinary stores would read every line first). */
static void zero_fill_fast(void *p, size_t bytes) {
    BT_ASSERT(bytes == 0 || p);
    const size_t pieces = (bytes + OPS_ZERO_PIECE - 1) / OPS_ZERO_PIECE;
    const int stream = OPS_HAVE_STREAM && bytes >= OPS_STREAM_MIN_BYTES;
    OPS_OMP(omp parallel for schedule(static) if (pieces > 1))
    for (size_t i = 0; i < pieces; i++) {
        const size_t lo = i * OPS_ZERO_PIECE, len = ops_min(OPS_ZERO_PIECE, bytes - lo);
        if (stream) {
            ops_stream((unsigned char *)p + lo, NULL, len);
            ops_stream_fence();
        } else {
            memset((unsigned char *)p + lo, 0, len);
        }
    }
}

/* --- AdamW ----------------------------------------------------------------------------------
 * The update reads p, m, v and grad (16 bytes per parameter) and writes p, m, v and the bf16
 * shadow (14 bytes), over arenas of GBs that no cache holds. p, m and v are stored to lines
 * just read, so their stores cost only the write-back (streaming them measured slower: it
 * evicts lines the loop still reads); the shadow is written without being read, so an
 * ordinary store would first read its line (2 more bytes per parameter): it goes out through
 * an L1 block and streaming stores when the update is large (OPS_STREAM_MIN elements: a model
 * whose optimizer state, 30 B per parameter, is far beyond L2; a small model's next forward
 * reads the shadow back from cache). The pass is bound by memory reads: 18 -> 16 bytes.
 * adamw_update_zero_grad also stores +0 to each gradient element it has just read (4 more
 * bytes written back, 34 per parameter), which takes the place of zero_fill's separate pass
 * over those elements (4 bytes streamed): the same bytes to memory, one pass fewer. */

/* Elements per shadow block (1 KiB, in L1). */
#define OPS_ADAMW_BLOCK ((size_t)512)
/* Elements from which an update streams the shadow. */
#define OPS_STREAM_MIN ((size_t)1 << 16)

/* The element loop of one span: the reference's expressions element for element (same
 * bytes: -ffp-contract=off, IEEE sqrt and division per lane); no branch, so it vectorizes
 * (meson gives this file -fno-math-errno so sqrtf needs no errno path). `zero` (a constant
 * at each call: the compiler makes two loops) stores +0 to each gradient element right after
 * its load, to a line just read: its write-back only. */
OPS_INLINE void adamw_elements(float *restrict p, float *restrict m, float *restrict v,
                               float *restrict grad, size_t n, const adamw_coefs *k, int zero) {
    const float gs = k->grad_scale, decay = k->decay, b1 = k->b1, ob1 = k->ob1, b2 = k->b2;
    const float ob2 = k->ob2, bc2 = k->bc2_sqrt, eps = k->eps, step = k->step_size;
    for (size_t i = 0; i < n; i++) {
        const float gi = grad[i] * gs;
        if (zero) grad[i] = 0.0f;
        const float pi = p[i] * decay;
        const float mi = m[i] * b1 + gi * ob1;
        const float vi = v[i] * b2 + ob2 * gi * gi;
        const float denom = sqrtf(vi) / bc2 + eps;
        m[i] = mi;
        v[i] = vi;
        p[i] = pi - step * (mi / denom);
    }
}

/* One span in place (adamw_elements; grad is only read unless `zero`), then the bf16 shadow
 * from the span while it is in L1, through an L1 block and streaming stores when `stream`. */
static void adamw_span(float *restrict p, float *restrict m, float *restrict v,
                       bt_bf16 *restrict shadow, float *restrict grad, size_t n,
                       const adamw_coefs *k, int stream, int zero) {
    if (zero) adamw_elements(p, m, v, grad, n, k, 1);
    else adamw_elements(p, m, v, grad, n, k, 0);
    if (!shadow) return;
    if (!stream) {
        for (size_t i = 0; i < n; i++) shadow[i] = bt_bf16_from_f32(p[i]);
        return;
    }
    _Alignas(64) bt_bf16 so[OPS_ADAMW_BLOCK];
    for (size_t o = 0; o < n; o += OPS_ADAMW_BLOCK) {
        const size_t len = ops_min(OPS_ADAMW_BLOCK, n - o);
        for (size_t i = 0; i < len; i++) so[i] = bt_bf16_from_f32(p[o + i]);
        ops_stream(shadow + o, so, len * sizeof *so);
    }
    ops_stream_fence();
}

/* adamw_update (zero 0: grad is not written) and adamw_update_zero_grad (zero 1). */
static void adamw_run(float *p, float *m, float *v, bt_bf16 *shadow, float *grad, size_t n,
                      const adamw_coefs *k, int zero) {
    BT_ASSERT(n == 0 || (p && m && v && grad && k));
    const int stream = OPS_HAVE_STREAM && n >= OPS_STREAM_MIN;
    OPS_FOR_CHUNKS(n, lo, len,
                   adamw_span(p + lo, m + lo, v + lo, shadow ? shadow + lo : NULL, grad + lo, len,
                              k, stream, zero));
}

static void adamw_update_fast(float *p, float *m, float *v, bt_bf16 *shadow, const float *grad,
                              size_t n, const adamw_coefs *k) {
    adamw_run(p, m, v, shadow, (float *)(uintptr_t)grad, n, k, 0); /* zero 0: never written */
}

static void adamw_update_zero_grad_fast(float *p, float *m, float *v, bt_bf16 *shadow,
                                        float *grad, size_t n, const adamw_coefs *k) {
    adamw_run(p, m, v, shadow, grad, n, k, 1);
}

/* --- cross entropy -------------------------------------------------------------------------- */

static void cross_entropy_check(const int32_t *targets, size_t n, size_t v, int32_t ignore) {
    for (size_t i = 0; i < n; i++)
        BT_ASSERTF(targets[i] == ignore || (targets[i] >= 0 && (size_t)targets[i] < v),
                   "cross entropy target %d at row %zu outside [0, %zu)", (int)targets[i], i, v);
}

/* One row: probs = softmax(logits), returns -log softmax(logits)[t] = max + log Σ - x_t. */
OPS_VEC static double cross_entropy_row(float *probs, const float *x, size_t v, int32_t t) {
    const double xt = (double)x[t]; /* read before probs is written (it may alias x) */
    float mx;
    const float sum = softmax_row_inline(probs, x, v, &mx);
    return (double)mx + log((double)sum) - xt;
}

static float cross_entropy_forward_fast(float *probs, const float *logits,
                                        const int32_t *targets, size_t n, size_t v,
                                        int32_t ignore_index, size_t *n_valid) {
    BT_ASSERT(n == 0 || (probs && logits && targets && v > 0));
    cross_entropy_check(targets, n, v, ignore_index);
    double *loss = bt_alloc((n ? n : 1) * sizeof(double)); /* per row, summed in order */
    OPS_OMP(omp parallel for schedule(static) if (n * v >= OPS_PAR_MIN))
    for (size_t i = 0; i < n; i++)
        loss[i] = targets[i] == ignore_index
                      ? 0.0
                      : cross_entropy_row(probs + i * v, logits + i * v, v, targets[i]);
    double total = 0.0;
    size_t count = 0;
    for (size_t i = 0; i < n; i++) {
        if (targets[i] == ignore_index) continue;
        total += loss[i];
        count++;
    }
    bt_free(loss);
    if (n_valid) *n_valid = count;
    return count ? (float)(total / (double)count) : 0.0f;
}

OPS_VEC static void cross_entropy_row_backward(float *dx, const float *p, size_t v, int32_t t,
                                               float g) {
    for (size_t j = 0; j < v; j++) dx[j] += g * p[j];
    dx[t] -= g;
}

/* forward: loss = (1/n_valid) Σ_valid -log p[target]  ->  dlogits += dloss (p - onehot)/n_valid.
 * The one-hot term is applied after the g p term (dx_t = (dx_t + g p_t) - g), a different
 * rounding from the reference's dx_t + g (p_t - 1): both are within a float ulp of g. */
static void cross_entropy_backward_fast(float *dlogits, const float *probs,
                                        const int32_t *targets, size_t n, size_t v,
                                        int32_t ignore_index, float dloss) {
    if (!dlogits) return;
    BT_ASSERT(n == 0 || (probs && targets));
    cross_entropy_check(targets, n, v, ignore_index);
    size_t count = 0;
    for (size_t i = 0; i < n; i++) count += targets[i] != ignore_index;
    if (count == 0) return;
    const float g = (float)((double)dloss / (double)count);
    OPS_OMP(omp parallel for schedule(static) if (n * v >= OPS_PAR_MIN))
    for (size_t i = 0; i < n; i++)
        if (targets[i] != ignore_index)
            cross_entropy_row_backward(dlogits + i * v, probs + i * v, v, targets[i], g);
}

/* --- L2 normalize --------------------------------------------------------------------------- */

#define OPS_L2_EPS 1e-12f

OPS_VEC static void l2_normalize_rows(float *out, float *norm, const float *x, size_t rows,
                                      size_t c) {
    for (size_t i = 0; i < rows; i++) {
        const float nrm = sqrtf(ops_dot(x + i * c, x + i * c, c));
        const float inv = 1.0f / (nrm > OPS_L2_EPS ? nrm : OPS_L2_EPS);
        for (size_t j = 0; j < c; j++) out[i * c + j] = x[i * c + j] * inv;
        norm[i] = nrm;
    }
}

/* forward: y = x / max(‖x‖, eps)  ->  dx += (dout - y (y·dout)) / ‖x‖ (‖x‖ > eps), else dout/eps */
OPS_VEC static void l2_normalize_rows_backward(float *dx, const float *dout, const float *y,
                                               const float *norm, size_t rows, size_t c) {
    for (size_t i = 0; i < rows; i++) {
        const float *gi = dout + i * c, *yi = y + i * c;
        float *dxi = dx + i * c;
        if (norm[i] > OPS_L2_EPS) {
            const float dot = ops_dot(yi, gi, c), inv = 1.0f / norm[i];
            for (size_t j = 0; j < c; j++) dxi[j] += (gi[j] - yi[j] * dot) * inv;
        } else {
            for (size_t j = 0; j < c; j++) dxi[j] += gi[j] / OPS_L2_EPS;
        }
    }
}

static void l2_normalize_forward_fast(float *out, float *norm, const float *x, size_t n,
                                      size_t c) {
    BT_ASSERT(n == 0 || (out && norm && x));
    OPS_FOR_ROWS(n, c, i0, rows, l2_normalize_rows(out + i0 * c, norm + i0, x + i0 * c, rows, c));
}

static void l2_normalize_backward_fast(float *dx, const float *dout, const float *out,
                                       const float *norm, size_t n, size_t c) {
    if (!dx) return;
    BT_ASSERT(n == 0 || (dout && out && norm));
    OPS_FOR_ROWS(n, c, i0, rows,
                 l2_normalize_rows_backward(dx + i0 * c, dout + i0 * c, out + i0 * c,
                                            norm + i0, rows, c));
}

#ifndef OPS_VARIANT /* the bf16 conversions and the dispatch: the library's unit only */
/* --- fp32 <-> bf16 ------------------------------------------------------------------------
 * Three implementations of the same bits (dtype.h's scalar rule: round to nearest even, NaN
 * stays a quiet NaN with its sign and top payload bits), picked by the ISA level (cpu.h):
 *   AVX512-BF16  vcvtne2ps2bf16 for 32 floats at a time. That instruction flushes subnormal
 *                inputs to zero, which the scalar rule does not, so blocks holding a
 *                subnormal take the integer path instead (never in real weights).
 *   AVX-512F     the integer rounding rule on 16 lanes.
 *   scalar       dtype.h's bt_bf16_from_f32 (also the tail of every vector path). */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define OPS_HAVE_X86 1

__attribute__((target("avx512f"))) static inline __m256i bf16_round16_avx512(__m512 f) {
    const __m512i u = _mm512_castps_si512(f);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    const __m512i rounded = _mm512_srli_epi32(
        _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
    const __m512i abs = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(abs, _mm512_set1_epi32(0x7f800000));
    const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
    return _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(nan, rounded, quiet));
}

__attribute__((target("avx512f"))) static void bf16_from_f32_avx512(bt_bf16 *out,
                                                                    const float *in, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(out + i), bf16_round16_avx512(_mm512_loadu_ps(in + i)));
    for (; i < n; i++) out[i] = bt_bf16_from_f32(in[i]);
}

__attribute__((target("avx512f,avx512bf16,avx512vl,avx512bw"))) static void
bf16_from_f32_avx512bf16(bt_bf16 *out, const float *in, size_t n) {
    const __m512i expo = _mm512_set1_epi32(0x7f800000), mant = _mm512_set1_epi32(0x007fffff);
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m512 lo = _mm512_loadu_ps(in + i), hi = _mm512_loadu_ps(in + i + 16);
        /* a lane is subnormal when its exponent is 0 and its mantissa is not */
        const __mmask16 sub_lo =
            _mm512_testn_epi32_mask(_mm512_castps_si512(lo), expo) &
            _mm512_test_epi32_mask(_mm512_castps_si512(lo), mant);
        const __mmask16 sub_hi =
            _mm512_testn_epi32_mask(_mm512_castps_si512(hi), expo) &
            _mm512_test_epi32_mask(_mm512_castps_si512(hi), mant);
        if (sub_lo | sub_hi) {
            _mm256_storeu_si256((__m256i *)(out + i), bf16_round16_avx512(lo));
            _mm256_storeu_si256((__m256i *)(out + i + 16), bf16_round16_avx512(hi));
        } else {
            /* cvtne2ps(a, b) puts b's 16 results in the low half, a's in the high half */
            _mm512_storeu_si512((void *)(out + i), (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
        }
    }
    for (; i < n; i++) out[i] = bt_bf16_from_f32(in[i]);
}

__attribute__((target("avx512f"))) static void f32_from_bf16_avx512(float *out,
                                                                    const bt_bf16 *in, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(in + i)));
        _mm512_storeu_si512((void *)(out + i), _mm512_slli_epi32(w, 16));
    }
    for (; i < n; i++) out[i] = bt_f32_from_bf16(in[i]);
}
#else
#define OPS_HAVE_X86 0
#endif

typedef void (*bf16_from_f32_fn)(bt_bf16 *, const float *, size_t);
typedef void (*f32_from_bf16_fn)(float *, const bt_bf16 *, size_t);

/* Chosen in kernels_init per ISA level (ops_fast_fill); the scalar references until then. */
static bf16_from_f32_fn ops_bf16_from_f32_impl = bf16_from_f32_ref;
static f32_from_bf16_fn ops_f32_from_bf16_impl = f32_from_bf16_ref;
static const char *ops_bf16_impl_name = "scalar";

/* 1 if this CPU runs the named conversion path. */
static int ops_bf16_supported(const char *name) {
    if (strcmp(name, "scalar") == 0) return 1;
#if OPS_HAVE_X86
    __builtin_cpu_init();
    if (strcmp(name, "avx512f") == 0) return __builtin_cpu_supports("avx512f");
    if (strcmp(name, "avx512bf16") == 0)
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw");
#endif
    return 0;
}

static int ops_bf16_set(const char *name) {
    if (!ops_bf16_supported(name)) return 0;
    if (strcmp(name, "scalar") == 0) {
        ops_bf16_from_f32_impl = bf16_from_f32_ref;
        ops_f32_from_bf16_impl = f32_from_bf16_ref;
        ops_bf16_impl_name = "scalar";
    }
#if OPS_HAVE_X86
    if (strcmp(name, "avx512f") == 0) {
        ops_bf16_from_f32_impl = bf16_from_f32_avx512;
        ops_f32_from_bf16_impl = f32_from_bf16_avx512;
        ops_bf16_impl_name = "avx512f";
    }
    if (strcmp(name, "avx512bf16") == 0) {
        ops_bf16_from_f32_impl = bf16_from_f32_avx512bf16;
        ops_f32_from_bf16_impl = f32_from_bf16_avx512; /* widening is a shift either way */
        ops_bf16_impl_name = "avx512bf16";
    }
#endif
    return 1;
}

static void bf16_from_f32_fast(bt_bf16 *out, const float *in, size_t n) {
    BT_ASSERT(n == 0 || (out && in));
    const bf16_from_f32_fn fn = ops_bf16_from_f32_impl;
    OPS_FOR_CHUNKS(n, lo, len, fn(out + lo, in + lo, len));
}

static void f32_from_bf16_fast(float *out, const bt_bf16 *in, size_t n) {
    BT_ASSERT(n == 0 || (out && in));
    const f32_from_bf16_fn fn = ops_f32_from_bf16_impl;
    OPS_FOR_CHUNKS(n, lo, len, fn(out + lo, in + lo, len));
}

#endif /* !OPS_VARIANT */

/* --- the kernel table ------------------------------------------------------------------------ */

/* One entry per kernel of ops_table.h. */
typedef struct ops_kernels {
#define OPS_ENTRY(ret, name, params, args) ret(*name) params;
    OPS_KERNELS(OPS_ENTRY)
#undef OPS_ENTRY
} ops_kernels;

/* Overrides t's entries with this unit's fast kernels (all but the bf16 conversions, which
 * the library's unit sets per level). One per ISA variant; see "ISA variants" above. */
void OPS_FILL(ops_kernels *t);
void OPS_FILL(ops_kernels *t) {
    t->dropout_forward = dropout_forward_fast;
    t->dropout_backward = dropout_backward_fast;
    t->linear_forward = linear_forward_fast;
    t->linear_backward = linear_backward_fast;
    t->layernorm_forward = layernorm_forward_fast;
    t->layernorm_forward_bf16 = layernorm_forward_bf16_fast;
    t->layernorm_backward = layernorm_backward_fast;
    t->layernorm_backward_residual = layernorm_backward_residual_fast;
    t->layernorm_backward_dropout = layernorm_backward_dropout_fast;
    t->gelu_forward = gelu_forward_fast;
    t->gelu_backward = gelu_backward_fast;
    t->quick_gelu_forward = quick_gelu_forward_fast;
    t->gelu_forward_bf16 = gelu_forward_bf16_fast;
    t->quick_gelu_forward_bf16 = quick_gelu_forward_bf16_fast;
    t->quick_gelu_backward = quick_gelu_backward_fast;
    t->gelu_backward_bias = gelu_backward_bias_fast;
    t->tanh_forward = tanh_forward_fast;
    t->tanh_backward = tanh_backward_fast;
    t->softmax_forward = softmax_forward_fast;
    t->softmax_backward = softmax_backward_fast;
    t->attention_forward = attention_forward_fast;
    t->attention_backward = attention_backward_fast;
    /* attention_key_bias_from_mask keeps the reference: N comparisons, nothing to gain. */
    t->embedding_forward = embedding_forward_fast;
    t->embedding_backward = embedding_backward_fast;
    t->bias_add_forward = bias_add_forward_fast;
    t->bias_add_backward = bias_add_backward_fast;
    t->residual_forward = residual_forward_fast;
    t->residual_backward = residual_backward_fast;
    t->cross_entropy_forward = cross_entropy_forward_fast;
    t->cross_entropy_backward = cross_entropy_backward_fast;
    t->l2_normalize_forward = l2_normalize_forward_fast;
    t->l2_normalize_backward = l2_normalize_backward_fast;
    t->adamw_update = adamw_update_fast;
    t->adamw_update_zero_grad = adamw_update_zero_grad_fast;
    t->sum_squares = sum_squares_fast;
    t->zero_fill = zero_fill_fast;
}

#ifndef OPS_VARIANT
#ifdef BT_OPS_ISA_VARIANTS /* meson built the x86-64-v3 and -v4 units */
void ops_fill_fast_avx2(ops_kernels *t);
void ops_fill_fast_avx512(ops_kernels *t);
#endif

/* The fill function of a level, or NULL when this build has no unit for it. */
static void (*ops_fill_for(bt_isa isa))(ops_kernels *) {
    switch (isa) {
    case BT_ISA_SCALAR:
        return ops_fill_fast_scalar;
#ifdef BT_OPS_ISA_VARIANTS
    case BT_ISA_AVX2:
        return ops_fill_fast_avx2;
    case BT_ISA_AVX512:
    case BT_ISA_AVX512_BF16: /* the same kernels; only the bf16 conversion differs */
        return ops_fill_fast_avx512;
#endif
    default:
        return NULL;
    }
}

static const ops_kernels ops_ref_table = {
#define OPS_REF_ENTRY(ret, name, params, args) .name = name##_ref,
    OPS_KERNELS(OPS_REF_ENTRY)
#undef OPS_REF_ENTRY
};

static ops_kernels ops_fast_table; /* filled once by ops_init_once */
static bt_isa ops_isa = BT_ISA_SCALAR; /* its level */
static _Atomic(const ops_kernels *) ops_active = NULL;
static pthread_once_t ops_once = PTHREAD_ONCE_INIT;

static int ops_attention_set(const char *name) {
    if (strcmp(name, "auto") == 0) ops_attention_mode = OPS_ATTN_AUTO;
    else if (strcmp(name, "blocks") == 0) ops_attention_mode = OPS_ATTN_BLOCKS;
    else if (strcmp(name, "gemm") == 0) ops_attention_mode = OPS_ATTN_GEMM;
    else return 0;
    return 1;
}

static int ops_attention_products_set(const char *name) {
    if (strcmp(name, "auto") == 0) ops_attention_products = OPS_PROD_AUTO;
    else if (strcmp(name, "amx") == 0) ops_attention_products = OPS_PROD_AMX;
    else if (strcmp(name, "avx512_bf16") == 0) ops_attention_products = OPS_PROD_DPBF16;
    else if (strcmp(name, "gemm") == 0) ops_attention_products = OPS_PROD_GEMM;
    else return 0;
    return 1;
}

/* Fills ops_fast_table with the kernels of level `isa` and that level's bf16 conversion;
 * 0 (nothing changed) when this build has no unit for it or the CPU does not run it. */
static int ops_fast_fill(bt_isa isa) {
    void (*fill)(ops_kernels *) = ops_fill_for(isa);
    if (!fill || !bt_isa_supported(isa)) return 0;
    ops_kernels t = ops_ref_table; /* reference first, then the fast overrides */
    fill(&t);
    ops_bf16_set(isa >= BT_ISA_AVX512_BF16 ? "avx512bf16"
                 : isa >= BT_ISA_AVX512    ? "avx512f"
                                           : "scalar");
    t.bf16_from_f32 = bf16_from_f32_fast;
    t.f32_from_bf16 = f32_from_bf16_fast;
    ops_fast_table = t;
    ops_isa = isa;
    return 1;
}

static void ops_init_once(void) {
    /* the active level, or the best level below it that this build has */
    for (int isa = (int)bt_cpu_isa_active(); isa >= 0; isa--)
        if (ops_fast_fill((bt_isa)isa)) break;

    const char *mode = bt_setting_value(BT_SET_ATTENTION_THREADS);
    if (mode && *mode && !ops_attention_set(mode))
        fprintf(stderr, "bt: warning: environment variable BT_ATTENTION_THREADS=%s is not "
                        "'auto', 'blocks' or 'gemm'; using 'auto'\n", mode);
    const char *prod = bt_setting_value(BT_SET_ATTENTION_PRODUCTS);
    if (prod && *prod && !ops_attention_products_set(prod))
        fprintf(stderr, "bt: warning: environment variable BT_ATTENTION_PRODUCTS=%s is not "
                        "'auto', 'amx', 'avx512_bf16' or 'gemm'; using 'auto'\n", prod);

    const char *env = bt_setting_value(BT_SET_KERNELS);
    int use_ref = 0;
    if (env && *env) {
        if (strcmp(env, "ref") == 0) {
            use_ref = 1;
        } else if (strcmp(env, "fast") != 0) {
            /* kernels_init cannot return an error: say so loudly and run the fast kernels */
            fprintf(stderr,
                    "bt: warning: environment variable BT_KERNELS=%s is not 'ref' or 'fast'; "
                    "using the fast kernels\n", env);
        }
    }
    atomic_store(&ops_active, use_ref ? &ops_ref_table : &ops_fast_table);
}

void kernels_init(void) { pthread_once(&ops_once, ops_init_once); }

void ops_use_reference(int on) {
    kernels_init();
    atomic_store(&ops_active, on ? &ops_ref_table : &ops_fast_table);
}

const char *ops_kernels_name(void) {
    kernels_init();
    return atomic_load(&ops_active) == &ops_ref_table ? "ref" : "fast";
}

bt_isa ops_cpu_isa(void) {
    kernels_init();
    return ops_isa;
}

int ops_cpu_isa_select(bt_isa isa) {
    kernels_init();
    return ops_fast_fill(isa);
}

const char *ops_bf16_conversion_name(void) {
    kernels_init();
    return ops_bf16_impl_name;
}

int ops_attention_threads_select(const char *name) {
    kernels_init();
    return name ? ops_attention_set(name) : 0;
}

const char *ops_attention_threads_name(void) {
    kernels_init();
    const char *resolved = ops_attention_resolve() == OPS_ATTN_GEMM ? "gemm" : "blocks";
    return ops_attention_mode == OPS_ATTN_AUTO
               ? (ops_attention_resolve() == OPS_ATTN_GEMM ? "auto (gemm)" : "auto (blocks)")
               : resolved;
}

/* 1 when hand-written block products may run ("the block products on AMX tiles" above): the
 * CPU runs them (`available`) and oneDNN runs at `isa`, the ISA whose kernels give their bits
 * (not capped below it). Decided once per `cache`. */
static int attention_products_eligible(_Atomic int *cache, int (*available)(void),
                                       const char *isa) {
    int e = atomic_load(cache);
    if (e < 0) {
        e = available() && strcmp(gemm_cpu_isa_name(), isa) == 0;
        atomic_store(cache, e);
    }
    return e;
}

#if BT_AMX_EMULATED
/* test_attention_amx_emulated's library (attention_amx_emulated.h): the emulated tiles run
 * beside whichever oneDNN ISA runs the native bf16 route, which ops_bf16_native still asks */
int ops_attention_amx_eligible(void) { return attention_amx_available(); }
#else
int ops_attention_amx_eligible(void) {
    static _Atomic int eligible = -1;
    return attention_products_eligible(&eligible, attention_amx_available, "avx512_core_amx");
}
#endif

int ops_attention_dpbf16_eligible(void) {
    static _Atomic int eligible = -1;
    return attention_products_eligible(&eligible, attention_dpbf16_available,
                                       "avx512_core_bf16");
}

int ops_attention_products_select(const char *name) {
    kernels_init();
    return name ? ops_attention_products_set(name) : 0;
}

const char *ops_attention_products_name(void) {
    kernels_init();
    const int amx = ops_attention_amx_eligible(), dp = ops_attention_dpbf16_eligible();
    switch (ops_attention_products) {
    case OPS_PROD_AMX:
        return amx ? "amx (native bf16 blocks)" : "amx requested, gemm (no AMX at oneDNN's ISA)";
    case OPS_PROD_DPBF16:
        return dp ? "avx512_bf16 (native bf16 blocks)"
                  : "avx512_bf16 requested, gemm (oneDNN's ISA is not avx512_core_bf16)";
    case OPS_PROD_GEMM:
        return "gemm";
    default:
        return amx  ? "auto (amx for native bf16 blocks)"
               : dp ? "auto (avx512_bf16 for native bf16 blocks)"
                    : "auto (gemm: neither AMX nor AVX512-BF16 at oneDNN's ISA)";
    }
}

int linear_backward_dout_bf16(gemm_compute compute) { return ops_bf16_native(compute); }

int ops_bf16_conversion_select(const char *name) {
    kernels_init();
    return name ? ops_bf16_set(name) : 0;
}

static const ops_kernels *ops_k(void) {
    const ops_kernels *k = atomic_load_explicit(&ops_active, memory_order_acquire);
    if (k) return k;
    kernels_init();
    return atomic_load(&ops_active);
}

/* --- public entry points: one call through the table each --------------------------------- */

#define OPS_ENUM_ENTRY(ret, name, params, args) OPS_K_##name,
enum { OPS_KERNELS(OPS_ENUM_ENTRY) OPS_N_KERNELS };
#undef OPS_ENUM_ENTRY

/* The class each kernel's time counts in (kernel_clock.h): attention, none for the
 * optimizer's (their own phase; their seconds are still kept per kernel), memory-bound for
 * the rest. */
static bt_kernel_class ops_class(int k) {
    switch (k) {
    case OPS_K_attention_forward:
    case OPS_K_attention_backward:
        return BT_KC_ATTENTION;
    case OPS_K_adamw_update:
    case OPS_K_adamw_update_zero_grad:
    case OPS_K_sum_squares:
        return BT_KC_NONE;
    default:
        return BT_KC_MEMORY;
    }
}
/* Each kernel's own nanoseconds (ops_kernel_seconds). */
static _Atomic uint64_t ops_kernel_ns[OPS_N_KERNELS];
#define OPS_NAME_ENTRY(ret, name, params, args) #name,
static const char *const ops_kernel_names[OPS_N_KERNELS] = {OPS_KERNELS(OPS_NAME_ENTRY)};
#undef OPS_NAME_ENTRY

size_t ops_kernel_seconds(const char **names, double *seconds, size_t cap) {
    for (size_t k = 0; k < cap && k < OPS_N_KERNELS; k++) {
        names[k] = ops_kernel_names[k];
        seconds[k] = kc_seconds(&ops_kernel_ns[k]);
    }
    return OPS_N_KERNELS;
}

/* Every wrapper times its call (kernel_clock.h); the return value, if any, passes through. */
#define OPS_WRAPPER(ret, name, params, args)                                                \
    ret name params {                                                                       \
        const kc_span span_ = kc_enter(ops_class(OPS_K_##name));                          \
        OPS_KEEP_##ret ops_k()->name args;                                                  \
        kc_add(&ops_kernel_ns[OPS_K_##name], kc_leave(&span_));                             \
        OPS_GIVE_##ret                                                                      \
    }
OPS_KERNELS(OPS_WRAPPER)
#undef OPS_WRAPPER

void bf16_from_f32_serial(bt_bf16 *out, const float *in, size_t n) {
    if (ops_k() == &ops_ref_table) bf16_from_f32_ref(out, in, n);
    else ops_bf16_from_f32_impl(out, in, n);
}
void f32_from_bf16_serial(float *out, const bt_bf16 *in, size_t n) {
    if (ops_k() == &ops_ref_table) f32_from_bf16_ref(out, in, n);
    else ops_f32_from_bf16_impl(out, in, n);
}
#endif /* !OPS_VARIANT */
