/* worker.c: one worker process: consume one queue, run each batch of messages in one transaction.
 */
#include "worker.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "batch.h"
#include "chores.h"
#include "db.h"
#include "guard.h"
#include "life.h"
#include "delivery.h"
#include "log.h"
#include "mq.h"
#include "outbox.h"
#include "relay.h"
#include "settle.h"
#include "stall.h"
#include "txn.h"

#define WORKER_MAX_HEADERS 64
#define WORKER_RELAY_SLICES 1000  /* outbox slices after a COMMIT: all the batch's rows */
#define WORKER_SWEEP_SLICES 20    /* outbox slices per sweep (500 rows, 16 MiB each) */
#define WORKER_IDLE_PING_MS 1000  /* ping the database before a batch after this long unused */
#define WORKER_BATCH_SCRATCH 2048 /* header strings of one message for handle_batch */

/* One message as the handler sees it, with the buffers its strings point into. */
typedef struct worker_hmsg {
    idemd_message_t msg;
    char exchange[256], rkey[256], ctype[256], uid[256], appid[256];
    idemd_header_t headers[WORKER_MAX_HEADERS];
} worker_hmsg_t;

typedef struct worker {
    const conf_t *conf;
    const conf_queue_t *q;
    int index;
    const idemd_handler_t *h;
    worker_slot_t *slot;
    db_t *db;
    mq_t *mq;
    mq_t *pub;       /* republishing connection, opened when first needed */
    bool pub_failed; /* the last round failed: declare our queues again first */
    char name[160];  /* "<queue>#<index>": log context, and in connection names */
    void *state;
    bool state_live;
    life_t life;      /* the batch (life.batch) and the held list (life.held) */
    batch_t bt;       /* collecting the batch */
    settle_t st;      /* settling it with the broker */
    guard_t guard;    /* the crash-loop guard */
    const char **ids; /* scratch for the set-based record calls */
    size_t *id_lens;
    uint64_t db_used_ms;        /* when the database connection last ran a batch */
    uint64_t bulk_off_until_ms; /* no set-based pass before this (slow handlers) */
    outbox_t *outbox;           /* onward messages (host->publish) */
    bool outbox_used;           /* a handler published during this batch */
    int cur;                    /* the message handle() runs on */
    int *bidx;                  /* the batch index of each handle_batch message */
    int crash_before_relay;     /* test only: IDEMD_TEST_CRASH_BEFORE_RELAY=N: die before the
                                 * Nth relay, twice per worker slot */
    worker_hmsg_t one;          /* the message handle() runs on */
    char scratch[8192];
    /* For handle_batch (only when the plugin has one and batch_handler is on). */
    worker_hmsg_t *bmsg;
    const idemd_message_t **bptr;
    char *bscratch, *berr;
    chores_t chores; /* retention and reconcile, between batches */
    uint64_t next_pub_service_ms;
    relay_keys_t relay_keys; /* k[0] signs our own headers; all of them check */
    uint64_t keys_read_ms;   /* when relay_keys were read (worker_reread_keys) */
    int keys_reread_ms;      /* how often: RELAY_KEY_REREAD_MS, or the test knob */
    int undecodable_streak;  /* requeued undecodable ones in a row (no dead-lettering) */
    stall_t *stall;          /* handler_timeout's watchdog (NULL: plain alarm()) */
} worker_t;

static volatile sig_atomic_t worker_stop;

static int worker_open_publisher(worker_t *w);

/*
 * The republishing connection, ready for the outbox: a connection lost while
 * idle is replaced; a blocked one (resource alarm) is not used. 0, or -1.
 */
static int worker_ready_publisher(worker_t *w)
{
    if (w->pub && mq_service(w->pub) != 0) {
        mq_close(w->pub);
        w->pub = NULL;
    }
    if (w->pub == NULL && worker_open_publisher(w) != 0)
        return -1;
    return mq_blocked(w->pub) ? -1 : 0;
}

static void worker_on_signal(int sig)
{
    (void)sig;
    worker_stop = 1;
}

