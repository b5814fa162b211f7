/* test_util.h: the harness every test binary uses.
 *
 * - tu_check_close(): |a-b| <= atol + rtol*|b| elementwise (b is the reference), prints the
 *   worst element with its index and the tensor name, counts the case as passed or failed.
 * - tu_check(): a boolean case with a printf-style description.
 * - tu_finish(): prints "N passed, N failed" and returns the exit status (0 only when
 *   nothing failed and at least one case ran; 77 = skipped when tu_skip() was called).
 * - Random inputs come from tu_rng (splitmix64/xoshiro), seeded per test, so failures
 *   reproduce.
 * Each case prints "ok N - name" / "not ok N - name (...)" (TAP-like, readable in logs). */
#ifndef BT_TEST_UTIL_H
#define BT_TEST_UTIL_H

#include <stddef.h>
#include <stdint.h>

typedef struct tu_rng {
    uint64_t s[4];
} tu_rng;

void tu_rng_seed(tu_rng *r, uint64_t seed);
uint64_t tu_rng_next(tu_rng *r);
/* Uniform in [lo, hi). */
double tu_rng_uniform(tu_rng *r, double lo, double hi);
/* Standard normal (Box-Muller). */
double tu_rng_normal(tu_rng *r);
void tu_fill_uniform_f32(tu_rng *r, float *x, size_t n, float lo, float hi);
void tu_fill_uniform_f64(tu_rng *r, double *x, size_t n, double lo, double hi);

/* Records one passed/failed case and prints its line. Returns ok. */
int tu_check(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Compares got against the reference want. Returns 1 when every element passes. */
int tu_check_close_f32(const char *name, const float *got, const float *want, size_t n,
                       double atol, double rtol);
int tu_check_close_f64(const char *name, const double *got, const double *want, size_t n,
                       double atol, double rtol);
/* Largest |a-b| / (atol + rtol*|b|) over n elements (<= 1 passes); index of the worst. */
double tu_worst_ratio_f32(const float *got, const float *want, size_t n, double atol,
                          double rtol, size_t *worst);

/* Bitwise comparison of two buffers. */
int tu_check_bytes_equal(const char *name, const void *got, const void *want, size_t bytes);

/* A NaN with a recognizable payload used to pre-fill outputs: any element a kernel forgot to
 * write stays NaN and fails every comparison. */
float tu_sentinel_f32(void);
void tu_fill_sentinel_f32(float *x, size_t n);

/* Marks the whole binary as skipped (exit 77) with a reason, e.g. a missing backend. */
void tu_skip(const char *reason);

/* Prints "N passed, N failed" and returns the process exit status. */
int tu_finish(void);

/* Path of a file under tests/fixtures (env BT_FIXTURES set by meson, else the source tree
 * path compiled in); static buffer. */
const char *tu_fixture_path(const char *relative);
/* A fresh temporary directory for the test (removed by tu_finish when the test passed). */
const char *tu_tmpdir(void);

#endif
