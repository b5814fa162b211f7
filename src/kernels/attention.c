/* attention.c: the fast multi-head attention kernels behind ops.h's attention_forward and
 * attention_backward, one (batch, head) block at a time, and the settings that choose how
 * they use the cores and which products their blocks run.
 *
 * Attention runs per (batch, head) block: the block's scores q kᵀ/√D come from one gemm()
 * into a per-thread Tq x Tk tile that stays in cache (the probs slice itself is cold memory),
 * the rows get + key_bias, are softmaxed in place (dropout into a second tile), P is streamed
 * to the block's slice of probs, and a second gemm() forms the value product from the tile. On
 * the native bf16 route this file hands the products bf16 operands, each rounded once per
 * block (dout_h and dS each feed two products) to the bytes and dense layout gemm's own
 * packing would make, so the results are the same bits; P's bf16 copy is written by the row
 * pass (softmax, dropout) while the row is in L1.
 * The OpenMP loop runs over the B*NH blocks and each gemm() runs on its calling thread (see
 * ATTENTION THREADING below for the measurement behind it). Where oneDNN runs at its AMX
 * level, the native route's block products are attention_amx.c's tile kernels instead of
 * gemm() calls, and where it runs at avx512_core_bf16 attention_dpbf16.c's, on operands the
 * rounding and the row passes write in the tiles' layouts (same bits; BT_ATTENTION_PRODUCTS,
 * "the block products on AMX tiles" below).
 *
 * Like ops.c, this file is compiled once per ISA level (ops_blocks.h, "ISA variants"): each
 * level's unit gives ops.c's kernel table attention_forward_fast_<level> and
 * attention_backward_fast_<level> (attention.h), and the library's unit (OPS_VARIANT
 * undefined) also holds the settings (BT_ATTENTION_THREADS, BT_ATTENTION_PRODUCTS) and which
 * hand-written block products this CPU and oneDNN's ISA allow.
 *
 * Deliberately not here: the reference (ops_ref.inc), the hand-written block products
 * (attention_amx.c, attention_dpbf16.c), the GEMM (gemm*.c), the kernel table and its
 * dispatch (ops.c), any fast-math. */
#include "kernels/attention.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "kernels/attention_amx.h"
#include "kernels/attention_dpbf16.h"
#include "kernels/gemm.h"
#include "kernels/ops.h"
#include "kernels/ops_blocks.h"
#include "settings.h"
#include "status.h"

/* --- threading ------------------------------------------------------------------------------
 * ATTENTION THREADING. Two ways to use the cores, both kept and selectable
 * (ops_attention_threads_select, BT_ATTENTION_THREADS):
 *   (a) "blocks": one OpenMP loop over the B*NH blocks, each gemm() on its calling thread
 *       (oneDNN sees omp_in_parallel() and stays on it: no nested threading); one fork/join
 *       per call, 24 equal blocks for 2 threads at base size.
 *   (b) "gemm": batch items one after another; per item one batched gemm() over the NH
 *       heads (threaded inside the GEMM) and an OpenMP loop over heads for the row work;
 *       3-5 fork/joins per batch item.
 * Measured with tests/bench_ops.c (docs/benchmarks.md, "Memory-bound kernels and
 * attention"), 2 threads, base shapes, oneDNN: self-attention T=325 fp32 forward/backward
 * 12.4/16.2 ms with (a) vs 36.4/63.3 ms with (b); text T=40 0.14/0.24 vs 0.23/0.27 ms;
 * cross 40x325 even within noise. (a) is the default ("auto"), except under OpenBLAS,
 * whose calls from inside a parallel region fan out to its own threads (gemm.h). */

/* Which of the two is used. AUTO: (a) unless the GEMM backend is OpenBLAS, then (b). */
typedef enum { OPS_ATTN_AUTO, OPS_ATTN_BLOCKS, OPS_ATTN_GEMM } ops_attn_mode;
/* One setting shared by every ISA variant unit (defined in the library's unit). */
extern ops_attn_mode ops_attention_mode;
#ifndef OPS_VARIANT
ops_attn_mode ops_attention_mode = OPS_ATTN_AUTO;
#endif

static ops_attn_mode ops_attention_resolve(void) {
    if (ops_attention_mode != OPS_ATTN_AUTO) return ops_attention_mode;
    return gemm_get_backend() == GEMM_BACKEND_OPENBLAS ? OPS_ATTN_GEMM : OPS_ATTN_BLOCKS;
}

/* Operand slices the forward's value product reads and writes (rows x D floats at row
 * stride ld: v_h and out_h), fetched into cache while the row pass computes: the product's
 * loads and its stores into cold lines of out otherwise wait on memory, while the row pass
 * is bound by arithmetic (exp, the dropout hash). Row i of a pass over n rows fetches rows
 * [i step, (i + 1) step) of each slice, step = ceil(rows / n) (attention_ahead_begin). A
 * hint only: no result depends on it. Measured (1 thread, B 8, T 325, no dropout or mask,
 * min of 3): native bf16 forward 23.0 -> 21.5 ms per call, AVX2 fp32 42.1 -> 41.1; the same
 * for the backward (its dv, dq, dk output rows, k_h and q_h during its row pass) gained
 * nothing measurable, so it is not done. */
typedef struct attention_ahead {
    const float *x[2];
    size_t ld[2], rows[2], step[2];
    size_t D;
} attention_ahead;

OPS_INLINE void attention_ahead_begin(attention_ahead *a, size_t n) {
    for (int k = 0; k < 2; k++) a->step[k] = (a->rows[k] + n - 1) / n;
}

OPS_INLINE void attention_ahead_row(const attention_ahead *a, size_t i) {
    if (!a) return;
    for (int k = 0; k < 2; k++) {
        if (!a->x[k]) continue;
        const size_t r0 = i * a->step[k], r1 = ops_min(r0 + a->step[k], a->rows[k]);
        for (size_t t = r0; t < r1; t++)
            for (size_t j = 0; j < a->D; j += 64 / sizeof(float))
                __builtin_prefetch(a->x[k] + t * a->ld[k] + j, 0, 3);
    }
}

/* The block's Tq score rows s in place (row i at s + i lds, lds >= tk; columns [tk, lds) are
 * scratch: the exp loop, and without dropout the scaling, run over them too, so that with
 * lds a multiple of OPS_LANES they have no scalar remainder; their values are never read;
 * the caller zeroes them once, as subnormal garbage would slow the exp): S += key_bias (if
 * any), P = softmax(S); then P·V's operand: with dropout, pd = dropout(P) (fp32, row i at
 * pd + i*pd_step: a Tq x Tk tile, or with pd_step 0 one row of scratch); with tile16 (the
 * native bf16 route), tile16 (Tq x Tk) = bf16(dropout(P)) or bf16(P), the bytes gemm's own
 * rounding of that operand gives. Row by row, while the row is in L1.
 * The passes of softmax_row_inline with the key-bias add folded into the max pass
 * (ops_max_add) and the scaling by 1/Σ into the dropout pass: the same expressions and
 * sums in the same order, the same max (ops_max_add: up to the sign of a zero, which
 * exp(x - max) does not see), so the same bits.
 * The key bias is added here rather than as the GEMM's bias:
 * with alpha = 1/√D a GEMM may scale the bias by 1/alpha internally (oneDNN does), which
 * turns HF's -FLT_MAX mask into -Inf and a row whose keys are all masked into NaN instead
 * of the uniform distribution torch gives. */
OPS_VEC static void attention_rows_forward(float *s, size_t lds, float *pd, size_t pd_step,
                                           bt_bf16 *tile16, size_t ld16, const float *key_bias,
                                           size_t tq, size_t tk, const ops_drop *dr,
                                           uint64_t base, const attention_ahead *ahead) {
    const ops_drop r = *dr;
    for (size_t i = 0; i < tq; i++) {
        attention_ahead_row(ahead, i);
        float *si = s + i * lds;
        const float mx = ops_max_add(si, key_bias, tk);
        for (size_t j = 0; j < lds; j++) si[j] = ops_exp(si[j] - mx);
        const float inv = 1.0f / ops_sum(si, tk);
        const float *op = si; /* row i of P·V's operand */
        if (r.on) {
            float *pdi = pd + i * pd_step;
            OPS_DROP_EACH(r, base + i * tk, tk, j, keep, {
                const float y = si[j] * inv;
                si[j] = y;
                pdi[j] = ops_drop_apply(&r, y, keep);
            });
            op = pdi;
        } else {
            for (size_t j = 0; j < lds; j++) si[j] *= inv;
        }
        if (tile16) { /* columns [tk, ld16): the zero K padding of the AMX products */
            bf16_from_f32_serial(tile16 + i * ld16, op, tk);
            memset(tile16 + i * ld16 + tk, 0, (ld16 - tk) * sizeof(bt_bf16));
        }
    }
}

