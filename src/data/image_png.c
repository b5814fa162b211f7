/* image_png.c: PNG bytes -> 8-bit RGB equal to Pillow's Image.open(f).convert("RGB")
 * (Debian's Pillow 9.4; fixtures in tests/fixtures/images/formats, made by
 * scripts/gen_format_fixtures.py, check every case below bit for bit).
 *
 * libpng (1.6) does the parsing, CRCs, inflate, unfiltering and Adam7 de-interlacing, and hands
 * back the samples as stored (png_set_packing: 1/2/4-bit samples one per byte, unscaled;
 * png_set_strip_16: the high byte of 16-bit samples, except 16-bit greyscale). No colour
 * transform is asked of libpng (no gamma, no tRNS expansion, no palette expansion): the
 * conversion to RGB is written here, as Pillow does it (PngImagePlugin's raw modes, then
 * Convert.c), which is not what libpng's expansions would give:
 *   grey 1/2/4/8-bit   v * 255 / (2^depth - 1), replicated (modes "1", "L;2", "L;4", "L")
 *   grey 16-bit        mode "I" (I;16B), and I -> RGB clips: min(v, 255), not v >> 8
 *   grey+alpha         grey (the 16-bit one takes the high byte: raw mode "LA;16B"), alpha
 *                      dropped without compositing
 *   RGB, RGBA          16-bit: the high byte ("RGB;16B", "RGBA;16B"); alpha dropped
 *   palette            PLTE entry of the index; an index past the PLTE's entries maps to
 *                      Pillow's initial palette ramp, (i, i, i); tRNS is ignored, as
 *                      convert("RGB") does
 * An APNG decodes to its default image (IDAT), which is Pillow's frame 0; the animation chunks
 * (acTL, fcTL, fdAT) are skipped like any unknown chunk.
 *
 * Strictness. Every libpng error is an error here: a bad CRC in any chunk (Pillow also rejects
 * a bad CRC in the chunks before the image data; it does not check IDAT's, libpng does), a
 * truncated file, a zlib stream that ends before the last row. libpng's warnings (benign
 * errors in its release build: extra compressed data after the last row, a palette index past
 * the PLTE) are not: the pixels are fully defined and Pillow accepts those files too. Reading
 * stops after the last image row, so chunks after the image data (and a missing IEND) are
 * never read, as in Pillow.
 *
 * Bombs. The IHDR size is checked against IMAGE_MAX_PIXELS (and 65535 per side, see
 * PNG_MAX_SIDE) before any image data is inflated.
 * Ancillary chunks are skipped unread except for their CRC (Pillow's convert("RGB") uses none
 * of them), so compressed text or ICC chunks are never inflated. libpng inflates the image
 * data row by row into rows bt allocated for the checked size, so the stream cannot inflate
 * past it; libpng stops at the end of the last row's data.
 *
 * Deliberately not here: gamma / ICC / sRGB / cHRM colour handling (Pillow's convert ignores
 * them), 16-bit output, alpha compositing, APNG frames after the first. */
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <png.h>

#include "data/image_codec.h"
#include "mem.h"

typedef struct png_job {
    png_structp png;
    png_infop info;
    const uint8_t *bytes;
    size_t n, pos;
    char msg[200];
    uint8_t *pixels;  /* (h, w, 3) output */
    uint8_t *raw;     /* one row as stored (or the whole image when interlaced) */
    png_bytep *rows;  /* row pointers into raw (interlaced) */
    uint8_t lut[256][3]; /* palette: Pillow's ramp, then the PLTE entries */
    int w, h, depth, color, interlace;
    int stage;        /* 0 header, 1 image data: for messages */
} png_job;

static void png_on_error(png_structp png, png_const_charp msg) {
    png_job *j = png_get_error_ptr(png);
    snprintf(j->msg, sizeof j->msg, "%s", msg);
    png_longjmp(png, 1);
}

static void png_on_warning(png_structp png, png_const_charp msg) {
    (void)png;
    (void)msg;
}

