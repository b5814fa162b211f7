/* tb_reader.c: an independent TensorBoard event-file reader (see tb_reader.h). Compiled into
 * test_tensorboard, and with -DTBR_MAIN as the `tb_read` tool:
 *     tb_read FILE      prints "file_version V", "session_log S at step N" and
 *                       "STEP TAG VALUE" (value with %.9g, exact for a float) per event;
 *                       exits 1 with the error on a malformed file.
 * Everything multi-byte is assembled from bytes explicitly (no host-order memcpy), so this
 * file also documents the wire format. */
#include "tb_reader.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint32_t tbr_crc32c(const uint8_t *p, size_t n) {
    uint32_t crc = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        crc ^= p[i];
        for (int b = 0; b < 8; b++) {
            uint32_t lsb = crc & 1u;
            crc >>= 1;
            if (lsb) crc ^= 0x82F63B78u;
        }
    }
    return ~crc;
}

static uint32_t tbr_mask(uint32_t c) {
    uint32_t rot = (c >> 15) | (c << 17);
    return rot + 0xa282ead8u;
}

static uint64_t le64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void tbr_err(char *err, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, cap, fmt, ap);
    va_end(ap);
}

/* --- protobuf wire format ---------------------------------------------------------------- */

typedef struct pbr {
    const uint8_t *p, *end;
} pbr;

/* Returns 0 on success. */
static int pbr_varint(pbr *r, uint64_t *v) {
    uint64_t x = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (r->p >= r->end) return -1;
        uint8_t b = *r->p++;
        x |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) {
            *v = x;
            return 0;
        }
    }
    return -1; /* more than 10 bytes */
}

typedef struct pbr_field {
    uint32_t number;
    uint32_t wire;
    uint64_t varint;      /* wire 0 */
    const uint8_t *bytes; /* wire 1 (8 bytes), 2 (len bytes), 5 (4 bytes) */
    uint64_t len;
} pbr_field;

/* Next field, or 1 at the end of the message, -1 when malformed. */
static int pbr_next(pbr *r, pbr_field *f, const char **why) {
    if (r->p == r->end) return 1;
    uint64_t key;
    if (pbr_varint(r, &key)) {
        *why = "truncated field key";
        return -1;
    }
    f->number = (uint32_t)(key >> 3);
    f->wire = (uint32_t)(key & 7);
    if (f->number == 0) {
        *why = "field number 0";
        return -1;
    }
    size_t left;
    switch (f->wire) {
    case 0:
        if (pbr_varint(r, &f->varint)) {
            *why = "truncated varint";
            return -1;
        }
        return 0;
    case 1:
        f->len = 8;
        break;
    case 5:
        f->len = 4;
        break;
    case 2:
        if (pbr_varint(r, &f->len)) {
            *why = "truncated length";
            return -1;
        }
        break;
    default:
        *why = "unsupported wire type (groups or invalid)";
        return -1;
    }
    left = (size_t)(r->end - r->p);
    if (f->len > left) {
        *why = "field runs past the end of its message";
        return -1;
    }
    f->bytes = r->p;
    r->p += f->len;
    return 0;
}

/* --- events -------------------------------------------------------------------------- */

typedef struct tbr_list {
    tbr_event *ev;
    size_t n, cap;
} tbr_list;

static tbr_event *tbr_push(tbr_list *l) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        tbr_event *e = realloc(l->ev, cap * sizeof *e);
        if (!e) return NULL;
        l->ev = e;
        l->cap = cap;
    }
    tbr_event *e = &l->ev[l->n++];
    memset(e, 0, sizeof *e);
    return e;
}

static void copy_text(char *dst, size_t cap, const uint8_t *src, uint64_t n) {
    size_t k = n < cap - 1 ? (size_t)n : cap - 1;
    memcpy(dst, src, k);
    dst[k] = 0;
}

