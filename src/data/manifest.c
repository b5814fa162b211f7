/* manifest.c: JSON Lines manifest reader (see manifest.h for the format and error policy).
 *
 * Each line is parsed with cJSON on its own and validated completely before any of its
 * strings enter the arena, so a skipped line leaves no trace but its message. Image paths
 * are resolved against the manifest's directory once, here, so every later consumer (loader
 * workers, the image cache, bt-data check) sees one canonical string per image.
 *
 * Deliberately not done: path normalization beyond joining (no realpath: the file need not
 * exist yet, and a missing image is the loader's error to report, with this line number). */
#include "data/manifest.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fileio.h"
#include "json_util.h"

manifest_options manifest_options_default(void) {
    manifest_options o = {
        .image_key = "image",
        .caption_key = "caption",
        .id_key = "id",
        .choices_key = "caption_choices",
        .label_key = "label",
        .on_error = MANIFEST_ON_ERROR_STOP,
    };
    return o;
}

int manifest_utf8_valid(const char *str, size_t n) {
    return bt_utf8_valid_prefix((const unsigned char *)str, n) == n;
}

/* Makes room for `need` more arena bytes; 0 when out of memory. */
static int arena_reserve(manifest *m, size_t need) {
    if (m->arena_used + need <= m->arena_cap) return 1;
    size_t cap = m->arena_cap ? m->arena_cap : 4096;
    while (cap < m->arena_used + need)
        cap *= 2;
    char *grown = realloc(m->arena, cap);
    if (!grown) return 0;
    m->arena = grown;
    m->arena_cap = cap;
    return 1;
}

/* Appends a NUL-terminated copy of `len` bytes (optionally prefixed by `prefix`) to the
 * arena (room reserved by arena_reserve) and returns its offset, or MANIFEST_NONE when the
 * 4 GiB offset space is exhausted. */
static uint32_t arena_push(manifest *m, const char *prefix, size_t plen, const char *s,
                           size_t len) {
    size_t need = plen + len + 1;
    if (m->arena_used + need >= (size_t)MANIFEST_NONE) return MANIFEST_NONE;
    BT_ASSERT(m->arena_used + need <= m->arena_cap);
    uint32_t off = (uint32_t)m->arena_used;
    memcpy(m->arena + m->arena_used, prefix, plen);
    memcpy(m->arena + m->arena_used + plen, s, len);
    m->arena[m->arena_used + plen + len] = '\0';
    m->arena_used += need;
    return off;
}

typedef struct line_ctx {
    const char *path;
    size_t line;
} line_ctx;

/* A string value under `key`; *out NULL when absent and optional. */
static bt_status get_string(const line_ctx *c, const cJSON *obj, const char *key, int required,
                            const char **out) {
    *out = NULL;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v || cJSON_IsNull(v)) {
        if (required && v)
            return bt_fail(BT_ERR_FORMAT, "%s:%zu: key '%s' is null; expected a string", c->path,
                           c->line, key);
        if (required)
            return bt_fail(BT_ERR_MISSING, "%s:%zu: key '%s' missing", c->path, c->line, key);
        return BT_OK;
    }
    if (!cJSON_IsString(v))
        return bt_fail(BT_ERR_FORMAT, "%s:%zu: key '%s' must be a string", c->path, c->line, key);
    if (!manifest_utf8_valid(v->valuestring, strlen(v->valuestring)))
        return bt_fail(BT_ERR_FORMAT, "%s:%zu: key '%s' is not valid UTF-8", c->path, c->line, key);
    *out = v->valuestring;
    return BT_OK;
}

typedef struct parsed_line {
    const char *image, *caption, *id, *choices[MANIFEST_N_CHOICES];
    char id_buf[32]; /* integer ids are printed here */
    int32_t label;
} parsed_line;

