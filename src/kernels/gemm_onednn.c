/* gemm_onednn.c: the oneDNN backend (C API of oneDNN 2.6): fp32 and bf16 matmul primitives.
 *
 * Mapping of gemm_args onto one matmul primitive:
 *   - every tensor is 3-D (batch, rows, cols) described by strides, so transposes, leading
 *     dimensions and batch strides need no copies: op(A) is (ba, m, k) with strides
 *     (stride_a, lda, 1) or, transposed, (stride_a, 1, lda); likewise B; C is (batch, m, n)
 *     with (stride_c, ldc, 1). A stride of 0 becomes a batch dimension of 1, which the
 *     matmul broadcasts.
 *   - alpha is the output scale, beta a sum post-op (none when beta == 0, so C is not read),
 *     the bias the matmul bias argument, shape (1, 1, n). oneDNN 2.6 applies the output
 *     scale to the bias too (dst = alpha*(AB + bias) + beta*C, measured by tests/test_gemm.c),
 *     so with alpha != 1 the primitive gets bias/alpha (per-thread scratch, n divisions; the
 *     two extra roundings stay inside the fp32 error bound). A binary-add post-op would be
 *     the exact alternative, but oneDNN 2.6 reads the wrong bias element with it when the
 *     batch items of C have gaps (stride_c > m*ldc): tried, and the test caught it.
 *     gemm.c never passes alpha == 0 here.
 *   - a long sum without transposes on the fp32 brgemm kernels runs as several primitives,
 *     one per k chunk, each accumulating into C ("K split" below, gemm.h).
 *   - bf16 "native": src and weights bf16, dst and bias fp32. fp32 operands under
 *     GEMM_COMPUTE_BF16 are rounded into per-thread bf16 scratch (bt_bf16_from_f32, round to
 *     nearest even). oneDNN's fpmath_mode=bf16 is not used: it only PERMITS down-conversion,
 *     so the rounding would depend on which implementation oneDNN picks.
 *   - bf16 widened (every route but NATIVE): both operands are packed dense as fp32 after
 *     the same bf16 rounding (bf16 operands widened exactly) and an fp32 primitive runs: same
 *     semantics. Used where the ISA lacks avx512_core_bf16 (measured, 2 threads: oneDNN's
 *     bf16 emulation under DNNL_MAX_CPU_ISA=AVX512_CORE ran 55-60 GFLOP/s where the fp32
 *     primitive runs 250-300; under AVX2 oneDNN 2.6 has no bf16 matmul at all), under
 *     BT_GEMM_BF16=widened|fp32 (with fp32, bf16 mode itself asks for fp32 compute, so only
 *     explicit GEMM_COMPUTE_BF16 callers get here), and as a fallback if a bf16 primitive is
 *     unimplemented.
 *   - blocked B ("Blocked B" below): on the native route a single product with m >=
 *     GEMM_PACK_B_MIN_M and A not transposed plans its weights with format_tag_any on 2-D
 *     descriptors and reorders B into that layout, per call, into per-thread scratch.
 *   - packed weights (gemm.h "Packed weights"): a weight a caller packed once into that
 *     layout (gemm_pack_weight) is B as it lies (b_packed); the plan is the blocked one at
 *     every m, and the per-call reorder runs only if the plan wanted another layout.
 *   - AUTO (the default where the CPU has native bf16): the first bf16 product (or
 *     gemm_bf16_route_active() at model setup) times native bf16 against plain fp32 on one
 *     Linear-shaped product on private primitives (the cache is not touched) and keeps the
 *     faster; the result is kept for the process (gemm_release does not forget it).
 *
 * Primitive cache: keyed by every field that changes the primitive (shape, transposes, lds,
 * strides, operand types, compute, bias presence, alpha, beta, and the thread context:
 * oneDNN plans a primitive created inside an OpenMP parallel region for one thread). A
 * mutex guards it; primitives are created under the mutex (the first call of a shape pays
 * the JIT cost, later calls create nothing).
 *
 * Per thread (created on the thread's first call, freed by gemm_release): a stream, and for
 * each cached primitive the memory objects it runs with (re-pointed with
 * dnnl_memory_set_data_handle each call) and a user-mode scratchpad. User scratchpad mode is
 * what makes concurrent execution of one primitive from several threads legal (oneDNN's
 * library mode shares one scratchpad and forbids primitives from migrating across threads).
 *
 * Deliberately not here: post-op fusions beyond bias/beta (kernels in ops.h do those), int8,
 * oneDNN's own primitive cache (ours is keyed by gemm_args, cheaper than hashing oneDNN
 * descriptors). */
#include "bt_config.h"
#include "clock.h"
#include "kernels/gemm_backend.h"
#include "kernels/ops.h"

#if BT_HAVE_ONEDNN

#include <oneapi/dnnl/dnnl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#if BT_HAVE_OPENMP
#include <omp.h>
#endif

#define DN_CHECK(call)                                                                     \
    do {                                                                                   \
        dnnl_status_t dn_st_ = (call);                                                     \
        BT_ASSERTF(dn_st_ == dnnl_success, "oneDNN: %s returned status %d", #call,         \
                   (int)dn_st_);                                                           \
    } while (0)

/* Every field that changes the primitive; all int64 so the struct has no padding and can be
 * compared and hashed as bytes. Fields that do not apply are 0 (batch strides of a single
 * product). */
typedef struct dn_key {
    int64_t m, n, k, batch;
    int64_t trans_a, trans_b, lda, ldb, ldc;
    int64_t stride_a, stride_b, stride_c;
    int64_t a_type, b_type, compute, has_bias;
    int64_t alpha_bits, beta_bits;
    int64_t nthr;       /* threads oneDNN plans for: 1 inside a parallel region */
    int64_t bf16_widen; /* bf16 compute on an fp32 primitive */
    int64_t block_b;    /* B reordered into the primitive's blocked layout ("Blocked B") */
    int64_t b_packed;   /* B is a packed weight (gemm.h "Packed weights") */
} dn_key;

/* DN_PLAIN_B: B as given (or packed dense, or a packed weight), the source of the reorder
 * into the blocked B */
enum { DN_SRC, DN_WEI, DN_DST, DN_BIAS, DN_SCRATCH, DN_PLAIN_B, DN_MEMS };

/* How an operand reaches the primitive: as given (strided), or packed dense into per-thread
 * scratch as bf16 (rounded) or fp32 (widened/rounded). */
typedef enum { DN_PASS, DN_PACK_BF16, DN_PACK_F32 } dn_pack;

typedef struct dn_entry {
    dn_key key;
    uint64_t hash;
    unsigned id; /* unique per generation; selects the per-thread slot */
    dnnl_primitive_t prim;
    dnnl_memory_desc_t md[DN_MEMS];
    size_t scratch_bytes;
    dn_pack pack_a, pack_b;
    int bias_scaled; /* the primitive gets bias/alpha (alpha != 1, see the top comment) */
    int dense_c;     /* the primitive writes a dense (batch, m, n) scratch, copied to C */
    dnnl_primitive_t reorder_b; /* plain B -> the blocked md[DN_WEI], or NULL ("Blocked B") */
    size_t blocked_b_bytes;
    char impl[96];
    struct dn_entry *next;
} dn_entry;

/* ids are sequential, so the first DN_THREAD_SLOTS primitives never share a slot */
enum { DN_BUCKETS = 256, DN_THREAD_SLOTS = 256 };

typedef struct dn_slot {
    const dn_entry *e;
    dnnl_memory_t mem[DN_MEMS];
} dn_slot;

typedef struct dn_thread {
    dnnl_stream_t stream;
    dn_slot slots[DN_THREAD_SLOTS];
    struct dn_thread *next;
} dn_thread;