static uint64_t worker_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Show progress, and follow a log level changed by a reload (the supervisor's slot field). */
static void worker_progress(worker_t *w)
{
    __atomic_store_n(&w->slot->progress_ms, worker_now_ms(), __ATOMIC_RELAXED);
    log_set_level((log_level_t)__atomic_load_n(&w->slot->log_level, __ATOMIC_RELAXED));
}

static void worker_set_state(worker_t *w, worker_state_t st)
{
    __atomic_store_n(&w->slot->state, (int)st, __ATOMIC_RELAXED);
    if (st == WORKER_STATE_CONSUMING)
        __atomic_store_n(&w->slot->consumed, 1, __ATOMIC_RELAXED);
    worker_progress(w);
}

static void worker_count(uint64_t *counter)
{
    __atomic_add_fetch(counter, 1, __ATOMIC_RELAXED);
}

static uint64_t worker_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

/* A handler call that started at t0 (worker_now_us) ended: one observation of its duration. */
static void worker_handler_time(worker_t *w, uint64_t t0)
{
    static const uint64_t bounds[] = METRICS_HANDLER_BOUNDS;
    metrics_observe(w->slot->c.handler, &w->slot->c.handler_sum_us, bounds, METRICS_HANDLER_N,
                    worker_now_us() - t0);
}

/*
 * The worker exits because it lost the broker or the database: say which
 * (the supervisor counts the restart by it; the next run counts its
 * reconnect). Returns WORKER_EXIT_TEMPFAIL.
 */
static int worker_lose(worker_t *w, worker_lost_t what)
{
    __atomic_store_n(&w->slot->lost, (int)what, __ATOMIC_RELAXED);
    return WORKER_EXIT_TEMPFAIL;
}

/* Connected to what; counts a reconnect when the slot says the last run lost it. */
static void worker_connected(worker_t *w, worker_lost_t what)
{
    if (__atomic_load_n(&w->slot->lost, __ATOMIC_RELAXED) != (int)what)
        return;
    worker_count(what == WORKER_LOST_BROKER ? &w->slot->c.n_mq_reconnects
                                            : &w->slot->c.n_db_reconnects);
    __atomic_store_n(&w->slot->lost, WORKER_LOST_NONE, __ATOMIC_RELAXED);
}

/*
 * The broker or the database is older than idemd supports (the reason is
 * in the slot's error): the supervisor logs it once, shows it in STATUS=
 * and holds the queue. Returns WORKER_EXIT_CONFIG.
 */
static int worker_refused(worker_t *w, const char *why)
{
    snprintf(w->slot->error, sizeof(w->slot->error), "%s", why);
    w->slot->error_kind = WORKER_ERROR_SERVER;
    return WORKER_EXIT_CONFIG;
}

/* Sleep up to ms, waking early on stop; keeps showing progress while it waits. */
static void worker_pause(worker_t *w, int ms)
{
    while (ms > 0 && !worker_stop) {
        int step = ms > 200 ? 200 : ms;
        struct timespec ts = {0, (long)step * 1000000L};
        nanosleep(&ts, NULL);
        ms -= step;
        worker_progress(w);
    }
}

/*
 * Connect to the database, retrying with capped backoff while it is down
 * (deliveries are not taken meanwhile), then start the plugin on it.
 * Returns 0, or an exit code.
 */
static int worker_connect_db(worker_t *w)
{
    char err[512] = "", refused[WORKER_ERROR_MAX];
    int delay = 250, rc;

    worker_set_state(w, WORKER_STATE_WAITING_DB);
    while (!worker_stop) {
        rc = db_open(&w->conf->database, w->q->consumer, w->q->dedup == CONF_DEDUP_TABLE, w->index,
                     refused, sizeof(refused), &w->db);
        if (rc == 0)
            break;
        if (rc == DB_OPEN_REFUSED)
            return worker_refused(w, refused);
        worker_pause(w, delay + rand() % (delay / 2 + 1));
        delay = delay * 2 > 10000 ? 10000 : delay * 2;
    }
    if (worker_stop)
        return WORKER_EXIT_STOPPED;
    w->bt.batch_max = w->q->batch_size;
    int cap = w->conf->database.galera_max_batch;
    if (w->db->galera && cap > 0 && w->bt.batch_max > cap) {
        w->bt.batch_max = cap;
        log_info("at most %d messages per batch transaction on this Galera node "
                 "(database.galera_max_batch; queue batch_size %d)",
                 cap, w->q->batch_size);
    }
    if (w->outbox)
        outbox_rebind(w->outbox, w->db);
    else if ((w->outbox = outbox_new(w->db)) == NULL)
        return WORKER_EXIT_TEMPFAIL;
    outbox_policy_t pol = {.queue = w->q->name,
                           .dlq = w->q->dead_letter_queue,
                           .max_attempts = (unsigned)w->conf->outbox_max_attempts,
                           .backoff_ms = w->conf->outbox_backoff_ms,
                           .key = w->relay_keys.k[0]};
    outbox_set_policy(w->outbox, &pol);
    worker_connected(w, WORKER_LOST_DATABASE);
    if (db_attempt_prepare(w->db) != 0) {
        snprintf(w->slot->error, sizeof(w->slot->error),
                 "cannot use table " DB_ATTEMPT_TABLE
                 " (apply sql/003_idemd_attempt.sql and sql/008_idemd_attempt_crashes.sql)");
        return WORKER_EXIT_CONFIG;
    }
    if (db_relay_keys(w->db, true, &w->relay_keys) != 0) {
        snprintf(w->slot->error, sizeof(w->slot->error),
                 "cannot use the relay key in table " DB_KEY_TABLE
                 " (apply sql/007_idemd_key.sql and sql/010_idemd_key_since.sql; see the log)");
        return WORKER_EXIT_CONFIG;
    }
    w->keys_read_ms = worker_now_ms();
    if (w->h->init && w->h->init(plugin_host(), (const idemd_settings_t *)w->q->settings, w->db->my,
                                 &w->state, err, sizeof(err)) != 0) {
        char qe[800];
        log_error("handler %s: init failed for queue '%s': %s", w->h->name, w->q->name,
                  err[0] ? log_quote_str(err, qe, sizeof(qe)) : "(no reason given)");
        return WORKER_EXIT_CONFIG;
    }
    w->state_live = true;
    return 0;
}

/* Declare the queues idemd owns (dead letters, delay tiers) on mq. 0, or -1 (logged). */
static int worker_declare_own(worker_t *w, mq_t *mq)
{
    if (w->q->dead_letter_queue &&
        mq_declare_plain(mq, w->q->dead_letter_queue, true, w->q->quorum) != 0)
        return -1;
    for (int i = 0; i < w->q->n_retry_delays; i++) {
        char name[300];
        int ms;
        relay_delay_queue(w->q, (unsigned)i + 1, name, sizeof(name), &ms);
        if (mq_declare_delay(mq, name, ms, w->q->name, true, w->q->quorum) != 0)
            return -1;
    }
    return 0;
}

/*
 * A declaration failed: hand the broker's reason to the supervisor, which
 * logs it once however often the worker restarts, and shows it in STATUS=.
 */
static int worker_declare_failed(worker_t *w)
{
    snprintf(w->slot->error, sizeof(w->slot->error), "%s",
             w->mq->error[0] ? w->mq->error : "declaration failed (no reason known)");
    return WORKER_EXIT_CONFIG;
}

/* Connect to the broker, declare and start consuming. Returns 0 or an exit code. */
static int worker_connect_mq(worker_t *w)
{
    char refused[WORKER_ERROR_MAX];
    int rc;

    worker_set_state(w, WORKER_STATE_CONNECTING);
    rc = mq_open(&w->conf->broker, w->name, w->index, refused, sizeof(refused), &w->mq);
    if (rc == MQ_OPEN_REFUSED)
        return worker_refused(w, refused);
    if (rc != 0)
        return worker_lose(w, WORKER_LOST_BROKER);
    worker_connected(w, WORKER_LOST_BROKER);
    w->mq->quiet = true; /* declaration failures: reported by the supervisor, once */
    if (w->q->declare && mq_declare(w->mq, w->q) != 0)
        return worker_declare_failed(w);
    /* Our own queues are declared whatever declare.enabled says. */
    if (worker_declare_own(w, w->mq) != 0)
        return worker_declare_failed(w);
    w->mq->quiet = false;
    if (w->mq->dead_letter_fallback && !w->q->dead_letter_policy && w->index == 0 &&
        !__atomic_exchange_n(&w->slot->dlx_warned, 1, __ATOMIC_RELAXED))
        log_warn("queue '%s' exists without the dead-letter arguments idemd declares now "
                 "(x-dead-letter-exchange \"\", x-dead-letter-routing-key \"%s\"): declared as "
                 "it is. A delivery whose headers this librabbitmq (%s) cannot decode (nested "
                 "deeper than 100 levels) is then requeued, never dropped, and the queue stops "
                 "at it. Remedy: drain and delete the queue so that idemd declares it anew, or "
                 "set a policy with dead-letter-exchange \"\" and dead-letter-routing-key \"%s\" "
                 "and declare.dead_letter_policy = true (README: \"Hostile input\")",
                 w->q->name, w->q->dead_letter_queue, amqp_version(), w->q->dead_letter_queue);
    /* RabbitMQ 4 may keep a delivery limit on a queue idemd did not declare, or declared
     * before it sent x-delivery-limit: dead-letter with a reason before it deletes. */
    w->bt.returns_guard = w->mq->broker_major >= 4 && w->q->dead_letter_queue &&
                          (!w->q->declare || w->mq->limit_unsure);
    if (w->bt.returns_guard)
        log_info("queue %s: a message returned %d times (x-delivery-count) is dead-lettered, "
                 "before a broker delivery limit could delete it",
                 w->q->name, BATCH_RETURNS_MAX);
    if (mq_consume(w->mq, w->q->name, w->q->prefetch) != 0)
        return worker_lose(w, WORKER_LOST_BROKER);
    worker_set_state(w, WORKER_STATE_CONSUMING);
    log_info("consuming queue '%s' (consumer '%s', prefetch %d, batch %d)", w->q->name,
             w->q->consumer, w->q->prefetch, w->q->batch_size);
    return 0;
}

/* Copy AMQP bytes into a NUL-terminated buffer (truncating). */
static const char *worker_cstr(amqp_bytes_t b, char *buf, size_t len)
{
    size_t n = b.len < len - 1 ? b.len : len - 1;
    if (n)
        memcpy(buf, b.bytes, n);
    buf[n] = '\0';
    return buf;
}

/*
 * Fill hm for message i of the batch: everything in hm->msg points into
 * the envelope, t or hm's own buffers (valid while both are).
 */
static void worker_fill_msg(worker_t *w, int i, const txn_msg_t *t, worker_hmsg_t *hm,
                            char *scratch, size_t scratch_len)
{
    life_msg_t *m = &w->life.batch.m[i];
    const amqp_basic_properties_t *p = &m->env.message.properties;
    idemd_message_t *msg = &hm->msg;

    memset(msg, 0, sizeof(*msg));
    msg->msg_id = m->no_id ? "" : t->id;
    msg->msg_id_len = m->no_id ? 0 : t->id_len;
    msg->body = m->env.message.body.bytes ? m->env.message.body.bytes : "";
    msg->body_len = m->env.message.body.len;
    msg->exchange = worker_cstr(m->env.exchange, hm->exchange, sizeof(hm->exchange));
    msg->routing_key = worker_cstr(m->env.routing_key, hm->rkey, sizeof(hm->rkey));
    msg->content_type = (p->_flags & AMQP_BASIC_CONTENT_TYPE_FLAG)
                            ? worker_cstr(p->content_type, hm->ctype, sizeof(hm->ctype))
                            : "";
    msg->redelivered = m->env.redelivered;
    msg->attempt = t->attempt;
    msg->headers = hm->headers;
    msg->n_headers = delivery_headers(p, hm->headers, WORKER_MAX_HEADERS, scratch, scratch_len);
    msg->queue = w->q->name;
    msg->consumer = w->q->consumer;
    msg->user_id = (p->_flags & AMQP_BASIC_USER_ID_FLAG)
                       ? worker_cstr(p->user_id, hm->uid, sizeof(hm->uid))
                       : "";
    msg->app_id = (p->_flags & AMQP_BASIC_APP_ID_FLAG)
                      ? worker_cstr(p->app_id, hm->appid, sizeof(hm->appid))
                      : "";
}

/*
 * handler_timeout around a handler call: past it SIGALRM kills the worker,
 * unless the handler waits for a lock in the database (stall.c).
 */
static void worker_timer_on(worker_t *w)
{
    if (w->q->handler_timeout <= 0)
        return;
    if (w->stall)
        stall_arm(w->stall, w->db, w->q->handler_timeout);
    else
        alarm((unsigned)w->q->handler_timeout);
}

static void worker_timer_off(worker_t *w)
{
    if (w->q->handler_timeout <= 0)
        return;
    if (w->stall)
        stall_disarm(w->stall);
    else
        alarm(0);
}

/* Run the handler on message i (txn_ops_t.handle): the crash note in the slot brackets the call. */
static idemd_result_t worker_op_handle(void *ctx, int i, txn_msg_t *t, unsigned *err)
{
    worker_t *w = ctx;
    worker_slot_t *sl = w->slot;

    worker_fill_msg(w, i, t, &w->one, w->scratch, sizeof(w->scratch));
    w->cur = i;
    w->life.batch.m[i].pub_seq = 0; /* a redone call sends the same onward ids again */
    /* Should this process die inside the handler, its successor counts the start. */
    memcpy(sl->crash_id, t->id, t->id_len);
    sl->crash_id_len = (uint32_t)t->id_len;
    __atomic_store_n(&sl->crash_counted, t->counted ? 1 : 0, __ATOMIC_RELAXED);
    __atomic_store_n(&sl->crash_pid, (int)getpid(), __ATOMIC_RELAXED);
    __atomic_store_n(&sl->in_handler, 1, __ATOMIC_RELEASE);
    t->reason[0] = '\0';
    worker_timer_on(w);
    uint64_t t0 = worker_now_us();
    idemd_result_t r = w->h->handle(w->state, w->db->my, &w->one.msg, t->reason, sizeof(t->reason));
    worker_handler_time(w, t0);
    worker_timer_off(w);
    __atomic_store_n(&sl->in_handler, 0, __ATOMIC_RELEASE);
    *err = mysql_errno(w->db->my);
    worker_progress(w); /* per message: a long batch is not a wedged worker */
    return r;
}

/*
 * Run the handler's handle_batch on ms[0..k-1] (txn_ops_t.handle_many).
 * No crash note: should the worker die in it, every message comes back
 * redelivered and runs alone through handle(), where the one at fault is
 * counted. handler_timeout bounds the whole call.
 */
static int worker_op_handle_many(void *ctx, txn_msg_t *const *ms, int k, idemd_result_t *r,
                                 unsigned *err)
{
    worker_t *w = ctx;
    const size_t errlen = sizeof(ms[0]->reason);

    for (int j = 0; j < k; j++) {
        worker_fill_msg(w, (int)(ms[j] - w->life.batch.t), ms[j], &w->bmsg[j],
                        w->bscratch + (size_t)j * WORKER_BATCH_SCRATCH, WORKER_BATCH_SCRATCH);
        w->bptr[j] = &w->bmsg[j].msg;
        w->bidx[j] = (int)(ms[j] - w->life.batch.t);
        w->life.batch.m[w->bidx[j]].pub_seq = 0;
        r[j] = IDEMD_RESULT_OK;
        w->berr[(size_t)j * errlen] = '\0';
    }
    worker_timer_on(w);
    uint64_t t0 = worker_now_us();
    int rc = w->h->handle_batch(w->state, w->db->my, w->bptr, (size_t)k, r, w->berr, errlen);
    worker_handler_time(w, t0);
    worker_timer_off(w);
    *err = mysql_errno(w->db->my);
    for (int j = 0; j < k; j++) {
        memcpy(ms[j]->reason, w->berr + (size_t)j * errlen, errlen);
        ms[j]->reason[errlen - 1] = '\0';
    }
    worker_progress(w);
    return rc == 0 ? 0 : -1;
}

static unsigned worker_op_exec(void *ctx, const char *sql)
{
    worker_t *w = ctx;
    return db_exec(w->db, sql) == DB_OK ? 0 : mysql_errno(w->db->my);
}

static unsigned worker_op_record(void *ctx, const txn_msg_t *t)
{
    worker_t *w = ctx;
    return db_record(w->db, t->id, t->id_len) == DB_OK ? 0 : db_last_errno(w->db);
}

static unsigned worker_op_clear(void *ctx, const txn_msg_t *t)
{
    worker_t *w = ctx;
    return db_attempt_clear(w->db, t->id, t->id_len) == DB_OK ? 0 : db_last_errno(w->db);
}

/* Gather the ids of ms[0..k-1] for db.c's set-based calls. */
static void worker_op_ids(worker_t *w, txn_msg_t *const *ms, int k)
{
    for (int j = 0; j < k; j++) {
        w->ids[j] = ms[j]->id;
        w->id_lens[j] = ms[j]->id_len;
    }
}

static unsigned worker_op_record_many(void *ctx, txn_msg_t *const *ms, int k)
{
    worker_t *w = ctx;
    worker_op_ids(w, ms, k);
    return db_record_many(w->db, w->ids, w->id_lens, k) == DB_OK ? 0 : db_last_errno(w->db);
}

static unsigned worker_op_find_records(void *ctx, txn_msg_t *const *ms, int k, bool *found)
{
    worker_t *w = ctx;
    worker_op_ids(w, ms, k);
    return db_find_records(w->db, w->ids, w->id_lens, k, found) == DB_OK ? 0 : db_last_errno(w->db);
}

static uint64_t worker_op_now(void *ctx)
{
    (void)ctx;
    return worker_now_ms();
}

static const txn_ops_t worker_txn_ops = {
    worker_op_exec, worker_op_record,      worker_op_clear,        worker_op_handle,
    worker_op_now,  worker_op_record_many, worker_op_find_records, worker_op_handle_many,
};

/*
 * host->publish for the message being handled (plugin_set_publisher): an
 * outbox row in the open transaction, with the id derived from the source
 * message's id and this call's index. 0, or -1 with the reason in err.
 */
static int worker_publish(void *ctx, MYSQL *db, const idemd_message_t *src,
                          const idemd_publish_t *p, char *err, size_t errlen)
{
    worker_t *w = ctx;
    int i = -1;

    if (w->db == NULL || db != w->db->my) {
        snprintf(err, errlen, "publish: db is not the connection handle() was given");
        return -1;
    }
    if (src == &w->one.msg) {
        i = w->cur;
    } else if (w->bmsg != NULL) {
        for (int j = 0; j < w->q->batch_size && i < 0; j++)
            if (src == &w->bmsg[j].msg)
                i = w->bidx[j];
    }
    if (i < 0 || i >= w->life.batch.n) {
        snprintf(err, errlen, "publish: source is not a message being handled");
        return -1;
    }
    if (w->life.batch.m[i].no_id && p->msg_id == NULL) {
        snprintf(err, errlen,
                 "publish: the source message has no id, so the onward message "
                 "needs its own msg_id");
        return -1;
    }
    w->outbox_used = true;
    return outbox_add(w->outbox, w->life.batch.t[i].id, w->life.batch.t[i].id_len,
                      w->life.batch.m[i].pub_seq++, p, err, errlen);
}

/*
 * Right after COMMIT: publish the onward messages of the batch's committed
 * messages, with confirms, and delete their rows. A failure leaves them to
 * the sweeper (worker_sweep); the batch is settled either way.
 */
static void worker_relay(worker_t *w)
{
    int k = 0;
    for (int i = 0; i < w->life.batch.n; i++) {
        if (w->life.batch.t[i].state != TXN_COMMITTED)
            continue;
        w->ids[k] = w->life.batch.t[i].id;
        w->id_lens[k++] = w->life.batch.t[i].id_len;
    }
    if (k == 0)
        return;
    if (w->crash_before_relay > 0 && --w->crash_before_relay == 0 &&
        __atomic_add_fetch(&w->slot->test_crashes, 1, __ATOMIC_RELAXED) <= 2) {
        log_warn("test: IDEMD_TEST_CRASH_BEFORE_RELAY: killing this worker after COMMIT");
        raise(SIGKILL);
    }
    if (worker_ready_publisher(w) != 0) {
        log_warn("outbox: no usable republishing connection: onward messages wait for the "
                 "sweeper");
        return;
    }
    int n = outbox_relay(w->outbox, w->pub, w->ids, w->id_lens, k, 0, WORKER_RELAY_SLICES);
    if (n >= 0) {
        log_debug("outbox: sent %d onward message(s)", n);
        return;
    }
    log_warn("outbox: onward messages not all sent (%s): the sweeper sends them later",
             n == -1 ? "database" : "broker");
    if (n == -2) {
        mq_close(w->pub);
        w->pub = NULL;
        w->pub_failed = true;
    }
}

/* The outbox sweeper (a chore, one runner at a time): rows a dead worker left behind. */
static int worker_sweep(void *arg)
{
    worker_t *w = arg;
    if (worker_ready_publisher(w) != 0)
        return 0;
    int n =
        outbox_relay(w->outbox, w->pub, NULL, NULL, -1, w->conf->outbox_grace, WORKER_SWEEP_SLICES);
    if (n == -1)
        return -1;
    if (n == -2) {
        mq_close(w->pub);
        w->pub = NULL;
        w->pub_failed = true;
    } else if (n > 0) {
        log_info("outbox: sweeper sent %d onward message(s) left behind", n);
    }
    outbox_depth_t d;
    if (outbox_depth(w->outbox, &d) == 0) {
        __atomic_store_n(&w->slot->outbox_rows, (int64_t)d.rows, __ATOMIC_RELAXED);
        __atomic_store_n(&w->slot->outbox_retrying, (int64_t)d.retrying, __ATOMIC_RELAXED);
        __atomic_store_n(&w->slot->outbox_exhausted, (int64_t)d.exhausted, __ATOMIC_RELAXED);
        __atomic_store_n(&w->slot->outbox_oldest_us, (int64_t)(d.oldest_s * 1e6), __ATOMIC_RELAXED);
        __atomic_store_n(&w->slot->outbox_seen_ms, worker_now_ms(), __ATOMIC_RELAXED);
    }
    return 0;
}

/*
 * Run the batch's transaction (txn.c) after the crash guard. 0 when every
 * message that ran has its outcome; -1 when the database cannot be
 * trusted (nothing may be acked: the broker redelivers, the record decides).
 */
static int worker_transact(worker_t *w)
{
    txn_t t;
    int held = 0;

    for (int i = 0; i < w->life.batch.n; i++)
        if (guard_check(&w->guard, &w->life.batch.m[i], &w->life.batch.t[i]) != 0)
            return -1;
    memset(&t, 0, sizeof(t));
    t.ops = &worker_txn_ops;
    t.ctx = w;
    t.record = w->q->dedup == CONF_DEDUP_TABLE;
    /* One record INSERT per batch; per-message savepoints only after a failure, and for a
     * minute after handlers were too slow to finish a batch within the limit that way. */
    t.bulk = worker_now_ms() >= w->bulk_off_until_ms;
    t.batch = w->bmsg != NULL;
    /* No heartbeat is answered while a batch runs: settle well within the broker's limit. */
    t.limit_ms = w->conf->broker.heartbeat > 0 ? (uint64_t)w->conf->broker.heartbeat * 500 : 0;
    t.m = w->life.batch.t;
    t.n = w->life.batch.n;
    w->outbox_used = false;
    txn_status_t st = txn_run(&t);
    __atomic_add_fetch(&w->slot->c.n_redos, (uint64_t)t.redos, __ATOMIC_RELAXED);
    __atomic_add_fetch(&w->slot->c.n_lock_waits, (uint64_t)t.lock_waits, __ATOMIC_RELAXED);
    if (st != TXN_DONE)
        return -1;
    if (t.committed && w->outbox_used)
        worker_relay(w);
    w->db_used_ms = worker_now_ms();
    if (t.committed)
        worker_count(&w->slot->c.n_commits);
    if (t.too_slow) {
        w->bulk_off_until_ms = worker_now_ms() + 60000;
        log_info("handlers ran past %llu ms in a set-based batch: message by message for a "
                 "minute",
                 (unsigned long long)t.limit_ms);
    }
    if (t.batch_calls || t.fell_back)
        log_debug("batch of %d: handle_batch called %d time(s)%s", w->life.batch.n, t.batch_calls,
                  t.fell_back ? ", then message by message" : "");
    for (int i = 0; i < w->life.batch.n; i++)
        held += w->life.batch.t[i].state == TXN_NEW;
    if (t.cut_short)
        log_debug("batch of %d ran past %llu ms: settling %d, keeping %d for the next",
                  w->life.batch.n, (unsigned long long)t.limit_ms, w->life.batch.n - held, held);
    return 0;
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

/*
 * While the republishing connection waits: show progress to the supervisor,
 * and keep the consuming connection's heartbeat going (its deliveries are
 * not read meanwhile).
 */
static void worker_tick(void *arg)
{
    worker_t *w = arg;
    worker_progress(w);
    mq_keepalive(w->mq);
}

/*
 * Open the republishing connection. After a failed round the queues we
 * publish to are declared again first (unless the connection is blocked:
 * then on a later one): someone may have deleted them, and a copy to a
 * missing queue is returned, which would requeue its message for ever. 0,
 * or -1 (logged).
 */
static int worker_open_publisher(worker_t *w)
{
    if (mq_open_publisher(&w->conf->broker, w->name, w->index, worker_tick, w, &w->pub) != 0)
        return -1;
    /* Blocked by a resource alarm, the broker reads nothing more from this connection: a
     * declaration would wait out MQ_RPC_MS without progress. Nothing is published on it
     * while blocked, so the queues are declared on the next connection. */
    if (mq_blocked(w->pub))
        return 0;
    if (w->pub_failed && worker_declare_own(w, w->pub) != 0) {
        mq_close(w->pub);
        w->pub = NULL;
        return -1;
    }
    w->pub_failed = false;
    return 0;
}

/*
 * Once a second, let the republishing connection (if open) answer
 * heartbeats and hear connection.blocked / unblocked; drop it when lost.
 */
static void worker_service_pub(worker_t *w)
{
    uint64_t now = worker_now_ms();
    if (w->pub == NULL || now < w->next_pub_service_ms)
        return;
    w->next_pub_service_ms = now + 1000;
    if (mq_service(w->pub) != 0) {
        mq_close(w->pub);
        w->pub = NULL;
    }
}

/* Give up the batch, the carried delivery and the held list: unacked, the broker requeues them. */
static void worker_release(worker_t *w)
{
    life_release(&w->life);
    w->bt.has_carry = false;
}

/*
 * Before chores and before a batch, once the connection sat unused for a
 * second: a server that closed it (wait_timeout, KILL, restart) is found by
 * a ping, not by the batch failing with 2006 and coming back as
 * redeliveries; an idle worker's pings also keep wait_timeout from
 * firing. Reconnects in place (plugin state and chores too). 0, or -1 when
 * the database cannot be reached.
 */
static int worker_check_db(worker_t *w)
{
    if (worker_now_ms() - w->db_used_ms < WORKER_IDLE_PING_MS)
        return 0;
    w->db_used_ms = worker_now_ms();
    if (mysql_ping(w->db->my) == 0)
        return 0;
    log_info("database connection lost while idle (%s): reconnecting", mysql_error(w->db->my));
    (void)worker_lose(w, WORKER_LOST_DATABASE); /* counted as a reconnect once it is back */
    if (w->state_live && w->h->fini)
        w->h->fini(w->state);
    w->state_live = false;
    w->state = NULL;
    db_close(w->db);
    w->db = NULL;
    if (worker_connect_db(w) != 0)
        return -1;
    chores_init(&w->chores, w->conf, w->q, w->name, w->slot, w->db, w->h, w->state);
    if (w->h->abi_minor >= 3)
        chores_set_sweep(&w->chores, worker_sweep, w);
    worker_set_state(w, WORKER_STATE_CONSUMING);
    return 0;
}

/*
 * Between batches, every keys_reread_ms: read the relay keys again, so that
 * a rotation (idemctl key stage / promote / retire) reaches a running
 * worker. A failed read keeps the keys held (logged): they still sign and
 * check what they did before.
 */
static void worker_reread_keys(worker_t *w)
{
    relay_keys_t fresh;

    if (worker_now_ms() - w->keys_read_ms < (uint64_t)w->keys_reread_ms)
        return;
    w->keys_read_ms = worker_now_ms();
    w->db_used_ms = w->keys_read_ms;
    /* create: when row 1 was deleted, every worker moves to the one new key. */
    if (db_relay_keys(w->db, true, &fresh) != 0) {
        log_warn("relay keys not read again (see above): the %d held still sign and check",
                 w->relay_keys.n);
        return;
    }
    if (fresh.n != w->relay_keys.n ||
        memcmp(fresh.k, w->relay_keys.k, sizeof(fresh.k[0]) * (size_t)fresh.n) != 0)
        log_info("relay keys changed in table " DB_KEY_TABLE ": %s, %d accepted",
                 memcmp(fresh.k[0], w->relay_keys.k[0], RELAY_KEY_LEN) != 0 ? "new signing key"
                                                                            : "same signing key",
                 fresh.n);
    w->relay_keys = fresh;
    explicit_bzero(&fresh, sizeof(fresh));
}

/*
 * The delivery w->bt.undecodable_tag could not be decoded (worker_next), and
 * the consuming connection can no longer read; the batch received before it
 * is settled. When the queue dead-letters (idemd declared it so, or
 * declare.dead_letter_policy says a policy does) it is rejected there;
 * otherwise it is requeued, never dropped, and the queue stops at it: the
 * next try waits 1 s doubling to 60 s. Then the connection is discarded
 * (what else it held returns to the queue) and a new one consumes. 0, or an
 * exit code.
 */
static int worker_undecodable(worker_t *w)
{
    bool reject = w->mq->dead_letters || w->q->dead_letter_policy;
    uint64_t tag = w->bt.undecodable_tag;
    char qq[300], qd[300], why[200];
    int delay = 0;

    w->bt.undecodable = false;
    snprintf(why, sizeof(why),
             "this librabbitmq (%s) cannot decode its properties: headers nested deeper than "
             "100 levels?",
             amqp_version());
    log_quote_str(w->q->name, qq, sizeof(qq));
    if (reject) {
        w->undecodable_streak = 0;
        log_quote_str(w->q->dead_letter_queue ? w->q->dead_letter_queue : "", qd, sizeof(qd));
        log_error("outcome=reject queue=%s tag=%llu %s then=\"rejected to the broker, which "
                  "dead-letters it to %s\" reason=\"%s\"",
                  qq, (unsigned long long)tag, w->bt.undecodable_route, qd, why);
        worker_count(&w->slot->c.n_reject);
    } else {
        delay = 1000 << (w->undecodable_streak < 6 ? w->undecodable_streak : 6);
        w->undecodable_streak++;
        log_error("outcome=requeue queue=%s tag=%llu %s then=\"requeued: the queue does not "
                  "dead-letter (see the warning at start), so it stops here; next try in %d "
                  "ms\" reason=\"%s\"",
                  qq, (unsigned long long)tag, w->bt.undecodable_route, delay, why);
    }
    /* Sent after the batch's acks, on the same connection: the broker takes them in order. */
    if (mq_nack(w->mq, tag, !reject) != 0)
        log_warn("queue %s: tag=%llu returns to the queue with the connection instead", qq,
                 (unsigned long long)tag);
    worker_release(w);
    mq_close(w->mq);
    w->mq = NULL;
    (void)worker_lose(w, WORKER_LOST_BROKER); /* counted as a reconnect below */
    worker_pause(w, delay);
    if (worker_stop)
        return WORKER_EXIT_STOPPED;
    return worker_connect_mq(w);
}

/* The broker for batch.c and settle.c (life_broker_ops_t): the consuming and publishing mq_t. */
static mq_status_t worker_b_next(void *ctx, const struct timeval *tv, size_t max_body,
                                 amqp_envelope_t *env, uint64_t *dropped)
{
    worker_t *w = ctx;
    return mq_next(w->mq, tv, max_body, env, dropped);
}

static int worker_b_ack(void *ctx, uint64_t tag, bool multiple)
{
    worker_t *w = ctx;
    return mq_ack(w->mq, tag, multiple);
}

static int worker_b_nack(void *ctx, uint64_t tag, bool requeue)
{
    worker_t *w = ctx;
    return mq_nack(w->mq, tag, requeue);
}

/* A publishing connection lost while idle is replaced; a new one declares after a failure. */
static int worker_b_pub_open(void *ctx)
{
    worker_t *w = ctx;
    if (w->pub && mq_service(w->pub) != 0) {
        mq_close(w->pub);
        w->pub = NULL;
    }
    return w->pub == NULL ? worker_open_publisher(w) : 0;
}

static bool worker_b_pub_blocked(void *ctx)
{
    worker_t *w = ctx;
    return mq_blocked(w->pub);
}

static void worker_b_round_begin(void *ctx)
{
    worker_t *w = ctx;
    mq_round_begin(w->pub);
}

static int worker_b_publish(void *ctx, const char *exchange, const char *routing_key,
                            const amqp_basic_properties_t *props, amqp_bytes_t body)
{
    worker_t *w = ctx;
    return mq_publish_to(w->pub, exchange, routing_key, props, body);
}

static int worker_b_wait_confirms(void *ctx, int timeout_ms)
{
    worker_t *w = ctx;
    return mq_wait_confirms(w->pub, timeout_ms);
}

static bool worker_b_round_ok(void *ctx, int i)
{
    worker_t *w = ctx;
    return i >= 0 && w->pub && mq_round_ok(w->pub, i);
}

static bool worker_b_round_returned(void *ctx, int i)
{
    worker_t *w = ctx;
    return i >= 0 && w->pub && mq_round_returned(w->pub, i);
}

static const char *worker_b_round_why(void *ctx, int i)
{
    worker_t *w = ctx;
    return i >= 0 && w->pub ? mq_round_why(w->pub, i) : "no publishing connection";
}

static bool worker_b_pub_usable(void *ctx)
{
    worker_t *w = ctx;
    return w->pub && mq_channel_usable(w->pub);
}

static int worker_b_pub_restore(void *ctx)
{
    worker_t *w = ctx;
    return w->pub ? mq_channel_restore(w->pub) : -1;
}

static void worker_b_pub_close(void *ctx)
{
    worker_t *w = ctx;
    mq_close(w->pub);
    w->pub = NULL;
    w->pub_failed = true;
}

static uint64_t worker_b_max_message(void *ctx)
{
    worker_t *w = ctx;
    return w->pub ? w->pub->max_message : 0;
}

static uint64_t worker_b_now_ms(void *ctx)
{
    (void)ctx;
    return worker_now_ms();
}

static uint64_t worker_b_wall_ms(void *ctx)
{
    struct timespec ts;
    (void)ctx;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void worker_b_pause(void *ctx, int ms)
{
    worker_pause(ctx, ms);
}

static const life_broker_ops_t worker_broker_ops = {
    .next = worker_b_next,
    .ack = worker_b_ack,
    .nack = worker_b_nack,
    .pub_open = worker_b_pub_open,
    .pub_blocked = worker_b_pub_blocked,
    .round_begin = worker_b_round_begin,
    .publish = worker_b_publish,
    .wait_confirms = worker_b_wait_confirms,
    .round_ok = worker_b_round_ok,
    .round_returned = worker_b_round_returned,
    .round_why = worker_b_round_why,
    .pub_usable = worker_b_pub_usable,
    .pub_restore = worker_b_pub_restore,
    .pub_close = worker_b_pub_close,
    .max_message = worker_b_max_message,
    .now_ms = worker_b_now_ms,
    .wall_ms = worker_b_wall_ms,
    .pause = worker_b_pause,
};

/* The database for the crash guard (guard_ops_t): idemd_attempt through db.h. */
static int worker_g_find_record(void *ctx, const char *id, size_t len, bool *found)
{
    worker_t *w = ctx;
    return db_find_records(w->db, &id, &len, 1, found) == DB_OK ? 0 : -1;
}

static long long worker_g_bump(void *ctx, const char *id, size_t len, long long *crashes)
{
    worker_t *w = ctx;
    return db_attempt_bump(w->db, id, len, crashes);
}

static long long worker_g_crash(void *ctx, const char *id, size_t len, bool add_start)
{
    worker_t *w = ctx;
    return db_attempt_crash(w->db, id, len, add_start);
}

static int worker_g_unstart(void *ctx, const char *id, size_t len)
{
    worker_t *w = ctx;
    return db_attempt_unstart(w->db, id, len);
}

static const guard_ops_t worker_guard_ops = {
    .find_record = worker_g_find_record,
    .bump = worker_g_bump,
    .crash = worker_g_crash,
    .unstart = worker_g_unstart,
};

/* Wire the batch, settle and guard modules to this worker (its life, broker and database). */
static void worker_wire(worker_t *w)
{
    w->guard = (guard_t){.ops = &worker_guard_ops,
                         .ctx = w,
                         .max_attempts = w->q->max_attempts,
                         .dedup_table = w->q->dedup == CONF_DEDUP_TABLE,
                         .workers = w->q->workers};
    w->bt.q = w->q;
    w->bt.ops = &worker_broker_ops;
    w->bt.ctx = w;
    w->bt.life = &w->life;
    w->bt.keys = &w->relay_keys;
    w->st = (settle_t){.q = w->q,
                       .handler = w->h->name,
                       .ops = &worker_broker_ops,
                       .ctx = w,
                       .guard = &w->guard,
                       .key = w->relay_keys.k[0],
                       .c = &w->slot->c,
                       .heartbeat = w->conf->broker.heartbeat,
                       .life = &w->life};
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

/* The consume loop. Returns an exit code. */
static int worker_loop(worker_t *w)
{
    int code;

    chores_init(&w->chores, w->conf, w->q, w->name, w->slot, w->db, w->h, w->state);
    if (w->h->abi_minor >= 3)
        chores_set_sweep(&w->chores, worker_sweep, w);
    while (!worker_stop) {
        worker_progress(w);
        worker_service_pub(w);
        /* Between batches, busy or idle: a steady load must not starve them. */
        int db_rc = worker_check_db(w);
        if (db_rc == 0)
            worker_reread_keys(w);
        if (db_rc != 0 || chores_tick(&w->chores) != 0) {
            worker_release(w);
            return worker_lose(w, WORKER_LOST_DATABASE);
        }
        if (settle_retry_held(&w->st) != 0 || batch_collect(&w->bt) != 0) {
            worker_release(w);
            return worker_lose(w, WORKER_LOST_BROKER);
        }
        if (w->life.batch.n == 0) {
            if (w->bt.undecodable && (code = worker_undecodable(w)) != 0)
                return code;
            continue;
        }
        worker_count(&w->slot->c.n_batches);
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
