/* sampler.h: the order in which records are visited, per epoch and per rank.
 *
 * Semantics are PyTorch's DistributedSampler (N records, W ranks, rank r):
 *   drop_last and N % W != 0:  num_samples = ceil((N - W) / W)  (= floor(N / W))
 *   otherwise:                 num_samples = ceil(N / W)
 *   total_size = num_samples * W
 *   perm = shuffle ? permutation(seed, epoch) : 0, 1, ..., N-1
 *   pad (not drop_last): perm is extended by repeating it from the start to total_size
 *   drop_last:           perm is cut to total_size
 *   rank r takes positions r, r+W, r+2W, ... of that list (num_samples of them)
 * so rank r's i-th index is perm[(r + i*W) mod N]. Batches are consecutive runs of
 * batch_size indices of the rank's list; the last one is partial (drop_last_batch = 0, as
 * PyTorch's DataLoader) or dropped (drop_last_batch = 1). With padding every rank has the
 * same number of samples, hence the same batch sizes, step by step.
 *
 * The permutation is not torch.randperm (its generator is not reproduced): it is the
 * Fisher-Yates shuffle driven by xoshiro256** seeded from (seed, epoch) through splitmix64,
 * spelled out in docs/data.md so another implementation can reproduce it bit for bit.
 *
 * The cursor is (epoch, position): the epoch being read and how many of this rank's indices
 * were already handed out. It is saved as JSON together with the settings it depends on; a
 * restore checks them, so a resumed run yields exactly the batches an uninterrupted run
 * would.
 *
 * Deliberately not here: reading records (loader.h), any notion of validity of a record. */
#ifndef BT_DATA_SAMPLER_H
#define BT_DATA_SAMPLER_H

#include <stdint.h>

#include "status.h"

struct cJSON;

typedef struct sampler_options {
    uint64_t seed;
    int rank, world_size; /* 0 <= rank < world_size */
    int batch_size;       /* per rank, >= 1 */
    int shuffle;          /* 0: dataset order (evaluation) */
    int drop_last;        /* DistributedSampler's drop_last: cut instead of pad */
    int drop_last_batch;  /* DataLoader's drop_last: drop the final partial batch */
    /* WebDataset shards (n_shards > 0): records come in shards, shard s holding records
     * [shard_first[s], shard_first[s + 1]); the rank's list is the shard stream below. */
    int64_t n_shards;
    const int64_t *shard_first; /* (n_shards + 1), borrowed; shard_first[n_shards] = N */
    int64_t shuffle_buffer;     /* samples in the shuffle buffer; <= 1: none */
} sampler_options;

typedef struct sampler_cursor {
    int64_t epoch;
    int64_t position; /* indices of this rank's list already handed out, 0..num_samples */
} sampler_cursor;

typedef struct sampler {
    sampler_options opt;
    int64_t n;           /* dataset size N */
    int64_t num_samples; /* per rank */
    int64_t total_size;  /* num_samples * world_size */
    int64_t num_batches; /* per rank per epoch */
    sampler_cursor cur;
    int64_t *perm;      /* (N) permutation of cur.epoch (shard mode: scratch) */
    int64_t perm_epoch; /* epoch perm holds, -1 for none */
    int64_t *list;      /* shard mode: (num_samples) this rank's list of cur.epoch */
    int64_t *shard_ids; /* shard mode: (n_live) the shards holding at least one record */
    int64_t n_live;
} sampler;

/* Errors (BT_ERR_ARG): n < 1, world_size < 1, rank outside 0..world_size-1, batch_size < 1;
 * shard mode: fewer non-empty shards than ranks. Starts at epoch 0, position 0. */
bt_status sampler_init(sampler *s, int64_t n, const sampler_options *opt);
void sampler_free(sampler *s);

/* Moves to the start of `epoch` (like DistributedSampler.set_epoch + a fresh iterator). */
void sampler_set_epoch(sampler *s, int64_t epoch);

/* Next batch of the current epoch: writes up to batch_size record indices into out
 * (batch_size), returns how many (0 when the epoch is over; call sampler_set_epoch). */
int sampler_next_batch(sampler *s, int64_t *out);

/* Pure helpers (no cursor): the permutation of `epoch` into perm (N), and rank's list into
 * out (num_samples) computed from such a permutation. */
void sampler_permutation(const sampler *s, int64_t epoch, int64_t *perm);
void sampler_rank_indices(const sampler *s, const int64_t *perm, int64_t *out);
/* This rank's list for `epoch` (num_samples indices) into out, using scratch (N) as work
 * space: sampler_permutation + sampler_rank_indices, or in shard mode the shard stream:
 *   order  = the non-empty shards, permuted by permutation(seed, epoch) over their count
 *            when shuffle (the same generator as records), else in source order
 *   stream = the records of shards order[r], order[r + W], order[r + 2W], ... each shard's
 *            records in archive order
 *   buffer = (shuffle and shuffle_buffer > 1) stream through a buffer of B samples: the first
 *            B fill it; each later sample swaps with slot j = below(B), the evicted one is
 *            emitted; at the end slots are emitted by j = below(count), each replaced by the
 *            last; the generator is xoshiro256** seeded with k2 ^ epoch ^ (rank << 32), k2 the
 *            second splitmix64 output of the seed
 *   list   = the buffered stream repeated from its start up to num_samples, or cut there. */
void sampler_epoch_list(const sampler *s, int64_t epoch, int64_t *scratch, int64_t *out);
/* Size of batch k (0..num_batches-1) of an epoch; its indices are the rank list's
 * [k*batch_size, k*batch_size + size). */
int sampler_batch_size_at(const sampler *s, int64_t k);

/* The cursor as a JSON object {"epoch", "position", "seed", "dataset_size", "world_size",
 * "batch_size", "shuffle", "drop_last", "drop_last_batch"}, plus "shards" and
 * "shuffle_buffer" in shard mode (caller owns it). The seed is a
 * number when it is below 2^53, a decimal string otherwise (JSON numbers are doubles). */
struct cJSON *sampler_cursor_to_json(const sampler *s, sampler_cursor c);
/* Parses such an object and checks it against this sampler's settings: any difference is an
 * error naming the key ("cursor: 'world_size' is 4, this run has 2"); `what` names the file
 * or context for messages. position must be a batch boundary or the end of the epoch. */
bt_status sampler_cursor_from_json(const sampler *s, const struct cJSON *j, const char *what,
                                   sampler_cursor *out);
/* Positions the sampler at c (validated as above). */
bt_status sampler_seek(sampler *s, sampler_cursor c);

#endif