static pthread_mutex_t dn_mutex = PTHREAD_MUTEX_INITIALIZER;
static dnnl_engine_t dn_engine;
static dn_entry *dn_table[DN_BUCKETS];
static size_t dn_count;
static unsigned dn_next_id;
static dn_thread *dn_threads;
static _Atomic unsigned dn_generation = 1;
/* AUTO's result (-1: not measured yet) and what it measured; written under dn_route_mutex */
static _Atomic int dn_route_auto = -1;
static pthread_mutex_t dn_route_mutex = PTHREAD_MUTEX_INITIALIZER;
static double dn_route_native_s, dn_route_fp32_s;
static char dn_route_text[320];
static _Thread_local dn_thread *dn_mine;
static _Thread_local unsigned dn_mine_generation;

int gemm_onednn_built(void) {
    return 1;
}

static int dn_isa_has_bf16(void) {
    unsigned bf16_isa = (unsigned)dnnl_cpu_isa_avx512_core_bf16;
    return ((unsigned)dnnl_get_effective_cpu_isa() & bf16_isa) == bf16_isa;
}

static int dn_measure_routes(double *native_s, double *fp32_s);

gemm_bf16_route gemm_onednn_bf16_route(void) {
    const gemm_bf16_route req = gemm_bf16_route_requested();
    /* native bf16 matmul only where oneDNN dispatches avx512_core_bf16 or better; a pinned
     * bf16 route keeps bf16 semantics there (widened) */
    if (!dn_isa_has_bf16())
        return req == GEMM_BF16_NATIVE || req == GEMM_BF16_WIDENED ? GEMM_BF16_WIDENED
                                                                    : GEMM_BF16_FP32;
    if (req != GEMM_BF16_AUTO) return req;
    int got = atomic_load(&dn_route_auto);
    if (got >= 0) return (gemm_bf16_route)got;
    double n, f;
    dn_measure_routes(&n, &f); /* sets dn_route_auto unless another thread did first */
    return (gemm_bf16_route)atomic_load(&dn_route_auto);
}

int gemm_onednn_bf16_measure(double *native_s, double *fp32_s) {
    *native_s = *fp32_s = 0.0;
    if (!dn_isa_has_bf16()) return 0;
    atomic_store(&dn_route_auto, -1);
    return dn_measure_routes(native_s, fp32_s);
}

const char *gemm_onednn_bf16_describe(void) {
    static char text[340];
    const gemm_bf16_route r = gemm_onednn_bf16_route();
    const gemm_bf16_route req = gemm_bf16_route_requested();
    if (!dn_isa_has_bf16() && r == GEMM_BF16_FP32)
        snprintf(text, sizeof text,
                 "fp32 (bf16 mode computes in fp32: oneDNN's isa has no native bf16)");
    else if (!dn_isa_has_bf16())
        snprintf(text, sizeof text,
                 "widened (BT_GEMM_BF16=%s: bf16-rounded operands widened to fp32, oneDNN's isa "
                 "has no native bf16)",
                 gemm_bf16_route_name(req));
    else if (req != GEMM_BF16_AUTO)
        snprintf(text, sizeof text, "%s (BT_GEMM_BF16=%s)", gemm_bf16_route_name(r),
                 gemm_bf16_route_name(r));
    else {
        pthread_mutex_lock(&dn_route_mutex);
        snprintf(text, sizeof text, "%s", dn_route_text);
        pthread_mutex_unlock(&dn_route_mutex);
    }
    return text;
}

/* bf16 compute on an fp32 primitive: every route but NATIVE (under FP32 only explicit
 * GEMM_COMPUTE_BF16 calls get here; bf16 mode itself requests fp32 compute) */
static int dn_bf16_widen(void) {
    return gemm_onednn_bf16_route() != GEMM_BF16_NATIVE;
}

unsigned gemm_onednn_cpu_isa(void) {
    return (unsigned)dnnl_get_effective_cpu_isa();
}

size_t gemm_onednn_cache_size(void) {
    pthread_mutex_lock(&dn_mutex);
    size_t n = dn_count;
    pthread_mutex_unlock(&dn_mutex);
    return n;
}

static uint32_t dn_float_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static int dn_threads_now(void) {
#if BT_HAVE_OPENMP
    return omp_in_parallel() ? 1 : omp_get_max_threads();
#else
    return 1;
#endif
}

/* The key of g on the given bf16 route (widen 0/1; ignored for fp32 compute). */
static void dn_make_key_route(dn_key *key, const gemm_args *g, int widen) {
    memset(key, 0, sizeof *key);
    key->m = (int64_t)g->m;
    key->n = (int64_t)g->n;
    key->k = (int64_t)g->k;
    key->batch = (int64_t)g->batch;
    key->trans_a = g->trans_a;
    key->trans_b = g->trans_b;
    key->lda = (int64_t)g->lda;
    key->ldb = (int64_t)g->ldb;
    key->ldc = (int64_t)g->ldc;
    if (g->batch > 1) {
        key->stride_a = (int64_t)g->stride_a;
        key->stride_b = (int64_t)g->stride_b;
        key->stride_c = (int64_t)g->stride_c;
    }
    key->a_type = g->a_type;
    key->b_type = g->b_type;
    key->compute = g->compute;
    key->has_bias = g->bias != NULL;
    key->alpha_bits = dn_float_bits(g->alpha);
    key->beta_bits = dn_float_bits(g->beta);
    key->nthr = dn_threads_now();
    key->bf16_widen = g->compute == GEMM_COMPUTE_BF16 && widen;
    key->block_b = g->compute == GEMM_COMPUTE_BF16 && !widen && g->batch <= 1 && !g->trans_a &&
                   g->m >= GEMM_PACK_B_MIN_M && gemm_pack_b_active();
    key->b_packed = g->b_packed;
    if (g->b_packed) { /* gemm.c checked the route: a packed weight always runs blocked */
        BT_ASSERT(g->compute == GEMM_COMPUTE_F32 || !widen);
        key->block_b = 1;
    }
}

static void dn_make_key(dn_key *key, const gemm_args *g) {
    dn_make_key_route(key, g, g->compute == GEMM_COMPUTE_BF16 && dn_bf16_widen());
}

static uint64_t dn_hash(const dn_key *key) {
    const unsigned char *p = (const unsigned char *)key;
    uint64_t h = 14695981039346656037ull; /* FNV-1a offset basis */
    for (size_t i = 0; i < sizeof *key; i++) {
        h ^= p[i];
        h *= 1099511628211ull;
    }
    return h;
}

/* --- operand geometry --------------------------------------------------------------- */

/* One operand as stored: batch items (1 = broadcast), each (rows, cols) with row stride ld
 * and item stride stride. */
typedef struct dn_operand {
    int64_t items, rows, cols, ld, stride;
} dn_operand;

static dn_operand dn_operand_a(const dn_key *k) {
    dn_operand o;
    o.items = (k->batch > 1 && k->stride_a != 0) ? k->batch : 1;
    o.rows = k->trans_a ? k->k : k->m;
    o.cols = k->trans_a ? k->m : k->k;
    o.ld = k->lda;
    o.stride = o.items > 1 ? k->stride_a : o.rows * o.ld;
    return o;
}

static dn_operand dn_operand_b(const dn_key *k) {
    dn_operand o;
    o.items = (k->batch > 1 && k->stride_b != 0) ? k->batch : 1;
    o.rows = k->trans_b ? k->n : k->k;
    o.cols = k->trans_b ? k->k : k->n;
    o.ld = k->ldb;
    o.stride = o.items > 1 ? k->stride_b : o.rows * o.ld;
    return o;
}

/* Memory desc of an operand, logical dims (items, r, c) = op(X); packed operands are dense. */
static void dn_operand_md(dnnl_memory_desc_t *md, dn_operand o, int trans, dn_pack pack,
                          dnnl_data_type_t dt) {
    if (pack != DN_PASS) {
        o.ld = o.cols;
        o.stride = o.rows * o.cols;
    }
    dnnl_dims_t dims, strides;
    dims[0] = o.items;
    strides[0] = o.stride;
    if (trans) { /* stored (rows, cols) is the transpose of the logical matrix */
        dims[1] = o.cols;
        dims[2] = o.rows;
        strides[1] = 1;
        strides[2] = o.ld;
    } else {
        dims[1] = o.rows;
        dims[2] = o.cols;
        strides[1] = o.ld;
        strides[2] = 1;
    }
    DN_CHECK(dnnl_memory_desc_init_by_strides(md, 3, dims, dt, strides));
}

