/* bench_loader.c: the data loader's throughput (samples/s) at base-model preprocessing, and
 * how it compares with the base model's own training step, per core.
 *
 * Data (written here, deterministic, into a temporary directory that is removed at the end):
 * BENCH_IMAGES photo-like JPEGs of about 1000x800 (each 960..1040 x 760..840: sky and ground
 * gradients, shaded ellipses, a striped texture, Gaussian noise) encoded by libjpeg-turbo at
 * quality 85 with libjpeg's default 4:2:0 subsampling (camera / web JPEGs), and a JSON Lines
 * manifest with one record per image whose caption is a synthetic scene caption (synth.h).
 * Loader settings: configs/bridgetower-base/preprocessor_config.json (shortest_edge 288, crop
 * 288, fp32 pixels), the configs/synthetic tokenizer, max_length 40, batch 8, shuffle on.
 * Rows: 1 and 2 worker threads x {HF-exact decode, DCT-domain downscaling} x {no cache,
 * decoded-image cache warm (every image already cached)}; then, without cache, the same
 * records read from the JSON Lines manifest and from WebDataset shards (shards_write, 4 tars
 * of 16 samples, read in place). Each row runs one untimed epoch
 * (page cache, cache fill, thread start), then BENCH_EPOCHS timed epochs in which the main
 * thread only takes and releases batches (the loader's ceiling: a consumer that never makes
 * it wait). samples/s is wall time; samples per CPU-second uses the process CPU time
 * (CLOCK_PROCESS_CPUTIME_ID), which other people's jobs on a shared machine do not inflate;
 * with one worker it is the per-core rate.
 *
 * Model step (skipped with --loader-only): the base model (configs/bridgetower-base,
 * 326 M backbone parameters, + ITC, ITM and MLM heads) from bt_params_init, one
 * forward+backward of all three losses at batch 2, T = 40, 288 px, fp32 and bf16, with ONE
 * OpenMP thread; one untimed step first (arena allocation, GEMM primitive creation), then one
 * timed step. samples per CPU-second = 2 / (CPU seconds of the timed step).
 * The ratio printed is loader samples per CPU-second (1 worker) / model samples per
 * CPU-second: how many cores' worth of training one loader core keeps fed. The product
 * owner's target is >= 5.
 *
 * Run: meson test -C BUILD --benchmark --suite bench loader  (or BUILD/tests/bench_loader
 * [--loader-only]). Deliberately not here: correctness of the batches (test_loader.c), the
 * per-image breakdown (bench_image.c), multi-process data parallelism. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "model/config.h"
#include "data/image.h"
#include "data/loader.h"
#include "data/manifest.h"
#include "data/shards.h"
#include "data/synth.h"
#include "data/tokenizer.h"
#include "kernels/gemm.h"
#include "model/model.h"
#include "test_fixture.h"
#include "test_util.h"

enum { BENCH_IMAGES = 64, BENCH_EPOCHS = 3, BENCH_BATCH = 8, BENCH_T = 40 };

static uint8_t clamp_u8(double v) {
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v + 0.5);
}

/* A photo-like picture: a sky gradient above a horizon, a ground gradient below, a few shaded
 * ellipses, one striped patch (high frequencies), noise. */
static void photo(uint8_t *rgb, int w, int h, uint64_t seed) {
    tu_rng r;
    tu_rng_seed(&r, seed);
    double horizon = h * tu_rng_uniform(&r, 0.35, 0.65);
    double sky[3] = {tu_rng_uniform(&r, 60, 140), tu_rng_uniform(&r, 110, 190), 230};
    double ground[3] = {tu_rng_uniform(&r, 60, 160), tu_rng_uniform(&r, 60, 140),
                        tu_rng_uniform(&r, 20, 80)};
    struct { double cx, cy, rx, ry, col[3]; } e[5];
    for (int i = 0; i < 5; i++) {
        e[i].cx = tu_rng_uniform(&r, 0, w), e[i].cy = tu_rng_uniform(&r, 0, h);
        e[i].rx = tu_rng_uniform(&r, 30, 200), e[i].ry = tu_rng_uniform(&r, 30, 200);
        for (int c = 0; c < 3; c++)
            e[i].col[c] = tu_rng_uniform(&r, 0, 255);
    }
    int sx = (int)tu_rng_uniform(&r, 0, w - 200), sy = (int)tu_rng_uniform(&r, 0, h - 150);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            double v[3];
            for (int c = 0; c < 3; c++)
                v[c] = y < horizon ? sky[c] * (0.7 + 0.3 * y / horizon)
                                   : ground[c] * (1.2 - 0.4 * (y - horizon) / (h - horizon));
            for (int i = 0; i < 5; i++) {
                double dx = (x - e[i].cx) / e[i].rx, dy = (y - e[i].cy) / e[i].ry;
                double d2 = dx * dx + dy * dy;
                if (d2 < 1)
                    for (int c = 0; c < 3; c++)
                        v[c] = e[i].col[c] * (1.0 - 0.4 * d2) + 20 * (dx - dy);
            }
            if (x >= sx && x < sx + 200 && y >= sy && y < sy + 150)
                for (int c = 0; c < 3; c++)
                    v[c] += 50 * sin((x + 2 * y) * 0.9);
            for (int c = 0; c < 3; c++)
                rgb[((size_t)y * w + x) * 3 + c] = clamp_u8(v[c] + 5.0 * tu_rng_normal(&r));
        }
}

