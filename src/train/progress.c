/* progress.c: live status line and permanent lines (see progress.h). */
#include "train/progress.h"

#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "settings.h"

enum { PROGRESS_DEFAULT_COLUMNS = 100, PROGRESS_MIN_COLUMNS = 20 };

static int terminal_columns(FILE *out) {
    struct winsize ws;
    if (ioctl(fileno(out), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
    const char *env = bt_setting_value(BT_SET_COLUMNS);
    int c = env ? atoi(env) : 0;
    return c > 0 ? c : PROGRESS_DEFAULT_COLUMNS;
}

void bt_progress_init(bt_progress *p, FILE *out, bt_progress_mode mode, int columns) {
    memset(p, 0, sizeof *p);
    p->out = out;
    if (mode == BT_PROGRESS_AUTO) {
        const char *term = bt_setting_value(BT_SET_TERM);
        p->live = isatty(fileno(out)) && !(term && strcmp(term, "dumb") == 0);
    } else {
        p->live = mode == BT_PROGRESS_LIVE;
    }
    p->columns = columns > 0 ? columns : terminal_columns(out);
    if (p->columns < PROGRESS_MIN_COLUMNS) p->columns = PROGRESS_MIN_COLUMNS;
}

static void draw(bt_progress *p) {
    fprintf(p->out, "\r%s\033[K", p->line);
    fflush(p->out);
    p->shown = 1;
}

static void erase(bt_progress *p) {
    if (!p->shown) return;
    fputs("\r\033[K", p->out);
    fflush(p->out);
    p->shown = 0;
}

void bt_progress_set(bt_progress *p, const char *text) {
    size_t cap = (size_t)p->columns - 1;
    if (cap > sizeof p->line - 1) cap = sizeof p->line - 1;
    size_t n = 0;
    /* Control characters would move the cursor and break the redraw: shown as '?'. */
    for (; text[n] && n < cap; n++)
        p->line[n] = (unsigned char)text[n] < 0x20 ? '?' : text[n];
    p->line[n] = 0;
    if (p->live) draw(p);
}

/* Writes the formatted text as whole lines: embedded newlines are kept, a final one added. */
static void put_lines(FILE *stream, const char *fmt, va_list ap) {
    char buf[4096];
    vsnprintf(buf, sizeof buf, fmt, ap);
    size_t n = strlen(buf);
    while (n && buf[n - 1] == '\n')
        buf[--n] = 0;
    fputs(buf, stream);
    fputc('\n', stream);
    fflush(stream);
}

void bt_progress_vprint_to(bt_progress *p, FILE *stream, const char *fmt, va_list ap) {
    int had = p->live && p->shown;
    if (had) erase(p);
    put_lines(stream, fmt, ap);
    if (had) draw(p);
}

void bt_progress_vprint(bt_progress *p, const char *fmt, va_list ap) {
    bt_progress_vprint_to(p, p->out, fmt, ap);
}

void bt_progress_print(bt_progress *p, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    bt_progress_vprint_to(p, p->out, fmt, ap);
    va_end(ap);
}

void bt_progress_print_to(bt_progress *p, FILE *stream, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    bt_progress_vprint_to(p, stream, fmt, ap);
    va_end(ap);
}

void bt_progress_end(bt_progress *p) {
    if (p->live) erase(p);
}
