/* train/config.c: the run config (see train/config.h, docs/config.md).
 *
 * One table (FIELDS) lists every key: its dotted path, kind, where it lives in
 * bt_run_config, its range, its default and its Hugging Face TrainingArguments name. The
 * JSON reader walks the document against the table (sections are the key prefixes), `--set`
 * turns its value into a JSON node of the key's kind and goes through the same leaf reader,
 * so a value is judged, and its error worded, the same way wherever it comes from.
 *
 * Deliberately not here: file-system checks of the paths, the preprocessor's image size,
 * the schedule arithmetic (the trainer's). */
#include "train/config.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_util.h"
#include "model/params.h"

typedef enum { K_INT, K_NUM, K_BOOL, K_STR, K_ENUM, K_HEADS } kind;

enum {
    F_NULL = 1,      /* JSON null accepted (string: unset; int: derive; heads: derive) */
    F_MINUS1 = 2,    /* integer: -1 also accepted (train.max_steps) */
    F_LO_OPEN = 4,   /* number: lower bound excluded */
    F_HI_OPEN = 8,   /* number: upper bound excluded */
    F_REQUIRED = 16, /* string: must be set by the end (finish checks) */
    F_RESUME = 32,   /* must not change when resuming (bt_run_config_check_resume) */
};

/* Integers are exact in a JSON double up to 2^53. */
#define INT_MAX_JSON 9007199254740992.0

/* In the order of bt_schedule_kind (schedule.h) and bt_precision (model.h). */
static const char *const schedule_names[] = {"linear", "cosine", "constant", NULL};
static const char *const precision_names[] = {"fp32", "bf16", NULL};
static const char *const itc_names[] = {"hf", "dedup", NULL};
static const char *const itc_scope_names[] = {"global", "local", NULL};
static const char *const policy_names[] = {"stop", "skip", NULL};
static const char *const interval_names[] = {"no", "steps", "epoch", NULL};
static const char *const save_dtype_names[] = {"f32", "bf16", NULL};
/* logging.progress: the order of bt_progress_mode (progress.h) */
static const char *const progress_names[] = {"auto", "live", "plain", NULL};
/* Head names in BT_HEAD_* order after the backbone (bit 1 << (i + 1)). */
static const char *const head_names[] = {"itc", "itm", "mlm", NULL};

typedef struct field {
    const char *key;
    kind k;
    size_t off;
    int flags;
    double lo, hi;              /* K_INT / K_NUM range */
    const char *const *choices; /* K_ENUM */
    double def_num;             /* K_INT, K_NUM, K_BOOL, K_ENUM (index), K_HEADS (mask) */
    const char *def_str;        /* K_STR (NULL: unset) */
    const char *hf;             /* HF TrainingArguments (or script) equivalent, "" if none */
} field;

#define OFF(m) offsetof(bt_run_config, m)
#define INF HUGE_VAL
#define I_(key, m, fl, lo, hi, def, hf) {key, K_INT, OFF(m), fl, lo, hi, NULL, def, NULL, hf}
#define N_(key, m, fl, lo, hi, def, hf) {key, K_NUM, OFF(m), fl, lo, hi, NULL, def, NULL, hf}
#define B_(key, m, fl, def, hf) {key, K_BOOL, OFF(m), fl, 0, 0, NULL, def, NULL, hf}
#define S_(key, m, fl, def, hf) {key, K_STR, OFF(m), fl, 0, 0, NULL, 0, def, hf}
#define E_(key, m, fl, ch, def, hf) {key, K_ENUM, OFF(m), fl, 0, 0, ch, def, NULL, hf}

