/* image.c: format detection (magic bytes) and dispatch to the decoders (JPEG here, PNG in
 * image_png.c, WebP in image_webp.c), JPEG decoding (libjpeg-turbo), the BridgeTower
 * preprocessing config, and the processor pipeline (resize -> centre crop -> rescale ->
 * normalize -> CHW). See image.h for the contract and the reference (HF BridgeTowerProcessor,
 * v4 slow PIL path).
 *
 * Decoding mirrors what Pillow does for Image.open(f).convert("RGB"), so pixels are
 * bit-identical with the same libjpeg-turbo: default decompression parameters (islow IDCT,
 * fancy upsampling, block smoothing for progressive), libjpeg's own colour-space detection
 * (JFIF / Adobe markers); 1 and 3 components are decoded to RGB by libjpeg (grayscale is
 * replicated, as Pillow's L->RGB does); 4 components are decoded as CMYK, inverted (Pillow
 * assumes Adobe's inverted CMYK for every 4-component JPEG) and converted with Pillow's
 * cmyk2rgb: nk = 255 - K; R = clip(nk - muldiv255(C, nk)), muldiv255(a, b) =
 * ((t >> 8) + t) >> 8 with t = a*b + 128.
 *
 * libjpeg reports errors through error_exit, which must not return: we longjmp back to the
 * decode function with the formatted message. Warnings (corrupt entropy data, premature end
 * of file, extraneous bytes) also longjmp: see image.h for why they are errors.
 *
 * Deliberately not here: the resampler (resample.c), batching, caching, threads (the loader
 * calls these functions from its workers; nothing here has shared mutable state). */
#if !defined(_GNU_SOURCE) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L /* fileno */
#endif
#include "data/image.h"
#include "data/image_codec.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jerror.h>
#include <jpeglib.h>

#include "fileio.h"
#include "json_util.h"
#include "mem.h"

static const float clip_mean[3] = {0.48145466f, 0.4578275f, 0.40821073f};
static const float clip_std[3] = {0.26862954f, 0.26130258f, 0.27577711f};

void image_u8_init(image_u8 *img, int w, int h) {
    BT_ASSERT(w > 0 && h > 0);
    img->w = img->orig_w = w;
    img->h = img->orig_h = h;
    img->scale_num = 8;
    img->data = bt_alloc((size_t)w * (size_t)h * 3);
}

void image_u8_free(image_u8 *img) {
    if (!img) return;
    bt_free(img->data);
    memset(img, 0, sizeof *img);
}

/* --- configuration ------------------------------------------------------------------------ */

void image_preprocess_config_default(image_preprocess_config *cfg, int shortest_edge) {
    memset(cfg, 0, sizeof *cfg);
    cfg->do_resize = 1;
    cfg->shortest_edge = shortest_edge;
    /* Python: int(1333 / 800 * shorter), evaluated left to right in double. */
    cfg->longest_edge = (int)(1333.0 / 800.0 * shortest_edge);
    cfg->size_divisor = 32;
    cfg->crop_size = shortest_edge;
    cfg->do_rescale = 1;
    cfg->rescale_factor = 1.0 / 255.0;
    for (int c = 0; c < 3; c++) {
        cfg->mean[c] = clip_mean[c];
        cfg->std[c] = clip_std[c];
    }
    cfg->use_dct_scaling = 0;
}

uint64_t image_work_bytes(const image_preprocess_config *cfg) {
    /* Decoded image (at most the resize target when DCT scaling is on; without it bt
     * decodes at full size, bounded by IMAGE_MAX_PIXELS, estimated here by the resize
     * target), the resized image, the resampler's intermediate rows, the fp32 crop. */
    uint64_t side_a = (uint64_t)(cfg->do_resize ? cfg->longest_edge : cfg->crop_size);
    uint64_t side_b = (uint64_t)(cfg->do_resize ? cfg->shortest_edge : cfg->crop_size);
    uint64_t resized = bt_mul_sat(bt_mul_sat(side_a, side_b), 3);
    uint64_t crop = bt_mul_sat(bt_mul_sat((uint64_t)cfg->crop_size, (uint64_t)cfg->crop_size), 12);
    return bt_add_sat(bt_mul_sat(resized, 3), crop);
}

/* The normalized value of uint8 level u in channel c. The operations are HF's:
 * float32(float64(u) * rescale_factor), then (x - mean) / std in float32. A validated config
 * (below) keeps every step in a float's range. */
static float normalized_level(const image_preprocess_config *cfg, int c, int u) {
    float x = cfg->do_rescale ? (float)((double)u * cfg->rescale_factor) : (float)u;
    return (x - cfg->mean[c]) / cfg->std[c];
}

