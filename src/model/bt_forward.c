/* bt_forward.c: the bt-forward CLI: one forward (and optionally backward) pass of a Hugging
 * Face BridgeTower checkpoint on a batch stored as safetensors, outputs written as
 * safetensors under HF's names. It is the side-by-side check against transformers:
 *
 *   bt-forward --model DIR --inputs IN.safetensors --output OUT.safetensors
 *              [--head itc|itm|mlm] [--backward] [--precision fp32|bf16] [--threads N]
 *
 * Inputs (HF forward-argument names): input_ids (B, T) and, optional, attention_mask (B, T)
 * (all ones when absent), integer tensors (I64 or I32, ...); pixel_values (B, 3, R, R) float
 * (F32/BF16/F16), R = vision_config.image_size; labels: ITM (B) 0/1/-100, MLM (B, T) ids or
 * -100 (ignored for ITC and without a head). token_type_ids and pixel_mask are ignored, as
 * HF's BridgeTowerModel ignores them; other names get a notice.
 * Outputs (F32): with --head: `logits` (itm (B, 2); mlm (B, T, V); itc (B, 3, C): text,
 * image, cross embeds stacked as HF does), `pooler_output` (B, 2H), `loss` (0-d; ITM/MLM when
 * labels are given, ITC always), and for itc `text_embeds`, `image_embeds`, `cross_embeds`
 * (B, C). Without --head: the backbone's `text_features` (B, T, H), `image_features`
 * (B, Np, H), `pooler_output`. With --backward: `grad.<HF key>` for every parameter of the
 * model built (backbone + the head): the gradient of `loss`.
 * The head is built from the checkpoint; a head absent from it is initialized by HF's init
 * rules (seed 0) with a notice. Dropout is off (eval mode).
 * Stdout: one summary line for people (head, batch B x T, loss, forward and backward wall
 * time, the global L2 norm of the parameter gradients, precision, threads), then the
 * "wrote" line. The times include the first call's one-off costs (activation arena
 * allocation, GEMM primitive creation): a rough figure, not a benchmark.
 * Exit status: 0 ok; 1 bad model / inputs / I/O (message on stderr naming the file and
 * tensor); 2 usage error.
 *
 * Deliberately not here: tokenization and image preprocessing (inputs are tensors),
 * hidden_states / attentions outputs, training (bt-train). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "args.h"
#include "model/checkpoint.h"
#include "model/cross.h"
#include "clock.h"
#include "kernels/cpu.h"
#include "fileio.h"
#include "finite.h"
#include "mem.h"
#include "model/model.h"
#include "safetensors.h"

enum { FWD_USAGE = 2, FWD_ERROR = 1 };

typedef enum { HEAD_NONE, HEAD_ITC, HEAD_ITM, HEAD_MLM } fwd_head;

typedef struct fwd_args {
    const char *model, *inputs, *output;
    fwd_head head;
    int backward;
    bt_precision precision;
    int threads;
} fwd_args;

static void usage(FILE *out) {
    fprintf(out, "usage: bt-forward --model DIR --inputs IN.safetensors --output OUT.safetensors\n"
                 "                  [--head itc|itm|mlm] [--backward] [--precision fp32|bf16]\n"
                 "                  [--threads N]\n"
                 "  inputs:  input_ids (B,T), attention_mask (B,T, optional), pixel_values\n"
                 "           (B,3,R,R), labels (itm: (B); mlm: (B,T))\n"
                 "  outputs: loss, logits, pooler_output (+ text_embeds, image_embeds,\n"
                 "           cross_embeds for itc); no --head: text_features, image_features,\n"
                 "           pooler_output; --backward: grad.<HF key> of every parameter\n");
    bt_runtime_cli_help(out, 13);
}

static int parse_args(fwd_args *a, int argc, char **argv) {
    memset(a, 0, sizeof *a);
    a->precision = BT_PRECISION_FP32;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (strcmp(o, "--help") == 0 || strcmp(o, "-h") == 0) {
            usage(stdout);
            exit(bt_mem_exit(0)); /* mem.h: no hang at exit under ulimit -v */
        }
        if (strcmp(o, "--backward") == 0) {
            a->backward = 1;
            continue;
        }
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int known = strcmp(o, "--model") == 0 || strcmp(o, "--inputs") == 0 ||
                    strcmp(o, "--output") == 0 || strcmp(o, "--head") == 0 ||
                    strcmp(o, "--precision") == 0 || strcmp(o, "--threads") == 0;
        if (!known) {
            fprintf(stderr, "bt-forward: unknown option '%s'\n", o);
            return 0;
        }
        if (!v) {
            fprintf(stderr, "bt-forward: %s needs a value\n", o);
            return 0;
        }
        i++;
        if (strcmp(o, "--model") == 0)
            a->model = v;
        else if (strcmp(o, "--inputs") == 0)
            a->inputs = v;
        else if (strcmp(o, "--output") == 0)
            a->output = v;
        else if (strcmp(o, "--head") == 0) {
            if (strcmp(v, "itc") == 0)
                a->head = HEAD_ITC;
            else if (strcmp(v, "itm") == 0)
                a->head = HEAD_ITM;
            else if (strcmp(v, "mlm") == 0)
                a->head = HEAD_MLM;
            else {
                fprintf(stderr, "bt-forward: --head '%s': expected itc, itm or mlm\n", v);
                return 0;
            }
        } else if (strcmp(o, "--precision") == 0) {
            if (strcmp(v, "fp32") == 0)
                a->precision = BT_PRECISION_FP32;
            else if (strcmp(v, "bf16") == 0)
                a->precision = BT_PRECISION_BF16;
            else {
                fprintf(stderr, "bt-forward: --precision '%s': expected fp32 or bf16\n", v);
                return 0;
            }
        } else if (bt_parse_int("--threads", v, 1, 4096, &a->threads) != BT_OK) {
            fprintf(stderr, "bt-forward: %s\n", bt_error_message());
            return 0;
        }
    }
    if (!a->model || !a->inputs || !a->output) {
        fprintf(stderr, "bt-forward: --model, --inputs and --output are required\n");
        return 0;
    }
    if (a->backward && a->head == HEAD_NONE) {
        fprintf(stderr, "bt-forward: --backward needs a loss: choose --head itc, itm or mlm\n");
        return 0;
    }
    return 1;
}

