/* worker_conn.c: a worker's connections: the database (with the plugin's init), the consuming and
 * the republishing broker connections, the idle checks between batches, an undecodable delivery.
 */
#include "worker_int.h"
#include "clock.h"
#include "sqlh.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

#define WORKER_IDLE_PING_MS 1000 /* ping the database before a batch after this long unused */

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

/*
 * Connect to the database, retrying with capped backoff while it is down
 * (deliveries are not taken meanwhile), then start the plugin on it.
 * Returns 0, or an exit code.
 */
int worker_connect_db(worker_t *w)
{
    char err[512] = "", refused[WORKER_ERROR_MAX];
    int delay = 250, rc, quick = 40;

    worker_set_state(w, WORKER_STATE_WAITING_DB);
    while (!worker_stop) {
        rc = db_open(&w->conf->database, w->q->consumer, w->q->dedup == CONF_DEDUP_TABLE, w->index,
                     refused, sizeof(refused), &w->db);
        if (rc == 0)
            break;
        if (rc == DB_OPEN_REFUSED)
            return worker_refused(w, refused);
        /* Servers that answer but take no writes may be electing a primary (seconds): look
         * again soon, for about half a minute, then back off as for a server down. */
        if (rc == DB_OPEN_NO_PRIMARY && quick-- > 0 && delay > 500)
            delay = 500;
        worker_pause(w, delay + rand() % (delay / 2 + 1));
        delay = delay * 2 > 10000 ? 10000 : delay * 2;
    }
    if (worker_stop)
        return WORKER_EXIT_STOPPED;
    __atomic_store_n(&w->slot->db_max_connections, w->db->max_connections, __ATOMIC_RELAXED);
    w->bt.batch_max = w->q->batch_size;
    int cap = w->conf->database.galera_max_batch;
    if (w->db->galera && cap > 0 && w->bt.batch_max > cap) {
        w->bt.batch_max = cap;
        log_info("at most %d messages per batch transaction on this Galera node "
                 "(database.galera_max_batch; queue batch_size %d)",
                 cap, w->q->batch_size);
    }
    if ((rc = worker_db_start(w, true, err, sizeof(err))) != 0)
        snprintf(w->slot->error, sizeof(w->slot->error), "%s", err);
    return rc;
}