static void png_on_read(png_structp png, png_bytep out, size_t len) {
    png_job *j = png_get_io_ptr(png);
    if (len > j->n - j->pos) {
        j->pos = j->n;
        png_error(png, "unexpected end of file (truncated)");
    }
    memcpy(out, j->bytes + j->pos, len);
    j->pos += len;
}

/* Longest side bt reads. libpng allocates a few rows at the widest pixel format of the
 * decode (8 bytes per pixel): within IMAGE_MAX_PIXELS a 2^26 x 1 image would ask for ~1 GB of
 * row buffers. 65535 is JPEG's own limit per side; real PNGs stay far below it. */
#define PNG_MAX_SIDE 65535

/* Ancillary chunks libpng knows: skipped like unknown ones (CRC still checked). */
static const png_byte png_skipped_chunks[] = "bKGD\0cHRM\0eXIf\0gAMA\0hIST\0iCCP\0iTXt\0"
                                             "oFFs\0pCAL\0pHYs\0sBIT\0sCAL\0sPLT\0sRGB\0"
                                             "sTER\0tEXt\0tIME\0tRNS\0zTXt\0";

/* One row of stored samples (after packing / strip_16) to RGB. */
static void png_row_to_rgb(uint8_t *dst, const uint8_t *src, const png_job *j) {
    const int w = j->w;
    switch (j->color) {
    case PNG_COLOR_TYPE_GRAY:
        if (j->depth == 16) {
            for (int x = 0; x < w; x++) {
                unsigned v = (unsigned)src[2 * x] << 8 | src[2 * x + 1];
                dst[3 * x] = dst[3 * x + 1] = dst[3 * x + 2] = (uint8_t)(v > 255 ? 255 : v);
            }
        } else {
            const unsigned scale = 255u / ((1u << j->depth) - 1u); /* 255, 85, 17, 1 */
            for (int x = 0; x < w; x++)
                dst[3 * x] = dst[3 * x + 1] = dst[3 * x + 2] = (uint8_t)(src[x] * scale);
        }
        break;
    case PNG_COLOR_TYPE_GRAY_ALPHA:
        for (int x = 0; x < w; x++) dst[3 * x] = dst[3 * x + 1] = dst[3 * x + 2] = src[2 * x];
        break;
    case PNG_COLOR_TYPE_RGB:
        memcpy(dst, src, (size_t)w * 3);
        break;
    case PNG_COLOR_TYPE_RGB_ALPHA:
        for (int x = 0; x < w; x++) memcpy(dst + 3 * x, src + 4 * x, 3);
        break;
    case PNG_COLOR_TYPE_PALETTE:
        for (int x = 0; x < w; x++) memcpy(dst + 3 * x, j->lut[src[x]], 3);
        break;
    default:
        BT_ASSERT(0 && "colour type checked after the header");
    }
}

/* Runs libpng; 0 on success, 1 after a libpng error (message in j->msg), 2 above the pixel
 * limit, 4 out of memory. */
