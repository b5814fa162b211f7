/* cross.c: the bridges and the cross-modal stack of BridgeTower (docs/spec.md §3.5-§3.9):
 *   for k = 0..X-1, with T_k = text->h[S+k] and I_k = vit->h[S+k]:
 *     ut = Tt(T_k) + tt0,  ui = Ti(ln_post(I_k)) + tt1           (shared Tt, Ti, ln_post)
 *     k = 0:  X'_0 = LN_text(ut),             Y'_0 = LN_image(ui)
 *     k >= 1: X'_k = LinkText_{k-1}(ut, X_{k-1}), Y'_k = LinkImage_{k-1}(ui, Y_{k-1})
 *     X_k = CrossText_k(X'_k, Y'_k),  Y_k = CrossImage_k(Y'_k, X'_k)  (same pre-update pair)
 *   then the poolers: pooler_output = [tanh(Wpt·X_{X-1}[:,0]) | tanh(Wpi·Y_{X-1}[:,0])].
 * A cross layer is a post-LN BERT layer with a cross-attention block whose keys/values come
 * from the other modality's layer input. Masks: the text padding mask on text keys (text
 * self-attention and image->text cross-attention), none on image keys.
 *
 * Two phases (model.h "Phases"): cross_towers_* computes the uni-modal halves ut_k (per text
 * row) and lnp_k, ui_k (per image row); cross_pairs_* runs everything else on P pairs
 * (text_row, image_row), reading the ut / ui rows of each pair and accumulating their
 * gradients back into those rows (a row read by several pairs gets the sum). Dropout in the
 * cross layers is keyed by the pair key (both sides, m->pair_keys).
 *
 * Deliberately not here: ITC's use of the last bridge's ui CLS row (heads.c reads
 * acts.bridges[X-1].ui and accumulates into its gradient before cross_towers_backward). */
#include <stddef.h>

#include "model/towers.h"

/* --- activation layout (layout.h: each slot with its gradient kind) ---------------------- */

/* A cross layer's internals (everything but `out`, which the caller places). */
static void cross_layer_layout(bt_cross_layer_acts *x, arena_walk *w, const bt_model_config *c,
                               size_t B, size_t T1, size_t T2, const attn_stage *stage) {
    const size_t H = (size_t)c->hidden, I = (size_t)c->text_intermediate;
    const size_t NH = (size_t)c->text_heads, N1 = B * T1, N2 = B * T2;
    x->x_cls = layout_slot_set(w, B * H);
    x->q = layout_slot_set(w, N1 * H);
    x->k = layout_slot_set(w, N1 * H);
    x->v = layout_slot_set(w, N1 * H);
    x->probs = layout_probs_slot(w, B * NH * T1 * T1, stage);
    layout_attn_out_slot(w, N1 * H, stage, &x->ctx, &x->ctx_16);
    x->attn_lin = layout_slot_set(w, N1 * H);
    x->res1 = layout_slot_set(w, N1 * H);
    x->mean1 = layout_slot_ng(w, N1);
    x->rstd1 = layout_slot_ng(w, N1);
    x->a = layout_slot_set(w, N1 * H);
    x->cq = layout_slot_set(w, N1 * H);
    x->ck = layout_slot_set(w, N2 * H);
    x->cv = layout_slot_set(w, N2 * H);
    x->cprobs = layout_probs_slot(w, B * NH * T1 * T2, stage);
    layout_attn_out_slot(w, N1 * H, stage, &x->cctx, &x->cctx_16);
    x->cattn_lin = layout_slot_set(w, N1 * H);
    x->res2 = layout_slot_ng(w, N1 * H); /* d res2 is written into d a (post_ln_backward) */
    x->mean2 = layout_slot_ng(w, N1);
    x->rstd2 = layout_slot_ng(w, N1);
    x->c = layout_slot_set(w, N1 * H);
    x->f_pre = layout_slot_set(w, N1 * I);
    layout_gemm_input_slot(w, N1 * I, &x->f, &x->f_16);
    x->ffn_lin = layout_slot_set(w, N1 * H);
    x->res3 = layout_slot_ng(w, N1 * H); /* d res3 is written into d c */
    x->mean3 = layout_slot_ng(w, N1);
    x->rstd3 = layout_slot_ng(w, N1);
}

void cross_towers_layout(bt_acts *a, layout *L, const bt_model_config *c, size_t Bt, size_t T,
                         size_t Bi) {
    arena_walk *w = L->w;
    const size_t Hv = (size_t)c->vision_hidden, H = (size_t)c->hidden;
    const size_t Nt = Bt * T, Nv = Bi * (size_t)c->np;
    /* the uni-modal halves of the bridges (forward-only: one ln_post output for all k) */
    arena_walk *e = layout_forward_group(L, BT_GROUP_FORWARD);
    for (int k = 0; k < c->cross_layers; k++) {
        bt_bridge_acts *br = &a->bridges[k];
        br->ut = layout_slot(w, Nt * H);
        if (k == 0 || !L->forward_only) {
            layout_gemm_input_slot(e, Nv * Hv, &br->lnp, &br->lnp_16);
            br->lnp_mean = layout_slot_ng(e, Nv);
            br->lnp_rstd = layout_slot_ng(e, Nv);
        } else {
            br->lnp = a->bridges[0].lnp;
            br->lnp_16 = a->bridges[0].lnp_16;
            br->lnp_mean = a->bridges[0].lnp_mean;
            br->lnp_rstd = a->bridges[0].lnp_rstd;
        }
        br->ui = layout_slot(w, Nv * H);
    }
}

