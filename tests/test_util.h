/* test_util.h: the harness every test binary uses.
 *
 * - tu_check_close(): |a-b| <= atol + rtol*|b| elementwise (b is the reference), prints the
 *   worst element with its index and the tensor name, counts the case as passed or failed.
 * - tu_check(): a boolean case with a printf-style description.
 * - tu_finish(): prints "N passed, N failed" and returns the exit status (0 only when
 *   nothing failed and at least one case ran; 77 = skipped when tu_skip() was called).
 * - Random inputs come from tu_rng (bt's splitmix64-seeded xoshiro256**, src/rng.h), seeded
 *   per test, so failures reproduce.
 * - Files and child processes: whole-file read/write, byte comparison, running a command with
 *   its output captured (tests of the command-line tools).
 * Each case prints "ok N - name" / "not ok N - name (...)" (TAP-like, readable in logs).
 * Fixture tensors and JPEG pictures made on the fly live in test_fixture.h. */
#ifndef BT_TEST_UTIL_H
#define BT_TEST_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "rng.h"

/* The tests' generator is bt's own (src/rng.h): tu_rng_next is bt_rng_next. */
typedef bt_rng tu_rng;

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

/* The thread count a test pins in its run configs (train.threads): BT_TEST_THREADS when it is
 * set to a positive integer (the perturbation setups threads_1 / threads_3 of tests/meson.build
 * set it), else dflt. */
int tu_test_threads(int dflt);

/* setenv / unsetenv, then bt_settings_reload (src/settings.h): bt reads its environment once,
 * so a test that changes a variable in-process takes a new snapshot. */
int tu_setenv(const char *name, const char *value, int overwrite);
int tu_unsetenv(const char *name);

/* Marks the whole binary as skipped (exit 77) with a reason, e.g. a missing backend. */
void tu_skip(const char *reason);

/* Prints "N passed, N failed" and returns the process exit status. */
int tu_finish(void);

/* --- files and child processes (shared by the tests that build inputs on disk) --------- */

/* The whole file, NUL-terminated one byte past *len (so text files are C strings); *len may
 * be NULL. NULL when the file cannot be opened or read. Free with free(). */
uint8_t *tu_read_file(const char *path, size_t *len);
/* Writes n bytes to path (created or truncated). Returns 1, or prints "PATH: REASON" to
 * stderr and returns 0. */
int tu_write_file(const char *path, const void *data, size_t n);
/* tu_write_file for inputs a test cannot go on without: exits 1 on failure. */
void tu_setup_file(const char *path, const void *data, size_t n);
void tu_setup_text(const char *path, const char *text);
/* 1 when both files can be read and hold the same bytes. */
int tu_files_equal(const char *a, const char *b);
/* Runs "'exe' ARGS" through the shell, ARGS being shell text formatted from args_fmt and ap
 * (cut at 4095 bytes), with stdin from stdin_path (NULL: inherited) and stdout and stderr
 * captured in <dir>/stdout.txt and <dir>/stderr.txt, then copied (NUL-terminated, cut to
 * cap - 1 bytes; "" when unreadable) into out and err. Returns the exit code, -1 when the
 * command did not exit normally (a crash). For the tests of the command-line tools. */
int tu_vrun_captured(const char *exe, const char *stdin_path, const char *dir, char *out,
                     size_t out_cap, char *err, size_t err_cap, const char *args_fmt, va_list ap);
/* tu_vrun_captured of "/usr/bin/env ARGS" in tu_tmpdir(), stdin inherited: a tool run under
 * an environment of its own (ARGS: "VAR=value ... -u VAR ... 'exe' args"). */
int tu_run_env_captured(char *out, size_t out_cap, char *err, size_t err_cap,
                        const char *args_fmt, ...);
/* clock_gettime(id) in seconds (benchmarks: CLOCK_MONOTONIC for wall time,
 * CLOCK_PROCESS_CPUTIME_ID for CPU time). */
double tu_clock_seconds(clockid_t id);
/* A benchmark's answer to an argument it does not take: `usage` on stdout and 0 when the
 * argument is --help or -h, else on stderr and 2 (the exit status; a misspelt option never
 * runs another benchmark than the one asked for). */
int tu_usage(const char *arg, const char *usage);
/* Out-of-memory tests: caps this process's address space (RLIMIT_AS) at its current size
 * (/proc/self/statm) + headroom bytes, so the next large allocation fails. Returns 1 when
 * capped; tu_uncap_address_space() restores the limit. Not usable under ASan (it reserves
 * terabytes of address space itself). */
int tu_cap_address_space(size_t headroom);
void tu_uncap_address_space(void);

/* Path of a file under tests/fixtures (env BT_FIXTURES set by meson, else the source tree
 * path compiled in); static buffer. */
const char *tu_fixture_path(const char *relative);
/* A fresh temporary directory for the test (removed by tu_finish when the test passed). */
const char *tu_tmpdir(void);
/* <tu_tmpdir()>/name in one of 8 rotating static buffers (valid for the next 7 calls). */
const char *tu_tmp_path(const char *name);

#endif
