/* gemm.c: the GEMM front end: backend selection (BT_GEMM), argument checks, the cases every
 * backend shares (empty products, k == 0), the batch loop for backends without native
 * batching (REF, OPENBLAS), per-thread scratch buffers, and the CPU ISA queries.
 *
 * Deliberately not here: any arithmetic beyond the trivial k == 0 case (gemm_ref.c,
 * gemm_openblas.c, gemm_onednn.c do the products), oneDNN objects (gemm_onednn.c). */
#include "kernels/gemm_backend.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bt_config.h"
#include "kernels/cpu.h"
#include "kernels/kernel_clock.h"
#include "settings.h"

/* -1 = not selected yet; otherwise a gemm_backend. Atomic because gemm() may run on many
 * threads while main() selects (selection is meant for program start, see gemm.h). */
static _Atomic int gemm_current = -1;
static pthread_once_t gemm_lazy_once = PTHREAD_ONCE_INIT;
/* The route BT_GEMM_BF16 (or gemm_bf16_route_request) asks for; AUTO by default. */
static _Atomic int gemm_route_requested = GEMM_BF16_AUTO;
/* BT_GEMM_SPLIT_K (or gemm_split_k_request): 1 on, 0 off */
static _Atomic int gemm_split_k = 1;

void gemm_split_k_request(int on) { atomic_store(&gemm_split_k, on ? 1 : 0); }

int gemm_split_k_requested(void) { return atomic_load(&gemm_split_k); }

/* BT_GEMM_PACK_B (or gemm_pack_b_request): a gemm_pack_b_mode */
static _Atomic int gemm_pack_b = GEMM_PACK_B_AUTO;

void gemm_pack_b_request(gemm_pack_b_mode mode) { atomic_store(&gemm_pack_b, (int)mode); }

gemm_pack_b_mode gemm_pack_b_requested(void) { return (gemm_pack_b_mode)atomic_load(&gemm_pack_b); }

/* BT_GEMM_SPLIT_M (or gemm_split_m_request): a gemm_split_m_mode */
static _Atomic int gemm_split_m = GEMM_SPLIT_M_AUTO;

void gemm_split_m_request(gemm_split_m_mode mode) { atomic_store(&gemm_split_m, (int)mode); }

gemm_split_m_mode gemm_split_m_requested(void) {
    return (gemm_split_m_mode)atomic_load(&gemm_split_m);
}

/* An auto | on | off switch's value (0, 1, 2: the order of gemm_pack_b_mode and
 * gemm_split_m_mode), or an error naming the variable and value. */
static bt_status gemm_switch_from_env(bt_setting var, int *mode) {
    const char *v = bt_setting_value(var);
    if (!v || !*v) return BT_OK;
    static const char *const names[3] = {"auto", "on", "off"};
    for (int i = 0; i < 3; i++)
        if (strcmp(v, names[i]) == 0) {
            *mode = i;
            return BT_OK;
        }
    return bt_fail(BT_ERR_ARG, "environment variable %s: '%s' is unknown; expected auto, on or off",
                   bt_setting_name(var), v);
}

static const char *const gemm_names[GEMM_BACKEND_COUNT] = {"ref", "openblas", "onednn"};

const char *gemm_backend_name(gemm_backend b) {
    if ((int)b < 0 || b >= GEMM_BACKEND_COUNT) return "unknown";
    return gemm_names[b];
}

bt_status gemm_backend_from_name(const char *name, gemm_backend *out) {
    if (name) {
        for (int i = 0; i < GEMM_BACKEND_COUNT; i++) {
            if (strcmp(name, gemm_names[i]) == 0) {
                *out = (gemm_backend)i;
                return BT_OK;
            }
        }
    }
    return bt_fail(BT_ERR_ARG, "GEMM backend '%s' is unknown; expected one of: ref, openblas, onednn",
                   name ? name : "(null)");
}

int gemm_backend_available(gemm_backend b) {
    switch (b) {
    case GEMM_BACKEND_REF:
    case GEMM_BACKEND_OPENBLAS:
        return 1;
    case GEMM_BACKEND_ONEDNN:
        return gemm_onednn_built();
    default:
        return 0;
    }
}