/* oneDNN 2.6's fp32 brgemm matmul reads a plain (not transposed) B in place; when B's row
 * stride is a multiple of 4 KiB its rows map to the same L1 sets and the kernel runs at a
 * third of its speed. Measured on the reference VM, fastest of 3 interleaved runs each
 * (GFLOP/s, 2 threads): dX 650x3072x768 (ldb 3072) brg 96 vs gemm:jit 265; dW 768x3072x650
 * 89 vs 253; 2600-token versions 83 vs 266 and 78 vs 247; unaliased shapes within noise of
 * each other (e.g. fwd 2600x3072x768 224 vs 254, dW 768x768x650 299 vs 222). gemm:jit packs
 * B into panels, so for exactly those cases we take the first non-brgemm implementation. */
static int dn_b_rows_alias(const dn_key *k, dnnl_data_type_t ta, dnnl_data_type_t tb, dn_pack pb) {
    int64_t ldb = pb == DN_PASS ? k->ldb : k->n; /* packed B is dense (k, n) */
    return ta == dnnl_f32 && tb == dnnl_f32 && !k->trans_b && k->k > 1 &&
           ((size_t)ldb * sizeof(float)) % 4096 == 0;
}

/* Returns a primitive desc for the first implementation whose name does not start with
 * "brg" (destroying pd), or pd itself when there is none. */
static dnnl_primitive_desc_t dn_skip_brgemm(dnnl_primitive_desc_t pd, const dnnl_matmul_desc_t *desc,
                                            const_dnnl_primitive_attr_t attr) {
    const char *impl = NULL;
    DN_CHECK(dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl));
    if (!impl || strncmp(impl, "brg", 3) != 0) return pd;
    dnnl_primitive_desc_iterator_t it;
    if (dnnl_primitive_desc_iterator_create(&it, desc, attr, dn_engine, NULL) != dnnl_success)
        return pd;
    do {
        dnnl_primitive_desc_t cand = dnnl_primitive_desc_iterator_fetch(it);
        if (!cand) break;
        const char *ci = NULL;
        DN_CHECK(dnnl_primitive_desc_query(cand, dnnl_query_impl_info_str, 0, &ci));
        if (ci && strncmp(ci, "brg", 3) != 0) {
            DN_CHECK(dnnl_primitive_desc_destroy(pd));
            pd = cand;
            break;
        }
        DN_CHECK(dnnl_primitive_desc_destroy(cand));
    } while (dnnl_primitive_desc_iterator_next(it) == dnnl_success);
    DN_CHECK(dnnl_primitive_desc_iterator_destroy(it));
    return pd;
}

/* The 2-D form (rows, cols) of a plain 3-D md of a single product (batch 1). oneDNN 2.6's
 * matmul picks a blocked weights layout for format_tag_any only in 2-D: with a batch
 * dimension, even of 1, it picks a plain one (seen in dn_block_b's result). */
static void dn_md_drop_batch(dnnl_memory_desc_t *md) {
    BT_ASSERT(md->ndims == 3 && md->dims[0] == 1 && md->format_kind == dnnl_blocked);
    dnnl_dims_t dims = {md->dims[1], md->dims[2]};
    dnnl_dims_t strides = {md->format_desc.blocking.strides[1],
                           md->format_desc.blocking.strides[2]};
    const dnnl_data_type_t dt = md->data_type;
    DN_CHECK(dnnl_memory_desc_init_by_strides(md, 2, dims, dt, strides));
}

/* Blocked B (gemm.h gemm_pack_b_request). oneDNN 2.6's bf16 brgemm matmul copies a plain B
 * into its VNNI-blocked layout inside every call; given B already blocked it skips the copy
 * and runs the same kernel in the same order (the bits are the same: tests/test_gemm.c
 * "blocked B"). Measured (2 threads, AMD EPYC with avx512_core_bf16, best of 5, oneDNN
 * alone; milliseconds plain -> blocked + the reorder): m 2600: x·Wᵀ 2600x2304x768
 * 11.33 -> 9.77 + 0.23, 2600x768x3072 14.87 -> 13.17 + 0.61, dX = dY·W 2600x768x2304
 * 11.13 -> 9.78 + 0.25; m 1300: 6.09 -> 4.77 + 0.24, 7.89 -> 6.33 + 0.62, 5.64 -> 4.67 +
 * 0.23; m 1024 gains 0.5 / -0.2 / 0.17 ms; m 320 (a text batch) gains nothing or loses
 * (1.39 -> 1.15 + 0.23, 1.81 -> 1.57 + 0.61): hence GEMM_PACK_B_MIN_M. The reorder's
 * cost grows with k*n and the saving with m*k*n. In the base bf16 step (B 8: `bench_step
 * --kernels`, BT_GEMM_PACK_B=off / auto alternated twice) the products this applies to took
 * 1.987 / 1.888 s off and 1.866 / 1.791 s on. Products with A transposed (the weight
 * gradients: B is the layer's input, k the 2600 tokens, and its reorder costs up to 1.5 ms)
 * are left as given: blocking them too moved those products from 1.169 / 1.144 s to
 * 1.145 / 1.222 s, nothing.
 * Sets md[DN_WEI] to the layout pd chose and creates the reorder from md[DN_PLAIN_B]; when
 * pd chose the plain layout itself, B runs as given (no reorder). Fails (the caller plans
 * the product without blocking) when the reorder cannot be made or would need a scratchpad. */
static dnnl_status_t dn_block_b(dn_entry *e, const_dnnl_primitive_desc_t pd) {
    const dnnl_memory_desc_t *wmd = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    if (!wmd) return dnnl_unimplemented;
    e->md[DN_WEI] = *wmd;
    if (dnnl_memory_desc_equal(&e->md[DN_WEI], &e->md[DN_PLAIN_B])) return dnnl_success;
    dnnl_primitive_attr_t attr;
    DN_CHECK(dnnl_primitive_attr_create(&attr));
    DN_CHECK(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user));
    dnnl_primitive_desc_t rpd;
    dnnl_status_t st = dnnl_reorder_primitive_desc_create(&rpd, &e->md[DN_PLAIN_B], dn_engine,
                                                          &e->md[DN_WEI], dn_engine, attr);
    DN_CHECK(dnnl_primitive_attr_destroy(attr));
    if (st != dnnl_success) return st;
    const dnnl_memory_desc_t *smd = dnnl_primitive_desc_query_md(rpd, dnnl_query_scratchpad_md, 0);
    if (smd && dnnl_memory_desc_get_size(smd) > 0) st = dnnl_unimplemented;
    if (st == dnnl_success) st = dnnl_primitive_create(&e->reorder_b, rpd);
    DN_CHECK(dnnl_primitive_desc_destroy(rpd));
    if (st != dnnl_success) return st;
    e->blocked_b_bytes = dnnl_memory_desc_get_size(&e->md[DN_WEI]);
    return dnnl_success;
}

/* Packed weights (gemm.h). The layout oneDNN 2.6's matmul picks (format_tag_any) for B = Wᵀ
 * (in, out) of a Linear product in 2-D, with a bias: on avx512_core_bf16, BA16a64b2a for bf16
 * (VNNI pairs of k, 64 columns, 16 pairs) and BA16a64b for fp32 at every m from 8 to 2600
 * (probed with m 8, 40, 320, 1024 and 2600 for the base model's weights), so one packed copy
 * serves every batch; a product whose plan wants another layout reorders from the packed one
 * per call (dn_block_b), still correct. Under the AVX2 cap fp32 gets a plain layout
 * (gemm:jit: Wᵀ row-major), which is not packed. Called with dn_engine made; takes no lock. */
static dnnl_data_type_t dn_type(bt_dtype t) {
    return t == BT_DTYPE_BF16 ? dnnl_bf16 : dnnl_f32;
}

