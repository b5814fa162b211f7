/* test_grad_events.c: the gradients-final events of the backward (model.h "Gradients-final
 * events"), the contract the data-parallel step relies on to launch each gradient bucket
 * while the backward still runs (src/train/step.c).
 *
 * On the tiny config (random init moved off its zero/one values), in the trainer's shape
 * (2B texts = captions + masked copies, B images, positive / negative / MLM pairs, dropout
 * on), with the parameter gradients pre-filled with random values (a later micro-batch of
 * an accumulation) and random gradients in the loss slots (d_itc_*, d_itm_logits,
 * d_mlm_logits), the hook copies, at each event, the gradient elements of the fields
 * bt_param_grad_event assigns to that event (field repetitions: that layer's, or for a link
 * tower the cross layer it feeds). After bt_cross_backward_pairs + bt_towers_backward:
 *   1. the events fired are exactly PAIR_HEADS, cross layers X-1..0, ITC_HEADS, BRIDGES,
 *      text layers Lt-1..0, TEXT_EMB, vision blocks Lv-1..0, VIT_EMB, each once, at strictly
 *      increasing bt_grad_event_order positions 0 .. X+Lt+Lv+4;
 *   2. every claimed element's final gradient equals its copy at event time, bit for bit
 *      (nothing wrote it after its event);
 *   3. every element no event claims (fields mapped to BT_GRAD_EV_NONE, alignment padding)
 *      is bit for bit what it was before the backward started: the events cover every
 *      element the backward writes;
 *   4. every event claims elements the backward did change (the mapping is not vacuous);
 *   5. the trainer's bucket schedule (bt_step_overlap_schedule; buckets of 997 and 4096
 *      floats, which cut fields and layers anywhere, and one bucket): buckets launched as
 *      step.c launches them (those of position -1 before the backward, the others at their
 *      event) are a permutation of all buckets in non-decreasing position, all launched,
 *      and each bucket's copy at launch equals its final gradients bit for bit;
 *   6. control: claiming each event's fields, and launching each bucket, one event too
 *      early is caught by checks 2 and 5, so the comparisons can fail.
 * Run in fp32 and bf16, with gradient checkpointing (BT_ACTS_CHECKPOINT: each layer's
 * backward first recomputes its forward), and with the scaled_add and interpolate link
 * towers (their scalars). Exact comparisons: the claim is about which
 * writes happen when, not about values, so no tolerance applies.
 *
 * Deliberately not here: MPI (tests/test_dist.c checks the distributed step, whose buckets
 * follow this schedule, against one process). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/config.h"
#include "kernels/gemm.h"
#include "model/model.h"
#include "model/params.h"
#include "test_model_fd.h"
#include "test_util.h"
#include "train/step.h"

enum { B = 3, T = 8, MAX_EVENTS = 256 };

typedef struct recorder {
    bt_model *m;
    int shift;            /* control: claim the fields of the NEXT event in order */
    int n_events, orders[MAX_EVENTS];
    float *copy;          /* (numel) gradient copies taken at the claiming event */
    unsigned char *claimed; /* (numel) times an element was claimed */
    int *order_of;        /* (numel) firing position of the claiming event */
    /* the trainer's bucket schedule (bt_step_overlap_schedule), "launched" by copying */
    size_t bucket, nb, next, *border;
    int *bpos;
    float *sent;          /* (numel) each bucket's gradients at its launch */
} recorder;

/* "launches" (copies into r->sent) the scheduled buckets waiting for positions <= pos, as
 * step.c's launch_final starts them */
static void launch(recorder *r, int pos) {
    const size_t n = r->m->table.numel;
    while (r->next < r->nb && r->bpos[r->next] <= pos) {
        const size_t lo = r->border[r->next++] * r->bucket;
        const size_t len = n - lo < r->bucket ? n - lo : r->bucket;
        memcpy(r->sent + lo, r->m->grads + lo, len * sizeof *r->sent);
    }
}

