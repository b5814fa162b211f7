/* bench_gemm.c: GFLOP/s of every GEMM backend on the products BridgeTower-base trains with.
 *
 * Rows: the Linear layers (hidden 768, FFN 3072) at four token counts (N = B*T: 2x40 and 8x40
 * text tokens, 2x325 and 8x325 image tokens) in the three forms training runs them
 *   fwd  out (N, OC) = x (N, C) · Wᵀ + b          gemm m=N  n=OC k=C  trans_b
 *   dX   dx  (N, C)  = dout (N, OC) · W            gemm m=N  n=C  k=OC
 *   dW   dW  (OC, C) += doutᵀ · x                  gemm m=OC n=C  k=N  trans_a, beta 1
 *   dWp  the same with doutᵀ stored (OC, N)        gemm m=OC n=C  k=N  beta 1 (N 2600 only)
 * the attention products of one 325-token image, its NH = 12 heads as one batched call
 * reading Q, K, V in place from the (T, 768) projections (head stride 64, row stride 768):
 *   scores  S_h (T, T) = Q_h K_hᵀ / 8     values  O_h (T, 64) = P_h (T, T) · V_h
 * (the heads of B images are not one uniform stride apart, so B images are B calls), the same
 * products as 12 separate calls from inside an OpenMP parallel region (allowed by gemm.h),
 * and two square products for the machine's peak. The header also prints the instruction
 * ceilings (vfmadd231ps and vdpbf16ps throughput on all threads) to compare against.
 *
 * BT_GEMM_BF16=widened (or fp32) in the environment makes the two bf16 columns measure the
 * fp32-widened bf16 path (gemm.h; under fp32 the model itself would run plain fp32 products).
 *
 * Columns: ref (plain loops, small shapes only), openblas fp32, onednn fp32, onednn bf16 as
 * the model runs it (fp32 activations rounded to bf16 per call, weights already bf16), and
 * onednn bf16 with both operands already bf16 (the kernel alone). Each number is the flop
 * count over the FASTEST single call among the calls made in about bench_seconds (at least
 * 3): on a shared machine the minimum time is the estimate least disturbed by other people's
 * load; --passes repeats everything and keeps the best.
 *
 * Run: meson test -C build --benchmark --suite bench, or build/tests/bench_gemm [--quick]
 * [--passes P] [--only SUBSTRING] [--cold] [--median] [--seconds S]: --passes repeats the
 * whole table P times and keeps the best of each cell (spreads the samples over minutes on a
 * shared machine), --only keeps the rows whose name contains SUBSTRING, --quick is one short
 * round of the small shapes, --seconds sets the time of calls per cell (default 0.8, --quick
 * 0.05): scripts/bench_side_by_side.py's machine probe runs the 1024 square briefly.
 * --fused-qkv adds, at 320 and 2600 rows, the three forms of one product for Q, K and V
 * together (out 3 x 768 = 2304), to set against three of the 768 x 768 rows: what fusing the
 * text tower's and cross layers' separate q, k, v products would give (docs/benchmarks.md,
 * "Session 23"). Those rows are not the model's and not in the default table, so the
 * machine's peak the side-by-side takes from it is the same either way.
 * --median makes each cell the median call instead of the fastest: the rate a product
 * typically runs at here, the one to set beside the per-shape rates of a training step
 * (bench_step --kernels), which are means over every call (docs/benchmarks.md "Session 32").
 * --cold prints, instead of the table, the Linear products as the model runs them with their
 * operands in cache and coming from memory (cold_table below).
 * Deliberately not here: correctness (test_gemm.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cblas.h>

#include "bt_config.h"
#include "clock.h"
#include "kernels/cpu.h"
#include "kernels/gemm.h"
#include "test_util.h"

#if BT_HAVE_OPENMP
#include <omp.h>
#endif
#if BT_HAVE_ONEDNN
#include <oneapi/dnnl/dnnl.h>
#endif

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#define BENCH_HAVE_X86 1
#endif

static double bench_seconds = 0.8; /* per cell and pass */

static void fill(float *x, size_t n, unsigned seed) {
    /* cheap LCG in [-1, 1): values only need to be ordinary numbers */
    unsigned s = seed * 2654435761u + 1u;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = (float)((double)(s >> 8) / 8388608.0 - 1.0);
    }
}

