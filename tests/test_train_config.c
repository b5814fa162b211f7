/* test_train_config.c: the run config (src/train/config.h, docs/config.md).
 *
 * - every shipped configs/train/<name>.json parses, passes the cross-field rules and round-trips;
 * - the defaults are Hugging Face TrainingArguments' values (written here from HF's
 *   documentation, not read back from the table);
 * - bad files and bad --set overrides give the exact message, with the source and the full
 *   key path: unknown keys (with the hint), wrong types, out-of-range values, a key given
 *   twice, a section that is not an object, malformed JSON, a missing file;
 * - the cross-field rules each fire with their message;
 * - resolved JSON -> config -> JSON is byte-identical and field-by-field equal;
 * - resume compatibility: a data-order key that changed is refused by name, an lr change
 *   is listed;
 * - docs/config.md documents every key of the table. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/params.h"
#include "test_util.h"
#include "train/config.h"

static const char *tmp;

static const char *write_cfg(const char *name, const char *text) {
    static char path[4][1024];
    static int k;
    k = (k + 1) % 4;
    snprintf(path[k], sizeof path[k], "%s/%s", tmp, name);
    tu_setup_text(path[k], text);
    return path[k];
}

/* The smallest valid config: the three required settings. */
#define MINIMAL "\"model\": {\"path\": \"m\"}, \"data\": {\"train\": \"t.jsonl\"}, " \
                "\"output\": {\"dir\": \"o\"}"

/* Loads text as file `name`, expects failure with exactly `want` as the message. */
static void expect_file_error(const char *name, const char *text, const char *want) {
    const char *path = write_cfg(name, text);
    char full[1400];
    snprintf(full, sizeof full, "%s: %s", path, want);
    bt_run_config c;
    bt_run_config_init(&c);
    bt_status s = bt_run_config_load(&c, path);
    if (s == BT_OK) s = bt_run_config_finish(&c, path);
    tu_check(s != BT_OK && !strcmp(bt_error_message(), full), "%s -> \"%s\" (got \"%s\")", name,
             want, s == BT_OK ? "OK" : bt_error_message());
    bt_run_config_free(&c);
}

/* Applies --set `a` to a minimal valid config; expects the exact message. */
static void expect_set_error(const char *a, const char *want) {
    bt_run_config c;
    bt_run_config_init(&c);
    bt_status s = bt_run_config_set(&c, a);
    tu_check(s != BT_OK && !strcmp(bt_error_message(), want), "--set %s -> \"%s\" (got \"%s\")",
             a, want, s == BT_OK ? "OK" : bt_error_message());
    bt_run_config_free(&c);
}

/* A minimal config plus `extra` JSON members; expects finish to fail with `want`. */
static void expect_cross_error(const char *label, const char *members, const char *want) {
    char text[2048];
    snprintf(text, sizeof text, "{%s}", members);
    expect_file_error(label, text, want);
}

