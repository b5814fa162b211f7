/* fuzz_tokenizer_check.h: the property the tokenizer loading targets (fuzz_tokenizer_json:
 * tokenizer.json, fuzz_tokenizer_files: vocab.json + merges.txt) check on a tokenizer that
 * loaded: it encodes a fixed text (special tokens, accents and an emoji among plain words),
 * counting its ids consistently (a call without room gives the count a call with room
 * returns), and decodes them without error beyond the documented BT_ERR_ARG. Frees the
 * tokenizer. */
#ifndef BT_FUZZ_TOKENIZER_CHECK_H
#define BT_FUZZ_TOKENIZER_CHECK_H

#include <stdint.h>
#include <stdlib.h>

#include "data/tokenizer.h"
#include "fuzz_util.h"

static void fuzz_tokenizer_check(tokenizer *t) {
    static const char text[] =
        "a small red circle <mask> on a grey background, the cat's caf\xc3\xa9 \xf0\x9f\x98\x80!";
    size_t n = 0;
    bt_status counted = tokenizer_encode(t, text, sizeof text - 1, NULL, 0, &n);
    FUZZ_CHECK(counted == BT_OK || (counted == BT_ERR_ARG && n > 0));
    int32_t *ids = malloc((n + 1) * sizeof *ids);
    size_t n2 = 0;
    FUZZ_CHECK(ids && tokenizer_encode(t, text, sizeof text - 1, ids, n + 1, &n2) == BT_OK &&
               n2 == n);
    char out[4096];
    size_t len;
    bt_status st = tokenizer_decode(t, ids, n, 0, out, sizeof out, &len);
    FUZZ_CHECK(st == BT_OK || st == BT_ERR_ARG);
    free(ids);
    tokenizer_free(t);
}

#endif
