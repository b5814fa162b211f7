/* config.c: HF BridgeTower config.json -> bt_model_config (see config.h).
 *
 * Absent keys take HF's class defaults (docs/spec.md §1.1); a JSON null counts as absent
 * (HF writes nulls for unset optional fields). Present keys must have the right JSON type.
 * Settings the HF code cannot run (share_link_tower_layers true, share_cross_modal_
 * transformer_layers false) and settings bt does not implement (tied MLM decoder, other
 * activations or position-embedding types, unequal towers, ...) are errors naming the key.
 *
 * Deliberately not here: unknown-key errors (HF files carry many generic keys, see config.h),
 * run configs. */
#include "model/config.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_util.h"

void bt_model_config_default(bt_model_config *c) {
    memset(c, 0, sizeof *c);
    /* BridgeTowerTextConfig defaults (RoBERTa-base). */
    c->vocab_size = 50265;
    c->text_hidden = 768;
    c->text_layers = 12;
    c->text_heads = 12;
    c->text_intermediate = 3072;
    c->max_position_embeddings = 514;
    c->type_vocab_size = 1;
    c->pad_token_id = 1;
    c->text_layer_norm_eps = 1e-5f;
    c->hidden_dropout_prob = 0.1f;
    c->attention_probs_dropout_prob = 0.1f;
    /* BridgeTowerVisionConfig defaults (CLIP ViT-B/16 at 288 px). */
    c->vision_hidden = 768;
    c->vision_layers = 12;
    c->num_channels = 3;
    c->patch_size = 16;
    c->image_size = 288;
    c->vision_layer_norm_eps = 1e-5f;
    /* BridgeTowerConfig defaults. contrastive_hidden_size and logit_scale_init_value are not
     * declared fields in HF; 512 and 2.6592 are the values of the only ITC checkpoint. */
    c->hidden = 768;
    c->cross_layers = 6;
    c->num_attention_heads = 12;
    c->layer_norm_eps = 1e-5f;
    c->link_tower_type = BT_LINK_ADD;
    c->initializer_factor = 1.0f;
    c->contrastive_hidden = 512;
    c->logit_scale_init = 2.6592f;
    bt_status s = bt_model_config_finish(c, "defaults");
    BT_ASSERT(s == BT_OK);
}

const char *bt_link_type_name(bt_link_type t) {
    switch (t) {
    case BT_LINK_ADD: return "add";
    case BT_LINK_SCALED_ADD: return "scaled_add";
    case BT_LINK_INTERPOLATE: return "interpolate";
    }
    return "?";
}

/* ---------------------------------------------------------------------------------------
 * typed getters: absent or null -> leave *dst (the default); wrong type -> error naming the
 * file, the block ("text_config.") and the key. */

static const cJSON *cfg_item(const cJSON *obj, const char *key) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!it || cJSON_IsNull(it)) return NULL;
    return it;
}

static bt_status cfg_int(const cJSON *obj, const char *key, int *dst, int lo, int hi,
                         const char *name, const char *block) {
    const cJSON *it = cfg_item(obj, key);
    if (!it) return BT_OK;
    double v = it->valuedouble;
    if (!cJSON_IsNumber(it) || v != floor(v))
        return bt_fail(BT_ERR_CONFIG, "%s: key '%s%s': expected an integer", name, block, key);
    char num[40];
    if (v < lo || v > hi)
        return bt_fail(BT_ERR_CONFIG, "%s: key '%s%s': %s is out of range [%d, %d]", name,
                       block, key, bt_json_number_str(num, sizeof num, v), lo, hi);
    *dst = (int)v;
    return BT_OK;
}

static bt_status cfg_float(const cJSON *obj, const char *key, float *dst, double lo, double hi,
                           const char *name, const char *block) {
    const cJSON *it = cfg_item(obj, key);
    if (!it) return BT_OK;
    if (!cJSON_IsNumber(it))
        return bt_fail(BT_ERR_CONFIG, "%s: key '%s%s': expected a number", name, block, key);
    double v = it->valuedouble;
    char num[40];
    if (!(v >= lo && v <= hi))
        return bt_fail(BT_ERR_CONFIG, "%s: key '%s%s': %s is out of range [%g, %g]", name,
                       block, key, bt_json_number_str(num, sizeof num, v), lo, hi);
    *dst = (float)v;
    return BT_OK;
}

