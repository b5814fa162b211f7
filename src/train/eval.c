/* eval.c: the evaluation runner (contract in eval.h, definitions in docs/evaluation.md).
 *
 * Flow: one loader pass over the records in file order -> per batch one forward of the
 * matched pairs (loss, text / image / cross embeddings) and, for labelled matching-task
 * records, five forwards of (choice k, image) -> distinct images by path -> S = T·Iᵀ ->
 * ranks (metrics.c) -> optional ITM re-ranking forwards on the top-k pairs.
 *
 * Model calls use the phased API (model.h) and never exceed batch_size texts, images or
 * pairs per pass, so evaluation needs no larger activation arenas than a training step of
 * that batch size: per loader batch one tower pass on its captions and images and the cross
 * stack on the matched pairs (i, i) (embeddings, loss); then the choices of its labelled
 * records in chunks of floor(batch_size / 5) records (ITC: a text-only tower pass; ITM:
 * towers on the chunk's choices and images, the cross stack on the (choice, image) pairs).
 * The ITM re-ranking runs chunks of batch_size pairs: one tower pass on the chunk's
 * distinct texts and images, the cross stack on its pairs.
 * The eval loss is bt_itc_loss (train/loss.h), the function the trainer's step uses.
 *
 * Deliberately not here: file output (bt_eval.c / bt_embed.c), distributed evaluation. */
#include "train/eval.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <cjson/cJSON.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "args.h"
#include "model/checkpoint.h"
#include "clock.h"
#include "data/loader.h"
#include "json_util.h"
#include "mem.h"
#include "kernels/cpu.h"
#include "train/loss.h"

void bt_eval_options_default(bt_eval_options *o) {
    memset(o, 0, sizeof *o);
    o->batch_size = 8; /* bt-train's eval.batch_size default, HF's per_device_eval_batch_size */
    o->choices = 1;
    o->choice_score = BT_EVAL_CHOICE_ITC;
    o->num_workers = 1;
    o->on_error = MANIFEST_ON_ERROR_STOP;
}

static void *xcalloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size);
    BT_ASSERT(p);
    return p;
}

/* One tower pass (Bt texts of T tokens, Bi images) and, when P > 0, the cross stack on the
 * pairs. Outputs in m->itc_text (Bt, C), m->itc_image (Bi, C), m->itc_cross (P, C),
 * m->itm_logits_out (P, 2) (ITM head). */
static bt_status model_run(bt_model *m, size_t Bt, size_t T, const int32_t *ids,
                           const int32_t *mask, size_t Bi, const float *pixels,
                           const bt_pair *pairs, size_t P) {
    const bt_text_input ti = {.B = Bt, .T = T, .input_ids = ids, .attention_mask = mask};
    const bt_image_input ii = {.B = Bi, .pixel_values = pixels};
    bt_status st = bt_towers_forward(m, &ti, &ii);
    if (st == BT_OK && P) st = bt_cross_forward_pairs(m, pairs, P);
    return st;
}

/* ITM match logit of pair p of the last cross pass: logit[1] - logit[0]. */
static inline float itm_match(const bt_model *m, size_t p) {
    return m->itm_logits_out[2 * p + 1] - m->itm_logits_out[2 * p];
}

static int all_finite(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return 0;
    return 1;
}

static double dot_f64(const float *a, const float *b, size_t n) {
    double s = 0.0;
    for (size_t k = 0; k < n; k++)
        s += (double)a[k] * (double)b[k];
    return s;
}

static int cmp_by_path(const void *pa, const void *pb, void *ctx) {
    const manifest *man = ctx;
    const int64_t a = *(const int64_t *)pa, b = *(const int64_t *)pb;
    int c = strcmp(manifest_image(man, (size_t)a), manifest_image(man, (size_t)b));
    return c ? c : (a > b) - (a < b);
}

/* group (N): records with the same resolved image path get one number, numbered in order
 * of first appearance; returns the count. */
static size_t group_images(const manifest *man, size_t N, int64_t *group) {
    int64_t *order = xcalloc(N, sizeof *order), *first = xcalloc(N, sizeof *first);
    for (size_t i = 0; i < N; i++)
        order[i] = (int64_t)i;
    qsort_r(order, N, sizeof *order, cmp_by_path, (void *)man);
    for (size_t i = 0; i < N; i++) { /* first[r] = smallest record with r's path */
        int same = i > 0 && !strcmp(manifest_image(man, (size_t)order[i]),
                                    manifest_image(man, (size_t)order[i - 1]));
        first[order[i]] = same ? first[order[i - 1]] : order[i];
    }
    size_t n = 0;
    for (size_t r = 0; r < N; r++)
        group[r] = first[r] == (int64_t)r ? (int64_t)n++ : group[first[r]];
    free(order);
    free(first);
    return n;
}

/* Index of v in list[0..n), appended when absent. */
static size_t intern(int64_t *list, size_t *n, int64_t v) {
    for (size_t i = 0; i < *n; i++)
        if (list[i] == v) return i;
    list[*n] = v;
    return (*n)++;
}

/* ITM match logits of P (text record, image group) pairs, in chunks of `batch` pairs: one
 * tower pass on the chunk's distinct texts and images, the cross stack on its pairs. */
