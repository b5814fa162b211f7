/* fuzz_tokenizer_files.c: libFuzzer target for the two-file tokenizer form, vocab.json +
 * merges.txt (tokenizer_load_files, src/data/tokenizer.h; what tokenizer_load reads from a model
 * directory without tokenizer.json). merges.txt is bt's own line parser.
 *
 * Input: "VOCAB\0MERGES" gives both files; an input without a NUL byte is merges.txt alone,
 * against the committed test vocabulary (tests/fixtures/tokenizer/vocab.json), so that most
 * runs reach the merges parser with tokens it knows.
 * Properties: a refused pair sets a message that names one of the two files; a loaded
 * tokenizer passes fuzz_tokenizer_check.h. */
#include <stdint.h>
#include <string.h>

#include "fuzz_tokenizer_check.h"

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
    fuzz_tokenizer_check(&t);
    return 0;
}
