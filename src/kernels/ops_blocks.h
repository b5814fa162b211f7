/* ops_blocks.h: the building blocks the fast kernel units share (ops.c, attention.c).
 *
 * Each unit that includes this file is compiled once per ISA level ("ISA variants" below), so
 * everything here is a macro or a static (inline) function, compiled into each unit at its
 * level:
 *   - the OpenMP helpers and the chunked parallel loop (OPS_OMP, OPS_FOR_CHUNKS);
 *   - fixed-order reductions in GNU C vectors (ops_sum, ops_dot, ops_max_add): the same
 *     summation order at every level and every thread count, so the same bits;
 *   - branch-free polynomials for exp and the normal tail (ops_exp, ops_upper_tail) and bit
 *     selects (ops_sel), which vectorize where libm's calls and float ternaries would not;
 *   - the counter-based dropout mask (ops_drop, OPS_DROP_EACH, dropout_span);
 *   - streaming stores (ops_stream, ops_stream_rows);
 *   - ops_bf16_native, the route on which a caller rounds an operand two products read.
 *
 * Deliberately not here: the kernels (ops.c, attention.c), the kernel table and its dispatch
 * (ops.c), anything a caller outside src/kernels uses (ops.h). */
#ifndef BT_KERNELS_OPS_BLOCKS_H
#define BT_KERNELS_OPS_BLOCKS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "kernels/gemm.h"
#include "kernels/ops.h"
#include "rng.h"
#include "status.h"

/* `#pragma omp ...` that compiles silently when OpenMP is disabled (-Dopenmp=disabled). */
#ifdef _OPENMP
#define OPS_OMP(...) _Pragma(#__VA_ARGS__)
static inline int ops_thread_num(void) { return omp_get_thread_num(); }
static inline int ops_max_threads(void) { return omp_get_max_threads(); }
#else
#define OPS_OMP(...)
static inline int ops_thread_num(void) { return 0; }
static inline int ops_max_threads(void) { return 1; }
#endif

/* ISA variants. The units that include this file (ops.c, attention.c) are compiled once per
 * level (src/kernels/meson.build): as the library's own units at the x86-64 baseline (level
 * "scalar", OPS_VARIANT undefined), and again with -march=x86-64-v3 and OPS_VARIANT=avx2 and
 * with -march=x86-64-v4 and OPS_VARIANT=avx512. What a unit exports for the kernel table is
 * named per level by OPS_LEVEL_NAME (ops_fill_fast_avx2, attention_forward_fast_avx512, ...),
 * and OPS_FILL, ops.c's function of each level that fills a kernel table with that level's
 * kernels, is OPS_LEVEL_NAME(ops_fill_fast). Only the library's units (#ifndef OPS_VARIANT)
 * hold the reference table, the dispatch, the settings and the public entry points. The same
 * source at every level (no FMA contraction: ISO C mode, and -ffp-contract=off on the variants)
 * gives the same bits; only the instructions differ. OPS_VEC marks the vectorizable row and
 * span kernels (it used to be target_clones; the level is now chosen per unit). */
#define OPS_VEC
#ifdef OPS_VARIANT
#define OPS_LEVEL OPS_VARIANT
#else
#define OPS_LEVEL scalar
#endif
#define OPS_NAME_JOIN_(name, level) name##_##level
#define OPS_NAME_JOIN(name, level) OPS_NAME_JOIN_(name, level)
#define OPS_LEVEL_NAME(name) OPS_NAME_JOIN(name, OPS_LEVEL)
#define OPS_FILL OPS_LEVEL_NAME(ops_fill_fast)
#define OPS_INLINE static inline __attribute__((always_inline))

/* Work (elements) below which a kernel stays on the calling thread: an OpenMP fork/join
 * costs a few microseconds, about what 32K simple elements take on one core. */
#define OPS_PAR_MIN ((size_t)32768)
/* Elementwise kernels split their range into chunks of this many elements. */
#define OPS_CHUNK ((size_t)8192)
/* Partial sums per reduction (one AVX-512 register of floats). */
#define OPS_LANES 16