#if BENCH_HAVE_X86
/* Instruction-throughput ceilings of one thread: 12 independent accumulator chains of
 * vfmadd231ps (32 flop each) or vdpbf16ps (64 flop each), enough to hide their latency. The
 * chains are separate variables with distinct start values (an array would live in memory,
 * equal chains would be merged by the compiler). Run on every OpenMP thread at once, they
 * show what the cores deliver right now (on a shared machine, less than the hardware can). */
#define BENCH_X12(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
#define BENCH_ACC(j) __m512 acc##j = _mm512_set1_ps((float)(j));
#define BENCH_SUM(j) sum += _mm512_reduce_add_ps(acc##j);

__attribute__((target("avx512f"))) static double peak_fma_f32(long iters) {
    BENCH_X12(BENCH_ACC)
    __m512 x = _mm512_set1_ps(1e-8f), y = _mm512_set1_ps(1.0f);
    for (long i = 0; i < iters; i++) {
#define BENCH_FMA(j) acc##j = _mm512_fmadd_ps(x, y, acc##j);
        BENCH_X12(BENCH_FMA)
        __asm__ volatile("" : "+v"(x));
    }
    float sum = 0;
    BENCH_X12(BENCH_SUM)
    return sum;
}

__attribute__((target("avx512f,avx512bf16"))) static double peak_dp_bf16(long iters) {
    BENCH_X12(BENCH_ACC)
    __m512bh x = (__m512bh)_mm512_set1_epi16(0x3c00), y = (__m512bh)_mm512_set1_epi16(0x3f80);
    for (long i = 0; i < iters; i++) {
#define BENCH_DP(j) acc##j = _mm512_dpbf16_ps(acc##j, x, y);
        BENCH_X12(BENCH_DP)
        __asm__ volatile("" : "+v"(x));
    }
    float sum = 0;
    BENCH_X12(BENCH_SUM)
    return sum;
}

/* GFLOP/s of all threads together, best of 250 bursts. */
static double peak_instr(int bf16) {
    const long iters = 200000; /* ~1 ms: short bursts catch the moments the cores are free */
    double best = 0.0;
    for (int r = 0; r < 250; r++) {
        int nthr = 1;
        double t0 = bt_now_s(), sink = 0;
#if BT_HAVE_OPENMP
#pragma omp parallel reduction(+ : sink)
        {
#pragma omp single
            nthr = omp_get_num_threads();
            sink += bf16 ? peak_dp_bf16(iters) : peak_fma_f32(iters);
        }
#else
        sink += bf16 ? peak_dp_bf16(iters) : peak_fma_f32(iters);
#endif
        double dt = bt_now_s() - t0;
        double gf = (double)nthr * iters * 12.0 * (bf16 ? 64.0 : 32.0) / dt * 1e-9;
        if (gf > best && sink == sink) best = gf;
    }
    return best;
}
#endif

/* What one benchmark row runs. */
typedef struct row {
    char name[64];
    gemm_args g;
    int ref_ok;        /* small enough for the reference */
    int per_item_omp;  /* run as `batch` calls from an OpenMP parallel region */
} row;

typedef void (*run_fn)(gemm_backend be, const gemm_args *g, int per_item_omp);

static void run_once(gemm_backend be, const gemm_args *g, int per_item_omp) {
    if (!per_item_omp) {
        gemm_with(be, g);
        return;
    }
    long long items = (long long)g->batch;
#if BT_HAVE_OPENMP
#pragma omp parallel for schedule(dynamic, 1)
#endif
    for (long long i = 0; i < items; i++) {
        gemm_args one = *g;
        one.batch = 1;
        one.a = (const char *)g->a + (size_t)i * g->stride_a * bt_dtype_size(g->a_type);
        one.b = (const char *)g->b + (size_t)i * g->stride_b * bt_dtype_size(g->b_type);
        one.c = g->c + (size_t)i * g->stride_c;
        gemm_with(be, &one);
    }
}

static double flops_of(const gemm_args *g) {
    return 2.0 * (double)g->m * (double)g->n * (double)g->k * (double)(g->batch ? g->batch : 1);
}