/* --- inputs ------------------------------------------------------------------------------- */

/* Checks t's shape against want (ndim dims); `what` spells the expectation, e.g.
 * "(B, 3, R, R) with R = vision_config.image_size". */
static bt_status check_shape(const char *path, const safetensors_tensor *t, int ndim,
                             const int64_t *want, const char *what) {
    int ok = t->ndim == ndim;
    for (int k = 0; ok && k < ndim; k++)
        ok = t->shape[k] == want[k];
    if (ok) return BT_OK;
    char got[128], exp[128];
    safetensors_shape_str(got, sizeof got, t->ndim, t->shape);
    safetensors_shape_str(exp, sizeof exp, ndim, want);
    return bt_fail(BT_ERR_SHAPE, "%s: tensor '%s' has shape %s; expected %s = %s", path, t->name,
                   got, what, exp);
}

static bt_status need(const safetensors_file *f, const char *name, const char *what,
                      const safetensors_tensor **out) {
    *out = safetensors_find(f, name);
    if (!*out)
        return bt_fail(BT_ERR_MISSING, "%s: tensor '%s' is missing; expected %s", f->path, name,
                       what);
    return BT_OK;
}

typedef struct fwd_inputs {
    size_t B, T;
    int32_t *ids, *mask, *labels; /* mask, labels may be NULL */
    float *pixels;
} fwd_inputs;

static void inputs_free(fwd_inputs *in) {
    free(in->ids);
    free(in->mask);
    free(in->labels);
    free(in->pixels);
    memset(in, 0, sizeof *in);
}