void cross_pairs_layout(bt_acts *a, layout *L, const bt_model_config *c, size_t P, size_t T,
                        const attn_stage *stage) {
    arena_walk *w = L->w;
    const size_t Np = (size_t)c->np, H = (size_t)c->hidden, Nt = P * T, Nv = P * Np;
    const int full = !L->shared, fo = L->forward_only;
    /* the per-pair halves of the bridges: per k, or (forward-only) the link sums and
     * statistics in the scratch and one X'/Y' for all k */
    arena_walk *e = layout_forward_group(L, BT_GROUP_FORWARD);
    for (int k = 0; k < c->cross_layers; k++) {
        bt_bridge_acts *br = &a->bridges[k];
        if (fo && k > 1) {
            const bt_bridge_acts *b1 = &a->bridges[1];
            br->t_sum = b1->t_sum;
            br->t_mean = b1->t_mean;
            br->t_rstd = b1->t_rstd;
            br->i_sum = b1->i_sum;
            br->i_mean = b1->i_mean;
            br->i_rstd = b1->i_rstd;
        } else {
            br->t_sum = k > 0 ? layout_slot_set(e, Nt * H) : NULL;
            br->i_sum = k > 0 ? layout_slot_set(e, Nv * H) : NULL;
            if (fo && k == 1) {
                br->t_mean = a->bridges[0].t_mean;
                br->t_rstd = a->bridges[0].t_rstd;
                br->i_mean = a->bridges[0].i_mean;
                br->i_rstd = a->bridges[0].i_rstd;
            } else {
                br->t_mean = layout_slot_ng(e, Nt);
                br->t_rstd = layout_slot_ng(e, Nt);
                br->i_mean = layout_slot_ng(e, Nv);
                br->i_rstd = layout_slot_ng(e, Nv);
            }
        }
        br->xin = fo && k > 0 ? a->bridges[0].xin : layout_slot(w, Nt * H);
        br->yin = fo && k > 0 ? a->bridges[0].yin : layout_slot(w, Nv * H);
    }
    /* cross layers: internals (shared scratch unless full), outputs X_k, Y_k */
    for (int k = 0; k < c->cross_layers; k++) {
        if (k == 0 || full) {
            cross_layer_layout(&a->xt[k], layout_group_open(L, BT_GROUP_CROSS_TEXT), c, P, T, Np,
                               stage);
            cross_layer_layout(&a->xi[k], layout_group_open(L, BT_GROUP_CROSS_IMAGE), c, P, Np, T,
                               stage);
        } else {
            a->xt[k] = a->xt[0];
            a->xi[k] = a->xi[0];
        }
        a->xt[k].out = fo && k > 0 ? a->xt[0].out : layout_slot(w, Nt * H);
        a->xi[k].out = fo && k > 0 ? a->xi[0].out : layout_slot(w, Nv * H);
    }
    /* poolers */
    a->cross->cls_t = layout_slot(w, P * H);
    a->cross->cls_i = layout_slot(w, P * H);
    a->cross->pool_t_pre = layout_slot(w, P * H);
    a->cross->pool_i_pre = layout_slot(w, P * H);
    a->cross->pool_t = layout_slot(w, P * H);
    a->cross->pool_i = layout_slot(w, P * H);
    a->cross->pooler = layout_slot(w, P * 2 * H);
}

/* The image-side ids follow the text-side ids in the same order (one macro builds both). */
_Static_assert(BT_P_XIL_LN3_B - BT_P_XIL_Q_W == BT_P_XTL_LN3_B - BT_P_XTL_Q_W,
               "cross layer field lists differ");
enum { XIL_OFFSET = BT_P_XIL_Q_W - BT_P_XTL_Q_W };

typedef struct cross_layer_params {
    bt_linear q, k, v, o, cq, ck, cv, co, fc1, fc2;
    bt_norm ln1, ln2, ln3;
} cross_layer_params;

