/* test_base_io.c: the base helpers every CLI and loader goes through (issue 11):
 * - args.h: one strict numeric flag parser; each accepted string is checked against the
 *   value strtoull/strtod give for a plain decimal (known by construction), each refused one
 *   for the flag name and the range in the message;
 * - mem.h: BT_MEM_AVAILABLE overrides the measurement, bt_mem_check's message names what is
 *   needed, what is available, where that number comes from and what to reduce; the
 *   huge-page allocations' alignment, zero fill and BT_HUGE_PAGES values;
 * - fileio.h: regular-file inputs (a FIFO, a directory, a symlink loop, a missing directory
 *   refused with their own messages), atomic outputs (a symlink to a regular file is
 *   replaced by a file and its target left alone; the new file has the umask's mode like
 *   fopen's; an empty path or one ending in '/' refused), bt_remove_owned_file. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "args.h"
#include "fileio.h"
#include "mem.h"
#include "test_util.h"

static void test_args(void) {
    static const struct {
        const char *s;
        int ok;
        uint64_t want;
    } u[] = {
        {"0", 1, 0},
        {"18446744073709551615", 1, UINT64_MAX},
        {"007", 1, 7},
        {"-1", 0, 0},
        {"18446744073709551616", 0, 0},
        {"99999999999999999999999", 0, 0},
        {"", 0, 0},
        {" 1", 0, 0},
        {"1 ", 0, 0},
        {"+1", 0, 0},
        {"0x10", 0, 0},
        {"1e3", 0, 0},
        {"12abc", 0, 0},
    };
    for (size_t i = 0; i < sizeof u / sizeof u[0]; i++) {
        uint64_t v = 12345;
        bt_error_clear();
        bt_status st = bt_parse_u64("--seed", u[i].s, 0, UINT64_MAX, &v);
        int ok = u[i].ok ? st == BT_OK && v == u[i].want
                         : st == BT_ERR_ARG && v == 12345 &&
                               strstr(bt_error_message(), "--seed: expected an integer in [0, "
                                                          "18446744073709551615]");
        tu_check(ok, "bt_parse_u64('%s'): %s", u[i].s, st ? bt_error_message() : "ok");
    }
    int64_t x;
    tu_check(bt_parse_i64("--n", "-5", -10, 10, &x) == BT_OK && x == -5, "i64 -5 in [-10, 10]");
    tu_check(bt_parse_i64("--n", "11", -10, 10, &x) == BT_ERR_ARG &&
                 strstr(bt_error_message(), "--n: expected an integer in [-10, 10], got '11'"),
             "i64 11 outside [-10, 10]: %s", bt_error_message());
    tu_check(bt_parse_i64("--n", "-9223372036854775809", INT64_MIN, INT64_MAX, &x) == BT_ERR_ARG,
             "i64 below INT64_MIN refused");
    int n;
    tu_check(bt_parse_int("--threads", "4096", 1, 4096, &n) == BT_OK && n == 4096, "int 4096");
    tu_check(bt_parse_int("--threads", "4097", 1, 4096, &n) == BT_ERR_ARG, "int 4097 refused");
    tu_check(bt_parse_int("--threads", NULL, 1, 4096, &n) == BT_ERR_ARG &&
                 strstr(bt_error_message(), "needs a value"),
             "missing value");
    double d;
    tu_check(bt_parse_double("--lr", "1e-4", 0, 1, &d) == BT_OK && d == strtod("1e-4", NULL),
             "double 1e-4");
    tu_check(bt_parse_double("--lr", ".5", 0, 1, &d) == BT_OK && d == 0.5, "double .5");
    static const char *const bad_d[] = {"nan", "inf", "-inf", "0x1p-3", "1e400", "2", "", "1,5",
                                        "1.5x"};
    for (size_t i = 0; i < sizeof bad_d / sizeof bad_d[0]; i++)
        tu_check(bt_parse_double("--lr", bad_d[i], 0, 1, &d) == BT_ERR_ARG &&
                     strstr(bt_error_message(), "--lr: expected a number in [0, 1]"),
                 "double '%s' refused: %s", bad_d[i], bt_error_message());
    /* An untrusted value is escaped when echoed. */
    tu_check(bt_parse_int("--x", "\x1b[2J", 0, 1, &n) == BT_ERR_ARG &&
                 strstr(bt_error_message(), "\\x1b[2J") && !strchr(bt_error_message(), '\x1b'),
             "escape sequences in a value are not echoed raw");
}

