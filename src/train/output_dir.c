/* train/output_dir.c: output.dir's contract and lock (output_dir.h).
 *
 * Directories are compared by identity (st_dev, st_ino), so "out", "./out", "out/" and a
 * symlink to it are the same directory, and "." is refused when it is the model's or the data's
 * directory. */
#include "train/output_dir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The directory holding `path`: path itself when it is a directory, else its parent. */
static void dir_holding(const char *path, char *dir, size_t cap) {
    struct stat st;
    snprintf(dir, cap, "%s", path);
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) return;
    char *slash = strrchr(dir, '/');
    if (!slash) snprintf(dir, cap, ".");
    else if (slash == dir) dir[1] = '\0';
    else *slash = '\0';
}

static int same_dir(const struct stat *a, const char *path) {
    struct stat b;
    return stat(path, &b) == 0 && S_ISDIR(b.st_mode) && a->st_dev == b.st_dev &&
           a->st_ino == b.st_ino;
}

static int is_checkpoint_name(const char *name) {
    const char *p = NULL;
    if (!strncmp(name, "checkpoint-", 11)) p = name + 11;
    else if (!strncmp(name, "tmp-checkpoint-", 15)) return 1;
    if (!p || !*p) return 0;
    for (; *p; p++)
        if (*p < '0' || *p > '9') return 0;
    return 1;
}

int bt_output_dir_has_run(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int found = 0;
    for (struct dirent *e; !found && (e = readdir(d));) {
        const char *n = e->d_name;
        found = !strcmp(n, BT_OUTPUT_LOCK_NAME) || !strcmp(n, "metrics.jsonl") ||
                !strcmp(n, "summary.json") || is_checkpoint_name(n);
    }
    closedir(d);
    return found;
}

bt_status bt_output_dir_check(const bt_run_config *rc) {
    const char *out = rc->output.dir;
    if (!out || !out[0]) return bt_fail(BT_ERR_CONFIG, "output.dir is required");
    struct stat os;
    if (stat(out, &os) != 0 || !S_ISDIR(os.st_mode)) return BT_OK; /* new: nothing to lose */
    if (same_dir(&os, "/"))
        return bt_fail(BT_ERR_CONFIG, "output.dir \"%s\" is the root directory; bt-train writes "
                       "checkpoints, logs and a model there: choose a directory of its own", out);
    /* the inputs' directories: never written into, output.overwrite or not */
    struct {
        const char *key, *path;
    } inputs[] = {{"model.path", rc->model.path}, {"model.config", rc->model.config},
                  {"data.train", rc->data.train}, {"data.validation", rc->data.validation},
                  {"data.test", rc->data.test}};
    for (size_t i = 0; i < sizeof inputs / sizeof *inputs; i++) {
        if (!inputs[i].path) continue;
        char dir[4096];
        dir_holding(inputs[i].path, dir, sizeof dir);
        if (same_dir(&os, dir))
            return bt_fail(BT_ERR_CONFIG, "output.dir \"%s\" is the directory of %s (\"%s\"); "
                           "bt-train would write its model, checkpoints and logs over the %s "
                           "there (output.overwrite does not change this): choose another "
                           "output.dir", out, inputs[i].key, inputs[i].path,
                           !strncmp(inputs[i].key, "model", 5) ? "starting model's files"
                                                                 : "data set's files");
    }
    if (rc->output.overwrite || bt_output_dir_has_run(out)) return BT_OK;
    DIR *d = opendir(out);
    if (!d) return BT_OK; /* unreadable: creating files there fails later with the reason */
    /* the run's own stdout / stderr (`bt-train ... > out/train.log`) are not someone else's */
    struct stat std[2];
    const int have_std[2] = {fstat(1, &std[0]) == 0, fstat(2, &std[1]) == 0};
    size_t n = 0;
    char first[256] = "";
    for (struct dirent *e; (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        struct stat es;
        char p[4400];
        snprintf(p, sizeof p, "%s/%s", out, e->d_name);
        int own = 0;
        if (lstat(p, &es) == 0)
            for (int k = 0; k < 2; k++)
                own |= have_std[k] && S_ISREG(es.st_mode) && es.st_dev == std[k].st_dev &&
                       es.st_ino == std[k].st_ino;
        if (own) continue;
        if (!n++) snprintf(first, sizeof first, "%s", e->d_name);
    }
    closedir(d);
    if (!n) return BT_OK;
    return bt_fail(BT_ERR_CONFIG, "output.dir \"%s\" already exists and is not empty (%zu "
                   "%s, e.g. \"%s\") but holds no bt-train run (no checkpoint-<N>, "
                   "metrics.jsonl or " BT_OUTPUT_LOCK_NAME "); set output.overwrite=true to "
                   "write into it anyway (HF's --overwrite_output_dir), or choose a new or "
                   "empty directory", out, n, n == 1 ? "entry" : "entries", first);
}

bt_status bt_output_lock_take(bt_output_lock *l, const char *dir, FILE *warn) {
    l->fd = -1;
    char path[4200];
    snprintf(path, sizeof path, "%s/" BT_OUTPUT_LOCK_NAME, dir);
    const int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) {
        const int err = errno;
        return bt_fail(BT_ERR_IO, "%s: cannot create the run's lock file: %s", path,
                       strerror(err));
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        const int err = errno;
        if (err == EWOULDBLOCK) {
            char holder[512] = "";
            const ssize_t got = pread(fd, holder, sizeof holder - 1, 0);
            holder[got > 0 ? got : 0] = '\0';
            holder[strcspn(holder, "\n")] = '\0';
            close(fd);
            return bt_fail(BT_ERR_CONFIG, "output.dir \"%s\" is in use by another bt-train run "
                           "(%s: %s); two runs in one directory would overwrite each other's "
                           "checkpoints and logs: wait for it to end or choose another "
                           "output.dir", dir, path, holder[0] ? holder : "holder unknown");
        }
        if (warn)
            fprintf(warn, "bt-train: warning: %s: cannot lock (%s); nothing stops a second run "
                          "from using this output.dir at the same time\n", path, strerror(err));
        close(fd);
        return BT_OK;
    }
    char host[256] = "";
    if (gethostname(host, sizeof host - 1) != 0 || !host[0]) snprintf(host, sizeof host, "?");
    char when[64] = "";
    const time_t now = time(NULL);
    struct tm tm;
    if (gmtime_r(&now, &tm)) strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    char text[512];
    const int len = snprintf(text, sizeof text, "pid %ld on host %s since %s\n", (long)getpid(),
                             host, when);
    /* the text is informative only: the flock is the lock, so a failed write is no error */
    if (ftruncate(fd, 0) == 0 && pwrite(fd, text, (size_t)len, 0) < 0) {
    }
    l->fd = fd;
    return BT_OK;
}

void bt_output_lock_release(bt_output_lock *l) {
    if (l->fd >= 0) close(l->fd); /* closing drops the flock */
    l->fd = -1;
}
