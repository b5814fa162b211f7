/* model.h: the BridgeTower model (HF BridgeTowerModel + ITC / ITM / MLM heads), forward and
 * backward on CPU, fp32 or bf16 mixed precision.
 *
 * Memory (llm.c style): parameters, gradients and the bf16 shadow are arenas laid out by the
 * parameter table (params.h); activations live in named slots of two phase arenas (towers,
 * pairs; see "Phases" at the end), and activation gradients in arenas mirroring the slots
 * that carry a gradient (saved statistics such as probs / mean / rstd have none). Activation
 * gradients of streams that merge (residuals, bridges, the shared ln_post, transforms and
 * type rows, the ITC image path, tower rows read by several pairs) are ACCUMULATED (ops.h
 * BT_DX_ADD) into zeroed slots, so they need no special case; a layer's internal gradients,
 * which have one writer (or a first one in backward order), are ASSIGNED (BT_DX_SET) in slots
 * that nothing zeroes (model.c "activation layout"). Parameter gradients accumulate: call
 * bt_zero_grad before a step (or keep them for accumulation).
 *
 * Order (docs/spec.md §3): towers phase = vit_forward, text_forward, the uni-modal bridge
 * halves (cross_towers_forward), the ITC uni-modal head; pairs phase = link towers, cross
 * layers, poolers (cross_pairs_forward), ITM / MLM / ITC-cross heads; the backwards are the
 * reverse. bt_forward = towers on the batch, pairs (i, i), the HF losses.
 *
 * Precision: BT_PRECISION_FP32 runs every GEMM in fp32. BT_PRECISION_BF16 runs every GEMM
 * (Linear layers incl. the patch embedding, attention products) with GEMM_COMPUTE_BF16,
 * weights read from the bf16 shadow copy (refresh it after changing the master weights:
 * bt_model_refresh_bf16, or the optimizer does it; gradient checkpointing drops it, and each
 * product rounds its weight itself: bt_model_drop_bf16_shadow) where native bf16 GEMMs are
 * faster; where they are not (gemm.h route FP32: no native bf16, or AUTO measured it slower)
 * its GEMMs run in fp32 exactly as in fp32 mode and there is no shadow; LayerNorm, softmax,
 * GELU, the losses, the contrastive score matrices, residual streams and master weights stay
 * fp32. Activations that only bf16 GEMMs read are stored in bf16 (see "bf16 activation
 * storage": the same bits).
 *
 * Dropout (training only, docs/spec.md §3.10): p = hidden_dropout_prob after the text
 * embedding LN and on the attention-output and FFN-output denses of text and cross layers,
 * p = attention_probs_dropout_prob on every text and cross attention-probability matrix.
 * Each call site draws its mask per row from seed = hash(run seed, step, site id, row key)
 * (row keys: see "Phases"), so a step is reproducible, the backward regenerates the masks,
 * and masks follow samples, not local rows. Off (exactly identity) unless
 * bt_model_set_dropout(m, 1, ...) was called.
 *
 * Deliberately not here: checkpoint files with key reports (checkpoint module), the
 * optimizer (src/train/optim.h), hard-negative ITM mining (training loop), image position
 * interpolation (images must be image_size x image_size). */
#ifndef BT_MODEL_H
#define BT_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "model/config.h"
#include "dtype.h"
#include "kernels/gemm.h"
#include "model/params.h"
#include "status.h"

typedef enum {
    BT_PRECISION_FP32,
    BT_PRECISION_BF16,
} bt_precision;

/* One batch. The model copies the integer inputs in bt_forward, so the caller's buffers may
 * change between forward and backward. */
typedef struct bt_batch {
    size_t B, T;
    const int32_t *input_ids;      /* (B, T) token ids, pads = pad_token_id */
    const int32_t *attention_mask; /* (B, T) 1 keep / 0 pad; NULL = all ones */
    const float *pixel_values;     /* (B, 3, R, R) normalized pixels */
    const int32_t *itm_labels;     /* (B) 0/1 (-100 ignored), or NULL: no ITM loss */
    const int32_t *mlm_labels;     /* (B, T) target ids or -100, or NULL: no MLM loss */
} bt_batch;

/* --- phased API inputs (see "Phases" below) ------------------------------------------------ */

