/* eval.h: evaluation of a BridgeTower model on a manifest (docs/evaluation.md): eval loss,
 * ITC embeddings, image<->text retrieval (optionally ITM re-ranked), 5-way caption matching.
 * bt-train calls bt_eval_run on its eval cadence; bt-eval and bt-embed are thin mains over it.
 *
 * What one bt_eval_run does, on the first max_records records of the manifest in file order
 * (the data loader with shuffle off, one epoch, partial last batch kept, the training
 * preprocessing: image_preprocess + tokenizer_encode_single padded/truncated to max_length):
 *   1. per batch of batch_size records, the model on the matched pairs (record text, record
 *      image): the HF ITC loss of the batch (BridgeTowerForContrastiveLearning: mean of the
 *      text-image, text-cross and image-cross cross-entropies with arange targets, computed
 *      by bt_itc_loss, the trainer's function), and the L2-normalized ITC text, image and
 *      cross embeddings of every record;
 *   2. eval loss = the batch losses averaged with each batch weighted by its row count (HF
 *      Trainer's evaluation_loop repeats each batch loss batch-size times before the mean);
 *   3. images are deduplicated by their resolved path: Ni distinct images, each with the
 *      embedding of its first record (the ITC image embedding depends on the image alone);
 *   4. S = T·Iᵀ (Nt, Ni), texts by distinct images (dot products accumulated in double,
 *      stored as float); text->image and image->text ranks with image keys (metrics.h:
 *      pessimistic ties), recall@1/5/10, mean and median rank;
 *   5. with itm_rerank_k > 0: the top k of every query both ways go through the cross stack
 *      as (text, image) pairs and are re-ordered by the ITM match logit, logit[1] - logit[0]
 *      (metrics.h: bt_retrieval_rerank_ranks); needs the ITM head;
 *   6. when the manifest has caption_choices and labels: every labelled record's 5 choice
 *      captions are scored against its image, by ITC cosine similarity (default) or by the
 *      ITM match logit (choice_score = BT_EVAL_CHOICE_ITM), and accuracy = argmax == label
 *      (a tie counts as wrong).
 * The model runs in eval mode (dropout off; the caller's dropout setting is restored) in its
 * own precision, through the phased API (model.h). No pass holds more than batch_size
 * texts, batch_size images or batch_size pairs, so the model's phase arenas (which only
 * grow) need not outgrow a training step of that batch size (eval.c says which passes).
 *
 * Records a loader reports bad under on_error SKIP (the loader replaces them by the next
 * valid record) are left out of the embeddings and metrics and counted in n_bad; the batch
 * loss includes the replacement rows as delivered. Under STOP (default) the first bad
 * record is an error naming the manifest line and the image.
 *
 * Memory: embeddings 3·N·C floats, S N·Ni floats, token ids 2·N·T int32 and, with
 * re-ranking only, the pixels of every distinct image (Ni·3·R² floats).
 *
 * Deliberately not here: distributed evaluation (one process scores the whole set), writing
 * files (the CLIs do), model loading policy (bt_eval_setup_open is the CLIs' helper; the
 * trainer passes its live model). */
#ifndef BT_TRAIN_EVAL_H
#define BT_TRAIN_EVAL_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "data/image.h"
#include "data/manifest.h"
#include "data/tokenizer.h"
#include "model/model.h"
#include "status.h"
#include "train/metrics.h"

struct cJSON;

typedef enum {
    BT_EVAL_CHOICE_ITC, /* cosine of the choice's ITC text embedding and the image's */
    BT_EVAL_CHOICE_ITM, /* ITM match logit of the (choice, image) pair */
} bt_eval_choice_score;

typedef struct bt_eval_options {
    int batch_size;        /* records per forward, >= 1 (default 8, as eval.batch_size) */
    int max_length;        /* T: captions and choices padded/truncated to it, >= 2 (required;
                              bt_model_config_text_length gives the model's) */
    size_t max_records;    /* evaluate the first N records only (0: all) */
    int itm_rerank_k;      /* re-rank the top k both ways by ITM (0: off) */
    int choices;           /* 1 (default): 5-way accuracy when the manifest has choices */
    bt_eval_choice_score choice_score;
    int num_workers;       /* loader threads (default 1) */
    size_t cache_bytes;    /* loader image cache (default 0) */
    manifest_error_policy on_error; /* default STOP */
    int keep_embeddings;   /* 1: the result keeps the per-record embeddings (bt-embed) */
    FILE *progress;        /* a line per ~10% of the records when non-NULL */
    /* when non-NULL and non-zero (a signal handler sets it), the run stops before its next
     * batch with BT_ERR_INTERRUPTED: bt-train's SIGTERM during an evaluation waits for one
     * batch's forward, not the whole split */
    const volatile sig_atomic_t *cancel;
} bt_eval_options;

void bt_eval_options_default(bt_eval_options *o);

