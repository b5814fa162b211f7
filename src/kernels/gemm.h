/* gemm.h: the one interface through which every matrix product in bt runs.
 *
 *   C[m x n] = alpha * op(A)[m x k] * op(B)[k x n] + beta * C  (+ bias[n] on every row)
 *
 * Row-major. op(X) = X or Xᵀ (trans_a / trans_b). Leading dimensions are in elements of the
 * stored (untransposed) row-major matrix: A is (m x k) with lda >= k, or, transposed, stored
 * (k x m) with lda >= m; likewise B. C is always fp32, ldc >= n.
 *
 * Batched/strided: `batch` products (0 counts as 1), item i using a + i*stride_a,
 * b + i*stride_b, c + i*stride_c (strides in elements; a stride of 0 broadcasts).
 *
 * Operand types: A and B are each F32 or BF16 (bt_bf16 raw bits). `compute` says what the
 * product rounds its operands to: GEMM_COMPUTE_F32 requires F32 operands and is exact fp32
 * math; GEMM_COMPUTE_BF16 rounds each operand to bf16 (round to nearest even; a no-op for
 * operands already BF16) and accumulates in fp32. Every backend implements exactly these
 * semantics; they differ only in summation order.
 *
 * Backends (chosen at run time): REF (plain loops, the oracle tests use), OPENBLAS (fp32
 * sgemm; bf16 compute rounds operands into scratch, then sgemm), ONEDNN (fp32 and bf16 matmul
 * primitives, cached per shape so the hot loop creates nothing). ONEDNN runs bf16 compute in
 * one of two ways with the same semantics: "native" (bf16 primitive, vdpbf16ps) or "fp32"
 * (the bf16-rounded operands widened to fp32 and an fp32 primitive). Where the CPU has no
 * native bf16 (ISA below avx512_core_bf16) it always uses "fp32" (oneDNN's own emulation on
 * AVX512_CORE measured 4-5x slower; AVX2 has no bf16 matmul at all): the engine never
 * refuses.
 *
 * bf16 MODE (the model) is one level up: it asks gemm_bf16_mode_compute() whether to request
 * GEMM_COMPUTE_BF16 at all. Where native bf16 products do not beat plain fp32 ones (no native
 * bf16, or AUTO measured native less than 10% faster), bf16 mode runs its products as plain
 * fp32 GEMMs on the fp32 master weights (route FP32): the widened route would do the same
 * fp32 arithmetic plus rounding and re-packing both operands on every call, and the bf16
 * weight copy's upkeep, so it is always slower than fp32 mode (measured 1.04-1.1x,
 * docs/benchmarks.md "Session 3"). BT_GEMM_BF16=native|fp32|widened pins a route
 * (widened: bf16 semantics without native bf16, for checking bf16 numerics anywhere). See
 * docs/benchmarks.md "GEMM".
 *
 * Edge cases: m == 0 or n == 0 is a no-op; k == 0 or alpha == 0 gives C = beta*C + bias
 * without reading A or B (the BLAS convention, so NaN in an unused A cannot leak). With batch > 1,
 * stride_c must be non-zero (products may not write the same C); A and B may broadcast.
 *
 * Threading (see docs/benchmarks.md "GEMM" for measurements):
 *   - RECOMMENDED: call gemm() from one thread, outside OpenMP parallel regions, with the
 *     largest product you can form (batch the per-head products via `batch`). oneDNN (built
 *     with OpenMP in Debian) and OpenBLAS (pthreads build, its own thread pool) then use every
 *     core on that one product.
 *   - ALLOWED: calling gemm() concurrently, e.g. from inside `#pragma omp parallel` (attention
 *     per (batch, head) block). Every backend is correct there: the oneDNN primitive cache is
 *     guarded by a mutex, streams, memory objects, scratchpads and bf16 conversion buffers are
 *     per thread. ONEDNN then runs each call on the calling thread only (oneDNN sees
 *     omp_in_parallel(); primitives are cached separately for that context). OPENBLAS has no
 *     such switch: each call inside a parallel region still fans out to OpenBLAS' own threads,
 *     oversubscribing the cores, so prefer ONEDNN (the default) for that pattern.
 *   - Backend selection (gemm_set_backend/gemm_init_from_env) is meant for program start; it
 *     is atomic but does not wait for calls in flight.
 *
 * Deliberately not here: fused activations (kernels in ops.h do that work), int8. */
