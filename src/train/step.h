/* step.h: THE training step of bt. bt-train, the tests and the benchmarks all call
 * bt_train_step; nothing else writes its own step.
 *
 * One call = one optimizer step over n_micro micro-batches (gradient accumulation):
 *   zero the parameter gradients; for each micro-batch k:
 *     keys      image / caption keys per row (given, or hashes of the pixels / token ids) for
 *               duplicate-aware ITC targets and for excluding duplicates from the negatives
 *     MLM       (w_mlm > 0) a masked copy of the captions (loss.h's 15% recipe, seeded by
 *               (seed, step) and each row's record key), appended as text rows B..2B-1
 *     towers    bt_towers_forward on Bt = B (or 2B) texts and B images
 *     negatives (w_itm > 0) one negative image per text and one negative text per image,
 *               sampled ∝ exp(s·t·iᵀ) from the ITC similarities (uniform without an ITC
 *               head), seeded by (seed, step, k); no gradient
 *     cross     bt_cross_forward_pairs on [B positives (b, b)] [B (b, neg_image[b])]
 *               [B (neg_text[b], b)] [B MLM pairs (B+b, b)], the blocks present as needed
 *     losses    ITC on the positives (HF, or duplicate-aware), ITM over the 3B pairs with
 *               labels 1 then 0, MLM over the masked copies; each term's gradient scaled by
 *               its weight / n_micro (HF Trainer: every micro-batch loss / accumulation steps)
 *     backward  bt_cross_backward_pairs, bt_towers_backward (accumulating into m->grads)
 *   then the global grad norm over the trained parameters, the NaN/Inf policy, the clip
 *   coefficient, and the fused AdamW step (optim.h) with lr = schedule(opt.t) and the
 *   per-group multipliers, frozen towers untouched.
 *
 * Reported loss = Σ_k Σ_term w·term_k / n_micro (what HF logs); each term is the mean of the
 * micro-batches' values.
 *
 * Schedule position: the count of updates applied (opt.t), as HF's LambdaLR, which is not
 * stepped when an update is skipped. tr->step counts calls (applied or skipped) and keys
 * the random streams (negatives, masks, dropout).
 *
 * NaN/Inf: a non-finite loss (checked after each micro-batch's losses, before its backward)
 * or a non-finite gradient norm (any non-finite gradient element) is
 *   BT_NAN_SKIP: no update, gradients zeroed, result.skipped = 1 and result.nonfinite says
 *                what was found; BT_OK (the caller logs it);
 *   BT_NAN_STOP: BT_ERR_NUMERIC with "step N: ..." naming the term or the gradient; the
 *                weights and moments are those before the step.
 *
 * Memory: the trainer owns every buffer the step needs; they are sized on the first call (and
 * grow only when a later batch is larger), so a steady-state step allocates nothing.
 *
 * Data parallelism (bt_trainer_set_dist with a world of several ranks, docs/distributed.md):
 * every rank runs this step on its own micro-batches (the same n_micro on every rank), and
 *   counts    per micro-batch, the ranks' row counts and masked-token counts are all-gathered
 *   ITC       the normalized image and positive-pair cross embeddings (and the duplicate keys)
 *             are all-gathered; each rank computes the loss of its own text / image rows
 *             against all N columns (loss.h's local-rows shape, row_offset = the rows of the
 *             lower ranks), the column gradients are reduce-scattered back to their owners
 *             and the logit_scale gradient adds up through the gradient average
 *   ITM, MLM  stay local (negatives from the local batch, as the original recipe); their
 *             gradient weights are rescaled so the average over ranks is the gradient of the
 *             global mean (ITM over all 3N pairs, MLM over all masked tokens of all ranks)
 *   losses    the reported terms are the global values (one all-reduce of three doubles per
 *             micro-batch; a NaN on any rank is therefore seen by all, which keep the same
 *             skip / stop decision)
 *   gradients the gradient arena is averaged (bt_dist_reducer: MPI_Iallreduce per bucket of
 *             dist.bucket_mb, sum, then 1/world). In the last micro-batch (only), each bucket
 *             is launched from the model's gradients-final hook (model.h) as soon as the
 *             backward has finished every tensor it overlaps (bt_step_overlap_schedule:
 *             after the pair heads, each cross layer, the ITC heads, the bridges, each text
 *             layer, the text embeddings, each vision block), and progresses during the rest of the
 *             backward (dist.h's progress thread). Every rank launches the buckets in the
 *             schedule's order (it depends on the parameter table and bucket size only; an
 *             event that does not fire only delays a prefix of it), as MPI requires
 *             (run config dist.overlap false: every bucket is launched at the wait
 *             instead, to measure what the overlap saves). The grad norm, clip and
 *             AdamW then run on identical gradients on every rank.
 * ZeRO-1 (zero_stage 1 in bt_trainer_set_dist): tr->opt holds the moments of this rank's
 * blocks of the arena only (bt_dist_shard_ranges: block r of every bucket); the buckets are
 * reduce-scattered instead of all-reduced (same launches, same overlap), so finish leaves
 * the averaged gradients of the own blocks; the grad norm is the sum of the ranks' shard
 * sums of squares (each rank's share gathered exactly, added in rank order: the same value
 * on every rank, so the same clip and NaN decision), AdamW updates the own blocks, and the
 * updated fp32 weights are all-gathered (dist.h), the bf16 shadow refreshed for the blocks
 * received (t_comm includes that all-gather, t_optimizer does not). Checkpoints gather the
 * moments on rank 0 (bt_trainer_gather_optim).
 * So N ranks × batch b compute the losses and the update of 1 rank × batch N·b up to fp32
 * reduction order. samples and mlm_tokens are then global counts; t_comm is the time the
 * step waited in collectives (the exposed communication: what overlapped the towers'
 * backward is not in it).
 *
 * Deliberately not here: the data loader (the caller fills bt_step_batch from a loader
 * batch), logging and checkpoints (the caller reads bt_step_result and bt_trainer), the MPI
 * calls themselves (src/dist). */
