/* loader.c: worker threads filling a ring of batch slots (see loader.h for the contract).
 *
 * Synchronization: one mutex guards the ring bookkeeping (slot states, next_claim,
 * next_deliver, failed_seq, shutdown) with two condition variables: `work` (a slot became
 * free, or shutdown) for workers and `ready` (a slot was filled) for the consumer. Filling a
 * slot runs without the lock: the slot is owned by its worker while FILLING. Each worker keeps
 * its own copy of the current epoch's permutation, so workers never share sampler state
 * (claims are in increasing seq order, so a worker's epochs never go backwards).
 *
 * Slot life cycle: FREE -> FILLING (worker) -> READY or FAILED -> HELD (consumer) -> FREE.
 *
 * Deliberately not done: work stealing within a batch (one worker fills one whole batch; with
 * prefetch >= num_workers all workers stay busy), eviction in the image cache. */
#include "data/loader.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "data/shards.h"
#include "mem.h"

typedef enum {
    SLOT_FREE,
    SLOT_FILLING,
    SLOT_READY,
    SLOT_FAILED,
    SLOT_HELD,
} slot_state;

typedef struct slot {
    slot_state state;
    loader_batch batch;
    bt_status err;
    char *err_msg; /* message of a FAILED slot (malloc'd) */
} slot;

/* Image cache: open addressing on the path hash; entries are immutable once published. */
typedef struct cache_entry {
    const char *key; /* resolved image path (manifest arena, outlives the loader) */
    uint64_t hash;
    void *pixels; /* (3, R, R) in the output dtype */
} cache_entry;

typedef struct worker {
    struct loader *l;
    pthread_t thread;
    int started;
    int64_t epoch; /* epoch held in list, -1 for none */
    int64_t *perm; /* (N) */
    int64_t *list; /* (num_samples) this rank's indices for `epoch` */
} worker;

struct loader {
    const manifest *m;
    const tokenizer *tok;
    const image_preprocess_config *img;
    loader_options opt;
    sampler smp; /* settings and cursor helpers; workers only read it */
    int64_t num_batches;
    int64_t start_seq, end_seq; /* end_seq: INT64_MAX when unbounded */
    size_t row_pixels;          /* 3 * R * R */
    size_t row_bytes;           /* row_pixels * dtype size */
    int has_choices;

    pthread_mutex_t mu;
    pthread_cond_t work, ready;
    slot *slots; /* (prefetch) */
    int n_slots;
    int64_t next_claim, next_deliver;
    int64_t failed_seq; /* lowest seq that failed, INT64_MAX when none */
    atomic_int shutdown;
    worker *workers;
    int n_workers;

    /* bad records: 0 unknown/good, 1 bad (reported once) */
    _Atomic unsigned char *bad; /* (N) */
    char **problems;
    size_t n_problems, problems_cap, problems_drained;

    pthread_mutex_t cache_mu;
    cache_entry *cache; /* (cache_cap), key NULL = empty */
    size_t cache_cap;

    /* stats (under mu unless atomic) */
    atomic_llong replaced, bad_records, cache_hits, cache_misses;
    int64_t cache_entries;
    size_t cache_used;
    int64_t delivered;
    double wait_seconds;
};

loader_options loader_options_default(void) {
    loader_options o;
    memset(&o, 0, sizeof o);
    o.num_workers = 1;
    o.world_size = 1;
    o.batch_size = 1;
    o.shuffle = 1;
    o.max_length = 40;
    o.pixel_dtype = BT_DTYPE_F32;
    o.with_choices = 1;
    o.shuffle_buffer = 1000;
    o.on_error = MANIFEST_ON_ERROR_STOP;
    return o;
}

