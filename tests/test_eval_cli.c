/* test_eval_cli.c: bt-eval and bt-embed end to end on the synthetic data, against answers
 * computed here by independent paths. argv: bt-eval, bt-embed, bt-data, bt-checkpoint,
 * bt-forward (paths passed by meson).
 *
 * Setup: `bt-data synth` (val split: captions with 5 choices), a model initialized from
 * configs/synthetic-model (`bt-checkpoint --init`, heads ITC + ITM + MLM), and an eval
 * manifest written here: the 24 val records with choices re-drawn from the OTHER records'
 * captions (so every choice caption is also some record's caption), plus 6 records that
 * reuse images 0, 3, ..., 15 with other captions (shared images: 30 texts, 24 images).
 *
 *   1. bt-embed: shapes (30, 64), record_index 0..29, image_index deduplicates by path, unit
 *      norms; and the embeddings equal bt-forward's (--head itc) on a `bt-data batch` of the
 *      same records in a shuffled order (an independent path: another batch size and row
 *      order, the loader's batch writer, the bt-forward CLI). Tolerance 2e-5 absolute:
 *      normalized embeddings (entries ~0.1) through ~10 fp32 layers whose GEMMs may pick
 *      other kernels for another row count; observed differences are ~1e-7.
 *   2. bt-eval --json: eval loss = the HF ITC loss recomputed here in double from bt-embed's
 *      embeddings, batch by batch (batches of 7, the last partial) with logit_scale read
 *      from model.safetensors, weighted by rows (rtol 1e-5: float vs double softmax);
 *      recall@1/5/10, mean and median rank both ways = those of ranks computed here from
 *      S = T·Iᵀ (double dot products rounded to float, then 1 + #wrong >= best right) —
 *      exact; 5-way accuracy = the argmax predicted from bt-embed's text embeddings of the
 *      records whose captions are the choices (exact).
 *   3. ITM re-ranking: on 6 records, the ITM logits of all 36 (caption, image) pairs come
 *      from bt-forward --head itm on a `bt-data batch` of a 36-record pair manifest; the
 *      top-3 by ITC re-ranked by them, here, must give bt-eval --itm-rerank 3's numbers, and
 *      their argmax over each record's 5 choices (drawn from the 6 captions) its
 *      --choice-score itm accuracy.
 *   4. A collapsed model (ITC text/image heads: weight 0, bias 1, so every score ties):
 *      the pessimistic rule gives text->image rank 24 for every text and image->text rank
 *      1 + 30 - c (c = texts of the image), R@K 0, 5-way accuracy 0: known by construction.
 *   5. Errors: --itm-rerank on a model without the ITM head (exit 1, naming
 *      model.safetensors), a record whose image is missing (exit 1, naming manifest:line),
 *      usage errors (exit 2). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "safetensors.h"
#include "test_util.h"

enum { NV = 24, NX = 6, N = NV + NX, C = 64, BATCH = 7, NSMALL = 6, TOPK = 3 };

static const char *exe_eval, *exe_embed, *exe_data, *exe_ckpt, *exe_fwd;
static const char *tmp;
static char out_text[1 << 16], err_text[1 << 16];

static int run(const char *exe, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int rc = tu_vrun_captured(exe, "/dev/null", tmp, out_text, sizeof out_text, err_text,
                              sizeof err_text, fmt, ap);
    va_end(ap);
    return rc;
}

static void must(int rc, const char *what) {
    if (rc != 0) {
        fprintf(stderr, "setup failed: %s (exit %d)\nstdout: %s\nstderr: %s\n", what, rc,
                out_text, err_text);
        exit(1);
    }
}

/* A tensor of an open file as float / int32 (exits when absent: the shapes are checked
 * before). */
static void read_f32(const safetensors_file *f, const char *name, float *dst, size_t n) {
    const safetensors_tensor *t = safetensors_find(f, name);
    if (!t || safetensors_read_f32(f, t, dst, n) != BT_OK) {
        fprintf(stderr, "%s: cannot read %s as %zu floats: %s\n", f->path, name, n,
                bt_error_message());
        exit(1);
    }
}

static void read_i32(const safetensors_file *f, const char *name, int32_t *dst, size_t n) {
    const safetensors_tensor *t = safetensors_find(f, name);
    if (!t || safetensors_read_i32(f, t, dst, n) != BT_OK) {
        fprintf(stderr, "%s: cannot read %s as %zu ints: %s\n", f->path, name, n,
                bt_error_message());
        exit(1);
    }
}