/* Parses one Value message into e (kind, tag, value). */
static int parse_value(const uint8_t *p, uint64_t n, tbr_event *e, const char **why) {
    pbr r = {p, p + n};
    pbr_field f = {0};
    int rc, has_simple = 0, is_text = 0, dtype = 0, has_string = 0;
    while ((rc = pbr_next(&r, &f, why)) == 0) {
        if (f.number == 1 && f.wire == 2)
            copy_text(e->text, sizeof e->text, f.bytes, f.len);
        else if (f.number == 2 && f.wire == 5) {
            uint32_t bits = le32(f.bytes);
            memcpy(&e->value, &bits, 4);
            has_simple = 1;
        } else if (f.number <= 2) {
            *why = "Summary.Value tag/simple_value with the wrong wire type";
            return -1;
        } else if (f.number == 8 && f.wire == 2) { /* TensorProto */
            pbr t = {f.bytes, f.bytes + f.len};
            pbr_field g = {0};
            int rt;
            while ((rt = pbr_next(&t, &g, why)) == 0) {
                if (g.number == 1 && g.wire == 0) dtype = (int)g.varint;
                if (g.number == 8 && g.wire == 2 && !has_string) {
                    copy_text(e->string, sizeof e->string, g.bytes, g.len);
                    e->string_len = (size_t)g.len;
                    has_string = 1;
                }
            }
            if (rt < 0) return -1;
        } else if (f.number == 9 && f.wire == 2) { /* SummaryMetadata */
            pbr m = {f.bytes, f.bytes + f.len};
            pbr_field g = {0};
            int rm;
            while ((rm = pbr_next(&m, &g, why)) == 0) {
                if (g.number != 1 || g.wire != 2) continue; /* plugin_data */
                pbr d = {g.bytes, g.bytes + g.len};
                pbr_field h = {0};
                int rd;
                while ((rd = pbr_next(&d, &h, why)) == 0)
                    if (h.number == 1 && h.wire == 2 && h.len == 4 && !memcmp(h.bytes, "text", 4))
                        is_text = 1;
                if (rd < 0) return -1;
            }
            if (rm < 0) return -1;
        }
    }
    if (rc < 0) return -1;
    e->kind = has_simple ? TBR_SCALAR
              : is_text && dtype == 7 && has_string ? TBR_TEXT
                                                    : TBR_VALUE_OTHER;
    return 0;
}

/* Parses one Event; appends one entry per Summary.Value (or one entry otherwise). */
static int parse_event(const uint8_t *p, size_t n, tbr_list *out, const char **why) {
    double wall = 0;
    int64_t step = 0;
    pbr r = {p, p + n};
    pbr_field f = {0};
    int rc;
    size_t first = out->n;
    int any = 0;
    tbr_event *e;
    while ((rc = pbr_next(&r, &f, why)) == 0) {
        if (f.number == 1) {
            if (f.wire != 1) goto wrong_wire;
            uint64_t bits = le64(f.bytes);
            memcpy(&wall, &bits, 8);
        } else if (f.number == 2) {
            if (f.wire != 0) goto wrong_wire;
            step = (int64_t)f.varint;
        } else if (f.number == 3) {
            if (f.wire != 2) goto wrong_wire;
            if (!(e = tbr_push(out))) goto nomem;
            e->kind = TBR_FILE_VERSION;
            copy_text(e->text, sizeof e->text, f.bytes, f.len);
            any = 1;
        } else if (f.number == 5) {
            if (f.wire != 2) goto wrong_wire;
            pbr s = {f.bytes, f.bytes + f.len};
            pbr_field v = {0};
            int rs;
            while ((rs = pbr_next(&s, &v, why)) == 0) {
                if (v.number != 1) continue;
                if (v.wire != 2) goto wrong_wire;
                if (!(e = tbr_push(out))) goto nomem;
                if (parse_value(v.bytes, v.len, e, why)) return -1;
                any = 1;
            }
            if (rs < 0) return -1;
        } else if (f.number == 7) {
            if (f.wire != 2) goto wrong_wire;
            if (!(e = tbr_push(out))) goto nomem;
            e->kind = TBR_SESSION_LOG;
            pbr s = {f.bytes, f.bytes + f.len};
            pbr_field v = {0};
            int rs;
            while ((rs = pbr_next(&s, &v, why)) == 0)
                if (v.number == 1 && v.wire == 0) e->status = (int)v.varint;
            if (rs < 0) return -1;
            any = 1;
        }
    }
    if (rc < 0) return -1;
    if (!any) {
        if (!(e = tbr_push(out))) goto nomem;
        e->kind = TBR_EMPTY;
    }
    /* wall_time and step may come after the payload in the encoding: set them last. */
    for (size_t i = first; i < out->n; i++) {
        out->ev[i].wall_time = wall;
        out->ev[i].step = step;
    }
    return 0;
wrong_wire:
    *why = "a known Event field with the wrong wire type";
    return -1;
nomem:
    *why = "out of memory";
    return -1;
}

