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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_util.h"
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
    if (opt->n_shards > 0) {
        BT_ASSERT(opt->shard_first && opt->shard_first[opt->n_shards] == n);
        s->shard_ids = malloc((size_t)opt->n_shards * sizeof *s->shard_ids);
        s->list = malloc(((size_t)s->num_samples + 1) * sizeof *s->list);
        BT_ASSERTF(s->shard_ids && s->list, "out of memory for a sampler of %" PRId64 " shards",
                   opt->n_shards);
        for (int64_t i = 0; i < opt->n_shards; i++)
            if (opt->shard_first[i + 1] > opt->shard_first[i]) s->shard_ids[s->n_live++] = i;
        if (s->n_live < w) {
            int64_t live = s->n_live;
            sampler_free(s);
            return bt_fail(BT_ERR_ARG, "sampler: %" PRId64 " non-empty shards for %" PRId64
                           " ranks; every rank reads whole shards, so write at least one shard "
                           "per rank (bt-data shards --per-shard)", live, w);
        }
    }
    sampler_set_epoch(s, 0);
    return BT_OK;
}

void sampler_free(sampler *s) {
    if (!s) return;
    free(s->perm);
    free(s->list);
    free(s->shard_ids);
    memset(s, 0, sizeof *s);
}

/* permutation(seed, epoch) of 0..n-1 into perm (identity without shuffle). */
static void permute(int64_t *perm, int64_t n, uint64_t seed, int64_t epoch, int shuffle) {
    for (int64_t i = 0; i < n; i++)
        perm[i] = i;
    if (!shuffle) return;
    /* key = splitmix64(seed) XOR epoch seeds xoshiro256**; Fisher-Yates from the top. */
    uint64_t st = seed;
    uint64_t key = bt_splitmix64(&st) ^ (uint64_t)epoch;
    bt_rng r;
    bt_rng_seed(&r, key);
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)bt_rng_below(&r, (uint64_t)i + 1);
        int64_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

void sampler_permutation(const sampler *s, int64_t epoch, int64_t *perm) {
    permute(perm, s->n, s->opt.seed, epoch, s->opt.shuffle);
}

/* Shard mode (sampler.h): the rank's buffered shard stream, repeated or cut to num_samples. */
static void shard_list(const sampler *s, int64_t epoch, int64_t *stream, int64_t *out) {
    int64_t w = s->opt.world_size, r = s->opt.rank, S = s->n_live;
    int64_t *order = malloc((size_t)S * sizeof *order);
    BT_ASSERT(order);
    permute(order, S, s->opt.seed, epoch, s->opt.shuffle);
    int64_t len = 0;
    for (int64_t k = r; k < S; k += w) {
        int64_t sh = s->shard_ids[order[k]];
        for (int64_t i = s->opt.shard_first[sh]; i < s->opt.shard_first[sh + 1]; i++)
            stream[len++] = i;
    }
    free(order);
    int64_t B = s->opt.shuffle_buffer < len ? s->opt.shuffle_buffer : len;
    if (s->opt.shuffle && B > 1) {
        uint64_t st = s->opt.seed;
        (void)bt_splitmix64(&st);
        uint64_t k2 = bt_splitmix64(&st);
        bt_rng g;
        bt_rng_seed(&g, k2 ^ (uint64_t)epoch ^ ((uint64_t)r << 32));
        int64_t *buf = malloc((size_t)B * sizeof *buf);
        BT_ASSERT(buf);
        /* Emitted samples go back into stream in place: the j-th emission happens after
         * reading input j + B - 1 >= j, so no unread input is overwritten. */
        int64_t emitted = 0;
        for (int64_t i = 0; i < len; i++) {
            if (i < B) {
                buf[i] = stream[i];
                continue;
            }
            int64_t j = (int64_t)bt_rng_below(&g, (uint64_t)B);
            int64_t x = stream[i];
            stream[emitted++] = buf[j];
            buf[j] = x;
        }
        for (int64_t c = B; c > 0; c--) {
            int64_t j = (int64_t)bt_rng_below(&g, (uint64_t)c);
            stream[emitted++] = buf[j];
            buf[j] = buf[c - 1];
        }
        BT_ASSERT(emitted == len);
        free(buf);
    }
    BT_ASSERT(len > 0);
    for (int64_t i = 0; i < s->num_samples; i++)
        out[i] = stream[i % len];
}

void sampler_epoch_list(const sampler *s, int64_t epoch, int64_t *scratch, int64_t *out) {
    if (s->opt.n_shards > 0) {
        shard_list(s, epoch, scratch, out);
        return;
    }
    sampler_permutation(s, epoch, scratch);
    sampler_rank_indices(s, scratch, out);
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
        if (s->opt.n_shards > 0) shard_list(s, epoch, s->perm, s->list);
        else sampler_permutation(s, epoch, s->perm);
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
        out[i] = s->opt.n_shards > 0 ? s->list[p] : s->perm[(r + p * w) % s->n];
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
    if (s->opt.n_shards > 0) {
        cJSON_AddNumberToObject(j, "shards", (double)s->opt.n_shards);
        cJSON_AddNumberToObject(j, "shuffle_buffer", (double)s->opt.shuffle_buffer);
    }
    return j;
}

static bt_status json_int(const cJSON *j, const char *what, const char *key, int64_t *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!v) return bt_fail(BT_ERR_MISSING, "%s: cursor key '%s' missing", what, key);
    if (!bt_json_int_in(v, 0, BT_JSON_INT_MAX, out))
        return bt_fail(BT_ERR_FORMAT, "%s: cursor key '%s' must be a non-negative integer", what,
                       key);
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
    if (s->opt.n_shards > 0) {
        int64_t shards = 0, buffer = 0;
        if ((st = json_int(j, what, "shards", &shards))) return st;
        if ((st = json_int(j, what, "shuffle_buffer", &buffer))) return st;
        if ((st = check_same(what, "shards", shards, s->opt.n_shards))) return st;
        if ((st = check_same(what, "shuffle_buffer", buffer, s->opt.shuffle_buffer))) return st;
    } else if (cJSON_GetObjectItemCaseSensitive(j, "shards")) {
        return bt_fail(BT_ERR_CONFIG, "%s: the cursor was saved reading WebDataset shards; this "
                       "run reads a manifest", what);
    }
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