static void test_defaults(void) {
    bt_run_config c;
    bt_run_config_init(&c);
    const char *path = write_cfg("minimal.json", "{" MINIMAL "}");
    bt_status s = bt_run_config_load(&c, path);
    if (s == BT_OK) s = bt_run_config_finish(&c, path);
    tu_check(s == BT_OK, "minimal config resolves (%s)", bt_error_message());
    /* HF TrainingArguments defaults (transformers docs, TrainingArguments) */
    tu_check(c.train.lr == 5e-5, "learning_rate 5e-5");
    tu_check(c.train.weight_decay == 0.0, "weight_decay 0");
    tu_check(c.train.adam_beta1 == 0.9 && c.train.adam_beta2 == 0.999, "adam betas 0.9/0.999");
    tu_check(c.train.adam_eps == 1e-8, "adam_epsilon 1e-8");
    tu_check(c.train.max_grad_norm == 1.0, "max_grad_norm 1.0");
    tu_check(c.train.epochs == 3.0 && c.train.max_steps == -1, "3 epochs, max_steps -1");
    tu_check(c.train.warmup_steps == 0 && c.train.warmup_ratio == 0.0, "no warmup");
    tu_check(c.train.schedule == BT_SCHEDULE_LINEAR, "linear schedule");
    tu_check(c.train.batch_size == 8 && c.eval.batch_size == 8, "batch size 8 (train, eval)");
    tu_check(c.train.gradient_accumulation_steps == 1, "gradient_accumulation_steps 1");
    tu_check(c.train.seed == 42, "seed 42");
    tu_check(c.data.seed == 42 && c.model.init_seed == 42, "data_seed / init seed = seed");
    tu_check(c.logging.steps == 500 && c.save.steps == 500, "logging_steps, save_steps 500");
    tu_check(c.eval.steps == 500, "eval_steps defaults to logging_steps");
    tu_check(c.eval.strategy == BT_INTERVAL_NO && c.save.strategy == BT_INTERVAL_STEPS,
             "eval_strategy no, save_strategy steps");
    tu_check(c.save.total_limit == 0, "save_total_limit unlimited");
    tu_check(c.train.precision == BT_PRECISION_FP32, "fp32 unless bf16");
    tu_check(c.data.drop_last == 0 && c.data.shuffle == 1, "no drop_last, shuffled");
    tu_check(c.output.overwrite == 0, "overwrite_output_dir false");
    tu_check(c.logging.throughput_warmup_steps == 0, "throughput_warmup_steps 0 (Gaudi)");
    tu_check(c.train.mlm_probability == 0.15, "mlm_probability 0.15");
    tu_check(c.model.heads == BT_HEADS_ITC, "heads derived from the loss weights: itc");
    tu_check(c.model.drop_text_pooler == 1, "text pooler dropped (freeze_text_pooler)");
    tu_check(!strcmp(c.data.image_column, "image") && !strcmp(c.data.caption_column, "caption"),
             "columns image / caption");
    bt_run_config_free(&c);
}