/* BT_OK when this CPU runs backend b's code: OpenBLAS's loaded kernels may need more than
 * the CPU has when OPENBLAS_CORETYPE forced them (cpu.h bt_openblas_core_check). */
static bt_status gemm_backend_runs_here(gemm_backend b) {
    return b == GEMM_BACKEND_OPENBLAS ? bt_openblas_core_check() : BT_OK;
}

bt_status gemm_set_backend(gemm_backend b) {
    if ((int)b < 0 || b >= GEMM_BACKEND_COUNT)
        return bt_fail(BT_ERR_ARG, "GEMM backend %d is out of range", (int)b);
    if (!gemm_backend_available(b))
        return bt_fail(BT_ERR_UNSUPPORTED,
                       "GEMM backend '%s' is not built into this binary (oneDNN was not found "
                       "at configure time; install libdnnl-dev and re-run meson setup)",
                       gemm_backend_name(b));
    const bt_status s = gemm_backend_runs_here(b);
    if (s != BT_OK) return s;
    atomic_store(&gemm_current, (int)b);
    return BT_OK;
}

static gemm_backend gemm_default_backend(void) {
    return gemm_backend_available(GEMM_BACKEND_ONEDNN) ? GEMM_BACKEND_ONEDNN
                                                       : GEMM_BACKEND_OPENBLAS;
}

bt_status gemm_init_from_env(void) {
    /* BT_CPU_ISA first: it may set DNNL_MAX_CPU_ISA, which oneDNN reads once (cpu.h) */
    if (bt_cpu_isa_init_from_env() != BT_OK) return BT_ERR_ARG;
    const char *w = bt_setting_value(BT_SET_GEMM_BF16);
    gemm_bf16_route route = GEMM_BF16_AUTO;
    if (w && *w && gemm_bf16_route_from_name(w, &route) != BT_OK)
        return bt_fail(BT_ERR_ARG,
                       "environment variable BT_GEMM_BF16: '%s' is unknown; expected auto, "
                       "native, fp32 or widened",
                       w);
    const char *sk = bt_setting_value(BT_SET_GEMM_SPLIT_K);
    if (sk && *sk && strcmp(sk, "on") != 0 && strcmp(sk, "off") != 0)
        return bt_fail(BT_ERR_ARG,
                       "environment variable BT_GEMM_SPLIT_K: '%s' is unknown; expected on or off",
                       sk);
    if (sk && *sk) gemm_split_k_request(strcmp(sk, "on") == 0);
    int pack_b = (int)gemm_pack_b_requested(), split_m = (int)gemm_split_m_requested();
    if (gemm_switch_from_env(BT_SET_GEMM_PACK_B, &pack_b) != BT_OK ||
        gemm_switch_from_env(BT_SET_GEMM_SPLIT_M, &split_m) != BT_OK)
        return BT_ERR_ARG;
    gemm_pack_b_request((gemm_pack_b_mode)pack_b);
    gemm_split_m_request((gemm_split_m_mode)split_m);
    const char *v = bt_setting_value(BT_SET_GEMM);
    if (!v || !*v) {
        const bt_status s = gemm_backend_runs_here(gemm_default_backend());
        if (s != BT_OK) return s;
        atomic_store(&gemm_route_requested, (int)route);
        atomic_store(&gemm_current, (int)gemm_default_backend());
        return BT_OK;
    }
    gemm_backend b;
    bt_status s = gemm_backend_from_name(v, &b);
    if (s != BT_OK) return bt_fail_context(s, "environment variable BT_GEMM");
    s = gemm_set_backend(b);
    if (s != BT_OK) return bt_fail_context(s, "environment variable BT_GEMM=%s", v);
    atomic_store(&gemm_route_requested, (int)route);
    return BT_OK;
}

/* --- bf16 route ----------------------------------------------------------------------- */

gemm_bf16_route gemm_bf16_route_requested(void) {
    return (gemm_bf16_route)atomic_load(&gemm_route_requested);
}

