/* train/output_dir.h: bt-train's contract with its output directory (docs/outputs.md "The
 * output directory"), HF Trainer's with output_dir / overwrite_output_dir, plus a lock.
 *
 *   bt_output_dir_check   before anything is created or written: output.dir must not be /,
 *                         the starting model's directory (model.path, model.config's
 *                         directory) nor the directory of a manifest (data.train,
 *                         data.validation, data.test), whatever output.overwrite says; and an
 *                         existing, non-empty directory that holds no bt run (no
 *                         bt-train.lock, metrics.jsonl, summary.json, checkpoint-<N>; the
 *                         run's own stdout / stderr files are not counted) is
 *                         refused unless output.overwrite is set (HF: "Output directory ...
 *                         already exists and is not empty. Use --overwrite_output_dir").
 *   bt_output_lock_take   an advisory lock for the run's lifetime: flock(LOCK_EX) on
 *                         <output.dir>/bt-train.lock, whose text names the holder (pid, host,
 *                         start time). A second run on the same directory is refused naming
 *                         them. The kernel drops a flock when its process dies (SIGKILL
 *                         included), so the lock file a dead run left behind is simply taken
 *                         over; the file itself is never deleted (deleting it would let two
 *                         runs lock two different files of the same name).
 *
 * Deliberately not here: creating the directory (fileio.h bt_check_output_dir), resume (which
 * checkpoint: state.h). A file system without flock (some network mounts) gives a warning and
 * no lock, never a refused run. */
#ifndef BT_TRAIN_OUTPUT_DIR_H
#define BT_TRAIN_OUTPUT_DIR_H

#include <stdio.h>

#include "status.h"
#include "train/config.h"

#define BT_OUTPUT_LOCK_NAME "bt-train.lock"

/* Errors: BT_ERR_CONFIG naming output.dir, what it is and the way out. */
bt_status bt_output_dir_check(const bt_run_config *rc);

/* 1 when dir holds a bt run (one of the files above), 0 otherwise (also when absent). */
int bt_output_dir_has_run(const char *dir);

typedef struct bt_output_lock {
    int fd; /* the locked bt-train.lock, or -1 */
} bt_output_lock;

/* Takes the lock of an existing directory. Errors: BT_ERR_CONFIG when another process holds
 * it (its pid, host and start time named), BT_ERR_IO when the file cannot be created. A file
 * system that refuses flock gives a warning on `warn` and l->fd = -1. */
bt_status bt_output_lock_take(bt_output_lock *l, const char *dir, FILE *warn);
/* Releases it (closing the descriptor); the file stays. Safe on a lock never taken when
 * l->fd was set to -1. */
void bt_output_lock_release(bt_output_lock *l);

#endif
