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
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "data/shards.h"
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
    char loc[4400]; /* "path:line", or "shard: sample 'key'": the prefix of every message */
} line_ctx;

static void line_ctx_set(line_ctx *c, const char *path, size_t line) {
    c->path = path;
    c->line = line;
    snprintf(c->loc, sizeof c->loc, "%s:%zu", path, line);
}

/* A string value under `key`; *out NULL when absent and optional. */
static bt_status get_string(const line_ctx *c, const cJSON *obj, const char *key, int required,
                            const char **out) {
    *out = NULL;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v || cJSON_IsNull(v)) {
        if (required && v)
            return bt_fail(BT_ERR_FORMAT, "%s: key '%s' is null; expected a string", c->loc, key);
        if (required)
            return bt_fail(BT_ERR_MISSING, "%s: key '%s' missing", c->loc, key);
        return BT_OK;
    }
    if (!cJSON_IsString(v))
        return bt_fail(BT_ERR_FORMAT, "%s: key '%s' must be a string", c->loc, key);
    if (!manifest_utf8_valid(v->valuestring, strlen(v->valuestring)))
        return bt_fail(BT_ERR_FORMAT, "%s: key '%s' is not valid UTF-8", c->loc, key);
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
        return bt_fail(BT_ERR_FORMAT, "%s: record must be a JSON object", c->loc);
    if ((st = get_string(c, obj, o->image_key, 1, &p->image))) return st;
    if (!p->image[0])
        return bt_fail(BT_ERR_FORMAT, "%s: key '%s' is empty", c->loc, o->image_key);
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
            return bt_fail(BT_ERR_FORMAT, "%s: key '%s' must be a string or an integer",
                           c->loc, o->id_key);
        }
    }

    const cJSON *ch = cJSON_GetObjectItemCaseSensitive(obj, o->choices_key);
    if (ch && !cJSON_IsNull(ch)) {
        if (!cJSON_IsArray(ch))
            return bt_fail(BT_ERR_FORMAT, "%s: key '%s' must be an array of %d strings", c->loc,
                           o->choices_key, MANIFEST_N_CHOICES);
        int count = cJSON_GetArraySize(ch);
        if (count != MANIFEST_N_CHOICES)
            return bt_fail(BT_ERR_SHAPE, "%s: '%s' has %d entries, expected %d", c->loc,
                           o->choices_key, count, MANIFEST_N_CHOICES);
        for (int k = 0; k < MANIFEST_N_CHOICES; k++) {
            const cJSON *e = cJSON_GetArrayItem(ch, k);
            if (!cJSON_IsString(e))
                return bt_fail(BT_ERR_FORMAT, "%s: '%s'[%d] must be a string", c->loc,
                               o->choices_key, k);
            if (!manifest_utf8_valid(e->valuestring, strlen(e->valuestring)))
                return bt_fail(BT_ERR_FORMAT, "%s: '%s'[%d] is not valid UTF-8", c->loc,
                               o->choices_key, k);
            p->choices[k] = e->valuestring;
        }
    }

    const cJSON *lab = cJSON_GetObjectItemCaseSensitive(obj, o->label_key);
    if (lab && !cJSON_IsNull(lab)) {
        if (!p->choices[0])
            return bt_fail(BT_ERR_FORMAT, "%s: key '%s' given without '%s'", c->loc, o->label_key,
                           o->choices_key);
        if (!cJSON_IsNumber(lab) || lab->valuedouble != floor(lab->valuedouble))
            return bt_fail(BT_ERR_FORMAT, "%s: key '%s' must be an integer 0..%d", c->loc,
                           o->label_key, MANIFEST_N_CHOICES - 1);
        if (lab->valuedouble < 0 || lab->valuedouble > MANIFEST_N_CHOICES - 1)
            return bt_fail(BT_ERR_FORMAT, "%s: key '%s' is %s, expected 0..%d", c->loc,
                           o->label_key, bt_json_number_str((char[40]){0}, 40, lab->valuedouble),
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
            return bt_fail(BT_ERR_NOMEM, "%s: out of memory growing the manifest to %zu "
                           "records", c->loc, ncap);
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
        return bt_fail(BT_ERR_NOMEM, "%s: out of memory growing the manifest text past %zu "
                       "bytes", c->loc, m->arena_used);
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
                       "%s: manifest text exceeds 4 GiB; split the manifest", c->loc);
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

/* Validates one record (lst: the error found while parsing it, or BT_OK with obj the parsed
 * object), stores it, or files its error under the policy. Returns BT_OK to go on, the error
 * that ends the read otherwise. */
static bt_status take_record(manifest *m, const line_ctx *c, bt_status lst, const cJSON *obj,
                             const manifest_options *o, size_t dir_len, size_t *rec_cap) {
    parsed_line p;
    if (lst == BT_OK) lst = parse_record(c, obj, o, &p);
    if (lst == BT_OK) lst = store_record(m, c, &p, m->path, dir_len, rec_cap);
    if (lst == BT_OK) return BT_OK;
    if (o->on_error == MANIFEST_ON_ERROR_STOP || lst == BT_ERR_UNSUPPORTED) return lst;
    return add_problem(m, bt_error_message());
}

static bt_status load_jsonl(manifest *m, FILE *f, const manifest_options *o, size_t dir_len) {
    const char *path = m->path;
    char *line = NULL;
    size_t line_cap = 0, rec_cap = 0;
    ssize_t len;
    bt_status st = BT_OK;
    while ((len = getline(&line, &line_cap, f)) >= 0) {
        line_ctx c;
        line_ctx_set(&c, path, ++m->n_lines);
        char *s = line;
        size_t n = (size_t)len;
        if (n && s[n - 1] == '\n') s[--n] = '\0';
        if (n && s[n - 1] == '\r') s[--n] = '\0';
        if (c.line == 1 && n >= 3 && memcmp(s, "\xEF\xBB\xBF", 3) == 0) s += 3, n -= 3;
        if (is_blank(s, n)) continue;

        bt_status lst = BT_OK;
        cJSON *obj = NULL;
        if (strlen(s) != n) {
            lst = bt_fail(BT_ERR_FORMAT, "%s:%zu: line contains a NUL byte", path, c.line);
        } else {
            const char *end = NULL;
            obj = cJSON_ParseWithOpts(s, &end, 1);
            if (!obj) {
                size_t col = end && end >= s ? (size_t)(end - s) + 1 : 1;
                /* A CSV file under another name is the likely mistake on line 1. */
                const char *hint = c.line == 1 && s[strspn(s, " \t")] != '{'
                                       ? " (a CSV/TSV manifest must be named *.csv / *.tsv)"
                                       : "";
                lst = bt_fail(BT_ERR_FORMAT, "%s:%zu: malformed JSON at column %zu%s", path,
                              c.line, col, hint);
            } else {
                char source[4200];
                snprintf(source, sizeof source, "%s:%zu", path, c.line);
                lst = bt_json_check(obj, s, n, source);
            }
        }
        st = take_record(m, &c, lst, obj, o, dir_len, &rec_cap);
        cJSON_Delete(obj);
        if (st != BT_OK) break;
    }
    int read_error = ferror(f);
    free(line);
    if (st == BT_OK && read_error)
        st = bt_fail(BT_ERR_IO, "%s: read error after line %zu", path, m->n_lines);
    return st;
}

/* ---- CSV / TSV (RFC 4180) ---------------------------------------------------------------- */

typedef struct csv_reader {
    const char *p, *end;
    size_t line; /* 1-based physical line of *p */
    char delim;
    /* the current row: fields NUL-terminated one after another in buf */
    char *buf;
    size_t len, cap;
    size_t *start; /* (n) offsets of the fields in buf */
    size_t n, start_cap;
    int quoted;  /* some field of the row was quoted */
    int has_nul; /* some field holds a NUL byte */
} csv_reader;

static void csv_put(csv_reader *r, char ch) {
    if (r->len == r->cap) {
        r->cap = r->cap ? 2 * r->cap : 256;
        char *grown = realloc(r->buf, r->cap);
        BT_ASSERTF(grown, "out of memory reading a CSV row of %zu bytes", r->len);
        r->buf = grown;
    }
    r->buf[r->len++] = ch;
}

static void csv_begin_field(csv_reader *r) {
    if (r->n == r->start_cap) {
        r->start_cap = r->start_cap ? 2 * r->start_cap : 16;
        size_t *grown = realloc(r->start, r->start_cap * sizeof *grown);
        BT_ASSERTF(grown, "out of memory reading a CSV row of %zu fields", r->n);
        r->start = grown;
    }
    r->start[r->n++] = r->len;
}

/* Reads the next row. Returns 1 (row in r), 0 at the end of the data, or an error status
 * (message "path:line: ...") for an unterminated quote or text after a closing quote.
 * Quoting is RFC 4180: a field that starts with '"' runs to the next lone '"', "" inside it is
 * one quote, and it may hold the delimiter, CR and LF. A quote inside an unquoted field is
 * kept as a character (Python's csv module does the same). Rows end at LF or CRLF. */
static int csv_read_row(csv_reader *r, const char *path, size_t *first_line, bt_status *err) {
    r->len = r->n = 0;
    r->quoted = r->has_nul = 0;
    *first_line = r->line;
    if (r->p >= r->end) return 0;
    for (;;) {
        csv_begin_field(r);
        if (r->p < r->end && *r->p == '"') { /* a row may end in a delimiter at the file's end */
            size_t opened = r->line;
            r->quoted = 1;
            r->p++;
            for (;;) {
                if (r->p >= r->end) {
                    *err = bt_fail(BT_ERR_FORMAT, "%s:%zu: quoted field never closed (the "
                                   "file ends inside it)", path, opened);
                    return -1;
                }
                char ch = *r->p++;
                if (ch == '"') {
                    if (r->p < r->end && *r->p == '"') {
                        r->p++;
                        csv_put(r, '"');
                        continue;
                    }
                    break;
                }
                if (ch == '\n') r->line++;
                if (ch == '\0') r->has_nul = 1;
                csv_put(r, ch);
            }
            int ok = r->p >= r->end || *r->p == r->delim || *r->p == '\n' ||
                     (*r->p == '\r' && (r->p + 1 == r->end || r->p[1] == '\n'));
            if (!ok) {
                *err = bt_fail(BT_ERR_FORMAT, "%s:%zu: field %zu: '%c' after a closing quote; "
                               "expected the delimiter or the end of the row (a quote inside "
                               "a quoted field is written \"\")", path, r->line, r->n,
                               isprint((unsigned char)*r->p) ? *r->p : '?');
                return -1;
            }
            if (r->p < r->end && *r->p == '\r') r->p++;
        } else {
            while (r->p < r->end && *r->p != r->delim && *r->p != '\n') {
                if (*r->p == '\0') r->has_nul = 1;
                csv_put(r, *r->p++);
            }
            /* CR of a CRLF row end */
            if (r->len > r->start[r->n - 1] && r->buf[r->len - 1] == '\r' &&
                (r->p >= r->end || *r->p == '\n'))
                r->len--;
        }
        csv_put(r, '\0');
        if (r->p >= r->end) return 1;
        if (*r->p == r->delim) {
            r->p++;
            continue;
        }
        r->p++; /* '\n' */
        r->line++;
        return 1;
    }
}

static const char *csv_field(const csv_reader *r, size_t i) {
    return r->buf + r->start[i];
}

/* The row as the JSON object a JSON Lines record would be, so parse_record checks both
 * formats with the same messages. Empty cells of the optional columns are absent; the
 * choices cell is JSON text (["a", "b", ...]) and the label cell a number, each kept as a
 * string when it does not parse (parse_record then names the expected type). */
static cJSON *csv_row_object(const csv_reader *r, char **header, const manifest_options *o) {
    cJSON *obj = cJSON_CreateObject();
    BT_ASSERT(obj);
    for (size_t i = 0; i < r->n; i++) {
        const char *h = header[i], *v = csv_field(r, i);
        cJSON *item = NULL;
        if (!strcmp(h, o->image_key) || !strcmp(h, o->caption_key)) {
            item = cJSON_CreateString(v);
        } else if (!v[0]) {
            continue;
        } else if (!strcmp(h, o->id_key)) {
            item = cJSON_CreateString(v);
        } else if (!strcmp(h, o->choices_key)) {
            item = cJSON_Parse(v);
            if (!item) item = cJSON_CreateString(v);
        } else if (!strcmp(h, o->label_key)) {
            char *end;
            errno = 0;
            double d = strtod(v, &end);
            item = *end == '\0' && errno == 0 && isfinite(d) ? cJSON_CreateNumber(d)
                                                             : cJSON_CreateString(v);
        } else {
            continue; /* a column bt does not use */
        }
        BT_ASSERT(item);
        cJSON_AddItemToObject(obj, h, item);
    }
    return obj;
}

static bt_status load_csv(manifest *m, FILE *f, const manifest_options *o, size_t dir_len,
                          char delim) {
    const char *path = m->path;
    char *data = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (cap - n < 65536) {
            cap = cap ? 2 * cap : 65536;
            char *grown = realloc(data, cap);
            if (!grown) {
                free(data);
                return bt_fail(BT_ERR_NOMEM, "%s: out of memory reading %zu bytes", path, n);
            }
            data = grown;
        }
        size_t got = fread(data + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    if (ferror(f)) {
        free(data);
        return bt_fail(BT_ERR_IO, "%s: read error after %zu bytes", path, n);
    }
    /* exactly the file's bytes, so that a read past the end is one AddressSanitizer reports
     * (the ASan build of test_manifest and fuzz_csv) rather than a slack byte of the buffer */
    char *exact = realloc(data, n ? n : 1);
    if (exact) data = exact;
    csv_reader r = {.p = data, .end = data + n, .line = 1, .delim = delim};
    if (n >= 3 && memcmp(data, "\xEF\xBB\xBF", 3) == 0) r.p += 3;

    bt_status st = BT_OK;
    char **header = NULL;
    size_t n_cols = 0, first = 0, rec_cap = 0;
    int got = csv_read_row(&r, path, &first, &st);
    if (got == 0) st = bt_fail(BT_ERR_MISSING, "%s: empty; expected a header row", path);
    if (got == 1 && r.has_nul)
        st = bt_fail(BT_ERR_FORMAT, "%s:%zu: header contains a NUL byte", path, first);
    if (got == 1 && st == BT_OK) {
        n_cols = r.n;
        header = calloc(n_cols, sizeof *header);
        BT_ASSERT(header);
        for (size_t i = 0; i < n_cols && st == BT_OK; i++) {
            header[i] = strdup(csv_field(&r, i));
            BT_ASSERT(header[i]);
            if (!manifest_utf8_valid(header[i], strlen(header[i])))
                st = bt_fail(BT_ERR_FORMAT, "%s:%zu: header column %zu is not valid UTF-8", path,
                             first, i + 1);
            for (size_t k = 0; k < i && st == BT_OK; k++)
                if (!strcmp(header[k], header[i]))
                    st = bt_fail(BT_ERR_FORMAT, "%s:%zu: column '%s' appears twice in the header",
                                 path, first, header[i]);
        }
        const char *need[2] = {o->image_key, o->caption_key};
        for (int q = 0; q < 2 && st == BT_OK; q++) {
            size_t i = 0;
            while (i < n_cols && strcmp(header[i], need[q]))
                i++;
            if (i == n_cols)
                st = bt_fail(BT_ERR_MISSING, "%s:%zu: key '%s' missing: the header has no such "
                             "column (%zu columns, the first '%s')", path, first, need[q], n_cols,
                             header[0]);
        }
    }
    while (st == BT_OK && (got = csv_read_row(&r, path, &first, &st)) == 1) {
        line_ctx c;
        line_ctx_set(&c, path, first);
        if (r.n == 1 && !r.quoted && csv_field(&r, 0)[0] == '\0') continue; /* blank line */
        bt_status lst = BT_OK;
        cJSON *obj = NULL;
        if (r.has_nul)
            lst = bt_fail(BT_ERR_FORMAT, "%s:%zu: row contains a NUL byte", path, c.line);
        else if (r.n != n_cols)
            lst = bt_fail(BT_ERR_FORMAT, "%s:%zu: %zu fields, the header has %zu", path, c.line,
                          r.n, n_cols);
        else
            obj = csv_row_object(&r, header, o);
        st = take_record(m, &c, lst, obj, o, dir_len, &rec_cap);
        cJSON_Delete(obj);
    }
    m->n_lines = r.line - (r.p > data && r.p[-1] == '\n' ? 1 : 0);
    for (size_t i = 0; i < n_cols; i++)
        free(header ? header[i] : NULL);
    free(header);
    free(r.buf);
    free(r.start);
    free(data);
    return st;
}

/* The delimiter from the file name's extension, case-insensitively: .csv comma, .tsv tab, anything
 * else 0 (JSON Lines). */
static char manifest_delimiter(const char *path) {
    const char *dot = strrchr(path, '.');
    if (!dot || strchr(dot, '/')) return 0;
    if (!strcasecmp(dot, ".csv")) return ',';
    if (!strcasecmp(dot, ".tsv")) return '\t';
    return 0;
}

static bt_status manifest_check_nonempty(const manifest *m) {
    if (m->n == 0) {
        if (m->n_skipped)
            return bt_fail(BT_ERR_MISSING, "%s: no valid record (%zu %s skipped; first: %s)",
                           m->path, m->n_skipped, m->shards ? "samples or shard tails" : "lines",
                           m->problems[0]);
        return bt_fail(BT_ERR_MISSING, "%s: no records", m->path);
    }
    return BT_OK;
}

/* 1 when dir holds a *.tar file (a directory of WebDataset shards). */
static int shards_dir_has_tar(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int found = 0;
    struct dirent *e;
    while (!found && (e = readdir(d))) {
        size_t n = strlen(e->d_name);
        found = n > 4 && e->d_name[0] != '.' && !strcmp(e->d_name + n - 4, ".tar");
    }
    closedir(d);
    return found;
}

/* HF imagefolder: dir/metadata.jsonl or dir/metadata.csv (exactly one). *file is malloc'd. */
static bt_status imagefolder_metadata(const char *dir, char **file) {
    static const char *names[2] = {"metadata.jsonl", "metadata.csv"};
    char *found[2] = {NULL, NULL};
    size_t dl = strlen(dir);
    while (dl > 1 && dir[dl - 1] == '/')
        dl--;
    for (int i = 0; i < 2; i++) {
        size_t need = dl + strlen(names[i]) + 2;
        char *p = malloc(need);
        BT_ASSERT(p);
        snprintf(p, need, "%.*s/%s", (int)dl, dir, names[i]);
        struct stat sb;
        if (stat(p, &sb) == 0) found[i] = p;
        else free(p);
    }
    *file = NULL;
    if (found[0] && found[1]) {
        free(found[0]);
        free(found[1]);
        return bt_fail(BT_ERR_FORMAT, "%s: holds both metadata.jsonl and metadata.csv; keep one "
                       "(Hugging Face's imagefolder refuses this too)", dir);
    }
    *file = found[0] ? found[0] : found[1];
    if (!*file)
        return bt_fail(BT_ERR_MISSING, "%s: a directory as data source needs metadata.jsonl or "
                       "metadata.csv (Hugging Face imagefolder layout) or WebDataset .tar shards",
                       dir);
    return BT_OK;
}

/* ---- WebDataset shards ------------------------------------------------------------------ */

/* One sample being gathered: consecutive members sharing a key. */
typedef struct wds_sample {
    char *key;                 /* malloc'd */
    size_t number;             /* 1-based within the shard */
    int image_rank;            /* index in image_exts of the chosen image, or -1 */
    tar_member image, txt, json;
    int has_txt, has_json;
    char dup[16];              /* a suffix seen twice, or "" */
} wds_sample;

/* Image extensions in webdataset's order of preference ("jpg;jpeg;png;webp"). */
static const char *const image_exts[] = {"jpg", "jpeg", "png", "webp"};

static void wds_sample_reset(wds_sample *w) {
    free(w->key);
    free(w->image.name);
    free(w->txt.name);
    free(w->json.name);
    memset(w, 0, sizeof *w);
    w->image_rank = -1;
}

/* Splits a member name at the first dot of its basename (webdataset's rule): key = the path up
 * to that dot, suffix = the rest, lower-cased into suffix (truncated to cap). */
static size_t wds_split(const char *name, char *suffix, size_t cap) {
    const char *base = strrchr(name, '/');
    base = base ? base + 1 : name;
    const char *dot = strchr(base, '.');
    size_t key_len = dot ? (size_t)(dot - name) : strlen(name);
    size_t i = 0;
    if (dot)
        for (const char *p = dot + 1; *p && i + 1 < cap; p++)
            suffix[i++] = (char)tolower((unsigned char)*p);
    suffix[i] = '\0';
    return key_len;
}

/* Validates a gathered sample, turns it into a record (through parse_record, so the json
 * member's fields obey the manifest rules) or files its problem. */
static bt_status wds_finish(manifest *m, tar_reader *tr, wds_sample *w, const manifest_options *o,
                            size_t *rec_cap, size_t *mem_cap, uint32_t shard) {
    line_ctx c;
    c.path = tr->path;
    c.line = w->number;
    snprintf(c.loc, sizeof c.loc, "%s: sample '%s'", tr->path, w->key);
    bt_status lst = BT_OK;
    cJSON *obj = NULL;
    char *txt = NULL, *json = NULL, *image_name = NULL;
    if (w->dup[0])
        lst = bt_fail(BT_ERR_FORMAT, "%s: two '%s' members", c.loc, w->dup);
    else if (w->image_rank < 0)
        lst = bt_fail(BT_ERR_MISSING, "%s: no image member (.jpg, .jpeg, .png or .webp)", c.loc);
    if (lst == BT_OK && w->has_json) {
        lst = tar_reader_read(tr, w->json.offset, w->json.size, &json);
        if (lst == BT_OK) {
            const char *end = NULL;
            obj = cJSON_ParseWithOpts(json, &end, 1);
            if (!obj || strlen(json) != w->json.size)
                lst = bt_fail(BT_ERR_FORMAT, "%s: member '%s' is not valid JSON", c.loc,
                              w->json.name);
            else if (!cJSON_IsObject(obj))
                lst = bt_fail(BT_ERR_FORMAT, "%s: member '%s' must hold a JSON object", c.loc,
                              w->json.name);
            else
                lst = bt_json_check(obj, json, w->json.size, c.loc);
        }
    }
    if (lst == BT_OK && !obj) obj = cJSON_CreateObject();
    if (lst == BT_OK && w->has_txt) {
        lst = tar_reader_read(tr, w->txt.offset, w->txt.size, &txt);
        if (lst == BT_OK && strlen(txt) != w->txt.size)
            lst = bt_fail(BT_ERR_FORMAT, "%s: member '%s' contains a NUL byte", c.loc, w->txt.name);
        if (lst == BT_OK && !manifest_utf8_valid(txt, w->txt.size))
            lst = bt_fail(BT_ERR_FORMAT, "%s: member '%s' is not valid UTF-8", c.loc, w->txt.name);
        if (lst == BT_OK) cJSON_DeleteItemFromObjectCaseSensitive(obj, o->caption_key);
        if (lst == BT_OK) cJSON_AddItemToObject(obj, o->caption_key, cJSON_CreateString(txt));
    }
    if (lst == BT_OK && !cJSON_GetObjectItemCaseSensitive(obj, o->caption_key))
        lst = bt_fail(BT_ERR_MISSING, "%s: no caption (a .txt member, or a .json member with "
                      "key '%s')", c.loc, o->caption_key);
    if (lst == BT_OK) {
        size_t need = strlen(tr->path) + strlen(w->image.name) + 2;
        image_name = malloc(need);
        BT_ASSERT(image_name);
        snprintf(image_name, need, "%s:%s", tr->path, w->image.name);
        cJSON_DeleteItemFromObjectCaseSensitive(obj, o->image_key);
        cJSON_AddItemToObject(obj, o->image_key, cJSON_CreateString(image_name));
        /* the id is the sample key (webdataset's __key__), whatever the json says */
        cJSON_DeleteItemFromObjectCaseSensitive(obj, o->id_key);
        if (manifest_utf8_valid(w->key, strlen(w->key)))
            cJSON_AddItemToObject(obj, o->id_key, cJSON_CreateString(w->key));
    }
    size_t before = m->n;
    /* dir_len 0: the image string is kept as built, never joined to a directory */
    bt_status st = take_record(m, &c, lst, obj, o, 0, rec_cap);
    if (st == BT_OK && m->n > before) {
        if (*mem_cap < *rec_cap) {
            manifest_member *grown = realloc(m->members, *rec_cap * sizeof *grown);
            if (!grown) st = bt_fail(BT_ERR_NOMEM, "%s: out of memory", c.loc);
            else m->members = grown, *mem_cap = *rec_cap;
        }
        if (st == BT_OK)
            m->members[m->n - 1] = (manifest_member){w->image.offset, w->image.size, shard};
    }
    cJSON_Delete(obj);
    free(txt);
    free(json);
    free(image_name);
    return st;
}

/* Adds a member to the sample it belongs to (the caller starts a new sample on a new key). */
static void wds_add(wds_sample *w, tar_member *mb, const char *suffix) {
    tar_member *slot = NULL;
    int rank = -1;
    for (int i = 0; i < 4; i++)
        if (!strcmp(suffix, image_exts[i])) rank = i;
    if (rank >= 0) {
        if (w->image_rank == rank) snprintf(w->dup, sizeof w->dup, "%s", suffix);
        if (w->image_rank < 0 || rank < w->image_rank) {
            w->image_rank = rank;
            slot = &w->image;
        }
    } else if (!strcmp(suffix, "txt")) {
        if (w->has_txt) snprintf(w->dup, sizeof w->dup, "txt");
        w->has_txt = 1;
        slot = &w->txt;
    } else if (!strcmp(suffix, "json")) {
        if (w->has_json) snprintf(w->dup, sizeof w->dup, "json");
        w->has_json = 1;
        slot = &w->json;
    }
    if (slot) {
        free(slot->name);
        *slot = *mb;
        mb->name = NULL;
    }
    free(mb->name);
    mb->name = NULL;
}

static bt_status load_shards(manifest *m, const manifest_options *o) {
    bt_status st = shards_expand(m->path, &m->shards, &m->n_shards);
    if (st != BT_OK) return st;
    m->shard_first = calloc(m->n_shards + 1, sizeof *m->shard_first);
    if (!m->shard_first) return bt_fail(BT_ERR_NOMEM, "%s: out of memory", m->path);
    size_t rec_cap = 0, mem_cap = 0;
    for (size_t s = 0; s < m->n_shards && st == BT_OK; s++) {
        m->shard_first[s] = (int64_t)m->n;
        tar_reader tr;
        if ((st = tar_reader_open(&tr, m->shards[s])) != BT_OK) break;
        wds_sample w;
        memset(&w, 0, sizeof w);
        wds_sample_reset(&w);
        size_t number = 0;
        for (;;) {
            tar_member mb;
            int got = tar_reader_next(&tr, &mb, &st);
            if (got < 0) {
                /* The offsets past a bad header are unknown: the rest of the shard is lost. */
                if (o->on_error == MANIFEST_ON_ERROR_STOP) break;
                char msg[8400];
                snprintf(msg, sizeof msg, "%s; the rest of this shard is skipped",
                         bt_error_message());
                st = add_problem(m, msg);
                if (st != BT_OK) break;
            }
            char suffix[16];
            size_t key_len = got == 1 ? wds_split(mb.name, suffix, sizeof suffix) : 0;
            int same = got == 1 && w.key && strlen(w.key) == key_len &&
                       !memcmp(w.key, mb.name, key_len);
            if (w.key && !same) {
                st = wds_finish(m, &tr, &w, o, &rec_cap, &mem_cap, (uint32_t)s);
                wds_sample_reset(&w);
                if (st != BT_OK) {
                    if (got == 1) free(mb.name);
                    break;
                }
            }
            if (got != 1) break;
            if (!w.key) {
                w.key = strndup(mb.name, key_len);
                BT_ASSERT(w.key);
                w.number = ++number;
            }
            wds_add(&w, &mb, suffix);
        }
        wds_sample_reset(&w);
        tar_reader_close(&tr);
    }
    m->shard_first[m->n_shards] = (int64_t)m->n;
    m->n_lines = m->n + m->n_skipped;
    return st;
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

    struct stat sb;
    int is_dir = stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
    char *meta = NULL;
    bt_status mst = is_dir ? imagefolder_metadata(path, &meta) : BT_OK;
    if (shards_is_spec(path) || (is_dir && mst == BT_ERR_MISSING && shards_dir_has_tar(path))) {
        m->path = strdup(path);
        if (!m->path) return bt_fail(BT_ERR_NOMEM, "%s: out of memory", path);
        bt_status sst = load_shards(m, &o);
        if (sst != BT_OK) return sst;
        return manifest_check_nonempty(m);
    }
    if (is_dir) {
        if (mst != BT_OK) {
            m->path = strdup(path);
            return mst;
        }
        m->path = meta;
        /* imagefolder names its image column file_name; an explicitly renamed column wins. */
        if (!strcmp(o.image_key, "image")) o.image_key = "file_name";
    } else {
        m->path = strdup(path);
    }
    if (!m->path) return bt_fail(BT_ERR_NOMEM, "%s: out of memory", path);

    FILE *f;
    bt_status st = bt_fopen_regular(m->path, "manifest", &f);
    if (st != BT_OK) return st;

    /* The directory part including its trailing '/', or "" for a bare file name. */
    const char *slash = strrchr(m->path, '/');
    size_t dir_len = slash ? (size_t)(slash - m->path) + 1 : 0;
    char delim = manifest_delimiter(m->path);
    st = delim ? load_csv(m, f, &o, dir_len, delim) : load_jsonl(m, f, &o, dir_len);
    fclose(f);
    if (st != BT_OK) return st;
    return manifest_check_nonempty(m);
}

void manifest_where(const manifest *m, size_t i, char *buf, size_t cap) {
    const manifest_record *r = &m->records[i];
    if (m->members)
        snprintf(buf, cap, "%s: sample '%s'", m->shards[m->members[i].shard],
                 r->id != MANIFEST_NONE ? m->arena + r->id : "?");
    else
        snprintf(buf, cap, "%s:%d", m->path, r->line);
}

void manifest_free(manifest *m) {
    if (!m) return;
    shards_free_paths(m->shards, m->n_shards);
    free(m->shard_first);
    free(m->members);
    for (size_t i = 0; i < m->n_skipped; i++)
        free(m->problems[i]);
    free(m->problems);
    free(m->records);
    free(m->arena);
    free(m->path);
    memset(m, 0, sizeof *m);
}
