/* ops.h: the numerical kernels of a transformer, each a forward/backward pair (fp32).
 *
 * Dimension letters used in the shape comments:
 *   N  rows (tokens, usually B*T)      C   channels (features) of a row
 *   OC output channels of a Linear     V   classes (vocabulary) of a cross entropy
 *   B  batch   Tq/Tk query/key length  NH  heads   D  head size (C = NH*D)
 *
 * Conventions (docs/style.md 3):
 *   - outputs first, then inputs, then sizes; `const` on inputs; shapes asserted on entry.
 *   - forward ASSIGNS its outputs (out may alias x only where the comment says so).
 *   - backward ACCUMULATES (+=) into the parameter gradients it writes. An activation
 *     gradient dx is written as the caller's bt_dx_mode says: BT_DX_ADD accumulates, so
 *     streams that merge (residuals, bridges, shared rows) need no special case (callers
 *     zero such buffers once per step); BT_DX_SET assigns, for dx's only writer (or its first
 *     in backward order), so dx needs no zeroing and is not read. A NULL gradient pointer
 *     skips it.
 *
 * Dispatch: each public function calls through a kernel table that kernels_init() fills with
 * the plain reference (ops_ref.h) first and then overrides with the fast (OpenMP, vectorized)
 * versions. The table entries, the wrappers and the reference prototypes are generated from
 * one list, ops_table.h (a new kernel: a line there, its documented prototype here, a
 * reference, a fast version, tests). BT_KERNELS=ref in the environment, or ops_use_reference(1), keeps the reference
 * (BT_KERNELS=fast or unset: the fast kernels; any other value is reported on stderr).
 * Tests pit every fast kernel against its reference (tests/test_ops_fast.c) and every
 * reference backward against central finite differences in double (tests/test_ops_grad.c).
 *
 * ISA levels (cpu.h): the fast kernels are built once per level (baseline "scalar", "avx2",
 * "avx512"); kernels_init() takes the table of bt_cpu_isa_active(), i.e. the best the CPU
 * runs, capped by BT_CPU_ISA. Every level gives the same bits (tests/test_determinism.c).
 *
 * Deliberately not here: the GEMM itself (gemm.h), model wiring (the towers in src/model/). */
#ifndef BT_OPS_H
#define BT_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/cpu.h"
#include "dtype.h"
#include "kernels/gemm.h"

/* Fills the kernel table (idempotent; called implicitly on first use). Honors BT_KERNELS,
 * BT_CPU_ISA (cpu.h) and BT_ATTENTION_THREADS. */
void kernels_init(void);
/* BT_OK when BT_KERNELS, BT_ATTENTION_THREADS and BT_ATTENTION_PRODUCTS are unset or one of
 * their names; else BT_ERR_ARG naming the variable, the value and the names. kernels_init
 * itself cannot fail (it warns and keeps the default); the tools call this first
 * (cpu.h bt_runtime_check_env). */
bt_status kernels_settings_check(void);
/* 1: route every public kernel to its reference version; 0: fastest available. */
void ops_use_reference(int on);
/* "fast" or "ref": the table the public kernels call now. */
const char *ops_kernels_name(void);
/* The ISA level of the fast kernel table (also that of the bf16 conversion). */
bt_isa ops_cpu_isa(void);
/* For tests: switch the fast table to ISA level `isa` if this build has that
 * variant and the CPU runs it (returns 1), else change nothing and return 0. Also selects
 * the bf16 conversion of that level. Not while kernels run on other threads. */
int ops_cpu_isa_select(bt_isa isa);

/* How a backward writes an activation gradient dx (parameter gradients always accumulate).
 * BT_DX_SET stores 0 + v where BT_DX_ADD stores dx + v, so on a zeroed dx the two leave the
 * same bits (-0 included: 0 + -0 = +0); dx's old contents are not read (they may be NaN).
 * The GEMM-based kernels (linear, attention) get it from the GEMM's beta (0: C not read;
 * their sums start from +0, so no -0 either). One exception to "the same bits": linear's dx
 * on the native bf16 route (oneDNN's AMX brgemm sums over K in another order when beta is
 * 0, e.g. at K 1536, 2304 and 50265): there SET and ADD onto zeros are two orders of the
 * same fp32 sum of exact bf16 products, equal within 2 k 2^-24 Σ|dout w| per element, still
 * never -0 and deterministic. Checked for every kernel that takes a mode: SET into a
 * sentinel = ADD onto zeros, bit for bit, except that one, within that bound
 * (tests/test_ops_fast.c). */