static dnnl_status_t dn_packed_weight_md(dnnl_memory_desc_t *out_md, int64_t out, int64_t in,
                                         dnnl_data_type_t dt) {
    dnnl_memory_desc_t src, wei, bias, dst;
    dnnl_dims_t sd = {GEMM_PACK_B_MIN_M, in}, wd = {in, out}, bd = {1, out},
                dd = {GEMM_PACK_B_MIN_M, out};
    DN_CHECK(dnnl_memory_desc_init_by_tag(&src, 2, sd, dt, dnnl_ab));
    DN_CHECK(dnnl_memory_desc_init_by_tag(&wei, 2, wd, dt, dnnl_format_tag_any));
    DN_CHECK(dnnl_memory_desc_init_by_tag(&bias, 2, bd, dnnl_f32, dnnl_ab));
    DN_CHECK(dnnl_memory_desc_init_by_tag(&dst, 2, dd, dnnl_f32, dnnl_ab));
    dnnl_matmul_desc_t desc;
    DN_CHECK(dnnl_matmul_desc_init(&desc, &src, &wei, &bias, &dst));
    dnnl_primitive_attr_t attr;
    DN_CHECK(dnnl_primitive_attr_create(&attr));
    DN_CHECK(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user));
    dnnl_primitive_desc_t pd;
    dnnl_status_t st = dnnl_primitive_desc_create(&pd, &desc, attr, dn_engine, NULL);
    DN_CHECK(dnnl_primitive_attr_destroy(attr));
    if (st != dnnl_success) return st;
    const dnnl_memory_desc_t *wmd = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    if (wmd) *out_md = *wmd;
    DN_CHECK(dnnl_primitive_desc_destroy(pd));
    return wmd ? dnnl_success : dnnl_unimplemented;
}

/* W (out, in) row-major as the logical (in, out) matrix Wᵀ */
static void dn_plain_weight_md(dnnl_memory_desc_t *md, int64_t out, int64_t in,
                               dnnl_data_type_t dt) {
    dnnl_dims_t dims = {in, out}, strides = {1, in};
    DN_CHECK(dnnl_memory_desc_init_by_strides(md, 2, dims, dt, strides));
}

static void dn_engine_make(void) {
    pthread_mutex_lock(&dn_mutex);
    if (!dn_engine) DN_CHECK(dnnl_engine_create(&dn_engine, dnnl_cpu, 0));
    pthread_mutex_unlock(&dn_mutex);
}

/* The packed layout of W (out, in) of type t and W's own, row-major: returns the packed bytes,
 * or 0 when there is nothing to pack in place: only a blocked layout (gemm:jit, fp32 under
 * the AVX2 cap, asks for Wᵀ row-major, a transpose of W that no measurement here says pays)
 * of exactly W's bytes (no padding). */
static size_t dn_packed_weight_layout(dnnl_memory_desc_t *packed, dnnl_memory_desc_t *plain,
                                      bt_dtype type, size_t out, size_t in) {
    dn_engine_make();
    const dnnl_data_type_t dt = dn_type(type);
    if (dn_packed_weight_md(packed, (int64_t)out, (int64_t)in, dt) != dnnl_success) return 0;
    dn_plain_weight_md(plain, (int64_t)out, (int64_t)in, dt);
    const size_t bytes = dnnl_memory_desc_get_size(packed);
    if (packed->format_kind != dnnl_blocked || packed->format_desc.blocking.inner_nblks == 0 ||
        dnnl_memory_desc_equal(packed, plain) || bytes != out * in * bt_dtype_size(type))
        return 0;
    return bytes;
}

size_t gemm_onednn_packed_weight_bytes(bt_dtype type, size_t out, size_t in) {
    dnnl_memory_desc_t packed, plain;
    return dn_packed_weight_layout(&packed, &plain, type, out, in);
}

void gemm_onednn_pack_weight(void *w, bt_dtype type, size_t out, size_t in) {
    dnnl_memory_desc_t packed, plain;
    const size_t bytes = dn_packed_weight_layout(&packed, &plain, type, out, in);
    BT_ASSERTF(bytes > 0, "gemm: oneDNN has no blocked layout of a %zu x %zu %s weight without "
               "padding (gemm_packed_weight_bytes 0)", out, in, bt_dtype_name(type));
    void *copy = bt_alloc(bytes); /* the reorder does not run in place */
    memcpy(copy, w, bytes);
    dnnl_primitive_desc_t rpd;
    DN_CHECK(dnnl_reorder_primitive_desc_create(&rpd, &plain, dn_engine, &packed, dn_engine, NULL));
    dnnl_primitive_t reorder;
    DN_CHECK(dnnl_primitive_create(&reorder, rpd));
    DN_CHECK(dnnl_primitive_desc_destroy(rpd));
    dnnl_memory_t from, to;
    DN_CHECK(dnnl_memory_create(&from, &plain, dn_engine, copy));
    DN_CHECK(dnnl_memory_create(&to, &packed, dn_engine, w));
    dnnl_stream_t stream;
    DN_CHECK(dnnl_stream_create(&stream, dn_engine, dnnl_stream_default_flags));
    dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
    DN_CHECK(dnnl_primitive_execute(reorder, stream, 2, args));
    DN_CHECK(dnnl_stream_wait(stream));
    DN_CHECK(dnnl_stream_destroy(stream));
    DN_CHECK(dnnl_memory_destroy(from));
    DN_CHECK(dnnl_memory_destroy(to));
    DN_CHECK(dnnl_primitive_destroy(reorder));
    bt_free(copy);
}

/* Creates the primitive for `pa`/`pb`, writing C as given or (dense_c) a dense scratch;
 * returns the oneDNN status (unimplemented when no implementation exists for this
 * combination). */