/* Longer than ~120 lines on purpose: one check per input tensor of the file (name, dtype,
 * shape, range), in the order the file documents them; each check is a few lines and
 * independent. */
static bt_status read_inputs(fwd_inputs *in, const char *path, const bt_model_config *c,
                             fwd_head head, int backward) {
    memset(in, 0, sizeof *in);
    safetensors_file f;
    bt_status s = safetensors_open(&f, path);
    if (s != BT_OK) return s;
    const safetensors_tensor *t_ids, *t_mask, *t_px, *t_lab;
    s = need(&f, "input_ids", "(B, T) integer token ids", &t_ids);
    if (s == BT_OK) s = need(&f, "pixel_values", "(B, 3, R, R) normalized pixels", &t_px);
    if (s == BT_OK && t_ids->ndim != 2) {
        char got[128];
        safetensors_shape_str(got, sizeof got, t_ids->ndim, t_ids->shape);
        s = bt_fail(BT_ERR_SHAPE, "%s: tensor 'input_ids' has shape %s; expected (B, T)", path,
                    got);
    }
    if (s != BT_OK) goto done;
    in->B = (size_t)t_ids->shape[0];
    in->T = (size_t)t_ids->shape[1];
    const size_t B = in->B, T = in->T, n = B * T;
    const size_t tmax = (size_t)(c->max_position_embeddings - c->pad_token_id - 1);
    if (B == 0 || T == 0) {
        s = bt_fail(BT_ERR_SHAPE, "%s: tensor 'input_ids' is empty (B = %zu, T = %zu)", path, B, T);
        goto done;
    }
    if (T > tmax) {
        s = bt_fail(BT_ERR_SHAPE,
                    "%s: tensor 'input_ids' has shape [%zu, %zu]: T = %zu tokens; the position "
                    "table allows at most %zu (max_position_embeddings %d - pad_token_id %d - 1)",
                    path, B, T, T, tmax, c->max_position_embeddings, c->pad_token_id);
        goto done;
    }
    in->ids = malloc(n * sizeof *in->ids);
    if (!in->ids) {
        s = bt_fail(BT_ERR_NOMEM, "%s: out of memory for input_ids (%zu ids)", path, n);
        goto done;
    }
    s = safetensors_read_i32(&f, t_ids, in->ids, n);
    for (size_t i = 0; s == BT_OK && i < n; i++)
        if (in->ids[i] < 0 || in->ids[i] >= c->vocab_size)
            s = bt_fail(BT_ERR_ARG,
                        "%s: tensor 'input_ids': element [%zu, %zu] = %d is outside "
                        "the vocabulary [0, %d)",
                        path, i / T, i % T, in->ids[i], c->vocab_size);
    if (s != BT_OK) goto done;

    t_mask = safetensors_find(&f, "attention_mask");
    if (t_mask) {
        int64_t want[2] = {(int64_t)B, (int64_t)T};
        s = check_shape(path, t_mask, 2, want, "(B, T) like input_ids");
        if (s == BT_OK) {
            in->mask = malloc(n * sizeof *in->mask);
            s = in->mask ? safetensors_read_i32(&f, t_mask, in->mask, n)
                         : bt_fail(BT_ERR_NOMEM, "%s: out of memory for attention_mask", path);
        }
        for (size_t i = 0; s == BT_OK && i < n; i++)
            if (in->mask[i] != 0 && in->mask[i] != 1)
                s = bt_fail(BT_ERR_ARG,
                            "%s: tensor 'attention_mask': element [%zu, %zu] = %d; "
                            "expected 0 or 1",
                            path, i / T, i % T, in->mask[i]);
        if (s != BT_OK) goto done;
    }

    {
        int64_t want[4] = {(int64_t)B, c->num_channels, c->image_size, c->image_size};
        s = check_shape(path, t_px, 4, want,
                        "(B, 3, R, R) with B from input_ids and R = vision_config.image_size");
        if (s != BT_OK) goto done;
        size_t np = t_px->numel;
        in->pixels = malloc(np * sizeof *in->pixels);
        if (!in->pixels) {
            s = bt_fail(BT_ERR_NOMEM, "%s: out of memory for pixel_values (%zu values)", path, np);
            goto done;
        }
        s = safetensors_read_f32(&f, t_px, in->pixels, np);
        if (s == BT_OK) {
            long long shp[4] = {t_px->shape[0], t_px->shape[1], t_px->shape[2], t_px->shape[3]};
            s = bt_check_finite(in->pixels, np, path, "pixel_values", 4, shp, "pixel values");
        }
        if (s != BT_OK) goto done;
    }

    t_lab = safetensors_find(&f, "labels");
    if (t_lab && (head == HEAD_ITM || head == HEAD_MLM)) {
        int64_t want[2] = {(int64_t)B, (int64_t)T};
        int nd = head == HEAD_ITM ? 1 : 2;
        s = check_shape(path, t_lab, nd, want,
                        head == HEAD_ITM ? "(B) for --head itm" : "(B, T) for --head mlm");
        if (s != BT_OK) goto done;
        size_t nl = head == HEAD_ITM ? B : n;
        in->labels = malloc(nl * sizeof *in->labels);
        s = in->labels ? safetensors_read_i32(&f, t_lab, in->labels, nl)
                       : bt_fail(BT_ERR_NOMEM, "%s: out of memory for labels", path);
        for (size_t i = 0; s == BT_OK && i < nl; i++) {
            int32_t v = in->labels[i];
            int ok = v == -100 ||
                     (head == HEAD_ITM ? (v == 0 || v == 1) : (v >= 0 && v < c->vocab_size));
            if (!ok)
                s = bt_fail(BT_ERR_ARG, "%s: tensor 'labels': element %zu = %d; expected %s", path,
                            i, v,
                            head == HEAD_ITM ? "0, 1 or -100"
                                             : "-100 or a token id below "
                                               "vocab_size");
        }
        if (s != BT_OK) goto done;
        size_t ignored = 0;
        for (size_t i = 0; i < nl; i++)
            ignored += in->labels[i] == -100;
        if (ignored == nl)
            fprintf(stderr,
                    "bt-forward: warning: %s: every label is -100 (ignored): the loss of no "
                    "element is reported as 0 here, where Hugging Face's mean over zero "
                    "elements gives nan (docs/guarantees.md)\n",
                    path);
    } else if (t_lab && head == HEAD_NONE) {
        fprintf(stderr, "bt-forward: notice: %s: 'labels' ignored (no --head)\n", path);
    }
    if (backward && (head == HEAD_ITM || head == HEAD_MLM) && !in->labels) {
        s = bt_fail(BT_ERR_MISSING,
                    "%s: tensor 'labels' is missing; --backward with --head %s "
                    "needs it to define the loss (%s)",
                    path, head == HEAD_ITM ? "itm" : "mlm",
                    head == HEAD_ITM ? "(B) 0/1" : "(B, T) token ids or -100");
        goto done;
    }
    /* Other tensors (a fixture file also holds the reference outputs): one notice naming
     * the first few and the count, not a line per tensor. */
    size_t n_other = 0;
    for (size_t i = 0; i < f.n_tensors; i++) {
        const char *nm = f.tensors[i].name;
        static const char *const known[] = {"input_ids", "attention_mask", "pixel_values",
                                            "labels",    "token_type_ids", "pixel_mask",
                                            NULL};
        int k = 0;
        while (known[k] && strcmp(known[k], nm) != 0)
            k++;
        if (known[k]) continue;
        if (n_other < 3)
            fprintf(stderr, "%s'%s'",
                    n_other ? ", " : "bt-forward: notice: not forward arguments, ignored: ", nm);
        n_other++;
    }
    if (n_other > 3) fprintf(stderr, " (and %zu more)", n_other - 3);
    if (n_other) fprintf(stderr, " in %s\n", path);
done:
    safetensors_close(&f);
    if (s != BT_OK) inputs_free(in);
    return s;
}

