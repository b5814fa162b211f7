/* fuzz_config.c: libFuzzer target for the model config reader (config.json, src/model/
 * config.h) through bt's JSON rule (src/json_util.h). Properties: a config that parses has
 * sizes the rest of bt relies on (positive, divisible as required), and its text length
 * (max_text_len) is in [2, the model's longest] or refused naming the file. */
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
        /* the text length bt-eval and bt-embed evaluate at (max_text_len, or the model's) */
        int len = 0;
        if (bt_model_config_text_length(text, &c, "fuzz/config.json", &len) == BT_OK)
            FUZZ_CHECK(len >= 2 && len <= bt_model_config_max_text(&c));
        else
            FUZZ_CHECK(strstr(bt_error_message(), "fuzz/config.json") != NULL);
        bt_error_clear();
    } else {
        FUZZ_CHECK(bt_error_message()[0] != '\0');
    }
    free(text);
    return 0;
}