static int cmp_double(const void *x, const void *y) {
    const double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

/* --median: each cell is the median call instead of the fastest */
static int bench_median = 0;

/* GFLOP/s of the fastest call among those made in about `seconds` (at least 3), or of the
 * median call under --median (the rate a product typically runs at on a shared machine, the
 * one to set beside the step's per-shape rates from bench_step --kernels). */
static double measure_for(gemm_backend be, const gemm_args *g, int per_item_omp, double seconds) {
    run_once(be, g, per_item_omp); /* warm-up: primitive creation, scratch allocation */
    enum { MAX_CALLS = 1 << 16 };
    static double dts[MAX_CALLS];
    int calls = 0;
    double start = bt_now_s(), best = INFINITY;
    for (; calls < 3 || bt_now_s() - start < seconds; calls++) {
        double t0 = bt_now_s();
        run_once(be, g, per_item_omp);
        double dt = bt_now_s() - t0;
        if (dt < best) best = dt;
        if (calls < MAX_CALLS) dts[calls] = dt;
    }
    if (!bench_median) return flops_of(g) / best * 1e-9;
    const int kept = calls < MAX_CALLS ? calls : MAX_CALLS;
    qsort(dts, (size_t)kept, sizeof(double), cmp_double);
    return flops_of(g) / dts[kept / 2] * 1e-9;
}

static double measure(gemm_backend be, const gemm_args *g, int per_item_omp) {
    return measure_for(be, g, per_item_omp, bench_seconds);
}

/* Buffers big enough for the largest row; operands are re-pointed per row. */
typedef struct buffers {
    float *a, *b, *c;
    bt_bf16 *a16, *b16;
    float *bias;
    size_t n;
} buffers;

static void buffers_free(buffers *buf) {
    free(buf->a), free(buf->b), free(buf->c), free(buf->a16), free(buf->b16), free(buf->bias);
}

/* One pass over a row: gf[0..4] = ref, openblas fp32, onednn fp32, onednn bf16 as the model
 * runs it, onednn bf16 on bf16 operands (NaN where not run; openblas fp32 is not run when this
 * CPU cannot run the kernels OPENBLAS_CORETYPE forced: cpu.h bt_openblas_core_check). */
static void measure_row(const row *r, const buffers *buf, int have_dnnl, int openblas_runs,
                        double gf[5]) {
    for (int c = 0; c < 5; c++) gf[c] = NAN;
    if (r->ref_ok && !r->per_item_omp) gf[0] = measure_for(GEMM_BACKEND_REF, &r->g, 0, 0.0);
    if (openblas_runs) gf[1] = measure(GEMM_BACKEND_OPENBLAS, &r->g, r->per_item_omp);
    if (!have_dnnl) return;
    gf[2] = measure(GEMM_BACKEND_ONEDNN, &r->g, r->per_item_omp);
    /* as the model runs bf16: activations fp32 (rounded per call); Linear weights (the B
     * operand of fwd and dX) already bf16; dW and attention read only activations */
    gemm_args mix = r->g;
    mix.compute = GEMM_COMPUTE_BF16;
    if (strncmp(r->name, "fwd", 3) == 0 || strncmp(r->name, "dX", 2) == 0) {
        mix.b_type = BT_DTYPE_BF16;
        mix.b = buf->b16;
    }
    gf[3] = measure(GEMM_BACKEND_ONEDNN, &mix, r->per_item_omp);
    gemm_args pure = r->g;
    pure.compute = GEMM_COMPUTE_BF16;
    pure.a_type = pure.b_type = BT_DTYPE_BF16;
    pure.a = buf->a16;
    pure.b = buf->b16;
    gf[4] = measure(GEMM_BACKEND_ONEDNN, &pure, r->per_item_omp);
}

static void add_linear(row *rows, int *nrows, size_t n_tok, size_t c_in, size_t c_out,
                       const buffers *buf, int with_backward) {
    row *r = &rows[(*nrows)++];
    snprintf(r->name, sizeof r->name, "fwd  %zux%zux%zu", n_tok, c_out, c_in);
    r->g = (gemm_args){.trans_b = 1, .m = n_tok, .n = c_out, .k = c_in, .a_type = BT_DTYPE_F32,
                       .b_type = BT_DTYPE_F32, .a = buf->a, .lda = c_in, .b = buf->b,
                       .ldb = c_in, .c = buf->c, .ldc = c_out, .alpha = 1, .bias = buf->bias};
    r->ref_ok = n_tok * c_in * c_out <= 80u * 768 * 768;
    if (!with_backward) return;
    r = &rows[(*nrows)++];
    snprintf(r->name, sizeof r->name, "dX   %zux%zux%zu", n_tok, c_in, c_out);
    r->g = (gemm_args){.m = n_tok, .n = c_in, .k = c_out, .a_type = BT_DTYPE_F32,
                       .b_type = BT_DTYPE_F32, .a = buf->a, .lda = c_out, .b = buf->b,
                       .ldb = c_in, .c = buf->c, .ldc = c_in, .alpha = 1};
    r = &rows[(*nrows)++];
    snprintf(r->name, sizeof r->name, "dW   %zux%zux%zu T", c_out, c_in, n_tok);
    r->g = (gemm_args){.trans_a = 1, .m = c_out, .n = c_in, .k = n_tok, .a_type = BT_DTYPE_F32,
                       .b_type = BT_DTYPE_F32, .a = buf->a, .lda = c_out, .b = buf->b,
                       .ldb = c_in, .c = buf->c, .ldc = c_in, .alpha = 1, .beta = 1};
    if (n_tok < 2600) return;
    /* the same weight gradient with doutᵀ already stored (OC, N): what the transposed-A form
     * above costs oneDNN (its copy of A), against the price of a transposed copy of dout */
    r = &rows[(*nrows)++];
    snprintf(r->name, sizeof r->name, "dWp  %zux%zux%zu", c_out, c_in, n_tok);
    r->g = (gemm_args){.m = c_out, .n = c_in, .k = n_tok, .a_type = BT_DTYPE_F32,
                       .b_type = BT_DTYPE_F32, .a = buf->a, .lda = n_tok, .b = buf->b,
                       .ldb = c_in, .c = buf->c, .ldc = c_in, .alpha = 1, .beta = 1};
}

/* --cold: the Linear products as the model runs them, at the text batch's 320 rows and the
 * image batch's 2600, in fp32 (the fp32 model, and the bf16 model where BT_GEMM_BF16=auto
 * chose fp32 products) and in bf16 (fp32 activations rounded per call, bf16 weights), each
 * timed three ways, interleaved call by call so that a shared machine's drift falls on all
 * three alike:
 *   hot      one weight, one input, one output, called again and again: in cache, as the table
 *            above (and any benchmark of a single product) measures it;
 *   cold W   distinct weights, four times the L3 in all (at least 256 MB), used in turn: each
 *            call reads its weight from memory, as a training step does (a pass over the model
 *            reads each weight once per product, and the model's weights are ~20x the cache);
 *   cold all distinct weights, inputs and outputs (each set four times the L3): every operand
 *            read from memory and the output written to lines no cache holds, as each product
 *            of a step writes a fresh activation.
 * The median call of each (a cold call is the common case, so the fastest would hide it). The
 * ratios are what the operands' trips from memory cost a product of that shape, the part of
 * the gap between this benchmark's rates and the step's (bench_step --kernels) that no kernel
 * choice removes. */
typedef struct cold_sets {
    const void **w, **a; /* nw weights, na inputs */
    float **c;           /* na outputs */
    size_t nw, na;
} cold_sets;

/* Median seconds of the three ways (hot, cold W, cold all), `rounds` calls of each in turn. */
static void cold_medians(const gemm_args *g, const cold_sets *cs, int rounds, double med[3]) {
    double *t = malloc(3 * (size_t)rounds * sizeof(double));
    gemm_args one = *g;
    for (size_t i = 0; i < cs->nw || i < cs->na; i++) { /* warm-up: primitive creation */
        one.b = cs->w[i % cs->nw];
        one.a = cs->a[i % cs->na];
        one.c = cs->c[i % cs->na];
        gemm(&one);
    }
    for (int r = 0; r < rounds; r++) {
        for (int way = 0; way < 3; way++) {
            const size_t iw = way == 0 ? 0 : (size_t)r % cs->nw;
            const size_t ia = way == 2 ? (size_t)r % cs->na : 0;
            one.b = cs->w[iw];
            one.a = cs->a[ia];
            one.c = cs->c[ia];
            const double t0 = bt_now_s();
            gemm(&one);
            t[way * rounds + r] = bt_now_s() - t0;
        }
    }
    for (int way = 0; way < 3; way++) {
        qsort(t + way * rounds, (size_t)rounds, sizeof(double), cmp_double);
        med[way] = t[way * rounds + rounds / 2];
    }
    free(t);
}

/* n buffers of `bytes`, each a copy of `bytes` of src (from an offset that rotates where src is
 * longer), or zeros where src is NULL; written here, so every page is faulted in. */
static void **cold_buffers(size_t n, size_t bytes, const void *src, size_t src_bytes) {
    void **v = malloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++) {
        v[i] = malloc(bytes);
        if (!src) {
            memset(v[i], 0, bytes);
            continue;
        }
        const size_t off = (i * 4096) % (src_bytes - bytes + 1);
        memcpy(v[i], (const char *)src + off, bytes);
    }
    return v;
}

