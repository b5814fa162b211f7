/* test_train_setup.c: the synthetic data set and model path the bt-train tests share
 * (test_train_setup.h). */
#include "test_train_setup.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "data/synth.h"
#include "status.h"

void tts_synth_data(const char *dir, int n_train, int n_val, int n_test) {
    synth_options so;
    memset(&so, 0, sizeof so);
    so.out_dir = dir;
    so.n[0] = n_train;
    so.n[1] = n_val;
    so.n[2] = n_test;
    so.seed = 3;
    so.size = 64;
    if (synth_generate(&so) != BT_OK) {
        fprintf(stderr, "synth: %s\n", bt_error_message());
        exit(1);
    }
}

void tts_synthetic_model_dir(char *out, size_t cap) {
    const char *configs = getenv("BT_CONFIGS");
    snprintf(out, cap, "%s/synthetic-model", configs ? configs : "configs");
}

pid_t tts_spawn_train(const char *exe, const char *cfg, const char *out,
                      const char *const *sets, size_t n_sets, const tts_spawn_opts *o) {
    static const tts_spawn_opts none;
    if (!o) o = &none;
    char log[1200], err[1200], outset[1200];
    const char *base = o->log_base ? o->log_base : out;
    snprintf(log, sizeof log, "%s.log", base);
    snprintf(err, sizeof err, "%s.err", base);
    snprintf(outset, sizeof outset, "output.dir=%s", out);
    const char *argv[64];
    size_t n = 0;
    argv[n++] = exe;
    argv[n++] = "--config";
    argv[n++] = cfg;
    argv[n++] = "--quiet-config";
    argv[n++] = "--set";
    argv[n++] = outset;
    for (size_t i = 0; i < n_sets && n < 60; i++) {
        argv[n++] = "--set";
        argv[n++] = sets[i];
    }
    argv[n] = NULL;
    pid_t pid = fork();
    if (pid == 0) {
        int fo = o->stdout_fd > 0 ? o->stdout_fd : open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        int fe = open(err, O_WRONLY | O_CREAT | (o->truncate_err ? O_TRUNC : O_APPEND), 0644);
        if (fo < 0 || fe < 0) _exit(126);
        dup2(fo, 1);
        dup2(fe, 2);
        if (o->cwd && chdir(o->cwd) != 0) _exit(126);
        if (o->as_limit) {
            struct rlimit rl = {(rlim_t)o->as_limit, (rlim_t)o->as_limit};
            if (setrlimit(RLIMIT_AS, &rl) != 0) _exit(126);
        }
        if (o->close_std) {
            close(fo);
            close(fe);
            close(0);
            close(1);
            close(2);
        }
        execv(exe, (char *const *)argv);
        _exit(127);
    }
    return pid;
}

int tts_wait_exit(pid_t pid) {
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return -1;
}

void tts_sleep_s(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

int tts_wait_for(const char *path, pid_t pid) {
    struct stat st;
    for (int i = 0; i < 12000; i++) {
        if (stat(path, &st) == 0) return 1;
        int status;
        if (waitpid(pid, &status, WNOHANG) == pid) return stat(path, &st) == 0;
        tts_sleep_s(0.01);
    }
    return 0;
}