static const field FIELDS[] = {
    /* model */
    S_("model.path", model.path, F_NULL, NULL, "model_name_or_path"),
    S_("model.config", model.config, F_NULL, NULL, "config_name"),
    I_("model.init_seed", model.init_seed, F_NULL | F_RESUME, 0, INT_MAX_JSON,
       BT_RUN_INT_DERIVE, "seed"),
    {"model.heads", K_HEADS, OFF(model.heads), F_NULL | F_RESUME, 0, 0, head_names,
     BT_RUN_HEADS_AUTO, NULL, ""},
    B_("model.drop_text_pooler", model.drop_text_pooler, F_RESUME, 1, "freeze_text_pooler"),
    /* data */
    S_("data.train", data.train, F_NULL | F_REQUIRED | F_RESUME, NULL, "train_file"),
    S_("data.validation", data.validation, F_NULL, NULL, "validation_file"),
    S_("data.test", data.test, F_NULL, NULL, "test_file"),
    S_("data.image_column", data.image_column, F_RESUME, "image", "image_column"),
    S_("data.caption_column", data.caption_column, F_RESUME, "caption", "caption_column"),
    S_("data.id_column", data.id_column, 0, "id", ""),
    S_("data.choices_column", data.choices_column, 0, "caption_choices", ""),
    S_("data.label_column", data.label_column, 0, "label", ""),
    I_("data.image_size", data.image_size, F_RESUME, 0, 4096, 0, "image_size"),
    I_("data.max_length", data.max_length, F_RESUME, 2, 512, 40, "max_seq_length"),
    B_("data.shuffle", data.shuffle, F_RESUME, 1, ""),
    I_("data.shuffle_buffer", data.shuffle_buffer, F_RESUME, 1, 1000000, 1000, ""),
    I_("data.seed", data.seed, F_NULL | F_RESUME, 0, INT_MAX_JSON, BT_RUN_INT_DERIVE,
       "data_seed"),
    B_("data.drop_last", data.drop_last, F_RESUME, 0, "dataloader_drop_last"),
    I_("data.num_workers", data.num_workers, 0, 1, 256, 1, "dataloader_num_workers"),
    I_("data.prefetch", data.prefetch, 0, 0, 1024, 0, "dataloader_prefetch_factor"),
    I_("data.image_cache_bytes", data.image_cache_bytes, 0, 0, INT_MAX_JSON, 0, ""),
    E_("data.on_bad_record", data.on_bad_record, 0, policy_names, BT_POLICY_STOP, ""),
    /* train */
    I_("train.batch_size", train.batch_size, F_RESUME, 1, 1 << 20, 8,
       "per_device_train_batch_size"),
    I_("train.gradient_accumulation_steps", train.gradient_accumulation_steps, F_RESUME, 1,
       1 << 20, 1, "gradient_accumulation_steps"),
    N_("train.epochs", train.epochs, F_LO_OPEN, 0, 1e9, 3, "num_train_epochs"),
    I_("train.max_steps", train.max_steps, F_MINUS1, 1, INT_MAX_JSON, -1, "max_steps"),
    N_("train.lr", train.lr, F_LO_OPEN, 0, INF, 5e-5, "learning_rate"),
    I_("train.warmup_steps", train.warmup_steps, 0, 0, INT_MAX_JSON, 0, "warmup_steps"),
    N_("train.warmup_ratio", train.warmup_ratio, 0, 0, 1, 0, "warmup_ratio"),
    E_("train.schedule", train.schedule, 0, schedule_names, BT_SCHEDULE_LINEAR,
       "lr_scheduler_type"),
    N_("train.weight_decay", train.weight_decay, 0, 0, INF, 0, "weight_decay"),
    N_("train.adam_beta1", train.adam_beta1, F_HI_OPEN, 0, 1, 0.9, "adam_beta1"),
    N_("train.adam_beta2", train.adam_beta2, F_HI_OPEN, 0, 1, 0.999, "adam_beta2"),
    N_("train.adam_eps", train.adam_eps, F_LO_OPEN, 0, INF, 1e-8, "adam_epsilon"),
    N_("train.max_grad_norm", train.max_grad_norm, 0, 0, INF, 1.0, "max_grad_norm"),
    E_("train.precision", train.precision, F_RESUME, precision_names, BT_PRECISION_FP32,
       "bf16"),
    N_("train.loss_weights.itc", train.loss_weights.itc, F_RESUME, 0, INF, 1, ""),
    N_("train.loss_weights.itm", train.loss_weights.itm, F_RESUME, 0, INF, 0, ""),
    N_("train.loss_weights.mlm", train.loss_weights.mlm, F_RESUME, 0, INF, 0, ""),
    E_("train.itc_variant", train.itc_variant, F_RESUME, itc_names, BT_ITC_HF, ""),
    E_("train.itc_scope", train.itc_scope, F_RESUME, itc_scope_names, BT_ITC_SCOPE_GLOBAL, ""),
    N_("train.mlm_probability", train.mlm_probability, F_LO_OPEN | F_HI_OPEN | F_RESUME, 0, 1,
       0.15, "mlm_probability"),
    I_("train.seed", train.seed, F_RESUME, 0, INT_MAX_JSON, 42, "seed"),
    B_("train.dropout", train.dropout, F_RESUME, 1, ""),
    B_("train.gradient_checkpointing", train.gradient_checkpointing, 0, 0,
       "gradient_checkpointing"),
    N_("train.lr_mult.cross_modal", train.lr_mult.cross_modal, 0, 0, INF, 1, ""),
    N_("train.lr_mult.heads", train.lr_mult.heads, 0, 0, INF, 1, ""),
    B_("train.freeze_vision", train.freeze_vision, F_RESUME, 0, "freeze_vision_model"),
    B_("train.freeze_text", train.freeze_text, F_RESUME, 0, "freeze_text_model"),
    E_("train.on_nan", train.on_nan, 0, policy_names, BT_POLICY_STOP, ""),
    I_("train.threads", train.threads, 0, 0, 4096, 0, ""),
    /* logging */
    I_("logging.steps", logging.steps, 0, 1, INT_MAX_JSON, 500, "logging_steps"),
    B_("logging.first_step", logging.first_step, 0, 0, "logging_first_step"),
    B_("logging.tensorboard", logging.tensorboard, 0, 1, "report_to"),
    B_("logging.report", logging.report, 0, 1, ""),
    E_("logging.progress", logging.progress, 0, progress_names, 0, ""),
    I_("logging.throughput_warmup_steps", logging.throughput_warmup_steps, 0, 0, INT_MAX_JSON,
       0, "throughput_warmup_steps"),
    /* eval */
    E_("eval.strategy", eval.strategy, 0, interval_names, BT_INTERVAL_NO, "eval_strategy"),
    I_("eval.steps", eval.steps, F_NULL, 1, INT_MAX_JSON, BT_RUN_INT_DERIVE, "eval_steps"),
    B_("eval.at_end", eval.at_end, 0, 1, "do_eval"),
    I_("eval.batch_size", eval.batch_size, 0, 1, 1 << 20, 8, "per_device_eval_batch_size"),
    I_("eval.itm_rerank_k", eval.itm_rerank_k, 0, 0, 1 << 20, 0, ""),
    S_("eval.metric_for_best", eval.metric_for_best, 0, "loss", "metric_for_best_model"),
    /* save */
    E_("save.strategy", save.strategy, 0, interval_names, BT_INTERVAL_STEPS, "save_strategy"),
    I_("save.steps", save.steps, 0, 1, INT_MAX_JSON, 500, "save_steps"),
    I_("save.total_limit", save.total_limit, 0, 0, INT_MAX_JSON, 0, "save_total_limit"),
    E_("save.dtype", save.dtype, 0, save_dtype_names, BT_SAVE_F32, ""),
    /* dist (docs/distributed.md) */
    N_("dist.bucket_mb", dist.bucket_mb, 0, 0, 4096, 25, "ddp_bucket_cap_mb"),
    E_("dist.wire_dtype", dist.wire_dtype, 0, save_dtype_names, BT_SAVE_F32, ""),
    I_("dist.zero_stage", dist.zero_stage, 0, 0, 1, 0, ""),
    N_("dist.timeout_s", dist.timeout_s, 0, 0, 1e9, 1800, "ddp_timeout"),
    B_("dist.overlap", dist.overlap, 0, 1, ""),
    /* output */
    S_("output.dir", output.dir, F_NULL | F_REQUIRED, NULL, "output_dir"),
    B_("output.overwrite", output.overwrite, 0, 0, "overwrite_output_dir"),
    B_("output.auto_resume", output.auto_resume, 0, 1, ""),
    B_("output.resume_new_start", output.resume_new_start, 0, 0, ""),
    S_("output.resume_from", output.resume_from, F_NULL, NULL, "resume_from_checkpoint"),
};
enum { N_FIELDS = sizeof FIELDS / sizeof FIELDS[0] };

