/* layout.c: the slot walk (layout.h): alignment, the three gradient kinds, bf16 storage of
 * GEMM-only inputs, groups of a shared scratch.
 *
 * Deliberately not here: what any block lays out (its own *_layout function). */
#include "model/layout.h"

#include <math.h>

#include "status.h"

void *layout_take(arena_walk *w, size_t n, size_t elem) {
    w->off = (w->off + 63) / 64 * 64;
    w->approx = ceil(w->approx / 64.0) * 64.0 + (double)n * (double)elem;
    void *p = w->base ? w->base + w->off : NULL;
    w->off += n * elem;
    return p;
}

float *layout_slot(arena_walk *w, size_t n) {
    return layout_take(w, n, sizeof(float));
}

float *layout_slot_ng(arena_walk *w, size_t n) {
    return w->grad ? NULL : layout_slot(w, n);
}

float *layout_slot_set(arena_walk *w, size_t n) {
    return w->grad && w->set ? layout_slot(w->set, n) : layout_slot(w, n);
}

int layout_gemm_input_slot(arena_walk *w, size_t n, float **f, bt_bf16 **h) {
    const int b16 = w->bf16 && !w->grad;
    *h = b16 ? layout_take(w, n, sizeof(bt_bf16)) : NULL;
    *f = b16 ? NULL : layout_slot_set(w, n);
    return b16;
}

void layout_attn_out_slot(arena_walk *w, size_t n, const attn_stage *st, float **f,
                          bt_bf16 **h) {
    if (layout_gemm_input_slot(w, n, f, h)) *f = st->shared ? st->p : layout_slot_ng(w, n);
}

float *layout_probs_slot(arena_walk *w, size_t n, const attn_stage *st) {
    return st->keep_probs ? layout_slot_ng(w, n) : NULL;
}

void layout_walk_end(arena_walk *w) {
    w->off = (w->off + 63) / 64 * 64;
    w->approx = ceil(w->approx / 64.0) * 64.0;
    if (w->off > w->top) w->top = w->off;
    if (w->approx > w->top_approx) w->top_approx = w->approx;
}

void layout_group_close(layout *L) {
    if (L->group < 0) return;
    layout_walk_end(L->s);
    if (L->s->set) layout_walk_end(L->s->set);
    if (L->s->off > L->groups[L->group]) L->groups[L->group] = L->s->off;
    L->group = -1;
}

arena_walk *layout_group_open(layout *L, int group) {
    if (!L->shared) return L->w;
    BT_ASSERT(group >= 0 && group < LAYOUT_MAX_GROUPS);
    layout_group_close(L);
    L->s->off = 0;
    L->s->approx = 0.0;
    if (L->s->set) {
        L->s->set->off = 0;
        L->s->set->approx = 0.0;
    }
    L->group = group;
    return L->s;
}

arena_walk *layout_forward_group(layout *L, int group) {
    return L->forward_only ? layout_group_open(L, group) : L->w;
}

void layout_hidden(float **h, layout *L, int layers, int split, size_t n) {
    for (int l = 0; l <= layers; l++)
        h[l] = L->forward_only && l >= 2 && l < split ? h[l - 2] : layout_slot(L->w, n);
}
