/* worker_txn.c: a worker's batch transaction: the handler calls and database steps behind
 * txn_ops_t, host->publish into the outbox, and the outbox's relay and sweep.
 */
#include "worker_int.h"

#include <signal.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "delivery.h"
#include "log.h"

#define WORKER_RELAY_SLICES 1000 /* outbox slices after a COMMIT: all the batch's rows */
#define WORKER_SWEEP_SLICES 20   /* outbox slices per sweep (500 rows, 16 MiB each) */

/* A handler call that started at t0 (worker_now_us) ended: one observation of its duration,
 * with tc's trace as its bucket's exemplar (tc NULL or without a trace: none). */
static void worker_handler_time(worker_t *w, uint64_t t0, const trace_ctx_t *tc)
{
    static const uint64_t bounds[] = METRICS_HANDLER_BOUNDS;
    uint64_t v = worker_now_us() - t0;
    int b = metrics_observe(w->slot->c.handler, &w->slot->c.handler_sum_us, bounds,
                            METRICS_HANDLER_N, v);
    if (tc && tc->has) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        metrics_exemplar_put(&w->slot->c.handler_ex[b], tc->trace_id, tc->span_id, v,
                             (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000);
    }
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
 * The delivery's tracestate and baggage as NUL-terminated strings in hm's
 * own buffer (grown as needed): "" when absent, or when out of memory.
 */
static void worker_trace_text(worker_hmsg_t *hm, const trace_ctx_t *tc)
{
    idemd_message_t *msg = &hm->msg;
    size_t need = tc->state_len + tc->baggage_len + 2;
    msg->tracestate = "";
    msg->baggage = "";
    if (tc->state == NULL && tc->baggage == NULL)
        return;
    if (need > hm->trace_cap) {
        char *b = realloc(hm->trace_text, need);
        if (b == NULL)
            return;
        hm->trace_text = b;
        hm->trace_cap = need;
    }
    char *p = hm->trace_text;
    if (tc->state) {
        memcpy(p, tc->state, tc->state_len);
        p[tc->state_len] = '\0';
        msg->tracestate = p;
        p += tc->state_len + 1;
    }
    if (tc->baggage) {
        memcpy(p, tc->baggage, tc->baggage_len);
        p[tc->baggage_len] = '\0';
        msg->baggage = p;
    }
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
    msg->traceparent = m->trace.traceparent;
    msg->trace_id = m->trace.trace_id;
    msg->span_id = m->trace.span_id;
    worker_trace_text(hm, &m->trace);
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
    __atomic_store_n(&sl->crash_gen, __atomic_load_n(&sl->spawn_gen, __ATOMIC_RELAXED),
                     __ATOMIC_RELAXED);
    __atomic_store_n(&sl->in_handler, 1, __ATOMIC_RELEASE);
    t->reason[0] = '\0';
    worker_timer_on(w);
    uint64_t t0 = worker_now_us();
    idemd_result_t r = w->h->handle(w->state, w->db->my, &w->one.msg, t->reason, sizeof(t->reason));
    worker_handler_time(w, t0, &w->life.batch.m[i].trace);
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
    /* One observation for the batch: its exemplar is the first traced message's. */
    const trace_ctx_t *tc = NULL;
    for (int j = 0; j < k && tc == NULL; j++)
        if (w->life.batch.m[w->bidx[j]].trace.has)
            tc = &w->life.batch.m[w->bidx[j]].trace;
    worker_handler_time(w, t0, tc);
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

/* A pass begins: one locked read of which of the batch's keys are blocked (order_blocked). */
static unsigned worker_order_pass(worker_t *w)
{
    int n = 0;
    for (int i = 0; i < w->life.batch.n; i++) {
        w->okeys[i].blocked = false;
        if (!w->okeys[i].has)
            continue;
        w->ids[n] = w->okeys[i].key;
        w->id_lens[n] = w->okeys[i].len;
        w->obidx[n++] = i;
    }
    unsigned err = order_blocked(w->db, w->ids, w->id_lens, n, w->oblocked);
    for (int j = 0; err == 0 && j < n; j++)
        w->okeys[w->obidx[j]].blocked = w->oblocked[j];
    return err;
}

/* The key of k may be written now: every message of the batch with that key looks at it. */
static void worker_order_touched(worker_t *w, const worker_okey_t *k)
{
    for (int i = 0; i < w->life.batch.n; i++) {
        worker_okey_t *o = &w->okeys[i];
        if (o->has && o->len == k->len && memcmp(o->key, k->key, k->len) == 0)
            o->blocked = true;
    }
}

/*
 * An ordered queue's key rows for message i at step (txn_ops_t.order,
 * order.h). A message without a key (none found, or no id) has none.
 */
static unsigned worker_op_order(void *ctx, int i, txn_msg_t *t, txn_order_step_t step, bool *wait)
{
    worker_t *w = ctx;
    worker_okey_t *k = &w->okeys[i];
    const conf_queue_t *q = w->q;
    order_place_t place = ORDER_FREE;
    unsigned err = 0;

    *wait = false;
    if (step == TXN_ORDER_PASS)
        return worker_order_pass(w);
    if (!k->has)
        return 0;
    /* What follows may write the key's rows: the batch's later messages of it look. */
    if (step == TXN_ORDER_WAIT || step == TXN_ORDER_FAILED ||
        (step == TXN_ORDER_DONE && !(k->free && t->state == TXN_HANDLED)))
        worker_order_touched(w, k);
    switch (step) {
    case TXN_ORDER_PASS:
        break;
    case TXN_ORDER_CHECK:
        if (!k->blocked) { /* free at the pass's start, and nothing wrote it since */
            k->free = true;
            return 0;
        }
        err = order_check(w->db, k->key, k->len, t->id, t->id_len, &place);
        *wait = place == ORDER_WAIT;
        k->free = err == 0 && place == ORDER_FREE;
        break;
    case TXN_ORDER_WAIT:
        err = order_wait(w->db, k->key, k->len, t->id, t->id_len);
        break;
    case TXN_ORDER_DONE:
        /* Free at its check, and the only consumer (workers = 1, single active consumer):
         * nothing blocked the key since. A duplicate had no check: it looks. */
        if (!(k->free && t->state == TXN_HANDLED))
            err = order_done(w->db, k->key, k->len, t->id, t->id_len, false);
        break;
    case TXN_ORDER_FAILED:
        if (txn_route(t, q->max_attempts, q->dead_letter_queue != NULL) == TXN_ROUTE_DELAY)
            err = order_block(w->db, k->key, k->len, t->id, t->id_len);
        else
            err = order_done(w->db, k->key, k->len, t->id, t->id_len,
                             q->order_dead_letter == CONF_ORDER_DL_HOLD);
        break;
    }
    return err;
}

/* The server's message for the statement that failed last (txn_ops_t.error_text). */
static const char *worker_op_error_text(void *ctx)
{
    worker_t *w = ctx;
    return mysql_error(w->db->my);
}

static const txn_ops_t worker_txn_ops = {
    worker_op_exec, worker_op_record,      worker_op_clear,        worker_op_handle,
    worker_op_now,  worker_op_record_many, worker_op_find_records, worker_op_handle_many,
    NULL,           worker_op_error_text,
};

static const txn_ops_t worker_txn_ops_ordered = {
    worker_op_exec,  worker_op_record,      worker_op_clear,        worker_op_handle,
    worker_op_now,   worker_op_record_many, worker_op_find_records, worker_op_handle_many,
    worker_op_order, worker_op_error_text,
};

/*
 * An ordered queue: find each batch entry's key afresh (entries move
 * between batches). One without it is bad input: dead-lettered with the
 * reason, never handled, never dropped.
 */
static void worker_order_keys(worker_t *w)
{
    for (int i = 0; i < w->life.batch.n; i++) {
        life_msg_t *m = &w->life.batch.m[i];
        txn_msg_t *t = &w->life.batch.t[i];
        worker_okey_t *k = &w->okeys[i];
        char why[sizeof(t->reason)];
        k->has = false;
        k->free = false;
        if (m->no_id || t->id_len == 0)
            continue;
        if (order_key_of(w->q->order_key, &m->env.message.properties, m->env.message.body, k->key,
                         &k->len, why, sizeof(why)) == 0) {
            k->has = true;
        } else if (t->state == TXN_NEW) {
            txn_move(t, TXN_REJECT);
            memcpy(t->reason, why, sizeof(why));
        }
    }
}

/* Keyless entries first, then by key, byte for byte; equal keys in batch order. */
static int worker_okey_cmp(const void *a, const void *b)
{
    const worker_okey_t *x = *(const worker_okey_t *const *)a,
                        *y = *(const worker_okey_t *const *)b;
    int c = (int)x->has - (int)y->has;
    if (c == 0 && x->has) {
        c = memcmp(x->key, y->key, x->len < y->len ? x->len : y->len);
        if (c == 0)
            c = x->len < y->len ? -1 : x->len > y->len;
    }
    return c != 0 ? c : (x > y) - (x < y);
}

/*
 * An ordered queue runs its batch key by key, in the keys' byte order (a
 * key's own messages in delivery order): rows a handler writes per key, and
 * the key rows, are then locked in one order by every ordered queue, so two
 * queues whose messages share keys do not deadlock on them (docs/ordering.md,
 * tests/chaos/order_pair). Settling keeps delivery order. Sets w->oseq.
 */
static void worker_order_seq(worker_t *w)
{
    int n = w->life.batch.n;
    const worker_okey_t *p[n > 0 ? n : 1];

    for (int i = 0; i < n; i++)
        p[i] = &w->okeys[i];
    qsort(p, (size_t)n, sizeof(p[0]), worker_okey_cmp);
    for (int j = 0; j < n; j++)
        w->oseq[j] = (int)(p[j] - w->okeys);
}

/*
 * host->publish for the message being handled (plugin_set_publisher): an
 * outbox row in the open transaction, with the id derived from the source
 * message's id and this call's index. 0, or -1 with the reason in err.
 */
int worker_publish(void *ctx, MYSQL *db, const idemd_message_t *src, const idemd_publish_t *p,
                   char *err, size_t errlen)
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
    /* The context is captured now, not when the relay sends: the onward message's own span
     * (a child of the processing span) and the source's tracestate and baggage. */
    const trace_ctx_t *tc = &w->life.batch.m[i].trace;
    char child[TRACE_PARENT_LEN + 1];
    outbox_trace_t tr = {NULL, tc->state, tc->state_len, tc->baggage, tc->baggage_len};
    if (trace_child(tc, trace_rng_next(&w->rng), child))
        tr.traceparent = child;
    w->outbox_used = true;
    return outbox_add(w->outbox, w->life.batch.t[i].id, w->life.batch.t[i].id_len,
                      w->life.batch.m[i].pub_seq++, p, &tr, err, errlen);
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

/* Publish what the outbox holds (outbox_depth) in the slot, for /status and metrics. */
static void worker_show_depth(worker_t *w, const outbox_depth_t *d)
{
    __atomic_store_n(&w->slot->outbox_rows, (int64_t)d->rows, __ATOMIC_RELAXED);
    __atomic_store_n(&w->slot->outbox_retrying, (int64_t)d->retrying, __ATOMIC_RELAXED);
    __atomic_store_n(&w->slot->outbox_exhausted, (int64_t)d->exhausted, __ATOMIC_RELAXED);
    __atomic_store_n(&w->slot->outbox_oldest_us, (int64_t)(d->oldest_s * 1e6), __ATOMIC_RELAXED);
    __atomic_store_n(&w->slot->outbox_seen_ms, worker_now_ms(), __ATOMIC_RELAXED);
}

/*
 * Before the sweeper takes its lease: count the consumer's outbox rows (one
 * read, its transaction rolled back) and show them. 1 when there are rows
 * to look at, 0 when none, -1 when the database failed.
 */
int worker_sweep_peek(void *arg)
{
    worker_t *w = arg;
    outbox_depth_t d;
    if (outbox_depth(w->outbox, &d) != 0)
        return db_classify(mysql_errno(w->db->my)) == DB_ERR_CONNECTION ? -1 : 1;
    worker_show_depth(w, &d);
    return d.rows > 0 ? 1 : 0;
}

/* The outbox sweeper (a chore, one runner at a time): rows a dead worker left behind. */
int worker_sweep(void *arg)
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
    if (outbox_depth(w->outbox, &d) == 0)
        worker_show_depth(w, &d);
    return 0;
}

/*
 * Run the batch's transaction (txn.c) after the crash guard. 0 when every
 * message that ran has its outcome; -1 when the database cannot be
 * trusted (nothing may be acked: the broker redelivers, the record decides).
 */
int worker_transact(worker_t *w)
{
    txn_t t;
    int held = 0;

    for (int i = 0; i < w->life.batch.n; i++)
        if (guard_check(&w->guard, &w->life.batch.m[i], &w->life.batch.t[i]) != 0)
            return -1;
    memset(&t, 0, sizeof(t));
    t.ops = w->okeys ? &worker_txn_ops_ordered : &worker_txn_ops;
    t.ctx = w;
    t.record = w->q->dedup == CONF_DEDUP_TABLE;
    /* One record INSERT per batch; per-message savepoints only after a failure, and for a
     * minute after handlers were too slow to finish a batch within the limit that way. An
     * ordered queue goes message by message: each one's key is looked at before it runs. */
    t.bulk = worker_now_ms() >= w->bulk_off_until_ms && w->okeys == NULL;
    t.batch = w->bmsg != NULL && w->okeys == NULL;
    if (w->okeys) {
        worker_order_keys(w);
        worker_order_seq(w);
        t.seq = w->oseq;
    }
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
    for (int i = 0; i < w->life.batch.n; i++) {
        held += w->life.batch.t[i].state == TXN_NEW;
        /* A redelivered message that only waited for its key never started its handler. */
        if (w->life.batch.t[i].state == TXN_WAIT)
            guard_finished(&w->guard, &w->life.batch.t[i]);
    }
    if (t.cut_short)
        log_debug("batch of %d ran past %llu ms: settling %d, keeping %d for the next",
                  w->life.batch.n, (unsigned long long)t.limit_ms, w->life.batch.n - held, held);
    return 0;
}
