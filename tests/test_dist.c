/* test_dist.c: data-parallel bt-train under mpirun (docs/distributed.md), by path (argv[1]),
 * on a generated synthetic dataset and the small synthetic model, ITC + MLM with dropout on
 * (ITM is left out: its negatives are drawn from each rank's local batch by design, so it is
 * not batch-split invariant).
 *
 * What it proves, each against an independent one-process run of the same job:
 *   equivalence  2 ranks x batch 4 (shared memory) and 4 ranks x batch 2 over TCP
 *                (--mca btl self,tcp: the path ranks on different machines use) log the same
 *                losses at every step and end with the same weights as 1 rank x batch 8;
 *                with 2 accumulated micro-batches, 2 ranks x 2 equal 1 rank x 4; with bf16
 *                on the wire (2 x 4, and 3 x 2 against the fp32 3 x 2), within the
 *                bf16 tolerances of check_wire_run;
 *   bf16 wire    the reducer itself (test_wire, under mpirun, 2 and 3 ranks, plain and
 *                ZeRO-1, with and without the progress thread) averages known arenas to
 *                the reference bf16(Σ_q bf16(g_q) in fp32) / N bit for bit;
 *   resume       a checkpoint of the 1-rank run resumed on 2 ranks (batch 4), and one of the
 *                2-rank run resumed on 1 rank (batch 8), end with the reference's weights;
 *   a changed global batch on resume is refused, naming train.batch_size;
 *   consistency  ranks started with different configs stop at start, the message naming the
 *                resolved config and the rank that differs;
 *   bad record   a corrupt image read by rank 1 only: policy "stop" ends the job within 60 s
 *                with rank 1's message naming the manifest line (rank 0 was waiting in a
 *                collective: MPI_Abort), "skip" completes with rank 1's warning;
 *   failure      a rank killed with SIGKILL mid-run ends the whole job (non-zero exit, every
 *                rank gone) within 60 s with Open MPI's message naming the signal;
 *   SIGTERM      to rank 1 only: every rank stops after the same step, rank 0 writes its
 *                checkpoint, the job exits 143.
 *   ZeRO-1       (dist.zero_stage 1) the shard layout in-process: every trained element of
 *                the synthetic model's arena belongs to exactly one rank's moments, frozen
 *                ones to none, each rank holds ~1/N of them, and moments read shard by shard
 *                from optimizer.safetensors and gathered back are bit-identical; then under
 *                mpirun: 2 x 4 and 4 x 2 (over TCP) equal 1 x 8, and 2 x 4 equals the
 *                plain 2 x 4 (losses, grad norms, weights, the gathered
 *                optimizer.safetensors), 3 x 2 (blocks of unequal length, no progress
 *                thread) equals the plain 3 x 2; with accumulation, with bf16 on the
 *                wire, with a frozen tower and lr multipliers (against 1 x 8 with the same
 *                settings), in bf16 compute (against the plain 2 x 4 bf16 run: the shadow
 *                refresh); a ZeRO-1 checkpoint resumed on 1 process and a 1-process
 *                checkpoint resumed on 2 ranks with ZeRO-1 end with the uninterrupted run's
 *                weights; one process accepts dist.zero_stage 1 as a no-op, saying so; a NaN
 *                loss under on_nan stop ends the job with the message;
 *                SIGTERM to rank 1 of a ZeRO-1 job: rank 0 saves the gathered moments, exit
 *                143; a SIGTERM landing on rank 1 during the stop check's own all-reduce
 *                (a test hook places it there) still stops both ranks after the same step. Same tolerances as the plain runs: only the summation order differs (the
 *                reduce-scatter's sums instead of the all-reduce's, the grad norm summed per
 *                shard then over the ranks).
 *
 * Tolerances: the split runs compute the same sums in another order (the gradient of each
 * parameter is a sum over ranks of partial sums in MPI's order instead of one sum over the
 * batch, the MLM mean is Σ_r (mean_r · n_r / n), ZeRO-1 reduce-scatters and sums the grad
 * norm per shard). They are compared by the one rule of tests/test_compare.h
 * (docs/determinism.md "Comparing two training runs"): the final weights by how far they
 * moved from the start (overall ||a - b|| / ||b - init|| <= TC_RTOL_FP32 = 1e-3, per tensor
 * <= 0.1 with a tensor that barely moved measured against an average element's movement), the
 * logged losses and gradient norms step by step relatively within the same 1e-3 (the grad
 * norms catch a wrong 1/W or a wrong share of the MLM mean, which AdamW's scale invariance
 * would hide from the weights). An absolute bound on single weights cannot hold on every CPU:
 * an attention key bias has an exact gradient of 0, its trajectory is rounding noise that
 * AdamW's m / (sqrt(v) + eps) scales up, and another CPU's summation order moves it by
 * another amount (issue 21: 6e-5 on an AMD AVX2 machine). The control: a run with lr x 1.01
 * must fail the rule (overall ~1e-2). */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dist/dist.h"
#include "model/config.h"
#include "model/params.h"
#include "safetensors.h"
#include "rng.h"
#include "test_compare.h"
#include "test_train_setup.h"
#include "test_util.h"
#include "train/optim.h"
#include "train/state.h"

static const char *exe;
/* init_weights: the model.safetensors every run starts from (model.init_seed 0) */
static char base_cfg[1100], data_dir[1024], init_weights[1200];

static double now_s(void) { return tu_clock_seconds(CLOCK_MONOTONIC); }

/* mpirun prefix: oversubscribed (CI has 2 cores), no binding (ranks share the cores) */
#define MPIRUN "mpirun --oversubscribe --bind-to none -x OMP_NUM_THREADS=1"

static int train(const char *out, int ranks, const char *mca, const char *extra) {
    if (ranks == 0)
        return tts_sh(out, "'%s' --config '%s' --quiet-config --set output.dir='%s' %s", exe,
                  base_cfg, out, extra);
    return tts_sh(out, MPIRUN " -np %d %s '%s' --config '%s' --quiet-config --set output.dir='%s' %s",
              ranks, mca, exe, base_cfg, out, extra);
}

static char *read_text(const char *path) {
    char *t = (char *)tu_read_file(path, NULL);
    return t ? t : strdup("");
}

/* 1 when b holds exactly a's tensors (names, dtypes, shapes) and b's fp32 values are all
 * finite: the structure check of a checkpoint written at another step than a's. */
static int same_tensor_set(const char *a_path, const char *b_path) {
    safetensors_file a, b;
    if (safetensors_open(&a, a_path) != BT_OK) return 0;
    if (safetensors_open(&b, b_path) != BT_OK) {
        safetensors_close(&a);
        return 0;
    }
    int ok = a.n_tensors == b.n_tensors && a.n_tensors > 0;
    for (size_t i = 0; i < a.n_tensors && ok; i++) {
        const safetensors_tensor *ta = &a.tensors[i];
        const safetensors_tensor *tb = safetensors_find(&b, ta->name);
        ok = tb && tb->dtype == ta->dtype && tb->ndim == ta->ndim && tb->numel == ta->numel &&
             memcmp(tb->shape, ta->shape, (size_t)ta->ndim * sizeof ta->shape[0]) == 0;
        if (ok && tb->dtype == BT_DTYPE_F32) {
            float *y = malloc(tb->numel * sizeof *y);
            ok = y && safetensors_read_f32(&b, tb, y, tb->numel) == BT_OK;
            for (size_t k = 0; ok && k < tb->numel; k++) ok = isfinite(y[k]);
            free(y);
        }
    }
    safetensors_close(&a);
    safetensors_close(&b);
    return ok;
}

/* ref's and got's logged losses and grad norms per step, and final weights, agree within
 * rtol (tests/test_compare.h: TC_RTOL_FP32 or TC_RTOL_BF16_WIRE). */
static void check_close_run(const char *what, const char *ref, const char *got, size_t n_steps,
                            double rtol) {
    static const char *const keys[2] = {"loss", "grad_norm"};
    for (int k = 0; k < 2; k++) {
        double lr[16], lg[16];
        const size_t nr = tts_logged(ref, keys[k], lr, 16), ng = tts_logged(got, keys[k], lg, 16);
        const int ok = nr == n_steps && ng == n_steps;
        const double worst = ok ? tc_worst_relative(lg, lr, n_steps) : INFINITY;
        tu_check(ok && worst <= rtol, "%s: the %zu steps' %s equal the reference run's "
                 "(worst relative difference %.2e <= %.2g)", what, ng, keys[k], worst, rtol);
    }
    char a[1200], b[1200];
    snprintf(a, sizeof a, "%s/model.safetensors", ref);
    snprintf(b, sizeof b, "%s/model.safetensors", got);
    tc_check_weights(what, b, a, init_weights, rtol);
}