typedef enum {
    BT_DX_ADD, /* dx += ... */
    BT_DX_SET, /* dx = ... */
} bt_dx_mode;

/* --- dropout --------------------------------------------------------------------------
 * keep(i) is a pure function of (seed, i) (a counter-based hash, see ops_blocks.h), so the backward
 * regenerates the mask instead of storing it, and results do not depend on thread count.
 * The mask multiplies, as in torch: m(i) = keep(i) ? 1/(1-p) : 0, so a dropped NaN or Inf
 * stays NaN (never hidden) and a dropped negative value is -0.
 * p == 0 or a NULL bt_dropout* means identity. p outside [0, 1) is a BT_ASSERT. */
typedef struct bt_dropout {
    float p;       /* drop probability in [0, 1) */
    uint64_t seed; /* one seed per op call site and step */
} bt_dropout;

int dropout_keep(const bt_dropout *d, uint64_t i);
/* out (N) = x · m(i).  out may alias x. */
void dropout_forward(float *out, const float *x, size_t n, const bt_dropout *d);
/* dx (N) += dout · m(i)  (= with BT_DX_SET) */
void dropout_backward(float *dx, const float *dout, size_t n, const bt_dropout *d,
                      bt_dx_mode mode);

/* --- Linear (torch layout) ------------------------------------------------------------
 * out (N, OC) = x (N, C) · wᵀ + b, w (OC, C), b (OC) or NULL.
 * w_bf16: optional bf16 copy of w, used as the GEMM operand when compute is BF16.
 * w_packed: optional copy of w packed by gemm_pack_weight (gemm.h "Packed weights"), the
 * GEMM operand on the oneDNN backend: bf16 under compute BF16 on the native route (instead
 * of w_bf16; elsewhere, another route or the reference, it is not read and w_bf16, or w
 * rounded to bf16, gives the same bits), fp32 under compute F32, where it may be w itself
 * packed in place: w is then NULL, and only the fast kernels on oneDNN can run the product
 * (a model packs its fp32 weights only there: model.h bt_model_pack_weights).
 * x_bf16: optional (N, C) input already rounded to bf16 (compute BF16 only): when given it is
 * the GEMM operand and x is not read (may be NULL). Since a BF16 product rounds an fp32 x to
 * exactly these bits (gemm.h), passing x_bf16 = bf16(x) instead of x gives the same result;
 * it saves the rounding and, stored instead of x, half the memory (model.h "bf16 activation
 * storage"). */
void linear_forward(float *out, const float *x, const bt_bf16 *x_bf16, const float *w,
                    const bt_bf16 *w_bf16, const void *w_packed, const float *b, size_t n,
                    size_t c, size_t oc, gemm_compute compute);
/* dx (N, C) += dout · w (= with BT_DX_SET: the GEMM's beta 0, dx not read; on the native
 * bf16 route not the bits of ADD onto zeros, see bt_dx_mode);
 * dw (OC, C) += doutᵀ · x;  db (OC) += Σ_rows dout.
 * x / x_bf16 as in the forward (the dw product's operand).
 * dout_bf16: optional (N, OC) bf16 rounding of dout (compute BF16 only), then the operand of
 * both products (the bits a BF16 product makes of dout itself, so the same result); dout is
 * read only for db (fp32 sums) and may be NULL when db is. See linear_backward_dout_bf16. */
void linear_backward(float *dx, float *dw, float *db, const float *dout,
                     const bt_bf16 *dout_bf16, const float *x, const bt_bf16 *x_bf16,
                     const float *w, const bt_bf16 *w_bf16, size_t n, size_t c, size_t oc,
                     gemm_compute compute, bt_dx_mode mode);
/* 1 when linear_backward with both dx and dw, given an fp32 dout, rounds it to bf16 once for
 * its two products (oneDNN's native bf16 route): a caller that computes dout may then write
 * dout_bf16 instead, in the same pass, and skip the fp32 dout (gelu_backward_bias). */
int linear_backward_dout_bf16(gemm_compute compute);

