/* test_determinism.c: the reproducibility guarantees of docs/determinism.md, each a case here.
 * argv[1] = the bt-forward binary (part 3).
 *
 * 1. bt's own kernels (ops.h), in process: the same inputs give the same output BYTES
 *    (a) whatever the address of the buffers (inputs and outputs placed at float offsets
 *        0, 1, 3, 8 and 13: every alignment class of a 64-byte line that matters), at every ISA
 *        level and thread count;
 *    (b) at every ISA level the CPU runs (ops_cpu_isa_select: scalar, avx2, avx512,
 *        avx512_bf16), against the best level;
 *    (c) at 1, 2 and 3 threads — except `linear`, whose GEMM library may block and split its
 *        sums by thread count: it must agree within the GEMM bound of part 2 instead.
 *    Sizes are odd (257 columns, 301 rows, 37 tokens) so the vector tails and the parallel
 *    paths (more than OPS_PAR_MIN elements) both run.
 * 2. gemm() on every backend built (ref, openblas, onednn), fp32 and bf16 compute: the same
 *    bytes at every buffer offset (same backend, same thread count); against the exact product
 *    (double) within the classical bound |c - c*| <= gamma_{k+2} (|alpha| sum|a||b| + |beta c0|
 *    + |bias|), gamma_n = n u / (1 - n u), u = 2^-24 (Higham, Accuracy and Stability of
 *    Numerical Algorithms, 3.5) at 1 and 2 threads, with the bf16-rounded operands in place of
 *    a and b for bf16 compute (every backend rounds them by the same rule, gemm.h). Any
 *    summation order meets it; a wrong term or a dropped block does not.
 * 3. bt-forward on the tiny fixture model (the user-visible path, in child processes):
 *    (a) the same inputs written with different file layouts (tensor order, header padding,
 *        so the data sits at other offsets) give the same output bytes, at every
 *        (ISA level, thread count) pair with the default backend;
 *    (b) the same command twice gives the same bytes (run to run);
 *    (c) across ISA levels (BT_CPU_ISA with DNNL_MAX_CPU_ISA to match), GEMM backends
 *        (BT_GEMM) and thread counts, the outputs and (with --backward) every gradient agree
 *        with the default run within atol = 2e-5 * max|x| per tensor, rtol = 2e-5: each run is
 *        held within 1e-5 of that scale of the float64 PyTorch twin (test_model_parity,
 *        test_bt_forward), so two runs are within twice that. Attention key biases, whose
 *        exact gradient is 0, take the scale of the key weight's gradient (rtol 0), as there.
 *        A wrong kernel at some level is off by >= 1e-3 of the scale. The largest difference
 *        seen is printed (below 1e-6 on the tiny model).
 *    Whether 1 and 2 threads happen to agree bitwise at each level is printed, not required
 *    (oneDNN's AVX2 sgemm splits sums by thread count; docs/determinism.md).
 *
 * Deliberately not here: the numerical accuracy of each kernel (test_ops_fast, test_ops_grad)
 * and of the model (test_model_parity). */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "kernels/cpu.h"
#include "kernels/gemm.h"
#include "kernels/ops.h"
#include "safetensors.h"
#include "test_fixture.h"
#include "test_util.h"

static void set_threads(int t) {
#ifdef _OPENMP
    omp_set_num_threads(t);
#else
    (void)t;
#endif
}

/* --- 1. kernels ------------------------------------------------------------------------- */

enum { N = 301, C = 257, NC = N * C };                   /* row kernels */
enum { AB = 2, AT = 37, AH = 3, AD = 24, AC = AH * AD }; /* attention */
enum { AX = AB * AT * AC, AP = AB * AH * AT * AT };
enum { CV = 131, CN = 301 }; /* cross entropy */
enum { EROWS = 97 };         /* embedding table rows */
enum { LN = 97, LOC = 131 }; /* linear (N, C) -> (N, OC) */

static int32_t ce_targets[CN], emb_ids[N], attn_mask[AB * AT];

typedef struct kcase {
    const char *name;
    size_t n_in, n_out; /* floats */
    int gemm_based;     /* results may depend on the GEMM library's thread count */
    void (*run)(float *out, const float *in);
} kcase;

