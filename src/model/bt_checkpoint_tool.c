/* bt_checkpoint_tool.c: the bt-checkpoint CLI: load a Hugging Face BridgeTower model
 * directory, print what was found (config, heads, the load report), and optionally write it
 * back out (another head set, F32 or BF16) with bt_checkpoint_save.
 *
 *   bt-checkpoint --model DIR [--heads auto|none|itc,itm,mlm] [--strict] [--seed N]
 *                 [--save OUT [--dtype f32|bf16]]
 *   bt-checkpoint --model DIR --init [--heads ...] [--seed N] [--save OUT [--dtype ...]]
 *
 * Uses: checking a checkpoint before a long run; giving a backbone-only checkpoint a head
 * initialized by HF's rules (--heads itm --save OUT); BF16 copies; the HF-compatibility
 * check of docs/checkpoints.md (bt-saved directories are loaded into transformers' classes,
 * HF-saved ones are read here); with --init, a fresh model from a config.json alone (every
 * tensor by HF's init rules, bt_checkpoint_init; --heads auto then means all three heads,
 * as there is no file to take them from), saved as a complete HF model directory (e.g. the
 * demo's model from configs/synthetic-model).
 * Exit status: 0 ok, 1 load/save error (message on stderr), 2 usage error.
 *
 * Deliberately not here: pickle conversion (scripts/convert_checkpoint.py), running the
 * model (bt-forward). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "args.h"
#include "model/checkpoint.h"
#include "kernels/cpu.h"
#include "fileio.h"
#include "mem.h"

static void usage(FILE *out) {
    fprintf(out,
            "usage: bt-checkpoint --model DIR [--heads auto|none|itc,itm,mlm] [--strict]\n"
            "                     [--seed N] [--save OUT [--dtype f32|bf16]]\n"
            "       bt-checkpoint --model DIR --init [--heads H] [--seed N] [--save OUT ...]\n"
            "  --model DIR   Hugging Face BridgeTower model directory (config.json +\n"
            "                model.safetensors)\n"
            "  --heads H     heads to build: auto (those in the file, default), none, or a\n"
            "                comma list; requested heads absent from the file are initialized\n"
            "                by HF's init rules (from --seed, default 0)\n"
            "  --strict      unexpected keys are an error\n"
            "  --init        do not read DIR/model.safetensors: initialize every tensor by\n"
            "                HF's init rules from --seed (DIR needs only config.json);\n"
            "                --heads auto then builds itc, itm and mlm\n"
            "  --save OUT    write the loaded model to OUT (config.json, model.safetensors,\n"
            "                tokenizer/preprocessor files of DIR); atomic\n"
            "  --dtype D     f32 (default) or bf16 for --save\n");
    bt_runtime_cli_help(out, 16);
}

/* "itc,itm" -> mask; -1 on a bad name. */
static long parse_heads(const char *s) {
    if (strcmp(s, "auto") == 0) return (long)BT_CHECKPOINT_HEADS_AUTO;
    if (strcmp(s, "none") == 0) return BT_HEADS_NONE;
    unsigned m = 0;
    const char *p = s;
    while (*p) {
        size_t n = strcspn(p, ",");
        if (n == 3 && strncmp(p, "itc", 3) == 0)
            m |= BT_HEADS_ITC;
        else if (n == 3 && strncmp(p, "itm", 3) == 0)
            m |= BT_HEADS_ITM;
        else if (n == 3 && strncmp(p, "mlm", 3) == 0)
            m |= BT_HEADS_MLM;
        else
            return -1;
        p += n;
        if (*p == ',') p++;
    }
    return m;
}

static void heads_str(char *out, size_t cap, unsigned m) {
    snprintf(out, cap, "%s%s%s%s", (m & BT_HEADS_ITC) ? "itc " : "",
             (m & BT_HEADS_ITM) ? "itm " : "", (m & BT_HEADS_MLM) ? "mlm " : "",
             (m & BT_HEADS_ALL) ? "" : "none ");
    size_t n = strlen(out);
    if (n) out[n - 1] = '\0';
}

/* Longer than ~120 lines on purpose: the options, then one sequence (load or --init, the load
 * report, the optional --save), each step a library call with its message. */