#ifndef BT_GEMM_H
#define BT_GEMM_H

#include <stddef.h>

#include "dtype.h"
#include "status.h"

typedef enum {
    GEMM_BACKEND_REF,
    GEMM_BACKEND_OPENBLAS,
    GEMM_BACKEND_ONEDNN,
    GEMM_BACKEND_COUNT,
} gemm_backend;

typedef enum {
    GEMM_COMPUTE_F32,
    GEMM_COMPUTE_BF16,
} gemm_compute;

typedef struct gemm_args {
    int trans_a, trans_b;            /* 0 or 1 */
    size_t m, n, k;
    bt_dtype a_type, b_type;         /* BT_DTYPE_F32 or BT_DTYPE_BF16 */
    const void *a;                   /* (m, k) or, trans_a, (k, m); row stride lda */
    size_t lda;
    const void *b;                   /* (k, n) or, trans_b, (n, k); row stride ldb */
    size_t ldb;
    float *c;                        /* (m, n); row stride ldc */
    size_t ldc;
    float alpha, beta;               /* beta = 0 means C is not read (may hold garbage/NaN) */
    const float *bias;               /* (n) added to every row after alpha*AB + beta*C; or NULL */
    gemm_compute compute;
    size_t batch;                    /* 0 or 1: a single product */
    size_t stride_a, stride_b, stride_c;
    int b_packed;                    /* B is a weight packed by gemm_pack_weight ("Packed
                                        weights" below): trans_b 1, n = out, k = in = ldb, a
                                        single product, b_type BF16 with compute BF16 or F32
                                        with compute F32 */
} gemm_args;

/* Reads BT_GEMM (ref | openblas | onednn) if set, else picks the fastest available backend
 * (oneDNN when built, else OpenBLAS), BT_GEMM_BF16 (auto | native | fp32, default auto;
 * see above), BT_GEMM_SPLIT_K (on | off, default on; below), BT_GEMM_PACK_B and
 * BT_GEMM_SPLIT_M (auto | on | off, default auto; below). Returns an error naming the
 * variable and value if one is not one of its names or BT_GEMM names a backend not built,
 * or when the backend it would use is OpenBLAS and this CPU cannot run the kernels
 * OPENBLAS_CORETYPE forced (cpu.h bt_openblas_core_check; gemm_set_backend refuses it too)
 * (the settings are then left unchanged). Safe to call more than once. main() should call it
 * so a bad BT_GEMM is reported as an error; a gemm() call before any selection runs this once
 * and, on a bad value, prints the message to stderr and uses the default backend. */
bt_status gemm_init_from_env(void);

/* Backend by name ("ref", "openblas", "onednn"); error naming the value otherwise. */
bt_status gemm_backend_from_name(const char *name, gemm_backend *out);
const char *gemm_backend_name(gemm_backend b);
int gemm_backend_available(gemm_backend b);
bt_status gemm_set_backend(gemm_backend b);
gemm_backend gemm_get_backend(void);

/* How bf16 mode runs its GEMMs, and how GEMM_COMPUTE_BF16 runs on the oneDNN backend (see
 * the top comment). bf16 MODE (the model's BT_PRECISION_BF16) asks gemm_bf16_mode_compute()
 * which compute to request: BF16 on the NATIVE and WIDENED routes, F32 on the FP32 route. */
