/* worker.c: one worker process: signals, its slot, connections and the drain around a loop of
 * step_run (step.c), which runs each batch of messages in one transaction and settles it.
 */
#include "worker.h"
#include "clock.h"

#include "worker_int.h"
#include "sqlh.h"

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

/* The first SIGTERM stops the worker after a drain (worker_go_on), a second one at once. */
static void worker_on_signal(int sig)
{
    (void)sig;
    worker_stop = worker_stop ? 2 : 1;
}

/* Record publish-to-commit latency of a committed message that carries idemd-pub-us. */
static void worker_latency(worker_t *w, const life_msg_t *m, uint64_t now_us)
{
    long long pub = delivery_header_int(&m->env.message.properties, "idemd-pub-us");
    if (pub <= 0 || (uint64_t)pub > now_us)
        return;
    __atomic_add_fetch(&w->slot->lat[metrics_lat_bucket(now_us - (uint64_t)pub)], 1,
                       __ATOMIC_RELAXED);
    metrics_observe_latency(&w->slot->c, now_us - (uint64_t)pub);
}

/*
 * A worker that died inside a handler left the message's id in its slot,
 * and the supervisor the signal that ended it: the note the step hands to
 * the crash guard (guard_count_crash) before anything runs (step_hooks_t.note).
 */
static bool worker_h_note(void *ctx, guard_note_t *note)
{
    worker_t *w = ctx;
    worker_slot_t *sl = w->slot;
    if (w->noted)
        return false;
    *note = (guard_note_t){
        .in_handler = __atomic_load_n(&sl->in_handler, __ATOMIC_ACQUIRE) != 0,
        .counted = sl->crash_counted != 0,
        .id = sl->crash_id,
        .id_len = sl->crash_id_len < sizeof(sl->crash_id) ? sl->crash_id_len : 0,
        .consumer = sl->crash_consumer,
        .exit_signal = __atomic_load_n(&sl->exit_signal, __ATOMIC_RELAXED),
    };
    return true;
}

/* The note was counted: clear it, and name this consumer in the notes to come. */
static void worker_h_noted(void *ctx)
{
    worker_t *w = ctx;
    __atomic_store_n(&w->slot->in_handler, 0, __ATOMIC_RELEASE);
    snprintf(w->slot->crash_consumer, sizeof(w->slot->crash_consumer), "%s", w->q->consumer);
    w->noted = true;
}

/* Publish-to-commit latency of the settled batch's committed messages. */
static void worker_latencies(worker_t *w)
{
    uint64_t now_us = clock_wall_us();
    for (int i = 0; i < w->life.batch.n; i++)
        if (w->life.batch.t[i].state == TXN_COMMITTED)
            worker_latency(w, &w->life.batch.m[i], now_us);
}

/*
 * Time for workers = "auto": a span that starts (on) or ends (off) now. The
 * supervisor reads *since while a span runs, so a long one counts before it ends.
 */
static void worker_time(uint64_t *total, uint64_t *since, bool on)
{
    uint64_t t = __atomic_load_n(since, __ATOMIC_RELAXED), now = clock_mono_us();
    if (on && t == 0)
        __atomic_store_n(since, now, __ATOMIC_RELAXED);
    if (!on && t != 0) {
        __atomic_add_fetch(total, now - t, __ATOMIC_RELAXED);
        __atomic_store_n(since, 0, __ATOMIC_RELAXED);
    }
}

/* Taking the next batch: the wait for its first delivery is idle time, the rest busy. */
static void worker_h_collecting(void *ctx, bool wait)
{
    worker_t *w = ctx;
    worker_time(&w->slot->busy_us, &w->slot->busy_since_us, false);
    worker_time(&w->slot->idle_us, &w->slot->idle_since_us, wait);
}

/* The batch was taken: its collect stage ran from its first delivery read (worker_c_read). */
static void worker_h_collected(void *ctx, int n)
{
    worker_t *w = ctx;
    worker_time(&w->slot->idle_us, &w->slot->idle_since_us, false);
    worker_time(&w->slot->busy_us, &w->slot->busy_since_us, n > 0);
    if (n > 0 && w->first_read_us != 0) {
        worker_stage_since(w, METRICS_STAGE_COLLECT, w->first_read_us);
        w->first_read_us = 0;
    }
}

/* A batch is about to run: count it, and check the database. 0, or -1. */
static int worker_h_batch(void *ctx)
{
    worker_t *w = ctx;
    worker_count(&w->slot->c.n_batches);
    if (w->life.batch.m[0].suspect) /* a suspect runs alone (batch_collect) */
        worker_count(&w->slot->c.n_redelivered);
    metrics_observe_batch(&w->slot->c, (uint64_t)w->life.batch.n);
    return worker_check_db(w);
}

