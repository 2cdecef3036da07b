/* worker.c: one worker process's loop: consume one queue, run each batch of messages in one
 * transaction, settle it (worker_conn.c, worker_txn.c and worker_ops.c do the rest).
 */
#include "worker_int.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "delivery.h"
#include "log.h"

volatile sig_atomic_t worker_stop;

/* The first SIGTERM stops the worker after a drain (worker_go_on), a second one at once. */
static void worker_on_signal(int sig)
{
    (void)sig;
    worker_stop = worker_stop ? 2 : 1;
}

uint64_t worker_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Show progress, and follow a log level changed by a reload (the supervisor's slot field). */
void worker_progress(worker_t *w)
{
    __atomic_store_n(&w->slot->progress_ms, worker_now_ms(), __ATOMIC_RELAXED);
    log_set_level((log_level_t)__atomic_load_n(&w->slot->log_level, __ATOMIC_RELAXED));
}

void worker_set_state(worker_t *w, worker_state_t st)
{
    __atomic_store_n(&w->slot->state, (int)st, __ATOMIC_RELAXED);
    if (st == WORKER_STATE_CONSUMING)
        __atomic_store_n(&w->slot->consumed, 1, __ATOMIC_RELAXED);
    worker_progress(w);
}

void worker_count(uint64_t *counter)
{
    __atomic_add_fetch(counter, 1, __ATOMIC_RELAXED);
}

uint64_t worker_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

/*
 * The worker exits because it lost the broker or the database: say which
 * (the supervisor counts the restart by it; the next run counts its
 * reconnect). Returns WORKER_EXIT_TEMPFAIL.
 */
int worker_lose(worker_t *w, worker_lost_t what)
{
    __atomic_store_n(&w->slot->lost, (int)what, __ATOMIC_RELAXED);
    return WORKER_EXIT_TEMPFAIL;
}

/* Connected to what; counts a reconnect when the slot says the last run lost it. */
void worker_connected(worker_t *w, worker_lost_t what)
{
    if (__atomic_load_n(&w->slot->lost, __ATOMIC_RELAXED) != (int)what)
        return;
    worker_count(what == WORKER_LOST_BROKER ? &w->slot->c.n_mq_reconnects
                                            : &w->slot->c.n_db_reconnects);
    __atomic_store_n(&w->slot->lost, WORKER_LOST_NONE, __ATOMIC_RELAXED);
}

/* Sleep up to ms, waking early on stop; keeps showing progress while it waits. */
void worker_pause(worker_t *w, int ms)
{
    while (ms > 0 && !worker_stop) {
        int step = ms > 200 ? 200 : ms;
        struct timespec ts = {0, (long)step * 1000000L};
        nanosleep(&ts, NULL);
        ms -= step;
        worker_progress(w);
    }
}

/* 4 latency buckets per power of two: 2^(k/4) for k = 0..3. */
static const double worker_lat_step[4] = {1.0, 1.189207115, 1.414213562, 1.681792831};

int worker_lat_bucket(uint64_t us)
{
    if (us == 0)
        return 0;
    int e = 63 - __builtin_clzll(us);
    double frac = (double)us / (double)(1ULL << e);
    int q = 0;
    while (q < 3 && frac >= worker_lat_step[q + 1])
        q++;
    int b = e * 4 + q;
    return b < WORKER_LAT_BUCKETS ? b : WORKER_LAT_BUCKETS - 1;
}

uint64_t worker_lat_bucket_floor(int bucket)
{
    return (uint64_t)((double)(1ULL << (bucket / 4)) * worker_lat_step[bucket % 4]);
}

/* Record publish-to-commit latency of a committed message that carries idemd-pub-us. */
static void worker_latency(worker_t *w, const life_msg_t *m, uint64_t now_us)
{
    long long pub = delivery_header_int(&m->env.message.properties, "idemd-pub-us");
    static const uint64_t bounds[] = METRICS_LATENCY_BOUNDS;
    if (pub <= 0 || (uint64_t)pub > now_us)
        return;
    __atomic_add_fetch(&w->slot->lat[worker_lat_bucket(now_us - (uint64_t)pub)], 1,
                       __ATOMIC_RELAXED);
    metrics_observe(w->slot->c.latency, &w->slot->c.latency_sum_us, bounds, METRICS_LATENCY_N,
                    now_us - (uint64_t)pub);
}

/* Give up the batch, the carried delivery and the held list: unacked, the broker requeues them. */
void worker_release(worker_t *w)
{
    life_release(&w->life);
    w->bt.has_carry = false;
}

/*
 * A worker that died inside a handler left the message's id in its slot,
 * and the supervisor the signal that ended it: hand that note to the crash
 * guard (guard_count_crash), then clear it. 0, or -1 when the database
 * failed.
 */
static int worker_count_crash(worker_t *w)
{
    worker_slot_t *sl = w->slot;
    guard_note_t note = {
        .in_handler = __atomic_load_n(&sl->in_handler, __ATOMIC_ACQUIRE) != 0,
        .counted = sl->crash_counted != 0,
        .id = sl->crash_id,
        .id_len = sl->crash_id_len < sizeof(sl->crash_id) ? sl->crash_id_len : 0,
        .consumer = sl->crash_consumer,
        .exit_signal = __atomic_load_n(&sl->exit_signal, __ATOMIC_RELAXED),
    };
    if (guard_count_crash(&w->guard, &note, w->q->consumer) != 0)
        return -1;
    __atomic_store_n(&sl->in_handler, 0, __ATOMIC_RELEASE);
    return 0;
}

/* Publish-to-commit latency of the settled batch's committed messages. */
static void worker_latencies(worker_t *w)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t now_us = (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
    for (int i = 0; i < w->life.batch.n; i++)
        if (w->life.batch.t[i].state == TXN_COMMITTED)
            worker_latency(w, &w->life.batch.m[i], now_us);
}

static const uint64_t worker_batch_bounds[] = METRICS_BATCH_BOUNDS;

/*
 * Time for workers = "auto": a span that starts (on) or ends (off) now. The
 * supervisor reads *since while a span runs, so a long one counts before it ends.
 */
static void worker_time(uint64_t *total, uint64_t *since, bool on)
{
    uint64_t t = __atomic_load_n(since, __ATOMIC_RELAXED), now = worker_now_us();
    if (on && t == 0)
        __atomic_store_n(since, now, __ATOMIC_RELAXED);
    if (!on && t != 0) {
        __atomic_add_fetch(total, now - t, __ATOMIC_RELAXED);
        __atomic_store_n(since, 0, __ATOMIC_RELAXED);
    }
}

/* Take the next batch; the wait for its first delivery is idle time, the rest busy. 0 or -1. */
static int worker_collect(worker_t *w)
{
    worker_time(&w->slot->busy_us, &w->slot->busy_since_us, false);
    bool wait = w->life.batch.n == 0 && !w->bt.has_carry;
    worker_time(&w->slot->idle_us, &w->slot->idle_since_us, wait);
    int rc = settle_retry_held(&w->st) != 0 || batch_collect(&w->bt) != 0 ? -1 : 0;
    worker_time(&w->slot->idle_us, &w->slot->idle_since_us, false);
    return rc;
}

/*
 * Whether the consume loop goes on. Once stopping (SIGTERM: shutdown,
 * reload, the autoscaler retiring the worker), the worker does not hand back
 * the deliveries the broker already sent it: those would come back
 * redelivered, and a redelivered message runs alone (it may be what killed a
 * worker), one transaction each. It cancels its consumer (basic.cancel:
 * nothing new comes after cancel-ok) and runs what it holds, for at most
 * WORKER_DRAIN_MS and half of shutdown_timeout; what is left then goes back
 * unacked as before. A second SIGTERM, or no consumer to cancel (the broker
 * connection is being re-made), stops it at once.
 */
static bool worker_go_on(worker_t *w)
{
    if (!worker_stop)
        return true;
    if (worker_stop > 1)
        return false;
    if (!w->draining) {
        uint64_t ms = WORKER_DRAIN_MS;
        if ((uint64_t)w->conf->shutdown_timeout * 500 < ms)
            ms = (uint64_t)w->conf->shutdown_timeout * 500;
        w->draining = true;
        w->drain_until_ms = worker_now_ms() + ms;
        w->bt.no_wait = true;
        if (w->mq == NULL || mq_cancel(w->mq) != 0)
            return false;
        log_debug("stopping: consumer cancelled, running the deliveries already received");
    }
    bool held = w->life.batch.n > 0 || w->bt.has_carry || mq_pending(w->mq);
    if (held && worker_now_ms() >= w->drain_until_ms) {
        log_info("stopping: deliveries not run within the drain time go back to the queue");
        return false;
    }
    return held;
}

/* The consume loop. Returns an exit code. */
static int worker_loop(worker_t *w)
{
    int code;

    chores_init(&w->chores, w->conf, w->q, w->name, w->slot, w->db, w->h, w->state);
    if (w->h->abi_minor >= 3)
        chores_set_sweep(&w->chores, worker_sweep_peek, worker_sweep, w);
    while (worker_go_on(w)) {
        worker_progress(w);
        worker_service_pub(w);
        /* Between batches, busy or idle: a steady load must not starve them. */
        int db_rc = worker_check_db(w);
        if (db_rc == 0)
            worker_reread_keys(w);
        if (db_rc != 0 || (!w->draining && chores_tick(&w->chores) != 0)) {
            worker_release(w);
            return worker_lose(w, WORKER_LOST_DATABASE);
        }
        int collected = worker_collect(w);
        worker_time(&w->slot->busy_us, &w->slot->busy_since_us, w->life.batch.n > 0);
        if (collected != 0) {
            worker_release(w);
            return worker_lose(w, WORKER_LOST_BROKER);
        }
        if (w->life.batch.n == 0) {
            if (w->bt.undecodable && (code = worker_undecodable(w)) != 0)
                return code;
            continue;
        }
        worker_count(&w->slot->c.n_batches);
        if (w->life.batch.m[0].suspect) /* a suspect runs alone (batch_collect) */
            worker_count(&w->slot->c.n_redelivered);
        metrics_observe(w->slot->c.batch, &w->slot->c.batch_sum, worker_batch_bounds,
                        METRICS_BATCH_N, (uint64_t)w->life.batch.n);
        if (worker_check_db(w) != 0) {
            worker_release(w);
            return worker_lose(w, WORKER_LOST_DATABASE);
        }
        if (worker_transact(w) != 0) {
            /* Unknown outcome: the broker redelivers, the record decides. */
            worker_release(w);
            return worker_lose(w, WORKER_LOST_DATABASE);
        }
        if (settle_batch(&w->st) != 0) {
            worker_release(w);
            return worker_lose(w, WORKER_LOST_BROKER);
        }
        worker_latencies(w);
        settle_release(&w->st);
        if (w->bt.undecodable && (code = worker_undecodable(w)) != 0)
            return code;
    }
    worker_release(w);
    return WORKER_EXIT_STOPPED;
}

void worker_main(const conf_t *conf, const conf_queue_t *q, int index, worker_slot_t *slot)
{
    worker_t w;
    plugin_t *plugin = NULL;
    char err[512];
    struct sigaction sa;
    sigset_t all;
    int code;

    memset(&w, 0, sizeof(w));
    w.conf = conf;
    w.q = q;
    w.index = index;
    w.slot = slot;
    snprintf(w.name, sizeof(w.name), "%s#%d", q->name, index);
    log_set_context(w.name);
    log_set_sink(&slot->last_error);
    if (plugin_load(q->handler, &plugin, err, sizeof(err)) != 0) {
        log_error("queue '%s': %s", q->name, err);
        exit(WORKER_EXIT_CONFIG);
    }
    w.h = plugin->handler;
    plugin_set_publisher(worker_publish, &w);
    const char *crash = getenv("IDEMD_TEST_CRASH_BEFORE_RELAY"); /* fault injection for tests */
    w.crash_before_relay = crash ? atoi(crash) : 0;
    const char *reread = getenv("IDEMD_TEST_KEY_REREAD_MS"); /* tests: rotate without waiting */
    w.keys_reread_ms = reread && atoi(reread) > 0 ? atoi(reread) : RELAY_KEY_REREAD_MS;
    srand((unsigned)getpid() ^ (unsigned)time(NULL));

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = worker_on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sa.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    sa.sa_handler = SIG_DFL;
    sigaction(SIGCHLD, &sa, NULL);
    sigaction(SIGALRM, &sa, NULL);
    sigemptyset(&all);
    sigprocmask(SIG_SETMASK, &all, NULL);
    /* Do not outlive the supervisor: stop cleanly when it dies. */
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() == 1)
        worker_stop = 1;

    w.bt.batch_max = q->batch_size;
    /* Span ids need to differ across processes and restarts, not to be secret. */
    if (getrandom(&w.rng.s, sizeof(w.rng.s), 0) != (ssize_t)sizeof(w.rng.s))
        w.rng.s = worker_now_us() ^ ((uint64_t)getpid() << 32);
    w.bt.rng = &w.rng;
    bool mem = life_init(&w.life, q->batch_size, q->prefetch / 2 > 0 ? q->prefetch / 2 : 1) == 0;
    w.ids = calloc((size_t)q->batch_size, sizeof(*w.ids));
    w.id_lens = calloc((size_t)q->batch_size, sizeof(*w.id_lens));
    if (w.h->abi_minor >= 2 && w.h->handle_batch && q->batch_handler && q->batch_size > 1) {
        size_t n = (size_t)q->batch_size;
        w.bmsg = calloc(n, sizeof(*w.bmsg));
        w.bptr = calloc(n, sizeof(*w.bptr));
        w.bidx = calloc(n, sizeof(*w.bidx));
        w.bscratch = malloc(n * WORKER_BATCH_SCRATCH);
        w.berr = malloc(n * sizeof(txn_msg_t){0}.reason);
        if (!w.bmsg || !w.bptr || !w.bscratch || !w.berr || !w.bidx)
            w.ids = NULL; /* reported just below */
    }
    if (q->order_key && q->order_key[0] &&
        ((w.okeys = calloc((size_t)q->batch_size, sizeof(*w.okeys))) == NULL ||
         (w.obidx = calloc((size_t)q->batch_size, sizeof(*w.obidx))) == NULL ||
         (w.oblocked = calloc((size_t)q->batch_size, sizeof(*w.oblocked))) == NULL ||
         (w.oseq = calloc((size_t)q->batch_size, sizeof(*w.oseq))) == NULL))
        w.ids = NULL; /* reported just below */
    if (!mem || w.ids == NULL || w.id_lens == NULL) {
        log_error("out of memory");
        _exit(WORKER_EXIT_TEMPFAIL);
    }
    worker_wire(&w);
    code = worker_connect_db(&w);
    if (code == 0 && worker_count_crash(&w) != 0)
        code = worker_lose(&w, WORKER_LOST_DATABASE);
    if (code == 0) {
        snprintf(slot->crash_consumer, sizeof(slot->crash_consumer), "%s", q->consumer);
        w.db_used_ms = worker_now_ms();
        code = worker_connect_mq(&w);
    }
    if (code == 0 && q->handler_timeout > 0)
        w.stall = stall_start(&conf->database, slot);
    if (code == 0)
        code = worker_loop(&w);
    worker_set_state(&w, WORKER_STATE_STOPPING);
    stall_stop(w.stall);
    mq_close(w.mq);
    mq_close(w.pub);
    if (w.state_live && w.h->fini)
        w.h->fini(w.state);
    if (w.db)
        (void)db_rollback(w.db);
    db_close(w.db);
    life_free(&w.life);
    free(w.ids);
    free(w.id_lens);
    free(w.one.trace_text);
    for (int i = 0; w.bmsg && i < q->batch_size; i++)
        free(w.bmsg[i].trace_text);
    free(w.okeys);
    free(w.obidx);
    free(w.oblocked);
    free(w.oseq);
    free(w.bmsg);
    free(w.bptr);
    free(w.bidx);
    outbox_close(w.outbox);
    free(w.bscratch);
    free(w.berr);
    plugin_free(plugin);
    log_debug("worker exiting with code %d", code);
    exit(code);
}
