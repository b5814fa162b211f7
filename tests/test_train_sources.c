/* test_train_sources.c: bt-train (argv[1]) trains from every kind of data source a user has,
 * and each gives the weights of the same records read from a JSON Lines manifest of JPEGs
 * (issue 22's "Done when"). `bt-data shards` (argv[2]) writes the shards, as a user converts.
 *
 * The reference run trains the small synthetic model (configs/synthetic-model, ITC + ITM + MLM,
 * dropout on) for 4 steps of 8 on 16 synthetic records (2 epochs), shuffle off, from
 * train.jsonl and its JPEGs. Every other run changes only data.train (and, for the imagefolder,
 * the caption column's name) and must end with model.safetensors equal to the reference's,
 * byte for byte:
 *   PNG / WebP      the same pictures as lossless PNG files and as lossless WebP files;
 *   imagefolder     a directory with metadata.csv (file_name, text) and the JPEGs, the same
 *                   records in the same order (RFC 4180: the captions hold commas, so quoted);
 *                   and the same with metadata.jsonl;
 *   shards          the directory of WebDataset shards `bt-data shards` writes from
 *                   train.jsonl (4 shards of 4), and shards written from a manifest storing
 *                   the pictures as PNG, WebP and JPEG in turn (4 shards of 5, 5, 5, 1: PNG
 *                   and WebP members, checked by reading the tar headers here), named by the
 *                   brace pattern `bt-data shards` prints; and one shard written by another
 *                   program, the tar command in pax format (an extended header per member).
 * Resume on shards: the mixed shards shuffled (a shuffle buffer of 3), resumed mid-epoch from a
 * checkpoint, end with the weights of the uninterrupted shuffled run.
 * Why byte-identical is the right expectation: a run is a deterministic function of the
 * pixels, the captions and the order of the records (test_bt_train checks two runs of one
 * config end equal, dropout on). Lossless PNG and WebP hold exactly the RGB pixels bt's JPEG
 * decoder gives for the reference's files (they are made from that decode here), and
 * everything after the decode (resize / crop / normalize, tokenization, sampler, step) is
 * shared. The CSV and the shards hold the same captions and images; with shuffle off the
 * records come in manifest order from every source (docs/data.md: shards in the order given,
 * samples in archive order). Record ids differ between sources (the shards' are their keys,
 * the imagefolder has none) and do not enter the computation.
 * Each comparison can fail, shown by controls kept here, each expected to DIFFER: from the
 * reference, one pixel of one PNG changed; one character of one caption in metadata.csv
 * changed; the shards of train.jsonl named in another order; and the shuffled shard run from
 * the unshuffled one.
 * Every run's metrics.jsonl must hold one train record per step it ran (4, or those after the
 * checkpoint it resumed from), each with a finite loss. The tar command must be on PATH (GNU
 * tar is part of every Debian system). */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <webp/encode.h>

#include "data/image.h"
#include "test_fixture.h"
#include "test_train_setup.h"
#include "test_util.h"

#define N_REC 16
#define STEPS 4

static const char *train_exe, *data_exe;
static char dir[1024], synth[1100], cfg[1100];
static char out_text[1 << 14], err_text[1 << 14];
static char *captions[N_REC];
static char *images[N_REC]; /* relative to synth */

static int run(const char *exe, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int rc = tu_vrun_captured(exe, "/dev/null", dir, out_text, sizeof out_text, err_text,
                              sizeof err_text, fmt, ap);
    va_end(ap);
    return rc;
}

static void make_dir(const char *path) {
    if (mkdir(path, 0755) != 0) {
        perror(path);
        exit(1);
    }
}

