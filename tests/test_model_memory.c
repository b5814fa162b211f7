/* test_model_memory.c: the activation memory modes (model.h "Memory modes"):
 *
 *   1. forward-only: the phase outputs (ITC text / image / cross embeddings, pooler, ITM and
 *      MLM logits) of BT_ACTS_FORWARD_ONLY equal those of BT_ACTS_FULL bit for bit, on the
 *      tiny config (fp32, bf16, dropout off and on, two rounds of different shapes on one
 *      model), the synthetic-model config and the committed parity fixture models
 *      (tests/fixtures/tiny, tiny_scaled_add: their weights);
 *   2. checkpointing: the parameter gradients of BT_ACTS_CHECKPOINT equal those of
 *      BT_ACTS_FULL bit for bit, with training-mode dropout (the recompute must regenerate
 *      the masks), ITC + ITM + MLM output gradients, Bt != Bi, pairs that re-use rows, two
 *      cross rounds on one tower pass, and a fresh model whose pair phase grows the shared
 *      scratch after the towers placed theirs; the gradients-final events (model.h) fire in
 *      the same order; then three bt_train_step steps (ITC + ITM + MLM, hard negatives,
 *      masking, dropout, two micro-batches): same losses and weights;
 *   3. sizes: bt_model_activation_bytes_mode equals the bytes bt_model_reserve_phases
 *      allocates in each mode on a fresh model; forward-only < checkpoint < full; a model
 *      whose training arenas exist evaluates in forward-only mode without allocating; the
 *      base config's numbers at batch 8 are printed;
 *   4. a backward in forward-only mode (or after bt_model_free_grads) aborts with a message
 *      naming the mode (run in a child process);
 *   5. bf16 activation storage (model.h): bf16 tiny models with it on and off, on the widened
 *      route, the native one where the CPU has it, and widened under the reference GEMM: the
 *      parameter gradients and outputs of FULL and CHECKPOINT passes with dropout, the
 *      outputs of FORWARD_ONLY rounds, and (oneDNN) the losses and weights of three
 *      bt_train_step steps, all bit for bit; the FULL arenas shrink by exactly the amount the
 *      layout rule predicts; a control flips one bit of a stored activation and the gradients
 *      change; BT_ACT_BF16=0 turns it off and another value is refused by name; the base
 *      config's numbers are printed;
 *   6. assigned gradient slots (model.c "activation layout"): the gradient arenas' assigned
 *      region (and, checkpointing, the whole layer gradient scratch) is filled with NaN before
 *      every backward, on the tiny config (fp32 and bf16, full and checkpoint, dropout, two
 *      cross rounds): the parameter gradients equal those of an untouched model bit for bit,
 *      so every assigned slot is written before it is read (a writer that accumulated into
 *      one would carry the NaN); and that region holds most of the gradient bytes; the
 *      gradients read in place (a residual sum's, an output projection's) have no slot;
 *   7. attention probabilities (model.h): a model that keeps them and one that recomputes
 *      them in the backward (the default) give the same parameter gradients (full and
 *      checkpoint, fp32 and bf16, dropout on) and the same three bt_train_step steps, bit
 *      for bit; the full arenas differ by exactly the probabilities' slots;
 *   8. BT_ACTS_FULL with the layers' internal gradients in one shared scratch (the default)
 *      against one slot set per layer: the same parameter gradients (fp32, bf16, dropout on,
 *      a pair phase that grows the scratch after the towers placed theirs) and three
 *      bt_train_step steps, bit for bit; fewer bytes, and the estimate follows.
 *   9. packed weights (model.h bt_model_pack_weights): forward-only rounds of a model whose
 *      weights are packed equal those of the same model with them row-major, bit for bit, in
 *      bf16 (the shadow packed; also after new weights and a refresh) and fp32 (the master
 *      packed), on the synthetic-model config (every Linear but the ITM head and the MLM
 *      decoder packs) and the tiny one (only the vision tower's); some tensors are packed
 *      wherever the products can read them;
 *  10. the bf16 shadow dropped (model.h bt_model_drop_bf16_shadow, what gradient
 *      checkpointing does in bf16): three bt_train_step steps of a checkpointed bf16 model
 *      without it equal those of one with it, losses and weights bit for bit, on section 5's
 *      routes (widened, native where the CPU has it);
 *  11. the last cross layer on its CLS rows (the default, model.h bt_model_set_cross_features:
 *      the image side, and the text side too with no MLM head built) against every row: the
 *      phase outputs (ITC embeddings, pooler, ITM and MLM logits) with all heads and with ITC
 *      and ITM only, bit for bit, with training-mode dropout (the CLS rows'
 *      hidden and attention masks are the whole layer's: ops.h attention_dims.drop_tq; with
 *      the attention's dropout indexed by the CLS queries alone, a deliberately wrong setting
 *      tried while this was written, 8 of the section's 10 checks failed, all 5 bitwise ones
 *      and the fp32 ones by 595-1880x their bound), under the reference GEMM
 *      (every output one double dot product rounded once, whatever the shape), fp32 and bf16,
 *      two rounds of pairs that re-use rows. The build's GEMM may sum a product of 10 rows in
 *      another order than one of 170 (oneDNN's fp32 kernel and blocking follow the shape), so
 *      there the two agree within twice the parity tolerance of test_model_parity.c (each is
 *      within it of the float64 truth: fp32 rtol 1e-5 + 1e-5 max|b|, bf16 4e-2 max|b|); the
 *      gradients of both are checked against PyTorch there;
 *  12. huge pages (mem.h) change where the bytes live, never the bits: two bf16 models of the
 *      synthetic-model config with its vocabulary widened to 16384 tokens, so that the
 *      weights, their bf16 copy (where the GEMM route has one), the gradients, AdamW's moments
 *      and the pair arena each span at least one 2 MiB page (checked: below that mem.h gives
 *      no advice and the section would compare nothing), one built and trained under
 *      BT_HUGE_PAGES=0, one under BT_HUGE_PAGES=1: three bt_train_step steps, the same
 *      losses and weights bit for bit.
 *      The control: each of those buffers' mapping in /proc/self/smaps says THPeligible 1
 *      under BT_HUGE_PAGES=1 and 0 under BT_HUGE_PAGES=0 where the machine's THP setting is
 *      "madvise" (Debian's default) or "always", 0 for both under "never" (printed; the
 *      advice ignored, a deliberately wrong setting tried while this was written, fails the
 *      six checks of one side);
 *
 * Bitwise: the modes run the same kernels on the same numbers in the same order; only where
 * the slots live differs. That holds under the reference GEMM (each output a double dot
 * product rounded once) by construction, and is checked under the build's default backend
 * too: oneDNN / OpenBLAS pick their blocking from the shape and thread count, not from the
 * addresses (measured: identical bits on this machine, AVX-512 and AMX kernels); a backend
 * that did depend on alignment would make this test fail, which is the point of checking.
 *
 * Deliberately not here: parity with PyTorch (test_model_parity.c: the FULL mode's numbers),
 * finite differences (test_model_grad.c, test_model_phases.c). */
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mem.h"
#include "model/config.h"
#include "model/cross.h"
#include "kernels/gemm.h"
#include "kernels/ops.h"
#include "model/model.h"
#include "model/params.h"
#include "train/step.h"
#include "test_model_fd.h"
#include "test_util.h"
#include "model/text.h"
#include "model/vit.h"

enum { T = 8, MAXB = 8, MAXP = 16 };

/* --- models and inputs -------------------------------------------------------------------- */

typedef enum { CFG_TINY, CFG_SYNTHETIC, CFG_FIXTURE, CFG_FIXTURE_SCALED } cfg_kind;
static const char *const cfg_names[] = {"tiny", "synthetic-model", "fixture tiny",
                                        "fixture tiny_scaled_add"};

/* The config of kind k. */
static int config_of(bt_model_config *c, cfg_kind k) {
    char path[1200];
    if (k == CFG_TINY) return fd_tiny_config(c);
    if (k == CFG_SYNTHETIC) {
        const char *root = getenv("BT_CONFIGS");
        snprintf(path, sizeof path, "%s/synthetic-model/config.json",
                 root ? root : tu_fixture_path("../../configs"));
    } else {
        const char *dir = k == CFG_FIXTURE ? "tiny" : "tiny_scaled_add";
        snprintf(path, sizeof path, "%s/config.json", tu_fixture_path(dir));
    }
    return tu_check(bt_model_config_load(c, path) == BT_OK, "load %s: %s", path,
                    bt_error_message());
}

/* A model of kind k with config c (config_of's, or a variant of it) and these heads. */
static int model_make_config(bt_model *m, cfg_kind k, const bt_model_config *c,
                             bt_precision prec, bt_act_mode mode, unsigned heads) {
    char path[1200];
    if (!tu_check(bt_model_init(m, c, heads, prec) == BT_OK, "init %s: %s",
                  cfg_names[k], bt_error_message()))
        return 0;
    if (k == CFG_FIXTURE || k == CFG_FIXTURE_SCALED) {
        snprintf(path, sizeof path, "%s/model.safetensors",
                 tu_fixture_path(k == CFG_FIXTURE ? "tiny" : "tiny_scaled_add"));
        if (!tu_check(bt_model_load_safetensors(m, path) == BT_OK, "load %s: %s", path,
                      bt_error_message()))
            return 0;
    } else {
        bt_model_init_params(m, 11);
        tu_rng r;
        tu_rng_seed(&r, 12);
        fd_move_off_init(m, &r);
        bt_model_refresh_bf16(m);
    }
    bt_model_set_act_mode(m, mode);
    return 1;
}