/* side 0 = text (cross_modal_text_layers), 1 = image (cross_modal_image_layers) */
static cross_layer_params cross_layer_params_get(const bt_model *m, int side, int k) {
    const int o = side ? XIL_OFFSET : 0;
    const float eps = m->cfg.text_layer_norm_eps; /* built from text_config */
#define LIN_(W, B) model_linear(m, (bt_param_id)(W + o), (bt_param_id)(B + o), k)
#define NORM_(W, B) model_norm(m, (bt_param_id)(W + o), (bt_param_id)(B + o), k, eps)
    cross_layer_params p = {
        .q = LIN_(BT_P_XTL_Q_W, BT_P_XTL_Q_B),
        .k = LIN_(BT_P_XTL_K_W, BT_P_XTL_K_B),
        .v = LIN_(BT_P_XTL_V_W, BT_P_XTL_V_B),
        .o = LIN_(BT_P_XTL_AO_W, BT_P_XTL_AO_B),
        .cq = LIN_(BT_P_XTL_CQ_W, BT_P_XTL_CQ_B),
        .ck = LIN_(BT_P_XTL_CK_W, BT_P_XTL_CK_B),
        .cv = LIN_(BT_P_XTL_CV_W, BT_P_XTL_CV_B),
        .co = LIN_(BT_P_XTL_CO_W, BT_P_XTL_CO_B),
        .fc1 = LIN_(BT_P_XTL_FC1_W, BT_P_XTL_FC1_B),
        .fc2 = LIN_(BT_P_XTL_FC2_W, BT_P_XTL_FC2_B),
        .ln1 = NORM_(BT_P_XTL_LN1_W, BT_P_XTL_LN1_B),
        .ln2 = NORM_(BT_P_XTL_LN2_W, BT_P_XTL_LN2_B),
        .ln3 = NORM_(BT_P_XTL_LN3_W, BT_P_XTL_LN3_B),
    };
#undef LIN_
#undef NORM_
    return p;
}

/* Shapes of one side's cross layer: T1 own tokens, T2 other tokens; text keys are masked. */
typedef struct cross_side {
    int side;
    size_t T1, T2;
    const float *self_bias, *enc_bias; /* (B, T1) / (B, T2) additive key bias or NULL */
    uint32_t site_tower;
} cross_side;

static cross_side cross_side_get(const bt_model *m, int side) {
    cross_side s;
    s.side = side;
    s.T1 = side ? (size_t)m->cfg.np : m->T;
    s.T2 = side ? m->T : (size_t)m->cfg.np;
    s.self_bias = side ? NULL : m->acts.pair_key_bias;
    s.enc_bias = side ? m->acts.pair_key_bias : NULL;
    s.site_tower = side ? BT_SITE_CROSS_IMAGE : BT_SITE_CROSS_TEXT;
    return s;
}

/* The layer's dropout sites; the backward regenerates the forward's masks from them. */
typedef struct cross_layer_drops {
    bt_dropout self_probs, self_out, cross_probs, cross_out, ffn_out;
} cross_layer_drops;

static cross_layer_drops cross_layer_drops_get(const bt_model *m, const cross_side *s, int k) {
    const uint32_t t = s->site_tower;
    cross_layer_drops d = {
        .self_probs = model_dropout(m, bt_site(t, k, BT_SITE_ATTN_PROBS), m->attn_dropout),
        .self_out = model_dropout(m, bt_site(t, k, BT_SITE_ATTN_OUT), m->hidden_dropout),
        .cross_probs = model_dropout(m, bt_site(t, k, BT_SITE_CROSS_PROBS), m->attn_dropout),
        .cross_out = model_dropout(m, bt_site(t, k, BT_SITE_CROSS_OUT), m->hidden_dropout),
        .ffn_out = model_dropout(m, bt_site(t, k, BT_SITE_FFN_OUT), m->hidden_dropout),
    };
    return d;
}

/* The layer's three post-LN output sublayers (towers.h), in the activations or the
 * gradients: after self-attention, after cross-attention, after the FFN. */
static post_ln_slots cross_self_out_slots(bt_cross_layer_acts *s) {
    return (post_ln_slots){s->ctx, s->ctx_16, s->attn_lin, s->res1, s->mean1, s->rstd1};
}
static post_ln_slots cross_cross_out_slots(bt_cross_layer_acts *s) {
    return (post_ln_slots){s->cctx, s->cctx_16, s->cattn_lin, s->res2, s->mean2, s->rstd2};
}
static post_ln_slots cross_ffn_out_slots(bt_cross_layer_acts *s) {
    return (post_ln_slots){s->f, s->f_16, s->ffn_lin, s->res3, s->mean3, s->rstd3};
}

/* The query rows per pair that layer k of a side runs: all T1, or 1 (each pair's CLS row) in
 * the last layer unless its features are asked for (bt_model_set_cross_features) or, on the
 * text side, the MLM head reads them. Nothing else reads the other rows of X_{X-1} and
 * Y_{X-1}: the poolers read row 0 and ITC reads the bridges. That layer still makes keys and
 * values of every row, for its CLS query to attend to, and cross-attention keys and values
 * of every row of the other side; only the queries, their attention, the output
 * projections, LayerNorms and FFN shrink to the P CLS rows (docs/model.md "The last cross
 * layer"). Each CLS row then gets the values the full layer gives it. */
static size_t cross_query_rows(const bt_model *m, const cross_side *s, int k) {
    if (k != m->cfg.cross_layers - 1 || m->cross_features) return s->T1;
    return s->side == 0 && (m->heads & BT_HEADS_MLM) ? s->T1 : 1;
}

/* The P·Tq query rows of one side's layer, their dropout keyed per pair (m->pair_keys): row
 * r of pair p has the same masks whether Tq is 1 or T1 (row 0 is row 0). */
static keyed_rows cross_rows(const bt_model *m, size_t Tq) {
    return (keyed_rows){m->P, Tq, m->pair_keys};
}

/* Attention of Tq query rows per pair (of the side's T1: their dropout masks are those of
 * the first Tq of T1 rows) against Tk keys. */
