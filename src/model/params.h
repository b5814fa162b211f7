/* params.h: THE parameter table of BridgeTower. Every tensor of the model (HF key pattern,
 * shape expression, init rule, weight-decay flag, head) is listed once, in BT_PARAM_LIST
 * below; everything else is derived from that list:
 *   - bt_param_id (enum BT_P_<ID>) and the struct of named views bt_param_views,
 *   - the layout of ONE contiguous fp32 arena (master weights); gradients, AdamW m and v and
 *     the bf16 shadow copy use the same offsets,
 *   - the checkpoint key map (HF state-dict keys, `bridgetower.` prefix on backbone keys),
 *   - the no-decay flags, the init rules and the tensor names tests print.
 *
 * Per-layer tensors (key pattern with "{i}") are stored stacked: repetition l of field F
 * sits at fields[F].offset + l * fields[F].numel, so a layer's view is an offset, and the
 * checkpoint tensor "...layer.{l}..." maps to that slice.
 *
 * Init (bt_params_init, HF _init_weights as docs/spec.md §6 recommends): Linear, Conv and
 * Embedding weights N(0, (0.05·f)²); in the vision tower the CLIP stds with the vision
 * tower's own width W and depth Lv: in_proj/class/position N(0, W^-1/2·f), out_proj and
 * c_proj N(0, W^-1/2·(2Lv)^-1/2·f), c_fc N(0, (2W)^-1/2·f); biases 0; LayerNorm 1/0;
 * logit_scale = logit_scale_init_value; scaled_factor 1; beta 0.5. f = initializer_factor.
 * RNG: each tensor (one layer of a field) draws from its own stream, seeded by
 * splitmix64(seed XOR fnv1a64(HF key)), with xoshiro256** and Box-Muller in double: the
 * values of a tensor do not depend on which heads are built, the thread count or the order.
 * (This does not reproduce torch's RNG; parity tests load weights from fixtures instead.)
 *
 * Weight decay (HF Trainer rule, get_decay_parameter_names): no decay for biases (keys
 * ending in "bias", including in_proj_bias and mlm_score.bias) and for the parameters of
 * LayerNorm modules; everything else (class/position embeddings, logit_scale,
 * scaled_factor, beta included) is decayed.
 *
 * Deliberately not here: reading full HF checkpoints with missing/unexpected-key reports and
 * writing checkpoints (built on bt_param_table_find / tensors[] by the checkpoint module);
 * this file only has a strict loader for tests (bt_params_load_safetensors). */
#ifndef BT_PARAMS_H
#define BT_PARAMS_H

#include <stddef.h>
#include <stdint.h>

#include "model/config.h"
#include "dtype.h"
#include "status.h"

/* Symbolic dimensions of shape expressions (resolved by bt_dim_value from the config). */
typedef enum {
    BT_D_NONE, /* unused trailing dimension */
    BT_D_V,    /* vocab_size */
    BT_D_HT,   /* text width */
    BT_D_IT,   /* text FFN width */
    BT_D_PMAX, /* max_position_embeddings */
    BT_D_TYPES,/* text type_vocab_size */
    BT_D_HV,   /* vision width */
    BT_D_HV3,  /* 3·Hv (fused q/k/v) */
    BT_D_HV4,  /* 4·Hv (CLIP MLP) */
    BT_D_CH,   /* num_channels (3) */
    BT_D_P,    /* patch size */
    BT_D_NP,   /* image tokens G²+1 */
    BT_D_H,    /* cross width */
    BT_D_H2,   /* 2·H (pooler output) */
    BT_D_TWO,  /* 2 (modality types, ITM classes) */
    BT_D_C,    /* contrastive_hidden_size */
    BT_D_COUNT
} bt_dim;

/* How many times a field repeats (the {i} of its key). */
typedef enum {
    BT_REP_ONE,    /* a single tensor, no {i} */
    BT_REP_TEXT,   /* Lt text layers */
    BT_REP_VISION, /* Lv vision blocks */
    BT_REP_CROSS,  /* X cross layers */
    BT_REP_LINK,   /* X-1 link towers */
} bt_rep;

