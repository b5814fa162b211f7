/* test_bt_data.c: the bt-data command, run as a program (its path is argv[1], passed by
 * meson), checked on exit codes and outputs.
 *
 * Expected outputs come from the library called in-process (tokenizer_encode_single/_pair,
 * image_preprocess(_bf16), synth_scene_caption, manifest_load), never from bt-data itself:
 * the test checks that the command line tool prints and writes exactly what the library
 * computes, and that usage errors exit 2, problems exit 1, success exits 0.
 * `batch` is compared with loader_next of an in-process loader with the trainer's options
 * (loader_options_default + batch size, seed, max_length), walked from the start of the
 * stream up to batch K (the command seeks there with a cursor instead): tensors bitwise,
 * record ids and indices in the metadata; also the synthetic demo model's consistency
 * (configs/synthetic-model: vocab_size = the tokenizer's, image_size = the processor's
 * crop, T from max_text_len); `shards` against manifest_load of what it wrote, `check` on
 * shards and on an imagefolder. */
#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/config.h"
#include "data/image.h"
#include "data/loader.h"
#include "data/manifest.h"
#include "data/shards.h"
#include "data/synth.h"
#include "data/tokenizer.h"
#include "mem.h"
#include "safetensors.h"
#include "test_util.h"

static const char *exe;
static char dir[1024], model[1200];
static char out_text[1 << 16], err_text[1 << 14];

/* Runs "exe ARGS" (ARGS is shell text) with stdout/stderr captured; returns the exit code
 * (-1 when it did not exit normally, e.g. a crash). */
static int run(const char *stdin_path, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int rc = tu_vrun_captured(exe, stdin_path ? stdin_path : "/dev/null", dir, out_text,
                              sizeof out_text, err_text, sizeof err_text, fmt, ap);
    va_end(ap);
    return rc;
}

static void test_usage(void) {
    tu_check(run(NULL, "") == 2 && strstr(err_text, "usage:"), "no command: exit 2 with usage");
    tu_check(run(NULL, "--help") == 0 && strstr(out_text, "bt-data check"), "--help: exit 0");
    tu_check(run(NULL, "frobnicate") == 2 && strstr(err_text, "unknown command 'frobnicate'"),
             "unknown command: exit 2");
    tu_check(run(NULL, "check") == 2 && strstr(err_text, "--data"), "check without --data: exit 2");
    tu_check(run(NULL, "synth --out x --train lots") == 2 &&
                 strstr(err_text, "--train: expected an integer in [0, 100000000], got 'lots'"),
             "non-numeric --train: exit 2");
    tu_check(run(NULL, "check --data") == 2 && strstr(err_text, "needs a value"),
             "option without value: exit 2");
    tu_check(run(NULL, "tokenize --model x --bogus") == 2 && strstr(err_text, "'--bogus'"),
             "unknown option: exit 2");
}