static int png_run(png_job *j) {
    png_structp png = j->png;
    png_infop info = j->info;
    if (setjmp(png_jmpbuf(png))) return 1;
    png_set_read_fn(png, j, png_on_read);
    png_set_user_limits(png, PNG_UINT_31_MAX, PNG_UINT_31_MAX); /* bt's own limit below */
    png_set_chunk_malloc_max(png, 8u << 20);
    png_set_crc_action(png, PNG_CRC_DEFAULT, PNG_CRC_ERROR_QUIT);
    png_set_keep_unknown_chunks(png, PNG_HANDLE_CHUNK_NEVER, NULL, 0);
    png_set_keep_unknown_chunks(png, PNG_HANDLE_CHUNK_NEVER, png_skipped_chunks,
                                (int)(sizeof png_skipped_chunks / 5));
    png_read_info(png, info);
    png_uint_32 w, h;
    png_get_IHDR(png, info, &w, &h, &j->depth, &j->color, &j->interlace, NULL, NULL);
    j->w = (int)w; /* libpng checked 1..2^31-1 */
    j->h = (int)h;
    if ((int64_t)w * (int64_t)h > IMAGE_MAX_PIXELS || w > PNG_MAX_SIDE || h > PNG_MAX_SIDE)
        return 2;
    if (j->color == PNG_COLOR_TYPE_PALETTE) {
        for (int i = 0; i < 256; i++) j->lut[i][0] = j->lut[i][1] = j->lut[i][2] = (uint8_t)i;
        png_colorp pal = NULL;
        int npal = 0;
        if (png_get_PLTE(png, info, &pal, &npal) == PNG_INFO_PLTE)
            for (int i = 0; i < npal && i < 256; i++) {
                j->lut[i][0] = pal[i].red;
                j->lut[i][1] = pal[i].green;
                j->lut[i][2] = pal[i].blue;
            }
    }
    if (j->depth < 8) png_set_packing(png);
    if (j->depth == 16 && j->color != PNG_COLOR_TYPE_GRAY) png_set_strip_16(png);
    int passes = png_set_interlace_handling(png);
    png_read_update_info(png, info);
    const size_t rowbytes = png_get_rowbytes(png, info);
    j->stage = 1;
    /* malloc, not bt_alloc: the sizes come from the file (bt_free is free). */
    j->pixels = malloc((size_t)w * (size_t)h * 3);
    if (!j->pixels) return 4;
    if (passes > 1) {
        j->raw = malloc(rowbytes * (size_t)h);
        j->rows = malloc(sizeof *j->rows * (size_t)h);
        if (!j->raw || !j->rows) return 4;
        for (size_t y = 0; y < h; y++) j->rows[y] = j->raw + y * rowbytes;
        png_read_image(png, j->rows);
        for (size_t y = 0; y < h; y++) png_row_to_rgb(j->pixels + y * (size_t)w * 3, j->rows[y], j);
    } else {
        j->raw = malloc(rowbytes);
        if (!j->raw) return 4;
        for (size_t y = 0; y < h; y++) {
            png_read_row(png, j->raw, NULL);
            png_row_to_rgb(j->pixels + y * (size_t)w * 3, j->raw, j);
        }
    }
    return 0;
}

bt_status image_decode_png(image_u8 *out, const uint8_t *bytes, size_t n, const char *name) {
    memset(out, 0, sizeof *out);
    png_job j;
    memset(&j, 0, sizeof j);
    j.bytes = bytes;
    j.n = n;
    j.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &j, png_on_error, png_on_warning);
    if (j.png) j.info = png_create_info_struct(j.png);
    if (!j.png || !j.info) {
        png_destroy_read_struct(j.png ? &j.png : NULL, NULL, NULL);
        return bt_fail(BT_ERR_NOMEM, "%s: out of memory starting the PNG decoder", name);
    }
    int rc = png_run(&j);
    bt_status st = BT_OK;
    if (rc == 1)
        st = bt_fail(BT_ERR_FORMAT, "%s: corrupt or truncated PNG (%s, at byte %zu of %zu): %s",
                     name, j.stage == 0 ? "header" : "image data", j.pos, n, j.msg);
    else if (rc == 2)
        st = bt_fail(BT_ERR_UNSUPPORTED,
                     "%s: PNG is %d x %d pixels, above the limit of %lld pixels and %d per side",
                     name, j.w, j.h, (long long)IMAGE_MAX_PIXELS, PNG_MAX_SIDE);
    else if (rc == 4)
        st = bt_fail(BT_ERR_NOMEM, "%s: out of memory decoding a %d x %d PNG", name, j.w, j.h);
    png_destroy_read_struct(&j.png, &j.info, NULL);
    free(j.raw);
    free(j.rows);
    if (st != BT_OK) {
        free(j.pixels);
        return st;
    }
    out->w = out->orig_w = j.w;
    out->h = out->orig_h = j.h;
    out->scale_num = 8;
    out->data = j.pixels;
    return BT_OK;
}
