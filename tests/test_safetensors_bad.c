/* test_safetensors_bad.c: malformed safetensors input and failing writes (docs/style.md 9).
 *
 * Every malformed file is made here from a valid one written by safetensors_write: its
 * bytes truncated or overwritten, or its JSON header edited (one substring replaced, the
 * length field recomputed). Each case checks the status AND that the message names the
 * file and the tensor or the specific problem, and that the failed open left the struct
 * closed. Writer cases check that a failed write (refused entry, missing directory, disk
 * full midway via RLIMIT_FSIZE, rename onto a directory) leaves the previous file
 * byte-identical and no temp file behind. Runs under ASan/UBSan in scripts/test.sh. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fileio.h"
#include "safetensors.h"
#include "test_util.h"

static const char *dir;
static uint8_t *base; /* the valid file */
static size_t base_len;
static size_t base_hlen;     /* its header length field */
static char base_json[1024]; /* its header JSON without the padding */

static const char *case_path(const char *label) {
    static char path[512];
    snprintf(path, sizeof path, "%s/%s.safetensors", dir, label);
    return path;
}

/* Opens path, expects status `want` and a message holding the path and s1, s2 (if set). */
static void expect_open_fail(const char *label, const char *path, bt_status want, const char *s1,
                             const char *s2) {
    safetensors_file f;
    memset(&f, 0xab, sizeof f); /* open must reset whatever was there */
    bt_error_clear();
    bt_status st = safetensors_open(&f, path);
    const char *msg = bt_error_message();
    int ok = st == want && strstr(msg, path) && (!s1 || strstr(msg, s1)) &&
             (!s2 || strstr(msg, s2)) && f.map == NULL && f.tensors == NULL && f.n_tensors == 0 &&
             f.path == NULL && f.metadata_json == NULL;
    tu_check(ok, "%s: %s (want %s, '%s', '%s'): %s", label, bt_status_name(st),
             bt_status_name(want), s1 ? s1 : "", s2 ? s2 : "", msg);
    safetensors_close(&f); /* safe on a closed struct */
}

/* Writes 8-byte length + header (unpadded) + data. */
static void write_with_header(const char *path, const char *header, const uint8_t *data,
                              size_t ndata) {
    size_t h = strlen(header);
    uint8_t *buf = malloc(8 + h + ndata + 1);
    for (int i = 0; i < 8; i++)
        buf[i] = (uint8_t)((uint64_t)h >> (8 * i));
    memcpy(buf + 8, header, h);
    if (ndata) memcpy(buf + 8 + h, data, ndata);
    tu_setup_file(path, buf, 8 + h + ndata);
    free(buf);
}

/* The base file with `find` replaced by `repl` in its header (first occurrence). */
static void header_case(const char *label, const char *find, const char *repl, bt_status want,
                        const char *s1, const char *s2) {
    char json[2048];
    const char *at = strstr(base_json, find);
    if (!tu_check(at != NULL, "%s: base header contains '%s'", label, find)) return;
    snprintf(json, sizeof json, "%.*s%s%s", (int)(at - base_json), base_json, repl,
             at + strlen(find));
    const char *path = case_path(label);
    write_with_header(path, json, base + 8 + base_hlen, base_len - 8 - base_hlen);
    expect_open_fail(label, path, want, s1, s2);
}

/* The base file's first n bytes. */
static void truncated_case(const char *label, size_t n, bt_status want, const char *s1,
                           const char *s2) {
    const char *path = case_path(label);
    tu_setup_file(path, base, n);
    expect_open_fail(label, path, want, s1, s2);
}

static int count_temp_files(void) {
    DIR *d = opendir(dir);
    int n = 0;
    if (!d) return -1;
    for (struct dirent *de; (de = readdir(d));)
        if (strstr(de->d_name, ".tmp.") || strstr(de->d_name, ".bt-tmp.")) n++;
    closedir(d);
    return n;
}

