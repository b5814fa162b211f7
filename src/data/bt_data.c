/* bt_data.c: the bt-data command, dataset tools around src/data.
 *
 *   bt-data check --data MANIFEST [--model DIR] [--image-key K] [--caption-key K]
 *                 [--max-length N]
 *       reads every record, decodes every image, tokenizes every caption (with --model),
 *       and reports counts, every problem as file:line, image size and caption length
 *       distributions, and duplicates (same image, same caption).
 *   bt-data tokenize --model DIR [--pair] [--max-length N [--pad]] [--mask]
 *       one JSON array of token ids per stdin line (--pair: two tab-separated texts;
 *       --mask: {"input_ids": [...], "attention_mask": [...]} objects instead).
 *   bt-data preprocess --model DIR --image FILE --output OUT.safetensors [--dtype f32|bf16]
 *                      [--dct-scaling]
 *       writes pixel_values (1, 3, R, R) exactly as a loader batch row holds it.
 *   bt-data synth --out DIR [--train N] [--val N] [--test N] [--seed S] [--size PX]
 *   bt-data synth --captions N [--seed S]
 *       generates the synthetic dataset (synth.h), or prints N training captions (the corpus
 *       the committed configs/synthetic tokenizer was trained on).
 *   bt-data batch --data MANIFEST --model DIR --batch-size N [--index K] [--seed S]
 *                 [--max-length T] [--dtype f32|bf16] [--dct-scaling] [--image-key K]
 *                 [--caption-key K] --output OUT.safetensors
 *       assembles batch K of the stream the loader (loader.h) delivers to the trainer (shuffle
 *       from S, one rank, partial last batch kept; K counts across epochs, seq = epoch *
 *       batches_per_epoch + k) and writes it under Hugging Face's forward-argument names:
 *       input_ids, attention_mask (B, T) I64, pixel_values (B, 3, R, R), labels (B) I64 of
 *       ones (every pair is a matching pair: ITM's positive label), with the record ids and
 *       indices as metadata; B is the batch's valid rows. T: --max-length, else config.json's
 *       max_text_len, else max_position_embeddings - pad_token_id - 1. bt-forward reads it.
 *   bt-data shards --data SOURCE --out DIR [--per-shard N] [--image-key K] [--caption-key K]
 *       writes the records of any source manifest_load reads as WebDataset shards
 *       DIR/00000.tar, 00001.tar, ... of N samples each (default 1000), in record order: per
 *       sample "<index>.jpg|png|webp" (the image's bytes unchanged; the extension from its
 *       content), "<index>.txt" (the caption) and, when the record has an id or caption
 *       choices, "<index>.json" ({"id", "caption_choices", "label"}). Each shard is written
 *       atomically; the brace pattern to give as data.train is printed.
 *
 * Exit status: 0 ok, 1 problems found or an error (the message names the file and line),
 * 2 usage error.
 *
 * Deliberately not here: rewriting or repairing manifests, downloading datasets, negatives
 * for ITM or MLM masking in `batch` (the trainer builds those). */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "model/config.h"
#include "kernels/cpu.h"
#include "data/image.h"
#include "data/loader.h"
#include "data/manifest.h"
#include "data/sampler.h"
#include "data/shards.h"
#include "data/synth.h"
#include "data/tokenizer.h"
#include "args.h"
#include "fileio.h"
#include "json_util.h"
#include "mem.h"
#include "safetensors.h"

enum { EXIT_OK = 0, EXIT_PROBLEMS = 1, EXIT_USAGE = 2 };

static const char usage_text[] =
    "usage:\n"
    "  bt-data check --data MANIFEST [--model DIR] [--image-key K] [--caption-key K]\n"
    "                [--max-length N]\n"
    "  bt-data tokenize --model DIR [--pair] [--max-length N [--pad]] [--mask]\n"
    "  bt-data preprocess --model DIR --image FILE --output OUT.safetensors\n"
    "                     [--dtype f32|bf16] [--dct-scaling]\n"
    "  bt-data synth --out DIR [--train N] [--val N] [--test N] [--seed S] [--size PX]\n"
    "  bt-data synth --captions N [--seed S]\n"
    "  bt-data batch --data MANIFEST --model DIR --batch-size N [--index K] [--seed S]\n"
    "                [--max-length T] [--dtype f32|bf16] [--dct-scaling]\n"
    "                [--image-key K] [--caption-key K]\n"
    "                --output OUT.safetensors\n"
    "  bt-data shards --data SOURCE --out DIR [--per-shard N] [--image-key K]\n"
    "                 [--caption-key K]\n";

static int usage(const char *fmt, const char *arg) {
    fprintf(stderr, "bt-data: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n%s", usage_text);
    return EXIT_USAGE;
}

static int fail(void) {
    fprintf(stderr, "bt-data: error: %s\n", bt_error_message());
    return EXIT_PROBLEMS;
}