/* mem.h's huge-page allocations: 2 MiB-aligned above one huge page, 64-byte aligned below it;
 * the mapping zero and writable; BT_HUGE_PAGES takes 0 or 1 only. (Whether the kernel grants
 * the advice, and that results keep their bits, is test_model_memory.c section 12.) */
static void test_huge_pages(void) {
    const size_t big = 5 * BT_HUGE_PAGE_BYTES / 2 + 3, small = 1000;
    unsigned char *a = bt_mem_alloc_huge(big), *b = bt_mem_alloc_huge(small);
    tu_check(a && (uintptr_t)a % BT_HUGE_PAGE_BYTES == 0, "alloc above 2 MiB: 2 MiB-aligned");
    tu_check(b && (uintptr_t)b % 64 == 0, "alloc below 2 MiB: 64-byte aligned");
    if (a) memset(a, 1, big);
    if (b) memset(b, 1, small);
    free(a);
    free(b);
    unsigned char *z = bt_calloc_huge(big);
    size_t nonzero = 0;
    for (size_t i = 0; i < big; i++) nonzero += z[i] != 0;
    tu_check(nonzero == 0, "calloc_huge: %zu of %zu bytes nonzero", nonzero, big);
    free(z);
    const size_t sizes[] = {big, small};
    for (int i = 0; i < 2; i++) {
        unsigned char *m = bt_mem_map_huge(sizes[i]);
        const size_t align = sizes[i] >= BT_HUGE_PAGE_BYTES ? BT_HUGE_PAGE_BYTES : 4096;
        nonzero = 0;
        if (m) {
            for (size_t j = 0; j < sizes[i]; j++) nonzero += m[j] != 0;
            memset(m, 7, sizes[i]);
        }
        tu_check(m && (uintptr_t)m % align == 0 && nonzero == 0,
                 "map_huge(%zu): aligned to %zu, zero (%zu nonzero), writable", sizes[i], align,
                 nonzero);
        bt_mem_unmap_huge(m, sizes[i]);
    }
    static const char *const values[] = {"0", "1", "yes", "2", " 1"};
    for (int i = 0; i < 5; i++) {
        tu_setenv("BT_HUGE_PAGES", values[i], 1);
        const bt_status st = bt_mem_env_check();
        if (i < 2) tu_check(st == BT_OK, "BT_HUGE_PAGES=%s accepted", values[i]);
        else
            tu_check(st == BT_ERR_ARG && strstr(bt_error_message(), "BT_HUGE_PAGES") &&
                         strstr(bt_error_message(), "expected 0"),
                     "BT_HUGE_PAGES='%s' refused naming it: %s", values[i], bt_error_message());
    }
    tu_unsetenv("BT_HUGE_PAGES");
}

