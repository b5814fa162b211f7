/* dist/dist_mpi.c: dist.h over Open MPI: the world, the start checks, the collectives with
 * their timeout watchdog, and the bucketed gradient reducer (this file is built when meson
 * finds MPI; dist_single.c otherwise). Without a launcher the world is one process and no MPI
 * call is made.
 *
 * Deliberately not here: what needs no MPI in either build (dist_common.c), what the training
 * step reduces and when (train/step.c). */
#include "dist/dist.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "dtype.h"
#include "rng.h"
#include "dist/dist_common.h"
#include "settings.h"

#include <mpi.h>

bt_status bt_dist_init(bt_dist *d, int *argc, char ***argv) {
    memset(d, 0, sizeof *d);
    d->size = 1;
    if (gethostname(d->host, sizeof d->host - 1) != 0) snprintf(d->host, sizeof d->host, "?");
    if (!bt_dist_launched()) return BT_OK;
    /* "1" leaves the all-reduces to the caller's waits; "0" or unset: the progress thread */
    const char *no_thread = bt_setting_value(BT_SET_DIST_NO_PROGRESS_THREAD);
    if (no_thread && strcmp(no_thread, "0") != 0 && strcmp(no_thread, "1") != 0)
        return bt_fail(BT_ERR_ARG, "environment variable BT_DIST_NO_PROGRESS_THREAD: '%s' is "
                       "unknown; expected 1 (no progress thread: the all-reduces progress in "
                       "the waits) or 0 (the default: a progress thread)", no_thread);
    int provided = 0;
    if (MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
        return bt_fail(BT_ERR_UNSUPPORTED, "MPI_Init failed (launched by mpirun?)");
    d->mpi = 1;
    d->threads_ok = provided == MPI_THREAD_MULTIPLE;
    d->multiple = d->threads_ok && !(no_thread && strcmp(no_thread, "1") == 0);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    MPI_Comm_rank(MPI_COMM_WORLD, &d->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &d->size);
    d->hosts = calloc((size_t)d->size, sizeof d->host);
    BT_ASSERT(d->hosts);
    MPI_Allgather(d->host, (int)sizeof d->host, MPI_CHAR, d->hosts, (int)sizeof d->host, MPI_CHAR,
                  MPI_COMM_WORLD);
    return BT_OK;
}

static void watchdog_stop(void);

void bt_dist_finalize(bt_dist *d) {
    if (d->mpi) {
        /* the last collective runs with the deadline too (MPI_Finalize's own exchange then
         * finds every rank present); the watchdog ends before MPI does */
        bt_dist_name_next(d, "final barrier");
        bt_dist_barrier(d);
        watchdog_stop();
        MPI_Finalize();
    }
    free(d->hosts);
    d->hosts = NULL;
    d->mpi = 0;
}

void bt_dist_abort(const bt_dist *d, const char *prog, const char *message, int code) {
    if (d && d->size > 1)
        fprintf(stderr, "%s: rank %d of %d (%s): %s\n", prog, d->rank, d->size, d->host, message);
    else
        fprintf(stderr, "%s: %s\n", prog, message);
    fflush(stderr);
    fflush(stdout);
    if (d && d->mpi && d->size > 1) MPI_Abort(MPI_COMM_WORLD, code ? code : 1);
    exit(code);
}

/* --- the collective timeout (dist.h: bt_dist_set_timeout) -------------------------------- */

enum { WD_TAG_ASK = 1, WD_TAG_ANSWER = 2, WD_WHAT = 112, WD_CONTEXT = 64, WD_LIST = 8 };

/* where a rank is: sent as bytes between the watchdogs (same binary on every rank: the start
 * checks compare it) */
typedef struct wd_state {
    int32_t in_coll;           /* 1: inside a blocking collective (or point-to-point) */
    int32_t round;             /* the asking round this answers (a late answer is told apart) */
    uint64_t seq;              /* collectives entered so far (every rank enters the same ones) */
    char what[WD_WHAT];        /* the current (or last) collective */
    char context[WD_CONTEXT];  /* bt_dist_set_context */
} wd_state;

static struct {
    pthread_mutex_t mu;
    wd_state me;          /* guarded by mu */
    double t_enter;       /* when the current collective was entered (guarded by mu) */
    uint64_t seq_done;    /* counted collectives entered (guarded by mu) */
    double deadline;      /* guarded by mu */
    const char *next;     /* bt_dist_name_next: the main thread's only */
    const bt_dist *d;
    double timeout;       /* seconds; 0: no watchdog */
    int running;
    volatile int stop;
    pthread_t thread;
    MPI_Comm comm;        /* the watchdogs' own messages */
} wd = {.mu = PTHREAD_MUTEX_INITIALIZER};

void bt_dist_set_context(const bt_dist *d, const char *fmt, ...) {
    char text[WD_CONTEXT];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&wd.mu);
    memcpy(wd.me.context, text, sizeof text);
    pthread_mutex_unlock(&wd.mu);
    /* test hook (bt_dist.test_sleep_*, tests/test_dist.c): a slow but live rank, outside
     * every collective */
    if (d && d->test_sleep_s > 0 && d->test_sleep_rank == d->rank &&
        !strcmp(d->test_sleep_ctx, text)) {
        const double secs = d->test_sleep_s;
        const struct timespec ts = {(time_t)secs, (long)((secs - (double)(time_t)secs) * 1e9)};
        nanosleep(&ts, NULL);
    }
}

void bt_dist_name_next(const bt_dist *d, const char *what) {
    (void)d;
    wd.next = what;
}

