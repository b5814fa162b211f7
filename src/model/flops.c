/* flops.c: the analytic FLOP count of BridgeTower (flops.h).
 *
 * Counted: every GEMM (2·M·N·K) and both attention products (Q·Kᵀ and P·V, 2·Tq·Tk·d each
 * per head, summed over heads = 2·Tq·Tk·H), per component, from the config alone. Not
 * counted: LayerNorm, softmax, GELU, embeddings and the losses (memory-bound, O(T·H)); the
 * text-side attention over padding (bt computes full T×T blocks, so this is what runs).
 *
 * Deliberately not here: measured times (the trainer and benchmarks divide by them). */
#include "model/flops.h"

/* One transformer layer on n tokens of width h with FFN width f, self-attention over n. */
static double encoder_layer(double n, double h, double f) {
    return 2.0 * n * h * h * 4.0  /* Q, K, V, output projections */
           + 4.0 * n * n * h      /* Q·Kᵀ and P·V */
           + 4.0 * n * h * f;     /* FFN in and out */
}

/* One cross-modal layer of one side: n1 own tokens, n2 of the other modality, width h. */
static double cross_layer(double n1, double n2, double h, double f) {
    return encoder_layer(n1, h, f)
           + 2.0 * n1 * h * h * 2.0   /* cross-attention query and output projections */
           + 2.0 * n2 * h * h * 2.0   /* cross-attention keys and values (other modality) */
           + 4.0 * n1 * n2 * h;       /* Q·Kᵀ and P·V against the other modality */
}

/* Of cross_layer(n1, n2, h, f): what the n1 - 1 rows past the CLS row cost in queries. */
static double cls_skipped(double n1, double n2, double h, double f) {
    const double rest = n1 - 1.0;
    return 2.0 * rest * h * h * 4.0  /* Q, output, cross Q, cross output projections */
           + 4.0 * rest * h * f      /* FFN */
           + 4.0 * rest * n1 * h     /* self-attention Q·Kᵀ and P·V */
           + 4.0 * rest * n2 * h;    /* cross-attention */
}

bt_flops bt_model_flops(const bt_model_config *c, unsigned heads, size_t T) {
    const double t = (double)T, np = c->np, H = c->hidden, Ht = c->text_hidden,
                 Hv = c->vision_hidden, It = c->text_intermediate, X = c->cross_layers;
    bt_flops f = {0};
    f.text_row = c->text_layers * encoder_layer(t, Ht, It)
                 + X * 2.0 * t * Ht * H;                        /* bridge Tt per cross layer */
    f.image = 2.0 * c->num_patches * (3.0 * c->patch_size * c->patch_size) * Hv
              + c->vision_layers * encoder_layer(np, Hv, 4.0 * Hv)
              + X * 2.0 * np * Hv * H;                          /* bridge Ti per cross layer */
    f.pair = X * (cross_layer(t, np, H, It) + cross_layer(np, t, H, It))
             + 2.0 * 2.0 * H * H;                                /* the two poolers */
    if (heads & BT_HEADS_ITC)
        f.pair += 2.0 * 2.0 * H * c->contrastive_hidden;         /* cross ITC projection */
    if (heads & BT_HEADS_ITC) {
        f.text_row += 2.0 * Ht * c->contrastive_hidden;
        f.image += 2.0 * H * c->contrastive_hidden;
    }
    if (heads & BT_HEADS_ITM) f.pair += 2.0 * 2.0 * H * 2.0;
    /* the last layer's side on 1 query row instead of n1: keys and values unchanged */
    f.pair_skipped = cls_skipped(np, t, H, It);
    if (!(heads & BT_HEADS_MLM)) f.pair_skipped += cls_skipped(t, np, H, It);
    if (heads & BT_HEADS_MLM) f.mlm_pair = 2.0 * t * H * H + 2.0 * t * H * c->vocab_size;
    return f;
}

double bt_flops_forward(const bt_flops *f, size_t Bt, size_t Bi, size_t P, size_t Pm) {
    return (double)Bt * f->text_row + (double)Bi * f->image + (double)P * f->pair +
           (double)Pm * f->mlm_pair;
}
