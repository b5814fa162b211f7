/* metrics.c: retrieval ranks, recall@K, mean/median rank, ITM re-ranking of the top k and
 * multiple-choice accuracy (contracts and the tie rule in metrics.h).
 *
 * Cost: ranks are O(nq * nc) (one pass per query, no sort); top-k is O(nq * nc * k') in the
 * worst case by insertion into a sorted list of k' entries (k' is small: 10-128).
 *
 * Deliberately not here: where the scores come from (eval.c). */
#include "train/metrics.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

bt_score_view bt_scores_text_to_image(const float *s, size_t nt, size_t ni) {
    return (bt_score_view){.s = s, .nq = nt, .nc = ni, .q_stride = ni, .c_stride = 1,
                           .what = "text->image scores"};
}

bt_score_view bt_scores_image_to_text(const float *s, size_t nt, size_t ni) {
    return (bt_score_view){.s = s, .nq = ni, .nc = nt, .q_stride = 1, .c_stride = ni,
                           .what = "image->text scores"};
}

static inline float score_at(const bt_score_view *v, size_t q, size_t c) {
    return v->s[q * v->q_stride + c * v->c_stride];
}

static const char *view_name(const bt_score_view *v) {
    return v->what ? v->what : "scores";
}

/* Checks query q's scores and finds its best right score. */
static bt_status query_best_right(const bt_score_view *v, const int64_t *q_key,
                                  const int64_t *c_key, size_t q, float *best) {
    int found = 0;
    float b = 0.0f;
    for (size_t c = 0; c < v->nc; c++) {
        float s = score_at(v, q, c);
        if (!isfinite(s))
            return bt_fail(BT_ERR_NUMERIC, "%s: query %zu, candidate %zu: score %g is not finite",
                           view_name(v), q, c, (double)s);
        if (c_key[c] == q_key[q] && (!found || s > b)) {
            b = s;
            found = 1;
        }
    }
    if (!found)
        return bt_fail(BT_ERR_ARG,
                       "%s: query %zu (key %lld) has no right candidate among %zu; every query "
                       "needs at least one candidate with its key",
                       view_name(v), q, (long long)q_key[q], v->nc);
    *best = b;
    return BT_OK;
}

bt_status bt_retrieval_ranks(const bt_score_view *v, const int64_t *q_key, const int64_t *c_key,
                             int64_t *ranks) {
    for (size_t q = 0; q < v->nq; q++) {
        float best;
        bt_status st = query_best_right(v, q_key, c_key, q, &best);
        if (st != BT_OK) return st;
        int64_t r = 1;
        for (size_t c = 0; c < v->nc; c++)
            r += c_key[c] != q_key[q] && score_at(v, q, c) >= best;
        ranks[q] = r;
    }
    return BT_OK;
}

