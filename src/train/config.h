/* train/config.h: the run config of bt-train (docs/config.md), read from JSON, strict.
 *
 * A run config says what to train (model), on what (data), how (train), and how often to
 * log, evaluate and save (logging, eval, save, output). Every key is listed ONCE, in the
 * field table of config.c (key path, type, default, range, HF TrainingArguments name):
 * parsing, `--set` overrides, printing (bt_run_config_to_json), the defaults and the key
 * list that tests/test_train_config.c checks against docs/config.md all come from it.
 *
 * Strict: an unknown key (with a did-you-mean hint), a wrong type, an out-of-range value, a
 * key given twice in one object (bt's one JSON rule, bt_json_parse), or a cross-field
 * conflict (bt_run_config_finish) is an error whose message names the source and the full
 * key path:
 *     "run.json: train.lr: expected a number > 0, got \"abc\""
 *     "--set: train.batch_size: expected an integer >= 1, got 0"
 * Defaults follow Hugging Face TrainingArguments wherever it has the setting (lr 5e-5,
 * 3 epochs, linear schedule, seed 42, ...; docs/config.md gives each default's source).
 *
 * Order of resolution: defaults (bt_run_config_init) -> file (bt_run_config_load / _parse)
 * -> `--set key.path=value` overrides in command-line order (bt_run_config_set) -> derived
 * values and cross-field checks (bt_run_config_finish). The resolved config printed by
 * bt_run_config_to_json loads back to the same config (round trip), so the copy stored with
 * every checkpoint restarts the same run.
 *
 * Deliberately not here: touching the file system for the paths (manifests, model
 * directories: their loaders report them), reading the preprocessor config for the image
 * size (data.image_size 0 = "ask the preprocessor config", resolved by bt-train), the
 * learning-rate schedule itself (the trainer computes it from these numbers). */
#ifndef BT_TRAIN_CONFIG_H
#define BT_TRAIN_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "model/model.h"    /* bt_precision */
#include "status.h"
#include "train/schedule.h" /* bt_schedule_kind */

struct cJSON;

/* ITC targets: "hf" = arange(B), as BridgeTowerForContrastiveLearning; "dedup" = the
 * original code's soft targets shared by the duplicates of an image or caption. */
typedef enum { BT_ITC_HF, BT_ITC_DEDUP } bt_itc_variant;
/* ITC negatives under mpirun: "global" = every rank's pairs (OpenCLIP's gather-with-grad);
 * "local" = the rank's own pairs (HF Trainer / Optimum Habana under DDP). */
typedef enum { BT_ITC_SCOPE_GLOBAL, BT_ITC_SCOPE_LOCAL } bt_itc_scope;
/* What to do with a bad record (data.on_bad_record) or a NaN/Inf loss or gradient
 * (train.on_nan). */
typedef enum { BT_POLICY_STOP, BT_POLICY_SKIP } bt_policy;
/* HF IntervalStrategy: eval.strategy, save.strategy. */
typedef enum { BT_INTERVAL_NO, BT_INTERVAL_STEPS, BT_INTERVAL_EPOCH } bt_interval;
typedef enum { BT_SAVE_F32, BT_SAVE_BF16 } bt_save_dtype;

/* model.heads before resolution: "null" in JSON = derive from the nonzero loss weights. */
#define BT_RUN_HEADS_AUTO (~0u)
/* An integer key given as null ("derive it"), before bt_run_config_finish resolves it. */
#define BT_RUN_INT_DERIVE INT64_MIN

