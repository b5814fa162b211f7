/* json_util.h: small JSON helpers shared by the loaders (model config, checkpoint
 * directories, image preprocessing config, tokenizer files, bt-data).
 *
 * - bt_json_read_text: a JSON file as one NUL-terminated string, with the messages every
 *   loader gives (cannot open, read error, a NUL byte inside).
 * - bt_json_type_name: "a number", "an array", ... for "expected X, got Y" messages.
 * - bt_json_parse / bt_json_check / bt_json_load: the one JSON rule of bt (Python's meaning
 *   or refusal: no \u0000 in strings, no duplicate keys, UTF-8, nothing after the value).
 * - bt_escape_text: untrusted text made safe to echo in a message.
 *
 * Deliberately not here: parsing (cJSON does it), schema checks (each loader owns its keys
 * and their messages), size limits (callers that need one, e.g. the tokenizer, read with
 * their own). */
#ifndef BT_JSON_UTIL_H
#define BT_JSON_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

struct cJSON;

/* Reads the whole file at path into *text (malloc'd, NUL-terminated; the caller frees it).
 * `what` names the file's role in the cannot-open message ("model config" gives "PATH:
 * cannot open model config: REASON"; NULL gives "PATH: cannot open: REASON").
 * Errors: BT_ERR_IO (cannot open, read error), BT_ERR_NOMEM, BT_ERR_FORMAT (the file holds a
 * NUL byte, so it is not a JSON text). *text is NULL on error. */
bt_status bt_json_read_text(const char *path, const char *what, char **text);

/* The type of a JSON value with its article ("a boolean", "an object", "null"); "nothing"
 * for NULL (an absent key). */
const char *bt_json_type_name(const struct cJSON *j);

/* --- JSON that means what Python means (docs/guarantees.md, "JSON") --------------------
 *
 * One rule for every JSON bt reads (model and preprocessor configs, tokenizer files,
 * manifests, safetensors headers, training configs): a text is accepted only when Python's
 * json module would read the same values from it; otherwise it is refused. cJSON alone
 * differs from Python in five ways, all refused here:
 *   - a string (key or value) holding the escape \u0000: cJSON's C string would end there
 *     ("cap\u0000tion" would read as "cap");
 *   - an object with the same key twice: Python keeps the LAST value, cJSON finds the
 *     first. bt refuses (rather than picking one) so that no file means two things;
 *   - a raw control character (below 0x20) inside a string, which Python's strict
 *     json.loads refuses too, and bytes that are not UTF-8;
 *   - anything but whitespace after the value (cJSON_Parse ignores trailing text);
 *   - a number outside JSON's grammar that cJSON's strtod reads anyway: a leading zero
 *     ("01", "08"), no digit after the point ("1."), an empty exponent ("1e").
 * Messages name the source, the key path in JSONPath style ($.vision_config.hidden_size,
 * $.model.merges[3]) and what was expected. */

/* Parses text[0..len) (need not be NUL-terminated) and applies the checks above. `source`
 * names the text in messages: a path ("model/config.json") or a record ("train.jsonl:12").
 * On success *out is the tree (free with cJSON_Delete); on error *out is NULL and the status
 * is BT_ERR_FORMAT ("<source>: not valid JSON at byte N (line L): ..." or "<source>: key
 * \"k\" appears twice in $.a; ..."), or BT_ERR_NOMEM. */
bt_status bt_json_parse(const char *text, size_t len, const char *source, struct cJSON **out);

/* The checks of bt_json_parse on a tree a caller parsed itself from text[0..len) (for
 * loaders that keep their own parse-error messages). BT_OK or BT_ERR_FORMAT. */
bt_status bt_json_check(const struct cJSON *root, const char *text, size_t len,
                        const char *source);

/* Reads the file at path (bt_json_read_text) and parses it with bt_json_parse. */
bt_status bt_json_load(const char *path, const char *what, struct cJSON **out);

/* j printed indented (cJSON_Print) with a final newline, as bt writes JSON files (malloc'd;
 * the caller frees it). */
char *bt_json_print_line(const struct cJSON *j);

/* Copies untrusted text (n bytes of s) into out (cap bytes, always NUL-terminated) so it
 * is safe to print on a terminal: printable ASCII and valid UTF-8 are kept, a backslash,
 * a quote, control bytes and bytes that are not UTF-8 become \\, \", \n, \t, \xNN. Cut with
 * "..." when it does not fit. Returns out. */
char *bt_escape_text(char *out, size_t cap, const char *s, size_t n);

/* A JSON number as people wrote it: an integral value in full ("4611686018427387904", not
 * "4.6e+18"), anything else with 17 significant digits ("0.10000000000000001"), into buf
 * (cap >= 32). Returns buf. For messages that echo a number back. */
const char *bt_json_number_str(char *buf, size_t cap, double v);

/* 1 when j is a JSON number holding an integer in [lo, hi] (bounds within +-2^53, where
 * doubles hold every integer), with the value in *out; 0 otherwise (*out untouched). The
 * range is checked before any conversion, so no value of a corrupt file is cast out of
 * range. */
int bt_json_int_in(const struct cJSON *j, int64_t lo, int64_t hi, int64_t *out);
#define BT_JSON_INT_MAX 9007199254740992LL /* 2^53 */

/* Length of the longest valid UTF-8 prefix of s[0..n) (strict: no overlong forms, no
 * surrogates, nothing above U+10FFFF); n when all of it is valid. */
size_t bt_utf8_valid_prefix(const unsigned char *s, size_t n);

#endif