/* Enters a blocking collective. counted 1: every rank enters it, so its sequence number is
 * comparable between ranks; 0: point-to-point (the number of the last one); -1: a wait that
 * belongs to the next counted one (the reducer launching buckets before its finish: a rank
 * there has arrived at the gradient all-reduce as far as the others can tell). Named by
 * bt_dist_name_next, else by fmt. */
static void coll_begin(int counted, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void coll_begin(int counted, const char *fmt, ...) {
    const char *named = wd.next;
    wd.next = NULL;
    if (!wd.running) return;
    char what[WD_WHAT];
    if (named) {
        snprintf(what, sizeof what, "%s", named);
    } else {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(what, sizeof what, fmt, ap);
        va_end(ap);
    }
    const double t = bt_now_s();
    pthread_mutex_lock(&wd.mu);
    memcpy(wd.me.what, what, sizeof what);
    wd.me.in_coll = 1;
    if (counted > 0) wd.seq_done++;
    wd.me.seq = wd.seq_done + (counted < 0);
    wd.t_enter = t;
    wd.deadline = t + wd.timeout;
    pthread_mutex_unlock(&wd.mu);
}

static void coll_end(void) {
    if (!wd.running) return;
    pthread_mutex_lock(&wd.mu);
    wd.me.in_coll = 0;
    pthread_mutex_unlock(&wd.mu);
}

/* snprintf at the end of buf (cut at cap) */
static void appendf(char *buf, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void appendf(char *buf, size_t cap, const char *fmt, ...) {
    const size_t u = strlen(buf);
    if (u + 1 >= cap) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + u, cap - u, fmt, ap);
    va_end(ap);
}

/* Appends "rank R (HOST)" for the ranks in list (n of them; the first WD_LIST named). */
static void append_ranks(char *buf, size_t cap, const bt_dist *d, const int *list, int n) {
    for (int i = 0; i < n && i < WD_LIST; i++)
        appendf(buf, cap, "%s%d (%s)", i ? ", " : "rank ", list[i], bt_dist_host_of(d, list[i]));
    if (n > WD_LIST) appendf(buf, cap, " and %d more", n - WD_LIST);
}

static void wd_die(const char *msg) {
    const bt_dist *d = wd.d;
    fprintf(stderr, "bt-train: rank %d of %d (%s): error: %s\n", d->rank, d->size, d->host, msg);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    _exit(1); /* not reached */
}

/* The watchdog's answering side: every ask received gets this rank's state back. */
typedef struct wd_server {
    MPI_Request ask;
    int32_t ask_buf;    /* the asker's round */
    MPI_Request *reply; /* (size) */
    wd_state *out;      /* (size) the reply buffers */
} wd_server;

static void wd_serve(wd_server *sv) {
    for (;;) {
        int flag = 0;
        MPI_Status stt;
        MPI_Test(&sv->ask, &flag, &stt);
        if (!flag) return;
        const int q = stt.MPI_SOURCE;
        if (sv->reply[q] != MPI_REQUEST_NULL) MPI_Wait(&sv->reply[q], MPI_STATUS_IGNORE);
        pthread_mutex_lock(&wd.mu);
        sv->out[q] = wd.me;
        pthread_mutex_unlock(&wd.mu);
        sv->out[q].round = sv->ask_buf;
        MPI_Isend(&sv->out[q], (int)sizeof(wd_state), MPI_BYTE, q, WD_TAG_ANSWER, wd.comm,
                  &sv->reply[q]);
        MPI_Irecv(&sv->ask_buf, 1, MPI_INT32_T, MPI_ANY_SOURCE, WD_TAG_ASK, wd.comm, &sv->ask);
    }
}

/* This rank's deadline has passed in the collective `mine` (entered t_enter): asks every
 * other rank where it is, then ends the job or moves the deadline on (dist.h). */
static void wd_expired(wd_server *sv, const wd_state *mine, double t_enter) {
    const bt_dist *d = wd.d;
    const int W = d->size;
    const double t0 = bt_now_s();
    char msg[4096];
    snprintf(msg, sizeof msg, "dist.timeout_s (%g s) expired in the %s of %s",
                     wd.timeout, mine->what, mine->context[0] ? mine->context : "the run");
    if (!d->threads_ok) { /* cannot ask (MPI_THREAD_MULTIPLE not provided) */
        appendf(msg, sizeof msg, " (the other ranks cannot be asked: MPI "
                 "without MPI_THREAD_MULTIPLE)");
        wd_die(msg);
    }
    const double grace = wd.timeout < 10 ? wd.timeout : 10;
    wd_state *ans = calloc((size_t)W, sizeof *ans);
    MPI_Request *req = malloc((size_t)W * 2 * sizeof *req);
    int *got = calloc((size_t)W, sizeof *got);
    int *list = malloc((size_t)W * sizeof *list);
    BT_ASSERT(ans && req && got && list);
    static int32_t rounds; /* asks of earlier rounds may be answered late: told apart */
    const int32_t round = ++rounds;
    /* the asks' buffer outlives this call: an ask to an unreachable rank is never completed
     * (its request is freed); 4 bytes per round, one round per dist.timeout_s at most */
    int32_t *ask = malloc(sizeof *ask);
    BT_ASSERT(ask);
    *ask = round;
    for (int q = 0; q < W; q++) {
        req[2 * q] = req[2 * q + 1] = MPI_REQUEST_NULL;
        if (q == d->rank) continue;
        MPI_Irecv(&ans[q], (int)sizeof *ans, MPI_BYTE, q, WD_TAG_ANSWER, wd.comm, &req[2 * q]);
        MPI_Isend(ask, 1, MPI_INT32_T, q, WD_TAG_ASK, wd.comm, &req[2 * q + 1]);
    }
    got[d->rank] = 1;
    int n_got = 1;
    while (n_got < W && bt_now_s() - t0 < grace && !wd.stop) {
        wd_serve(sv); /* the others ask this rank at the same time */
        for (int q = 0; q < W; q++) {
            int flag = 0;
            if (got[q]) continue;
            MPI_Test(&req[2 * q], &flag, MPI_STATUS_IGNORE);
            if (flag && ans[q].round != round) /* a late answer to an earlier round */
                MPI_Irecv(&ans[q], (int)sizeof *ans, MPI_BYTE, q, WD_TAG_ANSWER, wd.comm,
                          &req[2 * q]);
            else if (flag)
                got[q] = 1, n_got++;
        }
        const struct timespec ts = {0, 10000000}; /* 10 ms */
        nanosleep(&ts, NULL);
    }
    /* still in the same collective? (it may have completed while the answers came) */
    pthread_mutex_lock(&wd.mu);
    const int same = wd.me.in_coll && wd.me.seq == mine->seq && wd.t_enter == t_enter;
    pthread_mutex_unlock(&wd.mu);
    if (!same || wd.stop) goto done;
    /* who did not arrive */
    int n_silent = 0, n_busy = 0, n_other = 0, n_arrived = 0;
    for (int q = 0; q < W; q++)
        if (!got[q]) list[n_silent++] = q;
    if (n_silent) {
        appendf(msg, sizeof msg, ": ");
        append_ranks(msg, sizeof msg, d, list, n_silent);
        appendf(msg, sizeof msg, " did not arrive and did not answer "
                      "within %g s (stopped, hung or unreachable)", grace);
    }
    for (int q = 0; q < W; q++) /* waiting in an earlier collective: the order differs */
        if (got[q] && q != d->rank && ans[q].in_coll && ans[q].seq < mine->seq &&
            n_other < WD_LIST) {
            appendf(msg, sizeof msg, "%s rank %d (%s) waits in the %.*s "
                          "of %.*s", n_other || n_silent ? ";" : ":", q, bt_dist_host_of(d, q),
                          WD_WHAT - 1, ans[q].what, WD_CONTEXT - 1, ans[q].context);
            n_other++;
        }
    for (int q = 0; q < W; q++) /* live, outside collectives, not there yet */
        if (got[q] && q != d->rank && !ans[q].in_coll && ans[q].seq < mine->seq) list[n_busy++] = q;
    if (!n_silent && !n_other && n_busy) { /* slow but live: wait on */
        char warn[2048] = "";
        append_ranks(warn, sizeof warn, d, list, n_busy);
        fprintf(stderr, "bt-train: rank %d of %d (%s): warning: waited %.0f s in the %s of %s "
                "for %s, live but not in a collective yet (at %.*s); waiting another "
                "dist.timeout_s (%g s)\n", d->rank, W, d->host, bt_now_s() - t_enter,
                mine->what, mine->context[0] ? mine->context : "the run", warn, WD_CONTEXT - 1,
                ans[list[0]].context, wd.timeout);
        fflush(stderr);
        pthread_mutex_lock(&wd.mu);
        if (wd.t_enter == t_enter) wd.deadline = bt_now_s() + wd.timeout;
        pthread_mutex_unlock(&wd.mu);
        goto done;
    }
    for (int q = 0; q < W; q++)
        if (got[q] && (q == d->rank || ans[q].seq >= mine->seq)) list[n_arrived++] = q;
    if (!n_silent && !n_other)
        appendf(msg, sizeof msg, ": every rank arrived and the transfer "
                      "did not complete (a stalled network?)");
    else if (n_arrived && n_busy == 0) {
        appendf(msg, sizeof msg, "; arrived: ");
        append_ranks(msg, sizeof msg, d, list, n_arrived);
    }
    appendf(msg, sizeof msg, "; ending the job (raise dist.timeout_s for "
             "longer collectives; docs/distributed.md)");
    wd_die(msg);
done: /* the receives still open are cancelled (ans is freed below); `ask` stays (above) */
    for (int q = 0; q < W; q++) {
        if (req[2 * q] != MPI_REQUEST_NULL && !got[q]) {
            MPI_Cancel(&req[2 * q]);
            MPI_Wait(&req[2 * q], MPI_STATUS_IGNORE);
        }
        if (req[2 * q + 1] == MPI_REQUEST_NULL) continue;
        if (got[q]) MPI_Wait(&req[2 * q + 1], MPI_STATUS_IGNORE); /* it was received */
        else MPI_Request_free(&req[2 * q + 1]);
    }
    if (n_got == W) free(ask);
    free(ans);
    free(req);
    free(got);
    free(list);
}

static void *wd_main(void *arg) {
    (void)arg;
    const int W = wd.d->size;
    wd_server sv;
    sv.reply = malloc((size_t)W * sizeof *sv.reply);
    sv.out = calloc((size_t)W, sizeof *sv.out);
    BT_ASSERT(sv.reply && sv.out);
    for (int q = 0; q < W; q++) sv.reply[q] = MPI_REQUEST_NULL;
    const int ask = wd.d->threads_ok; /* else this thread makes no MPI call but MPI_Abort */
    if (ask) MPI_Irecv(&sv.ask_buf, 1, MPI_INT32_T, MPI_ANY_SOURCE, WD_TAG_ASK, wd.comm, &sv.ask);
    while (!wd.stop) {
        if (ask) wd_serve(&sv);
        pthread_mutex_lock(&wd.mu);
        const int expired = wd.me.in_coll && bt_now_s() > wd.deadline;
        const wd_state mine = wd.me;
        const double t_enter = wd.t_enter;
        pthread_mutex_unlock(&wd.mu);
        if (expired) wd_expired(&sv, &mine, t_enter);
        const struct timespec ts = {0, 20000000}; /* 20 ms: an ask is answered within that */
        nanosleep(&ts, NULL);
    }
    if (ask) {
        MPI_Cancel(&sv.ask);
        MPI_Wait(&sv.ask, MPI_STATUS_IGNORE);
    }
    for (int q = 0; q < W; q++)
        if (sv.reply[q] != MPI_REQUEST_NULL) MPI_Request_free(&sv.reply[q]);
    free(sv.reply);
    free(sv.out);
    return NULL;
}

static void watchdog_stop(void) {
    if (!wd.running) return;
    wd.stop = 1;
    pthread_join(wd.thread, NULL);
    wd.running = 0;
    MPI_Comm_free(&wd.comm);
}

void bt_dist_set_timeout(bt_dist *d, double seconds) {
    if (!bt_dist_active(d) || !d->mpi || seconds <= 0 || wd.running) return;
    MPI_Comm_dup(MPI_COMM_WORLD, &wd.comm);
    wd.d = d;
    wd.timeout = seconds;
    wd.stop = 0;
    wd.running = 1;
    if (pthread_create(&wd.thread, NULL, wd_main, NULL) != 0) {
        wd.running = 0;
        MPI_Comm_free(&wd.comm);
        fprintf(stderr, "bt-train: rank %d of %d (%s): warning: no watchdog thread: "
                "dist.timeout_s is not enforced\n", d->rank, d->size, d->host);
    }
}

/* MPI counts are int: a message larger than INT_MAX elements is split by the callers below
 * or refused here. */
static bt_status check_count(size_t n, const char *what) {
    if (n > (size_t)0x7fffffff)
        return bt_fail(BT_ERR_UNSUPPORTED, "%s: %zu elements in one MPI message (limit 2^31 - 1)",
                       what, n);
    return BT_OK;
}

bt_status bt_dist_barrier(const bt_dist *d) {
    if (bt_dist_active(d)) {
        coll_begin(1, "barrier");
        MPI_Barrier(MPI_COMM_WORLD);
        coll_end();
    }
    (void)d;
    return BT_OK;
}

bt_status bt_dist_bcast_f32(const bt_dist *d, float *buf, size_t n, int root) {
    if (!bt_dist_active(d)) return BT_OK;
    const size_t chunk = (size_t)1 << 28;
    coll_begin(1, "broadcast of %zu floats from rank %d", n, root);
    for (size_t o = 0; o < n; o += chunk) {
        const size_t c = n - o < chunk ? n - o : chunk;
        MPI_Bcast(buf + o, (int)c, MPI_FLOAT, root, MPI_COMM_WORLD);
    }
    coll_end();
    (void)d, (void)buf, (void)n, (void)root;
    return BT_OK;
}

bt_status bt_dist_bcast_bytes(const bt_dist *d, void *buf, size_t n, int root) {
    if (!bt_dist_active(d)) return BT_OK;
    bt_status st = check_count(n, "bt_dist_bcast_bytes");
    if (st != BT_OK) return st;
    coll_begin(1, "broadcast of %zu bytes from rank %d", n, root);
    MPI_Bcast(buf, (int)n, MPI_BYTE, root, MPI_COMM_WORLD);
    coll_end();
    (void)d, (void)buf, (void)n, (void)root;
    return BT_OK;
}

bt_status bt_dist_sum_f64(const bt_dist *d, double *v, size_t n) {
    if (!bt_dist_active(d)) return BT_OK;
    bt_status st = check_count(n, "bt_dist_sum_f64");
    if (st != BT_OK) return st;
    coll_begin(1, "all-reduce of %zu doubles", n);
    MPI_Allreduce(MPI_IN_PLACE, v, (int)n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    coll_end();
    (void)d, (void)v, (void)n;
    return BT_OK;
}

/* n elements of `size` bytes per rank (MPI type `type`, elements `unit` for messages) */
static bt_status allgather_n(const bt_dist *d, const void *mine, size_t n, void *out, size_t size,
                             int type, const char *unit) {
    if (bt_dist_active(d)) {
        bt_status st = check_count(n * (size_t)d->size, "all-gather");
        if (st != BT_OK) return st;
        const MPI_Datatype t = type ? MPI_INT64_T : MPI_BYTE;
        coll_begin(1, "all-gather of %zu %s per rank", n, unit);
        MPI_Allgather(mine, (int)n, t, out, (int)n, t, MPI_COMM_WORLD);
        coll_end();
        return BT_OK;
    }
    (void)d, (void)type, (void)unit;
    memmove(out, mine, n * size);
    return BT_OK;
}

bt_status bt_dist_allgather_i64(const bt_dist *d, const int64_t *mine, size_t n, int64_t *out) {
    return allgather_n(d, mine, n, out, sizeof *out, 1, "integers");
}

bt_status bt_dist_allgather_bytes(const bt_dist *d, const void *mine, size_t n, void *out) {
    return allgather_n(d, mine, n, out, 1, 0, "bytes");
}

/* element counts and displacements of the row layout (int, MPI's type) */
static bt_status row_layout(const bt_dist *d, const int64_t *counts, size_t width, int *cnt,
                            int *disp) {
    size_t off = 0;
    for (int r = 0; r < d->size; r++) {
        const size_t c = (size_t)counts[r] * width;
        bt_status st = check_count(off + c, "row gather");
        if (st != BT_OK) return st;
        cnt[r] = (int)c;
        disp[r] = (int)off;
        off += c;
    }
    return BT_OK;
}

static bt_status allgather_rows(const bt_dist *d, const void *mine, void *all,
                                const int64_t *counts, size_t width, MPI_Datatype type) {
    int *cnt = malloc(2 * (size_t)d->size * sizeof *cnt);
    BT_ASSERT(cnt);
    int *disp = cnt + d->size;
    bt_status st = row_layout(d, counts, width, cnt, disp);
    if (st == BT_OK) {
        coll_begin(1, "all-gather of rows of %zu", width);
        MPI_Allgatherv(mine, cnt[d->rank], type, all, cnt, disp, type, MPI_COMM_WORLD);
        coll_end();
    }
    free(cnt);
    return st;
}

bt_status bt_dist_allgather_rows_f32(const bt_dist *d, const float *mine, float *all,
                                     const int64_t *counts, size_t width) {
    if (bt_dist_active(d)) return allgather_rows(d, mine, all, counts, width, MPI_FLOAT);
    if (all != mine) memmove(all, mine, (size_t)counts[0] * width * sizeof *all);
    return BT_OK;
}

bt_status bt_dist_allgather_rows_u64(const bt_dist *d, const uint64_t *mine, uint64_t *all,
                                     const int64_t *counts, size_t width) {
    if (bt_dist_active(d)) return allgather_rows(d, mine, all, counts, width, MPI_UINT64_T);
    if (all != mine) memmove(all, mine, (size_t)counts[0] * width * sizeof *all);
    return BT_OK;
}

bt_status bt_dist_reduce_scatter_add_f32(const bt_dist *d, const float *all, float *mine,
                                         const int64_t *counts, size_t width) {
    size_t n_mine = (size_t)counts[d ? d->rank : 0] * width;
    if (bt_dist_active(d)) {
        int *cnt = malloc(2 * (size_t)d->size * sizeof *cnt);
        BT_ASSERT(cnt);
        int *disp = cnt + d->size;
        bt_status st = row_layout(d, counts, width, cnt, disp);
        float *tmp = st == BT_OK ? malloc((n_mine + 1) * sizeof *tmp) : NULL;
        if (st == BT_OK) {
            BT_ASSERT(tmp);
            coll_begin(1, "reduce-scatter of rows of %zu", width);
            MPI_Reduce_scatter(all, tmp, cnt, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            coll_end();
            for (size_t i = 0; i < n_mine; i++) mine[i] += tmp[i];
        }
        free(tmp);
        free(cnt);
        return st;
    }
    for (size_t i = 0; i < n_mine; i++) mine[i] += all[i];
    return BT_OK;
}

bt_status bt_dist_check_same(const bt_dist *d, const char *const *names, const uint64_t *hashes,
                             size_t n_items) {
    if (!bt_dist_active(d)) return BT_OK;
    uint64_t *all = malloc((size_t)d->size * n_items * sizeof *all);
    char *hosts = malloc((size_t)d->size * sizeof d->host);
    BT_ASSERT(all && hosts);
    coll_begin(1, "all-gather of the start checks");
    MPI_Allgather(hashes, (int)n_items, MPI_UINT64_T, all, (int)n_items, MPI_UINT64_T,
                  MPI_COMM_WORLD);
    MPI_Allgather(d->host, (int)sizeof d->host, MPI_CHAR, hosts, (int)sizeof d->host, MPI_CHAR,
                  MPI_COMM_WORLD);
    coll_end();
    bt_status st = BT_OK;
    for (size_t i = 0; i < n_items && st == BT_OK; i++)
        for (int r = 1; r < d->size; r++)
            if (all[(size_t)r * n_items + i] != all[i]) {
                st = bt_fail(BT_ERR_CONFIG, "the ranks differ in their %s: rank %d (%s) has "
                             "%016llx, rank 0 (%s) %016llx; start every rank with the same "
                             "binary, config and model", names[i], r,
                             hosts + (size_t)r * sizeof d->host,
                             (unsigned long long)all[(size_t)r * n_items + i], hosts,
                             (unsigned long long)all[i]);
                break;
            }
    free(hosts);
    free(all);
    return st;
}

static bt_status reducer_init(bt_dist_reducer *r, const bt_dist *d, float *arena, size_t n,
                              size_t bucket_bytes, int wire_bf16, int shard) {
    dist_reducer_layout(r, d, arena, n, bucket_bytes);
    r->requests = calloc(r->n_buckets + 1, sizeof(MPI_Request));
    r->started = calloc(r->n_buckets + 1, 1);
    r->queue = calloc(r->n_buckets + 1, sizeof *r->queue);
    r->seq = calloc(r->n_buckets + 1, sizeof *r->seq);
    BT_ASSERT(r->requests && r->started && r->queue && r->seq);
    r->shard = shard && bt_dist_active(d);
    const int wire = wire_bf16 && bt_dist_active(d);
    if (r->shard || wire) { /* the block layout of every bucket */
        const size_t W = (size_t)d->size, me = (size_t)d->rank;
        r->counts = malloc((r->n_buckets * W + 1) * sizeof *r->counts);
        r->displs = malloc((r->n_buckets * W + 1) * sizeof *r->displs);
        r->rcounts = malloc((r->n_buckets * W + 1) * sizeof *r->rcounts);
        r->rdispls = malloc((r->n_buckets * W + 1) * sizeof *r->rdispls);
        BT_ASSERT(r->counts && r->displs && r->rcounts && r->rdispls);
        for (size_t b = 0; b < r->n_buckets; b++) {
            const size_t o = b * r->bucket, c = n - o < r->bucket ? n - o : r->bucket;
            for (size_t q = 0; q < W; q++) {
                size_t lo;
                r->counts[b * W + q] = (int)bt_dist_block(c, d->size, (int)q, &lo);
                r->displs[b * W + q] = (int)lo;
            }
            /* the all-to-all's receive side: W copies of this rank's block, packed */
            for (size_t q = 0; q < W; q++) {
                r->rcounts[b * W + q] = r->counts[b * W + me];
                r->rdispls[b * W + q] = (int)q * r->counts[b * W + me];
            }
            r->shard_n += (size_t)r->counts[b * W + me];
        }
        if (!r->shard) r->shard_n = 0;
    }
    if (wire) {
        r->stage = malloc((n + 1) * sizeof *r->stage);
        r->n_slots = r->n_buckets < BT_DIST_MAX_INFLIGHT ? r->n_buckets : BT_DIST_MAX_INFLIGHT;
        r->slot_len = (size_t)d->size * ((r->bucket + (size_t)d->size - 1) / (size_t)d->size);
        r->recv = malloc((r->n_slots * r->slot_len + 1) * sizeof *r->recv);
        r->slot_of = calloc(r->n_buckets + 1, 1);
        BT_ASSERT(r->stage && r->recv && r->slot_of);
        if (!r->shard) { /* the all-gathers' own communicator (collective: every rank here) */
            r->comm2 = malloc(sizeof(MPI_Comm));
            BT_ASSERT(r->comm2);
            MPI_Comm_dup(MPI_COMM_WORLD, r->comm2);
        }
    }
    return BT_OK;
}

bt_status bt_dist_reducer_init(bt_dist_reducer *r, const bt_dist *d, float *arena, size_t n,
                               size_t bucket_bytes, int wire_bf16) {
    return reducer_init(r, d, arena, n, bucket_bytes, wire_bf16, 0);
}

bt_status bt_dist_reducer_init_sharded(bt_dist_reducer *r, const bt_dist *d, float *arena,
                                       size_t n, size_t bucket_bytes, int wire_bf16) {
    return reducer_init(r, d, arena, n, bucket_bytes, wire_bf16, 1);
}

void bt_dist_reducer_free(bt_dist_reducer *r) {
    BT_ASSERT(!r->thread); /* finish joins it */
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (r->comm2 && !finalized) MPI_Comm_free(r->comm2);
    free(r->comm2);
    free(r->stage);
    free(r->recv);
    free(r->slot_of);
    free(r->counts);
    free(r->displs);
    free(r->rcounts);
    free(r->rdispls);
    free(r->seq);
    if (r->mutex) pthread_mutex_destroy(r->mutex);
    free(r->mutex);
    free(r->requests);
    free(r->started);
    free(r->queue);
    memset(r, 0, sizeof *r);
}

/* bf16 wire, bucket b's all-to-all done: this rank's block summed over the ranks' bf16
 * copies in fp32, in rank order (x_0 + x_1 + ... + x_{N-1}, one accumulator per element);
 * plain: the sum rounded to bf16 into the staging copy (the all-gather sends it), ZeRO-1:
 * the sum x 1/size into the arena (this rank's gradient). Frees the bucket's receive slot.
 * par: OpenMP threads may share the work (never from the progress thread). */
static void sum_block(bt_dist_reducer *r, size_t b, int par) {
    const size_t W = (size_t)r->d->size, me = (size_t)r->d->rank, o = b * r->bucket;
    const size_t len = (size_t)r->counts[b * W + me], lo = (size_t)r->displs[b * W + me];
    const unsigned s = r->slot_of[b];
    const uint16_t *x = r->recv + (size_t)s * r->slot_len; /* (W, len): rank q's copy at q */
    const float inv = 1.0f / (float)W;
    enum { CH = 1024 };
    const size_t n_ch = (len + CH - 1) / CH;
    const int shard = r->shard;
#pragma omp parallel for schedule(static) if (par)
    for (size_t k = 0; k < n_ch; k++) {
        const size_t i0 = k * CH, m = len - i0 < CH ? len - i0 : CH;
        float acc[CH];
        for (size_t i = 0; i < m; i++) acc[i] = bt_f32_from_bf16(x[i0 + i]);
        for (size_t q = 1; q < W; q++) {
            const uint16_t *xq = x + q * len + i0;
            for (size_t i = 0; i < m; i++) acc[i] += bt_f32_from_bf16(xq[i]);
        }
        if (shard) {
            float *a = r->arena + o + lo + i0;
            for (size_t i = 0; i < m; i++) a[i] = acc[i] * inv;
        } else {
            uint16_t *w = r->stage + o + lo + i0;
            for (size_t i = 0; i < m; i++) w[i] = bt_bf16_from_f32(acc[i]);
        }
    }
    r->slots_used &= ~(1u << s);
}

/* Bucket b's current collective has completed: the next phase (bf16 wire: the sum, then
 * the all-gather unless sharded) or done. */
static void phase_done(bt_dist_reducer *r, size_t b, int par) {
    if (r->started[b] == 1 && r->stage) {
        sum_block(r, b, par);
        if (!r->shard) {
            r->started[b] = 4; /* launch_gathers sends it */
            return;
        }
    }
    r->started[b] = 2;
    r->inflight--;
}

/* bf16 wire, plain: launches the all-gathers of the summed buckets in launch order (seq),
 * each once every older one has gone: every rank issues them in the same order on comm2,
 * whichever all-to-all completes first. */
static void launch_gathers(bt_dist_reducer *r) {
    if (!r->stage || r->shard) return;
    const size_t W = (size_t)r->d->size;
    MPI_Request *req = r->requests;
    while (r->seq_p2 < r->n_seq && r->started[r->seq[r->seq_p2]] == 4) {
        const size_t b = r->seq[r->seq_p2++];
        MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, r->stage + b * r->bucket,
                        r->counts + b * W, r->displs + b * W, MPI_UINT16_T,
                        *(MPI_Comm *)r->comm2, &req[b]);
        r->started[b] = 5;
    }
}

/* Polls the in-flight buckets (caller holds the mutex or the thread is not running). */
static void poll_buckets(bt_dist_reducer *r) {
    MPI_Request *req = r->requests;
    for (size_t b = 0; b < r->n_buckets; b++) {
        if (r->started[b] != 1 && r->started[b] != 5) continue;
        int flag = 0;
        MPI_Test(&req[b], &flag, MPI_STATUS_IGNORE);
        if (flag) phase_done(r, b, 0);
    }
    launch_gathers(r);
}

/* Blocks until the oldest launched bucket not finished yet is done (returns at once when
 * none is left). Waiting always on the oldest, whose all-gather goes out as soon as its
 * all-to-all is done (the older ones are done, so the launch order holds), a rank blocks
 * only on a collective that every other rank issues before anything it waits for itself:
 * the ranks cannot wait on each other in a cycle. */
static void wait_oldest(bt_dist_reducer *r, int par) {
    MPI_Request *req = r->requests;
    while (r->seq_done < r->n_seq && r->started[r->seq[r->seq_done]] == 2) r->seq_done++;
    if (r->seq_done == r->n_seq) return;
    const size_t b = r->seq[r->seq_done++];
    while (r->started[b] != 2) {
        if (r->started[b] == 4) {
            launch_gathers(r);
        } else {
            MPI_Wait(&req[b], MPI_STATUS_IGNORE);
            phase_done(r, b, par);
        }
    }
}

static void launch_bucket(bt_dist_reducer *r, size_t b) {
    const size_t o = b * r->bucket, c = r->n - o < r->bucket ? r->n - o : r->bucket;
    const size_t W = (size_t)r->d->size;
    MPI_Request *req = &((MPI_Request *)r->requests)[b];
    if (r->stage) { /* bf16 wire: rank q receives every rank's bf16 copy of block q */
        unsigned s = 0;
        while (s < r->n_slots && (r->slots_used >> s & 1u)) s++;
        BT_ASSERT(s < r->n_slots); /* slots in use <= buckets in flight < the window */
        r->slots_used |= 1u << s;
        r->slot_of[b] = (unsigned char)s;
        for (size_t i = 0; i < c; i++) r->stage[o + i] = bt_bf16_from_f32(r->arena[o + i]);
        MPI_Ialltoallv(r->stage + o, r->counts + b * W, r->displs + b * W, MPI_UINT16_T,
                       r->recv + (size_t)s * r->slot_len, r->rcounts + b * W,
                       r->rdispls + b * W, MPI_UINT16_T, MPI_COMM_WORLD, req);
    } else if (r->shard) { /* ZeRO-1: this rank receives the sum of its block only, in place
                            * (the result lands at the start of the bucket; finish moves it) */
        MPI_Ireduce_scatter(MPI_IN_PLACE, r->arena + o, r->counts + b * W, MPI_FLOAT, MPI_SUM,
                            MPI_COMM_WORLD, req);
    } else {
        MPI_Iallreduce(MPI_IN_PLACE, r->arena + o, (int)c, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD,
                       req);
    }
    r->started[b] = 1;
    r->inflight++;
    r->seq[r->n_seq++] = b;
}

static void *progress_main(void *arg) {
    bt_dist_reducer *r = arg;
    pthread_mutex_t *mu = r->mutex;
    for (;;) {
        pthread_mutex_lock(mu);
        const int stop = r->stop;
        if (!stop) {
            poll_buckets(r);
            while (r->q_next < r->n_queue && r->inflight < BT_DIST_MAX_INFLIGHT)
                launch_bucket(r, r->queue[r->q_next++]); /* in queue order (launch_range) */
        }
        pthread_mutex_unlock(mu);
        if (stop) break;
        const struct timespec ts = {0, 50000}; /* 50 us */
        nanosleep(&ts, NULL);
    }
    return NULL;
}

static void launch_range(bt_dist_reducer *r, size_t lo, size_t hi, int queued_only);

bt_status bt_dist_reducer_start(bt_dist_reducer *r, size_t lo, size_t hi) {
    if (!bt_dist_active(r->d)) return BT_OK;
    if (r->d->multiple) { /* queue them for the progress thread */
        if (!r->mutex) {
            r->mutex = malloc(sizeof(pthread_mutex_t));
            BT_ASSERT(r->mutex);
            pthread_mutex_init(r->mutex, NULL);
        }
        pthread_mutex_lock(r->mutex);
        for (size_t b = lo / r->bucket; b < r->n_buckets; b++) {
            const size_t o = b * r->bucket, c = r->n - o < r->bucket ? r->n - o : r->bucket;
            if (o >= hi) break;
            if (o >= lo && o + c <= hi && r->started[b] == 0) {
                r->started[b] = 3;
                r->queue[r->n_queue++] = b;
            }
        }
        pthread_mutex_unlock(r->mutex);
        if (!r->thread) {
            r->stop = 0;
            r->thread = malloc(sizeof(pthread_t));
            BT_ASSERT(r->thread);
            if (pthread_create(r->thread, NULL, progress_main, r) != 0) {
                free(r->thread);
                r->thread = NULL; /* finish launches them */
            }
        }
        return BT_OK;
    }
    coll_begin(-1, "gradient all-reduce (%zu buckets)", r->n_buckets); /* may wait */
    launch_range(r, lo, hi, 0);
    coll_end();
    return BT_OK;
}

/* Launches bucket b once the in-flight window has room: at most BT_DIST_MAX_INFLIGHT
 * buckets in flight (Open MPI's non-blocking all-reduce allocates a temporary of the
 * bucket's size per call, so launching every bucket of a 3.5 GB arena at once doubles its
 * memory; the bf16 wire has that many receive slots), waiting for the oldest first. */
static void launch_in_window(bt_dist_reducer *r, size_t b) {
    while (r->inflight >= BT_DIST_MAX_INFLIGHT) wait_oldest(r, 1);
    launch_bucket(r, b);
}

/* Launches the buckets inside [lo, hi) that are idle (queued_only: the rest of the queue,
 * in queue order), within the in-flight window. Every rank must issue the collectives in
 * the same order: queued buckets go in the order the start calls queued them (the progress
 * thread and finish both follow the queue), then finish launches the others in index
 * order; so the order is the same on every rank when every rank makes the same start
 * calls in the same order, whatever the timing. */
static void launch_range(bt_dist_reducer *r, size_t lo, size_t hi, int queued_only) {
    if (queued_only) {
        while (r->q_next < r->n_queue) launch_in_window(r, r->queue[r->q_next++]);
        return;
    }
    for (size_t b = lo / r->bucket; b < r->n_buckets; b++) {
        const size_t o = b * r->bucket, c = r->n - o < r->bucket ? r->n - o : r->bucket;
        if (o < lo || o + c > hi) {
            if (o >= hi) break;
            continue;
        }
        if (r->started[b] != 0 && r->started[b] != 3) continue; /* launched */
        launch_in_window(r, b);
    }
}

bt_status bt_dist_reducer_finish(bt_dist_reducer *r) {
    r->t_wait = 0;
    if (!bt_dist_active(r->d)) return BT_OK;
    const double t0 = bt_now_s();
    if (r->thread) { /* stop the progress thread; this thread takes over */
        pthread_mutex_lock(r->mutex);
        r->stop = 1;
        pthread_mutex_unlock(r->mutex);
        pthread_join(*(pthread_t *)r->thread, NULL);
        free(r->thread);
        r->thread = NULL;
    }
    coll_begin(1, "gradient all-reduce (%zu buckets)", r->n_buckets);
    launch_range(r, 0, r->n, 1); /* the rest of the queue first (see launch_range) */
    launch_range(r, 0, r->n, 0);
    while (r->seq_done < r->n_seq) wait_oldest(r, 1);
    coll_end();
    r->t_wait = bt_now_s() - t0;
    memset(r->started, 0, r->n_buckets);
    r->inflight = 0;
    r->n_queue = r->q_next = 0;
    r->n_seq = r->seq_done = r->seq_p2 = 0;
    const float inv = 1.0f / (float)r->d->size;
    if (r->shard) { /* bf16 wire: sum_block wrote the averaged blocks. fp32: this rank's
                       * sums, at the start of each bucket, to its block, averaged.
                       * Rank 0's block is the start (in place, element by element); rank
                       * r >= 1's starts r blocks in, past the c <= block values it moves:
                       * source and destination never overlap, any order will do */
        if (r->stage) return BT_OK;
        const size_t W = (size_t)r->d->size, me = (size_t)r->d->rank;
        for (size_t b = 0; b < r->n_buckets; b++) {
            const size_t o = b * r->bucket, c = (size_t)r->counts[b * W + me];
            float *a = r->arena + o + (size_t)r->displs[b * W + me];
            BT_ASSERT(me == 0 || (size_t)r->displs[b * W + me] >= c);
            const float *w = r->arena + o;
#pragma omp parallel for schedule(static)
            for (size_t i = 0; i < c; i++) a[i] = w[i] * inv;
        }
        return BT_OK;
    }
    float *a = r->arena;
    const uint16_t *w = r->stage;
    const size_t n = r->n;
    if (w) {
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) a[i] = bt_f32_from_bf16(w[i]) * inv;
    } else {
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) a[i] *= inv;
    }
    return BT_OK;
}

