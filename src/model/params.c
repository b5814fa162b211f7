/* params.c: the parameter table resolved for a config (layout, key map, views), parameter
 * init, the bf16 shadow refresh and a strict safetensors loader. See params.h.
 *
 * Deliberately not here: checkpoint writing and lenient loading with reports (checkpoint
 * module), the optimizer (src/train/optim.c). */
#include "model/params.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mem.h"
#include "kernels/ops.h"
#include "rng.h"
#include "safetensors.h"

static const char BT_PREFIX[] = "bridgetower.";
enum { BT_PREFIX_LEN = sizeof BT_PREFIX - 1, BT_ALIGN = 16 };

/* The list, as data. */
typedef struct bt_param_desc {
    const char *name, *key;
    bt_rep rep;
    bt_dim dims[BT_PARAM_MAX_DIMS];
    bt_init init;
    int decay;
    bt_head head;
    bt_when when;
    bt_grad_event ev;
    bt_grad_layer evl;
} bt_param_desc;

#define BT_P_DESC_(ID, f, key, rep, d0, d1, d2, d3, init, decay, head, when, ev, evl)         \
    {#f, key, BT_REP_##rep, {BT_D_##d0, BT_D_##d1, BT_D_##d2, BT_D_##d3}, BT_INIT_##init,   \
     decay, BT_HEAD_##head, BT_WHEN_##when, BT_GRAD_EV_##ev, BT_GRAD_LAYER_##evl},
static const bt_param_desc bt_param_descs[BT_P_COUNT] = {BT_PARAM_LIST(BT_P_DESC_)};
#undef BT_P_DESC_

int64_t bt_dim_value(const bt_model_config *c, bt_dim d) {
    switch (d) {
    case BT_D_NONE: return 1;
    case BT_D_V: return c->vocab_size;
    case BT_D_HT: return c->text_hidden;
    case BT_D_IT: return c->text_intermediate;
    case BT_D_PMAX: return c->max_position_embeddings;
    case BT_D_TYPES: return c->type_vocab_size;
    case BT_D_HV: return c->vision_hidden;
    case BT_D_HV3: return 3 * (int64_t)c->vision_hidden;
    case BT_D_HV4: return 4 * (int64_t)c->vision_hidden;
    case BT_D_CH: return c->num_channels;
    case BT_D_P: return c->patch_size;
    case BT_D_NP: return c->np;
    case BT_D_H: return c->hidden;
    case BT_D_H2: return 2 * (int64_t)c->hidden;
    case BT_D_TWO: return 2;
    case BT_D_C: return c->contrastive_hidden;
    case BT_D_COUNT: break;
    }
    BT_ASSERT(!"bad dim");
    return 0;
}

const char *bt_dim_name(bt_dim d) {
    static const char *names[BT_D_COUNT] = {"-",  "V",  "Ht", "It", "Pmax", "types", "Hv", "3Hv",
                                            "4Hv", "3", "P",  "Np", "H",    "2H",    "2",  "C"};
    return d < BT_D_COUNT ? names[d] : "?";
}

const char *bt_head_name(bt_head h) {
    switch (h) {
    case BT_HEAD_BACKBONE: return "backbone";
    case BT_HEAD_ITC: return "itc";
    case BT_HEAD_ITM: return "itm";
    case BT_HEAD_MLM: return "mlm";
    case BT_HEAD_COUNT: break;
    }
    return "?";
}

const char *bt_init_name(bt_init i) {
    switch (i) {
    case BT_INIT_NORMAL: return "normal(0.05f)";
    case BT_INIT_CLIP_ATTN: return "normal(Hv^-1/2 f)";
    case BT_INIT_CLIP_PROJ: return "normal(Hv^-1/2 (2Lv)^-1/2 f)";
    case BT_INIT_CLIP_FC: return "normal((2Hv)^-1/2 f)";
    case BT_INIT_ZEROS: return "zeros";
    case BT_INIT_ONES: return "ones";
    case BT_INIT_HALF: return "0.5";
    case BT_INIT_LOGIT_SCALE: return "logit_scale_init_value";
    }
    return "?";
}

static int rep_count(const bt_model_config *c, bt_rep r) {
    switch (r) {
    case BT_REP_ONE: return 1;
    case BT_REP_TEXT: return c->text_layers;
    case BT_REP_VISION: return c->vision_layers;
    case BT_REP_CROSS: return c->cross_layers;
    case BT_REP_LINK: return c->cross_layers - 1;
    }
    BT_ASSERT(!"bad rep");
    return 0;
}

static int when_holds(const bt_model_config *c, bt_when w) {
    switch (w) {
    case BT_WHEN_ALWAYS: return 1;
    case BT_WHEN_SCALED_ADD: return c->link_tower_type == BT_LINK_SCALED_ADD;
    case BT_WHEN_INTERPOLATE: return c->link_tower_type == BT_LINK_INTERPOLATE;
    }
    return 0;
}

/* "a.{i}.b" with i = layer -> out. */
static void key_format(char *out, size_t cap, const char *prefix, const char *pattern,
                       int layer) {
    const char *brace = strstr(pattern, "{i}");
    int n;
    if (brace)
        n = snprintf(out, cap, "%s%.*s%d%s", prefix, (int)(brace - pattern), pattern, layer,
                     brace + 3);
    else
        n = snprintf(out, cap, "%s%s", prefix, pattern);
    BT_ASSERT(n > 0 && (size_t)n < cap);
}

static int cmp_bare(const void *a, const void *b) {
    const bt_param_tensor *ta = *(const bt_param_tensor *const *)a;
    const bt_param_tensor *tb = *(const bt_param_tensor *const *)b;
    return strcmp(ta->bare_key, tb->bare_key);
}

void bt_param_table_init(bt_param_table *t, const bt_model_config *c, unsigned heads) {
    memset(t, 0, sizeof *t);
    t->cfg = *c;
    t->heads = heads & BT_HEADS_ALL;
    size_t off = 0, ntens = 0;
    for (int id = 0; id < BT_P_COUNT; id++) {
        const bt_param_desc *d = &bt_param_descs[id];
        bt_param_field *f = &t->fields[id];
        f->name = d->name;
        f->key_pattern = d->key;
        f->rep = d->rep;
        f->reps = rep_count(c, d->rep);
        f->init = d->init;
        f->decay = d->decay;
        f->head = d->head;
        f->numel = 1;
        f->ndim = 0;
        for (int k = 0; k < BT_PARAM_MAX_DIMS; k++) {
            f->dims[k] = d->dims[k];
            if (d->dims[k] == BT_D_NONE) continue;
            f->shape[f->ndim++] = bt_dim_value(c, d->dims[k]);
            f->numel *= (size_t)bt_dim_value(c, d->dims[k]);
        }
        int head_on = d->head == BT_HEAD_BACKBONE || (t->heads & (1u << d->head));
        f->present = head_on && when_holds(c, d->when) && f->reps > 0;
        if (!f->present) continue;
        off = (off + BT_ALIGN - 1) / BT_ALIGN * BT_ALIGN;
        f->offset = off;
        off += f->numel * (size_t)f->reps;
        ntens += (size_t)f->reps;
    }
    t->numel = (off + BT_ALIGN - 1) / BT_ALIGN * BT_ALIGN;
    t->tensors = calloc(ntens ? ntens : 1, sizeof *t->tensors);
    t->by_key = calloc(ntens ? ntens : 1, sizeof *t->by_key);
    BT_ASSERT(t->tensors && t->by_key);
    for (int id = 0; id < BT_P_COUNT; id++) {
        const bt_param_field *f = &t->fields[id];
        if (!f->present) continue;
        for (int l = 0; l < f->reps; l++) {
            bt_param_tensor *x = &t->tensors[t->n_tensors++];
            int bb = f->head == BT_HEAD_BACKBONE;
            key_format(x->key, sizeof x->key, bb ? BT_PREFIX : "", f->key_pattern, l);
            x->bare_key = x->key + (bb ? BT_PREFIX_LEN : 0);
            x->id = (bt_param_id)id;
            x->layer = l;
            x->ndim = f->ndim;
            memcpy(x->shape, f->shape, sizeof x->shape);
            x->numel = f->numel;
            x->offset = f->offset + (size_t)l * f->numel;
            x->decay = f->decay;
            x->head = f->head;
            x->init = f->init;
            t->n_params += f->numel;
        }
    }
    BT_ASSERT(t->n_tensors == ntens);
    /* sort pointers (qsort has no context argument), then store indices */
    const bt_param_tensor **order = calloc(ntens ? ntens : 1, sizeof *order);
    BT_ASSERT(order);
    for (size_t i = 0; i < ntens; i++) order[i] = &t->tensors[i];
    qsort(order, ntens, sizeof *order, cmp_bare);
    for (size_t i = 0; i < ntens; i++) t->by_key[i] = (size_t)(order[i] - t->tensors);
    free(order);
    for (size_t i = 1; i < ntens; i++)
        BT_ASSERT(strcmp(t->tensors[t->by_key[i - 1]].bare_key,
                         t->tensors[t->by_key[i]].bare_key) != 0);
}

void bt_param_table_free(bt_param_table *t) {
    free(t->tensors);
    free(t->by_key);
    memset(t, 0, sizeof *t);
}

const bt_param_tensor *bt_param_table_find(const bt_param_table *t, const char *key) {
    int had_prefix = strncmp(key, BT_PREFIX, BT_PREFIX_LEN) == 0;
    const char *bare = had_prefix ? key + BT_PREFIX_LEN : key;
    size_t lo = 0, hi = t->n_tensors;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const bt_param_tensor *x = &t->tensors[t->by_key[mid]];
        int c = strcmp(x->bare_key, bare);
        if (c == 0) {
            /* head keys carry no prefix; "bridgetower.itm_score..." is not a key */
            if (had_prefix && x->head != BT_HEAD_BACKBONE) return NULL;
            return x;
        }
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

size_t bt_param_table_count_head(const bt_param_table *t, bt_head h) {
    size_t n = 0;
    for (size_t i = 0; i < t->n_tensors; i++)
        if (t->tensors[i].head == h) n += t->tensors[i].numel;
    return n;
}

void bt_param_views_bind(bt_param_views *v, const bt_param_table *t, float *arena) {
#define BT_P_BIND_(ID, f, ...)                                                                \
    v->f = t->fields[BT_P_##ID].present ? arena + t->fields[BT_P_##ID].offset : NULL;
    BT_PARAM_LIST(BT_P_BIND_)
#undef BT_P_BIND_
}

/* --- init ------------------------------------------------------------------------------- */

static uint64_t fnv1a64(const char *s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

/* Uniform in (0, 1]: 53 random bits, never 0 (log is taken). */
static double rng_unit_open0(bt_rng *r) {
    return ((double)(bt_rng_next(r) >> 11) + 1.0) * (1.0 / 9007199254740992.0);
}

static double init_std(const bt_model_config *c, bt_init i) {
    double f = c->initializer_factor, w = c->vision_hidden, lv = c->vision_layers;
    switch (i) {
    case BT_INIT_NORMAL: return 0.05 * f;
    case BT_INIT_CLIP_ATTN: return pow(w, -0.5) * f;
    case BT_INIT_CLIP_PROJ: return pow(w, -0.5) * pow(2.0 * lv, -0.5) * f;
    case BT_INIT_CLIP_FC: return pow(2.0 * w, -0.5) * f;
    default: return 0.0;
    }
}

static void init_tensor(const bt_param_table *t, const bt_param_tensor *x, float *arena,
                        uint64_t seed) {
    float *p = arena + x->offset;
    const bt_model_config *c = &t->cfg;
    switch (x->init) {
    case BT_INIT_ZEROS:
        memset(p, 0, x->numel * sizeof *p);
        return;
    case BT_INIT_ONES:
        for (size_t i = 0; i < x->numel; i++) p[i] = 1.0f;
        return;
    case BT_INIT_HALF:
        for (size_t i = 0; i < x->numel; i++) p[i] = 0.5f;
        return;
    case BT_INIT_LOGIT_SCALE:
        for (size_t i = 0; i < x->numel; i++) p[i] = c->logit_scale_init;
        return;
    default: break;
    }
    double std = init_std(c, x->init);
    bt_rng r;
    bt_rng_seed(&r, seed ^ fnv1a64(x->key));
    /* Box-Muller, both outputs used: pairs (2j, 2j+1). */
    for (size_t i = 0; i < x->numel; i += 2) {
        double u1 = rng_unit_open0(&r), u2 = rng_unit_open0(&r);
        double rad = sqrt(-2.0 * log(u1)), th = 6.283185307179586 * u2;
        p[i] = (float)(std * rad * cos(th));
        if (i + 1 < x->numel) p[i + 1] = (float)(std * rad * sin(th));
    }
}

void bt_params_init(const bt_param_table *t, float *arena, uint64_t seed) {
    memset(arena, 0, t->numel * sizeof *arena); /* padding stays 0 */
    long n = (long)t->n_tensors;
#pragma omp parallel for schedule(dynamic, 1)
    for (long i = 0; i < n; i++) init_tensor(t, &t->tensors[i], arena, seed);
}

void bt_params_refresh_bf16(const bt_param_table *t, bt_bf16 *shadow, const float *arena) {
    bf16_from_f32(shadow, arena, t->numel);
}

/* --- strict loader ------------------------------------------------------------------------ */

bt_status bt_params_load_safetensors(const bt_param_table *t, float *arena, const char *path,
                                     size_t *n_unused) {
    safetensors_file f;
    bt_status s = safetensors_open(&f, path);
    if (s != BT_OK) return s;
    size_t used = 0;
    for (size_t i = 0; i < t->n_tensors && s == BT_OK; i++) {
        const bt_param_tensor *x = &t->tensors[i];
        const safetensors_tensor *st = safetensors_find(&f, x->key);
        if (!st && x->head == BT_HEAD_BACKBONE) st = safetensors_find(&f, x->bare_key);
        if (!st) {
            s = bt_fail(BT_ERR_MISSING, "%s: tensor '%s' is missing (expected shape for %s)",
                        path, x->key, t->fields[x->id].name);
            break;
        }
        used++;
        int same = st->ndim == x->ndim;
        for (int k = 0; same && k < x->ndim; k++) same = st->shape[k] == x->shape[k];
        if (!same) {
            char want[96], got[96];
            safetensors_shape_str(want, sizeof want, x->ndim, x->shape);
            safetensors_shape_str(got, sizeof got, st->ndim, st->shape);
            s = bt_fail(BT_ERR_SHAPE, "%s: tensor '%s' has shape %s, expected %s", path,
                        st->name, got, want);
            break;
        }
        s = safetensors_read_f32(&f, st, arena + x->offset, x->numel);
    }
    if (s == BT_OK && n_unused) *n_unused = f.n_tensors - used;
    safetensors_close(&f);
    return s;
}

bt_status bt_param_table_check_memory(const bt_param_table *t, unsigned copies,
                                      const char *source) {
    uint64_t bytes = bt_mul_sat(bt_mul_sat((uint64_t)t->numel, sizeof(float)), copies);
    char what[1200];
    snprintf(what, sizeof what, "%s: %zu parameters (%u fp32 cop%s)", source ? source : "model",
             t->n_params, copies, copies == 1 ? "y" : "ies");
    return bt_mem_check(bytes, what,
                        "the model's sizes in config.json (hidden_size, intermediate_size, "
                        "num_hidden_layers, vocab_size, max_position_embeddings, image_size)");
}

bt_grad_event bt_param_grad_event(const bt_model_config *c, bt_param_id id, int rep,
                                  int *layer) {
    BT_ASSERT(id >= 0 && id < BT_P_COUNT);
    const bt_param_desc *d = &bt_param_descs[id];
    switch (d->evl) {
    case BT_GRAD_LAYER_0: *layer = 0; break;
    case BT_GRAD_LAYER_REP: *layer = rep; break;
    case BT_GRAD_LAYER_NEXT: *layer = rep + 1; break;
    case BT_GRAD_LAYER_LAST: *layer = c->cross_layers - 1; break;
    }
    if (d->ev == BT_GRAD_EV_NONE) *layer = 0;
    return d->ev;
}

bt_status bt_heads_check_hf(const bt_model_config *c, unsigned heads, const char *source) {
    if ((heads & BT_HEADS_ITC) && c->vision_hidden != c->hidden)
        return bt_fail(BT_ERR_CONFIG,
                       "%s: vision_config.hidden_size (%d) differs from hidden_size (%d), and "
                       "model.heads has \"itc\": transformers' BridgeTowerForContrastiveLearning "
                       "cannot run that shape (it adds the hidden_size token-type embedding to "
                       "the vision-width output), so the trained model would not load for ITC; "
                       "make the two widths equal or leave \"itc\" out of model.heads",
                       source, c->vision_hidden, c->hidden);
    return BT_OK;
}
