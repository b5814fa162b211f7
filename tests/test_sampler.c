/* test_sampler.c: the sampler against PyTorch's DistributedSampler and its own contract.
 *
 * - Sharding: for 288 cases (N, W, drop_last, shuffle) recorded from PyTorch itself
 *   (tests/fixtures/data/distributed_sampler.json, scripts/gen_sampler_fixture.py), feeding
 *   PyTorch's permutation to sampler_rank_indices must give PyTorch's per-rank lists exactly,
 *   and num_samples must match their length.
 * - Coverage with bt's own permutation, W in {1, 2, 3, 8}, N divisible and not: every record
 *   exactly once per epoch when W | N; with padding each record at least once and the first
 *   total_size - N of the permutation twice; with drop_last each record at most once.
 * - Determinism (same seed -> same lists), epochs and seeds differ, uniformity of the shuffle.
 * - Batching (sizes, drop_last_batch) and cursor save/load/resume = uninterrupted.
 * - Cursor errors name the key. */
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/sampler.h"
#include "test_util.h"

static void test_against_pytorch(void) {
    const char *path = tu_fixture_path("data/distributed_sampler.json");
    char *text = (char *)tu_read_file(path, NULL);
    if (!tu_check(text != NULL, "fixture %s readable", path)) return;
    cJSON *root = cJSON_Parse(text);
    free(text);
    const cJSON *cases = cJSON_GetObjectItem(root, "cases");
    int n_cases = cJSON_GetArraySize(cases), bad = 0, checked = 0;
    for (int c = 0; c < n_cases; c++) {
        const cJSON *cs = cJSON_GetArrayItem(cases, c);
        int64_t n = (int64_t)cJSON_GetObjectItem(cs, "n")->valuedouble;
        int w = (int)cJSON_GetObjectItem(cs, "world_size")->valuedouble;
        int drop = cJSON_IsTrue(cJSON_GetObjectItem(cs, "drop_last"));
        const cJSON *pj = cJSON_GetObjectItem(cs, "perm");
        int64_t *perm = malloc((size_t)n * sizeof *perm);
        for (int64_t i = 0; i < n; i++)
            perm[i] = (int64_t)cJSON_GetArrayItem(pj, (int)i)->valuedouble;
        for (int r = 0; r < w; r++) {
            sampler_options o = {.seed = 7,
                                 .rank = r,
                                 .world_size = w,
                                 .batch_size = 4,
                                 .shuffle = 1,
                                 .drop_last = drop};
            sampler s;
            if (sampler_init(&s, n, &o) != BT_OK) {
                bad++;
                continue;
            }
            const cJSON *want = cJSON_GetArrayItem(cJSON_GetObjectItem(cs, "ranks"), r);
            int64_t len = cJSON_GetArraySize(want);
            int ok = len == s.num_samples;
            int64_t *got = malloc(((size_t)s.num_samples + 1) * sizeof *got);
            sampler_rank_indices(&s, perm, got);
            for (int64_t i = 0; ok && i < len; i++)
                ok = got[i] == (int64_t)cJSON_GetArrayItem(want, (int)i)->valuedouble;
            if (!ok && bad < 5)
                printf("# mismatch: N=%" PRId64 " W=%d rank=%d drop_last=%d (len %" PRId64
                       " vs %" PRId64 ")\n",
                       n, w, r, drop, s.num_samples, len);
            bad += !ok;
            checked++;
            free(got);
            sampler_free(&s);
        }
        free(perm);
    }
    cJSON_Delete(root);
    tu_check(n_cases == 288 && bad == 0,
             "rank lists equal PyTorch DistributedSampler's (%d cases, %d rank lists, %d bad)",
             n_cases, checked, bad);
}

/* Collects every rank's list for one epoch; returns counts per record (N). */
static int64_t *count_coverage(int64_t n, int w, int drop, uint64_t seed, int64_t epoch,
                               int64_t *total, int64_t *per_rank) {
    int64_t *count = calloc((size_t)n, sizeof *count);
    *total = 0;
    for (int r = 0; r < w; r++) {
        sampler_options o = {.seed = seed,
                             .rank = r,
                             .world_size = w,
                             .batch_size = 3,
                             .shuffle = 1,
                             .drop_last = drop};
        sampler s;
        BT_ASSERT(sampler_init(&s, n, &o) == BT_OK);
        sampler_set_epoch(&s, epoch);
        int64_t b[3];
        int k;
        int64_t mine = 0;
        while ((k = sampler_next_batch(&s, b)) > 0) {
            for (int i = 0; i < k; i++)
                count[b[i]]++;
            mine += k;
        }
        *total += mine;
        per_rank[r] = mine;
        sampler_free(&s);
    }
    return count;
}

