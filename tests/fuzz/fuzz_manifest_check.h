/* fuzz_manifest_check.h: the properties the manifest fuzz targets (fuzz_manifest: JSON
 * Lines, fuzz_csv: CSV/TSV) check after loading one input under both error policies: a loaded
 * manifest's records have a non-empty image path, NUL-terminated captions and line numbers
 * that increase and stay within the lines read; every skipped line has a message. */
#ifndef BT_FUZZ_MANIFEST_CHECK_H
#define BT_FUZZ_MANIFEST_CHECK_H

#include <string.h>

#include "data/manifest.h"
#include "fuzz_util.h"

static void fuzz_manifest_check(const char *path) {
    for (int policy = 0; policy < 2; policy++) {
        manifest_options o = manifest_options_default();
        o.on_error = policy ? MANIFEST_ON_ERROR_SKIP : MANIFEST_ON_ERROR_STOP;
        manifest m;
        bt_status st = manifest_load(&m, path, &o);
        if (st == BT_OK) {
            for (size_t i = 0; i < m.n; i++) {
                FUZZ_CHECK(manifest_image(&m, i)[0] != '\0');
                (void)strlen(manifest_caption(&m, i));
                FUZZ_CHECK(m.records[i].line >= 1 && (size_t)m.records[i].line <= m.n_lines);
                FUZZ_CHECK(i == 0 || m.records[i].line > m.records[i - 1].line);
            }
        } else {
            FUZZ_CHECK(bt_error_message()[0] != '\0');
        }
        for (size_t i = 0; i < m.n_skipped; i++)
            FUZZ_CHECK(m.problems[i] && m.problems[i][0]);
        manifest_free(&m);
    }
}

#endif
