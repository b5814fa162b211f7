/* checkpoint.c: HF BridgeTower model directories in and out (see checkpoint.h).
 *
 * Loading walks the weights file once: every key is looked up in the table being loaded
 * (bt_param_table_find accepts the `bridgetower.` prefix or not), then, if absent there, in
 * a table of the same config with every head, to tell "a head you did not ask for" from
 * "not a BridgeTower key". What the file lacks is settled afterwards: backbone gaps and
 * partial heads are errors, wholly absent requested heads are initialized by HF's rules.
 *
 * Saving stages every file under "<name>.new.<pid>" in the target directory, then renames;
 * see checkpoint.h for the guarantee. config.json is built with cJSON from a base config (to
 * keep keys bt does not read) with bt's values written over HF's field names; a value equal
 * to the base's (as the float bt holds) keeps the base's spelling, and keys are sorted as
 * HF's to_json_string does, so save -> load -> save gives the same bytes.
 *
 * Deliberately not here: pickle reading (scripts/convert_checkpoint.py), sharded files,
 * training state. */
#include "model/checkpoint.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fileio.h"
#include "finite.h"
#include "json_util.h"
#include "mem.h"

enum { CK_LIST_SHOWN = 5 }; /* keys named in an error message before "... and N more" */

/* --- small helpers --------------------------------------------------------------------- */

static char *ck_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    BT_ASSERT(d);
    memcpy(d, s, n);
    return d;
}

static char *ck_join(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    BT_ASSERT(p);
    size_t dl = strlen(dir);
    snprintf(p, n, "%s%s%s", dir, (dl && dir[dl - 1] == '/') ? "" : "/", name);
    return p;
}

static void list_push(bt_name_list *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void list_push(bt_name_list *l, const char *fmt, ...) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 16;
        l->names = realloc(l->names, l->cap * sizeof *l->names);
        BT_ASSERT(l->names);
    }
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    BT_ASSERT(n >= 0);
    char *s = malloc((size_t)n + 1);
    BT_ASSERT(s);
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    l->names[l->n++] = s;
}

static void list_free(bt_name_list *l) {
    for (size_t i = 0; i < l->n; i++)
        free(l->names[i]);
    free(l->names);
    memset(l, 0, sizeof *l);
}

/* "'a', 'b', 'c' (and 7 more)" into out. */
static void list_summary(char *out, size_t cap, const bt_name_list *l) {
    size_t k = 0;
    out[0] = '\0';
    for (size_t i = 0; i < l->n && i < CK_LIST_SHOWN && k < cap; i++)
        k += (size_t)snprintf(out + k, cap - k, "%s'%s'", i ? ", " : "", l->names[i]);
    if (l->n > CK_LIST_SHOWN && k < cap)
        snprintf(out + k, cap - k, " (and %zu more)", l->n - CK_LIST_SHOWN);
}

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* 0 absent, 1 regular file, 2 directory, 3 other (a FIFO, a device; also a path that
 * cannot be examined, e.g. a symlink loop: its opener then says why). */
static int path_kind(const char *path) {
    struct stat sb;
    if (stat(path, &sb) != 0) return errno == ENOENT || errno == ENOTDIR ? 0 : 3;
    if (S_ISREG(sb.st_mode)) return 1;
    if (S_ISDIR(sb.st_mode)) return 2;
    return 3;
}

/* --- report ------------------------------------------------------------------------------ */

void bt_checkpoint_report_init(bt_checkpoint_report *r) {
    memset(r, 0, sizeof *r);
}

void bt_checkpoint_report_free(bt_checkpoint_report *r) {
    list_free(&r->missing);
    list_free(&r->mismatched);
    list_free(&r->unexpected);
    list_free(&r->ignored);
    list_free(&r->initialized);
    memset(r, 0, sizeof *r);
}

void bt_checkpoint_report_print(const bt_checkpoint_report *r, FILE *out, const char *who) {
    const char *w = who ? who : "checkpoint";
    for (size_t i = 0; i < r->initialized.n; i++)
        fprintf(out, "%s: notice: %s: not in checkpoint, initialized (HF init rules)\n", w,
                r->initialized.names[i]);
    if (r->ignored.n) {
        char s[1024];
        list_summary(s, sizeof s, &r->ignored);
        fprintf(out, "%s: notice: ignored %zu tensor(s) of heads not built: %s\n", w, r->ignored.n,
                s);
    }
    for (size_t i = 0; i < r->unexpected.n; i++)
        fprintf(out, "%s: warning: unexpected key '%s' (not a BridgeTower parameter)\n", w,
                r->unexpected.names[i]);
    for (size_t i = 0; i < r->mismatched.n; i++)
        fprintf(out, "%s: error: shape mismatch: %s\n", w, r->mismatched.names[i]);
    for (size_t i = 0; i < r->missing.n; i++)
        fprintf(out, "%s: error: missing key '%s'\n", w, r->missing.names[i]);
}