bt_status image_preprocess_config_validate(const image_preprocess_config *cfg,
                                           const char *source) {
    const int max_side = 1 << 15;
    if (cfg->shortest_edge < 1 || cfg->shortest_edge > max_side)
        return bt_fail(BT_ERR_CONFIG, "%s: size.shortest_edge = %d, expected 1..%d", source,
                       cfg->shortest_edge, max_side);
    if (cfg->longest_edge < cfg->shortest_edge || cfg->longest_edge > 2 * max_side)
        return bt_fail(BT_ERR_CONFIG, "%s: longest edge %d is below shortest_edge %d", source,
                       cfg->longest_edge, cfg->shortest_edge);
    if (cfg->size_divisor < 1 || cfg->size_divisor > max_side)
        return bt_fail(BT_ERR_CONFIG, "%s: size_divisor = %d, expected 1..%d", source,
                       cfg->size_divisor, max_side);
    if (cfg->crop_size < 1 || cfg->crop_size > max_side)
        return bt_fail(BT_ERR_CONFIG, "%s: crop_size = %d, expected 1..%d", source,
                       cfg->crop_size, max_side);
    if (!(cfg->rescale_factor > 0.0) || !isfinite(cfg->rescale_factor))
        return bt_fail(BT_ERR_CONFIG, "%s: rescale_factor = %g, expected a positive number",
                       source, cfg->rescale_factor);
    for (int c = 0; c < 3; c++) {
        if (!isfinite(cfg->mean[c]))
            return bt_fail(BT_ERR_CONFIG, "%s: image_mean[%d] is not finite", source, c);
        if (!(cfg->std[c] > 0.0f) || !isfinite(cfg->std[c]))
            return bt_fail(BT_ERR_CONFIG, "%s: image_std[%d] = %g, expected a positive number",
                           source, c, (double)cfg->std[c]);
    }
    /* every level 0..255 must become a finite float (the model reads float32 pixels, as HF's
     * processor makes them); the steps are monotone in the level, so its ends decide */
    if (cfg->do_rescale && !(255.0 * cfg->rescale_factor <= FLT_MAX))
        return bt_fail(BT_ERR_CONFIG, "%s: rescale_factor = %g takes pixel value 255 past a "
                       "float's range", source, cfg->rescale_factor);
    for (int c = 0; c < 3; c++)
        for (int u = 0; u <= 255; u += 255) {
            const float v = normalized_level(cfg, c, u);
            if (!isfinite(v))
                return bt_fail(BT_ERR_CONFIG, "%s: pixel value %d normalizes to %g in channel %d "
                               "(rescale_factor %g, image_mean %g, image_std %g); expected "
                               "finite values", source, u, (double)v, c, cfg->rescale_factor,
                               (double)cfg->mean[c], (double)cfg->std[c]);
        }
    return BT_OK;
}

/* An integer-valued JSON number in [lo, hi]. */
static bt_status json_int(int *out, const cJSON *j, const char *path, const char *key, int lo,
                          int hi) {
    if (!cJSON_IsNumber(j))
        return bt_fail(BT_ERR_CONFIG, "%s: key \"%s\": expected an integer, got %s", path, key,
                       bt_json_type_name(j));
    int64_t v;
    char num[40];
    if (!bt_json_int_in(j, lo, hi, &v))
        return bt_fail(BT_ERR_CONFIG, "%s: key \"%s\": expected an integer in %d..%d, got %s",
                       path, key, lo, hi, bt_json_number_str(num, sizeof num, j->valuedouble));
    *out = (int)v;
    return BT_OK;
}

static bt_status json_bool(int *out, const cJSON *j, const char *path, const char *key) {
    if (!cJSON_IsBool(j))
        return bt_fail(BT_ERR_CONFIG, "%s: key \"%s\": expected true or false, got %s", path, key,
                       bt_json_type_name(j));
    *out = cJSON_IsTrue(j) ? 1 : 0;
    return BT_OK;
}

/* {"shortest_edge": n} (or a bare n when allow_int). */
static bt_status json_shortest_edge(int *out, const cJSON *j, const char *path, const char *key,
                                    int allow_int) {
    char sub[64];
    snprintf(sub, sizeof sub, "%s.shortest_edge", key);
    if (allow_int && cJSON_IsNumber(j)) return json_int(out, j, path, key, 1, 1 << 15);
    if (!cJSON_IsObject(j))
        return bt_fail(BT_ERR_CONFIG, "%s: key \"%s\": expected {\"shortest_edge\": n}%s, got %s",
                       path, key, allow_int ? " or an integer" : "", bt_json_type_name(j));
    const cJSON *se = cJSON_GetObjectItemCaseSensitive(j, "shortest_edge");
    if (!se)
        return bt_fail(BT_ERR_CONFIG,
                       "%s: key \"%s\" has no \"shortest_edge\" (BridgeTower resizes the shortest "
                       "edge; height/width sizes are not supported)",
                       path, key);
    return json_int(out, se, path, sub, 1, 1 << 15);
}

