/* loader.h: the multi-threaded prefetching data loader.
 *
 * `num_workers` pthreads read, decode (image.h), preprocess and tokenize (tokenizer.h) whole
 * batches into a ring of `prefetch` pre-allocated batch slots, ahead of the compute. The main
 * thread only takes the next ready slot (loader_next) and hands it back (loader_release).
 *
 * WebDataset shards (manifest.shards): the same machinery with the sampler's shard mode
 * (sampler.h: whole shards per rank, a sample shuffle buffer); each worker still fills whole
 * batches, reading the image members in place (shards.h). No two workers or ranks read the same
 * sample slot of an epoch, and delivery order stays a pure function of seq.
 *
 * Order: batches form one stream numbered by seq = epoch * num_batches + k (k = batch of the
 * epoch), across epoch boundaries. A worker claims the lowest unclaimed seq whose ring slot is
 * free and fills it from the sampler's indices for (epoch, k) (sampler.h: shuffle from
 * (seed, epoch), DistributedSampler sharding by rank/world_size); loader_next delivers seqs in
 * order. A slot's content is a pure function of seq, so the bytes delivered do not depend on
 * num_workers, prefetch or timing.
 *
 * Resume: loader_cursor() is (epoch, position) after the last batch loader_next returned;
 * store loader_cursor_to_json() with a checkpoint, parse it with loader_cursor_from_json()
 * and pass it as options.start: the resumed loader delivers exactly the batches the
 * uninterrupted one would have.
 *
 * Bad records (image missing, unreadable or corrupt; caption that cannot be tokenized) are
 * reported as "manifest:line: <problem>", for shards "shard: sample 'key': <problem>" (the
 * image path is inside the problem):
 *   on_error STOP: loader_next returns the error with that message, at the batch that holds
 *                  the record; the loader then only returns that error.
 *   on_error SKIP: the record is replaced by the next valid record in dataset order
 *                  (index+1, index+2, ... mod N; deterministic), each replacement is counted
 *                  (stats.replaced) and each distinct bad record is reported once
 *                  (loader_drain_problems). A dataset with no valid record is an error.
 * Workers never exit the process and never block forever: loader_free stops them mid-epoch
 * (between records) and joins them.
 *
 * Image cache (cache_bytes > 0): preprocessed pixels in the output dtype, keyed by the
 * resolved image path, filled until the byte budget is reached and never evicted (the New
 * Yorker set repeats ~700 cartoons across thousands of records; a fixed budget keeps the
 * memory bound explicit). Hits are copies of bytes the same code produced, so caching never
 * changes what is delivered.
 *
 * Deliberately not here: random augmentation, variable-size images (every image is centre-
 * cropped to crop_size, so no pixel_mask is needed), MLM masking (the trainer masks
 * input_ids), GPU pinned memory (CPU engine: slots are 64-byte aligned host buffers). */
#ifndef BT_DATA_LOADER_H
#define BT_DATA_LOADER_H

#include <stddef.h>
#include <stdint.h>

#include "data/image.h"
#include "data/manifest.h"
#include "data/sampler.h"
#include "data/tokenizer.h"
#include "dtype.h"
#include "status.h"

struct cJSON;

typedef struct loader_options {
    int num_workers; /* >= 1 */
    int prefetch;    /* ring slots, >= 1; 0: 2 * num_workers */
    /* sampling (sampler.h) */
    uint64_t seed;
    int rank, world_size;
    int batch_size; /* per rank */
    int shuffle, drop_last, drop_last_batch;
    int64_t max_epochs;   /* deliver epochs < max_epochs, then end (0: never end) */
    int64_t shuffle_buffer; /* WebDataset shards: sample shuffle buffer (sampler.h) */
    sampler_cursor start; /* first batch delivered: (epoch, position) */
    /* outputs */
    int max_length;       /* T: every caption (and choice) padded/truncated to it, >= 2 */
    bt_dtype pixel_dtype; /* BT_DTYPE_F32 or BT_DTYPE_BF16 */
    int with_choices;     /* tokenize caption_choices when the manifest has them */
    size_t cache_bytes;   /* 0: no image cache */
    manifest_error_policy on_error;
} loader_options;

