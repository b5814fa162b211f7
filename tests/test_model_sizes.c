/* test_model_sizes.c: the parameter table and the model config, without fixtures from torch.
 *   - configs/bridgetower-base and configs/bridgetower-large-itm-mlm-itc: backbone counts
 *     326,347,008 / 864,514,048 and the head counts of docs/spec.md §6.2, the tensor
 *     counts 695 / 1031, and every key of tests/fixtures/model_keys_{base,large}.tsv (copied
 *     from the design folder, derived independently from the HF module tree and checked
 *     against transformers 4.27.1) with the same shape, and no key beyond them;
 *   - the no-decay flags equal HF Trainer's rule recomputed from the key names;
 *   - key lookup with and without the `bridgetower.` prefix;
 *   - init rules on the tiny config (ones/zeros/constants exact; sample std of the normal
 *     tensors within 5 standard errors of the rule), determinism and independence of the
 *     heads built;
 *   - config errors a user can cause name the file and the key;
 *   - a tiny-model forward/backward on random input runs with finite losses and gradients.
 * With --base-step (test entry 'model_base_step', suite slow): the base model's fp32 forward
 * and backward at batch 2 from a random init, timed, with finite losses and gradients.
 *
 * Deliberately not here: numerical parity (test_model_parity.c, test_model_grad.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/config.h"
#include "model/model.h"
#include "train/optim.h"
#include "model/params.h"
#include "test_util.h"

static const char *config_path(const char *name) {
    static char path[1024];
    const char *root = getenv("BT_CONFIGS");
    if (root) snprintf(path, sizeof path, "%s/%s/config.json", root, name);
    else snprintf(path, sizeof path, "%s/../../configs/%s/config.json", tu_fixture_path(""), name);
    return path;
}

/* --- TSV reference ------------------------------------------------------------------------ */

/* Checks every key of the TSV against the table; returns the number of keys read. */
static size_t check_tsv(const bt_param_table *t, const char *tsv_name) {
    FILE *f = fopen(tu_fixture_path(tsv_name), "r");
    if (!tu_check(f != NULL, "open %s", tsv_name)) return 0;
    char line[1024];
    size_t n = 0, missing = 0, bad_shape = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#' || line[0] == '\n') continue;
        char *key = strtok(line, "\t"), *shape = strtok(NULL, "\t"), *numel = strtok(NULL, "\t\n");
        if (!key || !shape || !numel) continue;
        n++;
        int64_t dims[8];
        int nd = 0;
        for (char *p = shape; *p && nd < 8;) {
            while (*p && (*p < '0' || *p > '9')) p++;
            if (!*p) break;
            dims[nd++] = strtoll(p, &p, 10);
        }
        const bt_param_tensor *x = bt_param_table_find(t, key);
        if (!x) {
            if (missing++ < 5) printf("# %s: key %s not in the table\n", tsv_name, key);
            continue;
        }
        int same = x->ndim == nd && (size_t)strtoull(numel, NULL, 10) == x->numel;
        for (int k = 0; same && k < nd; k++) same = x->shape[k] == dims[k];
        if (!same && bad_shape++ < 5) printf("# %s: key %s has another shape\n", tsv_name, key);
        /* the key spelling must be the table's exact checkpoint key */
        if (strcmp(x->key, key) != 0 && missing++ < 5)
            printf("# %s: key %s is spelled %s in the table\n", tsv_name, key, x->key);
    }
    fclose(f);
    tu_check(missing == 0, "%s: all %zu keys are tensors of the table (%zu missing)", tsv_name, n,
             missing);
    tu_check(bad_shape == 0, "%s: every shape equals the table's (%zu differ)", tsv_name,
             bad_shape);
    tu_check(n == t->n_tensors, "%s: %zu keys, table has %zu tensors (nothing extra)", tsv_name,
             n, t->n_tensors);
    return n;
}

/* HF Trainer: decay unless the parameter is a bias or belongs to a LayerNorm module. The
 * LayerNorm modules of BridgeTower are named LayerNorm, ln_pre/ln_post/ln_1/ln_2 and
 * cross_modal_{text,image}_layernorm. */