/* The JSON list stored as a string under metadata key `key`, as a parsed array. */
static cJSON *metadata_list(const safetensors_file *f, const char *key) {
    cJSON *meta = f->metadata_json ? cJSON_Parse(f->metadata_json) : NULL;
    const cJSON *s = meta ? cJSON_GetObjectItemCaseSensitive(meta, key) : NULL;
    cJSON *list = cJSON_IsString(s) ? cJSON_Parse(s->valuestring) : NULL;
    cJSON_Delete(meta);
    if (!cJSON_IsArray(list)) {
        fprintf(stderr, "%s: metadata '%s' is not a JSON list\n", f->path, key);
        exit(1);
    }
    return list;
}

/* --- manifests ------------------------------------------------------------------------------ */

typedef struct val_record {
    char image[256];
    char caption[512];
} val_record;

static val_record val[NV];

static void load_val(const char *path) {
    char *text = (char *)tu_read_file(path, NULL);
    if (!text) exit(1);
    size_t i = 0;
    for (char *line = strtok(text, "\n"); line && i < NV; line = strtok(NULL, "\n")) {
        cJSON *j = cJSON_Parse(line);
        const cJSON *im = cJSON_GetObjectItemCaseSensitive(j, "image");
        const cJSON *ca = cJSON_GetObjectItemCaseSensitive(j, "caption");
        if (!cJSON_IsString(im) || !cJSON_IsString(ca)) exit(1);
        snprintf(val[i].image, sizeof val[i].image, "%s", im->valuestring);
        snprintf(val[i].caption, sizeof val[i].caption, "%s", ca->valuestring);
        i++;
        cJSON_Delete(j);
    }
    free(text);
    if (i != NV) {
        fprintf(stderr, "%s: %zu records, expected %d\n", path, i, NV);
        exit(1);
    }
}

/* Text record t of the eval manifest: caption and image record numbers. */
static int text_caption(int t) {
    return t < NV ? t : (3 * (t - NV) + 1) % NV;
}
static int text_image(int t) {
    return t < NV ? t : 3 * (t - NV);
}

/* choice k of record t (a record number whose caption is the choice) and the label */
static int choice_rec(int t, int k) {
    const int label = t % 5;
    if (k == label) return text_caption(t);
    const int off = 1 + (k < label ? k : k - 1) * 5; /* 1, 6, 11, 16: other records */
    return (text_caption(t) + off) % NV;
}

/* choice k of record t < NSMALL of the small manifest: captions of the small set only, so
 * the pair manifest's ITM logits cover every (choice, image) pair */
static int small_choice(int t, int k) {
    const int label = t % 5;
    return k == label ? t : (t + 1 + (k < label ? k : k - 1)) % NSMALL;
}

static void add_record(cJSON *arr_line, const char *id, int img, int cap) {
    cJSON_AddStringToObject(arr_line, "id", id);
    cJSON_AddStringToObject(arr_line, "image", val[img].image);
    cJSON_AddStringToObject(arr_line, "caption", val[cap].caption);
}

static void write_eval_manifest(const char *path, int n_texts, int with_choices) {
    FILE *f = fopen(path, "w");
    if (!f) exit(1);
    for (int t = 0; t < n_texts; t++) {
        cJSON *o = cJSON_CreateObject();
        char id[32];
        snprintf(id, sizeof id, "r%02d", t);
        add_record(o, id, text_image(t), text_caption(t));
        if (with_choices) {
            cJSON *ch = cJSON_AddArrayToObject(o, "caption_choices");
            for (int k = 0; k < 5; k++)
                cJSON_AddItemToArray(ch, cJSON_CreateString(
                                             val[n_texts == NSMALL ? small_choice(t, k)
                                                                   : choice_rec(t, k)]
                                                 .caption));
            cJSON_AddNumberToObject(o, "label", t % 5);
        }
        char *s = cJSON_PrintUnformatted(o);
        fprintf(f, "%s\n", s);
        free(s);
        cJSON_Delete(o);
    }
    fclose(f);
}

/* All NSMALL x NSMALL (caption t, image j) pairs: record t*NSMALL + j. */
static void write_pair_manifest(const char *path) {
    FILE *f = fopen(path, "w");
    if (!f) exit(1);
    for (int t = 0; t < NSMALL; t++)
        for (int j = 0; j < NSMALL; j++) {
            cJSON *o = cJSON_CreateObject();
            char id[32];
            snprintf(id, sizeof id, "p%d_%d", t, j);
            add_record(o, id, j, t);
            char *s = cJSON_PrintUnformatted(o);
            fprintf(f, "%s\n", s);
            free(s);
            cJSON_Delete(o);
        }
    fclose(f);
}

/* --- reference metrics (written here from the definitions in docs/evaluation.md) ---------- */

