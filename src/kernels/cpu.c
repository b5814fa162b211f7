/* cpu.c: BT_CPU_ISA (the cap on bt's kernel level, cpu.h), CPU detection, and the run-time
 * report behind the tools' --info.
 *
 * Deliberately not here: picking the kernel table (ops.c reads bt_cpu_isa_active() in
 * kernels_init), the GEMM backend choice (gemm.c). */
#include "kernels/cpu.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif
#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#endif

#include <cjson/cJSON.h>

#include "bt_config.h"
#include "kernels/gemm.h"
#include "mem.h"
#include "kernels/ops.h"
#include "settings.h"

static const char *const isa_names[BT_ISA_COUNT] = {"scalar", "avx2", "avx512", "avx512_bf16"};
static const char *const isa_onednn[BT_ISA_COUNT] = {"SSE41", "AVX2", "AVX512_CORE",
                                                     "AVX512_CORE_BF16"};
#define ISA_ALLOWED "scalar, avx2, avx512 or avx512_bf16"

const char *bt_isa_name(bt_isa isa) {
    return (int)isa >= 0 && isa < BT_ISA_COUNT ? isa_names[isa] : "unknown";
}

const char *bt_isa_onednn_cap(bt_isa isa) {
    return (int)isa >= 0 && isa < BT_ISA_COUNT ? isa_onednn[isa] : "ALL";
}

bt_status bt_isa_from_name(const char *name, bt_isa *out) {
    for (int i = 0; name && i < BT_ISA_COUNT; i++) {
        if (strcmp(name, isa_names[i]) == 0) {
            *out = (bt_isa)i;
            return BT_OK;
        }
    }
    return bt_fail(BT_ERR_ARG, "CPU ISA level '%s' is unknown; expected " ISA_ALLOWED,
                   name ? name : "(null)");
}

#if defined(__x86_64__) && defined(__GNUC__)
/* F16C and MOVBE, which x86-64-v3 (bt's avx2 level) also requires: CPUID leaf 1, ECX bits 29
 * and 22. Read here because clang before 16 has no __builtin_cpu_supports names for them;
 * neither needs OS support (no register state). */
static int cpu_has_f16c_movbe(void) {
    unsigned eax, ebx, ecx, edx;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return 0;
    return (ecx >> 29 & 1u) && (ecx >> 22 & 1u);
}
#endif

int bt_isa_supported(bt_isa isa) {
    if (isa == BT_ISA_SCALAR) return 1;
#if defined(__x86_64__) && defined(__GNUC__)
    /* libgcc's checks include the OS side (XGETBV: AVX / AVX-512 state enabled). */
    __builtin_cpu_init();
    const int v3 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                   __builtin_cpu_supports("bmi2") && cpu_has_f16c_movbe();
    const int v4 = v3 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                   __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512dq") &&
                   __builtin_cpu_supports("avx512vl");
    switch (isa) {
    case BT_ISA_AVX2:
        return v3;
    case BT_ISA_AVX512:
        return v4;
    case BT_ISA_AVX512_BF16:
        return v4 && __builtin_cpu_supports("avx512bf16");
    default:
        return 0;
    }
#else
    return 0;
#endif
}

bt_isa bt_isa_detected(void) {
    bt_isa best = BT_ISA_SCALAR;
    for (int i = 1; i < BT_ISA_COUNT; i++)
        if (bt_isa_supported((bt_isa)i)) best = (bt_isa)i;
    return best;
}

/* --- BT_CPU_ISA, read once ------------------------------------------------------------ */

static pthread_once_t isa_once = PTHREAD_ONCE_INIT;
static bt_status isa_env_status = BT_OK;
static char isa_env_message[512];
static bt_isa isa_cap = BT_ISA_COUNT;  /* none */
static const char *isa_dnnl_note = ""; /* how DNNL_MAX_CPU_ISA came to be */

static void isa_init_once(void) {
    const char *v = bt_setting_value(BT_SET_CPU_ISA);
    if (!v || !*v) return;
    bt_isa cap;
    if (bt_isa_from_name(v, &cap) != BT_OK) {
        isa_env_status =
            bt_fail(BT_ERR_ARG,
                    "environment variable BT_CPU_ISA='%s' is unknown; expected " ISA_ALLOWED
                    " (or unset: the best level the CPU runs)",
                    v);
        snprintf(isa_env_message, sizeof isa_env_message, "%s", bt_error_message());
        return;
    }
    isa_cap = cap;
    /* oneDNN reads DNNL_MAX_CPU_ISA once, at its first ISA query; nothing in bt queries it
     * before this runs (gemm_init_from_env calls here first). */
    if (bt_setting_value(BT_SET_DNNL_MAX_CPU_ISA)) {
        isa_dnnl_note = "set by the user";
    } else {
        bt_settings_set_dnnl_isa(bt_isa_onednn_cap(cap)); /* recorded, printed by --info */
        isa_dnnl_note = "set from BT_CPU_ISA";
    }
}

