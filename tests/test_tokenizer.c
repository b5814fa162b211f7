/* test_tokenizer.c: the RoBERTa byte-level BPE tokenizer (src/data/tokenizer.h) against
 * ids computed by an independent Python reference.
 *
 * Fixtures (tests/fixtures/tokenizer/, regenerate with the commands in README.md there):
 * vocab.json + merges.txt + tokenizer.json trained by scripts/train_bpe.py on corpus.txt,
 * and cases.json written by scripts/bpe_reference.py (GPT-2's encoder algorithm + the
 * `regex` module + HF's added-token/template/truncation rules) from inputs.json.
 *
 * Checks: every encode case (ids equal); the decode of every case equals the reference's
 * decode; decode(encode(x)) == x for valid UTF-8 without added tokens (lstrip drops spaces);
 * single/pair templates with truncation, padding and masks; the decode cases; loading from
 * vocab.json + merges.txt and from merges written as ["a", "b"] pairs gives the same ids;
 * the cache on or off gives the same ids; 4 threads encoding concurrently get the reference
 * ids; the encode capacity contract; model.md 5.2's sanity example structure.
 * All comparisons are exact (token ids are integers: no tolerance applies).
 *
 * Deliberately not here: malformed files and fuzzing (test_tokenizer_bad.c), speed
 * (bench_tokenizer.c). */
#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "test_util.h"
#include "data/tokenizer.h"

enum { MAX_IDS = 4096 };

typedef struct enc_case {
    const char *name;
    char *text; /* (len) raw bytes */
    size_t len;
    int valid_utf8;
    int32_t *ids; /* (n) */
    size_t n;
} enc_case;

static enc_case *g_cases;
static size_t g_ncases;

static int32_t *json_ids(const cJSON *arr, size_t *n) {
    *n = (size_t)cJSON_GetArraySize(arr);
    int32_t *ids = malloc((*n + 1) * sizeof *ids);
    size_t i = 0;
    for (const cJSON *c = arr->child; c; c = c->next)
        ids[i++] = (int32_t)c->valuedouble;
    return ids;
}

static char *hex_decode(const char *hex, size_t *len) {
    size_t n = strlen(hex) / 2;
    char *out = malloc(n + 1);
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        sscanf(hex + 2 * i, "%2x", &v);
        out[i] = (char)v;
    }
    out[n] = 0;
    *len = n;
    return out;
}

/* A case's "text" may contain U+0000, which cJSON's C strings cannot hold; the fixture
 * keeps such texts but cJSON stops at the NUL, so those come from a hex twin instead. */
static char *case_text(const cJSON *c, size_t *len) {
    const cJSON *hex = cJSON_GetObjectItem(c, "hex");
    if (hex) return hex_decode(hex->valuestring, len);
    const char *s = cJSON_GetObjectItem(c, "text")->valuestring;
    *len = strlen(s);
    return strdup(s);
}

static int ids_equal(const char *what, const char *name, const int32_t *got, size_t ngot,
                     const int32_t *want, size_t nwant) {
    size_t i = 0;
    while (i < ngot && i < nwant && got[i] == want[i])
        i++;
    if (i == ngot && ngot == nwant) return tu_check(1, "%s %s (%zu ids)", what, name, ngot);
    return tu_check(0, "%s %s: first difference at %zu (got %d, want %d), lengths %zu vs %zu", what,
                    name, i, i < ngot ? (int)got[i] : -1, i < nwant ? (int)want[i] : -1, ngot,
                    nwant);
}

/* Encodes every case with t and compares with the reference ids; returns #mismatches
 * (quiet: used for the alternative loaders and threads). */
static size_t count_mismatches(const tokenizer *t) {
    int32_t ids[MAX_IDS]; /* per thread */
    size_t bad = 0;
    for (size_t k = 0; k < g_ncases; k++) {
        size_t n;
        bt_status st = tokenizer_encode(t, g_cases[k].text, g_cases[k].len, ids, MAX_IDS, &n);
        if (st || n != g_cases[k].n || memcmp(ids, g_cases[k].ids, n * sizeof *ids)) bad++;
    }
    return bad;
}