static void test_synth(void) {
    int a = run(NULL, "synth --out '%s/d1' --train 7 --val 3 --test 2 --seed 9 --size 48", dir);
    int b = run(NULL, "synth --out '%s/d2' --train 7 --val 3 --test 2 --seed 9 --size 48", dir);
    int c = run(NULL, "synth --out '%s/d3' --train 7 --val 3 --test 2 --seed 10 --size 48", dir);
    tu_check(a == 0 && b == 0 && c == 0, "synth: exit 0 three times (%d %d %d)", a, b, c);
    const char *files[] = {"train.jsonl",
                           "val.jsonl",
                           "test.jsonl",
                           "images/train/000006.jpg",
                           "images/val/000002.jpg",
                           "images/test/000001.jpg"};
    int same = 1, differ = 0;
    for (int i = 0; i < 6; i++) {
        char p1[1300], p2[1300], p3[1300];
        snprintf(p1, sizeof p1, "%s/d1/%s", dir, files[i]);
        snprintf(p2, sizeof p2, "%s/d2/%s", dir, files[i]);
        snprintf(p3, sizeof p3, "%s/d3/%s", dir, files[i]);
        same &= tu_files_equal(p1, p2);
        differ += !tu_files_equal(p1, p3);
    }
    tu_check(same, "synth: same seed, byte-identical manifests and JPEGs");
    tu_check(differ == 6, "synth: another seed changes every file (%d of 6)", differ);

    manifest m;
    char p[1300];
    snprintf(p, sizeof p, "%s/d1/val.jsonl", dir);
    int ok = manifest_load(&m, p, NULL) == BT_OK && m.n == 3;
    for (size_t i = 0; ok && i < m.n; i++) {
        synth_scene sc;
        char cap[SYNTH_CAPTION_MAX];
        synth_scene_sample(&sc, 9, SYNTH_SPLIT_VAL, (int64_t)i);
        synth_scene_caption(&sc, cap, sizeof cap);
        ok = !strcmp(manifest_caption(&m, i), cap) && manifest_has_choices(&m, i);
    }
    manifest_free(&m);
    tu_check(ok, "synth: val.jsonl holds the generator's captions and the choices");

    /* --captions prints the training captions of the seed, one per line. */
    char want[4 * SYNTH_CAPTION_MAX] = "";
    for (int i = 0; i < 4; i++) {
        synth_scene sc;
        char cap[SYNTH_CAPTION_MAX];
        synth_scene_sample(&sc, 21, SYNTH_SPLIT_TRAIN, i);
        synth_scene_caption(&sc, cap, sizeof cap);
        strcat(want, cap);
        strcat(want, "\n");
    }
    tu_check(run(NULL, "synth --captions 4 --seed 21") == 0 && !strcmp(out_text, want),
             "synth --captions 4: the generator's first 4 training captions");
    tu_check(run(NULL, "synth --out '%s/d1/train.jsonl/x'", dir) == 1 &&
                 strstr(err_text, "train.jsonl/x"),
             "synth into an impossible directory: exit 1 naming it: %s", err_text);
}

static void test_check(void) {
    int rc = run(NULL, "check --data '%s/d1/val.jsonl' --model '%s' --max-length 40", dir, model);
    tu_check(rc == 0 && strstr(out_text, "check: 3 records, 0 problems") &&
                 strstr(out_text, "matching-task records (caption_choices): 3") &&
                 strstr(out_text, "image width (px): min 48, median 48, p95 48, max 48") &&
                 strstr(out_text, "caption length (tokens, with <s> </s>)"),
             "check on a good split: exit 0 with counts and distributions");

    /* A manifest with a malformed line, a missing image and a repeated record. */
    char p[1300];
    snprintf(p, sizeof p, "%s/d1/bad.jsonl", dir);
    FILE *f = fopen(p, "wb");
    BT_ASSERT(f);
    fprintf(f, "{\"image\": \"images/train/000000.jpg\", \"caption\": \"a red circle\"}\n"
               "{\"image\": \"images/train/000001.jpg\", \"caption\": }\n"
               "{\"image\": \"images/missing.jpg\", \"caption\": \"gone\"}\n"
               "{\"image\": \"images/train/000000.jpg\", \"caption\": \"a red circle\"}\n");
    fclose(f);
    rc = run(NULL, "check --data '%s'", p);
    char want2[1400], want3[2600];
    snprintf(want2, sizeof want2, "%s:2: malformed JSON", p);
    snprintf(want3, sizeof want3, "%s:3: %s/d1/images/missing.jpg", p, dir);
    tu_check(rc == 1, "check with problems: exit 1 (got %d)", rc);
    tu_check(strstr(out_text, want2) && strstr(out_text, want3),
             "check names the malformed line 2 and the missing image of line 3");
    tu_check(strstr(out_text, "distinct images: 2 of 3 records") &&
                 strstr(out_text, "distinct captions: 2 of 3 records") &&
                 strstr(out_text, ":4 repeats the image of line 1") &&
                 strstr(out_text, "check: 3 records, 2 problems"),
             "check reports duplicates (line 4 repeats line 1) and counts 2 problems");
    if (rc != 1) printf("# stdout:\n%s# stderr:\n%s", out_text, err_text);

    rc = run(NULL, "check --data '%s/nothing.jsonl'", dir);
    tu_check(rc == 1 && strstr(err_text, "nothing.jsonl: cannot open manifest"),
             "check on a missing manifest: exit 1 naming it");
}

