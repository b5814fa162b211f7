/* test_image.c: JPEG decode + BridgeTower image preprocessing against an independent PIL/numpy
 * reference (tests/fixtures/images, made by scripts/gen_image_fixtures.py).
 *
 * Per fixture image (landscape, portrait, tiny, small, gray 'L', CMYK, progressive, EXIF,
 * panorama) and per shortest edge (32 tiny model, 40 and 45 = zero-padding crops with even and
 * odd differences, 288 base, 294 large):
 *   - decode: bit-exact with Image.open(f).convert("RGB"). Both sides run the same
 *     libjpeg-turbo with the same parameters, so tolerance 0.
 *   - resize target (HF get_resize_output_image_size) = the shape PIL produced, and the
 *     resized uint8 image bit-exact with Image.resize(BICUBIC) (tolerance 0: same integer
 *     arithmetic).
 *   - full pipeline fp32 pixel_values: tolerance 0 (atol = rtol = 0). Rescale and normalize
 *     are the same IEEE float64/float32 operations numpy performs, so any difference is a bug.
 *     For 288/294 the fixture holds an FNV-1a hash of the full output plus every 6th
 *     row/column (to print a readable worst element).
 *   - bf16 variant = round-to-nearest-even of the reference fp32 values, bitwise.
 *   - DCT-scaled decode: the chosen scale is the smallest M/8 not below the resize target,
 *     the output shape is unchanged, and the pixel difference to the reference is bounded
 *     (bounds and their justification at DCT_* below). Where no downscale is possible
 *     (M = 8) the output must stay bit-exact.
 * Plus: config from preprocessor_config.json (base, large, the tiny model's, variants), the
 * model.md example sizes, grayscale replicated, EXIF orientation ignored, YCCK vs CMYK
 * encoding of the same picture, and the DCT-scaling difference on a 1000x800 photo-like
 * picture at 288 (the loader's real case).
 * Malformed input is tested in test_image_bad.c. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/image.h"
#include "safetensors.h"
#include "test_fixture.h"
#include "test_util.h"

/* DCT-scaling bounds, in 8-bit levels (|difference of normalized values| * std * 255, i.e.
 * the difference of the underlying resized pixels). Decoding at M/8 replaces the first part
 * of the downscale (Pillow's antialiased bicubic over the full-resolution pixels) by the
 * IDCT's own low-pass; both are low-pass filters of the same picture, so differences are
 * small on smooth content and reach tens of levels only next to sharp edges and in noise
 * texture (the fixtures have both, on purpose).
 * Measured (libjpeg-turbo 2.1.5): fixtures at s = 32/40/45 (scales 2/8..6/8): worst mean
 * 2.93 levels (exif 64x48 at 6/8 -> 32x32), worst max 35; synthetic 1000x800 at 288/294
 * (3/8): mean 1.02, max 32. Bounds: mean 4, max 48 (~1.4x headroom). They are tight enough
 * to catch a geometry error: mapping the whole rounded-up scaled image instead of the
 * picture's exact extent (orig*M/8, see image.c) measured mean 6.4 / max 82 on the same
 * fixtures. */
#define DCT_MEAN_BOUND 4.0 /* mean |diff| over an image, levels */
#define DCT_MAX_BOUND 48.0 /* worst single element, levels */

static safetensors_file g_exp;
static int g_exp_open;

static const safetensors_tensor *need_tensor(const char *name, bt_dtype dt, int ndim,
                                             const int64_t *shape) {
    const safetensors_tensor *t = g_exp_open ? safetensors_find(&g_exp, name) : NULL;
    if (!t) {
        tu_check(0, "fixture tensor %s present", name);
        return NULL;
    }
    int ok = t->dtype == dt && t->ndim == ndim;
    for (int i = 0; ok && i < ndim; i++)
        if (shape[i] >= 0 && t->shape[i] != shape[i]) ok = 0;
    if (!ok) {
        tu_check(0, "fixture tensor %s has the expected dtype/shape", name);
        return NULL;
    }
    return t;
}

