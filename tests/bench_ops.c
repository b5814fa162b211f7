/* bench_ops.c: speed of the memory-bound kernels and of attention, fast vs reference, at
 * BridgeTower-base sizes.
 *
 * Memory-bound kernels: GB/s = (bytes the kernel must read + write, each tensor counted once:
 * an accumulated gradient counts as read and written) / time. Sizes:
 *   text    2 x 40 tokens,  C 768           (N = 80)
 *   image   2 x 325 tokens, C 768           (N = 650)
 *   ffn     8 x 325 tokens, C 3072          (N = 2600, the FFN activations)
 *   scores  2 x 12 heads x 325 rows x 325   (softmax rows of attention)
 *   mlm     2 x 40 rows of the 50265 vocab  (cross entropy)
 * Attention (B = 2, NH = 12, D = 64; self T = 325 image and T = 40 text; cross text->image
 * Tq = 40, Tk = 325): time and GFLOP/s counting the GEMMs only (forward 4 B NH Tq Tk D,
 * backward 8 B NH Tq Tk D), in both threading strategies (ops_attention_threads_select),
 * fp32 and bf16, and the reference once.
 *
 * Each number is the fastest single call seen in --rounds rounds (default 5) of >= 0.2 s of
 * back-to-back calls (the machine is shared; see bench_time). The reference kernels are
 * single-threaded double-precision loops: the "ref" column shows what the fast kernels buy,
 * not a rival.
 *
 * Run: meson test -C build --benchmark --suite bench ops, or build/tests/bench_ops [--quick]
 * [--rounds N] [--only memory|bf16|attention]. Deliberately not here: correctness
 * (test_ops_fast.c, test_ops_grad.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bt_config.h"
#include "kernels/ops.h"
#include "kernels/ops_ref.h"
#include "test_util.h"

#if BT_HAVE_OPENMP
#include <omp.h>
#endif

static int bench_rounds = 5;
static double bench_round_s = 0.2;

static float *fbuf(size_t n, unsigned seed, float lo, float hi) {
    float *x = malloc((n ? n : 1) * sizeof(float));
    if (!x) abort();
    unsigned s = seed * 2654435761u + 1u;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = lo + (hi - lo) * (float)((double)(s >> 8) / 16777216.0);
    }
    return x;
}

/* What one timed call does: fn(ctx). */
typedef void (*bench_fn)(void *ctx);

/* Fastest single call over `rounds` rounds of back-to-back calls lasting >= bench_round_s
 * each. On a shared machine a call that another process interrupts (or whose OpenMP team
 * waits for a descheduled thread) is slower, never faster, so the minimum is the least
 * disturbed estimate of what the kernel costs. */
static double bench_time(bench_fn fn, void *ctx, int rounds) {
    fn(ctx); /* warm-up: first-touch pages, JIT, caches */
    double best = INFINITY;
    for (int r = 0; r < rounds; r++) {
        const double t0 = tu_clock_seconds(CLOCK_MONOTONIC);
        double t = t0;
        do {
            const double c0 = t;
            fn(ctx);
            t = tu_clock_seconds(CLOCK_MONOTONIC);
            if (t - c0 < best) best = t - c0;
        } while (t - t0 < bench_round_s);
    }
    return best;
}

/* --- the memory-bound kernels --------------------------------------------------------------- */

typedef struct mb {
    size_t n, c;           /* rows, columns (pointwise kernels use n*c elements) */
    float *x, *y, *w, *b, *out, *mean, *rstd, *dout, *dx, *dw, *db;
    bt_bf16 *h;
    int32_t *ids;
    int ref;               /* 1: call the _ref kernel */
} mb;

#define MB_FN(name, ...)                                                                    \
    static void name(void *p) {                                                            \
        mb *m = p;                                                                         \
        __VA_ARGS__;                                                                       \
    }

MB_FN(run_ln_fwd,
      (m->ref ? layernorm_forward_ref : layernorm_forward)(m->out, m->mean, m->rstd, m->x, m->w,
                                                           m->b, m->n, m->c, 1e-5f))
MB_FN(run_ln_bwd,
      (m->ref ? layernorm_backward_ref : layernorm_backward)(m->dx, m->dw, m->db, m->dout, m->x,
                                                             m->w, m->mean, m->rstd, m->n, m->c,
                                                             BT_DX_ADD))