/* ------------------------------------------------------------------------------------------
 * Accessors */

static void *at(bt_run_config *c, const field *f) { return (char *)c + f->off; }
static const void *cat(const bt_run_config *c, const field *f) {
    return (const char *)c + f->off;
}

static char *dup_str(const char *s) {
    if (!s) return NULL;
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    BT_ASSERT(d);
    memcpy(d, s, n);
    return d;
}

static void set_str(bt_run_config *c, const field *f, const char *s) {
    char **p = at(c, f);
    free(*p);
    *p = dup_str(s);
}

void bt_run_config_init(bt_run_config *c) {
    memset(c, 0, sizeof *c);
    for (size_t i = 0; i < N_FIELDS; i++) {
        const field *f = &FIELDS[i];
        switch (f->k) {
        case K_INT: *(int64_t *)at(c, f) = (int64_t)f->def_num; break;
        case K_NUM: *(double *)at(c, f) = f->def_num; break;
        case K_BOOL:
        case K_ENUM: *(int *)at(c, f) = (int)f->def_num; break;
        case K_STR: set_str(c, f, f->def_str); break;
        case K_HEADS: *(unsigned *)at(c, f) = (unsigned)f->def_num; break;
        }
    }
}

void bt_run_config_free(bt_run_config *c) {
    for (size_t i = 0; i < N_FIELDS; i++)
        if (FIELDS[i].k == K_STR) {
            char **p = at(c, &FIELDS[i]);
            free(*p);
            *p = NULL;
        }
}

void bt_run_config_copy(bt_run_config *dst, const bt_run_config *src) {
    memcpy(dst, src, sizeof *dst);
    for (size_t i = 0; i < N_FIELDS; i++)
        if (FIELDS[i].k == K_STR) {
            char **p = at(dst, &FIELDS[i]);
            *p = dup_str(*p);
        }
}

size_t bt_run_config_n_keys(void) { return N_FIELDS; }
const char *bt_run_config_key(size_t i) { return i < N_FIELDS ? FIELDS[i].key : NULL; }
const char *bt_run_config_key_hf(size_t i) { return i < N_FIELDS ? FIELDS[i].hf : NULL; }

const char *bt_interval_name(bt_interval s) {
    return (unsigned)s < 3 ? interval_names[s] : "?";
}

/* ------------------------------------------------------------------------------------------
 * Messages */

/* The shortest of %.15g / %.16g / %.17g that reads back as exactly v ("5e-05", "1", "0.9").
 * (cJSON's own printing accepts a 15-digit form within a relative DBL_EPSILON, which can
 * lose the last bit: a resolved config or trainer state would not round-trip.) */