static void check_same_run(const char *what, const char *ref, const char *got, size_t n_steps) {
    check_close_run(what, ref, got, n_steps, TC_RTOL_FP32);
}

/* A resumed run (exit code rc, output dir out): it exits 0 (else its stderr is shown) and
 * ends with the weights of the uninterrupted 1-rank run ref (the rule of check_close_run). */
static void check_resumed(const char *what, int rc, const char *ref, const char *out) {
    if (!tu_check(rc == 0, "%s exits 0 (got %d)", what, rc)) {
        tts_show_err(out);
        return;
    }
    char a[1200], b[1200];
    snprintf(a, sizeof a, "%s/model.safetensors", ref);
    snprintf(b, sizeof b, "%s/model.safetensors", out);
    tc_check_weights(what, b, a, init_weights, TC_RTOL_FP32);
}

/* A bf16-wire run against an fp32 run of the same job (ref). What the scheme guarantees, element
 * by element (test_wire checks it bit for bit): the averaged gradient is
 * ĝ = bf16(Σ_q bf16(g_q)) / N with the sum in one fp32 accumulator (ZeRO-1: without the
 * outer bf16), so with u = 2^-8 (bf16's unit roundoff: 8 significant bits, round to nearest)
 * and S = mean_q |g_q|, |ĝ - ḡ| <= u·S + u·|ḡ| (ZeRO-1: u·S), up to O(u^2) and fp32 terms,
 * for any number of ranks N (the earlier per-addition rounding added u·|partial sum| for
 * each of the N - 1 additions: 3 ranks gave 15% of the elements another value). The run is
 * compared by the rule of check_close_run with the bound of that rounding,
 * TC_RTOL_BF16_WIRE = 2 (AdamW's gain) x 2u = 1.6e-2, for the weights' movement and for the
 * logged losses and grad norms (observed <= 2.9e-3 overall, 8e-5 on the series). */
static void check_wire_run(const char *what, const char *ref, const char *got) {
    check_close_run(what, ref, got, 4, TC_RTOL_BF16_WIRE);
}

/* Runs job a (a_ranks: 0 = one process without mpirun) and job b, each with its --set
 * options (and mpirun options `mca` for both), into tu_tmp_path(a_name / b_name) (a's path
 * also to a_out, cap bytes); both must exit 0, then b's losses, grad norms and weights must
 * equal a's (check_same_run). */
static void run_pair(const char *what, const char *mca, const char *a_name, int a_ranks,
                     const char *a_set, const char *b_name, int b_ranks, const char *b_set,
                     char *a_out, size_t cap) {
    char a[1200], b[1200];
    snprintf(a, sizeof a, "%s", tu_tmp_path(a_name));
    snprintf(b, sizeof b, "%s", tu_tmp_path(b_name));
    if (a_out) snprintf(a_out, cap, "%s", a);
    const int rc = train(a, a_ranks, mca, a_set), rc2 = train(b, b_ranks, mca, b_set);
    if (tu_check(rc == 0 && rc2 == 0, "%s: both runs exit 0 (got %d, %d)", what, rc, rc2))
        check_same_run(what, a, b, 4);
    else
        tts_show_err(rc ? a : b);
}

static void setup(void) {
    const char *tmp = tu_tmpdir();
    char model_dir[1024];
    snprintf(data_dir, sizeof data_dir, "%s/synth", tmp);
    tts_synth_data(data_dir, 64, 0, 0);
    tts_synthetic_model_dir(model_dir, sizeof model_dir);
    snprintf(base_cfg, sizeof base_cfg, "%s/run.json", tmp);
    char text[4096];
    snprintf(text, sizeof text,
             "{\n"
             "  \"model\": {\"config\": \"%s\", \"init_seed\": 0, \"heads\": [\"itc\", \"mlm\"]},\n"
             "  \"data\": {\"train\": \"%s/train.jsonl\", \"max_length\": 32, \"seed\": 1,\n"
             "           \"shuffle\": true, \"drop_last\": true, \"num_workers\": 1},\n"
             "  \"train\": {\"batch_size\": 8, \"max_steps\": 4, \"lr\": 1e-3, \"warmup_steps\": 1,\n"
             "            \"weight_decay\": 0.01, \"max_grad_norm\": 1.0,\n"
             "            \"loss_weights\": {\"itc\": 1, \"itm\": 0, \"mlm\": 1},\n"
             "            \"seed\": 5, \"dropout\": true, \"threads\": %d},\n"
             "  \"logging\": {\"steps\": 1, \"tensorboard\": false, \"report\": false},\n"
             "  \"eval\": {\"strategy\": \"no\", \"at_end\": false},\n"
             "  \"save\": {\"strategy\": \"steps\", \"steps\": 2},\n"
             "  \"dist\": {\"bucket_mb\": 0.25}\n"
             "}\n",
             model_dir, data_dir, tu_test_threads(1));
    tu_setup_text(base_cfg, text);
    char init_dir[1100];
    snprintf(init_dir, sizeof init_dir, "%s/init", tmp);
    tc_save_init(init_dir, model_dir, BT_HEADS_ITC | BT_HEADS_MLM, 0);
    snprintf(init_weights, sizeof init_weights, "%s/model.safetensors", init_dir);
}

/* pids of the processes whose parent is ppid (the ranks mpirun started; bt-train re-execs
 * itself through /proc/self/exe, so their name is not a reliable mark) */
static size_t children(pid_t ppid, pid_t *out, size_t cap) {
    DIR *d = opendir("/proc");
    size_t n = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        const pid_t pid = (pid_t)atoi(e->d_name);
        if (pid <= 0) continue;
        char p[64], buf[512];
        snprintf(p, sizeof p, "/proc/%d/stat", (int)pid);
        FILE *f = fopen(p, "r");
        if (!f) continue;
        const size_t got = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[got] = '\0';
        const char *close_paren = strrchr(buf, ')');
        int parent = 0;
        char state;
        if (close_paren && sscanf(close_paren + 1, " %c %d", &state, &parent) == 2 &&
            parent == (int)ppid && n < cap)
            out[n++] = pid;
    }
    if (d) closedir(d);
    return n;
}

