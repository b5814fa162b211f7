/* vit.c: the CLIP ViT vision tower of BridgeTower (docs/spec.md §3.4): patch embedding as
 * a GEMM over unfolded patches, CLS token, positions, ln_pre, and Lv pre-LN residual blocks
 * with fused [Q;K;V] in_proj and QuickGELU. No masks, no dropout in this tower.
 *
 * Runs on the Bi images of the towers phase. Block outputs stay in m->acts.vit->h[l+1]
 * WITHOUT ln_post: ln_post is applied per bridge (cross.c, which also feeds the ITC image
 * path), and its gradients arrive in m->dacts.vit->h[].
 *
 * Deliberately not here: position-embedding interpolation for other image sizes, gradients
 * w.r.t. pixel values (nothing upstream needs them). */
#include <stddef.h>
#include <string.h>

#include "model/towers.h"

/* --- activation layout (layout.h: each slot with its gradient kind) ---------------------- */

/* One block's internals: written by vit_layer_forward, read by vit_layer_backward. */
static void vit_layer_layout(bt_vit_layer_acts *x, arena_walk *w, const bt_model_config *c,
                             size_t Bi, const attn_stage *stage) {
    const size_t Hv = (size_t)c->vision_hidden, Np = (size_t)c->np, Nv = Bi * Np;
    const size_t NH = (size_t)c->vision_heads;
    layout_gemm_input_slot(w, Nv * Hv, &x->y1, &x->y1_16);
    x->mean1 = layout_slot_ng(w, Nv);
    x->rstd1 = layout_slot_ng(w, Nv);
    x->qkv = layout_slot_set(w, Nv * 3 * Hv);
    x->probs = layout_probs_slot(w, Bi * NH * Np * Np, stage);
    layout_attn_out_slot(w, Nv * Hv, stage, &x->ctx, &x->ctx_16);
    x->attn_out = layout_slot_ng(w, Nv * Hv); /* d attn_out = d x_mid, read in place (vit.c) */
    x->x_mid = layout_slot_set(w, Nv * Hv);
    layout_gemm_input_slot(w, Nv * Hv, &x->y2, &x->y2_16);
    x->mean2 = layout_slot_ng(w, Nv);
    x->rstd2 = layout_slot_ng(w, Nv);
    x->f_pre = layout_slot_set(w, Nv * 4 * Hv);
    layout_gemm_input_slot(w, Nv * 4 * Hv, &x->f, &x->f_16);
    x->mlp_out = layout_slot_ng(w, Nv * Hv); /* d mlp_out = the block's dout, read in place */
}

void vit_layout(bt_acts *a, layout *L, const bt_model_config *c, size_t Bi,
                const attn_stage *stage) {
    const size_t Hv = (size_t)c->vision_hidden, Nv = Bi * (size_t)c->np;
    const size_t Gp = Bi * (size_t)c->num_patches;
    const size_t PP = (size_t)c->patch_size, CH = (size_t)c->num_channels;
    arena_walk *e = layout_forward_group(L, BT_GROUP_FORWARD);
    a->vit->patches = layout_slot_ng(e, Gp * CH * PP * PP);
    a->vit->patch_emb = layout_slot(e, Gp * Hv);
    a->vit->emb = layout_slot_set(e, Nv * Hv);
    a->vit->emb_mean = layout_slot_ng(e, Nv);
    a->vit->emb_rstd = layout_slot_ng(e, Nv);
    layout_hidden(a->vit->h, L, c->vision_layers, c->split, Nv * Hv);
    for (int l = 0; l < c->vision_layers; l++) {
        if (l == 0 || !L->shared)
            vit_layer_layout(&a->vit->layers[l], layout_group_open(L, BT_GROUP_VIT), c, Bi,
                             stage);
        else
            a->vit->layers[l] = a->vit->layers[0];
    }
}

typedef struct vit_layer_params {
    bt_linear in, out, fc, proj;
    bt_norm ln1, ln2;
} vit_layer_params;

