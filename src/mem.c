/* mem.c: available memory, the pre-allocation check and huge-page allocations; see mem.h. */
#include "mem.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include "settings.h"
#include "status.h"

uint64_t bt_mul_sat(uint64_t a, uint64_t b) {
    uint64_t r;
    return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

uint64_t bt_add_sat(uint64_t a, uint64_t b) {
    uint64_t r;
    return __builtin_add_overflow(a, b, &r) ? UINT64_MAX : r;
}

/* A byte count with an optional K/M/G/T suffix (powers of 1024); 0 on failure. */
static int parse_bytes(const char *s, uint64_t *out) {
    char *end;
    if (!s || *s < '0' || *s > '9') return 0;
    unsigned long long v = strtoull(s, &end, 10);
    uint64_t mul = 1;
    switch (*end) {
    case 'K': case 'k': mul = 1ull << 10; end++; break;
    case 'M': case 'm': mul = 1ull << 20; end++; break;
    case 'G': case 'g': mul = 1ull << 30; end++; break;
    case 'T': case 't': mul = 1ull << 40; end++; break;
    default: break;
    }
    if (*end) return 0;
    *out = bt_mul_sat(v, mul);
    return 1;
}

/* The first line of a file as an unsigned number; 0 when absent or "max". */
static int read_u64_file(const char *path, uint64_t *out) {
    FILE *f = fopen(path, "re");
    if (!f) return 0;
    char buf[64] = {0};
    int ok = fgets(buf, sizeof buf, f) != NULL;
    fclose(f);
    if (!ok) return 0;
    buf[strcspn(buf, "\n")] = '\0';
    return parse_bytes(buf, out);
}

/* The cgroup path of this process for controller `ctl` (v1) or the unified one (ctl NULL). */
static int cgroup_path(const char *ctl, char *out, size_t cap) {
    FILE *f = fopen("/proc/self/cgroup", "re");
    if (!f) return 0;
    char line[1024];
    int found = 0;
    while (!found && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        char *c1 = strchr(line, ':');
        char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2) continue;
        *c2 = '\0';
        const char *ctls = c1 + 1;
        if (ctl ? strstr(ctls, ctl) != NULL : (ctls[0] == '\0' && line[0] == '0')) {
            snprintf(out, cap, "%s", c2 + 1);
            found = 1;
        }
    }
    fclose(f);
    return found;
}

/* What the process had mapped when bt_mem_check_runtime ran, plus the address space it
 * reserved then for the threads and libraries: the runtime's own share of the limit. */
static _Atomic uint64_t runtime_mapped_by;

/* Room left under RLIMIT_AS (ulimit -v): the limit minus what is mapped now (VmSize, the
 * first field of /proc/self/statm). 0 when there is no such limit. */
static int address_space_room(uint64_t *room, uint64_t *limit, uint64_t *mapped) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return 0;
    unsigned long long pages = 0;
    FILE *f = fopen("/proc/self/statm", "re");
    if (f) {
        if (fscanf(f, "%llu", &pages) != 1) pages = 0;
        fclose(f);
    }
    *limit = (uint64_t)rl.rlim_cur;
    *mapped = bt_mul_sat(pages, (uint64_t)sysconf(_SC_PAGESIZE));
    *room = *limit > *mapped ? *limit - *mapped : 0;
    return 1;
}

int bt_mem_address_space_limited(void) {
    struct rlimit rl;
    return getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY;
}

bt_status bt_mem_check_runtime(const char *tool, int threads) {
    /* per thread: its stack (8 MiB, glibc's default) and a malloc arena (64 MiB of address
     * space); once: the GEMM libraries' JIT code, scratch and pack buffers (oneDNN, OpenBLAS)
     * and the loader's decode buffers, 128 MiB. An estimate with room to spare: oneDNN's JIT
     * does not survive a failed mmap (a segfault), so this is checked before it starts. */
    const uint64_t mib = 1ull << 20;
    const uint64_t need = (uint64_t)(threads > 0 ? threads : 1) * 72 * mib + 128 * mib;
    uint64_t room, limit, mapped;
    if (!address_space_room(&room, &limit, &mapped)) return BT_OK;
    atomic_store(&runtime_mapped_by, bt_add_sat(mapped, need));
    if (room >= need) return BT_OK;
    char l[32], m[32], n[32];
    return bt_fail(BT_ERR_NOMEM, "the address-space limit (ulimit -v, RLIMIT_AS) is %s and %s "
                   "are mapped already; %s needs about %s more before any data: %d threads' "
                   "stacks and heaps (72 MiB each) and the GEMM libraries' code and buffers "
                   "(128 MiB); raise the limit (ulimit -v unlimited, or prlimit --as) or use "
                   "fewer threads (OMP_NUM_THREADS, train.threads, data.num_workers)",
                   bt_mem_format(l, sizeof l, limit), bt_mem_format(m, sizeof m, mapped),
                   tool, bt_mem_format(n, sizeof n, need), threads);
}