static bt_status parse_record(const line_ctx *c, const cJSON *obj, const manifest_options *o,
                              parsed_line *p) {
    bt_status st;
    memset(p, 0, sizeof *p);
    p->label = -1;
    if (!cJSON_IsObject(obj))
        return bt_fail(BT_ERR_FORMAT, "%s:%zu: record must be a JSON object", c->path, c->line);
    if ((st = get_string(c, obj, o->image_key, 1, &p->image))) return st;
    if (!p->image[0])
        return bt_fail(BT_ERR_FORMAT, "%s:%zu: key '%s' is empty", c->path, c->line, o->image_key);
    if ((st = get_string(c, obj, o->caption_key, 1, &p->caption))) return st;

    const cJSON *id = cJSON_GetObjectItemCaseSensitive(obj, o->id_key);
    if (id && !cJSON_IsNull(id)) {
        if (cJSON_IsString(id)) {
            if ((st = get_string(c, obj, o->id_key, 0, &p->id))) return st;
        } else if (cJSON_IsNumber(id) && id->valuedouble == floor(id->valuedouble) &&
                   fabs(id->valuedouble) <= 9007199254740992.0) {
            snprintf(p->id_buf, sizeof p->id_buf, "%lld", (long long)id->valuedouble);
            p->id = p->id_buf;
        } else {
            return bt_fail(BT_ERR_FORMAT, "%s:%zu: key '%s' must be a string or an integer",
                           c->path, c->line, o->id_key);
        }
    }

    const cJSON *ch = cJSON_GetObjectItemCaseSensitive(obj, o->choices_key);
    if (ch && !cJSON_IsNull(ch)) {
        if (!cJSON_IsArray(ch))
            return bt_fail(BT_ERR_FORMAT, "%s:%zu: key '%s' must be an array of %d strings",
                           c->path, c->line, o->choices_key, MANIFEST_N_CHOICES);
        int count = cJSON_GetArraySize(ch);
        if (count != MANIFEST_N_CHOICES)
            return bt_fail(BT_ERR_SHAPE, "%s:%zu: '%s' has %d entries, expected %d", c->path,
                           c->line, o->choices_key, count, MANIFEST_N_CHOICES);
        for (int k = 0; k < MANIFEST_N_CHOICES; k++) {
            const cJSON *e = cJSON_GetArrayItem(ch, k);
            if (!cJSON_IsString(e))
                return bt_fail(BT_ERR_FORMAT, "%s:%zu: '%s'[%d] must be a string", c->path, c->line,
                               o->choices_key, k);
            if (!manifest_utf8_valid(e->valuestring, strlen(e->valuestring)))
                return bt_fail(BT_ERR_FORMAT, "%s:%zu: '%s'[%d] is not valid UTF-8", c->path,
                               c->line, o->choices_key, k);
            p->choices[k] = e->valuestring;
        }
    }

    const cJSON *lab = cJSON_GetObjectItemCaseSensitive(obj, o->label_key);
    if (lab && !cJSON_IsNull(lab)) {
        if (!p->choices[0])
            return bt_fail(BT_ERR_FORMAT, "%s:%zu: key '%s' given without '%s'", c->path, c->line,
                           o->label_key, o->choices_key);
        if (!cJSON_IsNumber(lab) || lab->valuedouble != floor(lab->valuedouble))
            return bt_fail(BT_ERR_FORMAT, "%s:%zu: key '%s' must be an integer 0..%d", c->path,
                           c->line, o->label_key, MANIFEST_N_CHOICES - 1);
        if (lab->valuedouble < 0 || lab->valuedouble > MANIFEST_N_CHOICES - 1)
            return bt_fail(BT_ERR_FORMAT, "%s:%zu: key '%s' is %s, expected 0..%d", c->path,
                           c->line, o->label_key,
                           bt_json_number_str((char[40]){0}, 40, lab->valuedouble),
                           MANIFEST_N_CHOICES - 1);
        p->label = (int32_t)lab->valuedouble;
    }
    return BT_OK;
}

/* Adds a validated record; fails only when the arena's offset space is exhausted. */
static bt_status store_record(manifest *m, const line_ctx *c, const parsed_line *p, const char *dir,
                              size_t dir_len, size_t *cap) {
    if (m->n == *cap) {
        size_t ncap = *cap ? *cap * 2 : 1024;
        manifest_record *grown = realloc(m->records, ncap * sizeof *grown);
        if (!grown)
            return bt_fail(BT_ERR_NOMEM, "%s:%zu: out of memory growing the manifest to %zu "
                           "records", c->path, c->line, ncap);
        m->records = grown;
        *cap = ncap;
    }
    manifest_record r;
    int absolute = p->image[0] == '/';
    size_t need = (absolute ? 0 : dir_len) + strlen(p->image) + strlen(p->caption) + 2 +
                  (p->id ? strlen(p->id) + 1 : 0);
    for (int k = 0; k < MANIFEST_N_CHOICES; k++)
        need += p->choices[k] ? strlen(p->choices[k]) + 1 : 0;
    if (m->arena_used + need < (size_t)MANIFEST_NONE && !arena_reserve(m, need))
        return bt_fail(BT_ERR_NOMEM, "%s:%zu: out of memory growing the manifest text past %zu "
                       "bytes", c->path, c->line, m->arena_used);
    r.image = arena_push(m, dir, absolute ? 0 : dir_len, p->image, strlen(p->image));
    r.caption = arena_push(m, "", 0, p->caption, strlen(p->caption));
    r.id = p->id ? arena_push(m, "", 0, p->id, strlen(p->id)) : MANIFEST_NONE;
    int full = r.image == MANIFEST_NONE || r.caption == MANIFEST_NONE;
    for (int k = 0; k < MANIFEST_N_CHOICES; k++) {
        r.choices[k] = p->choices[k] ? arena_push(m, "", 0, p->choices[k], strlen(p->choices[k]))
                                     : MANIFEST_NONE;
        if (p->choices[k] && r.choices[k] == MANIFEST_NONE) full = 1;
    }
    if (full || (p->id && r.id == MANIFEST_NONE))
        return bt_fail(BT_ERR_UNSUPPORTED,
                       "%s:%zu: manifest text exceeds 4 GiB; split the manifest", c->path, c->line);
    r.label = p->label;
    r.line = c->line > INT32_MAX ? INT32_MAX : (int32_t)c->line;
    m->records[m->n++] = r;
    return BT_OK;
}

