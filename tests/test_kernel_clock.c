/* test_kernel_clock.c: the per-class kernel time counters (src/kernels/kernel_clock.h) on calls
 * whose class is known by construction.
 *
 * - A memory-bound kernel (GELU) adds to memory-bound only; gemm() to GEMM only; the
 *   optimizer's kernels (AdamW, the norm pass) to nothing.
 * - A linear layer adds to GEMM (its product) and memory-bound (its own pass), and the two
 *   together are the call's wall time: nothing counted twice, nothing lost.
 * - attention_forward adds to attention only, its per-head products included (GEMM does not
 *   move), at 1 and 2 threads (its products run on the calling thread or on OpenMP workers).
 * - Calls from inside an OpenMP parallel region are not counted.
 * - Per kernel (ops_kernel_seconds): a call adds to its own kernel's seconds only, as much
 *   as to its class (GELU), and the optimizer's kernels have their seconds too.
 * - The per-shape GEMM profile (gemm.h gemm_profile_*): after gemm_profile_start, each
 *   counted product adds one call and its GEMM seconds to the row of its shape (two shapes,
 *   3 and 1 calls, their seconds summing to what GEMM grew by); attention's per-head products
 *   and calls from a parallel region add nothing.
 * Each check compares the counters' change with the wall time measured around the call:
 * spans are inside the call, so a class's change is at most that wall time (plus 1 ms for
 * the clock reads), and "all of it" means within 1 ms + 2%. Which classes move is checked
 * on every call; the "all of it" comparison may fail when the machine preempts the thread
 * between the outer clock read and the kernel's own, so it passes when one of 5 calls
 * meets it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "clock.h"
#include "kernels/gemm.h"
#include "kernels/kernel_clock.h"
#include "kernels/ops.h"
#include "test_util.h"

#define SLACK_S 1e-3
#define TRIES 5

/* The inputs of the calls below. */
typedef struct calls {
    float *x, *y, *out, *probs, *ao;
    size_t n;
    gemm_args g;
    attention_dims ad;
    bt_dropout drop;
} calls;

enum { CALL_GELU, CALL_GEMM, CALL_LINEAR, CALL_ATTENTION };
static const char *const call_names[] = {"gelu_forward", "gemm", "linear_forward",
                                         "attention_forward"};

static void call(const calls *c, int what) {
    const size_t R = 1024, K = 512, N = 256, rows = c->ad.B * c->ad.Tq;
    switch (what) {
    case CALL_GELU:
        gelu_forward(c->y, c->x, c->n);
        break;
    case CALL_GEMM:
        gemm(&c->g);
        break;
    case CALL_LINEAR: /* out (1024, 256) = x (1024, 512) wᵀ + b */
        linear_forward(c->out, c->x, NULL, c->x + R * K, NULL, NULL, c->x + 2 * R * K, R, K, N,
                       GEMM_COMPUTE_F32);
        break;
    default:
        attention_forward(c->ao, c->probs, c->x, c->x + rows * 128, c->x + 2 * rows * 128, NULL,
                          &c->ad, &c->drop, GEMM_COMPUTE_F32);
    }
}

/* The counters' change over one call of `what` (after an unmeasured first call that makes
 * the GEMM primitives), and the call's wall time. */
static void measure(const calls *c, int what, bt_kernel_times *d, double *wall) {
    bt_kernel_times a, b;
    bt_kernel_times_read(&a);
    const double w0 = bt_now_s();
    call(c, what);
    *wall = bt_now_s() - w0;
    bt_kernel_times_read(&b);
    for (int k = 0; k < BT_KC_COUNT; k++) d->s[k] = b.s[k] - a.s[k];
    printf("# %s: wall %.6f s; gemm %.6f, attention %.6f, memory-bound %.6f\n",
           call_names[what], *wall, d->s[BT_KC_GEMM], d->s[BT_KC_ATTENTION],
           d->s[BT_KC_MEMORY]);
}

static int all_of(double part, double wall) {
    return part <= wall + SLACK_S && part >= wall * 0.98 - SLACK_S;
}

/* Calls `what` up to TRIES times: the classes in `moving` (a bit mask) must grow and the
 * others stay put on every call; their sum must be all of the call's time on one of them. */
