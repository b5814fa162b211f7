/* test_bt_forward.c: the bt-forward CLI end to end on the tiny fixture (argv[1] = the binary).
 *
 * Inputs files are written here from tests/fixtures/tiny_io.safetensors under HF's
 * forward-argument names (input_ids, attention_mask, pixel_values, and labels = itm_labels or
 * mlm_labels); the binary runs on tests/fixtures/tiny for each head and without one, with and
 * without --backward; the output tensors are compared with the PyTorch twin's fixture
 * tensors (itm_logits, mlm_logits, itc_logits, itc_*_embeds, loss_*, pooler_output,
 * text_features, image_features, grad_<head>.<key>).
 *
 * Tolerance (fp32), |a-b| <= atol + rtol*|b| with b the fixture: rtol = 1e-5 and
 * atol = 1e-5 * max|b| over the tensor, for outputs, losses and the gradients of all three
 * heads, as in test_model_parity.c: the fixture is the twin computed in float64 and rounded to
 * F32, bt computes in fp32 with its own summation order and libm transcendental functions (a
 * few ulp); through the tiny model's chained, LayerNorm-renormalized layers this stays around
 * 1e-6 of a tensor's scale (at most 5.0e-6 for a gradient tensor, docs/model.md), and an
 * element far below its tensor's scale (a gradient entry that is a cancellation) is only as
 * exact as that scale. A wrong formula or a tensor written under the wrong name is off by
 * >= 1e-3 of the scale. One bf16 run uses test_model_parity's bf16 bounds (forward atol
 * 4e-2 * max|b|, loss rtol 8e-3).
 *
 * Also: I32 ids give the same bits as I64 ids (at the same thread count); an omitted
 * attention_mask equals an all-ones one; errors (missing tensor, wrong pixel shape, id out of
 * range, text too long, labels of the wrong shape or missing for --backward, missing model
 * dir) exit 1 with a message naming the tensor and the expected shape; usage errors exit 2. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "safetensors.h"
#include "test_util.h"

static const char *bin;
static const char *tmp;
static char model_dir[1024];
static safetensors_file io; /* the twin's fixture */


/* Runs bt-forward with args (NULL-terminated, after the binary); stderr to <tmp>/stderr.txt.
 * Returns the exit status (-1 if it did not exit normally). */
static int run(const char *const *args) {
    const char *argv[32];
    int n = 0;
    argv[n++] = bin;
    for (int i = 0; args[i]; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    pid_t pid = fork();
    if (pid == 0) {
        if (!freopen(tu_tmp_path("stderr.txt"), "w", stderr) ||
            !freopen(tu_tmp_path("stdout.txt"), "w", stdout))
            _exit(127);
        execv(bin, (char *const *)argv);
        _exit(127);
    }
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) != pid) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static char *stderr_text(void) {
    static char buf[8192];
    FILE *f = fopen(tu_tmp_path("stderr.txt"), "r");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f) fclose(f);
    buf[n] = 0;
    char *nl = strrchr(buf, '\n');
    if (nl && nl[1] == 0) *nl = 0;
    return buf;
}

/* --- inputs files ---------------------------------------------------------------------------- */

typedef struct in_spec {
    const char *labels;   /* fixture tensor written as `labels`, or NULL */
    int no_mask;          /* omit attention_mask */
    int ones_mask;        /* attention_mask of ones */
    int ids_i32;          /* input_ids as I32 */
    int no_pixels;        /* omit pixel_values */
    int64_t pixel_side;   /* != 0: pixel_values (B, 3, side, side) of zeros */
    int bad_id;           /* input_ids[1][2] = vocab_size */
    int64_t long_t;       /* != 0: input_ids (B, long_t) of id 5 */
    int labels_bad_shape; /* labels of shape (B) for mlm */
} in_spec;