/* On entry ds (or NULL; row i at ds + i lds) holds dPd = dout vᵀ for the block; on exit dS:
 *   dP = dropout(dPd) (mask and scale of the forward);  dS = P ⊙ (dP - Σ_j dP_j P_j)
 * Also, row by row while the row is in L1, the dv product's operand: with dropout and pd,
 * Pd = dropout(P) into pd (row i at pd + i*pd_step: the Tq x Tk tile, or with pd_step 0 one
 * row of scratch), in the same loop as dP, so the row's mask is made once for both; on the
 * native bf16 route pd16 (or NULL) = bf16(Pd) (or bf16(P) without dropout) and ds16 =
 * bf16(dS), the operands of the dv and of the dq and dk products (the bytes gemm would round
 * them to).
 * With vnni (the AMX products, else NULL), the rows also go, in pairs while they are in L1,
 * to the VNNI layouts the products read as B (attention_amx.h): vnni->pd (Pd, whose row-major
 * copy is then only needed two rows at a time: pd16 holds rows i at pd16 + (i % 2) ld16)
 * and vnni->ds (dS; ds16 keeps every row, the dq product's A), their rows past ceil(tq/2)
 * zeroed up to vnni->rows. */
typedef struct attention_vnni {
    bt_bf16 *pd, *ds; /* (rows, 2 n16) each, or NULL */
    size_t ld, n16, rows;
} attention_vnni;

OPS_VEC static void attention_rows_backward(float *ds, size_t lds, float *pd, size_t pd_step,
                                            bt_bf16 *pd16, bt_bf16 *ds16, size_t ld16,
                                            const float *p, size_t ldp, size_t tq, size_t tk,
                                            const ops_drop *dr, uint64_t base,
                                            const attention_vnni *vnni) {
    const ops_drop r = *dr;
    const int ring = vnni && vnni->pd; /* pd16: two rows */
    /* P is the saved probs slice, cold since the forward: its row OPS_ATTN_P_AHEAD rows on is
     * fetched while this one is worked (the pages of a row pass change every ~3 rows, where
     * the hardware's stream prefetch starts over). Measured (1 thread, B 8, T 325, no dropout,
     * min of 4): fp32 backward 60.5 -> 58.9 ms per call under the AVX2 caps, 40.9 -> 39.7 under
     * AVX512-BF16 without AMX; native bf16 within noise. A hint: no result depends on it. */
    enum { OPS_ATTN_P_AHEAD = 6 };
    for (size_t i = 0; i < tq; i++) {
        const float *pi = p + i * ldp;
        if (i + OPS_ATTN_P_AHEAD < tq)
            for (size_t j = 0; j < tk; j += 64 / sizeof(float))
                __builtin_prefetch(pi + OPS_ATTN_P_AHEAD * ldp + j, 0, 3);
        float *pdi = r.on && pd ? pd + i * pd_step : NULL, *dsi = ds ? ds + i * lds : NULL;
        if (pdi && dsi) dropout_span_pair(pdi, pi, dsi, dsi, tk, &r, base + i * tk);
        else if (pdi) dropout_span(pdi, pi, tk, &r, base + i * tk);
        else if (dsi && r.on) dropout_span(dsi, dsi, tk, &r, base + i * tk);
        const int pair = vnni && (i % 2 == 1 || i + 1 == tq); /* a VNNI row is complete */
        if (pd16) bf16_from_f32_serial(pd16 + (ring ? i % 2 : i) * ld16, pdi ? pdi : pi, tk);
        if (ring && pair)
            attention_amx_interleave(vnni->pd + i / 2 * vnni->ld, pd16,
                                     i % 2 ? pd16 + ld16 : NULL, tk, vnni->n16);
        if (!dsi) continue;
        const float dot = ops_dot(dsi, pi, tk);
        for (size_t j = 0; j < tk; j++) dsi[j] = pi[j] * (dsi[j] - dot);
        if (ds16) { /* columns [tk, ld16): the zero K padding of the AMX products */
            bf16_from_f32_serial(ds16 + i * ld16, dsi, tk);
            memset(ds16 + i * ld16 + tk, 0, (ld16 - tk) * sizeof(bt_bf16));
        }
        if (pair && vnni->ds)
            attention_amx_interleave(vnni->ds + i / 2 * vnni->ld, ds16 + (i - i % 2) * ld16,
                                     i % 2 ? ds16 + i * ld16 : NULL, tk, vnni->n16);
    }
    for (size_t v = (tq + 1) / 2; vnni && v < vnni->rows; v++) { /* the K padding of B */
        if (vnni->pd) memset(vnni->pd + v * vnni->ld, 0, 2 * vnni->n16 * sizeof(bt_bf16));
        if (vnni->ds) memset(vnni->ds + v * vnni->ld, 0, 2 * vnni->n16 * sizeof(bt_bf16));
    }
}

/* x16 (T, D) = bf16 of x_h (T rows at stride ldx): the bytes and the dense layout gemm's own
 * packing makes of an fp32 operand on the native bf16 route (gemm_onednn.c dn_pack_operand),
 * so a product reading x16 gives the bits it gives reading x_h. Returns x16. */
static const bt_bf16 *attention_round(bt_bf16 *x16, const float *x_h, size_t ldx, size_t T,
                                      size_t D) {
    for (size_t t = 0; t < T; t++) bf16_from_f32_serial(x16 + t * D, x_h + t * ldx, D);
    return x16;
}

/* One operand of a block product: its type, data and row stride. */
typedef struct attention_operand {
    bt_dtype type;
    const void *p;
    size_t ld;
} attention_operand;

/* x_h (T x D at stride ld) as a product reads it: the fp32 slice itself, or, with x16 (the
 * native bf16 route; room for T x D), its bf16 rounding (attention_round). */
static attention_operand attention_operand_of(bt_bf16 *x16, const float *x_h, size_t ld,
                                              size_t T, size_t D) {
    if (!x16) return (attention_operand){BT_DTYPE_F32, x_h, ld};
    return (attention_operand){BT_DTYPE_BF16, attention_round(x16, x_h, ld, T, D), D};
}

/* c (m x n, row stride ldc) = alpha op(a) op(b) + beta c: one block product. */
static void attention_product(int trans_a, int trans_b, size_t m, size_t n, size_t k,
                              attention_operand a, attention_operand b, float *c, size_t ldc,
                              float alpha, float beta, gemm_compute compute) {
    gemm_args g = {
        .trans_a = trans_a, .trans_b = trans_b, .m = m, .n = n, .k = k,
        .a_type = a.type, .a = a.p, .lda = a.ld, .b_type = b.type, .b = b.p, .ldb = b.ld,
        .c = c, .ldc = ldc, .alpha = alpha, .beta = beta, .compute = compute,
    };
    gemm(&g);
}

/* Row stride of the forward's per-thread fp32 tile on the gemm() routes: Tk rounded up to
 * OPS_LANES floats, so that every row starts on a 64-byte line (rows of Tk = 325 floats
 * straddle lines: the S product's C stores and P·V's A loads) and the row pass's exp and
 * scaling loops have no scalar remainder; P goes to probs by ops_stream_rows. Measured
 * (tests/bench_ops --only attention --rounds 3, 1 thread, "self image T=325 blocks", B 2,
 * dropout 0.1, key mask; with the row pass's fused passes, attention_rows_forward): forward
 * at the AVX512-BF16 caps 7.30-7.38 -> 6.81-6.84 ms per call fp32, 7.71-7.74 -> 6.95-7.02
 * bf16; AVX2 within noise. The backward's dPd/dS tile at this stride measured no faster
 * (10.55 ms per call either way at the AVX512-BF16 caps), so it keeps stride Tk. */
static size_t attention_ldt(size_t Tk) { return (Tk + OPS_LANES - 1) / OPS_LANES * OPS_LANES; }