static vit_layer_params vit_layer_params_get(const bt_model *m, int l) {
    float eps = m->cfg.vision_layer_norm_eps;
    vit_layer_params p = {
        .in = model_linear(m, BT_P_VL_IN_W, BT_P_VL_IN_B, l),
        .out = model_linear(m, BT_P_VL_OUT_W, BT_P_VL_OUT_B, l),
        .fc = model_linear(m, BT_P_VL_FC_W, BT_P_VL_FC_B, l),
        .proj = model_linear(m, BT_P_VL_PROJ_W, BT_P_VL_PROJ_B, l),
        .ln1 = model_norm(m, BT_P_VL_LN1_W, BT_P_VL_LN1_B, l, eps),
        .ln2 = model_norm(m, BT_P_VL_LN2_W, BT_P_VL_LN2_B, l, eps),
    };
    return p;
}

static attention_dims vit_attn_dims(const bt_model *m) {
    size_t Hv = (size_t)m->cfg.vision_hidden, Np = (size_t)m->cfg.np;
    attention_dims d = {.B = m->Bi, .Tq = Np, .Tk = Np, .NH = (size_t)m->cfg.vision_heads,
                        .D = (size_t)m->cfg.vision_head_size,
                        .ldq = 3 * Hv, .ldk = 3 * Hv, .ldv = 3 * Hv, .ldo = Hv};
    return d;
}

/* im2col of a stride-P, kernel-P conv: patches (B*G², CH*P*P), row (b, gy, gx) row-major,
 * column (c, ky, kx) = pix[b, c, gy*P + ky, gx*P + kx], the order of the conv weight
 * (Hv, CH, P, P) flattened. */
static void vit_unfold_patches(float *patches, const float *pix, size_t B, size_t CH, size_t R,
                               size_t P) {
    const size_t G = R / P, K = CH * P * P;
#pragma omp parallel for collapse(2) schedule(static)
    for (long b = 0; b < (long)B; b++) {
        for (long g = 0; g < (long)(G * G); g++) {
            size_t gy = (size_t)g / G, gx = (size_t)g % G;
            float *row = patches + ((size_t)b * G * G + (size_t)g) * K;
            for (size_t c = 0; c < CH; c++)
                for (size_t ky = 0; ky < P; ky++)
                    memcpy(row + (c * P + ky) * P,
                           pix + (((size_t)b * CH + c) * R + gy * P + ky) * R + gx * P,
                           P * sizeof *row);
        }
    }
}

/* emb (B, Np, Hv): row 0 = cls + pos[0], row 1+p = patch_emb[b, p] + pos[1+p]. */
static void vit_assemble_forward(float *emb, const float *patch_emb, const float *cls,
                                 const float *pos, size_t B, size_t Np, size_t Hv) {
    for (size_t b = 0; b < B; b++) {
        for (size_t t = 0; t < Np; t++) {
            float *e = emb + (b * Np + t) * Hv;
            const float *src = t == 0 ? cls : patch_emb + (b * (Np - 1) + t - 1) * Hv;
            const float *pr = pos + t * Hv;
            for (size_t i = 0; i < Hv; i++) e[i] = src[i] + pr[i];
        }
    }
}

/* dcls += Σ_b demb[b, 0];  dpos[t] += Σ_b demb[b, t];  dpatch[b, p] += demb[b, 1+p] */
static void vit_assemble_backward(float *dpatch_emb, float *dcls, float *dpos, const float *demb,
                                  size_t B, size_t Np, size_t Hv) {
    for (size_t b = 0; b < B; b++) {
        for (size_t t = 0; t < Np; t++) {
            const float *de = demb + (b * Np + t) * Hv;
            float *dsrc = t == 0 ? dcls : dpatch_emb + (b * (Np - 1) + t - 1) * Hv;
            float *dp = dpos + t * Hv;
            for (size_t i = 0; i < Hv; i++) {
                if (dsrc) dsrc[i] += de[i];
                if (dp) dp[i] += de[i];
            }
        }
    }
}

