/* finite.c: see finite.h. */
#include "finite.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

size_t bt_first_nonfinite(const float *x, size_t n) {
    /* A branch-free pass first (vectorizes; NaN and Inf make x * 0 a NaN), then the index. */
    float acc = 0.0f;
    for (size_t i = 0; i < n; i++)
        acc += x[i] * 0.0f;
    if (acc == 0.0f) return n;
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return i;
    return n;
}

bt_status bt_check_finite(const float *x, size_t n, const char *file, const char *name,
                          int ndim, const long long *shape, const char *what) {
    size_t i = bt_first_nonfinite(x, n);
    if (i == n) return BT_OK;
    char idx[160];
    if (shape && ndim > 0 && ndim <= 8) {
        long long sub[8];
        size_t rest = i;
        for (int d = ndim - 1; d >= 0; d--) {
            long long dim = shape[d] > 0 ? shape[d] : 1;
            sub[d] = (long long)(rest % (size_t)dim);
            rest /= (size_t)dim;
        }
        size_t o = (size_t)snprintf(idx, sizeof idx, "[");
        for (int d = 0; d < ndim && o < sizeof idx; d++)
            o += (size_t)snprintf(idx + o, sizeof idx - o, "%s%lld", d ? ", " : "", sub[d]);
        if (o < sizeof idx) snprintf(idx + o, sizeof idx - o, "]");
    } else {
        snprintf(idx, sizeof idx, "%zu", i);
    }
    return bt_fail(BT_ERR_NUMERIC, "%s: tensor '%s': element %s is %s; expected finite %s", file,
                   name, idx, isnan(x[i]) ? "nan" : x[i] > 0 ? "inf" : "-inf", what);
}
