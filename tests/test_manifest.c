/* test_manifest.c: reading well-formed manifests (the bad-input cases are in
 * test_data_bad.c).
 *
 * Checks: every field of every record, in file order; blank lines, CRLF and a BOM skipped;
 * line numbers kept; image paths joined to the manifest's directory (absolute ones kept);
 * integer and string ids; unknown keys ignored; configurable column names (the New Yorker
 * run's image_description); the matching-task fields; non-ASCII UTF-8 (and \u escapes) kept
 * byte for byte; a file made by the synthetic generator reads back with the captions it was
 * generated from; a large manifest keeps one arena; CSV/TSV manifests (RFC 4180 quoting) and
 * HF imagefolder directories. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/manifest.h"
#include "data/synth.h"
#include "test_util.h"

static int str_eq(const char *a, const char *b) {
    return a && b ? strcmp(a, b) == 0 : a == b;
}

static void test_basic(const char *dir) {
    char path[1024], want[1100];
    snprintf(path, sizeof path, "%s/train.jsonl", dir);
    tu_setup_text(path,
                  "\xEF\xBB\xBF{\"image\": \"img/a.jpg\", \"caption\": \"a cat\", \"id\": \"x1\"}\n"
                  "\n"
                  "   \t\r\n"
                  "{\"caption\": \"two dogs\", \"image\": \"/abs/b.jpg\", \"id\": 42, "
                  "\"extra\": [1, {\"k\": null}]}\r\n"
                  "{\"image\": \"c.jpg\", \"caption\": \"caf\\u00e9 \xE2\x98\x95\"}");
    manifest m;
    bt_status st = manifest_load(&m, path, NULL);
    tu_check(st == BT_OK, "well-formed manifest loads: %s", st ? bt_error_message() : "ok");
    tu_check(m.n == 3 && m.n_lines == 5 && m.n_skipped == 0,
             "3 records from 5 lines (blank ones skipped): n=%zu lines=%zu", m.n, m.n_lines);
    if (m.n != 3) {
        manifest_free(&m);
        return;
    }
    snprintf(want, sizeof want, "%s/img/a.jpg", dir);
    tu_check(str_eq(manifest_image(&m, 0), want), "relative image joined to the directory: %s",
             manifest_image(&m, 0));
    tu_check(str_eq(manifest_image(&m, 1), "/abs/b.jpg"), "absolute image path kept");
    tu_check(str_eq(manifest_caption(&m, 0), "a cat") && str_eq(manifest_id(&m, 0), "x1"),
             "caption and string id of line 1 (after the BOM)");
    tu_check(str_eq(manifest_id(&m, 1), "42") && str_eq(manifest_caption(&m, 1), "two dogs"),
             "integer id printed as \"42\", CRLF stripped");
    tu_check(manifest_id(&m, 2) == NULL, "record without id has none");
    tu_check(str_eq(manifest_caption(&m, 2), "caf\xC3\xA9 \xE2\x98\x95"),
             "\\u escape and raw UTF-8 both decode to UTF-8 bytes");
    tu_check(m.records[0].line == 1 && m.records[1].line == 4 && m.records[2].line == 5,
             "line numbers 1, 4, 5 (got %d, %d, %d)", m.records[0].line, m.records[1].line,
             m.records[2].line);
    tu_check(!manifest_has_choices(&m, 0) && m.records[0].label == -1,
             "no matching-task fields unless given");
    manifest_free(&m);

    /* A bare file name resolves against the current directory: the image path is kept. */
    manifest m2;
    snprintf(path, sizeof path, "%s/bare.jsonl", dir);
    tu_setup_text(path, "{\"image\": \"x.jpg\", \"caption\": \"c\"}\n");
    char cwd[1024];
    BT_ASSERT(getcwd(cwd, sizeof cwd) && chdir(dir) == 0);
    st = manifest_load(&m2, "bare.jsonl", NULL);
    BT_ASSERT(chdir(cwd) == 0);
    tu_check(st == BT_OK && str_eq(manifest_image(&m2, 0), "x.jpg"),
             "manifest given as a bare name: image path x.jpg kept relative");
    manifest_free(&m2);
}