static bt_status pairs_itm(bt_model *m, size_t P, const int64_t *text_rec,
                           const int64_t *image_grp, const int32_t *ids, const int32_t *mask,
                           const float *gpix, size_t T, size_t px, size_t batch, float *out) {
    int32_t *bi = xcalloc(batch * T, sizeof *bi), *bm = xcalloc(batch * T, sizeof *bm);
    float *bp = xcalloc(batch * px, sizeof *bp);
    int64_t *texts = xcalloc(batch, sizeof *texts), *images = xcalloc(batch, sizeof *images);
    bt_pair *pairs = xcalloc(batch, sizeof *pairs);
    bt_status st = BT_OK;
    for (size_t p0 = 0; p0 < P && st == BT_OK; p0 += batch) {
        const size_t n = P - p0 < batch ? P - p0 : batch;
        size_t nt = 0, ni = 0;
        for (size_t i = 0; i < n; i++) {
            pairs[i].text_row = (int32_t)intern(texts, &nt, text_rec[p0 + i]);
            pairs[i].image_row = (int32_t)intern(images, &ni, image_grp[p0 + i]);
            pairs[i].mlm = 0;
        }
        for (size_t i = 0; i < nt; i++) {
            memcpy(bi + i * T, ids + (size_t)texts[i] * T, T * sizeof *bi);
            memcpy(bm + i * T, mask + (size_t)texts[i] * T, T * sizeof *bm);
        }
        for (size_t i = 0; i < ni; i++)
            memcpy(bp + i * px, gpix + (size_t)images[i] * px, px * sizeof *bp);
        st = model_run(m, nt, T, bi, bm, ni, bp, pairs, n);
        for (size_t i = 0; st == BT_OK && i < n; i++)
            out[p0 + i] = itm_match(m, i);
    }
    free(bi);
    free(bm);
    free(bp);
    free(texts);
    free(images);
    free(pairs);
    return st;
}

typedef struct eval_state {
    size_t N, T, C, px;
    float *temb, *iemb, *cemb; /* (N, C) by record */
    uint8_t *valid;            /* (N) delivered as itself */
    int64_t *group;            /* (N) image group by path */
    int32_t *ids, *mask;       /* (N, T) when re-ranking */
    float *gpix;               /* (groups, 3, R, R) when re-ranking */
    uint8_t *gseen;            /* (groups) */
    float *cscore;             /* (N, 5) choice scores */
    int32_t *clabel;           /* (N) -1 unless a labelled valid record */
    int has_choice_data;
} eval_state;

static void state_free(eval_state *s) {
    free(s->temb);
    free(s->iemb);
    free(s->cemb);
    free(s->valid);
    free(s->group);
    free(s->ids);
    free(s->mask);
    free(s->gpix);
    free(s->gseen);
    free(s->cscore);
    free(s->clabel);
    memset(s, 0, sizeof *s);
}

/* Scratch of the per-batch model calls (never more than B texts, B images, B pairs). */
typedef struct batch_ws {
    int32_t *ids, *mask; /* (B, T) choice captions of a chunk */
    float *pixels;       /* (B/5 + 1, 3, R, R) images of a chunk (ITM choice scoring) */
    bt_pair *pairs;      /* (B) */
    int64_t *lab_rows;   /* (B) batch rows of the labelled valid records */
    bt_loss_ws loss_ws;
} batch_ws;

/* The main pass of one loader batch, at the training shape: towers on its n captions and n
 * images, the cross stack on (i, i). Returns the batch's HF ITC loss; the embeddings stay in
 * the model (rows 0..n-1). */
static bt_status batch_forward(bt_model *m, const loader_batch *b, const eval_state *s,
                               batch_ws *w, float *loss) {
    const size_t n = (size_t)b->size;
    for (size_t i = 0; i < n; i++)
        w->pairs[i] = (bt_pair){(int32_t)i, (int32_t)i, 0};
    bt_status st = model_run(m, n, s->T, b->input_ids, b->attention_mask, n, b->pixel_values,
                             w->pairs, n);
    if (st != BT_OK) return st;
    const bt_itc_args la = {.n_rows = n, .n_cols = n, .row_offset = 0, .n_total = n, .C = s->C,
                            .text_rows = m->itc_text, .image_rows = m->itc_image,
                            .image_cols = m->itc_image, .cross_cols = m->itc_cross,
                            .logit_scale = *m->p.logit_scale, .weight = 1.0f};
    *loss = bt_itc_loss(&la, &w->loss_ws);
    return BT_OK;
}

/* The 5 choices of every labelled valid record of a batch, in chunks of floor(B/5) records
 * (at most B texts per tower pass). ITC: a text-only tower pass, each choice's embedding
 * against the record's image embedding of the main pass (s->iemb). ITM: towers on the
 * chunk's choices and images, the cross stack on the (choice, image) pairs. */
static bt_status batch_choices(bt_model *m, const manifest *man, const loader_batch *b,
                               const bt_eval_options *o, eval_state *s, batch_ws *w) {
    const size_t T = s->T, C = s->C, px = s->px, n = (size_t)b->size, K = MANIFEST_N_CHOICES;
    const size_t per = (size_t)o->batch_size / K ? (size_t)o->batch_size / K : 1;
    const int use_itm = o->choice_score == BT_EVAL_CHOICE_ITM;
    size_t nl = 0;
    for (size_t i = 0; i < n; i++)
        if (b->labels[i] >= 0 && s->valid[b->record[i]] && b->record[i] == b->sampled[i])
            w->lab_rows[nl++] = (int64_t)i;
    bt_status st = BT_OK;
    for (size_t j0 = 0; j0 < nl && st == BT_OK; j0 += per) {
        const size_t nj = nl - j0 < per ? nl - j0 : per;
        for (size_t j = 0; j < nj; j++) {
            const size_t row = (size_t)w->lab_rows[j0 + j];
            for (size_t k = 0; k < K; k++) {
                const size_t src = (row * K + k) * T, dst = (j * K + k) * T;
                memcpy(w->ids + dst, b->choice_ids + src, T * sizeof *w->ids);
                memcpy(w->mask + dst, b->choice_mask + src, T * sizeof *w->mask);
                w->pairs[j * K + k] = (bt_pair){(int32_t)(j * K + k), (int32_t)j, 0};
            }
            if (use_itm)
                memcpy(w->pixels + j * px, (const float *)b->pixel_values + row * px,
                       px * sizeof(float));
        }
        st = model_run(m, nj * K, T, w->ids, w->mask, use_itm ? nj : 0, w->pixels, w->pairs,
                       use_itm ? nj * K : 0);
        for (size_t j = 0; st == BT_OK && j < nj; j++) {
            const size_t row = (size_t)w->lab_rows[j0 + j];
            const int64_t rec = b->record[row];
            for (size_t k = 0; st == BT_OK && k < K; k++) {
                const size_t t = j * K + k;
                const float v = use_itm ? itm_match(m, t)
                                        : (float)dot_f64(m->itc_text + t * C,
                                                         s->iemb + (size_t)rec * C, C);
                if (!isfinite(v))
                    st = bt_fail(BT_ERR_NUMERIC, "%s:%d: choice %zu scores %g (the model gave a "
                                 "non-finite %s output)",
                                 man->path, man->records[rec].line, k, (double)v,
                                 use_itm ? "ITM" : "ITC");
                s->cscore[(size_t)rec * K + k] = v;
            }
            s->clabel[rec] = b->labels[row];
        }
    }
    return st;
}