static void test_coverage(void) {
    const int worlds[] = {1, 2, 3, 8};
    const int64_t sizes[] = {24, 25, 29, 97, 1000, 1001};
    for (size_t wi = 0; wi < 4; wi++) {
        int w = worlds[wi], failures = 0, cases = 0;
        for (size_t ni = 0; ni < 6; ni++) {
            int64_t n = sizes[ni];
            for (int drop = 0; drop < 2; drop++) {
                for (int64_t epoch = 0; epoch < 2; epoch++) {
                    int64_t total, per_rank[8];
                    int64_t *count = count_coverage(n, w, drop, 99, epoch, &total, per_rank);
                    int ok = 1;
                    int64_t expect_per_rank = drop ? n / w : (n + w - 1) / w;
                    for (int r = 0; r < w; r++)
                        ok &= per_rank[r] == expect_per_rank;
                    ok &= total == expect_per_rank * w;
                    int64_t twice = 0, zero = 0, more = 0;
                    for (int64_t i = 0; i < n; i++) {
                        zero += count[i] == 0;
                        twice += count[i] == 2;
                        more += count[i] > 2;
                    }
                    if (n % w == 0) { /* exactly once, both policies */
                        ok &= zero == 0 && twice == 0 && more == 0;
                    } else if (!drop) { /* padding: the head repeats once */
                        ok &= zero == 0 && more == 0 && twice == total - n;
                    } else { /* drop_last: the tail is missing */
                        ok &= twice == 0 && more == 0 && zero == n - total;
                    }
                    if (!ok)
                        printf("# coverage N=%" PRId64 " W=%d %s epoch %" PRId64 ": %" PRId64
                               " per rank, %" PRId64 " missing, %" PRId64 " twice\n",
                               n, w, drop ? "drop_last" : "pad", epoch, per_rank[0], zero, twice);
                    failures += !ok;
                    cases++;
                    free(count);
                }
            }
        }
        tu_check(failures == 0,
                 "coverage W=%d over N in {24,25,29,97,1000,1001}, pad and drop_last, "
                 "2 epochs: %d of %d cases wrong",
                 w, failures, cases);
    }
}

/* The padding repeats exactly the start of the epoch's permutation (DistributedSampler). */
static void test_padding_is_permutation_head(void) {
    int64_t n = 10;
    int w = 4; /* total 12: positions 10, 11 repeat perm[0], perm[1] */
    sampler_options o = {.seed = 5, .rank = 2, .world_size = w, .batch_size = 2, .shuffle = 1};
    sampler s;
    BT_ASSERT(sampler_init(&s, n, &o) == BT_OK);
    int64_t perm[10], list[3];
    sampler_permutation(&s, 0, perm);
    sampler_rank_indices(&s, perm, list);
    /* rank 2 takes positions 2, 6, 10 -> perm[2], perm[6], perm[0] */
    tu_check(s.num_samples == 3 && list[0] == perm[2] && list[1] == perm[6] && list[2] == perm[0],
             "rank 2 of 4 over 10 records takes perm[2], perm[6] and the padding perm[0]");
    sampler_free(&s);
}

static int lists_equal(int64_t n, uint64_t seed_a, int64_t ep_a, uint64_t seed_b, int64_t ep_b) {
    sampler_options o = {.seed = seed_a, .rank = 0, .world_size = 1, .batch_size = 1, .shuffle = 1};
    sampler a, b;
    BT_ASSERT(sampler_init(&a, n, &o) == BT_OK);
    o.seed = seed_b;
    BT_ASSERT(sampler_init(&b, n, &o) == BT_OK);
    int64_t *pa = malloc((size_t)n * 8), *pb = malloc((size_t)n * 8);
    sampler_permutation(&a, ep_a, pa);
    sampler_permutation(&b, ep_b, pb);
    int eq = memcmp(pa, pb, (size_t)n * 8) == 0;
    free(pa);
    free(pb);
    sampler_free(&a);
    sampler_free(&b);
    return eq;
}

