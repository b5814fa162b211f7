/* bench_dist.c: the gradient all-reduce of bt-train (dist.h's bucketed reducer) timed on the
 * gradient arena of real model configs, for docs/distributed.md. Run under mpirun:
 *
 *   mpirun -np 2 build/tests/bench_dist [--reps N] [--max-mib M] [--wire bf16] CONFIG_DIR...
 *
 * For each config (its parameter table with every head, as bt-train sizes m->grads) and
 * each bucket size (one bucket, 4, 25, 100 MiB) rank 0 prints the mean seconds of
 * reducer_start(all) + reducer_finish (launch every bucket, wait, scale by 1/N: what a step
 * waits for without overlap), the algorithm bandwidth bytes / t and the ring bus bandwidth
 * 2 (N-1)/N · bytes / t, and the share of the arena whose buckets bt-train launches before
 * the towers' backward ends (bt_step_overlap_share, full arena). Arenas larger than
 * --max-mib (default 2048) are cut to that size (said in the table). --wire bf16: the bf16
 * wire (dist.wire_dtype; bandwidths counted in the fp32 bytes of the arena). Deliberately
 * not a test: timings depend on the machine. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "dist/dist.h"
#include "model/config.h"
#include "model/params.h"
#include "train/step.h"
#include "test_util.h"

static const char usage_text[] =
    "usage: mpirun -np N bench_dist [--reps N] [--max-mib M] [--wire bf16] CONFIG_DIR...\n";

int main(int argc, char **argv) {
    bt_dist d;
    if (bt_dist_init(&d, &argc, &argv) != BT_OK) {
        fprintf(stderr, "bench_dist: %s\n", bt_error_message());
        return 1;
    }
    int reps = 3;
    double max_mib = 2048;
    int first = 1, wire_bf16 = 0;
    for (; first < argc && argv[first][0] == '-'; first++) {
        if (!strcmp(argv[first], "--reps") && first + 1 < argc) reps = atoi(argv[++first]);
        else if (!strcmp(argv[first], "--max-mib") && first + 1 < argc)
            max_mib = atof(argv[++first]);
        else if (!strcmp(argv[first], "--wire") && first + 1 < argc)
            wire_bf16 = !strcmp(argv[++first], "bf16");
        else
            break;
    }
    if (first >= argc || argv[first][0] == '-' || reps < 1) { /* every rank says it, then ends */
        const int rc = tu_usage(first < argc ? argv[first] : NULL, usage_text);
        bt_dist_finalize(&d);
        return rc;
    }
    if (d.rank == 0)
        printf("ranks %d (%s), %s on the wire; mean of %d reps after 1 warm-up\n"
               "| config | params | buffer MiB | bucket MiB | seconds | algbw GB/s | busbw GB/s "
               "| launched during the backward |\n|---|---|---|---|---|---|---|---|\n",
               d.size, d.host, wire_bf16 ? "bf16" : "fp32", reps);
    const double buckets[] = {0, 4, 25, 100};
    for (int a = first; a < argc; a++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/config.json", argv[a]);
        bt_model_config c;
        if (bt_model_config_load(&c, path) != BT_OK) {
            fprintf(stderr, "bench_dist: %s\n", bt_error_message());
            bt_dist_abort(&d, "bench_dist", bt_error_message(), 1);
        }
        bt_param_table t;
        bt_param_table_init(&t, &c, BT_HEADS_ITC | BT_HEADS_ITM | BT_HEADS_MLM);
        size_t n = t.numel;
        const size_t cap = (size_t)(max_mib * 1048576.0 / 4.0);
        const int cut = n > cap;
        if (cut) n = cap;
        float *g = malloc(n * sizeof *g);
        if (!g) bt_dist_abort(&d, "bench_dist", "out of memory", 1);
        for (size_t i = 0; i < n; i++) g[i] = (float)(i % 1000) * 1e-3f;
        for (size_t b = 0; b < sizeof buckets / sizeof *buckets; b++) {
            bt_dist_reducer r;
            bt_dist_reducer_init(&r, &d, g, n, (size_t)(buckets[b] * 1048576.0),
                                  wire_bf16);
            double total = 0;
            for (int k = -1; k < reps; k++) {
                bt_dist_barrier(&d);
                const double t0 = bt_now_s();
                bt_dist_reducer_start(&r, 0, n);
                bt_dist_reducer_finish(&r);
                if (k >= 0) total += bt_now_s() - t0;
            }
            bt_dist_reducer_free(&r);
            const double s = total / reps, bytes = (double)n * 4.0;
            if (d.rank == 0) {
                char bk[32];
                if (buckets[b] > 0) snprintf(bk, sizeof bk, "%g", buckets[b]);
                else snprintf(bk, sizeof bk, "one");
                const size_t bf = buckets[b] > 0 ? (size_t)(buckets[b] * 1048576.0 / 4.0) : t.numel;
                printf("| %s | %zu | %.0f%s | %s | %.3f | %.2f | %.2f | %.1f%% |\n", argv[a],
                       t.n_params, bytes / 1048576.0, cut ? " (cut)" : "", bk, s,
                       bytes / s / 1e9, 2.0 * (d.size - 1) / d.size * bytes / s / 1e9,
                       100.0 * bt_step_overlap_share(&t, bf));
                fflush(stdout);
            }
        }
        free(g);
        bt_param_table_free(&t);
    }
    bt_dist_finalize(&d);
    return 0;
}
