/* test_train_contract.c: what bt-train promises about its output directory, its end and its
 * signals (issue 26; docs/outputs.md "The output directory", docs/resume.md, docs/guarantees.md),
 * each case run as a user runs it (bt-train's path is argv[1]) on a tiny synthetic data set and
 * the small synthetic model, 2 steps each (about half a second per run):
 *
 *   output.dir    a non-empty directory without a bt run is refused (files untouched) unless
 *                 output.overwrite; the starting model's and the data's directories, "/" and a
 *                 non-empty "." are refused; a second run on a directory in use is refused
 *                 naming the holder's pid and host; a lock file left by a dead run is taken over;
 *   save first    a final evaluation that fails (a missing image) after training leaves the
 *                 final model and a checkpoint under save.strategy "no", exits 1 saying so, and
 *                 the rerun evaluates without training again; data.test and
 *                 eval.metric_for_best typos are refused before step 1; metrics.jsonl's metric
 *                 names are accepted, with the old "choice_acc";
 *   signals       SIGHUP and SIGUSR1 save a checkpoint and exit 128 + the signal; SIGTERM during
 *                 the final evaluation stops it within a bound and exits 143 with the model
 *                 saved; stdout closed by its reader (SIGPIPE) does not end the run;
 *   finished      a rerun of a finished run says so, exits 0 and changes no file;
 *   fds 0-2       closed standard descriptors never become the run's files;
 *   resume        a checkpoint of another shape, starting model or tokenizer, with files of
 *                 two steps, or with a NaN or negative exp_avg_sq is refused naming it;
 *   strict        garbage BT_* variables, thread counts far beyond the processors and numbers
 *                 Python's json refuses ("01", "08") end the run with exit 1 naming them;
 *                 gradient accumulation past 64 trains, past memory is refused in its terms;
 *   environment   bt sets OMP_WAIT_POLICY / GOMP_SPINCOUNT, and OPENBLAS_CORETYPE where
 *                 OpenBLAS fell back to its SSE3 kernels, only where the user set none,
 *                 and a thread binding keeps its places through bt's re-exec;
 *   memory        under prlimit --as 100M..700M: exit 0 or a memory message, never a crash
 *                 or a hang.
 * Exit 1 on any failure. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kernels/cpu.h"
#include "test_train_setup.h"
#include "test_util.h"

static const char *exe;
static char data_dir[1024], model_dir[1024], base_cfg[1100];

static int exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

static double now_s(void) {
    return tu_clock_seconds(CLOCK_MONOTONIC);
}

static char *read_text(const char *path) {
    char *t = (char *)tu_read_file(path, NULL);
    return t ? t : strdup("");
}

typedef tts_spawn_opts spawn_opts;

static size_t n_sets(const char *const *sets) {
    size_t n = 0;
    while (sets && sets[n]) n++;
    return n;
}

/* bt-train --config base_cfg --quiet-config --set output.dir=OUT --set S... (sets ends with
 * NULL); stderr in LOG.err, truncated first. Returns the pid. */
static pid_t spawn_train(const char *out, const spawn_opts *so, const char *const *sets) {
    spawn_opts o = so ? *so : (spawn_opts){0};
    o.truncate_err = 1;
    return tts_spawn_train(exe, base_cfg, out, sets, n_sets(sets), &o);
}
#define wait_exit tts_wait_exit
#define wait_for tts_wait_for
#define sleep_s tts_sleep_s

/* Runs bt-train to its end; *err (when non-NULL) gets its stderr (free it). */
static int train(const char *out, char **err, const spawn_opts *so, const char *const *sets) {
    const int rc = wait_exit(spawn_train(out, so, sets));
    if (err) {
        char p[2700];
        snprintf(p, sizeof p, "%s.err", so && so->log_base ? so->log_base : out);
        *err = read_text(p);
    }
    return rc;
}
#define SETS(...) ((const char *const[]){__VA_ARGS__, NULL})