void bt_checkpoint_load_options_default(bt_checkpoint_load_options *o) {
    memset(o, 0, sizeof *o);
    o->heads = BT_CHECKPOINT_HEADS_AUTO;
}

const char *bt_checkpoint_head_modules(bt_head h) {
    switch (h) {
    case BT_HEAD_ITM:
        return "itm_score";
    case BT_HEAD_MLM:
        return "mlm_score";
    case BT_HEAD_ITC:
        return "itc_text_head/itc_image_head/itc_cross_modal_head/logit_scale";
    case BT_HEAD_BACKBONE:
        return "bridgetower";
    case BT_HEAD_COUNT:
        break;
    }
    return "?";
}

/* --- open ---------------------------------------------------------------------------------- */

void bt_checkpoint_close(bt_checkpoint *ck) {
    safetensors_close(&ck->weights);
    free(ck->dir);
    free(ck->config_path);
    free(ck->weights_path);
    free(ck->config_json);
    memset(ck, 0, sizeof *ck);
}

static int is_legacy_buffer(const char *key) {
    return ends_with(key, "position_ids") || ends_with(key, "token_type_ids");
}

bt_status bt_checkpoint_open(bt_checkpoint *ck, const char *dir) {
    memset(ck, 0, sizeof *ck);
    int kind = path_kind(dir);
    if (kind == 0)
        return bt_fail(BT_ERR_IO, "%s: model directory not found: %s", dir, strerror(errno));
    if (kind != 2)
        return bt_fail(BT_ERR_IO,
                       "%s: not a directory; expected a model directory holding config.json and "
                       "model.safetensors",
                       dir);
    ck->dir = ck_strdup(dir);
    ck->config_path = ck_join(dir, "config.json");
    ck->weights_path = ck_join(dir, "model.safetensors");
    bt_status s;
    if (path_kind(ck->config_path) == 0) {
        s = bt_fail(BT_ERR_IO,
                    "%s: missing config.json (a model directory holds config.json and "
                    "model.safetensors, as Hugging Face's save_pretrained writes them)",
                    dir);
        goto fail;
    }
    s = bt_json_read_text(ck->config_path, NULL, &ck->config_json);
    if (s != BT_OK) goto fail;
    s = bt_model_config_parse(&ck->cfg, ck->config_json, ck->config_path);
    if (s != BT_OK) goto fail;

    if (path_kind(ck->weights_path) == 0) {
        char *bin = ck_join(dir, "pytorch_model.bin");
        char *bin_idx = ck_join(dir, "pytorch_model.bin.index.json");
        char *st_idx = ck_join(dir, "model.safetensors.index.json");
        const char *found = path_kind(bin)       ? "pytorch_model.bin"
                            : path_kind(bin_idx) ? "pytorch_model.bin.index.json (sharded)"
                            : path_kind(st_idx)  ? "model.safetensors.index.json (sharded)"
                                                 : NULL;
        free(bin);
        free(bin_idx);
        free(st_idx);
        if (found)
            s = bt_fail(BT_ERR_UNSUPPORTED,
                        "%s: missing model.safetensors; found %s, but bt reads a single "
                        "model.safetensors only. Convert once (needs torch): "
                        "/usr/bin/python3 scripts/convert_checkpoint.py %s",
                        dir, found, dir);
        else
            s = bt_fail(BT_ERR_IO, "%s: missing model.safetensors (the weights file)", dir);
        goto fail;
    }
    s = safetensors_open(&ck->weights, ck->weights_path);
    if (s != BT_OK) goto fail;

    bt_param_table full;
    bt_param_table_init(&full, &ck->cfg, BT_HEADS_ALL);
    for (size_t i = 0; i < ck->weights.n_tensors; i++) {
        const char *name = ck->weights.tensors[i].name;
        if (is_legacy_buffer(name)) continue;
        const bt_param_tensor *x = bt_param_table_find(&full, name);
        if (x && x->head != BT_HEAD_BACKBONE) ck->heads_in_file |= 1u << x->head;
    }
    bt_param_table_free(&full);
    return BT_OK;
fail:
    bt_checkpoint_close(ck);
    return s;
}

/* --- read ---------------------------------------------------------------------------------- */

/* Initializes the tensors of head h (and only those) by bt_params_init's rules. The per-
 * tensor streams depend on (seed, key) only, so the values equal those a full init would
 * give. bt_params_init works on a table's tensor list and arena span; a head's fields are
 * consecutive in the list, hence one span holding nothing but that head's tensors and
 * alignment padding: a table restricted to them, offsets rebased, covers it exactly. */