static void cold_buffers_free(void **v, size_t n) {
    for (size_t i = 0; i < n; i++) free(v[i]);
    free(v);
}

static void cold_table(const buffers *buf) {
    long l3 = -1;
#ifdef _SC_LEVEL3_CACHE_SIZE
    l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
#endif
    /* four times the L3 as sysconf reports it (a VM may report more than lscpu's), at
     * least 256 MB (more than any L3 it has been run on), at most 2 GB */
    const size_t cache = l3 > 0 ? (size_t)l3 : 0, lo = (size_t)256 << 20, hi = (size_t)2 << 30;
    const size_t cold_bytes = 4 * cache < lo ? lo : 4 * cache > hi ? hi : 4 * cache;
    printf("# cold operands: L3 %.1f MB (sysconf%s); each cold set (weights; inputs and "
           "outputs) %.0f MB in all, used in turn; median call, the three ways interleaved\n",
           (double)cache / 1e6, l3 > 0 ? "" : ": not reported", (double)cold_bytes / 1e6);
    printf("\n%-26s %10s %10s %10s %9s %9s\n", "product (as trained)", "hot GF/s", "cold W",
           "cold all", "W/hot", "all/hot");
    static const size_t tokens[] = {8 * 40, 8 * 325};
    static const size_t io[][2] = {{768, 768}, {768, 3072}, {3072, 768}}; /* in, out */
    for (int prec = 0; prec < 2; prec++) { /* fp32, bf16 */
        const bt_dtype wt = prec ? BT_DTYPE_BF16 : BT_DTYPE_F32;
        for (int t = 0; t < 2; t++) {
            for (int s = 0; s < 3; s++) {
                for (int form = 0; form < 2; form++) { /* fwd: x Wᵀ, dX: dout W */
                    const size_t n_tok = tokens[t], in = io[s][0], out = io[s][1];
                    gemm_args g = {.m = n_tok, .a_type = BT_DTYPE_F32, .b_type = wt,
                                   .alpha = 1,
                                   .compute = prec ? GEMM_COMPUTE_BF16 : GEMM_COMPUTE_F32};
                    if (form == 0) {
                        g.trans_b = 1, g.n = out, g.k = in, g.lda = in, g.ldb = in,
                        g.ldc = out;
                        g.bias = buf->bias;
                    } else {
                        g.n = in, g.k = out, g.lda = out, g.ldb = in, g.ldc = in;
                    }
                    const size_t w_bytes = in * out * bt_dtype_size(wt);
                    const size_t a_bytes = g.m * g.k * sizeof(float);
                    const size_t c_bytes = g.m * g.n * sizeof(float);
                    cold_sets cs = {.nw = cold_bytes / w_bytes + 1,
                                    .na = cold_bytes / (a_bytes + c_bytes) + 1};
                    cs.w = (const void **)cold_buffers(cs.nw, w_bytes, prec ? (void *)buf->b16
                                                                           : (void *)buf->b,
                                                       buf->n * bt_dtype_size(wt));
                    cs.a = (const void **)cold_buffers(cs.na, a_bytes, buf->a,
                                                       buf->n * sizeof(float));
                    cs.c = (float **)cold_buffers(cs.na, c_bytes, NULL, 0);
                    const size_t most = cs.nw > cs.na ? cs.nw : cs.na;
                    double med[3];
                    cold_medians(&g, &cs, (int)(2 * most > 21 ? 2 * most : 21), med);
                    char name[40];
                    snprintf(name, sizeof name, "%s %s %zux%zux%zu", prec ? "bf16" : "fp32",
                             form ? "dX " : "fwd", g.m, g.n, g.k);
                    printf("%-26s %10.1f %10.1f %10.1f %9.2f %9.2f\n", name,
                           flops_of(&g) / med[0] * 1e-9, flops_of(&g) / med[1] * 1e-9,
                           flops_of(&g) / med[2] * 1e-9, med[0] / med[1], med[0] / med[2]);
                    fflush(stdout);
                    cold_buffers_free((void **)cs.w, cs.nw);
                    cold_buffers_free((void **)cs.a, cs.na);
                    cold_buffers_free((void **)cs.c, cs.na);
                }
            }
        }
    }
}

