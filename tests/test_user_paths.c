/* test_user_paths.c: the CLIs as a newcomer runs them from a fresh clone (issue 23).
 * argv: bt-train, bt-eval, bt-embed, bt-data, bt-forward (paths passed by meson).
 *
 *   1. Missing directories: every output path a command takes (bt-data synth --out, bt-train's
 *      output.dir, bt-eval --json, bt-embed --output, bt-data batch --output, bt-forward
 *      --output) lies under directories that do not exist yet; each command creates them
 *      (HF's Trainer makes its output_dir the same way) and exits 0. The special-file rule
 *      stays: a regular file where a directory goes, and a FIFO as the target, are refused
 *      (exit 1, naming the path), and nothing is written.
 *   2. Evaluation defaults equal training's: bt-train (data.max_length 24, not the model
 *      config's max_text_len 32; eval.batch_size 5, not bt-eval's default 8) records the text
 *      length in the saved config.json (max_text_len 24) and its eval settings in
 *      eval_results.json (max_length, batch_size, model, data: docs/outputs.md); bt-eval with
 *      no flags but --model and --data on the output directory then prints the numbers of
 *      bt-train's final evaluation. Both evaluate the same fp32 weights (model.safetensors is
 *      F32, the masters bt-train evaluated) on the same records in the same batches, forward
 *      only: the same operations, so recall counts and the 5-way accuracy are equal exactly
 *      and the loss within 1e-6 relative (only a GEMM kernel chosen for another arena layout
 *      could differ, ~1e-7 on a loss of ~2). The old defaults (T = 32, batch 8) move the
 *      loss by far more: a check below asserts that, so the test can fail.
 *      The saved directory gets a tokenizer_config.json with model_max_length (the source
 *      configs/synthetic-model has none).
 *   3. bt-embed without --max-length embeds at the trained length (its metadata max_length).
 *   4. A shape transformers cannot run is refused before training: configs/tiny has
 *      vision_config.hidden_size 64 and hidden_size 32; with the ITC head bt-train exits 1
 *      naming both fields and the head (HF's BridgeTowerForContrastiveLearning adds the
 *      hidden_size token-type embedding to the vision-width output); without it (ITM) that
 *      check passes (the run then stops at configs/tiny's missing tokenizer). */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "safetensors.h"
#include "test_train_setup.h"
#include "test_util.h"

static const char *exe_train, *exe_eval, *exe_embed, *exe_data, *exe_fwd;
static const char *tmp;
static char out_text[1 << 16], err_text[1 << 16];

static int run(const char *exe, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int rc = tu_vrun_captured(exe, "/dev/null", tmp, out_text, sizeof out_text, err_text,
                              sizeof err_text, fmt, ap);
    va_end(ap);
    return rc;
}