static void test_determinism(void) {
    tu_check(lists_equal(500, 42, 3, 42, 3), "same seed and epoch give the same permutation");
    tu_check(!lists_equal(500, 42, 3, 42, 4), "different epochs give different permutations");
    tu_check(!lists_equal(500, 42, 0, 43, 0), "different seeds give different permutations");

    /* shuffle = 0 is the identity, as DistributedSampler(shuffle=False). */
    sampler_options o = {.seed = 1, .rank = 0, .world_size = 1, .batch_size = 1};
    sampler s;
    BT_ASSERT(sampler_init(&s, 50, &o) == BT_OK);
    int64_t perm[50];
    sampler_permutation(&s, 7, perm);
    int id = 1;
    for (int i = 0; i < 50; i++)
        id &= perm[i] == i;
    tu_check(id, "shuffle = 0 visits records in dataset order");
    sampler_free(&s);
}

/* Where record 0 lands over 5000 epochs of a 5-record shuffle: each position has p = 1/5, so
 * counts are Binomial(5000, 0.2): mean 1000, sd 28.3. The bound +-150 is 5.3 sd; the seed
 * is fixed, so this is deterministic; it fails only for a biased shuffle. */
static void test_uniformity(void) {
    sampler_options o = {.seed = 2024, .rank = 0, .world_size = 1, .batch_size = 1, .shuffle = 1};
    sampler s;
    BT_ASSERT(sampler_init(&s, 5, &o) == BT_OK);
    int counts[5] = {0};
    for (int64_t e = 0; e < 5000; e++) {
        int64_t perm[5];
        sampler_permutation(&s, e, perm);
        for (int i = 0; i < 5; i++)
            if (perm[i] == 0) counts[i]++;
    }
    int ok = 1;
    for (int i = 0; i < 5; i++)
        ok &= counts[i] > 850 && counts[i] < 1150;
    tu_check(ok, "shuffle is uniform: record 0 at positions %d %d %d %d %d (expect ~1000)",
             counts[0], counts[1], counts[2], counts[3], counts[4]);
    sampler_free(&s);
}

static void test_batches(void) {
    sampler_options o = {.seed = 3, .rank = 1, .world_size = 3, .batch_size = 4, .shuffle = 1};
    sampler s;
    BT_ASSERT(sampler_init(&s, 31, &o) == BT_OK); /* 11 per rank: batches 4, 4, 3 */
    int64_t perm[31], list[11], got[11], b[4];
    sampler_permutation(&s, 0, perm);
    sampler_rank_indices(&s, perm, list);
    int sizes[4] = {0}, nb = 0, k, pos = 0;
    while ((k = sampler_next_batch(&s, b)) > 0 && nb < 4) {
        sizes[nb++] = k;
        memcpy(got + pos, b, (size_t)k * 8);
        pos += k;
    }
    tu_check(nb == 3 && sizes[0] == 4 && sizes[1] == 4 && sizes[2] == 3 && s.num_batches == 3,
             "11 samples in batches of 4: 4, 4, 3 (got %d batches)", nb);
    tu_check(pos == 11 && memcmp(got, list, sizeof list) == 0,
             "batches concatenate to the rank's list");
    sampler_free(&s);

    o.drop_last_batch = 1;
    BT_ASSERT(sampler_init(&s, 31, &o) == BT_OK);
    nb = 0;
    while (sampler_next_batch(&s, b) > 0)
        nb++;
    tu_check(nb == 2 && s.num_batches == 2, "drop_last_batch drops the final partial batch");
    sampler_free(&s);

    sampler_options bad = {.rank = 2, .world_size = 2, .batch_size = 1};
    tu_check(sampler_init(&s, 10, &bad) == BT_ERR_ARG && strstr(bt_error_message(), "rank 2"),
             "rank >= world_size refused: %s", bt_error_message());
    sampler_free(&s);
    sampler_options bad2 = {.rank = 0, .world_size = 1, .batch_size = 0};
    tu_check(sampler_init(&s, 10, &bad2) == BT_ERR_ARG, "batch_size 0 refused");
    sampler_free(&s);
}