int main(int argc, char **argv) {
    int quick = 0, passes = 1, cold = 0, fused_qkv = 0;
    const char *only = NULL;
    double seconds = 0.0; /* --seconds: 0 = the default (or --quick's) */
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) {
            quick = 1;
        } else if (strcmp(argv[i], "--passes") == 0 && i + 1 < argc) {
            passes = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc) {
            only = argv[++i];
        } else if (strcmp(argv[i], "--fused-qkv") == 0) {
            fused_qkv = 1;
        } else if (strcmp(argv[i], "--cold") == 0) {
            cold = 1;
        } else if (strcmp(argv[i], "--median") == 0) {
            bench_median = 1;
        } else if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc) {
            char *end;
            seconds = strtod(argv[++i], &end);
            if (end == argv[i] || *end || !(seconds > 0.0 && seconds <= 3600.0)) {
                fprintf(stderr, "bench_gemm: --seconds %s: expected seconds in (0, 3600]\n",
                        argv[i]);
                return 2;
            }
        } else {
            return tu_usage(argv[i], "usage: bench_gemm [--quick] [--passes P] "
                                     "[--only SUBSTRING] [--cold] [--fused-qkv] [--median] "
                                     "[--seconds S]\n");
        }
    }
    if (passes < 1) passes = 1;
    if (quick) bench_seconds = 0.05;
    if (seconds > 0.0) bench_seconds = seconds;
    if (gemm_init_from_env() != BT_OK) {
        fprintf(stderr, "bench_gemm: %s\n", bt_error_message());
        return 1;
    }
    int have_dnnl = gemm_backend_available(GEMM_BACKEND_ONEDNN);
    int omp_threads = 1;
