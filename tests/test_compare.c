/* test_compare.c: see test_compare.h. */
#include "test_compare.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/checkpoint.h"
#include "safetensors.h"
#include "status.h"
#include "test_util.h"

typedef struct tc_tensor_sums {
    const char *name;
    size_t n;
    double d2, m2; /* Σ (a - b)^2, Σ (b - init)^2 */
} tc_tensor_sums;

/* The fp32 values of tensor `name` of f, or NULL (absent or unreadable). malloc'd. */
static float *read_tensor(const safetensors_file *f, const char *name, size_t numel) {
    const safetensors_tensor *t = safetensors_find(f, name);
    if (!t || t->numel != numel || t->dtype != BT_DTYPE_F32) return NULL;
    float *x = malloc((numel ? numel : 1) * sizeof *x);
    if (x && safetensors_read_f32(f, t, x, numel) != BT_OK) {
        free(x);
        return NULL;
    }
    return x;
}

/* Σ (x - y)^2 and Σ (y - z)^2 (z NULL: zeros) over n values into *s; max |x - y| into
 * *max_abs. A NaN makes the sums NaN: a failure of the bounds. */
static void sums_of(const float *x, const float *y, const float *z, size_t n, tc_tensor_sums *s,
                    double *max_abs) {
    s->n = n;
    s->d2 = s->m2 = 0;
    for (size_t k = 0; k < n; k++) {
        const double d = (double)x[k] - (double)y[k];
        const double m = (double)y[k] - (z ? (double)z[k] : 0.0);
        s->d2 += d * d;
        s->m2 += m * m;
        if (!(fabs(d) <= *max_abs)) *max_abs = fabs(d);
    }
}

/* One tensor ta of a: its sums into *s and the max |a - b| into *max_abs; 0 when b or init
 * lacks it or a value cannot be read. */
static int tensor_sums(const safetensors_file *a, const safetensors_file *b,
                       const safetensors_file *init, const safetensors_tensor *ta,
                       tc_tensor_sums *s, double *max_abs) {
    const safetensors_tensor *tb = safetensors_find(b, ta->name);
    if (!tb || tb->numel != ta->numel || tb->dtype != ta->dtype) return 0;
    s->name = ta->name;
    s->n = 0;
    s->d2 = s->m2 = 0;
    if (ta->dtype != BT_DTYPE_F32) /* integer buffers (position ids): equal bytes */
        return tb->end - tb->begin == ta->end - ta->begin &&
               memcmp(ta->data, tb->data, ta->end - ta->begin) == 0;
    float *x = read_tensor(a, ta->name, ta->numel), *y = read_tensor(b, ta->name, ta->numel);
    float *z = init ? read_tensor(init, ta->name, ta->numel) : NULL;
    const int ok = x && y && (z || !init);
    if (ok) sums_of(x, y, z, ta->numel, s, max_abs);
    free(x);
    free(y);
    free(z);
    return ok;
}

/* R and the worst r_T from the per-tensor sums (r->max_abs already set). */
static void ratios_of(tc_weights_result *r, const tc_tensor_sums *s, size_t n_tensors) {
    double d2 = 0, m2 = 0;
    r->n = 0;
    for (size_t i = 0; i < n_tensors; i++) {
        d2 += s[i].d2;
        m2 += s[i].m2;
        r->n += s[i].n;
    }
    r->comparable = 1;
    r->moved = sqrt(m2);
    /* nothing moved: the comparison shows nothing */
    r->overall = m2 > 0 ? sqrt(d2 / m2) : INFINITY;
    r->worst_tensor = 0;
    for (size_t i = 0; i < n_tensors; i++) {
        if (!s[i].n) continue;
        const double floor2 = (double)s[i].n / (double)r->n * m2;
        const double den2 = s[i].m2 > floor2 ? s[i].m2 : floor2;
        const double rt = den2 > 0 ? sqrt(s[i].d2 / den2) : s[i].d2 == 0 ? 0 : INFINITY;
        if (!(rt <= r->worst_tensor)) {
            r->worst_tensor = rt;
            snprintf(r->worst_name, sizeof r->worst_name, "%s", s[i].name);
        }
    }
}

int tc_weights_compare(tc_weights_result *r, const char *got, const char *ref, const char *init) {
    memset(r, 0, sizeof *r);
    r->overall = r->worst_tensor = INFINITY;
    safetensors_file a, b, z;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    memset(&z, 0, sizeof z);
    int ok = safetensors_open(&a, got) == BT_OK && safetensors_open(&b, ref) == BT_OK &&
             (!init || safetensors_open(&z, init) == BT_OK) && a.n_tensors == b.n_tensors &&
             a.n_tensors > 0;
    tc_tensor_sums *s = ok ? calloc(a.n_tensors, sizeof *s) : NULL;
    ok = ok && s;
    for (size_t i = 0; ok && i < a.n_tensors; i++)
        ok = tensor_sums(&a, &b, init ? &z : NULL, &a.tensors[i], &s[i], &r->max_abs);
    if (ok) ratios_of(r, s, a.n_tensors);
    free(s);
    safetensors_close(&a);
    safetensors_close(&b);
    safetensors_close(&z);
    return r->comparable;
}

int tc_weights_compare_views(tc_weights_result *r, const tc_tensor_view *v, size_t n) {
    memset(r, 0, sizeof *r);
    r->overall = r->worst_tensor = INFINITY;
    tc_tensor_sums *s = calloc(n ? n : 1, sizeof *s);
    if (!s || n == 0) {
        free(s);
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        s[i].name = v[i].name;
        sums_of(v[i].got, v[i].ref, v[i].init, v[i].n, &s[i], &r->max_abs);
    }
    ratios_of(r, s, n);
    free(s);
    return 1;
}

int tc_weights_pass(const tc_weights_result *r, double rtol) {
    return r->comparable && r->overall <= rtol && r->worst_tensor <= TC_TENSOR_BOUND;
}

int tc_check_weights(const char *what, const char *got, const char *ref, const char *init,
                     double rtol) {
    tc_weights_result r;
    tc_weights_compare(&r, got, ref, init);
    return tu_check(tc_weights_pass(&r, rtol), "%s: final weights equal the reference run's "
                    "relative to their movement: overall %.2e <= %.2g, worst tensor %.2e <= %.1f "
                    "(%s; max |diff| %.2e, movement %.3g)%s", what, r.overall, rtol,
                    r.worst_tensor, TC_TENSOR_BOUND, r.worst_name[0] ? r.worst_name : "-",
                    r.max_abs, r.moved, r.comparable ? "" : ": files not comparable");
}

double tc_worst_relative(const double *got, const double *ref, size_t n) {
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = fabs(got[i] - ref[i]);
        const double rel = d == 0 ? 0 : ref[i] != 0 ? d / fabs(ref[i]) : INFINITY;
        if (!(rel <= worst)) worst = isnan(rel) ? INFINITY : rel;
    }
    return worst;
}

void tc_save_init(const char *dir, const char *model_dir, unsigned heads,
                  unsigned long long seed) {
    bt_checkpoint_weights w;
    if (bt_checkpoint_init(&w, model_dir, heads, (uint64_t)seed) != BT_OK ||
        bt_checkpoint_save(dir, &w.table, w.params, NULL) != BT_OK) {
        fprintf(stderr, "the initial weights of %s (seed %llu) into %s: %s\n", model_dir, seed,
                dir, bt_error_message());
        exit(1);
    }
    bt_checkpoint_weights_free(&w);
}
