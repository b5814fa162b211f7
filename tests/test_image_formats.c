/* test_image_formats.c: PNG and WebP decoding against Pillow (tests/fixtures/images/formats,
 * made by scripts/gen_format_fixtures.py, which says what each file is).
 *
 * Per fixture (44 files: PNG greyscale 1/2/4/8/16-bit, grey+alpha 8/16, RGB 8/16, RGBA 8/16,
 * palette 1/2/4/8-bit with and without tRNS and with a PLTE shorter than the indices, tRNS
 * colours, Adam7, every filter type, split IDAT, ancillary and unknown chunks, two APNGs;
 * WebP lossy, lossy+alpha, lossless, lossless+alpha, VP8X with ICC/EXIF, three animations,
 * one whose frame 1 is a rectangle inside the canvas, black around it as in Pillow):
 *   - image_decode_for, given only the bytes (the format comes from the content; the name
 *     passed for messages is deliberately wrong-extension "image.bin"), decodes to the size
 *     Pillow reports and to exactly Pillow's Image.open(f).convert("RGB") bytes: tolerance 0.
 *     Both sides compute integers from the same stored samples (PNG) or run the same libwebp
 *     calls (WebP), so any difference is a bug.
 *   - image_load_file on the file gives the same bytes.
 *   - For the files with <name>.pixel_values.32 (two PNGs, a WebP, an Adam7 PNG, 97x61 PNG
 *     and WebP): the whole processor path (resize to 32 on the short side, crop 32, rescale,
 *     normalize) equals the PIL/numpy reference bit for bit, fp32 (tolerance 0, as
 *     test_image.c argues for JPEG: the same integer resize and IEEE operations), also with
 *     the loader's use_dct_scaling config, which must not change PNG / WebP decoding.
 * Malformed PNG / WebP input is tested in test_image_formats_bad.c. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/image.h"
#include "safetensors.h"
#include "test_util.h"

static safetensors_file g_exp;

static void test_one(const cJSON *entry) {
    const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(entry, "name"));
    const char *file = cJSON_GetStringValue(cJSON_GetObjectItem(entry, "file"));
    const char *mode = cJSON_GetStringValue(cJSON_GetObjectItem(entry, "mode"));
    const cJSON *jw = cJSON_GetObjectItem(entry, "width");
    const cJSON *jh = cJSON_GetObjectItem(entry, "height");
    if (!tu_check(name && file && mode && cJSON_IsNumber(jw) && cJSON_IsNumber(jh),
                  "index entry well-formed"))
        return;
    const int w = jw->valueint, h = jh->valueint;
    char rel[512], path[1024], tname[256];
    snprintf(rel, sizeof rel, "images/formats/%s", file);
    snprintf(path, sizeof path, "%s", tu_fixture_path(rel));
    size_t n = 0;
    uint8_t *bytes = tu_read_file(path, &n);
    if (!tu_check(bytes != NULL, "%s: read %s", name, path)) return;

    snprintf(tname, sizeof tname, "%s.decoded", name);
    const safetensors_tensor *t = safetensors_find(&g_exp, tname);
    int shape_ok = t && t->dtype == BT_DTYPE_U8 && t->ndim == 3 && t->shape[0] == h &&
                   t->shape[1] == w && t->shape[2] == 3;
    tu_check(shape_ok, "fixture tensor %s (%d, %d, 3) U8", tname, h, w);

    image_u8 img;
    bt_error_clear();
    bt_status st = image_decode_for(&img, bytes, n, "image.bin", NULL);
    if (tu_check(st == BT_OK, "%s (Pillow mode %s): decode: %s", name, mode,
                 st ? bt_error_message() : "ok")) {
        int size_ok = img.w == w && img.h == h && img.orig_w == w && img.orig_h == h &&
                      img.scale_num == 8;
        tu_check(size_ok, "%s: decoded %dx%d (orig %dx%d, scale %d/8), Pillow %dx%d", name, img.w,
                 img.h, img.orig_w, img.orig_h, img.scale_num, w, h);
        if (size_ok && shape_ok) {
            size_t nd = 0, first = 0;
            for (size_t i = 0; i < t->numel; i++)
                if (img.data[i] != ((const uint8_t *)t->data)[i] && nd++ == 0) first = i;
            if (nd)
                printf("#   first difference at pixel (%zu, %zu) channel %zu: bt %d, Pillow %d\n",
                       first / 3 / (size_t)w, first / 3 % (size_t)w, first % 3, img.data[first],
                       ((const uint8_t *)t->data)[first]);
            tu_check(nd == 0, "%s (%s): RGB equals Pillow's convert(\"RGB\"): %zu of %zu bytes "
                     "differ", name, mode, nd, t->numel);
        }

        image_u8 again;
        st = image_load_file(&again, path, NULL);
        tu_check(st == BT_OK && again.w == img.w && again.h == img.h &&
                     !memcmp(again.data, img.data, (size_t)img.w * img.h * 3),
                 "%s: image_load_file gives the same pixels", name);
        if (st == BT_OK) image_u8_free(&again);

        const cJSON *e;
        cJSON_ArrayForEach(e, cJSON_GetObjectItem(entry, "pixel_values")) {
            const int s = e->valueint;
            image_preprocess_config cfg;
            image_preprocess_config_default(&cfg, s);
            snprintf(tname, sizeof tname, "%s.pixel_values.%d", name, s);
            const safetensors_tensor *pv = safetensors_find(&g_exp, tname);
            const size_t numel = 3 * (size_t)s * (size_t)s;
            if (!tu_check(pv && pv->dtype == BT_DTYPE_F32 && pv->numel == numel,
                          "fixture tensor %s F32 (3, %d, %d)", tname, s, s))
                continue;
            float *out = malloc(numel * sizeof *out);
            tu_fill_sentinel_f32(out, numel);
            image_preprocess(out, &img, &cfg);
            char label[300];
            snprintf(label, sizeof label, "%s: decode + preprocess at %d vs the PIL/numpy "
                     "processor", name, s);
            tu_check_close_f32(label, out, (const float *)pv->data, numel, 0.0, 0.0);
            /* The loader's fast-path config (use_dct_scaling) changes nothing for PNG / WebP:
             * they decode at full size, so the output stays HF-exact. */
            cfg.use_dct_scaling = 1;
            image_u8 fast;
            st = image_decode_for(&fast, bytes, n, "image.bin", &cfg);
            if (tu_check(st == BT_OK && fast.w == w && fast.h == h && fast.scale_num == 8,
                         "%s: decode with use_dct_scaling is full size", name)) {
                tu_fill_sentinel_f32(out, numel);
                image_preprocess(out, &fast, &cfg);
                snprintf(label, sizeof label, "%s: same with use_dct_scaling", name);
                tu_check_close_f32(label, out, (const float *)pv->data, numel, 0.0, 0.0);
                image_u8_free(&fast);
            }
            free(out);
        }
        image_u8_free(&img);
    }
    free(bytes);
}