/* Bt texts. The model copies ids, mask and keys (the caller's buffers may change). */
typedef struct bt_text_input {
    size_t B, T;                    /* Bt rows of T tokens (Bt may be 0: no text tower) */
    const int32_t *input_ids;       /* (Bt, T) */
    const int32_t *attention_mask;  /* (Bt, T) 0/1, NULL = all ones */
    const uint64_t *sample_keys;    /* (Bt) global key of each row for the dropout masks (e.g.
                                       the dataset index, | 1<<63 for a masked-MLM copy);
                                       NULL = the row index */
} bt_text_input;

/* Bi images. pixel_values is read during bt_towers_forward only. */
typedef struct bt_image_input {
    size_t B;                       /* Bi images (may be 0: no vision tower) */
    const float *pixel_values;      /* (Bi, 3, R, R) normalized, R = image_size */
    const uint64_t *sample_keys;    /* (Bi) NULL = the row index */
} bt_image_input;

/* One cross-modal pair: rows of the last bt_towers_forward. mlm: 1 = MLM logits wanted. */
typedef struct bt_pair {
    int32_t text_row, image_row;
    int32_t mlm;
} bt_pair;

/* --- activation slots ---------------------------------------------------------------------
 * Two phases own two arena pairs (activations + activation gradients, see "Phases" below):
 *   tower arena:  text rows Nt = Bt*T, image rows Nv = Bi*Np, the uni-modal halves of the
 *                 bridges, the ITC uni-modal embeddings (Bt / Bi rows);
 *   pair arena:   the cross stack on P pairs (text rows P*T, image rows P*Np), poolers, ITM
 *                 (P rows), MLM (Pm*T rows of the Pm flagged pairs), ITC cross (P rows).
 * In the slot comments below B is the row count of the owning phase (Bt, Bi or P). */

/* Per-block activation structs, defined by their blocks (text.h, vit.h, cross.h, heads.h). */
typedef struct bt_text_acts bt_text_acts;
typedef struct bt_vit_acts bt_vit_acts;
typedef struct bt_text_layer_acts bt_text_layer_acts;
typedef struct bt_vit_layer_acts bt_vit_layer_acts;
typedef struct bt_cross_layer_acts bt_cross_layer_acts;
typedef struct bt_bridge_acts bt_bridge_acts;
typedef struct bt_cross_acts bt_cross_acts;
typedef struct bt_heads_acts bt_heads_acts;

typedef struct bt_acts {
    /* --- tower arena --- */
    bt_text_acts *text;     /* the text tower's slots (text.h) */
    float *key_bias;        /* (Bt, T) 0 or -FLT_MAX (no grad) */
    bt_vit_acts *vit;       /* the vision tower's slots (vit.h) */
    /* --- both: bridges (see bt_bridge_acts) --- */
    bt_bridge_acts *bridges;       /* [X] */
    /* --- pair arena --- */
    float *pair_key_bias;   /* (P, T) key_bias rows of the pairs' texts (no grad) */
    bt_cross_layer_acts *xt, *xi;  /* [X] text side, image side */
    bt_cross_acts *cross;   /* the poolers' slots (cross.h) */
    /* --- both: the heads' slots (heads.h) --- */
    bt_heads_acts *heads;
} bt_acts;

/* Scratch of the HF-style losses that bt_forward / bt_backward compute (heads.c), sized by
 * bt_model_reserve for B = Bt = Bi = P = Pm; not used by the phased API. */
typedef struct bt_hf_loss {
    float *itc_scores, *d_itc_scores; /* (3, B, B) s·T·Iᵀ, s·T·Cᵀ, s·I·Cᵀ and their grads */
    float *itc_probs;       /* (3, B, B) */
    float *itm_probs;       /* (B, 2) */
    float *mlm_probs;       /* (B*T, V) */
    int32_t *itc_targets;   /* (B) arange */
    int32_t *itm_labels;    /* (B) */
    int32_t *mlm_labels;    /* (B*T) */
    bt_pair *pairs;         /* (B) (i, i) */
    int has_itm_labels, has_mlm_labels;
} bt_hf_loss;

/* One arena: activation memory (bytes, 64-byte aligned), grow-only. */
typedef struct bt_arena {
    void *mem;
    size_t bytes;           /* allocated */
    size_t used;            /* by the current layout */
    size_t head;            /* gradient arenas: bytes of the leading d_* output slots (zeroed by
                               the forward) */
    size_t acc_end;         /* gradient arenas: [head, acc_end) holds the accumulated internal
                               slots (zeroed lazily by the backward), [acc_end, used) the
                               assigned ones (never zeroed: written before read; model.c
                               "activation layout") */
} bt_arena;

typedef void (*bt_grads_final_fn)(void *ctx, bt_grad_event ev, int layer);