static uint64_t fnv1a64(const void *p, size_t n) {
    const uint8_t *b = p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static size_t count_u8_diff(const uint8_t *a, const uint8_t *b, size_t n, int *maxd) {
    size_t cnt = 0;
    *maxd = 0;
    for (size_t i = 0; i < n; i++) {
        int d = abs((int)a[i] - (int)b[i]);
        if (d) cnt++;
        if (d > *maxd) *maxd = d;
    }
    return cnt;
}

/* Difference of two (3, c, c) normalized outputs, in 8-bit levels. */
static void level_diff(const float *a, const float *b, int c, const image_preprocess_config *cfg,
                       double *mean, double *maxd) {
    size_t plane = (size_t)c * (size_t)c;
    double sum = 0.0, mx = 0.0;
    for (int ch = 0; ch < 3; ch++) {
        for (size_t i = 0; i < plane; i++) {
            double d = fabs((double)a[ch * plane + i] - (double)b[ch * plane + i]) *
                       (double)cfg->std[ch] * 255.0;
            sum += d;
            if (d > mx) mx = d;
        }
    }
    *mean = sum / (3.0 * (double)plane);
    *maxd = mx;
}

static int ceil_div8(int v, int m) { return (v * m + 7) / 8; }

/* The M with ceil(w*M/8) == img->w and ceil(h*M/8) == img->h, or 0. */
static int dct_scale_of(const image_u8 *img) {
    for (int m = 1; m <= 8; m++)
        if (ceil_div8(img->orig_w, m) == img->w && ceil_div8(img->orig_h, m) == img->h) return m;
    return 0;
}

static double g_dct_worst_mean, g_dct_worst_max;

static void check_dct(const char *label, const uint8_t *bytes, size_t n, const char *path,
                      const image_preprocess_config *base_cfg, const float *reference) {
    image_preprocess_config cfg = *base_cfg;
    cfg.use_dct_scaling = 1;
    image_u8 sc;
    bt_status st = image_decode_jpeg_for(&sc, bytes, n, path, &cfg);
    if (!tu_check(st == BT_OK, "%s dct decode: %s", label, st ? bt_error_message() : "ok")) return;
    int tw, th;
    image_resize_target(&tw, &th, sc.orig_w, sc.orig_h, &cfg);
    int m = dct_scale_of(&sc);
    tu_check(m == sc.scale_num, "%s: scale_num %d matches the decoded size (%d/8)", label,
             sc.scale_num, m);
    /* Smallest M whose output is not below the target; M = 8 also when even 8/8 is below
     * it (an upscale). */
    int minimal = m >= 1 && (m == 8 || (sc.w >= tw && sc.h >= th)) &&
                  (m == 1 || ceil_div8(sc.orig_w, m - 1) < tw || ceil_div8(sc.orig_h, m - 1) < th);
    tu_check(minimal, "%s dct scale %d/8: decoded %dx%d from %dx%d for target %dx%d (smallest "
             "scale not below the target)", label, m, sc.w, sc.h, sc.orig_w, sc.orig_h, tw, th);
    const int c = cfg.crop_size;
    size_t numel = 3 * (size_t)c * (size_t)c;
    float *out = malloc(numel * sizeof(float));
    tu_fill_sentinel_f32(out, numel);
    image_preprocess(out, &sc, &cfg);
    if (m == 8) {
        tu_check_close_f32(label, out, reference, numel, 0.0, 0.0);
    } else {
        double mean, mx;
        level_diff(out, reference, c, &cfg, &mean, &mx);
        if (mean > g_dct_worst_mean) g_dct_worst_mean = mean;
        if (mx > g_dct_worst_max) g_dct_worst_max = mx;
        tu_check(mean <= DCT_MEAN_BOUND && mx <= DCT_MAX_BOUND,
                 "%s dct %d/8 vs reference: mean |diff| %.3f levels (bound %.1f), max %.2f "
                 "(bound %.1f)", label, m, mean, DCT_MEAN_BOUND, mx, DCT_MAX_BOUND);
    }
    free(out);
    image_u8_free(&sc);
}

static void test_fixture_image(const cJSON *entry) {
    const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(entry, "name"));
    const char *file = cJSON_GetStringValue(cJSON_GetObjectItem(entry, "file"));
    const char *mode = cJSON_GetStringValue(cJSON_GetObjectItem(entry, "mode"));
    int w = cJSON_GetObjectItem(entry, "width")->valueint;
    int h = cJSON_GetObjectItem(entry, "height")->valueint;
    const cJSON *sizes = cJSON_GetObjectItem(entry, "sizes");
    const cJSON *hashed = cJSON_GetObjectItem(entry, "hashed_sizes");
    char path[1024], tname[256];
    snprintf(path, sizeof path, "images/%s", file);
    snprintf(path, sizeof path, "%s", tu_fixture_path(path));

    uint8_t *bytes = NULL;
    size_t n = 0;
    bt_status st = image_read_file(&bytes, &n, path);
    if (!tu_check(st == BT_OK, "%s: read: %s", name, st ? bt_error_message() : "ok")) return;

    /* 1. decode */
    image_u8 img;
    st = image_decode_jpeg(&img, bytes, n, path, 0, 0);
    if (!tu_check(st == BT_OK, "%s (%s): decode: %s", name, mode, st ? bt_error_message() : "ok")) {
        bt_free(bytes);
        return;
    }
    tu_check(img.w == w && img.h == h && img.orig_w == w && img.orig_h == h,
             "%s: decoded size %dx%d (orig %dx%d), file says %dx%d", name, img.w, img.h,
             img.orig_w, img.orig_h, w, h);
    snprintf(tname, sizeof tname, "%s.decoded", name);
    const safetensors_tensor *t = need_tensor(tname, BT_DTYPE_U8, 3, (int64_t[]){h, w, 3});
    if (t && img.w == w && img.h == h) {
        int maxd;
        size_t nd = count_u8_diff(img.data, t->data, t->numel, &maxd);
        tu_check(nd == 0, "%s: decode (%s) bit-exact with PIL: %zu of %zu bytes differ (max %d)",
                 name, mode, nd, t->numel, maxd);
    }

    /* 2-4. every shortest edge the fixture has */
    for (int pass = 0; pass < 2; pass++) {
        const cJSON *list = pass == 0 ? sizes : hashed, *e;
        cJSON_ArrayForEach(e, list) {
            int s = e->valueint;
            image_preprocess_config cfg;
            image_preprocess_config_default(&cfg, s);
            int tw, th;
            image_resize_target(&tw, &th, w, h, &cfg);
            snprintf(tname, sizeof tname, "%s.resized.%d", name, s);
            t = need_tensor(tname, BT_DTYPE_U8, 3, (int64_t[]){-1, -1, 3});
            if (t) {
                int ok = t->shape[0] == th && t->shape[1] == tw;
                tu_check(ok, "%s s=%d: resize target %dx%d, PIL resized to %lldx%lld", name, s, tw,
                         th, (long long)t->shape[1], (long long)t->shape[0]);
                if (ok) {
                    image_u8 r;
                    image_resize_bicubic(&r, &img, tw, th);
                    int maxd;
                    size_t nd = count_u8_diff(r.data, t->data, t->numel, &maxd);
                    tu_check(nd == 0, "%s s=%d: bicubic %dx%d -> %dx%d bit-exact with PIL: %zu of "
                             "%zu bytes differ (max %d)",
                             name, s, w, h, tw, th, nd, t->numel, maxd);
                    image_u8_free(&r);
                }
            }
            const int c = cfg.crop_size;
            size_t numel = 3 * (size_t)c * (size_t)c;
            float *out = malloc(numel * sizeof(float));
            float *want = malloc(numel * sizeof(float));
            tu_fill_sentinel_f32(out, numel);
            image_preprocess(out, &img, &cfg);
            int have_want = 0;
            if (pass == 0) {
                snprintf(tname, sizeof tname, "%s.pixel_values.%d", name, s);
                t = need_tensor(tname, BT_DTYPE_F32, 3, (int64_t[]){3, c, c});
                if (t && safetensors_read_f32(&g_exp, t, want, numel) == BT_OK) {
                    have_want = 1;
                    tu_check_close_f32(tname, out, want, numel, 0.0, 0.0);
                    /* bf16 straight from the pipeline = RNE rounding of the reference. */
                    bt_bf16 *ob = malloc(numel * sizeof(bt_bf16));
                    bt_bf16 *wb = malloc(numel * sizeof(bt_bf16));
                    image_preprocess_bf16(ob, &img, &cfg);
                    for (size_t i = 0; i < numel; i++) wb[i] = bt_bf16_from_f32(want[i]);
                    snprintf(tname, sizeof tname, "%s.pixel_values.%d bf16", name, s);
                    tu_check_bytes_equal(tname, ob, wb, numel * sizeof(bt_bf16));
                    free(ob);
                    free(wb);
                }
            } else {
                snprintf(tname, sizeof tname, "%s.pixel_values.%d.fnv1a64", name, s);
                t = need_tensor(tname, BT_DTYPE_U8, 1, (int64_t[]){8});
                if (t) {
                    uint64_t hw = 0;
                    for (int i = 7; i >= 0; i--) hw = (hw << 8) | t->data[i];
                    uint64_t hg = fnv1a64(out, numel * sizeof(float));
                    tu_check(hg == hw, "%s s=%d: pixel_values (3, %d, %d) fp32 bit-exact "
                             "(FNV-1a %016llx, reference %016llx)", name, s, c, c,
                             (unsigned long long)hg, (unsigned long long)hw);
                    have_want = hg == hw;
                    if (have_want) memcpy(want, out, numel * sizeof(float));
                }
                int cs = (c + 5) / 6;
                snprintf(tname, sizeof tname, "%s.pixel_values.%d.stride6", name, s);
                t = need_tensor(tname, BT_DTYPE_F32, 3, (int64_t[]){3, cs, cs});
                if (t) {
                    float *sub = malloc((size_t)3 * cs * cs * sizeof(float));
                    float *ref = malloc((size_t)3 * cs * cs * sizeof(float));
                    for (int ch = 0; ch < 3; ch++)
                        for (int y = 0; y < cs; y++)
                            for (int x = 0; x < cs; x++)
                                sub[((size_t)ch * cs + y) * cs + x] =
                                    out[((size_t)ch * c + 6 * y) * c + 6 * x];
                    if (safetensors_read_f32(&g_exp, t, ref, (size_t)3 * cs * cs) == BT_OK)
                        tu_check_close_f32(tname, sub, ref, (size_t)3 * cs * cs, 0.0, 0.0);
                    free(sub);
                    free(ref);
                }
            }
            if (have_want) {
                char label[128];
                snprintf(label, sizeof label, "%s s=%d", name, s);
                check_dct(label, bytes, n, path, &cfg, want);
            }
            free(out);
            free(want);
        }
    }

    /* Mode-specific properties. */
    if (!strcmp(mode, "L")) {
        int gray = 1;
        for (size_t i = 0; i < (size_t)img.w * img.h; i++)
            if (img.data[3 * i] != img.data[3 * i + 1] || img.data[3 * i] != img.data[3 * i + 2])
                gray = 0;
        tu_check(gray, "%s: grayscale JPEG decodes to R = G = B", name);
    }
    if (!strcmp(name, "exif"))
        tu_check(img.w == 64 && img.h == 48,
                 "exif: orientation tag 6 ignored (stored 64x48 kept, not rotated to 48x64)");
    if (!strcmp(name, "landscape")) {
        /* Explicit minimum: smallest M with ceil(333M/8) >= 100 and ceil(211M/8) >= 60 is 3. */
        image_u8 sc;
        st = image_decode_jpeg(&sc, bytes, n, path, 100, 60);
        tu_check(st == BT_OK && sc.w == ceil_div8(333, 3) && sc.h == ceil_div8(211, 3) &&
                     sc.orig_w == 333 && sc.orig_h == 211,
                 "landscape: min 100x60 decodes at 3/8 -> %dx%d (orig %dx%d)", sc.w, sc.h,
                 sc.orig_w, sc.orig_h);
        image_u8_free(&sc);
    }
    image_u8_free(&img);
    bt_free(bytes);
}

