/* test_metrics.c: the retrieval and multiple-choice metrics of src/train/metrics.h on cases
 * whose answers are known by construction, plus a randomized cross-check against an
 * explicit-sort reference written here.
 *
 * Known by construction:
 *   - identity similarity: every query's right candidate scores 1, the others 0: R@1 = 1,
 *     mean and median rank 1 both ways;
 *   - "reversed": score(t, i) = i for every text: text t has N-1-t wrong images above it,
 *     rank N-t (mean (N+1)/2, R@K = K/N); every image query sees all its texts tied, so the
 *     pessimistic rule gives rank N to each;
 *   - shared images (several images with one key) and a query without a right candidate
 *     (an error naming it), ranks worked out by hand in the comments;
 *   - ties: all-equal scores give rank 1 + #wrong;
 *   - k larger than the candidate count, re-ranking with known ITM scores;
 *   - NaN / Inf scores and bad labels are errors naming the element.
 * Randomized: ranks, top-k and re-ranked ranks against a reference that SORTS the candidates
 * (qsort with the documented total order) and reads the position of the first right one,
 * on matrices with heavy ties (scores on 4 levels) and shared keys. Exact integers: no
 * tolerance is involved. Also bt_eval_result_scalars (the names and values the trainer logs)
 * on a hand-made result. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#include "train/eval.h"
#include "train/metrics.h"

static void check_summary(const char *name, const int64_t *ranks, size_t n, double r1, double r5,
                          double r10, double mean, double median) {
    bt_retrieval_metrics m;
    bt_retrieval_summarize(ranks, n, &m);
    tu_check(m.n == n && fabs(m.r1 - r1) < 1e-12 && fabs(m.r5 - r5) < 1e-12 &&
                 fabs(m.r10 - r10) < 1e-12 && fabs(m.mean_rank - mean) < 1e-12 &&
                 fabs(m.median_rank - median) < 1e-12,
             "%s: R@1 %.4f R@5 %.4f R@10 %.4f mean %.3f median %.2f (want %.4f %.4f %.4f %.3f "
             "%.2f)",
             name, m.r1, m.r5, m.r10, m.mean_rank, m.median_rank, r1, r5, r10, mean, median);
}

static int ranks_equal(const int64_t *a, const int64_t *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i]) return 0;
    return 1;
}

static void test_identity(void) {
    enum { N = 7 };
    float s[N * N];
    int64_t key[N], rt[N], ri[N];
    for (int t = 0; t < N; t++) {
        key[t] = t;
        for (int i = 0; i < N; i++)
            s[t * N + i] = t == i ? 1.0f : 0.0f;
    }
    bt_score_view t2i = bt_scores_text_to_image(s, N, N), i2t = bt_scores_image_to_text(s, N, N);
    tu_check(bt_retrieval_ranks(&t2i, key, key, rt) == BT_OK &&
                 bt_retrieval_ranks(&i2t, key, key, ri) == BT_OK,
             "identity: ranks computed");
    check_summary("identity text->image", rt, N, 1, 1, 1, 1, 1);
    check_summary("identity image->text", ri, N, 1, 1, 1, 1, 1);
}

static void test_reversed(void) {
    enum { N = 12 };
    float s[N * N];
    int64_t key[N], rt[N], ri[N], want[N];
    for (int t = 0; t < N; t++) {
        key[t] = t;
        want[t] = N - t;
        for (int i = 0; i < N; i++)
            s[t * N + i] = (float)i;
    }
    bt_score_view t2i = bt_scores_text_to_image(s, N, N), i2t = bt_scores_image_to_text(s, N, N);
    bt_retrieval_ranks(&t2i, key, key, rt);
    bt_retrieval_ranks(&i2t, key, key, ri);
    tu_check(ranks_equal(rt, want, N), "reversed text->image: rank of text t is N-t");
    /* ranks N-t for t = 0..11: 12..1; sorted 1..12, median (6+7)/2 */
    check_summary("reversed text->image", rt, N, 1.0 / N, 5.0 / N, 10.0 / N, (N + 1) / 2.0, 6.5);
    int all_n = 1;
    for (int i = 0; i < N; i++)
        all_n &= ri[i] == N;
    tu_check(all_n, "reversed image->text: every query ties with all texts: rank N (pessimistic)");
    check_summary("reversed image->text", ri, N, 0, 0, 0, N, N);
}