/* tile (per thread): Tq x Tk fp32 S, then P, at row stride ldt (attention_ldt; columns
 * [Tk, ldt) are the row pass's scratch, zeroed when the tile is allocated), then with dropout
 * room for dropout(P) (Tq x ldt fp32, P·V's operand; one row on the native route, where
 * tile16 is the operand).
 * The scores go to this per-thread tile, which stays in cache from one block to the next,
 * rather than straight into the probs slice: that slice is cold (B*NH*Tq*Tk floats per call,
 * not read again until the backward), and the product stalled on its stores' line reads.
 * After the row pass P goes to probs in one streaming copy (the slice is contiguous: whole
 * lines, no line read; ops_stream_rows packs the padded rows on the way). Measured (1
 * thread, B 8, T 325, no dropout or mask, min of 3-4): scores into probs 28.4 ms per call
 * native bf16, 41.5 AVX2 fp32; into the tile with each P row copied by the row pass 22.9 /
 * 41.2 (streaming that row copy: 48 ms under AVX2, its rows' partial lines); with the
 * block's streaming copy after the pass, 20.1 -> 19.1 / 40.3 -> 38.3 (with dropout and mask
 * 23.1 -> 21.6 / 43.5 -> 43.3). Same products (only C's address differs), same bits.
 * tile16, on the native bf16 route only (else NULL): Tq x Tk + (Tq + 2 Tk) x D bf16, P·V's
 * operand written in bf16 by the row pass (the bytes gemm would round P or dropout(P) to,
 * without a second pass over it), then the bf16 q_h, k_h, v_h. */
/* S = q_h k_hᵀ / √D into tile (row stride ldt) for block (b, h); q16 / k16 (Tq x D, Tk x D
 * bf16, the native route's rounded operands) or NULL. The forward's product, and the
 * backward's when it recomputes P (probs NULL): one call, so the same bits. */
static void attention_block_scores(float *tile, size_t ldt, const float *q, const float *k,
                                   const attention_dims *d, gemm_compute compute, bt_bf16 *q16,
                                   bt_bf16 *k16, size_t b, size_t h) {
    const size_t Tq = d->Tq, Tk = d->Tk, D = d->D;
    attention_product(0, 1, Tq, Tk, D,
                      attention_operand_of(q16, q + b * Tq * d->ldq + h * D, d->ldq, Tq, D),
                      attention_operand_of(k16, k + b * Tk * d->ldk + h * D, d->ldk, Tk, D),
                      tile, ldt, (float)(1.0 / sqrt((double)D)), 0.0f, compute);
}

static void attention_block_forward(float *out, float *probs, const float *q, const float *k,
                                    const float *v, const float *key_bias,
                                    const attention_dims *d, const ops_drop *dr,
                                    gemm_compute compute, float *tile, size_t ldt,
                                    bt_bf16 *tile16, size_t b, size_t h) {
    const size_t Tq = d->Tq, Tk = d->Tk, D = d->D;
    const size_t pbase = (b * d->NH + h) * Tq * Tk, dbase = attention_drop_base(d, b, h);
    bt_bf16 *q16 = tile16 ? tile16 + Tq * Tk : NULL, *k16 = tile16 ? q16 + Tq * D : NULL;
    bt_bf16 *v16 = tile16 ? k16 + Tk * D : NULL;
    /* S = q_h k_hᵀ / √D + key_bias[b] */
    attention_block_scores(tile, ldt, q, k, d, compute, q16, k16, b, h);
    /* fetched during the row pass: v_h (P·V's operand, or on the native route the rows
     * rounded into v16 after the pass) and the product's cold output rows */
    attention_ahead ahead = {.x = {v + b * Tk * d->ldv + h * D, out + b * Tq * d->ldo + h * D},
                             .ld = {d->ldv, d->ldo}, .rows = {Tk, Tq}, .D = D};
    attention_ahead_begin(&ahead, Tq);
    float *pd = dr->on ? tile + Tq * ldt : NULL;
    attention_rows_forward(tile, ldt, pd, tile16 ? 0 : ldt, tile16, Tk,
                           key_bias ? key_bias + b * Tk : NULL, Tq, Tk, dr, dbase, &ahead);
    if (probs) { /* P to the block's probs slice (contiguous), for the backward */
        ops_stream_rows(probs + pbase, tile, Tq, Tk, ldt);
        ops_stream_fence();
    }
    /* out_h = dropout(P) v_h */
    const attention_operand pv = tile16 ? (attention_operand){BT_DTYPE_BF16, tile16, Tk}
                                        : (attention_operand){BT_DTYPE_F32, pd ? pd : tile, ldt};
    attention_product(0, 0, Tq, D, Tk, pv,
                      attention_operand_of(v16, v + b * Tk * d->ldv + h * D, d->ldv, Tk, D),
                      out + b * Tq * d->ldo + h * D, d->ldo, 1.0f, 0.0f, compute);
}

/* Recomputing P in the backward (probs NULL: the forward kept none; ops.h). ptile: Tq x ldt
 * fp32 (ldt = attention_ldt(Tk), the padding columns zeroed by the caller). The forward's
 * score product (attention_block_scores) and its row pass without a dropout output: the row
 * pass writes P as y = e * (1/Σ) with or without dropout, so P has the bits the forward's
 * had (tests/test_ops_fast.c checks the whole backward against the kept-probs one).
 * Returns ptile. */
static const float *attention_probs_of_scores(float *ptile, size_t ldt, const float *key_bias,
                                              const attention_dims *d, size_t b) {
    const ops_drop none = ops_drop_make(NULL);
    attention_rows_forward(ptile, ldt, NULL, 0, NULL, 0, key_bias ? key_bias + b * d->Tk : NULL,
                           d->Tq, d->Tk, &none, 0, NULL);
    return ptile;
}

static const float *attention_block_recompute(float *ptile, const float *q, const float *k,
                                              const float *key_bias, const attention_dims *d,
                                              gemm_compute compute, bt_bf16 *q16, bt_bf16 *k16,
                                              size_t b, size_t h) {
    const size_t ldt = attention_ldt(d->Tk);
    attention_block_scores(ptile, ldt, q, k, d, compute, q16, k16, b, h);
    return attention_probs_of_scores(ptile, ldt, key_bias, d, b);
}

/* forward, per block: S = q kᵀ/√D + bias, P = softmax(S), Pd = dropout(P), out = Pd v.
 * (beta: 1 accumulates into dq, dk, dv (BT_DX_ADD), 0 assigns them (BT_DX_SET))
 *   dv += Pdᵀ dout;  dPd = dout vᵀ;  dS = P ⊙ (dP - rowsum(dP ⊙ P)), dP = dropout(dPd);
 *   dq += dS k/√D;  dk += dSᵀ q/√D.
 * The dPd product runs first, so one row pass (attention_rows_backward) makes dS and Pd
 * with one mask per row; each product accumulates into its own output, so the order changes
 * no bit. tile: Tq x Tk floats (dPd, then dS), then Tq x Tk more: fp32 Pd (dropout only), or
 * with t16 the bf16 Pd and bf16 dS; prow: Tk floats (one row of fp32 Pd with t16). t16, on
 * the native bf16 route only (else NULL): (2 Tq + 2 Tk) x D bf16 for dout_h, q_h, k_h, v_h.
 * With t16 every product reads bf16 operands, each rounded once (dout_h and dS feed two
 * products each) to the bytes and dense layout gemm's own packing would make
 * (attention_round), so the results are the same bits. */