static int hf_rule_decays(const char *key) {
    size_t n = strlen(key);
    if (n >= 4 && strcmp(key + n - 4, "bias") == 0) return 0;
    if (strstr(key, ".LayerNorm.") || strstr(key, ".ln_pre.") || strstr(key, ".ln_post.") ||
        strstr(key, ".ln_1.") || strstr(key, ".ln_2.") || strstr(key, "_layernorm."))
        return 0;
    return 1;
}

typedef struct expected_counts {
    const char *config, *tsv;
    size_t backbone, itm, mlm, itc, backbone_tensors;
} expected_counts;

static void check_counts(const expected_counts *e) {
    bt_model_config c;
    const char *path = config_path(e->config);
    if (!tu_check(bt_model_config_load(&c, path) == BT_OK, "load %s: %s", path,
                  bt_error_message()))
        return;
    bt_param_table t;
    bt_param_table_init(&t, &c, BT_HEADS_ALL);
    size_t bb = bt_param_table_count_head(&t, BT_HEAD_BACKBONE);
    tu_check(bb == e->backbone, "%s: backbone has %zu parameters (expected %zu)", e->config, bb,
             e->backbone);
    size_t itm = bt_param_table_count_head(&t, BT_HEAD_ITM);
    size_t mlm = bt_param_table_count_head(&t, BT_HEAD_MLM);
    size_t itc = bt_param_table_count_head(&t, BT_HEAD_ITC);
    tu_check(itm == e->itm, "%s: ITM head %zu (expected %zu)", e->config, itm, e->itm);
    tu_check(mlm == e->mlm, "%s: MLM head %zu (expected %zu)", e->config, mlm, e->mlm);
    tu_check(itc == e->itc, "%s: ITC heads + logit_scale %zu (expected %zu)", e->config, itc,
             e->itc);
    tu_check(t.n_params == bb + itm + mlm + itc, "%s: total %zu = sum of the parts", e->config,
             t.n_params);
    size_t nbb = 0;
    for (size_t i = 0; i < t.n_tensors; i++) nbb += t.tensors[i].head == BT_HEAD_BACKBONE;
    tu_check(nbb == e->backbone_tensors, "%s: %zu backbone tensors (expected %zu)", e->config,
             nbb, e->backbone_tensors);
    check_tsv(&t, e->tsv);

    int rule_ok = 1;
    for (size_t i = 0; i < t.n_tensors; i++)
        if (t.tensors[i].decay != hf_rule_decays(t.tensors[i].key)) {
            rule_ok = 0;
            printf("# decay flag of %s differs from the HF Trainer rule\n", t.tensors[i].key);
        }
    tu_check(rule_ok, "%s: no-decay flags = biases + LayerNorm parameters (HF Trainer)",
             e->config);

    /* the layout: tensors in arena order, disjoint, inside the arena */
    int layout_ok = 1;
    for (size_t i = 0; i < t.n_tensors; i++) {
        const bt_param_tensor *x = &t.tensors[i];
        if (x->offset + x->numel > t.numel) layout_ok = 0;
        if (i && x->offset < t.tensors[i - 1].offset + t.tensors[i - 1].numel) layout_ok = 0;
    }
    tu_check(layout_ok && t.numel - t.n_params < 16 * BT_P_COUNT,
             "%s: tensors disjoint in one arena of %zu floats (%zu of padding)", e->config,
             t.numel, t.numel - t.n_params);

    /* backbone heads-only tables */
    bt_param_table t0;
    bt_param_table_init(&t0, &c, BT_HEADS_NONE);
    tu_check(t0.n_params == e->backbone, "%s: a table without heads holds the backbone only",
             e->config);
    bt_param_table_free(&t0);
    bt_param_table_free(&t);
}