static inline size_t ops_min(size_t a, size_t b) { return a < b ? a : b; }

/* Reductions. gcc does not vectorize a float sum (or max) without -ffast-math, because
 * that reorders it; so the reductions below keep OPS_LANES partial results in GNU C vectors
 * of the level's register width (one zmm, two ymm or four xmm: OPS_NV vectors of OPS_VN
 * lanes; partial l sums the elements i ≡ l mod OPS_LANES at every level), a scalar tail, and
 * a fixed fold. The order is fixed by this code, so every ISA level and every thread count
 * gives the same bits. (One 64-byte vector at every level was the same arithmetic, but below
 * AVX-512 gcc kept it in memory and moved it through general registers on every iteration:
 * layernorm forward at AVX2 ran 4x slower than at AVX-512.) Vectors never cross a function
 * boundary (the ABI of a vector argument differs between ISA levels). */
#if defined(__AVX512F__)
#define OPS_VN 16
#elif defined(__AVX__)
#define OPS_VN 8
#else
#define OPS_VN 4
#endif
#define OPS_NV (OPS_LANES / OPS_VN)
typedef float ops_vf __attribute__((vector_size(OPS_VN * sizeof(float))));
typedef int32_t ops_vi __attribute__((vector_size(OPS_VN * sizeof(int32_t))));

/* lanes 0..15 of acc[OPS_NV] folded in a fixed tree, then the tail */
OPS_INLINE float ops_fold(const ops_vf *acc, float tail) {
    float t[OPS_LANES];
    for (int k = 0; k < OPS_NV; k++)
        for (int l = 0; l < OPS_VN; l++) t[k * OPS_VN + l] = acc[k][l];
    for (int l = 0; l < 8; l++) t[l] += t[l + 8];
    for (int l = 0; l < 4; l++) t[l] += t[l + 4];
    for (int l = 0; l < 2; l++) t[l] += t[l + 2];
    return (t[0] + t[1]) + tail;
}

/* v = the OPS_VN floats at p */
#define OPS_LOAD(v, p) memcpy(&(v), (p), sizeof(ops_vf))
/* for (k = 0..OPS_NV-1) body, with p_k = p + k OPS_VN: one OPS_LANES block */
#define OPS_EACH_VEC(k, body) for (int k = 0; k < OPS_NV; k++) body

OPS_INLINE float ops_sum(const float *x, size_t n) {
    ops_vf acc[OPS_NV] = {{0}}, v;
    size_t i = 0;
    for (; i + OPS_LANES <= n; i += OPS_LANES)
        OPS_EACH_VEC(k, {
            OPS_LOAD(v, x + i + k * OPS_VN);
            acc[k] += v;
        });
    float tail = 0.0f;
    for (; i < n; i++) tail += x[i];
    return ops_fold(acc, tail);
}

OPS_INLINE float ops_dot(const float *a, const float *b, size_t n) {
    ops_vf acc[OPS_NV] = {{0}}, va, vb;
    size_t i = 0;
    for (; i + OPS_LANES <= n; i += OPS_LANES)
        OPS_EACH_VEC(k, {
            OPS_LOAD(va, a + i + k * OPS_VN);
            OPS_LOAD(vb, b + i + k * OPS_VN);
            acc[k] += va * vb;
        });
    float tail = 0.0f;
    for (; i < n; i++) tail += a[i] * b[i];
    return ops_fold(acc, tail);
}

/* Σ (x - m)² */
OPS_INLINE float ops_sum_sq_dev(const float *x, float m, size_t n) {
    ops_vf acc[OPS_NV] = {{0}}, v;
    size_t i = 0;
    for (; i + OPS_LANES <= n; i += OPS_LANES)
        OPS_EACH_VEC(k, {
            OPS_LOAD(v, x + i + k * OPS_VN);
            v -= m;
            acc[k] += v * v;
        });
    float tail = 0.0f;
    for (; i < n; i++) tail += (x[i] - m) * (x[i] - m);
    return ops_fold(acc, tail);
}

