/* test_safetensors.c: the safetensors writer and reader on valid files.
 *
 * - Round trip: F32, BF16 written from an F32 source, I64, I32, a 0-d scalar, a zero-size
 *   tensor and metadata; every header field, the values (F32 bitwise, BF16 = the writer's
 *   documented rounding bt_bf16_from_f32), the metadata text; write -> read -> write again
 *   gives a byte-identical file.
 * - Tolerated layouts: extra space padding in the header, bytes after the last tensor, an
 *   empty file of tensors.
 * - A file from an independent writer (tests/fixtures/safetensors/reference.safetensors,
 *   made by scripts/gen_safetensors_fixtures.py with PyTorch): values decoded by bt are
 *   compared with the fp32 values PyTorch decoded the same F16/BF16 bits to, and bt's
 *   fp32 -> bf16 writer conversion with PyTorch's .bfloat16() rounding. All comparisons are
 *   bitwise (tolerance 0): the conversions are exact functions of the bits, and NaNs only
 *   have to stay NaN.
 * Malformed input is tested in test_safetensors_bad.c. */
#include <cjson/cJSON.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "safetensors.h"
#include "test_util.h"

/* Bitwise equality, except that a NaN only has to meet a NaN. */
static int check_f32_bits(const char *name, const float *got, const float *want, size_t n) {
    for (size_t i = 0; i < n; i++) {
        int same = memcmp(&got[i], &want[i], 4) == 0 || (isnan(got[i]) && isnan(want[i]));
        if (!same)
            return tu_check(0, "%s: element %zu is %a, expected %a", name, i, (double)got[i],
                            (double)want[i]);
    }
    return tu_check(1, "%s: %zu values bitwise equal", name, n);
}

static const safetensors_tensor *expect_tensor(const safetensors_file *f, const char *name,
                                               bt_dtype dtype, int ndim, const int64_t *shape) {
    const safetensors_tensor *t = safetensors_find(f, name);
    int ok = t && t->dtype == dtype && t->ndim == ndim;
    size_t numel = 1;
    for (int d = 0; ok && d < ndim; d++) {
        ok = t->shape[d] == shape[d];
        numel *= (size_t)shape[d];
    }
    ok = ok && t->numel == numel && t->end - t->begin == numel * bt_dtype_size(dtype);
    tu_check(ok, "%s: present, dtype %s, ndim %d, shape and byte range agree", name,
             bt_dtype_name(dtype), ndim);
    return ok ? t : NULL;
}

