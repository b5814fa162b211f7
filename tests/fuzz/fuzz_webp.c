/* fuzz_webp.c: libFuzzer target for WebP decoding (libwebp's WebPAnimDecoder first frame,
 * src/data/image_webp.c) and the preprocessing of what it decodes; properties in
 * fuzz_image.h. Seeds: lossy, lossless with alpha, VP8X with ICC/EXIF, animated fixtures of
 * tests/fixtures/images/formats. */
#include "fuzz_image.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    return fuzz_image_one(image_decode_webp, data, size, "fuzz.webp");
}
