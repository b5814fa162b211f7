/* report.c: report.html from metrics.jsonl and summary.json (see report.h).
 *
 * Chart geometry (SVG user units = CSS pixels): a 900 x 320 canvas, the plot area
 * [PLOT_X0, PLOT_X1] x [PLOT_Y0, PLOT_Y1], the legend in a column right of the plot (never
 * over a curve). Axis ranges are widened to "nice" tick steps (1, 2 or 5 times a power of
 * ten, about 5 ticks), so the first and last tick sit on the plot's edges.
 *
 * Deliberately not here: reading TensorBoard files (metrics.jsonl holds the same values),
 * any layout engine: every coordinate is computed here. */
#include "train/report.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "fileio.h"
#include "json_util.h"
#include "train/log.h"

enum { SVG_W = 900, SVG_H = 320 };
#define PLOT_X0 76.0
#define PLOT_X1 700.0
#define PLOT_Y0 36.0
#define PLOT_Y1 270.0
#define LEGEND_X 716.0

/* --- a growing string ------------------------------------------------------------------- */

typedef struct sbuf {
    char *s;
    size_t n, cap;
    int oom;
} sbuf;

static void sb_vprintf(sbuf *b, const char *fmt, va_list ap) {
    if (b->oom) return;
    for (;;) {
        va_list aq;
        va_copy(aq, ap);
        size_t room = b->cap - b->n;
        int k = vsnprintf(b->s ? b->s + b->n : NULL, room, fmt, aq);
        va_end(aq);
        if (k < 0) {
            b->oom = 1;
            return;
        }
        if ((size_t)k < room) {
            b->n += (size_t)k;
            return;
        }
        size_t cap = b->cap ? b->cap * 2 : 65536;
        while (cap < b->n + (size_t)k + 1)
            cap *= 2;
        char *s = realloc(b->s, cap);
        if (!s) {
            b->oom = 1;
            return;
        }
        b->s = s;
        b->cap = cap;
    }
}

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    sb_vprintf(b, fmt, ap);
    va_end(ap);
}

/* Text with &, <, >, " escaped. */
static void sb_text(sbuf *b, const char *s) {
    for (; *s; s++) {
        switch (*s) {
        case '&':
            sb_printf(b, "&amp;");
            break;
        case '<':
            sb_printf(b, "&lt;");
            break;
        case '>':
            sb_printf(b, "&gt;");
            break;
        case '"':
            sb_printf(b, "&quot;");
            break;
        default:
            sb_printf(b, "%c", *s);
        }
    }
}

/* --- series ---------------------------------------------------------------------------- */

typedef struct series {
    bt_log_field_id field; /* record type, metrics.jsonl key and tag (log.h) */
    const char *phase;     /* instead of field: "train" records' phase_s.<phase> (seconds) */
    const char *label;     /* legend */
    double *x, *y;
    size_t n;
} series;

/* One color per series of the report (report.h): distinct enough that a screenshot test
 * can tell each curve by its exact color. */
static const char *const palette[] = {
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
    "#bcbd22", "#000080", "#800000", "#008080", "#808000", "#ff00ff", "#00c000", "#6b4400",
    "#4040ff", "#ff4040", "#00a0a0", "#a000a0", "#005a9c", "#c08000", "#0080ff", "#80c000",
};
enum { N_PALETTE = sizeof palette / sizeof palette[0] };

typedef struct chart_def {
    const char *title, *y_label;
    int percent; /* y is a fraction shown as percent on a fixed [0, 100%] axis */
    series s[8];
    int n;
} chart_def;