/* An ordered queue: each entry's key, and the order the batch runs in; NULL (delivery order)
 * for any other queue. */
static const int *worker_h_order_keys(void *ctx)
{
    worker_t *w = ctx;
    if (w->ord.keys == NULL)
        return NULL;
    return worker_order_keys(w);
}

/* The transaction ran: its counters. */
static void worker_h_transacted(void *ctx, const txn_t *t, txn_status_t st)
{
    worker_t *w = ctx;
    __atomic_add_fetch(&w->slot->c.n_redos, (uint64_t)t->redos, __ATOMIC_RELAXED);
    __atomic_add_fetch(&w->slot->c.n_lock_waits, (uint64_t)t->lock_waits, __ATOMIC_RELAXED);
    if (t->ended) {
        snprintf(w->slot->error, sizeof(w->slot->error), "%s", t->ended_why);
        w->ended = true;
    }
    if (st != TXN_DONE)
        return;
    w->db_used_ms = clock_mono_ms();
    if (t->committed)
        worker_count(&w->slot->c.n_commits);
}

#ifdef IDEMD_TESTING
/* Fault injection in test builds: IDEMD_TEST_CRASH_BEFORE_RELAY=N dies before the Nth relay, twice
 * per worker slot. */
static void worker_h_before_relay(void *ctx)
{
    worker_t *w = ctx;
    if (w->crash_before_relay > 0 && --w->crash_before_relay == 0 &&
        __atomic_add_fetch(&w->slot->test_crashes, 1, __ATOMIC_RELAXED) <= 2) {
        log_warn("test: IDEMD_TEST_CRASH_BEFORE_RELAY: killing this worker after COMMIT");
        raise(SIGKILL);
    }
}
#define WORKER_BEFORE_RELAY worker_h_before_relay
#else
#define WORKER_BEFORE_RELAY NULL /* the release build has no fault injection */
#endif

static void worker_h_settling(void *ctx)
{
    worker_t *w = ctx;
    w->settle_us = clock_mono_us();
}

/* The batch was settled: the ack stage, and its messages' publish-to-commit latency. */
static void worker_h_settled(void *ctx)
{
    worker_t *w = ctx;
    worker_stage_since(w, METRICS_STAGE_ACK, w->settle_us);
    worker_latencies(w);
}

static const step_hooks_t worker_hooks = {
    .note = worker_h_note,
    .noted = worker_h_noted,
    .collecting = worker_h_collecting,
    .collected = worker_h_collected,
    .batch = worker_h_batch,
    .order_keys = worker_h_order_keys,
    .transacted = worker_h_transacted,
    .before_relay = WORKER_BEFORE_RELAY,
    .settling = worker_h_settling,
    .settled = worker_h_settled,
};

/* Deliveries received and not collected yet (step_drain's pending). */
static bool worker_pending(void *mq)
{
    return mq_pending(mq);
}

/*
 * Whether the consume loop goes on. Once stopping (SIGTERM), the worker
 * drains (step_drain) for at most WORKER_DRAIN_MS and half of
 * shutdown_timeout. A second SIGTERM, or no consumer to cancel (the broker
 * connection is being re-made), stops it at once.
 */
static bool worker_go_on(worker_t *w)
{
    if (!worker_stop)
        return true;
    if (worker_stop > 1)
        return false;
    uint64_t ms = WORKER_DRAIN_MS;
    if ((uint64_t)w->conf->shutdown_timeout * 500 < ms)
        ms = (uint64_t)w->conf->shutdown_timeout * 500;
    return step_drain(&w->step, ms, worker_pending, w->mq);
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
        /* A chore that lost the connection left nothing uncertain: its work is redone. */
        if (db_rc == 0 && !w->step.draining && chores_tick(&w->chores) != 0)
            db_rc = worker_reconnect_db(w, "in a chore");
        if (db_rc != 0) {
            worker_give_back(w);
            return worker_lose(w, WORKER_LOST_DATABASE);
        }
        step_status_t st = step_run(&w->step);
        if (st < 0 && w->ended) {
            /* Nothing of the batch is acked: the supervisor holds the queue (sup_hold). */
            w->slot->error_kind = WORKER_ERROR_ENDED;
            worker_give_back(w);
            return WORKER_EXIT_CONFIG;
        }
        if (st < 0) {
            /* Unknown outcome: the broker redelivers, the record decides. */
            log_warn("%s: the worker restarts; its unacked deliveries go back to the queue",
                     w->step.why ? w->step.why : "lost");
            worker_give_back(w);
            return worker_lose(w,
                               st == STEP_LOST_BROKER ? WORKER_LOST_BROKER : WORKER_LOST_DATABASE);
        }
        if (w->bt.undecodable && (code = worker_undecodable(w)) != 0)
            return code;
        /* A run that only counts a retiring predecessor's crash note: the first step did (before
         * anything else); now drain as the predecessor was doing. */
        if (!worker_stop && __atomic_load_n(&w->slot->note_only, __ATOMIC_RELAXED)) {
            log_info("the crash note of the retiring worker before it is counted: draining");
            worker_stop = 1;
        }
    }
    worker_give_back(w);
    return WORKER_EXIT_STOPPED;
}

