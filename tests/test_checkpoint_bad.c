/* test_checkpoint_bad.c: bad model directories and failing saves (docs/style.md 9).
 *
 * Every bad input is made here from the valid tiny fixture (tests/fixtures/tiny): a missing
 * directory or file, config.json broken (bad JSON, wrong types, settings bt or HF cannot
 * run), weights absent or only as pytorch_model.bin / shards, truncated, a tensor of the
 * wrong shape or dtype, backbone keys or part of a head missing, a parameter stored twice.
 * Each case checks the status AND that the message names the file and the key / problem
 * (for shapes: the key, the expected and the found shape), and that a failed load leaves
 * nothing allocated (ASan/UBSan build: build-ckpt-asan).
 *
 * Failing saves: an aux source that is a FIFO (fails after weights and config are staged),
 * an aux target that is a FIFO (refused before writing), the disk is "full"
 * (RLIMIT_FSIZE below the weights size, SIGXFSZ ignored), the target is a regular file, the
 * base config is not JSON, the dtype is not savable. After each: the previous checkpoint's
 * files are byte-identical, no staged or temp file is left, and it still loads. Saving over
 * another model's directory leaves no mix of the two (its tokenizer files removed). */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "model/checkpoint.h"
#include "safetensors.h"
#include "test_util.h"

static const char *tmp;
static char fixture_dir[1024];

