/* bench_optim.c: CPU time of the optimizer + clip on a real parameter table (issue 9: "optimizer
 * + clip at most 2% of the step"), and of zeroing a gradient arena of that size (bt_zero_grad's
 * zero_fill, once per step), the fast kernels against the reference loop, and the cost of
 * touching fresh memory (what a cold first step pays for arenas it has not written yet).
 *
 *   bench_optim [--config NAME|DIR] [--rounds R] [--bf16]
 *
 * Per round, for the fast table and then the reference table (ops_use_reference): the global
 * grad norm (bt_adamw_grad_norm), one AdamW step (bt_adamw_step, with the bf16 shadow under
 * --bf16) and zero_fill of a separate arena of the gradients' size. Reports the best round of
 * each in CPU seconds of the whole process (CLOCK_PROCESS_CPUTIME_ID: on a shared machine
 * wall time measures the load too) and wall
 * seconds, and GB/s of the bytes each pass must move. Default: bridgetower-base with the ITC
 * head (the table bench_step trains), 3 rounds. Run it with OMP_NUM_THREADS=1 for per-core
 * numbers.
 *
 * Deliberately not here: correctness (test_ops_fast compares the kernels bit for bit,
 * test_optim and step_parity compare with PyTorch's AdamW), the rest of the step (bench_step). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/config.h"
#include "kernels/ops.h"
#include "train/optim.h"
#include "model/params.h"
#include "test_util.h"

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
            fprintf(stderr, "usage: bench_optim [--config NAME|DIR] [--rounds R] [--bf16]\n");
            return 2;
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
    float *params = bt_alloc(n * sizeof *params), *grads = bt_alloc(n * sizeof *grads);
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
    bt_bf16 *shadow = bf16 ? bt_alloc(n * sizeof *shadow) : NULL;
    bt_adamw opt;
    bt_adamw_init(&opt, &table);
    const bt_adamw_hparams h = {.lr = 1e-5, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
                                .weight_decay = 0.01};
    /* warm-up: first touch of m, v (and the shadow) */
    bt_adamw_step(&opt, params, grads, 1.0f, &h, shadow);
    float *zeroed = bt_alloc(n * sizeof *zeroed); /* zero_fill's target (grads keep values) */
    memset(zeroed, 1, n * sizeof *zeroed);

    timing best[2][3]; /* [fast/ref][norm/step/zero] */
    for (int r = 0; r < 2; r++)
        for (int p = 0; p < 3; p++) best[r][p] = (timing){1e30, 1e30};
    double norm[2] = {0, 0};
    for (int round = 0; round < rounds; round++) {
        for (int r = 0; r < 2; r++) {
            ops_use_reference(r);
            t0 = now();
            norm[r] = bt_adamw_grad_norm(&opt, grads);
            keep_best(&best[r][0], since(t0));
            t0 = now();
            bt_adamw_step(&opt, params, grads, bt_clip_coef(norm[r], 1.0f), &h, shadow);
            keep_best(&best[r][1], since(t0));
            t0 = now();
            zero_fill(zeroed, n * sizeof *zeroed);
            keep_best(&best[r][2], since(t0));
        }
    }
    ops_use_reference(0);
    const double gb = 1e-9 * (double)n;
    const double step_bytes = gb * (4.0 * 4 + 3.0 * 4 + (bf16 ? 2.0 : 0.0)); /* p g m v in; p m v (sh) out */
    printf("bench_optim: %s, %zu parameters, %d rounds, shadow %s\n", config, n, rounds,
           bf16 ? "bf16" : "none");
    printf("first touch of %.2f GB: cpu %.3f s, wall %.3f s; second write: cpu %.3f s, wall %.3f s\n",
           4.0 * gb, first_touch.cpu, first_touch.wall, second_touch.cpu, second_touch.wall);
    static const char *const kname[2] = {"fast", "ref "};
    for (int r = 0; r < 2; r++)
        printf("%s: grad norm cpu %.3f s (wall %.3f, %.1f GB/s) | adamw step cpu %.3f s "
               "(wall %.3f, %.1f GB/s) | total cpu %.3f s | zero_fill cpu %.3f s (wall %.3f, "
               "%.1f GB/s)\n",
               kname[r], best[r][0].cpu, best[r][0].wall, 4.0 * gb / best[r][0].wall,
               best[r][1].cpu, best[r][1].wall, step_bytes / best[r][1].wall,
               best[r][0].cpu + best[r][1].cpu, best[r][2].cpu, best[r][2].wall,
               4.0 * gb / best[r][2].wall);
    bt_adamw_free(&opt);
    bt_free(params);
    bt_free(grads);
    bt_free(zeroed);
    bt_free(shadow);
    bt_param_table_free(&table);
    return norm[0] > 0.0 ? 0 : 1;
}
