/* fuzz_tokenizer_encode.c: libFuzzer target for encode/decode with the committed test
 * tokenizer (tests/fixtures/tokenizer/tokenizer.json, byte-level BPE with all 256 byte
 * symbols). Properties, for any bytes: encode succeeds and counts its ids consistently
 * (a second call with room gives the same count); for valid UTF-8 text without added
 * tokens decode(encode(x)) == x (byte-level BPE loses nothing), and single/pair encodings
 * with truncation fit max_length. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "data/tokenizer.h"
#include "fuzz_util.h"
#include "json_util.h"

#ifndef BT_FUZZ_SOURCE
#define BT_FUZZ_SOURCE "."
#endif

static tokenizer tok;
static int loaded;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!loaded) {
        if (tokenizer_load_json(&tok, BT_FUZZ_SOURCE "/tests/fixtures/tokenizer/tokenizer.json") !=
            BT_OK) {
            fprintf(stderr, "fuzz: %s\n", bt_error_message());
            abort();
        }
        loaded = 1;
    }
    if (size > 4096) return 0;
    const char *text = (const char *)data;
    size_t n = 0;
    bt_status st = tokenizer_encode(&tok, text, size, NULL, 0, &n);
    FUZZ_CHECK(st == BT_OK || (st == BT_ERR_ARG && n > 0));
    int32_t *ids = malloc((n + 1) * sizeof *ids);
    size_t n2 = 0;
    FUZZ_CHECK(tokenizer_encode(&tok, text, size, ids, n + 1, &n2) == BT_OK && n2 == n);
    /* Added tokens (<s>, <mask>, ...) may strip the spaces around them, as in HF: the
     * round trip is checked on text without them. */
    if (bt_utf8_valid_prefix(data, size) == size && !memchr(data, '<', size)) {
        size_t cap = 4 * size + 16, len = 0;
        char *out = malloc(cap);
        FUZZ_CHECK(tokenizer_decode(&tok, ids, n, 0, out, cap, &len) == BT_OK);
        FUZZ_CHECK(len == size && memcmp(out, text, size) == 0);
        free(out);
    }
    int32_t single[16], mask[16];
    size_t ns = 0;
    FUZZ_CHECK(tokenizer_encode_single(&tok, text, size, 16, 1, 1, single, mask, &ns) == BT_OK &&
               ns == 16);
    size_t half = size / 2;
    FUZZ_CHECK(tokenizer_encode_pair(&tok, text, half, text + half, size - half, 16, 1, 0, single,
                                     mask, &ns) == BT_OK &&
               ns <= 16);
    free(ids);
    return 0;
}