/* A model of kind k with these heads (section 11 also builds models without MLM). */
static int model_make_heads(bt_model *m, cfg_kind k, bt_precision prec, bt_act_mode mode,
                            unsigned heads) {
    bt_model_config c;
    return config_of(&c, k) && model_make_config(m, k, &c, prec, mode, heads);
}

static int model_make(bt_model *m, cfg_kind k, bt_precision prec, bt_act_mode mode) {
    return model_make_heads(m, k, prec, mode, BT_HEADS_ALL);
}

/* Two models of the same kind and precision, a in mode ma and b in mode mb (the sections
 * compare one against the other); 0, with neither left to free, when either fails. */
static int model_pair_make(bt_model *a, bt_act_mode ma, bt_model *b, bt_act_mode mb,
                           cfg_kind k, bt_precision prec) {
    if (!model_make(a, k, prec, ma)) return 0;
    if (model_make(b, k, prec, mb)) return 1;
    bt_model_free(a);
    return 0;
}

/* Texts (with pads), images, keys and pairs: nt texts, ni images, P pairs over them. */
typedef struct inputs {
    size_t nt, ni, P;
    int32_t ids[MAXB * T], mask[MAXB * T];
    uint64_t tkeys[MAXB], ikeys[MAXB];
    float *pix;
    bt_pair pairs[MAXP];
} inputs;

static void inputs_make(inputs *in, const bt_model_config *c, size_t nt, size_t ni, size_t P,
                        uint64_t seed) {
    memset(in, 0, sizeof *in);
    tu_rng r;
    tu_rng_seed(&r, seed);
    in->nt = nt, in->ni = ni, in->P = P;
    for (size_t b = 0; b < nt; b++) {
        const size_t len = T - (b * 3) % 5;
        for (size_t t = 0; t < T; t++) {
            in->ids[b * T + t] = t >= len       ? c->pad_token_id
                                 : t == 0       ? 0
                                 : t == len - 1 ? 2
                                                : 3 + (int32_t)(tu_rng_next(&r) %
                                                                (uint64_t)(c->vocab_size - 3));
            in->mask[b * T + t] = t < len;
        }
        in->tkeys[b] = 100 + 7 * b;
    }
    const size_t R = (size_t)c->image_size, n = ni * 3 * R * R;
    in->pix = malloc((n ? n : 1) * sizeof *in->pix);
    for (size_t i = 0; i < n; i++) in->pix[i] = (float)tu_rng_normal(&r);
    for (size_t i = 0; i < ni; i++) in->ikeys[i] = 900 + 13 * i;
    for (size_t p = 0; p < P; p++) /* rows re-used by several pairs, some flagged MLM */
        in->pairs[p] = (bt_pair){(int32_t)((p * 5 + 1) % nt), (int32_t)((p * 3) % ni),
                                 (int32_t)(p % 3 == 1)};
}

static bt_status run_towers(bt_model *m, const inputs *in) {
    const bt_text_input ti = {in->nt, T, in->ids, in->mask, in->tkeys};
    const bt_image_input ii = {in->ni, in->pix, in->ikeys};
    return bt_towers_forward(m, &ti, &ii);
}

/* Every phase output of the last pass, concatenated. */
typedef struct snap {
    float *x;
    size_t n;
} snap;

static void snap_add(snap *s, const float *x, size_t n) {
    if (!x || !n) return;
    s->x = realloc(s->x, (s->n + n) * sizeof *s->x);
    memcpy(s->x + s->n, x, n * sizeof *x);
    s->n += n;
}

static void snap_outputs(snap *s, const bt_model *m) {
    const size_t C = (size_t)m->cfg.contrastive_hidden, H = (size_t)m->cfg.hidden;
    snap_add(s, m->itc_text, m->Bt * C);
    snap_add(s, m->itc_image, m->Bi * C);
    snap_add(s, m->pooler_out, m->P * 2 * H);
    snap_add(s, m->itc_cross, m->P * C);
    snap_add(s, m->itm_logits_out, m->P * 2);
    snap_add(s, m->mlm_logits_out, m->Pm * m->T * (size_t)m->cfg.vocab_size);
}

/* Towers on `in`, then the cross stack on pairs [0, P/2) and [P/2, P) (two rounds), every
 * output appended to s. */
static int forward_rounds(bt_model *m, const inputs *in, snap *s, const char *what) {
    bt_status st = run_towers(m, in);
    if (!tu_check(st == BT_OK, "%s: towers: %s", what, st ? bt_error_message() : "ok")) return 0;
    const size_t half = in->P / 2;
    st = bt_cross_forward_pairs(m, in->pairs, half);
    if (st == BT_OK) {
        snap_outputs(s, m);
        st = bt_cross_forward_pairs(m, in->pairs + half, in->P - half);
    }
    if (!tu_check(st == BT_OK, "%s: pairs: %s", what, st ? bt_error_message() : "ok")) return 0;
    snap_outputs(s, m);
    return 1;
}

/* --- 1: forward-only outputs == full outputs ------------------------------------------------ */

static void check_forward_only(cfg_kind k, bt_precision prec, int dropout) {
    char what[96];
    snprintf(what, sizeof what, "1: %s %s dropout %s", cfg_names[k],
             prec == BT_PRECISION_BF16 ? "bf16" : "fp32", dropout ? "on" : "off");
    bt_model full, fo;
    if (!model_pair_make(&full, BT_ACTS_FULL, &fo, BT_ACTS_FORWARD_ONLY, k, prec)) return;
    bt_model_set_dropout(&full, dropout, 77, 3);
    bt_model_set_dropout(&fo, dropout, 77, 3);
    inputs a, b;
    inputs_make(&a, &full.cfg, 6, 3, 10, 5); /* two shapes: the second reuses the arenas */
    inputs_make(&b, &full.cfg, 3, 4, 5, 6);
    snap sf = {0}, so = {0};
    int ok = forward_rounds(&full, &a, &sf, what) && forward_rounds(&full, &b, &sf, what) &&
             forward_rounds(&fo, &a, &so, what) && forward_rounds(&fo, &b, &so, what);
    if (ok && tu_check(sf.n == so.n && sf.n > 0, "%s: %zu vs %zu outputs", what, sf.n, so.n)) {
        char name[256];
        snprintf(name, sizeof name, "%s: forward-only outputs == full outputs (%zu values)",
                 what, sf.n);
        tu_check_bytes_equal(name, so.x, sf.x, sf.n * sizeof *sf.x);
    }
    tu_check(fo.tower_dact.bytes == 0 && fo.pair_dact.bytes == 0 && fo.layer_dact.bytes == 0 &&
                 fo.d_itc_text == NULL && fo.d_mlm_logits == NULL,
             "%s: forward-only allocates no gradient arena, d_* slots NULL", what);
    free(sf.x);
    free(so.x);
    free(a.pix);
    free(b.pix);
    bt_model_free(&full);
    bt_model_free(&fo);
}

/* --- 11: the last cross layer on CLS rows == on every row ------------------------------------ */

static void check_cross_features(cfg_kind k, bt_precision prec, unsigned heads) {
    char what[128];
    const int bitwise = gemm_get_backend() == GEMM_BACKEND_REF;
    const int bf16 = prec == BT_PRECISION_BF16;
    const double rtol = bf16 ? 0.0 : 2e-5, atol_frac = bf16 ? 8e-2 : 2e-5;
    snprintf(what, sizeof what, "11: %s %s %s, dropout on, GEMM %s", cfg_names[k],
             prec == BT_PRECISION_BF16 ? "bf16" : "fp32",
             heads & BT_HEADS_MLM ? "all heads" : "ITC + ITM",
             gemm_backend_name(gemm_get_backend()));
    bt_model cls, all;
    if (!model_make_heads(&cls, k, prec, BT_ACTS_FULL, heads)) return;
    if (!model_make_heads(&all, k, prec, BT_ACTS_FULL, heads)) {
        bt_model_free(&cls);
        return;
    }
    bt_model_set_cross_features(&all, 1);
    bt_model_set_dropout(&cls, 1, 77, 3);
    bt_model_set_dropout(&all, 1, 77, 3);
    inputs a;
    inputs_make(&a, &cls.cfg, 6, 3, 10, 5);
    snap sc = {0}, sa = {0};
    if (forward_rounds(&cls, &a, &sc, what) && forward_rounds(&all, &a, &sa, what) &&
        tu_check(sc.n == sa.n && sc.n > 0, "%s: %zu vs %zu outputs", what, sc.n, sa.n)) {
        char name[256];
        snprintf(name, sizeof name, "%s: CLS-row outputs == every-row outputs (%zu values)",
                 what, sc.n);
        if (bitwise) {
            tu_check_bytes_equal(name, sc.x, sa.x, sc.n * sizeof *sc.x);
        } else {
            double scale = 0.0;
            for (size_t i = 0; i < sa.n; i++) scale = fmax(scale, fabs(sa.x[i]));
            tu_check_close_f32(name, sc.x, sa.x, sc.n, atol_frac * scale, rtol);
        }
    }
    free(sc.x);
    free(sa.x);
    free(a.pix);
    bt_model_free(&cls);
    bt_model_free(&all);
}

/* --- 2: checkpointed gradients == full gradients ------------------------------------------- */

