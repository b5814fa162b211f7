/* step.c: the one training step (see step.h for the sequence and the contracts).
 *
 * Deliberately not here: the losses' math (loss.c), the optimizer's (optim.c), the model's
 * phases (src/model), logging. */
#include "train/step.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "data/loader.h"
#include "kernels/kernel_clock.h"
#include "kernels/ops.h"
#include "rng.h"

/* stream tags mixed into the run seed, one per random stream of the step */
enum {
    STREAM_NEGATIVES = 0x4e4547, /* "NEG" */
    STREAM_MLM = 0x4d4c4d,       /* "MLM" */
};
/* text rows of the masked MLM copies carry record | 2^63 as their dropout key */
#define MLM_KEY_BIT (UINT64_C(1) << 63)

/* seed of one stream for (run seed, step, micro-batch) */
static uint64_t stream_seed(uint64_t seed, uint64_t tag, int64_t step, size_t micro) {
    return bt_mix64(seed ^ bt_mix64(tag ^ bt_mix64((uint64_t)step ^ bt_mix64((uint64_t)micro))));
}

bt_step_config bt_step_config_default(void) {
    bt_step_config c;
    memset(&c, 0, sizeof c);
    c.w_itc = c.w_itm = c.w_mlm = 1.0f;
    c.itm_hard_negatives = 1;
    c.mlm.probability = 0.15;
    c.adamw = (bt_adamw_hparams){.lr = 0.0, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
                                 .weight_decay = 0.01};
    c.groups = bt_optim_groups_default();
    c.max_grad_norm = 1.0;
    c.nan_policy = BT_NAN_SKIP;
    c.dropout = 1;
    return c;
}

bt_status bt_trainer_init(bt_trainer *tr, bt_model *m, const bt_step_config *cfg) {
    memset(tr, 0, sizeof *tr);
    const float w[3] = {cfg->w_itc, cfg->w_itm, cfg->w_mlm};
    const char *wname[3] = {"itc", "itm", "mlm"};
    const unsigned head[3] = {BT_HEADS_ITC, BT_HEADS_ITM, BT_HEADS_MLM};
    int any = 0;
    for (int i = 0; i < 3; i++) {
        if (!(w[i] >= 0.0f) || !isfinite(w[i]))
            return bt_fail(BT_ERR_CONFIG, "loss weight %s = %g: expected a finite value >= 0",
                           wname[i], (double)w[i]);
        if (w[i] > 0.0f && !(m->heads & head[i]))
            return bt_fail(BT_ERR_CONFIG, "loss weight %s = %g but the model has no %s head",
                           wname[i], (double)w[i], wname[i]);
        any |= w[i] > 0.0f;
    }
    if (!any) return bt_fail(BT_ERR_CONFIG, "every loss weight is 0: nothing to train");
    if (cfg->w_mlm > 0.0f) {
        const bt_mlm_spec *s = &cfg->mlm;
        if (!(s->probability > 0.0 && s->probability < 1.0))
            return bt_fail(BT_ERR_CONFIG, "MLM probability %g: expected a value in (0, 1)",
                           s->probability);
        /* random replacements are drawn from the tokenizer's ids (HF: len(tokenizer)),
         * which may be fewer than the model's embedding rows */
        if (s->vocab_size < 1 || s->vocab_size > m->cfg.vocab_size || s->mask_id < 0 ||
            s->mask_id >= s->vocab_size || s->n_special > 8)
            return bt_fail(BT_ERR_CONFIG, "MLM mask id %d / tokenizer vocabulary %d: expected "
                           "a <mask> id inside a vocabulary of at most the model's %d ids",
                           s->mask_id, s->vocab_size, m->cfg.vocab_size);
    }
    if (cfg->schedule.total_steps < 1)
        return bt_fail(BT_ERR_CONFIG, "the step config has no schedule (total steps %lld)",
                       (long long)cfg->schedule.total_steps);
    const bt_adamw_hparams *h = &cfg->adamw;
    if (!(h->beta1 >= 0 && h->beta1 < 1) || !(h->beta2 >= 0 && h->beta2 < 1) || !(h->eps > 0) ||
        !(h->weight_decay >= 0))
        return bt_fail(BT_ERR_CONFIG, "AdamW betas (%g, %g) must be in [0, 1), eps %g > 0, "
                       "weight decay %g >= 0", h->beta1, h->beta2, h->eps, h->weight_decay);
    if (!(cfg->groups.lr_mult_cross >= 0) || !(cfg->groups.lr_mult_heads >= 0))
        return bt_fail(BT_ERR_CONFIG, "learning-rate multipliers (cross %g, heads %g) must be "
                       ">= 0", cfg->groups.lr_mult_cross, cfg->groups.lr_mult_heads);
    tr->model = m;
    tr->cfg = *cfg;
    bt_adamw_init_groups(&tr->opt, &m->table, &cfg->groups);
    return BT_OK;
}

static void free_scratch(bt_trainer *tr) {
    free(tr->ids);
    free(tr->mask);
    free(tr->mlm_labels);
    free(tr->text_keys);
    free(tr->image_keys);
    free(tr->dup_image);
    free(tr->dup_caption);
    free(tr->neg_image);
    free(tr->neg_text);
    free(tr->itm_labels);
    free(tr->pairs);
    free(tr->sims);
}