/* the fused LayerNorm backwards (issue 9) and, for comparison, the two passes each
 * replaces: dx = res (y) + LN'(dout) vs a copy then BT_DX_ADD; d res (dx) and its dropout
 * backward (out), blocks of 325 rows (an image's), vs BT_DX_SET then dropout_backward. Each
 * pair is counted with the traffic of the fused form (what the outputs need), so its GB/s
 * compare as rates of the same work. */
MB_FN(run_ln_bwd_res, (m->ref ? layernorm_backward_residual_ref : layernorm_backward_residual)(
                          m->dx, m->dw, m->db, m->dout, m->y, m->x, m->w, m->mean, m->rstd, m->n,
                          m->c, BT_DX_SET))
MB_FN(run_ln_bwd_copy_add, {
    (m->ref ? residual_backward_ref : residual_backward)(m->dx, NULL, m->y, m->n * m->c,
                                                         BT_DX_SET);
    (m->ref ? layernorm_backward_ref : layernorm_backward)(m->dx, m->dw, m->db, m->dout, m->x,
                                                           m->w, m->mean, m->rstd, m->n, m->c,
                                                           BT_DX_ADD);
})
static void mb_drops(bt_dropout *d, size_t nb) {
    for (size_t b = 0; b < nb; b++) d[b] = (bt_dropout){.p = 0.1f, .seed = 7 + b};
}
MB_FN(run_ln_bwd_drop, {
    bt_dropout d[8];
    mb_drops(d, m->n / 325);
    (m->ref ? layernorm_backward_dropout_ref : layernorm_backward_dropout)(
        m->dx, m->out, m->dw, m->db, m->dout, m->x, m->w, m->mean, m->rstd, m->n, m->c, d, 325);
})
MB_FN(run_ln_bwd_then_drop, {
    bt_dropout d[8];
    mb_drops(d, m->n / 325);
    (m->ref ? layernorm_backward_ref : layernorm_backward)(m->dx, m->dw, m->db, m->dout, m->x,
                                                           m->w, m->mean, m->rstd, m->n, m->c,
                                                           BT_DX_SET);
    for (size_t b = 0; b < m->n / 325; b++)
        (m->ref ? dropout_backward_ref : dropout_backward)(m->out + b * 325 * m->c,
                                                           m->dx + b * 325 * m->c, 325 * m->c,
                                                           &d[b], BT_DX_SET);
})
MB_FN(run_gelu_fwd, (m->ref ? gelu_forward_ref : gelu_forward)(m->out, m->x, m->n * m->c))
MB_FN(run_gelu_bwd, (m->ref ? gelu_backward_ref : gelu_backward)(m->dx, m->dout, m->x,
                                                                   m->n * m->c, BT_DX_ADD))
MB_FN(run_qgelu_fwd,
      (m->ref ? quick_gelu_forward_ref : quick_gelu_forward)(m->out, m->x, m->n * m->c))
MB_FN(run_qgelu_bwd,
      (m->ref ? quick_gelu_backward_ref : quick_gelu_backward)(m->dx, m->dout, m->x, m->n * m->c,
                                                               BT_DX_ADD))
/* the MLP backward's fused pass (ops.h gelu_backward_bias): the native bf16 route's form
 * (bf16 dx and bias sums, no fp32 dx) and the fp32 route's (fp32 dx and bias sums) */
MB_FN(run_qgelu_bias16, (m->ref ? gelu_backward_bias_ref : gelu_backward_bias)(
                            NULL, m->h, m->db, m->dout, m->x, m->n, m->c, 1))
MB_FN(run_gelu_bias32, (m->ref ? gelu_backward_bias_ref : gelu_backward_bias)(
                           m->dx, NULL, m->db, m->dout, m->x, m->n, m->c, 0))
MB_FN(run_sm_fwd, (m->ref ? softmax_forward_ref : softmax_forward)(m->out, m->x, m->n, m->c))
MB_FN(run_sm_bwd,
      (m->ref ? softmax_backward_ref : softmax_backward)(m->dx, m->dout, m->y, m->n, m->c))
MB_FN(run_bias_fwd,
      (m->ref ? bias_add_forward_ref : bias_add_forward)(m->out, m->x, m->b, m->n, m->c))
