/* config.h: the BridgeTower model configuration (bt_model_config), read from a Hugging Face
 * config.json (top level + "text_config" + "vision_config" blocks, HF field names), with
 * HF's class defaults for absent keys (docs/model.md, docs/spec.md §1.1) and the
 * dimensions the model code derives from it.
 *
 * Dimension letters used in shape comments across src/model (defined here once):
 *   B   batch                       T   text length (tokens per caption, incl. <s> </s>)
 *   Ht  text width                  Hv  vision width          H   cross-modal width (= Ht)
 *   It  text / cross FFN width      V   vocabulary            C   contrastive width
 *   G   patch grid side (R/P)       Np  image tokens G²+1     P   patch size   R image side
 *   Lt  text layers  Lv vision layers (= Lt)  X cross layers  S  bridge split Lt-X+1
 *   NHt text/cross heads  NHv vision heads (Hv/64)  D head size (64 in every checkpoint)
 *
 * Errors: anything the file can get wrong (bad JSON, wrong type, out of range, a setting the
 * HF code cannot run or bt does not implement) returns a bt_status whose message names the
 * file and the key. Unknown keys are ignored: HF config files carry dozens of generic
 * PretrainedConfig keys (architectures, torch_dtype, id2label, ...) and the BridgeTower
 * checkpoint extras (drop_rate, head_hidden_scale, max_text_len, mlp_ratio, ...), none of
 * which the model reads.
 *
 * Deliberately not here: run/training configs (src/train), the parameter list (params.h). */
#ifndef BT_MODEL_CONFIG_H
#define BT_MODEL_CONFIG_H

#include <stddef.h>

#include "status.h"

typedef enum {
    BT_LINK_ADD,         /* LN(u + c): every published checkpoint */
    BT_LINK_SCALED_ADD,  /* LN(u * scaled_factor + c) */
    BT_LINK_INTERPOLATE, /* LN(u * (1 - beta) + c * beta) */
} bt_link_type;

typedef struct bt_model_config {
    /* --- text_config (RoBERTa) --- */
    int vocab_size;              /* V */
    int text_hidden;             /* Ht */
    int text_layers;             /* Lt */
    int text_heads;              /* NHt (also the cross layers' heads) */
    int text_intermediate;       /* It (also the cross layers' FFN width) */
    int max_position_embeddings; /* rows of the position table (514) */
    int type_vocab_size;         /* rows of the text token-type table (1) */
    int pad_token_id;            /* 1: padding_idx of word/position embeddings */
    float text_layer_norm_eps;   /* text layers, embeddings and cross layers */
    float hidden_dropout_prob;   /* text/cross hidden dropout (training only) */
    float attention_probs_dropout_prob;
    /* --- vision_config (CLIP ViT) --- */
    int vision_hidden;           /* Hv */
    int vision_layers;           /* Lv */
    int num_channels;            /* 3 */
    int patch_size;              /* P */
    int image_size;              /* R */
    float vision_layer_norm_eps; /* ln_pre, ln_1, ln_2, ln_post */
    /* --- top level --- */
    int hidden;                  /* H: cross-modal width */
    int cross_layers;            /* X: num_hidden_layers of the top config */
    int num_attention_heads;     /* top-level heads: read and validated, unused by HF */
    float layer_norm_eps;        /* cross_modal_*_layernorm, link towers, MLM head LN */
    bt_link_type link_tower_type;
    float initializer_factor;    /* multiplies every init std */
    int contrastive_hidden;      /* C (contrastive_hidden_size; 512 when absent) */
    float logit_scale_init;      /* logit_scale_init_value (2.6592 when absent) */

    /* --- derived by bt_model_config_finish() --- */
    int split;          /* S = Lt - X + 1: text/vision layers 0..S-1 run before bridge 0 */
    int grid;           /* G = R / P */
    int num_patches;    /* G² */
    int np;             /* Np = G² + 1 (CLS first) */
    int vision_heads;   /* NHv = Hv / 64 (HF fixes the head size at 64) */
    int vision_head_size;
    int text_head_size; /* Ht / NHt */
} bt_model_config;

/* HF class defaults (BridgeTowerConfig(), i.e. the bridgetower-base shapes), derived fields
 * filled. */
void bt_model_config_default(bt_model_config *c);

/* Reads and validates an HF config.json. On error *c is unspecified and the message names
 * `path` and the key. */
bt_status bt_model_config_load(bt_model_config *c, const char *path);

/* Same from JSON text in memory; `name` is used in error messages in place of a path. */
bt_status bt_model_config_parse(bt_model_config *c, const char *json, const char *name);

/* Validates the fields and fills the derived ones. Called by the loaders; call it after
 * editing fields by hand. `name` names the source in error messages. */
bt_status bt_model_config_finish(bt_model_config *c, const char *name);

const char *bt_link_type_name(bt_link_type t);

/* The longest text the model takes: max_position_embeddings - pad_token_id - 1 (RoBERTa's
 * positions start after the pad id); at least 2 (<s> and </s>) in a parsed config. */
int bt_model_config_max_text(const bt_model_config *c);

/* The text length a model directory is evaluated at by default: the top-level
 * `max_text_len` of its config.json text (the key BridgeTower's checkpoints carry, which HF
 * keeps as an extra attribute; bt-train writes the data.max_length it trained with there),
 * else bt_model_config_max_text. Errors (BT_ERR_CONFIG naming `path`): a max_text_len that
 * is not an integer in [2, that maximum]. */
bt_status bt_model_config_text_length(const char *config_json, const bt_model_config *c,
                                      const char *path, int *length);

/* config_json (an object's text) with its top-level max_text_len set to length: a new
 * malloc'd text, or NULL (out of memory, or not a JSON object). */
char *bt_model_config_json_set_text_length(const char *config_json, int length);

#endif