typedef struct bt_run_config {
    struct {
        char *path;          /* HF model directory to start from, or NULL */
        char *config;        /* model directory (or its config.json) to init from, or NULL */
        int64_t init_seed;   /* seed of HF-rule init (from scratch, absent heads) */
        unsigned heads;      /* BT_HEADS_* mask (model/params.h bit layout) */
        int drop_text_pooler;/* 1: the unused text_model.pooler is not trained nor saved */
    } model;
    struct {
        char *train, *validation, *test; /* data sources (manifest.h); validation/test may be NULL */
        char *image_column, *caption_column, *id_column, *choices_column, *label_column;
        int64_t image_size;        /* 0: the preprocessor config's crop size */
        int64_t max_length;        /* T: tokens per caption incl. <s> </s> */
        int shuffle;
        int64_t shuffle_buffer;    /* WebDataset shards: samples in the shuffle buffer */
        int64_t seed;              /* data order; derived from train.seed when null */
        int drop_last;             /* drop the last partial batch of each epoch */
        int64_t num_workers;       /* loader threads, >= 1 */
        int64_t prefetch;          /* ring slots; 0: 2 * num_workers */
        int64_t image_cache_bytes; /* 0: no decoded-image cache */
        bt_policy on_bad_record;
    } data;
    struct {
        int64_t batch_size; /* per device (rank) */
        int64_t gradient_accumulation_steps;
        double epochs;      /* used when max_steps == -1 */
        int64_t max_steps;  /* -1: from epochs; > 0 overrides epochs (HF) */
        double lr;
        int64_t warmup_steps;
        double warmup_ratio; /* of the total optimizer steps; warmup_steps wins when > 0 */
        bt_schedule_kind schedule;
        double weight_decay, adam_beta1, adam_beta2, adam_eps;
        double max_grad_norm; /* 0: no clipping */
        bt_precision precision;
        struct {
            double itc, itm, mlm;
        } loss_weights;
        bt_itc_variant itc_variant;
        bt_itc_scope itc_scope;
        double mlm_probability;
        int64_t seed;
        int dropout;
        int gradient_checkpointing; /* recompute layers in the backward (model.h "Memory modes") */
        struct {
            double cross_modal, heads; /* lr multipliers (original recipe: 5 and 5) */
        } lr_mult;
        int freeze_vision, freeze_text;
        bt_policy on_nan;
        int64_t threads; /* 0: OpenMP's default (OMP_NUM_THREADS or all cores) */
    } train;
    struct {
        int64_t steps;
        int first_step;
        int tensorboard;
        int report; /* report.html at the end */
        int progress; /* bt_progress_mode (progress.h): 0 auto (live on a terminal, plain
                       * under a launcher), 1 live, 2 plain */
        int64_t throughput_warmup_steps;
    } logging;
    struct {
        bt_interval strategy;
        int64_t steps;    /* with strategy "steps"; derived from logging.steps when null */
        int at_end;       /* evaluate on data.validation after training (HF --do_eval) */
        int64_t batch_size;
        int64_t itm_rerank_k; /* 0: rank by ITC only; k: re-rank the top k by ITM */
        char *metric_for_best; /* greater is better unless it ends in "loss" (HF rule) */
    } eval;
    struct {
        bt_interval strategy;
        int64_t steps;
        int64_t total_limit; /* keep the last K checkpoints; 0: keep all */
        bt_save_dtype dtype; /* model.safetensors dtype */
    } save;
    struct {
        double bucket_mb; /* gradient all-reduce bucket (MiB); 0: one bucket */
        bt_save_dtype wire_dtype; /* gradients on the wire: f32, or bf16 (each element
                                     rounded once, summed in one fp32 accumulator) */
        int64_t zero_stage;       /* 0: every rank holds the optimizer state; 1: ZeRO-1 */
        double timeout_s;         /* a collective not done after this many seconds ends the
                                     job (docs/distributed.md "Timeout"); 0: no deadline */
        int overlap;              /* 1: gradient buckets launched during the backward (the
                                     default); 0: all at the end, to measure what it saves */
    } dist;
    struct {
        char *dir;
        int overwrite;     /* start fresh even when output.dir holds checkpoints */
        int auto_resume;   /* resume from the latest checkpoint in output.dir */
        char *resume_from; /* a checkpoint directory to resume from, or NULL */
        int resume_new_start;  /* resume although model.path / model.config changed */
    } output;
} bt_run_config;