static const char *const gemm_route_names[] = {"native", "fp32", "auto", "widened"};

const char *gemm_bf16_route_name(gemm_bf16_route r) {
    if ((int)r < 0 || r > GEMM_BF16_WIDENED) return "unknown";
    return gemm_route_names[r];
}

bt_status gemm_bf16_route_from_name(const char *name, gemm_bf16_route *out) {
    for (int i = 0; name && i <= GEMM_BF16_WIDENED; i++) {
        if (strcmp(name, gemm_route_names[i]) == 0) {
            *out = (gemm_bf16_route)i;
            return BT_OK;
        }
    }
    return bt_fail(BT_ERR_ARG,
                   "bf16 GEMM route '%s' is unknown; expected auto, native, fp32 or widened",
                   name ? name : "(null)");
}

void gemm_bf16_route_request(gemm_bf16_route r) {
    BT_ASSERT((int)r >= 0 && r <= GEMM_BF16_WIDENED);
    atomic_store(&gemm_route_requested, (int)r);
}

gemm_bf16_route gemm_bf16_route_pick(double native_s, double fp32_s) {
    /* native must win clearly: where the two are close, noise must not flip the pick (and
     * with it the summation order) from one run to the next */
    return native_s * 1.1 < fp32_s ? GEMM_BF16_NATIVE : GEMM_BF16_FP32;
}

gemm_bf16_route gemm_bf16_route_active(void) {
    if (gemm_get_backend() == GEMM_BACKEND_ONEDNN) return gemm_onednn_bf16_route();
    /* REF and OPENBLAS have no native bf16: a pinned bf16 route keeps bf16 semantics */
    const gemm_bf16_route req = gemm_bf16_route_requested();
    return req == GEMM_BF16_NATIVE || req == GEMM_BF16_WIDENED ? GEMM_BF16_WIDENED
                                                                 : GEMM_BF16_FP32;
}

gemm_compute gemm_bf16_mode_compute(void) {
    return gemm_bf16_route_active() == GEMM_BF16_FP32 ? GEMM_COMPUTE_F32 : GEMM_COMPUTE_BF16;
}

const char *gemm_bf16_route_describe(void) {
    switch (gemm_get_backend()) {
    case GEMM_BACKEND_ONEDNN:
        return gemm_onednn_bf16_describe();
    case GEMM_BACKEND_OPENBLAS:
        return gemm_bf16_route_active() == GEMM_BF16_FP32
                   ? "fp32 (bf16 mode computes in fp32: openblas has no native bf16)"
                   : "widened (operands rounded to bf16, then openblas sgemm)";
    default:
        return gemm_bf16_route_active() == GEMM_BF16_FP32
                   ? "fp32 (bf16 mode computes in fp32: reference loops)"
                   : "widened (reference loops on the bf16-rounded operands)";
    }
}

int gemm_bf16_route_measure(double *native_s, double *fp32_s) {
    *native_s = *fp32_s = 0.0;
    if (!gemm_onednn_built()) return 0;
    return gemm_onednn_bf16_measure(native_s, fp32_s);
}

/* First gemm() without an explicit selection: honor BT_GEMM, but a bad value cannot be
 * returned from gemm(), so it is printed and the default is used (main() should call
 * gemm_init_from_env() itself to turn it into an error). */
static void gemm_lazy_init(void) {
    if (atomic_load(&gemm_current) >= 0) return;
    if (gemm_init_from_env() != BT_OK) {
        char why[1024];
        snprintf(why, sizeof why, "%s", bt_error_message());
        gemm_backend b = gemm_default_backend();
        if (gemm_backend_runs_here(b) != BT_OK) b = GEMM_BACKEND_REF; /* runs on every CPU */
        fprintf(stderr, "bt: warning: %s; using GEMM backend '%s'\n", why, gemm_backend_name(b));
        int expected = -1;
        atomic_compare_exchange_strong(&gemm_current, &expected, (int)b);
    }
}