/* Reads the records of synth/train.jsonl with cJSON (not bt's manifest reader). */
static void read_reference(void) {
    char p[1200];
    snprintf(p, sizeof p, "%s/train.jsonl", synth);
    char *text = (char *)tu_read_file(p, NULL);
    if (!text) {
        fprintf(stderr, "cannot read %s\n", p);
        exit(1);
    }
    int n = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *j = cJSON_Parse(line);
        const cJSON *im = cJSON_GetObjectItemCaseSensitive(j, "image");
        const cJSON *cap = cJSON_GetObjectItemCaseSensitive(j, "caption");
        if (n >= N_REC || !cJSON_IsString(im) || !cJSON_IsString(cap)) {
            fprintf(stderr, "%s: unexpected record %d\n", p, n + 1);
            exit(1);
        }
        images[n] = strdup(im->valuestring);
        captions[n] = strdup(cap->valuestring);
        n++;
        cJSON_Delete(j);
    }
    free(text);
    if (n != N_REC) {
        fprintf(stderr, "%s: %d records, expected %d\n", p, n, N_REC);
        exit(1);
    }
}

/* Writes synth/<name>.jsonl: record i's image is image_of(i), its caption the reference's. */
static void write_manifest(const char *name, const char *const *image_of) {
    char p[1200];
    snprintf(p, sizeof p, "%s/%s.jsonl", synth, name);
    FILE *f = fopen(p, "w");
    if (!f) {
        perror(p);
        exit(1);
    }
    for (int i = 0; i < N_REC; i++) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "image", image_of[i]);
        cJSON_AddStringToObject(j, "caption", captions[i]);
        char *line = cJSON_PrintUnformatted(j);
        fprintf(f, "%s\n", line);
        free(line);
        cJSON_Delete(j);
    }
    if (fclose(f) != 0) {
        perror(p);
        exit(1);
    }
}

/* The PNG and WebP copies of every picture (synth/png/NNNNNN.png, synth/webp/NNNNNN.webp),
 * from bt's decode of the JPEG; plus synth/png/control.png: record 5's PNG with one pixel
 * changed. Writes png.jsonl, webp.jsonl, mixed.jsonl (PNG, WebP, JPEG in turn) and
 * png_control.jsonl. */
static void make_lossless_copies(void) {
    static char png_names[N_REC][64], webp_names[N_REC][64];
    const char *png_of[N_REC], *webp_of[N_REC], *mixed_of[N_REC], *control_of[N_REC];
    char p[1200];
    snprintf(p, sizeof p, "%s/png", synth);
    make_dir(p);
    snprintf(p, sizeof p, "%s/webp", synth);
    make_dir(p);
    for (int i = 0; i < N_REC; i++) {
        snprintf(p, sizeof p, "%s/%s", synth, images[i]);
        size_t n = 0;
        uint8_t *jpg = tu_read_file(p, &n);
        image_u8 im;
        if (!jpg || image_decode_jpeg(&im, jpg, n, p, 0, 0) != BT_OK) {
            fprintf(stderr, "cannot decode %s: %s\n", p, bt_error_message());
            exit(1);
        }
        free(jpg);
        size_t pn = 0;
        uint8_t *png = tu_encode_png(im.data, im.w, im.h, 3, &pn);
        snprintf(png_names[i], sizeof png_names[i], "png/%06d.png", i);
        snprintf(p, sizeof p, "%s/%s", synth, png_names[i]);
        tu_setup_file(p, png, pn);
        free(png);
        /* lossless WebP keeps every RGB value (the alpha channel is 255 throughout, so
         * libwebp's "exact" setting for transparent pixels does not come into play) */
        uint8_t *webp = NULL;
        size_t wn = WebPEncodeLosslessRGB(im.data, im.w, im.h, im.w * 3, &webp);
        if (!wn) {
            fprintf(stderr, "WebPEncodeLosslessRGB failed for record %d\n", i);
            exit(1);
        }
        snprintf(webp_names[i], sizeof webp_names[i], "webp/%06d.webp", i);
        snprintf(p, sizeof p, "%s/%s", synth, webp_names[i]);
        tu_setup_file(p, webp, wn);
        WebPFree(webp);
        if (i == 5) { /* the control: the centre pixel's red channel moved by 128 levels */
            uint8_t *px = im.data + ((size_t)(im.h / 2) * im.w + im.w / 2) * 3;
            px[0] = (uint8_t)(px[0] ^ 0x80);
            png = tu_encode_png(im.data, im.w, im.h, 3, &pn);
            snprintf(p, sizeof p, "%s/png/control.png", synth);
            tu_setup_file(p, png, pn);
            free(png);
        }
        image_u8_free(&im);
        png_of[i] = png_names[i];
        webp_of[i] = webp_names[i];
        mixed_of[i] = i % 3 == 0 ? png_names[i] : i % 3 == 1 ? webp_names[i] : images[i];
        control_of[i] = i == 5 ? "png/control.png" : png_names[i];
    }
    write_manifest("png", png_of);
    write_manifest("webp", webp_of);
    write_manifest("mixed", mixed_of);
    write_manifest("png_control", control_of);
}

