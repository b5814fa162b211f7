/* train/trainer.c: the bt-train job (trainer.h): setup from the resolved run config, the
 * step loop with its log / eval / save cadences, resume, signals, the end of the run.
 *
 * Deliberately not here: the step (step.c), file formats (state.c, log.c, report.c), the
 * metrics (eval.c). This file only strings them together. */
#include "train/trainer.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "clock.h"
#include "data/image.h"
#include "data/loader.h"
#include "data/manifest.h"
#include "data/tokenizer.h"
#include "dist/dist.h"
#include "fileio.h"
#include "finite.h"
#include "json_util.h"
#include "mem.h"
#include "settings.h"
#include "model/checkpoint.h"
#include "kernels/cpu.h"
#include "model/flops.h"
#include "model/model.h"
#include "train/eval.h"
#include "train/log.h"
#include "train/output_dir.h"
#include "train/report.h"
#include "train/state.h"
#include "train/step.h"

/* --- signals: the step in flight finishes, then a checkpoint is written ------------------- */

/* The signals that end a run with a checkpoint: ^C, kill / SLURM's and Kubernetes' stop, a
 * closed ssh session (SIGHUP), SLURM's pre-emption warning (--signal=USR1@60) and its USR2
 * twin. bt-train exits 128 + the signal after saving. */
static const int k_stop_signals[] = {SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2};
#define N_STOP_SIGNALS (sizeof k_stop_signals / sizeof *k_stop_signals)

static volatile sig_atomic_t g_stop_signal;

/* Takes one stop signal: the first asks for a stop after the step in flight, a second one
 * stops now, by the signal's default action. Runs in the signal thread below (or as the
 * handler on a thread that does not block the signals). */
static void stop_signal_taken(int sig) {
    if (g_stop_signal) { /* second signal: stop now */
        signal(sig, SIG_DFL);
        sigset_t one;
        sigemptyset(&one);
        sigaddset(&one, sig);
        pthread_sigmask(SIG_UNBLOCK, &one, NULL);
        raise(sig);
        return;
    }
    g_stop_signal = sig;
}

static const char *signal_name(int sig) {
    switch (sig) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGHUP: return "SIGHUP";
    case SIGUSR1: return "SIGUSR1";
    case SIGUSR2: return "SIGUSR2";
    default: return "a signal";
    }
}

static sigset_t stop_signal_set(void) {
    sigset_t set;
    sigemptyset(&set);
    for (size_t i = 0; i < N_STOP_SIGNALS; i++) sigaddset(&set, k_stop_signals[i]);
    return set;
}

/* Where the stop signals are taken. oneDNN 2.6's generated GEMM kernels (gemm:jit: the fp32
 * products under the AVX2 cap and on AVX2 CPUs, some AVX-512 shapes) point rsp into a heap
 * workspace while they run, so a signal handled on a thread inside one writes its frame
 * into the heap (oneDNN issue #4845, fixed in 3.11; Debian 12 ships 2.6): test_bt_train's
 * SIGINT case under the AVX2 cap then aborted in free() ("corrupted size vs. prev_size";
 * `meson test -C build --setup isa_avx2 bt_train --repeat 40` beside other load: 1 of the
 * first 15; its scenario alone, twice in parallel: 6 of 400 runs, 0 of 500 since). So
 * the stop signals are blocked in the thread that starts the job, before it starts any
 * other (OpenMP's, the loader's, the watchdog's inherit the mask), and one thread that runs
 * no kernel takes them with sigwait(). The handler stays installed for threads a library
 * started before (OpenBLAS's, MPI's), which run no oneDNN kernel. Once per process; the
 * signals stay blocked in the calling thread. */
static void *stop_signal_thread(void *arg) {
    (void)arg;
    const sigset_t set = stop_signal_set();
    for (;;) {
        int sig = 0;
        if (sigwait(&set, &sig) == 0) stop_signal_taken(sig);
    }
    return NULL;
}

static pthread_once_t stop_signals_once = PTHREAD_ONCE_INIT;

static void install_stop_signals_once(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = stop_signal_taken;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < N_STOP_SIGNALS; i++) sigaction(k_stop_signals[i], &sa, NULL);
    /* stdout closed by its reader (bt-train | head): the writes fail with EPIPE and the run
     * goes on quietly (its files and checkpoints are the record), instead of dying */
    sa.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &sa, NULL);
    const sigset_t set = stop_signal_set();
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    pthread_t t;
    if (pthread_create(&t, NULL, stop_signal_thread, NULL) == 0) pthread_detach(t);
    else pthread_sigmask(SIG_UNBLOCK, &set, NULL); /* no thread: the handler takes them */
}

static void install_stop_signals(void) {
    pthread_once(&stop_signals_once, install_stop_signals_once);
}

/* --- the job's state ------------------------------------------------------------------------ */

typedef struct job {
    bt_run_config rc;
    FILE *out;
    char source_dir[4096];   /* tokenizer + preprocessor files (the start model's directory) */
    char *base_config_json;  /* the start model's config.json text (extra keys kept) */
    size_t plan_bytes[3];    /* memory plan: weights + gradients, optimizer state, activations */
    bt_model model;
    int have_model;
    tokenizer tok;
    int have_tok;
    image_preprocess_config img;
    manifest train_man, val_man, test_man;
    int have_train_man, have_val_man, have_test_man;
    loader *ld;
    bt_trainer tr;
    int have_tr;
    bt_log log;
    int have_log;
    int64_t max_steps, batches_per_epoch, batches_done, samples_seen;
    bt_train_resume resume;
    int resumed;
    char resume_dir[4096];
    double flops_per_sample;
    char last_saved[4096];
    int64_t last_saved_step;
    /* eval.metric_for_best (HF metric_for_best_model): best value, the step it was measured
     * at, and the checkpoint saved at that step (kept by save.total_limit) */
    int has_best;
    double best_metric;
    int64_t best_step;
    char best_checkpoint[4096];
    bt_dist dist;            /* the world (docs/distributed.md); rank 0 logs and saves */
    int stop;                /* the stop signal every rank agreed on (stop_requested), or 0 */
    long long test_raise_at; /* --test-hook sigterm_in_stop_check (stop_requested), or 0 */
    bt_adamw optim_full;     /* ZeRO-1: the moments gathered on rank 0 for a checkpoint */
    int have_full;           /* optim_full is gathered (rank 0) / sent (other ranks) */
    FILE *devnull;           /* j->out of ranks > 0 */
    bt_output_lock lock;     /* rank 0: output.dir/bt-train.lock, held for the whole run */
} job;

static void job_free(job *j) {
    if (j->have_log) bt_log_close(&j->log);
    bt_adamw_free(&j->optim_full);
    if (j->have_tr) bt_trainer_free(&j->tr);
    loader_free(j->ld);
    if (j->have_val_man) manifest_free(&j->val_man);
    if (j->have_test_man) manifest_free(&j->test_man);
    if (j->have_train_man) manifest_free(&j->train_man);
    if (j->have_tok) tokenizer_free(&j->tok);
    if (j->have_model) bt_model_free(&j->model);
    if (j->resumed) bt_train_resume_free(&j->resume);
    free(j->base_config_json);
    bt_run_config_free(&j->rc);
}

/* A line for the user: into the log once it is open; before that (and on ranks other than 0,
 * which open no log) INFO to the job's output, warnings to stderr naming the rank. */