static double dotd(const float *a, const float *b) {
    double s = 0.0;
    for (int k = 0; k < C; k++)
        s += (double)a[k] * (double)b[k];
    return s;
}

typedef struct ref_metrics {
    double r1, r5, r10, mean, median;
} ref_metrics;

static int cmp_i(const void *a, const void *b) {
    return *(const int *)a - *(const int *)b;
}

static ref_metrics summarize(const int *rank, int n) {
    ref_metrics m = {0};
    int *s = malloc((size_t)n * sizeof *s);
    for (int i = 0; i < n; i++) {
        m.r1 += rank[i] <= 1;
        m.r5 += rank[i] <= 5;
        m.r10 += rank[i] <= 10;
        m.mean += rank[i];
        s[i] = rank[i];
    }
    m.r1 /= n;
    m.r5 /= n;
    m.r10 /= n;
    m.mean /= n;
    qsort(s, (size_t)n, sizeof *s, cmp_i);
    m.median = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
    free(s);
    return m;
}

/* rank of query q: 1 + #wrong candidates scoring >= the best right one. score(q, c) =
 * S[q*qs + c*cs]; right(c) = ckey[c] == qkey. */
static int rank_of(const float *S, int qs, int cs, int q, int nc, int qkey, const int *ckey) {
    float best = -INFINITY;
    for (int c = 0; c < nc; c++)
        if (ckey[c] == qkey && S[q * qs + c * cs] > best) best = S[q * qs + c * cs];
    int r = 1;
    for (int c = 0; c < nc; c++)
        r += ckey[c] != qkey && S[q * qs + c * cs] >= best;
    return r;
}

static void check_metrics(const char *name, const cJSON *obj, ref_metrics want) {
    const char *keys[5] = {"r1", "r5", "r10", "mean_rank", "median_rank"};
    const double w[5] = {want.r1, want.r5, want.r10, want.mean, want.median};
    int ok = cJSON_IsObject(obj);
    char got[256] = "";
    for (int i = 0; ok && i < 5; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, keys[i]);
        ok = cJSON_IsNumber(v) && fabs(v->valuedouble - w[i]) <= 1e-12 * fmax(1.0, fabs(w[i]));
        size_t l = strlen(got);
        snprintf(got + l, sizeof got - l, " %s %.4f/%.4f", keys[i], v ? v->valuedouble : NAN, w[i]);
    }
    tu_check(ok, "%s (got/want):%s", name, got);
}

static cJSON *read_json(const char *path) {
    char *text = (char *)tu_read_file(path, NULL);
    cJSON *j = text ? cJSON_Parse(text) : NULL;
    free(text);
    if (!j) {
        fprintf(stderr, "%s: cannot read JSON\n", path);
        exit(1);
    }
    return j;
}

static const cJSON *jpath(const cJSON *j, const char *a, const char *b) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, a);
    return b ? cJSON_GetObjectItemCaseSensitive(x, b) : x;
}

/* --- the embeddings file ------------------------------------------------------------------ */

typedef struct embeds {
    float t[N * C], i[N * C], c[N * C];
    int32_t rec[N], img[N];
} embeds;

static embeds E;