MB_FN(run_bias_bwd,
      (m->ref ? bias_add_backward_ref : bias_add_backward)(m->dx, m->db, m->dout, m->n, m->c))
MB_FN(run_res_fwd,
      (m->ref ? residual_forward_ref : residual_forward)(m->out, m->x, m->y, m->n * m->c))
MB_FN(run_res_bwd,
      (m->ref ? residual_backward_ref : residual_backward)(m->dx, m->dw, m->dout, m->n * m->c,
                                                           BT_DX_ADD))
MB_FN(run_drop_fwd, {
    const bt_dropout d = {.p = 0.1f, .seed = 7};
    (m->ref ? dropout_forward_ref : dropout_forward)(m->out, m->x, m->n * m->c, &d);
})
MB_FN(run_to_bf16, (m->ref ? bf16_from_f32_ref : bf16_from_f32)(m->h, m->x, m->n * m->c))
MB_FN(run_from_bf16, (m->ref ? f32_from_bf16_ref : f32_from_bf16)(m->out, m->h, m->n * m->c))
MB_FN(run_emb_fwd,
      (m->ref ? embedding_forward_ref : embedding_forward)(m->out, m->ids, m->w, m->n, m->c, 50265))
MB_FN(run_emb_bwd, (m->ref ? embedding_backward_ref : embedding_backward)(m->dw, m->dout, m->ids,
                                                                          m->n, m->c, 50265, 1))
MB_FN(run_ce_fwd, {
    (m->ref ? cross_entropy_forward_ref : cross_entropy_forward)(m->out, m->x, m->ids, m->n, m->c,
                                                                 -100, NULL);
})
MB_FN(run_ce_bwd, (m->ref ? cross_entropy_backward_ref
                          : cross_entropy_backward)(m->dx, m->y, m->ids, m->n, m->c, -100, 1.0f))

typedef struct mb_row {
    const char *kernel, *shape;
    size_t n, c;
    bench_fn fn;
    double bytes_per_elem, bytes_per_row, bytes_per_col; /* traffic model */
} mb_row;