typedef enum {
    GEMM_BF16_NATIVE,  /* bf16 primitives (vdpbf16ps / AMX) */
    GEMM_BF16_FP32,    /* bf16 mode computes its GEMMs in plain fp32 on the fp32 master weights
                          (no rounding, no bf16 weight copy: exactly fp32 mode's products);
                          explicit GEMM_COMPUTE_BF16 calls still get bf16 semantics, widened */
    GEMM_BF16_AUTO,    /* NATIVE or FP32, whichever is faster, measured once per process */
    GEMM_BF16_WIDENED, /* bf16 semantics (operands rounded to bf16) on fp32 primitives: the
                          bf16-rounded operands widened on every call; slower than FP32, kept
                          to run bf16 numerics on a CPU without native bf16 */
} gemm_bf16_route;

/* Parses "native" | "fp32" | "auto" | "widened"; error naming the value otherwise. */
bt_status gemm_bf16_route_from_name(const char *name, gemm_bf16_route *out);
const char *gemm_bf16_route_name(gemm_bf16_route r);
/* Sets the requested route (what BT_GEMM_BF16 sets); applies to primitives created from now
 * on (call gemm_release() to drop cached ones). */
void gemm_bf16_route_request(gemm_bf16_route r);
/* The route bf16 runs on now, never AUTO:
 *   - pinned (BT_GEMM_BF16=native|fp32|widened): that route, except NATIVE where there is no
 *     native bf16 (backend not oneDNN, or the CPU's ISA below avx512_core_bf16), which runs
 *     WIDENED (the same bf16 semantics);
 *   - AUTO: FP32 where there is no native bf16 (nothing measured); else the result of one
 *     measurement (made on the first call, ~0.1-0.3 s): a Linear-shaped 512x3072x768 product
 *     as the model runs it, native (fp32 activations rounded, bf16 weights) against plain
 *     fp32 (fp32 activations and weights), best of 3 after a warm-up; NATIVE only when at
 *     least 10% faster, so the pick does not flip on noise where the two are close.
 * Call it at model setup, outside parallel regions, so the measurement uses every thread;
 * the first bf16 gemm() calls it otherwise. */
gemm_bf16_route gemm_bf16_route_active(void);
/* What bf16 mode's products request (towers.h model_compute): GEMM_COMPUTE_F32 when the
 * active route is FP32, else GEMM_COMPUTE_BF16 (and then a bf16 copy of the weights pays). */
gemm_compute gemm_bf16_mode_compute(void);
/* One line saying which route bf16 runs on and why (requested, or measured with both
 * rates); resolves AUTO like gemm_bf16_route_active. Static storage. */
const char *gemm_bf16_route_describe(void);
/* The AUTO rule alone (for tests): NATIVE when native_s * 1.1 < fp32_s, else FP32. */
gemm_bf16_route gemm_bf16_route_pick(double native_s, double fp32_s);
/* Runs the AUTO measurement now (again) and returns the seconds of the best native and
 * plain fp32 call; sets the AUTO result. 0 when oneDNN is not built or the CPU has no
 * native bf16 (nothing measured, *native_s = *fp32_s = 0). */
int gemm_bf16_route_measure(double *native_s, double *fp32_s);

/* K split on the oneDNN backend (gemm_onednn.c, "K split"): a product without transposes
 * whose sum is long (k >= 2 GEMM_SPLIT_K_CHUNK, n <= GEMM_SPLIT_K_MAX_N) runs as consecutive
 * products over k chunks of GEMM_SPLIT_K_CHUNK, each accumulating into C, when it runs on
 * oneDNN's fp32 brgemm kernels (fp32 or widened bf16 compute, oneDNN's ISA avx512_core or
 * better: gemm_split_k_isa). On by default; BT_GEMM_SPLIT_K=off (or gemm_split_k_request(0))
 * turns it off, for measurements. Applies to the next call. */
enum { GEMM_SPLIT_K_CHUNK = 768, GEMM_SPLIT_K_MAX_N = 2048 };
void gemm_split_k_request(int on);
int gemm_split_k_requested(void);
/* 1 when oneDNN's ISA has the fp32 brgemm kernels the split is for (avx512_core or better;
 * 0 when oneDNN is not built) */
int gemm_split_k_isa(void);

