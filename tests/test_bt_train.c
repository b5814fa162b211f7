/* test_bt_train.c: the bt-train job as a user runs it (its path is argv[1], passed by meson),
 * on a generated synthetic dataset and the small synthetic model (configs/synthetic-model),
 * with ITC + ITM + MLM and dropout on, so every random stream of the step is exercised.
 *
 * What it proves, each against an independent run of the same command (never against the
 * program's own account of itself):
 *   determinism   two uninterrupted runs give the same model.safetensors bytes;
 *   SIGKILL       a run killed at two points (right after a checkpoint appears, and in the
 *                 middle of a later step) and restarted with the same command ends with the
 *                 same weights and moments, bit for bit, as the uninterrupted run, and its
 *                 metrics.jsonl has every step exactly once;
 *   SIGINT        exits 130 after writing a checkpoint of the step it stopped at, and the
 *                 restarted run ends equal to the uninterrupted one; the thread that trains
 *                 blocks the stop signals (bt-train's signal thread takes them); a second
 *                 signal ends the process at once, by that signal;
 *   bad input     malformed configs, unknown keys and bad --set values name the key; a
 *                 corrupt image stops the run naming the manifest line (on_bad_record
 *                 "stop") or is replaced with a warning naming it ("skip");
 *   NaN policy    a learning rate that blows the weights up stops the run naming the step
 *                 ("stop") or skips the steps and says so ("skip");
 *   learning      the training loss of the last logged steps is below the first's.
 * Whole-step numerics against PyTorch are test_step_parity's; this test is about the job. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "test_train_setup.h"
#include "test_util.h"

static const char *exe;
static char data_dir[1024], model_dir[1024], base_cfg[1100];

static int exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

static void sleep_s(double s) {
    tts_sleep_s(s);
}

/* Starts bt-train --config base_cfg --set output.dir=OUT [extra --set ...] with stdout and
 * stderr in OUT.log / OUT.err; returns the pid. */
static pid_t spawn_train(const char *out, const char *const *sets, size_t n_sets) {
    return tts_spawn_train(exe, base_cfg, out, sets, n_sets, NULL);
}

static int wait_exit(pid_t pid) {
    return tts_wait_exit(pid);
}

static int run_train(const char *out, const char *const *sets, size_t n_sets) {
    return wait_exit(spawn_train(out, sets, n_sets));
}

static char *read_text(const char *path) {
    char *t = (char *)tu_read_file(path, NULL);
    return t ? t : strdup("");
}

static int wait_for(const char *path, pid_t pid) {
    return tts_wait_for(path, pid);
}

/* A "train" record of metrics.jsonl splits its forward + backward by kind of kernel
 * (phase_s gemm, attention, memory_bound: kernel_clock.h): each present, each positive,
 * their sum at most forward + backward (plus 1 ms per step for the clock reads). */
static int kernel_split_ok(const cJSON *rec) {
    const cJSON *ph = cJSON_GetObjectItemCaseSensitive(rec, "phase_s");
    static const char *const keys[5] = {"forward", "backward", "gemm", "attention",
                                        "memory_bound"};
    double v[5];
    for (int k = 0; k < 5; k++) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(ph, keys[k]);
        if (!cJSON_IsNumber(x)) return 0;
        v[k] = x->valuedouble;
    }
    return v[2] > 0 && v[3] > 0 && v[4] > 0 && v[2] + v[3] + v[4] <= v[0] + v[1] + 1e-3;
}

/* Steps of the "train" records of metrics.jsonl, in file order; returns how many. With
 * split_ok, also how many of them pass kernel_split_ok. */
