/* batch.c: collecting a batch of deliveries from the consuming connection, and what each delivery
 * says about itself (id, attempt, suspect, refused before it runs).
 */
#include "batch.h"

#include <stdio.h>
#include <string.h>

#include "delivery.h"
#include "log.h"

/* A key for a message without an id (dedup = "none"): FNV-1a of its body, for the guard. */
static void batch_body_key(const amqp_bytes_t *body, txn_msg_t *t)
{
    uint64_t h = 14695981039346656037ULL;
    for (size_t k = 0; k < body->len; k++)
        h = (h ^ ((const unsigned char *)body->bytes)[k]) * 1099511628211ULL;
    t->id_len = (size_t)snprintf(t->id, sizeof(t->id), "~body:%016llx", (unsigned long long)h);
}

/* Read the delivery's trace context; its processing span is new. Malformed means absent. */
static void batch_trace(const batch_t *b, life_msg_t *m)
{
    static trace_rng_t fixed; /* without b->rng (tests): a fixed sequence */
    const amqp_basic_properties_t *p = &m->env.message.properties;
    const char *tp = NULL, *ts = NULL, *bg = NULL;
    size_t tpl = 0, tsl = 0, bgl = 0;
    if (!delivery_header_str(p, "traceparent", &tp, &tpl))
        tp = NULL;
    if (!delivery_header_str(p, "tracestate", &ts, &tsl))
        ts = NULL;
    if (!delivery_header_str(p, "baggage", &bg, &bgl))
        bg = NULL;
    trace_ctx_read(&m->trace, tp, tpl, ts, tsl, bg, bgl,
                   tp ? trace_rng_next(b->rng ? b->rng : &fixed) : 0);
}

void batch_accept(const batch_t *b, life_msg_t *m, txn_msg_t *t)
{
    const amqp_basic_properties_t *p = &m->env.message.properties;
    unsigned attempts = 0;
    long long dcount = delivery_header_int(p, "x-delivery-count");

    *t = (txn_msg_t){.state = TXN_NEW}; /* a new message: an initialiser, not a move */
    m->no_id = false;
    m->route = TXN_ROUTE_DEFER;
    m->copy_index = -1;
    batch_trace(b, m);
    if (delivery_id(p, b->q->id_header, t->id, &t->id_len, t->reason, sizeof(t->reason)) != 0) {
        if (b->q->dedup == CONF_DEDUP_NONE) {
            m->no_id = true; /* ids only matter for the record; the guard still needs a key */
            batch_body_key(&m->env.message.body, t);
            t->reason[0] = '\0';
        } else {
            txn_move(t, TXN_REJECT);
        }
    }
    /*
     * A quorum queue's x-delivery-count marks a redelivery, so the message
     * runs alone and its starts are counted. It is not an attempt count:
     * it also grows when a dying worker returns deliveries it never started.
     */
    m->suspect = m->env.redelivered || dcount > 0;
    /* Only attempts idemd counted itself: a publisher's idemd-attempts is not believed. */
    m->trusted =
        t->id_len > 0 && copies_trusted(p, b->keys, b->q->name, t->id, t->id_len, &attempts);
    t->attempt = m->trusted ? attempts + 1 : 1;
    /*
     * Headers nested deeper than rabbitmq-c 0.14+ decodes: with such a library
     * the delivery never reaches here (worker_undecodable); with 0.11 it does,
     * and gets the same outcome: dead-lettered, never handled. Its copy leaves
     * the deep headers out (copies_copy_init), so any client can read it.
     */
    int deep = delivery_too_deep(p);
    if (deep >= 0 && t->state == TXN_NEW) {
        const amqp_bytes_t *k = &p->headers.entries[deep].key;
        char qk[300];
        txn_move(t, TXN_REJECT);
        snprintf(t->reason, sizeof(t->reason),
                 "header %s nests deeper than %d levels, which newer AMQP clients (rabbitmq-c "
                 "0.14+) refuse to decode: not handled; the dead letter leaves it out",
                 log_quote(k->bytes, k->len, qk, sizeof(qk)), DELIVERY_DEPTH_MAX);
    }
    /* A retry copy that went without its body (over the broker's max message size). */
    long long gone = m->trusted ? delivery_header_int(p, COPIES_H_BODY_DROPPED) : -1;
    if (gone > 0 && m->dropped == 0 && t->state == TXN_NEW) {
        m->dropped = (uint64_t)gone;
        txn_move(t, TXN_REJECT);
        snprintf(t->reason, sizeof(t->reason),
                 "its body of %lld bytes was dropped from its retry copy (over the broker's max "
                 "message size): not handled",
                 gone);
    }
    /* Returned so often that a broker delivery limit could delete it next: dead-letter it. */
    if (b->returns_guard && dcount >= BATCH_RETURNS_MAX && t->state == TXN_NEW) {
        txn_move(t, TXN_REJECT);
        snprintf(t->reason, sizeof(t->reason),
                 "returned to the queue %lld times (x-delivery-count): dead-lettered before a "
                 "broker delivery limit deletes it (docs/rabbitmq.md, \"Delivery limits\")",
                 dcount);
    }
    /* Over max_body_bytes: mq_next kept no body; never handled, never retried. */
    if (m->dropped && gone <= 0) {
        if (t->state == TXN_NEW)
            txn_move(t, TXN_REJECT);
        snprintf(t->reason, sizeof(t->reason),
                 "body of %llu bytes is over max_body_bytes (%d): dropped, not handled",
                 (unsigned long long)m->dropped, b->q->max_body_bytes);
    }
}

