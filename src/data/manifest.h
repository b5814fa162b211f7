/* manifest.h: a dataset's records (JSON Lines, CSV/TSV, an HF imagefolder directory or
 * WebDataset tar shards), parsed once into compact records.
 *
 * Which reader (docs/data.md "Dataset sources"): a source naming .tar shards (shards.h:
 * "::", a brace pattern or a .tar path) or a directory holding .tar files and no metadata
 * file are WebDataset shards; a directory with metadata.jsonl or metadata.csv is an HF
 * imagefolder (image column `file_name` unless image_key is set to another name than
 * "image"); a file named *.csv / *.tsv is CSV / TSV (header row, RFC 4180 quoting; each row
 * is checked by the JSON Lines rules below, empty cells of optional columns are absent, the
 * choices cell is JSON text); anything else is JSON Lines.
 *
 * One JSON object per line; blank lines (only spaces, tabs, CR) are skipped; a UTF-8 byte
 * order mark at the start of the file is ignored. Keys (their names are configurable):
 *   image            string, required: image path, relative to the manifest's directory
 *                    (an absolute path is kept as is)
 *   caption          string, required (the New Yorker run uses "image_description")
 *   id               string or integer, optional
 *   caption_choices  array of exactly five strings, optional (New Yorker matching task)
 *   label            integer 0..4, index of the right choice; only with caption_choices
 * Other keys are ignored (dataset exports carry many columns). Strings must be valid UTF-8.
 *
 * Errors name the file, the 1-based line and the key:
 *   "data/train.jsonl:17: key 'image' missing"
 *   "data/val.jsonl:3: 'caption_choices' has 4 entries, expected 5"
 *   "data/train.jsonl:9: malformed JSON at column 31"
 * Policy MANIFEST_ON_ERROR_STOP returns the first such error; MANIFEST_ON_ERROR_SKIP drops the
 * line, counts it and keeps its message in `problems` (every skipped line is reported there;
 * the caller prints them). A manifest with no valid record is an error under both policies.
 *
 * Storage: every string lives in one arena (NUL-terminated, addressed by 32-bit offsets), the
 * records are small fixed-size structs, so a million records cost ~64 MB plus their text.
 *
 * Deliberately not here: reading images or tokenizing (loader.h does that), deduplication
 * (bt-data check reports duplicates), writing manifests (synth.c writes its own). */
#ifndef BT_DATA_MANIFEST_H
#define BT_DATA_MANIFEST_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

enum { MANIFEST_N_CHOICES = 5 };

/* Marks an absent optional string (id, choices) in a record. */
#define MANIFEST_NONE UINT32_MAX

typedef enum {
    MANIFEST_ON_ERROR_STOP,
    MANIFEST_ON_ERROR_SKIP,
} manifest_error_policy;

typedef struct manifest_options {
    const char *image_key;   /* NULL: "image" */
    const char *caption_key; /* NULL: "caption" */
    const char *id_key;      /* NULL: "id" */
    const char *choices_key; /* NULL: "caption_choices" */
    const char *label_key;   /* NULL: "label" */
    manifest_error_policy on_error;
} manifest_options;

/* The defaults above, on_error = STOP. */
manifest_options manifest_options_default(void);

typedef struct manifest_record {
    uint32_t image;                       /* arena offset: resolved image path */
    uint32_t caption;                     /* arena offset */
    uint32_t id;                          /* arena offset or MANIFEST_NONE */
    uint32_t choices[MANIFEST_N_CHOICES]; /* arena offsets; choices[0] == NONE when absent */
    int32_t label;                        /* 0..4, or -1 when absent */
    int32_t line;                         /* 1-based line in the manifest file */
} manifest_record;

/* Where a shard record's image bytes lie (WebDataset sources). */
typedef struct manifest_member {
    uint64_t offset, size; /* of the image member's data in its shard file */
    uint32_t shard;        /* index into manifest.shards */
} manifest_member;

typedef struct manifest {
    char *path;               /* the manifest file as given (imagefolder: its metadata file;
                                 shards: the source spec) */
    manifest_record *records; /* (n) in file order */
    size_t n;
    char *arena; /* every string, NUL-terminated */
    size_t arena_used, arena_cap;
    size_t n_lines;   /* lines read, blank ones included */
    size_t n_skipped; /* lines dropped under MANIFEST_ON_ERROR_SKIP */
    char **problems;  /* (n_skipped) "file:line: message" */
    /* WebDataset shards (a source naming .tar files); all NULL / 0 for a manifest file. The
     * records of shard s are [shard_first[s], shard_first[s + 1]), in archive order; a
     * record's `line` is its sample's 1-based number in its shard, its id the sample key
     * (unless a json member gives one) and its image string "shard:member" (for messages and
     * the image cache; the bytes are read at members[i]). */
    char **shards;            /* (n_shards) paths */
    size_t n_shards;
    int64_t *shard_first;     /* (n_shards + 1) */
    manifest_member *members; /* (n) */
} manifest;

/* Reads and validates the whole file. On error the manifest holds whatever was parsed
 * (problems included) and must still be released with manifest_free. */
bt_status manifest_load(manifest *m, const char *path, const manifest_options *opt);
void manifest_free(manifest *m);

static inline const char *manifest_str(const manifest *m, uint32_t off) {
    return off == MANIFEST_NONE ? NULL : m->arena + off;
}
static inline const char *manifest_image(const manifest *m, size_t i) {
    return m->arena + m->records[i].image;
}
static inline const char *manifest_caption(const manifest *m, size_t i) {
    return m->arena + m->records[i].caption;
}
/* NULL when the record has no id. */
static inline const char *manifest_id(const manifest *m, size_t i) {
    return manifest_str(m, m->records[i].id);
}
static inline int manifest_has_choices(const manifest *m, size_t i) {
    return m->records[i].choices[0] != MANIFEST_NONE;
}
/* Choice k (0..4) of record i; NULL when the record has no choices. */
static inline const char *manifest_choice(const manifest *m, size_t i, int k) {
    return manifest_str(m, m->records[i].choices[k]);
}

/* Where record i comes from, for messages: "file:line" or "shard: sample 'key'". */
void manifest_where(const manifest *m, size_t i, char *buf, size_t cap);

/* 1 when the n bytes at s are well-formed UTF-8 (no overlongs, surrogates or > U+10FFFF). */
int manifest_utf8_valid(const char *s, size_t n);

#endif
