/* tokenizer.c: RoBERTa byte-level BPE (see tokenizer.h for the contract).
 *
 * Layout of this file: UTF-8 helpers; hash maps (token string -> id, merge pair -> rank);
 * the shared word cache; loading (tokenizer.json, vocab.json + merges.txt); the encode
 * pipeline (added tokens -> GPT-2 pre-tokenizer scanner -> BPE); templates; decode.
 *
 * Deliberately not here: a regex engine (the GPT-2 pattern is a fixed scanner below),
 * offsets, normalizers, BPE dropout, training (scripts/train_bpe.py). */
#include "data/tokenizer.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fileio.h"
#include "json_util.h"
#include "data/unicode_tables.h"

/* ---------------------------------------------------------------------------------------
 * UTF-8
 * ------------------------------------------------------------------------------------- */

/* Length of the well-formed UTF-8 sequence at s[i] (Unicode Table 3-7), or 0 when there is
 * none; then *bad = the length of the maximal invalid subpart (>= 1), which becomes one
 * U+FFFD, as Python's decode(errors="replace") and Rust's from_utf8_lossy do. */
static size_t utf8_seq(const uint8_t *s, size_t len, size_t i, size_t *bad) {
    uint8_t b = s[i];
    if (b < 0x80) return 1;
    size_t need;
    uint8_t lo = 0x80, hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) {
        need = 1;
    } else if (b == 0xE0) {
        need = 2;
        lo = 0xA0; /* no overlongs */
    } else if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) {
        need = 2;
    } else if (b == 0xED) {
        need = 2;
        hi = 0x9F; /* no surrogates */
    } else if (b == 0xF0) {
        need = 3;
        lo = 0x90;
    } else if (b >= 0xF1 && b <= 0xF3) {
        need = 3;
    } else if (b == 0xF4) {
        need = 3;
        hi = 0x8F; /* nothing above U+10FFFF */
    } else {
        *bad = 1;
        return 0;
    }
    for (size_t k = 1; k <= need; k++) {
        if (i + k >= len || s[i + k] < lo || s[i + k] > hi) {
            *bad = k;
            return 0;
        }
        lo = 0x80;
        hi = 0xBF;
    }
    return need + 1;
}

static int utf8_valid(const uint8_t *s, size_t len) {
    size_t i = 0, bad;
    while (i < len) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        size_t l = utf8_seq(s, len, i, &bad);
        if (l == 0) return 0;
        i += l;
    }
    return 1;
}

/* Replaces each maximal invalid subpart by EF BF BD. out holds 3*len bytes (or is NULL to
 * only count). Returns the output length. */
static size_t utf8_sanitize(const uint8_t *s, size_t len, uint8_t *out) {
    size_t i = 0, o = 0, bad;
    while (i < len) {
        size_t l = utf8_seq(s, len, i, &bad);
        if (l) {
            if (out) memcpy(out + o, s + i, l);
            o += l;
            i += l;
        } else {
            if (out) memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i += bad;
        }
    }
    return o;
}

/* Code point at s[i] of VALID UTF-8; *adv = its length. */
static inline uint32_t utf8_decode(const uint8_t *s, size_t i, size_t *adv) {
    uint8_t b = s[i];
    if (b < 0x80) {
        *adv = 1;
        return b;
    }
    if (b < 0xE0) {
        *adv = 2;
        return ((uint32_t)(b & 0x1F) << 6) | (s[i + 1] & 0x3F);
    }
    if (b < 0xF0) {
        *adv = 3;
        return ((uint32_t)(b & 0x0F) << 12) | ((uint32_t)(s[i + 1] & 0x3F) << 6) |
               (s[i + 2] & 0x3F);
    }
    *adv = 4;
    return ((uint32_t)(b & 0x07) << 18) | ((uint32_t)(s[i + 1] & 0x3F) << 12) |
           ((uint32_t)(s[i + 2] & 0x3F) << 6) | (s[i + 3] & 0x3F);
}