static void attention_block_backward(float *dq, float *dk, float *dv, const float *dout,
                                     const float *probs, const float *q, const float *k,
                                     const float *v, const float *key_bias,
                                     const attention_dims *d, const ops_drop *dr,
                                     gemm_compute compute, float beta, float *tile, float *prow,
                                     bt_bf16 *t16, float *ptile, size_t b, size_t h) {
    const size_t Tq = d->Tq, Tk = d->Tk, D = d->D;
    const size_t pbase = (b * d->NH + h) * Tq * Tk, dbase = attention_drop_base(d, b, h);
    const float scale = (float)(1.0 / sqrt((double)D));
    bt_bf16 *q16 = t16 ? t16 + Tq * D : NULL, *k16 = t16 ? q16 + Tq * D : NULL;
    bt_bf16 *v16 = t16 ? k16 + Tk * D : NULL;
    /* P: the kept probs slice, or recomputed into ptile (which leaves q16 / k16 holding the
     * forward's rounding of q_h / k_h: the dk and dq products below read them as they are) */
    const float *p = probs ? probs + pbase
                           : attention_block_recompute(ptile, q, k, key_bias, d, compute, q16,
                                                       k16, b, h);
    const int qk16_made = t16 && !probs;
    const size_t ldp = probs ? Tk : attention_ldt(Tk);
    float *ds = dq || dk ? tile : NULL;
    bt_bf16 *pd16 = t16 && dv ? (bt_bf16 *)(tile + Tq * Tk) : NULL;
    bt_bf16 *ds16 = t16 ? (bt_bf16 *)(tile + Tq * Tk) + Tq * Tk : NULL;
    float *pd = dr->on && dv ? (t16 ? prow : tile + Tq * Tk) : NULL;
    const attention_operand od =
        attention_operand_of(t16, dout + b * Tq * d->ldo + h * D, d->ldo, Tq, D);
    if (ds) /* dPd = dout_h v_hᵀ */
        attention_product(0, 1, Tq, Tk, D, od,
                          attention_operand_of(v16, v + b * Tk * d->ldv + h * D, d->ldv, Tk, D),
                          ds, Tk, 1.0f, 0.0f, compute);
    attention_rows_backward(ds, Tk, pd, t16 ? 0 : Tk, pd16, ds16, Tk, p, ldp, Tq, Tk, dr, dbase,
                            NULL);
    if (dv) { /* dv_h += Pdᵀ dout_h */
        const attention_operand a = pd16 ? (attention_operand){BT_DTYPE_BF16, pd16, Tk}
                                 : pd    ? (attention_operand){BT_DTYPE_F32, pd, Tk}
                                         : (attention_operand){BT_DTYPE_F32, p, ldp};
        attention_product(1, 0, Tk, D, Tq, a, od, dv + b * Tk * d->ldv + h * D, d->ldv, 1.0f,
                          beta, compute);
    }
    const attention_operand dS = ds16 ? (attention_operand){BT_DTYPE_BF16, ds16, Tk}
                                      : (attention_operand){BT_DTYPE_F32, ds, Tk};
    if (dq) /* dq_h += dS k_h / √D */
        attention_product(0, 0, Tq, D, Tk, dS,
                          qk16_made ? (attention_operand){BT_DTYPE_BF16, k16, D}
                                    : attention_operand_of(k16, k + b * Tk * d->ldk + h * D,
                                                           d->ldk, Tk, D),
                          dq + b * Tq * d->ldq + h * D, d->ldq, scale, beta, compute);
    if (dk) /* dk_h += dSᵀ q_h / √D */
        attention_product(1, 0, Tk, D, Tq, dS,
                          qk16_made ? (attention_operand){BT_DTYPE_BF16, q16, D}
                                    : attention_operand_of(q16, q + b * Tq * d->ldq + h * D,
                                                           d->ldq, Tq, D),
                          dk + b * Tk * d->ldk + h * D, d->ldk, scale, beta, compute);
}

/* --- the block products on AMX tiles (attention_amx.h) or AVX512-BF16 (attention_dpbf16.h) ---
 * On the native bf16 route, when the CPU has AMX-BF16 and oneDNN itself runs at its AMX level
 * (a DNNL_MAX_CPU_ISA / BT_CPU_ISA cap below AMX keeps these off), the block's products run
 * as attention_amx_gemm() calls instead of gemm(): no primitive lookup, no packing into
 * oneDNN's layouts, no copy of a strided C. Each operand is rounded to bf16 once per block
 * (bf16_from_f32_serial, the bytes of the gemm route's operands) straight into the layout
 * the tiles load: A "rows" (K contiguous, padded to 32 with zeros), B "VNNI" (pairs of K
 * rows interleaved). The row passes write P and dS as A rows (row stride padded to 32, the
 * padding zero) and, in the backward, Pd and dS as VNNI B a row pair at a time while the
 * rows are in L1. Rows of an A past its m (up to the next 16) are loaded but reach no stored
 * element of C, so they are left as they are. Products whose A would be a transpose (dv =
 * Pdᵀ dout, dk = dSᵀ q) are computed transposed (dvᵀ = doutᵀ Pd, stored transposed).
 * Where oneDNN runs at avx512_core_bf16 instead (a CPU with AVX512-BF16 and no AMX, or AMX
 * capped to it), the same operands go to attention_dpbf16_gemm() (vdpbf16ps), which reads
 * the A of dv and dk straight from Pd's and dS's VNNI layout (attention_tile_gemm_at) and
 * stores every C plain.
 * The results are the same bits as the gemm route's (oneDNN 2.6's AMX and avx512_core_bf16
 * kernels sum K in the same order; tests/test_attention_tiles.c checks it and compares both
 * with the reference). Selected by ops_attention_products_select / BT_ATTENTION_PRODUCTS
 * ("auto", "amx", "avx512_bf16", "gemm"); auto is whichever of the two may run
 * (docs/benchmarks.md, "Session 7: AMX attention products" and "Session 16: attention's
 * block products on AVX512-BF16", for the measurements). */

/* Which products the blocks use. One setting shared by every ISA variant unit. */
typedef enum { OPS_PROD_AUTO, OPS_PROD_AMX, OPS_PROD_DPBF16, OPS_PROD_GEMM } ops_prod_mode;
extern ops_prod_mode ops_attention_products;
#ifndef OPS_VARIANT
ops_prod_mode ops_attention_products = OPS_PROD_AUTO;
#endif
/* 1 when AMX products may run: AMX-BF16 granted and oneDNN's ISA is avx512_core_amx (the
 * library's unit; cached). */
int ops_attention_amx_eligible(void);
/* 1 when AVX512-BF16 products (attention_dpbf16.h) may run: the CPU runs AVX512-BF16 and
 * oneDNN's ISA is avx512_core_bf16, whose kernels they give the bits of (cached). */
int ops_attention_dpbf16_eligible(void);

/* 1 when a call with this compute runs its block products on the tile layouts: AMX products
 * where those may run, else AVX512-BF16 ones (at most one of the two is eligible: each needs
 * its own oneDNN ISA), each unless the setting names another. */
static int attention_tiles_use(gemm_compute compute) {
    if (ops_attention_products == OPS_PROD_GEMM || !ops_bf16_native(compute)) return 0;
    if (ops_attention_amx_eligible()) return ops_attention_products != OPS_PROD_DPBF16;
    return ops_attention_products != OPS_PROD_AMX && ops_attention_dpbf16_eligible();
}

/* One block product on the tile layouts (attention_amx.h): C = alpha A·B + beta C, K = k
 * (the operands padded to attention_amx_r32(k)); AMX tiles where they may run, else
 * AVX512-BF16 (attention_tiles_use said one of them runs). */
static void attention_tile_gemm(float *c, size_t ldc, int c_trans, const bt_bf16 *a, size_t lda,
                                const bt_bf16 *b, size_t ldb, size_t m, size_t n, size_t k,
                                float alpha, float beta) {
    if (ops_attention_amx_eligible())
        attention_amx_gemm(c, ldc, c_trans, a, lda, b, ldb, m, n, attention_amx_r32(k), alpha,
                           beta);
    else
        attention_dpbf16_gemm(c, ldc, (attention_dpbf16_a){a, lda / 2, 1}, b, ldb, m, n, k,
                              alpha, beta);
}

/* c (Tk x D at stride ldc) = alpha xᵀ y + beta c: the backward's dv = Pdᵀ dout_h and
 * dk = dSᵀ q_h, with xv the VNNI layout of x (Tq x Tk: K = Tq in pairs of rows, row stride
 * ldxv; the row pass writes it) and y (Tq x D fp32 at stride ldy), packed into yp (room for
 * attention_amx_r16(D) x attention_amx_r32(Tq) bf16; tmp: the packing scratch). AMX tiles
 * compute cᵀ = yᵀ x (yᵀ as A rows, xv as B, C stored transposed); AVX512-BF16 reads xv as the
 * A of the plain product (dword (j, r) at r ldxv/2 + j: the six rows of a block are neighbours
 * in one line) with y as VNNI B. The same pairs of K in the same order: the same sums. */
static void attention_tile_gemm_at(float *c, size_t ldc, const bt_bf16 *xv, size_t ldxv,
                                   const float *y, size_t ldy, bt_bf16 *yp, bt_bf16 *tmp,
                                   size_t D, size_t Tk, size_t Tq, float alpha, float beta) {
    const size_t D16 = attention_amx_r16(D), Tqp = attention_amx_r32(Tq);
    if (ops_attention_amx_eligible()) {
        attention_amx_pack_rows_t(yp, Tqp, y, ldy, Tq, D, Tqp, tmp);
        attention_amx_gemm(c, ldc, 1, yp, Tqp, xv, ldxv, D, Tk, Tqp, alpha, beta);
    } else {
        attention_amx_pack_vnni(yp, 2 * D16, y, ldy, Tq, D, Tqp, tmp);
        attention_dpbf16_gemm(c, ldc, (attention_dpbf16_a){xv, 1, ldxv / 2}, yp, 2 * D16, Tk, D,
                              Tq, alpha, beta);
    }
}