/* 3 numbers, or one number used for every channel (HF accepts a float). */
static bt_status json_triple(float out[3], const cJSON *j, const char *path, const char *key) {
    if (cJSON_IsNumber(j)) {
        for (int c = 0; c < 3; c++) out[c] = (float)j->valuedouble;
        return BT_OK;
    }
    if (!cJSON_IsArray(j) || cJSON_GetArraySize(j) != 3)
        return bt_fail(BT_ERR_CONFIG,
                       "%s: key \"%s\": expected an array of 3 numbers (R, G, B), "
                       "got %s%s",
                       path, key, bt_json_type_name(j),
                       cJSON_IsArray(j) ? " of another length" : "");
    for (int c = 0; c < 3; c++) {
        const cJSON *e = cJSON_GetArrayItem(j, c);
        if (!cJSON_IsNumber(e))
            return bt_fail(BT_ERR_CONFIG, "%s: key \"%s\"[%d]: expected a number, got %s", path,
                           key, c, bt_json_type_name(e));
        out[c] = (float)e->valuedouble; /* HF: np.array(mean, dtype=float32) */
    }
    return BT_OK;
}

bt_status image_preprocess_config_from_json(image_preprocess_config *cfg, const char *path) {
    uint8_t *bytes = NULL;
    size_t n = 0;
    bt_status st = image_read_file(&bytes, &n, path);
    if (st) return st;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts((const char *)bytes, n, &end, 0);
    if (!root) {
        size_t off = end ? (size_t)(end - (const char *)bytes) : 0;
        bt_free(bytes);
        return bt_fail(BT_ERR_FORMAT, "%s: not valid JSON (parse error at byte %zu of %zu)", path,
                       off, n);
    }
    st = bt_json_check(root, (const char *)bytes, end ? (size_t)(end - (const char *)bytes) : n,
                       path);
    bt_free(bytes);
    if (st) {
        cJSON_Delete(root);
        return st;
    }
    if (!cJSON_IsObject(root)) {
        st = bt_fail(BT_ERR_CONFIG, "%s: expected a JSON object at the top level, got %s", path,
                     bt_json_type_name(root));
        cJSON_Delete(root);
        return st;
    }

    image_preprocess_config c;
    image_preprocess_config_default(&c, 288);
    int crop_given = 0, unused = 0;
    const cJSON *j;
    if ((j = cJSON_GetObjectItemCaseSensitive(root, "size")) && !st)
        st = json_shortest_edge(&c.shortest_edge, j, path, "size", 1);
    if (!st && (j = cJSON_GetObjectItemCaseSensitive(root, "size_divisor")))
        st = json_int(&c.size_divisor, j, path, "size_divisor", 1, 1 << 15);
    if (!st && (j = cJSON_GetObjectItemCaseSensitive(root, "resample"))) {
        int r = 0;
        st = json_int(&r, j, path, "resample", 0, 5);
        if (!st && r != 3) {
            static const char *names[6] = {"NEAREST", "LANCZOS", "BILINEAR",
                                           "BICUBIC", "BOX",     "HAMMING"};
            st = bt_fail(BT_ERR_UNSUPPORTED,
                         "%s: key \"resample\": bt implements only PIL BICUBIC (3), got %d (%s)",
                         path, r, names[r]);
        }
    }
    if (!st && (j = cJSON_GetObjectItemCaseSensitive(root, "do_resize")))
        st = json_bool(&c.do_resize, j, path, "do_resize");
    if (!st && (j = cJSON_GetObjectItemCaseSensitive(root, "do_rescale")))
        st = json_bool(&c.do_rescale, j, path, "do_rescale");
    if (!st && (j = cJSON_GetObjectItemCaseSensitive(root, "rescale_factor"))) {
        if (!cJSON_IsNumber(j))
            st = bt_fail(BT_ERR_CONFIG, "%s: key \"rescale_factor\": expected a number, got %s",
                         path, bt_json_type_name(j));
        else
            c.rescale_factor = j->valuedouble;
    }
    if (!st && (j = cJSON_GetObjectItemCaseSensitive(root, "image_mean")))
        st = json_triple(c.mean, j, path, "image_mean");
    if (!st && (j = cJSON_GetObjectItemCaseSensitive(root, "image_std")))
        st = json_triple(c.std, j, path, "image_std");
    if (!st && (j = cJSON_GetObjectItemCaseSensitive(root, "crop_size")) && !cJSON_IsNull(j)) {
        st = json_shortest_edge(&c.crop_size, j, path, "crop_size", 0);
        crop_given = 1;
    }
    /* Type-checked, then overridden as BridgeTowerProcessor does (see image.h). */
    if (!st && (j = cJSON_GetObjectItemCaseSensitive(root, "do_center_crop")))
        st = json_bool(&unused, j, path, "do_center_crop");
    if (!st && (j = cJSON_GetObjectItemCaseSensitive(root, "do_normalize")))
        st = json_bool(&unused, j, path, "do_normalize");
    if (!st && (j = cJSON_GetObjectItemCaseSensitive(root, "do_pad")))
        st = json_bool(&unused, j, path, "do_pad");
    cJSON_Delete(root);
    if (st) return st;

    c.longest_edge = (int)(1333.0 / 800.0 * c.shortest_edge);
    if (!crop_given) c.crop_size = c.shortest_edge;
    st = image_preprocess_config_validate(&c, path);
    if (st) return st;
    *cfg = c;
    return BT_OK;
}