static void test_shared_images(void) {
    /* 3 texts, 4 images; keys: texts {10, 20, 10}, images {10, 20, 10, 30}.
     *   t0: [0.1 0.9 0.5 0.2] right i0, i2 (best 0.5); wrong >= 0.5: i1 -> rank 2
     *   t1: [0.3 0.2 0.8 0.1] right i1 (0.2); wrong >= 0.2: i0, i2 -> rank 3
     *   t2: [0.7 0.1 0.0 0.6] right i0, i2 (best 0.7); none above -> rank 1 */
    const float s[12] = {0.1f, 0.9f, 0.5f, 0.2f, 0.3f, 0.2f, 0.8f, 0.1f, 0.7f, 0.1f, 0.0f, 0.6f};
    const int64_t tk[3] = {10, 20, 10}, ik[4] = {10, 20, 10, 30};
    int64_t r[4];
    bt_score_view t2i = bt_scores_text_to_image(s, 3, 4);
    const int64_t want_t[3] = {2, 3, 1};
    bt_status st = bt_retrieval_ranks(&t2i, tk, ik, r);
    tu_check(st == BT_OK && ranks_equal(r, want_t, 3),
             "shared images text->image: ranks 2 3 1 (got %lld %lld %lld)", (long long)r[0],
             (long long)r[1], (long long)r[2]);
    /* image->text on the first 3 images (same matrix, columns 0..2, row stride 4):
     *   i0: [0.1 0.3 0.7] right t0, t2 (best 0.7) -> 1;  i1: [0.9 0.2 0.1] right t1 (0.2),
     *   t0 above -> 2;  i2: [0.5 0.8 0.0] right t0, t2 (best 0.5), t1 above -> 2 */
    bt_score_view i2t = bt_scores_image_to_text(s, 3, 4);
    i2t.nq = 3;
    const int64_t want_i[3] = {1, 2, 2};
    tu_check(bt_retrieval_ranks(&i2t, ik, tk, r) == BT_OK && ranks_equal(r, want_i, 3),
             "shared images image->text: ranks 1 2 2");
    i2t.nq = 4; /* image 3 (key 30) has no text */
    st = bt_retrieval_ranks(&i2t, ik, tk, r);
    tu_check(st == BT_ERR_ARG && strstr(bt_error_message(), "query 3 (key 30)") &&
                 strstr(bt_error_message(), "image->text"),
             "query without a right candidate: error naming it (%s)", bt_error_message());
}

static void test_ties(void) {
    enum { N = 5 };
    float s[N * N];
    int64_t key[N], r[N];
    for (int i = 0; i < N * N; i++)
        s[i] = 0.25f;
    for (int i = 0; i < N; i++)
        key[i] = i;
    bt_score_view t2i = bt_scores_text_to_image(s, N, N);
    bt_retrieval_ranks(&t2i, key, key, r);
    int ok = 1;
    for (int i = 0; i < N; i++)
        ok &= r[i] == N;
    tu_check(ok, "all scores equal: every rank is 1 + #wrong = %d", N);
    /* one tie: t0 [1 1 0] with right i0: the wrong i1 ties and goes first -> 2 */
    const float s2[3] = {1.0f, 1.0f, 0.0f};
    const int64_t qk[1] = {0}, ck[3] = {0, 1, 2};
    bt_score_view v = bt_scores_text_to_image(s2, 1, 3);
    bt_retrieval_ranks(&v, qk, ck, r);
    tu_check(r[0] == 2, "a tie with one wrong candidate: rank 2 (got %lld)", (long long)r[0]);
    int64_t top[3];
    bt_retrieval_topk(&v, qk, ck, 3, top);
    tu_check(top[0] == 1 && top[1] == 0 && top[2] == 2,
             "top-k order puts the tied wrong candidate first: 1 0 2");
}

static void test_summary_values(void) {
    const int64_t r[4] = {10, 1, 3, 2};
    check_summary("ranks {10,1,3,2}", r, 4, 0.25, 0.75, 1.0, 4.0, 2.5);
    const int64_t r3[3] = {7, 1, 30};
    check_summary("ranks {7,1,30}", r3, 3, 1.0 / 3, 1.0 / 3, 2.0 / 3, 38.0 / 3, 7);
    tu_check(bt_recall_at(r3, 3, 100) == 1.0 && bt_recall_at(r3, 0, 1) == 0.0,
             "recall@100 of 3 ranks is 1; of none is 0");
}

