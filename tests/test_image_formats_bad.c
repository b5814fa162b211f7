/* test_image_formats_bad.c: malformed PNG and WebP input, and formats bt does not read.
 *
 * Every case must return an error status (never crash, never succeed on invented pixels)
 * whose message names the file and the problem, and leave no pixels allocated:
 *   - PNG (from the fixtures of test_image_formats.c): truncation at every chunk boundary and
 *     inside the header and the image data; a bad CRC in IHDR, in IDAT and in an ancillary
 *     chunk (Pillow also rejects the last); flipped bytes inside the compressed data (CRC
 *     fixed: reported or changed pixels); an
 *     IHDR with an impossible bit depth / colour type / zero width; a palette image without
 *     its PLTE; 100000 x 100000 and 100000 x 1 headers (refused from the header, before
 *     any inflate).
 *     Two files Pillow reads are read here too (and equal the intact decode): one whose IEND
 *     is missing, and bombs that cannot cost more than the image size: 16 MiB of extra zeros
 *     after the last row, a 16 MiB iCCP chunk (skipped unread).
 *   - WebP: truncations (inside the RIFF header, the chunk header, the bitstream), a RIFF size
 *     beyond the file, flipped bytes in lossless and lossy bitstreams (neither has a
 *     checksum: a flip must be reported or change the pixels), a lossy frame header claiming
 *     16383 x 16383 and an animation canvas of 20000 x 20000 (refused from the header).
 *   - GIF, BMP, TIFF, AVIF, HEIF, JPEG 2000, JPEG XL bytes are refused naming the format;
 *     random bytes are "not an image".
 *   - A seeded loop of truncated / mutated / spliced PNG and WebP files (2 x 400 cases): each
 *     is either a well-formed image or an error naming the source. Meant for ASan/UBSan
 *     (scripts/test.sh runs the badinput suite in build-asan). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#include "data/image.h"
#include "test_util.h"

static int contains(const char *hay, const char *needle) { return strstr(hay, needle) != NULL; }

/* Decodes with image_decode_for; checks an error naming `name` and containing `what` (when
 * want_ok is 0), or success (want_ok 1). Frees any pixels. */
static void expect(const char *label, const uint8_t *b, size_t n, const char *name, int want_ok,
                   bt_status want, const char *what) {
    image_u8 img;
    bt_error_clear();
    bt_status st = image_decode_for(&img, b, n, name, NULL);
    const char *msg = bt_error_message();
    if (want_ok) {
        tu_check(st == BT_OK, "%s decodes: %s", label, st ? msg : "ok");
    } else {
        tu_check(st != BT_OK && (want == BT_OK || st == want) && contains(msg, name) &&
                     (!what || contains(msg, what)) && img.data == NULL,
                 "%s -> %s: \"%s\"", label, bt_status_name(st), st ? msg : "(succeeded)");
    }
    if (st == BT_OK) image_u8_free(&img);
}

static uint8_t *fixture(const char *rel, size_t *n) {
    char p[512];
    snprintf(p, sizeof p, "images/formats/%s", rel);
    uint8_t *b = tu_read_file(tu_fixture_path(p), n);
    if (!b) {
        fprintf(stderr, "cannot read fixture %s\n", tu_fixture_path(p));
        exit(1);
    }
    return b;
}

/* Offset of the first chunk of type `type` (its length field), or 0. */
static size_t png_chunk(const uint8_t *b, size_t n, const char *type) {
    size_t at = 8;
    while (at + 12 <= n) {
        size_t len = (size_t)b[at] << 24 | (size_t)b[at + 1] << 16 | (size_t)b[at + 2] << 8 |
                     b[at + 3];
        if (!memcmp(b + at + 4, type, 4)) return at;
        at += 12 + len;
    }
    return 0;
}

static size_t png_chunk_len(const uint8_t *b, size_t at) {
    return (size_t)b[at] << 24 | (size_t)b[at + 1] << 16 | (size_t)b[at + 2] << 8 | b[at + 3];
}

/* Recomputes the CRC of the chunk at `at` after its data was edited. */
static void png_fix_crc(uint8_t *b, size_t at) {
    size_t len = png_chunk_len(b, at);
    uLong c = crc32(0L, b + at + 4, (uInt)(len + 4));
    for (int i = 0; i < 4; i++) b[at + 8 + len + i] = (uint8_t)(c >> (24 - 8 * i));
}

