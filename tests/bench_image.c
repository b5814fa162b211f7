/* bench_image.c: images/s (one thread) of JPEG, PNG and WebP decode + BridgeTower
 * preprocessing.
 *
 * Input: a 1000x800 photo-like picture (gradients, hard-edged blocks, Gaussian noise; made
 * here, deterministic) encoded in memory by libjpeg at quality 75, 4:2:0 (the common camera /
 * web setting). Rows:
 *   decode only                   full-size decode to RGB
 *   decode (DCT 3/8) only         libjpeg DCT-domain downscaling to the smallest scale not
 *                                 below the 288 resize target (375x300 here)
 *   decode + preprocess           full decode, Pillow-exact resize to 352x288, crop 288,
 *                                 normalize to fp32 (3, 288, 288): the HF-identical path
 *   decode (DCT) + preprocess     the loader's fast path (use_dct_scaling)
 *   preprocess only               resize + crop + normalize of an already decoded image
 * and the same at 294 (large model). A second table decodes the same picture stored as JPEG
 * (the bytes above), PNG (libpng's default zlib level and filters, RGB and the greyscale
 * version: New Yorker cartoons are greyscale scans), lossy WebP (quality 75, libwebp's
 * default method 4) and lossless WebP, each decoded with image_decode_for and preprocessed
 * at 288 (the HF-exact path; DCT scaling exists only for JPEG). Each number is the best of
 * BENCH_ROUNDS timed rounds of ~0.25 s (the machine is shared; best-of filters other people's load). images/s per core is
 * computed from the thread's CPU time (CLOCK_THREAD_CPUTIME_ID), which time-slicing by other
 * processes does not inflate; on an idle machine wall and CPU time agree.
 *
 * The reference implementation (PIL + numpy, the HF processor's path) is timed on the same
 * bytes by: build/tests/bench_image --write-jpeg /tmp/b.jpg &&
 *           /usr/bin/python3 scripts/gen_image_fixtures.py --bench /tmp/b.jpg
 * and on the second table's files by: build/tests/bench_image --write-formats /tmp &&
 *           for f in /tmp/bench-?.*; do /usr/bin/python3 scripts/gen_image_fixtures.py \
 *               --bench $f; done
 * Run: meson test -C build --benchmark --suite bench (or build/tests/bench_image).
 * Deliberately not here: correctness (test_image.c), multi-threaded loader throughput. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <webp/encode.h>

#include "data/image.h"
#include "test_fixture.h"
#include "test_util.h"

enum { BENCH_ROUNDS = 5 };

typedef enum { OP_DECODE, OP_DECODE_DCT, OP_PIPELINE, OP_PIPELINE_DCT, OP_PREPROCESS } bench_op;

typedef struct bench_ctx {
    const unsigned char *jpg; /* encoded image (JPEG in the first table, any format after) */
    unsigned long n;
    const image_u8 *decoded;
    image_preprocess_config cfg, cfg_dct;
    float *out;
} bench_ctx;

static void run_once(const bench_ctx *c, bench_op op) {
    image_u8 img;
    bt_status st = BT_OK;
    switch (op) {
    case OP_DECODE:
    case OP_PIPELINE:
        st = image_decode_for(&img, c->jpg, c->n, "bench", NULL);
        break;
    case OP_DECODE_DCT:
    case OP_PIPELINE_DCT:
        st = image_decode_jpeg_for(&img, c->jpg, c->n, "bench", &c->cfg_dct);
        break;
    case OP_PREPROCESS:
        image_preprocess(c->out, c->decoded, &c->cfg);
        return;
    }
    if (st != BT_OK) {
        fprintf(stderr, "bench: %s\n", bt_error_message());
        exit(1);
    }
    if (op == OP_PIPELINE) image_preprocess(c->out, &img, &c->cfg);
    if (op == OP_PIPELINE_DCT) image_preprocess(c->out, &img, &c->cfg_dct);
    image_u8_free(&img);
}