static void test_topk_rerank(void) {
    /* One query, ITC [0.9 0.8 0.7 0.6 0.5], right = c3 (ITC rank 4). */
    const float s[5] = {0.9f, 0.8f, 0.7f, 0.6f, 0.5f};
    const int64_t qk[1] = {3}, ck[5] = {0, 1, 2, 3, 4};
    bt_score_view v = bt_scores_text_to_image(s, 1, 5);
    int64_t top[5], r[1];
    bt_retrieval_topk(&v, qk, ck, 2, top);
    const float rr2[2] = {0.0f, 5.0f};
    bt_retrieval_rerank_ranks(&v, qk, ck, 2, top, rr2, r);
    tu_check(top[0] == 0 && top[1] == 1 && r[0] == 4,
             "re-rank top 2 without the right candidate: ITC rank 4 stands (got %lld)",
             (long long)r[0]);
    bt_retrieval_topk(&v, qk, ck, 4, top);
    const float rr4[4] = {0.1f, 0.5f, 0.2f, 0.4f};
    bt_retrieval_rerank_ranks(&v, qk, ck, 4, top, rr4, r);
    tu_check(r[0] == 2, "re-rank top 4: ITM puts c1 (0.5) above the right c3 (0.4): rank 2");
    const float rr4t[4] = {0.1f, 0.4f, 0.2f, 0.4f};
    bt_retrieval_rerank_ranks(&v, qk, ck, 4, top, rr4t, r);
    tu_check(r[0] == 2, "re-rank tie with a wrong candidate: rank 2 (pessimistic)");
    const float rr4w[4] = {0.1f, 0.1f, 0.1f, 0.9f};
    bt_retrieval_rerank_ranks(&v, qk, ck, 4, top, rr4w, r);
    tu_check(r[0] == 1, "re-rank top 4: ITM puts the right candidate first: rank 1");
    /* k larger than the candidate count: clipped to 5 */
    int64_t topk[5];
    memset(topk, 0xff, sizeof topk);
    tu_check(bt_retrieval_topk(&v, qk, ck, 100, topk) == BT_OK && topk[0] == 0 && topk[4] == 4,
             "top-100 of 5 candidates: all 5 in ITC order");
    const float rr5[5] = {0.0f, 0.0f, 0.0f, 0.0f, 1.0f};
    bt_retrieval_rerank_ranks(&v, qk, ck, 100, topk, rr5, r);
    tu_check(r[0] == 5, "re-rank with k > N: full ITM order, the right c3 ties with 3 wrong and loses to c4: rank 5");
    int64_t r1[1];
    bt_retrieval_ranks(&v, qk, ck, r1);
    tu_check(r1[0] == 4 && bt_recall_at(r1, 1, 10) == 1.0,
             "R@10 with 5 candidates: rank 4 <= 10 counts");
    const float rr_nan[5] = {0.0f, NAN, 0.0f, 0.0f, 0.0f};
    bt_status st = bt_retrieval_rerank_ranks(&v, qk, ck, 100, topk, rr_nan, r);
    tu_check(st == BT_ERR_NUMERIC && strstr(bt_error_message(), "candidate 1"),
             "NaN re-ranking score: error naming the candidate (%s)", bt_error_message());
}

static void test_nan(void) {
    float s[6] = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f};
    const int64_t k3[3] = {0, 1, 2}, k2[2] = {0, 1};
    int64_t r[3], top[6];
    s[4] = NAN; /* text 1, image 1 */
    bt_score_view t2i = bt_scores_text_to_image(s, 2, 3);
    bt_status st = bt_retrieval_ranks(&t2i, k2, k3, r);
    tu_check(st == BT_ERR_NUMERIC && strstr(bt_error_message(), "query 1, candidate 1"),
             "NaN score: ranks fail naming it (%s)", bt_error_message());
    st = bt_retrieval_topk(&t2i, k2, k3, 2, top);
    tu_check(st == BT_ERR_NUMERIC, "NaN score: top-k fails");
    s[4] = INFINITY;
    tu_check(bt_retrieval_ranks(&t2i, k2, k3, r) == BT_ERR_NUMERIC, "Inf score: ranks fail");
}