static size_t utf8_encode(uint32_t cp, uint8_t *out) {
    if (cp < 0x80) {
        out[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (uint8_t)(0xC0 | (cp >> 6));
        out[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (uint8_t)(0xE0 | (cp >> 12));
        out[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (uint8_t)(0xF0 | (cp >> 18));
    out[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

static inline int is_space_cp(uint32_t cp) {
    return unicode_class(cp) == UC_SPACE;
}

/* GPT-2's bytes_to_unicode: printable Latin-1 bytes ('!'..'~', 0xA1..0xAC, 0xAE..0xFF) are
 * their own symbol; the other 68 bytes map to U+0100, U+0101, ... in byte order (space ->
 * U+0120 'Ġ'). All symbols are < BYTE_SYMBOL_CP_END. */
enum { BYTE_SYMBOL_CP_END = 0x144 };
static uint32_t byte_symbol(int b) {
    int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    if (printable) return (uint32_t)b;
    int n = 0; /* rank of b among the non-printable bytes */
    for (int c = 0; c < b; c++) {
        if (!((c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE))) n++;
    }
    return 256u + (uint32_t)n;
}

/* Quotes a token for an error message: at most 48 bytes, escaped by bt_escape_text (control
 * bytes and bytes that are not UTF-8 as \xNN: never raw to the terminal). */
static const char *quote(const char *s, size_t len, char *buf, size_t cap) {
    buf[0] = '"';
    bt_escape_text(buf + 1, cap - 6, s, len > 48 ? 48 : len);
    size_t o = strlen(buf);
    snprintf(buf + o, cap - o, "%s\"", len > 48 ? "..." : "");
    return buf;
}
#define QUOTE(s, len) quote((s), (len), (char[128]){0}, 128)

/* ---------------------------------------------------------------------------------------
 * Hash maps
 * ------------------------------------------------------------------------------------- */

static uint64_t hash_bytes(const void *p, size_t len) {
    const uint8_t *s = p;
    uint64_t h = 14695981039346656037ull; /* FNV-1a, then a final mix for the high bits */
    for (size_t i = 0; i < len; i++)
        h = (h ^ s[i]) * 1099511628211ull;
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 32;
    return h;
}

/* Token string -> id. Entries own their strings (NUL-terminated copies). */
typedef struct str_entry {
    char *s;
    uint32_t len;
    int32_t id;
} str_entry;

typedef struct str_map {
    str_entry *e; /* (count) */
    size_t count, e_cap;
    uint32_t *slot; /* (cap): entry index + 1, 0 = empty */
    size_t cap;     /* power of two */
} str_map;

static void str_map_free(str_map *m) {
    for (size_t i = 0; i < m->count; i++)
        free(m->e[i].s);
    free(m->e);
    free(m->slot);
    memset(m, 0, sizeof *m);
}

static size_t str_map_probe(const str_map *m, const char *s, size_t len) {
    size_t i = (size_t)hash_bytes(s, len) & (m->cap - 1);
    for (;;) {
        uint32_t k = m->slot[i];
        if (k == 0) return i;
        const str_entry *e = &m->e[k - 1];
        if (e->len == len && memcmp(e->s, s, len) == 0) return i;
        i = (i + 1) & (m->cap - 1);
    }
}

static int32_t str_map_get(const str_map *m, const char *s, size_t len) {
    if (m->cap == 0) return -1;
    uint32_t k = m->slot[str_map_probe(m, s, len)];
    return k ? m->e[k - 1].id : -1;
}

/* Returns 0 when added, 1 when the string was already present (map unchanged), -1 when out
 * of memory (map unchanged). */
static int str_map_put(str_map *m, const char *s, size_t len, int32_t id) {
    if ((m->count + 1) * 2 > m->cap) {
        size_t ncap = m->cap ? m->cap * 2 : 1024;
        uint32_t *ns = calloc(ncap, sizeof *ns);
        if (!ns) return -1;
        free(m->slot);
        m->slot = ns;
        m->cap = ncap;
        for (size_t k = 0; k < m->count; k++)
            m->slot[str_map_probe(m, m->e[k].s, m->e[k].len)] = (uint32_t)k + 1;
    }
    size_t i = str_map_probe(m, s, len);
    if (m->slot[i]) return 1;
    if (m->count == m->e_cap) {
        size_t ncap = m->e_cap ? m->e_cap * 2 : 1024;
        str_entry *ne = realloc(m->e, ncap * sizeof *m->e);
        if (!ne) return -1;
        m->e = ne;
        m->e_cap = ncap;
    }
    char *copy = malloc(len + 1);
    if (!copy) return -1;
    memcpy(copy, s, len);
    copy[len] = 0;
    m->e[m->count] = (str_entry){copy, (uint32_t)len, id};
    m->slot[i] = (uint32_t)++m->count;
    return 0;
}

/* (left id, right id) -> (rank, merged id). Ids are < 2^24, so the key never equals
 * PAIR_EMPTY. */
#define PAIR_EMPTY UINT64_MAX
typedef struct pair_map {
    uint64_t *key; /* (cap) */
    int32_t *rank; /* (cap) */
    int32_t *out;  /* (cap) merged id */
    size_t count, cap;
} pair_map;

static inline uint64_t pair_key(int32_t a, int32_t b) {
    return ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
}
static inline size_t pair_slot(uint64_t k, size_t cap) {
    return (size_t)((k * 0x9E3779B97F4A7C15ull) >> 20) & (cap - 1);
}

static void pair_map_free(pair_map *m) {
    free(m->key);
    free(m->rank);
    free(m->out);
    memset(m, 0, sizeof *m);
}

/* 0, or -1 when out of memory (map unchanged). */
static int pair_map_put(pair_map *m, int32_t a, int32_t b, int32_t rank, int32_t out) {
    if ((m->count + 1) * 2 > m->cap) {
        size_t ncap = m->cap ? m->cap * 2 : 1024;
        pair_map n = {malloc(ncap * sizeof(uint64_t)), malloc(ncap * sizeof(int32_t)),
                      malloc(ncap * sizeof(int32_t)), m->count, ncap};
        if (!n.key || !n.rank || !n.out) {
            pair_map_free(&n);
            return -1;
        }
        for (size_t i = 0; i < ncap; i++)
            n.key[i] = PAIR_EMPTY;
        for (size_t i = 0; i < m->cap; i++) {
            if (m->key[i] == PAIR_EMPTY) continue;
            size_t j = pair_slot(m->key[i], ncap);
            while (n.key[j] != PAIR_EMPTY)
                j = (j + 1) & (ncap - 1);
            n.key[j] = m->key[i];
            n.rank[j] = m->rank[i];
            n.out[j] = m->out[i];
        }
        pair_map_free(m);
        *m = n;
    }
    uint64_t k = pair_key(a, b);
    size_t j = pair_slot(k, m->cap);
    while (m->key[j] != PAIR_EMPTY && m->key[j] != k)
        j = (j + 1) & (m->cap - 1);
    if (m->key[j] == PAIR_EMPTY) m->count++;
    /* A repeated merge takes the later rank, as HF's HashMap built from the list does. */
    m->key[j] = k;
    m->rank[j] = rank;
    m->out[j] = out;
    return 0;
}

/* Returns 1 and fills rank/out when (a, b) is a merge. */
static inline int pair_map_get(const pair_map *m, int32_t a, int32_t b, int32_t *rank,
                               int32_t *out) {
    if (m->cap == 0) return 0;
    uint64_t k = pair_key(a, b);
    size_t j = pair_slot(k, m->cap);
    for (;;) {
        if (m->key[j] == k) {
            *rank = m->rank[j];
            *out = m->out[j];
            return 1;
        }
        if (m->key[j] == PAIR_EMPTY) return 0;
        j = (j + 1) & (m->cap - 1);
    }
}

/* ---------------------------------------------------------------------------------------
 * Word cache: shared, 64 shards each behind its own mutex (see tokenizer.h).
 * ------------------------------------------------------------------------------------- */

enum { CACHE_SHARDS = 64, CACHE_SLOTS = 512, CACHE_ARENA = 32 * 1024 };

typedef struct cache_slot {
    uint64_t hash; /* 0 = empty (stored hashes have the low bit set) */
    uint32_t off;  /* into arena: key bytes, then n_ids int32 */
    uint16_t klen;
    uint16_t n_ids;
} cache_slot;

typedef struct cache_shard {
    pthread_mutex_t mu;
    uint32_t count; /* entries; the shard is cleared when it would pass CACHE_SLOTS/2 */
    uint32_t used;  /* arena bytes */
    cache_slot slot[CACHE_SLOTS];
    uint8_t arena[CACHE_ARENA];
} cache_shard;

static size_t cache_find(const cache_shard *sh, uint64_t h, const uint8_t *w, size_t len) {
    size_t i = (size_t)(h >> 1) & (CACHE_SLOTS - 1);
    for (;;) {
        const cache_slot *c = &sh->slot[i];
        if (c->hash == 0) return i;
        if (c->hash == h && c->klen == len && memcmp(sh->arena + c->off, w, len) == 0) return i;
        i = (i + 1) & (CACHE_SLOTS - 1);
    }
}

/* Copies the cached ids of word w into ids (room for TOKENIZER_CACHE_MAX_WORD); returns
 * their count, or -1 on a miss. */
static int cache_get(cache_shard *shards, uint64_t h, const uint8_t *w, size_t len, int32_t *ids) {
    cache_shard *sh = &shards[h >> 58];
    int n = -1;
    pthread_mutex_lock(&sh->mu);
    const cache_slot *c = &sh->slot[cache_find(sh, h, w, len)];
    if (c->hash != 0) {
        n = c->n_ids;
        memcpy(ids, sh->arena + c->off + c->klen, (size_t)n * sizeof(int32_t));
    }
    pthread_mutex_unlock(&sh->mu);
    return n;
}

static void cache_put(cache_shard *shards, uint64_t h, const uint8_t *w, size_t len,
                      const int32_t *ids, size_t n_ids) {
    cache_shard *sh = &shards[h >> 58];
    size_t need = len + n_ids * sizeof(int32_t);
    pthread_mutex_lock(&sh->mu);
    if (sh->count + 1 > CACHE_SLOTS / 2 || sh->used + need > CACHE_ARENA) {
        memset(sh->slot, 0, sizeof sh->slot); /* full: start over (cheap, rare) */
        sh->count = 0;
        sh->used = 0;
    }
    cache_slot *c = &sh->slot[cache_find(sh, h, w, len)];
    if (c->hash == 0) { /* another thread may have inserted it meanwhile */
        c->hash = h;
        c->off = sh->used;
        c->klen = (uint16_t)len;
        c->n_ids = (uint16_t)n_ids;
        memcpy(sh->arena + sh->used, w, len);
        memcpy(sh->arena + sh->used + len, ids, n_ids * sizeof(int32_t));
        sh->used += (uint32_t)need;
        sh->count++;
    }
    pthread_mutex_unlock(&sh->mu);
}

/* ---------------------------------------------------------------------------------------
 * The tokenizer's private state
 * ------------------------------------------------------------------------------------- */

typedef struct added_token {
    char *content; /* (len) */
    size_t len;
    int32_t id;
    int lstrip, rstrip, normalized, special;
} added_token;

struct tokenizer_impl {
    str_map vocab; /* model vocabulary */
    pair_map merges;
    added_token *added; /* (n_added) */
    size_t n_added;
    uint8_t first_byte[2][256];          /* [normalized][b]: some added token starts with byte b */
    int has_pass[2];                     /* [normalized]: some added token in that pass */
    int32_t byte_id[256];                /* symbol id of each byte, -1 when the vocab lacks it */
    int16_t cp_byte[BYTE_SYMBOL_CP_END]; /* byte of a symbol code point, -1 if none */
    const char **id_str;                 /* (vocab_size) token text, NULL for ids without one */
    uint32_t *id_len;                    /* (vocab_size) */
    uint8_t *is_special;                 /* (vocab_size) */
    int32_t unk_bytes;                   /* id for bytes missing from the vocab, -1: drop them */
    int fuse_unk, ignore_merges;
    char *unk_token;            /* model.unk_token (tokenizer.json), or NULL */
    int32_t json_cls, json_sep; /* from RobertaProcessing, -1 when absent */
    int cache_enabled;
    cache_shard *shards; /* (CACHE_SHARDS) */
};

void tokenizer_free(tokenizer *t) {
    if (!t) return;
    struct tokenizer_impl *m = t->impl;
    if (m) {
        str_map_free(&m->vocab);
        pair_map_free(&m->merges);
        for (size_t i = 0; i < m->n_added; i++)
            free(m->added[i].content);
        free(m->added);
        free(m->id_str);
        free(m->id_len);
        free(m->is_special);
        free(m->unk_token);
        if (m->shards) {
            for (int i = 0; i < CACHE_SHARDS; i++)
                pthread_mutex_destroy(&m->shards[i].mu);
            free(m->shards);
        }
        free(m);
    }
    memset(t, 0, sizeof *t);
}

void tokenizer_set_cache(tokenizer *t, int enabled) {
    BT_ASSERT(t && t->impl);
    for (int i = 0; i < CACHE_SHARDS; i++) {
        memset(t->impl->shards[i].slot, 0, sizeof t->impl->shards[i].slot);
        t->impl->shards[i].count = 0;
        t->impl->shards[i].used = 0;
    }
    t->impl->cache_enabled = enabled != 0;
}

int32_t tokenizer_token_to_id(const tokenizer *t, const char *token) {
    BT_ASSERT(t && t->impl && token);
    const struct tokenizer_impl *m = t->impl;
    size_t len = strlen(token);
    for (size_t i = 0; i < m->n_added; i++)
        if (m->added[i].len == len && memcmp(m->added[i].content, token, len) == 0)
            return m->added[i].id;
    return str_map_get(&m->vocab, token, len);
}

const char *tokenizer_id_to_token(const tokenizer *t, int32_t id) {
    BT_ASSERT(t && t->impl);
    if (id < 0 || id >= t->vocab_size) return NULL;
    return t->impl->id_str[id];
}

/* ---------------------------------------------------------------------------------------
 * Loading
 * ------------------------------------------------------------------------------------- */

static bt_status read_whole_file(const char *path, char **data, size_t *len) {
    FILE *f;
    bt_status ost = bt_fopen_regular(path, "tokenizer file", &f);
    if (ost != BT_OK) return ost;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    if (!buf) {
        fclose(f);
        return bt_fail(BT_ERR_NOMEM, "%s: out of memory", path);
    }
    for (;;) {
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (n < cap) break;
        if (cap >= ((size_t)1 << 30)) {
            fclose(f);
            free(buf);
            return bt_fail(BT_ERR_FORMAT, "%s: larger than 1 GiB, not a tokenizer file", path);
        }
        cap *= 2;
        char *grown = realloc(buf, cap + 1);
        if (!grown) {
            fclose(f);
            free(buf);
            return bt_fail(BT_ERR_NOMEM, "%s: out of memory reading %zu bytes", path, cap);
        }
        buf = grown;
    }
    int err = ferror(f);
    fclose(f);
    if (err) {
        free(buf);
        return bt_fail(BT_ERR_IO, "%s: read error", path);
    }
    buf[n] = 0;
    *data = buf;
    *len = n;
    return BT_OK;
}

static bt_status parse_json_file(const char *path, cJSON **out) {
    char *buf;
    size_t len;
    bt_status st = read_whole_file(path, &buf, &len);
    if (st) return st;
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(buf, len, &end, 0);
    size_t off = end ? (size_t)(end - buf) : 0;
    if (j) { /* only whitespace may follow the value */
        while (off < len &&
               (buf[off] == ' ' || buf[off] == '\t' || buf[off] == '\r' || buf[off] == '\n'))
            off++;
        if (off < len) {
            cJSON_Delete(j);
            j = NULL;
        }
    }
    if (!j) {
        size_t line = 1;
        for (size_t i = 0; i < off && i < len; i++)
            line += buf[i] == '\n';
        free(buf);
        return bt_fail(BT_ERR_FORMAT, "%s: malformed JSON at byte %zu (line %zu)%s", path, off,
                       line, len == 0 ? ": the file is empty" : "");
    }
    st = bt_json_check(j, buf, len, path);
    free(buf);
    if (st) {
        cJSON_Delete(j);
        return st;
    }
    *out = j;
    return BT_OK;
}

/* An integer id in [0, TOKENIZER_MAX_ID], or -1. */
static int32_t json_id(const cJSON *j) {
    if (!cJSON_IsNumber(j)) return -1;
    double d = j->valuedouble;
    if (!(d >= 0 && d <= TOKENIZER_MAX_ID) || d != floor(d)) return -1;
    return (int32_t)d;
}

static bt_status load_vocab(struct tokenizer_impl *m, const cJSON *v, const char *path,
                            const char *where) {
    if (!cJSON_IsObject(v))
        return bt_fail(BT_ERR_FORMAT, "%s: %s: expected an object {\"token\": id}, got %s", path,
                       where, bt_json_type_name(v));
    for (const cJSON *c = v->child; c; c = c->next) {
        const char *key = c->string ? c->string : "";
        int32_t id = json_id(c);
        if (id < 0)
            return bt_fail(BT_ERR_FORMAT,
                           "%s: %s entry %s: expected an integer id in [0, %d], got %s", path,
                           where, QUOTE(key, strlen(key)), TOKENIZER_MAX_ID, bt_json_type_name(c));
        int put = str_map_put(&m->vocab, key, strlen(key), id);
        if (put < 0)
            return bt_fail(BT_ERR_NOMEM, "%s: out of memory after %zu vocabulary entries", path,
                           m->vocab.count);
        if (put)
            return bt_fail(BT_ERR_FORMAT, "%s: %s: token %s appears twice", path, where,
                           QUOTE(key, strlen(key)));
    }
    if (m->vocab.count == 0) return bt_fail(BT_ERR_FORMAT, "%s: %s is empty", path, where);
    return BT_OK;
}

/* One merge "a b" of rank `rank`; `what` names the entry in messages. */
static bt_status add_merge(struct tokenizer_impl *m, const char *a, size_t alen, const char *b,
                           size_t blen, int32_t rank, const char *path, const char *what) {
    int32_t ia = str_map_get(&m->vocab, a, alen), ib = str_map_get(&m->vocab, b, blen);
    if (ia < 0 || ib < 0) {
        const char *s = ia < 0 ? a : b;
        size_t l = ia < 0 ? alen : blen;
        return bt_fail(BT_ERR_FORMAT, "%s: %s: token %s is not in the vocabulary", path, what,
                       QUOTE(s, l));
    }
    char small[256];
    char *ab = alen + blen <= sizeof small ? small : malloc(alen + blen);
    if (!ab) return bt_fail(BT_ERR_NOMEM, "%s: %s: out of memory", path, what);
    memcpy(ab, a, alen);
    memcpy(ab + alen, b, blen);
    int32_t iab = str_map_get(&m->vocab, ab, alen + blen);
    bt_status st = BT_OK;
    if (iab < 0)
        st = bt_fail(BT_ERR_FORMAT, "%s: %s: merged token %s is not in the vocabulary", path, what,
                     QUOTE(ab, alen + blen));
    else if (pair_map_put(&m->merges, ia, ib, rank, iab) != 0)
        st = bt_fail(BT_ERR_NOMEM, "%s: %s: out of memory after %zu merges", path, what,
                     m->merges.count);
    if (ab != small) free(ab);
    return st;
}

/* Splits "a b" at its single space. */
static bt_status add_merge_line(struct tokenizer_impl *m, const char *s, size_t len, int32_t rank,
                                const char *path, const char *what) {
    const char *sp = memchr(s, ' ', len);
    if (!sp || sp == s || sp == s + len - 1 || memchr(sp + 1, ' ', len - (size_t)(sp - s) - 1))
        return bt_fail(BT_ERR_FORMAT, "%s: %s: expected two tokens separated by one space, got %s",
                       path, what, QUOTE(s, len));
    return add_merge(m, s, (size_t)(sp - s), sp + 1, len - (size_t)(sp - s) - 1, rank, path, what);
}

static bt_status load_merges_txt(struct tokenizer_impl *m, const char *path) {
    char *buf;
    size_t len;
    bt_status st = read_whole_file(path, &buf, &len);
    if (st) return st;
    size_t pos = 0, line_no = 0;
    int32_t rank = 0;
    while (pos < len && !st) {
        const char *nl = memchr(buf + pos, '\n', len - pos);
        size_t end = nl ? (size_t)(nl - buf) : len;
        size_t l = end - pos;
        line_no++;
        if (l > 0 && buf[pos + l - 1] == '\r') l--;
        if (!(l >= 8 && memcmp(buf + pos, "#version", 8) == 0)) {
            if (rank >= TOKENIZER_MAX_ID) {
                st = bt_fail(BT_ERR_FORMAT, "%s: more than %d merges", path, TOKENIZER_MAX_ID);
                break;
            }
            char what[64];
            snprintf(what, sizeof what, "line %zu", line_no);
            st = add_merge_line(m, buf + pos, l, rank++, path, what);
        }
        pos = end + 1;
    }
    free(buf);
    return st;
}

static bt_status load_merges_json(struct tokenizer_impl *m, const cJSON *arr, const char *path) {
    if (!cJSON_IsArray(arr))
        return bt_fail(BT_ERR_FORMAT, "%s: model.merges: expected an array, got %s", path,
                       bt_json_type_name(arr));
    int32_t rank = 0;
    for (const cJSON *c = arr->child; c; c = c->next, rank++) {
        char what[64];
        snprintf(what, sizeof what, "model.merges[%d]", (int)rank);
        if (rank >= TOKENIZER_MAX_ID)
            return bt_fail(BT_ERR_FORMAT, "%s: more than %d merges", path, TOKENIZER_MAX_ID);
        bt_status st;
        if (cJSON_IsString(c)) {
            st = add_merge_line(m, c->valuestring, strlen(c->valuestring), rank, path, what);
        } else if (cJSON_IsArray(c) && cJSON_GetArraySize(c) == 2 && cJSON_IsString(c->child) &&
                   cJSON_IsString(c->child->next)) {
            const char *a = c->child->valuestring, *b = c->child->next->valuestring;
            st = add_merge(m, a, strlen(a), b, strlen(b), rank, path, what);
        } else {
            st = bt_fail(BT_ERR_FORMAT,
                         "%s: %s: expected \"left right\" or [\"left\", \"right\"], got %s", path,
                         what, bt_json_type_name(c));
        }
        if (st) return st;
    }
    return BT_OK;
}

/* BT_OK or BT_ERR_NOMEM (naming `path`). */
static bt_status add_added(struct tokenizer_impl *m, const char *content, int32_t id, int lstrip,
                           int rstrip, int normalized, int special, const char *path) {
    added_token *grown = realloc(m->added, (m->n_added + 1) * sizeof *m->added);
    if (!grown) return bt_fail(BT_ERR_NOMEM, "%s: out of memory for added tokens", path);
    m->added = grown;
    size_t len = strlen(content);
    char *copy = malloc(len + 1);
    if (!copy) return bt_fail(BT_ERR_NOMEM, "%s: out of memory for added tokens", path);
    added_token *a = &m->added[m->n_added++];
    a->content = copy;
    memcpy(a->content, content, len + 1);
    a->len = len;
    a->id = id;
    a->lstrip = lstrip;
    a->rstrip = rstrip;
    a->normalized = normalized;
    a->special = special;
    return BT_OK;
}

/* Optional boolean field; *out keeps its default when absent or null. */
static bt_status json_bool(const cJSON *obj, const char *key, int *out, const char *path,
                           const char *where) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!j || cJSON_IsNull(j)) return BT_OK;
    if (!cJSON_IsBool(j))
        return bt_fail(BT_ERR_FORMAT, "%s: %s.%s: expected true or false, got %s", path, where, key,
                       bt_json_type_name(j));
    *out = cJSON_IsTrue(j);
    return BT_OK;
}

static bt_status load_added_tokens(struct tokenizer_impl *m, const cJSON *arr, const char *path) {
    if (!arr || cJSON_IsNull(arr)) return BT_OK;
    if (!cJSON_IsArray(arr))
        return bt_fail(BT_ERR_FORMAT, "%s: added_tokens: expected an array, got %s", path,
                       bt_json_type_name(arr));
    int k = 0;
    for (const cJSON *c = arr->child; c; c = c->next, k++) {
        char where[48];
        snprintf(where, sizeof where, "added_tokens[%d]", k);
        if (!cJSON_IsObject(c))
            return bt_fail(BT_ERR_FORMAT, "%s: %s: expected an object, got %s", path, where,
                           bt_json_type_name(c));
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(c, "content");
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(c, "id");
        if (!cJSON_IsString(content) || content->valuestring[0] == 0)
            return bt_fail(BT_ERR_FORMAT, "%s: %s.content: expected a non-empty string, got %s",
                           path, where, bt_json_type_name(content));
        if (json_id(id) < 0)
            return bt_fail(BT_ERR_FORMAT, "%s: %s.id: expected an integer in [0, %d], got %s", path,
                           where, TOKENIZER_MAX_ID, bt_json_type_name(id));
        /* Defaults of HF's AddedToken when a field is missing. */
        int special = 0, single_word = 0, lstrip = 0, rstrip = 0, normalized;
        bt_status st = json_bool(c, "special", &special, path, where);
        normalized = !special;
        if (!st) st = json_bool(c, "single_word", &single_word, path, where);
        if (!st) st = json_bool(c, "lstrip", &lstrip, path, where);
        if (!st) st = json_bool(c, "rstrip", &rstrip, path, where);
        if (!st) st = json_bool(c, "normalized", &normalized, path, where);
        if (st) return st;
        if (single_word)
            return bt_fail(BT_ERR_UNSUPPORTED,
                           "%s: %s (%s): single_word=true added tokens are not supported", path,
                           where, QUOTE(content->valuestring, strlen(content->valuestring)));
        bt_status ast = add_added(m, content->valuestring, json_id(id), lstrip, rstrip,
                                  normalized, special, path);
        if (ast) return ast;
    }
    return BT_OK;
}

/* The "RobertaProcessing" cls/sep entries: ["<s>", 0]. */
static bt_status json_special_pair(const cJSON *pp, const char *key, int32_t *id,
                                   const char *path) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(pp, key);
    if (!j) return BT_OK;
    if (!cJSON_IsArray(j) || cJSON_GetArraySize(j) != 2 || !cJSON_IsString(j->child) ||
        json_id(j->child->next) < 0)
        return bt_fail(BT_ERR_FORMAT, "%s: post_processor.%s: expected [\"token\", id], got %s",
                       path, key, bt_json_type_name(j));
    *id = json_id(j->child->next);
    return BT_OK;
}

/* Checks the tokenizer.json pipeline is the one implemented here. */
static bt_status check_pipeline(struct tokenizer_impl *m, const cJSON *root, const char *path) {
    const cJSON *norm = cJSON_GetObjectItemCaseSensitive(root, "normalizer");
    if (norm && !cJSON_IsNull(norm))
        return bt_fail(BT_ERR_UNSUPPORTED, "%s: normalizer: only null is supported", path);

    const cJSON *pre = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(pre, "type");
    if (!cJSON_IsObject(pre) || !cJSON_IsString(type) || strcmp(type->valuestring, "ByteLevel"))
        return bt_fail(BT_ERR_UNSUPPORTED,
                       "%s: pre_tokenizer: expected {\"type\": \"ByteLevel\", ...}", path);
    const cJSON *aps = cJSON_GetObjectItemCaseSensitive(pre, "add_prefix_space");
    if (!cJSON_IsFalse(aps))
        return bt_fail(BT_ERR_UNSUPPORTED,
                       "%s: pre_tokenizer.add_prefix_space: only false is supported (RoBERTa)",
                       path);
    const cJSON *use_regex = cJSON_GetObjectItemCaseSensitive(pre, "use_regex");
    if (use_regex && !cJSON_IsTrue(use_regex))
        return bt_fail(BT_ERR_UNSUPPORTED, "%s: pre_tokenizer.use_regex: only true is supported",
                       path);

    const cJSON *pp = cJSON_GetObjectItemCaseSensitive(root, "post_processor");
    if (pp && !cJSON_IsNull(pp)) {
        type = cJSON_GetObjectItemCaseSensitive(pp, "type");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "RobertaProcessing"))
            return bt_fail(BT_ERR_UNSUPPORTED,
                           "%s: post_processor: only RobertaProcessing (or null) is supported",
                           path);
        bt_status st = json_special_pair(pp, "cls", &m->json_cls, path);
        if (!st) st = json_special_pair(pp, "sep", &m->json_sep, path);
        if (st) return st;
    }
    const cJSON *dec = cJSON_GetObjectItemCaseSensitive(root, "decoder");
    if (dec && !cJSON_IsNull(dec)) {
        type = cJSON_GetObjectItemCaseSensitive(dec, "type");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "ByteLevel"))
            return bt_fail(BT_ERR_UNSUPPORTED, "%s: decoder: only ByteLevel (or null) is supported",
                           path);
    }

    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    type = cJSON_GetObjectItemCaseSensitive(model, "type");
    if (type && (!cJSON_IsString(type) || strcmp(type->valuestring, "BPE")))
        return bt_fail(BT_ERR_UNSUPPORTED, "%s: model.type: only \"BPE\" is supported", path);
    const cJSON *dropout = cJSON_GetObjectItemCaseSensitive(model, "dropout");
    if (dropout && !cJSON_IsNull(dropout) &&
        !(cJSON_IsNumber(dropout) && dropout->valuedouble == 0.0))
        return bt_fail(BT_ERR_UNSUPPORTED, "%s: model.dropout: only null is supported", path);
    static const char *const empty_only[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        const cJSON *j = cJSON_GetObjectItemCaseSensitive(model, empty_only[i]);
        if (j && !cJSON_IsNull(j) && !(cJSON_IsString(j) && j->valuestring[0] == 0))
            return bt_fail(BT_ERR_UNSUPPORTED, "%s: model.%s: only \"\" or null is supported", path,
                           empty_only[i]);
    }
    int byte_fallback = 0;
    bt_status st = json_bool(model, "byte_fallback", &byte_fallback, path, "model");
    if (!st && byte_fallback)
        st = bt_fail(BT_ERR_UNSUPPORTED, "%s: model.byte_fallback: only false is supported", path);
    if (!st) st = json_bool(model, "fuse_unk", &m->fuse_unk, path, "model");
    if (!st) st = json_bool(model, "ignore_merges", &m->ignore_merges, path, "model");
    if (st) return st;
    const cJSON *unk = cJSON_GetObjectItemCaseSensitive(model, "unk_token");
    if (unk && !cJSON_IsNull(unk)) {
        if (!cJSON_IsString(unk))
            return bt_fail(BT_ERR_FORMAT, "%s: model.unk_token: expected a string or null, got %s",
                           path, bt_json_type_name(unk));
        m->unk_token = strdup(unk->valuestring);
        if (!m->unk_token) return bt_fail(BT_ERR_NOMEM, "%s: out of memory", path);
    }
    return BT_OK;
}