/* copies the gradient elements of the field repetitions final at firing position `pos`
 * (bt_param_grad_event, bt_grad_event_order) and marks them claimed at position `order` */
static void claim(recorder *r, int pos, int order) {
    const bt_param_table *t = &r->m->table;
    for (int id = 0; id < BT_P_COUNT; id++) {
        const bt_param_field *f = &t->fields[id];
        for (int l = 0; f->present && l < f->reps; l++) {
            int layer;
            const bt_grad_event ev = bt_param_grad_event(&t->cfg, (bt_param_id)id, l, &layer);
            if (ev == BT_GRAD_EV_NONE || bt_grad_event_order(&t->cfg, ev, layer) != pos)
                continue;
            const size_t o = f->offset + (size_t)l * f->numel;
            memcpy(r->copy + o, r->m->grads + o, f->numel * sizeof *r->copy);
            for (size_t i = 0; i < f->numel; i++) {
                r->claimed[o + i]++;
                r->order_of[o + i] = order;
            }
        }
    }
}

static void on_final(void *ctx, bt_grad_event ev, int layer) {
    recorder *r = ctx;
    const int order = bt_grad_event_order(&r->m->cfg, ev, layer);
    if (r->n_events < MAX_EVENTS) r->orders[r->n_events] = order;
    r->n_events++;
    const int pos = r->shift ? order + 1 : order; /* the control claims one event early */
    claim(r, pos, order);
    launch(r, pos);
}

/* One backward with the hook and a bucket schedule of `bucket` floats; returns the failures
 * of checks 1-5 (shift: the number of claimed elements and bucket elements whose copy
 * differs from the final value, the control). */
