/* test_progress.c: the training log (src/train/log.c, progress.c) on inputs whose outputs
 * are known by construction.
 *
 * - AUTO mode: live on a pseudo-terminal (with its width), plain on a file or TERM=dumb.
 * - Plain mode (a file): one line per logged step (steps 10, 20 and the last, 25), no
 *   carriage return or escape sequence in the file.
 * - metrics.jsonl: the interval means (loss = step number, so the mean over steps 1..10 is
 *   5.5), lr and grad_norm of the interval's last step, samples/s and data-wait fraction from
 *   the given step times, an absent term (MLM off) absent, the eval record's values.
 * - TensorBoard: the same values under train/ and eval/ tags, read by tests/tb_reader.c.
 * - Live mode: the byte stream is replayed through a small terminal emulator (\r, \n,
 *   ESC[K, printable bytes): no screen line longer than columns - 1 (a wrapped status line
 *   cannot be redrawn), the warning sits alone on its line, the step lines are intact, and
 *   the status line is the last line on the screen.
 * - Resume: records after the resumed step and a record cut by the kill are dropped, the
 *   others kept byte for byte, new records appended.
 * - Summary: samples/s excludes the warm-up steps (made 100x slower here, so including them
 *   would show) and evaluation/checkpoint time; GFLOP/s from the given FLOPs per sample;
 *   summary.json holds the same numbers.
 * - Bad options and an output directory that cannot be created are errors. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "train/log.h"
#include "tb_reader.h"
#include "test_util.h"

enum { TOTAL = 25, LOGEVERY = 10, SAMPLES = 8 };

/* Step s: loss s, itc s/2, itm 1, mlm off; lr 1e-3/s; grad_norm 10+s; 8 samples in 0.5 s
 * with 0.1 s of data wait (16 samples/s, 20% wait). */
static void make_step(bt_log_step_rec *r, int64_t s) {
    bt_log_step_init(r);
    r->step = s;
    r->epoch = (double)s / 10.0;
    r->loss = (double)s;
    r->loss_itc = (double)s / 2;
    r->loss_itm = 1.0;
    r->lr = 1e-3 / (double)s;
    r->grad_norm = 10.0 + (double)s;
    r->samples = SAMPLES;
    r->step_s = 0.5;
    r->data_wait_s = 0.1;
    r->forward_s = 0.2;
}

static void make_eval(bt_log_eval_rec *e) {
    bt_log_eval_init(e);
    e->step = 20;
    e->epoch = 2.0;
    e->loss = 1.25;
    e->i2t_r1 = 0.5;
    e->i2t_r5 = 0.75;
    e->i2t_r10 = 1.0;
    e->t2i_r1 = 0.25;
    e->t2i_r5 = 0.5;
    e->t2i_r10 = 0.875;
    e->i2t_mean_rank = 3.5;
    e->t2i_mean_rank = 4.5;
    e->accuracy_5way = 0.8;
    e->samples = 64;
    e->seconds = 7.0;
}

