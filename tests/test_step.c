/* test_step.c: properties of bt_train_step (src/train/step.h) on the tiny fixture model with
 * everything random switched on (hard-negative sampler, MLM masker, dropout, duplicate-aware
 * ITC), beside the twin parity of test_step_parity.c:
 *   1. determinism: two trainers from the same weights and seed, same thread count, 3 steps
 *      of 2 micro-batches: the same loss bits every step and the same weight bits at the end;
 *      dropout on differs from dropout off (it is really on); another seed differs;
 *   2. duplicates: in a batch whose rows 0 and 2 hold the same picture (no keys given: the
 *      step hashes the pixels), text 0's and text 2's negative image is always row 1, over 5
 *      steps (the only non-duplicate);
 *   3. NaN policy: a NaN pixel makes loss_itc NaN; skip: result.skipped, the message names
 *      the term, weights and moments keep their bits, the schedule position (opt.t) does not
 *      move (the next update runs at schedule position 0), later steps update; stop: BT_ERR_NUMERIC naming the step number, the
 *      weights keep their bits;
 *   4. parameter groups: freeze_vision leaves every vision_model.* weight bit-identical,
 *      gives its tensors no moments and still trains the rest; lr_mult_heads = 0 leaves the
 *      head weights bit-identical (lr 0: no step, no decay) while the backbone moves;
 *   5. errors: a nonzero weight for a head the model lacks, all weights 0, ITM with one pair
 *      (message names the micro-batch), NULL pixels;
 *   6. bt_step_batch_from_loader maps a loader batch (size, not capacity; the delivered
 *      record) and refuses bf16 pixels;
 *   7. bf16 precision: the same first step in BT_PRECISION_BF16 runs, gives a finite loss
 *      within 5e-3 (relative) of the fp32 one (bf16 GEMM operands carry 8 bits, ~4e-3
 *      relative per product, but the loss averages many of them: measured 5e-4), and the
 *      second step's loss is finite. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/config.h"
#include "data/loader.h"
#include "model/model.h"
#include "train/step.h"
#include "test_util.h"

enum { B = 4, T = 10, ACCUM = 2 };

static bt_model_config g_cfg;
static char g_weights[512];

static int load_model(bt_model *m, unsigned heads) {
    bt_model_init(m, &g_cfg, heads, BT_PRECISION_FP32);
    if (heads != BT_HEADS_ALL) { /* a head subset: draw instead of loading */
        bt_model_init_params(m, 7);
        return 1;
    }
    return tu_check(bt_model_load_safetensors(m, g_weights) == BT_OK, "load %s: %s", g_weights,
                    bt_error_message());
}

/* micro-batch data: ids, mask, pixels, records */
typedef struct micro {
    int32_t ids[B * T], mask[B * T];
    int64_t record[B];
    float *pix;
} micro;

static void make_micro(micro *mb, size_t R, uint64_t seed) {
    tu_rng r;
    tu_rng_seed(&r, seed);
    for (int b = 0; b < B; b++) {
        const int len = 5 + (int)(tu_rng_next(&r) % (T - 4));
        for (int t = 0; t < T; t++) {
            int32_t id = 1;
            if (t == 0) id = 0;
            else if (t == len - 1) id = 2;
            else if (t < len - 1) id = 3 + (int32_t)(tu_rng_next(&r) % 94);
            mb->ids[b * T + t] = id;
            mb->mask[b * T + t] = t < len;
        }
        mb->record[b] = (int64_t)(seed * 16 + (uint64_t)b);
    }
    mb->pix = malloc(B * 3 * R * R * sizeof *mb->pix);
    for (size_t i = 0; i < B * 3 * R * R; i++) mb->pix[i] = (float)tu_rng_normal(&r);
}

static bt_step_batch as_batch(const micro *mb) {
    return (bt_step_batch){.B = B, .T = T, .input_ids = mb->ids, .attention_mask = mb->mask,
                           .pixel_values = mb->pix, .record = mb->record};
}

