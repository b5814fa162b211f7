/* test_checkpoint_init.c: a fresh model from a config.json alone: bt_checkpoint_init
 * (src/model/checkpoint.h) and `bt-checkpoint --init` (argv[1] = the binary).
 *
 * The config (written here) has a vision width of 128 != the text width 32, two layers,
 * initializer_factor 2 and logit_scale_init_value 1.5, so that every init rule of params.h
 * gives a different std and a rule applied to the wrong tensor, a missing factor or a default
 * logit scale shows. Each tensor is classified by its HF key HERE (not by the table's init
 * field, which is what is under test), and checked:
 *   - biases (keys ending in "bias") exactly 0; LayerNorm weights exactly 1;
 *     logit_scale exactly logit_scale_init_value (1.5);
 *   - normal tensors: sample mean and std against HF's _init_weights (docs/spec.md §6):
 *     0.05·f for Linear / Conv / Embedding weights; the CLIP stds with the vision tower's
 *     own width W = 128 and depth Lv = 2: in_proj / class / position W^-1/2·f, out_proj and
 *     c_proj W^-1/2·(2Lv)^-1/2·f, c_fc (2W)^-1/2·f; f = 2.
 *     Tolerance: for n independent N(0, s²) draws the sample std has relative standard error
 *     1/sqrt(2n) and the mean has standard error s/sqrt(n); the bounds are 5 standard errors
 *     (+0.5% for the std), so a correct init passes with certainty for practical purposes
 *     (and the seed is fixed, so the test is deterministic), while the closest pair of rules
 *     here (0.0884 vs 0.1, 12%) is apart by more than 3 times the widest bound on those
 *     tensors (out_proj: 16384 draws, bound 3.3%).
 *   - determinism: the same seed gives the same bits; another seed changes every
 *     normal-initialized tensor;
 *   - the CLI: --init --save writes a complete HF directory (config.json, model.safetensors,
 *     the preprocessor file of the source) that bt_checkpoint_load reads back cleanly with
 *     every head from the file, bitwise equal to bt_checkpoint_init with the same seed;
 *     --heads itm builds only ITM; two runs with one seed give byte-identical weights;
 *     errors: no config.json (exit 1, naming it), --init with --strict (exit 2), and a
 *     directory without weights when --init is not given (exit 1, naming model.safetensors).
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "model/checkpoint.h"
#include "test_util.h"

static const char *exe;
static const char *tmp;
static char out_text[1 << 14], err_text[1 << 14];

static const char config_json[] =
    "{\"model_type\": \"bridgetower\", \"hidden_size\": 32, \"num_hidden_layers\": 2,\n"
    " \"num_attention_heads\": 2, \"initializer_factor\": 2, \"contrastive_hidden_size\": 16,\n"
    " \"logit_scale_init_value\": 1.5, \"link_tower_type\": \"add\",\n"
    " \"share_cross_modal_transformer_layers\": true, \"share_link_tower_layers\": false,\n"
    " \"hidden_act\": \"gelu\", \"tie_word_embeddings\": false, \"initializer_range\": 0.02,\n"
    " \"text_config\": {\"vocab_size\": 99, \"hidden_size\": 32, \"num_hidden_layers\": 2,\n"
    "   \"num_attention_heads\": 2, \"intermediate_size\": 64, \"max_position_embeddings\": 40,\n"
    "   \"type_vocab_size\": 1, \"pad_token_id\": 1, \"layer_norm_eps\": 1e-05},\n"
    " \"vision_config\": {\"hidden_size\": 128, \"num_hidden_layers\": 2, \"num_channels\": 3,\n"
    "   \"patch_size\": 8, \"image_size\": 32, \"layer_norm_eps\": 1e-05}}\n";

static const char preprocessor_json[] = "{\"size\": {\"shortest_edge\": 32}, \"resample\": 3}\n";

/* Runs "exe ARGS" (shell text) with stdout/stderr captured; the exit code, -1 on a crash. */
static int run(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int rc = tu_vrun_captured(exe, NULL, tmp, out_text, sizeof out_text, err_text, sizeof err_text,
                              fmt, ap);
    va_end(ap);
    return rc;
}

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

typedef enum { R_ZERO, R_ONE, R_LOGIT, R_NORMAL, R_UNKNOWN } rule_kind;

/* The HF rule of a tensor from its key alone; *std for R_NORMAL. W, Lv: vision width and
 * depth; f: initializer_factor. */