static void test_matching_and_keys(const char *dir) {
    char path[1024];
    snprintf(path, sizeof path, "%s/val.jsonl", dir);
    tu_setup_text(path, "{\"image\": \"1.jpg\", \"image_description\": \"a room\", "
                        "\"caption_choices\": [\"c0\", \"c1\", \"c2\", \"c3\", \"c4\"], "
                        "\"label\": 3, \"caption\": 7}\n"
                        "{\"image\": \"2.jpg\", \"image_description\": \"a bar\", "
                        "\"caption_choices\": [\"d0\", \"d1\", \"d2\", \"d3\", \"d4\"]}\n");
    manifest_options o = manifest_options_default();
    o.caption_key = "image_description";
    manifest m;
    bt_status st = manifest_load(&m, path, &o);
    tu_check(st == BT_OK && m.n == 2,
             "New Yorker style manifest with caption_key "
             "image_description: %s",
             st ? bt_error_message() : "ok");
    if (st == BT_OK && m.n == 2) {
        tu_check(str_eq(manifest_caption(&m, 0), "a room"),
                 "caption read from image_description (the numeric 'caption' is ignored)");
        int ok = manifest_has_choices(&m, 0) && m.records[0].label == 3;
        for (int k = 0; k < 5; k++) {
            char w[4] = {'c', (char)('0' + k), 0};
            ok &= str_eq(manifest_choice(&m, 0, k), w);
        }
        tu_check(ok, "five choices in order and label 3");
        tu_check(manifest_has_choices(&m, 1) && m.records[1].label == -1 &&
                     str_eq(manifest_choice(&m, 1, 4), "d4"),
                 "choices without label (an unlabelled test split) allowed, label -1");
    }
    manifest_free(&m);

    /* Renamed choices/label/id columns. */
    snprintf(path, sizeof path, "%s/renamed.jsonl", dir);
    tu_setup_text(path, "{\"file\": \"f.jpg\", \"text\": \"t\", \"key\": \"k9\", "
                        "\"opts\": [\"a\", \"b\", \"c\", \"d\", \"e\"], \"answer\": 0}\n");
    manifest_options r = {.image_key = "file",
                          .caption_key = "text",
                          .id_key = "key",
                          .choices_key = "opts",
                          .label_key = "answer"};
    st = manifest_load(&m, path, &r);
    tu_check(st == BT_OK && m.n == 1 && str_eq(manifest_id(&m, 0), "k9") &&
                 m.records[0].label == 0 && str_eq(manifest_choice(&m, 0, 1), "b"),
             "every column name configurable");
    manifest_free(&m);
}

