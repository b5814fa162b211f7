/* test_image_bad.c: malformed input to the JPEG decoder and the preprocessor-config reader.
 *
 * Every case must return an error status (never crash, never succeed on invented pixels) with
 * a message that names the file and the problem:
 *   - JPEG: corrupt scan data (bytes flipped, a stray EOI inside the scan), truncation at
 *     several points (inside the header, inside the scan, only the EOI missing), empty file,
 *     PNG / GIF / WebP bytes (named as such; image_load_file decodes PNG and WebP, so there
 *     a PNG without image data is a truncated PNG and a GIF is named), random bytes, a header claiming 65000x65000
 *     pixels, 12-bit precision, missing file, a directory.
 *   - preprocessor_config.json: malformed JSON, a non-object, wrong types, size without
 *     shortest_edge, size_divisor 0 or fractional, resample != 3, 2-element mean, zero std,
 *     integer crop_size, a rescale, mean or std that takes a pixel past a float's range,
 *     missing file.
 *   - A seeded fuzz loop (a few thousand random, truncated and mutated byte strings, with and
 *     without DCT scaling) fed to the decoder: each result is either a well-formed image or
 *     an error naming the source. Meant to run under ASan/UBSan
 *     (meson setup build-asan -Db_sanitize=address,undefined --buildtype=debug). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/image.h"
#include "test_util.h"

static uint8_t *load_fixture(const char *rel, size_t *n) {
    uint8_t *b = NULL;
    char path[1024];
    snprintf(path, sizeof path, "%s", tu_fixture_path(rel));
    if (image_read_file(&b, n, path) != BT_OK) {
        fprintf(stderr, "cannot read fixture %s: %s\n", path, bt_error_message());
        exit(1);
    }
    return b;
}

static int contains_ci(const char *hay, const char *needle) {
    size_t n = strlen(needle);
    for (const char *p = hay; *p; p++) {
        size_t i = 0;
        while (i < n && p[i] && (p[i] | 32) == (needle[i] | 32)) i++;
        if (i == n) return 1;
    }
    return 0;
}

/* The call failed with `want` (or any error when want == BT_OK) and the message names `name`
 * and contains `what`. */
static void expect_error(const char *label, bt_status st, bt_status want, const char *name,
                         const char *what) {
    const char *msg = bt_error_message();
    int ok = st != BT_OK && (want == BT_OK || st == want) && strstr(msg, name) &&
             (!what || contains_ci(msg, what));
    tu_check(ok, "%s -> %s: \"%s\"", label, bt_status_name(st), st ? msg : "(succeeded)");
}

static bt_status decode(const uint8_t *b, size_t n, const char *name, image_u8 *img) {
    bt_error_clear();
    bt_status st = image_decode_jpeg(img, b, n, name, 0, 0);
    if (st == BT_OK) image_u8_free(img);
    else if (img->data) tu_check(0, "%s: error left pixels allocated", name);
    return st;
}

/* Offset of the first byte after the SOS segment (start of entropy-coded data), or 0. */
static size_t scan_start(const uint8_t *b, size_t n) {
    for (size_t i = 2; i + 3 < n; i++)
        if (b[i] == 0xFF && b[i + 1] == 0xDA) return i + 2 + ((size_t)b[i + 2] << 8 | b[i + 3]);
    return 0;
}

static size_t find_marker(const uint8_t *b, size_t n, uint8_t m) {
    for (size_t i = 2; i + 1 < n; i++)
        if (b[i] == 0xFF && b[i + 1] == m) return i;
    return 0;
}