static void make_base(void) {
    float alpha[6] = {0, 1, 2, 3, 4, 5};
    int64_t beta[4] = {10, -20, 30, -40};
    safetensors_entry e[] = {
        {"alpha", BT_DTYPE_F32, BT_DTYPE_F32, 2, {2, 3}, alpha},
        {"beta", BT_DTYPE_I64, BT_DTYPE_I64, 1, {4}, beta},
    };
    const char *meta[] = {"format", "pt", NULL};
    const char *path = case_path("base");
    bt_status st = safetensors_write(path, e, 2, meta);
    base = st == BT_OK ? tu_read_file(path, &base_len) : NULL;
    if (!base || base_len < 8) {
        printf("cannot build the base file: %s\n", bt_error_message());
        exit(1);
    }
    for (int i = 7; i >= 0; i--)
        base_hlen = (base_hlen << 8) | base[i];
    size_t j = base_hlen;
    while (j > 0 && base[8 + j - 1] == ' ')
        j--;
    snprintf(base_json, sizeof base_json, "%.*s", (int)j, (const char *)base + 8);
    safetensors_file f;
    st = safetensors_open(&f, path);
    tu_check(st == BT_OK && f.n_tensors == 2, "the unmodified base file opens: %s",
             st == BT_OK ? base_json : bt_error_message());
    safetensors_close(&f);
}

static void test_truncated_and_corrupt_bytes(void) {
    size_t data0 = 8 + base_hlen;
    truncated_case("empty", 0, BT_ERR_FORMAT, "0 bytes", "too short");
    truncated_case("trunc_len", 4, BT_ERR_FORMAT, "4 bytes", "too short");
    truncated_case("trunc_at_header", 8, BT_ERR_FORMAT, "header length", "exceeds");
    truncated_case("trunc_in_header", 8 + base_hlen / 2, BT_ERR_FORMAT, "header length", "exceeds");
    truncated_case("trunc_no_data", data0, BT_ERR_FORMAT, "tensor 'alpha'",
                   "24 bytes expected after the header, 0 present");
    truncated_case("trunc_in_alpha", data0 + 10, BT_ERR_FORMAT, "tensor 'alpha'", "10 present");
    truncated_case("trunc_in_beta", base_len - 1, BT_ERR_FORMAT, "tensor 'beta'",
                   "56 bytes expected after the header, 55 present");

    uint8_t *v = malloc(base_len);
    const char *path = case_path("len_huge");
    memcpy(v, base, base_len);
    memset(v, 0xff, 8);
    tu_setup_file(path, v, base_len);
    expect_open_fail("len_huge", path, BT_ERR_FORMAT, "header length 18446744073709551615",
                     "exceeds");

    path = case_path("len_zero");
    memcpy(v, base, base_len);
    memset(v, 0, 8);
    tu_setup_file(path, v, base_len);
    expect_open_fail("len_zero", path, BT_ERR_FORMAT, "header length 0", NULL);

    path = case_path("header_garbage");
    memcpy(v, base, base_len);
    memset(v + 8, 'x', base_hlen);
    tu_setup_file(path, v, base_len);
    expect_open_fail("header_garbage", path, BT_ERR_FORMAT, "not valid JSON", NULL);

    path = case_path("header_not_utf8");
    memcpy(v, base, base_len);
    v[8 + 3] = 0xff; /* inside "__metadata__" */
    tu_setup_file(path, v, base_len);
    expect_open_fail("header_not_utf8", path, BT_ERR_FORMAT, "UTF-8", "byte 3");

    path = case_path("header_nul");
    memcpy(v, base, base_len);
    v[8 + 5] = 0x00;
    tu_setup_file(path, v, base_len);
    expect_open_fail("header_nul", path, BT_ERR_FORMAT, "0x00", "byte 5");

    path = case_path("header_utf8_cut");
    memcpy(v, base, base_len);
    v[8 + base_hlen - 1] = 0xc3; /* a 2-byte sequence cut off by the header end */
    tu_setup_file(path, v, base_len);
    expect_open_fail("header_utf8_cut", path, BT_ERR_FORMAT, "UTF-8", NULL);
    free(v);

    /* A header length above the 100 MB cap on a (sparse) file long enough to hold it. */
    path = case_path("len_absurd");
    int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0644);
    uint8_t len8[8];
    uint64_t big = 150000000;
    for (int i = 0; i < 8; i++)
        len8[i] = (uint8_t)(big >> (8 * i));
    int made = fd >= 0 && write(fd, len8, 8) == 8 && ftruncate(fd, 8 + 160000000) == 0;
    if (fd >= 0) close(fd);
    if (tu_check(made, "sparse 160 MB file for the header cap"))
        expect_open_fail("len_absurd", path, BT_ERR_FORMAT, "absurdly large", "100000000");
    unlink(path); /* do not leave 160 MB of apparent size behind on failure */

    expect_open_fail("missing_file", case_path("does_not_exist"), BT_ERR_IO, "cannot open",
                     strerror(ENOENT));
    expect_open_fail("directory", dir, BT_ERR_IO, "is a directory", "regular");
}