static void fmt_num(char *out, size_t cap, double v) {
    if (v == INF) {
        snprintf(out, cap, "inf");
        return;
    }
    for (int digits = 15; digits <= 17; digits++) {
        snprintf(out, cap, "%.*g", digits, v);
        if (strtod(out, NULL) == v) return;
    }
}

cJSON *bt_json_exact_number(double v) {
    BT_ASSERT(isfinite(v));
    char buf[40];
    fmt_num(buf, sizeof buf, v);
    cJSON *j = cJSON_CreateRaw(buf);
    BT_ASSERT(j);
    return j;
}

static void list_choices(char *out, size_t cap, const char *const *ch) {
    size_t n = 0;
    out[0] = '\0';
    for (size_t i = 0; ch[i] && n < cap; i++)
        n += (size_t)snprintf(out + n, cap - n, "%s\"%s\"", i ? ", " : "", ch[i]);
}

void bt_run_config_key_describe(size_t i, char *out, size_t cap) {
    BT_ASSERT(i < N_FIELDS);
    const field *f = &FIELDS[i];
    char lo[32], hi[32], ch[128];
    fmt_num(lo, sizeof lo, f->lo);
    fmt_num(hi, sizeof hi, f->hi);
    const char *null_ok = (f->flags & F_NULL) ? " or null" : "";
    switch (f->k) {
    case K_INT:
        if (f->flags & F_MINUS1)
            snprintf(out, cap, "-1 or an integer >= %s%s", lo, null_ok);
        else if (f->hi >= INT_MAX_JSON)
            snprintf(out, cap, "an integer >= %s%s", lo, null_ok);
        else
            snprintf(out, cap, "an integer in [%s, %s]%s", lo, hi, null_ok);
        break;
    case K_NUM:
        if (f->hi == INF)
            snprintf(out, cap, "a number %s %s", (f->flags & F_LO_OPEN) ? ">" : ">=", lo);
        else
            snprintf(out, cap, "a number in %c%s, %s%c", (f->flags & F_LO_OPEN) ? '(' : '[',
                     lo, hi, (f->flags & F_HI_OPEN) ? ')' : ']');
        break;
    case K_BOOL: snprintf(out, cap, "true or false"); break;
    case K_STR: snprintf(out, cap, "a non-empty string%s", null_ok); break;
    case K_ENUM:
        list_choices(ch, sizeof ch, f->choices);
        snprintf(out, cap, "one of %s", ch);
        break;
    case K_HEADS:
        list_choices(ch, sizeof ch, f->choices);
        snprintf(out, cap, "a list of distinct names from %s%s", ch, null_ok);
        break;
    }
}

/* The offending value as compact JSON, escaped and cut for a message. */
static void fmt_got(char *out, size_t cap, const cJSON *v) {
    if (cJSON_IsNumber(v) && !isfinite(v->valuedouble)) {
        /* cJSON reads 1e999 as inf and would print it as null */
        snprintf(out, cap, "a number beyond the double range");
        return;
    }
    if (cJSON_IsNumber(v)) {
        /* integral values in full (bt_json_number_str), others in the shortest exact form */
        char b[48];
        if (v->valuedouble == floor(v->valuedouble))
            bt_json_number_str(b, sizeof b, v->valuedouble);
        else
            fmt_num(b, sizeof b, v->valuedouble);
        snprintf(out, cap, "%s", b);
        return;
    }
    char *txt = cJSON_PrintUnformatted(v);
    const char *s = txt ? txt : "?";
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p && n + 8 < cap; p++) {
        if (*p < 0x20 || *p == 0x7f)
            n += (size_t)snprintf(out + n, cap - n, "\\x%02x", *p);
        else
            out[n++] = (char)*p;
    }
    out[n] = '\0';
    if (txt && strlen(txt) > n) snprintf(out + (n > 3 ? n - 3 : 0), 4, "...");
    free(txt);
}

static bt_status type_error(const char *source, const field *f, const cJSON *v) {
    char want[256], got[96];
    bt_run_config_key_describe((size_t)(f - FIELDS), want, sizeof want);
    fmt_got(got, sizeof got, v);
    return bt_fail(BT_ERR_CONFIG, "%s: %s: expected %s, got %s", source, f->key, want, got);
}

/* Levenshtein distance of two short strings (capped at 64 bytes each). */
static size_t edit_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > 64 || lb > 64) return 99;
    size_t row[65];
    for (size_t j = 0; j <= lb; j++) row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            if (row[j] + 1 < best) best = row[j] + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

static const char *last_component(const char *key) {
    const char *d = strrchr(key, '.');
    return d ? d + 1 : key;
}