/* Fills the d_* output slots of the last pass with fixed random values (a linear "loss" over
 * every output the losses write: ITC text / image / cross, ITM, MLM). */
static void fill_output_grads(bt_model *m, uint64_t seed, int towers) {
    tu_rng r;
    tu_rng_seed(&r, seed);
    const size_t C = (size_t)m->cfg.contrastive_hidden;
    if (towers) {
        tu_fill_uniform_f32(&r, m->d_itc_text, m->Bt * C, -1.0f, 1.0f);
        tu_fill_uniform_f32(&r, m->d_itc_image, m->Bi * C, -1.0f, 1.0f);
    }
    tu_fill_uniform_f32(&r, m->d_itc_cross, m->P * C, -1.0f, 1.0f);
    tu_fill_uniform_f32(&r, m->d_itm_logits, m->P * 2, -1.0f, 1.0f);
    tu_fill_uniform_f32(&r, m->d_mlm_logits, m->Pm * m->T * (size_t)m->cfg.vocab_size, -0.1f,
                        0.1f);
}

/* The gradients-final events of a backward (model.h), in firing order: a checkpointed layer
 * recomputes inside its backward, so the events must be those of the full mode. */
typedef struct events {
    int n;
    int ev[256], layer[256];
} events;

static void record_event(void *ctx, bt_grad_event ev, int layer) {
    events *e = ctx;
    if (e->n < 256) e->ev[e->n] = (int)ev, e->layer[e->n++] = layer;
}

/* Shared scratch bytes after the towers forward and after the largest pair forward of the
 * last backward_rounds. */
static size_t scratch_towers, scratch_pairs;

/* Bytes of the assigned region of a gradient arena (after acc_end). */
static size_t assigned_bytes(const bt_arena *a) {
    return a->used > a->acc_end ? a->used - a->acc_end : 0;
}

/* NaN over every gradient byte a backward must write before reading: the assigned regions of
 * both phase arenas and the layer gradient scratch (its accumulated part, none here, is
 * zeroed per layer anyway). The d_* outputs and the accumulated slots are left alone. */
static void poison_assigned(bt_model *m) {
    bt_arena *const ars[2] = {&m->tower_dact, &m->pair_dact};
    for (int i = 0; i < 2; i++)
        tu_fill_sentinel_f32((float *)((unsigned char *)ars[i]->mem + ars[i]->acc_end),
                             assigned_bytes(ars[i]) / sizeof(float));
    if (m->layer_dact.bytes) /* checkpointing, and FULL with shared layer gradients */
        tu_fill_sentinel_f32(m->layer_dact.mem, m->layer_dact.bytes / sizeof(float));
}

/* Towers, two cross rounds (forward, output gradients, backward each), towers backward;
 * poison: poison_assigned before each backward (section 6). */
static int backward_rounds(bt_model *m, const inputs *in, const char *what, int poison) {
    bt_zero_grad(m);
    bt_status st = run_towers(m, in);
    if (!tu_check(st == BT_OK, "%s: towers: %s", what, st ? bt_error_message() : "ok")) return 0;
    scratch_towers = m->layer_act.bytes;
    fill_output_grads(m, 31, 1);
    const size_t half = in->P / 2;
    for (int round = 0; round < 2; round++) {
        const bt_pair *p = round ? in->pairs + half : in->pairs;
        st = bt_cross_forward_pairs(m, p, round ? in->P - half : half);
        if (!tu_check(st == BT_OK, "%s: pairs: %s", what, st ? bt_error_message() : "ok"))
            return 0;
        fill_output_grads(m, 41 + (uint64_t)round, 0);
        scratch_pairs = m->layer_act.bytes;
        if (poison) poison_assigned(m);
        bt_cross_backward_pairs(m);
    }
    if (poison) poison_assigned(m);
    bt_towers_backward(m);
    if (m->act_mode == BT_ACTS_CHECKPOINT) { /* the towers' slots follow the grown scratch */
        const unsigned char *lo = m->layer_act.mem, *hi = lo + m->layer_act.bytes;
        const unsigned char *q = (const unsigned char *)m->acts.vit->layers[0].qkv;
        const unsigned char *t = (const unsigned char *)m->acts.text->layers[0].q;
        tu_check(q >= lo && q < hi && t >= lo && t < hi,
                 "%s: after the towers backward the layer slots lie in the current scratch",
                 what);
    }
    return 1;
}

static void check_checkpoint_grads(cfg_kind k, bt_precision prec) {
    char what[96];
    snprintf(what, sizeof what, "2: %s %s dropout on", cfg_names[k],
             prec == BT_PRECISION_BF16 ? "bf16" : "fp32");
    bt_model full, ck;
    if (!model_pair_make(&full, BT_ACTS_FULL, &ck, BT_ACTS_CHECKPOINT, k, prec)) return;
    bt_model_set_dropout(&full, 1, 1234, 5);
    bt_model_set_dropout(&ck, 1, 1234, 5);
    /* 6 texts, 3 images, 14 pairs: the pair phase needs a larger scratch than the towers, so
     * the fresh checkpointed model grows it after the towers placed theirs */
    inputs in;
    inputs_make(&in, &full.cfg, 6, 3, 14, 8);
    events ef = {0}, ec = {0};
    full.grads_final = record_event, full.grads_final_ctx = &ef;
    ck.grads_final = record_event, ck.grads_final_ctx = &ec;
    if (backward_rounds(&full, &in, what, 0) && backward_rounds(&ck, &in, what, 0)) {
        tu_check(scratch_pairs > scratch_towers,
                 "%s: the pair phase grew the shared scratch (%zu -> %zu bytes) after the "
                 "towers placed theirs (their backward re-places them)", what, scratch_towers,
                 scratch_pairs);
        tu_check(ef.n > 0 && ef.n == ec.n && !memcmp(ef.ev, ec.ev, sizeof ef.ev) &&
                     !memcmp(ef.layer, ec.layer, sizeof ef.layer),
                 "%s: the same %d gradients-final events in the same order", what, ec.n);
        char name[256];
        snprintf(name, sizeof name, "%s: checkpointed parameter gradients == full (%zu)", what,
                 full.table.numel);
        tu_check_bytes_equal(name, ck.grads, full.grads, full.table.numel * sizeof(float));
        double n2 = 0;
        for (size_t i = 0; i < full.table.numel; i++) n2 += (double)full.grads[i] * full.grads[i];
        tu_check(n2 > 0 && isfinite(n2), "%s: the gradients are not all zero (norm %.4g)", what,
                 sqrt(n2));
    }
    ck.grads_final = NULL;
    /* control: with another dropout step the gradients differ (the masks matter) */
    bt_model_set_dropout(&ck, 1, 1234, 6);
    if (backward_rounds(&ck, &in, what, 0))
        tu_check(memcmp(ck.grads, full.grads, full.table.numel * sizeof(float)) != 0,
                 "%s control: another dropout step gives other gradients", what);
    free(in.pix);
    bt_model_free(&full);
    bt_model_free(&ck);
}

/* Section 12's hooks into compare_steps (NULL elsewhere): before model v's trainer starts, and
 * after its steps while its trainer and arenas are alive. */
static void (*compare_before)(int v);
static void (*compare_after)(int v, const bt_model *m, const bt_trainer *tr);

/* Three training steps (ITC + ITM + MLM, hard negatives, masking, dropout, two micro-batches)
 * on m[0] and m[1] (same weights): the same losses and weights, bit for bit. Frees both. */
static void compare_steps(bt_model m[2], const char *what) {
    enum { STEPS = 3, B = 4, ACCUM = 2 };
    const bt_model_config *c = &m[0].cfg;
    inputs in[STEPS * ACCUM];
    int64_t rec[STEPS * ACCUM][B];
    bt_step_batch mb[STEPS * ACCUM];
    for (int i = 0; i < STEPS * ACCUM; i++) {
        inputs_make(&in[i], c, B, B, 0, 60 + (uint64_t)i);
        for (int b = 0; b < B; b++) rec[i][b] = 10 * i + b;
        mb[i] = (bt_step_batch){.B = B, .T = T, .input_ids = in[i].ids,
                                .attention_mask = in[i].mask, .pixel_values = in[i].pix,
                                .record = rec[i]};
    }
    double loss[2][STEPS];
    int ok = 1;
    for (int v = 0; v < 2 && ok; v++) {
        bt_step_config sc = bt_step_config_default();
        sc.mlm = (bt_mlm_spec){0.3, c->vocab_size - 1, c->vocab_size, {0, 1, 2}, 3};
        bt_schedule_init(&sc.schedule, "linear", 1e-3, 10, 1, 0.0);
        sc.seed = 4321;
        bt_trainer tr;
        if (compare_before) compare_before(v);
        ok = tu_check(bt_trainer_init(&tr, &m[v], &sc) == BT_OK, "%s: trainer: %s", what,
                      bt_error_message());
        for (int s = 0; s < STEPS && ok; s++) {
            bt_step_result r;
            ok = tu_check(bt_train_step(&tr, mb + ACCUM * s, ACCUM, &r) == BT_OK && !r.skipped,
                          "%s: model %d step %d: %s", what, v, s, bt_error_message());
            loss[v][s] = r.loss;
        }
        if (ok && compare_after) compare_after(v, &m[v], &tr);
        if (ok) bt_trainer_free(&tr);
    }
    if (ok) {
        tu_check(memcmp(loss[0], loss[1], sizeof loss[0]) == 0,
                 "%s: 3 steps ITC+ITM+MLM, dropout: the same losses (%.9f %.9f %.9f)", what,
                 loss[1][0], loss[1][1], loss[1][2]);
        char name[256];
        snprintf(name, sizeof name, "%s: 3 steps: the same weights", what);
        tu_check_bytes_equal(name, m[1].params, m[0].params, m[0].table.numel * sizeof(float));
    }
    for (int i = 0; i < STEPS * ACCUM; i++) free(in[i].pix);
    bt_model_free(&m[0]);
    bt_model_free(&m[1]);
}

