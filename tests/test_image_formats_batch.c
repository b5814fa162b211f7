/* test_image_formats_batch.c: a dataset of PNG, WebP and JPEG files gives the training batches
 * of the same pictures stored as JPEG, through the real loader (`bt-data batch`, run by path:
 * argv[1]).
 *
 * Six JPEG fixtures (landscape, portrait, tiny, small, gray, cmyk) are decoded by bt; their
 * RGB pixels are written losslessly as PNG (RGB, and greyscale for the gray one: bt replicates
 * grey to RGB as Pillow does), as lossless WebP, or kept as the original JPEG; one PNG is
 * named .jpg (the format comes from the bytes). Manifest a.jsonl lists the original JPEGs,
 * b.jsonl the mixed files, same ids and captions. `bt-data batch` (batch size 4, shuffle seed
 * 3, the base model's preprocessing at 288) must give bitwise equal input_ids and pixel_values
 * for batches 0 and 1 of both, since lossless files hold exactly the JPEG-decoded pixels and
 * everything after the decode is shared. A training run on the mixed manifest therefore sees the reference's pixels too
 * (bt-train reads through the same loader). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <webp/encode.h>

#include "data/image.h"
#include "safetensors.h"
#include "test_fixture.h"
#include "test_util.h"

static const char *exe;
static char dir[1024], model[1200];
static char out_text[1 << 14], err_text[1 << 14];

static int run(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int rc = tu_vrun_captured(exe, "/dev/null", dir, out_text, sizeof out_text, err_text,
                              sizeof err_text, fmt, ap);
    va_end(ap);
    return rc;
}

static void write_image(const char *name, const uint8_t *bytes, size_t n) {
    char p[1200];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    tu_setup_file(p, bytes, n);
}

/* Writes the two datasets; returns 0 when an input could not be made. */
static int make_datasets(void) {
    static const char *jpegs[] = {"landscape", "portrait", "tiny", "small", "gray", "cmyk"};
    /* b.jsonl: how picture k is stored. */
    static const char *mixed[] = {"b0.png", "b1.webp", "b2.jpg", "b3_is_a_png.jpg", "b4.png",
                                  "b5.webp"};
    char a_lines[4096] = "", b_lines[4096] = "";
    for (int k = 0; k < 6; k++) {
        char rel[256];
        snprintf(rel, sizeof rel, "images/%s.jpg", jpegs[k]);
        size_t n = 0;
        uint8_t *jpg = tu_read_file(tu_fixture_path(rel), &n);
        image_u8 im;
        if (!jpg || image_decode_jpeg(&im, jpg, n, rel, 0, 0) != BT_OK) {
            tu_check(0, "decode fixture %s", rel);
            free(jpg);
            return 0;
        }
        char a_name[64];
        snprintf(a_name, sizeof a_name, "a%d.jpg", k);
        write_image(a_name, jpg, n);
        uint8_t *enc = NULL;
        size_t en = 0;
        int webp = !strcmp(strrchr(mixed[k], '.'), ".webp");
        if (k == 2) { /* kept as the original JPEG */
            write_image(mixed[k], jpg, n);
        } else if (webp) {
            en = WebPEncodeLosslessRGB(im.data, im.w, im.h, im.w * 3, &enc);
        } else if (k == 4) { /* greyscale PNG from the replicated channel */
            uint8_t *g = malloc((size_t)im.w * im.h);
            for (size_t i = 0; i < (size_t)im.w * im.h; i++) g[i] = im.data[3 * i];
            enc = tu_encode_png(g, im.w, im.h, 1, &en);
            free(g);
        } else {
            enc = tu_encode_png(im.data, im.w, im.h, 3, &en);
        }
        if (k != 2 && !tu_check(enc && en, "encode %s", mixed[k])) return 0;
        if (enc) {
            write_image(mixed[k], enc, en);
            if (webp) WebPFree(enc);
            else free(enc);
        }
        char line[256];
        snprintf(line, sizeof line, "{\"id\": \"r%d\", \"image\": \"%s\", \"caption\": \"picture "
                 "number %d\"}\n", k, a_name, k);
        strcat(a_lines, line);
        snprintf(line, sizeof line, "{\"id\": \"r%d\", \"image\": \"%s\", \"caption\": \"picture "
                 "number %d\"}\n", k, mixed[k], k);
        strcat(b_lines, line);
        image_u8_free(&im);
        free(jpg);
    }
    char p[1200];
    snprintf(p, sizeof p, "%s/a.jsonl", dir);
    tu_setup_text(p, a_lines);
    snprintf(p, sizeof p, "%s/b.jsonl", dir);
    tu_setup_text(p, b_lines);
    return 1;
}

