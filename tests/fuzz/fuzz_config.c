/* fuzz_config.c: libFuzzer target for the model config reader (config.json, src/model/
 * config.h) through bt's JSON rule (src/json_util.h). Property: a config that parses has
 * sizes the rest of bt relies on (positive, divisible as required). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/config.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    memcpy(text, data, size);
    text[size] = '\0';
    bt_model_config c;
    if (bt_model_config_parse(&c, text, "fuzz/config.json") == BT_OK) {
        FUZZ_CHECK(c.text_hidden > 0 && c.text_heads > 0 && c.text_hidden % c.text_heads == 0);
        FUZZ_CHECK(c.vocab_size > 0 && c.pad_token_id < c.vocab_size);
        FUZZ_CHECK(c.np == c.grid * c.grid + 1 && c.grid > 0);
    } else {
        FUZZ_CHECK(bt_error_message()[0] != '\0');
    }
    free(text);
    return 0;
}