static void test_jpeg_bad(void) {
    size_t n;
    uint8_t *orig = load_fixture("images/landscape.jpg", &n);
    uint8_t *b = malloc(n + 16);
    image_u8 img;
    const char *nm = "landscape.jpg";
    size_t s0 = scan_start(orig, n);
    BT_ASSERT(s0 > 0 && s0 + 2000 < n);

    /* The intact file decodes (so the failures below are caused by the damage). */
    tu_check(decode(orig, n, nm, &img) == BT_OK, "intact landscape.jpg decodes");

    /* Corrupt scan data. JPEG has no checksum: a flipped run of entropy-coded bytes is only
     * detectable when it breaks the Huffman stream (a bad code, a marker, the data ending
     * early or late); otherwise libjpeg decodes different but well-formed pixels, and so does
     * Pillow. So each flip must either be reported (naming the file) or visibly change the
     * pixels (the damaged bytes were decoded, not skipped); most must be reported. */
    image_u8 intact;
    BT_ASSERT(image_decode_jpeg(&intact, orig, n, nm, 0, 0) == BT_OK);
    int flips = 0, reported = 0, changed = 0, neither = 0;
    for (size_t at = s0 + 200; at + 16 < n - 2; at += (n - s0) / 23, flips++) {
        memcpy(b, orig, n);
        for (size_t i = at; i < at + 16; i++) b[i] ^= 0x5A;
        bt_error_clear();
        bt_status st = image_decode_jpeg(&img, b, n, nm, 0, 0);
        if (st != BT_OK) {
            if (strstr(bt_error_message(), nm) && st == BT_ERR_FORMAT) reported++;
            else neither++;
        } else {
            if (memcmp(img.data, intact.data, (size_t)img.w * img.h * 3)) changed++;
            else neither++;
            image_u8_free(&img);
        }
    }
    tu_check(neither == 0 && reported * 2 > flips,
             "16 bytes flipped at %d scan offsets: %d reported as corrupt, %d decoded to changed "
             "pixels (undetectable without a checksum), %d neither", flips, reported, changed,
             neither);
    image_u8_free(&intact);
    memcpy(b, orig, n);
    b[s0 + 500] = 0xFF;
    b[s0 + 501] = 0xD9;
    expect_error("EOI marker inside the scan", decode(b, n, nm, &img), BT_ERR_FORMAT, nm, "JPEG");
    memcpy(b, orig, n);
    for (size_t i = s0 + 100; i < n - 2; i += 97) b[i] = (uint8_t)(b[i] * 31 + 7);
    expect_error("every 97th scan byte changed", decode(b, n, nm, &img), BT_ERR_FORMAT, nm, "JPEG");

    /* Truncations. */
    size_t cuts[] = {1, 2, 3, 20, s0 - 5, s0, s0 + 10, n / 2, n - 100, n - 2, n - 1};
    const char *why[] = {"SOI only half", "SOI only", "SOI + FF", "inside APP0",
                         "inside SOS header", "at scan start", "early in the scan",
                         "middle of the scan", "near the end of the scan", "EOI missing",
                         "EOI half"};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        char label[128];
        snprintf(label, sizeof label, "truncated at %zu of %zu (%s)", cuts[i], n, why[i]);
        expect_error(label, decode(orig, cuts[i], nm, &img), BT_OK, nm, NULL);
    }
    expect_error("empty buffer", decode(orig, 0, nm, &img), BT_ERR_FORMAT, nm, "empty");

    /* Other formats and random bytes. */
    static const uint8_t png[] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0, 0, 13,
                                  'I',  'H', 'D', 'R', 0,    0,    0,    1,    0, 0, 0, 1,
                                  8,    2,   0,   0,   0,    0x90, 0x77, 0x53, 0xde};
    expect_error("PNG bytes", decode(png, sizeof png, "pic.png", &img), BT_ERR_UNSUPPORTED,
                 "pic.png", "PNG");
    static const uint8_t gif[] = "GIF89a\x01\x00\x01\x00\x00\x00\x00;";
    expect_error("GIF bytes", decode(gif, sizeof gif - 1, "pic.gif", &img), BT_ERR_UNSUPPORTED,
                 "pic.gif", "GIF");
    static const uint8_t webp[] = "RIFF\x1a\x00\x00\x00WEBPVP8 ";
    expect_error("WebP bytes", decode(webp, sizeof webp - 1, "pic.webp", &img),
                 BT_ERR_UNSUPPORTED, "pic.webp", "WebP");
    tu_rng r;
    tu_rng_seed(&r, 3);
    for (size_t i = 0; i < 256; i++) b[i] = (uint8_t)tu_rng_next(&r);
    b[0] = 0x12;
    expect_error("256 random bytes", decode(b, 256, "noise.jpg", &img), BT_ERR_FORMAT, "noise.jpg",
                 "not a JPEG");
    memcpy(b, "\xFF\xD8\xFF", 3);
    expect_error("SOI + random bytes", decode(b, 256, "noise.jpg", &img), BT_OK,
                 "noise.jpg", NULL);

    /* Header lies. */
    size_t sof = find_marker(orig, n, 0xC0);
    BT_ASSERT(sof > 0);
    memcpy(b, orig, n);
    b[sof + 5] = 0xFD; /* height 65000 */
    b[sof + 6] = 0xE8;
    b[sof + 7] = 0xFD; /* width 65000 */
    b[sof + 8] = 0xE8;
    expect_error("SOF claims 65000x65000", decode(b, n, nm, &img), BT_ERR_UNSUPPORTED, nm,
                 "limit");
    memcpy(b, orig, n);
    b[sof + 4] = 12;
    expect_error("SOF says 12-bit precision", decode(b, n, nm, &img), BT_ERR_UNSUPPORTED, nm,
                 "precision");
    memcpy(b, orig, n);
    b[sof + 5] = 0;
    b[sof + 6] = 0;
    expect_error("SOF says height 0", decode(b, n, nm, &img), BT_OK, nm, NULL);

    /* Files. */
    const char *dir = tu_tmpdir();
    char path[1024];
    snprintf(path, sizeof path, "%s/empty.jpg", dir);
    tu_setup_file(path, "", 0);
    expect_error("empty file", image_load_file(&img, path, NULL), BT_ERR_FORMAT, path, "empty");
    snprintf(path, sizeof path, "%s/truncated.jpg", dir);
    tu_setup_file(path, orig, n / 3);
    expect_error("truncated file", image_load_file(&img, path, NULL), BT_ERR_FORMAT, path,
                 "JPEG");
    /* image_load_file reads PNG too (test_image_formats*.c): this one stops after IHDR. */
    snprintf(path, sizeof path, "%s/really_a.png", dir);
    tu_setup_file(path, png, sizeof png);
    expect_error("PNG file with no image data", image_load_file(&img, path, NULL), BT_ERR_FORMAT,
                 path, "truncated PNG");
    snprintf(path, sizeof path, "%s/anim.gif", dir);
    tu_setup_file(path, gif, sizeof gif - 1);
    expect_error("GIF file", image_load_file(&img, path, NULL), BT_ERR_UNSUPPORTED, path,
                 "this is a GIF image; bt reads JPEG, PNG and WebP");
    snprintf(path, sizeof path, "%s/does_not_exist.jpg", dir);
    expect_error("missing file", image_load_file(&img, path, NULL), BT_ERR_IO, path,
                 "No such file");
    expect_error("a directory", image_load_file(&img, dir, NULL), BT_ERR_IO, dir, "directory");
    free(b);
    bt_free(orig);
}