size_t bt_step_overlap_schedule(const bt_param_table *t, size_t bucket, size_t *order,
                                int *pos) {
    const size_t nb = t->numel ? (t->numel + bucket - 1) / bucket : 0;
    const int n_pos = bt_grad_event_order(&t->cfg, BT_GRAD_EV_VIT_EMB, 0) + 1; /* the last */
    int *when = malloc((nb + 1) * sizeof *when);
    size_t *count = calloc((size_t)n_pos + 2, sizeof *count);
    BT_ASSERT(when && count);
    for (size_t b = 0; b < nb; b++) when[b] = -1; /* padding only: final from the start */
    for (int id = 0; id < BT_P_COUNT; id++) {
        const bt_param_field *f = &t->fields[id];
        if (!f->present || !f->numel) continue;
        for (int l = 0; l < f->reps; l++) {
            int layer;
            const bt_grad_event ev = bt_param_grad_event(&t->cfg, (bt_param_id)id, l, &layer);
            const int p = bt_grad_event_order(&t->cfg, ev, layer);
            const size_t o = f->offset + (size_t)l * f->numel;
            for (size_t b = o / bucket; b <= (o + f->numel - 1) / bucket; b++)
                if (p > when[b]) when[b] = p;
        }
    }
    /* stable counting sort by position (-1 first) */
    for (size_t b = 0; b < nb; b++) count[when[b] + 2]++;
    for (int p = 1; p < n_pos + 2; p++) count[p] += count[p - 1];
    for (size_t b = 0; b < nb; b++) {
        const size_t i = count[when[b] + 1]++;
        order[i] = b;
        pos[i] = when[b];
    }
    free(count);
    free(when);
    return nb;
}

double bt_step_overlap_share(const bt_param_table *t, size_t bucket) {
    const size_t nb = t->numel ? (t->numel + bucket - 1) / bucket : 0;
    size_t *order = malloc((nb + 1) * sizeof *order);
    int *pos = malloc((nb + 1) * sizeof *pos);
    BT_ASSERT(order && pos);
    bt_step_overlap_schedule(t, bucket, order, pos);
    const int last = bt_grad_event_order(&t->cfg, BT_GRAD_EV_VIT_EMB, 0);
    size_t early = 0;
    for (size_t i = 0; i < nb; i++)
        if (pos[i] < last) {
            const size_t o = order[i] * bucket;
            early += t->numel - o < bucket ? t->numel - o : bucket;
        }
    free(order);
    free(pos);
    return t->numel ? (double)early / (double)t->numel : 0.0;
}

/* The collectives fail only on a message over 2^31 elements (MPI errors are fatal): treated
 * as a bug, not an input error. */
static void st_ok(bt_status st) {
    BT_ASSERTF(st == BT_OK, "collective failed: %s", bt_error_message());
}

/* ZeRO-1: the optimizer of rank q's blocks (dist.h's layout for the trainer's buckets). */
static void init_shard_optim(const bt_trainer *tr, int q, bt_adamw *o) {
    const bt_param_table *t = &tr->model->table;
    const size_t bucket = bt_dist_bucket_floats(t->numel, tr->bucket_bytes);
    const size_t n = bt_dist_shard_ranges(t->numel, bucket, tr->dist->size, q, NULL);
    size_t *lohi = malloc((2 * n + 1) * sizeof *lohi);
    BT_ASSERT(lohi);
    bt_dist_shard_ranges(t->numel, bucket, tr->dist->size, q, lohi);
    bt_adamw_init_shard(o, t, &tr->cfg.groups, lohi, n);
    free(lohi);
}

void bt_trainer_set_dist(bt_trainer *tr, const bt_dist *d, size_t bucket_bytes,
                         int wire_bf16, int zero_stage) {
    BT_ASSERT(!tr->have_red); /* before the first step */
    tr->dist = bt_dist_active(d) ? d : NULL;
    tr->bucket_bytes = bucket_bytes;
    tr->wire_bf16 = wire_bf16;
    if (tr->dist) {
        free(tr->counts);
        tr->counts = calloc(3 * (size_t)d->size, sizeof *tr->counts);
        BT_ASSERT(tr->counts);
    }
    const int zero = tr->dist && zero_stage >= 1;
    if (zero != tr->zero) { /* the moments so far are dropped (documented) */
        bt_adamw_free(&tr->opt);
        if (zero) init_shard_optim(tr, d->rank, &tr->opt);
        else bt_adamw_init_groups(&tr->opt, &tr->model->table, &tr->cfg.groups);
        tr->zero = zero;
    }
    if (zero) {
        free(tr->norm_parts);
        tr->norm_parts = calloc((size_t)d->size, sizeof *tr->norm_parts);
        BT_ASSERT(tr->norm_parts);
    }
}

size_t bt_trainer_optim_bytes(const bt_trainer *tr, size_t *full_bytes) {
    const bt_param_table *t = &tr->model->table;
    if (full_bytes) *full_bytes = 2 * sizeof(float) * bt_adamw_trained_numel(t, &tr->cfg.groups);
    return 2 * sizeof(float) * tr->opt.mnumel;
}