static bt_step_config base_config(void) {
    bt_step_config sc = bt_step_config_default();
    sc.mlm = (bt_mlm_spec){0.3, 98, g_cfg.vocab_size, {0, 1, 2}, 3};
    bt_schedule_init(&sc.schedule, "linear", 1e-3, 10, 1, 0.0);
    sc.itc_duplicate_aware = 1;
    sc.seed = 1234;
    sc.groups.lr_mult_cross = 5.0;
    sc.groups.lr_mult_heads = 5.0;
    return sc;
}

/* Runs `steps` steps; losses[s] = result loss. Returns 0 on a failed step. */
static int run_steps(bt_model *m, const bt_step_config *sc, micro *data, int steps,
                     double *losses) {
    bt_trainer tr;
    if (!tu_check(bt_trainer_init(&tr, m, sc) == BT_OK, "trainer init: %s", bt_error_message()))
        return 0;
    int ok = 1;
    for (int s = 0; s < steps && ok; s++) {
        bt_step_batch mb[ACCUM] = {as_batch(&data[2 * s]), as_batch(&data[2 * s + 1])};
        bt_step_result r;
        ok = bt_train_step(&tr, mb, ACCUM, &r) == BT_OK && !r.skipped && isfinite(r.loss);
        if (!ok) printf("# step %d failed: %s %s\n", s, bt_error_message(), r.nonfinite);
        losses[s] = r.loss;
    }
    bt_trainer_free(&tr);
    return ok;
}

static void test_determinism(micro *data) {
    enum { STEPS = 3 };
    bt_model a, b, c;
    if (!load_model(&a, BT_HEADS_ALL) || !load_model(&b, BT_HEADS_ALL) ||
        !load_model(&c, BT_HEADS_ALL))
        return;
    double la[STEPS], lb[STEPS], lc[STEPS];
    bt_step_config sc = base_config();
    int ok = run_steps(&a, &sc, data, STEPS, la) && run_steps(&b, &sc, data, STEPS, lb);
    tu_check(ok, "3 steps with sampler, masker, dropout and duplicate-aware ITC run");
    tu_check(memcmp(la, lb, sizeof la) == 0, "same seed: the same loss bits every step "
             "(%.9f %.9f %.9f)", la[0], la[1], la[2]);
    tu_check_bytes_equal("same seed: the same weight bits after 3 steps", a.params, b.params,
                         a.table.numel * sizeof(float));
    sc.dropout = 0;
    run_steps(&c, &sc, data, 1, lc);
    tu_check(lc[0] != la[0], "dropout on changes the loss (%.7f on vs %.7f off)", la[0], lc[0]);
    bt_model_free(&c);
    load_model(&c, BT_HEADS_ALL);
    sc = base_config();
    sc.seed = 99;
    run_steps(&c, &sc, data, 1, lc);
    tu_check(lc[0] != la[0], "another seed, another loss (%.7f vs %.7f)", lc[0], la[0]);
    bt_model_free(&a);
    bt_model_free(&b);
    bt_model_free(&c);
}

static void test_duplicates(micro *data, size_t R) {
    bt_model m;
    if (!load_model(&m, BT_HEADS_ALL)) return;
    micro d = data[0];
    float *pix = malloc(B * 3 * R * R * sizeof *pix);
    memcpy(pix, d.pix, B * 3 * R * R * sizeof *pix);
    memcpy(pix + 2 * 3 * R * R, pix, 3 * R * R * sizeof *pix); /* row 2 = row 0's picture */
    memcpy(pix + 3 * 3 * R * R, pix, 3 * R * R * sizeof *pix); /* row 3 too */
    d.pix = pix;
    bt_step_config sc = base_config();
    bt_trainer tr;
    int ok = bt_trainer_init(&tr, &m, &sc) == BT_OK;
    for (int s = 0; s < 5 && ok; s++) {
        bt_step_batch mb = as_batch(&d);
        bt_step_result r;
        ok = bt_train_step(&tr, &mb, 1, &r) == BT_OK;
        ok &= tr.neg_image[0] == 1 && tr.neg_image[2] == 1 && tr.neg_image[3] == 1;
        ok &= tr.neg_text[0] == 1 && tr.neg_text[2] == 1 && tr.neg_text[3] == 1;
        ok &= tr.neg_image[1] != 1 && tr.neg_text[1] != 1;
    }
    tu_check(ok, "pixel-hash duplicates: rows 0, 2, 3 share a picture, their negatives are "
             "always row 1 (5 steps)");
    bt_trainer_free(&tr);
    free(pix);
    bt_model_free(&m);
}