static void test_embed(const char *model, const char *manifest) {
    char out[1400];
    snprintf(out, sizeof out, "%s/emb.safetensors", tmp);
    int rc = run(exe_embed, "--model '%s' --data '%s' --output '%s' --batch-size %d", model,
                 manifest, out, BATCH);
    tu_check(rc == 0, "bt-embed exits 0 (%s)", err_text);
    if (rc) exit(1);
    safetensors_file f;
    if (safetensors_open(&f, out) != BT_OK) exit(1);
    const char *names[5] = {"text_embeds", "image_embeds", "cross_embeds", "record_index",
                            "image_index"};
    int shapes_ok = 1;
    for (int k = 0; k < 5; k++) {
        const safetensors_tensor *t = safetensors_find(&f, names[k]);
        shapes_ok &= t && t->shape[0] == N &&
                     (k < 3 ? t->ndim == 2 && t->shape[1] == C && t->dtype == BT_DTYPE_F32
                            : t->ndim == 1 && t->dtype == BT_DTYPE_I64);
    }
    tu_check(shapes_ok, "embeddings file: 3 x (%d, %d) F32 + 2 x (%d) I64", N, C, N);
    if (!shapes_ok) exit(1);
    read_f32(&f, "text_embeds", E.t, N * C);
    read_f32(&f, "image_embeds", E.i, N * C);
    read_f32(&f, "cross_embeds", E.c, N * C);
    read_i32(&f, "record_index", E.rec, N);
    read_i32(&f, "image_index", E.img, N);
    int rec_ok = 1, img_ok = 1;
    for (int t = 0; t < N; t++) {
        rec_ok &= E.rec[t] == t;
        img_ok &= E.img[t] == text_image(t);
    }
    tu_check(rec_ok, "record_index = 0..%d", N - 1);
    tu_check(img_ok, "image_index: records sharing an image path share its number (24 images)");
    tu_check(!memcmp(E.i + NV * C, E.i, C * sizeof(float)),
             "a shared image's embedding is the first record's, bitwise");
    double worst = 0.0;
    for (int t = 0; t < 3 * N; t++) {
        const float *x = t < N ? E.t + t * C : t < 2 * N ? E.i + (t - N) * C : E.c + (t - 2 * N) * C;
        worst = fmax(worst, fabs(sqrt(dotd(x, x)) - 1.0));
    }
    /* fp32 normalization of 64 entries: |norm - 1| ~ 1e-7; 1e-5 leaves room */
    tu_check(worst <= 1e-5, "every embedding has unit norm (worst |norm-1| %.2e)", worst);
    cJSON *ids = metadata_list(&f, "ids"), *paths = metadata_list(&f, "image_paths");
    const cJSON *id29 = cJSON_GetArrayItem(ids, N - 1);
    tu_check(cJSON_GetArraySize(ids) == N && cJSON_IsString(id29) &&
                 !strcmp(id29->valuestring, "r29") && cJSON_GetArraySize(paths) == NV,
             "metadata: %d record ids (last 'r29'), %d image paths", N, NV);
    cJSON_Delete(ids);
    cJSON_Delete(paths);
    safetensors_close(&f);
}

/* bt-data batch (shuffled, all N records in one batch) -> bt-forward --head H. Returns the
 * opened output and fills rec_of_row (N) from the batch's metadata. */
static void forward_batch(const char *model, const char *manifest, int n, const char *head,
                          safetensors_file *out, int *rec_of_row) {
    char batch[1400], fwd[1400];
    snprintf(batch, sizeof batch, "%s/batch_%s.safetensors", tmp, head);
    snprintf(fwd, sizeof fwd, "%s/fwd_%s.safetensors", tmp, head);
    must(run(exe_data, "batch --data '%s' --model '%s' --batch-size %d --seed 11 --output '%s'",
             manifest, model, n, batch),
         "bt-data batch");
    must(run(exe_fwd, "--model '%s' --inputs '%s' --output '%s' --head %s", model, batch, fwd,
             head),
         "bt-forward");
    safetensors_file b;
    if (safetensors_open(&b, batch) != BT_OK) exit(1);
    cJSON *recs = metadata_list(&b, "records");
    for (int r = 0; r < n; r++)
        rec_of_row[r] = (int)cJSON_GetArrayItem(recs, r)->valuedouble;
    cJSON_Delete(recs);
    safetensors_close(&b);
    if (safetensors_open(out, fwd) != BT_OK) exit(1);
}

static void test_vs_forward(const char *model, const char *manifest) {
    safetensors_file f;
    int row_rec[N];
    forward_batch(model, manifest, N, "itc", &f, row_rec);
    static float t[N * C], i[N * C], c[N * C], wt[N * C], wi[N * C], wc[N * C];
    read_f32(&f, "text_embeds", t, N * C);
    read_f32(&f, "image_embeds", i, N * C);
    read_f32(&f, "cross_embeds", c, N * C);
    safetensors_close(&f);
    int shuffled = 0;
    for (int r = 0; r < N; r++) {
        const int rec = row_rec[r];
        shuffled |= rec != r;
        memcpy(wt + r * C, E.t + rec * C, C * sizeof(float));
        memcpy(wi + r * C, E.i + rec * C, C * sizeof(float));
        memcpy(wc + r * C, E.c + rec * C, C * sizeof(float));
    }
    tu_check(shuffled, "bt-data batch delivered the records in another order");
    tu_check_close_f32("text_embeds vs bt-forward", wt, t, N * C, 2e-5, 0);
    tu_check_close_f32("image_embeds vs bt-forward", wi, i, N * C, 2e-5, 0);
    tu_check_close_f32("cross_embeds vs bt-forward", wc, c, N * C, 2e-5, 0);
}

/* logit_scale of the model (a 0-d tensor). */
static double read_logit_scale(const char *model) {
    char p[1400];
    snprintf(p, sizeof p, "%s/model.safetensors", model);
    safetensors_file f;
    if (safetensors_open(&f, p) != BT_OK) exit(1);
    float v;
    read_f32(&f, "logit_scale", &v, 1);
    safetensors_close(&f);
    return exp((double)v);
}