void image_resize_target(int *out_w, int *out_h, int w, int h, const image_preprocess_config *cfg) {
    BT_ASSERT(w > 0 && h > 0);
    if (!cfg->do_resize) {
        *out_w = w;
        *out_h = h;
        return;
    }
    /* HF get_resize_output_image_size, in the same double operations as the Python. */
    const double min_size = cfg->shortest_edge, max_size = cfg->longest_edge;
    double scale = min_size / (double)(h < w ? h : w);
    double nh, nw;
    if (h < w) {
        nh = min_size;
        nw = scale * w;
    } else {
        nh = scale * h;
        nw = min_size;
    }
    double longer = nh > nw ? nh : nw;
    if (longer > max_size) {
        scale = max_size / longer;
        nh = scale * nh;
        nw = scale * nw;
    }
    int ih = (int)(nh + 0.5), iw = (int)(nw + 0.5);
    const int d = cfg->size_divisor;
    ih = ih / d * d;
    iw = iw / d * d;
    /* v4 raises on a zero size (extreme aspect ratios); newer versions floor at d. */
    *out_h = ih < d ? d : ih;
    *out_w = iw < d ? d : iw;
}

/* --- file reading ------------------------------------------------------------------------- */

bt_status image_read_file(uint8_t **bytes, size_t *n, const char *path) {
    *bytes = NULL;
    *n = 0;
    int fd;
    struct stat sb;
    bt_status ost = bt_open_regular(path, NULL, &fd, &sb);
    if (ost != BT_OK) return ost;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        int e = errno;
        close(fd);
        return bt_fail(BT_ERR_IO, "%s: cannot open: %s", path, strerror(e));
    }
    size_t size = (size_t)sb.st_size;
    /* malloc, not bt_alloc: the size is the file's, so running out is an error to report
     * (bt_free is free). */
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf) {
        fclose(f);
        return bt_fail(BT_ERR_NOMEM, "%s: out of memory reading %zu bytes", path, size);
    }
    size_t got = size ? fread(buf, 1, size, f) : 0;
    int err = ferror(f) ? errno : 0;
    fclose(f);
    if (got != size) {
        bt_free(buf);
        return bt_fail(BT_ERR_IO, "%s: read %zu of %zu bytes: %s", path, got, size,
                       err ? strerror(err) : "file shrank while reading");
    }
    *bytes = buf;
    *n = size;
    return BT_OK;
}

/* --- format detection --------------------------------------------------------------------- */

image_format image_sniff_format(const uint8_t *b, size_t n, const char **name) {
    static const struct {
        image_format fmt;
        const char *name;
        size_t off, len;
        const char *magic;
    } tab[] = {
        {IMAGE_FORMAT_JPEG, "JPEG", 0, 3, "\xFF\xD8\xFF"},
        {IMAGE_FORMAT_PNG, "PNG", 0, 8, "\x89PNG\r\n\x1a\n"},
        {IMAGE_FORMAT_WEBP, "WebP", 8, 4, "WEBP"}, /* after "RIFF" + size, checked below */
        {IMAGE_FORMAT_OTHER, "GIF", 0, 6, "GIF87a"},
        {IMAGE_FORMAT_OTHER, "GIF", 0, 6, "GIF89a"},
        {IMAGE_FORMAT_OTHER, "TIFF", 0, 4, "II*\0"},
        {IMAGE_FORMAT_OTHER, "TIFF", 0, 4, "MM\0*"},
        {IMAGE_FORMAT_OTHER, "BMP", 0, 2, "BM"},
        {IMAGE_FORMAT_OTHER, "JPEG 2000", 0, 12, "\0\0\0\x0cjP  \r\n\x87\n"},
        {IMAGE_FORMAT_OTHER, "AVIF", 4, 8, "ftypavif"},
        {IMAGE_FORMAT_OTHER, "HEIF", 4, 8, "ftypheic"},
        {IMAGE_FORMAT_OTHER, "HEIF", 4, 8, "ftypheix"},
        {IMAGE_FORMAT_OTHER, "HEIF", 4, 8, "ftypmif1"},
        {IMAGE_FORMAT_OTHER, "JPEG XL", 0, 2, "\xFF\x0A"},
        {IMAGE_FORMAT_OTHER, "JPEG XL", 0, 12, "\0\0\0\x0cJXL \r\n\x87\n"},
        {IMAGE_FORMAT_OTHER, "ICO", 0, 4, "\0\0\1\0"},
        {IMAGE_FORMAT_OTHER, "Photoshop (PSD)", 0, 4, "8BPS"},
    };
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++) {
        if (n < tab[i].off + tab[i].len || memcmp(b + tab[i].off, tab[i].magic, tab[i].len))
            continue;
        if (tab[i].fmt == IMAGE_FORMAT_WEBP && memcmp(b, "RIFF", 4)) continue;
        if (name) *name = tab[i].name;
        return tab[i].fmt;
    }
    if (name) *name = NULL;
    return IMAGE_FORMAT_UNKNOWN;
}

