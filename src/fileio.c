/* fileio.c: regular-file inputs and atomic outputs; see fileio.h. */
#include "fileio.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *bt_file_type_name(mode_t m) {
    if (S_ISREG(m)) return "a regular file";
    if (S_ISDIR(m)) return "a directory";
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    if (S_ISSOCK(m)) return "a socket";
    if (S_ISLNK(m)) return "a symbolic link";
    return "not a regular file";
}

/* "PATH: cannot open WHAT: REASON" with clearer reasons for the common cases. */
static bt_status open_error(const char *path, const char *what, int err) {
    const char *w = what ? what : "file";
    if (!path[0]) return bt_fail(BT_ERR_IO, "the %s path is empty; expected a file name", w);
    if (err == ELOOP)
        return bt_fail(BT_ERR_IO, "%s: cannot open %s: too many levels of symbolic links (a "
                       "symlink loop?)", path, w);
    if (err == ENOENT) {
        /* Say which part is missing: the directory or the file. */
        const char *slash = strrchr(path, '/');
        if (slash && slash != path) {
            char *dir = strndup(path, (size_t)(slash - path));
            struct stat sb;
            int missing_dir = dir && stat(dir, &sb) != 0;
            int not_dir = dir && !missing_dir && !S_ISDIR(sb.st_mode);
            bt_status s = BT_ERR_IO;
            if (missing_dir)
                s = bt_fail(BT_ERR_IO, "%s: cannot open %s: the directory %s does not exist",
                            path, w, dir);
            else if (not_dir)
                s = bt_fail(BT_ERR_IO, "%s: cannot open %s: %s is not a directory", path, w, dir);
            free(dir);
            if (missing_dir || not_dir) return s;
        }
    }
    return bt_fail(BT_ERR_IO, "%s: cannot open %s: %s", path, w, strerror(err));
}

bt_status bt_open_regular(const char *path, const char *what, int *fd, struct stat *st) {
    *fd = -1;
    if (!path || !path[0]) return open_error("", what, ENOENT);
    struct stat pre;
    if (stat(path, &pre) == 0 && !S_ISREG(pre.st_mode)) /* refused without opening it */
        return bt_fail(BT_ERR_IO, "%s: is %s; expected a regular %s file", path,
                       bt_file_type_name(pre.st_mode), what ? what : "input");
    /* O_NONBLOCK: opening a FIFO without a writer returns at once instead of blocking. */
    int f = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (f < 0) {
        int err = errno;
        struct stat sb;
        if (err == ENXIO || (err != ENOENT && err != ELOOP && stat(path, &sb) == 0 &&
                             !S_ISREG(sb.st_mode) && !S_ISDIR(sb.st_mode)))
            return bt_fail(BT_ERR_IO, "%s: the %s is not a regular file; expected a regular file",
                           path, what ? what : "input");
        return open_error(path, what, err);
    }
    struct stat sb;
    if (fstat(f, &sb) != 0) {
        int err = errno;
        close(f);
        return bt_fail(BT_ERR_IO, "%s: cannot stat: %s", path, strerror(err));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(f);
        return bt_fail(BT_ERR_IO, "%s: is %s; expected a regular %s file", path,
                       bt_file_type_name(sb.st_mode), what ? what : "input");
    }
    int flags = fcntl(f, F_GETFL);
    if (flags >= 0) fcntl(f, F_SETFL, flags & ~O_NONBLOCK);
    if (st) *st = sb;
    *fd = f;
    return BT_OK;
}

bt_status bt_fopen_regular(const char *path, const char *what, FILE **out) {
    *out = NULL;
    int fd;
    bt_status s = bt_open_regular(path, what, &fd, NULL);
    if (s != BT_OK) return s;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        int err = errno;
        close(fd);
        return bt_fail(BT_ERR_IO, "%s: cannot open: %s", path, strerror(err));
    }
    *out = f;
    return BT_OK;
}

