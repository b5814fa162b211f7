/* checkpoint.h: Hugging Face BridgeTower model directories in and out (docs/checkpoints.md).
 *
 * A model directory holds config.json (HF field names, text_config / vision_config blocks)
 * and model.safetensors (HF state-dict key names), plus tokenizer and preprocessor files.
 *
 * Loading (docs/spec.md §2, §7 item 19) is lenient where HF's from_pretrained is, and
 * reports everything by name (bt_checkpoint_report):
 *   - backbone keys are accepted with or without the `bridgetower.` prefix, head keys bare;
 *   - int64 legacy buffers (keys ending in `position_ids` / `token_type_ids`) are skipped
 *     and counted;
 *   - F32, BF16 and F16 tensors are read (converted exactly to fp32);
 *   - a backbone tensor missing from the file is an error listing the first few keys and the
 *     count; a requested head that is entirely absent is initialized by HF's init rules
 *     (bt_params_init's per-tensor streams, for that head's tensors only) and reported as a
 *     notice; a head that is only partly present is an error naming the missing keys;
 *   - keys of heads the caller did not request are ignored and reported; keys no BridgeTower
 *     class has are reported as unexpected (an error with unknown_keys_are_errors);
 *   - a tensor whose shape disagrees with config.json is an error naming the key, the
 *     expected and the found shape.
 * Which heads to build: the caller's BT_HEADS_* mask, or (BT_CHECKPOINT_HEADS_AUTO) every
 * head with at least one tensor in the file.
 *
 * Saving writes config.json (HF fields; model_type "bridgetower"; architectures from the
 * heads present; transformers_version "4.27.1" unless the base config names one; unknown
 * keys of a base config.json kept), model.safetensors (F32 or BF16; backbone keys with the
 * `bridgetower.` prefix, head keys bare, plus the two int64 position_ids buffers transformers
 * 4.27 keeps in its state_dict; "__metadata__" {"format": "pt"}), and copies the
 * tokenizer / preprocessor files of a source directory. The directory OWNS config.json,
 * model.safetensors and every file of bt_checkpoint_aux_files: after a save each aux file is
 * the copy from copy_from_dir, or absent (removed) when that has none or no copy_from_dir is
 * given, so a directory never mixes this model with another model's tokenizer (kept as is
 * only when copy_from_dir is the target itself). Every target is checked first: one that
 * exists and is not a regular file (a FIFO, a device, a directory) is refused before
 * anything is written. Every file is first written in full to a temp file
 * ".<name>.bt-tmp.<host>.<pid>.<n>" (src/fileio.h; fsync'ed); only when all of them are written are
 * they renamed over the final names, then stale aux files are removed and the directory is
 * fsync'ed. A failure before the renames removes the temp files and leaves the previous
 * checkpoint untouched; temp files of a killed save are removed by the next save.
 * Loading and initializing check the weights' size against available memory first
 * (bt_param_table_check_memory: BT_ERR_NOMEM with a message, not an abort).
 *
 * Deliberately not here: pytorch_model.bin (pickle) reading: bt reads safetensors only;
 * scripts/convert_checkpoint.py converts (the load error says how); sharded checkpoints
 * (model.safetensors.index.json: refused with a message); optimizer / trainer state for
 * resume (src/train). */
#ifndef BT_CHECKPOINT_H
#define BT_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "model/config.h"
#include "dtype.h"
#include "model/params.h"
#include "safetensors.h"
#include "status.h"

/* heads = BT_CHECKPOINT_HEADS_AUTO: build the heads the weights file has. */
#define BT_CHECKPOINT_HEADS_AUTO (~0u)

/* A growable list of owned strings. */
typedef struct bt_name_list {
    char **names;
    size_t n, cap;
} bt_name_list;

/* What a load found, by name. Filled as far as the load got, also on error. */
typedef struct bt_checkpoint_report {
    size_t n_loaded;          /* tensors read from the file into the arena */
    size_t n_skipped_buffers; /* `position_ids` / `token_type_ids` buffers skipped */
    bt_name_list missing;     /* parameters of the built model absent from the file (error) */
    bt_name_list mismatched;  /* "key: expected [..], found [..]" (error) */
    bt_name_list unexpected;  /* keys no BridgeTower class has (file spelling) */
    bt_name_list ignored;     /* keys of heads that were not built (file spelling) */
    bt_name_list initialized; /* heads initialized by HF's init rules ("itm_score") */
    unsigned heads_in_file;   /* BT_HEADS_* with at least one tensor in the file */
    unsigned heads_built;     /* BT_HEADS_* of the table loaded into */
} bt_checkpoint_report;

void bt_checkpoint_report_init(bt_checkpoint_report *r);
void bt_checkpoint_report_free(bt_checkpoint_report *r);
/* Human-readable lines ("notice: itm_score: not in checkpoint, initialized (HF init
 * rules)", "notice: ignored N tensors of heads not built: ...", "warning: unexpected key
 * ..."), each prefixed with `who` (a program or file name; may be NULL). Prints nothing for
 * a clean load. */
void bt_checkpoint_report_print(const bt_checkpoint_report *r, FILE *out, const char *who);