bt_status bt_trainer_gather_optim(bt_trainer *tr, bt_adamw *full, const bt_adamw **out) {
    if (!tr->zero) {
        *out = &tr->opt;
        return BT_OK;
    }
    const bt_dist *d = tr->dist;
    const int root = d->rank == 0;
    if (root) bt_adamw_init_groups(full, &tr->model->table, &tr->cfg.groups);
    bt_status st = BT_OK;
    for (int q = 0; q < d->size; q++) {
        if (q == 0 || (!root && q != d->rank)) { /* rank 0's own shard: copied, no message */
            if (root) st = bt_adamw_shard_to_full(&tr->opt, full);
            continue;
        }
        bt_adamw sq; /* rank q's layout (rank 0 receives into it) */
        memset(&sq, 0, sizeof sq);
        if (root) init_shard_optim(tr, q, &sq);
        const bt_adamw *src = root ? &sq : &tr->opt;
        st_ok(bt_dist_to_root_f32(d, q, src->m, sq.m, src->mnumel));
        st_ok(bt_dist_to_root_f32(d, q, src->v, sq.v, src->mnumel));
        if (root && st == BT_OK) st = bt_adamw_shard_to_full(&sq, full);
        bt_adamw_free(&sq);
    }
    if (root) full->t = tr->opt.t;
    *out = root ? full : NULL;
    return st;
}

void bt_trainer_free(bt_trainer *tr) {
    free_scratch(tr);
    if (tr->have_red) bt_dist_reducer_free(&tr->red);
    free(tr->ov_order);
    free(tr->ov_pos);
    free(tr->counts);
    free(tr->norm_parts);
    free(tr->gbuf);
    free(tr->gkeys);
    bt_adamw_free(&tr->opt);
    bt_loss_ws_free(&tr->ws);
    memset(tr, 0, sizeof *tr);
}

#define ALLOC_N(p, n) \
    do { (p) = calloc((size_t)(n) + 1, sizeof *(p)); BT_ASSERT(p); } while (0)

/* Grows the scratch (and the model's phase arenas) to hold micro-batches of B x T. */
static bt_status reserve(bt_trainer *tr, size_t B, size_t T) {
    if (B <= tr->cap_B && T <= tr->cap_T) return BT_OK;
    const size_t nB = B > tr->cap_B ? B : tr->cap_B, nT = T > tr->cap_T ? T : tr->cap_T;
    free_scratch(tr);
    ALLOC_N(tr->ids, 2 * nB * nT);
    ALLOC_N(tr->mask, 2 * nB * nT);
    ALLOC_N(tr->mlm_labels, nB * nT);
    ALLOC_N(tr->text_keys, 2 * nB);
    ALLOC_N(tr->image_keys, nB);
    ALLOC_N(tr->dup_image, nB);
    ALLOC_N(tr->dup_caption, nB);
    ALLOC_N(tr->neg_image, nB);
    ALLOC_N(tr->neg_text, nB);
    ALLOC_N(tr->itm_labels, 3 * nB);
    ALLOC_N(tr->pairs, 4 * nB);
    ALLOC_N(tr->sims, nB * nB);
    tr->cap_B = nB;
    tr->cap_T = nT;
    const bt_step_config *c = &tr->cfg;
    const int mlm = c->w_mlm > 0.0f, itm = c->w_itm > 0.0f;
    const size_t Bt = mlm ? 2 * nB : nB;
    const size_t P = (c->w_itc > 0.0f || itm ? nB : 0) + (itm ? 2 * nB : 0) + (mlm ? nB : 0);
    return bt_model_reserve_phases(tr->model, Bt, nB, P, mlm ? nB : 0, nT);
}

bt_status bt_trainer_reserve(bt_trainer *tr, size_t B, size_t T) {
    if (B == 0 || T == 0)
        return bt_fail(BT_ERR_ARG, "reserve: B = %zu, T = %zu: both must be positive", B, T);
    return reserve(tr, B, T);
}

static bt_status check_batch(const bt_step_batch *b, size_t k, const bt_step_config *c) {
    if (b->B == 0 || b->T == 0)
        return bt_fail(BT_ERR_ARG, "micro-batch %zu: empty (B = %zu, T = %zu)", k, b->B, b->T);
    if (!b->input_ids || !b->pixel_values)
        return bt_fail(BT_ERR_ARG, "micro-batch %zu: %s is NULL", k,
                       b->input_ids ? "pixel_values" : "input_ids");
    if (c->w_itm > 0.0f && b->B < 2 && !(b->neg_image && b->neg_text))
        return bt_fail(BT_ERR_ARG, "micro-batch %zu: ITM hard negatives need at least 2 pairs, "
                       "got %zu (drop the last partial batch or set the ITM weight to 0)",
                       k, b->B);
    if ((b->mlm_input_ids == NULL) != (b->mlm_labels == NULL) ||
        (b->neg_image == NULL) != (b->neg_text == NULL))
        return bt_fail(BT_ERR_ARG, "micro-batch %zu: test hooks come in pairs (mlm_input_ids "
                       "with mlm_labels, neg_image with neg_text)", k);
    for (size_t i = 0; b->neg_image && i < b->B; i++)
        if (b->neg_image[i] < 0 || (size_t)b->neg_image[i] >= b->B || b->neg_text[i] < 0 ||
            (size_t)b->neg_text[i] >= b->B)
            return bt_fail(BT_ERR_ARG, "micro-batch %zu: fixed negative of row %zu out of "
                           "range [0, %zu)", k, i, b->B);
    return BT_OK;
}

