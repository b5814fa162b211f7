/* optim.c: fused AdamW + global grad norm (see optim.h).
 *
 * Deliberately not here: schedules and parameter groups (the trainer passes lr per step). */
#include "optim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"

void bt_adamw_init(bt_adamw *o, const bt_param_table *table) {
    memset(o, 0, sizeof *o);
    o->numel = table->numel;
    o->m = bt_calloc(o->numel * sizeof *o->m);
    o->v = bt_calloc(o->numel * sizeof *o->v);
    /* tensors are in arena order in table->tensors; merge runs with equal decay flags,
     * absorbing the zero padding between them */
    o->segs = calloc(table->n_tensors ? table->n_tensors : 1, sizeof *o->segs);
    BT_ASSERT(o->segs);
    for (size_t i = 0; i < table->n_tensors; i++) {
        const bt_param_tensor *x = &table->tensors[i];
        bt_optim_segment *last = o->n_segs ? &o->segs[o->n_segs - 1] : NULL;
        BT_ASSERT(!last || x->offset >= last->offset + last->numel);
        if (last && last->decay == x->decay) {
            last->numel = x->offset + x->numel - last->offset;
        } else {
            o->segs[o->n_segs++] = (bt_optim_segment){x->offset, x->numel, x->decay};
        }
    }
}

void bt_adamw_free(bt_adamw *o) {
    bt_free(o->m);
    bt_free(o->v);
    free(o->segs);
    memset(o, 0, sizeof *o);
}

enum { NORM_CHUNK = 1 << 16 };

double bt_grad_norm(const float *g, size_t n) {
    const long nchunks = (long)((n + NORM_CHUNK - 1) / NORM_CHUNK);
    double *part = calloc(nchunks ? (size_t)nchunks : 1, sizeof *part);
    BT_ASSERT(part);
#pragma omp parallel for schedule(static)
    for (long c = 0; c < nchunks; c++) {
        const size_t lo = (size_t)c * NORM_CHUNK, hi = lo + NORM_CHUNK < n ? lo + NORM_CHUNK : n;
        double s = 0.0;
        for (size_t i = lo; i < hi; i++) s += (double)g[i] * g[i];
        part[c] = s;
    }
    double total = 0.0;
    for (long c = 0; c < nchunks; c++) total += part[c]; /* fixed order: deterministic */
    free(part);
    return sqrt(total);
}

float bt_clip_coef(double norm, float max_norm) {
    if (max_norm <= 0.0f) return 1.0f;
    /* torch: clip_coef = max_norm / (total_norm + 1e-6), clamped to at most 1 */
    float coef = (float)((double)max_norm / (norm + 1e-6));
    return coef < 1.0f ? coef : 1.0f;
}

void bt_adamw_step(bt_adamw *o, float *params, const float *grads, float grad_scale,
                   const bt_adamw_hparams *h, bt_bf16 *shadow) {
    o->t++;
    /* scalars in double as torch forms them from Python floats, each rounded to fp32 once;
     * then the per-element math in fp32 in torch's order */
    const double bc1 = 1.0 - pow(h->beta1, (double)o->t);
    const double bc2 = 1.0 - pow(h->beta2, (double)o->t);
    const float step_size = (float)(h->lr / bc1);
    const float bc2_sqrt = (float)sqrt(bc2);
    const float b1 = (float)h->beta1, b2 = (float)h->beta2, eps = (float)h->eps;
    const float ob1 = (float)(1.0 - h->beta1), ob2 = (float)(1.0 - h->beta2);
    const float wdecay = (float)(1.0 - h->lr * h->weight_decay);
    for (size_t s = 0; s < o->n_segs; s++) {
        const bt_optim_segment *seg = &o->segs[s];
        const float decay = seg->decay ? wdecay : 1.0f;
        float *p = params + seg->offset, *m = o->m + seg->offset, *v = o->v + seg->offset;
        const float *g = grads + seg->offset;
        bt_bf16 *sh = shadow ? shadow + seg->offset : NULL;
        const long n = (long)seg->numel;
#pragma omp parallel for schedule(static) if (n > 32768)
        for (long i = 0; i < n; i++) {
            const float gi = g[i] * grad_scale;
            float pi = p[i] * decay;                       /* p.mul_(1 - lr*wd) */
            const float mi = m[i] * b1 + gi * ob1;          /* exp_avg.mul_(b1).add_(g, 1-b1) */
            const float vi = v[i] * b2 + ob2 * gi * gi;     /* exp_avg_sq.mul_(b2).addcmul_(g, g) */
            const float denom = sqrtf(vi) / bc2_sqrt + eps; /* (sqrt(v)/sqrt(bc2)).add_(eps) */
            pi = pi - step_size * (mi / denom);             /* p.addcdiv_(m, denom, -step) */
            m[i] = mi;
            v[i] = vi;
            p[i] = pi;
            if (sh) sh[i] = bt_bf16_from_f32(pi);
        }
    }
}
