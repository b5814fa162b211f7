/* loss.h: the training losses of bt (docs/spec.md §4), computed on the outputs of the
 * model's phases (normalized ITC embeddings, ITM and MLM logits). Every loss function is a
 * FUSED forward + backward: it returns the loss and ACCUMULATES weight · dloss/dinput into
 * the gradient slots it is given (the model's d_* slots), so no probability buffer of the
 * (rows, vocab) MLM logits is ever kept. Also here: the ITM hard-negative sampler and the
 * MLM masker, both deterministic functions of a seed (src/rng.h).
 *
 * ITC (HF BridgeTowerForContrastiveLearning, transformers 4.27, the default):
 *   s = exp(logit_scale) (no clamp);  A = s·T·Iᵀ,  Bm = s·T·Cᵀ,  Cm = s·I·Cᵀ;
 *   loss = (CE(A, y) + CE(Bm, y) + CE(Cm, y)) / 3, each CE the mean over rows of a row-wise
 *   softmax cross-entropy, y = arange (one-directional: no transposed terms).
 * Duplicate-aware targets (optional, the original repo's fine-tuning rule): pair j is a
 *   positive of pair r when they share the image key or the caption key; row r's target is
 *   uniform over its positives (soft-target CE: -Σ_j y_rj log softmax(S_r)_j). With all keys
 *   distinct this is exactly the arange CE.
 * Local-loss shape (for the MPI layer, OpenCLIP's local loss): a rank owns n_rows rows of
 *   the global (N, N) problem starting at global row row_offset; the columns are the
 *   gathered embeddings of all N pairs. The function returns Σ_{its rows} CE / n_total (the
 *   rank's share of the mean; the ranks' shares add up to the loss) and accumulates the
 *   gradients of its rows (d_text_rows, d_image_rows) and of ALL columns (d_image_cols,
 *   d_cross_cols; the caller reduce-scatters those back to their owners), plus its share of
 *   d logit_scale (all-reduce sum). On one process: n_rows = n_cols = n_total = B, offset 0,
 *   image_rows = image_cols and d_image_rows = d_image_cols (accumulation makes aliasing
 *   safe).
 * ITM: CE(logits (P, 2), labels 0/1) averaged over the P pairs (HF's CrossEntropyLoss; the
 *   label-0 pairs are not skipped, docs/spec.md §4.1).
 * MLM: CE(logits (N, V), labels) averaged over positions whose label is not -100 (HF); 0,
 *   with no gradient, when every label is -100 (HF would give NaN).
 * Hard negatives (docs/spec.md §4.5, ALBEF / METER / original BridgeTower): for text b, one
 *   negative image j with probability ∝ exp(A_bj) over the columns j that are not positives
 *   of b (not b, not a duplicate of its image or caption); for image b, one negative text j
 *   with probability ∝ exp(A_jb) likewise. No gradient flows through the sampling. When every
 *   other pair of the batch is a positive of b, the negative is drawn uniformly from j != b
 *   (a false negative, counted in *n_fallback); B < 2 is an error.
 * MLM masking (HF DataCollatorForLanguageModeling, the standard recipe): each maskable
 *   position (attention mask 1, id not special) is selected with probability p (0.15); a
 *   selected position gets label = its id and becomes <mask> with probability 0.8, a uniform
 *   random id in [0, V) with 0.1, stays unchanged with 0.1; labels are -100 elsewhere. Each
 *   row draws from its own stream seeded by (seed, row key), so a row's masks do not depend
 *   on the batch it sits in (ranks reproduce them).
 *
 * Numerics: the row softmax subtracts the row max, sums exp in double; the loss of each row
 * is stored and the rows summed in order (bit-identical for any thread count).
 *
 * Deliberately not here: the model's heads (src/model computes embeddings and logits), the
 * collective operations of the local loss (src/dist), the original repo's symmetric ITC and
 * clamped temperature (not what the HF checkpoints were trained with), whole-word masking. */
#ifndef BT_TRAIN_LOSS_H
#define BT_TRAIN_LOSS_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

/* Grow-only scratch shared by the loss calls of one step (no allocation once sized). */
typedef struct bt_loss_ws {
    float *buf;
    size_t cap; /* floats */
    double *rowloss;
    size_t rowloss_cap;
} bt_loss_ws;

void bt_loss_ws_free(bt_loss_ws *ws);

/* --- row-wise softmax cross-entropy, fused forward + backward ----------------------------
 * Row i of logits (n, v) (row stride ld) has either a hard target targets[i] (ignored when
 * == -100) or, when soft != NULL, a target distribution soft (n, v) (rows summing to 1).
 * Returns Σ_rows CE_i (double; rows in order) and, when dlogits != NULL, accumulates
 *   dlogits_i += dscale · (softmax(logits_i) - y_i)   (row stride ld)
 * for every non-ignored row. The caller divides by its row count (dscale included). */