typedef struct bt_eval_result {
    size_t n_records;   /* texts evaluated (records minus bad ones) */
    size_t n_images;    /* distinct image paths among them */
    size_t n_bad;       /* records left out (bad under on_error SKIP) */
    size_t n_batches;
    double loss;        /* eval ITC loss (header comment, step 2) */
    bt_retrieval_metrics t2i, i2t;
    int has_rerank;
    size_t rerank_k;    /* k used (clipped to the candidate counts per direction) */
    bt_retrieval_metrics t2i_rerank, i2t_rerank;
    int has_choices;    /* 5-way accuracy computed (manifest has labelled choices) */
    size_t n_choice;    /* labelled records scored */
    double choice_accuracy;
    bt_eval_choice_score choice_score;
    double seconds;     /* wall time of bt_eval_run */
    /* keep_embeddings only (else NULL): */
    size_t C;
    float *text_embeds;    /* (n_records, C) */
    float *image_embeds;   /* (n_records, C) the record's image (copies for shared images) */
    float *cross_embeds;   /* (n_records, C) cross-modal ITC embedding of (text, own image) */
    int64_t *record;       /* (n_records) manifest record index (0-based, file order) */
    int64_t *image_index;  /* (n_records) distinct-image number 0..n_images-1 */
} bt_eval_result;

/* Runs the evaluation (header comment). The model needs the ITC head, and the ITM head
 * for itm_rerank_k > 0 or choice_score ITM. m, man, tok, img are the caller's; the model's
 * phase arenas grow as the header comment says. The passes run in forward-only memory mode
 * (model.h "Memory modes"; the caller's mode and dropout setting are restored). *r is zeroed
 * first; free it with bt_eval_result_free (also after an error). Errors: bad options
 * (BT_ERR_ARG naming the option), a missing head, loader errors ("manifest:line: image:
 * problem"), forward errors, non-finite scores (naming the record). */
bt_status bt_eval_run(bt_model *m, const manifest *man, const tokenizer *tok,
                      const image_preprocess_config *img, const bt_eval_options *o,
                      bt_eval_result *r);
void bt_eval_result_free(bt_eval_result *r);

/* The result as JSON (docs/evaluation.md "bt-eval --json"): records, images, eval_loss,
 * text_to_image / image_to_text {r1, r5, r10, mean_rank, median_rank}, itm_rerank {k, ...}
 * when computed, choice {n, accuracy, score} when computed, seconds. Caller deletes. */
struct cJSON *bt_eval_result_to_json(const bt_eval_result *r);

/* Flat scalars for logs and TensorBoard: names ("eval/loss", "eval/t2i_r1", ...,
 * "eval/i2t_mean_rank", "eval/t2i_itm_r1"..., "eval/choice_acc") and values; at most cap
 * are written; returns how many the result has. Names are static strings. */
size_t bt_eval_result_scalars(const bt_eval_result *r, const char **names, double *values,
                              size_t cap);

/* One line for people: "eval: 128 records, 128 images, loss 3.4012 | t->i R@1 ...". */
void bt_eval_result_print(const bt_eval_result *r, FILE *out);

/* --- for the CLIs ------------------------------------------------------------------------ */

/* A model directory and a manifest opened for evaluation. */
typedef struct bt_eval_setup {
    bt_model model;
    tokenizer tok;
    image_preprocess_config img;
    manifest man;
    int max_length;     /* bt_model_config_text_length of the directory */
    unsigned heads_in_file;
    int have_model, have_tok, have_man;
} bt_eval_setup;

/* Opens dir (bt_checkpoint_open), builds the model with `heads` in fp32 or bf16, reads the
 * weights, the tokenizer, preprocessor_config.json (its crop must equal the model's
 * image_size) and the manifest (mo may be NULL: default keys, STOP). A head of `heads`
 * that the checkpoint lacks: an error for ITM (its scores would be noise); for ITC a
 * warning on `log` (HF init rules: retrieval metrics are those of an untrained head).
 * The model is for inference only: its parameter gradients are freed (bt_model_free_grads,
 * forward-only activations). Errors name the path. On error everything opened is closed. */
bt_status bt_eval_setup_open(bt_eval_setup *s, const char *dir, const char *manifest_path,
                             unsigned heads, bt_precision precision, const manifest_options *mo,
                             FILE *log, const char *who);
void bt_eval_setup_close(bt_eval_setup *s);

/* The flags bt-eval and bt-embed share (one parser; embed = 1 for bt-embed's set). */
typedef struct bt_eval_cli_args {
    const char *model, *data;
    const char *json;   /* bt-eval --json */
    const char *output; /* bt-embed --output */
    const char *mo_image_key, *mo_caption_key;
    bt_precision precision;
    int threads;        /* 0: OMP_NUM_THREADS */
    int batch_size_set; /* --batch-size given */
    bt_eval_options opt;
} bt_eval_cli_args;

void bt_eval_cli_usage(FILE *out, int embed);
/* 1 ok (and --threads applied to OpenMP); 0 usage error (message and usage printed on
 * stderr). --help prints the usage and exits 0. */
int bt_eval_cli_parse(bt_eval_cli_args *a, int argc, char **argv, int embed);
/* bt_eval_setup_open with the parsed flags (heads: ITC, + ITM when re-ranking or scoring
 * choices by ITM), then the defaults of the run that wrote the model (text length: config.json
 * max_text_len; batch size: its eval_results.json batch_size, else 8) and the length's bound;
 * progress on stderr. */
bt_status bt_eval_cli_setup(bt_eval_setup *s, bt_eval_cli_args *a, int embed);

#endif