/* One pre-LN CLIP block: x (Nv, Hv) -> out (Nv, Hv). */
static void vit_layer_forward(bt_model *m, int l, float *out, const float *x) {
    bt_vit_layer_acts *a = &m->acts.vit->layers[l];
    const vit_layer_params p = vit_layer_params_get(m, l);
    const size_t Hv = (size_t)m->cfg.vision_hidden, N = m->Bi * (size_t)m->cfg.np;
    const attention_dims ad = vit_attn_dims(m);
    /* x_mid = x + out_proj(attn(ln_1(x)))  (y1, ctx, y2, f: bf16 with bf16 storage, model.h) */
    norm_forward_act(a->y1, a->y1_16, a->mean1, a->rstd1, x, &p.ln1, N);
    lin_forward_act(m, a->qkv, a->y1, a->y1_16, &p.in, N);
    attention_forward(a->ctx, kept_probs(m, a->probs), a->qkv, a->qkv + Hv, a->qkv + 2 * Hv,
                      NULL, &ad, NULL, model_compute(m));
    act_keep_bf16(a->ctx_16, a->ctx, N * Hv);
    lin_forward_act(m, a->attn_out, a->ctx, a->ctx_16, &p.out, N);
    residual_forward(a->x_mid, x, a->attn_out, N * Hv);
    /* out = x_mid + c_proj(QuickGELU(c_fc(ln_2(x_mid)))) */
    norm_forward_act(a->y2, a->y2_16, a->mean2, a->rstd2, a->x_mid, &p.ln2, N);
    lin_forward_act(m, a->f_pre, a->y2, a->y2_16, &p.fc, N);
    quick_gelu_forward_act(a->f, a->f_16, a->f_pre, N * 4 * Hv);
    lin_forward_act(m, a->mlp_out, a->f, a->f_16, &p.proj, N);
    residual_forward(out, a->x_mid, a->mlp_out, N * Hv);
}

static void vit_layer_backward(bt_model *m, int l, float *dx, const float *dout,
                               const float *x) {
    /* checkpointing: the internals again (the output is rewritten with the same bits) */
    if (model_layer_recompute(m, BT_GROUP_VIT)) vit_layer_forward(m, l, m->acts.vit->h[l + 1], x);
    const bt_vit_layer_acts *a = &m->acts.vit->layers[l];
    bt_vit_layer_acts *d = &m->dacts.vit->layers[l];
    const vit_layer_params p = vit_layer_params_get(m, l);
    const size_t Hv = (size_t)m->cfg.vision_hidden, N = m->Bi * (size_t)m->cfg.np;
    const attention_dims ad = vit_attn_dims(m);
    /* (SET: the block's internal gradients are assigned by their first writer; dx, the
     * stream, accumulates: model.c "activation layout") */
    /* out = x_mid + mlp_out: d mlp_out = dout, which c_proj's backward reads where it lies,
     * and d x_mid = dout + ln_2's backward, which writes both terms in one pass below. (A
     * copy of dout would carry the same bits: dout, an accumulated stream, holds no -0 for
     * SET's 0 + v to change, model.c "activation layout"; so d x_mid = dout + v is the old
     * copy-then-add bit for bit; the same for d attn_out = d x_mid below.) */
    /* mlp_out = c_proj(f), f = QuickGELU(f_pre), f_pre = c_fc(y2), y2 = ln_2(x_mid) */
    lin_backward_act(m, d->f, dout, a->f, a->f_16, &p.proj, N, BT_DX_SET);
    act_lin_backward(m, d->y2, d->f_pre, d->f, a->f_pre, 1, a->y2, a->y2_16, &p.fc, N,
                     BT_DX_SET);
    layernorm_backward_residual(d->x_mid, p.ln2.dw, p.ln2.db, d->y2, dout, a->x_mid, p.ln2.w,
                                a->mean2, a->rstd2, N, p.ln2.c, BT_DX_SET);
    /* x_mid = x + attn_out: dx += d x_mid (below, in ln_1's backward pass), d attn_out =
     * d x_mid (read in place); attn_out = out_proj(ctx) */
    lin_backward_act(m, d->ctx, d->x_mid, a->ctx, a->ctx_16, &p.out, N, BT_DX_SET);
    /* ctx = attention(Q, K, V), [Q|K|V] = in_proj(y1), y1 = ln_1(x) */
    attention_backward(d->qkv, d->qkv + Hv, d->qkv + 2 * Hv, d->ctx, a->probs, a->qkv,
                       a->qkv + Hv, a->qkv + 2 * Hv, NULL, &ad, NULL, model_compute(m),
                       BT_DX_SET);
    lin_backward_act(m, d->y1, d->qkv, a->y1, a->y1_16, &p.in, N, BT_DX_SET);
    /* dx += d x_mid (the residual), then += ln_1's backward: one pass, the same two sums in
     * that order (layernorm_backward_residual BT_DX_ADD) */
    layernorm_backward_residual(dx, p.ln1.dw, p.ln1.db, d->y1, d->x_mid, x, p.ln1.w, a->mean1,
                                a->rstd1, N, p.ln1.c, BT_DX_ADD);
}

