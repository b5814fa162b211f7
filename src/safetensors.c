/* safetensors.c: strict reader (mmap + full header validation) and atomic writer of the
 * safetensors format (see safetensors.h for the layout).
 *
 * Reader: the file is mapped read-only; the header is checked to be UTF-8 JSON (cJSON), an
 * object of {dtype, shape, data_offsets} entries plus an optional "__metadata__" object of
 * strings, and every entry is cross-checked (dtype known, numel * elem_size == end - begin,
 * offsets inside the data section, no two ranges overlapping, no duplicate names) before
 * safetensors_open returns. Tolerated, as the format allows: trailing spaces after the JSON
 * header, bytes after the last tensor, unaligned tensor data (the copy-out functions use
 * memcpy), gaps between tensors.
 *
 * Writer: header built with cJSON (compact), tensors stored contiguously in entry order,
 * header padded with spaces to a multiple of 8 bytes so the data section is 8-aligned (as
 * the reference implementation does). Written through bt_atomic_file (src/fileio.h: temp
 * file in the same directory, fsync, rename, fsync of the directory; an existing target that
 * is not a regular file is refused); any failure removes the temp file and leaves the
 * previous file untouched.
 *
 * Deliberately not here: big-endian hosts (refused at compile time), the dtypes bt never
 * computes in (F64, F8, U16..U64 are read as metadata only, or refused), protection
 * against another process truncating the file while it is mapped (that would SIGBUS, as
 * with any mmap reader). */
#include "safetensors.h"

#include "fileio.h"
#include "json_util.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c stores and reads tensor data in host order: little-endian hosts only"
#endif

/* The reference implementation refuses headers above 100 MB; so do we, before cJSON
 * allocates a tree for a hostile length. Real checkpoints have headers of ~100 KB. */
#define ST_HEADER_MAX ((uint64_t)100000000)
/* Largest integer a double (cJSON's number type) holds exactly. */
#define ST_JSON_INT_MAX 9007199254740992.0
/* Write granularity: bounded stdio calls, and the size of the BF16 conversion buffer. */
enum { ST_CHUNK_BYTES = 1 << 20 };
/* errno after a failed stdio call; stdio may leave it 0, which must not read as success. */
#define ST_ERRNO() (errno ? errno : EIO)

static const char st_supported[] = "F32, BF16, F16, F64, I64, I32, I16, I8, U8, BOOL";

/* dtype names the safetensors format defines but bt does not represent: a file holding one
 * is valid, just not usable here (BT_ERR_UNSUPPORTED rather than BT_ERR_FORMAT). */
static const char *const st_foreign_dtypes[] = {
    "U16", "U32", "U64", "F8_E4M3", "F8_E5M2", "F8_E8M0", "F6_E2M3", "F6_E3M2", "F4", "C64",
};

/* Formats "<path>: tensor '<name>': <what>" (or "<path>: <what>" without a name). */
static bt_status st_fail(bt_status code, const char *path, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static bt_status st_fail(bt_status code, const char *path, const char *name, const char *fmt, ...) {
    char what[1536];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (name) return bt_fail(code, "%s: tensor '%s': %s", path, name, what);
    return bt_fail(code, "%s: %s", path, what);
}

/* Offset of the first byte that breaks strict UTF-8 (bt_utf8_valid_prefix), or n when all
 * is well. With json_text set, control bytes other than JSON whitespace are also refused:
 * they are never valid in JSON, and a raw NUL would silently cut a C string short. */
static size_t st_utf8_check(const uint8_t *s, size_t n, int json_text) {
    size_t bad = bt_utf8_valid_prefix(s, n);
    if (json_text)
        for (size_t i = 0; i < bad; i++)
            if (s[i] < 0x20 && s[i] != '\t' && s[i] != '\n' && s[i] != '\r') return i;
    return bad;
}

static const char *st_json_type(const cJSON *v) {
    if (cJSON_IsObject(v)) return "object";
    if (cJSON_IsArray(v)) return "array";
    if (cJSON_IsString(v)) return "string";
    if (cJSON_IsNumber(v)) return "number";
    if (cJSON_IsBool(v)) return "boolean";
    if (cJSON_IsNull(v)) return "null";
    return "value";
}

/* A JSON number that is a non-negative integer exactly representable in a double. */
static int st_json_uint(const cJSON *v, uint64_t *out) {
    if (!cJSON_IsNumber(v)) return 0;
    double d = v->valuedouble;
    if (!(d >= 0.0 && d <= ST_JSON_INT_MAX) || d != floor(d)) return 0;
    *out = (uint64_t)d;
    return 1;
}

/* Describes a JSON value that failed st_json_uint, for the error message. */
static void st_describe_bad_uint(const cJSON *v, char *buf, size_t cap) {
    if (cJSON_IsNumber(v))
        bt_json_number_str(buf, cap, v->valuedouble);
    else
        snprintf(buf, cap, "a %s", st_json_type(v));
}

void safetensors_shape_str(char *out, size_t cap, int ndim, const int64_t *shape) {
    size_t n = (size_t)snprintf(out, cap, "[");
    for (int k = 0; k < ndim && n < cap; k++)
        n += (size_t)snprintf(out + n, cap - n, "%s%lld", k ? ", " : "", (long long)shape[k]);
    if (n < cap) snprintf(out + n, cap - n, "]");
}

/* numel of a shape; 0 on size_t overflow (*overflow set). A zero dimension wins over an
 * overflowing product of the others. */
static size_t st_numel(const int64_t *shape, int ndim, int *overflow) {
    size_t numel = 1;
    int over = 0, zero = 0;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] == 0) zero = 1;
        if (!over && __builtin_mul_overflow(numel, (size_t)shape[d], &numel)) over = 1;
    }
    *overflow = over && !zero;
    return zero ? 0 : (over ? 0 : numel);
}