static void k_layernorm(float *o, const float *in) {
    const float *x = in, *w = x + NC, *b = w + C, *dout = b + C;
    float *y = o, *mean = y + NC, *rstd = mean + N, *dx = rstd + N, *dw = dx + NC, *db = dw + C;
    layernorm_forward(y, mean, rstd, x, w, b, N, C, 1e-5f);
    layernorm_backward(dx, dw, db, dout, x, w, mean, rstd, N, C, BT_DX_ADD);
}
/* the fused LayerNorm backwards: dx = res + LN'(dout); d res = LN'(dout) with d z its
 * dropout backward, 7 blocks of 43 rows with their own masks */
static void k_layernorm_fused(float *o, const float *in) {
    const float *x = in, *w = x + NC, *b = w + C, *dout = b + C, *res = dout + NC;
    float *y = o, *mean = y + NC, *rstd = mean + N, *dx = rstd + N, *dres = dx + NC;
    float *dz = dres + NC, *dw = dz + NC, *db = dw + C;
    bt_dropout drops[7];
    for (int k = 0; k < 7; k++) drops[k] = (bt_dropout){0.1f, 4242u + (uint64_t)k};
    layernorm_forward(y, mean, rstd, x, w, b, N, C, 1e-5f);
    layernorm_backward_residual(dx, dw, db, dout, res, x, w, mean, rstd, N, C, BT_DX_SET);
    layernorm_backward_residual(dx, dw, db, dout, res, x, w, mean, rstd, N, C, BT_DX_ADD);
    layernorm_backward_dropout(dres, dz, dw, db, dout, x, w, mean, rstd, N, C, drops, N / 7);
}
static void k_softmax(float *o, const float *in) {
    softmax_forward(o, in, N, C);
    softmax_backward(o + NC, in + NC, o, N, C);
}
static void k_gelu(float *o, const float *in) {
    gelu_forward(o, in, NC);
    gelu_backward(o + NC, in + NC, in, NC, BT_DX_ADD);
}
static void k_quick_gelu(float *o, const float *in) {
    quick_gelu_forward(o, in, NC);
    quick_gelu_backward(o + NC, in + NC, in, NC, BT_DX_ADD);
}
static void k_tanh(float *o, const float *in) {
    tanh_forward(o, in, NC);
    tanh_backward(o + NC, in + NC, o, NC);
}
static void k_attention(float *o, const float *in) {
    const float *q = in, *k = q + AX, *v = k + AX, *dout = v + AX;
    float *kb = o, *out = kb + AB * AT, *probs = out + AX, *dq = probs + AP, *dk = dq + AX,
          *dv = dk + AX;
    attention_key_bias_from_mask(kb, attn_mask, AB * AT);
    const attention_dims d = {AB, AT, AT, AH, AD, AC, AC, AC, AC, 0};
    const bt_dropout drop = {0.1f, 12345};
    attention_forward(out, probs, q, k, v, kb, &d, &drop, GEMM_COMPUTE_F32);
    attention_backward(dq, dk, dv, dout, probs, q, k, v, kb, &d, &drop, GEMM_COMPUTE_F32,
                       BT_DX_ADD);
}
static void k_cross_entropy(float *o, const float *in) {
    size_t nv = 0;
    o[0] = cross_entropy_forward(o + 1, in, ce_targets, CN, CV, -100, &nv);
    cross_entropy_backward(o + 1 + CN * CV, o + 1, ce_targets, CN, CV, -100, 1.0f);
}
static void k_l2_normalize(float *o, const float *in) {
    l2_normalize_forward(o, o + NC, in, N, C);
    l2_normalize_backward(o + NC + N, in + NC, o, o + NC, N, C);
}
static void k_bias_add(float *o, const float *in) {
    bias_add_forward(o, in, in + NC, N, C);
    bias_add_backward(o + NC, o + 2 * NC, in + NC + C, N, C);
}
static void k_embedding(float *o, const float *in) {
    embedding_forward(o, emb_ids, in, N, C, EROWS);
    embedding_backward(o + NC, in + EROWS * C, emb_ids, N, C, EROWS, 1);
}
static void k_dropout(float *o, const float *in) {
    const bt_dropout d = {0.2f, 777};
    dropout_forward(o, in, NC, &d);
    dropout_backward(o + NC, in + NC, NC, &d, BT_DX_ADD);
}
/* in: x with a few subnormal and huge elements (see main); out: bf16 bits, then widened */
static void k_bf16(float *o, const float *in) {
    bt_bf16 *h = (bt_bf16 *)o;
    bf16_from_f32(h, in, NC);
    f32_from_bf16(o + (NC + 1) / 2, h, NC);
}
static void k_linear(float *o, const float *in) {
    const float *x = in, *w = x + LN * C, *b = w + LOC * C, *dout = b + LOC;
    float *y = o, *dx = y + LN * LOC, *dw = dx + LN * C, *db = dw + LOC * C;
    linear_forward(y, x, NULL, w, NULL, NULL, b, LN, C, LOC, GEMM_COMPUTE_F32);
    linear_backward(dx, dw, db, dout, NULL, x, NULL, w, NULL, LN, C, LOC, GEMM_COMPUTE_F32,
                    BT_DX_ADD);
}