gemm_backend gemm_get_backend(void) {
    if (atomic_load(&gemm_current) < 0) pthread_once(&gemm_lazy_once, gemm_lazy_init);
    return (gemm_backend)atomic_load(&gemm_current);
}

/* --- CPU ISA -------------------------------------------------------------------------- */

/* dnnl_cpu_isa_t values of oneDNN 2.6 (dnnl_types.h); each ISA's bits contain the bits of
 * the ISAs it extends, except avx2_vnni (not an avx512 superset). Listed best first. */
static const struct {
    unsigned bits;
    const char *name;
} gemm_isa_table[] = {
    {0x3e7u, "avx512_core_amx"}, {0xe7u, "avx512_core_bf16"}, {0x67u, "avx512_core_vnni"},
    {0x27u, "avx512_core"},      {0x407u, "avx2_vnni"},       {0x7u, "avx2"},
    {0x3u, "avx"},               {0x1u, "sse41"},
};
#define GEMM_ISA_AVX512_CORE_BF16 0xe7u
#define GEMM_ISA_AVX512_CORE 0x27u
#define GEMM_ISA_AVX512_CORE_AMX 0x3e7u

int gemm_split_k_isa(void) {
    return gemm_onednn_built() &&
           (gemm_onednn_cpu_isa() & GEMM_ISA_AVX512_CORE) == GEMM_ISA_AVX512_CORE;
}

/* An auto | on | off switch of the native bf16 route (0, 1, 2 as gemm_switch_from_env) resolved
 * on this machine: never without native bf16 in oneDNN; ON wherever it is; AUTO where its ISA
 * is avx512_core_bf16 without AMX (where Blocked B and Split M were measured). */
static int gemm_native_switch_active(int mode) {
    if (mode == 2 || !gemm_onednn_built()) return 0;
    const unsigned isa = gemm_onednn_cpu_isa();
    if ((isa & GEMM_ISA_AVX512_CORE_BF16) != GEMM_ISA_AVX512_CORE_BF16) return 0;
    return mode == 1 || (isa & GEMM_ISA_AVX512_CORE_AMX) != GEMM_ISA_AVX512_CORE_AMX;
}

int gemm_pack_b_active(void) { return gemm_native_switch_active((int)gemm_pack_b_requested()); }

int gemm_split_m_active(void) { return gemm_native_switch_active((int)gemm_split_m_requested()); }

/* 1 when products of `type` can read a packed weight on the backend and route in force
 * (gemm.h "Packed weights"; the layout itself is oneDNN's to say) */
static int gemm_pack_weight_allowed(bt_dtype type) {
    BT_ASSERT(type == BT_DTYPE_BF16 || type == BT_DTYPE_F32);
    if (gemm_get_backend() != GEMM_BACKEND_ONEDNN) return 0;
    if (type == BT_DTYPE_BF16)
        return gemm_bf16_route_active() == GEMM_BF16_NATIVE && gemm_pack_b_active();
    return gemm_pack_b_requested() != GEMM_PACK_B_OFF;
}

size_t gemm_packed_weight_bytes(bt_dtype type, size_t out, size_t in) {
    if (out == 0 || in == 0 || !gemm_pack_weight_allowed(type)) return 0;
    return gemm_onednn_packed_weight_bytes(type, out, in);
}

void gemm_pack_weight(void *w, bt_dtype type, size_t out, size_t in) {
    /* the layout (blocked, no padding) is checked where it is made */
    BT_ASSERTF(out > 0 && in > 0 && gemm_pack_weight_allowed(type),
               "gemm: a %zu x %zu %s weight cannot be packed here (gemm_packed_weight_bytes 0)",
               out, in, bt_dtype_name(type));
    gemm_onednn_pack_weight(w, type, out, in);
}

int gemm_cpu_has_bf16(void) {
    if (gemm_onednn_built()) {
        unsigned isa = gemm_onednn_cpu_isa();
        return (isa & GEMM_ISA_AVX512_CORE_BF16) == GEMM_ISA_AVX512_CORE_BF16;
    }
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512bf16") ? 1 : 0;
#else
    return 0;
#endif
}