static void check_call(const calls *c, int what, unsigned moving, const char *desc) {
    call(c, what);
    int classes_ok = 1, sum_ok = 0;
    for (int t = 0; t < TRIES && classes_ok && !sum_ok; t++) {
        bt_kernel_times d;
        double wall, sum = 0;
        measure(c, what, &d, &wall);
        for (int k = 0; k < BT_KC_COUNT; k++) {
            classes_ok &= (moving >> k & 1u) ? d.s[k] > 0 : d.s[k] == 0;
            sum += d.s[k];
        }
        sum_ok = all_of(sum, wall);
    }
    tu_check(classes_ok, "%s: counts as %s only", call_names[what], desc);
    tu_check(sum_ok, "%s: the counted time is all of the call's time", call_names[what]);
}

int main(void) {
    calls c = {.n = (size_t)1 << 22, .drop = {0.1f, 5}};
    tu_rng rng;
    tu_rng_seed(&rng, 11);
    c.x = malloc(c.n * sizeof *c.x);
    c.y = malloc(c.n * sizeof *c.y);
    c.out = malloc(1024 * 256 * sizeof *c.out);
    /* attention, B 2, NH 4, T 128, D 32 */
    c.ad = (attention_dims){.B = 2, .Tq = 128, .Tk = 128, .NH = 4, .D = 32,
                            .ldq = 128, .ldk = 128, .ldv = 128, .ldo = 128};
    c.probs = malloc(c.ad.B * c.ad.NH * c.ad.Tq * c.ad.Tk * sizeof *c.probs);
    c.ao = malloc(c.ad.B * c.ad.Tq * 128 * sizeof *c.ao);
    if (!c.x || !c.y || !c.out || !c.probs || !c.ao) return 1;
    tu_fill_uniform_f32(&rng, c.x, c.n, -3.0f, 3.0f);
    /* C (256, 256) = A (256, 512) B (512, 256) */
    c.g = (gemm_args){.m = 256, .n = 256, .k = 512, .a_type = BT_DTYPE_F32,
                      .b_type = BT_DTYPE_F32, .a = c.x, .lda = 512, .b = c.x + 256 * 512,
                      .ldb = 256, .c = c.y, .ldc = 256, .alpha = 1.0f,
                      .compute = GEMM_COMPUTE_F32};

    check_call(&c, CALL_GELU, 1u << BT_KC_MEMORY, "memory-bound");
    check_call(&c, CALL_GEMM, 1u << BT_KC_GEMM, "GEMM");
    check_call(&c, CALL_LINEAR, 1u << BT_KC_GEMM | 1u << BT_KC_MEMORY,
               "GEMM (its product) and memory-bound (its own pass)");
    for (int threads = 1; threads <= 2; threads++) {
#ifdef _OPENMP
        omp_set_num_threads(threads);
#endif
        printf("# %d thread(s)\n", threads);
        check_call(&c, CALL_ATTENTION, 1u << BT_KC_ATTENTION,
                   "attention, its per-head products included");
    }

    /* per kernel: GELU's own seconds grow by what memory-bound grew, no other kernel's do */
    {
        const char *names[64];
        double k0[64], k1[64];
        const size_t nk = ops_kernel_seconds(names, k0, 64);
        bt_kernel_times a, b;
        bt_kernel_times_read(&a);
        call(&c, CALL_GELU);
        bt_kernel_times_read(&b);
        ops_kernel_seconds(names, k1, 64);
        int only_gelu = nk <= 64, found = 0;
        for (size_t i = 0; i < nk && i < 64; i++) {
            const int is_gelu = strcmp(names[i], "gelu_forward") == 0;
            found |= is_gelu;
            if (is_gelu)
                only_gelu &= fabs((k1[i] - k0[i]) - (b.s[BT_KC_MEMORY] - a.s[BT_KC_MEMORY])) <
                             1e-6 && k1[i] > k0[i];
            else
                only_gelu &= k1[i] == k0[i];
        }
        tu_check(found && only_gelu, "ops_kernel_seconds: gelu_forward's own seconds grow by "
                 "its memory-bound time, no other kernel's");
    }

    /* the optimizer's kernels: their own phase */
    const adamw_coefs k = {.grad_scale = 1.0f, .decay = 1.0f, .b1 = 0.9f, .ob1 = 0.1f,
                           .b2 = 0.999f, .ob2 = 0.001f, .bc2_sqrt = 1.0f, .eps = 1e-8f,
                           .step_size = 1e-3f};
    float *m = calloc(c.n, sizeof *m), *v = calloc(c.n, sizeof *v);
    if (!m || !v) return 1;
    bt_kernel_times a, b;
    bt_kernel_times_read(&a);
    const double ss = sum_squares(c.x, c.n);
    adamw_update(c.y, m, v, NULL, c.x, c.n, &k);
    bt_kernel_times_read(&b);
    tu_check(ss > 0 && b.s[BT_KC_GEMM] == a.s[BT_KC_GEMM] &&
                 b.s[BT_KC_ATTENTION] == a.s[BT_KC_ATTENTION] &&
                 b.s[BT_KC_MEMORY] == a.s[BT_KC_MEMORY],
             "sum_squares and adamw_update are in no class (the optimizer phase)");
    {
        const char *names[64];
        double ks[64];
        const size_t nk = ops_kernel_seconds(names, ks, 64);
        int timed = 0;
        for (size_t i = 0; i < nk && i < 64; i++)
            timed += strcmp(names[i], "adamw_update") == 0 && ks[i] > 0;
        tu_check(timed == 1, "ops_kernel_seconds: adamw_update has its own seconds");
    }

    /* the per-shape profile: the rows are the counted products, by shape */
    {
        gemm_profile_start();
        bt_kernel_times t0, t1;
        bt_kernel_times_read(&t0);
        gemm_args g2 = c.g;
        g2.m = 128; /* a second shape */
        g2.beta = 1.0f;
        for (int i = 0; i < 3; i++) gemm(&c.g);
        gemm(&g2);
        bt_kernel_times_read(&t1);
        call(&c, CALL_ATTENTION); /* its products belong to attention: no row */
        gemm_shape_time rows[8];
        size_t dropped = 99;
        const size_t n = gemm_profile_read(rows, 8, &dropped);
        const gemm_shape *s0 = &rows[0].shape, *s1 = &rows[1].shape;
        tu_check(n == 2 && dropped == 0, "gemm profile: two rows (got %zu, %zu dropped)", n,
                 dropped);
        if (n == 2) {
            tu_check(s0->m == 256 && s0->n == 256 && s0->k == 512 && s0->batch == 1 &&
                         !s0->accumulate && !s0->bias && rows[0].calls == 3 &&
                         s1->m == 128 && s1->accumulate && rows[1].calls == 1,
                     "gemm profile: each shape with its calls (%zu, %zu)", rows[0].calls,
                     rows[1].calls);
            const double sum = rows[0].seconds + rows[1].seconds,
                         grew = t1.s[BT_KC_GEMM] - t0.s[BT_KC_GEMM];
            tu_check(rows[0].seconds > 0 && rows[1].seconds > 0 && fabs(sum - grew) < 1e-6,
                     "gemm profile: the rows' seconds (%.6f) are GEMM's growth (%.6f)", sum,
                     grew);
        }
    }

#ifdef _OPENMP
    /* inside a parallel region: the region's starter's span holds that time */
    omp_set_num_threads(2);
    bt_kernel_times_read(&a);
#pragma omp parallel
    {
        const size_t half = c.n / 2, t = (size_t)omp_get_thread_num();
        if (t < 2) gelu_forward(c.y + t * half, c.x + t * half, half);
    }
    bt_kernel_times_read(&b);
    tu_check(b.s[BT_KC_MEMORY] == a.s[BT_KC_MEMORY],
             "calls from inside an OpenMP parallel region are not counted");
    {
        gemm_profile_start();
#pragma omp parallel
        gemm(&c.g);
        gemm_shape_time rows[1];
        tu_check(gemm_profile_read(rows, 1, NULL) == 0,
                 "gemm profile: products from a parallel region add no row");
    }
#endif
    free(c.x);
    free(c.y);
    free(c.out);
    free(c.probs);
    free(c.ao);
    free(m);
    free(v);
    return tu_finish();
}