/* The defaults (docs/config.md); required keys (model.path or model.config, data.train,
 * output.dir) are unset, so finish fails until they are given. */
void bt_run_config_init(bt_run_config *c);
void bt_run_config_free(bt_run_config *c);
/* Deep copy (dst is overwritten, not freed first). */
void bt_run_config_copy(bt_run_config *dst, const bt_run_config *src);

/* Applies the JSON file at `path` on top of *c (call bt_run_config_init first). Errors
 * name the path: cannot open, not JSON, a duplicate key, an unknown key, a wrong type, an
 * out-of-range value. On error *c holds the values applied before the bad key. */
bt_status bt_run_config_load(bt_run_config *c, const char *path);
/* The same from JSON text; `source` names it in messages. */
bt_status bt_run_config_parse(bt_run_config *c, const char *json, const char *source);
/* The same from a parsed tree (e.g. "run_config" inside trainer_state.json). */
bt_status bt_run_config_apply_json(bt_run_config *c, const struct cJSON *root,
                                   const char *source);

/* One override "key.path=value", typed by the key: numbers and integers as JSON numbers,
 * booleans true/false, strings as given (or a JSON string in quotes; null for an unset
 * optional string), lists comma-separated ("itc,itm") or as a JSON array. Errors start with
 * "--set: " and name the key. */
bt_status bt_run_config_set(bt_run_config *c, const char *assignment);

/* Resolves derived values (null seeds, eval.steps, model.heads) and checks the cross-field
 * rules (one of model.path / model.config; data.train and output.dir given; warmup_steps
 * and warmup_ratio not both; a loss weight > 0 and its head present; evaluation needs
 * data.validation; ...). `source` names the config in messages. Idempotent. */
bt_status bt_run_config_finish(bt_run_config *c, const char *source);

/* defaults + file (path may be NULL) + overrides + finish, in that order. */
bt_status bt_run_config_resolve(bt_run_config *c, const char *path, const char *const *sets,
                                size_t n_sets);

/* The whole config as a JSON object, every key present (caller deletes it). Numbers are
 * raw nodes holding their exact shortest decimal form (bt_json_exact_number): print the
 * tree, do not read valuedouble from it. */
struct cJSON *bt_run_config_to_json(const bt_run_config *c);
/* The same as indented text, a newline at the end (caller frees it). */
char *bt_run_config_to_string(const bt_run_config *c);

/* Compares a run's config with the one stored in a checkpoint it resumes from. Keys that
 * decide the data order, the parameter set or the meaning of the optimizer state (model.*
 * except paths, data.train and its columns, image size, max length, shuffle, seeds,
 * drop_last, batch size, accumulation, precision, freezing) must be equal: the first that
 * differs is an error naming it ("checkpoint-40/trainer_state.json: run_config.train.
 * batch_size is 32, this run has 16; a resumed run must keep it"). Other differing keys
 * (lr, epochs, cadences, paths, threads...) are allowed; their paths are written,
 * comma-separated, to `changed` (cap bytes; may be NULL). */
bt_status bt_run_config_check_resume(const bt_run_config *saved, const bt_run_config *run,
                                     const char *source, char *changed, size_t cap);

/* The table, for docs checks and `bt-train --help-config`: number of keys, and key i's
 * path, type description ("a number > 0"), default as JSON text, and HF equivalent ("" if
 * none). */
size_t bt_run_config_n_keys(void);
const char *bt_run_config_key(size_t i);
const char *bt_run_config_key_hf(size_t i);
/* Writes key i's expected-value description / default JSON into out (cap bytes). */
void bt_run_config_key_describe(size_t i, char *out, size_t cap);
void bt_run_config_key_default(size_t i, char *out, size_t cap);

/* A raw JSON number node with the shortest %.15g..%.17g text that reads back as exactly v
 * (finite v). cJSON's printer may drop the last bit of a double; this one never does. */
struct cJSON *bt_json_exact_number(double v);

const char *bt_interval_name(bt_interval s);

#endif
