/* fuzz_tokenizer_json.c: libFuzzer target for tokenizer.json loading (src/data/tokenizer.h).
 * Properties: a refusal sets a message; a tokenizer that loads passes fuzz_tokenizer_check.h
 * (encode counts consistently, decode fails with nothing but the documented BT_ERR_ARG). */
#include <stdint.h>

#include "fuzz_tokenizer_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_write_temp(data, size, "tokenizer.json");
    tokenizer t;
    if (tokenizer_load_json(&t, path) != BT_OK) {
        FUZZ_CHECK(bt_error_message()[0] != '\0');
        return 0;
    }
    fuzz_tokenizer_check(&t);
    return 0;
}