static void test_mem(void) {
    tu_setenv("BT_MEM_AVAILABLE", "3G", 1);
    const char *src = NULL;
    tu_check(bt_mem_available(&src) == 3ull << 30 && strcmp(src, "BT_MEM_AVAILABLE") == 0,
             "BT_MEM_AVAILABLE=3G read as 3 GiB");
    tu_check(bt_mem_check(3ull << 30, "x", "y") == BT_OK, "exactly the available bytes fit");
    bt_status st = bt_mem_check((3ull << 30) + 1, "the plan", "--batch-size");
    const char *msg = bt_error_message();
    tu_check(st == BT_ERR_NOMEM && strstr(msg, "the plan needs 3221225473 bytes") &&
                 strstr(msg, "has 3221225472 bytes available (BT_MEM_AVAILABLE)") &&
                 strstr(msg, "reduce --batch-size"),
             "bt_mem_check message: %s", msg);
    st = bt_mem_check(5ull << 30, "the plan", "--batch-size");
    tu_check(st == BT_ERR_NOMEM && strstr(bt_error_message(), "needs 5.4 GB but this machine has "
                                                              "3.2 GB available"),
             "bt_mem_check message: %s", bt_error_message());
    st = bt_mem_check(UINT64_MAX, "overflowing plan", "everything");
    tu_check(st == BT_ERR_NOMEM && strstr(bt_error_message(), "more than"),
             "a saturated size is refused: %s", bt_error_message());
    tu_setenv("BT_MEM_CHECK", "0", 1);
    tu_check(bt_mem_check(UINT64_MAX, "x", "y") == BT_OK, "BT_MEM_CHECK=0 turns the check off");
    tu_unsetenv("BT_MEM_CHECK");
    tu_unsetenv("BT_MEM_AVAILABLE");
    uint64_t real = bt_mem_available(&src);
    tu_check(real > (64ull << 20) && real != UINT64_MAX, "this machine: %.1f GB available (%s)",
             (double)real / 1e9, src);
    tu_check(bt_mul_sat(1ull << 40, 1ull << 30) == UINT64_MAX && bt_mul_sat(3, 5) == 15 &&
                 bt_add_sat(UINT64_MAX, 1) == UINT64_MAX,
             "saturating arithmetic");
    char b[32];
    tu_check(strcmp(bt_mem_format(b, sizeof b, 999), "999 B") == 0 &&
                 strcmp(bt_mem_format(b, sizeof b, 104200000000ull), "104.2 GB") == 0,
             "bt_mem_format");
}

