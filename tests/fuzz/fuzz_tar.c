/* fuzz_tar.c: libFuzzer target for the tar member reader (src/data/shards.h) and the
 * WebDataset sample grouping on top of it (manifest_load of a .tar), both error policies.
 * Properties: every member the reader returns lies inside the file, 512-byte aligned, with a
 * NUL-terminated name, and its bytes can be read back; the reader ends (0 or -1, with a
 * message); a loaded shard's records point at members inside the file; every skipped sample
 * has a message. */
#include <stdint.h>
#include <string.h>

#include "data/shards.h"
#include "fuzz_manifest_check.h"
#include "mem.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_write_temp(data, size, "tar");
    tar_reader r;
    bt_status st = tar_reader_open(&r, path);
    FUZZ_CHECK(st == BT_OK);
    tar_member m;
    int got, n = 0;
    while ((got = tar_reader_next(&r, &m, &st)) == 1) {
        FUZZ_CHECK(m.offset % 512 == 0 && m.offset <= size && m.size <= size - m.offset);
        FUZZ_CHECK(m.header < m.offset);
        (void)strlen(m.name);
        uint8_t *bytes;
        FUZZ_CHECK(shards_read_member(path, m.name, m.offset, m.size, &bytes) == BT_OK);
        FUZZ_CHECK(m.size == 0 || memcmp(bytes, data + m.offset, (size_t)m.size) == 0);
        bt_free(bytes);
        free(m.name);
        FUZZ_CHECK(++n <= (int)(size / 512));
    }
    FUZZ_CHECK(got == 0 || (got == -1 && bt_error_message()[0]));
    tar_reader_close(&r);

    fuzz_manifest_check(path);
    return 0;
}