#ifndef BT_TRAIN_STEP_H
#define BT_TRAIN_STEP_H

#include <stddef.h>
#include <stdint.h>

#include "dist/dist.h"
#include "train/loss.h"
#include "model/model.h"
#include "train/optim.h"
#include "train/schedule.h"
#include "status.h"

typedef enum {
    BT_NAN_SKIP, /* skip the update, report it */
    BT_NAN_STOP, /* return BT_ERR_NUMERIC with the step number */
} bt_nan_policy;

typedef struct bt_step_config {
    /* loss weights; 0 turns a term off (its head must be built when > 0) */
    float w_itc, w_itm, w_mlm;
    int itc_duplicate_aware;   /* soft ITC targets over pairs sharing an image or caption */
    int itc_local;             /* data parallel: ITC over the rank's own pairs (HF under DDP;
                                  the loss is the mean of the ranks'), not the global batch */
    int itm_hard_negatives;    /* 1: ∝ exp(ITC sims) (needs the ITC head); 0: uniform */
    int dist_no_overlap;       /* data parallel: launch every gradient bucket at the end of the
                                  backward (run config dist.overlap false), not during it */
    bt_mlm_spec mlm;           /* probability, <mask>, vocab size (the tokenizer's,
                                  <= the model's), special ids */
    /* optimizer */
    bt_adamw_hparams adamw;    /* lr is ignored: the schedule gives it */
    bt_schedule schedule;      /* base lr, total steps, warmup */
    bt_optim_groups groups;    /* lr multipliers, frozen towers */
    double max_grad_norm;      /* <= 0: no clipping */
    bt_nan_policy nan_policy;
    /* randomness */
    uint64_t seed;             /* run seed: negatives, masks, dropout */
    int dropout;               /* 1: training-mode dropout (HF p from the model config) */
} bt_step_config;

/* HF / original-recipe defaults: weights 1/1/1 (ITC HF targets, hard negatives), MLM 0.15,
 * betas (0.9, 0.999), eps 1e-8, wd 0.01, clip 1.0, NaN skip, dropout on; multipliers 1; the
 * caller still sets mlm (ids from the tokenizer), schedule and seed. */
bt_step_config bt_step_config_default(void);