/* The first (up to) 4 bytes in hex, for messages: "12 AB 00 FF". */
typedef struct hex4 {
    char s[3 * 4 + 1];
} hex4;

static hex4 hex_head(const uint8_t *b, size_t n) {
    hex4 h = {{0}};
    for (size_t i = 0; i < n && i < 4; i++) snprintf(h.s + 3 * i, 4, "%02X ", b[i]);
    if (n) h.s[strlen(h.s) - 1] = '\0'; /* the trailing space */
    return h;
}

/* --- JPEG decoding ------------------------------------------------------------------------ */

typedef struct jpeg_err_ctx {
    struct jpeg_error_mgr pub;
    jmp_buf jmp;
    int is_warning;
    char msg[JMSG_LENGTH_MAX];
} jpeg_err_ctx;

static void jpeg_on_error_exit(j_common_ptr cinfo) {
    jpeg_err_ctx *e = (jpeg_err_ctx *)cinfo->err;
    (*cinfo->err->format_message)(cinfo, e->msg);
    e->is_warning = 0;
    longjmp(e->jmp, 1);
}

static void jpeg_on_emit_message(j_common_ptr cinfo, int level) {
    if (level >= 0) return; /* trace messages */
    /* An unknown JFIF version number is metadata only: the pixels are intact. */
    if (cinfo->err->msg_code == JWRN_JFIF_MAJOR) return;
    jpeg_err_ctx *e = (jpeg_err_ctx *)cinfo->err;
    (*cinfo->err->format_message)(cinfo, e->msg);
    e->is_warning = 1;
    longjmp(e->jmp, 1);
}

static void jpeg_on_output_message(j_common_ptr cinfo) { (void)cinfo; }

/* State that survives the longjmp: it lives in the caller's frame, not in the frame that
 * calls setjmp, so its values after a longjmp are well defined. */
typedef struct jpeg_job {
    struct jpeg_decompress_struct cinfo;
    jpeg_err_ctx err;
    uint8_t *pixels; /* (h, w, 3) output being filled */
    uint8_t *row4;   /* (w, 4) CMYK row */
    const image_preprocess_config *cfg;
    int min_w, min_h;
    int stage;       /* 0 header, 1 decoding, 2 finishing: for messages */
} jpeg_job;

static void cmyk_row_to_rgb(uint8_t *rgb, const uint8_t *cmyk, int w) {
    for (int x = 0; x < w; x++) {
        /* Pillow unpacks "CMYK;I" (inverted), then cmyk2rgb. */
        int c = 255 - cmyk[4 * x + 0], m = 255 - cmyk[4 * x + 1];
        int y = 255 - cmyk[4 * x + 2], k = 255 - cmyk[4 * x + 3];
        int nk = 255 - k;
        int in[3] = {c, m, y};
        for (int i = 0; i < 3; i++) {
            int t = in[i] * nk + 128;
            int v = nk - (((t >> 8) + t) >> 8);
            rgb[3 * x + i] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
        }
    }
}

/* Runs libjpeg; returns 0 on success, 1 after a longjmp (message in job->err). On success
 * job->pixels holds the image of size out->w x out->h. */