static void test_round_trip(void) {
    char path_a[512], path_b[512];
    snprintf(path_a, sizeof path_a, "%s/a.safetensors", tu_tmpdir());
    snprintf(path_b, sizeof path_b, "%s/b.safetensors", tu_tmpdir());

    tu_rng rng;
    tu_rng_seed(&rng, 7);
    float w[15]; // (3, 5)
    tu_fill_uniform_f32(&rng, w, 15, -3.0f, 3.0f);
    /* BF16 sources: ties both ways, signed zero, subnormal, overflow to inf, inf, NaN. */
    float wb[11] = {
        1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, -0.0f, 1e-40f, FLT_MAX, -INFINITY, NAN, 0.1f, 0, 0, 0};
    tu_fill_uniform_f32(&rng, wb + 8, 3, -100.0f, 100.0f);
    int64_t ids64[6] = {0, -1, 2147483647, -2147483648LL, 5, 50264}; // (2, 3)
    int64_t big64[2] = {INT64_MAX, INT64_MIN};
    int32_t ids32[4] = {3, -4, INT32_MAX, INT32_MIN};
    float scalar = 2.5f;

    safetensors_entry e[] = {
        {"w.f32", BT_DTYPE_F32, BT_DTYPE_F32, 2, {3, 5}, w},
        {"w.bf16", BT_DTYPE_BF16, BT_DTYPE_F32, 1, {11}, wb},
        {"ids.i64", BT_DTYPE_I64, BT_DTYPE_I64, 2, {2, 3}, ids64},
        {"big.i64", BT_DTYPE_I64, BT_DTYPE_I64, 1, {2}, big64},
        {"ids.i32", BT_DTYPE_I32, BT_DTYPE_I32, 1, {4}, ids32},
        {"scalar", BT_DTYPE_F32, BT_DTYPE_F32, 0, {0}, &scalar},
        {"empty", BT_DTYPE_F32, BT_DTYPE_F32, 2, {0, 4}, NULL},
    };
    const size_t n = sizeof e / sizeof e[0];
    const char *meta[] = {"format", "pt", "note", "h\xc3\xa9llo \"quoted\"\n\ttab", NULL};
    bt_status st = safetensors_write(path_a, e, n, meta);
    tu_check(st == BT_OK, "write %s: %s", path_a, bt_error_message());

    safetensors_file f;
    st = safetensors_open(&f, path_a);
    if (!tu_check(st == BT_OK, "reopen: %s", bt_error_message())) return;

    /* Layout: header length a multiple of 8 (data 8-aligned), tensors contiguous in
     * entry order, names in header order. */
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = (hlen << 8) | ((const uint8_t *)f.map)[i];
    tu_check(hlen % 8 == 0, "header length %llu is a multiple of 8", (unsigned long long)hlen);
    tu_check(f.map_size == 8 + hlen + f.tensors[n - 1].end, "file size = 8 + header + data");
    int order_ok = f.n_tensors == n;
    size_t expect_begin = 0;
    for (size_t i = 0; order_ok && i < n; i++) {
        order_ok = strcmp(f.tensors[i].name, e[i].name) == 0 &&
                   f.tensors[i].begin == expect_begin &&
                   f.tensors[i].data == (const uint8_t *)f.map + 8 + hlen + expect_begin;
        expect_begin = f.tensors[i].end;
    }
    tu_check(order_ok, "%zu tensors in entry order with contiguous data offsets", f.n_tensors);
    tu_check(strcmp(f.path, path_a) == 0, "path recorded");

    for (size_t i = 0; i < n; i++)
        expect_tensor(&f, e[i].name, e[i].dtype, e[i].ndim, e[i].shape);
    tu_check(safetensors_find(&f, "ids.i32") == &f.tensors[4], "find returns the entry");
    tu_check(safetensors_find(&f, "nope") == NULL, "find of an absent name is NULL");

    /* Values. */
    const safetensors_tensor *t = safetensors_find(&f, "w.f32");
    float got[16];
    tu_fill_sentinel_f32(got, 16);
    st = safetensors_read_f32(&f, t, got, 15);
    tu_check(st == BT_OK, "read_f32 w.f32");
    tu_check_bytes_equal("w.f32 values", got, w, sizeof w);
    tu_check_bytes_equal("w.f32 raw data", t->data, w, sizeof w);

    t = safetensors_find(&f, "w.bf16");
    bt_bf16 want_bits[11];
    float want_f[11];
    for (int i = 0; i < 11; i++) {
        want_bits[i] = bt_bf16_from_f32(wb[i]);
        want_f[i] = bt_f32_from_bf16(want_bits[i]);
    }
    tu_check_bytes_equal("w.bf16 raw bits = bt_bf16_from_f32(source)", t->data, want_bits,
                         sizeof want_bits);
    tu_fill_sentinel_f32(got, 16);
    st = safetensors_read_f32(&f, t, got, 11);
    tu_check(st == BT_OK, "read_f32 w.bf16");
    check_f32_bits("w.bf16 decoded", got, want_f, 11);

    t = safetensors_find(&f, "ids.i64");
    tu_check_bytes_equal("ids.i64 raw", t->data, ids64, sizeof ids64);
    int32_t gi[6] = {0};
    st = safetensors_read_i32(&f, t, gi, 6);
    int ok = st == BT_OK;
    for (int i = 0; ok && i < 6; i++)
        ok = gi[i] == ids64[i];
    tu_check(ok, "read_i32 ids.i64 (in int32 range)");
    t = safetensors_find(&f, "big.i64");
    tu_check_bytes_equal("big.i64 raw (int64 extremes)", t->data, big64, sizeof big64);
    t = safetensors_find(&f, "ids.i32");
    st = safetensors_read_i32(&f, t, gi, 4);
    tu_check(st == BT_OK && memcmp(gi, ids32, sizeof ids32) == 0, "read_i32 ids.i32");

    t = safetensors_find(&f, "scalar");
    tu_check(t->ndim == 0 && t->numel == 1 && t->end - t->begin == 4, "scalar: 0-d, numel 1");
    got[0] = 0;
    st = safetensors_read_f32(&f, t, got, 1);
    tu_check(st == BT_OK && got[0] == 2.5f, "scalar value %g", (double)got[0]);
    t = safetensors_find(&f, "empty");
    tu_check(t->numel == 0 && t->begin == t->end, "zero-size tensor occupies no bytes");
    tu_check(safetensors_read_f32(&f, t, NULL, 0) == BT_OK, "read_f32 of a zero-size tensor");

    /* Metadata: kept as JSON text, keys in order, escapes and UTF-8 intact. */
    cJSON *m = f.metadata_json ? cJSON_Parse(f.metadata_json) : NULL;
    const cJSON *m0 = m ? m->child : NULL;
    const cJSON *m1 = m0 ? m0->next : NULL;
    tu_check(m && cJSON_IsObject(m) && m0 && m1 && !m1->next && strcmp(m0->string, "format") == 0 &&
                 cJSON_IsString(m0) && strcmp(m0->valuestring, "pt") == 0 &&
                 strcmp(m1->string, "note") == 0 && cJSON_IsString(m1) &&
                 strcmp(m1->valuestring, meta[3]) == 0,
             "metadata text %s", f.metadata_json ? f.metadata_json : "(null)");

    /* Write again from what was read (data straight from the mapping, BF16 as stored). */
    safetensors_entry e2[sizeof e / sizeof e[0]];
    for (size_t i = 0; i < f.n_tensors && i < n; i++) {
        const safetensors_tensor *ti = &f.tensors[i];
        e2[i] = (safetensors_entry){ti->name, ti->dtype, ti->dtype, ti->ndim, {0}, ti->data};
        memcpy(e2[i].shape, ti->shape, sizeof ti->shape);
    }
    const char *meta2[5] = {NULL};
    if (m0 && m1) {
        meta2[0] = m0->string, meta2[1] = m0->valuestring;
        meta2[2] = m1->string, meta2[3] = m1->valuestring;
    }
    st = safetensors_write(path_b, e2, f.n_tensors < n ? f.n_tensors : n, meta2);
    tu_check(st == BT_OK, "rewrite %s: %s", path_b, bt_error_message());
    size_t la = 0, lb = 0;
    uint8_t *ba = tu_read_file(path_a, &la), *bb = tu_read_file(path_b, &lb);
    tu_check(ba && bb && la == lb && memcmp(ba, bb, la) == 0,
             "write -> read -> write is byte-identical (%zu vs %zu bytes)", la, lb);
    cJSON_Delete(m);
    safetensors_close(&f);
    safetensors_close(&f); /* idempotent */
    tu_check(f.map == NULL && f.tensors == NULL && f.n_tensors == 0, "close resets the struct");

    /* Tolerated: more space padding after the JSON, bytes after the last tensor. */
    if (ba) {
        size_t pad = 16, extra = 13;
        uint8_t *v = calloc(la + pad + extra, 1);
        uint64_t h2 = hlen + pad;
        for (int i = 0; i < 8; i++)
            v[i] = (uint8_t)(h2 >> (8 * i));
        memcpy(v + 8, ba + 8, hlen);
        memset(v + 8 + hlen, ' ', pad);
        memcpy(v + 8 + h2, ba + 8 + hlen, la - 8 - hlen);
        char path_c[512];
        snprintf(path_c, sizeof path_c, "%s/padded.safetensors", tu_tmpdir());
        tu_setup_file(path_c, v, la + pad + extra);
        st = safetensors_open(&f, path_c);
        ok = st == BT_OK && f.n_tensors == n;
        if (ok) {
            t = safetensors_find(&f, "w.f32");
            ok = safetensors_read_f32(&f, t, got, 15) == BT_OK && memcmp(got, w, sizeof w) == 0;
        }
        tu_check(ok, "extra header padding and trailing data bytes are accepted: %s",
                 st == BT_OK ? "ok" : bt_error_message());
        safetensors_close(&f);
        free(v);
    }
    free(ba);
    free(bb);

    /* No tensors, no metadata: "{}" padded to 8. */
    st = safetensors_write(path_b, NULL, 0, NULL);
    tu_check(st == BT_OK, "write an empty file of tensors");
    st = safetensors_open(&f, path_b);
    tu_check(st == BT_OK && f.n_tensors == 0 && f.metadata_json == NULL && f.map_size == 16,
             "reopen empty: %zu bytes, %zu tensors", f.map_size, f.n_tensors);
    safetensors_close(&f);
}