bt_status bt_cpu_isa_init_from_env(void) {
    pthread_once(&isa_once, isa_init_once);
    if (isa_env_status != BT_OK) return bt_fail(isa_env_status, "%s", isa_env_message);
    return BT_OK;
}

bt_isa bt_cpu_isa_cap(void) {
    pthread_once(&isa_once, isa_init_once);
    return isa_cap;
}

bt_isa bt_cpu_isa_active(void) {
    static _Atomic int warned;
    if (bt_cpu_isa_init_from_env() != BT_OK && !warned++)
        fprintf(stderr, "bt: error: %s; using the best level\n", isa_env_message);
    const bt_isa best = bt_isa_detected();
    return isa_cap < best ? isa_cap : best;
}

/* --- the report ---------------------------------------------------------------------- */

static const char *env_or(bt_setting id, const char *dflt) {
    const char *v = bt_setting_value(id);
    return v ? v : dflt;
}

/* One --info line for an auto | on | off switch of oneDNN's native bf16 route (Blocked B,
 * Split M): what it does where active, else why not, and the variable's value. */
static void info_native_switch(FILE *out, const char *what, gemm_backend b, int active, int off,
                               const char *on_text, bt_setting var) {
    if (b == GEMM_BACKEND_ONEDNN && active)
        fprintf(out, "%s: on: %s", what, on_text);
    else if (off)
        fprintf(out, "%s: off", what);
    else if (b != GEMM_BACKEND_ONEDNN || !gemm_cpu_has_bf16())
        fprintf(out, "%s: unused here (only on oneDNN's native bf16 route)", what);
    else
        fprintf(out, "%s: unused here (auto: not measured with AMX; %s=on turns it on)", what,
                bt_setting_name(var));
    fprintf(out, " (%s=%s)\n", bt_setting_name(var), env_or(var, "unset"));
}

/* The routes of a typical Linear product (256^3), as the backend runs them. */
static void gemm_routes(gemm_backend b, const char **route_f32, const char **route_bf16) {
    static float a[256 * 256], c[256 * 256]; /* only looked up, never multiplied */
    /* clang-format off */
    gemm_args g = {.m = 256, .n = 256, .k = 256, .a_type = BT_DTYPE_F32, .b_type = BT_DTYPE_F32,
                   .a = a, .lda = 256, .b = a, .ldb = 256, .trans_b = 1, .c = c, .ldc = 256,
                   .alpha = 1.0f, .compute = GEMM_COMPUTE_F32};
    /* clang-format on */
    if (b == GEMM_BACKEND_ONEDNN) {
        *route_f32 = gemm_onednn_impl_name(&g);
        g.compute = GEMM_COMPUTE_BF16;
        *route_bf16 = gemm_onednn_impl_name(&g);
    } else if (b == GEMM_BACKEND_OPENBLAS) {
        *route_f32 = "openblas sgemm (kernels chosen at load time; OPENBLAS_CORETYPE caps them)";
        *route_bf16 = "operands rounded to bf16, then openblas sgemm";
    } else {
        *route_f32 = *route_bf16 = "reference loops";
    }
}

/* /proc/cpuinfo's first "model name", or "unknown". */
static void cpu_model_name(char *out, size_t cap) {
    snprintf(out, cap, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        const char *colon = strchr(line, ':');
        if (strncmp(line, "model name", 10) != 0 || !colon) continue;
        colon++;
        while (*colon == ' ' || *colon == '\t') colon++;
        snprintf(out, cap, "%.*s", (int)strcspn(colon, "\n"), colon);
        break;
    }
    fclose(f);
}

