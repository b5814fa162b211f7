/* tensorboard.c: TensorBoard event files written by hand (see tensorboard.h for the format).
 *
 * Protobuf encoding used here (the wire format, developers.google.com/protocol-buffers):
 * a field is a varint key (field_number << 3 | wire_type) then its value; wire type 0 is a
 * varint (int64 step, enum status), 1 a little-endian 64-bit value (double wall_time), 2 a
 * varint length then that many bytes (strings and embedded messages), 5 a little-endian
 * 32-bit value (float simple_value). Fields equal to their proto3 default (step 0) are still
 * written: a reader must accept them, and it keeps the encoder free of special cases.
 *
 * Deliberately not here: a general protobuf encoder (three fixed message shapes), buffering
 * across records (each record is one fwrite + fflush), big-endian hosts. */
#include "train/tensorboard.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "tensorboard.c stores fixed32/fixed64 fields in host order: little-endian hosts only"
#endif

/* --- CRC32C --------------------------------------------------------------------------- */

/* Reflected Castagnoli polynomial (0x1EDC6F41 bit-reversed). */
#define CRC32C_POLY 0x82F63B78u

static uint32_t crc32c_table[256];
static int crc32c_ready;

static void crc32c_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ CRC32C_POLY : c >> 1;
        crc32c_table[i] = c;
    }
    crc32c_ready = 1;
}

uint32_t bt_crc32c(const void *data, size_t n) {
    /* The table is filled once; the training loop logs from one thread (bt_log is not
     * thread-safe either), and a repeated fill would write the same values anyway. */
    if (!crc32c_ready) crc32c_init();
    const uint8_t *p = data;
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++)
        c = crc32c_table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