/* --- LayerNorm over the last dimension (biased variance) --------------------------------
 * out (N, C) = (x - mean) * rstd * w + b;  saves mean (N), rstd (N) = 1/sqrt(var + eps).
 * out may alias x. */
void layernorm_forward(float *out, float *mean, float *rstd, const float *x, const float *w,
                       const float *b, size_t n, size_t c, float eps);
/* The same row statistics, and out (N, C) the bf16 rounding (round to nearest even) of the
 * value layernorm_forward would store: bit for bit bf16_from_f32 of its output, without the
 * fp32 row (for an output only bf16 GEMMs read). out does not alias x. */
void layernorm_forward_bf16(bt_bf16 *out, float *mean, float *rstd, const float *x,
                            const float *w, const float *b, size_t n, size_t c, float eps);
/* dx += ... (= with BT_DX_SET), dw, db += ...;  x is the forward input (not aliased with out
 * when backward is used). */
void layernorm_backward(float *dx, float *dw, float *db, const float *dout, const float *x,
                        const float *w, const float *mean, const float *rstd, size_t n,
                        size_t c, bt_dx_mode mode);
/* The backward of a LayerNorm whose input also feeds a residual, x → out = x + f(LN(x))
 * (a pre-LN block), with res (N, C) the residual's gradient (read only):
 *   BT_DX_SET: dx (N, C) = res + LN'(dout)  (dx not read; bit for bit a copy of res into dx
 *              followed by layernorm_backward(BT_DX_ADD));
 *   BT_DX_ADD: dx = (dx + res) + LN'(dout)  (bit for bit residual_backward(dx += res) then
 *              layernorm_backward(BT_DX_ADD));
 * dw, db += ... as layernorm_backward. One pass instead of two. dx may alias res. */
void layernorm_backward_residual(float *dx, float *dw, float *db, const float *dout,
                                 const float *res, const float *x, const float *w,
                                 const float *mean, const float *rstd, size_t n, size_t c,
                                 bt_dx_mode mode);
/* The backward of a LayerNorm over a dropout's output plus a residual, out = LN(res),
 * res = dropout(z) + in (a post-LN sublayer), with the row-keyed mask of its rows: n =
 * blocks · block_rows rows, block b masked by drops[b] (n / block_rows entries), the element
 * index within the block. In one pass:
 *   dx (N, C)    = LN'(dout), assigned (layernorm_backward BT_DX_SET: d res);
 *   ddrop (N, C) = dropout'(dx), assigned (dropout_backward BT_DX_SET per block: d z);
 *   dw, db += ... as layernorm_backward.
 * Bit for bit those two calls. dx and ddrop are not NULL and do not alias. */
void layernorm_backward_dropout(float *dx, float *ddrop, float *dw, float *db,
                                const float *dout, const float *x, const float *w,
                                const float *mean, const float *rstd, size_t n, size_t c,
                                const bt_dropout *drops, size_t block_rows);

/* --- pointwise activations (out may alias x) --------------------------------------------
 * gelu: exact erf GELU, 0.5 x (1 + erf(x/√2)) (text, cross layers, MLM transform).
 * quick_gelu: x · sigmoid(1.702 x) (CLIP ViT MLP).   tanh: poolers. */
void gelu_forward(float *out, const float *x, size_t n);
/* dx (N) += dout · act'(x) (= with BT_DX_SET) */
void gelu_backward(float *dx, const float *dout, const float *x, size_t n, bt_dx_mode mode);
void quick_gelu_forward(float *out, const float *x, size_t n);
void quick_gelu_backward(float *dx, const float *dout, const float *x, size_t n,
                         bt_dx_mode mode);
/* The MLP's activation backward fused with its bias sums (issue 9): for f = act(x), x (N, C)
 * = y·Wᵀ + b the fc Linear's output, act GELU (quick 0) or QuickGELU (quick 1):
 *   g = 0 + dout · act'(x) (N, C), the value gelu_backward / quick_gelu_backward store with
 *   BT_DX_SET;  dx = g (assigned) when dx;  dx16 = bf16(g) when dx16 (bf16_from_f32's bits);
 *   dbias (C) += Σ_rows g when dbias (bias_add_backward's sums, same bits).
 * One pass over dout and x: g need not be written in fp32 when only bf16 products read it
 * (dx NULL, dx16 for linear_backward's dout_bf16). At least one of dx, dx16. */