/* " (did you mean 'train.lr'?)" or "" for an unknown key path. */
static void suggest(char *out, size_t cap, const char *path) {
    const field *best = NULL;
    size_t best_d = 4;
    const char *leaf = last_component(path);
    for (size_t i = 0; i < N_FIELDS; i++) {
        const field *f = &FIELDS[i];
        size_t d = edit_distance(path, f->key);
        /* the same name in another section, or HF's name for it */
        if (!strcmp(leaf, last_component(f->key)) || (f->hf[0] && !strcmp(leaf, f->hf))) d = 1;
        if (d < best_d) {
            best_d = d;
            best = f;
        }
    }
    if (!best) {
        out[0] = '\0';
        return;
    }
    if (best->hf[0] && !strcmp(leaf, best->hf) && strcmp(leaf, last_component(best->key)))
        snprintf(out, cap, " (did you mean '%s', HF's %s?)", best->key, best->hf);
    else
        snprintf(out, cap, " (did you mean '%s'?)", best->key);
}

static bt_status unknown_key(const char *source, const char *path) {
    char hint[160];
    suggest(hint, sizeof hint, path);
    return bt_fail(BT_ERR_CONFIG, "%s: unknown key '%s'%s", source, path, hint);
}

/* ------------------------------------------------------------------------------------------
 * Table lookups */

static const field *find_field(const char *path) {
    for (size_t i = 0; i < N_FIELDS; i++)
        if (!strcmp(FIELDS[i].key, path)) return &FIELDS[i];
    return NULL;
}

/* 1 when `path` is a section: a proper prefix of some key, followed by '.'. */
static int is_section(const char *path) {
    size_t n = strlen(path);
    for (size_t i = 0; i < N_FIELDS; i++)
        if (!strncmp(FIELDS[i].key, path, n) && FIELDS[i].key[n] == '.') return 1;
    return 0;
}

/* The first key of a section, for hints. */
static const char *first_key_in(const char *section) {
    size_t n = strlen(section);
    for (size_t i = 0; i < N_FIELDS; i++)
        if (!strncmp(FIELDS[i].key, section, n) && FIELDS[i].key[n] == '.') return FIELDS[i].key;
    return "train.lr";
}

/* ------------------------------------------------------------------------------------------
 * Reading one value (shared by files and --set) */

static bt_status read_leaf(bt_run_config *c, const field *f, const cJSON *v,
                           const char *source) {
    if (cJSON_IsNull(v)) {
        if (!(f->flags & F_NULL)) return type_error(source, f, v);
        if (f->k == K_STR) set_str(c, f, NULL);
        else if (f->k == K_INT) *(int64_t *)at(c, f) = BT_RUN_INT_DERIVE;
        else if (f->k == K_HEADS) *(unsigned *)at(c, f) = BT_RUN_HEADS_AUTO;
        return BT_OK;
    }
    switch (f->k) {
    case K_INT: {
        if (!cJSON_IsNumber(v)) return type_error(source, f, v);
        double d = v->valuedouble;
        if (!isfinite(d) || d != floor(d) || fabs(d) > INT_MAX_JSON)
            return type_error(source, f, v);
        int ok = d >= f->lo && d <= f->hi;
        if ((f->flags & F_MINUS1) && d == -1) ok = 1;
        if (!ok) return type_error(source, f, v);
        *(int64_t *)at(c, f) = (int64_t)d;
        return BT_OK;
    }
    case K_NUM: {
        if (!cJSON_IsNumber(v)) return type_error(source, f, v);
        double d = v->valuedouble;
        int ok = isfinite(d) && ((f->flags & F_LO_OPEN) ? d > f->lo : d >= f->lo) &&
                 ((f->flags & F_HI_OPEN) ? d < f->hi : d <= f->hi);
        if (!ok) return type_error(source, f, v);
        *(double *)at(c, f) = d;
        return BT_OK;
    }
    case K_BOOL:
        if (!cJSON_IsBool(v)) return type_error(source, f, v);
        *(int *)at(c, f) = cJSON_IsTrue(v) ? 1 : 0;
        return BT_OK;
    case K_STR:
        if (!cJSON_IsString(v) || !v->valuestring[0]) return type_error(source, f, v);
        set_str(c, f, v->valuestring);
        return BT_OK;
    case K_ENUM:
        if (!cJSON_IsString(v)) return type_error(source, f, v);
        for (int i = 0; f->choices[i]; i++)
            if (!strcmp(v->valuestring, f->choices[i])) {
                *(int *)at(c, f) = i;
                return BT_OK;
            }
        return type_error(source, f, v);
    case K_HEADS: {
        if (!cJSON_IsArray(v)) return type_error(source, f, v);
        unsigned mask = 0;
        const cJSON *e;
        cJSON_ArrayForEach(e, v) {
            int found = -1;
            if (cJSON_IsString(e))
                for (int i = 0; f->choices[i]; i++)
                    if (!strcmp(e->valuestring, f->choices[i])) found = i;
            unsigned bit = found >= 0 ? 1u << (found + 1) : 0;
            if (found < 0 || (mask & bit)) return type_error(source, f, v);
            mask |= bit;
        }
        *(unsigned *)at(c, f) = mask;
        return BT_OK;
    }
    }
    return BT_OK;
}