/* A boolean that bt supports only with one value: absent is fine (HF default = required). */
static bt_status cfg_bool_require(const cJSON *obj, const char *key, int required,
                                  const char *why, const char *name, const char *block) {
    const cJSON *it = cfg_item(obj, key);
    if (!it) return BT_OK;
    if (!cJSON_IsBool(it))
        return bt_fail(BT_ERR_CONFIG, "%s: key '%s%s': expected true or false", name, block, key);
    if (cJSON_IsTrue(it) != required)
        return bt_fail(BT_ERR_UNSUPPORTED, "%s: key '%s%s' is %s; bt runs only %s: %s", name,
                       block, key, required ? "false" : "true", required ? "true" : "false",
                       why);
    return BT_OK;
}

/* A string that bt supports only with the value `required` (absent is fine). */
static bt_status cfg_string_require(const cJSON *obj, const char *key, const char *required,
                                    const char *why, const char *name, const char *block) {
    const cJSON *it = cfg_item(obj, key);
    if (!it) return BT_OK;
    if (!cJSON_IsString(it))
        return bt_fail(BT_ERR_CONFIG, "%s: key '%s%s': expected a string", name, block, key);
    if (strcmp(it->valuestring, required) != 0)
        return bt_fail(BT_ERR_UNSUPPORTED, "%s: key '%s%s' is \"%s\"; bt supports only \"%s\" (%s)",
                       name, block, key, it->valuestring, required, why);
    return BT_OK;
}

#define TRY(expr)                                                                          \
    do {                                                                                   \
        bt_status s_ = (expr);                                                             \
        if (s_ != BT_OK) return s_;                                                        \
    } while (0)

static bt_status parse_text(bt_model_config *c, const cJSON *t, const char *name) {
    const char *b = "text_config.";
    TRY(cfg_int(t, "vocab_size", &c->vocab_size, 1, 1 << 24, name, b));
    TRY(cfg_int(t, "hidden_size", &c->text_hidden, 1, 1 << 16, name, b));
    TRY(cfg_int(t, "num_hidden_layers", &c->text_layers, 1, 1024, name, b));
    TRY(cfg_int(t, "num_attention_heads", &c->text_heads, 1, 1024, name, b));
    TRY(cfg_int(t, "intermediate_size", &c->text_intermediate, 1, 1 << 18, name, b));
    TRY(cfg_int(t, "max_position_embeddings", &c->max_position_embeddings, 3, 1 << 20, name, b));
    TRY(cfg_int(t, "type_vocab_size", &c->type_vocab_size, 1, 1 << 16, name, b));
    TRY(cfg_int(t, "pad_token_id", &c->pad_token_id, 0, 1 << 24, name, b));
    TRY(cfg_float(t, "layer_norm_eps", &c->text_layer_norm_eps, 0.0, 1.0, name, b));
    TRY(cfg_float(t, "hidden_dropout_prob", &c->hidden_dropout_prob, 0.0, 0.999, name, b));
    TRY(cfg_float(t, "attention_probs_dropout_prob", &c->attention_probs_dropout_prob, 0.0,
                  0.999, name, b));
    TRY(cfg_string_require(t, "hidden_act", "gelu", "exact erf GELU", name, b));
    TRY(cfg_string_require(t, "position_embedding_type", "absolute",
                           "RoBERTa absolute positions", name, b));
    TRY(cfg_bool_require(t, "is_decoder", 0, "BridgeTower's text tower is an encoder", name, b));
    TRY(cfg_bool_require(t, "add_cross_attention", 0,
                         "the text tower has no cross-attention of its own", name, b));
    return BT_OK;
}

static bt_status parse_vision(bt_model_config *c, const cJSON *v, const char *name) {
    const char *b = "vision_config.";
    TRY(cfg_int(v, "hidden_size", &c->vision_hidden, 1, 1 << 16, name, b));
    TRY(cfg_int(v, "num_hidden_layers", &c->vision_layers, 1, 1024, name, b));
    TRY(cfg_int(v, "num_channels", &c->num_channels, 1, 64, name, b));
    TRY(cfg_int(v, "patch_size", &c->patch_size, 1, 4096, name, b));
    TRY(cfg_int(v, "image_size", &c->image_size, 1, 1 << 15, name, b));
    TRY(cfg_float(v, "layer_norm_eps", &c->vision_layer_norm_eps, 0.0, 1.0, name, b));
    TRY(cfg_bool_require(v, "share_layernorm", 1,
                         "separate per-bridge LayerNorms (ln_separate) are not implemented",
                         name, b));
    TRY(cfg_bool_require(v, "remove_last_layer", 0,
                         "every vision block feeds the bridges", name, b));
    TRY(cfg_bool_require(v, "stop_gradient", 0,
                         "detached vision hidden states are not implemented", name, b));
    return BT_OK;
}

