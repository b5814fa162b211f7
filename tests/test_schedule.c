/* test_schedule.c: the HF learning-rate schedules (src/train/schedule.h) on values known by
 * construction from the transformers formulas (optimization.py, 4.27):
 *   linear, warmup W = 10 of N = 110: factor(0) = 0 (the first update runs at lr 0),
 *     factor(5) = 0.5, factor(10) = 1, factor(60) = 0.5, factor(110) = 0, factor(200) = 0;
 *   cosine, W = 10 of N = 110: factor(60) = 0.5 (progress 1/2), factor(35) = 0.5(1+cos π/4),
 *     factor(110) = 0;
 *   constant with warmup: step/W before W, then 1; constant without warmup: 1 from step 0;
 *   warmup ratio: ceil(N · ratio) (HF get_warmup_steps), explicit steps win over the ratio;
 *   W = 0: no warmup division by zero (max(1, W)).
 * Exact equality where the formula gives a representable value (all arithmetic is double on
 * small integers), 1e-15 relative otherwise. Bad values are errors naming the value.
 * The step parity test (test_step_parity.c) checks the linear schedule against torch's
 * LambdaLR driving torch.optim.AdamW. */
#include <math.h>
#include <string.h>

#include "train/schedule.h"
#include "test_util.h"

static void expect(const bt_schedule *s, int64_t step, double want) {
    const double got = bt_schedule_factor(s, step);
    tu_check(fabs(got - want) <= 1e-15 * fabs(want), "%s W=%lld N=%lld: factor(%lld) = %.17g "
             "(want %.17g)", bt_schedule_name(s->kind), (long long)s->warmup_steps,
             (long long)s->total_steps, (long long)step, got, want);
}

int main(void) {
    bt_schedule s;
    tu_check(bt_schedule_init(&s, "linear", 1e-3, 110, 10, 0.0) == BT_OK, "linear init");
    expect(&s, 0, 0.0);
    expect(&s, 5, 0.5);
    expect(&s, 10, 1.0);
    expect(&s, 60, 0.5);
    expect(&s, 109, 0.01);
    expect(&s, 110, 0.0);
    expect(&s, 200, 0.0);
    tu_check(bt_schedule_lr(&s, 60) == 1e-3 * 0.5, "lr = base_lr * factor");

    tu_check(bt_schedule_init(&s, "cosine", 1.0, 110, 10, 0.0) == BT_OK, "cosine init");
    expect(&s, 3, 0.3);
    expect(&s, 10, 1.0);
    expect(&s, 35, 0.5 * (1.0 + cos(M_PI * 0.25)));
    expect(&s, 60, 0.5 * (1.0 + cos(M_PI * 0.5)));
    expect(&s, 110, 0.0);

    tu_check(bt_schedule_init(&s, "constant", 2.0, 50, 4, 0.0) == BT_OK, "constant init");
    expect(&s, 0, 0.0);
    expect(&s, 2, 0.5);
    expect(&s, 4, 1.0);
    expect(&s, 49, 1.0);
    tu_check(bt_schedule_init(&s, "constant", 2.0, 50, 0, 0.0) == BT_OK, "constant, no warmup");
    expect(&s, 0, 1.0);
    tu_check(bt_schedule_init(&s, "linear", 1.0, 10, 0, 0.0) == BT_OK, "linear, no warmup");
    expect(&s, 0, 1.0);
    expect(&s, 5, 0.5);

    /* warmup ratio: ceil(N * ratio); explicit steps win */
    tu_check(bt_schedule_warmup_steps(0, 0.1, 95) == 10, "ratio 0.1 of 95 -> ceil(9.5) = 10");
    tu_check(bt_schedule_warmup_steps(0, 0.1, 100) == 10, "ratio 0.1 of 100 -> 10");
    tu_check(bt_schedule_warmup_steps(3, 0.5, 100) == 3, "explicit warmup steps win");
    const bt_status st = bt_schedule_init(&s, "linear", 1.0, 95, 0, 0.1);
    tu_check(st == BT_OK && s.warmup_steps == 10, "init resolves the ratio (W = %lld)",
             (long long)s.warmup_steps);

    /* errors name the value */
    tu_check(bt_schedule_init(&s, "poly", 1.0, 10, 0, 0) == BT_ERR_CONFIG &&
                 strstr(bt_error_message(), "\"poly\""), "unknown kind: %s", bt_error_message());
    tu_check(bt_schedule_init(&s, "linear", 1.0, 0, 0, 0) == BT_ERR_CONFIG &&
                 strstr(bt_error_message(), "steps 0"), "0 steps: %s", bt_error_message());
    tu_check(bt_schedule_init(&s, "linear", 1.0, 10, 0, 1.5) == BT_ERR_CONFIG &&
                 strstr(bt_error_message(), "1.5"), "ratio 1.5: %s", bt_error_message());
    tu_check(bt_schedule_init(&s, "linear", -1.0, 10, 0, 0) == BT_ERR_CONFIG,
             "negative lr: %s", bt_error_message());
    return tu_finish();
}
