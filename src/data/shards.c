/* shards.c: shard lists, the tar member reader and writer (see shards.h for the formats).
 *
 * A hand-written ustar/pax/GNU reader rather than libarchive (docs/architecture.md says why):
 * bt reads members in place by offset, and libarchive does not expose where a member's data
 * starts in the file; the subset needed here is a fixed 512-byte header, three name
 * conventions and two size encodings, every field bounds-checked (fuzz_tar).
 *
 * Deliberately not done: following links inside the archive, sparse files, old V7 headers
 * without a checksum match (they are refused like any bad checksum). */
#include "data/shards.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "data/image.h"
#include "data/manifest.h"
#include "fileio.h"
#include "mem.h"

enum { TAR_BLOCK = 512, TAR_MAX_META = 1 << 20 /* pax / long-name records */ };

/* ---- shard lists -------------------------------------------------------------------------- */

int shards_is_spec(const char *spec) {
    size_t n = strlen(spec);
    return strstr(spec, "::") || strchr(spec, '{') || (n >= 4 && !strcmp(spec + n - 4, ".tar"));
}

typedef struct path_list {
    char **v;
    size_t n, cap;
} path_list;

static bt_status list_push(path_list *l, char *s, const char *spec) {
    if (!s) return bt_fail(BT_ERR_NOMEM, "%s: out of memory expanding the shard list", spec);
    if (l->n == SHARDS_MAX) {
        free(s);
        return bt_fail(BT_ERR_ARG, "%s: more than %d shards", spec, SHARDS_MAX);
    }
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 16;
        char **grown = realloc(l->v, l->cap * sizeof *grown);
        if (!grown) {
            free(s);
            return bt_fail(BT_ERR_NOMEM, "%s: out of memory expanding the shard list", spec);
        }
        l->v = grown;
    }
    l->v[l->n++] = s;
    return BT_OK;
}