static uint64_t hash_str(const char *s) {
    uint64_t h = 14695981039346656037ull; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* ---- cache ------------------------------------------------------------------------------- */

static const void *cache_find(loader *l, const char *key, uint64_t h) {
    const void *found = NULL;
    pthread_mutex_lock(&l->cache_mu);
    for (size_t i = h & (l->cache_cap - 1);; i = (i + 1) & (l->cache_cap - 1)) {
        cache_entry *e = &l->cache[i];
        if (!e->key) break;
        if (e->hash == h && strcmp(e->key, key) == 0) {
            found = e->pixels;
            break;
        }
    }
    pthread_mutex_unlock(&l->cache_mu);
    return found;
}

static void cache_insert(loader *l, const char *key, uint64_t h, const void *pixels) {
    pthread_mutex_lock(&l->cache_mu);
    /* Keep the table at most half full so probes stay short and always end. */
    if (l->cache_used + l->row_bytes <= l->opt.cache_bytes &&
        (size_t)(l->cache_entries + 1) * 2 <= l->cache_cap) {
        size_t i = h & (l->cache_cap - 1);
        int present = 0;
        for (;; i = (i + 1) & (l->cache_cap - 1)) {
            cache_entry *e = &l->cache[i];
            if (!e->key) break;
            if (e->hash == h && strcmp(e->key, key) == 0) {
                present = 1; /* another worker decoded the same image meanwhile */
                break;
            }
        }
        if (!present) {
            void *copy = bt_alloc(l->row_bytes);
            memcpy(copy, pixels, l->row_bytes);
            l->cache[i].pixels = copy;
            l->cache[i].hash = h;
            l->cache[i].key = key;
            l->cache_entries++;
            l->cache_used += l->row_bytes;
        }
    }
    pthread_mutex_unlock(&l->cache_mu);
}

/* ---- filling a batch --------------------------------------------------------------------- */

/* Loads record idx into row i of b. On failure leaves a message "manifest:line: ..." in this
 * thread's error buffer. */
static bt_status load_record(loader *l, loader_batch *b, int i, int64_t idx) {
    const manifest *m = l->m;
    const manifest_record *r = &m->records[idx];
    size_t T = (size_t)l->opt.max_length;
    uint8_t *px = (uint8_t *)b->pixel_values + (size_t)i * l->row_bytes;
    const char *path = manifest_image(m, (size_t)idx);
    char where[4400];
    manifest_where(m, (size_t)idx, where, sizeof where);
    bt_status st;

    uint64_t h = 0;
    const void *hit = NULL;
    if (l->cache_cap) {
        h = hash_str(path);
        hit = cache_find(l, path, h);
    }
    if (hit) {
        memcpy(px, hit, l->row_bytes);
        atomic_fetch_add(&l->cache_hits, 1);
    } else {
        image_u8 im;
        memset(&im, 0, sizeof im);
        if (m->members) { /* a WebDataset sample: the member's bytes, read in place */
            const manifest_member *mb = &m->members[idx];
            uint8_t *bytes;
            st = shards_read_member(m->shards[mb->shard], path, mb->offset, mb->size, &bytes);
            if (st == BT_OK) {
                st = image_decode_for(&im, bytes, (size_t)mb->size, path, l->img);
                bt_free(bytes);
            }
        } else {
            st = image_load_file(&im, path, l->img);
        }
        if (st) return bt_fail_context(st, "%s", where);
        if (l->opt.pixel_dtype == BT_DTYPE_BF16)
            image_preprocess_bf16((bt_bf16 *)px, &im, l->img);
        else
            image_preprocess((float *)px, &im, l->img);
        image_u8_free(&im);
        if (l->cache_cap) {
            atomic_fetch_add(&l->cache_misses, 1);
            cache_insert(l, path, h, px);
        }
    }

    size_t n;
    const char *cap = manifest_caption(m, (size_t)idx);
    st = tokenizer_encode_single(l->tok, cap, strlen(cap), T, 1, 1, b->input_ids + i * T,
                                 b->attention_mask + i * T, &n);
    if (st) return bt_fail_context(st, "%s: caption", where);
    if (l->has_choices) {
        for (int k = 0; k < MANIFEST_N_CHOICES; k++) {
            int32_t *ids = b->choice_ids + ((size_t)i * MANIFEST_N_CHOICES + k) * T;
            int32_t *mask = b->choice_mask + ((size_t)i * MANIFEST_N_CHOICES + k) * T;
            const char *c = manifest_choice(m, (size_t)idx, k);
            if (!c) { /* a record without choices in a manifest that has some */
                for (size_t t = 0; t < T; t++)
                    ids[t] = l->tok->pad_id, mask[t] = 0;
                continue;
            }
            st = tokenizer_encode_single(l->tok, c, strlen(c), T, 1, 1, ids, mask, &n);
            if (st) return bt_fail_context(st, "%s: caption choice %d", where, k);
        }
        b->labels[i] = r->label;
    }
    b->record[i] = idx;
    b->ids[i] = manifest_id(m, (size_t)idx);
    return BT_OK;
}

static void add_problem(loader *l, const char *msg) {
    pthread_mutex_lock(&l->mu);
    if (l->n_problems == l->problems_cap) {
        l->problems_cap = l->problems_cap ? 2 * l->problems_cap : 16;
        char **grown = realloc(l->problems, l->problems_cap * sizeof *grown);
        BT_ASSERT(grown);
        l->problems = grown;
    }
    l->problems[l->n_problems] = strdup(msg);
    BT_ASSERT(l->problems[l->n_problems]);
    l->n_problems++;
    pthread_mutex_unlock(&l->mu);
}

static void clear_row(loader *l, loader_batch *b, int i) {
    size_t T = (size_t)l->opt.max_length;
    memset((uint8_t *)b->pixel_values + (size_t)i * l->row_bytes, 0, l->row_bytes);
    for (size_t t = 0; t < T; t++) {
        b->input_ids[i * T + t] = l->tok->pad_id;
        b->attention_mask[i * T + t] = 0;
    }
    if (l->has_choices) {
        size_t cn = MANIFEST_N_CHOICES * T;
        for (size_t t = 0; t < cn; t++) {
            b->choice_ids[i * cn + t] = l->tok->pad_id;
            b->choice_mask[i * cn + t] = 0;
        }
        b->labels[i] = -1;
    }
    b->sampled[i] = b->record[i] = -1;
    b->ids[i] = NULL;
}

/* Fills slot s with batch seq. Returns BT_OK, or the error (message in this thread's
 * buffer) under STOP / when no record is valid. BT_ERR_ARG with an empty message when
 * interrupted by shutdown. */
static bt_status fill_batch(worker *w, loader_batch *b, int64_t seq) {
    loader *l = w->l;
    int64_t n = l->m->n;
    int64_t epoch = seq / l->num_batches, k = seq % l->num_batches;
    if (w->epoch != epoch) {
        sampler_epoch_list(&l->smp, epoch, w->perm, w->list);
        w->epoch = epoch;
    }
    b->seq = seq;
    b->epoch = epoch;
    b->index = k;
    b->size = sampler_batch_size_at(&l->smp, k);
    const int64_t *idx = w->list + k * l->opt.batch_size;
    for (int i = 0; i < b->capacity; i++) {
        if (atomic_load(&l->shutdown)) {
            bt_error_clear();
            return BT_ERR_ARG;
        }
        clear_row(l, b, i);
        if (i >= b->size) continue;
        b->sampled[i] = idx[i];
        int64_t tries = 0, j = idx[i];
        for (;; j = (j + 1) % n) {
            if (tries++ == n) {
                return bt_fail(BT_ERR_MISSING,
                               "%s: no valid record: all %" PRId64 " records failed to load",
                               l->m->path, n);
            }
            if (atomic_load(&l->bad[j])) continue; /* known bad: skip without re-reading */
            bt_status st = load_record(l, b, i, j);
            if (st == BT_OK) break;
            if (l->opt.on_error == MANIFEST_ON_ERROR_STOP) return st;
            if (atomic_exchange(&l->bad[j], 1) == 0) {
                atomic_fetch_add(&l->bad_records, 1);
                add_problem(l, bt_error_message());
            }
            clear_row(l, b, i);
            b->sampled[i] = idx[i];
        }
        if (j != idx[i]) atomic_fetch_add(&l->replaced, 1);
    }
    return BT_OK;
}

static void *worker_main(void *arg) {
    worker *w = arg;
    loader *l = w->l;
    pthread_mutex_lock(&l->mu);
    for (;;) {
        if (atomic_load(&l->shutdown)) break;
        int64_t s = l->next_claim;
        if (s >= l->end_seq || s >= l->failed_seq) break; /* no work will ever come */
        slot *sl = &l->slots[s % l->n_slots];
        if (sl->state != SLOT_FREE) {
            pthread_cond_wait(&l->work, &l->mu);
            continue;
        }
        sl->state = SLOT_FILLING;
        l->next_claim++;
        pthread_mutex_unlock(&l->mu);

        bt_status st = fill_batch(w, &sl->batch, s);
        char *msg = NULL;
        if (st != BT_OK) {
            msg = strdup(bt_error_message());
            BT_ASSERT(msg);
        }

        pthread_mutex_lock(&l->mu);
        if (st == BT_OK) {
            sl->state = SLOT_READY;
        } else {
            sl->state = SLOT_FAILED;
            sl->err = st;
            free(sl->err_msg);
            sl->err_msg = msg;
            if (s < l->failed_seq) l->failed_seq = s;
        }
        pthread_cond_broadcast(&l->ready);
        /* Other workers may be waiting to learn that no more work will come. */
        pthread_cond_broadcast(&l->work);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

/* ---- setup and teardown ------------------------------------------------------------------ */

/* Zero-filled, 64-byte aligned (as bt_calloc), or NULL when out of memory; bt_free frees. */
static void *zalloc(size_t bytes) {
    size_t rounded = (bytes + 63) & ~(size_t)63;
    void *p = aligned_alloc(64, rounded ? rounded : 64);
    if (p) memset(p, 0, rounded ? rounded : 64);
    return p;
}

/* 0, or -1 when out of memory (what was allocated is freed by batch_free). */
static int batch_alloc(loader *l, loader_batch *b) {
    int B = l->opt.batch_size;
    size_t T = (size_t)l->opt.max_length;
    memset(b, 0, sizeof *b);
    b->capacity = B;
    b->max_length = (int)T;
    b->image_size = l->img->crop_size;
    b->pixel_dtype = l->opt.pixel_dtype;
    b->pixel_values = zalloc((size_t)B * l->row_bytes);
    b->input_ids = zalloc((size_t)B * T * sizeof(int32_t));
    b->attention_mask = zalloc((size_t)B * T * sizeof(int32_t));
    b->sampled = zalloc((size_t)B * sizeof(int64_t));
    b->record = zalloc((size_t)B * sizeof(int64_t));
    b->ids = zalloc((size_t)B * sizeof(char *));
    int ok = b->pixel_values && b->input_ids && b->attention_mask && b->sampled && b->record &&
             b->ids;
    b->has_choices = l->has_choices;
    if (l->has_choices) {
        b->choice_ids = zalloc((size_t)B * MANIFEST_N_CHOICES * T * sizeof(int32_t));
        b->choice_mask = zalloc((size_t)B * MANIFEST_N_CHOICES * T * sizeof(int32_t));
        b->labels = zalloc((size_t)B * sizeof(int32_t));
        ok = ok && b->choice_ids && b->choice_mask && b->labels;
    }
    return ok ? 0 : -1;
}

static void batch_free(loader_batch *b) {
    bt_free(b->pixel_values);
    bt_free(b->input_ids);
    bt_free(b->attention_mask);
    bt_free(b->sampled);
    bt_free(b->record);
    bt_free((void *)b->ids);
    bt_free(b->choice_ids);
    bt_free(b->choice_mask);
    bt_free(b->labels);
}

static sampler_options sampler_opts(const loader_options *o, const manifest *m) {
    sampler_options so = {
        .n_shards = m->members ? (int64_t)m->n_shards : 0,
        .shard_first = m->shard_first,
        .shuffle_buffer = o->shuffle_buffer,
        .seed = o->seed,
        .rank = o->rank,
        .world_size = o->world_size,
        .batch_size = o->batch_size,
        .shuffle = o->shuffle,
        .drop_last = o->drop_last,
        .drop_last_batch = o->drop_last_batch,
    };
    return so;
}

bt_status loader_cursor_from_json(const loader_options *opt, const manifest *m, const cJSON *j,
                                  const char *what, sampler_cursor *out) {
    sampler s;
    sampler_options so = sampler_opts(opt, m);
    bt_status st = sampler_init(&s, (int64_t)m->n, &so);
    if (st == BT_OK) st = sampler_cursor_from_json(&s, j, what, out);
    sampler_free(&s);
    return st;
}

uint64_t loader_estimate_bytes(size_t n_records, const image_preprocess_config *img,
                               const loader_options *opt) {
    uint64_t B = opt->batch_size > 0 ? (uint64_t)opt->batch_size : 0;
    uint64_t T = opt->max_length > 0 ? (uint64_t)opt->max_length : 0;
    uint64_t R = img->crop_size > 0 ? (uint64_t)img->crop_size : 0;
    uint64_t row = bt_mul_sat(bt_mul_sat(3 * R, R), bt_dtype_size(opt->pixel_dtype));
    /* per row: pixels, ids + mask, sampled + record + id pointer, choices (upper bound) */
    uint64_t per_row = bt_add_sat(row, bt_add_sat(T * 8, 24));
    if (opt->with_choices) per_row = bt_add_sat(per_row, bt_mul_sat(T, 8 * MANIFEST_N_CHOICES) + 4);
    int slots = opt->prefetch ? opt->prefetch : 2 * opt->num_workers;
    uint64_t total = bt_mul_sat(bt_mul_sat(per_row, B), (uint64_t)(slots > 0 ? slots : 1));
    uint64_t cache = bt_mul_sat(row, n_records);
    if (cache > opt->cache_bytes) cache = opt->cache_bytes;
    total = bt_add_sat(total, cache);
    uint64_t per_worker = bt_add_sat(image_work_bytes(img), bt_mul_sat(n_records, 16));
    return bt_add_sat(total, bt_mul_sat(per_worker, (uint64_t)(opt->num_workers > 0 ? opt->num_workers : 1)));
}

/* Longer than ~120 lines on purpose: the options are checked one by one (each with its
 * message), the memory check runs before any allocation, then the loader, its sampler, ring
 * and workers are set up in that order, each with its own error path. */
bt_status loader_init(loader **out, const manifest *m, const tokenizer *tok,
                      const image_preprocess_config *img, const loader_options *opt) {
    *out = NULL;
    if (opt->num_workers < 1 || opt->num_workers > 256)
        return bt_fail(BT_ERR_ARG, "loader: num_workers = %d, expected 1..256", opt->num_workers);
    /* data.prefetch is at most 1024; bt-train asks for gradient_accumulation_steps (up to
     * 2^20) + workers slots, bounded by the memory check below */
    if (opt->prefetch < 0 || opt->prefetch > (1 << 20) + 256)
        return bt_fail(BT_ERR_ARG, "loader: prefetch = %d, expected 0..%d", opt->prefetch,
                       (1 << 20) + 256);
    if (opt->max_length < 2 || opt->max_length > 1 << 20)
        return bt_fail(BT_ERR_ARG, "loader: max_length = %d, expected >= 2", opt->max_length);
    if (opt->pixel_dtype != BT_DTYPE_F32 && opt->pixel_dtype != BT_DTYPE_BF16)
        return bt_fail(BT_ERR_ARG, "loader: pixel dtype %s, expected F32 or BF16",
                       bt_dtype_name(opt->pixel_dtype));
    if (opt->max_epochs < 0)
        return bt_fail(BT_ERR_ARG, "loader: max_epochs = %" PRId64 ", expected >= 0",
                       opt->max_epochs);
    bt_status st = image_preprocess_config_validate(img, "loader image config");
    if (st) return st;
    {
        char what[600];
        int slots = opt->prefetch ? opt->prefetch : 2 * opt->num_workers;
        snprintf(what, sizeof what,
                 "the data loader (%d batches of %d rows, %d tokens, %dx%d %s images, %d "
                 "workers)", slots, opt->batch_size, opt->max_length, img->crop_size,
                 img->crop_size, bt_dtype_name(opt->pixel_dtype), opt->num_workers);
        st = bt_mem_check(loader_estimate_bytes(m->n, img, opt), what,
                          "the batch size, the prefetch depth, the number of workers, the "
                          "image cache or the image size (preprocessor_config.json)");
        if (st) return st;
    }

    loader *l = calloc(1, sizeof *l);
    if (!l) return bt_fail(BT_ERR_NOMEM, "loader: out of memory");
    /* From here on loader_free releases whatever part is set up. */
    pthread_mutex_init(&l->mu, NULL);
    pthread_mutex_init(&l->cache_mu, NULL);
    pthread_cond_init(&l->work, NULL);
    pthread_cond_init(&l->ready, NULL);
    l->m = m;
    l->tok = tok;
    l->img = img;
    l->opt = *opt;
    sampler_options so = sampler_opts(opt, m);
    if ((st = sampler_init(&l->smp, (int64_t)m->n, &so))) {
        sampler_free(&l->smp);
        free(l);
        return bt_fail_context(st, "loader");
    }
    l->num_batches = l->smp.num_batches;
    if (l->num_batches < 1) {
        st = bt_fail(BT_ERR_ARG, "%s: rank %d of %d gets %" PRId64 " records, no batch of %d (%s)",
                     m->path, opt->rank, opt->world_size, l->smp.num_samples, opt->batch_size,
                     opt->drop_last_batch ? "drop_last_batch drops it" : "dataset too small");
        sampler_free(&l->smp);
        free(l);
        return st;
    }
    if ((st = sampler_seek(&l->smp, opt->start))) {
        sampler_free(&l->smp);
        free(l);
        return bt_fail_context(st, "loader start");
    }
    int64_t B = opt->batch_size;
    /* Epoch counts stay far from int64 overflow of epoch * num_batches. */
    int64_t max_epoch = INT64_MAX / 2 / l->num_batches;
    if (opt->start.epoch > max_epoch || opt->max_epochs > max_epoch) {
        sampler_free(&l->smp);
        free(l);
        return bt_fail(BT_ERR_ARG, "loader: epoch %" PRId64 " out of range (max %" PRId64 ")",
                       opt->start.epoch > opt->max_epochs ? opt->start.epoch : opt->max_epochs,
                       max_epoch);
    }
    /* A position past the last batch (the end of the epoch, or the dropped partial batch)
     * starts the next epoch. */
    int64_t k0 = (opt->start.position + B - 1) / B;
    if (k0 > l->num_batches) k0 = l->num_batches;
    l->start_seq = opt->start.epoch * l->num_batches + k0;
    l->end_seq = opt->max_epochs ? opt->max_epochs * l->num_batches : INT64_MAX;
    if (l->start_seq > l->end_seq) l->start_seq = l->end_seq;
    l->next_claim = l->next_deliver = l->start_seq;
    l->failed_seq = INT64_MAX;

    size_t R = (size_t)img->crop_size;
    l->row_pixels = 3 * R * R;
    l->row_bytes = l->row_pixels * bt_dtype_size(opt->pixel_dtype);
    if (opt->with_choices)
        for (size_t i = 0; i < m->n && !l->has_choices; i++)
            l->has_choices = manifest_has_choices(m, i);

    l->bad = calloc(m->n, sizeof *l->bad);
    if (!l->bad) goto oom;
    if (opt->cache_bytes >= l->row_bytes) {
        size_t max_entries = opt->cache_bytes / l->row_bytes;
        if (max_entries > m->n) max_entries = m->n;
        size_t cap = 16;
        while (cap < 2 * max_entries + 2)
            cap *= 2;
        l->cache = calloc(cap, sizeof *l->cache);
        if (!l->cache) goto oom;
        l->cache_cap = cap;
    }

    int n_slots = opt->prefetch ? opt->prefetch : 2 * opt->num_workers;
    l->slots = calloc((size_t)n_slots, sizeof *l->slots);
    if (!l->slots) goto oom;
    l->n_slots = n_slots;
    for (int i = 0; i < l->n_slots; i++)
        if (batch_alloc(l, &l->slots[i].batch) != 0) goto oom;

    l->workers = calloc((size_t)opt->num_workers, sizeof *l->workers);
    if (!l->workers) goto oom;
    l->n_workers = opt->num_workers;
    for (int i = 0; i < l->n_workers; i++) {
        worker *w = &l->workers[i];
        w->l = l;
        w->epoch = -1;
        w->perm = malloc(m->n * sizeof *w->perm);
        w->list = malloc(((size_t)l->smp.num_samples + 1) * sizeof *w->list);
        if (!w->perm || !w->list) goto oom;
    }
    for (int i = 0; i < l->n_workers; i++) {
        if (pthread_create(&l->workers[i].thread, NULL, worker_main, &l->workers[i]) != 0) {
            loader_free(l);
            return bt_fail(BT_ERR_NOMEM, "loader: cannot start worker thread %d", i);
        }
        l->workers[i].started = 1;
    }
    *out = l;
    return BT_OK;
oom:
    loader_free(l);
    return bt_fail(BT_ERR_NOMEM, "%s: out of memory setting up the data loader (batch %d, "
                   "%d tokens); reduce the batch size, the prefetch depth or the workers",
                   m->path, opt->batch_size, opt->max_length);
}

void loader_free(loader *l) {
    if (!l) return;
    pthread_mutex_lock(&l->mu);
    atomic_store(&l->shutdown, 1);
    pthread_cond_broadcast(&l->work);
    pthread_cond_broadcast(&l->ready);
    pthread_mutex_unlock(&l->mu);
    for (int i = 0; i < l->n_workers; i++) {
        if (l->workers[i].started) pthread_join(l->workers[i].thread, NULL);
        free(l->workers[i].perm);
        free(l->workers[i].list);
    }
    free(l->workers);
    for (int i = 0; i < l->n_slots; i++) {
        batch_free(&l->slots[i].batch);
        free(l->slots[i].err_msg);
    }
    free(l->slots);
    for (size_t i = 0; i < l->cache_cap; i++)
        bt_free(l->cache[i].pixels);
    free(l->cache);
    for (size_t i = 0; i < l->n_problems; i++)
        free(l->problems[i]);
    free(l->problems);
    free((void *)l->bad);
    sampler_free(&l->smp);
    pthread_mutex_destroy(&l->mu);
    pthread_mutex_destroy(&l->cache_mu);
    pthread_cond_destroy(&l->work);
    pthread_cond_destroy(&l->ready);
    free(l);
}

/* ---- consumer ---------------------------------------------------------------------------- */

bt_status loader_next(loader *l, loader_batch **batch) {
    *batch = NULL;
    pthread_mutex_lock(&l->mu);
    int64_t s = l->next_deliver;
    if (s >= l->end_seq) {
        pthread_mutex_unlock(&l->mu);
        return BT_OK;
    }
    slot *sl = &l->slots[s % l->n_slots];
    BT_ASSERTF(sl->state != SLOT_HELD,
               "loader_next: all %d prefetch slots are held; release batches first", l->n_slots);
    double t0 = bt_now_s();
    int waited = 0;
    while (!((sl->state == SLOT_READY || sl->state == SLOT_FAILED) && sl->batch.seq == s)) {
        pthread_cond_wait(&l->ready, &l->mu);
        waited = 1;
    }
    if (waited) l->wait_seconds += bt_now_s() - t0;
    if (sl->state == SLOT_FAILED) {
        bt_status st = sl->err;
        bt_error_set_message(sl->err_msg);
        pthread_mutex_unlock(&l->mu);
        return st;
    }
    sl->state = SLOT_HELD;
    l->next_deliver++;
    l->delivered++;
    *batch = &sl->batch;
    pthread_mutex_unlock(&l->mu);
    return BT_OK;
}

void loader_release(loader *l, loader_batch *batch) {
    if (!batch) return;
    pthread_mutex_lock(&l->mu);
    slot *sl = &l->slots[batch->seq % l->n_slots];
    BT_ASSERTF(&sl->batch == batch && sl->state == SLOT_HELD,
               "loader_release: batch %" PRId64 " is not held", batch->seq);
    sl->state = SLOT_FREE;
    pthread_cond_broadcast(&l->work);
    pthread_mutex_unlock(&l->mu);
}

sampler_cursor loader_cursor(const loader *l) {
    loader *ml = (loader *)l; /* the lock is not part of the logical state */
    pthread_mutex_lock(&ml->mu);
    int64_t s = l->next_deliver;
    pthread_mutex_unlock(&ml->mu);
    sampler_cursor c = {s / l->num_batches, (s % l->num_batches) * l->opt.batch_size};
    return c;
}

cJSON *loader_cursor_to_json(const loader *l) {
    return sampler_cursor_to_json(&l->smp, loader_cursor(l));
}

int64_t loader_num_batches(const loader *l) {
    return l->num_batches;
}

void loader_get_stats(loader *l, loader_stats *s) {
    pthread_mutex_lock(&l->mu);
    s->delivered = l->delivered;
    s->wait_seconds = l->wait_seconds;
    pthread_mutex_unlock(&l->mu);
    s->replaced = atomic_load(&l->replaced);
    s->bad_records = atomic_load(&l->bad_records);
    s->cache_hits = atomic_load(&l->cache_hits);
    s->cache_misses = atomic_load(&l->cache_misses);
    pthread_mutex_lock(&l->cache_mu);
    s->cache_entries = l->cache_entries;
    s->cache_bytes = l->cache_used;
    pthread_mutex_unlock(&l->cache_mu);
}

size_t loader_drain_problems(loader *l, void (*fn)(const char *msg, void *ctx), void *ctx) {
    pthread_mutex_lock(&l->mu);
    size_t from = l->problems_drained, to = l->n_problems;
    l->problems_drained = to;
    pthread_mutex_unlock(&l->mu);
    /* Entries below n_problems are never modified again; the array may be reallocated by a
     * worker meanwhile, so re-read the pointer under the lock for each message. */
    for (size_t i = from; i < to; i++) {
        pthread_mutex_lock(&l->mu);
        char *msg = l->problems[i];
        pthread_mutex_unlock(&l->mu);
        if (fn) fn(msg, ctx);
    }
    return to - from;
}
