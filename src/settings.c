/* settings.c: the environment snapshot (settings.h). The one place in src/ that calls getenv,
 * setenv or exec.
 *
 * Deliberately not here: checking values (each owner does, naming the variable). */
#include "settings.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef _OPENMP
#include <omp.h>
#endif

static const char *const setting_names[BT_SET_COUNT] = {
    [BT_SET_CPU_ISA] = "BT_CPU_ISA",
    [BT_SET_GEMM] = "BT_GEMM",
    [BT_SET_GEMM_BF16] = "BT_GEMM_BF16",
    [BT_SET_GEMM_SPLIT_K] = "BT_GEMM_SPLIT_K",
    [BT_SET_GEMM_PACK_B] = "BT_GEMM_PACK_B",
    [BT_SET_GEMM_SPLIT_M] = "BT_GEMM_SPLIT_M",
    [BT_SET_KERNELS] = "BT_KERNELS",
    [BT_SET_ATTENTION_THREADS] = "BT_ATTENTION_THREADS",
    [BT_SET_ATTENTION_PRODUCTS] = "BT_ATTENTION_PRODUCTS",
    [BT_SET_ATTENTION_PROBS] = "BT_ATTENTION_PROBS",
    [BT_SET_ACT_BF16] = "BT_ACT_BF16",
    [BT_SET_MEM_AVAILABLE] = "BT_MEM_AVAILABLE",
    [BT_SET_MEM_CHECK] = "BT_MEM_CHECK",
    [BT_SET_HUGE_PAGES] = "BT_HUGE_PAGES",
    [BT_SET_DIST_NO_PROGRESS_THREAD] = "BT_DIST_NO_PROGRESS_THREAD",
    [BT_SET_OMP_NUM_THREADS] = "OMP_NUM_THREADS",
    [BT_SET_OMP_WAIT_POLICY] = "OMP_WAIT_POLICY",
    [BT_SET_GOMP_SPINCOUNT] = "GOMP_SPINCOUNT",
    [BT_SET_DNNL_MAX_CPU_ISA] = "DNNL_MAX_CPU_ISA",
    [BT_SET_OPENBLAS_CORETYPE] = "OPENBLAS_CORETYPE",
    [BT_SET_OMPI_COMM_WORLD_SIZE] = "OMPI_COMM_WORLD_SIZE",
    [BT_SET_OMPI_COMM_WORLD_LOCAL_SIZE] = "OMPI_COMM_WORLD_LOCAL_SIZE",
    [BT_SET_PMI_SIZE] = "PMI_SIZE",
    [BT_SET_PMIX_RANK] = "PMIX_RANK",
    [BT_SET_PMI_RANK] = "PMI_RANK",
    [BT_SET_COLUMNS] = "COLUMNS",
    [BT_SET_TERM] = "TERM",
};

/* Marks a process that bt re-executed (removed again at the snapshot); its value says what bt
 * set: REEXEC_OPENMP (OMP_WAIT_POLICY and GOMP_SPINCOUNT) and/or REEXEC_OPENBLAS
 * (OPENBLAS_CORETYPE), as "1", "2" or "3". */
#define REEXEC_MARK "BT_SETTINGS_REEXEC"
enum { REEXEC_OPENMP = 1, REEXEC_OPENBLAS = 2 };

static bt_settings snapshot;
static pthread_once_t snapshot_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t snapshot_lock = PTHREAD_MUTEX_INITIALIZER;

static void snapshot_take(void) {
    for (int i = 0; i < BT_SET_COUNT; i++) {
        const char *v = getenv(setting_names[i]);
        snapshot.value[i] = v && *v ? v : NULL;
    }
    const char *mark = getenv(REEXEC_MARK);
    if (mark) {
        const int set = atoi(mark);
        snapshot.reexec = 1;
        snapshot.passive_reexec = (set & REEXEC_OPENMP) != 0;
        snapshot.openblas_core_reexec = (set & REEXEC_OPENBLAS) != 0;
        unsetenv(REEXEC_MARK);
    }
}

const bt_settings *bt_settings_get(void) {
    pthread_once(&snapshot_once, snapshot_take);
    return &snapshot;
}

void bt_settings_reload(void) {
    bt_settings_get();
    pthread_mutex_lock(&snapshot_lock);
    const int reexec = snapshot.reexec, passive = snapshot.passive_reexec,
              openblas = snapshot.openblas_core_reexec, dnnl = snapshot.dnnl_isa_set_by_bt;
    snapshot_take();
    snapshot.reexec |= reexec;
    snapshot.passive_reexec |= passive;
    snapshot.openblas_core_reexec |= openblas;
    snapshot.dnnl_isa_set_by_bt = dnnl;
    pthread_mutex_unlock(&snapshot_lock);
}

const char *bt_setting_value(bt_setting id) {
    return (int)id >= 0 && id < BT_SET_COUNT ? bt_settings_get()->value[id] : NULL;
}