/* 1 while pid exists and is not a zombie */
static int alive(pid_t pid) {
    char p[64], buf[512];
    snprintf(p, sizeof p, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(p, "r");
    if (!f) return 0;
    const size_t got = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[got] = '\0';
    const char *close_paren = strrchr(buf, ')');
    return close_paren && close_paren[1] == ' ' && close_paren[2] != 'Z' && close_paren[2] != 'X';
}

/* A corrupt image in record 1 (line 2), which only rank 1 reads (no shuffle: rank r takes
 * records r, r + 2, ...): "stop" ends the whole job with rank 1's message while rank 0 waits
 * in a collective; "skip" replaces it with a warning from rank 1, as alone. */
static void test_bad_record(void) {
    char man[1200], img[1200], src[1200], line[4096];
    snprintf(man, sizeof man, "%s/bad.jsonl", data_dir); /* beside the images it names */
    snprintf(img, sizeof img, "%s/corrupt.jpg", data_dir);
    snprintf(src, sizeof src, "%s/train.jsonl", data_dir);
    tu_setup_text(img, "\xff\xd8\xff\xe0 this is not a JPEG");
    FILE *in = fopen(src, "r"), *o = fopen(man, "w");
    int k = 0;
    while (in && o && fgets(line, sizeof line, in)) {
        if (++k == 2) fprintf(o, "{\"image\": \"corrupt.jpg\", \"caption\": \"a broken picture\"}\n");
        else fputs(line, o);
    }
    if (in) fclose(in);
    if (o) fclose(o);
    static const char *const policy[2] = {"stop", "skip"};
    for (int p = 0; p < 2; p++) {
        char name[64], set[1600], err[1300];
        snprintf(name, sizeof name, "badrec-%s", policy[p]);
        const char *out = tu_tmp_path(name);
        snprintf(set, sizeof set, "--set data.train='%s' --set data.on_bad_record=%s --set "
                 "data.shuffle=false --set save.strategy=no --set train.batch_size=4 --set "
                 "train.max_steps=2", man, policy[p]);
        const double t0 = now_s();
        const int rc = train(out, 2, "", set);
        const double took = now_s() - t0;
        snprintf(err, sizeof err, "%s.err", out);
        char *e = read_text(err);
        if (p == 0)
            tu_check(rc != 0 && took < 60 && strstr(e, "rank 1 of 2") && strstr(e, "bad.jsonl:2") &&
                     strstr(e, "corrupt.jpg"), "bad record on rank 1, policy stop: the job ends "
                     "(exit %d, %.1f s, bound 60 s) with rank 1's message naming the line",
                     rc, took);
        else
            tu_check(rc == 0 && strstr(e, "rank 1: warning") && strstr(e, "bad.jsonl:2"),
                     "bad record on rank 1, policy skip: the run completes (exit %d) with rank "
                     "1's warning naming the line", rc);
        if (!(p == 0 ? strstr(e, "rank 1 of 2") : strstr(e, "rank 1: warning")))
            fprintf(stderr, "%s\n", e);
        free(e);
    }
}

/* 1 when pid's environment says it is Open MPI rank `rank` */
static int is_rank(pid_t pid, int rank) {
    char p[64], want[64];
    snprintf(p, sizeof p, "/proc/%d/environ", (int)pid);
    snprintf(want, sizeof want, "OMPI_COMM_WORLD_RANK=%d", rank);
    size_t n = 0;
    char *env = (char *)tu_read_file(p, &n);
    int found = 0;
    for (size_t i = 0; env && i < n; i += strlen(env + i) + 1)
        if (!strcmp(env + i, want)) found = 1;
    free(env);
    return found;
}

/* A 2-rank job gets signal sig on rank 1 mid-run. SIGKILL: mpirun ends the job (non-zero,
 * every rank gone, the signal named) within 60 s. SIGTERM: the ranks agree to stop after
 * the same step, rank 0 writes that step's checkpoint, the job exits 143; with zero (ZeRO-1)
 * the ranks first gather the moments, and the checkpoint's optimizer.safetensors has the
 * tensors of ref_opt (a plain run's). */
/* Waits up to `limit` seconds from t0 for the process; if it has not ended, kills it
 * (SIGKILL) and reaps it. Returns 1 when it ended by itself (*status set), 0 otherwise;
 * *took: seconds from t0. */
static int wait_bounded(pid_t pid, double t0, double limit, int *status, double *took) {
    int ended = 0;
    while (now_s() - t0 < limit && !ended) {
        ended = waitpid(pid, status, WNOHANG) == pid;
        if (!ended) usleep(20000);
    }
    *took = now_s() - t0;
    if (!ended) {
        kill(pid, SIGKILL);
        waitpid(pid, status, 0);
    }
    return ended;
}

/* Starts `ENV mpirun -np 2 bt-train ... EXTRA` in the background (stdout / stderr to
 * out.log / out.err) and waits for its first logged step; *ranks = the pids of rank 0 and
 * rank 1. Returns mpirun's pid, or -1 (then the job is gone and the check failed). */
static pid_t start_training(const char *what, const char *out, const char *env,
                            const char *extra, pid_t ranks[2]) {
    ranks[0] = ranks[1] = 0;
    char line[6000], metrics[1200];
    snprintf(metrics, sizeof metrics, "%s/metrics.jsonl", out);
    snprintf(line, sizeof line, "%s exec " MPIRUN " -np 2 '%s' --config '%s' --quiet-config "
             "--set output.dir='%s' --set train.batch_size=4 %s > '%s.log' 2> '%s.err'", env,
             exe, base_cfg, out, extra, out, out);
    const pid_t mpirun = fork();
    if (mpirun == 0) {
        execl("/bin/sh", "sh", "-c", line, (char *)NULL);
        _exit(127);
    }
    struct stat st;
    int started = 0;
    for (double t0 = now_s(); now_s() - t0 < 120 && !started;) {
        started = stat(metrics, &st) == 0 && st.st_size > 0;
        if (waitpid(mpirun, NULL, WNOHANG) == mpirun) break;
        usleep(20000);
    }
    pid_t found[8];
    const size_t n = started ? children(mpirun, found, 8) : 0;
    if (n == 2) {
        const int swap = is_rank(found[0], 1);
        ranks[0] = found[swap];
        ranks[1] = found[!swap];
    }
    if (!tu_check(started && n == 2 && is_rank(ranks[1], 1), "%s: the 2-rank job is training "
                  "(%zu ranks seen)", what, n)) {
        kill(mpirun, SIGKILL);
        waitpid(mpirun, NULL, 0);
        tts_show_err(out);
        return -1;
    }
    return mpirun;
}

static void test_signal_rank(int sig, int zero, const char *ref_opt) {
    const char *out = tu_tmp_path(sig == SIGKILL ? "killed" : zero ? "sigterm-zero" : "sigterm");
    const char *what = sig == SIGKILL ? "killed rank"
                       : zero         ? "SIGTERM to rank 1, ZeRO-1"
                                      : "SIGTERM to rank 1";
    char extra[200], err[1200];
    snprintf(err, sizeof err, "%s.err", out);
    snprintf(extra, sizeof extra, "--set train.max_steps=100000 --set save.strategy=no --set "
             "dist.zero_stage=%d", zero);
    pid_t ranks[2];
    const pid_t mpirun = start_training(what, out, "", extra, ranks);
    if (mpirun < 0) return;
    const double t_kill = now_s();
    kill(ranks[1], sig);
    int status = 0;
    double took;
    const int ended = wait_bounded(mpirun, t_kill, 60, &status, &took);
    if (sig == SIGTERM) {
        char p[1300];
        snprintf(p, sizeof p, "%s/metrics.jsonl", out);
        char *m = read_text(p);
        size_t n_train = 0;
        for (const char *q = m; (q = strstr(q, "\"type\":\"train\"")); q++) n_train++;
        free(m);
        snprintf(p, sizeof p, "%s/checkpoint-%zu/trainer_state.json", out, n_train);
        struct stat cst;
        /* each condition on its own line, so that a failure says which one */
        const int exited_143 = ended && WIFEXITED(status) && WEXITSTATUS(status) == 143;
        tu_check(exited_143, "%s: the job exits 143 within 60 s (%s %d after %.1f s)", what,
                 !ended ? "still running" : WIFEXITED(status) ? "exit status" : "signal",
                 !ended ? 0 : WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), took);
        const int saved = n_train > 0 && stat(p, &cst) == 0;
        tu_check(saved, "%s: rank 0 saved the checkpoint of the last logged step %zu (%s)", what,
                 n_train, p);
        if (!exited_143 || !saved) {
            char cmd[1400];
            snprintf(cmd, sizeof cmd, "ls '%s' >&2; tail -n 3 '%s/metrics.jsonl' >&2", out, out);
            if (system(cmd) != 0) fprintf(stderr, "(listing %s failed)\n", out);
            tts_show_err(out);
        }
        if (zero) {
            snprintf(p, sizeof p, "%s/checkpoint-%zu/optimizer.safetensors", out, n_train);
            /* the signal lands at step 2 or 3: compare the structure, not the step */
            tu_check(same_tensor_set(ref_opt, p), "%s: its optimizer.safetensors (gathered) has "
                     "every tensor of a plain run's (names, dtypes, shapes; finite)", what);
        }
        return;
    }
    tu_check(ended && WIFEXITED(status) && WEXITSTATUS(status) != 0,
             "killed rank: mpirun ends with a non-zero status %.1f s after SIGKILL of rank pid "
             "%d (bound 60 s)", took, (int)ranks[1]);
    int gone = 0;
    for (double t0 = now_s(); now_s() - t0 < 10 && !gone; usleep(20000)) gone = !alive(ranks[0]);
    tu_check(gone, "killed rank: the surviving rank (pid %d) is gone too", (int)ranks[0]);
    char *e = read_text(err);
    const int named = strstr(e, "signal 9") || strstr(e, "Killed") || strstr(e, "killed");
    tu_check(named, "killed rank: the message names the signal");
    if (!named) fprintf(stderr, "%s\n", e);
    free(e);
}

/* A SIGTERM that lands on rank 1 while its stop flag is in the all-reduce of the stop check
 * (--test-hook sigterm_in_stop_check=2: rank 1 raises it right after that all-reduce at
 * step 2):
 * every rank must still agree, stopping together after step 3 with rank 0's checkpoint-3
 * and exit 143. When rank 1 alone acted on it, it left the loop while rank 0 waited in the
 * next step's gradient all-reduce: a hang, which "SIGTERM to rank 1" above hit now and then. */
