/* metrics.h: retrieval and multiple-choice metrics from score matrices (docs/evaluation.md).
 *
 * Retrieval. A score matrix S is (Nt, Ni): texts by images (ITC cosine similarities). A query
 * is a text (text->image, the rows) or an image (image->text, the columns); its candidates
 * are the other side. Ground truth is given by integer KEYS, one per text and one per image:
 * a candidate is RIGHT for a query when their keys are equal. With images deduplicated the
 * image key is the image's index and a text's key is the index of its image; without
 * deduplication, records that share an image file share a key, so retrieving any copy of the
 * right picture counts (the New Yorker set repeats ~700 cartoons over ~10k rows).
 *
 * Order and ties (deterministic, pessimistic). The candidates of a query are ordered by
 *   1. score, descending;
 *   2. among equal scores, WRONG candidates before RIGHT ones;
 *   3. then by candidate index, ascending.
 * The rank of a query is the 1-based position of its first right candidate in that order,
 *   rank = 1 + #{wrong c : score(c) >= max score over right candidates},
 * so a tie with a wrong candidate always counts against the model: a collapsed model whose
 * scores are all equal gets rank = 1 + #wrong for every query, never a lucky rank 1.
 * Recall@K = fraction of queries with rank <= K (K larger than the candidate count gives 1);
 * mean rank and median rank (the mean of the two middle ranks when the count is even) over
 * the queries.
 *
 * ITM re-ranking of the top k (BridgeTower / ViLT evaluation): the first k candidates of
 * the order above are re-ordered by a second score (the ITM match logit), descending, with
 * the same tie rule (wrong before right, then by ITC position); the other candidates keep
 * their ITC order after them. k is clipped to the candidate count.
 *
 * Multiple choice (New Yorker matching, 5 captions per image): a row is correct when the
 * labelled choice scores strictly above every other choice (a tie counts as wrong, the
 * same pessimistic rule). Rows with label -1 (unlabelled) are not scored.
 *
 * Errors (bt_status, message naming the matrix, the query / row and the element): a NaN or
 * infinite score, a query without any right candidate, a label outside [-1, n_choices).
 *
 * Deliberately not here: computing embeddings or scores (eval.h), recall@K for K other than
 * 1, 5, 10 in the summary (bt_recall_at computes any K from the ranks), averaging over
 * several right candidates (only the first right one counts, as in CLIP/ViLT evaluations). */
#ifndef BT_TRAIN_METRICS_H
#define BT_TRAIN_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

/* A query-by-candidate view of a score matrix: score(q, c) = s[q*q_stride + c*c_stride]. */
typedef struct bt_score_view {
    const float *s;
    size_t nq, nc;
    size_t q_stride, c_stride;
    const char *what; /* names the matrix in messages ("text->image ITC scores") */
} bt_score_view;

/* Text->image view of an (nt, ni) row-major matrix: queries are the rows. */
bt_score_view bt_scores_text_to_image(const float *s, size_t nt, size_t ni);
/* Image->text view of the same matrix: queries are the columns. */
bt_score_view bt_scores_image_to_text(const float *s, size_t nt, size_t ni);

typedef struct bt_retrieval_metrics {
    size_t n;           /* queries */
    double r1, r5, r10; /* recall@1/5/10, fractions in [0, 1] */
    double mean_rank;   /* >= 1 */
    double median_rank;
} bt_retrieval_metrics;

/* ranks (v->nq): the rank of every query (order and ties: header comment). q_key (nq),
 * c_key (nc). Errors: a non-finite score, a query without a right candidate. */
bt_status bt_retrieval_ranks(const bt_score_view *v, const int64_t *q_key, const int64_t *c_key,
                             int64_t *ranks);

/* Fraction of the n ranks that are <= k (0 when n == 0). */
double bt_recall_at(const int64_t *ranks, size_t n, int64_t k);
/* R@1/5/10, mean and median of n ranks (all zero when n == 0). */
void bt_retrieval_summarize(const int64_t *ranks, size_t n, bt_retrieval_metrics *out);

/* The first min(k, nc) candidates of each query in the order of the header comment:
 * top (nq, min(k, nc)) candidate indices, best first. Errors as bt_retrieval_ranks. */
bt_status bt_retrieval_topk(const bt_score_view *v, const int64_t *q_key, const int64_t *c_key,
                            size_t k, int64_t *top);

/* Ranks after re-ranking the top min(k, nc) of every query (as returned by
 * bt_retrieval_topk with the same k) by rerank (nq, min(k, nc)): rerank[q*k' + j] scores
 * candidate top[q*k' + j]. Errors: a non-finite re-ranking score (naming the query and the
 * candidate), and those of bt_retrieval_ranks. */
bt_status bt_retrieval_rerank_ranks(const bt_score_view *v, const int64_t *q_key,
                                    const int64_t *c_key, size_t k, const int64_t *top,
                                    const float *rerank, int64_t *ranks);

/* Multiple-choice accuracy: scores (n, n_choices), labels (n) in [0, n_choices) or -1
 * (not scored). *accuracy = correct / scored (0 when nothing is scored), *n_scored = rows
 * with a label. `what` names the scores in messages. Errors: a non-finite score of a scored
 * row, a label outside [-1, n_choices). */
bt_status bt_choice_accuracy(const float *scores, size_t n, size_t n_choices,
                             const int32_t *labels, const char *what, double *accuracy,
                             size_t *n_scored);

#endif