uint32_t bt_tb_masked_crc(uint32_t crc) {
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

/* --- protobuf encoding into a bounded buffer ------------------------------------------- */

/* Tags are short ("train/loss"); an event with a tag of TB_TAG_MAX bytes fits easily. */
enum { TB_TAG_MAX = 1024, TB_EVENT_MAX = 2048 };

/* A buffer of cap bytes at b: a stack array for scalars (PB_LOCAL), malloc'd for text. */
typedef struct pb_buf {
    uint8_t *b;
    size_t n, cap;
} pb_buf;
#define PB_LOCAL(name)                                                                      \
    uint8_t name##_mem[TB_EVENT_MAX];                                                       \
    pb_buf name = {name##_mem, 0, TB_EVENT_MAX}

static void pb_bytes(pb_buf *p, const void *src, size_t n) {
    BT_ASSERT(p->n + n <= p->cap);
    memcpy(p->b + p->n, src, n);
    p->n += n;
}

static void pb_varint(pb_buf *p, uint64_t v) {
    uint8_t tmp[10];
    size_t k = 0;
    do {
        uint8_t byte = v & 0x7F;
        v >>= 7;
        tmp[k++] = byte | (v ? 0x80 : 0);
    } while (v);
    pb_bytes(p, tmp, k);
}

static void pb_key(pb_buf *p, unsigned field, unsigned wire) {
    pb_varint(p, (uint64_t)field << 3 | wire);
}

static void pb_double(pb_buf *p, unsigned field, double v) {
    pb_key(p, field, 1);
    pb_bytes(p, &v, 8);
}

static void pb_float(pb_buf *p, unsigned field, float v) {
    pb_key(p, field, 5);
    pb_bytes(p, &v, 4);
}

/* int64 fields are encoded as the two's-complement varint (10 bytes when negative). */
static void pb_int64(pb_buf *p, unsigned field, int64_t v) {
    pb_key(p, field, 0);
    pb_varint(p, (uint64_t)v);
}

static void pb_len(pb_buf *p, unsigned field, const void *data, size_t n) {
    pb_key(p, field, 2);
    pb_varint(p, n);
    pb_bytes(p, data, n);
}

/* --- records -------------------------------------------------------------------------- */

static bt_status tb_write_record(bt_tb_writer *w, const uint8_t *data, size_t n) {
    uint8_t head[12];
    uint64_t len = n;
    memcpy(head, &len, 8);
    uint32_t lcrc = bt_tb_masked_crc(bt_crc32c(head, 8));
    memcpy(head + 8, &lcrc, 4);
    uint32_t dcrc = bt_tb_masked_crc(bt_crc32c(data, n));
    errno = 0;
    if (fwrite(head, 1, 12, w->f) != 12 || fwrite(data, 1, n, w->f) != n ||
        fwrite(&dcrc, 1, 4, w->f) != 4 || fflush(w->f) != 0)
        return bt_fail(BT_ERR_IO, "%s: cannot write TensorBoard event: %s", w->path,
                       strerror(errno ? errno : EIO));
    return BT_OK;
}

bt_status bt_tb_open(bt_tb_writer *w, const char *dir, double wall_time, int64_t resume_step) {
    memset(w, 0, sizeof *w);
    char host[256];
    if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = 0;
    /* A '/' in a host name would make a path; nothing else in it matters to TensorBoard. */
    for (char *c = host; *c; c++)
        if (*c == '/') *c = '_';
    int len = snprintf(w->path, sizeof w->path, "%s/events.out.tfevents.%010lld.%s.%ld", dir,
                       (long long)wall_time, host, (long)getpid());
    if (len < 0 || (size_t)len >= sizeof w->path)
        return bt_fail(BT_ERR_ARG, "%s: output directory path too long for an event file", dir);
    w->f = fopen(w->path, "wb");
    if (!w->f)
        return bt_fail(BT_ERR_IO, "%s: cannot create TensorBoard event file: %s", w->path,
                       strerror(errno));
    PB_LOCAL(p);
    pb_double(&p, 1, wall_time);
    pb_int64(&p, 2, 0);
    static const char version[] = "brain.Event:2";
    pb_len(&p, 3, version, sizeof version - 1);
    bt_status s = tb_write_record(w, p.b, p.n);
    if (s == BT_OK && resume_step > 0) {
        /* Event{wall_time, step, session_log{status: START}} */
        PB_LOCAL(sl);
        pb_key(&sl, 1, 0);
        pb_varint(&sl, 1);
        p.n = 0;
        pb_double(&p, 1, wall_time);
        pb_int64(&p, 2, resume_step + 1);
        pb_len(&p, 7, sl.b, sl.n);
        s = tb_write_record(w, p.b, p.n);
    }
    if (s != BT_OK) {
        fclose(w->f);
        w->f = NULL;
    }
    return s;
}

bt_status bt_tb_add_scalar(bt_tb_writer *w, const char *tag, int64_t step, double value,
                           double wall_time) {
    BT_ASSERT(w->f);
    size_t tag_len = strlen(tag);
    if (tag_len > TB_TAG_MAX)
        return bt_fail(BT_ERR_ARG, "TensorBoard tag of %zu bytes (at most %d): %.40s...", tag_len,
                       TB_TAG_MAX, tag);
    PB_LOCAL(val);
    PB_LOCAL(sum);
    PB_LOCAL(ev);
    pb_len(&val, 1, tag, tag_len);
    pb_float(&val, 2, (float)value);
    pb_len(&sum, 1, val.b, val.n);
    pb_double(&ev, 1, wall_time);
    pb_int64(&ev, 2, step);
    pb_len(&ev, 5, sum.b, sum.n);
    return tb_write_record(w, ev.b, ev.n);
}

bt_status bt_tb_add_text(bt_tb_writer *w, const char *tag, int64_t step, const char *text,
                         double wall_time) {
    BT_ASSERT(w->f && text);
    const size_t tag_len = strlen(tag), len = strlen(text);
    if (tag_len > TB_TAG_MAX)
        return bt_fail(BT_ERR_ARG, "TensorBoard tag of %zu bytes (at most %d): %.40s...", tag_len,
                       TB_TAG_MAX, tag);
    const size_t cap = len + tag_len + 128; /* each level adds a key and a length varint */
    uint8_t *mem = malloc(4 * cap);
    if (!mem) return bt_fail(BT_ERR_NOMEM, "%s: out of memory for a text event", w->path);
    pb_buf tensor = {mem, 0, cap}, val = {mem + cap, 0, cap}, sum = {mem + 2 * cap, 0, cap},
           ev = {mem + 3 * cap, 0, cap};
    PB_LOCAL(plugin);
    PB_LOCAL(meta);
    PB_LOCAL(shape);
    PB_LOCAL(dim);
    static const char plugin_name[] = "text";
    pb_len(&plugin, 1, plugin_name, sizeof plugin_name - 1); /* PluginData.plugin_name */
    pb_len(&meta, 1, plugin.b, plugin.n);                     /* SummaryMetadata.plugin_data */
    pb_int64(&dim, 1, 1);                                     /* TensorShapeProto.Dim.size */
    pb_len(&shape, 2, dim.b, dim.n);                          /* TensorShapeProto.dim */
    pb_int64(&tensor, 1, 7);                                  /* TensorProto.dtype DT_STRING */
    pb_len(&tensor, 2, shape.b, shape.n);                     /* TensorProto.tensor_shape */
    pb_len(&tensor, 8, text, len);                            /* TensorProto.string_val */
    pb_len(&val, 1, tag, tag_len);                            /* Value.tag */
    pb_len(&val, 8, tensor.b, tensor.n);                      /* Value.tensor */
    pb_len(&val, 9, meta.b, meta.n);                          /* Value.metadata */
    pb_len(&sum, 1, val.b, val.n);
    pb_double(&ev, 1, wall_time);
    pb_int64(&ev, 2, step);
    pb_len(&ev, 5, sum.b, sum.n);
    bt_status s = tb_write_record(w, ev.b, ev.n);
    free(mem);
    return s;
}

bt_status bt_tb_close(bt_tb_writer *w) {
    if (!w->f) return BT_OK;
    int rc = fclose(w->f);
    w->f = NULL;
    if (rc != 0)
        return bt_fail(BT_ERR_IO, "%s: cannot close TensorBoard event file: %s", w->path,
                       strerror(errno));
    return BT_OK;
}
