/* test_util.c: see test_util.h. */
#include "test_util.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "settings.h"

static int tu_passed, tu_failed, tu_case, tu_skipped;
static char tu_skip_reason[256];
static char tu_tmp[512];

void tu_rng_seed(tu_rng *r, uint64_t seed) {
    bt_rng_seed(r, seed);
}

uint64_t tu_rng_next(tu_rng *r) {
    return bt_rng_next(r);
}

double tu_rng_uniform(tu_rng *r, double lo, double hi) {
    return lo + (hi - lo) * bt_rng_uniform(r);
}

double tu_rng_normal(tu_rng *r) {
    double u1 = tu_rng_uniform(r, 1e-300, 1.0), u2 = tu_rng_uniform(r, 0.0, 1.0);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

void tu_fill_uniform_f32(tu_rng *r, float *x, size_t n, float lo, float hi) {
    for (size_t i = 0; i < n; i++) x[i] = (float)tu_rng_uniform(r, lo, hi);
}

void tu_fill_uniform_f64(tu_rng *r, double *x, size_t n, double lo, double hi) {
    for (size_t i = 0; i < n; i++) x[i] = tu_rng_uniform(r, lo, hi);
}

int tu_test_threads(int dflt) {
    const char *v = getenv("BT_TEST_THREADS");
    const int n = v ? atoi(v) : 0;
    return n > 0 ? n : dflt;
}

static void tu_record(int ok, const char *line) {
    tu_case++;
    if (ok) {
        tu_passed++;
        printf("ok %d - %s\n", tu_case, line);
    } else {
        tu_failed++;
        printf("not ok %d - %s\n", tu_case, line);
    }
    fflush(stdout);
}

int tu_check(int ok, const char *fmt, ...) {
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    tu_record(ok, line);
    return ok;
}

double tu_worst_ratio_f32(const float *got, const float *want, size_t n, double atol,
                          double rtol, size_t *worst) {
    double worst_ratio = 0.0;
    size_t wi = 0;
    for (size_t i = 0; i < n; i++) {
        double a = got[i], b = want[i];
        double tol = atol + rtol * fabs(b);
        double ratio = fabs(a - b) / (tol > 0 ? tol : 1e-300);
        if (isnan(a) != isnan(b) || isinf(a) != isinf(b) || isnan(ratio)) ratio = INFINITY;
        if (isnan(a) && isnan(b)) ratio = 0.0;
        if (ratio > worst_ratio || (i == 0)) {
            if (ratio > worst_ratio) worst_ratio = ratio;
            if (ratio >= worst_ratio) wi = i;
        }
    }
    if (worst) *worst = wi;
    return worst_ratio;
}

int tu_check_close_f32(const char *name, const float *got, const float *want, size_t n,
                       double atol, double rtol) {
    size_t wi = 0;
    double ratio = tu_worst_ratio_f32(got, want, n, atol, rtol, &wi);
    int ok = ratio <= 1.0;
    if (n == 0) return tu_check(1, "%s (empty)", name);
    return tu_check(ok, "%s: n=%zu worst[%zu] got=%.9g want=%.9g |diff|=%.3g (atol=%.1e rtol=%.1e, ratio %.3g)",
                    name, n, wi, (double)got[wi], (double)want[wi],
                    fabs((double)got[wi] - (double)want[wi]), atol, rtol, ratio);
}

int tu_check_close_f64(const char *name, const double *got, const double *want, size_t n,
                       double atol, double rtol) {
    double worst_ratio = 0.0;
    size_t wi = 0;
    for (size_t i = 0; i < n; i++) {
        double tol = atol + rtol * fabs(want[i]);
        double ratio = fabs(got[i] - want[i]) / (tol > 0 ? tol : 1e-300);
        if (isnan(ratio)) ratio = INFINITY;
        if (ratio > worst_ratio) {
            worst_ratio = ratio;
            wi = i;
        }
    }
    if (n == 0) return tu_check(1, "%s (empty)", name);
    return tu_check(worst_ratio <= 1.0,
                    "%s: n=%zu worst[%zu] got=%.12g want=%.12g (atol=%.1e rtol=%.1e, ratio %.3g)",
                    name, n, wi, got[wi], want[wi], atol, rtol, worst_ratio);
}

int tu_check_bytes_equal(const char *name, const void *got, const void *want, size_t bytes) {
    const unsigned char *a = got, *b = want;
    for (size_t i = 0; i < bytes; i++)
        if (a[i] != b[i]) return tu_check(0, "%s: first difference at byte %zu of %zu", name, i, bytes);
    return tu_check(1, "%s: %zu bytes identical", name, bytes);
}

float tu_sentinel_f32(void) {
    uint32_t u = 0x7fc0beefu;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

void tu_fill_sentinel_f32(float *x, size_t n) {
    float s = tu_sentinel_f32();
    for (size_t i = 0; i < n; i++) x[i] = s;
}

void tu_skip(const char *reason) {
    tu_skipped = 1;
    snprintf(tu_skip_reason, sizeof tu_skip_reason, "%s", reason);
}

static void tu_remove_tree(const char *path) {
    char cmd[1100];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    if (system(cmd) != 0) fprintf(stderr, "note: could not remove %s\n", path);
}

int tu_finish(void) {
    if (tu_skipped && tu_case == 0) {
        printf("SKIP: %s\n", tu_skip_reason);
        return 77;
    }
    printf("%d passed, %d failed\n", tu_passed, tu_failed);
    if (tu_failed == 0 && tu_tmp[0]) tu_remove_tree(tu_tmp);
    if (tu_case == 0) {
        printf("no test case ran\n");
        return 1;
    }
    return tu_failed ? 1 : 0;
}

const char *tu_fixture_path(const char *relative) {
    static char path[1024];
    const char *root = getenv("BT_FIXTURES");
    if (!root) root = BT_SOURCE_FIXTURES;
    snprintf(path, sizeof path, "%s/%s", root, relative);
    return path;
}

const char *tu_tmpdir(void) {
    if (!tu_tmp[0]) {
        const char *base = getenv("TMPDIR");
        snprintf(tu_tmp, sizeof tu_tmp, "%s/bt-test-XXXXXX", base ? base : "/tmp");
        if (!mkdtemp(tu_tmp)) {
            perror("mkdtemp");
            exit(1);
        }
    }
    return tu_tmp;
}

const char *tu_tmp_path(const char *name) {
    static char buf[8][1200];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tu_tmpdir(), name);
    return buf[k];
}

uint8_t *tu_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t n = 0, cap = 1 << 16;
    uint8_t *buf = malloc(cap + 1);
    for (size_t got; buf && (got = fread(buf + n, 1, cap - n, f)) > 0;) {
        n += got;
        if (n == cap) {
            uint8_t *nb = realloc(buf, (cap *= 2) + 1);
            if (!nb) free(buf);
            buf = nb;
        }
    }
    int err = ferror(f);
    fclose(f);
    if (!buf || err) {
        free(buf);
        return NULL;
    }
    buf[n] = 0;
    if (len) *len = n;
    return buf;
}

