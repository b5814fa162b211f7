/* dist/dist.h: data parallelism over Open MPI (docs/distributed.md): the world, the start
 * checks, and the few collectives the training step needs.
 *
 * World. bt_dist_init calls MPI_Init only when a launcher started the process (mpirun /
 * orterun / prterun / srun: one of OMPI_COMM_WORLD_SIZE, PMIX_RANK, PMI_RANK, PMI_SIZE is
 * set). Without a launcher it makes the world of one process without touching MPI, so
 * `bt-train` alone needs no MPI runtime (no daemon, no network, no singleton start), and
 * every collective below is then a local copy or a no-op. A build without MPI (meson
 * -Dmpi=disabled) is world size 1 always; under a launcher with size > 1 its init fails
 * with a message saying so.
 *
 * Failures (MPI_Abort semantics): MPI_COMM_WORLD keeps MPI_ERRORS_ARE_FATAL, so a failed
 * collective or a peer that died (Open MPI's runtime notices a process that exits without
 * MPI_Finalize and kills the job) ends every rank; a bt error on one rank is reported with
 * bt_dist_abort, which prints "bt-train: rank R of N: <message>" to stderr and calls
 * MPI_Abort, so the others stop within the runtime's kill delay instead of waiting in a
 * collective. Errors that every rank sees alike (a config that does not resolve, a
 * mismatch found by bt_dist_check_same) return normally on every rank. A rank that stops
 * answering (stopped, hung, a cut link) is caught by the collective timeout
 * (bt_dist_set_timeout below: dist.timeout_s).
 *
 * Gradients: bt_dist_reducer averages a flat fp32 arena in buckets of a fixed byte size,
 * each bucket one MPI_Iallreduce (sum; with the bf16 wire an all-to-all, an fp32 sum and an
 * all-gather: bt_dist_reducer_init), then scales by 1/world. Buckets are launched by
 * bt_dist_reducer_start (all of them, or a range as soon as its tensors are final) and
 * waited for by bt_dist_reducer_finish, which reports the seconds it waited (the exposed
 * communication time).
 *
 * ZeRO-1 (optimizer-state sharding, docs/distributed.md): a sharded reducer cuts every
 * bucket into `size` blocks (bt_dist_block) and rank q owns block q of each bucket; its
 * buckets are MPI_Ireduce_scatter'ed instead of all-reduced, so each rank ends with the
 * averaged gradients of its own blocks only, and bt_dist_reducer_allgather puts the blocks
 * of the updated weights back together on every rank. Same launch API, same bucket order.
 *
 * Deliberately not here: the training step's use of these (train/step.c), loss math, the
 * launch (mpirun), which optimizer state a rank keeps (train/optim.c). */
#ifndef BT_DIST_DIST_H
#define BT_DIST_DIST_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

typedef struct bt_dist {
    int rank, size;
    int mpi;        /* 1: MPI_Init was called by bt_dist_init (finalize calls MPI_Finalize) */
    int multiple;   /* 1: MPI_THREAD_MULTIPLE (the reducer's progress thread may run) */
    int threads_ok; /* 1: MPI_THREAD_MULTIPLE provided (the watchdog may ask the other ranks) */
    char host[64];  /* this process's host name (messages) */
    char *hosts;    /* (size x 64) every rank's host name (all-gathered by bt_dist_init) */
    /* test hook (bt-train --test-hook dist_sleep=RANK:CONTEXT:SECONDS; tests/test_dist.c):
     * rank test_sleep_rank sleeps test_sleep_s when it enters context test_sleep_ctx */
    int test_sleep_rank;
    char test_sleep_ctx[64];
    double test_sleep_s;
} bt_dist;

/* 1 when a launcher's environment is present (OMPI_COMM_WORLD_SIZE, PMIX_RANK, PMI_RANK or
 * PMI_SIZE): bt_dist_init starts MPI then, and bt-train prints plain lines instead of the
 * live line (docs/outputs.md). */
int bt_dist_launched(void);

/* Starts the world (see above). argc / argv may be NULL. Errors: MPI_Init failed, or a
 * launcher with size > 1 on a build without MPI. */
bt_status bt_dist_init(bt_dist *d, int *argc, char ***argv);
/* MPI_Finalize when MPI was started. */
void bt_dist_finalize(bt_dist *d);
/* 1 when this process is one of several. */
static inline int bt_dist_active(const bt_dist *d) { return d && d->size > 1; }