static void check_checkpoint_steps(void) {
    bt_model m[2];
    if (!model_pair_make(&m[0], BT_ACTS_FULL, &m[1], BT_ACTS_CHECKPOINT, CFG_TINY,
                         BT_PRECISION_FP32))
        return;
    compare_steps(m, "2: checkpointed vs full");
}

/* --- 6: assigned gradient slots are written before they are read -------------------------- */

static void check_assigned_slots(bt_precision prec, bt_act_mode mode) {
    char what[96];
    snprintf(what, sizeof what, "6: tiny %s %s", prec == BT_PRECISION_BF16 ? "bf16" : "fp32",
             bt_act_mode_name(mode));
    bt_model ref, pm;
    if (!model_pair_make(&ref, mode, &pm, mode, CFG_TINY, prec)) return;
    bt_model_set_dropout(&ref, 1, 99, 2);
    bt_model_set_dropout(&pm, 1, 99, 2);
    inputs in;
    inputs_make(&in, &ref.cfg, 6, 3, 14, 9);
    if (backward_rounds(&ref, &in, what, 0) && backward_rounds(&pm, &in, what, 1)) {
        char name[256];
        snprintf(name, sizeof name, "%s: parameter gradients with NaN in the assigned gradient "
                 "slots before each backward == untouched (%zu)", what, ref.table.numel);
        tu_check_bytes_equal(name, pm.grads, ref.grads, ref.table.numel * sizeof(float));
        double n2 = 0;
        for (size_t i = 0; i < ref.table.numel; i++) n2 += (double)ref.grads[i] * ref.grads[i];
        tu_check(n2 > 0 && isfinite(n2), "%s: the gradients are finite, not all zero (norm "
                 "%.4g)", what, sqrt(n2));
        if (mode == BT_ACTS_FULL) {
            /* the towers arena as the last pass left it with the layer gradient scratch:
             * the assigned bytes are most of them */
            const bt_arena *t = &pm.tower_dact;
            const size_t lay = pm.layer_dact.bytes;
            const size_t inner = t->used - t->head + lay, set = assigned_bytes(t) + lay;
            printf("# %s: towers gradient arena + layer gradient scratch: %zu of %zu internal "
                   "bytes assigned (not zeroed)\n", what, set, inner);
            tu_check(set * 2 > inner && assigned_bytes(&pm.pair_dact) > 0,
                     "%s: most internal gradient bytes are assigned (%zu of %zu)", what, set,
                     inner);
            /* gradients the backward reads where another slot holds them (towers.h
             * post_ln_backward, vit.c) take no gradient slot; their activations stay */
            const bt_vit_layer_acts *va = &pm.acts.vit->layers[0], *vd = &pm.dacts.vit->layers[0];
            const bt_text_layer_acts *ta = &pm.acts.text->layers[0];
            const bt_text_layer_acts *td = &pm.dacts.text->layers[0];
            const bt_cross_layer_acts *xa = &pm.acts.xi[0], *xd = &pm.dacts.xi[0];
            tu_check(va->attn_out && va->mlp_out && ta->res2 && xa->res2 && xa->res3 &&
                         !vd->attn_out && !vd->mlp_out && !td->res2 && !xd->res2 && !xd->res3 &&
                         !pm.dacts.xt[0].res3 && td->res1 && xd->res1,
                     "%s: no gradient slot for ViT attn_out / mlp_out, text res2, cross res2 / "
                     "res3 (activations kept; res1's gradient, which the stream adds, kept)",
                     what);
        }
        size_t acc = 0;
        for (int g = 0; g < BT_GROUP_COUNT; g++) acc += pm.group_grad_bytes[g];
        tu_check(acc == 0, "%s: the layer gradient scratch has no accumulated slot (no "
                 "per-layer zeroing; %zu bytes)", what, acc);
    }
    free(in.pix);
    bt_model_free(&ref);
    bt_model_free(&pm);
}

/* --- 3: sizes -------------------------------------------------------------------------------- */

static size_t arenas_bytes(const bt_model *m) {
    return m->tower_act.bytes + m->tower_dact.bytes + m->pair_act.bytes + m->pair_dact.bytes +
           m->layer_act.bytes + m->layer_dact.bytes;
}

/* configs/bridgetower-base (a failed case when it does not load) */
static int base_config(bt_model_config *c) {
    char path[1200];
    const char *root = getenv("BT_CONFIGS");
    snprintf(path, sizeof path, "%s/bridgetower-base/config.json",
             root ? root : tu_fixture_path("../../configs"));
    return tu_check(bt_model_config_load(c, path) == BT_OK, "load %s", path);
}

static void check_sizes(void) {
    enum { Bt = 6, Bi = 3, P = 7, Pm = 2 };
    size_t want[3];
    for (int mode = BT_ACTS_FULL; mode <= BT_ACTS_FORWARD_ONLY; mode++) {
        bt_model m;
        if (!model_make(&m, CFG_TINY, BT_PRECISION_FP32, (bt_act_mode)mode)) return;
        want[mode] = bt_model_activation_bytes_mode(&m.cfg, BT_HEADS_ALL, BT_PRECISION_FP32,
                                                    (bt_act_mode)mode, Bt, Bi, P, Pm, T);
        const bt_status s = bt_model_reserve_phases(&m, Bt, Bi, P, Pm, T);
        tu_check(s == BT_OK && arenas_bytes(&m) == want[mode],
                 "3: %s: bt_model_activation_bytes_mode = %zu = bytes reserved (%zu)",
                 bt_act_mode_name((bt_act_mode)mode), want[mode], arenas_bytes(&m));
        /* a pass at the reserved shapes allocates nothing more */
        inputs in;
        inputs_make(&in, &m.cfg, Bt, Bi, P, 3);
        bt_status st = run_towers(&m, &in);
        if (st == BT_OK) st = bt_cross_forward_pairs(&m, in.pairs, P);
        if (st == BT_OK && mode != BT_ACTS_FORWARD_ONLY) {
            bt_cross_backward_pairs(&m);
            bt_towers_backward(&m);
        }
        tu_check(st == BT_OK && arenas_bytes(&m) == want[mode],
                 "3: %s: a pass at the reserved shapes allocates nothing",
                 bt_act_mode_name((bt_act_mode)mode));
        free(in.pix);
        if (mode == BT_ACTS_FULL) {
            /* evaluation inside a training run: forward-only reuses the training arenas */
            const size_t before = arenas_bytes(&m);
            bt_model_set_act_mode(&m, BT_ACTS_FORWARD_ONLY);
            inputs_make(&in, &m.cfg, Bt, Bi, P, 4);
            st = run_towers(&m, &in);
            if (st == BT_OK) st = bt_cross_forward_pairs(&m, in.pairs, P);
            tu_check(st == BT_OK && arenas_bytes(&m) == before && m.layer_act.bytes == 0,
                     "3: full arenas, then forward-only: no allocation (scratch in an unused "
                     "gradient arena)");
            free(in.pix);
        }
        bt_model_free(&m);
    }
    tu_check(want[BT_ACTS_FORWARD_ONLY] < want[BT_ACTS_CHECKPOINT] &&
                 want[BT_ACTS_CHECKPOINT] < want[BT_ACTS_FULL],
             "3: tiny: forward-only %zu < checkpoint %zu < full %zu bytes",
             want[BT_ACTS_FORWARD_ONLY], want[BT_ACTS_CHECKPOINT], want[BT_ACTS_FULL]);
    /* the base model at batch 8, T 40 (ITC head, bench_step's shapes): printed, and the
     * reductions the modes exist for */
    bt_model_config c;
    if (!base_config(&c)) return;
    size_t base[3];
    for (int mode = 0; mode < 3; mode++)
        base[mode] = bt_model_activation_bytes_mode(&c, BT_HEADS_ITC, BT_PRECISION_FP32,
                                                    (bt_act_mode)mode, 8, 8, 8, 0, 40);
    printf("# base B 8 T 40 ITC activations: full %.2f GB, checkpoint %.2f GB, forward-only "
           "%.2f GB\n", base[0] * 1e-9, base[1] * 1e-9, base[2] * 1e-9);
    tu_check(base[BT_ACTS_FORWARD_ONLY] * 5 < base[BT_ACTS_FULL] &&
                 base[BT_ACTS_CHECKPOINT] * 3 < base[BT_ACTS_FULL],
             "3: base: forward-only < 1/5 and checkpoint < 1/3 of the full activations");
}

/* --- 5: bf16 activation storage == fp32 storage, bit for bit -------------------------------
 * (model.h "bf16 activation storage") Tiny bf16 models with the storage on and off, the same
 * weights and inputs, on one bf16 GEMM route (main() runs widened, native where the CPU has
 * it, and widened under the reference GEMM). */