/* The JSON array the library gives for ids. */
static void ids_json(char *buf, size_t cap, const int32_t *ids, size_t n) {
    size_t k = (size_t)snprintf(buf, cap, "[");
    for (size_t i = 0; i < n; i++)
        k += (size_t)snprintf(buf + k, cap - k, i ? ", %d" : "%d", ids[i]);
    snprintf(buf + k, cap - k, "]\n");
}

static void test_tokenize(void) {
    tokenizer tok;
    if (!tu_check(tokenizer_load(&tok, model) == BT_OK, "tokenizer %s loads", model)) return;
    const char *lines[] = {
        ("a large red circle on the left and a small blue square at the top right on a grey "
         "background"),
        "words the synthetic vocabulary never saw: Zebra, 42 \xC3\xA9t\xC3\xA9!", ""};
    char in[1100];
    snprintf(in, sizeof in, "%s/lines.txt", dir);
    FILE *f = fopen(in, "wb");
    BT_ASSERT(f);
    for (int i = 0; i < 3; i++)
        fprintf(f, "%s\n", lines[i]);
    fclose(f);

    char want[8192] = "", one[2048];
    int32_t ids[256], mask[256];
    size_t n;
    for (int i = 0; i < 3; i++) {
        BT_ASSERT(tokenizer_encode_single(&tok, lines[i], strlen(lines[i]), 256, 0, 0, ids, mask,
                                          &n) == BT_OK);
        ids_json(one, sizeof one, ids, n);
        strcat(want, one);
    }
    int rc = run(in, "tokenize --model '%s'", model);
    tu_check(rc == 0 && !strcmp(out_text, want),
             "tokenize: one JSON array per line, equal to tokenizer_encode_single");
    if (strcmp(out_text, want)) printf("# got:\n%s# want:\n%s", out_text, want);

    /* --max-length 8 --pad --mask: truncated and padded like the loader does. */
    want[0] = '\0';
    for (int i = 0; i < 3; i++) {
        BT_ASSERT(tokenizer_encode_single(&tok, lines[i], strlen(lines[i]), 8, 1, 1, ids, mask,
                                          &n) == BT_OK);
        char a[512], b[512];
        ids_json(a, sizeof a, ids, n);
        ids_json(b, sizeof b, mask, n);
        a[strlen(a) - 1] = b[strlen(b) - 1] = '\0';
        snprintf(one, sizeof one, "{\"input_ids\": %s, \"attention_mask\": %s}\n", a, b);
        strcat(want, one);
    }
    rc = run(in, "tokenize --model '%s' --max-length 8 --pad --mask", model);
    tu_check(rc == 0 && !strcmp(out_text, want),
             "tokenize --max-length 8 --pad --mask: truncated, padded, with the mask");

    /* --pair: tab-separated; a line without a tab is an error naming stdin:line. */
    snprintf(in, sizeof in, "%s/pairs.txt", dir);
    f = fopen(in, "wb");
    BT_ASSERT(f);
    fprintf(f, "a red star\ton a pink background\nno tab here\n");
    fclose(f);
    BT_ASSERT(tokenizer_encode_pair(&tok, "a red star", 10, "on a pink background", 20, 256, 0, 0,
                                    ids, mask, &n) == BT_OK);
    ids_json(want, sizeof want, ids, n);
    strcat(want, "null\n");
    rc = run(in, "tokenize --model '%s' --pair", model);
    tu_check(rc == 1 && !strcmp(out_text, want) && strstr(err_text, "stdin:2:"),
             "tokenize --pair: the pair encoding, then null and exit 1 for a line without tab");
    tokenizer_free(&tok);

    rc = run(in, "tokenize --model '%s/nowhere'", dir);
    tu_check(rc == 1 && strstr(err_text, "nowhere"), "tokenize with a missing model: exit 1");
}

