/* json_util.h: small JSON helpers shared by the loaders (model config, checkpoint
 * directories, image preprocessing config, tokenizer files, bt-data).
 *
 * - bt_json_read_text: a JSON file as one NUL-terminated string, with the messages every
 *   loader gives (cannot open, read error, a NUL byte inside).
 * - bt_json_type_name: "a number", "an array", ... for "expected X, got Y" messages.
 *
 * Deliberately not here: parsing (cJSON does it), schema checks (each loader owns its keys
 * and their messages), size limits (callers that need one, e.g. the tokenizer, read with
 * their own). */
#ifndef BT_JSON_UTIL_H
#define BT_JSON_UTIL_H

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

#endif
