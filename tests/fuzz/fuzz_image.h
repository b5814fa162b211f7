/* fuzz_image.h: the body the PNG and WebP libFuzzer targets share (fuzz_png.c, fuzz_webp.c):
 * decode the input with one decoder of src/data/image_codec.h, then run the BridgeTower
 * preprocessing at a small size (shortest_edge 32). Properties: a failure leaves a message and
 * no pixels; a decoded image has positive sizes within the pixel limit, full-size geometry
 * (orig == size, scale 8/8), and finite preprocessed values. */
#ifndef BT_FUZZ_IMAGE_H
#define BT_FUZZ_IMAGE_H

#include <math.h>
#include <stdint.h>

#include "data/image.h"
#include "data/image_codec.h"
#include "fuzz_util.h"

typedef bt_status (*fuzz_image_decoder)(image_u8 *out, const uint8_t *bytes, size_t n,
                                        const char *name);

static int fuzz_image_one(fuzz_image_decoder decode, const uint8_t *data, size_t size,
                          const char *name) {
    image_u8 im;
    if (decode(&im, data, size, name) != BT_OK) {
        FUZZ_CHECK(bt_error_message()[0] != '\0' && im.data == NULL);
        return 0;
    }
    FUZZ_CHECK(im.w > 0 && im.h > 0 && (int64_t)im.w * im.h <= IMAGE_MAX_PIXELS);
    FUZZ_CHECK(im.orig_w == im.w && im.orig_h == im.h && im.scale_num == 8 && im.data);
    image_preprocess_config cfg;
    image_preprocess_config_default(&cfg, 32);
    static float px[3 * 32 * 32];
    image_preprocess(px, &im, &cfg);
    for (int i = 0; i < 3 * 32 * 32; i++) FUZZ_CHECK(isfinite(px[i]));
    image_u8_free(&im);
    return 0;
}

#endif
