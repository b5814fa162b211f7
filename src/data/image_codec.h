/* image_codec.h: the format decoders behind image_decode_for (image.c), internal to src/data.
 *
 * Each decoder turns the whole file's bytes into 8-bit RGB equal to Pillow's
 * Image.open(f).convert("RGB") (image_png.c, image_webp.c say how), at full size (no DCT-style
 * downscaling exists for these formats: out->scale_num = 8, orig = w, h). Each checks the
 * stored width x height against IMAGE_MAX_PIXELS from the header, before any pixel data is
 * decoded or any image-sized buffer allocated. Errors name the file (`name`) and the problem;
 * on error *out is left empty (data NULL).
 *
 * Deliberately not here: format detection (image_sniff_format below is shared with image.c's
 * JPEG path), resizing, preprocessing. */
#ifndef BT_DATA_IMAGE_CODEC_H
#define BT_DATA_IMAGE_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "data/image.h"

typedef enum image_format {
    IMAGE_FORMAT_UNKNOWN = 0,
    IMAGE_FORMAT_JPEG,
    IMAGE_FORMAT_PNG,
    IMAGE_FORMAT_WEBP,
    IMAGE_FORMAT_OTHER /* recognized but not decoded (GIF, BMP, TIFF, ...): see *name */
} image_format;

/* The format of `b` from its first bytes (magic numbers), never from a file name. *name gets
 * the format's name ("PNG", "GIF", ...) or NULL when unknown. */
image_format image_sniff_format(const uint8_t *b, size_t n, const char **name);

bt_status image_decode_png(image_u8 *out, const uint8_t *bytes, size_t n, const char *name);
bt_status image_decode_webp(image_u8 *out, const uint8_t *bytes, size_t n, const char *name);

#endif