const char *bt_setting_name(bt_setting id) {
    return (int)id >= 0 && id < BT_SET_COUNT ? setting_names[id] : "?";
}

void bt_settings_set_dnnl_isa(const char *value) {
    bt_settings_get();
    pthread_mutex_lock(&snapshot_lock);
    if (!snapshot.value[BT_SET_DNNL_MAX_CPU_ISA] && setenv("DNNL_MAX_CPU_ISA", value, 1) == 0) {
        snapshot.value[BT_SET_DNNL_MAX_CPU_ISA] = getenv("DNNL_MAX_CPU_ISA");
        snapshot.dnnl_isa_set_by_bt = 1;
    }
    pthread_mutex_unlock(&snapshot_lock);
}

/* With thread binding on (OMP_PROC_BIND, or OMP_PLACES set), libgomp binds the initial thread
 * to the first OpenMP place as it loads, before main, and exec keeps a thread's affinity: the
 * re-executed image's libgomp would make its places from that one place's CPUs and bind every
 * thread there. Measured on a 2-core VM, OMP_PROC_BIND=close OMP_NUM_THREADS=2: both threads on
 * CPU 0, the base bf16 step 7.7 s (CPU time = wall time) instead of 5.0-5.6 s. So before the
 * exec the initial thread's affinity goes back to the CPUs of all places, the set libgomp made
 * them from (or, with OMP_PLACES naming fewer CPUs than the process may use, the CPUs the
 * user named). Nothing happens when no places are defined (binding off). */
static void reexec_unbind_initial_thread(void) {
#ifdef _OPENMP
    cpu_set_t all; /* CPU_SETSIZE CPUs, as kernels/cpu.c's count of usable processors */
    CPU_ZERO(&all);
    for (int p = 0; p < omp_get_num_places(); p++) {
        const int n = omp_get_place_num_procs(p);
        int *ids = n > 0 ? malloc((size_t)n * sizeof *ids) : NULL;
        if (!ids) continue;
        omp_get_place_proc_ids(p, ids);
        for (int i = 0; i < n; i++)
            if (ids[i] >= 0 && ids[i] < CPU_SETSIZE) CPU_SET(ids[i], &all);
        free(ids);
    }
    if (CPU_COUNT(&all) > 0) (void)sched_setaffinity(0, sizeof all, &all); /* failed: as before */
#endif
}

void bt_settings_reexec_preferred(char **argv, const char *openblas_core) {
    const bt_settings *s = bt_settings_get();
    if (s->reexec) return;
    int set = 0;
    if (!s->value[BT_SET_OMP_WAIT_POLICY] && !s->value[BT_SET_GOMP_SPINCOUNT] &&
        setenv("OMP_WAIT_POLICY", "PASSIVE", 1) == 0 &&
        setenv("GOMP_SPINCOUNT", BT_OPENMP_SPINCOUNT, 1) == 0)
        set |= REEXEC_OPENMP;
    if (openblas_core && !s->value[BT_SET_OPENBLAS_CORETYPE] &&
        setenv("OPENBLAS_CORETYPE", openblas_core, 1) == 0)
        set |= REEXEC_OPENBLAS;
    char mark[2] = {(char)('0' + set), 0};
    if (!set || setenv(REEXEC_MARK, mark, 1) != 0) return;
    reexec_unbind_initial_thread();
    execv("/proc/self/exe", argv);
    /* exec failed: go on with the libraries' defaults */
    unsetenv(REEXEC_MARK);
}

void bt_settings_print(FILE *out) {
    const bt_settings *s = bt_settings_get();
    fprintf(out, "environment:");
    for (int i = 0; i < BT_SET_COUNT; i++)
        if (s->value[i]) fprintf(out, " %s=%s", setting_names[i], s->value[i]);
    fprintf(out, "\n");
    if (s->dnnl_isa_set_by_bt)
        fprintf(out, "environment set by bt: DNNL_MAX_CPU_ISA=%s (from BT_CPU_ISA)\n",
                s->value[BT_SET_DNNL_MAX_CPU_ISA]);
    if (s->passive_reexec)
        fprintf(out, "environment set by bt: OMP_WAIT_POLICY=PASSIVE GOMP_SPINCOUNT=%s (bt "
                     "re-executed itself so that libgomp reads them; set either to choose)\n",
                BT_OPENMP_SPINCOUNT);
    if (s->openblas_core_reexec)
        fprintf(out, "environment set by bt: OPENBLAS_CORETYPE=%s (OpenBLAS had picked its SSE3 "
                     "kernels on a CPU model it does not know; bt re-executed itself so that "
                     "OpenBLAS reads it; set it to choose)\n",
                s->value[BT_SET_OPENBLAS_CORETYPE] ? s->value[BT_SET_OPENBLAS_CORETYPE] : "?");
}