static void test_preprocess(void) {
    char img_path[1300], out[1300], cfg_path[1300];
    snprintf(img_path, sizeof img_path, "%s/d1/images/train/000003.jpg", dir);
    snprintf(cfg_path, sizeof cfg_path, "%s/preprocessor_config.json", model);
    image_preprocess_config cfg;
    BT_ASSERT(image_preprocess_config_from_json(&cfg, cfg_path) == BT_OK);
    image_u8 im;
    BT_ASSERT(image_load_file(&im, img_path, &cfg) == BT_OK);
    size_t R = (size_t)cfg.crop_size, numel = 3 * R * R;
    float *want = malloc(numel * 4), *got = malloc(numel * 4);
    bt_bf16 *want16 = malloc(numel * 2);
    image_preprocess(want, &im, &cfg);
    image_preprocess_bf16(want16, &im, &cfg);
    image_u8_free(&im);

    for (int bf16 = 0; bf16 < 2; bf16++) {
        snprintf(out, sizeof out, "%s/pixels_%d.safetensors", dir, bf16);
        int rc = run(NULL, "preprocess --model '%s' --image '%s' --output '%s' --dtype %s", model,
                     img_path, out, bf16 ? "bf16" : "f32");
        safetensors_file sf;
        int ok = rc == 0 && safetensors_open(&sf, out) == BT_OK;
        if (!ok) {
            tu_check(0, "preprocess %s: exit %d: %s", bf16 ? "bf16" : "f32", rc, err_text);
            continue;
        }
        const safetensors_tensor *t = safetensors_find(&sf, "pixel_values");
        ok = t && t->ndim == 4 && t->shape[0] == 1 && t->shape[1] == 3 &&
             t->shape[2] == (int64_t)R && t->shape[3] == (int64_t)R &&
             t->dtype == (bf16 ? BT_DTYPE_BF16 : BT_DTYPE_F32);
        if (ok && bf16) ok = memcmp(t->data, want16, numel * 2) == 0;
        if (ok && !bf16) ok = memcmp(t->data, want, numel * 4) == 0;
        tu_check(ok,
                 "preprocess --dtype %s: pixel_values (1, 3, %zu, %zu) equal to "
                 "image_preprocess%s (bitwise)",
                 bf16 ? "bf16" : "f32", R, R, bf16 ? "_bf16" : "");
        safetensors_close(&sf);
    }
    int rc =
        run(NULL, "preprocess --model '%s' --image '%s/none.jpg' --output '%s'", model, dir, out);
    tu_check(rc == 1 && strstr(err_text, "none.jpg"),
             "preprocess of a missing image: exit 1 naming it");
    rc = run(NULL, "preprocess --model '%s' --image '%s' --output '%s' --dtype f16", model,
             img_path, out);
    tu_check(rc == 2, "preprocess --dtype f16: exit 2");
    free(want);
    free(got);
    free(want16);
}

/* Runs `bt-data batch` for batch K of d1/train.jsonl and compares the file with the K-th
 * batch loader_next delivers (0-based) under the same options. */
