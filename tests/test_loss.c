/* test_loss.c: the training losses, the hard-negative sampler and the MLM masker
 * (src/train/loss.h).
 *
 * 1. Parity with the PyTorch twin (tests/fixtures/train/losses.safetensors, made by
 *    scripts/gen_train_fixtures.py in float64 from F32 inputs, stored rounded to F32): each
 *    loss and the gradient w.r.t. each of its inputs, for HF ITC, duplicate-aware ITC, the
 *    local-rows ITC share, ITM and MLM. Tolerance |a-b| <= 1e-6·max|b| + 1e-5·|b|: the C code
 *    is fp32 with double row sums (softmax of <= 50 logits, GEMMs of width 8), so each value
 *    carries a few fp32 roundings of its scale (~1e-7 relative); 1e-5 leaves 100x margin
 *    while a wrong term (a missing /3, a transposed CE, the soft targets on the wrong
 *    columns) changes values by > 1e-2.
 * 2. Finite differences (central, h = 1e-3, in fp32) of every loss w.r.t. its inputs, against
 *    the accumulated gradients: the loss is O(1) with fp32 rounding ~1e-6, so the difference
 *    quotient carries ~1e-3 absolute noise plus O(h²) curvature: atol 3e-3, rtol 1e-2.
 * 3. Accumulation: a second call adds the same gradient again (2x).
 * 4. Sampler: never a positive (the pair itself or a duplicate) over 20000 seeds; empirical
 *    frequencies within 5 standard deviations sqrt(K p (1-p)) of K p in every cell (false
 *    alarm probability < 1e-5 per cell for a correct sampler; a sampler that ignores the
 *    similarities (uniform) or keeps the duplicate misses by > 20 sd); same seed same draws;
 *    the all-duplicates fallback and the B < 2 error.
 * 5. Masker: specials, pads and padding never selected; labels hold the original id at
 *    selected positions and -100 elsewhere; over ~100k maskable positions the selected
 *    fraction is 0.15 within 5 sd (sd = sqrt(0.15·0.85/n) ~ 1.1e-3), and of the selected ones
 *    <mask> 0.8, random 0.1, unchanged 0.1 within 5 sd (the exact expectations include the
 *    1/V chance that a random id equals the original or <mask>); random ids are in [0, V) with
 *    mean (V-1)/2 within 5 sd; a row's masks depend only on (seed, row key), not its place. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/gemm.h"
#include "train/loss.h"
#include "safetensors.h"
#include "test_fixture.h"
#include "test_util.h"

static int close_scaled(const char *name, const float *got, const float *want, size_t n) {
    double mx = 0;
    for (size_t i = 0; i < n; i++) mx = fmax(mx, fabs(want[i]));
    return tu_check_close_f32(name, got, want, n, 1e-6 * mx, 1e-5);
}

/* --- ITC ------------------------------------------------------------------------------- */

typedef struct itc_case {
    size_t B, C, r0, nr;
    float *te, *ie, *ce, ls;
    uint64_t *ikey, *ckey; /* NULL: HF targets */
} itc_case;

/* loss and gradients of rows [r0, r0+nr); dimage = d_image_cols + rows scattered back */
static float itc_eval(const itc_case *c, float *dte, float *die, float *dce, float *dls,
                      bt_loss_ws *ws) {
    const size_t B = c->B, C = c->C;
    float *die_rows = calloc(c->nr * C, sizeof *die_rows);
    bt_itc_args a = {.n_rows = c->nr, .n_cols = B, .row_offset = c->r0, .n_total = B, .C = C,
                     .text_rows = c->te + c->r0 * C, .image_rows = c->ie + c->r0 * C,
                     .image_cols = c->ie, .cross_cols = c->ce, .logit_scale = c->ls,
                     .image_key = c->ikey, .caption_key = c->ckey, .weight = 1.0f,
                     .d_text_rows = dte ? dte + c->r0 * C : NULL,
                     .d_image_rows = die ? die_rows : NULL, .d_image_cols = die,
                     .d_cross_cols = dce, .d_logit_scale = dls};
    float loss = bt_itc_loss(&a, ws);
    if (die)
        for (size_t i = 0; i < c->nr * C; i++) die[c->r0 * C + i] += die_rows[i];
    free(die_rows);
    return loss;
}

