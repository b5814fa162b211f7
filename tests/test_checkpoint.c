/* test_checkpoint.c: HF model directories in and out (src/model/checkpoint.h).
 *
 * Reference for "what the tiny fixture holds": the colleague's strict loader
 * bt_params_load_safetensors (a separate code path) and the bytes of the fixture file.
 * Every variant file (no prefix, BF16, F16, a head dropped, extra buffers, unknown keys) is
 * derived here from tests/fixtures/tiny/model.safetensors; the expected values after a lossy
 * dtype are computed by this file's own rounding functions (round to nearest even), not by
 * the conversions the loader uses. Cases:
 *   - load (heads from the file) = strict loader, bit for bit; clean report;
 *   - save -> load: every parameter bitwise identical, same config; save again: the
 *     model.safetensors and config.json bytes identical; aux files copied; keys and
 *     "__metadata__" as HF writes them; extra config keys kept;
 *   - prefix-less backbone keys load the same;
 *   - BF16 / F16 files load as the RNE-rounded values; bt's own BF16 save too;
 *   - a file without itm_score: with ITM requested, ITM initialized by the HF rules (equal to
 *     a full bt_params_init with the same seed) and reported; with heads from the file, ITM
 *     not built;
 *   - heads not requested are ignored and reported; an I64 position_ids buffer is skipped and
 *     counted; unknown keys are reported (and fail with unknown_keys_are_errors);
 *   - a config written without a base config reloads to the same bt_model_config;
 *   - the scaled_add fixture (0-d link-tower scalars) round-trips. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "model/checkpoint.h"
#include "safetensors.h"
#include "test_util.h"

static const char *tmp;
static char fixture_dir[1024];

/* --- file helpers ----------------------------------------------------------------------- */

static const char *pjoin(char *buf, size_t cap, const char *dir, const char *name) {
    snprintf(buf, cap, "%s/%s", dir, name);
    return buf;
}

/* A fresh model dir <tmp>/<label> with the fixture's config.json. */
static const char *make_dir(const char *label) {
    static char d[1024];
    char a[1200], b[1200];
    snprintf(d, sizeof d, "%s/%s", tmp, label);
    mkdir(d, 0755);
    size_t n;
    uint8_t *cfg = tu_read_file(pjoin(a, sizeof a, fixture_dir, "config.json"), &n);
    if (!cfg) {
        printf("cannot read the fixture config\n");
        exit(1);
    }
    tu_setup_file(pjoin(b, sizeof b, d, "config.json"), cfg, n);
    free(cfg);
    return d;
}

/* --- independent roundings (RNE) --------------------------------------------------------- */

static float round_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    u &= 0xffff0000u;
    memcpy(&f, &u, 4);
    return f;
}

/* fp32 -> IEEE half bits, RNE; finite inputs of the fixture's range only. */
static uint16_t half_bits(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x477ff000u) return sign | 0x7c00u; /* rounds to inf */
    if (ax < 0x38800000u) {                       /* below 2^-14: half subnormal */
        float v;
        memcpy(&v, &ax, 4);
        return sign | (uint16_t)nearbyintf(v * 16777216.0f); /* exact scale, RNE */
    }
    ax += 0xfffu + ((ax >> 13) & 1u);
    ax -= (uint32_t)(127 - 15) << 23;
    return sign | (uint16_t)(ax >> 13);
}

static float half_value(uint16_t h) {
    int e = (h >> 10) & 31, m = h & 1023;
    float v = e == 0 ? ldexpf((float)m, -24) : ldexpf((float)(m + 1024), e - 25);
    return (h & 0x8000u) ? -v : v;
}

/* --- variant files ------------------------------------------------------------------------ */

typedef struct variant {
    int strip_prefix;        /* backbone keys without `bridgetower.` */
    bt_dtype dtype;          /* F32 or BF16 (converted by the writer) */
    const char *drop;        /* drop keys starting with this */
    int add_position_ids;    /* + an I64 legacy buffer */
    const char *add_unknown; /* + an F32 key of that name */
} variant;

