/* test_train_state.c: checkpoint directories for resume (src/train/state.h, docs/resume.md).
 *
 * On the tiny fixture model (tests/fixtures/tiny) with random weights, random moments (the
 * vision tower frozen, so it has none) and a state whose every field is set to a value that
 * does not survive a lossy path (a learning rate with 17 significant digits, RNG words above
 * 2^53, a 2^53 seed in the run config):
 *   - save -> load gives the weights, the moments, the step count and every state field back
 *     bit for bit, and the directory is an HF model directory (it loads as one, the
 *     preprocessor config is copied);
 *   - keep-last-K deletes the oldest, never the new one nor the protected best;
 *   - latest-checkpoint selection skips incomplete checkpoint-N directories and temp
 *     directories, removes stale temps of dead processes, keeps a live process's temp;
 *   - re-saving an existing step swaps in the new content;
 *   - a save that cannot create its temp directory fails with a message and loses nothing;
 *   - corrupted trainer_state.json (bad JSON, unknown key, wrong type, bad run config),
 *     truncated / wrong-shaped / incomplete / extra moments, a different model shape and a
 *     missing trained head each fail with a message naming the file and the key. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "data/sampler.h"
#include "model/checkpoint.h"
#include "safetensors.h"
#include "test_util.h"
#include "train/state.h"

static const char *tmp;
static char fixture[1024];
static tu_rng rng;

static const char *pj(const char *a, const char *b) {
    static char buf[8][2900];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", a, b);
    return buf[k];
}

/* a/b/c */
static const char *pj3(const char *a, const char *b, const char *c) {
    static char buf[4][4400];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s/%s", a, b, c);
    return buf[k];
}

static int exists(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0;
}

/* A model, optimizer and state to save. */
typedef struct world {
    bt_checkpoint_weights w;
    bt_adamw o;
    bt_train_state s;
    sampler smp;
} world;

static void world_make(world *x, int64_t step) {
    bt_status st = bt_checkpoint_load(&x->w, fixture, NULL, NULL);
    if (st != BT_OK) {
        printf("cannot load fixture: %s\n", bt_error_message());
        exit(1);
    }
    /* random weights everywhere a tensor lives (padding stays 0) */
    for (size_t i = 0; i < x->w.table.n_tensors; i++) {
        const bt_param_tensor *t = &x->w.table.tensors[i];
        tu_fill_uniform_f32(&rng, x->w.params + t->offset, t->numel, -1, 1);
    }
    bt_train_state_init(&x->s);
    const char *sets[] = {"model.path=m", "data.train=t.jsonl", "output.dir=o",
                          "train.freeze_vision=true", "train.lr=3.3333333333333335e-05",
                          "data.seed=9007199254740992", "model.heads=itc,itm,mlm",
                          "train.loss_weights.itm=1"};
    bt_run_config rc;
    st = bt_run_config_resolve(&rc, NULL, sets, sizeof sets / sizeof sets[0]);
    if (st != BT_OK) {
        printf("run config: %s\n", bt_error_message());
        exit(1);
    }
    bt_train_state_set_run_config(&x->s, &rc);
    bt_run_config_free(&rc);
    bt_optim_groups g = bt_run_config_optim_groups(&x->s.run_config);
    bt_adamw_init_groups(&x->o, &x->w.table, &g);
    for (size_t i = 0; i < x->w.table.n_tensors; i++) {
        const bt_param_tensor *t = &x->w.table.tensors[i];
        float *m, *v;
        if (!bt_adamw_moments(&x->o, t->offset, &m, &v)) continue;
        tu_fill_uniform_f32(&rng, m, t->numel, -1e-3f, 1e-3f);
        tu_fill_uniform_f32(&rng, v, t->numel, 0, 1e-6f);
    }
    x->o.t = (uint64_t)step;
    x->s.global_step = step;
    x->s.epoch = step / 3.0;
    x->s.samples_seen = step * 32;
    x->s.max_steps = 100;
    sampler_options so = {.seed = 5, .rank = 0, .world_size = 1, .batch_size = 4, .shuffle = 1};
    sampler_init(&x->smp, 50, &so);
    bt_train_state_set_cursor(&x->s, sampler_cursor_to_json(&x->smp, (sampler_cursor){1, 8}));
    bt_rng r1, r2;
    for (int k = 0; k < 4; k++) {
        r1.s[k] = tu_rng_next(&rng);
        r2.s[k] = tu_rng_next(&rng) | (1ull << 63);
    }
    bt_train_state_set_rng(&x->s, "itm_negatives", &r1);
    bt_train_state_set_rng(&x->s, "mlm_mask", &r2);
    x->s.schedule.step = step;
    x->s.schedule.total_steps = 100;
    x->s.schedule.warmup_steps = 10;
    x->s.schedule.last_lr = 1e-5 / 3.0;
    x->s.has_best = 1;
    x->s.best_metric = 0.1 + 0.2;
    x->s.best_model_checkpoint = strdup("out/checkpoint-3");
    x->s.extra = cJSON_Parse("{\"nan_skips\": 2, \"note\": \"x\"}");
}

