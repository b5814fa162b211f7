/* bench_step.c: samples/s of bt's full training step and of its inference (embedding) path on
 * a randomly initialized BridgeTower, the bt half of scripts/bench_side_by_side.py.
 *
 *   bench_step [--config NAME|DIR] [--batch B] [--text T] [--image R] [--steps N]
 *              [--mode train|infer] [--precision fp32|bf16]
 *              [--memory full|checkpoint|forward-only] [--checkpoint] [--quick] [--flops-only]
 *              [--estimate] [--kernels] [--plain-weights] [--keep-shadow] [--cross-features]
 *              [--beside-train]
 *   mpirun -np N [--bind-to none -x OMP_NUM_THREADS=K] bench_step ... (train: data parallel)
 *
 * train: the project's one training step, bt_train_step (src/train/step.h): ITC loss only
 *   (HF's three contrastive cross entropies; the ITC head is built, ITM and MLM are not),
 *   training-mode dropout, backward, global-norm clip 1.0, fused AdamW (lr 1e-5, wd 0.01).
 * infer: bt_forward of the backbone and the ITC head in eval mode (no dropout, no backward):
 *   the text, image and cross-modal embeddings bt-embed writes for retrieval.
 * --memory: the activation memory mode (model.h "Memory modes"); default full for train,
 *   forward-only for infer (which then also frees the parameter gradients and packs the
 *   weights, as bt-embed does: model.h bt_model_pack_weights; --memory full gives the training
 *   layout). --plain-weights: forward-only without the packing (the weights as training keeps
 *   them), to measure what it gives. --checkpoint = --memory checkpoint (train:
 *   gradient checkpointing, run config train.gradient_checkpointing; in bf16 without the
 *   weights' bf16 copy, as bt-train: model.h bt_model_drop_bf16_shadow). --keep-shadow:
 *   checkpointing with the copy kept, to measure what dropping it costs and saves.
 *   --cross-features: the last cross layer on every row, not only the CLS rows the heads read
 *   (model.h bt_model_set_cross_features), to measure what that saves.
 *   --beside-train (infer only): a second model in the same process, built for training (full
 *   memory mode, its own trainer), runs one training step on the same batch after each
 *   inference step, and the JSON adds the medians of its forward phases (towers + cross:
 *   train_forward_s) and of its whole step: the inference forward and the training forward
 *   compared on the same machine minute, which two processes on a busy VM do not give
 *   (docs/benchmarks.md "Session 37"). peak RSS then holds both models; not with --kernels.
 * Inputs: token ids uniform over the vocabulary (not the 3 special ids), all-ones mask,
 * pixels N(0, 1); weights by HF's init rules (seed 1). Defaults: bridgetower-base, B 8, T 40,
 * 4 steps. --quick: the tiny config (32 px), B 4, T 16, 3 steps (a smoke test in seconds).
 * --image R: the vision tower's image side instead of the config's vision_config.image_size
 *   (a multiple of its patch size), set before the model is built, so the position embeddings
 *   ((R/P)² + 1 rows), the activations and the FLOP count follow (scripts/bench_side_by_side.py
 *   --scaling: cost against image size). Random weights either way, so no checkpoint is
 *   stretched.
 * Under mpirun (train only): every rank runs bt_train_step on its own B rows (inputs seeded by
 *   the rank) with bt_trainer_set_dist as bt-train sets it by default (25 MiB buckets, fp32
 *   wire, no ZeRO, the overlap on): the data-parallel step of a global batch of N·B. Rank 0
 *   prints; its step times are the job's (every step ends in the gradient all-reduce), samples/s
 *   count the global batch, the FLOPs are the global batch's, and peak RSS is the sum over the
 *   ranks (the machine's memory for the job; the largest rank's is peak_rss_rank_max_bytes).
 *
 * Prints one line per step, then one JSON line (`{"impl": "bt", ...}`) with: first step
 * seconds, median of the later steps, samples/s from that median, peak RSS (getrusage), the
 * analytic FLOP count of one step (src/model/flops.h: every GEMM and attention product of the
 * forward, x3 for a training step: the model's, what PyTorch runs; flops_run_per_step is what
 * bt runs of it, without the last cross layer's non-CLS rows), achieved GFLOP/s
 * (of the model's count), and for train the step's own phase
 * times (towers/cross forward, losses, backward, optimizer + clip; medians), and for both
 * modes the forward and backward split by kind of kernel (GEMM, attention, memory-bound:
 * src/kernels/kernel_clock.h; medians).
 * --kernels adds a profile anyone can rerun: each dispatched kernel's own seconds per step
 * (mean over the steps after the first, ops.h ops_kernel_seconds) and GEMM's, largest first,
 * then the products by shape (gemm.h gemm_profile_read) with the GFLOP/s each ran at, and
 * those summed by form and size.
 * --flops-only prints the JSON without running; --estimate adds parameter and activation bytes
 * of the chosen memory mode (the side-by-side script decides from them whether the large
 * model fits in memory).
 *
 * Deliberately not here: PyTorch (the script runs the twin), the GEMM peak (bench_gemm.c),
 * correctness (the step's own tests). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "clock.h"
#include "dist/dist.h"
#include "kernels/cpu.h"
#include "model/flops.h"
#include "kernels/gemm.h"
#include "kernels/kernel_clock.h"
#include "model/model.h"
#include "kernels/ops.h"
#include "train/step.h"
#include "test_util.h"

/* CPU seconds of the whole process (all threads) and its minor page faults so far. */
static double cpu_s(long *minflt) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    *minflt = ru.ru_minflt;
    return (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec +
           (double)ru.ru_stime.tv_sec + 1e-6 * (double)ru.ru_stime.tv_usec;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(const double *x, size_t n) {
    if (n == 0) return NAN;
    double *s = malloc(n * sizeof *s);
    BT_ASSERT(s);
    memcpy(s, x, n * sizeof *s);
    qsort(s, n, sizeof *s, cmp_double);
    const double m = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
    free(s);
    return m;
}

/* The median of the steps after the first (the first alone when it is the only one). */
static double steady_median(const double *x, long steps) {
    return steps > 1 ? median(x + 1, (size_t)steps - 1) : x[0];
}

static const char *config_path(const char *name) {
    static char path[1200];
    if (strchr(name, '/')) {
        snprintf(path, sizeof path, "%s/config.json", name);
    } else {
        const char *root = getenv("BT_CONFIGS");
        if (root) snprintf(path, sizeof path, "%s/%s/config.json", root, name);
        else snprintf(path, sizeof path, "%s/../../configs/%s/config.json", tu_fixture_path(""),
                      name);
    }
    return path;
}

/* --kernels: each kernel's own seconds (ops.h) and GEMM's (kernel_clock.h), taken before the
 * measured steps (which 0) and after them (which 1). */
enum { PROF_MAX = 64 };
typedef struct kernel_profile {
    const char *names[PROF_MAX];
    double s[2][PROF_MAX + 1]; /* [PROF_MAX]: GEMM */
    size_t n;
} kernel_profile;

static void kernel_profile_take(kernel_profile *p, int which) {
    if (which == 0) gemm_profile_start();
    const size_t n = ops_kernel_seconds(p->names, p->s[which], PROF_MAX);
    p->n = n < PROF_MAX ? n : PROF_MAX;
    bt_kernel_times kt;
    bt_kernel_times_read(&kt);
    p->s[which][PROF_MAX] = kt.s[BT_KC_GEMM];
}

static void kernel_profile_print(const kernel_profile *p, long steps) {
    size_t order[PROF_MAX + 1];
    double per[PROF_MAX + 1], total = 0;
    size_t m = 0;
    for (size_t k = 0; k <= PROF_MAX; k++) {
        if (k < p->n || k == PROF_MAX) {
            per[k] = (p->s[1][k] - p->s[0][k]) / (double)steps;
            total += per[k];
            if (per[k] > 0) order[m++] = k;
        }
    }
    for (size_t i = 1; i < m; i++) /* largest first */
        for (size_t j = i; j > 0 && per[order[j]] > per[order[j - 1]]; j--) {
            const size_t x = order[j];
            order[j] = order[j - 1];
            order[j - 1] = x;
        }
    fprintf(stderr, "bench_step: kernels, own seconds per step (mean of %ld steps; %.3f s "
                    "counted):\n", steps, total);
    for (size_t i = 0; i < m; i++) {
        const size_t k = order[i];
        fprintf(stderr, "bench_step:   %-28s %8.4f s  %5.1f%%\n",
                k == PROF_MAX ? "gemm (all products)" : p->names[k], per[k],
                100 * per[k] / total);
    }
}

/* The flops of every call of one profiled shape. */
static double shape_flop(const gemm_shape_time *r) {
    const gemm_shape *g = &r->shape;
    return 2.0 * (double)g->m * (double)g->n * (double)g->k * (double)g->batch * (double)r->calls;
}

/* --kernels, third table: the rows of the second summed by form (Ta: the weight gradients;
 * Tb: the Linear forwards; plain, assigned or accumulated (+=): the input gradients) and by
 * the rows of data they run over (m, or k for Ta), with the seconds of the rows that read an
 * fp32 operand (rounded to bf16 per call under bf16 compute): where the products' rate falls
 * short of the machine's GEMM peak (docs/benchmarks.md "GEMMs in the training step"). */
static void gemm_forms_print(const gemm_shape_time *r, size_t n, long steps) {
    enum { FORMS = 4, SIZES = 3 };
    static const char *const form_name[FORMS] = {"Ta (weight gradients)", "Tb (forwards)",
                                                  "plain (input gradients)",
                                                  "plain += (input gradients)"};
    static const char *const size_name[SIZES] = {">= 1024 rows", "9-1023 rows", "<= 8 rows"};
    double sec[FORMS][SIZES] = {{0}}, flop[FORMS][SIZES] = {{0}}, f32[FORMS][SIZES] = {{0}};
    for (size_t i = 0; i < n; i++) {
        const gemm_shape *g = &r[i].shape;
        const int form = g->trans_a ? 0 : g->trans_b ? 1 : g->accumulate ? 3 : 2;
        const size_t rows = g->trans_a ? g->k : g->m;
        const int size = rows >= 1024 ? 0 : rows > 8 ? 1 : 2;
        sec[form][size] += r[i].seconds;
        flop[form][size] += shape_flop(&r[i]);
        if (g->compute == GEMM_COMPUTE_BF16 &&
            (g->a_type == BT_DTYPE_F32 || g->b_type == BT_DTYPE_F32))
            f32[form][size] += r[i].seconds;
    }
    fprintf(stderr, "bench_step: gemm by form, seconds per step (the rows above summed):\n");
    fprintf(stderr, "bench_step:   %-28s %-13s %9s %8s %16s\n", "form", "rows", "s", "GFLOP/s",
            "s, fp32 operand");
    for (int f = 0; f < FORMS; f++)
        for (int z = 0; z < SIZES; z++) {
            if (sec[f][z] <= 0) continue;
            fprintf(stderr, "bench_step:   %-28s %-13s %9.4f %8.1f %16.4f\n", form_name[f],
                    size_name[z], sec[f][z] / (double)steps, flop[f][z] / sec[f][z] * 1e-9,
                    f32[f][z] / (double)steps);
        }
}

/* --kernels, second table: the products by shape (gemm.h gemm_profile_read), largest time
 * first, with the GFLOP/s each shape ran at, so the ones below the machine's GEMM peak show. */
static void gemm_profile_print(long steps) {
    enum { ROWS = 128 };
    static gemm_shape_time r[ROWS];
    size_t dropped = 0;
    const size_t n = gemm_profile_read(r, ROWS, &dropped);
    for (size_t i = 1; i < n; i++) /* largest first */
        for (size_t j = i; j > 0 && r[j].seconds > r[j - 1].seconds; j--) {
            const gemm_shape_time x = r[j];
            r[j] = r[j - 1];
            r[j - 1] = x;
        }
    double total = 0, flop_total = 0;
    for (size_t i = 0; i < n; i++) {
        total += r[i].seconds;
        flop_total += shape_flop(&r[i]);
    }
    fprintf(stderr, "bench_step: gemm by shape, seconds per step (mean of %ld steps; %.3f s, "
                    "%.1f GFLOP/s over all):\n", steps, total / (double)steps,
            total > 0 ? flop_total / total * 1e-9 : 0.0);
    fprintf(stderr, "bench_step:   %-30s %6s %-9s %9s %6s %8s\n", "m x n x k [batch] op", "calls",
            "types", "s", "%", "GFLOP/s");
    for (size_t i = 0; i < n; i++) {
        const gemm_shape *g = &r[i].shape;
        char name[64];
        snprintf(name, sizeof name, "%zux%zux%zu%s%s%s%s", g->m, g->n, g->k,
                 g->trans_a ? " Ta" : "", g->trans_b ? " Tb" : "", g->accumulate ? " +=" : "",
                 g->bias ? " +b" : "");
        if (g->batch > 1)
            snprintf(name + strlen(name), sizeof name - strlen(name), " [%zu]", g->batch);
        char types[16];
        snprintf(types, sizeof types, "%s%s%s", g->a_type == BT_DTYPE_BF16 ? "b" : "f",
                 g->b_type == BT_DTYPE_BF16 ? "b" : "f",
                 g->compute == GEMM_COMPUTE_BF16 ? "->bf16" : "->f32");
        fprintf(stderr, "bench_step:   %-30s %6.1f %-9s %9.4f %5.1f%% %8.1f\n", name,
                (double)r[i].calls / (double)steps, types, r[i].seconds / (double)steps,
                100 * r[i].seconds / total, shape_flop(&r[i]) / r[i].seconds * 1e-9);
    }
    if (dropped) fprintf(stderr, "bench_step:   (%zu calls of shapes beyond the table)\n", dropped);
    gemm_forms_print(r, n, steps);
}

/* m built with the ITC head and initialized by HF's rules (seed 1), as every run here does:
 * 0, or -1 after printing the error. */
static int model_setup(bt_model *m, const bt_model_config *c, bt_precision precision) {
    if (bt_model_init(m, c, BT_HEADS_ITC, precision) != BT_OK) {
        fprintf(stderr, "bench_step: %s\n", bt_error_message());
        return -1;
    }
    bt_model_init_params(m, 1);
    return 0;
}

/* tr on m as bt-train sets a trainer up for this step (ITC only, seed 7, constant lr 1e-5, its
 * dist defaults, the arenas sized and backed for B x T before the first step): the reserve's
 * seconds, or -1 after printing the error. */
static double trainer_setup(bt_trainer *tr, bt_model *m, const bt_dist *d, size_t nb,
                            size_t nt) {
    bt_step_config sc = bt_step_config_default();
    sc.w_itc = 1.0f, sc.w_itm = 0.0f, sc.w_mlm = 0.0f;
    sc.seed = 7;
    if (bt_schedule_init(&sc.schedule, "constant", 1e-5, 1000000, 0, 0.0) != BT_OK ||
        bt_trainer_init(tr, m, &sc) != BT_OK) {
        fprintf(stderr, "bench_step: %s\n", bt_error_message());
        return -1.0;
    }
    /* bt-train's defaults (train/config.c): dist.bucket_mb 25, fp32 wire, ZeRO off */
    bt_trainer_set_dist(tr, d, (size_t)25 * 1048576, 0, 0);
    const double r0 = bt_now_s();
    if (bt_trainer_reserve(tr, nb, nt) != BT_OK)
        bt_dist_abort(d, "bench_step", bt_error_message(), 1);
    return bt_now_s() - r0;
}

static const char usage_text[] =
    "usage: [mpirun -np N] bench_step [--config NAME|DIR] [--batch B] [--text T] [--image R]\n"
    "           [--steps N] [--mode train|infer] [--precision fp32|bf16]\n"
    "           [--memory full|checkpoint|forward-only] [--checkpoint] [--quick]\n"
    "           [--flops-only] [--estimate] [--kernels] [--plain-weights] [--keep-shadow]\n"
    "           [--cross-features] [--beside-train]\n";

/* The benchmark proper, on the world d (one process, or mpirun's ranks: rank 0 prints). */
static int bench_main(int argc, char **argv, const bt_dist *d) {
    const char *config = "bridgetower-base", *mode = "train", *prec = "fp32", *memory = NULL;
    long B = 8, T = 40, steps = 4, image = 0;
    int flops_only = 0, estimate = 0, kernels = 0, plain_weights = 0, keep_shadow = 0;
    int cross_features = 0, beside_train = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--quick") == 0) {
            config = "tiny", B = 4, T = 16, steps = 3;
        } else if (strcmp(a, "--flops-only") == 0) {
            flops_only = 1;
        } else if (strcmp(a, "--estimate") == 0) {
            estimate = 1;
        } else if (strcmp(a, "--kernels") == 0) {
            kernels = 1;
        } else if (strcmp(a, "--plain-weights") == 0) {
            plain_weights = 1;
        } else if (strcmp(a, "--keep-shadow") == 0) {
            keep_shadow = 1;
        } else if (strcmp(a, "--cross-features") == 0) {
            cross_features = 1;
        } else if (strcmp(a, "--beside-train") == 0) {
            beside_train = 1;
        } else if (strcmp(a, "--checkpoint") == 0) {
            memory = "checkpoint";
        } else if (v && strcmp(a, "--memory") == 0) {
            memory = argv[++i];
        } else if (v && strcmp(a, "--config") == 0) {
            config = argv[++i];
        } else if (v && strcmp(a, "--mode") == 0) {
            mode = argv[++i];
        } else if (v && strcmp(a, "--precision") == 0) {
            prec = argv[++i];
        } else if (v && (strcmp(a, "--batch") == 0 || strcmp(a, "--text") == 0 ||
                         strcmp(a, "--steps") == 0 || strcmp(a, "--image") == 0)) {
            char *end;
            const long n = strtol(argv[++i], &end, 10);
            if (*end || n < 1 || n > 100000) {
                fprintf(stderr, "bench_step: %s '%s': expected a positive integer\n", a, v);
                return 2;
            }
            *(strcmp(a, "--batch") == 0   ? &B
              : strcmp(a, "--text") == 0  ? &T
              : strcmp(a, "--image") == 0 ? &image
                                          : &steps) = n;
        } else {
            return tu_usage(a, usage_text);
        }
    }
    const int train = strcmp(mode, "train") == 0, bf16 = strcmp(prec, "bf16") == 0;
    if (!memory) memory = train ? "full" : "forward-only";
    bt_act_mode act_mode = BT_ACTS_FULL;
    int known_memory = 0;
    for (int k = BT_ACTS_FULL; k <= BT_ACTS_FORWARD_ONLY; k++)
        if (strcmp(memory, bt_act_mode_name((bt_act_mode)k)) == 0)
            act_mode = (bt_act_mode)k, known_memory = 1;
    if ((!train && strcmp(mode, "infer") != 0) || (!bf16 && strcmp(prec, "fp32") != 0) ||
        !known_memory || (train && act_mode == BT_ACTS_FORWARD_ONLY)) {
        if (train && act_mode == BT_ACTS_FORWARD_ONLY)
            fprintf(stderr, "bench_step: --memory forward-only has no backward: not with "
                            "--mode train\n");
        return tu_usage(NULL, usage_text);
    }
    if (beside_train && (train || kernels)) {
        fprintf(stderr, "bench_step: --beside-train goes with --mode infer, without --kernels\n");
        return 2;
    }
    const int ranks = d->size, rank = d->rank;
    if (ranks > 1 && !train) {
        fprintf(stderr, "bench_step: --mode infer runs in one process (mpirun: --mode train)\n");
        return 2;
    }
    if (gemm_init_from_env() != BT_OK) {
        fprintf(stderr, "bench_step: %s\n", bt_error_message());
        return 1;
    }
    bt_model_config c;
    const char *path = config_path(config);
    if (bt_model_config_load(&c, path) != BT_OK) {
        fprintf(stderr, "bench_step: %s\n", bt_error_message());
        return 1;
    }
    if (image > 0) { /* --image: before anything is sized from the config */
        c.image_size = (int)image;
        if (bt_model_config_finish(&c, path) != BT_OK) {
            fprintf(stderr, "bench_step: --image %ld: %s\n", image, bt_error_message());
            return 2;
        }
    }
    if (T + 2 > c.max_position_embeddings) {
        fprintf(stderr, "bench_step: --text %ld: the config allows at most %d tokens\n", T,
                c.max_position_embeddings - 2);
        return 2;
    }
    const size_t R = (size_t)c.image_size, nb = (size_t)B, nt = (size_t)T;
    /* the model's analytic count (flops.h): B captions, B images, B pairs (of every rank);
     * training x3 */
    const bt_flops fl = bt_model_flops(&c, BT_HEADS_ITC, nt);
    const size_t ng = nb * (size_t)ranks;
    const double flops = bt_flops_forward(&fl, ng, ng, ng, 0) * (train ? 3.0 : 1.0);
    /* what bt runs of them: the last cross layer on the CLS rows (model.h) */
    const double flops_run = flops - (cross_features ? 0.0 : (double)ng * fl.pair_skipped *
                                                                  (train ? 3.0 : 1.0));
    int threads = 1;
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
    const bt_precision precision = bf16 ? BT_PRECISION_BF16 : BT_PRECISION_FP32;
    if (bf16 && !flops_only && rank == 0)
        fprintf(stderr, "bench_step: gemm bf16 route: %s\n", gemm_bf16_route_describe());
    /* the JSON line: what was run, then (unless --flops-only) what was measured */
    char head[1024];
    int hn = snprintf(head, sizeof head,
                      "{\"impl\": \"bt\", \"mode\": \"%s\", \"precision\": \"%s\", "
                      "\"config\": \"%s\", \"B\": %ld, \"T\": %ld, \"R\": %zu, \"threads\": %d, "
                      "\"isa\": \"%s\", \"gemm\": \"%s\", \"gemm_bf16_route\": \"%s\", "
                      "\"memory\": \"%s\", \"ranks\": %d, \"global_B\": %zu, "
                      "\"flops_per_step\": %.6e, \"flops_run_per_step\": %.6e",
                      mode, prec, config, B, T, R, threads, bt_isa_name(bt_cpu_isa_active()),
                      gemm_backend_name(gemm_get_backend()),
                      /* bf16 only: the AUTO route is measured on first use (gemm.h) */
                      bf16 ? gemm_bf16_route_name(gemm_bf16_route_active()) : "n/a", memory,
                      ranks, ng, flops, flops_run);
    if (estimate) {
        bt_param_table table;
        bt_param_table_init(&table, &c, BT_HEADS_ITC);
        const size_t act = bt_model_activation_bytes_mode(&c, BT_HEADS_ITC, precision, act_mode,
                                                          nb, nb, nb, 0, nt);
        snprintf(head + hn, sizeof head - (size_t)hn,
                 ", \"param_count\": %zu, \"activation_bytes\": %zu", table.numel, act);
        bt_param_table_free(&table);
    }
    if (flops_only) {
        if (rank == 0) printf("%s}\n", head);
        return 0;
    }

    bt_model m;
    if (model_setup(&m, &c, precision) < 0) return 1;
    /* forward-only inference needs no parameter gradients either, and reads packed weights
     * (bt-embed does both: eval.c bt_eval_setup_open) */
    size_t packed_tensors = 0;
    if (act_mode == BT_ACTS_FORWARD_ONLY) {
        bt_model_free_grads(&m);
        if (!plain_weights) packed_tensors = bt_model_pack_weights(&m);
    }
    if (rank == 0)
        fprintf(stderr, "bench_step: packed weights: %zu tensors%s\n", packed_tensors,
                plain_weights ? " (--plain-weights)" : "");
    bt_model_set_act_mode(&m, act_mode);
    bt_model_set_cross_features(&m, cross_features);
    /* --checkpoint drops the bf16 weight copy, as bt-train does (trainer.c memory_plan) */
    if (act_mode == BT_ACTS_CHECKPOINT && !keep_shadow) bt_model_drop_bf16_shadow(&m);
    tu_rng rng;
    tu_rng_seed(&rng, 2026 + (uint64_t)rank); /* each rank its own rows */
    int32_t *ids = malloc(nb * nt * sizeof *ids);
    float *pix = malloc(nb * 3 * R * R * sizeof *pix);
    BT_ASSERT(ids && pix);
    for (size_t i = 0; i < nb * nt; i++)
        ids[i] = 3 + (int32_t)(tu_rng_next(&rng) % (uint64_t)(c.vocab_size - 3));
    for (size_t i = 0; i < nb * 3 * R * R; i++) pix[i] = (float)tu_rng_normal(&rng);

    bt_trainer tr;
    double reserve_s = 0.0;
    if (train) {
        if ((reserve_s = trainer_setup(&tr, &m, d, nb, nt)) < 0) return 1;
        if (rank == 0)
            fprintf(stderr, "bench_step: reserve (arenas for B %zu, T %zu): %.3f s\n", nb, nt,
                    reserve_s);
    } else {
        bt_model_set_dropout(&m, 0, 0, 0);
    }
    /* --beside-train: the training step's model and trainer, as --mode train builds them */
    bt_model tm;
    bt_trainer ttr;
    double *beside_fwd = NULL, *beside_step = NULL;
    if (beside_train) {
        if (model_setup(&tm, &c, precision) < 0 || trainer_setup(&ttr, &tm, d, nb, nt) < 0)
            return 1;
        beside_fwd = calloc((size_t)steps, sizeof *beside_fwd);
        beside_step = calloc((size_t)steps, sizeof *beside_step);
        BT_ASSERT(beside_fwd && beside_step);
    }
    double *t = calloc((size_t)steps, sizeof *t);
    enum { NPH = 8 }; /* the step's phases, then the kernel classes */
    double *ph[NPH];
    for (int p = 0; p < NPH; p++) ph[p] = calloc((size_t)steps, sizeof *ph[p]);
    BT_ASSERT(t && ph[NPH - 1]);
    const bt_step_batch sb = {.B = nb, .T = nt, .input_ids = ids, .pixel_values = pix};
    const bt_batch fb = {nb, nt, ids, NULL, pix, NULL, NULL};
    double *cpu = calloc((size_t)steps, sizeof *cpu);
    BT_ASSERT(cpu);
    kernel_profile prof = {0};
    for (long s = 0; s < steps; s++) {
        if (s == 1 || steps == 1) kernel_profile_take(&prof, 0);
        long flt0, flt1;
        const double c0 = cpu_s(&flt0);
        const double t0 = bt_now_s();
        bt_status st;
        if (train) {
            bt_step_result res;
            st = bt_train_step(&tr, &sb, 1, &res);
            ph[0][s] = res.t_towers_fwd, ph[1][s] = res.t_cross_fwd, ph[2][s] = res.t_losses;
            ph[3][s] = res.t_backward, ph[4][s] = res.t_optimizer;
            ph[5][s] = res.t_gemm, ph[6][s] = res.t_attention, ph[7][s] = res.t_memory;
            if (st == BT_OK && rank == 0)
                fprintf(stderr, "bench_step: step %ld: loss %.5f, grad norm %.4g\n", s, res.loss,
                        res.grad_norm);
        } else {
            bt_kernel_times k0, k1;
            bt_kernel_times_read(&k0);
            st = bt_forward(&m, &fb);
            bt_kernel_times_read(&k1);
            for (int q = 0; q < BT_KC_COUNT; q++) ph[5 + q][s] = k1.s[q] - k0.s[q];
        }
        t[s] = bt_now_s() - t0;
        cpu[s] = cpu_s(&flt1) - c0;
        if (st != BT_OK) {
            char msg[600];
            snprintf(msg, sizeof msg, "step %ld: %s", s, bt_error_message());
            bt_dist_abort(d, "bench_step", msg, 1); /* every rank ends, none waits */
        }
        if (beside_train) { /* after the inference step's clocks, on the same batch */
            bt_step_result res;
            const double b0 = bt_now_s();
            if (bt_train_step(&ttr, &sb, 1, &res) != BT_OK)
                bt_dist_abort(d, "bench_step", bt_error_message(), 1);
            beside_step[s] = bt_now_s() - b0;
            beside_fwd[s] = res.t_towers_fwd + res.t_cross_fwd;
            fprintf(stderr, "bench_step: beside it, train step %ld: %.3f s, forward %.3f s\n", s,
                    beside_step[s], beside_fwd[s]);
        }
        if (rank > 0) continue;
        /* CPU time and page faults: on a shared machine wall time measures the load too */
        fprintf(stderr, "bench_step: %s %s step %ld: %.3f s (cpu %.3f s, %ld minor faults)",
                mode, prec, s, t[s], cpu[s], flt1 - flt0);
        if (train)
            fprintf(stderr, "; towers %.3f, cross %.3f, losses %.3f, backward %.3f, optimizer %.3f s",
                    ph[0][s], ph[1][s], ph[2][s], ph[3][s], ph[4][s]);
        fprintf(stderr, "; kernels: gemm %.3f, attention %.3f, memory-bound %.3f s\n", ph[5][s],
                ph[6][s], ph[7][s]);
    }
    if (kernels && rank == 0) {
        kernel_profile_take(&prof, 1);
        kernel_profile_print(&prof, steps > 1 ? steps - 1 : 1);
        gemm_profile_print(steps > 1 ? steps - 1 : 1);
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    /* peak RSS of every rank (one: this process's), summed: the job's memory on the machine */
    const int64_t mine = (int64_t)ru.ru_maxrss * 1024;
    int64_t *rss = calloc((size_t)ranks, sizeof *rss);
    BT_ASSERT(rss);
    if (bt_dist_allgather_i64(d, &mine, 1, rss) != BT_OK)
        bt_dist_abort(d, "bench_step", bt_error_message(), 1);
    long long rss_sum = 0, rss_max = 0;
    for (int r = 0; r < ranks; r++) {
        rss_sum += rss[r];
        if (rss[r] > rss_max) rss_max = rss[r];
    }
    free(rss);
    const double med = steady_median(t, steps);
    if (rank == 0) {
        printf("%s, \"steps\": %ld, \"first_step_s\": %.6f, \"median_step_s\": %.6f, "
               "\"last_step_s\": %.6f, \"samples_per_s\": %.6f, \"gflops\": %.3f, "
               "\"peak_rss_bytes\": %lld, \"peak_rss_rank_max_bytes\": %lld, "
               "\"first_step_cpu_s\": %.6f, \"median_step_cpu_s\": %.6f, \"reserve_s\": %.6f",
               head, steps, t[0], med, t[steps - 1], (double)ng / med, flops / med * 1e-9,
               rss_sum, rss_max,
               cpu[0], steady_median(cpu, steps), reserve_s);
        static const char *const names[NPH] = {"towers_fwd_s", "cross_fwd_s", "losses_s",
                                               "backward_s",   "optimizer_s", "gemm_s",
                                               "attention_s",  "memory_bound_s"};
        for (int p = train ? 0 : 5; p < NPH; p++)
            printf(", \"%s\": %.6f", names[p], steady_median(ph[p], steps));
        if (beside_train)
            printf(", \"train_forward_s\": %.6f, \"train_step_s\": %.6f",
                   steady_median(beside_fwd, steps), steady_median(beside_step, steps));
        printf("}\n");
    }
    if (beside_train) {
        bt_trainer_free(&ttr);
        bt_model_free(&tm);
        free(beside_fwd);
        free(beside_step);
    }
    if (train) bt_trainer_free(&tr);
    for (int p = 0; p < NPH; p++) free(ph[p]);
    free(t);
    free(cpu);
    free(ids);
    free(pix);
    bt_model_free(&m);
    gemm_release();
    return 0;
}

int main(int argc, char **argv) {
    /* OpenMP as bt's tools run it (cpu.h: passive waits unless OMP_WAIT_POLICY is set), so the
     * numbers are what bt-train gets, and a busy machine does not turn spinning threads into
     * seconds per step */
    bt_runtime_prefer_start_environment(argv);
    /* the world: one process without a launcher (no MPI touched), else mpirun's ranks */
    bt_dist d;
    if (bt_dist_init(&d, NULL, NULL) != BT_OK) {
        fprintf(stderr, "bench_step: %s\n", bt_error_message());
        return 1;
    }
    const int rc = bench_main(argc, argv, &d);
    /* a rank that stopped early must not wait in MPI_Finalize for ranks in a collective */
    if (rc != 0 && bt_dist_active(&d)) bt_dist_abort(&d, "bench_step", "stopped", rc);
    bt_dist_finalize(&d);
    return rc;
}