/* mean_i CE(scale * A_i · B_j over j, target i) for rows r0..r0+n */
static double ce_rows(const float *A, const float *Bm, int r0, int n, double scale) {
    double sum = 0.0;
    for (int a = 0; a < n; a++) {
        double mx = -INFINITY, z[64];
        for (int b = 0; b < n; b++) {
            z[b] = scale * dotd(A + (r0 + a) * C, Bm + (r0 + b) * C);
            mx = fmax(mx, z[b]);
        }
        double se = 0.0;
        for (int b = 0; b < n; b++)
            se += exp(z[b] - mx);
        sum += mx + log(se) - z[a];
    }
    return sum / n;
}

static void test_eval_metrics(const char *model, const char *manifest) {
    char json[1400];
    snprintf(json, sizeof json, "%s/metrics.json", tmp);
    int rc = run(exe_eval, "--model '%s' --data '%s' --batch-size %d --json '%s'", model,
                 manifest, BATCH, json);
    tu_check(rc == 0 && strstr(out_text, "5-way caption choice"),
             "bt-eval exits 0 and prints the 5-way accuracy (%s)", err_text);
    if (rc) exit(1);
    cJSON *j = read_json(json);
    tu_check(jpath(j, "records", NULL)->valuedouble == N &&
                 jpath(j, "images", NULL)->valuedouble == NV,
             "bt-eval: %d records, %d distinct images", N, NV);

    /* eval loss: HF ITC loss per batch of BATCH rows, weighted by rows */
    const double scale = read_logit_scale(model);
    double loss = 0.0;
    for (int r0 = 0; r0 < N; r0 += BATCH) {
        const int n = N - r0 < BATCH ? N - r0 : BATCH;
        const double l = (ce_rows(E.t, E.i, r0, n, scale) + ce_rows(E.t, E.c, r0, n, scale) +
                          ce_rows(E.i, E.c, r0, n, scale)) /
                         3.0;
        loss += l * n;
    }
    loss /= N;
    const double got = jpath(j, "eval_loss", NULL)->valuedouble;
    tu_check(fabs(got - loss) <= 1e-5 * loss, "eval loss %.7f = HF ITC loss from the embeddings "
             "%.7f (batches of %d)", got, loss, BATCH);

    /* retrieval */
    static float S[N * NV];
    int ikey[NV], tkey[N], rt[N], ri[NV];
    for (int t = 0; t < N; t++) {
        tkey[t] = text_image(t);
        for (int m = 0; m < NV; m++)
            S[t * NV + m] = (float)dotd(E.t + t * C, E.i + m * C);
    }
    for (int m = 0; m < NV; m++)
        ikey[m] = m;
    for (int t = 0; t < N; t++)
        rt[t] = rank_of(S, NV, 1, t, NV, tkey[t], ikey);
    for (int m = 0; m < NV; m++)
        ri[m] = rank_of(S, 1, NV, m, N, ikey[m], tkey);
    check_metrics("text->image metrics = ranks from the embeddings", jpath(j, "text_to_image", NULL),
                  summarize(rt, N));
    check_metrics("image->text metrics = ranks from the embeddings", jpath(j, "image_to_text", NULL),
                  summarize(ri, NV));

    /* 5-way: choice k of record t is record choice_rec(t, k)'s caption */
    int right = 0;
    for (int t = 0; t < N; t++) {
        double s[5];
        for (int k = 0; k < 5; k++)
            s[k] = dotd(E.t + choice_rec(t, k) * C, E.i + text_image(t) * C);
        int ok = 1;
        for (int k = 0; k < 5; k++)
            ok &= k == t % 5 || s[k] < s[t % 5];
        right += ok;
    }
    const cJSON *acc = jpath(j, "choice", "accuracy");
    tu_check(acc && fabs(acc->valuedouble - (double)right / N) < 1e-12 &&
                 jpath(j, "choice", "n")->valuedouble == N,
             "5-way accuracy %.4f = predicted from the caption embeddings %d/%d",
             acc ? acc->valuedouble : NAN, right, N);
    cJSON_Delete(j);
}

/* --- ITM re-ranking ------------------------------------------------------------------------- */

typedef struct cand {
    float s;
    int right, c, pos;
    float itm;
} cand;

static int cmp_itc(const void *pa, const void *pb) {
    const cand *a = pa, *b = pb;
    if (a->s != b->s) return a->s > b->s ? -1 : 1;
    if (a->right != b->right) return a->right - b->right;
    return a->c - b->c;
}