/* Activation memory mode (see "Memory modes" below). */
typedef enum {
    BT_ACTS_FULL,         /* training (default): every layer keeps its internals */
    BT_ACTS_CHECKPOINT,   /* training, gradient checkpointing: layers keep inputs / outputs,
                             the backward recomputes each layer's internals */
    BT_ACTS_FORWARD_ONLY, /* no backward (inference, evaluation): no gradient arenas */
} bt_act_mode;

/* The groups of the shared layer scratch (model.c); checkpointing zeroes one group's
 * gradient slots before each recomputed layer's backward. */
enum {
    BT_GROUP_VIT,         /* one ViT block's internals */
    BT_GROUP_TEXT,        /* one text layer's internals */
    BT_GROUP_CROSS_TEXT,  /* one cross layer's internals, text side */
    BT_GROUP_CROSS_IMAGE, /* image side */
    BT_GROUP_FORWARD,     /* forward-only intermediates (embeddings, ln_post, link sums) */
    BT_GROUP_COUNT
};

typedef struct bt_model {
    bt_model_config cfg;
    bt_param_table table;
    unsigned heads;          /* BT_HEADS_* */
    bt_precision precision;
    float *params;           /* (table.numel) fp32 master weights */
    float *grads;            /* (table.numel) parameter gradients (pages backed on first write
                                or by bt_model_reserve_phases; NULL after bt_model_free_grads) */
    int grads_backed;        /* bt_model_reserve_phases backed them */
    bt_bf16 *params_bf16;    /* (table.numel) GEMM weights in bf16 mode, else NULL */
    unsigned char packed[BT_P_COUNT]; /* the field's weights are packed: the shadow, or
                                         without one the master (bt_model_pack_weights) */
    bt_param_views p, g;     /* named views of params and grads */

    /* shapes of the last phase forwards: towers (Bt, Bi, T), pairs (P, Pm); B = the batch
     * of the last bt_forward (0 after phase calls). */
    size_t Bt, Bi, T, P, Pm, B;
    bt_acts acts, dacts;     /* dacts: gradient slots (NULL where a slot has none) */
    bt_acts walk_scratch;    /* where the counting walks lay out (sizes without moving acts) */
    bt_arena tower_act, tower_dact, pair_act, pair_dact, hf_mem;
    bt_act_mode act_mode;    /* bt_model_set_act_mode (default BT_ACTS_FULL) */
    int act_bf16;            /* bf16 activation storage requested (bt_model_set_act_bf16;
                                default 1, BT_ACT_BF16=0 at bt_model_init: 0) */
    int keep_probs;          /* attention keeps P for the backward (bt_model_set_keep_probs;
                                default 0: recomputed; BT_ATTENTION_PROBS=keep: 1) */
    int cross_features;      /* the last cross layer runs every row of both sides
                                (bt_model_set_cross_features; default 0: cross.c) */
    int share_layer_grads;   /* BT_ACTS_FULL: layer internal gradients in the shared scratch
                                layer_dact (bt_model_set_share_layer_grads; default 1) */
    bt_arena layer_act, layer_dact; /* shared layer scratch (checkpoint) and layer gradients
                                       (checkpoint; full when shared) */
    bt_arena *scratch;       /* where the shared scratch lives now (layer_act, or in forward-
                                only mode an unused gradient arena large enough); NULL: none */
    size_t group_grad_bytes[BT_GROUP_COUNT]; /* checkpoint: gradient bytes of each group */
    size_t act_numel, dact_numel; /* bytes in use in acts / dacts (both phases) / 4 (a bf16
                                     slot counts half) */
    /* tower-phase inputs (copied), in the tower arena */
    int32_t *ids, *mask, *pos_ids; /* (Bt, T) */
    uint64_t *text_keys;     /* (Bt) dropout row keys */
    uint64_t *image_keys;    /* (Bi) */
    /* pair-phase inputs (copied), in the pair arena */
    bt_pair *pairs;          /* (P) */
    int32_t *mlm_rows;       /* (Pm) pair index of each MLM pair */
    uint64_t *pair_keys;     /* (P) hash(text key, image key) */
    int have_towers, have_pairs;           /* a phase forward ran on the current layout */
    int tower_grad_dirty, pair_grad_dirty; /* internal gradient slots need zeroing */

    /* the phase outputs and the gradient slots a loss accumulates into (see "Phases") */
    float *itc_text, *d_itc_text;         /* (Bt, C) */
    float *itc_image, *d_itc_image;       /* (Bi, C) */
    float *pooler_out;                    /* (P, 2H) */
    float *itc_cross, *d_itc_cross;       /* (P, C) */
    float *itm_logits_out, *d_itm_logits; /* (P, 2) */
    float *mlm_logits_out, *d_mlm_logits; /* (Pm*T, V) */

    /* dropout */
    int training;
    uint64_t dropout_seed, step;
    float hidden_dropout, attn_dropout;

    /* bt_forward's HF losses (0 when not computed) */
    bt_hf_loss hf;
    float loss_itc, loss_itm, loss_mlm;
    size_t mlm_valid;        /* non-ignored MLM positions */

    /* gradients-final hook (see "Gradients-final events"); NULL: none */
    bt_grads_final_fn grads_final;
    void *grads_final_ctx;
} bt_model;