static void init_head(const bt_param_table *t, float *arena, bt_head h, uint64_t seed) {
    size_t lo = SIZE_MAX, hi = 0, n = 0;
    for (size_t i = 0; i < t->n_tensors; i++) {
        const bt_param_tensor *x = &t->tensors[i];
        if (x->head != h) continue;
        if (x->offset < lo) lo = x->offset;
        if (x->offset + x->numel > hi) hi = x->offset + x->numel;
        n++;
    }
    if (!n) return;
    bt_param_table sub = *t;
    sub.tensors = calloc(n, sizeof *sub.tensors);
    BT_ASSERT(sub.tensors);
    sub.n_tensors = 0;
    sub.by_key = NULL;
    sub.numel = hi - lo;
    sub.n_params = 0;
    for (size_t i = 0; i < t->n_tensors; i++) {
        const bt_param_tensor *x = &t->tensors[i];
        /* another head's tensor inside the span would be zeroed: never, by the list order */
        BT_ASSERT(x->head == h || x->offset + x->numel <= lo || x->offset >= hi);
        if (x->head != h) continue;
        bt_param_tensor *y = &sub.tensors[sub.n_tensors++];
        *y = *x;
        y->bare_key = y->key + (x->bare_key - x->key);
        y->offset = x->offset - lo;
        sub.n_params += x->numel;
    }
    bt_params_init(&sub, arena + lo, seed);
    free(sub.tensors);
}

/* Longer than ~120 lines on purpose: one pass over the file's tensors sorting each into the
 * load report's lists (loaded, ignored, unexpected, mismatched, skipped buffers), then the
 * table's tensors the file lacks (missing), then the verdict on what is missing. */
bt_status bt_checkpoint_read(const bt_checkpoint *ck, const bt_param_table *t, float *arena,
                             const bt_checkpoint_load_options *o, bt_checkpoint_report *r) {
    bt_checkpoint_load_options dflt;
    if (!o) {
        bt_checkpoint_load_options_default(&dflt);
        o = &dflt;
    }
    bt_checkpoint_report local;
    if (!r) r = &local;
    bt_checkpoint_report_init(r);
    r->heads_in_file = ck->heads_in_file;
    r->heads_built = t->heads;

    const char *path = ck->weights_path;
    const safetensors_file *f = &ck->weights;
    bt_param_table full;
    bt_param_table_init(&full, &t->cfg, BT_HEADS_ALL);
    /* seen[i]: file tensor index + 1 that provided table tensor i (0: none yet) */
    size_t *seen = calloc(t->n_tensors ? t->n_tensors : 1, sizeof *seen);
    BT_ASSERT(seen);
    bt_status s = BT_OK;
    char first_bad[BT_PARAM_KEY_MAX + 320] = ""; /* the first shape mismatch, for the error */

    for (size_t i = 0; i < f->n_tensors && s == BT_OK; i++) {
        const safetensors_tensor *st = &f->tensors[i];
        if (is_legacy_buffer(st->name)) {
            r->n_skipped_buffers++;
            continue;
        }
        const bt_param_tensor *x = bt_param_table_find(t, st->name);
        if (!x) {
            if (bt_param_table_find(&full, st->name))
                list_push(&r->ignored, "%s", st->name);
            else
                list_push(&r->unexpected, "%s", st->name);
            continue;
        }
        size_t idx = (size_t)(x - t->tensors);
        if (seen[idx]) {
            s = bt_fail(BT_ERR_FORMAT,
                        "%s: tensors '%s' and '%s' are the same parameter (with and without "
                        "the `bridgetower.` prefix); expected one of them",
                        path, f->tensors[seen[idx] - 1].name, st->name);
            break;
        }
        seen[idx] = i + 1;
        int same = st->ndim == x->ndim;
        for (int k = 0; same && k < x->ndim; k++)
            same = st->shape[k] == x->shape[k];
        if (!same) {
            char want[128], got[128];
            safetensors_shape_str(want, sizeof want, x->ndim, x->shape);
            safetensors_shape_str(got, sizeof got, st->ndim, st->shape);
            list_push(&r->mismatched, "%s: expected %s, found %s", st->name, want, got);
            if (!first_bad[0])
                snprintf(first_bad, sizeof first_bad, "tensor '%s': expected shape %s, found %s",
                         st->name, want, got);
            continue;
        }
        s = safetensors_read_f32(f, st, arena + x->offset, x->numel);
        if (s == BT_OK) {
            long long shp[SAFETENSORS_MAX_DIMS];
            for (int k = 0; k < st->ndim; k++)
                shp[k] = st->shape[k];
            s = bt_check_finite(arena + x->offset, x->numel, path, st->name, st->ndim, shp,
                                "weights (finite.h)");
        }
        if (s == BT_OK) r->n_loaded++;
    }

    if (s == BT_OK && r->mismatched.n) {
        char more[64] = "";
        if (r->mismatched.n > 1)
            snprintf(more, sizeof more, " (and %zu more mismatched tensor(s))",
                     r->mismatched.n - 1);
        s = bt_fail(BT_ERR_SHAPE, "%s: %s%s; the shapes follow %s", path, first_bad, more,
                    ck->config_path);
    }

    /* What the file lacks: backbone gaps and partial heads are errors; a requested head with
     * no tensor at all is initialized. */
    size_t have[BT_HEAD_COUNT] = {0}, want[BT_HEAD_COUNT] = {0};
    for (size_t i = 0; i < t->n_tensors; i++) {
        want[t->tensors[i].head]++;
        if (seen[i]) have[t->tensors[i].head]++;
    }
    int init_heads[BT_HEAD_COUNT] = {0};
    size_t missing_backbone = 0;
    for (size_t i = 0; i < t->n_tensors; i++) {
        const bt_param_tensor *x = &t->tensors[i];
        if (seen[i]) continue;
        if (x->head != BT_HEAD_BACKBONE && have[x->head] == 0) {
            init_heads[x->head] = 1;
            continue;
        }
        if (x->head == BT_HEAD_BACKBONE) missing_backbone++;
        list_push(&r->missing, "%s", x->key);
    }
    if (s == BT_OK && r->missing.n) {
        char names[1024];
        list_summary(names, sizeof names, &r->missing);
        if (missing_backbone)
            s = bt_fail(BT_ERR_MISSING,
                        "%s: %zu tensor(s) missing (%zu of the backbone): %s; %s describes a "
                        "model with these tensors (keys may carry the `bridgetower.` prefix "
                        "or not)",
                        path, r->missing.n, missing_backbone, names, ck->config_path);
        else
            s = bt_fail(BT_ERR_MISSING,
                        "%s: %zu tensor(s) of a partly present head missing: %s; a head must "
                        "be complete or absent (absent heads are initialized)",
                        path, r->missing.n, names);
    }
    if (s == BT_OK && r->unexpected.n && o->unknown_keys_are_errors) {
        char names[1024];
        list_summary(names, sizeof names, &r->unexpected);
        s = bt_fail(BT_ERR_FORMAT, "%s: %zu unexpected key(s), not BridgeTower parameters: %s",
                    path, r->unexpected.n, names);
    }
    if (s == BT_OK) {
        for (int h = BT_HEAD_BACKBONE + 1; h < BT_HEAD_COUNT; h++) {
            if (!init_heads[h]) continue;
            init_head(t, arena, (bt_head)h, o->init_seed);
            list_push(&r->initialized, "%s", bt_checkpoint_head_modules((bt_head)h));
        }
    }
    free(seen);
    bt_param_table_free(&full);
    if (r == &local) bt_checkpoint_report_free(&local);
    return s;
}