/* x[j] += b[j] for j < n (n >= 1; b NULL: x unchanged), and returns the largest x[j], in the
 * same pass (NaN elements skipped unless x[0] is NaN, then NaN), in two sets of OPS_LANES
 * partial maxima (even and odd blocks of OPS_LANES) so that two compare-and-select chains
 * run at once (measured: attention forward 1 thread, T 325, 1-1.5% faster per call at the
 * AVX512-BF16 and AVX2 caps). The grouping can change only the sign of a zero maximum, which
 * no caller sees: attention_rows_forward and softmax_row_inline (through ops_max) use it as
 * exp(x - max), the same for max = +0 and -0 (x - (±0) is x for every x but ±0, and ops_exp
 * gives 1 for both zeros), and cross_entropy_row as max + log Σ with log Σ >= +0. */
OPS_INLINE float ops_max_add(float *x, const float *b, size_t n) {
    ops_vf acc[OPS_NV], acc2[OPS_NV], v, vb;
    const float x0 = b ? x[0] + b[0] : x[0];
    OPS_EACH_VEC(k, { acc[k] = acc2[k] = (ops_vf){0} + x0; });
    size_t i = 0;
#define OPS_MAX_ADD_STEP(A, i)                                                              \
    OPS_EACH_VEC(k, {                                                                       \
        OPS_LOAD(v, x + (i) + k * OPS_VN);                                                  \
        if (b) {                                                                            \
            OPS_LOAD(vb, b + (i) + k * OPS_VN);                                             \
            v += vb;                                                                        \
            memcpy(x + (i) + k * OPS_VN, &v, sizeof v);                                     \
        }                                                                                   \
        const ops_vi gt = v > A[k];                                                         \
        A[k] = (ops_vf)(((ops_vi)v & gt) | ((ops_vi)A[k] & ~gt));                           \
    })
    for (; i + 2 * OPS_LANES <= n; i += 2 * OPS_LANES) {
        OPS_MAX_ADD_STEP(acc, i);
        OPS_MAX_ADD_STEP(acc2, i + OPS_LANES);
    }
    for (; i + OPS_LANES <= n; i += OPS_LANES) OPS_MAX_ADD_STEP(acc, i);
#undef OPS_MAX_ADD_STEP
    OPS_EACH_VEC(k, {
        const ops_vi gt = acc2[k] > acc[k];
        acc[k] = (ops_vf)(((ops_vi)acc2[k] & gt) | ((ops_vi)acc[k] & ~gt));
    });
    float m = x0;
    OPS_EACH_VEC(k, {
        for (int l = 0; l < OPS_VN; l++) m = acc[k][l] > m ? acc[k][l] : m;
    });
    for (; i < n; i++) {
        if (b) x[i] += b[i];
        m = x[i] > m ? x[i] : m;
    }
    return m;
}

/* Largest element (n >= 1): ops_max_add without a bias, which leaves x as it is. NaN
 * elements lose every comparison, so they are skipped; the kernels that use it still
 * propagate NaN through the elements themselves. */
OPS_INLINE float ops_max(const float *x, size_t n) { return ops_max_add((float *)x, NULL, n); }

