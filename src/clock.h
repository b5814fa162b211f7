/* clock.h: wall-clock seconds for timing phases (CLOCK_MONOTONIC: never jumps with the
 * system time), the one definition the trainer, loader, reducer, tools and benchmarks use.
 *
 * Deliberately not here: CPU time (benchmarks read CLOCK_PROCESS_CPUTIME_ID themselves) and
 * calendar time (logs stamp with time()). */
#ifndef BT_CLOCK_H
#define BT_CLOCK_H

#include <time.h>

static inline double bt_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#endif
