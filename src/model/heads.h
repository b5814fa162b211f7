/* heads.h: the ITC, ITM and MLM heads (heads.c): their slot layout in both phases, the
 * forwards / backwards, and the HF-style losses of bt_forward: the heads' saved activations
 * (bt_heads_acts) and their layouts (in heads.c beside the forwards and backwards), which state
 * each slot's gradient kind (layout.h). The outputs a loss writes gradients into (itc_t, itc_i,
 * itc_c, itm_logits, mlm_logits) lead their phase's arena and are placed by model.c. */
#ifndef BT_HEADS_H
#define BT_HEADS_H

#include <stddef.h>

#include "model/layout.h"
#include "model/model.h"

/* The heads' slots: the ITC uni-modal head in the towers arena (Bt texts, Bi images), ITM,
 * MLM (the Pm pairs flagged mlm, in pair order) and ITC cross in the pair arena (P pairs). */
struct bt_heads_acts {
    /* ITC uni-modal head [tower] */
    float *itc_t_cls;       /* (Bt, H) uni-modal text CLS (text->h[Lt] row 0) */
    float *itc_i_cls;       /* (Bi, H) image CLS of the last bridge's ui */
    float *itc_t_proj, *itc_i_proj; /* (Bt, C), (Bi, C) head outputs */
    float *itc_t, *itc_i;   /* (Bt, C), (Bi, C) L2-normalized = m->itc_text / m->itc_image */
    float *itc_t_norm, *itc_i_norm; /* (Bt), (Bi) (no grad) */
    /* ITM head [pair] */
    float *itm_logits;      /* (P, 2) = m->itm_logits_out */
    /* MLM head [pair] */
    float *mlm_x;           /* (Pm*T, H) X_{X-1} rows of those pairs (gathered) */
    float *mlm_tr;          /* (Pm*T, H) transform.dense */
    float *mlm_act;         /* (Pm*T, H) GELU */
    float *mlm_ln;          /* (Pm*T, H) transform.LayerNorm */
    float *mlm_mean, *mlm_rstd; /* (Pm*T) */
    float *mlm_logits;      /* (Pm*T, V) = m->mlm_logits_out */
    /* ITC cross head [pair] */
    float *itc_c_proj;      /* (P, C) */
    float *itc_c;           /* (P, C) L2-normalized = m->itc_cross */
    float *itc_c_norm;      /* (P) (no grad) */
};

/* Towers phase: the ITC uni-modal head's slots for Bt texts and Bi images (ITC built). */
void heads_towers_layout(bt_acts *a, layout *L, const bt_model_config *c, size_t Bt,
                         size_t Bi);
/* Pairs phase: the MLM head (Pm pairs of T rows) and the ITC cross head (P pairs), those of
 * `heads` (BT_HEADS_*) that are built. */
void heads_pairs_layout(bt_acts *a, layout *L, const bt_model_config *c, unsigned heads,
                        size_t P, size_t Pm, size_t T);
void heads_towers_forward(bt_model *m);
void heads_towers_backward(bt_model *m);
void heads_pairs_forward(bt_model *m);
void heads_pairs_backward(bt_model *m);
void hf_losses_forward(bt_model *m);
void hf_losses_backward(bt_model *m, const bt_loss_weights *w);

#endif