static void test_encode_cases(const tokenizer *t, const cJSON *arr) {
    static int32_t ids[MAX_IDS];
    static char dec[4 * MAX_IDS];
    g_ncases = (size_t)cJSON_GetArraySize(arr);
    g_cases = calloc(g_ncases, sizeof *g_cases);
    size_t k = 0;
    for (const cJSON *c = arr->child; c; c = c->next, k++) {
        enc_case *e = &g_cases[k];
        e->name = cJSON_GetObjectItem(c, "name")->valuestring;
        e->text = case_text(c, &e->len);
        e->valid_utf8 = cJSON_IsTrue(cJSON_GetObjectItem(c, "valid_utf8"));
        e->ids = json_ids(cJSON_GetObjectItem(c, "ids"), &e->n);
        size_t n = 0;
        bt_status st = tokenizer_encode(t, e->text, e->len, ids, MAX_IDS, &n);
        if (!tu_check(st == BT_OK, "encode %s: %s", e->name, st ? bt_error_message() : "ok"))
            continue;
        ids_equal("encode", e->name, ids, n, e->ids, e->n);

        /* decode == the reference's decode of the same ids */
        size_t wl, dl = 0;
        char *want = hex_decode(cJSON_GetObjectItem(c, "decoded_hex")->valuestring, &wl);
        st = tokenizer_decode(t, ids, n, 0, dec, sizeof dec, &dl);
        tu_check(st == BT_OK && dl == wl && memcmp(dec, want, dl) == 0,
                 "decode(encode(%s)) == reference decode", e->name);
        free(want);
        /* round trip: exact for valid UTF-8 unless <mask>'s lstrip swallowed spaces */
        if (e->valid_utf8 && !strstr(e->text, "<mask>"))
            tu_check(st == BT_OK && dl == e->len && memcmp(dec, e->text, dl) == 0,
                     "decode(encode(%s)) == text", e->name);
    }
}

static void test_templates(const tokenizer *t, const cJSON *arr) {
    for (const cJSON *c = arr->child; c; c = c->next) {
        const char *name = cJSON_GetObjectItem(c, "name")->valuestring;
        const char *a = cJSON_GetObjectItem(c, "text")->valuestring;
        const cJSON *pair = cJSON_GetObjectItem(c, "pair");
        size_t max_length = (size_t)cJSON_GetObjectItem(c, "max_length")->valuedouble;
        int truncate = cJSON_IsTrue(cJSON_GetObjectItem(c, "truncate"));
        int pad = cJSON_IsTrue(cJSON_GetObjectItem(c, "pad"));
        size_t nw, nm;
        int32_t *want = json_ids(cJSON_GetObjectItem(c, "ids"), &nw);
        int32_t *want_mask = json_ids(cJSON_GetObjectItem(c, "attention_mask"), &nm);
        int32_t *ids = malloc(max_length * sizeof *ids), *mask = malloc(max_length * sizeof *mask);
        for (size_t i = 0; i < max_length; i++)
            ids[i] = mask[i] = -7; /* sentinel */
        size_t n = 0;
        bt_status st = pair ? tokenizer_encode_pair(t, a, strlen(a), pair->valuestring,
                                                    strlen(pair->valuestring), max_length, truncate,
                                                    pad, ids, mask, &n)
                            : tokenizer_encode_single(t, a, strlen(a), max_length, truncate, pad,
                                                      ids, mask, &n);
        if (tu_check(st == BT_OK, "template %s: %s", name, st ? bt_error_message() : "ok")) {
            ids_equal("template ids", name, ids, n, want, nw);
            ids_equal("template mask", name, mask, n, want_mask, nm);
        }
        free(ids);
        free(mask);
        free(want);
        free(want_mask);
    }
}