/* One worker, prefetch 2*workers, batch 1, world 1, T = 40, fp32, shuffle on (shard buffer
 * 1000), no cache, on_error STOP, start (0, 0), max_epochs 0. */
loader_options loader_options_default(void);

typedef struct loader_batch {
    int64_t seq;          /* epoch * num_batches + index */
    int64_t epoch, index; /* which batch of which epoch */
    int size;             /* valid rows, <= capacity (the last batch may be partial) */
    int capacity;         /* B */
    int max_length;       /* T */
    int image_size;       /* R (crop_size) */
    bt_dtype pixel_dtype;
    void *pixel_values;      /* (B, 3, R, R) fp32 or bf16; rows >= size are zero */
    int32_t *input_ids;      /* (B, T); rows >= size are <pad> */
    int32_t *attention_mask; /* (B, T); rows >= size are 0 */
    int64_t *sampled;        /* (B) record index the sampler chose, -1 past size */
    int64_t *record;         /* (B) record actually delivered (differs when replaced) */
    const char **ids;        /* (B) manifest id or NULL (points into the manifest) */
    int has_choices;         /* choice arrays below are filled */
    int32_t *choice_ids;     /* (B, 5, T); rows of records without choices are <pad> */
    int32_t *choice_mask;    /* (B, 5, T) */
    int32_t *labels;         /* (B) 0..4, -1 when the record has none */
} loader_batch;

typedef struct loader_stats {
    int64_t delivered;   /* batches returned by loader_next */
    int64_t replaced;    /* rows whose sampled record was bad and got replaced */
    int64_t bad_records; /* distinct bad records found */
    int64_t cache_hits, cache_misses, cache_entries;
    size_t cache_bytes;  /* bytes of pixels held */
    double wait_seconds; /* time loader_next spent waiting for workers */
} loader_stats;

typedef struct loader loader;

/* Bytes loader_init allocates for these options over n_records records (batch slots, the
 * image cache at its cap, each worker's image working set and sampler lists), for memory
 * plans; loader_init checks it against available memory (src/mem.h) before allocating. */
uint64_t loader_estimate_bytes(size_t n_records, const image_preprocess_config *img,
                               const loader_options *opt);

/* Validates the options against the manifest and starts the workers. m, tok and img must
 * outlive the loader. Errors: bad options (BT_ERR_ARG naming the option), a rank that gets
 * no full batch, a start cursor outside the epoch, BT_ERR_NOMEM when the estimate above
 * exceeds available memory (the message says what to reduce). */
bt_status loader_init(loader **out, const manifest *m, const tokenizer *tok,
                      const image_preprocess_config *img, const loader_options *opt);

/* Next batch in order, waiting for it if needed. *batch = NULL when max_epochs are done.
 * On a record error under STOP (or no valid record at all) returns the error with the
 * message "manifest:line: ..."; every later call returns it again. At most prefetch batches
 * may be held (not yet released) at once; asking for more is a programming error. */
bt_status loader_next(loader *l, loader_batch **batch);
/* Returns a batch's slot to the workers; the batch must not be used afterwards. */
void loader_release(loader *l, loader_batch *batch);

/* Position after the last delivered batch. */
sampler_cursor loader_cursor(const loader *l);
/* loader_cursor as JSON (sampler.h format); caller owns it. */
struct cJSON *loader_cursor_to_json(const loader *l);
/* Parses and checks a saved cursor against the options and dataset (size, shards) this loader
 * would run with (an error names the key that differs); use the result as options.start. */
bt_status loader_cursor_from_json(const loader_options *opt, const manifest *m,
                                  const struct cJSON *j, const char *what, sampler_cursor *out);

/* Batches per epoch for this rank. */
int64_t loader_num_batches(const loader *l);
void loader_get_stats(loader *l, loader_stats *s);
/* Calls fn once for each problem reported since the previous drain, in the order found
 * (which varies with timing when num_workers > 1; the set does not). Returns how many. */
size_t loader_drain_problems(loader *l, void (*fn)(const char *msg, void *ctx), void *ctx);

/* Stops the workers (mid-epoch is fine), joins them and frees everything. NULL is a no-op. */
void loader_free(loader *l);

#endif