static void print_problem(const char *msg, void *ctx) {
    fprintf((FILE *)ctx, "eval: bad record left out: %s\n", msg);
}

/* One pass of the loader over the first N records. */
static bt_status eval_pass(bt_model *m, const manifest *mv, const tokenizer *tok,
                           const image_preprocess_config *img, const bt_eval_options *o,
                           eval_state *s, bt_eval_result *r) {
    loader_options lo = loader_options_default();
    lo.num_workers = o->num_workers;
    lo.batch_size = o->batch_size;
    lo.shuffle = 0;
    lo.drop_last = 0;
    lo.drop_last_batch = 0;
    lo.max_epochs = 1;
    lo.max_length = o->max_length;
    lo.pixel_dtype = BT_DTYPE_F32;
    lo.with_choices = o->choices;
    lo.cache_bytes = o->cache_bytes;
    lo.on_error = o->on_error;
    loader *l = NULL;
    bt_status st = loader_init(&l, mv, tok, img, &lo);
    const size_t T = s->T, C = s->C, px = s->px, B = (size_t)o->batch_size;
    const size_t Bc = B < MANIFEST_N_CHOICES ? MANIFEST_N_CHOICES : B; /* >= one record's 5 */
    batch_ws w = {.ids = xcalloc(Bc * T, sizeof(int32_t)),
                  .mask = xcalloc(Bc * T, sizeof(int32_t)),
                  .pixels = xcalloc((Bc / MANIFEST_N_CHOICES + 1) * px, sizeof(float)),
                  .pairs = xcalloc(Bc, sizeof(bt_pair)),
                  .lab_rows = xcalloc(B, sizeof(int64_t))};
    double loss_sum = 0.0;
    size_t loss_rows = 0, done = 0, next_report = s->N / 10;
    while (st == BT_OK) {
        if (o->cancel && *o->cancel) {
            st = bt_fail(BT_ERR_INTERRUPTED, "%s: evaluation stopped by a signal after %zu of "
                         "%zu records", mv->path, done, s->N);
            break;
        }
        loader_batch *b = NULL;
        st = loader_next(l, &b);
        if (st != BT_OK || !b) break;
        const size_t n = (size_t)b->size;
        float loss = 0.0f;
        st = batch_forward(m, b, s, &w, &loss);
        if (st == BT_OK && !isfinite(loss))
            st = bt_fail(BT_ERR_NUMERIC, "%s: batch %lld (records %lld..%lld): ITC loss is %g",
                         mv->path, (long long)b->index, (long long)b->record[0],
                         (long long)b->record[n - 1], (double)loss);
        loss_sum += (double)loss * (double)n;
        loss_rows += n;
        r->n_batches++;
        const float *te = m->itc_text, *ie = m->itc_image, *ce = m->itc_cross;
        for (size_t i = 0; st == BT_OK && i < n; i++) {
            const int64_t rec = b->record[i];
            if (rec != b->sampled[i]) continue; /* a bad record's replacement */
            if (!all_finite(te + i * C, C) || !all_finite(ie + i * C, C) ||
                !all_finite(ce + i * C, C)) {
                st = bt_fail(BT_ERR_NUMERIC, "%s:%d: the model's ITC embeddings of this record "
                             "are not finite",
                             mv->path, mv->records[rec].line);
                break;
            }
            s->valid[rec] = 1;
            memcpy(s->temb + (size_t)rec * C, te + i * C, C * sizeof(float));
            memcpy(s->iemb + (size_t)rec * C, ie + i * C, C * sizeof(float));
            memcpy(s->cemb + (size_t)rec * C, ce + i * C, C * sizeof(float));
            if (s->ids) {
                memcpy(s->ids + (size_t)rec * T, b->input_ids + i * T, T * sizeof(int32_t));
                memcpy(s->mask + (size_t)rec * T, b->attention_mask + i * T, T * sizeof(int32_t));
                const int64_t g = s->group[rec];
                if (!s->gseen[g]) {
                    memcpy(s->gpix + (size_t)g * px, (const float *)b->pixel_values + i * px,
                           px * sizeof(float));
                    s->gseen[g] = 1;
                }
            }
        }
        if (st == BT_OK && b->has_choices) {
            s->has_choice_data = 1;
            st = batch_choices(m, mv, b, o, s, &w);
        }
        loader_release(l, b);
        done += n;
        if (o->progress && st == BT_OK && done >= next_report && done < s->N) {
            fprintf(o->progress, "eval: %zu/%zu records\n", done, s->N);
            fflush(o->progress);
            next_report = done + s->N / 10;
        }
    }
    if (l && o->progress) loader_drain_problems(l, print_problem, o->progress);
    loader_free(l);
    free(w.ids);
    free(w.mask);
    free(w.pixels);
    free(w.pairs);
    free(w.lab_rows);
    bt_loss_ws_free(&w.loss_ws);
    r->loss = loss_rows ? loss_sum / (double)loss_rows : 0.0;
    return st;
}

