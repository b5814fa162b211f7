/* fuzz_manifest.c: libFuzzer target for the JSON Lines manifest reader (src/data/
 * manifest.h) through bt's JSON rule, both error policies; the properties are
 * fuzz_manifest_check.h's. */
#include <stdint.h>

#include "fuzz_manifest_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_manifest_check(fuzz_write_temp(data, size, "jsonl"));
    return 0;
}