static const kcase kcases[] = {
    {"layernorm", 2 * NC + 2 * C, 2 * NC + 2 * N + 2 * C, 0, k_layernorm},
    {"softmax", 2 * NC, 2 * NC, 0, k_softmax},
    {"gelu", 2 * NC, 2 * NC, 0, k_gelu},
    {"quick_gelu", 2 * NC, 2 * NC, 0, k_quick_gelu},
    {"tanh", 2 * NC, 2 * NC, 0, k_tanh},
    {"attention (dropout 0.1, masked keys)", 4 * AX, AB *AT + 4 * AX + AP, 0, k_attention},
    {"cross_entropy", CN *CV, 1 + 2 * CN *CV, 0, k_cross_entropy},
    {"l2_normalize", 2 * NC, 2 * NC + N, 0, k_l2_normalize},
    {"bias_add (column sums)", 2 * NC + C, 2 * NC + C, 0, k_bias_add},
    {"embedding (scatter-add)", EROWS *C + NC, NC + EROWS *C, 0, k_embedding},
    {"dropout", 2 * NC, 2 * NC, 0, k_dropout},
    {"bf16 conversions", NC, (NC + 1) / 2 + NC, 0, k_bf16},
    {"linear (GEMM)", LN *C + LOC *C + LOC + LN *LOC, LN *LOC + LN *C + LOC *C + LOC, 1, k_linear},
    {"layernorm residual / dropout backward", 3 * NC + 2 * C, 4 * NC + 2 * N + 2 * C, 0,
     k_layernorm_fused},
};

static const size_t offsets[] = {0, 1, 3, 8, 13}; /* floats */
#define N_OFFSETS (sizeof offsets / sizeof offsets[0])
static const int thread_counts[] = {1, 2, 3};

/* Runs kc with inputs and outputs at float offset off; the outputs (zeroed first: backward
 * kernels accumulate) are copied to result. */
static void run_case(const kcase *kc, const float *inputs, size_t off, float *inbuf, float *outbuf,
                     float *result) {
    memcpy(inbuf + off, inputs, kc->n_in * sizeof *inputs);
    memset(outbuf + off, 0, kc->n_out * sizeof *outbuf);
    kc->run(outbuf + off, inbuf + off);
    memcpy(result, outbuf + off, kc->n_out * sizeof *result);
}