#if BT_HAVE_OPENMP
    omp_threads = omp_get_max_threads();
#endif
    printf("# bench_gemm: GEMM GFLOP/s of the %s call in ~%.2f s of calls, best of %d "
           "pass(es)\n",
           bench_median ? "median" : "fastest", bench_seconds, passes);
    printf("# CPU ISA (oneDNN dispatch): %s; native bf16: %s; DNNL_MAX_CPU_ISA=%s\n",
           gemm_cpu_isa_name(), gemm_cpu_has_bf16() ? "yes" : "no",
           getenv("DNNL_MAX_CPU_ISA") ? getenv("DNNL_MAX_CPU_ISA") : "(unset)");
    printf("# threads: OpenMP (oneDNN, conversions) %d, OpenBLAS %d; oneDNN built: %s\n",
           omp_threads, openblas_get_num_threads(), have_dnnl ? "yes" : "no");
#if BT_HAVE_ONEDNN
    const dnnl_version_t *v = dnnl_version();
    printf("# oneDNN %d.%d.%d; OpenBLAS core %s (%s)\n", v->major, v->minor, v->patch,
           openblas_get_corename(), openblas_get_config());
#endif

    const char *fit = bt_openblas_core_for(openblas_get_corename(), bt_isa_detected());
    if (fit)
        printf("# NOTE: OpenBLAS picked its Prescott (SSE3) kernels: it does not know this CPU "
               "model; OPENBLAS_CORETYPE=%s selects its kernels for this CPU's level\n", fit);
    const int openblas_runs = bt_openblas_core_check() == BT_OK;
    if (!openblas_runs) printf("# oblas32 column not run (nan): %s\n", bt_error_message());

    /* largest operand: 2600 x 3072 (and the 2048^2 square); C up to 2600 x 3072 or 24 x 325^2 */
    buffers buf;
    buf.n = 2600u * 3072u;
    if (buf.n < 2048u * 2048u) buf.n = 2048u * 2048u;
    buf.a = malloc(buf.n * sizeof(float));
    buf.b = malloc(buf.n * sizeof(float));
    buf.c = malloc(buf.n * sizeof(float));
    buf.a16 = malloc(buf.n * sizeof(bt_bf16));
    buf.b16 = malloc(buf.n * sizeof(bt_bf16));
    buf.bias = malloc(4096 * sizeof(float));
    fill(buf.a, buf.n, 1);
    fill(buf.b, buf.n, 2);
    fill(buf.c, buf.n, 3);
    fill(buf.bias, 4096, 4);
    for (size_t i = 0; i < buf.n; i++) {
        buf.a16[i] = bt_bf16_from_f32(buf.a[i]);
        buf.b16[i] = bt_bf16_from_f32(buf.b[i]);
    }

    if (cold) {
        cold_table(&buf);
        gemm_release();
        buffers_free(&buf);
        return 0;
    }

    row rows[64];
    int nrows = 0;
    const size_t C = 768, FF = 3072, NH = 12, D = 64, T = 325;
    static const size_t tokens[] = {2 * 40, 8 * 40, 2 * 325, 8 * 325};
    for (int t = 0; t < (quick ? 1 : 4); t++) {
        int bwd = tokens[t] >= 320;
        add_linear(rows, &nrows, tokens[t], C, C, &buf, bwd);
        add_linear(rows, &nrows, tokens[t], C, FF, &buf, bwd);
        add_linear(rows, &nrows, tokens[t], FF, C, &buf, bwd);
        if (fused_qkv && bwd) add_linear(rows, &nrows, tokens[t], C, 3 * C, &buf, 1);
    }
    if (!quick) {
        /* attention of one image (T = 325 tokens): Q, K, V are column blocks of (T, 768)
         * projections, head h at column h*D, so one call batches the NH heads with item
         * stride D. The heads of the B images are not one uniform stride apart (D within an
         * image, T*768 across), so a batch of B images is B such calls. */
        row *r = &rows[nrows++];
        snprintf(r->name, sizeof r->name, "attn QKt %zux(%zux%zux%zu)", NH, T, T, D);
        r->g = (gemm_args){.trans_b = 1, .m = T, .n = T, .k = D, .a_type = BT_DTYPE_F32,
                           .b_type = BT_DTYPE_F32, .a = buf.a, .lda = C, .b = buf.b, .ldb = C,
                           .c = buf.c, .ldc = T, .alpha = 0.125f, .batch = NH,
                           .stride_a = D, .stride_b = D, .stride_c = T * T};
        r = &rows[nrows++];
        *r = rows[nrows - 2];
        snprintf(r->name, sizeof r->name, "attn QKt as %zu omp calls", NH);
        r->per_item_omp = 1;
        r = &rows[nrows++];
        snprintf(r->name, sizeof r->name, "attn PV  %zux(%zux%zux%zu)", NH, T, D, T);
        r->g = (gemm_args){.m = T, .n = D, .k = T, .a_type = BT_DTYPE_F32,
                           .b_type = BT_DTYPE_F32, .a = buf.a, .lda = T, .b = buf.b, .ldb = C,
                           .c = buf.c, .ldc = C, .alpha = 1, .batch = NH,
                           .stride_a = T * T, .stride_b = D, .stride_c = D};
        r = &rows[nrows++];
        *r = rows[nrows - 2];
        snprintf(r->name, sizeof r->name, "attn PV as %zu omp calls", NH);
        r->per_item_omp = 1;
        static const size_t sq[] = {1024, 2048};
        for (int i = 0; i < 2; i++) {
            r = &rows[nrows++];
            snprintf(r->name, sizeof r->name, "square %zu^3", sq[i]);
            r->g = (gemm_args){.m = sq[i], .n = sq[i], .k = sq[i], .a_type = BT_DTYPE_F32,
                               .b_type = BT_DTYPE_F32, .a = buf.a, .lda = sq[i], .b = buf.b,
                               .ldb = sq[i], .c = buf.c, .ldc = sq[i], .alpha = 1};
        }
    }

    if (only) {
        int kept = 0;
        for (int i = 0; i < nrows; i++)
            if (strstr(rows[i].name, only)) rows[kept++] = rows[i];
        nrows = kept;
    }
    double(*cell)[5] = malloc((size_t)(nrows ? nrows : 1) * sizeof *cell);
    for (int i = 0; i < nrows; i++)
        for (int c = 0; c < 5; c++) cell[i][c] = NAN;
    double ceiling[2] = {NAN, NAN}; /* fp32 FMA, bf16 dot: best over passes */
    for (int pass = 0; pass < passes; pass++) {
#if BENCH_HAVE_X86
        __builtin_cpu_init();
        int has_isa[2] = {__builtin_cpu_supports("avx512f"), __builtin_cpu_supports("avx512bf16")};
        for (int c = 0; c < 2; c++) {
            if (!has_isa[c]) continue;
            double gflops = peak_instr(c);
            if (isnan(ceiling[c]) || gflops > ceiling[c]) ceiling[c] = gflops;
        }
#endif
        for (int i = 0; i < nrows; i++) {
            double gf[5];
            measure_row(&rows[i], &buf, have_dnnl, openblas_runs, gf);
            for (int c = 0; c < 5; c++)
                if (isnan(cell[i][c]) || gf[c] > cell[i][c]) cell[i][c] = gf[c];
        }
        if (passes > 1) fprintf(stderr, "bench_gemm: pass %d of %d done\n", pass + 1, passes);
    }
    printf("# instruction ceiling (all threads, best of passes): fp32 vfmadd231ps %.1f GFLOP/s, "
           "bf16 vdpbf16ps %.1f GFLOP/s\n",
           ceiling[0], ceiling[1]);
    printf("\n%-30s %8s %8s %9s %9s %10s %10s %7s\n", "shape (m x n x k)", "GFLOP", "ref",
           "oblas32", "dnnl32", "dnnl16mix", "dnnl16", "x16/ob");
    double peak[4] = {0, 0, 0, 0};
    const char *peak_at[4] = {"", "", "", ""};
    for (int i = 0; i < nrows; i++) {
        row *r = &rows[i];
        double *gf = cell[i];
        double best16 = fmax(gf[3], gf[4]);
        printf("%-30s %8.3f %8.2f %9.1f %9.1f %10.1f %10.1f %7.2f\n", r->name,
               flops_of(&r->g) * 1e-9, gf[0], gf[1], gf[2], gf[3], gf[4], best16 / gf[1]);
        if (flops_of(&r->g) >= 1e9 && !r->per_item_omp) {
            for (int p = 0; p < 4; p++) {
                if (gf[p + 1] > peak[p]) {
                    peak[p] = gf[p + 1];
                    peak_at[p] = r->name;
                }
            }
        }
    }
    if (have_dnnl) {
        printf("\n# oneDNN implementations chosen:\n");
        for (int i = 0; i < nrows; i++) {
            if (rows[i].per_item_omp) continue;
            gemm_args bf = rows[i].g;
            bf.compute = GEMM_COMPUTE_BF16;
            bf.a_type = bf.b_type = BT_DTYPE_BF16;
            bf.a = buf.a16;
            bf.b = buf.b16;
            printf("#   %-30s f32 %-22s bf16 %s\n", rows[i].name, gemm_onednn_impl_name(&rows[i].g),
                   gemm_onednn_impl_name(&bf));
        }
    }
    static const char *const pname[4] = {"openblas fp32", "onednn fp32", "onednn bf16 (mixed)",
                                          "onednn bf16 (bf16 operands)"};
    printf("\n# machine GEMM peak (best over shapes >= 1 GFLOP%s):\n",
           bench_median ? "; of median calls, so not the peak the side-by-side takes" : "");
    for (int p = 0; p < 4; p++)
        if (peak[p] > 0) printf("#   %-28s %8.1f GFLOP/s  (%s)\n", pname[p], peak[p], peak_at[p]);

    free(cell);
    gemm_release();
    buffers_free(&buf);
    return 0;
}