static int is_file(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

static cJSON *read_json(const char *path) {
    char *t = (char *)tu_read_file(path, NULL);
    cJSON *j = t ? cJSON_Parse(t) : NULL;
    free(t);
    if (!j) {
        tu_check(0, "%s: readable JSON", path);
        exit(tu_finish());
    }
    return j;
}

static double num(const cJSON *o, const char *a, const char *b) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, a);
    if (b) x = cJSON_GetObjectItemCaseSensitive(x, b);
    return cJSON_IsNumber(x) ? x->valuedouble : NAN;
}

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: test_user_paths BT_TRAIN BT_EVAL BT_EMBED BT_DATA BT_FORWARD\n");
        return 1;
    }
    exe_train = argv[1], exe_eval = argv[2], exe_embed = argv[3], exe_data = argv[4];
    exe_fwd = argv[5];
    tmp = tu_tmpdir();
    char model_cfg[1024], data[1200], run_dir[1200], cfg[1200], p[1400], q[1400];
    tts_synthetic_model_dir(model_cfg, sizeof model_cfg);

    /* --- 1. bt-data synth --out under missing directories --------------------------------- */
    snprintf(data, sizeof data, "%s/new/datasets/synth", tmp);
    int rc = run(exe_data, "synth --out '%s' --train 16 --val 10 --test 3 --seed 3", data);
    snprintf(p, sizeof p, "%s/val.jsonl", data);
    tu_check(rc == 0 && is_file(p), "bt-data synth --out creates new/datasets/ (rc %d: %s)", rc,
             err_text);
    if (rc) return tu_finish();

    /* --- bt-train: output.dir under missing directories, its final evaluation ------------- */
    snprintf(run_dir, sizeof run_dir, "%s/new/runs/first", tmp);
    snprintf(cfg, sizeof cfg, "%s/run.json", tmp);
    char text[8192];
    snprintf(text, sizeof text,
             "{\"model\": {\"config\": \"%s\", \"init_seed\": 0, \"heads\": [\"itc\"]},\n"
             " \"data\": {\"train\": \"%s/train.jsonl\", \"validation\": \"%s/val.jsonl\",\n"
             "          \"max_length\": 24, \"seed\": 1, \"num_workers\": 1},\n"
             " \"train\": {\"batch_size\": 8, \"max_steps\": 4, \"lr\": 1e-3, \"seed\": 5,\n"
             "           \"threads\": 2},\n"
             " \"logging\": {\"steps\": 2, \"tensorboard\": false, \"report\": false},\n"
             " \"eval\": {\"strategy\": \"no\", \"at_end\": true, \"batch_size\": 5},\n"
             " \"save\": {\"strategy\": \"no\"},\n"
             " \"output\": {\"dir\": \"%s\"}}\n",
             model_cfg, data, data, run_dir);
    tu_setup_text(cfg, text);
    rc = run(exe_train, "--config '%s' --quiet-config", cfg);
    snprintf(p, sizeof p, "%s/eval_results.json", run_dir);
    tu_check(rc == 0 && is_file(p), "bt-train creates output.dir new/runs/first and writes "
             "eval_results.json (rc %d: %s)", rc, err_text);
    if (rc) return tu_finish();

    /* --- 2. the saved config.json and eval_results.json carry the run's eval settings ----- */
    snprintf(p, sizeof p, "%s/config.json", run_dir);
    cJSON *config = read_json(p);
    tu_check(num(config, "max_text_len", NULL) == 24,
             "config.json: max_text_len 24 (data.max_length; the model config said 32)");
    /* configs/synthetic-model has a tokenizer but no tokenizer_config.json: the saved model
     * gets one with model_max_length = max_position_embeddings - pad_token_id - 1 (else
     * transformers sets 1e30 and truncation cuts nothing) */
    const double want_mml = num(config, "text_config", "max_position_embeddings") -
                            num(config, "text_config", "pad_token_id") - 1;
    cJSON_Delete(config);
    snprintf(p, sizeof p, "%s/tokenizer_config.json", run_dir);
    cJSON *tc = read_json(p);
    tu_check(num(tc, "model_max_length", NULL) == want_mml && want_mml > 2,
             "tokenizer_config.json written with model_max_length %g (= max_position_embeddings "
             "- pad_token_id - 1)", want_mml);
    cJSON_Delete(tc);
    snprintf(p, sizeof p, "%s/eval_results.json", run_dir);
    cJSON *train_eval = read_json(p);
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(train_eval, "model");
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(train_eval, "data");
    tu_check(num(train_eval, "max_length", NULL) == 24 && num(train_eval, "batch_size", NULL) == 5 &&
                 cJSON_IsString(m) && !strcmp(m->valuestring, run_dir) && cJSON_IsString(d) &&
                 strstr(d->valuestring, "val.jsonl") && num(train_eval, "step", NULL) == 4,
             "eval_results.json: max_length 24, batch_size 5, model, data, step 4 "
             "(docs/outputs.md)");

    /* bt-eval with no flags, writing its JSON under missing directories */
    snprintf(q, sizeof q, "%s/new/results/deep/eval.json", tmp);
    rc = run(exe_eval, "--model '%s' --data '%s/val.jsonl' --json '%s'", run_dir, data, q);
    tu_check(rc == 0 && is_file(q), "bt-eval --json creates new/results/deep/ (rc %d: %s)", rc,
             err_text);
    if (rc) return tu_finish();
    cJSON *cli = read_json(q);
    const double l_train = num(train_eval, "eval_loss", NULL), l_cli = num(cli, "eval_loss", NULL);
    tu_check(num(cli, "max_length", NULL) == 24 && num(cli, "batch_size", NULL) == 5,
             "bt-eval without flags: max_length 24 (config.json max_text_len), batch_size 5 "
             "(eval_results.json)");
    tu_check(fabs(l_cli - l_train) <= 1e-6 * fabs(l_train),
             "bt-eval's eval loss %.9g = bt-train's final %.9g (rtol 1e-6)", l_cli, l_train);
    static const char *const dirs[2] = {"text_to_image", "image_to_text"};
    static const char *const keys[5] = {"r1", "r5", "r10", "mean_rank", "queries"};
    int same = 1;
    for (int a = 0; a < 2; a++)
        for (int k = 0; k < 5; k++) same &= num(cli, dirs[a], keys[k]) == num(train_eval, dirs[a], keys[k]);
    same &= num(cli, "choice", "accuracy") == num(train_eval, "choice", "accuracy") &&
            num(cli, "records", NULL) == num(train_eval, "records", NULL);
    tu_check(same, "bt-eval's recalls, mean ranks and 5-way accuracy (%g) = bt-train's (%g)",
             num(cli, "choice", "accuracy"), num(train_eval, "choice", "accuracy"));
    cJSON_Delete(cli);
    /* the test can fail: the old defaults (T = 32, batch 8) give another loss */
    snprintf(q, sizeof q, "%s/old_defaults.json", tmp);
    rc = run(exe_eval, "--model '%s' --data '%s/val.jsonl' --max-length 32 --batch-size 8 "
             "--json '%s'", run_dir, data, q);
    if (rc == 0) {
        cli = read_json(q);
        double l_old = num(cli, "eval_loss", NULL);
        tu_check(fabs(l_old - l_train) > 1e-4 * fabs(l_train),
                 "control: T 32, batch 8 give another loss (%.6g vs %.6g)", l_old, l_train);
        cJSON_Delete(cli);
    } else {
        tu_check(0, "control run exits 0 (%s)", err_text);
    }
    cJSON_Delete(train_eval);

    /* --- 3. bt-embed --output under missing directories, at the trained length ------------ */
    snprintf(q, sizeof q, "%s/new/embeddings/val/emb.safetensors", tmp);
    rc = run(exe_embed, "--model '%s' --data '%s/val.jsonl' --output '%s'", run_dir, data, q);
    tu_check(rc == 0 && is_file(q), "bt-embed --output creates new/embeddings/val/ (rc %d: %s)",
             rc, err_text);
    if (rc == 0) {
        safetensors_file f;
        if (tu_check(safetensors_open(&f, q) == BT_OK, "open %s", q)) {
            cJSON *md = cJSON_Parse(f.metadata_json ? f.metadata_json : "{}");
            const cJSON *ml = cJSON_GetObjectItemCaseSensitive(md, "max_length");
            tu_check(cJSON_IsString(ml) && !strcmp(ml->valuestring, "24"),
                     "bt-embed metadata max_length \"24\" (got %s)",
                     cJSON_IsString(ml) ? ml->valuestring : "none");
            cJSON_Delete(md);
            safetensors_close(&f);
        }
    }

    /* --- bt-data batch --output and bt-forward --output ------------------------------------ */
    char batch[1400];
    snprintf(batch, sizeof batch, "%s/new/batches/b0.safetensors", tmp);
    rc = run(exe_data, "batch --data '%s/val.jsonl' --model '%s' --batch-size 4 --output '%s'",
             data, run_dir, batch);
    tu_check(rc == 0 && is_file(batch), "bt-data batch --output creates new/batches/ (rc %d: %s)",
             rc, err_text);
    snprintf(q, sizeof q, "%s/new/forward/out.safetensors", tmp);
    rc = run(exe_fwd, "--model '%s' --inputs '%s' --head itc --output '%s'", run_dir, batch, q);
    tu_check(rc == 0 && is_file(q), "bt-forward --output creates new/forward/ (rc %d: %s)", rc,
             err_text);

    /* --- the special-file rules stay ------------------------------------------------------- */
    snprintf(p, sizeof p, "%s/a_file", tmp);
    tu_setup_text(p, "not a directory");
    rc = run(exe_eval, "--model '%s' --data '%s/val.jsonl' --json '%s/sub/x.json'", run_dir, data,
             p);
    tu_check(rc == 1 && strstr(err_text, "a_file") && strstr(err_text, "not a directory"),
             "a regular file where a directory goes: exit 1 naming it (%s)", err_text);
    snprintf(p, sizeof p, "%s/a_fifo", tmp);
    if (tu_check(mkfifo(p, 0600) == 0, "make a FIFO")) {
        rc = run(exe_embed, "--model '%s' --data '%s/val.jsonl' --output '%s'", run_dir, data, p);
        tu_check(rc == 1 && strstr(err_text, "a_fifo") && strstr(err_text, "FIFO"),
                 "a FIFO as the output: exit 1 naming it (%s)", err_text);
    }
    snprintf(p, sizeof p, "%s/a_file", tmp);
    rc = run(exe_data, "synth --out '%s/deeper' --train 2 --val 0 --test 0", p);
    tu_check(rc == 1 && strstr(err_text, "a_file") && strstr(err_text, "not a directory"),
             "bt-data synth --out below a file: exit 1 naming it (%s)", err_text);

    /* --- 4. a shape transformers cannot run -------------------------------------------- */
    const char *configs = getenv("BT_CONFIGS");
    const char *heads[2] = {"itc", "itm"};
    for (int h = 0; h < 2; h++) {
        snprintf(text, sizeof text,
                 "{\"model\": {\"config\": \"%s/tiny\", \"heads\": [\"%s\"]},\n"
                 " \"data\": {\"train\": \"%s/train.jsonl\", \"max_length\": 8},\n"
                 " \"train\": {\"max_steps\": 1, \"loss_weights\": {\"itc\": %d, \"itm\": %d}},\n"
                 " \"output\": {\"dir\": \"%s/new/runs/tiny_%s\"}}\n",
                 configs ? configs : "configs", heads[h], data, 1 - h, h, tmp, heads[h]);
        tu_setup_text(cfg, text);
        rc = run(exe_train, "--config '%s' --quiet-config", cfg);
        int names = strstr(err_text, "vision_config.hidden_size (64)") &&
                    strstr(err_text, "hidden_size (32)") && strstr(err_text, "itc") &&
                    strstr(err_text, "tiny/config.json");
        if (h == 0)
            tu_check(rc == 1 && names, "ITC head with vision width 64 != hidden_size 32: exit 1 "
                     "naming the fields (%s)", err_text);
        else
            tu_check(rc != 0 && !strstr(err_text, "vision_config.hidden_size"),
                     "ITM head on the same shape: not refused for the widths (%s)", err_text);
    }
    return tu_finish();
}