/* One micro-batch, as the trainer fills it from a loader batch (data/loader.h). */
typedef struct bt_step_batch {
    size_t B, T;
    const int32_t *input_ids;      /* (B, T) */
    const int32_t *attention_mask; /* (B, T) 0/1, NULL = all ones */
    const float *pixel_values;     /* (B, 3, R, R) fp32 */
    const int64_t *record;         /* (B) dataset record index: keys of dropout and MLM masks
                                      (NULL: the row index) */
    const uint64_t *image_key;     /* (B) duplicate keys (e.g. hash of the image path);
                                      NULL: a hash of the pixel values */
    const uint64_t *caption_key;   /* (B) NULL: a hash of the token ids */
    /* test hooks (NULL in training): fixed masking and fixed negatives */
    const int32_t *mlm_input_ids;  /* (B, T) masked captions */
    const int32_t *mlm_labels;     /* (B, T) ids or -100 */
    const int32_t *neg_image;      /* (B) negative image for text b */
    const int32_t *neg_text;       /* (B) negative text for image b */
} bt_step_batch;

struct loader_batch;

/* The step's view of a loader batch (data/loader.h): B = size, T = max_length, ids, mask,
 * fp32 pixels, record = the delivered record index; duplicate keys NULL (hashed). The
 * loader batch must stay held (not released) until the step returns. Errors: BT_ERR_ARG
 * for bf16 pixels (the step reads fp32) or an empty batch. */
bt_status bt_step_batch_from_loader(bt_step_batch *out, const struct loader_batch *lb);

typedef struct bt_step_result {
    int64_t step;                  /* index of this step (tr->step before the call; messages
                                      name it 1-based, step + 1, as HF global_step) */
    double loss;                   /* Σ w·term, mean over micro-batches */
    double loss_itc, loss_itm, loss_mlm; /* unweighted terms, mean over micro-batches */
    double lr;                     /* base lr of this step (multipliers apply on top) */
    double grad_norm;              /* global norm before clipping (NaN when skipped early) */
    float clip_coef;
    int skipped;                   /* 1: no update (non-finite loss or gradient) */
    char nonfinite[96];            /* what was non-finite, "" otherwise */
    size_t mlm_tokens;             /* masked positions over the micro-batches */
    size_t itm_fallbacks;          /* negatives drawn uniformly (all-duplicate rows) */
    size_t samples;                /* Σ B */
    /* seconds, summed over micro-batches */
    double t_towers_fwd, t_cross_fwd, t_losses, t_backward, t_optimizer, t_total;
    double t_comm;                 /* seconds in collectives (0 on one process) */
    /* the forwards and backwards (t_towers_fwd + t_cross_fwd + t_losses + t_backward) split
     * by kind of kernel (src/kernels/kernel_clock.h): GEMMs, attention, memory-bound kernels;
     * the rest of that time is the code between kernels (and, under MPI, waits) */
    double t_gemm, t_attention, t_memory;
} bt_step_result;

typedef struct bt_trainer {
    bt_model *model;               /* not owned */
    bt_step_config cfg;
    bt_adamw opt;                  /* moments and opt.t (= schedule position) */
    int64_t step;                  /* steps called (applied or skipped) */
    int64_t n_skipped;
    /* 1 after an applied step: its AdamW pass zeroed the gradients it updated
     * (bt_adamw_step_zero_grad), so the next step zeroes only the rest of the arena
     * (bt_adamw_zero_untouched); nothing but bt_train_step writes the model's gradients */
    int grads_zeroed;
    bt_loss_ws ws;
    /* scratch sized by the largest micro-batch seen (grow-only) */
    size_t cap_B, cap_T;
    int32_t *ids, *mask, *mlm_labels;      /* (2B, T), (2B, T), (B, T) */
    uint64_t *text_keys, *image_keys;      /* (2B), (B) dropout keys */
    uint64_t *dup_image, *dup_caption;     /* (B) duplicate keys */
    int32_t *neg_image, *neg_text;         /* (B) */
    int32_t *itm_labels;                   /* (3B) */
    bt_pair *pairs;                        /* (4B) */
    float *sims;                           /* (B, B) */
    /* data parallelism (bt_trainer_set_dist); dist NULL or size 1: alone */
    const bt_dist *dist;                   /* not owned */
    size_t bucket_bytes;
    int wire_bf16;                         /* gradients in bf16 on the wire */
    bt_dist_reducer red;
    int have_red;
    int zero;                              /* 1: ZeRO-1, tr->opt is this rank's shard */
    double *norm_parts;                    /* (size) shard sums of squares (ZeRO-1) */
    /* the buckets' launch schedule (bt_step_overlap_schedule for the reducer's buckets) */
    size_t *ov_order;                      /* (ov_n) bucket indices in launch order */
    int *ov_pos;                           /* (ov_n) event position each one waits for */
    size_t ov_n, ov_next, ov_bucket;       /* buckets, launched so far, bucket floats */
    int ov_off;                            /* dist.overlap false: all launched at the wait */
    int64_t *counts;                       /* (2 · size) rows and masked tokens per rank */
    float *gbuf;                           /* (4, N, C) gathered image / cross cols + grads */
    uint64_t *gkeys;                       /* (2, N) gathered duplicate keys */
    size_t gcap;                           /* N of gbuf / gkeys */
} bt_trainer;