static void bench_memory_bound(int quick) {
    const size_t TEXT = 2 * 40, IMG = 2 * 325, FFN = 8 * 325, SCORES = 2 * 12 * 325;
    /* bytes: per element of (n, c), per row (stats, ids), per column (weights, bias) */
    const mb_row rows[] = {
        {"layernorm fwd", "image 650x768", IMG, 768, run_ln_fwd, 8, 8, 8},
        {"layernorm fwd", "ffn 2600x3072", FFN, 3072, run_ln_fwd, 8, 8, 8},
        {"layernorm bwd", "image 650x768", IMG, 768, run_ln_bwd, 16, 8, 20},
        {"layernorm bwd", "ffn 2600x3072", FFN, 3072, run_ln_bwd, 16, 8, 20},
        {"layernorm bwd, residual in", "image 2600x768", FFN, 768, run_ln_bwd_res, 16, 8, 20},
        {"residual copy + layernorm bwd", "image 2600x768", FFN, 768, run_ln_bwd_copy_add, 16, 8,
         20},
        {"layernorm bwd + dropout bwd", "image 2600x768", FFN, 768, run_ln_bwd_drop, 16, 8, 20},
        {"layernorm bwd, then dropout bwd", "image 2600x768", FFN, 768, run_ln_bwd_then_drop, 16,
         8, 20},
        {"gelu fwd", "ffn 2600x3072", FFN, 3072, run_gelu_fwd, 8, 0, 0},
        {"gelu bwd", "ffn 2600x3072", FFN, 3072, run_gelu_bwd, 16, 0, 0},
        {"gelu fwd", "text 80x3072", TEXT, 3072, run_gelu_fwd, 8, 0, 0},
        {"quick_gelu fwd", "ffn 2600x3072", FFN, 3072, run_qgelu_fwd, 8, 0, 0},
        {"quick_gelu bwd", "ffn 2600x3072", FFN, 3072, run_qgelu_bwd, 16, 0, 0},
        {"quick_gelu bwd+bias, bf16 dx", "ffn 2600x3072", FFN, 3072, run_qgelu_bias16, 10, 0, 8},
        {"gelu bwd+bias, fp32 dx", "ffn 2600x3072", FFN, 3072, run_gelu_bias32, 12, 0, 8},
        {"softmax fwd", "scores 7800x325", SCORES, 325, run_sm_fwd, 8, 0, 0},
        {"softmax bwd", "scores 7800x325", SCORES, 325, run_sm_bwd, 16, 0, 0},
        {"bias_add fwd", "ffn 2600x3072", FFN, 3072, run_bias_fwd, 8, 0, 4},
        {"bias_add bwd", "ffn 2600x3072", FFN, 3072, run_bias_bwd, 12, 0, 8},
        {"residual fwd", "image 650x768", IMG, 768, run_res_fwd, 12, 0, 0},
        {"residual fwd", "ffn 2600x3072", FFN, 3072, run_res_fwd, 12, 0, 0},
        {"residual bwd", "ffn 2600x3072", FFN, 3072, run_res_bwd, 20, 0, 0},
        {"dropout fwd", "ffn 2600x3072", FFN, 3072, run_drop_fwd, 8, 0, 0},
        {"bf16_from_f32", "ffn 2600x3072", FFN, 3072, run_to_bf16, 6, 0, 0},
        {"f32_from_bf16", "ffn 2600x3072", FFN, 3072, run_from_bf16, 6, 0, 0},
        {"embedding fwd", "text 80x768", TEXT, 768, run_emb_fwd, 8, 4, 0},
        {"embedding fwd", "image 650x768", IMG, 768, run_emb_fwd, 8, 4, 0},
        {"embedding bwd", "image 650x768", IMG, 768, run_emb_bwd, 12, 4, 0},
        {"cross_entropy fwd", "mlm 80x50265", TEXT, 50265, run_ce_fwd, 8, 4, 0},
        {"cross_entropy bwd", "mlm 80x50265", TEXT, 50265, run_ce_bwd, 12, 4, 0},
    };
    printf(
        "\n| kernel | shape | MB moved | fast ms | fast GB/s | ref ms | ref GB/s | fast/ref |\n");
    printf("|---|---|---:|---:|---:|---:|---:|---:|\n");
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        const mb_row *row = &rows[r];
        if (quick && row->n == FFN) continue;
        const size_t n = row->n, c = row->c, e = n * c;
        mb m = {.n = n, .c = c};
        m.x = fbuf(e, 1, -3, 3);
        m.y = fbuf(e, 2, 0, 1);
        const int emb = row->fn == run_emb_fwd || row->fn == run_emb_bwd;
        const size_t table = emb ? 50265 * c : c; /* the RoBERTa word embeddings */
        m.w = fbuf(table, 3, 0.5f, 1.5f);
        m.b = fbuf(c, 4, -1, 1);
        m.out = fbuf(e, 5, 0, 0);
        m.mean = fbuf(n, 6, 0, 0);
        m.rstd = fbuf(n, 7, 0, 0);
        m.dout = fbuf(e, 8, -1, 1);
        m.dx = fbuf(e, 9, -1, 1);
        m.dw = fbuf(table > e ? table : e, 10, -1, 1);
        m.db = fbuf(c, 11, -1, 1);
        m.h = calloc(e, sizeof(bt_bf16));
        m.ids = malloc(n * sizeof(int32_t));
        for (size_t i = 0; i < n; i++) m.ids[i] = (int32_t)((i * 7919u) % (emb ? 50265 : c));
        layernorm_forward(m.out, m.mean, m.rstd, m.x, m.w, m.b, n, c, 1e-5f);
        if (row->fn == run_ce_bwd) /* the backward reads a softmax */
            softmax_forward(m.y, m.x, n, c);
        const double bytes = row->bytes_per_elem * (double)e + row->bytes_per_row * (double)n +
                             row->bytes_per_col * (double)c;
        m.ref = 0;
        const double tf = bench_time(row->fn, &m, bench_rounds);
        m.ref = 1;
        const double tr = bench_time(row->fn, &m, quick ? 1 : 2);
        printf("| %s | %s | %.1f | %.3f | %.1f | %.2f | %.2f | %.1fx |\n", row->kernel, row->shape,
               bytes / 1e6, tf * 1e3, bytes / tf / 1e9, tr * 1e3, bytes / tr / 1e9, tr / tf);
        fflush(stdout);
        free(m.x), free(m.y), free(m.w), free(m.b), free(m.out), free(m.mean), free(m.rstd);
        free(m.dout), free(m.dx), free(m.dw), free(m.db), free(m.h), free(m.ids);
    }
}