static const char *write_inputs(const char *name, const in_spec *sp) {
    const safetensors_tensor *ids = safetensors_find(&io, "input_ids");
    const safetensors_tensor *mask = safetensors_find(&io, "attention_mask");
    const safetensors_tensor *px = safetensors_find(&io, "pixel_values");
    const int64_t B = ids->shape[0], T = ids->shape[1];
    safetensors_entry e[4];
    size_t n = 0;
    static int64_t ids64[4096];
    static int32_t ids32[4096];
    static int64_t ones[4096];
    static float zeros[3 * 3 * 64 * 64];
    for (int64_t i = 0; i < B * T; i++) {
        memcpy(&ids64[i], ids->data + 8 * i, 8);
        ids32[i] = (int32_t)ids64[i];
        ones[i] = 1;
    }
    if (sp->bad_id) ids64[1 * T + 2] = 99;
    if (sp->long_t) {
        for (int64_t i = 0; i < B * sp->long_t; i++)
            ids64[i] = 5;
        e[n++] =
            (safetensors_entry){"input_ids", BT_DTYPE_I64, BT_DTYPE_I64, 2, {B, sp->long_t}, ids64};
    } else if (sp->ids_i32) {
        e[n++] = (safetensors_entry){"input_ids", BT_DTYPE_I32, BT_DTYPE_I32, 2, {B, T}, ids32};
    } else {
        e[n++] = (safetensors_entry){"input_ids", BT_DTYPE_I64, BT_DTYPE_I64, 2, {B, T}, ids64};
    }
    if (!sp->no_mask && !sp->long_t)
        e[n++] = (safetensors_entry){
            "attention_mask", BT_DTYPE_I64,
            BT_DTYPE_I64,     2,
            {B, T},           sp->ones_mask ? (const void *)ones : (const void *)mask->data};
    if (sp->pixel_side)
        e[n++] = (safetensors_entry){
            "pixel_values", BT_DTYPE_F32, BT_DTYPE_F32, 4, {B, 3, sp->pixel_side, sp->pixel_side},
            zeros};
    else if (!sp->no_pixels)
        e[n++] = (safetensors_entry){"pixel_values",
                                     BT_DTYPE_F32,
                                     BT_DTYPE_F32,
                                     4,
                                     {px->shape[0], px->shape[1], px->shape[2], px->shape[3]},
                                     px->data};
    if (sp->labels) {
        const safetensors_tensor *l = safetensors_find(&io, sp->labels);
        safetensors_entry x = {"labels", BT_DTYPE_I64, BT_DTYPE_I64, l->ndim, {0}, l->data};
        memcpy(x.shape, l->shape, sizeof x.shape);
        if (sp->labels_bad_shape) {
            x.ndim = 1;
            x.shape[0] = B;
        }
        e[n++] = x;
    }
    static char paths[32][1200]; /* one per inputs file: callers keep them */
    static int np;
    BT_ASSERT(np < 32);
    char *path = paths[np++];
    snprintf(path, sizeof paths[0], "%s/%s", tmp, name);
    if (safetensors_write(path, e, n, NULL) != BT_OK) {
        printf("cannot write %s: %s\n", path, bt_error_message());
        exit(1);
    }
    return path;
}

/* --- comparisons ------------------------------------------------------------------------------ */

static float *read_all(const safetensors_file *f, const safetensors_tensor *t) {
    float *buf = malloc(t->numel * sizeof *buf + 4);
    if (safetensors_read_f32(f, t, buf, t->numel) != BT_OK) {
        free(buf);
        return NULL;
    }
    return buf;
}

/* out[got_name] vs io[want_name], atol = atol_frac * max|want|. */
static int compare(const safetensors_file *out, const char *got_name, const char *want_name,
                   double rtol, double atol_frac, const char *label) {
    const safetensors_tensor *g = safetensors_find(out, got_name);
    const safetensors_tensor *w = safetensors_find(&io, want_name);
    int same_shape = g && w && g->ndim == w->ndim;
    for (int k = 0; same_shape && k < g->ndim; k++)
        same_shape = g->shape[k] == w->shape[k];
    if (!same_shape) {
        tu_check(0, "%s: output '%s' present with the shape of fixture '%s'", label, got_name,
                 want_name);
        return 0;
    }
    float *a = read_all(out, g), *b = read_all(&io, w);
    double scale = 0;
    for (size_t i = 0; i < w->numel; i++)
        scale = fabs(b[i]) > scale ? fabs(b[i]) : scale;
    char name[300];
    snprintf(name, sizeof name, "%s: %s vs %s", label, got_name, want_name);
    int ok = tu_check_close_f32(name, a, b, w->numel, atol_frac * scale, rtol);
    free(a);
    free(b);
    return ok;
}

