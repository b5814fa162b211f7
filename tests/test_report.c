/* test_report.c: report.html (src/train/report.c) rendered by headless Chromium.
 *
 * A run with known curves is logged through bt_log (30 logged steps, 5 evaluations), then
 * bt_report_write builds the page. Checks:
 * - Self-contained: no script, no external reference (src=, href=, url(, @import, http).
 * - Chromium's DOM (--dump-dom, i.e. after Chromium parsed the page: markup it could not
 *   parse as SVG would not come back as <path> elements of the chart): one series path per
 *   expected TensorBoard tag, as many points as records, every point inside the 900 x 320
 *   canvas, x increasing, the loss curve's SVG y growing (the loss falls; SVG y points
 *   down), recall curves' y shrinking (recall rises), and equal steps between the points of
 *   a linear recall curve (the y axis is linear).
 * - Chromium's screenshot (PNG decoded here with zlib): every series' stroke color covers at
 *   least MIN_CURVE_PIXELS pixels, more than its legend swatch and markers can (about 200),
 *   so each curve was drawn. A negative control renders the same page with the curves' path
 *   data removed and must find every color below that bound: the check can fail.
 * - Tables: the summary (with units and rounding), the environment (its own table), the
 *   final evaluation of the validation and test splits side by side, the flattened run
 *   config; the data-wait and phase-time charts (their series are in the DOM and screenshot
 *   checks above like every curve).
 * - ITC alone (the total loss equals ITC): the total's color still covers MIN_CURVE_PIXELS.
 * - bt-report DIR --config FILE rebuilds the page; usage and missing-metrics errors.
 * - A 20000-step run: the curve is thinned to <= 2000 points and keeps its one spike.
 * - Extreme values (a last-bit range, the ends of the double range): a bounded page.
 * - Errors: a malformed metrics line (file:line named), no metrics.jsonl, a config that is
 *   not an object.
 * Chromium is a test dependency (scripts/install_deps.sh installs Debian's `chromium`); when
 * it cannot be found the test FAILS, it does not skip. BT_CHROMIUM overrides the binary;
 * BT_REPORT_SAVE=DIR copies report.html and its screenshot there. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "train/log.h"
#include "train/report.h"
#include "test_util.h"

enum { TOTAL = 60, LOGEVERY = 2, N_TRAIN = TOTAL / LOGEVERY, N_EVAL = 5 };
enum { WIN_W = 1100, WIN_H = 3400, MIN_CURVE_PIXELS = 300, COLOR_TOL = 6 };

/* --- the run -------------------------------------------------------------------------- */

static double itc_at(double s) {
    return 2.0 * exp(-s / 15.0) + 0.1;
}
static double itm_at(double s) {
    return 0.69 - 0.004 * s;
}
static double mlm_at(double s) {
    return 1.5 - 0.01 * s;
}
static double lr_at(double s) {
    return s <= 6 ? 1e-4 * s / 6 : 1e-4 * (TOTAL - s) / (TOTAL - 6);
}

static int itc_only; /* make_run: ITC the only loss term (the total equals it) */