double bt_ce_rows(float *dlogits, const float *logits, size_t n, size_t v, size_t ld,
                  const int32_t *targets, const float *soft, float dscale, bt_loss_ws *ws);

/* --- ITC ------------------------------------------------------------------------------- */
typedef struct bt_itc_args {
    size_t n_rows;            /* rows (pairs) owned by the caller */
    size_t n_cols;            /* global columns N (all pairs) */
    size_t row_offset;        /* global index of local row 0 (its positive column) */
    size_t n_total;           /* rows of the global mean (N on every rank) */
    size_t C;                 /* embedding width */
    const float *text_rows;   /* (n_rows, C) L2-normalized text embeddings */
    const float *image_rows;  /* (n_rows, C) image embeddings of the same rows */
    const float *image_cols;  /* (n_cols, C) all image embeddings */
    const float *cross_cols;  /* (n_cols, C) all cross embeddings */
    float logit_scale;        /* the parameter; s = exp(logit_scale) */
    /* duplicate-aware targets when both are non-NULL: keys of all N pairs (columns) */
    const uint64_t *image_key, *caption_key; /* (n_cols) */
    float weight;             /* gradients are those of weight · loss */
    /* gradient slots, ACCUMULATED; NULL = not wanted */
    float *d_text_rows, *d_image_rows;       /* (n_rows, C) */
    float *d_image_cols, *d_cross_cols;      /* (n_cols, C) */
    float *d_logit_scale;                    /* scalar */
    /* optional copy of A = s·T·Iᵀ (n_rows, n_cols), the hard-negative sampler's input */
    float *scores_ti;
} bt_itc_args;

/* Returns this caller's share of the ITC loss (the loss itself on one process). */
float bt_itc_loss(const bt_itc_args *a, bt_loss_ws *ws);

/* out (n_rows, n_cols) = exp(logit_scale) · rows · colsᵀ (A above without a loss: the
 * hard-negative sampler's input). */
void bt_itc_scores(float *out, const float *rows, const float *cols, size_t n_rows,
                   size_t n_cols, size_t C, float logit_scale);

/* --- ITM / MLM ------------------------------------------------------------------------- */
/* Mean CE over P pairs, labels (P) in {0, 1}; d_logits (P, 2) += weight · dloss. */
float bt_itm_loss(float *d_logits, const float *logits, const int32_t *labels, size_t P,
                  float weight, bt_loss_ws *ws);
/* Mean CE over the positions (n rows of V logits) whose label is not -100; *n_valid (may be
 * NULL) receives their count; d_logits (n, V) += weight · dloss. Labels must be -100 or in
 * [0, V) (BT_ASSERT: the masker makes them). */
float bt_mlm_loss(float *d_logits, const float *logits, const int32_t *labels, size_t n,
                  size_t V, float weight, size_t *n_valid, bt_loss_ws *ws);

/* --- ITM hard negatives ---------------------------------------------------------------- */
/* sim (B, B): text b -> image j logits (A above; any monotone scale works the same for a
 * fixed s), or NULL for uniform sampling (random negatives). image_key / caption_key (B)
 * mark duplicates (NULL: only j == b is a positive). Writes neg_image[b] (the negative
 * image for text b) and neg_text[b] (the negative text for image b). Errors: B < 2. */
bt_status bt_itm_sample_negatives(int32_t *neg_image, int32_t *neg_text, const float *sim,
                                  const uint64_t *image_key, const uint64_t *caption_key,
                                  size_t B, uint64_t seed, size_t *n_fallback,
                                  bt_loss_ws *ws);

/* --- MLM masking ----------------------------------------------------------------------- */
typedef struct bt_mlm_spec {
    double probability;        /* 0.15 */
    int32_t mask_id;           /* <mask> */
    int32_t vocab_size;        /* random replacements are uniform in [0, vocab_size) */
    int32_t special[8];        /* ids never selected (<s> <pad> </s> <unk> <mask>) */
    size_t n_special;          /* <= 8 */
} bt_mlm_spec;

/* out_ids (B, T) = masked copy of ids, labels (B, T) = original id at selected positions,
 * -100 elsewhere. attention_mask (B, T) may be NULL (all ones); row_keys (B) may be NULL
 * (the row index). Returns the number of selected positions. */
size_t bt_mlm_mask(int32_t *out_ids, int32_t *labels, const int32_t *ids,
                   const int32_t *attention_mask, size_t B, size_t T, const uint64_t *row_keys,
                   uint64_t seed, const bt_mlm_spec *spec);

#endif