void gelu_backward_bias(float *dx, bt_bf16 *dx16, float *dbias, const float *dout,
                        const float *x, size_t n, size_t c, int quick);
void tanh_forward(float *out, const float *x, size_t n);
/* out (N) = bf16 rounding of what gelu_forward / quick_gelu_forward would store (bit for bit
 * bf16_from_f32 of it), for an output only bf16 GEMMs read; the backwards read x. */
void gelu_forward_bf16(bt_bf16 *out, const float *x, size_t n);
void quick_gelu_forward_bf16(bt_bf16 *out, const float *x, size_t n);
/* Uses the forward OUTPUT y: dx += dout (1 - y²). */
void tanh_backward(float *dx, const float *dout, const float *y, size_t n);

/* --- softmax over rows ------------------------------------------------------------------
 * out (N, C) = softmax(x) row-wise (max-subtracted). out may alias x. */
void softmax_forward(float *out, const float *x, size_t n, size_t c);
/* Uses the forward OUTPUT y: dx += y ⊙ (dout - Σ_j dout_j y_j). */
void softmax_backward(float *dx, const float *dout, const float *y, size_t n, size_t c);

/* --- multi-head attention, heads packed in the channel dimension -------------------------
 * Head h of a row owns columns h*D .. h*D+D-1 of q, k, v and out. Row r of batch item b of
 * q is at q + (b*Tq + r)*ldq (likewise k, v with Tk, and out with Tq), so q, k, v may be
 * slices of a packed (N, 3C) qkv buffer (ld = 3C).
 *
 *   S = q_h k_hᵀ / √D + key_bias[b]   (key_bias (B, Tk) additive, or NULL)
 *   P = softmax(S)                     saved in probs (B, NH, Tq, Tk), before dropout, or not
 *   out_h = dropout(P) v_h             (dropout element index = flat index into probs, or
 *                                       attention_drop_base with drop_tq)
 *
 * Computed per (batch, head) block, S and P in a per-thread tile that stays in cache. probs
 * may be NULL: P is then not stored (inference, or a backward that recomputes it), and out
 * is the same bits. compute =
 * GEMM_COMPUTE_BF16 permits (does not require) the block GEMMs to round their operands to
 * bf16: the fast kernel does, the reference (ops_ref.h) computes in exact math either way. */
typedef struct attention_dims {
    size_t B, Tq, Tk, NH, D;
    size_t ldq, ldk, ldv, ldo;
    size_t drop_tq; /* query rows of the dropout index space per block, >= Tq (0: Tq): a
                       caller that runs only the first Tq of a layer's drop_tq query rows
                       (the CLS rows) gives them the masks the whole layer gives them */
} attention_dims;

/* The dropout index of element (i, j) of block (b, h) is attention_drop_base(d, b, h) +
 * i Tk + j: the flat index into a (B, NH, drop_tq, Tk) probs. */
static inline size_t attention_drop_base(const attention_dims *d, size_t b, size_t h) {
    return (b * d->NH + h) * (d->drop_tq ? d->drop_tq : d->Tq) * d->Tk;
}

void attention_forward(float *out, float *probs, const float *q, const float *k,
                       const float *v, const float *key_bias, const attention_dims *d,
                       const bt_dropout *drop, gemm_compute compute);
/* dq, dk, dv += ... (same layouts and strides as q, k, v; = with BT_DX_SET: the head
 * columns of each row are written, other columns of a packed buffer are not touched).
 * probs: the forward's, or NULL: each block then recomputes its P from q, k and key_bias
 * (the forward's key_bias; ignored when probs is given) with the forward's own product and
 * row pass, so the results are the same bits as with the kept probs, for one more score
 * product and row pass per block instead of B*NH*Tq*Tk saved floats (flash-attention's
 * trade; docs/model.md "Attention probabilities"). */
void attention_backward(float *dq, float *dk, float *dv, const float *dout, const float *probs,
                        const float *q, const float *k, const float *v, const float *key_bias,
                        const attention_dims *d, const bt_dropout *drop,
                        gemm_compute compute, bt_dx_mode mode);
/* key_bias (N) = mask ? 0 : -FLT_MAX  (HF's extended attention mask: (1 - m) * finfo.min). */
void attention_key_bias_from_mask(float *key_bias, const int32_t *mask, size_t n);