/* --- load ---------------------------------------------------------------------------------- */

void bt_checkpoint_weights_free(bt_checkpoint_weights *w) {
    if (w->params) bt_free(w->params);
    if (w->table.tensors) bt_param_table_free(&w->table);
    free(w->config_json);
    memset(w, 0, sizeof *w);
}

bt_status bt_checkpoint_load(bt_checkpoint_weights *w, const char *dir,
                             const bt_checkpoint_load_options *o, bt_checkpoint_report *r) {
    memset(w, 0, sizeof *w);
    bt_checkpoint_load_options dflt;
    if (!o) {
        bt_checkpoint_load_options_default(&dflt);
        o = &dflt;
    }
    if (r) bt_checkpoint_report_init(r);
    bt_checkpoint ck;
    bt_status s = bt_checkpoint_open(&ck, dir);
    if (s != BT_OK) return s;
    unsigned heads = o->heads == BT_CHECKPOINT_HEADS_AUTO ? ck.heads_in_file : o->heads;
    w->cfg = ck.cfg;
    bt_param_table_init(&w->table, &ck.cfg, heads & BT_HEADS_ALL);
    s = bt_param_table_check_memory(&w->table, 1, ck.config_path);
    if (s != BT_OK) {
        bt_checkpoint_close(&ck);
        bt_checkpoint_weights_free(w);
        return s;
    }
    w->params = bt_calloc(w->table.numel * sizeof *w->params);
    s = bt_checkpoint_read(&ck, &w->table, w->params, o, r);
    if (s == BT_OK) {
        w->config_json = ck.config_json;
        ck.config_json = NULL;
    }
    bt_checkpoint_close(&ck);
    if (s != BT_OK) bt_checkpoint_weights_free(w);
    return s;
}