static void test_nan(micro *data, size_t R) {
    bt_model m;
    if (!load_model(&m, BT_HEADS_ALL)) return;
    float *p0 = malloc(m.table.numel * sizeof *p0);
    memcpy(p0, m.params, m.table.numel * sizeof *p0);
    micro bad = data[0];
    float *pix = malloc(B * 3 * R * R * sizeof *pix);
    memcpy(pix, bad.pix, B * 3 * R * R * sizeof *pix);
    pix[5] = NAN;
    bad.pix = pix;
    bt_step_config sc = base_config();
    bt_trainer tr;
    bt_trainer_init(&tr, &m, &sc);
    bt_step_batch mb[2] = {as_batch(&data[1]), as_batch(&bad)};
    bt_step_result r;
    bt_status st = bt_train_step(&tr, mb, 2, &r);
    tu_check(st == BT_OK && r.skipped && strstr(r.nonfinite, "loss_itc is NaN") &&
                 strstr(r.nonfinite, "micro-batch 1"),
             "skip: a NaN pixel -> step skipped, reported as \"%s\"", r.nonfinite);
    tu_check_bytes_equal("skip: weights keep their bits", m.params, p0,
                         m.table.numel * sizeof(float));
    int zero = tr.opt.t == 0 && tr.step == 1 && tr.n_skipped == 1;
    for (size_t i = 0; i < tr.opt.mnumel; i++) zero &= tr.opt.m[i] == 0.0f && tr.opt.v[i] == 0.0f;
    tu_check(zero, "skip: moments untouched, schedule position 0, step counter 1");
    /* the schedule held its position: the first applied update still runs at the warmup's
     * lr 0 (HF does not step LambdaLR for a skipped update); the one after moves weights */
    mb[1] = as_batch(&data[2]);
    st = bt_train_step(&tr, mb, 2, &r);
    const int first = st == BT_OK && !r.skipped && tr.opt.t == 1 && r.lr == 0.0;
    st = bt_train_step(&tr, mb, 2, &r);
    tu_check(first && st == BT_OK && !r.skipped && tr.opt.t == 2 && r.lr > 0.0 &&
                 memcmp(m.params, p0, m.table.numel * sizeof(float)) != 0,
             "skip: the next clean steps update at schedule positions 0 and 1 (lr %g)", r.lr);
    bt_trainer_free(&tr);
    bt_model_free(&m);

    load_model(&m, BT_HEADS_ALL);
    sc.nan_policy = BT_NAN_STOP;
    bt_trainer_init(&tr, &m, &sc);
    mb[0] = as_batch(&data[0]);
    mb[1] = as_batch(&data[1]);
    st = bt_train_step(&tr, mb, 2, &r); /* step 1 clean (steps are named from 1, HF global_step) */
    memcpy(p0, m.params, m.table.numel * sizeof *p0);
    mb[1] = as_batch(&bad);
    st = bt_train_step(&tr, mb, 2, &r);
    tu_check(st == BT_ERR_NUMERIC && strstr(bt_error_message(), "step 2:") &&
                 strstr(bt_error_message(), "NaN"),
             "stop: BT_ERR_NUMERIC naming the step: %s", bt_error_message());
    tu_check_bytes_equal("stop: weights are those before the step", m.params, p0,
                         m.table.numel * sizeof(float));
    bt_error_clear();
    bt_trainer_free(&tr);
    bt_model_free(&m);
    free(pix);
    free(p0);
}

static int tensor_equal(const bt_model *m, const float *p0, int heads_only,
                        int *changed_other) {
    int same = 1;
    *changed_other = 0;
    for (size_t i = 0; i < m->table.n_tensors; i++) {
        const bt_param_tensor *x = &m->table.tensors[i];
        const int sel = heads_only ? x->head != BT_HEAD_BACKBONE
                                   : strncmp(x->bare_key, "vision_model.", 13) == 0;
        const int eq = memcmp(m->params + x->offset, p0 + x->offset,
                              x->numel * sizeof(float)) == 0;
        if (sel) same &= eq;
        else if (!eq) *changed_other = 1;
    }
    return same;
}

