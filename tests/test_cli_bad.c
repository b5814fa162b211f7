/* test_cli_bad.c: the error paths of every command-line tool (bt-data, bt-forward,
 * bt-checkpoint; their paths are argv[1..3]), run as programs: each bad argument or input
 * must end with the documented exit code (2 usage, 1 error) and a message naming the flag,
 * file or tensor. In the sanitizer run (scripts/test.sh: suite badinput under ASan/UBSan
 * with detect_leaks=1) a leak or a memory error in the tool makes it exit with the
 * sanitizer's code instead, so these cases also prove the error paths clean.
 *
 * Covers the classes of issue 11: outputs that are not ours (a FIFO as --output stays a
 * FIFO), special files as inputs (a FIFO as --image, --data, --inputs, config.json: refused
 * at once; before the fix these blocked forever, i.e. a test timeout), memory estimates
 * (--batch-size 65536, shortest_edge 32768, a config.json beyond memory: exit 1 with the
 * estimate, not an abort), JSON (\u0000, duplicate keys), non-finite pixels and weights,
 * strict numeric flags, and the messages the issue lists as unclear. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/synth.h"
#include "safetensors.h"
#include "test_util.h"

static const char *bt_data, *bt_forward, *bt_checkpoint;
static char dir[1024];
static char out_text[1 << 16], err_text[1 << 14];

/* Runs exe with shell-text args; checks the exit code and that stderr holds each fragment. */
static void expect(const char *label, int want_rc, const char *frag1, const char *frag2,
                   const char *exe, const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static void expect(const char *label, int want_rc, const char *frag1, const char *frag2,
                   const char *exe, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int rc = tu_vrun_captured(exe, "/dev/null", dir, out_text, sizeof out_text, err_text,
                              sizeof err_text, fmt, ap);
    va_end(ap);
    /* A sanitizer report fails the case whatever the exit code (LeakSanitizer exits with
     * ASan's exitcode, 1 by default: the same as an ordinary error). */
    int clean = !strstr(err_text, "Sanitizer") && !strstr(err_text, "runtime error:");
    int ok = rc == want_rc && clean && (!frag1 || strstr(err_text, frag1)) &&
             (!frag2 || strstr(err_text, frag2));
    tu_check(ok, "%s: exit %d (want %d), stderr: %.600s", label, rc, want_rc, err_text);
}

/* dir/name in one of 128 static buffers (more than this test ever holds at once, so every
 * returned path stays valid for the whole run). */
static const char *path_in(const char *name) {
    static char buf[128][1300];
    static int k;
    BT_ASSERT(k < 128);
    k++;
    snprintf(buf[k - 1], sizeof buf[k - 1], "%s/%s", dir, name);
    return buf[k - 1];
}

static void copy_tree_file(const char *src_dir, const char *dst_dir, const char *name) {
    char s[1400], d[1400];
    snprintf(s, sizeof s, "%s/%s", src_dir, name);
    snprintf(d, sizeof d, "%s/%s", dst_dir, name);
    size_t n;
    uint8_t *b = tu_read_file(s, &n);
    if (b) tu_setup_file(d, b, n);
    free(b);
}

static int is_fifo(const char *p) {
    struct stat sb;
    return lstat(p, &sb) == 0 && S_ISFIFO(sb.st_mode);
}

/* ---- bt-data ----------------------------------------------------------------------------- */

static void test_bt_data(const char *model) {
    const char *fifo = path_in("in.fifo");
    mkfifo(fifo, 0600);
    char data[1300];
    snprintf(data, sizeof data, "%s/syn/train.jsonl", dir);
    synth_options so = {.out_dir = path_in("syn"), .n = {4, 0, 0}, .seed = 1, .size = 64};
    BT_ASSERT(synth_generate(&so) == BT_OK);

    /* strict numeric flags */
    expect("synth --size 5000", 2, "--size: expected an integer in [16, 4096], got '5000'", NULL,
           bt_data, "synth --out '%s' --size 5000", path_in("s2"));
    expect("synth --seed -1", 2, "--seed", "(negative)", bt_data, "synth --out x --seed -1");
    expect("synth --seed 2^64+", 2, "--seed", "(too large)", bt_data,
           "synth --out x --seed 99999999999999999999999");
    expect("batch --batch-size 0", 2, "--batch-size: expected an integer in [1, 65536]", NULL,
           bt_data, "batch --data x --model x --output x --batch-size 0");
    expect("--max-length 12abc", 2, "--max-length", "'12abc'", bt_data,
           "tokenize --model x --max-length 12abc");

    /* missing --model directory, named as such */
    expect("tokenize --model missing", 1, "--model /nonexistent/m: No such file", NULL, bt_data,
           "tokenize --model /nonexistent/m");
    /* manifests: missing, malformed, a FIFO (the manifest is freed on every error path) */
    expect("batch, missing manifest", 1, "no_such.jsonl", NULL, bt_data,
           "batch --data '%s' --model '%s' --batch-size 2 --output '%s'",
           path_in("no_such.jsonl"), model, path_in("b.safetensors"));
    tu_setup_text(path_in("bad.jsonl"), "{\"image\": \"a.jpg\", \"caption\": \"x\\u0000y\"}\n");
    expect("batch, manifest with \\u0000", 1, "bad.jsonl:1", "$.caption holds the escape",
           bt_data, "batch --data '%s' --model '%s' --batch-size 2 --output '%s'",
           path_in("bad.jsonl"), model, path_in("b.safetensors"));
    tu_setup_text(path_in("null.jsonl"), "{\"image\": \"a.jpg\", \"caption\": null}\n");
    expect("batch, null caption", 1, "null.jsonl:1: key 'caption' is null", NULL, bt_data,
           "batch --data '%s' --model '%s' --batch-size 2 --output '%s'", path_in("null.jsonl"),
           model, path_in("b.safetensors"));
    expect("check --data FIFO", 1, "is a FIFO", NULL, bt_data, "check --data '%s'", fifo);
    /* outputs that are not ours */
    const char *out_fifo = path_in("out.fifo");
    mkfifo(out_fifo, 0600);
    expect("batch --output FIFO", 1, "out.fifo: exists and is a FIFO; refusing", NULL, bt_data,
           "batch --data '%s' --model '%s' --batch-size 2 --output '%s'", data, model, out_fifo);
    tu_check(is_fifo(out_fifo), "the FIFO given as --output is still a FIFO");
    expect("batch --output \"\"", 1, "the --output path is empty", NULL, bt_data,
           "batch --data '%s' --model '%s' --batch-size 2 --output ''", data, model);
    /* memory estimates, on a "machine" of 1 GB */
    tu_setenv("BT_MEM_AVAILABLE", "1G", 1);
    expect("batch --batch-size 65536", 1, "--batch-size 65536", "needs", bt_data,
           "batch --data '%s' --model '%s' --batch-size 65536 --output '%s'", data, model,
           path_in("b.safetensors"));
    tu_unsetenv("BT_MEM_AVAILABLE");
    expect("batch ok", 0, NULL, NULL, bt_data,
           "batch --data '%s' --model '%s' --batch-size 2 --output '%s'", data, model,
           path_in("b.safetensors"));
    /* preprocess: special files, a preprocessor of shortest_edge 32768 */
    char img[1300];
    snprintf(img, sizeof img, "%s/syn/images/train/000000.jpg", dir);
    expect("preprocess --image FIFO", 1, "is a FIFO", NULL, bt_data,
           "preprocess --model '%s' --image '%s' --output '%s'", model, fifo,
           path_in("p.safetensors"));
    expect("preprocess --output FIFO", 1, "exists and is a FIFO; refusing", NULL, bt_data,
           "preprocess --model '%s' --image '%s' --output '%s'", model, img, out_fifo);
    tu_check(is_fifo(out_fifo), "still a FIFO after preprocess");
    const char *big = path_in("big_model");
    mkdir(big, 0755);
    tu_setup_text(path_in("big_model/preprocessor_config.json"),
                  "{\"size\": {\"shortest_edge\": 32768}}");
    tu_setenv("BT_MEM_AVAILABLE", "8G", 1);
    expect("preprocess, shortest_edge 32768", 1, "shortest_edge 32768", "needs 41.9 GB",
           bt_data, "preprocess --model '%s' --image '%s' --output '%s'", big, img,
           path_in("p.safetensors"));
    tu_unsetenv("BT_MEM_AVAILABLE");
    tu_setup_text(path_in("big_model/preprocessor_config.json"),
                  "{\"size\": 32, \"size\": {\"shortest_edge\": 64}}");
    expect("preprocessor config with a duplicate key", 1, "\"size\" appears twice", NULL,
           bt_data, "preprocess --model '%s' --image '%s' --output '%s'", big, img,
           path_in("p.safetensors"));
}

/* ---- bt-forward -------------------------------------------------------------------------- */

/* Writes an inputs file from the tiny fixture's tensors, with pixel [0, 1, 2, 3] = poison
 * and, with ignored_labels, ITM labels (3) all -100. */
static const char *forward_inputs(const char *name, float poison, int ignored_labels) {
    safetensors_file io;
    BT_ASSERT(safetensors_open(&io, tu_fixture_path("tiny_io.safetensors")) == BT_OK);
    const safetensors_tensor *ids = safetensors_find(&io, "input_ids");
    const safetensors_tensor *px = safetensors_find(&io, "pixel_values");
    BT_ASSERT(ids && px);
    float *p = malloc(px->numel * sizeof *p);
    BT_ASSERT(safetensors_read_f32(&io, px, p, px->numel) == BT_OK);
    p[((0 * 3 + 1) * 32 + 2) * 32 + 3] = poison;
    static const int64_t labels[3] = {-100, -100, -100};
    safetensors_entry e[3] = {
        {"input_ids", BT_DTYPE_I64, BT_DTYPE_I64, 2, {ids->shape[0], ids->shape[1]}, ids->data},
        {"pixel_values", BT_DTYPE_F32, BT_DTYPE_F32, 4, {3, 3, 32, 32}, p},
        {"labels", BT_DTYPE_I64, BT_DTYPE_I64, 1, {3}, labels},
    };
    const char *path = path_in(name);
    BT_ASSERT(safetensors_write(path, e, ignored_labels ? 3 : 2, NULL) == BT_OK);
    free(p);
    safetensors_close(&io);
    return path;
}

static void test_bt_forward(void) {
    char tiny[1100];
    snprintf(tiny, sizeof tiny, "%s", tu_fixture_path("tiny"));
    const char *good = forward_inputs("good.safetensors", 0.25f, 0);
    const char *nan_in = forward_inputs("nan.safetensors", NAN, 0);
    const char *inf_in = forward_inputs("inf.safetensors", -INFINITY, 0);
    const char *ignored = forward_inputs("ignored.safetensors", 0.25f, 1);
    const char *out = path_in("fwd_out.safetensors");
    expect("bt-forward ok", 0, NULL, NULL, bt_forward, "--model '%s' --inputs '%s' --output '%s'",
           tiny, good, out);
    /* Every ITM label ignored: bt's loss is 0 where HF's is nan, said in a warning. */
    expect("ITM labels all -100", 0, "every label is -100", "gives nan", bt_forward,
           "--model '%s' --inputs '%s' --output '%s' --head itm", tiny, ignored, out);
    expect("--threads 4x", 2, "--threads: expected an integer in [1, 4096], got '4x'", NULL,
           bt_forward, "--model a --inputs b --output c --threads 4x");
    expect("NaN pixel", 1, "tensor 'pixel_values': element [0, 1, 2, 3] is nan", NULL,
           bt_forward, "--model '%s' --inputs '%s' --output '%s'", tiny, nan_in, out);
    expect("-Inf pixel", 1, "element [0, 1, 2, 3] is -inf", NULL, bt_forward,
           "--model '%s' --inputs '%s' --output '%s'", tiny, inf_in, out);
    expect("--inputs FIFO", 1, "is a FIFO", NULL, bt_forward,
           "--model '%s' --inputs '%s' --output '%s'", tiny, path_in("in.fifo"), out);
    expect("--output FIFO", 1, "exists and is a FIFO; refusing", NULL, bt_forward,
           "--model '%s' --inputs '%s' --output '%s'", tiny, good, path_in("out.fifo"));
    tu_check(is_fifo(path_in("out.fifo")), "still a FIFO after bt-forward");
    expect("--output ''", 1, "the --output path is empty", NULL, bt_forward,
           "--model '%s' --inputs '%s' --output ''", tiny, good);
    expect("--model missing", 1, "model directory not found", NULL, bt_forward,
           "--model /nonexistent/m --inputs '%s' --output '%s'", good, out);

    /* model directories with a bad config.json or weights */
    const char *m1 = path_in("cfg_is_dir");
    mkdir(m1, 0755);
    mkdir(path_in("cfg_is_dir/config.json"), 0755);
    copy_tree_file(tiny, m1, "model.safetensors");
    expect("config.json is a directory", 1, "config.json: is a directory", NULL, bt_forward,
           "--model '%s' --inputs '%s' --output '%s'", m1, good, out);
    const char *m2 = path_in("cfg_loop");
    mkdir(m2, 0755);
    BT_ASSERT(symlink("config.json", path_in("cfg_loop/config.json")) == 0);
    copy_tree_file(tiny, m2, "model.safetensors");
    expect("config.json is a symlink loop", 1, "symbolic links", NULL, bt_forward,
           "--model '%s' --inputs '%s' --output '%s'", m2, good, out);
    const char *m3 = path_in("cfg_dup");
    mkdir(m3, 0755);
    copy_tree_file(tiny, m3, "model.safetensors");
    size_t n;
    char cfg_path[1300];
    snprintf(cfg_path, sizeof cfg_path, "%s/config.json", tiny);
    char *cfg = (char *)tu_read_file(cfg_path, &n);
    BT_ASSERT(cfg && cfg[0] == '{');
    char *dup = malloc(n + 64);
    snprintf(dup, n + 64, "{\"hidden_size\": 128,%s", cfg + 1);
    tu_setup_text(path_in("cfg_dup/config.json"), dup);
    expect("config.json with hidden_size twice", 1, "\"hidden_size\" appears twice in $", NULL,
           bt_forward, "--model '%s' --inputs '%s' --output '%s'", m3, good, out);
    free(dup);
    /* weights holding a NaN */
    const char *m4 = path_in("nan_weights");
    mkdir(m4, 0755);
    tu_setup_text(path_in("nan_weights/config.json"), cfg);
    {
        char wpath[1300];
        snprintf(wpath, sizeof wpath, "%s/model.safetensors", tiny);
        safetensors_file f;
        BT_ASSERT(safetensors_open(&f, wpath) == BT_OK);
        safetensors_entry *e = calloc(f.n_tensors, sizeof *e);
        float *poisoned = NULL;
        for (size_t i = 0; i < f.n_tensors; i++) {
            const safetensors_tensor *t = &f.tensors[i];
            e[i].name = t->name;
            e[i].dtype = e[i].src_dtype = t->dtype;
            e[i].ndim = t->ndim;
            memcpy(e[i].shape, t->shape, sizeof t->shape);
            e[i].data = t->data;
            if (!poisoned && t->dtype == BT_DTYPE_F32 &&
                strstr(t->name, "cross_modal_text_pooler.dense.weight")) {
                poisoned = malloc(t->numel * sizeof *poisoned);
                memcpy(poisoned, t->data, t->numel * sizeof *poisoned);
                poisoned[5] = NAN;
                e[i].data = poisoned;
            }
        }
        BT_ASSERT(poisoned);
        BT_ASSERT(safetensors_write(path_in("nan_weights/model.safetensors"), e, f.n_tensors,
                                    NULL) == BT_OK);
        free(poisoned);
        free(e);
        safetensors_close(&f);
    }
    expect("a NaN weight", 1, "cross_modal_text_pooler.dense.weight': element [0, 5] is nan",
           "expected finite weights", bt_forward, "--model '%s' --inputs '%s' --output '%s'", m4,
           good, out);
    free(cfg);
}

/* ---- bt-checkpoint ----------------------------------------------------------------------- */

static void test_bt_checkpoint(void) {
    char tiny[1100];
    snprintf(tiny, sizeof tiny, "%s", tu_fixture_path("tiny"));
    expect("--seed -1", 2, "--seed", "(negative)", bt_checkpoint, "--model '%s' --seed -1", tiny);
    expect("--seed 2^64+", 2, "--seed", "(too large)", bt_checkpoint,
           "--model '%s' --seed 99999999999999999999999", tiny);
    expect("--seed 1.5", 2, "--seed", "'1.5'", bt_checkpoint, "--model '%s' --seed 1.5", tiny);
    expect("missing --model directory", 1, "model directory not found", NULL, bt_checkpoint,
           "--model /nonexistent/m");
    tu_setup_text(path_in("a_file"), "keep");
    expect("--save onto a file", 1, "a_file: exists and is a regular file", NULL, bt_checkpoint,
           "--model '%s' --save '%s'", tiny, path_in("a_file"));
    /* a config.json whose sizes are each in range, beyond any machine together */
    const char *huge = path_in("huge");
    mkdir(huge, 0755);
    char cfg_path[1300];
    snprintf(cfg_path, sizeof cfg_path, "%s/config.json", tiny);
    char *text = (char *)tu_read_file(cfg_path, NULL);
    cJSON *j = cJSON_Parse(text);
    cJSON *tc = cJSON_GetObjectItemCaseSensitive(j, "text_config");
    cJSON_ReplaceItemInObjectCaseSensitive(tc, "vocab_size", cJSON_CreateNumber(1 << 24));
    cJSON_ReplaceItemInObjectCaseSensitive(tc, "hidden_size", cJSON_CreateNumber(1 << 16));
    cJSON_ReplaceItemInObjectCaseSensitive(j, "hidden_size", cJSON_CreateNumber(1 << 16));
    char *s = cJSON_Print(j);
    tu_setup_text(path_in("huge/config.json"), s);
    expect("--init with a config beyond memory", 1, "parameters (1 fp32 copy) needs",
           "reduce the model's sizes in config.json", bt_checkpoint, "--model '%s' --init", huge);
    free(s);
    cJSON_Delete(j);
    free(text);
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: test_cli_bad BT_DATA BT_FORWARD BT_CHECKPOINT\n");
        return 1;
    }
    bt_data = argv[1];
    bt_forward = argv[2];
    bt_checkpoint = argv[3];
    snprintf(dir, sizeof dir, "%s", tu_tmpdir());
    const char *configs = getenv("BT_CONFIGS");
    char model[1200];
    snprintf(model, sizeof model, "%s/synthetic-model", configs ? configs : "configs");
    test_bt_data(model);
    test_bt_forward();
    test_bt_checkpoint();
    return tu_finish();
}