/* The intact decode of b, for "same pixels" checks. */
static image_u8 decode_ok(const uint8_t *b, size_t n, const char *name) {
    image_u8 img;
    BT_ASSERT(image_decode_for(&img, b, n, name, NULL) == BT_OK);
    return img;
}

static void expect_same(const char *label, const uint8_t *b, size_t n, const image_u8 *ref) {
    image_u8 img;
    bt_error_clear();
    bt_status st = image_decode_for(&img, b, n, label, NULL);
    tu_check(st == BT_OK && img.w == ref->w && img.h == ref->h &&
                 !memcmp(img.data, ref->data, (size_t)img.w * img.h * 3),
             "%s: decodes to the intact file's pixels (%s)", label,
             st ? bt_error_message() : "ok");
    if (st == BT_OK) image_u8_free(&img);
}

/* Outcome counts of decoding damaged copies of a file whose format has no checksum over the
 * damaged bytes: each must be reported (naming the file, no pixels) or change the pixels. */
typedef struct flip_counts {
    int flips, reported, changed, neither;
} flip_counts;

static void count_flip(flip_counts *c, const uint8_t *b, size_t n, const char *nm,
                       const image_u8 *intact) {
    image_u8 img;
    bt_error_clear();
    bt_status st = image_decode_for(&img, b, n, nm, NULL);
    c->flips++;
    if (st != BT_OK) {
        if (contains(bt_error_message(), nm) && img.data == NULL) c->reported++;
        else c->neither++;
    } else {
        if (img.w != intact->w || img.h != intact->h ||
            memcmp(img.data, intact->data, (size_t)img.w * img.h * 3))
            c->changed++;
        else
            c->neither++;
        image_u8_free(&img);
    }
}