static void check_batch(const char *model_dir, int B, int64_t K, uint64_t seed, int T,
                        const char *extra) {
    char out[1300], mpath[1300], pp[1400];
    snprintf(out, sizeof out, "%s/batch_%d_%lld.safetensors", dir, B, (long long)K);
    snprintf(mpath, sizeof mpath, "%s/d1/train.jsonl", dir);
    int rc = run(NULL, "batch --data '%s' --model '%s' --batch-size %d --index %lld --seed %llu %s "
                       "--output '%s'",
                 mpath, model_dir, B, (long long)K, (unsigned long long)seed, extra, out);
    if (!tu_check(rc == 0, "batch --batch-size %d --index %lld: exit 0 (%d) %s", B, (long long)K,
                  rc, err_text))
        return;

    /* Reference: the loader, in-process, from the start of the stream. */
    manifest m;
    tokenizer tok;
    image_preprocess_config img;
    snprintf(pp, sizeof pp, "%s/preprocessor_config.json", model_dir);
    BT_ASSERT(manifest_load(&m, mpath, NULL) == BT_OK);
    BT_ASSERT(tokenizer_load(&tok, model_dir) == BT_OK);
    BT_ASSERT(image_preprocess_config_from_json(&img, pp) == BT_OK);
    loader_options lo = loader_options_default();
    lo.batch_size = B;
    lo.seed = seed;
    lo.max_length = T;
    loader *l;
    BT_ASSERT(loader_init(&l, &m, &tok, &img, &lo) == BT_OK);
    loader_batch *b = NULL;
    for (int64_t k = 0; k <= K; k++) {
        if (b) loader_release(l, b);
        BT_ASSERT(loader_next(l, &b) == BT_OK && b);
    }

    safetensors_file f;
    int ok = safetensors_open(&f, out) == BT_OK;
    const safetensors_tensor *ids = ok ? safetensors_find(&f, "input_ids") : NULL;
    const safetensors_tensor *mask = ok ? safetensors_find(&f, "attention_mask") : NULL;
    const safetensors_tensor *px = ok ? safetensors_find(&f, "pixel_values") : NULL;
    const safetensors_tensor *lab = ok ? safetensors_find(&f, "labels") : NULL;
    const int64_t n = b->size, R = img.crop_size;
    ok = ok && ids && mask && px && lab && f.n_tensors == 4;
    ok = ok && ids->dtype == BT_DTYPE_I64 && ids->ndim == 2 && ids->shape[0] == n &&
         ids->shape[1] == T && mask->dtype == BT_DTYPE_I64 && mask->ndim == 2 &&
         mask->shape[0] == n && mask->shape[1] == T && px->dtype == BT_DTYPE_F32 &&
         px->ndim == 4 && px->shape[0] == n && px->shape[1] == 3 && px->shape[2] == R &&
         px->shape[3] == R && lab->dtype == BT_DTYPE_I64 && lab->ndim == 1 && lab->shape[0] == n;
    tu_check(ok, "batch %lld: input_ids, attention_mask (%lld, %d) I64, pixel_values (%lld, 3, "
                 "%lld, %lld) F32, labels (%lld) I64; B = the batch's %d valid rows",
             (long long)K, (long long)n, T, (long long)n, (long long)R, (long long)R,
             (long long)n, b->size);
    if (ok) {
        int same_ids = 1, ones = 1;
        for (int64_t i = 0; i < n * T; i++) {
            int64_t v, w;
            memcpy(&v, ids->data + 8 * i, 8);
            memcpy(&w, mask->data + 8 * i, 8);
            same_ids &= v == b->input_ids[i] && w == b->attention_mask[i];
        }
        for (int64_t i = 0; i < n; i++) {
            int64_t v;
            memcpy(&v, lab->data + 8 * i, 8);
            ones &= v == 1;
        }
        tu_check(same_ids, "batch %lld: input_ids and attention_mask equal loader_next's",
                 (long long)K);
        tu_check(memcmp(px->data, b->pixel_values, (size_t)(n * 3 * R * R) * 4) == 0,
                 "batch %lld: pixel_values bitwise equal loader_next's", (long long)K);
        tu_check(ones, "batch %lld: labels all 1 (matching pairs)", (long long)K);

        cJSON *meta = f.metadata_json ? cJSON_Parse(f.metadata_json) : NULL;
        const cJSON *j_ids = cJSON_GetObjectItemCaseSensitive(meta, "ids");
        const cJSON *j_rec = cJSON_GetObjectItemCaseSensitive(meta, "records");
        const cJSON *j_epoch = cJSON_GetObjectItemCaseSensitive(meta, "epoch");
        const cJSON *j_index = cJSON_GetObjectItemCaseSensitive(meta, "index");
        cJSON *ids_arr = cJSON_IsString(j_ids) ? cJSON_Parse(j_ids->valuestring) : NULL;
        cJSON *rec_arr = cJSON_IsString(j_rec) ? cJSON_Parse(j_rec->valuestring) : NULL;
        int meta_ok = ids_arr && rec_arr && cJSON_GetArraySize(ids_arr) == n &&
                      cJSON_GetArraySize(rec_arr) == n && cJSON_IsString(j_epoch) &&
                      atoll(j_epoch->valuestring) == b->epoch && cJSON_IsString(j_index) &&
                      atoll(j_index->valuestring) == b->index;
        for (int64_t i = 0; meta_ok && i < n; i++) {
            const cJSON *a = cJSON_GetArrayItem(ids_arr, (int)i);
            const cJSON *r = cJSON_GetArrayItem(rec_arr, (int)i);
            meta_ok = cJSON_IsString(a) && b->ids[i] && !strcmp(a->valuestring, b->ids[i]) &&
                      cJSON_IsNumber(r) && (int64_t)r->valuedouble == b->record[i];
        }
        tu_check(meta_ok, "batch %lld (epoch %lld, batch %lld): metadata ids, records, epoch and "
                          "index equal the loader's",
                 (long long)K, (long long)b->epoch, (long long)b->index);
        cJSON_Delete(ids_arr);
        cJSON_Delete(rec_arr);
        cJSON_Delete(meta);
    }
    safetensors_close(&f);
    loader_release(l, b);
    loader_free(l);
    manifest_free(&m);
    tokenizer_free(&tok);
}

