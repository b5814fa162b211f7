/* bench_tokenizer.c: single-threaded speed of the byte-level BPE tokenizer on caption-like
 * text, in tokens/s and captions/s:
 *   - encode, word cache off (every word goes through BPE: the cold cost),
 *   - encode, word cache warm (after one pass over the same captions),
 *   - encode_single with max_length 50 + padding, cache warm (the data loader's call).
 * Each row is the median of 5 timed passes over 20000 seeded synthetic captions
 * ("a small brown dog running across the wet grass near a red bus.").
 *
 * Usage: bench_tokenizer [MODEL_DIR] [--dump CAPTIONS.txt]
 *   MODEL_DIR defaults to tests/fixtures/tokenizer (600 merges; a full RoBERTa vocabulary
 *   has 50000, so more merges apply per word and the cold numbers there are lower).
 *   --dump writes the captions, one per line, so the Python reference can be timed on the
 *   same text: /usr/bin/python3 scripts/bpe_reference.py bench --model-dir DIR --captions F
 *
 * Deliberately not here: multi-threaded throughput (the loader benchmark measures that),
 * any assertion on speed (benchmarks are programs, not tests). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "test_util.h"
#include "data/tokenizer.h"

enum { N_CAPTIONS = 20000, REPEATS = 5, MAX_LEN = 50 };

static const char *const det[] = {"a", "the", "two", "an old", "a young", "three", "some"};
static const char *const adj[] = {"small",   "large",  "brown",   "white", "red",
                                  "wooden",  "wet",    "crowded", "empty", "colorful",
                                  "striped", "sleepy", "shiny",   "tall",  "dirty",
                                  "blue",    "green",  "fluffy",  "busy",  "quiet"};
static const char *const noun[] = {
    "dog",       "cat",      "man",           "woman",         "boy",          "girl",
    "bus",       "train",    "pizza",         "table",         "giraffe",      "elephant",
    "surfboard", "kitchen",  "street",        "bench",         "umbrella",     "horse",
    "bird",      "clock",    "laptop",        "frisbee",       "skateboard",   "zebra",
    "sandwich",  "bicycle",  "motorcycle",    "sheep",         "couch",        "toilet",
    "banana",    "broccoli", "kite",          "tennis racket", "fire hydrant", "teddy bear",
    "airplane",  "boat",     "traffic light", "refrigerator"};
static const char *const verb[] = {"running",  "sitting", "standing",    "laying",
                                   "riding",   "eating",  "holding",     "looking at",
                                   "parked",   "flying",  "walking",     "playing with",
                                   "sleeping", "waiting", "jumping over"};
static const char *const prep[] = {"on",    "near",   "next to", "in front of", "across",
                                   "under", "behind", "inside",  "on top of",   "beside"};

#define PICK(r, a) a[tu_rng_next(r) % (sizeof a / sizeof a[0])]

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct pass_result {
    double seconds;
    size_t tokens;
} pass_result;

/* mode 0: tokenizer_encode; 1: tokenizer_encode_single (50, truncate, pad). */
static pass_result run_pass(tokenizer *t, char **caps, const size_t *lens, int mode, int cache) {
    static int32_t ids[4096], mask[MAX_LEN];
    double times[REPEATS];
    size_t tokens = 0;
    for (int r = 0; r < REPEATS; r++) {
        if (!cache) tokenizer_set_cache(t, 0);
        double t0 = tu_clock_seconds(CLOCK_MONOTONIC);
        tokens = 0;
        for (size_t i = 0; i < N_CAPTIONS; i++) {
            size_t n = 0;
            bt_status st = mode == 0 ? tokenizer_encode(t, caps[i], lens[i], ids, 4096, &n)
                                     : tokenizer_encode_single(t, caps[i], lens[i], MAX_LEN, 1, 1,
                                                               ids, mask, &n);
            if (st) {
                fprintf(stderr, "encode failed: %s\n", bt_error_message());
                exit(1);
            }
            if (mode == 1)
                for (size_t k = 0; k < n; k++)
                    tokens += (size_t)mask[k];
            else
                tokens += n;
        }
        times[r] = tu_clock_seconds(CLOCK_MONOTONIC) - t0;
    }
    qsort(times, REPEATS, sizeof times[0], cmp_double);
    return (pass_result){times[REPEATS / 2], tokens};
}

int main(int argc, char **argv) {
    char dir[1024];
    const char *dump = NULL;
    snprintf(dir, sizeof dir, "%s", tu_fixture_path("tokenizer"));
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--dump") && i + 1 < argc) {
            dump = argv[++i];
        } else if (argv[i][0] == '-') {
            return tu_usage(argv[i], "usage: bench_tokenizer [--dump CAPTIONS.txt] [MODEL_DIR]\n"
                                     "  MODEL_DIR   tokenizer directory (default: the fixture)\n"
                                     "  --dump F    also write the captions to F, one a line\n");
        } else {
            snprintf(dir, sizeof dir, "%s", argv[i]);
        }
    }
    tokenizer t;
    if (tokenizer_load(&t, dir)) {
        fprintf(stderr, "%s\n", bt_error_message());
        return 1;
    }
    tu_rng rng;
    tu_rng_seed(&rng, 7);
    char **caps = malloc(N_CAPTIONS * sizeof *caps);
    size_t *lens = malloc(N_CAPTIONS * sizeof *lens), bytes = 0;
    FILE *df = dump ? fopen(dump, "w") : NULL;
    for (size_t i = 0; i < N_CAPTIONS; i++) {
        char buf[256];
        int n = snprintf(buf, sizeof buf, "%s %s %s %s %s the %s %s.", PICK(&rng, det),
                         PICK(&rng, adj), PICK(&rng, noun), PICK(&rng, verb), PICK(&rng, prep),
                         PICK(&rng, adj), PICK(&rng, noun));
        caps[i] = strdup(buf);
        lens[i] = (size_t)n;
        bytes += (size_t)n;
        if (df) fprintf(df, "%s\n", buf);
    }
    if (df) fclose(df);

    pass_result cold = run_pass(&t, caps, lens, 0, 0);
    tokenizer_set_cache(&t, 1);
    run_pass(&t, caps, lens, 0, 1); /* warm up */
    pass_result warm = run_pass(&t, caps, lens, 0, 1);
    pass_result single = run_pass(&t, caps, lens, 1, 1);

    printf("tokenizer benchmark: %s (vocab %d), %d captions, %zu bytes, %.1f tokens/caption, "
           "1 thread, median of %d\n\n",
           dir, (int)t.vocab_size, N_CAPTIONS, bytes, (double)warm.tokens / N_CAPTIONS, REPEATS);
    printf("| %-40s | %12s | %12s | %10s |\n", "case", "tokens/s", "captions/s", "MB/s");
    printf("|%s|%s|%s|%s|\n", "------------------------------------------", "--------------",
           "--------------", "------------");
    const char *names[3] = {"encode, word cache off (cold BPE)", "encode, word cache warm",
                            "encode_single(50, pad), cache warm"};
    pass_result res[3] = {cold, warm, single};
    for (int i = 0; i < 3; i++)
        printf("| %-40s | %12.3g | %12.3g | %10.1f |\n", names[i], res[i].tokens / res[i].seconds,
               N_CAPTIONS / res[i].seconds, bytes / res[i].seconds / 1e6);
    for (size_t i = 0; i < N_CAPTIONS; i++)
        free(caps[i]);
    free(caps);
    free(lens);
    tokenizer_free(&t);
    return 0;
}