static int32_t lookup_special(const tokenizer *t, const char *content) {
    return tokenizer_token_to_id(t, content);
}

/* Builds the id tables, byte symbols, special ids and the cache; `path` names the file(s)
 * for messages. */
static bt_status finish_load(tokenizer *t, const char *path) {
    struct tokenizer_impl *m = t->impl;
    int32_t max_id = -1;
    for (size_t i = 0; i < m->vocab.count; i++)
        if (m->vocab.e[i].id > max_id) max_id = m->vocab.e[i].id;
    for (size_t i = 0; i < m->n_added; i++)
        if (m->added[i].id > max_id) max_id = m->added[i].id;
    t->vocab_size = max_id + 1;
    size_t vs = (size_t)t->vocab_size;
    m->id_str = calloc(vs, sizeof *m->id_str);
    m->id_len = calloc(vs, sizeof *m->id_len);
    m->is_special = calloc(vs, 1);
    if (!m->id_str || !m->id_len || !m->is_special)
        return bt_fail(BT_ERR_NOMEM, "%s: out of memory for %zu token ids", path, vs);
    for (size_t i = 0; i < m->vocab.count; i++) {
        const str_entry *e = &m->vocab.e[i];
        if (m->id_str[e->id])
            return bt_fail(BT_ERR_FORMAT, "%s: tokens %s and %s both have id %d", path,
                           QUOTE(m->id_str[e->id], m->id_len[e->id]), QUOTE(e->s, e->len),
                           (int)e->id);
        m->id_str[e->id] = e->s;
        m->id_len[e->id] = e->len;
    }
    /* An added token's text wins for its id (HF looks ids up in the added vocabulary
     * first). */
    for (size_t i = 0; i < m->n_added; i++) {
        const added_token *a = &m->added[i];
        m->id_str[a->id] = a->content;
        m->id_len[a->id] = (uint32_t)a->len;
        if (a->special) m->is_special[a->id] = 1;
        m->first_byte[a->normalized != 0][(uint8_t)a->content[0]] = 1;
        m->has_pass[a->normalized != 0] = 1;
    }
    for (int c = 0; c < BYTE_SYMBOL_CP_END; c++)
        m->cp_byte[c] = -1;
    for (int b = 0; b < 256; b++) {
        uint8_t u[4];
        uint32_t cp = byte_symbol(b);
        m->cp_byte[cp] = (int16_t)b;
        m->byte_id[b] = str_map_get(&m->vocab, (const char *)u, utf8_encode(cp, u));
    }
    if (m->unk_token) {
        m->unk_bytes = str_map_get(&m->vocab, m->unk_token, strlen(m->unk_token));
        if (m->unk_bytes < 0)
            return bt_fail(BT_ERR_FORMAT, "%s: model.unk_token %s is not in model.vocab", path,
                           QUOTE(m->unk_token, strlen(m->unk_token)));
    } else {
        m->unk_bytes = lookup_special(t, "<unk>");
    }
    t->cls_id = m->json_cls >= 0 ? m->json_cls : lookup_special(t, "<s>");
    t->sep_id = m->json_sep >= 0 ? m->json_sep : lookup_special(t, "</s>");
    t->pad_id = lookup_special(t, "<pad>");
    t->unk_id = lookup_special(t, "<unk>");
    if (t->unk_id < 0) t->unk_id = m->unk_bytes;
    t->mask_id = lookup_special(t, "<mask>");
    const char *names[3] = {"<s> (cls)", "</s> (sep)", "<pad>"};
    int32_t ids[3] = {t->cls_id, t->sep_id, t->pad_id};
    for (int i = 0; i < 3; i++) {
        if (ids[i] < 0)
            return bt_fail(BT_ERR_MISSING,
                           "%s: the vocabulary has no %s token, which the RoBERTa template needs",
                           path, names[i]);
        if (ids[i] >= t->vocab_size)
            return bt_fail(BT_ERR_FORMAT, "%s: %s id %d is outside the vocabulary (size %d)", path,
                           names[i], (int)ids[i], (int)t->vocab_size);
    }
    m->shards = calloc(CACHE_SHARDS, sizeof *m->shards);
    BT_ASSERT(m->shards != NULL);
    for (int i = 0; i < CACHE_SHARDS; i++)
        pthread_mutex_init(&m->shards[i].mu, NULL);
    m->cache_enabled = 1;
    return BT_OK;
}

