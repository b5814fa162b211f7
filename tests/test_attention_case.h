/* test_attention_case.h: the attention test case that test_ops_fast and test_attention_tiles
 * share: q, k, v laid out as the model lays them, random in [-2, 2], and optionally the key
 * bias of a padding mask. Self attention: q, k, v are column slices of one packed
 * (B*T, 3C) buffer; cross attention: q (B*Tq, C) and k, v slices of a (B*Tk, 2C) buffer.
 * Batch item b masks its last min(b, Tk - 1) keys, so every item keeps at least one.
 * Not here: the runs and the comparisons (each test's own). */
#ifndef BT_TEST_ATTENTION_CASE_H
#define BT_TEST_ATTENTION_CASE_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/ops.h"
#include "test_util.h"

typedef struct {
    float *qbuf, *kvbuf;     /* the buffers (kvbuf NULL for self attention) */
    float *q, *k, *v;        /* slices of them, row strides d.ldq, d.ldk, d.ldv */
    float *key_bias;         /* (B, Tk), NULL when not masked */
    size_t qn, kvn, on, pn;  /* floats in qbuf, kvbuf, an output (B*Tq, C), probs (B, NH, Tq, Tk) */
    attention_dims d;
} attn_case;

static inline float *attn_case_floats(tu_rng *rng, size_t n) {
    float *p = malloc((n ? n : 1) * sizeof(float));
    if (!p) abort();
    tu_fill_uniform_f32(rng, p, n, -2.0f, 2.0f);
    return p;
}

static inline void attn_case_init(attn_case *a, tu_rng *rng, size_t B, size_t NH, size_t Tq,
                                  size_t Tk, size_t D, int self, int masked) {
    const size_t C = NH * D;
    memset(a, 0, sizeof *a);
    attention_dims *d = &a->d;
    d->B = B, d->Tq = Tq, d->Tk = Tk, d->NH = NH, d->D = D, d->ldo = C;
    if (self) {
        d->ldq = d->ldk = d->ldv = 3 * C;
        a->qn = B * Tq * 3 * C;
        a->qbuf = attn_case_floats(rng, a->qn);
        a->q = a->qbuf, a->k = a->qbuf + C, a->v = a->qbuf + 2 * C;
    } else {
        d->ldq = C, d->ldk = d->ldv = 2 * C;
        a->qn = B * Tq * C, a->kvn = B * Tk * 2 * C;
        a->qbuf = attn_case_floats(rng, a->qn), a->kvbuf = attn_case_floats(rng, a->kvn);
        a->q = a->qbuf, a->k = a->kvbuf, a->v = a->kvbuf + C;
    }
    a->on = B * Tq * C, a->pn = B * NH * Tq * Tk;
    if (!masked) return;
    int32_t *mask = malloc(B * Tk * sizeof *mask);
    a->key_bias = malloc(B * Tk * sizeof(float));
    if (!mask || !a->key_bias) abort();
    for (size_t b = 0; b < B; b++)
        for (size_t j = 0; j < Tk; j++) mask[b * Tk + j] = j + (b < Tk ? b : Tk - 1) < Tk;
    attention_key_bias_from_mask(a->key_bias, mask, B * Tk);
    free(mask);
}

static inline void attn_case_free(attn_case *a) {
    free(a->qbuf), free(a->kvbuf), free(a->key_bias);
}

#endif