int tu_write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f) != 0) {
        perror(path);
        return 0;
    }
    return 1;
}

void tu_setup_file(const char *path, const void *data, size_t n) {
    if (!tu_write_file(path, data, n)) exit(1);
}

void tu_setup_text(const char *path, const char *text) {
    tu_setup_file(path, text, strlen(text));
}

int tu_files_equal(const char *a, const char *b) {
    size_t na = 0, nb = 0;
    uint8_t *x = tu_read_file(a, &na), *y = tu_read_file(b, &nb);
    int eq = x && y && na == nb && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return eq;
}

static void tu_read_into(const char *path, char *buf, size_t cap) {
    buf[0] = '\0';
    FILE *f = fopen(path, "rb");
    if (!f) return;
    size_t n = fread(buf, 1, cap - 1, f);
    buf[n] = '\0';
    fclose(f);
}

int tu_run_env_captured(char *out, size_t out_cap, char *err, size_t err_cap,
                        const char *args_fmt, ...) {
    va_list ap;
    va_start(ap, args_fmt);
    const int rc = tu_vrun_captured("/usr/bin/env", NULL, tu_tmpdir(), out, out_cap, err, err_cap,
                                    args_fmt, ap);
    va_end(ap);
    return rc;
}

int tu_vrun_captured(const char *exe, const char *stdin_path, const char *dir, char *out,
                     size_t out_cap, char *err, size_t err_cap, const char *args_fmt, va_list ap) {
    char args[4096], cmd[8192], p[1100];
    vsnprintf(args, sizeof args, args_fmt, ap);
    if (stdin_path)
        snprintf(cmd, sizeof cmd, "'%s' %s < '%s' > '%s/stdout.txt' 2> '%s/stderr.txt'", exe, args,
                 stdin_path, dir, dir);
    else
        snprintf(cmd, sizeof cmd, "'%s' %s > '%s/stdout.txt' 2> '%s/stderr.txt'", exe, args, dir,
                 dir);
    int status = system(cmd);
    snprintf(p, sizeof p, "%s/stdout.txt", dir);
    tu_read_into(p, out, out_cap);
    snprintf(p, sizeof p, "%s/stderr.txt", dir);
    tu_read_into(p, err, err_cap);
    if (status == -1 || !WIFEXITED(status)) return -1;
    return WEXITSTATUS(status);
}

static struct rlimit tu_as_old;
static int tu_as_capped;

int tu_cap_address_space(size_t headroom) {
    long pages = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%ld", &pages) != 1) pages = 0;
        fclose(f);
    }
    if (pages <= 0 || getrlimit(RLIMIT_AS, &tu_as_old) != 0) return 0;
    struct rlimit lim = tu_as_old;
    lim.rlim_cur = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + (rlim_t)headroom;
    tu_as_capped = setrlimit(RLIMIT_AS, &lim) == 0;
    return tu_as_capped;
}

void tu_uncap_address_space(void) {
    if (tu_as_capped) setrlimit(RLIMIT_AS, &tu_as_old);
    tu_as_capped = 0;
}

int tu_usage(const char *arg, const char *usage) {
    const int help = arg && (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0);
    fputs(usage, help ? stdout : stderr);
    return help ? 0 : 2;
}

double tu_clock_seconds(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int tu_setenv(const char *name, const char *value, int overwrite) {
    const int rc = setenv(name, value, overwrite);
    bt_settings_reload();
    return rc;
}

int tu_unsetenv(const char *name) {
    const int rc = unsetenv(name);
    bt_settings_reload();
    return rc;
}