/* --- outputs ------------------------------------------------------------------------------ */

/* sqrt(sum of squares) of every parameter gradient, accumulated in double. */
static double grad_norm(const bt_model *m) {
    double ss = 0.0;
    for (size_t i = 0; i < m->table.n_tensors; i++) {
        const bt_param_tensor *x = &m->table.tensors[i];
        const float *g = m->grads + x->offset;
        for (size_t k = 0; k < x->numel; k++)
            ss += (double)g[k] * (double)g[k];
    }
    return sqrt(ss);
}

typedef struct out_list {
    safetensors_entry e[16];
    size_t n;
} out_list;

static void out_add(out_list *o, const char *name, const float *data, int ndim, int64_t d0,
                    int64_t d1, int64_t d2) {
    BT_ASSERT(o->n < 16);
    safetensors_entry *e = &o->e[o->n++];
    memset(e, 0, sizeof *e);
    e->name = name;
    e->dtype = e->src_dtype = BT_DTYPE_F32;
    e->ndim = ndim;
    e->shape[0] = d0;
    e->shape[1] = d1;
    e->shape[2] = d2;
    e->data = data;
}

/* Longer than ~120 lines on purpose: the tool is one straight sequence (options, model, inputs,
 * forward, the outputs it writes), each step a call; splitting it would only pass its dozen
 * locals around. */
