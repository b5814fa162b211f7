/* bt_eval.c: the bt-eval CLI, a thin main over bt_eval_run (src/train/eval.h):
 *
 *   bt-eval --model DIR --data MANIFEST [--batch-size N] [--itm-rerank K] [--json OUT]
 *           [--choice-score itc|itm] [--no-choices] [--max-records N] [--max-length T]
 *           [--image-key K] [--caption-key K] [--workers N] [--cache-mb N] [--skip-bad]
 *           [--precision fp32|bf16] [--threads N]
 *
 * Prints the eval loss, text->image and image->text recall@1/5/10 with mean and median rank
 * (ITC; with --itm-rerank also ITM-re-ranked), and the 5-way caption-choice accuracy when the
 * manifest has caption_choices and labels; --json writes the same numbers
 * (bt_eval_result_to_json plus "model", "data", "max_length", "batch_size") atomically.
 * Exit status: 0 ok; 1 error (message naming the file / record); 2 usage error.
 *
 * Deliberately not here: anything the library does not (metrics definitions: metrics.h,
 * docs/evaluation.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "kernels/cpu.h"
#include "fileio.h"
#include "train/eval.h"
#include "mem.h"

static int tool_main(int argc, char **argv) {
    bt_std_fds_guard(); /* fileio.h: closed 0-2 become /dev/null before any open */
    bt_runtime_prefer_start_environment(argv); /* cpu.h */
    const int info_rc = bt_runtime_cli_info(argc, argv, "bt-eval"); /* --info (cpu.h) */
    if (info_rc >= 0) return info_rc;
    bt_eval_cli_args a;
    if (!bt_eval_cli_parse(&a, argc, argv, 0)) return 2;
    if (a.json && bt_prepare_output_file(a.json, "metrics JSON") != BT_OK) {
        fprintf(stderr, "bt-eval: error: %s\n", bt_error_message());
        return 1;
    }
    bt_eval_setup s;
    bt_status st = bt_eval_cli_setup(&s, &a, 0);
    bt_eval_result r;
    memset(&r, 0, sizeof r);
    if (st == BT_OK) st = bt_eval_run(&s.model, &s.man, &s.tok, &s.img, &a.opt, &r);
    if (st == BT_OK) {
        bt_eval_result_print(&r, stdout);
        if (a.json) {
            cJSON *j = bt_eval_result_to_json(&r);
            cJSON_AddStringToObject(j, "model", a.model);
            cJSON_AddStringToObject(j, "data", a.data);
            cJSON_AddNumberToObject(j, "max_length", a.opt.max_length);
            cJSON_AddNumberToObject(j, "batch_size", a.opt.batch_size);
            char *text = cJSON_Print(j);
            BT_ASSERT(text);
            st = bt_write_file_atomic(a.json, "metrics JSON", text, strlen(text));
            if (st == BT_OK) printf("bt-eval: wrote %s\n", a.json);
            free(text);
            cJSON_Delete(j);
        }
    }
    if (st != BT_OK) fprintf(stderr, "bt-eval: error: %s\n", bt_error_message());
    bt_eval_result_free(&r);
    bt_eval_setup_close(&s);
    return st == BT_OK ? 0 : 1;
}

int main(int argc, char **argv) {
    return bt_mem_exit(tool_main(argc, argv)); /* mem.h: no hang at exit under ulimit -v */
}