static void test_decode_cases(const tokenizer *t, const cJSON *arr) {
    char out[1024];
    for (const cJSON *c = arr->child; c; c = c->next) {
        const char *name = cJSON_GetObjectItem(c, "name")->valuestring;
        const char *want = cJSON_GetObjectItem(c, "text")->valuestring;
        int skip = cJSON_IsTrue(cJSON_GetObjectItem(c, "skip_special"));
        size_t n, len = 0;
        int32_t *ids = json_ids(cJSON_GetObjectItem(c, "ids"), &n);
        bt_status st = tokenizer_decode(t, ids, n, skip, out, sizeof out, &len);
        tu_check(st == BT_OK && strcmp(out, want) == 0 && len == strlen(want),
                 "decode %s: got \"%s\" want \"%s\"", name, st ? bt_error_message() : out, want);
        /* too small a buffer: error, the needed length still reported */
        size_t len2 = 0;
        st = tokenizer_decode(t, ids, n, skip, out, strlen(want), &len2);
        tu_check(st == BT_ERR_ARG && len2 == strlen(want), "decode %s into cap %zu: BT_ERR_ARG",
                 name, strlen(want));
        free(ids);
    }
    int32_t bad[2] = {5, 1 << 20};
    tu_check(tokenizer_decode(t, bad, 2, 0, out, sizeof out, NULL) == BT_ERR_ARG &&
                 strstr(bt_error_message(), "ids[1]"),
             "decode of an id outside the vocabulary names its position: %s", bt_error_message());
}

/* model.md 5.2: "a bunch of <mask> laying on a tower." is 11 tokens with <mask> at 4 (for
 * roberta-base; every word is also a single token in the fixture vocabulary). */
static void test_sanity_example(const tokenizer *t) {
    const char *s = "a bunch of <mask> laying on a tower.";
    int32_t ids[50], mask[50];
    size_t n;
    bt_status st = tokenizer_encode_single(t, s, strlen(s), 50, 1, 1, ids, mask, &n);
    int real = 0;
    for (size_t i = 0; i < n; i++)
        real += mask[i];
    tu_check(st == BT_OK && n == 50 && real == 11 && ids[4] == t->mask_id && ids[0] == t->cls_id &&
                 ids[10] == t->sep_id && ids[11] == t->pad_id,
             "sanity example: 11 real tokens, <mask> at 4, padded to 50");
}

static void test_contracts(const tokenizer *t) {
    const char *s = "a man riding a wave";
    int32_t ids[8];
    size_t n = 0;
    for (int i = 0; i < 8; i++)
        ids[i] = -7;
    bt_status st = tokenizer_encode(t, s, strlen(s), ids, 2, &n);
    int32_t full[16];
    size_t nf = 0;
    tokenizer_encode(t, s, strlen(s), full, 16, &nf);
    tu_check(st == BT_ERR_ARG && n == nf && nf > 2 && ids[0] == full[0] && ids[1] == full[1] &&
                 ids[2] == -7,
             "encode with a small cap: BT_ERR_ARG, full count, prefix written, nothing past cap");
    st = tokenizer_encode(t, NULL, 0, NULL, 0, &n);
    tu_check(st == BT_OK && n == 0, "encode of (NULL, 0) is empty");
    int32_t row[6];
    st = tokenizer_encode_single(t, s, strlen(s), 6, 0, 1, row, NULL, &n);
    tu_check(st == BT_ERR_ARG, "encode_single without truncation, too long: BT_ERR_ARG");
    st = tokenizer_encode_single(t, s, strlen(s), 1, 1, 1, row, NULL, &n);
    tu_check(st == BT_ERR_ARG, "encode_single max_length 1: BT_ERR_ARG");
    st = tokenizer_encode_pair(t, s, strlen(s), s, strlen(s), 3, 1, 1, row, NULL, &n);
    tu_check(st == BT_ERR_ARG, "encode_pair max_length 3: BT_ERR_ARG");
    st = tokenizer_encode_pair(t, s, strlen(s), "x", 1, 6, 0, 1, row, NULL, &n);
    tu_check(st == BT_ERR_ARG, "encode_pair without truncation, too long: BT_ERR_ARG");
}