static void say_at(job *j, bt_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void say_at(job *j, bt_log_level level, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char line[8192];
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (j->have_log) bt_log_message(&j->log, level, "%s", line);
    else if (level == BT_LOG_INFO) fprintf(j->out, "%s\n", line);
    else fprintf(stderr, "bt-train: rank %d: warning: %s\n", j->dist.rank, line);
}
#define say(j, ...) say_at((j), BT_LOG_INFO, __VA_ARGS__)
#define warn(j, ...) say_at((j), BT_LOG_WARN, __VA_ARGS__)

/* The directory that holds config.json for model.config (a directory or its config.json). */
static void model_config_dir(const char *given, char *dir, size_t cap) {
    struct stat st;
    snprintf(dir, cap, "%s", given);
    if (stat(given, &st) == 0 && S_ISREG(st.st_mode)) {
        char *slash = strrchr(dir, '/');
        if (slash) *slash = '\0';
        else snprintf(dir, cap, ".");
    }
}

/* summary.json's "environment" (the report's table): the run-time configuration (cpu.h),
 * the ranks, the precision and the memory plan. */
static cJSON *environment_json(const job *j) {
    cJSON *e = bt_runtime_info_json();
    cJSON_AddNumberToObject(e, "ranks", j->dist.size);
    cJSON_AddStringToObject(e, "precision",
                            j->rc.train.precision == BT_PRECISION_BF16 ? "bf16" : "fp32");
    cJSON *m = cJSON_AddObjectToObject(e, "memory_plan_mib");
    static const char *const names[3] = {"weights_and_gradients", "optimizer_state",
                                         "activations"};
    double total = 0;
    for (int i = 0; i < 3; i++) {
        cJSON_AddNumberToObject(m, names[i], (double)j->plan_bytes[i] / 1048576.0);
        total += (double)j->plan_bytes[i] / 1048576.0;
    }
    cJSON_AddNumberToObject(m, "total", total);
    return e;
}

/* --- model: resume, start from an HF directory, or init from a config ---------------------- */

static bt_status model_setup(job *j) {
    const bt_run_config *rc = &j->rc;
    const unsigned heads = rc->model.heads;
    bt_status st;
    if (j->resumed) {
        bt_checkpoint_weights *w = &j->resume.model;
        st = bt_model_init(&j->model, &w->cfg, heads, rc->train.precision);
        if (st != BT_OK) return st;
        j->have_model = 1;
        if (j->model.table.numel != w->table.numel)
            return bt_fail(BT_ERR_SHAPE, "%s: the checkpoint's weights hold %zu values, this run's "
                           "model (heads %#x) %zu", j->resume_dir, w->table.numel, heads,
                           j->model.table.numel);
        memcpy(j->model.params, w->params, w->table.numel * sizeof *w->params);
        j->base_config_json = w->config_json ? strdup(w->config_json) : NULL;
    } else if (rc->model.path) {
        bt_checkpoint ck;
        st = bt_checkpoint_open(&ck, rc->model.path);
        if (st != BT_OK) return st;
        st = bt_model_init(&j->model, &ck.cfg, heads, rc->train.precision);
        if (st == BT_OK) {
            j->have_model = 1;
            bt_checkpoint_load_options lo;
            bt_checkpoint_load_options_default(&lo);
            lo.heads = heads;
            lo.init_seed = (uint64_t)rc->model.init_seed;
            bt_checkpoint_report rep;
            st = bt_checkpoint_read(&ck, &j->model.table, j->model.params, &lo, &rep);
            bt_checkpoint_report_print(&rep, j->out, "bt-train");
            bt_checkpoint_report_free(&rep);
            j->base_config_json = ck.config_json ? strdup(ck.config_json) : NULL;
        }
        bt_checkpoint_close(&ck);
        if (st != BT_OK) return st;
    } else {
        char dir[4096];
        model_config_dir(rc->model.config, dir, sizeof dir);
        bt_checkpoint_weights w;
        st = bt_checkpoint_init(&w, dir, heads, (uint64_t)rc->model.init_seed);
        if (st != BT_OK) return st;
        st = bt_model_init(&j->model, &w.cfg, heads, rc->train.precision);
        if (st == BT_OK) {
            j->have_model = 1;
            memcpy(j->model.params, w.params, w.table.numel * sizeof *w.params);
            j->base_config_json = w.config_json ? strdup(w.config_json) : NULL;
        }
        bt_checkpoint_weights_free(&w);
        if (st != BT_OK) return st;
    }
    bt_model_refresh_bf16(&j->model);
    return BT_OK;
}

/* Tokenizer and image preprocessing from the start model's directory; text length bound. */
static bt_status data_files_setup(job *j) {
    const bt_run_config *rc = &j->rc;
    if (rc->model.path) snprintf(j->source_dir, sizeof j->source_dir, "%s", rc->model.path);
    else model_config_dir(rc->model.config, j->source_dir, sizeof j->source_dir);
    char cfg_path[4200];
    snprintf(cfg_path, sizeof cfg_path, "%s/config.json", j->source_dir);
    bt_status st = bt_heads_check_hf(&j->model.cfg, rc->model.heads, cfg_path);
    if (st != BT_OK) return st;
    st = tokenizer_load(&j->tok, j->source_dir);
    if (st != BT_OK) return st;
    j->have_tok = 1;
    const bt_model_config *c = &j->model.cfg;
    if (j->tok.vocab_size > c->vocab_size)
        return bt_fail(BT_ERR_CONFIG, "%s: the tokenizer has %d ids but the model's vocab_size is "
                       "%d", j->source_dir, j->tok.vocab_size, c->vocab_size);
    char pp[4200];
    snprintf(pp, sizeof pp, "%s/preprocessor_config.json", j->source_dir);
    st = image_preprocess_config_from_json(&j->img, pp);
    if (st != BT_OK) return st;
    if (j->img.crop_size != c->image_size)
        return bt_fail(BT_ERR_CONFIG, "%s gives %dx%d images but the model's "
                       "vision_config.image_size is %d; they must agree", pp, j->img.crop_size,
                       j->img.crop_size, c->image_size);
    if (rc->data.image_size != 0 && rc->data.image_size != c->image_size)
        return bt_fail(BT_ERR_CONFIG, "data.image_size is %lld but the model takes %dx%d images "
                       "(vision_config.image_size); leave data.image_size at 0 to use the model's",
                       (long long)rc->data.image_size, c->image_size, c->image_size);
    const int64_t tmax = bt_model_config_max_text(c);
    if (rc->data.max_length > tmax)
        return bt_fail(BT_ERR_CONFIG, "data.max_length is %lld but the model takes at most %lld "
                       "tokens (max_position_embeddings - pad_token_id - 1)",
                       (long long)rc->data.max_length, (long long)tmax);
    /* The saved config.json records the text length trained with (max_text_len), so bt-eval
     * and bt-embed evaluate at it by default (docs/evaluation.md). */
    char *cj = bt_model_config_json_set_text_length(j->base_config_json, (int)rc->data.max_length);
    if (!cj) return bt_fail(BT_ERR_NOMEM, "the model's config.json: cannot set max_text_len");
    free(j->base_config_json);
    j->base_config_json = cj;
    return BT_OK;
}

static manifest_options manifest_opts(const bt_run_config *rc) {
    manifest_options mo = manifest_options_default();
    mo.image_key = rc->data.image_column;
    mo.caption_key = rc->data.caption_column;
    mo.id_key = rc->data.id_column;
    mo.choices_key = rc->data.choices_column;
    mo.label_key = rc->data.label_column;
    mo.on_error = rc->data.on_bad_record == BT_POLICY_SKIP ? MANIFEST_ON_ERROR_SKIP
                                                            : MANIFEST_ON_ERROR_STOP;
    return mo;
}

static void print_manifest_skips(job *j, const manifest *m) {
    for (size_t i = 0; i < m->n_skipped; i++)
        fprintf(stderr, "bt-train: warning: skipped: %s\n", m->problems[i]);
}

/* extra.<key> of the resumed checkpoint's trainer_state.json, the trainer's own counters:
 * absent, dflt; an integer in [lo, 2^53], that; anything else is an error naming the file
 * and the key (a value out of range is never converted). */
static bt_status resume_extra_int(const job *j, const char *key, int64_t lo, int64_t dflt,
                                  int64_t *out) {
    const cJSON *ex = j->resume.state.extra;
    const cJSON *v = ex ? cJSON_GetObjectItemCaseSensitive(ex, key) : NULL;
    *out = dflt;
    if (!v || bt_json_int_in(v, lo, BT_JSON_INT_MAX, out)) return BT_OK;
    char got[40];
    if (cJSON_IsNumber(v)) bt_json_number_str(got, sizeof got, v->valuedouble);
    else snprintf(got, sizeof got, "%s", bt_json_type_name(v));
    return bt_fail(BT_ERR_FORMAT, "%s/trainer_state.json: extra.%s: expected an integer in "
                   "[%lld, 2^53], got %s", j->resume_dir, key, (long long)lo, got);
}

/* The saved loader cursor translated to this run's world size (a copy). The cursor counts
 * this rank's indices handed out; the ranks interleave one global order (sampler.h), so a
 * position p of W ranks is the global prefix p·W, which is position p·W / W' of W' ranks
 * when W' divides it (it does when the global batch is kept: resume_setup checks that);
 * the end of an epoch maps to the end. Otherwise the copy is unchanged (the loader then
 * names the key that differs). */
static cJSON *cursor_for_world(const job *j, const cJSON *saved, int64_t n,
                               const loader_options *lo) {
    cJSON *c = cJSON_Duplicate(saved, 1);
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(saved, "world_size");
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(saved, "position");
    /* Shards are split whole across ranks: another world size is another order. */
    int64_t w0, p0;
    if (!bt_json_int_in(w, 1, INT32_MAX, &w0) || !bt_json_int_in(p, 0, BT_JSON_INT_MAX, &p0) ||
        w0 == lo->world_size || lo->drop_last || cJSON_HasObjectItem(saved, "shards"))
        return c; /* unchanged: the loader names a bad key */
    const int64_t W = lo->world_size;
    const int64_t end0 = (n + w0 - 1) / w0, end1 = (n + W - 1) / W;
    int64_t p1;
    if (p0 >= end0) p1 = end1;
    else if ((p0 * w0) % W == 0) p1 = p0 * w0 / W;
    else return c;
    cJSON_ReplaceItemInObjectCaseSensitive(c, "position", cJSON_CreateNumber((double)p1));
    cJSON_ReplaceItemInObjectCaseSensitive(c, "world_size", cJSON_CreateNumber((double)W));
    cJSON_ReplaceItemInObjectCaseSensitive(c, "batch_size", cJSON_CreateNumber((double)lo->batch_size));
    (void)j;
    return c;
}

static bt_status loader_setup(job *j) {
    const bt_run_config *rc = &j->rc;
    manifest_options mo = manifest_opts(rc);
    bt_status st = manifest_load(&j->train_man, rc->data.train, &mo);
    j->have_train_man = 1;
    if (st != BT_OK) return st;
    print_manifest_skips(j, &j->train_man);
    if (rc->data.validation) {
        st = manifest_load(&j->val_man, rc->data.validation, &mo);
        j->have_val_man = 1;
        if (st != BT_OK) return st;
        print_manifest_skips(j, &j->val_man);
    }
    /* the test split is read now, before step 1, so that a typo costs nothing */
    if (rc->data.test && rc->eval.at_end && j->dist.rank == 0) {
        st = manifest_load(&j->test_man, rc->data.test, &mo);
        j->have_test_man = 1;
        if (st != BT_OK) return st;
        print_manifest_skips(j, &j->test_man);
    } else if (rc->data.test && !rc->eval.at_end) {
        say(j, "bt-train: note: data.test is not evaluated: eval.at_end is false (it runs with "
               "the final evaluation, as HF's --do_predict after training)");
    }
    loader_options lo = loader_options_default();
    lo.num_workers = (int)rc->data.num_workers;
    lo.prefetch = (int)rc->data.prefetch;
    lo.seed = (uint64_t)rc->data.seed;
    lo.rank = j->dist.rank;
    lo.world_size = j->dist.size;
    lo.batch_size = (int)rc->train.batch_size;
    lo.shuffle = rc->data.shuffle;
    lo.drop_last = 0;
    lo.drop_last_batch = rc->data.drop_last;
    lo.max_epochs = 0; /* the step count ends the run */
    lo.max_length = (int)rc->data.max_length;
    lo.pixel_dtype = BT_DTYPE_F32;
    lo.with_choices = 0;
    lo.cache_bytes = (size_t)rc->data.image_cache_bytes;
    lo.on_error = mo.on_error;
    lo.shuffle_buffer = rc->data.shuffle_buffer;
    if (lo.prefetch < (int)rc->train.gradient_accumulation_steps) {
        /* an optimizer step holds its micro-batches at once: the ring must have room for them
         * and the workers' next ones; said in the user's terms before the loader's check */
        lo.prefetch = (int)rc->train.gradient_accumulation_steps + lo.num_workers;
        const uint64_t row = 3ull * (uint64_t)j->img.crop_size * (uint64_t)j->img.crop_size *
                                 sizeof(float) + (uint64_t)lo.max_length * 8;
        char what[256];
        snprintf(what, sizeof what, "train.gradient_accumulation_steps %lld: the %d batches of "
                 "%d one optimizer step holds at once (with the loader's read-ahead)",
                 (long long)rc->train.gradient_accumulation_steps, lo.prefetch, lo.batch_size);
        st = bt_mem_check(row * (uint64_t)lo.batch_size * (uint64_t)lo.prefetch, what,
                          "train.gradient_accumulation_steps or train.batch_size");
        if (st != BT_OK) return st;
    }
    if (j->resumed && j->resume.state.loader_cursor) {
        char what[4300];
        snprintf(what, sizeof what, "%s/trainer_state.json: loader_cursor", j->resume_dir);
        cJSON *cur = cursor_for_world(j, j->resume.state.loader_cursor, (int64_t)j->train_man.n,
                                      &lo);
        st = loader_cursor_from_json(&lo, &j->train_man, cur, what, &lo.start);
        cJSON_Delete(cur);
        if (st != BT_OK) return st;
    }
    st = loader_init(&j->ld, &j->train_man, &j->tok, &j->img, &lo);
    if (st != BT_OK) return st;
    j->batches_per_epoch = loader_num_batches(j->ld);
    return BT_OK;
}

/* HF Trainer: updates per epoch = max(batches // accumulation, 1); max_steps wins when > 0,
 * else ceil(epochs * updates per epoch). */
static int64_t total_steps(const bt_run_config *rc, int64_t batches_per_epoch) {
    if (rc->train.max_steps > 0) return rc->train.max_steps;
    int64_t per_epoch = batches_per_epoch / rc->train.gradient_accumulation_steps;
    if (per_epoch < 1) per_epoch = 1;
    int64_t n = (int64_t)ceil(rc->train.epochs * (double)per_epoch);
    return n < 1 ? 1 : n;
}

static bt_status step_setup(job *j) {
    const bt_run_config *rc = &j->rc;
    bt_step_config sc = bt_step_config_default();
    sc.w_itc = (float)rc->train.loss_weights.itc;
    sc.w_itm = (float)rc->train.loss_weights.itm;
    sc.w_mlm = (float)rc->train.loss_weights.mlm;
    sc.itc_duplicate_aware = rc->train.itc_variant == BT_ITC_DEDUP;
    sc.itc_local = rc->train.itc_scope == BT_ITC_SCOPE_LOCAL;
    sc.dist_no_overlap = !rc->dist.overlap;
    sc.itm_hard_negatives = (rc->model.heads & BT_HEADS_ITC) != 0;
    sc.mlm.probability = rc->train.mlm_probability;
    sc.mlm.mask_id = j->tok.mask_id;
    sc.mlm.vocab_size = j->tok.vocab_size;
    sc.mlm.n_special = 0;
    const int32_t specials[] = {j->tok.cls_id, j->tok.sep_id, j->tok.pad_id, j->tok.unk_id,
                                j->tok.mask_id};
    for (size_t i = 0; i < sizeof specials / sizeof *specials; i++)
        if (specials[i] >= 0) sc.mlm.special[sc.mlm.n_special++] = specials[i];
    if (sc.w_mlm > 0 && j->tok.mask_id < 0)
        return bt_fail(BT_ERR_CONFIG, "train.loss_weights.mlm > 0 but the tokenizer in %s has no "
                       "<mask> token", j->source_dir);
    sc.adamw.beta1 = rc->train.adam_beta1;
    sc.adamw.beta2 = rc->train.adam_beta2;
    sc.adamw.eps = rc->train.adam_eps;
    sc.adamw.weight_decay = rc->train.weight_decay;
    sc.adamw.lr = rc->train.lr;
    bt_status st = bt_schedule_init(&sc.schedule, bt_schedule_name(rc->train.schedule),
                                    rc->train.lr, j->max_steps, rc->train.warmup_steps,
                                    rc->train.warmup_ratio);
    if (st != BT_OK) return st;
    sc.groups = bt_run_config_optim_groups(rc);
    sc.max_grad_norm = rc->train.max_grad_norm;
    sc.nan_policy = rc->train.on_nan == BT_POLICY_SKIP ? BT_NAN_SKIP : BT_NAN_STOP;
    sc.seed = (uint64_t)rc->train.seed;
    sc.dropout = rc->train.dropout;
    st = bt_trainer_init(&j->tr, &j->model, &sc);
    if (st != BT_OK) return st;
    j->have_tr = 1;
    bt_trainer_set_dist(&j->tr, &j->dist, (size_t)(rc->dist.bucket_mb * 1048576.0),
                        rc->dist.wire_dtype == BT_SAVE_BF16, (int)rc->dist.zero_stage);
    if (j->resumed) {
        char src_name[4200];
        snprintf(src_name, sizeof src_name, "%s/optimizer.safetensors", j->resume_dir);
        st = bt_optim_state_load(src_name, &j->model.table, &j->tr.opt);
        if (st != BT_OK) return st;
        if ((int64_t)j->tr.opt.t != j->resume.state.schedule.step)
            return bt_fail(BT_ERR_FORMAT, "%s: step is %llu but %s/trainer_state.json's "
                           "schedule.step is %lld: the files come from different checkpoints",
                           src_name, (unsigned long long)j->tr.opt.t, j->resume_dir,
                           (long long)j->resume.state.schedule.step);
        j->tr.step = j->resume.state.global_step;
        st = resume_extra_int(j, "skipped_steps", 0, j->tr.n_skipped, &j->tr.n_skipped);
        if (st != BT_OK) return st;
    }
    /* FLOPs per training sample: what the step runs per sample (step.h), × 3 for training */
    const bt_flops f = bt_model_flops(&j->model.cfg, rc->model.heads, (size_t)rc->data.max_length);
    const int mlm = sc.w_mlm > 0, itm = sc.w_itm > 0;
    j->flops_per_sample = 3.0 * bt_flops_forward(&f, 1 + (size_t)mlm, 1,
                                                 1 + 2 * (size_t)itm + (size_t)mlm, (size_t)mlm);
    return BT_OK;
}

/* Memory plan: weights, gradients, moments (+ bf16 shadow) and the activations of one
 * micro-batch as the step sizes them; refused before allocating when the machine lacks it. */
static bt_status memory_plan(job *j) {
    const bt_run_config *rc = &j->rc;
    const size_t B = (size_t)rc->train.batch_size, T = (size_t)rc->data.max_length;
    const int mlm = rc->train.loss_weights.mlm > 0, itm = rc->train.loss_weights.itm > 0;
    const size_t Bt = B * (1 + (size_t)mlm), P = B * (1 + 2 * (size_t)itm + (size_t)mlm);
    /* train.gradient_checkpointing: the model's memory mode for the whole run (model.h) */
    const bt_act_mode mode =
        rc->train.gradient_checkpointing ? BT_ACTS_CHECKPOINT : BT_ACTS_FULL;
    bt_model_set_act_mode(&j->model, mode);
    /* checkpointing trades time for memory: in bf16 also the weights' bf16 copy (the products
     * round each weight themselves; the same bits: model.h bt_model_drop_bf16_shadow) */
    if (mode == BT_ACTS_CHECKPOINT) bt_model_drop_bf16_shadow(&j->model);
    const size_t act = bt_model_activation_bytes_mode(&j->model.cfg, rc->model.heads,
                                                      rc->train.precision, mode, Bt, B, P,
                                                      mlm ? B : 0, T);
    const size_t numel = j->model.table.numel;
    size_t full_optim;
    const size_t optim = bt_trainer_optim_bytes(&j->tr, &full_optim);
    const size_t weights = numel * (4 + 4 + (j->model.params_bf16 ? 2 : 0));
    char a[32], w[32], o[32], f[32], t[32], zero[160] = "";
    if (j->tr.zero)
        snprintf(zero, sizeof zero, " (ZeRO-1: this rank's shard of %s over %d ranks)",
                 bt_mem_format(f, sizeof f, full_optim), j->dist.size);
    else if (rc->dist.zero_stage)
        snprintf(zero, sizeof zero, " (dist.zero_stage %lld: no effect on one process)",
                 (long long)rc->dist.zero_stage);
    say(j, "memory plan%s: weights + gradients %s, optimizer state %s%s, activations %s "
           "(batch %zu, %zu text rows, %zu pairs, T %zu, gradient checkpointing %s), total %s",
        bt_dist_active(&j->dist) ? " per rank" : "", bt_mem_format(w, sizeof w, weights),
        bt_mem_format(o, sizeof o, optim), zero, bt_mem_format(a, sizeof a, act), B, Bt, P, T,
        mode == BT_ACTS_CHECKPOINT ? "on" : "off",
        bt_mem_format(t, sizeof t, weights + optim + act));
    /* the ways out when it does not fit (bt_mem_check says "reduce <hint>"): smaller
     * micro-batches, or checkpointing (the same gradients) when it is off */
    char hint[400], ck[32] = "";
    if (mode != BT_ACTS_CHECKPOINT)
        bt_mem_format(ck, sizeof ck,
                      bt_model_activation_bytes_mode(&j->model.cfg, rc->model.heads,
                                                     rc->train.precision, BT_ACTS_CHECKPOINT, Bt,
                                                     B, P, mlm ? B : 0, T));
    snprintf(hint, sizeof hint, "train.batch_size (use train.gradient_accumulation_steps to "
             "keep the effective batch) or data.max_length%s%s%s",
             ck[0] ? ", or set train.gradient_checkpointing=true (the same gradients, "
                     "activations " : "", ck, ck[0] ? ", about one more forward per step)" : "");
    j->plan_bytes[0] = weights, j->plan_bytes[1] = optim, j->plan_bytes[2] = act;
    bt_status st = bt_mem_check(act, "the activations of one micro-batch", hint);
    if (st != BT_OK) return st;
    /* the step's arenas sized and backed with memory now, so the first step does not pay
     * their page faults (docs/benchmarks.md "First step") */
    return bt_trainer_reserve(&j->tr, B, T);
}

/* Several ranks: every rank must run the same binary, resolved config and model; rank 0's
 * weights then replace everyone's (the start is identical by seed anyway; this makes it so
 * for any start). */
static bt_status dist_setup(job *j) {
    if (!bt_dist_active(&j->dist)) return BT_OK;
    bt_dist_set_timeout(&j->dist, j->rc.dist.timeout_s); /* dist.h: the collective timeout */
    bt_dist_set_context(&j->dist, "the start");
    char *cfg = bt_run_config_to_string(&j->rc);
    BT_ASSERT(cfg);
    const bt_model_config *c = &j->model.cfg;
    const int64_t shape[] = {c->text_layers, c->text_hidden, c->vision_layers, c->vision_hidden,
                             c->image_size, c->cross_layers, c->hidden, c->vocab_size,
                             (int64_t)j->model.table.numel, (int64_t)j->model.heads,
                             (int64_t)j->train_man.n};
    const char *names[] = {"binary (/proc/self/exe)", "resolved config",
                           "model shape or training set size"}; /* the resumed step: resume_agree */
    const uint64_t h[] = {bt_dist_binary_hash(), bt_dist_hash(cfg, strlen(cfg), 0),
                          bt_dist_hash(shape, sizeof shape, 0)};
    free(cfg);
    bt_status st = bt_dist_check_same(&j->dist, names, h, sizeof h / sizeof *h);
    if (st != BT_OK) return st;
    bt_dist_bcast_f32(&j->dist, j->model.params, j->model.table.numel, 0);
    bt_model_refresh_bf16(&j->model);
    const size_t bucket = bt_dist_bucket_floats(j->model.table.numel,
                                                (size_t)(j->rc.dist.bucket_mb * 1048576.0));
    const double early = !j->rc.dist.overlap ? 0.0 /* step.c: all at the wait */
                                             : bt_step_overlap_share(&j->model.table, bucket);
    say(j, "bt-train: %d ranks (data parallel, docs/distributed.md): train.batch_size %lld per "
           "rank, global batch %lld; gradients averaged in buckets of %g MiB, %.1f%% of the "
           "bytes launched during the backward%s",
        j->dist.size, (long long)j->rc.train.batch_size,
        (long long)(j->rc.train.batch_size * j->dist.size), j->rc.dist.bucket_mb,
        100.0 * early, j->tr.zero ? "; optimizer state sharded (ZeRO-1, dist.zero_stage 1: gradients "
                     "reduce-scattered, weights all-gathered)" : "");
    return BT_OK;
}

/* --- resume ---------------------------------------------------------------------------------- */

/* This run's model config (model.path's or model.config's config.json), for the shape check
 * of a resumed checkpoint. */
static bt_status run_model_config(const bt_run_config *rc, bt_model_config *c) {
    char dir[4096], path[4200];
    if (rc->model.path) snprintf(dir, sizeof dir, "%s", rc->model.path);
    else model_config_dir(rc->model.config, dir, sizeof dir);
    snprintf(path, sizeof path, "%s/config.json", dir);
    return bt_model_config_load(c, path);
}

/* The whole of a small file (the tokenizer files); 0 when it cannot be read. */
static int slurp(const char *path, char **buf, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    size_t cap = 1 << 16, len = 0;
    char *b = malloc(cap);
    for (size_t got; b && (got = fread(b + len, 1, cap - len, f)) > 0;) {
        len += got;
        if (len == cap) {
            char *nb = realloc(b, cap *= 2);
            if (!nb) free(b);
            b = nb;
        }
    }
    fclose(f);
    *buf = b;
    *n = len;
    return b != NULL;
}

/* A checkpoint is of this run's start: the same starting model (model.path / model.config,
 * unless output.resume_new_start), the same tokenizer files as the start model's directory
 * (the checkpoint carries copies), a trainer state of the checkpoint's own step. The shapes
 * are compared by bt_train_checkpoint_load_state. */
static bt_status resume_check_start(job *j, const char *dir) {
    const bt_run_config *now = &j->rc, *then = &j->resume.state.run_config;
    const struct {
        const char *key, *a, *b;
    } start[] = {{"model.path", then->model.path, now->model.path},
                 {"model.config", then->model.config, now->model.config}};
    for (size_t i = 0; i < 2 && !now->output.resume_new_start; i++) {
        const char *a = start[i].a ? start[i].a : "null", *b = start[i].b ? start[i].b : "null";
        char ra[4096], rb[4096];
        const int same = !strcmp(a, b) || (realpath(a, ra) && realpath(b, rb) && !strcmp(ra, rb));
        if (!same)
            return bt_fail(BT_ERR_CONFIG, "%s/trainer_state.json: %s is \"%s\" in the checkpoint, "
                           "\"%s\" in this run; a resumed run goes on training the checkpoint's "
                           "model: resume with the start it was trained from, set "
                           "output.overwrite=true to start again from the new one, or set "
                           "output.resume_new_start=true if it is the same model moved",
                           dir, start[i].key, a, b);
    }
    static const char *const tok_files[] = {"vocab.json", "merges.txt", "tokenizer.json",
                                            "tokenizer_config.json", "special_tokens_map.json"};
    char src[4096];
    if (now->model.path) snprintf(src, sizeof src, "%s", now->model.path);
    else model_config_dir(now->model.config, src, sizeof src);
    for (size_t i = 0; i < sizeof tok_files / sizeof *tok_files; i++) {
        char a[4200], b[4200];
        snprintf(a, sizeof a, "%s/%s", dir, tok_files[i]);
        snprintf(b, sizeof b, "%s/%s", src, tok_files[i]);
        size_t na = 0, nb = 0;
        char *ta = NULL, *tb = NULL;
        const int ha = slurp(a, &ta, &na), hb = slurp(b, &tb, &nb);
        /* a start without tokenizer_config.json: bt's saves write one (model_max_length from
         * the model config, checkpoint.c), so the checkpoint's says nothing of the tokenizer */
        const int generated = !hb && !strcmp(tok_files[i], "tokenizer_config.json");
        const int same =
            generated || (ha == hb && (!ha || (na == nb && !memcmp(ta, tb, na))));
        free(ta);
        free(tb);
        if (!same)
            return bt_fail(BT_ERR_CONFIG, "%s %s but %s %s: the checkpoint was trained with "
                           "another tokenizer than this run's start model has; resume with the "
                           "start it was trained from", a, ha ? "exists" : "is absent", b,
                           !hb ? "is absent" : ha ? "differs" : "exists");
    }
    /* checkpoint-<N> holds the state of step N */
    const char *base = strrchr(dir, '/') ? strrchr(dir, '/') + 1 : dir;
    char *end = NULL;
    const long long n = !strncmp(base, "checkpoint-", 11) ? strtoll(base + 11, &end, 10) : -1;
    if (end && !*end && n != (long long)j->resume.state.global_step)
        return bt_fail(BT_ERR_FORMAT, "%s/trainer_state.json: global_step is %lld in the "
                       "directory of step %lld: the files come from different checkpoints",
                       dir, (long long)j->resume.state.global_step, n);
    return BT_OK;
}

/* Several ranks: rank 0 alone picks the checkpoint (only it has to see output.dir) and every
 * rank loads the one it names; a rank that cannot read it stops every rank at start with the
 * same message naming that rank's host and the checkpoint (docs/distributed.md "Output
 * directory"). expect: this run's model config, which the checkpoint must match (unused when
 * st is an error: nothing is loaded then). Returns BT_OK with *loaded set when this rank
 * loaded it. */
static bt_status resume_agree(job *j, char dir[4096], bt_status st, int *loaded,
                              const bt_model_config *expect) {
    enum { MSG = 512 };
    char mine[MSG + 8] = "";
    *loaded = 0;
    bt_dist_bcast_bytes(&j->dist, dir, 4096, 0);
    dir[4095] = '\0';
    if (st == BT_OK && dir[0]) {
        st = bt_train_checkpoint_load_state(dir, expect, &j->resume);
        *loaded = st == BT_OK;
    }
    if (st != BT_OK) snprintf(mine, MSG, "%s", bt_error_message());
    const int64_t step = *loaded ? j->resume.state.global_step : 0;
    memcpy(mine + MSG, &step, sizeof step);
    char *all = malloc((size_t)j->dist.size * sizeof mine);
    BT_ASSERT(all);
    bt_dist_allgather_bytes(&j->dist, mine, sizeof mine, all);
    int64_t step0;
    memcpy(&step0, all + MSG, sizeof step0);
    for (int r = 0; r < j->dist.size && st == BT_OK; r++) {
        const char *e = all + (size_t)r * sizeof mine;
        int64_t s_r;
        memcpy(&s_r, e + MSG, sizeof s_r);
        if (e[0] && r == 0)
            st = bt_fail(BT_ERR_CONFIG, "rank 0 (%s): %.*s", bt_dist_host_of(&j->dist, 0), MSG,
                         e);
        else if (e[0])
            st = bt_fail(BT_ERR_CONFIG, "rank %d (%s) cannot read the checkpoint that rank 0 "
                         "(%s) resumes from, %s: %.*s; every rank loads it: give output.dir a "
                         "directory that every host sees (a shared file system) or copy the "
                         "checkpoint to the same path on each host (docs/distributed.md)", r,
                         bt_dist_host_of(&j->dist, r), bt_dist_host_of(&j->dist, 0), dir, MSG, e);
        else if (s_r != step0)
            st = bt_fail(BT_ERR_CONFIG, "the ranks differ in their resumed step: rank %d (%s) "
                         "read step %lld from %s, rank 0 (%s) step %lld: the hosts' copies of "
                         "the checkpoint differ", r, bt_dist_host_of(&j->dist, r), (long long)s_r,
                         dir, bt_dist_host_of(&j->dist, 0), (long long)step0);
    }
    free(all);
    if (st != BT_OK && *loaded) {
        bt_train_resume_free(&j->resume);
        *loaded = 0;
    }
    return st;
}

static bt_status resume_setup(job *j) {
    bt_run_config *rc = &j->rc;
    const char *dir = NULL;
    char latest[4096];
    const int dist = bt_dist_active(&j->dist);
    bt_status st = BT_OK;
    if (dist && j->dist.rank > 0) {
        /* rank 0 picks (resume_agree) */
    } else if (rc->output.resume_from) {
        dir = rc->output.resume_from;
    } else if (rc->output.auto_resume && !rc->output.overwrite) {
        int found = 0;
        size_t n_incomplete = 0;
        st = bt_train_checkpoint_latest(rc->output.dir, latest, sizeof latest, &found,
                                        &n_incomplete);
        if (st != BT_OK && !dist) return st;
        if (st != BT_OK) {
            latest[0] = '\0';
            int loaded;
            return resume_agree(j, latest, st, &loaded, NULL); /* all stop with rank 0 */
        }
        if (n_incomplete)
            fprintf(stderr, "bt-train: warning: %s: %zu incomplete checkpoint directories "
                            "ignored\n", rc->output.dir, n_incomplete);
        if (found) dir = latest;
    }
    if (!dist && !dir) return BT_OK; /* nothing to resume */
    bt_model_config expect; /* this run's model: a checkpoint of another shape is refused */
    st = run_model_config(rc, &expect);
    if (st != BT_OK) return st;
    if (dist) {
        char pick[4096];
        snprintf(pick, sizeof pick, "%s", dir ? dir : "");
        int loaded;
        st = resume_agree(j, pick, BT_OK, &loaded, &expect);
        if (st != BT_OK || !loaded) return st;
        snprintf(latest, sizeof latest, "%s", pick);
        dir = latest;
    }
    if (!dir) return BT_OK;
    snprintf(j->resume_dir, sizeof j->resume_dir, "%s", dir);
    /* the moments are read later, straight into the trainer's optimizer (step_setup): under
     * ZeRO-1 a rank reads its shard only */
    if (!dist) st = bt_train_checkpoint_load_state(dir, &expect, &j->resume);
    if (st != BT_OK) return st;
    j->resumed = 1;
    st = resume_check_start(j, dir);
    if (st != BT_OK) return st;
    char changed[1024] = "";
    char source[4200];
    snprintf(source, sizeof source, "%s/trainer_state.json", dir);
    /* another world size: train.batch_size (per rank) may change with it when the global
     * batch stays (docs/distributed.md) */
    const cJSON *cw = j->resume.state.loader_cursor
                          ? cJSON_GetObjectItemCaseSensitive(j->resume.state.loader_cursor,
                                                             "world_size") : NULL;
    int64_t w0 = 1;
    if (cw && !bt_json_int_in(cw, 1, INT32_MAX, &w0))
        return bt_fail(BT_ERR_FORMAT, "%s: loader_cursor.world_size: expected an integer in "
                       "[1, %d]", source, INT32_MAX);
    if (w0 != j->dist.size) {
        const int64_t b0 = j->resume.state.run_config.train.batch_size, b1 = rc->train.batch_size;
        if (b0 * w0 != b1 * j->dist.size)
            return bt_fail(BT_ERR_CONFIG, "%s: the checkpoint was trained by %lld ranks x "
                           "train.batch_size %lld (global batch %lld); this run has %d ranks x "
                           "%lld = %lld: keep the global batch (set train.batch_size to %lld)",
                           source, (long long)w0, (long long)b0, (long long)(b0 * w0),
                           j->dist.size, (long long)b1, (long long)(b1 * j->dist.size),
                           (long long)(b0 * w0 % j->dist.size ? 0 : b0 * w0 / j->dist.size));
        j->resume.state.run_config.train.batch_size = b1;
        fprintf(j->out, "bt-train: the checkpoint was trained by %lld ranks x batch %lld; "
                        "resuming on %d ranks x batch %lld (the same global batch)\n",
                (long long)w0, (long long)b0, j->dist.size, (long long)b1);
    }
    st = bt_run_config_check_resume(&j->resume.state.run_config, rc, source, changed,
                                    sizeof changed);
    if (st != BT_OK) return st;
    if ((st = resume_extra_int(j, "batches_done", 0, 0, &j->batches_done)) != BT_OK ||
        (st = resume_extra_int(j, "best_step", -1, -1, &j->best_step)) != BT_OK)
        return st;
    j->has_best = j->resume.state.has_best;
    j->best_metric = j->resume.state.best_metric;
    if (j->resume.state.best_model_checkpoint)
        snprintf(j->best_checkpoint, sizeof j->best_checkpoint, "%s",
                 j->resume.state.best_model_checkpoint);
    j->samples_seen = j->resume.state.samples_seen;
    if (!rc->output.resume_from) { /* output.dir's own checkpoint: no need to save it again */
        j->last_saved_step = j->resume.state.global_step;
        snprintf(j->last_saved, sizeof j->last_saved, "%s", dir);
    }
    fprintf(j->out, "bt-train: resuming from %s at step %lld (epoch %.3f)%s%s\n", dir,
            (long long)j->resume.state.global_step, j->resume.state.epoch,
            changed[0] ? "; changed settings: " : "", changed);
    return BT_OK;
}

/* output.dir holds a finished run: resumed from output.dir's own checkpoint at the run's
 * last step, and summary.json says "completed" at that step. Such a rerun changes nothing. A
 * run that ended otherwise at its last step (killed in its end phase, a failed final
 * evaluation) goes on with the end phase instead. */
static int run_finished(const job *j) {
    if (!j->resumed || j->rc.output.resume_from || j->resume.state.global_step < j->max_steps)
        return 0;
    char path[4200];
    snprintf(path, sizeof path, "%s/summary.json", j->rc.output.dir);
    if (access(path, F_OK) != 0) return 0;
    cJSON *o = NULL;
    if (bt_json_load(path, "run summary", &o) != BT_OK) return 0;
    const cJSON *status = cJSON_GetObjectItemCaseSensitive(o, "status");
    const cJSON *last = cJSON_GetObjectItemCaseSensitive(o, "last_step");
    const int done = cJSON_IsString(status) && !strcmp(status->valuestring, "completed") &&
                     cJSON_IsNumber(last) && last->valuedouble == (double)j->max_steps;
    cJSON_Delete(o);
    return done;
}

/* --- checkpoints, evaluation ------------------------------------------------------------------ */

static double epoch_of(const job *j) {
    return (double)j->batches_done / (double)j->batches_per_epoch;
}

/* The optimizer state for a checkpoint. ZeRO-1: every rank's moment shard gathered on rank 0
 * (collective: every rank calls it, before rank 0 saves); once per save. */
static bt_status gather_optim(job *j) {
    if (j->have_full || !j->tr.zero) return BT_OK;
    const bt_adamw *o;
    bt_status st = bt_trainer_gather_optim(&j->tr, &j->optim_full, &o);
    j->have_full = 1;
    return st;
}

static void release_optim(job *j) {
    bt_adamw_free(&j->optim_full);
    j->have_full = 0;
}

static bt_status save_checkpoint(job *j) {
    bt_status gst = gather_optim(j);
    if (j->dist.rank > 0) { /* rank 0 writes the (identical) state */
        release_optim(j);
        j->last_saved_step = j->tr.step;
        return gst;
    }
    if (gst != BT_OK) return gst;
    const double t0 = bt_now_s();
    bt_train_state s;
    bt_train_state_init(&s);
    s.global_step = j->tr.step;
    s.epoch = epoch_of(j);
    s.samples_seen = j->samples_seen;
    s.max_steps = j->max_steps;
    s.loader_cursor = loader_cursor_to_json(j->ld);
    s.schedule.step = (int64_t)j->tr.opt.t;
    s.schedule.total_steps = j->tr.cfg.schedule.total_steps;
    s.schedule.warmup_steps = j->tr.cfg.schedule.warmup_steps;
    s.schedule.last_lr = bt_schedule_lr(&j->tr.cfg.schedule, (int64_t)j->tr.opt.t);
    bt_run_config_free(&s.run_config);
    bt_run_config_copy(&s.run_config, &j->rc);
    s.extra = cJSON_CreateObject();
    cJSON_AddNumberToObject(s.extra, "batches_done", (double)j->batches_done);
    cJSON_AddNumberToObject(s.extra, "skipped_steps", (double)j->tr.n_skipped);
    if (j->has_best) cJSON_AddNumberToObject(s.extra, "best_step", (double)j->best_step);
    bt_train_checkpoint c = {
        .table = &j->model.table,
        .params = j->model.params,
        .optim = j->tr.zero ? &j->optim_full : &j->tr.opt,
        .state = &s,
        .base_config_json = j->base_config_json,
        .copy_from_dir = j->source_dir,
        .dtype = j->rc.save.dtype == BT_SAVE_BF16 ? BT_DTYPE_BF16 : BT_DTYPE_F32,
    };
    char path[4200];
    snprintf(path, sizeof path, "%s/checkpoint-%lld", j->rc.output.dir, (long long)j->tr.step);
    const int is_best = j->has_best && j->best_step == j->tr.step;
    s.has_best = j->has_best;
    s.best_metric = j->best_metric;
    s.best_model_checkpoint = is_best ? strdup(path)
                              : j->best_checkpoint[0] ? strdup(j->best_checkpoint) : NULL;
    bt_status st = bt_train_checkpoint_save(j->rc.output.dir, &c, j->rc.save.total_limit,
                                            s.best_model_checkpoint, j->last_saved,
                                            sizeof j->last_saved);
    bt_train_state_free(&s);
    release_optim(j);
    if (st != BT_OK) return st;
    j->last_saved_step = j->tr.step;
    if (is_best) snprintf(j->best_checkpoint, sizeof j->best_checkpoint, "%s", j->last_saved);
    bt_log_checkpoint(&j->log, j->tr.step, j->last_saved, bt_now_s() - t0);
    return BT_OK;
}

/* eval.metric_for_best, as HF's metric_for_best_model: a metric name of metrics.jsonl's eval
 * records ("loss", "t2i_r1", "accuracy_5way", ...) or of bt_eval_result_scalars
 * ("t2i_median_rank", "t2i_itm_r1"), with or without an "eval/" or "eval_" prefix;
 * "choice_acc" (the name the docs used before) is "accuracy_5way". Greater is better unless
 * the name ends in "loss". */
static const char *metric_canonical(const char *name, char *buf, size_t cap) {
    if (!strncmp(name, "eval/", 5) || !strncmp(name, "eval_", 5)) name += 5;
    snprintf(buf, cap, "%s", strcmp(name, "choice_acc") ? name : "accuracy_5way");
    return buf;
}

/* The names an evaluation of this run can produce, ", "-separated. */
static void metric_names(const job *j, char *list, size_t cap) {
    static const char *const dirs[] = {"t2i", "i2t", "t2i_itm", "i2t_itm"};
    static const char *const kinds[] = {"r1", "r5", "r10", "mean_rank", "median_rank"};
    snprintf(list, cap, "loss");
    for (size_t d = 0; d < (j->rc.eval.itm_rerank_k > 0 ? 4u : 2u); d++)
        for (size_t k = 0; k < 5; k++)
            snprintf(list + strlen(list), cap - strlen(list), ", %s_%s", dirs[d], kinds[k]);
    int choices = 0;
    for (size_t i = 0; j->have_val_man && i < j->val_man.n && !choices; i++)
        choices = manifest_has_choices(&j->val_man, i);
    if (choices) snprintf(list + strlen(list), cap - strlen(list), ", accuracy_5way");
}

/* eval.metric_for_best names a metric this run's evaluations produce: checked before step 1
 * (not at the first evaluation, after hours of training). */
static bt_status check_metric_for_best(const job *j) {
    const char *want = j->rc.eval.metric_for_best;
    if (!want || !j->have_val_man) return BT_OK;
    char list[1024], bare[256];
    metric_names(j, list, sizeof list);
    metric_canonical(want, bare, sizeof bare);
    for (const char *p = list; (p = strstr(p, bare)); p++)
        if ((p == list || p[-1] == ' ') && (p[strlen(bare)] == ',' || !p[strlen(bare)]))
            return BT_OK;
    return bt_fail(BT_ERR_CONFIG, "eval.metric_for_best: \"%s\" is not a metric of this run's "
                   "evaluation on %s; it has: %s (the names of metrics.jsonl's eval records; "
                   "t2i_itm_* and i2t_itm_* with eval.itm_rerank_k > 0, accuracy_5way when the "
                   "manifest has caption choices)", want, j->rc.data.validation, list);
}

static bt_status track_best(job *j, const bt_eval_result *r) {
    const char *want = j->rc.eval.metric_for_best;
    if (!want || !want[0]) return BT_OK;
    const char *names[64];
    double values[64];
    size_t n = bt_eval_result_scalars(r, names, values, 64);
    if (n > 64) n = 64;
    char bare[256], name[256];
    metric_canonical(want, bare, sizeof bare);
    for (size_t i = 0; i < n; i++) {
        if (strcmp(metric_canonical(names[i], name, sizeof name), bare) != 0) continue;
        const size_t len = strlen(bare);
        const int lower = len >= 4 && !strcmp(bare + len - 4, "loss");
        const double v = values[i];
        if (!isfinite(v)) return BT_OK;
        if (!j->has_best || (lower ? v < j->best_metric : v > j->best_metric)) {
            j->has_best = 1;
            j->best_metric = v;
            j->best_step = j->tr.step;
            j->best_checkpoint[0] = '\0'; /* the checkpoint of this step, when one is saved */
            bt_log_message(&j->log, BT_LOG_INFO, "best %s so far: %.6g at step %lld", bare, v,
                           (long long)j->tr.step);
        }
        return BT_OK;
    }
    return check_metric_for_best(j); /* names the metrics there are */
}

static bt_eval_options eval_options(const job *j) {
    bt_eval_options eo;
    bt_eval_options_default(&eo);
    eo.batch_size = (int)j->rc.eval.batch_size;
    eo.max_length = (int)j->rc.data.max_length;
    eo.itm_rerank_k = (int)j->rc.eval.itm_rerank_k;
    eo.num_workers = (int)j->rc.data.num_workers;
    eo.cache_bytes = (size_t)j->rc.data.image_cache_bytes;
    eo.on_error = j->rc.data.on_bad_record == BT_POLICY_SKIP ? MANIFEST_ON_ERROR_SKIP
                                                             : MANIFEST_ON_ERROR_STOP;
    eo.cancel = &g_stop_signal; /* a stop signal ends an evaluation at its next batch */
    return eo;
}

/* <output.dir>/<name>: the evaluation as JSON (HF's eval_results.json / test_results.json):
 * bt-eval --json's fields (model, data, max_length, batch_size) and the step it was
 * measured at. */
static bt_status write_results(const job *j, const char *name, const char *data,
                               const bt_eval_result *r) {
    cJSON *o = bt_eval_result_to_json(r);
    cJSON_AddStringToObject(o, "model", j->rc.output.dir);
    cJSON_AddStringToObject(o, "data", data);
    cJSON_AddNumberToObject(o, "max_length", (double)j->rc.data.max_length);
    cJSON_AddNumberToObject(o, "batch_size", (double)j->rc.eval.batch_size);
    cJSON_AddNumberToObject(o, "step", (double)j->tr.step);
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    if (!text) return bt_fail(BT_ERR_NOMEM, "%s: cannot format the results", name);
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", j->rc.output.dir, name);
    bt_status st = bt_write_file_atomic(path, "evaluation results", text, strlen(text));
    free(text);
    return st;
}

/* Weights made non-finite by the last update (train.lr far too large: the step's own loss and
 * gradients were finite, so the NaN policy did not see it) are named as such, not reported
 * as "embeddings not finite" of the first evaluation record. */
static bt_status check_weights_finite(const job *j) {
    const bt_param_table *t = &j->model.table;
    const size_t k = bt_first_nonfinite(j->model.params, t->numel);
    if (k >= t->numel) return BT_OK;
    const char *name = "?";
    for (size_t i = 0; i < t->n_tensors; i++)
        if (k >= t->tensors[i].offset && k < t->tensors[i].offset + t->tensors[i].numel)
            name = t->tensors[i].key;
    return bt_fail(BT_ERR_NUMERIC, "the model's weights are not finite after step %lld (%s "
                   "holds %g): the update diverged (train.lr %g; lower it, or keep "
                   "train.max_grad_norm > 0); nothing to evaluate", (long long)j->tr.step, name,
                   (double)j->model.params[k], j->rc.train.lr);
}

/* data.test after training (HF --do_predict): printed and written to test_results.json; not
 * part of the eval curves nor of the best-metric choice. */
static bt_status evaluate_test(job *j) {
    if (!j->have_test_man || j->dist.rank > 0) return BT_OK;
    bt_status wst = check_weights_finite(j);
    if (wst != BT_OK) return wst;
    bt_eval_result r;
    memset(&r, 0, sizeof r);
    const bt_eval_options eo = eval_options(j);
    bt_status st = bt_eval_run(&j->model, &j->test_man, &j->tok, &j->img, &eo, &r);
    if (st == BT_OK) {
        fprintf(j->out, "test split (%s):\n", j->rc.data.test);
        bt_eval_result_print(&r, j->out);
        st = write_results(j, "test_results.json", j->rc.data.test, &r);
    }
    bt_eval_result_free(&r);
    return st;
}

static bt_status evaluate(job *j, int final) {
    if (!j->have_val_man || j->dist.rank > 0) return BT_OK;
    bt_status wst = check_weights_finite(j);
    if (wst != BT_OK) return wst;
    const bt_eval_options eo = eval_options(j);
    bt_eval_result r;
    bt_status st = bt_eval_run(&j->model, &j->val_man, &j->tok, &j->img, &eo, &r);
    if (st == BT_OK) {
        bt_log_eval_rec e;
        bt_log_eval_init(&e);
        e.step = j->tr.step;
        e.epoch = epoch_of(j);
        e.loss = r.loss;
        e.i2t_r1 = r.i2t.r1, e.i2t_r5 = r.i2t.r5, e.i2t_r10 = r.i2t.r10;
        e.t2i_r1 = r.t2i.r1, e.t2i_r5 = r.t2i.r5, e.t2i_r10 = r.t2i.r10;
        e.i2t_mean_rank = r.i2t.mean_rank;
        e.t2i_mean_rank = r.t2i.mean_rank;
        if (r.has_choices) e.accuracy_5way = r.choice_accuracy;
        e.samples = (int64_t)r.n_records;
        e.seconds = r.seconds;
        bt_log_eval(&j->log, &e);
        st = track_best(j, &r);
        if (st == BT_OK && final)
            st = write_results(j, "eval_results.json", j->rc.data.validation, &r);
    }
    bt_eval_result_free(&r);
    return st;
}

static int due(bt_interval strategy, int64_t every, int64_t step, int epoch_ended) {
    if (strategy == BT_INTERVAL_STEPS) return every > 0 && step % every == 0;
    if (strategy == BT_INTERVAL_EPOCH) return epoch_ended;
    return 0;
}

static void warn_bad_record(const char *msg, void *ctx) {
    warn(ctx, "bad record replaced (data.on_bad_record \"skip\"): %s", msg);
}

/* A stop signal seen by any rank stops every rank after the same step: one all-reduce of
 * the flag as each rank read it before the call, so every rank gets the same answer. (Each
 * rank's own flag after the all-reduce would not do: a signal landing during it counted on
 * that rank only, which then left the loop while the others entered the next step's
 * gradient all-reduce and waited for it forever, which test_dist's "SIGTERM to rank 1" caught
 * as a 60 s hang.) A signal that lands during the call counts at the next one. Sets j->stop,
 * which every later decision reads. */
static int stop_requested(job *j) {
    const int mine = g_stop_signal;
    if (!bt_dist_active(&j->dist)) {
        j->stop = mine;
        return mine != 0;
    }
    double v[N_STOP_SIGNALS];
    for (size_t i = 0; i < N_STOP_SIGNALS; i++) v[i] = mine == k_stop_signals[i];
    bt_dist_name_next(&j->dist, "stop-check all-reduce");
    bt_dist_sum_f64(&j->dist, v, N_STOP_SIGNALS);
    /* test hook (tests/test_dist.c): --test-hook sigterm_in_stop_check=N makes rank 1 get a
     * SIGTERM right here, after its flag went into the all-reduce, at step N: the window. To
     * the process, not this thread (raise), which blocks it: the signal thread takes it. */
    if (j->test_raise_at > 0 && j->dist.rank == 1 && j->tr.step == j->test_raise_at)
        kill(getpid(), SIGTERM);
    j->stop = 0;
    for (size_t i = 0; i < N_STOP_SIGNALS && !j->stop; i++)
        if (v[i] > 0) j->stop = k_stop_signals[i];
    return j->stop != 0;
}

/* An evaluation during training failed (a bad image, memory): the step it followed is saved
 * first, so that the failure costs the evaluation only; the error then ends the run. (Under
 * ZeRO-1 the moments live on every rank, which are in the next step by now: no save.) */
static bt_status eval_failed(job *j, bt_status st) {
    char msg[4096];
    snprintf(msg, sizeof msg, "%s", bt_error_message());
    if (j->tr.zero || j->last_saved_step == j->tr.step || save_checkpoint(j) != BT_OK)
        return bt_fail(st, "evaluation at step %lld failed: %s", (long long)j->tr.step, msg);
    return bt_fail(st, "evaluation at step %lld failed: %s; checkpoint %s is saved: run "
                   "bt-train again with the same config to resume", (long long)j->tr.step, msg,
                   j->last_saved);
}

/* --- the loop --------------------------------------------------------------------------------- */

static bt_status train_steps(job *j, bt_train_outcome *out, loader_batch **lb,
                             bt_step_batch *mb, size_t n_micro);

static bt_status train_loop(job *j, bt_train_outcome *out) {
    const bt_run_config *rc = &j->rc;
    const size_t n_micro = (size_t)rc->train.gradient_accumulation_steps;
    /* one optimizer step holds its n_micro batches at once (bt_train_step takes them all) */
    loader_batch **lb = calloc(n_micro, sizeof *lb);
    bt_step_batch *mb = calloc(n_micro, sizeof *mb);
    bt_status st = lb && mb ? BT_OK
                            : bt_fail(BT_ERR_NOMEM, "train.gradient_accumulation_steps %zu: out "
                                      "of memory for the micro-batch list", n_micro);
    if (st == BT_OK) st = train_steps(j, out, lb, mb, n_micro);
    free(lb);
    free(mb);
    return st;
}

static bt_status train_steps(job *j, bt_train_outcome *out, loader_batch **lb,
                             bt_step_batch *mb, size_t n_micro) {
    const bt_run_config *rc = &j->rc;
    while (j->tr.step < j->max_steps) {
        bt_dist_set_context(&j->dist, "step %lld", (long long)j->tr.step + 1); /* timeouts */
        if (stop_requested(j)) break;
        const double t0 = bt_now_s();
        loader_stats s0;
        loader_get_stats(j->ld, &s0);
        size_t got = 0;
        bt_status st = BT_OK;
        for (; got < n_micro; got++) {
            st = loader_next(j->ld, &lb[got]);
            if (st != BT_OK || !lb[got]) break;
            const loader_batch *b = lb[got];
            mb[got] = (bt_step_batch){
                .B = (size_t)b->size, .T = (size_t)b->max_length,
                .input_ids = b->input_ids, .attention_mask = b->attention_mask,
                .pixel_values = (const float *)b->pixel_values, .record = b->record,
            };
        }
        loader_stats s1;
        loader_get_stats(j->ld, &s1);
        loader_drain_problems(j->ld, warn_bad_record, j);
        if (st != BT_OK || got < n_micro) {
            for (size_t k = 0; k < got; k++) loader_release(j->ld, lb[k]);
            return st != BT_OK ? st : bt_fail(BT_ERR_MISSING, "%s: the loader ended early",
                                              rc->data.train);
        }
        const int64_t epoch_before = j->batches_done / j->batches_per_epoch;
        bt_step_result res;
        st = bt_train_step(&j->tr, mb, n_micro, &res);
        for (size_t k = 0; k < got; k++) loader_release(j->ld, lb[k]);
        if (st != BT_OK) return st;
        j->batches_done += (int64_t)n_micro;
        j->samples_seen += (int64_t)res.samples;
        const int epoch_ended = j->batches_done / j->batches_per_epoch > epoch_before;
        if (res.skipped && j->dist.rank == 0)
            warn(j, "step %lld skipped: %s (train.on_nan \"skip\")", (long long)j->tr.step,
                 res.nonfinite);
        bt_log_step_rec r;
        bt_log_step_init(&r);
        r.step = j->tr.step;
        r.epoch = epoch_of(j);
        r.loss = res.loss;
        r.loss_itc = rc->train.loss_weights.itc > 0 ? res.loss_itc : NAN;
        r.loss_itm = rc->train.loss_weights.itm > 0 ? res.loss_itm : NAN;
        r.loss_mlm = rc->train.loss_weights.mlm > 0 ? res.loss_mlm : NAN;
        /* HF logs the lr after the scheduler step (the next step's; 0 at the end of a linear
         * decay), so bt's curve overlays the reference's: docs/outputs.md */
        r.lr = bt_schedule_lr(&j->tr.cfg.schedule, (int64_t)j->tr.opt.t);
        r.grad_norm = res.grad_norm;
        r.samples = (int64_t)res.samples;
        r.step_s = bt_now_s() - t0;
        r.data_wait_s = s1.wait_seconds - s0.wait_seconds;
        r.forward_s = res.t_towers_fwd + res.t_cross_fwd + res.t_losses;
        r.backward_s = res.t_backward;
        r.optim_s = res.t_optimizer;
        r.gemm_s = res.t_gemm;
        r.attention_s = res.t_attention;
        r.memory_s = res.t_memory;
        r.comm_s = bt_dist_active(&j->dist) ? res.t_comm : NAN;
        r.skipped = res.skipped;
        if (j->have_log) bt_log_step(&j->log, &r);
        out->last_step = j->tr.step;
        const int last = j->tr.step == j->max_steps;
        if (!last && due(rc->eval.strategy, rc->eval.steps, j->tr.step, epoch_ended)) {
            st = evaluate(j, 0);
            /* stopped by a signal: the loop's next stop check saves and ends the run */
            if (st == BT_ERR_INTERRUPTED) {
                warn(j, "evaluation at step %lld: %s", (long long)j->tr.step, bt_error_message());
                st = BT_OK;
            }
            if (st != BT_OK) return eval_failed(j, st);
        }
        if (!last && due(rc->save.strategy, rc->save.steps, j->tr.step, epoch_ended)) {
            st = save_checkpoint(j);
            if (st != BT_OK) return st;
        }
    }
    return BT_OK;
}

/* --- the end of the run: save first, then evaluate ------------------------------------------ */

/* summary.json and its lines, with `status` ("completed", "interrupted by ...", ...). */
static bt_status write_summary(job *j, const char *status) {
    cJSON *env = environment_json(j); /* the report's environment table */
    bt_log_summary_in si = {.flops_per_sample = j->flops_per_sample, .status = status,
                            .environment = env};
    const bt_status st = bt_log_summary(&j->log, &si, NULL);
    cJSON_Delete(env);
    return st;
}

/* The final model in output.dir (HF save_model). */
static bt_status save_final_model(job *j, bt_train_outcome *out) {
    const bt_run_config *rc = &j->rc;
    bt_checkpoint_save_options so;
    bt_checkpoint_save_options_default(&so);
    so.dtype = rc->save.dtype == BT_SAVE_BF16 ? BT_DTYPE_BF16 : BT_DTYPE_F32;
    so.base_config_json = j->base_config_json;
    so.copy_from_dir = j->source_dir;
    const double t0 = bt_now_s();
    bt_status st = bt_checkpoint_save(rc->output.dir, &j->model.table, j->model.params, &so);
    if (st != BT_OK) return st;
    snprintf(out->final_dir, sizeof out->final_dir, "%s", rc->output.dir);
    bt_log_message(&j->log, BT_LOG_INFO, "final model saved to %s (%.2f s): it opens with "
                   "transformers' BridgeTower*.from_pretrained", rc->output.dir, bt_now_s() - t0);
    return BT_OK;
}

/* The final evaluation found a new best after the last checkpoint was written: its
 * trainer_state.json (atomic rewrite) records it, as HF's state after its last evaluation. */
static bt_status record_final_best(job *j) {
    char path[4200];
    snprintf(path, sizeof path, "%s/trainer_state.json", j->last_saved);
    bt_train_state s;
    bt_train_state_init(&s);
    bt_status st = bt_train_state_read(path, &s);
    if (st == BT_OK) {
        s.has_best = 1;
        s.best_metric = j->best_metric;
        free(s.best_model_checkpoint);
        s.best_model_checkpoint = strdup(j->last_saved);
        if (!s.extra) s.extra = cJSON_CreateObject();
        cJSON_DeleteItemFromObjectCaseSensitive(s.extra, "best_step");
        cJSON_AddNumberToObject(s.extra, "best_step", (double)j->best_step);
        st = bt_train_state_write(path, &s);
    }
    bt_train_state_free(&s);
    if (st == BT_OK) snprintf(j->best_checkpoint, sizeof j->best_checkpoint, "%s", j->last_saved);
    return st;
}

/* Rank 0 after the loop. Stopped by a signal: a checkpoint of the step, the summary, and
 * BT_ERR_INTERRUPTED. Otherwise everything that costs training is written first (the last
 * checkpoint, under every save.strategy, and the final model), and only then the final
 * evaluation, the test split, the summary and the report: an evaluation that fails (a missing
 * image, memory) or is stopped by a signal costs only itself, says so, and leaves the model. */
static bt_status end_of_run(job *j, bt_train_outcome *out) {
    const bt_run_config *rc = &j->rc;
    bt_status st = BT_OK;
    if (j->last_saved_step != j->tr.step) st = save_checkpoint(j);
    if (st != BT_OK) return st;
    if (j->stop) {
        out->interrupted_by = j->stop;
        bt_log_message(&j->log, BT_LOG_WARN, "stopped by %s at step %lld; checkpoint %s; run "
                       "bt-train again with the same config to resume", signal_name(j->stop),
                       (long long)j->tr.step, j->last_saved);
        /* the summary line adds "at step N" itself, summary.json has last_step */
        char status[128];
        snprintf(status, sizeof status, "interrupted by %s", signal_name(j->stop));
        write_summary(j, status);
        return bt_fail(BT_ERR_INTERRUPTED, "stopped by %s at step %lld after saving %s",
                       signal_name(j->stop), (long long)j->tr.step, j->last_saved);
    }
    st = save_final_model(j, out);
    if (st != BT_OK) return st;
    const int had_best_here = j->has_best && j->best_step == j->tr.step;
    if (rc->eval.at_end || rc->eval.strategy != BT_INTERVAL_NO) st = evaluate(j, 1);
    if (st == BT_OK && rc->eval.at_end) st = evaluate_test(j);
    if (st == BT_OK && j->has_best && j->best_step == j->tr.step && !had_best_here)
        st = record_final_best(j);
    if (st != BT_OK) {
        char msg[4096], status[4400];
        snprintf(msg, sizeof msg, "%s", bt_error_message());
        const int interrupted = st == BT_ERR_INTERRUPTED;
        if (interrupted) out->interrupted_by = g_stop_signal ? g_stop_signal : SIGTERM;
        snprintf(status, sizeof status, "trained to step %lld; the final evaluation %s",
                 (long long)j->tr.step, interrupted ? "was stopped by a signal" : "failed");
        bt_log_message(&j->log, BT_LOG_WARN, "%s: %s; the model (%s) and checkpoint %s are "
                       "saved; run bt-train again with the same config to evaluate again",
                       status, msg, rc->output.dir, j->last_saved);
        write_summary(j, status);
        return bt_fail(st, "the final evaluation %s (%s); the trained model is saved in %s and "
                       "%s", interrupted ? "was stopped" : "failed", msg, rc->output.dir,
                       j->last_saved);
    }
    st = write_summary(j, "completed");
    if (st != BT_OK) return st;
    if (rc->logging.report) {
        char *cfg = bt_run_config_to_string(rc);
        st = bt_report_write(rc->output.dir, cfg);
        free(cfg);
        if (st != BT_OK) return st;
        bt_log_message(&j->log, BT_LOG_INFO, "report: %s/report.html", rc->output.dir);
    }
    return BT_OK;
}

/* The thread count (train.threads, else OpenMP's, else under a launcher this rank's share of
 * the cores) and, under ulimit -v, room for the threads and the GEMM libraries before their
 * probe and JIT start (bt_runtime_info_print; oneDNN's JIT segfaults on a failed mmap). */
static bt_status threads_setup(job *j) {
    const bt_run_config *rc = &j->rc;
    bt_status st = BT_OK;
    if (rc->train.threads > 0) st = bt_runtime_check_threads((long)rc->train.threads, "train.threads");
    if (st != BT_OK) return st;
#ifdef _OPENMP
    if (rc->train.threads > 0) {
        omp_set_num_threads((int)rc->train.threads);
    } else if (bt_dist_active(&j->dist) && !bt_setting_value(BT_SET_OMP_NUM_THREADS)) {
        /* several ranks: the cores this rank is bound to, or an equal share of the machine
         * when mpirun did not bind (--bind-to none) */
        const char *ls = bt_setting_value(BT_SET_OMPI_COMM_WORLD_LOCAL_SIZE);
        const int local = ls && atoi(ls) > 0 ? atoi(ls) : 1;
        const int mine = omp_get_num_procs(), all = (int)sysconf(_SC_NPROCESSORS_ONLN);
        const int n = mine < all ? mine : all / local;
        omp_set_num_threads(n > 0 ? n : 1);
    }
#endif
    {
        /* under ulimit -v: room for the threads and the GEMM libraries first (their probe
         * and JIT start in bt_runtime_info_print; oneDNN's JIT segfaults on a failed mmap) */
#ifdef _OPENMP
        const int threads = omp_get_max_threads();
#else
        const int threads = 1;
#endif
        st = bt_mem_check_runtime("bt-train", threads + 2 * (int)rc->data.num_workers + 1);
    }
    return st;
}

/* A rerun of a finished run: said, exit 0, nothing written (rank 0 decides); 1 when so. */
static int finished_rerun(job *j, bt_train_outcome *out) {
    const bt_run_config *rc = &j->rc;
    double fin = j->dist.rank == 0 && run_finished(j);
    if (bt_dist_active(&j->dist)) bt_dist_sum_f64(&j->dist, &fin, 1);
    if (fin <= 0) return 0;
    out->last_step = j->resume.state.global_step;
    snprintf(out->final_dir, sizeof out->final_dir, "%s", rc->output.dir);
    say(j, "bt-train: %s holds a finished run (completed at step %lld of %lld, summary.json): "
           "nothing to do; nothing was changed. To train again from the start set "
           "output.overwrite=true (or use another output.dir); to train longer raise "
           "train.max_steps or train.epochs", rc->output.dir, (long long)out->last_step,
        (long long)j->max_steps);
    return 1;
}

/* Opens the run's logs on rank 0 (metrics.jsonl, TensorBoard, the progress line) and says
 * what the run will do. */
static bt_status log_setup(job *j) {
    const bt_run_config *rc = &j->rc;
    bt_status st = BT_OK;
    bt_log_opts lo = bt_log_opts_default();
    lo.out = j->out;
    lo.total_steps = j->max_steps;
    lo.logging_steps = rc->logging.steps;
    lo.first_step = rc->logging.first_step;
    lo.throughput_warmup_steps = rc->logging.throughput_warmup_steps;
    lo.resume_step = j->resumed ? j->tr.step : 0;
    lo.redo_eval_at_resume = j->resumed && j->tr.step >= j->max_steps; /* the end phase again */
    lo.tensorboard = rc->logging.tensorboard;
    /* logging.progress "auto": no live line under a launcher (Open MPI gives each rank a
     * pseudo-terminal even when mpirun's output goes to a file; docs/outputs.md) */
    lo.mode = rc->logging.progress == BT_PROGRESS_AUTO && bt_dist_launched()
                  ? BT_PROGRESS_PLAIN
                  : (bt_progress_mode)rc->logging.progress;
    char *run_text = bt_run_config_to_string(rc);
    lo.run_config_text = run_text;
    lo.model_config_text = j->base_config_json;
    if (j->dist.rank == 0) st = bt_log_open(&j->log, rc->output.dir, &lo);
    free(run_text);
    if (st != BT_OK) return st;
    j->have_log = j->dist.rank == 0;
    {
        const bt_model_config *c = &j->model.cfg;
        say(j, "bt-train: %zu training records, %lld batches of %lld per epoch, %lld optimizer "
               "steps (accumulation %lld), %s, %d threads; model: text %d x %d, vision %d x %d "
               "(%d px), cross %d x %d, %zu parameters",
            j->train_man.n, (long long)j->batches_per_epoch, (long long)rc->train.batch_size,
            (long long)j->max_steps, (long long)rc->train.gradient_accumulation_steps,
            rc->train.precision == BT_PRECISION_BF16 ? "bf16" : "fp32",
#ifdef _OPENMP
            omp_get_max_threads(),
#else
            1,
#endif
            c->text_layers, c->text_hidden, c->vision_layers, c->vision_hidden, c->image_size,
            c->cross_layers, c->hidden, j->model.table.numel);
    }
    return BT_OK;
}

bt_status bt_train_run(const bt_train_options *o, bt_train_outcome *out) {
    job J;
    memset(&J, 0, sizeof J);
    job *j = &J;
    memset(out, 0, sizeof *out);
    j->out = o->out ? o->out : stdout;
    j->last_saved_step = -1;
    j->lock.fd = -1;
    g_stop_signal = 0;
    j->test_raise_at = o->test_sigterm_in_stop_check;
    /* before any thread of the job starts (install_stop_signals: the mask they inherit) */
    if (o->install_signals) install_stop_signals();
    bt_status st = bt_dist_init(&j->dist, NULL, NULL);
    if (st != BT_OK) goto done;
    if (o->test_dist_sleep &&
        sscanf(o->test_dist_sleep, "%d:%63[^:]:%lf", &j->dist.test_sleep_rank,
               j->dist.test_sleep_ctx, &j->dist.test_sleep_s) != 3) {
        st = bt_fail(BT_ERR_ARG, "--test-hook dist_sleep=%s: expected RANK:CONTEXT:SECONDS",
                     o->test_dist_sleep);
        goto done;
    }
    if (j->dist.rank > 0) { /* rank 0 speaks; the others' warnings and errors use stderr */
        j->devnull = fopen("/dev/null", "w");
        if (j->devnull) j->out = j->devnull;
    }
    st = bt_run_config_resolve(&j->rc, o->config_path, o->sets, o->n_sets);
    if (st != BT_OK) goto done;
    const bt_run_config *rc = &j->rc;
    if (o->print_config) {
        char *text = bt_run_config_to_string(rc);
        fprintf(j->out, "bt-train: resolved config:\n%s", text ? text : "");
        free(text);
    }
    st = bt_model_settings_check(); /* the model's variables, before anything is written */
    if (st == BT_OK) st = threads_setup(j);
    if (st != BT_OK) goto done;
    bt_runtime_info_print(j->out, "bt-train");
    /* rank 0 alone writes into output.dir and picks the checkpoint to resume from
     * (resume_setup): the other ranks need not see it. output_dir.h: what may be written
     * into, then the lock. */
    if (j->dist.rank == 0) {
        st = bt_output_dir_check(rc);
        if (st == BT_OK) st = bt_check_output_dir(rc->output.dir, "output.dir", 1);
        if (st == BT_OK) st = bt_output_lock_take(&j->lock, rc->output.dir, stderr);
    }
    if (st != BT_OK) goto done;
    st = resume_setup(j);
    if (st == BT_OK) st = model_setup(j);
    if (st == BT_OK) st = data_files_setup(j);
    if (st == BT_OK) st = loader_setup(j);
    if (st == BT_OK) st = check_metric_for_best(j);
    if (st != BT_OK) goto done;
    j->max_steps = total_steps(rc, j->batches_per_epoch);
    if (j->resumed && j->resume.state.max_steps != j->max_steps)
        fprintf(j->out, "bt-train: note: the run now has %lld steps (the checkpoint's run had "
                        "%lld)\n", (long long)j->max_steps, (long long)j->resume.state.max_steps);
    if (finished_rerun(j, out)) goto done;
    st = step_setup(j);
    if (st == BT_OK) st = memory_plan(j);
    if (st == BT_OK) st = dist_setup(j);
    if (st != BT_OK) goto done;

    st = log_setup(j);
    if (st != BT_OK) goto done;

    st = train_loop(j, out);
    if (st != BT_OK) goto done;
    bt_dist_set_context(&j->dist, "the end of the run");
    stop_requested(j); /* the ranks agree on a signal that landed during the last step */
    if (j->tr.zero) { /* rank 0 saves below, after the others have left: gather the moments now
                       * (every end saves a checkpoint) */
        if (j->last_saved_step != j->tr.step) st = gather_optim(j);
        if (st != BT_OK) goto done;
    }
    if (j->dist.rank > 0) { /* rank 0 saves, evaluates and reports */
        out->interrupted_by = j->stop;
        if (j->stop)
            st = bt_fail(BT_ERR_INTERRUPTED, "stopped by %s at step %lld (rank 0 saves the "
                         "checkpoint)", signal_name(j->stop), (long long)j->tr.step);
        goto done;
    }
    st = end_of_run(j, out);
done:
    job_free(j);
    bt_output_lock_release(&j->lock);
    if (j->devnull) fclose(j->devnull);
    if (st != BT_OK && st != BT_ERR_INTERRUPTED && bt_dist_active(&j->dist)) {
        /* the others may wait in a collective: end the job (MPI_Abort) with this message */
        char msg[8192];
        snprintf(msg, sizeof msg, "error: %s", bt_error_message());
        bt_dist_abort(&j->dist, "bt-train", msg, 1);
    }
    bt_dist_finalize(&j->dist);
    return st;
}