static const chart_def chart_defs[] = {
    {"Training loss",
     "loss",
     0,
     {{.field = BT_LF_LOSS, .label = "loss (weighted total)"},
      {.field = BT_LF_LOSS_ITC, .label = "ITC"},
      {.field = BT_LF_LOSS_ITM, .label = "ITM"},
      {.field = BT_LF_LOSS_MLM, .label = "MLM"},
      {.field = BT_LF_EVAL_LOSS, .label = "eval loss"}},
     5},
    {"Retrieval and matching (validation)",
     "percent",
     1,
     {{.field = BT_LF_I2T_R1, .label = "image→text R@1"},
      {.field = BT_LF_I2T_R5, .label = "image→text R@5"},
      {.field = BT_LF_I2T_R10, .label = "image→text R@10"},
      {.field = BT_LF_T2I_R1, .label = "text→image R@1"},
      {.field = BT_LF_T2I_R5, .label = "text→image R@5"},
      {.field = BT_LF_T2I_R10, .label = "text→image R@10"},
      {.field = BT_LF_ACCURACY_5WAY, .label = "5-way accuracy"}},
     7},
    {"Learning rate", "learning rate", 0, {{.field = BT_LF_LR, .label = "learning rate"}}, 1},
    {"Gradient norm (before clipping)",
     "L2 norm",
     0,
     {{.field = BT_LF_GRAD_NORM, .label = "grad norm"}},
     1},
    {"Throughput", "samples/s", 0, {{.field = BT_LF_SAMPLES_PER_S, .label = "samples/s"}}, 1},
    {"Data wait (share of the step time spent waiting for the loader)",
     "percent",
     1,
     {{.field = BT_LF_DATA_WAIT, .label = "data wait"}},
     1},
    {"Time per step by phase (mean over the logged interval)",
     "seconds",
     0,
     {{.phase = "forward", .label = "forward"},
      {.phase = "backward", .label = "backward"},
      {.phase = "comm", .label = "communication"},
      {.phase = "optim", .label = "optimizer"},
      {.phase = "gemm", .label = "GEMMs (fwd+bwd)"},
      {.phase = "attention", .label = "attention (fwd+bwd)"},
      {.phase = "memory_bound", .label = "memory-bound (fwd+bwd)"}},
     7},
};
enum { N_CHARTS = sizeof chart_defs / sizeof chart_defs[0] };

/* --- reading ------------------------------------------------------------------------- */

static void free_series(chart_def *charts) {
    for (int c = 0; c < N_CHARTS; c++)
        for (int k = 0; k < charts[c].n; k++) {
            series *s = &charts[c].s[k];
            free(s->x);
            free(s->y);
            s->x = s->y = NULL;
            s->n = 0;
        }
}

/* Appends the record's values to every series of its type. */
static int add_record(chart_def *charts, const cJSON *rec, const char *type, double step,
                      size_t max_n) {
    for (int c = 0; c < N_CHARTS; c++)
        for (int k = 0; k < charts[c].n; k++) {
            series *s = &charts[c].s[k];
            const bt_log_field *f = &bt_log_fields[s->field];
            if (strcmp(s->phase ? "train" : f->type, type) != 0) continue;
            const cJSON *v =
                s->phase ? cJSON_GetObjectItemCaseSensitive(
                               cJSON_GetObjectItemCaseSensitive(rec, "phase_s"), s->phase)
                         : cJSON_GetObjectItemCaseSensitive(rec, f->key);
            if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) continue;
            if (!s->x) {
                s->x = malloc(max_n * sizeof *s->x);
                s->y = malloc(max_n * sizeof *s->y);
                if (!s->x || !s->y) return -1;
            }
            s->x[s->n] = step;
            s->y[s->n] = v->valuedouble;
            s->n++;
        }
    return 0;
}