/* ---------------------------------------------------------------------------------------
 * Reader
 * ---------------------------------------------------------------------------------------
 * Longer than ~120 lines on purpose: every field of one header entry is checked in turn (dtype,
 * shape, offsets, their products and the file bounds), each with its own message; the order of
 * the checks is the order a reader needs them. */
static bt_status st_parse_entry(safetensors_tensor *t, const cJSON *entry, const char *path,
                                uint64_t data_size) {
    const char *name = t->name;
    if (!cJSON_IsObject(entry))
        return st_fail(BT_ERR_FORMAT, path, name,
                       "entry is a JSON %s; expected an object "
                       "{\"dtype\": .., \"shape\": [..], \"data_offsets\": [begin, end]}",
                       st_json_type(entry));

    const cJSON *dtype = NULL, *shape = NULL, *offsets = NULL;
    for (const cJSON *c = entry->child; c; c = c->next) {
        const cJSON **slot = NULL;
        if (strcmp(c->string, "dtype") == 0)
            slot = &dtype;
        else if (strcmp(c->string, "shape") == 0)
            slot = &shape;
        else if (strcmp(c->string, "data_offsets") == 0)
            slot = &offsets;
        if (!slot)
            return st_fail(BT_ERR_FORMAT, path, name,
                           "unknown key \"%s\" in the entry; expected only dtype, shape and "
                           "data_offsets",
                           c->string);
        if (*slot)
            return st_fail(BT_ERR_FORMAT, path, name,
                           "key \"%s\" appears twice in the entry; expected it once", c->string);
        *slot = c;
    }
    if (!dtype || !shape || !offsets)
        return st_fail(BT_ERR_FORMAT, path, name,
                       "entry has no \"%s\"; expected dtype, shape and data_offsets",
                       !dtype   ? "dtype"
                       : !shape ? "shape"
                                : "data_offsets");

    /* dtype */
    if (!cJSON_IsString(dtype))
        return st_fail(BT_ERR_FORMAT, path, name, "dtype is a JSON %s; expected a string (%s)",
                       st_json_type(dtype), st_supported);
    t->dtype = bt_dtype_from_name(dtype->valuestring);
    if (t->dtype == BT_DTYPE_UNKNOWN) {
        for (size_t i = 0; i < sizeof st_foreign_dtypes / sizeof st_foreign_dtypes[0]; i++)
            if (strcmp(dtype->valuestring, st_foreign_dtypes[i]) == 0)
                return st_fail(BT_ERR_UNSUPPORTED, path, name,
                               "dtype \"%s\" is valid safetensors but not supported by bt; "
                               "expected one of %s",
                               dtype->valuestring, st_supported);
        return st_fail(BT_ERR_FORMAT, path, name, "unknown dtype \"%s\"; expected one of %s",
                       dtype->valuestring, st_supported);
    }

    /* shape */
    if (!cJSON_IsArray(shape))
        return st_fail(BT_ERR_FORMAT, path, name,
                       "shape is a JSON %s; expected an array of non-negative integers",
                       st_json_type(shape));
    int ndim = cJSON_GetArraySize(shape);
    if (ndim > SAFETENSORS_MAX_DIMS)
        return st_fail(BT_ERR_FORMAT, path, name, "shape has %d dimensions; expected at most %d",
                       ndim, SAFETENSORS_MAX_DIMS);
    t->ndim = ndim;
    int d = 0;
    for (const cJSON *c = shape->child; c; c = c->next, d++) {
        uint64_t v;
        if (!st_json_uint(c, &v)) {
            char got[64];
            st_describe_bad_uint(c, got, sizeof got);
            return st_fail(BT_ERR_FORMAT, path, name,
                           "shape dimension %d is %s; expected a non-negative integer up to "
                           "2^53 (9007199254740992)", d, got);
        }
        t->shape[d] = (int64_t)v;
    }
    int overflow;
    t->numel = st_numel(t->shape, ndim, &overflow);
    size_t esize = bt_dtype_size(t->dtype);
    size_t nbytes = 0;
    if (overflow || __builtin_mul_overflow(t->numel, esize, &nbytes)) {
        char s[256];
        safetensors_shape_str(s, sizeof s, ndim, t->shape);
        return st_fail(BT_ERR_FORMAT, path, name,
                       "shape %s overflows the addressable size; expected a tensor that fits "
                       "in the file",
                       s);
    }

    /* data_offsets */
    if (!cJSON_IsArray(offsets) || cJSON_GetArraySize(offsets) != 2)
        return st_fail(BT_ERR_FORMAT, path, name,
                       "data_offsets is a JSON %s%s; expected an array [begin, end]",
                       st_json_type(offsets), cJSON_IsArray(offsets) ? " of the wrong length" : "");
    uint64_t be[2];
    int k = 0;
    for (const cJSON *c = offsets->child; c; c = c->next, k++) {
        if (!st_json_uint(c, &be[k])) {
            char got[64];
            st_describe_bad_uint(c, got, sizeof got);
            return st_fail(BT_ERR_FORMAT, path, name,
                           "data_offsets[%d] is %s; expected a non-negative integer", k, got);
        }
    }
    if (be[0] > be[1])
        return st_fail(BT_ERR_FORMAT, path, name,
                       "data_offsets [%llu, %llu] ends before it begins; expected begin <= end",
                       (unsigned long long)be[0], (unsigned long long)be[1]);
    if (be[1] - be[0] != (uint64_t)nbytes) {
        char s[256];
        safetensors_shape_str(s, sizeof s, ndim, t->shape);
        return st_fail(BT_ERR_FORMAT, path, name,
                       "data_offsets [%llu, %llu] span %llu bytes but shape %s of %s needs "
                       "%zu; expected end - begin = numel * %zu",
                       (unsigned long long)be[0], (unsigned long long)be[1],
                       (unsigned long long)(be[1] - be[0]), s, bt_dtype_name(t->dtype), nbytes,
                       esize);
    }
    if (be[1] > data_size)
        return st_fail(BT_ERR_FORMAT, path, name,
                       "data_offsets [%llu, %llu] reach past the data section: %llu bytes "
                       "expected after the header, %llu present (file truncated?); expected "
                       "end <= %llu",
                       (unsigned long long)be[0], (unsigned long long)be[1],
                       (unsigned long long)be[1], (unsigned long long)data_size,
                       (unsigned long long)data_size);
    t->begin = (size_t)be[0];
    t->end = (size_t)be[1];
    return BT_OK;
}