static void test_choices(void) {
    /* row 0: label 0 is the max -> right; row 1: label 3 ties with choice 1 -> wrong;
     * row 2: unlabelled (its NaN is not looked at); row 3: label 2 max -> right */
    const float s[20] = {0.9f, 0.1f, 0.2f, 0.3f, 0.4f, 0.0f, 0.7f, 0.1f, 0.7f, 0.2f,
                         NAN,  0.0f, 0.0f, 0.0f, 0.0f, 0.1f, 0.2f, 0.8f, 0.3f, 0.4f};
    const int32_t y[4] = {0, 3, -1, 2};
    double acc = -1;
    size_t n = 0;
    bt_status st = bt_choice_accuracy(s, 4, 5, y, "test", &acc, &n);
    tu_check(st == BT_OK && n == 3 && fabs(acc - 2.0 / 3.0) < 1e-15,
             "5-way: 2 of 3 labelled rows right, the tie counts as wrong (acc %.4f, n %zu)", acc,
             n);
    const int32_t bad[1] = {5};
    st = bt_choice_accuracy(s, 1, 5, bad, "val choices", &acc, &n);
    tu_check(st == BT_ERR_ARG && strstr(bt_error_message(), "val choices: row 0: label 5"),
             "label 5 of 5 choices: error (%s)", bt_error_message());
    const int32_t y2[1] = {0};
    st = bt_choice_accuracy(s + 10, 1, 5, y2, "val choices", &acc, &n);
    tu_check(st == BT_ERR_NUMERIC && strstr(bt_error_message(), "choice 0"),
             "NaN choice score of a labelled row: error (%s)", bt_error_message());
    const int32_t none[2] = {-1, -1};
    st = bt_choice_accuracy(s, 2, 5, none, "x", &acc, &n);
    tu_check(st == BT_OK && n == 0 && acc == 0.0, "no labelled row: n_scored 0");
}

/* --- randomized cross-check against an explicit sort ---------------------------------------- */

typedef struct ref_item {
    float s, s2; /* ITC score; re-rank score */
    int right;
    int64_t c;   /* candidate index */
    int64_t pos; /* position in the ITC order */
} ref_item;

static int cmp_itc(const void *pa, const void *pb) {
    const ref_item *a = pa, *b = pb;
    if (a->s != b->s) return a->s > b->s ? -1 : 1;
    if (a->right != b->right) return a->right ? 1 : -1;
    return (a->c > b->c) - (a->c < b->c);
}

static int cmp_rerank(const void *pa, const void *pb) {
    const ref_item *a = pa, *b = pb;
    if (a->s2 != b->s2) return a->s2 > b->s2 ? -1 : 1;
    if (a->right != b->right) return a->right ? 1 : -1;
    return (a->pos > b->pos) - (a->pos < b->pos);
}

