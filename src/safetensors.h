/* safetensors.h: strict reader and atomic writer of the safetensors format.
 *
 * Format: 8-byte little-endian header length H, then H bytes of UTF-8 JSON
 * {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
 *  "__metadata__": {"k": "v"}}, optionally padded with spaces, then the data section;
 * offsets are relative to it.
 *
 * Reading memory-maps the file read-only (no second copy); every header is validated before
 * any tensor is handed out: file shorter than 8 bytes, header length beyond the file or
 * above 100 MB, header not UTF-8 JSON or not an object, an entry that is not an object of
 * exactly dtype/shape/data_offsets, negative or non-integer numbers, more than
 * SAFETENSORS_MAX_DIMS dims, unknown dtype, shape/offset disagreement
 * (numel*size != end-begin), offsets past the data section (truncated data), overlapping
 * ranges, duplicate names, "__metadata__" not an object of strings. Accepted as the format
 * allows: space padding after the JSON, bytes after the last tensor, gaps between tensors,
 * tensor data at any alignment, 0-d scalars (shape [], numel 1) and zero-size tensors.
 * Errors: BT_ERR_IO (cannot open/stat/map, not a regular file; with strerror),
 * BT_ERR_FORMAT (malformed content), BT_ERR_UNSUPPORTED (a dtype the format defines but bt
 * does not represent, e.g. F8_E4M3), BT_ERR_NOMEM. Every message reads
 * "<path>: tensor '<name>': <what is wrong>; expected <what>" (file-level problems omit the
 * tensor part).
 *
 * Writing: F32, BF16, I64 and I32 tensors (F32 sources may be converted to BF16 on write,
 * rounding to nearest even with bt_bf16_from_f32), compact JSON header built with cJSON
 * ("__metadata__" first, then entries in the given order), data contiguous in entry order,
 * header padded with spaces so the data section starts 8-aligned. Written through
 * bt_atomic_file (src/fileio.h): a temp file ".<name>.bt-tmp.<host>.<pid>.<n>" in the same
 * directory, fsync, rename, fsync of the directory: a crash never leaves a half-written file
 * under the final name and never destroys the previous one; an existing target that is not
 * a regular file (/dev/null, a FIFO, a directory) is refused; on any error the temp file is
 * removed. A path that is a symlink to a regular file is replaced by a regular file.
 * The header follows bt's one JSON rule (src/json_util.h): a name holding \u0000 or a key
 * given twice is refused (BT_ERR_FORMAT).
 *
 * Host byte order must be little-endian (checked at compile time).
 * Deliberately not here: which tensors a model expects (src/model/params.h does that). */
#ifndef BT_SAFETENSORS_H
#define BT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "dtype.h"
#include "status.h"

enum { SAFETENSORS_MAX_DIMS = 8 };

typedef struct safetensors_tensor {
    char *name;
    bt_dtype dtype;
    int ndim;
    int64_t shape[SAFETENSORS_MAX_DIMS];
    size_t numel;             /* product of shape; 1 for a 0-d scalar */
    size_t begin, end;        /* byte offsets inside the data section */
    const uint8_t *data;      /* points into the mapping (valid until close); may be
                               * unaligned in files from other writers */
} safetensors_tensor;

typedef struct safetensors_file {
    char *path;
    void *map;
    size_t map_size;
    safetensors_tensor *tensors; /* in header order */
    size_t n_tensors;
    char *metadata_json;         /* "__metadata__" object as compact JSON text (keys in file
                                  * order), or NULL when the file has none */
} safetensors_file;

/* Opens, maps and validates. On error *f is left closed (all zero; safe to call _close). */
bt_status safetensors_open(safetensors_file *f, const char *path);
/* Unmaps and frees; leaves *f zeroed, so closing twice is harmless. */
void safetensors_close(safetensors_file *f);

/* The tensor named `name`, or NULL. Linear search (headers hold a few hundred names). */
const safetensors_tensor *safetensors_find(const safetensors_file *f, const char *name);

/* A shape as error messages print it, "[2, 3, 4]" ("[]" for a scalar), cut to fit cap. Used
 * by every loader that reports a shape mismatch, so they all spell shapes alike. */
void safetensors_shape_str(char *out, size_t cap, int ndim, const int64_t *shape);

/* Copies a floating tensor (F32, BF16 or F16) into dst as fp32 (exact for all three).
 * Errors (naming file and tensor): BT_ERR_UNSUPPORTED for any other dtype (F64 included);
 * BT_ERR_SHAPE when numel != dst_numel. */
bt_status safetensors_read_f32(const safetensors_file *f, const safetensors_tensor *t,
                               float *dst, size_t dst_numel);
/* Copies an integer tensor (I64, I32, I16, I8, U8 or BOOL) into dst as int32. Errors:
 * BT_ERR_UNSUPPORTED for a non-integer dtype or an I64 value outside int32 (the message
 * gives the element and value); BT_ERR_SHAPE when numel != dst_numel; BT_ERR_FORMAT for a
 * BOOL byte other than 0 or 1. */
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
 * "__metadata__" of string pairs (metadata_kv: key0, value0, key1, value1, ..., NULL; NULL
 * or an empty list for none). Atomic: temp file + fsync + rename (+ fsync of the
 * directory). Refused before anything is written (BT_ERR_ARG, naming the path and tensor):
 * empty, non-UTF-8, duplicate or reserved ("__metadata__") names; a dtype other than F32,
 * BF16, I64, I32; src_dtype != dtype except F32 -> BF16; ndim outside 0..8; a negative dim;
 * NULL data for a non-empty tensor; an odd metadata list or duplicate metadata keys.
 * I/O failures (create, write, fsync, rename) return BT_ERR_IO and leave the previous file
 * intact. An entry's data may point into an open safetensors_file, even one mapping `path`
 * itself (rename leaves the mapped old file alone); rewriting a file bt wrote, entries and
 * metadata in file order, gives a byte-identical file. Two threads writing the same path
 * get distinct temp names (the last rename wins). */
bt_status safetensors_write(const char *path, const safetensors_entry *entries, size_t n,
                            const char *const *metadata_kv);
/* The same file written into an open stream (flushed, not synced), for callers that make
 * several files atomic together (bt_checkpoint_save with bt_atomic_open/close/commit).
 * `path` names the file in messages. Same checks and errors. */
bt_status safetensors_write_stream(FILE *fp, const char *path, const safetensors_entry *entries,
                                   size_t n, const char *const *metadata_kv);

#endif