static void impl_new(tokenizer *t) {
    memset(t, 0, sizeof *t);
    t->impl = calloc(1, sizeof *t->impl);
    BT_ASSERT(t->impl != NULL);
    t->impl->json_cls = t->impl->json_sep = -1;
    t->impl->unk_bytes = -1;
}

bt_status tokenizer_load_json(tokenizer *t, const char *path) {
    BT_ASSERT(t && path);
    impl_new(t);
    cJSON *root = NULL;
    bt_status st = parse_json_file(path, &root);
    if (!st && !cJSON_IsObject(root))
        st = bt_fail(BT_ERR_FORMAT, "%s: expected a JSON object at the top, got %s", path,
                     bt_json_type_name(root));
    const cJSON *model = st ? NULL : cJSON_GetObjectItemCaseSensitive(root, "model");
    if (!st && !cJSON_IsObject(model))
        st = bt_fail(BT_ERR_FORMAT, "%s: model: expected an object, got %s", path,
                     bt_json_type_name(model));
    if (!st) st = check_pipeline(t->impl, root, path);
    if (!st)
        st = load_vocab(t->impl, cJSON_GetObjectItemCaseSensitive(model, "vocab"), path,
                        "model.vocab");
    if (!st)
        st = load_merges_json(t->impl, cJSON_GetObjectItemCaseSensitive(model, "merges"), path);
    if (!st)
        st = load_added_tokens(t->impl, cJSON_GetObjectItemCaseSensitive(root, "added_tokens"),
                               path);
    if (!st) st = finish_load(t, path);
    cJSON_Delete(root);
    if (st) tokenizer_free(t);
    return st;
}

