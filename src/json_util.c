/* json_util.c: see json_util.h. */
#include "json_util.h"

#include "fileio.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bt_status bt_json_read_text(const char *path, const char *what, char **text) {
    *text = NULL;
    FILE *f;
    bt_status st = bt_fopen_regular(path, what, &f);
    if (st != BT_OK) return st;
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

int bt_json_int_in(const cJSON *j, int64_t lo, int64_t hi, int64_t *out) {
    if (!cJSON_IsNumber(j)) return 0;
    const double v = j->valuedouble;
    if (!(v >= (double)lo && v <= (double)hi) || v != floor(v)) return 0;
    *out = (int64_t)v;
    return 1;
}

const char *bt_json_number_str(char *buf, size_t cap, double v) {
    if (v == floor(v) && fabs(v) < 1e21)
        snprintf(buf, cap, "%.0f", v);
    else
        snprintf(buf, cap, "%.17g", v);
    return buf;
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

/* ---------------------------------------------------------------------------------------
 * UTF-8 and escaping
 * ------------------------------------------------------------------------------------- */

/* Length of the valid UTF-8 sequence at s[0..n), or 0 when it is not one. */
static size_t utf8_seq(const unsigned char *s, size_t n) {
    unsigned char c = s[0];
    if (c < 0x80) return 1;
    size_t len;
    unsigned char lo = 0x80, hi = 0xbf; /* allowed range of the second byte */
    if (c >= 0xc2 && c <= 0xdf) {
        len = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
        len = 3;
        if (c == 0xe0) lo = 0xa0; /* overlong */
        if (c == 0xed) hi = 0x9f; /* UTF-16 surrogates */
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4;
        if (c == 0xf0) lo = 0x90; /* overlong */
        if (c == 0xf4) hi = 0x8f; /* above U+10FFFF */
    } else {
        return 0;
    }
    if (n < len || s[1] < lo || s[1] > hi) return 0;
    for (size_t k = 2; k < len; k++)
        if (s[k] < 0x80 || s[k] > 0xbf) return 0;
    return len;
}

size_t bt_utf8_valid_prefix(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        size_t k = utf8_seq(s + i, n - i);
        if (!k) return i;
        i += k;
    }
    return n;
}

char *bt_escape_text(char *out, size_t cap, const char *s, size_t n) {
    BT_ASSERT(out && cap >= 8);
    const unsigned char *u = (const unsigned char *)s;
    size_t o = 0, i = 0;
    while (i < n) {
        char piece[8];
        size_t plen;
        size_t k = utf8_seq(u + i, n - i);
        if (k > 1) {
            memcpy(piece, s + i, k);
            plen = k;
        } else if (k == 1 && u[i] >= 0x20 && u[i] < 0x7f && u[i] != '\\' && u[i] != '"') {
            piece[0] = s[i];
            plen = 1;
        } else {
            k = 1;
            if (u[i] == '\\' || u[i] == '"')
                plen = (size_t)snprintf(piece, sizeof piece, "\\%c", s[i]);
            else if (u[i] == '\n')
                plen = (size_t)snprintf(piece, sizeof piece, "\\n");
            else if (u[i] == '\t')
                plen = (size_t)snprintf(piece, sizeof piece, "\\t");
            else
                plen = (size_t)snprintf(piece, sizeof piece, "\\x%02x", u[i]);
        }
        if (o + plen + 4 > cap) { /* room for "..." and the NUL */
            memcpy(out + o, "...", 3);
            o += 3;
            break;
        }
        memcpy(out + o, piece, plen);
        o += plen;
        i += k;
    }
    out[o] = '\0';
    return out;
}

/* ---------------------------------------------------------------------------------------
 * Python-equivalent JSON
 * ------------------------------------------------------------------------------------- */

enum { JPATH_CAP = 512 };

/* Appends ".key" (or "[i]") to a JSONPath held in path (len bytes used); cut when full. */
static size_t jpath_key(char *path, size_t len, const char *key, size_t klen) {
    char esc[160];
    bt_escape_text(esc, sizeof esc, key, klen);
    int w = snprintf(path + len, JPATH_CAP - len, ".%s", esc);
    return w < 0 || (size_t)w >= JPATH_CAP - len ? JPATH_CAP - 1 : len + (size_t)w;
}

static size_t jpath_index(char *path, size_t len, size_t index) {
    int w = snprintf(path + len, JPATH_CAP - len, "[%zu]", index);
    return w < 0 || (size_t)w >= JPATH_CAP - len ? JPATH_CAP - 1 : len + (size_t)w;
}

typedef struct jframe {
    int is_object;
    int want_key;       /* object: the next string is a key */
    size_t index;       /* array: index of the current element */
    const char *key;    /* object: raw (escaped) text of the current key */
    size_t key_len;
} jframe;

/* The JSONPath of the value being scanned, from the frame stack. */
static void jpath_of(char *path, const jframe *st, size_t depth) {
    size_t len = (size_t)snprintf(path, JPATH_CAP, "$");
    for (size_t d = 0; d < depth; d++) {
        if (st[d].is_object) {
            if (st[d].key) len = jpath_key(path, len, st[d].key, st[d].key_len);
        } else {
            len = jpath_index(path, len, st[d].index);
        }
    }
}

