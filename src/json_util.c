/* json_util.c: see json_util.h. */
#include "json_util.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bt_status bt_json_read_text(const char *path, const char *what, char **text) {
    *text = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) {
        const char *reason = strerror(errno);
        return what ? bt_fail(BT_ERR_IO, "%s: cannot open %s: %s", path, what, reason)
                    : bt_fail(BT_ERR_IO, "%s: cannot open: %s", path, reason);
    }
    size_t len = 0, cap = 16384;
    char *buf = malloc(cap);
    for (;;) {
        if (buf && len + 4096 + 1 > cap) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb) free(buf);
            buf = nb;
        }
        if (!buf) {
            fclose(f);
            return what ? bt_fail(BT_ERR_NOMEM, "%s: out of memory reading the %s", path, what)
                        : bt_fail(BT_ERR_NOMEM, "%s: out of memory", path);
        }
        size_t got = fread(buf + len, 1, 4096, f);
        len += got;
        if (got < 4096) break;
    }
    int err = ferror(f);
    fclose(f);
    if (err) {
        free(buf);
        return bt_fail(BT_ERR_IO, "%s: read error", path);
    }
    buf[len] = '\0';
    if (strlen(buf) != len) {
        free(buf);
        return bt_fail(BT_ERR_FORMAT, "%s: the file contains a NUL byte (not a JSON text)", path);
    }
    *text = buf;
    return BT_OK;
}

const char *bt_json_type_name(const cJSON *j) {
    if (!j) return "nothing";
    if (cJSON_IsNull(j)) return "null";
    if (cJSON_IsBool(j)) return "a boolean";
    if (cJSON_IsNumber(j)) return "a number";
    if (cJSON_IsString(j)) return "a string";
    if (cJSON_IsArray(j)) return "an array";
    if (cJSON_IsObject(j)) return "an object";
    return "an invalid value";
}