static void test_signal_in_stop_check(void) {
    const char *out = tu_tmp_path("sigterm-in-check");
    char line[6000];
    snprintf(line, sizeof line, "exec " MPIRUN " -np 2 '%s' --test-hook sigterm_in_stop_check=2 "
             "--config '%s' --quiet-config --set output.dir='%s' --set train.batch_size=4 --set "
             "train.max_steps=100000 --set save.strategy=no > '%s.log' 2> '%s.err'", exe,
             base_cfg, out, out, out);
    const pid_t mpirun = fork();
    if (mpirun == 0) {
        execl("/bin/sh", "sh", "-c", line, (char *)NULL);
        _exit(127);
    }
    int status = 0;
    double took;
    const int ended = wait_bounded(mpirun, now_s(), 120, &status, &took);
    char p[1300];
    snprintf(p, sizeof p, "%s/checkpoint-3/trainer_state.json", out);
    struct stat st;
    tu_check(ended && WIFEXITED(status) && WEXITSTATUS(status) == 143 && stat(p, &st) == 0,
             "SIGTERM on rank 1 during the stop check's all-reduce: both ranks stop after step "
             "3, exit 143 (ended %d, status %d, %.1f s, bound 120 s) with checkpoint-3", ended,
             ended && WIFEXITED(status) ? WEXITSTATUS(status) : -1, took);
    if (!ended || !WIFEXITED(status) || WEXITSTATUS(status) != 143) tts_show_err(out);
}

/* The synthetic model's parameter table with the ITC and MLM heads; 0 (a failed check
 * naming `what`) when its config does not load. */
static int synthetic_table(bt_param_table *t, const char *what) {
    char dir[1024], path[1100];
    tts_synthetic_model_dir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/config.json", dir);
    bt_model_config mc;
    if (!tu_check(bt_model_config_load(&mc, path) == BT_OK, "%s: %s loads", what, path))
        return 0;
    bt_param_table_init(t, &mc, BT_HEADS_ITC | BT_HEADS_MLM);
    return 1;
}

/* ZeRO-1 layout on the synthetic model's table (no MPI): for N ranks and a bucket size,
 * every trained element is in exactly one rank's shard (frozen ones in none), Σ shard
 * moments = the full optimizer's, the largest shard is ~1/N (bound below), and moments
 * saved to optimizer.safetensors, read back shard by shard (the resume path) and gathered
 * into a full optimizer (the checkpoint path) come back bit-identical. */
static void test_zero_layout(void) {
    bt_param_table t;
    if (!synthetic_table(&t, "ZeRO-1 layout")) return;
    static const int ranks[] = {1, 2, 3, 4, 7};
    static const size_t bucket_bytes[] = {262144, 0, 4000};
    for (int frozen = 0; frozen < 2; frozen++) {
        bt_optim_groups g = bt_optim_groups_default();
        g.freeze_vision = frozen;
        g.lr_mult_cross = 5.0;
        bt_adamw full, back;
        bt_adamw_init_groups(&full, &t, &g);
        bt_adamw_init_groups(&back, &t, &g);
        for (size_t i = 0; i < full.mnumel; i++) {
            full.m[i] = (float)i;
            full.v[i] = (float)i + 0.5f;
        }
        full.t = 7;
        char opt_path[1100];
        snprintf(opt_path, sizeof opt_path, "%s", tu_tmp_path(frozen ? "opt-frozen.safetensors"
                                                                      : "opt.safetensors"));
        const int saved = tu_check(bt_optim_state_save(opt_path, &t, &full) == BT_OK,
                                   "ZeRO-1 layout: %s written", opt_path);
        unsigned char *cover = malloc(t.numel);
        for (size_t ri = 0; saved && ri < sizeof ranks / sizeof *ranks; ri++)
            for (size_t bi = 0; bi < sizeof bucket_bytes / sizeof *bucket_bytes; bi++) {
                const int W = ranks[ri];
                const size_t bucket = bt_dist_bucket_floats(t.numel, bucket_bytes[bi]);
                const size_t n_buckets = (t.numel + bucket - 1) / bucket;
                memset(cover, 0, t.numel);
                memset(back.m, 0, back.mnumel * sizeof *back.m);
                memset(back.v, 0, back.mnumel * sizeof *back.v);
                size_t sum = 0, largest = 0;
                int ok = 1;
                for (int q = 0; q < W; q++) {
                    size_t *lohi = malloc(2 * n_buckets * sizeof *lohi);
                    const size_t n = bt_dist_shard_ranges(t.numel, bucket, W, q, lohi);
                    bt_adamw sh;
                    bt_adamw_init_shard(&sh, &t, &g, lohi, n);
                    for (size_t s = 0; s < sh.n_segs; s++)
                        for (size_t k = 0; k < sh.segs[s].numel; k++)
                            cover[sh.segs[s].offset + k]++;
                    /* the resume path: the shard's blocks read from the full file */
                    ok &= bt_optim_state_load(opt_path, &t, &sh) == BT_OK && sh.t == 7;
                    ok &= bt_adamw_shard_to_full(&sh, &back) == BT_OK;
                    sum += sh.mnumel;
                    if (sh.mnumel > largest) largest = sh.mnumel;
                    bt_adamw_free(&sh);
                    free(lohi);
                }
                /* each trained element once, nothing else (frozen and padding: 0 times) */
                for (size_t s = 0; s < full.n_segs; s++)
                    for (size_t k = 0; k < full.segs[s].numel; k++)
                        ok &= cover[full.segs[s].offset + k] == (full.segs[s].frozen ? 0 : 1);
                size_t covered = 0;
                for (size_t i = 0; i < t.numel; i++) covered += cover[i];
                ok &= covered == full.mnumel && sum == full.mnumel &&
                      !memcmp(back.m, full.m, full.mnumel * sizeof *full.m) &&
                      !memcmp(back.v, full.v, full.mnumel * sizeof *full.v) && back.t == 7;
                /* ~1/N: a rank owns ceil(c / N) or less of each bucket, so a shard exceeds
                 * the mean (trained / N) by at most one element per bucket (the rounding)
                 * plus one block per bucket that mixes frozen and trained elements (there a
                 * block can be all trained and another all frozen): bound = mean + n_buckets
                 * + mixed x block. With one bucket and a frozen tower that bound is loose,
                 * and the imbalance real (docs/distributed.md) */
                size_t mixed = 0;
                for (size_t o = 0; o < t.numel; o += bucket) {
                    int fr = 0, tr = 0;
                    for (size_t s = 0; s < full.n_segs; s++) {
                        const bt_optim_segment *sg = &full.segs[s];
                        if (sg->offset < o + bucket && sg->offset + sg->numel > o) {
                            fr |= sg->frozen;
                            tr |= !sg->frozen;
                        }
                    }
                    mixed += fr && tr;
                }
                const double mean = (double)full.mnumel / W;
                const double blk = (double)((bucket + (size_t)W - 1) / (size_t)W);
                const double bound = mean + (double)n_buckets + (double)mixed * blk;
                tu_check(ok && (double)largest <= bound, "ZeRO-1 layout, %d ranks, %zu-float "
                         "buckets%s: every trained element in one shard, moments read "
                         "per shard and gathered bit-identical; largest shard %zu moments = "
                         "%.4f of %zu (bound %.0f, %zu mixed buckets)", W, bucket,
                         frozen ? ", vision frozen" : "", largest,
                         (double)largest / (double)full.mnumel, full.mnumel, bound, mixed);
            }
        free(cover);
        bt_adamw_free(&full);
        bt_adamw_free(&back);
    }
    bt_param_table_free(&t);
}

/* The gradient zeroing fused into AdamW (optim.h bt_adamw_step_zero_grad), on the synthetic
 * model's table, full and as 3 ZeRO-1 shards, vision frozen or not: the step gives the bytes
 * of bt_adamw_step (weights, moments, bf16 shadow); it sets +0 exactly at the elements its
 * segments update (the shard's own trained pieces) and leaves every other gradient as it was
 * (frozen, padding, the other ranks' pieces); bt_adamw_zero_untouched then zeroes the rest,
 * so the whole arena is +0 as bt_zero_grad leaves it. */
