/* fuzz_png.c: libFuzzer target for PNG decoding (libpng + bt's conversion to Pillow's RGB,
 * src/data/image_png.c) and the preprocessing of what it decodes; properties in
 * fuzz_image.h. Seeds: small fixtures of tests/fixtures/images/formats (sub-byte grey, Adam7
 * palette, 16-bit, APNG). */
#include "fuzz_image.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    return fuzz_image_one(image_decode_png, data, size, "fuzz.png");
}