/* Weights of each loss in the backward (total = Σ w·loss). */
typedef struct bt_loss_weights {
    float itc, itm, mlm;
} bt_loss_weights;

/* Builds the table and allocates params, grads (zeroed) and, in bf16 mode, the shadow.
 * Parameters are zero until bt_model_init_params or a load. Reads BT_ACT_BF16 ("0" or "1",
 * see "bf16 activation storage"; another value is an error naming it). */
bt_status bt_model_init(bt_model *m, const bt_model_config *c, unsigned heads,
                        bt_precision precision);
/* The check bt_model_init makes of BT_ACT_BF16 and BT_ATTENTION_PROBS ("bf16 activation
 * storage" and BT_ATTENTION_PROBS below), for a tool to make before it writes anything:
 * BT_ERR_ARG naming the variable and the values it takes. */
bt_status bt_model_settings_check(void);
void bt_model_free(bt_model *m);

/* HF init rules from a seed (params.h), then the bf16 refresh. */
void bt_model_init_params(bt_model *m, uint64_t seed);
/* Strict load of every tensor of the table (bt_params_load_safetensors), then refresh. */
bt_status bt_model_load_safetensors(bt_model *m, const char *path);
/* Rewrites the bf16 shadow from the master weights (no-op in fp32 mode). */
void bt_model_refresh_bf16(bt_model *m);

/* Sizes everything bt_forward needs for batch B x T: the phase arenas for (B, B, B, B or 0
 * (MLM head), T) and the HF loss scratch (grow-only). Errors: as bt_model_reserve_phases. */
bt_status bt_model_reserve(bt_model *m, size_t B, size_t T);

/* Training-mode dropout on/off; masks are drawn from (seed, step, site, row key). */
void bt_model_set_dropout(bt_model *m, int training, uint64_t seed, uint64_t step);

/* Forward of the backbone and the built heads. Losses are computed for heads whose labels
 * are present (ITC always when built). Errors (naming the input and the offending element):
 * token ids / labels out of range, mask values other than 0/1, T too long for the position
 * table, NULL pixel_values or input_ids. */
bt_status bt_forward(bt_model *m, const bt_batch *b);

/* Backward of Σ w·loss for the last bt_forward: zeroes the activation gradients, writes the
 * HF losses' gradients into the d_* slots, then bt_cross_backward_pairs and
 * bt_towers_backward, accumulating into m->grads. Losses that were not computed are skipped.
 * May be called several times after one bt_forward (each call starts from zero). */
void bt_backward(bt_model *m, const bt_loss_weights *w);

/* m->grads = 0. */
void bt_zero_grad(bt_model *m);

