/* fuzz_tokenizer_json.c: libFuzzer target for tokenizer.json loading (src/data/tokenizer.h).
 * Property: a tokenizer that loads encodes and decodes a fixed text without error beyond
 * the documented BT_ERR_ARG (an id outside the vocabulary cannot come from encode). */
#include <stdint.h>
#include <stdlib.h>

#include "data/tokenizer.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_write_temp(data, size, "tokenizer.json");
    tokenizer t;
    if (tokenizer_load_json(&t, path) != BT_OK) {
        FUZZ_CHECK(bt_error_message()[0] != '\0');
        return 0;
    }
    static const char text[] = "a small red circle <mask> on a grey background, caf\xc3\xa9!";
    int32_t ids[256];
    size_t n = 0;
    bt_status st = tokenizer_encode(&t, text, sizeof text - 1, ids, 256, &n);
    if (st == BT_OK) {
        char out[4096];
        size_t len;
        st = tokenizer_decode(&t, ids, n, 0, out, sizeof out, &len);
        FUZZ_CHECK(st == BT_OK || st == BT_ERR_ARG);
    }
    tokenizer_free(&t);
    return 0;
}