/* --- embedding gather / scatter-add ------------------------------------------------------
 * out (N, C) = table[ids[i]], table (rows, C); ids outside [0, rows) are a BT_ASSERT. */
void embedding_forward(float *out, const int32_t *ids, const float *table, size_t n, size_t c,
                       size_t rows);
/* dtable[ids[i]] += dout[i], skipping ids[i] == padding_idx (-1: none). Deterministic. */
void embedding_backward(float *dtable, const float *dout, const int32_t *ids, size_t n,
                        size_t c, size_t rows, int32_t padding_idx);

/* --- bias add and residual add -----------------------------------------------------------
 * out (N, C) = x + bias (C) broadcast over rows; out may alias x. */
void bias_add_forward(float *out, const float *x, const float *bias, size_t n, size_t c);
/* dx += dout;  dbias += Σ_rows dout. */
void bias_add_backward(float *dx, float *dbias, const float *dout, size_t n, size_t c);
/* out (N) = a + b; out may alias a or b. */
void residual_forward(float *out, const float *a, const float *b, size_t n);
/* da += dout;  db += dout  (= with BT_DX_SET, both). */
void residual_backward(float *da, float *db, const float *dout, size_t n, bt_dx_mode mode);

/* --- cross entropy with ignore index ------------------------------------------------------
 * Row i of logits (N, V) has target targets[i]; rows with targets[i] == ignore_index are
 * skipped. Returns the mean of -log softmax(logits_i)[target_i] over valid rows (0 if
 * none; *n_valid receives their count if non-NULL). probs (N, V) receives the softmax of
 * every valid row (the backward reads it; other rows are not written; probs may alias
 * logits). Targets outside [0, V) that are not ignore_index are a BT_ASSERT. */
float cross_entropy_forward(float *probs, const float *logits, const int32_t *targets,
                            size_t n, size_t v, int32_t ignore_index, size_t *n_valid);
/* dlogits += dloss * (probs - onehot(target)) / n_valid on valid rows. */
void cross_entropy_backward(float *dlogits, const float *probs, const int32_t *targets,
                            size_t n, size_t v, int32_t ignore_index, float dloss);

/* --- L2 normalize rows (torch F.normalize, eps 1e-12) -------------------------------------
 * out (N, C) = x / max(‖x‖₂, 1e-12);  saves norm (N) = ‖x‖₂. */
void l2_normalize_forward(float *out, float *norm, const float *x, size_t n, size_t c);
/* Uses out and norm: dx += (dout - out (out·dout)) / ‖x‖ where ‖x‖ > eps, else dout/eps. */
void l2_normalize_backward(float *dx, const float *dout, const float *out, const float *norm,
                           size_t n, size_t c);

/* --- sum of squares (the global gradient norm) ----------------------------------------------
 * Σ x[i]² in double over one span (each product is exact in double). The fast version keeps
 * 16 partial sums (lane i mod 16) combined in a fixed order, so its result is the same at
 * every ISA level and thread count, and within n·2⁻⁵³ relative of the reference's
 * sequential sum. Single-threaded: callers split long arrays into fixed chunks
 * (src/train/optim.c). */
double sum_squares(const float *x, size_t n);

/* --- zeroing a buffer --------------------------------------------------------------------
 * p[0 .. bytes) = 0, as memset. The fast version hands fixed 2 MiB pieces of a large buffer
 * to the OpenMP threads (the step zeroes GBs of gradient arenas: one core's memset left the
 * other idle). */
void zero_fill(void *p, size_t bytes);

/* --- AdamW update of one parameter run ----------------------------------------------------
 * The per-element math of torch.optim.AdamW (foreach=False) in fp32, in torch's order, with
 * the step's scalars precomputed by the caller (src/train/optim.c):
 *   g = grad*grad_scale; p *= decay; m = m*b1 + g*ob1; v = v*b2 + ob2*g*g;
 *   p -= step_size * (m / (sqrt(v)/bc2_sqrt + eps));  shadow (if not NULL) = bf16(p).
 * p, m, v (n) updated in place; shadow (n) assigned. The fast version gives the same bytes
 * as the reference (no contraction; IEEE sqrt and division in every lane). */