static int starts_with(const char *s, const char *prefix) {
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

static int count_lines_with(const char *text, const char *needle) {
    int n = 0;
    for (const char *p = text; (p = strstr(p, needle)); p++)
        n++;
    return n;
}

static double num(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static int close_to(double a, double b) {
    return fabs(a - b) <= 1e-12 * fmax(1.0, fabs(b));
}

/* Parses every line of a JSON Lines file; returns the count (at most cap). */
static int read_jsonl(const char *path, cJSON **rec, int cap) {
    char *text = (char *)tu_read_file(path, NULL);
    if (!text) return -1;
    int n = 0;
    for (char *line = strtok(text, "\n"); line && n < cap; line = strtok(NULL, "\n"))
        rec[n++] = cJSON_Parse(line);
    free(text);
    return n;
}

static void run_plain(void) {
    char dir[4096], out_path[4200], err_path[4200], path[4300];
    snprintf(dir, sizeof dir, "%s/plain", tu_tmpdir());
    snprintf(out_path, sizeof out_path, "%s/out.txt", tu_tmpdir());
    snprintf(err_path, sizeof err_path, "%s/err.txt", tu_tmpdir());
    FILE *out = fopen(out_path, "w"), *err = fopen(err_path, "w");
    if (!tu_check(out && err, "open capture files")) return;
    /* an earlier run's event file in the directory: a fresh run removes it */
    char old_events[4300];
    snprintf(old_events, sizeof old_events, "%s/events.out.tfevents.1600000000.host.1", dir);
    if (mkdir(dir, 0755) == 0) tu_setup_text(old_events, "old");
    bt_log_opts o = bt_log_opts_default();
    o.out = out;
    o.err = err;
    o.mode = BT_PROGRESS_PLAIN;
    o.total_steps = TOTAL;
    o.logging_steps = LOGEVERY;
    o.throughput_warmup_steps = 2;
    o.run_config_text = "{\n\t\"train\": {\"lr\": 0.001}\n}";
    o.model_config_text = "{\"model_type\": \"bridgetower\"}";
    bt_log log;
    if (!tu_check(bt_log_open(&log, dir, &o) == BT_OK, "bt_log_open (plain): %s",
                  bt_error_message()))
        return;
    bt_log_step_rec r;
    for (int64_t s = 1; s <= TOTAL; s++) {
        make_step(&r, s);
        if (s <= 2) r.step_s = 50.0; /* warm-up steps: 100x slower */
        bt_log_step(&log, &r);
        if (s == 20) {
            bt_log_eval_rec e;
            make_eval(&e);
            bt_log_eval(&log, &e);
            bt_log_checkpoint(&log, 20, "out/checkpoint-20", 3.0);
            bt_log_message(&log, BT_LOG_WARN, "record 12 of train.jsonl skipped: bad image");
        }
    }
    bt_log_summary_in in = {.flops_per_sample = 2e9, .status = "completed"};
    bt_log_summary_out so;
    tu_check(bt_log_summary(&log, &in, &so) == BT_OK, "bt_log_summary: %s", bt_error_message());
    bt_log_close(&log);
    fclose(out);
    fclose(err);

    char *text = (char *)tu_read_file(out_path, NULL),
         *etext = (char *)tu_read_file(err_path, NULL);
    if (!tu_check(text && etext, "read the captured output")) return;
    int plain_ok =
        count_lines_with(text, "step 10/25 | epoch 1.00 | loss 5.5000 (itc 2.7500 itm 1.0000)") ==
            1 &&
        count_lines_with(text, "step 20/25") == 1 && count_lines_with(text, "step 25/25") == 2 &&
        count_lines_with(text, "/25 |") == 4 && !strchr(text, '\r') && !strchr(text, '\033');
    tu_check(plain_ok, "plain mode: one line per logged step (10, 20, 25; 25 again in the "
                       "summary), no control bytes");
    if (!plain_ok) printf("# output:\n%s", text);
    tu_check(access(old_events, F_OK) != 0 &&
                 strstr(text, "fresh run: removed 1 TensorBoard event file(s) of a previous run"),
             "a fresh run removed the earlier run's event file and said so");
    tu_check(strstr(text,
                    "eval step 20 | loss 1.2500 | i2t R@1/5/10 50.0/75.0/100.0 mean rank 3.50 "
                    "| t2i R@1/5/10 25.0/50.0/87.5 mean rank 4.50 | 5-way accuracy 80.0%") !=
                     NULL &&
                 strstr(text, "checkpoint step 20 saved to out/checkpoint-20 (3.0 s)") != NULL,
             "eval and checkpoint lines");
    tu_check(strcmp(etext, "warning: record 12 of train.jsonl skipped: bad image\n") == 0,
             "the warning goes to the error stream: '%s'", etext);

    /* metrics.jsonl */
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    cJSON *rec[16] = {0};
    int n = read_jsonl(path, rec, 16);
    if (tu_check(n == 4, "metrics.jsonl has 4 records (3 train, 1 eval): %d", n)) {
        static const struct { int64_t step, first; } iv[3] = {{10, 1}, {20, 11}, {25, 21}};
        int order[3] = {0, 1, 3}; /* the eval record comes right after step 20 */
        for (int k = 0; k < 3; k++) {
            const cJSON *t = rec[order[k]];
            double steps = (double)(iv[k].step - iv[k].first + 1);
            double mean = (iv[k].step + iv[k].first) / 2.0;
            /* seconds of the interval: 0.5 per step, 50 for each warm-up step */
            double secs = 0.5 * steps + (iv[k].first == 1 ? 2 * 49.5 : 0);
            const cJSON *type = cJSON_GetObjectItemCaseSensitive(t, "type");
            const cJSON *ph = cJSON_GetObjectItemCaseSensitive(t, "phase_s");
            int ok = cJSON_IsString(type) && strcmp(type->valuestring, "train") == 0 &&
                     num(t, "step") == (double)iv[k].step &&
                     close_to(num(t, "epoch"), iv[k].step / 10.0) &&
                     close_to(num(t, "loss"), mean) && close_to(num(t, "loss_itc"), mean / 2) &&
                     num(t, "loss_itm") == 1.0 && !cJSON_HasObjectItem(t, "loss_mlm") &&
                     close_to(num(t, "lr"), 1e-3 / (double)iv[k].step) &&
                     close_to(num(t, "grad_norm"), 10.0 + (double)iv[k].step) &&
                     close_to(num(t, "samples_per_s"), SAMPLES * steps / secs) &&
                     close_to(num(t, "data_wait"), 0.1 * steps / secs) &&
                     num(t, "steps") == steps && close_to(num(ph, "forward"), 0.2) &&
                     !cJSON_HasObjectItem(ph, "backward");
            char *js = cJSON_PrintUnformatted(t);
            tu_check(ok, "train record for steps %lld..%lld: %s", (long long)iv[k].first,
                     (long long)iv[k].step, js);
            free(js);
        }
        const cJSON *e = rec[2];
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(e, "type");
        tu_check(cJSON_IsString(type) && strcmp(type->valuestring, "eval") == 0 &&
                     num(e, "step") == 20 && num(e, "loss") == 1.25 && num(e, "i2t_r1") == 0.5 &&
                     num(e, "i2t_r5") == 0.75 && num(e, "i2t_r10") == 1.0 &&
                     num(e, "t2i_r1") == 0.25 && num(e, "t2i_r5") == 0.5 &&
                     num(e, "t2i_r10") == 0.875 && num(e, "i2t_mean_rank") == 3.5 &&
                     num(e, "t2i_mean_rank") == 4.5 && num(e, "accuracy_5way") == 0.8 &&
                     num(e, "samples") == 64,
                 "eval record values");
    }
    for (int i = 0; i < 16; i++)
        cJSON_Delete(rec[i]);

    /* summary: steps 3..25 measured (23 steps, 0.5 s each, 8 samples) */
    double sps = 23.0 * SAMPLES / (23 * 0.5);
    tu_check(so.measured_steps == 23 && so.measured_samples == 23 * SAMPLES &&
                 close_to(so.samples_per_s, sps) && close_to(so.gflops_per_s, 2e9 * sps / 1e9) &&
                 so.eval_s == 7.0 && so.save_s == 3.0 && so.steps_run == TOTAL &&
                 so.peak_rss_mib > 1.0,
             "summary: %.4f samples/s (want %.4f, warm-up excluded), %.2f GFLOP/s, eval %.1f s, "
             "save %.1f s, peak %.1f MiB",
             so.samples_per_s, sps, so.gflops_per_s, so.eval_s, so.save_s, so.peak_rss_mib);
    snprintf(path, sizeof path, "%s/summary.json", dir);
    char *sj = (char *)tu_read_file(path, NULL);
    cJSON *sum = sj ? cJSON_Parse(sj) : NULL;
    const cJSON *fe = cJSON_GetObjectItemCaseSensitive(sum, "final_eval");
    const cJSON *ft = cJSON_GetObjectItemCaseSensitive(sum, "final_train");
    tu_check(sum && close_to(num(sum, "samples_per_s"), sps) &&
                 close_to(num(sum, "gflops_per_s"), 2 * sps) && num(sum, "last_step") == TOTAL &&
                 num(fe, "accuracy_5way") == 0.8 && num(ft, "loss") == 23.0 &&
                 num(sum, "peak_rss_mib") > 1.0,
             "summary.json holds the summary, the last logged step and the last evaluation");
    cJSON_Delete(sum);
    free(sj);

    /* TensorBoard: the same interval means, read by the independent reader */
    snprintf(path, sizeof path, "%s", log.tb.path);
    tbr_event *ev;
    size_t nev;
    char rerr[512];
    if (tu_check(tbr_read_file(path, &ev, &nev, rerr, sizeof rerr) == 0, "event file reads: %s",
                 rerr)) {
        int found = 0, bad = 0;
        for (size_t i = 0; i < nev; i++) {
            if (ev[i].kind != TBR_SCALAR) continue;
            if (strcmp(ev[i].text, "train/loss") == 0) {
                found++;
                float want = ev[i].step == 10 ? 5.5f : ev[i].step == 20 ? 15.5f : 23.0f;
                bad += ev[i].value != want;
            } else if (strcmp(ev[i].text, "eval/t2i_recall@10") == 0) {
                found++;
                bad += ev[i].step != 20 || ev[i].value != 0.875f;
            } else if (strcmp(ev[i].text, "train/loss_mlm") == 0) {
                bad++; /* switched off: no curve */
            }
        }
        tu_check(found == 4 && bad == 0,
                 "TensorBoard: train/loss at 10, 20, 25 and "
                 "eval/t2i_recall@10 at 20 (%d found, %d wrong)",
                 found, bad);
        /* the run and model configs as text at step 0 (HF's args / model_config), each line
         * indented by 4 spaces (a Markdown code block, still JSON) */
        int texts = 0;
        for (size_t i = 0; i < nev; i++) {
            if (ev[i].kind != TBR_TEXT || ev[i].step != 0) continue;
            if (!strcmp(ev[i].text, "args/text_summary"))
                texts += !strcmp(ev[i].string, "    {\n    \t\"train\": {\"lr\": 0.001}\n    }");
            else if (!strcmp(ev[i].text, "model_config/text_summary"))
                texts += !strcmp(ev[i].string, "    {\"model_type\": \"bridgetower\"}");
        }
        tu_check(texts == 2, "TensorBoard: args/text_summary and model_config/text_summary "
                 "texts at step 0, as written (%d of 2)", texts);
        free(ev);
    }
    free(text);
    free(etext);
}

/* --- live mode through a terminal emulator ----------------------------------------------- */

enum { ROWS = 64, COLS = 60 };

/* A terminal with autowrap, as xterm and the Linux console behave: printing in the last
 * column moves to the next row. "\r" returns to the start of the current ROW, so a status
 * line that wrapped cannot be redrawn: seeing "\r" on a row reached by wrapping is exactly
 * the corruption the live line must avoid. */
typedef struct screen {
    char cell[ROWS][COLS + 1];
    int wrapped[ROWS]; /* the row continues the previous one */
    int row, col, bad_cr, bad_byte;
} screen;

static void screen_feed(screen *s, const char *p) {
    memset(s, 0, sizeof *s);
    for (; *p && s->row < ROWS; p++) {
        if (*p == '\r') {
            if (s->wrapped[s->row]) s->bad_cr = 1;
            s->col = 0;
        } else if (*p == '\n') {
            s->row++;
            s->col = 0;
        } else if (p[0] == '\033' && p[1] == '[' && p[2] == 'K') {
            for (int c = s->col; c < COLS; c++)
                s->cell[s->row][c] = 0;
            p += 2;
        } else if ((unsigned char)*p < 0x20 || *p == '\033') {
            s->bad_byte = 1; /* any other control byte is a bug */
        } else {
            if (s->col == COLS) {
                if (++s->row >= ROWS) return;
                s->wrapped[s->row] = 1;
                s->col = 0;
            }
            s->cell[s->row][s->col++] = *p;
        }
    }
}

/* The logical lines of the screen (wrapped rows joined) into lines[k] (cap bytes each). */
static int screen_lines(const screen *s, char lines[][512], int max) {
    int n = 0;
    for (int r = 0; r <= s->row && r < ROWS; r++) {
        if (!s->wrapped[r]) {
            if (n == max) break;
            lines[n++][0] = 0;
        }
        strncat(lines[n - 1], s->cell[r], 511 - strlen(lines[n - 1]));
    }
    while (n > 0 && lines[n - 1][0] == 0)
        n--;
    return n;
}

static void run_live(void) {
    char dir[4096], out_path[4200];
    snprintf(dir, sizeof dir, "%s/live", tu_tmpdir());
    snprintf(out_path, sizeof out_path, "%s/tty.txt", tu_tmpdir());
    FILE *out = fopen(out_path, "w");
    if (!tu_check(out != NULL, "open the terminal capture")) return;
    bt_log_opts o = bt_log_opts_default();
    o.out = o.err = out; /* stdout and stderr on the same terminal */
    o.mode = BT_PROGRESS_LIVE;
    o.columns = COLS;
    o.total_steps = TOTAL;
    o.logging_steps = LOGEVERY;
    o.min_redraw_s = 0;
    o.tensorboard = 0;
    bt_log log;
    if (!tu_check(bt_log_open(&log, dir, &o) == BT_OK, "bt_log_open (live): %s",
                  bt_error_message()))
        return;
    bt_log_step_rec r;
    for (int64_t s = 1; s <= 24; s++) {
        make_step(&r, s);
        bt_log_step(&log, &r);
        if (s == 15) bt_log_message(&log, BT_LOG_WARN, "disk almost full");
    }
    fflush(out); /* the run is "still going": the status line is on the screen */
    char *text = (char *)tu_read_file(out_path, NULL);
    if (!tu_check(text != NULL, "read the terminal capture")) return;
    screen sc;
    screen_feed(&sc, text);
    tu_check(!sc.bad_cr && !sc.bad_byte,
             "the status line never wraps (no \\r on a wrapped row), no stray control bytes");
    static char lines[ROWS][512];
    int n = screen_lines(&sc, lines, ROWS);
    /* Expected: the step-10 line, the warning, the step-20 line, the status line of step 24
     * (permanent lines may wrap: they end with a newline and are never redrawn). */
    tu_check(n == 4, "4 logical screen lines (2 logged steps, 1 warning, the status line): %d", n);
    if (n == 4) {
        tu_check(starts_with(lines[0],
                             "step 10/25 | epoch 1.00 | loss 5.5000 (itc 2.7500 itm 1.0000) |") &&
                     strstr(lines[0], "| ETA "),
                 "line 1 is the whole step-10 line: '%s'", lines[0]);
        tu_check(strcmp(lines[1], "warning: disk almost full") == 0,
                 "line 2 is the warning alone: '%s'", lines[1]);
        tu_check(starts_with(lines[2], "step 20/25 | epoch 2.00 | loss 15.5000") &&
                     strstr(lines[2], "| ETA "),
                 "line 3 is the whole step-20 line: '%s'", lines[2]);
        tu_check(starts_with(lines[3], "[ 96%] step 24/25 | epoch 2.40 | loss 22.5000") &&
                     strlen(lines[3]) == COLS - 1 && !sc.wrapped[sc.row],
                 "line 4 is the live line of step 24 (interval mean 22.5), cut to %d columns: '%s'",
                 COLS - 1, lines[3]);
    }
    bt_log_close(&log);
    fclose(out);
    free(text);
}

/* --- resume ---------------------------------------------------------------------------- */

static void run_resume(void) {
    char dir[4096], path[4200];
    snprintf(dir, sizeof dir, "%s/resume", tu_tmpdir());
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    const char *before = "{\"type\":\"train\",\"step\":10,\"loss\":5.5}\n"
                         "{\"type\":\"train\",\"step\":20,\"loss\":15.5}\n"
                         "{\"type\":\"eval\",\"step\":20,\"loss\":1.25}\n"
                         "{\"type\":\"train\",\"step\":30,\"loss\":25.5}\n"
                         "{\"type\":\"train\",\"step\":40,\"lo";
    tu_setup_text(path, before);
    bt_log_opts o = bt_log_opts_default();
    FILE *null_out = fopen("/dev/null", "w");
    o.out = o.err = null_out;
    o.mode = BT_PROGRESS_PLAIN;
    o.total_steps = 40;
    o.logging_steps = 10;
    o.resume_step = 20;
    bt_log log;
    if (!tu_check(bt_log_open(&log, dir, &o) == BT_OK, "bt_log_open (resume): %s",
                  bt_error_message()))
        return;
    bt_log_step_rec r;
    for (int64_t s = 21; s <= 30; s++) {
        make_step(&r, s);
        bt_log_step(&log, &r);
    }
    bt_log_close(&log);
    fclose(null_out);
    char *text = (char *)tu_read_file(path, NULL);
    const char *kept = "{\"type\":\"train\",\"step\":10,\"loss\":5.5}\n"
                       "{\"type\":\"train\",\"step\":20,\"loss\":15.5}\n"
                       "{\"type\":\"eval\",\"step\":20,\"loss\":1.25}\n"
                       "{\"type\":\"train\",\"step\":30,\"epoch\":3,\"loss\":25.5,";
    tu_check(text && strncmp(text, kept, strlen(kept)) == 0 && count_lines_with(text, "\n") == 4,
             "resume at step 20 keeps the records up to step 20, drops steps 30 and 40 (cut), "
             "appends the new step 30");
    if (text) printf("# metrics.jsonl after the resumed run:\n%s", text);
    free(text);
}

/* Steps whose update was skipped (non-finite loss): an interval with only such steps logs
 * its loss as null (not finite), says how many were skipped, and keeps absent terms absent. */
static void run_skipped(void) {
    char dir[4096], out_path[4200], path[4300];
    snprintf(dir, sizeof dir, "%s/skipped", tu_tmpdir());
    snprintf(out_path, sizeof out_path, "%s/skipped.txt", tu_tmpdir());
    FILE *out = fopen(out_path, "w");
    bt_log_opts o = bt_log_opts_default();
    o.out = o.err = out;
    o.mode = BT_PROGRESS_PLAIN;
    o.total_steps = 4;
    o.logging_steps = 2;
    o.tensorboard = 0;
    bt_log log;
    if (!out || !tu_check(bt_log_open(&log, dir, &o) == BT_OK, "bt_log_open (skipped): %s",
                          bt_error_message()))
        return;
    for (int64_t s = 1; s <= 4; s++) {
        bt_log_step_rec r;
        make_step(&r, s);
        if (s >= 3) {
            r.loss = r.loss_itc = NAN;
            r.skipped = 1;
        }
        bt_log_step(&log, &r);
    }
    bt_log_close(&log);
    fclose(out);
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    cJSON *rec[4] = {0};
    int n = read_jsonl(path, rec, 4);
    const cJSON *loss = n == 2 ? cJSON_GetObjectItemCaseSensitive(rec[1], "loss") : NULL;
    tu_check(n == 2 && cJSON_IsNull(loss) && num(rec[1], "skipped") == 2 &&
                 !cJSON_HasObjectItem(rec[1], "loss_mlm") && num(rec[1], "loss_itm") == 1.0 &&
                 !cJSON_HasObjectItem(rec[0], "skipped"),
             "an all-skipped interval: loss null, skipped 2, loss_mlm absent, loss_itm kept");
    for (int i = 0; i < 4; i++)
        cJSON_Delete(rec[i]);
    char *text = (char *)tu_read_file(out_path, NULL);
    tu_check(text && strstr(text, "step 4/4") && strstr(text, "2 step(s) skipped"),
             "the step line says the steps were skipped");
    free(text);
}

static void run_errors(void) {
    bt_log log;
    bt_log_opts o = bt_log_opts_default();
    o.total_steps = 0;
    bt_status s = bt_log_open(&log, tu_tmpdir(), &o);
    tu_check(s == BT_ERR_ARG && strstr(bt_error_message(), "total_steps (0)"),
             "total_steps 0 is refused: %s", bt_error_message());
    char file[4200], dir[4300];
    snprintf(file, sizeof file, "%s/a_file", tu_tmpdir());
    tu_setup_text(file, "x");
    snprintf(dir, sizeof dir, "%s/run", file);
    o.total_steps = 10;
    s = bt_log_open(&log, dir, &o);
    tu_check(s == BT_ERR_IO && strstr(bt_error_message(), dir) &&
                 strstr(bt_error_message(), "output directory"),
             "an output directory under a file is refused, naming it: %s", bt_error_message());
    /* metrics.jsonl that is not a regular file (here a directory) is not replaced */
    char odd[4300], odd_metrics[4400];
    snprintf(odd, sizeof odd, "%s/odd", tu_tmpdir());
    snprintf(odd_metrics, sizeof odd_metrics, "%s/metrics.jsonl", odd);
    if (mkdir(odd, 0755) == 0 && mkdir(odd_metrics, 0755) == 0) {
        o.tensorboard = 0;
        s = bt_log_open(&log, odd, &o);
        tu_check(s == BT_ERR_IO && strstr(bt_error_message(), odd_metrics),
                 "a metrics.jsonl that is a directory is refused: %s", bt_error_message());
        o.resume_step = 5;
        s = bt_log_open(&log, odd, &o);
        tu_check(s == BT_ERR_IO && strstr(bt_error_message(), odd_metrics),
                 "... also when resuming: %s", bt_error_message());
    }
}

/* AUTO mode: live on a terminal (a pseudo-terminal here), plain on a file or with TERM=dumb,
 * and the width taken from the terminal. */
static void run_auto(void) {
    int master = posix_openpt(O_RDWR | O_NOCTTY);
    if (!tu_check(master >= 0 && grantpt(master) == 0 && unlockpt(master) == 0,
                  "open a pseudo-terminal"))
        return;
    struct winsize ws = {.ws_row = 24, .ws_col = 77};
    FILE *tty = fopen(ptsname(master), "w");
    if (!tu_check(tty != NULL && ioctl(fileno(tty), TIOCSWINSZ, &ws) == 0, "open its slave side")) {
        close(master);
        return;
    }
    const char *term = getenv("TERM");
    char saved[256] = "";
    if (term) snprintf(saved, sizeof saved, "%s", term);
    tu_setenv("TERM", "xterm", 1);
    bt_progress p;
    bt_progress_init(&p, tty, BT_PROGRESS_AUTO, 0);
    tu_check(p.live == 1 && p.columns == 77, "AUTO on a terminal: live %d, %d columns (want 77)",
             p.live, p.columns);
    tu_setenv("TERM", "dumb", 1);
    bt_progress_init(&p, tty, BT_PROGRESS_AUTO, 0);
    tu_check(p.live == 0, "AUTO on a terminal with TERM=dumb: plain");
    if (term)
        tu_setenv("TERM", saved, 1);
    else
        tu_unsetenv("TERM");
    FILE *file = tmpfile();
    bt_progress_init(&p, file, BT_PROGRESS_AUTO, 0);
    tu_check(p.live == 0, "AUTO on a file: plain");
    fclose(file);
    fclose(tty);
    close(master);
}

int main(void) {
    run_auto();
    run_plain();
    run_live();
    run_resume();
    run_skipped();
    run_errors();
    return tu_finish();
}
