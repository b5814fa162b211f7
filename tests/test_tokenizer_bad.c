/* test_tokenizer_bad.c: the tokenizer loader and encoder on bad input (docs/style.md 9).
 *
 * Loader: missing directory/files, empty and malformed JSON, trailing garbage, vocab entries
 * of the wrong type or range, duplicate ids, merges lines that are malformed or name
 * unknown symbols, tokenizer.json sections of the wrong type or an unsupported pipeline,
 * missing special tokens. Each must fail with the right status and a message naming the
 * file and the entry. A vocabulary lacking a byte symbol encodes that byte as <unk> (or
 * drops it when there is no <unk>), as documented in tokenizer.h.
 *
 * Encoder fuzz (seeded, 3000 short strings of random bytes, truncated/invalid UTF-8, space
 * runs and pieces of special tokens): never crashes; every id is inside the vocabulary;
 * decode gives valid UTF-8; encode(decode(encode(x))) == encode(x) (decode returns the
 * U+FFFD-sanitized text, which must encode the same); for valid UTF-8 without '<', the
 * round trip is exact; templates keep their shape for random max_length. Meant to run
 * under ASan/UBSan too.
 *
 * Deliberately not here: the reference ids (test_tokenizer.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "test_util.h"
#include "data/tokenizer.h"

static char g_dir[1024];

static const char *make_dir(const char *name) {
    snprintf(g_dir, sizeof g_dir, "%s/%s", tu_tmpdir(), name);
    mkdir(g_dir, 0700);
    return g_dir;
}

static void put(const char *dir, const char *file, const char *content) {
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    tu_setup_text(path, content);
}

/* Load must fail with `want` and a message containing both needles. */
static void expect_fail(const char *what, const char *dir, bt_status want, const char *needle1,
                        const char *needle2) {
    tokenizer t;
    bt_status st = tokenizer_load(&t, dir);
    const char *msg = bt_error_message();
    int ok = st == want && strstr(msg, needle1) && (!needle2 || strstr(msg, needle2));
    tu_check(ok, "%s: %s (%s)", what, bt_status_name(st), msg);
    if (st == BT_OK) tokenizer_free(&t);
    tokenizer_free(&t); /* harmless after a failed load (and twice) */
}

/* A minimal valid byte-level vocabulary: the specials, the symbols for a..z and space 'Ġ',
 * plus "ab" and "Ġa". */
static void minimal_vocab(char *out, size_t cap, int with_pad, int skip_letter) {
    size_t o = 0;
    o += (size_t)snprintf(out + o, cap - o, "{\"<s>\": 0, %s\"</s>\": 2, \"<unk>\": 3",
                          with_pad ? "\"<pad>\": 1, " : "");
    int id = 4;
    for (char c = 'a'; c <= 'z'; c++, id++)
        if (c != skip_letter) o += (size_t)snprintf(out + o, cap - o, ", \"%c\": %d", c, id);
    o += (size_t)snprintf(out + o, cap - o,
                          ", \"\\u0120\": %d, \"ab\": %d, \"\\u0120a\": %d, \"<mask>\": %d}", id,
                          id + 1, id + 2, id + 3);
}