/* m[0] storage off, m[1] on: bf16 tiny models in `mode`. */
static int act16_pair(bt_model m[2], bt_act_mode mode, const char *what) {
    for (int v = 0; v < 2; v++) {
        if (!model_make(&m[v], CFG_TINY, BT_PRECISION_BF16, mode)) {
            if (v) bt_model_free(&m[0]);
            return 0;
        }
        bt_model_set_act_bf16(&m[v], v);
    }
    return tu_check(!bt_model_act_bf16(&m[0]) && bt_model_act_bf16(&m[1]),
                    "%s: bt_model_act_bf16: off model 0, on model 1", what);
}

/* The pass backward_rounds makes stored what it should: bf16 slots on, fp32 ones off. */
static void check_act16_slots(const bt_model m[2], const char *what) {
    const bt_vit_layer_acts *v0 = &m[0].acts.vit->layers[0], *v1 = &m[1].acts.vit->layers[0];
    const bt_cross_layer_acts *x0 = &m[0].acts.xi[0], *x1 = &m[1].acts.xi[0];
    tu_check(v1->y1_16 && v1->y2_16 && v1->ctx_16 && v1->f_16 && !v1->y1 && !v1->y2 && !v1->f &&
                 m[1].acts.text->layers[0].f_16 && m[1].acts.text->layers[0].ctx_16 &&
                 x1->f_16 && x1->ctx_16 && x1->cctx_16 && m[1].acts.bridges[0].lnp_16 &&
                 !v0->y1_16 && !v0->f_16 && !x0->cctx_16 && !m[0].acts.bridges[0].lnp_16 &&
                 m[1].dacts.vit->layers[0].f && !m[1].dacts.vit->layers[0].f_16,
             "%s: storage on: bf16 slots (ViT y1 y2 ctx f, text ctx f, cross ctx cctx f, "
             "ln_post), fp32 gradients; off: fp32 slots", what);
}

/* FULL or CHECKPOINT: parameter gradients of towers + two cross rounds with dropout. */
static void check_act16_grads(bt_act_mode mode, const char *route) {
    char what[128];
    snprintf(what, sizeof what, "5: %s, %s, bf16 storage on vs off", route,
             bt_act_mode_name(mode));
    bt_model m[2];
    if (!act16_pair(m, mode, what)) return;
    inputs in;
    inputs_make(&in, &m[0].cfg, 6, 3, 14, 8);
    for (int v = 0; v < 2; v++) bt_model_set_dropout(&m[v], 1, 1234, 5);
    if (backward_rounds(&m[0], &in, what, 0) && backward_rounds(&m[1], &in, what, 0)) {
        check_act16_slots(m, what);
        char name[256];
        snprintf(name, sizeof name, "%s: parameter gradients bit for bit (%zu)", what,
                 m[0].table.numel);
        tu_check_bytes_equal(name, m[1].grads, m[0].grads, m[0].table.numel * sizeof(float));
        snprintf(name, sizeof name, "%s: outputs of the last pass bit for bit", what);
        snap s[2] = {{0}, {0}};
        for (int v = 0; v < 2; v++) snap_outputs(&s[v], &m[v]);
        if (tu_check(s[0].n == s[1].n && s[0].n > 0, "%s: %zu outputs", what, s[0].n))
            tu_check_bytes_equal(name, s[1].x, s[0].x, s[0].n * sizeof(float));
        free(s[0].x), free(s[1].x);
    }
    if (mode == BT_ACTS_FULL) {
        /* control: the backward reads the stored bf16 values: one flipped mantissa bit of a
         * QuickGELU output changes the gradients */
        float *want = malloc(m[1].table.numel * sizeof(float));
        memcpy(want, m[1].grads, m[1].table.numel * sizeof(float));
        bt_zero_grad(&m[1]);
        bt_status st = run_towers(&m[1], &in);
        if (st == BT_OK) st = bt_cross_forward_pairs(&m[1], in.pairs, in.P / 2);
        if (tu_check(st == BT_OK, "%s control: forward", what)) {
            fill_output_grads(&m[1], 31, 1);
            fill_output_grads(&m[1], 41, 0);
            bt_cross_backward_pairs(&m[1]);
            m[1].acts.vit->layers[0].f_16[3] ^= 1;
            bt_towers_backward(&m[1]);
            tu_check(memcmp(m[1].grads, want, m[1].table.numel * sizeof(float)) != 0,
                     "%s control: one flipped bit of a stored activation changes the gradients",
                     what);
        }
        free(want);
    }
    free(in.pix);
    bt_model_free(&m[0]);
    bt_model_free(&m[1]);
}

/* FORWARD_ONLY: the outputs of two rounds of different shapes. */
static void check_act16_forward_only(const char *route) {
    char what[128];
    snprintf(what, sizeof what, "5: %s, forward-only, bf16 storage on vs off", route);
    bt_model m[2];
    if (!act16_pair(m, BT_ACTS_FORWARD_ONLY, what)) return;
    inputs a, b;
    inputs_make(&a, &m[0].cfg, 6, 3, 10, 5);
    inputs_make(&b, &m[0].cfg, 3, 4, 5, 6);
    snap s[2] = {{0}, {0}};
    int ok = 1;
    for (int v = 0; v < 2 && ok; v++)
        ok = forward_rounds(&m[v], &a, &s[v], what) && forward_rounds(&m[v], &b, &s[v], what);
    if (ok && tu_check(s[0].n == s[1].n && s[0].n > 0, "%s: %zu outputs", what, s[0].n)) {
        char name[256];
        snprintf(name, sizeof name, "%s: outputs bit for bit (%zu values)", what, s[0].n);
        tu_check_bytes_equal(name, s[1].x, s[0].x, s[0].n * sizeof(float));
    }
    free(s[0].x), free(s[1].x), free(a.pix), free(b.pix);
    bt_model_free(&m[0]);
    bt_model_free(&m[1]);
}

/* Training steps (bt_train_step: AdamW, bf16 shadow refresh) in `mode`. */
static void check_act16_steps(bt_act_mode mode, const char *route) {
    char what[128];
    snprintf(what, sizeof what, "5: %s, %s, bf16 storage on vs off", route,
             bt_act_mode_name(mode));
    bt_model m[2];
    if (act16_pair(m, mode, what)) compare_steps(m, what);
}

/* --- 10: the bf16 shadow dropped == kept, bit for bit -------------------------------------
 * (model.h bt_model_drop_bf16_shadow) Two bf16 tiny models in CHECKPOINT mode, one of them
 * without its shadow: three bt_train_step steps (forward, recompute, backward, AdamW without
 * the shadow write) give the same losses and weights. Run on each of section 5's routes. */
static void check_shadow_dropped(const char *route) {
    char what[128];
    snprintf(what, sizeof what, "10: %s, checkpoint, bf16 shadow dropped vs kept", route);
    bt_model m[2];
    if (!model_pair_make(&m[0], BT_ACTS_CHECKPOINT, &m[1], BT_ACTS_CHECKPOINT, CFG_TINY,
                         BT_PRECISION_BF16))
        return;
    const int had = m[1].params_bf16 != NULL;
    bt_model_drop_bf16_shadow(&m[1]);
    tu_check(had && m[0].params_bf16 && !m[1].params_bf16,
             "%s: a shadow before, none after (model 1), model 0 keeps its", what);
    compare_steps(m, what);
}

static size_t align64(size_t bytes) { return (bytes + 63) / 64 * 64; }

/* fp32 slot of n floats minus the bf16 slot that replaces it (both 64-byte aligned) */
static size_t saved(size_t n) { return align64(n * 4) - align64(n * 2); }

/* FULL: the arenas shrink by exactly the converted slots' halves less the two staging
 * buffers, derived here from the layout rule (every slot 64-byte aligned) and the model.h
 * list; bt_model_activation_bytes_mode still equals what is allocated. */
static void check_act16_bytes(const char *route) {
    enum { Bt = 6, Bi = 3, P = 7, Pm = 2 };
    char what[128];
    snprintf(what, sizeof what, "5: %s, full, activation bytes", route);
    bt_model m[2];
    if (!act16_pair(m, BT_ACTS_FULL, what)) return;
    const bt_model_config *c = &m[0].cfg;
    const size_t Ht = (size_t)c->text_hidden, It = (size_t)c->text_intermediate;
    const size_t Hv = (size_t)c->vision_hidden, Np = (size_t)c->np, H = (size_t)c->hidden;
    const size_t Nt = Bt * T, Nv = Bi * Np, Pt = P * T, Pv = P * Np;
    const size_t Lt = (size_t)c->text_layers, Lv = (size_t)c->vision_layers;
    const size_t X = (size_t)c->cross_layers;
    size_t want = Lt * (saved(Nt * Ht) + saved(Nt * It)) +                   /* text ctx, f */
                  Lv * (3 * saved(Nv * Hv) + saved(Nv * 4 * Hv)) +           /* y1 y2 ctx, f */
                  X * saved(Nv * Hv) +                                       /* ln_post */
                  X * (2 * saved(Pt * H) + saved(Pt * It)) +                 /* cross text */
                  X * (2 * saved(Pv * H) + saved(Pv * It));                  /* cross image */
    want -= align64((Nt * Ht > Nv * Hv ? Nt * Ht : Nv * Hv) * 4) +           /* staging */
            align64((Pt > Pv ? Pt : Pv) * H * 4);
    size_t got[2];
    for (int v = 0; v < 2; v++) {
        bt_status s = bt_model_reserve_phases(&m[v], Bt, Bi, P, Pm, T);
        got[v] = s == BT_OK ? arenas_bytes(&m[v]) : 0;
    }
    tu_check(got[0] > got[1] && got[0] - got[1] == want,
             "%s: storage on saves %zu bytes of %zu (expected %zu from the layout)", what,
             got[0] - got[1], got[0], want);
    const char *env = getenv("BT_ACT_BF16");
    if (!env || strcmp(env, "0") != 0)
        tu_check(bt_model_activation_bytes_mode(c, BT_HEADS_ALL, BT_PRECISION_BF16, BT_ACTS_FULL,
                                                Bt, Bi, P, Pm, T) == got[1],
                 "%s: bt_model_activation_bytes_mode = bytes reserved with the storage on",
                 what);
    bt_model_free(&m[0]);
    bt_model_free(&m[1]);
}