static rule_kind classify(const char *key, double W, double Lv, double f, double *std) {
    const double attn = pow(W, -0.5) * f, proj = pow(W, -0.5) * pow(2 * Lv, -0.5) * f,
                 fc = pow(2 * W, -0.5) * f;
    if (!strcmp(key, "logit_scale")) return R_LOGIT;
    if (ends_with(key, "bias")) return R_ZERO;
    if (ends_with(key, "LayerNorm.weight") || ends_with(key, "layernorm.weight") ||
        ends_with(key, "ln_pre.weight") || ends_with(key, "ln_post.weight") ||
        ends_with(key, "ln_1.weight") || ends_with(key, "ln_2.weight"))
        return R_ONE;
    *std = 0.05 * f;
    if (ends_with(key, "attn.in_proj_weight") || ends_with(key, "embeddings.class_embedding") ||
        strstr(key, "visual.embeddings.position_embedding.weight"))
        *std = attn;
    else if (ends_with(key, "attn.out_proj.weight") || ends_with(key, "mlp.c_proj.weight"))
        *std = proj;
    else if (ends_with(key, "mlp.c_fc.weight"))
        *std = fc;
    else if (!ends_with(key, "weight"))
        return R_UNKNOWN;
    return R_NORMAL;
}

static void test_rules(const bt_checkpoint_weights *w) {
    const bt_param_table *t = &w->table;
    size_t n_zero = 0, n_one = 0, n_normal = 0, bad = 0;
    for (size_t i = 0; i < t->n_tensors; i++) {
        const bt_param_tensor *x = &t->tensors[i];
        const float *v = w->params + x->offset;
        double std = 0;
        rule_kind k = classify(x->bare_key, 128, 2, 2, &std);
        int ok = 1;
        char why[256] = "";
        if (k == R_ZERO || k == R_ONE || k == R_LOGIT) {
            float want = k == R_ZERO ? 0.0f : k == R_ONE ? 1.0f : 1.5f;
            for (size_t j = 0; j < x->numel && ok; j++)
                if (v[j] != want) {
                    ok = 0;
                    snprintf(why, sizeof why, "element %zu = %g, expected %g", j, (double)v[j],
                             (double)want);
                }
            n_zero += k == R_ZERO;
            n_one += k == R_ONE;
        } else if (k == R_NORMAL) {
            double s = 0, ss = 0, n = (double)x->numel;
            for (size_t j = 0; j < x->numel; j++) {
                s += v[j];
                ss += (double)v[j] * v[j];
            }
            double mean = s / n, sd = sqrt(ss / n - mean * mean);
            double tol_sd = 5.0 / sqrt(2.0 * n) + 0.005, tol_mean = 5.0 * std / sqrt(n);
            ok = fabs(sd / std - 1.0) <= tol_sd && fabs(mean) <= tol_mean;
            if (!ok)
                snprintf(why, sizeof why,
                         "n %zu: std %.5f, expected %.5f (+-%.1f%%); mean %.2e (bound %.2e)",
                         x->numel, sd, std, 100 * tol_sd, mean, tol_mean);
            n_normal++;
        } else {
            ok = 0;
            snprintf(why, sizeof why, "no HF init rule known to this test for the key");
        }
        if (!ok) {
            bad++;
            tu_check(0, "init rule of %s: %s", x->key, why);
        }
    }
    tu_check(bad == 0 && n_zero > 0 && n_one > 0 && n_normal > 0,
             "all %zu tensors follow HF's init rules (%zu zero, %zu one, logit_scale 1.5, %zu "
             "normal with the CLIP stds in the vision tower, f = 2)",
             t->n_tensors, n_zero, n_one, n_normal);
}

static void test_library(const char *dir) {
    bt_checkpoint_weights a, b, c;
    bt_status s = bt_checkpoint_init(&a, dir, BT_HEADS_ALL, 7);
    if (!tu_check(s == BT_OK, "bt_checkpoint_init on a config-only directory: %s",
                  s == BT_OK ? "ok" : bt_error_message()))
        return;
    tu_check(a.table.heads == BT_HEADS_ALL && a.cfg.vision_hidden == 128 && a.config_json &&
                 strstr(a.config_json, "initializer_range"),
             "table with every head, config parsed, config.json text kept for saving");
    test_rules(&a);

    BT_ASSERT(bt_checkpoint_init(&b, dir, BT_HEADS_ALL, 7) == BT_OK);
    BT_ASSERT(bt_checkpoint_init(&c, dir, BT_HEADS_ALL, 8) == BT_OK);
    tu_check_bytes_equal("same seed, same bits", b.params, a.params,
                         a.table.numel * sizeof *a.params);
    size_t changed = 0, normal = 0;
    for (size_t i = 0; i < a.table.n_tensors; i++) {
        const bt_param_tensor *x = &a.table.tensors[i];
        double std;
        if (classify(x->bare_key, 128, 2, 2, &std) != R_NORMAL) continue;
        normal++;
        changed += memcmp(a.params + x->offset, c.params + x->offset,
                          x->numel * sizeof(float)) != 0;
    }
    tu_check(normal > 0 && changed == normal,
             "another seed changes every normal-initialized tensor (%zu of %zu)", changed,
             normal);

    bt_checkpoint_weights_free(&a);
    bt_checkpoint_weights_free(&b);
    bt_checkpoint_weights_free(&c);

    char missing[1200];
    snprintf(missing, sizeof missing, "%s/nothing-here", tmp);
    s = bt_checkpoint_init(&a, missing, BT_HEADS_ALL, 0);
    tu_check(s != BT_OK && strstr(bt_error_message(), "nothing-here") && a.params == NULL,
             "a missing directory is an error naming it: %s", bt_error_message());
}