uint64_t bt_mem_available(const char **source) {
    const char *src = "nothing measurable";
    uint64_t best = UINT64_MAX;
    const char *env = bt_setting_value(BT_SET_MEM_AVAILABLE);
    uint64_t v;
    if (env && parse_bytes(env, &v)) {
        if (source) *source = "BT_MEM_AVAILABLE";
        return v;
    }
    FILE *f = fopen("/proc/meminfo", "re");
    if (f) {
        char line[256];
        while (fgets(line, sizeof line, f)) {
            unsigned long long kb;
            if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
                best = bt_mul_sat(kb, 1024);
                src = "MemAvailable in /proc/meminfo";
                break;
            }
        }
        fclose(f);
    }
    char cg[768], p[1024];
    uint64_t lim, cur;
    if (cgroup_path(NULL, cg, sizeof cg)) { /* cgroup v2 */
        /* The limit of the process's own cgroup and of each ancestor up to the root. */
        for (;;) {
            snprintf(p, sizeof p, "/sys/fs/cgroup%s/memory.max", strcmp(cg, "/") ? cg : "");
            if (read_u64_file(p, &lim)) {
                snprintf(p, sizeof p, "/sys/fs/cgroup%s/memory.current", strcmp(cg, "/") ? cg : "");
                if (!read_u64_file(p, &cur)) cur = 0;
                uint64_t room = lim > cur ? lim - cur : 0;
                if (room < best) {
                    best = room;
                    src = "the cgroup v2 limit memory.max";
                }
            }
            char *slash = strrchr(cg, '/');
            if (!slash || slash == cg) break;
            *slash = '\0';
        }
    }
    if (cgroup_path("memory", cg, sizeof cg)) { /* cgroup v1 */
        snprintf(p, sizeof p, "/sys/fs/cgroup/memory%s/memory.limit_in_bytes", cg);
        if (!read_u64_file(p, &lim)) {
            snprintf(p, sizeof p, "/sys/fs/cgroup/memory/memory.limit_in_bytes");
            if (!read_u64_file(p, &lim)) lim = UINT64_MAX;
        }
        snprintf(p, sizeof p, "/sys/fs/cgroup/memory%s/memory.usage_in_bytes", cg);
        if (!read_u64_file(p, &cur)) cur = 0;
        /* v1 reports "no limit" as a huge page-rounded number. */
        if (lim < (1ull << 60)) {
            uint64_t room = lim > cur ? lim - cur : 0;
            if (room < best) {
                best = room;
                src = "the cgroup v1 limit memory.limit_in_bytes";
            }
        }
    }
    uint64_t room, limit, mapped;
    if (address_space_room(&room, &limit, &mapped)) {
        /* the runtime's share is counted once: what it maps by itself is in `mapped` */
        const uint64_t by = atomic_load(&runtime_mapped_by);
        if (by > mapped) room = room > by - mapped ? room - (by - mapped) : 0;
        if (room < best) {
            best = room;
            src = "the address-space limit RLIMIT_AS (ulimit -v), less the runtime's own";
        }
    }
    if (source) *source = src;
    return best;
}

const char *bt_mem_format(char *buf, int cap, uint64_t bytes) {
    static const char *units[] = {"B", "kB", "MB", "GB", "TB", "PB", "EB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1000.0 && u < 6) {
        v /= 1000.0;
        u++;
    }
    if (u == 0)
        snprintf(buf, (size_t)cap, "%llu B", (unsigned long long)bytes);
    else
        snprintf(buf, (size_t)cap, "%.1f %s", v, units[u]);
    return buf;
}

bt_status bt_mem_env_check(void) {
    const char *a = bt_setting_value(BT_SET_MEM_AVAILABLE);
    uint64_t v;
    if (a && !parse_bytes(a, &v))
        return bt_fail(BT_ERR_ARG, "environment variable BT_MEM_AVAILABLE: '%s' is not a byte "
                       "count; expected digits with an optional K, M, G or T suffix (e.g. "
                       "40000000 or 8G), or unset (measured)", a);
    const char *c = bt_setting_value(BT_SET_MEM_CHECK);
    if (c && strcmp(c, "0") != 0 && strcmp(c, "1") != 0)
        return bt_fail(BT_ERR_ARG, "environment variable BT_MEM_CHECK: '%s' is unknown; expected "
                       "0 (no memory check) or 1, or unset", c);
    const char *h = bt_setting_value(BT_SET_HUGE_PAGES);
    if (h && strcmp(h, "0") != 0 && strcmp(h, "1") != 0)
        return bt_fail(BT_ERR_ARG, "environment variable BT_HUGE_PAGES: '%s' is unknown; "
                       "expected 0 (4 KiB pages) or 1 (transparent huge pages), or unset (the "
                       "machine's THP setting decides)", h);
    return BT_OK;
}

