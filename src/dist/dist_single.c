/* dist/dist_single.c: dist.h for a build without MPI (meson -Dmpi=disabled, or no Open MPI
 * found): the world of one process. Collectives are copies or nothing, the reducer averages
 * over one rank (nothing to do), and a launcher that starts more than one process is an error
 * naming the fix.
 *
 * Deliberately not here: the parts both builds share (dist_common.c). */
#include "dist/dist.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dist/dist_common.h"
#include "settings.h"

static int launcher_size(void) {
    const char *s = bt_setting_value(BT_SET_OMPI_COMM_WORLD_SIZE);
    if (!s) s = bt_setting_value(BT_SET_PMI_SIZE);
    return s ? atoi(s) : 1;
}

bt_status bt_dist_init(bt_dist *d, int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    memset(d, 0, sizeof *d);
    d->size = 1;
    if (gethostname(d->host, sizeof d->host - 1) != 0) snprintf(d->host, sizeof d->host, "?");
    if (!bt_dist_launched()) return BT_OK;
    if (launcher_size() > 1)
        return bt_fail(BT_ERR_UNSUPPORTED, "started by an MPI launcher with %d processes, but "
                       "this bt was built without MPI (install libopenmpi-dev and rebuild)",
                       launcher_size());
    return BT_OK;
}

void bt_dist_finalize(bt_dist *d) {
    free(d->hosts);
    d->hosts = NULL;
    d->mpi = 0;
}

void bt_dist_abort(const bt_dist *d, const char *prog, const char *message, int code) {
    (void)d;
    fprintf(stderr, "%s: %s\n", prog, message);
    fflush(stderr);
    fflush(stdout);
    exit(code);
}

void bt_dist_set_context(const bt_dist *d, const char *fmt, ...) {
    (void)d;
    (void)fmt; /* the context names timeouts, and one process has none */
}

void bt_dist_name_next(const bt_dist *d, const char *what) {
    (void)d;
    (void)what;
}

void bt_dist_set_timeout(bt_dist *d, double seconds) {
    (void)d;
    (void)seconds;
}

bt_status bt_dist_barrier(const bt_dist *d) {
    (void)d;
    return BT_OK;
}

bt_status bt_dist_bcast_f32(const bt_dist *d, float *buf, size_t n, int root) {
    (void)d, (void)buf, (void)n, (void)root;
    return BT_OK;
}

bt_status bt_dist_bcast_bytes(const bt_dist *d, void *buf, size_t n, int root) {
    (void)d, (void)buf, (void)n, (void)root;
    return BT_OK;
}

bt_status bt_dist_sum_f64(const bt_dist *d, double *v, size_t n) {
    (void)d, (void)v, (void)n;
    return BT_OK;
}

bt_status bt_dist_allgather_i64(const bt_dist *d, const int64_t *mine, size_t n, int64_t *out) {
    (void)d;
    memmove(out, mine, n * sizeof *out);
    return BT_OK;
}

bt_status bt_dist_allgather_bytes(const bt_dist *d, const void *mine, size_t n, void *out) {
    (void)d;
    memmove(out, mine, n);
    return BT_OK;
}

bt_status bt_dist_allgather_rows_f32(const bt_dist *d, const float *mine, float *all,
                                     const int64_t *counts, size_t width) {
    (void)d;
    if (all != mine) memmove(all, mine, (size_t)counts[0] * width * sizeof *all);
    return BT_OK;
}

bt_status bt_dist_allgather_rows_u64(const bt_dist *d, const uint64_t *mine, uint64_t *all,
                                     const int64_t *counts, size_t width) {
    (void)d;
    if (all != mine) memmove(all, mine, (size_t)counts[0] * width * sizeof *all);
    return BT_OK;
}

bt_status bt_dist_reduce_scatter_add_f32(const bt_dist *d, const float *all, float *mine,
                                         const int64_t *counts, size_t width) {
    (void)d;
    const size_t n_mine = (size_t)counts[0] * width;
    for (size_t i = 0; i < n_mine; i++) mine[i] += all[i];
    return BT_OK;
}

bt_status bt_dist_check_same(const bt_dist *d, const char *const *names, const uint64_t *hashes,
                             size_t n_items) {
    (void)d, (void)names, (void)hashes, (void)n_items;
    return BT_OK;
}

/* The reducer of one rank: the sum over one rank is the gradient itself and the average
 * divides by 1, so start and finish have nothing to do (as dist_mpi.c's inactive world). */
static bt_status reducer_init(bt_dist_reducer *r, const bt_dist *d, float *arena, size_t n,
                              size_t bucket_bytes) {
    dist_reducer_layout(r, d, arena, n, bucket_bytes);
    return BT_OK;
}

bt_status bt_dist_reducer_init(bt_dist_reducer *r, const bt_dist *d, float *arena, size_t n,
                               size_t bucket_bytes, int wire_bf16) {
    (void)wire_bf16;
    return reducer_init(r, d, arena, n, bucket_bytes);
}

bt_status bt_dist_reducer_init_sharded(bt_dist_reducer *r, const bt_dist *d, float *arena,
                                       size_t n, size_t bucket_bytes, int wire_bf16) {
    (void)wire_bf16;
    return reducer_init(r, d, arena, n, bucket_bytes);
}

void bt_dist_reducer_free(bt_dist_reducer *r) {
    memset(r, 0, sizeof *r);
}

bt_status bt_dist_reducer_start(bt_dist_reducer *r, size_t lo, size_t hi) {
    (void)r, (void)lo, (void)hi;
    return BT_OK;
}

bt_status bt_dist_reducer_finish(bt_dist_reducer *r) {
    r->t_wait = 0;
    return BT_OK;
}

bt_status bt_dist_reducer_allgather(bt_dist_reducer *r, float *params) {
    (void)params;
    r->t_wait = 0;
    return BT_OK;
}

bt_status bt_dist_to_root_f32(const bt_dist *d, int from, const float *buf, float *out, size_t n) {
    (void)d;
    if (from == 0 && out != buf) memmove(out, buf, n * sizeof *out);
    return BT_OK;
}
