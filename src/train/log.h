/* log.h: what the user sees of a training run, behind one handle the trainer loop calls.
 *
 *     bt_log log;
 *     bt_log_opts o = bt_log_opts_default();
 *     o.total_steps = ...; o.logging_steps = ...; o.resume_step = state.step;
 *     bt_log_open(&log, output_dir, &o);                 // metrics.jsonl, TensorBoard file
 *     for each optimizer step:  bt_log_step(&log, &rec);  // every step, not only logged ones
 *     after an evaluation:      bt_log_eval(&log, &ev);
 *     after a checkpoint:       bt_log_checkpoint(&log, step, dir, seconds);
 *     warnings, notes:          bt_log_message(&log, BT_LOG_WARN, "...", ...);
 *     at the end:               bt_log_summary(&log, &sum_in, &sum);   // prints, summary.json
 *                               bt_report_write(output_dir, config_json);  (report.h)
 *     bt_log_close(&log);
 *
 * Cadence. bt_log_step is called after EVERY optimizer step; the log keeps the logging
 * cadence itself: on steps that are multiples of logging_steps (and the last step,
 * total_steps, and step 1 with first_step) it writes one metrics.jsonl record, the
 * TensorBoard scalars and one permanent line, whose values are those of the interval
 * since the previous logged step (as the HF Trainer logs): loss and each term are means
 * over the interval's steps with a finite value, lr and grad_norm are the last step's,
 * samples_per_s = interval samples / interval seconds,
 * data_wait = interval data-wait seconds / interval seconds (a fraction), phase seconds are
 * means per step. Every step also refreshes the live line (at most every min_redraw_s).
 *
 * Outputs (docs/outputs.md has the full schema):
 *   stdout (opts.out)  live line on a terminal, plain lines otherwise (progress.h)
 *   stderr (opts.err)  warnings and errors (BT_LOG_WARN, BT_LOG_ERROR)
 *   <dir>/metrics.jsonl  {"type":"train",...} per logged step, {"type":"eval",...} per
 *                      evaluation; each record is one line, written and fflush'ed at once.
 *                      A fresh run (resume_step 0) starts the file anew. A resumed run first
 *                      rewrites it (atomically: temp file + rename) keeping only the records
 *                      with step <= resume_step (a killed run may have logged steps after
 *                      its last checkpoint; those are redone) and drops lines that do not
 *                      parse (a record cut by the kill), then appends.
 *   <dir>/events.out.tfevents.*  TensorBoard scalars (tensorboard.h). A fresh run removes
 *                      the event files of an earlier run in dir (TensorBoard would merge
 *                      them into the new curves); a resumed run keeps them and starts its
 *                      file with SessionLog START (TensorBoard drops their later steps).
 *                      Tags: "train/loss", "train/loss_itc", "train/loss_itm", "train/loss_mlm",
 *                      "train/learning_rate", "train/grad_norm", "train/epoch",
 *                      "train/samples_per_second", "train/data_wait", "eval/loss",
 *                      "eval/i2t_recall@1" (@5, @10), "eval/t2i_recall@1" (@5, @10),
 *                      "eval/i2t_mean_rank", "eval/t2i_mean_rank", "eval/accuracy_5way".
 *   <dir>/summary.json  written by bt_log_summary (atomically).
 * Absent values are NaN in the records: they are left out of metrics.jsonl and TensorBoard
 * (a term that is switched off has no curve); a loss that was not finite on any step of a
 * logged interval (every step skipped) is written as null in metrics.jsonl (Inf in
 * TensorBoard).
 *
 * Throughput. samples/s in the summary counts only steps after the first
 * throughput_warmup_steps steps of this process (a resumed run warms up again) and only the
 * steps' own seconds (step_s: data wait included, evaluation and checkpoint time excluded:
 * those are reported separately). GFLOP/s = flops_per_sample * those samples / those
 * seconds / 1e9. ETA = remaining steps * mean step seconds (after warm-up when there are
 * such steps) + nothing for future evaluations.
 *
 * Errors: bt_log_open and bt_log_summary return BT_ERR_IO naming the file. A failed
 * metrics/TensorBoard write during training is reported once as a warning and that output is
 * switched off: losing a log file must not kill a long run.
 *
 * Deliberately not here: what to evaluate or when (the trainer decides and calls
 * bt_log_eval), the HTML report (report.h), distributed logging (only rank 0 opens a log),
 * thread safety (one thread logs). */
