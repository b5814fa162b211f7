/* fuzz_jpeg.c: libFuzzer target for JPEG decoding + the BridgeTower preprocessing (src/data/
 * image.h) at a small size (shortest_edge 32), with and without DCT scaling. Property: a
 * decoded image has positive sizes within the pixel limit, and its preprocessed values are
 * finite. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "data/image.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    image_preprocess_config cfg;
    image_preprocess_config_default(&cfg, 32);
    for (int dct = 0; dct < 2; dct++) {
        cfg.use_dct_scaling = dct;
        image_u8 im;
        if (image_decode_jpeg_for(&im, data, size, "fuzz.jpg", &cfg) != BT_OK) {
            FUZZ_CHECK(bt_error_message()[0] != '\0');
            continue;
        }
        FUZZ_CHECK(im.w > 0 && im.h > 0 && (int64_t)im.w * im.h <= ((int64_t)1 << 26));
        float *px = malloc(3 * 32 * 32 * sizeof *px);
        image_preprocess(px, &im, &cfg);
        for (int i = 0; i < 3 * 32 * 32; i++)
            FUZZ_CHECK(isfinite(px[i]));
        free(px);
        image_u8_free(&im);
    }
    return 0;
}