static void world_free(world *x) {
    bt_checkpoint_weights_free(&x->w);
    bt_adamw_free(&x->o);
    bt_train_state_free(&x->s);
    sampler_free(&x->smp);
}

static bt_status save(const char *out, world *x, int64_t limit, const char *keep_also,
                      char *saved) {
    bt_train_checkpoint c = {.table = &x->w.table, .params = x->w.params, .optim = &x->o,
                             .state = &x->s, .base_config_json = x->w.config_json,
                             .copy_from_dir = fixture, .dtype = BT_DTYPE_F32};
    return bt_train_checkpoint_save(out, &c, limit, keep_also, saved, 1400);
}

static int json_equal_text(const cJSON *a, const cJSON *b) {
    if (!a || !b) return a == b;
    char *x = cJSON_PrintUnformatted(a), *y = cJSON_PrintUnformatted(b);
    int eq = x && y && !strcmp(x, y);
    free(x);
    free(y);
    return eq;
}

static void test_round_trip(void) {
    world x;
    world_make(&x, 7);
    char out[1400];
    snprintf(out, sizeof out, "%s/rt", tmp);
    char saved[1400];
    bt_status st = save(out, &x, 0, NULL, saved);
    tu_check(st == BT_OK && !strcmp(saved, pj(out, "checkpoint-7")), "save -> %s (%s)", saved,
             bt_error_message());
    tu_check(exists(pj(saved, "config.json")) && exists(pj(saved, "model.safetensors")) &&
                 exists(pj(saved, "preprocessor_config.json")) &&
                 exists(pj(saved, "optimizer.safetensors")) &&
                 exists(pj(saved, "trainer_state.json")),
             "HF model files, aux copy, moments and state are in the directory");

    /* it is an HF model directory: the checkpoint module loads it as one */
    bt_checkpoint_weights hw;
    st = bt_checkpoint_load(&hw, saved, NULL, NULL);
    tu_check(st == BT_OK && hw.table.numel == x.w.table.numel &&
                 !memcmp(hw.params, x.w.params, x.w.table.numel * sizeof(float)),
             "the model directory loads as an HF checkpoint with the same weights");
    bt_checkpoint_weights_free(&hw);

    bt_train_resume r;
    st = bt_train_checkpoint_load(saved, NULL, &x.w.cfg, &r);
    tu_check(st == BT_OK, "load (%s)", bt_error_message());
    if (st != BT_OK) {
        world_free(&x);
        return;
    }
    tu_check_bytes_equal("weights", r.model.params, x.w.params,
                         x.w.table.numel * sizeof(float));
    tu_check(r.optim.mnumel == x.o.mnumel && r.optim.mnumel < x.o.numel,
             "moments compact over the trained (not frozen) tensors: %zu of %zu",
             r.optim.mnumel, x.o.numel);
    tu_check_bytes_equal("exp_avg", r.optim.m, x.o.m, x.o.mnumel * sizeof(float));
    tu_check_bytes_equal("exp_avg_sq", r.optim.v, x.o.v, x.o.mnumel * sizeof(float));
    tu_check(r.optim.t == 7, "optimizer step count 7");
    const bt_train_state *a = &r.state, *b = &x.s;
    tu_check(a->global_step == 7 && !memcmp(&a->epoch, &b->epoch, sizeof a->epoch) &&
                 a->samples_seen == b->samples_seen && a->max_steps == b->max_steps,
             "step, epoch (bitwise), samples, max_steps");
    tu_check(json_equal_text(a->loader_cursor, b->loader_cursor), "loader cursor");
    sampler_cursor cur;
    st = sampler_cursor_from_json(&x.smp, a->loader_cursor, "state", &cur);
    tu_check(st == BT_OK && cur.epoch == 1 && cur.position == 8,
             "loader cursor parses back for the same sampler");
    const bt_rng *g1 = bt_train_state_get_rng(a, "itm_negatives");
    const bt_rng *g2 = bt_train_state_get_rng(a, "mlm_mask");
    tu_check(a->n_rngs == 2 && g1 && g2 &&
                 !memcmp(g1, bt_train_state_get_rng(b, "itm_negatives"), sizeof *g1) &&
                 !memcmp(g2, bt_train_state_get_rng(b, "mlm_mask"), sizeof *g2),
             "RNG states (64-bit words) exact");
    tu_check(a->schedule.step == 7 && a->schedule.total_steps == 100 &&
                 a->schedule.warmup_steps == 10 &&
                 !memcmp(&a->schedule.last_lr, &b->schedule.last_lr, sizeof(double)),
             "schedule position, last lr bitwise");
    tu_check(a->has_best && !memcmp(&a->best_metric, &b->best_metric, sizeof(double)) &&
                 !strcmp(a->best_model_checkpoint, "out/checkpoint-3"),
             "best metric and checkpoint");
    tu_check(json_equal_text(a->extra, b->extra), "extra object");
    tu_check(a->bt_version[0] != '\0', "bt version recorded (%s)", a->bt_version);
    char *ca = bt_run_config_to_string(&a->run_config), *cb = bt_run_config_to_string(&b->run_config);
    char changed[256] = "?";
    st = bt_run_config_check_resume(&a->run_config, &b->run_config, "x", changed, sizeof changed);
    tu_check(!strcmp(ca, cb) && st == BT_OK && !changed[0] &&
                 a->run_config.data.seed == 9007199254740992LL,
             "resolved run config identical");
    free(ca);
    free(cb);

    /* saving the loaded state again gives byte-identical files */
    bt_train_checkpoint c2 = {.table = &r.model.table, .params = r.model.params,
                              .optim = &r.optim, .state = &r.state,
                              .base_config_json = r.model.config_json, .copy_from_dir = fixture,
                              .dtype = BT_DTYPE_F32};
    char out2[1400];
    snprintf(out2, sizeof out2, "%s/rt2", tmp);
    char saved2[1400];
    st = bt_train_checkpoint_save(out2, &c2, 0, NULL, saved2, sizeof saved2);
    int same = st == BT_OK;
    static const char *const files[] = {"config.json", "model.safetensors",
                                        "optimizer.safetensors", "trainer_state.json", NULL};
    for (int i = 0; same && files[i]; i++) same = tu_files_equal(pj(saved, files[i]),
                                                                 pj(saved2, files[i]));
    tu_check(same, "load -> save gives byte-identical files");
    bt_train_resume_free(&r);

    /* the other model shape is named */
    bt_model_config other = x.w.cfg;
    other.text_hidden += 2;
    st = bt_train_checkpoint_load(saved, NULL, &other, &r);
    char want[1600];
    snprintf(want, sizeof want,
             "%s/config.json: text_config.hidden_size is %d in the checkpoint, %d in this run's "
             "model; resume with the model the checkpoint was trained from",
             saved, x.w.cfg.text_hidden, other.text_hidden);
    tu_check(st == BT_ERR_CONFIG && !strcmp(bt_error_message(), want),
             "model shape mismatch names the key (%s)", bt_error_message());
    /* the moments of a tensor this run trains but the checkpoint froze */
    bt_optim_groups g = bt_optim_groups_default();
    st = bt_train_checkpoint_load(saved, &g, NULL, &r);
    tu_check(st == BT_ERR_MISSING && strstr(bt_error_message(), "optimizer.safetensors: tensor "
                                                                "'exp_avg.bridgetower.vision_model"),
             "moments missing for an unfrozen tower: named (%s)", bt_error_message());
    world_free(&x);
}