cJSON *bt_runtime_info_json(void) {
    kernels_init();
    cJSON *o = cJSON_CreateObject();
    BT_ASSERT(o);
    char cpu[256], levels[128] = "";
    cpu_model_name(cpu, sizeof cpu);
    cJSON_AddStringToObject(o, "cpu", cpu);
    cJSON_AddNumberToObject(o, "cpus_online", (double)sysconf(_SC_NPROCESSORS_ONLN));
    for (int i = 0; i < BT_ISA_COUNT; i++)
        if (bt_isa_supported((bt_isa)i))
            snprintf(levels + strlen(levels), sizeof levels - strlen(levels), "%s%s",
                     levels[0] ? " " : "", isa_names[i]);
    cJSON_AddStringToObject(o, "cpu_isa_levels", levels);
    cJSON_AddStringToObject(o, "kernel_isa", bt_isa_name(ops_cpu_isa()));
    const gemm_backend b = gemm_get_backend();
    const char *route_f32, *route_bf16;
    gemm_routes(b, &route_f32, &route_bf16);
    cJSON_AddStringToObject(o, "gemm_backend", gemm_backend_name(b));
    cJSON_AddStringToObject(o, "gemm_fp32_route", route_f32);
    cJSON_AddStringToObject(o, "gemm_bf16_route", route_bf16);
    cJSON_AddStringToObject(o, "openblas_core", gemm_openblas_core());
    int threads = 1;
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
    cJSON_AddNumberToObject(o, "threads", threads);
    cJSON_AddStringToObject(o, "bt_version", BT_VERSION);
    cJSON_AddStringToObject(o, "git_revision", BT_GIT_REVISION);
    cJSON_AddStringToObject(o, "build_type", BT_BUILD_TYPE);
    return o;
}

void bt_runtime_info_print(FILE *out, const char *tool) {
    kernels_init();
    fprintf(out, "%s: run-time configuration\n", tool);
    fprintf(out, "cpu isa levels supported: ");
    for (int i = 0; i < BT_ISA_COUNT; i++)
        if (bt_isa_supported((bt_isa)i)) fprintf(out, "%s%s", i ? " " : "", isa_names[i]);
    fprintf(out, "\n");
    const bt_isa cap = bt_cpu_isa_cap();
    fprintf(out, "bt kernels isa: %s (", bt_isa_name(ops_cpu_isa()));
    if (cap < BT_ISA_COUNT)
        fprintf(out, "BT_CPU_ISA=%s caps the CPU's %s", bt_isa_name(cap),
                bt_isa_name(bt_isa_detected()));
    else
        fprintf(out, "best of this CPU; BT_CPU_ISA unset");
    fprintf(out, ")\n");
    fprintf(out, "bt kernels: %s (BT_KERNELS=%s)\n", ops_kernels_name(),
            env_or(BT_SET_KERNELS, "unset"));
    fprintf(out, "bf16 conversion: %s\n", ops_bf16_conversion_name());
    fprintf(out, "attention threads: %s\n", ops_attention_threads_name());
    fprintf(out, "attention products: %s (BT_ATTENTION_PRODUCTS=%s)\n",
            ops_attention_products_name(), env_or(BT_SET_ATTENTION_PRODUCTS, "unset"));
    const char *probs = env_or(BT_SET_ATTENTION_PROBS, "unset");
    fprintf(out, "attention probabilities: %s (BT_ATTENTION_PROBS=%s)\n",
            strcmp(probs, "keep") == 0 ? "kept by the forward for the backward"
                                       : "recomputed by the backward (model.h)",
            probs);
    const gemm_backend b = gemm_get_backend();
    fprintf(out, "gemm backend: %s (BT_GEMM=%s)\n", gemm_backend_name(b),
            env_or(BT_SET_GEMM, "unset"));
    fprintf(out, "onednn isa: %s (DNNL_MAX_CPU_ISA=%s%s%s)\n", gemm_cpu_isa_name(),
            env_or(BT_SET_DNNL_MAX_CPU_ISA, "unset"), *isa_dnnl_note ? ", " : "", isa_dnnl_note);
    fprintf(out, "openblas core: %s (OPENBLAS_CORETYPE=%s)\n", gemm_openblas_core(),
            env_or(BT_SET_OPENBLAS_CORETYPE, "unset"));
    const char *route_f32, *route_bf16;
    gemm_routes(b, &route_f32, &route_bf16);
    fprintf(out, "gemm fp32 route: %s\n", route_f32);
    fprintf(out, "gemm bf16 route: %s (BT_GEMM_BF16=%s)\n", route_bf16,
            env_or(BT_SET_GEMM_BF16, "auto"));
    fprintf(out, "gemm bf16 choice: %s\n", gemm_bf16_route_describe());
    if (!gemm_split_k_requested())
        fprintf(out, "gemm k split: off");
    else if (b == GEMM_BACKEND_ONEDNN && gemm_split_k_isa())
        fprintf(out, "gemm k split: on: fp32 products without transposes, k >= %d, n <= %d, in k "
                "chunks of %d", 2 * GEMM_SPLIT_K_CHUNK, GEMM_SPLIT_K_MAX_N, GEMM_SPLIT_K_CHUNK);
    else
        fprintf(out, "gemm k split: on, unused here (only where oneDNN runs fp32 brgemm: isa "
                "avx512_core or better)");
    fprintf(out, " (BT_GEMM_SPLIT_K=%s)\n", env_or(BT_SET_GEMM_SPLIT_K, "unset"));
    char on_text[160];
    snprintf(on_text, sizeof on_text, "native bf16 products with m >= %d reorder B into "
             "oneDNN's blocked layout once per call", GEMM_PACK_B_MIN_M);
    info_native_switch(out, "gemm blocked B", b, gemm_pack_b_active(),
                       gemm_pack_b_requested() == GEMM_PACK_B_OFF, on_text, BT_SET_GEMM_PACK_B);
    snprintf(on_text, sizeof on_text, "native bf16 products with A transposed and m >= %d run "
             "as one single-threaded product per thread over slices of m",
             2 * GEMM_SPLIT_M_ROWS);
    info_native_switch(out, "gemm split M", b, gemm_split_m_active(),
                       gemm_split_m_requested() == GEMM_SPLIT_M_OFF, on_text, BT_SET_GEMM_SPLIT_M);
    fprintf(out, "gemm packed weights (bt-embed, bt-eval: model.h bt_model_pack_weights): bf16 "
                 "%s, fp32 %s\n",
            gemm_packed_weight_bytes(BT_DTYPE_BF16, 768, 768) ? "yes" : "no",
            gemm_packed_weight_bytes(BT_DTYPE_F32, 768, 768) ? "yes" : "no");
    int threads = 1;
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
    fprintf(out, "threads: %d (OMP_NUM_THREADS=%s)\n", threads,
            env_or(BT_SET_OMP_NUM_THREADS, "unset"));
    bt_settings_print(out); /* every variable bt read, and what bt set itself */
}