static attention_dims cross_dims(const bt_model *m, size_t Tq, size_t T1, size_t Tk) {
    size_t H = (size_t)m->cfg.hidden;
    attention_dims d = {.B = m->P, .Tq = Tq, .Tk = Tk, .NH = (size_t)m->cfg.text_heads,
                        .D = H / (size_t)m->cfg.text_heads, .ldq = H, .ldk = H, .ldv = H,
                        .ldo = H, .drop_tq = T1};
    return d;
}

/* One BridgeTowerBertCrossLayer: x (N1, H) this side's input, e (N2, H) the other side's
 * input -> a->out (Nq, H): every row, or each pair's CLS row (cross_query_rows). */
static void cross_layer_forward(bt_model *m, const cross_side *s, int k, const float *x,
                                const float *e) {
    bt_cross_layer_acts *a = s->side ? &m->acts.xi[k] : &m->acts.xt[k];
    const cross_layer_params p = cross_layer_params_get(m, s->side, k);
    const size_t H = (size_t)m->cfg.hidden, I = (size_t)m->cfg.text_intermediate;
    const size_t N1 = m->P * s->T1, N2 = m->P * s->T2;
    const size_t Tq = cross_query_rows(m, s, k), Nq = m->P * Tq;
    const attention_dims sd = cross_dims(m, Tq, s->T1, s->T1);
    const attention_dims cd = cross_dims(m, Tq, s->T1, s->T2);
    const gemm_compute cp = model_compute(m);
    const cross_layer_drops dr = cross_layer_drops_get(m, s, k);
    const keyed_rows rows = cross_rows(m, Tq);
    const post_ln_slots self_out = cross_self_out_slots(a), cross_out = cross_cross_out_slots(a);
    const post_ln_slots ffn_out = cross_ffn_out_slots(a);
    /* the query rows' input: x, or each pair's CLS row of x */
    const float *xq = x;
    if (Tq != s->T1) {
        cls_gather(a->x_cls, x, m->P, s->T1, H);
        xq = a->x_cls;
    }
    /* a = LN1(dropout(SelfAttn(x)·Woᵀ + bo) + x) */
    lin_forward(m, a->q, xq, &p.q, Nq);
    lin_forward(m, a->k, x, &p.k, N1);
    lin_forward(m, a->v, x, &p.v, N1);
    rows_attention_forward(a->ctx, kept_probs(m, a->probs), a->q, a->k, a->v, s->self_bias, &sd,
                           &dr.self_probs, m->pair_keys, cp);
    act_keep_bf16(a->ctx_16, a->ctx, Nq * H); /* ctx, cctx, f: bf16 storage (model.h) */
    post_ln_forward(m, a->a, xq, &self_out, &p.o, &p.ln1, &dr.self_out, &rows);
    /* c = LN2(dropout(CrossAttn(q = a, k/v = e)·Wo2ᵀ + bo2) + a) */
    lin_forward(m, a->cq, a->a, &p.cq, Nq);
    lin_forward(m, a->ck, e, &p.ck, N2);
    lin_forward(m, a->cv, e, &p.cv, N2);
    rows_attention_forward(a->cctx, kept_probs(m, a->cprobs), a->cq, a->ck, a->cv, s->enc_bias,
                           &cd, &dr.cross_probs, m->pair_keys, cp);
    act_keep_bf16(a->cctx_16, a->cctx, Nq * H);
    post_ln_forward(m, a->c, a->a, &cross_out, &p.co, &p.ln2, &dr.cross_out, &rows);
    /* out = LN3(dropout(GELU(c·W1ᵀ + b1)·W2ᵀ + b2) + c) */
    lin_forward(m, a->f_pre, a->c, &p.fc1, Nq);
    gelu_forward_act(a->f, a->f_16, a->f_pre, Nq * I);
    post_ln_forward(m, a->out, a->c, &ffn_out, &p.fc2, &p.ln3, &dr.ffn_out, &rows);
}