static void test_kernels(void) {
    bt_isa levels[BT_ISA_COUNT];
    int n_levels = 0;
    for (int l = 0; l < BT_ISA_COUNT; l++)
        if (ops_cpu_isa_select((bt_isa)l)) levels[n_levels++] = (bt_isa)l;
    const bt_isa best = levels[n_levels - 1];
    printf("# kernel ISA levels built and run by this CPU:");
    for (int l = 0; l < n_levels; l++)
        printf(" %s", bt_isa_name(levels[l]));
    printf("\n");

    tu_rng rng;
    tu_rng_seed(&rng, 20261124);
    for (size_t i = 0; i < CN; i++)
        ce_targets[i] = i % 7 == 3 ? -100 : (int32_t)(tu_rng_next(&rng) % CV);
    for (size_t i = 0; i < N; i++)
        emb_ids[i] = (int32_t)(tu_rng_next(&rng) % EROWS);
    for (size_t i = 0; i < AB * AT; i++)
        attn_mask[i] = (i % AT) < AT - 5 * (i / AT) - 3;

    for (size_t c = 0; c < sizeof kcases / sizeof kcases[0]; c++) {
        const kcase *kc = &kcases[c];
        float *inputs = malloc(kc->n_in * sizeof *inputs);
        float *inbuf = malloc((kc->n_in + 16) * sizeof *inbuf);
        float *outbuf = malloc((kc->n_out + 16) * sizeof *outbuf);
        float *want = malloc(kc->n_out * sizeof *want), *got = malloc(kc->n_out * sizeof *got);
        float *lt = malloc(kc->n_out * sizeof *lt); /* this (level, threads) at offset 0 */
        BT_ASSERT(inputs && inbuf && outbuf && want && got && lt);
        tu_fill_uniform_f32(&rng, inputs, kc->n_in, -2.0f, 2.0f);
        if (kc->run == k_bf16) /* subnormals (a vector path flushes them) and near-overflow */
            for (size_t i = 0; i < kc->n_in; i += 97)
                inputs[i] *= i % 2 ? 1e-39f : 1.7e38f;

        ops_cpu_isa_select(best);
        set_threads(2);
        run_case(kc, inputs, 0, inbuf, outbuf, want);

        int same_offsets = 1, same_levels = 1, same_threads = 1;
        char first_bad[160] = "";
        double worst_linear = 0.0;
        for (int l = 0; l < n_levels; l++) {
            ops_cpu_isa_select(levels[l]);
            for (size_t t = 0; t < sizeof thread_counts / sizeof thread_counts[0]; t++) {
                set_threads(thread_counts[t]);
                run_case(kc, inputs, 0, inbuf, outbuf, lt);
                const int differs = memcmp(lt, want, kc->n_out * sizeof *lt) != 0;
                if (differs && thread_counts[t] == 2) {
                    same_levels = 0;
                    if (!*first_bad)
                        snprintf(first_bad, sizeof first_bad,
                                 " (first difference: level %s, 2 threads)",
                                 bt_isa_name(levels[l]));
                } else if (differs && levels[l] == best) {
                    if (kc->gemm_based) {
                        /* within the product bound: |dy| <= 2 gamma_{C+2} sum|x||w| etc.;
                         * inputs in [-2, 2]: sum|x||w| <= 4 C, so 2 * 1.6e-5 * 4 = 1.3e-4 */
                        for (size_t i = 0; i < kc->n_out; i++) {
                            const double d = fabs((double)lt[i] - want[i]);
                            worst_linear = d > worst_linear ? d : worst_linear;
                        }
                    } else {
                        same_threads = 0;
                        if (!*first_bad)
                            snprintf(first_bad, sizeof first_bad,
                                     " (first difference: level %s, %d threads)",
                                     bt_isa_name(levels[l]), thread_counts[t]);
                    }
                }
                for (size_t o = 1; o < N_OFFSETS; o++) {
                    run_case(kc, inputs, offsets[o], inbuf, outbuf, got);
                    if (memcmp(got, lt, kc->n_out * sizeof *got) != 0) {
                        if (same_offsets)
                            snprintf(first_bad, sizeof first_bad,
                                     " (first difference: offset %zu floats, level %s, %d "
                                     "threads)",
                                     offsets[o], bt_isa_name(levels[l]), thread_counts[t]);
                        same_offsets = 0;
                    }
                }
            }
        }
        tu_check(same_offsets,
                 "%s: same bytes at buffer offsets 0, 1, 3, 8, 13 floats, every level and "
                 "thread count%s",
                 kc->name, same_offsets ? "" : first_bad);
        tu_check(same_levels, "%s: same bytes at every ISA level%s", kc->name,
                 same_levels ? "" : first_bad);
        if (kc->gemm_based) {
            /* C = 257 terms of |x||w| <= 4 (inputs in [-2, 2]), 97 rows for dw: the larger
             * sum, 97 * 4 = 388 per element, times 2 gamma_{99} ~ 1.2e-5 -> 4.6e-3 */
            const double bound = 2.0 * (99 * 0x1p-24) * 388.0;
            tu_check(worst_linear <= bound,
                     "%s: 1, 2, 3 threads agree within the GEMM bound: max |diff| %.3g <= %.3g "
                     "(bitwise: %s)",
                     kc->name, worst_linear, bound, worst_linear == 0.0 ? "yes" : "no");
        } else {
            tu_check(same_threads, "%s: same bytes at 1, 2 and 3 threads%s", kc->name,
                     same_threads ? "" : first_bad);
        }
        free(inputs);
        free(inbuf);
        free(outbuf);
        free(want);
        free(got);
        free(lt);
    }
    ops_cpu_isa_select(bt_cpu_isa_active());
    set_threads(2);
}

