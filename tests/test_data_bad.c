/* test_data_bad.c: malformed manifests and bad records, under both error policies.
 *
 * Manifest: one file with 14 kinds of bad line between good ones. Under STOP each bad line
 * (after a good line 1) gives an error naming "file:2:" and the key or the JSON column; under
 * SKIP the whole file loads, keeping the good records and reporting every bad line with its
 * number, in order. Also: missing file, a directory, an empty file, a file of only bad lines.
 * CSV: unterminated quotes, text after a closing quote, wrong field counts, header problems,
 * NUL bytes and the JSON Lines value checks, each naming file:line.
 *
 * Loader: records whose image is missing, random bytes, a truncated JPEG, a PNG and an empty
 * file. STOP delivers the batches before the first bad record, then returns the error naming
 * the manifest line and the image, and keeps returning it. SKIP replaces each bad record by
 * the next valid record in dataset order (expected replacements worked out from the file
 * layout below), counts every replacement, reports each bad record once, delivers the same
 * bytes with 1 and 3 workers. All records bad is an error, not a hang. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/loader.h"
#include "data/synth.h"
#include "mem.h"
#include "test_util.h"

static char dir[1024];

/* ---- manifest ---------------------------------------------------------------------------- */

typedef struct bad_line {
    const char *text;
    size_t len;      /* 0: strlen(text) */
    const char *msg; /* expected message after "file:LINE: " */
} bad_line;

static const char good_line[] = "{\"image\": \"a.jpg\", \"caption\": \"fine\"}";

static const bad_line bad_lines[] = {
    {"{\"image\": \"a.jpg\", \"caption\": \"x\"", 0, "malformed JSON at column"},
    {"{\"caption\": \"no image\"}", 0, "key 'image' missing"},
    {"{\"image\": 5, \"caption\": \"x\"}", 0, "key 'image' must be a string"},
    {"{\"image\": \"a.jpg\", \"caption\": [\"x\"]}", 0, "key 'caption' must be a string"},
    {"{\"image\": \"a.jpg\"}", 0, "key 'caption' missing"},
    {"{\"image\": \"a.jpg\", \"caption\": \"x\", \"caption_choices\": [\"a\", \"b\", \"c\", "
     "\"d\"], \"label\": 0}",
     0, "'caption_choices' has 4 entries, expected 5"},
    {"{\"image\": \"a.jpg\", \"caption\": \"x\", \"caption_choices\": [\"a\", \"b\", 3, \"d\", "
     "\"e\"]}",
     0, "'caption_choices'[2] must be a string"},
    {"{\"image\": \"a.jpg\", \"caption\": \"x\", \"caption_choices\": [\"a\", \"b\", \"c\", "
     "\"d\", \"e\"], \"label\": 5}",
     0, "key 'label' is 5, expected 0..4"},
    {"{\"image\": \"a.jpg\", \"caption\": \"x\", \"caption_choices\": [\"a\", \"b\", \"c\", "
     "\"d\", \"e\"], \"label\": 1.5}",
     0, "key 'label' must be an integer 0..4"},
    {"{\"image\": \"a.jpg\", \"caption\": \"x\", \"label\": 1}", 0,
     "key 'label' given without 'caption_choices'"},
    {"[1, 2, 3]", 0, "record must be a JSON object"},
    {"{\"image\": \"a.jpg\", \"caption\": \"bad \xff byte\"}", 0,
     "the string at $.caption holds bytes that are not UTF-8"},
    /* JSON that Python reads differently than cJSON (src/json_util.h): refused. */
    {"{\"image\": \"a.jpg\", \"caption\": \"cap\\u0000tion\"}", 0,
     "the string at $.caption holds the escape \\u0000"},
    {"{\"image\": \"x.jpg\\u0000.png\", \"caption\": \"x\"}", 0,
     "the string at $.image holds the escape \\u0000"},
    {"{\"image\": \"a.jpg\", \"caption\": \"x\", \"caption\": \"y\"}", 0,
     "key \"caption\" appears twice in $"},
    {"{\"image\": \"a.jpg\", \"caption\": null}", 0, "key 'caption' is null; expected a string"},
    {"{\"image\": \"a.jpg\", \"caption\": \"x\", \"id\": 1.5}", 0,
     "key 'id' must be a string or an integer"},
    {"{\"image\": \"a.jpg\", \"caption\": \"x\"} trailing", 0, "malformed JSON at column 36"},
    {"{\"image\": \"a.jpg\", \"caption\": \"x\"}\0", 36, "line contains a NUL byte"},
    {"{\"image\": \"\", \"caption\": \"x\"}", 0, "key 'image' is empty"},
};
enum { N_BAD = sizeof bad_lines / sizeof bad_lines[0] };

