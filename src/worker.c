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

#include "db.h"
#include "delivery.h"
#include "log.h"
#include "mq.h"
#include "relay.h"

#define WORKER_MAX_HEADERS 64
#define WORKER_REDO_MAX 5       /* deadlocked batches are redone this many times */
#define WORKER_CONFIRM_MS 15000 /* a round's wait for the broker to confirm its copies, in all */

typedef enum worker_outcome {
    WORKER_OUT_PENDING = 0,
    WORKER_OUT_OK,
    WORKER_OUT_DUPLICATE,
    WORKER_OUT_RETRY,
    WORKER_OUT_REJECT,
} worker_outcome_t;

static const char *worker_outcome_names[] = {"pending", "ok", "duplicate", "retry", "reject"};

/* Where a retried or rejected message goes. */
typedef enum worker_route {
    WORKER_ROUTE_NONE = 0, /* acked or nacked as it is */
    WORKER_ROUTE_DELAY,    /* copy to a delay queue (or the queue's tail), then ack */
    WORKER_ROUTE_DLQ,      /* copy to the dead letter queue, then ack */
    WORKER_ROUTE_BROKER,   /* no dead letter queue: basic.nack without requeue */
} worker_route_t;

typedef struct worker_msg {
    amqp_envelope_t env;
    char id[DELIVERY_ID_MAX + 1];
    size_t id_len;
    bool id_ok;
    bool suspect;     /* redelivered: the worker that had it may have died on it */
    bool counted;     /* an attempts row was written for it */
    unsigned attempt; /* this attempt's number, 1-based */
    worker_outcome_t outcome;
    worker_route_t route;
    bool copy_ok;   /* its copy was confirmed by the broker */
    int copy_index; /* its copy's place in the publishing round, or -1 */
    char reason[512];
} worker_msg_t;

typedef struct worker {
    const conf_t *conf;
    const conf_queue_t *q;
    int index;
    const idemd_handler_t *h;
    worker_slot_t *slot;
    db_t *db;
    mq_t *mq;
    mq_t *pub;           /* republishing connection, opened when first needed */
    bool pub_failed;     /* the last round failed: declare our queues again first */
    int pub_fail_streak; /* failed republishing rounds in a row */
    char name[160];      /* "<queue>#<index>": log context, and in connection names */
    void *state;
    bool state_live;
    worker_msg_t *batch;
    int n;
    worker_msg_t carry; /* a suspect delivery received while filling a batch */
    bool has_carry;
    idemd_header_t headers[WORKER_MAX_HEADERS];
    char scratch[8192];
    uint64_t next_reconcile_ms;
    uint64_t next_purge_ms;
    uint64_t next_pub_service_ms;
} worker_t;

static volatile sig_atomic_t worker_stop;

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

static void worker_progress(worker_t *w)
{
    __atomic_store_n(&w->slot->progress_ms, worker_now_ms(), __ATOMIC_RELAXED);
}

static void worker_set_state(worker_t *w, worker_state_t st)
{
    __atomic_store_n(&w->slot->state, (int)st, __ATOMIC_RELAXED);
    worker_progress(w);
}

static void worker_count(uint64_t *counter)
{
    __atomic_add_fetch(counter, 1, __ATOMIC_RELAXED);
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
    char err[512] = "";
    int delay = 250;

    worker_set_state(w, WORKER_STATE_WAITING_DB);
    while (!worker_stop) {
        if (db_open(&w->conf->database, w->q->consumer, w->q->dedup == CONF_DEDUP_TABLE, &w->db) ==
            0)
            break;
        worker_pause(w, delay + rand() % (delay / 2 + 1));
        delay = delay * 2 > 10000 ? 10000 : delay * 2;
    }
    if (worker_stop)
        return WORKER_EXIT_STOPPED;
    if (w->h->init && w->h->init(plugin_host(), (const idemd_settings_t *)w->q->settings, w->db->my,
                                 &w->state, err, sizeof(err)) != 0) {
        log_error("handler %s: init failed for queue '%s': %s", w->h->name, w->q->name,
                  err[0] ? err : "(no reason given)");
        return WORKER_EXIT_CONFIG;
    }
    w->state_live = true;
    return 0;
}

