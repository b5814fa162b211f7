/* train/trainer_state.c: trainer_state.json, the trainer's position in a checkpoint (see
 * train/trainer_state.h, docs/resume.md).
 *
 * Deliberately not here: the checkpoint directory around it and the optimizer's moments
 * (train/state.c). */
#include "train/trainer_state.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fileio.h"
#include "json_util.h"

#ifndef BT_VERSION
#error "BT_VERSION must be defined by the build (src/train/meson.build)"
#endif

#define STATE_FORMAT "bt-trainer-state"
enum { STATE_FORMAT_VERSION = 1 };

/* ------------------------------------------------------------------------------------------
 * The state struct */

void bt_train_state_init(bt_train_state *s) {
    memset(s, 0, sizeof *s);
    bt_run_config_init(&s->run_config);
}

void bt_train_state_free(bt_train_state *s) {
    cJSON_Delete(s->loader_cursor);
    cJSON_Delete(s->extra);
    free(s->best_model_checkpoint);
    bt_run_config_free(&s->run_config);
    memset(s, 0, sizeof *s);
}

void bt_train_state_set_run_config(bt_train_state *s, const bt_run_config *c) {
    bt_run_config_free(&s->run_config);
    bt_run_config_copy(&s->run_config, c);
}

void bt_train_state_set_cursor(bt_train_state *s, cJSON *cursor) {
    cJSON_Delete(s->loader_cursor);
    s->loader_cursor = cursor;
}

static int rng_name_ok(const char *name) {
    size_t n = strlen(name);
    if (n == 0 || n >= BT_TRAIN_STATE_RNG_NAME) return 0;
    for (size_t i = 0; i < n; i++) {
        char ch = name[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '_'))
            return 0;
    }
    return 1;
}

bt_status bt_train_state_set_rng(bt_train_state *s, const char *name, const bt_rng *r) {
    if (!rng_name_ok(name))
        return bt_fail(BT_ERR_ARG, "RNG state name '%.40s': expected 1 to %d characters of "
                                   "[A-Za-z0-9_]", name, BT_TRAIN_STATE_RNG_NAME - 1);
    for (size_t i = 0; i < s->n_rngs; i++)
        if (!strcmp(s->rngs[i].name, name)) {
            s->rngs[i].rng = *r;
            return BT_OK;
        }
    if (s->n_rngs == BT_TRAIN_STATE_MAX_RNGS)
        return bt_fail(BT_ERR_ARG, "RNG state '%s': at most %d named states", name,
                       BT_TRAIN_STATE_MAX_RNGS);
    snprintf(s->rngs[s->n_rngs].name, BT_TRAIN_STATE_RNG_NAME, "%s", name);
    s->rngs[s->n_rngs++].rng = *r;
    return BT_OK;
}

const bt_rng *bt_train_state_get_rng(const bt_train_state *s, const char *name) {
    for (size_t i = 0; i < s->n_rngs; i++)
        if (!strcmp(s->rngs[i].name, name)) return &s->rngs[i].rng;
    return NULL;
}

/* ------------------------------------------------------------------------------------------
 * trainer_state.json */

static cJSON *num(double v) { return bt_json_exact_number(v); }

cJSON *bt_train_state_to_json(const bt_train_state *s) {
    cJSON *j = cJSON_CreateObject();
    BT_ASSERT(j);
    cJSON_AddStringToObject(j, "format", STATE_FORMAT);
    cJSON_AddItemToObject(j, "format_version", num(STATE_FORMAT_VERSION));
    cJSON_AddStringToObject(j, "bt_version", BT_VERSION);
    cJSON_AddItemToObject(j, "global_step", num((double)s->global_step));
    cJSON_AddItemToObject(j, "epoch", num(s->epoch));
    cJSON_AddItemToObject(j, "samples_seen", num((double)s->samples_seen));
    cJSON_AddItemToObject(j, "max_steps", num((double)s->max_steps));
    cJSON_AddItemToObject(j, "loader_cursor", s->loader_cursor
                                                  ? cJSON_Duplicate(s->loader_cursor, 1)
                                                  : cJSON_CreateNull());
    cJSON *rng = cJSON_AddObjectToObject(j, "rng");
    for (size_t i = 0; i < s->n_rngs; i++) {
        /* 64-bit words as decimal strings: a JSON number holds only 53 bits */
        cJSON *words = cJSON_CreateArray();
        for (int k = 0; k < 4; k++) {
            char w[24];
            snprintf(w, sizeof w, "%llu", (unsigned long long)s->rngs[i].rng.s[k]);
            cJSON_AddItemToArray(words, cJSON_CreateString(w));
        }
        cJSON_AddItemToObject(rng, s->rngs[i].name, words);
    }
    cJSON *sch = cJSON_AddObjectToObject(j, "schedule");
    cJSON_AddItemToObject(sch, "step", num((double)s->schedule.step));
    cJSON_AddItemToObject(sch, "total_steps", num((double)s->schedule.total_steps));
    cJSON_AddItemToObject(sch, "warmup_steps", num((double)s->schedule.warmup_steps));
    cJSON_AddItemToObject(sch, "last_lr", num(s->schedule.last_lr));
    cJSON_AddItemToObject(j, "best_metric", s->has_best ? num(s->best_metric) : cJSON_CreateNull());
    cJSON_AddItemToObject(j, "best_model_checkpoint",
                          s->has_best && s->best_model_checkpoint
                              ? cJSON_CreateString(s->best_model_checkpoint)
                              : cJSON_CreateNull());
    cJSON_AddItemToObject(j, "run_config", bt_run_config_to_json(&s->run_config));
    cJSON_AddItemToObject(j, "extra", s->extra ? cJSON_Duplicate(s->extra, 1)
                                               : cJSON_CreateNull());
    return j;
}

