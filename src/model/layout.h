/* layout.h: the slot walk that places activations and their gradients in arenas. A block
 * (a tower layer, a head) describes its saved activations as a list of slots, each with its
 * gradient kind; one walk per arena assigns every slot an address (or, with base NULL, only
 * counts the bytes). The same walks size the memory check, the allocation and the placement,
 * so the three never disagree.
 *
 * Slot kinds (the gradient kind is part of the slot, so a block's layout states how its
 * backward writes each activation gradient; ops.h BT_DX_SET / BT_DX_ADD):
 *   layout_slot      a slot with a gradient that its writers ACCUMULATE (+=): streams that
 *                    merge (a hidden state read by a layer and a bridge, rows read by
 *                    several pairs). The backward zeroes these before it starts.
 *   layout_slot_set  a slot whose gradient its only (or first, in backward order) writer
 *                    ASSIGNS (=) before anything reads it. Gradient walks put these in an
 *                    "assigned" region that nothing zeroes: a writer that accumulated there
 *                    would add to the previous step's value (tests/test_model_memory.c fills
 *                    that region with NaN before a backward and requires the same bits).
 *   layout_slot_ng   a slot without a gradient (statistics, probabilities, copied inputs, and
 *                    activations whose gradient equals another slot's and is read there): in
 *                    a gradient walk it is NULL and takes no space.
 *   layout_gemm_input_slot   an activation that only GEMMs read: bf16 storage when the walk
 *                    says so (docs/model.md "bf16 activation storage"), else an assigned fp32
 *                    slot (its one Linear's dx writes it with BT_DX_SET).
 *   layout_attn_out_slot     an attention output read only by its out-projection: as a GEMM
 *                    input, plus the fp32 staging attention writes before it is rounded.
 * Gradient arenas are laid out [outputs | accumulated | assigned]: the caller walks once
 * without bases to learn where the assigned region starts (arena_walk.set), then places.
 *
 * Shared scratch (memory modes): with `shared` set, a layout also walks a scratch that holds
 * one group at a time: each group (one layer's internals, say) starts at offset 0
 * (layout_group_open), and the scratch's size is the largest group. Slots are 64-byte
 * aligned; `approx` follows `off` in double so absurd shapes are reported, not wrapped.
 *
 * Deliberately not here: any model name or shape (the blocks' own *_layout functions and
 * model.c's phase walks say what goes where), allocation (model.c). */
#ifndef BT_LAYOUT_H
#define BT_LAYOUT_H

#include <stddef.h>

#include "dtype.h"

/* One walk over one arena (or, base NULL, a count). */
typedef struct arena_walk {
    unsigned char *base;
    size_t off, top;            /* top: the largest off reached (groups restart at 0); after
                                   a whole gradient walk: accumulated + assigned */
    double approx, top_approx;
    int grad;                   /* a gradient walk: slot_ng slots are NULL */
    int bf16;                   /* bf16 storage of GEMM-only activations */
    struct arena_walk *set;     /* gradient walks: the assigned region (NULL: in line) */
    size_t acc;                 /* gradient walks, afterwards: bytes of [outputs |
                                   accumulated], where the assigned region starts */
} arena_walk;

enum { LAYOUT_MAX_GROUPS = 8 };

/* One phase's layout: the phase arena's walk w and the shared scratch's walk s (= w when not
 * shared), the group being laid out in s and each group's accumulated bytes. */
typedef struct layout {
    arena_walk *w, *s;
    int shared;                 /* internals go to the shared scratch, one group at a time */
    int forward_only;           /* no backward: forward-only intermediates share the scratch
                                   too, and hidden states may alternate (layout_hidden) */
    int group;                  /* open group of s, -1 none */
    size_t groups[LAYOUT_MAX_GROUPS];
} layout;

/* n elements of elem bytes, 64-byte aligned (NULL in a counting walk). */
void *layout_take(arena_walk *w, size_t n, size_t elem);
/* n floats, gradient accumulated. */
float *layout_slot(arena_walk *w, size_t n);
/* n floats, no gradient (NULL in a gradient walk). */
float *layout_slot_ng(arena_walk *w, size_t n);
/* n floats, gradient assigned (the assigned region of a gradient walk). */
float *layout_slot_set(arena_walk *w, size_t n);
/* A GEMM-only input: with bf16 storage (activation walk) a bf16 slot *h, *f NULL, returns 1;
 * else an fp32 slot *f (gradient: assigned), *h NULL, returns 0. */
int layout_gemm_input_slot(arena_walk *w, size_t n, float **f, bt_bf16 **h);

/* How a phase lays out its attention buffers.
 * Where attention writes its fp32 output before the out-projection rounds it (bf16 storage):
 * shared = 1: one buffer p for the whole phase, shared by its layers (NULL in a counting
 * walk); shared = 0: a slot of each layer's own walk (a scratch group: one layer's worth).
 * keep_probs: each attention keeps its probabilities P (B*NH*Tq*Tk floats) for the
 * backward; 0: no probs slot, the backward recomputes P (ops.h attention_backward, the
 * same bits; model.h "Attention probabilities"). */
typedef struct attn_stage {
    int shared;
    float *p;
    int keep_probs;
} attn_stage;

/* An attention's probabilities: a slot without gradient, or NULL when the stage does not
 * keep them. */
float *layout_probs_slot(arena_walk *w, size_t n, const attn_stage *st);

/* An attention output read only by its out-projection: as layout_gemm_input_slot, and with
 * bf16 storage *f = its fp32 staging (attn_stage). */
void layout_attn_out_slot(arena_walk *w, size_t n, const attn_stage *st, float **f,
                          bt_bf16 **h);

/* Aligns the end and records the high-water mark. */
void layout_walk_end(arena_walk *w);
/* The walk for the slots of group `group` (< LAYOUT_MAX_GROUPS): the scratch from offset 0
 * when shared, else the phase arena. */
arena_walk *layout_group_open(layout *L, int group);
/* Closes the open group: groups[] gets its accumulated bytes. */
void layout_group_close(layout *L);
/* Forward-only intermediates: group `group` of the scratch when forward_only, else the
 * arena. */
arena_walk *layout_forward_group(layout *L, int group);
/* Hidden states h[0..layers] of a tower, each n floats (accumulated gradients): one slot per
 * state, except forward-only, where the states below `split` (read by the next layer only)
 * alternate between two buffers. */
void layout_hidden(float **h, layout *L, int layers, int split, size_t n);

#endif