/* Prints "PROG: rank R of N (HOST): MESSAGE" to stderr and ends the job: MPI_Abort(code)
 * when several ranks run, exit(code) otherwise. */
void bt_dist_abort(const bt_dist *d, const char *prog, const char *message, int code)
    __attribute__((noreturn));

/* --- the collective timeout (dist.timeout_s; docs/distributed.md "Timeout") -------------
 * bt_dist_set_timeout starts a watchdog thread on every rank (collective: every rank calls
 * it at the same point; it duplicates the world communicator for its own messages). Every
 * blocking collective below (and the reducer's finish / all-gather, the point-to-point
 * bt_dist_to_root_f32) then runs with a deadline of `seconds`. When a rank's deadline
 * passes, its watchdog asks every other rank's watchdog where it is (in which collective,
 * or outside them, at which context) and waits min(seconds, 10) s for the answers:
 *   - a rank that does not answer (stopped, hung in the kernel, dead host, cut link) or that
 *     waits in another collective: the watchdog prints "bt-train: rank R of N (HOST): error:
 *     dist.timeout_s (T s) expired in the <operation> of <context>: ..." naming the ranks
 *     and hosts that did not arrive, and calls MPI_Abort (mpirun ends the job);
 *   - every late rank answered from outside any collective (live and busy: rank 0 saving a
 *     checkpoint or evaluating while the others wait in the next step): a warning naming
 *     them, and the deadline moves on by `seconds` (a slow but live rank never trips it);
 *   - every rank arrived and the collective still did not complete: the transport stalled;
 *     the job ends as above.
 * seconds <= 0, one process, or no MPI: no watchdog. Without MPI_THREAD_MULTIPLE the
 * watchdog cannot ask: it ends the job on expiry, naming the operation only. */
void bt_dist_set_timeout(bt_dist *d, double seconds);
/* The context that timeout messages name ("step 12", "the start checks"); printf format.
 * With the test hook set (bt_dist.test_sleep_*), that rank sleeps when it enters that
 * context (a slow but live rank, outside collectives; tests/test_dist.c). */
