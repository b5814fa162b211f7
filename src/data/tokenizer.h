/* tokenizer.h: RoBERTa byte-level BPE tokenizer, matching Hugging Face tokenizers
 * (RobertaTokenizerFast / tokenizer.json) id for id.
 *
 * What it does (model.md 5.2):
 *   1. Added tokens (<s> <pad> </s> <unk> <mask> ...) are found in the raw text before
 *      anything else, leftmost-longest, first those with normalized=false, then the
 *      normalized=true ones in the remaining pieces (there is no normalizer, so this only
 *      fixes the matching order). A token with lstrip=true (RoBERTa's <mask>) also swallows
 *      the whitespace to its left, never past the previous added token; rstrip likewise to
 *      its right. "a <mask> cat" -> `a`, `<mask>`, `Ġcat`.
 *   2. Each remaining piece is split with the GPT-2 pattern
 *        's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *      with full Unicode letter/number/White_Space classes (unicode_tables.h, Unicode
 *      14.0), hand-coded as a scanner (no regex engine). No prefix space is added.
 *   3. Each split's UTF-8 bytes are mapped to GPT-2's byte symbols and BPE merges are
 *      applied by rank: repeatedly merge the adjacent pair with the lowest rank, the
 *      leftmost on ties (HF's word.rs order; for merges produced by training this equals
 *      GPT-2's "merge every occurrence" loop, which scripts/bpe_reference.py implements).
 *   4. Templates: single `<s> A </s>`, pair `<s> A </s></s> B </s>`; truncation keeps the
 *      head of each sequence, for pairs HF's longest-first split (the longer one gets the
 *      odd token); padding on the right with <pad>, attention mask 0 there.
 *   5. Decode: token symbols back to bytes, then invalid UTF-8 replaced by U+FFFD
 *      (String::from_utf8_lossy, as HF's ByteLevel decoder). No clean-up of spaces before
 *      punctuation (transformers' clean_up_tokenization_spaces is a Python-side option).
 *
 * Files: tokenizer_load(dir) reads dir/tokenizer.json when present (BridgeTower repos carry
 * merges only there, as model.merges, "a b" strings or ["a", "b"] pairs), else
 * dir/vocab.json + dir/merges.txt; the five RoBERTa specials found in vocab.json become
 * added tokens (<mask> with lstrip), like RobertaTokenizer's defaults. Every load error
 * returns a bt_status with a message naming the file and the entry (key, index or line).
 *
 * Invalid UTF-8 input: every maximal invalid subpart (Unicode 15 ch. 3 "best practice", as
 * Python's bytes.decode("utf-8", "replace") does) becomes U+FFFD, bytes EF BF BD, which is
 * then classified and encoded like any other character. This is what a Python caller of
 * HF's tokenizer (which only takes str) gets. Encoding never fails on any byte string.
 * Unknown bytes: a byte whose symbol is missing from the vocabulary becomes the unk token
 * (model.unk_token, else "<unk>"; consecutive ones fused when model.fuse_unk); with no unk
 * token the byte is dropped, as HF does. RoBERTa's vocabulary has all 256 symbols.
 *
 * Thread safety: after load, any number of threads may call the encode/decode functions
 * on the same tokenizer concurrently. The word cache (word bytes -> ids, for words up to
 * TOKENIZER_CACHE_MAX_WORD bytes) is shared by all threads and LOCK-PROTECTED: 64 shards,
 * each with its own mutex, so loader workers rarely contend. A full shard is simply
 * cleared. Load, free and tokenizer_set_cache are not thread-safe.
 *
 * Deliberately not supported (load fails with BT_ERR_UNSUPPORTED naming the field):
 * normalizers, pre-tokenizers other than ByteLevel(add_prefix_space=false,
 * use_regex=true), BPE dropout / continuing_subword_prefix / end_of_word_suffix /
 * byte_fallback, added tokens with single_word=true. Offsets, overflowing tokens and
 * stride are not computed. Token type ids are all 0 for RoBERTa and are not returned. */
#ifndef BT_TOKENIZER_H
#define BT_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

