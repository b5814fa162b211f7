/* fuzz_metrics_log.c: libFuzzer target for what bt reads back of a run's own logs, which a
 * killed run may have left cut or corrupt: metrics.jsonl when a run resumes (bt_log_open
 * keeps the records up to the checkpoint's step, src/train/log.h), and metrics.jsonl with
 * summary.json when report.html is written (bt-report, src/train/report.h).
 *
 * Input: byte 0 picks the resume step (1 to 64) and whether that step's evaluation is
 * redone; then metrics.jsonl up to the first NUL byte; then summary.json (none when there is
 * no NUL byte).
 *
 * Properties:
 *   - a resume never fails on the log's content, and leaves only whole JSON objects with a
 *     numeric "step" at most the resume step (none of them an "eval" record of that step when
 *     it is redone); resuming again at the same step changes nothing;
 *   - the report is written or refused with a message naming a file of the directory; a
 *     written page holds no markup from the input (no "<script", whatever the strings). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "fileio.h"
#include "fuzz_util.h"
#include "json_util.h"
#include "status.h"
#include "train/log.h"
#include "train/report.h"

static char fuzz_dir[256];
static char metrics_path[300], summary_path[300], report_path[300];

static void remove_fuzz_dir(void) {
    unlink(metrics_path);
    unlink(summary_path);
    unlink(report_path);
    rmdir(fuzz_dir);
}

/* One output directory per process (fuzz_temp_dir), made once. */
static void make_fuzz_dir(void) {
    if (fuzz_dir[0]) return;
    snprintf(fuzz_dir, sizeof fuzz_dir, "%s/bt-fuzz-log-XXXXXX", fuzz_temp_dir());
    FUZZ_CHECK(mkdtemp(fuzz_dir) != NULL);
    snprintf(metrics_path, sizeof metrics_path, "%s/metrics.jsonl", fuzz_dir);
    snprintf(summary_path, sizeof summary_path, "%s/summary.json", fuzz_dir);
    snprintf(report_path, sizeof report_path, "%s/report.html", fuzz_dir);
    atexit(remove_fuzz_dir);
}

/* The file bt wrote, whole (bt_json_read_text: NUL-terminated; bt writes no NUL byte). */
static char *read_all(const char *path, size_t *n) {
    char *text = NULL;
    FUZZ_CHECK(bt_json_read_text(path, "fuzz output", &text) == BT_OK);
    *n = strlen(text);
    return text;
}

/* bt_log_open as a resumed run calls it (no TensorBoard, the progress line discarded). */
static void resume_at(int64_t step, int redo_eval, FILE *sink) {
    bt_log_opts o = bt_log_opts_default();
    o.out = o.err = sink;
    o.mode = BT_PROGRESS_PLAIN;
    o.total_steps = 64;
    o.logging_steps = 1;
    o.resume_step = step;
    o.redo_eval_at_resume = redo_eval;
    o.tensorboard = 0;
    bt_log log;
    bt_status st = bt_log_open(&log, fuzz_dir, &o);
    if (st != BT_OK) fprintf(stderr, "fuzz: %s\n", bt_error_message());
    FUZZ_CHECK(st == BT_OK);
    bt_log_close(&log);
}

/* Every line kept is a whole record of a step the resumed run has already taken. */
static void check_kept(const char *text, size_t n, int64_t step, int redo_eval) {
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j < n && text[j] != '\n') j++;
        FUZZ_CHECK(j < n);   /* every kept line ends with '\n' */
        FUZZ_CHECK(j > i);   /* and is not empty */
        cJSON *rec = NULL;
        FUZZ_CHECK(bt_json_parse(text + i, j - i, "fuzz/kept-line", &rec) == BT_OK);
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(rec, "step");
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(rec, "type");
        FUZZ_CHECK(cJSON_IsObject(rec) && cJSON_IsNumber(s) && s->valuedouble <= (double)step);
        FUZZ_CHECK(!(redo_eval && s->valuedouble == (double)step && cJSON_IsString(type) &&
                     !strcmp(type->valuestring, "eval")));
        cJSON_Delete(rec);
        i = j + 1;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    make_fuzz_dir();
    static FILE *sink;
    if (!sink) sink = fopen("/dev/null", "w");
    FUZZ_CHECK(sink != NULL);
    const int64_t step = 1 + (data[0] & 63);
    const int redo_eval = (data[0] >> 6) & 1;
    const uint8_t *log_bytes = data + 1;
    const uint8_t *nul = memchr(log_bytes, 0, size - 1);
    const size_t log_n = nul ? (size_t)(nul - log_bytes) : size - 1;
    fuzz_write_file(metrics_path, log_bytes, log_n);
    unlink(summary_path);
    if (nul) fuzz_write_file(summary_path, nul + 1, size - 1 - log_n - 1);

    resume_at(step, redo_eval, sink);
    size_t n1, n2;
    char *kept = read_all(metrics_path, &n1);
    check_kept(kept, n1, step, redo_eval);
    resume_at(step, redo_eval, sink);
    char *again = read_all(metrics_path, &n2);
    FUZZ_CHECK(n1 == n2 && memcmp(kept, again, n1) == 0);
    free(again);
    free(kept);

    unlink(report_path);
    if (bt_report_write(fuzz_dir, NULL) == BT_OK) {
        size_t n;
        char *page = read_all(report_path, &n);
        FUZZ_CHECK(strstr(page, "<script") == NULL);
        free(page);
    } else {
        FUZZ_CHECK(strstr(bt_error_message(), fuzz_dir) != NULL);
    }
    bt_error_clear();
    return 0;
}
