/* cpu.h: the instruction-set level of bt's own kernels (BT_CPU_ISA) and the run-time report
 * the tools print with --info.
 *
 * Levels, lowest first. Each is the SAME C source of the fast kernels (ops.c, attention.c)
 * compiled for that instruction set (src/kernels/meson.build builds the variants), picked at
 * run time:
 *   scalar       the x86-64 baseline build (SSE2, what any 64-bit x86 CPU runs): the plain C
 *                path, no AVX; on other architectures the only level.
 *   avx2         x86-64-v3 (AVX2, FMA, BMI2, F16C, MOVBE): most desktops, laptops, AMD before
 *                Zen 4, cloud VMs that hide AVX-512.
 *   avx512       x86-64-v4 (AVX-512 F/BW/CD/DQ/VL); fp32 -> bf16 by integer rounding on 16 lanes.
 *   avx512_bf16  avx512 plus AVX512-BF16 (vcvtne2ps2bf16 for the fp32 -> bf16 conversion).
 * The active level is min(BT_CPU_ISA, best the CPU and OS support); unset = the best.
 *
 * BT_CPU_ISA also caps oneDNN: when DNNL_MAX_CPU_ISA is not set, bt_cpu_isa_init_from_env()
 * sets it to the matching oneDNN level (scalar -> SSE41, oneDNN's lowest; avx2 -> AVX2;
 * avx512 -> AVX512_CORE; avx512_bf16 -> AVX512_CORE_BF16, i.e. no AMX), before oneDNN reads
 * it. A DNNL_MAX_CPU_ISA already set wins (oneDNN can be capped on its own). OpenBLAS picks
 * its kernels when the library loads, before main(): cap it with OPENBLAS_CORETYPE (e.g.
 * Haswell for AVX2), as scripts/test.sh does for its capped runs.
 *
 * bt's own kernels give the same bits at every level (fixed summation order, no FMA
 * contraction: docs/determinism.md, tests/test_determinism.c); the levels differ in speed.
 *
 * Deliberately not here: the kernels (ops.c, attention.c), the GEMM backends (gemm*.c),
 * argument parsing of the tools (each CLI only asks bt_runtime_cli_info() whether --info was
 * given). */
#ifndef BT_CPU_H
#define BT_CPU_H

#include <stdio.h>

#include "status.h"

typedef enum {
    BT_ISA_SCALAR,
    BT_ISA_AVX2,
    BT_ISA_AVX512,
    BT_ISA_AVX512_BF16,
    BT_ISA_COUNT,
} bt_isa;

/* "scalar", "avx2", "avx512", "avx512_bf16"; "unknown" out of range. */
const char *bt_isa_name(bt_isa isa);
/* Level by name; an error naming the value and the allowed names otherwise. */
bt_status bt_isa_from_name(const char *name, bt_isa *out);
/* oneDNN's DNNL_MAX_CPU_ISA value matching a level ("SSE41", "AVX2", ...). */
const char *bt_isa_onednn_cap(bt_isa isa);

/* Best level this CPU (and OS: AVX state enabled) runs. */
bt_isa bt_isa_detected(void);
/* 1 if the CPU runs `isa`. */
int bt_isa_supported(bt_isa isa);

/* Reads BT_CPU_ISA (once; later calls return the first result): an unknown value is an
 * error naming the variable and the allowed values (the cap is then not applied). Sets
 * DNNL_MAX_CPU_ISA to the matching cap when BT_CPU_ISA is set and DNNL_MAX_CPU_ISA is not.
 * gemm_init_from_env() calls it; main() should call one of them before any kernel runs. */
bt_status bt_cpu_isa_init_from_env(void);
/* The level bt's kernels use: min(cap, detected). Runs bt_cpu_isa_init_from_env() on first
 * use; a bad BT_CPU_ISA is then printed to stderr and the best level is used. */
bt_isa bt_cpu_isa_active(void);
/* The BT_CPU_ISA cap in force (BT_ISA_COUNT when none). */
bt_isa bt_cpu_isa_cap(void);

/* Prints the run-time configuration, one `key: value` per line: CPU ISA levels supported,
 * the level bt's kernels run (and why), the kernel table (fast/ref), bf16 conversion,
 * attention threading, GEMM backend, oneDNN's ISA and the implementations it picks for fp32
 * and bf16 products, OpenMP threads. Creates (and caches) two small oneDNN primitives: call
 * it at program start, not while gemm() runs on other threads. */
void bt_runtime_info_print(FILE *out, const char *tool);

/* The same as a JSON object (for summary.json and the report's Environment table): cpu (the
 * model name), cpus_online, cpu_isa_levels, kernel_isa, gemm_backend, gemm_fp32_route,
 * gemm_bf16_route, threads, bt_version, git_revision, build_type. Same caveat as above. */
struct cJSON;
struct cJSON *bt_runtime_info_json(void);

/* What was built, for --version: "<tool> (bt) <version>", the git revision at configure
 * time, the build type, the GEMM backends and the kernel ISA levels compiled in (what this
 * CPU runs is --info's). */
void bt_version_print(FILE *out, const char *tool);

