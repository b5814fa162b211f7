/* dist/dist_common.c: the parts of dist.h that need no MPI, the same in both builds
 * (dist_mpi.c, dist_single.c): whether a launcher started us, host names, the start-check
 * hashes, and the bucket / block / shard layout every rank computes alike.
 *
 * Deliberately not here: anything that talks to another rank. */
#include "dist/dist_common.h"

#include <stdio.h>
#include <string.h>

#include "rng.h"
#include "settings.h"

/* a launcher's environment: Open MPI (mpirun / prterun), PMIx, PMI (srun, hydra) */
int bt_dist_launched(void) {
    static const bt_setting vars[] = {BT_SET_OMPI_COMM_WORLD_SIZE, BT_SET_PMIX_RANK,
                                      BT_SET_PMI_RANK, BT_SET_PMI_SIZE};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++)
        if (bt_setting_value(vars[i])) return 1;
    return 0;
}

const char *bt_dist_host_of(const bt_dist *d, int r) {
    if (d->hosts && r >= 0 && r < d->size) return d->hosts + (size_t)r * sizeof d->host;
    return r == d->rank ? d->host : "?";
}

uint64_t bt_dist_hash(const void *data, size_t n, uint64_t seed) {
    return bt_hash_bytes(data, n, seed); /* rng.h */
}

uint64_t bt_dist_binary_hash(void) {
    FILE *f = fopen("/proc/self/exe", "rb");
    if (!f) return 0;
    unsigned char buf[1 << 16];
    uint64_t h = 0;
    size_t got;
    while ((got = fread(buf, 1, sizeof buf, f)) > 0) h = bt_dist_hash(buf, got, h);
    fclose(f);
    return h;
}

/* --- reducer ------------------------------------------------------------------------------ */

size_t bt_dist_bucket_floats(size_t n, size_t bucket_bytes) {
    size_t b = bucket_bytes ? bucket_bytes / sizeof(float) : n;
    if (b < 1) b = 1;
    if (b > (size_t)0x7fffffff) b = (size_t)0x7fffffff;
    return b;
}

size_t bt_dist_block(size_t c, int size, int rank, size_t *lo) {
    const size_t blk = (c + (size_t)size - 1) / (size_t)size;
    const size_t a = (size_t)rank * blk < c ? (size_t)rank * blk : c;
    const size_t b = a + blk < c ? a + blk : c;
    *lo = a;
    return b - a;
}

size_t bt_dist_shard_ranges(size_t n, size_t bucket, int size, int rank, size_t *lohi) {
    size_t k = 0;
    for (size_t o = 0; o < n; o += bucket) {
        const size_t c = n - o < bucket ? n - o : bucket;
        size_t lo;
        const size_t len = bt_dist_block(c, size, rank, &lo);
        if (!len) continue;
        if (lohi) {
            lohi[2 * k] = o + lo;
            lohi[2 * k + 1] = o + lo + len;
        }
        k++;
    }
    return k;
}

void dist_reducer_layout(bt_dist_reducer *r, const bt_dist *d, float *arena, size_t n,
                         size_t bucket_bytes) {
    memset(r, 0, sizeof *r);
    r->d = d;
    r->arena = arena;
    r->n = n;
    r->bucket = bt_dist_bucket_floats(n, bucket_bytes);
    r->n_buckets = n ? (n + r->bucket - 1) / r->bucket : 0;
}