static const char *in_dir(const char *dir, const char *name) {
    static char buf[4][2600];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

static void setup(void) {
    const char *tmp = tu_tmpdir();
    snprintf(data_dir, sizeof data_dir, "%s/synth", tmp);
    tts_synth_data(data_dir, 16, 8, 8);
    tts_synthetic_model_dir(model_dir, sizeof model_dir);
    snprintf(base_cfg, sizeof base_cfg, "%s/run.json", tmp);
    char text[4096];
    snprintf(text, sizeof text,
             "{\"model\": {\"config\": \"%s\", \"heads\": [\"itc\", \"itm\", \"mlm\"]},\n"
             " \"data\": {\"train\": \"%s/train.jsonl\", \"validation\": \"%s/val.jsonl\",\n"
             "          \"max_length\": 32, \"num_workers\": 1},\n"
             " \"train\": {\"batch_size\": 4, \"max_steps\": 2, \"threads\": 1},\n"
             " \"logging\": {\"steps\": 1, \"report\": false, \"tensorboard\": false},\n"
             " \"eval\": {\"strategy\": \"no\", \"at_end\": true},\n"
             " \"save\": {\"strategy\": \"no\"}}\n",
             model_dir, data_dir, data_dir);
    tu_setup_text(base_cfg, text);
}

/* --- output.dir --------------------------------------------------------------------------- */

static void test_output_dir(void) {
    /* a directory of someone else's files */
    char foreign[1200];
    snprintf(foreign, sizeof foreign, "%s", tu_tmp_path("foreign"));
    mkdir(foreign, 0755);
    tu_setup_text(in_dir(foreign, "notes.txt"), "my notes\n");
    char *err;
    int rc = train(foreign, &err, NULL, NULL);
    tu_check(rc == 1 && strstr(err, "not empty") && strstr(err, "output.overwrite") &&
                 !exists(in_dir(foreign, "model.safetensors")) &&
                 !exists(in_dir(foreign, "metrics.jsonl")),
             "a non-empty output.dir without a bt run: exit 1 naming output.overwrite, nothing "
             "written (%d): %.300s", rc, err);
    free(err);
    rc = train(foreign, &err, NULL, SETS("output.overwrite=true"));
    char *notes = read_text(in_dir(foreign, "notes.txt"));
    tu_check(rc == 0 && exists(in_dir(foreign, "model.safetensors")) &&
                 !strcmp(notes, "my notes\n"),
             "the same with output.overwrite=true trains into it (%d): %.300s", rc, err);
    free(notes);
    free(err);
    /* a new directory holding only the run's own log (`bt-train ... > out/train.log 2>&1`) */
    char logged[1200];
    snprintf(logged, sizeof logged, "%s", tu_tmp_path("own-log"));
    mkdir(logged, 0755);
    {
        const int fd = open(in_dir(logged, "train.log"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        spawn_opts lo = {.stdout_fd = fd, .log_base = tu_tmp_path("own-log-x")};
        rc = train(logged, &err, &lo, NULL);
        if (fd >= 0) close(fd);
        tu_check(rc == 0 && exists(in_dir(logged, "model.safetensors")),
                 "output.dir holding only the run's own stdout file: trains (%d): %.300s", rc,
                 err);
        free(err);
    }
    /* "." that is not empty */
    snprintf(foreign, sizeof foreign, "%s", tu_tmp_path("foreign2"));
    mkdir(foreign, 0755);
    tu_setup_text(in_dir(foreign, "notes.txt"), "my notes\n");
    spawn_opts so = {.cwd = foreign, .log_base = tu_tmp_path("dot")};
    rc = train(".", &err, &so, NULL);
    tu_check(rc == 1 && strstr(err, "not empty") && !exists(in_dir(foreign, "metrics.jsonl")),
             "output.dir \".\" (not empty): exit 1 (%d): %.300s", rc, err);
    free(err);

    /* the starting model's directory (a copy, so that a failure spoils nothing), even with
     * output.overwrite */
    char mcopy[1200], set_model[1300];
    snprintf(mcopy, sizeof mcopy, "%s", tu_tmp_path("model-copy"));
    mkdir(mcopy, 0755);
    static const char *const files[] = {"config.json", "vocab.json", "merges.txt",
                                        "tokenizer.json", "preprocessor_config.json"};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        char *t = (char *)tu_read_file(in_dir(model_dir, files[i]), NULL);
        if (t) tu_setup_text(in_dir(mcopy, files[i]), t);
        free(t);
    }
    snprintf(set_model, sizeof set_model, "model.config=%s", mcopy);
    rc = train(mcopy, &err, NULL, SETS(set_model, "output.overwrite=true"));
    tu_check(rc == 1 && strstr(err, "model.config") &&
                 tu_files_equal(in_dir(mcopy, "config.json"), in_dir(model_dir, "config.json")) &&
                 !exists(in_dir(mcopy, "model.safetensors")),
             "output.dir = the starting model's directory: exit 1 naming model.config, its "
             "files untouched (%d): %.300s", rc, err);
    free(err);
    /* the data's directory */
    rc = train(data_dir, &err, NULL, SETS("output.overwrite=true"));
    tu_check(rc == 1 && strstr(err, "data.train") && !exists(in_dir(data_dir, "metrics.jsonl")),
             "output.dir = the data directory: exit 1 naming data.train (%d): %.300s", rc, err);
    free(err);
    /* the root directory */
    so = (spawn_opts){.log_base = tu_tmp_path("root")};
    rc = train("/", &err, &so, SETS("output.overwrite=true"));
    tu_check(rc == 1 && strstr(err, "root directory") && !exists("/metrics.jsonl"),
             "output.dir \"/\": exit 1 (%d): %.300s", rc, err);
    free(err);

    /* the lock: held by another process (this one, with a holder text of another host) */
    char locked[1200];
    snprintf(locked, sizeof locked, "%s", tu_tmp_path("locked"));
    mkdir(locked, 0755);
    const char *lock = in_dir(locked, "bt-train.lock");
    tu_setup_text(lock, "pid 4242 on host elsewhere since 2026-01-01T00:00:00Z\n");
    int fd = open(lock, O_RDWR | O_CLOEXEC);
    const int held = fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0;
    rc = train(locked, &err, NULL, NULL);
    tu_check(held && rc == 1 && strstr(err, "in use") && strstr(err, "pid 4242") &&
                 strstr(err, "elsewhere") && !exists(in_dir(locked, "metrics.jsonl")),
             "output.dir locked by another run: exit 1 naming its pid and host (%d): %.300s", rc,
             err);
    free(err);
    if (fd >= 0) close(fd); /* the holder dies: its lock file stays, stale */
    rc = train(locked, &err, NULL, NULL);
    char *holder = read_text(lock);
    tu_check(rc == 0 && exists(in_dir(locked, "model.safetensors")) && !strstr(holder, "4242"),
             "a stale lock file (holder gone) is taken over (%d): %.300s", rc, err);
    free(holder);
    free(err);

    /* two real runs: the second is refused while the first trains, naming the first's pid */
    char first[1200], second[1200];
    snprintf(first, sizeof first, "%s", tu_tmp_path("busy"));
    snprintf(second, sizeof second, "%s", tu_tmp_path("busy-second"));
    pid_t pid = spawn_train(first, NULL, SETS("train.max_steps=100000"));
    const int started = wait_for(in_dir(first, "metrics.jsonl"), pid);
    char want[64];
    snprintf(want, sizeof want, "pid %ld ", (long)pid);
    so = (spawn_opts){.log_base = second};
    rc = train(first, &err, &so, NULL);
    tu_check(started && rc == 1 && strstr(err, want),
             "a second run on an output.dir in use: exit 1 naming the first's %s(%d): %.300s",
             want, rc, err);
    free(err);
    kill(pid, SIGTERM);
    rc = wait_exit(pid);
    tu_check(rc == 143, "the first run, SIGTERM: exit 143 (%d)", rc);
}

/* --- save first, then evaluate -------------------------------------------------------------- */

static void test_save_first(void) {
    /* a validation manifest whose image is missing: found only by the final evaluation */
    char bad_val[1200], set_val[1300], good_val[1300];
    snprintf(bad_val, sizeof bad_val, "%s/val-missing.jsonl", data_dir);
    tu_setup_text(bad_val, "{\"image\": \"images/nowhere.jpg\", \"caption\": \"a lost picture\"}\n"
                           "{\"image\": \"images/nowhere2.jpg\", \"caption\": \"another\"}\n");
    snprintf(set_val, sizeof set_val, "data.validation=%s", bad_val);
    snprintf(good_val, sizeof good_val, "data.validation=%s/val.jsonl", data_dir);
    char out[1200];
    snprintf(out, sizeof out, "%s", tu_tmp_path("evalfail"));
    char *err;
    int rc = train(out, &err, NULL, SETS(set_val));
    tu_check(rc == 1 && strstr(err, "final evaluation failed") && strstr(err, "nowhere.jpg") &&
                 exists(in_dir(out, "model.safetensors")) &&
                 exists(in_dir(out, "checkpoint-2/optimizer.safetensors")),
             "the final evaluation fails: exit 1 saying so; the final model and checkpoint-2 are "
             "saved under save.strategy \"no\" (%d): %.400s", rc, err);
    free(err);
    char saved[1300];
    snprintf(saved, sizeof saved, "%s", tu_tmp_path("evalfail-model.safetensors"));
    {
        size_t len = 0;
        uint8_t *m = tu_read_file(in_dir(out, "model.safetensors"), &len);
        if (m) tu_setup_file(saved, m, len);
        free(m);
    }
    rc = train(out, &err, NULL, SETS(good_val));
    char *log = read_text(in_dir(tu_tmpdir(), "evalfail.log"));
    tu_check(rc == 0 && exists(in_dir(out, "eval_results.json")) &&
                 tu_files_equal(saved, in_dir(out, "model.safetensors")),
             "the rerun with the manifest fixed evaluates the saved model, exit 0, the model "
             "unchanged (%d): %.300s", rc, err);
    free(log);
    free(err);

    /* the test split fails after the validation split was evaluated and logged: the rerun
     * evaluates again, and metrics.jsonl holds one eval record of the last step, not two */
    snprintf(out, sizeof out, "%s", tu_tmp_path("testfail"));
    char set_bad_test[1300], set_good_test[1300];
    snprintf(set_bad_test, sizeof set_bad_test, "data.test=%s", bad_val);
    snprintf(set_good_test, sizeof set_good_test, "data.test=%s/test.jsonl", data_dir);
    rc = train(out, &err, NULL, SETS(set_bad_test));
    free(err);
    const int rc_fixed = train(out, &err, NULL, SETS(set_good_test));
    char *m = read_text(in_dir(out, "metrics.jsonl"));
    int evals = 0;
    for (const char *q = m; (q = strstr(q, "\"type\":\"eval\"")); q++) evals++;
    tu_check(rc == 1 && rc_fixed == 0 && evals == 1 && exists(in_dir(out, "test_results.json")),
             "a failed test split, then the rerun: exit 1 then 0, one eval record of the last "
             "step in metrics.jsonl (%d, %d, %d records): %.300s", rc, rc_fixed, evals, err);
    free(m);
    free(err);

    /* typos found before step 1 */
    snprintf(out, sizeof out, "%s", tu_tmp_path("testtypo"));
    char set_test[1300];
    snprintf(set_test, sizeof set_test, "data.test=%s/tset.jsonl", data_dir);
    rc = train(out, &err, NULL, SETS(set_test));
    tu_check(rc == 1 && strstr(err, "tset.jsonl") && !exists(in_dir(out, "metrics.jsonl")),
             "a data.test typo: exit 1 naming it before step 1 (%d): %.300s", rc, err);
    free(err);
    snprintf(out, sizeof out, "%s", tu_tmp_path("metrictypo"));
    rc = train(out, &err, NULL, SETS("eval.metric_for_best=t2i_R1"));
    tu_check(rc == 1 && strstr(err, "eval.metric_for_best") && strstr(err, "t2i_r1") &&
                 strstr(err, "accuracy_5way") && !exists(in_dir(out, "metrics.jsonl")),
             "an eval.metric_for_best typo: exit 1 listing the names before step 1 (%d): %.400s",
             rc, err);
    free(err);
    /* metrics.jsonl's name and the old one */
    const char *names[] = {"eval.metric_for_best=accuracy_5way", "eval.metric_for_best=choice_acc"};
    for (int k = 0; k < 2; k++) {
        snprintf(out, sizeof out, "%s", tu_tmp_path(k ? "metric-old" : "metric-new"));
        rc = train(out, &err, NULL, SETS(names[k]));
        char *st = read_text(in_dir(out, "checkpoint-2/trainer_state.json"));
        tu_check(rc == 0 && strstr(st, "\"best_metric\"") && !strstr(st, "\"best_metric\": null") &&
                     strstr(st, "checkpoint-2\""),
                 "%s: accepted, the final evaluation's best recorded in checkpoint-2 (%d): %.300s",
                 names[k], rc, err);
        free(st);
        free(err);
    }
    /* data.test runs with the final evaluation only */
    snprintf(out, sizeof out, "%s", tu_tmp_path("test-no-at-end"));
    snprintf(set_test, sizeof set_test, "data.test=%s/test.jsonl", data_dir);
    rc = train(out, &err, NULL, SETS(set_test, "eval.at_end=false"));
    tu_check(rc == 0 && !exists(in_dir(out, "test_results.json")),
             "data.test with eval.at_end false: not evaluated (%d): %.300s", rc, err);
    free(err);
    snprintf(out, sizeof out, "%s", tu_tmp_path("test-at-end"));
    rc = train(out, &err, NULL, SETS(set_test));
    tu_check(rc == 0 && exists(in_dir(out, "test_results.json")),
             "data.test with eval.at_end true: test_results.json (%d): %.300s", rc, err);
    free(err);
}

/* --- signals -------------------------------------------------------------------------------- */

static void test_signals(void) {
    static const int sigs[] = {SIGHUP, SIGUSR1};
    for (int k = 0; k < 2; k++) {
        char out[1200];
        snprintf(out, sizeof out, "%s", tu_tmp_path(k ? "sigusr1" : "sighup"));
        pid_t pid = spawn_train(out, NULL, SETS("train.max_steps=100000"));
        const int started = wait_for(in_dir(out, "metrics.jsonl"), pid);
        sleep_s(0.1);
        kill(pid, sigs[k]);
        const int rc = wait_exit(pid);
        char *err = read_text(in_dir(tu_tmpdir(), k ? "sigusr1.err" : "sighup.err"));
        char *st = NULL;
        /* the checkpoint of the step it stopped at: the one the message names */
        const char *ck = strstr(err, "after saving ");
        int saved = 0;
        if (ck) {
            char dir[1300];
            snprintf(dir, sizeof dir, "%s", ck + 13);
            dir[strcspn(dir, "\n")] = '\0';
            saved = exists(in_dir(dir, "optimizer.safetensors"));
        }
        tu_check(started && rc == 128 + sigs[k] && saved,
                 "%s: a checkpoint saved, exit %d (got %d): %.300s",
                 k ? "SIGUSR1" : "SIGHUP", 128 + sigs[k], rc, err);
        free(st);
        free(err);
    }

    /* SIGTERM during the final evaluation: 4000 records at 1 per batch (~10 s here); the signal
     * lands once the final model is saved (which comes first now), the evaluation stops at
     * its next batch. Bound: one batch of one record (milliseconds here) + the summary write;
     * 5 s leaves room for a loaded CI machine. */
    char big[1200], set_val[1300];
    snprintf(big, sizeof big, "%s/val-big.jsonl", data_dir);
    {
        char *v = read_text(in_dir(data_dir, "val.jsonl"));
        FILE *f = fopen(big, "w");
        for (int i = 0; f && i < 500; i++) fputs(v, f);
        if (f) fclose(f);
        free(v);
    }
    snprintf(set_val, sizeof set_val, "data.validation=%s", big);
    char out[1200];
    snprintf(out, sizeof out, "%s", tu_tmp_path("term-in-eval"));
    pid_t pid = spawn_train(out, NULL, SETS(set_val, "eval.batch_size=1"));
    const int saved = wait_for(in_dir(out, "model.safetensors"), pid);
    sleep_s(0.2);
    const double t0 = now_s();
    kill(pid, SIGTERM);
    const int rc = wait_exit(pid);
    const double dt = now_s() - t0;
    char *err = read_text(in_dir(tu_tmpdir(), "term-in-eval.err"));
    tu_check(saved && rc == 143 && dt < 5.0 && strstr(err, "stopped by a signal after") &&
                 exists(in_dir(out, "checkpoint-2/optimizer.safetensors")) &&
                 !exists(in_dir(out, "eval_results.json")),
             "SIGTERM during the final evaluation: exit 143 after %.2f s (bound 5 s), the model "
             "and checkpoint-2 saved (%d): %.300s", dt, rc, err);
    free(err);

    /* SIGTERM during an evaluation in training (eval.strategy steps): the evaluation stops, the
     * step it followed is saved, exit 143; the same bound */
    snprintf(out, sizeof out, "%s", tu_tmp_path("term-in-mid-eval"));
    pid = spawn_train(out, NULL, SETS(set_val, "eval.batch_size=1", "eval.strategy=steps",
                                      "eval.steps=1", "train.max_steps=100000"));
    const int logged = wait_for(in_dir(out, "metrics.jsonl"), pid); /* step 1, then its eval */
    sleep_s(0.3);
    const double t1 = now_s();
    kill(pid, SIGTERM);
    const int rc2 = wait_exit(pid);
    const double dt2 = now_s() - t1;
    err = read_text(in_dir(tu_tmpdir(), "term-in-mid-eval.err"));
    tu_check(logged && rc2 == 143 && dt2 < 5.0 && strstr(err, "stopped by a signal after") &&
                 exists(in_dir(out, "checkpoint-1/optimizer.safetensors")),
             "SIGTERM during an evaluation at step 1: exit 143 after %.2f s (bound 5 s), "
             "checkpoint-1 saved (%d): %.300s", dt2, rc2, err);
    free(err);

    /* stdout's reader goes away (bt-train | head -0): the run goes on to its end */
    int p[2];
    if (pipe(p) == 0) {
        close(p[0]); /* no reader: every write to stdout is EPIPE / SIGPIPE */
        snprintf(out, sizeof out, "%s", tu_tmp_path("sigpipe"));
        spawn_opts so = {.stdout_fd = p[1]};
        char *e;
        const int r = train(out, &e, &so, NULL);
        close(p[1]);
        tu_check(r == 0 && exists(in_dir(out, "model.safetensors")),
                 "stdout without a reader (SIGPIPE): the run ends normally, exit 0 (%d): %.300s",
                 r, e);
        free(e);
    }
}

/* --- resume checks what it resumes ----------------------------------------------------------- */

static void copy_tree(const char *from, const char *to) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s'", to, from, to);
    if (system(cmd) != 0) {
        fprintf(stderr, "%s: failed\n", cmd);
        exit(1);
    }
}

/* Overwrites the first element of the first tensor whose name starts with `prefix` in a
 * safetensors file with v. 1 when done. */
static int poke_tensor(const char *path, const char *prefix, float v) {
    size_t len = 0;
    uint8_t *b = tu_read_file(path, &len);
    if (!b || len < 8) return 0;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | b[i];
    int done = 0;
    char *h = strndup((const char *)b + 8, (size_t)hlen);
    char key[300];
    snprintf(key, sizeof key, "\"%s", prefix);
    char *at = strstr(h, key), *off = at ? strstr(at, "\"data_offsets\"") : NULL;
    char *num = off ? strchr(off, '[') : NULL;
    if (num) {
        const size_t o = (size_t)strtoull(num + 1, NULL, 10);
        if (8 + hlen + o + sizeof v <= len) {
            memcpy(b + 8 + hlen + o, &v, sizeof v);
            done = tu_write_file(path, b, len);
        }
    }
    free(h);
    free(b);
    return done;
}

static void test_resume_checks(void) {
    /* a finished 2-step run with checkpoints 1 and 2; each case resumes a copy to step 4 */
    char ref[1200];
    snprintf(ref, sizeof ref, "%s", tu_tmp_path("resume-ref"));
    int rc = train(ref, NULL, NULL, SETS("save.strategy=steps", "save.steps=1"));
    tu_check(rc == 0, "resume reference run: exit 0 (%d)", rc);
    /* model directories: the same files elsewhere, another depth, another vocab.json */
    char same[1200], deep[1200], tok[1200];
    snprintf(same, sizeof same, "%s", tu_tmp_path("model-same"));
    snprintf(deep, sizeof deep, "%s", tu_tmp_path("model-deep"));
    snprintf(tok, sizeof tok, "%s", tu_tmp_path("model-tok"));
    copy_tree(model_dir, same);
    copy_tree(model_dir, deep);
    copy_tree(model_dir, tok);
    {
        char *c = read_text(in_dir(model_dir, "config.json"));
        char *p = strstr(c, "\"intermediate_size\": 256"); /* text_config's (the first) */
        if (p) p[strlen("\"intermediate_size\": ")] = '1'; /* 156 */
        tu_setup_text(in_dir(deep, "config.json"), c);
        free(c);
        char *v = read_text(in_dir(model_dir, "vocab.json"));
        char *v2 = malloc(strlen(v) + 2);
        sprintf(v2, "%s\n", v);
        tu_setup_text(in_dir(tok, "vocab.json"), v2);
        free(v);
        free(v2);
    }
    struct {
        const char *what, *model, *extra, *want;
        int poke; /* 1: optimizer of step 1, 2: trainer state of step 1, 3: NaN, 4: negative */
    } cases[] = {
        {"another shape", deep, "output.resume_new_start=true", "text_config.intermediate_size", 0},
        {"another starting model path", same, "train.max_steps=4", "output.resume_new_start", 0},
        {"another tokenizer", tok, "output.resume_new_start=true", "vocab.json", 0},
        {"optimizer.safetensors of another step", NULL, NULL, "different checkpoints", 1},
        {"trainer_state.json of another step", NULL, NULL, "global_step is 1", 2},
        {"NaN in exp_avg_sq", NULL, NULL, "nan", 3},
        {"negative exp_avg_sq", NULL, NULL, "holds -1", 4},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char out[1200], set_model[1300];
        snprintf(out, sizeof out, "%s", tu_tmp_path("resume-case"));
        copy_tree(ref, out);
        const char *c2 = in_dir(out, "checkpoint-2"), *c1 = in_dir(out, "checkpoint-1");
        char c1s[1400], c2s[1400];
        snprintf(c1s, sizeof c1s, "%s", c1);
        snprintf(c2s, sizeof c2s, "%s", c2);
        if (cases[i].poke == 1 || cases[i].poke == 2) {
            const char *f = cases[i].poke == 1 ? "optimizer.safetensors" : "trainer_state.json";
            size_t len = 0;
            uint8_t *b = tu_read_file(in_dir(c1s, f), &len);
            if (b) tu_setup_file(in_dir(c2s, f), b, len);
            free(b);
        }
        if (cases[i].poke >= 3 &&
            !poke_tensor(in_dir(c2s, "optimizer.safetensors"), "exp_avg_sq.",
                         cases[i].poke == 3 ? NAN : -1.0f))
            tu_check(0, "%s: could not edit the optimizer file", cases[i].what);
        snprintf(set_model, sizeof set_model, "model.config=%s",
                 cases[i].model ? cases[i].model : model_dir);
        char *err;
        rc = train(out, &err, NULL,
                   SETS(set_model, "train.max_steps=4", "save.strategy=steps", "save.steps=1",
                        cases[i].extra ? cases[i].extra : "train.max_steps=4"));
        tu_check(rc == 1 && strstr(err, cases[i].want) && !exists(in_dir(out, "checkpoint-3")),
                 "resume with %s: refused naming \"%s\" (%d): %.400s", cases[i].what,
                 cases[i].want, rc, err);
        free(err);
    }
    /* the same model moved, with output.resume_new_start: resumed */
    char out[1200], set_model[1300];
    snprintf(out, sizeof out, "%s", tu_tmp_path("resume-moved"));
    copy_tree(ref, out);
    snprintf(set_model, sizeof set_model, "model.config=%s", same);
    char *err;
    rc = train(out, &err, NULL, SETS(set_model, "train.max_steps=4", "output.resume_new_start=true"));
    tu_check(rc == 0 && exists(in_dir(out, "checkpoint-4")),
             "the same model moved, output.resume_new_start=true: resumed to step 4 (%d): %.300s",
             rc, err);
    free(err);
}

/* --- OpenMP's waits (kernels/cpu.h bt_runtime_prefer_start_environment) --------------------------
 * bt-train --info (stdout), run through env(1) with `unset` the variables to drop and `set`
 * extra ones (free it). */
static char *info_output(const char *unset, const char *set) {
    static char err[4096];
    char *out = calloc(1 << 16, 1);
    if (!out) return strdup("");
    tu_run_env_captured(out, 1 << 16, err, sizeof err, "%s %s '%s' --info", unset, set, exe);
    return out;
}

/* Neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT set: bt sets both (PASSIVE, a spin of 1000) and
 * re-executes itself, as --info shows; either one set by the user: bt sets nothing. */
static void test_openmp_waits(void) {
    char *t = info_output("-u OMP_WAIT_POLICY -u GOMP_SPINCOUNT", "");
    tu_check(strstr(t, "environment set by bt: OMP_WAIT_POLICY=PASSIVE GOMP_SPINCOUNT=1000") &&
                 strstr(t, "environment: OMP_WAIT_POLICY=PASSIVE GOMP_SPINCOUNT=1000"),
             "neither set: bt sets OMP_WAIT_POLICY=PASSIVE GOMP_SPINCOUNT=1000 and says so: %.400s",
             t);
    free(t);
    static const char *const user[][2] = {
        {"-u GOMP_SPINCOUNT", "OMP_WAIT_POLICY=ACTIVE"},
        {"-u OMP_WAIT_POLICY", "GOMP_SPINCOUNT=7"},
    };
    for (int i = 0; i < 2; i++) {
        t = info_output(user[i][0], user[i][1]);
        tu_check(!strstr(t, "environment set by bt: OMP") && strstr(t, user[i][1]) &&
                     !strstr(t, i ? "OMP_WAIT_POLICY=" : "GOMP_SPINCOUNT="),
                 "%s set by the user: bt sets neither variable: %.400s", user[i][1], t);
        free(t);
    }
}

/* Thread binding asked for (OMP_PROC_BIND=close OMP_PLACES=threads, OpenMP's waits unset so
 * that bt re-executes itself): the re-executed bt keeps every place (settings.c
 * reexec_unbind_initial_thread), so the two threads of --info's first parallel region, as
 * libgomp itself reports them (OMP_DISPLAY_AFFINITY, on stderr), run on two CPUs. Before that
 * fix the exec kept the initial thread's binding to the first place, and both ran there. */
static void test_openmp_binding(void) {
    cpu_set_t own;
    if (sched_getaffinity(0, sizeof own, &own) != 0 || CPU_COUNT(&own) < 2) {
        printf("note: this process may use one CPU: OpenMP binding over two places not "
               "checked\n");
        return;
    }
    char *out = calloc(1 << 16, 1), *err = calloc(1 << 16, 1);
    if (!out || !err) {
        tu_check(0, "test_openmp_binding: out of memory");
        free(out), free(err);
        return;
    }
    tu_run_env_captured(out, 1 << 16, err, 1 << 16,
                        "-u OMP_WAIT_POLICY -u GOMP_SPINCOUNT OMP_PROC_BIND=close "
                        "OMP_PLACES=threads OMP_NUM_THREADS=2 OMP_DISPLAY_AFFINITY=true '%s' "
                        "--info", exe);
    /* the level-1 lines of the first region: "level 1 thread 0x... affinity <cpus>" */
    char cpus[2][64] = {{0}};
    int n = 0;
    for (const char *at = err; n < 2 && (at = strstr(at, "level 1 thread ")) != NULL; at++) {
        const char *a = strstr(at, " affinity ");
        const char *eol = strchr(at, '\n');
        if (!a || (eol && a > eol)) continue;
        a += strlen(" affinity ");
        const size_t len = strcspn(a, "\n");
        snprintf(cpus[n++], sizeof cpus[0], "%.*s", (int)(len < 63 ? len : 63), a);
    }
    tu_check(strstr(out, "environment set by bt: OMP_WAIT_POLICY=PASSIVE") != NULL,
             "binding asked for: bt re-executed itself (the case under test): %.300s", out);
    tu_check(n == 2 && strcmp(cpus[0], cpus[1]) != 0,
             "OMP_PROC_BIND=close OMP_PLACES=threads, 2 threads: bound to two CPUs after bt's "
             "re-exec (got %d threads: '%s', '%s'): %.400s", n, cpus[0], cpus[1], err);
    free(out), free(err);
}

/* --- OpenBLAS's kernels (kernels/cpu.h bt_runtime_prefer_start_environment) -----------------
 * The word after `key` on its --info line ("" when absent), into out. */
static void info_word(const char *info, const char *key, char *out, size_t cap) {
    const char *at = strstr(info, key);
    size_t n = at ? strcspn(at + strlen(key), " \n") : 0;
    if (n >= cap) n = cap - 1;
    memcpy(out, at ? at + strlen(key) : "", n);
    out[n] = 0;
}

static int same_core(const char *a, const char *b) { return a && b && strcmp(a, b) == 0; }

/* What OpenBLAS's cores need (cpu.h bt_openblas_core_needs), then bt-train with BT_GEMM=openblas
 * and OPENBLAS_CORETYPE forcing kernels this CPU cannot run: exit 1 naming the variable, the
 * core and the one to set, before anything is written, where before it stopped on an illegal
 * instruction (exit 132; session 40, Zen 1). Debian's OpenBLAS 0.3.21 runs a forced SkylakeX
 * on any CPU, so the run is made where the CPU lacks AVX-512; on one that has it no listed
 * core is out of reach (a forced Cooperlake falls back by itself), which the note says. */
static void test_openblas_core_refused(void) {
    int runs = 0;
    const char *need = bt_openblas_core_needs("SkylakeX", &runs);
    tu_check(need && strstr(need, "AVX-512") && runs == bt_isa_supported(BT_ISA_AVX512),
             "SkylakeX needs AVX-512 (%s), run here: %d", need ? need : "NULL", runs);
    need = bt_openblas_core_needs("Cooperlake", &runs);
    tu_check(need && strstr(need, "BF16") && runs == bt_isa_supported(BT_ISA_AVX512_BF16),
             "Cooperlake needs AVX512-BF16 (%s), run here: %d", need ? need : "NULL", runs);
    need = bt_openblas_core_needs("Haswell", &runs);
    tu_check(need && strstr(need, "AVX2") && (!bt_isa_supported(BT_ISA_AVX2) || runs),
             "Haswell needs AVX2 (%s), run on an avx2 level: %d", need ? need : "NULL", runs);
    need = bt_openblas_core_needs("Prescott", &runs);
    tu_check(!need && runs == 1, "Prescott (SSE3) is not checked: %s", need ? need : "NULL");
    tu_check(bt_openblas_core_check() == BT_OK,
             "the core OpenBLAS loaded for this suite runs here: %s", bt_error_message());
    if (bt_isa_supported(BT_ISA_AVX512)) {
        printf("note: this CPU has AVX-512: no OpenBLAS core forced by name is out of its reach, "
               "so bt-train's refusal is run only on CPUs without it\n");
        return;
    }
    char out[1200];
    snprintf(out, sizeof out, "%s", tu_tmp_path("openblas-skylakex"));
    tu_setenv("BT_GEMM", "openblas", 1);
    tu_setenv("OPENBLAS_CORETYPE", "SkylakeX", 1);
    char *err;
    const int rc = train(out, &err, NULL, NULL);
    tu_unsetenv("OPENBLAS_CORETYPE");
    tu_unsetenv("BT_GEMM");
    const char *fit = bt_openblas_core_for("Prescott", bt_isa_detected());
    tu_check(rc == 1 && strstr(err, "OPENBLAS_CORETYPE=SkylakeX") && strstr(err, "AVX-512") &&
                 (!fit || strstr(err, fit)) && !exists(out),
             "OPENBLAS_CORETYPE=SkylakeX without AVX-512: exit 1 naming it and %s before "
             "anything is written (%d): %.400s", fit ? fit : "no core", rc, err);
    free(err);
}

/* The rule, then bt-train as run: with OPENBLAS_CORETYPE unset, the OpenBLAS core it runs on an
 * AVX2-or-better level is never the SSE3 fallback, and one bt set is the rule's for that level
 * (a CPU model OpenBLAS knows takes the first branch; the Xeon model 207 of session 30 the
 * second); the user's OPENBLAS_CORETYPE, even Prescott, is left as it is. */
static void test_openblas_core(void) {
    tu_check(same_core(bt_openblas_core_for("Prescott", BT_ISA_AVX512_BF16), "Cooperlake") &&
                 same_core(bt_openblas_core_for("Prescott", BT_ISA_AVX512), "SkylakeX") &&
                 same_core(bt_openblas_core_for("Prescott", BT_ISA_AVX2), "Haswell") &&
                 !bt_openblas_core_for("Prescott", BT_ISA_SCALAR) &&
                 !bt_openblas_core_for("SkylakeX", BT_ISA_AVX512_BF16) &&
                 !bt_openblas_core_for(NULL, BT_ISA_AVX2),
             "OPENBLAS_CORETYPE only for OpenBLAS's Prescott fallback, by the active level");
    char core[64], isa[64], set[64];
    char *t = info_output("-u OPENBLAS_CORETYPE", "");
    info_word(t, "openblas core: ", core, sizeof core);
    info_word(t, "bt kernels isa: ", isa, sizeof isa);
    info_word(t, "environment set by bt: OPENBLAS_CORETYPE=", set, sizeof set);
    bt_isa level = BT_ISA_SCALAR;
    tu_check(*core && bt_isa_from_name(isa, &level) == BT_OK,
             "--info names the OpenBLAS core (%s) and the kernels' level (%s)", core, isa);
    if (!*set) {
        tu_check(level == BT_ISA_SCALAR || strcmp(core, "Prescott") != 0,
                 "OpenBLAS's own choice on level %s is not its SSE3 fallback: %s", isa, core);
    } else {
        const char *want = bt_openblas_core_for("Prescott", level);
        tu_check(same_core(set, want) && same_core(core, want),
                 "OpenBLAS fell back to Prescott: bt set OPENBLAS_CORETYPE=%s for level %s "
                 "(rule: %s) and OpenBLAS runs %s", set, isa, want ? want : "none", core);
    }
    free(t);
    t = info_output("", "OPENBLAS_CORETYPE=Prescott");
    info_word(t, "openblas core: ", core, sizeof core);
    tu_check(strcmp(core, "Prescott") == 0 && !strstr(t, "environment set by bt: OPENBLAS") &&
                 strstr(t, "OPENBLAS_CORETYPE=Prescott"),
             "the user's OPENBLAS_CORETYPE=Prescott is kept: core %s", core);
    free(t);
    test_openblas_core_refused();
}

/* --- strict environment and numbers -------------------------------------------------------- */

static void test_strict(void) {
    static const char *const env[][3] = {
        {"BT_CPU_ISA", "bogus", "BT_CPU_ISA"},
        {"BT_GEMM_BF16", "bogus", "BT_GEMM_BF16"},
        {"BT_GEMM_SPLIT_K", "maybe", "BT_GEMM_SPLIT_K"},
        {"BT_GEMM_PACK_B", "maybe", "BT_GEMM_PACK_B"},
        {"BT_GEMM_SPLIT_M", "maybe", "BT_GEMM_SPLIT_M"},
        {"BT_MEM_AVAILABLE", "lots", "BT_MEM_AVAILABLE"},
        {"BT_HUGE_PAGES", "yes", "BT_HUGE_PAGES"},
        {"BT_KERNELS", "fastest", "BT_KERNELS"},
        {"BT_ATTENTION_THREADS", "heads", "BT_ATTENTION_THREADS"},
        {"BT_ATTENTION_PRODUCTS", "tiles", "BT_ATTENTION_PRODUCTS"},
        {"BT_ACT_BF16", "yes", "BT_ACT_BF16"},
        {"BT_ATTENTION_PROBS", "kept", "BT_ATTENTION_PROBS"},
        {"OMP_NUM_THREADS", "100000", "processor"},
    };
    for (size_t i = 0; i < sizeof env / sizeof *env; i++) {
        char out[1200];
        snprintf(out, sizeof out, "%s", tu_tmp_path("strict-env"));
        tu_setenv(env[i][0], env[i][1], 1);
        char *err;
        const int rc = train(out, &err, NULL, NULL);
        tu_unsetenv(env[i][0]);
        tu_check(rc == 1 && strstr(err, env[i][0]) && strstr(err, env[i][2]) && !exists(out),
                 "%s=%s: exit 1 naming it before anything is written (%d): %.300s", env[i][0],
                 env[i][1], rc, err);
        free(err);
    }
    char out[1200];
    snprintf(out, sizeof out, "%s", tu_tmp_path("strict-threads"));
    char *err;
    int rc = train(out, &err, NULL, SETS("train.threads=4096"));
    tu_check(rc == 1 && strstr(err, "train.threads") && strstr(err, "processor") && !exists(out),
             "train.threads 4096: refused naming the processors (%d): %.300s", rc, err);
    free(err);
    rc = train(out, &err, NULL, SETS("train.max_steps=08"));
    tu_check(rc == 1 && strstr(err, "--set") && strstr(err, "train.max_steps"),
             "--set train.max_steps=08: refused like Python's json (%d): %.300s", rc, err);
    free(err);
    /* gradient accumulation beyond the old hidden 64 (an assertion abort) and beyond the
     * loader's old 1024 slots ("loader: prefetch = 4098"): 65 trains; 4097 is bounded by
     * memory, said in its own terms (20 MB: the model fits, 4098 batches of 49 KB do not) */
    snprintf(out, sizeof out, "%s", tu_tmp_path("accum-65"));
    rc = train(out, &err, NULL, SETS("train.gradient_accumulation_steps=65", "train.batch_size=1",
                                     "train.max_steps=1", "eval.at_end=false"));
    tu_check(rc == 0 && exists(in_dir(out, "model.safetensors")),
             "train.gradient_accumulation_steps 65: trains (%d): %.300s", rc, err);
    free(err);
    snprintf(out, sizeof out, "%s", tu_tmp_path("accum-4097"));
    tu_setenv("BT_MEM_AVAILABLE", "20M", 1);
    rc = train(out, &err, NULL, SETS("train.gradient_accumulation_steps=4097", "train.batch_size=1"));
    tu_unsetenv("BT_MEM_AVAILABLE");
    tu_check(rc == 1 && strstr(err, "train.gradient_accumulation_steps 4097") &&
                 strstr(err, "needs") && !strstr(err, "prefetch ="),
             "train.gradient_accumulation_steps 4097 beyond memory: refused in its own terms "
             "(%d): %.300s", rc, err);
    free(err);
    /* messages: a rule across keys broken by --set names --set; a diverged last update is
     * named as such (it was "val.jsonl:1: ... embeddings ... not finite") */
    snprintf(out, sizeof out, "%s", tu_tmp_path("cross-set"));
    rc = train(out, &err, NULL, SETS("train.warmup_ratio=0.1", "train.warmup_steps=2"));
    tu_check(rc == 1 && strstr(err, "with its --set values") && strstr(err, "warmup_ratio"),
             "a cross-key rule broken by --set names --set (%d): %.300s", rc, err);
    free(err);
    snprintf(out, sizeof out, "%s", tu_tmp_path("diverged"));
    rc = train(out, &err, NULL, SETS("train.lr=1e308", "train.max_grad_norm=0", "train.max_steps=1"));
    tu_check(rc == 1 && strstr(err, "weights are not finite after step 1") &&
                 strstr(err, "train.lr") && !strstr(err, "val.jsonl:1"),
             "a diverged last update is named as such (%d): %.300s", rc, err);
    free(err);
    char cfg[1200];
    snprintf(cfg, sizeof cfg, "%s", tu_tmp_path("leading-zero.json"));
    tu_setup_text(cfg, "{\"train\": {\"max_steps\": 01}}");
    const char *argv[] = {exe, "--config", cfg, NULL};
    char errp[1300];
    snprintf(errp, sizeof errp, "%s.err", cfg);
    pid_t pid = fork();
    if (pid == 0) {
        int fe = open(errp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fe < 0) _exit(126);
        dup2(fe, 2);
        execv(exe, (char *const *)argv);
        _exit(127);
    }
    rc = wait_exit(pid);
    err = read_text(errp);
    tu_check(rc == 1 && strstr(err, "leading zero") && strstr(err, "$.train.max_steps"),
             "a config file with 01: refused naming the key (%d): %.300s", rc, err);
    free(err);
}

/* --- out of memory -------------------------------------------------------------------------- */

/* `prlimit --as=100M/200M/300M bt-train`: a message and exit 1 every time (or a finished run
 * where it fits), never an abort (oneDNN's JIT segfaulted on a failed mmap, an allocation
 * assertion aborted) nor a hang at exit (OpenBLAS's exit handler joined a thread that retried
 * its buffer mmap forever): waited for at most 120 s. Not under ASan, which maps terabytes of
 * shadow memory and cannot run under an address-space limit. */
static void test_out_of_memory(void) {
#if defined(__SANITIZE_ADDRESS__)
    printf("note: the RLIMIT_AS cases are not run under AddressSanitizer\n");
#else
    static const unsigned mib[] = {100, 200, 300, 500, 700};
    for (size_t i = 0; i < sizeof mib / sizeof *mib; i++) {
        char out[1200];
        snprintf(out, sizeof out, "%s", tu_tmp_path("as-limit"));
        spawn_opts so = {.as_limit = (unsigned long long)mib[i] << 20};
        const pid_t pid = spawn_train(out, &so, NULL);
        int rc = -1;
        for (int t = 0; t < 12000; t++) {
            int status;
            if (waitpid(pid, &status, WNOHANG) == pid) {
                rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
                break;
            }
            sleep_s(0.01);
        }
        if (rc < 0) {
            kill(pid, SIGKILL);
            wait_exit(pid);
        }
        char *err = read_text(in_dir(tu_tmpdir(), "as-limit.err"));
        tu_check(rc == 0 || (rc == 1 && (strstr(err, "address-space limit") ||
                                          strstr(err, "available"))),
                 "RLIMIT_AS %u MiB: exit 0, or 1 with a memory message (%d%s): %.300s", mib[i],
                 rc, rc < 0 ? ", hung: killed after 120 s" : "", err);
        free(err);
    }
#endif
}

/* --- closed standard descriptors ------------------------------------------------------------ */

/* bt-train <&- >&- 2>&-: the run's files must not become fds 0-2 (metrics.jsonl then got the
 * terminal text and the run failed at its end); every line of metrics.jsonl is a record. */
static void test_closed_std(void) {
    char out[1200];
    snprintf(out, sizeof out, "%s", tu_tmp_path("closed-std"));
    spawn_opts so = {.close_std = 1};
    const int rc = wait_exit(spawn_train(out, &so, SETS("logging.tensorboard=true")));
    char *m = read_text(in_dir(out, "metrics.jsonl"));
    int lines = 0, records = 0;
    for (char *line = strtok(m, "\n"); line; line = strtok(NULL, "\n")) {
        lines++;
        records += !strncmp(line, "{", 1) && strstr(line, "\"type\"") != NULL;
    }
    tu_check(rc == 0 && lines >= 3 && records == lines && exists(in_dir(out, "model.safetensors")),
             "stdin, stdout and stderr closed: exit 0, metrics.jsonl holds records only (%d; %d "
             "of %d lines)", rc, records, lines);
    free(m);
}

/* --- a rerun of a finished run ------------------------------------------------------------- */

static void test_finished(void) {
    char out[1200];
    snprintf(out, sizeof out, "%s", tu_tmp_path("finished"));
    int rc = train(out, NULL, NULL, NULL);
    static const char *const files[] = {"summary.json", "metrics.jsonl", "model.safetensors",
                                        "eval_results.json", "checkpoint-2/trainer_state.json"};
    enum { NF = sizeof files / sizeof *files };
    char copy[NF][1300];
    for (size_t i = 0; i < NF; i++) {
        snprintf(copy[i], sizeof copy[i], "%s.%zu", out, i);
        size_t len = 0;
        uint8_t *b = tu_read_file(in_dir(out, files[i]), &len);
        if (b) tu_setup_file(copy[i], b, len);
        free(b);
    }
    char *err;
    rc = train(out, &err, NULL, NULL);
    char *log = read_text(in_dir(tu_tmpdir(), "finished.log"));
    int same = 1;
    for (size_t i = 0; i < NF; i++) same &= tu_files_equal(copy[i], in_dir(out, files[i]));
    tu_check(rc == 0 && same && strstr(log, "finished run"),
             "a rerun of a finished run: exit 0, says so, summary.json, metrics.jsonl, the model "
             "and the checkpoint unchanged (%d, same %d): %.300s", rc, same, err);
    free(log);
    free(err);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_train_contract PATH/TO/bt-train\n");
        return 1;
    }
    static char exe_abs[4096];
    exe = realpath(argv[1], exe_abs) ? exe_abs : argv[1]; /* some runs chdir first */
    setup();
    test_output_dir();
    test_save_first();
    test_signals();
    test_finished();
    test_closed_std();
    test_resume_checks();
    test_strict();
    test_openmp_waits();
    test_openmp_binding();
    test_openblas_core();
    test_out_of_memory();
    return tu_finish();
}