/* --- huge pages -------------------------------------------------------------------------- */

/* Buffers under one huge page gain nothing from the advice, and one would cost a whole 2 MiB
 * page of memory for a few bytes: they are allocated as before (64-byte aligned, 4 KiB pages). */
static int wants_huge(size_t bytes) { return bytes >= BT_HUGE_PAGE_BYTES; }

static size_t round_up_huge(size_t bytes) {
    return (bytes + BT_HUGE_PAGE_BYTES - 1) & ~(BT_HUGE_PAGE_BYTES - 1);
}

/* BT_HUGE_PAGES's advice (mem.h) over [p, p + bytes) (p 2 MiB-aligned, bytes whole 2 MiB
 * pages); none when unset. Its failure (EINVAL: THP never, or a kernel without it) is not an
 * error: the pages stay 4 KiB. */
static void advise_huge(void *p, size_t bytes) {
    const char *v = bt_setting_value(BT_SET_HUGE_PAGES);
    if (v) (void)madvise(p, bytes, strcmp(v, "0") == 0 ? MADV_NOHUGEPAGE : MADV_HUGEPAGE);
}

void *bt_mem_alloc_huge(size_t bytes) {
    if (bytes > SIZE_MAX - BT_HUGE_PAGE_BYTES) return NULL;
    if (!wants_huge(bytes)) return aligned_alloc(64, bytes ? (bytes + 63) & ~(size_t)63 : 64);
    const size_t rounded = round_up_huge(bytes);
    void *p = aligned_alloc(BT_HUGE_PAGE_BYTES, rounded);
    if (p) advise_huge(p, rounded);
    return p;
}

void *bt_mem_calloc_huge_at(size_t bytes, const char *file, int line) {
    void *p = bt_mem_alloc_huge(bytes);
    if (!p) bt_abort_at(file, line, "out of memory allocating %zu bytes", bytes);
    memset(p, 0, bytes);
    return p;
}

void *bt_mem_map_huge(size_t bytes) {
    if (bytes > SIZE_MAX - 2 * BT_HUGE_PAGE_BYTES) return NULL;
    if (!wants_huge(bytes)) {
        void *p = mmap(NULL, bytes ? bytes : 1, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        return p == MAP_FAILED ? NULL : p;
    }
    const size_t rounded = round_up_huge(bytes), span = rounded + BT_HUGE_PAGE_BYTES;
    char *m = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return NULL;
    /* mmap is page-aligned only: keep the 2 MiB-aligned `rounded` bytes inside the span and
     * give back what lies before and after them */
    char *p = (char *)(((uintptr_t)m + BT_HUGE_PAGE_BYTES - 1) & ~(BT_HUGE_PAGE_BYTES - 1));
    if (p > m) munmap(m, (size_t)(p - m));
    if (m + span > p + rounded) munmap(p + rounded, (size_t)(m + span - (p + rounded)));
    advise_huge(p, rounded);
    return p;
}

void bt_mem_unmap_huge(void *p, size_t bytes) {
    if (p) munmap(p, wants_huge(bytes) ? round_up_huge(bytes) : (bytes ? bytes : 1));
}

bt_status bt_mem_check(uint64_t bytes, const char *what, const char *hint) {
    const char *off = bt_setting_value(BT_SET_MEM_CHECK);
    if (off && strcmp(off, "0") == 0) return BT_OK;
    const char *src;
    uint64_t avail = bt_mem_available(&src);
    if (bytes <= avail) return BT_OK;
    char need[32], have[32];
    bt_mem_format(need, sizeof need, bytes);
    if (avail == UINT64_MAX) snprintf(have, sizeof have, "?");
    else bt_mem_format(have, sizeof have, avail);
    if (strcmp(need, have) == 0) { /* too close to tell apart at 1 decimal: exact bytes */
        snprintf(need, sizeof need, "%llu bytes", (unsigned long long)bytes);
        snprintf(have, sizeof have, "%llu bytes", (unsigned long long)avail);
    }
    return bt_fail(BT_ERR_NOMEM,
                   "%s needs %s%s but this machine has %s available (%s); reduce %s "
                   "(BT_MEM_CHECK=0 skips this check)",
                   what, bytes == UINT64_MAX ? "more than " : "", bytes == UINT64_MAX ? "16 EB" : need,
                   have, src, hint);
}

int bt_mem_exit(int code) {
    if (!bt_mem_address_space_limited()) return code;
    fflush(stdout);
    fflush(stderr);
    _exit(code);
}