static bt_status read_metrics(chart_def *charts, const char *path) {
    char *text;
    bt_status st = bt_json_read_text(path, "metrics log", &text);
    if (st != BT_OK) return st;
    size_t lines = 1;
    for (const char *p = text; *p; p++)
        lines += *p == '\n';
    int line_no = 0;
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        line_no++;
        char source[4300];
        snprintf(source, sizeof source, "%s:%d", path, line_no);
        cJSON *rec = NULL;
        bt_status ps = bt_json_parse(line, strlen(line), source, &rec);
        if (ps != BT_OK) {
            free(text);
            return ps;
        }
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(rec, "type");
        const cJSON *step = cJSON_GetObjectItemCaseSensitive(rec, "step");
        if (!cJSON_IsObject(rec) || !cJSON_IsString(type) || !cJSON_IsNumber(step) ||
            (strcmp(type->valuestring, "train") != 0 && strcmp(type->valuestring, "eval") != 0)) {
            cJSON_Delete(rec);
            free(text);
            return bt_fail(BT_ERR_FORMAT,
                           "%s:%d: expected a JSON object with \"type\" \"train\" or \"eval\" "
                           "and a numeric \"step\" (a metrics record of bt-train)",
                           path, line_no);
        }
        int rc = add_record(charts, rec, type->valuestring, step->valuedouble, lines);
        cJSON_Delete(rec);
        if (rc) {
            free(text);
            return bt_fail(BT_ERR_NOMEM, "%s: out of memory", path);
        }
    }
    free(text);
    return BT_OK;
}

/* --- axes ---------------------------------------------------------------------------- */

typedef struct axis {
    double lo, hi, step;
    int n; /* intervals: ticks at lo + i * step for i = 0..n, the last at hi */
} axis;

/* Values past this are drawn at the edge of the plot, so the axis arithmetic stays finite. */
#define AXIS_MAX 1e300

/* A "nice" step (1, 2, 5 x 10^k) giving about `ticks` intervals over [lo, hi], and the range
 * widened to multiples of it. A flat range, or one narrower than a billionth of its values
 * (the labels show 3 digits, and a step under a value's last bit would not advance it), is
 * widened around its value first. */