bt_status bt_step_batch_from_loader(bt_step_batch *out, const loader_batch *lb) {
    memset(out, 0, sizeof *out);
    if (lb->pixel_dtype != BT_DTYPE_F32)
        return bt_fail(BT_ERR_ARG, "loader batch %lld: the training step needs fp32 pixels, "
                       "the loader delivers %s (set the loader's pixel_dtype to F32)",
                       (long long)lb->seq, bt_dtype_name(lb->pixel_dtype));
    if (lb->size <= 0)
        return bt_fail(BT_ERR_ARG, "loader batch %lld: no valid row", (long long)lb->seq);
    out->B = (size_t)lb->size;
    out->T = (size_t)lb->max_length;
    out->input_ids = lb->input_ids;
    out->attention_mask = lb->attention_mask;
    out->pixel_values = lb->pixel_values;
    out->record = lb->record;
    return BT_OK;
}

/* Gather buffers for a global batch of N rows (grow-only). */
static void reserve_gather(bt_trainer *tr, size_t N, size_t C) {
    if (N <= tr->gcap) return;
    free(tr->gbuf);
    free(tr->gkeys);
    ALLOC_N(tr->gbuf, 4 * N * C);
    ALLOC_N(tr->gkeys, 2 * N);
    tr->gcap = N;
}

typedef struct micro_losses {
    double itc, itm, mlm;
    size_t mlm_tokens, fallbacks;
    size_t rows; /* pairs of the micro-batch over all ranks */
} micro_losses;

/* Overlap (the last micro-batch of a data-parallel step): starts, in schedule order, the
 * buckets whose event position is <= pos (bt_step_overlap_schedule). */
static void launch_final(bt_trainer *tr, int pos) {
    bt_dist_reducer *r = &tr->red;
    while (tr->ov_next < tr->ov_n && tr->ov_pos[tr->ov_next] <= pos) {
        const size_t lo = tr->ov_order[tr->ov_next++] * r->bucket;
        st_ok(bt_dist_reducer_start(r, lo, r->n - lo < r->bucket ? r->n : lo + r->bucket));
    }
}

/* the model's gradients-final hook (model.h) during the last micro-batch's backward */
static void on_grads_final(void *ctx, bt_grad_event ev, int layer) {
    bt_trainer *tr = ctx;
    launch_final(tr, bt_grad_event_order(&tr->model->cfg, ev, layer));
}

/* Forward, losses and backward of one micro-batch; gradients scaled by 1/n_micro. Returns
 * BT_ERR_NUMERIC (message set, nothing accumulated past the losses) on a non-finite loss. */
/* Keys of the micro-batch's rows: dropout / mask keys from the record, and (need_dups) the
 * duplicate keys of images and captions, given or hashed. */
static void micro_keys(bt_trainer *tr, const bt_step_batch *b, int need_dups) {
    const size_t B = b->B, T = b->T;
    for (size_t i = 0; i < B; i++) {
        const uint64_t rec = b->record ? (uint64_t)b->record[i] : (uint64_t)i;
        tr->image_keys[i] = rec;
        tr->text_keys[i] = rec;
        tr->text_keys[B + i] = rec | MLM_KEY_BIT;
    }
    if (!need_dups) return;
    const size_t R = (size_t)tr->model->cfg.image_size, npix = 3 * R * R;
    for (size_t i = 0; i < B; i++) {
        tr->dup_image[i] = b->image_key ? b->image_key[i]
                                        : bt_hash_bytes(b->pixel_values + i * npix,
                                                        npix * sizeof(float), 0);
        tr->dup_caption[i] = b->caption_key ? b->caption_key[i]
                                            : bt_hash_bytes(b->input_ids + i * T,
                                                            T * sizeof(int32_t), 0);
    }
}

/* The texts of the towers pass: the captions, then (MLM) their masked copies and labels.
 * Returns the number of text rows. */
static size_t micro_texts(bt_trainer *tr, const bt_step_batch *b, int do_mlm) {
    const bt_step_config *c = &tr->cfg;
    const size_t B = b->B, T = b->T;
    memcpy(tr->ids, b->input_ids, B * T * sizeof *tr->ids);
    for (size_t i = 0; i < B * T; i++) tr->mask[i] = b->attention_mask ? b->attention_mask[i] : 1;
    if (!do_mlm) return B;
    if (b->mlm_input_ids) {
        memcpy(tr->ids + B * T, b->mlm_input_ids, B * T * sizeof *tr->ids);
        memcpy(tr->mlm_labels, b->mlm_labels, B * T * sizeof *tr->mlm_labels);
    } else {
        bt_mlm_mask(tr->ids + B * T, tr->mlm_labels, b->input_ids, tr->mask, B, T,
                    tr->image_keys /* = the records */,
                    stream_seed(c->seed, STREAM_MLM, tr->step, 0), &c->mlm);
    }
    memcpy(tr->mask + B * T, tr->mask, B * T * sizeof *tr->mask);
    return 2 * B;
}

/* How many rows and masked tokens the micro-batch has over all ranks (the global means'
 * denominators), and where this rank's rows start. */
typedef struct micro_counts {
    int64_t n_rows_all, n_mlm, n_mlm_all, row_offset;
    const int64_t *rows; /* data parallel: each rank's rows (the row gathers' counts), else NULL */
} micro_counts;

