/* test_tensorboard.c: the TensorBoard writer (src/train/tensorboard.c) checked by the
 * independent reader (tests/tb_reader.c: bitwise CRC32C, its own protobuf decoder, written
 * from event.proto and the TFRecord framing).
 *
 * - CRC32C: both implementations on the RFC 3720 (iSCSI) B.4 test vectors and the standard
 *   check value CRC32C("123456789") = 0xE3069283; table vs bitwise on random buffers.
 * - Events: what was written (tags, steps including 0 and 2^40, values, wall times) is what
 *   the reader decodes, exactly (values are compared after rounding to float, as
 *   simple_value is a float); the first record is file_version "brain.Event:2"; a resumed
 *   writer's SessionLog START is at the first resumed step.
 * - The reader is not a rubber stamp: a flipped byte, a cut file and a flipped length byte
 *   are each reported as errors. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tb_reader.h"
#include "train/tensorboard.h"
#include "test_util.h"

static void check_crc_vectors(void) {
    static const struct {
        const char *name;
        uint8_t data[48];
        size_t n;
        uint32_t crc;
    } v[] = {
        {"32 bytes of zeros", {0}, 32, 0x8A9136AAu},
        {"iSCSI SCSI Read (10) command PDU",
         {0x01, 0xc0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
          0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00,
          0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x18, 0x28, 0x00, 0x00, 0x00,
          0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00},
         48,
         0xD9963A56u},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        uint32_t a = bt_crc32c(v[i].data, v[i].n), b = tbr_crc32c(v[i].data, v[i].n);
        tu_check(a == v[i].crc && b == v[i].crc,
                 "CRC32C of %s = 0x%08X (table 0x%08X, bitwise 0x%08X)", v[i].name, v[i].crc, a, b);
    }
    uint8_t ones[32], inc[32], dec[32];
    for (int i = 0; i < 32; i++) {
        ones[i] = 0xFF;
        inc[i] = (uint8_t)i;
        dec[i] = (uint8_t)(31 - i);
    }
    struct {
        const char *name;
        const uint8_t *d;
        uint32_t crc;
    } w[] = {{"32 bytes of 0xFF", ones, 0x62A8AB43u},
             {"32 incrementing bytes", inc, 0x46DD794Eu},
             {"32 decrementing bytes", dec, 0x113FDB5Cu}};
    for (int i = 0; i < 3; i++) {
        uint32_t a = bt_crc32c(w[i].d, 32), b = tbr_crc32c(w[i].d, 32);
        tu_check(a == w[i].crc && b == w[i].crc,
                 "CRC32C of %s = 0x%08X (table 0x%08X, bitwise 0x%08X)", w[i].name, w[i].crc, a, b);
    }
    uint32_t a = bt_crc32c("123456789", 9), b = tbr_crc32c((const uint8_t *)"123456789", 9);
    tu_check(a == 0xE3069283u && b == 0xE3069283u,
             "CRC32C(\"123456789\") = 0xE3069283 (table 0x%08X, bitwise 0x%08X)", a, b);

    tu_rng r;
    tu_rng_seed(&r, 7);
    uint8_t buf[1000];
    int agree = 1;
    for (int t = 0; t < 200 && agree; t++) {
        size_t n = tu_rng_next(&r) % sizeof buf;
        for (size_t i = 0; i < n; i++)
            buf[i] = (uint8_t)tu_rng_next(&r);
        agree = bt_crc32c(buf, n) == tbr_crc32c(buf, n);
    }
    tu_check(agree, "table and bitwise CRC32C agree on 200 random buffers (0..999 bytes)");
}

typedef struct scalar {
    const char *tag;
    int64_t step;
    double value;
    double wall;
} scalar;

static const scalar scalars[] = {
    {"train/loss", 0, 6.931471805599453, 1700000000.25},
    {"train/learning_rate", 1, 1e-5, 1700000000.5},
    {"train/grad_norm", 1, 123.456, 1700000001.0},
    {"eval/i2t_recall@1", 500, 0.4375, 1700000002.0},
    {"train/loss", 1099511627776LL, -3.5, 1700000003.75}, /* step 2^40: a 6-byte varint */
    {"a/very/long/tag/"
     "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
     "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
     7, 1e30, 1700000004.0}, /* tag longer than 127 bytes: a 2-byte length varint */
};
enum { N_SCALARS = sizeof scalars / sizeof scalars[0] };