static axis nice_axis(double lo, double hi, int ticks) {
    lo = fmin(fmax(lo, -AXIS_MAX), AXIS_MAX);
    hi = fmin(fmax(hi, -AXIS_MAX), AXIS_MAX);
    if (!(hi - lo > 1e-9 * fmax(fabs(lo), fabs(hi)))) {
        double pad = lo != 0 ? fabs(lo) * 0.1 : 1.0;
        lo -= pad;
        hi += pad;
    }
    double raw = (hi - lo) / ticks;
    double mag = pow(10, floor(log10(raw)));
    double f = raw / mag;
    double step = (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * mag;
    axis a = {floor(lo / step + 1e-9) * step, ceil(hi / step - 1e-9) * step, step, 0};
    if (!(a.hi > a.lo)) a.hi = a.lo + step;
    a.n = (int)lround((a.hi - a.lo) / step);
    if (a.n < 1) a.n = 1;
    return a;
}

/* Tick i of a (i = 0..a->n). */
static double axis_tick(const axis *a, int i) { return i == a->n ? a->hi : a->lo + i * a->step; }

static double map_x(const axis *a, double v) {
    v = fmin(fmax(v, -AXIS_MAX), AXIS_MAX);
    return PLOT_X0 + (v - a->lo) / (a->hi - a->lo) * (PLOT_X1 - PLOT_X0);
}

static double map_y(const axis *a, double v) {
    v = fmin(fmax(v, -AXIS_MAX), AXIS_MAX);
    return PLOT_Y1 - (v - a->lo) / (a->hi - a->lo) * (PLOT_Y1 - PLOT_Y0);
}

/* Tick label: integers as such, else 3 significant digits ("0.25", "1e-05"). */
static void tick_label(char *buf, size_t cap, double v, double step, int percent) {
    if (percent)
        snprintf(buf, cap, "%.0f%%", 100 * v);
    else if (fabs(v) < step * 1e-6)
        snprintf(buf, cap, "0");
    else if (fabs(v) >= 1 && fabs(v) < 1e6 && v == floor(v))
        snprintf(buf, cap, "%.0f", v);
    else
        snprintf(buf, cap, "%.3g", v);
}

/* The path's points. Past REPORT_MAX_POINTS the series is cut into buckets of consecutive
 * points and each bucket contributes its lowest and highest point, in step order: the
 * curve keeps every spike (a loss blow-up stays visible) while a 1M-step run still makes a
 * page of a few MB. The plot is ~620 px wide, so 2000 points lose nothing visible. */
enum { REPORT_MAX_POINTS = 2000 };

static void write_path_points(sbuf *b, const series *s, const axis *ax, const axis *ay) {
    size_t bucket =
        s->n <= REPORT_MAX_POINTS ? 1 : (2 * s->n + REPORT_MAX_POINTS - 1) / REPORT_MAX_POINTS;
    int first = 1;
    for (size_t i0 = 0; i0 < s->n; i0 += bucket) {
        size_t i1 = i0 + bucket < s->n ? i0 + bucket : s->n, lo = i0, hi = i0;
        for (size_t i = i0; i < i1; i++) {
            if (s->y[i] < s->y[lo]) lo = i;
            if (s->y[i] > s->y[hi]) hi = i;
        }
        size_t pick[2] = {lo < hi ? lo : hi, lo < hi ? hi : lo};
        for (int k = 0; k < (pick[0] == pick[1] ? 1 : 2); k++) {
            sb_printf(b, "%s%.2f %.2f", first ? "M" : " L", map_x(ax, s->x[pick[k]]),
                      map_y(ay, s->y[pick[k]]));
            first = 0;
        }
    }
}

static void write_chart(sbuf *b, const chart_def *c, int *color) {
    int any = 0;
    double xlo = INFINITY, xhi = -INFINITY, ylo = INFINITY, yhi = -INFINITY;
    for (int k = 0; k < c->n; k++)
        for (size_t i = 0; i < c->s[k].n; i++) {
            any = 1;
            xlo = fmin(xlo, c->s[k].x[i]);
            xhi = fmax(xhi, c->s[k].x[i]);
            ylo = fmin(ylo, c->s[k].y[i]);
            yhi = fmax(yhi, c->s[k].y[i]);
        }
    sb_printf(b, "<section class=\"chart\">\n<h2>");
    sb_text(b, c->title);
    sb_printf(b, "</h2>\n");
    if (!any) {
        sb_printf(b, "<p class=\"empty\">No values in metrics.jsonl for this chart.</p>\n"
                     "</section>\n");
        return;
    }
    /* x from step 0, so that every chart of the page shares its scale */
    axis ax = nice_axis(xlo >= 0 ? 0 : xlo, xhi, 8);
    /* percent: from 0 to the data's maximum rounded up (early recalls of a few percent must
     * not be squashed against the axis), never past 100% */
    axis ay = nice_axis(c->percent ? 0 : ylo, c->percent ? fmax(yhi, 0.05) : yhi, 5);
    if (c->percent && ay.hi > 1) ay = nice_axis(0, 1, 5);
    sb_printf(b, "<svg width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" role=\"img\">\n", SVG_W,
              SVG_H, SVG_W, SVG_H);
    sb_printf(b, "<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"#ffffff\"/>\n", SVG_W,
              SVG_H);
    /* grid and tick labels */
    char lab[64];
    sb_printf(b, "<g class=\"grid\" stroke=\"#e4e4e4\" stroke-width=\"1\">\n");
    for (int i = 0; i <= ax.n; i++)
        sb_printf(b, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\"/>\n",
                  map_x(&ax, axis_tick(&ax, i)), PLOT_Y0, map_x(&ax, axis_tick(&ax, i)), PLOT_Y1);
    for (int i = 0; i <= ay.n; i++)
        sb_printf(b, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\"/>\n", PLOT_X0,
                  map_y(&ay, axis_tick(&ay, i)), PLOT_X1, map_y(&ay, axis_tick(&ay, i)));
    sb_printf(b, "</g>\n<g class=\"ticks\" font-size=\"11\" fill=\"#333333\">\n");
    for (int i = 0; i <= ax.n; i++) {
        const double v = axis_tick(&ax, i);
        tick_label(lab, sizeof lab, v, ax.step, 0);
        sb_printf(b, "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\">%s</text>\n",
                  map_x(&ax, v), PLOT_Y1 + 16, lab);
    }
    for (int i = 0; i <= ay.n; i++) {
        const double v = axis_tick(&ay, i);
        tick_label(lab, sizeof lab, v, ay.step, c->percent);
        sb_printf(b, "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"end\">%s</text>\n", PLOT_X0 - 6,
                  map_y(&ay, v) + 4, lab);
    }
    sb_printf(b, "</g>\n");
    /* axes and their labels */
    sb_printf(b,
              "<path class=\"axes\" d=\"M%.2f %.2f L%.2f %.2f L%.2f %.2f\" fill=\"none\" "
              "stroke=\"#333333\" stroke-width=\"1\"/>\n",
              PLOT_X0, PLOT_Y0, PLOT_X0, PLOT_Y1, PLOT_X1, PLOT_Y1);
    sb_printf(b,
              "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\" font-size=\"12\">optimizer "
              "step</text>\n",
              (PLOT_X0 + PLOT_X1) / 2, PLOT_Y1 + 36);
    sb_printf(b,
              "<text transform=\"translate(16 %.2f) rotate(-90)\" text-anchor=\"middle\" "
              "font-size=\"12\">",
              (PLOT_Y0 + PLOT_Y1) / 2);
    sb_text(b, c->y_label);
    sb_printf(b, "</text>\n");
    /* series and legend */
    int row = 0;
    for (int k = 0; k < c->n; k++) {
        const series *s = &c->s[k];
        if (s->n == 0) continue;
        const char *col = palette[(*color)++ % N_PALETTE];
        /* The total loss (first in its chart) is drawn first and wider: where a
         * term equals it (a single active loss) it shows as a border around that term. */
        char tag[64];
        if (s->phase)
            snprintf(tag, sizeof tag, "phase_s/%s", s->phase);
        else
            snprintf(tag, sizeof tag, "%s", bt_log_fields[s->field].tag);
        sb_printf(b,
                  "<path class=\"series\" data-series=\"%s\" fill=\"none\" stroke=\"%s\" "
                  "stroke-width=\"%s\" stroke-linejoin=\"round\" d=\"",
                  tag, col, !s->phase && s->field == BT_LF_LOSS ? "5" : "2.5");
        write_path_points(b, s, &ax, &ay);
        sb_printf(b, "\"/>\n");
        /* markers where points are few (evaluations) or a path would be a single point */
        if (s->n <= 15) {
            sb_printf(b, "<g fill=\"%s\">", col);
            for (size_t i = 0; i < s->n; i++)
                sb_printf(b, "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"3\"/>", map_x(&ax, s->x[i]),
                          map_y(&ay, s->y[i]));
            sb_printf(b, "</g>\n");
        }
        double ly = PLOT_Y0 + 8 + 18 * row++;
        sb_printf(b,
                  "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"%s\" "
                  "stroke-width=\"2.5\"/>",
                  LEGEND_X, ly, LEGEND_X + 20, ly, col);
        sb_printf(b, "<text x=\"%.2f\" y=\"%.2f\" font-size=\"12\">", LEGEND_X + 26, ly + 4);
        sb_text(b, s->label);
        sb_printf(b, "</text>\n");
    }
    sb_printf(b, "</svg>\n</section>\n");
}

/* --- tables ---------------------------------------------------------------------------- */

/* A summary number with its unit, rounded for reading, chosen by the key's name (the last
 * component): seconds, MiB, throughputs, fractions shown as percent, losses to 4 decimals. */
static void format_number(char *out, size_t cap, const char *key, double v) {
    const char *dot = strrchr(key, '.');
    const char *k = dot ? dot + 1 : key;
    size_t n = strlen(k);
#define ENDS(suffix) (n >= strlen(suffix) && !strcmp(k + n - strlen(suffix), suffix))
    if (ENDS("_seconds") || !strcmp(k, "seconds")) {
        if (v >= 60 && v < 1e9) /* h:mm:ss up to ~30 years; past that (a corrupt file) in s */
            snprintf(out, cap, "%.1f s (%d:%02d:%02d)", v, (int)(v / 3600), (int)(v / 60) % 60,
                     (int)v % 60);
        else
            snprintf(out, cap, "%.2f s", v);
    } else if (ENDS("_mib") || strstr(key, "_mib."))
        snprintf(out, cap, "%.1f MiB", v);
    else if (!strcmp(k, "samples_per_s"))
        snprintf(out, cap, "%.2f samples/s", v);
    else if (!strcmp(k, "steps_per_s"))
        snprintf(out, cap, "%.3f steps/s", v);
    else if (!strcmp(k, "gflops_per_s"))
        snprintf(out, cap, "%.1f GFLOP/s", v);
    else if (!strcmp(k, "flops_per_sample"))
        snprintf(out, cap, "%.4g FLOP (forward + backward)", v);
    else if (!strcmp(k, "data_wait") || !strcmp(k, "accuracy_5way") || !strcmp(k, "accuracy") ||
             !strcmp(k, "r1") || !strcmp(k, "r5") || !strcmp(k, "r10") || ENDS("_r1") ||
             ENDS("_r5") || ENDS("_r10"))
        snprintf(out, cap, "%.1f%%", 100 * v);
    else if (!strncmp(k, "loss", 4) || !strcmp(k, "eval_loss"))
        snprintf(out, cap, "%.4f", v);
    else if (!strcmp(k, "lr"))
        snprintf(out, cap, "%.3g", v);
    else if (v == floor(v) && fabs(v) < 1e15)
        snprintf(out, cap, "%.0f", v);
    else
        snprintf(out, cap, "%.4g", v);
#undef ENDS
}

/* One row per leaf: "a.b.c" = value (arrays printed as compact JSON); numbers exactly as
 * stored (%.10g), or with units and rounding when `units` (format_number). */
static void flatten_rows(sbuf *b, const cJSON *j, const char *prefix, int units) {
    for (const cJSON *it = j->child; it; it = it->next) {
        char key[512];
        if (prefix[0])
            snprintf(key, sizeof key, "%s.%s", prefix, it->string ? it->string : "?");
        else
            snprintf(key, sizeof key, "%s", it->string ? it->string : "?");
        if (cJSON_IsObject(it)) {
            flatten_rows(b, it, key, units);
            continue;
        }
        sb_printf(b, "<tr><td>");
        sb_text(b, key);
        sb_printf(b, "</td><td>");
        if (cJSON_IsString(it))
            sb_text(b, it->valuestring);
        else if (cJSON_IsNumber(it) && units) {
            char v[96];
            format_number(v, sizeof v, key, it->valuedouble);
            sb_text(b, v);
        } else if (cJSON_IsNumber(it))
            sb_printf(b, "%.10g", it->valuedouble);
        else {
            char *v = cJSON_PrintUnformatted(it);
            if (v) sb_text(b, v);
            free(v);
        }
        sb_printf(b, "</td></tr>\n");
    }
}

static void write_table(sbuf *b, const char *title, const cJSON *j, const char *none,
                        int units) {
    sb_printf(b, "<section>\n<h2>");
    sb_text(b, title);
    sb_printf(b, "</h2>\n");
    if (!j) {
        sb_printf(b, "<p class=\"empty\">");
        sb_text(b, none);
        sb_printf(b, "</p>\n</section>\n");
        return;
    }
    sb_printf(b, "<table>\n<tr><th>key</th><th>value</th></tr>\n");
    flatten_rows(b, j, "", units);
    sb_printf(b, "</table>\n</section>\n");
}

/* The final evaluations side by side: eval_results.json (validation) and test_results.json
 * (data.test, HF --do_predict) as bt-train wrote them (bt-eval's --json format). */
static void write_final_evals(sbuf *b, cJSON *const res[2]) {
    static const char *const split[2] = {"validation (eval_results.json)",
                                         "test (test_results.json)"};
    sb_printf(b, "<section class=\"final-eval\">\n<h2>Final evaluation</h2>\n");
    if (!res[0] && !res[1]) {
        sb_printf(b, "<p class=\"empty\">No eval_results.json nor test_results.json: no final "
                     "evaluation (eval.at_end false, or the run has not finished).</p>\n"
                     "</section>\n");
        return;
    }
    static const struct {
        const char *label, *obj, *key;
    } rows[] = {
        {"records", NULL, "records"},
        {"eval loss (ITC)", NULL, "eval_loss"},
        {"text→image R@1", "text_to_image", "r1"},
        {"text→image R@5", "text_to_image", "r5"},
        {"text→image R@10", "text_to_image", "r10"},
        {"text→image mean rank", "text_to_image", "mean_rank"},
        {"image→text R@1", "image_to_text", "r1"},
        {"image→text R@5", "image_to_text", "r5"},
        {"image→text R@10", "image_to_text", "r10"},
        {"image→text mean rank", "image_to_text", "mean_rank"},
        {"5-way caption choice", "choice", "accuracy"},
        {"text length (max_length)", NULL, "max_length"},
        {"batch size", NULL, "batch_size"},
        {"step", NULL, "step"},
        {"evaluation time", NULL, "seconds"},
    };
    sb_printf(b, "<table>\n<tr><th>metric</th><th>%s</th><th>%s</th></tr>\n", split[0], split[1]);
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        sb_printf(b, "<tr><td>");
        sb_text(b, rows[r].label);
        sb_printf(b, "</td>");
        for (int k = 0; k < 2; k++) {
            const cJSON *o = rows[r].obj ? cJSON_GetObjectItemCaseSensitive(res[k], rows[r].obj)
                                         : res[k];
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, rows[r].key);
            char text[96] = "–";
            if (cJSON_IsNumber(v)) format_number(text, sizeof text, rows[r].key, v->valuedouble);
            sb_printf(b, "<td>");
            sb_text(b, text);
            sb_printf(b, "</td>");
        }
        sb_printf(b, "</tr>\n");
    }
    sb_printf(b, "</table>\n</section>\n");
}