OPS_INLINE float ops_bits_to_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* c ? a : b as a bit blend, not a branch. gcc turns a plain float ternary into control flow
 * (and jump threading then duplicates the blocks around it), which if-conversion only undoes
 * where the arithmetic under the condition can be masked (AVX-512's conditional operations);
 * at AVX2 and SSE2 such a loop stayed scalar ("control flow in loop"). The blend has no
 * condition to thread on, so the callers' loops vectorize at every level; same bits. */
OPS_INLINE float ops_sel(int c, float a, float b) {
    uint32_t ua, ub;
    memcpy(&ua, &a, 4);
    memcpy(&ub, &b, 4);
    const uint32_t m = 0u - (uint32_t)(c != 0);
    return ops_bits_to_f32((ua & m) | (ub & ~m));
}

/* exp(hi + lo) in float, branch-free so loops calling it vectorize. x = hi + lo is split as
 * n ln2 + r with n = round(x/ln2) and r = (hi - n ln2) + lo, |r| <= ln2/2 (ln2 in two
 * constants, Cody-Waite, so n ln2 and, for large |hi|, hi - n ln2 are exact): a caller that
 * knows its argument as an exact large part plus a small correction (ops_gauss_split) gets
 * the full accuracy instead of the rounding error of hi + lo. exp(r) is the degree-7 Taylor
 * polynomial (truncation r⁸/8! < 5.3e-9 relative); 2ⁿ is applied as two factors
 * 2^(n/2) 2^(n-n/2), so the result overflows to +Inf and underflows gradually through
 * subnormals where expf does. Relative error: a few float ulps. NaN stays NaN.
 * Below lim_lo the result is the final select's 0 and the polynomial runs on 0 instead:
 * clamping to lim_lo there made 2ⁿ's product a subnormal that is thrown away, and a
 * subnormal result costs a microcode assist per vector on x86 (measured: attention rows with
 * masked keys, bias -FLT_MAX, 325 x 325 with 40 masked columns, 272 -> ~190 us at AVX2).
 * Same bits: only the discarded lanes change.
 * split 0 (ops_exp: lo is 0) drops what the correction needs: with lo = 0 the clamped
 * argument xc is the reduced one itself (h = xc, r has no + l), which saves an add, a compare
 * and a select per element and gives the same bits (if not clamped, xc is hi; the + 0 could
 * only turn an r of -0 into +0, and the polynomial gives 1 for both; a NaN keeps its payload
 * either way). n is split as n1 = n >> 1 (floor; gcc shifts signed values arithmetically),
 * not n / 2 (which rounds toward zero: two more instructions): for odd negative n the two
 * factors swap, and p 2^n1 is exact either way (p in [0.7, 1.5], n >= -150, so n1 >= -75),
 * so y rounds once to the same bits. Checked over all
 * 2^32 floats against the previous code when this was written. */
OPS_INLINE float ops_exp_body(float hi, float lo, int split) {
    const float lim_lo = -104.0f, lim_hi = 89.0f; /* e^-104 < min subnormal/2; e^89 > FLT_MAX */
    const float x = split ? hi + lo : hi;
    float xc = ops_sel(x < lim_lo, 0.0f, x);
    xc = ops_sel(xc > lim_hi, lim_hi, xc);
    const int clamped = xc != x; /* also true for NaN (then xc is NaN and so is the result) */
    const float h = split ? ops_sel(clamped, xc, hi) : xc;
    const float shifter = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
    const float nf = (xc * 1.44269504088896341f + shifter) - shifter;
    const float rh = (h - nf * 0.693359375f) - nf * -2.12194440e-4f;
    const float r = split ? rh + ops_sel(clamped, 0.0f, lo) : rh;
    const float r2 = r * r, r4 = r2 * r2; /* Estrin's scheme, see ops_upper_tail */
    const float p01 = 1.0f + r, p23 = 0.5f + (1.0f / 6.0f) * r;
    const float p45 = 1.0f / 24.0f + (1.0f / 120.0f) * r;
    const float p67 = 1.0f / 720.0f + (1.0f / 5040.0f) * r;
    const float p = (p01 + p23 * r2) + (p45 + p67 * r2) * r4;
    const int32_t n = (int32_t)nf, n1 = n >> 1, n2 = n - n1;
    const float s1 = ops_bits_to_f32((uint32_t)(n1 + 127) << 23);
    const float s2 = ops_bits_to_f32((uint32_t)(n2 + 127) << 23);
    const float y = (p * s1) * s2;
    return ops_sel(x < lim_lo, 0.0f, y);
}

OPS_INLINE float ops_exp2part(float hi, float lo) { return ops_exp_body(hi, lo, 1); }

OPS_INLINE float ops_exp(float x) { return ops_exp_body(x, 0.0f, 0); }

/* -a²/2 = big - s, split so that every digit of a large a counts: a = ah + al with ah
 * holding the top 12 significant bits, so ah² (24 bits) and big = -ah²/2 are exact, while
 * s = ah al + al²/2 is small; ops_exp2part(big, -s) then has no rounding in its argument.
 * Evaluating exp(-a·a/2) directly would turn the rounding of a·a (relative 6e-8, i.e.
 * absolute 6e-8 a²) into a relative error of the result of 6e-8 a²: 4e-6 at a = 8. */
typedef struct ops_gauss {
    float big, s; /* -a²/2 = big - s, big exact */
} ops_gauss;

OPS_INLINE ops_gauss ops_gauss_split(float a) {
    uint32_t u;
    memcpy(&u, &a, 4);
    const float ah = ops_bits_to_f32(u & 0xfffff000u), al = a - ah;
    ops_gauss g = {-0.5f * (ah * ah), ah * al + 0.5f * (al * al)};
    return g;
}

/* Φ(-a) = ½ erfc(a/√2) for a >= 0, the upper tail of the standard normal, with relative
 * error ~ 3e-7: erfc(z) = t exp(-z² + P(t)), t = 1/(1 + z/2), is the Chebyshev fit
 * published in Numerical Recipes (2nd ed., §6.2, "erfcc"; relative error < 1.2e-7 for
 * z >= 0), and exp(-z²) = exp(-a²/2) comes from ops_gauss_split. */
OPS_INLINE float ops_upper_tail(float a, ops_gauss g) {
    const float t = 1.0f / (1.0f + 0.5f * (a * 0.70710678118654752f));
    /* P(t) = Σ c_k t^k, k = 0..9, by Estrin's scheme: the same work as Horner with a
     * dependency chain of 5 instead of 18 operations, which lets the vectorized loop
     * overlap more elements */
    const float t2 = t * t, t4 = t2 * t2, t8 = t4 * t4;
    const float p01 = -1.26551223f + 1.00002368f * t, p23 = 0.37409196f + 0.09678418f * t;
    const float p45 = -0.18628806f + 0.27886807f * t, p67 = -1.13520398f + 1.48851587f * t;
    const float p89 = -0.82215223f + 0.17087277f * t;
    const float p = (p01 + p23 * t2) + (p45 + p67 * t2) * t4 + p89 * t8;
    return 0.5f * t * ops_exp2part(g.big, p - g.s);
}

/* Φ(x), the standard normal CDF: relatively accurate for x < 0 (where x Φ(x) is tiny) and
 * 1 - tail for x >= 0. */
OPS_INLINE float ops_normal_cdf(float x) {
    const float a = ops_sel(x < 0.0f, -x, x);
    const float tail = ops_upper_tail(a, ops_gauss_split(a));
    return ops_sel(x < 0.0f, tail, 1.0f - tail);
}

/* Runs body(lo, len) over [0, n) in chunks of OPS_CHUNK, in parallel when n is large. */
#define OPS_FOR_CHUNKS(n, lo, len, body)                                                   \
    do {                                                                                   \
        const size_t ops_n_ = (n), ops_nch_ = (ops_n_ + OPS_CHUNK - 1) / OPS_CHUNK;        \
        OPS_OMP(omp parallel for schedule(static) if (ops_n_ >= OPS_PAR_MIN))              \
        for (size_t ops_c_ = 0; ops_c_ < ops_nch_; ops_c_++) {                             \
            const size_t lo = ops_c_ * OPS_CHUNK, len = ops_min(OPS_CHUNK, ops_n_ - lo);  \
            body;                                                                          \
        }                                                                                  \
    } while (0)

/* --- dropout ------------------------------------------------------------------------------
 * keep(i) = h(i) >= p 2^32 with h(i) = fmix32(lo(i) 0x9e3779b9 ^ hi(i) 0x85ebca6b ^ key):
 * MurmurHash3's 32-bit finalizer over a golden-ratio Weyl sequence, keyed by 32 bits of
 * splitmix64(seed). A pure function of (seed, i), so the backward regenerates the mask and
 * every thread agrees; for a fixed seed h is a bijection of the low 32 index bits, so the
 * drop fraction is p within 2^-32 over a full period. 32-bit lanes (16 per AVX-512 register,
 * multiplies of 10 cycles latency) cost about a third of a 64-bit splitmix64 per element,
 * which matters in attention: the mask over B*NH*Tq*Tk probabilities is made in the forward
 * and again in the backward.
 * Applied as out = x * m with m = keep ? 1/(1-p) : 0 (torch's form: a dropped NaN or Inf
 * stays NaN; a dropped negative value gives -0), product in double, rounded once. */

typedef struct ops_drop {
    int on;          /* p > 0 */
    uint32_t key;    /* 32 bits of splitmix64(seed) */
    uint32_t thresh; /* keep when h(i) >= thresh */
    double scale;    /* 1 / (1 - p) */
} ops_drop;

OPS_INLINE uint32_t ops_fmix32(uint32_t h) {
    h ^= h >> 16;
    h *= 0x85ebca6bu;
    h ^= h >> 13;
    h *= 0xc2b2ae35u;
    return h ^ (h >> 16);
}

OPS_INLINE int ops_keep(const ops_drop *dr, uint64_t i) {
    const uint32_t lo = (uint32_t)i, hi = (uint32_t)(i >> 32);
    return ops_fmix32((lo * 0x9e3779b9u) ^ (hi * 0x85ebca6bu) ^ dr->key) >= dr->thresh;
}

/* The multiplier of element i, 1/(1-p) if kept, else 0, computed over runs of indices that
 * share their high 32 bits: there keep(i) needs only the low half,
 * h = fmix32(lo 0x9e3779b9 ^ hk) with hk = hi 0x85ebca6b ^ key fixed for the run, which
 * spares the vectorized loops the 64-bit index lanes (ops_keep's bits). Returns the length
 * of the run from index i, at most n, and its hk. */
OPS_INLINE size_t ops_drop_run(const ops_drop *dr, uint64_t i, size_t n, uint32_t *hk) {
    *hk = ((uint32_t)(i >> 32) * 0x85ebca6bu) ^ dr->key;
    const uint64_t left = ((uint64_t)1 << 32) - (uint32_t)i; /* before the low half wraps */
    return left < n ? (size_t)left : n;
}

/* For each index base + j, j in [0, n), in order: body with j and keep = keep(base + j).
 * Run by run (ops_drop_run), lo(i) 0x9e3779b9 is carried from one index to the next by
 * adding 0x9e3779b9 (mod 2^32, the same bits as the multiply), which the vectorizer turns
 * into one vector add instead of a 32-bit multiply per element (two remain, in fmix32). */
#define OPS_DROP_EACH(r, base, n, j, keep, body)                                           \
    for (size_t ops_j0_ = 0, ops_len_; ops_j0_ < (n); ops_j0_ += ops_len_) {               \
        uint32_t ops_hk_;                                                                  \
        ops_len_ = ops_drop_run(&(r), (base) + ops_j0_, (n) - ops_j0_, &ops_hk_);          \
        uint32_t ops_w_ = (uint32_t)((base) + ops_j0_) * 0x9e3779b9u;                      \
        for (size_t j = ops_j0_; j < ops_j0_ + ops_len_; j++, ops_w_ += 0x9e3779b9u) {     \
            const int keep = ops_fmix32(ops_w_ ^ ops_hk_) >= (r).thresh;                   \
            body;                                                                          \
        }                                                                                  \
    }

/* x m rounded once, m = 1/(1-p) if keep else 0: the kept product in double; a dropped x
 * times 0 is ±0, or NaN from Inf or NaN (its payload kept), which float arithmetic gives
 * bit for bit as well, so the choice is a select of float lanes rather than of doubles
 * (half the vector width under AVX2: measured 59 -> 36 us per 325 x 325 tile at AVX2,
 * 35 -> 29 at AVX-512, 1 thread, with the induction of OPS_DROP_EACH). */
OPS_INLINE float ops_drop_apply(const ops_drop *r, float x, int keep) {
    return ops_sel(keep, (float)((double)x * r->scale), x * 0.0f);
}

static inline ops_drop ops_drop_make(const bt_dropout *d) {
    ops_drop dr = {0, 0, 0, 1.0};
    BT_ASSERTF(!d || (d->p >= 0.0f && d->p < 1.0f), "dropout p = %g outside [0, 1)",
               d ? (double)d->p : 0.0);
    if (d && d->p > 0.0f) {
        const double t = (double)d->p * 4294967296.0;
        dr.on = 1;
        dr.key = (uint32_t)bt_mix64(d->seed ^ 0x6a09e667f3bcc909ull);
        dr.thresh = t < 4294967295.0 ? (uint32_t)t : 4294967295u;
        dr.scale = 1.0 / (1.0 - (double)d->p);
    }
    return dr;
}

/* dst[j] = src[j] * m(base + j) */
OPS_VEC static inline void dropout_span(float *dst, const float *src, size_t n,
                                        const ops_drop *dr, uint64_t base) {
    const ops_drop r = *dr;
    OPS_DROP_EACH(r, base, n, j, keep, dst[j] = ops_drop_apply(&r, src[j], keep));
}

/* d1[j] = s1[j] * m(base + j) and d2[j] = s2[j] * m(base + j): one mask, two arrays */
OPS_VEC static inline void dropout_span_pair(float *d1, const float *s1, float *d2,
                                             const float *s2, size_t n, const ops_drop *dr,
                                             uint64_t base) {
    const ops_drop r = *dr;
    OPS_DROP_EACH(r, base, n, j, keep, {
        d1[j] = ops_drop_apply(&r, s1[j], keep);
        d2[j] = ops_drop_apply(&r, s2[j], keep);
    });
}

/* 1 when products of this compute run as native bf16 GEMMs, where an fp32 operand that two
 * products read is better rounded to bf16 once by the caller than packed by each gemm(). */
static inline int ops_bf16_native(gemm_compute compute) {
    return compute == GEMM_COMPUTE_BF16 && gemm_get_backend() == GEMM_BACKEND_ONEDNN &&
           gemm_bf16_route_active() == GEMM_BF16_NATIVE;
}

/* --- streaming stores ---------------------------------------------------------------------
 * x86's non-temporal stores write whole cache lines to memory without first reading them
 * (an ordinary store to a line not in cache reads it: read for ownership), and leave nothing
 * in cache. They pay for arrays written once, GBs that no cache holds, whose old contents are
 * not read (zero_fill, the AdamW shadow); a store to a line just read (p += ...) gains
 * nothing from them and loses the line from cache. */

/* Bytes from which zero_fill streams: 64 MiB, about what this machine's L3 keeps of a stream
 * (single-core reads: ~30 GB/s up to 64 MiB, ~14 GB/s, memory, beyond): memory zeroed in
 * larger pieces is mostly out of cache by the time it is used, so the ordinary stores' line
 * reads would be pure cost. */
#define OPS_STREAM_MIN_BYTES ((size_t)64 << 20)

#if defined(__x86_64__) && defined(__GNUC__) && defined(__SSE2__)
#include <immintrin.h>
#if defined(__AVX512F__)
#define OPS_STREAM_ALIGN 64
#elif defined(__AVX__)
#define OPS_STREAM_ALIGN 32
#else
#define OPS_STREAM_ALIGN 16
#endif
#define OPS_HAVE_STREAM 1

/* dst[0, bytes) = src[0, bytes) (src: any alignment; NULL: zeros): plain stores up to dst's
 * first OPS_STREAM_ALIGN boundary and after the last whole vector, streaming stores of the
 * level's widest vector between. They are weakly ordered: ops_stream_fence() before another
 * thread may read dst. */
/* one streaming store of the level's widest vector at d (aligned) from s (any alignment;
 * NULL: zeros) */
OPS_INLINE void ops_stream_vec(unsigned char *d, const unsigned char *s) {
#if defined(__AVX512F__)
    _mm512_stream_si512((void *)d,
                        s ? _mm512_loadu_si512((const void *)s) : _mm512_setzero_si512());
#elif defined(__AVX__)
    _mm256_stream_si256((__m256i *)(void *)d,
                        s ? _mm256_loadu_si256((const __m256i *)(const void *)s)
                          : _mm256_setzero_si256());
#else
    _mm_stream_si128((__m128i *)(void *)d, s ? _mm_loadu_si128((const __m128i *)(const void *)s)
                                             : _mm_setzero_si128());
#endif
}

static inline void ops_stream(void *dst, const void *src, size_t bytes) {
    unsigned char *d = dst;
    const unsigned char *s = src;
    const size_t head = ops_min((size_t)(-(uintptr_t)d & (OPS_STREAM_ALIGN - 1)), bytes);
    if (s) {
        memcpy(d, s, head);
        s += head;
    } else {
        memset(d, 0, head);
    }
    d += head, bytes -= head;
    for (; bytes >= OPS_STREAM_ALIGN; d += OPS_STREAM_ALIGN, bytes -= OPS_STREAM_ALIGN) {
        ops_stream_vec(d, s);
        if (s) s += OPS_STREAM_ALIGN;
    }
    if (s) memcpy(d, s, bytes);
    else memset(d, 0, bytes);
}

/* dst (rows x cols, contiguous) = src (rows x cols at row stride lds >= cols): ops_stream
 * of the packed rows. dst's aligned vectors are gathered from src (one load where the vector
 * lies within a row of src, element by element where it straddles two), so every line of dst
 * is written by streaming stores only (streaming row by row instead left each row's partial
 * lines to plain stores: measured slower, see attention.c's attention_block_forward). */
static inline void ops_stream_rows(float *dst, const float *src, size_t rows, size_t cols,
                                   size_t lds) {
    if (lds == cols) {
        ops_stream(dst, src, rows * cols * sizeof(float));
        return;
    }
    enum { L = OPS_STREAM_ALIGN / sizeof(float) };
    const size_t n = rows * cols;
    size_t e = ops_min((size_t)(-(uintptr_t)dst & (OPS_STREAM_ALIGN - 1)) / sizeof(float), n);
    for (size_t t = 0; t < e; t++) dst[t] = src[t / cols * lds + t % cols];
    size_t r = e / cols, c = e % cols; /* dst[e] = src[r lds + c] */
    for (; e + L <= n; e += L) {
        if (c + L <= cols) {
            ops_stream_vec((unsigned char *)(dst + e), (const unsigned char *)(src + r * lds + c));
            c += L;
        } else {
            float line[L];
            for (size_t t = 0; t < L; t++) {
                if (c == cols) c = 0, r++;
                line[t] = src[r * lds + c++];
            }
            ops_stream_vec((unsigned char *)(dst + e), (const unsigned char *)line);
        }
        if (c == cols) c = 0, r++;
    }
    for (; e < n; e++) dst[e] = src[e / cols * lds + e % cols];
}

static inline void ops_stream_fence(void) { _mm_sfence(); }
#else
#define OPS_HAVE_STREAM 0
static inline void ops_stream(void *dst, const void *src, size_t bytes) {
    if (src) memcpy(dst, src, bytes);
    else memset(dst, 0, bytes);
}
static inline void ops_stream_rows(float *dst, const float *src, size_t rows, size_t cols,
                                   size_t lds) {
    for (size_t i = 0; i < rows; i++) memcpy(dst + i * cols, src + i * lds, cols * sizeof(float));
}
static inline void ops_stream_fence(void) {}
#endif

#endif /* BT_KERNELS_OPS_BLOCKS_H */
