/* finite.h: the non-finite policy of bt (docs/guarantees.md, "Non-finite numbers").
 *
 * NaN and Inf are never silently carried from an input into a result:
 *   - inputs (pixel values of a batch file, images are uint8 and cannot be) and weights
 *     read from a checkpoint are refused when any element is not finite (BT_ERR_NUMERIC,
 *     naming the file, the tensor and the first bad element);
 *   - a loss that comes out non-finite from finite inputs and weights is reported by the
 *     tool that computed it (bt-forward: an error, exit 1, after writing its outputs so
 *     they can be inspected; bt-train: see src/train).
 *
 * Deliberately not here: checks inside kernels (the model checks its losses once per step;
 * see src/model/model.h), and any repair (no NaN is ever replaced by a number). */
#ifndef BT_FINITE_H
#define BT_FINITE_H

#include <stddef.h>

#include "status.h"

/* Index of the first element of x[0..n) that is NaN or +-Inf, or n when all are finite. */
size_t bt_first_nonfinite(const float *x, size_t n);

/* BT_OK, or BT_ERR_NUMERIC "<file>: tensor '<name>': element <i> is nan; expected finite
 * <what>" (the element printed as a multi-index when shape/ndim are given, ndim <= 8). */
bt_status bt_check_finite(const float *x, size_t n, const char *file, const char *name,
                          int ndim, const long long *shape, const char *what);

#endif