static size_t line_len(const bad_line *b) {
    return b->len ? b->len : strlen(b->text);
}

static void test_manifest_stop(void) {
    char path[1100], want[1400];
    snprintf(path, sizeof path, "%s/one.jsonl", dir);
    for (int i = 0; i < N_BAD; i++) {
        FILE *f = fopen(path, "wb");
        BT_ASSERT(f);
        fprintf(f, "%s\n", good_line);
        fwrite(bad_lines[i].text, 1, line_len(&bad_lines[i]), f);
        fprintf(f, "\n%s\n", good_line);
        fclose(f);
        manifest m;
        bt_status st = manifest_load(&m, path, NULL);
        snprintf(want, sizeof want, "%s:2: %s", path, bad_lines[i].msg);
        tu_check(st != BT_OK && strstr(bt_error_message(), want) != NULL,
                 "stop: bad line %d -> \"%s\"", i, bt_error_message());
        manifest_free(&m);
    }
}

static void test_manifest_skip(void) {
    char path[1100], want[1400];
    snprintf(path, sizeof path, "%s/mixed.jsonl", dir);
    FILE *f = fopen(path, "wb");
    BT_ASSERT(f);
    /* good, bad_0, good, bad_1, good, ... : bad line i sits on line 2*i + 2. */
    for (int i = 0; i < N_BAD; i++) {
        fprintf(f, "%s\n", good_line);
        fwrite(bad_lines[i].text, 1, line_len(&bad_lines[i]), f);
        fputc('\n', f);
    }
    fprintf(f, "%s\n", good_line);
    fclose(f);
    manifest_options o = manifest_options_default();
    o.on_error = MANIFEST_ON_ERROR_SKIP;
    manifest m;
    bt_status st = manifest_load(&m, path, &o);
    tu_check(st == BT_OK && m.n == N_BAD + 1 && m.n_skipped == N_BAD,
             "skip: %d good records kept, %d bad lines skipped (got %zu, %zu)", N_BAD + 1, N_BAD,
             m.n, m.n_skipped);
    int ok = m.n_skipped == N_BAD;
    for (int i = 0; ok && i < N_BAD; i++) {
        snprintf(want, sizeof want, "%s:%d: %s", path, 2 * i + 2, bad_lines[i].msg);
        ok = strstr(m.problems[i], want) != NULL;
        if (!ok) printf("# problem %d: %s (wanted %s)\n", i, m.problems[i], want);
    }
    tu_check(ok, "skip: every skipped line reported with its file:line and key, in order");
    int lines_ok = m.n == N_BAD + 1;
    for (size_t i = 0; lines_ok && i < m.n; i++)
        lines_ok = m.records[i].line == (int)(2 * i + 1);
    tu_check(lines_ok, "skip: kept records remember their own line numbers");
    manifest_free(&m);

    /* Only bad lines: an error under SKIP too, with the first problem in the message. */
    snprintf(path, sizeof path, "%s/allbad.jsonl", dir);
    tu_setup_text(path, "{\"caption\": \"x\"}\n\n[1]\n");
    st = manifest_load(&m, path, &o);
    snprintf(want, sizeof want, "%s:1: key 'image' missing", path);
    tu_check(st == BT_ERR_MISSING && strstr(bt_error_message(), "no valid record") &&
                 strstr(bt_error_message(), want) && m.n_skipped == 2,
             "only bad lines: %s", bt_error_message());
    manifest_free(&m);
}