typedef enum {
    BT_INIT_NORMAL,      /* N(0, 0.05·f): Linear / Conv / Embedding weights */
    BT_INIT_CLIP_ATTN,   /* N(0, Hv^-1/2·f) */
    BT_INIT_CLIP_PROJ,   /* N(0, Hv^-1/2·(2Lv)^-1/2·f) */
    BT_INIT_CLIP_FC,     /* N(0, (2Hv)^-1/2·f) */
    BT_INIT_ZEROS,
    BT_INIT_ONES,
    BT_INIT_HALF,        /* 0.5 (link-tower beta) */
    BT_INIT_LOGIT_SCALE, /* logit_scale_init_value */
} bt_init;

typedef enum {
    BT_HEAD_BACKBONE, /* BridgeTowerModel: keys carry the `bridgetower.` prefix */
    BT_HEAD_ITC,      /* itc_*_head, logit_scale */
    BT_HEAD_ITM,      /* itm_score */
    BT_HEAD_MLM,      /* mlm_score */
    BT_HEAD_COUNT
} bt_head;

/* Bit masks of heads to build (the backbone is always built). */
enum {
    BT_HEADS_NONE = 0,
    BT_HEADS_ITC = 1u << BT_HEAD_ITC,
    BT_HEADS_ITM = 1u << BT_HEAD_ITM,
    BT_HEADS_MLM = 1u << BT_HEAD_MLM,
    BT_HEADS_ALL = BT_HEADS_ITC | BT_HEADS_ITM | BT_HEADS_MLM,
};

/* Points of the backward after which a set of parameter gradients is final (model.h
 * "Gradients-final events"), in firing order: the ev column of the list. */
typedef enum {
    BT_GRAD_EV_NONE = -1, /* no backward writes the field */
    BT_GRAD_EV_PAIR_HEADS,  /* bt_cross_backward_pairs: ITM / MLM / ITC-cross heads done */
    BT_GRAD_EV_CROSS_LAYER, /* cross layer `layer` (X-1 .. 0) and what feeds it done */
    BT_GRAD_EV_ITC_HEADS, /* bt_towers_backward: ITC uni-modal heads done */
    BT_GRAD_EV_BRIDGES,   /* the bridges' uni-modal halves done */
    BT_GRAD_EV_TEXT_LAYER,/* text layer `layer` done (Lt-1 .. 0) */
    BT_GRAD_EV_TEXT_EMB,  /* text embeddings done */
    BT_GRAD_EV_VIT_LAYER, /* vision block `layer` done (Lv-1 .. 0) */
    BT_GRAD_EV_VIT_EMB,   /* vision embeddings and ln_pre done */
} bt_grad_event;

/* Which layer of its event a repetition r of a field belongs to: the evl column. */
typedef enum {
    BT_GRAD_LAYER_0,    /* layer 0 (single tensors; the first cross layer's input LNs) */
    BT_GRAD_LAYER_REP,  /* layer r (the field's own layer) */
    BT_GRAD_LAYER_NEXT, /* layer r + 1 (link tower r feeds cross layer r + 1) */
    BT_GRAD_LAYER_LAST, /* the last cross layer, X - 1 (the poolers: before that layer's) */
} bt_grad_layer;

/* Fields present only for one link_tower_type. */
typedef enum {
    BT_WHEN_ALWAYS,
    BT_WHEN_SCALED_ADD,
    BT_WHEN_INTERPOLATE,
} bt_when;

/* ------------------------------------------------------------------------------------------
 * The list. X(ID, field, key, rep, d0, d1, d2, d3, init, decay, head, when, ev, evl):
 *   key without the `bridgetower.` prefix ("{i}" = repetition index), dims as BT_D_<d>,
 *   rep as BT_REP_<rep>, init as BT_INIT_<init>, head as BT_HEAD_<head>, when as BT_WHEN_<>,
 *   ev as BT_GRAD_EV_<ev> and evl as BT_GRAD_LAYER_<evl>: the backward event after which
 *   the field's gradient is final, and which layer of that event (model.h "Gradients-final
 *   events"; a column, so reordering the list changes no schedule).
 * BT_LIN_ adds a Linear's weight (out, in) and bias (out); BT_LN_ a LayerNorm's weight and
 * bias (both undecayed). */