/* Checks the config against the model (heads for nonzero weights, positive accumulation is
 * the caller's, mask id inside the vocabulary, a schedule set) and builds the optimizer.
 * Errors: BT_ERR_CONFIG naming the field. */
bt_status bt_trainer_init(bt_trainer *tr, bt_model *m, const bt_step_config *cfg);
void bt_trainer_free(bt_trainer *tr);
/* The overlap schedule of the buckets of `bucket` floats over t's gradient arena: for each
 * bucket, the position (model.h bt_grad_event_order) of the backward event after which
 * every element it overlaps is final: the latest event among the field repetitions it
 * overlaps (bt_param_grad_event), -1 when no backward writes any of them (final from the
 * start of the backward). order[i] = bucket indices sorted by that position (ties in index
 * order), pos[i] = its position; both have room for the bucket count, which is returned.
 * Depends only on the table and the bucket size: the same on every rank. */
size_t bt_step_overlap_schedule(const bt_param_table *t, size_t bucket, size_t *order,
                                int *pos);
/* The share of the arena's floats in buckets launched before the towers' backward ends
 * (position before the last event, BT_GRAD_EV_VIT_EMB). */
double bt_step_overlap_share(const bt_param_table *t, size_t bucket);
/* Makes the step data-parallel over d (see above), gradients averaged in buckets of
 * bucket_bytes (0: one bucket), in bf16 on the wire when wire_bf16 (dist.h); zero_stage 1
 * shards the optimizer state (ZeRO-1, above; the moments so far are dropped: call it before
 * loading any, then bt_optim_state_load fills tr->opt, a shard reading its blocks only).
 * d must outlive the trainer; NULL or size 1: alone (zero_stage ignored). */
void bt_trainer_set_dist(bt_trainer *tr, const bt_dist *d, size_t bucket_bytes,
                         int wire_bf16, int zero_stage);

/* This rank's optimizer-state bytes: the AdamW moments it holds (its shard under ZeRO-1;
 * the reduce-scatter works in place, no other buffer); *full_bytes (may be NULL) = the
 * moments of every trained parameter, what one unsharded rank holds. */
size_t bt_trainer_optim_bytes(const bt_trainer *tr, size_t *full_bytes);

/* The trainer's optimizer state as one full (unsharded) optimizer, for a checkpoint.
 * Unsharded: *out = &tr->opt, nothing copied, no communication. ZeRO-1: collective (every
 * rank calls it at the same point): rank 0 receives every rank's moment shard into *full
 * (initialized here; the caller frees it with bt_adamw_free) and *out = full; the other
 * ranks send theirs and get *out = NULL. */
bt_status bt_trainer_gather_optim(bt_trainer *tr, bt_adamw *full, const bt_adamw **out);

/* Sizes the step's scratch and the model's arenas for micro-batches of up to B x T now (and
 * backs the arenas with memory, model.c), so the first bt_train_step allocates and faults
 * nothing; the step does the same lazily otherwise. Errors: as bt_model_reserve_phases. */
bt_status bt_trainer_reserve(bt_trainer *tr, size_t B, size_t T);

/* One optimizer step over micro[0..n_micro). Errors: a bad batch (BT_ERR_ARG naming the
 * micro-batch and field), the model's input errors, BT_ERR_NUMERIC under BT_NAN_STOP.
 * *res is filled in every case (as far as the step got). */
bt_status bt_train_step(bt_trainer *tr, const bt_step_batch *micro, size_t n_micro,
                        bt_step_result *res);

#endif
