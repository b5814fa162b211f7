/* test_shards.c: WebDataset shards (shards.h, manifest.h, the sampler's shard mode, the loader).
 *
 * Independent references: the tar fixtures are written by Python's tarfile
 * (scripts/gen_shard_fixtures.py) in ustar, GNU and pax conventions; the JSON Lines manifest
 * and its loader are the reference for the shard path (the same records must give the same
 * batches); the documented shard order (docs/data.md) is recomputed here from the rng
 * primitives, not through the sampler.
 *
 * Cases: member names/offsets/bytes of the three fixtures; brace, list and directory sources
 * and their errors; JSON Lines vs shards with shuffle off (bitwise equal batches, 2 workers,
 * 2 epochs); ranks x workers cover every record exactly once per epoch with shuffle on, each
 * rank reading whole shards, orders differing between epochs; the list equals the documented
 * algorithm; resume mid-epoch through the JSON cursor = uninterrupted, and a manifest cursor
 * refused; bad samples (no image, no caption, bad UTF-8, duplicate member, corrupt header,
 * corrupt JPEG member) under STOP and SKIP, named by shard and sample key. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/loader.h"
#include "data/shards.h"
#include "data/synth.h"
#include "mem.h"
#include "rng.h"
#include "test_util.h"

enum { N = 24, PER = 4, B = 4, T = 40 };

static char dir[1024];
static tokenizer tok;
static image_preprocess_config img;

/* ---- tar reader on Python-written fixtures ------------------------------------------------ */

static void test_fixtures(void) {
    static const char *const fmts[] = {"ustar", "gnu", "pax"};
    const char *fx = getenv("BT_FIXTURES");
    char longname[200];
    snprintf(longname, sizeof longname, "%.60s/%.79s/s2.txt",
             "dddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd",
             "eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee");
    const char *want[4] = {"a/s1.txt", "a/s1.json", longname, "s3.txt"};
    for (int f = 0; f < 3; f++) {
        char path[1200];
        snprintf(path, sizeof path, "%s/data/shards/%s.tar", fx ? fx : "tests/fixtures", fmts[f]);
        tar_reader r;
        bt_status st = tar_reader_open(&r, path);
        if (!tu_check(st == BT_OK, "%s: opens: %s", fmts[f], st ? bt_error_message() : "ok"))
            continue;
        int k = 0, ok = 1, got;
        tar_member m;
        while ((got = tar_reader_next(&r, &m, &st)) == 1) {
            char expect[300];
            snprintf(expect, sizeof expect, "data:%s", m.name);
            size_t elen = k == 3 ? 0 : strlen(expect);
            uint8_t *bytes = NULL;
            ok = ok && k < 4 && !strcmp(m.name, want[k]) && m.size == elen && m.offset % 512 == 0;
            if (ok && shards_read_member(path, m.name, m.offset, m.size, &bytes) == BT_OK)
                ok = memcmp(bytes, expect, elen) == 0;
            else
                ok = 0;
            if (!ok) printf("# %s member %d: '%s' (%llu bytes)\n", fmts[f], k, m.name,
                            (unsigned long long)m.size);
            bt_free(bytes);
            free(m.name);
            k++;
        }
        tu_check(got == 0 && ok && k == 4,
                 "%s tar (Python tarfile): 4 regular members, names (long one included), sizes "
                 "and bytes; directory and symlink skipped", fmts[f]);
        tar_reader_close(&r);
    }
}

/* ---- sources ----------------------------------------------------------------------------- */

