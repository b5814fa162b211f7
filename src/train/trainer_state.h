/* train/trainer_state.h: trainer_state.json, the trainer's position in a checkpoint
 * (docs/resume.md): global step, epoch, samples seen, the loader cursor, named RNG states,
 * the schedule position, the best metric, the resolved run config, the bt version, and a
 * free-form "extra" object for the trainer.
 *
 * The reader is strict: an unknown, missing or wrong-typed key is an error naming the file
 * and the key path, and the run config inside is read and resolved by the run config's own
 * rules (train/config.h). Numbers are written exactly (bt_json_exact_number) and RNG words as
 * decimal strings, so what is written reads back as the same state.
 *
 * Deliberately not here: the checkpoint directory around it and the optimizer's moments
 * (train/state.h). */
#ifndef BT_TRAIN_TRAINER_STATE_H
#define BT_TRAIN_TRAINER_STATE_H

#include <stddef.h>
#include <stdint.h>

#include "rng.h"
#include "status.h"
#include "train/config.h"

struct cJSON;

enum { BT_TRAIN_STATE_MAX_RNGS = 8, BT_TRAIN_STATE_RNG_NAME = 32 };

typedef struct bt_train_rng_state {
    char name[BT_TRAIN_STATE_RNG_NAME]; /* e.g. "itm_negatives" */
    bt_rng rng;
} bt_train_rng_state;

typedef struct bt_train_state {
    int64_t global_step;  /* optimizer steps taken (HF global_step) */
    double epoch;         /* HF's float epoch: completed epochs + fraction of the current */
    int64_t samples_seen; /* training pairs consumed, all ranks */
    int64_t max_steps;    /* total optimizer steps of the run */
    struct cJSON *loader_cursor; /* owned; loader_cursor_to_json()'s object, or NULL */
    bt_train_rng_state rngs[BT_TRAIN_STATE_MAX_RNGS];
    size_t n_rngs;
    struct {
        int64_t step;         /* schedule position: optimizer steps already scheduled */
        int64_t total_steps;  /* N */
        int64_t warmup_steps; /* W (resolved) */
        double last_lr;       /* base lr of the last step taken */
    } schedule;
    int has_best;                /* best_metric / best_model_checkpoint are set */
    double best_metric;
    char *best_model_checkpoint; /* owned, or NULL */
    bt_run_config run_config;    /* the resolved run config (owned) */
    struct cJSON *extra;         /* owned free-form object for the trainer, or NULL */
    char bt_version[32];         /* of the writer: filled by save and by load */
} bt_train_state;

/* Zeroed state with a default run config (bt_run_config_init). */
void bt_train_state_init(bt_train_state *s);
void bt_train_state_free(bt_train_state *s);
/* Replaces the stored run config by a copy of c. */
void bt_train_state_set_run_config(bt_train_state *s, const bt_run_config *c);
/* Replaces the loader cursor; takes ownership of `cursor` (loader_cursor_to_json's result,
 * or NULL). */
void bt_train_state_set_cursor(bt_train_state *s, struct cJSON *cursor);
/* Adds or replaces a named RNG state (name: 1..31 characters of [A-Za-z0-9_]). */
bt_status bt_train_state_set_rng(bt_train_state *s, const char *name, const bt_rng *r);
/* The named state, or NULL. */
const bt_rng *bt_train_state_get_rng(const bt_train_state *s, const char *name);

/* trainer_state.json as a JSON object (caller deletes it). */
struct cJSON *bt_train_state_to_json(const bt_train_state *s);
/* Strict reader of that object (unknown keys, wrong types and bad values are errors naming
 * `source` and the key path). *s must be initialized; it is overwritten. */
bt_status bt_train_state_from_json(bt_train_state *s, const struct cJSON *j, const char *source);
/* The file (atomic write; read through bt's JSON rule). */
bt_status bt_train_state_write(const char *path, const bt_train_state *s);
bt_status bt_train_state_read(const char *path, bt_train_state *s);

#endif