/* Copies the reference's JPEG of record i to path. */
static void copy_jpeg(int i, const char *path) {
    char src[1400];
    snprintf(src, sizeof src, "%s/%s", synth, images[i]);
    size_t n = 0;
    uint8_t *b = tu_read_file(src, &n);
    if (!b) {
        fprintf(stderr, "cannot read %s\n", src);
        exit(1);
    }
    tu_setup_file(path, b, n);
    free(b);
}

/* An HF imagefolder at dir/<name>: train/NNNNNN.jpg (copies of the reference's JPEGs) and
 * metadata.csv with columns file_name, text, every caption quoted (they hold commas), rows
 * ending in CRLF as Python's csv module writes them; or, with jsonl, metadata.jsonl with the
 * same keys. Record `changed` (-1: none) has the case of its caption's first letter flipped. */
static void make_imagefolder(const char *name, int changed, int jsonl) {
    char root[1200], p[1400];
    snprintf(root, sizeof root, "%s/%s", dir, name);
    make_dir(root);
    snprintf(p, sizeof p, "%s/train", root);
    make_dir(p);
    size_t cap = 1 << 16, len = 0;
    char *meta = malloc(cap);
    if (!jsonl) len += (size_t)snprintf(meta + len, cap - len, "file_name,text\r\n");
    for (int i = 0; i < N_REC; i++) {
        char rel[64], caption[1024];
        snprintf(rel, sizeof rel, "train/%06d.jpg", i);
        snprintf(p, sizeof p, "%s/%s", root, rel);
        copy_jpeg(i, p);
        snprintf(caption, sizeof caption, "%s", captions[i]);
        if (i == changed) caption[0] = (char)(caption[0] ^ 0x20); /* a <-> A */
        if (jsonl) {
            cJSON *j = cJSON_CreateObject();
            cJSON_AddStringToObject(j, "file_name", rel);
            cJSON_AddStringToObject(j, "text", caption);
            char *line = cJSON_PrintUnformatted(j);
            len += (size_t)snprintf(meta + len, cap - len, "%s\n", line);
            free(line);
            cJSON_Delete(j);
            continue;
        }
        len += (size_t)snprintf(meta + len, cap - len, "%s,\"", rel);
        for (const char *c = caption; *c && len + 4 < cap; c++) {
            if (*c == '"') meta[len++] = '"';
            meta[len++] = *c;
        }
        len += (size_t)snprintf(meta + len, cap - len, "\"\r\n");
    }
    snprintf(p, sizeof p, "%s/metadata.%s", root, jsonl ? "jsonl" : "csv");
    tu_setup_file(p, meta, len);
    free(meta);
}

/* A shard written by another program: the tar command (GNU tar on Debian) in POSIX pax
 * format, which puts an extended header ('x', with mtime, atime, ctime) before every member,
 * from dir/stage holding kNN.jpg + kNN.txt per record, named in record order on its command
 * line. Returns the path of dir/tar_cli.tar, or NULL after a failed check. */
static const char *make_tar_cli_shard(void) {
    static char shard[1200];
    char stage[1200], p[1400], names[4096] = "";
    snprintf(stage, sizeof stage, "%s/stage", dir);
    make_dir(stage);
    for (int i = 0; i < N_REC; i++) {
        snprintf(p, sizeof p, "%s/k%02d.jpg", stage, i);
        copy_jpeg(i, p);
        snprintf(p, sizeof p, "%s/k%02d.txt", stage, i);
        tu_setup_text(p, captions[i]);
        char two[32];
        snprintf(two, sizeof two, " k%02d.jpg k%02d.txt", i, i);
        strcat(names, two);
    }
    snprintf(shard, sizeof shard, "%s/tar_cli.tar", dir);
    int rc = run("tar", "--format=pax -cf '%s' -C '%s'%s", shard, stage, names);
    return tu_check(rc == 0, "tar --format=pax writes %s (%d)%s%.400s", shard, rc,
                    rc ? ": " : "", rc ? err_text : "")
               ? shard
               : NULL;
}

