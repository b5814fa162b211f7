/* flops.h: the analytic FLOP count of BridgeTower, for achieved-GFLOP/s reports (bt-train's
 * summary, the benchmarks).
 *
 * The phased model runs text rows, images, (text, image) pairs through the cross stack and,
 * for MLM, pairs through the MLM head; the count is split the same way so a caller adds up
 * what its step ran. Training ≈ 3 × forward (each GEMM's backward is two GEMMs of its size),
 * the usual convention (llm.c, PaLM's MFU).
 *
 * Deliberately not here: memory-bound ops (flops.c says what is counted). */
#ifndef BT_MODEL_FLOPS_H
#define BT_MODEL_FLOPS_H

#include <stddef.h>

#include "model/config.h"
#include "model/params.h"

typedef struct bt_flops {
    double text_row; /* text tower + its bridge projections, one caption of T tokens */
    double image;    /* patch embedding + vision tower + its bridge projections, one image */
    double pair;     /* cross-modal stack, poolers and pair heads (ITC cross, ITM), one pair */
    double mlm_pair; /* MLM head on one pair's T text tokens */
    double pair_skipped; /* of `pair`: the last cross layer's work on the rows past each
                            pair's CLS row, which bt skips unless the features are asked for
                            (model.h bt_model_set_cross_features): the image side's, and the
                            text side's without the MLM head; the counts above are the
                            model's (what PyTorch runs) */
} bt_flops;

bt_flops bt_model_flops(const bt_model_config *c, unsigned heads, size_t T);

/* Forward FLOPs of Bt text rows, Bi images, P pairs of which Pm feed the MLM head. */
double bt_flops_forward(const bt_flops *f, size_t Bt, size_t Bi, size_t P, size_t Pm);

#endif