bt_status bt_check_output_file(const char *path, const char *what) {
    const char *w = what ? what : "output";
    if (!path || !path[0]) return bt_fail(BT_ERR_ARG, "the %s path is empty; expected a file name", w);
    size_t n = strlen(path);
    if (path[n - 1] == '/')
        return bt_fail(BT_ERR_IO, "%s: the %s path ends with '/'; expected a file name", path, w);
    struct stat sb;
    if (stat(path, &sb) != 0) {
        int err = errno;
        if (err == ENOENT || err == ENOTDIR) {
            /* Absent (or a dangling symlink): the directory must exist. */
            const char *slash = strrchr(path, '/');
            if (slash && slash != path) {
                char *dir = strndup(path, (size_t)(slash - path));
                struct stat db;
                bt_status s = BT_OK;
                if (!dir)
                    s = bt_fail(BT_ERR_NOMEM, "out of memory");
                else if (stat(dir, &db) != 0)
                    s = bt_fail(BT_ERR_IO, "%s: cannot write the %s: the directory %s does not "
                                "exist", path, w, dir);
                else if (!S_ISDIR(db.st_mode))
                    s = bt_fail(BT_ERR_IO, "%s: cannot write the %s: %s is %s, not a directory",
                                path, w, dir, bt_file_type_name(db.st_mode));
                free(dir);
                return s;
            }
            return BT_OK;
        }
        if (err == ELOOP)
            return bt_fail(BT_ERR_IO, "%s: cannot write the %s: too many levels of symbolic "
                           "links (a symlink loop?)", path, w);
        return bt_fail(BT_ERR_IO, "%s: cannot write the %s: %s", path, w, strerror(err));
    }
    if (!S_ISREG(sb.st_mode))
        return bt_fail(BT_ERR_IO, "%s: exists and is %s; refusing to replace it with the %s "
                       "(expected a regular file or a new name)",
                       path, bt_file_type_name(sb.st_mode), w);
    return BT_OK;
}