/* Sizes of a block's tile operands: r16 / r32 are the sizes rounded up to 16 (an m or n
 * edge: whole tiles are loaded) and 32 (a K: bf16 pairs of 16 dwords). */
typedef struct attention_tiles_dims {
    size_t Tq16, Tk16, D16, Tqp, Tkp, Dp;
} attention_tiles_dims;

static attention_tiles_dims attention_tiles_dims_of(const attention_dims *d) {
    return (attention_tiles_dims){attention_amx_r16(d->Tq), attention_amx_r16(d->Tk),
                                  attention_amx_r16(d->D),  attention_amx_r32(d->Tq),
                                  attention_amx_r32(d->Tk), attention_amx_r32(d->D)};
}

/* bf16 elements of packing scratch (the most any pack call of a block needs) */
static size_t attention_tiles_tmp_n(const attention_tiles_dims *z) {
    size_t n = 2 * (z->Tk16 > z->D16 ? z->Tk16 : z->D16); /* pack_vnni */
    const size_t t = attention_amx_rows_t_tmp(z->D16, z->Tqp),
                 v = attention_amx_vnni_t_tmp(z->Tk16, z->Dp);
    return n > t ? (n > v ? n : v) : (t > v ? t : v);
}

/* Per-thread bf16 elements of the forward: P (Tq16 x Tkp, A rows), q_h (Tq16 x Dp, A rows),
 * k_hᵀ (Dp/2 x 2 Tk16, VNNI), v_h (Tkp/2 x 2 D16, VNNI), packing row. */
static size_t attention_tiles_fwd_n(const attention_dims *d) {
    const attention_tiles_dims z = attention_tiles_dims_of(d);
    return z.Tq16 * z.Tkp + z.Tq16 * z.Dp + z.Dp * z.Tk16 + z.Tkp * z.D16 +
           attention_tiles_tmp_n(&z);
}

/* Bytes of one thread's scratch for the tile blocks: `floats` fp32, then `bf16` bf16 from
 * *tile_b on. Both parts start on a cache line, so every tile row is whole lines (the row
 * strides are multiples of 32 bf16); misaligned, each row of a tile load spans two lines,
 * and the products took 2.5x as long (325 x 64 x 325: 24 -> 9.3 us). */
static size_t attention_tiles_thread_bytes(size_t floats, size_t bf16, size_t *tile_b) {
    *tile_b = (floats * sizeof(float) + 63) / 64 * 64;
    return (*tile_b + bf16 * sizeof(bt_bf16) + 63) / 64 * 64;
}

/* S = q_h k_hᵀ / √D into tile (row stride ldt) by a tile product: q_h packed as A rows into qa
 * (Tq16 x Dp), k_hᵀ as VNNI B into kb (Dp/2 x 2 Tk16), tmp the packing scratch. The
 * forward's product and, with probs NULL, the backward's recompute of it (the same bits). */
static void attention_tiles_scores(float *tile, size_t ldt, bt_bf16 *qa, bt_bf16 *kb,
                                   bt_bf16 *tmp, const float *q, const float *k,
                                   const attention_dims *d, size_t b, size_t h) {
    const size_t Tq = d->Tq, Tk = d->Tk, D = d->D;
    const attention_tiles_dims z = attention_tiles_dims_of(d);
    attention_amx_pack_rows(qa, z.Dp, q + b * Tq * d->ldq + h * D, d->ldq, Tq, D, z.Dp);
    attention_amx_pack_vnni_t(kb, 2 * z.Tk16, k + b * Tk * d->ldk + h * D, d->ldk, Tk, D, z.Dp,
                              tmp);
    attention_tile_gemm(tile, ldt, 0, qa, z.Dp, kb, 2 * z.Tk16, Tq, Tk, D,
                        (float)(1.0 / sqrt((double)D)), 0.0f);
}

/* attention_block_forward with tile products (AMX or AVX512-BF16). tile: Tq x Tk fp32 (S,
 * then P) at row stride attention_ldt(Tk) (as on the gemm() routes; measured on AMX 4.50-4.55
 * -> 4.02-4.04 ms per forward call, native bf16, 1 thread, B 2, T 325, dropout 0.1, key mask,
 * min of 20 calls; 4.47-4.49 -> 3.94-4.05 without the mask), + Tk (one row of dropout(P));
 * w: attention_tiles_fwd_n bf16, 64-byte aligned. */
static void attention_block_forward_tiles(float *out, float *probs, const float *q,
                                          const float *k, const float *v, const float *key_bias,
                                          const attention_dims *d, const ops_drop *dr,
                                          float *tile, bt_bf16 *w, size_t b, size_t h) {
    const size_t Tq = d->Tq, Tk = d->Tk, D = d->D;
    const attention_tiles_dims z = attention_tiles_dims_of(d);
    const size_t pbase = (b * d->NH + h) * Tq * Tk, ldt = attention_ldt(Tk);
    const size_t dbase = attention_drop_base(d, b, h);
    bt_bf16 *p16 = w, *qa = p16 + z.Tq16 * z.Tkp, *kb = qa + z.Tq16 * z.Dp;
    bt_bf16 *vb = kb + z.Dp * z.Tk16, *tmp = vb + z.Tkp * z.D16;
    const float *v_h = v + b * Tk * d->ldv + h * D;
    float *out_h = out + b * Tq * d->ldo + h * D;
    /* S = q_h k_hᵀ / √D */
    attention_tiles_scores(tile, ldt, qa, kb, tmp, q, k, d, b, h);
    attention_ahead ahead = {.x = {v_h, out_h}, .ld = {d->ldv, d->ldo}, .rows = {Tk, Tq}, .D = D};
    attention_ahead_begin(&ahead, Tq);
    attention_rows_forward(tile, ldt, dr->on ? tile + Tq * ldt : NULL, 0, p16, z.Tkp,
                           key_bias ? key_bias + b * Tk : NULL, Tq, Tk, dr, dbase, &ahead);
    if (probs) {
        ops_stream_rows(probs + pbase, tile, Tq, Tk, ldt);
        ops_stream_fence();
    }
    /* out_h = dropout(P) v_h */
    attention_amx_pack_vnni(vb, 2 * z.D16, v_h, d->ldv, Tk, D, z.Tkp, tmp);
    attention_tile_gemm(out_h, d->ldo, 0, p16, z.Tkp, vb, 2 * z.D16, Tq, D, Tk, 1.0f, 0.0f);
}

/* Per-thread bf16 elements of the backward: two rows of bf16 Pd (2 x Tkp), dS as A rows
 * (Tq16 x Tkp), Pd and dS as VNNI B (2 x Tqp/2 x 2 Tk16), dout_h as A rows (Tq16 x Dp) and
 * transposed (D16 x Tqp), v_hᵀ VNNI (Dp/2 x 2 Tk16), k_h VNNI (Tkp/2 x 2 D16), q_hᵀ A rows
 * (D16 x Tqp), packing scratch. */
static size_t attention_tiles_bwd_n(const attention_dims *d) {
    const attention_tiles_dims z = attention_tiles_dims_of(d);
    return 2 * z.Tkp + z.Tq16 * z.Tkp + 2 * z.Tqp * z.Tk16 + z.Tq16 * z.Dp + 2 * z.D16 * z.Tqp +
           z.Dp * z.Tk16 + z.Tkp * z.D16 + attention_tiles_tmp_n(&z);
}

/* attention_block_backward with tile products (the same formulas, in the same order).
 * tile: Tq x Tk16 fp32 (dPd, then dS; rows of whole cache lines, where the product's tile
 * stores go: 325 x 325 x 64 took 17.7 us into rows of 325 floats, 12.5 us into rows of 336),
 * + Tk (one row of fp32 Pd); w: attention_tiles_bwd_n bf16, 64-byte aligned. */