static size_t run(const bt_model_config *c, bt_precision prec, bt_act_mode mode, int shift,
                  size_t bucket) {
    bt_model m;
    if (!tu_check(bt_model_init(&m, c, BT_HEADS_ALL, prec) == BT_OK, "model init: %s",
                  bt_error_message()))
        return 1;
    tu_rng rng;
    tu_rng_seed(&rng, 4242);
    bt_model_init_params(&m, 11);
    fd_move_off_init(&m, &rng);
    bt_model_refresh_bf16(&m);
    bt_model_set_dropout(&m, 1, 77, 3);
    bt_model_set_act_mode(&m, mode);

    /* texts: B captions and their masked copies; B images */
    int32_t ids[2 * B * T], mask[2 * B * T];
    uint64_t tkeys[2 * B], ikeys[B];
    for (size_t b = 0; b < 2 * B; b++) {
        const size_t len = T - (b % B) % 3;
        for (size_t s = 0; s < T; s++) {
            ids[b * T + s] = s >= len ? c->pad_token_id
                             : s == 0 ? 0
                                      : 3 + (int32_t)(tu_rng_next(&rng) %
                                                      (uint64_t)(c->vocab_size - 3));
            mask[b * T + s] = s < len;
        }
        tkeys[b] = 100 + b;
    }
    const size_t npix = 3 * (size_t)c->image_size * (size_t)c->image_size;
    float *pix = malloc(B * npix * sizeof *pix);
    tu_fill_uniform_f32(&rng, pix, B * npix, -1.0f, 1.0f);
    for (size_t i = 0; i < B; i++) ikeys[i] = 900 + i;
    bt_text_input ti = {.B = 2 * B, .T = T, .input_ids = ids, .attention_mask = mask,
                        .sample_keys = tkeys};
    bt_image_input ii = {.B = B, .pixel_values = pix, .sample_keys = ikeys};
    size_t fails = 0;
    fails += !tu_check(bt_towers_forward(&m, &ti, &ii) == BT_OK, "towers: %s",
                       bt_error_message());
    /* pairs: positives, negative images, negative texts, MLM on the masked copies */
    bt_pair pairs[4 * B];
    size_t P = 0;
    for (int i = 0; i < B; i++) pairs[P++] = (bt_pair){i, i, 0};
    for (int i = 0; i < B; i++) pairs[P++] = (bt_pair){i, (i + 1) % B, 0};
    for (int i = 0; i < B; i++) pairs[P++] = (bt_pair){(i + 2) % B, i, 0};
    for (int i = 0; i < B; i++) pairs[P++] = (bt_pair){B + i, i, 1};
    fails += !tu_check(bt_cross_forward_pairs(&m, pairs, P) == BT_OK, "pairs: %s",
                       bt_error_message());
    const size_t C = (size_t)c->contrastive_hidden, V = (size_t)c->vocab_size;
    tu_fill_uniform_f32(&rng, m.d_itc_text, 2 * B * C, -0.1f, 0.1f);
    tu_fill_uniform_f32(&rng, m.d_itc_image, B * C, -0.1f, 0.1f);
    tu_fill_uniform_f32(&rng, m.d_itc_cross, P * C, -0.1f, 0.1f);
    tu_fill_uniform_f32(&rng, m.d_itm_logits, P * 2, -0.1f, 0.1f);
    tu_fill_uniform_f32(&rng, m.d_mlm_logits, B * T * V, -0.01f, 0.01f);

    /* gradients of an earlier micro-batch (padding stays 0, as in the arena) */
    const size_t n = m.table.numel;
    for (int id = 0; id < BT_P_COUNT; id++) {
        const bt_param_field *f = &m.table.fields[id];
        if (f->present)
            tu_fill_uniform_f32(&rng, m.grads + f->offset, f->numel * (size_t)f->reps, -1.0f,
                                1.0f);
    }
    float *before = malloc(n * sizeof *before);
    memcpy(before, m.grads, n * sizeof *before);
    recorder r = {.m = &m, .shift = shift};
    r.copy = calloc(n, sizeof *r.copy);
    r.claimed = calloc(n, 1);
    r.order_of = calloc(n, sizeof *r.order_of);
    r.bucket = bucket;
    r.border = malloc((n / bucket + 2) * sizeof *r.border);
    r.bpos = malloc((n / bucket + 2) * sizeof *r.bpos);
    r.sent = calloc(n, sizeof *r.sent);
    r.nb = bt_step_overlap_schedule(&m.table, bucket, r.border, r.bpos);
    launch(&r, -1); /* final from the start of the backward */
    m.grads_final = on_final;
    m.grads_final_ctx = &r;
    bt_cross_backward_pairs(&m);
    bt_towers_backward(&m);
    m.grads_final = NULL;

    size_t late = 0, uncovered = 0, twice = 0, n_claimed = 0, sent_late = 0;
    for (size_t i = 0; i < n; i++) {
        sent_late += memcmp(&r.sent[i], &m.grads[i], sizeof(float)) != 0;
        if (r.claimed[i] > 1) twice++;
        n_claimed += r.claimed[i] != 0;
        if (r.claimed[i]) late += memcmp(&r.copy[i], &m.grads[i], sizeof(float)) != 0;
        else uncovered += memcmp(&before[i], &m.grads[i], sizeof(float)) != 0;
    }
    char pname[64];
    snprintf(pname, sizeof pname, "%s, %s, link %d",
             prec == BT_PRECISION_BF16 ? "bf16" : "fp32", bt_act_mode_name(mode),
             (int)c->link_tower_type);
    if (shift) {
        fails = late && sent_late;
        printf("control (%s): claiming each event's fields one event early: %zu elements "
               "written after the claim; launching each bucket one event early: %zu elements "
               "written after the launch\n", pname, late, sent_late);
    } else {
        const int want = bt_grad_event_order(c, BT_GRAD_EV_VIT_EMB, 0) + 1; /* the last */
        int in_order = r.n_events == want;
        for (int k = 0; in_order && k < r.n_events; k++) in_order = r.orders[k] == k;
        fails += !tu_check(in_order, "%s: %d events fired (want %d, positions 0..%d in order)",
                           pname, r.n_events, want, want - 1);
        fails += !tu_check(twice == 0, "%s: %zu elements claimed by two events", pname, twice);
        fails += !tu_check(late == 0, "%s: %zu gradient elements written after their event",
                           pname, late);
        fails += !tu_check(uncovered == 0, "%s: %zu gradient elements written that no event "
                           "claims", pname, uncovered);
        /* 4: each event claims something the backward changed */
        size_t changed[MAX_EVENTS] = {0};
        for (size_t i = 0; i < n; i++)
            if (r.claimed[i] && memcmp(&before[i], &m.grads[i], sizeof(float)) != 0)
                changed[r.order_of[i]]++;
        for (int order = 0; order < want && order < MAX_EVENTS; order++)
            fails += !tu_check(changed[order] > 0, "%s: the event at position %d claims "
                               "elements the backward changed (%zu)", pname, order,
                               changed[order]);
        /* 5: the schedule (buckets of `bucket` floats): a permutation of the buckets in
         * non-decreasing position, every bucket launched, each copy at launch final */
        int sorted = 1;
        unsigned char *seen = calloc(r.nb + 1, 1);
        for (size_t i = 0; i < r.nb; i++) {
            sorted &= (i == 0 || r.bpos[i] >= r.bpos[i - 1]) && r.border[i] < r.nb &&
                      !seen[r.border[i]];
            if (r.border[i] < r.nb) seen[r.border[i]] = 1;
        }
        free(seen);
        fails += !tu_check(sorted && r.nb == (n + bucket - 1) / bucket,
                           "%s, buckets of %zu floats: the schedule orders the %zu buckets by "
                           "event position", pname, bucket, r.nb);
        fails += !tu_check(r.next == r.nb, "%s, buckets of %zu floats: %zu of %zu launched",
                           pname, bucket, r.next, r.nb);
        fails += !tu_check(sent_late == 0, "%s, buckets of %zu floats: %zu elements written "
                           "after their bucket's launch", pname, bucket, sent_late);
        printf("%s: %d events; %zu claimed elements, %zu written after their event; %zu "
               "unclaimed, %zu of them written\n", pname, r.n_events, n_claimed, late,
               n - n_claimed, uncovered);
    }
    free(r.copy);
    free(r.claimed);
    free(r.order_of);
    free(r.border);
    free(r.bpos);
    free(r.sent);
    free(before);
    free(pix);
    bt_model_free(&m);
    return fails;
}