/* Blocked B on the oneDNN backend's native bf16 route (gemm_onednn.c, "Blocked B"). oneDNN
 * 2.6's bf16 brgemm matmul copies a plain B into its blocked (VNNI) layout inside every call,
 * per block of rows of C, and runs 12-19% slower than on a B already in that layout. A
 * single product (batch 1) with m >= GEMM_PACK_B_MIN_M and A not transposed (a Linear's
 * forward and input gradient, where B is the weight) therefore reorders B once into a
 * per-thread buffer in the layout oneDNN asks for and runs on that: the same kernel and
 * summation order, so the same bits (tests/test_gemm.c "blocked B"). AUTO (the default)
 * does it where oneDNN's ISA is avx512_core_bf16 without AMX (measured there:
 * docs/benchmarks.md "Blocked B"); ON does it wherever the native route runs (AMX: not
 * measured); OFF never. BT_GEMM_PACK_B=auto|on|off sets it; applies to shapes not yet
 * cached (gemm_release() drops cached ones). */
enum { GEMM_PACK_B_MIN_M = 1024 };
typedef enum { GEMM_PACK_B_AUTO, GEMM_PACK_B_ON, GEMM_PACK_B_OFF } gemm_pack_b_mode;
void gemm_pack_b_request(gemm_pack_b_mode mode);
gemm_pack_b_mode gemm_pack_b_requested(void);
/* 1 when products on the native bf16 route get a blocked B (the request resolved on this
 * machine's ISA; 0 when oneDNN is not built or has no native bf16) */
int gemm_pack_b_active(void);
/* Split M on the oneDNN backend's native bf16 route (gemm_onednn.c, "Split M"). oneDNN 2.6
 * threads a product whose A is transposed (a weight gradient, dW += doutᵀ·x) below the same
 * work done as one single-threaded product per thread over consecutive slices of its m rows:
 * 13-40% per shape in the base bf16 step (docs/benchmarks.md "Split M"). So a single product
 * (batch 1) with A transposed and m >= 2 GEMM_SPLIT_M_ROWS, called outside a parallel region with
 * two or more threads, runs as those slices (GEMM_SPLIT_M_ROWS-row multiples), an fp32 B
 * rounded to bf16 once before them. Every element of C is still one single-threaded
 * product's sum, so the result stays within the classical bound; for long sums (k of about
 * 1300 and more, where the unsplit call sums in another order) the bits differ from the
 * unsplit call's (tests/test_gemm.c "split M"). AUTO (the default) splits where oneDNN's ISA
 * is avx512_core_bf16 without AMX (measured there); ON wherever the native route runs (AMX:
 * not measured); OFF never. BT_GEMM_SPLIT_M=auto|on|off sets it; applies to the next call. */
enum { GEMM_SPLIT_M_ROWS = 64 };
typedef enum { GEMM_SPLIT_M_AUTO, GEMM_SPLIT_M_ON, GEMM_SPLIT_M_OFF } gemm_split_m_mode;
void gemm_split_m_request(gemm_split_m_mode mode);
gemm_split_m_mode gemm_split_m_requested(void);
/* 1 when native bf16 products with A transposed are split (the request resolved on this
 * machine's ISA; 0 when oneDNN is not built or has no native bf16) */
int gemm_split_m_active(void);

/* Packed weights (inference: model.h bt_model_pack_weights). A Linear's weight W (out, in),
 * read by x·Wᵀ products, can be stored once in the blocked layout oneDNN's matmul reads B =
 * Wᵀ in, so no product copies it. BF16 (a bf16 weight under compute BF16, the native route):
 * Blocked B above copies it in every call, and only from GEMM_PACK_B_MIN_M rows, while a
 * 320-row text product copies it inside the primitive. F32 (compute F32): oneDNN's fp32
 * brgemm kernels (ISA avx512_core or better) copy a transposed B inside every call; gemm:jit
 * (AVX2) reads it plain, so nothing is packed there. The kernel and its summation order are
 * the ones the plain weight runs, so the results are the same bits (tests/test_gemm.c "packed
 * weights").
 * gemm_packed_weight_bytes: the bytes of that layout for W (out, in) of `type`, or 0 when
 * products cannot read it now: not the oneDNN backend; BF16 off the native route or without
 * Blocked B (gemm_pack_b_active: BT_GEMM_PACK_B=off, or AMX under AUTO); F32 with
 * BT_GEMM_PACK_B=off; oneDNN's choice is the plain layout; or it needs padding (more than
 * out * in elements), so a caller can pack in place.
 * gemm_pack_weight: rewrites w, row-major (out, in) of `type`, in place into that layout
 * (requires gemm_packed_weight_bytes > 0). A product reads it with gemm_args.b_packed = 1 on
 * the same backend (and, BF16, route: checked). */