static int cmp_itm(const void *pa, const void *pb) {
    const cand *a = pa, *b = pb;
    if (a->itm != b->itm) return a->itm > b->itm ? -1 : 1;
    if (a->right != b->right) return a->right - b->right;
    return a->pos - b->pos;
}

/* Rank after re-ranking: sort all by ITC, the first TOPK by ITM, first right position. */
static int rerank_rank(cand *cs, int n) {
    qsort(cs, (size_t)n, sizeof *cs, cmp_itc);
    for (int i = 0; i < n; i++)
        cs[i].pos = i;
    qsort(cs, (size_t)(n < TOPK ? n : TOPK), sizeof *cs, cmp_itm);
    for (int i = 0; i < n; i++)
        if (cs[i].right) return i + 1;
    return -1;
}

static void test_rerank(const char *model, const char *small, const char *pairs) {
    safetensors_file f;
    int row_rec[NSMALL * NSMALL];
    forward_batch(model, pairs, NSMALL * NSMALL, "itm", &f, row_rec);
    float logits[NSMALL * NSMALL * 2], M[NSMALL * NSMALL];
    read_f32(&f, "logits", logits, NSMALL * NSMALL * 2);
    safetensors_close(&f);
    for (int r = 0; r < NSMALL * NSMALL; r++) /* record t*NSMALL + j: caption t, image j */
        M[row_rec[r]] = logits[2 * r + 1] - logits[2 * r];

    char json[1400];
    snprintf(json, sizeof json, "%s/rerank.json", tmp);
    int rc = run(exe_eval, "--model '%s' --data '%s' --batch-size 4 --itm-rerank %d "
                 "--choice-score itm --json '%s'", model, small, TOPK, json);
    tu_check(rc == 0, "bt-eval --itm-rerank %d --choice-score itm exits 0 (%s)", TOPK, err_text);
    if (rc) return;
    cJSON *j = read_json(json);
    int rt[NSMALL], ri[NSMALL];
    cand cs[NSMALL];
    for (int q = 0; q < NSMALL; q++) {
        for (int c = 0; c < NSMALL; c++) /* text q -> image c */
            cs[c] = (cand){.s = (float)dotd(E.t + q * C, E.i + c * C), .right = c == q, .c = c,
                           .itm = M[q * NSMALL + c]};
        rt[q] = rerank_rank(cs, NSMALL);
        for (int c = 0; c < NSMALL; c++) /* image q -> text c */
            cs[c] = (cand){.s = (float)dotd(E.t + c * C, E.i + q * C), .right = c == q, .c = c,
                           .itm = M[c * NSMALL + q]};
        ri[q] = rerank_rank(cs, NSMALL);
    }
    check_metrics("ITM re-ranked text->image = re-ranking of bt-forward's ITM logits",
                  jpath(j, "itm_rerank", "text_to_image"), summarize(rt, NSMALL));
    check_metrics("ITM re-ranked image->text = re-ranking of bt-forward's ITM logits",
                  jpath(j, "itm_rerank", "image_to_text"), summarize(ri, NSMALL));
    /* 5-way by ITM: choice k of record t is caption small_choice(t, k) against image t */
    int right = 0;
    for (int t = 0; t < NSMALL; t++) {
        int ok = 1;
        for (int k = 0; k < 5; k++)
            ok &= k == t % 5 || M[small_choice(t, k) * NSMALL + t] < M[t * NSMALL + t];
        right += ok;
    }
    const cJSON *acc = jpath(j, "choice", "accuracy"), *sc = jpath(j, "choice", "score");
    tu_check(acc && fabs(acc->valuedouble - (double)right / NSMALL) < 1e-12 &&
                 cJSON_IsString(sc) && !strcmp(sc->valuestring, "itm"),
             "5-way accuracy by ITM %.4f = argmax of bt-forward's ITM logits %d/%d",
             acc ? acc->valuedouble : NAN, right, NSMALL);
    const cJSON *k = jpath(j, "itm_rerank", "k");
    tu_check(k && k->valuedouble == TOPK, "itm_rerank.k = %d", TOPK);
    cJSON_Delete(j);
}

/* --- the collapsed model ------------------------------------------------------------------- */