static int jpeg_run(jpeg_job *job, image_u8 *out, const uint8_t *bytes, size_t n) {
    struct jpeg_decompress_struct *ci = &job->cinfo;
    if (setjmp(job->err.jmp)) return 1;
    jpeg_create_decompress(ci);
    jpeg_mem_src(ci, bytes, (unsigned long)n);
    if (jpeg_read_header(ci, TRUE) != JPEG_HEADER_OK) ERREXIT(ci, JERR_NO_IMAGE);
    out->orig_w = (int)ci->image_width;
    out->orig_h = (int)ci->image_height;
    if ((int64_t)ci->image_width * (int64_t)ci->image_height > IMAGE_MAX_PIXELS) return 2;
    if (ci->num_components != 1 && ci->num_components != 3 && ci->num_components != 4) return 3;
    ci->out_color_space = ci->num_components == 4 ? JCS_CMYK : JCS_RGB;

    int min_w = job->min_w, min_h = job->min_h;
    if (job->cfg && job->cfg->use_dct_scaling && job->cfg->do_resize)
        image_resize_target(&min_w, &min_h, out->orig_w, out->orig_h, job->cfg);
    if (min_w > 0 || min_h > 0) {
        for (unsigned m = 1; m <= 8; m++) {
            ci->scale_num = m;
            ci->scale_denom = 8;
            jpeg_calc_output_dimensions(ci);
            if ((int)ci->output_width >= min_w && (int)ci->output_height >= min_h) break;
        }
    }
    job->stage = 1;
    jpeg_start_decompress(ci);
    const int w = (int)ci->output_width, h = (int)ci->output_height;
    BT_ASSERT(w > 0 && h > 0);
    BT_ASSERT(ci->output_components == (ci->num_components == 4 ? 4 : 3));
    /* malloc, not bt_alloc: the size comes from the file (bt_free is free). */
    job->pixels = malloc((size_t)w * (size_t)h * 3);
    if (ci->output_components == 4) job->row4 = malloc((size_t)w * 4);
    if (!job->pixels || (ci->output_components == 4 && !job->row4)) return 4;
    while (ci->output_scanline < ci->output_height) {
        uint8_t *dst = job->pixels + (size_t)ci->output_scanline * (size_t)w * 3;
        if (job->row4) {
            JSAMPROW row = job->row4;
            if (jpeg_read_scanlines(ci, &row, 1) != 1) ERREXIT(ci, JERR_INPUT_EMPTY);
            cmyk_row_to_rgb(dst, job->row4, w);
        } else {
            JSAMPROW row = dst;
            if (jpeg_read_scanlines(ci, &row, 1) != 1) ERREXIT(ci, JERR_INPUT_EMPTY);
        }
    }
    job->stage = 2;
    jpeg_finish_decompress(ci);
    out->w = w;
    out->h = h;
    out->scale_num = (int)ci->scale_num * 8 / (int)ci->scale_denom;
    return 0;
}

static bt_status decode_impl(image_u8 *out, const uint8_t *bytes, size_t n, const char *name,
                             int min_w, int min_h, const image_preprocess_config *cfg) {
    memset(out, 0, sizeof *out);
    if (!name) name = "<memory>";
    if (n == 0 || !bytes)
        return bt_fail(BT_ERR_FORMAT, "%s: empty file (0 bytes), expected a JPEG image", name);
    const char *fmt = NULL;
    if (image_sniff_format(bytes, n, &fmt) != IMAGE_FORMAT_JPEG) {
        if (fmt)
            return bt_fail(BT_ERR_UNSUPPORTED, "%s: this is %s %s image, not JPEG", name,
                           strchr("AEIOU", fmt[0]) ? "an" : "a", fmt);
        return bt_fail(BT_ERR_FORMAT,
                       "%s: not a JPEG file (starts with %s; a JPEG starts with FF D8 FF)", name,
                       hex_head(bytes, n).s);
    }

    jpeg_job job;
    memset(&job, 0, sizeof job);
    job.cfg = cfg;
    job.min_w = min_w;
    job.min_h = min_h;
    job.cinfo.err = jpeg_std_error(&job.err.pub);
    job.err.pub.error_exit = jpeg_on_error_exit;
    job.err.pub.emit_message = jpeg_on_emit_message;
    job.err.pub.output_message = jpeg_on_output_message;
    int rc = jpeg_run(&job, out, bytes, n);
    bt_status st = BT_OK;
    if (rc == 1) {
        int code = job.err.pub.msg_code;
        if (job.err.is_warning)
            st = bt_fail(BT_ERR_FORMAT, "%s: corrupt or truncated JPEG: %s", name, job.err.msg);
        else if (code == JERR_BAD_PRECISION || code == JERR_CONVERSION_NOTIMPL ||
                 code == JERR_NOT_COMPILED || code == JERR_BAD_J_COLORSPACE)
            st = bt_fail(BT_ERR_UNSUPPORTED, "%s: unsupported JPEG: %s", name, job.err.msg);
        else
            st = bt_fail(BT_ERR_FORMAT, "%s: cannot decode JPEG (%s): %s", name,
                         job.stage == 0 ? "header" : "image data", job.err.msg);
    } else if (rc == 2) {
        st = bt_fail(BT_ERR_UNSUPPORTED,
                     "%s: JPEG is %d x %d pixels, above the limit of %lld pixels", name,
                     out->orig_w, out->orig_h, (long long)IMAGE_MAX_PIXELS);
    } else if (rc == 4) {
        st = bt_fail(BT_ERR_NOMEM, "%s: out of memory decoding a %d x %d JPEG (%zu bytes)", name,
                     out->orig_w, out->orig_h,
                     (size_t)job.cinfo.output_width * job.cinfo.output_height * 3);
    } else if (rc == 3) {
        st = bt_fail(BT_ERR_UNSUPPORTED,
                     "%s: JPEG has %d colour components; bt reads 1 (gray), 3 (YCbCr/RGB) or 4 "
                     "(CMYK/YCCK)", name, job.cinfo.num_components);
    }
    jpeg_destroy_decompress(&job.cinfo);
    bt_free(job.row4);
    if (st != BT_OK) {
        bt_free(job.pixels);
        memset(out, 0, sizeof *out);
        return st;
    }
    out->data = job.pixels;
    return BT_OK;
}