/* Data parallel: every rank's rows and masked tokens (one all-gather). */
static void dist_counts(bt_trainer *tr, micro_counts *n, size_t B, bt_step_result *res) {
    const bt_dist *d = tr->dist;
    const int W = d->size;
    const double tc = bt_now_s();
    const int64_t mine[2] = {(int64_t)B, n->n_mlm};
    bt_dist_name_next(d, "all-gather of the row and MLM token counts");
    st_ok(bt_dist_allgather_i64(d, mine, 2, tr->counts));
    n->n_rows_all = n->n_mlm_all = 0;
    for (int r = 0; r < W; r++) {
        if (r < d->rank) n->row_offset += tr->counts[2 * r];
        n->n_rows_all += tr->counts[2 * r];
        n->n_mlm_all += tr->counts[2 * r + 1];
        tr->counts[W * 2 + r] = tr->counts[2 * r]; /* rows only, for the row gathers */
    }
    res->t_comm += bt_now_s() - tc;
    reserve_gather(tr, (size_t)n->n_rows_all, (size_t)tr->model->cfg.contrastive_hidden);
    n->rows = tr->counts + 2 * W;
}

/* ITM negatives from the ITC text -> image similarities (no gradient), or the batch's own. */
static bt_status micro_negatives(bt_trainer *tr, const bt_step_batch *b, size_t k,
                                 micro_losses *out) {
    bt_model *m = tr->model;
    const bt_step_config *c = &tr->cfg;
    const size_t B = b->B, C = (size_t)m->cfg.contrastive_hidden;
    if (b->neg_image) {
        memcpy(tr->neg_image, b->neg_image, B * sizeof *tr->neg_image);
        memcpy(tr->neg_text, b->neg_text, B * sizeof *tr->neg_text);
        return BT_OK;
    }
    const int hard = c->itm_hard_negatives && (m->heads & BT_HEADS_ITC);
    if (hard) bt_itc_scores(tr->sims, m->itc_text, m->itc_image, B, B, C, *m->p.logit_scale);
    return bt_itm_sample_negatives(tr->neg_image, tr->neg_text, hard ? tr->sims : NULL,
                                   tr->dup_image, tr->dup_caption, B,
                                   stream_seed(c->seed, STREAM_NEGATIVES, tr->step, k),
                                   &out->fallbacks, &tr->ws);
}

/* The cross-phase pairs: [positives][negative images][negative texts][MLM]; returns P. The
 * positives start at pair 0. */
static size_t micro_pairs(bt_trainer *tr, size_t B, int do_itc, int do_itm, int do_mlm) {
    size_t P = 0;
    if (do_itc || do_itm)
        for (size_t i = 0; i < B; i++) tr->pairs[P++] = (bt_pair){(int32_t)i, (int32_t)i, 0};
    if (do_itm) {
        for (size_t i = 0; i < B; i++) tr->pairs[P++] = (bt_pair){(int32_t)i, tr->neg_image[i], 0};
        for (size_t i = 0; i < B; i++) tr->pairs[P++] = (bt_pair){tr->neg_text[i], (int32_t)i, 0};
        for (size_t i = 0; i < 3 * B; i++) tr->itm_labels[i] = i < B;
    }
    if (do_mlm)
        for (size_t i = 0; i < B; i++)
            tr->pairs[P++] = (bt_pair){(int32_t)(B + i), (int32_t)i, 1};
    return P;
}

/* ITC on this rank's B pairs alone (one process, or itc_scope "local": with ranks, the
 * gradient average divides Σ_r ∇L_r by W, HF's DDP mean). */
static double itc_loss_local(bt_trainer *tr, size_t B, float weight) {
    bt_model *m = tr->model;
    const bt_step_config *c = &tr->cfg;
    const size_t C = (size_t)m->cfg.contrastive_hidden;
    bt_itc_args a = {.n_rows = B, .n_cols = B, .row_offset = 0, .n_total = B, .C = C,
                     .text_rows = m->itc_text, .image_rows = m->itc_image,
                     .image_cols = m->itc_image, .cross_cols = m->itc_cross,
                     .logit_scale = *m->p.logit_scale,
                     .image_key = c->itc_duplicate_aware ? tr->dup_image : NULL,
                     .caption_key = c->itc_duplicate_aware ? tr->dup_caption : NULL,
                     .weight = weight,
                     .d_text_rows = m->d_itc_text, .d_image_rows = m->d_itc_image,
                     .d_image_cols = m->d_itc_image, .d_cross_cols = m->d_itc_cross,
                     .d_logit_scale = m->g.logit_scale};
    return bt_itc_loss(&a, &tr->ws);
}

/* ITC over the global batch (itc_scope "global", OpenCLIP's gather-with-grad): this rank's
 * texts against every rank's images, gathered; the column gradients go back to the ranks
 * that own the rows (reduce-scatter). */