static bt_status st_parse_metadata(safetensors_file *f, const cJSON *meta) {
    if (!cJSON_IsObject(meta))
        return st_fail(BT_ERR_FORMAT, f->path, NULL,
                       "\"__metadata__\" is a JSON %s; expected an object of strings",
                       st_json_type(meta));
    for (const cJSON *c = meta->child; c; c = c->next) {
        if (!cJSON_IsString(c))
            return st_fail(BT_ERR_FORMAT, f->path, NULL,
                           "\"__metadata__\" key \"%s\" is a JSON %s; expected a string", c->string,
                           st_json_type(c));
        for (const cJSON *p = meta->child; p != c; p = p->next)
            if (strcmp(p->string, c->string) == 0)
                return st_fail(BT_ERR_FORMAT, f->path, NULL,
                               "\"__metadata__\" key \"%s\" appears twice; expected unique "
                               "keys",
                               c->string);
    }
    char *text = cJSON_PrintUnformatted(meta);
    if (!text) return st_fail(BT_ERR_NOMEM, f->path, NULL, "out of memory printing metadata");
    f->metadata_json = strdup(text);
    cJSON_free(text);
    if (!f->metadata_json)
        return st_fail(BT_ERR_NOMEM, f->path, NULL, "out of memory copying metadata");
    return BT_OK;
}

static int st_cmp_name(const void *a, const void *b) {
    const safetensors_tensor *x = *(const safetensors_tensor *const *)a;
    const safetensors_tensor *y = *(const safetensors_tensor *const *)b;
    return strcmp(x->name, y->name);
}