/* d->out (complete) -> dx += d(own input), de += d(other side's input). */
static void cross_layer_backward(bt_model *m, const cross_side *s, int k, float *dx, float *de,
                                 const float *x, const float *e) {
    /* checkpointing: the internals again, same dropout masks (out gets the same bits) */
    if (model_layer_recompute(m, s->side ? BT_GROUP_CROSS_IMAGE : BT_GROUP_CROSS_TEXT))
        cross_layer_forward(m, s, k, x, e);
    bt_cross_layer_acts *a = s->side ? &m->acts.xi[k] : &m->acts.xt[k]; /* only read */
    bt_cross_layer_acts *d = s->side ? &m->dacts.xi[k] : &m->dacts.xt[k];
    const cross_layer_params p = cross_layer_params_get(m, s->side, k);
    const size_t N1 = m->P * s->T1, N2 = m->P * s->T2;
    const size_t Tq = cross_query_rows(m, s, k), Nq = m->P * Tq;
    const attention_dims sd = cross_dims(m, Tq, s->T1, s->T1);
    const attention_dims cd = cross_dims(m, Tq, s->T1, s->T2);
    const gemm_compute cp = model_compute(m);
    const cross_layer_drops dr = cross_layer_drops_get(m, s, k);
    const keyed_rows rows = cross_rows(m, Tq);
    /* the query rows' input and its gradient: x and dx, or the CLS rows' own slots (their
     * gradient assigned here, then added into dx's CLS rows) */
    const int cls = Tq != s->T1;
    const float *xq = cls ? a->x_cls : x;
    float *dxq = cls ? d->x_cls : dx;
    const post_ln_slots self_out = cross_self_out_slots(a), d_self_out = cross_self_out_slots(d);
    const post_ln_slots cross_out = cross_cross_out_slots(a);
    const post_ln_slots d_cross_out = cross_cross_out_slots(d);
    const post_ln_slots ffn_out = cross_ffn_out_slots(a), d_ffn_out = cross_ffn_out_slots(d);
    /* (the layer's internal gradients are assigned by their first writer; dx and de, the
     * streams, accumulate: model.c "activation layout") */
    /* out = LN3(dropout(GELU(c·W1ᵀ + b1)·W2ᵀ + b2) + c) */
    post_ln_ffn_backward(m, d->c, d->out, a->c, a->f_pre, d->f_pre, &ffn_out, &d_ffn_out, &p.fc1,
                         &p.fc2, &p.ln3, &dr.ffn_out, &rows);
    /* c = LN2(dropout(cctx·Wo2ᵀ + bo2) + a), cctx = CrossAttn(q = a, k/v = e) */
    post_ln_backward(m, d->a, BT_DX_SET, d->c, &cross_out, &d_cross_out, &p.co, &p.ln2,
                     &dr.cross_out, &rows);
    rows_attention_backward(d->cq, d->ck, d->cv, d->cctx, a->cprobs, a->cq, a->ck, a->cv,
                            s->enc_bias, &cd, &dr.cross_probs, m->pair_keys, cp, BT_DX_SET);
    lin_backward(m, de, d->ck, e, &p.ck, N2, BT_DX_ADD);
    lin_backward(m, de, d->cv, e, &p.cv, N2, BT_DX_ADD);
    lin_backward(m, d->a, d->cq, a->a, &p.cq, Nq, BT_DX_ADD);
    /* a = LN1(dropout(ctx·Woᵀ + bo) + x), ctx = SelfAttn(x) */
    post_ln_backward(m, dxq, cls ? BT_DX_SET : BT_DX_ADD, d->a, &self_out, &d_self_out, &p.o,
                     &p.ln1, &dr.self_out, &rows);
    rows_attention_backward(d->q, d->k, d->v, d->ctx, a->probs, a->q, a->k, a->v, s->self_bias,
                            &sd, &dr.self_probs, m->pair_keys, cp, BT_DX_SET);
    lin_backward(m, dxq, d->q, xq, &p.q, Nq, BT_DX_ADD);
    if (cls) cls_scatter_add(dx, d->x_cls, m->P, s->T1, (size_t)m->cfg.hidden);
    lin_backward(m, dx, d->k, x, &p.k, N1, BT_DX_ADD);
    lin_backward(m, dx, d->v, x, &p.v, N1, BT_DX_ADD);
}

/* --- link towers ------------------------------------------------------------------------
 * sum (n) = add: u + c;  scaled_add: u·s + c;  interpolate: u·(1-β) + c·β
 * (scalar = scaled_factor or beta; unused for add). */
static void link_mix_forward(float *sum, const float *u, const float *c, const float *scalar,
                             bt_link_type type, size_t n) {
    if (type == BT_LINK_ADD) {
        residual_forward(sum, u, c, n);
        return;
    }
    const float s = *scalar;
    const float wu = type == BT_LINK_SCALED_ADD ? s : 1.0f - s;
    const float wc = type == BT_LINK_SCALED_ADD ? 1.0f : s;
#pragma omp parallel for schedule(static) if (n > 32768)
    for (long i = 0; i < (long)n; i++) sum[i] = u[i] * wu + c[i] * wc;
}

/* du += wu·dsum;  dc += wc·dsum;  dscalar += Σ u·dsum (scaled_add) or Σ (c - u)·dsum
 * (interpolate), summed in double. */
static void link_mix_backward(float *du, float *dc, float *dscalar, const float *dsum,
                              const float *u, const float *c, const float *scalar,
                              bt_link_type type, size_t n) {
    if (type == BT_LINK_ADD) {
        residual_backward(du, dc, dsum, n, BT_DX_ADD);
        return;
    }
    const float s = *scalar;
    const float wu = type == BT_LINK_SCALED_ADD ? s : 1.0f - s;
    const float wc = type == BT_LINK_SCALED_ADD ? 1.0f : s;
    double acc = 0.0;
#pragma omp parallel for reduction(+ : acc) schedule(static) if (n > 32768)
    for (long i = 0; i < (long)n; i++) {
        du[i] += wu * dsum[i];
        dc[i] += wc * dsum[i];
        acc += (double)dsum[i] * (type == BT_LINK_SCALED_ADD ? u[i] : c[i] - u[i]);
    }
    if (dscalar) *dscalar += (float)acc;
}

/* Pointers of link tower j = k-1 of one side (scalar NULL for "add"). */
typedef struct link_params {
    bt_norm ln;
    const float *scalar;
    float *dscalar;
} link_params;

