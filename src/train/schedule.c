/* schedule.c: HF learning-rate schedules with warmup (see schedule.h).
 *
 * Deliberately not here: the optimizer step counter (the caller passes the step). */
#include "train/schedule.h"

#include <math.h>
#include <string.h>

static const char *const kind_names[] = {"linear", "cosine", "constant"};

const char *bt_schedule_name(bt_schedule_kind k) {
    return (unsigned)k < 3 ? kind_names[k] : "?";
}

int64_t bt_schedule_warmup_steps(int64_t warmup_steps, double warmup_ratio,
                                 int64_t total_steps) {
    if (warmup_steps > 0) return warmup_steps;
    return (int64_t)ceil((double)total_steps * warmup_ratio);
}

bt_status bt_schedule_init(bt_schedule *s, const char *kind, double base_lr,
                           int64_t total_steps, int64_t warmup_steps, double warmup_ratio) {
    memset(s, 0, sizeof *s);
    int k = -1;
    for (int i = 0; i < 3; i++)
        if (kind && strcmp(kind, kind_names[i]) == 0) k = i;
    if (k < 0)
        return bt_fail(BT_ERR_CONFIG, "learning-rate schedule \"%s\": expected linear, cosine or "
                       "constant", kind ? kind : "(null)");
    if (!(base_lr >= 0.0) || !isfinite(base_lr))
        return bt_fail(BT_ERR_CONFIG, "learning rate %g: expected a finite value >= 0", base_lr);
    if (total_steps < 1)
        return bt_fail(BT_ERR_CONFIG, "total optimizer steps %lld: expected >= 1",
                       (long long)total_steps);
    if (warmup_steps < 0)
        return bt_fail(BT_ERR_CONFIG, "warmup steps %lld: expected >= 0", (long long)warmup_steps);
    if (!(warmup_ratio >= 0.0 && warmup_ratio <= 1.0))
        return bt_fail(BT_ERR_CONFIG, "warmup ratio %g: expected a value in [0, 1]", warmup_ratio);
    s->kind = (bt_schedule_kind)k;
    s->base_lr = base_lr;
    s->total_steps = total_steps;
    s->warmup_steps = bt_schedule_warmup_steps(warmup_steps, warmup_ratio, total_steps);
    s->num_cycles = 0.5;
    return BT_OK;
}

double bt_schedule_factor(const bt_schedule *s, int64_t step) {
    const int64_t W = s->warmup_steps, N = s->total_steps;
    if (step < W) return (double)step / (double)(W > 1 ? W : 1);
    const double span = (double)(N - W > 1 ? N - W : 1);
    switch (s->kind) {
    case BT_SCHEDULE_LINEAR: {
        const double f = (double)(N - step) / span;
        return f > 0.0 ? f : 0.0;
    }
    case BT_SCHEDULE_COSINE: {
        const double progress = (double)(step - W) / span;
        const double f = 0.5 * (1.0 + cos(M_PI * s->num_cycles * 2.0 * progress));
        return f > 0.0 ? f : 0.0;
    }
    case BT_SCHEDULE_CONSTANT:
        return 1.0;
    }
    return 1.0;
}

double bt_schedule_lr(const bt_schedule *s, int64_t step) {
    return s->base_lr * bt_schedule_factor(s, step);
}