/* --- 2. gemm ---------------------------------------------------------------------------- */

enum { GM = 67, GN = 131, GK = 259 };

static float bf16_round(float x) {
    return bt_f32_from_bf16(bt_bf16_from_f32(x));
}

static void test_gemm(void) {
    tu_rng rng;
    tu_rng_seed(&rng, 7);
    static float a[GM * GK], b[GN * GK], c0[GM * GN], bias[GN];
    static float abuf[GM * GK + 16], bbuf[GN * GK + 16], cbuf[GM * GN + 16];
    static float ref_bytes[GM * GN], got[GM * GN];
    static double exact[2][GM * GN], bound[2][GM * GN];
    tu_fill_uniform_f32(&rng, a, GM * GK, -1.0f, 1.0f);
    tu_fill_uniform_f32(&rng, b, GN * GK, -1.0f, 1.0f);
    tu_fill_uniform_f32(&rng, c0, GM * GN, -1.0f, 1.0f);
    tu_fill_uniform_f32(&rng, bias, GN, -1.0f, 1.0f);
    const float alpha = 0.75f, beta = 0.5f;
    const double gamma = (GK + 2) * 0x1p-24 / (1.0 - (GK + 2) * 0x1p-24);
    for (int bf = 0; bf < 2; bf++)
        for (size_t i = 0; i < GM; i++)
            for (size_t j = 0; j < GN; j++) {
                double s = 0.0, sa = 0.0;
                for (size_t p = 0; p < GK; p++) {
                    const double x = bf ? bf16_round(a[i * GK + p]) : a[i * GK + p];
                    const double y = bf ? bf16_round(b[j * GK + p]) : b[j * GK + p];
                    s += x * y;
                    sa += fabs(x * y);
                }
                const double cb = (double)beta * c0[i * GN + j];
                exact[bf][i * GN + j] = alpha * s + cb + bias[j];
                bound[bf][i * GN + j] = gamma * (fabs(alpha) * sa + fabs(cb) + fabs(bias[j]));
            }

    for (int be = 0; be < GEMM_BACKEND_COUNT; be++) {
        if (!gemm_backend_available((gemm_backend)be)) continue;
        for (int bf = 0; bf < 2; bf++) {
            for (int threads = 1; threads <= 2; threads++) {
                set_threads(threads);
                int same = 1;
                double worst = 0.0;
                for (size_t o = 0; o < N_OFFSETS; o++) {
                    const size_t off = offsets[o];
                    memcpy(abuf + off, a, sizeof a);
                    memcpy(bbuf + off, b, sizeof b);
                    memcpy(cbuf + off, c0, sizeof c0);
                    const gemm_args g = {.trans_b = 1,
                                         .m = GM,
                                         .n = GN,
                                         .k = GK,
                                         .a_type = BT_DTYPE_F32,
                                         .b_type = BT_DTYPE_F32,
                                         .a = abuf + off,
                                         .lda = GK,
                                         .b = bbuf + off,
                                         .ldb = GK,
                                         .c = cbuf + off,
                                         .ldc = GN,
                                         .alpha = alpha,
                                         .beta = beta,
                                         .bias = bias,
                                         .compute = bf ? GEMM_COMPUTE_BF16 : GEMM_COMPUTE_F32};
                    gemm_with((gemm_backend)be, &g);
                    memcpy(got, cbuf + off, sizeof got);
                    if (o == 0)
                        memcpy(ref_bytes, got, sizeof got);
                    else
                        same &= memcmp(got, ref_bytes, sizeof got) == 0;
                    for (size_t i = 0; i < GM * GN; i++) {
                        const double r = fabs(got[i] - exact[bf][i]) / bound[bf][i];
                        worst = r > worst || r != r ? r : worst;
                    }
                }
                const char *name = gemm_backend_name((gemm_backend)be);
                tu_check(same,
                         "gemm %s %s, %d thread%s: same bytes at buffer offsets 0, 1, 3, 8, "
                         "13 floats",
                         name, bf ? "bf16" : "fp32", threads, threads > 1 ? "s" : "");
                tu_check(worst <= 1.0,
                         "gemm %s %s, %d thread%s: within gamma_{k+2} of the exact product "
                         "(worst |c - c*| / bound = %.3g)",
                         name, bf ? "bf16" : "fp32", threads, threads > 1 ? "s" : "", worst);
            }
        }
    }
    set_threads(2);
}

