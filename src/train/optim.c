/* optim.c: fused AdamW with parameter groups + global grad norm (see optim.h).
 *
 * Deliberately not here: schedules (schedule.c; the trainer passes lr per step). */
#include "train/optim.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/ops.h"
#include "mem.h"
#include "status.h"

enum { NORM_CHUNK = 1 << 16 };

bt_optim_groups bt_optim_groups_default(void) {
    bt_optim_groups g = {1.0, 1.0, 0, 0};
    return g;
}

static int starts_with(const char *s, const char *prefix) {
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

double bt_optim_lr_mult(const bt_param_tensor *x, const bt_optim_groups *g) {
    if (x->head != BT_HEAD_BACKBONE) return g->lr_mult_heads;
    if (strstr(x->bare_key, "cross_modal")) return g->lr_mult_cross;
    return 1.0;
}

int bt_optim_frozen(const bt_param_tensor *x, const bt_optim_groups *g) {
    if (x->head != BT_HEAD_BACKBONE) return 0;
    /* No loss reaches the RoBERTa pooler (HF's heads read the cross-modal poolers), so torch
     * never gives it a .grad and AdamW skips it, weight decay included: never updated. */
    if (starts_with(x->bare_key, "text_model.pooler.")) return 1;
    return (g->freeze_text && starts_with(x->bare_key, "text_model.")) ||
           (g->freeze_vision && starts_with(x->bare_key, "vision_model."));
}

void bt_adamw_init(bt_adamw *o, const bt_param_table *table) {
    const bt_optim_groups g = bt_optim_groups_default();
    bt_adamw_init_groups(o, table, &g);
}

/* The table's segments: runs of tensors with equal (decay, mult, frozen), absorbing the
 * zero padding between them; *n gets their count (calloc'd array, >= 1 entry). */
static bt_optim_segment *build_segments(const bt_param_table *table, const bt_optim_groups *g,
                                        size_t *n) {
    bt_optim_segment *segs = calloc(table->n_tensors ? table->n_tensors : 1, sizeof *segs);
    BT_ASSERT(segs);
    size_t k = 0;
    for (size_t i = 0; i < table->n_tensors; i++) {
        const bt_param_tensor *x = &table->tensors[i];
        const double mult = bt_optim_lr_mult(x, g);
        const int frozen = bt_optim_frozen(x, g);
        bt_optim_segment *last = k ? &segs[k - 1] : NULL;
        BT_ASSERT(!last || x->offset >= last->offset + last->numel);
        if (last && last->decay == x->decay && last->lr_mult == mult && last->frozen == frozen) {
            last->numel = x->offset + x->numel - last->offset;
        } else {
            segs[k++] = (bt_optim_segment){.offset = x->offset, .numel = x->numel,
                                           .decay = x->decay, .frozen = frozen,
                                           .lr_mult = mult};
        }
    }
    *n = k;
    return segs;
}

/* Moment offsets, zeroed moments and grad-norm chunks for o->segs. */
static void finish_init(bt_adamw *o) {
    size_t nchunks = 0;
    for (size_t s = 0; s < o->n_segs; s++) {
        bt_optim_segment *seg = &o->segs[s];
        if (seg->frozen) continue;
        seg->moff = o->mnumel;
        o->mnumel += seg->numel;
        nchunks += (seg->numel + NORM_CHUNK - 1) / NORM_CHUNK;
    }
    /* huge pages on request (mem.h): the optimizer streams over both every step */
    o->m = bt_calloc_huge((o->mnumel ? o->mnumel : 1) * sizeof *o->m);
    o->v = bt_calloc_huge((o->mnumel ? o->mnumel : 1) * sizeof *o->v);
    o->chunk_off = calloc(nchunks ? nchunks : 1, sizeof *o->chunk_off);
    o->chunk_len = calloc(nchunks ? nchunks : 1, sizeof *o->chunk_len);
    o->chunk_sum = calloc(nchunks ? nchunks : 1, sizeof *o->chunk_sum);
    BT_ASSERT(o->chunk_off && o->chunk_len && o->chunk_sum);
    for (size_t s = 0; s < o->n_segs; s++) {
        const bt_optim_segment *seg = &o->segs[s];
        if (seg->frozen) continue;
        for (size_t lo = 0; lo < seg->numel; lo += NORM_CHUNK) {
            o->chunk_off[o->n_chunks] = seg->offset + lo;
            o->chunk_len[o->n_chunks] = seg->numel - lo < NORM_CHUNK ? seg->numel - lo
                                                                     : NORM_CHUNK;
            o->n_chunks++;
        }
    }
}

void bt_adamw_init_groups(bt_adamw *o, const bt_param_table *table, const bt_optim_groups *g) {
    memset(o, 0, sizeof *o);
    o->numel = table->numel;
    o->segs = build_segments(table, g, &o->n_segs);
    finish_init(o);
}

void bt_adamw_init_shard(bt_adamw *o, const bt_param_table *table, const bt_optim_groups *g,
                         const size_t *lohi, size_t n_ranges) {
    memset(o, 0, sizeof *o);
    o->numel = table->numel;
    o->sharded = 1;
    size_t n_full;
    bt_optim_segment *full = build_segments(table, g, &n_full);
    /* pieces: each range cut at the trained segments' edges (both sorted: one merge) */
    size_t cap = n_ranges + n_full + 1, k = 0, s = 0;
    o->segs = calloc(cap, sizeof *o->segs);
    BT_ASSERT(o->segs);
    for (size_t i = 0; i < n_ranges; i++) {
        const size_t lo = lohi[2 * i], hi = lohi[2 * i + 1];
        BT_ASSERT(lo <= hi && hi <= table->numel && (i == 0 || lo >= lohi[2 * i - 1]));
        while (s < n_full && full[s].offset + full[s].numel <= lo) s++;
        for (size_t t = s; t < n_full && full[t].offset < hi; t++) {
            if (full[t].frozen) continue;
            const size_t a = full[t].offset > lo ? full[t].offset : lo;
            const size_t e = full[t].offset + full[t].numel;
            const size_t b = e < hi ? e : hi;
            if (a >= b) continue;
            if (k == cap) {
                cap *= 2;
                o->segs = realloc(o->segs, cap * sizeof *o->segs);
                BT_ASSERT(o->segs);
            }
            o->segs[k] = full[t];
            o->segs[k].offset = a;
            o->segs[k].numel = b - a;
            k++;
        }
    }
    o->n_segs = k;
    o->fsegs = full;
    o->n_fsegs = n_full;
    finish_init(o);
}

int bt_adamw_trained_at(const bt_adamw *o, size_t offset) {
    const bt_optim_segment *segs = o->sharded ? o->fsegs : o->segs;
    const size_t n = o->sharded ? o->n_fsegs : o->n_segs;
    for (size_t s = 0; s < n; s++)
        if (offset >= segs[s].offset && offset < segs[s].offset + segs[s].numel)
            return !segs[s].frozen;
    return 0;
}

size_t bt_adamw_trained_numel(const bt_param_table *table, const bt_optim_groups *g) {
    size_t n_segs, total = 0;
    bt_optim_segment *segs = build_segments(table, g, &n_segs);
    for (size_t s = 0; s < n_segs; s++)
        if (!segs[s].frozen) total += segs[s].numel;
    free(segs);
    return total;
}

bt_status bt_adamw_shard_to_full(const bt_adamw *shard, bt_adamw *full) {
    BT_ASSERT(!full->sharded && shard->numel == full->numel);
    for (size_t s = 0; s < shard->n_segs; s++) {
        const bt_optim_segment *seg = &shard->segs[s];
        float *fm, *fv, *em, *ev;
        /* the piece must be one run of the full layout's moments (same groups) */
        if (!bt_adamw_moments(full, seg->offset + seg->numel - 1, &em, &ev) ||
            !bt_adamw_moments(full, seg->offset, &fm, &fv) || em - fm != (ptrdiff_t)seg->numel - 1)
            return bt_fail(BT_ERR_SHAPE, "optimizer state: the parameters at arena offsets "
                           "[%zu, %zu) are trained here but not in the other layout (frozen "
                           "towers differ)", seg->offset, seg->offset + seg->numel);
        memcpy(fm, shard->m + seg->moff, seg->numel * sizeof *fm);
        memcpy(fv, shard->v + seg->moff, seg->numel * sizeof *fv);
    }
    full->t = shard->t;
    return BT_OK;
}

void bt_adamw_free(bt_adamw *o) {
    bt_free(o->m);
    bt_free(o->v);
    free(o->segs);
    free(o->fsegs);
    free(o->chunk_off);
    free(o->chunk_len);
    free(o->chunk_sum);
    memset(o, 0, sizeof *o);
}

int bt_adamw_moments(const bt_adamw *o, size_t offset, float **m, float **v) {
    for (size_t s = 0; s < o->n_segs; s++) {
        const bt_optim_segment *seg = &o->segs[s];
        if (offset < seg->offset || offset >= seg->offset + seg->numel) continue;
        if (seg->frozen) break;
        *m = o->m + seg->moff + (offset - seg->offset);
        *v = o->v + seg->moff + (offset - seg->offset);
        return 1;
    }
    *m = *v = NULL;
    return 0;
}

double bt_grad_norm(const float *g, size_t n) {
    const long nchunks = (long)((n + NORM_CHUNK - 1) / NORM_CHUNK);
    double *part = calloc(nchunks ? (size_t)nchunks : 1, sizeof *part);
    BT_ASSERT(part);
#pragma omp parallel for schedule(static)
    for (long c = 0; c < nchunks; c++) {
        const size_t lo = (size_t)c * NORM_CHUNK, hi = lo + NORM_CHUNK < n ? lo + NORM_CHUNK : n;
        part[c] = sum_squares(g + lo, hi - lo); /* ops.h: vectorized, same at every level */
    }
    double total = 0.0;
    for (long c = 0; c < nchunks; c++) total += part[c]; /* fixed order: deterministic */
    free(part);
    return sqrt(total);
}

double bt_adamw_grad_norm(const bt_adamw *o, const float *grads) {
    return sqrt(bt_adamw_grad_sumsq(o, grads));
}

double bt_adamw_grad_sumsq(const bt_adamw *o, const float *grads) {
    const long nc = (long)o->n_chunks;
    double *part = o->chunk_sum;
#pragma omp parallel for schedule(static)
    for (long c = 0; c < nc; c++) {
        part[c] = sum_squares(grads + o->chunk_off[c], o->chunk_len[c]);
    }
    double total = 0.0;
    for (long c = 0; c < nc; c++) total += part[c]; /* fixed order: deterministic */
    return total;
}

float bt_clip_coef(double norm, float max_norm) {
    if (max_norm <= 0.0f) return 1.0f;
    /* torch: clip_coef = max_norm / (total_norm + 1e-6), clamped to at most 1 */
    float coef = (float)((double)max_norm / (norm + 1e-6));
    return coef < 1.0f ? coef : 1.0f;
}

/* bt_adamw_step, and with zero_grad also the gradient of every element it updates set to +0
 * in the same pass (grads is written only then). */
static void adamw_step(bt_adamw *o, float *params, float *grads, float grad_scale,
                       const bt_adamw_hparams *h, bt_bf16 *shadow, int zero_grad) {
    o->t++;
    /* scalars in double as torch forms them from Python floats, each rounded to fp32 once;
     * then the per-element math in fp32 in torch's order */
    const double bc1 = 1.0 - pow(h->beta1, (double)o->t);
    const double bc2 = 1.0 - pow(h->beta2, (double)o->t);
    const float bc2_sqrt = (float)sqrt(bc2);
    adamw_coefs k = {.grad_scale = grad_scale, .b1 = (float)h->beta1, .b2 = (float)h->beta2,
                     .eps = (float)h->eps, .ob1 = (float)(1.0 - h->beta1),
                     .ob2 = (float)(1.0 - h->beta2), .bc2_sqrt = bc2_sqrt};
    for (size_t s = 0; s < o->n_segs; s++) {
        const bt_optim_segment *seg = &o->segs[s];
        if (seg->frozen) continue;
        const double lr = h->lr * seg->lr_mult; /* the group's lr, as torch holds it */
        k.step_size = (float)(lr / bc1);
        k.decay = seg->decay ? (float)(1.0 - lr * h->weight_decay) : 1.0f;
        /* the element loop in torch's order: ops.h adamw_update (vectorized, threaded) */
        float *p = params + seg->offset, *m = o->m + seg->moff, *v = o->v + seg->moff;
        bt_bf16 *sh = shadow ? shadow + seg->offset : NULL;
        if (zero_grad) adamw_update_zero_grad(p, m, v, sh, grads + seg->offset, seg->numel, &k);
        else adamw_update(p, m, v, sh, grads + seg->offset, seg->numel, &k);
    }
}

void bt_adamw_step(bt_adamw *o, float *params, const float *grads, float grad_scale,
                   const bt_adamw_hparams *h, bt_bf16 *shadow) {
    /* zero_grad 0: grads is never written */
    adamw_step(o, params, (float *)(uintptr_t)grads, grad_scale, h, shadow, 0);
}

void bt_adamw_step_zero_grad(bt_adamw *o, float *params, float *grads, float grad_scale,
                             const bt_adamw_hparams *h, bt_bf16 *shadow) {
    adamw_step(o, params, grads, grad_scale, h, shadow, 1);
}

void bt_adamw_zero_untouched(const bt_adamw *o, float *grads) {
    size_t at = 0; /* o->segs are sorted and disjoint: fill the gaps between trained ones */
    for (size_t s = 0; s < o->n_segs; s++) {
        const bt_optim_segment *seg = &o->segs[s];
        if (seg->frozen) continue;
        BT_ASSERT(seg->offset >= at);
        if (seg->offset > at) zero_fill(grads + at, (seg->offset - at) * sizeof *grads);
        at = seg->offset + seg->numel;
    }
    if (o->numel > at) zero_fill(grads + at, (o->numel - at) * sizeof *grads);
}