static int all_digits(const char *s, size_t n) {
    if (n == 0 || n > 18) return 0;
    for (size_t i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9') return 0;
    return 1;
}

/* Expands the first brace group of `s` (recursively the rest) into l. */
static bt_status expand_braces(const char *s, const char *spec, path_list *l) {
    const char *open = strchr(s, '{');
    if (!open) {
        if (strchr(s, '}'))
            return bt_fail(BT_ERR_ARG, "%s: '}' without '{' in '%s'", spec, s);
        return list_push(l, strdup(s), spec);
    }
    const char *close = strchr(open + 1, '}');
    const char *inner = strchr(open + 1, '{');
    if (!close) return bt_fail(BT_ERR_ARG, "%s: '{' without '}' in '%s'", spec, s);
    if (inner && inner < close)
        return bt_fail(BT_ERR_ARG, "%s: nested braces are not supported in '%s'", spec, s);
    size_t pre = (size_t)(open - s);
    const char *body = open + 1, *rest = close + 1;
    size_t body_len = (size_t)(close - body);
    size_t buf_cap = strlen(s) + 32;
    char *buf = malloc(buf_cap);
    if (!buf) return bt_fail(BT_ERR_NOMEM, "%s: out of memory", spec);
    bt_status st = BT_OK;
    const char *dots = NULL;
    for (size_t i = 0; i + 1 < body_len; i++)
        if (body[i] == '.' && body[i + 1] == '.') {
            dots = body + i;
            break;
        }
    if (dots) {
        size_t la = (size_t)(dots - body), lb = body_len - la - 2;
        if (!all_digits(body, la) || !all_digits(dots + 2, lb)) {
            free(buf);
            return bt_fail(BT_ERR_ARG, "%s: range {%.*s} must be {first..last} with decimal "
                           "bounds", spec, (int)body_len, body);
        }
        long long a = strtoll(body, NULL, 10), b = strtoll(dots + 2, NULL, 10);
        if (a > b) {
            free(buf);
            return bt_fail(BT_ERR_ARG, "%s: range {%.*s} runs backwards", spec, (int)body_len,
                           body);
        }
        if (b - a >= SHARDS_MAX) {
            free(buf);
            return bt_fail(BT_ERR_ARG, "%s: range {%.*s} has more than %d shards", spec,
                           (int)body_len, body, SHARDS_MAX);
        }
        for (long long v = a; v <= b && st == BT_OK; v++) {
            snprintf(buf, buf_cap, "%.*s%0*lld%s", (int)pre, s, (int)la, v, rest);
            st = expand_braces(buf, spec, l);
        }
    } else if (memchr(body, ',', body_len)) {
        const char *p = body;
        while (st == BT_OK) {
            const char *comma = memchr(p, ',', (size_t)(close - p));
            const char *end = comma ? comma : close;
            snprintf(buf, buf_cap, "%.*s%.*s%s", (int)pre, s, (int)(end - p), p, rest);
            st = expand_braces(buf, spec, l);
            if (!comma) break;
            p = comma + 1;
        }
    } else {
        st = bt_fail(BT_ERR_ARG, "%s: '{%.*s}' is neither a range {a..b} nor a list {a,b}", spec,
                     (int)body_len, body);
    }
    free(buf);
    return st;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int ends_tar(const char *s) {
    size_t n = strlen(s);
    return n >= 4 && !strcmp(s + n - 4, ".tar");
}

/* The .tar files of a directory, sorted, appended to l. */
static bt_status list_dir(const char *dir, const char *spec, path_list *l) {
    DIR *d = opendir(dir);
    if (!d)
        return bt_fail(BT_ERR_IO, "%s: cannot list directory %s: %s", spec, dir, strerror(errno));
    size_t first = l->n;
    bt_status st = BT_OK;
    struct dirent *e;
    size_t dl = strlen(dir);
    while (st == BT_OK && (e = readdir(d))) {
        if (!ends_tar(e->d_name) || e->d_name[0] == '.') continue;
        size_t need = dl + strlen(e->d_name) + 2;
        char *p = malloc(need);
        if (p) snprintf(p, need, "%s%s%s", dir, dl && dir[dl - 1] == '/' ? "" : "/", e->d_name);
        st = list_push(l, p, spec);
    }
    closedir(d);
    if (st == BT_OK && l->n == first)
        st = bt_fail(BT_ERR_MISSING, "%s: directory %s holds no .tar shard", spec, dir);
    if (st == BT_OK) qsort(l->v + first, l->n - first, sizeof *l->v, cmp_str);
    return st;
}

void shards_free_paths(char **paths, size_t n) {
    for (size_t i = 0; i < n; i++)
        free(paths[i]);
    free(paths);
}

bt_status shards_expand(const char *spec, char ***paths, size_t *n) {
    *paths = NULL;
    *n = 0;
    path_list l = {0};
    bt_status st = BT_OK;
    const char *p = spec;
    while (st == BT_OK) {
        const char *sep = strstr(p, "::");
        size_t len = sep ? (size_t)(sep - p) : strlen(p);
        char *part = strndup(p, len);
        if (!part) {
            st = bt_fail(BT_ERR_NOMEM, "%s: out of memory", spec);
            break;
        }
        struct stat sb;
        if (!part[0])
            st = bt_fail(BT_ERR_ARG, "%s: empty entry in the shard list", spec);
        else if (!strchr(part, '{') && stat(part, &sb) == 0 && S_ISDIR(sb.st_mode))
            st = list_dir(part, spec, &l);
        else
            st = expand_braces(part, spec, &l);
        free(part);
        if (!sep) break;
        p = sep + 2;
    }
    for (size_t i = 0; st == BT_OK && i < l.n; i++)
        if (!ends_tar(l.v[i]))
            st = bt_fail(BT_ERR_ARG, "%s: shard '%s' does not end in .tar (shards are read in "
                         "place: uncompressed tar only)", spec, l.v[i]);
    if (st != BT_OK) {
        shards_free_paths(l.v, l.n);
        return st;
    }
    *paths = l.v;
    *n = l.n;
    return BT_OK;
}

/* ---- reading ------------------------------------------------------------------------------ */

bt_status tar_reader_open(tar_reader *r, const char *path) {
    memset(r, 0, sizeof *r);
    r->path = path;
    struct stat sb;
    bt_status st = bt_open_regular(path, "shard", &r->fd, &sb);
    if (st != BT_OK) {
        r->done = 1;
        return st;
    }
    r->file_size = (uint64_t)sb.st_size;
    return BT_OK;
}

void tar_reader_close(tar_reader *r) {
    if (r->fd >= 0) close(r->fd);
    r->fd = -1;
}

/* Reads n bytes at off; 0 on success. */
static int read_at(int fd, void *buf, size_t n, uint64_t off) {
    size_t got = 0;
    while (got < n) {
        ssize_t k = pread(fd, (char *)buf + got, n - got, (off_t)(off + got));
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        got += (size_t)k;
    }
    return 0;
}

/* An octal field (spaces/NULs around the digits) or GNU base-256; -1 when malformed. */
static int64_t tar_number(const unsigned char *p, size_t n) {
    if (p[0] & 0x80) {
        if (p[0] != 0x80) return -1; /* negative or wider than 63 bits */
        uint64_t v = 0;
        for (size_t i = 1; i < n; i++) {
            if (v >> 55) return -1;
            v = (v << 8) | p[i];
        }
        return v > INT64_MAX ? -1 : (int64_t)v;
    }
    size_t i = 0;
    while (i < n && p[i] == ' ')
        i++;
    uint64_t v = 0;
    for (; i < n && p[i] >= '0' && p[i] <= '7'; i++) {
        if (v >> 60) return -1;
        v = v * 8 + (uint64_t)(p[i] - '0');
    }
    for (; i < n; i++)
        if (p[i] != ' ' && p[i] != '\0') return -1;
    return (int64_t)v;
}

static int tar_checksum_ok(const unsigned char *h) {
    int64_t want = tar_number(h + 148, 8);
    if (want < 0) return 0;
    uint64_t u = 0;
    int64_t s = 0; /* some old writers summed signed chars */
    for (int i = 0; i < TAR_BLOCK; i++) {
        unsigned char c = (i >= 148 && i < 156) ? ' ' : h[i];
        u += c;
        s += (signed char)c;
    }
    return (int64_t)u == want || s == want;
}

/* Parses pax records "LEN key=value\n" for path and size. 0, or -1 when malformed. */
static int pax_parse(const char *d, size_t n, char **path, int64_t *size) {
    size_t i = 0;
    while (i < n) {
        size_t len = 0, j = i;
        while (j < n && d[j] >= '0' && d[j] <= '9' && len < TAR_MAX_META)
            len = len * 10 + (size_t)(d[j++] - '0');
        if (j == i || j >= n || d[j] != ' ' || len <= j - i + 1 || len > n - i ||
            d[i + len - 1] != '\n')
            return -1;
        const char *kv = d + j + 1, *end = d + i + len - 1;
        const char *eq = memchr(kv, '=', (size_t)(end - kv));
        if (!eq) return -1;
        size_t klen = (size_t)(eq - kv), vlen = (size_t)(end - eq - 1);
        if (klen == 4 && !memcmp(kv, "path", 4)) {
            free(*path);
            *path = strndup(eq + 1, vlen);
            if (!*path) return -1;
        } else if (klen == 4 && !memcmp(kv, "size", 4)) {
            if (!all_digits(eq + 1, vlen)) return -1;
            *size = strtoll(eq + 1, NULL, 10);
        }
        i += len;
    }
    return 0;
}

int tar_reader_next(tar_reader *r, tar_member *m, bt_status *err) {
    memset(m, 0, sizeof *m);
    char *pending_name = NULL;
    int64_t pending_size = -1;
    uint64_t first = UINT64_MAX;
    unsigned char h[TAR_BLOCK];
    while (!r->done) {
        uint64_t at = r->pos;
        if (at == r->file_size && first == UINT64_MAX) break; /* end without zero blocks */
        if (at >= r->file_size || r->file_size - at < TAR_BLOCK) {
            *err = bt_fail(BT_ERR_FORMAT, "%s: truncated tar header at byte %" PRIu64 " (file "
                           "has %" PRIu64 " bytes)", r->path, at, r->file_size);
            goto fail;
        }
        if (read_at(r->fd, h, TAR_BLOCK, at) != 0) {
            *err = bt_fail(BT_ERR_IO, "%s: read error at byte %" PRIu64, r->path, at);
            goto fail;
        }
        int zero = 1;
        for (int i = 0; i < TAR_BLOCK && zero; i++)
            zero = h[i] == 0;
        if (zero) {
            if (first != UINT64_MAX) {
                *err = bt_fail(BT_ERR_FORMAT, "%s: pax or long-name header at byte %" PRIu64
                               " is not followed by a member", r->path, first);
                goto fail;
            }
            break;
        }
        if (!tar_checksum_ok(h)) {
            *err = bt_fail(BT_ERR_FORMAT, "%s: bad tar header checksum at byte %" PRIu64
                           " (not a tar file, or corrupt)", r->path, at);
            goto fail;
        }
        int64_t size = tar_number(h + 124, 12);
        char type = (char)h[156];
        if (size < 0) {
            *err = bt_fail(BT_ERR_FORMAT, "%s: malformed size field in the tar header at byte "
                           "%" PRIu64, r->path, at);
            goto fail;
        }
        if (first == UINT64_MAX) first = at;
        int regular = type == '0' || type == '\0' || type == '7';
        if (regular && pending_size >= 0) size = pending_size;
        uint64_t data = at + TAR_BLOCK;
        if ((uint64_t)size > r->file_size - data) {
            *err = bt_fail(BT_ERR_FORMAT, "%s: member at byte %" PRIu64 " declares %" PRId64
                           " bytes, past the end of the file (%" PRIu64 " bytes; truncated?)",
                           r->path, at, size, r->file_size);
            goto fail;
        }
        uint64_t next = data + (((uint64_t)size + TAR_BLOCK - 1) / TAR_BLOCK) * TAR_BLOCK;
        r->pos = next;
        if (type == 'x' || type == 'L') {
            if (size > TAR_MAX_META) {
                *err = bt_fail(BT_ERR_FORMAT, "%s: %s header at byte %" PRIu64 " holds %" PRId64
                               " bytes (at most %d)", r->path, type == 'x' ? "pax" : "long-name",
                               at, size, TAR_MAX_META);
                goto fail;
            }
            char *meta = malloc((size_t)size + 1);
            BT_ASSERT(meta);
            if (read_at(r->fd, meta, (size_t)size, data) != 0) {
                free(meta);
                *err = bt_fail(BT_ERR_IO, "%s: read error at byte %" PRIu64, r->path, data);
                goto fail;
            }
            meta[size] = '\0';
            if (type == 'L') {
                free(pending_name);
                pending_name = strdup(meta); /* up to the first NUL */
                BT_ASSERT(pending_name);
            } else if (pax_parse(meta, (size_t)size, &pending_name, &pending_size) != 0) {
                free(meta);
                *err = bt_fail(BT_ERR_FORMAT, "%s: malformed pax header at byte %" PRIu64,
                               r->path, at);
                goto fail;
            }
            free(meta);
            continue;
        }
        if (!regular) { /* directory, link, device, pax global, ...: not a member */
            free(pending_name);
            pending_name = NULL;
            pending_size = -1;
            first = UINT64_MAX;
            continue;
        }
        if (pending_name) {
            m->name = pending_name;
        } else {
            char name[256 + 2];
            size_t nl = strnlen((const char *)h, 100);
            size_t pl =
                memcmp(h + 257, "ustar\0", 6) == 0 ? strnlen((const char *)h + 345, 155) : 0;
            snprintf(name, sizeof name, "%.*s%s%.*s", (int)pl, (const char *)h + 345, pl ? "/" : "",
                     (int)nl, (const char *)h);
            m->name = strdup(name);
            BT_ASSERT(m->name);
        }
        m->offset = data;
        m->size = (uint64_t)size;
        m->header = first;
        return 1;
    }
    r->done = 1;
    free(pending_name);
    return 0;
fail:
    r->done = 1;
    free(pending_name);
    return -1;
}

bt_status tar_reader_read(tar_reader *r, uint64_t offset, uint64_t size, char **out) {
    *out = NULL;
    if (size > TAR_MAX_META)
        return bt_fail(BT_ERR_FORMAT, "%s: member at byte %" PRIu64 " has %" PRIu64 " bytes; "
                       "at most %d for text", r->path, offset, size, TAR_MAX_META);
    char *buf = malloc((size_t)size + 1);
    if (!buf) return bt_fail(BT_ERR_NOMEM, "%s: out of memory", r->path);
    if (read_at(r->fd, buf, (size_t)size, offset) != 0) {
        free(buf);
        return bt_fail(BT_ERR_IO, "%s: read error at byte %" PRIu64, r->path, offset);
    }
    buf[size] = '\0';
    *out = buf;
    return BT_OK;
}

bt_status shards_read_member(const char *shard, const char *member, uint64_t offset,
                             uint64_t size, uint8_t **bytes) {
    *bytes = NULL;
    int fd;
    struct stat sb;
    bt_status st = bt_open_regular(shard, "shard", &fd, &sb);
    if (st != BT_OK) return st;
    if ((uint64_t)sb.st_size < offset || (uint64_t)sb.st_size - offset < size) {
        close(fd);
        return bt_fail(BT_ERR_IO, "%s: member '%s' (%" PRIu64 " bytes at %" PRIu64 ") lies past "
                       "the end of the file: the shard changed since it was indexed", shard,
                       member, size, offset);
    }
    uint8_t *buf = bt_alloc(size ? (size_t)size : 1);
    if (read_at(fd, buf, (size_t)size, offset) != 0) {
        close(fd);
        bt_free(buf);
        return bt_fail(BT_ERR_IO, "%s: read error in member '%s'", shard, member);
    }
    close(fd);
    *bytes = buf;
    return BT_OK;
}

/* ---- writing ------------------------------------------------------------------------------ */

static bt_status write_block_header(FILE *f, const char *what, const char *name, size_t size,
                                    char type) {
    unsigned char h[TAR_BLOCK];
    memset(h, 0, sizeof h);
    memcpy(h, name, strnlen(name, 100));
    memcpy(h + 100, "0000644", 7);
    memcpy(h + 108, "0000000", 7);
    memcpy(h + 116, "0000000", 7);
    snprintf((char *)h + 124, 12, "%011llo", (unsigned long long)size);
    memcpy(h + 136, "00000000000", 11);
    h[156] = (unsigned char)type;
    memcpy(h + 257, "ustar\0" "00", 8);
    memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < TAR_BLOCK; i++)
        sum += h[i];
    snprintf((char *)h + 148, 8, "%06o", sum);
    h[155] = ' ';
    if (fwrite(h, 1, TAR_BLOCK, f) != TAR_BLOCK)
        return bt_fail(BT_ERR_IO, "%s: write error: %s", what, strerror(errno));
    return BT_OK;
}

static bt_status write_data(FILE *f, const char *what, const void *data, size_t size) {
    static const unsigned char zeros[TAR_BLOCK];
    size_t pad = (TAR_BLOCK - size % TAR_BLOCK) % TAR_BLOCK;
    if ((size && fwrite(data, 1, size, f) != size) || (pad && fwrite(zeros, 1, pad, f) != pad))
        return bt_fail(BT_ERR_IO, "%s: write error: %s", what, strerror(errno));
    return BT_OK;
}

bt_status tar_write_member(FILE *f, const char *what, const char *name, const void *data,
                           size_t size) {
    if (size >= (size_t)1 << 33)
        return bt_fail(BT_ERR_UNSUPPORTED, "%s: member '%s' has %zu bytes; at most 8 GiB", what,
                       name, size);
    bt_status st;
    size_t nl = strlen(name);
    if (nl > 100) {
        /* "LEN path=NAME\n" where LEN counts its own digits */
        size_t body = nl + 7, len = body + 1;
        while (len != body + (size_t)snprintf(NULL, 0, "%zu", len))
            len = body + (size_t)snprintf(NULL, 0, "%zu", len);
        char *rec = malloc(len + 1);
        if (!rec) return bt_fail(BT_ERR_NOMEM, "%s: out of memory", what);
        snprintf(rec, len + 1, "%zu path=%s\n", len, name);
        st = write_block_header(f, what, "PaxHeader", len, 'x');
        if (st == BT_OK) st = write_data(f, what, rec, len);
        free(rec);
        if (st != BT_OK) return st;
    }
    st = write_block_header(f, what, name, size, '0');
    if (st == BT_OK) st = write_data(f, what, data, size);
    return st;
}

bt_status tar_write_end(FILE *f, const char *what) {
    static const unsigned char zeros[2 * TAR_BLOCK];
    if (fwrite(zeros, 1, sizeof zeros, f) != sizeof zeros)
        return bt_fail(BT_ERR_IO, "%s: write error: %s", what, strerror(errno));
    return BT_OK;
}

/* ---- writing a dataset as shards ---------------------------------------------------------- */

/* The image extension a shard member gets, from the bytes (not the source's file name). */
static const char *image_ext_of(const uint8_t *b, size_t n) {
    if (n >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF) return "jpg";
    if (n >= 8 && !memcmp(b, "\x89PNG\r\n\x1a\n", 8)) return "png";
    if (n >= 12 && !memcmp(b, "RIFF", 4) && !memcmp(b + 8, "WEBP", 4)) return "webp";
    return NULL;
}

bt_status shards_read_record_image(const manifest *m, size_t i, uint8_t **bytes, size_t *n) {
    if (!m->members) return image_read_file(bytes, n, manifest_image(m, i));
    const manifest_member *mb = &m->members[i];
    *n = (size_t)mb->size;
    return shards_read_member(m->shards[mb->shard], manifest_image(m, i), mb->offset, mb->size,
                              bytes);
}

/* Writes records [first, first + count) as one shard, atomically. */
static bt_status write_shard(const manifest *m, size_t first, size_t count, const char *path) {
    bt_atomic_file af;
    bt_status st = bt_atomic_open(&af, path, "shard");
    if (st != BT_OK) return st;
    for (size_t i = first; i < first + count && st == BT_OK; i++) {
        char where[4400], name[64];
        manifest_where(m, i, where, sizeof where);
        uint8_t *bytes = NULL;
        size_t n = 0;
        st = shards_read_record_image(m, i, &bytes, &n);
        if (st != BT_OK) {
            st = bt_fail_context(st, "%s", where);
            break;
        }
        const char *ext = image_ext_of(bytes, n);
        if (!ext) {
            bt_free(bytes);
            st = bt_fail(BT_ERR_FORMAT, "%s: image %s is neither JPEG, PNG nor WebP", where,
                         manifest_image(m, i));
            break;
        }
        /* key = the record's index (ids may hold dots, which end a webdataset key) */
        snprintf(name, sizeof name, "%09zu.%s", i, ext);
        st = tar_write_member(af.fp, path, name, bytes, n);
        bt_free(bytes);
        const char *cap = manifest_caption(m, i);
        snprintf(name, sizeof name, "%09zu.txt", i);
        if (st == BT_OK) st = tar_write_member(af.fp, path, name, cap, strlen(cap));
        if (st == BT_OK && (manifest_has_choices(m, i) || manifest_id(m, i))) {
            cJSON *j = cJSON_CreateObject();
            if (manifest_id(m, i)) cJSON_AddStringToObject(j, "id", manifest_id(m, i));
            if (manifest_has_choices(m, i)) {
                cJSON *arr = cJSON_AddArrayToObject(j, "caption_choices");
                for (int k = 0; k < MANIFEST_N_CHOICES; k++)
                    cJSON_AddItemToArray(arr, cJSON_CreateString(manifest_choice(m, i, k)));
                if (m->records[i].label >= 0)
                    cJSON_AddNumberToObject(j, "label", m->records[i].label);
            }
            char *text = cJSON_PrintUnformatted(j);
            cJSON_Delete(j);
            BT_ASSERT(text);
            snprintf(name, sizeof name, "%09zu.json", i);
            st = tar_write_member(af.fp, path, name, text, strlen(text));
            free(text);
        }
    }
    if (st == BT_OK) st = tar_write_end(af.fp, path);
    if (st != BT_OK) {
        bt_atomic_abort(&af);
        return st;
    }
    return bt_atomic_commit(&af);
}

bt_status shards_write(const manifest *m, const char *out_dir, size_t per_shard,
                       size_t *n_shards) {
    *n_shards = 0;
    BT_ASSERT(per_shard >= 1);
    size_t n = (m->n + per_shard - 1) / per_shard;
    if (n > 99999)
        return bt_fail(BT_ERR_ARG, "%zu samples per shard make %zu shards; at most 99999 (raise "
                       "the samples per shard)", per_shard, n);
    bt_status st = bt_check_output_dir(out_dir, "shard directory", 1);
    for (size_t s = 0; s < n && st == BT_OK; s++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/%05zu.tar", out_dir, s);
        size_t first = s * per_shard;
        size_t count = m->n - first < per_shard ? m->n - first : per_shard;
        st = write_shard(m, first, count, path);
        if (st == BT_OK) *n_shards = s + 1;
    }
    return st;
}