static void itc_fd(const char *name, itc_case *c, bt_loss_ws *ws) {
    const size_t n = c->B * c->C;
    float *g[3], dls = 0;
    for (int k = 0; k < 3; k++) g[k] = calloc(n, sizeof(float));
    itc_eval(c, g[0], g[1], g[2], &dls, ws);
    float *x[3] = {c->te, c->ie, c->ce};
    const float h = 1e-3f;
    double worst = 0;
    int ok = 1;
    for (int k = 0; k < 3; k++) {
        for (size_t i = 0; i < n; i++) {
            const float x0 = x[k][i];
            x[k][i] = x0 + h;
            const double lp = itc_eval(c, NULL, NULL, NULL, NULL, ws);
            x[k][i] = x0 - h;
            const double lm = itc_eval(c, NULL, NULL, NULL, NULL, ws);
            x[k][i] = x0;
            const double fd = (lp - lm) / (2.0 * h), an = g[k][i];
            const double r = fabs(fd - an) / (3e-3 + 1e-2 * fabs(fd));
            worst = fmax(worst, r);
            ok &= r <= 1.0;
        }
    }
    const float l0 = c->ls;
    c->ls = l0 + h;
    const double lp = itc_eval(c, NULL, NULL, NULL, NULL, ws);
    c->ls = l0 - h;
    const double lm = itc_eval(c, NULL, NULL, NULL, NULL, ws);
    c->ls = l0;
    const double fd = (lp - lm) / (2.0 * h);
    const double r = fabs(fd - dls) / (3e-3 + 1e-2 * fabs(fd));
    worst = fmax(worst, r);
    ok &= r <= 1.0;
    tu_check(ok, "%s: finite differences of every embedding element and logit_scale (worst "
             "ratio to the bound %.3f)", name, worst);
    for (int k = 0; k < 3; k++) free(g[k]);
}

static void test_itc(const safetensors_file *io, bt_loss_ws *ws) {
    const size_t B = 6, C = 8;
    itc_case c = {.B = B, .C = C, .r0 = 0, .nr = B};
    c.te = tu_fixture_f32(io, "itc.text", B * C);
    c.ie = tu_fixture_f32(io, "itc.image", B * C);
    c.ce = tu_fixture_f32(io, "itc.cross", B * C);
    float *ls = tu_fixture_f32(io, "itc.logit_scale", 1);
    int32_t *ik = tu_fixture_i32(io, "itc_dup.image_key", B);
    int32_t *ck = tu_fixture_i32(io, "itc_dup.caption_key", B);
    if (!c.te || !c.ie || !c.ce || !ls || !ik || !ck) return;
    c.ls = ls[0];
    uint64_t ikey[6], ckey[6];
    for (size_t i = 0; i < B; i++) {
        ikey[i] = (uint64_t)ik[i];
        ckey[i] = (uint64_t)ck[i];
    }
    const char *names[3] = {"itc", "itc_dup", "itc_local"};
    for (int v = 0; v < 3; v++) {
        c.ikey = v ? ikey : NULL;
        c.ckey = v ? ckey : NULL;
        c.r0 = v == 2 ? 2 : 0;
        c.nr = v == 2 ? 3 : B;
        float *g[3], dls = 0;
        for (int k = 0; k < 3; k++) g[k] = calloc(B * C, sizeof(float));
        float loss = itc_eval(&c, g[0], g[1], g[2], &dls, ws);
        char key[64];
        const char *gk[3] = {"d_text", "d_image", "d_cross"};
        snprintf(key, sizeof key, "%s.loss", names[v]);
        float *want = tu_fixture_f32(io, key, 1);
        if (want) close_scaled(key, &loss, want, 1);
        free(want);
        for (int k = 0; k < 3; k++) {
            snprintf(key, sizeof key, "%s.%s", names[v], gk[k]);
            want = tu_fixture_f32(io, key, B * C);
            if (want) close_scaled(key, g[k], want, B * C);
            free(want);
        }
        snprintf(key, sizeof key, "%s.d_logit_scale", names[v]);
        want = tu_fixture_f32(io, key, 1);
        if (want) close_scaled(key, &dls, want, 1);
        free(want);
        if (v == 0) {
            /* accumulation: a second call adds the same gradient */
            float *g2 = malloc(B * C * sizeof *g2);
            memcpy(g2, g[0], B * C * sizeof *g2);
            itc_eval(&c, g[0], NULL, NULL, NULL, ws);
            for (size_t i = 0; i < B * C; i++) g2[i] *= 2.0f;
            tu_check_close_f32("itc: second call accumulates (d_text = 2x)", g[0], g2, B * C,
                               1e-7, 1e-6);
            free(g2);
            /* all keys distinct: the soft-target path equals the arange path */
            uint64_t di[6], dc[6];
            for (size_t i = 0; i < B; i++) di[i] = 100 + i, dc[i] = 200 + i;
            c.ikey = di;
            c.ckey = dc;
            float l2 = itc_eval(&c, NULL, NULL, NULL, NULL, ws);
            tu_check(fabsf(l2 - loss) <= 1e-6f * loss,
                     "itc: distinct keys give the HF loss (%.7f vs %.7f)", l2, loss);
            c.ikey = c.ckey = NULL;
        }
        for (int k = 0; k < 3; k++) free(g[k]);
        itc_fd(names[v], &c, ws);
    }
    free(c.te);
    free(c.ie);
    free(c.ce);
    free(ls);
    free(ik);
    free(ck);
}