static void make_collapsed(const char *model, const char *out_dir) {
    char cmd[8000], p[1500], q[1500];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && cp '%s'/*.json '%s'/*.txt '%s'/", out_dir, model,
             model, out_dir);
    if (system(cmd) != 0) exit(1);
    snprintf(p, sizeof p, "%s/model.safetensors", model);
    snprintf(q, sizeof q, "%s/model.safetensors", out_dir);
    safetensors_file f;
    if (safetensors_open(&f, p) != BT_OK) exit(1);
    safetensors_entry *e = calloc(f.n_tensors, sizeof *e);
    static float zeros[C * C], ones[C];
    for (int i = 0; i < C; i++)
        ones[i] = 1.0f;
    for (size_t i = 0; i < f.n_tensors; i++) {
        const safetensors_tensor *t = &f.tensors[i];
        e[i] = (safetensors_entry){.name = t->name, .dtype = t->dtype, .src_dtype = t->dtype,
                                   .ndim = t->ndim, .data = t->data};
        memcpy(e[i].shape, t->shape, sizeof t->shape);
        if (!strcmp(t->name, "itc_text_head.fc.weight") ||
            !strcmp(t->name, "itc_image_head.fc.weight"))
            e[i].data = zeros;
        if (!strcmp(t->name, "itc_text_head.fc.bias") || !strcmp(t->name, "itc_image_head.fc.bias"))
            e[i].data = ones;
    }
    if (safetensors_write(q, e, f.n_tensors, NULL) != BT_OK) exit(1);
    free(e);
    safetensors_close(&f);
}

static void test_collapsed(const char *model, const char *manifest) {
    char flat[1300], json[1400];
    snprintf(flat, sizeof flat, "%s/model_flat", tmp);
    snprintf(json, sizeof json, "%s/flat.json", tmp);
    make_collapsed(model, flat);
    int rc = run(exe_eval, "--model '%s' --data '%s' --batch-size 16 --json '%s'", flat, manifest,
                 json);
    tu_check(rc == 0, "bt-eval on the collapsed model exits 0 (%s)", err_text);
    if (rc) return;
    cJSON *j = read_json(json);
    /* t->i: every text ties with all 24 images: rank 24. i->t: image m has c texts (2 for
     * m = 0, 3, ..., 15; else 1): rank 1 + 30 - c. */
    const ref_metrics t2i = {0, 0, 0, NV, NV};
    const ref_metrics i2t = {0, 0, 0, (6 * 29.0 + 18 * 30.0) / NV, 30};
    check_metrics("collapsed model text->image: every rank 24 (pessimistic ties)",
                  jpath(j, "text_to_image", NULL), t2i);
    check_metrics("collapsed model image->text: rank 1 + 30 - #texts of the image",
                  jpath(j, "image_to_text", NULL), i2t);
    const cJSON *acc = jpath(j, "choice", "accuracy");
    tu_check(acc && acc->valuedouble == 0.0, "collapsed model: 5-way accuracy 0 (all tie)");
    cJSON_Delete(j);
}

/* --- errors ---------------------------------------------------------------------------------- */

static void test_errors(const char *manifest) {
    char model_itc[1400], bad[1400];
    snprintf(model_itc, sizeof model_itc, "%s/model_itc", tmp);
    const char *configs = getenv("BT_CONFIGS");
    must(run(exe_ckpt, "--model '%s/synthetic-model' --init --heads itc --save '%s'",
             configs ? configs : "configs", model_itc),
         "bt-checkpoint --init --heads itc");
    int rc = run(exe_eval, "--model '%s' --data '%s' --itm-rerank 2", model_itc, manifest);
    tu_check(rc == 1 && strstr(err_text, "model.safetensors") && strstr(err_text, "ITM"),
             "--itm-rerank without an ITM head: exit 1 naming the weights file (%s)", err_text);
    snprintf(bad, sizeof bad, "%s/data/bad.jsonl", tmp);
    tu_setup_text(bad, "{\"image\": \"images/val/000000.jpg\", \"caption\": \"a\"}\n"
                       "{\"image\": \"images/val/nope.jpg\", \"caption\": \"b\"}\n");
    rc = run(exe_embed, "--model '%s' --data '%s' --output '%s/x.safetensors'", model_itc, bad,
             tmp);
    tu_check(rc == 1 && strstr(err_text, "bad.jsonl:2") && strstr(err_text, "nope.jpg"),
             "a missing image: exit 1 naming manifest:line and the file (%s)", err_text);
    rc = run(exe_eval, "--model '%s' --data '%s' --skip-bad --json '%s/bad.json'", model_itc, bad,
             tmp);
    tu_check(rc == 0 && strstr(out_text, "1 records") && strstr(out_text, "1 bad record"),
             "--skip-bad: the bad record is left out and counted (%s)", out_text);
    rc = run(exe_eval, "--model '%s' --data '%s' --max-records 10 --no-choices --json '%s/mr.json'",
             model_itc, manifest, tmp);
    if (rc == 0) {
        char mr[1400];
        snprintf(mr, sizeof mr, "%s/mr.json", tmp);
        cJSON *j = read_json(mr);
        tu_check(jpath(j, "records", NULL)->valuedouble == 10 && !jpath(j, "choice", NULL) &&
                     jpath(j, "text_to_image", "queries")->valuedouble == 10,
                 "--max-records 10 --no-choices: 10 records, no choice block");
        cJSON_Delete(j);
    } else {
        tu_check(0, "--max-records 10 exits 0 (%s)", err_text);
    }
    rc = run(exe_eval, "--model '%s' --data '%s' --batch-size 0", model_itc, manifest);
    tu_check(rc == 2 && strstr(err_text, "--batch-size"), "--batch-size 0: usage error (exit 2)");
    rc = run(exe_embed, "--model '%s' --data '%s'", model_itc, manifest);
    tu_check(rc == 2 && strstr(err_text, "--output"), "bt-embed without --output: exit 2");
    rc = run(exe_eval, "--model '%s/nowhere' --data '%s'", tmp, manifest);
    tu_check(rc == 1 && strstr(err_text, "nowhere"), "a missing model directory: exit 1 naming it");
}

