/* kernel_clock.h: where the compute time of a forward and backward goes, by kind of kernel
 * (issue 9, per-phase timing): the GEMMs (linear layers, heads: near the machine's GEMM
 * peak when things go well), attention (each call whole: its per-head products, the
 * softmax, the key bias and dropout rows), and the memory-bound kernels (LayerNorm, GELU,
 * residuals, dropout, bias sums, bf16 roundings, embeddings, losses, gradient-arena zeroing:
 * they run at memory speed, so they are what to fuse or remove).
 *
 * How it counts: every kernel called through ops.h's dispatch and every gemm() opens a span
 * on the calling thread. A span's own time (its wall time less that of the spans opened
 * inside it) goes to its class, so a linear layer's GEMM counts as GEMM and its bias pass as
 * memory-bound. Spans opened inside an attention span belong to attention (its per-head
 * products are part of the kernel), and spans opened by OpenMP worker threads are not
 * counted (their time is inside the span of the call that started the parallel region).
 * The counters are cumulative wall seconds since the process started, summed over the
 * threads that call kernels outside parallel regions (the trainer's one thread): a caller
 * reads them before and after what it measures and takes the difference.
 * Cost: two clock_gettime calls per kernel call (~50 ns; a base step makes a few thousand
 * calls, ~0.1 ms of a ~4 s step).
 *
 * Deliberately not here: a class for the optimizer's kernels (AdamW and the norm pass are
 * their own phase, bt_train_step's t_optimizer; ops.c still times them per kernel) and any
 * hardware counter. */
#ifndef BT_MODEL_KERNEL_CLOCK_H
#define BT_MODEL_KERNEL_CLOCK_H

#include <stdatomic.h>
#include <stdint.h>

typedef enum bt_kernel_class {
    BT_KC_GEMM,      /* gemm(): linear layers, heads */
    BT_KC_ATTENTION, /* attention_forward / attention_backward, their products included */
    BT_KC_MEMORY,    /* every other dispatched kernel except the optimizer's */
    BT_KC_COUNT,
    BT_KC_NONE = BT_KC_COUNT /* in no class (the optimizer's kernels): kc_leave still
                                returns its time */
} bt_kernel_class;

typedef struct bt_kernel_times {
    double s[BT_KC_COUNT]; /* cumulative seconds per class */
} bt_kernel_times;

/* The counters now. */
void bt_kernel_times_read(bt_kernel_times *out);

/* For the dispatch (ops.c) and gemm.c: open a span of class c on this thread, close it. */
typedef struct kc_span {
    double t0;          /* start, seconds; NaN: this span is not counted */
    double outer_child; /* the enclosing span's child seconds so far */
    int outer_class;    /* the enclosing span's class, -1 at the top */
} kc_span;
kc_span kc_enter(bt_kernel_class c);
/* Returns the span's own seconds (0 for a span not timed: inside attention or a parallel
 * region). */
double kc_leave(const kc_span *s);

/* A seconds counter (atomic nanoseconds: any thread may add): *ns += s (s <= 0 adds nothing),
 * and its value in seconds. The class counters are these; ops.c keeps one per kernel. */
void kc_add(_Atomic uint64_t *ns, double s);
double kc_seconds(_Atomic uint64_t *ns);

#endif