const char *gemm_cpu_isa_name(void) {
    if (!gemm_onednn_built()) return "unknown (oneDNN not built)";
    unsigned isa = gemm_onednn_cpu_isa();
    for (size_t i = 0; i < sizeof gemm_isa_table / sizeof gemm_isa_table[0]; i++)
        if ((isa & gemm_isa_table[i].bits) == gemm_isa_table[i].bits) return gemm_isa_table[i].name;
    return "generic";
}

/* --- per-thread scratch --------------------------------------------------------------- */

/* Each thread owns one gemm_scratch_set (created on first use, listed globally so that
 * gemm_release() can free all of them). A release bumps the generation; a thread whose
 * cached pointer belongs to an older generation drops it without touching it (the memory
 * is already freed) and makes a new set. */
typedef struct gemm_scratch_set {
    void *buf[GEMM_SCRATCH_SLOTS];
    size_t cap[GEMM_SCRATCH_SLOTS];
    struct gemm_scratch_set *next;
} gemm_scratch_set;

static pthread_mutex_t gemm_scratch_mutex = PTHREAD_MUTEX_INITIALIZER;
static gemm_scratch_set *gemm_scratch_all;
static _Atomic unsigned gemm_scratch_generation = 1;
static _Thread_local gemm_scratch_set *gemm_scratch_mine;
static _Thread_local unsigned gemm_scratch_mine_generation;

void *gemm_thread_scratch(int slot, size_t bytes) {
    BT_ASSERT(slot >= 0 && slot < GEMM_SCRATCH_SLOTS);
    unsigned gen = atomic_load(&gemm_scratch_generation);
    if (!gemm_scratch_mine || gemm_scratch_mine_generation != gen) {
        gemm_scratch_set *s = bt_calloc(sizeof *s);
        pthread_mutex_lock(&gemm_scratch_mutex);
        s->next = gemm_scratch_all;
        gemm_scratch_all = s;
        pthread_mutex_unlock(&gemm_scratch_mutex);
        gemm_scratch_mine = s;
        gemm_scratch_mine_generation = gen;
    }
    gemm_scratch_set *s = gemm_scratch_mine;
    if (bytes == 0) bytes = 1;
    if (s->cap[slot] < bytes) {
        bt_free(s->buf[slot]);
        /* grow by 1/4 extra so a sequence of slightly larger shapes does not reallocate
         * every call */
        size_t cap = bytes + bytes / 4;
        s->buf[slot] = bt_alloc(cap);
        s->cap[slot] = cap;
    }
    return s->buf[slot];
}

void *gemm_caller_scratch(size_t bytes) {
    return gemm_thread_scratch(GEMM_SCRATCH_CALLER, bytes);
}

static void gemm_scratch_release(void) {
    pthread_mutex_lock(&gemm_scratch_mutex);
    gemm_scratch_set *s = gemm_scratch_all;
    while (s) {
        gemm_scratch_set *next = s->next;
        for (int i = 0; i < GEMM_SCRATCH_SLOTS; i++) bt_free(s->buf[i]);
        bt_free(s);
        s = next;
    }
    gemm_scratch_all = NULL;
    atomic_fetch_add(&gemm_scratch_generation, 1u);
    pthread_mutex_unlock(&gemm_scratch_mutex);
}

void gemm_release(void) {
    gemm_onednn_release();
    gemm_scratch_release();
}

/* --- dispatch ------------------------------------------------------------------------- */