static void check_lookup(void) {
    bt_model_config c;
    bt_model_config_default(&c);
    bt_param_table t;
    bt_param_table_init(&t, &c, BT_HEADS_ITM);
    const char *k = "bridgetower.text_model.encoder.layer.3.attention.self.query.weight";
    const bt_param_tensor *a = bt_param_table_find(&t, k);
    const bt_param_tensor *b = bt_param_table_find(&t, k + 12);
    tu_check(a && a == b && a->layer == 3 && a->id == BT_P_TL_Q_W,
             "backbone key found with and without the prefix");
    tu_check(a && a->offset == t.fields[BT_P_TL_Q_W].offset + 3 * t.fields[BT_P_TL_Q_W].numel,
             "layer 3 of a stacked field sits at offset + 3 * numel");
    tu_check(bt_param_table_find(&t, "itm_score.fc.weight") != NULL, "head key found bare");
    tu_check(bt_param_table_find(&t, "bridgetower.itm_score.fc.weight") == NULL,
             "head key with the backbone prefix is not a key");
    tu_check(bt_param_table_find(&t, "mlm_score.bias") == NULL, "head not built: not found");
    tu_check(bt_param_table_find(&t, "bridgetower.text_model.embeddings.position_ids") == NULL,
             "buffers are not parameters");
    tu_check(bt_param_table_find(&t, "bridgetower.cross_modal_text_link_tower.5.LayerNorm.weight")
                 == NULL && bt_param_table_find(&t, "bridgetower.cross_modal_text_link_tower.4."
                                                    "LayerNorm.weight") != NULL,
             "5 link towers per side (X - 1)");
    tu_check(!t.fields[BT_P_XT_LINK_SCALE].present && !t.fields[BT_P_XT_LINK_BETA].present,
             "no scaled_factor / beta for link_tower_type add");
    bt_param_table_free(&t);
}

/* --- init rules --------------------------------------------------------------------------- */

static void check_init(void) {
    bt_model_config c;
    const char *path = config_path("tiny");
    if (!tu_check(bt_model_config_load(&c, path) == BT_OK, "load %s: %s", path,
                  bt_error_message()))
        return;
    c.link_tower_type = BT_LINK_INTERPOLATE;
    bt_param_table t, t_itc;
    bt_param_table_init(&t, &c, BT_HEADS_ALL);
    bt_param_table_init(&t_itc, &c, BT_HEADS_ITC);
    float *a = calloc(t.numel, sizeof *a), *b = calloc(t.numel, sizeof *b);
    float *d = calloc(t_itc.numel, sizeof *d);
    bt_params_init(&t, a, 42);
    bt_params_init(&t, b, 42);
    tu_check(memcmp(a, b, t.numel * sizeof *a) == 0, "init is deterministic for a seed");
    bt_params_init(&t, b, 43);
    tu_check(memcmp(a, b, t.numel * sizeof *a) != 0, "another seed gives other weights");
    bt_params_init(&t_itc, d, 42);
    int same = 1;
    for (size_t i = 0; i < t_itc.n_tensors; i++) {
        const bt_param_tensor *x = &t_itc.tensors[i];
        const bt_param_tensor *y = bt_param_table_find(&t, x->key);
        same &= y && memcmp(d + x->offset, a + y->offset, x->numel * sizeof *d) == 0;
    }
    tu_check(same, "a tensor's init does not depend on which heads are built");
    bt_param_views v;
    bt_param_views_bind(&v, &t_itc, d);
    tu_check(v.mlm_dec_w == NULL && v.itm_w == NULL && v.logit_scale != NULL &&
                 v.text_word_emb == d + t_itc.fields[BT_P_TEXT_WORD_EMB].offset &&
                 v.xt_link_beta == d + t_itc.fields[BT_P_XT_LINK_BETA].offset,
             "named views point into the arena, NULL for heads not built");

    const double f = c.initializer_factor, W = c.vision_hidden, Lv = c.vision_layers;
    int consts_ok = 1, std_ok = 1, n_normal = 0;
    for (size_t i = 0; i < t.n_tensors; i++) {
        const bt_param_tensor *x = &t.tensors[i];
        const float *p = a + x->offset;
        double want = -1;
        switch (x->init) {
        case BT_INIT_ZEROS: want = 0; break;
        case BT_INIT_ONES: want = 1; break;
        case BT_INIT_HALF: want = 0.5; break;
        case BT_INIT_LOGIT_SCALE: want = (float)c.logit_scale_init; break;
        default: break;
        }
        if (want >= 0) {
            for (size_t e = 0; e < x->numel; e++) consts_ok &= p[e] == (float)want;
            continue;
        }
        double std = x->init == BT_INIT_NORMAL      ? 0.05 * f
                     : x->init == BT_INIT_CLIP_ATTN ? pow(W, -0.5) * f
                     : x->init == BT_INIT_CLIP_PROJ ? pow(W, -0.5) * pow(2 * Lv, -0.5) * f
                                                    : pow(2 * W, -0.5) * f;
        if (x->numel < 256) continue; /* too few samples for a useful std check */
        double s2 = 0, mean = 0;
        for (size_t e = 0; e < x->numel; e++) {
            mean += p[e];
            s2 += (double)p[e] * p[e];
        }
        mean /= x->numel;
        double sd = sqrt(s2 / x->numel);
        /* the sample std of n normals has standard error ~ std / sqrt(2n); 5 of them */
        double se = std / sqrt(2.0 * x->numel);
        n_normal++;
        if (fabs(sd - std) > 5 * se || fabs(mean) > 5 * std / sqrt((double)x->numel)) {
            std_ok = 0;
            printf("# %s: sample std %.5f mean %.5f, rule std %.5f\n", x->key, sd, mean, std);
        }
    }
    tu_check(consts_ok, "zeros / ones / 0.5 / logit_scale_init tensors are exact");
    tu_check(std_ok && n_normal > 20, "%d normal tensors match their rule's std (5 s.e.)",
             n_normal);
    const bt_param_tensor *ls = bt_param_table_find(&t, "logit_scale");
    tu_check(ls && a[ls->offset] == 2.6592f, "logit_scale = 2.6592");
    free(a);
    free(b);
    free(d);
    bt_param_table_free(&t);
    bt_param_table_free(&t_itc);
}