static void test_config_bad(void) {
    const char *dir = tu_tmpdir();
    char path[1024];
    snprintf(path, sizeof path, "%s/preprocessor_config.json", dir);
    struct { const char *json; bt_status want; const char *what; } cases[] = {
        {"{\"size\": {\"shortest_edge\": 288}", BT_ERR_FORMAT, "JSON"},
        {"", BT_ERR_FORMAT, "JSON"},
        {"[1, 2, 3]", BT_ERR_CONFIG, "object"},
        {"{\"size\": \"288\"}", BT_ERR_CONFIG, "\"size\""},
        {"{\"size\": {\"height\": 288, \"width\": 288}}", BT_ERR_CONFIG, "shortest_edge"},
        {"{\"size\": {\"shortest_edge\": -5}}", BT_ERR_CONFIG, "size.shortest_edge"},
        {"{\"size_divisor\": 0}", BT_ERR_CONFIG, "size_divisor"},
        {"{\"size_divisor\": 3.5}", BT_ERR_CONFIG, "size_divisor"},
        {"{\"resample\": 2}", BT_ERR_UNSUPPORTED, "BICUBIC"},
        {"{\"resample\": \"bicubic\"}", BT_ERR_CONFIG, "resample"},
        {"{\"resample\": 9}", BT_ERR_CONFIG, "resample"},
        {"{\"image_mean\": [0.5, 0.5]}", BT_ERR_CONFIG, "image_mean"},
        {"{\"image_mean\": [0.5, \"x\", 0.5]}", BT_ERR_CONFIG, "image_mean"},
        {"{\"image_std\": [0.2, 0, 0.2]}", BT_ERR_CONFIG, "image_std"},
        {"{\"do_resize\": \"yes\"}", BT_ERR_CONFIG, "do_resize"},
        {"{\"do_center_crop\": 1}", BT_ERR_CONFIG, "do_center_crop"},
        {"{\"rescale_factor\": \"1/255\"}", BT_ERR_CONFIG, "rescale_factor"},
        {"{\"rescale_factor\": -1}", BT_ERR_CONFIG, "rescale_factor"},
        {"{\"crop_size\": 288}", BT_ERR_CONFIG, "crop_size"},
        /* values whose normalized pixels leave a float's range (found by fuzzing) */
        {"{\"rescale_factor\": 1e300}", BT_ERR_CONFIG, "takes pixel value 255 past a float"},
        {"{\"image_std\": [0.2, 1e-40, 0.2]}", BT_ERR_CONFIG,
         "pixel value 0 normalizes to -inf in channel 1"},
        {"{\"image_mean\": -3e38, \"image_std\": 0.1}", BT_ERR_CONFIG,
         "pixel value 0 normalizes to inf in channel 0"},
        /* JSON Python reads differently (src/json_util.h): refused. */
        {"{\"size\": 288, \"size\": 32}", BT_ERR_FORMAT, "\"size\" appears twice"},
        {"{\"processor_class\": \"Bridge\\u0000Tower\"}", BT_ERR_FORMAT, "\\u0000"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tu_setup_file(path, cases[i].json, strlen(cases[i].json));
        image_preprocess_config cfg;
        char label[256];
        snprintf(label, sizeof label, "config %s", cases[i].json[0] ? cases[i].json : "(empty)");
        bt_error_clear();
        expect_error(label, image_preprocess_config_from_json(&cfg, path), cases[i].want, path,
                     cases[i].what);
    }
    snprintf(path, sizeof path, "%s/missing/preprocessor_config.json", dir);
    image_preprocess_config cfg;
    expect_error("config missing file", image_preprocess_config_from_json(&cfg, path), BT_ERR_IO,
                 path, "does not exist");
    /* Special files are refused at once, not opened for a read that never returns. */
    snprintf(path, sizeof path, "%s/fifo.jpg", dir);
    if (tu_check(mkfifo(path, 0600) == 0, "make a FIFO")) {
        image_u8 im;
        bt_error_clear();
        expect_error("image is a FIFO", image_load_file(&im, path, NULL), BT_ERR_IO, path,
                     "is a FIFO");
        expect_error("config is a FIFO", image_preprocess_config_from_json(&cfg, path), BT_ERR_IO,
                     path, "is a FIFO");
    }
    expect_error("image is a directory", image_load_file(&(image_u8){0}, dir, NULL), BT_ERR_IO,
                 dir, "is a directory");
    /* Memory per image from the config: shortest_edge 32768 asks for tens of GB. */
    image_preprocess_config big;
    image_preprocess_config_default(&big, 32768);
    uint64_t need = image_work_bytes(&big);
    /* longest edge int(1333/800 * 32768) = 54599; decoded + resized + resampler rows at
     * 54599 x 32768 x 3 bytes each, the fp32 crop 3 x 32768^2 x 4 bytes. */
    uint64_t want = 3ull * 54599 * 32768 * 3 + 32768ull * 32768 * 12;
    tu_check(need == want, "image_work_bytes(shortest_edge 32768) = %.2f GB, want %.2f GB",
             (double)need / 1e9, (double)want / 1e9);
}

/* Seeded fuzz: a result is either an image of sane size or an error naming the source. */
static void test_fuzz(void) {
    const char *rels[] = {"images/exif.jpg", "images/tiny.jpg", "images/gray.jpg",
                          "images/cmyk.jpg", "images/progressive.jpg"};
    enum { NSRC = 5, ITERS = 3000 };
    uint8_t *src[NSRC];
    size_t len[NSRC];
    size_t maxlen = 0;
    for (int i = 0; i < NSRC; i++) {
        src[i] = load_fixture(rels[i], &len[i]);
        if (len[i] > maxlen) maxlen = len[i];
    }
    uint8_t *b = malloc(maxlen + 4096);
    tu_rng r;
    tu_rng_seed(&r, 20240611);
    int n_ok = 0, n_err = 0, bad = 0;
    for (int it = 0; it < ITERS; it++) {
        int k = (int)(tu_rng_next(&r) % NSRC);
        size_t n = len[k];
        int kind = it % 4;
        if (kind == 0) { /* random bytes after SOI */
            n = 3 + tu_rng_next(&r) % 2000;
            for (size_t i = 0; i < n; i++) b[i] = (uint8_t)tu_rng_next(&r);
            memcpy(b, "\xFF\xD8\xFF", 3);
        } else if (kind == 1) { /* truncation */
            n = tu_rng_next(&r) % len[k];
            memcpy(b, src[k], n);
        } else if (kind == 2) { /* 1..8 byte mutations */
            memcpy(b, src[k], n);
            int m = 1 + (int)(tu_rng_next(&r) % 8);
            for (int j = 0; j < m; j++) b[tu_rng_next(&r) % n] = (uint8_t)tu_rng_next(&r);
        } else { /* a chunk of another file spliced in */
            memcpy(b, src[k], n);
            int k2 = (int)(tu_rng_next(&r) % NSRC);
            size_t at = tu_rng_next(&r) % n, from = tu_rng_next(&r) % len[k2];
            size_t cnt = 1 + tu_rng_next(&r) % 256;
            if (from + cnt > len[k2]) cnt = len[k2] - from;
            if (at + cnt > n) cnt = n - at;
            memcpy(b + at, src[k2] + from, cnt);
        }
        int min_w = 0, min_h = 0;
        if (tu_rng_next(&r) % 2) {
            min_w = 1 + (int)(tu_rng_next(&r) % 64);
            min_h = 1 + (int)(tu_rng_next(&r) % 64);
        }
        image_u8 img;
        bt_error_clear();
        bt_status st = image_decode_jpeg(&img, b, n, "fuzz-case", min_w, min_h);
        if (st == BT_OK) {
            n_ok++;
            if (!(img.w > 0 && img.h > 0 && img.w <= img.orig_w && img.h <= img.orig_h &&
                  img.data)) bad++;
            /* Touch every byte (ASan checks the buffer is as large as claimed), and run the
             * processor on it. */
            unsigned sum = 0;
            for (size_t i = 0; i < (size_t)img.w * img.h * 3; i++) sum += img.data[i];
            (void)sum;
            if (it % 16 == 0) {
                image_preprocess_config cfg;
                image_preprocess_config_default(&cfg, 32);
                float out[3 * 32 * 32];
                image_preprocess(out, &img, &cfg);
            }
            image_u8_free(&img);
        } else {
            n_err++;
            if (!strstr(bt_error_message(), "fuzz-case") || img.data) bad++;
        }
    }
    tu_check(bad == 0 && n_ok + n_err == ITERS,
             "fuzz: %d byte strings, %d decoded, %d rejected with a message naming the source, "
             "%d malformed results", ITERS, n_ok, n_err, bad);
    for (int i = 0; i < NSRC; i++) bt_free(src[i]);
    free(b);
}

/* A JPEG whose header claims 8192 x 8192 (192 MB of pixels) under a capped address space:
 * the pixel buffer cannot be had, and decoding says so with a status instead of aborting.
 * Not run under ASan, which reserves the address space itself. */
static void test_decode_out_of_memory(void) {
#if defined(__SANITIZE_ADDRESS__)
    printf("# decode out-of-memory case not run under ASan\n");
#else
    size_t n;
    uint8_t *b = tu_read_file(tu_fixture_path("images/tiny.jpg"), &n);
    uint8_t *sof = NULL;
    for (size_t i = 0; b && i + 9 < n && !sof; i++)
        if (b[i] == 0xFF && b[i + 1] == 0xC0) sof = b + i;
    if (!tu_check(sof != NULL, "tiny.jpg has a baseline SOF0 marker")) {
        free(b);
        return;
    }
    sof[5] = 0x20, sof[6] = 0x00; /* height 8192 */
    sof[7] = 0x20, sof[8] = 0x00; /* width 8192 */
    if (tu_check(tu_cap_address_space((size_t)96 << 20), "cap the address space")) {
        image_u8 im;
        bt_error_clear();
        bt_status st = image_decode_jpeg(&im, b, n, "huge.jpg", 0, 0);
        tu_uncap_address_space();
        tu_check(st == BT_ERR_NOMEM && im.data == NULL &&
                     strstr(bt_error_message(), "huge.jpg: out of memory decoding a 8192 x 8192"),
                 "8192 x 8192 JPEG on a capped address space: %s",
                 st ? bt_error_message() : "decoded");
        if (st == BT_OK) image_u8_free(&im);
    }
    free(b);
#endif
}

int main(void) {
    test_jpeg_bad();
    test_config_bad();
    test_fuzz();
    test_decode_out_of_memory();
    return tu_finish();
}