/* For the tools' main(): with --version in argv, prints bt_version_print to stdout and
 * returns 0. With --info, initializes from the environment, prints the report to stdout and
 * returns 0 (exit status), or prints the error and returns 1 when BT_CPU_ISA / BT_GEMM /
 * BT_GEMM_BF16 is invalid. Returns -1 when neither is given (the tool goes on; nothing is
 * changed). */
int bt_runtime_cli_info(int argc, char **argv, const char *tool);
/* The two lines of --help that describe --info and --version, the descriptions starting at
 * column `column` (each tool aligns its own options there). */
void bt_runtime_cli_help(FILE *out, int column);

/* The environment a tool runs under, checked before any work (bt_runtime_cli_info calls it
 * when --info is absent, so every tool exits 1 with the message): BT_CPU_ISA, BT_GEMM,
 * BT_GEMM_BF16, BT_GEMM_SPLIT_K, BT_GEMM_PACK_B, BT_GEMM_SPLIT_M, BT_MEM_AVAILABLE, BT_MEM_CHECK,
 * BT_KERNELS, BT_ATTENTION_THREADS, BT_ATTENTION_PRODUCTS must be valid
 * when set, and
 * OMP_NUM_THREADS within bt_runtime_check_threads. Errors: BT_ERR_ARG naming the variable. */
bt_status bt_runtime_check_env(void);

/* A thread count far beyond the processors this process may use (sched_getaffinity) is
 * refused: more than max(64, 8 per processor) threads only slow every step down (4096 threads
 * on 2 cores: a minute per step) or fail to start (libgomp aborts at 100000). `what` names
 * the setting ("train.threads", "OMP_NUM_THREADS"). */
bt_status bt_runtime_check_threads(long n, const char *what);

/* For the tools' main(), first thing: how idle OpenMP threads wait. libgomp's default spins
 * about 3 ms (GOMP_SPINCOUNT 300000, by its estimate of 100000 spins per ms) before a thread
 * sleeps: those spins steal the cores from the data loader's workers and from each other
 * whenever anything else runs (on a busy 2-core machine a small-model step took seconds
 * instead of milliseconds). Sleeping at once (OMP_WAIT_POLICY=PASSIVE alone) costs a futex
 * wake-up at every parallel region instead: the base bf16 step 3-4% slower, the demo
 * training (the small model) about 2x slower than a short spin. So, unless the user set
 * OMP_WAIT_POLICY or GOMP_SPINCOUNT, this sets PASSIVE with GOMP_SPINCOUNT=1000 (about 10 µs
 * of spinning before the sleep; libgomp spins none at all when it has more threads than
 * processors) and re-executes the program once (libgomp reads both only at start-up).
 * Measured: docs/benchmarks.md "Results (session 19)".
 * OpenBLAS, in the same re-exec: it picks its kernels by CPU model when it loads, and on a
 * model it does not know (Debian 12's 0.3.21 on the Xeon family 6 model 207 of session 30)
 * it falls back to its SSE3 "Prescott" kernels, 2.6-4.4x slower than its AVX-512 ones there
 * (docs/benchmarks.md "Session 30"): the GEMMs of a build without oneDNN, or of
 * BT_GEMM=openblas. When it did, and the user did not set OPENBLAS_CORETYPE, this sets it to
 * bt_openblas_core_for(that, the active ISA level). Returns only when no re-exec was needed
 * or possible. */
void bt_runtime_prefer_start_environment(char **argv);

/* The OPENBLAS_CORETYPE that gives ISA level `isa` OpenBLAS's kernels for it, when OpenBLAS
 * loaded `loaded` (its corename) and that is its generic fallback "Prescott": Cooperlake
 * (avx512_bf16), SkylakeX (avx512), Haswell (avx2), as scripts/test.sh and the side-by-side
 * script's --isa classes name them. NULL otherwise: OpenBLAS chose for this CPU, or the level
 * is scalar. */
const char *bt_openblas_core_for(const char *loaded, bt_isa isa);

/* What OpenBLAS's x86-64 kernels named `core` (its corename, e.g. gemm_openblas_core())
 * need of the CPU, for the names above SSE4: Sandybridge (AVX), Haswell and Zen (AVX2 and
 * FMA), SkylakeX (bt's avx512 level), Cooperlake (avx512_bf16); NULL for any other name (not
 * checked). *runs: 1 when this CPU has it (or the name is not listed), else 0.
 * Why: OPENBLAS_CORETYPE forces a core when OpenBLAS loads, and Debian 12's 0.3.21 runs a
 * forced SkylakeX on any CPU (a forced Cooperlake falls back by itself): on an AVX2-only Zen 1
 * its first product stopped on an illegal instruction (docs/guarantees.md). */
const char *bt_openblas_core_needs(const char *core, int *runs);
/* BT_OK when this CPU runs the kernels OpenBLAS loaded; else BT_ERR_UNSUPPORTED naming
 * OPENBLAS_CORETYPE (when set), the core, what it needs and the core to set instead.
 * gemm_set_backend() and gemm_init_from_env() refuse the OpenBLAS backend with it. */
bt_status bt_openblas_core_check(void);

#endif