static void test_file_errors(void) {
    expect_file_error("type.json", "{\"train\": {\"lr\": \"abc\"}}",
                      "train.lr: expected a number > 0, got \"abc\"");
    expect_file_error("unknown.json", "{\"train\": {\"lrr\": 1}}",
                      "unknown key 'train.lrr' (did you mean 'train.lr'?)");
    expect_file_error("hfname.json", "{\"train\": {\"learning_rate\": 1e-5}}",
                      "unknown key 'train.learning_rate' (did you mean 'train.lr', HF's "
                      "learning_rate?)");
    expect_file_error("section.json", "{\"trian\": {}}", "unknown key 'trian'");
    expect_file_error("other_section.json", "{\"train\": {\"logging_steps\": 10}}",
                      "unknown key 'train.logging_steps' (did you mean 'logging.steps', HF's "
                      "logging_steps?)");
    expect_file_error("nested.json", "{\"train\": {\"loss_weights\": {\"itm\": \"x\"}}}",
                      "train.loss_weights.itm: expected a number >= 0, got \"x\"");
    expect_file_error("nested_unknown.json", "{\"train\": {\"loss_weights\": {\"xyz\": 1}}}",
                      "unknown key 'train.loss_weights.xyz' (did you mean "
                      "'train.loss_weights.itc'?)");
    expect_file_error("batch0.json", "{\"train\": {\"batch_size\": 0}}",
                      "train.batch_size: expected an integer in [1, 1048576], got 0");
    expect_file_error("batchfrac.json", "{\"train\": {\"batch_size\": 2.5}}",
                      "train.batch_size: expected an integer in [1, 1048576], got 2.5");
    expect_file_error("batchbig.json", "{\"train\": {\"batch_size\": 4611686018427387904}}",
                      "train.batch_size: expected an integer in [1, 1048576], got "
                      "4611686018427387904");
    expect_file_error("ratio.json", "{\"train\": {\"warmup_ratio\": 1.5}}",
                      "train.warmup_ratio: expected a number in [0, 1], got 1.5");
    expect_file_error("beta2.json", "{\"train\": {\"adam_beta2\": 1}}",
                      "train.adam_beta2: expected a number in [0, 1), got 1");
    expect_file_error("mlmp.json", "{\"train\": {\"mlm_probability\": 0}}",
                      "train.mlm_probability: expected a number in (0, 1), got 0");
    expect_file_error("maxsteps0.json", "{\"train\": {\"max_steps\": 0}}",
                      "train.max_steps: expected -1 or an integer >= 1, got 0");
    expect_file_error("maxlen.json", "{\"data\": {\"max_length\": 1}}",
                      "data.max_length: expected an integer in [2, 512], got 1");
    expect_file_error("enum.json", "{\"train\": {\"schedule\": \"step\"}}",
                      "train.schedule: expected one of \"linear\", \"cosine\", \"constant\", "
                      "got \"step\"");
    /* the keys this session added, through the same table rules */
    expect_file_error("scope.json", "{\"train\": {\"itc_scope\": \"both\"}}",
                      "train.itc_scope: expected one of \"global\", \"local\", got \"both\"");
    expect_file_error("overlap.json", "{\"dist\": {\"overlap\": 1}}",
                      "dist.overlap: expected true or false, got 1");
    expect_file_error("timeout.json", "{\"dist\": {\"timeout_s\": -1}}",
                      "dist.timeout_s: expected a number in [0, 1000000000], got -1");
    expect_file_error("progress.json", "{\"logging\": {\"progress\": \"fancy\"}}",
                      "logging.progress: expected one of \"auto\", \"live\", \"plain\", got "
                      "\"fancy\"");
    expect_file_error("shufbuf.json", "{\"data\": {\"shuffle_buffer\": 0}}",
                      "data.shuffle_buffer: expected an integer in [1, 1000000], got 0");
    expect_file_error("bool.json", "{\"data\": {\"shuffle\": 1}}",
                      "data.shuffle: expected true or false, got 1");
    expect_file_error("nullbool.json", "{\"data\": {\"shuffle\": null}}",
                      "data.shuffle: expected true or false, got null");
    expect_file_error("str.json", "{\"model\": {\"path\": 3}}",
                      "model.path: expected a non-empty string or null, got 3");
    expect_file_error("huge.json", "{\"train\": {\"lr\": 1e999}}",
                      "train.lr: expected a number > 0, got a number beyond the double range");
    expect_file_error("heads.json", "{\"model\": {\"heads\": [\"itc\", \"itc\"]}}",
                      "model.heads: expected a list of distinct names from \"itc\", \"itm\", "
                      "\"mlm\" or null, got [\"itc\",\"itc\"]");
    expect_file_error("notobj.json", "{\"train\": 5}",
                      "train: expected an object (a section), got 5");
    expect_file_error("top.json", "[1]", "expected a JSON object at the top level, got an array");
    /* bt's one JSON rule (json_util.h) words these */
    expect_file_error("dup.json", "{\"train\": {\"lr\": 1e-4, \"lr\": 2e-4}}",
                      "key \"lr\" appears twice in $.train; expected each key once (Python's "
                      "json would keep the last value, cJSON the first: bt refuses)");
    expect_file_error("bad.json", "{\n  \"train\": {\"lr\": 1e-4,}\n}",
                      "not valid JSON at byte 26 (line 2, near \"\\n}\")");

    bt_run_config c;
    bt_run_config_init(&c);
    char missing[1100];
    snprintf(missing, sizeof missing, "%s/none.json", tmp);
    bt_status s = bt_run_config_load(&c, missing);
    tu_check(s == BT_ERR_IO && strstr(bt_error_message(), missing) &&
                 strstr(bt_error_message(), "cannot open run config"),
             "missing file named (%s)", bt_error_message());
    bt_run_config_free(&c);
}