/* --- ITM / MLM ------------------------------------------------------------------------- */

static void ce_fd(const char *name, float *logits, size_t n, size_t v, const int32_t *labels,
                  float w, int mlm, bt_loss_ws *ws) {
    float *g = calloc(n * v, sizeof *g);
    if (mlm) bt_mlm_loss(g, logits, labels, n, v, w, NULL, ws);
    else bt_itm_loss(g, logits, labels, n, w, ws);
    const float h = 1e-3f;
    double worst = 0;
    for (size_t i = 0; i < n * v; i++) {
        const float x0 = logits[i];
        logits[i] = x0 + h;
        double lp = mlm ? bt_mlm_loss(NULL, logits, labels, n, v, w, NULL, ws)
                        : bt_itm_loss(NULL, logits, labels, n, w, ws);
        logits[i] = x0 - h;
        double lm = mlm ? bt_mlm_loss(NULL, logits, labels, n, v, w, NULL, ws)
                        : bt_itm_loss(NULL, logits, labels, n, w, ws);
        logits[i] = x0;
        const double fd = w * (lp - lm) / (2.0 * h);
        worst = fmax(worst, fabs(fd - g[i]) / (3e-3 + 1e-2 * fabs(fd)));
    }
    tu_check(worst <= 1.0, "%s: finite differences of every logit (worst ratio %.3f)", name,
             worst);
    free(g);
}