static int st_cmp_range(const void *a, const void *b) {
    const safetensors_tensor *x = *(const safetensors_tensor *const *)a;
    const safetensors_tensor *y = *(const safetensors_tensor *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

/* Duplicate names and overlapping byte ranges, across all entries. */
static bt_status st_check_cross(const safetensors_file *f) {
    size_t n = f->n_tensors;
    if (n < 2) return BT_OK;
    const safetensors_tensor **order = malloc(n * sizeof *order);
    if (!order) return st_fail(BT_ERR_NOMEM, f->path, NULL, "out of memory (%zu tensors)", n);
    for (size_t i = 0; i < n; i++)
        order[i] = &f->tensors[i];

    bt_status st = BT_OK;
    qsort(order, n, sizeof *order, st_cmp_name);
    for (size_t i = 1; i < n && st == BT_OK; i++)
        if (strcmp(order[i - 1]->name, order[i]->name) == 0)
            st = st_fail(BT_ERR_FORMAT, f->path, order[i]->name,
                         "name appears twice in the header; expected unique tensor names");

    /* Sorted by begin, a non-empty range overlaps an earlier one exactly when it starts
     * before the furthest end seen so far. Empty tensors occupy no bytes. */
    qsort(order, n, sizeof *order, st_cmp_range);
    const safetensors_tensor *furthest = NULL;
    for (size_t i = 0; i < n && st == BT_OK; i++) {
        const safetensors_tensor *t = order[i];
        if (t->begin == t->end) continue;
        if (furthest && t->begin < furthest->end)
            st = st_fail(BT_ERR_FORMAT, f->path, t->name,
                         "data_offsets [%zu, %zu] overlap those of tensor '%s' [%zu, %zu]; "
                         "expected disjoint byte ranges",
                         t->begin, t->end, furthest->name, furthest->begin, furthest->end);
        if (!furthest || t->end > furthest->end) furthest = t;
    }
    free(order);
    return st;
}

/* Validates the mapped file and fills f->tensors; f->path, map and map_size are set. */
static bt_status st_parse(safetensors_file *f) {
    const uint8_t *bytes = f->map;
    const char *path = f->path;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = (hlen << 8) | bytes[i];
    uint64_t after = (uint64_t)f->map_size - 8;
    if (hlen > after)
        return st_fail(BT_ERR_FORMAT, path, NULL,
                       "header length %llu exceeds the %llu bytes after the length field "
                       "(truncated, or not a safetensors file); expected a header length <= "
                       "%llu",
                       (unsigned long long)hlen, (unsigned long long)after,
                       (unsigned long long)after);
    if (hlen > ST_HEADER_MAX)
        return st_fail(BT_ERR_FORMAT, path, NULL,
                       "header length %llu is absurdly large; expected at most %llu bytes",
                       (unsigned long long)hlen, (unsigned long long)ST_HEADER_MAX);
    if (hlen < 2)
        return st_fail(BT_ERR_FORMAT, path, NULL,
                       "header length %llu; expected at least 2 bytes of JSON object",
                       (unsigned long long)hlen);

    const char *hdr = (const char *)bytes + 8;
    size_t bad = st_utf8_check((const uint8_t *)hdr, (size_t)hlen, 1);
    if (bad != hlen)
        return st_fail(BT_ERR_FORMAT, path, NULL,
                       "header byte %zu (0x%02x) is not valid UTF-8 JSON text; expected a "
                       "UTF-8 JSON header",
                       bad, (unsigned)(uint8_t)hdr[bad]);

    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(hdr, (size_t)hlen, &end, 0);
    if (!root) {
        size_t at = end && end >= hdr ? (size_t)(end - hdr) : 0;
        if (at > hlen) at = hlen;
        int show = (int)(hlen - at < 24 ? hlen - at : 24);
        return st_fail(BT_ERR_FORMAT, path, NULL,
                       "header is not valid JSON (parse error at header byte %zu, near "
                       "\"%.*s\"); expected a JSON object",
                       at, show, hdr + at);
    }
    /* The format allows space padding after the JSON; anything else is corruption. */
    for (const char *p = end; p < hdr + hlen; p++) {
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            cJSON_Delete(root);
            return st_fail(BT_ERR_FORMAT, path, NULL,
                           "unexpected byte 0x%02x after the JSON header at header byte %td; "
                           "expected only space padding",
                           (unsigned)(uint8_t)*p, p - hdr);
        }
    }
    /* The one JSON rule (json_util.h): no \\u0000 in names ("input_ids\\u0000x" would read
     * as input_ids), no key twice. */
    bt_status jst = bt_json_check(root, hdr, (size_t)(end - hdr), path);
    if (jst != BT_OK) {
        cJSON_Delete(root);
        return jst;
    }
    if (!cJSON_IsObject(root)) {
        bt_status st = st_fail(BT_ERR_FORMAT, path, NULL,
                               "header is a JSON %s; expected a JSON object "
                               "{\"name\": {\"dtype\", \"shape\", \"data_offsets\"}, ...}",
                               st_json_type(root));
        cJSON_Delete(root);
        return st;
    }

    size_t count = 0, n_meta = 0;
    for (const cJSON *c = root->child; c; c = c->next) {
        if (strcmp(c->string, "__metadata__") == 0)
            n_meta++;
        else
            count++;
    }
    bt_status st = BT_OK;
    if (n_meta > 1)
        st = st_fail(BT_ERR_FORMAT, path, NULL,
                     "\"__metadata__\" appears %zu times; expected at most once", n_meta);
    if (st == BT_OK && count) {
        f->tensors = calloc(count, sizeof *f->tensors);
        if (!f->tensors)
            st = st_fail(BT_ERR_NOMEM, path, NULL, "out of memory (%zu tensors)", count);
    }
    uint64_t data_size = after - hlen;
    for (const cJSON *c = root->child; c && st == BT_OK; c = c->next) {
        if (strcmp(c->string, "__metadata__") == 0) {
            st = st_parse_metadata(f, c);
            continue;
        }
        safetensors_tensor *t = &f->tensors[f->n_tensors];
        t->name = strdup(c->string);
        if (!t->name) {
            st = st_fail(BT_ERR_NOMEM, path, NULL, "out of memory copying tensor names");
            break;
        }
        f->n_tensors++;
        st = st_parse_entry(t, c, path, data_size);
        t->data = bytes + 8 + hlen + t->begin;
    }
    cJSON_Delete(root);
    if (st == BT_OK) st = st_check_cross(f);
    return st;
}

bt_status safetensors_open(safetensors_file *f, const char *path) {
    BT_ASSERT(f && path);
    memset(f, 0, sizeof *f);
    int fd;
    struct stat sb;
    bt_status ost = bt_open_regular(path, "safetensors", &fd, &sb);
    if (ost != BT_OK) return ost;
    if (sb.st_size < 8) {
        close(fd);
        return st_fail(BT_ERR_FORMAT, path, NULL,
                       "file is %lld bytes, too short for the 8-byte header length; expected "
                       "a safetensors file (length, JSON header, data)",
                       (long long)sb.st_size);
    }
    void *map = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd); /* the mapping keeps the file referenced */
    if (map == MAP_FAILED)
        return st_fail(BT_ERR_IO, path, NULL, "cannot map %lld bytes: %s", (long long)sb.st_size,
                       strerror(e));
    f->map = map;
    f->map_size = (size_t)sb.st_size;
    f->path = strdup(path);
    if (!f->path) {
        safetensors_close(f);
        return st_fail(BT_ERR_NOMEM, path, NULL, "out of memory");
    }
    bt_status st = st_parse(f);
    if (st != BT_OK) safetensors_close(f);
    return st;
}