static void test_cross_field(void) {
    expect_cross_error("x_both", "\"model\": {\"path\": \"m\", \"config\": \"c\"}, "
                                 "\"data\": {\"train\": \"t\"}, \"output\": {\"dir\": \"o\"}",
                       "model: give exactly one of model.path (an HF model directory to "
                       "fine-tune) and model.config (a model config to initialize from "
                       "scratch); both are set");
    expect_cross_error("x_neither", "\"data\": {\"train\": \"t\"}, \"output\": {\"dir\": \"o\"}",
                       "model: give exactly one of model.path (an HF model directory to "
                       "fine-tune) and model.config (a model config to initialize from "
                       "scratch); neither is set");
    expect_cross_error("x_train", "\"model\": {\"path\": \"m\"}, \"output\": {\"dir\": \"o\"}",
                       "data.train: required (the training manifest), not set");
    expect_cross_error("x_out", "\"model\": {\"path\": \"m\"}, \"data\": {\"train\": \"t\"}",
                       "output.dir: required (where checkpoints and logs go), not set");
    expect_cross_error("x_warm", MINIMAL ", \"train\": {\"warmup_steps\": 10, "
                                         "\"warmup_ratio\": 0.1}",
                       "train.warmup_steps (10) and train.warmup_ratio (0.1) are both set; "
                       "give one of them");
    expect_cross_error("x_eval", MINIMAL ", \"eval\": {\"strategy\": \"epoch\"}",
                       "eval.strategy is \"epoch\" but data.validation is not set; give a "
                       "validation manifest or set eval.strategy to \"no\"");
    expect_cross_error("x_head2", "\"model\": {\"path\": \"m\", \"heads\": [\"itc\"]}, "
                                  "\"data\": {\"train\": \"t\"}, \"output\": {\"dir\": \"o\"}, "
                                  "\"train\": {\"loss_weights\": {\"itm\": 0.5}}",
                       "train.loss_weights.itm is 0.5 but model.heads has no \"itm\"; add it "
                       "to model.heads (or set model.heads to null)");
    expect_cross_error("x_zero", MINIMAL ", \"train\": {\"loss_weights\": {\"itc\": 0}}",
                       "train.loss_weights: every weight is 0; give at least one loss a weight "
                       "> 0 (itc, itm or mlm)");
    expect_cross_error("x_rerank", MINIMAL ", \"eval\": {\"itm_rerank_k\": 16}",
                       "eval.itm_rerank_k is 16 but model.heads has no \"itm\"; add it or set "
                       "eval.itm_rerank_k to 0");

    /* heads derived from the weights when null */
    bt_run_config c;
    const char *path = write_cfg("derive.json", "{" MINIMAL ", \"train\": {\"loss_weights\": "
                                                "{\"itc\": 1, \"itm\": 1, \"mlm\": 0.5}}}");
    bt_status s = bt_run_config_resolve(&c, path, NULL, 0);
    tu_check(s == BT_OK && c.model.heads == (BT_HEADS_ITC | BT_HEADS_ITM | BT_HEADS_MLM),
             "null heads = the heads of the nonzero losses");
    bt_run_config_free(&c);
}