static size_t count_entries(const char *dir, const char *prefix) {
    DIR *d = opendir(dir);
    size_t n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (!strncmp(e->d_name, prefix, strlen(prefix))) n++;
    if (d) closedir(d);
    return n;
}

static void test_rotation_and_latest(void) {
    world x;
    world_make(&x, 1);
    char out[1400];
    snprintf(out, sizeof out, "%s/rot", tmp);
    char saved[1400];
    for (int64_t step = 1; step <= 4; step++) {
        x.s.global_step = step;
        if (save(out, &x, 2, NULL, saved) != BT_OK) printf("# %s\n", bt_error_message());
    }
    tu_check(!exists(pj(out, "checkpoint-1")) && !exists(pj(out, "checkpoint-2")) &&
                 exists(pj(out, "checkpoint-3")) && exists(pj(out, "checkpoint-4")) &&
                 count_entries(out, "tmp-") == 0,
             "save_total_limit 2 keeps checkpoint-3 and -4, no temp left");
    /* limit 1 with the best (checkpoint-3) protected */
    x.s.global_step = 10;
    char best[1400];
    snprintf(best, sizeof best, "%s", pj(out, "checkpoint-3"));
    bt_status st = save(out, &x, 1, best, saved);
    tu_check(st == BT_OK && exists(pj(out, "checkpoint-3")) && !exists(pj(out, "checkpoint-4")) &&
                 exists(pj(out, "checkpoint-10")),
             "limit 1 keeps the new one and the protected best");

    /* HF-style numeric order, not lexical: checkpoint-10 beats checkpoint-3 */
    char latest[1400];
    int found = 0;
    size_t incomplete = 9;
    st = bt_train_checkpoint_latest(out, latest, sizeof latest, &found, &incomplete);
    tu_check(st == BT_OK && found && !strcmp(latest, pj(out, "checkpoint-10")) && incomplete == 0,
             "latest = checkpoint-10 (%s)", latest);

    /* a newer but incomplete checkpoint-N, and temp dirs of a dead and a live process */
    mkdir(pj(out, "checkpoint-12"), 0755);
    tu_setup_text(pj3(out, "checkpoint-12", "config.json"), "{}");
    pid_t child = fork();
    if (child == 0) _exit(0);
    waitpid(child, NULL, 0); /* child's pid now names no process */
    char dead[256], live[256];
    snprintf(dead, sizeof dead, "tmp-checkpoint-11.%ld", (long)child);
    snprintf(live, sizeof live, "tmp-checkpoint-13.%ld", (long)getppid());
    mkdir(pj(out, dead), 0755);
    tu_setup_text(pj3(out, dead, "trainer_state.json"), "{}");
    mkdir(pj(out, live), 0755);
    st = bt_train_checkpoint_latest(out, latest, sizeof latest, &found, &incomplete);
    tu_check(st == BT_OK && found && !strcmp(latest, pj(out, "checkpoint-10")) && incomplete == 1,
             "incomplete checkpoint-12 and temp dirs are not taken (%s, %zu incomplete)", latest,
             incomplete);
    tu_check(!exists(pj(out, dead)) && exists(pj(out, live)),
             "the dead process's temp dir is removed, the live one's kept");

    /* no checkpoint at all / no directory */
    st = bt_train_checkpoint_latest(pj(tmp, "absent"), latest, sizeof latest, &found, NULL);
    tu_check(st == BT_OK && !found, "absent output_dir: no checkpoint");

    /* re-saving an existing step swaps the content in */
    x.s.global_step = 10;
    x.w.params[x.w.table.tensors[0].offset] = 42.0f;
    st = save(out, &x, 0, NULL, saved);
    bt_train_resume r;
    bt_status ls = bt_train_checkpoint_load(saved, NULL, NULL, &r);
    tu_check(st == BT_OK && ls == BT_OK &&
                 r.model.params[r.model.table.tensors[0].offset] == 42.0f &&
                 count_entries(out, "tmp-checkpoint-10") == 0,
             "re-saving checkpoint-10 replaces it (%s)", ls == BT_OK ? "" : bt_error_message());
    if (ls == BT_OK) bt_train_resume_free(&r);

    /* a save that cannot create its temp directory: nothing earlier lost */
    x.s.global_step = 14;
    char blocker[256];
    snprintf(blocker, sizeof blocker, "tmp-checkpoint-14.%ld", (long)getpid());
    tu_setup_text(pj(out, blocker), "not a directory");
    st = save(out, &x, 1, NULL, saved);
    tu_check(st == BT_ERR_IO && strstr(bt_error_message(), blocker) &&
                 exists(pj(out, "checkpoint-10")) && exists(pj(out, "checkpoint-3")) &&
                 !exists(pj(out, "checkpoint-14")),
             "failed save: message names the temp dir, earlier checkpoints kept (%s)",
             bt_error_message());
    world_free(&x);
}