/* Strict member readers: "<source>: <path>: expected X, got Y". */
static bt_status want(const char *source, const char *path, const char *what, const cJSON *v) {
    return bt_fail(BT_ERR_FORMAT, "%s: %s: expected %s, got %s", source, path, what,
                   bt_json_type_name(v));
}

static bt_status get_int(const cJSON *o, const char *key, const char *path, const char *source,
                         int64_t *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (bt_json_int_in(v, 0, BT_JSON_INT_MAX, out)) return BT_OK;
    if (cJSON_IsNumber(v))
        return bt_fail(BT_ERR_FORMAT, "%s: %s: expected an integer in [0, 2^53], got %g", source,
                       path, v->valuedouble);
    return want(source, path, "an integer >= 0", v);
}

static bt_status get_num(const cJSON *o, const char *key, const char *path, const char *source,
                         double *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return want(source, path, "a finite number", v);
    *out = v->valuedouble;
    return BT_OK;
}

/* Every member of o must be one of keys (NULL-terminated), each present once. */
static bt_status check_keys(const cJSON *o, const char *const *keys, const char *prefix,
                            const char *source) {
    for (const cJSON *m = o->child; m; m = m->next) {
        int known = 0;
        for (size_t i = 0; keys[i]; i++) known |= !strcmp(m->string, keys[i]);
        if (!known)
            return bt_fail(BT_ERR_FORMAT, "%s: unknown key '%s%s'", source, prefix, m->string);
    }
    for (size_t i = 0; keys[i]; i++)
        if (!cJSON_GetObjectItemCaseSensitive(o, keys[i]))
            return bt_fail(BT_ERR_FORMAT, "%s: key '%s%s' missing", source, prefix, keys[i]);
    return BT_OK;
}

static bt_status read_rngs(bt_train_state *s, const cJSON *rng, const char *source) {
    if (!cJSON_IsObject(rng)) return want(source, "rng", "an object", rng);
    for (const cJSON *m = rng->child; m; m = m->next) {
        char path[64];
        snprintf(path, sizeof path, "rng.%.40s", m->string);
        if (!rng_name_ok(m->string))
            return bt_fail(BT_ERR_FORMAT, "%s: %s: not a valid RNG state name", source, path);
        if (!cJSON_IsArray(m) || cJSON_GetArraySize(m) != 4)
            return bt_fail(BT_ERR_FORMAT, "%s: %s: expected an array of 4 decimal strings "
                                          "(xoshiro256** words)", source, path);
        bt_rng r;
        int k = 0;
        const cJSON *w;
        cJSON_ArrayForEach(w, m) {
            char *end = NULL;
            errno = 0;
            unsigned long long x =
                cJSON_IsString(w) && w->valuestring[0] >= '0' && w->valuestring[0] <= '9'
                    ? strtoull(w->valuestring, &end, 10)
                    : 0;
            if (!end || *end || errno)
                return bt_fail(BT_ERR_FORMAT, "%s: %s[%d]: expected a decimal string of a "
                                              "64-bit word", source, path, k);
            r.s[k++] = x;
        }
        if (!(r.s[0] | r.s[1] | r.s[2] | r.s[3]))
            return bt_fail(BT_ERR_FORMAT, "%s: %s: all four words are 0 (not a xoshiro256** "
                                          "state)", source, path);
        bt_status st = bt_train_state_set_rng(s, m->string, &r);
        if (st != BT_OK) return bt_fail_context(st, "%s: %s", source, path);
    }
    return BT_OK;
}