static void test_itm_mlm(const safetensors_file *io, bt_loss_ws *ws) {
    const size_t P = 9, n = 24, V = 50;
    float *lg = tu_fixture_f32(io, "itm.logits", P * 2);
    int32_t *lab = tu_fixture_i32(io, "itm.labels", P);
    float *wl = tu_fixture_f32(io, "itm.loss", 1), *wg = tu_fixture_f32(io, "itm.d_logits", P * 2);
    if (lg && lab && wl && wg) {
        float *g = calloc(P * 2, sizeof *g);
        float loss = bt_itm_loss(g, lg, lab, P, 0.7f, ws);
        close_scaled("itm.loss", &loss, wl, 1);
        close_scaled("itm.d_logits (weight 0.7)", g, wg, P * 2);
        ce_fd("itm", lg, P, 2, lab, 0.7f, 0, ws);
        free(g);
    }
    free(lg), free(lab), free(wl), free(wg);
    lg = tu_fixture_f32(io, "mlm.logits", n * V);
    lab = tu_fixture_i32(io, "mlm.labels", n);
    wl = tu_fixture_f32(io, "mlm.loss", 1);
    wg = tu_fixture_f32(io, "mlm.d_logits", n * V);
    if (lg && lab && wl && wg) {
        float *g = calloc(n * V, sizeof *g);
        size_t valid = 0;
        float loss = bt_mlm_loss(g, lg, lab, n, V, 1.3f, &valid, ws);
        tu_check(valid == 7, "mlm: 7 labelled positions (got %zu)", valid);
        close_scaled("mlm.loss", &loss, wl, 1);
        close_scaled("mlm.d_logits (weight 1.3)", g, wg, n * V);
        ce_fd("mlm", lg, n, V, lab, 1.3f, 1, ws);
        /* no label: loss 0 and no gradient */
        int32_t none[24];
        for (size_t i = 0; i < n; i++) none[i] = -100;
        memset(g, 0, n * V * sizeof *g);
        loss = bt_mlm_loss(g, lg, none, n, V, 1.0f, &valid, ws);
        int zero = loss == 0.0f && valid == 0;
        for (size_t i = 0; i < n * V; i++) zero &= g[i] == 0.0f;
        tu_check(zero, "mlm: all labels -100 -> loss 0, no gradient");
        free(g);
    }
    free(lg), free(lab), free(wl), free(wg);
}

/* --- sampler --------------------------------------------------------------------------- */

static void test_sampler(bt_loss_ws *ws) {
    enum { B = 5, K = 20000 };
    /* text -> image logits; pairs 1 and 3 share an image */
    const float sim[B * B] = {5.0f, 4.0f, 3.5f, 2.0f, 4.5f,  /* */
                              1.0f, 6.0f, 2.0f, 3.0f, 0.5f,  /* */
                              3.0f, 2.5f, 5.5f, 4.0f, 1.0f,  /* */
                              0.0f, 2.0f, 1.0f, 4.0f, 3.0f,  /* */
                              2.0f, 3.0f, 4.0f, 1.0f, 5.0f};
    const uint64_t ik[B] = {10, 11, 12, 11, 14}, ck[B] = {20, 21, 22, 23, 24};
    int32_t ni[B], nt[B];
    long cnt_i[B][B] = {{0}}, cnt_t[B][B] = {{0}};
    int never_pos = 1;
    for (uint64_t s = 0; s < K; s++) {
        if (bt_itm_sample_negatives(ni, nt, sim, ik, ck, B, 1000 + s, NULL, ws) != BT_OK) {
            tu_check(0, "sampler: %s", bt_error_message());
            return;
        }
        for (int b = 0; b < B; b++) {
            cnt_i[b][ni[b]]++;
            cnt_t[b][nt[b]]++;
            never_pos &= ni[b] != b && nt[b] != b && ik[ni[b]] != ik[b] && ik[nt[b]] != ik[b];
        }
    }
    tu_check(never_pos, "sampler: no negative is the pair itself or shares its image (%d draws)",
             K * B * 2);
    /* expected: p_j ∝ exp(sim) over candidates; text b -> row b, image b -> column b */
    double worst = 0;
    for (int dir = 0; dir < 2; dir++) {
        for (int b = 0; b < B; b++) {
            double w[B], sum = 0;
            for (int j = 0; j < B; j++) {
                const int pos = j == b || ik[j] == ik[b];
                w[j] = pos ? 0.0 : exp(dir == 0 ? sim[b * B + j] : sim[j * B + b]);
                sum += w[j];
            }
            for (int j = 0; j < B; j++) {
                const double p = w[j] / sum, e = K * p;
                const long got = dir == 0 ? cnt_i[b][j] : cnt_t[b][j];
                const double sd = sqrt(K * p * (1 - p));
                if (p == 0) continue;
                worst = fmax(worst, fabs((double)got - e) / sd);
            }
        }
    }
    tu_check(worst <= 5.0, "sampler: frequencies ∝ exp(sim) over the non-positives, worst cell "
             "%.2f sd (bound 5)", worst);
    int32_t a1[B], a2[B], b1[B], b2[B];
    bt_itm_sample_negatives(a1, a2, sim, ik, ck, B, 42, NULL, ws);
    bt_itm_sample_negatives(b1, b2, sim, ik, ck, B, 42, NULL, ws);
    tu_check(memcmp(a1, b1, sizeof a1) == 0 && memcmp(a2, b2, sizeof a2) == 0,
             "sampler: same seed, same negatives");
    /* every pair shares the image: fallback to j != b, counted */
    const uint64_t same[B] = {1, 1, 1, 1, 1};
    size_t nfb = 0;
    bt_itm_sample_negatives(ni, nt, sim, same, ck, B, 7, &nfb, ws);
    int ok = nfb == 2 * B;
    for (int b = 0; b < B; b++) ok &= ni[b] != b && nt[b] != b && ni[b] >= 0 && ni[b] < B;
    tu_check(ok, "sampler: all duplicates -> uniform over j != b, %zu fallbacks counted", nfb);
    tu_check(bt_itm_sample_negatives(ni, nt, sim, NULL, NULL, 1, 7, NULL, ws) == BT_ERR_ARG &&
                 strstr(bt_error_message(), "at least 2"),
             "sampler: B = 1 is an error: %s", bt_error_message());
}