/* dir/name as a JSON object into *out; absent: *out = NULL, BT_OK. */
static bt_status load_optional(const char *dir, const char *name, const char *what, cJSON **out) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    *out = NULL;
    struct stat sb;
    if (stat(path, &sb) != 0 && errno == ENOENT) return BT_OK;
    bt_status st = bt_json_load(path, what, out);
    if (st == BT_OK && !cJSON_IsObject(*out))
        st = bt_fail(BT_ERR_FORMAT, "%s: expected a JSON object (the %s)", path, what);
    if (st != BT_OK) {
        cJSON_Delete(*out);
        *out = NULL;
    }
    return st;
}

/* --- the page ---------------------------------------------------------------------------- */

static const char page_style[] =
    "body{font-family:sans-serif;margin:16px;color:#222;background:#ffffff}"
    "h1{font-size:20px;margin:0 0 4px 0}h2{font-size:15px;margin:18px 0 4px 0}"
    "p.meta{color:#555;margin:0 0 8px 0;font-size:13px}p.empty{color:#777;font-size:13px}"
    "svg{display:block}"
    "table{border-collapse:collapse;font-size:12px}"
    "td,th{border:1px solid #ccc;padding:2px 8px;text-align:left;font-family:monospace}"
    "th{background:#f0f0f0}";