/* --- Phases ------------------------------------------------------------------------------
 * The trainer runs the model in phases instead of one bt_forward:
 *
 *   bt_towers_forward(m, texts, images)   (a) text tower on Bt texts, vision tower on Bi
 *       images, the uni-modal half of every bridge per row (ut_k = Tt(T_k) + tt0 per text,
 *       ui_k = Ti(ln_post(I_k)) + tt1 per image), (b) the ITC uni-modal embeddings
 *       m->itc_text (Bt, C) and m->itc_image (Bi, C), L2-normalized (ITC head built).
 *   bt_cross_forward_pairs(m, pairs, P)   (c) the cross stack on P (text_row, image_row)
 *       pairs: link towers, cross layers, poolers m->pooler_out (P, 2H), ITC cross
 *       m->itc_cross (P, C) normalized, ITM m->itm_logits_out (P, 2), MLM
 *       m->mlm_logits_out (Pm*T, V) for the Pm pairs with mlm = 1, in pair order.
 *   a loss (outside the model: src/train/loss.c) reads those outputs and ACCUMULATES its
 *       gradients into m->d_itc_text (Bt, C), m->d_itc_image (Bi, C), m->d_itc_cross (P, C),
 *       m->d_itm_logits (P, 2), m->d_mlm_logits (Pm*T, V) (zeroed by the forward that
 *       produced them), and the logit_scale gradient into *m->g.logit_scale directly.
 *   bt_cross_backward_pairs(m)   parameter gradients of the cross phase; the gradients of the
 *       tower rows the pairs read (ut_k, ui_k, the ITC-shared ui_{X-1}) are ACCUMULATED per
 *       row, so a text row used by 3 pairs receives the sum of 3 gradients.
 *   bt_towers_backward(m)   the towers from d_itc_text / d_itc_image plus what the cross
 *       backward(s) accumulated; parameter gradients accumulate into m->grads.
 *
 * Rules: a cross forward reads the rows of the LAST bt_towers_forward; several
 * forward/backward rounds of the cross phase may run on one tower pass (their row gradients
 * add up) before the one bt_towers_backward of that pass. Internal gradient slots are zeroed
 * lazily (once per forward of their phase); parameter gradients are never zeroed here
 * (bt_zero_grad). Outputs and d_* pointers stay valid until the next forward of their phase
 * (a towers forward also ends the last pair phase) or a reserve that grows the arena.
 * (Lazily zeroed: the accumulated slots only; the assigned ones are written by their first
 * writer before anything reads them, in every backward.)
 *
 * Memory: each phase has an activation arena and an activation-gradient arena, each ONE
 * allocation laid out by a walk over named slots (model.c); sizes depend on (Bt, Bi, T) for
 * the towers and (P, Pm, T) for the pairs. Arenas only grow (a smaller batch reuses the
 * memory, no allocation); bt_model_reserve_phases sizes them up front so a training step
 * allocates nothing. bt_model_activation_bytes runs the same walk without allocating.
 * Running out of memory is a bt_status (BT_ERR_NOMEM, naming the bytes needed and what to
 * reduce), checked before allocating against what the machine has (src/mem.h bt_mem_check:
 * MemAvailable, cgroup limits; BT_MEM_CHECK=0 skips it), never an abort.
 *
 * Dropout keys: every dropout mask is drawn per row from (run seed, step, site, row key):
 * row key = the text's sample key for text-tower rows, hash(text key, image key) for both
 * sides of a pair's cross layers (the vision tower has no dropout). Masks therefore follow
 * the samples, not their local row index: a batch split across ranks, or its rows permuted,
 * sees the same masks (for the same T: the attention masks are indexed within a row's
 * (heads, T, T) block). A pair listed twice with the same keys gets the same masks.
 *
 * bt_forward / bt_backward are thin users: towers on (B texts, B images, keys = row index),
 * pairs (i, i) all flagged mlm when the MLM head is built; the HF-style losses they report
 * (ITC with arange targets, ITM with labels, MLM with labels) are computed by small
 * model-internal code (heads.c, bt_hf_loss scratch) kept for bt_forward only: the trainer's
 * losses live in src/train and write the d_* slots. */

/* (a)+(b). Sizes the tower arenas for (Bt, Bi, T) (grow-only). Bt or Bi may be 0 (that tower
 * is skipped; t or im may then be NULL). Zeroes d_itc_text and d_itc_image. Errors (naming the input and element): ids out of range, mask values other
 * than 0/1, T too long for the position table, NULL input_ids / pixel_values with a nonzero
 * count, BT_ERR_NOMEM (see Memory). */
bt_status bt_towers_forward(bt_model *m, const bt_text_input *t, const bt_image_input *im);

/* (c). pairs index the last bt_towers_forward (copied; both rows must exist). Sizes the pair
 * arenas for (P, Pm, T). Zeroes d_itc_cross, d_itm_logits, d_mlm_logits. Without an MLM head
 * the mlm flags are ignored (Pm = 0). Errors: a row index out of range or an mlm flag other
 * than 0/1 (named), P = 0, no tower pass, BT_ERR_NOMEM. */
bt_status bt_cross_forward_pairs(bt_model *m, const bt_pair *pairs, size_t P);

/* Backward of the last bt_cross_forward_pairs from the d_* pair slots (see Phases). */
void bt_cross_backward_pairs(bt_model *m);

/* Backward of the last bt_towers_forward: from d_itc_text / d_itc_image plus what the cross
 * backward(s) accumulated. Call after bt_cross_backward_pairs (or alone when no cross phase
 * ran, e.g. an ITC-only step with the cross stack frozen). Once per bt_towers_forward. */