/* Best-of-rounds seconds per image: wall clock and this thread's CPU time. */
static void time_op(const bench_ctx *c, bench_op op, double *wall, double *cpu) {
    run_once(c, op); /* warm-up */
    *wall = *cpu = INFINITY;
    for (int r = 0; r < BENCH_ROUNDS; r++) {
        int iters = 0;
        double t0 = tu_clock_seconds(CLOCK_MONOTONIC),
               c0 = tu_clock_seconds(CLOCK_THREAD_CPUTIME_ID), t;
        do {
            run_once(c, op);
            iters++;
            t = tu_clock_seconds(CLOCK_MONOTONIC);
        } while (t - t0 < 0.25);
        double cw = (tu_clock_seconds(CLOCK_THREAD_CPUTIME_ID) - c0) / iters, tw = (t - t0) / iters;
        if (tw < *wall) *wall = tw;
        if (cw < *cpu) *cpu = cw;
    }
}

/* Decode / decode + preprocess of the same picture in each format, at 288; with write_dir,
 * writes the files there instead (bench-<n>.<ext>, for the PIL timing). */
static void bench_formats(const uint8_t *rgb, int w, int h, bench_ctx *c, const char *write_dir) {
    uint8_t *grey = malloc((size_t)w * h);
    for (size_t i = 0; i < (size_t)w * h; i++) /* Pillow's L: (R*299 + G*587 + B*114) / 1000 */
        grey[i] = (uint8_t)((rgb[3 * i] * 19595 + rgb[3 * i + 1] * 38470 +
                             rgb[3 * i + 2] * 7471 + 0x8000) >> 16);
    struct { const char *name, *ext; uint8_t *bytes; size_t n; } f[5];
    f[0].ext = "jpg", f[1].ext = f[2].ext = "png", f[3].ext = f[4].ext = "webp";
    f[0].name = "JPEG q75 4:2:0";
    f[0].n = c->n;
    f[0].bytes = malloc(c->n);
    memcpy(f[0].bytes, c->jpg, c->n);
    f[1].name = "PNG RGB 8-bit";
    f[1].bytes = tu_encode_png(rgb, w, h, 3, &f[1].n);
    f[2].name = "PNG greyscale 8-bit";
    f[2].bytes = tu_encode_png(grey, w, h, 1, &f[2].n);
    f[3].name = "WebP lossy q75";
    f[3].n = WebPEncodeRGB(rgb, w, h, w * 3, 75.0f, &f[3].bytes);
    f[4].name = "WebP lossless";
    f[4].n = WebPEncodeLosslessRGB(rgb, w, h, w * 3, &f[4].bytes);
    for (int i = 0; write_dir && i < 5; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/bench-%d.%s", write_dir, i, f[i].ext);
        if (!f[i].bytes || !tu_write_file(path, f[i].bytes, f[i].n)) exit(1);
        printf("wrote %s (%s, %zu bytes)\n", path, f[i].name, f[i].n);
    }
    image_preprocess_config_default(&c->cfg, 288);
    c->out = malloc(3 * (size_t)288 * 288 * sizeof(float));
    if (write_dir) goto done;
    printf("\nThe same %dx%d picture per format, decoded by image_decode_for, preprocessed at 288 "
           "(HF-exact); one thread, best of %d rounds\n", w, h, BENCH_ROUNDS);
    printf("| format | bytes | decode ms/image (CPU) | decode + preprocess ms/image (CPU) | "
           "images/s per core (decode + preprocess) |\n|---|---:|---:|---:|---:|\n");
    for (int i = 0; i < 5; i++) {
        if (!f[i].bytes || !f[i].n) {
            fprintf(stderr, "bench: encoding %s failed\n", f[i].name);
            exit(1);
        }
        c->jpg = f[i].bytes;
        c->n = (unsigned long)f[i].n;
        double wall, cpu_dec, cpu_pipe;
        time_op(c, OP_DECODE, &wall, &cpu_dec);
        time_op(c, OP_PIPELINE, &wall, &cpu_pipe);
        printf("| %s | %zu | %.2f | %.2f | %.1f |\n", f[i].name, f[i].n, cpu_dec * 1e3,
               cpu_pipe * 1e3, 1.0 / cpu_pipe);
        fflush(stdout);
    }
done:
    free(c->out);
    free(f[0].bytes);
    free(f[1].bytes);
    free(f[2].bytes);
    WebPFree(f[3].bytes);
    WebPFree(f[4].bytes);
    free(grey);
}

