/* vit.h: the ViT vision tower's block (vit.c): the activations one pre-LN block saves, the
 * tower's slot layout and its forward / backward. Rows: Nv = Bi*Np (the towers phase's
 * images). The layout (vit_layout, in vit.c beside the forward and backward) states each
 * slot's gradient kind (layout.h). */
#ifndef BT_VIT_H
#define BT_VIT_H

#include <stddef.h>

#include "model/layout.h"
#include "model/model.h"

/* The tower's slots in the towers phase (rows Nv = Bi*Np). */
struct bt_vit_acts {
    float *patches;         /* (Bi*G², 3PP) unfolded pixels, (c, ky, kx) order (no grad) */
    float *patch_emb;       /* (Bi*G², Hv) */
    float *emb;             /* (Nv, Hv) [CLS; patches] + positions (ln_pre input) */
    float *emb_mean, *emb_rstd; /* (Nv) */
    float **h;              /* [Lv+1] (Nv, Hv): 0 = after ln_pre, l+1 = block l */
    bt_vit_layer_acts *layers; /* [Lv] */
};

struct bt_vit_layer_acts {
    float *y1;              /* (Nv, Hv) ln_1(x) */
    bt_bf16 *y1_16;         /* (Nv, Hv) bf16 storage: ln_1(x) (y1 NULL) */
    float *mean1, *rstd1;   /* (Nv) */
    float *qkv;             /* (Nv, 3Hv) [Q | K | V] */
    float *probs;           /* (Bi, NHv, Np, Np) */
    float *ctx;             /* (Nv, Hv) */
    bt_bf16 *ctx_16;        /* (Nv, Hv) bf16 storage: bf16(ctx), ctx the phase's staging */
    float *attn_out;        /* (Nv, Hv) out_proj(ctx) (no grad: d attn_out = d x_mid) */
    float *x_mid;           /* (Nv, Hv) x + attn_out */
    float *y2;              /* (Nv, Hv) ln_2(x_mid) */
    bt_bf16 *y2_16;         /* (Nv, Hv) bf16 storage: ln_2(x_mid) (y2 NULL) */
    float *mean2, *rstd2;   /* (Nv) */
    float *f_pre, *f;       /* (Nv, 4Hv) c_fc, QuickGELU */
    bt_bf16 *f_16;          /* (Nv, 4Hv) bf16 storage: QuickGELU output (f NULL) */
    float *mlp_out;         /* (Nv, Hv) c_proj(f) (no grad: = the block output's) */
};

/* Places the vision tower's slots of the towers phase (embeddings, hidden states, blocks)
 * in L for Bi images; stage: the phase's attention staging (layout.h attn_stage). */
void vit_layout(bt_acts *a, layout *L, const bt_model_config *c, size_t Bi,
                const attn_stage *stage);
/* Towers phase: the Bi images of m->Bi from pixel_values (Bi, 3, R, R); its backward. */
void vit_forward(bt_model *m, const float *pixel_values);
void vit_backward(bt_model *m);

#endif