/* Writes the scalars into dir; returns the event file path in path. */
static int write_events(const char *dir, int64_t resume_step, char *path, size_t cap) {
    bt_tb_writer w;
    if (bt_tb_open(&w, dir, 1700000000.125, resume_step) != BT_OK) {
        tu_check(0, "bt_tb_open: %s", bt_error_message());
        return 0;
    }
    int ok = 1;
    for (int i = 0; i < N_SCALARS; i++)
        ok &= bt_tb_add_scalar(&w, scalars[i].tag, scalars[i].step, scalars[i].value,
                               scalars[i].wall) == BT_OK;
    ok &= bt_tb_close(&w) == BT_OK;
    snprintf(path, cap, "%s", w.path);
    tu_check(ok, "writer accepts %d scalars (%s)", N_SCALARS, bt_error_message());
    return ok;
}

/* The file name TensorBoard and users expect: events.out.tfevents.<10 digits>.<host>.<pid>,
 * the only file in dir. */
static void check_file_name(const char *dir, const char *path) {
    char host[256] = "";
    gethostname(host, sizeof host);
    host[sizeof host - 1] = 0;
    char want[8192];
    snprintf(want, sizeof want, "%s/events.out.tfevents.1700000000.%s.%ld", dir, host,
             (long)getpid());
    int files = 0;
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (e->d_name[0] != '.') files++;
    if (d) closedir(d);
    tu_check(strcmp(path, want) == 0 && files == 1, "event file name %s (want %s), %d file(s)",
             path, want, files);
}

static void check_roundtrip(int64_t resume_step) {
    char dir[4096], path[4096];
    snprintf(dir, sizeof dir, "%s/run%lld", tu_tmpdir(), (long long)resume_step);
    if (!tu_check(mkdir(dir, 0755) == 0, "mkdir %s", dir)) return;
    if (!write_events(dir, resume_step, path, sizeof path)) return;
    check_file_name(dir, path);

    tbr_event *ev;
    size_t n;
    char err[512];
    if (!tu_check(tbr_read_file(path, &ev, &n, err, sizeof err) == 0,
                  "reader accepts the file (%s)", err))
        return;
    size_t extra = resume_step > 0 ? 2 : 1;
    if (!tu_check(n == N_SCALARS + extra, "%zu events read (want %zu)", n, N_SCALARS + extra)) {
        free(ev);
        return;
    }
    tu_check(ev[0].kind == TBR_FILE_VERSION && strcmp(ev[0].text, "brain.Event:2") == 0 &&
                 ev[0].wall_time == 1700000000.125 && ev[0].step == 0,
             "first event: file_version '%s', wall_time %.3f", ev[0].text, ev[0].wall_time);
    if (resume_step > 0)
        tu_check(ev[1].kind == TBR_SESSION_LOG && ev[1].status == 1 &&
                     ev[1].step == resume_step + 1,
                 "resumed: SessionLog status %d (START = 1) at step %lld (want %lld)", ev[1].status,
                 (long long)ev[1].step, (long long)resume_step + 1);
    int bad = 0;
    for (int i = 0; i < N_SCALARS; i++) {
        const tbr_event *e = &ev[extra + i];
        const scalar *s = &scalars[i];
        /* simple_value is a proto float: the writer rounds once, so equality is exact. */
        int ok = e->kind == TBR_SCALAR && strncmp(e->text, s->tag, sizeof e->text - 1) == 0 &&
                 e->step == s->step && e->value == (float)s->value && e->wall_time == s->wall;
        if (!ok) {
            printf("# event %d: got (%s, %lld, %.9g, %.3f), want (%s, %lld, %.9g, %.3f)\n", i,
                   e->text, (long long)e->step, (double)e->value, e->wall_time, s->tag,
                   (long long)s->step, (double)(float)s->value, s->wall);
            bad++;
        }
    }
    tu_check(bad == 0,
             "resume_step %lld: %d scalars read back as written (tag, step, value, "
             "wall_time), %d differ",
             (long long)resume_step, N_SCALARS, bad);
    free(ev);
}

