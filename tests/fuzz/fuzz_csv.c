/* fuzz_csv.c: libFuzzer target for the CSV/TSV manifest reader (src/data/manifest.h: RFC 4180
 * quoting, header row, BOM), each input read as .csv and as .tsv, both error policies; the
 * properties are fuzz_manifest_check.h's. */
#include <stdint.h>

#include "fuzz_manifest_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *csv = fuzz_write_temp(data, size, "csv");
    fuzz_manifest_check(csv);
    /* The same bytes as "<temp>.csv.tsv" (removed after the run). */
    char tsv[600];
    snprintf(tsv, sizeof tsv, "%s.tsv", csv);
    fuzz_write_file(tsv, data, size);
    fuzz_manifest_check(tsv);
    unlink(tsv);
    return 0;
}