void bt_dist_set_context(const bt_dist *d, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Names the next collective this thread starts (e.g. "loss all-reduce"); the default is
 * the function's own description. what: a string literal (kept, not copied). */
void bt_dist_name_next(const bt_dist *d, const char *what);

/* MPI_Barrier. */
bt_status bt_dist_barrier(const bt_dist *d);
/* Rank root's n floats into everyone's buf. */
bt_status bt_dist_bcast_f32(const bt_dist *d, float *buf, size_t n, int root);
/* Rank root's n bytes into everyone's buf. */
bt_status bt_dist_bcast_bytes(const bt_dist *d, void *buf, size_t n, int root);
/* out (size × n bytes) = every rank's n bytes, rank order. */
bt_status bt_dist_allgather_bytes(const bt_dist *d, const void *mine, size_t n, void *out);
/* The host name of rank r (all-gathered at init; "?" when unknown). */
const char *bt_dist_host_of(const bt_dist *d, int r);
/* In place: v[i] = Σ_ranks v[i] (doubles; blocking). */
bt_status bt_dist_sum_f64(const bt_dist *d, double *v, size_t n);
/* out (size × n) = every rank's n int64 values, rank order. */
bt_status bt_dist_allgather_i64(const bt_dist *d, const int64_t *mine, size_t n, int64_t *out);

/* Variable-count gather / reduce-scatter of rows of `width` elements: rank r owns counts[r]
 * rows, sitting at row offset Σ_{q<r} counts[q] of the full (Σ counts, width) array.
 *   allgather: all = every rank's rows (mine = this rank's counts[rank] rows)
 *   reduce_scatter_add: mine += Σ_ranks all[this rank's rows] (floats)
 * counts (size) must be the same on every rank. */
bt_status bt_dist_allgather_rows_f32(const bt_dist *d, const float *mine, float *all,
                                     const int64_t *counts, size_t width);
bt_status bt_dist_allgather_rows_u64(const bt_dist *d, const uint64_t *mine, uint64_t *all,
                                     const int64_t *counts, size_t width);
bt_status bt_dist_reduce_scatter_add_f32(const bt_dist *d, const float *all, float *mine,
                                         const int64_t *counts, size_t width);

/* Start check: every rank passes n_items (name, 64-bit hash) pairs in the same order (e.g.
 * "resolved config", "model shape", "binary"); the hashes are gathered and compared with
 * rank 0's. On a difference every rank returns BT_ERR_CONFIG naming the item and the first
 * rank (and host) that differs, so every rank stops with the same message. */
bt_status bt_dist_check_same(const bt_dist *d, const char *const *names, const uint64_t *hashes,
                             size_t n_items);
/* 64-bit content hash of n bytes (for bt_dist_check_same). */
uint64_t bt_dist_hash(const void *data, size_t n, uint64_t seed);
/* Hash of this process's executable file (/proc/self/exe): the build identity. 0 when it
 * cannot be read. */
uint64_t bt_dist_binary_hash(void);

/* --- bucketed gradient averaging -------------------------------------------------------- */
/* Floats per bucket of an arena of n floats for bucket_bytes (0: one bucket of n), capped at
 * MPI's int count. */
size_t bt_dist_bucket_floats(size_t n, size_t bucket_bytes);
/* ZeRO-1 block of `rank` in a bucket of c floats cut in `size` blocks of ceil(c / size)
 * (the last ones shorter or empty): *lo (offset in the bucket), returns its length. */
size_t bt_dist_block(size_t c, int size, int rank, size_t *lo);
/* The arena ranges rank `rank` owns under ZeRO-1 (its block of every bucket of `bucket`
 * floats, bucket order, empty blocks left out): lohi[2i], lohi[2i+1] = [lo, hi) of range i
 * when lohi != NULL (room for 2 x the bucket count); returns the count. */
size_t bt_dist_shard_ranges(size_t n, size_t bucket, int size, int rank, size_t *lohi);

/* Buckets in flight at once (the oldest is waited for before another is launched). */
#define BT_DIST_MAX_INFLIGHT 4

typedef struct bt_dist_reducer {
    const bt_dist *d;
    float *arena;           /* not owned */
    size_t n;               /* floats */
    size_t bucket;          /* floats per bucket (the last one may be shorter) */
    size_t n_buckets;
    void *requests;         /* (n_buckets) MPI_Request of the bucket's current phase */
    unsigned char *started; /* (n_buckets) 0 idle, 1 in flight (phase 1), 2 done, 3 queued,
                             * 4 bf16 wire: summed, all-gather not launched yet, 5 all-gather
                             * in flight */
    size_t *queue;          /* (n_buckets) queued buckets in the order start queued them */
    size_t n_queue, q_next; /* queued so far / launched so far (launches follow the queue) */
    size_t *seq;            /* (n_buckets) buckets in the order they were launched */
    size_t n_seq, seq_done; /* launched so far / the oldest launched one not waited for */
    size_t seq_p2;          /* bf16 wire: seq[seq_p2] is the next whose all-gather goes out */
    size_t inflight;        /* buckets started and not done */
    /* progress thread (MPI_THREAD_MULTIPLE): launches queued buckets and drives Open MPI's
     * progress (MPI_Test) while the caller computes */
    void *thread;           /* pthread_t *, NULL when not running */
    void *mutex;            /* pthread_mutex_t * */
    volatile int stop;
    uint16_t *stage;        /* (n) bf16 copy on the wire, NULL for fp32 */
    uint16_t *recv;         /* bf16 wire: (n_slots, size, ceil(bucket / size)) receive slots
                             * of the all-to-all: every rank's copy of this rank's block */
    size_t n_slots, slot_len;
    unsigned slots_used;    /* bit s: slot s holds a bucket in flight */
    unsigned char *slot_of; /* (n_buckets) the slot of a bucket in phase 1 */
    void *comm2;            /* MPI_Comm *: the bf16 wire's all-gathers (their own order) */
    /* ZeRO-1 (bt_dist_reducer_init_sharded): reduce-scatter in place, all-gather of blocks */
    int shard;
    size_t shard_n;         /* floats of this rank's blocks (Σ over buckets) */
    int *counts, *displs;   /* (n_buckets, size) block lengths / offsets in the bucket */
    int *rcounts, *rdispls; /* (n_buckets, size) bf16 wire: the all-to-all's receive side */
    double t_wait;          /* seconds waited in the last finish */
} bt_dist_reducer;

/* bucket_bytes 0: one bucket (counted in fp32 bytes either way). wire_bf16: half the bytes on
 * the wire, with one fp32 accumulator per element. Each bucket is rounded to bf16 (round to
 * nearest even) into a staging copy (n bf16 values), cut into `size` blocks (bt_dist_block),
 * and exchanged with MPI_Ialltoallv: rank q receives every rank's bf16 copy of its block q
 * (into a receive slot, at most BT_DIST_MAX_INFLIGHT of them), sums them in fp32 in rank
 * order (x_0 + x_1 + ... + x_{N-1}), rounds the sum to bf16 into its block of the staging
 * copy, and the blocks are all-gathered (MPI_Iallgatherv in place, on a duplicate of the
 * world communicator so that the all-gathers, launched as all-to-alls complete, have an
 * order of their own that is the launch order on every rank); finish widens the staging
 * copy into the arena and scales by 1/size. So every element is rounded to bf16 twice (its
 * gradient on the way out, the sum on the way back) whatever the world size, and the
 * result is the same on every rank and deterministic. The bytes on the wire are those of a
 * ring all-reduce of bf16 (an all-to-all and an all-gather of (N-1)/N of the bucket each).
 * Memory: the staging copy (2 n bytes) and the receive slots (min(BT_DIST_MAX_INFLIGHT,
 * buckets) x size x ceil(bucket / size) x 2 bytes, about 2 x bucket_bytes). */
bt_status bt_dist_reducer_init(bt_dist_reducer *r, const bt_dist *d, float *arena, size_t n,
                               size_t bucket_bytes, int wire_bf16);
/* The same, sharded (ZeRO-1): each bucket is reduce-scattered (MPI_Ireduce_scatter, sum,
 * in place: MPI leaves this rank's block of the sum at the start of the bucket, and finish
 * moves it to the block's place, scaled by 1/size; no receive buffer), so that finish
 * leaves the average over the ranks in this rank's blocks of the arena only (the rest of
 * the arena is scratch afterwards: read it no more). With the bf16 wire the bucket goes
 * through the all-to-all above and the fp32 sum of this rank's block, scaled by 1/size, is
 * its gradient (one bf16 rounding per element, on the way out; no all-gather). World size
 * 1: the plain reducer (a no-op). */
bt_status bt_dist_reducer_init_sharded(bt_dist_reducer *r, const bt_dist *d, float *arena,
                                       size_t n, size_t bucket_bytes, int wire_bf16);
void bt_dist_reducer_free(bt_dist_reducer *r);
/* Launches (MPI_Iallreduce, in place) the buckets that lie wholly inside [lo, hi) floats and
 * are not started yet, at most BT_DIST_MAX_INFLIGHT at a time (memory: Open MPI allocates a
 * temporary per call). With MPI_THREAD_MULTIPLE the buckets are queued and a progress thread
 * launches them and polls them (Open MPI's non-blocking collectives advance only inside MPI
 * calls), so the call returns at once and the communication overlaps what the caller does
 * next; without it the call launches them itself, waiting for the oldest when the window is
 * full. Either way buckets are launched in the order of the start calls (index order
 * within one call), so ranks that make the same calls in the same order issue the same
 * collective sequence (MPI requires it). A no-op for world size 1. */
bt_status bt_dist_reducer_start(bt_dist_reducer *r, size_t lo, size_t hi);
/* Launches what is left, waits for every bucket, scales the arena by 1/size. r->t_wait =
 * the seconds spent waiting. */
bt_status bt_dist_reducer_finish(bt_dist_reducer *r);
/* Sharded reducer: every rank's blocks of `params` (n floats, the arena's layout; fp32
 * always, whatever the wire) to every rank: MPI_Iallgatherv in place per bucket, at most
 * BT_DIST_MAX_INFLIGHT in flight. r->t_wait = its seconds. No-op unsharded or alone. */
bt_status bt_dist_reducer_allgather(bt_dist_reducer *r, float *params);
/* n floats of rank `from`'s buf into rank 0's out (blocking point-to-point; a copy when
 * from is 0). Ranks other than `from` and 0 return at once. */
bt_status bt_dist_to_root_f32(const bt_dist *d, int from, const float *buf, float *out, size_t n);

#endif
