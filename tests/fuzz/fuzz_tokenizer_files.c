/* fuzz_tokenizer_files.c: libFuzzer target for the two-file tokenizer form, vocab.json +
 * merges.txt (tokenizer_load_files, src/data/tokenizer.h; what tokenizer_load reads from a model
 * directory without tokenizer.json). merges.txt is bt's own line parser.
 *
 * Input: "VOCAB\0MERGES" gives both files; an input without a NUL byte is merges.txt alone,
 * against the committed test vocabulary (tests/fixtures/tokenizer/vocab.json), so that most
 * runs reach the merges parser with tokens it knows.
 * Properties: a refused pair sets a message that names one of the two files; a loaded
 * tokenizer encodes a fixed text, counting its ids consistently, and decodes them without error
 * beyond the documented BT_ERR_ARG. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/tokenizer.h"
#include "fuzz_util.h"

#ifndef BT_FUZZ_SOURCE
#define BT_FUZZ_SOURCE "."
#endif

static const char fixture_vocab[] = BT_FUZZ_SOURCE "/tests/fixtures/tokenizer/vocab.json";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    const char *vocab = fixture_vocab, *merges;
    if (nul) {
        vocab = fuzz_write_temp(data, (size_t)(nul - data), "vocab.json");
        merges = fuzz_write_temp(nul + 1, size - (size_t)(nul - data) - 1, "merges.txt");
    } else {
        merges = fuzz_write_temp(data, size, "merges.txt");
    }
    tokenizer t;
    if (tokenizer_load_files(&t, vocab, merges) != BT_OK) {
        const char *msg = bt_error_message();
        FUZZ_CHECK(strstr(msg, vocab) != NULL || strstr(msg, merges) != NULL);
        return 0;
    }
    static const char text[] = "the cat's <mask> sat on a mat, caf\xc3\xa9 \xf0\x9f\x98\x80!";
    size_t n = 0;
    bt_status counted = tokenizer_encode(&t, text, sizeof text - 1, NULL, 0, &n);
    FUZZ_CHECK(counted == BT_OK || (counted == BT_ERR_ARG && n > 0));
    int32_t *ids = malloc((n + 1) * sizeof *ids);
    size_t n2 = 0;
    FUZZ_CHECK(ids && tokenizer_encode(&t, text, sizeof text - 1, ids, n + 1, &n2) == BT_OK &&
               n2 == n);
    char out[4096];
    size_t len;
    bt_status st = tokenizer_decode(&t, ids, n, 0, out, sizeof out, &len);
    FUZZ_CHECK(st == BT_OK || st == BT_ERR_ARG);
    free(ids);
    tokenizer_free(&t);
    return 0;
}