/* --- 3. bt-forward ---------------------------------------------------------------------- */

static const char *bin, *tmp;
static char model_dir[1024];

/* bt-forward --head itm --backward on `in` under the environment of (isa, threads, backend);
 * DNNL_MAX_CPU_ISA is emptied so that BT_CPU_ISA sets the matching oneDNN cap (cpu.h). */
static int run_fwd(bt_isa isa, int threads, const char *backend, const char *in, const char *out) {
    static char stdout_text[4096];
    char err[4096];
    const int rc = tu_run_env_captured(
        stdout_text, sizeof stdout_text, err, sizeof err,
        "BT_CPU_ISA=%s DNNL_MAX_CPU_ISA= OMP_NUM_THREADS=%d BT_GEMM=%s '%s' --model '%s' "
        "--inputs '%s' --output '%s' --head itm --backward",
        bt_isa_name(isa), threads, backend, bin, model_dir, in, out);
    if (rc != 0)
        printf("# bt-forward (%s, %d threads, %s) exit %d: %s\n", bt_isa_name(isa), threads,
               backend, rc, err);
    return rc;
}

/* The tiny fixture's inputs in one of three file layouts (tensor order, metadata length). */
static const char *write_inputs(const safetensors_file *io, int layout) {
    const char *names[4] = {"input_ids", "attention_mask", "pixel_values", "itm_labels"};
    static const int order[3][4] = {{0, 1, 2, 3}, {2, 3, 1, 0}, {1, 0, 3, 2}};
    static const char *const meta1[] = {"pad", "x", NULL};
    static const char *const meta2[] = {"note", "shifts the data section by a few words", NULL};
    const char *const *meta[3] = {NULL, meta1, meta2};
    safetensors_entry e[4];
    for (int i = 0; i < 4; i++) {
        const safetensors_tensor *t = safetensors_find(io, names[order[layout][i]]);
        BT_ASSERT(t);
        e[i] = (safetensors_entry){order[layout][i] == 3 ? "labels" : names[order[layout][i]],
                                   t->dtype,
                                   t->dtype,
                                   t->ndim,
                                   {0},
                                   t->data};
        memcpy(e[i].shape, t->shape, sizeof e[i].shape);
    }
    char name[64];
    snprintf(name, sizeof name, "in_layout%d.safetensors", layout);
    const char *path = tu_tmp_path(name);
    if (safetensors_write(path, e, 4, meta[layout]) != BT_OK) {
        printf("cannot write %s: %s\n", path, bt_error_message());
        exit(1);
    }
    return path;
}

/* Two output files: same names; worst |a-b| / (atol + rtol |b|) with atol = rel * max|b| per
 * tensor (b = ref); *max_abs receives the largest |a-b|. 1e30 when the sets differ. */
