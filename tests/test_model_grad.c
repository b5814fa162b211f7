/* test_model_grad.c: finite differences through one whole tiny BridgeTower forward/backward
 * (fp32), independent of any fixture: for each loss L (ITC, ITM, MLM) and a direction v,
 *     fd = (L(θ + εv) - L(θ - εv)) / 2ε     vs     an = g·v   (g from bt_backward).
 * Directions: all parameters at once (a random v over the whole arena), then one tensor at a
 * time for a selection from every tower (text, vision, bridges, cross layers, poolers, heads),
 * the same in training mode (dropout on, masks fixed by their seeds), and the link-tower
 * scalars of the scaled_add / interpolate variants (text tower 0, image tower 1).
 *
 * The harness (directions, perturbation, tolerance) is test_model_fd.h, shared with
 * test_model_phases.c. Scales: v_i = z_i · rms(tensor of i) with z ~ N(0, 1), so every tensor
 * moves by the same relative amount ε. Biases and LayerNorm parameters are first moved off their init values
 * (0 and 1) by N(0, 0.05²) so that zero-init parameters cannot hide a missing term.
 * ε = 2.5e-3 (a quarter percent of each weight's scale). The central difference's error is
 * truncation O(ε²) plus rounding noise of the fp32 losses divided by 2ε. Measured on the
 * all-parameter directions (FD_EPS=<ε> in the environment overrides ε): the worst |fd - an|
 * goes 4.1e-4, 1.1e-4, 2.5e-5, 1.2e-5 for ε = 2e-2, 1e-2, 5e-3, 2.5e-3 (ITM, |an| = 6e-3;
 * MLM: 1.8e-3, 4.7e-4, 1.1e-4, 1e-5), i.e. ε² scaling down to a noise floor ~1e-5. Accept
 *     |fd - an| <= 1e-2·|an| + 1e-4·max(1, |L|)
 * (about 10x the measured worst). A wrong backward (a missed term, a wrong factor, a wrong
 * index) is O(1) off; the absolute part only matters for directions the loss barely
 * depends on. Directions a loss does not depend on at all give fd = an = 0 exactly.
 *
 * Deliberately not here: pixel-value gradients (not computed), per-op FD in double
 * (tests/test_ops_grad.c), comparison with PyTorch (test_model_parity.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/config.h"
#include "model/model.h"
#include "model/params.h"
#include "test_model_fd.h"
#include "test_util.h"

enum { B = 3, T = 10 };

typedef struct fd_case {
    bt_model m;
    int32_t ids[B * T], mask[B * T], itm[B], mlm[B * T];
    float *pix;
    bt_batch batch;
    float *grads[3]; /* (numel) gradient of ITC, ITM, MLM */
    double l0[3];    /* the losses at θ */
} fd_case;

static const char *loss_names[3] = {"itc", "itm", "mlm"};

static void losses(bt_model *m, void *ctx, double *out) {
    const bt_batch *b = ctx;
    bt_status s = bt_forward(m, b);
    BT_ASSERT(s == BT_OK);
    out[0] = m->loss_itc;
    out[1] = m->loss_itm;
    out[2] = m->loss_mlm;
}

static int case_init(fd_case *fc, bt_link_type link, uint64_t seed, int training) {
    bt_model_config c;
    if (!fd_tiny_config(&c)) return 0;
    c.link_tower_type = link;
    bt_model_init(&fc->m, &c, BT_HEADS_ALL, BT_PRECISION_FP32);
    bt_model_init_params(&fc->m, seed);
    /* training mode: the dropout masks are functions of (seed, step, site), so every forward
     * of the FD sees the same masks and the backward regenerates them */
    bt_model_set_dropout(&fc->m, training, seed + 7, 3);
    tu_rng r;
    tu_rng_seed(&r, seed + 100);
    /* move zero/one-init parameters off their init values */
    const bt_param_table *t = &fc->m.table;
    fd_move_off_init(&fc->m, &r);
    /* batch: rows of lengths 10, 7, 4 (pads at the end), some MLM targets, ITM labels */
    const size_t lens[B] = {10, 7, 4};
    for (size_t b = 0; b < B; b++) {
        for (size_t tt = 0; tt < T; tt++) {
            size_t i = b * T + tt;
            int real = tt < lens[b];
            fc->ids[i] = !real ? c.pad_token_id
                         : tt == 0 ? 0
                         : tt == lens[b] - 1
                             ? 2
                             : 3 + (int32_t)(tu_rng_next(&r) % (uint64_t)(c.vocab_size - 3));
            fc->mask[i] = real;
            fc->mlm[i] = real && (tt % 3 == 1) ? (int32_t)(tu_rng_next(&r) % (uint64_t)c.vocab_size)
                                                : -100;
        }
        fc->itm[b] = (int32_t)(b != 1);
    }
    const size_t npix = B * 3 * (size_t)c.image_size * (size_t)c.image_size;
    fc->pix = malloc(npix * sizeof *fc->pix);
    for (size_t i = 0; i < npix; i++) fc->pix[i] = (float)tu_rng_normal(&r);
    bt_batch bb = {B, T, fc->ids, fc->mask, fc->pix, fc->itm, fc->mlm};
    fc->batch = bb;
    /* analytic gradients of each loss */
    losses(&fc->m, &fc->batch, fc->l0);
    for (int k = 0; k < 3; k++) {
        bt_loss_weights w = {k == 0, k == 1, k == 2};
        bt_zero_grad(&fc->m);
        bt_backward(&fc->m, &w);
        fc->grads[k] = malloc(t->numel * sizeof(float));
        memcpy(fc->grads[k], fc->m.grads, t->numel * sizeof(float));
    }
    return 1;
}

