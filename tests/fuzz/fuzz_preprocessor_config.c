/* fuzz_preprocessor_config.c: libFuzzer target for the reader of a model directory's
 * preprocessor_config.json (image_preprocess_config_from_json, src/data/image.h), the file
 * every Hugging Face BridgeTower checkpoint carries and bt-train, bt-eval and bt-embed read.
 *
 * Properties: a refused file leaves a message naming it; an accepted one preprocesses an
 * image whose pixels span 0..255 (black, white and every channel's extremes) into finite
 * values, when its sizes are small enough to run here (at most 64 px). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "data/image.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_write_temp(data, size, "json");
    image_preprocess_config cfg;
    if (image_preprocess_config_from_json(&cfg, path) != BT_OK) {
        FUZZ_CHECK(strstr(bt_error_message(), path) != NULL);
        bt_error_clear();
        return 0;
    }
    FUZZ_CHECK(image_preprocess_config_validate(&cfg, path) == BT_OK);
    if (cfg.crop_size > 64 || cfg.longest_edge > 64) return 0;
    image_u8 im;
    image_u8_init(&im, 5, 3);
    for (int i = 0; i < 5 * 3 * 3; i++) im.data[i] = (uint8_t)(i % 2 ? 255 : 0);
    static float px[3 * 64 * 64];
    image_preprocess(px, &im, &cfg);
    for (int i = 0; i < 3 * cfg.crop_size * cfg.crop_size; i++) FUZZ_CHECK(isfinite(px[i]));
    image_u8_free(&im);
    return 0;
}