/* <tmp>/<label>/{config.json, model.safetensors} from the fixture, transformed. */
static const char *write_variant(const char *label, const variant *v) {
    const char *d = make_dir(label);
    char path[1200], src[1200];
    safetensors_file f;
    if (safetensors_open(&f, pjoin(src, sizeof src, fixture_dir, "model.safetensors")) != BT_OK) {
        printf("%s\n", bt_error_message());
        exit(1);
    }
    safetensors_entry *e = calloc(f.n_tensors + 2, sizeof *e);
    char **names = calloc(f.n_tensors, sizeof *names);
    size_t n = 0;
    for (size_t i = 0; i < f.n_tensors; i++) {
        const safetensors_tensor *t = &f.tensors[i];
        if (v->drop && strncmp(t->name, v->drop, strlen(v->drop)) == 0) continue;
        const char *name = t->name;
        if (v->strip_prefix && strncmp(name, "bridgetower.", 12) == 0) name += 12;
        names[n] = strdup(name);
        e[n].name = names[n];
        e[n].dtype = v->dtype;
        e[n].src_dtype = BT_DTYPE_F32;
        e[n].ndim = t->ndim;
        memcpy(e[n].shape, t->shape, sizeof t->shape);
        e[n].data = t->data; /* fixture data is 8-aligned F32 (written by safetensors_io) */
        n++;
    }
    static int64_t pos[40];
    for (int i = 0; i < 40; i++)
        pos[i] = i;
    if (v->add_position_ids)
        e[n++] = (safetensors_entry){"bridgetower.text_model.embeddings.position_ids",
                                     BT_DTYPE_I64,
                                     BT_DTYPE_I64,
                                     2,
                                     {1, 40},
                                     pos};
    static float junk[3] = {1, 2, 3};
    if (v->add_unknown)
        e[n++] = (safetensors_entry){v->add_unknown, BT_DTYPE_F32, BT_DTYPE_F32, 1, {3}, junk};
    const char *meta[] = {"format", "pt", NULL};
    bt_status s = safetensors_write(pjoin(path, sizeof path, d, "model.safetensors"), e, n, meta);
    if (s != BT_OK) {
        printf("variant %s: %s\n", label, bt_error_message());
        exit(1);
    }
    for (size_t i = 0; i < f.n_tensors; i++)
        free(names[i]);
    free(names);
    free(e);
    safetensors_close(&f);
    return d;
}

/* The fixture with every tensor stored as F16 (header and data written here). */
static const char *write_f16_variant(const char *label) {
    const char *d = make_dir(label);
    char src[1200], path[1200];
    safetensors_file f;
    if (safetensors_open(&f, pjoin(src, sizeof src, fixture_dir, "model.safetensors")) != BT_OK)
        exit(1);
    size_t hcap = 1 << 16, h = 0, data_n = 0;
    char *hdr = malloc(hcap);
    h += (size_t)snprintf(hdr + h, hcap - h, "{\"__metadata__\":{\"format\":\"pt\"}");
    for (size_t i = 0; i < f.n_tensors; i++) {
        const safetensors_tensor *t = &f.tensors[i];
        h += (size_t)snprintf(hdr + h, hcap - h, ",\"%s\":{\"dtype\":\"F16\",\"shape\":[", t->name);
        for (int k = 0; k < t->ndim; k++)
            h +=
                (size_t)snprintf(hdr + h, hcap - h, "%s%lld", k ? "," : "", (long long)t->shape[k]);
        h += (size_t)snprintf(hdr + h, hcap - h, "],\"data_offsets\":[%zu,%zu]}", data_n,
                              data_n + 2 * t->numel);
        data_n += 2 * t->numel;
    }
    h += (size_t)snprintf(hdr + h, hcap - h, "}");
    if (h >= hcap) exit(1);
    while ((8 + h) % 8)
        hdr[h++] = ' ';
    uint8_t *buf = malloc(8 + h + data_n);
    for (int i = 0; i < 8; i++)
        buf[i] = (uint8_t)((uint64_t)h >> (8 * i));
    memcpy(buf + 8, hdr, h);
    uint8_t *p = buf + 8 + h;
    for (size_t i = 0; i < f.n_tensors; i++) {
        const safetensors_tensor *t = &f.tensors[i];
        for (size_t j = 0; j < t->numel; j++) {
            float x;
            memcpy(&x, t->data + 4 * j, 4);
            uint16_t hb = half_bits(x);
            memcpy(p, &hb, 2);
            p += 2;
        }
    }
    tu_setup_file(pjoin(path, sizeof path, d, "model.safetensors"), buf, 8 + h + data_n);
    free(buf);
    free(hdr);
    safetensors_close(&f);
    return d;
}