size_t gemm_packed_weight_bytes(bt_dtype type, size_t out, size_t in);
void gemm_pack_weight(void *w, bt_dtype type, size_t out, size_t in);

/* 1 if the CPU executes bf16 dot products natively (oneDNN's detected ISA is
 * avx512_core_bf16 or better), 0 otherwise. */
int gemm_cpu_has_bf16(void);
/* Text describing the CPU ISA oneDNN dispatches to (for benchmark and log headers). */
const char *gemm_cpu_isa_name(void);
/* The kernel set OpenBLAS chose when it loaded ("SkylakeX", "Haswell", or its generic
 * fallback "Prescott"; gemm_openblas.c): kernels/cpu.h bt_runtime_prefer_start_environment. */
const char *gemm_openblas_core(void);

/* Runs the product on the current backend / on a given backend. Shapes are checked by
 * BT_ASSERT (they are programming errors, not user input). */
void gemm(const gemm_args *g);
void gemm_with(gemm_backend backend, const gemm_args *g);

/* A buffer of at least `bytes` owned by the calling thread, for a caller's own operands
 * (e.g. the bf16 rounding of an fp32 operand that two products read: ops.c), kept and grown
 * across calls and freed by gemm_release(); gemm() never touches it. Contents undefined on
 * return; the next call on the same thread may move it. */
void *gemm_caller_scratch(size_t bytes);

/* Releases cached oneDNN primitives and scratch (tests and tools call it before exit so
 * valgrind sees no leak). Must not run concurrently with gemm() calls; gemm() may be called
 * again afterwards (everything is re-created lazily). */
void gemm_release(void);

/* --- for tests and benchmarks --------------------------------------------------------- */

/* Per-shape profile (bench_step --kernels): after gemm_profile_start(), every gemm() that
 * kernel_clock.h counts as GEMM (outside attention and parallel regions) adds its own seconds
 * to its shape's row, so a profile shows which products run below the machine's GEMM peak.
 * One mutex per recorded call (the model makes a few thousand per step); off by default. */
typedef struct gemm_shape {
    size_t m, n, k, batch;
    int trans_a, trans_b;
    bt_dtype a_type, b_type;
    gemm_compute compute;
    int accumulate; /* beta != 0 */
    int bias;       /* has a bias */
} gemm_shape;
typedef struct gemm_shape_time {
    gemm_shape shape;
    size_t calls;
    double seconds;
} gemm_shape_time;
/* Clears the rows and starts recording (it then stays on). */
void gemm_profile_start(void);
/* Copies up to cap rows in first-seen order; *dropped (if not NULL) = calls not shown (the
 * table holds 128 shapes, or rows beyond cap). Returns the number of rows. */
size_t gemm_profile_read(gemm_shape_time *out, size_t cap, size_t *dropped);

/* Number of oneDNN primitives in the cache (0 when oneDNN is not built). A repeated call of
 * the same shape must not grow it. */
size_t gemm_onednn_cache_size(void);
/* oneDNN's implementation name for the primitive that runs g (e.g. "brg:avx512_core_bf16"),
 * creating and caching it if needed; "n/a" when oneDNN is not built. The string lives until
 * gemm_release(). */
const char *gemm_onednn_impl_name(const gemm_args *g);

#endif