static void test_loader_errors(void) {
    char vocab[4096];
    minimal_vocab(vocab, sizeof vocab, 1, 0);
    const char *merges_ok = "#version: 0.2\na b\n\xC4\xA0 a\n";

    expect_fail("missing directory", "/nonexistent/bt-tokenizer", BT_ERR_IO,
                "/nonexistent/bt-tokenizer", "cannot open the model directory");
    /* Special files: refused with a message instead of a read that never returns, and not
     * reported as absent. */
    const char *fd = make_dir("fifo_tokenizer");
    char fifo[1200];
    snprintf(fifo, sizeof fifo, "%s/tokenizer.json", fd);
    if (tu_check(mkfifo(fifo, 0600) == 0, "make a FIFO tokenizer.json"))
        expect_fail("tokenizer.json is a FIFO", fd, BT_ERR_IO, "tokenizer.json", "is a FIFO");
    /* JSON Python reads differently (src/json_util.h): a vocab key holding \u0000, a key
     * given twice at the top level. */
    {
        char v0[4200];
        snprintf(v0, sizeof v0, "%.*s, \"x\\u0000y\": 999}", (int)strlen(vocab) - 1, vocab);
        const char *d0 = make_dir("vocab_u0000");
        put(d0, "vocab.json", v0);
        put(d0, "merges.txt", merges_ok);
        expect_fail("vocab key holding \\u0000", d0, BT_ERR_FORMAT, "vocab.json",
                    "holds the escape \\u0000");
    }
    /* Invalid UTF-8 from merges.txt is escaped when echoed, never printed raw. */
    {
        const char *d1 = make_dir("merges_bad_utf8");
        put(d1, "vocab.json", vocab);
        put(d1, "merges.txt", "a b\n\xff\x1b[2J b\n");
        tokenizer t;
        bt_status st = tokenizer_load(&t, d1);
        const char *msg = bt_error_message();
        tu_check(st == BT_ERR_FORMAT && strstr(msg, "\\xff\\x1b[2J") && !strchr(msg, '\xff') &&
                     !strchr(msg, '\x1b'),
                 "merges.txt with bytes that are not UTF-8: escaped in the message: %s", msg);
        if (st == BT_OK) tokenizer_free(&t);
    }
    const char *d = make_dir("only_vocab");
    put(d, "vocab.json", vocab);
    expect_fail("vocab.json without merges.txt", d, BT_ERR_IO, "only_vocab", "merges.txt");

    tokenizer t;
    bt_status st = tokenizer_load_files(&t, "/nonexistent/vocab.json", "/nonexistent/merges.txt");
    tu_check(st == BT_ERR_IO && strstr(bt_error_message(), "/nonexistent/vocab.json"),
             "load_files, missing vocab: %s", bt_error_message());
    st = tokenizer_load_json(&t, "/nonexistent/tokenizer.json");
    tu_check(st == BT_ERR_IO && strstr(bt_error_message(), "/nonexistent/tokenizer.json"),
             "load_json, missing file: %s", bt_error_message());

    /* vocab.json contents */
    static const struct {
        const char *name, *vocab;
        bt_status want;
        const char *needle;
    } vocab_cases[] = {
        {"empty vocab.json", "", BT_ERR_FORMAT, "empty"},
        {"truncated vocab.json", "{\"a\": 1, \"b\"", BT_ERR_FORMAT, "malformed JSON"},
        {"trailing garbage", "{\"a\": 1} x", BT_ERR_FORMAT, "malformed JSON"},
        {"vocab is an array", "[1, 2]", BT_ERR_FORMAT, "expected an object"},
        {"id is a string", "{\"<s>\": 0, \"a\": \"4\"}", BT_ERR_FORMAT, "entry \"a\""},
        {"id is fractional", "{\"<s>\": 0, \"a\": 4.5}", BT_ERR_FORMAT, "entry \"a\""},
        {"id is negative", "{\"<s>\": 0, \"a\": -4}", BT_ERR_FORMAT, "entry \"a\""},
        {"id too large", "{\"<s>\": 0, \"a\": 1e12}", BT_ERR_FORMAT, "entry \"a\""},
        {"id is null", "{\"<s>\": 0, \"a\": null}", BT_ERR_FORMAT, "entry \"a\""},
        {"empty object", "{}", BT_ERR_FORMAT, "empty"},
        {"duplicate id", "{\"<s>\": 0, \"a\": 0}", BT_ERR_FORMAT, "both have id 0"},
        {"duplicate token", "{\"a\": 0, \"a\": 1}", BT_ERR_FORMAT, "appears twice"},
    };
    for (size_t i = 0; i < sizeof vocab_cases / sizeof vocab_cases[0]; i++) {
        char name[32];
        snprintf(name, sizeof name, "vocab%zu", i);
        d = make_dir(name);
        put(d, "vocab.json", vocab_cases[i].vocab);
        put(d, "merges.txt", "#version: 0.2\n");
        expect_fail(vocab_cases[i].name, d, vocab_cases[i].want, "vocab.json",
                    vocab_cases[i].needle);
    }

    /* merges.txt contents */
    static const struct {
        const char *name, *merges, *needle;
    } merge_cases[] = {
        {"merge with three tokens", "#version: 0.2\na b\na b c\n", "line 3"},
        {"merge with one token", "a b\nab\n", "line 2"},
        {"empty line inside", "a b\n\n\xC4\xA0 a\n", "line 2"},
        {"leading space", " a b\n", "line 1"},
        {"unknown left symbol", "a b\nzz a\n", "\"zz\""},
        {"unknown right symbol", "a b\na qq\n", "\"qq\""},
        {"merged token missing", "a b\nb a\n", "merged token \"ba\""},
    };
    for (size_t i = 0; i < sizeof merge_cases / sizeof merge_cases[0]; i++) {
        char name[32];
        snprintf(name, sizeof name, "merges%zu", i);
        d = make_dir(name);
        put(d, "vocab.json", vocab);
        put(d, "merges.txt", merge_cases[i].merges);
        expect_fail(merge_cases[i].name, d, BT_ERR_FORMAT, "merges.txt", merge_cases[i].needle);
    }

    /* The RoBERTa template needs <pad>. */
    char no_pad[4096];
    minimal_vocab(no_pad, sizeof no_pad, 0, 0);
    d = make_dir("nopad");
    put(d, "vocab.json", no_pad);
    put(d, "merges.txt", merges_ok);
    expect_fail("vocabulary without <pad>", d, BT_ERR_MISSING, "vocab.json", "<pad>");

    /* tokenizer.json sections */
    static const struct {
        const char *name, *json;
        bt_status want;
        const char *needle;
    } json_cases[] = {
        {"top level array", "[]", BT_ERR_FORMAT, "top"},
        {"no model", "{\"added_tokens\": []}", BT_ERR_FORMAT, "model: expected an object"},
        {"truncated", "{\"model\": {\"vocab\": {", BT_ERR_FORMAT, "malformed JSON"},
        {"vocab wrong type", "{%P, \"model\": {\"type\": \"BPE\", \"vocab\": [], \"merges\": []}}",
         BT_ERR_FORMAT, "model.vocab"},
        {"merges wrong type", "{%P, \"model\": {\"vocab\": %V, \"merges\": {}}}", BT_ERR_FORMAT,
         "model.merges: expected an array"},
        {"merge entry is a number", "{%P, \"model\": {\"vocab\": %V, \"merges\": [\"a b\", 7]}}",
         BT_ERR_FORMAT, "model.merges[1]"},
        {"merge pair of one", "{%P, \"model\": {\"vocab\": %V, \"merges\": [[\"a\"]]}}",
         BT_ERR_FORMAT, "model.merges[0]"},
        {"merge pair of numbers", "{%P, \"model\": {\"vocab\": %V, \"merges\": [[1, 2]]}}",
         BT_ERR_FORMAT, "model.merges[0]"},
        {"merge pair unknown", "{%P, \"model\": {\"vocab\": %V, \"merges\": [[\"a\", \"zz\"]]}}",
         BT_ERR_FORMAT, "model.merges[0]: token \"zz\""},
        {"added_tokens not an array",
         "{%P, \"added_tokens\": {}, \"model\": {\"vocab\": %V, "
         "\"merges\": []}}",
         BT_ERR_FORMAT, "added_tokens: expected an array"},
        {"added token lstrip string",
         "{%P, \"added_tokens\": [{\"id\": 30, \"content\": "
         "\"<mask>\", \"lstrip\": \"yes\"}], \"model\": {\"vocab\": %V, \"merges\": []}}",
         BT_ERR_FORMAT, "added_tokens[0].lstrip"},
        {"added token without id",
         "{%P, \"added_tokens\": [{\"content\": \"<x>\"}], "
         "\"model\": {\"vocab\": %V, \"merges\": []}}",
         BT_ERR_FORMAT, "added_tokens[0].id"},
        {"added token empty content",
         "{%P, \"added_tokens\": [{\"id\": 3, \"content\": \"\"}], "
         "\"model\": {\"vocab\": %V, \"merges\": []}}",
         BT_ERR_FORMAT, "added_tokens[0].content"},
        {"single_word token",
         "{%P, \"added_tokens\": [{\"id\": 31, \"content\": \"<x>\", "
         "\"single_word\": true}], \"model\": {\"vocab\": %V, \"merges\": []}}",
         BT_ERR_UNSUPPORTED, "single_word"},
        {"normalizer",
         "{\"normalizer\": {\"type\": \"NFC\"}, %P, \"model\": {\"vocab\": %V, "
         "\"merges\": []}}",
         BT_ERR_UNSUPPORTED, "normalizer"},
        {"no pre_tokenizer", "{\"model\": {\"vocab\": %V, \"merges\": []}}", BT_ERR_UNSUPPORTED,
         "pre_tokenizer"},
        {"prefix space",
         "{\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": "
         "true}, \"model\": {\"vocab\": %V, \"merges\": []}}",
         BT_ERR_UNSUPPORTED, "add_prefix_space"},
        {"wordpiece model", "{%P, \"model\": {\"type\": \"WordPiece\", \"vocab\": %V}}",
         BT_ERR_UNSUPPORTED, "model.type"},
        {"dropout", "{%P, \"model\": {\"dropout\": 0.1, \"vocab\": %V, \"merges\": []}}",
         BT_ERR_UNSUPPORTED, "dropout"},
        {"unk_token not in vocab",
         "{%P, \"model\": {\"unk_token\": \"[UNK]\", \"vocab\": %V, "
         "\"merges\": []}}",
         BT_ERR_FORMAT, "[UNK]"},
        {"template processor",
         "{%P, \"post_processor\": {\"type\": \"TemplateProcessing\"}, "
         "\"model\": {\"vocab\": %V, \"merges\": []}}",
         BT_ERR_UNSUPPORTED, "post_processor"},
        {"roberta cls wrong type",
         "{%P, \"post_processor\": {\"type\": \"RobertaProcessing\", "
         "\"cls\": \"<s>\"}, \"model\": {\"vocab\": %V, \"merges\": []}}",
         BT_ERR_FORMAT, "post_processor.cls"},
        {"roberta sep out of range",
         "{%P, \"post_processor\": {\"type\": \"RobertaProcessing\", "
         "\"sep\": [\"</s>\", 5000]}, \"model\": {\"vocab\": %V, \"merges\": []}}",
         BT_ERR_FORMAT, "5000"},
    };
    const char *pre = "\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false}";
    for (size_t i = 0; i < sizeof json_cases / sizeof json_cases[0]; i++) {
        char buf[8192], name[32];
        size_t o = 0;
        for (const char *p = json_cases[i].json; *p && o + 4096 < sizeof buf; p++) {
            if (p[0] == '%' && p[1] == 'P') {
                o += (size_t)snprintf(buf + o, sizeof buf - o, "%s", pre);
                p++;
            } else if (p[0] == '%' && p[1] == 'V') {
                o += (size_t)snprintf(buf + o, sizeof buf - o, "%s", vocab);
                p++;
            } else {
                buf[o++] = *p;
            }
        }
        buf[o] = 0;
        snprintf(name, sizeof name, "json%zu", i);
        d = make_dir(name);
        put(d, "tokenizer.json", buf);
        expect_fail(json_cases[i].name, d, json_cases[i].want, "tokenizer.json",
                    json_cases[i].needle);
    }
}