static dnnl_status_t dn_try_create(dn_entry *e, dn_pack pa, dn_pack pb, int dense_c) {
    const dn_key *k = &e->key;
    dn_operand oa = dn_operand_a(k), ob = dn_operand_b(k);
    dnnl_data_type_t ta = (pa == DN_PACK_F32 || (pa == DN_PASS && k->a_type == BT_DTYPE_F32))
                              ? dnnl_f32
                              : dnnl_bf16;
    dnnl_data_type_t tb = (pb == DN_PACK_F32 || (pb == DN_PASS && k->b_type == BT_DTYPE_F32))
                              ? dnnl_f32
                              : dnnl_bf16;
    dn_operand_md(&e->md[DN_SRC], oa, (int)k->trans_a, pa, ta);
    dn_operand_md(&e->md[DN_WEI], ob, (int)k->trans_b, pb, tb);
    memset(&e->md[DN_PLAIN_B], 0, sizeof e->md[DN_PLAIN_B]);
    const int block_b = k->block_b && (tb == dnnl_bf16 || k->b_packed);
    if (block_b) e->md[DN_PLAIN_B] = e->md[DN_WEI];
    {
        dnnl_dims_t dims = {k->batch, k->m, k->n};
        dnnl_dims_t strides = {k->batch > 1 ? k->stride_c : k->m * k->ldc, k->ldc, 1};
        if (dense_c) {
            strides[0] = k->m * k->n;
            strides[1] = k->n;
        }
        DN_CHECK(dnnl_memory_desc_init_by_strides(&e->md[DN_DST], 3, dims, dnnl_f32, strides));
    }
    memset(&e->md[DN_BIAS], 0, sizeof e->md[DN_BIAS]);
    if (k->has_bias) {
        dnnl_dims_t dims = {1, 1, k->n};
        dnnl_dims_t strides = {k->n, k->n, 1};
        DN_CHECK(dnnl_memory_desc_init_by_strides(&e->md[DN_BIAS], 3, dims, dnnl_f32, strides));
    }
    if (block_b) { /* oneDNN picks the weights layout; B is reordered into it (dn_block_b) */
        for (int i = 0; i < DN_MEMS; i++)
            if (i != DN_SCRATCH && (i != DN_BIAS || k->has_bias)) dn_md_drop_batch(&e->md[i]);
        dnnl_dims_t dims = {k->k, k->n};
        DN_CHECK(dnnl_memory_desc_init_by_tag(&e->md[DN_WEI], 2, dims, tb,
                                              dnnl_format_tag_any));
        /* a packed weight is the source as it lies: the reorder is needed only where this
         * plan wants another layout than the one it was packed in */
        if (k->b_packed) DN_CHECK(dn_packed_weight_md(&e->md[DN_PLAIN_B], k->n, k->k, tb));
    }
    float alpha, beta;
    uint32_t ab = (uint32_t)k->alpha_bits, bb = (uint32_t)k->beta_bits;
    memcpy(&alpha, &ab, 4);
    memcpy(&beta, &bb, 4);
    e->bias_scaled = k->has_bias && alpha != 1.0f;
    dnnl_matmul_desc_t desc;
    DN_CHECK(dnnl_matmul_desc_init(&desc, &e->md[DN_SRC], &e->md[DN_WEI],
                                   k->has_bias ? &e->md[DN_BIAS] : NULL, &e->md[DN_DST]));

    dnnl_primitive_attr_t attr;
    DN_CHECK(dnnl_primitive_attr_create(&attr));
    DN_CHECK(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user));
    if (alpha != 1.0f) DN_CHECK(dnnl_primitive_attr_set_output_scales(attr, 1, 0, &alpha));
    /* a dense C scratch with beta 1 is added to C while copied out (dn_execute) */
    if (beta != 0.0f && !(dense_c && beta == 1.0f)) {
        dnnl_post_ops_t po;
        DN_CHECK(dnnl_post_ops_create(&po));
        DN_CHECK(dnnl_post_ops_append_sum(po, beta));
        DN_CHECK(dnnl_primitive_attr_set_post_ops(attr, po));
        DN_CHECK(dnnl_post_ops_destroy(po));
    }
    dnnl_primitive_desc_t pd;
    dnnl_status_t st = dnnl_primitive_desc_create(&pd, &desc, attr, dn_engine, NULL);
    if (st == dnnl_success && dn_b_rows_alias(k, ta, tb, pb)) pd = dn_skip_brgemm(pd, &desc, attr);
    DN_CHECK(dnnl_primitive_attr_destroy(attr));
    if (st != dnnl_success) return st;

    const dnnl_memory_desc_t *smd = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    memset(&e->md[DN_SCRATCH], 0, sizeof e->md[DN_SCRATCH]);
    e->scratch_bytes = 0;
    if (smd) {
        e->md[DN_SCRATCH] = *smd;
        e->scratch_bytes = dnnl_memory_desc_get_size(smd);
    }
    const char *impl = NULL;
    DN_CHECK(dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl));
    e->reorder_b = NULL;
    e->blocked_b_bytes = 0;
    if (block_b && dn_block_b(e, pd) != dnnl_success) {
        DN_CHECK(dnnl_primitive_desc_destroy(pd));
        return dnnl_unimplemented;
    }
    snprintf(e->impl, sizeof e->impl, "%s%s%s", impl ? impl : "?",
             (pa == DN_PACK_F32 || pb == DN_PACK_F32) ? " (bf16 widened to f32)" : "",
             e->reorder_b ? " (blocked B)" : "");
    st = dnnl_primitive_create(&e->prim, pd);
    DN_CHECK(dnnl_primitive_desc_destroy(pd));
    if (st != dnnl_success && e->reorder_b) { /* the caller may plan again without blocking */
        DN_CHECK(dnnl_primitive_destroy(e->reorder_b));
        e->reorder_b = NULL;
    }
    e->pack_a = pa;
    e->pack_b = pb;
    e->dense_c = dense_c;
    return st;
}

/* oneDNN 2.6 plans bf16 products whose C rows are strided (ldc > n, e.g. one head's
 * (T, 64) slice of the (T, 768) attention output) with gemm:jit instead of the AMX /
 * avx512_core_bf16 brgemm kernels: measured on the reference VM (1 thread, base B 2 step,
 * ONEDNN_VERBOSE): the per-head products P·V and the backward's dQ, dK, dV (325x64x325,
 * ldc 768 / 2304) ran 127 GFLOP/s, the same products with a dense C 500+. When the planned
 * implementation of a bf16 product with strided C is not brgemm but the same product into a
 * dense C is, the entry writes a per-thread dense scratch and copies it into C: m*n extra
 * loads and stores against 2*m*n*k flops. With beta 1 (the attention backward accumulates)
 * the scratch gets alpha*AB (+ bias) and the copy adds it to C (fp32 addition, one rounding,
 * as the sum post-op); with another non-zero beta C is copied in first and the post-op runs. */
static int dn_c_strided(const dn_key *k) {
    return k->ldc != k->n || (k->batch > 1 && k->stride_c != k->m * k->n);
}

static void dn_entry_destroy_primitives(dn_entry *e) {
    DN_CHECK(dnnl_primitive_destroy(e->prim));
    if (e->reorder_b) DN_CHECK(dnnl_primitive_destroy(e->reorder_b));
    e->prim = e->reorder_b = NULL;
}

static void dn_prefer_dense_c(dn_entry *e) {
    if (!dn_c_strided(&e->key) || strncmp(e->impl, "brg", 3) == 0) return;
    dn_entry alt = *e;
    alt.prim = NULL;
    if (dn_try_create(&alt, e->pack_a, e->pack_b, 1) != dnnl_success) return;
    if (strncmp(alt.impl, "brg", 3) != 0) {
        dn_entry_destroy_primitives(&alt);
        return;
    }
    dn_entry_destroy_primitives(e);
    *e = alt;
}

static void dn_create(dn_entry *e) {
    const dn_key *k = &e->key;
    if (k->compute == GEMM_COMPUTE_F32) {
        const dnnl_status_t st = dn_try_create(e, DN_PASS, DN_PASS, 0);
        BT_ASSERTF(st == dnnl_success, "gemm: oneDNN has no fp32 plan for %lld x %lld x %lld%s "
                   "(status %d)", (long long)k->m, (long long)k->n, (long long)k->k,
                   k->b_packed ? " with a packed weight" : "", (int)st);
        return;
    }
    if (k->bf16_widen) {
        DN_CHECK(dn_try_create(e, DN_PACK_F32, DN_PACK_F32, 0));
        return;
    }
    /* native: fp32 operands are rounded into bf16 scratch; bf16 operands pass as they are */
    dn_pack pa = k->a_type == BT_DTYPE_F32 ? DN_PACK_BF16 : DN_PASS;
    dn_pack pb = k->b_type == BT_DTYPE_F32 ? DN_PACK_BF16 : DN_PASS;
    dnnl_status_t st = dn_try_create(e, pa, pb, 0);
    BT_ASSERTF(st == dnnl_success || !k->b_packed,
               "gemm: oneDNN has no plan for a packed %lld x %lld weight at m %lld (status %d)",
               (long long)k->n, (long long)k->k, (long long)k->m, (int)st);
    if (st != dnnl_success && e->key.block_b) { /* no blocked plan: the plain one */
        e->key.block_b = 0;
        st = dn_try_create(e, pa, pb, 0);
        e->key.block_b = 1; /* the cache key stays what dn_lookup looks for */
    }
    if (st == dnnl_success) {
        dn_prefer_dense_c(e);
        return;
    }
    if (st == dnnl_unimplemented) st = dn_try_create(e, DN_PACK_F32, DN_PACK_F32, 0);
    DN_CHECK(st);
}

/* Finds or creates the cache entry for g. */
static const dn_entry *dn_lookup(const gemm_args *g) {
    dn_key key;
    dn_make_key(&key, g);
    uint64_t h = dn_hash(&key);
    pthread_mutex_lock(&dn_mutex);
    if (!dn_engine) DN_CHECK(dnnl_engine_create(&dn_engine, dnnl_cpu, 0));
    dn_entry *e = dn_table[h % DN_BUCKETS];
    while (e && !(e->hash == h && memcmp(&e->key, &key, sizeof key) == 0)) e = e->next;
    if (!e) {
        e = bt_calloc(sizeof *e);
        e->key = key;
        e->hash = h;
        e->id = dn_next_id++;
        dn_create(e);
        e->next = dn_table[h % DN_BUCKETS];
        dn_table[h % DN_BUCKETS] = e;
        dn_count++;
    }
    pthread_mutex_unlock(&dn_mutex);
    return e;
}

