/* fuzz_manifest.c: libFuzzer target for the JSON Lines manifest reader (src/data/
 * manifest.h) through bt's JSON rule, both error policies. Properties: a loaded manifest's
 * records hold NUL-terminated strings inside its arena, every skipped line has a message. */
#include <stdint.h>
#include <string.h>

#include "data/manifest.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_write_temp(data, size, "jsonl");
    for (int policy = 0; policy < 2; policy++) {
        manifest_options o = manifest_options_default();
        o.on_error = policy ? MANIFEST_ON_ERROR_SKIP : MANIFEST_ON_ERROR_STOP;
        manifest m;
        bt_status st = manifest_load(&m, path, &o);
        if (st == BT_OK) {
            for (size_t i = 0; i < m.n; i++) {
                FUZZ_CHECK(manifest_image(&m, i)[0] != '\0');
                (void)strlen(manifest_caption(&m, i));
            }
        } else {
            FUZZ_CHECK(bt_error_message()[0] != '\0');
        }
        for (size_t i = 0; i < m.n_skipped; i++)
            FUZZ_CHECK(m.problems[i] && m.problems[i][0]);
        manifest_free(&m);
    }
    return 0;
}