void safetensors_close(safetensors_file *f) {
    if (!f) return;
    if (f->map) munmap(f->map, f->map_size);
    for (size_t i = 0; i < f->n_tensors; i++)
        free(f->tensors[i].name);
    free(f->tensors);
    free(f->metadata_json);
    free(f->path);
    memset(f, 0, sizeof *f);
}

const safetensors_tensor *safetensors_find(const safetensors_file *f, const char *name) {
    BT_ASSERT(f && name);
    for (size_t i = 0; i < f->n_tensors; i++)
        if (strcmp(f->tensors[i].name, name) == 0) return &f->tensors[i];
    return NULL;
}

static bt_status st_check_numel(const safetensors_file *f, const safetensors_tensor *t,
                                size_t dst_numel) {
    if (t->numel == dst_numel) return BT_OK;
    char s[256];
    safetensors_shape_str(s, sizeof s, t->ndim, t->shape);
    return st_fail(BT_ERR_SHAPE, f->path, t->name,
                   "has %zu elements (shape %s); expected %zu elements", t->numel, s, dst_numel);
}

bt_status safetensors_read_f32(const safetensors_file *f, const safetensors_tensor *t, float *dst,
                               size_t dst_numel) {
    BT_ASSERT(f && t);
    if (t->dtype != BT_DTYPE_F32 && t->dtype != BT_DTYPE_BF16 && t->dtype != BT_DTYPE_F16)
        return st_fail(BT_ERR_UNSUPPORTED, f->path, t->name,
                       "dtype %s cannot be read as floating point; expected F32, BF16 or F16",
                       bt_dtype_name(t->dtype));
    bt_status st = st_check_numel(f, t, dst_numel);
    if (st != BT_OK) return st;
    BT_ASSERT(dst || dst_numel == 0);
    /* t->data may be unaligned (foreign writers pack tensors back to back): memcpy only. */
    const uint8_t *src = t->data;
    if (t->dtype == BT_DTYPE_F32) {
        if (dst_numel) memcpy(dst, src, dst_numel * 4);
    } else if (t->dtype == BT_DTYPE_BF16) {
        for (size_t i = 0; i < dst_numel; i++) {
            uint16_t h;
            memcpy(&h, src + 2 * i, 2);
            dst[i] = bt_f32_from_bf16(h);
        }
    } else {
        for (size_t i = 0; i < dst_numel; i++) {
            uint16_t h;
            memcpy(&h, src + 2 * i, 2);
            dst[i] = bt_f32_from_f16(h);
        }
    }
    return BT_OK;
}

