/* safetensors.h: strict reader and atomic writer of the safetensors format.
 *
 * Format: 8-byte little-endian header length H, then H bytes of JSON
 * {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
 *  "__metadata__": {"k": "v"}}, then the data section; offsets are relative to it.
 *
 * Reading memory-maps the file (no second copy); every header is validated before any
 * tensor is handed out: header length beyond the file, header not JSON or not an object,
 * unknown dtype, shape/offset disagreement (numel*size != end-begin), offsets out of range,
 * overlapping ranges, truncated data. Every error message names the file and the tensor.
 *
 * Writing: F32, BF16, I64 and I32 tensors (F32 sources may be converted to BF16 on write),
 * to a temp file in the same directory, fsync, rename: a crash never leaves a half-written
 * file under the final name and never destroys the previous one.
 *
 * Deliberately not here: which tensors a model expects (src/model/params.h does that). */
#ifndef BT_SAFETENSORS_H
#define BT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "dtype.h"
#include "status.h"

enum { SAFETENSORS_MAX_DIMS = 8 };

typedef struct safetensors_tensor {
    char *name;
    bt_dtype dtype;
    int ndim;
    int64_t shape[SAFETENSORS_MAX_DIMS];
    size_t numel;
    size_t begin, end;        /* byte offsets inside the data section */
    const uint8_t *data;      /* points into the mapping */
} safetensors_tensor;

typedef struct safetensors_file {
    char *path;
    void *map;
    size_t map_size;
    safetensors_tensor *tensors; /* in header order */
    size_t n_tensors;
    char *metadata_json;         /* "__metadata__" object as JSON text, or NULL */
} safetensors_file;

/* Opens, maps and validates. On error *f is left closed (safe to call _close). */
bt_status safetensors_open(safetensors_file *f, const char *path);
void safetensors_close(safetensors_file *f);

/* The tensor named `name`, or NULL. */
const safetensors_tensor *safetensors_find(const safetensors_file *f, const char *name);

/* Copies a floating tensor (F32, BF16 or F16) into dst as fp32. Errors (naming file and
 * tensor): not a floating dtype; numel != dst_numel. */
bt_status safetensors_read_f32(const safetensors_file *f, const safetensors_tensor *t,
                               float *dst, size_t dst_numel);
/* Copies an integer tensor (I64, I32, I16, I8, U8 or BOOL) into dst as int32. Errors: not
 * an integer dtype; numel != dst_numel; a value outside int32. */
bt_status safetensors_read_i32(const safetensors_file *f, const safetensors_tensor *t,
                               int32_t *dst, size_t dst_numel);

typedef struct safetensors_entry {
    const char *name;
    bt_dtype dtype;          /* dtype written to the file: F32, BF16, I64 or I32 */
    bt_dtype src_dtype;      /* dtype of `data` in memory; F32 -> BF16 converts on write */
    int ndim;                /* 0 for a scalar */
    int64_t shape[SAFETENSORS_MAX_DIMS];
    const void *data;
} safetensors_entry;

/* Writes entries in the given order (names must be unique), with an optional
 * "__metadata__" of string pairs (metadata_kv: key0, value0, key1, value1, ..., NULL).
 * Atomic: temp file + fsync + rename (+ fsync of the directory). */
bt_status safetensors_write(const char *path, const safetensors_entry *entries, size_t n,
                            const char *const *metadata_kv);

#endif