/* The base model at batch 8, T 40 (ITC head, bench_step's shapes), bf16, storage on and off
 * (BT_ACT_BF16 set for the count): printed, and the storage saves in every mode. */
static void check_act16_base(void) {
    bt_model_config c;
    if (!base_config(&c)) return;
    const char *env = getenv("BT_ACT_BF16");
    char *saved_env = env ? strdup(env) : NULL;
    size_t b[2][3];
    for (int on = 0; on < 2; on++) {
        tu_setenv("BT_ACT_BF16", on ? "1" : "0", 1);
        for (int mode = 0; mode < 3; mode++)
            b[on][mode] = bt_model_activation_bytes_mode(&c, BT_HEADS_ITC, BT_PRECISION_BF16,
                                                         (bt_act_mode)mode, 8, 8, 8, 0, 40);
    }
    if (saved_env) tu_setenv("BT_ACT_BF16", saved_env, 1);
    else tu_unsetenv("BT_ACT_BF16");
    free(saved_env);
    printf("# base B 8 T 40 ITC bf16 activations, fp32 -> bf16 storage: full %.3f -> %.3f GB, "
           "checkpoint %.3f -> %.3f GB, forward-only %.3f -> %.3f GB\n", b[0][0] * 1e-9,
           b[1][0] * 1e-9, b[0][1] * 1e-9, b[1][1] * 1e-9, b[0][2] * 1e-9, b[1][2] * 1e-9);
    tu_check(b[1][0] < b[0][0] && b[1][1] < b[0][1] && b[1][2] < b[0][2],
             "5: base: bf16 storage needs fewer activation bytes in every mode");
}

/* BT_ACT_BF16: "0" turns the storage off at bt_model_init, another value than 0/1 is refused
 * with a message naming the variable. */
/* A setting bt_model_init reads from the environment (section 5: BT_ACT_BF16, 7:
 * BT_ATTENTION_PROBS): var=good initializes a model on which effect(m) == want ("what": the
 * effect's name); var=yes is refused naming the variable and, in the message, `values`. The
 * variable is restored afterwards. */
static void check_init_env(const char *section, const char *var, const char *good,
                           int (*effect)(const bt_model *), int want, const char *what,
                           bt_precision prec, const char *values) {
    const char *env = getenv(var);
    char *saved_env = env ? strdup(env) : NULL;
    bt_model_config c;
    if (fd_tiny_config(&c)) {
        bt_model m;
        tu_setenv(var, good, 1);
        if (tu_check(bt_model_init(&m, &c, BT_HEADS_ALL, prec) == BT_OK, "%s: %s=%s: init: %s",
                     section, var, good, bt_error_message())) {
            tu_check(!effect(&m) == !want, "%s: %s=%s: %s", section, var, good, what);
            bt_model_free(&m);
        }
        tu_setenv(var, "yes", 1);
        char named[96];
        snprintf(named, sizeof named, "%s=yes", var);
        const bt_status st = bt_model_init(&m, &c, BT_HEADS_ALL, prec);
        tu_check(st != BT_OK && strstr(bt_error_message(), named) &&
                     strstr(bt_error_message(), values),
                 "%s: %s refused naming the variable and the values (%s)", section, named,
                 st != BT_OK ? bt_error_message() : "accepted");
        if (st == BT_OK) bt_model_free(&m);
    }
    if (saved_env) tu_setenv(var, saved_env, 1);
    else tu_unsetenv(var);
    free(saved_env);
}

static void check_act16_env(void) {
    check_init_env("5", "BT_ACT_BF16", "0", bt_model_act_bf16, 0, "storage off",
                   BT_PRECISION_BF16, "expected 0");
}

static void check_act16(void) {
    const gemm_backend be = gemm_get_backend();
    struct {
        gemm_backend backend;
        gemm_bf16_route route;
        const char *name;
    } runs[] = {{be, GEMM_BF16_WIDENED, "widened"},
                {be, GEMM_BF16_NATIVE, "native"},
                {GEMM_BACKEND_REF, GEMM_BF16_WIDENED, "widened, ref GEMM"}};
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        if (runs[i].route == GEMM_BF16_NATIVE && !(be == GEMM_BACKEND_ONEDNN && gemm_cpu_has_bf16())) {
            printf("# 5: no native bf16 GEMMs here (backend %s): the native route not run\n",
                   gemm_backend_name(be));
            continue;
        }
        if (runs[i].backend == GEMM_BACKEND_REF && be == GEMM_BACKEND_REF) continue;
        gemm_set_backend(runs[i].backend);
        gemm_bf16_route_request(runs[i].route);
        if (!tu_check(gemm_bf16_route_active() == runs[i].route, "5: %s route active",
                      runs[i].name))
            continue;
        check_act16_grads(BT_ACTS_FULL, runs[i].name);
        check_act16_grads(BT_ACTS_CHECKPOINT, runs[i].name);
        check_act16_forward_only(runs[i].name);
        check_act16_bytes(runs[i].name);
        if (runs[i].backend != GEMM_BACKEND_REF) {
            check_act16_steps(BT_ACTS_FULL, runs[i].name);
            check_act16_steps(BT_ACTS_CHECKPOINT, runs[i].name);
            check_shadow_dropped(runs[i].name);
        }
    }
    gemm_set_backend(be);
    gemm_bf16_route_request(GEMM_BF16_WIDENED);
    check_act16_env();
    check_act16_base();
    gemm_init_from_env(); /* the route the environment asks for again */
}

/* --- 7: attention probabilities recomputed == kept, bit for bit ---------------------------
 * (model.h "Attention probabilities") m[0] keeps P, m[1] (the default) recomputes it in the
 * backward. The kernel-level check and its control (a recompute without the key bias
 * differs) are test_ops_fast's; here the model's layouts and call sites. */

/* Sections 7 and 8: the towers and two cross rounds, forward and backward, on m[0] and m[1]
 * (the same weights; dropout on; 6 texts, 3 images, 14 pairs): 1 when both ran. */
static int pair_backward(bt_model m[2], inputs *in, const char *what) {
    inputs_make(in, &m[0].cfg, 6, 3, 14, 8);
    for (int v = 0; v < 2; v++) bt_model_set_dropout(&m[v], 1, 1234, 5);
    return backward_rounds(&m[0], in, what, 0) && backward_rounds(&m[1], in, what, 0);
}

/* After pair_backward: the same parameter gradients, bit for bit; frees both and in. */
static void pair_grads_equal_free(bt_model m[2], inputs *in, const char *what, int ran) {
    if (ran) {
        char name[256];
        snprintf(name, sizeof name, "%s: parameter gradients", what);
        tu_check_bytes_equal(name, m[1].grads, m[0].grads, m[0].table.numel * sizeof(float));
    }
    free(in->pix);
    bt_model_free(&m[0]);
    bt_model_free(&m[1]);
}

static int probs_pair(bt_model m[2], cfg_kind k, bt_precision prec, bt_act_mode mode) {
    if (!model_pair_make(&m[0], mode, &m[1], mode, k, prec)) return 0;
    bt_model_set_keep_probs(&m[0], 1);
    bt_model_set_keep_probs(&m[1], 0);
    return 1;
}

static void check_probs_grads(cfg_kind k, bt_precision prec, bt_act_mode mode) {
    char what[128];
    snprintf(what, sizeof what, "7: %s %s %s dropout on, P recomputed vs kept", cfg_names[k],
             prec == BT_PRECISION_BF16 ? "bf16" : "fp32", bt_act_mode_name(mode));
    bt_model m[2];
    if (!probs_pair(m, k, prec, mode)) return;
    inputs in;
    const int ran = pair_backward(m, &in, what);
    if (ran)
        tu_check(m[0].acts.vit->layers[0].probs && m[0].acts.text->layers[0].probs &&
                     m[0].acts.xi[0].probs && m[0].acts.xi[0].cprobs &&
                     !m[1].acts.vit->layers[0].probs && !m[1].acts.text->layers[0].probs &&
                     !m[1].acts.xi[0].probs && !m[1].acts.xi[0].cprobs,
                 "%s: probs slots (ViT, text, cross self and cross) only where kept", what);
    pair_grads_equal_free(m, &in, what, ran);
}

/* align64(4 n) summed over every attention's probabilities of the full layout (tiny and
 * base: the text tower's Lt layers, the ViT's Lv, and per cross layer and side a self and a
 * cross attention over the P pairs, with the text heads) */