/* The JSON number grammar, -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?, which cJSON's
 * strtod-based reader loosens ("01", "1.", "-.5" are numbers to it, errors to Python): NULL
 * when t[0..n) is a JSON number, else what is wrong. */
static const char *json_number_problem(const char *t, size_t n) {
    size_t i = 0;
    if (i < n && t[i] == '-') i++;
    if (i >= n || t[i] < '0' || t[i] > '9') return "no digit where the number starts";
    if (t[i] == '0' && i + 1 < n && t[i + 1] >= '0' && t[i + 1] <= '9')
        return "a leading zero";
    while (i < n && t[i] >= '0' && t[i] <= '9') i++;
    if (i < n && t[i] == '.') {
        if (++i >= n || t[i] < '0' || t[i] > '9') return "no digit after the decimal point";
        while (i < n && t[i] >= '0' && t[i] <= '9') i++;
    }
    if (i < n && (t[i] == 'e' || t[i] == 'E')) {
        i++;
        if (i < n && (t[i] == '+' || t[i] == '-')) i++;
        if (i >= n || t[i] < '0' || t[i] > '9') return "no digit in the exponent";
        while (i < n && t[i] >= '0' && t[i] <= '9') i++;
    }
    return i == n ? NULL : "characters after the number";
}

/* Text-level checks on text that cJSON accepted: strings (\u0000, raw control characters,
 * bytes that are not UTF-8; outside strings cJSON accepts ASCII only), and only whitespace
 * after the value. `end` is where cJSON stopped. */
static bt_status json_scan(const char *text, size_t len, size_t end, const char *source) {
    const unsigned char *u = (const unsigned char *)text;
    for (size_t i = end; i < len; i++)
        if (u[i] != ' ' && u[i] != '\t' && u[i] != '\n' && u[i] != '\r')
            return bt_fail(BT_ERR_FORMAT,
                           "%s: unexpected text after the JSON value at byte %zu; expected one "
                           "JSON value (Python's json refuses 'Extra data' too)",
                           source, i);

    /* Frames beyond JSTACK levels (real files nest 3 or 4 deep; cJSON allows 1000) still
     * count depth but do not name keys: such a path is shown up to level JSTACK, then "...". */
    enum { JSTACK = 64 };
    jframe st[JSTACK];
    size_t depth = 0;
    bt_status s = BT_OK;
    for (size_t i = 0; i < end && s == BT_OK; i++) {
        unsigned char c = u[i];
        if (c == '{' || c == '[') {
            if (depth < JSTACK) st[depth] = (jframe){c == '{', c == '{', 0, NULL, 0};
            depth++;
        } else if (c == '}' || c == ']') {
            if (depth) depth--;
        } else if (c == ',') {
            if (depth && depth <= JSTACK) {
                jframe *f = &st[depth - 1];
                if (f->is_object)
                    f->want_key = 1;
                else
                    f->index++;
            }
        } else if (c == '-' || (c >= '0' && c <= '9')) {
            size_t j = i;
            while (j < end && strchr("+-.0123456789eE", u[j])) j++;
            const char *why = json_number_problem(text + i, j - i);
            if (why) {
                char path[JPATH_CAP];
                jpath_of(path, st, depth < JSTACK ? depth : JSTACK);
                s = bt_fail(BT_ERR_FORMAT, "%s: the number at %s ('%.*s', byte %zu) is not "
                            "JSON: %s (Python's json refuses it; write e.g. 1, 1.0, 8, 0.5)",
                            source, path, (int)(j - i < 40 ? j - i : 40), text + i, i, why);
            }
            i = j - 1;
        } else if (c == '"') {
            size_t start = ++i;
            const char *problem = NULL;
            size_t at = 0;
            for (; i < end && u[i] != '"'; i++) {
                if (u[i] < 0x20 && !problem) {
                    problem = "a raw control character (JSON requires it escaped)";
                    at = i;
                } else if (u[i] >= 0x80) {
                    size_t k = utf8_seq(u + i, end - i);
                    if (!k && !problem) {
                        problem = "bytes that are not UTF-8";
                        at = i;
                    }
                    if (k) i += k - 1;
                } else if (u[i] == '\\') {
                    if (i + 5 < end && u[i + 1] == 'u' && memcmp(text + i + 2, "0000", 4) == 0 &&
                        !problem) {
                        problem = "the escape \\u0000 (a NUL character, which would cut the "
                                  "string short)";
                        at = i;
                    }
                    i++; /* skip the escaped character */
                }
            }
            jframe *f = depth && depth <= JSTACK ? &st[depth - 1] : NULL;
            int is_key = f && f->is_object && f->want_key;
            if (is_key) { /* a key's problem is reported in its object */
                f->key = NULL;
                f->want_key = 0;
            }
            if (problem) {
                char path[JPATH_CAP];
                jpath_of(path, st, depth < JSTACK ? depth : JSTACK);
                if (depth > JSTACK) strncat(path, "...", JPATH_CAP - strlen(path) - 1);
                s = bt_fail(BT_ERR_FORMAT, "%s: %s %s holds %s (byte %zu: 0x%02x); expected "
                            "UTF-8 text without NUL or raw control characters",
                            source, is_key ? "a key in" : "the string at", path, problem, at,
                            u[at]);
            }
            if (is_key) {
                f->key = text + start;
                f->key_len = i - start;
            }
        }
    }
    return s;
}