static void test_zero_grad_fused(void) {
    bt_param_table t;
    if (!synthetic_table(&t, "fused zero_grad")) return;
    const size_t n = t.numel, bucket = bt_dist_bucket_floats(n, 4000), W = 3;
    float *p1 = malloc(n * sizeof *p1), *p2 = malloc(n * sizeof *p2), *g0 = malloc(n * sizeof *g0);
    float *g = malloc(n * sizeof *g);
    bt_bf16 *s1 = calloc(n, sizeof *s1), *s2 = calloc(n, sizeof *s2);
    size_t *lohi = malloc(2 * (n / bucket + 1) * sizeof *lohi);
    unsigned char *own = malloc(n);
    tu_rng rng;
    tu_rng_seed(&rng, 25);
    tu_fill_uniform_f32(&rng, p1, n, -0.1f, 0.1f);
    tu_fill_uniform_f32(&rng, g0, n, -1.0f, 1.0f);
    const bt_adamw_hparams h = {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
                                .weight_decay = 0.01};
    for (int frozen = 0; frozen < 2; frozen++)
        for (size_t q = 0; q <= W; q++) { /* q == W: the full optimizer */
            bt_optim_groups gr = bt_optim_groups_default();
            gr.freeze_vision = frozen;
            bt_adamw a, b;
            if (q == W) {
                bt_adamw_init_groups(&a, &t, &gr);
                bt_adamw_init_groups(&b, &t, &gr);
            } else {
                const size_t nr = bt_dist_shard_ranges(n, bucket, (int)W, (int)q, lohi);
                bt_adamw_init_shard(&a, &t, &gr, lohi, nr);
                bt_adamw_init_shard(&b, &t, &gr, lohi, nr);
            }
            memset(own, 0, n);
            for (size_t s = 0; s < a.n_segs; s++)
                if (!a.segs[s].frozen) memset(own + a.segs[s].offset, 1, a.segs[s].numel);
            memcpy(p2, p1, n * sizeof *p1);
            memcpy(g, g0, n * sizeof *g);
            int same = 1;
            for (int step = 0; step < 2; step++) { /* twice: moments nonzero the second time */
                bt_adamw_step(&b, p2, g0, 0.5f, &h, s2);
                bt_adamw_step_zero_grad(&a, p1, g, 0.5f, &h, s1);
                same &= !memcmp(p1, p2, n * sizeof *p1) && !memcmp(s1, s2, n * sizeof *s1) &&
                        !memcmp(a.m, b.m, a.mnumel * sizeof *a.m) &&
                        !memcmp(a.v, b.v, a.mnumel * sizeof *a.v);
                if (step == 0) memcpy(g, g0, n * sizeof *g); /* the next step's gradients */
            }
            size_t wrong = 0, zeroed = 0;
            const float zero = 0.0f;
            for (size_t i = 0; i < n; i++) {
                wrong += memcmp(&g[i], own[i] ? &zero : &g0[i], sizeof zero) != 0;
                zeroed += own[i];
            }
            bt_adamw_zero_untouched(&a, g);
            size_t left = 0;
            for (size_t i = 0; i < n; i++) left += memcmp(&g[i], &zero, sizeof zero) != 0;
            tu_check(same && wrong == 0 && left == 0 && zeroed > 0 && zeroed < n,
                     "fused zero_grad, %s%s: weights, shadow and moments = bt_adamw_step's "
                     "(bitwise) %s; %zu of %zu gradients wrong (+0 at the %zu updated, "
                     "untouched elsewhere); %zu not +0 after bt_adamw_zero_untouched",
                     q == W ? "full optimizer" : "ZeRO-1 shard", frozen ? ", vision frozen" : "",
                     same ? "yes" : "NO", wrong, n, zeroed, left);
            bt_adamw_free(&a);
            bt_adamw_free(&b);
            memcpy(p1, p2, n * sizeof *p1);
        }
    free(p1), free(p2), free(g0), free(g), free(s1), free(s2), free(lohi), free(own);
    bt_param_table_free(&t);
}

/* --- the bf16 wire, bit for bit ---------------------------------------------------------
 * Run as every rank of `mpirun -np W test_dist --wire-rank` (test_wire starts it). Rank q's
 * arena holds known values g_q[i] (wire_value: any rank can compute any rank's), averaged by
 * bt_dist_reducer with the bf16 wire, plain and sharded (ZeRO-1), in 13 buckets (more than
 * BT_DIST_MAX_INFLIGHT; the last one shorter, none a multiple of 3) started one by one in
 * reverse order for half of them (as the backward's events do), the rest left to finish,
 * twice in a row with other values (the reducer's state must reset). The reference is
 * computed here, independently of dist.c and dtype.h: with b_q = bf16(g_q[i]) (round to
 * nearest even: ref_bf16), s = b_0 + b_1 + ... + b_{W-1} in fp32 in that order,
 *   plain:   every element = f32(bf16(s)) * (1/W)
 *   sharded: this rank's blocks = s * (1/W)
 * and the result must equal it bit for bit. The same check counts the elements where the
 * earlier scheme (a bf16 rounding after every addition, MPI's user-defined sum) differs,
 * so it is seen to fail that scheme: 3 ranks plain, and sharded on any W. */
#define WIRE_N 50001
#define WIRE_BUCKET_BYTES 16000 /* 4000 floats: 13 buckets */

static uint16_t ref_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest, ties to even (no NaN here) */
    return (uint16_t)(u >> 16);
}

