/* test_itc_scope.c: train.itc_scope under mpirun (docs/distributed.md), bt-train by path
 * (argv[1]), ITC only, dropout off, one OpenMP thread per process.
 *
 * Data: 16 synthetic records, data.shuffle false, 2 ranks x batch 4: by the sampler's rule
 * (docs/data.md) rank r's list is records r, r + 2, r + 4, ..., so its step-s batch is
 * records {r + 2i : i = 4(s-1) .. 4s-1}. shard_r.jsonl holds exactly those records in that
 * order, so one process on shard_r.jsonl with batch 4 sees rank r's batches.
 *
 *   1. "local" = HF under DDP: with lr 1e-20 (the weights do not move: an AdamW step moves a
 *      weight by ~lr, far below a float's ulp of the ~1e-2 weights, and 0-initialized biases
 *      by 1e-20, which changes the logits by ~1e-20), each logged loss of the 2-rank local
 *      run equals the mean of the two single-process losses on the shards at the same step.
 *      Each rank computes the same fp32 forward and loss as its single process (same rows,
 *      same weights, one thread); the mean is a double sum of two terms: relative 1e-6
 *      covers a GEMM kernel chosen differently for the same shapes (~1e-7), observed ~0.
 *   2. control, "global" (the default, OpenCLIP's gather-with-grad): its step-1 loss differs
 *      from that mean by more than 1e-3 relative (each text scores 8 images instead of 4:
 *      at initialization ~log 8 vs ~log 4), so check 1 can fail.
 *   3. training: a 2-rank local run at lr 1e-3 for 2 steps ends with the weights of one
 *      process that accumulates the two shards' batches as 2 micro-batches of 4 (the ITC of
 *      each micro-batch is over its own 4 pairs, and the gradient is the mean of the two:
 *      the local objective), with interleaved.jsonl = shard 0's first batch, shard 1's
 *      first, shard 0's second, shard 1's second. Same operations, summed in another order
 *      (MPI's average vs the accumulation): compared by the rule for two runs that differ
 *      in summation order only (tests/test_compare.h, docs/determinism.md: the difference
 *      relative to how far the weights moved from the start, rho 1e-3 for fp32 orders). */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/params.h"
#include "test_compare.h"
#include "test_train_setup.h"
#include "test_util.h"

#define LOSS_RTOL 1e-6
#define MPIRUN "mpirun --oversubscribe --bind-to none -x OMP_NUM_THREADS=1"

static const char *exe;
static char data_dir[1024], model_dir[1024];

/* Writes the run config for manifest `train` to <out>.json; returns its path in cfg. */
static void write_cfg(char *cfg, size_t cap, const char *out, const char *train, double lr,
                      int accum) {
    snprintf(cfg, cap, "%s.json", out);
    char text[4096];
    snprintf(text, sizeof text,
             "{\"model\": {\"config\": \"%s\", \"init_seed\": 0, \"heads\": [\"itc\"]},\n"
             " \"data\": {\"train\": \"%s\", \"max_length\": 16, \"shuffle\": false,\n"
             "          \"num_workers\": 1},\n"
             " \"train\": {\"batch_size\": 4, \"gradient_accumulation_steps\": %d,\n"
             "           \"max_steps\": 2, \"lr\": %g, \"seed\": 5, \"dropout\": false,\n"
             "           \"threads\": 1},\n"
             " \"logging\": {\"steps\": 1, \"tensorboard\": false, \"report\": false},\n"
             " \"eval\": {\"strategy\": \"no\", \"at_end\": false},\n"
             " \"save\": {\"strategy\": \"no\"},\n"
             " \"output\": {\"dir\": \"%s\"}}\n",
             model_dir, train, accum, lr, out);
    tu_setup_text(cfg, text);
}

/* One process (ranks 0) or mpirun -np ranks; exit status. */
static int train(const char *out, int ranks, const char *train_manifest, double lr, int accum,
                 const char *scope) {
    char cfg[1300];
    write_cfg(cfg, sizeof cfg, out, train_manifest, lr, accum);
    if (ranks == 0)
        return tts_sh(out, "OMP_NUM_THREADS=1 '%s' --config '%s' --quiet-config", exe, cfg);
    return tts_sh(out, MPIRUN " -np %d '%s' --config '%s' --quiet-config --set train.itc_scope=%s",
              ranks, exe, cfg, scope);
}

static size_t losses(const char *out, double *l, size_t cap) {
    return tts_logged(out, "loss", l, cap);
}