static void test_batch(void) {
    /* d1/train.jsonl has 7 records: batches of 3, 3 and 1 per epoch. */
    check_batch(model, 3, 0, 5, 24, "--max-length 24");
    check_batch(model, 3, 2, 5, 24, "--max-length 24"); /* the partial last batch */
    check_batch(model, 3, 4, 5, 24, "--max-length 24"); /* epoch 1, batch 1 */

    /* The demo model: T from its max_text_len, images from its processor. */
    char demo[1300], cfg_path[1400];
    const char *configs = getenv("BT_CONFIGS");
    snprintf(demo, sizeof demo, "%s/synthetic-model", configs ? configs : "configs");
    snprintf(cfg_path, sizeof cfg_path, "%s/config.json", demo);
    bt_model_config c;
    tokenizer tok;
    image_preprocess_config img;
    char pp[1400];
    snprintf(pp, sizeof pp, "%s/preprocessor_config.json", demo);
    int ok = bt_model_config_load(&c, cfg_path) == BT_OK && tokenizer_load(&tok, demo) == BT_OK &&
             image_preprocess_config_from_json(&img, pp) == BT_OK;
    if (tu_check(ok, "configs/synthetic-model: config, tokenizer and processor load")) {
        tu_check(c.vocab_size == tok.vocab_size && c.pad_token_id == tok.pad_id &&
                     c.image_size == img.crop_size &&
                     c.max_position_embeddings - c.pad_token_id - 1 >= 32,
                 "configs/synthetic-model: vocab_size %d = tokenizer's %d, pad %d = %d, "
                 "image_size %d = crop %d, positions for T = 32",
                 c.vocab_size, tok.vocab_size, c.pad_token_id, tok.pad_id, c.image_size,
                 img.crop_size);
        tokenizer_free(&tok);
    }
    check_batch(demo, 4, 1, 0, 32, "");

    char mpath[1300], out[1300];
    snprintf(mpath, sizeof mpath, "%s/d1/train.jsonl", dir);
    snprintf(out, sizeof out, "%s/bad_batch.safetensors", dir);
    tu_check(run(NULL, "batch --data '%s' --model '%s' --output '%s'", mpath, model, out) == 2 &&
                 strstr(err_text, "--batch-size"),
             "batch without --batch-size: exit 2");
    tu_check(run(NULL, "batch --data '%s' --model '%s' --batch-size 2 --output '%s'", mpath, model,
                 out) == 2 &&
                 strstr(err_text, "--max-length"),
             "batch for a model directory without config.json and no --max-length: exit 2");
    tu_check(run(NULL, "batch --data '%s' --model '%s' --batch-size 2 --max-length 50 --output '%s'",
                 mpath, demo, out) == 1 &&
                 strstr(err_text, "at most 38 tokens"),
             "batch with --max-length beyond the model's position table: exit 1: %s", err_text);
    /* A model whose config wants 32 px images next to a 64 px processor. */
    char mixed[1300];
    snprintf(mixed, sizeof mixed, "%s/mixed", dir);
    char cmd[16384];
    snprintf(cmd, sizeof cmd,
             "mkdir -p '%s' && cp '%s'/vocab.json '%s'/merges.txt '%s'/preprocessor_config.json "
             "'%s' && cp '%s/../tiny/config.json' '%s'",
             mixed, demo, demo, demo, mixed, demo, mixed);
    BT_ASSERT(system(cmd) == 0);
    tu_check(run(NULL, "batch --data '%s' --model '%s' --batch-size 2 --output '%s'", mpath, mixed,
                 out) == 1 &&
                 strstr(err_text, "vision_config.image_size 32"),
             "batch with a processor (64 px) that disagrees with config.json (32 px): exit 1: %s",
             err_text);
}