static bt_status check_options(const bt_model *m, const manifest *man, const bt_eval_options *o) {
    if (o->batch_size < 1)
        return bt_fail(BT_ERR_ARG, "eval: batch_size %d; expected >= 1", o->batch_size);
    if (o->max_length < 2)
        return bt_fail(BT_ERR_ARG, "eval: max_length %d; expected >= 2", o->max_length);
    if (o->itm_rerank_k < 0)
        return bt_fail(BT_ERR_ARG, "eval: itm_rerank_k %d; expected >= 0", o->itm_rerank_k);
    if (o->num_workers < 1)
        return bt_fail(BT_ERR_ARG, "eval: num_workers %d; expected >= 1", o->num_workers);
    if (!(m->heads & BT_HEADS_ITC))
        return bt_fail(BT_ERR_ARG, "eval: the model has no ITC head (itc_text_head, "
                       "itc_image_head, itc_cross_modal_head); evaluation needs it");
    const int choice_itm = o->choices && o->choice_score == BT_EVAL_CHOICE_ITM;
    if ((o->itm_rerank_k > 0 || choice_itm) && !(m->heads & BT_HEADS_ITM))
        return bt_fail(BT_ERR_ARG, "eval: %s needs the ITM head (itm_score), which the model "
                       "does not have",
                       o->itm_rerank_k > 0 ? "ITM re-ranking" : "ITM choice scoring");
    if (man->n == 0) return bt_fail(BT_ERR_ARG, "eval: %s has no records", man->path);
    return BT_OK;
}

/* Re-ranking of one direction: top k by ITC, ITM on those pairs, re-ranked ranks. */
static bt_status rerank_direction(bt_model *m, const bt_score_view *v, const int64_t *q_key,
                                  const int64_t *c_key, size_t k, int text_queries,
                                  const int64_t *row_rec, const int64_t *img_grp,
                                  const eval_state *s, size_t batch, int64_t *ranks) {
    const size_t kk = k < v->nc ? k : v->nc, P = v->nq * kk;
    int64_t *top = xcalloc(P, sizeof *top), *prec = xcalloc(P, sizeof *prec),
            *pgrp = xcalloc(P, sizeof *pgrp);
    float *itm = xcalloc(P, sizeof *itm);
    bt_status st = bt_retrieval_topk(v, q_key, c_key, k, top);
    for (size_t p = 0; st == BT_OK && p < P; p++) {
        const size_t q = p / kk, c = (size_t)top[p];
        prec[p] = row_rec[text_queries ? q : c];
        pgrp[p] = img_grp[text_queries ? c : q];
    }
    if (st == BT_OK)
        st = pairs_itm(m, P, prec, pgrp, s->ids, s->mask, s->gpix, s->T, s->px, batch, itm);
    if (st == BT_OK) st = bt_retrieval_rerank_ranks(v, q_key, c_key, k, top, itm, ranks);
    free(top);
    free(prec);
    free(pgrp);
    free(itm);
    return st;
}

/* Longer than ~120 lines on purpose: it allocates the pass's state (embeddings, image groups,
 * choice scores), runs eval_pass, then builds the retrieval rows, the similarity matrix, the
 * recalls and the ITM re-ranking over those shared arrays and frees them; splitting it would
 * pass the dozen arrays between the parts. */