static double itc_loss_global(bt_trainer *tr, size_t B, const micro_counts *n, float weight,
                              bt_step_result *res) {
    bt_model *m = tr->model;
    const bt_dist *d = tr->dist;
    const size_t C = (size_t)m->cfg.contrastive_hidden, N = (size_t)n->n_rows_all;
    float *img_all = tr->gbuf, *cross_all = img_all + N * C;
    float *d_img_all = cross_all + N * C, *d_cross_all = d_img_all + N * C;
    const int dup = tr->cfg.itc_duplicate_aware;
    const double tc = bt_now_s();
    bt_dist_name_next(d, "ITC all-gather of the image embeddings");
    st_ok(bt_dist_allgather_rows_f32(d, m->itc_image, img_all, n->rows, C));
    st_ok(bt_dist_allgather_rows_f32(d, m->itc_cross, cross_all, n->rows, C));
    if (dup) {
        st_ok(bt_dist_allgather_rows_u64(d, tr->dup_image, tr->gkeys, n->rows, 1));
        st_ok(bt_dist_allgather_rows_u64(d, tr->dup_caption, tr->gkeys + N, n->rows, 1));
    }
    res->t_comm += bt_now_s() - tc;
    memset(d_img_all, 0, 2 * N * C * sizeof *d_img_all);
    bt_itc_args a = {.n_rows = B, .n_cols = N, .row_offset = (size_t)n->row_offset,
                     .n_total = N, .C = C,
                     .text_rows = m->itc_text, .image_rows = m->itc_image,
                     .image_cols = img_all, .cross_cols = cross_all,
                     .logit_scale = *m->p.logit_scale,
                     .image_key = dup ? tr->gkeys : NULL,
                     .caption_key = dup ? tr->gkeys + N : NULL,
                     .weight = weight,
                     .d_text_rows = m->d_itc_text, .d_image_rows = m->d_itc_image,
                     .d_image_cols = d_img_all, .d_cross_cols = d_cross_all,
                     .d_logit_scale = m->g.logit_scale};
    const double loss = bt_itc_loss(&a, &tr->ws);
    const double tr0 = bt_now_s();
    st_ok(bt_dist_reduce_scatter_add_f32(d, d_img_all, m->d_itc_image, n->rows, C));
    st_ok(bt_dist_reduce_scatter_add_f32(d, d_cross_all, m->d_itc_cross, n->rows, C));
    res->t_comm += bt_now_s() - tr0;
    return loss;
}

/* Data parallel: the losses' global values, Σ over ranks of each rank's share. */
static void dist_sum_losses(bt_trainer *tr, micro_losses *out, int itc_local, double itm_share,
                            double mlm_share, int64_t n_mlm_all, bt_step_result *res) {
    const bt_dist *d = tr->dist;
    const int W = d->size;
    double g[3] = {itc_local ? out->itc / W : out->itc, out->itm * itm_share,
                   out->mlm * mlm_share};
    const double tc = bt_now_s();
    bt_dist_name_next(d, "loss all-reduce");
    st_ok(bt_dist_sum_f64(d, g, 3));
    res->t_comm += bt_now_s() - tc;
    out->itc = g[0];
    out->itm = g[1];
    out->mlm = g[2];
    out->mlm_tokens = (size_t)n_mlm_all;
}

/* Data parallel, last micro-batch: each bucket is launched as soon as the backward has
 * finished every tensor it overlaps (step.h, docs/distributed.md). Returns 1 when the overlap
 * hook is installed (overlap_end removes it). */
static int overlap_begin(bt_trainer *tr) {
    bt_model *m = tr->model;
    if (tr->ov_bucket != tr->red.bucket) { /* once per trainer */
        free(tr->ov_order);
        free(tr->ov_pos);
        tr->ov_order = malloc((tr->red.n_buckets + 1) * sizeof *tr->ov_order);
        tr->ov_pos = malloc((tr->red.n_buckets + 1) * sizeof *tr->ov_pos);
        BT_ASSERT(tr->ov_order && tr->ov_pos);
        tr->ov_n = bt_step_overlap_schedule(&m->table, tr->red.bucket, tr->ov_order,
                                            tr->ov_pos);
        tr->ov_bucket = tr->red.bucket;
        tr->ov_off = tr->cfg.dist_no_overlap; /* dist.overlap false: to measure what it saves */
    }
    if (tr->ov_off) return 0;
    tr->ov_next = 0;
    launch_final(tr, -1); /* buckets no backward writes */
    m->grads_final = on_grads_final;
    m->grads_final_ctx = tr;
    return 1;
}

static void overlap_end(bt_trainer *tr) {
    tr->model->grads_final = NULL;
    tr->model->grads_final_ctx = NULL;
}

/* One micro-batch: towers forward, negatives, cross forward, the fused losses, backward. The
 * distributed pieces (counts, the global ITC, the loss sums, the overlapped gradient
 * all-reduce) are the functions above, called only with tr->dist. */
