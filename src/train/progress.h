/* progress.h: the terminal side of the training log: one live status line redrawn in place
 * on a terminal, and permanent lines (logged steps, evaluations, checkpoints, warnings)
 * printed above it without corrupting it.
 *
 * Live mode (a terminal): the status line is drawn as "\r" + text + "\033[K" (erase to the
 * end of the line) and never ends with a newline; it is cut to columns - 1 bytes so the
 * terminal never wraps it (a wrapped line cannot be redrawn with "\r"). A permanent line
 * first erases the status line ("\r\033[K"), prints itself and "\n", then redraws the status
 * line. Messages for another stream (warnings on stderr while the status line is on stdout)
 * go through the same dance: the status stream is erased and flushed before the message is
 * written, and redrawn after.
 * Plain mode (a file or a pipe): the status line is never printed; permanent lines are
 * printed as they come. Nothing but printable text and "\n" reaches a log file.
 *
 * Deliberately not here: what the lines say (log.c formats them), colors, multi-line
 * dashboards, catching output that other code writes straight to the terminal (route it
 * through bt_progress_print or bt_log_message instead). Not thread-safe: one thread logs. */
#ifndef BT_TRAIN_PROGRESS_H
#define BT_TRAIN_PROGRESS_H

#include <stdarg.h>
#include <stdio.h>

typedef enum {
    BT_PROGRESS_AUTO = 0, /* live when isatty(fileno(out)) and $TERM is not "dumb" */
    BT_PROGRESS_LIVE,
    BT_PROGRESS_PLAIN,
} bt_progress_mode;

enum { BT_PROGRESS_LINE_MAX = 1024 };

typedef struct bt_progress {
    FILE *out;   /* status line and permanent lines */
    int live;    /* 1: live mode */
    int columns; /* terminal width; the status line holds at most columns - 1 bytes */
    int shown;   /* the status line is on the screen */
    char line[BT_PROGRESS_LINE_MAX]; /* the current status line (already cut) */
} bt_progress;

/* columns <= 0: the terminal's width (TIOCGWINSZ on out, else $COLUMNS, else 100). */
void bt_progress_init(bt_progress *p, FILE *out, bt_progress_mode mode, int columns);

/* Sets the status line and redraws it (live mode); plain mode only remembers it. */
void bt_progress_set(bt_progress *p, const char *text);

/* A permanent line on p->out (printf-style; no trailing newline needed). */
void bt_progress_print(bt_progress *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void bt_progress_vprint(bt_progress *p, const char *fmt, va_list ap);

/* A permanent line on another stream (stderr), keeping the status line intact. */
void bt_progress_print_to(bt_progress *p, FILE *stream, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void bt_progress_vprint_to(bt_progress *p, FILE *stream, const char *fmt, va_list ap);

/* Erases the status line (live mode) so that the terminal is left clean. */
void bt_progress_end(bt_progress *p);

#endif