/* --- masker ---------------------------------------------------------------------------- */

static void test_masker(void) {
    enum { B = 2000, T = 64, V = 1000, MASK = 999 };
    const bt_mlm_spec spec = {0.15, MASK, V, {0, 1, 2, 3, MASK}, 5};
    int32_t *ids = malloc(B * T * sizeof *ids), *am = malloc(B * T * sizeof *am);
    int32_t *out = malloc(B * T * sizeof *out), *lab = malloc(B * T * sizeof *lab);
    int32_t *out2 = malloc(B * T * sizeof *out2), *lab2 = malloc(B * T * sizeof *lab2);
    uint64_t *keys = malloc(B * sizeof *keys);
    tu_rng r;
    tu_rng_seed(&r, 5);
    size_t maskable = 0;
    for (int b = 0; b < B; b++) {
        keys[b] = 1000003u * (uint64_t)b + 17;
        const int len = 8 + (int)(tu_rng_next(&r) % (T - 8 + 1));
        for (int t = 0; t < T; t++) {
            int32_t id = 1; /* pad */
            if (t == 0) id = 0;
            else if (t == len - 1) id = 2;
            else if (t < len - 1) id = (tu_rng_next(&r) % 50 == 0) ? 3 : 4 + (int32_t)(tu_rng_next(&r) % (V - 5));
            ids[b * T + t] = id;
            am[b * T + t] = t < len;
            maskable += t < len && id >= 4 && id != MASK;
        }
    }
    /* one real token under a 0 attention mask: never selected */
    ids[5 * T + T - 1] = 500;
    size_t sel = bt_mlm_mask(out, lab, ids, am, B, T, keys, 99, &spec);
    int inv = 1;
    size_t n_mask = 0, n_rand = 0, n_same = 0, n_sel = 0;
    double rsum = 0;
    for (size_t i = 0; i < (size_t)B * T; i++) {
        const int can = am[i] && ids[i] >= 4 && ids[i] != MASK;
        if (lab[i] == -100) {
            inv &= out[i] == ids[i];
            continue;
        }
        n_sel++;
        inv &= can && lab[i] == ids[i] && out[i] >= 0 && out[i] < V;
        if (out[i] == MASK) n_mask++;
        else if (out[i] == ids[i]) n_same++;
        else {
            n_rand++;
            rsum += out[i];
        }
    }
    tu_check(inv && sel == n_sel, "masker: only maskable positions selected, labels = original "
             "ids there and -100 elsewhere, other ids unchanged (%zu selected)", sel);
    const double f = (double)n_sel / maskable, sdf = sqrt(0.15 * 0.85 / maskable);
    tu_check(fabs(f - 0.15) <= 5 * sdf, "masker: selected fraction %.5f of %zu maskable "
             "(0.15 +- %.5f)", f, maskable, 5 * sdf);
    /* a random id equals <mask> or the original with probability 1/V each */
    const double pm = 0.8 + 0.1 / V, ps = 0.1 + 0.1 / V, pr = 0.1 * (1.0 - 2.0 / V);
    const double fm = (double)n_mask / n_sel, fs = (double)n_same / n_sel,
                 fr = (double)n_rand / n_sel;
    const double sdm = sqrt(pm * (1 - pm) / n_sel), sds = sqrt(ps * (1 - ps) / n_sel),
                 sdr = sqrt(pr * (1 - pr) / n_sel);
    tu_check(fabs(fm - pm) <= 5 * sdm && fabs(fs - ps) <= 5 * sds && fabs(fr - pr) <= 5 * sdr,
             "masker: <mask> %.4f, unchanged %.4f, random %.4f of the selected (0.8/0.1/0.1 "
             "within 5 sd: %.4f, %.4f, %.4f)", fm, fs, fr, 5 * sdm, 5 * sds, 5 * sdr);
    const double mean = rsum / n_rand, sdmean = V / sqrt(12.0) / sqrt((double)n_rand);
    tu_check(fabs(mean - (V - 1) / 2.0) <= 5 * sdmean, "masker: random ids uniform in [0, V): "
             "mean %.1f (%.1f +- %.1f)", mean, (V - 1) / 2.0, 5 * sdmean);
    /* determinism and row keys: reversed rows with their keys give the reversed result */
    bt_mlm_mask(out2, lab2, ids, am, B, T, keys, 99, &spec);
    tu_check(memcmp(out, out2, B * T * sizeof *out) == 0 &&
                 memcmp(lab, lab2, B * T * sizeof *lab) == 0, "masker: same seed, same masks");
    int32_t *rid = malloc(B * T * sizeof *rid), *ram = malloc(B * T * sizeof *ram);
    uint64_t *rk = malloc(B * sizeof *rk);
    for (int b = 0; b < B; b++) {
        memcpy(rid + b * T, ids + (B - 1 - b) * T, T * sizeof *rid);
        memcpy(ram + b * T, am + (B - 1 - b) * T, T * sizeof *ram);
        rk[b] = keys[B - 1 - b];
    }
    bt_mlm_mask(out2, lab2, rid, ram, B, T, rk, 99, &spec);
    int same = 1;
    for (int b = 0; b < B; b++)
        same &= memcmp(out2 + b * T, out + (B - 1 - b) * T, T * sizeof *out) == 0 &&
                memcmp(lab2 + b * T, lab + (B - 1 - b) * T, T * sizeof *lab) == 0;
    tu_check(same, "masker: a row's masks depend on (seed, row key), not on its place");
    bt_mlm_mask(out2, lab2, ids, am, B, T, keys, 100, &spec);
    tu_check(memcmp(lab, lab2, B * T * sizeof *lab) != 0, "masker: another seed, other masks");
    free(rid), free(ram), free(rk);
    free(ids), free(am), free(out), free(lab), free(out2), free(lab2), free(keys);
}

int main(void) {
    gemm_init_from_env();
    bt_loss_ws ws = {0};
    safetensors_file io;
    const char *path = tu_fixture_path("train/losses.safetensors");
    if (tu_check(safetensors_open(&io, path) == BT_OK, "open %s: %s", path, bt_error_message())) {
        test_itc(&io, &ws);
        test_itm_mlm(&io, &ws);
        safetensors_close(&io);
    }
    test_sampler(&ws);
    test_masker();
    bt_loss_ws_free(&ws);
    gemm_release();
    return tu_finish();
}
