/* bench_optim.c: CPU time of the optimizer + clip on a real parameter table (issue 9: "optimizer
 * + clip at most 2% of the step"; issue 25 item 4: "the optimizer at memory speed, fused with
 * gradient zeroing"), the fast kernels against the reference loop, against the machine's copy
 * bandwidth measured in the same run, and the cost of touching fresh memory (what a cold first
 * step pays for arenas it has not written yet).
 *
 *   bench_optim [--config NAME|DIR] [--rounds R] [--bf16]
 *
 * Per round, for the fast table and then the reference table (ops_use_reference), and for
 * each way of zeroing the gradients after the update:
 *   separate: the global grad norm (bt_adamw_grad_norm), one AdamW step (bt_adamw_step, with
 *             the bf16 shadow under --bf16), then zero_fill of the whole gradient arena (what
 *             bt_train_step did until issue 25: bt_zero_grad at the next step's start);
 *   fused:    the norm, bt_adamw_step_zero_grad (the gradients zeroed in the AdamW pass), then
 *             bt_adamw_zero_untouched (the rest of the arena: here the frozen text pooler);
 * the gradients refilled before each (not timed). Then a threaded copy of the gradient arena
 * with streaming stores and with memcpy (2 MiB pieces over the OpenMP threads, as zero_fill
 * runs): the streaming one is the copy bandwidth the passes are held against. Reports the
 * best round of each in CPU seconds of the whole process (CLOCK_PROCESS_CPUTIME_ID: on a
 * shared machine wall time measures the load too) and wall
 * seconds, and GB/s (wall) of the bytes each pass must move. Default: bridgetower-base with
 * the ITC head (the table bench_step trains), 3 rounds. Run it with OMP_NUM_THREADS=1 for
 * per-core numbers.
 *
 * Deliberately not here: correctness (test_ops_fast compares the kernels bit for bit,
 * test_optim and step_parity compare with PyTorch's AdamW, test_dist the fused zeroing's
 * contract), the rest of the step (bench_step). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <time.h>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include "mem.h"
#include "model/config.h"
#include "kernels/ops.h"
#include "train/optim.h"
#include "model/params.h"
#include "test_util.h"

#ifdef _OPENMP
#include <omp.h>
static int omp_threads(void) { return omp_get_max_threads(); }
#else
static int omp_threads(void) { return 1; }
#endif

static double clock_s(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct timing {
    double cpu, wall;
} timing;

static timing since(timing t0) {
    timing t = {clock_s(CLOCK_PROCESS_CPUTIME_ID) - t0.cpu, clock_s(CLOCK_MONOTONIC) - t0.wall};
    return t;
}

static timing now(void) {
    timing t = {clock_s(CLOCK_PROCESS_CPUTIME_ID), clock_s(CLOCK_MONOTONIC)};
    return t;
}

static void keep_best(timing *best, timing t) {
    if (t.cpu < best->cpu) *best = t;
}

/* dst[0, n) = src[0, n), threaded over 2 MiB pieces (as zero_fill runs); `stream`: SSE2
 * streaming stores (written without reading dst's lines first: 8 bytes of traffic per float,
 * the copy a memory-bound pass can be held against), else memcpy (glibc's choice of stores:
 * ordinary ones read each line of dst first at these piece sizes, 12 bytes). */
static void copy_arena(float *dst, const float *src, size_t n, int stream) {
    const size_t piece = (size_t)1 << 19, n_pieces = (n + piece - 1) / piece;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n_pieces; i++) {
        const size_t lo = i * piece, len = n - lo < piece ? n - lo : piece;
#if defined(__SSE2__)
        if (stream && (uintptr_t)(dst + lo) % 16 == 0) {
            size_t k = 0;
            for (; k + 4 <= len; k += 4) _mm_stream_ps(dst + lo + k, _mm_loadu_ps(src + lo + k));
            memcpy(dst + lo + k, src + lo + k, (len - k) * sizeof *dst);
            _mm_sfence();
            continue;
        }
#endif
        memcpy(dst + lo, src + lo, len * sizeof *dst);
    }
}