/* Copies checkpoint dir src to dst (flat: the files of one checkpoint). */
static void copy_dir(const char *src, const char *dst) {
    mkdir(dst, 0755);
    DIR *d = opendir(src);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        size_t n;
        uint8_t *b = tu_read_file(pj(src, e->d_name), &n);
        if (b) tu_setup_file(pj(dst, e->d_name), b, n);
        free(b);
    }
    if (d) closedir(d);
}

/* Replaces `from` by `to` once in dir/trainer_state.json. */
static void edit_state(const char *dir, const char *from, const char *to) {
    size_t n;
    char *t = (char *)tu_read_file(pj(dir, "trainer_state.json"), &n);
    char *at = t ? strstr(t, from) : NULL;
    if (!at) {
        printf("edit_state: '%s' not found\n", from);
        exit(1);
    }
    size_t out_n = n - strlen(from) + strlen(to);
    char *o = malloc(out_n + 1);
    size_t pre = (size_t)(at - t);
    memcpy(o, t, pre);
    memcpy(o + pre, to, strlen(to));
    memcpy(o + pre + strlen(to), at + strlen(from), n - pre - strlen(from));
    tu_setup_file(pj(dir, "trainer_state.json"), o, out_n);
    free(o);
    free(t);
}

static void expect_load_error(const char *dir, const char *file, const char *needle) {
    bt_train_resume r;
    bt_status st = bt_train_checkpoint_load(dir, NULL, NULL, &r);
    const char *msg = bt_error_message();
    char path[1400];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    tu_check(st != BT_OK && !strncmp(msg, path, strlen(path)) && strstr(msg, needle),
             "%s: \"%s\" (got \"%s\")", strrchr(dir, '/') + 1, needle,
             st == BT_OK ? "OK" : msg);
    if (st == BT_OK) bt_train_resume_free(&r);
}

