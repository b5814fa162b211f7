/* fuzz_util.h: what the libFuzzer targets share: the loaders under test take paths, so each
 * input is written to per-process temp files (rewritten every run), and the committed
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

/* The directory for temporary files: $TMPDIR, else /dev/shm when there is one (a memory file
 * system keeps runs/s up), else /tmp. */
static inline const char *fuzz_temp_dir(void) {
    const char *tmp = getenv("TMPDIR");
    if (!tmp || !tmp[0]) tmp = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    return tmp;
}

/* Writes n bytes of data to path (created or truncated); aborts when it cannot. */
static inline void fuzz_write_file(const char *path, const uint8_t *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (n && fwrite(data, 1, n, f) != n) abort();
    if (fclose(f) != 0) abort();
}

/* Writes data to "<fuzz_temp_dir()>/bt-fuzz-<pid>.<suffix>" (the same path for the same suffix
 * every call; up to FUZZ_TEMP_FILES suffixes, for loaders that read several files) and
 * returns the path. */
#define FUZZ_TEMP_FILES 4
static char fuzz_temp_paths[FUZZ_TEMP_FILES][512];

static void fuzz_remove_temp(void) {
    for (int i = 0; i < FUZZ_TEMP_FILES; i++)
        if (fuzz_temp_paths[i][0]) unlink(fuzz_temp_paths[i]);
}

static inline const char *fuzz_write_temp(const uint8_t *data, size_t n, const char *suffix) {
    char want[512];
    snprintf(want, sizeof want, "%s/bt-fuzz-%ld.%s", fuzz_temp_dir(), (long)getpid(), suffix);
    int slot = 0;
    while (slot < FUZZ_TEMP_FILES && fuzz_temp_paths[slot][0] &&
           strcmp(fuzz_temp_paths[slot], want) != 0)
        slot++;
    if (slot == FUZZ_TEMP_FILES) abort(); /* more suffixes than slots: a defect of the target */
    char *path = fuzz_temp_paths[slot];
    if (!path[0]) {
        if (slot == 0) atexit(fuzz_remove_temp);
        memcpy(path, want, sizeof want);
    }
    fuzz_write_file(path, data, n);
    return path;
}

#endif