static void test_groups(micro *data) {
    bt_model m;
    if (!load_model(&m, BT_HEADS_ALL)) return;
    float *p0 = malloc(m.table.numel * sizeof *p0);
    memcpy(p0, m.params, m.table.numel * sizeof *p0);
    bt_step_config sc = base_config();
    sc.groups.freeze_vision = 1;
    double l[2];
    run_steps(&m, &sc, data, 2, l);
    int other = 0;
    tu_check(tensor_equal(&m, p0, 0, &other) && other,
             "freeze_vision: vision_model.* bit-identical after 2 steps, the rest trained");
    bt_adamw o;
    bt_adamw_init_groups(&o, &m.table, &sc.groups);
    const bt_param_tensor *vt = bt_param_table_find(&m.table, "vision_model.visual.ln_post.weight");
    const bt_param_tensor *tt = bt_param_table_find(&m.table, "text_model.embeddings.LayerNorm.weight");
    float *mm, *vv;
    tu_check(vt && tt && !bt_adamw_moments(&o, vt->offset, &mm, &vv) &&
                 bt_adamw_moments(&o, tt->offset, &mm, &vv) && o.mnumel < m.table.numel,
             "freeze_vision: no moments for vision tensors (%zu of %zu elements have moments)",
             o.mnumel, m.table.numel);
    /* the norm the NaN policy reads: a NaN gradient of a trained tensor makes it NaN, one of
     * a frozen tensor is not part of it (torch leaves requires_grad=False out) */
    float *g = calloc(m.table.numel, sizeof *g);
    g[tt->offset] = 3.0f;
    g[vt->offset] = NAN;
    const double n1 = bt_adamw_grad_norm(&o, g);
    g[tt->offset + 1] = INFINITY;
    const double n2 = bt_adamw_grad_norm(&o, g);
    tu_check(n1 == 3.0 && isinf(n2), "grad norm: frozen NaN ignored (%g), trained Inf seen (%g)",
             n1, n2);
    free(g);
    /* no loss reaches text_model.pooler: torch gives it no .grad and AdamW (weight decay
     * included) skips it, so it must stay bit-identical (base_config has weight decay) */
    const bt_param_tensor *pt = bt_param_table_find(&m.table, "text_model.pooler.dense.weight");
    tu_check(pt && sc.adamw.weight_decay > 0 &&
                 !memcmp(m.params + pt->offset, p0 + pt->offset, pt->numel * sizeof(float)) &&
                 !bt_adamw_moments(&o, pt->offset, &mm, &vv),
             "text_model.pooler: never updated, no moments (as torch: no gradient reaches it)");
    bt_adamw_free(&o);
    bt_model_free(&m);

    load_model(&m, BT_HEADS_ALL);
    sc = base_config();
    sc.groups.lr_mult_heads = 0.0;
    run_steps(&m, &sc, data, 2, l);
    tu_check(tensor_equal(&m, p0, 1, &other) && other,
             "lr_mult_heads 0: head weights bit-identical, the backbone trained");
    bt_model_free(&m);
    free(p0);
}

static void test_errors(micro *data) {
    bt_model m;
    bt_model_init(&m, &g_cfg, BT_HEADS_ITC | BT_HEADS_ITM, BT_PRECISION_FP32);
    bt_model_init_params(&m, 3);
    bt_step_config sc = base_config();
    bt_trainer tr;
    tu_check(bt_trainer_init(&tr, &m, &sc) == BT_ERR_CONFIG &&
                 strstr(bt_error_message(), "no mlm head"),
             "MLM weight without an MLM head: %s", bt_error_message());
    sc.w_itc = sc.w_itm = sc.w_mlm = 0;
    tu_check(bt_trainer_init(&tr, &m, &sc) == BT_ERR_CONFIG &&
                 strstr(bt_error_message(), "every loss weight is 0"),
             "all weights 0: %s", bt_error_message());
    sc = base_config();
    sc.w_mlm = 0;
    if (tu_check(bt_trainer_init(&tr, &m, &sc) == BT_OK, "ITC + ITM trainer")) {
        bt_step_batch one = as_batch(&data[0]);
        one.B = 1;
        bt_step_batch mb[2] = {as_batch(&data[1]), one};
        bt_step_result r;
        tu_check(bt_train_step(&tr, mb, 2, &r) == BT_ERR_ARG &&
                     strstr(bt_error_message(), "micro-batch 1") &&
                     strstr(bt_error_message(), "at least 2"),
                 "ITM on one pair: %s", bt_error_message());
        mb[1] = as_batch(&data[0]);
        mb[1].pixel_values = NULL;
        tu_check(bt_train_step(&tr, mb, 2, &r) == BT_ERR_ARG &&
                     strstr(bt_error_message(), "pixel_values"),
                 "NULL pixels: %s", bt_error_message());
        bt_trainer_free(&tr);
    }
    bt_model_free(&m);
}