/* The dataset: BENCH_IMAGES JPEGs + train.jsonl in dir. Returns the total JPEG bytes. */
static long make_dataset(const char *dir) {
    char path[1200];
    snprintf(path, sizeof path, "%s/train.jsonl", dir);
    FILE *man = fopen(path, "wb");
    BT_ASSERT(man);
    uint8_t *rgb = malloc(1040 * 840 * 3);
    BT_ASSERT(rgb);
    tu_rng r;
    tu_rng_seed(&r, 2024);
    long bytes = 0;
    for (int i = 0; i < BENCH_IMAGES; i++) {
        int w = 960 + (int)tu_rng_uniform(&r, 0, 81), h = 760 + (int)tu_rng_uniform(&r, 0, 81);
        photo(rgb, w, h, 100 + (uint64_t)i);
        snprintf(path, sizeof path, "%s/%03d.jpg", dir, i);
        /* libjpeg's defaults: YCbCr 4:2:0, baseline */
        unsigned long n = 0;
        unsigned char *jpg = tu_encode_jpeg(rgb, w, h, 3, JCS_RGB, JCS_YCbCr, 85, 0, &n);
        tu_setup_file(path, jpg, n);
        free(jpg);
        struct stat sb;
        if (stat(path, &sb) == 0) bytes += (long)sb.st_size;
        synth_scene sc;
        char cap[SYNTH_CAPTION_MAX];
        synth_scene_sample(&sc, 7, SYNTH_SPLIT_TRAIN, i);
        synth_scene_caption(&sc, cap, sizeof cap);
        fprintf(man, "{\"id\": \"b%03d\", \"image\": \"%03d.jpg\", \"caption\": \"%s\"}\n", i, i,
                cap);
    }
    free(rgb);
    BT_ASSERT(fclose(man) == 0);
    return bytes;
}

static void remove_dataset(const char *dir) {
    char path[1200];
    for (int i = 0; i < BENCH_IMAGES; i++) {
        snprintf(path, sizeof path, "%s/%03d.jpg", dir, i);
        unlink(path);
    }
    snprintf(path, sizeof path, "%s/train.jsonl", dir);
    unlink(path);
    rmdir(dir);
}

typedef struct loader_result {
    double samples_per_s, samples_per_cpu_s, wait_share;
} loader_result;

/* One row: a warm-up epoch, then BENCH_EPOCHS timed epochs. */
static loader_result run_loader(const manifest *m, const tokenizer *tok,
                                const image_preprocess_config *img, int workers, int cache) {
    loader_options o = loader_options_default();
    o.num_workers = workers;
    o.batch_size = BENCH_BATCH;
    o.seed = 1;
    o.max_length = BENCH_T;
    o.max_epochs = 1 + BENCH_EPOCHS;
    o.cache_bytes = cache ? (size_t)256 << 20 : 0; /* 64 x 995 KB fit */
    loader *l;
    if (loader_init(&l, m, tok, img, &o) != BT_OK) {
        fprintf(stderr, "bench_loader: %s\n", bt_error_message());
        exit(1);
    }
    const int64_t nb = loader_num_batches(l);
    loader_batch *b;
    for (int64_t k = 0; k < nb; k++) {
        if (loader_next(l, &b) != BT_OK || !b) {
            fprintf(stderr, "bench_loader: %s\n", bt_error_message());
            exit(1);
        }
        loader_release(l, b);
    }
    loader_stats s0, s1;
    loader_get_stats(l, &s0);
    double w0 = tu_clock_seconds(CLOCK_MONOTONIC), c0 = tu_clock_seconds(CLOCK_PROCESS_CPUTIME_ID);
    int64_t samples = 0;
    for (;;) {
        if (loader_next(l, &b) != BT_OK) {
            fprintf(stderr, "bench_loader: %s\n", bt_error_message());
            exit(1);
        }
        if (!b) break;
        samples += b->size;
        loader_release(l, b);
    }
    double w1 = tu_clock_seconds(CLOCK_MONOTONIC), c1 = tu_clock_seconds(CLOCK_PROCESS_CPUTIME_ID);
    loader_get_stats(l, &s1);
    loader_free(l);
    loader_result r = {samples / (w1 - w0), samples / (c1 - c0),
                       (s1.wait_seconds - s0.wait_seconds) / (w1 - w0)};
    return r;
}