/* Under a tight address-space limit (prlimit --as 100 MiB; issue 26 item 8) every tool ends
 * with its exit code instead of hanging in the GEMM libraries' exit handlers (OpenBLAS starts
 * its threads when it loads: before the fix even --help hung), and bt-eval / bt-embed refuse
 * with a message naming the limit before the GEMM libraries start. `timeout 60` turns a hang
 * into status 124. */
static void test_address_space_limit(const char *model, const char *manifest) {
    const char *tools[] = {exe_eval, exe_embed, exe_data, exe_ckpt, exe_fwd};
    const char *names[] = {"bt-eval", "bt-embed", "bt-data", "bt-checkpoint", "bt-forward"};
    for (int i = 0; i < 5; i++) {
        const int rc = run("timeout", "60 prlimit --as=104857600 '%s' --help", tools[i]);
        tu_check(rc == 0, "%s --help under a 100 MiB address-space limit exits 0 (got %d; 124: "
                 "hung at exit)", names[i], rc);
    }
    int rc = run("timeout", "60 prlimit --as=104857600 '%s' --model '%s' --data '%s'", exe_eval,
                 model, manifest);
    tu_check(rc == 1 && strstr(err_text, "address-space limit"),
             "bt-eval under a 100 MiB address-space limit: exit 1 naming the limit (got %d: "
             "%.200s)", rc, err_text);
    rc = run("timeout", "60 prlimit --as=104857600 '%s' --model '%s' --data '%s' --output "
             "'%s/limited.safetensors'", exe_embed, model, manifest, tmp);
    tu_check(rc == 1 && strstr(err_text, "address-space limit"),
             "bt-embed under a 100 MiB address-space limit: exit 1 naming the limit (got %d: "
             "%.200s)", rc, err_text);
}

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: test_eval_cli BT_EVAL BT_EMBED BT_DATA BT_CHECKPOINT BT_FORWARD\n");
        return 1;
    }
    exe_eval = argv[1];
    exe_embed = argv[2];
    exe_data = argv[3];
    exe_ckpt = argv[4];
    exe_fwd = argv[5];
    tmp = tu_tmpdir();
    const char *configs = getenv("BT_CONFIGS");
    char model[1200], data[1200], valp[1400], evalm[1400], small[1400], pairs[1400];
    snprintf(model, sizeof model, "%s/model", tmp);
    snprintf(data, sizeof data, "%s/data", tmp);
    must(run(exe_data, "synth --out '%s' --train 4 --val %d --test 2 --seed 3", data, NV),
         "bt-data synth");
    must(run(exe_ckpt, "--model '%s/synthetic-model' --init --seed 5 --save '%s'",
             configs ? configs : "configs", model),
         "bt-checkpoint --init");
    snprintf(valp, sizeof valp, "%s/val.jsonl", data);
    load_val(valp);
    snprintf(evalm, sizeof evalm, "%s/eval.jsonl", data);
    snprintf(small, sizeof small, "%s/small.jsonl", data);
    snprintf(pairs, sizeof pairs, "%s/pairs.jsonl", data);
    write_eval_manifest(evalm, N, 1);
    write_eval_manifest(small, NSMALL, 1);
    write_pair_manifest(pairs);

    test_embed(model, evalm);
    test_vs_forward(model, evalm);
    test_eval_metrics(model, evalm);
    test_rerank(model, small, pairs);
    test_collapsed(model, evalm);
    test_errors(evalm);
    test_address_space_limit(model, evalm);
    return tu_finish();
}