/* --model DIR must be a directory: said as such, before any of its files is looked for. */
static bt_status check_model_dir(const char *dir) {
    struct stat sb;
    if (!dir[0]) return bt_fail(BT_ERR_ARG, "--model: the path is empty; expected a directory");
    if (stat(dir, &sb) != 0)
        return bt_fail(BT_ERR_IO, "--model %s: %s%s", dir, strerror(errno),
                       errno == ENOENT ? " (expected a model directory)" : "");
    if (!S_ISDIR(sb.st_mode))
        return bt_fail(BT_ERR_IO, "--model %s: is %s; expected a model directory", dir,
                       bt_file_type_name(sb.st_mode));
    return BT_OK;
}

typedef struct args {
    const char *data, *model, *image_key, *caption_key, *image, *output, *out, *dtype;
    long long max_length, train, val, test, size, captions, batch_size, index, per_shard;
    uint64_t seed;
    int pair, pad, mask, dct;
} args;

typedef enum { OPT_STR, OPT_NUM, OPT_U64, OPT_FLAG } opt_kind;

/* Every option of every command: one table, one parser (numbers: src/args.h, strict, in
 * [lo, hi]; seeds: the full uint64 range, as the loader's cursor stores them). */
static const struct opt_spec {
    const char *name;
    opt_kind kind;
    size_t offset;
    long long lo, hi;
} opt_specs[] = {
    {"--data", OPT_STR, offsetof(args, data), 0, 0},
    {"--model", OPT_STR, offsetof(args, model), 0, 0},
    {"--image-key", OPT_STR, offsetof(args, image_key), 0, 0},
    {"--caption-key", OPT_STR, offsetof(args, caption_key), 0, 0},
    {"--image", OPT_STR, offsetof(args, image), 0, 0},
    {"--output", OPT_STR, offsetof(args, output), 0, 0},
    {"--out", OPT_STR, offsetof(args, out), 0, 0},
    {"--dtype", OPT_STR, offsetof(args, dtype), 0, 0},
    {"--max-length", OPT_NUM, offsetof(args, max_length), 2, 65536},
    {"--train", OPT_NUM, offsetof(args, train), 0, 100000000},
    {"--val", OPT_NUM, offsetof(args, val), 0, 100000000},
    {"--test", OPT_NUM, offsetof(args, test), 0, 100000000},
    {"--seed", OPT_U64, offsetof(args, seed), 0, 0},
    {"--size", OPT_NUM, offsetof(args, size), 16, 4096},
    {"--captions", OPT_NUM, offsetof(args, captions), 0, 100000000},
    {"--batch-size", OPT_NUM, offsetof(args, batch_size), 1, 65536},
    {"--index", OPT_NUM, offsetof(args, index), 0, INT64_MAX / 2},
    {"--per-shard", OPT_NUM, offsetof(args, per_shard), 1, 100000000},
    {"--pair", OPT_FLAG, offsetof(args, pair), 0, 0},
    {"--pad", OPT_FLAG, offsetof(args, pad), 0, 0},
    {"--mask", OPT_FLAG, offsetof(args, mask), 0, 0},
    {"--dct-scaling", OPT_FLAG, offsetof(args, dct), 0, 0},
};

/* Returns EXIT_OK or EXIT_USAGE. */
static int parse_args(args *a, int argc, char **argv) {
    memset(a, 0, sizeof *a);
    a->max_length = a->captions = a->batch_size = -1;
    a->train = 1000, a->val = 200, a->test = 200, a->seed = 0, a->size = 64;
    a->index = -1;
    for (int i = 2; i < argc; i++) {
        const struct opt_spec *spec = NULL;
        for (size_t k = 0; k < sizeof opt_specs / sizeof opt_specs[0] && !spec; k++)
            if (!strcmp(argv[i], opt_specs[k].name)) spec = &opt_specs[k];
        if (!spec) return usage("unknown option '%s'", argv[i]);
        char *field = (char *)a + spec->offset;
        if (spec->kind == OPT_FLAG) {
            *(int *)field = 1;
            continue;
        }
        if (i + 1 >= argc) return usage("option '%s' needs a value", spec->name);
        const char *v = argv[++i];
        if (spec->kind == OPT_STR) {
            *(const char **)field = v;
            continue;
        }
        bt_status st;
        if (spec->kind == OPT_U64) {
            st = bt_parse_u64(spec->name, v, 0, UINT64_MAX, (uint64_t *)field);
        } else {
            int64_t x = 0;
            st = bt_parse_i64(spec->name, v, spec->lo, spec->hi, &x);
            *(long long *)field = x;
        }
        if (st != BT_OK) return usage("%s", bt_error_message());
    }
    return EXIT_OK;
}

/* ---- check ------------------------------------------------------------------------------- */