int worker_db_start(worker_t *w, bool daemon, char *err, size_t errlen)
{
    char why[512] = "";
    int rc = WORKER_EXIT_CONFIG;

    if (w->outbox)
        outbox_rebind(w->outbox, w->db);
    else if ((w->outbox = outbox_new(w->db, &w->db_ops.outbox)) == NULL) {
        snprintf(err, errlen, "out of memory");
        rc = WORKER_EXIT_TEMPFAIL;
        goto fail;
    }
    if (daemon) {
        outbox_policy_t pol = {.queue = w->q->name,
                               .dlq = w->q->dead_letter_queue,
                               .max_attempts = (unsigned)w->conf->outbox_max_attempts,
                               .backoff_ms = w->conf->outbox_backoff_ms,
                               .key = w->copies_keys.k[0]};
        outbox_set_policy(w->outbox, &pol);
        worker_connected(w, WORKER_LOST_DATABASE);
        if (db_attempt_prepare(w->db) != 0) {
            snprintf(err, errlen,
                     "cannot use table " DB_ATTEMPT_TABLE
                     " (apply sql/003_idemd_attempt.sql and sql/008_idemd_attempt_crashes.sql)");
            goto fail;
        }
        if (db_copies_keys(w->db, true, &w->copies_keys) != 0) {
            snprintf(err, errlen,
                     "cannot use the relay key in table " DB_KEY_TABLE
                     " (apply sql/007_idemd_key.sql and sql/010_idemd_key_since.sql; see the log)");
            goto fail;
        }
        w->keys_read_ms = clock_mono_ms();
    } else {
        /* A dry run signs nothing: only the trust of retry copies' attempt counts needs the
         * keys, and a letter still runs without them. */
        int kr = db_copies_keys(w->db, false, &w->copies_keys);
        if (kr < 0)
            log_warn("cannot read the relay keys: a retry copy's attempt count is not believed");
        else if (kr > 0)
            log_debug(
                "no relay key yet (no worker has connected): no retry copy can be signed yet");
        (void)db_rollback(w->db);
    }
    if (w->ord.keys && order_tables(w->db) != 0) {
        snprintf(err, errlen,
                 "queue '%s' has order_key but cannot use tables idemd_order_block and "
                 "idemd_order_waiter (apply sql/012_idemd_order.sql)",
                 w->q->name);
        goto fail;
    }
    if (w->h->init && w->h->init(plugin_host(), sqlh_settings(w->q), w->db->my, &w->state, why,
                                 sizeof(why)) != 0) {
        snprintf(err, errlen, "handler %s: init failed for queue '%s': %s", w->h->name, w->q->name,
                 why[0] ? why : "(no reason given)");
        if (daemon) {
            char qe[800];
            log_error("handler %s: init failed for queue '%s': %s", w->h->name, w->q->name,
                      why[0] ? log_quote_str(why, qe, sizeof(qe)) : "(no reason given)");
        }
        goto fail;
    }
    w->state_live = true;
    return 0;
fail:
    return rc;
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
        copies_delay_queue(w->q, (unsigned)i + 1, name, sizeof(name), &ms);
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
int worker_connect_mq(worker_t *w)
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
    w->mq->keep_classic = w->q->quorum && w->q->quorum_default;
    if (w->q->declare && mq_declare(w->mq, w->q) != 0)
        return worker_declare_failed(w);
    /* Our own queues are declared whatever declare.enabled says. */
    if (worker_declare_own(w, w->mq) != 0)
        return worker_declare_failed(w);
    w->mq->quiet = false;
    if (w->mq->n_kept_classic > 0 && w->index == 0 &&
        !__atomic_exchange_n(&w->slot->classic_warned, 1, __ATOMIC_RELAXED))
        log_warn("queue '%s': %d of its queues exist as classic queues (%s), declared before "
                 "quorum queues became the default: kept as they are. On a classic "
                 "queue a retried message whose delay expires while the queue is full, deleted "
                 "or unreachable is lost (an at-most-once hop). To move to quorum queues see "
                 "docs/rabbitmq.md, \"Moving a classic queue to quorum\"; to keep classic "
                 "queues and silence this, set declare.quorum = false",
                 w->q->name, w->mq->n_kept_classic, w->mq->kept_classic);
    if (w->mq->dead_letter_fallback && !w->q->dead_letter_policy && w->index == 0 &&
        !__atomic_exchange_n(&w->slot->dlx_warned, 1, __ATOMIC_RELAXED))
        log_warn("queue '%s' exists without the dead-letter arguments idemd declares now "
                 "(x-dead-letter-exchange \"\", x-dead-letter-routing-key \"%s\"): declared as "
                 "it is. A delivery whose headers this librabbitmq (%s) cannot decode (nested "
                 "deeper than 100 levels) is then requeued, never dropped, and the queue stops "
                 "at it. Remedy: drain and delete the queue so that idemd declares it anew, or "
                 "set a policy with dead-letter-exchange \"\" and dead-letter-routing-key \"%s\" "
                 "and declare.dead_letter_policy = true (docs/security.md)",
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
int worker_open_publisher(worker_t *w)
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
void worker_service_pub(worker_t *w)
{
    uint64_t now = clock_mono_ms();
    if (w->pub == NULL || now < w->next_pub_service_ms)
        return;
    w->next_pub_service_ms = now + 1000;
    if (mq_service(w->pub) != 0) {
        mq_close(w->pub);
        w->pub = NULL;
    }
}

/*
 * The database connection was found lost between batches (nothing of a
 * batch in flight): open a new one in place, the plugin state made anew
 * and the chores going on under the same owner. `when` says what found
 * it, for the log. 0, or -1 when the database cannot be reached.
 */
int worker_reconnect_db(worker_t *w, const char *when)
{
    log_info("database connection lost %s (%s): reconnecting", when, mysql_error(w->db->my));
    (void)worker_lose(w, WORKER_LOST_DATABASE); /* counted as a reconnect once it is back */
    if (w->state_live && w->h->fini)
        w->h->fini(w->state);
    w->state_live = false;
    w->state = NULL;
    db_close(w->db);
    w->db = NULL;
    if (worker_connect_db(w) != 0)
        return -1;
    w->db_used_ms = clock_mono_ms();
    chores_rebind(&w->chores, w->db, w->state);
    worker_set_state(w, WORKER_STATE_CONSUMING);
    return 0;
}

/*
 * Before chores and before a batch, once the connection sat unused for a
 * second: a server that closed it (wait_timeout, KILL, restart) is found by
 * a ping, not by the batch failing with 2006 and coming back as
 * redeliveries; an idle worker's pings also keep wait_timeout from
 * firing. Reconnects in place (plugin state and chores too). 0, or -1 when
 * the database cannot be reached.
 */
int worker_check_db(worker_t *w)
{
    if (clock_mono_ms() - w->db_used_ms < WORKER_IDLE_PING_MS)
        return 0;
    w->db_used_ms = clock_mono_ms();
    if (mysql_ping(w->db->my) == 0)
        return 0;
    return worker_reconnect_db(w, "while idle");
}

/*
 * Between batches, every keys_reread_ms: read the relay keys again, so that
 * a rotation (idemctl key stage / promote / retire) reaches a running
 * worker. A failed read keeps the keys held (logged): they still sign and
 * check what they did before.
 */
void worker_reread_keys(worker_t *w)
{
    copies_keys_t fresh;

    if (clock_mono_ms() - w->keys_read_ms < (uint64_t)w->keys_reread_ms)
        return;
    w->keys_read_ms = clock_mono_ms();
    w->db_used_ms = w->keys_read_ms;
    /* create: when row 1 was deleted, every worker moves to the one new key. */
    if (db_copies_keys(w->db, true, &fresh) != 0) {
        log_warn("relay keys not read again (see above): the %d held still sign and check",
                 w->copies_keys.n);
        return;
    }
    if (fresh.n != w->copies_keys.n ||
        memcmp(fresh.k, w->copies_keys.k, sizeof(fresh.k[0]) * (size_t)fresh.n) != 0)
        log_info("relay keys changed in table " DB_KEY_TABLE ": %s, %d accepted",
                 memcmp(fresh.k[0], w->copies_keys.k[0], COPIES_KEY_LEN) != 0 ? "new signing key"
                                                                              : "same signing key",
                 fresh.n);
    w->copies_keys = fresh;
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
int worker_undecodable(worker_t *w)
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
    worker_give_back(w);
    mq_close(w->mq);
    w->mq = NULL;
    (void)worker_lose(w, WORKER_LOST_BROKER); /* counted as a reconnect below */
    worker_pause(w, delay);
    if (worker_stop)
        return WORKER_EXIT_STOPPED;
    return worker_connect_mq(w);
}