static double outputs_worst(const char *got, const char *ref, double rel, double *max_abs,
                            char *worst_name, size_t wn_cap) {
    safetensors_file x, y;
    *max_abs = 0.0;
    if (safetensors_open(&x, got) != BT_OK) return 1e30;
    if (safetensors_open(&y, ref) != BT_OK) {
        safetensors_close(&x);
        return 1e30;
    }
    double worst = x.n_tensors == y.n_tensors ? 0.0 : 1e30;
    for (size_t i = 0; i < x.n_tensors && worst < 1e30; i++) {
        const safetensors_tensor *a = &x.tensors[i], *b = safetensors_find(&y, a->name);
        if (!b || b->numel != a->numel) {
            worst = 1e30;
            break;
        }
        float *fa = tu_fixture_f32(&x, a->name, a->numel),
              *fb = tu_fixture_f32(&y, a->name, b->numel);
        double scale = 0.0, rtol = rel;
        const size_t len = strlen(a->name);
        if (len > 9 && strcmp(a->name + len - 9, ".key.bias") == 0) {
            /* exact gradient 0 (softmax ignores a per-row shift): rounding noise the size of
             * the key weight's gradient, as in test_bt_forward */
            char wname[300];
            snprintf(wname, sizeof wname, "%.*s.key.weight", (int)(len - 9), a->name);
            const safetensors_tensor *kw = safetensors_find(&y, wname);
            float *fw = kw ? tu_fixture_f32(&y, wname, kw->numel) : NULL;
            for (size_t j = 0; fw && j < kw->numel; j++)
                scale = fmax(scale, fabs(fw[j]));
            free(fw);
            rtol = 0.0;
        } else {
            for (size_t j = 0; j < b->numel; j++)
                scale = fmax(scale, fabs(fb[j]));
        }
        size_t at = 0;
        const double r = tu_worst_ratio_f32(fa, fb, a->numel, rel * scale, rtol, &at);
        for (size_t j = 0; j < a->numel; j++)
            *max_abs = fmax(*max_abs, fabs(fa[j] - fb[j]));
        if (r > worst || r != r) {
            worst = r;
            snprintf(worst_name, wn_cap, "%s[%zu]", a->name, at);
        }
        free(fa);
        free(fb);
    }
    safetensors_close(&x);
    safetensors_close(&y);
    return worst;
}