int tbr_read_file(const char *path, tbr_event **ev, size_t *n, char *err, size_t err_cap) {
    *ev = NULL;
    *n = 0;
    FILE *f = fopen(path, "rb");
    if (!f) {
        tbr_err(err, err_cap, "%s: cannot open", path);
        return -1;
    }
    tbr_list l = {0};
    uint8_t head[12], foot[4];
    uint8_t *data = NULL;
    long offset = 0;
    int rec = 0;
    const char *why = NULL;
    for (;; rec++) {
        size_t got = fread(head, 1, 12, f);
        if (got == 0 && feof(f)) break;
        if (got != 12) {
            tbr_err(err, err_cap, "%s: record %d at offset %ld: truncated header (%zu of 12 bytes)",
                    path, rec, offset, got);
            goto fail;
        }
        uint64_t len = le64(head);
        uint32_t want = le32(head + 8), have = tbr_mask(tbr_crc32c(head, 8));
        if (want != have) {
            tbr_err(
                err, err_cap,
                "%s: record %d at offset %ld: length CRC mismatch (stored 0x%08x, computed 0x%08x)",
                path, rec, offset, want, have);
            goto fail;
        }
        if (len > (1u << 24)) {
            tbr_err(err, err_cap, "%s: record %d at offset %ld: implausible length %llu", path, rec,
                    offset, (unsigned long long)len);
            goto fail;
        }
        uint8_t *d = realloc(data, len ? len : 1);
        if (!d) {
            tbr_err(err, err_cap, "%s: out of memory", path);
            goto fail;
        }
        data = d;
        if (fread(data, 1, len, f) != len || fread(foot, 1, 4, f) != 4) {
            tbr_err(err, err_cap, "%s: record %d at offset %ld: truncated data", path, rec, offset);
            goto fail;
        }
        want = le32(foot);
        have = tbr_mask(tbr_crc32c(data, len));
        if (want != have) {
            tbr_err(
                err, err_cap,
                "%s: record %d at offset %ld: data CRC mismatch (stored 0x%08x, computed 0x%08x)",
                path, rec, offset, want, have);
            goto fail;
        }
        if (parse_event(data, len, &l, &why)) {
            tbr_err(err, err_cap, "%s: record %d at offset %ld: bad Event protobuf: %s", path, rec,
                    offset, why);
            goto fail;
        }
        offset += 16 + (long)len;
    }
    fclose(f);
    free(data);
    *ev = l.ev;
    *n = l.n;
    return 0;
fail:
    fclose(f);
    free(data);
    free(l.ev);
    return -1;
}

#ifdef TBR_MAIN
int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: tb_read EVENT_FILE\n");
        return 2;
    }
    tbr_event *ev;
    size_t n;
    char err[512];
    if (tbr_read_file(argv[1], &ev, &n, err, sizeof err)) {
        fprintf(stderr, "tb_read: %s\n", err);
        return 1;
    }
    for (size_t i = 0; i < n; i++) {
        switch (ev[i].kind) {
        case TBR_FILE_VERSION:
            printf("file_version %s\n", ev[i].text);
            break;
        case TBR_SCALAR:
            printf("%lld %s %.9g\n", (long long)ev[i].step, ev[i].text, (double)ev[i].value);
            break;
        case TBR_TEXT:
            printf("%lld %s text (%zu bytes):\n%s\n", (long long)ev[i].step, ev[i].text,
                   ev[i].string_len, ev[i].string);
            break;
        case TBR_VALUE_OTHER:
            printf("%lld %s (not a scalar)\n", (long long)ev[i].step, ev[i].text);
            break;
        case TBR_SESSION_LOG:
            printf("session_log %d at step %lld\n", ev[i].status, (long long)ev[i].step);
            break;
        case TBR_EMPTY:
            printf("empty event at step %lld\n", (long long)ev[i].step);
            break;
        }
    }
    free(ev);
    return 0;
}
#endif