static void test_bad(void) {
    world x;
    world_make(&x, 5);
    char out[1400];
    snprintf(out, sizeof out, "%s/bad", tmp);
    char good[1400];
    if (save(out, &x, 0, NULL, good) != BT_OK) {
        printf("save: %s\n", bt_error_message());
        exit(1);
    }
    char d[1400];
    int k = 0;
#define CASE() (snprintf(d, sizeof d, "%s/case%d", tmp, k++), copy_dir(good, d), d)

    CASE();
    tu_setup_text(pj(d, "trainer_state.json"), "{\"global_step\": 5,");
    expect_load_error(d, "trainer_state.json", "not valid JSON");
    CASE();
    edit_state(d, "\"global_step\":", "\"foo\": 1,\n\t\"global_step\":");
    expect_load_error(d, "trainer_state.json", "unknown key 'foo'");
    CASE();
    edit_state(d, "\"global_step\":\t5", "\"global_step\":\t\"5\"");
    expect_load_error(d, "trainer_state.json",
                      "global_step: expected an integer >= 0, got a string");
    CASE();
    edit_state(d, "\"warmup_steps\":\t10", "\"warmup_steps\":\t-1");
    expect_load_error(d, "trainer_state.json",
                      "schedule.warmup_steps: expected an integer in [0, 2^53], got -1");
    CASE();
    edit_state(d, "\"batch_size\":\t8", "\"batch_size\":\t0");
    expect_load_error(d, "trainer_state.json",
                      ": run_config: train.batch_size: expected an integer in [1, 1048576], "
                      "got 0");
    CASE();
    edit_state(d, "\"mlm_mask\":\t[\"", "\"mlm_mask\":\t[\"x");
    expect_load_error(d, "trainer_state.json",
                      "rng.mlm_mask[0]: expected a decimal string of a 64-bit word");
    CASE(); /* a checkpoint named without its value: said so, not "got a string" */
    edit_state(d, "\"best_metric\":\t0.30000000000000004", "\"best_metric\":\tnull");
    expect_load_error(d, "trainer_state.json", "best_model_checkpoint is \"out/checkpoint-3\" "
                      "but best_metric is null");
    CASE();
    remove(pj(d, "trainer_state.json"));
    expect_load_error(d, "trainer_state.json", "cannot open trainer state");

    /* truncated moments */
    CASE();
    size_t n;
    uint8_t *b = tu_read_file(pj(d, "optimizer.safetensors"), &n);
    tu_setup_file(pj(d, "optimizer.safetensors"), b, n / 2);
    free(b);
    expect_load_error(d, "optimizer.safetensors", "");

    /* rewritten moments: one tensor one value short, one missing, one extra */
    for (int variant = 0; variant < 3; variant++) {
        CASE();
        safetensors_file f;
        if (safetensors_open(&f, pj(good, "optimizer.safetensors")) != BT_OK) exit(1);
        safetensors_entry *e = calloc(f.n_tensors + 1, sizeof *e);
        size_t m = 0;
        const char *victim = NULL;
        for (size_t i = 0; i < f.n_tensors; i++) {
            const safetensors_tensor *t = &f.tensors[i];
            int is_victim = !victim && !strncmp(t->name, "exp_avg_sq.", 11) && t->ndim == 2;
            if (is_victim) victim = t->name;
            if (is_victim && variant == 1) continue; /* dropped */
            e[m] = (safetensors_entry){.name = t->name, .dtype = t->dtype,
                                       .src_dtype = t->dtype, .ndim = t->ndim, .data = t->data};
            memcpy(e[m].shape, t->shape, sizeof t->shape);
            if (is_victim && variant == 0) {
                e[m].ndim = 1;
                e[m].shape[0] = (int64_t)t->numel - 1;
            }
            m++;
        }
        if (variant == 2) {
            static const float z[4];
            e[m++] = (safetensors_entry){.name = "exp_avg.bridgetower.nonsense", .dtype =
                                         BT_DTYPE_F32, .src_dtype = BT_DTYPE_F32, .ndim = 1,
                                         .shape = {4}, .data = z};
        }
        char vname[200];
        snprintf(vname, sizeof vname, "%s", victim);
        bt_status st = safetensors_write(pj(d, "optimizer.safetensors"), e, m, NULL);
        safetensors_close(&f);
        free(e);
        if (st != BT_OK) exit(1);
        char needle[400];
        if (variant == 0)
            snprintf(needle, sizeof needle, "tensor '%s': expected F32 of shape [", vname);
        else if (variant == 1)
            snprintf(needle, sizeof needle, "tensor '%s' missing", vname);
        else
            snprintf(needle, sizeof needle,
                     "tensor 'exp_avg.bridgetower.nonsense': not a moment of a trained "
                     "parameter of this model (unknown key)");
        expect_load_error(d, "optimizer.safetensors", needle);
    }

    /* a trained head missing from the weights: the run config says itm is trained */
    CASE();
    {
        bt_checkpoint_weights w2;
        bt_checkpoint_load_options lo;
        bt_checkpoint_load_options_default(&lo);
        lo.heads = BT_HEADS_ITC | BT_HEADS_MLM;
        if (bt_checkpoint_load(&w2, good, &lo, NULL) != BT_OK) exit(1);
        remove(pj(d, "model.safetensors"));
        if (bt_checkpoint_save(d, &w2.table, w2.params, NULL) != BT_OK) exit(1);
        bt_checkpoint_weights_free(&w2);
        expect_load_error(d, "model.safetensors", "head 'itm_score' is missing, but the run "
                                                  "trains it");
    }
#undef CASE
    world_free(&x);
}