bt_status tokenizer_load_files(tokenizer *t, const char *vocab_path, const char *merges_path) {
    BT_ASSERT(t && vocab_path && merges_path);
    impl_new(t);
    cJSON *root = NULL;
    bt_status st = parse_json_file(vocab_path, &root);
    if (!st) st = load_vocab(t->impl, root, vocab_path, "vocabulary");
    cJSON_Delete(root);
    if (!st) st = load_merges_txt(t->impl, merges_path);
    if (!st) {
        /* RobertaTokenizer's defaults: the five specials, <mask> with lstrip. */
        static const char *const specials[] = {"<s>", "<pad>", "</s>", "<unk>", "<mask>"};
        for (int i = 0; i < 5; i++) {
            int32_t id = str_map_get(&t->impl->vocab, specials[i], strlen(specials[i]));
            if (id >= 0 && !st)
                st = add_added(t->impl, specials[i], id, i == 4, 0, i != 4, 1, vocab_path);
        }
        if (!st) st = finish_load(t, vocab_path);
    }
    if (st) tokenizer_free(t);
    return st;
}

/* Something is there (of any type: a FIFO or a symlink loop is then refused by the opener
 * with a message, rather than reported as absent). */
static int file_exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 || errno != ENOENT;
}

bt_status tokenizer_load(tokenizer *t, const char *model_dir) {
    BT_ASSERT(t && model_dir);
    memset(t, 0, sizeof *t);
    size_t n = strlen(model_dir) + 32;
    struct stat sb;
    if (stat(model_dir, &sb) != 0)
        return bt_fail(BT_ERR_IO, "%s: cannot open the model directory: %s", model_dir,
                       strerror(errno));
    if (!S_ISDIR(sb.st_mode))
        return bt_fail(BT_ERR_IO, "%s: is %s; expected a model directory (tokenizer.json, or "
                       "vocab.json + merges.txt)", model_dir, bt_file_type_name(sb.st_mode));
    char *a = malloc(n), *b = malloc(n);
    if (!a || !b) {
        free(a);
        free(b);
        return bt_fail(BT_ERR_NOMEM, "%s: out of memory", model_dir);
    }
    bt_status st;
    snprintf(a, n, "%s/tokenizer.json", model_dir);
    if (file_exists(a)) {
        st = tokenizer_load_json(t, a);
    } else {
        snprintf(a, n, "%s/vocab.json", model_dir);
        snprintf(b, n, "%s/merges.txt", model_dir);
        if (file_exists(a) && file_exists(b))
            st = tokenizer_load_files(t, a, b);
        else
            st = bt_fail(BT_ERR_IO,
                         "%s: no tokenizer.json and no vocab.json + merges.txt in this directory",
                         model_dir);
    }
    free(a);
    free(b);
    return st;
}