/* shards: the command writes what the library reads back (manifest_load of the printed
 * pattern: the source's captions, ids in the json members, image bytes unchanged); check reads
 * shards and an imagefolder directory; usage and bad sources exit 2 / 1. */
static void test_shards(void) {
    int rc = run(NULL, "synth --out '%s/s' --train 10 --val 0 --test 0 --seed 3 --size 48", dir);
    rc = rc ? rc : run(NULL, "shards --data '%s/s/train.jsonl' --out '%s/s/sh' --per-shard 4",
                       dir, dir);
    char want[1400];
    snprintf(want, sizeof want, "10 samples in 3 shards: %s/s/sh/{00000..00002}.tar", dir);
    tu_check(rc == 0 && strstr(out_text, want), "shards: exit 0, prints the pattern: %s",
             out_text);
    char src[1300], pat[1300];
    snprintf(src, sizeof src, "%s/s/train.jsonl", dir);
    snprintf(pat, sizeof pat, "%s/s/sh/{00000..00002}.tar", dir);
    manifest a, b;
    int ok = manifest_load(&a, src, NULL) == BT_OK && manifest_load(&b, pat, NULL) == BT_OK &&
             a.n == 10 && b.n == 10;
    for (size_t i = 0; ok && i < a.n; i++) {
        uint8_t *x = NULL, *y = NULL;
        size_t nx = 0, ny = 0;
        ok = !strcmp(manifest_caption(&a, i), manifest_caption(&b, i)) &&
             image_read_file(&x, &nx, manifest_image(&a, i)) == BT_OK &&
             shards_read_record_image(&b, i, &y, &ny) == BT_OK && nx == ny && !memcmp(x, y, nx);
        bt_free(x);
        bt_free(y);
    }
    tu_check(ok, "shards: the shards read back as the source's records, image bytes unchanged");
    manifest_free(&a);
    manifest_free(&b);
    rc = run(NULL, "check --data '%s'", pat);
    tu_check(rc == 0 && strstr(out_text, "images: 10 decoded, 0 failed"),
             "check reads the shards: exit %d", rc);
    snprintf(src, sizeof src, "%s/s/metadata.csv", dir);
    tu_setup_text(src, "file_name,text\nimages/train/000000.jpg,\"a caption, quoted\"\n"
                       "images/train/000001.jpg,another\n");
    rc = run(NULL, "check --data '%s/s' --caption-key text", dir);
    tu_check(rc == 0 && strstr(out_text, "images: 2 decoded, 0 failed"),
             "check reads an imagefolder (metadata.csv): exit %d: %s", rc, out_text);
    tu_check(run(NULL, "shards --data x") == 2 && strstr(err_text, "--out"),
             "shards without --out: exit 2");
    rc = run(NULL, "shards --data '%s/s/{0..1}.tar' --out '%s/s/o'", dir, dir);
    tu_check(rc == 1 && strstr(err_text, "s/0.tar"), "shards from missing shards: exit 1: %s",
             err_text);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_bt_data PATH/TO/bt-data\n");
        return 2;
    }
    exe = argv[1];
    snprintf(dir, sizeof dir, "%s", tu_tmpdir());
    const char *configs = getenv("BT_CONFIGS");
    snprintf(model, sizeof model, "%s/synthetic", configs ? configs : "configs");
    test_usage();
    test_synth();
    test_check();
    test_tokenize();
    test_preprocess();
    test_batch();
    test_shards();
    return tu_finish();
}
