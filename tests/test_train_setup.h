/* test_train_setup.h: what the bt-train tests (test_bt_train.c, test_dist.c, test_itc_scope.c,
 * test_user_paths.c, test_train_sources.c) share: a synthetic captioned-image set written by
 * src/data/synth.h, the path of the synthetic model config (both exit the test with status 1
 * and the error on failure), and reading a run's results back (a shell run, metrics.jsonl,
 * weights).
 * Deliberately not here: the run configs themselves (each test writes its own). */
#ifndef BT_TEST_TRAIN_SETUP_H
#define BT_TEST_TRAIN_SETUP_H

#include <stddef.h>
#include <sys/types.h>

/* Writes train.jsonl (n_train records) and, when non-zero, val.jsonl / test.jsonl with their
 * 64 x 64 images into dir: seed 3, the same bytes on every run. */
void tts_synth_data(const char *dir, int n_train, int n_val, int n_test);

/* out = $BT_CONFIGS/synthetic-model (configs/synthetic-model when BT_CONFIGS is unset). */
void tts_synthetic_model_dir(char *out, size_t cap);

/* Runs a shell command line (printf format) with stdout and stderr in <out>.log / <out>.err;
 * its exit status (-1 when it did not exit). */
int tts_sh(const char *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prints <out>.err on stderr (a failed run's message). */
void tts_show_err(const char *out);

/* l[step - 1] = the `key` ("loss", "grad_norm", ...) of each "train" record of
 * <out>/metrics.jsonl with 1 <= step <= cap; returns how many were read. */
size_t tts_logged(const char *out, const char *key, double *l, size_t cap);

/* max |a - b| over the F32 tensors of two model.safetensors files with the same tensors
 * (other dtypes: equal bytes); -1 when names, sizes or bytes differ or a file is unreadable. */
double tts_max_weight_diff(const char *a_path, const char *b_path);

/* How tts_spawn_train runs bt-train (all fields may be 0 / NULL). */
typedef struct tts_spawn_opts {
    const char *cwd;      /* the child's working directory (NULL: this one) */
    int stdout_fd;        /* > 0: the child's stdout (else appended to LOG.log) */
    const char *log_base; /* LOG (NULL: OUT) */
    int truncate_err;     /* 1: LOG.err truncated first (else appended) */
    int close_std;        /* 1: stdin, stdout and stderr closed (`bt-train <&- >&- 2>&-`) */
    unsigned long long as_limit; /* > 0: RLIMIT_AS of the child in bytes (`prlimit --as`) */
} tts_spawn_opts;

/* Starts `exe --config cfg --quiet-config --set output.dir=OUT [--set S]...` (n_sets of
 * sets) with stdout appended to LOG.log and stderr to LOG.err; returns the pid. */
pid_t tts_spawn_train(const char *exe, const char *cfg, const char *out,
                      const char *const *sets, size_t n_sets, const tts_spawn_opts *o);
/* Exit code of pid, or 128 + signal when killed. */
int tts_wait_exit(pid_t pid);
/* Waits (at most 120 s) for path to exist while pid runs; 1 when it appeared. */
int tts_wait_for(const char *path, pid_t pid);
void tts_sleep_s(double s);

#endif