#ifndef BT_TRAIN_LOG_H
#define BT_TRAIN_LOG_H

#include <stdint.h>
#include <stdio.h>

#include "train/progress.h"
#include "status.h"
#include "train/tensorboard.h"

struct cJSON;

typedef struct bt_log_opts {
    FILE *out, *err;                 /* NULL: stdout, stderr */
    bt_progress_mode mode;           /* AUTO: live on a terminal */
    int columns;                     /* 0: the terminal's width */
    int64_t total_steps;             /* > 0 (for step/total, the last logged step and ETA) */
    int64_t logging_steps;           /* >= 1 */
    int first_step;                  /* 1: also log step 1 (HF logging_first_step) */
    int64_t throughput_warmup_steps; /* >= 0 */
    int64_t resume_step;             /* 0: fresh run; > 0: the checkpoint's step */
    int redo_eval_at_resume;         /* 1: the eval records of resume_step are dropped too (a
                                        run resumed at its last step evaluates again) */
    int tensorboard;                 /* 1: write TensorBoard event files */
    double min_redraw_s;             /* live line refresh interval; 0: every step */
    const char *run_config_text;     /* TensorBoard text "args" (HF writes its args), or NULL */
    const char *model_config_text;   /* TensorBoard text "model_config" (as HF), or NULL */
} bt_log_opts;

/* stdout/stderr, AUTO mode, logging_steps 500 (HF default), total_steps 0 (must be set),
 * warm-up 0, tensorboard on, redraw every 0.1 s. */
bt_log_opts bt_log_opts_default(void);

/* One optimizer step (all micro-batches and ranks). NaN means "not computed / not measured";
 * bt_log_step_init fills every double with NaN and the rest with 0. */
typedef struct bt_log_step_rec {
    int64_t step;                        /* the step just taken, 1-based */
    double epoch;                        /* fractional epochs done, as HF logs "epoch" */
    double loss;                         /* the weighted total */
    double loss_itc, loss_itm, loss_mlm; /* the terms (unweighted); NaN when switched off */
    double lr;                           /* lr as HF logs it: after the scheduler step */
    double grad_norm;                    /* global L2 norm before clipping */
    int64_t samples;                     /* samples in this step */
    double step_s;                       /* wall seconds of the step, data wait included */
    double data_wait_s;                  /* seconds of it spent waiting for the loader */
    double forward_s, backward_s, comm_s, optim_s; /* per-phase seconds; NaN: not measured */
    /* forward + backward split by kind of kernel (src/kernels/kernel_clock.h): GEMMs,
     * attention, memory-bound kernels; NaN: not measured */
    double gemm_s, attention_s, memory_s;
    int skipped; /* the update was skipped (non-finite loss/grad) */
} bt_log_step_rec;
void bt_log_step_init(bt_log_step_rec *r);

/* One evaluation. Recalls and accuracy are fractions in [0, 1]; NaN when not computed. */
typedef struct bt_log_eval_rec {
    int64_t step;
    double epoch;
    double loss;
    double i2t_r1, i2t_r5, i2t_r10; /* image->text recall@K */
    double t2i_r1, t2i_r5, t2i_r10; /* text->image recall@K */
    double i2t_mean_rank, t2i_mean_rank;
    double accuracy_5way; /* NaN when the manifest has no choices */
    int64_t samples;      /* evaluated records */
    double seconds;       /* wall seconds of the evaluation (excluded from samples/s) */
} bt_log_eval_rec;
void bt_log_eval_init(bt_log_eval_rec *r);

/* The values of the records, said once: each field's record type, its metrics.jsonl key and
 * its TensorBoard tag (NULL: not a TensorBoard scalar). log.c writes records from this table
 * and report.c draws its curves from it. Train fields come first, in record order. */
typedef enum {
    BT_LF_EPOCH,
    BT_LF_LOSS,
    BT_LF_LOSS_ITC,
    BT_LF_LOSS_ITM,
    BT_LF_LOSS_MLM,
    BT_LF_LR,
    BT_LF_GRAD_NORM,
    BT_LF_SAMPLES_PER_S,
    BT_LF_DATA_WAIT,
    BT_LF_EVAL_EPOCH,
    BT_LF_EVAL_LOSS,
    BT_LF_I2T_R1,
    BT_LF_I2T_R5,
    BT_LF_I2T_R10,
    BT_LF_T2I_R1,
    BT_LF_T2I_R5,
    BT_LF_T2I_R10,
    BT_LF_I2T_MEAN_RANK,
    BT_LF_T2I_MEAN_RANK,
    BT_LF_ACCURACY_5WAY,
    BT_LOG_N_FIELDS
} bt_log_field_id;

