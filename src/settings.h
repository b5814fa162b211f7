/* settings.h: the process's runtime settings from the environment, read once, in one place.
 *
 * bt's libraries read no environment variable themselves: the first call of bt_settings_get()
 * takes a snapshot of every variable bt uses (its own BT_* knobs and the launcher's, OpenMP's,
 * oneDNN's and the terminal's it consults) into one struct, and each module takes its value
 * from there (the kernel dispatch, the GEMM backends, the model's bf16 storage, the memory
 * check, the distributed world, the progress line). `--info` prints the whole snapshot
 * (bt_settings_print), including what bt itself changed in the environment for its libraries
 * (DNNL_MAX_CPU_ISA from BT_CPU_ISA; OMP_WAIT_POLICY=PASSIVE with GOMP_SPINCOUNT=1000, and
 * OPENBLAS_CORETYPE where OpenBLAS fell back to its SSE3 kernels, with the re-exec that makes
 * libgomp and OpenBLAS read them), so nothing a user cannot see is set behind their back.
 *
 * Values are strings here; each owner checks its own (bt_runtime_check_env at every tool's
 * start: a malformed value is an error naming the variable, never ignored). The list of
 * variables, with what each does, is `bt_setting_names` and docs/guarantees.md.
 *
 * Deliberately not here: settings that belong to a run (they are run-config keys, src/train/
 * config.c), test hooks (tests pass them as run-config keys under `test.`, never the
 * environment). */
#ifndef BT_SETTINGS_H
#define BT_SETTINGS_H

#include <stdio.h>

typedef enum {
    /* bt's own knobs (docs/determinism.md, docs/guarantees.md) */
    BT_SET_CPU_ISA,             /* BT_CPU_ISA: cap the kernels' ISA level */
    BT_SET_GEMM,                /* BT_GEMM: ref | openblas | onednn */
    BT_SET_GEMM_BF16,           /* BT_GEMM_BF16: auto | native | fp32 | widened */
    BT_SET_GEMM_SPLIT_K,        /* BT_GEMM_SPLIT_K: on | off */
    BT_SET_GEMM_PACK_B,         /* BT_GEMM_PACK_B: auto | on | off */
    BT_SET_GEMM_SPLIT_M,        /* BT_GEMM_SPLIT_M: auto | on | off */
    BT_SET_KERNELS,             /* BT_KERNELS: fast | ref */
    BT_SET_ATTENTION_THREADS,   /* BT_ATTENTION_THREADS: auto | blocks | gemm */
    BT_SET_ATTENTION_PRODUCTS,  /* BT_ATTENTION_PRODUCTS: auto | amx | avx512_bf16 | gemm */
    BT_SET_ATTENTION_PROBS,     /* BT_ATTENTION_PROBS: recompute | keep */
    BT_SET_ACT_BF16,            /* BT_ACT_BF16: 1 | 0 (bf16 activation storage) */
    BT_SET_MEM_AVAILABLE,       /* BT_MEM_AVAILABLE: bytes the memory check assumes */
    BT_SET_MEM_CHECK,           /* BT_MEM_CHECK: 1 | 0 */
    BT_SET_HUGE_PAGES,          /* BT_HUGE_PAGES: 1 | 0 (transparent huge pages, mem.h) */
    BT_SET_DIST_NO_PROGRESS_THREAD, /* BT_DIST_NO_PROGRESS_THREAD: set = MPI without threads */
    /* read, owned by others */
    BT_SET_OMP_NUM_THREADS,     /* OpenMP's thread count */
    BT_SET_OMP_WAIT_POLICY,     /* OpenMP's idle policy */
    BT_SET_GOMP_SPINCOUNT,      /* libgomp's busy-wait before an idle thread sleeps */
    BT_SET_DNNL_MAX_CPU_ISA,    /* oneDNN's ISA cap */
    BT_SET_OPENBLAS_CORETYPE,   /* OpenBLAS's kernels, read when the library loads */
    BT_SET_OMPI_COMM_WORLD_SIZE,       /* Open MPI launcher: world size */
    BT_SET_OMPI_COMM_WORLD_LOCAL_SIZE, /* ranks on this host */
    BT_SET_PMI_SIZE,            /* other PMI launchers: world size */
    BT_SET_PMIX_RANK,           /* PMIx launchers: this process's rank */
    BT_SET_PMI_RANK,            /* PMI launchers (srun, hydra): this process's rank */
    BT_SET_COLUMNS,             /* terminal width */
    BT_SET_TERM,                /* terminal type */
    BT_SET_COUNT
} bt_setting;

typedef struct bt_settings {
    const char *value[BT_SET_COUNT]; /* the variable's value, NULL when unset or empty */
    int dnnl_isa_set_by_bt;          /* DNNL_MAX_CPU_ISA was set by bt from BT_CPU_ISA */
    int reexec;                      /* this process is bt's re-exec (never done twice) */
    int passive_reexec;              /* OMP_WAIT_POLICY=PASSIVE and GOMP_SPINCOUNT were set by
                                        bt, which then re-executed itself for libgomp to read
                                        them */
    int openblas_core_reexec;        /* OPENBLAS_CORETYPE was set by bt, which then
                                        re-executed itself for OpenBLAS to read it */
} bt_settings;

/* The snapshot (taken at the first call; thread-safe). */
const bt_settings *bt_settings_get(void);
/* Takes the snapshot again: for tests and tools that change the environment in-process
 * (tests/test_util.h tu_setenv); not safe while other threads read settings. */
void bt_settings_reload(void);
/* One value: NULL when unset or empty. */
const char *bt_setting_value(bt_setting id);
/* The variable's name ("BT_CPU_ISA"). */
const char *bt_setting_name(bt_setting id);

/* The only writes to the environment bt makes, for libraries that read it themselves; each is
 * recorded in the snapshot and printed by --info. Sets DNNL_MAX_CPU_ISA (oneDNN reads it at its
 * first ISA query) unless the user set it. */
void bt_settings_set_dnnl_isa(const char *value);
/* Sets what bt prefers for the libraries that read the environment only at start-up, where
 * the user set none of it: OMP_WAIT_POLICY=PASSIVE and GOMP_SPINCOUNT=BT_OPENMP_SPINCOUNT
 * (unless the user set either), and OPENBLAS_CORETYPE=openblas_core (when not NULL: the
 * caller decided the user did not set it and OpenBLAS needs it); then re-executes the program
 * with argv, once, so that libgomp and OpenBLAS read them, and marks the new process's
 * snapshot (BT_SETTINGS_REEXEC: which of the two it set); a thread binding the user asked
 * for keeps all its OpenMP places through the exec. Returns only when it did nothing
 * (nothing to set, or this process is the re-exec) or exec failed. Why these values:
 * kernels/cpu.h bt_runtime_prefer_start_environment. */
#define BT_OPENMP_SPINCOUNT "1000"
void bt_settings_reexec_preferred(char **argv, const char *openblas_core);

/* Prints every variable of the snapshot ("name=value" or "name unset"), one line each, and
 * what bt set itself. */
void bt_settings_print(FILE *out);

#endif