static bt_status run_micro(bt_trainer *tr, const bt_step_batch *b, size_t k, size_t n_micro,
                           micro_losses *out, bt_step_result *res) {
    bt_model *m = tr->model;
    const bt_step_config *c = &tr->cfg;
    const bt_dist *d = tr->dist;
    const size_t B = b->B, T = b->T;
    const int do_itc = c->w_itc > 0.0f, do_itm = c->w_itm > 0.0f, do_mlm = c->w_mlm > 0.0f;
    const float inv_n = 1.0f / (float)n_micro;
    const int W = d ? d->size : 1;
    memset(out, 0, sizeof *out);
    bt_kernel_times kt0, kt1;
    bt_kernel_times_read(&kt0);
    double t0 = bt_now_s();

    micro_keys(tr, b, (do_itc && c->itc_duplicate_aware) || (do_itm && !b->neg_image));
    const size_t Bt = micro_texts(tr, b, do_mlm);
    micro_counts n = {.n_rows_all = (int64_t)B};
    if (do_mlm)
        for (size_t i = 0; i < B * T; i++) n.n_mlm += tr->mlm_labels[i] != -100;
    n.n_mlm_all = n.n_mlm;
    if (d) dist_counts(tr, &n, B, res);
    out->rows = (size_t)n.n_rows_all;
    bt_text_input ti = {.B = Bt, .T = T, .input_ids = tr->ids, .attention_mask = tr->mask,
                        .sample_keys = tr->text_keys};
    bt_image_input ii = {.B = B, .pixel_values = b->pixel_values, .sample_keys = tr->image_keys};
    bt_status st = bt_towers_forward(m, &ti, &ii);
    if (st != BT_OK) return bt_fail_context(st, "micro-batch %zu", k);
    double t1 = bt_now_s();
    res->t_towers_fwd += t1 - t0;

    if (do_itm) {
        st = micro_negatives(tr, b, k, out);
        if (st != BT_OK) return bt_fail_context(st, "micro-batch %zu", k);
    }
    st = bt_cross_forward_pairs(m, tr->pairs, micro_pairs(tr, B, do_itc, do_itm, do_mlm));
    if (st != BT_OK) return bt_fail_context(st, "micro-batch %zu", k);
    double t2 = bt_now_s();
    res->t_cross_fwd += t2 - t1;

    /* losses: fused forward + backward into the d_* slots. Data parallel: the gradient
     * average divides by W, so each rank's weights carry W times its share of the global
     * mean (ITC: its rows' share; ITM: B / N of the pairs; MLM: its tokens / all tokens) */
    const int itc_local = do_itc && (!d || c->itc_local);
    if (itc_local) out->itc = itc_loss_local(tr, B, c->w_itc * inv_n);
    else if (do_itc) out->itc = itc_loss_global(tr, B, &n, c->w_itc * inv_n * (float)W, res);
    /* the shares of the global means (1 alone) */
    const double itm_share = (double)B / (double)n.n_rows_all;
    const double mlm_share = n.n_mlm_all > 0 ? (double)n.n_mlm / (double)n.n_mlm_all : 0.0;
    if (do_itm)
        out->itm = bt_itm_loss(m->d_itm_logits, m->itm_logits_out, tr->itm_labels, 3 * B,
                               d ? (float)(c->w_itm * inv_n * W * itm_share)
                                 : c->w_itm * inv_n, &tr->ws);
    if (do_mlm)
        out->mlm = bt_mlm_loss(m->d_mlm_logits, m->mlm_logits_out, tr->mlm_labels, B * T,
                               (size_t)m->cfg.vocab_size,
                               d ? (float)(c->w_mlm * inv_n * W * mlm_share)
                                 : c->w_mlm * inv_n, &out->mlm_tokens, &tr->ws);
    if (d) dist_sum_losses(tr, out, itc_local, itm_share, mlm_share, n.n_mlm_all, res);
    double t3 = bt_now_s();
    res->t_losses += t3 - t2;
    const double terms[3] = {out->itc, out->itm, out->mlm};
    const char *names[3] = {"itc", "itm", "mlm"};
    for (int i = 0; i < 3; i++)
        if (!isfinite(terms[i]))
            return bt_fail(BT_ERR_NUMERIC, "loss_%s is %s in micro-batch %zu", names[i],
                           isnan(terms[i]) ? "NaN" : "Inf", k);

    const int overlap = d && k + 1 == n_micro && overlap_begin(tr);
    bt_cross_backward_pairs(m);
    bt_towers_backward(m);
    if (overlap) overlap_end(tr);
    res->t_backward += bt_now_s() - t3;
    bt_kernel_times_read(&kt1);
    res->t_gemm += kt1.s[BT_KC_GEMM] - kt0.s[BT_KC_GEMM];
    res->t_attention += kt1.s[BT_KC_ATTENTION] - kt0.s[BT_KC_ATTENTION];
    res->t_memory += kt1.s[BT_KC_MEMORY] - kt0.s[BT_KC_MEMORY];
    return BT_OK;
}

/* ZeRO-1: the global grad norm from the ranks' shards. Each rank's sum of squares sits in
 * its own slot of an N-vector of zeros that is summed over the ranks (x + 0 is exact: every
 * rank receives every share bit for bit), then added in rank order: the same value on every
 * rank, hence the same clip and NaN decision. */
static double shard_grad_norm(bt_trainer *tr, bt_step_result *res) {
    const bt_dist *d = tr->dist;
    memset(tr->norm_parts, 0, (size_t)d->size * sizeof *tr->norm_parts);
    tr->norm_parts[d->rank] = bt_adamw_grad_sumsq(&tr->opt, tr->model->grads);
    const double tc = bt_now_s();
    bt_dist_name_next(d, "grad-norm all-reduce");
    st_ok(bt_dist_sum_f64(d, tr->norm_parts, (size_t)d->size));
    res->t_comm += bt_now_s() - tc;
    double total = 0.0;
    for (int q = 0; q < d->size; q++) total += tr->norm_parts[q];
    return sqrt(total);
}

/* ZeRO-1, after this rank's AdamW: every rank's updated blocks to every rank, and the bf16
 * shadow of the blocks received (the own ones were written by the update). Returns the
 * seconds of the all-gather (counted in t_comm, not in t_optimizer). */