const char *gemm_onednn_impl_name(const gemm_args *g) {
    gemm_args r = *g;
    if (r.batch == 0) r.batch = 1;
    return dn_lookup(&r)->impl;
}

/* --- per-thread state --------------------------------------------------------------- */

static dn_thread *dn_thread_state(void) {
    unsigned gen = atomic_load(&dn_generation);
    if (dn_mine && dn_mine_generation == gen) return dn_mine;
    dn_thread *t = bt_calloc(sizeof *t);
    pthread_mutex_lock(&dn_mutex);
    /* dn_lookup() ran before, so the engine exists */
    DN_CHECK(dnnl_stream_create(&t->stream, dn_engine, dnnl_stream_default_flags));
    t->next = dn_threads;
    dn_threads = t;
    pthread_mutex_unlock(&dn_mutex);
    dn_mine = t;
    dn_mine_generation = gen;
    return t;
}

static void dn_slot_clear(dn_slot *s) {
    for (int i = 0; i < DN_MEMS; i++) {
        if (s->mem[i]) DN_CHECK(dnnl_memory_destroy(s->mem[i]));
        s->mem[i] = NULL;
    }
    s->e = NULL;
}

/* The calling thread's memory objects for entry e (created on first use). */
static dn_slot *dn_thread_slot(dn_thread *t, const dn_entry *e) {
    dn_slot *s = &t->slots[e->id % DN_THREAD_SLOTS];
    if (s->e == e) return s;
    dn_slot_clear(s);
    for (int i = 0; i < DN_MEMS; i++) {
        if (i == DN_BIAS && !e->key.has_bias) continue;
        if (i == DN_SCRATCH && e->scratch_bytes == 0) continue;
        if (i == DN_PLAIN_B && !e->reorder_b) continue;
        DN_CHECK(dnnl_memory_create(&s->mem[i], &e->md[i], dn_engine, DNNL_MEMORY_NONE));
    }
    s->e = e;
    return s;
}

/* --- packing ------------------------------------------------------------------------ */

/* Copies operand o (strided, of type t) dense into dst as bf16 (pack == DN_PACK_BF16) or
 * fp32 (DN_PACK_F32), rounding fp32 values to bf16 on the way in both cases (the pack only
 * happens under GEMM_COMPUTE_BF16). */
static void dn_pack_operand(void *dst, const void *src, bt_dtype t, dn_operand o, dn_pack pack) {
    long long nrows = (long long)(o.items * o.rows);
    int par = o.items * o.rows * o.cols >= (1 << 16);
#if BT_HAVE_OPENMP
    par = par && !omp_in_parallel();
#pragma omp parallel for schedule(static) if (par)
#endif
    for (long long r = 0; r < nrows; r++) {
        size_t item = (size_t)(r / o.rows), row = (size_t)(r % o.rows);
        size_t src_off = item * (size_t)o.stride + row * (size_t)o.ld;
        size_t dst_off = (size_t)r * (size_t)o.cols;
        size_t cols = (size_t)o.cols;
        /* the conversions of ops.h on this thread (rows are already spread over threads):
         * vectorized per ISA level, the bytes of bt_bf16_from_f32 / bt_f32_from_bf16 */
        if (pack == DN_PACK_BF16) {
            /* only fp32 operands are packed to bf16 */
            bf16_from_f32_serial((bt_bf16 *)dst + dst_off, (const float *)src + src_off, cols);
        } else {
            float *d = (float *)dst + dst_off;
            if (t == BT_DTYPE_BF16) {
                f32_from_bf16_serial(d, (const bt_bf16 *)src + src_off, cols);
            } else {
                /* round to bf16 and widen back, 1024 at a time through the stack */
                const float *s = (const float *)src + src_off;
                bt_bf16 tmp[1024];
                for (size_t j = 0; j < cols; j += 1024) {
                    const size_t len = cols - j < 1024 ? cols - j : 1024;
                    bf16_from_f32_serial(tmp, s + j, len);
                    f32_from_bf16_serial(d + j, tmp, len);
                }
            }
        }
    }
    (void)par;
}

static const void *dn_prepare_operand(const void *src, bt_dtype t, dn_operand o, dn_pack pack,
                                      int slot) {
    if (pack == DN_PASS) return src;
    size_t elem = pack == DN_PACK_BF16 ? sizeof(bt_bf16) : sizeof(float);
    void *dst = gemm_thread_scratch(slot, (size_t)(o.items * o.rows * o.cols) * elem);
    dn_pack_operand(dst, src, t, o, pack);
    return dst;
}

/* Runs g on entry e with the memory objects `mem` (DN_MEMS, as dn_thread_slot makes them)
 * on `stream`. */
static void dn_execute(const dn_entry *e, dnnl_memory_t *mem, dnnl_stream_t stream,
                       const gemm_args *g) {
    const void *a = dn_prepare_operand(g->a, g->a_type, dn_operand_a(&e->key), e->pack_a,
                                       GEMM_SCRATCH_A);
    const void *b = dn_prepare_operand(g->b, g->b_type, dn_operand_b(&e->key), e->pack_b,
                                       GEMM_SCRATCH_B);
    /* oneDNN takes non-const handles; it does not write src, weights or bias */
    DN_CHECK(dnnl_memory_set_data_handle(mem[DN_SRC], (void *)a));
    if (e->reorder_b) { /* B as given (or packed dense) -> the blocked layout ("Blocked B") */
        void *blocked = gemm_thread_scratch(GEMM_SCRATCH_B_BLOCKED, e->blocked_b_bytes);
        DN_CHECK(dnnl_memory_set_data_handle(mem[DN_PLAIN_B], (void *)b));
        DN_CHECK(dnnl_memory_set_data_handle(mem[DN_WEI], blocked));
        dnnl_exec_arg_t reorder_args[2] = {{DNNL_ARG_FROM, mem[DN_PLAIN_B]},
                                           {DNNL_ARG_TO, mem[DN_WEI]}};
        DN_CHECK(dnnl_primitive_execute(e->reorder_b, stream, 2, reorder_args));
    } else {
        DN_CHECK(dnnl_memory_set_data_handle(mem[DN_WEI], (void *)b));
    }
    float *c = g->c;
    const size_t mn = g->m * g->n;
    if (e->dense_c) { /* C as a dense (batch, m, n) scratch; C's values in it for the post-op */
        c = gemm_thread_scratch(GEMM_SCRATCH_C, g->batch * mn * sizeof(float));
        if (g->beta != 0.0f && g->beta != 1.0f)
            for (size_t bi = 0; bi < g->batch; bi++)
                for (size_t i = 0; i < g->m; i++)
                    memcpy(c + bi * mn + i * g->n, g->c + bi * g->stride_c + i * g->ldc,
                           g->n * sizeof(float));
    }
    DN_CHECK(dnnl_memory_set_data_handle(mem[DN_DST], c));
    dnnl_exec_arg_t args[DN_MEMS];
    int nargs = 0;
    args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_SRC, mem[DN_SRC]};
    args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, mem[DN_WEI]};
    args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_DST, mem[DN_DST]};
    if (e->key.has_bias) {
        const float *bias = g->bias;
        if (e->bias_scaled) {
            float *scaled = gemm_thread_scratch(GEMM_SCRATCH_BIAS, g->n * sizeof(float));
            for (size_t j = 0; j < g->n; j++) scaled[j] = g->bias[j] / g->alpha;
            bias = scaled;
        }
        DN_CHECK(dnnl_memory_set_data_handle(mem[DN_BIAS], (void *)bias));
        args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, mem[DN_BIAS]};
    }
    if (e->scratch_bytes) {
        void *scratch = gemm_thread_scratch(GEMM_SCRATCH_DNNL, e->scratch_bytes);
        DN_CHECK(dnnl_memory_set_data_handle(mem[DN_SCRATCH], scratch));
        args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, mem[DN_SCRATCH]};
    }
    DN_CHECK(dnnl_primitive_execute(e->prim, stream, nargs, args));
    DN_CHECK(dnnl_stream_wait(stream));
    if (e->dense_c)
        for (size_t bi = 0; bi < g->batch; bi++)
            for (size_t i = 0; i < g->m; i++) {
                float *dst = g->c + bi * g->stride_c + i * g->ldc;
                const float *src = c + bi * mn + i * g->n;
                if (g->beta == 1.0f)
                    for (size_t j = 0; j < g->n; j++) dst[j] += src[j];
                else
                    memcpy(dst, src, g->n * sizeof(float));
            }
}

