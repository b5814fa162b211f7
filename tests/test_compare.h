/* test_compare.h: the one rule for comparing two training runs that legitimately differ in
 * summation order (ranks, threads, GEMM backends, ISA levels, resume on another world size,
 * ZeRO-1, accumulation, bf16 on the wire): docs/determinism.md "Comparing two training runs"
 * states it and derives the bounds. Runs that promise equal bits are compared bytewise
 * (tu_files_equal), never with this.
 *
 * Weights are compared by how far they moved from the common start `init`, never element by
 * element against an absolute constant: for b the reference and a the run under test,
 *   overall      R   = ||a - b||_2 / ||b - init||_2 over every fp32 element      <= rtol
 *   per tensor   r_T = ||a_T - b_T||_2 / max(||b_T - init_T||_2, sqrt(n_T / N) ||b - init||_2)
 *                                                                             <= TC_TENSOR_BOUND
 * The per-tensor floor is the movement of an average element of the run times sqrt(n_T): a
 * tensor that barely moves (an attention key bias: its exact gradient is 0 and its trajectory
 * is rounding noise scaled by AdamW) is measured against what a typical tensor of its size
 * moved, not against its own noise. Non-fp32 tensors (integer buffers) must be equal bytes.
 * Logged series (losses, grad norms) are compared relatively, step by step.
 * Deliberately not here: choosing rtol; each caller names the TC_RTOL_* bound that fits. */
#ifndef BT_TEST_COMPARE_H
#define BT_TEST_COMPARE_H

#include <stddef.h>

/* Bounds derived in docs/determinism.md "Comparing two training runs" (synthetic model,
 * batches up to 8, a few AdamW steps): */
/* fp32 sums in another order: 2 (AdamW's gain) x the worst-case relative rounding of a
 * step's gradients, ~24 products deep with sums of up to 256 terms (24 · 256 · 2^-24 = 3.7e-4),
 * rounded up. Observed <= 1.8e-4 (2 ranks under BT_CPU_ISA=avx2, resumed on 1); lr x 1.01
 * gives 1.05e-2. */
#define TC_RTOL_FP32 1e-3
/* bf16 on the wire: 2 x the two bf16 roundings of the averaged gradient (2 · 2 · 2^-8).
 * Observed <= 2.9e-3. */
#define TC_RTOL_BF16_WIRE 1.6e-2
/* Per tensor: a tensor-level mistake (not updated, not all-reduced, a wrong lr multiplier,
 * a shard not gathered) gives r_T >= 0.5; rounding stays below it unless a zero-gradient
 * element's rounding noise reaches a quarter of adam_eps. Observed <= 6e-3 (fp32), 2.9e-2
 * (bf16 wire). */
#define TC_TENSOR_BOUND 0.1

typedef struct tc_weights_result {
    int comparable;       /* 1: all three files read, same tensors, integer tensors equal */
    double overall;       /* R */
    double worst_tensor;  /* the largest r_T */
    char worst_name[160]; /* its tensor */
    double max_abs;       /* max |a - b| over every element, for the record */
    double moved;         /* ||b - init||_2 */
    size_t n;             /* fp32 elements compared */
} tc_weights_result;

/* Compares the model.safetensors files got (a) and ref (b) against init; init NULL means a
 * start of all zeros (optimizer moments). Returns r->comparable. */
int tc_weights_compare(tc_weights_result *r, const char *got, const char *ref, const char *init);

/* The same on tensors in memory (a test holding both runs' arenas): view i is one tensor's n
 * values of the run under test, the reference and the start (init NULL: zeros). Returns 0
 * when n is 0 or out of memory. */
typedef struct tc_tensor_view {
    const char *name;
    size_t n;
    const float *got, *ref, *init;
} tc_tensor_view;
int tc_weights_compare_views(tc_weights_result *r, const tc_tensor_view *v, size_t n);

/* 1 when R <= rtol and every r_T <= TC_TENSOR_BOUND (a tu_check case named `what` that prints
 * both and the worst tensor). */
int tc_weights_pass(const tc_weights_result *r, double rtol);
int tc_check_weights(const char *what, const char *got, const char *ref, const char *init,
                     double rtol);

/* Worst |got[i] - ref[i]| / |ref[i]| over n values (NaN or a zero ref with got != ref:
 * infinity). */
double tc_worst_relative(const double *got, const double *ref, size_t n);

/* Writes the fresh model bt-train starts from (bt_checkpoint_init of model_dir with heads and
 * seed) as dir/model.safetensors (dir created). Exits the test (status 1) on failure. */
void tc_save_init(const char *dir, const char *model_dir, unsigned heads, unsigned long long seed);

#endif