int main(int argc, char **argv) {
    const char *config = "bridgetower-base";
    int rounds = 3, bf16 = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--config") == 0 && i + 1 < argc) {
            config = argv[++i];
        } else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc) {
            rounds = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--bf16") == 0) {
            bf16 = 1;
        } else {
            return tu_usage(argv[i], "usage: bench_optim [--config NAME|DIR] [--rounds R] "
                                     "[--bf16]\n");
        }
    }
    if (rounds < 1) rounds = 1;
    char path[1200];
    if (strchr(config, '/')) snprintf(path, sizeof path, "%s/config.json", config);
    else snprintf(path, sizeof path, "%s/%s/config.json",
                  getenv("BT_CONFIGS") ? getenv("BT_CONFIGS") : "configs", config);
    bt_model_config c;
    if (bt_model_config_load(&c, path) != BT_OK) {
        fprintf(stderr, "bench_optim: %s\n", bt_error_message());
        return 1;
    }
    bt_param_table table;
    bt_param_table_init(&table, &c, BT_HEADS_ITC);
    const size_t n = table.numel;

    /* fresh memory: the first write of each page faults (and the kernel zeroes it) */
    timing t0 = now();
    /* in huge pages like the model's and the moments (mem.h; BT_HUGE_PAGES=0: 4 KiB pages) */
    float *params = bt_mem_alloc_huge(n * sizeof *params);
    float *grads = bt_mem_alloc_huge(n * sizeof *grads);
    BT_ASSERT(params && grads);
    memset(params, 0, n * sizeof *params);
    const timing first_touch = since(t0);
    memset(grads, 0, n * sizeof *grads);
    t0 = now();
    memset(params, 0, n * sizeof *params);
    const timing second_touch = since(t0);

    tu_rng rng;
    tu_rng_seed(&rng, 9);
    tu_fill_uniform_f32(&rng, params, n, -0.05f, 0.05f);
    tu_fill_uniform_f32(&rng, grads, n, -1e-3f, 1e-3f);
    bt_bf16 *shadow = bf16 ? bt_mem_alloc_huge(n * sizeof *shadow) : NULL;
    BT_ASSERT(shadow || !bf16);
    bt_adamw opt;
    bt_adamw_init(&opt, &table);
    const bt_adamw_hparams h = {.lr = 1e-5, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
                                .weight_decay = 0.01};
    /* warm-up: first touch of m, v (and the shadow) */
    bt_adamw_step(&opt, params, grads, 1.0f, &h, shadow);
    float *g0 = bt_mem_alloc_huge(n * sizeof *g0), *copy = bt_mem_alloc_huge(n * sizeof *copy);
    BT_ASSERT(g0 && copy);
    memcpy(g0, grads, n * sizeof *g0); /* the gradients each round starts from */
    memset(copy, 1, n * sizeof *copy);

    enum { NORM, STEP, ZERO, N_PASS };
    timing best[2][2][N_PASS]; /* [fast/ref][separate/fused][pass] */
    for (int r = 0; r < 2; r++)
        for (int f = 0; f < 2; f++)
            for (int p = 0; p < N_PASS; p++) best[r][f][p] = (timing){1e30, 1e30};
    timing best_copy[2] = {{1e30, 1e30}, {1e30, 1e30}}; /* memcpy, streaming */
    double norm[2] = {0, 0};
    for (int round = 0; round < rounds; round++) {
        for (int r = 0; r < 2; r++)
            for (int f = 0; f < 2; f++) {
                ops_use_reference(r);
                memcpy(grads, g0, n * sizeof *grads);
                timing *b = best[r][f];
                t0 = now();
                norm[r] = bt_adamw_grad_norm(&opt, grads);
                keep_best(&b[NORM], since(t0));
                const float coef = bt_clip_coef(norm[r], 1.0f);
                t0 = now();
                if (f) bt_adamw_step_zero_grad(&opt, params, grads, coef, &h, shadow);
                else bt_adamw_step(&opt, params, grads, coef, &h, shadow);
                keep_best(&b[STEP], since(t0));
                t0 = now();
                if (f) bt_adamw_zero_untouched(&opt, grads);
                else zero_fill(grads, n * sizeof *grads);
                keep_best(&b[ZERO], since(t0));
            }
        ops_use_reference(0);
        for (int st = 0; st < 2; st++) {
            t0 = now();
            copy_arena(copy, g0, n, st);
            keep_best(&best_copy[st], since(t0));
        }
    }
    ops_use_reference(0);
    size_t trained = 0;
    for (size_t s = 0; s < opt.n_segs; s++) trained += opt.segs[s].frozen ? 0 : opt.segs[s].numel;
    const double gb = 1e-9 * (double)n, sh = bf16 ? 2.0 : 0.0;
    /* bytes per parameter each pass must move: the norm reads g (4); AdamW reads p g m v (16)
     * and writes p m v (12) and the shadow (streamed: 2), fused + g's zeros (4, stored to lines
     * just read: their write-back); zero_fill streams 4 */
    const double bpp[2][N_PASS] = {{4.0, 28.0 + sh, 4.0}, {4.0, 32.0 + sh, 0.0}};
    printf("bench_optim: %s, %zu parameters (%zu trained), %d rounds, shadow %s, %d thread(s)\n",
           config, n, trained, rounds, bf16 ? "bf16" : "none", omp_threads());
    printf("state per parameter: weights 4 + gradient 4 + moments 8%s = %.0f bytes\n",
           bf16 ? " + bf16 shadow 2" : "", 16.0 + sh);
    printf("first touch of %.2f GB: cpu %.3f s, wall %.3f s; second write: cpu %.3f s, wall %.3f s\n",
           4.0 * gb, first_touch.cpu, first_touch.wall, second_touch.cpu, second_touch.wall);
    const double copy_gbs = 8.0 * gb / best_copy[1].wall; /* the passes are held against */
    printf("copy of the %.2f GB gradient arena (threaded, 8 B/float read + written): streaming "
           "stores cpu %.3f s, wall %.3f s, %.1f GB/s; memcpy cpu %.3f s, wall %.3f s, %.1f GB/s\n",
           4.0 * gb, best_copy[1].cpu, best_copy[1].wall, copy_gbs, best_copy[0].cpu,
           best_copy[0].wall, 8.0 * gb / best_copy[0].wall);
    static const char *const kname[2] = {"fast", "ref "}, *const fname[2] = {"separate", "fused"};
    static const char *const zname[2] = {"zero_fill", "zero rest"};
    for (int r = 0; r < 2; r++)
        for (int f = 0; f < 2; f++) {
            const timing *b = best[r][f];
            const double step_gbs = bpp[f][STEP] * gb / b[STEP].wall;
            printf("%s %-8s: grad norm cpu %.3f s (wall %.3f, %.1f GB/s) | adamw%s cpu %.3f s "
                   "(wall %.3f, %.0f B/param, %.1f GB/s = %.0f%% of copy) | %s cpu %.3f s "
                   "(wall %.3f) | total cpu %.3f s, wall %.3f s, %.0f B/param\n",
                   kname[r], fname[f], b[NORM].cpu, b[NORM].wall, 4.0 * gb / b[NORM].wall,
                   f ? "+zero" : "", b[STEP].cpu, b[STEP].wall, bpp[f][STEP], step_gbs,
                   100.0 * step_gbs / copy_gbs, zname[f], b[ZERO].cpu, b[ZERO].wall,
                   b[NORM].cpu + b[STEP].cpu + b[ZERO].cpu,
                   b[NORM].wall + b[STEP].wall + b[ZERO].wall,
                   bpp[f][NORM] + bpp[f][STEP] + bpp[f][ZERO]);
        }
    bt_adamw_free(&opt);
    free(params);
    free(grads);
    free(g0);
    free(copy);
    free(shadow);
    bt_param_table_free(&table);
    return norm[0] > 0.0 ? 0 : 1;
}