/* --- configs ------------------------------------------------------------------------------ */

static void test_configs(void) {
    static const float mean[3] = {0.48145466f, 0.4578275f, 0.40821073f};
    static const float std[3] = {0.26862954f, 0.26130258f, 0.27577711f};
    struct { const char *file; int s, longest; } cases[] = {
        {"images/preprocessor_config_base.json", 288, 479}, /* model.md 5.1: L = 479, 489 */
        {"images/preprocessor_config_large.json", 294, 489},
    };
    for (int i = 0; i < 2; i++) {
        image_preprocess_config cfg;
        char path[1024];
        snprintf(path, sizeof path, "%s", tu_fixture_path(cases[i].file));
        bt_status st = image_preprocess_config_from_json(&cfg, path);
        if (!tu_check(st == BT_OK, "config %s: %s", cases[i].file, st ? bt_error_message() : "ok"))
            continue;
        int ok = cfg.shortest_edge == cases[i].s && cfg.longest_edge == cases[i].longest &&
                 cfg.crop_size == cases[i].s && cfg.size_divisor == 32 && cfg.do_resize &&
                 cfg.do_rescale && cfg.rescale_factor == 1.0 / 255.0 && !cfg.use_dct_scaling;
        for (int c = 0; c < 3; c++) ok = ok && cfg.mean[c] == mean[c] && cfg.std[c] == std[c];
        tu_check(ok, "config %s: shortest %d longest %d crop %d divisor %d, CLIP mean/std, 1/255",
                 cases[i].file, cfg.shortest_edge, cfg.longest_edge, cfg.crop_size,
                 cfg.size_divisor);
        image_preprocess_config def;
        image_preprocess_config_default(&def, cases[i].s);
        tu_check(!memcmp(&def, &cfg, sizeof cfg), "config %s equals the built-in defaults for %d",
                 cases[i].file, cases[i].s);
    }
    /* The tiny model's directory (made by the model-fixture generator): shortest edge 32. */
    {
        image_preprocess_config cfg;
        char path[1024];
        snprintf(path, sizeof path, "%s", tu_fixture_path("tiny/preprocessor_config.json"));
        FILE *f = fopen(path, "r");
        if (f) {
            fclose(f);
            bt_status st = image_preprocess_config_from_json(&cfg, path);
            tu_check(st == BT_OK && cfg.shortest_edge == 32 && cfg.crop_size == 32,
                     "config tiny/preprocessor_config.json: shortest %d crop %d (%s)",
                     cfg.shortest_edge, cfg.crop_size, st ? bt_error_message() : "ok");
        } else {
            printf("# note: %s not present, tiny-model config not checked\n", path);
        }
    }
    /* Variants HF accepts. */
    const char *dir = tu_tmpdir();
    char path[1024];
    snprintf(path, sizeof path, "%s/variant.json", dir);
    struct { const char *json; int s, crop, resize; float mean0; } v[] = {
        {"{\"size\": 294}", 294, 294, 1, 0.48145466f},
        {"{\"size\": {\"shortest_edge\": 288}, \"crop_size\": {\"shortest_edge\": 256}}", 288,
         256, 1, 0.48145466f},
        {"{\"crop_size\": null, \"image_mean\": 0.5, \"do_resize\": false}", 288, 288, 0, 0.5f},
        {"{\"size\": {\"shortest_edge\": 32, \"longest_edge\": 1333}, \"unknown\": [1]}", 32,
         32, 1, 0.48145466f},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        tu_setup_text(path, v[i].json);
        image_preprocess_config cfg;
        bt_status st = image_preprocess_config_from_json(&cfg, path);
        tu_check(st == BT_OK && cfg.shortest_edge == v[i].s && cfg.crop_size == v[i].crop &&
                     cfg.do_resize == v[i].resize && cfg.mean[0] == v[i].mean0,
                 "config variant %s -> shortest %d crop %d resize %d (%s)", v[i].json,
                 cfg.shortest_edge, cfg.crop_size, cfg.do_resize, st ? bt_error_message() : "ok");
    }
}