bt_status bt_report_write(const char *dir, const char *config_json) {
    char path[4200];
    cJSON *config = NULL, *summary = NULL;
    if (config_json) {
        bt_status cs = bt_json_parse(config_json, strlen(config_json), "run config", &config);
        if (cs == BT_OK && !cJSON_IsObject(config))
            cs = bt_fail(BT_ERR_ARG, "bt_report_write: the run config is not a JSON object");
        if (cs != BT_OK) {
            cJSON_Delete(config);
            return cs;
        }
    }
    /* absent: the run did not finish (or evaluated nothing at the end) */
    cJSON *results[2] = {NULL, NULL};
    bt_status ls = load_optional(dir, "summary.json", "run summary", &summary);
    if (ls == BT_OK)
        ls = load_optional(dir, "eval_results.json", "evaluation results", &results[0]);
    if (ls == BT_OK)
        ls = load_optional(dir, "test_results.json", "test-split results", &results[1]);
    if (ls != BT_OK) {
        cJSON_Delete(summary);
        cJSON_Delete(results[0]);
        cJSON_Delete(config);
        return ls;
    }
    cJSON *environment = cJSON_DetachItemFromObjectCaseSensitive(summary, "environment");
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    chart_def charts[N_CHARTS]; /* the definitions, with this run's points */
    memcpy(charts, chart_defs, sizeof charts);
    bt_status st = read_metrics(charts, path);
    if (st != BT_OK) {
        free_series(charts);
        cJSON_Delete(summary);
        cJSON_Delete(environment);
        cJSON_Delete(results[0]);
        cJSON_Delete(results[1]);
        cJSON_Delete(config);
        return st;
    }

    sbuf b = {0};
    sb_printf(&b,
              "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
              "<title>bt training report</title>\n<style>%s</style>\n</head>\n<body>\n",
              page_style);
    sb_printf(&b, "<h1>bt training report</h1>\n<p class=\"meta\">output directory ");
    sb_text(&b, dir);
    const cJSON *status = cJSON_GetObjectItemCaseSensitive(summary, "status");
    const cJSON *last = cJSON_GetObjectItemCaseSensitive(summary, "last_step");
    if (cJSON_IsString(status)) {
        sb_printf(&b, " &middot; ");
        sb_text(&b, status->valuestring);
    }
    if (cJSON_IsNumber(last)) sb_printf(&b, " at step %.0f", last->valuedouble);
    time_t now = time(NULL);
    struct tm tm;
    char when[64] = "";
    if (gmtime_r(&now, &tm)) strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &tm);
    sb_printf(&b, " &middot; written %s</p>\n", when);
    int color = 0;
    for (int c = 0; c < N_CHARTS; c++)
        write_chart(&b, &charts[c], &color);
    write_final_evals(&b, results);
    write_table(&b, "Summary (times, throughput, peak memory)", summary,
                "No summary.json: the run has not finished (or was killed).", 1);
    write_table(&b, "Environment (CPU, kernels, GEMM route, threads, ranks, memory plan)",
                environment, "No environment in summary.json (a run of an earlier bt).", 1);
    write_table(&b, "Run config", config, "The run config was not given to the report.", 0);
    sb_printf(&b, "</body>\n</html>\n");
    free_series(charts);
    cJSON_Delete(summary);
    cJSON_Delete(environment);
    cJSON_Delete(results[0]);
    cJSON_Delete(results[1]);
    cJSON_Delete(config);
    if (b.oom) {
        free(b.s);
        return bt_fail(BT_ERR_NOMEM, "%s/report.html: out of memory", dir);
    }
    snprintf(path, sizeof path, "%s/report.html", dir);
    st = bt_write_file_atomic(path, "report", b.s, b.n);
    free(b.s);
    return st;
}
