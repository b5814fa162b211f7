/* heads.h: the ITC, ITM and MLM heads (heads.c): their slot layout in both phases, the
 * forwards / backwards, and the HF-style losses of bt_forward. The head slots are fields of
 * bt_acts (model.h); the layouts (in heads.c beside the forwards and backwards) state each
 * slot's gradient kind (layout.h). The outputs a loss writes gradients into (itc_t, itc_i,
 * itc_c, itm_logits, mlm_logits) lead their phase's arena and are placed by model.c. */
#ifndef BT_HEADS_H
#define BT_HEADS_H

#include <stddef.h>

#include "model/layout.h"
#include "model/model.h"

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