/* The fp32 -> bf16 conversion paths side by side (weights copy: 110M parameters of base
 * would be ~0.1 s at 6 GB/s; here one FFN activation). */
static void bench_bf16_paths(void) {
    const size_t n = 8 * 325 * 3072;
    mb m = {.n = 1, .c = n};
    m.x = fbuf(n, 1, -3, 3);
    m.h = calloc(n, sizeof(bt_bf16));
    char best[32];
    snprintf(best, sizeof best, "%s", ops_bf16_conversion_name());
    printf("\n| bf16_from_f32 path (n = %zu) | ms | GB/s |\n|---|---:|---:|\n", n);
    static const char *paths[] = {"scalar", "avx512f", "avx512bf16"};
    for (int i = 0; i < 3; i++) {
        if (!ops_bf16_conversion_select(paths[i])) {
            printf("| %s | not supported by this CPU | |\n", paths[i]);
            continue;
        }
        const double t = bench_time(run_to_bf16, &m, bench_rounds);
        printf("| %s%s | %.3f | %.1f |\n", paths[i], strcmp(paths[i], best) ? "" : " (chosen)",
               t * 1e3, 6.0 * (double)n / t / 1e9);
    }
    ops_bf16_conversion_select(best);
    free(m.x), free(m.h);
}

/* --- attention ----------------------------------------------------------------------------- */

typedef struct at {
    attention_dims d;
    float *q, *k, *v, *kb, *out, *probs, *dout, *dq, *dk, *dv;
    bt_dropout drop;
    gemm_compute compute;
    int ref;
} at;

static void run_att_fwd(void *p) {
    at *a = p;
    if (a->ref)
        attention_forward_ref(a->out, a->probs, a->q, a->k, a->v, a->kb, &a->d, &a->drop,
                              a->compute);
    else
        attention_forward(a->out, a->probs, a->q, a->k, a->v, a->kb, &a->d, &a->drop, a->compute);
}

static void run_att_bwd(void *p) {
    at *a = p;
    if (a->ref)
        attention_backward_ref(a->dq, a->dk, a->dv, a->dout, a->probs, a->q, a->k, a->v, a->kb,
                               &a->d, &a->drop, a->compute, BT_DX_ADD);
    else
        attention_backward(a->dq, a->dk, a->dv, a->dout, a->probs, a->q, a->k, a->v, a->kb,
                           &a->d, &a->drop, a->compute, BT_DX_ADD);
}