static bt_status add_problem(manifest *m, const char *msg) {
    char **grown = realloc(m->problems, (m->n_skipped + 1) * sizeof *grown);
    if (!grown) return bt_fail(BT_ERR_NOMEM, "%s: out of memory recording a problem", m->path);
    m->problems = grown;
    m->problems[m->n_skipped] = strdup(msg);
    if (!m->problems[m->n_skipped])
        return bt_fail(BT_ERR_NOMEM, "%s: out of memory recording a problem", m->path);
    m->n_skipped++;
    return BT_OK;
}

static int is_blank(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r') return 0;
    return 1;
}

bt_status manifest_load(manifest *m, const char *path, const manifest_options *opt) {
    memset(m, 0, sizeof *m);
    manifest_options o = manifest_options_default();
    if (opt) {
        o.on_error = opt->on_error;
        if (opt->image_key) o.image_key = opt->image_key;
        if (opt->caption_key) o.caption_key = opt->caption_key;
        if (opt->id_key) o.id_key = opt->id_key;
        if (opt->choices_key) o.choices_key = opt->choices_key;
        if (opt->label_key) o.label_key = opt->label_key;
    }
    m->path = strdup(path);
    if (!m->path) return bt_fail(BT_ERR_NOMEM, "%s: out of memory", path);

    FILE *f;
    bt_status ost = bt_fopen_regular(path, "manifest", &f);
    if (ost != BT_OK) return ost;

    /* The directory part including its trailing '/', or "" for a bare file name. */
    const char *slash = strrchr(path, '/');
    size_t dir_len = slash ? (size_t)(slash - path) + 1 : 0;

    char *line = NULL;
    size_t line_cap = 0, rec_cap = 0;
    ssize_t len;
    bt_status st = BT_OK;
    while ((len = getline(&line, &line_cap, f)) >= 0) {
        line_ctx c = {path, ++m->n_lines};
        char *s = line;
        size_t n = (size_t)len;
        if (n && s[n - 1] == '\n') s[--n] = '\0';
        if (n && s[n - 1] == '\r') s[--n] = '\0';
        if (c.line == 1 && n >= 3 && memcmp(s, "\xEF\xBB\xBF", 3) == 0) s += 3, n -= 3;
        if (is_blank(s, n)) continue;

        bt_status lst;
        cJSON *obj = NULL;
        parsed_line p;
        if (strlen(s) != n) {
            lst = bt_fail(BT_ERR_FORMAT, "%s:%zu: line contains a NUL byte", path, c.line);
        } else {
            const char *end = NULL;
            obj = cJSON_ParseWithOpts(s, &end, 1);
            if (!obj) {
                size_t col = end && end >= s ? (size_t)(end - s) + 1 : 1;
                lst = bt_fail(BT_ERR_FORMAT, "%s:%zu: malformed JSON at column %zu", path, c.line,
                              col);
            } else {
                char source[4200];
                snprintf(source, sizeof source, "%s:%zu", path, c.line);
                lst = bt_json_check(obj, s, n, source);
                if (lst == BT_OK) lst = parse_record(&c, obj, &o, &p);
            }
        }
        if (lst == BT_OK) lst = store_record(m, &c, &p, path, dir_len, &rec_cap);
        cJSON_Delete(obj);
        if (lst != BT_OK) {
            if (o.on_error == MANIFEST_ON_ERROR_STOP || lst == BT_ERR_UNSUPPORTED) {
                st = lst;
                break;
            }
            if ((st = add_problem(m, bt_error_message())) != BT_OK) break;
        }
    }
    int read_error = ferror(f);
    free(line);
    fclose(f);
    if (st != BT_OK) return st;
    if (read_error) return bt_fail(BT_ERR_IO, "%s: read error after line %zu", path, m->n_lines);
    if (m->n == 0) {
        if (m->n_skipped)
            return bt_fail(BT_ERR_MISSING, "%s: no valid record (%zu lines skipped; first: %s)",
                           path, m->n_skipped, m->problems[0]);
        return bt_fail(BT_ERR_MISSING, "%s: no records", path);
    }
    return BT_OK;
}

void manifest_free(manifest *m) {
    if (!m) return;
    for (size_t i = 0; i < m->n_skipped; i++)
        free(m->problems[i]);
    free(m->problems);
    free(m->records);
    free(m->arena);
    free(m->path);
    memset(m, 0, sizeof *m);
}