static bt_status read_object(bt_run_config *c, const cJSON *o, const char *prefix,
                             const char *source) {
    for (const cJSON *m = o->child; m; m = m->next) {
        char path[256];
        int n = snprintf(path, sizeof path, "%s%s%s", prefix, prefix[0] ? "." : "",
                         m->string ? m->string : "");
        if (n < 0 || (size_t)n >= sizeof path)
            return bt_fail(BT_ERR_CONFIG, "%s: key path '%.60s...' is too long", source, path);
        const field *f = find_field(path);
        bt_status s;
        if (f) {
            s = read_leaf(c, f, m, source);
        } else if (is_section(path)) {
            if (!cJSON_IsObject(m)) {
                char got[96];
                fmt_got(got, sizeof got, m);
                return bt_fail(BT_ERR_CONFIG, "%s: %s: expected an object (a section), got %s",
                               source, path, got);
            }
            s = read_object(c, m, path, source);
        } else {
            return unknown_key(source, path);
        }
        if (s != BT_OK) return s;
    }
    return BT_OK;
}

bt_status bt_run_config_apply_json(bt_run_config *c, const cJSON *root, const char *source) {
    if (!cJSON_IsObject(root))
        return bt_fail(BT_ERR_CONFIG, "%s: expected a JSON object at the top level, got %s",
                       source, bt_json_type_name(root));
    return read_object(c, root, "", source);
}

bt_status bt_run_config_parse(bt_run_config *c, const char *json, const char *source) {
    cJSON *root;
    bt_status s = bt_json_parse(json, strlen(json), source, &root);
    if (s != BT_OK) return s;
    s = bt_run_config_apply_json(c, root, source);
    cJSON_Delete(root);
    return s;
}

bt_status bt_run_config_load(bt_run_config *c, const char *path) {
    cJSON *root;
    bt_status s = bt_json_load(path, "run config", &root);
    if (s != BT_OK) return s;
    s = bt_run_config_apply_json(c, root, path);
    cJSON_Delete(root);
    return s;
}

/* ------------------------------------------------------------------------------------------
 * --set key.path=value */

/* A --set value that is JSON text by bt's one rule (bt_json_parse: the whole text, no
 * duplicate keys, no \u0000), or NULL (no error recorded: the caller falls back). */
static cJSON *parse_value(const char *val) {
    cJSON *j = NULL;
    if (bt_json_parse(val, strlen(val), "--set", &j) != BT_OK) bt_error_clear();
    return j;
}

/* The JSON node a --set value stands for, by the key's kind (see config.h). A value that
 * does not fit the kind becomes a string node, so read_leaf words the error. */
static cJSON *set_value_node(const field *f, const char *val) {
    if (!strcmp(val, "null")) return cJSON_CreateNull();
    switch (f->k) {
    case K_INT:
    case K_NUM:
    case K_BOOL: {
        cJSON *j = parse_value(val);
        if (j && (cJSON_IsNumber(j) || cJSON_IsBool(j))) return j;
        cJSON_Delete(j);
        return cJSON_CreateString(val);
    }
    case K_STR:
    case K_ENUM:
        if (val[0] == '"') {
            cJSON *j = parse_value(val);
            if (j && cJSON_IsString(j)) return j;
            cJSON_Delete(j);
        }
        return cJSON_CreateString(val);
    case K_HEADS: {
        if (val[0] == '[') {
            cJSON *j = parse_value(val);
            return j ? j : cJSON_CreateString(val);
        }
        cJSON *arr = cJSON_CreateArray();
        const char *p = val;
        while (*p) {
            const char *comma = strchr(p, ',');
            size_t n = comma ? (size_t)(comma - p) : strlen(p);
            char item[64];
            snprintf(item, sizeof item, "%.*s", (int)(n < 63 ? n : 63), p);
            cJSON_AddItemToArray(arr, cJSON_CreateString(item));
            p += n + (comma ? 1 : 0);
            if (comma && !*p) cJSON_AddItemToArray(arr, cJSON_CreateString(""));
        }
        return arr;
    }
    }
    return cJSON_CreateString(val);
}

bt_status bt_run_config_set(bt_run_config *c, const char *assignment) {
    const char *eq = strchr(assignment, '=');
    if (!eq || eq == assignment)
        return bt_fail(BT_ERR_ARG, "--set: expected KEY=VALUE (e.g. train.lr=2e-5), got '%.80s'",
                       assignment);
    char key[256];
    size_t kn = (size_t)(eq - assignment);
    if (kn >= sizeof key) return bt_fail(BT_ERR_CONFIG, "--set: key '%.60s...' is too long",
                                         assignment);
    memcpy(key, assignment, kn);
    key[kn] = '\0';
    const field *f = find_field(key);
    if (!f) {
        if (is_section(key))
            return bt_fail(BT_ERR_CONFIG,
                           "--set: '%s' is a section; set one of its keys (e.g. --set %s=...)",
                           key, first_key_in(key));
        return unknown_key("--set", key);
    }
    /* the value is stored in trainer_state.json and read back by bt's JSON rule (UTF-8
     * strings only), so a value that a config file could not hold is refused here too */
    const char *val = eq + 1;
    const size_t vn = strlen(val), valid = bt_utf8_valid_prefix((const unsigned char *)val, vn);
    if (valid != vn)
        return bt_fail(BT_ERR_CONFIG, "--set: %s: the value holds bytes that are not UTF-8 "
                       "(byte %zu: 0x%02x); expected UTF-8 text, as in a config file",
                       key, valid, (unsigned)(unsigned char)val[valid]);
    cJSON *node = set_value_node(f, val);
    BT_ASSERT(node);
    bt_status s = read_leaf(c, f, node, "--set");
    cJSON_Delete(node);
    return s;
}