bt_status bt_checkpoint_init(bt_checkpoint_weights *w, const char *dir, unsigned heads,
                             uint64_t seed) {
    memset(w, 0, sizeof *w);
    int kind = path_kind(dir);
    if (kind == 0)
        return bt_fail(BT_ERR_IO, "%s: model directory not found: %s", dir, strerror(errno));
    if (kind != 2)
        return bt_fail(BT_ERR_IO, "%s: not a directory; expected a directory holding config.json",
                       dir);
    char *path = ck_join(dir, "config.json");
    bt_status s;
    if (path_kind(path) == 0)
        s = bt_fail(BT_ERR_IO, "%s: missing config.json (HF field names; see configs/)", dir);
    else
        s = bt_json_read_text(path, NULL, &w->config_json);
    if (s == BT_OK) s = bt_model_config_parse(&w->cfg, w->config_json, path);
    if (s == BT_OK) {
        bt_param_table_init(&w->table, &w->cfg, heads & BT_HEADS_ALL);
        s = bt_param_table_check_memory(&w->table, 1, path);
    }
    free(path);
    if (s != BT_OK) {
        bt_checkpoint_weights_free(w);
        return s;
    }
    w->params = bt_calloc(w->table.numel * sizeof *w->params);
    bt_params_init(&w->table, w->params, seed);
    return BT_OK;
}

/* --- config.json writer -------------------------------------------------------------------- */

/* Replaces obj[key] with item (or adds it). */
static void js_put(cJSON *obj, const char *key, cJSON *item) {
    BT_ASSERT(item);
    if (cJSON_GetObjectItemCaseSensitive(obj, key))
        cJSON_ReplaceItemInObjectCaseSensitive(obj, key, item);
    else
        cJSON_AddItemToObject(obj, key, item);
}

static void js_int(cJSON *obj, const char *key, long long v) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (it && cJSON_IsNumber(it) && it->valuedouble == (double)v) return;
    js_put(obj, key, cJSON_CreateNumber((double)v));
}

/* A float bt holds: kept when the file's number reads as the same float (keeps "1e-05",
 * "2.6592" as written), else written with the fewest digits that read back exactly. */
static void js_float(cJSON *obj, const char *key, float v) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (it && cJSON_IsNumber(it) && (float)it->valuedouble == v) return;
    char buf[32];
    for (int p = 1; p <= 9; p++) {
        snprintf(buf, sizeof buf, "%.*g", p, (double)v);
        if (strtof(buf, NULL) == v) break;
    }
    js_put(obj, key, cJSON_CreateNumber(strtod(buf, NULL)));
}

static void js_bool(cJSON *obj, const char *key, int v) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (it && cJSON_IsBool(it) && cJSON_IsTrue(it) == !!v) return;
    js_put(obj, key, cJSON_CreateBool(v));
}

static void js_str(cJSON *obj, const char *key, const char *v) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (it && cJSON_IsString(it) && strcmp(it->valuestring, v) == 0) return;
    js_put(obj, key, cJSON_CreateString(v));
}

/* Sets obj[key] = v only when absent or null (fields bt does not hold: keep the file's). */
static void js_int_default(cJSON *obj, const char *key, long long v) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (it && !cJSON_IsNull(it)) return;
    js_put(obj, key, cJSON_CreateNumber((double)v));
}

static cJSON *js_object(cJSON *obj, const char *key) {
    cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (it && cJSON_IsObject(it)) return it;
    cJSON *o = cJSON_CreateObject();
    js_put(obj, key, o);
    return o;
}

static int js_cmp_key(const void *a, const void *b) {
    const cJSON *x = *(const cJSON *const *)a, *y = *(const cJSON *const *)b;
    return strcmp(x->string, y->string);
}

/* Sorts an object's members by key, as HF's to_json_string(sort_keys=True) does. (A file
 * with duplicate keys keeps them all, in an unspecified relative order.) */
static void js_sort(cJSON *obj) {
    size_t n = 0;
    for (cJSON *c = obj->child; c; c = c->next)
        n++;
    if (n < 2) return;
    cJSON **items = malloc(n * sizeof *items);
    BT_ASSERT(items);
    size_t i = 0;
    while (obj->child)
        items[i++] = cJSON_DetachItemViaPointer(obj, obj->child);
    qsort(items, n, sizeof *items, js_cmp_key);
    for (i = 0; i < n; i++)
        cJSON_AddItemToArray(obj, items[i]); /* keeps item->string */
    free(items);
}