/* CSV/TSV: each bad row (after a good row 2) names "file:LINE:" and the problem, with the
 * JSON Lines messages where the problem is the same; header problems name line 1. */
typedef struct bad_csv {
    const char *text; /* whole file */
    size_t len;       /* 0: strlen(text) */
    const char *msg;  /* expected message after "file:" */
} bad_csv;

static const bad_csv bad_csvs[] = {
    {"image,caption\na.jpg,fine\nb.jpg,\"never closed\n", 0,
     "3: quoted field never closed (the file ends inside it)"},
    {"image,caption\na.jpg,fine\nb.jpg,\"x\"y\n", 0, "3: field 2: 'y' after a closing quote"},
    {"image,caption\na.jpg,fine\nb.jpg,x,extra\n", 0, "3: 3 fields, the header has 2"},
    {"image,caption\na.jpg,fine\nb.jpg\n", 0, "3: 1 fields, the header has 2"},
    {"image,caption\na.jpg,fine\n,empty image\n", 0, "3: key 'image' is empty"},
    {"image,caption\na.jpg,fine\nb.jpg,bad \xff byte\n", 0, "3: key 'caption' is not valid UTF-8"},
    {"image,caption\na.jpg,fine\nb.jpg,nul\0here\n", 39, "3: row contains a NUL byte"},
    {"image,caption,caption_choices,label\na.jpg,fine,,\nb.jpg,x,\"[\"\"a\"\"]\",0\n", 0,
     "3: 'caption_choices' has 1 entries, expected 5"},
    {"image,caption,caption_choices,label\na.jpg,fine,,\nb.jpg,x,\"[\"\"a\"\",\"\"b\"\",\"\"c\"\","
     "\"\"d\"\",\"\"e\"\"]\",7\n", 0, "3: key 'label' is 7, expected 0..4"},
    {"image,caption,caption_choices,label\na.jpg,fine,,\nb.jpg,x,,one\n", 0,
     "3: key 'label' given without 'caption_choices'"},
    {"image,text\na.jpg,fine\n", 0, "1: key 'caption' missing: the header has no such column"},
    {"image,caption,image\na.jpg,fine,b\n", 0, "1: column 'image' appears twice in the header"},
    {"", 0, " empty; expected a header row"},
    {"image,caption\n", 0, " no records"},
};
enum { N_BAD_CSV = sizeof bad_csvs / sizeof bad_csvs[0] };

static void test_manifest_csv(void) {
    char path[1100], want[1400];
    snprintf(path, sizeof path, "%s/bad.csv", dir);
    for (int i = 0; i < N_BAD_CSV; i++) {
        FILE *f = fopen(path, "wb");
        BT_ASSERT(f);
        const bad_csv *b = &bad_csvs[i];
        fwrite(b->text, 1, b->len ? b->len : strlen(b->text), f);
        fclose(f);
        manifest m;
        bt_status st = manifest_load(&m, path, NULL);
        snprintf(want, sizeof want, "%s:%s", path, b->msg);
        tu_check(st != BT_OK && strstr(bt_error_message(), want) != NULL,
                 "csv stop: case %d -> \"%s\"", i, bt_error_message());
        manifest_free(&m);
    }
    /* SKIP keeps the good rows of a file whose row 3 has a wrong field count. */
    tu_setup_text(path,
                  "image,caption\na.jpg,fine\nb.jpg,x,extra\nc.jpg,\"multi\nline\"\nd.jpg,ok\n");
    manifest_options o = manifest_options_default();
    o.on_error = MANIFEST_ON_ERROR_SKIP;
    manifest m;
    bt_status st = manifest_load(&m, path, &o);
    snprintf(want, sizeof want, "%s:3: 3 fields, the header has 2", path);
    tu_check(st == BT_OK && m.n == 3 && m.n_skipped == 1 && strstr(m.problems[0], want) &&
                 m.records[2].line == 6,
             "csv skip: 3 records kept, row 3 reported, line numbers past a quoted newline");
    manifest_free(&m);

    /* A CSV file named .jsonl: the JSON error says how to name it. */
    snprintf(path, sizeof path, "%s/csv_named.jsonl", dir);
    tu_setup_text(path, "image,caption\na.jpg,x\n");
    st = manifest_load(&m, path, NULL);
    tu_check(st == BT_ERR_FORMAT && strstr(bt_error_message(), "must be named *.csv"),
             "CSV under a .jsonl name: %s", bt_error_message());
    manifest_free(&m);
}