static void test_loader_batch(micro *data) {
    loader_batch lb;
    memset(&lb, 0, sizeof lb);
    lb.seq = 7;
    lb.size = 3;
    lb.capacity = B;
    lb.max_length = T;
    lb.pixel_dtype = BT_DTYPE_F32;
    lb.pixel_values = data[0].pix;
    lb.input_ids = data[0].ids;
    lb.attention_mask = data[0].mask;
    lb.record = data[0].record;
    bt_step_batch sb;
    tu_check(bt_step_batch_from_loader(&sb, &lb) == BT_OK && sb.B == 3 && sb.T == T &&
                 sb.input_ids == data[0].ids && sb.attention_mask == data[0].mask &&
                 sb.pixel_values == data[0].pix && sb.record == data[0].record &&
                 !sb.image_key && !sb.caption_key && !sb.neg_image && !sb.mlm_labels,
             "loader batch -> step batch: B = size, T, ids, mask, pixels, records");
    lb.pixel_dtype = BT_DTYPE_BF16;
    tu_check(bt_step_batch_from_loader(&sb, &lb) == BT_ERR_ARG &&
                 strstr(bt_error_message(), "fp32 pixels") &&
                 strstr(bt_error_message(), "batch 7"),
             "bf16 loader pixels: %s", bt_error_message());
    bt_error_clear();
}

static void test_bf16(micro *data) {
    bt_model a, b;
    if (!load_model(&a, BT_HEADS_ALL)) return;
    bt_model_init(&b, &g_cfg, BT_HEADS_ALL, BT_PRECISION_BF16);
    if (!tu_check(bt_model_load_safetensors(&b, g_weights) == BT_OK, "load bf16: %s",
                  bt_error_message())) {
        bt_model_free(&a);
        bt_model_free(&b);
        return;
    }
    bt_step_config sc = base_config();
    sc.dropout = 0;
    double la[2] = {NAN, NAN}, lb[2] = {NAN, NAN};
    const int ok = run_steps(&a, &sc, data, 1, la) && run_steps(&b, &sc, data, 2, lb);
    tu_check(ok && fabs(lb[0] - la[0]) <= 5e-3 * fabs(la[0]) && isfinite(lb[1]),
             "bf16 step: loss %.5f vs fp32 %.5f (rel %.2e <= 5e-3), next step %.5f", lb[0],
             la[0], fabs(lb[0] - la[0]) / fabs(la[0]), lb[1]);
    bt_model_free(&a);
    bt_model_free(&b);
}

int main(void) {
    gemm_init_from_env();
    char cpath[512];
    snprintf(cpath, sizeof cpath, "%s", tu_fixture_path("tiny/config.json"));
    snprintf(g_weights, sizeof g_weights, "%s", tu_fixture_path("tiny/model.safetensors"));
    if (!tu_check(bt_model_config_load(&g_cfg, cpath) == BT_OK, "load %s: %s", cpath,
                  bt_error_message()))
        return tu_finish();
    const size_t R = (size_t)g_cfg.image_size;
    micro data[6];
    for (int i = 0; i < 6; i++) make_micro(&data[i], R, 100 + (uint64_t)i);
    test_determinism(data);
    test_duplicates(data, R);
    test_nan(data, R);
    test_groups(data);
    test_errors(data);
    test_loader_batch(data);
    test_bf16(data);
    for (int i = 0; i < 6; i++) free(data[i].pix);
    gemm_release();
    return tu_finish();
}