void bt_towers_backward(bt_model *m);

/* --- Gradients-final events --------------------------------------------------------------
 * For a caller that ships gradients while the backward still runs (data parallelism:
 * src/train/step.c launches each gradient bucket once all its elements are final). With
 * m->grads_final set, the backwards call grads_final(grads_final_ctx, event, layer) at each
 * point past which the rest of that pass writes a set of parameter gradients no more:
 *   BT_GRAD_EV_PAIR_HEADS  in bt_cross_backward_pairs: ITM, MLM, ITC-cross heads
 *   BT_GRAD_EV_CROSS_LAYER layer k = X-1 .. 0: both sides of cross layer k, the link tower
 *                          k-1 that feeds it (k = 0: the first LayerNorms), and with k = X-1
 *                          the poolers
 *                          (the pair events: final when it was the pass's last cross round)
 *   BT_GRAD_EV_ITC_HEADS   in bt_towers_backward: itc_text_head, itc_image_head
 *   BT_GRAD_EV_BRIDGES     text / image transforms, token_type_embeddings, ln_post
 *   BT_GRAD_EV_TEXT_LAYER  layer l = Lt-1 .. 0 (Bt > 0): text layer l
 *   BT_GRAD_EV_TEXT_EMB    (Bt > 0) word / position / type embeddings, embedding LN
 *   BT_GRAD_EV_VIT_LAYER   layer l = Lv-1 .. 0 (Bi > 0): vision block l
 *   BT_GRAD_EV_VIT_EMB     (Bi > 0) class / patch / position embeddings, ln_pre
 * fired in this order (bt_grad_event_order: strictly increasing along a pass). The model
 * knows nothing of what the callback does (no MPI here). tests/test_grad_events.c checks
 * the contract: nothing is written after its event and the events cover every gradient
 * element a backward writes. Which event finalizes a field is the ev / evl column of the
 * parameter list (params.h bt_param_grad_event). */
static inline void bt_grads_final(bt_model *m, bt_grad_event ev, int layer) {
    if (m->grads_final) m->grads_final(m->grads_final_ctx, ev, layer);
}
/* Position of (ev, layer) in the firing order of one cross + towers backward for config c
 * (X cross layers): PAIR_HEADS 0, cross layers 1 .. X (layer X-1 first), ITC_HEADS X+1,
 * BRIDGES X+2, text layers X+3 .. X+Lt+2 (layer Lt-1 first), TEXT_EMB X+Lt+3, vision blocks
 * X+Lt+4 .. X+Lt+Lv+3, VIT_EMB X+Lt+Lv+4 (the last); -1 for BT_GRAD_EV_NONE. */
int bt_grad_event_order(const bt_model_config *c, bt_grad_event ev, int layer);

/* Bytes of the activation and activation-gradient arenas of both phases for (Bt, Bi, P,
 * Pm, T) with this config, head set and precision in BT_ACTS_FULL (other modes:
 * bt_model_activation_bytes_mode), computed by the walk that lays out the arenas (what
 * bt_model_reserve_phases allocates). Excludes parameters, gradients, the
 * optimizer and bt_forward's HF loss scratch (bt_model_hf_loss_bytes). */
size_t bt_model_activation_bytes(const bt_model_config *c, unsigned heads, bt_precision prec,
                                 size_t Bt, size_t Bi, size_t P, size_t Pm, size_t T);
/* Bytes of bt_forward's HF loss scratch for batch B x T (allocated by bt_model_reserve). */
size_t bt_model_hf_loss_bytes(const bt_model_config *c, unsigned heads, size_t B, size_t T);

/* Sizes both phases' arenas for the largest shapes a run will use (grow-only). Errors: T
 * too long for the position table, BT_ERR_NOMEM with the bytes needed and the machine's
 * available memory, naming what to reduce (batch size, max text length, image size). */
bt_status bt_model_reserve_phases(bt_model *m, size_t Bt, size_t Bi, size_t P, size_t Pm,
                                  size_t T);

