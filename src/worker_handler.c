/* worker_handler.c: a worker's calls into its handler plugin: the message as the handler sees it,
 * handle and handle_batch under handler_timeout and the crash note, and host->publish.
 */
#include "worker_int.h"
#include "clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "delivery.h"
#include "log.h"

/* A handler call that started at t0 (worker_now_us) ended: one observation of its duration,
 * with tc's trace as its bucket's exemplar (tc NULL or without a trace: none). */
static void worker_handler_time(worker_t *w, uint64_t t0, const trace_ctx_t *tc)
{
    uint64_t v = clock_mono_us() - t0;
    int b = metrics_observe_handler(&w->slot->c, v);
    worker_stage(w, METRICS_STAGE_HANDLER, v);
    if (tc && tc->has) {
        metrics_exemplar_put(&w->slot->c.handler_ex[b], tc->trace_id, tc->span_id, v,
                             clock_wall_ms());
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
    msg->has_timestamp = (p->_flags & AMQP_BASIC_TIMESTAMP_FLAG) != 0;
    msg->timestamp = msg->has_timestamp ? (int64_t)p->timestamp : 0;
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

/* The error number a handler call ended with (err: the connection's last): DB_ER_TXN_ENDED
 * when the server-status flags show idemd's transaction ended under it. */
static unsigned worker_boundary(const worker_t *w, unsigned err)
{
    /* Their own handling is right; and an error reply carries no status flags: after one the
     * flags are the last OK's. */
    db_status_t st = db_classify(err);
    if (st == DB_ERR_CONNECTION || st == DB_ERR_DEADLOCK || st == DB_ERR_TX_LOST ||
        st == DB_ERR_LOCK_TIMEOUT)
        return err;
    return db_boundary(w->db, err) == DB_BOUNDARY_ENDED ? DB_ER_TXN_ENDED : err;
}

/* Run the handler on message i (db_txn_ops_t.handle): the crash note in the slot brackets the call.
 */
idemd_result_t worker_op_handle(void *ctx, int i, txn_msg_t *t, unsigned *err)
{
    worker_t *w = ctx;
    worker_slot_t *sl = w->slot;

    worker_fill_msg(w, i, t, &w->hx.one, w->hx.scratch, sizeof(w->hx.scratch));
    w->hx.cur = i;
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
    uint64_t t0 = clock_mono_us();
    idemd_result_t r =
        w->h->handle(w->state, w->db->my, &w->hx.one.msg, t->reason, sizeof(t->reason));
    worker_handler_time(w, t0, &w->life.batch.m[i].trace);
    worker_timer_off(w);
    __atomic_store_n(&sl->in_handler, 0, __ATOMIC_RELEASE);
    *err = worker_boundary(w, mysql_errno(w->db->my));
    worker_progress(w); /* per message: a long batch is not a wedged worker */
    return r;
}

/*
 * Run the handler's handle_batch on ms[0..k-1] (db_txn_ops_t.handle_many).
 * No crash note: should the worker die in it, every message comes back
 * redelivered and runs alone through handle(), where the one at fault is
 * counted. handler_timeout bounds the whole call.
 */
int worker_op_handle_many(void *ctx, txn_msg_t *const *ms, int k, idemd_result_t *r, unsigned *err)
{
    worker_t *w = ctx;
    const size_t errlen = sizeof(ms[0]->reason);

    for (int j = 0; j < k; j++) {
        worker_fill_msg(w, (int)(ms[j] - w->life.batch.t), ms[j], &w->hx.bmsg[j],
                        w->hx.bscratch + (size_t)j * WORKER_BATCH_SCRATCH, WORKER_BATCH_SCRATCH);
        w->hx.bptr[j] = &w->hx.bmsg[j].msg;
        w->hx.bidx[j] = (int)(ms[j] - w->life.batch.t);
        w->life.batch.m[w->hx.bidx[j]].pub_seq = 0;
        r[j] = IDEMD_RESULT_OK;
        w->hx.berr[(size_t)j * errlen] = '\0';
    }
    worker_timer_on(w);
    uint64_t t0 = clock_mono_us();
    int rc = w->h->handle_batch(w->state, w->db->my, w->hx.bptr, (size_t)k, r, w->hx.berr, errlen);
    /* One observation for the batch: its exemplar is the first traced message's. */
    const trace_ctx_t *tc = NULL;
    for (int j = 0; j < k && tc == NULL; j++)
        if (w->life.batch.m[w->hx.bidx[j]].trace.has)
            tc = &w->life.batch.m[w->hx.bidx[j]].trace;
    worker_handler_time(w, t0, tc);
    worker_timer_off(w);
    *err = worker_boundary(w, mysql_errno(w->db->my));
    for (int j = 0; j < k; j++) {
        memcpy(ms[j]->reason, w->hx.berr + (size_t)j * errlen, errlen);
        ms[j]->reason[errlen - 1] = '\0';
    }
    worker_progress(w);
    return rc == 0 ? 0 : -1;
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
    if (src == &w->hx.one.msg) {
        i = w->hx.cur;
    } else if (w->hx.bmsg != NULL) {
        for (int j = 0; j < w->q->batch_size && i < 0; j++)
            if (src == &w->hx.bmsg[j].msg)
                i = w->hx.bidx[j];
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
    w->step.outbox_used = true;
    return outbox_add(w->outbox, w->life.batch.t[i].id, w->life.batch.t[i].id_len,
                      w->life.batch.m[i].pub_seq++, p, &tr, err, errlen);
}