/* --- checks ---------------------------------------------------------------------------------- */

static int report_clean(const bt_checkpoint_report *r) {
    return r->missing.n == 0 && r->mismatched.n == 0 && r->unexpected.n == 0 && r->ignored.n == 0 &&
           r->initialized.n == 0 && r->n_skipped_buffers == 0;
}

/* A directory bt saved: clean except the two int64 position_ids buffers it writes. */
static int report_clean_saved(const bt_checkpoint_report *r) {
    return r->missing.n == 0 && r->mismatched.n == 0 && r->unexpected.n == 0 && r->ignored.n == 0 &&
           r->initialized.n == 0 && r->n_skipped_buffers == 2;
}

/* tensor `name` of f is I64 [1, n] holding 0, 1, ..., n-1 */
static int is_arange(const safetensors_file *f, const char *name, int64_t n) {
    const safetensors_tensor *t = safetensors_find(f, name);
    if (!t || t->dtype != BT_DTYPE_I64 || t->ndim != 2 || t->shape[0] != 1 || t->shape[1] != n)
        return 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t v;
        memcpy(&v, t->data + 8 * i, 8);
        if (v != i) return 0;
    }
    return 1;
}

static int list_has(const bt_name_list *l, const char *name) {
    for (size_t i = 0; i < l->n; i++)
        if (strcmp(l->names[i], name) == 0) return 1;
    return 0;
}

/* Every tensor of w equals ref (same table layout) under f(ref) bitwise. */
static int params_match(const bt_checkpoint_weights *w, const float *ref, float (*f)(float),
                        const char *what) {
    if (w->table.heads != BT_HEADS_ALL) return 0; /* ref is laid out for every head */
    for (size_t i = 0; i < w->table.n_tensors; i++) {
        const bt_param_tensor *x = &w->table.tensors[i];
        for (size_t j = 0; j < x->numel; j++) {
            float want = f ? f(ref[x->offset + j]) : ref[x->offset + j];
            float got = w->params[x->offset + j];
            if (memcmp(&got, &want, 4) != 0) {
                printf("  %s: %s[%zu] = %.9g, expected %.9g\n", what, x->key, j, got, want);
                return 0;
            }
        }
    }
    return 1;
}

/* Every tensor of w equals the reference tensor of the same key (layouts may differ). */
static int match_by_key(const bt_checkpoint_weights *w, const bt_param_table *rt,
                        const float *ref) {
    for (size_t i = 0; i < w->table.n_tensors; i++) {
        const bt_param_tensor *x = &w->table.tensors[i];
        const bt_param_tensor *y = bt_param_table_find(rt, x->key);
        if (!y || memcmp(w->params + x->offset, ref + y->offset, x->numel * sizeof(float)) != 0) {
            printf("  %s differs from the file's\n", x->key);
            return 0;
        }
    }
    return 1;
}

static float f16_round(float x) {
    return half_value(half_bits(x));
}