static void attention_block_backward_tiles(float *dq, float *dk, float *dv, const float *dout,
                                           const float *probs, const float *q, const float *k,
                                           const float *v, const float *key_bias,
                                           const attention_dims *d, const ops_drop *dr,
                                           float beta, float *tile, bt_bf16 *w, float *ptile,
                                           size_t b, size_t h) {
    const size_t Tq = d->Tq, Tk = d->Tk, D = d->D;
    const attention_tiles_dims z = attention_tiles_dims_of(d);
    const size_t pbase = (b * d->NH + h) * Tq * Tk, dbase = attention_drop_base(d, b, h);
    const float scale = (float)(1.0 / sqrt((double)D));
    bt_bf16 *pd16 = w, *ds16 = pd16 + 2 * z.Tkp, *pdv = ds16 + z.Tq16 * z.Tkp;
    bt_bf16 *dsv = pdv + z.Tqp * z.Tk16, *oa = dsv + z.Tqp * z.Tk16, *ot = oa + z.Tq16 * z.Dp;
    bt_bf16 *vt = ot + z.D16 * z.Tqp, *kv = vt + z.Dp * z.Tk16, *qt = kv + z.Tkp * z.D16;
    bt_bf16 *tmp = qt + z.D16 * z.Tqp;
    const float *dout_h = dout + b * Tq * d->ldo + h * D, *q_h = q + b * Tq * d->ldq + h * D;
    const float *k_h = k + b * Tk * d->ldk + h * D, *v_h = v + b * Tk * d->ldv + h * D;
    /* P: the kept probs slice, or recomputed into ptile (Tq x attention_ldt(Tk)) with oa and
     * vt, packed again below, as the score product's operands */
    const float *p = probs + pbase;
    size_t ldp = Tk;
    if (!probs) {
        ldp = attention_ldt(Tk);
        attention_tiles_scores(ptile, ldp, oa, vt, tmp, q, k, d, b, h);
        p = attention_probs_of_scores(ptile, ldp, key_bias, d, b);
    }
    float *ds = dq || dk ? tile : NULL;
    if (ds) { /* dPd = dout_h v_hᵀ */
        attention_amx_pack_rows(oa, z.Dp, dout_h, d->ldo, Tq, D, z.Dp);
        attention_amx_pack_vnni_t(vt, 2 * z.Tk16, v_h, d->ldv, Tk, D, z.Dp, tmp);
        attention_tile_gemm(ds, z.Tk16, 0, oa, z.Dp, vt, 2 * z.Tk16, Tq, Tk, D, 1.0f, 0.0f);
    }
    /* dS (and Pd) as A rows and, in the same pass, as VNNI B */
    const attention_vnni vnni = {.pd = dv ? pdv : NULL, .ds = dk ? dsv : NULL,
                                 .ld = 2 * z.Tk16, .n16 = z.Tk16, .rows = z.Tqp / 2};
    attention_rows_backward(ds, z.Tk16, dr->on && dv ? tile + Tq * z.Tk16 : NULL, 0,
                            dv ? pd16 : NULL, ds ? ds16 : NULL, z.Tkp, p, ldp, Tq, Tk, dr, dbase,
                            &vnni);
    if (dv) /* dv_h += Pdᵀ dout_h (AMX: dv_hᵀ += dout_hᵀ Pd) */
        attention_tile_gemm_at(dv + b * Tk * d->ldv + h * D, d->ldv, pdv, 2 * z.Tk16, dout_h,
                               d->ldo, ot, tmp, D, Tk, Tq, 1.0f, beta);
    if (dq) { /* dq_h += dS k_h / √D */
        attention_amx_pack_vnni(kv, 2 * z.D16, k_h, d->ldk, Tk, D, z.Tkp, tmp);
        attention_tile_gemm(dq + b * Tq * d->ldq + h * D, d->ldq, 0, ds16, z.Tkp, kv, 2 * z.D16,
                            Tq, D, Tk, scale, beta);
    }
    if (dk) /* dk_h += dSᵀ q_h / √D (AMX: dk_hᵀ += q_hᵀ dS / √D) */
        attention_tile_gemm_at(dk + b * Tk * d->ldk + h * D, d->ldk, dsv, 2 * z.Tk16, q_h,
                               d->ldq, qt, tmp, D, Tk, Tq, scale, beta);
}

/* S of batch item b's NH heads into pb (NH, Tq, Tk): one batched gemm(). The forward's and,
 * with probs NULL, the backward's recompute of it. */
static void attention_batched_scores(float *pb, const float *q, const float *k,
                                     const attention_dims *d, gemm_compute compute, size_t b) {
    const size_t Tq = d->Tq, Tk = d->Tk, D = d->D;
    gemm_args s = {
        .trans_a = 0, .trans_b = 1, .m = Tq, .n = Tk, .k = D,
        .a_type = BT_DTYPE_F32, .a = q + b * Tq * d->ldq, .lda = d->ldq,
        .b_type = BT_DTYPE_F32, .b = k + b * Tk * d->ldk, .ldb = d->ldk,
        .c = pb, .ldc = Tk, .alpha = (float)(1.0 / sqrt((double)D)), .beta = 0.0f,
        .compute = compute, .batch = d->NH, .stride_a = D, .stride_b = D, .stride_c = Tq * Tk,
    };
    gemm(&s);
}

/* Strategy (b): batch items one after another; per item, the NH heads' products are one
 * batched gemm() (heads are column slices: stride D), which threads internally; the row
 * work is an OpenMP loop over heads. Scratch holds NH tiles. */
static void attention_forward_batched(float *out, float *probs, const float *q, const float *k,
                                      const float *v, const float *key_bias,
                                      const attention_dims *d, const ops_drop *dr,
                                      gemm_compute compute) {
    const size_t Tq = d->Tq, Tk = d->Tk, D = d->D, NH = d->NH, blk = Tq * Tk;
    float *tile = dr->on ? bt_alloc(NH * blk * sizeof(float)) : NULL;
    float *own = probs ? NULL : bt_alloc(NH * blk * sizeof(float)); /* P not kept: one item's */
    for (size_t b = 0; b < d->B; b++) {
        float *pb = probs ? probs + b * NH * blk : own; /* (NH, Tq, Tk) */
        attention_batched_scores(pb, q, k, d, compute, b);
        OPS_OMP(omp parallel for schedule(static) if (NH * blk >= OPS_PAR_MIN))
        for (size_t h = 0; h < NH; h++)
            attention_rows_forward(pb + h * blk, Tk, tile ? tile + h * blk : NULL, Tk, NULL, 0,
                                   key_bias ? key_bias + b * Tk : NULL, Tq, Tk, dr,
                                   attention_drop_base(d, b, h), NULL);
        gemm_args o = {
            .trans_a = 0, .trans_b = 0, .m = Tq, .n = D, .k = Tk,
            .a_type = BT_DTYPE_F32, .a = tile ? tile : pb, .lda = Tk,
            .b_type = BT_DTYPE_F32, .b = v + b * Tk * d->ldv, .ldb = d->ldv,
            .c = out + b * Tq * d->ldo, .ldc = d->ldo, .alpha = 1.0f, .beta = 0.0f,
            .compute = compute, .batch = NH, .stride_a = blk, .stride_b = D, .stride_c = D,
        };
        gemm(&o);
    }
    bt_free(tile);
    bt_free(own);
}