static void test_sources(void) {
    char **p;
    size_t n;
    bt_status st = shards_expand("d/{008..011}.tar::x/{a,b}-{0..1}.tar", &p, &n);
    int ok = st == BT_OK && n == 8 && !strcmp(p[0], "d/008.tar") && !strcmp(p[3], "d/011.tar") &&
             !strcmp(p[4], "x/a-0.tar") && !strcmp(p[5], "x/a-1.tar") && !strcmp(p[7], "x/b-1.tar");
    tu_check(ok, "brace ranges keep the width, lists and '::' expand in order");
    if (st == BT_OK) shards_free_paths(p, n);
    static const struct {
        const char *spec, *msg;
    } bad[] = {
        {"d/{3..1}.tar", "runs backwards"},
        {"d/{1..x}.tar", "decimal bounds"},
        {"d/{a,{b,c}}.tar", "nested braces"},
        {"d/{0..3.tar", "'{' without '}'"},
        {"d/{0..3}.tar.gz", "does not end in .tar"},
        {"a.tar::", "empty entry"},
        {"d/{0..2000000}.tar", "more than"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        st = shards_expand(bad[i].spec, &p, &n);
        tu_check(st != BT_OK && strstr(bt_error_message(), bad[i].msg) &&
                     strstr(bt_error_message(), bad[i].spec),
                 "bad source '%s': %s", bad[i].spec, bt_error_message());
    }
    manifest m;
    char spec[1200];
    snprintf(spec, sizeof spec, "%s/nowhere/{0..1}.tar", dir);
    st = manifest_load(&m, spec, NULL);
    tu_check(st == BT_ERR_IO && strstr(bt_error_message(), "nowhere/0.tar"),
             "a missing shard is named: %s", bt_error_message());
    manifest_free(&m);
}

/* ---- same batches as JSON Lines ---------------------------------------------------------- */

typedef struct run {
    int n;
    int64_t record[64][B];
    int size[64];
    uint8_t *px[64];
    int32_t ids[64][B * T];
} run;

static void run_free(run *r) {
    for (int i = 0; i < r->n; i++)
        free(r->px[i]);
    r->n = 0;
}

static bt_status collect(const manifest *m, const loader_options *o, run *r, int limit,
                         loader **keep) {
    loader *l;
    bt_status st = loader_init(&l, m, &tok, &img, o);
    memset(r, 0, sizeof *r);
    while (st == BT_OK && r->n < limit) {
        loader_batch *b;
        st = loader_next(l, &b);
        if (st != BT_OK || !b) break;
        size_t px = (size_t)B * 3 * img.crop_size * img.crop_size * sizeof(float);
        r->px[r->n] = malloc(px);
        memcpy(r->px[r->n], b->pixel_values, px);
        memcpy(r->record[r->n], b->record, sizeof r->record[0]);
        memcpy(r->ids[r->n], b->input_ids, sizeof r->ids[0]);
        r->size[r->n] = b->size;
        r->n++;
        loader_release(l, b);
    }
    if (keep && st == BT_OK) *keep = l;
    else loader_free(l);
    return st;
}

static int runs_equal(const run *a, const run *b) {
    size_t px = (size_t)B * 3 * img.crop_size * img.crop_size * sizeof(float);
    if (a->n != b->n) return 0;
    for (int i = 0; i < a->n; i++)
        if (a->size[i] != b->size[i] || memcmp(a->record[i], b->record[i], sizeof a->record[i]) ||
            memcmp(a->ids[i], b->ids[i], sizeof a->ids[i]) || memcmp(a->px[i], b->px[i], px))
            return 0;
    return 1;
}

static loader_options base(void) {
    loader_options o = loader_options_default();
    o.batch_size = B;
    o.max_length = T;
    o.seed = 77;
    o.max_epochs = 2;
    o.num_workers = 2;
    o.shuffle_buffer = 5;
    return o;
}

static void test_same_as_jsonl(const manifest *js, const manifest *sh) {
    loader_options o = base();
    o.shuffle = 0;
    run a, b;
    bt_status sa = collect(js, &o, &a, 64, NULL), sb = collect(sh, &o, &b, 64, NULL);
    tu_check(sa == BT_OK && sb == BT_OK && a.n == 12 && runs_equal(&a, &b),
             "shuffle off: JSON Lines and shards give the same 12 batches (2 epochs: records, "
             "token ids, pixels bit for bit)");
    run_free(&a);
    run_free(&b);
}

/* The documented shard-mode list (docs/data.md), recomputed from the rng primitives. */
static void documented_list(uint64_t seed, int64_t epoch, int rank, int world, int64_t n_shards,
                            int64_t per, int64_t buffer, int64_t num_samples, int64_t *out) {
    int64_t order[64], stream[N], len = 0, buf[64];
    for (int64_t i = 0; i < n_shards; i++)
        order[i] = i;
    uint64_t st = seed;
    bt_rng r;
    bt_rng_seed(&r, bt_splitmix64(&st) ^ (uint64_t)epoch);
    for (int64_t i = n_shards - 1; i > 0; i--) {
        int64_t j = (int64_t)bt_rng_below(&r, (uint64_t)i + 1), t = order[i];
        order[i] = order[j], order[j] = t;
    }
    for (int64_t k = rank; k < n_shards; k += world)
        for (int64_t i = 0; i < per; i++)
            stream[len++] = order[k] * per + i;
    uint64_t k2 = bt_splitmix64(&st);
    bt_rng_seed(&r, k2 ^ (uint64_t)epoch ^ ((uint64_t)rank << 32));
    int64_t fill = 0, emitted = 0, res[N];
    for (int64_t i = 0; i < len; i++) {
        if (fill < buffer) {
            buf[fill++] = stream[i];
            continue;
        }
        int64_t j = (int64_t)bt_rng_below(&r, (uint64_t)buffer);
        res[emitted++] = buf[j];
        buf[j] = stream[i];
    }
    for (int64_t c = fill; c > 0; c--) {
        int64_t j = (int64_t)bt_rng_below(&r, (uint64_t)c);
        res[emitted++] = buf[j];
        buf[j] = buf[c - 1];
    }
    for (int64_t i = 0; i < num_samples; i++)
        out[i] = res[i % len];
}

static void test_coverage(const manifest *sh) {
    enum { W = 3 };
    int seen[2][N] = {{0}}, whole = 1, documented = 1;
    int64_t first_epoch0[W] = {0}, first_epoch1[W] = {0};
    for (int rank = 0; rank < W; rank++) {
        loader_options o = base();
        o.rank = rank;
        o.world_size = W;
        run r;
        bt_status st = collect(sh, &o, &r, 64, NULL);
        if (!tu_check(st == BT_OK && r.n == 4, "rank %d of %d: 2 batches per epoch, 2 epochs (%d)",
                      rank, W, r.n))
            continue;
        int64_t want[2][N / W];
        for (int e = 0; e < 2; e++)
            documented_list(77, e, rank, W, N / PER, PER, 5, N / W, want[e]);
        int shard_of_rank[2][N / PER];
        memset(shard_of_rank, 0, sizeof shard_of_rank);
        for (int k = 0; k < r.n; k++) {
            int e = k / 2;
            for (int i = 0; i < r.size[k]; i++) {
                int64_t rec = r.record[k][i];
                seen[e][rec]++;
                shard_of_rank[e][rec / PER]++;
                documented &= rec == want[e][(k % 2) * B + i];
            }
        }
        first_epoch0[rank] = r.record[0][0];
        first_epoch1[rank] = r.record[2][0];
        for (int e = 0; e < 2; e++)
            for (int s = 0; s < N / PER; s++)
                whole &= shard_of_rank[e][s] == 0 || shard_of_rank[e][s] == PER;
        run_free(&r);
    }
    int once = 1;
    for (int e = 0; e < 2; e++)
        for (int i = 0; i < N; i++)
            once &= seen[e][i] == 1;
    tu_check(once, "3 ranks x 2 workers, shuffle on: every record exactly once in each epoch");
    tu_check(whole, "each rank reads whole shards in each epoch (no shard split across ranks)");
    tu_check(documented, "every rank's order equals the documented shard order + buffer shuffle");
    tu_check(memcmp(first_epoch0, first_epoch1, sizeof first_epoch0) != 0,
             "epoch 1's order differs from epoch 0's");
}

static void test_resume(const manifest *sh, const manifest *js) {
    loader_options o = base();
    run ref, part, rest;
    bt_status st = collect(sh, &o, &ref, 64, NULL);
    loader *l = NULL;
    if (st == BT_OK) st = collect(sh, &o, &part, 7, &l);
    if (!tu_check(st == BT_OK && ref.n == 12 && part.n == 7, "shard runs for resume")) return;
    cJSON *cur = loader_cursor_to_json(l);
    loader_free(l);
    char *text = cJSON_PrintUnformatted(cur);
    cJSON_Delete(cur);
    cJSON *back = cJSON_Parse(text);
    free(text);
    st = loader_cursor_from_json(&o, sh, back, "trainer_state.json", &o.start);
    tu_check(st == BT_OK && o.start.epoch == 1 && o.start.position == B,
             "cursor after 7 of 6-per-epoch batches: epoch 1, position 4: %s",
             st ? bt_error_message() : "ok");
    o.num_workers = 3;
    if (st == BT_OK) st = collect(sh, &o, &rest, 64, NULL);
    int same = st == BT_OK && rest.n == 5;
    for (int i = 0; same && i < 5; i++) {
        run one = {0}, two = {0};
        one.n = two.n = 1;
        one.px[0] = ref.px[7 + i], two.px[0] = rest.px[i];
        one.size[0] = ref.size[7 + i], two.size[0] = rest.size[i];
        memcpy(one.record[0], ref.record[7 + i], sizeof one.record[0]);
        memcpy(two.record[0], rest.record[i], sizeof two.record[0]);
        memcpy(one.ids[0], ref.ids[7 + i], sizeof one.ids[0]);
        memcpy(two.ids[0], rest.ids[i], sizeof two.ids[0]);
        same = runs_equal(&one, &two);
    }
    tu_check(same, "resumed mid-epoch (3 workers instead of 2): the 5 remaining batches equal "
                   "the uninterrupted run's");
    sampler_cursor c;
    st = loader_cursor_from_json(&o, js, back, "state", &c);
    tu_check(st != BT_OK && strstr(bt_error_message(), "saved reading WebDataset shards"),
             "a shard cursor on a manifest run is refused: %s", bt_error_message());
    cJSON_ReplaceItemInObjectCaseSensitive(back, "shuffle_buffer", cJSON_CreateNumber(9));
    st = loader_cursor_from_json(&o, sh, back, "state", &c);
    tu_check(st != BT_OK && strstr(bt_error_message(), "'shuffle_buffer' is 9, this run has 5"),
             "another shuffle buffer is refused: %s", bt_error_message());
    cJSON_Delete(back);
    loader_options o4 = base();
    o4.world_size = 7;
    loader *l4 = NULL;
    st = loader_init(&l4, sh, &tok, &img, &o4);
    tu_check(st == BT_ERR_ARG && strstr(bt_error_message(), "6 non-empty shards for 7 ranks"),
             "fewer shards than ranks: %s", bt_error_message());
    loader_free(l4);
    run_free(&ref);
    run_free(&part);
    run_free(&rest);
}

/* ---- bad samples ------------------------------------------------------------------------- */

static void put(FILE *f, const char *name, const void *data, size_t n) {
    BT_ASSERT(tar_write_member(f, "test", name, data, n) == BT_OK);
}

static void test_bad(const manifest *js) {
    uint8_t *jpg;
    size_t jn;
    BT_ASSERT(image_read_file(&jpg, &jn, manifest_image(js, 0)) == BT_OK);
    char path[1200];
    snprintf(path, sizeof path, "%s/bad.tar", dir);
    FILE *f = fopen(path, "wb");
    BT_ASSERT(f);
    put(f, "ok1.jpg", jpg, jn), put(f, "ok1.txt", "fine", 4);             /* sample 1 */
    put(f, "noimg.txt", "x", 1);                                         /* 2 */
    put(f, "nocap.jpg", jpg, jn), put(f, "nocap.cls", "3", 1);           /* 3 */
    put(f, "utf.jpg", jpg, jn), put(f, "utf.txt", "\xff", 1);            /* 4 */
    put(f, "dup.jpg", jpg, jn), put(f, "dup.jpg", jpg, jn), put(f, "dup.txt", "x", 1); /* 5 */
    put(f, "js.png", "not a png", 9), put(f, "js.json", "{\"caption\": \"from json\"}", 24);
    put(f, "junk.jpg", "garbage", 7), put(f, "junk.txt", "bad pixels", 10); /* 7 */
    put(f, "ok2.JPG", jpg, jn), put(f, "ok2.txt", "fine too", 8);         /* 8 */
    long cut = ftell(f);
    put(f, "lost.jpg", jpg, jn), put(f, "lost.txt", "after the damage", 16);
    BT_ASSERT(tar_write_end(f, "test") == BT_OK);
    fclose(f);
    /* Damage the header of 'lost.jpg': its checksum no longer matches. */
    f = fopen(path, "r+b");
    BT_ASSERT(f && fseek(f, cut + 10, SEEK_SET) == 0 && fputc('Z', f) != EOF);
    fclose(f);

    static const char *const msgs[] = {
        "sample 'noimg': no image member", "sample 'nocap': no caption",
        "sample 'utf': member 'utf.txt' is not valid UTF-8", "sample 'dup': two 'jpg' members",
        "bad tar header checksum at byte"};
    manifest m;
    bt_status st = manifest_load(&m, path, NULL);
    tu_check(st != BT_OK && strstr(bt_error_message(), msgs[0]) &&
                 strstr(bt_error_message(), "bad.tar"),
             "stop: the first bad sample names the shard and the key: %s", bt_error_message());
    manifest_free(&m);
    manifest_options so = manifest_options_default();
    so.on_error = MANIFEST_ON_ERROR_SKIP;
    st = manifest_load(&m, path, &so);
    int ok = st == BT_OK && m.n == 4 && m.n_skipped == 5;
    for (int i = 0; ok && i < 5; i++)
        ok = strstr(m.problems[i], msgs[i]) != NULL;
    tu_check(ok, "skip: 4 samples kept, the 5 problems reported in order (%zu, %zu)", m.n,
             m.n_skipped);
    if (st == BT_OK && m.n == 4) {
        tu_check(!strcmp(manifest_caption(&m, 1), "from json") &&
                     !strcmp(manifest_id(&m, 3), "ok2") &&
                     !strcmp(manifest_caption(&m, 3), "fine too"),
                 "caption from a json member; upper-case extension; the key is the id");
        /* The loader: under STOP the corrupt image members name the sample; under SKIP
         * they are replaced by the next valid record. */
        loader_options o = base();
        o.shuffle = 0;
        o.world_size = 1;
        o.max_epochs = 1;
        run r;
        st = collect(&m, &o, &r, 64, NULL);
        tu_check(st != BT_OK && strstr(bt_error_message(), "bad.tar: sample 'js'"),
                 "loader stop: a corrupt image member names shard and sample: %s",
                 bt_error_message());
        run_free(&r);
        o.on_error = MANIFEST_ON_ERROR_SKIP;
        st = collect(&m, &o, &r, 64, NULL);
        tu_check(st == BT_OK && r.n == 1 && r.record[0][0] == 0 && r.record[0][1] == 3 &&
                     r.record[0][2] == 3 && r.record[0][3] == 3,
                 "loader skip: records 1 and 2 replaced by the next valid one (3)");
        run_free(&r);
    }
    manifest_free(&m);
    bt_free(jpg);
}

int main(void) {
    snprintf(dir, sizeof dir, "%s", tu_tmpdir());
    test_fixtures();
    test_sources();

    synth_options so = {.out_dir = dir, .n = {N, 0, 0}, .seed = 5, .size = 48};
    BT_ASSERT(synth_generate(&so) == BT_OK);
    char jpath[1200], sdir[1200], spec[1300];
    snprintf(jpath, sizeof jpath, "%s/train.jsonl", dir);
    snprintf(sdir, sizeof sdir, "%s/shards", dir);
    manifest js, sh;
    BT_ASSERT(manifest_load(&js, jpath, NULL) == BT_OK);
    size_t n_shards = 0;
    bt_status st = shards_write(&js, sdir, PER, &n_shards);
    tu_check(st == BT_OK && n_shards == N / PER, "shards_write: %d shards of %d: %s", N / PER,
             PER, st ? bt_error_message() : "ok");
    snprintf(spec, sizeof spec, "%s/{00000..%05d}.tar", sdir, N / PER - 1);
    st = manifest_load(&sh, spec, NULL);
    int same = st == BT_OK && sh.n == N && sh.n_shards == N / PER;
    for (size_t i = 0; same && i < js.n; i++)
        same = !strcmp(manifest_caption(&js, i), manifest_caption(&sh, i));
    tu_check(same, "the shards read back as %d records with the manifest's captions", N);

    const char *configs = getenv("BT_CONFIGS");
    char model[1200];
    snprintf(model, sizeof model, "%s/synthetic", configs ? configs : "configs");
    if (!tu_check(tokenizer_load(&tok, model) == BT_OK, "tokenizer %s", model)) return tu_finish();
    image_preprocess_config_default(&img, 32);
    if (same) {
        test_same_as_jsonl(&js, &sh);
        test_coverage(&sh);
        test_resume(&sh, &js);
    }
    test_bad(&js);
    manifest_free(&js);
    manifest_free(&sh);
    tokenizer_free(&tok);
    return tu_finish();
}