static void test_set(void) {
    bt_run_config c;
    const char *path = write_cfg("base.json", "{" MINIMAL "}");
    const char *sets[] = {"train.lr=2e-5",
                          "train.batch_size=40",
                          "train.precision=bf16",
                          "data.shuffle=false",
                          "data.validation=v.jsonl",
                          "eval.strategy=steps",
                          "model.heads=itc,itm",
                          "train.loss_weights.itm=1",
                          "data.test=\"null\"",
                          "save.total_limit=3",
                          "train.seed=7"};
    bt_status s = bt_run_config_resolve(&c, path, sets, sizeof sets / sizeof sets[0]);
    tu_check(s == BT_OK, "overrides apply (%s)", bt_error_message());
    tu_check(c.train.lr == 2e-5 && c.train.batch_size == 40 &&
                 c.train.precision == BT_PRECISION_BF16 && !c.data.shuffle,
             "number, integer, enum and bool overrides");
    tu_check(c.data.validation && !strcmp(c.data.validation, "v.jsonl") &&
                 c.data.test && !strcmp(c.data.test, "null"),
             "string overrides (a quoted \"null\" is the string)");
    tu_check(c.model.heads == (BT_HEADS_ITC | BT_HEADS_ITM), "list override");
    tu_check(c.save.total_limit == 3 && c.data.seed == 7 && c.model.init_seed == 7,
             "derived seeds follow an overridden train.seed");
    s = bt_run_config_set(&c, "data.validation=null");
    tu_check(s == BT_OK && c.data.validation == NULL, "null unsets an optional string");
    bt_run_config_free(&c);

    expect_set_error("train.lr=abc", "--set: train.lr: expected a number > 0, got \"abc\"");
    expect_set_error("train.lr=1x", "--set: train.lr: expected a number > 0, got \"1x\"");
    expect_set_error("train.lr=-1", "--set: train.lr: expected a number > 0, got -1");
    expect_set_error("train.batch_size=0",
                     "--set: train.batch_size: expected an integer in [1, 1048576], got 0");
    expect_set_error("data.shuffle=yes", "--set: data.shuffle: expected true or false, got "
                                         "\"yes\"");
    expect_set_error("model.heads=itc,xyz",
                     "--set: model.heads: expected a list of distinct names from \"itc\", "
                     "\"itm\", \"mlm\" or null, got [\"itc\",\"xyz\"]");
    expect_set_error("train.lrr=1", "--set: unknown key 'train.lrr' (did you mean 'train.lr'?)");
    expect_set_error("train=1", "--set: 'train' is a section; set one of its keys (e.g. --set "
                                "train.batch_size=...)");
    expect_set_error("train.lr", "--set: expected KEY=VALUE (e.g. train.lr=2e-5), got 'train.lr'");
    expect_set_error("train.max_steps=-2",
                     "--set: train.max_steps: expected -1 or an integer >= 1, got -2");
    expect_set_error("model.path=", "--set: model.path: expected a non-empty string or null, got \"\"");
    /* a value a config file could not hold (it is stored in trainer_state.json) */
    expect_set_error("output.dir=out/caf\xe9",
                     "--set: output.dir: the value holds bytes that are not UTF-8 (byte 7: "
                     "0xe9); expected UTF-8 text, as in a config file");
    bt_run_config_init(&c);
    s = bt_run_config_set(&c, "output.dir=out/caf\xc3\xa9");
    tu_check(s == BT_OK && !strcmp(c.output.dir, "out/caf\xc3\xa9"), "a UTF-8 value is kept");
    bt_run_config_free(&c);
}

/* resolved -> text -> config -> text: same bytes, and no field differs. */
static void check_round_trip(const char *label, const bt_run_config *c) {
    char *a = bt_run_config_to_string(c);
    bt_run_config d;
    bt_run_config_init(&d);
    bt_status s = bt_run_config_parse(&d, a, label);
    if (s == BT_OK) s = bt_run_config_finish(&d, label);
    char *b = s == BT_OK ? bt_run_config_to_string(&d) : NULL;
    char changed[512] = "?";
    bt_status r = s == BT_OK ? bt_run_config_check_resume(c, &d, label, changed, sizeof changed)
                             : s;
    tu_check(s == BT_OK && b && !strcmp(a, b) && r == BT_OK && changed[0] == '\0',
             "%s: resolved JSON round-trips (%s%s)", label, s == BT_OK ? "" : bt_error_message(),
             changed);
    free(a);
    free(b);
    bt_run_config_free(&d);
}