static int cmp_key(const void *a, const void *b) {
    return strcmp((*(const cJSON *const *)a)->string, (*(const cJSON *const *)b)->string);
}

/* Duplicate keys anywhere in the tree. path holds the JSONPath of j (len bytes). */
static bt_status json_dups(const cJSON *j, char *path, size_t len, const char *source) {
    if (!cJSON_IsObject(j) && !cJSON_IsArray(j)) return BT_OK;
    size_t n = 0;
    for (const cJSON *c = j->child; c; c = c->next)
        n++;
    if (cJSON_IsObject(j) && n >= 2) {
        const cJSON *dup = NULL;
        if (n <= 16) {
            for (const cJSON *a = j->child; a && !dup; a = a->next)
                for (const cJSON *b = a->next; b && !dup; b = b->next)
                    if (strcmp(a->string, b->string) == 0) dup = a;
        } else {
            const cJSON **v = malloc(n * sizeof *v);
            if (!v) return bt_fail(BT_ERR_NOMEM, "%s: out of memory checking the JSON", source);
            size_t k = 0;
            for (const cJSON *c = j->child; c; c = c->next)
                v[k++] = c;
            qsort(v, n, sizeof *v, cmp_key);
            for (size_t i = 1; i < n && !dup; i++)
                if (strcmp(v[i - 1]->string, v[i]->string) == 0) dup = v[i];
            free(v);
        }
        if (dup) {
            char esc[160];
            bt_escape_text(esc, sizeof esc, dup->string, strlen(dup->string));
            return bt_fail(BT_ERR_FORMAT,
                           "%s: key \"%s\" appears twice in %s; expected each key once "
                           "(Python's json would keep the last value, cJSON the first: bt "
                           "refuses)",
                           source, esc, path);
        }
    }
    size_t i = 0;
    for (const cJSON *c = j->child; c; c = c->next, i++) {
        if (!cJSON_IsObject(c) && !cJSON_IsArray(c)) continue;
        size_t l2 = cJSON_IsObject(j) ? jpath_key(path, len, c->string, strlen(c->string))
                                      : jpath_index(path, len, i);
        bt_status s = json_dups(c, path, l2, source);
        path[len] = '\0';
        if (s != BT_OK) return s;
    }
    return BT_OK;
}

bt_status bt_json_check(const cJSON *root, const char *text, size_t len, const char *source) {
    BT_ASSERT(root && text && source);
    /* The caller parsed (and checked what follows the value): the value is taken to end
     * at the last non-space byte. */
    size_t end = len;
    while (end && (text[end - 1] == ' ' || text[end - 1] == '\t' || text[end - 1] == '\n' ||
                   text[end - 1] == '\r'))
        end--;
    bt_status s = json_scan(text, len, end, source);
    if (s != BT_OK) return s;
    char path[JPATH_CAP] = "$";
    return json_dups(root, path, 1, source);
}

bt_status bt_json_parse(const char *text, size_t len, const char *source, cJSON **out) {
    BT_ASSERT(text && source && out);
    *out = NULL;
    const char *endp = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &endp, 0);
    size_t end = endp && endp >= text ? (size_t)(endp - text) : 0;
    if (end > len) end = len;
    if (!root) {
        size_t line = 1;
        for (size_t i = 0; i < end; i++)
            line += text[i] == '\n';
        char near[64];
        bt_escape_text(near, sizeof near, text + end, len - end < 24 ? len - end : 24);
        if (len == 0) return bt_fail(BT_ERR_FORMAT, "%s: empty; expected a JSON value", source);
        return bt_fail(BT_ERR_FORMAT, "%s: not valid JSON at byte %zu (line %zu, near \"%s\")",
                       source, end, line, near);
    }
    bt_status s = json_scan(text, len, end, source);
    if (s == BT_OK) {
        char path[JPATH_CAP] = "$";
        s = json_dups(root, path, 1, source);
    }
    if (s != BT_OK) {
        cJSON_Delete(root);
        return s;
    }
    *out = root;
    return BT_OK;
}

bt_status bt_json_load(const char *path, const char *what, cJSON **out) {
    *out = NULL;
    char *text;
    bt_status s = bt_json_read_text(path, what, &text);
    if (s != BT_OK) return s;
    s = bt_json_parse(text, strlen(text), path, out);
    free(text);
    return s;
}

char *bt_json_print_line(const cJSON *j) {
    char *txt = cJSON_Print(j);
    BT_ASSERT(txt);
    size_t n = strlen(txt);
    char *out = malloc(n + 2);
    BT_ASSERT(out);
    memcpy(out, txt, n);
    out[n] = '\n';
    out[n + 1] = '\0';
    cJSON_free(txt);
    return out;
}
