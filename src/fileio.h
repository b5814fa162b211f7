/* fileio.h: the two ways bt touches the file system for user-named paths (docs/guarantees.md).
 *
 * Reading: bt_open_regular / bt_fopen_regular open an input only if it is a regular file.
 * The open is non-blocking (O_NONBLOCK, then fstat, then the flag is cleared), so a FIFO
 * with no writer, a terminal or a device is refused with a message instead of hanging.
 * Every loader (configs, tokenizer files, manifests, images, safetensors) opens through it.
 *
 * Writing: bt_atomic_* write a file under a temporary name in the target's directory,
 * ".<name>.bt-tmp.<host>.<pid>.<n>", fsync it, rename it over the target and fsync the
 * directory:
 * a crash never leaves a half-written file under the final name and never loses the
 * previous file. Before anything is written, an existing target that is not a regular file
 * (a device such as /dev/null, a FIFO, a socket, a directory) is refused: bt never replaces
 * what is not its own. A symlink to a regular file is replaced by a regular file (the file
 * it pointed to is left alone). Temp files left in a directory by a process of this host
 * that no longer exists (a save killed with SIGKILL) are removed by the first save into that
 * directory (once per directory per process: a directory of 100k images is scanned once),
 * as are those of earlier bt versions ("<name>.tmp.<pid>", "<name>.new.<pid>", only when
 * <name> exists beside them). Temp files of other hosts (a shared file system) are left
 * alone: their pids mean nothing here. Missing parent directories of an output are created
 * (bt_make_dirs, mkdir -p); a component that exists and is not a directory is an error.
 *
 * Deliberately not here: locking against two processes saving the same path at once (the
 * last rename wins, each file whole), and the time-of-check-to-time-of-use gap between the
 * type check and the rename (a target replaced by a device in that window is replaced). */
#ifndef BT_FILEIO_H
#define BT_FILEIO_H

#include <stdio.h>
#include <sys/stat.h>

#include "status.h"

/* Opens path read-only if it is a regular file. `what` names its role in messages ("model
 * config" gives "PATH: cannot open model config: No such file or directory"; "PATH: model
 * config is a FIFO; expected a regular file"). *fd is -1 on error; st (may be NULL) gets
 * the file's stat. Errors: BT_ERR_IO (missing, unreadable, a symlink loop, not a regular
 * file). */
bt_status bt_open_regular(const char *path, const char *what, int *fd, struct stat *st);
/* The same, as a stdio stream ("rb"). */
bt_status bt_fopen_regular(const char *path, const char *what, FILE **f);

/* "a directory", "a FIFO", "a character device", ... for messages. */
const char *bt_file_type_name(mode_t mode);

/* Checks that path may be used as an output file: not empty, and either absent or (after
 * symlinks) a regular file. Errors (BT_ERR_IO, naming path and `what`) otherwise. Writers
 * call it through bt_atomic_open; CLIs may call it early, before hours of work. */
bt_status bt_check_output_file(const char *path, const char *what);

/* Every CLI's first call: a standard descriptor (0, 1, 2) that the caller closed
 * (`bt-train ... >&-`) is opened on /dev/null, so that no file the program opens later gets
 * fd 1 or 2 and receives its terminal text (metrics.jsonl filled with progress lines). */
void bt_std_fds_guard(void);

/* Checks that dir may be used as an output directory: absent (created with its missing
 * parents, bt_make_dirs, when create != 0) or a directory. Errors: BT_ERR_IO. */
bt_status bt_check_output_dir(const char *dir, const char *what, int create);

/* mkdir -p: creates dir and every missing parent (mode 0777 & ~umask, as mkdir(1)). Each
 * component that exists must be a directory (after symlinks); one that is a file, a device
 * or a FIFO is an error naming it, and nothing below it is created. BT_OK when dir already
 * is a directory. Errors: BT_ERR_ARG (empty), BT_ERR_IO (naming dir, the component and
 * `what`). Every output path a command takes goes through it (HF's Trainer makes its
 * output_dir the same way, os.makedirs(exist_ok=True)). */
bt_status bt_make_dirs(const char *dir, const char *what);

/* For an output file a command is about to write: creates the missing parent directories
 * of path (bt_make_dirs), then bt_check_output_file. bt_atomic_open calls it, so every
 * atomic writer creates its directory; CLIs call it early, before hours of work. */
bt_status bt_prepare_output_file(const char *path, const char *what);

typedef struct bt_atomic_file {
    char *path; /* final name */
    char *tmp;  /* temporary name in the same directory */
    FILE *fp;   /* write here */
} bt_atomic_file;

/* Prepares the target (bt_prepare_output_file: missing parent directories are created, an
 * existing special file refused), removes stale temp files of it, and creates a
 * new temp file (O_EXCL, mode 0666 & ~umask). On error *af is zeroed. */
bt_status bt_atomic_open(bt_atomic_file *af, const char *path, const char *what);
/* fflush + fsync + close of the temp file, without renaming (for saves of several files
 * that rename only once all are written). On failure the temp file is removed and *af
 * released. */
bt_status bt_atomic_close(bt_atomic_file *af);
/* bt_atomic_close (when not done yet), checks the target again, renames over it, fsyncs the directory.
 * Any failure removes the temp file and leaves the previous file unchanged (the message
 * says so). *af is released either way. */
bt_status bt_atomic_commit(bt_atomic_file *af);
/* Closes and removes the temp file (safe on a zeroed or released struct). */
void bt_atomic_abort(bt_atomic_file *af);
/* Writes n bytes atomically (open + fwrite + commit). */
bt_status bt_write_file_atomic(const char *path, const char *what, const void *data, size_t n);

/* Removes path if it exists and is a regular file or a symlink (used for files a directory
 * format owns but a save does not write, e.g. an old tokenizer.json). BT_OK when absent;
 * BT_ERR_IO when it is something else or cannot be removed. */
bt_status bt_remove_owned_file(const char *path, const char *what);

/* This host's name as the temp names carry it ('.' and '/' as '_'). */
const char *bt_temp_host_tag(void);

/* fsync of the directory holding path (or of path itself when is_dir != 0). 0 or errno. */
int bt_sync_dir_of(const char *path, int is_dir);

#endif