static void test_bad_headers(void) {
    const char *path = case_path("json_array");
    write_with_header(path, "[1,2,3]", NULL, 0);
    expect_open_fail("json_array", path, BT_ERR_FORMAT, "JSON array", "expected a JSON object");
    path = case_path("json_string");
    write_with_header(path, "\"alpha\"    ", NULL, 0);
    expect_open_fail("json_string", path, BT_ERR_FORMAT, "JSON string", NULL);
    path = case_path("json_trailing");
    char json[2048];
    snprintf(json, sizeof json, "%s  x", base_json);
    write_with_header(path, json, base + 8 + base_hlen, base_len - 8 - base_hlen);
    expect_open_fail("json_trailing", path, BT_ERR_FORMAT, "after the JSON header", "0x78");
    path = case_path("json_unclosed");
    snprintf(json, sizeof json, "%.*s", (int)strlen(base_json) - 1, base_json);
    write_with_header(path, json, base + 8 + base_hlen, base_len - 8 - base_hlen);
    expect_open_fail("json_unclosed", path, BT_ERR_FORMAT, "not valid JSON", NULL);

    header_case("dtype_q4", "\"dtype\":\"F32\"", "\"dtype\":\"Q4\"", BT_ERR_FORMAT,
                "tensor 'alpha': unknown dtype \"Q4\"", "F32, BF16, F16");
    header_case("dtype_f8", "\"dtype\":\"F32\"", "\"dtype\":\"F8_E4M3\"", BT_ERR_UNSUPPORTED,
                "tensor 'alpha'", "F8_E4M3");
    header_case("dtype_number", "\"F32\"", "32", BT_ERR_FORMAT, "tensor 'alpha'",
                "dtype is a JSON number");
    header_case("dtype_missing", "\"dtype\":\"F32\",", "", BT_ERR_FORMAT, "tensor 'alpha'",
                "no \"dtype\"");
    header_case("shape_mismatch", "[2,3]", "[2,4]", BT_ERR_FORMAT, "tensor 'alpha'",
                "span 24 bytes but shape [2, 4] of F32 needs 32");
    header_case("shape_negative", "[2,3]", "[-2,3]", BT_ERR_FORMAT, "tensor 'alpha'",
                "dimension 0 is -2");
    header_case("shape_fraction", "[2,3]", "[2,1.5]", BT_ERR_FORMAT, "tensor 'alpha'",
                "dimension 1 is 1.5");
    header_case("shape_string", "[2,3]", "\"2x3\"", BT_ERR_FORMAT, "tensor 'alpha'",
                "shape is a JSON string");
    header_case("shape_too_many_dims", "[2,3]", "[1,1,1,1,1,1,1,2,3]", BT_ERR_FORMAT,
                "tensor 'alpha'", "9 dimensions");
    header_case("shape_missing", "\"shape\":[2,3],", "", BT_ERR_FORMAT, "tensor 'alpha'",
                "no \"shape\"");
    header_case("shape_overflow", "[2,3]", "[4294967296,4294967296,4294967296]", BT_ERR_FORMAT,
                "tensor 'alpha'", "overflows");
    header_case("offsets_missing", ",\"data_offsets\":[0,24]", "", BT_ERR_FORMAT, "tensor 'alpha'",
                "no \"data_offsets\"");
    header_case("offsets_three", "[0,24]", "[0,24,48]", BT_ERR_FORMAT, "tensor 'alpha'",
                "wrong length");
    header_case("offsets_negative", "[0,24]", "[-8,16]", BT_ERR_FORMAT, "tensor 'alpha'",
                "data_offsets[0] is -8");
    header_case("offsets_reversed", "[24,56]", "[56,24]", BT_ERR_FORMAT, "tensor 'beta'",
                "ends before it begins");
    header_case("offsets_out_of_range", "\"shape\":[4],\"data_offsets\":[24,56]",
                "\"shape\":[124],\"data_offsets\":[24,1016]", BT_ERR_FORMAT, "tensor 'beta'",
                "1016 bytes expected after the header, 56 present");
    header_case("offsets_overlap", "[24,56]", "[16,48]", BT_ERR_FORMAT,
                "tensor 'beta': data_offsets [16, 48] overlap", "tensor 'alpha' [0, 24]");
    header_case("entry_not_object", "{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}",
                "5", BT_ERR_FORMAT, "tensor 'alpha'", "entry is a JSON number");
    header_case("entry_unknown_key", "\"dtype\":\"F32\"", "\"dtype\":\"F32\",\"offsets\":[0,24]",
                BT_ERR_FORMAT, "tensor 'alpha'", "unknown key \"offsets\"");
    header_case("entry_duplicate_key", "\"dtype\":\"F32\"", "\"dtype\":\"F32\",\"dtype\":\"F32\"",
                BT_ERR_FORMAT, "$.alpha", "\"dtype\" appears twice");
    header_case("duplicate_name", "\"beta\":", "\"alpha\":", BT_ERR_FORMAT,
                "key \"alpha\" appears twice in $", NULL);
    /* JSON Python reads differently (src/json_util.h): a name holding \u0000 would read as
     * the name before it. */
    /* Numbers are echoed as written: 2^62, not 4.6e+18. */
    header_case("shape_2_62", "\"shape\":[2,3]", "\"shape\":[4611686018427387904,3]",
                BT_ERR_FORMAT, "tensor 'alpha'", "4611686018427387904");
    header_case("name_u0000", "\"beta\":", "\"alpha\\u0000x\":", BT_ERR_FORMAT,
                "a key in $ holds the escape \\u0000", NULL);
    header_case("metadata_u0000", "{\"format\":\"pt\"}", "{\"format\":\"p\\u0000t\"}",
                BT_ERR_FORMAT, "$.__metadata__.format holds the escape \\u0000", NULL);
    header_case("metadata_number", "{\"format\":\"pt\"}", "{\"format\":1}", BT_ERR_FORMAT,
                "\"__metadata__\" key \"format\"", "expected a string");
    header_case("metadata_not_object", "{\"format\":\"pt\"}", "\"pt\"", BT_ERR_FORMAT,
                "\"__metadata__\" is a JSON string", "expected an object of strings");
    header_case("metadata_twice", "{\"format\":\"pt\"}", "{\"format\":\"pt\"},\"__metadata__\":{}",
                BT_ERR_FORMAT, "key \"__metadata__\" appears twice", NULL);
}