/* ------------------------------------------------------------------------------------------
 * Printing */

static cJSON *value_json(const bt_run_config *c, const field *f) {
    const void *p = cat(c, f);
    switch (f->k) {
    case K_INT: {
        int64_t v = *(const int64_t *)p;
        return v == BT_RUN_INT_DERIVE ? cJSON_CreateNull() : bt_json_exact_number((double)v);
    }
    case K_NUM: return bt_json_exact_number(*(const double *)p);
    case K_BOOL: return cJSON_CreateBool(*(const int *)p);
    case K_STR: {
        const char *s = *(char *const *)p;
        return s ? cJSON_CreateString(s) : cJSON_CreateNull();
    }
    case K_ENUM: return cJSON_CreateString(f->choices[*(const int *)p]);
    case K_HEADS: {
        unsigned m = *(const unsigned *)p;
        if (m == BT_RUN_HEADS_AUTO) return cJSON_CreateNull();
        cJSON *a = cJSON_CreateArray();
        for (int i = 0; f->choices[i]; i++)
            if (m & (1u << (i + 1))) cJSON_AddItemToArray(a, cJSON_CreateString(f->choices[i]));
        return a;
    }
    }
    return cJSON_CreateNull();
}

cJSON *bt_run_config_to_json(const bt_run_config *c) {
    cJSON *root = cJSON_CreateObject();
    BT_ASSERT(root);
    for (size_t i = 0; i < N_FIELDS; i++) {
        const field *f = &FIELDS[i];
        cJSON *obj = root;
        const char *p = f->key;
        for (const char *dot; (dot = strchr(p, '.')); p = dot + 1) {
            char name[64];
            snprintf(name, sizeof name, "%.*s", (int)(dot - p), p);
            cJSON *sub = cJSON_GetObjectItemCaseSensitive(obj, name);
            if (!sub) sub = cJSON_AddObjectToObject(obj, name);
            obj = sub;
        }
        cJSON *v = value_json(c, f);
        BT_ASSERT(v);
        cJSON_AddItemToObject(obj, p, v);
    }
    return root;
}

char *bt_run_config_to_string(const bt_run_config *c) {
    cJSON *j = bt_run_config_to_json(c);
    char *out = bt_json_print_line(j);
    cJSON_Delete(j);
    return out;
}

void bt_run_config_key_default(size_t i, char *out, size_t cap) {
    BT_ASSERT(i < N_FIELDS);
    bt_run_config d;
    bt_run_config_init(&d);
    cJSON *v = value_json(&d, &FIELDS[i]);
    char *txt = cJSON_PrintUnformatted(v);
    snprintf(out, cap, "%s", txt ? txt : "?");
    free(txt);
    cJSON_Delete(v);
    bt_run_config_free(&d);
}

/* ------------------------------------------------------------------------------------------
 * Cross-field rules */