bt_status bt_eval_run(bt_model *m, const manifest *man, const tokenizer *tok,
                      const image_preprocess_config *img, const bt_eval_options *o,
                      bt_eval_result *r) {
    memset(r, 0, sizeof *r);
    const double t0 = bt_now_s();
    bt_status st = check_options(m, man, o);
    if (st != BT_OK) return st;
    manifest mv = *man; /* a view of the first max_records records (shares the arena) */
    if (o->max_records && o->max_records < mv.n) mv.n = o->max_records;
    eval_state s = {0};
    s.N = mv.n;
    s.T = (size_t)o->max_length;
    s.C = (size_t)m->cfg.contrastive_hidden;
    s.px = 3 * (size_t)m->cfg.image_size * (size_t)m->cfg.image_size;
    const size_t N = s.N, C = s.C;
    s.temb = xcalloc(N * C, sizeof(float));
    s.iemb = xcalloc(N * C, sizeof(float));
    s.cemb = xcalloc(N * C, sizeof(float));
    s.valid = xcalloc(N, 1);
    s.group = xcalloc(N, sizeof *s.group);
    const size_t G = group_images(&mv, N, s.group);
    if (o->itm_rerank_k > 0) {
        s.ids = xcalloc(N * s.T, sizeof *s.ids);
        s.mask = xcalloc(N * s.T, sizeof *s.mask);
        s.gpix = xcalloc(G * s.px, sizeof *s.gpix);
        s.gseen = xcalloc(G, 1);
    }
    s.cscore = xcalloc(N * MANIFEST_N_CHOICES, sizeof *s.cscore);
    s.clabel = xcalloc(N, sizeof *s.clabel);
    for (size_t i = 0; i < N; i++)
        s.clabel[i] = -1;

    /* eval mode for the pass, forward-only activations (model.h "Memory modes": no gradient
     * slots, one layer's internals; inside a training run the unused gradient arenas hold
     * them); the caller's dropout setting and memory mode come back afterwards */
    const int was_training = m->training;
    const uint64_t dseed = m->dropout_seed, dstep = m->step;
    const bt_act_mode was_mode = m->act_mode;
    bt_model_set_dropout(m, 0, dseed, dstep);
    bt_model_set_act_mode(m, BT_ACTS_FORWARD_ONLY);
    st = eval_pass(m, &mv, tok, img, o, &s, r);

    /* rows = valid records in file order; distinct images renumbered among them */
    size_t nr = 0, ni = 0;
    int64_t *row_rec = xcalloc(N, sizeof *row_rec), *row_img = xcalloc(N, sizeof *row_img);
    int64_t *gmap = xcalloc(G, sizeof *gmap), *img_first = xcalloc(N, sizeof *img_first);
    int64_t *img_grp = xcalloc(N, sizeof *img_grp), *img_key = xcalloc(N, sizeof *img_key);
    float *S = NULL;
    int64_t *rt = NULL, *ri = NULL;
    for (size_t g = 0; g < G; g++)
        gmap[g] = -1;
    for (size_t rec = 0; st == BT_OK && rec < N; rec++) {
        if (!s.valid[rec]) continue;
        const int64_t g = s.group[rec];
        if (gmap[g] < 0) {
            img_first[ni] = (int64_t)rec;
            img_grp[ni] = g;
            img_key[ni] = (int64_t)ni;
            gmap[g] = (int64_t)ni++;
        }
        row_rec[nr] = (int64_t)rec;
        row_img[nr++] = gmap[g];
    }
    r->n_records = nr;
    r->n_images = ni;
    r->n_bad = st == BT_OK ? N - nr : 0;
    if (st == BT_OK && nr == 0)
        st = bt_fail(BT_ERR_MISSING, "eval: %s: no valid record to evaluate", mv.path);

    /* S = T·Iᵀ (nr, ni) */
    if (st == BT_OK) {
        S = xcalloc(nr * ni, sizeof *S);
#pragma omp parallel for schedule(static)
        for (size_t t = 0; t < nr; t++)
            for (size_t j = 0; j < ni; j++)
                S[t * ni + j] = (float)dot_f64(s.temb + (size_t)row_rec[t] * C,
                                               s.iemb + (size_t)img_first[j] * C, C);
        rt = xcalloc(nr, sizeof *rt);
        ri = xcalloc(ni, sizeof *ri);
        bt_score_view t2i = bt_scores_text_to_image(S, nr, ni);
        bt_score_view i2t = bt_scores_image_to_text(S, nr, ni);
        st = bt_retrieval_ranks(&t2i, row_img, img_key, rt);
        if (st == BT_OK) st = bt_retrieval_ranks(&i2t, img_key, row_img, ri);
        if (st == BT_OK) {
            bt_retrieval_summarize(rt, nr, &r->t2i);
            bt_retrieval_summarize(ri, ni, &r->i2t);
        }
        if (st == BT_OK && o->itm_rerank_k > 0) {
            const size_t k = (size_t)o->itm_rerank_k;
            st = rerank_direction(m, &t2i, row_img, img_key, k, 1, row_rec, img_grp, &s,
                                  (size_t)o->batch_size, rt);
            if (st == BT_OK)
                st = rerank_direction(m, &i2t, img_key, row_img, k, 0, row_rec, img_grp, &s,
                                      (size_t)o->batch_size, ri);
            if (st == BT_OK) {
                r->has_rerank = 1;
                r->rerank_k = k;
                bt_retrieval_summarize(rt, nr, &r->t2i_rerank);
                bt_retrieval_summarize(ri, ni, &r->i2t_rerank);
            }
        }
        if (st != BT_OK) bt_fail_context(st, "eval of %s", mv.path);
    }
    bt_model_set_dropout(m, was_training, dseed, dstep);
    bt_model_set_act_mode(m, was_mode);

    /* 5-way */
    if (st == BT_OK && s.has_choice_data) {
        st = bt_choice_accuracy(s.cscore, N, MANIFEST_N_CHOICES, s.clabel, mv.path,
                                &r->choice_accuracy, &r->n_choice);
        r->has_choices = st == BT_OK && r->n_choice > 0;
        r->choice_score = o->choice_score;
    }

    if (st == BT_OK && o->keep_embeddings) {
        r->C = C;
        r->text_embeds = xcalloc(nr * C, sizeof(float));
        r->image_embeds = xcalloc(nr * C, sizeof(float));
        r->cross_embeds = xcalloc(nr * C, sizeof(float));
        r->record = xcalloc(nr, sizeof(int64_t));
        r->image_index = xcalloc(nr, sizeof(int64_t));
        for (size_t t = 0; t < nr; t++) {
            const size_t rec = (size_t)row_rec[t];
            memcpy(r->text_embeds + t * C, s.temb + rec * C, C * sizeof(float));
            memcpy(r->image_embeds + t * C, s.iemb + (size_t)img_first[row_img[t]] * C,
                   C * sizeof(float));
            memcpy(r->cross_embeds + t * C, s.cemb + rec * C, C * sizeof(float));
            r->record[t] = (int64_t)rec;
            r->image_index[t] = row_img[t];
        }
    }
    free(S);
    free(rt);
    free(ri);
    free(row_rec);
    free(row_img);
    free(gmap);
    free(img_first);
    free(img_grp);
    free(img_key);
    state_free(&s);
    r->seconds = bt_now_s() - t0;
    return st;
}

void bt_eval_result_free(bt_eval_result *r) {
    free(r->text_embeds);
    free(r->image_embeds);
    free(r->cross_embeds);
    free(r->record);
    free(r->image_index);
    memset(r, 0, sizeof *r);
}

/* --- reporting ---------------------------------------------------------------------------- */

static cJSON *retrieval_json(const bt_retrieval_metrics *x) {
    cJSON *o = cJSON_CreateObject();
    BT_ASSERT(o);
    cJSON_AddNumberToObject(o, "r1", x->r1);
    cJSON_AddNumberToObject(o, "r5", x->r5);
    cJSON_AddNumberToObject(o, "r10", x->r10);
    cJSON_AddNumberToObject(o, "mean_rank", x->mean_rank);
    cJSON_AddNumberToObject(o, "median_rank", x->median_rank);
    cJSON_AddNumberToObject(o, "queries", (double)x->n);
    return o;
}

cJSON *bt_eval_result_to_json(const bt_eval_result *r) {
    cJSON *o = cJSON_CreateObject();
    BT_ASSERT(o);
    cJSON_AddNumberToObject(o, "records", (double)r->n_records);
    cJSON_AddNumberToObject(o, "images", (double)r->n_images);
    cJSON_AddNumberToObject(o, "bad_records", (double)r->n_bad);
    cJSON_AddNumberToObject(o, "eval_loss", r->loss);
    cJSON_AddNumberToObject(o, "batches", (double)r->n_batches);
    cJSON_AddItemToObject(o, "text_to_image", retrieval_json(&r->t2i));
    cJSON_AddItemToObject(o, "image_to_text", retrieval_json(&r->i2t));
    if (r->has_rerank) {
        cJSON *x = cJSON_CreateObject();
        BT_ASSERT(x);
        cJSON_AddNumberToObject(x, "k", (double)r->rerank_k);
        cJSON_AddItemToObject(x, "text_to_image", retrieval_json(&r->t2i_rerank));
        cJSON_AddItemToObject(x, "image_to_text", retrieval_json(&r->i2t_rerank));
        cJSON_AddItemToObject(o, "itm_rerank", x);
    }
    if (r->has_choices) {
        cJSON *x = cJSON_CreateObject();
        BT_ASSERT(x);
        cJSON_AddNumberToObject(x, "n", (double)r->n_choice);
        cJSON_AddNumberToObject(x, "accuracy", r->choice_accuracy);
        cJSON_AddStringToObject(x, "score", r->choice_score == BT_EVAL_CHOICE_ITM ? "itm" : "itc");
        cJSON_AddItemToObject(o, "choice", x);
    }
    cJSON_AddNumberToObject(o, "seconds", r->seconds);
    return o;
}