static const char *pjoin(const char *dir, const char *name) {
    static char buf[4][2600];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

static void copy_file(const char *src, const char *dst) {
    size_t n;
    uint8_t *b = tu_read_file(src, &n);
    if (!b) {
        printf("cannot read %s\n", src);
        exit(1);
    }
    tu_setup_file(dst, b, n);
    free(b);
}

/* <tmp>/<label>, created empty. */
static const char *case_dir(const char *label) {
    static char d[1100];
    snprintf(d, sizeof d, "%s/%s", tmp, label);
    mkdir(d, 0755);
    return d;
}

/* A model dir with the fixture's weights and `config` (NULL: the fixture's). */
static const char *dir_with_config(const char *label, const char *config, size_t config_len) {
    const char *d = case_dir(label);
    if (config)
        tu_setup_file(pjoin(d, "config.json"), config, config_len);
    else
        copy_file(pjoin(fixture_dir, "config.json"), pjoin(d, "config.json"));
    copy_file(pjoin(fixture_dir, "model.safetensors"), pjoin(d, "model.safetensors"));
    return d;
}

/* The fixture's config.json with the first `find` replaced by `repl`. */
static const char *config_case(const char *label, const char *find, const char *repl) {
    size_t n;
    char *cfg = (char *)tu_read_file(pjoin(fixture_dir, "config.json"), &n);
    char *at = strstr(cfg, find);
    if (!at) {
        printf("fixture config lacks '%s'\n", find);
        exit(1);
    }
    size_t out_n = n - strlen(find) + strlen(repl);
    char *out = malloc(out_n + 1);
    snprintf(out, out_n + 1, "%.*s%s%s", (int)(at - cfg), cfg, repl, at + strlen(find));
    const char *d = dir_with_config(label, out, out_n);
    free(out);
    free(cfg);
    return d;
}

/* Weights variants: the fixture's tensors with edits. */
typedef struct edit {
    const char *drop_prefix; /* drop keys starting with this */
    const char *reshape_key; /* write this key with shape new_shape (data: zeros) */
    int new_ndim;
    int64_t new_shape[4];
    const char *i64_key;      /* write this key as I64 zeros */
    const char *dup_bare_key; /* also write this prefixed key without its prefix */
} edit;

static const char *weights_case(const char *label, const edit *ed) {
    const char *d = case_dir(label);
    copy_file(pjoin(fixture_dir, "config.json"), pjoin(d, "config.json"));
    safetensors_file f;
    if (safetensors_open(&f, pjoin(fixture_dir, "model.safetensors")) != BT_OK) exit(1);
    safetensors_entry *e = calloc(f.n_tensors + 1, sizeof *e);
    static float zeros[4096];
    static int64_t izeros[4096];
    size_t n = 0;
    for (size_t i = 0; i < f.n_tensors; i++) {
        const safetensors_tensor *t = &f.tensors[i];
        if (ed->drop_prefix && strncmp(t->name, ed->drop_prefix, strlen(ed->drop_prefix)) == 0)
            continue;
        safetensors_entry *x = &e[n++];
        x->name = t->name;
        x->dtype = x->src_dtype = BT_DTYPE_F32;
        x->ndim = t->ndim;
        memcpy(x->shape, t->shape, sizeof t->shape);
        x->data = t->data;
        if (ed->reshape_key && strcmp(t->name, ed->reshape_key) == 0) {
            x->ndim = ed->new_ndim;
            memcpy(x->shape, ed->new_shape, sizeof ed->new_shape);
            x->data = zeros;
        }
        if (ed->i64_key && strcmp(t->name, ed->i64_key) == 0) {
            x->dtype = x->src_dtype = BT_DTYPE_I64;
            x->data = izeros;
        }
        if (ed->dup_bare_key && strcmp(t->name, ed->dup_bare_key) == 0) {
            safetensors_entry *y = &e[n++];
            *y = *x;
            y->name = t->name + strlen("bridgetower.");
        }
    }
    const char *meta[] = {"format", "pt", NULL};
    if (safetensors_write(pjoin(d, "model.safetensors"), e, n, meta) != BT_OK) {
        printf("%s: %s\n", label, bt_error_message());
        exit(1);
    }
    free(e);
    safetensors_close(&f);
    return d;
}

/* Loads dir (heads `heads`), expects `want` and a message holding s1..s3 (when set). */
static void expect_load_fail(const char *label, const char *dir, unsigned heads, bt_status want,
                             const char *s1, const char *s2, const char *s3) {
    bt_checkpoint_weights w;
    memset(&w, 0xab, sizeof w); /* load must reset whatever was there */
    bt_checkpoint_load_options o;
    bt_checkpoint_load_options_default(&o);
    o.heads = heads;
    bt_checkpoint_report r;
    bt_error_clear();
    bt_status s = bt_checkpoint_load(&w, dir, &o, &r);
    const char *msg = bt_error_message();
    int ok = s == want && (!s1 || strstr(msg, s1)) && (!s2 || strstr(msg, s2)) &&
             (!s3 || strstr(msg, s3)) && w.params == NULL && w.config_json == NULL &&
             w.table.tensors == NULL;
    tu_check(ok, "%s: %s (want %s) '%s'", label, bt_status_name(s), bt_status_name(want), msg);
    bt_checkpoint_report_free(&r);
    bt_checkpoint_weights_free(&w); /* safe on a zeroed struct */
}

/* --- save failures ------------------------------------------------------------------------ */

static const char *prev_dir;
static uint8_t *prev_files[3];
static size_t prev_len[3];
static const char *const prev_names[3] = {"model.safetensors", "config.json",
                                          "preprocessor_config.json"};

static int previous_intact(const char *blocker) {
    for (int i = 0; i < 3; i++) {
        size_t n;
        uint8_t *b = tu_read_file(pjoin(prev_dir, prev_names[i]), &n);
        int same = b && n == prev_len[i] && memcmp(b, prev_files[i], n) == 0;
        free(b);
        if (!same) {
            printf("  %s changed\n", prev_names[i]);
            return 0;
        }
    }
    DIR *dd = opendir(prev_dir);
    int clean = dd != NULL;
    for (struct dirent *de; dd && (de = readdir(dd));) {
        if (blocker && strcmp(de->d_name, blocker) == 0) continue;
        if (strstr(de->d_name, ".new.") || strstr(de->d_name, ".tmp.") ||
            strstr(de->d_name, ".bt-tmp.")) {
            printf("  leftover %s\n", de->d_name);
            clean = 0;
        }
    }
    if (dd) closedir(dd);
    bt_checkpoint_weights w;
    int loads = bt_checkpoint_load(&w, prev_dir, NULL, NULL) == BT_OK;
    bt_checkpoint_weights_free(&w);
    return clean && loads;
}

/* A config.json whose sizes are each in range but multiply out beyond any machine's memory
 * (2^24 x 2^16 word embeddings alone: 4.4 TB), and the tiny model on a "machine" of 1 MB
 * (BT_MEM_AVAILABLE): refused with a message before allocating, not an abort. */
static void test_memory_estimate(void) {
    size_t n;
    char *text = (char *)tu_read_file(pjoin(fixture_dir, "config.json"), &n);
    cJSON *j = text ? cJSON_Parse(text) : NULL;
    cJSON *tc = cJSON_GetObjectItemCaseSensitive(j, "text_config");
    if (!tu_check(tc != NULL, "fixture config has text_config")) {
        cJSON_Delete(j);
        free(text);
        return;
    }
    cJSON_ReplaceItemInObjectCaseSensitive(tc, "vocab_size", cJSON_CreateNumber(1 << 24));
    cJSON_ReplaceItemInObjectCaseSensitive(tc, "hidden_size", cJSON_CreateNumber(1 << 16));
    cJSON_ReplaceItemInObjectCaseSensitive(j, "hidden_size", cJSON_CreateNumber(1 << 16));
    char *huge = cJSON_Print(j);
    const char *d = case_dir("huge_config");
    tu_setup_text(pjoin(d, "config.json"), huge);
    bt_checkpoint_weights w;
    bt_error_clear();
    bt_status s = bt_checkpoint_init(&w, d, BT_HEADS_ALL, 1);
    const char *msg = bt_error_message();
    tu_check(s == BT_ERR_NOMEM && strstr(msg, "huge_config/config.json") &&
                 strstr(msg, "parameters") && strstr(msg, "needs") &&
                 strstr(msg, "available") && strstr(msg, "reduce"),
             "config.json beyond memory: refused before allocating: %s", msg);
    bt_checkpoint_weights_free(&w);
    tu_setenv("BT_MEM_AVAILABLE", "1M", 1);
    bt_error_clear();
    s = bt_checkpoint_load(&w, fixture_dir, NULL, NULL);
    msg = bt_error_message();
    tu_check(s == BT_ERR_NOMEM && strstr(msg, "BT_MEM_AVAILABLE") && strstr(msg, "1.0 MB"),
             "tiny model on a 1 MB machine: refused: %s", msg);
    tu_unsetenv("BT_MEM_AVAILABLE");
    s = bt_checkpoint_load(&w, fixture_dir, NULL, NULL);
    tu_check(s == BT_OK, "the same load with the machine's real memory succeeds");
    bt_checkpoint_weights_free(&w);
    free(huge);
    cJSON_Delete(j);
    free(text);
}

/* A save that must fail, from the source directory `src`: the previous checkpoint must be
 * intact afterwards and no temp file left. `want` is a fragment of the message. */
static void failing_save(const char *label, const char *src, const bt_checkpoint_weights *w,
                         const float *params, const char *want) {
    bt_checkpoint_save_options o;
    bt_checkpoint_save_options_default(&o);
    o.base_config_json = w->config_json;
    o.copy_from_dir = src;
    bt_error_clear();
    bt_status s = bt_checkpoint_save(prev_dir, &w->table, params, &o);
    const char *msg = bt_error_message();
    tu_check(s == BT_ERR_IO && strstr(msg, want), "%s: save fails: %s", label, msg);
    tu_check(previous_intact(NULL), "%s: previous checkpoint intact, nothing staged left", label);
}

/* A model directory holding another model's files: saving over it must not leave a mix
 * (checkpoint.h: every aux file is this model's copy or removed). */
static void test_no_mix(const bt_checkpoint_weights *w) {
    const char *other = pjoin(tmp, "other_model");
    static char od[1200];
    snprintf(od, sizeof od, "%s", other);
    mkdir(od, 0755);
    tu_setup_text(pjoin(od, "tokenizer.json"), "{\"other\": \"model's tokenizer\"}");
    tu_setup_text(pjoin(od, "vocab.json"), "{\"other\": 1}");
    tu_setup_text(pjoin(od, "preprocessor_config.json"), "{\"size\": 999}");
    bt_checkpoint_save_options o;
    bt_checkpoint_save_options_default(&o);
    o.base_config_json = w->config_json;
    o.copy_from_dir = fixture_dir; /* has preprocessor_config.json, no tokenizer files */
    bt_status s = bt_checkpoint_save(od, &w->table, w->params, &o);
    struct stat sb;
    tu_check(s == BT_OK && stat(pjoin(od, "tokenizer.json"), &sb) != 0 &&
                 stat(pjoin(od, "vocab.json"), &sb) != 0 &&
                 tu_files_equal(pjoin(od, "preprocessor_config.json"),
                                pjoin(fixture_dir, "preprocessor_config.json")),
             "save over another model: its tokenizer removed, preprocessor replaced: %s",
             bt_error_message());
    /* No copy_from_dir: every aux file the directory owns goes. */
    s = bt_checkpoint_save(od, &w->table, w->params, NULL);
    tu_check(s == BT_OK && stat(pjoin(od, "preprocessor_config.json"), &sb) != 0,
             "save without a source directory removes the old preprocessor config");
    /* Saving into the source directory itself keeps its files. */
    tu_setup_text(pjoin(od, "vocab.json"), "{\"mine\": 1}");
    o.copy_from_dir = od;
    s = bt_checkpoint_save(od, &w->table, w->params, &o);
    tu_check(s == BT_OK && stat(pjoin(od, "vocab.json"), &sb) == 0,
             "save into its own source directory keeps the tokenizer");
    /* An aux file that is not a regular file is refused, not removed. */
    unlink(pjoin(od, "vocab.json"));
    mkfifo(pjoin(od, "vocab.json"), 0600);
    s = bt_checkpoint_save(od, &w->table, w->params, NULL);
    tu_check(s == BT_ERR_IO && strstr(bt_error_message(), "is a FIFO") &&
                 stat(pjoin(od, "vocab.json"), &sb) == 0 && S_ISFIFO(sb.st_mode),
             "a FIFO where the vocab goes: refused and left alone: %s", bt_error_message());
    unlink(pjoin(od, "vocab.json"));
}

int main(void) {
    tmp = tu_tmpdir();
    snprintf(fixture_dir, sizeof fixture_dir, "%s", tu_fixture_path("tiny"));
    const char *d;

    /* --- directories and files --- */
    expect_load_fail("missing dir", pjoin(tmp, "no_such_model"), BT_CHECKPOINT_HEADS_AUTO,
                     BT_ERR_IO, "no_such_model", "not found", NULL);
    d = case_dir("plainfile");
    tu_setup_file(pjoin(d, "file"), "x", 1);
    expect_load_fail("path is a file", pjoin(d, "file"), BT_CHECKPOINT_HEADS_AUTO, BT_ERR_IO,
                     "plainfile/file", "not a directory", NULL);
    d = case_dir("no_config");
    copy_file(pjoin(fixture_dir, "model.safetensors"), pjoin(d, "model.safetensors"));
    expect_load_fail("missing config.json", d, BT_CHECKPOINT_HEADS_AUTO, BT_ERR_IO, d,
                     "config.json", NULL);
    d = case_dir("no_weights");
    copy_file(pjoin(fixture_dir, "config.json"), pjoin(d, "config.json"));
    expect_load_fail("missing model.safetensors", d, BT_CHECKPOINT_HEADS_AUTO, BT_ERR_IO, d,
                     "missing model.safetensors", NULL);
    tu_setup_file(pjoin(d, "pytorch_model.bin"), "PK", 2);
    expect_load_fail("pytorch_model.bin only", d, BT_CHECKPOINT_HEADS_AUTO, BT_ERR_UNSUPPORTED,
                     "pytorch_model.bin", "safetensors only",
                     "python3 scripts/convert_checkpoint.py");
    d = case_dir("sharded");
    copy_file(pjoin(fixture_dir, "config.json"), pjoin(d, "config.json"));
    tu_setup_file(pjoin(d, "model.safetensors.index.json"), "{}", 2);
    expect_load_fail("sharded safetensors", d, BT_CHECKPOINT_HEADS_AUTO, BT_ERR_UNSUPPORTED,
                     "model.safetensors.index.json (sharded)", "convert_checkpoint.py", NULL);

    /* --- config.json --- */
    d = dir_with_config("cfg_badjson", "{\"hidden_size\": 32,", 19);
    expect_load_fail("config: bad JSON", d, BT_CHECKPOINT_HEADS_AUTO, BT_ERR_FORMAT,
                     "cfg_badjson/config.json", "not valid JSON", NULL);
    d = dir_with_config("cfg_empty", "", 0);
    expect_load_fail("config: empty file", d, BT_CHECKPOINT_HEADS_AUTO, BT_ERR_FORMAT,
                     "cfg_empty/config.json", NULL, NULL);
    d = dir_with_config("cfg_array", "[1, 2]", 6);
    expect_load_fail("config: not an object", d, BT_CHECKPOINT_HEADS_AUTO, BT_ERR_FORMAT,
                     "cfg_array/config.json", "object", NULL);
    d = dir_with_config("cfg_nul", "{\"a\": 1}\0 ", 10);
    expect_load_fail("config: NUL byte", d, BT_CHECKPOINT_HEADS_AUTO, BT_ERR_FORMAT,
                     "cfg_nul/config.json", "NUL", NULL);
    d = config_case("cfg_type", "\"hidden_size\": 32", "\"hidden_size\": \"32\"");
    expect_load_fail("config: wrong type", d, BT_CHECKPOINT_HEADS_AUTO, BT_ERR_CONFIG,
                     "cfg_type/config.json", "'hidden_size'", "integer");
    d = config_case("cfg_block", "\"text_config\": {", "\"text_config\": [], \"x\": {");
    expect_load_fail("config: text_config not an object", d, BT_CHECKPOINT_HEADS_AUTO,
                     BT_ERR_CONFIG, "cfg_block/config.json", "'text_config'", NULL);
    d = config_case("cfg_link", "\"share_link_tower_layers\": false",
                    "\"share_link_tower_layers\": true");
    expect_load_fail("config: unsupported share_link_tower_layers", d, BT_CHECKPOINT_HEADS_AUTO,
                     BT_ERR_UNSUPPORTED, "cfg_link/config.json", "share_link_tower_layers", NULL);
    d = config_case("cfg_ln", "\"share_layernorm\": true", "\"share_layernorm\": false");
    expect_load_fail("config: unsupported vision share_layernorm", d, BT_CHECKPOINT_HEADS_AUTO,
                     BT_ERR_UNSUPPORTED, "cfg_ln/config.json", "vision_config.share_layernorm",
                     NULL);
    d = config_case("cfg_type2", "\"model_type\": \"bridgetower\"", "\"model_type\": \"bert\"");
    expect_load_fail("config: model_type", d, BT_CHECKPOINT_HEADS_AUTO, BT_ERR_CONFIG,
                     "cfg_type2/config.json", "model_type", NULL);
    /* a config that disagrees with the weights: the first mismatching key is named */
    d = config_case("cfg_vocab", "\"vocab_size\": 99", "\"vocab_size\": 100");
    expect_load_fail("config vs weights: vocab_size", d, BT_CHECKPOINT_HEADS_AUTO, BT_ERR_SHAPE,
                     "text_model.embeddings.word_embeddings.weight'", "expected shape [100, 32]",
                     "found [99, 32]");

    /* --- weights --- */
    {
        d = case_dir("truncated");
        copy_file(pjoin(fixture_dir, "config.json"), pjoin(d, "config.json"));
        size_t n;
        uint8_t *b = tu_read_file(pjoin(fixture_dir, "model.safetensors"), &n);
        tu_setup_file(pjoin(d, "model.safetensors"), b, n / 2);
        free(b);
        expect_load_fail("truncated model.safetensors", d, BT_CHECKPOINT_HEADS_AUTO, BT_ERR_FORMAT,
                         "truncated/model.safetensors", NULL, NULL);
        tu_setup_file(pjoin(d, "model.safetensors"), "\x10\0\0\0", 4);
        expect_load_fail("4-byte model.safetensors", d, BT_CHECKPOINT_HEADS_AUTO, BT_ERR_FORMAT,
                         "truncated/model.safetensors", NULL, NULL);
    }
    edit e = {0};
    e.reshape_key = "bridgetower.cross_modal_text_transform.weight";
    e.new_ndim = 2;
    e.new_shape[0] = 32;
    e.new_shape[1] = 31;
    d = weights_case("shape_backbone", &e);
    expect_load_fail("wrong-shaped backbone tensor", d, BT_CHECKPOINT_HEADS_AUTO, BT_ERR_SHAPE,
                     "tensor 'bridgetower.cross_modal_text_transform.weight': expected shape "
                     "[32, 32], found [32, 31]",
                     "shape_backbone/model.safetensors", NULL);
    memset(&e, 0, sizeof e);
    e.reshape_key = "logit_scale";
    e.new_ndim = 1;
    e.new_shape[0] = 1;
    d = weights_case("shape_scalar", &e);
    expect_load_fail("logit_scale as [1] instead of 0-d", d, BT_CHECKPOINT_HEADS_AUTO, BT_ERR_SHAPE,
                     "tensor 'logit_scale': expected shape [], found [1]", NULL, NULL);
    memset(&e, 0, sizeof e);
    e.drop_prefix = "bridgetower.text_model.encoder.layer.1.output.dense.bias";
    d = weights_case("missing_one", &e);
    expect_load_fail("missing backbone key", d, BT_CHECKPOINT_HEADS_AUTO, BT_ERR_MISSING,
                     "'bridgetower.text_model.encoder.layer.1.output.dense.bias'",
                     "1 tensor(s) missing (1 of the backbone)", "missing_one/model.safetensors");
    { /* the report lists it too */
        bt_checkpoint_weights w;
        bt_checkpoint_report r;
        bt_checkpoint_load(&w, d, NULL, &r);
        tu_check(r.missing.n == 1 &&
                     strcmp(r.missing.names[0],
                            "bridgetower.text_model.encoder.layer.1.output.dense.bias") == 0,
                 "report.missing names the key");
        bt_checkpoint_report_free(&r);
        bt_checkpoint_weights_free(&w);
    }
    memset(&e, 0, sizeof e);
    e.drop_prefix = "bridgetower.text_model.encoder.layer.2.";
    d = weights_case("missing_layer", &e);
    expect_load_fail("missing text layer (16 keys)", d, BT_CHECKPOINT_HEADS_AUTO, BT_ERR_MISSING,
                     "16 tensor(s) missing (16 of the backbone)", "(and 11 more)",
                     "bridgetower.text_model.encoder.layer.2.attention.self.query.weight");
    memset(&e, 0, sizeof e);
    e.drop_prefix = "itm_score.fc.bias";
    d = weights_case("partial_head", &e);
    expect_load_fail("partly present head", d, BT_CHECKPOINT_HEADS_AUTO, BT_ERR_MISSING,
                     "'itm_score.fc.bias'", "partly present head", NULL);
    memset(&e, 0, sizeof e);
    e.i64_key = "bridgetower.token_type_embeddings.weight";
    d = weights_case("int_param", &e);
    expect_load_fail("parameter stored as I64", d, BT_CHECKPOINT_HEADS_AUTO, BT_ERR_UNSUPPORTED,
                     "bridgetower.token_type_embeddings.weight", "int_param/model.safetensors",
                     NULL);
    memset(&e, 0, sizeof e);
    e.dup_bare_key = "bridgetower.cross_modal_image_pooler.dense.bias";
    d = weights_case("duplicate", &e);
    expect_load_fail("parameter with and without prefix", d, BT_CHECKPOINT_HEADS_AUTO,
                     BT_ERR_FORMAT, "'bridgetower.cross_modal_image_pooler.dense.bias'",
                     "'cross_modal_image_pooler.dense.bias'", "same parameter");

    /* --- failing saves --- */
    bt_checkpoint_weights w;
    bt_error_clear();
    if (!tu_check(bt_checkpoint_load(&w, fixture_dir, NULL, NULL) == BT_OK, "load fixture: %s",
                  bt_error_message()))
        return tu_finish();
    prev_dir = pjoin(tmp, "previous");
    {
        static char pd[1200];
        snprintf(pd, sizeof pd, "%s", prev_dir);
        prev_dir = pd;
    }
    bt_checkpoint_save_options so;
    bt_checkpoint_save_options_default(&so);
    so.base_config_json = w.config_json;
    so.copy_from_dir = fixture_dir;
    tu_check(bt_checkpoint_save(prev_dir, &w.table, w.params, &so) == BT_OK,
             "save the previous checkpoint: %s", bt_error_message());
    for (int i = 0; i < 3; i++)
        prev_files[i] = tu_read_file(pjoin(prev_dir, prev_names[i]), &prev_len[i]);
    /* the new weights differ, so a replaced file would show */
    float *changed = bt_alloc(w.table.numel * sizeof *changed);
    for (size_t i = 0; i < w.table.numel; i++)
        changed[i] = w.params[i] * 0.5f + 1.0f;

    { /* an aux source that is a FIFO fails after the weights and config are staged */
        static char src[1200];
        snprintf(src, sizeof src, "%s", pjoin(tmp, "fifo_source"));
        mkdir(src, 0755);
        mkfifo(pjoin(src, "vocab.json"), 0600);
        failing_save("aux copy fails (weights+config staged)", src, &w, changed, "is a FIFO");
    }
    { /* a target that is not a regular file is refused before anything is written */
        static char pp[1200];
        snprintf(pp, sizeof pp, "%s", pjoin(prev_dir, "tokenizer.json"));
        mkfifo(pp, 0600);
        failing_save("target file is a FIFO", fixture_dir, &w, changed, "is a FIFO");
        unlink(pp);
    }
    test_no_mix(&w);
    test_memory_estimate();
    { /* disk full while writing the weights */
        struct rlimit old, lim;
        getrlimit(RLIMIT_FSIZE, &old);
        lim = old;
        lim.rlim_cur = 200000; /* the weights file is ~1.2 MB */
        void (*prev_handler)(int) = signal(SIGXFSZ, SIG_IGN);
        setrlimit(RLIMIT_FSIZE, &lim);
        bt_error_clear();
        bt_status s = bt_checkpoint_save(prev_dir, &w.table, changed, &so);
        setrlimit(RLIMIT_FSIZE, &old);
        signal(SIGXFSZ, prev_handler);
        tu_check(s == BT_ERR_IO && strstr(bt_error_message(), "previous files kept"),
                 "disk full: save fails: %s", bt_error_message());
        tu_check(previous_intact(NULL), "disk full: previous checkpoint intact, nothing left");
    }
    {
        bt_checkpoint_save_options bad = so;
        bad.base_config_json = "{\"hidden_size\": ";
        bt_error_clear();
        bt_status s = bt_checkpoint_save(prev_dir, &w.table, changed, &bad);
        tu_check(s == BT_ERR_FORMAT && strstr(bt_error_message(), prev_dir) &&
                     strstr(bt_error_message(), "not a JSON object"),
                 "bad base config: refused: %s", bt_error_message());
        bad = so;
        bad.dtype = BT_DTYPE_F16;
        s = bt_checkpoint_save(prev_dir, &w.table, changed, &bad);
        tu_check(s == BT_ERR_ARG && strstr(bt_error_message(), "F16"), "F16 save: refused: %s",
                 bt_error_message());
        tu_check(previous_intact(NULL), "refused saves: previous checkpoint intact");
    }
    {
        const char *f = pjoin(tmp, "target_is_file");
        tu_setup_file(f, "keep", 4);
        bt_status s = bt_checkpoint_save(f, &w.table, changed, &so);
        size_t n;
        uint8_t *b = tu_read_file(f, &n);
        tu_check(s == BT_ERR_IO && strstr(bt_error_message(), "target_is_file") && b && n == 4 &&
                     memcmp(b, "keep", 4) == 0,
                 "target is a regular file: refused, file kept: %s", bt_error_message());
        free(b);
    }
    { /* after all that, a save that can succeed does, and replaces the files */
        bt_error_clear();
        bt_status s = bt_checkpoint_save(prev_dir, &w.table, changed, &so);
        bt_checkpoint_weights w2;
        int ok = s == BT_OK && bt_checkpoint_load(&w2, prev_dir, NULL, NULL) == BT_OK;
        for (size_t i = 0; ok && i < w.table.n_tensors; i++) {
            const bt_param_tensor *x = &w.table.tensors[i];
            ok =
                memcmp(w2.params + x->offset, changed + x->offset, x->numel * sizeof *changed) == 0;
        }
        if (s == BT_OK) bt_checkpoint_weights_free(&w2);
        tu_check(ok, "unobstructed save replaces the checkpoint: %s", bt_error_message());
    }
    for (int i = 0; i < 3; i++)
        free(prev_files[i]);
    bt_free(changed);
    bt_checkpoint_weights_free(&w);
    return tu_finish();
}