static void test_cli(const char *dir) {
    char out[1200], out2[1200], out_itm[1200], p[1300], q[1300];
    snprintf(out, sizeof out, "%s/saved", tmp);
    snprintf(out2, sizeof out2, "%s/saved2", tmp);
    snprintf(out_itm, sizeof out_itm, "%s/saved_itm", tmp);

    int rc = run("--model '%s' --init --heads itc,itm,mlm --seed 5 --save '%s'", dir, out);
    tu_check(rc == 0 && strstr(out_text, "initialized by HF's init rules from seed 5"),
             "bt-checkpoint --init --save: exit 0 (%d) %s", rc, err_text);
    struct stat sb;
    int files = 1;
    const char *names[] = {"config.json", "model.safetensors", "preprocessor_config.json"};
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/%s", out, names[i]);
        files &= stat(p, &sb) == 0;
    }
    tu_check(files, "saved directory holds config.json, model.safetensors and the "
                    "preprocessor file of the source");

    bt_checkpoint_weights got, want;
    bt_checkpoint_report r;
    bt_status s = bt_checkpoint_load(&got, out, NULL, &r);
    int clean = s == BT_OK && r.missing.n == 0 && r.unexpected.n == 0 && r.mismatched.n == 0 &&
                r.initialized.n == 0 && r.heads_in_file == BT_HEADS_ALL;
    tu_check(clean, "the saved directory loads cleanly with all three heads from the file%s%s",
             s == BT_OK ? "" : ": ", s == BT_OK ? "" : bt_error_message());
    if (s == BT_OK) {
        BT_ASSERT(bt_checkpoint_init(&want, dir, BT_HEADS_ALL, 5) == BT_OK);
        tu_check(got.table.numel == want.table.numel &&
                     memcmp(got.params, want.params, want.table.numel * sizeof(float)) == 0,
                 "loaded weights are bitwise bt_checkpoint_init(seed 5)");
        bt_checkpoint_weights_free(&want);
        bt_checkpoint_weights_free(&got);
    }
    bt_checkpoint_report_free(&r);

    rc = run("--model '%s' --init --heads itc,itm,mlm --seed 5 --save '%s'", dir, out2);
    snprintf(p, sizeof p, "%s/model.safetensors", out);
    snprintf(q, sizeof q, "%s/model.safetensors", out2);
    tu_check(rc == 0 && tu_files_equal(p, q),
             "two --init runs with seed 5: byte-identical model.safetensors");

    rc = run("--model '%s' --init --heads itm --seed 5 --save '%s'", dir, out_itm);
    s = rc == 0 ? bt_checkpoint_load(&got, out_itm, NULL, &r) : BT_ERR_IO;
    tu_check(s == BT_OK && r.heads_in_file == BT_HEADS_ITM && got.table.heads == BT_HEADS_ITM,
             "--init --heads itm: the saved file has the ITM head only");
    if (s == BT_OK) {
        bt_checkpoint_weights_free(&got);
        bt_checkpoint_report_free(&r);
    }

    char empty[1200];
    snprintf(empty, sizeof empty, "%s/empty", tmp);
    mkdir(empty, 0755);
    rc = run("--model '%s' --init --save '%s/x'", empty, tmp);
    tu_check(rc == 1 && strstr(err_text, "config.json"),
             "--init without config.json: exit 1 naming it (%d): %s", rc, err_text);
    rc = run("--model '%s' --init --strict", dir);
    tu_check(rc == 2, "--init with --strict: usage error, exit 2 (%d)", rc);
    rc = run("--model '%s'", dir);
    tu_check(rc == 1 && strstr(err_text, "missing model.safetensors"),
             "without --init a config-only directory is still an error (exit %d)", rc);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_checkpoint_init PATH/TO/bt-checkpoint\n");
        return 2;
    }
    exe = argv[1];
    tmp = tu_tmpdir();
    char dir[1200], p[1300];
    snprintf(dir, sizeof dir, "%s/config_only", tmp);
    BT_ASSERT(mkdir(dir, 0755) == 0);
    snprintf(p, sizeof p, "%s/config.json", dir);
    tu_setup_text(p, config_json);
    snprintf(p, sizeof p, "%s/preprocessor_config.json", dir);
    tu_setup_text(p, preprocessor_json);
    test_library(dir);
    test_cli(dir);
    return tu_finish();
}