static void test_vocab_lookup(const tokenizer *t, const char *vocab_path) {
    size_t len;
    char *txt = (char *)tu_read_file(vocab_path, &len);
    cJSON *v = cJSON_Parse(txt);
    free(txt);
    int ok = v != NULL;
    int32_t max_id = -1;
    size_t count = 0;
    for (const cJSON *c = v ? v->child : NULL; c; c = c->next, count++) {
        int32_t id = (int32_t)c->valuedouble;
        if (id > max_id) max_id = id;
        const char *back = tokenizer_id_to_token(t, id);
        if (tokenizer_token_to_id(t, c->string) != id || !back || strcmp(back, c->string)) ok = 0;
    }
    tu_check(ok && count > 800, "token_to_id / id_to_token agree with vocab.json (%zu tokens)",
             count);
    tu_check(t->vocab_size == max_id + 1, "vocab_size %d == max id + 1 = %d", (int)t->vocab_size,
             (int)max_id + 1);
    const cJSON *m = cJSON_GetObjectItem(v, "<mask>"), *p = cJSON_GetObjectItem(v, "<pad>");
    const cJSON *s = cJSON_GetObjectItem(v, "<s>"), *e = cJSON_GetObjectItem(v, "</s>");
    const cJSON *u = cJSON_GetObjectItem(v, "<unk>");
    tu_check(m && p && s && e && u && t->mask_id == (int32_t)m->valuedouble &&
                 t->pad_id == (int32_t)p->valuedouble && t->cls_id == (int32_t)s->valuedouble &&
                 t->sep_id == (int32_t)e->valuedouble && t->unk_id == (int32_t)u->valuedouble,
             "special ids match vocab.json (cls %d pad %d sep %d unk %d mask %d)", (int)t->cls_id,
             (int)t->pad_id, (int)t->sep_id, (int)t->unk_id, (int)t->mask_id);
    tu_check(tokenizer_token_to_id(t, "no such token") == -1 &&
                 tokenizer_id_to_token(t, -1) == NULL &&
                 tokenizer_id_to_token(t, t->vocab_size) == NULL,
             "unknown token / id lookups");
    cJSON_Delete(v);
}

static void test_other_loaders(const tokenizer *ref, const char *dir) {
    char vpath[1100], mpath[1100], tpath[1100], sub[1100], out[1200];
    snprintf(vpath, sizeof vpath, "%s/vocab.json", dir);
    snprintf(mpath, sizeof mpath, "%s/merges.txt", dir);
    snprintf(tpath, sizeof tpath, "%s/tokenizer.json", dir);

    /* A directory with only vocab.json + merges.txt goes through the second loader. */
    snprintf(sub, sizeof sub, "%s/files", tu_tmpdir());
    mkdir(sub, 0700);
    size_t len;
    char *v = (char *)tu_read_file(vpath, &len);
    snprintf(out, sizeof out, "%s/vocab.json", sub);
    int ok = tu_write_file(out, v, len);
    free(v);
    char *mg = (char *)tu_read_file(mpath, &len);
    snprintf(out, sizeof out, "%s/merges.txt", sub);
    ok = ok && tu_write_file(out, mg, len);
    free(mg);
    tokenizer t2;
    bt_status st = tokenizer_load(&t2, sub);
    if (tu_check(ok && st == BT_OK, "load vocab.json + merges.txt: %s",
                 st ? bt_error_message() : "ok")) {
        tu_check(count_mismatches(&t2) == 0, "vocab.json + merges.txt: same ids for all %zu cases",
                 g_ncases);
        tu_check(t2.vocab_size == ref->vocab_size && t2.mask_id == ref->mask_id &&
                     t2.pad_id == ref->pad_id && t2.cls_id == ref->cls_id &&
                     t2.sep_id == ref->sep_id && t2.unk_id == ref->unk_id,
                 "vocab.json + merges.txt: same vocab size and special ids");
        tokenizer_free(&t2);
    }

    /* tokenizer.json with merges as ["a", "b"] pairs (tokenizers >= 0.20 writes those). */
    char *tj = (char *)tu_read_file(tpath, &len);
    cJSON *root = cJSON_Parse(tj);
    free(tj);
    cJSON *merges = cJSON_GetObjectItem(cJSON_GetObjectItem(root, "model"), "merges");
    cJSON *pairs = cJSON_CreateArray();
    for (const cJSON *c = merges->child; c; c = c->next) {
        const char *s = c->valuestring, *sp = strchr(s, ' ');
        char left[256];
        snprintf(left, sizeof left, "%.*s", (int)(sp - s), s);
        cJSON *p = cJSON_CreateArray();
        cJSON_AddItemToArray(p, cJSON_CreateString(left));
        cJSON_AddItemToArray(p, cJSON_CreateString(sp + 1));
        cJSON_AddItemToArray(pairs, p);
    }
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(root, "model"), "merges", pairs);
    char *printed = cJSON_PrintUnformatted(root);
    snprintf(out, sizeof out, "%s/tokenizer_pairs.json", tu_tmpdir());
    ok = tu_write_file(out, printed, strlen(printed));
    free(printed);
    cJSON_Delete(root);
    st = tokenizer_load_json(&t2, out);
    if (tu_check(ok && st == BT_OK, "load tokenizer.json with pair merges: %s",
                 st ? bt_error_message() : "ok")) {
        tu_check(count_mismatches(&t2) == 0, "pair merges: same ids for all %zu cases", g_ncases);
        tokenizer_free(&t2);
    }
}

