/* rng.h: the one pseudo-random generator of bt, shared by every subsystem that draws random
 * numbers (parameter init, the sampler's permutations, the synthetic dataset, dropout seeds,
 * tests), so each documented sequence has a single implementation.
 *
 * - bt_mix64: splitmix64's output function (a 64-bit bijective finalizer), used alone to
 *   derive keys (dropout seeds).
 * - bt_splitmix64: one splitmix64 step: state += 0x9E3779B97F4A7C15, return bt_mix64(state).
 * - bt_rng: xoshiro256** whose four state words are four successive bt_splitmix64 outputs
 *   of the seed (docs/data.md spells it out so other implementations can reproduce it).
 *
 * Sequences are part of bt's contract: sampler orders, synthetic data and initial weights
 * depend on them bit for bit, so any change here changes those outputs.
 *
 * Deliberately not here: torch's generators (bt does not reproduce them), floating-point
 * distributions beyond the uniform (callers own their Box-Muller and ranges), thread safety
 * (one bt_rng per stream). */
#ifndef BT_RNG_H
#define BT_RNG_H

#include <stddef.h>
#include <stdint.h>

typedef struct bt_rng {
    uint64_t s[4]; /* xoshiro256** state */
} bt_rng;

/* splitmix64's finalizer: z ^= z >> 30; z *= C1; z ^= z >> 27; z *= C2; z ^ z >> 31. */
uint64_t bt_mix64(uint64_t z);
/* One splitmix64 step: advances *state by the golden-ratio increment, returns its mix. */
uint64_t bt_splitmix64(uint64_t *state);
/* s[0..3] = four successive bt_splitmix64 outputs starting from state = seed. */
void bt_rng_seed(bt_rng *r, uint64_t seed);
/* Next 64 bits of xoshiro256**. */
uint64_t bt_rng_next(bt_rng *r);
/* Uniform integer in [0, bound) (bound >= 1), without modulo bias (Lemire's method). */
uint64_t bt_rng_below(bt_rng *r, uint64_t bound);
/* Uniform double in [0, 1) with 53 random bits: (next >> 11) * 2^-53. */
double bt_rng_uniform(bt_rng *r);

/* A 64-bit content hash of n bytes (8-byte words through bt_mix64, then the tail), chained
 * by seed: equality keys (duplicate images / captions) and consistency checks across MPI
 * ranks. Not cryptographic. */
uint64_t bt_hash_bytes(const void *data, size_t n, uint64_t seed);

#endif