void vit_forward(bt_model *m, const float *pixel_values) {
    bt_acts *a = &m->acts;
    const bt_model_config *c = &m->cfg;
    const size_t B = m->Bi, Hv = (size_t)c->vision_hidden, Np = (size_t)c->np;
    const size_t P = (size_t)c->patch_size, CH = (size_t)c->num_channels;
    const bt_linear patch = model_linear(m, BT_P_VIS_PATCH_W, BT_P_COUNT, 0);
    const bt_norm ln_pre = model_norm(m, BT_P_VIS_LN_PRE_W, BT_P_VIS_LN_PRE_B, 0,
                                      c->vision_layer_norm_eps);
    /* conv(stride P, no bias) = unfold · W_patchᵀ */
    vit_unfold_patches(a->vit->patches, pixel_values, B, CH, (size_t)c->image_size, P);
    lin_forward(m, a->vit->patch_emb, a->vit->patches, &patch, B * (Np - 1));
    /* [CLS; patches] + positions, then ln_pre */
    vit_assemble_forward(a->vit->emb, a->vit->patch_emb, m->p.vis_cls, m->p.vis_pos, B, Np, Hv);
    norm_forward(a->vit->h[0], a->vit->emb_mean, a->vit->emb_rstd, a->vit->emb, &ln_pre, B * Np);

    for (int l = 0; l < c->vision_layers; l++)
        vit_layer_forward(m, l, a->vit->h[l + 1], a->vit->h[l]);
}

void vit_backward(bt_model *m) {
    const bt_acts *a = &m->acts;
    bt_acts *d = &m->dacts;
    const bt_model_config *c = &m->cfg;
    const size_t B = m->Bi, Hv = (size_t)c->vision_hidden, Np = (size_t)c->np;
    const bt_linear patch = model_linear(m, BT_P_VIS_PATCH_W, BT_P_COUNT, 0);
    const bt_norm ln_pre = model_norm(m, BT_P_VIS_LN_PRE_W, BT_P_VIS_LN_PRE_B, 0,
                                      c->vision_layer_norm_eps);

    for (int l = c->vision_layers - 1; l >= 0; l--) {
        vit_layer_backward(m, l, d->vit->h[l], d->vit->h[l + 1], a->vit->h[l]);
        bt_grads_final(m, BT_GRAD_EV_VIT_LAYER, l); /* model.h: gradients-final events */
    }

    norm_backward(d->vit->emb, d->vit->h[0], a->vit->emb, a->vit->emb_mean, a->vit->emb_rstd,
                  &ln_pre, B * Np, BT_DX_SET);
    vit_assemble_backward(d->vit->patch_emb, m->g.vis_cls, m->g.vis_pos, d->vit->emb, B, Np, Hv);
    /* patch_emb = patches · W_patchᵀ: weight gradient only (no pixel gradient) */
    lin_backward(m, NULL, d->vit->patch_emb, a->vit->patches, &patch, B * (Np - 1), BT_DX_ADD);
    bt_grads_final(m, BT_GRAD_EV_VIT_EMB, 0);
}