/* The batch's and the handler calls' memory for this queue; out of memory ends the process. */
static void worker_alloc(worker_t *w)
{
    bool mem =
        life_init(&w->life, w->q->batch_size, w->q->prefetch / 2 > 0 ? w->q->prefetch / 2 : 1) == 0;
    w->ids = calloc((size_t)w->q->batch_size, sizeof(*w->ids));
    w->id_lens = calloc((size_t)w->q->batch_size, sizeof(*w->id_lens));
    if (w->h->abi_minor >= 2 && w->h->handle_batch && w->q->batch_handler && w->q->batch_size > 1) {
        size_t n = (size_t)w->q->batch_size;
        w->hx.bmsg = calloc(n, sizeof(*w->hx.bmsg));
        w->hx.bptr = calloc(n, sizeof(*w->hx.bptr));
        w->hx.bidx = calloc(n, sizeof(*w->hx.bidx));
        w->hx.bscratch = malloc(n * WORKER_BATCH_SCRATCH);
        w->hx.berr = malloc(n * sizeof(txn_msg_t){0}.reason);
        if (!w->hx.bmsg || !w->hx.bptr || !w->hx.bscratch || !w->hx.berr || !w->hx.bidx)
            w->ids = NULL; /* reported just below */
    }
    if (w->q->order_key && w->q->order_key[0]) {
        w->ord = (order_batch_t){.ops = &w->db_ops.order, .ctx = w, .q = w->q, .life = &w->life};
        if (order_batch_init(&w->ord, w->q->batch_size) != 0)
            w->ids = NULL; /* reported just below */
    }
    if (!mem || w->ids == NULL || w->id_lens == NULL) {
        log_error("out of memory");
        _exit(WORKER_EXIT_TEMPFAIL);
    }
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
    if (sqlh_is(q)) {
        w.h = sqlh_handler(); /* built in: no file to load */
    } else if (plugin_load(q->handler, &plugin, err, sizeof(err)) != 0) {
        log_error("queue '%s': %s", q->name, err);
        exit(WORKER_EXIT_CONFIG);
    } else {
        w.h = plugin->handler;
    }
    plugin_set_publisher(worker_publish, &w);
    w.keys_reread_ms = COPIES_KEY_REREAD_MS;
#ifdef IDEMD_TESTING
    const char *crash = getenv("IDEMD_TEST_CRASH_BEFORE_RELAY"); /* fault injection */
    w.crash_before_relay = crash ? atoi(crash) : 0;
    const char *reread = getenv("IDEMD_TEST_KEY_REREAD_MS"); /* rotate without waiting */
    if (reread && atoi(reread) > 0)
        w.keys_reread_ms = atoi(reread);
#endif
    srand((unsigned)getpid() ^ (unsigned)(clock_wall_ms() / 1000));

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
        w.rng.s = clock_mono_us() ^ ((uint64_t)getpid() << 32);
    w.bt.rng = &w.rng;
    worker_alloc(&w);
    worker_wire(&w);
    worker_txn_wire(&w, &worker_hooks);
    code = worker_connect_db(&w);
    if (code == 0) {
        w.step.outbox = w.outbox;
        w.db_used_ms = clock_mono_ms();
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
    free(w.hx.one.trace_text);
    for (int i = 0; w.hx.bmsg && i < q->batch_size; i++)
        free(w.hx.bmsg[i].trace_text);
    order_batch_free(&w.ord);
    free(w.hx.bmsg);
    free(w.hx.bptr);
    free(w.hx.bidx);
    outbox_close(w.outbox);
    free(w.hx.bscratch);
    free(w.hx.berr);
    plugin_free(plugin);
    log_debug("worker exiting with code %d", code);
    exit(code);
}
