/* fuzz_jpeg.c: libFuzzer target for JPEG decoding + the BridgeTower preprocessing (src/data/
 * image.h) at a small size (shortest_edge 32), with and without DCT scaling. Property: a
 * decoded image has positive sizes within the pixel limit, and its preprocessed values are
 * finite (fuzz_check_decoded, fuzz_image.h: images up to 2^22 pixels are preprocessed). */
#include "fuzz_image.h"

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
        fuzz_check_decoded(&im, &cfg);
        image_u8_free(&im);
    }
    return 0;
}