bt_status safetensors_read_i32(const safetensors_file *f, const safetensors_tensor *t, int32_t *dst,
                               size_t dst_numel) {
    BT_ASSERT(f && t);
    size_t es = bt_dtype_size(t->dtype);
    int is_int = t->dtype == BT_DTYPE_I64 || t->dtype == BT_DTYPE_I32 || t->dtype == BT_DTYPE_I16 ||
                 t->dtype == BT_DTYPE_I8 || t->dtype == BT_DTYPE_U8 || t->dtype == BT_DTYPE_BOOL;
    if (!is_int)
        return st_fail(BT_ERR_UNSUPPORTED, f->path, t->name,
                       "dtype %s cannot be read as integers; expected I64, I32, I16, I8, U8 "
                       "or BOOL",
                       bt_dtype_name(t->dtype));
    bt_status st = st_check_numel(f, t, dst_numel);
    if (st != BT_OK) return st;
    BT_ASSERT(dst || dst_numel == 0);
    const uint8_t *src = t->data;
    for (size_t i = 0; i < dst_numel; i++) {
        const uint8_t *p = src + es * i;
        switch (t->dtype) {
        case BT_DTYPE_I64: {
            int64_t v;
            memcpy(&v, p, 8);
            if (v < INT32_MIN || v > INT32_MAX)
                return st_fail(BT_ERR_UNSUPPORTED, f->path, t->name,
                               "element %zu is %lld, outside int32; expected values in "
                               "[%ld, %ld]",
                               i, (long long)v, (long)INT32_MIN, (long)INT32_MAX);
            dst[i] = (int32_t)v;
            break;
        }
        case BT_DTYPE_I32:
            memcpy(&dst[i], p, 4);
            break;
        case BT_DTYPE_I16: {
            int16_t v;
            memcpy(&v, p, 2);
            dst[i] = v;
            break;
        }
        case BT_DTYPE_I8:
            dst[i] = (int8_t)*p;
            break;
        case BT_DTYPE_U8:
            dst[i] = *p;
            break;
        default: /* BOOL: one byte, 0 or 1 (what torch writes) */
            if (*p > 1)
                return st_fail(BT_ERR_FORMAT, f->path, t->name,
                               "BOOL element %zu is byte 0x%02x; expected 0 or 1", i, (unsigned)*p);
            dst[i] = *p;
            break;
        }
    }
    return BT_OK;
}

/* ---------------------------------------------------------------------------------------
 * Writer
 * --------------------------------------------------------------------------------------- */

static int st_writable(bt_dtype d) {
    return d == BT_DTYPE_F32 || d == BT_DTYPE_BF16 || d == BT_DTYPE_I64 || d == BT_DTYPE_I32;
}

static const char *st_dtype_label(bt_dtype d) {
    return (unsigned)d < BT_DTYPE_UNKNOWN ? bt_dtype_name(d) : "invalid";
}

static int st_cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Sorts names (an array of n pointers) and returns the first duplicate, or NULL. */
static const char *st_find_duplicate(const char **names, size_t n) {
    qsort(names, n, sizeof *names, st_cmp_str);
    for (size_t i = 1; i < n; i++)
        if (strcmp(names[i - 1], names[i]) == 0) return names[i];
    return NULL;
}

/* Everything the caller can get wrong, checked before a byte is written. nbytes[i] gets
 * the stored size of entry i. */
