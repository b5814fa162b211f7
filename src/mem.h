/* mem.h: how much memory this machine can give bt, and the check every run makes before it
 * allocates (docs/guarantees.md, "Memory").
 *
 * Available memory is the smallest of: MemAvailable in /proc/meminfo; the cgroup v2 limit
 * (memory.max - memory.current of the process's cgroup); the cgroup v1 limit
 * (memory.limit_in_bytes - memory.usage_in_bytes). The environment variable
 * BT_MEM_AVAILABLE (a byte count, suffixes K/M/G/T accepted) replaces the measurement, for
 * tests and for users who know better; BT_MEM_CHECK=0 turns the check off.
 *
 * Deliberately not here: the estimate itself (each caller knows what it allocates: the
 * model plan in src/model, a batch in bt-data, an image in src/data/image.c), and swap
 * (counting it would let a run start that then crawls). */
#ifndef BT_MEM_H
#define BT_MEM_H

#include <stdint.h>

#include "status.h"

/* Bytes this process can still allocate without swapping or hitting its cgroup limit;
 * UINT64_MAX when nothing can be measured. *source (may be NULL) gets a static string
 * saying where the number comes from ("MemAvailable", "cgroup v2 memory.max", ...). */
uint64_t bt_mem_available(const char **source);

/* BT_OK when `bytes` fit in bt_mem_available(); otherwise BT_ERR_NOMEM with
 * "<what> needs 104.2 GB but this machine has 31.0 GB available (MemAvailable); reduce
 * <hint>". `what` says what is being planned ("the model at batch 64, 512 tokens"), `hint`
 * which knobs lower it ("--batch-size or --max-length"). */
bt_status bt_mem_check(uint64_t bytes, const char *what, const char *hint);

/* Under an address-space limit (RLIMIT_AS, ulimit -v): refuses to start when the room left is
 * below what `threads` threads and the GEMM libraries map besides the data (an estimate,
 * mem.c), and keeps that much out of bt_mem_available() from then on. BT_ERR_NOMEM naming
 * the limit and `tool`. Without such a limit it only records the reserve. */
bt_status bt_mem_check_runtime(const char *tool, int threads);
/* 1 under an address-space limit. (OpenBLAS's worker threads then may loop forever on a
 * failed buffer mmap, so that its exit handler's join never returns: the tools leave with
 * _exit after flushing, bt_mem_exit, docs/guarantees.md "Memory".) */
int bt_mem_address_space_limited(void);
/* Every command-line tool's way out of main (`return bt_mem_exit(tool_main(argc, argv))`):
 * under an address-space limit, flushes stdout and stderr and leaves with _exit(code), since
 * the GEMM libraries' exit handlers may never return there (even after --help: OpenBLAS
 * starts its threads when it loads); otherwise returns code. */
int bt_mem_exit(int code);

/* BT_MEM_AVAILABLE, BT_MEM_CHECK and BT_HUGE_PAGES, when set, are well-formed (a byte count
 * such as 40000000 or 8G; "0" or "1"): a garbage value is an error naming it (BT_ERR_ARG),
 * never silently ignored. The tools check it at start (cpu.h bt_runtime_cli_info). */
bt_status bt_mem_env_check(void);

/* Huge pages, on request, for the buffers a training step streams over every step: the fp32
 * weights and their bf16 copy, the gradients, AdamW's two moments and the activation arenas
 * (gigabytes on the base model, walked by every GEMM, the optimizer and the memory-bound
 * passes). They are allocated 2 MiB-aligned in whole 2 MiB pages, and BT_HUGE_PAGES says what
 * to ask the kernel: 1 asks for transparent huge pages (madvise MADV_HUGEPAGE), which Debian's
 * default THP setting ("madvise") grants only to memory that asks; 0 asks for 4 KiB pages
 * (MADV_NOHUGEPAGE, also under THP "always"); unset asks nothing, so the machine's setting
 * decides, as PyTorch's CPU allocator leaves it. Unset is the default because on the machines
 * measured huge pages did not move the training step (docs/benchmarks.md, "Session 35":
 * within the run-to-run spread; only fresh memory's first touch got faster). Under THP
 * "never" or a kernel without THP the advice is refused and ignored. Only where the bytes
 * live changes, never their contents: results are the same bits either way. */
#define BT_HUGE_PAGE_BYTES ((size_t)2 << 20)
/* aligned_alloc's contract (NULL on failure, freed with free), 2 MiB-aligned, rounded up to
 * whole 2 MiB pages and advised as above; under 2 MiB, 64-byte aligned without advice (a few
 * bytes would cost a whole huge page). Not zeroed. */
void *bt_mem_alloc_huge(size_t bytes);
/* bt_mem_alloc_huge, zero-filled, aborting with file:line when the allocation fails (as
 * bt_calloc; for buffers whose size the program has already checked, bt_mem_check). */
void *bt_mem_calloc_huge_at(size_t bytes, const char *file, int line);
#define bt_calloc_huge(bytes) bt_mem_calloc_huge_at((bytes), __FILE__, __LINE__)
/* An anonymous private mapping of `bytes`: zero, backed only where first written, 2 MiB-aligned
 * and advised as above (under 2 MiB: a plain mapping). NULL when mmap fails; released with
 * bt_mem_unmap_huge(p, bytes). */
void *bt_mem_map_huge(size_t bytes);
void bt_mem_unmap_huge(void *p, size_t bytes);

/* Formats a byte count for people: "512 B", "3.4 MB", "104.2 GB" (decimal units). */
const char *bt_mem_format(char *buf, int cap, uint64_t bytes);

/* a * b, or UINT64_MAX on overflow; for multiplying sizes out before comparing them. */
uint64_t bt_mul_sat(uint64_t a, uint64_t b);
/* a + b, or UINT64_MAX on overflow. */
uint64_t bt_add_sat(uint64_t a, uint64_t b);

#endif