static bt_status parse_top(bt_model_config *c, const cJSON *root, const char *name) {
    const char *b = "";
    const cJSON *mt = cfg_item(root, "model_type");
    if (mt && (!cJSON_IsString(mt) || strcmp(mt->valuestring, "bridgetower") != 0))
        return bt_fail(BT_ERR_CONFIG, "%s: key 'model_type': expected \"bridgetower\"", name);
    TRY(cfg_int(root, "hidden_size", &c->hidden, 1, 1 << 16, name, b));
    TRY(cfg_int(root, "num_hidden_layers", &c->cross_layers, 1, 1024, name, b));
    TRY(cfg_int(root, "num_attention_heads", &c->num_attention_heads, 1, 1024, name, b));
    TRY(cfg_float(root, "layer_norm_eps", &c->layer_norm_eps, 0.0, 1.0, name, b));
    TRY(cfg_float(root, "initializer_factor", &c->initializer_factor, 0.0, 1e6, name, b));
    TRY(cfg_int(root, "contrastive_hidden_size", &c->contrastive_hidden, 1, 1 << 16, name, b));
    TRY(cfg_float(root, "logit_scale_init_value", &c->logit_scale_init, -100.0, 100.0, name, b));
    TRY(cfg_string_require(root, "hidden_act", "gelu", "the MLM head transform uses erf GELU",
                           name, b));
    TRY(cfg_bool_require(root, "share_cross_modal_transformer_layers", 1,
                         "HF's forward calls the single shared transform; the false branch "
                         "cannot run", name, b));
    TRY(cfg_bool_require(root, "share_link_tower_layers", 0,
                         "HF's forward indexes the link towers as a list; the true branch "
                         "cannot run", name, b));
    TRY(cfg_bool_require(root, "tie_word_embeddings", 0,
                         "the MLM decoder is a separate (untied) weight", name, b));
    const cJSON *lt = cfg_item(root, "link_tower_type");
    if (lt) {
        if (!cJSON_IsString(lt))
            return bt_fail(BT_ERR_CONFIG, "%s: key 'link_tower_type': expected a string", name);
        const char *v = lt->valuestring;
        if (strcmp(v, "add") == 0) c->link_tower_type = BT_LINK_ADD;
        else if (strcmp(v, "scaled_add") == 0) c->link_tower_type = BT_LINK_SCALED_ADD;
        else if (strcmp(v, "interpolate") == 0) c->link_tower_type = BT_LINK_INTERPOLATE;
        else
            return bt_fail(BT_ERR_UNSUPPORTED,
                           "%s: key 'link_tower_type': unknown value \"%s\" (expected \"add\", "
                           "\"scaled_add\" or \"interpolate\")", name, lt->valuestring);
    }
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(root, "text_config");
    if (tc && !cJSON_IsNull(tc)) {
        if (!cJSON_IsObject(tc))
            return bt_fail(BT_ERR_CONFIG, "%s: key 'text_config': expected an object", name);
        TRY(parse_text(c, tc, name));
    }
    const cJSON *vc = cJSON_GetObjectItemCaseSensitive(root, "vision_config");
    if (vc && !cJSON_IsNull(vc)) {
        if (!cJSON_IsObject(vc))
            return bt_fail(BT_ERR_CONFIG, "%s: key 'vision_config': expected an object", name);
        TRY(parse_vision(c, vc, name));
    }
    return BT_OK;
}