static void dn_run_one(const gemm_args *g) {
    const dn_entry *e = dn_lookup(g);
    dn_thread *t = dn_thread_state();
    dn_slot *s = dn_thread_slot(t, e);
    dn_execute(e, s->mem, t->stream, g);
}

/* K split (gemm.h gemm_split_k_request). oneDNN 2.6's fp32 brgemm matmul runs products
 * without transposes slowly when k is long: the model's input gradients of c_fc (k 3072)
 * and of the fused qkv (k 2304), n 768. Measured (a driver calling gemm(), 2 threads, best
 * of 5, one product whole vs as k chunks of 768 accumulating into C; AVX512-BF16 caps and
 * uncapped alike): 2600x768x3072 34.1 -> 29.4 ms (359 -> 417 GFLOP/s), 2600x768x2304
 * 366 -> 420, 320x768x3072 341 -> 419, 320x768x50265 (an MLM decoder's input gradient)
 * 308 -> 400, 2600x1536x3072 194 -> 428, but 2600x3072x3072 438 -> 430 (so only n <= 2048);
 * chunks of 512 / 1024 / 1536: 406 / 396 / 399; the transposed forms (forwards, weight
 * gradients) within +-2%: not split. In the base step (B 8, fp32, AVX512-BF16 caps,
 * `bench_step --kernels`, BT_GEMM_SPLIT_K=off / on) those four shapes took 1.023 -> 0.919
 * s, the GEMMs 6.806 -> 6.702 s. Not split: under the AVX2 caps (gemm:jit, no brgemm matmul;
 * 233 -> 227 GFLOP/s) and native bf16 products (AMX; in the step 0.268 -> 0.280 s for the
 * same shapes, bf16 operands).
 * Numerics: the chunks' sums are added into C in k order, each within its own bound, so the
 * product stays within the classical bound of the whole (tests/test_gemm.c "split-k"); bias
 * and beta apply in the first chunk, the later ones add with beta 1. */
static int dn_split_k(const gemm_args *g) {
    if (!gemm_split_k_requested() || g->batch != 1 || g->trans_a || g->trans_b ||
        g->k < 2 * (size_t)GEMM_SPLIT_K_CHUNK || g->n > GEMM_SPLIT_K_MAX_N)
        return 0;
    if (g->compute == GEMM_COMPUTE_BF16 && !dn_bf16_widen()) return 0; /* native bf16 */
    return gemm_split_k_isa();
}

/* Split M (gemm.h gemm_split_m_request). oneDNN 2.6 threads a bf16 product whose A is
 * transposed (the weight gradients dW += doutᵀ·x, k = the batch's rows) below what the same
 * work reaches as one single-threaded product per thread over a slice of m: a driver on
 * gemm() (2 threads, bf16 operands, median of 15 calls, AMD EPYC with AVX512-BF16, no AMX)
 * measured 768x3072x2600 812 -> 969 GFLOP/s, 768x3072x320 624 -> 866, 768x3072x1300 843 ->
 * 990, 3072x768x2600 769 -> 877, 2304x768x2600 760-859 -> 871-901, 768x768x320 648 -> 750,
 * 768x768x2600 and 1024x1024x2600 within noise either way; in the base bf16 step the weight
 * gradients took 1.079-1.104 -> 0.958-1.029 s (docs/benchmarks.md "Split M"). fp32 products
 * (oneDNN's fp32 brgemm) measured no gain: native bf16 only. The slices are multiples of
 * GEMM_SPLIT_M_ROWS rows, so each is whole blocks of oneDNN's; every element of C is one
 * single-threaded product's sum (within the classical bound); for k >= ~1300 its order is
 * not the unsplit call's. A fp32 B is rounded to bf16 once, here, rather than by each
 * slice. */
static int dn_split_m_threads(const gemm_args *g) {
    if (g->batch != 1 || !g->trans_a || g->compute != GEMM_COMPUTE_BF16 || dn_bf16_widen() ||
        !gemm_split_m_active())
        return 0;
    const int t = dn_threads_now(); /* 1 inside a parallel region */
    return t >= 2 && g->m >= 2 * (size_t)GEMM_SPLIT_M_ROWS ? t : 0;
}

static void dn_run_split_m(const gemm_args *g, int nthr) {
    gemm_args whole = *g;
    if (g->b_type == BT_DTYPE_F32) { /* B rounded once, into this thread's B scratch, which
                                      * no slice uses: each passes its bf16 B as given */
        dn_key key;
        dn_make_key(&key, g);
        const dn_operand o = dn_operand_b(&key);
        whole.b = dn_prepare_operand(g->b, g->b_type, o, DN_PACK_BF16, GEMM_SCRATCH_B);
        whole.b_type = BT_DTYPE_BF16;
        whole.ldb = (size_t)o.cols;
    }
    const size_t rows = (g->m + (size_t)nthr - 1) / (size_t)nthr;
    const size_t per = (rows + GEMM_SPLIT_M_ROWS - 1) / GEMM_SPLIT_M_ROWS * GEMM_SPLIT_M_ROWS;
    const size_t ea = bt_dtype_size(g->a_type);
#if BT_HAVE_OPENMP
#pragma omp parallel num_threads(nthr)
#endif
    {
#if BT_HAVE_OPENMP
        const size_t lo = (size_t)omp_get_thread_num() * per;
#else
        const size_t lo = 0;
#endif
        if (lo < g->m) {
            gemm_args part = whole; /* rows lo.. of C: columns lo.. of the stored (k x m) A */
            part.m = g->m - lo < per ? g->m - lo : per;
            part.a = (const char *)g->a + lo * ea;
            part.c = g->c + lo * g->ldc;
            dn_run_one(&part);
        }
    }
}

void gemm_onednn_run(const gemm_args *g) {
    BT_ASSERT(g->batch >= 1 && g->m > 0 && g->n > 0 && g->k > 0);
    const int split_m = dn_split_m_threads(g);
    if (split_m) {
        dn_run_split_m(g, split_m);
        return;
    }
    if (g->batch > 1 && g->stride_a == 0 && g->stride_b == 0) {
        /* A and B both broadcast: oneDNN 2.6's matmul wants C's batch to be one of its
         * operands' (invalid_arguments otherwise), so the items run one by one, each into its
         * own C (with beta, the items' C differ) */
        gemm_args item = *g;
        item.batch = 1;
        for (size_t i = 0; i < g->batch; i++) {
            item.c = g->c + i * g->stride_c;
            gemm_onednn_run(&item);
        }
        return;
    }
    if (!dn_split_k(g)) {
        dn_run_one(g);
        return;
    }
    const size_t ea = bt_dtype_size(g->a_type), eb = bt_dtype_size(g->b_type);
    gemm_args part = *g;
    for (size_t k0 = 0; k0 < g->k; k0 += GEMM_SPLIT_K_CHUNK) {
        part.k = g->k - k0 < GEMM_SPLIT_K_CHUNK ? g->k - k0 : GEMM_SPLIT_K_CHUNK;
        part.a = (const char *)g->a + k0 * ea;          /* columns k0.. of A (m x k) */
        part.b = (const char *)g->b + k0 * g->ldb * eb; /* rows k0.. of B (k x n) */
        if (k0 > 0) {
            part.beta = 1.0f;
            part.bias = NULL;
        }
        dn_run_one(&part);
    }
}