/* Writes the records of train.jsonl with the given line numbers (0-based) to path. */
static void write_subset(const char *path, const int *idx, int n) {
    char src[1200];
    snprintf(src, sizeof src, "%s/train.jsonl", data_dir);
    char *text = (char *)tu_read_file(src, NULL);
    if (!text) exit(1);
    char *lines[64];
    int nl = 0;
    for (char *l = strtok(text, "\n"); l && nl < 64; l = strtok(NULL, "\n")) lines[nl++] = l;
    size_t cap = strlen(src) + 64 * 4096, len = 0;
    char *out = malloc(cap);
    if (!out) exit(1);
    for (int i = 0; i < n; i++) {
        if (idx[i] >= nl) exit(1);
        len += (size_t)snprintf(out + len, cap - len, "%s\n", lines[idx[i]]);
    }
    tu_setup_text(path, out);
    free(out);
    free(text);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_itc_scope PATH/TO/bt-train\n");
        return 1;
    }
    exe = argv[1];
    if (system("mpirun --version > /dev/null 2>&1") != 0)
        tu_skip("mpirun not found (scripts/install_deps.sh installs openmpi-bin)");
    snprintf(data_dir, sizeof data_dir, "%s/synth", tu_tmpdir());
    tts_synth_data(data_dir, 16, 0, 0);
    tts_synthetic_model_dir(model_dir, sizeof model_dir);

    /* the shards of 2 ranks (no shuffle) and their interleaving for the accumulation run */
    char all[1200], shard[2][1200], inter[1200];
    snprintf(all, sizeof all, "%s/train.jsonl", data_dir);
    int idx[2][8], mix[16];
    for (int r = 0; r < 2; r++) {
        for (int i = 0; i < 8; i++) idx[r][i] = r + 2 * i;
        snprintf(shard[r], sizeof shard[r], "%s/shard_%d.jsonl", data_dir, r);
        write_subset(shard[r], idx[r], 8);
    }
    for (int s = 0; s < 2; s++)
        for (int r = 0; r < 2; r++)
            for (int i = 0; i < 4; i++) mix[8 * s + 4 * r + i] = idx[r][4 * s + i];
    snprintf(inter, sizeof inter, "%s/interleaved.jsonl", data_dir);
    write_subset(inter, mix, 16);

    /* 1. local on 2 ranks = the mean of the single-process losses on the shards */
    char one[2][1200], loc[1200], glob[1200];
    double l1[2][2] = {{0}}, ll[2] = {0}, lg[2] = {0};
    for (int r = 0; r < 2; r++) {
        snprintf(one[r], sizeof one[r], "%s", tu_tmp_path(r ? "single_1" : "single_0"));
        int rc = train(one[r], 0, shard[r], 1e-20, 1, NULL);
        if (!tu_check(rc == 0 && losses(one[r], l1[r], 2) == 2,
                      "one process on shard %d: exit 0, 2 logged steps (rc %d)", r, rc)) {
            tts_show_err(one[r]);
            return tu_finish();
        }
    }
    snprintf(loc, sizeof loc, "%s", tu_tmp_path("local"));
    int rc = train(loc, 2, all, 1e-20, 1, "local");
    if (!tu_check(rc == 0 && losses(loc, ll, 2) == 2,
                  "mpirun -np 2, train.itc_scope local: exit 0, 2 logged steps (rc %d)", rc)) {
        tts_show_err(loc);
        return tu_finish();
    }
    for (int s = 0; s < 2; s++) {
        const double mean = 0.5 * (l1[0][s] + l1[1][s]);
        tu_check(fabs(ll[s] - mean) <= LOSS_RTOL * fabs(mean),
                 "step %d: local 2-rank loss %.9g = mean of the shards' single-process losses "
                 "(%.9g + %.9g) / 2 = %.9g (rtol %.0e)", s + 1, ll[s], l1[0][s], l1[1][s], mean,
                 LOSS_RTOL);
    }

    /* 2. control: global scope (the default) optimizes another loss */
    snprintf(glob, sizeof glob, "%s", tu_tmp_path("global"));
    rc = train(glob, 2, all, 1e-20, 1, "global");
    if (tu_check(rc == 0 && losses(glob, lg, 2) == 2, "mpirun -np 2, itc_scope global: exit 0")) {
        const double mean = 0.5 * (l1[0][0] + l1[1][0]);
        tu_check(fabs(lg[0] - mean) > 1e-3 * fabs(mean),
                 "control: the global 2-rank loss %.6g differs from the local mean %.6g", lg[0],
                 mean);
    } else {
        tts_show_err(glob);
    }

    /* 3. training: local on 2 ranks = one process accumulating the shards' batches */
    char loc_t[1200], acc[1200];
    snprintf(loc_t, sizeof loc_t, "%s", tu_tmp_path("local_train"));
    snprintf(acc, sizeof acc, "%s", tu_tmp_path("accumulate"));
    rc = train(loc_t, 2, all, 1e-3, 1, "local");
    int rc2 = train(acc, 0, inter, 1e-3, 2, NULL);
    if (tu_check(rc == 0 && rc2 == 0, "lr 1e-3: local 2 x 4 and 1 x (2 micro-batches of 4) exit "
                 "0 (rc %d, %d)", rc, rc2)) {
        double a[2] = {0}, b[2] = {0};
        losses(loc_t, a, 2);
        losses(acc, b, 2);
        int ok = 1;
        for (int s = 0; s < 2; s++) ok &= fabs(a[s] - b[s]) <= LOSS_RTOL * fabs(b[s]);
        tu_check(ok, "lr 1e-3: the losses agree at both steps (%.9g %.9g vs %.9g %.9g)", a[0],
                 a[1], b[0], b[1]);
        char wa[1300], wb[1300], init_dir[1200], init[1300];
        snprintf(wa, sizeof wa, "%s/model.safetensors", acc);
        snprintf(wb, sizeof wb, "%s/model.safetensors", loc_t);
        snprintf(init_dir, sizeof init_dir, "%s", tu_tmp_path("init"));
        tc_save_init(init_dir, model_dir, BT_HEADS_ITC, 0); /* the runs' start (init_seed 0) */
        snprintf(init, sizeof init, "%s/model.safetensors", init_dir);
        tc_check_weights("lr 1e-3: local 2 x 4 against 1 x (2 micro-batches of 4)",
                         wb, wa, init, TC_RTOL_FP32);
    } else {
        tts_show_err(rc ? loc_t : acc);
    }
    return tu_finish();
}