/* Bitwise equality of tensor `name` in two safetensors files. */
static int same_tensor(const safetensors_file *x, const safetensors_file *y, const char *name) {
    const safetensors_tensor *a = safetensors_find(x, name), *b = safetensors_find(y, name);
    return a && b && a->dtype == b->dtype && a->numel == b->numel &&
           a->end - a->begin == b->end - b->begin && !memcmp(a->data, b->data, a->end - a->begin);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_image_formats_batch PATH/TO/bt-data\n");
        return 2;
    }
    exe = argv[1];
    snprintf(dir, sizeof dir, "%s", tu_tmpdir());
    /* A model directory: the synthetic tokenizer, the base model's preprocessing (288: the
     * fixtures are upscaled, so a change of one level in one source pixel reaches the output;
     * at the synthetic config's 64 px the downscale could average it away). */
    const char *configs = getenv("BT_CONFIGS");
    snprintf(model, sizeof model, "%s/model", dir);
    if (!tu_check(mkdir(model, 0755) == 0, "mkdir %s", model)) return tu_finish();
    static const char *files[] = {"tokenizer.json", "vocab.json", "merges.txt"};
    for (int i = 0; i < 4; i++) {
        char src[1200], dst[1400];
        if (i < 3)
            snprintf(src, sizeof src, "%s/synthetic/%s", configs ? configs : "configs", files[i]);
        else
            snprintf(src, sizeof src, "%s",
                     tu_fixture_path("images/preprocessor_config_base.json"));
        snprintf(dst, sizeof dst, "%s/%s", model, i < 3 ? files[i] : "preprocessor_config.json");
        size_t n = 0;
        uint8_t *b = tu_read_file(src, &n);
        if (!tu_check(b != NULL, "read %s", src)) return tu_finish();
        tu_setup_file(dst, b, n);
        free(b);
    }
    if (!make_datasets()) return tu_finish();
    for (int k = 0; k < 2; k++) {
        safetensors_file f[2];
        int open[2] = {0, 0};
        for (int d = 0; d < 2; d++) {
            const char *m = d ? "b" : "a";
            int rc = run("batch --data '%s/%s.jsonl' --model '%s' --batch-size 4 --index %d "
                         "--seed 3 --max-length 16 --output '%s/%s%d.safetensors'",
                         dir, m, model, k, dir, m, k);
            if (!tu_check(rc == 0, "bt-data batch --data %s.jsonl --index %d: exit 0 (%d) %s", m,
                          k, rc, err_text))
                continue;
            char p[1200];
            snprintf(p, sizeof p, "%s/%s%d.safetensors", dir, m, k);
            open[d] = safetensors_open(&f[d], p) == BT_OK;
            tu_check(open[d], "open %s", p);
        }
        if (open[0] && open[1]) {
            tu_check(same_tensor(&f[0], &f[1], "pixel_values"),
                     "batch %d: pixel_values of the PNG/WebP/JPEG dataset bitwise equal the "
                     "all-JPEG dataset's", k);
            tu_check(same_tensor(&f[0], &f[1], "input_ids"), "batch %d: same input_ids", k);
        }
        for (int d = 0; d < 2; d++)
            if (open[d]) safetensors_close(&f[d]);
    }
    return tu_finish();
}