static void gemm_check_args(const gemm_args *g) {
    BT_ASSERT(g != NULL);
    BT_ASSERT(g->trans_a == 0 || g->trans_a == 1);
    BT_ASSERT(g->trans_b == 0 || g->trans_b == 1);
    BT_ASSERTF(g->a_type == BT_DTYPE_F32 || g->a_type == BT_DTYPE_BF16,
               "gemm: a_type must be F32 or BF16, got %s", bt_dtype_name(g->a_type));
    BT_ASSERTF(g->b_type == BT_DTYPE_F32 || g->b_type == BT_DTYPE_BF16,
               "gemm: b_type must be F32 or BF16, got %s", bt_dtype_name(g->b_type));
    BT_ASSERT(g->compute == GEMM_COMPUTE_F32 || g->compute == GEMM_COMPUTE_BF16);
    BT_ASSERTF(g->compute == GEMM_COMPUTE_BF16 ||
                   (g->a_type == BT_DTYPE_F32 && g->b_type == BT_DTYPE_F32),
               "gemm: GEMM_COMPUTE_F32 requires F32 operands (a %s, b %s)",
               bt_dtype_name(g->a_type), bt_dtype_name(g->b_type));
    size_t a_cols = g->trans_a ? g->m : g->k; /* columns of A as stored */
    size_t b_cols = g->trans_b ? g->k : g->n;
    BT_ASSERTF(g->lda >= a_cols, "gemm: lda %zu < %zu", g->lda, a_cols);
    BT_ASSERTF(g->ldb >= b_cols, "gemm: ldb %zu < %zu", g->ldb, b_cols);
    BT_ASSERTF(g->ldc >= g->n, "gemm: ldc %zu < n %zu", g->ldc, g->n);
    if (g->m > 0 && g->n > 0) {
        BT_ASSERT(g->c != NULL);
        if (g->k > 0) BT_ASSERT(g->a != NULL && g->b != NULL);
    }
    if (g->batch > 1) BT_ASSERTF(g->stride_c != 0, "gemm: batch %zu with stride_c 0", g->batch);
    BT_ASSERTF(!g->b_packed ||
                   (g->trans_b && g->ldb == g->k && g->batch <= 1 &&
                    (g->b_type == BT_DTYPE_BF16) == (g->compute == GEMM_COMPUTE_BF16)),
               "gemm: a packed weight (b_packed) is B = Wᵀ of one product: trans_b 1, ldb = "
               "k, BF16 with compute BF16 or F32 with compute F32");
}

/* C = beta*C + bias for k == 0 or alpha == 0 (alpha*AB is an empty sum or not wanted; A and B
 * are not read); beta == 0 does not read C. */
static void gemm_k0(const gemm_args *g) {
    for (size_t bi = 0; bi < g->batch; bi++) {
        float *c = g->c + bi * g->stride_c;
        for (size_t i = 0; i < g->m; i++) {
            for (size_t j = 0; j < g->n; j++) {
                float v = g->beta != 0.0f ? g->beta * c[i * g->ldc + j] : 0.0f;
                c[i * g->ldc + j] = v + (g->bias ? g->bias[j] : 0.0f);
            }
        }
    }
}

/* Runs one product per batch item through `run` (backends without native batching). */
static void gemm_batch_loop(const gemm_args *g, void (*run)(const gemm_args *)) {
    size_t ea = bt_dtype_size(g->a_type), eb = bt_dtype_size(g->b_type);
    gemm_args one = *g;
    one.batch = 1;
    for (size_t bi = 0; bi < g->batch; bi++) {
        one.a = (const char *)g->a + bi * g->stride_a * ea;
        one.b = (const char *)g->b + bi * g->stride_b * eb;
        one.c = g->c + bi * g->stride_c;
        run(&one);
    }
}

static void gemm_run(gemm_backend backend, const gemm_args *g) {
    gemm_check_args(g);
    BT_ASSERTF(gemm_backend_available(backend), "gemm: backend '%s' is not built",
               gemm_backend_name(backend));
    BT_ASSERTF(!g->b_packed || (backend == GEMM_BACKEND_ONEDNN &&
                                (g->compute == GEMM_COMPUTE_F32 ||
                                 gemm_onednn_bf16_route() == GEMM_BF16_NATIVE)),
               "gemm: a packed weight (b_packed) runs only on the oneDNN backend (bf16: its "
               "native route) it was packed for (backend %s, bf16 route %s)",
               gemm_backend_name(backend), gemm_bf16_route_name(gemm_bf16_route_active()));
    gemm_args r = *g;
    if (r.batch == 0) r.batch = 1;
    if (r.m == 0 || r.n == 0) return;
    if (r.k == 0 || r.alpha == 0.0f) {
        gemm_k0(&r);
        return;
    }
    switch (backend) {
    case GEMM_BACKEND_REF:
        gemm_batch_loop(&r, gemm_ref_run);
        break;
    case GEMM_BACKEND_OPENBLAS:
        gemm_batch_loop(&r, gemm_openblas_run);
        break;
    case GEMM_BACKEND_ONEDNN:
        gemm_onednn_run(&r);
        break;
    default:
        BT_ASSERTF(0, "gemm: backend %d out of range", (int)backend);
    }
}

