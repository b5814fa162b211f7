/* fuzz_safetensors.c: libFuzzer target for the safetensors reader (src/safetensors.h):
 * any bytes as a file. Property: open either fails with a message, or every tensor it hands
 * out lies inside the mapping and can be copied out as its dtype allows. */
#include <stdint.h>
#include <stdlib.h>

#include "fuzz_util.h"
#include "safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_write_temp(data, size, "safetensors");
    safetensors_file f;
    bt_status st = safetensors_open(&f, path);
    if (st != BT_OK) {
        FUZZ_CHECK(bt_error_message()[0] != '\0');
        return 0;
    }
    const uint8_t *lo = f.map, *hi = (const uint8_t *)f.map + f.map_size;
    for (size_t i = 0; i < f.n_tensors; i++) {
        const safetensors_tensor *t = &f.tensors[i];
        FUZZ_CHECK(t->data >= lo && t->data + (t->end - t->begin) <= hi);
        FUZZ_CHECK(safetensors_find(&f, t->name) != NULL);
        if (t->numel > (1u << 20)) continue;
        void *buf = malloc(t->numel * 4 + 4);
        if (safetensors_read_f32(&f, t, buf, t->numel) != BT_OK)
            (void)safetensors_read_i32(&f, t, buf, t->numel);
        free(buf);
    }
    safetensors_close(&f);
    return 0;
}