static int tool_main(int argc, char **argv) {
    bt_std_fds_guard(); /* fileio.h: closed 0-2 become /dev/null before any open */
    const int info_rc = bt_runtime_cli_info(argc, argv, "bt-checkpoint"); /* --info (cpu.h) */
    if (info_rc >= 0) return info_rc;
    const char *model = NULL, *save = NULL;
    int init = 0;
    bt_checkpoint_load_options lo;
    bt_checkpoint_load_options_default(&lo);
    bt_checkpoint_save_options so;
    bt_checkpoint_save_options_default(&so);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "--strict") == 0) {
            lo.unknown_keys_are_errors = 1;
            continue;
        } else if (strcmp(a, "--init") == 0) {
            init = 1;
            continue;
        }
        if (!v) {
            fprintf(stderr, "bt-checkpoint: %s: missing value (or unknown option)\n", a);
            usage(stderr);
            return 2;
        }
        i++;
        if (strcmp(a, "--model") == 0) {
            model = v;
        } else if (strcmp(a, "--save") == 0) {
            save = v;
        } else if (strcmp(a, "--heads") == 0) {
            long m = parse_heads(v);
            if (m < 0) {
                fprintf(stderr,
                        "bt-checkpoint: --heads '%s': expected auto, none or a comma "
                        "list of itc, itm, mlm\n",
                        v);
                return 2;
            }
            lo.heads = (unsigned)m;
        } else if (strcmp(a, "--seed") == 0) {
            if (bt_parse_u64("--seed", v, 0, UINT64_MAX, &lo.init_seed) != BT_OK) {
                fprintf(stderr, "bt-checkpoint: %s\n", bt_error_message());
                return 2;
            }
        } else if (strcmp(a, "--dtype") == 0) {
            if (strcmp(v, "f32") == 0 || strcmp(v, "fp32") == 0)
                so.dtype = BT_DTYPE_F32;
            else if (strcmp(v, "bf16") == 0)
                so.dtype = BT_DTYPE_BF16;
            else {
                fprintf(stderr, "bt-checkpoint: --dtype '%s': expected f32 or bf16\n", v);
                return 2;
            }
        } else {
            fprintf(stderr, "bt-checkpoint: unknown option %s\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!model) {
        fprintf(stderr, "bt-checkpoint: --model DIR is required\n");
        usage(stderr);
        return 2;
    }

    if (init && lo.unknown_keys_are_errors) {
        fprintf(stderr, "bt-checkpoint: --strict checks a weights file; --init reads none\n");
        return 2;
    }

    /* --save is checked before loading: a file or a device where the directory goes is
     * refused at once. */
    struct stat save_sb;
    if (save && (!save[0] || (stat(save, &save_sb) == 0 && !S_ISDIR(save_sb.st_mode))) &&
        bt_check_output_dir(save, "--save directory", 0) != BT_OK) {
        fprintf(stderr, "bt-checkpoint: error: %s\n", bt_error_message());
        return 1;
    }

    bt_checkpoint_weights w;
    bt_checkpoint_report r;
    bt_checkpoint_report_init(&r);
    bt_status s;
    if (init) {
        unsigned heads = lo.heads == BT_CHECKPOINT_HEADS_AUTO ? BT_HEADS_ALL : lo.heads;
        s = bt_checkpoint_init(&w, model, heads, lo.init_seed);
        r.heads_built = heads & BT_HEADS_ALL;
        char wpath[4096];
        struct stat sb;
        snprintf(wpath, sizeof wpath, "%s/model.safetensors", model);
        if (s == BT_OK && stat(wpath, &sb) == 0)
            fprintf(stderr, "bt-checkpoint: notice: %s is not read (--init)\n", wpath);
    } else {
        s = bt_checkpoint_load(&w, model, &lo, &r);
        bt_checkpoint_report_print(&r, stderr, "bt-checkpoint");
    }
    if (s != BT_OK) {
        fprintf(stderr, "bt-checkpoint: error: %s\n", bt_error_message());
        bt_checkpoint_report_free(&r);
        return 1;
    }
    const bt_model_config *c = &w.cfg;
    char hf[32], hb[32];
    heads_str(hf, sizeof hf, r.heads_in_file);
    heads_str(hb, sizeof hb, r.heads_built);
    printf("%s: text %d x %d (V %d, heads %d, FFN %d), vision %d x %d (P %d, R %d), cross %d x %d, "
           "link %s\n",
           model, c->text_layers, c->text_hidden, c->vocab_size, c->text_heads,
           c->text_intermediate, c->vision_layers, c->vision_hidden, c->patch_size, c->image_size,
           c->cross_layers, c->hidden, bt_link_type_name(c->link_tower_type));
    if (init)
        printf("%s: initialized by HF's init rules from seed %llu (no weights file read); heads "
               "built: %s; %zu tensors (%zu parameters)\n",
               model, (unsigned long long)lo.init_seed, hb, w.table.n_tensors, w.table.n_params);
    else
        printf("%s: heads in file: %s; built: %s; %zu tensors (%zu parameters) loaded, %zu "
               "initialized heads, %zu ignored, %zu unexpected, %zu legacy buffers skipped\n",
               model, hf, hb, r.n_loaded, w.table.n_params, r.initialized.n, r.ignored.n,
               r.unexpected.n, r.n_skipped_buffers);
    int rc = 0;
    if (save) {
        so.base_config_json = w.config_json;
        so.copy_from_dir = model;
        s = bt_checkpoint_save(save, &w.table, w.params, &so);
        if (s != BT_OK) {
            fprintf(stderr, "bt-checkpoint: error: %s\n", bt_error_message());
            rc = 1;
        } else {
            printf("%s: saved (%s, %zu tensors)\n", save, bt_dtype_name(so.dtype),
                   w.table.n_tensors);
        }
    }
    bt_checkpoint_report_free(&r);
    bt_checkpoint_weights_free(&w);
    return rc;
}

int main(int argc, char **argv) {
    return bt_mem_exit(tool_main(argc, argv)); /* mem.h: no hang at exit under ulimit -v */
}