static void test_png(void) {
    size_t n;
    uint8_t *orig = fixture("rgb8.png", &n);
    uint8_t *b = malloc(n + 64);
    const char *nm = "photo.png";
    image_u8 intact = decode_ok(orig, n, nm);
    const size_t ihdr = png_chunk(orig, n, "IHDR"), idat = png_chunk(orig, n, "IDAT"),
                 iend = png_chunk(orig, n, "IEND");
    BT_ASSERT(ihdr == 8 && idat > ihdr && iend > idat && iend + 12 == n);

    /* Truncations. */
    const size_t cuts[] = {7, 8, 12, 20, 33, idat + 4, idat + 8, idat + 20, (idat + iend) / 2,
                           iend - 5, iend - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        char label[96];
        snprintf(label, sizeof label, "PNG truncated at byte %zu of %zu", cuts[i], n);
        expect(label, orig, cuts[i], nm, 0, BT_ERR_FORMAT, cuts[i] < 8 ? "not an image" : "PNG");
    }
    expect("PNG truncated inside the image data", orig, (idat + iend) / 2, nm, 0, BT_ERR_FORMAT,
           "truncated");
    /* Pillow stops after the last row too: a missing IEND (or anything after it) is unread. */
    expect_same("PNG without IEND", orig, iend, &intact);
    memcpy(b, orig, n);
    memcpy(b + n, "trailing garbage", 16);
    expect_same("PNG with bytes after IEND", b, n + 16, &intact);

    /* CRC errors. */
    memcpy(b, orig, n);
    b[ihdr + 8 + 13] ^= 1; /* IHDR's CRC */
    expect("IHDR CRC flipped", b, n, nm, 0, BT_ERR_FORMAT, "CRC");
    memcpy(b, orig, n);
    b[ihdr + 8 + 4] ^= 1; /* IHDR data (height) changed: CRC mismatch */
    expect("IHDR height changed under its CRC", b, n, nm, 0, BT_ERR_FORMAT, "CRC");
    memcpy(b, orig, n);
    b[idat + 8 + png_chunk_len(orig, idat)] ^= 0x10;
    expect("IDAT CRC flipped", b, n, nm, 0, BT_ERR_FORMAT, "CRC");
    memcpy(b, orig, n);
    b[idat + 8 + png_chunk_len(orig, idat) / 2] ^= 0x10;
    /* inflate reaches the stream's Adler-32 (or a bad code) before libpng the chunk's CRC */
    expect("IDAT data byte flipped under the CRC", b, n, nm, 0, BT_ERR_FORMAT, "PNG");
    size_t an;
    uint8_t *anc = fixture("ancillary.png", &an);
    size_t text = png_chunk(anc, an, "tEXt");
    BT_ASSERT(text > 0);
    anc[text + 8 + png_chunk_len(anc, text)] ^= 0xFF;
    expect("tEXt CRC flipped (ancillary, skipped chunk)", anc, an, "anc.png", 0, BT_ERR_FORMAT,
           "CRC");
    free(anc);

    /* Corrupt compressed data under a correct CRC. Deflate has no per-block check: a flip is
     * caught when it breaks the stream (a bad code, a distance too far back, the data ending
     * before the last row) and otherwise inflates to other bytes, as it would in Pillow. So
     * each flip must be reported (naming the file) or change the pixels. */
    const size_t dlen = png_chunk_len(orig, idat);
    flip_counts fc = {0};
    for (size_t at = 2; at + 4 < dlen; at += dlen / 13) {
        memcpy(b, orig, n);
        for (size_t i = 0; i < 4; i++) b[idat + 8 + at + i] ^= 0xA5;
        png_fix_crc(b, idat);
        count_flip(&fc, b, n, nm, &intact);
    }
    tu_check(fc.neither == 0 && fc.flips >= 10,
             "4 bytes flipped (CRC fixed) at %d offsets of the deflate stream: %d reported, %d "
             "changed the pixels, %d neither", fc.flips, fc.reported, fc.changed, fc.neither);

    /* Header lies. */
    const struct { size_t off; uint8_t v; const char *label; } ihdr_bad[] = {
        {8 + 8 + 8, 3, "IHDR bit depth 3"},
        {8 + 8 + 9, 5, "IHDR colour type 5"},
        {8 + 8 + 12, 2, "IHDR interlace method 2"},
        {8 + 8 + 10, 1, "IHDR compression method 1"},
    };
    for (size_t i = 0; i < sizeof ihdr_bad / sizeof ihdr_bad[0]; i++) {
        memcpy(b, orig, n);
        b[ihdr_bad[i].off] = ihdr_bad[i].v;
        png_fix_crc(b, ihdr);
        expect(ihdr_bad[i].label, b, n, nm, 0, BT_ERR_FORMAT, "PNG");
    }
    memcpy(b, orig, n);
    memset(b + 16, 0, 4); /* width 0 */
    png_fix_crc(b, ihdr);
    expect("IHDR width 0", b, n, nm, 0, BT_ERR_FORMAT, "PNG");

    size_t pn;
    uint8_t *pal = fixture("palette8.png", &pn);
    size_t plte = png_chunk(pal, pn, "PLTE");
    BT_ASSERT(plte > 0);
    size_t cut = 12 + png_chunk_len(pal, plte);
    memmove(pal + plte, pal + plte + cut, pn - plte - cut);
    expect("palette PNG without its PLTE", pal, pn - cut, "pal.png", 0, BT_ERR_FORMAT, "PLTE");
    free(pal);

    /* Bombs. */
    size_t bn;
    uint8_t *bomb = fixture("bad/bomb_dimensions.png", &bn);
    expect("PNG header claiming 100000 x 100000", bomb, bn, "bomb.png", 0, BT_ERR_UNSUPPORTED,
           "100000 x 100000 pixels, above the limit");
    free(bomb);
    /* Within the pixel limit but 100000 x 1: refused per side (libpng's row buffers). */
    memcpy(b, orig, n);
    const uint8_t wide[8] = {0, 1, 0x86, 0xA0, 0, 0, 0, 1}; /* 100000 x 1 */
    memcpy(b + 16, wide, 8);
    png_fix_crc(b, ihdr);
    expect("PNG header claiming 100000 x 1", b, n, nm, 0, BT_ERR_UNSUPPORTED,
           "100000 x 1 pixels, above the limit of 67108864 pixels and 65535 per side");
    bomb = fixture("bad/bomb_extra_idat.png", &bn);
    expect("16x16 PNG with 16 MiB of extra zeros in its image data", bomb, bn, "extra.png", 1, 0,
           NULL);
    free(bomb);
    bomb = fixture("bad/bomb_iccp.png", &bn);
    expect("16x16 PNG with a 16 MiB iCCP chunk", bomb, bn, "iccp.png", 1, 0, NULL);
    free(bomb);

    image_u8_free(&intact);
    free(b);
    free(orig);
}

