/* dist/dist_common.h: what dist_common.c gives the two implementations of dist.h
 * (dist_mpi.c, dist_single.c) besides the public functions.
 *
 * Deliberately not here: anything callers of dist.h use (dist.h). */
#ifndef BT_DIST_COMMON_H
#define BT_DIST_COMMON_H

#include <stddef.h>

#include "dist/dist.h"

/* The reducer's fields both implementations set alike: zeroes r, then its world, arena,
 * length and bucket layout (bucket floats, bucket count). */
void dist_reducer_layout(bt_dist_reducer *r, const bt_dist *d, float *arena, size_t n,
                         size_t bucket_bytes);

#endif