int main(void) {
    char path[1024];
    snprintf(path, sizeof path, "%s", tu_fixture_path("images/formats/expected.safetensors"));
    bt_status st = safetensors_open(&g_exp, path);
    if (!tu_check(st == BT_OK, "open %s (%s)", path, st ? bt_error_message() : "ok"))
        return tu_finish();
    snprintf(path, sizeof path, "%s", tu_fixture_path("images/formats/index.json"));
    size_t n = 0;
    uint8_t *idx = tu_read_file(path, &n);
    cJSON *index = idx ? cJSON_ParseWithLength((const char *)idx, n) : NULL;
    free(idx);
    const cJSON *images = cJSON_GetObjectItem(index, "images"), *e;
    int count = cJSON_GetArraySize(images), png = 0, webp = 0;
    cJSON_ArrayForEach(e, images) {
        const char *file = cJSON_GetStringValue(cJSON_GetObjectItem(e, "file"));
        if (file && strstr(file, ".png")) png++;
        if (file && strstr(file, ".webp")) webp++;
        test_one(e);
    }
    tu_check(png >= 30 && webp >= 8, "index %s lists %d images (%d PNG, %d WebP)", path, count,
             png, webp);
    cJSON_Delete(index);
    safetensors_close(&g_exp);
    return tu_finish();
}
