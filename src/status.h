/* status.h: the two tiers of errors (docs/style.md 11).
 *
 * Tier 1, invariants: BT_ASSERT is always on (also in release builds) and aborts with
 * file:line. Use it for programming errors: shape preconditions, impossible states.
 *
 * Tier 2, anything a user can get wrong (files, configs, checkpoints, data): functions return
 * a bt_status and leave a human-readable message in a thread-local buffer, set by bt_fail().
 * The message names the file, the key or record, and what was expected. Only main() decides
 * to exit, and never with 0 on failure.
 *
 * Deliberately not here: logging (see src/train), recovery policies (callers decide). */
#ifndef BT_STATUS_H
#define BT_STATUS_H

#include <stddef.h>

typedef enum {
    BT_OK = 0,
    BT_ERR_IO,          /* missing, unreadable or unwritable file */
    BT_ERR_FORMAT,      /* malformed content: bad JSON, bad header, truncated data */
    BT_ERR_SHAPE,       /* a tensor or array has the wrong shape or size */
    BT_ERR_CONFIG,      /* unknown key, wrong type or out-of-range value in a config */
    BT_ERR_UNSUPPORTED, /* valid input that bt does not handle (dtype, image format, ...) */
    BT_ERR_NOMEM,       /* allocation failed */
    BT_ERR_NUMERIC,     /* NaN or Inf where a finite value is required */
    BT_ERR_ARG,         /* bad argument on a command line or API call */
    BT_ERR_MISSING,     /* a required item (tensor, key, record) is absent */
    BT_ERR_INTERRUPTED, /* stopped by a signal after saving what it had (bt-train) */
} bt_status;

/* Records a formatted message for the calling thread and returns `code`, so callers write
 * `return bt_fail(BT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));` */
bt_status bt_fail(bt_status code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prepends context to the current message ("while loading X: <previous message>"). Returns
 * `code` unchanged. */
bt_status bt_fail_context(bt_status code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* The last message recorded on this thread ("" if none). */
const char *bt_error_message(void);
void bt_error_clear(void);
/* Copies a message recorded on another thread (loader workers) into this thread's buffer. */
void bt_error_set_message(const char *msg);

/* Short upper-case name of a status ("BT_ERR_IO"). */
const char *bt_status_name(bt_status s);

/* --- Tier 1: always-on invariants -------------------------------------------------------- */

_Noreturn void bt_abort_at(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define BT_ASSERT(cond)                                                                    \
    do {                                                                                   \
        if (!(cond)) bt_abort_at(__FILE__, __LINE__, "assertion failed: %s", #cond);       \
    } while (0)

#define BT_ASSERTF(cond, ...)                                                              \
    do {                                                                                   \
        if (!(cond)) bt_abort_at(__FILE__, __LINE__, __VA_ARGS__);                         \
    } while (0)

/* Allocation that aborts with file:line on failure (for internal buffers whose size the
 * program controls). 64-byte aligned; free with bt_free. Zero-filled when zero != 0. */
void *bt_alloc_at(size_t bytes, int zero, const char *file, int line);
void bt_free(void *p);
#define bt_alloc(bytes) bt_alloc_at((bytes), 0, __FILE__, __LINE__)
#define bt_calloc(bytes) bt_alloc_at((bytes), 1, __FILE__, __LINE__)

#endif