size_t bt_eval_result_scalars(const bt_eval_result *r, const char **names, double *values,
                              size_t cap) {
    size_t n = 0;
#define PUT(name, v)                                                                        \
    do {                                                                                    \
        if (n < cap) {                                                                      \
            names[n] = name;                                                                \
            values[n] = (v);                                                                \
        }                                                                                   \
        n++;                                                                                \
    } while (0)
#define PUT_RETRIEVAL(p, x)                                                                 \
    do {                                                                                    \
        PUT("eval/" p "_r1", (x).r1);                                                       \
        PUT("eval/" p "_r5", (x).r5);                                                       \
        PUT("eval/" p "_r10", (x).r10);                                                     \
        PUT("eval/" p "_mean_rank", (x).mean_rank);                                         \
        PUT("eval/" p "_median_rank", (x).median_rank);                                     \
    } while (0)
    PUT("eval/loss", r->loss);
    PUT_RETRIEVAL("t2i", r->t2i);
    PUT_RETRIEVAL("i2t", r->i2t);
    if (r->has_rerank) {
        PUT_RETRIEVAL("t2i_itm", r->t2i_rerank);
        PUT_RETRIEVAL("i2t_itm", r->i2t_rerank);
    }
    if (r->has_choices) PUT("eval/choice_acc", r->choice_accuracy);
#undef PUT_RETRIEVAL
#undef PUT
    return n;
}

static void print_retrieval(FILE *out, const char *name, const bt_retrieval_metrics *x) {
    fprintf(out, "  %-22s R@1 %6.2f%%  R@5 %6.2f%%  R@10 %6.2f%%  mean rank %.2f  median %.1f"
                 "  (%zu queries)\n",
            name, 100 * x->r1, 100 * x->r5, 100 * x->r10, x->mean_rank, x->median_rank, x->n);
}

void bt_eval_result_print(const bt_eval_result *r, FILE *out) {
    fprintf(out, "eval: %zu records, %zu distinct images", r->n_records, r->n_images);
    if (r->n_bad) fprintf(out, ", %zu bad records left out", r->n_bad);
    fprintf(out, ", %zu batches, %.1f s\n", r->n_batches, r->seconds);
    fprintf(out, "  %-22s %.6f\n", "eval loss (ITC)", r->loss);
    print_retrieval(out, "text->image (ITC)", &r->t2i);
    print_retrieval(out, "image->text (ITC)", &r->i2t);
    if (r->has_rerank) {
        char a[64], b[64];
        snprintf(a, sizeof a, "text->image (ITM@%zu)", r->rerank_k);
        snprintf(b, sizeof b, "image->text (ITM@%zu)", r->rerank_k);
        print_retrieval(out, a, &r->t2i_rerank);
        print_retrieval(out, b, &r->i2t_rerank);
    }
    if (r->has_choices)
        fprintf(out, "  %-22s %6.2f%%  (%zu records, chance 20%%, scored by %s)\n",
                "5-way caption choice", 100 * r->choice_accuracy, r->n_choice,
                r->choice_score == BT_EVAL_CHOICE_ITM ? "ITM" : "ITC");
}

/* --- for the CLIs ------------------------------------------------------------------------ */

void bt_eval_setup_close(bt_eval_setup *s) {
    if (s->have_model) bt_model_free(&s->model);
    if (s->have_tok) tokenizer_free(&s->tok);
    if (s->have_man) manifest_free(&s->man);
    memset(s, 0, sizeof *s);
}

bt_status bt_eval_setup_open(bt_eval_setup *s, const char *dir, const char *manifest_path,
                             unsigned heads, bt_precision precision, const manifest_options *mo,
                             FILE *log, const char *who) {
    memset(s, 0, sizeof *s);
    bt_checkpoint ck;
    bt_status st = bt_checkpoint_open(&ck, dir);
    if (st != BT_OK) return st;
    s->heads_in_file = ck.heads_in_file;
    if ((heads & BT_HEADS_ITM) && !(ck.heads_in_file & BT_HEADS_ITM)) {
        st = bt_fail(BT_ERR_MISSING, "%s: no ITM head (itm_score.*) in the checkpoint; ITM "
                     "re-ranking and ITM choice scoring need a model trained with it",
                     ck.weights_path);
        goto fail;
    }
    if ((heads & BT_HEADS_ITC) && !(ck.heads_in_file & BT_HEADS_ITC) && log)
        fprintf(log, "%s: warning: %s has no ITC head: it is initialized by HF's init rules, "
                     "so the retrieval metrics are those of an untrained head\n",
                who, ck.weights_path);
    st = bt_model_init(&s->model, &ck.cfg, heads, precision);
    if (st != BT_OK) goto fail;
    s->have_model = 1;
    bt_model_free_grads(&s->model); /* bt-eval / bt-embed never train: no gradients */
    bt_checkpoint_report rep;
    st = bt_checkpoint_read(&ck, &s->model.table, s->model.params, NULL, &rep);
    /* heads deliberately not built (MLM, or ITM when unused) are expected: only the heads
     * initialized here and unexpected keys are worth a line */
    for (size_t i = 0; log && i < rep.initialized.n; i++)
        fprintf(log, "%s: notice: %s: not in checkpoint, initialized (HF init rules)\n", who,
                rep.initialized.names[i]);
    for (size_t i = 0; log && i < rep.unexpected.n; i++)
        fprintf(log, "%s: warning: %s: unexpected key '%s'\n", who, ck.weights_path,
                rep.unexpected.names[i]);
    bt_checkpoint_report_free(&rep);
    if (st == BT_OK) st = bt_model_config_text_length(ck.config_json, &ck.cfg, ck.config_path,
                                                      &s->max_length);
    if (st != BT_OK) goto fail;
    bt_model_pack_weights(&s->model); /* the bf16 shadow, packed where that pays (model.h) */
    st = tokenizer_load(&s->tok, dir);
    if (st != BT_OK) goto fail;
    s->have_tok = 1;
    if (s->tok.vocab_size > ck.cfg.vocab_size) {
        st = bt_fail(BT_ERR_CONFIG, "%s: the tokenizer has %d ids but %s has vocab_size %d",
                     dir, s->tok.vocab_size, ck.config_path, ck.cfg.vocab_size);
        goto fail;
    }
    char pp[4200];
    snprintf(pp, sizeof pp, "%s/preprocessor_config.json", dir);
    st = image_preprocess_config_from_json(&s->img, pp);
    if (st != BT_OK) goto fail;
    if (s->img.crop_size != ck.cfg.image_size) {
        st = bt_fail(BT_ERR_CONFIG, "%s gives %dx%d images but %s has vision_config.image_size "
                     "%d; they must agree",
                     pp, s->img.crop_size, s->img.crop_size, ck.config_path, ck.cfg.image_size);
        goto fail;
    }
    manifest_options def = manifest_options_default();
    st = manifest_load(&s->man, manifest_path, mo ? mo : &def);
    s->have_man = 1;
    if (st != BT_OK) goto fail;
    bt_checkpoint_close(&ck);
    return BT_OK;
fail:
    bt_checkpoint_close(&ck);
    bt_eval_setup_close(s);
    return st;
}

