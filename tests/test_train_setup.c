/* test_train_setup.c: the synthetic data set and model path the bt-train tests share
 * (test_train_setup.h). */
#include "test_train_setup.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "data/synth.h"
#include "safetensors.h"
#include "status.h"
#include "test_util.h"

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

int tts_sh(const char *out, const char *fmt, ...) {
    char cmd[6000], line[7000];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    snprintf(line, sizeof line, "%s > '%s.log' 2> '%s.err'", cmd, out, out);
    const int st = system(line);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

void tts_show_err(const char *out) {
    char p[1200];
    snprintf(p, sizeof p, "%s.err", out);
    char *e = (char *)tu_read_file(p, NULL);
    fprintf(stderr, "--- %s ---\n%s\n", p, e ? e : "");
    free(e);
}

size_t tts_logged(const char *out, const char *key, double *l, size_t cap) {
    char p[1200];
    snprintf(p, sizeof p, "%s/metrics.jsonl", out);
    char *text = (char *)tu_read_file(p, NULL);
    size_t n = 0;
    for (char *line = text ? strtok(text, "\n") : NULL; line; line = strtok(NULL, "\n")) {
        cJSON *j = cJSON_Parse(line);
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(j, "type");
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
        const cJSON *step = cJSON_GetObjectItemCaseSensitive(j, "step");
        if (cJSON_IsString(type) && !strcmp(type->valuestring, "train") && cJSON_IsNumber(v) &&
            cJSON_IsNumber(step) && step->valuedouble >= 1 && step->valuedouble <= (double)cap) {
            l[(size_t)step->valuedouble - 1] = v->valuedouble;
            n++;
        }
        cJSON_Delete(j);
    }
    free(text);
    return n;
}

double tts_max_weight_diff(const char *a_path, const char *b_path) {
    safetensors_file a, b;
    if (safetensors_open(&a, a_path) != BT_OK) return -1;
    if (safetensors_open(&b, b_path) != BT_OK) {
        safetensors_close(&a);
        return -1;
    }
    double worst = a.n_tensors == b.n_tensors && a.n_tensors > 0 ? 0 : -1;
    for (size_t i = 0; i < a.n_tensors && worst >= 0; i++) {
        const safetensors_tensor *ta = &a.tensors[i], *tb = safetensors_find(&b, ta->name);
        if (!tb || tb->numel != ta->numel) {
            worst = -1;
        } else if (ta->dtype != BT_DTYPE_F32) { /* integer buffers: equal bytes */
            if (tb->dtype != ta->dtype || tb->end - tb->begin != ta->end - ta->begin ||
                memcmp(ta->data, tb->data, ta->end - ta->begin))
                worst = -1;
        } else {
            float *x = malloc(ta->numel * sizeof *x), *y = malloc(ta->numel * sizeof *y);
            if (!x || !y || safetensors_read_f32(&a, ta, x, ta->numel) != BT_OK ||
                safetensors_read_f32(&b, tb, y, tb->numel) != BT_OK)
                worst = -1;
            for (size_t k = 0; worst >= 0 && k < ta->numel; k++) {
                const double d = fabs((double)x[k] - (double)y[k]);
                if (!(d <= worst)) worst = d; /* NaN propagates as a failure */
            }
            free(x);
            free(y);
        }
    }
    safetensors_close(&a);
    safetensors_close(&b);
    return worst;
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