static void bench_attention(int quick) {
    static const struct {
        const char *name;
        size_t Tq, Tk;
        int self;
    } shapes[] = {
        {"self image T=325", 325, 325, 1},
        {"self text T=40", 40, 40, 1},
        {"cross text->image 40x325", 40, 325, 0},
    };
    const size_t B = 2, NH = 12, D = 64, C = NH * D;
    printf("\n| attention (B=2 NH=12 D=64, dropout 0.1, key mask) | threads | compute | fwd ms | "
           "fwd GFLOP/s | bwd ms | bwd GFLOP/s |\n|---|---|---|---:|---:|---:|---:|\n");
    char saved[16];
    snprintf(saved, sizeof saved, "%s", ops_attention_threads_name());
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const size_t Tq = shapes[s].Tq, Tk = shapes[s].Tk;
        at a = {.drop = {.p = 0.1f, .seed = 3}};
        a.d = (attention_dims){.B = B, .Tq = Tq, .Tk = Tk, .NH = NH, .D = D};
        /* self: packed (N, 3C) qkv; cross: q (N, C), packed (N, 2C) kv */
        float *qkv, *kv = NULL, *dqkv, *dkv = NULL;
        if (shapes[s].self) {
            qkv = fbuf(B * Tq * 3 * C, 1, -1, 1), dqkv = fbuf(B * Tq * 3 * C, 2, 0, 0);
            a.q = qkv, a.k = qkv + C, a.v = qkv + 2 * C;
            a.dq = dqkv, a.dk = dqkv + C, a.dv = dqkv + 2 * C;
            a.d.ldq = a.d.ldk = a.d.ldv = 3 * C;
        } else {
            qkv = fbuf(B * Tq * C, 1, -1, 1), dqkv = fbuf(B * Tq * C, 2, 0, 0);
            kv = fbuf(B * Tk * 2 * C, 3, -1, 1), dkv = fbuf(B * Tk * 2 * C, 4, 0, 0);
            a.q = qkv, a.k = kv, a.v = kv + C, a.dq = dqkv, a.dk = dkv, a.dv = dkv + C;
            a.d.ldq = C, a.d.ldk = a.d.ldv = 2 * C;
        }
        a.d.ldo = C;
        int32_t *mask = malloc(B * Tk * sizeof(int32_t));
        for (size_t i = 0; i < B * Tk; i++) mask[i] = (i % Tk) < Tk - (i / Tk) * (Tk / 8);
        a.kb = fbuf(B * Tk, 5, 0, 0);
        attention_key_bias_from_mask(a.kb, mask, B * Tk);
        a.out = fbuf(B * Tq * C, 6, 0, 0);
        a.probs = fbuf(B * NH * Tq * Tk, 7, 0, 0);
        a.dout = fbuf(B * Tq * C, 8, -1, 1);
        const double ffl = 4.0 * (double)(B * NH * Tq * Tk * D), bfl = 2.0 * ffl;
        static const char *modes[] = {"blocks", "gemm"};
        for (int cm = 0; cm < 2; cm++) {
            a.compute = cm ? GEMM_COMPUTE_BF16 : GEMM_COMPUTE_F32;
            for (int md = 0; md < 2; md++) {
                ops_attention_threads_select(modes[md]);
                const double tf = bench_time(run_att_fwd, &a, bench_rounds);
                const double tb = bench_time(run_att_bwd, &a, bench_rounds);
                printf("| %s | %s | %s | %.3f | %.1f | %.3f | %.1f |\n", shapes[s].name, modes[md],
                       cm ? "bf16" : "fp32", tf * 1e3, ffl / tf / 1e9, tb * 1e3, bfl / tb / 1e9);
                fflush(stdout);
            }
        }
        if (!quick) {
            a.ref = 1;
            a.compute = GEMM_COMPUTE_F32;
            const double tf = bench_time(run_att_fwd, &a, 1), tb = bench_time(run_att_bwd, &a, 1);
            printf("| %s | ref (1 thread, double) | fp32 | %.1f | %.2f | %.1f | %.2f |\n",
                   shapes[s].name, tf * 1e3, ffl / tf / 1e9, tb * 1e3, bfl / tb / 1e9);
        }
        free(qkv), free(kv), free(dqkv), free(dkv), free(mask), free(a.kb), free(a.out);
        free(a.probs), free(a.dout);
    }
    ops_attention_threads_select(strncmp(saved, "auto", 4) == 0 ? "auto" : saved);
}

int main(int argc, char **argv) {
    int quick = 0;
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) {
            quick = 1;
        } else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc &&
                   (strcmp(argv[i + 1], "memory") == 0 || strcmp(argv[i + 1], "bf16") == 0 ||
                    strcmp(argv[i + 1], "attention") == 0)) {
            only = argv[++i];
        } else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc && atoi(argv[i + 1]) > 0) {
            bench_rounds = atoi(argv[++i]);
        } else {
            return tu_usage(argv[i], "usage: bench_ops [--quick] [--rounds N] "
                                     "[--only memory|bf16|attention]\n");
        }
    }
    if (quick) bench_rounds = bench_rounds < 2 ? bench_rounds : 2, bench_round_s = 0.05;
    kernels_init();
    if (gemm_init_from_env() != BT_OK) {
        fprintf(stderr, "bench_ops: %s\n", bt_error_message());
        return 1;
    }
#if BT_HAVE_OPENMP
    const int threads = omp_get_max_threads();
#else
    const int threads = 1;
#endif
    printf("bench_ops: %d thread(s), GEMM backend %s, CPU ISA %s, bf16 conversion %s, "
           "attention threading default %s; fastest call of %d rounds\n",
           threads, gemm_backend_name(gemm_get_backend()), gemm_cpu_isa_name(),
           ops_bf16_conversion_name(), ops_attention_threads_name(), bench_rounds);
    if (!only || strcmp(only, "memory") == 0) bench_memory_bound(quick);
    if (!only || strcmp(only, "bf16") == 0) bench_bf16_paths();
    if (!only || strcmp(only, "attention") == 0) bench_attention(quick);
    gemm_release();
    return 0;
}