static link_params link_params_get(const bt_model *m, int side, int j) {
    link_params p;
    const float eps = m->cfg.layer_norm_eps;
    p.ln = side ? model_norm(m, BT_P_XI_LINK_LN_W, BT_P_XI_LINK_LN_B, j, eps)
                : model_norm(m, BT_P_XT_LINK_LN_W, BT_P_XT_LINK_LN_B, j, eps);
    p.scalar = NULL;
    p.dscalar = NULL;
    bt_param_id sid = BT_P_COUNT;
    if (m->cfg.link_tower_type == BT_LINK_SCALED_ADD)
        sid = side ? BT_P_XI_LINK_SCALE : BT_P_XT_LINK_SCALE;
    if (m->cfg.link_tower_type == BT_LINK_INTERPOLATE)
        sid = side ? BT_P_XI_LINK_BETA : BT_P_XT_LINK_BETA;
    if (sid != BT_P_COUNT) {
        p.scalar = bt_param_ptr(&m->table, m->params, sid, j);
        p.dscalar = m->grads ? bt_param_ptr(&m->table, m->grads, sid, j) : NULL;
    }
    return p;
}

/* --- the stack ------------------------------------------------------------------------- */

/* The stack's weights outside the layers: the modality transforms Tt and Ti, ln_post, the
 * k = 0 LayerNorms and the two poolers (forward and backward read the same views). */
typedef struct cross_stack_params {
    bt_linear tt, ti, pt, pi;
    bt_norm ln_post, ln_t0, ln_i0;
} cross_stack_params;

static cross_stack_params cross_stack_params_get(const bt_model *m) {
    const bt_model_config *c = &m->cfg;
    cross_stack_params p = {
        .tt = model_linear(m, BT_P_XT_TRANSFORM_W, BT_P_XT_TRANSFORM_B, 0),
        .ti = model_linear(m, BT_P_XI_TRANSFORM_W, BT_P_XI_TRANSFORM_B, 0),
        .pt = model_linear(m, BT_P_XT_POOL_W, BT_P_XT_POOL_B, 0),
        .pi = model_linear(m, BT_P_XI_POOL_W, BT_P_XI_POOL_B, 0),
        .ln_post =
            model_norm(m, BT_P_VIS_LN_POST_W, BT_P_VIS_LN_POST_B, 0, c->vision_layer_norm_eps),
        .ln_t0 = model_norm(m, BT_P_XT_LN_W, BT_P_XT_LN_B, 0, c->layer_norm_eps),
        .ln_i0 = model_norm(m, BT_P_XI_LN_W, BT_P_XI_LN_B, 0, c->layer_norm_eps),
    };
    return p;
}

/* Tower row of pair p on one side (0 text, 1 image). */
static size_t pair_row(const bt_model *m, size_t p, int side) {
    return (size_t)(side ? m->pairs[p].image_row : m->pairs[p].text_row);
}

/* 1 when pair p reads tower row p on this side for every p (bt_forward's (i, i) pairs): the
 * per-pair loops below then run as one call over all rows (same result, fewer calls). */
static int pairs_identity(const bt_model *m, int side) {
    for (size_t p = 0; p < m->P; p++)
        if (pair_row(m, p, side) != p) return 0;
    return 1;
}

/* out rows of pair p (L rows of C) = LN(u rows of the pair's tower row): one call per pair, or
 * one call in all when the pairs are the identity. */
static void pairs_norm_forward(const bt_model *m, int side, float *out, float *mean, float *rstd,
                               const float *u, const bt_norm *N, size_t L) {
    const size_t C = N->c;
    if (pairs_identity(m, side)) {
        norm_forward(out, mean, rstd, u, N, m->P * L);
        return;
    }
    for (size_t p = 0; p < m->P; p++)
        norm_forward(out + p * L * C, mean + p * L, rstd + p * L, u + pair_row(m, p, side) * L * C,
                     N, L);
}

/* du rows of the pair's tower row += LN backward of pair p's rows. */
static void pairs_norm_backward(const bt_model *m, int side, float *du, const float *dout,
                                const float *u, const float *mean, const float *rstd,
                                const bt_norm *N, size_t L) {
    const size_t C = N->c;
    if (pairs_identity(m, side)) {
        norm_backward(du, dout, u, mean, rstd, N, m->P * L, BT_DX_ADD);
        return;
    }
    for (size_t p = 0; p < m->P; p++) {
        const size_t r = pair_row(m, p, side);
        norm_backward(du + r * L * C, dout + p * L * C, u + r * L * C, mean + p * L, rstd + p * L,
                      N, L, BT_DX_ADD);
    }
}

/* sum rows of pair p (L rows of H) = mix(u rows of the pair's tower row, c rows of p). */
static void pairs_mix_forward(const bt_model *m, int side, float *sum, const float *u,
                              const float *c, const float *scalar, size_t L) {
    const size_t H = (size_t)m->cfg.hidden, n = L * H;
    if (pairs_identity(m, side)) {
        link_mix_forward(sum, u, c, scalar, m->cfg.link_tower_type, m->P * n);
        return;
    }
    for (size_t p = 0; p < m->P; p++)
        link_mix_forward(sum + p * n, u + pair_row(m, p, side) * n, c + p * n, scalar,
                         m->cfg.link_tower_type, n);
}