static int cmp_int(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

static void print_distribution(const char *what, int *v, size_t n, int histogram) {
    if (n == 0) return;
    qsort(v, n, sizeof *v, cmp_int);
    printf("%s: min %d, median %d, p95 %d, max %d\n", what, v[0], v[n / 2],
           v[(size_t)((double)(n - 1) * 0.95)], v[n - 1]);
    if (!histogram || v[0] == v[n - 1]) return;
    /* Ten equal-width bins over [min, max], bars scaled to the fullest bin. */
    int lo = v[0], hi = v[n - 1];
    size_t bins[10] = {0}, most = 0;
    for (size_t i = 0; i < n; i++) {
        int b = (int)((int64_t)(v[i] - lo) * 10 / (hi - lo + 1));
        bins[b]++;
    }
    for (int b = 0; b < 10; b++)
        most = bins[b] > most ? bins[b] : most;
    for (int b = 0; b < 10; b++) {
        int from = lo + (int)((int64_t)b * (hi - lo + 1) / 10);
        int to = lo + (int)((int64_t)(b + 1) * (hi - lo + 1) / 10) - 1;
        if (to < from) continue;
        int bar = (int)(bins[b] * 40 / (most ? most : 1));
        printf("  %5d-%-5d %8zu %.*s\n", from, to, bins[b], bar,
               "########################################");
    }
}

static const manifest *sort_m;
static int cmp_by_image(const void *a, const void *b) {
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    int c = strcmp(manifest_image(sort_m, x), manifest_image(sort_m, y));
    return c ? c : (x > y) - (x < y);
}
static int cmp_by_caption(const void *a, const void *b) {
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    int c = strcmp(manifest_caption(sort_m, x), manifest_caption(sort_m, y));
    return c ? c : (x > y) - (x < y);
}

/* Groups records with equal keys; prints the count and a few examples. Returns the number
 * of records that repeat an earlier one. */
static size_t report_duplicates(const manifest *m, size_t *order,
                                int (*cmp)(const void *, const void *), const char *what,
                                const char *(*key)(const manifest *, size_t)) {
    sort_m = m;
    qsort(order, m->n, sizeof *order, cmp);
    size_t repeats = 0, groups = 0, shown = 0;
    for (size_t i = 1; i < m->n; i++) {
        if (strcmp(key(m, order[i]), key(m, order[i - 1])) != 0) continue;
        repeats++;
        if (i == 1 || strcmp(key(m, order[i - 1]), key(m, order[i - 2])) != 0) groups++;
        if (shown < 3) {
            printf("  %s:%d repeats the %s of line %d\n", m->path, m->records[order[i]].line, what,
                   m->records[order[i - 1]].line);
            shown++;
        }
    }
    size_t distinct = m->n - repeats;
    printf("distinct %ss: %zu of %zu records (%zu records repeat one of %zu %ss)\n", what, distinct,
           m->n, repeats, groups, what);
    return repeats;
}

static const char *key_image(const manifest *m, size_t i) {
    return manifest_image(m, i);
}
static const char *key_caption(const manifest *m, size_t i) {
    return manifest_caption(m, i);
}

/* Record i's image decoded at full size (bt-data check). */
static bt_status decode_record_image(const manifest *m, size_t i, image_u8 *im) {
    if (!m->members) return image_load_file(im, manifest_image(m, i), NULL);
    uint8_t *bytes;
    size_t n;
    bt_status st = shards_read_record_image(m, i, &bytes, &n);
    if (st != BT_OK) return st;
    st = image_decode_for(im, bytes, n, manifest_image(m, i), NULL);
    bt_free(bytes);
    return st;
}

static int cmd_check(const args *a) {
    if (!a->data) return usage("check needs --data MANIFEST%s", "");
    manifest_options mo = manifest_options_default();
    mo.on_error = MANIFEST_ON_ERROR_SKIP;
    if (a->image_key) mo.image_key = a->image_key;
    if (a->caption_key) mo.caption_key = a->caption_key;

    tokenizer tok;
    memset(&tok, 0, sizeof tok);
    if (a->model && (check_model_dir(a->model) != BT_OK || tokenizer_load(&tok, a->model) != BT_OK))
        return fail();

    manifest m;
    bt_status st = manifest_load(&m, a->data, &mo);
    size_t problems = m.n_skipped;
    for (size_t i = 0; i < m.n_skipped; i++)
        printf("problem: %s\n", m.problems[i]);
    if (st != BT_OK) {
        fprintf(stderr, "bt-data: error: %s\n", bt_error_message());
        manifest_free(&m);
        tokenizer_free(&tok);
        return EXIT_PROBLEMS;
    }
    printf("manifest: %s: %zu records from %zu lines, %zu lines skipped\n", m.path, m.n, m.n_lines,
           m.n_skipped);

    /* Decode each distinct image once, in path order (records sorted by image). */
    size_t *order = malloc(m.n * sizeof *order);
    int *widths = malloc(m.n * sizeof *widths), *heights = malloc(m.n * sizeof *heights);
    int *chars = malloc(m.n * sizeof *chars), *tokens = malloc(m.n * sizeof *tokens);
    int rc = EXIT_PROBLEMS;
    if (!order || !widths || !heights || !chars || !tokens) {
        fprintf(stderr, "bt-data: error: out of memory for %zu records\n", m.n);
        goto done;
    }
    for (size_t i = 0; i < m.n; i++)
        order[i] = i;
    sort_m = &m;
    qsort(order, m.n, sizeof *order, cmp_by_image);
    size_t n_images = 0, bad_images = 0;
    for (size_t g = 0; g < m.n;) {
        size_t end = g + 1;
        while (end < m.n && !strcmp(manifest_image(&m, order[end]), manifest_image(&m, order[g])))
            end++;
        /* The group's first record in file order names the problem. */
        size_t first = order[g];
        for (size_t i = g; i < end; i++)
            first = order[i] < first ? order[i] : first;
        image_u8 im;
        memset(&im, 0, sizeof im);
        char where[4400];
        manifest_where(&m, first, where, sizeof where);
        if (decode_record_image(&m, first, &im) != BT_OK) {
            printf("problem: %s: %s", where, bt_error_message());
            if (end - g > 1) printf(" (and %zu more records with this image)", end - g - 1);
            printf("\n");
            bad_images++;
            problems += end - g;
        } else {
            widths[n_images] = im.w;
            heights[n_images] = im.h;
            n_images++;
        }
        image_u8_free(&im);
        g = end;
    }
    printf("images: %zu decoded, %zu failed\n", n_images, bad_images);
    print_distribution("image width (px)", widths, n_images, 0);
    print_distribution("image height (px)", heights, n_images, 0);

    /* Caption lengths: characters always, tokens (with <s> and </s>) given a tokenizer. */
    size_t over = 0, with_choices = 0;
    for (size_t i = 0; i < m.n; i++) {
        const char *c = manifest_caption(&m, i);
        size_t len = strlen(c);
        chars[i] = len > INT_MAX ? INT_MAX : (int)len;
        with_choices += manifest_has_choices(&m, i);
        if (!a->model) continue;
        size_t n = 0;
        st = tokenizer_encode(&tok, c, len, NULL, 0, &n);
        if (st != BT_OK && st != BT_ERR_ARG) { /* BT_ERR_ARG: cap 0 too small, n is set */
            char where[4400];
            manifest_where(&m, i, where, sizeof where);
            printf("problem: %s: caption: %s\n", where, bt_error_message());
            problems++;
            n = 0;
        }
        tokens[i] = n + 2 > INT_MAX ? INT_MAX : (int)(n + 2);
        if (a->max_length > 0 && (long long)n + 2 > a->max_length) over++;
        for (int k = 0; k < MANIFEST_N_CHOICES && manifest_has_choices(&m, i); k++) {
            const char *ch = manifest_choice(&m, i, k);
            st = tokenizer_encode(&tok, ch, strlen(ch), NULL, 0, &n);
            if (st != BT_OK && st != BT_ERR_ARG) {
                char where[4400];
                manifest_where(&m, i, where, sizeof where);
                printf("problem: %s: caption choice %d: %s\n", where, k, bt_error_message());
                problems++;
            }
        }
    }
    printf("matching-task records (caption_choices): %zu\n", with_choices);
    print_distribution("caption length (bytes)", chars, m.n, !a->model);
    if (a->model) {
        print_distribution("caption length (tokens, with <s> </s>)", tokens, m.n, 1);
        if (a->max_length > 0)
            printf("captions longer than --max-length %lld (truncated in training): %zu\n",
                   a->max_length, over);
    }

    report_duplicates(&m, order, cmp_by_image, "image", key_image);
    report_duplicates(&m, order, cmp_by_caption, "caption", key_caption);
    printf("check: %zu records, %zu problems\n", m.n, problems);
    rc = problems ? EXIT_PROBLEMS : EXIT_OK;
done:
    free(order);
    free(widths);
    free(heights);
    free(chars);
    free(tokens);
    manifest_free(&m);
    tokenizer_free(&tok);
    return rc;
}

/* ---- tokenize ---------------------------------------------------------------------------- */

static void print_ids(const int32_t *v, size_t n) {
    putchar('[');
    for (size_t i = 0; i < n; i++)
        printf(i ? ", %d" : "%d", v[i]);
    putchar(']');
}

static int cmd_tokenize(const args *a) {
    if (!a->model) return usage("tokenize needs --model DIR%s", "");
    if (a->pad && a->max_length < 0) return usage("--pad needs --max-length N%s", "");
    if (a->max_length >= 0 && a->max_length < (a->pair ? 4 : 2))
        return usage("--max-length must be at least %s", a->pair ? "4 with --pair" : "2");
    tokenizer tok;
    if (check_model_dir(a->model) != BT_OK || tokenizer_load(&tok, a->model) != BT_OK)
        return fail();
    char *line = NULL;
    size_t cap = 0, line_no = 0;
    ssize_t len;
    int status = EXIT_OK;
    int32_t *ids = NULL, *mask = NULL;
    size_t ids_cap = 0;
    while ((len = getline(&line, &cap, stdin)) >= 0) {
        line_no++;
        size_t n = (size_t)len;
        if (n && line[n - 1] == '\n') n--;
        if (n && line[n - 1] == '\r') n--;
        const char *b = NULL;
        size_t an = n, bn = 0;
        if (a->pair) {
            char *tab = memchr(line, '\t', n);
            if (!tab) {
                fprintf(stderr, "bt-data: stdin:%zu: --pair needs two tab-separated texts\n",
                        line_no);
                status = EXIT_PROBLEMS;
                printf("null\n");
                continue;
            }
            an = (size_t)(tab - line);
            b = tab + 1;
            bn = n - an - 1;
        }
        /* Without --max-length nothing is truncated: size the buffers to the full text. */
        size_t na = 0, nb = 0;
        tokenizer_encode(&tok, line, an, NULL, 0, &na);
        if (a->pair) tokenizer_encode(&tok, b, bn, NULL, 0, &nb);
        size_t full = na + nb + (a->pair ? 4 : 2);
        size_t max_len = a->max_length >= 0 ? (size_t)a->max_length : full;
        size_t need = max_len > full ? max_len : full;
        if (need > ids_cap) {
            int32_t *ni = realloc(ids, need * sizeof *ids);
            if (ni) ids = ni;
            int32_t *nm = ni ? realloc(mask, need * sizeof *mask) : NULL;
            if (nm) mask = nm;
            if (!ni || !nm) {
                fprintf(stderr, "bt-data: stdin:%zu: out of memory for %zu tokens\n", line_no,
                        need);
                status = EXIT_PROBLEMS;
                break;
            }
            ids_cap = need;
        }
        size_t out_n = 0;
        bt_status st = a->pair ? tokenizer_encode_pair(&tok, line, an, b, bn, max_len, 1, a->pad,
                                                       ids, mask, &out_n)
                               : tokenizer_encode_single(&tok, line, an, max_len, 1, a->pad, ids,
                                                         mask, &out_n);
        if (st != BT_OK) {
            fprintf(stderr, "bt-data: stdin:%zu: %s\n", line_no, bt_error_message());
            status = EXIT_PROBLEMS;
            printf("null\n");
            continue;
        }
        if (a->mask) {
            printf("{\"input_ids\": ");
            print_ids(ids, out_n);
            printf(", \"attention_mask\": ");
            print_ids(mask, out_n);
            printf("}\n");
        } else {
            print_ids(ids, out_n);
            putchar('\n');
        }
    }
    free(line);
    free(ids);
    free(mask);
    tokenizer_free(&tok);
    return status;
}

/* --dtype f32 (the default) or bf16 into *bf16. Returns 0, or the usage exit code. */
static int parse_dtype(const args *a, int *bf16) {
    *bf16 = a->dtype && !strcmp(a->dtype, "bf16");
    if (a->dtype && !*bf16 && strcmp(a->dtype, "f32"))
        return usage("--dtype '%s': expected f32 or bf16", a->dtype);
    return 0;
}

/* ---- preprocess -------------------------------------------------------------------------- */

static int cmd_preprocess(const args *a) {
    if (!a->model || !a->image || !a->output)
        return usage("preprocess needs --model DIR --image FILE --output OUT.safetensors%s", "");
    int bf16, usage_rc = parse_dtype(a, &bf16);
    if (usage_rc) return usage_rc;
    /* The output is checked first: refused (a device, a FIFO, a directory) before any work. */
    if (bt_prepare_output_file(a->output, "--output") != BT_OK) return fail();
    if (check_model_dir(a->model) != BT_OK) return fail();
    char path[4096];
    snprintf(path, sizeof path, "%s/preprocessor_config.json", a->model);
    image_preprocess_config cfg;
    if (image_preprocess_config_from_json(&cfg, path) != BT_OK) return fail();
    cfg.use_dct_scaling = a->dct;
    size_t R = (size_t)cfg.crop_size, numel = 3 * R * R;
    char what[4300];
    snprintf(what, sizeof what, "preprocessing one image with %s (shortest_edge %d, crop %d)",
             path, cfg.shortest_edge, cfg.crop_size);
    if (bt_mem_check(bt_add_sat(image_work_bytes(&cfg), numel * (bf16 ? 2 : 4)), what,
                     "size.shortest_edge / crop_size in preprocessor_config.json") != BT_OK)
        return fail();
    image_u8 im;
    memset(&im, 0, sizeof im);
    if (image_load_file(&im, a->image, &cfg) != BT_OK) return fail();
    void *px = bt_alloc(numel * (bf16 ? 2 : 4));
    if (bf16)
        image_preprocess_bf16(px, &im, &cfg);
    else
        image_preprocess(px, &im, &cfg);
    safetensors_entry e = {
        .name = "pixel_values",
        .dtype = bf16 ? BT_DTYPE_BF16 : BT_DTYPE_F32,
        .src_dtype = bf16 ? BT_DTYPE_BF16 : BT_DTYPE_F32,
        .ndim = 4,
        .shape = {1, 3, (int64_t)R, (int64_t)R},
        .data = px,
    };
    const char *meta[] = {"source", a->image, "generator", "bt-data preprocess", NULL};
    bt_status st = safetensors_write(a->output, &e, 1, meta);
    int w = im.orig_w, h = im.orig_h;
    bt_free(px);
    image_u8_free(&im);
    if (st != BT_OK) return fail();
    printf("%s: pixel_values (1, 3, %zu, %zu) %s from %s (%dx%d)\n", a->output, R, R,
           bf16 ? "BF16" : "F32", a->image, w, h);
    return EXIT_OK;
}

/* ---- synth ------------------------------------------------------------------------------- */

static int cmd_synth(const args *a) {
    if (a->captions >= 0) {
        for (long long i = 0; i < a->captions; i++) {
            synth_scene sc;
            char cap[SYNTH_CAPTION_MAX];
            synth_scene_sample(&sc, a->seed, SYNTH_SPLIT_TRAIN, i);
            synth_scene_caption(&sc, cap, sizeof cap);
            puts(cap);
        }
        return EXIT_OK;
    }
    if (!a->out) return usage("synth needs --out DIR (or --captions N)%s", "");
    synth_options o = {
        .out_dir = a->out,
        .n = {a->train, a->val, a->test},
        .seed = a->seed,
        .size = (int)a->size, /* --size is parsed in [16, 4096] */
    };
    if (synth_generate(&o) != BT_OK) return fail();
    printf("%s: %lld train, %lld val, %lld test records, %lldx%lld px, seed %llu\n", a->out,
           a->train, a->val, a->test, a->size, a->size, (unsigned long long)a->seed);
    return EXIT_OK;
}

/* Compact JSON text of `item` (malloc'd, caller frees); deletes item. */
static char *json_take(cJSON *item) {
    char *t = cJSON_PrintUnformatted(item);
    BT_ASSERT(t);
    cJSON_Delete(item);
    return t;
}

/* ---- shards ------------------------------------------------------------------------------ */

static int cmd_shards(const args *a) {
    if (!a->data || !a->out) return usage("shards needs --data SOURCE --out DIR%s", "");
    long long per = a->per_shard > 0 ? a->per_shard : 1000;
    manifest_options mo = manifest_options_default();
    if (a->image_key) mo.image_key = a->image_key;
    if (a->caption_key) mo.caption_key = a->caption_key;
    manifest m;
    bt_status st = manifest_load(&m, a->data, &mo);
    size_t n_shards = 0;
    if (st == BT_OK) st = shards_write(&m, a->out, (size_t)per, &n_shards);
    if (st != BT_OK) {
        manifest_free(&m);
        return fail();
    }
    if (n_shards == 1)
        printf("%s: %zu samples in 1 shard: %s/00000.tar\n", a->data, m.n, a->out);
    else
        printf("%s: %zu samples in %zu shards: %s/{00000..%05zu}.tar\n", a->data, m.n, n_shards,
               a->out, n_shards - 1);
    manifest_free(&m);
    return EXIT_OK;
}

/* ---- batch ------------------------------------------------------------------------------- */

/* The model directory's config.json, if it has one: the text length the model takes by
 * default (max_text_len, a BridgeTower checkpoint key bt's config reader skips, else the
 * position table's capacity) and its limits. *has_config = 0 when there is no config.json. */
typedef struct model_text_info {
    int has_config;
    int default_length; /* max_text_len or max_pos - pad - 1 */
    int max_length;     /* max_position_embeddings - pad_token_id - 1 */
    int image_size;     /* vision_config.image_size */
    char path[4200];
} model_text_info;

static bt_status read_model_info(model_text_info *mi, const char *model_dir) {
    memset(mi, 0, sizeof *mi);
    snprintf(mi->path, sizeof mi->path, "%s/config.json", model_dir);
    struct stat sb;
    if (stat(mi->path, &sb) != 0 && errno == ENOENT) return BT_OK;
    char *text;
    bt_status st = bt_json_read_text(mi->path, NULL, &text);
    if (st) return st;
    bt_model_config c;
    st = bt_model_config_parse(&c, text, mi->path);
    if (st == BT_OK) {
        mi->has_config = 1;
        mi->max_length = bt_model_config_max_text(&c);
        mi->image_size = c.image_size;
        st = bt_model_config_text_length(text, &c, mi->path, &mi->default_length);
    }
    free(text);
    return st;
}

/* Longer than ~120 lines on purpose: `bt-data batch` is one sequence (options, model config,
 * tokenizer, manifest, loader, one batch, the safetensors it writes), each step a call with its
 * error path. */
static int cmd_batch(const args *a) {
    if (!a->data || !a->model || !a->output || a->batch_size < 0)
        return usage("batch needs --data MANIFEST --model DIR --batch-size N "
                     "--output OUT.safetensors%s",
                     "");
    int bf16, usage_rc = parse_dtype(a, &bf16);
    if (usage_rc) return usage_rc;
    if (bt_prepare_output_file(a->output, "--output") != BT_OK) return fail();
    if (check_model_dir(a->model) != BT_OK) return fail();

    /* Text length and image size: the run's, checked against the model when it has a
     * config.json (bt-forward would refuse the batch later, less clearly). */
    model_text_info mi;
    if (read_model_info(&mi, a->model) != BT_OK) return fail();
    int T;
    if (a->max_length >= 0) {
        T = (int)a->max_length;
        if (mi.has_config && T > mi.max_length) {
            fprintf(stderr,
                    "bt-data: error: --max-length %d exceeds what the model at %s takes: at most "
                    "%d tokens (max_position_embeddings - pad_token_id - 1)\n",
                    T, mi.path, mi.max_length);
            return EXIT_PROBLEMS;
        }
    } else if (mi.has_config) {
        T = mi.default_length;
    } else {
        return usage("batch: %s/config.json is absent; give the text length with --max-length T",
                     a->model);
    }
    char pp_path[4200];
    snprintf(pp_path, sizeof pp_path, "%s/preprocessor_config.json", a->model);
    image_preprocess_config img;
    if (image_preprocess_config_from_json(&img, pp_path) != BT_OK) return fail();
    img.use_dct_scaling = a->dct;
    if (mi.has_config && img.crop_size != mi.image_size) {
        fprintf(stderr,
                "bt-data: error: %s gives %dx%d images but %s has vision_config.image_size %d; "
                "they must agree\n",
                pp_path, img.crop_size, img.crop_size, mi.path, mi.image_size);
        return EXIT_PROBLEMS;
    }

    tokenizer tok;
    if (tokenizer_load(&tok, a->model) != BT_OK) return fail();
    manifest_options mo = manifest_options_default();
    if (a->image_key) mo.image_key = a->image_key;
    if (a->caption_key) mo.caption_key = a->caption_key;
    manifest m;
    if (manifest_load(&m, a->data, &mo) != BT_OK) {
        int rc = fail();
        manifest_free(&m); /* manifest.h: released also on error */
        tokenizer_free(&tok);
        return rc;
    }

    /* The trainer's loader options for a single process; prefetch 1 so the one worker
     * decodes only the batch asked for. */
    loader_options lo = loader_options_default();
    lo.prefetch = 1;
    lo.seed = (uint64_t)a->seed;
    lo.batch_size = (int)a->batch_size;
    lo.max_length = T;
    lo.pixel_dtype = bf16 ? BT_DTYPE_BF16 : BT_DTYPE_F32;
    lo.with_choices = 0;
    /* Batch K of the stream: epoch K / nb, batch K % nb, nb from the same sampler settings
     * the loader uses; the loader starts there (a cursor on a batch boundary). */
    sampler smp;
    sampler_options so = {.seed = lo.seed,
                          .rank = lo.rank,
                          .world_size = lo.world_size,
                          .batch_size = lo.batch_size,
                          .shuffle = lo.shuffle,
                          .drop_last = lo.drop_last,
                          .drop_last_batch = lo.drop_last_batch};
    bt_status st = sampler_init(&smp, (int64_t)m.n, &so);
    int64_t nb = smp.num_batches;
    sampler_free(&smp);
    loader *l = NULL;
    loader_batch *b = NULL;
    if (st == BT_OK) {
        int64_t K = a->index > 0 ? a->index : 0;
        lo.start.epoch = K / nb;
        lo.start.position = (K % nb) * lo.batch_size;
        lo.max_epochs = lo.start.epoch + 1;
        /* The batch is also copied into int64 ids and mask for the file. */
        char what[600];
        snprintf(what, sizeof what, "bt-data batch (--batch-size %d, %d tokens, %dx%d images)",
                 lo.batch_size, T, img.crop_size, img.crop_size);
        st = bt_mem_check(bt_add_sat(loader_estimate_bytes(m.n, &img, &lo),
                                     (uint64_t)lo.batch_size * ((uint64_t)T * 16 + 8)),
                          what, "--batch-size (or --max-length, or the image size)");
        if (st == BT_OK) st = loader_init(&l, &m, &tok, &img, &lo);
    }
    if (st == BT_OK) st = loader_next(l, &b);
    if (st == BT_OK && !b) st = bt_fail(BT_ERR_MISSING, "%s: no batch delivered", a->data);
    if (st != BT_OK) {
        int rc = fail();
        loader_free(l);
        manifest_free(&m);
        tokenizer_free(&tok);
        return rc;
    }

    /* Only the valid rows: a partial last batch is written as a smaller batch. */
    const int64_t B = b->size, R = b->image_size;
    int64_t *ids64 = malloc((size_t)(B * T) * sizeof *ids64);
    int64_t *mask64 = malloc((size_t)(B * T) * sizeof *mask64);
    int64_t *labels = malloc((size_t)B * sizeof *labels);
    char *s_ids = NULL, *s_rec = NULL, *s_smp = NULL;
    int rc = EXIT_PROBLEMS;
    if (!ids64 || !mask64 || !labels) {
        fprintf(stderr, "bt-data: error: out of memory copying a batch of %" PRId64 " rows\n", B);
        goto release;
    }
    for (int64_t i = 0; i < B * T; i++) {
        ids64[i] = b->input_ids[i];
        mask64[i] = b->attention_mask[i];
    }
    for (int64_t i = 0; i < B; i++)
        labels[i] = 1;
    const bt_dtype px_dtype = bf16 ? BT_DTYPE_BF16 : BT_DTYPE_F32;
    safetensors_entry e[4] = {
        {"input_ids", BT_DTYPE_I64, BT_DTYPE_I64, 2, {B, T}, ids64},
        {"attention_mask", BT_DTYPE_I64, BT_DTYPE_I64, 2, {B, T}, mask64},
        {"pixel_values", px_dtype, px_dtype, 4, {B, 3, R, R}, b->pixel_values},
        {"labels", BT_DTYPE_I64, BT_DTYPE_I64, 1, {B}, labels},
    };
    cJSON *j_ids = cJSON_CreateArray(), *j_rec = cJSON_CreateArray(), *j_smp = cJSON_CreateArray();
    BT_ASSERT(j_ids && j_rec && j_smp);
    for (int64_t i = 0; i < B; i++) {
        cJSON_AddItemToArray(j_ids, b->ids[i] ? cJSON_CreateString(b->ids[i]) : cJSON_CreateNull());
        cJSON_AddItemToArray(j_rec, cJSON_CreateNumber((double)b->record[i]));
        cJSON_AddItemToArray(j_smp, cJSON_CreateNumber((double)b->sampled[i]));
    }
    s_ids = json_take(j_ids), s_rec = json_take(j_rec), s_smp = json_take(j_smp);
    char s_seq[32], s_epoch[32], s_index[32], s_seed[32], s_nb[32], s_T[16];
    snprintf(s_seq, sizeof s_seq, "%" PRId64, b->seq);
    snprintf(s_epoch, sizeof s_epoch, "%" PRId64, b->epoch);
    snprintf(s_index, sizeof s_index, "%" PRId64, b->index);
    snprintf(s_seed, sizeof s_seed, "%llu", (unsigned long long)a->seed);
    snprintf(s_nb, sizeof s_nb, "%" PRId64, nb);
    snprintf(s_T, sizeof s_T, "%d", T);
    const char *meta[] = {"format", "pt", "generator", "bt-data batch", "manifest", m.path,
                          "seq", s_seq, "epoch", s_epoch, "index", s_index,
                          "batches_per_epoch", s_nb, "seed", s_seed, "max_length", s_T,
                          "ids", s_ids, "records", s_rec, "sampled", s_smp, NULL};
    st = safetensors_write(a->output, e, 4, meta);
    rc = EXIT_OK;
    if (st != BT_OK) {
        rc = fail();
    } else {
        printf("%s: batch %" PRId64 " (epoch %" PRId64 ", batch %" PRId64 " of %" PRId64
               ", shuffle seed %llu) of %s: %" PRId64 " records\n",
               a->output, b->seq, b->epoch, b->index, nb, (unsigned long long)a->seed, m.path, B);
        printf("  input_ids, attention_mask (%" PRId64 ", %d) I64; pixel_values (%" PRId64
               ", 3, %" PRId64 ", %" PRId64 ") %s; labels (%" PRId64 ") I64, all 1\n",
               B, T, B, R, R, bf16 ? "BF16" : "F32", B);
        int64_t real = 0;
        for (int64_t i = 0; i < B * T; i++)
            real += b->attention_mask[i];
        printf("  tokens: %.1f of %d per row are text (the rest <pad>, mask 0)\n",
               (double)real / (double)B, T);
        const int64_t r0 = b->record[0];
        printf("  row 0: %s, line %d: \"%s\"\n", b->ids[0] ? b->ids[0] : "(no id)",
               m.records[r0].line, manifest_caption(&m, (size_t)r0));
        printf("         input_ids[0] = [");
        for (int k = 0; k < T; k++)
            printf(k ? ", %d" : "%d", b->input_ids[k]);
        printf("]\n");
    }
release:
    free(s_ids);
    free(s_rec);
    free(s_smp);
    free(ids64);
    free(mask64);
    free(labels);
    loader_release(l, b);
    loader_free(l);
    manifest_free(&m);
    tokenizer_free(&tok);
    return rc;
}

static int tool_main(int argc, char **argv) {
    bt_std_fds_guard(); /* fileio.h: closed 0-2 become /dev/null before any open */
    const int info_rc = bt_runtime_cli_info(argc, argv, "bt-data"); /* --info (cpu.h) */
    if (info_rc >= 0) return info_rc;
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        FILE *out = argc < 2 ? stderr : stdout; /* no command: a usage error */
        fputs(usage_text, out);
        bt_runtime_cli_help(out, 15);
        return argc < 2 ? EXIT_USAGE : EXIT_OK;
    }
    args a;
    if (parse_args(&a, argc, argv) != EXIT_OK) return EXIT_USAGE;
    const char *cmd = argv[1];
    if (!strcmp(cmd, "check")) return cmd_check(&a);
    if (!strcmp(cmd, "tokenize")) return cmd_tokenize(&a);
    if (!strcmp(cmd, "preprocess")) return cmd_preprocess(&a);
    if (!strcmp(cmd, "synth")) return cmd_synth(&a);
    if (!strcmp(cmd, "batch")) return cmd_batch(&a);
    if (!strcmp(cmd, "shards")) return cmd_shards(&a);
    return usage("unknown command '%s'", cmd);
}

int main(int argc, char **argv) {
    return bt_mem_exit(tool_main(argc, argv)); /* mem.h: no hang at exit under ulimit -v */
}