/* One base-model forward+backward (ITC + ITM + MLM) at B = 2, T = 40 on one thread: CPU
 * seconds of the second (timed) step; wall seconds in *wall. */
static double model_step(const bt_model_config *c, bt_precision prec, double *wall,
                         double *loss) {
    bt_model m;
    BT_ASSERT(bt_model_init(&m, c, BT_HEADS_ALL, prec) == BT_OK);
    bt_model_init_params(&m, 1);
    const size_t B = 2, T = BENCH_T, R = (size_t)c->image_size;
    int32_t ids[2 * BENCH_T], mask[2 * BENCH_T], mlm[2 * BENCH_T], itm[2] = {1, 0};
    float *px = malloc(B * 3 * R * R * sizeof *px);
    BT_ASSERT(px);
    tu_rng r;
    tu_rng_seed(&r, 5);
    for (size_t i = 0; i < B * T; i++) {
        ids[i] = (i % T == 0) ? 0 : (i % T == T - 1) ? 2 : 4 + (int32_t)(tu_rng_next(&r) % 50000);
        mask[i] = 1;
        mlm[i] = (tu_rng_next(&r) % 100 < 15) ? ids[i] : -100;
    }
    for (size_t i = 0; i < B * 3 * R * R; i++)
        px[i] = (float)tu_rng_normal(&r);
    bt_batch b = {B, T, ids, mask, px, itm, mlm};
    const bt_loss_weights lw = {1, 1, 1};
    double cpu = 0;
    for (int step = 0; step < 2; step++) {
        double w0 = tu_clock_seconds(CLOCK_MONOTONIC),
               c0 = tu_clock_seconds(CLOCK_PROCESS_CPUTIME_ID);
        if (bt_forward(&m, &b) != BT_OK) {
            fprintf(stderr, "bench_loader: %s\n", bt_error_message());
            exit(1);
        }
        bt_zero_grad(&m);
        bt_backward(&m, &lw);
        *wall = tu_clock_seconds(CLOCK_MONOTONIC) - w0;
        cpu = tu_clock_seconds(CLOCK_PROCESS_CPUTIME_ID) - c0;
    }
    *loss = m.loss_itc + m.loss_itm + m.loss_mlm;
    free(px);
    bt_model_free(&m);
    return cpu;
}

static const char *configs_dir(void) {
    const char *c = getenv("BT_CONFIGS");
    return c ? c : "configs";
}