/* --- command-line flags shared by bt-eval and bt-embed ------------------------------------ */

void bt_eval_cli_usage(FILE *out, int embed) {
    if (embed)
        fprintf(out, "usage: bt-embed --model DIR --data MANIFEST --output FILE.safetensors "
                     "[options]\n");
    else
        fprintf(out, "usage: bt-eval --model DIR --data MANIFEST [--json OUT] [--itm-rerank K]\n"
                     "               [--choice-score itc|itm] [--no-choices] [options]\n");
    fprintf(out,
            "  --model DIR          Hugging Face BridgeTower directory (config.json,\n"
            "                       model.safetensors, tokenizer, preprocessor_config.json)\n"
            "  --data MANIFEST      JSON Lines manifest (docs/data.md)\n"
            "  --batch-size N       records per forward (default: the batch_size of the model\n"
            "                       directory's eval_results.json, as bt-train evaluated it,\n"
            "                       else 8; the eval loss is a mean of per-batch losses)\n"
            "  --max-records N      only the first N records (default all)\n"
            "  --max-length T       text length (default: config.json max_text_len, the\n"
            "                       length bt-train trained with)\n"
            "  --image-key K        manifest key of the image path (default image)\n"
            "  --caption-key K      manifest key of the caption (default caption; New Yorker:\n"
            "                       image_description)\n"
            "  --workers N          data loader threads (default 1)\n"
            "  --cache-mb N         loader image cache in MiB (default 0)\n"
            "  --skip-bad           leave out bad records (default: stop at the first)\n"
            "  --precision P        fp32 (default) or bf16\n"
            "  --threads N          OpenMP threads (default: OMP_NUM_THREADS)\n");
    if (embed)
        fprintf(out, "  --output FILE        safetensors file: text_embeds, image_embeds,\n"
                     "                       cross_embeds (N, C) F32, record_index, image_index (N)\n"
                     "                       I64; record ids and image paths in __metadata__\n");
    else
        fprintf(out, "  --json OUT           write the metrics as JSON\n"
                     "  --itm-rerank K       re-rank the top K both ways by the ITM head\n"
                     "  --choice-score S     5-way caption choice scored by itc (default) or itm\n"
                     "  --no-choices         skip the 5-way caption choice\n");
    bt_runtime_cli_help(out, 23);
}