static const char usage_text[] =
    "usage: bench_image [--write-jpeg PATH | --write-formats DIR]\n"
    "  (no option)            the two tables: JPEG decode + preprocessing, formats\n"
    "  --write-jpeg PATH      the first table's JPEG, for gen_image_fixtures.py --bench\n"
    "  --write-formats DIR    the second table's files (DIR/bench-?.*)\n";

int main(int argc, char **argv) {
    if (argc != 1 && !(argc == 3 && (!strcmp(argv[1], "--write-jpeg") ||
                                     !strcmp(argv[1], "--write-formats"))))
        return tu_usage(argv[1], usage_text);
    const int w = 1000, h = 800;
    uint8_t *rgb = malloc((size_t)w * h * 3);
    tu_synth_picture(rgb, w, h, 11);
    bench_ctx c;
    memset(&c, 0, sizeof c);
    c.jpg = tu_encode_jpeg(rgb, w, h, 3, JCS_RGB, JCS_YCbCr, 75, 0, &c.n);
    if (argc == 3 && !strcmp(argv[1], "--write-jpeg")) {
        /* The same bytes for scripts/gen_image_fixtures.py --bench PATH. */
        if (!tu_write_file(argv[2], c.jpg, c.n)) return 1;
        printf("wrote %s (%lu bytes)\n", argv[2], c.n);
        return 0;
    }
    if (argc == 3 && !strcmp(argv[1], "--write-formats")) {
        /* The second table's files, for scripts/gen_image_fixtures.py --bench PATH each. */
        bench_formats(rgb, w, h, &c, argv[2]);
        free((void *)c.jpg);
        free(rgb);
        return 0;
    }
    image_u8 decoded;
    if (image_decode_jpeg(&decoded, c.jpg, c.n, "bench", 0, 0) != BT_OK) {
        fprintf(stderr, "bench: %s\n", bt_error_message());
        return 1;
    }
    c.decoded = &decoded;
    printf("JPEG %dx%d, quality 75, 4:2:0, %lu bytes; one thread, best of %d rounds\n", w, h,
           c.n, BENCH_ROUNDS);
    printf("| shortest edge | step | wall ms/image | CPU ms/image | images/s per core |\n"
           "|---|---|---:|---:|---:|\n");
    const int sizes[2] = {288, 294};
    for (int i = 0; i < 2; i++) {
        image_preprocess_config_default(&c.cfg, sizes[i]);
        c.cfg_dct = c.cfg;
        c.cfg_dct.use_dct_scaling = 1;
        c.out = malloc(3 * (size_t)c.cfg.crop_size * c.cfg.crop_size * sizeof(float));
        image_u8 probe;
        image_decode_jpeg_for(&probe, c.jpg, c.n, "bench", &c.cfg_dct);
        int tw, th;
        image_resize_target(&tw, &th, w, h, &c.cfg);
        char dct_name[64], pipe_name[96];
        snprintf(dct_name, sizeof dct_name, "decode (DCT %d/8 -> %dx%d) only", probe.scale_num,
                 probe.w, probe.h);
        snprintf(pipe_name, sizeof pipe_name, "decode (DCT %d/8) + preprocess", probe.scale_num);
        image_u8_free(&probe);
        struct { const char *name; bench_op op; } rows[] = {
            {"decode only (full size)", OP_DECODE},
            {dct_name, OP_DECODE_DCT},
            {"decode + preprocess (HF-exact)", OP_PIPELINE},
            {pipe_name, OP_PIPELINE_DCT},
            {"preprocess only (resize + crop + normalize)", OP_PREPROCESS},
        };
        for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
            if (i == 1 && (rows[r].op == OP_DECODE || rows[r].op == OP_DECODE_DCT)) continue;
            double wall, cpu;
            time_op(&c, rows[r].op, &wall, &cpu);
            printf("| %d (resize to %dx%d) | %s | %.2f | %.2f | %.1f |\n", sizes[i], tw, th,
                   rows[r].name, wall * 1e3, cpu * 1e3, 1.0 / cpu);
            fflush(stdout);
        }
        free(c.out);
    }
    image_u8_free(&decoded);
    const unsigned char *jpg = c.jpg;
    bench_formats(rgb, w, h, &c, NULL);
    free((void *)jpg);
    free(rgb);
    return 0;
}