static size_t train_steps(const char *out, int64_t *steps, double *losses, size_t cap,
                          size_t *split_ok) {
    char p[1200];
    snprintf(p, sizeof p, "%s/metrics.jsonl", out);
    char *text = read_text(p);
    size_t n = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *j = cJSON_Parse(line);
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(j, "type");
        if (cJSON_IsString(type) && !strcmp(type->valuestring, "train") && n < cap) {
            steps[n] = (int64_t)cJSON_GetObjectItemCaseSensitive(j, "step")->valuedouble;
            const cJSON *l = cJSON_GetObjectItemCaseSensitive(j, "loss");
            losses[n] = cJSON_IsNumber(l) ? l->valuedouble : NAN;
            if (split_ok) *split_ok += (size_t)kernel_split_ok(j);
            n++;
        }
        cJSON_Delete(j);
    }
    free(text);
    return n;
}

static int same_file(const char *what, const char *a_dir, const char *b_dir, const char *name) {
    char a[1200], b[1200];
    snprintf(a, sizeof a, "%s/%s", a_dir, name);
    snprintf(b, sizeof b, "%s/%s", b_dir, name);
    return tu_check(tu_files_equal(a, b), "%s: %s equals %s byte for byte", what, b, a);
}

static void setup(void) {
    const char *tmp = tu_tmpdir();
    snprintf(data_dir, sizeof data_dir, "%s/synth", tmp);
    tts_synth_data(data_dir, 64, 16, 12); /* train, val, test */
    tts_synthetic_model_dir(model_dir, sizeof model_dir);
    snprintf(base_cfg, sizeof base_cfg, "%s/run.json", tmp);
    char text[8192];
    snprintf(text, sizeof text,
             "{\n"
             "  \"model\": {\"config\": \"%s\", \"init_seed\": 0, \"heads\": [\"itc\", \"itm\", "
             "\"mlm\"]},\n"
             "  \"data\": {\"train\": \"%s/train.jsonl\", \"validation\": \"%s/val.jsonl\",\n"
             "           \"test\": \"%s/test.jsonl\",\n"
             "           \"max_length\": 32, \"seed\": 1, \"drop_last\": true, \"num_workers\": 2},\n"
             "  \"train\": {\"batch_size\": 8, \"max_steps\": 8, \"lr\": 1e-3, \"warmup_steps\": 2,\n"
             "            \"weight_decay\": 0.01, \"max_grad_norm\": 1.0,\n"
             "            \"loss_weights\": {\"itc\": 1, \"itm\": 0.5, \"mlm\": 0.5},\n"
             "            \"seed\": 5, \"dropout\": true, \"threads\": %d},\n"
             "  \"logging\": {\"steps\": 1, \"tensorboard\": true, \"report\": false},\n"
             "  \"eval\": {\"strategy\": \"no\", \"at_end\": false},\n"
             "  \"save\": {\"strategy\": \"steps\", \"steps\": 2, \"total_limit\": 2}\n"
             "}\n",
             model_dir, data_dir, data_dir, data_dir, tu_test_threads(2));
    tu_setup_text(base_cfg, text);
}

/* The thread that runs the step (the main thread: task pid) blocks the five stop signals,
 * so that a signal is never handled on a thread inside one of oneDNN 2.6's generated GEMM
 * kernels, which point rsp into the heap (src/train/trainer.c, "Where the stop signals are
 * taken"): the SIGINT below then reaches bt-train's signal thread instead. Read from
 * /proc/PID/task/PID/status (SigBlk, a hex mask with bit sig - 1 for each blocked signal). */
static void check_stop_signals_blocked(pid_t pid) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task/%d/status", (int)pid, (int)pid);
    char *st = read_text(path);
    const char *line = strstr(st, "SigBlk:");
    unsigned long long mask = 0;
    const int got = line && sscanf(line + strlen("SigBlk:"), "%llx", &mask) == 1;
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2};
    int all = got;
    for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++)
        all = all && (mask >> (sigs[i] - 1) & 1ull);
    tu_check(all, "bt-train's main thread blocks SIGINT, SIGTERM, SIGHUP, SIGUSR1 and SIGUSR2 "
             "while it trains (%s: SigBlk %s%llx)", path, got ? "" : "unreadable, ", mask);
    free(st);
}