static int make_run(const char *dir) {
    bt_log_opts o = bt_log_opts_default();
    FILE *null_out = fopen("/dev/null", "w");
    o.out = o.err = null_out;
    o.mode = BT_PROGRESS_PLAIN;
    o.total_steps = TOTAL;
    o.logging_steps = LOGEVERY;
    o.throughput_warmup_steps = 3;
    bt_log log;
    if (!tu_check(bt_log_open(&log, dir, &o) == BT_OK, "bt_log_open: %s", bt_error_message()))
        return 0;
    for (int s = 1; s <= TOTAL; s++) {
        bt_log_step_rec r;
        bt_log_step_init(&r);
        r.step = s;
        r.epoch = s / 12.0;
        r.loss_itc = itc_at(s);
        r.loss_itm = itc_only ? NAN : itm_at(s);
        r.loss_mlm = itc_only ? NAN : mlm_at(s);
        r.loss = itc_only ? r.loss_itc : r.loss_itc + r.loss_itm + r.loss_mlm;
        r.lr = lr_at(s);
        r.grad_norm = 5.0 + 3.0 * sin(s / 5.0);
        r.samples = 32;
        r.step_s = 0.2 + 0.001 * s;
        r.data_wait_s = 0.01;
        r.forward_s = 0.06, r.backward_s = 0.1, r.comm_s = 0.01, r.optim_s = 0.02;
        r.gemm_s = 0.08, r.attention_s = 0.03, r.memory_s = 0.025;
        bt_log_step(&log, &r);
        if (s % 12 == 0) {
            double k = s / 12 - 1; /* 0..4 */
            bt_log_eval_rec e;
            bt_log_eval_init(&e);
            e.step = s;
            e.epoch = s / 12.0;
            e.loss = 2.0 - 0.2 * k;
            e.i2t_r1 = 0.10 + 0.08 * k;
            e.i2t_r5 = 0.30 + 0.08 * k;
            e.i2t_r10 = 0.45 + 0.08 * k;
            e.t2i_r1 = 0.05 + 0.08 * k;
            e.t2i_r5 = 0.22 + 0.08 * k;
            e.t2i_r10 = 0.38 + 0.08 * k;
            e.accuracy_5way = 0.2 + 0.15 * k;
            e.i2t_mean_rank = 10 - k;
            e.t2i_mean_rank = 11 - k;
            e.samples = 100;
            e.seconds = 1.0;
            bt_log_eval(&log, &e);
        }
    }
    cJSON *env = cJSON_Parse("{\"cpu\": \"Test CPU <9000>\", \"kernel_isa\": \"avx2\","
                             " \"gemm_fp32_route\": \"brg:avx2\", \"threads\": 2, \"ranks\": 4,"
                             " \"memory_plan_mib\": {\"activations\": 189.94}}");
    bt_log_summary_in in = {.flops_per_sample = 1e9, .status = "completed", .environment = env};
    int ok = bt_log_summary(&log, &in, NULL) == BT_OK;
    cJSON_Delete(env);
    /* the final evaluations bt-train writes beside (bt-eval's --json format + step) */
    char p[4300];
    snprintf(p, sizeof p, "%s/eval_results.json", dir);
    tu_setup_text(p, "{\"records\": 100, \"eval_loss\": 1.23456, \"text_to_image\": {\"r1\": 0.25,"
                     " \"r5\": 0.5, \"r10\": 0.75, \"mean_rank\": 4.5}, \"choice\": {\"accuracy\":"
                     " 0.8}, \"max_length\": 32, \"batch_size\": 8, \"step\": 60}");
    snprintf(p, sizeof p, "%s/test_results.json", dir);
    tu_setup_text(p, "{\"records\": 50, \"eval_loss\": 1.5, \"text_to_image\": {\"r1\": 0.375},"
                     " \"image_to_text\": {\"r1\": 0.125}, \"step\": 60}");
    bt_log_close(&log);
    fclose(null_out);
    return tu_check(ok, "bt_log_summary: %s", bt_error_message());
}

/* --- Chromium -------------------------------------------------------------------------- */

static char chromium[1024];

static int find_chromium(void) {
    const char *env = getenv("BT_CHROMIUM");
    if (env && *env) {
        snprintf(chromium, sizeof chromium, "%s", env);
        return access(chromium, X_OK) == 0;
    }
    const char *path = getenv("PATH");
    char dirs[4096];
    snprintf(dirs, sizeof dirs, "%s", path ? path : "/usr/bin:/bin");
    char *save = NULL;
    for (char *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
        snprintf(chromium, sizeof chromium, "%s/chromium", d);
        if (access(chromium, X_OK) == 0) return 1;
    }
    chromium[0] = 0;
    return 0;
}