/* --- AUTO bf16 route ------------------------------------------------------------------ */

/* Times the two ways bf16 mode can run a Linear forward (fp32 activations (512, 768), weight
 * (3072, 768) read transposed, fp32 bias): native (activations rounded, the bf16 weight copy)
 * and plain fp32 (the fp32 weights, no rounding: route FP32), on private primitives
 * planned for the calling context; best of 3 calls each, interleaved, after one warm-up
 * call each (JIT, page faults), measured again when fp32 wins (below). Sets the AUTO result and its text; returns 1. Serialized by
 * dn_route_mutex; a caller that waited finds the result already set and measures nothing. */
static int dn_measure_routes(double *native_s, double *fp32_s) {
    enum { M = 512, N = 3072, K = 768, REPS = 4 };
    pthread_mutex_lock(&dn_route_mutex);
    if (atomic_load(&dn_route_auto) >= 0) {
        *native_s = dn_route_native_s;
        *fp32_s = dn_route_fp32_s;
        pthread_mutex_unlock(&dn_route_mutex);
        return 1;
    }
    dn_engine_make();
    float *a = bt_alloc((size_t)M * K * sizeof *a), *bias = bt_alloc((size_t)N * sizeof *bias);
    float *c = bt_alloc((size_t)M * N * sizeof *c);
    bt_bf16 *w = bt_alloc((size_t)N * K * sizeof *w);
    float *wf = bt_alloc((size_t)N * K * sizeof *wf);
    for (size_t i = 0; i < (size_t)M * K; i++) a[i] = 0.03f * (float)((int)(i % 17) - 8);
    for (size_t i = 0; i < (size_t)N * K; i++) {
        wf[i] = 0.02f * (float)((int)(i % 13) - 6);
        w[i] = bt_bf16_from_f32(wf[i]);
    }
    for (size_t i = 0; i < (size_t)N; i++) bias[i] = 0.1f;
    /* clang-format off */
    const gemm_args g = {.trans_b = 1, .m = M, .n = N, .k = K, .a_type = BT_DTYPE_F32,
                         .b_type = BT_DTYPE_BF16, .a = a, .lda = K, .b = w, .ldb = K, .c = c,
                         .ldc = N, .alpha = 1.0f, .bias = bias, .compute = GEMM_COMPUTE_BF16,
                         .batch = 1};
    /* clang-format on */
    /* the alternative: the same product in plain fp32 on the fp32 weights */
    gemm_args g32 = g;
    g32.b_type = BT_DTYPE_F32;
    g32.b = wf;
    g32.compute = GEMM_COMPUTE_F32;
    const gemm_args *run[2] = {&g, &g32};
    dn_entry e[2];
    dnnl_memory_t mem[2][DN_MEMS];
    dnnl_stream_t stream;
    DN_CHECK(dnnl_stream_create(&stream, dn_engine, dnnl_stream_default_flags));
    for (int r = 0; r < 2; r++) { /* r = 1: plain fp32 */
        memset(&e[r], 0, sizeof e[r]);
        memset(mem[r], 0, sizeof mem[r]);
        dn_make_key_route(&e[r].key, run[r], 0);
        dn_create(&e[r]);
        for (int i = 0; i < DN_MEMS; i++) {
            if ((i == DN_BIAS && !e[r].key.has_bias) || (i == DN_SCRATCH && !e[r].scratch_bytes) ||
                (i == DN_PLAIN_B && !e[r].reorder_b))
                continue;
            DN_CHECK(dnnl_memory_create(&mem[r][i], &e[r].md[i], dn_engine, DNNL_MEMORY_NONE));
        }
    }
    /* A verdict against native is measured again (up to ATTEMPTS rounds, 50 ms apart, the
     * best time of each route over all rounds): a process started while the previous one
     * still returns gigabytes to the kernel saw native at a fifth of its speed for one
     * round and ran a whole benchmark on the fp32 route (docs/benchmarks.md). */
    enum { ATTEMPTS = 3 };
    double best[2] = {1e30, 1e30};
    for (int attempt = 0; attempt < ATTEMPTS; attempt++) {
        if (attempt > 0) {
            if (gemm_bf16_route_pick(best[0], best[1]) == GEMM_BF16_NATIVE) break;
            nanosleep(&(struct timespec){.tv_sec = 0, .tv_nsec = 50000000}, NULL);
        }
        for (int rep = 0; rep < REPS; rep++) {
            for (int r = 0; r < 2; r++) {
                const double t0 = bt_now_s();
                dn_execute(&e[r], mem[r], stream, run[r]);
                const double dt = bt_now_s() - t0;
                if (rep > 0 && dt < best[r]) best[r] = dt;
            }
        }
    }
    for (int r = 0; r < 2; r++) {
        for (int i = 0; i < DN_MEMS; i++)
            if (mem[r][i]) DN_CHECK(dnnl_memory_destroy(mem[r][i]));
        dn_entry_destroy_primitives(&e[r]);
    }
    DN_CHECK(dnnl_stream_destroy(stream));
    bt_free(a);
    bt_free(bias);
    bt_free(c);
    bt_free(w);
    bt_free(wf);
    const gemm_bf16_route pick = gemm_bf16_route_pick(best[0], best[1]);
    const double gf = 2.0 * M * N * K * 1e-9;
    snprintf(dn_route_text, sizeof dn_route_text,
             "%s (auto: native %.1f GFLOP/s [%s], fp32 %.1f GFLOP/s [%s] on %dx%dx%d; "
             "BT_GEMM_BF16=native|fp32|widened pins one)",
             gemm_bf16_route_name(pick), gf / best[0], e[0].impl, gf / best[1], e[1].impl, M, N,
             K);
    dn_route_native_s = *native_s = best[0];
    dn_route_fp32_s = *fp32_s = best[1];
    atomic_store(&dn_route_auto, (int)pick);
    pthread_mutex_unlock(&dn_route_mutex);
    return 1;
}

void gemm_onednn_release(void) {
    pthread_mutex_lock(&dn_mutex);
    for (dn_thread *t = dn_threads; t;) {
        dn_thread *next = t->next;
        for (int i = 0; i < DN_THREAD_SLOTS; i++) dn_slot_clear(&t->slots[i]);
        DN_CHECK(dnnl_stream_destroy(t->stream));
        bt_free(t);
        t = next;
    }
    dn_threads = NULL;
    for (int b = 0; b < DN_BUCKETS; b++) {
        for (dn_entry *e = dn_table[b]; e;) {
            dn_entry *next = e->next;
            dn_entry_destroy_primitives(e);
            bt_free(e);
            e = next;
        }
        dn_table[b] = NULL;
    }
    dn_count = 0;
    dn_next_id = 0;
    if (dn_engine) DN_CHECK(dnnl_engine_destroy(dn_engine));
    dn_engine = NULL;
    atomic_fetch_add(&dn_generation, 1u);
    pthread_mutex_unlock(&dn_mutex);
}

#else /* !BT_HAVE_ONEDNN */

/* Built without oneDNN: gemm_backend_available(GEMM_BACKEND_ONEDNN) is 0, so gemm_with()
 * never routes here; these keep the interface linkable and honest. */
int gemm_onednn_built(void) {
    return 0;
}

unsigned gemm_onednn_cpu_isa(void) {
    return 0;
}

size_t gemm_onednn_cache_size(void) {
    return 0;
}

const char *gemm_onednn_impl_name(const gemm_args *g) {
    (void)g;
    return "n/a";
}

gemm_bf16_route gemm_onednn_bf16_route(void) {
    return GEMM_BF16_FP32;
}

const char *gemm_onednn_bf16_describe(void) {
    return "fp32 (oneDNN not built)";
}

int gemm_onednn_bf16_measure(double *native_s, double *fp32_s) {
    *native_s = *fp32_s = 0.0;
    return 0;
}

void gemm_onednn_run(const gemm_args *g) {
    (void)g;
    BT_ASSERTF(0, "gemm: the oneDNN backend is not built into this binary");
}

void gemm_onednn_release(void) {}

#endif