double bt_recall_at(const int64_t *ranks, size_t n, int64_t k) {
    if (n == 0) return 0.0;
    size_t hit = 0;
    for (size_t i = 0; i < n; i++)
        hit += ranks[i] <= k;
    return (double)hit / (double)n;
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

void bt_retrieval_summarize(const int64_t *ranks, size_t n, bt_retrieval_metrics *out) {
    memset(out, 0, sizeof *out);
    out->n = n;
    if (n == 0) return;
    out->r1 = bt_recall_at(ranks, n, 1);
    out->r5 = bt_recall_at(ranks, n, 5);
    out->r10 = bt_recall_at(ranks, n, 10);
    double sum = 0.0;
    for (size_t i = 0; i < n; i++)
        sum += (double)ranks[i];
    out->mean_rank = sum / (double)n;
    int64_t *sorted = malloc(n * sizeof *sorted);
    BT_ASSERT(sorted);
    memcpy(sorted, ranks, n * sizeof *sorted);
    qsort(sorted, n, sizeof *sorted, cmp_i64);
    out->median_rank = n % 2 ? (double)sorted[n / 2]
                             : 0.5 * ((double)sorted[n / 2 - 1] + (double)sorted[n / 2]);
    free(sorted);
}

/* 1 when candidate a (score sa, right ra) comes before b in the ITC order. */
static inline int before(float sa, int ra, size_t a, float sb, int rb, size_t b) {
    if (sa != sb) return sa > sb;
    if (ra != rb) return !ra; /* wrong before right */
    return a < b;
}

bt_status bt_retrieval_topk(const bt_score_view *v, const int64_t *q_key, const int64_t *c_key,
                            size_t k, int64_t *top) {
    const size_t kk = k < v->nc ? k : v->nc;
    if (kk == 0) return BT_OK;
    for (size_t q = 0; q < v->nq; q++) {
        float best;
        bt_status st = query_best_right(v, q_key, c_key, q, &best); /* checks the scores */
        if (st != BT_OK) return st;
        int64_t *t = top + q * kk;
        size_t n = 0;
        for (size_t c = 0; c < v->nc; c++) {
            const float s = score_at(v, q, c);
            const int r = c_key[c] == q_key[q];
            if (n == kk) {
                size_t l = (size_t)t[kk - 1];
                if (!before(s, r, c, score_at(v, q, l), c_key[l] == q_key[q], l)) continue;
                n--;
            }
            size_t j = n++;
            while (j > 0) {
                size_t p = (size_t)t[j - 1];
                if (!before(s, r, c, score_at(v, q, p), c_key[p] == q_key[q], p)) break;
                t[j] = t[j - 1];
                j--;
            }
            t[j] = (int64_t)c;
        }
    }
    return BT_OK;
}

bt_status bt_retrieval_rerank_ranks(const bt_score_view *v, const int64_t *q_key,
                                    const int64_t *c_key, size_t k, const int64_t *top,
                                    const float *rerank, int64_t *ranks) {
    const size_t kk = k < v->nc ? k : v->nc;
    bt_status st = bt_retrieval_ranks(v, q_key, c_key, ranks);
    if (st != BT_OK) return st;
    for (size_t q = 0; q < v->nq; q++) {
        const int64_t *t = top + q * kk;
        const float *rr = rerank + q * kk;
        int found = 0;
        float best = 0.0f;
        for (size_t j = 0; j < kk; j++) {
            BT_ASSERT(t[j] >= 0 && (size_t)t[j] < v->nc);
            if (!isfinite(rr[j]))
                return bt_fail(BT_ERR_NUMERIC,
                               "%s: re-ranking score of query %zu, candidate %lld is %g; "
                               "expected a finite number",
                               view_name(v), q, (long long)t[j], (double)rr[j]);
            if (c_key[t[j]] == q_key[q] && (!found || rr[j] > best)) {
                best = rr[j];
                found = 1;
            }
        }
        /* No right candidate in the top k: the top k are all wrong and come first, the rest
         * keeps its ITC order, so the ITC rank stands. */
        if (!found) continue;
        int64_t r = 1;
        for (size_t j = 0; j < kk; j++)
            r += c_key[t[j]] != q_key[q] && rr[j] >= best;
        ranks[q] = r;
    }
    return BT_OK;
}

bt_status bt_choice_accuracy(const float *scores, size_t n, size_t n_choices,
                             const int32_t *labels, const char *what, double *accuracy,
                             size_t *n_scored) {
    size_t scored = 0, correct = 0;
    if (!what) what = "choice scores";
    for (size_t i = 0; i < n; i++) {
        const int32_t y = labels[i];
        if (y == -1) continue;
        if (y < -1 || (size_t)y >= n_choices)
            return bt_fail(BT_ERR_ARG, "%s: row %zu: label %d; expected -1 or 0..%zu", what, i,
                           (int)y, n_choices - 1);
        const float *s = scores + i * n_choices;
        int ok = 1;
        for (size_t j = 0; j < n_choices; j++) {
            if (!isfinite(s[j]))
                return bt_fail(BT_ERR_NUMERIC, "%s: row %zu, choice %zu: score %g is not finite",
                               what, i, j, (double)s[j]);
            if (j != (size_t)y && s[j] >= s[y]) ok = 0;
        }
        scored++;
        correct += ok;
    }
    *n_scored = scored;
    *accuracy = scored ? (double)correct / (double)scored : 0.0;
    return BT_OK;
}