static size_t probs_bytes(const bt_model_config *c, size_t Bt, size_t Bi, size_t P, size_t Tt) {
    const size_t NHt = (size_t)c->text_heads, NHv = (size_t)c->vision_heads, Np = (size_t)c->np;
    size_t b = (size_t)c->text_layers * align64(4 * Bt * NHt * Tt * Tt) +
               (size_t)c->vision_layers * align64(4 * Bi * NHv * Np * Np);
    b += (size_t)c->cross_layers *
         (align64(4 * P * NHt * Tt * Tt) + align64(4 * P * NHt * Tt * Np) +
          align64(4 * P * NHt * Np * Np) + align64(4 * P * NHt * Np * Tt));
    return b;
}

static void check_probs_bytes(void) {
    enum { Bt = 6, Bi = 3, P = 7, Pm = 2 };
    bt_model m[2];
    if (!probs_pair(m, CFG_TINY, BT_PRECISION_FP32, BT_ACTS_FULL)) return;
    size_t got[2];
    for (int v = 0; v < 2; v++) {
        const bt_status s = bt_model_reserve_phases(&m[v], Bt, Bi, P, Pm, T);
        tu_check(s == BT_OK, "7: reserve: %s", s ? bt_error_message() : "ok");
        got[v] = arenas_bytes(&m[v]);
    }
    const size_t want = probs_bytes(&m[0].cfg, Bt, Bi, P, T);
    tu_check(got[0] - got[1] == want,
             "7: tiny full: kept - recomputed = %zu bytes = the probabilities' slots (%zu)",
             got[0] - got[1], want);
    bt_model_free(&m[0]);
    bt_model_free(&m[1]);
}

static int keeps_probs(const bt_model *m) { return m->keep_probs; }

/* BT_ATTENTION_PROBS=keep keeps them; another value is refused naming the variable */
static void check_probs_env(void) {
    check_init_env("7", "BT_ATTENTION_PROBS", "keep", keeps_probs, 1, "kept", BT_PRECISION_FP32,
                   "'recompute'");
}

static void check_probs(void) {
    check_probs_env();
    check_probs_grads(CFG_TINY, BT_PRECISION_FP32, BT_ACTS_FULL);
    check_probs_grads(CFG_TINY, BT_PRECISION_FP32, BT_ACTS_CHECKPOINT);
    check_probs_grads(CFG_TINY, BT_PRECISION_BF16, BT_ACTS_FULL);
    check_probs_grads(CFG_FIXTURE, BT_PRECISION_FP32, BT_ACTS_FULL);
    check_probs_bytes();
    bt_model m[2];
    if (probs_pair(m, CFG_TINY, BT_PRECISION_FP32, BT_ACTS_FULL))
        compare_steps(m, "7: P recomputed vs kept");
    /* base, batch 8, T 40: what the recompute saves, printed */
    bt_model_config c;
    if (!base_config(&c)) return;
    printf("# base B 8 T 40: attention probabilities of the full layout %.2f GB\n",
           probs_bytes(&c, 8, 8, 8, 40) * 1e-9);
}

/* --- 8: FULL with the layers' internal gradients shared == one per layer, bit for bit ------
 * (model.h "Memory modes") m[0] gives every layer its own gradient slots, m[1] (the default)
 * one shared scratch per kind of layer. */

static int share_pair(bt_model m[2], cfg_kind k, bt_precision prec) {
    if (!model_pair_make(&m[0], BT_ACTS_FULL, &m[1], BT_ACTS_FULL, k, prec)) return 0;
    bt_model_set_share_layer_grads(&m[0], 0);
    bt_model_set_share_layer_grads(&m[1], 1);
    return 1;
}

static void check_share_grads(cfg_kind k, bt_precision prec) {
    char what[128];
    snprintf(what, sizeof what, "8: %s %s dropout on, layer gradients shared vs own",
             cfg_names[k], prec == BT_PRECISION_BF16 ? "bf16" : "fp32");
    bt_model m[2];
    if (!share_pair(m, k, prec)) return;
    inputs in;
    const int ran = pair_backward(m, &in, what); /* its pair phase grows the shared scratch */
    if (ran)
        tu_check(m[0].layer_dact.bytes == 0 && m[1].layer_dact.bytes > 0 &&
                     m[1].dacts.vit->layers[1].qkv == m[1].dacts.vit->layers[0].qkv &&
                     m[0].dacts.vit->layers[1].qkv != m[0].dacts.vit->layers[0].qkv,
                 "%s: one layer gradient scratch (%zu bytes) only where shared", what,
                 m[1].layer_dact.bytes);
    pair_grads_equal_free(m, &in, what, ran);
}

static void check_share(void) {
    check_share_grads(CFG_TINY, BT_PRECISION_FP32);
    check_share_grads(CFG_TINY, BT_PRECISION_BF16);
    check_share_grads(CFG_FIXTURE, BT_PRECISION_FP32);
    bt_model m[2];
    if (share_pair(m, CFG_TINY, BT_PRECISION_FP32))
        compare_steps(m, "8: layer gradients shared vs own");
    /* the sizes: the estimate follows (tiny), and what sharing saves at base, printed */
    enum { Bt = 6, Bi = 3, P = 7, Pm = 2 };
    if (share_pair(m, CFG_TINY, BT_PRECISION_FP32)) {
        const size_t want = bt_model_activation_bytes_mode(&m[1].cfg, BT_HEADS_ALL,
                                                           BT_PRECISION_FP32, BT_ACTS_FULL, Bt,
                                                           Bi, P, Pm, T);
        size_t got[2];
        for (int v = 0; v < 2; v++) {
            tu_check(bt_model_reserve_phases(&m[v], Bt, Bi, P, Pm, T) == BT_OK, "8: reserve");
            got[v] = arenas_bytes(&m[v]);
        }
        tu_check(got[1] == want && got[1] < got[0],
                 "8: tiny full: shared %zu bytes (= the estimate %zu) < own %zu", got[1], want,
                 got[0]);
        bt_model_free(&m[0]);
        bt_model_free(&m[1]);
    }
}

/* --- 4: a backward in forward-only mode aborts with a message -------------------------------
 * Run in a fresh process (this binary re-executed with --refuse N: OpenMP's threads do not
 * survive a fork). */

static int refuse_child(int free_grads) {
    bt_model m;
    if (!model_make(&m, CFG_TINY, BT_PRECISION_FP32, BT_ACTS_FORWARD_ONLY)) return 3;
    if (free_grads) {
        bt_model_set_act_mode(&m, BT_ACTS_FULL);
        bt_model_free_grads(&m);
    }
    inputs in;
    inputs_make(&in, &m.cfg, 2, 2, 2, 1);
    if (run_towers(&m, &in) != BT_OK) return 4;
    bt_towers_backward(&m);
    return 0; /* not reached when the backward refuses */
}

static void check_backward_refused(int free_grads) {
    int fd[2];
    if (!tu_check(pipe(fd) == 0, "pipe")) return;
    fflush(stdout);
    const pid_t pid = fork();
    if (pid == 0) {
        dup2(fd[1], 2);
        close(fd[0]);
        if (!freopen("/dev/null", "w", stdout)) _exit(6);
        execl("/proc/self/exe", "test_model_memory", "--refuse", free_grads ? "1" : "0",
              (char *)NULL);
        _exit(5);
    }
    close(fd[1]);
    char buf[1024] = {0};
    size_t n = 0;
    ssize_t got;
    while (n + 1 < sizeof buf && (got = read(fd[0], buf + n, sizeof buf - 1 - n)) > 0)
        n += (size_t)got;
    close(fd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    tu_check(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT &&
                 strstr(buf, "bt_towers_backward on a model in forward-only mode"),
             "4: backward after %s aborts naming the mode (stderr: %.200s)",
             free_grads ? "bt_model_free_grads" : "a forward-only forward", buf);
}

/* --- 9: packed weights --------------------------------------------------------------------- */

/* A model that never trains with its weights packed (model.h bt_model_pack_weights) against
 * the same model with them row-major: the same outputs bit for bit, over two forward-only
 * rounds; in bf16 (the shadow packed) again after the master weights change and
 * bt_model_refresh_bf16 (which must pack them again; in fp32 the master itself is packed and
 * may not change). Where packing is possible (bf16: oneDNN's native route with Blocked B;
 * fp32: oneDNN's fp32 brgemm and the fast kernels) some tensors must be packed, so the
 * comparison is not between two plain models; elsewhere none may be. */
static void check_packed_weights(cfg_kind k, bt_precision prec) {
    const int bf16 = prec == BT_PRECISION_BF16;
    char what[96];
    snprintf(what, sizeof what, "9: %s %s packed weights", cfg_names[k], bf16 ? "bf16" : "fp32");
    bt_model plain, packed;
    if (!model_pair_make(&plain, BT_ACTS_FORWARD_ONLY, &packed, BT_ACTS_FORWARD_ONLY, k, prec))
        return;
    bt_model_free_grads(&plain);
    bt_model_free_grads(&packed);
    const size_t tensors = bt_model_pack_weights(&packed);
    const int shadow = packed.params_bf16 != NULL; /* else fp32 products on the master */
    const int can = gemm_get_backend() == GEMM_BACKEND_ONEDNN &&
                    (shadow ? gemm_bf16_route_active() == GEMM_BF16_NATIVE && gemm_pack_b_active()
                            : gemm_split_k_isa() && strcmp(ops_kernels_name(), "fast") == 0);
    tu_check(bt_model_pack_weights(&packed) == tensors,
             "%s: a second call counts the same %zu tensors (packed once, as before)", what,
             tensors);
    if (can)
        tu_check(tensors > 0, "%s: %zu tensors packed", what, tensors);
    else
        tu_check(tensors == 0, "%s: nothing packed where products cannot read it (%zu tensors)",
                 what, tensors);
    if (!can)
        printf("# NOTE: %s: nothing can be packed here (%s, bf16 route %s, %s kernels); the "
               "comparison below is between two plain models\n", what, gemm_cpu_isa_name(),
               gemm_bf16_route_name(gemm_bf16_route_active()), ops_kernels_name());
    inputs a, b;
    inputs_make(&a, &plain.cfg, 6, 3, 10, 5);
    inputs_make(&b, &plain.cfg, 3, 4, 5, 6);
    for (int round = 0; round < 1 + shadow; round++) {
        if (round == 1) { /* new master weights, the same on both; the refresh packs again */
            for (int i = 0; i < 2; i++) {
                bt_model *m = i ? &packed : &plain;
                tu_rng r;
                tu_rng_seed(&r, 31);
                fd_move_off_init(m, &r);
                bt_model_refresh_bf16(m);
            }
        }
        snap sp = {0}, sk = {0};
        const int ok = forward_rounds(&plain, &a, &sp, what) &&
                       forward_rounds(&plain, &b, &sp, what) &&
                       forward_rounds(&packed, &a, &sk, what) &&
                       forward_rounds(&packed, &b, &sk, what);
        if (ok && tu_check(sp.n == sk.n && sp.n > 0, "%s: %zu vs %zu outputs", what, sp.n, sk.n)) {
            char name[256];
            snprintf(name, sizeof name, "%s: packed outputs == row-major outputs (%zu values%s)",
                     what, sp.n, round ? ", after new weights and a refresh" : "");
            tu_check_bytes_equal(name, sk.x, sp.x, sp.n * sizeof *sp.x);
        }
        free(sp.x);
        free(sk.x);
    }
    free(a.pix);
    free(b.pix);
    bt_model_free(&plain);
    bt_model_free(&packed);
}

/* --- 12: huge pages change the backing, never the bits ------------------------------------ */

/* The machine's THP setting (the bracketed word of /sys/kernel/mm/transparent_hugepage/enabled:
 * "always", "madvise" or "never"), or "absent" on a kernel without THP. */
static const char *thp_setting(char *buf, size_t cap) {
    snprintf(buf, cap, "absent");
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "re");
    if (!f) return buf;
    char line[128] = {0};
    if (fgets(line, sizeof line, f)) {
        const char *a = strchr(line, '['), *b = a ? strchr(a, ']') : NULL;
        if (a && b) snprintf(buf, cap, "%.*s", (int)(b - a - 1), a + 1);
    }
    fclose(f);
    return buf;
}