static void test_manifest_files(void) {
    char path[1100];
    manifest m;
    snprintf(path, sizeof path, "%s/nonexistent.jsonl", dir);
    bt_status st = manifest_load(&m, path, NULL);
    tu_check(st == BT_ERR_IO && strstr(bt_error_message(), path) &&
                 strstr(bt_error_message(), "No such file"),
             "missing manifest: %s", bt_error_message());
    manifest_free(&m);

    snprintf(path, sizeof path, "%s/empty.jsonl", dir);
    tu_setup_text(path, "\n  \n");
    st = manifest_load(&m, path, NULL);
    tu_check(st == BT_ERR_MISSING && strstr(bt_error_message(), "no records"),
             "manifest of blank lines: %s", bt_error_message());
    manifest_free(&m);

    st = manifest_load(&m, dir, NULL);
    tu_check(st == BT_ERR_MISSING && strstr(bt_error_message(), "needs metadata.jsonl or "
                                            "metadata.csv"),
             "a directory without metadata as manifest: %s", bt_error_message());
    manifest_free(&m);

    /* Deeply nested JSON (cJSON's nesting limit) is an error, not a stack overflow. */
    snprintf(path, sizeof path, "%s/deep.jsonl", dir);
    FILE *f = fopen(path, "wb");
    BT_ASSERT(f);
    fputs("{\"image\": \"a.jpg\", \"caption\": \"x\", \"extra\": ", f);
    for (int i = 0; i < 5000; i++)
        fputc('[', f);
    for (int i = 0; i < 5000; i++)
        fputc(']', f);
    fputs("}\n", f);
    fclose(f);
    st = manifest_load(&m, path, NULL);
    tu_check(st == BT_ERR_FORMAT && strstr(bt_error_message(), ":1: malformed JSON"),
             "5000-deep nesting: %s", bt_error_message());
    manifest_free(&m);
}

/* ---- loader ------------------------------------------------------------------------------ */

/* Record layout of the loader's manifest (index: image). Bad ones: 5 missing, 7 random
 * bytes, 8 truncated JPEG, 10 PNG, 11 empty. Next valid in dataset order: 5->6, 7->9, 8->9,
 * 10->12, 11->12. */
enum { N_REC = 14 };
static const int is_bad[N_REC] = {0, 0, 0, 0, 0, 1, 0, 1, 1, 0, 1, 1, 0, 0};
static const int replacement[N_REC] = {0, 1, 2, 3, 4, 6, 6, 9, 9, 9, 12, 12, 12, 13};

static void make_loader_data(char *manifest_path, size_t cap) {
    char out[1100], path[1300];
    snprintf(out, sizeof out, "%s/synth", dir);
    synth_options so = {.out_dir = out, .n = {N_REC, 0, 0}, .seed = 3, .size = 32};
    BT_ASSERT(synth_generate(&so) == BT_OK);

    /* Corrupt variants of the files of the bad records. */
    snprintf(path, sizeof path, "%s/images/train/%06d.jpg", out, 5);
    BT_ASSERT(remove(path) == 0);
    unsigned char junk[600];
    for (int i = 0; i < 600; i++)
        junk[i] = (unsigned char)(i * 131 + 7);
    snprintf(path, sizeof path, "%s/images/train/%06d.jpg", out, 7);
    tu_setup_file(path, junk, sizeof junk);
    snprintf(path, sizeof path, "%s/images/train/%06d.jpg", out, 8);
    FILE *f = fopen(path, "rb");
    BT_ASSERT(f);
    unsigned char jpg[65536];
    size_t n = fread(jpg, 1, sizeof jpg, f);
    fclose(f);
    tu_setup_file(path, jpg, n * 2 / 5);
    static const unsigned char png[] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n',
                                        0,    0,   0,   13,  'I',  'H',  'D',  'R'};
    snprintf(path, sizeof path, "%s/images/train/%06d.jpg", out, 10);
    tu_setup_file(path, png, sizeof png);
    snprintf(path, sizeof path, "%s/images/train/%06d.jpg", out, 11);
    tu_setup_file(path, "", 0);
    snprintf(manifest_path, cap, "%s/train.jsonl", out);
}