/* ---------------------------------------------------------------------------------------
 * Encoding
 * ------------------------------------------------------------------------------------- */

/* Output sink: stores the first cap ids, counts all. */
typedef struct sink {
    int32_t *ids; /* (cap) */
    size_t cap, n;
} sink;

static inline void emit(sink *o, int32_t id) {
    if (o->n < o->cap) o->ids[o->n] = id;
    o->n++;
}

typedef struct bpe_heap_entry {
    int32_t rank;
    int32_t pos; /* index of the left symbol */
    int32_t out; /* merged id the entry was made for (stale check, as HF) */
} bpe_heap_entry;

static inline int heap_less(const bpe_heap_entry *a, const bpe_heap_entry *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static void heap_push(bpe_heap_entry *h, size_t *n, bpe_heap_entry e) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!heap_less(&e, &h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = e;
}

static bpe_heap_entry heap_pop(bpe_heap_entry *h, size_t *n) {
    bpe_heap_entry top = h[0], last = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && heap_less(&h[c + 1], &h[c])) c++;
        if (!heap_less(&h[c], &last)) break;
        h[i] = h[c];
        i = c;
    }
    if (*n > 0) h[i] = last;
    return top;
}

enum { BPE_STACK_SYMBOLS = 128 };

/* BPE of one pre-tokenized word (its raw bytes) -> ids into o. */
static void bpe_word(const struct tokenizer_impl *m, const uint8_t *w, size_t len, sink *o) {
    if (len == 0) return;
    if (m->ignore_merges) { /* a word that is itself a token skips the merges */
        uint8_t small[2 * BPE_STACK_SYMBOLS];
        uint8_t *mapped = len <= BPE_STACK_SYMBOLS ? small : malloc(2 * len);
        BT_ASSERT(mapped != NULL);
        size_t ml = 0;
        for (size_t i = 0; i < len; i++)
            ml += utf8_encode(byte_symbol(w[i]), mapped + ml);
        int32_t id = str_map_get(&m->vocab, (const char *)mapped, ml);
        if (mapped != small) free(mapped);
        if (id >= 0) {
            emit(o, id);
            return;
        }
    }
    int cached = m->cache_enabled && len <= TOKENIZER_CACHE_MAX_WORD;
    uint64_t h = 0;
    if (cached) {
        int32_t ids[TOKENIZER_CACHE_MAX_WORD];
        h = hash_bytes(w, len) | 1;
        int n = cache_get(m->shards, h, w, len, ids);
        if (n >= 0) {
            for (int i = 0; i < n; i++)
                emit(o, ids[i]);
            return;
        }
    }

    /* Symbols as a doubly linked list over positions; merged-away ones are dead. */
    int32_t s_sym[BPE_STACK_SYMBOLS], s_prev[BPE_STACK_SYMBOLS], s_next[BPE_STACK_SYMBOLS];
    bpe_heap_entry s_heap[3 * BPE_STACK_SYMBOLS];
    uint8_t s_dead[BPE_STACK_SYMBOLS];
    int32_t *sym = s_sym, *prev = s_prev, *next = s_next;
    uint8_t *dead = s_dead;
    bpe_heap_entry *heap = s_heap;
    if (len > BPE_STACK_SYMBOLS) {
        sym = malloc(len * sizeof *sym);
        prev = malloc(len * sizeof *prev);
        next = malloc(len * sizeof *next);
        dead = malloc(len);
        heap = malloc(3 * len * sizeof *heap);
        BT_ASSERT(sym && prev && next && dead && heap);
    }
    size_t ns = 0;
    int last_unk = 0;
    for (size_t i = 0; i < len; i++) {
        int32_t id = m->byte_id[w[i]];
        if (id < 0) {
            if (m->unk_bytes < 0 || (m->fuse_unk && last_unk)) continue;
            id = m->unk_bytes;
            last_unk = 1;
        } else {
            last_unk = 0;
        }
        sym[ns] = id;
        dead[ns] = 0;
        prev[ns] = (int32_t)ns - 1;
        next[ns] = (int32_t)ns + 1;
        ns++;
    }
    if (ns > 0) next[ns - 1] = -1;

    size_t nh = 0;
    int32_t rank, out;
    for (size_t i = 0; i + 1 < ns; i++)
        if (pair_map_get(&m->merges, sym[i], sym[i + 1], &rank, &out))
            heap_push(heap, &nh, (bpe_heap_entry){rank, (int32_t)i, out});
    while (nh > 0) {
        bpe_heap_entry top = heap_pop(heap, &nh);
        int32_t p = top.pos;
        if (dead[p] || next[p] < 0) continue;
        int32_t r = next[p];
        if (!pair_map_get(&m->merges, sym[p], sym[r], &rank, &out) || out != top.out) continue;
        sym[p] = out;
        dead[r] = 1;
        next[p] = next[r];
        if (next[r] >= 0) prev[next[r]] = p;
        if (prev[p] >= 0 && pair_map_get(&m->merges, sym[prev[p]], sym[p], &rank, &out))
            heap_push(heap, &nh, (bpe_heap_entry){rank, prev[p], out});
        if (next[p] >= 0 && pair_map_get(&m->merges, sym[p], sym[next[p]], &rank, &out))
            heap_push(heap, &nh, (bpe_heap_entry){rank, p, out});
    }

    int32_t result[TOKENIZER_CACHE_MAX_WORD];
    size_t nr = 0;
    for (int32_t p = ns > 0 ? 0 : -1; p >= 0; p = next[p]) {
        emit(o, sym[p]);
        if (cached) result[nr++] = sym[p]; /* nr <= ns <= len <= CACHE_MAX_WORD */
    }
    if (cached) cache_put(m->shards, h, w, len, result, nr);
    if (len > BPE_STACK_SYMBOLS) {
        free(sym);
        free(prev);
        free(next);
        free(dead);
        free(heap);
    }
}