static bt_status st_check_entries(const char *path, const safetensors_entry *e, size_t n,
                                  const char *const *kv, size_t *nbytes) {
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++) {
        const char *name = e[i].name;
        if (!name || !name[0])
            return st_fail(BT_ERR_ARG, path, NULL,
                           "entry %zu has an empty name; expected a tensor name", i);
        size_t len = strlen(name);
        if (st_utf8_check((const uint8_t *)name, len, 0) != len)
            return st_fail(BT_ERR_ARG, path, name, "name is not valid UTF-8; expected UTF-8");
        if (strcmp(name, "__metadata__") == 0)
            return st_fail(BT_ERR_ARG, path, name,
                           "name is reserved; expected any other tensor name");
        if (!st_writable(e[i].dtype))
            return st_fail(BT_ERR_ARG, path, name,
                           "dtype %s cannot be written; expected F32, BF16, I64 or I32",
                           st_dtype_label(e[i].dtype));
        if (e[i].src_dtype != e[i].dtype &&
            !(e[i].dtype == BT_DTYPE_BF16 && e[i].src_dtype == BT_DTYPE_F32))
            return st_fail(BT_ERR_ARG, path, name,
                           "cannot convert %s data to %s; expected the same dtype, or F32 "
                           "data written as BF16",
                           st_dtype_label(e[i].src_dtype), st_dtype_label(e[i].dtype));
        if (e[i].ndim < 0 || e[i].ndim > SAFETENSORS_MAX_DIMS)
            return st_fail(BT_ERR_ARG, path, name, "ndim %d; expected 0..%d", e[i].ndim,
                           SAFETENSORS_MAX_DIMS);
        for (int d = 0; d < e[i].ndim; d++)
            if (e[i].shape[d] < 0 || (double)e[i].shape[d] > ST_JSON_INT_MAX)
                return st_fail(BT_ERR_ARG, path, name,
                               "shape dimension %d is %lld; expected a non-negative integer "
                               "up to 2^53", d,
                               (long long)e[i].shape[d]);
        int overflow;
        size_t numel = st_numel(e[i].shape, e[i].ndim, &overflow);
        if (overflow || __builtin_mul_overflow(numel, bt_dtype_size(e[i].dtype), &nbytes[i]) ||
            (total += nbytes[i]) > (uint64_t)ST_JSON_INT_MAX)
            return st_fail(BT_ERR_ARG, path, name,
                           "tensor too large; expected at most 2^53 bytes in the file");
        if (nbytes[i] && !e[i].data)
            return st_fail(BT_ERR_ARG, path, name, "data is NULL; expected %zu elements", numel);
    }
    size_t nkv = 0;
    if (kv)
        for (; kv[nkv]; nkv += 2)
            if (!kv[nkv + 1])
                return st_fail(BT_ERR_ARG, path, NULL,
                               "metadata key \"%s\" has no value; expected key, value pairs "
                               "ending with NULL",
                               kv[nkv]);
    for (size_t i = 0; i < nkv; i++) {
        size_t len = strlen(kv[i]);
        if (st_utf8_check((const uint8_t *)kv[i], len, 0) != len)
            return st_fail(BT_ERR_ARG, path, NULL,
                           "metadata string %zu is not valid UTF-8; expected UTF-8", i);
    }

    size_t nn = n > nkv / 2 ? n : nkv / 2;
    if (nn < 2) return BT_OK;
    const char **names = malloc(nn * sizeof *names);
    if (!names) return st_fail(BT_ERR_NOMEM, path, NULL, "out of memory (%zu names)", nn);
    bt_status st = BT_OK;
    for (size_t i = 0; i < n; i++)
        names[i] = e[i].name;
    const char *dup = st_find_duplicate(names, n);
    if (dup) st = st_fail(BT_ERR_ARG, path, dup, "name given twice; expected unique tensor names");
    for (size_t i = 0; i < nkv / 2; i++)
        names[i] = kv[2 * i];
    dup = st == BT_OK ? st_find_duplicate(names, nkv / 2) : NULL;
    if (dup)
        st = st_fail(BT_ERR_ARG, path, NULL,
                     "metadata key \"%s\" given twice; expected unique keys", dup);
    free(names);
    return st;
}

/* The compact JSON header for the entries (offsets contiguous in entry order). */
static char *st_build_header(const safetensors_entry *e, size_t n, const char *const *kv,
                             const size_t *nbytes) {
    cJSON *root = cJSON_CreateObject();
    int ok = root != NULL;
    if (ok && kv && kv[0]) {
        /* The reference implementation also puts "__metadata__" first. */
        cJSON *meta = cJSON_AddObjectToObject(root, "__metadata__");
        ok = meta != NULL;
        for (size_t i = 0; ok && kv[i]; i += 2)
            ok = cJSON_AddStringToObject(meta, kv[i], kv[i + 1]) != NULL;
    }
    size_t offset = 0;
    for (size_t i = 0; ok && i < n; i++) {
        cJSON *t = cJSON_CreateObject();
        ok = t && cJSON_AddItemToObject(root, e[i].name, t);
        if (!ok) {
            cJSON_Delete(t);
            break;
        }
        ok = cJSON_AddStringToObject(t, "dtype", bt_dtype_name(e[i].dtype)) != NULL;
        cJSON *shape = ok ? cJSON_AddArrayToObject(t, "shape") : NULL;
        ok = shape != NULL;
        for (int d = 0; ok && d < e[i].ndim; d++) {
            cJSON *v = cJSON_CreateNumber((double)e[i].shape[d]);
            ok = v && cJSON_AddItemToArray(shape, v);
            if (!ok) cJSON_Delete(v);
        }
        cJSON *offs = ok ? cJSON_AddArrayToObject(t, "data_offsets") : NULL;
        ok = offs != NULL;
        double be[2] = {(double)offset, (double)(offset + nbytes[i])};
        for (int k = 0; ok && k < 2; k++) {
            cJSON *v = cJSON_CreateNumber(be[k]);
            ok = v && cJSON_AddItemToArray(offs, v);
            if (!ok) cJSON_Delete(v);
        }
        offset += nbytes[i];
    }
    char *text = ok ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    return text;
}