static loader_options opts(manifest_error_policy p, int workers) {
    loader_options o = loader_options_default();
    o.batch_size = 4;
    o.max_length = 24;
    o.shuffle = 0; /* dataset order: the layout above decides which batch fails */
    o.max_epochs = 2;
    o.num_workers = workers;
    o.on_error = p;
    return o;
}

static void collect(const char *msg, void *ctx) {
    char *all = ctx;
    strncat(all, msg, 8191 - strlen(all));
    strncat(all, "\n", 8191 - strlen(all));
}

static void test_loader_policies(const manifest *m, const tokenizer *tok,
                                 const image_preprocess_config *img) {
    char want[1400];
    /* STOP */
    loader_options o = opts(MANIFEST_ON_ERROR_STOP, 3);
    loader *l;
    BT_ASSERT(loader_init(&l, m, tok, img, &o) == BT_OK);
    loader_batch *b;
    bt_status st0 = loader_next(l, &b);
    int first_ok = st0 == BT_OK && b && b->size == 4 && b->record[3] == 3;
    if (b) loader_release(l, b);
    bt_status st1 = loader_next(l, &b);
    char msg1[2048];
    snprintf(msg1, sizeof msg1, "%s", bt_error_message());
    snprintf(want, sizeof want, "%s:6: %s/synth/images/train/000005.jpg", m->path, dir);
    tu_check(first_ok, "stop: batch 0 (records 0-3, all good) is delivered");
    tu_check(st1 == BT_ERR_IO && b == NULL && strstr(msg1, want),
             "stop: batch 1 fails naming line 6 and the missing image: %s", msg1);
    bt_status st2 = loader_next(l, &b);
    tu_check(st2 == st1 && b == NULL && strcmp(bt_error_message(), msg1) == 0,
             "stop: the error is returned again on the next call");
    loader_free(l);

    /* STOP: each kind of bad file names its line and the path. Start at the batch holding
     * it (a cursor), so the failing record is the first bad one the loader meets. */
    const int kinds[4] = {7, 8, 10, 11};
    for (int k = 0; k < 4; k++) {
        o = opts(MANIFEST_ON_ERROR_STOP, 2);
        o.batch_size = 1;
        o.start.position = kinds[k];
        BT_ASSERT(loader_init(&l, m, tok, img, &o) == BT_OK);
        bt_status st = loader_next(l, &b);
        snprintf(want, sizeof want, "%s:%d: %s/synth/images/train/%06d.jpg", m->path, kinds[k] + 1,
                 dir, kinds[k]);
        tu_check(st != BT_OK && !b && strstr(bt_error_message(), want), "stop: record %d: %s",
                 kinds[k], bt_error_message());
        loader_free(l);
    }

    /* SKIP, 1 worker and 3 workers, 2 epochs. */
    for (int workers = 1; workers <= 3; workers += 2) {
        o = opts(MANIFEST_ON_ERROR_SKIP, workers);
        BT_ASSERT(loader_init(&l, m, tok, img, &o) == BT_OK);
        int ok = 1, batches = 0;
        bt_status st;
        char problems[8192] = "";
        size_t drained_epoch0 = 0, drained_epoch1 = 0;
        while ((st = loader_next(l, &b)) == BT_OK && b) {
            for (int i = 0; i < b->size; i++) {
                int64_t s = b->sampled[i];
                ok &= b->record[i] == replacement[s];
                ok &= !is_bad[b->record[i]];
            }
            batches++;
            loader_release(l, b);
            if (batches == 4) drained_epoch0 = loader_drain_problems(l, collect, problems);
        }
        drained_epoch1 = loader_drain_problems(l, collect, problems);
        loader_stats s;
        loader_get_stats(l, &s);
        loader_free(l);
        tu_check(st == BT_OK && batches == 8 && ok,
                 "skip (%d workers): 8 batches, every bad record replaced by the next valid "
                 "one in dataset order",
                 workers);
        tu_check(s.replaced == 10 && s.bad_records == 5,
                 "skip (%d workers): 10 replacements over 2 epochs, 5 distinct bad records "
                 "(got %lld, %lld)",
                 workers, (long long)s.replaced, (long long)s.bad_records);
        int named = drained_epoch0 + drained_epoch1 == 5;
        for (int r = 0; r < N_REC; r++) {
            if (!is_bad[r]) continue;
            snprintf(want, sizeof want, "%s:%d: %s/synth/images/train/%06d.jpg", m->path, r + 1,
                     dir, r);
            named &= strstr(problems, want) != NULL;
        }
        tu_check(named,
                 "skip (%d workers): each bad record reported once with file:line "
                 "and path (%zu + %zu reports)",
                 workers, drained_epoch0, drained_epoch1);
        if (!named) printf("# problems:\n%s", problems);
    }
}

