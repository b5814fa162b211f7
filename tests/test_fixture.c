/* test_fixture.c: see test_fixture.h. */
#include "test_fixture.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <png.h>

#include "test_util.h"

_Static_assert(sizeof(float) == 4 && sizeof(int32_t) == 4, "fixture_read: 4-byte elements");

/* The fixture's tensor `name` when it exists with n elements, else NULL after a failed case. */
static const safetensors_tensor *fixture_find(const safetensors_file *f, const char *name,
                                              size_t n) {
    const safetensors_tensor *t = safetensors_find(f, name);
    if (!t) {
        tu_check(0, "fixture %s has tensor %s", f->path, name);
        return NULL;
    }
    if (t->numel != n) {
        tu_check(0, "fixture tensor %s: %zu elements, model has %zu", name, t->numel, n);
        return NULL;
    }
    return t;
}

/* Tensor `name` of f as n 4-byte elements: float (as_i32 = 0) or int32 (as_i32 = 1). */
static void *fixture_read(const safetensors_file *f, const char *name, size_t n, int as_i32) {
    const safetensors_tensor *t = fixture_find(f, name, n);
    if (!t) return NULL;
    void *buf = malloc(n * 4 + 1);
    bt_status st = as_i32 ? safetensors_read_i32(f, t, buf, n) : safetensors_read_f32(f, t, buf, n);
    if (st != BT_OK) {
        tu_check(0, "read %s: %s", name, bt_error_message());
        free(buf);
        return NULL;
    }
    return buf;
}

float *tu_fixture_f32(const safetensors_file *f, const char *name, size_t n) {
    return fixture_read(f, name, n, 0);
}

int32_t *tu_fixture_i32(const safetensors_file *f, const char *name, size_t n) {
    return fixture_read(f, name, n, 1);
}

void tu_synth_picture(uint8_t *rgb, int w, int h, uint64_t seed) {
    tu_rng r;
    tu_rng_seed(&r, seed);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            double v[3] = {128 + 100 * sin(x / 37.0 + y / 53.0), 40 + 180.0 * x / w * y / h,
                           128 + 90 * cos(hypot(x - w / 3.0, y - h / 2.0) / 23.0)};
            if ((x / 97 + y / 61) % 5 == 0) v[0] = 250, v[1] = 30; /* hard-edged blocks */
            for (int c = 0; c < 3; c++) {
                double q = v[c] + 8.0 * tu_rng_normal(&r);
                rgb[((size_t)y * w + x) * 3 + c] = (uint8_t)(q < 0 ? 0 : q > 255 ? 255 : q + 0.5);
            }
        }
}

unsigned char *tu_encode_jpeg(const uint8_t *pix, int w, int h, int comps, J_COLOR_SPACE in_cs,
                              J_COLOR_SPACE jpeg_cs, int quality, int full_chroma,
                              unsigned long *size) {
    struct jpeg_compress_struct ci;
    struct jpeg_error_mgr err;
    unsigned char *buf = NULL;
    *size = 0;
    ci.err = jpeg_std_error(&err);
    jpeg_create_compress(&ci);
    jpeg_mem_dest(&ci, &buf, size);
    ci.image_width = (JDIMENSION)w;
    ci.image_height = (JDIMENSION)h;
    ci.input_components = comps;
    ci.in_color_space = in_cs;
    jpeg_set_defaults(&ci);
    jpeg_set_colorspace(&ci, jpeg_cs);
    if (full_chroma)
        for (int c = 0; c < ci.num_components; c++)
            ci.comp_info[c].h_samp_factor = ci.comp_info[c].v_samp_factor = 1;
    jpeg_set_quality(&ci, quality, TRUE);
    jpeg_start_compress(&ci, TRUE);
    while (ci.next_scanline < ci.image_height) {
        JSAMPROW row = (JSAMPROW)(pix + (size_t)ci.next_scanline * (size_t)w * (size_t)comps);
        jpeg_write_scanlines(&ci, &row, 1);
    }
    jpeg_finish_compress(&ci);
    jpeg_destroy_compress(&ci);
    return buf;
}

uint8_t *tu_encode_png(const uint8_t *pix, int w, int h, int channels, size_t *size) {
    BT_ASSERT(channels == 1 || channels == 3);
    png_image im;
    memset(&im, 0, sizeof im);
    im.version = PNG_IMAGE_VERSION;
    im.width = (png_uint_32)w;
    im.height = (png_uint_32)h;
    im.format = channels == 3 ? PNG_FORMAT_RGB : PNG_FORMAT_GRAY;
    png_alloc_size_t n = 0;
    uint8_t *b = NULL;
    if (png_image_write_to_memory(&im, NULL, &n, 0, pix, 0, NULL)) {
        b = malloc(n);
        if (b && !png_image_write_to_memory(&im, b, &n, 0, pix, 0, NULL)) {
            free(b);
            b = NULL;
        }
    }
    if (!b) {
        fprintf(stderr, "tu_encode_png: %s\n", im.message);
        exit(1);
    }
    *size = n;
    return b;
}