bt_status bt_train_state_from_json(bt_train_state *s, const cJSON *j, const char *source) {
    bt_train_state_free(s);
    bt_train_state_init(s);
    static const char *const top[] = {"format", "format_version", "bt_version", "global_step",
                                      "epoch", "samples_seen", "max_steps", "loader_cursor",
                                      "rng", "schedule", "best_metric",
                                      "best_model_checkpoint", "run_config", "extra", NULL};
    static const char *const sch_keys[] = {"step", "total_steps", "warmup_steps", "last_lr",
                                           NULL};
    if (!cJSON_IsObject(j)) return want(source, "the top level", "an object", j);
    bt_status st = check_keys(j, top, "", source);
    if (st != BT_OK) return st;
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(j, "format");
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, STATE_FORMAT))
        return bt_fail(BT_ERR_FORMAT, "%s: format: expected \"%s\"", source, STATE_FORMAT);
    int64_t version;
    if ((st = get_int(j, "format_version", "format_version", source, &version)) != BT_OK)
        return st;
    if (version != STATE_FORMAT_VERSION)
        return bt_fail(BT_ERR_UNSUPPORTED, "%s: format_version %lld: this bt reads version %d",
                       source, (long long)version, STATE_FORMAT_VERSION);
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(j, "bt_version");
    if (!cJSON_IsString(ver)) return want(source, "bt_version", "a string", ver);
    snprintf(s->bt_version, sizeof s->bt_version, "%s", ver->valuestring);
    if ((st = get_int(j, "global_step", "global_step", source, &s->global_step)) != BT_OK ||
        (st = get_num(j, "epoch", "epoch", source, &s->epoch)) != BT_OK ||
        (st = get_int(j, "samples_seen", "samples_seen", source, &s->samples_seen)) != BT_OK ||
        (st = get_int(j, "max_steps", "max_steps", source, &s->max_steps)) != BT_OK)
        return st;
    if (s->epoch < 0) return bt_fail(BT_ERR_FORMAT, "%s: epoch: expected >= 0, got %g", source,
                                     s->epoch);
    const cJSON *cur = cJSON_GetObjectItemCaseSensitive(j, "loader_cursor");
    if (!cJSON_IsNull(cur)) {
        if (!cJSON_IsObject(cur)) return want(source, "loader_cursor", "an object or null", cur);
        s->loader_cursor = cJSON_Duplicate(cur, 1);
    }
    if ((st = read_rngs(s, cJSON_GetObjectItemCaseSensitive(j, "rng"), source)) != BT_OK)
        return st;
    const cJSON *sch = cJSON_GetObjectItemCaseSensitive(j, "schedule");
    if (!cJSON_IsObject(sch)) return want(source, "schedule", "an object", sch);
    if ((st = check_keys(sch, sch_keys, "schedule.", source)) != BT_OK ||
        (st = get_int(sch, "step", "schedule.step", source, &s->schedule.step)) != BT_OK ||
        (st = get_int(sch, "total_steps", "schedule.total_steps", source,
                      &s->schedule.total_steps)) != BT_OK ||
        (st = get_int(sch, "warmup_steps", "schedule.warmup_steps", source,
                      &s->schedule.warmup_steps)) != BT_OK ||
        (st = get_num(sch, "last_lr", "schedule.last_lr", source, &s->schedule.last_lr)) != BT_OK)
        return st;
    const cJSON *best = cJSON_GetObjectItemCaseSensitive(j, "best_metric");
    const cJSON *bestck = cJSON_GetObjectItemCaseSensitive(j, "best_model_checkpoint");
    if (!cJSON_IsNull(best)) {
        if ((st = get_num(j, "best_metric", "best_metric", source, &s->best_metric)) != BT_OK)
            return st;
        s->has_best = 1;
    }
    if (!cJSON_IsNull(bestck)) {
        if (!cJSON_IsString(bestck))
            return want(source, "best_model_checkpoint", "a string or null", bestck);
        if (!s->has_best)
            return bt_fail(BT_ERR_FORMAT, "%s: best_model_checkpoint is \"%s\" but best_metric "
                           "is null; both are set (the best value and its checkpoint) or both "
                           "null", source, bestck->valuestring);
        s->best_model_checkpoint = strdup(bestck->valuestring);
        BT_ASSERT(s->best_model_checkpoint);
    }
    char rc_source[1200];
    snprintf(rc_source, sizeof rc_source, "%s: run_config", source);
    const cJSON *rc = cJSON_GetObjectItemCaseSensitive(j, "run_config");
    if ((st = bt_run_config_apply_json(&s->run_config, rc, rc_source)) != BT_OK ||
        (st = bt_run_config_finish(&s->run_config, rc_source)) != BT_OK)
        return st;
    const cJSON *extra = cJSON_GetObjectItemCaseSensitive(j, "extra");
    if (!cJSON_IsNull(extra)) {
        if (!cJSON_IsObject(extra)) return want(source, "extra", "an object or null", extra);
        s->extra = cJSON_Duplicate(extra, 1);
    }
    return BT_OK;
}

bt_status bt_train_state_write(const char *path, const bt_train_state *s) {
    cJSON *j = bt_train_state_to_json(s);
    char *buf = bt_json_print_line(j);
    cJSON_Delete(j);
    bt_status st = bt_write_file_atomic(path, "trainer state", buf, strlen(buf));
    free(buf);
    return st;
}

bt_status bt_train_state_read(const char *path, bt_train_state *s) {
    cJSON *j;
    bt_status st = bt_json_load(path, "trainer state", &j);
    if (st != BT_OK) return st;
    st = bt_train_state_from_json(s, j, path);
    cJSON_Delete(j);
    return st;
}