static void test_shipped(void) {
    const char *root = getenv("BT_CONFIGS");
    if (!root) root = "configs";
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/train", root);
    DIR *d = opendir(dir);
    tu_check(d != NULL, "%s exists", dir);
    if (!d) return;
    int n = 0, seen_demo = 0, seen_base = 0, seen_large = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len < 6 || strcmp(e->d_name + len - 5, ".json")) continue;
        char path[1400];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        bt_run_config c;
        bt_status s = bt_run_config_resolve(&c, path, NULL, 0);
        tu_check(s == BT_OK, "%s parses (%s)", e->d_name, s == BT_OK ? "" : bt_error_message());
        if (s == BT_OK) check_round_trip(e->d_name, &c);
        if (!strcmp(e->d_name, "demo.json")) {
            seen_demo = 1;
            /* scripts/check_synthetic_learnable.py's hyperparameters, with twice the epochs
             * and a cosine schedule (docs/config.md says why) */
            tu_check(c.train.lr == 1e-3 && c.train.batch_size == 32 && c.train.epochs == 32 &&
                         c.train.weight_decay == 0.01 && c.train.schedule == BT_SCHEDULE_COSINE &&
                         c.train.warmup_ratio == 0.05 &&
                         c.train.max_grad_norm == 0 && c.model.heads == BT_HEADS_ITC &&
                         c.data.drop_last && c.data.max_length == 32 &&
                         c.eval.strategy == BT_INTERVAL_EPOCH,
                     "demo.json: the PyTorch twin's run, 32 cosine epochs");
        }
        if (!strcmp(e->d_name, "newyorker-base.json") ||
            !strcmp(e->d_name, "newyorker-large.json")) {
            seen_base += e->d_name[10] == 'b';
            seen_large += e->d_name[10] == 'l';
            /* the Optimum Habana reference run (docs/config.md cites it) */
            tu_check(c.train.lr == 1e-5 && c.train.epochs == 5 && c.train.batch_size == 40 &&
                         c.train.adam_eps == 1e-6 && c.train.schedule == BT_SCHEDULE_LINEAR &&
                         c.train.precision == BT_PRECISION_BF16 && c.train.weight_decay == 0 &&
                         c.train.warmup_steps == 0 && c.logging.steps == 10 &&
                         c.logging.throughput_warmup_steps == 3 && c.logging.tensorboard &&
                         c.eval.batch_size == 16 && c.data.max_length == 128 &&
                         !strcmp(c.data.image_column, "image") &&
                         !strcmp(c.data.caption_column, "image_description"),
                     "%s has the reference run's hyperparameters", e->d_name);
        }
        if (s == BT_OK) bt_run_config_free(&c);
        n++;
    }
    closedir(d);
    tu_check(n >= 3 && seen_demo && seen_base && seen_large,
             "demo, newyorker-base and newyorker-large are shipped (%d configs)", n);
}

static void test_round_trip_overrides(void) {
    bt_run_config c;
    const char *path = write_cfg("rt.json", "{" MINIMAL "}");
    const char *sets[] = {"train.lr=3.3333333333333333e-05", "train.epochs=2.5",
                          "train.max_steps=123", "train.warmup_ratio=0.1",
                          "model.heads=itm,mlm", "train.loss_weights.itc=0",
                          "train.loss_weights.itm=1", "train.loss_weights.mlm=0.25",
                          "data.seed=9007199254740992", "output.resume_from=x/checkpoint-5",
                          "eval.steps=7", "train.lr_mult.cross_modal=5"};
    bt_status s = bt_run_config_resolve(&c, path, sets, sizeof sets / sizeof sets[0]);
    tu_check(s == BT_OK, "override set resolves (%s)", bt_error_message());
    if (s == BT_OK) check_round_trip("overridden", &c);
    tu_check(c.data.seed == 9007199254740992LL, "2^53 seed kept exactly");
    bt_run_config_free(&c);
}

static void test_resume_check(void) {
    bt_run_config a, b;
    const char *path = write_cfg("resume.json", "{" MINIMAL "}");
    bt_run_config_resolve(&a, path, NULL, 0);
    const char *sets_ok[] = {"train.lr=1e-4", "logging.steps=3"};
    bt_run_config_resolve(&b, path, sets_ok, 2);
    char changed[256];
    bt_status s = bt_run_config_check_resume(&a, &b, "ck/trainer_state.json", changed,
                                             sizeof changed);
    /* eval.steps follows logging.steps (derived) */
    tu_check(s == BT_OK && !strcmp(changed, "train.lr, logging.steps, eval.steps"),
             "lr and logging changes allowed and listed (\"%s\")", changed);
    bt_run_config_free(&b);
    const char *sets_bad[] = {"train.batch_size=16"};
    bt_run_config_resolve(&b, path, sets_bad, 1);
    s = bt_run_config_check_resume(&a, &b, "ck/trainer_state.json", changed, sizeof changed);
    tu_check(s == BT_ERR_CONFIG &&
                 !strcmp(bt_error_message(),
                         "ck/trainer_state.json: run_config.train.batch_size is 8, this run has "
                         "16; a resumed run must keep it (set it back, or train into a new "
                         "output.dir)"),
             "a batch-size change refused by name (%s)", bt_error_message());
    bt_run_config_free(&a);
    bt_run_config_free(&b);
}