char *bt_checkpoint_config_json(const bt_model_config *c, unsigned heads, bt_dtype dtype,
                                const char *base_config_json) {
    cJSON *root = base_config_json ? cJSON_Parse(base_config_json) : cJSON_CreateObject();
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        bt_fail(BT_ERR_FORMAT, "base config.json: not a JSON object");
        return NULL;
    }
    /* Top level (BridgeTowerConfig). */
    cJSON *arch = cJSON_CreateArray();
    if (heads & BT_HEADS_ITC)
        cJSON_AddItemToArray(arch, cJSON_CreateString("BridgeTowerForContrastiveLearning"));
    if (heads & BT_HEADS_ITM)
        cJSON_AddItemToArray(arch, cJSON_CreateString("BridgeTowerForImageAndTextRetrieval"));
    if (heads & BT_HEADS_MLM)
        cJSON_AddItemToArray(arch, cJSON_CreateString("BridgeTowerForMaskedLM"));
    if (!(heads & BT_HEADS_ALL)) cJSON_AddItemToArray(arch, cJSON_CreateString("BridgeTowerModel"));
    js_put(root, "architectures", arch);
    js_str(root, "model_type", "bridgetower");
    js_int(root, "hidden_size", c->hidden);
    js_int(root, "num_hidden_layers", c->cross_layers);
    js_int(root, "num_attention_heads", c->num_attention_heads);
    js_float(root, "layer_norm_eps", c->layer_norm_eps);
    js_float(root, "initializer_factor", c->initializer_factor);
    js_str(root, "link_tower_type", bt_link_type_name(c->link_tower_type));
    js_str(root, "hidden_act", "gelu");
    js_bool(root, "share_cross_modal_transformer_layers", 1);
    js_bool(root, "share_link_tower_layers", 0);
    js_bool(root, "tie_word_embeddings", 0);
    if (!cJSON_GetObjectItemCaseSensitive(root, "init_layernorm_from_vision_encoder"))
        js_bool(root, "init_layernorm_from_vision_encoder", 0);
    js_int(root, "contrastive_hidden_size", c->contrastive_hidden);
    js_float(root, "logit_scale_init_value", c->logit_scale_init);
    js_str(root, "torch_dtype", dtype == BT_DTYPE_BF16 ? "bfloat16" : "float32");
    const cJSON *tv = cJSON_GetObjectItemCaseSensitive(root, "transformers_version");
    if (!tv || !cJSON_IsString(tv)) js_str(root, "transformers_version", "4.27.1");

    /* text_config (BridgeTowerTextConfig). */
    cJSON *tc = js_object(root, "text_config");
    js_str(tc, "model_type", "bridgetower_text_model");
    js_int(tc, "vocab_size", c->vocab_size);
    js_int(tc, "hidden_size", c->text_hidden);
    js_int(tc, "num_hidden_layers", c->text_layers);
    js_int(tc, "num_attention_heads", c->text_heads);
    js_int(tc, "intermediate_size", c->text_intermediate);
    js_str(tc, "hidden_act", "gelu");
    js_float(tc, "hidden_dropout_prob", c->hidden_dropout_prob);
    js_float(tc, "attention_probs_dropout_prob", c->attention_probs_dropout_prob);
    js_int(tc, "max_position_embeddings", c->max_position_embeddings);
    js_int(tc, "type_vocab_size", c->type_vocab_size);
    js_float(tc, "layer_norm_eps", c->text_layer_norm_eps);
    js_int(tc, "pad_token_id", c->pad_token_id);
    js_str(tc, "position_embedding_type", "absolute");
    js_int_default(tc, "bos_token_id", 0);
    js_int_default(tc, "eos_token_id", 2);
    js_int_default(tc, "initializer_factor", 1);

    /* vision_config (BridgeTowerVisionConfig). */
    cJSON *vc = js_object(root, "vision_config");
    js_str(vc, "model_type", "bridgetower_vision_model");
    js_int(vc, "hidden_size", c->vision_hidden);
    js_int(vc, "num_hidden_layers", c->vision_layers);
    js_int(vc, "num_channels", c->num_channels);
    js_int(vc, "patch_size", c->patch_size);
    js_int(vc, "image_size", c->image_size);
    js_float(vc, "layer_norm_eps", c->vision_layer_norm_eps);
    js_bool(vc, "share_layernorm", 1);
    js_bool(vc, "stop_gradient", 0);
    js_bool(vc, "remove_last_layer", 0);
    js_int_default(vc, "initializer_factor", 1);

    js_sort(root);
    js_sort(tc);
    js_sort(vc);
    char *text = bt_json_print_line(root);
    cJSON_Delete(root);
    return text;
}

/* --- save ----------------------------------------------------------------------------------- */

const char *const bt_checkpoint_aux_files[] = {
    "vocab.json",
    "merges.txt",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "preprocessor_config.json",
    NULL,
};

void bt_checkpoint_save_options_default(bt_checkpoint_save_options *o) {
    memset(o, 0, sizeof *o);
    o->dtype = BT_DTYPE_F32;
}