static void test_read_errors(void) {
    const char *path = case_path("base");
    safetensors_file f;
    if (!tu_check(safetensors_open(&f, path) == BT_OK, "open base")) return;
    float got[8];
    int32_t gi[8];
    const safetensors_tensor *alpha = safetensors_find(&f, "alpha");
    const safetensors_tensor *beta = safetensors_find(&f, "beta");
    bt_status st = safetensors_read_f32(&f, beta, got, 4);
    const char *msg = bt_error_message();
    tu_check(st == BT_ERR_UNSUPPORTED && strstr(msg, path) && strstr(msg, "tensor 'beta'") &&
                 strstr(msg, "I64"),
             "read_f32 on an I64 tensor: %s", msg);
    st = safetensors_read_f32(&f, alpha, got, 5);
    msg = bt_error_message();
    tu_check(st == BT_ERR_SHAPE && strstr(msg, path) && strstr(msg, "tensor 'alpha'") &&
                 strstr(msg, "has 6 elements (shape [2, 3]); expected 5"),
             "read_f32 with the wrong dst_numel: %s", msg);
    st = safetensors_read_i32(&f, alpha, gi, 6);
    msg = bt_error_message();
    tu_check(st == BT_ERR_UNSUPPORTED && strstr(msg, path) && strstr(msg, "tensor 'alpha'"),
             "read_i32 on an F32 tensor: %s", msg);
    st = safetensors_read_i32(&f, beta, gi, 3);
    msg = bt_error_message();
    tu_check(st == BT_ERR_SHAPE && strstr(msg, "tensor 'beta'") && strstr(msg, "expected 3"),
             "read_i32 with the wrong dst_numel: %s", msg);
    safetensors_close(&f);

    /* int64 outside int32, BOOL byte other than 0/1 */
    int64_t wide[3] = {1, (int64_t)1 << 40, 2};
    safetensors_entry e = {"wide", BT_DTYPE_I64, BT_DTYPE_I64, 1, {3}, wide};
    path = case_path("wide");
    if (tu_check(safetensors_write(path, &e, 1, NULL) == BT_OK &&
                     safetensors_open(&f, path) == BT_OK,
                 "write/open wide")) {
        st = safetensors_read_i32(&f, &f.tensors[0], gi, 3);
        msg = bt_error_message();
        tu_check(st == BT_ERR_UNSUPPORTED && strstr(msg, "tensor 'wide'") &&
                     strstr(msg, "element 1 is 1099511627776"),
                 "read_i32 of an int64 outside int32: %s", msg);
        safetensors_close(&f);
    }
    path = case_path("bool_bad");
    const uint8_t bools[2] = {1, 2};
    write_with_header(path, "{\"m\":{\"dtype\":\"BOOL\",\"shape\":[2],\"data_offsets\":[0,2]}}",
                      bools, 2);
    if (tu_check(safetensors_open(&f, path) == BT_OK, "open bool_bad")) {
        st = safetensors_read_i32(&f, &f.tensors[0], gi, 2);
        msg = bt_error_message();
        tu_check(st == BT_ERR_FORMAT && strstr(msg, "tensor 'm'") && strstr(msg, "0x02"),
                 "BOOL byte 2 refused: %s", msg);
        safetensors_close(&f);
    }
}