static void test_independent_fixture(void) {
    const char *path = tu_fixture_path("safetensors/reference.safetensors");
    safetensors_file f;
    bt_status st = safetensors_open(&f, path);
    if (!tu_check(st == BT_OK, "open PyTorch-written fixture: %s", bt_error_message())) return;
    tu_check(f.n_tensors == 15, "fixture has 15 tensors (got %zu)", f.n_tensors);

    cJSON *m = f.metadata_json ? cJSON_Parse(f.metadata_json) : NULL;
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(m, "format");
    tu_check(cJSON_IsString(fmt) && strcmp(fmt->valuestring, "pt") == 0, "fixture metadata %s",
             f.metadata_json ? f.metadata_json : "(null)");
    cJSON_Delete(m);

    int32_t gi[8];
    const safetensors_tensor *t = expect_tensor(&f, "i8_first", BT_DTYPE_I8, 1, (int64_t[]){3});
    tu_check(t && safetensors_read_i32(&f, t, gi, 3) == BT_OK && gi[0] == -128 && gi[1] == 0 &&
                 gi[2] == 127,
             "I8 values");

    /* The script wrote these fp32 values directly (struct-exact decimal/power-of-2 values). */
    const float want_f32[6] = {0.5f, -1.25f, 1024.0f, -0.0f, 0x1p-149f, FLT_MAX};
    float got[32], want[32];
    t = expect_tensor(&f, "x_f32", BT_DTYPE_F32, 2, (int64_t[]){2, 3});
    if (t) {
        tu_check(((uintptr_t)t->data & 3) != 0, "x_f32 data is unaligned (offset %zu)", t->begin);
        tu_fill_sentinel_f32(got, 32);
        tu_check(safetensors_read_f32(&f, t, got, 6) == BT_OK, "read x_f32");
        check_f32_bits("x_f32 (signed zero, subnormal, max)", got, want_f32, 6);
    }

    /* 16-bit floats: bt's decode vs PyTorch's own .float() of the same bits. */
    static const char *const pairs[][2] = {{"x_f16", "x_f16_as_f32"}, {"x_bf16", "x_bf16_as_f32"}};
    static const bt_dtype pair_dtype[] = {BT_DTYPE_F16, BT_DTYPE_BF16};
    for (int p = 0; p < 2; p++) {
        const safetensors_tensor *h = safetensors_find(&f, pairs[p][0]);
        const safetensors_tensor *r = safetensors_find(&f, pairs[p][1]);
        if (!tu_check(h && r && h->dtype == pair_dtype[p] && r->dtype == BT_DTYPE_F32 &&
                          h->numel == r->numel && h->numel <= 32,
                      "%s and %s present", pairs[p][0], pairs[p][1]))
            continue;
        tu_fill_sentinel_f32(got, 32);
        st = safetensors_read_f32(&f, h, got, h->numel);
        tu_check(st == BT_OK, "read_f32 %s", pairs[p][0]);
        tu_check(safetensors_read_f32(&f, r, want, r->numel) == BT_OK, "read %s", pairs[p][1]);
        check_f32_bits(pairs[p][0], got, want, h->numel);
    }

    /* Writer rounding: fp32 source -> BF16 by bt equals torch's .bfloat16() bits. */
    const safetensors_tensor *src = safetensors_find(&f, "x_bf16_src");
    const safetensors_tensor *ref = safetensors_find(&f, "x_bf16");
    if (tu_check(src && ref && src->numel == ref->numel && src->numel <= 32,
                 "x_bf16_src present")) {
        float s[32];
        tu_check(safetensors_read_f32(&f, src, s, src->numel) == BT_OK, "read x_bf16_src");
        char bf16_path[512];
        snprintf(bf16_path, sizeof bf16_path, "%s/bf16.safetensors", tu_tmpdir());
        safetensors_entry e = {"x", BT_DTYPE_BF16, BT_DTYPE_F32, 1, {(int64_t)src->numel}, s};
        safetensors_file g;
        st = safetensors_write(bf16_path, &e, 1, NULL);
        if (tu_check(st == BT_OK && safetensors_open(&g, bf16_path) == BT_OK, "write/read bf16: %s",
                     bt_error_message())) {
            /* Bitwise, except NaN: torch 1.13's vectorized CPU path writes NaN as 0xffff,
             * bt as a quiet NaN keeping the sign (0x7fc0); any NaN pattern is a NaN. */
            int diff = -1;
            for (size_t i = 0; i < ref->numel && diff < 0; i++) {
                uint16_t mine, theirs;
                memcpy(&mine, g.tensors[0].data + 2 * i, 2);
                memcpy(&theirs, ref->data + 2 * i, 2);
                int both_nan = (mine & 0x7fff) > 0x7f80 && (theirs & 0x7fff) > 0x7f80;
                if (mine != theirs && !both_nan) diff = (int)i;
            }
            tu_check(diff < 0,
                     "bt fp32->bf16 (RNE) equals torch .bfloat16() on %zu values "
                     "(first difference: element %d)",
                     ref->numel, diff);
            safetensors_close(&g);
        }
    }

    t = expect_tensor(&f, "ids_i64", BT_DTYPE_I64, 2, (int64_t[]){2, 3});
    const int32_t want_ids[6] = {0, -1, 2147483647, INT32_MIN, 42, 50264};
    tu_check(t && safetensors_read_i32(&f, t, gi, 6) == BT_OK &&
                 memcmp(gi, want_ids, sizeof want_ids) == 0,
             "I64 -> int32 values");
    t = expect_tensor(&f, "big_i64", BT_DTYPE_I64, 1, (int64_t[]){2});
    st = t ? safetensors_read_i32(&f, t, gi, 2) : BT_OK;
    tu_check(st == BT_ERR_UNSUPPORTED && strstr(bt_error_message(), "big_i64") &&
                 strstr(bt_error_message(), "2147483648"),
             "I64 outside int32 refused: %s", bt_error_message());
    t = expect_tensor(&f, "i32", BT_DTYPE_I32, 1, (int64_t[]){3});
    tu_check(t && safetensors_read_i32(&f, t, gi, 3) == BT_OK && gi[0] == 7 && gi[1] == -7 &&
                 gi[2] == 100000,
             "I32 values");
    t = expect_tensor(&f, "i16", BT_DTYPE_I16, 1, (int64_t[]){2});
    tu_check(t && safetensors_read_i32(&f, t, gi, 2) == BT_OK && gi[0] == -32768 && gi[1] == 32767,
             "I16 values");
    t = expect_tensor(&f, "u8", BT_DTYPE_U8, 1, (int64_t[]){3});
    tu_check(t && safetensors_read_i32(&f, t, gi, 3) == BT_OK && gi[0] == 0 && gi[1] == 200 &&
                 gi[2] == 255,
             "U8 values");
    t = expect_tensor(&f, "mask", BT_DTYPE_BOOL, 1, (int64_t[]){4});
    tu_check(t && safetensors_read_i32(&f, t, gi, 4) == BT_OK && gi[0] == 1 && gi[1] == 0 &&
                 gi[2] == 1 && gi[3] == 1,
             "BOOL values");
    t = expect_tensor(&f, "scalar", BT_DTYPE_F32, 0, NULL);
    tu_check(t && safetensors_read_f32(&f, t, got, 1) == BT_OK && got[0] == 7.25f,
             "0-d scalar value");
    t = expect_tensor(&f, "empty", BT_DTYPE_F16, 2, (int64_t[]){0, 3});
    tu_check(t && safetensors_read_f32(&f, t, got, 0) == BT_OK, "zero-size F16 tensor");
    safetensors_close(&f);
}

int main(void) {
    test_round_trip();
    test_independent_fixture();
    return tu_finish();
}
