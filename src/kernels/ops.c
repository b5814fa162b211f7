/* ops.c: the kernel table behind ops.h and the fast fp32 kernels it dispatches to, all but
 * attention's (attention.c).
 *
 * Dispatch: a table of function pointers starts as the reference kernels (ops_ref.h) and the
 * fast versions override its entries; BT_KERNELS=ref (or ops_use_reference(1)) keeps the
 * reference table.
 *
 * The fast kernels are plain C that gcc vectorizes without -ffast-math:
 *   - They are compiled once per ISA level (cpu.h): this file is the library's unit (kernels
 *     at the x86-64 baseline, level "scalar", plus the dispatch), and on x86-64 meson
 *     compiles it again, with attention.c, with -march=x86-64-v3 / -v4 and OPS_VARIANT set
 *     ("ISA variants" in ops_blocks.h). kernels_init() fills the table from the level
 *     bt_cpu_isa_active() names (the CPU's best, capped by BT_CPU_ISA), so the build needs no
 *     -march flag, runs anywhere, and every level can be tested on one machine.
 *   - ISO C (-std=c11) compiles with -ffp-contract=off and gcc never reassociates float sums
 *     on its own, so reductions (sum, dot, max) keep OPS_LANES partial results in GNU C
 *     vectors of the level's register width, folded by a fixed tree (ops_sum & co. in
 *     ops_blocks.h). The summation order is therefore fixed by the source: every ISA level
 *     and every thread count gives the same bits (tests/test_determinism.c).
 *   - exp and erfc are evaluated by branch-free polynomials (ops_exp2part, ops_upper_tail) that
 *     vectorize; libm's scalar calls would not. Their accuracy is stated where they are.
 *     Their selects are bit blends (ops_sel), not float ternaries, which gcc compiles to
 *     branches that only AVX-512's masked operations if-convert.
 *   - OpenMP parallelizes over rows, fixed-size chunks or column chunks, never over a
 *     reduction whose grouping would depend on the thread count (column sums use fixed row
 *     blocks or column ownership). Small problems run on the calling thread (OPS_PAR_MIN).
 *
 * Deliberately not here: the building blocks the fast units share (ops_blocks.h), attention
 * (attention.c), the reference kernels (ops_ref.inc), the GEMM itself (gemm*.c), any
 * fast-math. */
#include "kernels/ops.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attention.h"
#include "kernels/kernel_clock.h"
#include "kernels/ops_blocks.h"
#include "kernels/ops_ref.h"
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
 * the library's unit sets per level). One per ISA variant ("ISA variants" in ops_blocks.h). */
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
    t->attention_forward = OPS_LEVEL_NAME(attention_forward_fast); /* attention.c */
    t->attention_backward = OPS_LEVEL_NAME(attention_backward_fast);
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

/* BT_KERNELS: "ref" = 1, "fast" or unset = 0, another value -1. */
static int kernels_env_use_ref(void) {
    const char *env = bt_setting_value(BT_SET_KERNELS);
    if (!env || !*env || strcmp(env, "fast") == 0) return 0;
    return strcmp(env, "ref") == 0 ? 1 : -1;
}

static void ops_init_once(void) {
    /* the active level, or the best level below it that this build has */
    for (int isa = (int)bt_cpu_isa_active(); isa >= 0; isa--)
        if (ops_fast_fill((bt_isa)isa)) break;
    attention_settings_init();

    int use_ref = kernels_env_use_ref();
    if (use_ref < 0) {
        /* kernels_init cannot return an error: say so loudly and run the fast kernels */
        fprintf(stderr, "bt: warning: environment variable BT_KERNELS=%s is not 'ref' or 'fast'; "
                        "using the fast kernels\n", bt_setting_value(BT_SET_KERNELS));
        use_ref = 0;
    }
    atomic_store(&ops_active, use_ref ? &ops_ref_table : &ops_fast_table);
}

void kernels_init(void) { pthread_once(&ops_once, ops_init_once); }

bt_status kernels_settings_check(void) {
    if (kernels_env_use_ref() < 0)
        return bt_fail(BT_ERR_ARG, "environment variable BT_KERNELS: '%s' is unknown; expected "
                       "'fast' (the default) or 'ref' (the reference kernels)",
                       bt_setting_value(BT_SET_KERNELS));
    return attention_settings_check();
}

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
