/* train/state.h: the trainer's state on disk: checkpoint directories for resume
 * (docs/resume.md).
 *
 * A checkpoint is `<output_dir>/checkpoint-<step>/` (HF Trainer's naming) holding:
 *   - the HF model directory (bt_checkpoint_save: config.json, model.safetensors, tokenizer
 *     and preprocessor files copied from the start model), so it opens in transformers;
 *   - optimizer.safetensors: AdamW's moments under the model's key names prefixed with
 *     "exp_avg." and "exp_avg_sq." (torch's state names; F32, the model's shapes; frozen
 *     tensors have none), and "step", the optimizer's step count t (I64, 0-d);
 *   - trainer_state.json: the trainer's position (train/trainer_state.h): global step,
 *     epoch, samples seen, the loader cursor, named RNG states, the schedule position, the
 *     best metric, the resolved run config, the bt version, and a free-form "extra" object.
 *
 * Atomic as a whole: everything is written into `<output_dir>/tmp-checkpoint-<step>.<pid>`
 * (every file fsync'ed), the directory is fsync'ed and renamed to checkpoint-<step> (an
 * existing one is swapped out atomically with renameat2(RENAME_EXCHANGE), then deleted),
 * and output_dir is fsync'ed. Only then are checkpoints beyond save_total_limit deleted,
 * oldest first (each renamed to tmp-checkpoint-<step>.deleting.<pid> before its files are
 * removed, so a crash mid-delete never leaves a half checkpoint-<step>). A crash at any
 * point leaves every earlier checkpoint intact; tmp-checkpoint-* directories are never
 * taken for checkpoints, and those left by a process that no longer runs are removed by the
 * next save or bt_train_checkpoint_latest.
 *
 * Loading checks everything by name: a missing file, malformed JSON, an unknown or
 * wrong-typed key of trainer_state.json (with the key path), a moments tensor missing,
 * extra, of the wrong dtype or shape ("exp_avg.<key>: expected shape [..] (N values),
 * found [..]"), a model whose shape differs from the run's ("text_config.hidden_size is 64
 * in the checkpoint, 768 in this run's model"), a head the run trains missing from the
 * weights. Every message starts with the file.
 *
 * Deliberately not here: when to save (the trainer's cadence), the training loop, locking
 * against two runs sharing an output_dir (only rank 0 saves; two runs in one directory are
 * a user error that the stale-temp rule does not detect across machines). */
#ifndef BT_TRAIN_STATE_H
#define BT_TRAIN_STATE_H

#include <stddef.h>
#include <stdint.h>

#include "model/checkpoint.h"
#include "status.h"
#include "train/config.h"
#include "train/optim.h"
#include "train/trainer_state.h"

/* optimizer.safetensors (see the header comment). Save: o unsharded (a ZeRO-1 shard is
 * gathered first, step.h). Load: o must be initialized for the table (bt_adamw_init_groups,
 * or bt_adamw_init_shard: then only the shard's blocks are read from the mapped file, so a
 * rank never holds the full moments); every moment of a trained tensor must be in the file
 * and nothing else; o->t is set from "step". */
bt_status bt_optim_state_save(const char *path, const bt_param_table *t, const bt_adamw *o);
bt_status bt_optim_state_load(const char *path, const bt_param_table *t, bt_adamw *o);

/* What a checkpoint holds. */
typedef struct bt_train_checkpoint {
    const bt_param_table *table;  /* the model's table (config, heads) */
    const float *params;          /* (table->numel) fp32 master weights */
    const bt_adamw *optim;
    const bt_train_state *state;  /* global_step names the directory */
    const char *base_config_json; /* the start model's config.json text (extras kept), or NULL */
    const char *copy_from_dir;    /* tokenizer / preprocessor files from here, or NULL */
    bt_dtype dtype;               /* model.safetensors: BT_DTYPE_F32 or BT_DTYPE_BF16 */
} bt_train_checkpoint;

/* Writes <output_dir>/checkpoint-<state->global_step> atomically (output_dir is created,
 * parents included), then keeps the last total_limit checkpoints by step (0: keep all),
 * never deleting the new one nor `keep_also` (the best checkpoint's path, or NULL). The
 * new directory's path goes to saved (cap bytes; may be NULL). On error nothing earlier is
 * lost and the temp directory is removed. */
bt_status bt_train_checkpoint_save(const char *output_dir, const bt_train_checkpoint *c,
                                   int64_t total_limit, const char *keep_also, char *saved,
                                   size_t cap);

/* The complete checkpoint with the highest step in output_dir (checkpoint-<N> holding
 * trainer_state.json, optimizer.safetensors, config.json and model.safetensors): its path
 * in out, *found = 1; *found = 0 when there is none (also when output_dir is absent).
 * Incomplete checkpoint-<N> directories are skipped (*n_incomplete counts them; may be
 * NULL); stale temp directories of dead processes are removed first. */
bt_status bt_train_checkpoint_latest(const char *output_dir, char *out, size_t cap, int *found,
                                     size_t *n_incomplete);

/* Removes tmp-checkpoint-* directories whose writer process no longer exists (or is this
 * process: none of ours is in flight between calls). *n_removed may be NULL. */
bt_status bt_train_checkpoint_clean_stale(const char *output_dir, size_t *n_removed);

/* A checkpoint loaded for resume. */
typedef struct bt_train_resume {
    bt_checkpoint_weights model; /* config, table (the saved run's heads), fp32 weights */
    bt_adamw optim;              /* moments and step count */
    bt_train_state state;        /* includes the saved run config */
} bt_train_resume;

/* Loads checkpoint directory `dir`: trainer_state.json (strict, its run config resolved),
 * the model with the saved run's heads (every one must be in the weights), and the moments
 * into an optimizer laid out with `groups` (NULL: the saved run config's multipliers and
 * frozen towers). With expect != NULL the checkpoint's model must have its shape; the first
 * differing HF config key is named. On error *r is freed (safe to free again). */
bt_status bt_train_checkpoint_load(const char *dir, const bt_optim_groups *groups,
                                   const bt_model_config *expect, bt_train_resume *r);
void bt_train_resume_free(bt_train_resume *r);
/* The same without the optimizer (r->optim stays empty): the caller loads
 * <dir>/optimizer.safetensors into its own optimizer (bt_optim_state_load; a ZeRO-1 shard). */
bt_status bt_train_checkpoint_load_state(const char *dir, const bt_model_config *expect,
                                         bt_train_resume *r);

/* bt_optim_groups from a run config's lr multipliers and freezing. */
bt_optim_groups bt_run_config_optim_groups(const bt_run_config *c);

/* The first field of the model shape that differs between a and b, as an HF config key
 * ("text_config.hidden_size"), or NULL when they agree; *va, *vb get the two values. */
const char *bt_model_config_shape_diff(const bt_model_config *a, const bt_model_config *b,
                                       long *va, long *vb);

#endif