/* Declare the queues idemd owns (dead letters, delay tiers) on mq. 0, or -1 (logged). */
static int worker_declare_own(worker_t *w, mq_t *mq)
{
    if (w->q->dead_letter_queue && mq_declare_plain(mq, w->q->dead_letter_queue, true) != 0)
        return -1;
    for (int i = 0; i < w->q->n_retry_delays; i++) {
        char name[300];
        int ms;
        relay_delay_queue(w->q, (unsigned)i + 1, name, sizeof(name), &ms);
        if (mq_declare_delay(mq, name, ms, w->q->name, true) != 0)
            return -1;
    }
    return 0;
}

/* Connect to the broker, declare and start consuming. Returns 0 or an exit code. */
static int worker_connect_mq(worker_t *w)
{
    worker_set_state(w, WORKER_STATE_CONNECTING);
    if (mq_open(&w->conf->broker, w->name, &w->mq) != 0)
        return WORKER_EXIT_TEMPFAIL;
    if (w->q->declare && mq_declare(w->mq, w->q) != 0)
        return WORKER_EXIT_CONFIG;
    /* Our own queues are declared whatever declare.enabled says. */
    if (worker_declare_own(w, w->mq) != 0)
        return WORKER_EXIT_CONFIG;
    if (mq_consume(w->mq, w->q->name, w->q->prefetch) != 0)
        return WORKER_EXIT_TEMPFAIL;
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

/* Run the handler on one message. Sets m->outcome and m->reason. */
static void worker_handle(worker_t *w, worker_msg_t *m)
{
    const amqp_basic_properties_t *p = &m->env.message.properties;
    char exchange[256], rkey[256], ctype[256];
    idemd_message_t msg;

    memset(&msg, 0, sizeof(msg));
    msg.msg_id = m->id;
    msg.msg_id_len = m->id_len;
    msg.body = m->env.message.body.bytes ? m->env.message.body.bytes : "";
    msg.body_len = m->env.message.body.len;
    msg.exchange = worker_cstr(m->env.exchange, exchange, sizeof(exchange));
    msg.routing_key = worker_cstr(m->env.routing_key, rkey, sizeof(rkey));
    msg.content_type = (p->_flags & AMQP_BASIC_CONTENT_TYPE_FLAG)
                           ? worker_cstr(p->content_type, ctype, sizeof(ctype))
                           : "";
    msg.redelivered = m->env.redelivered;
    msg.attempt = m->attempt;
    msg.headers = w->headers;
    msg.n_headers =
        delivery_headers(p, w->headers, WORKER_MAX_HEADERS, w->scratch, sizeof(w->scratch));
    msg.queue = w->q->name;
    msg.consumer = w->q->consumer;

    m->reason[0] = '\0';
    if (w->q->handler_timeout > 0)
        alarm((unsigned)w->q->handler_timeout); /* SIGALRM kills a hung handler */
    idemd_result_t r = w->h->handle(w->state, w->db->my, &msg, m->reason, sizeof(m->reason));
    if (w->q->handler_timeout > 0)
        alarm(0);
    worker_progress(w); /* per message: a long batch is not a wedged worker */
    m->reason[sizeof(m->reason) - 1] = '\0';
    switch (r) {
    case IDEMD_RESULT_OK:
        m->outcome = WORKER_OUT_OK;
        break;
    case IDEMD_RESULT_RETRY:
        m->outcome = WORKER_OUT_RETRY;
        if (!m->reason[0])
            snprintf(m->reason, sizeof(m->reason), "handler asked to retry");
        break;
    case IDEMD_RESULT_REJECT:
        m->outcome = WORKER_OUT_REJECT;
        if (!m->reason[0])
            snprintf(m->reason, sizeof(m->reason), "handler rejected the message");
        break;
    default:
        m->outcome = WORKER_OUT_REJECT;
        snprintf(m->reason, sizeof(m->reason), "handler returned unknown result %d", (int)r);
        break;
    }
}

/*
 * One attempt at the batch's transaction. Returns DB_OK with every outcome
 * set (committed or rolled back), DB_ERR_DEADLOCK / DB_ERR_TX_LOST when the
 * whole transaction was lost and must be redone, or another error when the
 * connection cannot be trusted any more.
 */
static db_status_t worker_try_batch(worker_t *w)
{
    bool sp = w->n > 1;
    bool any_ok = false;
    char sql[64];
    db_status_t st;

    for (int i = 0; i < w->n; i++) {
        worker_msg_t *m = &w->batch[i];
        if (m->outcome == WORKER_OUT_REJECT)
            continue; /* bad id, crash-loop guard, or the handler before a redo */
        m->outcome = WORKER_OUT_PENDING;
        if (sp) {
            snprintf(sql, sizeof(sql), "SAVEPOINT m%d", i);
            if ((st = db_exec(w->db, sql)) != DB_OK)
                return st;
        }
        if (w->q->dedup == CONF_DEDUP_TABLE) {
            st = db_record(w->db, m->id, m->id_len);
            if (st == DB_DUPLICATE) {
                m->outcome = WORKER_OUT_DUPLICATE;
                continue;
            }
            if (st == DB_ERR_LOCK_TIMEOUT) {
                /* Only the statement was rolled back; another transaction holds the key. */
                m->outcome = WORKER_OUT_RETRY;
                snprintf(m->reason, sizeof(m->reason),
                         "lock wait timeout on the dedup key: another transaction holds it");
                continue;
            }
            if (st != DB_OK)
                return st;
        }
        worker_handle(w, m);
        if (m->outcome == WORKER_OUT_OK) {
            /* A handler that ignored a deadlock would have us commit a half batch. */
            if ((w->q->dedup == CONF_DEDUP_TABLE || sp) && !db_in_transaction(w->db)) {
                log_warn(
                    "transaction was rolled back under the handler (deadlock?): redoing batch");
                return DB_ERR_TX_LOST;
            }
            if (m->counted && (st = db_attempt_clear(w->db, m->id, m->id_len)) != DB_OK)
                return st;
            any_ok = true;
            continue;
        }
        if (db_classify(mysql_errno(w->db->my)) == DB_ERR_CONNECTION)
            return DB_ERR_CONNECTION;
        if (sp) {
            snprintf(sql, sizeof(sql), "ROLLBACK TO SAVEPOINT m%d", i);
            if ((st = db_exec(w->db, sql)) != DB_OK)
                return st;
        }
    }
    st = any_ok ? db_commit(w->db) : db_rollback(w->db);
    if (st == DB_OK && any_ok)
        worker_count(&w->slot->n_commits);
    return st;
}

/*
 * Crash-loop guard for a suspect (redelivered) message, which always runs
 * alone: count this start durably before the handler runs; past
 * max_attempts, dead-letter it without running the handler. 0, or -1 when
 * the database failed.
 */
static int worker_guard(worker_t *w, worker_msg_t *m)
{
    if (!m->suspect || !m->id_ok || m->id_len == 0)
        return 0; /* without an id (dedup = "none") there is nothing to count against */
    long long starts = db_attempt_bump(w->db, m->id, m->id_len);
    if (starts < 0)
        return -1;
    m->counted = true;
    /* The delivery before the first redelivery was a start too. */
    if ((unsigned)starts + 1 > m->attempt)
        m->attempt = (unsigned)starts + 1;
    if (m->attempt > (unsigned)w->q->max_attempts) {
        m->attempt = (unsigned)starts; /* handler runs so far: this one will not run it */
        m->outcome = WORKER_OUT_REJECT;
        snprintf(m->reason, sizeof(m->reason),
                 "handler crashed: redelivered %lld times without finishing (its worker died, "
                 "timed out or lost a connection, or its copy could not be published); not run "
                 "again",
                 starts);
    }
    return 0;
}

/* Run the batch's transaction, redoing it after deadlocks. 0, or -1 when the DB is unusable. */
static int worker_transact(worker_t *w)
{
    for (int i = 0; i < w->n; i++) {
        w->batch[i].outcome = WORKER_OUT_PENDING;
        w->batch[i].route = WORKER_ROUTE_NONE;
        w->batch[i].copy_ok = false;
        if (!w->batch[i].id_ok)
            w->batch[i].outcome = WORKER_OUT_REJECT;
        else if (worker_guard(w, &w->batch[i]) != 0)
            return -1;
    }
    for (int attempt = 1;; attempt++) {
        db_status_t st = worker_try_batch(w);
        if (st == DB_OK)
            return 0;
        if (st != DB_ERR_DEADLOCK && st != DB_ERR_TX_LOST)
            return -1;
        if (db_rollback(w->db) == DB_ERR_CONNECTION)
            return -1;
        if (attempt < WORKER_REDO_MAX) {
            log_info("batch of %d rolled back by a deadlock: redoing (attempt %d)", w->n,
                     attempt + 1);
            continue;
        }
        for (int i = 0; i < w->n; i++) {
            if (w->batch[i].outcome != WORKER_OUT_REJECT) {
                w->batch[i].outcome = WORKER_OUT_RETRY;
                snprintf(w->batch[i].reason, sizeof(w->batch[i].reason),
                         "deadlocked %d times in a row", WORKER_REDO_MAX);
            }
        }
        return 0;
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
static void worker_latency(worker_t *w, const worker_msg_t *m, uint64_t now_us)
{
    long long pub = delivery_header_int(&m->env.message.properties, "idemd-pub-us");
    if (pub <= 0 || (uint64_t)pub > now_us)
        return;
    __atomic_add_fetch(&w->slot->lat[worker_lat_bucket(now_us - (uint64_t)pub)], 1,
                       __ATOMIC_RELAXED);
}

/* Log one message's outcome (and where it went) and count it. */
static void worker_report(worker_t *w, const worker_msg_t *m)
{
    char pid[96], where[400];
    const char *name = worker_outcome_names[m->outcome];
    bool settled = m->outcome == WORKER_OUT_OK || m->outcome == WORKER_OUT_DUPLICATE;
    switch (m->outcome) {
    case WORKER_OUT_OK:
        worker_count(&w->slot->n_ok);
        break;
    case WORKER_OUT_DUPLICATE:
        worker_count(&w->slot->n_duplicate);
        break;
    case WORKER_OUT_RETRY:
        worker_count(&w->slot->n_retry);
        break;
    case WORKER_OUT_REJECT:
        worker_count(&w->slot->n_reject);
        break;
    default:
        break;
    }
    if (settled && !log_enabled(LOG_LEVEL_DEBUG))
        return; /* the common case: no formatting at all */
    delivery_id_printable(m->id, m->id_len, pid, sizeof(pid));
    if (settled) {
        log_fields(LOG_LEVEL_DEBUG, w->q->name, w->q->consumer, pid, w->h->name, name,
                   "outcome=%s queue=%s id=%s tag=%llu", name, w->q->name, pid,
                   (unsigned long long)m->env.delivery_tag);
        return;
    }
    switch (m->route) {
    case WORKER_ROUTE_DELAY:
        snprintf(where, sizeof(where),
                 m->copy_ok ? "retry scheduled" : "requeued (republish failed)");
        break;
    case WORKER_ROUTE_DLQ:
        snprintf(where, sizeof(where),
                 m->copy_ok ? "dead-lettered to %s" : "requeued (dead-lettering failed)",
                 w->q->dead_letter_queue);
        break;
    case WORKER_ROUTE_BROKER:
        snprintf(where, sizeof(where), "rejected to the broker");
        break;
    default:
        snprintf(where, sizeof(where), "-");
        break;
    }
    log_fields(m->route == WORKER_ROUTE_DELAY ? LOG_LEVEL_INFO : LOG_LEVEL_WARNING, w->q->name,
               w->q->consumer, pid, w->h->name, name,
               "outcome=%s queue=%s id=%s tag=%llu attempt=%u/%d handler=%s then=%s reason=%s",
               name, w->q->name, pid, (unsigned long long)m->env.delivery_tag, m->attempt,
               w->q->max_attempts, w->h->name, where, m->reason);
}

/* Decide where a retried or rejected message goes. */
static void worker_route(worker_t *w, worker_msg_t *m)
{
    if (m->outcome == WORKER_OUT_RETRY && m->attempt < (unsigned)w->q->max_attempts) {
        m->route = WORKER_ROUTE_DELAY;
        return;
    }
    if (m->outcome == WORKER_OUT_RETRY) {
        char why[sizeof(m->reason)];
        snprintf(why, sizeof(why), "gave up after %u attempts: %.400s", m->attempt, m->reason);
        memcpy(m->reason, why, sizeof(why));
    }
    m->route = w->q->dead_letter_queue ? WORKER_ROUTE_DLQ : WORKER_ROUTE_BROKER;
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
 * publish to are declared again first: someone may have deleted them, and
 * a copy to a missing queue is returned, which would requeue its message
 * for ever. 0, or -1 (logged).
 */
static int worker_open_publisher(worker_t *w)
{
    if (mq_open_publisher(&w->conf->broker, w->name, worker_tick, w, &w->pub) != 0)
        return -1;
    if (w->pub_failed && worker_declare_own(w, w->pub) != 0) {
        mq_close(w->pub);
        w->pub = NULL;
        return -1;
    }
    w->pub_failed = false;
    return 0;
}

/*
 * Publish the copies of retried and dead-lettered messages on the
 * republishing connection and wait for the broker's confirms. Sets copy_ok
 * on each copy the broker confirmed; the original of any other goes back to
 * the queue (a copy that did arrive unconfirmed is a duplicate the record
 * absorbs). Returns 1 when copies were published and confirmed, 0 when the
 * batch had none, -1 when this round failed (logged).
 */
static int worker_republish(worker_t *w)
{
    int published = 0;
    uint64_t now_ms;
    struct timespec ts;
    char delay_q[300];
    int delay_ms;

    clock_gettime(CLOCK_REALTIME, &ts);
    now_ms = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
    for (int i = 0; i < w->n; i++) {
        worker_msg_t *m = &w->batch[i];
        m->copy_index = -1;
        if (m->route != WORKER_ROUTE_DELAY && m->route != WORKER_ROUTE_DLQ)
            continue;
        if (published == 0 && w->pub && mq_service(w->pub) != 0) {
            mq_close(w->pub); /* lost while idle: open a new one */
            w->pub = NULL;
        }
        if (w->pub == NULL && worker_open_publisher(w) != 0)
            goto fail;
        if (published == 0 && mq_blocked(w->pub)) {
            /* Publish nothing: the copies would wait unconfirmed in the broker. The
             * connection stays open to hear connection.unblocked. */
            log_warn("queue %s: the broker blocks publishing (resource alarm): not "
                     "republishing this round",
                     w->q->name);
            return -1;
        }
        if (published == 0)
            mq_round_begin(w->pub);
        const char *target = m->route == WORKER_ROUTE_DLQ ? w->q->dead_letter_queue
                             : relay_delay_queue(w->q, m->attempt, delay_q, sizeof(delay_q),
                                                 &delay_ms)
                                 ?: w->q->name;
        relay_copy_t c;
        if (relay_copy_init(&c, &m->env, w->q->name, w->q->id_header, m->attempt, m->reason,
                            now_ms) != 0)
            goto fail;
        m->copy_index = mq_publish(w->pub, target, &c.props, m->env.message.body);
        relay_copy_free(&c);
        if (m->copy_index < 0)
            goto fail;
        published++;
    }
    if (published == 0)
        return 0;
    int rc = mq_wait_confirms(w->pub, WORKER_CONFIRM_MS);
    for (int i = 0; i < w->n; i++)
        w->batch[i].copy_ok =
            w->batch[i].copy_index >= 0 && mq_round_ok(w->pub, w->batch[i].copy_index);
    if (rc == 0)
        return 1;
fail:
    /* What the broker confirmed stays confirmed; the rest go back to the queue. */
    mq_close(w->pub);
    w->pub = NULL;
    w->pub_failed = true;
    return -1;
}

/*
 * Settle every delivery of the batch with the broker, in tag order. Acked:
 * ok, duplicate, and retried or rejected ones whose copy was confirmed; runs
 * of acks go as one multiple-ack (every lower tag is settled already). A
 * copy that failed: nack with requeue. No dead letter queue: nack without
 * requeue (the broker's DLX, if any). Returns 0, or -1 when the channel failed.
 */
static int worker_settle(worker_t *w)
{
    int run = 0;
    uint64_t last = 0;
    struct timespec ts;

    for (int i = 0; i < w->n; i++)
        if (w->batch[i].outcome == WORKER_OUT_RETRY || w->batch[i].outcome == WORKER_OUT_REJECT)
            worker_route(w, &w->batch[i]);
    /*
     * Only this batch's own round counts: pub_failed stays set until the
     * connection is opened again, and a batch without copies says nothing
     * about the broker, so it is neither paused nor ends the streak.
     */
    int round = worker_republish(w);
    if (round < 0) {
        /*
         * The broker would not take the copies (queue full, alarm, gone): their
         * originals go back to the queue. Never drop them; slow the round trip down
         * instead, so a broken dead letter queue is not a hot loop.
         */
        int delay = 250 << (w->pub_fail_streak < 6 ? w->pub_fail_streak : 6);
        /* Heartbeats are not answered while paused: stay under the broker's limit. */
        if (w->conf->broker.heartbeat > 0 && delay > w->conf->broker.heartbeat * 500)
            delay = w->conf->broker.heartbeat * 500;
        w->pub_fail_streak++;
        log_warn("queue %s: republishing failed %d time(s) in a row: requeueing those messages "
                 "and pausing %d ms",
                 w->q->name, w->pub_fail_streak, delay);
        worker_pause(w, delay);
    } else if (round > 0) {
        w->pub_fail_streak = 0;
    }
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t now_us = (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
    for (int i = 0; i < w->n; i++) {
        worker_msg_t *m = &w->batch[i];
        worker_report(w, m);
        if (m->outcome == WORKER_OUT_OK)
            worker_latency(w, m, now_us);
        if (m->outcome == WORKER_OUT_OK || m->outcome == WORKER_OUT_DUPLICATE || m->copy_ok) {
            run++;
            last = m->env.delivery_tag;
            continue;
        }
        if (run && mq_ack(w->mq, last, run > 1) != 0)
            return -1;
        run = 0;
        bool requeue = m->route != WORKER_ROUTE_BROKER;
        if (mq_nack(w->mq, m->env.delivery_tag, requeue) != 0)
            return -1;
    }
    if (run && mq_ack(w->mq, last, run > 1) != 0)
        return -1;
    return 0;
}

/* Prepare a received delivery: extract and check its id, work out its attempt number. */
static void worker_accept(worker_t *w, worker_msg_t *m)
{
    const amqp_basic_properties_t *p = &m->env.message.properties;
    long long attempts = delivery_header_int(p, RELAY_H_ATTEMPTS);
    long long dcount = delivery_header_int(p, "x-delivery-count");

    m->id_ok = true;
    m->id_len = 0;
    m->id[0] = '\0';
    m->reason[0] = '\0';
    m->counted = false;
    if (delivery_id(p, w->q->id_header, m->id, &m->id_len, m->reason, sizeof(m->reason)) != 0)
        m->id_ok = w->q->dedup == CONF_DEDUP_NONE; /* ids only matter for the record */
    m->attempt = attempts > 0 ? (unsigned)attempts + 1 : 1;
    /*
     * A quorum queue's x-delivery-count marks a redelivery, so the message
     * runs alone and its starts are counted. It is not an attempt count:
     * it also grows when a dying worker returns deliveries it never started.
     */
    m->suspect = m->env.redelivered || dcount > 0;
}

/* Run the handler's reconcile hook in its own transaction when it is due. */
static void worker_reconcile(worker_t *w)
{
    char err[512] = "";
    uint64_t now = worker_now_ms();
    if (!w->h->reconcile || w->conf->reconcile_interval <= 0 || w->index != 0)
        return;
    if (now < w->next_reconcile_ms)
        return;
    w->next_reconcile_ms = now + (uint64_t)w->conf->reconcile_interval * 1000;
    if (w->h->reconcile(w->state, w->db->my, err, sizeof(err)) == 0) {
        if (db_commit(w->db) == DB_OK)
            log_debug("reconcile done");
    } else {
        log_warn("handler %s: reconcile failed: %s", w->h->name, err[0] ? err : "(no reason)");
        (void)db_rollback(w->db);
    }
}

/*
 * Retention, in worker 0 of each queue when idle: delete this consumer's
 * records and crash counts older than record_retention_days, in chunks
 * (one commit each) so that no long transaction holds locks, once an hour.
 */
static void worker_purge(worker_t *w)
{
    uint64_t now = worker_now_ms();
    long long n, total = 0;
    if (w->q->record_retention_days <= 0 || w->index != 0 || now < w->next_purge_ms)
        return;
    w->next_purge_ms = now + 3600 * 1000;
    if (w->q->dedup == CONF_DEDUP_TABLE)
        do {
            n = db_purge(w->db, w->conf->database.record_table, "create_time",
                         w->q->record_retention_days, 5000);
            total += n > 0 ? n : 0;
            worker_progress(w);
        } while (n == 5000 && !worker_stop);
    do {
        n = db_purge(w->db, DB_ATTEMPT_TABLE, "updated_at", w->q->record_retention_days, 5000);
        total += n > 0 ? n : 0;
    } while (n == 5000 && !worker_stop);
    log_info("retention: deleted %lld rows older than %d days", total, w->q->record_retention_days);
}

/*
 * Take one batch (the first delivery waits up to 1 s). A suspect delivery
 * (redelivered) always runs alone, so that a message that kills its worker
 * takes no innocent batch-mates with it and its crash count is its own.
 * Returns 0, or -1 when the broker failed.
 */
static int worker_collect(worker_t *w)
{
    struct timeval tv = {1, 0};
    uint64_t deadline;
    mq_status_t st;

    w->n = 0;
    if (w->has_carry) {
        w->batch[w->n++] = w->carry;
        w->has_carry = false;
    } else {
        st = mq_next(w->mq, &tv, &w->batch[0].env);
        if (st == MQ_TIMEOUT)
            return 0;
        if (st != MQ_OK)
            return -1;
        worker_accept(w, &w->batch[w->n++]);
    }
    if (w->batch[0].suspect)
        return 0;
    deadline = worker_now_ms() + (uint64_t)w->q->batch_wait_ms;
    while (w->n < w->q->batch_size) {
        uint64_t now = worker_now_ms();
        uint64_t left = deadline > now ? deadline - now : 0;
        tv.tv_sec = (time_t)(left / 1000);
        tv.tv_usec = (suseconds_t)(left % 1000) * 1000;
        st = mq_next(w->mq, &tv, &w->batch[w->n].env);
        if (st == MQ_TIMEOUT)
            break;
        if (st != MQ_OK)
            return -1; /* what we hold goes back to the queue with the connection */
        worker_accept(w, &w->batch[w->n]);
        if (w->batch[w->n].suspect) {
            w->carry = w->batch[w->n];
            w->has_carry = true;
            break;
        }
        w->n++;
    }
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

/* Free the batch's envelopes (and the carried one when all is true). */
static void worker_release(worker_t *w, bool all)
{
    for (int i = 0; i < w->n; i++)
        amqp_destroy_envelope(&w->batch[i].env);
    w->n = 0;
    if (all && w->has_carry) {
        amqp_destroy_envelope(&w->carry.env);
        w->has_carry = false;
    }
}

/* The consume loop. Returns an exit code. */
static int worker_loop(worker_t *w)
{
    while (!worker_stop) {
        worker_progress(w);
        worker_service_pub(w);
        if (worker_collect(w) != 0) {
            worker_release(w, true);
            return WORKER_EXIT_TEMPFAIL;
        }
        if (w->n == 0) {
            worker_reconcile(w);
            worker_purge(w);
            continue;
        }
        worker_count(&w->slot->n_batches);
        if (worker_transact(w) != 0) {
            /* Unknown outcome: the broker redelivers, the record decides. */
            worker_release(w, true);
            return WORKER_EXIT_TEMPFAIL;
        }
        if (worker_settle(w) != 0) {
            worker_release(w, true);
            return WORKER_EXIT_TEMPFAIL;
        }
        worker_release(w, false);
    }
    worker_release(w, true);
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
    if (plugin_load(q->handler, &plugin, err, sizeof(err)) != 0) {
        log_error("queue '%s': %s", q->name, err);
        exit(WORKER_EXIT_CONFIG);
    }
    w.h = plugin->handler;
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

    w.batch = calloc((size_t)q->batch_size, sizeof(*w.batch));
    if (w.batch == NULL) {
        log_error("out of memory");
        _exit(WORKER_EXIT_TEMPFAIL);
    }
    code = worker_connect_db(&w);
    if (code == 0)
        code = worker_connect_mq(&w);
    if (code == 0)
        code = worker_loop(&w);
    worker_set_state(&w, WORKER_STATE_STOPPING);
    mq_close(w.mq);
    mq_close(w.pub);
    if (w.state_live && w.h->fini)
        w.h->fini(w.state);
    if (w.db)
        (void)db_rollback(w.db);
    db_close(w.db);
    free(w.batch);
    plugin_free(plugin);
    log_debug("worker exiting with code %d", code);
    exit(code);
}