/* Words longer than this (in bytes) are BPE'd every time instead of cached. */
#define TOKENIZER_CACHE_MAX_WORD 64
/* Largest token id accepted from a file (bounds the id -> token table). */
#define TOKENIZER_MAX_ID ((1 << 24) - 1)

struct tokenizer_impl;

typedef struct tokenizer {
    /* Read-only after load. */
    int32_t vocab_size; /* max id + 1 over model vocab and added tokens */
    int32_t cls_id;     /* <s>: from RobertaProcessing "cls" if present, else by content */
    int32_t sep_id;     /* </s>: likewise from "sep" */
    int32_t pad_id;     /* <pad> */
    int32_t unk_id;     /* -1 when the vocabulary has no unk token */
    int32_t mask_id;    /* <mask>, -1 when absent */
    struct tokenizer_impl *impl;
} tokenizer;

/* Loads model_dir/tokenizer.json if it exists, else model_dir/vocab.json +
 * model_dir/merges.txt. On failure *t is left freed (tokenizer_free is harmless). */
bt_status tokenizer_load(tokenizer *t, const char *model_dir);
/* The two formats, by path. */
bt_status tokenizer_load_json(tokenizer *t, const char *tokenizer_json_path);
bt_status tokenizer_load_files(tokenizer *t, const char *vocab_json_path,
                               const char *merges_txt_path);
void tokenizer_free(tokenizer *t);

/* Turns the shared word cache on (default) or off; clearing it too. Not thread-safe: call
 * before handing the tokenizer to other threads (benchmarks use it for cold timings). */
void tokenizer_set_cache(tokenizer *t, int enabled);

/* Raw BPE ids of text[0..len) (no <s>/</s>; added tokens inside the text are
 * recognized). *n = the number of ids the text produces. When *n > cap only the first cap
 * ids are stored and BT_ERR_ARG is returned. text may contain NUL bytes and may be NULL
 * when len is 0. */
bt_status tokenizer_encode(const tokenizer *t, const char *text, size_t len, int32_t *ids,
                           size_t cap, size_t *n);

/* `<s> text </s>` into ids (max_length,) and attention_mask (max_length,) (mask may be
 * NULL). max_length >= 2. truncate: keep the first max_length-2 text tokens; otherwise a
 * text that does not fit is BT_ERR_ARG. pad_to_max: fill up to max_length with pad_id and
 * mask 0. *n = entries written (max_length when padded). */
bt_status tokenizer_encode_single(const tokenizer *t, const char *text, size_t len,
                                  size_t max_length, int truncate, int pad_to_max, int32_t *ids,
                                  int32_t *attention_mask, size_t *n);

/* `<s> a </s></s> b </s>`, max_length >= 4; truncation is HF's longest-first over
 * max_length-4 content tokens. Otherwise as tokenizer_encode_single. */
bt_status tokenizer_encode_pair(const tokenizer *t, const char *a, size_t a_len, const char *b,
                                size_t b_len, size_t max_length, int truncate, int pad_to_max,
                                int32_t *ids, int32_t *attention_mask, size_t *n);

/* Text of ids[0..n): skip_special drops special added tokens (<s> <pad> </s> <unk>
 * <mask>). out gets a NUL-terminated, valid UTF-8 string; *out_len (may be NULL) = its
 * length without the NUL, also when out is too small (then BT_ERR_ARG; cap counts the NUL).
 * An id outside the vocabulary is BT_ERR_ARG naming its position. */
bt_status tokenizer_decode(const tokenizer *t, const int32_t *ids, size_t n, int skip_special,
                           char *out, size_t cap, size_t *out_len);

/* Id of a token string (added tokens first, then the model vocabulary; the string is in
 * the byte-symbol alphabet, e.g. "Ġcat"), or -1. */
int32_t tokenizer_token_to_id(const tokenizer *t, const char *token);
/* Token string of an id (byte-symbol alphabet), or NULL when the id has none. */
const char *tokenizer_id_to_token(const tokenizer *t, int32_t id);

#endif
