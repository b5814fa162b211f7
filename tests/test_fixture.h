/* test_fixture.h: test inputs shared by several test and benchmark binaries.
 *
 * - tu_fixture_f32 / tu_fixture_i32: a named tensor of a committed safetensors fixture, read
 *   whole after checking it exists with the expected element count (a failed check is
 *   recorded with tu_check and NULL returned).
 * - tu_synth_picture: a deterministic photo-like RGB test picture (smooth gradients, hard-edged
 *   blocks, Gaussian noise) from a seed.
 * - tu_encode_jpeg: libjpeg-turbo encoding into memory with the knobs the image tests need
 *   (input components and colour space, stored colour space, quality, 4:4:4 or the default
 *   4:2:0 chroma).
 *
 * Deliberately not here: the product's JPEG writer (src/data/synth.c writes the synthetic
 * dataset, always 4:4:4, with bt_status errors); decoding (src/data/image.h). */
#ifndef BT_TEST_FIXTURE_H
#define BT_TEST_FIXTURE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h> /* before jpeglib.h, which needs FILE and size_t */

#include <jpeglib.h>

#include "safetensors.h"

/* Tensor `name` of f as n floats (malloc'd, free()), or NULL after a failed tu_check naming
 * the fixture file and the tensor (absent, another element count, unreadable dtype). */
float *tu_fixture_f32(const safetensors_file *f, const char *name, size_t n);
/* The same for an integer tensor, as int32. */
int32_t *tu_fixture_i32(const safetensors_file *f, const char *name, size_t n);

/* rgb (h, w, 3), 8-bit, row-major: a picture with JPEG-relevant content, the same for the
 * same (w, h, seed). */
void tu_synth_picture(uint8_t *rgb, int w, int h, uint64_t seed);

/* Encodes pix (h, w, comps) of colour space in_cs as a baseline JPEG stored in jpeg_cs at
 * `quality`; full_chroma = 1 sets every component's sampling to 1x1 (4:4:4), 0 keeps
 * libjpeg's defaults. Returns the malloc'd JPEG bytes (free()) and their count in *size.
 * libjpeg errors exit the process (a test cannot go on without its input). */
unsigned char *tu_encode_jpeg(const uint8_t *pix, int w, int h, int comps, J_COLOR_SPACE in_cs,
                              J_COLOR_SPACE jpeg_cs, int quality, int full_chroma,
                              unsigned long *size);

/* Encodes pix (h, w, channels) as an 8-bit PNG, RGB (channels 3) or greyscale (1), with
 * libpng's simplified writer (default zlib level, adaptive filters). Returns the malloc'd
 * bytes (free()) and their count in *size; exits the process on a libpng error. */
uint8_t *tu_encode_png(const uint8_t *pix, int w, int h, int channels, size_t *size);

#endif
