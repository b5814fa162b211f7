/* status.c: thread-local error messages, always-on assertions, checked allocation. */
#include "status.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { BT_MSG_CAP = 2048 };
static _Thread_local char bt_msg[BT_MSG_CAP];

bt_status bt_fail(bt_status code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(bt_msg, sizeof bt_msg, fmt, ap);
    va_end(ap);
    return code;
}

bt_status bt_fail_context(bt_status code, const char *fmt, ...) {
    char prefix[BT_MSG_CAP];
    char previous[BT_MSG_CAP];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(previous, bt_msg, sizeof previous);
    /* prefix + ": " + previous, cut at the buffer's end (messages are for people). */
    size_t n = strlen(prefix);
    if (n > sizeof bt_msg - 1) n = sizeof bt_msg - 1;
    memcpy(bt_msg, prefix, n);
    size_t room = sizeof bt_msg - 1 - n;
    size_t sep = room < 2 ? room : 2;
    memcpy(bt_msg + n, ": ", sep);
    n += sep;
    room -= sep;
    size_t m = strlen(previous);
    if (m > room) m = room;
    memcpy(bt_msg + n, previous, m);
    bt_msg[n + m] = '\0';
    return code;
}

const char *bt_error_message(void) { return bt_msg; }

void bt_error_clear(void) { bt_msg[0] = '\0'; }

void bt_error_set_message(const char *msg) { snprintf(bt_msg, sizeof bt_msg, "%s", msg); }

const char *bt_status_name(bt_status s) {
    switch (s) {
    case BT_OK: return "BT_OK";
    case BT_ERR_IO: return "BT_ERR_IO";
    case BT_ERR_FORMAT: return "BT_ERR_FORMAT";
    case BT_ERR_SHAPE: return "BT_ERR_SHAPE";
    case BT_ERR_CONFIG: return "BT_ERR_CONFIG";
    case BT_ERR_UNSUPPORTED: return "BT_ERR_UNSUPPORTED";
    case BT_ERR_NOMEM: return "BT_ERR_NOMEM";
    case BT_ERR_NUMERIC: return "BT_ERR_NUMERIC";
    case BT_ERR_ARG: return "BT_ERR_ARG";
    case BT_ERR_MISSING: return "BT_ERR_MISSING";
    case BT_ERR_INTERRUPTED: return "BT_ERR_INTERRUPTED";
    }
    return "BT_ERR_?";
}

void bt_abort_at(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "bt: internal error at %s:%d: ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    abort();
}

void *bt_alloc_at(size_t bytes, int zero, const char *file, int line) {
    size_t rounded = (bytes + 63) & ~(size_t)63;
    if (rounded == 0) rounded = 64;
    void *p = aligned_alloc(64, rounded);
    if (!p) bt_abort_at(file, line, "out of memory allocating %zu bytes", bytes);
    if (zero) memset(p, 0, rounded);
    return p;
}

void bt_free(void *p) { free(p); }