static void case_free(fd_case *fc) {
    for (int k = 0; k < 3; k++) free(fc->grads[k]);
    free(fc->pix);
    bt_model_free(&fc->m);
}

static void check_direction(fd_case *fc, const float *v, const char *label) {
    double fd[3], an[3];
    fd_along(&fc->m, v, 3, losses, &fc->batch, fc->grads, fd, an);
    for (int k = 0; k < 3; k++) fd_check(label, loss_names[k], fd[k], an[k], fc->l0[k]);
}

typedef struct pick {
    bt_param_id id;
    int layer;
    const char *tower;
} pick;

int main(void) {
    gemm_init_from_env();
    static const pick picks[] = {
        {BT_P_TEXT_WORD_EMB, 0, "text"},     {BT_P_TL_Q_W, 0, "text"},
        {BT_P_TEXT_POOL_W, 0, "text (unused)"},
        {BT_P_VIS_PATCH_W, 0, "vision"},     {BT_P_VL_IN_B, 0, "vision"},
        {BT_P_VIS_LN_POST_W, 0, "vision"},   {BT_P_TYPE_EMB, 0, "bridges"},
        {BT_P_XI_LINK_LN_B, 1, "bridges"},   {BT_P_XTL_CQ_W, 0, "cross"},
        {BT_P_XIL_CK_W, 2, "cross"},         {BT_P_XT_POOL_W, 0, "poolers"},
        {BT_P_MLM_DEC_W, 0, "heads"},        {BT_P_ITC_CROSS_B, 0, "heads"},
        {BT_P_LOGIT_SCALE, 0, "heads"},
    };
    tu_rng r;
    tu_rng_seed(&r, 2718);
    fd_case fc;
    memset(&fc, 0, sizeof fc);
    if (case_init(&fc, BT_LINK_ADD, 11, 0)) {
        float *v = malloc(fc.m.table.numel * sizeof *v);
        for (int rep = 0; rep < 2; rep++) {
            fd_direction(&fc.m.table, fc.m.params, v, &r, BT_P_COUNT, -1);
            check_direction(&fc, v, rep ? "all parameters (direction 2)" : "all parameters");
        }
        for (size_t i = 0; i < sizeof picks / sizeof picks[0]; i++) {
            char label[160];
            snprintf(label, sizeof label, "%s: %s[%d]", picks[i].tower,
                     fc.m.table.fields[picks[i].id].name, picks[i].layer);
            fd_direction(&fc.m.table, fc.m.params, v, &r, picks[i].id, picks[i].layer);
            check_direction(&fc, v, label);
        }
        free(v);
    }
    case_free(&fc);

    /* training mode (dropout p = 0.1 at every site of docs/spec.md §3.10) */
    memset(&fc, 0, sizeof fc);
    if (case_init(&fc, BT_LINK_ADD, 13, 1)) {
        float *v = malloc(fc.m.table.numel * sizeof *v);
        fd_direction(&fc.m.table, fc.m.params, v, &r, BT_P_COUNT, -1);
        check_direction(&fc, v, "dropout on: all parameters");
        fd_direction(&fc.m.table, fc.m.params, v, &r, BT_P_TEXT_WORD_EMB, 0);
        check_direction(&fc, v, "dropout on: text_word_emb");
        fd_direction(&fc.m.table, fc.m.params, v, &r, BT_P_XIL_CV_W, 1);
        check_direction(&fc, v, "dropout on: xil_cv_w[1]");
        free(v);
    }
    case_free(&fc);

    /* link-tower scalars, each tower's scalar one at a time */
    static const bt_link_type types[] = {BT_LINK_SCALED_ADD, BT_LINK_INTERPOLATE};
    for (size_t i = 0; i < 2; i++) {
        memset(&fc, 0, sizeof fc);
        if (!case_init(&fc, types[i], 12, 0)) continue;
        const bt_param_id ids[2] = {
            types[i] == BT_LINK_SCALED_ADD ? BT_P_XT_LINK_SCALE : BT_P_XT_LINK_BETA,
            types[i] == BT_LINK_SCALED_ADD ? BT_P_XI_LINK_SCALE : BT_P_XI_LINK_BETA};
        float *v = malloc(fc.m.table.numel * sizeof *v);
        for (int side = 0; side < 2; side++)
            for (int l = side; l < fc.m.cfg.cross_layers - 1; l += 2) {
                char label[160];
                snprintf(label, sizeof label, "%s link: %s[%d]", bt_link_type_name(types[i]),
                         fc.m.table.fields[ids[side]].name, l);
                fd_direction(&fc.m.table, fc.m.params, v, &r, ids[side], l);
                check_direction(&fc, v, label);
            }
        free(v);
        case_free(&fc);
    }
    gemm_release();
    return tu_finish();
}