bt_status image_decode_jpeg(image_u8 *out, const uint8_t *bytes, size_t n,
                            const char *name_for_errors, int min_w, int min_h) {
    return decode_impl(out, bytes, n, name_for_errors, min_w, min_h, NULL);
}

bt_status image_decode_jpeg_for(image_u8 *out, const uint8_t *bytes, size_t n,
                                const char *name_for_errors, const image_preprocess_config *cfg) {
    return decode_impl(out, bytes, n, name_for_errors, 0, 0, cfg);
}

bt_status image_decode_for(image_u8 *out, const uint8_t *bytes, size_t n,
                           const char *name_for_errors, const image_preprocess_config *cfg) {
    const char *name = name_for_errors ? name_for_errors : "<memory>";
    memset(out, 0, sizeof *out);
    if (n == 0 || !bytes)
        return bt_fail(BT_ERR_FORMAT,
                       "%s: empty file (0 bytes), expected a JPEG, PNG or WebP image", name);
    const char *fmt = NULL;
    switch (image_sniff_format(bytes, n, &fmt)) {
    case IMAGE_FORMAT_JPEG: return decode_impl(out, bytes, n, name, 0, 0, cfg);
    case IMAGE_FORMAT_PNG: return image_decode_png(out, bytes, n, name);
    case IMAGE_FORMAT_WEBP: return image_decode_webp(out, bytes, n, name);
    case IMAGE_FORMAT_OTHER:
        return bt_fail(BT_ERR_UNSUPPORTED,
                       "%s: this is %s %s image; bt reads JPEG, PNG and WebP images (convert it "
                       "to one of those first)", name, strchr("AEIOU", fmt[0]) ? "an" : "a", fmt);
    case IMAGE_FORMAT_UNKNOWN: break;
    }
    return bt_fail(BT_ERR_FORMAT,
                   "%s: not an image bt reads (starts with %s; JPEG starts with FF D8 FF, PNG "
                   "with 89 50 4E 47, WebP with \"RIFF\" and \"WEBP\" at byte 8)", name,
                   hex_head(bytes, n).s);
}

bt_status image_load_file(image_u8 *out, const char *path, const image_preprocess_config *cfg) {
    uint8_t *bytes = NULL;
    size_t n = 0;
    memset(out, 0, sizeof *out);
    bt_status st = image_read_file(&bytes, &n, path);
    if (st) return st;
    st = image_decode_for(out, bytes, n, path, cfg);
    bt_free(bytes);
    return st;
}

/* --- the processor ------------------------------------------------------------------------ */

static int floor_div2(int a) { return a >= 0 ? a / 2 : -((-a + 1) / 2); }

/* Fills lut (3, 256) with the normalized value of every uint8 level: the pixel values are a
 * function of (channel, level) only, so per-pixel arithmetic reduces to a lookup. */
static void build_lut(float lut[3][256], const image_preprocess_config *cfg) {
    for (int c = 0; c < 3; c++) {
        for (int u = 0; u < 256; u++) lut[c][u] = normalized_level(cfg, c, u);
    }
}

/* Runs resize + crop geometry and calls emit(c, y, x0, n, levels or NULL) per output row
 * segment; shared by the fp32 and bf16 writers through a small template below. */
typedef struct crop_plan {
    int crop;
    int top, left;           /* crop origin in resized coordinates (may be negative) */
    int wy0, wy1, wx0, wx1;  /* the part of the crop inside the resized image */
    const uint8_t *win;      /* (wy1-wy0, wx1-wx0, 3) resized pixels of that part */
    size_t win_stride;       /* bytes per row of win */
    uint8_t *owned;          /* scratch to free */
} crop_plan;