static void put_le32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* Flips 4 bytes at 13 offsets of the bitstream (after the first 40 bytes): each must be
 * reported or change the pixels (neither VP8 nor VP8L has a checksum). */
static void webp_flips(const char *file, const char *nm) {
    size_t n;
    uint8_t *orig = fixture(file, &n);
    uint8_t *b = malloc(n);
    image_u8 intact = decode_ok(orig, n, nm);
    flip_counts fc = {0};
    for (size_t at = 40; at + 4 < n; at += (n - 40) / 13) {
        memcpy(b, orig, n);
        for (size_t i = 0; i < 4; i++) b[at + i] ^= 0x5A;
        count_flip(&fc, b, n, nm, &intact);
    }
    tu_check(fc.neither == 0 && fc.flips >= 10, "%s: 4 bytes flipped at %d offsets: %d reported, "
             "%d changed the pixels, %d neither", file, fc.flips, fc.reported, fc.changed,
             fc.neither);
    image_u8_free(&intact);
    free(b);
    free(orig);
}

static void test_webp(void) {
    const char *files[] = {"webp_lossy.webp", "webp_lossless_alpha.webp", "webp_animated.webp",
                           "webp_icc_exif.webp"};
    for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
        size_t n;
        uint8_t *orig = fixture(files[f], &n);
        const char *nm = files[f];
        const size_t cuts[] = {11, 12, 16, 20, 30, n / 3, n / 2, n - 10, n - 1};
        for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
            char label[96];
            snprintf(label, sizeof label, "%s truncated at byte %zu of %zu", nm, cuts[i], n);
            expect(label, orig, cuts[i], nm, 0, BT_ERR_FORMAT,
                   cuts[i] < 12 ? "not an image" : "WebP");
        }
        uint8_t *b = malloc(n);
        memcpy(b, orig, n);
        put_le32(b + 4, (uint32_t)n + 100); /* RIFF size beyond the file */
        char label[96];
        snprintf(label, sizeof label, "%s with a RIFF size 100 bytes past the end", nm);
        expect(label, b, n, nm, 0, BT_ERR_FORMAT, "WebP");
        free(b);
        free(orig);
    }
    /* Still images only: in an animation a flip in a later frame leaves frame 1 alone. */
    webp_flips("webp_lossless.webp", "ll.webp");
    webp_flips("webp_lossy.webp", "lossy.webp");

    size_t bn;
    uint8_t *b = fixture("bad/huge_vp8.webp", &bn);
    expect("lossy WebP frame header claiming 16383 x 16383", b, bn, "huge.webp", 0,
           BT_ERR_UNSUPPORTED, "16383 x 16383 pixels, above the limit");
    free(b);
    b = fixture("bad/huge_canvas.webp", &bn);
    expect("animated WebP with a 20000 x 20000 canvas", b, bn, "canvas.webp", 0,
           BT_ERR_UNSUPPORTED, "20000 x 20000 pixels, above the limit");
    free(b);
}