typedef struct adamw_coefs {
    float grad_scale, decay, b1, ob1, b2, ob2, bc2_sqrt, eps, step_size;
} adamw_coefs;
void adamw_update(float *p, float *m, float *v, bt_bf16 *shadow, const float *grad, size_t n,
                  const adamw_coefs *k);
/* The same update, and grad[0 .. n) = 0 afterwards (+0.0f), in the same pass: each gradient
 * element is zeroed right after it is read, while its line is in cache, so the step's
 * zeroing of the gradient arena (bt_zero_grad) needs no separate pass over the trained
 * elements (src/train/optim.c bt_adamw_step_zero_grad). p, m, v and shadow get the same
 * bytes as adamw_update's. */
void adamw_update_zero_grad(float *p, float *m, float *v, bt_bf16 *shadow, float *grad,
                            size_t n, const adamw_coefs *k);

/* --- fp32 <-> bf16 (round to nearest even; vectorized with run-time dispatch) -------------- */
void bf16_from_f32(bt_bf16 *out, const float *in, size_t n);
void f32_from_bf16(float *out, const bt_bf16 *in, size_t n);
/* The same conversions on the calling thread only (no OpenMP region: for callers that are
 * already parallel or convert short rows, e.g. the GEMM operand packing). */
void bf16_from_f32_serial(bt_bf16 *out, const float *in, size_t n);
void f32_from_bf16_serial(float *out, const bt_bf16 *in, size_t n);

/* --- for tests and benchmarks -------------------------------------------------------------
 * The fp32 -> bf16 conversion in use: "avx512bf16" (vcvtne2ps2bf16), "avx512f" (integer
 * rounding on 16 lanes) or "scalar"; chosen by kernels_init() from the ISA level (cpu.h). */
const char *ops_bf16_conversion_name(void);
/* Selects one of those by name; returns 0 (and changes nothing) when the name is unknown or
 * the CPU lacks the instructions. Lets tests compare every vector path with the scalar one. */
int ops_bf16_conversion_select(const char *name);
/* How attention uses the cores: "blocks" (an OpenMP loop over the B*NH (batch, head)
 * blocks, each block's GEMMs on its own thread), "gemm" (batch items in turn, the heads'
 * GEMMs as one batched gemm() that threads internally), or "auto" (the default: blocks,
 * except gemm when the GEMM backend is OpenBLAS, which oversubscribes inside parallel
 * regions). BT_ATTENTION_THREADS sets it at kernels_init(); select returns 0 for an unknown
 * name; name() reports e.g. "auto (blocks)". Same results up to summation order;
 * docs/benchmarks.md has the measurement behind the default. */
int ops_attention_threads_select(const char *name);
const char *ops_attention_threads_name(void);
/* What the "blocks" threading's per-block products run on, with compute BF16 on the native
 * route: "amx" (hand-written AMX tile products, attention_amx.h; only where the CPU grants
 * AMX-BF16 and oneDNN's ISA is avx512_core_amx, i.e. not capped by DNNL_MAX_CPU_ISA /
 * BT_CPU_ISA; elsewhere gemm), "avx512_bf16" (hand-written vdpbf16ps products,
 * attention_dpbf16.h; only where the CPU runs AVX512-BF16 and oneDNN's ISA is
 * avx512_core_bf16; elsewhere gemm), "gemm" (gemm(), i.e. oneDNN), or "auto" (the default:
 * whichever of the two hand-written ones may run). BT_ATTENTION_PRODUCTS sets it at
 * kernels_init(); select returns 0 for an unknown name; name() says what runs, e.g. "auto
 * (amx for native bf16 blocks)". Each gives the bits of oneDNN's own kernels at the ISA it
 * needs (tests/test_attention_tiles.c); they differ from gemm() only in speed. */
int ops_attention_products_select(const char *name);
const char *ops_attention_products_name(void);
/* The seconds each dispatched kernel has taken since the process started, its own time as
 * kernel_clock.h counts it (time inside gemm() is GEMM's; an attention call's products are
 * its own; calls from inside parallel regions are not counted): names[i] and seconds[i] for
 * the first cap kernels in ops_table.h order; returns the number of kernels. For profiles
 * anyone can rerun (bench_step --kernels). */
size_t ops_kernel_seconds(const char **names, double *seconds, size_t cap);

#endif