bt_status bt_run_config_finish(bt_run_config *c, const char *source) {
    if (c->model.init_seed == BT_RUN_INT_DERIVE) c->model.init_seed = c->train.seed;
    if (c->data.seed == BT_RUN_INT_DERIVE) c->data.seed = c->train.seed;
    if (c->eval.steps == BT_RUN_INT_DERIVE) c->eval.steps = c->logging.steps;

    if (!c->model.path == !c->model.config)
        return bt_fail(BT_ERR_CONFIG,
                       "%s: model: give exactly one of model.path (an HF model directory to "
                       "fine-tune) and model.config (a model config to initialize from "
                       "scratch); %s",
                       source, c->model.path ? "both are set" : "neither is set");
    for (size_t i = 0; i < N_FIELDS; i++) {
        const field *f = &FIELDS[i];
        if ((f->flags & F_REQUIRED) && !*(char *const *)cat(c, f))
            return bt_fail(BT_ERR_CONFIG, "%s: %s: required (%s), not set", source, f->key,
                           !strcmp(f->key, "data.train") ? "the training manifest"
                                                         : "where checkpoints and logs go");
    }

    const struct {
        const char *name;
        double w;
        unsigned bit;
    } losses[] = {{"itc", c->train.loss_weights.itc, BT_HEADS_ITC},
                  {"itm", c->train.loss_weights.itm, BT_HEADS_ITM},
                  {"mlm", c->train.loss_weights.mlm, BT_HEADS_MLM}};
    unsigned needed = 0;
    for (int i = 0; i < 3; i++)
        if (losses[i].w > 0) needed |= losses[i].bit;
    if (!needed)
        return bt_fail(BT_ERR_CONFIG,
                       "%s: train.loss_weights: every weight is 0; give at least one loss a "
                       "weight > 0 (itc, itm or mlm)",
                       source);
    if (c->model.heads == BT_RUN_HEADS_AUTO) c->model.heads = needed;
    for (int i = 0; i < 3; i++)
        if ((needed & losses[i].bit) && !(c->model.heads & losses[i].bit))
            return bt_fail(BT_ERR_CONFIG,
                           "%s: train.loss_weights.%s is %g but model.heads has no \"%s\"; add "
                           "it to model.heads (or set model.heads to null)",
                           source, losses[i].name, losses[i].w, losses[i].name);

    if (c->train.warmup_steps > 0 && c->train.warmup_ratio > 0)
        return bt_fail(BT_ERR_CONFIG,
                       "%s: train.warmup_steps (%lld) and train.warmup_ratio (%g) are both "
                       "set; give one of them",
                       source, (long long)c->train.warmup_steps, c->train.warmup_ratio);
    if (c->eval.strategy != BT_INTERVAL_NO && !c->data.validation)
        return bt_fail(BT_ERR_CONFIG,
                       "%s: eval.strategy is \"%s\" but data.validation is not set; give a "
                       "validation manifest or set eval.strategy to \"no\"",
                       source, bt_interval_name(c->eval.strategy));
    if (c->eval.itm_rerank_k > 0 && !(c->model.heads & BT_HEADS_ITM))
        return bt_fail(BT_ERR_CONFIG,
                       "%s: eval.itm_rerank_k is %lld but model.heads has no \"itm\"; add it "
                       "or set eval.itm_rerank_k to 0",
                       source, (long long)c->eval.itm_rerank_k);
    if (c->train.freeze_vision && c->train.freeze_text && c->train.lr_mult.cross_modal == 0 &&
        c->train.lr_mult.heads == 0)
        return bt_fail(BT_ERR_CONFIG,
                       "%s: nothing to train: both towers are frozen and train.lr_mult."
                       "cross_modal and train.lr_mult.heads are 0",
                       source);
    return BT_OK;
}

bt_status bt_run_config_resolve(bt_run_config *c, const char *path, const char *const *sets,
                                size_t n_sets) {
    bt_run_config_init(c);
    bt_status s = path ? bt_run_config_load(c, path) : BT_OK;
    for (size_t i = 0; s == BT_OK && i < n_sets; i++) s = bt_run_config_set(c, sets[i]);
    /* the rules across keys judge the file and the --set values together: name both */
    char source[4200];
    if (path && n_sets) snprintf(source, sizeof source, "%s with its --set values", path);
    else snprintf(source, sizeof source, "%s", path ? path : n_sets ? "--set" : "run config");
    if (s == BT_OK) s = bt_run_config_finish(c, source);
    return s;
}

/* ------------------------------------------------------------------------------------------
 * Resume compatibility */

static int field_equal(const bt_run_config *a, const bt_run_config *b, const field *f) {
    const void *pa = cat(a, f), *pb = cat(b, f);
    switch (f->k) {
    case K_INT: return *(const int64_t *)pa == *(const int64_t *)pb;
    case K_NUM: return *(const double *)pa == *(const double *)pb;
    case K_BOOL:
    case K_ENUM: return *(const int *)pa == *(const int *)pb;
    case K_HEADS: return *(const unsigned *)pa == *(const unsigned *)pb;
    case K_STR: {
        const char *sa = *(char *const *)pa, *sb = *(char *const *)pb;
        return (!sa && !sb) || (sa && sb && !strcmp(sa, sb));
    }
    }
    return 0;
}

bt_status bt_run_config_check_resume(const bt_run_config *saved, const bt_run_config *run,
                                     const char *source, char *changed, size_t cap) {
    size_t n = 0;
    if (changed && cap) changed[0] = '\0';
    for (size_t i = 0; i < N_FIELDS; i++) {
        const field *f = &FIELDS[i];
        if (field_equal(saved, run, f)) continue;
        if (f->flags & F_RESUME) {
            char va[96], vb[96];
            cJSON *ja = value_json(saved, f), *jb = value_json(run, f);
            fmt_got(va, sizeof va, ja);
            fmt_got(vb, sizeof vb, jb);
            cJSON_Delete(ja);
            cJSON_Delete(jb);
            return bt_fail(BT_ERR_CONFIG,
                           "%s: run_config.%s is %s, this run has %s; a resumed run must keep "
                           "it (set it back, or train into a new output.dir)",
                           source, f->key, va, vb);
        }
        if (changed && n + 1 < cap)
            n += (size_t)snprintf(changed + n, cap - n, "%s%s", n ? ", " : "", f->key);
        if (changed && n >= cap) n = cap - 1;
    }
    return BT_OK;
}

/* The name tables above follow the enums of schedule.h and model.h. */
_Static_assert(BT_SCHEDULE_LINEAR == 0 && BT_SCHEDULE_COSINE == 1 && BT_SCHEDULE_CONSTANT == 2,
               "schedule_names follows bt_schedule_kind");
_Static_assert(BT_PRECISION_FP32 == 0 && BT_PRECISION_BF16 == 1,
               "precision_names follows bt_precision");