static void pairs_mix_backward(const bt_model *m, int side, float *du, float *dc, float *dscalar,
                               const float *dsum, const float *u, const float *c,
                               const float *scalar, size_t L) {
    const size_t H = (size_t)m->cfg.hidden, n = L * H;
    if (pairs_identity(m, side)) {
        link_mix_backward(du, dc, dscalar, dsum, u, c, scalar, m->cfg.link_tower_type, m->P * n);
        return;
    }
    for (size_t p = 0; p < m->P; p++) {
        const size_t r = pair_row(m, p, side);
        link_mix_backward(du + r * n, dc + p * n, dscalar, dsum + p * n, u + r * n, c + p * n,
                          scalar, m->cfg.link_tower_type, n);
    }
}

void cross_towers_forward(bt_model *m) {
    bt_acts *a = &m->acts;
    const bt_model_config *c = &m->cfg;
    const size_t H = (size_t)c->hidden;
    const size_t Nt = m->Bt * m->T, Nv = m->Bi * (size_t)c->np;
    const cross_stack_params sp = cross_stack_params_get(m);
    const float *tt0 = m->p.type_emb, *tt1 = m->p.type_emb + H; /* modality rows 0 and 1 */

    for (int k = 0; k < c->cross_layers; k++) {
        bt_bridge_acts *br = &a->bridges[k];
        /* ut = Tt(T_k) + tt0 */
        if (Nt) {
            lin_forward(m, br->ut, a->text->h[c->split + k], &sp.tt, Nt);
            bias_add_forward(br->ut, br->ut, tt0, Nt, H);
        }
        /* ui = Ti(ln_post(I_k)) + tt1 */
        if (Nv) {
            norm_forward_act(br->lnp, br->lnp_16, br->lnp_mean, br->lnp_rstd,
                             a->vit->h[c->split + k], &sp.ln_post, Nv);
            lin_forward_act(m, br->ui, br->lnp, br->lnp_16, &sp.ti, Nv);
            bias_add_forward(br->ui, br->ui, tt1, Nv, H);
        }
    }
}

void cross_towers_backward(bt_model *m) {
    const bt_acts *a = &m->acts;
    bt_acts *d = &m->dacts;
    const bt_model_config *c = &m->cfg;
    const size_t H = (size_t)c->hidden;
    const size_t Nt = m->Bt * m->T, Nv = m->Bi * (size_t)c->np;
    const cross_stack_params sp = cross_stack_params_get(m);
    float *dtt0 = m->g.type_emb, *dtt1 = m->g.type_emb ? m->g.type_emb + H : NULL;

    for (int k = c->cross_layers - 1; k >= 0; k--) {
        const bt_bridge_acts *br = &a->bridges[k];
        bt_bridge_acts *dbr = &d->bridges[k];
        /* ut = Tt(T_k) + tt0 */
        if (Nt) {
            bias_add_backward(NULL, dtt0, dbr->ut, Nt, H);
            lin_backward(m, d->text->h[c->split + k], dbr->ut, a->text->h[c->split + k], &sp.tt,
                         Nt, BT_DX_ADD);
        }
        /* ui = Ti(lnp) + tt1, lnp = ln_post(I_k) */
        if (Nv) {
            bias_add_backward(NULL, dtt1, dbr->ui, Nv, H);
            lin_backward_act(m, dbr->lnp, dbr->ui, br->lnp, br->lnp_16, &sp.ti, Nv, BT_DX_SET);
            norm_backward(d->vit->h[c->split + k], dbr->lnp, a->vit->h[c->split + k], br->lnp_mean,
                          br->lnp_rstd, &sp.ln_post, Nv, BT_DX_ADD);
        }
    }
}

void cross_pairs_forward(bt_model *m) {
    bt_acts *a = &m->acts;
    const bt_model_config *c = &m->cfg;
    const size_t P = m->P, H = (size_t)c->hidden, T = m->T, Np = (size_t)c->np;
    const size_t Nt = P * T, Nv = P * Np;
    const cross_stack_params sp = cross_stack_params_get(m);
    const cross_side st = cross_side_get(m, 0), si = cross_side_get(m, 1);

    for (int k = 0; k < c->cross_layers; k++) {
        bt_bridge_acts *br = &a->bridges[k];
        if (k == 0) {
            /* X'_0 = LN_text(ut[t_p]), Y'_0 = LN_image(ui[i_p]) */
            pairs_norm_forward(m, 0, br->xin, br->t_mean, br->t_rstd, br->ut, &sp.ln_t0, T);
            pairs_norm_forward(m, 1, br->yin, br->i_mean, br->i_rstd, br->ui, &sp.ln_i0, Np);
        } else {
            /* X'_k = LN_link(mix(ut[t_p], X_{k-1})), Y'_k likewise */
            const link_params lt = link_params_get(m, 0, k - 1), li = link_params_get(m, 1, k - 1);
            pairs_mix_forward(m, 0, br->t_sum, br->ut, a->xt[k - 1].out, lt.scalar, T);
            norm_forward(br->xin, br->t_mean, br->t_rstd, br->t_sum, &lt.ln, Nt);
            pairs_mix_forward(m, 1, br->i_sum, br->ui, a->xi[k - 1].out, li.scalar, Np);
            norm_forward(br->yin, br->i_mean, br->i_rstd, br->i_sum, &li.ln, Nv);
        }
        /* both layers read the same pre-update pair (X'_k, Y'_k) */
        cross_layer_forward(m, &st, k, br->xin, br->yin);
        cross_layer_forward(m, &si, k, br->yin, br->xin);
    }

    /* poolers: tanh(dense(CLS)) per side; pooler_output = [text | image] */
    const int last = c->cross_layers - 1;
    cls_gather(a->cross->cls_t, a->xt[last].out, P, cross_query_rows(m, &st, last), H);
    cls_gather(a->cross->cls_i, a->xi[last].out, P, cross_query_rows(m, &si, last), H);
    lin_forward(m, a->cross->pool_t_pre, a->cross->cls_t, &sp.pt, P);
    lin_forward(m, a->cross->pool_i_pre, a->cross->cls_i, &sp.pi, P);
    tanh_forward(a->cross->pool_t, a->cross->pool_t_pre, P * H);
    tanh_forward(a->cross->pool_i, a->cross->pool_i_pre, P * H);
    for (size_t b = 0; b < P; b++)
        for (size_t i = 0; i < H; i++) {
            a->cross->pooler[b * 2 * H + i] = a->cross->pool_t[b * H + i];
            a->cross->pooler[b * 2 * H + H + i] = a->cross->pool_i[b * H + i];
        }
}