static const char *out_path(const char *name) {
    return tu_tmp_path(name);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_bt_train PATH/TO/bt-train\n");
        return 1;
    }
    exe = argv[1];
    setup();

    /* --- the reference run, and determinism ---------------------------------------------- */
    char ref[1200], again[1200];
    snprintf(ref, sizeof ref, "%s", out_path("ref"));
    snprintf(again, sizeof again, "%s", out_path("again"));
    int rc = run_train(ref, NULL, 0);
    if (!tu_check(rc == 0, "uninterrupted run exits 0 (got %d)", rc)) {
        char p[1300];
        snprintf(p, sizeof p, "%s.err", ref);
        char *e = read_text(p);
        fprintf(stderr, "%s\n", e);
        free(e);
        return tu_finish();
    }
    tu_check(run_train(again, NULL, 0) == 0, "second uninterrupted run exits 0");
    same_file("determinism", ref, again, "model.safetensors");
    {
        char a[1300], b[1300];
        snprintf(a, sizeof a, "%s/checkpoint-8", ref);
        snprintf(b, sizeof b, "%s/checkpoint-8", again);
        same_file("determinism", a, b, "optimizer.safetensors");
        snprintf(a, sizeof a, "%s/checkpoint-4", ref);
        tu_check(!exists(a), "save.total_limit 2: %s was removed", a);
        snprintf(a, sizeof a, "%s/checkpoint-6/trainer_state.json", ref);
        tu_check(exists(a), "save.total_limit 2: %s kept", a);
    }
    int64_t steps[64];
    double losses[64];
    size_t split = 0;
    size_t n = train_steps(ref, steps, losses, 64, &split);
    tu_check(n == 8, "metrics.jsonl: 8 train records (got %zu)", n);
    tu_check(split == n, "metrics.jsonl: phase_s splits forward + backward into gemm, "
             "attention and memory_bound in %zu of %zu train records", split, n);

    /* --- train.gradient_checkpointing: the same bytes; the memory plan suggests it -------- */
    {
        char ckp[1200], p[1300];
        snprintf(ckp, sizeof ckp, "%s", out_path("checkpointing"));
        /* with evaluations every 3 steps in between (forward-only, in the idle arenas, with
         * ITM re-ranking) that must leave the training untouched */
        const char *on[] = {"train.gradient_checkpointing=true", "eval.strategy=steps",
                            "eval.steps=3", "eval.itm_rerank_k=2"};
        tu_check(run_train(ckp, on, 4) == 0, "train.gradient_checkpointing=true exits 0");
        same_file("gradient checkpointing with evaluations (bit for bit, dropout on)", ref, ckp,
                  "model.safetensors");
        snprintf(p, sizeof p, "%s.log", ckp);
        char *log = read_text(p);
        tu_check(strstr(log, "gradient checkpointing on") != NULL,
                 "the memory plan says gradient checkpointing is on");
        free(log);
        snprintf(p, sizeof p, "%s/metrics.jsonl", ckp);
        char *metrics = read_text(p);
        int evals = 0;
        for (const char *q = metrics; (q = strstr(q, "\"type\": \"eval\"")); q++) evals++;
        if (!evals) /* compact JSON */
            for (const char *q = metrics; (q = strstr(q, "\"type\":\"eval\"")); q++) evals++;
        tu_check(evals >= 2, "the checkpointed run evaluated in between (%d eval records)",
                 evals);
        free(metrics);
        /* bf16: checkpointing also drops the weights' bf16 copy (model.h
         * bt_model_drop_bf16_shadow; where bf16 runs fp32 products there is none either way):
         * the same bytes as the bf16 run without checkpointing */
        char ref16[1200], ckp16[1200];
        snprintf(ref16, sizeof ref16, "%s", out_path("bf16"));
        snprintf(ckp16, sizeof ckp16, "%s", out_path("bf16_checkpointing"));
        const char *b16[] = {"train.precision=bf16", "train.gradient_checkpointing=true"};
        tu_check(run_train(ref16, b16, 1) == 0, "train.precision=bf16 exits 0");
        tu_check(run_train(ckp16, b16, 2) == 0,
                 "train.precision=bf16 with train.gradient_checkpointing=true exits 0");
        same_file("bf16 with gradient checkpointing, no bf16 weight copy (bit for bit)", ref16,
                  ckp16, "model.safetensors");
        /* 40 MB available: the weights fit, the full activations (~0.1 GB) do not */
        char small[1200];
        snprintf(small, sizeof small, "%s", out_path("small_memory"));
        tu_setenv("BT_MEM_AVAILABLE", "40000000", 1);
        const int rs = run_train(small, NULL, 0);
        tu_unsetenv("BT_MEM_AVAILABLE");
        snprintf(p, sizeof p, "%s.err", small);
        char *err = read_text(p);
        tu_check(rs == 1 && strstr(err, "activations of one micro-batch") &&
                     strstr(err, "set train.gradient_checkpointing=true"),
                 "too little memory: exit 1, the refusal suggests train.gradient_checkpointing "
                 "(got %d: %.300s)", rs, err);
        free(err);
    }
    {
        char p[1300];
        snprintf(p, sizeof p, "%s/config.json", ref);
        tu_check(exists(p), "final model directory written: %s", p);
        snprintf(p, sizeof p, "%s/tokenizer.json", ref);
        tu_check(exists(p), "final model directory has the tokenizer: %s", p);
        snprintf(p, sizeof p, "%s/summary.json", ref);
        tu_check(exists(p), "summary written: %s", p);
    }

    /* --- SIGKILL at two points, then resume by running the same command again ------------- */
    char killed[1200];
    snprintf(killed, sizeof killed, "%s", out_path("killed"));
    {
        char ck[1300];
        pid_t pid = spawn_train(killed, NULL, 0);
        snprintf(ck, sizeof ck, "%s/checkpoint-2/trainer_state.json", killed);
        int seen = wait_for(ck, pid);
        kill(pid, SIGKILL);
        int st = wait_exit(pid);
        tu_check(seen && st == 128 + SIGKILL, "first kill right after checkpoint-2 (status %d)", st);
        pid = spawn_train(killed, NULL, 0);
        snprintf(ck, sizeof ck, "%s/checkpoint-4/trainer_state.json", killed);
        seen = wait_for(ck, pid);
        sleep_s(0.15); /* into step 5 or 6: work after the last checkpoint is lost and redone */
        kill(pid, SIGKILL);
        st = wait_exit(pid);
        tu_check(seen, "second kill after checkpoint-4 (status %d)", st);
        rc = run_train(killed, NULL, 0);
        tu_check(rc == 0, "resumed run exits 0 (got %d)", rc);
        same_file("SIGKILL + resume", ref, killed, "model.safetensors");
        char a[1300], b[1300];
        snprintf(a, sizeof a, "%s/checkpoint-8", ref);
        snprintf(b, sizeof b, "%s/checkpoint-8", killed);
        same_file("SIGKILL + resume", a, b, "optimizer.safetensors");
        int64_t ks[64];
        double kl[64];
        size_t kn = train_steps(killed, ks, kl, 64, NULL);
        int once = kn == 8;
        for (size_t i = 0; once && i < kn; i++) once = ks[i] == (int64_t)i + 1;
        tu_check(once, "SIGKILL + resume: metrics.jsonl has steps 1..8 once each (%zu records)", kn);
        char logp[1300];
        snprintf(logp, sizeof logp, "%s.log", killed);
        char *log = read_text(logp);
        tu_check(strstr(log, "resuming from") != NULL, "the restarted run says it resumes");
        free(log);
    }

    /* --- SIGINT: checkpoint of the current step, exit 130, resume --------------------------- */
    char intr[1200];
    snprintf(intr, sizeof intr, "%s", out_path("sigint"));
    {
        char ck[1300];
        pid_t pid = spawn_train(intr, NULL, 0);
        snprintf(ck, sizeof ck, "%s/checkpoint-2/trainer_state.json", intr);
        wait_for(ck, pid);
        check_stop_signals_blocked(pid);
        sleep_s(0.05);
        kill(pid, SIGINT);
        int st = wait_exit(pid);
        char errp[1300];
        snprintf(errp, sizeof errp, "%s.err", intr);
        char *err = read_text(errp);
        tu_check(st == 130, "SIGINT: exit status 130 (got %d)", st);
        tu_check(strstr(err, "SIGINT") != NULL, "SIGINT: the message says so: %.200s", err);
        free(err);
        /* the summary line names the step once: "summary: interrupted by SIGINT at step N (" */
        snprintf(errp, sizeof errp, "%s.log", intr);
        char *log = read_text(errp);
        const char *sum = strstr(log, "summary: interrupted by SIGINT at step ");
        long long at = -1;
        char after[3] = "";
        if (sum) sscanf(sum + strlen("summary: interrupted by SIGINT at step "), "%lld%2c", &at, after);
        tu_check(at >= 2 && !strcmp(after, " ("), "SIGINT: the summary line says \"interrupted by "
                 "SIGINT at step %lld\" once, the step not repeated: %.120s", at, sum ? sum : log);
        free(log);
        rc = run_train(intr, NULL, 0);
        tu_check(rc == 0, "SIGINT: resumed run exits 0 (got %d)", rc);
        same_file("SIGINT + resume", ref, intr, "model.safetensors");
    }

    /* --- two stop signals: the second ends the process at once, by that signal ------------- */
    {
        char two[1200], ck[1300];
        snprintf(two, sizeof two, "%s", out_path("two-signals"));
        pid_t pid = spawn_train(two, NULL, 0);
        snprintf(ck, sizeof ck, "%s/checkpoint-2/trainer_state.json", two);
        wait_for(ck, pid);
        /* two different signals: two SIGINTs sent together may merge into one pending signal.
         * The first asks for a stop after the step in flight (milliseconds away), the second
         * is taken right after it and ends the process by its default action. */
        kill(pid, SIGINT);
        kill(pid, SIGTERM);
        int status = 0;
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
        const int by_signal = WIFSIGNALED(status);
        tu_check(by_signal && (WTERMSIG(status) == SIGINT || WTERMSIG(status) == SIGTERM),
                 "SIGINT then SIGTERM: the second ends the process by its signal (%s %d)",
                 by_signal ? "signal" : WIFEXITED(status) ? "exit status" : "status",
                 by_signal ? WTERMSIG(status) : WIFEXITED(status) ? WEXITSTATUS(status) : status);
        struct stat cst;
        tu_check(stat(ck, &cst) == 0, "SIGINT then SIGTERM: the saved %s is still there", ck);
    }

    /* --- eval.metric_for_best: the best checkpoint is tracked and survives the rotation ----- */
    {
        const char *sets[] = {"eval.strategy=steps", "eval.steps=2", "eval.batch_size=16",
                              "eval.metric_for_best=t2i_r1", "save.total_limit=1",
                              "train.lr=3e-3", "eval.at_end=true"};
        char best[1200];
        snprintf(best, sizeof best, "%s", out_path("best"));
        rc = run_train(best, sets, 7);
        /* the expected best from the eval records of metrics.jsonl: the first maximum */
        char p[1300];
        snprintf(p, sizeof p, "%s/metrics.jsonl", best);
        char *text = read_text(p);
        double want = -1;
        int64_t want_step = -1;
        for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
            cJSON *j = cJSON_Parse(line);
            const cJSON *type = cJSON_GetObjectItemCaseSensitive(j, "type");
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "t2i_r1");
            if (cJSON_IsString(type) && !strcmp(type->valuestring, "eval") && cJSON_IsNumber(v) &&
                v->valuedouble > want) {
                want = v->valuedouble;
                want_step = (int64_t)cJSON_GetObjectItemCaseSensitive(j, "step")->valuedouble;
            }
            cJSON_Delete(j);
        }
        free(text);
        snprintf(p, sizeof p, "%s/checkpoint-8/trainer_state.json", best);
        text = read_text(p);
        cJSON *st = cJSON_Parse(text);
        const cJSON *bm = cJSON_GetObjectItemCaseSensitive(st, "best_metric");
        const cJSON *bc = cJSON_GetObjectItemCaseSensitive(st, "best_model_checkpoint");
        char suffix[64];
        snprintf(suffix, sizeof suffix, "/checkpoint-%lld", (long long)want_step);
        const int path_ok = cJSON_IsString(bc) && strlen(bc->valuestring) >= strlen(suffix) &&
                            !strcmp(bc->valuestring + strlen(bc->valuestring) - strlen(suffix),
                                    suffix);
        tu_check(rc == 0 && want_step > 0 && cJSON_IsNumber(bm) && bm->valuedouble == want &&
                     path_ok && exists(bc->valuestring),
                 "metric_for_best t2i_r1: best %g at step %lld in trainer_state.json (%s), "
                 "its checkpoint kept with total_limit 1", want, (long long)want_step,
                 cJSON_IsString(bc) ? bc->valuestring : "none");
        cJSON_Delete(st);
        free(text);
        /* the final evaluation and the test split (HF --do_eval / --do_predict) */
        snprintf(p, sizeof p, "%s/eval_results.json", best);
        cJSON *ev = cJSON_Parse(text = read_text(p));
        free(text);
        snprintf(p, sizeof p, "%s/test_results.json", best);
        cJSON *te = cJSON_Parse(text = read_text(p));
        free(text);
        const cJSON *er = cJSON_GetObjectItemCaseSensitive(ev, "records");
        const cJSON *tr = cJSON_GetObjectItemCaseSensitive(te, "records");
        tu_check(cJSON_IsNumber(er) && er->valuedouble == 16 && cJSON_IsNumber(tr) &&
                     tr->valuedouble == 12,
                 "eval_results.json (16 validation records) and test_results.json (12 test "
                 "records) written");
        cJSON_Delete(ev);
        cJSON_Delete(te);
        const char *bad[] = {"eval.strategy=steps", "eval.steps=2", "eval.metric_for_best=r1",
                             "train.max_steps=2"};
        snprintf(best, sizeof best, "%s", out_path("best-bad"));
        rc = run_train(best, bad, 4);
        snprintf(p, sizeof p, "%s.err", best);
        char *err = read_text(p);
        tu_check(rc == 1 && strstr(err, "eval.metric_for_best") && strstr(err, "t2i_r1"),
                 "an unknown metric_for_best is named with the metrics there are: %.300s", err);
        free(err);
    }

    /* --- logging cadence: logging.steps 3 with first_step logs steps 1, 3, 6 and the last ---- */
    {
        const char *sets[] = {"logging.steps=3", "logging.first_step=true", "train.max_steps=7",
                              "save.strategy=no", "data.test=null"};
        char lg[1200];
        snprintf(lg, sizeof lg, "%s", out_path("cadence"));
        rc = run_train(lg, sets, 5);
        int64_t ls[16];
        double ll[16];
        const size_t k = train_steps(lg, ls, ll, 16, NULL);
        tu_check(rc == 0 && k == 4 && ls[0] == 1 && ls[1] == 3 && ls[2] == 6 && ls[3] == 7,
                 "logging.steps 3 + first_step: records at steps 1, 3, 6, 7 (%zu records)", k);
    }

    /* --- learning: the loss goes down over the run ------------------------------------------ */
    {
        const char *sets[] = {"train.max_steps=40", "save.strategy=no", "train.lr=2e-3"};
        char learn[1200];
        snprintf(learn, sizeof learn, "%s", out_path("learn"));
        rc = run_train(learn, sets, 3);
        size_t ln = train_steps(learn, steps, losses, 64, NULL);
        double first = 0, last = 0;
        for (size_t i = 0; i < 5 && ln >= 10; i++) first += losses[i] / 5;
        for (size_t i = ln >= 10 ? ln - 5 : 0; i < ln; i++) last += losses[i] / 5;
        tu_check(rc == 0 && ln == 40 && last < first,
                 "40 steps: mean loss of the last 5 steps %.4f < first 5 %.4f", last, first);
    }

    /* --- bad input -------------------------------------------------------------------------- */
    {
        char out[1200];
        snprintf(out, sizeof out, "%s", out_path("bad"));
        const char *unknown[] = {"train.learning_rate=1e-3"};
        rc = run_train(out, unknown, 1);
        char errp[1300];
        snprintf(errp, sizeof errp, "%s.err", out);
        char *err = read_text(errp);
        tu_check(rc == 1 && strstr(err, "train.learning_rate") && strstr(err, "train.lr"),
                 "unknown key: exit 1 naming it and the right key (%d): %.300s", rc, err);
        free(err);
        unlink(errp);
        const char *badval[] = {"train.batch_size=0"};
        rc = run_train(out, badval, 1);
        err = read_text(errp);
        tu_check(rc == 1 && strstr(err, "train.batch_size"),
                 "out-of-range value: exit 1 naming the key (%d): %.300s", rc, err);
        free(err);
        unlink(errp);
        char badcfg[1200];
        snprintf(badcfg, sizeof badcfg, "%s", out_path("broken.json"));
        tu_setup_text(badcfg, "{\"train\": {\"lr\": 1e-3,}}");
        char cmd[4096];
        snprintf(cmd, sizeof cmd, "'%s' --config '%s' > '%s.log' 2> '%s'", exe, badcfg, out, errp);
        int status = system(cmd);
        err = read_text(errp);
        tu_check(WIFEXITED(status) && WEXITSTATUS(status) == 1 && strstr(err, badcfg),
                 "malformed JSON: exit 1 naming the file: %.300s", err);
        free(err);
        unlink(errp);
        /* a checkpoint whose trainer counters (trainer_state.json "extra") are out of any
         * range: refused naming the file and the key, the value never converted */
        char ck[1300], state[1400];
        snprintf(ck, sizeof ck, "%s", out_path("bad-extra-checkpoint"));
        snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s/checkpoint-6' '%s'", ck, ref, ck);
        snprintf(state, sizeof state, "%s/trainer_state.json", ck);
        char *text = system(cmd) == 0 ? read_text(state) : strdup("");
        char *at = strstr(text, "\"batches_done\":");
        cJSON *js = at ? cJSON_Parse(text) : NULL;
        cJSON *ex = js ? cJSON_GetObjectItemCaseSensitive(js, "extra") : NULL;
        if (tu_check(ex != NULL, "checkpoint-6's trainer_state.json has extra.batches_done")) {
            cJSON_ReplaceItemInObjectCaseSensitive(ex, "batches_done", cJSON_CreateNumber(1e300));
            char *bad = cJSON_Print(js);
            tu_setup_text(state, bad);
            free(bad);
            char set[1400];
            snprintf(set, sizeof set, "output.resume_from=%s", ck);
            const char *resume[] = {set};
            rc = run_train(out, resume, 1);
            err = read_text(errp);
            tu_check(rc == 1 && strstr(err, state) &&
                         strstr(err, "extra.batches_done: expected an integer in [0, 2^53], got "
                                     "1.0000000000000001e+300"),
                     "corrupt trainer counter: exit 1 naming the file and key (%d): %.400s", rc,
                     err);
            free(err);
            unlink(errp);
        }
        cJSON_Delete(js);
        free(text);
    }
    {
        /* a corrupt image in record 3 (line 3) of a copy of the manifest */
        char man[1200], bad_img[1200], line[4096];
        snprintf(man, sizeof man, "%s/bad.jsonl", data_dir); /* beside the images it names */
        snprintf(bad_img, sizeof bad_img, "%s/corrupt.jpg", data_dir);
        tu_setup_text(bad_img, "\xff\xd8\xff\xe0 this is not a JPEG");
        char src[1200];
        snprintf(src, sizeof src, "%s/train.jsonl", data_dir);
        FILE *in = fopen(src, "r"), *o = fopen(man, "w");
        int k = 0;
        while (in && o && fgets(line, sizeof line, in)) {
            if (++k == 3) fprintf(o, "{\"image\": \"corrupt.jpg\", \"caption\": \"a broken picture\"}\n");
            else fputs(line, o);
        }
        if (in) fclose(in);
        if (o) fclose(o);
        char set_man[1300];
        snprintf(set_man, sizeof set_man, "data.train=%s", man);
        const char *stop[] = {set_man, "data.on_bad_record=stop", "data.shuffle=false",
                              "save.strategy=no"};
        char out[1200], errp[1300];
        snprintf(out, sizeof out, "%s", out_path("badrec-stop"));
        snprintf(errp, sizeof errp, "%s.err", out);
        rc = run_train(out, stop, 4);
        char *err = read_text(errp);
        tu_check(rc == 1 && strstr(err, "bad.jsonl:3") && strstr(err, "corrupt.jpg"),
                 "corrupt image, policy stop: exit 1 naming manifest line and image (%d): %.400s",
                 rc, err);
        free(err);
        const char *skip[] = {set_man, "data.on_bad_record=skip", "data.shuffle=false",
                              "save.strategy=no"};
        snprintf(out, sizeof out, "%s", out_path("badrec-skip"));
        snprintf(errp, sizeof errp, "%s.err", out);
        rc = run_train(out, skip, 4);
        err = read_text(errp);
        tu_check(rc == 0 && strstr(err, "bad.jsonl:3") && strstr(err, "corrupt.jpg"),
                 "corrupt image, policy skip: exit 0 with a warning naming it (%d): %.400s", rc,
                 err);
        free(err);
    }
    {
        /* a learning rate that makes the weights non-finite */
        const char *stop[] = {"train.lr=1e30", "train.max_grad_norm=0", "train.warmup_steps=0",
                              "train.on_nan=stop", "save.strategy=no", "data.test=null"};
        char out[1200], errp[1300];
        snprintf(out, sizeof out, "%s", out_path("nan-stop"));
        snprintf(errp, sizeof errp, "%s.err", out);
        rc = run_train(out, stop, 6);
        char *err = read_text(errp);
        /* step 1 runs on the initial weights; its update makes them non-finite */
        tu_check(rc == 1 && strstr(err, "step 2:") && strstr(err, "NaN") &&
                     strstr(err, "train.on_nan \"stop\""),
                 "non-finite loss, policy stop: exit 1 naming step 2 and the key train.on_nan "
                 "(%d): %.300s", rc, err);
        free(err);
        /* (no test split: a diverged model's scores are not finite, which evaluation refuses) */
        const char *skip[] = {"train.lr=1e30", "train.max_grad_norm=0", "train.warmup_steps=0",
                              "train.on_nan=skip", "save.strategy=no", "data.test=null"};
        snprintf(out, sizeof out, "%s", out_path("nan-skip"));
        snprintf(errp, sizeof errp, "%s.err", out);
        rc = run_train(out, skip, 6);
        err = read_text(errp);
        tu_check(rc == 0 && strstr(err, "step 2 skipped"),
                 "non-finite loss, policy skip: exit 0, the skipped steps reported (%d): %.300s",
                 rc, err);
        free(err);
    }
    return tu_finish();
}