static void *thread_main(void *arg) {
    const tokenizer *t = arg;
    size_t bad = 0;
    for (int round = 0; round < 20; round++)
        bad += count_mismatches(t);
    return (void *)bad;
}

static void test_threads(tokenizer *t) {
    tokenizer_set_cache(t, 1); /* cleared: the threads race on filling it */
    enum { NT = 4 };
    pthread_t th[NT];
    for (int i = 0; i < NT; i++)
        pthread_create(&th[i], NULL, thread_main, t);
    size_t bad = 0;
    for (int i = 0; i < NT; i++) {
        void *r;
        pthread_join(th[i], &r);
        bad += (size_t)r;
    }
    tu_check(bad == 0, "%d threads x 20 rounds x %zu cases concurrently: %zu mismatches", NT,
             g_ncases, bad);
    tokenizer_set_cache(t, 0);
    tu_check(count_mismatches(t) == 0, "cache off: same ids");
    tokenizer_set_cache(t, 1);
    tu_check(count_mismatches(t) == 0 && count_mismatches(t) == 0,
             "cache on, cold then warm: same ids");
}

int main(void) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", tu_fixture_path("tokenizer"));
    tokenizer t;
    bt_status st = tokenizer_load(&t, dir);
    if (!tu_check(st == BT_OK, "load %s: %s", dir, st ? bt_error_message() : "ok"))
        return tu_finish();
    char path[1100];
    snprintf(path, sizeof path, "%s/cases.json", dir);
    char *txt = (char *)tu_read_file(path, NULL);
    cJSON *cases = txt ? cJSON_Parse(txt) : NULL;
    free(txt);
    if (!tu_check(cases != NULL, "read %s", path)) return tu_finish();

    test_encode_cases(&t, cJSON_GetObjectItem(cases, "encode"));
    test_templates(&t, cJSON_GetObjectItem(cases, "template"));
    test_decode_cases(&t, cJSON_GetObjectItem(cases, "decode"));
    test_sanity_example(&t);
    test_contracts(&t);
    snprintf(path, sizeof path, "%s/vocab.json", dir);
    test_vocab_lookup(&t, path);
    test_other_loaders(&t, dir);
    test_threads(&t);

    for (size_t k = 0; k < g_ncases; k++) {
        free(g_cases[k].text);
        free(g_cases[k].ids);
    }
    free(g_cases);
    cJSON_Delete(cases);
    tokenizer_free(&t);
    return tu_finish();
}