static double absmax(const safetensors_file *f, const char *name) {
    const safetensors_tensor *t = safetensors_find(f, name);
    if (!t) return 0.0;
    float *b = read_all(f, t);
    double m = 0;
    for (size_t j = 0; b && j < t->numel; j++)
        m = fabs(b[j]) > m ? fabs(b[j]) : m;
    free(b);
    return m;
}

/* Every grad.<key> of `out` against grad_<head>.<key>, one case for all (prints the worst),
 * plus the relative L2 error of the whole gradient. Bounds as test_model_parity.c sets them,
 * the same for all three heads (ITC included: the fixture's ITC problem is well conditioned
 * and its values are float64 truth, see test_model_parity.c):
 *   - rtol 1e-5, atol 1e-5 * max|b|;
 *   - attention key biases: their exact gradient is 0 (softmax is invariant to adding q·b_k
 *     to a whole row of scores), bt holds rounding noise the size of eps times the
 *     cancelling terms, so atol scales with max|b| of the matching key.weight gradient;
 *   - whole gradient: ‖a - b‖₂ / ‖b‖₂ <= 1e-5. */
static void compare_grads(const safetensors_file *out, const char *head, size_t want_count,
                          const char *label) {
    const double atol_frac = 1e-5;
    size_t n = 0, bad = 0;
    double worst = 0, l2d = 0, l2r = 0;
    char worst_name[256] = "";
    for (size_t i = 0; i < out->n_tensors; i++) {
        const safetensors_tensor *g = &out->tensors[i];
        if (strncmp(g->name, "grad.", 5) != 0) continue;
        n++;
        char want_name[300];
        snprintf(want_name, sizeof want_name, "grad_%s.%s", head, g->name + 5);
        const safetensors_tensor *w = safetensors_find(&io, want_name);
        if (!w || w->numel != g->numel) {
            printf("  %s: no fixture %s of %zu elements\n", label, want_name, g->numel);
            bad++;
            continue;
        }
        float *a = read_all(out, g), *b = read_all(&io, w);
        double scale = 0, rtol = 1e-5;
        const size_t len = strlen(want_name);
        if (len > 9 && strcmp(want_name + len - 9, ".key.bias") == 0) {
            char wname[300];
            snprintf(wname, sizeof wname, "%.*s.key.weight", (int)(len - 9), want_name);
            scale = absmax(&io, wname);
            rtol = 0.0;
        } else {
            for (size_t j = 0; j < w->numel; j++)
                scale = fabs(b[j]) > scale ? fabs(b[j]) : scale;
        }
        for (size_t j = 0; j < w->numel; j++) {
            double d = (double)a[j] - b[j];
            l2d += d * d;
            l2r += (double)b[j] * b[j];
        }
        size_t at;
        double r = tu_worst_ratio_f32(a, b, w->numel, atol_frac * scale, rtol, &at);
        if (r > worst) {
            worst = r;
            snprintf(worst_name, sizeof worst_name, "%s[%zu]", g->name, at);
        }
        if (!(r <= 1.0)) bad++;
        free(a);
        free(b);
    }
    tu_check(n == want_count && bad == 0,
             "%s: %zu grad.* tensors (want %zu) vs grad_%s.*: %zu out of tolerance, worst "
             "|a-b|/(atol+rtol|b|) = %.3g at %s",
             label, n, want_count, head, bad, worst, worst_name);
    const double rel = sqrt(l2d) / sqrt(l2r);
    tu_check(rel <= atol_frac, "%s: whole-gradient relative L2 error %.3g <= %.0e", label, rel,
             atol_frac);
}

static int open_out(safetensors_file *f, const char *path, const char *label) {
    bt_status s = safetensors_open(f, path);
    return tu_check(s == BT_OK, "%s: output file opens (%s)", label, s ? bt_error_message() : "");
}

/* Two output files hold the same tensors with the same bytes. */
static int same_outputs(const char *a, const char *b) {
    safetensors_file x, y;
    if (safetensors_open(&x, a) != BT_OK) return 0;
    if (safetensors_open(&y, b) != BT_OK) {
        safetensors_close(&x);
        return 0;
    }
    int same = x.n_tensors == y.n_tensors;
    for (size_t i = 0; same && i < x.n_tensors; i++) {
        const safetensors_tensor *t = safetensors_find(&y, x.tensors[i].name);
        same = t && t->numel == x.tensors[i].numel &&
               memcmp(t->data, x.tensors[i].data, t->end - t->begin) == 0;
    }
    safetensors_close(&x);
    safetensors_close(&y);
    return same;
}