/* A write that must fail: check the status, the message, that `keep` (a previous file) is
 * unchanged and that no temp file was left. */
static void expect_write_fail(const char *label, const char *path, const safetensors_entry *e,
                              size_t n, const char *const *kv, bt_status want, const char *s1,
                              const char *keep, const uint8_t *keep_bytes, size_t keep_len) {
    bt_error_clear();
    bt_status st = safetensors_write(path, e, n, kv);
    const char *msg = bt_error_message();
    int ok = st == want && strstr(msg, path) && (!s1 || strstr(msg, s1));
    tu_check(ok, "%s: %s (want %s, '%s'): %s", label, bt_status_name(st), bt_status_name(want),
             s1 ? s1 : "", msg);
    if (keep) {
        size_t len = 0;
        uint8_t *now = tu_read_file(keep, &len);
        tu_check(now && len == keep_len && memcmp(now, keep_bytes, len) == 0,
                 "%s: previous file %s unchanged", label, keep);
        free(now);
    }
    tu_check(count_temp_files() == 0, "%s: no temp file left in %s", label, dir);
}

static void test_write_errors(void) {
    float a[4] = {1, 2, 3, 4};
    safetensors_entry good = {"good", BT_DTYPE_F32, BT_DTYPE_F32, 1, {4}, a};
    const char *path = case_path("atomic");
    if (!tu_check(safetensors_write(path, &good, 1, NULL) == BT_OK, "write file A")) return;
    size_t len = 0;
    uint8_t *orig = tu_read_file(path, &len);

    safetensors_entry bad[2] = {good, {"bad", BT_DTYPE_F16, BT_DTYPE_F16, 1, {4}, a}};
    expect_write_fail("write_f16", path, bad, 2, NULL, BT_ERR_ARG, "tensor 'bad': dtype F16", path,
                      orig, len);
    bad[1].dtype = bad[1].src_dtype = (bt_dtype)99;
    expect_write_fail("write_enum", path, bad, 2, NULL, BT_ERR_ARG, "dtype invalid", path, orig,
                      len);
    bad[1] = (safetensors_entry){"bad", BT_DTYPE_F32, BT_DTYPE_I64, 1, {4}, a};
    expect_write_fail("write_convert", path, bad, 2, NULL, BT_ERR_ARG, "cannot convert I64", path,
                      orig, len);
    bad[1] = good;
    expect_write_fail("write_duplicate", path, bad, 2, NULL, BT_ERR_ARG,
                      "tensor 'good': name given twice", path, orig, len);
    bad[1] = (safetensors_entry){"neg", BT_DTYPE_F32, BT_DTYPE_F32, 1, {-4}, a};
    expect_write_fail("write_negative_dim", path, bad, 2, NULL, BT_ERR_ARG, "tensor 'neg'", path,
                      orig, len);
    bad[1] = (safetensors_entry){"__metadata__", BT_DTYPE_F32, BT_DTYPE_F32, 1, {4}, a};
    expect_write_fail("write_reserved", path, bad, 2, NULL, BT_ERR_ARG, "reserved", path, orig,
                      len);
    bad[1] = (safetensors_entry){"null", BT_DTYPE_F32, BT_DTYPE_F32, 1, {4}, NULL};
    expect_write_fail("write_null_data", path, bad, 2, NULL, BT_ERR_ARG, "tensor 'null'", path,
                      orig, len);
    const char *odd[] = {"format", NULL};
    expect_write_fail("write_odd_metadata", path, &good, 1, odd, BT_ERR_ARG,
                      "metadata key \"format\" has no value", path, orig, len);
    const char *dupkv[] = {"k", "1", "k", "2", NULL};
    expect_write_fail("write_dup_metadata", path, &good, 1, dupkv, BT_ERR_ARG,
                      "metadata key \"k\" given twice", path, orig, len);

    /* A missing directory is created (fileio.h); one that is a file is an error. */
    char missing[600];
    snprintf(missing, sizeof missing, "%s/below_a_file.safetensors", path);
    expect_write_fail("write_below_a_file", missing, &good, 1, NULL, BT_ERR_IO,
                      "not a directory", path, orig, len);

    /* Outputs never replace what is not a regular file (fileio.h): a directory, a FIFO (as a
     * device node such as /dev/null would be), a symlink to a FIFO. */
    char adir[512];
    snprintf(adir, sizeof adir, "%s/adir", dir);
    mkdir(adir, 0755);
    expect_write_fail("write_onto_directory", adir, &good, 1, NULL, BT_ERR_IO,
                      "exists and is a directory; refusing", NULL, NULL, 0);
    struct stat sb;
    tu_check(stat(adir, &sb) == 0 && S_ISDIR(sb.st_mode), "directory still there");
    char fifo[512], link[512];
    snprintf(fifo, sizeof fifo, "%s/out.fifo", dir);
    snprintf(link, sizeof link, "%s/link_to_fifo", dir);
    if (tu_check(mkfifo(fifo, 0600) == 0 && symlink(fifo, link) == 0, "make a FIFO and a link")) {
        expect_write_fail("write_onto_fifo", fifo, &good, 1, NULL, BT_ERR_IO,
                          "exists and is a FIFO; refusing", NULL, NULL, 0);
        tu_check(stat(fifo, &sb) == 0 && S_ISFIFO(sb.st_mode), "FIFO still a FIFO");
        expect_write_fail("write_onto_link_to_fifo", link, &good, 1, NULL, BT_ERR_IO,
                          "exists and is a FIFO; refusing", NULL, NULL, 0);
        tu_check(lstat(link, &sb) == 0 && S_ISLNK(sb.st_mode), "link still a link");
        /* Reading a FIFO with no writer: refused at once instead of blocking forever. */
        expect_open_fail("open_fifo", fifo, BT_ERR_IO, "is a FIFO; expected a regular", NULL);
    }
    expect_write_fail("write_empty_path", "", &good, 1, NULL, BT_ERR_ARG, "path is empty", NULL,
                      NULL, 0);

    /* Disk full midway: the file size limit stops the data after the header is written. */
    enum { BIG = 64 * 1024 };
    float *big = calloc(BIG, sizeof *big);
    safetensors_entry e_big = {"big", BT_DTYPE_F32, BT_DTYPE_F32, 1, {BIG}, big};
    struct rlimit old;
    getrlimit(RLIMIT_FSIZE, &old);
    struct rlimit lim = old;
    lim.rlim_cur = 16 * 1024;
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    int limited = setrlimit(RLIMIT_FSIZE, &lim) == 0;
    if (tu_check(limited, "set RLIMIT_FSIZE to 16 KiB")) {
        bt_error_clear();
        bt_status st = safetensors_write(path, &e_big, 1, NULL);
        setrlimit(RLIMIT_FSIZE, &old);
        const char *msg = bt_error_message();
        tu_check(st == BT_ERR_IO && strstr(msg, path) && strstr(msg, strerror(EFBIG)) &&
                     strstr(msg, "unchanged"),
                 "write failing midway (file size limit): %s", msg);
        size_t now_len = 0;
        uint8_t *now = tu_read_file(path, &now_len);
        tu_check(now && now_len == len && memcmp(now, orig, len) == 0,
                 "previous file unchanged after the midway failure");
        free(now);
        tu_check(count_temp_files() == 0, "no temp file left after the midway failure");
    }
    signal(SIGXFSZ, prev);
    /* The same write succeeds without the limit (the failure was the limit, nothing else). */
    tu_check(safetensors_write(path, &e_big, 1, NULL) == BT_OK, "unlimited write succeeds");
    free(big);
    free(orig);
}