static void test_random(void) {
    tu_rng rng;
    tu_rng_seed(&rng, 20261124);
    int fails_rank = 0, fails_top = 0, fails_rr = 0, cases = 0;
    for (int trial = 0; trial < 40; trial++) {
        size_t nt = 1 + tu_rng_next(&rng) % 23, ni = 1 + tu_rng_next(&rng) % 17;
        size_t k = 1 + tu_rng_next(&rng) % 20; /* sometimes > ni */
        float *s = malloc(nt * ni * sizeof *s), *rr = malloc(nt * ni * sizeof *rr);
        int64_t *tk = malloc(nt * sizeof *tk), *ik = malloc(ni * sizeof *ik);
        int64_t *r = malloc(nt * sizeof *r), *r2 = malloc(nt * sizeof *r2);
        int64_t *top = malloc(nt * ni * sizeof *top);
        ref_item *it = malloc(ni * sizeof *it);
        /* image keys from a few groups (shared images); every text gets an existing key */
        size_t groups = 1 + tu_rng_next(&rng) % ni;
        for (size_t i = 0; i < ni; i++)
            ik[i] = (int64_t)(i < groups ? i : tu_rng_next(&rng) % groups);
        for (size_t t = 0; t < nt; t++)
            tk[t] = (int64_t)(tu_rng_next(&rng) % groups);
        for (size_t x = 0; x < nt * ni; x++) {
            s[x] = (float)(tu_rng_next(&rng) % 4) * 0.25f; /* 4 levels: many ties */
            rr[x] = (float)(tu_rng_next(&rng) % 3);
        }
        bt_score_view v = bt_scores_text_to_image(s, nt, ni);
        const size_t kk = k < ni ? k : ni;
        if (bt_retrieval_ranks(&v, tk, ik, r) != BT_OK ||
            bt_retrieval_topk(&v, tk, ik, k, top) != BT_OK ||
            bt_retrieval_rerank_ranks(&v, tk, ik, k, top, rr, r2) != BT_OK) {
            tu_check(0, "random trial %d: unexpected error %s", trial, bt_error_message());
            continue;
        }
        for (size_t t = 0; t < nt; t++) {
            for (size_t i = 0; i < ni; i++)
                it[i] = (ref_item){.s = s[t * ni + i], .right = ik[i] == tk[t], .c = (int64_t)i};
            qsort(it, ni, sizeof *it, cmp_itc);
            int64_t want = 0;
            for (size_t j = 0; j < ni && !want; j++)
                if (it[j].right) want = (int64_t)j + 1;
            fails_rank += r[t] != want;
            for (size_t j = 0; j < kk; j++)
                fails_top += top[t * kk + j] != it[j].c;
            /* re-rank: the first kk by rr (scores indexed by top position), rest as is */
            for (size_t j = 0; j < ni; j++)
                it[j].pos = (int64_t)j;
            for (size_t j = 0; j < kk; j++)
                it[j].s2 = rr[t * kk + j];
            qsort(it, kk, sizeof *it, cmp_rerank);
            int64_t want2 = 0;
            for (size_t j = 0; j < ni && !want2; j++)
                if (it[j].right) want2 = (int64_t)j + 1;
            fails_rr += r2[t] != want2;
            cases++;
        }
        free(s);
        free(rr);
        free(tk);
        free(ik);
        free(r);
        free(r2);
        free(top);
        free(it);
    }
    tu_check(fails_rank == 0, "random: ranks equal the explicit sort's on %d queries (%d differ)",
             cases, fails_rank);
    tu_check(fails_top == 0, "random: top-k lists equal the explicit sort's (%d differ)",
             fails_top);
    tu_check(fails_rr == 0, "random: re-ranked ranks equal the explicit sort's (%d differ)",
             fails_rr);
}

/* bt_eval_result_scalars: the flat names and values the trainer logs, from a hand-made
 * result (every field a distinct value, so a swapped pair shows). */
static void test_eval_scalars(void) {
    bt_eval_result r;
    memset(&r, 0, sizeof r);
    r.loss = 1.5;
    r.t2i = (bt_retrieval_metrics){.n = 3, .r1 = 0.1, .r5 = 0.2, .r10 = 0.3, .mean_rank = 4,
                                   .median_rank = 5};
    r.i2t = (bt_retrieval_metrics){.n = 3, .r1 = 0.6, .r5 = 0.7, .r10 = 0.8, .mean_rank = 9,
                                   .median_rank = 10};
    const char *names[32];
    double v[32];
    size_t n = bt_eval_result_scalars(&r, names, v, 32);
    tu_check(n == 11 && !strcmp(names[0], "eval/loss") && v[0] == 1.5 &&
                 !strcmp(names[1], "eval/t2i_r1") && v[1] == 0.1 &&
                 !strcmp(names[5], "eval/t2i_median_rank") && v[5] == 5 &&
                 !strcmp(names[6], "eval/i2t_r1") && v[6] == 0.6 &&
                 !strcmp(names[9], "eval/i2t_mean_rank") && v[9] == 9,
             "eval scalars without re-ranking or choices: loss + 2 x 5 retrieval (%zu)", n);
    r.has_rerank = 1;
    r.t2i_rerank.r1 = 0.25;
    r.has_choices = 1;
    r.choice_accuracy = 0.75;
    n = bt_eval_result_scalars(&r, names, v, 32);
    tu_check(n == 22 && !strcmp(names[11], "eval/t2i_itm_r1") && v[11] == 0.25 &&
                 !strcmp(names[21], "eval/choice_acc") && v[21] == 0.75,
             "eval scalars with re-ranking and choices: 22, ITM and choice accuracy last (%zu)",
             n);
    tu_check(bt_eval_result_scalars(&r, names, v, 2) == 22 && !strcmp(names[1], "eval/t2i_r1"),
             "eval scalars: the count is returned when cap is smaller, cap entries written");
}

int main(void) {
    test_identity();
    test_reversed();
    test_shared_images();
    test_ties();
    test_summary_values();
    test_topk_rerank();
    test_nan();
    test_choices();
    test_random();
    test_eval_scalars();
    return tu_finish();
}