/* --- config errors ------------------------------------------------------------------------- */

typedef struct bad_config {
    const char *what, *json, *must_name;
} bad_config;

static void check_config_errors(void) {
    static const bad_config cases[] = {
        {"share_link_tower_layers true", "{\"share_link_tower_layers\": true}",
         "share_link_tower_layers"},
        {"share_cross_modal_transformer_layers false",
         "{\"share_cross_modal_transformer_layers\": false}",
         "share_cross_modal_transformer_layers"},
        {"vision layers != text layers", "{\"vision_config\": {\"num_hidden_layers\": 11}}",
         "vision_config.num_hidden_layers"},
        {"text hidden != top hidden",
         "{\"text_config\": {\"hidden_size\": 1024, \"num_attention_heads\": 16}}",
         "differs from 'text_config.hidden_size' (1024)"},
        {"unknown link_tower_type", "{\"link_tower_type\": \"concat\"}", "link_tower_type"},
        {"hidden not divisible by heads",
         "{\"text_config\": {\"num_attention_heads\": 7}, \"num_attention_heads\": 12}",
         "text_config.num_attention_heads"},
        {"wrong type", "{\"hidden_size\": \"768\"}", "hidden_size"},
        {"non-integer", "{\"text_config\": {\"vocab_size\": 3.5}}", "text_config.vocab_size"},
        {"tied decoder", "{\"tie_word_embeddings\": true}", "tie_word_embeddings"},
        {"image not a multiple of the patch", "{\"vision_config\": {\"image_size\": 300}}",
         "vision_config.image_size"},
        {"vision width not a multiple of 64", "{\"vision_config\": {\"hidden_size\": 100}}",
         "vision_config.hidden_size"},
        {"other activation", "{\"text_config\": {\"hidden_act\": \"relu\"}}",
         "text_config.hidden_act"},
        {"more cross layers than text layers", "{\"num_hidden_layers\": 13}",
         "num_hidden_layers"},
        {"text_config not an object", "{\"text_config\": 3}", "text_config"},
        /* pad 1 leaves one position: no room for <s> and </s> (found by fuzz_config) */
        {"positions for one token", "{\"text_config\": {\"max_position_embeddings\": 3}}",
         "at least <s> and </s>"},
        {"not JSON", "{\"hidden_size\": ", "not valid JSON"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        bt_model_config c;
        bt_status s = bt_model_config_parse(&c, cases[i].json, "cfg-test.json");
        const char *msg = bt_error_message();
        tu_check(s != BT_OK && strstr(msg, "cfg-test.json") && strstr(msg, cases[i].must_name),
                 "config error (%s): \"%s\"", cases[i].what, msg);
    }
    bt_model_config c;
    tu_check(bt_model_config_load(&c, "/nonexistent/config.json") == BT_ERR_IO &&
                 strstr(bt_error_message(), "/nonexistent/config.json"),
             "missing config file: \"%s\"", bt_error_message());
    /* HF extras and unknown generic keys are ignored; defaults fill absent keys */
    bt_status s = bt_model_config_parse(&c, "{\"drop_rate\": 0.1, \"torch_dtype\": \"float32\", "
                                            "\"max_text_len\": 50, \"text_config\": null}",
                                        "extras.json");
    tu_check(s == BT_OK && c.text_hidden == 768 && c.split == 7 && c.np == 325 &&
                 c.vision_heads == 12 && c.text_head_size == 64,
             "extras ignored, HF defaults, derived S = 7, Np = 325");
}

/* --- a tiny model runs on random input ---------------------------------------------------- */

static void random_batch(tu_rng *r, const bt_model_config *c, size_t B, size_t T, int32_t *ids,
                         int32_t *mask, int32_t *itm, int32_t *mlm, float *pix) {
    for (size_t b = 0; b < B; b++) {
        size_t len = T - (b * 3) % (T / 2); /* some rows padded */
        for (size_t t = 0; t < T; t++) {
            size_t i = b * T + t;
            int real = t < len;
            ids[i] = !real ? c->pad_token_id
                     : t == 0 ? 0
                     : t == len - 1 ? 2
                                    : 3 + (int32_t)(tu_rng_next(r) % (uint64_t)(c->vocab_size - 3));
            mask[i] = real;
            mlm[i] = real && t % 5 == 2 ? ids[i] : -100;
        }
        itm[b] = (int32_t)(b % 2);
    }
    size_t np = B * 3 * (size_t)c->image_size * (size_t)c->image_size;
    for (size_t i = 0; i < np; i++) pix[i] = (float)tu_rng_normal(r);
}

/* Forward + backward of all losses; returns the seconds taken, checks finiteness. */
static double run_step(const char *label, bt_model *m, size_t B, size_t T, int training) {
    const bt_model_config *c = &m->cfg;
    tu_rng r;
    tu_rng_seed(&r, 7);
    int32_t *ids = malloc(B * T * 4), *mask = malloc(B * T * 4), *mlm = malloc(B * T * 4);
    int32_t *itm = malloc(B * 4);
    float *pix = malloc(B * 3 * (size_t)c->image_size * (size_t)c->image_size * 4);
    random_batch(&r, c, B, T, ids, mask, itm, mlm, pix);
    bt_batch b = {B, T, ids, mask, pix, itm, mlm};
    bt_model_set_dropout(m, training, 1234, 0);
    struct timespec t0, t1, t2;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    bt_status s = bt_forward(m, &b);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    const bt_loss_weights w = {1, 1, 1};
    bt_zero_grad(m);
    if (s == BT_OK) bt_backward(m, &w);
    clock_gettime(CLOCK_MONOTONIC, &t2);
    double fwd = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    double bwd = (double)(t2.tv_sec - t1.tv_sec) + 1e-9 * (double)(t2.tv_nsec - t1.tv_nsec);
    double gn = bt_grad_norm(m->grads, m->table.numel);
    tu_check(s == BT_OK && isfinite(m->loss_itc) && isfinite(m->loss_itm) &&
                 isfinite(m->loss_mlm) && m->loss_mlm > 0 && isfinite(gn) && gn > 0,
             "%s: B=%zu T=%zu losses itc %.4f itm %.4f mlm %.4f (ln V = %.4f), grad norm %.4g, "
             "forward %.2f s, backward %.2f s", label, B, T, m->loss_itc, m->loss_itm,
             m->loss_mlm, log((double)c->vocab_size), gn, fwd, bwd);
    free(ids);
    free(mask);
    free(mlm);
    free(itm);
    free(pix);
    return fwd + bwd;
}

static void check_tiny_runs(void) {
    bt_model_config c;
    if (bt_model_config_load(&c, config_path("tiny")) != BT_OK) return;
    for (int prec = 0; prec < 2; prec++) {
        bt_model m;
        bt_model_init(&m, &c, BT_HEADS_ALL, prec ? BT_PRECISION_BF16 : BT_PRECISION_FP32);
        bt_model_init_params(&m, 5);
        run_step(prec ? "tiny bf16, dropout on" : "tiny fp32, dropout on", &m, 4, 16, 1);
        /* the batch shape may change between steps (arenas re-sized) */
        run_step(prec ? "tiny bf16, eval" : "tiny fp32, eval", &m, 2, 9, 0);
        bt_model_free(&m);
    }
    /* bad batches are errors, not crashes */
    bt_model m;
    bt_model_init(&m, &c, BT_HEADS_ITM, BT_PRECISION_FP32);
    int32_t ids[4] = {0, 5, 2, 1}, mask[4] = {1, 1, 1, 3};
    float pix[3 * 32 * 32] = {0};
    bt_batch b = {1, 4, ids, mask, pix, NULL, NULL};
    bt_status s = bt_forward(&m, &b);
    tu_check(s == BT_ERR_ARG && strstr(bt_error_message(), "attention_mask[0][3]"),
             "bad mask value: \"%s\"", bt_error_message());
    ids[1] = c.vocab_size;
    mask[3] = 0;
    s = bt_forward(&m, &b);
    tu_check(s == BT_ERR_ARG && strstr(bt_error_message(), "input_ids[0][1]"),
             "token id out of range: \"%s\"", bt_error_message());
    b.T = (size_t)c.max_position_embeddings;
    s = bt_forward(&m, &b);
    tu_check(s == BT_ERR_SHAPE && strstr(bt_error_message(), "position"),
             "text too long: \"%s\"", bt_error_message());
    bt_model_free(&m);
}

/* Two steps per precision: the first includes first-touch page faults of the arenas and
 * oneDNN primitive creation, the second is the warm step. */
static void base_step(void) {
    bt_model_config c;
    const char *path = config_path("bridgetower-base");
    if (!tu_check(bt_model_config_load(&c, path) == BT_OK, "load %s: %s", path,
                  bt_error_message()))
        return;
    printf("# gemm backend %s, CPU ISA %s, native bf16 %d\n", gemm_backend_name(gemm_get_backend()),
           gemm_cpu_isa_name(), gemm_cpu_has_bf16());
    for (int prec = 0; prec < 2; prec++) {
        bt_model m;
        bt_model_init(&m, &c, BT_HEADS_ALL, prec ? BT_PRECISION_BF16 : BT_PRECISION_FP32);
        bt_model_init_params(&m, 1);
        const char *name = prec ? "bridgetower-base bf16" : "bridgetower-base fp32";
        char label[96];
        snprintf(label, sizeof label, "%s forward+backward, first step", name);
        run_step(label, &m, 2, 40, 0);
        snprintf(label, sizeof label, "%s forward+backward, second step", name);
        run_step(label, &m, 2, 40, 0);
        printf("# activation arena %.1f MB, gradient arena %.1f MB, parameters %.1f MB (and as "
               "much for the gradients)\n", m.act_numel * 4e-6, m.dact_numel * 4e-6,
               m.table.numel * 4e-6);
        bt_model_free(&m);
    }
}

int main(int argc, char **argv) {
    gemm_init_from_env();
    if (argc > 1 && strcmp(argv[1], "--base-step") == 0) {
        base_step();
        gemm_release();
        return tu_finish();
    }
    static const expected_counts base = {"bridgetower-base", "model_keys_base.tsv", 326347008,
                                         3074, 39245913, 1574401, 695};
    static const expected_counts large = {"bridgetower-large-itm-mlm-itc", "model_keys_large.tsv",
                                          864514048, 4098, 52573273, 2098689, 1031};
    check_counts(&base);
    check_counts(&large);
    check_lookup();
    check_init();
    check_config_errors();
    check_tiny_runs();
    gemm_release();
    return tu_finish();
}