#define BT_LIN_(X, ID, f, key, rep, o, i, init, head, ev, evl)                                \
    X(ID##_W, f##_w, key ".weight", rep, o, i, NONE, NONE, init, 1, head, ALWAYS, ev, evl)    \
    X(ID##_B, f##_b, key ".bias", rep, o, NONE, NONE, NONE, ZEROS, 0, head, ALWAYS, ev, evl)
#define BT_LN_(X, ID, f, key, rep, d, head, ev, evl)                                          \
    X(ID##_W, f##_w, key ".weight", rep, d, NONE, NONE, NONE, ONES, 0, head, ALWAYS, ev, evl) \
    X(ID##_B, f##_b, key ".bias", rep, d, NONE, NONE, NONE, ZEROS, 0, head, ALWAYS, ev, evl)

/* One BridgeTowerBertCrossLayer (built from text_config: width Ht = H, FFN It). */
#define BT_CROSS_LAYER_(X, ID, f, key)                                                        \
    BT_LIN_(X, ID##_Q, f##_q, key ".attention.self.query", CROSS, H, H, NORMAL, BACKBONE,     \
            CROSS_LAYER, REP)                                                                 \
    BT_LIN_(X, ID##_K, f##_k, key ".attention.self.key", CROSS, H, H, NORMAL, BACKBONE,       \
            CROSS_LAYER, REP)                                                                 \
    BT_LIN_(X, ID##_V, f##_v, key ".attention.self.value", CROSS, H, H, NORMAL, BACKBONE,     \
            CROSS_LAYER, REP)                                                                 \
    BT_LIN_(X, ID##_AO, f##_ao, key ".attention.output.dense", CROSS, H, H, NORMAL,           \
            BACKBONE, CROSS_LAYER, REP)                                                       \
    BT_LN_(X, ID##_LN1, f##_ln1, key ".attention.output.LayerNorm", CROSS, H, BACKBONE,       \
           CROSS_LAYER, REP)                                                                  \
    BT_LIN_(X, ID##_CQ, f##_cq, key ".crossattention.self.query", CROSS, H, H, NORMAL,        \
            BACKBONE, CROSS_LAYER, REP)                                                       \
    BT_LIN_(X, ID##_CK, f##_ck, key ".crossattention.self.key", CROSS, H, H, NORMAL,          \
            BACKBONE, CROSS_LAYER, REP)                                                       \
    BT_LIN_(X, ID##_CV, f##_cv, key ".crossattention.self.value", CROSS, H, H, NORMAL,        \
            BACKBONE, CROSS_LAYER, REP)                                                       \
    BT_LIN_(X, ID##_CO, f##_co, key ".crossattention.output.dense", CROSS, H, H, NORMAL,      \
            BACKBONE, CROSS_LAYER, REP)                                                       \
    BT_LN_(X, ID##_LN2, f##_ln2, key ".crossattention.output.LayerNorm", CROSS, H, BACKBONE,  \
           CROSS_LAYER, REP)                                                                  \
    BT_LIN_(X, ID##_FC1, f##_fc1, key ".intermediate.dense", CROSS, IT, H, NORMAL, BACKBONE,  \
            CROSS_LAYER, REP)                                                                 \
    BT_LIN_(X, ID##_FC2, f##_fc2, key ".output.dense", CROSS, H, IT, NORMAL, BACKBONE,        \
            CROSS_LAYER, REP)                                                                 \
    BT_LN_(X, ID##_LN3, f##_ln3, key ".output.LayerNorm", CROSS, H, BACKBONE, CROSS_LAYER, REP)

#define BT_TL_ "text_model.encoder.layer.{i}"
#define BT_VL_ "vision_model.visual.transformer.resblocks.{i}"

#define BT_PARAM_LIST(X)                                                                      \
    /* --- text tower (RoBERTa) --- */                                                        \
    X(TEXT_WORD_EMB, text_word_emb, "text_model.embeddings.word_embeddings.weight", ONE, V,   \
      HT, NONE, NONE, NORMAL, 1, BACKBONE, ALWAYS, TEXT_EMB, 0)                               \
    X(TEXT_POS_EMB, text_pos_emb, "text_model.embeddings.position_embeddings.weight", ONE,    \
      PMAX, HT, NONE, NONE, NORMAL, 1, BACKBONE, ALWAYS, TEXT_EMB, 0)                         \
    X(TEXT_TYPE_EMB, text_type_emb, "text_model.embeddings.token_type_embeddings.weight",     \
      ONE, TYPES, HT, NONE, NONE, NORMAL, 1, BACKBONE, ALWAYS, TEXT_EMB, 0)                   \
    BT_LN_(X, TEXT_EMB_LN, text_emb_ln, "text_model.embeddings.LayerNorm", ONE, HT,           \
           BACKBONE, TEXT_EMB, 0)                                                             \
    BT_LIN_(X, TL_Q, tl_q, BT_TL_ ".attention.self.query", TEXT, HT, HT, NORMAL, BACKBONE,    \
            TEXT_LAYER, REP)                                                                  \
    BT_LIN_(X, TL_K, tl_k, BT_TL_ ".attention.self.key", TEXT, HT, HT, NORMAL, BACKBONE,      \
            TEXT_LAYER, REP)                                                                  \
    BT_LIN_(X, TL_V, tl_v, BT_TL_ ".attention.self.value", TEXT, HT, HT, NORMAL, BACKBONE,    \
            TEXT_LAYER, REP)                                                                  \
    BT_LIN_(X, TL_AO, tl_ao, BT_TL_ ".attention.output.dense", TEXT, HT, HT, NORMAL,          \
            BACKBONE, TEXT_LAYER, REP)                                                        \
    BT_LN_(X, TL_LN1, tl_ln1, BT_TL_ ".attention.output.LayerNorm", TEXT, HT, BACKBONE,       \
           TEXT_LAYER, REP)                                                                   \
    BT_LIN_(X, TL_FC1, tl_fc1, BT_TL_ ".intermediate.dense", TEXT, IT, HT, NORMAL, BACKBONE,  \
            TEXT_LAYER, REP)                                                                  \
    BT_LIN_(X, TL_FC2, tl_fc2, BT_TL_ ".output.dense", TEXT, HT, IT, NORMAL, BACKBONE,        \
            TEXT_LAYER, REP)                                                                  \
    BT_LN_(X, TL_LN2, tl_ln2, BT_TL_ ".output.LayerNorm", TEXT, HT, BACKBONE, TEXT_LAYER,     \
           REP)                                                                               \
    /* in the weights, never used by BridgeTowerModel (gets no gradient) */                   \
    BT_LIN_(X, TEXT_POOL, text_pool, "text_model.pooler.dense", ONE, HT, HT, NORMAL,          \
            BACKBONE, NONE, 0)                                                                \
    /* --- vision tower (CLIP ViT) --- */                                                     \
    X(VIS_CLS, vis_cls, "vision_model.visual.embeddings.class_embedding", ONE, HV, NONE,      \
      NONE, NONE, CLIP_ATTN, 1, BACKBONE, ALWAYS, VIT_EMB, 0)                                 \
    X(VIS_PATCH_W, vis_patch_w, "vision_model.visual.embeddings.patch_embedding.weight",      \
      ONE, HV, CH, P, P, NORMAL, 1, BACKBONE, ALWAYS, VIT_EMB, 0)                             \
    X(VIS_POS, vis_pos, "vision_model.visual.embeddings.position_embedding.weight", ONE, NP,  \
      HV, NONE, NONE, CLIP_ATTN, 1, BACKBONE, ALWAYS, VIT_EMB, 0)                             \
    BT_LN_(X, VIS_LN_PRE, vis_ln_pre, "vision_model.visual.ln_pre", ONE, HV, BACKBONE,        \
           VIT_EMB, 0)                                                                        \
    X(VL_IN_W, vl_in_w, BT_VL_ ".attn.in_proj_weight", VISION, HV3, HV, NONE, NONE,           \
      CLIP_ATTN, 1, BACKBONE, ALWAYS, VIT_LAYER, REP)                                         \
    X(VL_IN_B, vl_in_b, BT_VL_ ".attn.in_proj_bias", VISION, HV3, NONE, NONE, NONE, ZEROS,    \
      0, BACKBONE, ALWAYS, VIT_LAYER, REP)                                                    \
    BT_LIN_(X, VL_OUT, vl_out, BT_VL_ ".attn.out_proj", VISION, HV, HV, CLIP_PROJ, BACKBONE,  \
            VIT_LAYER, REP)                                                                   \
    BT_LN_(X, VL_LN1, vl_ln1, BT_VL_ ".ln_1", VISION, HV, BACKBONE, VIT_LAYER, REP)           \
    BT_LIN_(X, VL_FC, vl_fc, BT_VL_ ".mlp.c_fc", VISION, HV4, HV, CLIP_FC, BACKBONE,          \
            VIT_LAYER, REP)                                                                   \
    BT_LIN_(X, VL_PROJ, vl_proj, BT_VL_ ".mlp.c_proj", VISION, HV, HV4, CLIP_PROJ, BACKBONE,  \
            VIT_LAYER, REP)                                                                   \
    BT_LN_(X, VL_LN2, vl_ln2, BT_VL_ ".ln_2", VISION, HV, BACKBONE, VIT_LAYER, REP)           \
    BT_LN_(X, VIS_LN_POST, vis_ln_post, "vision_model.visual.ln_post", ONE, HV, BACKBONE,     \
           BRIDGES, 0)                                                                        \
    /* --- bridges: transforms, modality types, first-layer LNs, link towers --- */           \
    BT_LIN_(X, XT_TRANSFORM, xt_transform, "cross_modal_text_transform", ONE, H, HT, NORMAL,  \
            BACKBONE, BRIDGES, 0)                                                             \
    BT_LIN_(X, XI_TRANSFORM, xi_transform, "cross_modal_image_transform", ONE, H, HV,         \
            NORMAL, BACKBONE, BRIDGES, 0)                                                     \
    X(TYPE_EMB, type_emb, "token_type_embeddings.weight", ONE, TWO, H, NONE, NONE, NORMAL,    \
      1, BACKBONE, ALWAYS, BRIDGES, 0)                                                        \
    BT_LN_(X, XT_LN, xt_ln, "cross_modal_text_layernorm", ONE, H, BACKBONE, CROSS_LAYER, 0)   \
    BT_LN_(X, XI_LN, xi_ln, "cross_modal_image_layernorm", ONE, H, BACKBONE, CROSS_LAYER, 0)  \
    BT_LN_(X, XT_LINK_LN, xt_link_ln, "cross_modal_text_link_tower.{i}.LayerNorm", LINK, H,   \
           BACKBONE, CROSS_LAYER, NEXT)                                                       \
    BT_LN_(X, XI_LINK_LN, xi_link_ln, "cross_modal_image_link_tower.{i}.LayerNorm", LINK, H,  \
           BACKBONE, CROSS_LAYER, NEXT)                                                       \
    X(XT_LINK_SCALE, xt_link_scale, "cross_modal_text_link_tower.{i}.scaled_factor", LINK,    \
      NONE, NONE, NONE, NONE, ONES, 1, BACKBONE, SCALED_ADD, CROSS_LAYER, NEXT)               \
    X(XI_LINK_SCALE, xi_link_scale, "cross_modal_image_link_tower.{i}.scaled_factor", LINK,   \
      NONE, NONE, NONE, NONE, ONES, 1, BACKBONE, SCALED_ADD, CROSS_LAYER, NEXT)               \
    X(XT_LINK_BETA, xt_link_beta, "cross_modal_text_link_tower.{i}.beta", LINK, NONE, NONE,   \
      NONE, NONE, HALF, 1, BACKBONE, INTERPOLATE, CROSS_LAYER, NEXT)                          \
    X(XI_LINK_BETA, xi_link_beta, "cross_modal_image_link_tower.{i}.beta", LINK, NONE, NONE,  \
      NONE, NONE, HALF, 1, BACKBONE, INTERPOLATE, CROSS_LAYER, NEXT)                          \
    /* --- cross-modal layers and poolers --- */                                              \
    BT_CROSS_LAYER_(X, XTL, xtl, "cross_modal_text_layers.{i}")                               \
    BT_CROSS_LAYER_(X, XIL, xil, "cross_modal_image_layers.{i}")                              \
    BT_LIN_(X, XT_POOL, xt_pool, "cross_modal_text_pooler.dense", ONE, H, H, NORMAL,          \
            BACKBONE, CROSS_LAYER, LAST)                                                      \
    BT_LIN_(X, XI_POOL, xi_pool, "cross_modal_image_pooler.dense", ONE, H, H, NORMAL,         \
            BACKBONE, CROSS_LAYER, LAST)                                                      \
    /* --- heads --- */                                                                       \
    BT_LIN_(X, ITM, itm, "itm_score.fc", ONE, TWO, H2, NORMAL, ITM, PAIR_HEADS, 0)            \
    BT_LIN_(X, MLM_TR, mlm_tr, "mlm_score.transform.dense", ONE, H, H, NORMAL, MLM,           \
            PAIR_HEADS, 0)                                                                    \
    BT_LN_(X, MLM_LN, mlm_ln, "mlm_score.transform.LayerNorm", ONE, H, MLM, PAIR_HEADS, 0)    \
    X(MLM_DEC_W, mlm_dec_w, "mlm_score.decoder.weight", ONE, V, H, NONE, NONE, NORMAL, 1,     \
      MLM, ALWAYS, PAIR_HEADS, 0)                                                             \
    X(MLM_BIAS, mlm_bias, "mlm_score.bias", ONE, V, NONE, NONE, NONE, ZEROS, 0, MLM, ALWAYS,  \
      PAIR_HEADS, 0)                                                                          \
    BT_LIN_(X, ITC_TEXT, itc_text, "itc_text_head.fc", ONE, C, H, NORMAL, ITC, ITC_HEADS, 0)  \
    BT_LIN_(X, ITC_IMAGE, itc_image, "itc_image_head.fc", ONE, C, H, NORMAL, ITC, ITC_HEADS,  \
            0)                                                                                \
    BT_LIN_(X, ITC_CROSS, itc_cross, "itc_cross_modal_head.fc", ONE, C, H2, NORMAL, ITC,      \
            PAIR_HEADS, 0)                                                                    \
    X(LOGIT_SCALE, logit_scale, "logit_scale", ONE, NONE, NONE, NONE, NONE, LOGIT_SCALE, 1,   \
      ITC, ALWAYS, NONE, 0)

#define BT_P_ENUM_(ID, ...) BT_P_##ID,
typedef enum { BT_PARAM_LIST(BT_P_ENUM_) BT_P_COUNT } bt_param_id;
#undef BT_P_ENUM_

/* Named views into one arena: each points at repetition 0 of its field (NULL when the field
 * is absent: a head not built, a link scalar of another link_tower_type). */
#define BT_P_FIELD_(ID, f, ...) float *f;
typedef struct bt_param_views {
    BT_PARAM_LIST(BT_P_FIELD_)
} bt_param_views;
#undef BT_P_FIELD_

enum { BT_PARAM_MAX_DIMS = 4, BT_PARAM_KEY_MAX = 112 };

/* One field of the list, resolved for a config. */
typedef struct bt_param_field {
    const char *name;        /* view name ("tl_q_w") */
    const char *key_pattern; /* HF key without prefix, "{i}" = repetition */
    int present;             /* 0: head not built or other link type */
    bt_rep rep;
    int reps;                /* repetitions (1, Lt, Lv, X or X-1) */
    int ndim;                /* 0 for a scalar */
    int64_t shape[BT_PARAM_MAX_DIMS];
    bt_dim dims[BT_PARAM_MAX_DIMS]; /* the shape expression */
    size_t numel;            /* per repetition */
    size_t offset;           /* arena offset (elements) of repetition 0 */
    bt_init init;
    int decay;               /* 1: AdamW weight decay applies */
    bt_head head;
} bt_param_field;

/* One checkpoint tensor: a field at one repetition. */
typedef struct bt_param_tensor {
    char key[BT_PARAM_KEY_MAX]; /* HF key, `bridgetower.` prefix for backbone tensors */
    const char *bare_key;       /* key without the prefix (points into key) */
    bt_param_id id;
    int layer;                  /* repetition index (0 for single tensors) */
    int ndim;
    int64_t shape[BT_PARAM_MAX_DIMS];
    size_t numel;
    size_t offset;              /* arena offset (elements) */
    int decay;
    bt_head head;
    bt_init init;
} bt_param_tensor;

typedef struct bt_param_table {
    bt_model_config cfg;
    unsigned heads;                       /* BT_HEADS_* mask */
    bt_param_field fields[BT_P_COUNT];
    bt_param_tensor *tensors;             /* present tensors, in list order */
    size_t n_tensors;
    size_t *by_key;                       /* tensor indices sorted by bare key */
    size_t numel;                         /* arena length in elements (incl. alignment) */
    size_t n_params;                      /* Σ numel of the tensors */
} bt_param_table;

/* Builds the table for a config and a set of heads (BT_HEADS_* mask). Field starts are
 * aligned to 16 floats (64 bytes); padding elements stay 0 in every arena. */
void bt_param_table_init(bt_param_table *t, const bt_model_config *c, unsigned heads);
void bt_param_table_free(bt_param_table *t);

/* Checks, before any arena is allocated, that `copies` fp32 arenas of t (t->numel floats
 * each) fit in the memory this machine has (bt_mem_check, src/mem.h): 1 to load or
 * initialize weights, more for training (weights, gradients, AdamW m and v). `source` names
 * the config in the message ("model/config.json"). BT_OK or BT_ERR_NOMEM saying the
 * parameter count, the bytes needed, the bytes available and which config keys to reduce. */
bt_status bt_param_table_check_memory(const bt_param_table *t, unsigned copies,
                                      const char *source);

/* Tensor by HF key: accepts backbone keys with or without the `bridgetower.` prefix and head
 * keys bare. NULL when the key is not a parameter of this table. */
const bt_param_tensor *bt_param_table_find(const bt_param_table *t, const char *key);
/* Σ numel of the present tensors of one head. */
size_t bt_param_table_count_head(const bt_param_table *t, bt_head h);

/* The event (and in *layer its layer) after which repetition `rep` of field id's gradient
 * is final, from the list's ev / evl columns; BT_GRAD_EV_NONE for fields no model backward
 * writes (the unused text pooler, and logit_scale, which the ITC loss writes before any
 * backward). */
bt_grad_event bt_param_grad_event(const bt_model_config *c, bt_param_id id, int rep,
                                  int *layer);

/* Resolves a symbolic dimension; names for docs and messages. */
int64_t bt_dim_value(const bt_model_config *c, bt_dim d);
const char *bt_dim_name(bt_dim d);
const char *bt_head_name(bt_head h);
const char *bt_init_name(bt_init i);

/* Points every view at its field's repetition 0 inside `arena` (NULL for absent fields). */
void bt_param_views_bind(bt_param_views *v, const bt_param_table *t, float *arena);

/* Arena helpers: pointer to repetition `layer` of field `id`. */
static inline float *bt_param_ptr(const bt_param_table *t, float *arena, bt_param_id id,
                                  int layer) {
    return arena + t->fields[id].offset + (size_t)layer * t->fields[id].numel;
}

/* Fills `arena` (t->numel floats) by the init rules from `seed` (see the header comment).
 * Padding elements are set to 0. OpenMP-parallel over tensors, deterministic. */
void bt_params_init(const bt_param_table *t, float *arena, uint64_t seed);

/* Writes the bf16 shadow copy (t->numel elements) of `arena` (round to nearest even). */
void bt_params_refresh_bf16(const bt_param_table *t, bt_bf16 *shadow, const float *arena);

/* Strict loader for tests and tools: every tensor of the table must be in the safetensors
 * file at `path` (backbone keys with or without prefix) with the table's shape and a float
 * dtype; errors name the file and the key. Keys the table does not know (e.g. int64
 * position_ids buffers, heads not built) are counted in *n_unused (may be NULL). */
bt_status bt_params_load_safetensors(const bt_param_table *t, float *arena, const char *path,
                                     size_t *n_unused);

/* Refuses (BT_ERR_CONFIG, naming `source`, the fields and the head) a model shape that bt can
 * train but transformers' class for the head cannot run, so that what bt-train writes always
 * loads and runs with from_pretrained. Today one: the ITC head with vision_config.hidden_size
 * != hidden_size. BridgeTowerForContrastiveLearning.forward adds the hidden_size image
 * token-type embedding, expand_as'd to the vision-width output of forward_post, before
 * cross_modal_image_transform; that expand fails unless the widths agree (bt's own ITC path,
 * and the BridgeTowerModel / ITM / MLM paths, add it after the transform and run either way). */
bt_status bt_heads_check_hf(const bt_model_config *c, unsigned heads, const char *source);

#endif
