/* test_model_fd.c: the finite-difference harness of the whole-model gradient tests (see
 * test_model_fd.h).
 *
 * Deliberately not here: per-op finite differences (test_ops_grad.c). */
#include "test_model_fd.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int fd_tiny_config(bt_model_config *c) {
    char path[1024];
    const char *root = getenv("BT_CONFIGS"); /* set by meson; else the source tree's */
    if (root) snprintf(path, sizeof path, "%s/tiny/config.json", root);
    else snprintf(path, sizeof path, "%s/../../configs/tiny/config.json", tu_fixture_path(""));
    return tu_check(bt_model_config_load(c, path) == BT_OK, "load %s: %s", path,
                    bt_error_message());
}

void fd_move_off_init(bt_model *m, tu_rng *r) {
    const bt_param_table *t = &m->table;
    for (size_t i = 0; i < t->n_tensors; i++) {
        const bt_param_tensor *x = &t->tensors[i];
        if (x->init != BT_INIT_ZEROS && x->init != BT_INIT_ONES && x->init != BT_INIT_HALF)
            continue;
        for (size_t e = 0; e < x->numel; e++)
            m->params[x->offset + e] += (float)(0.05 * tu_rng_normal(r));
    }
}

static double tensor_rms(const float *p, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)p[i] * p[i];
    return sqrt(s / (double)n);
}

void fd_direction(const bt_param_table *t, const float *params, float *v, tu_rng *r,
                  bt_param_id only, int layer) {
    memset(v, 0, t->numel * sizeof *v);
    for (size_t i = 0; i < t->n_tensors; i++) {
        const bt_param_tensor *x = &t->tensors[i];
        if (only != BT_P_COUNT && (x->id != only || (layer >= 0 && x->layer != layer))) continue;
        double s = tensor_rms(params + x->offset, x->numel);
        for (size_t e = 0; e < x->numel; e++)
            v[x->offset + e] = (float)(s * tu_rng_normal(r));
    }
}

double fd_eps(void) {
    return getenv("FD_EPS") ? atof(getenv("FD_EPS")) : 2.5e-3;
}

void fd_along(bt_model *m, const float *v, int n, fd_losses_fn losses, void *ctx,
              float *const *grads, double *fd, double *an) {
    const size_t numel = m->table.numel;
    const double eps = fd_eps();
    float *p0 = malloc(numel * sizeof *p0), *pp = malloc(numel * sizeof *pp);
    float *pm = malloc(numel * sizeof *pm);
    double *lp = malloc((size_t)n * sizeof *lp), *lm = malloc((size_t)n * sizeof *lm);
    BT_ASSERT(p0 && pp && pm && lp && lm);
    memcpy(p0, m->params, numel * sizeof *p0);
    for (size_t i = 0; i < numel; i++) {
        pp[i] = p0[i] + (float)(eps * v[i]);
        pm[i] = p0[i] - (float)(eps * v[i]);
    }
    memcpy(m->params, pp, numel * sizeof *pp);
    bt_model_refresh_bf16(m);
    losses(m, ctx, lp);
    memcpy(m->params, pm, numel * sizeof *pm);
    bt_model_refresh_bf16(m);
    losses(m, ctx, lm);
    memcpy(m->params, p0, numel * sizeof *p0);
    bt_model_refresh_bf16(m);
    for (int k = 0; k < n; k++) {
        /* g · (θ+ - θ-) / 2ε with the fp32-rounded perturbation actually applied */
        double a = 0;
        for (size_t i = 0; i < numel; i++)
            a += (double)grads[k][i] * ((double)pp[i] - (double)pm[i]) / (2 * eps);
        an[k] = a;
        fd[k] = (lp[k] - lm[k]) / (2 * eps);
    }
    free(lp);
    free(lm);
    free(pp);
    free(pm);
    free(p0);
}

int fd_check(const char *label, const char *loss, double fd, double an, double l0) {
    const double tol = 1e-2 * fabs(an) + 1e-4 * fmax(1.0, fabs(l0));
    return tu_check(fabs(fd - an) <= tol, "%s, loss %s: fd %.6e  g.v %.6e  |diff| %.2e (tol %.2e)",
                    label, loss, fd, an, fabs(fd - an), tol);
}