/* SIGKILL at random moments of a loop of saves (keep-last-2 rotation included): after every
 * kill, every checkpoint-<N> present loads completely, the latest one is found, and the
 * next writer goes on from it. Each save takes a few milliseconds (two ~1 MB files, fsyncs),
 * so kills land inside saves, renames and deletions. */
static void test_sigkill(void) {
    world x;
    world_make(&x, 0);
    char out[1400];
    snprintf(out, sizeof out, "%s/kill", tmp);
    /* one save's duration sets the range of the kill times */
    double t0 = tu_clock_seconds(CLOCK_MONOTONIC);
    x.s.global_step = 1;
    x.o.t = 1;
    if (save(out, &x, 2, NULL, NULL) != BT_OK) printf("# %s\n", bt_error_message());
    double dt = tu_clock_seconds(CLOCK_MONOTONIC) - t0;
    printf("# one save: %.1f ms\n", dt * 1e3);
    useconds_t span = (useconds_t)(dt * 4e6) + 1000;
    int64_t next = 2;
    int bad = 0, rounds = 12, mid_save = 0;
    for (int round = 0; round < rounds && !bad; round++) {
        pid_t pid = fork();
        if (pid == 0) {
            for (int64_t step = next;; step++) {
                x.s.global_step = step;
                x.o.t = (uint64_t)step;
                if (save(out, &x, 2, NULL, NULL) != BT_OK) _exit(3);
            }
        }
        usleep((useconds_t)(tu_rng_next(&rng) % span));
        kill(pid, SIGKILL);
        int status = 0;
        waitpid(pid, &status, 0);
        if (!WIFSIGNALED(status)) {
            printf("# round %d: the saver exited by itself (status %d)\n", round, status);
            bad = 1;
            break;
        }
        mid_save += count_entries(out, "tmp-checkpoint-") > 0;
        /* every checkpoint-N that exists is whole */
        DIR *d = opendir(out);
        struct dirent *e;
        while (d && (e = readdir(d))) {
            if (strncmp(e->d_name, "checkpoint-", 11)) continue;
            bt_train_resume r;
            if (bt_train_checkpoint_load(pj(out, e->d_name), NULL, NULL, &r) != BT_OK) {
                printf("# round %d: %s\n", round, bt_error_message());
                bad = 1;
                continue;
            }
            if (r.state.global_step != atoll(e->d_name + 11) ||
                r.optim.t != (uint64_t)r.state.global_step) {
                printf("# round %d: %s holds step %lld, t %llu\n", round, e->d_name,
                       (long long)r.state.global_step, (unsigned long long)r.optim.t);
                bad = 1;
            }
            bt_train_resume_free(&r);
        }
        if (d) closedir(d);
        char latest[1400];
        int found = 0;
        if (bt_train_checkpoint_latest(out, latest, sizeof latest, &found, NULL) != BT_OK) {
            printf("# round %d: %s\n", round, bt_error_message());
            bad = 1;
        }
        if (found) next = atoll(strrchr(latest, '-') + 1) + 1;
        if (count_entries(out, "tmp-checkpoint-") != 0) { /* stale temps cleaned */
            printf("# round %d: a temp directory is left after the cleaning\n", round);
            bad = 1;
        }
    }
    /* the next writer goes on from whatever the kills left (a deterministic last save: how
     * many saves the kills let complete depends on the machine's load, not on the code) */
    x.s.global_step = next;
    x.o.t = (uint64_t)next;
    const int saved = !bad && save(out, &x, 2, NULL, NULL) == BT_OK;
    char last[1400];
    int found_last = 0;
    if (saved && bt_train_checkpoint_latest(out, last, sizeof last, &found_last, NULL) != BT_OK)
        found_last = 0;
    const int went_on = saved && found_last && atoll(strrchr(last, '-') + 1) == next;
    tu_check(!bad && went_on,
             "%d SIGKILLs during saves (%d left a temp dir): every checkpoint present loads, "
             "the latest is found, stale temps are removed, and the next save (step %lld) "
             "becomes the latest",
             rounds, mid_save, (long long)next);
    world_free(&x);
}

int main(void) {
    tmp = tu_tmpdir();
    snprintf(fixture, sizeof fixture, "%s", tu_fixture_path("tiny"));
    tu_rng_seed(&rng, 20261124);
    test_round_trip();
    test_rotation_and_latest();
    test_bad();
    test_sigkill();
    return tu_finish();
}