static double gather_weights(bt_trainer *tr, bt_step_result *res) {
    bt_model *m = tr->model;
    bt_dist_reducer *r = &tr->red;
    st_ok(bt_dist_reducer_allgather(r, m->params));
    res->t_comm += r->t_wait;
    if (!m->params_bf16) return r->t_wait;
    for (size_t o = 0; o < r->n; o += r->bucket) {
        const size_t c = r->n - o < r->bucket ? r->n - o : r->bucket;
        size_t lo;
        const size_t len = bt_dist_block(c, tr->dist->size, tr->dist->rank, &lo);
        bf16_from_f32(m->params_bf16 + o, m->params + o, lo);
        bf16_from_f32(m->params_bf16 + o + lo + len, m->params + o + lo + len, c - lo - len);
    }
    return r->t_wait;
}

bt_status bt_train_step(bt_trainer *tr, const bt_step_batch *micro, size_t n_micro,
                        bt_step_result *res) {
    bt_model *m = tr->model;
    const bt_step_config *c = &tr->cfg;
    const double t_start = bt_now_s();
    memset(res, 0, sizeof *res);
    res->step = tr->step;
    res->grad_norm = NAN;
    res->clip_coef = 1.0f;
    res->lr = bt_schedule_lr(&c->schedule, (int64_t)tr->opt.t);
    if (n_micro == 0) return bt_fail(BT_ERR_ARG, "step %lld: no micro-batch", (long long)(tr->step + 1));
    for (size_t k = 0; k < n_micro; k++) {
        bt_status st = check_batch(&micro[k], k, c);
        if (st != BT_OK) return bt_fail_context(st, "step %lld", (long long)(tr->step + 1));
    }
    for (size_t k = 0; k < n_micro; k++) {
        bt_status st = reserve(tr, micro[k].B, micro[k].T);
        if (st != BT_OK) return st;
    }
    bt_model_set_dropout(m, c->dropout, c->seed, (uint64_t)tr->step);
    /* the gradients zeroed: after an applied step its AdamW pass already zeroed the elements
     * it updated (bt_adamw_step_zero_grad), the rest of the arena is zeroed here */
    if (tr->grads_zeroed) bt_adamw_zero_untouched(&tr->opt, m->grads);
    else bt_zero_grad(m);
    tr->grads_zeroed = 0;
    if (tr->dist && !tr->have_red) {
        st_ok((tr->zero ? bt_dist_reducer_init_sharded : bt_dist_reducer_init)(
            &tr->red, tr->dist, m->grads, m->table.numel, tr->bucket_bytes, tr->wire_bf16));
        tr->have_red = 1;
    }

    bt_status st = BT_OK;
    double sum[3] = {0, 0, 0};
    for (size_t k = 0; k < n_micro && st == BT_OK; k++) {
        micro_losses ml;
        st = run_micro(tr, &micro[k], k, n_micro, &ml, res);
        sum[0] += ml.itc;
        sum[1] += ml.itm;
        sum[2] += ml.mlm;
        res->mlm_tokens += ml.mlm_tokens;
        res->itm_fallbacks += ml.fallbacks;
        res->samples += ml.rows;
    }
    if (tr->dist) { /* the gradients averaged over the ranks */
        if (st == BT_OK) {
            const double tc = bt_now_s();
            st_ok(bt_dist_reducer_finish(&tr->red));
            res->t_comm += bt_now_s() - tc;
        }
    }
    const double inv = 1.0 / (double)n_micro;
    res->loss_itc = sum[0] * inv;
    res->loss_itm = sum[1] * inv;
    res->loss_mlm = sum[2] * inv;
    res->loss = (c->w_itc * sum[0] + c->w_itm * sum[1] + c->w_mlm * sum[2]) * inv;

    const double t_opt = bt_now_s();
    if (st == BT_OK) {
        res->grad_norm = tr->zero ? shard_grad_norm(tr, res)
                                  : bt_adamw_grad_norm(&tr->opt, m->grads);
        if (!isfinite(res->grad_norm))
            st = bt_fail(BT_ERR_NUMERIC, "the gradient norm is %s (a non-finite gradient)",
                         isnan(res->grad_norm) ? "NaN" : "Inf");
    }
    if (st == BT_ERR_NUMERIC) {
        snprintf(res->nonfinite, sizeof res->nonfinite, "%s", bt_error_message());
        res->skipped = 1;
        tr->n_skipped++;
        const int64_t s = tr->step++;
        bt_zero_grad(m);
        res->t_total = bt_now_s() - t_start;
        if (c->nan_policy == BT_NAN_STOP)
            return bt_fail(BT_ERR_NUMERIC, "step %lld: %s; stopping (train.on_nan \"stop\"; "
                           "the weights are those before this step; train.on_nan \"skip\" "
                           "skips such steps instead)", (long long)(s + 1), res->nonfinite);
        bt_error_clear();
        return BT_OK;
    }
    if (st != BT_OK) {
        res->t_total = bt_now_s() - t_start;
        return bt_fail_context(st, "step %lld", (long long)(tr->step + 1));
    }
    res->clip_coef = bt_clip_coef(res->grad_norm, (float)c->max_grad_norm);
    bt_adamw_hparams h = c->adamw;
    h.lr = res->lr;
    bt_adamw_step_zero_grad(&tr->opt, m->params, m->grads, res->clip_coef, &h, m->params_bf16);
    tr->grads_zeroed = 1;
    const double t_gather = tr->zero ? gather_weights(tr, res) : 0.0;
    tr->step++;
    const double t_end = bt_now_s();
    res->t_optimizer = t_end - t_opt - t_gather;
    res->t_total = t_end - t_start;
    return BT_OK;
}
