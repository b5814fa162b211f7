/* sampler.c: deterministic per-epoch permutation, DistributedSampler sharding, batches and
 * the resumable cursor (see sampler.h for the exact semantics and docs/data.md for the
 * generator's definition).
 *
 * Deliberately not done: torch.randperm compatibility (its Philox/MT details are not worth
 * reproducing: what matters is that bt is deterministic and documented). */
#include "data/sampler.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h"

/* ---- sampler ----------------------------------------------------------------------------- */

bt_status sampler_init(sampler *s, int64_t n, const sampler_options *opt) {
    memset(s, 0, sizeof *s);
    s->perm_epoch = -1;
    if (n < 1) return bt_fail(BT_ERR_ARG, "sampler: dataset has %" PRId64 " records", n);
    if (opt->world_size < 1)
        return bt_fail(BT_ERR_ARG, "sampler: world_size is %d, expected >= 1", opt->world_size);
    if (opt->rank < 0 || opt->rank >= opt->world_size)
        return bt_fail(BT_ERR_ARG, "sampler: rank %d outside 0..%d", opt->rank,
                       opt->world_size - 1);
    if (opt->batch_size < 1)
        return bt_fail(BT_ERR_ARG, "sampler: batch_size is %d, expected >= 1", opt->batch_size);
    s->opt = *opt;
    s->n = n;
    int64_t w = opt->world_size;
    /* DistributedSampler: ceil((N - W) / W) when dropping a ragged tail, else ceil(N / W). */
    if (opt->drop_last && n % w != 0)
        s->num_samples = n >= w ? (n - w + w - 1) / w : 0;
    else
        s->num_samples = (n + w - 1) / w;
    s->total_size = s->num_samples * w;
    int64_t b = opt->batch_size;
    s->num_batches = opt->drop_last_batch ? s->num_samples / b : (s->num_samples + b - 1) / b;
    s->perm = malloc((size_t)n * sizeof *s->perm);
    BT_ASSERTF(s->perm, "out of memory for a sampler of %" PRId64 " records", n);
    sampler_set_epoch(s, 0);
    return BT_OK;
}

void sampler_free(sampler *s) {
    if (!s) return;
    free(s->perm);
    memset(s, 0, sizeof *s);
}

void sampler_permutation(const sampler *s, int64_t epoch, int64_t *perm) {
    for (int64_t i = 0; i < s->n; i++)
        perm[i] = i;
    if (!s->opt.shuffle) return;
    /* key = splitmix64(seed) XOR epoch seeds xoshiro256**; Fisher-Yates from the top. */
    uint64_t st = s->opt.seed;
    uint64_t key = bt_splitmix64(&st) ^ (uint64_t)epoch;
    bt_rng r;
    bt_rng_seed(&r, key);
    for (int64_t i = s->n - 1; i > 0; i--) {
        int64_t j = (int64_t)bt_rng_below(&r, (uint64_t)i + 1);
        int64_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

void sampler_rank_indices(const sampler *s, const int64_t *perm, int64_t *out) {
    /* Padding repeats the list from its start as often as needed: position p maps to
     * perm[p mod N]; with drop_last, total_size <= N and the modulo never wraps. */
    int64_t w = s->opt.world_size, r = s->opt.rank;
    for (int64_t i = 0; i < s->num_samples; i++)
        out[i] = perm[(r + i * w) % s->n];
}

int sampler_batch_size_at(const sampler *s, int64_t k) {
    BT_ASSERT(k >= 0 && k < s->num_batches);
    int64_t left = s->num_samples - k * s->opt.batch_size;
    return left < s->opt.batch_size ? (int)left : s->opt.batch_size;
}

void sampler_set_epoch(sampler *s, int64_t epoch) {
    BT_ASSERT(epoch >= 0);
    if (s->perm_epoch != epoch) {
        sampler_permutation(s, epoch, s->perm);
        s->perm_epoch = epoch;
    }
    s->cur.epoch = epoch;
    s->cur.position = 0;
}

int sampler_next_batch(sampler *s, int64_t *out) {
    int64_t b = s->opt.batch_size;
    int64_t k = s->cur.position / b;
    if (s->cur.position % b != 0 || k >= s->num_batches) return 0;
    int size = sampler_batch_size_at(s, k);
    int64_t w = s->opt.world_size, r = s->opt.rank;
    for (int i = 0; i < size; i++) {
        int64_t p = s->cur.position + i;
        out[i] = s->perm[(r + p * w) % s->n];
    }
    s->cur.position += size;
    return size;
}

/* ---- cursor ------------------------------------------------------------------------------ */

cJSON *sampler_cursor_to_json(const sampler *s, sampler_cursor c) {
    cJSON *j = cJSON_CreateObject();
    BT_ASSERT(j);
    cJSON_AddNumberToObject(j, "epoch", (double)c.epoch);
    cJSON_AddNumberToObject(j, "position", (double)c.position);
    if (s->opt.seed < (1ull << 53)) {
        cJSON_AddNumberToObject(j, "seed", (double)s->opt.seed);
    } else {
        char buf[32];
        snprintf(buf, sizeof buf, "%" PRIu64, s->opt.seed);
        cJSON_AddStringToObject(j, "seed", buf);
    }
    cJSON_AddNumberToObject(j, "dataset_size", (double)s->n);
    cJSON_AddNumberToObject(j, "world_size", s->opt.world_size);
    cJSON_AddNumberToObject(j, "batch_size", s->opt.batch_size);
    cJSON_AddBoolToObject(j, "shuffle", s->opt.shuffle != 0);
    cJSON_AddBoolToObject(j, "drop_last", s->opt.drop_last != 0);
    cJSON_AddBoolToObject(j, "drop_last_batch", s->opt.drop_last_batch != 0);
    return j;
}

static bt_status json_int(const cJSON *j, const char *what, const char *key, int64_t *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!v) return bt_fail(BT_ERR_MISSING, "%s: cursor key '%s' missing", what, key);
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < 0 ||
        v->valuedouble > 9007199254740992.0)
        return bt_fail(BT_ERR_FORMAT, "%s: cursor key '%s' must be a non-negative integer", what,
                       key);
    *out = (int64_t)v->valuedouble;
    return BT_OK;
}