static void test_bt_forward(void) {
    safetensors_file io;
    char iopath[1200];
    snprintf(iopath, sizeof iopath, "%s", tu_fixture_path("tiny_io.safetensors"));
    if (safetensors_open(&io, iopath) != BT_OK) {
        tu_check(0, "open %s: %s", iopath, bt_error_message());
        return;
    }
    snprintf(model_dir, sizeof model_dir, "%s", tu_fixture_path("tiny"));
    const char *in[3];
    for (int l = 0; l < 3; l++)
        in[l] = write_inputs(&io, l);

    /* (a) layouts at every (level <= the active one, threads) with the default backend */
    const bt_isa top = bt_cpu_isa_active();
    char ref[1200], out[1200], name[300], wn[300] = "";
    snprintf(ref, sizeof ref, "%s", tu_tmp_path("ref.safetensors"));
    if (run_fwd(top, 2, "onednn", in[0], ref) != 0 &&
        run_fwd(top, 2, gemm_backend_name(gemm_get_backend()), in[0], ref) != 0) {
        tu_check(0, "bt-forward runs on the tiny model");
        safetensors_close(&io);
        return;
    }
    const char *dflt = gemm_backend_available(GEMM_BACKEND_ONEDNN) ? "onednn" : "openblas";
    for (int isa = 0; isa <= (int)top; isa++) {
        if (!bt_isa_supported((bt_isa)isa)) continue;
        int same_threads = 1;
        for (int t = 1; t <= 2; t++) {
            int same = 1, ok = 1;
            for (int l = 0; l < 3; l++) {
                snprintf(out, sizeof out, "%s/out_%d_%d_%d.safetensors", tmp, isa, t, l);
                ok &= run_fwd((bt_isa)isa, t, dflt, in[l], out) == 0;
                if (l > 0) {
                    char first[1200];
                    snprintf(first, sizeof first, "%s/out_%d_%d_0.safetensors", tmp, isa, t);
                    same &= ok && tu_files_equal(out, first);
                }
            }
            tu_check(ok && same,
                     "bt-forward %s, %d thread%s: 3 inputs-file layouts, same output "
                     "bytes",
                     bt_isa_name((bt_isa)isa), t, t > 1 ? "s" : "");
            /* (c) against the default run */
            double max_abs = 0.0;
            snprintf(out, sizeof out, "%s/out_%d_%d_0.safetensors", tmp, isa, t);
            const double w = outputs_worst(out, ref, 2e-5, &max_abs, wn, sizeof wn);
            tu_check(w <= 1.0,
                     "bt-forward %s, %d thread%s vs %s, 2 threads: outputs and "
                     "gradients within 2e-5 of scale (worst ratio %.3g at %s, max "
                     "|diff| %.3g)",
                     bt_isa_name((bt_isa)isa), t, t > 1 ? "s" : "", bt_isa_name(top), w, wn,
                     max_abs);
        }
        char o1[1200], o2[1200];
        snprintf(o1, sizeof o1, "%s/out_%d_1_0.safetensors", tmp, isa);
        snprintf(o2, sizeof o2, "%s/out_%d_2_0.safetensors", tmp, isa);
        same_threads = tu_files_equal(o1, o2);
        printf("# %s: 1 and 2 threads bitwise equal: %s (not required)\n", bt_isa_name((bt_isa)isa),
               same_threads ? "yes" : "no");
    }
    /* (b) run to run */
    {
        snprintf(out, sizeof out, "%s", tu_tmp_path("ref_again.safetensors"));
        tu_check(run_fwd(top, 2, dflt, in[0], out) == 0 && tu_files_equal(out, ref),
                 "bt-forward %s, 2 threads: the same command twice gives the same bytes",
                 bt_isa_name(top));
    }
    /* (a) and (c) for the other backends */
    static const char *const backends[] = {"ref", "openblas"};
    for (int b = 0; b < 2; b++) {
        for (int t = 1; t <= 2; t++) {
            char o0[1200], o1[1200];
            snprintf(o0, sizeof o0, "%s/out_%s_%d_0.safetensors", tmp, backends[b], t);
            snprintf(o1, sizeof o1, "%s/out_%s_%d_1.safetensors", tmp, backends[b], t);
            const int ok = run_fwd(top, t, backends[b], in[0], o0) == 0 &&
                           run_fwd(top, t, backends[b], in[1], o1) == 0;
            tu_check(ok && tu_files_equal(o0, o1),
                     "bt-forward BT_GEMM=%s, %d thread%s: 2 "
                     "inputs-file layouts, same output bytes",
                     backends[b], t, t > 1 ? "s" : "");
            double max_abs = 0.0;
            const double w = outputs_worst(o0, ref, 2e-5, &max_abs, wn, sizeof wn);
            snprintf(name, sizeof name, "BT_GEMM=%s, %d thread%s", backends[b], t,
                     t > 1 ? "s" : "");
            tu_check(w <= 1.0,
                     "bt-forward %s vs %s %s, 2 threads: within 2e-5 of scale "
                     "(worst ratio %.3g at %s, max |diff| %.3g)",
                     name, dflt, bt_isa_name(top), w, wn, max_abs);
        }
    }
    safetensors_close(&io);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        printf("usage: test_determinism PATH/bt-forward\n");
        return 1;
    }
    bin = argv[1];
    tmp = tu_tmpdir();
    if (gemm_init_from_env() != BT_OK) {
        tu_check(0, "environment: %s", bt_error_message());
        return tu_finish();
    }
    kernels_init();
    printf("# active: bt kernels %s, gemm %s (oneDNN isa %s)\n", bt_isa_name(ops_cpu_isa()),
           gemm_backend_name(gemm_get_backend()), gemm_cpu_isa_name());
    test_kernels();
    test_gemm();
    test_bt_forward();
    gemm_release();
    return tu_finish();
}
