/* fuzz_trainer_state.c: libFuzzer target for the trainer_state.json reader (a checkpoint's
 * position that a resumed run starts from, src/train/trainer_state.h): each input is the
 * file bt_train_state_read reads.
 *
 * Properties:
 *   - a refused file leaves a message that names it;
 *   - an accepted state survives the trip through the text bt writes: that text parses and
 *     reads back, and writes the same text again. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "fuzz_util.h"
#include "json_util.h"
#include "status.h"
#include "train/trainer_state.h"

/* The state as the text bt_train_state_write writes (caller frees). */
static char *state_text(const bt_train_state *s) {
    cJSON *j = bt_train_state_to_json(s);
    char *text = bt_json_print_line(j);
    cJSON_Delete(j);
    FUZZ_CHECK(text != NULL);
    return text;
}

static void check_round_trip(const bt_train_state *s) {
    char *text = state_text(s);
    cJSON *j = NULL;
    FUZZ_CHECK(bt_json_parse(text, strlen(text), "fuzz/round-trip.json", &j) == BT_OK);
    bt_train_state back;
    bt_train_state_init(&back);
    FUZZ_CHECK(bt_train_state_from_json(&back, j, "fuzz/round-trip.json") == BT_OK);
    char *again = state_text(&back);
    FUZZ_CHECK(strcmp(text, again) == 0);
    free(again);
    bt_train_state_free(&back);
    cJSON_Delete(j);
    free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_write_temp(data, size, "json");
    bt_train_state s;
    bt_train_state_init(&s);
    if (bt_train_state_read(path, &s) == BT_OK)
        check_round_trip(&s);
    else
        FUZZ_CHECK(strstr(bt_error_message(), path) != NULL);
    bt_error_clear();
    bt_train_state_free(&s);
    return 0;
}