/* --- Memory modes --------------------------------------------------------------------------
 * BT_ACTS_FULL keeps, for every layer, every internal slot its backward reads (q, k, v,
 * FFN intermediates, LayerNorm statistics, ...; attention probabilities only with
 * bt_model_set_keep_probs). The gradients of those internals are dead once their layer's
 * backward is done (each is assigned and read inside that backward), so by default they live
 * in one shared gradient scratch per kind of layer, as when checkpointing (2.6 GB less at
 * base, batch 8: docs/benchmarks.md "Layer gradients shared"; PyTorch's autograd frees them
 * likewise); bt_model_set_share_layer_grads(m, 0) gives every layer its own (for A/B
 * checks: the same bits, tests/test_model_memory.c 8). The two other modes place the
 * internals of the ViT blocks, text layers and cross layers (both sides) in ONE shared scratch
 * holding a single layer's worth (the largest of them; layer l overwrites layer l-1's):
 *   BT_ACTS_FORWARD_ONLY: no backward will run. No gradient arenas; besides the layer
 *     internals, the forward-only intermediates (patch / text embeddings before their
 *     LayerNorm, ln_post of the bridges, the link towers' sums) share the scratch, hidden
 *     states that no bridge reads alternate between two buffers, and the cross stack keeps
 *     one X'/Y' input and one output per side. Kept: what later code reads (the bridged
 *     tower layers, ut / ui, the last cross outputs, heads). The scratch is placed in an
 *     already allocated but unused gradient arena when one is large enough (evaluation
 *     inside a training run allocates nothing), else in its own arena. bt_cross_backward_pairs
 *     / bt_towers_backward / bt_backward abort with a message in this mode. Outputs are bit
 *     for bit those of BT_ACTS_FULL (same kernels on the same numbers).
 *   BT_ACTS_CHECKPOINT (gradient checkpointing, HF gradient_checkpointing): every layer's
 *     input and output are kept (tower hidden states, bridges, cross layer inputs X'_k, Y'_k
 *     and outputs), the internals live in the shared scratch, and their gradients in one
 *     shared gradient scratch. Each layer's backward first recomputes the layer's forward
 *     into the scratch (same kernels, same inputs, same dropout masks: they are keyed by
 *     (seed, step, site, row key)), zeroes the scratch's accumulated gradient slots (none
 *     today: a layer's internal gradients are all assigned), then runs as before; the
 *     gradients are bit for bit those of BT_ACTS_FULL when the GEMMs are deterministic for a
 *     shape. Costs about one more forward of the layers per step.
 * Switching the mode ends the current phases (the next forward places the slots again);
 * arenas only grow, so a model that trained in BT_ACTS_FULL evaluates in BT_ACTS_FORWARD_ONLY
 * without allocating. */
void bt_model_set_act_mode(bt_model *m, bt_act_mode mode);
/* BT_ACTS_FULL's layer internal gradients in one shared scratch (on, the default) or one per
 * layer (off). Changing it ends the current phases. */
void bt_model_set_share_layer_grads(bt_model *m, int on);
/* "full", "checkpoint", "forward-only". */
const char *bt_act_mode_name(bt_act_mode mode);

/* Frees the parameter gradients of a model that will never train (bt-eval, bt-embed, an
 * inference benchmark): m->grads = NULL, views in m->g NULL; a backward then aborts. Sets
 * BT_ACTS_FORWARD_ONLY. */
void bt_model_free_grads(bt_model *m);

/* Frees the bf16 shadow (no-op without one; not for packed weights): every bf16 product then
 * reads its fp32 master weight and rounds it to bf16 itself, per call (gemm.h: the same round
 * to nearest even the shadow was written with), so every result is the same bits, for 2 bytes
 * per parameter less and one rounding of each weight per product. Gradient checkpointing
 * takes this trade (bt-train with train.gradient_checkpointing in bf16, bench_step
 * --checkpoint: docs/model.md "Precision"); the optimizer and bt_model_refresh_bf16 then
 * write no shadow. */
void bt_model_drop_bf16_shadow(bt_model *m);

/* Packed weights, for a model that will never train (after bt_model_free_grads): rewrites
 * every Linear weight whose forward product can read oneDNN's blocked layout (gemm.h "Packed
 * weights": a layout without padding, e.g. every base / large Linear but the ITM head and the
 * MLM decoder) in place into that layout, so no forward product reorders it. What is packed
 * is what the products read: the bf16 shadow where bf16 products run (the native route with
 * Blocked B active; bt_model_refresh_bf16 packs again), else the fp32 master itself (fp32
 * brgemm, ISA avx512_core or better, and the fast kernels: the master then has no row-major
 * copy, so load the weights before packing and do not change them after). model_linear
 * (towers.h) is the only reader of these fields and hands a packed one to the forward as
 * w_packed; results are the same bits. Returns the number of tensors packed (0 where nothing
 * can be: AVX2, BT_GEMM_PACK_B=off, AMX under AUTO in bf16, the reference kernels in fp32). */
