/* shards.h: WebDataset tar shards, read in place: the shard list of a data source, a tar member
 * reader, random access to a member's bytes, and the tar writer bt-data uses.
 *
 * Source spec (docs/data.md "WebDataset shards"): one or more parts joined by "::" (webdataset's
 * separator), each a path with brace patterns expanded in order, left to right:
 *   {00000..00009}  numeric range, inclusive; the width of the left bound is kept (zero padded)
 *   {a,b,c}         alternatives
 * or a directory, standing for the *.tar files in it in byte order of their names. Every
 * expanded path must end in ".tar" (compressed shards cannot be read in place). At most
 * SHARDS_MAX paths; a missing shard is an error naming it.
 *
 * Tar (POSIX ustar, pax and GNU): 512-byte headers with a verified checksum; the path is
 * prefix/name (ustar), a pax 'x' record's path, or a GNU 'L' long name; the size is octal or
 * GNU base-256; a pax 'x' size overrides it. Regular files ('0', '\0', '7') are members;
 * directories, links, devices and pax globals are skipped. Member data lies at a 512-byte
 * aligned offset right after its header; the archive ends at a zero block or at the end of the
 * file on a block boundary. Anything else (a bad checksum, a size past the end of the file, a
 * header cut short) is an error naming the shard and the byte offset of the header.
 *
 * Deliberately not here: compressed tars (no random access), sparse members, grouping members
 * into samples (manifest.c does that, with the record rules), tar writing beyond ustar + pax
 * long names. */
#ifndef BT_DATA_SHARDS_H
#define BT_DATA_SHARDS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "status.h"

enum { SHARDS_MAX = 1000000 };

/* 1 when `spec` names shards rather than a manifest: it contains "::" or a '{', or ends in
 * ".tar". (A directory of .tar files is recognized by manifest_load.) */
int shards_is_spec(const char *spec);

/* Expands spec into *paths (n of them, each malloc'd, free with shards_free_paths). Errors
 * (BT_ERR_ARG / BT_ERR_IO) name the spec and the part: unbalanced or nested braces, a range
 * whose bounds are not decimal or run backwards, more than SHARDS_MAX paths, a path not ending
 * in .tar, a directory without .tar files. Shard files are not opened here. */
bt_status shards_expand(const char *spec, char ***paths, size_t *n);
void shards_free_paths(char **paths, size_t n);

/* ---- reading ------------------------------------------------------------------------------ */

typedef struct tar_reader {
    const char *path; /* for messages */
    int fd;
    uint64_t file_size;
    uint64_t pos; /* offset of the next header */
    int done;
} tar_reader;

typedef struct tar_member {
    char *name;      /* full path inside the archive (malloc'd by the reader, valid until the
                        next call) */
    uint64_t offset; /* of the data in the file */
    uint64_t size;
    uint64_t header; /* offset of the member's first header (pax/GNU records included) */
} tar_member;

/* Opens a shard (a regular file, bt_open_regular). */
bt_status tar_reader_open(tar_reader *r, const char *path);
/* Next regular-file member: returns 1 and fills *m, 0 at the end of the archive, or -1 with
 * the error in *err (message "shard: ... at byte N"). After an error the reader stays at the
 * end. m->name is owned by the caller (free). */
int tar_reader_next(tar_reader *r, tar_member *m, bt_status *err);
void tar_reader_close(tar_reader *r);
/* A text member's bytes (at most 1 MiB: captions, json), malloc'd and NUL-terminated (the
 * bytes themselves may hold NULs: compare strlen with size). */
bt_status tar_reader_read(tar_reader *r, uint64_t offset, uint64_t size, char **out);

/* Reads `size` bytes at `offset` of the shard into a bt_alloc'd buffer (free with bt_free).
 * Errors name the shard and the member: missing file, short read (the file changed since it
 * was indexed). */
bt_status shards_read_member(const char *shard, const char *member, uint64_t offset,
                             uint64_t size, uint8_t **bytes);

/* ---- writing ------------------------------------------------------------------------------ */

/* Appends one member (mode 0644, mtime 0, uid/gid 0: the shard's bytes depend only on its
 * content) to f: a pax 'x' header first when name exceeds 100 bytes. Errors name `what`. */
bt_status tar_write_member(FILE *f, const char *what, const char *name, const void *data,
                           size_t size);
/* Writes the two zero blocks that end an archive. */
bt_status tar_write_end(FILE *f, const char *what);

struct manifest;

/* Record i's image bytes (bt_alloc'd, *n of them): its file, or its member for shards. */
bt_status shards_read_record_image(const struct manifest *m, size_t i, uint8_t **bytes,
                                   size_t *n);

/* Writes every record of m as shards out_dir/00000.tar, 00001.tar, ... of per_shard samples
 * each, in record order (out_dir is created). Per sample, key = the record index as 9 digits:
 * "<key>.jpg|png|webp" (the image bytes unchanged, the extension from their content),
 * "<key>.txt" (the caption) and, when the record has an id or caption choices, "<key>.json"
 * ({"id", "caption_choices", "label"}). Each shard is written atomically; *n_shards counts
 * those written. Errors name the record (manifest_where) or the shard. */
bt_status shards_write(const struct manifest *m, const char *out_dir, size_t per_shard,
                       size_t *n_shards);

#endif