static void test_targets(void) {
    image_preprocess_config cfg;
    image_preprocess_config_default(&cfg, 288);
    int w, h;
    image_resize_target(&w, &h, 640, 480, &cfg); /* model.md 5.1 example: 640x480 -> 384x288 */
    tu_check(w == 384 && h == 288, "640x480 at 288 -> %dx%d (model.md: 384x288)", w, h);
    image_preprocess_config_default(&cfg, 294);
    image_resize_target(&w, &h, 640, 480, &cfg); /* short side 294 floors to 288 */
    tu_check(h == 288 && w == 384, "640x480 at 294 -> %dx%d (short side floors to 288)", w, h);
}

/* --- pictures encoded here with libjpeg --------------------------------------------------- */

/* The same CMYK picture stored as CMYK and as YCCK (no chroma subsampling) must decode to
 * nearly the same RGB. YCCK adds a YCbCr round trip of C, M, Y in 8-bit integers (+-1 level
 * from each rounding), quality 100 still quantizes DCT coefficients to integers (+-1 to 2
 * levels per sample), and RGB = nk - C*nk/255 passes each error through with a factor <= 1:
 * bound 4 levels per element. */
static void test_ycck(void) {
    const int w = 64, h = 40;
    uint8_t *cmyk = malloc((size_t)w * h * 4);
    tu_rng r;
    tu_rng_seed(&r, 7);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            uint8_t *p = cmyk + ((size_t)y * w + x) * 4;
            p[0] = (uint8_t)(4 * x);
            p[1] = (uint8_t)(6 * y);
            p[2] = (uint8_t)(128 + 60 * sin(x / 5.0));
            p[3] = (uint8_t)(255 - 3 * x); /* stored inverted (Adobe): K = 3x */
        }
    unsigned long n1, n2;
    unsigned char *j1 = tu_encode_jpeg(cmyk, w, h, 4, JCS_CMYK, JCS_CMYK, 100, 1, &n1);
    unsigned char *j2 = tu_encode_jpeg(cmyk, w, h, 4, JCS_CMYK, JCS_YCCK, 100, 1, &n2);
    image_u8 a, b;
    bt_status s1 = image_decode_jpeg(&a, j1, n1, "cmyk-encoded", 0, 0);
    bt_status s2 = image_decode_jpeg(&b, j2, n2, "ycck-encoded", 0, 0);
    if (tu_check(s1 == BT_OK && s2 == BT_OK, "CMYK and YCCK JPEGs decode (%s)",
                 s1 || s2 ? bt_error_message() : "ok")) {
        int maxd;
        count_u8_diff(a.data, b.data, (size_t)w * h * 3, &maxd);
        tu_check(maxd <= 4,
                 "YCCK vs CMYK encoding of one picture: max RGB diff %d levels (bound 4)", maxd);
        image_u8_free(&a);
        image_u8_free(&b);
    }
    free(j1);
    free(j2);
    free(cmyk);
}