/* A vocabulary lacking the symbol of 'q' (documented in tokenizer.h). */
static void test_missing_byte_symbol(void) {
    char vocab[4096];
    minimal_vocab(vocab, sizeof vocab, 1, 'q');
    const char *d = make_dir("noq");
    put(d, "vocab.json", vocab);
    put(d, "merges.txt", "a b\n");
    tokenizer t;
    bt_status st = tokenizer_load(&t, d);
    if (!tu_check(st == BT_OK, "load vocab without 'q': %s", st ? bt_error_message() : "ok"))
        return;
    int32_t ids[8];
    size_t n;
    st = tokenizer_encode(&t, "aqqb", 4, ids, 8, &n);
    int32_t a = tokenizer_token_to_id(&t, "a"), b = tokenizer_token_to_id(&t, "b");
    /* "aqqb" is one word; the merge (a, b) cannot apply across the two <unk>s. */
    tu_check(st == BT_OK && n == 4 && ids[0] == a && ids[1] == t.unk_id && ids[2] == t.unk_id &&
                 ids[3] == b,
             "a byte without a symbol becomes <unk> (one per byte, fuse_unk off)");
    tokenizer_free(&t);

    /* tokenizer.json without "<unk>" anywhere and unk_token null: the byte is dropped. */
    char json[8192];
    char vocab_nounk[4096];
    minimal_vocab(vocab_nounk, sizeof vocab_nounk, 1, 'q');
    char *unk = strstr(vocab_nounk, ", \"<unk>\": 3");
    memmove(unk, unk + strlen(", \"<unk>\": 3"), strlen(unk + strlen(", \"<unk>\": 3")) + 1);
    snprintf(json, sizeof json,
             "{\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false}, "
             "\"model\": {\"type\": \"BPE\", \"unk_token\": null, \"vocab\": %s, \"merges\": "
             "[\"a b\"]}}",
             vocab_nounk);
    d = make_dir("nounk");
    put(d, "tokenizer.json", json);
    st = tokenizer_load(&t, d);
    if (!tu_check(st == BT_OK, "load tokenizer.json without <unk>: %s",
                  st ? bt_error_message() : "ok"))
        return;
    st = tokenizer_encode(&t, "aqqb", 4, ids, 8, &n);
    /* HF's merge_word skips the byte, so a and b become neighbours and merge. */
    tu_check(st == BT_OK && n == 1 && ids[0] == tokenizer_token_to_id(&t, "ab") && t.unk_id == -1,
             "without an unk token a byte lacking a symbol is dropped (HF behaviour): "
             "\"aqqb\" -> [ab], n %zu",
             n);
    tokenizer_free(&t);
}