int main(int argc, char **argv) {
    const int loader_only = argc == 2 && !strcmp(argv[1], "--loader-only");
    if (argc > 1 && !loader_only)
        return tu_usage(argc == 2 ? argv[1] : NULL,
                        "usage: bench_loader [--loader-only]\n"
                        "  --loader-only   the loader's rows only, without the model step\n");
#ifdef _OPENMP
    omp_set_num_threads(1);
#endif
    char dir[1024], path[1200];
    const char *base = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/bt-bench-loader-XXXXXX", base ? base : "/tmp");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    long bytes = make_dataset(dir);

    manifest m;
    tokenizer tok;
    image_preprocess_config img;
    snprintf(path, sizeof path, "%s/train.jsonl", dir);
    BT_ASSERT(manifest_load(&m, path, NULL) == BT_OK);
    snprintf(path, sizeof path, "%s/synthetic", configs_dir());
    if (tokenizer_load(&tok, path) != BT_OK) {
        fprintf(stderr, "bench_loader: %s (set BT_CONFIGS to the repository's configs/)\n",
                bt_error_message());
        return 1;
    }
    snprintf(path, sizeof path, "%s/bridgetower-base/preprocessor_config.json", configs_dir());
    if (image_preprocess_config_from_json(&img, path) != BT_OK) {
        fprintf(stderr, "bench_loader: %s\n", bt_error_message());
        return 1;
    }

    printf("loader: %d JPEGs ~1000x800 (q85, 4:2:0, %.0f KB mean), base preprocessing "
           "(shortest_edge %d, crop %d, fp32), captions to T = %d, batch %d, %d timed epochs "
           "after 1 warm-up\n\n",
           BENCH_IMAGES, bytes / 1024.0 / BENCH_IMAGES, img.shortest_edge, img.crop_size, BENCH_T,
           BENCH_BATCH, BENCH_EPOCHS);
    printf("| workers | decode | image cache | samples/s (wall) | samples per CPU-s | "
           "consumer waiting |\n|---:|---|---|---:|---:|---:|\n");
    double per_core[2][2] = {{0}}; /* [dct][cache], 1 worker */
    for (int workers = 1; workers <= 2; workers++)
        for (int cache = 0; cache < 2; cache++)
            for (int dct = 0; dct < 2; dct++) {
                image_preprocess_config cfg = img;
                cfg.use_dct_scaling = dct;
                loader_result r = run_loader(&m, &tok, &cfg, workers, cache);
                if (workers == 1) per_core[dct][cache] = r.samples_per_cpu_s;
                printf("| %d | %s | %s | %.1f | %.1f | %.0f%% |\n", workers,
                       dct ? "DCT-scaled" : "HF-exact", cache ? "warm (all hits)" : "off",
                       r.samples_per_s, r.samples_per_cpu_s, 100 * r.wait_share);
                fflush(stdout);
            }

    /* The same records as WebDataset shards (16 samples per shard, 4 shards, read in place):
     * no cache, so every sample reads its member from the tar. */
    char sdir[1100], spec[1200];
    snprintf(sdir, sizeof sdir, "%s/shards", dir);
    size_t n_shards = 0;
    manifest sh;
    snprintf(spec, sizeof spec, "%s/{00000..00003}.tar", sdir);
    if (shards_write(&m, sdir, BENCH_IMAGES / 4, &n_shards) != BT_OK ||
        manifest_load(&sh, spec, NULL) != BT_OK) {
        fprintf(stderr, "bench_loader: %s\n", bt_error_message());
        return 1;
    }
    printf("\nsource: the same %d records from the JSON Lines manifest (one file per image) and "
           "from %zu WebDataset shards (shuffle buffer 1000), no image cache\n\n",
           BENCH_IMAGES, n_shards);
    printf("| source | workers | decode | samples/s (wall) | samples per CPU-s |\n"
           "|---|---:|---|---:|---:|\n");
    for (int workers = 1; workers <= 2; workers++)
        for (int dct = 0; dct < 2; dct++)
            for (int src = 0; src < 2; src++) {
                image_preprocess_config cfg = img;
                cfg.use_dct_scaling = dct;
                loader_result r = run_loader(src ? &sh : &m, &tok, &cfg, workers, 0);
                printf("| %s | %d | %s | %.1f | %.1f |\n", src ? "shards" : "JSON Lines",
                       workers, dct ? "DCT-scaled" : "HF-exact", r.samples_per_s,
                       r.samples_per_cpu_s);
                fflush(stdout);
            }
    manifest_free(&sh);
    for (size_t i = 0; i < n_shards; i++) {
        snprintf(path, sizeof path, "%s/%05zu.tar", sdir, i);
        remove(path);
    }
    rmdir(sdir);

    manifest_free(&m);
    tokenizer_free(&tok);
    remove_dataset(dir);
    if (loader_only) return 0;

    bt_model_config c;
    snprintf(path, sizeof path, "%s/bridgetower-base/config.json", configs_dir());
    if (bt_model_config_load(&c, path) != BT_OK) {
        fprintf(stderr, "bench_loader: %s\n", bt_error_message());
        return 1;
    }
    if (gemm_init_from_env() != BT_OK) {
        fprintf(stderr, "bench_loader: %s\n", bt_error_message());
        return 1;
    }
    printf("\nmodel: bridgetower-base + ITC/ITM/MLM heads, forward+backward of the three losses, "
           "B = 2, T = %d, %dx%d px, 1 thread, GEMM %s (CPU %s, native bf16 %d); second step "
           "timed\n\n",
           BENCH_T, c.image_size, c.image_size, gemm_backend_name(gemm_get_backend()),
           gemm_cpu_isa_name(), gemm_cpu_has_bf16());
    printf("| precision | step wall s | step CPU s | samples per CPU-s |\n|---|---:|---:|---:|\n");
    double model_rate[2];
    for (int p = 0; p < 2; p++) {
        double wall, loss;
        double cpu = model_step(&c, p ? BT_PRECISION_BF16 : BT_PRECISION_FP32, &wall, &loss);
        model_rate[p] = 2.0 / cpu;
        printf("| %s | %.2f | %.2f | %.3f |\n", p ? "bf16" : "fp32", wall, cpu, model_rate[p]);
        fflush(stdout);
        if (!isfinite(loss)) {
            fprintf(stderr, "bench_loader: non-finite loss\n");
            return 1;
        }
    }
    gemm_release();

    printf("\nloader samples per CPU-s (1 worker) / model samples per CPU-s (1 thread); target "
           ">= 5\n\n| loader decode, cache | vs fp32 step | vs bf16 step |\n|---|---:|---:|\n");
    for (int cache = 0; cache < 2; cache++)
        for (int dct = 0; dct < 2; dct++)
            printf("| %s, %s | %.0fx | %.0fx |\n", dct ? "DCT-scaled" : "HF-exact",
                   cache ? "cache warm" : "no cache", per_core[dct][cache] / model_rate[0],
                   per_core[dct][cache] / model_rate[1]);
    return 0;
}
