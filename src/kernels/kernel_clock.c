/* kernel_clock.c: the per-class kernel time counters of kernel_clock.h.
 *
 * Each thread keeps the class of its innermost open span and the seconds of the spans already
 * closed inside it; closing a span adds its own time (wall time less those children) to the
 * class's counter. The counters are atomic nanoseconds, so any thread may close a span.
 *
 * Deliberately not here: deciding which kernels belong to which class (ops.c's dispatch
 * wrappers and gemm.c say it where they open their spans). */
#include "kernels/kernel_clock.h"

#include <math.h>
#include <stdatomic.h>
#include <stdint.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "clock.h"

static _Atomic uint64_t kc_ns[BT_KC_COUNT];
static _Thread_local int kc_class = -1;   /* innermost open span's class, -1: none */
static _Thread_local double kc_child = 0; /* seconds of its closed child spans */

void kc_add(_Atomic uint64_t *ns, double s) {
    if (s > 0) atomic_fetch_add_explicit(ns, (uint64_t)(s * 1e9 + 0.5), memory_order_relaxed);
}

double kc_seconds(_Atomic uint64_t *ns) {
    return 1e-9 * (double)atomic_load_explicit(ns, memory_order_relaxed);
}

void bt_kernel_times_read(bt_kernel_times *out) {
    for (int c = 0; c < BT_KC_COUNT; c++) out->s[c] = kc_seconds(&kc_ns[c]);
}

static int kc_in_parallel(void) {
#ifdef _OPENMP
    return omp_in_parallel();
#else
    return 0;
#endif
}

kc_span kc_enter(bt_kernel_class c) {
    kc_span s = {NAN, 0.0, -1};
    /* not counted: anything inside attention (part of it) and calls from inside a parallel
     * region (inside their starter's span); BT_KC_NONE spans are timed (kc_leave returns
     * their time) but added to no class */
    if (kc_class == BT_KC_ATTENTION || kc_in_parallel()) return s;
    s.outer_child = kc_child;
    s.outer_class = kc_class;
    kc_child = 0.0;
    kc_class = (int)c;
    s.t0 = bt_now_s();
    return s;
}

double kc_leave(const kc_span *s) {
    if (isnan(s->t0)) return 0.0;
    const double wall = bt_now_s() - s->t0;
    const double own = wall - kc_child;
    if (kc_class < BT_KC_COUNT) kc_add(&kc_ns[kc_class], own);
    kc_child = s->outer_child + wall;
    kc_class = s->outer_class;
    return own > 0 ? own : 0.0;
}