static float ref_f32(uint16_t h) {
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* rank q's gradient element i in round `round`: random sign, mantissa and exponent
 * (2^-8 .. 2^8: ranks' values that nearly cancel and that differ in size), every 97th a
 * bf16 tie (low 16 bits 0x8000), every 101st zero */
static float wire_value(int q, size_t i, int round) {
    uint64_t z = bt_mix64(((uint64_t)round << 48) ^ ((uint64_t)q << 40) ^ (uint64_t)i);
    uint32_t u = (uint32_t)(z & 0x807fffffu) | (uint32_t)(119 + (z >> 32) % 17) << 23;
    if (i % 97 == 0) u = (u & 0xffff0000u) | 0x8000u;
    float f;
    memcpy(&f, &u, 4);
    return i % 101 == 0 ? 0.0f : f;
}

static int wire_rank(void) {
    bt_dist d;
    if (bt_dist_init(&d, NULL, NULL) != BT_OK || d.size < 2) {
        fprintf(stderr, "--wire-rank: run under mpirun with 2 or more ranks\n");
        return 1;
    }
    const int W = d.size;
    float *arena = malloc(WIRE_N * sizeof *arena), *want = malloc(WIRE_N * sizeof *want);
    unsigned char *mine = malloc(WIRE_N);
    const size_t bucket = bt_dist_bucket_floats(WIRE_N, WIRE_BUCKET_BYTES);
    const size_t n_buckets = (WIRE_N + bucket - 1) / bucket;
    size_t *lohi = malloc(2 * n_buckets * sizeof *lohi);
    const size_t n_ranges = bt_dist_shard_ranges(WIRE_N, bucket, W, d.rank, lohi);
    memset(mine, 0, WIRE_N);
    for (size_t k = 0; k < n_ranges; k++) memset(mine + lohi[2 * k], 1, lohi[2 * k + 1] - lohi[2 * k]);
    const float inv = 1.0f / (float)W;
    for (int shard = 0; shard < 2; shard++) {
        bt_dist_reducer r;
        (shard ? bt_dist_reducer_init_sharded : bt_dist_reducer_init)(&r, &d, arena, WIRE_N,
                                                                     WIRE_BUCKET_BYTES, 1);
        for (int round = 0; round < 2; round++) {
            size_t old_differs = 0, bad = 0, first_bad = WIRE_N;
            for (size_t i = 0; i < WIRE_N; i++) {
                arena[i] = wire_value(d.rank, i, round);
                float s = ref_f32(ref_bf16(wire_value(0, i, round)));
                uint16_t hop = ref_bf16(s); /* the earlier scheme: rounded after each add */
                for (int q = 1; q < W; q++) {
                    const float b = ref_f32(ref_bf16(wire_value(q, i, round)));
                    s += b;
                    hop = ref_bf16(ref_f32(hop) + b);
                }
                want[i] = shard ? s * inv : ref_f32(ref_bf16(s)) * inv;
                const float old = ref_f32(hop) * inv;
                old_differs += (!shard || mine[i]) && memcmp(&old, &want[i], 4) != 0;
            }
            for (size_t k = n_buckets; k-- > n_buckets / 2;) { /* the last half, backwards */
                const size_t lo = k * bucket, hi = lo + bucket < WIRE_N ? lo + bucket : WIRE_N;
                bt_dist_reducer_start(&r, lo, hi);
                const struct timespec ts = {0, 200000}; /* the backward computes meanwhile */
                nanosleep(&ts, NULL);
            }
            bt_dist_reducer_finish(&r);
            for (size_t i = 0; i < WIRE_N; i++)
                if ((!shard || mine[i]) && memcmp(&arena[i], &want[i], 4) != 0) {
                    if (!bad) first_bad = i;
                    bad++;
                }
            tu_check(bad == 0, "bf16 wire, %s, %d ranks, rank %d, round %d, %s: %zu of %d "
                     "elements differ from the reference %s (first at %zu: got %.9g want %.9g); "
                     "the earlier per-addition rounding differs in %zu",
                     shard ? "ZeRO-1" : "plain", W, d.rank, round,
                     d.multiple ? "progress thread" : "no progress thread", bad, WIRE_N,
                     shard ? "(sum in fp32 of bf16(g_q)) / W" : "bf16(sum in fp32 of bf16(g_q)) / W",
                     first_bad, bad ? (double)arena[first_bad] : 0.0,
                     bad ? (double)want[first_bad] : 0.0, old_differs);
            if (W >= 3 || shard)
                tu_check(old_differs > WIRE_N / 1000, "bf16 wire, %s, %d ranks: the check "
                         "can fail (the earlier scheme differs in %zu elements)",
                         shard ? "ZeRO-1" : "plain", W, old_differs);
        }
        bt_dist_reducer_free(&r);
    }
    free(lohi);
    free(mine);
    free(want);
    free(arena);
    const int rc = tu_finish();
    bt_dist_finalize(&d);
    return rc;
}

/* The bf16 wire's reducer against the reference, bit for bit (wire_rank): 2 and 3 ranks,
 * with and without the progress thread. */
static void test_wire(const char *self) {
    for (int W = 2; W <= 3; W++)
        for (int thread = 0; thread < 2; thread++) {
            char name[64];
            snprintf(name, sizeof name, "wire-rank-%d-%d", W, thread);
            const char *out = tu_tmp_path(name);
            const int rc = tts_sh(out, MPIRUN " -np %d %s '%s' --wire-rank", W,
                              thread ? "" : "-x BT_DIST_NO_PROGRESS_THREAD=1", self);
            char p[1300];
            snprintf(p, sizeof p, "%s.log", out);
            char *log = read_text(p);
            int n_ok = 0;
            for (const char *q = log; (q = strstr(q, "elements differ from")); q++) n_ok++;
            tu_check(rc == 0 && n_ok == 4 * W, "bf16 wire, %d ranks, %s: every rank's result "
                     "equals the fp32-accumulated reference bit for bit, plain and ZeRO-1 "
                     "(exit %d, %d of %d checks seen)", W,
                     thread ? "progress thread" : "no progress thread", rc, n_ok, 4 * W);
            if (rc != 0) {
                fprintf(stderr, "%s\n", log);
                tts_show_err(out);
            }
            free(log);
        }
}

/* 2 x 4 with ZeRO-1 against the reference and the plain 2 x 4 run; the rest of the ZeRO-1
 * runs (accumulation, bf16 wire, 4 ranks, frozen + multipliers, resume across world sizes). */
static void test_zero(const char *ref, const char *r2, const char *acc1) {
    char z2[1200], z4[1200], set[1600], a[1300], b[1300];
    snprintf(z2, sizeof z2, "%s", tu_tmp_path("zero-r2"));
    snprintf(z4, sizeof z4, "%s", tu_tmp_path("zero-r4"));
    int rc = train(z2, 2, "", "--set train.batch_size=4 --set dist.zero_stage=1");
    if (tu_check(rc == 0, "ZeRO-1: mpirun -np 2, batch 4 exits 0 (got %d)", rc)) {
        check_same_run("ZeRO-1 2 x 4", ref, z2, 4);
        check_same_run("ZeRO-1 2 x 4 against plain 2 x 4", r2, z2, 4);
        /* the gathered moments: the same file as the plain run's, by the rule of the
         * weights with the moments' start (zero) as the origin: m and v are sums of the same
         * gradients in another order */
        snprintf(a, sizeof a, "%s/checkpoint-2/optimizer.safetensors", r2);
        snprintf(b, sizeof b, "%s/checkpoint-2/optimizer.safetensors", z2);
        tc_weights_result m;
        tc_weights_compare(&m, b, a, NULL);
        tu_check(tc_weights_pass(&m, TC_RTOL_FP32), "ZeRO-1 2 x 4: checkpoint-2/optimizer."
                 "safetensors (gathered on rank 0) holds every tensor of the plain run's, "
                 "||a - b|| / ||b|| %.2e <= %.0e, worst tensor %.2e <= %.1f (%s)", m.overall,
                 TC_RTOL_FP32, m.worst_tensor, TC_TENSOR_BOUND, m.worst_name);
        snprintf(a, sizeof a, "%s.log", z2);
        char *log = read_text(a);
        tu_check(strstr(log, "ZeRO-1") && strstr(log, "optimizer state"), "ZeRO-1 2 x 4: the "
                 "start line says ZeRO-1 and the memory plan the optimizer state per rank");
        free(log);
    } else {
        tts_show_err(z2);
    }
    rc = train(z4, 4, "--mca btl self,tcp", "--set train.batch_size=2 --set dist.zero_stage=1");
    if (tu_check(rc == 0, "ZeRO-1: mpirun -np 4 --mca btl self,tcp, batch 2 exits 0 (got %d)", rc))
        check_same_run("ZeRO-1 4 x 2 over TCP", ref, z4, 4);
    else
        tts_show_err(z4);
    {
        char za[1200];
        snprintf(za, sizeof za, "%s", tu_tmp_path("zero-acc"));
        rc = train(za, 2, "", "--set train.batch_size=2 --set train.gradient_accumulation_steps=2 "
                   "--set dist.zero_stage=1");
        if (tu_check(rc == 0, "ZeRO-1, accumulation 2: 2 ranks x 2 exits 0 (got %d)", rc))
            check_same_run("ZeRO-1 accumulation 2, 2 x 2", acc1, za, 4);
        else
            tts_show_err(za);
    }
    { /* bf16 wire: the bounds of the plain bf16-wire run (check_wire_run) */
        char zw[1200];
        snprintf(zw, sizeof zw, "%s", tu_tmp_path("zero-wire-bf16"));
        rc = train(zw, 2, "", "--set train.batch_size=4 --set dist.wire_dtype=bf16 "
                   "--set dist.zero_stage=1");
        if (tu_check(rc == 0, "ZeRO-1, bf16 wire: 2 ranks x 4 exits 0 (got %d)", rc))
            check_wire_run("ZeRO-1 2 x 4, bf16 wire", ref, zw);
        else
            tts_show_err(zw);
    }
    /* 3 ranks: blocks of unequal length (0.25 MiB = 65536 floats is no multiple of 3, nor is
     * the last bucket), without the progress thread (the launch path of the caller); against
     * the plain 3 x 2 run (no 1-process twin: 6 does not split batch 8) */
    run_pair("ZeRO-1 3 x 2 against plain 3 x 2, no progress thread",
             "-x BT_DIST_NO_PROGRESS_THREAD=1", "r3", 3,
             "--set train.batch_size=2 --set save.strategy=no", "zero-r3", 3,
             "--set train.batch_size=2 --set save.strategy=no --set dist.zero_stage=1", NULL, 0);
    { /* bf16 wire on 3 ranks (where one fp32 sum and per-addition rounding differ), with
       * the progress thread, against the fp32 3 x 2 run: the bounds of check_wire_run */
        char w3[1200];
        snprintf(w3, sizeof w3, "%s", tu_tmp_path("wire-bf16-r3"));
        rc = train(w3, 3, "", "--set train.batch_size=2 --set save.strategy=no "
                   "--set dist.wire_dtype=bf16");
        if (tu_check(rc == 0, "bf16 wire: 3 ranks x 2 exits 0 (got %d)", rc))
            check_wire_run("3 x 2, bf16 wire, against fp32 3 x 2", tu_tmp_path("r3"), w3);
        else
            tts_show_err(w3);
    }
    /* bf16 compute: the shadow of the blocks received must be refreshed after the all-gather,
     * or the next forward uses stale weights; against the plain 2 x 4 bf16 run (the same sums
     * on 2 ranks: only the grad norm's order differs) */
    char bf16_r2[1200];
    run_pair("ZeRO-1 2 x 4 bf16 compute against plain 2 x 4 bf16", "", "bf16-r2", 2,
             "--set train.batch_size=4 --set train.precision=bf16 --set save.strategy=no",
             "bf16-zero-r2", 2, "--set train.batch_size=4 --set train.precision=bf16 "
             "--set save.strategy=no --set dist.zero_stage=1", bf16_r2, sizeof bf16_r2);
    /* bf16 with gradient checkpointing: no bf16 weight copy (model.h
     * bt_model_drop_bf16_shadow), so the all-gather leaves no shadow to refresh and every
     * product rounds the gathered fp32 weights itself: against the same plain 2 x 4 bf16 run */
    char ckpt16[1200];
    snprintf(ckpt16, sizeof ckpt16, "%s", tu_tmp_path("bf16-ckpt-zero-r2"));
    rc = train(ckpt16, 2, "", "--set train.batch_size=4 --set train.precision=bf16 "
               "--set save.strategy=no --set dist.zero_stage=1 "
               "--set train.gradient_checkpointing=true");
    if (tu_check(rc == 0, "ZeRO-1 2 x 4 bf16 with checkpointing exits 0 (got %d)", rc))
        check_same_run("ZeRO-1 2 x 4 bf16 with checkpointing (no bf16 weight copy) against "
                       "plain 2 x 4 bf16", bf16_r2, ckpt16, 4);
    else
        tts_show_err(ckpt16);
    /* gradient checkpointing under mpirun: the recomputing backward fires the same
     * gradients-final events (the per-layer bucket launches) and gives the same gradients */
    run_pair("gradient checkpointing + ZeRO-1 2 x 4 against plain 2 x 4", "", "ckpt-plain-r2", 2,
             "--set train.batch_size=4 --set save.strategy=no", "ckpt-zero-r2", 2,
             "--set train.batch_size=4 --set save.strategy=no --set dist.zero_stage=1 "
             "--set train.gradient_checkpointing=true", NULL, 0);
    /* a frozen tower and lr multipliers: per-segment state cut by the shards */
#define GROUPS "--set train.freeze_vision=true --set train.lr_mult.cross_modal=5 " \
               "--set train.lr_mult.heads=3 --set save.strategy=no"
    run_pair("ZeRO-1 2 x 4, frozen vision + lr multipliers, against 1 x 8 with the same", "",
             "frozen-r1", 0, GROUPS, "frozen-zero-r2", 2,
             GROUPS " --set train.batch_size=4 --set dist.zero_stage=1", NULL, 0);
#undef GROUPS
    { /* NaN: lr 1e12 makes a loss non-finite after the first update (step 3: step 1 is
       * the warmup's lr 0); under "stop" every rank stops at that step with the message (no
       * rank left waiting in the all-gather) */
        char nan[1200], p[1300];
        snprintf(nan, sizeof nan, "%s", tu_tmp_path("zero-nan-stop"));
        const double t0 = now_s();
        rc = train(nan, 2, "", "--set train.batch_size=4 --set dist.zero_stage=1 --set "
                   "train.lr=1e12 --set train.max_grad_norm=0 --set train.on_nan=stop");
        snprintf(p, sizeof p, "%s.err", nan);
        char *e = read_text(p);
        /* every rank sees the global loss and reports; the first MPI_Abort may cut the
         * other's message, so any rank's will do */
        const int ok = rc != 0 && now_s() - t0 < 60 && strstr(e, "step 3: loss_") &&
                       strstr(e, "stopping (train.on_nan \"stop\"");
        tu_check(ok, "ZeRO-1, train.on_nan stop: a non-finite loss at step 3 stops the job "
                 "(exit %d, %.1f s) with the message", rc, now_s() - t0);
        if (!ok) fprintf(stderr, "%s\n", e);
        free(e);
    }
    { /* ZeRO stages 2 and 3 are not implemented: refused at start, naming the key */
        char bad[1200], p[1300];
        snprintf(bad, sizeof bad, "%s", tu_tmp_path("zero-stage-2"));
        rc = train(bad, 0, "", "--set dist.zero_stage=2");
        snprintf(p, sizeof p, "%s.err", bad);
        char *e = read_text(p);
        tu_check(rc != 0 && strstr(e, "dist.zero_stage") && strstr(e, "[0, 1]"),
                 "dist.zero_stage 2 is refused naming the key and the range (exit %d)", rc);
        free(e);
    }
    { /* resume across world sizes, with and without ZeRO-1 */
        char res1[1200], res2[1200];
        snprintf(res1, sizeof res1, "%s", tu_tmp_path("zero-resume-2to1"));
        snprintf(res2, sizeof res2, "%s", tu_tmp_path("zero-resume-1to2"));
        /* on one process dist.zero_stage 1 is accepted and does nothing (the log says so) */
        snprintf(set, sizeof set,
                 "--set dist.zero_stage=1 --set output.resume_from='%s/checkpoint-2'", z2);
        rc = train(res1, 0, "", set);
        snprintf(a, sizeof a, "%s.log", res1);
        char *log = read_text(a);
        tu_check(rc == 0 && strstr(log, "dist.zero_stage 1: no effect on one process"),
                 "one process with dist.zero_stage 1: accepted, the memory plan says it has no "
                 "effect");
        free(log);
        snprintf(set, sizeof set, "--set train.batch_size=4 --set dist.zero_stage=1 "
                 "--set output.resume_from='%s/checkpoint-2'", ref);
        const int rc2 = train(res2, 2, "", set);
        check_resumed("ZeRO-1 2-rank checkpoint-2 resumed on 1 process", rc, ref, res1);
        check_resumed("1-process checkpoint-2 resumed on 2 ranks with ZeRO-1", rc2, ref, res2);
    }
}

/* --- issue 21: launcher logs and the collective timeout ------------------------------------ */

/* Under mpirun each rank's stdout is a pseudo-terminal even when mpirun writes to a file:
 * the 2-rank log (r2, logging.progress "auto") must hold plain lines only, and with
 * logging.progress "live" the status line's redraws must be there (so the check can fail). */
static void test_launcher_log(const char *r2) {
    char p[1300];
    snprintf(p, sizeof p, "%s.log", r2);
    char *log = read_text(p);
    tu_check(strstr(log, "step 4/4") && !strchr(log, '\r') && !strchr(log, '\033'),
             "mpirun -np 2 > log: plain lines (no \\r, no escape sequence) by default");
    free(log);
    const char *out = tu_tmp_path("live-line");
    const int rc = train(out, 2, "", "--set train.batch_size=4 --set save.strategy=no "
                         "--set logging.progress=live");
    snprintf(p, sizeof p, "%s.log", out);
    log = read_text(p);
    tu_check(rc == 0 && strchr(log, '\r') && strstr(log, "\033[K"),
             "mpirun -np 2 with logging.progress=live: the status line's redraws are in the log "
             "(exit %d)", rc);
    free(log);
}

/* BT_DIST_NO_PROGRESS_THREAD takes 1 (no progress thread) or 0 (the default): another value
 * ends the job with a message naming the variable, before any step (it once meant "set", so
 * 0 turned the thread off). */
static void test_progress_thread_setting(void) {
    const char *out = tu_tmp_path("no-progress-thread-yes");
    const int rc = train(out, 2, "-x BT_DIST_NO_PROGRESS_THREAD=yes", "--set save.strategy=no");
    char p[1300];
    snprintf(p, sizeof p, "%s.err", out);
    char *e = read_text(p);
    snprintf(p, sizeof p, "%s.log", out);
    char *log = read_text(p);
    tu_check(rc != 0 && strstr(e, "BT_DIST_NO_PROGRESS_THREAD") && strstr(e, "'yes'") &&
                 !strstr(log, "step 1/"),
             "mpirun -np 2 with BT_DIST_NO_PROGRESS_THREAD=yes: refused naming it, no step run "
             "(exit %d): %.300s", rc, e);
    free(log);
    free(e);
}

/* dist.timeout_s 3, rank 1 stopped (SIGSTOP) mid-run: rank 0's deadline passes in a
 * collective, rank 1 does not answer its watchdog, the job ends with a message naming the
 * timeout, the step, rank 1 and its host. Expected: 3 s (the deadline) + 3 s (min(timeout,
 * 10 s), the wait for answers) + mpirun's kill; no earlier than 3 s after the stop; bound
 * 60 s for a loaded 2-core CI machine. */
static void test_timeout_stopped_rank(void) {
    const char *out = tu_tmp_path("timeout-sigstop");
    pid_t ranks[2];
    const pid_t mpirun = start_training("SIGSTOP to rank 1, dist.timeout_s 3", out, "",
                                        "--set train.max_steps=100000 --set save.strategy=no "
                                        "--set dist.timeout_s=3", ranks);
    if (mpirun < 0) return;
    char host[256] = "?";
    gethostname(host, sizeof host - 1);
    const double t_stop = now_s();
    kill(ranks[1], SIGSTOP);
    int status = 0;
    double took;
    const int ended = wait_bounded(mpirun, t_stop, 60, &status, &took);
    if (alive(ranks[1])) { /* mpirun kills it (SIGKILL works on a stopped process) */
        kill(ranks[1], SIGKILL);
        kill(ranks[1], SIGCONT);
    }
    char p[1300], want[400];
    snprintf(p, sizeof p, "%s.err", out);
    char *e = read_text(p);
    snprintf(want, sizeof want, "rank 1 (%s) did not arrive", host);
    tu_check(ended && WIFEXITED(status) && WEXITSTATUS(status) != 0 && took >= 3,
             "SIGSTOP to rank 1, dist.timeout_s 3: the job ends with a non-zero status %.1f s "
             "after the stop (expected ~6 s: 3 s deadline + 3 s for answers; bounds [3, 60])",
             took);
    const int named = strstr(e, "dist.timeout_s (3 s) expired in the ") && strstr(e, " of step ") &&
                      strstr(e, want);
    tu_check(named, "SIGSTOP to rank 1: the message names dist.timeout_s, the operation, the "
             "step, and rank 1 with its host as not arrived");
    if (!named) fprintf(stderr, "%s\n", e);
    free(e);
}

/* A slow but live rank must not trip the timeout: with dist.timeout_s 2, rank 0 sleeps 8 s
 * outside any collective when it enters step 3 (--test-hook dist_sleep, dist.h), while rank 1
 * waits in step 3's first collective. Rank 1's watchdog finds rank 0 live and outside the
 * collectives: a warning, and the run completes. */
static void test_timeout_live_rank(void) {
    const char *out = tu_tmp_path("timeout-live");
    const double t0 = now_s();
    const int rc = tts_sh(out, MPIRUN " -np 2 '%s' --test-hook 'dist_sleep=0:step 3:8' "
                      "--config '%s' --quiet-config --set output.dir='%s' --set "
                      "train.batch_size=4 --set save.strategy=no --set dist.timeout_s=2",
                      exe, base_cfg, out);
    const double took = now_s() - t0;
    char p[1300];
    snprintf(p, sizeof p, "%s.err", out);
    char *e = read_text(p);
    const int warned = strstr(e, "rank 1 of 2") && strstr(e, "warning: waited") &&
                       strstr(e, "for rank 0 (") && strstr(e, "live but not in a collective");
    tu_check(rc == 0 && warned && took >= 8, "rank 0 busy 8 s outside collectives, "
             "dist.timeout_s 2: rank 1 warns and waits on, the run completes (exit %d, %.1f s)",
             rc, took);
    if (rc != 0 || !warned) fprintf(stderr, "%s\n", e);
    free(e);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_dist PATH/TO/bt-train\n");
        return 1;
    }
    if (!strcmp(argv[1], "--wire-rank")) return wire_rank();
    exe = argv[1];
    test_zero_layout();
    test_zero_grad_fused();
    if (system("mpirun --version > /dev/null 2>&1") != 0)
        tu_skip("mpirun not found (scripts/install_deps.sh installs openmpi-bin)");
    setup();
    char self[4096];
    test_wire(realpath("/proc/self/exe", self) ? self : argv[0]);

    /* the reference: one process, batch 8, no launcher */
    char ref[1200], r2[1200], r4[1200];
    snprintf(ref, sizeof ref, "%s", tu_tmp_path("ref"));
    snprintf(r2, sizeof r2, "%s", tu_tmp_path("r2"));
    snprintf(r4, sizeof r4, "%s", tu_tmp_path("r4"));
    int rc = train(ref, 0, "", "");
    if (!tu_check(rc == 0, "1 process x batch 8 (no mpirun) exits 0 (got %d)", rc)) {
        tts_show_err(ref);
        return tu_finish();
    }
    { /* the control: a deliberately wrong setting (lr x 1.01, every update 1% longer) must
       * fail the rule the runs below pass (overall ~1e-2, 10 x its bound) */
        char ctl[1200], a[1300], b[1300];
        snprintf(ctl, sizeof ctl, "%s", tu_tmp_path("control-lr"));
        rc = train(ctl, 0, "", "--set train.lr=1.01e-3 --set save.strategy=no");
        snprintf(a, sizeof a, "%s/model.safetensors", ref);
        snprintf(b, sizeof b, "%s/model.safetensors", ctl);
        tc_weights_result r;
        tc_weights_compare(&r, b, a, init_weights);
        tu_check(rc == 0 && r.comparable && !tc_weights_pass(&r, TC_RTOL_FP32),
                 "control: lr x 1.01 fails the comparison rule (overall %.2e > %.0e; exit %d)",
                 r.overall, TC_RTOL_FP32, rc);
    }

    /* equivalence: 2 ranks over shared memory, 4 ranks over TCP */
    rc = train(r2, 2, "", "--set train.batch_size=4");
    if (tu_check(rc == 0, "mpirun -np 2, batch 4 exits 0 (got %d)", rc)) check_same_run("2 x 4", ref, r2, 4);
    else tts_show_err(r2);
    rc = train(r4, 4, "--mca btl self,tcp", "--set train.batch_size=2");
    if (tu_check(rc == 0, "mpirun -np 4 --mca btl self,tcp, batch 2 exits 0 (got %d)", rc))
        check_same_run("4 x 2 over TCP", ref, r4, 4);
    else tts_show_err(r4);
    /* bf16 on the wire (the bounds: check_wire_run) */
    {
        char w16[1200];
        snprintf(w16, sizeof w16, "%s", tu_tmp_path("wire-bf16"));
        rc = train(w16, 2, "", "--set train.batch_size=4 --set dist.wire_dtype=bf16");
        if (tu_check(rc == 0, "mpirun -np 2, batch 4, bf16 on the wire exits 0 (got %d)", rc))
            check_wire_run("2 x 4, bf16 wire", ref, w16);
        else
            tts_show_err(w16);
    }

    /* gradient accumulation: 1 x (4 x 2 micro-batches) = 2 x (2 x 2 micro-batches) */
    char acc1_path[1200];
    run_pair("accumulation 2, 2 x 2", "", "acc1", 0,
             "--set train.batch_size=4 --set train.gradient_accumulation_steps=2", "acc2", 2,
             "--set train.batch_size=2 --set train.gradient_accumulation_steps=2", acc1_path,
             sizeof acc1_path);
    {
        char p[1300];
        snprintf(p, sizeof p, "%s/metrics.jsonl", r2);
        char *m = read_text(p);
        tu_check(strstr(m, "\"comm\":") && !strstr(m, "\"comm\":null"),
                 "2 ranks: metrics.jsonl has the communication time (phase_s.comm)");
        free(m);
    }

    test_zero(ref, r2, acc1_path);

    /* resume on another world size, the global batch kept */
    {
        char res2[1200], res1[1200], bad[1200], set[1400];
        snprintf(res2, sizeof res2, "%s", tu_tmp_path("resume-1to2"));
        snprintf(res1, sizeof res1, "%s", tu_tmp_path("resume-2to1"));
        snprintf(bad, sizeof bad, "%s", tu_tmp_path("resume-bad"));
        snprintf(set, sizeof set, "--set train.batch_size=4 --set output.resume_from='%s/checkpoint-2'",
                 ref);
        rc = train(res2, 2, "", set);
        check_resumed("1-rank checkpoint-2 resumed on 2 ranks", rc, ref, res2);
        snprintf(set, sizeof set, "--set output.resume_from='%s/checkpoint-2'", r2);
        rc = train(res1, 0, "", set);
        check_resumed("2-rank checkpoint-2 resumed on 1 process", rc, ref, res1);
        snprintf(set, sizeof set, "--set train.batch_size=8 --set output.resume_from='%s/checkpoint-2'",
                 ref);
        rc = train(bad, 2, "", set);
        snprintf(set, sizeof set, "%s.err", bad);
        char *e = read_text(set);
        tu_check(rc != 0 && strstr(e, "global batch") && strstr(e, "train.batch_size to 4"),
                 "resume on 2 ranks x batch 8 (global 16, was 8) is refused naming "
                 "train.batch_size (exit %d)", rc);
        free(e);
    }

    /* ranks that disagree: rank 1 gets another learning rate */
    {
        const char *out = tu_tmp_path("mismatch");
        const double t0 = now_s();
        rc = tts_sh(out, MPIRUN " -np 1 '%s' --config '%s' --quiet-config --set output.dir='%s' : "
                "-np 1 '%s' --config '%s' --quiet-config --set output.dir='%s' --set train.lr=2e-3",
                exe, base_cfg, out, exe, base_cfg, out);
        char p[1300];
        snprintf(p, sizeof p, "%s.err", out);
        char *e = read_text(p);
        tu_check(rc != 0 && strstr(e, "resolved config") && strstr(e, "rank 1"),
                 "ranks with different configs stop at start naming the resolved config and "
                 "rank 1 (exit %d, %.1f s)", rc, now_s() - t0);
        if (!strstr(e, "resolved config")) fprintf(stderr, "%s\n", e);
        free(e);
    }

    test_bad_record();
    char ref_opt[1300];
    snprintf(ref_opt, sizeof ref_opt, "%s/checkpoint-2/optimizer.safetensors", ref);
    test_signal_rank(SIGTERM, 0, ref_opt);
    test_signal_rank(SIGTERM, 1, ref_opt);
    test_signal_rank(SIGKILL, 0, ref_opt);
    test_signal_in_stop_check();
    test_launcher_log(r2);
    test_progress_thread_setting();
    test_timeout_stopped_rank();
    test_timeout_live_rank();
    return tu_finish();
}