bt_status bt_model_config_finish(bt_model_config *c, const char *name) {
    if (c->text_hidden % c->text_heads != 0)
        return bt_fail(BT_ERR_CONFIG,
                       "%s: key 'text_config.hidden_size' (%d) is not divisible by "
                       "'text_config.num_attention_heads' (%d)", name, c->text_hidden,
                       c->text_heads);
    if (c->hidden % c->num_attention_heads != 0)
        return bt_fail(BT_ERR_CONFIG,
                       "%s: key 'hidden_size' (%d) is not divisible by 'num_attention_heads' (%d)",
                       name, c->hidden, c->num_attention_heads);
    /* HF builds the vision heads as hidden_size // 64 (the head size is fixed at 64). */
    if (c->vision_hidden % 64 != 0)
        return bt_fail(BT_ERR_CONFIG,
                       "%s: key 'vision_config.hidden_size' (%d) is not a multiple of 64 "
                       "(HF uses hidden_size/64 heads of size 64)", name, c->vision_hidden);
    if (c->hidden != c->text_hidden)
        return bt_fail(BT_ERR_UNSUPPORTED,
                       "%s: key 'hidden_size' (%d) differs from 'text_config.hidden_size' (%d); "
                       "HF builds the cross layers from text_config, so they must be equal",
                       name, c->hidden, c->text_hidden);
    if (c->vision_layers != c->text_layers)
        return bt_fail(BT_ERR_UNSUPPORTED,
                       "%s: key 'vision_config.num_hidden_layers' (%d) differs from "
                       "'text_config.num_hidden_layers' (%d); HF indexes vision block i with "
                       "text layer i", name, c->vision_layers, c->text_layers);
    if (c->cross_layers > c->text_layers)
        return bt_fail(BT_ERR_CONFIG,
                       "%s: key 'num_hidden_layers' (%d cross layers) exceeds "
                       "'text_config.num_hidden_layers' (%d): the bridges take the last %d "
                       "uni-modal layers", name, c->cross_layers, c->text_layers,
                       c->cross_layers);
    if (c->image_size % c->patch_size != 0)
        return bt_fail(BT_ERR_CONFIG,
                       "%s: key 'vision_config.image_size' (%d) is not a multiple of "
                       "'vision_config.patch_size' (%d)", name, c->image_size, c->patch_size);
    if (c->num_channels != 3)
        return bt_fail(BT_ERR_UNSUPPORTED,
                       "%s: key 'vision_config.num_channels' is %d; bt reads RGB images (3)",
                       name, c->num_channels);
    /* RoBERTa positions start after pad_token_id: the text holds max_position_embeddings -
     * pad_token_id - 1 tokens (bt_model_config_max_text), and it needs <s> and </s> */
    if (c->pad_token_id >= c->vocab_size || c->pad_token_id + 2 >= c->max_position_embeddings)
        return bt_fail(BT_ERR_CONFIG,
                       "%s: key 'text_config.pad_token_id' (%d) must be below vocab_size (%d) "
                       "and max_position_embeddings - 2 (%d), so that the text holds at least "
                       "<s> and </s>", name, c->pad_token_id, c->vocab_size,
                       c->max_position_embeddings - 2);
    c->split = c->text_layers - c->cross_layers + 1;
    c->grid = c->image_size / c->patch_size;
    c->num_patches = c->grid * c->grid;
    c->np = c->num_patches + 1;
    c->vision_heads = c->vision_hidden / 64;
    c->vision_head_size = 64;
    c->text_head_size = c->text_hidden / c->text_heads;
    if (c->np > (1 << 20))
        return bt_fail(BT_ERR_CONFIG, "%s: %d image tokens is too many", name, c->np);
    return BT_OK;
}

bt_status bt_model_config_parse(bt_model_config *c, const char *json, const char *name) {
    bt_model_config_default(c);
    cJSON *root;
    bt_status s = bt_json_parse(json, strlen(json), name, &root);
    if (s != BT_OK) return s;
    if (!cJSON_IsObject(root))
        s = bt_fail(BT_ERR_FORMAT, "%s: expected a JSON object at the top level", name);
    if (s == BT_OK) s = parse_top(c, root, name);
    cJSON_Delete(root);
    if (s != BT_OK) return s;
    return bt_model_config_finish(c, name);
}

bt_status bt_model_config_load(bt_model_config *c, const char *path) {
    char *buf;
    bt_status s = bt_json_read_text(path, "model config", &buf);
    if (s != BT_OK) return s;
    s = bt_model_config_parse(c, buf, path);
    free(buf);
    return s;
}

int bt_model_config_max_text(const bt_model_config *c) {
    return c->max_position_embeddings - c->pad_token_id - 1;
}

bt_status bt_model_config_text_length(const char *config_json, const bt_model_config *c,
                                      const char *path, int *length) {
    const int tmax = bt_model_config_max_text(c);
    *length = tmax;
    cJSON *j = config_json ? cJSON_Parse(config_json) : NULL;
    const cJSON *mt = j ? cJSON_GetObjectItemCaseSensitive(j, "max_text_len") : NULL;
    bt_status st = BT_OK;
    int64_t v;
    if (mt && !bt_json_int_in(mt, 2, tmax, &v))
        st = bt_fail(BT_ERR_CONFIG,
                     "%s: key 'max_text_len' must be an integer in [2, %d] "
                     "(max_position_embeddings %d - pad_token_id %d - 1)",
                     path, tmax, c->max_position_embeddings, c->pad_token_id);
    else if (mt)
        *length = (int)v;
    cJSON_Delete(j);
    return st;
}

char *bt_model_config_json_set_text_length(const char *config_json, int length) {
    cJSON *j = config_json ? cJSON_Parse(config_json) : cJSON_CreateObject();
    if (!j || !cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return NULL;
    }
    cJSON *v = cJSON_CreateNumber((double)length);
    if (!v || (cJSON_GetObjectItemCaseSensitive(j, "max_text_len")
                   ? !cJSON_ReplaceItemInObjectCaseSensitive(j, "max_text_len", v)
                   : !cJSON_AddItemToObject(j, "max_text_len", v))) {
        cJSON_Delete(j);
        return NULL;
    }
    char *text = cJSON_Print(j);
    cJSON_Delete(j);
    return text;
}