void bt_version_print(FILE *out, const char *tool) {
    /* GNU layout (help2man reads it): name and version, copyright, then what was built */
    fprintf(out, "%s (bt) %s\n", tool, BT_VERSION);
    fprintf(out, "Copyright (c) 2026 The bt authors.\n");
    fprintf(out, "License MIT: see LICENSE (installed in share/doc/bt/).\n\n");
    fprintf(out, "git revision: %s\n", BT_GIT_REVISION);
    fprintf(out, "build type: %s\n", BT_BUILD_TYPE);
    fprintf(out, "gemm backends: %sopenblas reference\n", BT_HAVE_ONEDNN ? "onednn " : "");
#ifdef BT_OPS_ISA_VARIANTS
    fprintf(out, "kernel isa levels: scalar avx2 avx512 avx512_bf16\n");
#else
    fprintf(out, "kernel isa levels: scalar\n");
#endif
    fprintf(out, "mpi: %s, openmp: %s\n", BT_HAVE_MPI ? "yes" : "no", BT_HAVE_OPENMP ? "yes" : "no");
}

bt_status bt_runtime_check_threads(long n, const char *what) {
    cpu_set_t set;
    long procs = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set)
                                                             : sysconf(_SC_NPROCESSORS_ONLN);
    if (procs < 1) procs = 1;
    const long max = procs * 8 > 64 ? procs * 8 : 64;
    if (n > max)
        return bt_fail(BT_ERR_ARG, "%s is %ld, far more than the %ld processor(s) this process "
                       "may use: at most %ld threads are accepted (8 per processor, or 64), "
                       "more only slow each step down; use %ld (0 or unset: one per processor)",
                       what, n, procs, max, procs);
    return BT_OK;
}

bt_status bt_runtime_check_env(void) {
    bt_status st = bt_cpu_isa_init_from_env();
    if (st == BT_OK) st = gemm_init_from_env();
    if (st == BT_OK) st = bt_mem_env_check();
    if (st == BT_OK) st = kernels_settings_check();
    const char *t = bt_setting_value(BT_SET_OMP_NUM_THREADS);
    if (st == BT_OK && t && *t) { /* libgomp's syntax: N or a list "N,M,..." per level */
        char *end;
        errno = 0;
        const long n = strtol(t, &end, 10);
        if (end == t || (*end && *end != ',') || n < 1 || errno)
            return bt_fail(BT_ERR_ARG, "environment variable OMP_NUM_THREADS: '%s' is not a "
                           "positive thread count", t);
        st = bt_runtime_check_threads(n, "OMP_NUM_THREADS");
    }
    return st;
}