static int tool_main(int argc, char **argv) {
    bt_std_fds_guard(); /* fileio.h: closed 0-2 become /dev/null before any open */
    bt_runtime_prefer_start_environment(argv); /* cpu.h */
    const int info_rc = bt_runtime_cli_info(argc, argv, "bt-forward"); /* --info (cpu.h) */
    if (info_rc >= 0) return info_rc;
    fwd_args a;
    if (!parse_args(&a, argc, argv)) {
        usage(stderr);
        return FWD_USAGE;
    }
#ifdef _OPENMP
    if (a.threads) omp_set_num_threads(a.threads);
#endif
    static const unsigned head_mask[] = {BT_HEADS_NONE, BT_HEADS_ITC, BT_HEADS_ITM, BT_HEADS_MLM};
    const unsigned heads = head_mask[a.head];

    /* The output is checked before any work: a device, FIFO or directory is refused. */
    bt_status s = bt_prepare_output_file(a.output, "--output");
    if (s != BT_OK) {
        fprintf(stderr, "bt-forward: error: %s\n", bt_error_message());
        return FWD_ERROR;
    }
    /* model */
    bt_checkpoint ck;
    s = bt_checkpoint_open(&ck, a.model);
    if (s != BT_OK) {
        fprintf(stderr, "bt-forward: error: %s\n", bt_error_message());
        return FWD_ERROR;
    }
    { /* weights + gradients (+ the bf16 shadow) before bt_model_init allocates them */
        bt_param_table pt;
        bt_param_table_init(&pt, &ck.cfg, heads);
        s = bt_param_table_check_memory(&pt, a.precision == BT_PRECISION_BF16 ? 3 : 2,
                                        ck.config_path);
        bt_param_table_free(&pt);
        if (s != BT_OK) {
            fprintf(stderr, "bt-forward: error: %s\n", bt_error_message());
            bt_checkpoint_close(&ck);
            return FWD_ERROR;
        }
    }
    bt_model m;
    s = bt_model_init(&m, &ck.cfg, heads, a.precision);
    if (s != BT_OK) {
        fprintf(stderr, "bt-forward: error: %s\n", bt_error_message());
        bt_checkpoint_close(&ck);
        return FWD_ERROR;
    }
    if (a.head == HEAD_NONE) bt_model_set_cross_features(&m, 1); /* both printed below */
    bt_checkpoint_report rep;
    s = bt_checkpoint_read(&ck, &m.table, m.params, NULL, &rep);
    /* ignored keys of other heads are expected here (one head per run): not printed */
    for (size_t i = 0; i < rep.initialized.n; i++)
        fprintf(stderr, "bt-forward: notice: %s: not in checkpoint, initialized (HF init rules)\n",
                rep.initialized.names[i]);
    for (size_t i = 0; i < rep.unexpected.n; i++)
        fprintf(stderr, "bt-forward: warning: %s: unexpected key '%s'\n", ck.weights_path,
                rep.unexpected.names[i]);
    bt_checkpoint_report_free(&rep);
    const bt_model_config cfg = ck.cfg;
    bt_checkpoint_close(&ck);
    if (s != BT_OK) {
        fprintf(stderr, "bt-forward: error: %s\n", bt_error_message());
        bt_model_free(&m);
        return FWD_ERROR;
    }
    bt_model_refresh_bf16(&m);

    /* inputs */
    fwd_inputs in;
    s = read_inputs(&in, a.inputs, &cfg, a.head, a.backward);
    if (s != BT_OK) {
        fprintf(stderr, "bt-forward: error: %s\n", bt_error_message());
        bt_model_free(&m);
        return FWD_ERROR;
    }
    const size_t B = in.B, T = in.T;
    bt_batch batch = {.B = B,
                      .T = T,
                      .input_ids = in.ids,
                      .attention_mask = in.mask,
                      .pixel_values = in.pixels,
                      .itm_labels = a.head == HEAD_ITM ? in.labels : NULL,
                      .mlm_labels = a.head == HEAD_MLM ? in.labels : NULL};
    double t0 = bt_now_s();
    s = bt_forward(&m, &batch);
    double t_forward = bt_now_s() - t0, t_backward = 0.0;
    if (s != BT_OK) {
        fprintf(stderr, "bt-forward: error: %s: %s\n", a.inputs, bt_error_message());
        inputs_free(&in);
        bt_model_free(&m);
        return FWD_ERROR;
    }

    /* outputs */
    const int64_t H = cfg.hidden, C = cfg.contrastive_hidden, V = cfg.vocab_size;
    const bt_acts *ac = &m.acts;
    out_list o = {.n = 0};
    float loss = 0.0f;
    int has_loss = 0;
    float *itc_logits = NULL;
    switch (a.head) {
    case HEAD_NONE:
        out_add(&o, "text_features", ac->xt[cfg.cross_layers - 1].out, 3, (int64_t)B, (int64_t)T,
                H);
        out_add(&o, "image_features", ac->xi[cfg.cross_layers - 1].out, 3, (int64_t)B, cfg.np, H);
        break;
    case HEAD_ITM:
        out_add(&o, "logits", m.itm_logits_out, 2, (int64_t)B, 2, 0);
        has_loss = in.labels != NULL;
        loss = m.loss_itm;
        break;
    case HEAD_MLM:
        out_add(&o, "logits", m.mlm_logits_out, 3, (int64_t)B, (int64_t)T, V);
        has_loss = in.labels != NULL;
        loss = m.loss_mlm;
        break;
    case HEAD_ITC:
        itc_logits = malloc((size_t)(B * 3 * (size_t)C) * sizeof *itc_logits);
        BT_ASSERT(itc_logits); /* B * 3 * C floats, far below the activations just allocated */
        for (size_t b = 0; b < B; b++) {
            memcpy(itc_logits + (b * 3 + 0) * (size_t)C, m.itc_text + b * (size_t)C,
                   (size_t)C * sizeof(float));
            memcpy(itc_logits + (b * 3 + 1) * (size_t)C, m.itc_image + b * (size_t)C,
                   (size_t)C * sizeof(float));
            memcpy(itc_logits + (b * 3 + 2) * (size_t)C, m.itc_cross + b * (size_t)C,
                   (size_t)C * sizeof(float));
        }
        out_add(&o, "logits", itc_logits, 3, (int64_t)B, 3, C);
        out_add(&o, "text_embeds", m.itc_text, 2, (int64_t)B, C, 0);
        out_add(&o, "image_embeds", m.itc_image, 2, (int64_t)B, C, 0);
        out_add(&o, "cross_embeds", m.itc_cross, 2, (int64_t)B, C, 0);
        has_loss = 1;
        loss = m.loss_itc;
        break;
    }
    out_add(&o, "pooler_output", m.pooler_out, 2, (int64_t)B, 2 * H, 0);
    if (has_loss) out_add(&o, "loss", &loss, 0, 0, 0, 0);

    size_t n_out = o.n;
    safetensors_entry *entries = o.e;
    char **grad_names = NULL;
    if (a.backward) {
        bt_loss_weights w = {.itc = a.head == HEAD_ITC ? 1.0f : 0.0f,
                             .itm = a.head == HEAD_ITM ? 1.0f : 0.0f,
                             .mlm = a.head == HEAD_MLM ? 1.0f : 0.0f};
        bt_zero_grad(&m);
        t0 = bt_now_s();
        bt_backward(&m, &w);
        t_backward = bt_now_s() - t0;
        const bt_param_table *t = &m.table;
        entries = calloc(o.n + t->n_tensors, sizeof *entries);
        grad_names = calloc(t->n_tensors, sizeof *grad_names);
        BT_ASSERT(entries && grad_names);
        memcpy(entries, o.e, o.n * sizeof *entries);
        for (size_t i = 0; i < t->n_tensors; i++) {
            const bt_param_tensor *x = &t->tensors[i];
            size_t len = strlen(x->key) + 6;
            grad_names[i] = malloc(len);
            BT_ASSERT(grad_names[i]);
            snprintf(grad_names[i], len, "grad.%s", x->key);
            safetensors_entry *e = &entries[n_out++];
            e->name = grad_names[i];
            e->dtype = e->src_dtype = BT_DTYPE_F32;
            e->ndim = x->ndim;
            for (int k = 0; k < x->ndim; k++)
                e->shape[k] = x->shape[k];
            e->data = m.grads + x->offset;
        }
    }
    {
        static const char *const head_names[] = {"none", "itc", "itm", "mlm"};
        int threads = 1;
#ifdef _OPENMP
        threads = omp_get_max_threads();
#endif
        printf("bt-forward: head %s, batch %zu x %zu tokens", head_names[a.head], B, T);
        if (has_loss) printf(", loss %.6f", (double)loss);
        printf(", forward %.3f s", t_forward);
        if (a.backward)
            printf(", backward %.3f s, |grad| %.4e (%zu parameters)", t_backward, grad_norm(&m),
                   m.table.n_params);
        printf(", %s, %d thread%s\n", a.precision == BT_PRECISION_BF16 ? "bf16" : "fp32", threads,
               threads == 1 ? "" : "s");
    }
    static const char *const meta[] = {"format", "pt", "generator", "bt-forward", NULL};
    s = safetensors_write(a.output, entries, n_out, meta);
    int rc = 0;
    if (s != BT_OK) {
        fprintf(stderr, "bt-forward: error: %s\n", bt_error_message());
        rc = FWD_ERROR;
    } else if (has_loss && !isfinite(loss)) {
        /* finite.h: inputs and weights were finite, so this is the computation's doing. */
        fprintf(stderr,
                "bt-forward: error: the loss is %s (inputs and weights are finite); outputs "
                "written to %s for inspection\n",
                isnan(loss) ? "nan" : "inf", a.output);
        rc = FWD_ERROR;
    } else if (has_loss) {
        printf("bt-forward: wrote %s: %zu tensors, loss %.9g\n", a.output, n_out, (double)loss);
    } else {
        printf("bt-forward: wrote %s: %zu tensors\n", a.output, n_out);
    }
    if (grad_names) {
        for (size_t i = 0; i < m.table.n_tensors; i++)
            free(grad_names[i]);
        free(grad_names);
        free(entries);
    }
    free(itc_logits);
    inputs_free(&in);
    bt_model_free(&m);
    return rc;
}

int main(int argc, char **argv) {
    return bt_mem_exit(tool_main(argc, argv)); /* mem.h: no hang at exit under ulimit -v */
}