/* Out of memory is a status: the loader's estimate refuses a batch of 65536 rows on a 64 MB
 * "machine" (BT_MEM_AVAILABLE); with the estimate off (BT_MEM_CHECK=0) and the address space
 * capped (RLIMIT_AS, not under ASan, which reserves terabytes of it), the failing
 * allocation itself returns BT_ERR_NOMEM instead of aborting. */
static void test_loader_memory(const manifest *m, const tokenizer *tok,
                               const image_preprocess_config *img) {
    loader_options o = opts(MANIFEST_ON_ERROR_STOP, 1);
    o.batch_size = 65536; /* 65536 x 3 x 32 x 32 x 4 bytes = 805 MB per batch slot */
    o.prefetch = 2;
    loader *l = NULL;
    tu_setenv("BT_MEM_AVAILABLE", "64M", 1);
    bt_status st = loader_init(&l, m, tok, img, &o);
    /* What batch_alloc allocates per row: pixels (3 x 32 x 32 fp32), ids and mask (T int32
     * each), sampled and record (int64) and the id pointer, and with choices 5 x T ids and
     * mask plus the label; two slots. The image working set and cache are small here. */
    uint64_t row = 3 * 32 * 32 * 4 + 24 * 8 + 24 + (o.with_choices ? 24 * 8 * 5 + 4 : 0);
    char want[64], need[32];
    snprintf(want, sizeof want, "needs %s", bt_mem_format(need, sizeof need, row * 65536 * 2));
    tu_check(st == BT_ERR_NOMEM && l == NULL && strstr(bt_error_message(), "the data loader") &&
                 strstr(bt_error_message(), want) &&
                 strstr(bt_error_message(), "reduce the batch size"),
             "loader estimate (%s) refuses it on 64 MB: %s", want, bt_error_message());
    tu_unsetenv("BT_MEM_AVAILABLE");
#if defined(__SANITIZE_ADDRESS__)
    /* Not a check: ASan reserves the address space itself, so RLIMIT_AS cannot be used. */
    printf("# RLIMIT_AS case not run under ASan\n");
#else
    tu_setenv("BT_MEM_CHECK", "0", 1);
    if (tu_check(tu_cap_address_space((size_t)512 << 20), "cap the address space")) {
        st = loader_init(&l, m, tok, img, &o);
        tu_uncap_address_space();
        tu_check(st == BT_ERR_NOMEM && l == NULL &&
                     strstr(bt_error_message(), "out of memory setting up the data loader"),
                 "loader allocation failing under RLIMIT_AS: a status, not an abort: %s",
                 st ? bt_error_message() : "succeeded");
        if (st == BT_OK) loader_free(l);
    }
    tu_unsetenv("BT_MEM_CHECK");
#endif
}