/* A pid that is not running: a child that has exited and been reaped. */
static long dead_pid(void) {
    pid_t p = fork();
    if (p == 0) _exit(0);
    int status;
    waitpid(p, &status, 0);
    return (long)p;
}

/* Temp files of a save killed with SIGKILL are removed by the next save into the directory
 * (fileio.h); those of a live process, of another host, and look-alikes are left alone. */
static void test_stale_temps(void) {
    char sdir[600], path[700];
    snprintf(sdir, sizeof sdir, "%s/stale", dir); /* a directory no save has scanned yet */
    mkdir(sdir, 0755);
    snprintf(path, sizeof path, "%s/stale.safetensors", sdir);
    tu_setup_text(path, "the previous file");
    const char *host = bt_temp_host_tag();
    long dp = dead_pid();
    char dead1[900], dead2[900], dead3[900], live[900], other_host[900], lookalike[900];
    snprintf(dead1, sizeof dead1, "%s/.stale.safetensors.bt-tmp.%s.%ld.3", sdir, host, dp);
    snprintf(dead2, sizeof dead2, "%s/stale.safetensors.tmp.%ld", sdir, dp);
    snprintf(dead3, sizeof dead3, "%s/.other.safetensors.bt-tmp.%s.%ld.0", sdir, host, dp);
    snprintf(live, sizeof live, "%s/.stale.safetensors.bt-tmp.%s.%ld.0", sdir, host,
             (long)getppid());
    snprintf(other_host, sizeof other_host, "%s/.stale.safetensors.bt-tmp.elsewhere%s.%ld.0",
             sdir, host, dp);
    snprintf(lookalike, sizeof lookalike, "%s/notes.tmp.%ld", sdir, dp);
    const char *all[] = {dead1, dead2, dead3, live, other_host, lookalike};
    for (int i = 0; i < 6; i++)
        tu_setup_text(all[i], "half a file");
    float a[2] = {1, 2};
    safetensors_entry e = {"a", BT_DTYPE_F32, BT_DTYPE_F32, 1, {2}, a};
    tu_check(safetensors_write(path, &e, 1, NULL) == BT_OK, "save over stale temps");
    struct stat sb;
    tu_check(stat(dead1, &sb) != 0 && stat(dead2, &sb) != 0 && stat(dead3, &sb) != 0,
             "temps of dead writers of this host removed (this target, an older naming, "
             "another target)");
    tu_check(stat(live, &sb) == 0, "temp of a live process kept");
    tu_check(stat(other_host, &sb) == 0, "temp of another host kept");
    tu_check(stat(lookalike, &sb) == 0, "a look-alike with no target beside it kept");
}

int main(void) {
    dir = tu_tmpdir();
    make_base();
    test_truncated_and_corrupt_bytes();
    test_bad_headers();
    test_read_errors();
    test_write_errors();
    test_stale_temps();
    free(base);
    return tu_finish();
}