static void test_synthetic(const char *dir) {
    char out[1024], path[1100];
    snprintf(out, sizeof out, "%s/synth", dir);
    synth_options o = {.out_dir = out, .n = {20, 6, 0}, .seed = 5, .size = 32};
    bt_status st = synth_generate(&o);
    tu_check(st == BT_OK, "synthetic dataset generated: %s", st ? bt_error_message() : "ok");
    manifest m;
    snprintf(path, sizeof path, "%s/train.jsonl", out);
    st = manifest_load(&m, path, NULL);
    int ok = st == BT_OK && m.n == 20;
    for (size_t i = 0; ok && i < m.n; i++) {
        synth_scene sc;
        char cap[SYNTH_CAPTION_MAX], id[32], img[1200];
        synth_scene_sample(&sc, 5, SYNTH_SPLIT_TRAIN, (int64_t)i);
        synth_scene_caption(&sc, cap, sizeof cap);
        snprintf(id, sizeof id, "train-%06zu", i);
        snprintf(img, sizeof img, "%s/images/train/%06zu.jpg", out, i);
        ok = str_eq(manifest_caption(&m, i), cap) && str_eq(manifest_id(&m, i), id) &&
             str_eq(manifest_image(&m, i), img);
    }
    tu_check(ok, "synthetic train manifest: 20 records whose captions, ids and paths are "
                 "the generator's");
    manifest_free(&m);

    snprintf(path, sizeof path, "%s/val.jsonl", out);
    st = manifest_load(&m, path, NULL);
    ok = st == BT_OK && m.n == 6;
    for (size_t i = 0; ok && i < m.n; i++) {
        int lab = m.records[i].label;
        ok = manifest_has_choices(&m, i) && lab >= 0 && lab < 5 &&
             str_eq(manifest_choice(&m, i, lab), manifest_caption(&m, i));
        for (int a = 0; ok && a < 5; a++)
            for (int b = a + 1; b < 5; b++)
                ok &= !str_eq(manifest_choice(&m, i, a), manifest_choice(&m, i, b));
    }
    tu_check(ok, "synthetic val: choices[label] is the caption, five distinct choices");
    manifest_free(&m);
    snprintf(path, sizeof path, "%s/test.jsonl", out);
    FILE *f = fopen(path, "rb");
    tu_check(f == NULL, "an empty split writes no manifest");
    if (f) fclose(f);
}

static void test_many(const char *dir) {
    char path[1024];
    snprintf(path, sizeof path, "%s/many.jsonl", dir);
    FILE *f = fopen(path, "wb");
    BT_ASSERT(f);
    for (int i = 0; i < 20000; i++)
        fprintf(f, "{\"image\": \"im/%d.jpg\", \"caption\": \"caption number %d\"}\n", i % 700, i);
    fclose(f);
    manifest m;
    bt_status st = manifest_load(&m, path, NULL);
    char want[64];
    snprintf(want, sizeof want, "caption number %d", 19999);
    tu_check(st == BT_OK && m.n == 20000 && str_eq(manifest_caption(&m, 19999), want) &&
                 m.records[19999].line == 20000,
             "20000 records, last one intact");
    tu_check(sizeof(manifest_record) <= 48, "records are compact: %zu bytes each",
             sizeof(manifest_record));
    manifest_free(&m);
}


/* CSV and TSV: the same records as JSON Lines would give, RFC 4180 quoting (a quoted comma,
 * a doubled quote, a newline inside quotes), a BOM, CRLF, a blank line, an unused column, an
 * empty optional cell and the matching-task columns (choices as JSON text). The expected
 * values are written out by hand from the file text. */