static void crop_plan_init(crop_plan *p, const image_u8 *img, const image_preprocess_config *cfg) {
    BT_ASSERT(img && img->data && img->w > 0 && img->h > 0);
    BT_ASSERT(cfg->crop_size > 0 && cfg->size_divisor > 0 && cfg->shortest_edge > 0);
    int tw, th;
    if (cfg->do_resize) {
        int ow = img->orig_w > 0 ? img->orig_w : img->w;
        int oh = img->orig_h > 0 ? img->orig_h : img->h;
        image_resize_target(&tw, &th, ow, oh, cfg);
    } else {
        tw = img->w;
        th = img->h;
    }
    memset(p, 0, sizeof *p);
    p->crop = cfg->crop_size;
    p->top = floor_div2(th - p->crop);
    p->left = floor_div2(tw - p->crop);
    p->wy0 = p->top > 0 ? p->top : 0;
    p->wx0 = p->left > 0 ? p->left : 0;
    p->wy1 = p->top + p->crop < th ? p->top + p->crop : th;
    p->wx1 = p->left + p->crop < tw ? p->left + p->crop : tw;
    BT_ASSERT(p->wy1 > p->wy0 && p->wx1 > p->wx0);
    const int ww = p->wx1 - p->wx0, wh = p->wy1 - p->wy0;
    if (tw == img->w && th == img->h) {
        p->win = img->data + ((size_t)p->wy0 * (size_t)img->w + (size_t)p->wx0) * 3;
        p->win_stride = (size_t)img->w * 3;
    } else {
        /* A DCT-downscaled image holds the picture in its first orig*M/8 (fractional) pixels;
         * a full-size image in all of them (then this is Pillow's plain resize). */
        float box[4] = {0.0f, 0.0f, (float)img->w, (float)img->h};
        if (cfg->do_resize && (img->w != img->orig_w || img->h != img->orig_h)) {
            BT_ASSERT(img->scale_num >= 1 && img->scale_num < 8);
            box[2] = (float)img->orig_w * (float)img->scale_num / 8.0f;
            box[3] = (float)img->orig_h * (float)img->scale_num / 8.0f;
            BT_ASSERT(box[2] <= (float)img->w && box[3] <= (float)img->h);
        }
        p->owned = bt_alloc((size_t)ww * (size_t)wh * 3);
        image_resize_bicubic_box(p->owned, img, box, tw, th, p->wx0, p->wy0, ww, wh);
        p->win = p->owned;
        p->win_stride = (size_t)ww * 3;
    }
}

#define DEFINE_PREPROCESS_WRITER(fname, T, CONVERT)                                            \
    static void fname(T *out, const crop_plan *p, const float lut[3][256]) {                  \
        const int c2 = p->crop;                                                                \
        for (int ch = 0; ch < 3; ch++) {                                                       \
            const T pad = CONVERT(lut[ch][0]);                                                 \
            T tab[256];                                                                        \
            for (int u = 0; u < 256; u++) tab[u] = CONVERT(lut[ch][u]);                        \
            for (int y = 0; y < c2; y++) {                                                     \
                T *o = out + ((size_t)ch * (size_t)c2 + (size_t)y) * (size_t)c2;               \
                const int sy = y + p->top;                                                     \
                if (sy < p->wy0 || sy >= p->wy1) {                                             \
                    for (int x = 0; x < c2; x++) o[x] = pad;                                   \
                    continue;                                                                  \
                }                                                                              \
                const uint8_t *row = p->win + (size_t)(sy - p->wy0) * p->win_stride + ch;      \
                const int xa = p->wx0 - p->left, xb = p->wx1 - p->left; /* inside: [xa, xb) */ \
                for (int x = 0; x < xa; x++) o[x] = pad;                                       \
                for (int x = xa; x < xb; x++) o[x] = tab[row[(size_t)(x - xa) * 3]];           \
                for (int x = xb; x < c2; x++) o[x] = pad;                                      \
            }                                                                                  \
        }                                                                                      \
    }

#define CONVERT_F32(v) (v)
#define CONVERT_BF16(v) bt_bf16_from_f32(v)
DEFINE_PREPROCESS_WRITER(write_f32, float, CONVERT_F32)
DEFINE_PREPROCESS_WRITER(write_bf16, bt_bf16, CONVERT_BF16)

void image_preprocess(float *out, const image_u8 *img, const image_preprocess_config *cfg) {
    crop_plan p;
    float lut[3][256];
    crop_plan_init(&p, img, cfg);
    build_lut(lut, cfg);
    write_f32(out, &p, lut);
    bt_free(p.owned);
}

void image_preprocess_bf16(bt_bf16 *out, const image_u8 *img, const image_preprocess_config *cfg) {
    crop_plan p;
    float lut[3][256];
    crop_plan_init(&p, img, cfg);
    build_lut(lut, cfg);
    write_bf16(out, &p, lut);
    bt_free(p.owned);
}