static inline int class_at(const uint8_t *s, size_t i, size_t *adv, uint32_t *cp) {
    *cp = utf8_decode(s, i, adv);
    return unicode_class(*cp);
}

/* End of the run of characters of class k starting at i. */
static size_t run_end(const uint8_t *s, size_t len, size_t i, int k) {
    while (i < len) {
        size_t adv;
        uint32_t cp;
        if (class_at(s, i, &adv, &cp) != k) break;
        i += adv;
    }
    return i;
}

/* The GPT-2 pattern as a scanner; alternatives tried in the regex's order at each position:
 *   's|'t|'re|'ve|'m|'ll|'d       contractions (lower case only)
 *   ' ?\p{L}+' ' ?\p{N}+' ' ?[^\s\p{L}\p{N}]+'   one optional U+0020, then a run of one
 *                                                class (the class of the char after it)
 *   \s+(?!\S)    a whitespace run, minus its last char when a non-space follows
 *   \s+          else (a single whitespace char before a non-space)
 * s is valid UTF-8. Each match goes to bpe_word. */
static void pretokenize(const struct tokenizer_impl *m, const uint8_t *s, size_t len, sink *o) {
    size_t i = 0;
    while (i < len) {
        size_t end = 0, adv;
        uint32_t c0;
        int k = class_at(s, i, &adv, &c0);
        if (c0 == '\'' && i + 1 < len) {
            uint8_t c1 = s[i + 1], c2 = i + 2 < len ? s[i + 2] : 0;
            if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd')
                end = i + 2;
            else if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') ||
                     (c1 == 'l' && c2 == 'l'))
                end = i + 3;
        }
        if (end == 0) {
            size_t run_start = i;
            if (c0 == ' ' && i + 1 < len) {
                size_t adv1;
                uint32_t c1;
                int k1 = class_at(s, i + 1, &adv1, &c1);
                if (k1 != UC_SPACE) {
                    k = k1;
                    run_start = i + 1;
                }
            }
            if (k != UC_SPACE) {
                end = run_end(s, len, run_start, k);
            } else {
                size_t e = i, last = i;
                while (e < len) {
                    size_t a;
                    uint32_t cp;
                    if (class_at(s, e, &a, &cp) != UC_SPACE) break;
                    last = e;
                    e += a;
                }
                /* e: end of the run; last: start of its final char */
                end = (e == len || last == i) ? e : last;
            }
        }
        bpe_word(m, s + i, end - i, o);
        i = end;
    }
}

/* Leftmost-longest match of an added token of pass `pass` (normalized flag) in s[from..).
 * Returns the token and sets *at, or NULL. */
static const added_token *find_added(const struct tokenizer_impl *m, int pass, const uint8_t *s,
                                     size_t len, size_t from, size_t *at) {
    for (size_t i = from; i < len; i++) {
        if (!m->first_byte[pass][s[i]]) continue;
        const added_token *best = NULL;
        for (size_t k = 0; k < m->n_added; k++) {
            const added_token *a = &m->added[k];
            if ((a->normalized != 0) != pass || a->len > len - i) continue;
            if (memcmp(s + i, a->content, a->len) == 0 && (!best || a->len > best->len)) best = a;
        }
        if (best) {
            *at = i;
            return best;
        }
    }
    return NULL;
}

/* Splits out added tokens: pass 0 (normalized=false tokens) over the whole text, pass 1
 * (normalized=true) over what pass 0 left, then the scanner. Mirrors HF's find_matches:
 * the matcher resumes at the token's own end; lstrip/rstrip only widen what is consumed. */
static void split_added(const struct tokenizer_impl *m, const uint8_t *s, size_t len, int pass,
                        sink *o) {
    if (pass == 2) {
        pretokenize(m, s, len, o);
        return;
    }
    if (!m->has_pass[pass]) {
        split_added(m, s, len, pass + 1, o);
        return;
    }
    size_t start_offset = 0, pos = 0, at;
    const added_token *a;
    while (pos < len && (a = find_added(m, pass, s, len, pos, &at)) != NULL) {
        size_t start = at, stop = at + a->len;
        pos = stop;
        if (a->lstrip) { /* back over whitespace, not past the previous match */
            size_t ns = start;
            while (ns > start_offset) {
                size_t p = ns - 1, adv;
                while (p > 0 && (s[p] & 0xC0) == 0x80)
                    p--;
                if (!is_space_cp(utf8_decode(s, p, &adv))) break;
                ns = p;
            }
            start = ns > start_offset ? ns : start_offset;
        }
        if (a->rstrip) {
            while (stop < len) {
                size_t adv;
                if (!is_space_cp(utf8_decode(s, stop, &adv))) break;
                stop += adv;
            }
        }
        if (start_offset < start)
            split_added(m, s + start_offset, start - start_offset, pass + 1, o);
        emit(o, a->id);
        start_offset = stop;
    }
    if (start_offset < len) split_added(m, s + start_offset, len - start_offset, pass + 1, o);
}