static void test_csv(const char *dir) {
    char path[1024], want[1100];
    snprintf(path, sizeof path, "%s/train.csv", dir);
    tu_setup_text(
        path, "\xEF\xBB\xBFid,image,caption,extra,caption_choices,label\r\n"
              "a1,img/a.jpg,\"a cat, sitting\",x,,\r\n"
              "\r\n"
              "a2,/abs/b.jpg,\"she said \"\"hi\"\"\nthen left\",,\"[\"\"p\"\",\"\"q\"\",\"\"r\"\","
              "\"\"s\"\",\"\"t\"\"]\",3\n"
              ",c.jpg,caf\xC3\xA9,y,,");
    manifest m;
    bt_status st = manifest_load(&m, path, NULL);
    tu_check(st == BT_OK && m.n == 3 && m.n_skipped == 0, "CSV loads 3 records: %s",
             st ? bt_error_message() : "ok");
    if (st == BT_OK && m.n == 3) {
        snprintf(want, sizeof want, "%s/img/a.jpg", dir);
        tu_check(str_eq(manifest_image(&m, 0), want) && str_eq(manifest_id(&m, 0), "a1") &&
                     str_eq(manifest_caption(&m, 0), "a cat, sitting"),
                 "CSV row 1: BOM stripped, quoted comma kept, image joined to the directory");
        tu_check(str_eq(manifest_caption(&m, 1), "she said \"hi\"\nthen left") &&
                     str_eq(manifest_image(&m, 1), "/abs/b.jpg"),
                 "CSV row 2: doubled quotes and a newline inside quotes: '%s'",
                 manifest_caption(&m, 1));
        tu_check(manifest_has_choices(&m, 1) && str_eq(manifest_choice(&m, 1, 4), "t") &&
                     m.records[1].label == 3 && !manifest_has_choices(&m, 0) &&
                     m.records[0].label == -1,
                 "CSV choices cell (JSON text) and label cell read; empty cells absent");
        tu_check(manifest_id(&m, 2) == NULL && str_eq(manifest_caption(&m, 2), "caf\xC3\xA9"),
                 "CSV empty id cell is no id; UTF-8 kept");
        tu_check(m.records[0].line == 2 && m.records[1].line == 4 && m.records[2].line == 6,
                 "CSV record lines are where each row starts: 2, 4, 6 (got %d, %d, %d)",
                 m.records[0].line, m.records[1].line, m.records[2].line);
    }
    manifest_free(&m);

    snprintf(path, sizeof path, "%s/train.TSV", dir);
    tu_setup_text(path, "file\ttext\n"
                        "a.jpg\ta cat, with a comma\n"
                        "b.jpg\t\"tab\tinside\"\n");
    manifest_options o = manifest_options_default();
    o.image_key = "file";
    o.caption_key = "text";
    st = manifest_load(&m, path, &o);
    tu_check(st == BT_OK && m.n == 2 && str_eq(manifest_caption(&m, 0), "a cat, with a comma") &&
                 str_eq(manifest_caption(&m, 1), "tab\tinside"),
             "TSV (.TSV, renamed columns): commas are text, quoted tab kept: %s",
             st ? bt_error_message() : "ok");
    manifest_free(&m);
}

/* HF imagefolder: a directory with metadata.csv or metadata.jsonl; file_name is the image
 * column, paths relative to the directory. */
static void test_imagefolder(const char *dir) {
    char sub[1024], path[1100], want[1200];
    snprintf(sub, sizeof sub, "%s/folder_csv", dir);
    BT_ASSERT(mkdir(sub, 0777) == 0);
    snprintf(path, sizeof path, "%s/metadata.csv", sub);
    tu_setup_text(path, "file_name,text\ntrain/0001.png,a drawing\n");
    manifest_options o = manifest_options_default();
    o.caption_key = "text";
    manifest m;
    bt_status st = manifest_load(&m, sub, &o);
    snprintf(want, sizeof want, "%s/train/0001.png", sub);
    tu_check(st == BT_OK && m.n == 1 && str_eq(manifest_image(&m, 0), want) &&
                 str_eq(manifest_caption(&m, 0), "a drawing") && str_eq(m.path, path),
             "imagefolder with metadata.csv: %s", st ? bt_error_message() : manifest_image(&m, 0));
    manifest_free(&m);

    snprintf(sub, sizeof sub, "%s/folder_jsonl/", dir);
    BT_ASSERT(mkdir(sub, 0777) == 0);
    snprintf(path, sizeof path, "%smetadata.jsonl", sub);
    tu_setup_text(path, "{\"file_name\": \"x.jpg\", \"text\": \"one\"}\n");
    st = manifest_load(&m, sub, &o);
    tu_check(st == BT_OK && m.n == 1 && strstr(manifest_image(&m, 0), "folder_jsonl/x.jpg"),
             "imagefolder with metadata.jsonl (trailing slash): %s",
             st ? bt_error_message() : manifest_image(&m, 0));
    manifest_free(&m);
}

int main(void) {
    const char *dir = tu_tmpdir();
    test_basic(dir);
    test_matching_and_keys(dir);
    test_synthetic(dir);
    test_many(dir);
    test_csv(dir);
    test_imagefolder(dir);
    return tu_finish();
}
