/* args.c: strict numeric flags; see args.h. */
#include "args.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "json_util.h"

/* The value as it may be echoed ('' quoted, escaped, cut). */
static const char *shown(char *buf, size_t cap, const char *s) {
    return bt_escape_text(buf, cap, s, strlen(s));
}

/* Digits only, after an optional '-' when signed. */
static int plain_decimal(const char *s, int allow_minus) {
    if (allow_minus && *s == '-') s++;
    if (!*s) return 0;
    for (; *s; s++)
        if (*s < '0' || *s > '9') return 0;
    return 1;
}

bt_status bt_parse_u64(const char *flag, const char *s, uint64_t lo, uint64_t hi, uint64_t *out) {
    char b[96];
    if (!s) return bt_fail(BT_ERR_ARG, "%s: needs a value; expected an integer in [%" PRIu64
                           ", %" PRIu64 "]", flag, lo, hi);
    errno = 0;
    char *end;
    unsigned long long v = plain_decimal(s, 0) ? strtoull(s, &end, 10) : 0;
    if (!plain_decimal(s, 0) || errno == ERANGE || v < lo || v > hi)
        return bt_fail(BT_ERR_ARG, "%s: expected an integer in [%" PRIu64 ", %" PRIu64
                       "], got '%s'%s", flag, lo, hi, shown(b, sizeof b, s),
                       errno == ERANGE ? " (too large)" : s[0] == '-' ? " (negative)" : "");
    *out = v;
    return BT_OK;
}

bt_status bt_parse_i64(const char *flag, const char *s, int64_t lo, int64_t hi, int64_t *out) {
    char b[96];
    if (!s) return bt_fail(BT_ERR_ARG, "%s: needs a value; expected an integer in [%" PRId64
                           ", %" PRId64 "]", flag, lo, hi);
    errno = 0;
    char *end;
    long long v = plain_decimal(s, 1) ? strtoll(s, &end, 10) : 0;
    if (!plain_decimal(s, 1) || errno == ERANGE || v < lo || v > hi)
        return bt_fail(BT_ERR_ARG, "%s: expected an integer in [%" PRId64 ", %" PRId64
                       "], got '%s'%s", flag, lo, hi, shown(b, sizeof b, s),
                       errno == ERANGE ? " (out of range)" : "");
    *out = v;
    return BT_OK;
}

bt_status bt_parse_int(const char *flag, const char *s, int lo, int hi, int *out) {
    int64_t v;
    bt_status st = bt_parse_i64(flag, s, lo, hi, &v);
    if (st == BT_OK) *out = (int)v;
    return st;
}

bt_status bt_parse_double(const char *flag, const char *s, double lo, double hi, double *out) {
    char b[96];
    if (!s) return bt_fail(BT_ERR_ARG, "%s: needs a value; expected a number in [%g, %g]",
                           flag, lo, hi);
    errno = 0;
    char *end = NULL;
    /* strtod also reads "nan", "inf" and hex floats; only decimal forms are accepted. */
    int ok = *s && (*s == '-' || *s == '+' || *s == '.' || (*s >= '0' && *s <= '9')) &&
             !strpbrk(s, "xXnNiI");
    double v = ok ? strtod(s, &end) : 0.0;
    if (!ok || *end || errno == ERANGE || !isfinite(v) || v < lo || v > hi)
        return bt_fail(BT_ERR_ARG, "%s: expected a number in [%g, %g], got '%s'", flag, lo, hi,
                       shown(b, sizeof b, s));
    *out = v;
    return BT_OK;
}