/* Writes the whole file to the open stream (flushed, not synced: the caller's atomic file
 * does that); on failure returns an errno-style code. */
static int st_write_stream(FILE *fp, const char *header, size_t hlen, size_t padded,
                           const safetensors_entry *e, size_t n, const size_t *nbytes) {
    uint8_t len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    if (fwrite(len8, 1, 8, fp) != 8 || fwrite(header, 1, hlen, fp) != hlen) return ST_ERRNO();
    for (size_t i = hlen; i < padded; i++)
        if (fputc(' ', fp) == EOF) return ST_ERRNO();

    bt_bf16 *conv = NULL;
    for (size_t i = 0; i < n; i++) {
        if (e[i].dtype == BT_DTYPE_BF16 && e[i].src_dtype == BT_DTYPE_F32) {
            enum { PER = ST_CHUNK_BYTES / sizeof(bt_bf16) };
            if (!conv && !(conv = malloc(PER * sizeof *conv))) return ENOMEM;
            const float *src = e[i].data;
            size_t numel = nbytes[i] / 2;
            for (size_t off = 0; off < numel; off += PER) {
                size_t m = numel - off < PER ? numel - off : PER;
                for (size_t k = 0; k < m; k++)
                    conv[k] = bt_bf16_from_f32(src[off + k]);
                if (fwrite(conv, sizeof *conv, m, fp) != m) {
                    int err = ST_ERRNO();
                    free(conv);
                    return err;
                }
            }
        } else {
            const uint8_t *src = e[i].data;
            for (size_t off = 0; off < nbytes[i]; off += ST_CHUNK_BYTES) {
                size_t m = nbytes[i] - off < ST_CHUNK_BYTES ? nbytes[i] - off : ST_CHUNK_BYTES;
                if (fwrite(src + off, 1, m, fp) != m) {
                    int err = ST_ERRNO();
                    free(conv);
                    return err;
                }
            }
        }
    }
    free(conv);
    if (fflush(fp) != 0) return ST_ERRNO();
    return 0;
}

bt_status safetensors_write_stream(FILE *fp, const char *path, const safetensors_entry *entries,
                                   size_t n, const char *const *metadata_kv) {
    BT_ASSERT(fp && path && (entries || n == 0));
    size_t *nbytes = calloc(n ? n : 1, sizeof *nbytes);
    if (!nbytes) return st_fail(BT_ERR_NOMEM, path, NULL, "out of memory (%zu entries)", n);
    bt_status st = st_check_entries(path, entries, n, metadata_kv, nbytes);
    if (st != BT_OK) {
        free(nbytes);
        return st;
    }
    char *header = st_build_header(entries, n, metadata_kv, nbytes);
    if (!header) {
        free(nbytes);
        return st_fail(BT_ERR_NOMEM, path, NULL, "out of memory building the header");
    }
    size_t hlen = strlen(header);
    size_t padded = (hlen + 7) & ~(size_t)7; /* 8 + padded is a multiple of 8 */
    int err = st_write_stream(fp, header, hlen, padded, entries, n, nbytes);
    if (err)
        st = st_fail(BT_ERR_IO, path, NULL,
                     "writing failed: %s; the previous file (if any) is unchanged", strerror(err));
    cJSON_free(header);
    free(nbytes);
    return st;
}

bt_status safetensors_write(const char *path, const safetensors_entry *entries, size_t n,
                            const char *const *metadata_kv) {
    BT_ASSERT(path && (entries || n == 0));
    bt_atomic_file af;
    bt_status st = bt_atomic_open(&af, path, "safetensors file");
    if (st != BT_OK) return st;
    st = safetensors_write_stream(af.fp, path, entries, n, metadata_kv);
    if (st != BT_OK) {
        bt_atomic_abort(&af);
        return st;
    }
    return bt_atomic_commit(&af);
}