void cross_pairs_backward(bt_model *m) {
    const bt_acts *a = &m->acts;
    bt_acts *d = &m->dacts;
    const bt_model_config *c = &m->cfg;
    const size_t P = m->P, H = (size_t)c->hidden, T = m->T, Np = (size_t)c->np;
    const size_t Nt = P * T, Nv = P * Np;
    const cross_stack_params sp = cross_stack_params_get(m);
    const cross_side st = cross_side_get(m, 0), si = cross_side_get(m, 1);

    /* poolers: pooler = [tanh(pool_t_pre) | tanh(pool_i_pre)], pool_*_pre = dense(CLS) */
    const int last = c->cross_layers - 1;
    for (size_t b = 0; b < P; b++)
        for (size_t i = 0; i < H; i++) {
            d->cross->pool_t[b * H + i] += d->cross->pooler[b * 2 * H + i];
            d->cross->pool_i[b * H + i] += d->cross->pooler[b * 2 * H + H + i];
        }
    tanh_backward(d->cross->pool_t_pre, d->cross->pool_t, a->cross->pool_t, P * H);
    tanh_backward(d->cross->pool_i_pre, d->cross->pool_i, a->cross->pool_i, P * H);
    lin_backward(m, d->cross->cls_t, d->cross->pool_t_pre, a->cross->cls_t, &sp.pt, P, BT_DX_ADD);
    lin_backward(m, d->cross->cls_i, d->cross->pool_i_pre, a->cross->cls_i, &sp.pi, P, BT_DX_ADD);
    cls_scatter_add(d->xt[last].out, d->cross->cls_t, P, cross_query_rows(m, &st, last), H);
    cls_scatter_add(d->xi[last].out, d->cross->cls_i, P, cross_query_rows(m, &si, last), H);

    for (int k = last; k >= 0; k--) {
        const bt_bridge_acts *br = &a->bridges[k];
        bt_bridge_acts *dbr = &d->bridges[k];
        /* X_k = CrossText_k(X'_k, Y'_k), Y_k = CrossImage_k(Y'_k, X'_k) */
        cross_layer_backward(m, &si, k, dbr->yin, dbr->xin, br->yin, br->xin);
        cross_layer_backward(m, &st, k, dbr->xin, dbr->yin, br->xin, br->yin);
        /* into the tower rows: dut[t_p] += ..., dui[i_p] += ... */
        if (k == 0) {
            pairs_norm_backward(m, 0, dbr->ut, dbr->xin, br->ut, br->t_mean, br->t_rstd,
                                &sp.ln_t0, T);
            pairs_norm_backward(m, 1, dbr->ui, dbr->yin, br->ui, br->i_mean, br->i_rstd,
                                &sp.ln_i0, Np);
        } else {
            const link_params lt = link_params_get(m, 0, k - 1), li = link_params_get(m, 1, k - 1);
            norm_backward(dbr->t_sum, dbr->xin, br->t_sum, br->t_mean, br->t_rstd, &lt.ln, Nt,
                          BT_DX_SET);
            pairs_mix_backward(m, 0, dbr->ut, d->xt[k - 1].out, lt.dscalar, dbr->t_sum, br->ut,
                               a->xt[k - 1].out, lt.scalar, T);
            norm_backward(dbr->i_sum, dbr->yin, br->i_sum, br->i_mean, br->i_rstd, &li.ln, Nv,
                          BT_DX_SET);
            pairs_mix_backward(m, 1, dbr->ui, d->xi[k - 1].out, li.dscalar, dbr->i_sum, br->ui,
                               a->xi[k - 1].out, li.scalar, Np);
        }
        bt_grads_final(m, BT_GRAD_EV_CROSS_LAYER, k); /* model.h: gradients-final events */
    }
}