/* Independent UTF-8 validity check for the fuzz (RFC 3629 ranges). */
static int valid_utf8(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        size_t k;
        unsigned cp;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xE0) == 0xC0) {
            k = 1;
            cp = c & 0x1F;
        } else if ((c & 0xF0) == 0xE0) {
            k = 2;
            cp = c & 0x0F;
        } else if ((c & 0xF8) == 0xF0) {
            k = 3;
            cp = c & 0x07;
        } else {
            return 0;
        }
        for (size_t j = 1; j <= k; j++) {
            if (i + j >= n || (s[i + j] & 0xC0) != 0x80) return 0;
            cp = (cp << 6) | (s[i + j] & 0x3F);
        }
        static const unsigned min_cp[4] = {0, 0x80, 0x800, 0x10000};
        if (cp < min_cp[k] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
        i += k + 1;
    }
    return 1;
}

static void test_fuzz(void) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", tu_fixture_path("tokenizer"));
    tokenizer t;
    bt_status st = tokenizer_load(&t, dir);
    if (!tu_check(st == BT_OK, "load fixture for fuzzing: %s", st ? bt_error_message() : "ok"))
        return;
    static const char *const pieces[] = {
        "a",
        " ",
        "  ",
        "\t",
        "\n",
        "'",
        "'s",
        "'ll",
        "<mask>",
        "<mask",
        "mask>",
        "<s>",
        "</s>",
        "<",
        ">",
        "caf\xC3\xA9",
        "\xE6\x97\xA5",
        "\xF0\x9F\x91\x8D",
        "\xF0\x9F\x8F\xBD",
        "\xE2\x80\x8D",
        "\xC2\xA0",
        "\xE3\x80\x80",
        "3",
        "14",
        ".",
        "!",
        "the",
        " cat",
        "X",
        "\xE2\x82",
        "\xF0\x9F",
        "\xC3",
        "\x80",
        "\xBF",
        "\xFF",
        "\xFE",
        "\xED\xA0\x80",
        "\xC0\xAF",
        "\xF4\x90\x80\x80",
        "\x00",
        "\x7F",
    };
    const size_t np = sizeof pieces / sizeof pieces[0];
    tu_rng rng;
    tu_rng_seed(&rng, 20240611);
    enum { ITER = 3000, MAXB = 96, CAP = 4 * MAXB };
    size_t out_of_vocab = 0, bad_utf8 = 0, not_idempotent = 0, not_roundtrip = 0, errors = 0;
    size_t bad_template = 0, n_valid = 0;
    char text[MAXB + 16], dec[4 * CAP];
    int32_t ids[CAP], ids2[CAP], row[64], mask[64];
    for (int it = 0; it < ITER; it++) {
        size_t len = 0;
        size_t target = (size_t)(tu_rng_next(&rng) % MAXB);
        while (len < target) {
            uint64_t r = tu_rng_next(&rng);
            if (r % 4 == 0) { /* raw random byte */
                text[len++] = (char)(r >> 8);
            } else {
                const char *p = pieces[(r >> 8) % np];
                size_t pl = p[0] ? strlen(p) : 1; /* the "\x00" piece is one NUL byte */
                if (len + pl > MAXB) break;
                memcpy(text + len, p, pl);
                len += pl;
            }
        }
        size_t n = 0, n2 = 0, dl = 0;
        st = tokenizer_encode(&t, text, len, ids, CAP, &n);
        if (st) {
            errors++;
            continue;
        }
        for (size_t i = 0; i < n; i++)
            if (ids[i] < 0 || ids[i] >= t.vocab_size || !tokenizer_id_to_token(&t, ids[i]))
                out_of_vocab++;
        st = tokenizer_decode(&t, ids, n, 0, dec, sizeof dec, &dl);
        if (st) {
            errors++;
            continue;
        }
        if (!valid_utf8((const unsigned char *)dec, dl)) bad_utf8++;
        int valid = valid_utf8((const unsigned char *)text, len);
        n_valid += valid;
        if (valid && !memchr(text, '<', len) && (dl != len || memcmp(dec, text, len)))
            not_roundtrip++;
        /* the decoded text is the sanitized input (up to lstrip'd spaces before <mask>) */
        if (!memchr(text, '<', len)) {
            st = tokenizer_encode(&t, dec, dl, ids2, CAP, &n2);
            if (st || n2 != n || memcmp(ids, ids2, n * sizeof *ids)) not_idempotent++;
        }
        size_t max_length = 2 + (size_t)(tu_rng_next(&rng) % 60), nr = 0;
        int pad = (int)(tu_rng_next(&rng) & 1);
        if (it & 1) {
            st = tokenizer_encode_single(&t, text, len, max_length, 1, pad, row, mask, &nr);
        } else {
            max_length += 2;
            size_t cut = len ? (size_t)(tu_rng_next(&rng) % len) : 0;
            st = tokenizer_encode_pair(&t, text, cut, text + cut, len - cut, max_length, 1, pad,
                                       row, mask, &nr);
        }
        if (st || nr > max_length || (pad && nr != max_length) || row[0] != t.cls_id)
            bad_template++;
        else
            for (size_t i = 0; i < nr; i++)
                if (row[i] < 0 || row[i] >= t.vocab_size || (mask[i] != 0 && mask[i] != 1))
                    bad_template++;
    }
    tu_check(errors == 0, "fuzz: %d encodes/decodes without error (%zu errors: %s)", ITER, errors,
             errors ? bt_error_message() : "none");
    tu_check(out_of_vocab == 0, "fuzz: all ids inside the vocabulary (%zu outside)", out_of_vocab);
    tu_check(bad_utf8 == 0, "fuzz: decode always gives valid UTF-8 (%zu invalid)", bad_utf8);
    tu_check(not_roundtrip == 0 && n_valid > 100,
             "fuzz: decode(encode(x)) == x for the %zu valid UTF-8 inputs without '<' (%zu bad)",
             n_valid, not_roundtrip);
    tu_check(not_idempotent == 0, "fuzz: encode(decode(encode(x))) == encode(x) (%zu bad)",
             not_idempotent);
    tu_check(bad_template == 0, "fuzz: templates keep their shape (%zu bad)", bad_template);
    tokenizer_free(&t);
}

int main(void) {
    test_loader_errors();
    test_missing_byte_symbol();
    test_fuzz();
    return tu_finish();
}