size_t bt_model_pack_weights(bt_model *m);

/* bt_model_activation_bytes for a memory mode (the arenas bt_model_reserve_phases allocates
 * in that mode on a fresh model, the shared scratch included; in bf16 precision with the bf16
 * activation storage that BT_ACT_BF16 and the active GEMM route give a fresh model). */
size_t bt_model_activation_bytes_mode(const bt_model_config *c, unsigned heads,
                                      bt_precision prec, bt_act_mode mode, size_t Bt,
                                      size_t Bi, size_t P, size_t Pm, size_t T);

/* --- bf16 activation storage ----------------------------------------------------------------
 * Where bf16 mode computes its GEMMs in bf16 (the native and widened routes, gemm.h), each
 * product rounds its operands to bf16: an fp32 activation that only GEMMs read was rounded by
 * the Linear forward, again by its dW product (and again by a checkpointed recompute). Such
 * activations are stored in bf16 instead, written already rounded by the kernel that makes
 * them (layernorm_forward_bf16, gelu_forward_bf16, quick_gelu_forward_bf16, ops.h) or, for an
 * attention output, rounded once from an fp32 staging buffer (one per phase in BT_ACTS_FULL,
 * in the layer scratch otherwise) before its out-projection reads it:
 *   ViT blocks: ln_1 / ln_2 outputs (y1_16, y2_16), attention output (ctx_16), QuickGELU
 *     output (f_16);  text and cross layers: attention outputs (ctx_16, cctx_16), GELU output
 *     (f_16);  bridges: the ln_post output (lnp_16).
 * The stored bits are the operand the GEMMs used before (gemm.h: round to nearest even), so
 * losses, gradients and weights are bit for bit those of fp32 storage
 * (tests/test_model_memory.c 5) and those slots take half the bytes; their gradients stay
 * fp32 (gradient arenas unchanged).
 * Not converted: q / k / v (attention reads them), LayerNorm outputs that also feed a residual
 * (text and cross layers), anything in fp32 mode or on the FP32 route. Each placement of a
 * phase decides: on when requested (the default; BT_ACT_BF16=0 in the environment at
 * bt_model_init, or bt_model_set_act_bf16(m, 0), turns it off, e.g. for an A/B comparison),
 * precision BF16 and a route that computes in bf16. Changing it ends the current phases (as
 * bt_model_set_act_mode). */
void bt_model_set_act_bf16(bt_model *m, int on);
/* 1 when the next placement stores those activations in bf16 (requested, bf16 precision and
 * bf16 GEMM compute now). */
int bt_model_act_bf16(const bt_model *m);

/* Attention probabilities. The training layouts (full and checkpoint) used to keep every
 * attention's P = softmax(S) (B*NH*Tq*Tk floats per attention; 0.8 GB of base's 7.8 GB of
 * activations at batch 8, 288 px) for the backward. By default none is kept: each
 * attention's backward recomputes its P block by block from q, k and the key bias with the
 * forward's own product and row pass (flash attention's trade: one more score product per
 * block), so gradients, losses and weights are the same bits (tests/test_ops_fast.c,
 * tests/test_model_memory.c). BT_ATTENTION_PROBS=keep at bt_model_init, or
 * bt_model_set_keep_probs(m, 1), keeps them: about 1.4% of the step faster where the
 * products run in fp32 on AVX2 without checkpointing, for their memory (docs/model.md
 * "Attention probabilities"). Changing it ends the current phases. */
void bt_model_set_keep_probs(bt_model *m, int on);

/* The last cross layer. Of its outputs X_{X-1} (text_features) and Y_{X-1} (image_features)
 * BridgeTower's heads read each pair's CLS row (the poolers: ITC, ITM) and, with the MLM head
 * built, every text row. So by default the last layer's image side, and its text side
 * without an MLM head, run only the CLS queries: keys and values of every row, the P CLS
 * rows' attention, projections, LayerNorms and FFN, which give the CLS rows the values and
 * dropout masks the full layer gives them (docs/model.md "The last cross layer"). The other
 * rows of that side's acts.x?[X-1].out are then not computed, and its row p holds pair p's
 * CLS row. bt_model_set_cross_features(m, 1) runs every row of both sides (bt-forward, which
 * prints text_features and image_features as HF has them). */
void bt_model_set_cross_features(bt_model *m, int on);

/* Dropout row key of a pair (text key, image key); order matters. */
uint64_t bt_pair_key(uint64_t text_key, uint64_t image_key);

#endif