static int run_captured(const char *exe, const char *work, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int run_captured(const char *exe, const char *work, const char *fmt, ...) {
    char out[16], err[4096];
    va_list ap;
    va_start(ap, fmt);
    int rc = tu_vrun_captured(exe, NULL, work, out, sizeof out, err, sizeof err, fmt, ap);
    va_end(ap);
    if (rc != 0) printf("# %s exited with %d: %.2000s\n", exe, rc, err);
    return rc;
}

static int run_cli(const char *exe, const char *work, char *out, size_t out_cap, char *err,
                   size_t err_cap, const char *fmt, ...) __attribute__((format(printf, 7, 8)));
static int run_cli(const char *exe, const char *work, char *out, size_t out_cap, char *err,
                   size_t err_cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int rc = tu_vrun_captured(exe, NULL, work, out, out_cap, err, err_cap, fmt, ap);
    va_end(ap);
    return rc;
}

/* Chromium headless on file://html, with `what` = "--dump-dom" (the DOM on stdout, read back
 * into *dom) or "--screenshot=PNG". Returns the exit code. --no-sandbox: CI containers run
 * tests as root, where Chromium's sandbox refuses to start; the page is our own file. */
static int chromium_run(const char *work, const char *html, const char *what) {
    return run_captured(chromium, work,
                        "--headless --no-sandbox --disable-gpu --hide-scrollbars "
                        "--force-device-scale-factor=1 --user-data-dir='%s/profile' "
                        "--window-size=%d,%d '%s' 'file://%s'",
                        work, WIN_W, WIN_H, what, html);
}

/* --- PNG (8-bit RGB or RGBA, not interlaced: what Chromium writes) ------------------------ */

typedef struct image {
    int w, h, ch; /* ch: 3 or 4 */
    uint8_t *px;  /* (h, w, ch) */
} image;

static uint32_t be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Decodes path into img (the PNG chunk layout and scanline filters of the PNG spec, section
 * 9: None, Sub, Up, Average, Paeth). Returns 1 or prints why not. */
static int png_read(const char *path, image *img) {
    memset(img, 0, sizeof *img);
    size_t len;
    uint8_t *d = tu_read_file(path, &len);
    static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    if (!d || len < 8 || memcmp(d, sig, 8) != 0) {
        printf("# %s: not a PNG file\n", path);
        free(d);
        return 0;
    }
    uint8_t *idat = NULL;
    size_t n_idat = 0;
    int depth = 0, ctype = -1, interlace = 0;
    for (size_t i = 8; i + 12 <= len;) {
        uint32_t n = be32(d + i);
        const uint8_t *type = d + i + 4, *body = d + i + 8;
        if (n > len - i - 12) break;
        if (memcmp(type, "IHDR", 4) == 0 && n >= 13) {
            img->w = (int)be32(body);
            img->h = (int)be32(body + 4);
            depth = body[8];
            ctype = body[9];
            interlace = body[12];
        } else if (memcmp(type, "IDAT", 4) == 0) {
            uint8_t *t = realloc(idat, n_idat + n);
            if (!t) break;
            idat = t;
            memcpy(idat + n_idat, body, n);
            n_idat += n;
        }
        i += 12 + n;
    }
    free(d);
    img->ch = ctype == 2 ? 3 : ctype == 6 ? 4 : 0;
    if (depth != 8 || !img->ch || interlace || img->w <= 0 || img->h <= 0 || !idat) {
        printf("# %s: unsupported PNG (depth %d, color type %d, interlace %d)\n", path, depth,
               ctype, interlace);
        free(idat);
        return 0;
    }
    size_t stride = (size_t)img->w * img->ch;
    uLongf raw_len = (uLongf)((stride + 1) * img->h);
    uint8_t *raw = malloc(raw_len);
    img->px = malloc(stride * img->h);
    int zrc = raw && img->px ? uncompress(raw, &raw_len, idat, n_idat) : Z_MEM_ERROR;
    free(idat);
    if (zrc != Z_OK || raw_len != (stride + 1) * img->h) {
        printf("# %s: zlib inflate failed (%d)\n", path, zrc);
        free(raw);
        free(img->px);
        img->px = NULL;
        return 0;
    }
    int bpp = img->ch;
    for (int y = 0; y < img->h; y++) {
        const uint8_t *in = raw + y * (stride + 1) + 1;
        int filter = in[-1];
        uint8_t *row = img->px + y * stride;
        const uint8_t *up = y ? row - stride : NULL;
        for (size_t x = 0; x < stride; x++) {
            int a = x >= (size_t)bpp ? row[x - bpp] : 0, b = up ? up[x] : 0,
                c = up && x >= (size_t)bpp ? up[x - bpp] : 0, pred = 0;
            switch (filter) {
            case 0:
                pred = 0;
                break;
            case 1:
                pred = a;
                break;
            case 2:
                pred = b;
                break;
            case 3:
                pred = (a + b) / 2;
                break;
            case 4: {
                int p = a + b - c, pa = abs(p - a), pb = abs(p - b), pc = abs(p - c);
                pred = pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
                break;
            }
            default:
                printf("# %s: bad filter type %d on row %d\n", path, filter, y);
                free(raw);
                return 0;
            }
            row[x] = (uint8_t)(in[x] + pred);
        }
    }
    free(raw);
    return 1;
}

/* Pixels within COLOR_TOL of "#rrggbb" on every channel. */
static long count_color(const image *img, const char *hex) {
    unsigned r, g, b;
    if (sscanf(hex, "#%2x%2x%2x", &r, &g, &b) != 3) return -1;
    long n = 0;
    for (long i = 0; i < (long)img->w * img->h; i++) {
        const uint8_t *p = img->px + i * img->ch;
        n += abs(p[0] - (int)r) <= COLOR_TOL && abs(p[1] - (int)g) <= COLOR_TOL &&
             abs(p[2] - (int)b) <= COLOR_TOL;
    }
    return n;
}

/* --- the DOM ---------------------------------------------------------------------------- */

enum { CURVE_MAX = 4096 };

typedef struct curve {
    char tag[64], color[16];
    double x[CURVE_MAX], y[CURVE_MAX];
    int n;
} curve;

/* Value of attribute name="..." inside the tag [p, end). */
static int attr(const char *p, const char *end, const char *name, char *out, size_t cap) {
    char key[64];
    snprintf(key, sizeof key, " %s=\"", name);
    const char *a = strstr(p, key);
    if (!a || a >= end) return 0;
    a += strlen(key);
    const char *q = strchr(a, '"');
    if (!q || q > end || (size_t)(q - a) >= cap) return 0;
    memcpy(out, a, (size_t)(q - a));
    out[q - a] = 0;
    return 1;
}

/* Every <path class="series" ...> of the DOM text (or of the HTML file itself: the same
 * markup). Returns the count (at most cap). */
static int parse_curves(const char *dom, curve *cv, int cap) {
    int n = 0;
    static char d[1 << 20];
    for (const char *p = dom; (p = strstr(p, "<path ")) && n < cap; p++) {
        const char *end = strchr(p, '>');
        char cls[64];
        if (!end || !attr(p, end, "class", cls, sizeof cls) || strcmp(cls, "series") != 0) continue;
        curve *c = &cv[n];
        memset(c, 0, sizeof *c);
        if (!attr(p, end, "data-series", c->tag, sizeof c->tag)) continue;
        attr(p, end, "stroke", c->color, sizeof c->color);
        if (!attr(p, end, "d", d, sizeof d)) {
            n++; /* a series path without data: reported by the point count */
            continue;
        }
        const char *q = d;
        while (*q && c->n < CURVE_MAX) {
            while (*q == ' ' || *q == 'M' || *q == 'L')
                q++;
            if (!*q) break;
            char *e1, *e2;
            double x = strtod(q, &e1), y = strtod(e1, &e2);
            if (e1 == q || e2 == e1) break;
            c->x[c->n] = x;
            c->y[c->n] = y;
            c->n++;
            q = e2;
        }
        n++;
    }
    return n;
}

static const struct {
    const char *tag;
    int points, trend; /* trend: +1 SVG y grows (value falls), -1 y shrinks, 0 not checked */
} expected[] = {
    {"train/loss", N_TRAIN, +1},
    {"train/loss_itc", N_TRAIN, +1},
    {"train/loss_itm", N_TRAIN, +1},
    {"train/loss_mlm", N_TRAIN, +1},
    {"eval/loss", N_EVAL, +1},
    {"eval/i2t_recall@1", N_EVAL, -1},
    {"eval/i2t_recall@5", N_EVAL, -1},
    {"eval/i2t_recall@10", N_EVAL, -1},
    {"eval/t2i_recall@1", N_EVAL, -1},
    {"eval/t2i_recall@5", N_EVAL, -1},
    {"eval/t2i_recall@10", N_EVAL, -1},
    {"eval/accuracy_5way", N_EVAL, -1},
    {"train/learning_rate", N_TRAIN, 0},
    {"train/grad_norm", N_TRAIN, 0},
    {"train/samples_per_second", N_TRAIN, +1},
    {"train/data_wait", N_TRAIN, 0},
    {"phase_s/forward", N_TRAIN, 0},
    {"phase_s/backward", N_TRAIN, 0},
    {"phase_s/comm", N_TRAIN, 0},
    {"phase_s/optim", N_TRAIN, 0},
    {"phase_s/gemm", N_TRAIN, 0},
    {"phase_s/attention", N_TRAIN, 0},
    {"phase_s/memory_bound", N_TRAIN, 0},
};
enum { N_EXPECTED = sizeof expected / sizeof expected[0] };

static void check_dom(const char *dom, curve *cv, int *n_cv) {
    *n_cv = parse_curves(dom, cv, 32);
    tu_check(*n_cv == N_EXPECTED, "Chromium's DOM holds %d series paths (want %d)", *n_cv,
             N_EXPECTED);
    for (int e = 0; e < N_EXPECTED; e++) {
        const curve *c = NULL;
        for (int k = 0; k < *n_cv; k++)
            if (strcmp(cv[k].tag, expected[e].tag) == 0) c = &cv[k];
        if (!tu_check(c != NULL, "series %s is in the DOM", expected[e].tag)) continue;
        int inside = 1, x_up = 1, trend = 1;
        for (int i = 0; i < c->n; i++) {
            inside &= c->x[i] >= 0 && c->x[i] <= 900 && c->y[i] >= 0 && c->y[i] <= 320;
            if (i) {
                x_up &= c->x[i] > c->x[i - 1];
                if (expected[e].trend) trend &= (c->y[i] - c->y[i - 1]) * expected[e].trend > 0;
            }
        }
        tu_check(c->n == expected[e].points && inside && x_up && trend,
                 "%s: %d points (want %d), inside the canvas %d, x increasing %d, trend %d", c->tag,
                 c->n, expected[e].points, inside, x_up, trend);
    }
    /* a linear y axis: equal recall steps give equal pixel steps (coordinates printed with
     * 2 decimals: 0.02 px of rounding) */
    for (int k = 0; k < *n_cv; k++) {
        if (strcmp(cv[k].tag, "eval/i2t_recall@1") != 0 || cv[k].n != N_EVAL) continue;
        double d0 = cv[k].y[1] - cv[k].y[0], worst = 0;
        for (int i = 2; i < N_EVAL; i++)
            worst = fmax(worst, fabs(cv[k].y[i] - cv[k].y[i - 1] - d0));
        tu_check(worst <= 0.02 && d0 < -5,
                 "recall@1 steps of 8%% are equal on screen "
                 "(%.2f px, worst deviation %.3f px)",
                 d0, worst);
    }
}

static void check_screenshot(const char *png, const curve *cv, int n_cv, int expect_drawn) {
    image img;
    if (!tu_check(png_read(png, &img), "decode the screenshot %s", png)) return;
    tu_check(img.w == WIN_W && img.h == WIN_H, "screenshot is %dx%d (want %dx%d)", img.w, img.h,
             WIN_W, WIN_H);
    int drawn = 0;
    for (int k = 0; k < n_cv; k++) {
        long px = count_color(&img, cv[k].color);
        int ok = px >= MIN_CURVE_PIXELS;
        drawn += ok;
        if (ok != expect_drawn) printf("# %s (%s): %ld pixels\n", cv[k].tag, cv[k].color, px);
    }
    if (expect_drawn)
        tu_check(drawn == n_cv && n_cv == N_EXPECTED,
                 "screenshot: all %d curves drawn (>= %d pixels of their color each): %d",
                 N_EXPECTED, MIN_CURVE_PIXELS, drawn);
    else
        tu_check(drawn == 0,
                 "negative control: with the path data removed no curve reaches %d "
                 "pixels (%d do)",
                 MIN_CURVE_PIXELS, drawn);
    free(img.px);
}

/* Copy of html with every series path's d attribute renamed (curves vanish, legend stays). */
static int write_without_curves(const char *html, const char *out) {
    char *t = (char *)tu_read_file(html, NULL);
    if (!t) return 0;
    size_t n = strlen(t);
    char *o = malloc(2 * n + 1), *w = o;
    const char *needle = "stroke-linejoin=\"round\" d=\"";
    for (const char *p = t; *p;) {
        const char *q = strstr(p, needle);
        if (!q) q = p + strlen(p);
        memcpy(w, p, (size_t)(q - p));
        w += q - p;
        if (!*q) break;
        w += sprintf(w, "stroke-linejoin=\"round\" data-d=\"");
        p = q + strlen(needle);
    }
    *w = 0;
    tu_setup_text(out, o);
    free(o);
    free(t);
    return 1;
}

static void check_static(const char *html) {
    char *t = (char *)tu_read_file(html, NULL);
    if (!tu_check(t != NULL, "report.html was written")) return;
    static const char *const banned[] = {"<script", "src=",  "href=", "url(",
                                         "@import", "http:", "https:"};
    int clean = 1;
    for (size_t i = 0; i < sizeof banned / sizeof banned[0]; i++)
        if (strstr(t, banned[i])) {
            printf("# report.html contains '%s'\n", banned[i]);
            clean = 0;
        }
    tu_check(clean, "report.html is self-contained (no script, no external reference)");
    tu_check(strstr(t, "<td>training.learning_rate</td><td>1e-05</td>") &&
                 strstr(t, "<td>model.name</td><td>tiny &lt;demo&gt;</td>") &&
                 strstr(t, "<td>final_eval.i2t_r1</td><td>42.0%</td>") &&
                 strstr(t, "samples/s</td>") && strstr(t, "<td>flops_per_sample</td><td>1e+09 FLOP") &&
                 strstr(t, "<td>status</td><td>completed</td>"),
             "the summary (with units: 42.0%%, samples/s, FLOP) and the flattened run config "
             "(escaped, as given) are tables in the page");
    /* the sections issue 23 added: units and rounding, memory, environment, test split */
    const char *peak = strstr(t, "<td>peak_rss_mib</td><td>");
    const char *wall = strstr(t, "<td>wall_seconds</td><td>");
    tu_check(peak && strstr(peak, " MiB</td>") && strstr(peak, " MiB</td>") - peak < 48 && wall &&
                 strstr(wall, " s</td>") && strstr(wall, " s</td>") - wall < 48,
             "summary: peak memory in MiB, times in seconds");
    tu_check(strstr(t, "<h2>Environment") && strstr(t, "<td>cpu</td><td>Test CPU &lt;9000&gt;</td>") &&
                 strstr(t, "<td>kernel_isa</td><td>avx2</td>") &&
                 strstr(t, "<td>gemm_fp32_route</td><td>brg:avx2</td>") &&
                 strstr(t, "<td>threads</td><td>2</td>") && strstr(t, "<td>ranks</td><td>4</td>") &&
                 strstr(t, "<td>memory_plan_mib.activations</td><td>189.9 MiB</td>") &&
                 !strstr(t, "<td>environment.cpu"),
             "the environment (CPU, ISA, GEMM route, threads, ranks, memory plan) is its own "
             "table, with units");
    const char *fe = strstr(t, "<h2>Final evaluation</h2>");
    tu_check(fe && strstr(fe, "test (test_results.json)") &&
                 strstr(fe, "<td>text→image R@1</td><td>25.0%</td><td>37.5%</td>") &&
                 strstr(fe, "<td>image→text R@1</td><td>–</td><td>12.5%</td>") &&
                 strstr(fe, "<td>eval loss (ITC)</td><td>1.2346</td><td>1.5000</td>") &&
                 strstr(fe, "<td>5-way caption choice</td><td>80.0%</td><td>–</td>"),
             "final evaluation: validation and test split side by side, percent and rounded");
    tu_check(strstr(t, "<h2>Data wait") && strstr(t, "<h2>Time per step by phase"),
             "data-wait and phase-time charts are in the page");
    free(t);
}

static void check_errors(void) {
    char dir[4200], path[4300];
    snprintf(dir, sizeof dir, "%s/bad", tu_tmpdir());
    tu_check(bt_report_write(dir, NULL) == BT_ERR_IO && strstr(bt_error_message(), "metrics.jsonl"),
             "no metrics.jsonl: %s", bt_error_message());
    snprintf(path, sizeof path, "mkdir -p '%s'", dir);
    if (system(path) != 0) return;
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    tu_setup_text(path, "{\"type\":\"train\",\"step\":1,\"loss\":2}\n"
                        "{\"type\":\"eval\",\"step\":1,\"loss\":2}\n"
                        "{\"type\":\"train\",\"loss\":2}\n");
    tu_check(bt_report_write(dir, NULL) == BT_ERR_FORMAT &&
                 strstr(bt_error_message(), "metrics.jsonl:3:"),
             "a record without a step is refused, naming file:line: %s", bt_error_message());
    tu_setup_text(path, "{\"type\":\"train\",\"step\":1,\"loss\":2}\n");
    tu_check(bt_report_write(dir, "[1, 2]") == BT_ERR_ARG,
             "a run config that is not an object is refused: %s", bt_error_message());
    tu_check(bt_report_write(dir, NULL) == BT_OK, "a one-point run without summary is fine: %s",
             bt_error_message());
}

/* 20000 logged steps with one spike: the path is thinned to at most 2000 points (+2) and
 * the spike survives, at its step's place along the x axis. */
static void check_many_points(void) {
    char dir[4200], path[4300];
    snprintf(dir, sizeof dir, "%s/long", tu_tmpdir());
    snprintf(path, sizeof path, "mkdir -p '%s'", dir);
    if (system(path) != 0) return;
    enum { N = 20000, SPIKE = 12345 };
    size_t cap = (size_t)N * 64, n = 0;
    char *text = malloc(cap);
    for (int s = 1; s <= N; s++)
        n += (size_t)snprintf(text + n, cap - n, "{\"type\":\"train\",\"step\":%d,\"loss\":%g}\n",
                              s, s == SPIKE ? 50.0 : 2.0 + 0.5 * sin(s * 0.01));
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    tu_setup_file(path, text, n);
    free(text);
    if (!tu_check(bt_report_write(dir, NULL) == BT_OK, "report of a 20000-step run: %s",
                  bt_error_message()))
        return;
    snprintf(path, sizeof path, "%s/report.html", dir);
    char *html = (char *)tu_read_file(path, NULL);
    static curve cv[32];
    int nc = html ? parse_curves(html, cv, 32) : 0;
    const curve *c = NULL;
    for (int k = 0; k < nc; k++)
        if (strcmp(cv[k].tag, "train/loss") == 0) c = &cv[k];
    if (tu_check(c != NULL, "the long run's loss path is in the page")) {
        int top = 0;
        for (int i = 1; i < c->n; i++)
            if (c->y[i] < c->y[top]) top = i;
        double where = (c->x[top] - c->x[0]) / (c->x[c->n - 1] - c->x[0]);
        double want = (double)(SPIKE - 1) / (N - 1);
        double next = 1e30; /* the highest point after the spike's */
        for (int i = 0; i < c->n; i++)
            if (i != top) next = fmin(next, c->y[i]);
        tu_check(c->n <= 2002 && c->n >= 1000 && fabs(where - want) < 1e-3 &&
                     next - c->y[top] > 100,
                 "thinned to %d points (<= 2002), the spike kept at %.4f of the x range (want "
                 "%.4f), %.0f px above the rest",
                 c->n, where, want, next - c->y[top]);
    }
    free(html);
}

/* Values the axes must survive (found by fuzz_metrics_log): one logged step whose total and
 * ITC loss differ in the last bit (a range a tick step cannot advance through: the page was
 * never finished, its buffer grew past 2 GB), and values at the ends of the double range.
 * Each page must be written with a bounded number of ticks and only finite coordinates, and
 * a duration in summary.json too long for h:mm:ss in seconds alone. */
static void check_extreme_values(void) {
    const double x = 3.4114276766777039;
    char one_ulp[512], huge[512];
    snprintf(one_ulp, sizeof one_ulp,
             "{\"type\":\"train\",\"step\":8,\"loss\":%.17g,\"loss_itc\":%.17g}\n", x,
             nextafter(x, 4.0));
    snprintf(huge, sizeof huge,
             "{\"type\":\"train\",\"step\":1,\"loss\":-1.7e308,\"lr\":1e-320}\n"
             "{\"type\":\"train\",\"step\":1e300,\"loss\":1.7e308,\"lr\":5e-324}\n");
    const char *cases[2][2] = {{"one_ulp", one_ulp}, {"huge", huge}};
    for (int k = 0; k < 2; k++) {
        char dir[4200], path[4300];
        snprintf(dir, sizeof dir, "%s/%s", tu_tmpdir(), cases[k][0]);
        snprintf(path, sizeof path, "mkdir -p '%s'", dir);
        if (system(path) != 0) return;
        snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
        tu_setup_file(path, cases[k][1], strlen(cases[k][1]));
        /* a duration past what h:mm:ss in an int holds (undefined behaviour before) */
        const char *summary = "{\"train_seconds\": 3e17, \"eval_seconds\": 3725}";
        snprintf(path, sizeof path, "%s/summary.json", dir);
        tu_setup_file(path, summary, strlen(summary));
        const bt_status st = bt_report_write(dir, NULL);
        if (!tu_check(st == BT_OK, "report (%s) written%s%s", cases[k][0], st ? ": " : "",
                      st ? bt_error_message() : ""))
            continue;
        snprintf(path, sizeof path, "%s/report.html", dir);
        char *html = (char *)tu_read_file(path, NULL);
        int ticks = 0, charts = 0;
        for (const char *p = html; p && (p = strstr(p, "text-anchor=\"middle\">")); p++) ticks++;
        for (const char *p = html; p && (p = strstr(p, "<svg ")); p++) charts++;
        tu_check(html && charts > 0 && ticks <= 16 * charts && !strstr(html, "nan") &&
                     !strstr(html, "inf\""),
                 "report (%s): %d charts, %d x ticks and labels (at most 16 a chart), every "
                 "coordinate finite", cases[k][0], charts, ticks);
        tu_check(html && strstr(html, "300000000000000000.00 s<") && strstr(html, "3725.0 s (1:02:05)"),
                 "report (%s): a duration of 3e17 s in seconds, 3725 s as 1:02:05",
                 cases[k][0]);
        free(html);
    }
}

/* bt-report, run by path (the meson test's argument), on the run's directory. */
static void check_cli(const char *exe, const char *dir) {
    char work[4300], cfg[4400], out[4096], err[4096], html[4400];
    snprintf(work, sizeof work, "%s/cli", tu_tmpdir());
    snprintf(cfg, sizeof cfg, "%s/run_config.json", tu_tmpdir());
    snprintf(html, sizeof html, "%s/report.html", dir);
    tu_setup_text(cfg, "{\"training\": {\"seed\": 4242}}");
    char mk[4400];
    snprintf(mk, sizeof mk, "mkdir -p '%s'", work);
    if (system(mk) != 0) return;
    int rc = run_cli(exe, work, out, sizeof out, err, sizeof err, "'%s' --config '%s'", dir, cfg);
    char *t = (char *)tu_read_file(html, NULL);
    tu_check(rc == 0 && strstr(out, "report.html") && t &&
                 strstr(t, "<td>training.seed</td><td>4242</td>"),
             "bt-report DIR --config FILE rebuilds the page with that config (exit %d): %s", rc,
             err);
    free(t);
    rc = run_cli(exe, work, out, sizeof out, err, sizeof err, "%s", "");
    tu_check(rc == 2 && strstr(err, "usage: bt-report"),
             "bt-report without a directory: usage, exit 2 (%d)", rc);
    rc = run_cli(exe, work, out, sizeof out, err, sizeof err, "'%s/nowhere'", tu_tmpdir());
    tu_check(rc == 1 && strstr(err, "nowhere/metrics.jsonl"),
             "bt-report on a directory without metrics.jsonl: exit 1 naming it (%d): %s", rc, err);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_report PATH_TO_BT_REPORT\n");
        return 1;
    }
    check_errors();
    check_many_points();
    check_extreme_values();
    char dir[4200], html[4300], png[4300], dom_path[4300];
    snprintf(dir, sizeof dir, "%s/run", tu_tmpdir());
    if (!make_run(dir)) return tu_finish();
    const char *config = "{\"model\": {\"name\": \"tiny <demo>\", \"hidden_size\": 64},"
                         " \"training\": {\"learning_rate\": 1e-05, \"max_steps\": 60,"
                         " \"loss_weights\": [1, 1, 1]}}";
    if (!tu_check(bt_report_write(dir, config) == BT_OK, "bt_report_write: %s", bt_error_message()))
        return tu_finish();
    snprintf(html, sizeof html, "%s/report.html", dir);
    check_static(html);
    check_cli(argv[1], dir);

    if (!tu_check(find_chromium(),
                  "Chromium found (%s): it is a test dependency, run "
                  "scripts/install_deps.sh or set BT_CHROMIUM",
                  chromium[0] ? chromium : "not in PATH"))
        return tu_finish();
    const char *work = tu_tmpdir();
    char bare[4300];
    static curve cv[32];
    int n_cv = 0;
    if (tu_check(chromium_run(work, html, "--dump-dom") == 0, "chromium --dump-dom")) {
        snprintf(dom_path, sizeof dom_path, "%s/stdout.txt", work);
        char *dom = (char *)tu_read_file(dom_path, NULL);
        if (tu_check(dom != NULL, "read the DOM")) {
            check_dom(dom, cv, &n_cv);
            /* the new tables as Chromium parsed them (cells in rows of a table element) */
            tu_check(strstr(dom, "<td>text→image R@1</td><td>25.0%</td><td>37.5%</td>") &&
                         strstr(dom, "<td>ranks</td><td>4</td>") &&
                         strstr(dom, "<h2>Environment") && strstr(dom, "<h2>Final evaluation"),
                     "Chromium's DOM holds the final-evaluation and environment tables");
        }
        free(dom);
    }
    snprintf(png, sizeof png, "--screenshot=%s/shot.png", work);
    if (tu_check(chromium_run(work, html, png) == 0, "chromium --screenshot")) {
        snprintf(png, sizeof png, "%s/shot.png", work);
        check_screenshot(png, cv, n_cv, 1);
        /* BT_REPORT_SAVE=DIR keeps the page and its screenshot for a human to look at. */
        const char *save = getenv("BT_REPORT_SAVE");
        char cmd[9000];
        snprintf(cmd, sizeof cmd, "cp '%s' '%s' '%s/'", html, png, save ? save : "");
        if (save && system(cmd) != 0) printf("# could not copy to %s\n", save);
    }
    /* ITC alone: the total loss equals ITC and is drawn under it, wider: both colors show */
    {
        char d2[4200], h2[4300], p2[4300];
        snprintf(d2, sizeof d2, "%s/itc_only", tu_tmpdir());
        itc_only = 1;
        static curve c2[32];
        if (make_run(d2) && tu_check(bt_report_write(d2, NULL) == BT_OK, "report (ITC only)")) {
            snprintf(h2, sizeof h2, "%s/report.html", d2);
            char *t2 = (char *)tu_read_file(h2, NULL);
            int n2 = t2 ? parse_curves(t2, c2, 32) : 0;
            free(t2);
            const char *loss_col = NULL, *itc_col = NULL;
            for (int k = 0; k < n2; k++) {
                if (!strcmp(c2[k].tag, "train/loss")) loss_col = c2[k].color;
                if (!strcmp(c2[k].tag, "train/loss_itc")) itc_col = c2[k].color;
            }
            snprintf(p2, sizeof p2, "--screenshot=%s/itc_only.png", work);
            image img;
            snprintf(bare, sizeof bare, "%s/itc_only.png", work);
            if (loss_col && itc_col && chromium_run(work, h2, p2) == 0 && png_read(bare, &img)) {
                long pl = count_color(&img, loss_col), pi = count_color(&img, itc_col);
                tu_check(pl >= MIN_CURVE_PIXELS && pi >= MIN_CURVE_PIXELS,
                         "ITC only: the total-loss line (%s, %ld px) stays visible beside the "
                         "equal ITC line (%s, %ld px)", loss_col, pl, itc_col, pi);
                free(img.px);
            } else {
                tu_check(0, "ITC-only report rendered with both loss series");
            }
        }
        itc_only = 0;
    }
    /* negative control */
    snprintf(bare, sizeof bare, "%s/no_curves.html", work);
    snprintf(png, sizeof png, "--screenshot=%s/bare.png", work);
    if (write_without_curves(html, bare) &&
        tu_check(chromium_run(work, bare, png) == 0, "chromium --screenshot (negative control)")) {
        snprintf(png, sizeof png, "%s/bare.png", work);
        check_screenshot(png, cv, n_cv, 0);
    }
    return tu_finish();
}