/* Whole pipeline for any byte string. */
static void encode_bytes(const struct tokenizer_impl *m, const char *text, size_t len, sink *o) {
    const uint8_t *s = (const uint8_t *)text;
    if (len == 0) return;
    if (utf8_valid(s, len)) {
        split_added(m, s, len, 0, o);
        return;
    }
    uint8_t *clean = malloc(3 * len);
    BT_ASSERT(clean != NULL);
    size_t n = utf8_sanitize(s, len, clean);
    split_added(m, clean, n, 0, o);
    free(clean);
}

bt_status tokenizer_encode(const tokenizer *t, const char *text, size_t len, int32_t *ids,
                           size_t cap, size_t *n) {
    BT_ASSERT(t && t->impl && n);
    if ((!text && len) || (!ids && cap))
        return bt_fail(BT_ERR_ARG, "tokenizer_encode: NULL text or ids with a non-zero size");
    sink o = {ids, cap, 0};
    encode_bytes(t->impl, text, len, &o);
    *n = o.n;
    if (o.n > cap)
        return bt_fail(BT_ERR_ARG, "tokenizer_encode: the text has %zu tokens, cap is %zu", o.n,
                       cap);
    return BT_OK;
}

static void finish_row(const tokenizer *t, size_t used, size_t max_length, int pad, int32_t *ids,
                       int32_t *mask, size_t *n) {
    size_t total = pad ? max_length : used;
    for (size_t i = used; i < total; i++)
        ids[i] = t->pad_id;
    if (mask)
        for (size_t i = 0; i < total; i++)
            mask[i] = i < used;
    *n = total;
}

bt_status tokenizer_encode_single(const tokenizer *t, const char *text, size_t len,
                                  size_t max_length, int truncate, int pad_to_max, int32_t *ids,
                                  int32_t *attention_mask, size_t *n) {
    BT_ASSERT(t && t->impl && ids && n);
    if (!text && len) return bt_fail(BT_ERR_ARG, "tokenizer_encode_single: NULL text");
    if (max_length < 2)
        return bt_fail(BT_ERR_ARG, "tokenizer_encode_single: max_length %zu < 2 (<s> and </s>)",
                       max_length);
    size_t limit = max_length - 2;
    sink o = {ids + 1, limit, 0};
    encode_bytes(t->impl, text, len, &o);
    if (o.n > limit && !truncate)
        return bt_fail(BT_ERR_ARG,
                       "tokenizer_encode_single: the text has %zu tokens + 2 specials, more than "
                       "max_length %zu (enable truncation)",
                       o.n, max_length);
    size_t k = o.n < limit ? o.n : limit;
    ids[0] = t->cls_id;
    ids[k + 1] = t->sep_id;
    finish_row(t, k + 2, max_length, pad_to_max, ids, attention_mask, n);
    return BT_OK;
}

bt_status tokenizer_encode_pair(const tokenizer *t, const char *a, size_t a_len, const char *b,
                                size_t b_len, size_t max_length, int truncate, int pad_to_max,
                                int32_t *ids, int32_t *attention_mask, size_t *n) {
    BT_ASSERT(t && t->impl && ids && n);
    if ((!a && a_len) || (!b && b_len))
        return bt_fail(BT_ERR_ARG, "tokenizer_encode_pair: NULL text");
    if (max_length < 4)
        return bt_fail(BT_ERR_ARG, "tokenizer_encode_pair: max_length %zu < 4 (<s> </s></s> </s>)",
                       max_length);
    size_t limit = max_length - 4;
    /* A goes straight to its place; B to scratch, since its offset depends on A's cut. */
    int32_t small[256];
    int32_t *tb = limit <= 256 ? small : malloc(limit * sizeof *tb);
    BT_ASSERT(tb != NULL);
    sink oa = {ids + 1, limit, 0}, ob = {tb, limit, 0};
    encode_bytes(t->impl, a, a_len, &oa);
    encode_bytes(t->impl, b, b_len, &ob);
    size_t n1 = oa.n, n2 = ob.n;
    if (n1 + n2 > limit) {
        if (!truncate) {
            if (tb != small) free(tb);
            return bt_fail(BT_ERR_ARG,
                           "tokenizer_encode_pair: %zu + %zu tokens + 4 specials exceed "
                           "max_length %zu (enable truncation)",
                           n1, n2, max_length);
        }
        /* HF truncate_encodings, LongestFirst: with n1 <= n2, keep the shorter whole if the
         * longer can take the rest, else split max evenly (the longer gets the odd one). */
        int swap = n1 > n2;
        if (swap) {
            size_t x = n1;
            n1 = n2;
            n2 = x;
        }
        n2 = n1 > limit ? n1 : (n1 > limit - n1 ? n1 : limit - n1);
        if (n1 + n2 > limit) {
            n1 = limit / 2;
            n2 = n1 + limit % 2;
        }
        if (swap) {
            size_t x = n1;
            n1 = n2;
            n2 = x;
        }
    }
    ids[0] = t->cls_id;
    ids[n1 + 1] = t->sep_id;
    ids[n1 + 2] = t->sep_id;
    memcpy(ids + n1 + 3, tb, n2 * sizeof *tb);
    ids[n1 + n2 + 3] = t->sep_id;
    if (tb != small) free(tb);
    finish_row(t, n1 + n2 + 4, max_length, pad_to_max, ids, attention_mask, n);
    return BT_OK;
}

/* ---------------------------------------------------------------------------------------
 * Decoding
 * ------------------------------------------------------------------------------------- */

/* Appends the bytes of token `id`: each symbol back to its byte, or the token's own UTF-8
 * when some character is not a byte symbol (HF's ByteLevel decoder). */
static size_t token_bytes(const struct tokenizer_impl *m, int32_t id, uint8_t *out) {
    const uint8_t *s = (const uint8_t *)m->id_str[id];
    size_t len = m->id_len[id], i = 0, o = 0, bad;
    while (i < len) {
        size_t l = utf8_seq(s, len, i, &bad);
        uint32_t cp = 0;
        if (l) cp = utf8_decode(s, i, &l);
        if (!l || cp >= BYTE_SYMBOL_CP_END || m->cp_byte[cp] < 0) {
            memcpy(out, s, len);
            return len;
        }
        out[o++] = (uint8_t)m->cp_byte[cp];
        i += l;
    }
    return o;
}

bt_status tokenizer_decode(const tokenizer *t, const int32_t *ids, size_t n, int skip_special,
                           char *out, size_t cap, size_t *out_len) {
    BT_ASSERT(t && t->impl);
    const struct tokenizer_impl *m = t->impl;
    if ((!ids && n) || (!out && cap)) return bt_fail(BT_ERR_ARG, "tokenizer_decode: NULL buffer");
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->vocab_size || !m->id_str[ids[i]])
            return bt_fail(BT_ERR_ARG,
                           "tokenizer_decode: ids[%zu] = %d is not in the vocabulary "
                           "(size %d)",
                           i, (int)ids[i], (int)t->vocab_size);
        total += m->id_len[ids[i]];
    }
    uint8_t *raw = malloc(total + 1);
    BT_ASSERT(raw != NULL);
    size_t r = 0;
    for (size_t i = 0; i < n; i++) {
        if (skip_special && m->is_special[ids[i]]) continue;
        r += token_bytes(m, ids[i], raw + r);
    }
    size_t need = utf8_sanitize(raw, r, NULL);
    if (out_len) *out_len = need;
    if (need + 1 > cap) {
        free(raw);
        return bt_fail(BT_ERR_ARG, "tokenizer_decode: the text needs %zu bytes + NUL, cap is %zu",
                       need, cap);
    }
    utf8_sanitize(raw, r, (uint8_t *)out);
    out[need] = 0;
    free(raw);
    return BT_OK;
}
