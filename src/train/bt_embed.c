/* bt_embed.c: the bt-embed CLI, a thin main over bt_eval_run with keep_embeddings
 * (src/train/eval.h), for users who build retrieval indexes:
 *
 *   bt-embed --model DIR --data MANIFEST --output FILE.safetensors [--batch-size N]
 *            [--max-records N] [--max-length T] [--image-key K] [--caption-key K]
 *            [--workers N] [--cache-mb N] [--skip-bad] [--precision fp32|bf16] [--threads N]
 *
 * Output (docs/evaluation.md "bt-embed"), N = records embedded, in manifest order (bad
 * records left out under --skip-bad), C = contrastive_hidden_size:
 *   text_embeds  (N, C) F32  L2-normalized ITC text embedding of the record's caption
 *   image_embeds (N, C) F32  L2-normalized ITC image embedding of the record's image
 *   cross_embeds (N, C) F32  L2-normalized ITC cross-modal embedding of (caption, image)
 *   record_index (N)    I64  0-based record number in the manifest (file order, valid lines)
 *   image_index  (N)    I64  distinct-image number: records with one image path share it
 * __metadata__ (strings): format "pt", generator "bt-embed", model, manifest, max_length,
 * ids: JSON list of the N record ids (null where a record has none), image_paths: JSON list
 * of the distinct images' resolved paths, indexed by image_index.
 * Also prints the eval loss and retrieval numbers of the pass (one line each).
 * Exit status: 0 ok; 1 error (message naming the file / record); 2 usage error.
 *
 * Deliberately not here: choice captions (not embedded), an index structure (FAISS etc.). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "kernels/cpu.h"
#include "fileio.h"
#include "safetensors.h"
#include "train/eval.h"
#include "mem.h"

static char *json_take(cJSON *item) {
    char *t = cJSON_PrintUnformatted(item);
    BT_ASSERT(t);
    cJSON_Delete(item);
    return t;
}

static bt_status write_embeddings(const char *path, const bt_eval_result *r, const manifest *man,
                                  const char *model_dir, int max_length) {
    const int64_t N = (int64_t)r->n_records, C = (int64_t)r->C;
    const safetensors_entry e[5] = {
        {"text_embeds", BT_DTYPE_F32, BT_DTYPE_F32, 2, {N, C}, r->text_embeds},
        {"image_embeds", BT_DTYPE_F32, BT_DTYPE_F32, 2, {N, C}, r->image_embeds},
        {"cross_embeds", BT_DTYPE_F32, BT_DTYPE_F32, 2, {N, C}, r->cross_embeds},
        {"record_index", BT_DTYPE_I64, BT_DTYPE_I64, 1, {N}, r->record},
        {"image_index", BT_DTYPE_I64, BT_DTYPE_I64, 1, {N}, r->image_index},
    };
    cJSON *ids = cJSON_CreateArray(), *paths = cJSON_CreateArray();
    BT_ASSERT(ids && paths);
    int64_t next_image = 0;
    for (int64_t i = 0; i < N; i++) {
        const size_t rec = (size_t)r->record[i];
        const char *id = manifest_id(man, rec);
        cJSON_AddItemToArray(ids, id ? cJSON_CreateString(id) : cJSON_CreateNull());
        if (r->image_index[i] == next_image) { /* numbered in order of first appearance */
            cJSON_AddItemToArray(paths, cJSON_CreateString(manifest_image(man, rec)));
            next_image++;
        }
    }
    char *s_ids = json_take(ids), *s_paths = json_take(paths), s_len[16];
    snprintf(s_len, sizeof s_len, "%d", max_length);
    const char *meta[] = {"format", "pt", "generator", "bt-embed", "model", model_dir,
                          "manifest", man->path, "max_length", s_len, "ids", s_ids,
                          "image_paths", s_paths, NULL};
    bt_status st = safetensors_write(path, e, 5, meta);
    free(s_ids);
    free(s_paths);
    return st;
}

static int tool_main(int argc, char **argv) {
    bt_std_fds_guard(); /* fileio.h: closed 0-2 become /dev/null before any open */
    bt_runtime_prefer_start_environment(argv); /* cpu.h */
    const int info_rc = bt_runtime_cli_info(argc, argv, "bt-embed"); /* --info (cpu.h) */
    if (info_rc >= 0) return info_rc;
    bt_eval_cli_args a;
    if (!bt_eval_cli_parse(&a, argc, argv, 1)) return 2;
    if (bt_prepare_output_file(a.output, "embeddings file") != BT_OK) {
        fprintf(stderr, "bt-embed: error: %s\n", bt_error_message());
        return 1;
    }
    bt_eval_setup s;
    bt_status st = bt_eval_cli_setup(&s, &a, 1);
    bt_eval_result r;
    memset(&r, 0, sizeof r);
    if (st == BT_OK) st = bt_eval_run(&s.model, &s.man, &s.tok, &s.img, &a.opt, &r);
    if (st == BT_OK) st = write_embeddings(a.output, &r, &s.man, a.model, a.opt.max_length);
    if (st == BT_OK) {
        bt_eval_result_print(&r, stdout);
        printf("bt-embed: wrote %s: %zu records x %zu (text_embeds, image_embeds, cross_embeds), "
               "%zu distinct images\n",
               a.output, r.n_records, r.C, r.n_images);
    } else {
        fprintf(stderr, "bt-embed: error: %s\n", bt_error_message());
    }
    bt_eval_result_free(&r);
    bt_eval_setup_close(&s);
    return st == BT_OK ? 0 : 1;
}

int main(int argc, char **argv) {
    return bt_mem_exit(tool_main(argc, argv)); /* mem.h: no hang at exit under ulimit -v */
}
