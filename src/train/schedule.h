/* schedule.h: learning-rate schedules with warmup, Hugging Face semantics (transformers
 * optimization.py get_linear / get_cosine / get_constant_schedule_with_warmup, as the HF
 * Trainer builds them; torch LambdaLR applies the factor):
 *
 *   lr(step) = base_lr · factor(step), step = optimizer steps already taken (0 for the first
 *   update: with warmup > 0 the first update runs at lr 0, exactly as HF's does).
 *   warmup (all kinds):  step < W:  factor = step / max(1, W)
 *   linear:    max(0, (N - step) / max(1, N - W))
 *   cosine:    progress = (step - W) / max(1, N - W);
 *              max(0, 0.5 · (1 + cos(π · num_cycles · 2 · progress)))   (num_cycles 0.5)
 *   constant:  1
 * with N = total optimizer steps and W = warmup steps. Warmup given as a ratio follows
 * TrainingArguments.get_warmup_steps: W = warmup_steps if > 0, else ceil(N · warmup_ratio).
 * Arithmetic in double, like the Python floats HF uses.
 *
 * Deliberately not here: per-group multipliers (optim.h applies them to the scheduled lr),
 * restarts, polynomial / inverse-sqrt schedules, resuming (the position is just the step). */
#ifndef BT_TRAIN_SCHEDULE_H
#define BT_TRAIN_SCHEDULE_H

#include <stdint.h>

#include "status.h"

typedef enum {
    BT_SCHEDULE_LINEAR,
    BT_SCHEDULE_COSINE,
    BT_SCHEDULE_CONSTANT,
} bt_schedule_kind;

typedef struct bt_schedule {
    bt_schedule_kind kind;
    double base_lr;
    int64_t total_steps;  /* N */
    int64_t warmup_steps; /* W (resolved) */
    double num_cycles;    /* cosine only; HF default 0.5 */
} bt_schedule;

/* HF get_warmup_steps: warmup_steps when > 0, else ceil(total_steps · warmup_ratio). */
int64_t bt_schedule_warmup_steps(int64_t warmup_steps, double warmup_ratio, int64_t total_steps);

/* Validates and fills *s. Errors (BT_ERR_CONFIG, naming the value): total_steps < 1,
 * warmup < 0, ratio outside [0, 1], base_lr < 0 or not finite, unknown name. */
bt_status bt_schedule_init(bt_schedule *s, const char *kind, double base_lr,
                           int64_t total_steps, int64_t warmup_steps, double warmup_ratio);

/* factor(step) and base_lr · factor(step). */
double bt_schedule_factor(const bt_schedule *s, int64_t step);
double bt_schedule_lr(const bt_schedule *s, int64_t step);

/* "linear" / "cosine" / "constant". */
const char *bt_schedule_name(bt_schedule_kind k);

#endif
