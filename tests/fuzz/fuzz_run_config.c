/* fuzz_run_config.c: libFuzzer target for the run config reader (`bt-train --config FILE`
 * and `--set key.path=value`, src/train/config.h).
 *
 * Input: the config file's text up to the first NUL byte, then up to 8 NUL-separated `--set`
 * assignments, applied in bt-train's order (file, overrides, finish).
 *
 * Properties:
 *   - a refused config leaves a message that names its source: the file ("fuzz/run.json")
 *     or the override ("--set: ...");
 *   - an accepted config survives the trip through its own text, the resolved config
 *     trainer_state.json stores and a resume reads back (docs/resume.md): that text parses
 *     and finishes again, prints the same, and passes the resume check against the
 *     original. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "status.h"
#include "train/config.h"

#define FUZZ_RUN_CONFIG_SOURCE "fuzz/run.json"
enum { FUZZ_MAX_SETS = 8 };

/* The message names the file or the override it came from. */
static void check_refusal(void) {
    const char *msg = bt_error_message();
    FUZZ_CHECK(msg[0] != '\0');
    FUZZ_CHECK(strstr(msg, FUZZ_RUN_CONFIG_SOURCE) || strncmp(msg, "--set: ", 7) == 0);
}

/* The accepted config's text reads back into the same config. */
static void check_round_trip(const bt_run_config *c) {
    char *text = bt_run_config_to_string(c);
    FUZZ_CHECK(text != NULL);
    bt_run_config back;
    bt_run_config_init(&back);
    FUZZ_CHECK(bt_run_config_parse(&back, text, "fuzz/round-trip.json") == BT_OK);
    FUZZ_CHECK(bt_run_config_finish(&back, "fuzz/round-trip.json") == BT_OK);
    char *again = bt_run_config_to_string(&back);
    FUZZ_CHECK(again != NULL && strcmp(text, again) == 0);
    char changed[256] = "?";
    FUZZ_CHECK(bt_run_config_check_resume(c, &back, "fuzz/trainer_state.json", changed,
                                          sizeof changed) == BT_OK);
    FUZZ_CHECK(changed[0] == '\0');
    free(again);
    free(text);
    bt_run_config_free(&back);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    memcpy(text, data, size);
    text[size] = '\0';
    /* the file, then the overrides: NUL-separated pieces of one buffer */
    const char *sets[FUZZ_MAX_SETS];
    size_t n_sets = 0;
    for (size_t at = strlen(text); at < size && n_sets < FUZZ_MAX_SETS;) {
        sets[n_sets++] = text + at + 1;
        at += 1 + strlen(text + at + 1);
    }
    bt_run_config c;
    bt_run_config_init(&c);
    bt_status s = bt_run_config_parse(&c, text, FUZZ_RUN_CONFIG_SOURCE);
    for (size_t i = 0; s == BT_OK && i < n_sets; i++) s = bt_run_config_set(&c, sets[i]);
    if (s == BT_OK) s = bt_run_config_finish(&c, FUZZ_RUN_CONFIG_SOURCE);
    if (s == BT_OK)
        check_round_trip(&c);
    else
        check_refusal();
    bt_error_clear();
    bt_run_config_free(&c);
    free(text);
    return 0;
}