/* THPeligible of the mapping that holds p (/proc/self/smaps): 1, 0, or -1 when not found. */
static int thp_eligible(const void *p) {
    FILE *f = fopen("/proc/self/smaps", "re");
    if (!f) return -1;
    const unsigned long a = (unsigned long)(uintptr_t)p;
    char line[512];
    int in = 0, r = -1;
    while (r < 0 && fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        int v;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) in = a >= lo && a < hi;
        else if (in && sscanf(line, "THPeligible: %d", &v) == 1) r = v;
    }
    fclose(f);
    return r;
}

static int huge_granted; /* the machine's THP setting grants the advice */

static void huge_env(int v) { tu_setenv("BT_HUGE_PAGES", v ? "1" : "0", 1); }

/* Each buffer mem.h advises, above one huge page, in a mapping whose eligibility is what the
 * advice of model v (BT_HUGE_PAGES=v) and the machine's setting say. */
static void huge_check(int v, const bt_model *m, const bt_trainer *tr) {
    const size_t n = m->table.numel;
    const struct {
        const char *name;
        const void *p;
        size_t bytes;
    } bufs[] = {{"weights", m->params, n * 4},         {"bf16 weights", m->params_bf16, n * 2},
                {"gradients", m->grads, n * 4},        {"first moment", tr->opt.m, n * 4},
                {"second moment", tr->opt.v, n * 4},   {"pair arena", m->pair_act.mem,
                                                        m->pair_act.bytes}};
    const int want = v == 1 && huge_granted;
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
        if (bufs[i].p == m->params_bf16 && !m->params_bf16) { /* a route of fp32 products */
            printf("# 12: model %d: no bf16 weight copy on this GEMM route (fp32 products)\n", v);
            continue;
        }
        if (!tu_check(bufs[i].p && bufs[i].bytes >= BT_HUGE_PAGE_BYTES,
                      "12: %s: %zu bytes, at least one huge page (else nothing is compared)",
                      bufs[i].name, bufs[i].bytes))
            continue;
        const int got = thp_eligible(bufs[i].p);
        tu_check(got == want, "12: model %s: %s THPeligible %d (expected %d)",
                 v ? "BT_HUGE_PAGES=1" : "BT_HUGE_PAGES=0", bufs[i].name, got, want);
    }
}

static void check_huge_pages(void) {
    char setting[32];
    thp_setting(setting, sizeof setting);
    huge_granted = !strcmp(setting, "madvise") || !strcmp(setting, "always");
    printf("# 12: this machine's THP setting: %s (%s)\n", setting,
           huge_granted ? "the advice is granted" : "no huge pages either way");
    const char *const saved_env = getenv("BT_HUGE_PAGES");
    char keep[16] = "";
    if (saved_env) snprintf(keep, sizeof keep, "%s", saved_env);
    bt_model m[2];
    bt_model_config c;
    int ok = config_of(&c, CFG_SYNTHETIC);
    c.vocab_size = 16384; /* the word embedding and the MLM decoder: 4 MiB each in fp32 */
    for (int v = 0; v < 2 && ok; v++) {
        huge_env(v);
        ok = model_make_config(&m[v], CFG_SYNTHETIC, &c, BT_PRECISION_BF16, BT_ACTS_FULL,
                               BT_HEADS_ALL);
        if (!ok && v) bt_model_free(&m[0]);
    }
    if (ok) {
        compare_before = huge_env;
        compare_after = huge_check;
        compare_steps(m, "12: BT_HUGE_PAGES=1 vs 0");
        compare_before = NULL;
        compare_after = NULL;
    }
    if (saved_env) tu_setenv("BT_HUGE_PAGES", keep, 1);
    else tu_unsetenv("BT_HUGE_PAGES");
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--refuse") == 0) return refuse_child(atoi(argv[2]));
    const gemm_backend be = gemm_get_backend();
    for (int ref = 0; ref < 2; ref++) {
        if (ref) {
            if (be == GEMM_BACKEND_REF) break;
            gemm_set_backend(GEMM_BACKEND_REF);
        }
        printf("# GEMM backend %s\n", gemm_backend_name(gemm_get_backend()));
        check_forward_only(CFG_TINY, BT_PRECISION_FP32, 0);
        check_forward_only(CFG_TINY, BT_PRECISION_FP32, 1);
        check_checkpoint_grads(CFG_TINY, BT_PRECISION_FP32);
        if (!ref) {
            check_forward_only(CFG_TINY, BT_PRECISION_BF16, 0);
            check_forward_only(CFG_SYNTHETIC, BT_PRECISION_FP32, 0);
            check_forward_only(CFG_FIXTURE, BT_PRECISION_FP32, 0);
            check_forward_only(CFG_FIXTURE_SCALED, BT_PRECISION_FP32, 1);
            check_checkpoint_grads(CFG_TINY, BT_PRECISION_BF16);
            check_checkpoint_grads(CFG_SYNTHETIC, BT_PRECISION_FP32);
            check_checkpoint_grads(CFG_FIXTURE, BT_PRECISION_FP32);
            check_checkpoint_steps();
        }
    }
    gemm_set_backend(be);
    for (int prec = 0; prec < 2; prec++)
        for (int mode = BT_ACTS_FULL; mode <= BT_ACTS_CHECKPOINT; mode++)
            check_assigned_slots(prec ? BT_PRECISION_BF16 : BT_PRECISION_FP32, (bt_act_mode)mode);
    check_sizes();
    check_act16();
    check_probs();
    check_share();
    check_backward_refused(0);
    check_backward_refused(1);
    check_packed_weights(CFG_SYNTHETIC, BT_PRECISION_BF16);
    check_packed_weights(CFG_TINY, BT_PRECISION_BF16);
    check_packed_weights(CFG_SYNTHETIC, BT_PRECISION_FP32);
    check_packed_weights(CFG_TINY, BT_PRECISION_FP32);
    for (int ref = 0; ref < 2; ref++) {
        if (ref) {
            if (be == GEMM_BACKEND_REF) break;
            gemm_set_backend(GEMM_BACKEND_REF);
        }
        const unsigned no_mlm = BT_HEADS_ITC | BT_HEADS_ITM;
        check_cross_features(CFG_TINY, BT_PRECISION_FP32, BT_HEADS_ALL);
        check_cross_features(CFG_TINY, BT_PRECISION_BF16, BT_HEADS_ALL);
        check_cross_features(CFG_SYNTHETIC, BT_PRECISION_FP32, BT_HEADS_ALL);
        check_cross_features(CFG_TINY, BT_PRECISION_FP32, no_mlm);
        check_cross_features(CFG_TINY, BT_PRECISION_BF16, no_mlm);
    }
    gemm_set_backend(be);
    check_huge_pages();
    return tu_finish();
}