bt_status bt_dist_reducer_allgather(bt_dist_reducer *r, float *params) {
    r->t_wait = 0;
    if (!r->shard) return BT_OK;
    const double t0 = bt_now_s();
    const size_t W = (size_t)r->d->size;
    MPI_Request *req = r->requests;
    size_t oldest = 0;
    coll_begin(1, "ZeRO-1 weight all-gather (%zu buckets)", r->n_buckets);
    for (size_t b = 0; b < r->n_buckets; b++) {
        if (b - oldest >= BT_DIST_MAX_INFLIGHT) MPI_Wait(&req[oldest++], MPI_STATUS_IGNORE);
        MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, params + b * r->bucket,
                        r->counts + b * W, r->displs + b * W, MPI_FLOAT, MPI_COMM_WORLD,
                        &req[b]);
    }
    MPI_Waitall((int)(r->n_buckets - oldest), req + oldest, MPI_STATUSES_IGNORE);
    coll_end();
    r->t_wait = bt_now_s() - t0;
    return BT_OK;
}

bt_status bt_dist_to_root_f32(const bt_dist *d, int from, const float *buf, float *out, size_t n) {
    const int me = d ? d->rank : 0;
    if (from == 0) {
        if (me == 0 && out != buf) memmove(out, buf, n * sizeof *out);
        return BT_OK;
    }
    if (!bt_dist_active(d) || (me != from && me != 0)) return BT_OK;
    const size_t chunk = (size_t)1 << 28;
    if (me == from) coll_begin(0, "send of %zu floats to rank 0", n);
    else coll_begin(0, "receive of %zu floats from rank %d", n, from);
    for (size_t o = 0; o < n; o += chunk) {
        const int c = (int)(n - o < chunk ? n - o : chunk);
        if (me == from) MPI_Send(buf + o, c, MPI_FLOAT, 0, 0, MPI_COMM_WORLD);
        else MPI_Recv(out + o, c, MPI_FLOAT, from, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    coll_end();
    return BT_OK;
}