static bt_status json_bool(const cJSON *j, const char *what, const char *key, int *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!v) return bt_fail(BT_ERR_MISSING, "%s: cursor key '%s' missing", what, key);
    if (!cJSON_IsBool(v))
        return bt_fail(BT_ERR_FORMAT, "%s: cursor key '%s' must be true or false", what, key);
    *out = cJSON_IsTrue(v);
    return BT_OK;
}

static bt_status check_same(const char *what, const char *key, int64_t saved, int64_t now) {
    if (saved == now) return BT_OK;
    return bt_fail(BT_ERR_CONFIG, "%s: cursor '%s' is %" PRId64 ", this run has %" PRId64, what,
                   key, saved, now);
}

/* A cursor must lie inside the epoch and on a batch boundary (or at the epoch's end). */
static bt_status cursor_validate(const sampler *s, sampler_cursor c) {
    if (c.epoch < 0) return bt_fail(BT_ERR_FORMAT, "cursor epoch %" PRId64 " is negative", c.epoch);
    if (c.position < 0 || c.position > s->num_samples)
        return bt_fail(BT_ERR_FORMAT, "cursor position %" PRId64 " outside 0..%" PRId64, c.position,
                       s->num_samples);
    if (c.position % s->opt.batch_size != 0 && c.position != s->num_samples)
        return bt_fail(BT_ERR_FORMAT,
                       "cursor position %" PRId64 " is not a multiple of batch_size %d", c.position,
                       s->opt.batch_size);
    return BT_OK;
}

bt_status sampler_cursor_from_json(const sampler *s, const cJSON *j, const char *what,
                                   sampler_cursor *out) {
    bt_status st;
    if (!cJSON_IsObject(j)) return bt_fail(BT_ERR_FORMAT, "%s: cursor must be an object", what);
    int64_t epoch = 0, position = 0, n = 0, w = 0, b = 0;
    int shuffle = 0, drop_last = 0, drop_last_batch = 0;
    if ((st = json_int(j, what, "epoch", &epoch))) return st;
    if ((st = json_int(j, what, "position", &position))) return st;
    if ((st = json_int(j, what, "dataset_size", &n))) return st;
    if ((st = json_int(j, what, "world_size", &w))) return st;
    if ((st = json_int(j, what, "batch_size", &b))) return st;
    if ((st = json_bool(j, what, "shuffle", &shuffle))) return st;
    if ((st = json_bool(j, what, "drop_last", &drop_last))) return st;
    if ((st = json_bool(j, what, "drop_last_batch", &drop_last_batch))) return st;

    const cJSON *sv = cJSON_GetObjectItemCaseSensitive(j, "seed");
    uint64_t seed;
    if (!sv) return bt_fail(BT_ERR_MISSING, "%s: cursor key 'seed' missing", what);
    if (cJSON_IsString(sv)) {
        char *end = NULL;
        errno = 0;
        seed = strtoull(sv->valuestring, &end, 10);
        if (!sv->valuestring[0] || *end || sv->valuestring[0] == '-' || errno == ERANGE)
            return bt_fail(BT_ERR_FORMAT, "%s: cursor key 'seed' is not a decimal integer", what);
    } else {
        int64_t v = 0;
        if ((st = json_int(j, what, "seed", &v))) return st;
        seed = (uint64_t)v;
    }
    if (seed != s->opt.seed)
        return bt_fail(BT_ERR_CONFIG, "%s: cursor 'seed' is %" PRIu64 ", this run has %" PRIu64,
                       what, seed, s->opt.seed);
    if ((st = check_same(what, "dataset_size", n, s->n))) return st;
    if ((st = check_same(what, "world_size", w, s->opt.world_size))) return st;
    if ((st = check_same(what, "batch_size", b, s->opt.batch_size))) return st;
    if ((st = check_same(what, "shuffle", shuffle, s->opt.shuffle != 0))) return st;
    if ((st = check_same(what, "drop_last", drop_last, s->opt.drop_last != 0))) return st;
    if ((st = check_same(what, "drop_last_batch", drop_last_batch, s->opt.drop_last_batch != 0)))
        return st;
    out->epoch = epoch;
    out->position = position;
    if ((st = cursor_validate(s, *out))) return bt_fail_context(st, "%s", what);
    return BT_OK;
}

bt_status sampler_seek(sampler *s, sampler_cursor c) {
    bt_status st = cursor_validate(s, c);
    if (st) return st;
    sampler_set_epoch(s, c.epoch);
    s->cur.position = c.position;
    return BT_OK;
}