static void test_fileio(const char *dir) {
    char p[1200], q[1200], fifo[1200];
    int fd;
    snprintf(fifo, sizeof fifo, "%s/fifo", dir);
    mkfifo(fifo, 0600);
    tu_check(bt_open_regular(fifo, "model config", &fd, NULL) == BT_ERR_IO && fd == -1 &&
                 strstr(bt_error_message(), "is a FIFO; expected a regular model config file"),
             "FIFO input refused: %s", bt_error_message());
    tu_check(bt_open_regular(dir, "manifest", &fd, NULL) == BT_ERR_IO &&
                 strstr(bt_error_message(), "is a directory"),
             "directory input refused: %s", bt_error_message());
    snprintf(p, sizeof p, "%s/loop", dir);
    symlink("loop", p);
    tu_check(bt_open_regular(p, NULL, &fd, NULL) == BT_ERR_IO &&
                 strstr(bt_error_message(), "symlink loop"),
             "symlink loop named: %s", bt_error_message());
    snprintf(p, sizeof p, "%s/no_dir/config.json", dir);
    tu_check(bt_open_regular(p, "model config", &fd, NULL) == BT_ERR_IO &&
                 strstr(bt_error_message(), "no_dir does not exist"),
             "missing directory named: %s", bt_error_message());
    tu_check(bt_open_regular("", "image", &fd, NULL) == BT_ERR_IO &&
                 strstr(bt_error_message(), "image path is empty"),
             "empty input path: %s", bt_error_message());

    /* outputs */
    tu_check(bt_write_file_atomic("", "output", "x", 1) == BT_ERR_ARG &&
                 strstr(bt_error_message(), "the output path is empty"),
             "empty output path: %s", bt_error_message());
    snprintf(p, sizeof p, "%s/sub/", dir);
    tu_check(bt_check_output_file(p, "output") == BT_ERR_IO &&
                 strstr(bt_error_message(), "ends with '/'"),
             "output path ending in '/': %s", bt_error_message());
    snprintf(p, sizeof p, "%s/target.txt", dir);
    snprintf(q, sizeof q, "%s/link.txt", dir);
    tu_setup_text(p, "the link's target");
    symlink("target.txt", q);
    tu_check(bt_write_file_atomic(q, "output", "new", 3) == BT_OK, "write through a symlink");
    struct stat sb;
    char *t = (char *)tu_read_file(p, NULL);
    char *l = (char *)tu_read_file(q, NULL);
    tu_check(lstat(q, &sb) == 0 && S_ISREG(sb.st_mode) && t && !strcmp(t, "the link's target") &&
                 l && !strcmp(l, "new"),
             "a symlink output becomes a regular file; its target is untouched");
    free(t);
    free(l);
    mode_t um = umask(022);
    snprintf(p, sizeof p, "%s/mode.txt", dir);
    tu_check(bt_write_file_atomic(p, NULL, "m", 1) == BT_OK && stat(p, &sb) == 0 &&
                 (sb.st_mode & 0777) == 0644,
             "new file mode 0666 & ~umask(022) = 0644 (got %o)", (unsigned)(sb.st_mode & 0777));
    umask(um);
    tu_check(bt_remove_owned_file(p, "vocab") == BT_OK && stat(p, &sb) != 0 &&
                 bt_remove_owned_file(p, "vocab") == BT_OK,
             "bt_remove_owned_file removes a file, absent is fine");
    tu_check(bt_remove_owned_file(fifo, "vocab") == BT_ERR_IO && stat(fifo, &sb) == 0,
             "bt_remove_owned_file leaves a FIFO alone: %s", bt_error_message());
    snprintf(p, sizeof p, "%s/a_file", dir);
    tu_setup_text(p, "x");
    tu_check(bt_check_output_dir(p, "--save directory", 1) == BT_ERR_IO &&
                 strstr(bt_error_message(), "exists and is a regular file; expected a directory"),
             "a file where a directory goes: %s", bt_error_message());

    /* mkdir -p (bt_make_dirs) and outputs under missing directories */
    snprintf(p, sizeof p, "%s/mk//a/b/c/", dir);
    snprintf(q, sizeof q, "%s/mk/a/b/c", dir);
    tu_check(bt_make_dirs(p, "output.dir") == BT_OK && stat(q, &sb) == 0 && S_ISDIR(sb.st_mode) &&
                 bt_make_dirs(q, "output.dir") == BT_OK,
             "bt_make_dirs creates every missing level ('//' and a trailing '/' allowed); an "
             "existing directory is fine: %s", bt_error_message());
    snprintf(p, sizeof p, "%s/a_file/x/y", dir);
    tu_check(bt_make_dirs(p, "output.dir") == BT_ERR_IO &&
                 strstr(bt_error_message(), "a_file exists and is a regular file, not a directory"),
             "bt_make_dirs below a file names it: %s", bt_error_message());
    snprintf(p, sizeof p, "%s/deep/er/out.json", dir);
    tu_check(bt_write_file_atomic(p, "metrics JSON", "{}", 2) == BT_OK && stat(p, &sb) == 0 &&
                 S_ISREG(sb.st_mode),
             "an atomic write creates its missing directories: %s", bt_error_message());
    tu_check(bt_prepare_output_file(fifo, "metrics JSON") == BT_ERR_IO &&
                 strstr(bt_error_message(), "is a FIFO; refusing to replace it"),
             "bt_prepare_output_file still refuses a FIFO: %s", bt_error_message());
    snprintf(p, sizeof p, "%s/a_file/out.json", dir);
    tu_check(bt_prepare_output_file(p, "metrics JSON") == BT_ERR_IO &&
                 strstr(bt_error_message(), "not a directory"),
             "an output below a file: %s", bt_error_message());
}

int main(void) {
    test_args();
    test_mem();
    test_huge_pages();
    test_fileio(tu_tmpdir());
    return tu_finish();
}