/* Counts the members of a ustar archive whose names end in ext (read here from the 512-byte
 * headers: name at 0, octal size at 124), so the shards' content is checked independently
 * of bt's tar reader. -1 when the file cannot be read. */
static int count_members(const char *path, const char *ext) {
    size_t n = 0;
    uint8_t *t = tu_read_file(path, &n);
    if (!t) return -1;
    int count = 0;
    for (size_t off = 0; off + 512 <= n && t[off];) {
        char name[101], size[13];
        memcpy(name, t + off, 100);
        name[100] = 0;
        memcpy(size, t + off + 124, 12);
        size[12] = 0;
        const unsigned long long sz = strtoull(size, NULL, 8);
        const size_t nl = strlen(name), el = strlen(ext);
        if (t[off + 156] == '0' || t[off + 156] == 0)
            count += nl > el && !strcmp(name + nl - el, ext);
        off += 512 + (size_t)((sz + 511) / 512) * 512;
    }
    free(t);
    return count;
}

/* Checks the run's metrics.jsonl: `steps` train records, each loss finite. */
static void check_metrics(const char *what, const char *out, int steps) {
    char p[1300];
    snprintf(p, sizeof p, "%s/metrics.jsonl", out);
    char *text = (char *)tu_read_file(p, NULL);
    int records = 0, finite = 0;
    for (char *line = text ? strtok(text, "\n") : NULL; line; line = strtok(NULL, "\n")) {
        cJSON *j = cJSON_Parse(line);
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(j, "type");
        const cJSON *loss = cJSON_GetObjectItemCaseSensitive(j, "loss");
        if (cJSON_IsString(type) && !strcmp(type->valuestring, "train")) {
            records++;
            finite += cJSON_IsNumber(loss) && isfinite(loss->valuedouble);
        }
        cJSON_Delete(j);
    }
    tu_check(text && records == steps && finite == steps,
             "%s: %s has %d train records (want %d), %d with a finite loss", what, p, records,
             steps, finite);
    free(text);
}

/* Trains from data.train = source, with `extra` appended to the command line ("" for
 * nothing: more --set options), into dir/runs/<name> (beside the data, never in a data
 * directory: bt-train refuses that); `steps` is how many train records its
 * metrics.jsonl must hold. Returns 1 when it exited 0. */
static int train_steps(const char *name, const char *source, const char *extra, int steps) {
    char out[1200];
    snprintf(out, sizeof out, "%s/runs/%s", dir, name);
    int rc = run(train_exe, "--config '%s' --quiet-config --set 'output.dir=%s' "
                 "--set 'data.train=%s' %s", cfg, out, source, extra);
    if (!tu_check(rc == 0, "%s: bt-train from %s exits 0 (got %d)%s%.600s", name, source, rc,
                  rc ? ": " : "", rc ? err_text : ""))
        return 0;
    check_metrics(name, out, steps);
    return 1;
}

static int train(const char *name, const char *source, const char *extra) {
    return train_steps(name, source, extra, STEPS);
}

/* Whether dir/runs/<a>/model.safetensors and dir/runs/<b>/model.safetensors both exist and hold the
 * same bytes. */
static int same_weights(const char *a_name, const char *b_name) {
    char a[1200], b[1200];
    snprintf(a, sizeof a, "%s/runs/%s/model.safetensors", dir, a_name);
    snprintf(b, sizeof b, "%s/runs/%s/model.safetensors", dir, b_name);
    return tu_files_equal(a, b);
}

static void expect_same(const char *name, const char *what) {
    tu_check(same_weights("ref", name), "%s: model.safetensors equals the JSON Lines + JPEG "
             "run's, byte for byte", what);
}