/* Copies the regular file src into the open temp file of af. */
static bt_status copy_into(const char *src, bt_atomic_file *af) {
    FILE *in;
    bt_status s = bt_fopen_regular(src, "file to copy", &in);
    if (s != BT_OK) return s;
    char buf[65536];
    int err = 0, rerr = 0;
    for (;;) {
        size_t got = fread(buf, 1, sizeof buf, in);
        if (got && fwrite(buf, 1, got, af->fp) != got) {
            err = errno ? errno : EIO;
            break;
        }
        if (got < sizeof buf) {
            if (ferror(in)) rerr = 1;
            break;
        }
    }
    fclose(in);
    if (rerr) return bt_fail(BT_ERR_IO, "%s: read error while copying", src);
    if (err) return bt_fail(BT_ERR_IO, "%s: write failed: %s", af->tmp, strerror(err));
    return BT_OK;
}

static int same_dir(const char *a, const char *b) {
    struct stat sa, sb;
    if (stat(a, &sa) != 0 || stat(b, &sb) != 0) return 0;
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

enum { CK_MAX_FILES = 16 };

/* The weights file of a checkpoint: the parameters, then the two persistent int64 buffers of
 * transformers 4.27's state_dict (from_pretrained there lists them as "newly initialized"
 * when a file lacks them; later versions drop them as known buffers). Values as HF's __init__
 * makes them: arange over the text position table and over the image tokens. */
static bt_status write_weights(FILE *fp, const char *path, const char *dir,
                               const bt_param_table *t, const float *arena, bt_dtype dtype) {
    const bt_model_config *c = &t->cfg;
    int64_t *tpos = malloc((size_t)c->max_position_embeddings * sizeof *tpos);
    int64_t *vpos = malloc((size_t)c->np * sizeof *vpos);
    safetensors_entry *e = calloc(t->n_tensors + 2, sizeof *e);
    if (!tpos || !vpos || !e) {
        free(tpos);
        free(vpos);
        free(e);
        return bt_fail(BT_ERR_NOMEM, "%s: out of memory preparing the weights file", dir);
    }
    for (int i = 0; i < c->max_position_embeddings; i++)
        tpos[i] = i;
    for (int i = 0; i < c->np; i++)
        vpos[i] = i;
    for (size_t i = 0; i < t->n_tensors; i++) {
        const bt_param_tensor *x = &t->tensors[i];
        e[i].name = x->key;
        e[i].dtype = dtype;
        e[i].src_dtype = BT_DTYPE_F32;
        e[i].ndim = x->ndim;
        for (int k = 0; k < x->ndim; k++)
            e[i].shape[k] = x->shape[k];
        e[i].data = arena + x->offset;
    }
    e[t->n_tensors] = (safetensors_entry){"bridgetower.text_model.embeddings.position_ids",
                                          BT_DTYPE_I64,
                                          BT_DTYPE_I64,
                                          2,
                                          {1, c->max_position_embeddings},
                                          tpos};
    e[t->n_tensors + 1] =
        (safetensors_entry){"bridgetower.vision_model.visual.embeddings.position_ids",
                            BT_DTYPE_I64,
                            BT_DTYPE_I64,
                            2,
                            {1, c->np},
                            vpos};
    static const char *const meta[] = {"format", "pt", NULL};
    const bt_status s = safetensors_write_stream(fp, path, e, t->n_tensors + 2, meta);
    free(e);
    free(tpos);
    free(vpos);
    return s;
}

bt_status bt_checkpoint_save(const char *dir, const bt_param_table *t, const float *arena,
                             const bt_checkpoint_save_options *o) {
    bt_checkpoint_save_options dflt;
    if (!o) {
        bt_checkpoint_save_options_default(&dflt);
        o = &dflt;
    }
    if (o->dtype != BT_DTYPE_F32 && o->dtype != BT_DTYPE_BF16)
        return bt_fail(BT_ERR_ARG, "%s: checkpoint dtype %s not supported; expected F32 or BF16",
                       dir, bt_dtype_name(o->dtype));
    if (!dir || !dir[0])
        return bt_fail(BT_ERR_ARG, "the checkpoint directory path is empty; expected a directory");
    char *json = bt_checkpoint_config_json(&t->cfg, t->heads, o->dtype, o->base_config_json);
    if (!json) return bt_fail_context(BT_ERR_FORMAT, "%s", dir);
    bt_status s = bt_make_dirs(dir, "checkpoint directory");
    if (s != BT_OK) {
        free(json);
        return s;
    }

    /* Files: [0] weights, [1] config, then every aux file the directory format owns. Each
     * aux file is the copy from o->copy_from_dir, or removed when that has none (or there
     * is no copy_from_dir): a directory never mixes this model with another's tokenizer. */
    const char *final_names[CK_MAX_FILES];
    char *finals[CK_MAX_FILES] = {0}, *sources[CK_MAX_FILES] = {0};
    bt_atomic_file af[CK_MAX_FILES];
    memset(af, 0, sizeof af);
    size_t nf = 0;
    final_names[nf++] = "model.safetensors";
    final_names[nf++] = "config.json";
    int keep_aux = o->copy_from_dir && same_dir(o->copy_from_dir, dir);
    for (size_t i = 0; bt_checkpoint_aux_files[i]; i++) {
        BT_ASSERT(nf < CK_MAX_FILES);
        final_names[nf++] = bt_checkpoint_aux_files[i];
    }
    int has_tokenizer = 0;
    for (size_t i = 0; i < nf; i++) {
        finals[i] = ck_join(dir, final_names[i]);
        if (i >= 2 && o->copy_from_dir && !keep_aux) {
            char *src = ck_join(o->copy_from_dir, final_names[i]);
            if (path_kind(src) != 0)
                sources[i] = src; /* copied (or refused with a message when not a file) */
            else
                free(src);
            has_tokenizer |= sources[i] && (!strcmp(final_names[i], "vocab.json") ||
                                            !strcmp(final_names[i], "tokenizer.json"));
        }
    }
    /* A tokenizer without tokenizer_config.json gets one holding model_max_length (the text
     * the position table takes): without it transformers sets model_max_length to 1e30 and
     * truncation=True cuts nothing. */
    char gen_tokcfg[64] = "";
    size_t i_tokcfg = nf;
    for (size_t i = 2; i < nf; i++)
        if (!strcmp(final_names[i], "tokenizer_config.json")) i_tokcfg = i;
    if (has_tokenizer && i_tokcfg < nf && !sources[i_tokcfg])
        snprintf(gen_tokcfg, sizeof gen_tokcfg, "{\n  \"model_max_length\": %d\n}\n",
                 bt_model_config_max_text(&t->cfg));
#define CK_WRITES(i) ((i) < 2 || sources[i] || ((i) == i_tokcfg && gen_tokcfg[0]))
    /* Check every target before writing anything (refuse a device, FIFO or directory). */
    for (size_t i = 0; i < nf && s == BT_OK; i++)
        if (CK_WRITES(i)) s = bt_check_output_file(finals[i], final_names[i]);
    for (size_t i = 2; i < nf && s == BT_OK && !keep_aux; i++) {
        struct stat sb;
        if (!CK_WRITES(i) && lstat(finals[i], &sb) == 0 && !S_ISREG(sb.st_mode) &&
            !S_ISLNK(sb.st_mode))
            s = bt_fail(BT_ERR_IO, "%s: is %s; refusing to remove it (the model directory owns "
                        "%s)", finals[i], bt_file_type_name(sb.st_mode), final_names[i]);
    }
    for (size_t i = 0; i < nf && s == BT_OK; i++)
        if (CK_WRITES(i)) s = bt_atomic_open(&af[i], finals[i], final_names[i]);
    if (s != BT_OK) goto done;

    /* 1. weights */
    s = write_weights(af[0].fp, finals[0], dir, t, arena, o->dtype);
    /* 2. config */
    if (s == BT_OK && fwrite(json, 1, strlen(json), af[1].fp) != strlen(json))
        s = bt_fail(BT_ERR_IO, "%s: write failed: %s", af[1].tmp, strerror(errno ? errno : EIO));
    /* 3. aux copies (those that exist in the source) */
    for (size_t i = 2; i < nf && s == BT_OK; i++)
        if (sources[i]) s = copy_into(sources[i], &af[i]);
    if (s == BT_OK && gen_tokcfg[0] &&
        fwrite(gen_tokcfg, 1, strlen(gen_tokcfg), af[i_tokcfg].fp) != strlen(gen_tokcfg))
        s = bt_fail(BT_ERR_IO, "%s: write failed: %s", af[i_tokcfg].tmp,
                    strerror(errno ? errno : EIO));
    /* Every temp file complete and synced before the first rename. */
    for (size_t i = 0; i < nf && s == BT_OK; i++)
        if (af[i].tmp) s = bt_atomic_close(&af[i]);
    if (s != BT_OK) {
        s = bt_fail_context(s, "%s: checkpoint not saved (previous files kept)", dir);
        goto done;
    }
    /* 4. renames, only once everything is written; then stale aux files go. */
    size_t renamed = 0;
    for (size_t i = 0; i < nf && s == BT_OK; i++) {
        if (!af[i].tmp) continue;
        s = bt_atomic_commit(&af[i]);
        if (s != BT_OK)
            s = bt_fail_context(s, "%s: %zu file(s) of the new checkpoint already in place", dir,
                                renamed);
        else
            renamed++;
    }
    for (size_t i = 2; i < nf && s == BT_OK && !keep_aux; i++)
        if (!CK_WRITES(i)) s = bt_remove_owned_file(finals[i], final_names[i]);
#undef CK_WRITES
    if (s == BT_OK && !keep_aux) bt_sync_dir_of(dir, 1);
done:
    for (size_t i = 0; i < nf; i++) {
        bt_atomic_abort(&af[i]);
        free(finals[i]);
        free(sources[i]);
    }
    free(json);
    return s;
}