typedef struct bt_checkpoint_load_options {
    unsigned heads;              /* BT_HEADS_* to build, or BT_CHECKPOINT_HEADS_AUTO */
    int unknown_keys_are_errors; /* 1: an unexpected key fails the load (default 0) */
    uint64_t init_seed;          /* seed of HF-rule init for heads absent from the file */
} bt_checkpoint_load_options;

/* heads AUTO, unknown keys reported only, init_seed 0. */
void bt_checkpoint_load_options_default(bt_checkpoint_load_options *o);

/* An opened model directory: config parsed, weights file mapped (read-only). */
typedef struct bt_checkpoint {
    char *dir;
    char *config_path;  /* <dir>/config.json */
    char *weights_path; /* <dir>/model.safetensors */
    char *config_json;  /* config.json text (its extra keys are kept when saving) */
    bt_model_config cfg;
    unsigned heads_in_file; /* BT_HEADS_* with at least one tensor in the file */
    safetensors_file weights;
} bt_checkpoint;

/* Opens `dir`: reads and validates config.json, maps and validates model.safetensors.
 * Errors name the path: no such directory; no config.json; a malformed or unsupported
 * config (config.h); no model.safetensors (with the conversion command when a
 * pytorch_model.bin is there; a refusal naming the index for sharded checkpoints); a
 * malformed weights file. On error *ck is closed (safe to close again). */
bt_status bt_checkpoint_open(bt_checkpoint *ck, const char *dir);
void bt_checkpoint_close(bt_checkpoint *ck);

/* Reads the opened checkpoint into `arena` (t->numel floats) laid out by `t`, which must
 * have been built from ck->cfg. Heads of t absent from the file are initialized (see the
 * header comment); `o` may be NULL (defaults; o->heads is not used here: t decides).
 * `r` (may be NULL) is reset and filled. On error the arena content is unspecified. */
bt_status bt_checkpoint_read(const bt_checkpoint *ck, const bt_param_table *t, float *arena,
                             const bt_checkpoint_load_options *o, bt_checkpoint_report *r);

/* A checkpoint loaded into memory: config, table for the chosen heads, fp32 weights. */
typedef struct bt_checkpoint_weights {
    bt_model_config cfg;
    bt_param_table table;
    float *params;     /* (table.numel) bt_alloc'd fp32 arena */
    char *config_json; /* config.json text, for bt_checkpoint_save's base_config_json */
} bt_checkpoint_weights;

/* open + table for o->heads (AUTO: the file's heads) + arena + read + close. `o` and `r`
 * may be NULL. On error *w is zeroed (safe to free). */
bt_status bt_checkpoint_load(bt_checkpoint_weights *w, const char *dir,
                             const bt_checkpoint_load_options *o, bt_checkpoint_report *r);
void bt_checkpoint_weights_free(bt_checkpoint_weights *w);

/* A fresh model from a directory's config.json alone (model.safetensors is not read, and
 * need not exist): table for `heads` (BT_HEADS_* mask), every tensor initialized by HF's
 * init rules from `seed` (bt_params_init), config_json kept for bt_checkpoint_save. Errors
 * (naming the path): no such directory, no config.json, a malformed or unsupported config.
 * On error *w is zeroed (safe to free). */
bt_status bt_checkpoint_init(bt_checkpoint_weights *w, const char *dir, unsigned heads,
                             uint64_t seed);

typedef struct bt_checkpoint_save_options {
    bt_dtype dtype;               /* BT_DTYPE_F32 (default) or BT_DTYPE_BF16 (rounded RNE) */
    const char *base_config_json; /* config.json text whose other keys are kept, or NULL */
    const char *copy_from_dir;    /* copy tokenizer/preprocessor files from here, or NULL */
} bt_checkpoint_save_options;

void bt_checkpoint_save_options_default(bt_checkpoint_save_options *o);

/* The tokenizer / preprocessor files copied by bt_checkpoint_save (NULL-terminated). */
extern const char *const bt_checkpoint_aux_files[];

/* Writes the model directory `dir` (created, parents included, if absent) from the table's
 * config and heads and `arena` (t->numel floats): config.json, model.safetensors and the
 * aux files of o->copy_from_dir that exist there; the other aux files in `dir` are removed
 * (all kept when copy_from_dir is `dir` itself). `o` may
 * be NULL (F32, fresh config, no copies). Atomic as described in the header comment; errors
 * (BT_ERR_IO, BT_ERR_ARG, BT_ERR_FORMAT for a base config that is not a JSON object) name
 * the path. */
bt_status bt_checkpoint_save(const char *dir, const bt_param_table *t, const float *arena,
                             const bt_checkpoint_save_options *o);

/* The config.json text bt_checkpoint_save writes for `c` with `heads` (malloc'd, caller
 * frees; NULL on a base config that is not a JSON object, with the error recorded). */
char *bt_checkpoint_config_json(const bt_model_config *c, unsigned heads, bt_dtype dtype,
                                const char *base_config_json);

/* The module names of a head, for reports: "itm_score", "mlm_score",
 * "itc_text_head/itc_image_head/itc_cross_modal_head/logit_scale". */
const char *bt_checkpoint_head_modules(bt_head h);

#endif
