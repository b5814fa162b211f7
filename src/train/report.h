/* report.h: a self-contained HTML report of a training run, written at the end of bt-train
 * (or later, from the files a run left: it needs nothing but the output directory).
 *
 *     bt_report_write(output_dir, resolved_config_json_text_or_NULL);
 *
 * Reads <dir>/metrics.jsonl (log.h) and <dir>/summary.json (when present) and writes
 * <dir>/report.html (atomically) holding:
 *   - charts as inline SVG (axes with ticks and labels, grid, legend): training loss and each
 *     term with the evaluation loss, learning rate, gradient norm, throughput, and the
 *     retrieval recall@1/5/10 in both directions with the 5-way accuracy (percent axis);
 *     x is the optimizer step. A series without any finite value is left out; a chart without
 *     any series says so instead of drawing empty axes. A series of more than 2000 points is
 *     thinned to the lowest and highest point of each run of consecutive points (spikes
 *     stay visible; the page stays small for long runs).
 *   - the summary (summary.json, flattened: final_eval.i2t_r1, ...) and the run config
 *     (flattened key paths: training.learning_rate, ...) as tables.
 * Every series path is <path class="series" data-series="TAG" stroke="#RRGGBB" d="M x y L
 * ..."> with TAG the TensorBoard tag of the same values (train/loss, eval/i2t_recall@1, ...)
 * and a color used by no other series of the report, so a rendering test can find each curve
 * in a screenshot (tests/test_report.c does so in headless Chromium).
 *
 * No JavaScript, no external resources (fonts, styles, scripts, images): the file opens
 * offline in any browser and can be mailed or attached as it is.
 *
 * Errors: BT_ERR_IO (metrics.jsonl missing or unreadable, report.html not writable),
 * BT_ERR_FORMAT naming the file and line of a record that is not a JSON object with a
 * numeric "step" and a "type" of "train" or "eval" (bt writes only those; resumed runs drop
 * cut records, log.h), or a summary.json that is not a JSON object; BT_ERR_ARG when
 * config_json is not a JSON object.
 *
 * Deliberately not here: interactivity (zoom, hover), smoothing (TensorBoard does that),
 * comparing several runs, log-scale axes. */
#ifndef BT_TRAIN_REPORT_H
#define BT_TRAIN_REPORT_H

#include "status.h"

bt_status bt_report_write(const char *dir, const char *config_json);

#endif