int main(void) {
    if (gemm_init_from_env() != BT_OK) {
        fprintf(stderr, "%s\n", bt_error_message());
        return 1;
    }
    bt_model_config c;
    if (fd_tiny_config(&c)) {
        /* buckets: odd sizes cutting fields and layers anywhere, and one bucket */
        run(&c, BT_PRECISION_FP32, BT_ACTS_FULL, 0, 997);
        run(&c, BT_PRECISION_BF16, BT_ACTS_FULL, 0, 4096);
        run(&c, BT_PRECISION_FP32, BT_ACTS_FULL, 0, (size_t)1 << 30);
        /* gradient checkpointing: each layer's backward recomputes its forward first */
        run(&c, BT_PRECISION_FP32, BT_ACTS_CHECKPOINT, 0, 997);
        /* the link towers' scalars (scaled_factor, beta) of the other link types */
        bt_model_config cl = c;
        cl.link_tower_type = BT_LINK_SCALED_ADD;
        run(&cl, BT_PRECISION_FP32, BT_ACTS_FULL, 0, 997);
        cl.link_tower_type = BT_LINK_INTERPOLATE;
        run(&cl, BT_PRECISION_FP32, BT_ACTS_FULL, 0, 997);
        tu_check(run(&c, BT_PRECISION_FP32, BT_ACTS_FULL, 1, 997) > 0,
                 "control: fields claimed / buckets launched one event early were caught");
    }
    gemm_release();
    return tu_finish();
}