void bt_std_fds_guard(void) {
    for (int fd = 0; fd <= 2; fd++) {
        if (fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
        /* the lowest free descriptor: fd itself, as the ones below it are open by now */
        const int got = open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
        if (got >= 0 && got != fd) {
            dup2(got, fd);
            close(got);
        }
    }
}

bt_status bt_check_output_dir(const char *dir, const char *what, int create) {
    const char *w = what ? what : "output directory";
    if (!dir || !dir[0]) return bt_fail(BT_ERR_ARG, "the %s path is empty; expected a directory", w);
    struct stat sb;
    if (stat(dir, &sb) == 0) {
        if (S_ISDIR(sb.st_mode)) return BT_OK;
        return bt_fail(BT_ERR_IO, "%s: exists and is %s; expected a directory for the %s", dir,
                       bt_file_type_name(sb.st_mode), w);
    }
    int err = errno;
    if ((err == ENOENT || err == ENOTDIR) && create) return bt_make_dirs(dir, w);
    if (err == ELOOP)
        return bt_fail(BT_ERR_IO, "%s: too many levels of symbolic links (a symlink loop?)", dir);
    return bt_fail(BT_ERR_IO, "%s: %s: %s", dir, w, strerror(err));
}

/* mkdir of one component; BT_OK when it is (now) a directory. */
static bt_status make_one_dir(const char *p, const char *dir, const char *w) {
    struct stat sb;
    if (mkdir(p, 0777) != 0 && errno != EEXIST) {
        int err = errno;
        if (stat(p, &sb) == 0 && S_ISDIR(sb.st_mode)) return BT_OK; /* e.g. EACCES on "/" */
        return bt_fail(BT_ERR_IO, "%s: cannot create the %s: mkdir %s: %s", dir, w, p,
                       strerror(err));
    }
    if (stat(p, &sb) != 0)
        return bt_fail(BT_ERR_IO, "%s: cannot create the %s: %s: %s", dir, w, p, strerror(errno));
    if (!S_ISDIR(sb.st_mode))
        return bt_fail(BT_ERR_IO, "%s: cannot create the %s: %s exists and is %s, not a "
                       "directory", dir, w, p, bt_file_type_name(sb.st_mode));
    return BT_OK;
}

bt_status bt_make_dirs(const char *dir, const char *what) {
    const char *w = what ? what : "output directory";
    if (!dir || !dir[0]) return bt_fail(BT_ERR_ARG, "the %s path is empty; expected a directory", w);
    struct stat sb;
    if (stat(dir, &sb) == 0 && S_ISDIR(sb.st_mode)) return BT_OK;
    char *p = strdup(dir);
    if (!p) return bt_fail(BT_ERR_NOMEM, "%s: out of memory", dir);
    size_t n = strlen(p);
    while (n > 1 && p[n - 1] == '/') p[--n] = '\0';
    bt_status s = BT_OK;
    /* Each prefix ending before a '/', then the whole path; repeated slashes are skipped. */
    for (char *q = p + 1; *q && s == BT_OK; q++) {
        if (*q != '/' || q[-1] == '/') continue;
        *q = '\0';
        s = make_one_dir(p, dir, w);
        *q = '/';
    }
    if (s == BT_OK) s = make_one_dir(p, dir, w);
    free(p);
    return s;
}

bt_status bt_prepare_output_file(const char *path, const char *what) {
    bt_status s = bt_check_output_file(path, what); /* empty, trailing '/', special file */
    if (s == BT_OK || !path || !path[0] || path[strlen(path) - 1] == '/') return s;
    const char *slash = strrchr(path, '/');
    if (!slash || slash == path) return s;
    char *dir = strndup(path, (size_t)(slash - path));
    if (!dir) return bt_fail(BT_ERR_NOMEM, "%s: out of memory", path);
    struct stat sb;
    int absent = stat(dir, &sb) != 0 && (errno == ENOENT || errno == ENOTDIR);
    char w[160];
    snprintf(w, sizeof w, "directory of the %s", what ? what : "output");
    bt_status d = absent ? bt_make_dirs(dir, w) : s;
    free(dir);
    if (!absent) return s; /* the first check's message stands */
    if (d != BT_OK) return d;
    return bt_check_output_file(path, what);
}

/* Splits path into a malloc'd directory ("." for a bare name) and a pointer to the name. */
static char *dir_of(const char *path, const char **base) {
    const char *slash = strrchr(path, '/');
    *base = slash ? slash + 1 : path;
    if (!slash) return strdup(".");
    if (slash == path) return strdup("/");
    return strndup(path, (size_t)(slash - path));
}

int bt_sync_dir_of(const char *path, int is_dir) {
    const char *base;
    char *dir = is_dir ? strdup(path) : dir_of(path, &base);
    if (!dir) return ENOMEM;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int err = 0;
    if (fd < 0) {
        err = errno;
    } else {
        if (fsync(fd) != 0) err = errno;
        close(fd);
    }
    free(dir);
    return err;
}

/* A pid that no longer exists (kill(pid, 0) says ESRCH). A pid of another user (EPERM)
 * counts as alive. */
static int pid_dead(long pid) {
    if (pid <= 0) return 0;
    return kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

/* Parses "<digits>" (whole string) at s; the number, or -1. */
static long parse_digits(const char *s, const char **end_out) {
    if (*s < '0' || *s > '9') return -1;
    char *end;
    long v = strtol(s, &end, 10);
    *end_out = end;
    return v;
}

/* This host's name with '.' and '/' replaced by '_' (it is one field of temp names), or
 * "host" when unknown. */
static char host_tag_buf[72];

static void host_tag_init(void) {
    char h[256] = "";
    if (gethostname(h, sizeof h - 1) != 0 || !h[0]) snprintf(h, sizeof h, "host");
    snprintf(host_tag_buf, sizeof host_tag_buf, "%s", h);
    for (char *c = host_tag_buf; *c; c++)
        if (*c == '.' || *c == '/') *c = '_';
}

const char *bt_temp_host_tag(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, host_tag_init);
    return host_tag_buf;
}

/* The pid of a temp file name of ours, or -1: ".<target>.bt-tmp.<host>.<pid>.<n>" with this
 * host; "<target>.tmp.<pid>" and "<target>.new.<pid>" (earlier bt versions) when <target>
 * exists in the same directory (so an unrelated "notes.tmp.3" is never touched). */
static long temp_owner_pid(int dirfd, const char *n) {
    const char *at = strstr(n, ".bt-tmp.");
    if (n[0] == '.' && at) {
        const char *host = bt_temp_host_tag(), *p = at + 8, *end;
        size_t hl = strlen(host);
        if (strncmp(p, host, hl) != 0 || p[hl] != '.') return -1;
        long pid = parse_digits(p + hl + 1, &end);
        if (pid < 0 || *end != '.') return -1;
        (void)parse_digits(end + 1, &end);
        return *end ? -1 : pid;
    }
    const char *dot = strrchr(n, '.');
    if (!dot || dot == n) return -1;
    const char *end;
    long pid = parse_digits(dot + 1, &end);
    if (pid < 0 || *end) return -1;
    size_t tl = (size_t)(dot - n);
    int legacy = (tl > 4 && strncmp(dot - 4, ".tmp", 4) == 0) ||
                 (tl > 4 && strncmp(dot - 4, ".new", 4) == 0);
    if (!legacy) return -1;
    char target[NAME_MAX + 1];
    if (tl - 4 > NAME_MAX) return -1;
    memcpy(target, n, tl - 4);
    target[tl - 4] = '\0';
    struct stat sb;
    return fstatat(dirfd, target, &sb, 0) == 0 && S_ISREG(sb.st_mode) ? pid : -1;
}

/* Removes the temp files of dead processes of this host in dir, once per directory per
 * process (a directory of 100k images is scanned once, not once per image). */
static void remove_stale_temps(const char *dir) {
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    enum { SEEN_MAX = 256 };
    static struct { dev_t dev; ino_t ino; } seen[SEEN_MAX];
    static int n_seen;
    struct stat ds;
    if (stat(dir, &ds) != 0) return;
    pthread_mutex_lock(&mu);
    int done = 0;
    for (int i = 0; i < n_seen && !done; i++)
        done = seen[i].dev == ds.st_dev && seen[i].ino == ds.st_ino;
    if (!done) {
        if (n_seen == SEEN_MAX) n_seen = 0; /* forget all: a rescan is only slower */
        seen[n_seen].dev = ds.st_dev;
        seen[n_seen].ino = ds.st_ino;
        n_seen++;
    }
    pthread_mutex_unlock(&mu);
    if (done) return;
    DIR *d = opendir(dir);
    if (!d) return;
    int dfd = dirfd(d);
    struct dirent *e;
    while ((e = readdir(d))) {
        long pid = temp_owner_pid(dfd, e->d_name);
        if (pid < 0 || !pid_dead(pid)) continue;
        struct stat sb;
        if (fstatat(dfd, e->d_name, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(sb.st_mode))
            unlinkat(dfd, e->d_name, 0);
    }
    closedir(d);
}

static atomic_uint tmp_counter;

bt_status bt_atomic_open(bt_atomic_file *af, const char *path, const char *what) {
    memset(af, 0, sizeof *af);
    bt_status s = bt_prepare_output_file(path, what);
    if (s != BT_OK) return s;
    const char *base;
    char *dir = dir_of(path, &base);
    size_t cap = strlen(path) + 160;
    af->path = strdup(path);
    af->tmp = malloc(cap);
    if (!dir || !af->path || !af->tmp) {
        free(dir);
        bt_atomic_abort(af);
        return bt_fail(BT_ERR_NOMEM, "%s: out of memory", path);
    }
    remove_stale_temps(dir);
    unsigned n = atomic_fetch_add(&tmp_counter, 1);
    snprintf(af->tmp, cap, "%s/.%s.bt-tmp.%s.%ld.%u", dir, base, bt_temp_host_tag(), (long)getpid(), n);
    free(dir);
    int fd = open(af->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0) {
        s = bt_fail(BT_ERR_IO, "%s: cannot create the temporary file %s: %s", path, af->tmp,
                    strerror(errno));
        free(af->tmp);
        af->tmp = NULL;
        bt_atomic_abort(af);
        return s;
    }
    af->fp = fdopen(fd, "wb");
    if (!af->fp) {
        s = bt_fail(BT_ERR_IO, "%s: cannot open the temporary file %s: %s", path, af->tmp,
                    strerror(errno));
        close(fd);
        bt_atomic_abort(af);
        return s;
    }
    return BT_OK;
}

void bt_atomic_abort(bt_atomic_file *af) {
    if (!af) return;
    if (af->fp) fclose(af->fp);
    if (af->tmp) unlink(af->tmp);
    free(af->tmp);
    free(af->path);
    memset(af, 0, sizeof *af);
}

bt_status bt_atomic_close(bt_atomic_file *af) {
    BT_ASSERT(af && af->tmp && af->path);
    if (!af->fp) return BT_OK;
    int err = 0;
    if (fflush(af->fp) != 0) err = errno ? errno : EIO;
    if (!err && ferror(af->fp)) err = EIO;
    if (!err && fsync(fileno(af->fp)) != 0) err = errno;
    if (fclose(af->fp) != 0 && !err) err = errno ? errno : EIO;
    af->fp = NULL;
    if (!err) return BT_OK;
    bt_status s = bt_fail(BT_ERR_IO, "%s: writing the temporary file %s failed: %s; the "
                          "previous file (if any) is unchanged", af->path, af->tmp,
                          strerror(err));
    bt_atomic_abort(af);
    return s;
}

bt_status bt_atomic_commit(bt_atomic_file *af) {
    BT_ASSERT(af && af->tmp && af->path);
    bt_status s = bt_atomic_close(af);
    if (s != BT_OK) return s;
    int err;
    if ((s = bt_check_output_file(af->path, NULL)) != BT_OK) {
        /* The target changed type while we wrote (re-checked right before the rename). */
    } else if (rename(af->tmp, af->path) != 0) {
        s = bt_fail(BT_ERR_IO, "%s: cannot rename the temporary file %s over it: %s; the "
                    "previous file (if any) is unchanged", af->path, af->tmp, strerror(errno));
    } else {
        free(af->tmp);
        af->tmp = NULL; /* renamed: nothing to remove */
        if ((err = bt_sync_dir_of(af->path, 0)) != 0)
            s = bt_fail(BT_ERR_IO, "%s: written, but syncing its directory failed: %s; the new "
                        "file may not survive a crash", af->path, strerror(err));
    }
    bt_atomic_abort(af);
    return s;
}

bt_status bt_write_file_atomic(const char *path, const char *what, const void *data, size_t n) {
    bt_atomic_file af;
    bt_status s = bt_atomic_open(&af, path, what);
    if (s != BT_OK) return s;
    if (n && fwrite(data, 1, n, af.fp) != n) {
        s = bt_fail(BT_ERR_IO, "%s: writing the temporary file %s failed: %s; the previous file "
                    "(if any) is unchanged", path, af.tmp, strerror(errno ? errno : EIO));
        bt_atomic_abort(&af);
        return s;
    }
    return bt_atomic_commit(&af);
}

bt_status bt_remove_owned_file(const char *path, const char *what) {
    struct stat sb;
    if (lstat(path, &sb) != 0) {
        if (errno == ENOENT) return BT_OK;
        return bt_fail(BT_ERR_IO, "%s: cannot inspect the stale %s: %s", path,
                       what ? what : "file", strerror(errno));
    }
    if (!S_ISREG(sb.st_mode) && !S_ISLNK(sb.st_mode))
        return bt_fail(BT_ERR_IO, "%s: is %s; refusing to remove it (expected the %s as a "
                       "regular file, or nothing)", path, bt_file_type_name(sb.st_mode),
                       what ? what : "file");
    if (unlink(path) != 0)
        return bt_fail(BT_ERR_IO, "%s: cannot remove the stale %s: %s", path,
                       what ? what : "file", strerror(errno));
    return BT_OK;
}