/* DCT scaling on a 1000x800 photo-like picture at 288 and 294 (the loader's real case). */
static void test_dct_large(void) {
    const int w = 1000, h = 800;
    uint8_t *rgb = malloc((size_t)w * h * 3);
    tu_synth_picture(rgb, w, h, 11);
    unsigned long n;
    unsigned char *jpg = tu_encode_jpeg(rgb, w, h, 3, JCS_RGB, JCS_YCbCr, 90, 0, &n);
    image_u8 full;
    bt_status st = image_decode_jpeg(&full, jpg, n, "synthetic-1000x800", 0, 0);
    if (tu_check(st == BT_OK, "synthetic 1000x800 decodes (%s)", st ? bt_error_message() : "ok")) {
        int sizes[2] = {288, 294};
        for (int i = 0; i < 2; i++) {
            image_preprocess_config cfg;
            image_preprocess_config_default(&cfg, sizes[i]);
            size_t numel = 3 * (size_t)cfg.crop_size * cfg.crop_size;
            float *ref = malloc(numel * sizeof(float));
            image_preprocess(ref, &full, &cfg);
            char label[64];
            snprintf(label, sizeof label, "synthetic 1000x800 s=%d", sizes[i]);
            check_dct(label, jpg, n, "synthetic-1000x800", &cfg, ref);
            free(ref);
        }
        image_u8_free(&full);
    }
    free(jpg);
    free(rgb);
}