/* --- per-shape profile (gemm.h gemm_profile_*) ---------------------------------------- */

enum { GEMM_PROFILE_MAX = 128 };
static _Atomic int gemm_profile_on;
static pthread_mutex_t gemm_profile_mutex = PTHREAD_MUTEX_INITIALIZER;
static gemm_shape_time gemm_profile_rows[GEMM_PROFILE_MAX];
static size_t gemm_profile_n, gemm_profile_dropped;

static gemm_shape gemm_shape_of(const gemm_args *g) {
    return (gemm_shape){.m = g->m, .n = g->n, .k = g->k, .batch = g->batch ? g->batch : 1,
                        .trans_a = g->trans_a, .trans_b = g->trans_b, .a_type = g->a_type,
                        .b_type = g->b_type, .compute = g->compute,
                        .accumulate = g->beta != 0.0f, .bias = g->bias != NULL};
}

static int gemm_shape_equal(const gemm_shape *x, const gemm_shape *y) {
    return x->m == y->m && x->n == y->n && x->k == y->k && x->batch == y->batch &&
           x->trans_a == y->trans_a && x->trans_b == y->trans_b && x->a_type == y->a_type &&
           x->b_type == y->b_type && x->compute == y->compute &&
           x->accumulate == y->accumulate && x->bias == y->bias;
}

static void gemm_profile_add(const gemm_args *g, double s) {
    const gemm_shape key = gemm_shape_of(g);
    pthread_mutex_lock(&gemm_profile_mutex);
    size_t i = 0;
    while (i < gemm_profile_n && !gemm_shape_equal(&gemm_profile_rows[i].shape, &key)) i++;
    if (i == gemm_profile_n && gemm_profile_n < GEMM_PROFILE_MAX)
        gemm_profile_rows[gemm_profile_n++] = (gemm_shape_time){.shape = key};
    if (i < gemm_profile_n) {
        gemm_profile_rows[i].calls++;
        gemm_profile_rows[i].seconds += s;
    } else {
        gemm_profile_dropped++;
    }
    pthread_mutex_unlock(&gemm_profile_mutex);
}

void gemm_profile_start(void) {
    pthread_mutex_lock(&gemm_profile_mutex);
    gemm_profile_n = gemm_profile_dropped = 0;
    pthread_mutex_unlock(&gemm_profile_mutex);
    atomic_store(&gemm_profile_on, 1);
}

size_t gemm_profile_read(gemm_shape_time *out, size_t cap, size_t *dropped) {
    pthread_mutex_lock(&gemm_profile_mutex);
    const size_t n = gemm_profile_n < cap ? gemm_profile_n : cap;
    memcpy(out, gemm_profile_rows, n * sizeof *out);
    if (dropped) *dropped = gemm_profile_dropped + (gemm_profile_n - n);
    pthread_mutex_unlock(&gemm_profile_mutex);
    return n;
}

/* Every product's time counts as GEMM (kernel_clock.h); while the profile runs, its own time
 * (the span's: 0 inside attention or a parallel region) goes to its shape too. */
void gemm_with(gemm_backend backend, const gemm_args *g) {
    const kc_span span = kc_enter(BT_KC_GEMM);
    gemm_run(backend, g);
    const double s = kc_leave(&span);
    if (s > 0 && atomic_load_explicit(&gemm_profile_on, memory_order_relaxed))
        gemm_profile_add(g, s);
}

void gemm(const gemm_args *g) {
    gemm_with(gemm_get_backend(), g);
}