static void test_loader_all_bad(const tokenizer *tok, const image_preprocess_config *img) {
    char path[1100];
    snprintf(path, sizeof path, "%s/allmissing.jsonl", dir);
    tu_setup_text(path, "{\"image\": \"no1.jpg\", \"caption\": \"a\"}\n"
                        "{\"image\": \"no2.jpg\", \"caption\": \"b\"}\n"
                        "{\"image\": \"no3.jpg\", \"caption\": \"c\"}\n");
    manifest m;
    BT_ASSERT(manifest_load(&m, path, NULL) == BT_OK);
    loader_options o = opts(MANIFEST_ON_ERROR_SKIP, 2);
    loader *l;
    BT_ASSERT(loader_init(&l, &m, tok, img, &o) == BT_OK);
    loader_batch *b;
    bt_status st = loader_next(l, &b);
    tu_check(st == BT_ERR_MISSING && !b && strstr(bt_error_message(), "no valid record") &&
                 strstr(bt_error_message(), path),
             "skip with every image missing: %s", bt_error_message());
    loader_free(l);
    manifest_free(&m);
}

/* Generated datasets are outputs like any other (src/fileio.h): a split of size 0 leaves no
 * old manifest, a manifest target that is a FIFO is refused before any image is written,
 * and a manifest FIFO given as input is refused instead of blocking. */
static void test_synth_outputs(void) {
    char out[1200], train[1300], val[1300];
    snprintf(out, sizeof out, "%s/synth_redo", dir);
    snprintf(train, sizeof train, "%s/train.jsonl", out);
    snprintf(val, sizeof val, "%s/val.jsonl", out);
    synth_options so = {.out_dir = out, .n = {3, 2, 0}, .seed = 1, .size = 16};
    tu_check(synth_generate(&so) == BT_OK, "synth 3/2/0");
    so.n[0] = 0;
    tu_check(synth_generate(&so) == BT_OK, "synth again with --train 0");
    struct stat sb;
    tu_check(stat(train, &sb) != 0 && stat(val, &sb) == 0,
             "--train 0 removes the old train.jsonl, keeps val.jsonl");
    unlink(val);
    if (tu_check(mkfifo(val, 0600) == 0, "make a FIFO val.jsonl")) {
        bt_error_clear();
        bt_status st = synth_generate(&so);
        tu_check(st == BT_ERR_IO && strstr(bt_error_message(), "is a FIFO"),
                 "val.jsonl is a FIFO: refused: %s", bt_error_message());
        tu_check(stat(val, &sb) == 0 && S_ISFIFO(sb.st_mode), "the FIFO is left alone");
        manifest m;
        st = manifest_load(&m, val, NULL);
        tu_check(st == BT_ERR_IO && strstr(bt_error_message(), "is a FIFO"),
                 "a FIFO manifest is refused at once: %s", bt_error_message());
        manifest_free(&m);
    }
}

int main(void) {
    snprintf(dir, sizeof dir, "%s", tu_tmpdir());
    test_synth_outputs();
    test_manifest_stop();
    test_manifest_skip();
    test_manifest_files();
    test_manifest_csv();

    char mpath[1300], model[1200];
    make_loader_data(mpath, sizeof mpath);
    manifest m;
    BT_ASSERT(manifest_load(&m, mpath, NULL) == BT_OK);
    const char *configs = getenv("BT_CONFIGS");
    snprintf(model, sizeof model, "%s/synthetic", configs ? configs : "configs");
    tokenizer tok;
    bt_status st = tokenizer_load(&tok, model);
    if (!tu_check(st == BT_OK, "tokenizer %s: %s", model, st ? bt_error_message() : "ok")) {
        manifest_free(&m);
        return tu_finish();
    }
    image_preprocess_config img;
    image_preprocess_config_default(&img, 32);
    test_loader_policies(&m, &tok, &img);
    test_loader_memory(&m, &tok, &img);
    test_loader_all_bad(&tok, &img);
    manifest_free(&m);
    tokenizer_free(&tok);
    return tu_finish();
}
