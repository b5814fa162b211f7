/* log.c: the training log (see log.h): cadence, interval means, the metrics.jsonl records,
 * TensorBoard scalars, the terminal lines and the end-of-run summary.
 *
 * Deliberately not here: terminal drawing (progress.c), event-file encoding
 * (tensorboard.c), HTML (report.c). */
#include "train/log.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "fileio.h"
#include "json_util.h"

const bt_log_field bt_log_fields[BT_LOG_N_FIELDS] = {
    [BT_LF_EPOCH] = {"train", "epoch", "train/epoch"},
    [BT_LF_LOSS] = {"train", "loss", "train/loss"},
    [BT_LF_LOSS_ITC] = {"train", "loss_itc", "train/loss_itc"},
    [BT_LF_LOSS_ITM] = {"train", "loss_itm", "train/loss_itm"},
    [BT_LF_LOSS_MLM] = {"train", "loss_mlm", "train/loss_mlm"},
    [BT_LF_LR] = {"train", "lr", "train/learning_rate"},
    [BT_LF_GRAD_NORM] = {"train", "grad_norm", "train/grad_norm"},
    [BT_LF_SAMPLES_PER_S] = {"train", "samples_per_s", "train/samples_per_second"},
    [BT_LF_DATA_WAIT] = {"train", "data_wait", "train/data_wait"},
    [BT_LF_EVAL_EPOCH] = {"eval", "epoch", NULL},
    [BT_LF_EVAL_LOSS] = {"eval", "loss", "eval/loss"},
    [BT_LF_I2T_R1] = {"eval", "i2t_r1", "eval/i2t_recall@1"},
    [BT_LF_I2T_R5] = {"eval", "i2t_r5", "eval/i2t_recall@5"},
    [BT_LF_I2T_R10] = {"eval", "i2t_r10", "eval/i2t_recall@10"},
    [BT_LF_T2I_R1] = {"eval", "t2i_r1", "eval/t2i_recall@1"},
    [BT_LF_T2I_R5] = {"eval", "t2i_r5", "eval/t2i_recall@5"},
    [BT_LF_T2I_R10] = {"eval", "t2i_r10", "eval/t2i_recall@10"},
    [BT_LF_I2T_MEAN_RANK] = {"eval", "i2t_mean_rank", "eval/i2t_mean_rank"},
    [BT_LF_T2I_MEAN_RANK] = {"eval", "t2i_mean_rank", "eval/t2i_mean_rank"},
    [BT_LF_ACCURACY_5WAY] = {"eval", "accuracy_5way", "eval/accuracy_5way"},
};

/* Loss slots and phase slots of the interval accumulators. */
enum { L_TOTAL, L_ITC, L_ITM, L_MLM, N_LOSS };
static const char *const loss_short[N_LOSS] = {"loss", "itc", "itm", "mlm"};
enum { N_PHASE = 7 };
static const char *const phase_keys[N_PHASE] = {"forward", "backward",  "comm",        "optim",
                                                "gemm",    "attention", "memory_bound"};
static const size_t phase_offset[N_PHASE] = {
    offsetof(bt_log_step_rec, forward_s), offsetof(bt_log_step_rec, backward_s),
    offsetof(bt_log_step_rec, comm_s),    offsetof(bt_log_step_rec, optim_s),
    offsetof(bt_log_step_rec, gemm_s),    offsetof(bt_log_step_rec, attention_s),
    offsetof(bt_log_step_rec, memory_s)};

_Static_assert(sizeof(((bt_log_interval *)0)->phase_sum) == N_PHASE * sizeof(double),
               "log.h bt_log_interval.phase_sum has one slot per phase");

/* The record's k-th phase seconds (phase_keys[k]). */
static double *phase_of(bt_log_step_rec *r, int k) {
    return (double *)(void *)((char *)r + phase_offset[k]);
}
static double phase_value(const bt_log_step_rec *r, int k) {
    return *(const double *)(const void *)((const char *)r + phase_offset[k]);
}