static void expect_error(const char *label, const char *const *args, int want_rc, const char *s1,
                         const char *s2) {
    int rc = run(args);
    const char *msg = stderr_text();
    tu_check(rc == want_rc && (!s1 || strstr(msg, s1)) && (!s2 || strstr(msg, s2)),
             "%s: exit %d (want %d): %s", label, rc, want_rc, msg);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        printf("usage: test_bt_forward PATH/bt-forward\n");
        return 1;
    }
    bin = argv[1];
    /* One thread per child: the tiny model gains nothing from more, and on a loaded machine
     * OpenMP's spinning makes each run seconds long. The no-head run passes --threads 2 (the
     * option is tested), and so does the I32 run compared with it byte for byte: results are
     * bitwise reproducible only for the same thread count, ISA level and GEMM backend (the
     * GEMM libraries block and split their sums by thread count, e.g. oneDNN's AVX2 sgemm;
     * docs/determinism.md). Bitwise comparisons below always compare like with like. */
    tu_setenv("OMP_NUM_THREADS", "1", 1);
    /* Under AddressSanitizer a leak or error exits 1, like an input error: make it distinct
     * so the error cases (which expect 1) cannot pass by accident. No effect otherwise. */
    tu_setenv("ASAN_OPTIONS", "exitcode=86", 0);
    tmp = tu_tmpdir();
    snprintf(model_dir, sizeof model_dir, "%s", tu_fixture_path("tiny"));
    char iopath[1200];
    snprintf(iopath, sizeof iopath, "%s", tu_fixture_path("tiny_io.safetensors"));
    if (safetensors_open(&io, iopath) != BT_OK) {
        tu_check(0, "open %s: %s", iopath, bt_error_message());
        return tu_finish();
    }
    const double R = 1e-5, A = 1e-5; /* see the header comment */
    safetensors_file o;
    in_spec sp;

    /* no head: backbone outputs */
    memset(&sp, 0, sizeof sp);
    const char *in_plain = write_inputs("in_plain.safetensors", &sp);
    {
        const char *args[] = {"--model",   model_dir,  "--inputs",
                              in_plain,    "--output", tu_tmp_path("out_none.safetensors"),
                              "--threads", "2",        NULL};
        int rc = run(args);
        tu_check(rc == 0, "no head: exit 0 (%s)", stderr_text());
        if (rc == 0 && open_out(&o, tu_tmp_path("out_none.safetensors"), "no head")) {
            compare(&o, "text_features", "text_features", R, A, "no head");
            compare(&o, "image_features", "image_features", R, A, "no head");
            compare(&o, "pooler_output", "pooler_output", R, A, "no head");
            tu_check(o.n_tensors == 3, "no head: exactly 3 outputs (%zu)", o.n_tensors);
            safetensors_close(&o);
        }
    }

    /* each head, forward and forward+backward */
    static const struct {
        const char *head, *labels, *logits;
        size_t n_params; /* tensors of backbone + head (the tiny table) */
    } heads[] = {
        {"itm", "itm_labels", "itm_logits", 275 + 2},
        {"mlm", "mlm_labels", "mlm_logits", 275 + 6},
        {"itc", NULL, "itc_logits", 275 + 7},
    };
    for (int h = 0; h < 3; h++) {
        memset(&sp, 0, sizeof sp);
        sp.labels = heads[h].labels;
        char name[64], out[64], outb[64], loss[32], label[64];
        snprintf(name, sizeof name, "in_%s.safetensors", heads[h].head);
        snprintf(out, sizeof out, "out_%s.safetensors", heads[h].head);
        snprintf(outb, sizeof outb, "outb_%s.safetensors", heads[h].head);
        snprintf(loss, sizeof loss, "loss_%s", heads[h].head);
        const char *in = write_inputs(name, &sp);
        for (int bw = 0; bw < 2; bw++) {
            const char *op = tu_tmp_path(bw ? outb : out);
            snprintf(label, sizeof label, "%s%s", heads[h].head, bw ? " --backward" : "");
            const char *args[] = {"--model", model_dir,     "--inputs",
                                  in,        "--output",    op,
                                  "--head",  heads[h].head, bw ? "--backward" : NULL,
                                  NULL};
            int rc = run(args);
            tu_check(rc == 0, "%s: exit 0 (%s)", label, stderr_text());
            if (rc != 0 || !open_out(&o, op, label)) continue;
            compare(&o, "logits", heads[h].logits, R, A, label);
            compare(&o, "loss", loss, R, 0.0, label);
            compare(&o, "pooler_output", "pooler_output", R, A, label);
            if (h == 2) {
                compare(&o, "text_embeds", "itc_text_embeds", R, A, label);
                compare(&o, "image_embeds", "itc_image_embeds", R, A, label);
                compare(&o, "cross_embeds", "itc_cross_embeds", R, A, label);
            }
            if (bw)
                compare_grads(&o, heads[h].head, heads[h].n_params, label);
            else
                tu_check(o.n_tensors == (h == 2 ? 6u : 3u),
                         "%s: no grad.* without --backward "
                         "(%zu outputs)",
                         label, o.n_tensors);
            safetensors_close(&o);
        }
    }

    /* ITM without labels: logits, no loss */
    {
        memset(&sp, 0, sizeof sp);
        const char *args[] = {"--model", model_dir,  "--inputs",
                              in_plain,  "--output", tu_tmp_path("out_itm_nolab.safetensors"),
                              "--head",  "itm",      NULL};
        int rc = run(args);
        if (tu_check(rc == 0, "itm without labels: exit 0 (%s)", stderr_text()) &&
            open_out(&o, tu_tmp_path("out_itm_nolab.safetensors"), "itm without labels")) {
            compare(&o, "logits", "itm_logits", R, A, "itm without labels");
            tu_check(safetensors_find(&o, "loss") == NULL, "itm without labels: no loss output");
            safetensors_close(&o);
        }
    }

    /* bf16 mixed precision, with test_model_parity's bf16 bounds */
    {
        const char *args[] = {"--model",     model_dir,
                              "--inputs",    tu_tmp_path("in_itm.safetensors"),
                              "--output",    tu_tmp_path("out_itm_bf16.safetensors"),
                              "--head",      "itm",
                              "--precision", "bf16",
                              NULL};
        int rc = run(args);
        if (tu_check(rc == 0, "itm bf16: exit 0 (%s)", stderr_text()) &&
            open_out(&o, tu_tmp_path("out_itm_bf16.safetensors"), "itm bf16")) {
            compare(&o, "logits", "itm_logits", 0.0, 4e-2, "itm bf16");
            compare(&o, "loss", "loss_itm", 8e-3, 0.0, "itm bf16");
            safetensors_close(&o);
        }
    }

    /* I32 ids = I64 ids; no mask = all-ones mask */
    {
        memset(&sp, 0, sizeof sp);
        sp.ids_i32 = 1;
        const char *in32 = write_inputs("in_i32.safetensors", &sp);
        const char *a1[] = {"--model",  model_dir, "--inputs",
                            in32,       "--output", tu_tmp_path("out_i32.safetensors"),
                            "--threads", "2", /* as out_none: like with like */
                            NULL};
        tu_check(run(a1) == 0 && same_outputs(tu_tmp_path("out_i32.safetensors"),
                                              tu_tmp_path("out_none.safetensors")),
                 "I32 input_ids: same output bytes as I64 (%s)", stderr_text());
        memset(&sp, 0, sizeof sp);
        sp.no_mask = 1;
        const char *in_nm = write_inputs("in_nomask.safetensors", &sp);
        memset(&sp, 0, sizeof sp);
        sp.ones_mask = 1;
        const char *in_om = write_inputs("in_ones.safetensors", &sp);
        const char *a2[] = {"--model", model_dir,  "--inputs",
                            in_nm,     "--output", tu_tmp_path("out_nomask.safetensors"),
                            NULL};
        const char *a3[] = {"--model", model_dir,  "--inputs",
                            in_om,     "--output", tu_tmp_path("out_ones.safetensors"),
                            NULL};
        int ok = run(a2) == 0 && run(a3) == 0 &&
                 same_outputs(tu_tmp_path("out_nomask.safetensors"),
                              tu_tmp_path("out_ones.safetensors")) &&
                 !same_outputs(tu_tmp_path("out_nomask.safetensors"),
                               tu_tmp_path("out_none.safetensors"));
        tu_check(ok, "attention_mask omitted = all ones (and differs from the padded mask)");
    }

    /* errors: exit 1, message names the tensor and the expectation */
    memset(&sp, 0, sizeof sp);
    sp.no_pixels = 1;
    {
        const char *in = write_inputs("in_nopx.safetensors", &sp);
        const char *args[] = {"--model",  model_dir,        "--inputs", in,
                              "--output", tu_tmp_path("x"), NULL};
        expect_error("missing pixel_values", args, 1, "'pixel_values' is missing", "(B, 3, R, R)");
    }
    memset(&sp, 0, sizeof sp);
    sp.pixel_side = 16;
    {
        const char *in = write_inputs("in_px16.safetensors", &sp);
        const char *args[] = {"--model",  model_dir, "--inputs", in,  "--output",
                              tu_tmp_path("x"), "--head",  "itc",      NULL};
        expect_error("pixel_values 16x16", args, 1, "'pixel_values' has shape [3, 3, 16, 16]",
                     "expected (B, 3, R, R) with B from input_ids and R = "
                     "vision_config.image_size = [3, 3, 32, 32]");
    }
    memset(&sp, 0, sizeof sp);
    sp.bad_id = 1;
    {
        const char *in = write_inputs("in_badid.safetensors", &sp);
        const char *args[] = {"--model",  model_dir,        "--inputs", in,
                              "--output", tu_tmp_path("x"), NULL};
        expect_error("input id = vocab_size", args, 1, "'input_ids': element [1, 2] = 99",
                     "[0, 99)");
    }
    memset(&sp, 0, sizeof sp);
    sp.long_t = 39; /* max_position_embeddings 40 allows 38 */
    {
        const char *in = write_inputs("in_long.safetensors", &sp);
        const char *args[] = {"--model",  model_dir,        "--inputs", in,
                              "--output", tu_tmp_path("x"), NULL};
        expect_error("T = 39 > 38", args, 1, "'input_ids' has shape [3, 39]", "at most 38");
    }
    memset(&sp, 0, sizeof sp);
    sp.labels = "mlm_labels";
    sp.labels_bad_shape = 1;
    {
        const char *in = write_inputs("in_badlab.safetensors", &sp);
        const char *args[] = {"--model",  model_dir, "--inputs", in,  "--output",
                              tu_tmp_path("x"), "--head",  "mlm",      NULL};
        expect_error("mlm labels of shape (B)", args, 1, "'labels' has shape [3]",
                     "(B, T) for --head mlm = [3, 12]");
    }
    {
        const char *args[] = {"--model",  model_dir, "--inputs", in_plain,     "--output",
                              tu_tmp_path("x"), "--head",  "mlm",      "--backward", NULL};
        expect_error("--backward mlm without labels", args, 1, "'labels' is missing", "--backward");
        const char *a2[] = {"--model",  tu_tmp_path("no_model"), "--inputs", in_plain,
                            "--output", tu_tmp_path("x"),        NULL};
        expect_error("missing model dir", a2, 1, "no_model", "not found");
        const char *a3[] = {
            "--model",  model_dir,        "--inputs", tu_tmp_path("no_inputs.safetensors"),
            "--output", tu_tmp_path("x"), NULL};
        expect_error("missing inputs file", a3, 1, "no_inputs.safetensors", NULL);
    }
    /* usage errors: exit 2 */
    {
        const char *a1[] = {"--inputs", in_plain, "--output", tu_tmp_path("x"), NULL};
        expect_error("no --model", a1, 2, "--model", NULL);
        const char *a2[] = {"--model",  model_dir, "--inputs", in_plain, "--output",
                            tu_tmp_path("x"), "--head",  "vqa",      NULL};
        expect_error("--head vqa", a2, 2, "'vqa'", NULL);
        const char *a3[] = {"--model",  model_dir,  "--inputs",   in_plain,
                            "--output", tu_tmp_path("x"), "--backward", NULL};
        expect_error("--backward without a head", a3, 2, "--backward", NULL);
        const char *a4[] = {"--model",  model_dir,     "--inputs", in_plain, "--output",
                            tu_tmp_path("x"), "--precision", "fp16",     NULL};
        expect_error("--precision fp16", a4, 2, "fp16", NULL);
        const char *a5[] = {"--model",  model_dir,   "--inputs", in_plain, "--output",
                            tu_tmp_path("x"), "--threads", "0",        NULL};
        expect_error("--threads 0", a5, 2, "--threads", NULL);
    }
    safetensors_close(&io);
    return tu_finish();
}