int main(void) {
    char path[1024];
    snprintf(path, sizeof path, "%s", tu_fixture_path("images/expected.safetensors"));
    bt_status st = safetensors_open(&g_exp, path);
    g_exp_open = st == BT_OK;
    tu_check(g_exp_open, "open %s (%s)", path, st ? bt_error_message() : "ok");

    uint8_t *idx = NULL;
    size_t n = 0;
    snprintf(path, sizeof path, "%s", tu_fixture_path("images/index.json"));
    st = image_read_file(&idx, &n, path);
    cJSON *index = st == BT_OK ? cJSON_ParseWithLength((const char *)idx, n) : NULL;
    bt_free(idx);
    const cJSON *images = cJSON_GetObjectItem(index, "images");
    tu_check(cJSON_GetArraySize(images) >= 9, "index %s lists %d images", path,
             cJSON_GetArraySize(images));
    const cJSON *e;
    cJSON_ArrayForEach(e, images) test_fixture_image(e);
    cJSON_Delete(index);
    printf("# dct scaling on fixtures: worst mean |diff| %.3f levels, worst max %.2f levels\n",
           g_dct_worst_mean, g_dct_worst_max);

    test_configs();
    test_targets();
    test_ycck();
    g_dct_worst_mean = g_dct_worst_max = 0;
    test_dct_large();
    printf("# dct scaling on 1000x800: worst mean |diff| %.3f levels, worst max %.2f levels\n",
           g_dct_worst_mean, g_dct_worst_max);
    if (g_exp_open) safetensors_close(&g_exp);
    return tu_finish();
}