static void attention_backward_batched(float *dq, float *dk, float *dv, const float *dout,
                                       const float *probs, const float *q, const float *k,
                                       const float *v, const float *key_bias,
                                       const attention_dims *d, const ops_drop *dr,
                                       gemm_compute compute, float beta) {
    const size_t Tq = d->Tq, Tk = d->Tk, D = d->D, NH = d->NH, blk = Tq * Tk;
    const float scale = (float)(1.0 / sqrt((double)D));
    float *ds = bt_alloc(NH * blk * sizeof(float));
    float *pd = dr->on && dv ? bt_alloc(NH * blk * sizeof(float)) : NULL;
    float *own = probs ? NULL : bt_alloc(NH * blk * sizeof(float)); /* P recomputed: one item's */
    const ops_drop none = ops_drop_make(NULL);
    for (size_t b = 0; b < d->B; b++) {
        const float *pb = probs ? probs + b * NH * blk : own;
        if (!probs) { /* the forward's products and row passes, without a dropout output */
            attention_batched_scores(own, q, k, d, compute, b);
            OPS_OMP(omp parallel for schedule(static) if (NH * blk >= OPS_PAR_MIN))
            for (size_t h = 0; h < NH; h++)
                attention_rows_forward(own + h * blk, Tk, NULL, 0, NULL, 0,
                                       key_bias ? key_bias + b * Tk : NULL, Tq, Tk, &none, 0, NULL);
        }
        const float *dout_b = dout + b * Tq * d->ldo;
        if (dv) { /* dv_h += Pd_hᵀ dout_h */
            if (pd)
                OPS_FOR_CHUNKS(NH * blk, lo, len,
                               dropout_span(pd + lo, pb + lo, len, dr, b * NH * blk + lo));
            gemm_args g = {
                .trans_a = 1, .trans_b = 0, .m = Tk, .n = D, .k = Tq,
                .a_type = BT_DTYPE_F32, .a = pd ? pd : pb, .lda = Tk,
                .b_type = BT_DTYPE_F32, .b = dout_b, .ldb = d->ldo,
                .c = dv + b * Tk * d->ldv, .ldc = d->ldv, .alpha = 1.0f, .beta = beta,
                .compute = compute, .batch = NH, .stride_a = blk, .stride_b = D, .stride_c = D,
            };
            gemm(&g);
        }
        if (!dq && !dk) continue;
        gemm_args g = { /* dPd_h = dout_h v_hᵀ */
            .trans_a = 0, .trans_b = 1, .m = Tq, .n = Tk, .k = D,
            .a_type = BT_DTYPE_F32, .a = dout_b, .lda = d->ldo,
            .b_type = BT_DTYPE_F32, .b = v + b * Tk * d->ldv, .ldb = d->ldv,
            .c = ds, .ldc = Tk, .alpha = 1.0f, .beta = 0.0f, .compute = compute,
            .batch = NH, .stride_a = D, .stride_b = D, .stride_c = blk,
        };
        gemm(&g);
        OPS_OMP(omp parallel for schedule(static) if (NH * blk >= OPS_PAR_MIN))
        for (size_t h = 0; h < NH; h++)
            attention_rows_backward(ds + h * blk, Tk, NULL, 0, NULL, NULL, 0, pb + h * blk, Tk, Tq,
                                    Tk, dr, attention_drop_base(d, b, h), NULL);
        if (dq) { /* dq_h += dS_h k_h / √D */
            gemm_args gq = {
                .trans_a = 0, .trans_b = 0, .m = Tq, .n = D, .k = Tk,
                .a_type = BT_DTYPE_F32, .a = ds, .lda = Tk,
                .b_type = BT_DTYPE_F32, .b = k + b * Tk * d->ldk, .ldb = d->ldk,
                .c = dq + b * Tq * d->ldq, .ldc = d->ldq, .alpha = scale, .beta = beta,
                .compute = compute, .batch = NH, .stride_a = blk, .stride_b = D, .stride_c = D,
            };
            gemm(&gq);
        }
        if (dk) { /* dk_h += dS_hᵀ q_h / √D */
            gemm_args gk = {
                .trans_a = 1, .trans_b = 0, .m = Tk, .n = D, .k = Tq,
                .a_type = BT_DTYPE_F32, .a = ds, .lda = Tk,
                .b_type = BT_DTYPE_F32, .b = q + b * Tq * d->ldq, .ldb = d->ldq,
                .c = dk + b * Tk * d->ldk, .ldc = d->ldk, .alpha = scale, .beta = beta,
                .compute = compute, .batch = NH, .stride_a = blk, .stride_b = D, .stride_c = D,
            };
            gemm(&gk);
        }
    }
    bt_free(ds);
    bt_free(pd);
    bt_free(own);
}

static void attention_check(const attention_dims *d) {
    BT_ASSERT(d != NULL);
    BT_ASSERT(d->B > 0 && d->Tq > 0 && d->Tk > 0 && d->NH > 0 && d->D > 0);
    const size_t c = d->NH * d->D;
    BT_ASSERT(d->ldq >= c && d->ldk >= c && d->ldv >= c && d->ldo >= c);
}

/* Zeroes the padding columns [Tk, ldt) of each thread's Tq x ldt tile (at tiles + t stride):
 * the row pass's exp runs over them, and uninitialized bytes could be subnormal (slow). */
static void attention_tiles_pad(char *tiles, int nthr, size_t stride, size_t Tq, size_t Tk,
                                size_t ldt) {
    for (int t = 0; t < nthr; t++)
        for (size_t i = 0; i < Tq; i++)
            memset((float *)(tiles + (size_t)t * stride) + i * ldt + Tk, 0,
                   (ldt - Tk) * sizeof(float));
}

void OPS_LEVEL_NAME(attention_forward_fast)(float *out, float *probs, const float *q,
                                            const float *k, const float *v,
                                            const float *key_bias, const attention_dims *d,
                                            const bt_dropout *drop, gemm_compute compute) {
    attention_check(d);
    BT_ASSERT(out && q && k && v); /* probs NULL: P not kept (ops.h) */
    const ops_drop dr = ops_drop_make(drop);
    if (ops_attention_resolve() == OPS_ATTN_GEMM) {
        attention_forward_batched(out, probs, q, k, v, key_bias, d, &dr, compute);
        return;
    }
    const size_t nblk = d->B * d->NH;
    const int par = nblk > 1 && d->Tq * d->Tk * d->D >= OPS_PAR_MIN / 8;
    const int nthr = par ? ops_max_threads() : 1;
    const size_t ldt = attention_ldt(d->Tk);
    if (attention_tiles_use(compute)) { /* per thread: Tq x ldt + Tk floats, then the bf16 */
        size_t tile_b;
        const size_t stride =
            attention_tiles_thread_bytes(d->Tq * ldt + d->Tk, attention_tiles_fwd_n(d), &tile_b);
        char *tiles = bt_alloc((size_t)nthr * stride);
        attention_tiles_pad(tiles, nthr, stride, d->Tq, d->Tk, ldt);
        OPS_OMP(omp parallel for schedule(dynamic, 1) if (par))
        for (size_t blk = 0; blk < nblk; blk++) {
            char *mine = tiles + (size_t)ops_thread_num() * stride;
            attention_block_forward_tiles(out, probs, q, k, v, key_bias, d, &dr, (float *)mine,
                                          (bt_bf16 *)(mine + tile_b), blk / d->NH, blk % d->NH);
        }
        bt_free(tiles);
        return;
    }
    /* per thread: the fp32 tile (Tq x ldt), dropout(P) (Tq x ldt, or one row on the native
     * route) and tile16 */
    const int native = ops_bf16_native(compute);
    const size_t tile_n = d->Tq * ldt + (dr.on ? (native ? ldt : d->Tq * ldt) : 0);
    const size_t tile16_n = native ? d->Tq * d->Tk + (d->Tq + 2 * d->Tk) * d->D : 0;
    const size_t stride = (tile_n * sizeof(float) + tile16_n * sizeof(bt_bf16) + 63) / 64 * 64;
    char *tiles = bt_alloc((size_t)nthr * stride);
    attention_tiles_pad(tiles, nthr, stride, d->Tq, d->Tk, ldt);
    OPS_OMP(omp parallel for schedule(dynamic, 1) if (par))
    for (size_t blk = 0; blk < nblk; blk++) {
        char *mine = tiles + (size_t)ops_thread_num() * stride;
        bt_bf16 *tile16 = tile16_n ? (bt_bf16 *)(mine + tile_n * sizeof(float)) : NULL;
        attention_block_forward(out, probs, q, k, v, key_bias, d, &dr, compute, (float *)mine,
                                ldt, tile16, blk / d->NH, blk % d->NH);
    }
    bt_free(tiles);
}

