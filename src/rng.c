/* rng.c: splitmix64 and xoshiro256** (see rng.h for the contract; docs/data.md for the
 * written definition). */
#include "rng.h"

#include <string.h>

#include "status.h"

uint64_t bt_mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

uint64_t bt_splitmix64(uint64_t *state) {
    return bt_mix64(*state += 0x9E3779B97F4A7C15ull);
}

void bt_rng_seed(bt_rng *r, uint64_t seed) {
    uint64_t st = seed;
    for (int i = 0; i < 4; i++)
        r->s[i] = bt_splitmix64(&st);
}

static inline uint64_t rotl64(uint64_t x, int k) {
    return (x << k) | (x >> (64 - k));
}

uint64_t bt_rng_next(bt_rng *r) {
    uint64_t *s = r->s;
    uint64_t result = rotl64(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl64(s[3], 45);
    return result;
}

uint64_t bt_rng_below(bt_rng *r, uint64_t bound) {
    BT_ASSERT(bound >= 1);
    __extension__ typedef unsigned __int128 u128;
    u128 m = (u128)bt_rng_next(r) * bound;
    uint64_t low = (uint64_t)m;
    if (low < bound) {
        uint64_t threshold = (0 - bound) % bound;
        while (low < threshold) {
            m = (u128)bt_rng_next(r) * bound;
            low = (uint64_t)m;
        }
    }
    return (uint64_t)(m >> 64);
}

double bt_rng_uniform(bt_rng *r) {
    return (double)(bt_rng_next(r) >> 11) * 0x1.0p-53;
}

uint64_t bt_hash_bytes(const void *data, size_t n, uint64_t seed) {
    const unsigned char *p = data;
    uint64_t h = bt_mix64(seed ^ bt_mix64(n ^ UINT64_C(0x9e3779b97f4a7c15)));
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = bt_mix64(h ^ w);
    }
    uint64_t tail = 0;
    memcpy(&tail, p + i, n - i);
    return bt_mix64(h ^ tail);
}