static double now_wall(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

bt_log_opts bt_log_opts_default(void) {
    bt_log_opts o;
    memset(&o, 0, sizeof o);
    o.mode = BT_PROGRESS_AUTO;
    o.logging_steps = 500;
    o.tensorboard = 1;
    o.min_redraw_s = 0.1;
    return o;
}

void bt_log_step_init(bt_log_step_rec *r) {
    memset(r, 0, sizeof *r);
    r->epoch = r->loss = r->loss_itc = r->loss_itm = r->loss_mlm = NAN;
    r->lr = r->grad_norm = r->step_s = r->data_wait_s = NAN;
    for (int k = 0; k < N_PHASE; k++) *phase_of(r, k) = NAN;
}

void bt_log_eval_init(bt_log_eval_rec *r) {
    memset(r, 0, sizeof *r);
    r->epoch = r->loss = NAN;
    r->i2t_r1 = r->i2t_r5 = r->i2t_r10 = r->t2i_r1 = r->t2i_r5 = r->t2i_r10 = NAN;
    r->i2t_mean_rank = r->t2i_mean_rank = r->accuracy_5way = r->seconds = NAN;
}

/* --- files ---------------------------------------------------------------------------- */

/* Rewrites metrics.jsonl keeping the records with step <= keep_step (see log.h). A missing
 * file is fine (nothing to keep). *kept / *dropped count the lines. */
static bt_status metrics_truncate(const char *path, int64_t keep_step, int redo_eval, int *kept,
                                  int *dropped) {
    *kept = *dropped = 0;
    struct stat st;
    if (stat(path, &st) != 0 && errno == ENOENT) return BT_OK;
    FILE *f;
    bt_status os = bt_fopen_regular(path, "metrics log", &f);
    if (os != BT_OK) return os;
    char *text = NULL, *out = NULL;
    size_t len = 0, cap = 0;
    char buf[65536];
    size_t got;
    while ((got = fread(buf, 1, sizeof buf, f)) > 0) {
        if (len + got + 1 > cap) {
            cap = 2 * (len + got + 1);
            char *t = realloc(text, cap);
            if (!t) {
                free(text);
                fclose(f);
                return bt_fail(BT_ERR_NOMEM, "%s: out of memory reading it", path);
            }
            text = t;
        }
        memcpy(text + len, buf, got);
        len += got;
    }
    int rerr = ferror(f);
    fclose(f);
    if (rerr) {
        free(text);
        return bt_fail(BT_ERR_IO, "%s: read error", path);
    }
    out = malloc(len + 1);
    if (!out) {
        free(text);
        return bt_fail(BT_ERR_NOMEM, "%s: out of memory rewriting it", path);
    }
    size_t n_out = 0;
    for (size_t i = 0; i < len;) {
        size_t j = i;
        while (j < len && text[j] != '\n')
            j++;
        int complete = j < len; /* a last line without '\n' was cut by the kill */
        if (j > i) {
            cJSON *rec = NULL;
            /* bt's one JSON rule; a line it refuses (cut, NUL bytes after a crash) is dropped */
            if (complete && bt_json_parse(text + i, j - i, path, &rec) != BT_OK) bt_error_clear();
            const cJSON *step = cJSON_GetObjectItemCaseSensitive(rec, "step");
            const cJSON *type = cJSON_GetObjectItemCaseSensitive(rec, "type");
            const int redone = redo_eval && cJSON_IsNumber(step) &&
                               step->valuedouble == (double)keep_step && cJSON_IsString(type) &&
                               !strcmp(type->valuestring, "eval");
            if (cJSON_IsObject(rec) && cJSON_IsNumber(step) &&
                step->valuedouble <= (double)keep_step && !redone) {
                memcpy(out + n_out, text + i, j - i);
                n_out += j - i;
                out[n_out++] = '\n';
                (*kept)++;
            } else {
                (*dropped)++;
            }
            cJSON_Delete(rec);
        }
        i = j + 1;
    }
    free(text);
    bt_status s = bt_write_file_atomic(path, "metrics log", out, n_out);
    free(out);
    return s;
}

static void metrics_write(bt_log *log, cJSON *rec) {
    if (!log->metrics) return;
    char *line = cJSON_PrintUnformatted(rec);
    int ok = line && fputs(line, log->metrics) >= 0 && fputc('\n', log->metrics) != EOF &&
             fflush(log->metrics) == 0;
    free(line);
    if (!ok) {
        bt_log_message(log, BT_LOG_WARN, "%s: cannot write: %s; metrics.jsonl is off from now on",
                       log->metrics_path, strerror(errno ? errno : EIO));
        fclose(log->metrics);
        log->metrics = NULL;
    }
}

static void tb_scalar(bt_log *log, const char *tag, int64_t step, double v, double wall) {
    if (!log->tb_on || isnan(v)) return;
    if (bt_tb_add_scalar(&log->tb, tag, step, v, wall) != BT_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", bt_error_message());
        bt_tb_close(&log->tb);
        log->tb_on = 0;
        bt_log_message(log, BT_LOG_WARN, "%s; TensorBoard logging is off from now on", msg);
    }
}

/* Adds key: v when v is not NaN (absent); a non-finite value becomes null (cJSON prints
 * NaN and Inf as null, as JSON has neither). */
static void add_num(cJSON *o, const char *key, double v) {
    if (!isnan(v)) cJSON_AddNumberToObject(o, key, v);
}

/* The table's train values of an interval (v: BT_LOG_N_FIELDS, NaN where absent). */
static void train_values(const bt_log_step_rec *m, double sps, double wait, double *v) {
    for (int f = 0; f < BT_LOG_N_FIELDS; f++)
        v[f] = NAN;
    v[BT_LF_EPOCH] = m->epoch;
    v[BT_LF_LOSS] = m->loss;
    v[BT_LF_LOSS_ITC] = m->loss_itc;
    v[BT_LF_LOSS_ITM] = m->loss_itm;
    v[BT_LF_LOSS_MLM] = m->loss_mlm;
    v[BT_LF_LR] = m->lr;
    v[BT_LF_GRAD_NORM] = m->grad_norm;
    v[BT_LF_SAMPLES_PER_S] = sps;
    v[BT_LF_DATA_WAIT] = wait;
}

static void eval_values(const bt_log_eval_rec *r, double *v) {
    for (int f = 0; f < BT_LOG_N_FIELDS; f++)
        v[f] = NAN;
    v[BT_LF_EVAL_EPOCH] = r->epoch;
    v[BT_LF_EVAL_LOSS] = r->loss;
    v[BT_LF_I2T_R1] = r->i2t_r1;
    v[BT_LF_I2T_R5] = r->i2t_r5;
    v[BT_LF_I2T_R10] = r->i2t_r10;
    v[BT_LF_T2I_R1] = r->t2i_r1;
    v[BT_LF_T2I_R5] = r->t2i_r5;
    v[BT_LF_T2I_R10] = r->t2i_r10;
    v[BT_LF_I2T_MEAN_RANK] = r->i2t_mean_rank;
    v[BT_LF_T2I_MEAN_RANK] = r->t2i_mean_rank;
    v[BT_LF_ACCURACY_5WAY] = r->accuracy_5way;
}

/* "step" then every field of `type` into o (when o is not NULL), and the tagged ones to
 * TensorBoard (when log is not NULL). */
static void put_fields(bt_log *log, cJSON *o, const char *type, int64_t step, const double *v,
                       double wall) {
    if (o) cJSON_AddNumberToObject(o, "step", (double)step);
    for (int f = 0; f < BT_LOG_N_FIELDS; f++) {
        if (strcmp(bt_log_fields[f].type, type) != 0) continue;
        if (o) add_num(o, bt_log_fields[f].key, v[f]);
        if (log && bt_log_fields[f].tag) tb_scalar(log, bt_log_fields[f].tag, step, v[f], wall);
    }
}

/* --- open / close --------------------------------------------------------------------- */

/* A fresh run replaces metrics.jsonl; its TensorBoard curves must not be mixed with those
 * of an earlier run in the same directory either (TensorBoard merges every event file of a
 * directory), so the earlier event files go. Returns how many were removed. */
static int remove_old_events(const char *dir) {
    static const char prefix[] = "events.out.tfevents.";
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    char path[8192];
    while ((e = readdir(d)))
        if (strncmp(e->d_name, prefix, sizeof prefix - 1) == 0) {
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            n += unlink(path) == 0;
        }
    closedir(d);
    return n;
}

/* text indented by 4 spaces (a Markdown code block: TensorBoard shows JSON as written, and
 * the text stays JSON), as one text event at step 0 */
static bt_status add_tb_text(bt_tb_writer *tb, const char *tag, const char *text) {
    size_t lines = 1;
    for (const char *c = text; *c; c++) lines += *c == '\n';
    char *md = malloc(strlen(text) + 4 * lines + 1), *o = md;
    if (!md) return bt_fail(BT_ERR_NOMEM, "out of memory for the TensorBoard text %s", tag);
    for (const char *c = text, *line = text;; c++) {
        if (*c == '\n' || !*c) {
            if (c > line) o += sprintf(o, "    %.*s", (int)(c - line), line);
            if (!*c) break;
            *o++ = '\n';
            line = c + 1;
        }
    }
    *o = '\0';
    bt_status s = bt_tb_add_text(tb, tag, 0, md, now_wall());
    free(md);
    return s;
}

bt_status bt_log_open(bt_log *log, const char *dir, const bt_log_opts *opts) {
    memset(log, 0, sizeof *log);
    log->o = *opts;
    if (!log->o.out) log->o.out = stdout;
    if (!log->o.err) log->o.err = stderr;
    if (opts->total_steps <= 0 || opts->logging_steps <= 0 || opts->throughput_warmup_steps < 0 ||
        opts->resume_step < 0 || opts->min_redraw_s < 0)
        return bt_fail(BT_ERR_ARG,
                       "bt_log_open: total_steps (%lld) and logging_steps (%lld) must be >= 1, "
                       "throughput_warmup_steps (%lld), resume_step (%lld) and min_redraw_s (%g) "
                       ">= 0",
                       (long long)opts->total_steps, (long long)opts->logging_steps,
                       (long long)opts->throughput_warmup_steps, (long long)opts->resume_step,
                       opts->min_redraw_s);
    if (strlen(dir) >= sizeof log->dir)
        return bt_fail(BT_ERR_ARG, "output directory path too long (%zu bytes)", strlen(dir));
    snprintf(log->dir, sizeof log->dir, "%s", dir);
    snprintf(log->metrics_path, sizeof log->metrics_path, "%s/metrics.jsonl", dir);
    bt_status ds = bt_check_output_dir(dir, "output directory", 1);
    if (ds != BT_OK) return ds;
    bt_progress_init(&log->prog, log->o.out, log->o.mode, log->o.columns);

    int kept = 0, dropped = 0;
    if (opts->resume_step > 0) {
        bt_status s = metrics_truncate(log->metrics_path, opts->resume_step,
                                       opts->redo_eval_at_resume, &kept, &dropped);
        if (s != BT_OK) return s;
    }
    bt_status ms = bt_check_output_file(log->metrics_path, "metrics log");
    if (ms != BT_OK) return ms;
    log->metrics = fopen(log->metrics_path, opts->resume_step > 0 ? "a" : "w");
    if (!log->metrics)
        return bt_fail(BT_ERR_IO, "%s: cannot open for writing: %s", log->metrics_path,
                       strerror(errno));
    if (opts->tensorboard) {
        if (opts->resume_step == 0) {
            int removed = remove_old_events(dir);
            if (removed)
                bt_log_message(log, BT_LOG_INFO,
                               "fresh run: removed %d TensorBoard event file(s) of a previous run "
                               "in %s",
                               removed, dir);
        }
        bt_status s = bt_tb_open(&log->tb, dir, now_wall(), opts->resume_step);
        if (s != BT_OK) {
            fclose(log->metrics);
            log->metrics = NULL;
            return s;
        }
        log->tb_on = 1;
        /* the run's resolved config and the model's config.json as text, as HF's TensorBoard
         * callback writes its args and model config at the start (step 0) */
        const char *texts[2] = {opts->run_config_text, opts->model_config_text};
        const char *tags[2] = {"args/text_summary", "model_config/text_summary"};
        for (int i = 0; i < 2 && s == BT_OK; i++)
            if (texts[i]) s = add_tb_text(&log->tb, tags[i], texts[i]);
        if (s != BT_OK) {
            bt_tb_close(&log->tb);
            log->tb_on = 0;
            fclose(log->metrics);
            log->metrics = NULL;
            return s;
        }
    }
    if (opts->resume_step > 0)
        bt_log_message(log, BT_LOG_INFO,
                       "resuming at step %lld: %s keeps %d record(s) up to that step, dropped %d "
                       "from the interrupted run",
                       (long long)opts->resume_step, log->metrics_path, kept, dropped);
    bt_log_step_init(&log->last);
    log->last.step = opts->resume_step; /* a resumed run that takes no step ends there */
    bt_log_step_init(&log->logged);
    bt_log_eval_init(&log->eval);
    log->t_open = bt_now_s();
    log->t_drawn = -1e30;
    return BT_OK;
}

void bt_log_close(bt_log *log) {
    bt_progress_end(&log->prog);
    if (log->metrics) fclose(log->metrics);
    log->metrics = NULL;
    if (log->tb_on) bt_tb_close(&log->tb);
    log->tb_on = 0;
}

void bt_log_message(bt_log *log, bt_log_level level, const char *fmt, ...) {
    char msg[3072];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (level == BT_LOG_INFO)
        bt_progress_print(&log->prog, "%s", msg);
    else
        bt_progress_print_to(&log->prog, log->o.err, "%s: %s",
                             level == BT_LOG_WARN ? "warning" : "error", msg);
}

/* --- formatting ----------------------------------------------------------------------- */

/* "1:02:03", "12:34", or "?" when unknown. */
static void fmt_duration(char *buf, size_t cap, double s) {
    if (!(s >= 0) || s > 1e8) {
        snprintf(buf, cap, "?");
        return;
    }
    long t = (long)(s + 0.5);
    if (t >= 3600)
        snprintf(buf, cap, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else
        snprintf(buf, cap, "%ld:%02ld", t / 60, t % 60);
}

/* Appends printf output to buf (cap total), never past the end. */
static void cat(char *buf, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void cat(char *buf, size_t cap, const char *fmt, ...) {
    size_t n = strlen(buf);
    if (n + 1 >= cap) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + n, cap - n, fmt, ap);
    va_end(ap);
}

/* Mean seconds per step for the ETA: after the warm-up when measured, else all steps. */
static double sec_per_step(const bt_log *log) {
    if (log->tp_steps > 0) return log->tp_s / (double)log->tp_steps;
    if (log->steps_run > 0) return log->train_s / (double)log->steps_run;
    return NAN;
}

/* The shared body of the live line and the plain line: "step 120/5000 | epoch 0.48 |
 * loss 2.3412 (itc 1.0234 itm 0.6102 mlm 0.7076) | lr 9.80e-06 | grad_norm 1.234 |
 * 45.2 samples/s | data wait 3% | ETA 1:02:03". */
static void fmt_step(const bt_log *log, const bt_log_step_rec *v, double sps, double wait,
                     char *buf, size_t cap) {
    buf[0] = 0;
    cat(buf, cap, "step %lld/%lld", (long long)v->step, (long long)log->o.total_steps);
    if (!isnan(v->epoch)) cat(buf, cap, " | epoch %.2f", v->epoch);
    cat(buf, cap, " | loss %.4f", v->loss);
    const double terms[3] = {v->loss_itc, v->loss_itm, v->loss_mlm};
    int any = 0;
    for (int t = 0; t < 3; t++) {
        if (isnan(terms[t])) continue;
        cat(buf, cap, "%s%s %.4f", any ? " " : " (", loss_short[t + 1], terms[t]);
        any = 1;
    }
    if (any) cat(buf, cap, ")");
    if (!isnan(v->lr)) cat(buf, cap, " | lr %.3g", v->lr);
    if (!isnan(v->grad_norm)) cat(buf, cap, " | grad_norm %.3g", v->grad_norm);
    if (!isnan(sps)) cat(buf, cap, " | %.1f samples/s", sps);
    if (!isnan(wait)) cat(buf, cap, " | data wait %.0f%%", 100 * wait);
    char eta[32];
    fmt_duration(eta, sizeof eta, sec_per_step(log) * (double)(log->o.total_steps - v->step));
    cat(buf, cap, " | ETA %s", eta);
}

/* --- steps ---------------------------------------------------------------------------- */

/* Interval means into *m (a copy of the last step with the losses and phases replaced). */
static void interval_means(const bt_log *log, bt_log_step_rec *m, double *sps, double *wait) {
    const bt_log_interval *iv = &log->iv;
    *m = log->last;
    double *lv[N_LOSS] = {&m->loss, &m->loss_itc, &m->loss_itm, &m->loss_mlm};
    const double *last_l[N_LOSS] = {&log->last.loss, &log->last.loss_itc, &log->last.loss_itm,
                                    &log->last.loss_mlm};
    for (int k = 0; k < N_LOSS; k++) {
        /* A term that was never given stays NaN (absent); a term given but never finite in
         * the interval (every step skipped) is reported as Inf: "not finite", not "absent". */
        if (iv->loss_n[k] > 0)
            *lv[k] = iv->loss_sum[k] / (double)iv->loss_n[k];
        else
            *lv[k] = isnan(*last_l[k]) && k != L_TOTAL ? NAN : INFINITY;
    }
    for (int k = 0; k < N_PHASE; k++)
        *phase_of(m, k) = iv->phase_n[k] > 0 ? iv->phase_sum[k] / (double)iv->phase_n[k] : NAN;
    *sps = iv->seconds > 0 ? (double)iv->samples / iv->seconds : NAN;
    *wait = iv->seconds > 0 ? iv->wait_s / iv->seconds : NAN;
}

static void write_train_record(bt_log *log, const bt_log_step_rec *m, double sps, double wait) {
    double wall = now_wall(), v[BT_LOG_N_FIELDS];
    train_values(m, sps, wait, v);
    cJSON *o = cJSON_CreateObject();
    if (o) cJSON_AddStringToObject(o, "type", "train");
    put_fields(log, o, "train", m->step, v, wall);
    if (!o) return;
    cJSON_AddNumberToObject(o, "steps", (double)log->iv.steps);
    cJSON_AddNumberToObject(o, "samples", (double)log->iv.samples);
    add_num(o, "seconds", log->iv.seconds);
    if (log->iv.skipped) cJSON_AddNumberToObject(o, "skipped", (double)log->iv.skipped);
    cJSON *ph = NULL;
    for (int k = 0; k < N_PHASE; k++) {
        if (isnan(phase_value(m, k))) continue;
        if (!ph) ph = cJSON_AddObjectToObject(o, "phase_s");
        add_num(ph, phase_keys[k], phase_value(m, k));
    }
    cJSON_AddNumberToObject(o, "time", wall);
    metrics_write(log, o);
    cJSON_Delete(o);
}

void bt_log_step(bt_log *log, const bt_log_step_rec *r) {
    BT_ASSERTF(r->step >= 1, "bt_log_step: step %lld (steps are 1-based)", (long long)r->step);
    bt_log_interval *iv = &log->iv;
    double step_s = isnan(r->step_s) ? 0 : r->step_s;
    double wait_s = isnan(r->data_wait_s) ? 0 : r->data_wait_s;
    iv->steps++;
    iv->samples += r->samples;
    iv->seconds += step_s;
    iv->wait_s += wait_s;
    iv->skipped += r->skipped != 0;
    const double lv[N_LOSS] = {r->loss, r->loss_itc, r->loss_itm, r->loss_mlm};
    for (int k = 0; k < N_LOSS; k++)
        if (isfinite(lv[k])) {
            iv->loss_sum[k] += lv[k];
            iv->loss_n[k]++;
        }
    for (int k = 0; k < N_PHASE; k++)
        if (!isnan(phase_value(r, k))) {
            iv->phase_sum[k] += phase_value(r, k);
            iv->phase_n[k]++;
        }
    log->steps_run++;
    log->samples_run += r->samples;
    log->skipped_run += r->skipped != 0;
    log->train_s += step_s;
    log->wait_s += wait_s;
    if (log->steps_run > log->o.throughput_warmup_steps) {
        log->tp_steps++;
        log->tp_samples += r->samples;
        log->tp_s += step_s;
    }
    log->last = *r;

    int logged = r->step % log->o.logging_steps == 0 || r->step >= log->o.total_steps ||
                 (log->o.first_step && r->step == 1);
    bt_log_step_rec m;
    double sps, wait;
    interval_means(log, &m, &sps, &wait);
    char line[BT_PROGRESS_LINE_MAX];
    if (logged) {
        write_train_record(log, &m, sps, wait);
        log->logged = m;
        log->logged_sps = sps;
        log->logged_wait = wait;
        log->have_logged = 1;
        fmt_step(log, &m, sps, wait, line, sizeof line);
        if (log->iv.skipped)
            cat(line, sizeof line, " | %lld step(s) skipped", (long long)log->iv.skipped);
        bt_progress_print(&log->prog, "%s", line);
        memset(&log->iv, 0, sizeof log->iv);
    }
    double t = bt_now_s();
    if (log->prog.live && (logged || t - log->t_drawn >= log->o.min_redraw_s)) {
        double pct = 100.0 * (double)r->step / (double)log->o.total_steps;
        char body[BT_PROGRESS_LINE_MAX - 16];
        fmt_step(log, &m, sps, wait, body, sizeof body);
        snprintf(line, sizeof line, "[%3.0f%%] %s", pct, body);
        bt_progress_set(&log->prog, line);
        log->t_drawn = t;
    }
}

/* --- evaluations, checkpoints --------------------------------------------------------- */

/* The eval record ("type" only for metrics.jsonl; summary.json's final_eval has none). */
static cJSON *eval_json(const bt_log_eval_rec *r, int with_type) {
    double v[BT_LOG_N_FIELDS];
    eval_values(r, v);
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    if (with_type) cJSON_AddStringToObject(o, "type", "eval");
    put_fields(NULL, o, "eval", r->step, v, 0);
    cJSON_AddNumberToObject(o, "samples", (double)r->samples);
    add_num(o, "seconds", r->seconds);
    return o;
}

/* "eval step 500 | loss 1.2345 | i2t R@1/5/10 40.1/70.2/80.3 mean rank 5.2 | t2i ... |
 * 5-way accuracy 83.2% | 1200 samples in 12.3 s" */
static void fmt_eval(const bt_log_eval_rec *r, char *buf, size_t cap) {
    buf[0] = 0;
    cat(buf, cap, "eval step %lld", (long long)r->step);
    if (!isnan(r->loss)) cat(buf, cap, " | loss %.4f", r->loss);
    const double mr[2] = {r->i2t_mean_rank, r->t2i_mean_rank};
    static const char *const names[2] = {"i2t", "t2i"};
    for (int d = 0; d < 2; d++) {
        const double r1 = d ? r->t2i_r1 : r->i2t_r1, r5 = d ? r->t2i_r5 : r->i2t_r5,
                     r10 = d ? r->t2i_r10 : r->i2t_r10;
        if (isnan(r1) && isnan(r5) && isnan(r10)) continue;
        cat(buf, cap, " | %s R@1/5/10 ", names[d]);
        const double rk[3] = {r1, r5, r10};
        for (int k = 0; k < 3; k++) /* "-" for a recall that was not computed */
            cat(buf, cap, isnan(rk[k]) ? "%s-" : "%s%.1f", k ? "/" : "", 100 * rk[k]);
        if (!isnan(mr[d])) cat(buf, cap, " mean rank %.2f", mr[d]);
    }
    if (!isnan(r->accuracy_5way)) cat(buf, cap, " | 5-way accuracy %.1f%%", 100 * r->accuracy_5way);
    cat(buf, cap, " | %lld samples", (long long)r->samples);
    if (!isnan(r->seconds)) cat(buf, cap, " in %.1f s", r->seconds);
}

void bt_log_eval(bt_log *log, const bt_log_eval_rec *r) {
    double wall = now_wall();
    if (!isnan(r->seconds)) log->eval_s += r->seconds;
    log->eval = *r;
    log->have_eval = 1;
    cJSON *o = eval_json(r, 1);
    if (o) {
        cJSON_AddNumberToObject(o, "time", wall);
        metrics_write(log, o);
        cJSON_Delete(o);
    }
    double v[BT_LOG_N_FIELDS];
    eval_values(r, v);
    put_fields(log, NULL, "eval", r->step, v, wall);
    char line[BT_PROGRESS_LINE_MAX];
    fmt_eval(r, line, sizeof line);
    bt_progress_print(&log->prog, "%s", line);
}

void bt_log_checkpoint(bt_log *log, int64_t step, const char *path, double seconds) {
    if (!isnan(seconds)) log->save_s += seconds;
    bt_progress_print(&log->prog, "checkpoint step %lld saved to %s (%.1f s)", (long long)step,
                      path, seconds);
}

/* --- summary -------------------------------------------------------------------------- */

double bt_log_peak_rss_mib(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (f) {
        char line[256];
        long kb = -1;
        while (fgets(line, sizeof line, f))
            if (strncmp(line, "VmHWM:", 6) == 0) kb = strtol(line + 6, NULL, 10);
        fclose(f);
        if (kb >= 0) return (double)kb / 1024.0;
    }
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0) return (double)ru.ru_maxrss / 1024.0; /* KiB on Linux */
    return NAN;
}

bt_status bt_log_summary(bt_log *log, const bt_log_summary_in *in, bt_log_summary_out *out) {
    bt_log_summary_out s;
    memset(&s, 0, sizeof s);
    s.last_step = log->last.step;
    s.steps_run = log->steps_run;
    s.samples_run = log->samples_run;
    s.skipped_steps = log->skipped_run;
    s.measured_steps = log->tp_steps;
    s.measured_samples = log->tp_samples;
    s.measured_s = log->tp_s;
    int measured = log->tp_steps > 0 && log->tp_s > 0;
    s.samples_per_s = measured ? (double)log->tp_samples / log->tp_s : NAN;
    s.steps_per_s = measured ? (double)log->tp_steps / log->tp_s : NAN;
    s.gflops_per_s =
        measured && in->flops_per_sample > 0 ? in->flops_per_sample * s.samples_per_s / 1e9 : NAN;
    s.train_s = log->train_s;
    s.data_wait_s = log->wait_s;
    s.eval_s = log->eval_s;
    s.save_s = log->save_s;
    s.wall_s = bt_now_s() - log->t_open;
    s.peak_rss_mib = bt_log_peak_rss_mib();
    if (out) *out = s;

    char line[BT_PROGRESS_LINE_MAX], dur[32];
    const char *status = in->status ? in->status : "completed";
    bt_progress_print(&log->prog,
                      "summary: %s at step %lld (%lld step(s), %lld samples in this "
                      "run%s)",
                      status, (long long)s.last_step, (long long)s.steps_run,
                      (long long)s.samples_run, s.skipped_steps ? ", some skipped" : "");
    line[0] = 0;
    if (measured)
        cat(line, sizeof line,
            "  throughput: %.2f samples/s, %.3f steps/s over %lld step(s) after %lld warm-up "
            "step(s)",
            s.samples_per_s, s.steps_per_s, (long long)s.measured_steps,
            (long long)log->o.throughput_warmup_steps);
    else
        cat(line, sizeof line, "  throughput: not measured (no step after %lld warm-up step(s))",
            (long long)log->o.throughput_warmup_steps);
    if (!isnan(s.gflops_per_s)) cat(line, sizeof line, ", %.1f GFLOP/s", s.gflops_per_s);
    bt_progress_print(&log->prog, "%s", line);
    fmt_duration(dur, sizeof dur, s.wall_s);
    bt_progress_print(&log->prog,
                      "  time: %s wall, %.1f s training (%.1f s data wait), %.1f s evaluation, "
                      "%.1f s checkpoints; peak memory %.0f MiB",
                      dur, s.train_s, s.data_wait_s, s.eval_s, s.save_s, s.peak_rss_mib);
    if (log->have_logged) {
        fmt_step(log, &log->logged, log->logged_sps, log->logged_wait, line, sizeof line);
        bt_progress_print(&log->prog, "  last logged: %s", line);
    }
    if (log->have_eval) {
        fmt_eval(&log->eval, line, sizeof line);
        bt_progress_print(&log->prog, "  last %s", line);
    }

    cJSON *o = cJSON_CreateObject();
    if (!o) return bt_fail(BT_ERR_NOMEM, "summary.json: out of memory");
    cJSON_AddStringToObject(o, "status", status);
    cJSON_AddNumberToObject(o, "last_step", (double)s.last_step);
    cJSON_AddNumberToObject(o, "total_steps", (double)log->o.total_steps);
    cJSON_AddNumberToObject(o, "resumed_from_step", (double)log->o.resume_step);
    cJSON_AddNumberToObject(o, "steps_run", (double)s.steps_run);
    cJSON_AddNumberToObject(o, "samples_run", (double)s.samples_run);
    cJSON_AddNumberToObject(o, "skipped_steps", (double)s.skipped_steps);
    cJSON_AddNumberToObject(o, "throughput_warmup_steps", (double)log->o.throughput_warmup_steps);
    cJSON_AddNumberToObject(o, "measured_steps", (double)s.measured_steps);
    cJSON_AddNumberToObject(o, "measured_samples", (double)s.measured_samples);
    cJSON_AddNumberToObject(o, "measured_seconds", s.measured_s);
    add_num(o, "samples_per_s", s.samples_per_s);
    add_num(o, "steps_per_s", s.steps_per_s);
    if (in->flops_per_sample > 0)
        cJSON_AddNumberToObject(o, "flops_per_sample", in->flops_per_sample);
    add_num(o, "gflops_per_s", s.gflops_per_s);
    cJSON_AddNumberToObject(o, "train_seconds", s.train_s);
    cJSON_AddNumberToObject(o, "data_wait_seconds", s.data_wait_s);
    cJSON_AddNumberToObject(o, "eval_seconds", s.eval_s);
    cJSON_AddNumberToObject(o, "save_seconds", s.save_s);
    cJSON_AddNumberToObject(o, "wall_seconds", s.wall_s);
    add_num(o, "peak_rss_mib", s.peak_rss_mib);
    if (log->have_logged) {
        double v[BT_LOG_N_FIELDS];
        train_values(&log->logged, log->logged_sps, log->logged_wait, v);
        put_fields(NULL, cJSON_AddObjectToObject(o, "final_train"), "train", log->logged.step, v,
                   0);
    }
    if (log->have_eval) {
        cJSON *e = eval_json(&log->eval, 0);
        if (e) cJSON_AddItemToObject(o, "final_eval", e);
    }
    if (in->environment) cJSON_AddItemToObject(o, "environment", cJSON_Duplicate(in->environment, 1));
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    if (!text) return bt_fail(BT_ERR_NOMEM, "summary.json: out of memory");
    char path[4200];
    snprintf(path, sizeof path, "%s/summary.json", log->dir);
    size_t n = strlen(text);
    text[n] = '\n'; /* replaces the NUL: the file ends with a newline */
    bt_status st = bt_write_file_atomic(path, "run summary", text, n + 1);
    free(text);
    return st;
}
