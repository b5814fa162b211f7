/* fuzz_util.h: what the libFuzzer targets share: the loaders under test take paths, so each
 * input is written to one per-process temp file (rewritten every run), and the committed
 * fixtures are found through BT_FUZZ_SOURCE (the source tree, compiled in).
 *
 * A target returns 0 for every input; a crash, an ASan/UBSan report, a leak or a failed
 * FUZZ_CHECK (a property that must hold for every input) is a finding. */
#ifndef BT_FUZZ_UTIL_H
#define BT_FUZZ_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Aborts (a finding) when a property fails, with the condition on stderr. */
#define FUZZ_CHECK(cond)                                                                   \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            fprintf(stderr, "fuzz: property failed at %s:%d: %s\n", __FILE__, __LINE__,    \
                    #cond);                                                                \
            abort();                                                                       \
        }                                                                                  \
    } while (0)

/* Writes data to "<TMPDIR>/bt-fuzz-<pid>.<suffix>" (the same path every call) and returns
 * the path. */
static inline const char *fuzz_write_temp(const uint8_t *data, size_t n, const char *suffix) {
    static char path[512];
    if (!path[0]) {
        const char *tmp = getenv("TMPDIR");
        snprintf(path, sizeof path, "%s/bt-fuzz-%ld.%s", tmp && tmp[0] ? tmp : "/tmp",
                 (long)getpid(), suffix);
    }
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (n && fwrite(data, 1, n, f) != n) abort();
    if (fclose(f) != 0) abort();
    return path;
}

#endif