static void test_other_formats(void) {
    static const struct { const char *bytes; size_t n; const char *fmt; } cases[] = {
        {"GIF89a\x01\x00\x01\x00\x00\x00\x00;", 13, "GIF"},
        {"GIF87a\x01\x00\x01\x00\x00\x00\x00;", 13, "GIF"},
        {"BM\x3a\0\0\0\0\0\0\0\x36\0\0\0", 14, "BMP"},
        {"II*\0\x08\0\0\0", 8, "TIFF"},
        {"MM\0*\0\0\0\x08", 8, "TIFF"},
        {"\0\0\0\x1c" "ftypavif\0\0\0\0", 16, "AVIF"},
        {"\0\0\0\x18" "ftypheic\0\0\0\0", 16, "HEIF"},
        {"\0\0\0\x0cjP  \r\n\x87\n", 12, "JPEG 2000"},
        {"\xFF\x0A\xFA\x7F", 4, "JPEG XL"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char label[64], what[96];
        snprintf(label, sizeof label, "%s bytes", cases[i].fmt);
        snprintf(what, sizeof what, "this is %s %s image; bt reads JPEG, PNG and WebP",
                 cases[i].fmt[0] == 'A' ? "an" : "a", cases[i].fmt);
        expect(label, (const uint8_t *)cases[i].bytes, cases[i].n, "picture.jpg", 0,
               BT_ERR_UNSUPPORTED, what);
    }
    expect("text bytes", (const uint8_t *)"hello, world", 12, "notes.png", 0, BT_ERR_FORMAT,
           "not an image bt reads (starts with 68 65 6C 6C");
    expect("empty", (const uint8_t *)"", 0, "empty.webp", 0, BT_ERR_FORMAT, "empty");
    /* RIFF but not WebP (a WAV file). */
    expect("RIFF/WAVE bytes", (const uint8_t *)"RIFF\x24\0\0\0WAVEfmt ", 16, "sound.webp", 0,
           BT_ERR_FORMAT, "not an image");
}

/* Seeded truncations, byte mutations and splices of PNG and WebP fixtures. */
static void test_fuzz_loop(void) {
    enum { ITERS = 400 };
    const char *png_src[] = {"rgb8.png", "adam7_palette2.png", "grey16.png", "apng.png",
                             "rgba16.png"};
    const char *webp_src[] = {"webp_lossy.webp", "webp_lossless_alpha.webp",
                              "webp_animated.webp", "webp_icc_exif.webp",
                              "webp_animated_lossless.webp"};
    for (int fmt = 0; fmt < 2; fmt++) {
        const char **srcs = fmt ? webp_src : png_src;
        uint8_t *src[5];
        size_t len[5], maxlen = 0;
        for (int i = 0; i < 5; i++) {
            src[i] = fixture(srcs[i], &len[i]);
            if (len[i] > maxlen) maxlen = len[i];
        }
        uint8_t *b = malloc(maxlen);
        tu_rng r;
        tu_rng_seed(&r, 20261128 + (uint64_t)fmt);
        int n_ok = 0, n_err = 0, bad = 0;
        for (int it = 0; it < ITERS; it++) {
            int k = (int)(tu_rng_next(&r) % 5);
            size_t n = len[k];
            memcpy(b, src[k], n);
            int kind = it % 3;
            if (kind == 0) {
                n = 1 + tu_rng_next(&r) % (len[k] - 1);
            } else if (kind == 1) {
                int m = 1 + (int)(tu_rng_next(&r) % 8);
                for (int j = 0; j < m; j++) {
                    /* Mostly past the signature, so the decoders see the damage. */
                    size_t at = 8 + tu_rng_next(&r) % (n - 8);
                    b[at] = (uint8_t)tu_rng_next(&r);
                }
            } else {
                int k2 = (int)(tu_rng_next(&r) % 5);
                size_t at = 12 + tu_rng_next(&r) % (n - 12), from = tu_rng_next(&r) % len[k2];
                size_t cnt = 1 + tu_rng_next(&r) % 256;
                if (from + cnt > len[k2]) cnt = len[k2] - from;
                if (at + cnt > n) cnt = n - at;
                memcpy(b + at, src[k2] + from, cnt);
            }
            image_u8 img;
            bt_error_clear();
            bt_status st = image_decode_for(&img, b, n, "fuzz-case", NULL);
            if (st == BT_OK) {
                n_ok++;
                if (!(img.w > 0 && img.h > 0 && img.data)) bad++;
                unsigned sum = 0; /* touch every byte: ASan checks the size */
                for (size_t i = 0; i < (size_t)img.w * img.h * 3; i++) sum += img.data[i];
                (void)sum;
                image_u8_free(&img);
            } else {
                n_err++;
                if (!contains(bt_error_message(), "fuzz-case") || img.data) bad++;
            }
        }
        tu_check(bad == 0 && n_err > 0, "%s: %d damaged files, %d decoded, %d rejected naming "
                 "the source, %d malformed results", fmt ? "WebP" : "PNG", ITERS, n_ok, n_err,
                 bad);
        for (int i = 0; i < 5; i++) free(src[i]);
        free(b);
    }
}

int main(void) {
    test_png();
    test_webp();
    test_other_formats();
    test_fuzz_loop();
    return tu_finish();
}