/*
 * Receive one delivery into entry i of the batch (body bounded by
 * max_body_bytes), moving it FREE -> BATCH on MQ_OK. One that cannot be
 * decoded is noted in b (the worker deals with it) and freed; the caller
 * stops collecting: the connection cannot read any more.
 */
static mq_status_t batch_next(batch_t *b, struct timeval *tv, int i)
{
    life_msg_t *m = &b->life->batch.m[i];
    char qe[300], qr[300];
    /* The slot is FREE (settle_clear_batch and life_place leave it so): clear the rest of it. Its
     * state is life_move's to change, and FREE -> BATCH below checks it. */
    *m = (life_msg_t){.state = m->state};
    mq_status_t st = b->consume.ops->next(b->consume.ctx, tv, (size_t)b->q->max_body_bytes, &m->env,
                                          &m->dropped);
    if (st == MQ_OK) {
        life_move(b->life, &b->life->batch, i, LIFE_BATCH);
        batch_accept(b, m, &b->life->batch.t[i]);
    }
    if (st != MQ_UNDECODABLE)
        return st;
    b->undecodable = true;
    b->undecodable_tag = m->env.delivery_tag;
    snprintf(b->undecodable_route, sizeof(b->undecodable_route), "exchange=%s routing_key=%s",
             log_quote(m->env.exchange.bytes, m->env.exchange.len, qe, sizeof(qe)),
             log_quote(m->env.routing_key.bytes, m->env.routing_key.len, qr, sizeof(qr)));
    amqp_destroy_envelope(&m->env);
    return st;
}

/*
 * Take one batch (the first delivery waits up to 1 s). A suspect delivery
 * (redelivered) always runs alone, so that a message that kills its worker
 * takes no innocent batch-mates with it and its crash count is its own.
 */
int batch_collect(batch_t *b)
{
    life_list_t *L = &b->life->batch;
    struct timeval tv = {b->no_wait ? 0 : 1, 0};
    uint64_t deadline;
    mq_status_t st;
    uint64_t bytes = 0;

    if (L->n > 0) {
        tv.tv_sec = 0; /* deferred from a batch cut short: do not wait for more */
    } else if (b->has_carry) {
        life_place(L, L->cap, 0);
        L->n = 1;
        b->has_carry = false;
    } else {
        st = batch_next(b, &tv, 0);
        if (st == MQ_TIMEOUT || st == MQ_UNDECODABLE)
            return 0;
        if (st != MQ_OK)
            return -1;
        L->n = 1;
    }
    if (L->m[0].suspect)
        return 0;
    for (int i = 0; i < L->n; i++)
        bytes += L->m[i].env.message.body.len;
    deadline = b->clock.ops->now_ms(b->clock.ctx) + (uint64_t)b->q->batch_wait_ms;
    /* With a delivery in the carry slot, the batch takes no more: the new ones' tags are
     * above the carried one's, and settling them with one multiple ack would ack it unrun
     * (found by the simulation, docs/simulation.md); a second carry would overwrite it. */
    while (L->n < b->batch_max && !b->has_carry) {
        uint64_t now = b->clock.ops->now_ms(b->clock.ctx);
        uint64_t left = deadline > now ? deadline - now : 0;
        tv.tv_sec = (time_t)(left / 1000);
        tv.tv_usec = (suseconds_t)(left % 1000) * 1000;
        st = batch_next(b, &tv, L->n);
        if (st == MQ_TIMEOUT || st == MQ_UNDECODABLE)
            break; /* undecodable: the batch so far runs and is settled first */
        if (st != MQ_OK)
            return -1; /* what we have goes back to the queue with the connection */
        size_t len = L->m[L->n].env.message.body.len;
        /* A suspect runs alone; a body that would pass max_batch_bytes starts the next batch. */
        if (L->m[L->n].suspect || bytes + len > (uint64_t)b->q->max_batch_bytes) {
            if (!L->m[L->n].suspect)
                log_debug("queue %s: batch stops at %d message(s), %llu bytes: the next (%zu "
                          "bytes) would pass max_batch_bytes",
                          b->q->name, L->n, (unsigned long long)bytes, len);
            life_place(L, L->n, L->cap);
            b->has_carry = true;
            break;
        }
        bytes += len;
        L->n++;
    }
    return 0;
}