/* The reader must refuse a damaged file, else the round trip above proves nothing. */
static void check_reader_refuses(void) {
    char dir[4096], path[4096], bad[4200], err[512];
    snprintf(dir, sizeof dir, "%s/damaged", tu_tmpdir());
    if (mkdir(dir, 0755) != 0 || !write_events(dir, 0, path, sizeof path)) return;
    size_t len;
    uint8_t *data = tu_read_file(path, &len);
    if (!tu_check(data && len > 100, "read back %s", path)) return;
    snprintf(bad, sizeof bad, "%s.bad", path);
    tbr_event *ev;
    size_t n;
    static const struct {
        const char *what, *expect;
        long flip;  /* offset of the flipped byte, -1: none */
        size_t cut; /* bytes cut from the end */
    } cases[] = {
        {"a flipped data byte", "data CRC mismatch", 30, 0},
        {"a flipped length byte", "length CRC mismatch", 0, 0},
        {"a file cut inside its last record", "truncated", -1, 3},
    };
    for (int c = 0; c < 3; c++) {
        if (cases[c].flip >= 0) data[cases[c].flip] ^= 0x01;
        tu_setup_file(bad, data, len - cases[c].cut);
        if (cases[c].flip >= 0) data[cases[c].flip] ^= 0x01;
        int rc = tbr_read_file(bad, &ev, &n, err, sizeof err);
        tu_check(rc != 0 && strstr(err, cases[c].expect), "reader refuses %s: %s", cases[c].what,
                 rc ? err : "(accepted)");
        if (rc == 0) free(ev);
    }
    free(data);
}

/* A text event of 5000 bytes (more than a scalar's buffer) reads back whole as a text-plugin
 * tensor: tag, step, the string and its length. */
static void check_text(void) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/text", tu_tmpdir());
    if (!tu_check(mkdir(dir, 0755) == 0, "mkdir %s", dir)) return;
    bt_tb_writer w;
    if (!tu_check(bt_tb_open(&w, dir, 1700000000.0, 0) == BT_OK, "open: %s", bt_error_message()))
        return;
    static char text[5001];
    for (int i = 0; i < 5000; i++) text[i] = (char)('a' + i % 26);
    text[4999] = '}';
    tu_check(bt_tb_add_text(&w, "args/text_summary", 0, text, 1700000000.5) == BT_OK &&
                 bt_tb_add_scalar(&w, "train/loss", 1, 2.5, 1700000001.0) == BT_OK &&
                 bt_tb_close(&w) == BT_OK,
             "write a text and a scalar");
    tbr_event *ev;
    size_t n;
    char err[512];
    if (!tu_check(tbr_read_file(w.path, &ev, &n, err, sizeof err) == 0, "read: %s", err)) return;
    tu_check(n == 3 && ev[1].kind == TBR_TEXT && !strcmp(ev[1].text, "args/text_summary") &&
                 ev[1].step == 0 && ev[1].string_len == 5000 && !strcmp(ev[1].string, text) &&
                 ev[2].kind == TBR_SCALAR && ev[2].value == 2.5f,
             "the text reads back as a text-plugin DT_STRING tensor, whole (%zu bytes), and the "
             "next scalar after it", n > 1 ? ev[1].string_len : 0);
    free(ev);
}

int main(void) {
    check_crc_vectors();
    check_text();
    check_roundtrip(0);
    check_roundtrip(41);
    check_reader_refuses();
    return tu_finish();
}