/* Every key can be given on the command line in the form the resolved config prints it:
 * --set key=<printed JSON value> for all keys of a resolved shipped config rebuilds it. */
static void test_set_every_key(void) {
    const char *root = getenv("BT_CONFIGS");
    char path[1100];
    snprintf(path, sizeof path, "%s/train/newyorker-large.json", root ? root : "configs");
    bt_run_config a, b;
    if (bt_run_config_resolve(&a, path, NULL, 0) != BT_OK) {
        tu_check(0, "%s resolves (%s)", path, bt_error_message());
        return;
    }
    cJSON *j = bt_run_config_to_json(&a);
    bt_run_config_init(&b);
    size_t bad = 0;
    for (size_t i = 0; i < bt_run_config_n_keys(); i++) {
        const char *key = bt_run_config_key(i);
        const cJSON *node = j;
        char part[64];
        for (const char *p = key; node && *p;) {
            const char *dot = strchr(p, '.');
            size_t n = dot ? (size_t)(dot - p) : strlen(p);
            snprintf(part, sizeof part, "%.*s", (int)n, p);
            node = cJSON_GetObjectItemCaseSensitive(node, part);
            p += n + (dot ? 1 : 0);
        }
        char *val = node ? cJSON_PrintUnformatted(node) : NULL;
        char assign[512];
        snprintf(assign, sizeof assign, "%s=%s", key, val ? val : "?");
        free(val);
        if (bt_run_config_set(&b, assign) != BT_OK) {
            bad++;
            printf("# --set %s: %s\n", assign, bt_error_message());
        }
    }
    cJSON_Delete(j);
    bt_status st = bt_run_config_finish(&b, "sets");
    char *ta = bt_run_config_to_string(&a), *tb = st == BT_OK ? bt_run_config_to_string(&b) : NULL;
    tu_check(bad == 0 && tb && !strcmp(ta, tb),
             "--set key=<printed value> for each of the %zu keys rebuilds newyorker-large.json",
             bt_run_config_n_keys());
    free(ta);
    free(tb);
    bt_run_config_free(&a);
    bt_run_config_free(&b);
}

/* docs/config.md names every key (as `key`) and its default. */
static void test_docs(void) {
    const char *root = getenv("BT_CONFIGS");
    char path[1100];
    snprintf(path, sizeof path, "%s/../docs/config.md", root ? root : "configs");
    char *doc = (char *)tu_read_file(path, NULL);
    tu_check(doc != NULL, "%s readable", path);
    if (!doc) return;
    size_t missing = 0;
    for (size_t i = 0; i < bt_run_config_n_keys(); i++) {
        char want[160], def[96], row[300];
        snprintf(want, sizeof want, "| `%s` |", bt_run_config_key(i));
        bt_run_config_key_default(i, def, sizeof def);
        const char *at = strstr(doc, want);
        /* the row (up to its end) shows the default */
        int ok = 0;
        if (at) {
            const char *eol = strchr(at, '\n');
            size_t n = eol ? (size_t)(eol - at) : strlen(at);
            snprintf(row, sizeof row, "%.*s", (int)(n < sizeof row - 1 ? n : sizeof row - 1),
                     at);
            char def_cell[120];
            snprintf(def_cell, sizeof def_cell, "`%s`", def);
            ok = strstr(row, def_cell) != NULL;
        }
        if (!ok) {
            missing++;
            printf("# docs/config.md: no row \"%s ... `%s` ...\"\n", want, def);
        }
    }
    tu_check(missing == 0, "docs/config.md has a row with the default for each of the %zu keys",
             bt_run_config_n_keys());
    free(doc);
}

int main(void) {
    tmp = tu_tmpdir();
    test_defaults();
    test_file_errors();
    test_cross_field();
    test_set();
    test_shipped();
    test_round_trip_overrides();
    test_resume_check();
    test_set_every_key();
    test_docs();
    return tu_finish();
}
