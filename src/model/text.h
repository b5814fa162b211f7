/* text.h: the RoBERTa text tower's block (text.c): the activations one post-LN layer saves,
 * the tower's slot layout and its forward / backward. Rows: Nt = Bt*T (the towers phase's
 * texts). The layout (text_layout, in text.c beside the forward and backward) states each
 * slot's gradient kind (layout.h). */
#ifndef BT_TEXT_H
#define BT_TEXT_H

#include <stddef.h>

#include "model/layout.h"
#include "model/model.h"

/* The tower's slots in the towers phase (rows Nt = Bt*T). */
struct bt_text_acts {
    float *emb;             /* (Nt, Ht) word + position + type (LN input) */
    float *pos_rows;        /* (Nt, Ht) gathered position rows (no grad) */
    float *emb_mean, *emb_rstd; /* (Nt) */
    float *emb_ln;          /* (Nt, Ht) LN output, before the embedding dropout */
    float **h;              /* [Lt+1] (Nt, Ht): 0 = embeddings (after dropout), l+1 = layer l */
    bt_text_layer_acts *layers; /* [Lt] */
};

struct bt_text_layer_acts {
    float *q, *k, *v;       /* (Nt, Ht) */
    float *probs;           /* (Bt, NHt, T, T) softmax before dropout (no grad) */
    float *ctx;             /* (Nt, Ht) attention output (heads concatenated) */
    bt_bf16 *ctx_16;        /* (Nt, Ht) bf16 storage: bf16(ctx), ctx the phase's staging */
    float *attn_lin;        /* (Nt, Ht) attention.output.dense (dropout applied in place) */
    float *res1;            /* (Nt, Ht) LN1 input = attn_lin + x */
    float *mean1, *rstd1;   /* (Nt) (no grad) */
    float *a;               /* (Nt, Ht) LN1 output */
    float *f_pre, *f;       /* (Nt, It) intermediate.dense, GELU */
    bt_bf16 *f_16;          /* (Nt, It) bf16 storage: GELU output (f NULL) */
    float *ffn_lin;         /* (Nt, Ht) output.dense (dropout in place) */
    float *res2;            /* (Nt, Ht) LN2 input (no grad: d res2 is d a's first value) */
    float *mean2, *rstd2;   /* (Nt) (no grad) */
};

/* Places the text tower's slots of the towers phase (embeddings, hidden states, layers) in L
 * for Bt texts of T tokens; stage: the phase's attention staging. */
void text_layout(bt_acts *a, layout *L, const bt_model_config *c, size_t Bt, size_t T,
                 const attn_stage *stage);
/* Towers phase: the Bt texts (m->ids, m->mask); its backward. */
void text_forward(bt_model *m);
void text_backward(bt_model *m);

#endif