int main(void) {
    tmp = tu_tmpdir();
    snprintf(fixture_dir, sizeof fixture_dir, "%s", tu_fixture_path("tiny"));
    char a[1200], b[1200];

    /* Reference: the strict loader on the fixture, all heads. */
    bt_checkpoint ck;
    bt_status s = bt_checkpoint_open(&ck, fixture_dir);
    if (!tu_check(s == BT_OK, "open tiny fixture: %s", bt_error_message())) return tu_finish();
    tu_check(ck.heads_in_file == BT_HEADS_ALL, "fixture holds every head (0x%x)", ck.heads_in_file);
    bt_param_table ref_t;
    bt_param_table_init(&ref_t, &ck.cfg, BT_HEADS_ALL);
    float *ref = bt_calloc(ref_t.numel * sizeof *ref);
    size_t unused = 99;
    s = bt_params_load_safetensors(&ref_t, ref, ck.weights_path, &unused);
    tu_check(s == BT_OK && unused == 0, "strict loader reads the fixture (%s)", bt_error_message());
    bt_checkpoint_close(&ck);

    /* 1. load with heads from the file */
    bt_checkpoint_weights w0;
    bt_checkpoint_report r;
    s = bt_checkpoint_load(&w0, fixture_dir, NULL, &r);
    if (!tu_check(s == BT_OK, "load tiny: %s", bt_error_message())) return tu_finish();
    tu_check(r.heads_built == BT_HEADS_ALL && w0.table.heads == BT_HEADS_ALL,
             "heads built = heads in file (0x%x)", r.heads_built);
    tu_check(report_clean(&r) && r.n_loaded == ref_t.n_tensors,
             "clean report, %zu of %zu tensors loaded", r.n_loaded, ref_t.n_tensors);
    tu_check(w0.table.numel == ref_t.numel &&
                 memcmp(w0.params, ref, ref_t.numel * sizeof *ref) == 0,
             "loaded arena == strict loader arena, bitwise");
    tu_check(w0.config_json && strstr(w0.config_json, "\"use_cache\""),
             "config.json text kept for saving");
    bt_checkpoint_report_free(&r);

    /* 2. save -> load: bitwise identical; aux files copied; HF layout of keys */
    char save1[1100], save2[1100];
    snprintf(save1, sizeof save1, "%s/saved1", tmp);
    snprintf(save2, sizeof save2, "%s/nested/saved2", tmp);
    bt_checkpoint_save_options so;
    bt_checkpoint_save_options_default(&so);
    so.base_config_json = w0.config_json;
    so.copy_from_dir = fixture_dir;
    s = bt_checkpoint_save(save1, &w0.table, w0.params, &so);
    tu_check(s == BT_OK, "save F32 with base config and aux copies: %s", bt_error_message());
    tu_check(tu_files_equal(pjoin(a, sizeof a, save1, "preprocessor_config.json"),
                            pjoin(b, sizeof b, fixture_dir, "preprocessor_config.json")),
             "preprocessor_config.json copied byte for byte");
    struct stat sb;
    tu_check(stat(pjoin(a, sizeof a, save1, "vocab.json"), &sb) != 0,
             "aux files absent from the source are not created");
    bt_checkpoint_weights w1;
    s = bt_checkpoint_load(&w1, save1, NULL, &r);
    tu_check(s == BT_OK && report_clean_saved(&r) && r.heads_built == BT_HEADS_ALL,
             "reload of the saved checkpoint: clean, 2 position_ids buffers skipped (%s)",
             bt_error_message());
    bt_checkpoint_report_free(&r);
    tu_check(s == BT_OK && w1.table.numel == w0.table.numel &&
                 memcmp(w1.params, w0.params, w0.table.numel * sizeof(float)) == 0,
             "save -> load: every parameter bitwise identical");
    tu_check(s == BT_OK && memcmp(&w1.cfg, &w0.cfg, sizeof w0.cfg) == 0,
             "save -> load: same model config");
    {
        safetensors_file f;
        s = safetensors_open(&f, pjoin(a, sizeof a, save1, "model.safetensors"));
        int ok = s == BT_OK && f.n_tensors == ref_t.n_tensors + 2 && f.metadata_json &&
                 strstr(f.metadata_json, "\"format\":\"pt\"");
        ok = ok && is_arange(&f, "bridgetower.text_model.embeddings.position_ids", 40) &&
             is_arange(&f, "bridgetower.vision_model.visual.embeddings.position_ids", 17);
        const safetensors_tensor *t1 =
            s == BT_OK ? safetensors_find(&f, "bridgetower.text_model.pooler.dense.weight") : NULL;
        const safetensors_tensor *t2 =
            s == BT_OK ? safetensors_find(&f, "itm_score.fc.bias") : NULL;
        const safetensors_tensor *t3 = s == BT_OK ? safetensors_find(&f, "logit_scale") : NULL;
        ok = ok && t1 && t1->dtype == BT_DTYPE_F32 && t2 && t3 && t3->ndim == 0;
        tu_check(ok,
                 "saved file: %zu tensors (290 + 2 int64 position_ids buffers as HF 4.27 "
                 "saves them), metadata format=pt, backbone keys prefixed, head keys bare, "
                 "logit_scale 0-d",
                 f.n_tensors);
        safetensors_close(&f);
        size_t n;
        char *cfg = (char *)tu_read_file(pjoin(a, sizeof a, save1, "config.json"), &n);
        tu_check(cfg && strstr(cfg, "\"model_type\":\t\"bridgetower\"") &&
                     strstr(cfg, "\"BridgeTowerForContrastiveLearning\"") &&
                     strstr(cfg, "\"BridgeTowerForImageAndTextRetrieval\"") &&
                     strstr(cfg, "\"BridgeTowerForMaskedLM\"") &&
                     strstr(cfg, "\"transformers_version\":\t\"4.27.1\"") &&
                     strstr(cfg, "\"torch_dtype\":\t\"float32\"") &&
                     strstr(cfg, "\"use_cache\":\ttrue") && strstr(cfg, "\"classifier_dropout\"") &&
                     strstr(cfg, "\"initializer_range\":\t0.02") &&
                     strstr(cfg, "\"logit_scale_init_value\":\t2.6592") &&
                     strstr(cfg, "\"layer_norm_eps\":\t1e-05"),
                 "saved config.json: HF fields, architectures of the heads, extra keys kept");
        free(cfg);
    }

    /* 3. save again from the reloaded copy: same bytes */
    so.base_config_json = w1.config_json;
    so.copy_from_dir = save1;
    s = bt_checkpoint_save(save2, &w1.table, w1.params, &so);
    tu_check(s == BT_OK, "second save (nested new directory): %s", bt_error_message());
    tu_check(tu_files_equal(pjoin(a, sizeof a, save1, "model.safetensors"),
                            pjoin(b, sizeof b, save2, "model.safetensors")),
             "save -> load -> save: model.safetensors byte-identical");
    tu_check(tu_files_equal(pjoin(a, sizeof a, save1, "config.json"),
                            pjoin(b, sizeof b, save2, "config.json")),
             "save -> load -> save: config.json byte-identical");
    /* saving over an existing checkpoint from itself (weights mapped by nobody now) */
    s = bt_checkpoint_save(save2, &w1.table, w1.params, &so);
    tu_check(s == BT_OK && tu_files_equal(pjoin(a, sizeof a, save1, "model.safetensors"),
                                          pjoin(b, sizeof b, save2, "model.safetensors")),
             "saving over an existing checkpoint replaces it");
    /* saving into the directory the aux files come from: they are left as they are */
    so.copy_from_dir = save2;
    s = bt_checkpoint_save(save2, &w1.table, w1.params, &so);
    tu_check(s == BT_OK &&
                 tu_files_equal(pjoin(a, sizeof a, save2, "preprocessor_config.json"),
                                pjoin(b, sizeof b, fixture_dir, "preprocessor_config.json")),
             "saving into the aux source directory keeps its aux files (%s)", bt_error_message());
    bt_checkpoint_weights_free(&w1);

    /* 4. prefix-less backbone keys */
    variant v = {0};
    v.strip_prefix = 1;
    v.dtype = BT_DTYPE_F32;
    const char *d = write_variant("bare", &v);
    s = bt_checkpoint_load(&w1, d, NULL, &r);
    tu_check(s == BT_OK && report_clean(&r) && params_match(&w1, ref, NULL, "bare"),
             "backbone keys without `bridgetower.` load the same (%s)", bt_error_message());
    bt_checkpoint_report_free(&r);
    bt_checkpoint_weights_free(&w1);

    /* 5. BF16 and F16 files */
    memset(&v, 0, sizeof v);
    v.dtype = BT_DTYPE_BF16;
    d = write_variant("bf16", &v);
    s = bt_checkpoint_load(&w1, d, NULL, &r);
    tu_check(s == BT_OK && report_clean(&r) && params_match(&w1, ref, round_bf16, "bf16"),
             "BF16 file loads as the RNE-rounded values (%s)", bt_error_message());
    bt_checkpoint_report_free(&r);
    bt_checkpoint_weights_free(&w1);
    {
        /* the test's own F16 rounding is within half an ulp (sanity of the reference) */
        double worst = 0;
        for (size_t i = 0; i < ref_t.n_tensors; i++) {
            const bt_param_tensor *x = &ref_t.tensors[i];
            for (size_t j = 0; j < x->numel; j++) {
                float o = ref[x->offset + j], q = f16_round(o);
                double ulp =
                    fabs(o) >= 6.103515625e-05 ? ldexp(1.0, ilogb(o) - 10) : ldexp(1.0, -24);
                double rel = fabs((double)q - o) / ulp;
                if (rel > worst) worst = rel;
            }
        }
        tu_check(worst <= 0.5, "reference F16 rounding error <= 0.5 ulp (worst %.3f)", worst);
    }
    d = write_f16_variant("f16");
    s = bt_checkpoint_load(&w1, d, NULL, &r);
    tu_check(s == BT_OK && report_clean(&r) && params_match(&w1, ref, f16_round, "f16"),
             "F16 file loads as the RNE-rounded values (%s)", bt_error_message());
    bt_checkpoint_report_free(&r);
    bt_checkpoint_weights_free(&w1);
    {
        char sbf[1100];
        snprintf(sbf, sizeof sbf, "%s/saved_bf16", tmp);
        bt_checkpoint_save_options o2;
        bt_checkpoint_save_options_default(&o2);
        o2.dtype = BT_DTYPE_BF16;
        s = bt_checkpoint_save(sbf, &w0.table, w0.params, &o2);
        size_t n;
        char *cfg = (char *)tu_read_file(pjoin(a, sizeof a, sbf, "config.json"), &n);
        tu_check(s == BT_OK && cfg && strstr(cfg, "\"torch_dtype\":\t\"bfloat16\""),
                 "BF16 save: config says torch_dtype bfloat16 (%s)", bt_error_message());
        free(cfg);
        s = bt_checkpoint_load(&w1, sbf, NULL, &r);
        tu_check(s == BT_OK && report_clean_saved(&r) &&
                     params_match(&w1, ref, round_bf16, "bf16 save"),
                 "BF16 save -> load: RNE-rounded values (%s)", bt_error_message());
        bt_checkpoint_report_free(&r);
        bt_checkpoint_weights_free(&w1);
    }

    /* 6. a file without the ITM head */
    memset(&v, 0, sizeof v);
    v.dtype = BT_DTYPE_F32;
    v.drop = "itm_score.";
    d = write_variant("no_itm", &v);
    bt_checkpoint_load_options lo;
    bt_checkpoint_load_options_default(&lo);
    lo.heads = BT_HEADS_ALL;
    lo.init_seed = 77;
    s = bt_checkpoint_load(&w1, d, &lo, &r);
    tu_check(s == BT_OK && r.initialized.n == 1 && list_has(&r.initialized, "itm_score") &&
                 r.missing.n == 0 && r.unexpected.n == 0 &&
                 r.heads_in_file == (BT_HEADS_ITC | BT_HEADS_MLM),
             "ITM requested, absent: initialized and reported (%s)", bt_error_message());
    if (s == BT_OK) {
        float *full = bt_calloc(w1.table.numel * sizeof *full);
        bt_params_init(&w1.table, full, 77);
        int ok = 1;
        for (size_t i = 0; i < w1.table.n_tensors && ok; i++) {
            const bt_param_tensor *x = &w1.table.tensors[i];
            const float *want = x->head == BT_HEAD_ITM ? full : ref;
            ok = memcmp(w1.params + x->offset, want + x->offset, x->numel * sizeof(float)) == 0;
            if (!ok) printf("  tensor %s differs\n", x->key);
        }
        tu_check(ok, "ITM = bt_params_init(seed 77) values; every other tensor = the file's");
        const bt_param_tensor *iw = bt_param_table_find(&w1.table, "itm_score.fc.weight");
        const bt_param_tensor *ib = bt_param_table_find(&w1.table, "itm_score.fc.bias");
        double ss = 0;
        int bias0 = 1;
        for (size_t j = 0; j < iw->numel; j++)
            ss += (double)w1.params[iw->offset + j] * w1.params[iw->offset + j];
        for (size_t j = 0; j < ib->numel; j++)
            bias0 &= w1.params[ib->offset + j] == 0.0f;
        double sd = sqrt(ss / (double)iw->numel);
        /* 128 N(0, 0.05) draws: the sample std is within 0.05 * (1 ± 0.3) with overwhelming
         * probability (its relative sd is ~1/sqrt(256) = 6%) */
        tu_check(bias0 && sd > 0.035 && sd < 0.065, "ITM init: bias 0, weight std %.4f ~ 0.05", sd);
        FILE *mf = tmpfile();
        bt_checkpoint_report_print(&r, mf, "t");
        rewind(mf);
        char line[512] = "";
        char *got = fgets(line, sizeof line, mf);
        fclose(mf);
        tu_check(got && strstr(line, "itm_score: not in checkpoint, initialized (HF init rules)"),
                 "report prints the notice: %s", line);
        bt_free(full);
    }
    bt_checkpoint_report_free(&r);
    bt_checkpoint_weights_free(&w1);
    s = bt_checkpoint_load(&w1, d, NULL, &r);
    tu_check(s == BT_OK && r.heads_built == (BT_HEADS_ITC | BT_HEADS_MLM) && report_clean(&r) &&
                 bt_param_table_find(&w1.table, "itm_score.fc.weight") == NULL,
             "heads from the file: ITM not built, clean report");
    bt_checkpoint_report_free(&r);
    bt_checkpoint_weights_free(&w1);

    /* 7. heads not requested are ignored and reported */
    lo.heads = BT_HEADS_ITC;
    s = bt_checkpoint_load(&w1, fixture_dir, &lo, &r);
    tu_check(s == BT_OK && r.heads_built == BT_HEADS_ITC && r.ignored.n == 8 &&
                 list_has(&r.ignored, "mlm_score.bias") &&
                 list_has(&r.ignored, "itm_score.fc.weight") && r.unexpected.n == 0 &&
                 r.initialized.n == 0,
             "ITC only: 8 itm/mlm tensors ignored and reported (%zu)", r.ignored.n);
    tu_check(s == BT_OK && match_by_key(&w1, &ref_t, ref),
             "ITC only: every loaded tensor equals the file's (by key)");
    bt_checkpoint_report_free(&r);
    bt_checkpoint_weights_free(&w1);
    lo.heads = BT_HEADS_NONE;
    s = bt_checkpoint_load(&w1, fixture_dir, &lo, &r);
    tu_check(s == BT_OK && match_by_key(&w1, &ref_t, ref) && r.ignored.n == 8 + 7 &&
                 w1.table.n_tensors == ref_t.n_tensors - 15,
             "backbone only: every tensor equals the file's by key, 15 head tensors ignored");
    bt_checkpoint_report_free(&r);
    bt_checkpoint_weights_free(&w1);

    /* 8. legacy position_ids buffer skipped and counted; unknown keys */
    memset(&v, 0, sizeof v);
    v.dtype = BT_DTYPE_F32;
    v.add_position_ids = 1;
    v.add_unknown = "vision_model.visual.proj";
    d = write_variant("extras", &v);
    s = bt_checkpoint_load(&w1, d, NULL, &r);
    tu_check(s == BT_OK && r.n_skipped_buffers == 1 && r.unexpected.n == 1 &&
                 list_has(&r.unexpected, "vision_model.visual.proj") && r.missing.n == 0 &&
                 params_match(&w1, ref, NULL, "extras"),
             "I64 position_ids skipped (%zu), unknown key reported, weights intact",
             r.n_skipped_buffers);
    bt_checkpoint_report_free(&r);
    bt_checkpoint_weights_free(&w1);
    bt_checkpoint_load_options_default(&lo);
    lo.unknown_keys_are_errors = 1;
    s = bt_checkpoint_load(&w1, d, &lo, &r);
    tu_check(s == BT_ERR_FORMAT && strstr(bt_error_message(), "vision_model.visual.proj") &&
                 strstr(bt_error_message(), "model.safetensors"),
             "unknown_keys_are_errors: error names the key: %s", bt_error_message());
    bt_checkpoint_report_free(&r);
    bt_checkpoint_weights_free(&w1);

    /* 9. a config written without a base reloads to the same config */
    {
        char *j = bt_checkpoint_config_json(&w0.cfg, BT_HEADS_ITM, BT_DTYPE_F32, NULL);
        bt_model_config c2;
        s = j ? bt_model_config_parse(&c2, j, "fresh") : BT_ERR_FORMAT;
        tu_check(s == BT_OK && memcmp(&c2, &w0.cfg, sizeof c2) == 0 &&
                     strstr(j, "\"architectures\":\t[\"BridgeTowerForImageAndTextRetrieval\"]"),
                 "fresh config.json (no base) parses back to the same config (%s)",
                 bt_error_message());
        free(j);
        char *j2 = bt_checkpoint_config_json(&w0.cfg, BT_HEADS_NONE, BT_DTYPE_F32, NULL);
        tu_check(j2 && strstr(j2, "[\"BridgeTowerModel\"]"),
                 "no heads: architectures BridgeTowerModel");
        free(j2);
    }

    /* 10. scaled_add fixture: 0-d link-tower scalars round-trip */
    {
        char sdir[1100], sv[1100];
        snprintf(sdir, sizeof sdir, "%s", tu_fixture_path("tiny_scaled_add"));
        snprintf(sv, sizeof sv, "%s/saved_scaled", tmp);
        bt_checkpoint_weights w2;
        s = bt_checkpoint_load(&w2, sdir, NULL, &r);
        int ok = s == BT_OK && report_clean(&r) &&
                 bt_param_table_find(&w2.table, "cross_modal_text_link_tower.1.scaled_factor");
        /* (the fixture itself holds no buffers; bt's saved copy does, see above) */
        bt_checkpoint_report_free(&r);
        bt_checkpoint_save_options o3;
        bt_checkpoint_save_options_default(&o3);
        if (ok) o3.base_config_json = w2.config_json;
        if (ok) ok = bt_checkpoint_save(sv, &w2.table, w2.params, &o3) == BT_OK;
        bt_checkpoint_weights w3;
        if (ok) ok = bt_checkpoint_load(&w3, sv, NULL, NULL) == BT_OK;
        if (ok) {
            ok = w3.cfg.link_tower_type == BT_LINK_SCALED_ADD && w3.table.numel == w2.table.numel &&
                 memcmp(w3.params, w2.params, w2.table.numel * sizeof(float)) == 0;
            bt_checkpoint_weights_free(&w3);
        }
        tu_check(ok, "scaled_add fixture: load -> save -> load bitwise (%s)", bt_error_message());
        bt_checkpoint_weights_free(&w2);
    }

    bt_checkpoint_weights_free(&w0);
    bt_param_table_free(&ref_t);
    bt_free(ref);
    return tu_finish();
}
