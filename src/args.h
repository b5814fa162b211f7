/* args.h: the one strict parser of numeric command-line flags, used by every CLI
 * (bt-forward, bt-checkpoint, bt-data, bt-train).
 *
 * Accepted: the whole string is a decimal number (integers: optional '-' for signed
 * types only, digits; doubles: what strtod reads, finite) inside [lo, hi]. Refused, with a
 * message naming the flag, the value (escaped) and the range: empty strings, leading or
 * trailing spaces or text ("12abc"), a sign on an unsigned flag ("--seed -1"), hex/octal
 * prefixes, values that overflow ("--seed 99999999999999999999999") or fall outside the
 * range, NaN and Inf.
 *
 * Deliberately not here: flag names and their meaning (each CLI's own table). */
#ifndef BT_ARGS_H
#define BT_ARGS_H

#include <stdint.h>

#include "status.h"

/* Each returns BT_OK and sets *out, or BT_ERR_ARG with "--flag: expected an integer in
 * [lo, hi], got 'VALUE'" (*out untouched). `flag` is printed as given ("--seed"). */
bt_status bt_parse_u64(const char *flag, const char *s, uint64_t lo, uint64_t hi, uint64_t *out);
bt_status bt_parse_i64(const char *flag, const char *s, int64_t lo, int64_t hi, int64_t *out);
bt_status bt_parse_int(const char *flag, const char *s, int lo, int hi, int *out);
bt_status bt_parse_double(const char *flag, const char *s, double lo, double hi, double *out);

#endif
