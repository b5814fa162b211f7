/* train/trainer.h: the training job of bt-train (docs/training.md, docs/resume.md): a
 * resolved run config in, a trained model directory, checkpoints, logs and a report out.
 *
 *   load config → load or init the model (or resume a checkpoint) → start the loader →
 *   for each optimizer step: gradient_accumulation_steps batches from the loader →
 *   bt_train_step (the one step: phases, losses, backward, clip, AdamW, schedule) → log →
 *   evaluate / save on their cadences → at the end: save (checkpoint + final model), then
 *   evaluate, summary, report.html.
 *
 * Steps and epochs. The loader delivers one stream of batches across epochs; an optimizer
 * step takes the next gradient_accumulation_steps of them (HF Trainer: the accumulation
 * window does not restart at an epoch boundary only in that HF ends each epoch with a short
 * window; bt keeps full windows, so with accumulation the epoch boundaries fall inside a
 * step; documented in docs/training.md). The total number of steps is max_steps, or
 * ceil(epochs × batches_per_epoch / accumulation) as HF computes it. The fractional epoch
 * logged is batches delivered / batches per epoch.
 *
 * Resume is exact: a run killed at any point (SIGKILL included) and resumed from its last
 * checkpoint ends with the same weights, bit for bit, as the uninterrupted run with the same
 * thread count and ISA level. Everything random is keyed by the step number and the sample
 * keys (negatives, MLM masks, dropout), the loader's order by (seed, epoch), so the state is
 * weights + moments + step + loader cursor. SIGINT / SIGTERM / SIGHUP / SIGUSR1 / SIGUSR2:
 * the current step finishes (an evaluation stops at its next batch), a checkpoint is written
 * and the run returns BT_ERR_INTERRUPTED (bt-train exits 128 + the signal); a second signal
 * ends the process at once. The end of a run writes the checkpoint and the final model
 * before it evaluates; output.dir's contract and lock: output_dir.h.
 *
 * Deliberately not here: MPI itself (src/dist; docs/distributed.md), the step itself
 * (step.h), file formats (state.h, log.h). */
#ifndef BT_TRAIN_TRAINER_H
#define BT_TRAIN_TRAINER_H

#include <stdio.h>

#include "status.h"
#include "train/config.h"

typedef struct bt_train_options {
    const char *config_path;   /* the run config file (may be NULL: all from --set) */
    const char *const *sets;   /* "--set key=value" overrides, in order */
    size_t n_sets;
    int print_config;          /* 1: print the resolved config at start (default) */
    int install_signals;       /* 1: SIGINT / SIGTERM save and stop (bt-train) */
    FILE *out;                 /* progress and info (NULL: stdout) */
    /* test hooks (bt-train --test-hook; only tests set them, docs/guarantees.md) */
    long long test_sigterm_in_stop_check; /* > 0: rank 1 raises SIGTERM right after the stop
                                             check's all-reduce of that step */
    const char *test_dist_sleep;          /* "RANK:CONTEXT:SECONDS": bt_dist.test_sleep_* */
} bt_train_options;

/* What a run ended with. */
typedef struct bt_train_outcome {
    int64_t last_step;    /* optimizer steps done (resumed steps included) */
    int interrupted_by;   /* the signal that stopped it, 0 otherwise */
    char final_dir[4096]; /* the model directory written at the end ("" when none) */
} bt_train_outcome;

/* Runs the job. Errors: the config (naming the key), the model, the data (naming the
 * record), a non-finite loss under on_nan "stop" (naming the step), an I/O error naming the
 * file; BT_ERR_INTERRUPTED after a signal (the checkpoint was written). */
bt_status bt_train_run(const bt_train_options *o, bt_train_outcome *out);

#endif