static void test_cursor_resume(void) {
    sampler_options o = {.seed = 11, .rank = 1, .world_size = 2, .batch_size = 3, .shuffle = 1};
    sampler a;
    BT_ASSERT(sampler_init(&a, 40, &o) == BT_OK); /* 20 per rank: 7 batches */
    int64_t b[3];
    /* Reference: epochs 0 and 1 uninterrupted. */
    int64_t ref[2][20];
    int pos = 0, k;
    for (int e = 0; e < 2; e++) {
        sampler_set_epoch(&a, e);
        pos = 0;
        while ((k = sampler_next_batch(&a, b)) > 0) {
            memcpy(ref[e] + pos, b, (size_t)k * 8);
            pos += k;
        }
    }
    /* Interrupted after 4 batches of epoch 1, saved through JSON text, restored. */
    sampler_set_epoch(&a, 1);
    for (int i = 0; i < 4; i++)
        sampler_next_batch(&a, b);
    cJSON *j = sampler_cursor_to_json(&a, a.cur);
    char *text = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    printf("# cursor: %s\n", text);

    sampler c;
    BT_ASSERT(sampler_init(&c, 40, &o) == BT_OK);
    cJSON *back = cJSON_Parse(text);
    sampler_cursor cur;
    bt_status st = sampler_cursor_from_json(&c, back, "state.json", &cur);
    tu_check(st == BT_OK && cur.epoch == 1 && cur.position == 12, "cursor parsed: %s",
             st ? bt_error_message() : "epoch 1, position 12");
    st = sampler_seek(&c, cur);
    int64_t rest[20];
    pos = 0;
    while (st == BT_OK && (k = sampler_next_batch(&c, b)) > 0) {
        memcpy(rest + pos, b, (size_t)k * 8);
        pos += k;
    }
    tu_check(st == BT_OK && pos == 8 && memcmp(rest, ref[1] + 12, 8 * 8) == 0,
             "resumed sampler yields exactly the rest of epoch 1");

    /* A run with another world size or seed must refuse the cursor, naming the key. */
    sampler d;
    sampler_options o2 = o;
    o2.world_size = 4;
    BT_ASSERT(sampler_init(&d, 40, &o2) == BT_OK);
    st = sampler_cursor_from_json(&d, back, "state.json", &cur);
    tu_check(st != BT_OK && strstr(bt_error_message(), "state.json") &&
                 strstr(bt_error_message(), "'world_size'"),
             "cursor from another world size refused: %s", bt_error_message());
    sampler_free(&d);
    o2 = o;
    o2.seed = 12;
    BT_ASSERT(sampler_init(&d, 40, &o2) == BT_OK);
    st = sampler_cursor_from_json(&d, back, "state.json", &cur);
    tu_check(st != BT_OK && strstr(bt_error_message(), "'seed'"),
             "cursor from another seed refused: %s", bt_error_message());
    sampler_free(&d);

    /* Position off a batch boundary, and a missing key. */
    cJSON_ReplaceItemInObject(back, "position", cJSON_CreateNumber(5));
    st = sampler_cursor_from_json(&c, back, "state.json", &cur);
    tu_check(st != BT_OK && strstr(bt_error_message(), "batch_size"),
             "cursor position 5 with batch 3 refused: %s", bt_error_message());
    cJSON_DeleteItemFromObject(back, "epoch");
    st = sampler_cursor_from_json(&c, back, "state.json", &cur);
    tu_check(st == BT_ERR_MISSING && strstr(bt_error_message(), "'epoch'"),
             "cursor without epoch refused: %s", bt_error_message());

    /* Seeds above 2^53 survive the round trip as strings. */
    sampler e;
    sampler_options o3 = o;
    o3.seed = 0xFEDCBA9876543210ull;
    BT_ASSERT(sampler_init(&e, 40, &o3) == BT_OK);
    cJSON *je = sampler_cursor_to_json(&e, e.cur);
    st = sampler_cursor_from_json(&e, je, "big", &cur);
    tu_check(st == BT_OK && cJSON_IsString(cJSON_GetObjectItem(je, "seed")),
             "64-bit seed round-trips through the cursor JSON");
    cJSON_Delete(je);
    sampler_free(&e);

    cJSON_Delete(back);
    free(text);
    sampler_free(&a);
    sampler_free(&c);
}

int main(void) {
    test_against_pytorch();
    test_coverage();
    test_padding_is_permutation_head();
    test_determinism();
    test_uniformity();
    test_batches();
    test_cursor_resume();
    return tu_finish();
}