/* The control `name` ran (it wrote model.safetensors) and its weights differ from those of
 * run `base`. */
static void expect_differ_from(const char *base, const char *name, const char *what) {
    char b[1200];
    snprintf(b, sizeof b, "%s/runs/%s/model.safetensors", dir, name);
    struct stat st;
    tu_check(stat(b, &st) == 0 && !same_weights(base, name),
             "control, %s: model.safetensors differs from run %s's", what, base);
}

static void expect_differ(const char *name, const char *what) {
    expect_differ_from("ref", name, what);
}

static void write_config(void) {
    char model[1024];
    tts_synthetic_model_dir(model, sizeof model);
    snprintf(cfg, sizeof cfg, "%s/run.json", dir);
    char text[4096];
    snprintf(text, sizeof text,
             "{\n"
             "  \"model\": {\"config\": \"%s\", \"init_seed\": 0, \"heads\": [\"itc\", \"itm\", "
             "\"mlm\"]},\n"
             "  \"data\": {\"train\": \"%s/train.jsonl\", \"max_length\": 32, \"seed\": 1,\n"
             "           \"shuffle\": false, \"drop_last\": true, \"num_workers\": 2},\n"
             "  \"train\": {\"batch_size\": 8, \"max_steps\": %d, \"lr\": 1e-3, "
             "\"warmup_steps\": 1,\n"
             "            \"weight_decay\": 0.01, \"max_grad_norm\": 1.0,\n"
             "            \"loss_weights\": {\"itc\": 1, \"itm\": 0.5, \"mlm\": 0.5},\n"
             "            \"seed\": 5, \"dropout\": true, \"threads\": 2},\n"
             "  \"logging\": {\"steps\": 1, \"tensorboard\": false, \"report\": false},\n"
             "  \"eval\": {\"strategy\": \"no\", \"at_end\": false},\n"
             "  \"save\": {\"strategy\": \"no\"}\n"
             "}\n",
             model, synth, STEPS);
    tu_setup_text(cfg, text);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: test_train_sources PATH/TO/bt-train PATH/TO/bt-data\n");
        return 1;
    }
    train_exe = argv[1];
    data_exe = argv[2];
    snprintf(dir, sizeof dir, "%s", tu_tmpdir());
    snprintf(synth, sizeof synth, "%s/synth", dir);
    tts_synth_data(synth, N_REC, 0, 0);
    read_reference();
    make_lossless_copies();
    make_imagefolder("folder", -1, 0);
    make_imagefolder("folder_control", 9, 0);
    make_imagefolder("folder_jsonl", -1, 1);
    write_config();
    char src[1400];

    /* 1. the reference: JSON Lines + JPEG */
    snprintf(src, sizeof src, "%s/train.jsonl", synth);
    if (!train("ref", src, "")) return tu_finish();

    /* 2. PNG and WebP files of the same pixels */
    snprintf(src, sizeof src, "%s/png.jsonl", synth);
    if (train("png", src, "")) expect_same("png", "PNG files (lossless, same pixels)");
    snprintf(src, sizeof src, "%s/webp.jsonl", synth);
    if (train("webp", src, "")) expect_same("webp", "lossless WebP files (same pixels)");
    snprintf(src, sizeof src, "%s/png_control.jsonl", synth);
    if (train("png_control", src, ""))
        expect_differ("png_control", "one pixel of record 5's PNG changed");

    /* 3. an HF imagefolder with metadata.csv */
    snprintf(src, sizeof src, "%s/folder", dir);
    if (train("folder", src, "--set data.caption_column=text"))
        expect_same("folder", "imagefolder with metadata.csv (file_name, text)");
    snprintf(src, sizeof src, "%s/folder_control", dir);
    if (train("folder_control", src, "--set data.caption_column=text"))
        expect_differ("folder_control", "one letter of record 9's caption in metadata.csv "
                      "changed case");

    snprintf(src, sizeof src, "%s/folder_jsonl", dir);
    if (train("folder_jsonl", src, "--set data.caption_column=text"))
        expect_same("folder_jsonl", "imagefolder with metadata.jsonl (file_name, text)");

    /* 4. WebDataset shards written by bt-data shards */
    int rc = run(data_exe, "shards --data '%s/train.jsonl' --out '%s/shards' --per-shard 4",
                 synth, dir);
    tu_check(rc == 0, "bt-data shards from train.jsonl exits 0 (%d)%s%.400s", rc, rc ? ": " : "",
             rc ? err_text : "");
    snprintf(src, sizeof src, "%s/shards", dir);
    if (rc == 0 && train("shards", src, ""))
        expect_same("shards", "the directory of shards written from train.jsonl");
    snprintf(src, sizeof src, "%s/shards/{00002,00000,00001,00003}.tar", dir);
    if (rc == 0 && train("shards_control", src, ""))
        expect_differ("shards_control", "the same shards named in another order");

    rc = run(data_exe, "shards --data '%s/mixed.jsonl' --out '%s/shards_mixed' --per-shard 5",
             synth, dir);
    char pattern[1400];
    snprintf(pattern, sizeof pattern, "%s/shards_mixed/{00000..00003}.tar", dir);
    const int printed = rc == 0 && strstr(out_text, pattern) != NULL;
    tu_check(printed, "bt-data shards from mixed.jsonl exits 0 and prints %s (%d)%s%.400s%.400s",
             pattern, rc, printed ? "" : ": ", printed ? "" : out_text, printed ? "" : err_text);
    int png = 0, webp = 0, jpg = 0;
    for (int s = 0; s < 4; s++) {
        char p[1400];
        snprintf(p, sizeof p, "%s/shards_mixed/%05d.tar", dir, s);
        png += count_members(p, ".png");
        webp += count_members(p, ".webp");
        jpg += count_members(p, ".jpg");
    }
    /* records 0, 3, .., 15 are PNG; 1, 4, .., 13 WebP; 2, 5, .., 14 JPEG */
    tu_check(png == 6 && webp == 5 && jpg == 5,
             "the mixed shards hold 6 PNG, 5 WebP and 5 JPEG members (got %d, %d, %d)", png,
             webp, jpg);
    if (rc == 0 && train("shards_mixed", pattern, ""))
        expect_same("shards_mixed", "shards of PNG, WebP and JPEG members, by brace pattern");

    /* 5. a shard another program wrote */
    const char *cli = make_tar_cli_shard();
    if (cli && train("tar_cli", cli, ""))
        expect_same("tar_cli", "one shard written by tar --format=pax");

    /* 6. resume on shuffled shards: the mixed shards (5, 5, 5, 1 samples), shuffle on with a
     * buffer of 3 (docs/data.md "Order with shards"), a checkpoint every step. Resumed from
     * checkpoint-1 (epoch 0, position 8) and checkpoint-3 (epoch 1, position 8), the run must
     * end with the uninterrupted run's weights. Position 8 is inside a shard whatever the
     * shuffled shard order (the shard boundaries fall at sums of 5, 5, 5, 1: 1, 5, 6, 10, 11,
     * 15), with the buffer full. The control shows the shuffle took effect (the shuffled run
     * differs from the unshuffled shards_mixed run). */
    static const char shuffled[] = "--set data.shuffle=true --set data.shuffle_buffer=3 "
                                   "--set save.strategy=steps --set save.steps=1";
    if (rc == 0 && train("shuffled", pattern, shuffled)) {
        expect_differ_from("shards_mixed", "shuffled", "shuffle on with a buffer of 3");
        for (int at = 1; at <= 3; at += 2) {
            char name[32], extra[2600];
            snprintf(name, sizeof name, "resumed_at_%d", at);
            snprintf(extra, sizeof extra, "%s --set 'output.resume_from=%s/runs/shuffled/checkpoint-%d'",
                     shuffled, dir, at);
            if (train_steps(name, pattern, extra, STEPS - at))
                tu_check(same_weights("shuffled", name),
                         "shuffled shards resumed from checkpoint-%d: model.safetensors equals "
                         "the uninterrupted run's, byte for byte", at);
        }
    }

    for (int i = 0; i < N_REC; i++) {
        free(images[i]);
        free(captions[i]);
    }
    return tu_finish();
}