int bt_runtime_cli_info(int argc, char **argv, const char *tool) {
    int want = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--version") == 0) {
            bt_version_print(stdout, tool);
            return 0;
        }
        if (strcmp(argv[i], "--info") == 0) want = 1;
    }
    if (!want) {
        if (bt_runtime_check_env() == BT_OK) return -1;
        fprintf(stderr, "%s: error: %s\n", tool, bt_error_message());
        return 1;
    }
    if (bt_cpu_isa_init_from_env() != BT_OK || gemm_init_from_env() != BT_OK) {
        fprintf(stderr, "%s: error: %s\n", tool, bt_error_message());
        return 1;
    }
    bt_runtime_info_print(stdout, tool);
    gemm_release(); /* the two probe primitives: the tool exits now */
    return 0;
}

void bt_runtime_cli_help(FILE *out, int column) {
    const int w = column > 12 ? column - 2 : 10; /* "--version" and a space at least */
    fprintf(out, "  %-*sprint the run-time configuration (CPU ISA, GEMM routes, threads)\n",
            w, "--info");
    fprintf(out, "  %-*sprint the version, git revision, build type and backends\n", w,
            "--version");
}

/* OpenBLAS's kernels for level `isa` (NULL for scalar: its own choice is as good). */
static const char *openblas_core_of_level(bt_isa isa) {
    switch (isa) {
    case BT_ISA_AVX512_BF16: return "Cooperlake";
    case BT_ISA_AVX512: return "SkylakeX";
    case BT_ISA_AVX2: return "Haswell";
    default: return NULL;
    }
}

const char *bt_openblas_core_for(const char *loaded, bt_isa isa) {
    if (!loaded || strcmp(loaded, "Prescott") != 0) return NULL;
    return openblas_core_of_level(isa);
}

const char *bt_openblas_core_needs(const char *core, int *runs) {
    *runs = 1;
    if (!core) return NULL;
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init(); /* libgcc's checks include the OS side (XGETBV), as above */
    if (strcmp(core, "Sandybridge") == 0) {
        *runs = __builtin_cpu_supports("avx");
        return "AVX";
    }
    if (strcmp(core, "Haswell") == 0 || strcmp(core, "Zen") == 0) {
        *runs = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
        return "AVX2 and FMA";
    }
    if (strcmp(core, "SkylakeX") == 0) {
        *runs = bt_isa_supported(BT_ISA_AVX512);
        return "AVX-512 (F, BW, CD, DQ and VL)";
    }
    if (strcmp(core, "Cooperlake") == 0) {
        *runs = bt_isa_supported(BT_ISA_AVX512_BF16);
        return "AVX512-BF16";
    }
#endif
    return NULL;
}

bt_status bt_openblas_core_check(void) {
    const char *core = gemm_openblas_core();
    int runs;
    const char *needs = bt_openblas_core_needs(core, &runs);
    if (runs) return BT_OK;
    const char *set = bt_setting_value(BT_SET_OPENBLAS_CORETYPE);
    const bt_isa best = bt_isa_detected();
    const char *fit = openblas_core_of_level(best);
    return bt_fail(BT_ERR_UNSUPPORTED,
                   "%s%s%sOpenBLAS runs its %s kernels, which need %s, and this CPU does not "
                   "have it (its best level for bt: %s): OpenBLAS's first product would stop "
                   "on an illegal instruction; unset OPENBLAS_CORETYPE%s%s%s",
                   set ? "environment variable OPENBLAS_CORETYPE=" : "", set ? set : "",
                   set ? ": " : "", core, needs, bt_isa_name(best),
                   fit ? " or set it to " : "", fit ? fit : "",
                   fit ? " (OpenBLAS's kernels for that level)" : "");
}

void bt_runtime_prefer_start_environment(char **argv) {
    /* the active level without bt_cpu_isa_active(), which would set DNNL_MAX_CPU_ISA before
     * the re-exec and so make it look set by the user in the new process */
    bt_isa isa = bt_isa_detected(), cap;
    const char *v = bt_setting_value(BT_SET_CPU_ISA);
    if (v && bt_isa_from_name(v, &cap) == BT_OK && cap < isa) isa = cap;
    /* a user's OPENBLAS_CORETYPE wins there, as their OpenMP settings do */
    bt_settings_reexec_preferred(argv, bt_openblas_core_for(gemm_openblas_core(), isa));
}