typedef struct bt_log_field {
    const char *type; /* "train" or "eval" */
    const char *key;  /* metrics.jsonl key */
    const char *tag;  /* TensorBoard tag, or NULL */
} bt_log_field;

extern const bt_log_field bt_log_fields[BT_LOG_N_FIELDS];

typedef enum { BT_LOG_INFO, BT_LOG_WARN, BT_LOG_ERROR } bt_log_level;

/* Interval accumulators (since the last logged step). */
typedef struct bt_log_interval {
    int64_t steps, samples, skipped;
    double seconds, wait_s;
    double loss_sum[4]; /* loss, itc, itm, mlm */
    int64_t loss_n[4];
    double phase_sum[7]; /* forward, backward, comm, optim, gemm, attention, memory-bound */
    int64_t phase_n[7];
} bt_log_interval;

typedef struct bt_log {
    bt_log_opts o;
    char dir[4096];
    char metrics_path[4200];
    FILE *metrics; /* NULL once switched off */
    bt_tb_writer tb;
    int tb_on;
    bt_progress prog;
    bt_log_interval iv;
    bt_log_step_rec last;   /* last step as given */
    bt_log_step_rec logged; /* last logged interval (means) */
    int have_logged;
    double logged_sps, logged_wait; /* samples/s and data-wait fraction of that interval */
    bt_log_eval_rec eval;           /* last evaluation */
    int have_eval;
    int64_t steps_run, samples_run, skipped_run; /* this process */
    double train_s, wait_s, eval_s, save_s;
    int64_t tp_steps, tp_samples; /* after the throughput warm-up */
    double tp_s;
    double t_open;  /* CLOCK_MONOTONIC at open */
    double t_drawn; /* last live redraw */
} bt_log;

/* Opens the outputs in dir (created with its parents if missing). Errors: BT_ERR_ARG (bad opts),
 * BT_ERR_IO naming the path. On error nothing is left open. */
bt_status bt_log_open(bt_log *log, const char *dir, const bt_log_opts *opts);

/* After every optimizer step (see Cadence above). */
void bt_log_step(bt_log *log, const bt_log_step_rec *r);

/* After an evaluation: a permanent line, a metrics.jsonl record, eval/ TensorBoard scalars. */
void bt_log_eval(bt_log *log, const bt_log_eval_rec *r);

/* After a checkpoint was written to path (seconds: the save's wall time). */
void bt_log_checkpoint(bt_log *log, int64_t step, const char *path, double seconds);

/* A message: INFO on out, WARN/ERROR on err prefixed "warning: " / "error: ". */
void bt_log_message(bt_log *log, bt_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

typedef struct bt_log_summary_in {
    double flops_per_sample; /* training FLOPs (forward + backward) per sample; 0: unknown */
    const char *status;      /* "completed", "interrupted by SIGINT", ... (the summary line
                              * adds " at step N") */
    const struct cJSON *environment; /* copied to summary.json "environment", or NULL */
} bt_log_summary_in;

typedef struct bt_log_summary_out {
    int64_t last_step, steps_run, samples_run, skipped_steps;
    int64_t measured_steps, measured_samples;                    /* after the throughput warm-up */
    double measured_s, samples_per_s, steps_per_s, gflops_per_s; /* NaN when nothing measured */
    double train_s, data_wait_s, eval_s, save_s, wall_s;
    double peak_rss_mib; /* VmHWM (/proc/self/status), else ru_maxrss */
} bt_log_summary_out;

/* Computes the summary, prints it (permanent lines), writes <dir>/summary.json (atomic) with
 * it, the status, the last logged training values and the last evaluation. out may be NULL.
 * Errors: BT_ERR_IO naming summary.json. */
bt_status bt_log_summary(bt_log *log, const bt_log_summary_in *in, bt_log_summary_out *out);

/* Erases the live line and closes the files. */
void bt_log_close(bt_log *log);

/* Peak resident memory of this process in MiB (VmHWM, else getrusage ru_maxrss). */
double bt_log_peak_rss_mib(void);

#endif