static int cli_parse(bt_eval_cli_args *a, int argc, char **argv, int embed) {
    memset(a, 0, sizeof *a);
    bt_eval_options_default(&a->opt);
    a->precision = BT_PRECISION_FP32;
    const char *who = embed ? "bt-embed" : "bt-eval";
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (!strcmp(o, "--help") || !strcmp(o, "-h")) {
            bt_eval_cli_usage(stdout, embed);
            exit(bt_mem_exit(0)); /* mem.h: no hang at exit under ulimit -v */
        }
        if (!strcmp(o, "--skip-bad")) {
            a->opt.on_error = MANIFEST_ON_ERROR_SKIP;
            continue;
        }
        if (!embed && !strcmp(o, "--no-choices")) {
            a->opt.choices = 0;
            continue;
        }
        static const char *const common[] = {"--model", "--data", "--batch-size",
                                             "--max-records", "--max-length", "--image-key",
                                             "--caption-key", "--workers", "--cache-mb",
                                             "--precision", "--threads", NULL};
        static const char *const eval_only[] = {"--json", "--itm-rerank", "--choice-score", NULL};
        static const char *const embed_only[] = {"--output", NULL};
        int known = 0;
        for (int k = 0; common[k] && !known; k++)
            known = !strcmp(o, common[k]);
        for (int k = 0; !embed && eval_only[k] && !known; k++)
            known = !strcmp(o, eval_only[k]);
        for (int k = 0; embed && embed_only[k] && !known; k++)
            known = !strcmp(o, embed_only[k]);
        if (!known) {
            fprintf(stderr, "%s: unknown option '%s'\n", who, o);
            return 0;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "%s: %s needs a value\n", who, o);
            return 0;
        }
        const char *v = argv[++i];
        bt_status st = BT_OK;
        int64_t n = 0;
        if (!strcmp(o, "--model"))
            a->model = v;
        else if (!strcmp(o, "--data"))
            a->data = v;
        else if (!strcmp(o, "--json"))
            a->json = v;
        else if (!strcmp(o, "--output"))
            a->output = v;
        else if (!strcmp(o, "--image-key"))
            a->mo_image_key = v;
        else if (!strcmp(o, "--caption-key"))
            a->mo_caption_key = v;
        else if (!strcmp(o, "--batch-size")) {
            st = bt_parse_int(o, v, 1, 65536, &a->opt.batch_size);
            a->batch_size_set = 1;
        }
        else if (!strcmp(o, "--max-records")) {
            st = bt_parse_i64(o, v, 1, INT64_MAX, &n);
            a->opt.max_records = (size_t)n;
        } else if (!strcmp(o, "--max-length"))
            st = bt_parse_int(o, v, 2, 65536, &a->opt.max_length);
        else if (!strcmp(o, "--workers"))
            st = bt_parse_int(o, v, 1, 256, &a->opt.num_workers);
        else if (!strcmp(o, "--cache-mb")) {
            st = bt_parse_i64(o, v, 0, (int64_t)1 << 30, &n);
            a->opt.cache_bytes = (size_t)n << 20;
        } else if (!strcmp(o, "--threads"))
            st = bt_parse_int(o, v, 1, 4096, &a->threads);
        else if (!strcmp(o, "--itm-rerank"))
            st = bt_parse_int(o, v, 0, 1 << 20, &a->opt.itm_rerank_k);
        else if (!strcmp(o, "--precision")) {
            if (!strcmp(v, "fp32"))
                a->precision = BT_PRECISION_FP32;
            else if (!strcmp(v, "bf16"))
                a->precision = BT_PRECISION_BF16;
            else
                st = bt_fail(BT_ERR_ARG, "--precision: expected fp32 or bf16, got '%s'", v);
        } else if (!strcmp(o, "--choice-score")) {
            if (!strcmp(v, "itc"))
                a->opt.choice_score = BT_EVAL_CHOICE_ITC;
            else if (!strcmp(v, "itm"))
                a->opt.choice_score = BT_EVAL_CHOICE_ITM;
            else
                st = bt_fail(BT_ERR_ARG, "--choice-score: expected itc or itm, got '%s'", v);
        }
        if (st != BT_OK) {
            fprintf(stderr, "%s: %s\n", who, bt_error_message());
            return 0;
        }
    }
    if (!a->model || !a->data || (embed && !a->output)) {
        fprintf(stderr, "%s: --model, --data%s are required\n", who, embed ? " and --output" : "");
        return 0;
    }
    return 1;
}

int bt_eval_cli_parse(bt_eval_cli_args *a, int argc, char **argv, int embed) {
    if (!cli_parse(a, argc, argv, embed)) {
        bt_eval_cli_usage(stderr, embed);
        return 0;
    }
#ifdef _OPENMP
    if (a->threads) omp_set_num_threads(a->threads);
#endif
    return 1;
}

/* The eval batch size of the run that wrote the model directory: the batch_size of its
 * eval_results.json (bt-train writes it, with the eval.batch_size it evaluated at), so that
 * bt-eval without flags repeats bt-train's final evaluation (the eval loss is a mean of
 * per-batch losses). No file (or one without the key, as HF's): *bs is left as it is. */
static bt_status default_batch_size(const char *model_dir, int *bs) {
    char path[4200];
    snprintf(path, sizeof path, "%s/eval_results.json", model_dir);
    struct stat sb;
    if (stat(path, &sb) != 0) return BT_OK;
    cJSON *root;
    bt_status st = bt_json_load(path, "evaluation results", &root);
    if (st != BT_OK) return st;
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(root, "batch_size");
    int64_t v;
    if (b && !bt_json_int_in(b, 1, 65536, &v))
        st = bt_fail(BT_ERR_FORMAT, "%s: key 'batch_size' must be an integer in [1, 65536] "
                     "(or pass --batch-size)", path);
    else if (b)
        *bs = (int)v;
    cJSON_Delete(root);
    return st;
}

bt_status bt_eval_cli_setup(bt_eval_setup *s, bt_eval_cli_args *a, int embed) {
    const char *who = embed ? "bt-embed" : "bt-eval";
    memset(s, 0, sizeof *s); /* bt_eval_setup_close works on it whatever fails below */
    /* under ulimit -v: room for the threads and the GEMM libraries before they start (mem.h;
     * a message and exit 1, as bt-train) */
#ifdef _OPENMP
    const int threads = omp_get_max_threads();
#else
    const int threads = 1;
#endif
    bt_status rt = bt_mem_check_runtime(who, threads + 1);
    if (rt != BT_OK) return rt;
    unsigned heads = BT_HEADS_ITC;
    if (!embed && (a->opt.itm_rerank_k > 0 ||
                   (a->opt.choices && a->opt.choice_score == BT_EVAL_CHOICE_ITM)))
        heads |= BT_HEADS_ITM;
    if (embed) a->opt.choices = 0, a->opt.keep_embeddings = 1;
    manifest_options mo = manifest_options_default();
    if (a->mo_image_key) mo.image_key = a->mo_image_key;
    if (a->mo_caption_key) mo.caption_key = a->mo_caption_key;
    mo.on_error = a->opt.on_error;
    bt_status st = bt_eval_setup_open(s, a->model, a->data, heads, a->precision, &mo, stderr, who);
    if (st != BT_OK) return st;
    for (size_t i = 0; i < s->man.n_skipped; i++)
        fprintf(stderr, "%s: skipped: %s\n", who, s->man.problems[i]);
    if (a->opt.max_length == 0) a->opt.max_length = s->max_length;
    if (!a->batch_size_set) {
        st = default_batch_size(a->model, &a->opt.batch_size);
        if (st != BT_OK) return st;
    }
    const int tmax = bt_model_config_max_text(&s->model.cfg);
    if (a->opt.max_length > tmax)
        return bt_fail(BT_ERR_ARG, "--max-length %d: the model at %s takes at most %d tokens "
                       "(max_position_embeddings - pad_token_id - 1)",
                       a->opt.max_length, a->model, tmax);
    a->opt.progress = stderr;
    return BT_OK;
}
