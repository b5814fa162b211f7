/* fuzz_image.h: the body the PNG and WebP libFuzzer targets share (fuzz_png.c, fuzz_webp.c):
 * decode the input with one decoder of src/data/image_codec.h, then run the BridgeTower
 * preprocessing at a small size (shortest_edge 32); fuzz_jpeg.c shares fuzz_check_decoded.
 * Properties: a failure leaves a message and no pixels; a decoded image has positive sizes
 * within the pixel limit, full-size geometry (orig == size, scale 8/8), and finite
 * preprocessed values. */
#ifndef BT_FUZZ_IMAGE_H
#define BT_FUZZ_IMAGE_H

#include <math.h>
#include <stdint.h>

#include "data/image.h"
#include "data/image_codec.h"
#include "fuzz_util.h"

/* Preprocessing costs time in proportion to the decoded pixels: Pillow's antialiasing reads
 * every input pixel, and the horizontal pass runs on every row the vertical taps reach. An
 * extreme-aspect image within IMAGE_MAX_PIXELS (a 29 x 1,310,721 animated WebP canvas found
 * by fuzz_webp in session 30) takes 0.8 s to decode and preprocess in the release build and
 * 21.8 s under ASan + UBSan, past libFuzzer's 20 s per input. That is a slow image, not a
 * hang, so the targets preprocess only images up to 2^22 pixels, 1/16 of the limit and 1/9 of
 * that input; larger ones are checked as decoded. The code paths do not depend on the count:
 * the row loops only run longer. */
#define FUZZ_PREPROCESS_MAX_PIXELS ((int64_t)1 << 22)

/* The properties of a decoded image: positive sizes within the pixel limit, and finite
 * preprocessed values at shortest_edge 32 (cfg) when it is small enough to preprocess. */
static inline void fuzz_check_decoded(const image_u8 *im, const image_preprocess_config *cfg) {
    const int64_t pixels = (int64_t)im->w * im->h;
    FUZZ_CHECK(im->w > 0 && im->h > 0 && pixels <= IMAGE_MAX_PIXELS && im->data);
    if (pixels > FUZZ_PREPROCESS_MAX_PIXELS) return;
    static float px[3 * 32 * 32];
    FUZZ_CHECK(cfg->crop_size == 32);
    image_preprocess(px, im, cfg);
    for (int i = 0; i < 3 * 32 * 32; i++) FUZZ_CHECK(isfinite(px[i]));
}

typedef bt_status (*fuzz_image_decoder)(image_u8 *out, const uint8_t *bytes, size_t n,
                                        const char *name);

static inline int fuzz_image_one(fuzz_image_decoder decode, const uint8_t *data, size_t size,
                                 const char *name) {
    image_u8 im;
    if (decode(&im, data, size, name) != BT_OK) {
        FUZZ_CHECK(bt_error_message()[0] != '\0' && im.data == NULL);
        return 0;
    }
    FUZZ_CHECK(im.orig_w == im.w && im.orig_h == im.h && im.scale_num == 8);
    image_preprocess_config cfg;
    image_preprocess_config_default(&cfg, 32);
    fuzz_check_decoded(&im, &cfg);
    image_u8_free(&im);
    return 0;
}

#endif
