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
    int64_t *perm;      /* (N) permutation of cur.epoch */
    int64_t perm_epoch; /* epoch perm holds, -1 for none */
} sampler;

/* Errors (BT_ERR_ARG): n < 1, world_size < 1, rank outside 0..world_size-1, batch_size < 1.
 * Starts at epoch 0, position 0. */
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
/* Size of batch k (0..num_batches-1) of an epoch; its indices are the rank list's
 * [k*batch_size, k*batch_size + size). */
int sampler_batch_size_at(const sampler *s, int64_t k);

/* The cursor as a JSON object {"epoch", "position", "seed", "dataset_size", "world_size",
 * "batch_size", "shuffle", "drop_last", "drop_last_batch"} (caller owns it). The seed is a
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