void OPS_LEVEL_NAME(attention_backward_fast)(float *dq, float *dk, float *dv,
                                             const float *dout, const float *probs,
                                             const float *q, const float *k, const float *v,
                                             const float *key_bias, const attention_dims *d,
                                             const bt_dropout *drop, gemm_compute compute,
                                             bt_dx_mode mode) {
    attention_check(d);
    BT_ASSERT(dout && q && k && v); /* probs NULL: P recomputed (ops.h) */
    if (!dq && !dk && !dv) return;
    const ops_drop dr = ops_drop_make(drop);
    const float beta = mode == BT_DX_ADD ? 1.0f : 0.0f;
    if (ops_attention_resolve() == OPS_ATTN_GEMM) {
        attention_backward_batched(dq, dk, dv, dout, probs, q, k, v, key_bias, d, &dr, compute,
                                   beta);
        return;
    }
    const size_t nblk = d->B * d->NH;
    const int par = nblk > 1 && d->Tq * d->Tk * d->D >= OPS_PAR_MIN / 8;
    const int nthr = par ? ops_max_threads() : 1;
    /* without probs, per thread also the recomputed P: Tq x ldt floats, the padding zeroed */
    const size_t ldt = attention_ldt(d->Tk);
    const size_t ptile_b = probs ? 0 : (d->Tq * ldt * sizeof(float) + 63) / 64 * 64;
    if (attention_tiles_use(compute)) { /* per thread: Tq x Tk16 + Tk floats, then the bf16 */
        size_t tile_b;
        const size_t stride = ptile_b + attention_tiles_thread_bytes(
                                            d->Tq * attention_amx_r16(d->Tk) + d->Tk,
                                            attention_tiles_bwd_n(d), &tile_b);
        char *tiles = bt_alloc((size_t)nthr * stride);
        if (ptile_b) attention_tiles_pad(tiles, nthr, stride, d->Tq, d->Tk, ldt);
        OPS_OMP(omp parallel for schedule(dynamic, 1) if (par))
        for (size_t blk = 0; blk < nblk; blk++) {
            char *mine = tiles + (size_t)ops_thread_num() * stride, *rest = mine + ptile_b;
            attention_block_backward_tiles(dq, dk, dv, dout, probs, q, k, v, key_bias, d, &dr,
                                           beta, (float *)rest, (bt_bf16 *)(rest + tile_b),
                                           (float *)mine, blk / d->NH, blk % d->NH);
        }
        bt_free(tiles);
        return;
    }
    /* per thread: the recomputed P (ptile_b), 2 Tq x Tk floats (tile), Tk floats (row
     * scratch), and on the native route (2 Tq + 2 Tk) x D bf16 */
    const int native = ops_bf16_native(compute);
    const size_t tile_b = 2 * d->Tq * d->Tk * sizeof(float);
    const size_t rows_b = d->Tk * sizeof(float);
    const size_t t16_b = native ? 2 * (d->Tq + d->Tk) * d->D * sizeof(bt_bf16) : 0;
    const size_t stride = (ptile_b + tile_b + rows_b + t16_b + 63) / 64 * 64;
    char *tiles = bt_alloc((size_t)nthr * stride);
    if (ptile_b) attention_tiles_pad(tiles, nthr, stride, d->Tq, d->Tk, ldt);
    OPS_OMP(omp parallel for schedule(dynamic, 1) if (par))
    for (size_t blk = 0; blk < nblk; blk++) {
        char *mine = tiles + (size_t)ops_thread_num() * stride, *rest = mine + ptile_b;
        const size_t b = blk / d->NH, h = blk % d->NH;
        attention_block_backward(dq, dk, dv, dout, probs, q, k, v, key_bias, d, &dr, compute,
                                 beta, (float *)rest, (float *)(rest + tile_b),
                                 native ? (bt_bf16 *)(rest + tile_b + rows_b) : NULL,
                                 (float *)mine, b, h);
    }
    bt_free(tiles);
}

#ifndef OPS_VARIANT
/* --- the settings (the library's unit) ------------------------------------------------------ */

/* The names of the two settings, in their enums' order. */
static const char *const attention_threads_names[] = {"auto", "blocks", "gemm"};
static const char *const attention_products_names[] = {"auto", "amx", "avx512_bf16", "gemm"};
#define ATTENTION_THREADS_ALLOWED "'auto', 'blocks' or 'gemm'"
#define ATTENTION_PRODUCTS_ALLOWED "'auto', 'amx', 'avx512_bf16' or 'gemm'"

/* The index of `name` among the n names, or -1; NAME_INDEX(name, array) counts the array. */
static int attention_name_index(const char *name, const char *const *names, int n) {
    for (int i = 0; i < n; i++)
        if (strcmp(name, names[i]) == 0) return i;
    return -1;
}
#define NAME_INDEX(name, names) \
    attention_name_index(name, names, (int)(sizeof names / sizeof *names))

static int ops_attention_set(const char *name) {
    const int i = NAME_INDEX(name, attention_threads_names);
    if (i >= 0) ops_attention_mode = (ops_attn_mode)i;
    return i >= 0;
}

static int ops_attention_products_set(const char *name) {
    const int i = NAME_INDEX(name, attention_products_names);
    if (i >= 0) ops_attention_products = (ops_prod_mode)i;
    return i >= 0;
}

bt_status attention_settings_check(void) {
    const char *mode = bt_setting_value(BT_SET_ATTENTION_THREADS);
    if (mode && *mode && NAME_INDEX(mode, attention_threads_names) < 0)
        return bt_fail(BT_ERR_ARG, "environment variable BT_ATTENTION_THREADS: '%s' is "
                       "unknown; expected " ATTENTION_THREADS_ALLOWED, mode);
    const char *prod = bt_setting_value(BT_SET_ATTENTION_PRODUCTS);
    if (prod && *prod && NAME_INDEX(prod, attention_products_names) < 0)
        return bt_fail(BT_ERR_ARG, "environment variable BT_ATTENTION_PRODUCTS: '%s' is "
                       "unknown; expected " ATTENTION_PRODUCTS_ALLOWED, prod);
    return BT_OK;
}

void attention_settings_init(void) {
    const char *mode = bt_setting_value(BT_SET_ATTENTION_THREADS);
    if (mode && *mode && !ops_attention_set(mode))
        fprintf(stderr, "bt: warning: environment variable BT_ATTENTION_THREADS=%s is not "
                        ATTENTION_THREADS_ALLOWED "; using 'auto'\n", mode);
    const char *prod = bt_setting_value(BT_SET_ATTENTION_PRODUCTS);
    if (prod && *prod && !ops_attention_products_set(prod))
        fprintf(stderr, "bt: warning: environment variable BT_ATTENTION_PRODUCTS=%s is not "
                        ATTENTION_PRODUCTS_ALLOWED "; using 'auto'\n", prod);
}

int ops_attention_threads_select(const char *name) {
    kernels_init();
    return name ? ops_attention_set(name) : 0;
}

const char *ops_attention_threads_name(void) {
    kernels_init();
    const char *resolved = ops_attention_resolve() == OPS_ATTN_GEMM ? "gemm" : "blocks";
    return ops_attention_mode == OPS_ATTN_AUTO
               ? (ops_attention_resolve() == OPS_ATTN_GEMM ? "auto (gemm)" : "auto (blocks)")
               : resolved;
}

/* 1 when hand-written block products may run ("the block products on AMX tiles" above): the
 * CPU runs them (`available`) and oneDNN runs at `isa`, the ISA whose kernels give their bits
 * (not capped below it). Decided once per `cache`. */
static int attention_products_eligible(_Atomic int *cache, int (*available)(void),
                                       const char *isa) {
    int e = atomic_load(cache);
    if (e < 0) {
        e = available() && strcmp(gemm_cpu_isa_name(), isa) == 0;
        atomic_store(cache, e);
    }
    return e;
}

#if BT_AMX_EMULATED
/* test_attention_amx_emulated's library (attention_amx_emulated.h): the emulated tiles run
 * beside whichever oneDNN ISA runs the native bf16 route, which ops_bf16_native still asks */
int ops_attention_amx_eligible(void) { return attention_amx_available(); }
#else
int ops_attention_amx_eligible(void) {
    static _Atomic int eligible = -1;
    return attention_products_eligible(&eligible, attention_amx_available, "avx512_core_amx");
}
#endif

int ops_attention_dpbf16_eligible(void) {
    static _Atomic int eligible = -1;
    return attention_products_eligible(&eligible, attention_dpbf16_available,
                                       "avx512_core_bf16");
}

int ops_attention_products_select(const char *name) {
    kernels_init();
    return name ? ops_attention_products_set(name) : 0;
}

const char *ops_attention_products_name(void) {
    kernels_init();
    const int amx = ops_attention_amx_eligible(), dp = ops_attention_dpbf16_eligible();
    switch (ops_attention_products) {
    case OPS_PROD_AMX:
        return amx ? "amx (native bf16 blocks)" : "amx requested, gemm (no AMX at oneDNN's ISA)";
    case OPS_PROD_DPBF16:
        return dp ? "avx512_bf16 (native bf16 blocks)"
                  : "avx512_bf16 requested, gemm (oneDNN's ISA is not avx512_core_bf16)";
    case OPS_PROD_GEMM:
        return "gemm";
    default:
        return amx  ? "auto (amx for native bf16 blocks)"
               : dp ? "auto (avx512_bf16 for native bf16 blocks)"
                    : "auto (gemm: neither AMX nor AVX512-BF16 at oneDNN's ISA)";
    }
}
#endif /* !OPS_VARIANT */
