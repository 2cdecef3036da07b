/* settle.c: past COMMIT: each delivery of a batch acked, copied (retry tier or dead letter queue)
 * then acked, held, or requeued; the held list's copies tried again.
 */
#include "settle.h"

#include <stdio.h>
#include <string.h>

#include "delivery.h"
#include "log.h"
#include "copies.h"

static void settle_count(uint64_t *counter)
{
    __atomic_add_fetch(counter, 1, __ATOMIC_RELAXED);
}

/* Log delivery i's outcome (and where it went) and count it. */
static void settle_report(settle_t *s, int i)
{
    const life_msg_t *m = &s->life->batch.m[i];
    const txn_msg_t *t = &s->life->batch.t[i];
    const conf_queue_t *q = s->q;
    char pid[96], where[400];
    const char *name = txn_outcome_name(t->state);
    bool settled = m->route == TXN_ROUTE_ACK;
    bool copied = m->state == LIFE_COPIED;
    switch (t->state) {
    case TXN_COMMITTED:
        settle_count(&s->c->n_ok);
        break;
    case TXN_DUPLICATE:
        settle_count(&s->c->n_duplicate);
        break;
    case TXN_RETRY:
        settle_count(&s->c->n_retry);
        break;
    case TXN_REJECT:
        settle_count(&s->c->n_reject);
        break;
    case TXN_WAIT:
        break; /* ordered queue: not an outcome, its key waits (logged at debug) */
    default:
        return; /* deferred to the next batch: nothing happened to it yet */
    }
    if ((settled || t->state == TXN_WAIT) && !log_enabled(LOG_LEVEL_DEBUG))
        return; /* the common case: no formatting at all */
    /* Every value from the message, the handler or the config is quoted (log_quote): an id
     * or a reason can never forge a field or a line. The journal gets the raw id. */
    const char *id = m->no_id ? NULL : t->id;
    size_t id_len = m->no_id ? 0 : t->id_len;
    char qq[300], qh[200], qw[500], qr[1200], tt[80] = "";
    /* The processing span (idemd's, per delivery), not the incoming parent: docs/monitoring.md. */
    const trace_ctx_t *tr = &m->trace;
    if (tr->has)
        snprintf(tt, sizeof(tt), " trace_id=%s span_id=%s", tr->trace_id, tr->span_id);
    delivery_id_printable(t->id, id_len, pid, sizeof(pid));
    log_quote_str(q->name, qq, sizeof(qq));
    if (settled) {
        log_fields_trace(LOG_LEVEL_DEBUG, q->name, q->consumer, id, id_len, s->handler, name,
                         tr->trace_id, tr->span_id, "outcome=%s queue=%s id=%s tag=%llu%s", name,
                         qq, pid, (unsigned long long)m->env.delivery_tag, tt);
        return;
    }
    switch (m->route) {
    case TXN_ROUTE_DELAY:
        snprintf(where, sizeof(where), "%s",
                 !copied                ? "held (republish failed)"
                 : t->state == TXN_WAIT ? "waiting for its order key"
                                        : "retry scheduled");
        break;
    case TXN_ROUTE_DLQ:
        snprintf(where, sizeof(where),
                 copied ? "dead-lettered to %s" : "held (dead-lettering failed)",
                 q->dead_letter_queue);
        break;
    case TXN_ROUTE_BROKER:
        snprintf(where, sizeof(where), "rejected to the broker");
        break;
    default:
        snprintf(where, sizeof(where), "-");
        break;
    }
    log_fields_trace(
        t->state == TXN_WAIT          ? LOG_LEVEL_DEBUG
        : m->route == TXN_ROUTE_DELAY ? LOG_LEVEL_INFO
                                      : LOG_LEVEL_WARNING,
        q->name, q->consumer, id, id_len, s->handler, name, tr->trace_id, tr->span_id,
        "outcome=%s queue=%s id=%s tag=%llu attempt=%u/%d handler=%s then=%s reason=%s%s", name, qq,
        pid, (unsigned long long)m->env.delivery_tag, t->attempt, q->max_attempts,
        log_quote_str(s->handler, qh, sizeof(qh)), log_quote_str(where, qw, sizeof(qw)),
        log_quote_str(t->reason, qr, sizeof(qr)), tt);
}

/*
 * Decide where delivery i goes (txn_route) and move it there: ACK, NACK,
 * COPY, or DEFERRED (not started); saying so in the reason of a last retry.
 */
static void settle_route(settle_t *s, int i)
{
    life_t *l = s->life;
    txn_msg_t *t = &l->batch.t[i];
    life_msg_t *m = &l->batch.m[i];
    static const life_state_t to[] = {
        [TXN_ROUTE_ACK] = LIFE_ACK,        [TXN_ROUTE_DELAY] = LIFE_COPY,
        [TXN_ROUTE_DLQ] = LIFE_COPY,       [TXN_ROUTE_BROKER] = LIFE_NACK,
        [TXN_ROUTE_DEFER] = LIFE_DEFERRED,
    };
    m->route = txn_route(t, s->q->max_attempts, s->q->dead_letter_queue != NULL);
    if (t->state == TXN_RETRY && m->route != TXN_ROUTE_DELAY) {
        char why[sizeof(t->reason)];
        snprintf(why, sizeof(why), "gave up after %u attempts: %.400s", t->attempt, t->reason);
        memcpy(t->reason, why, sizeof(why));
    }
    life_move(l, &l->batch, i, to[m->route]);
}

/* Count the copies of list's entries that needed one: confirmed by the broker, or not. */
static void settle_count_copies(settle_t *s, const life_list_t *list)
{
    for (int i = 0; i < list->n; i++) {
        const life_msg_t *m = &list->m[i];
        if (m->route != TXN_ROUTE_DELAY && m->route != TXN_ROUTE_DLQ)
            continue;
        if (m->state != LIFE_COPIED && m->state != LIFE_REFUSED)
            continue;
        int kind = m->route == TXN_ROUTE_DLQ ? METRICS_COPY_DEAD_LETTER : METRICS_COPY_RETRY;
        settle_count(&s->c->n_copies[kind][m->state == LIFE_COPIED ? METRICS_COPY_PUBLISHED
                                                                   : METRICS_COPY_REFUSED]);
    }
}

/*
 * End a round on list: every entry still COPY or COPYING goes COPIED when
 * the broker confirmed its copy (ok), else REFUSED; on the held list a
 * REFUSED entry goes back to HELD.
 */
static void settle_round_end(settle_t *s, life_list_t *list, bool confirmed)
{
    life_t *l = s->life;
    for (int i = 0; i < list->n; i++) {
        life_msg_t *m = &list->m[i];
        if (m->state == LIFE_COPYING)
            life_move(l, list, i,
                      confirmed && s->pub.ops->round_ok(s->pub.ctx, m->copy_index) ? LIFE_COPIED
                                                                                   : LIFE_REFUSED);
        else if (m->state == LIFE_COPY || (m->state == LIFE_HELD && !confirmed))
            life_move(l, list, i, LIFE_REFUSED);
    }
}

/* After a round on the held list: its refused entries are held again. */
static void settle_rehold(settle_t *s, life_list_t *list)
{
    if (list != &s->life->held)
        return;
    for (int i = 0; i < list->n; i++)
        if (list->m[i].state == LIFE_REFUSED)
            life_move(s->life, list, i, LIFE_HELD);
}

/*
 * Publish the copies of list's entries in state from (COPY in the batch,
 * HELD on the held list) on the publishing connection and wait for the
 * broker's confirms: each goes COPIED or REFUSED (the caller holds or
 * requeues the original of a refused one; a copy that did arrive
 * unconfirmed is a duplicate the record absorbs). Returns 1 when copies
 * were published and confirmed, 0 when there were none, -1 when this
 * round failed (logged).
 */
static int settle_republish(settle_t *s, life_list_t *list, life_state_t from)
{
    life_t *l = s->life;
    const conf_queue_t *q = s->q;
    int published = 0, rc = -1;
    uint64_t now_ms = s->clock.ops->wall_ms(s->clock.ctx);
    char delay_q[300];
    int delay_ms;

    for (int i = 0; i < list->n; i++) {
        life_msg_t *m = &list->m[i];
        txn_msg_t *t = &list->t[i];
        if (m->state != from)
            continue;
        if (published == 0 && s->pub.ops->open(s->pub.ctx) != 0)
            goto fail;
        if (published == 0 && s->pub.ops->blocked(s->pub.ctx)) {
            /* Publish nothing: the copies would wait unconfirmed in the broker. The
             * connection stays open to hear connection.unblocked. */
            log_warn("queue %s: the broker blocks publishing (resource alarm): not "
                     "republishing this round",
                     q->name);
            settle_round_end(s, list, false);
            settle_rehold(s, list);
            return -1;
        }
        if (published == 0)
            s->pub.ops->round_begin(s->pub.ctx);
        /* A waiting message of an ordered queue goes to the first delay queue, and its wait is
         * no attempt: its copy carries the attempts made before it. */
        bool waits = t->state == TXN_WAIT;
        const char *target = m->route == TXN_ROUTE_DLQ
                                 ? q->dead_letter_queue
                                 : copies_delay_queue(q, waits ? 1 : t->attempt, delay_q,
                                                     sizeof(delay_q), &delay_ms)
                                       ?: q->name;
        copies_copy_t c;
        amqp_bytes_t body = m->env.message.body;
        if (copies_copy_init(&c, &m->env, q->name, q->id_header, t->id, t->id_len, m->trusted,
                             s->key, waits ? t->attempt - 1 : t->attempt, t->reason, now_ms) != 0)
            goto fail;
        if (s->max_message > 0 && body.len > s->max_message) {
            /* The broker would refuse the copy and close the channel: it goes without it. */
            log_warn("queue %s: the copy of message tag=%llu to '%s' goes without its body of "
                     "%zu bytes: over the broker's max message size (%llu bytes)",
                     q->name, (unsigned long long)m->env.delivery_tag, target, body.len,
                     (unsigned long long)s->max_message);
            copies_copy_body_dropped(&c, body.len);
            body = amqp_empty_bytes;
        } else if (m->dropped) {
            copies_copy_body_dropped(&c, m->dropped);
        }
        int index = s->pub.ops->publish(s->pub.ctx, "", target, &c.props, body);
        copies_copy_free(&c);
        if (index < 0)
            goto fail;
        life_move(l, list, i, LIFE_COPYING);
        m->copy_index = index;
        published++;
    }
    if (published == 0)
        return 0;
    rc = s->pub.ops->wait_confirms(s->pub.ctx, SETTLE_CONFIRM_MS);
    settle_round_end(s, list, true);
    settle_count_copies(s, list);
    settle_rehold(s, list);
    if (rc == 0)
        return 1;
    goto close;
fail:
    settle_round_end(s, list, false);
    settle_count_copies(s, list);
    settle_rehold(s, list);
close:
    /* A copy refused for its size: the next round sends such copies without their body. */
    if (s->pub.ops->max_message(s->pub.ctx) > 0)
        s->max_message = s->pub.ops->max_message(s->pub.ctx);
    /* What the broker confirmed stays confirmed; the rest are held or requeued. */
    s->pub.ops->close(s->pub.ctx);
    return -1;
}

/*
 * Ack entries from..to-1 of the batch (all ACK or COPIED) and move them
 * SETTLED: one multiple-ack when nothing is held and no lower entry of the
 * batch is deferred (gap), so every lower tag is settled already; else one
 * ack each, so that no held or deferred delivery is acked with them. 0, or -1.
 */
static int settle_ack_run(settle_t *s, int from, int to, bool gap)
{
    life_t *l = s->life;
    if (from >= to)
        return 0;
    if (l->held.n == 0 && !gap) {
        if (s->consume.ops->ack(s->consume.ctx, l->batch.m[to - 1].env.delivery_tag,
                                to - from > 1) != 0)
            return -1;
    } else {
        for (int i = from; i < to; i++)
            if (s->consume.ops->ack(s->consume.ctx, l->batch.m[i].env.delivery_tag, false) != 0)
                return -1;
    }
    for (int i = from; i < to; i++)
        life_move(l, &l->batch, i, LIFE_SETTLED);
    return 0;
}

int settle_retry_held(settle_t *s)
{
    life_t *l = s->life;
    const conf_queue_t *q = s->q;
    uint64_t now = s->clock.ops->now_ms(s->clock.ctx);
    if (l->held.n == 0 || now < s->held_next_ms)
        return 0;
    if (settle_republish(s, &l->held, LIFE_HELD) < 0) {
        int delay = 250 << (s->held_streak < 6 ? s->held_streak : 6);
        s->held_streak++;
        log_warn("queue %s: %d message(s) held: their copies were refused again (%d time(s) in "
                 "a row); next try in %d ms",
                 q->name, l->held.n, s->held_streak, delay);
        s->held_next_ms = s->clock.ops->now_ms(s->clock.ctx) + (uint64_t)delay;
    } else {
        s->held_streak = 0;
        s->held_next_ms = 0;
    }
    for (int i = 0; i < l->held.n; i++) {
        life_msg_t *m = &l->held.m[i];
        if (m->state != LIFE_COPIED)
            continue;
        if (s->consume.ops->ack(s->consume.ctx, m->env.delivery_tag, false) != 0)
            return -1;
        life_move(l, &l->held, i, LIFE_SETTLED);
        log_info("queue %s: held message tag=%llu: copy confirmed, acked", q->name,
                 (unsigned long long)m->env.delivery_tag);
    }
    life_prune(l);
    if (l->held.n == 0)
        s->held_next_ms = 0;
    return 0;
}

/*
 * Hold entry i of the batch (its copy was refused), or requeue it when the
 * held list is full. Either way its finished run's start is taken back
 * (guard_finished): a requeue is not a start that died.
 */
static int settle_hold(settle_t *s, int i, int *requeued)
{
    life_t *l = s->life;
    /* Its run finished here: should it come back redelivered, that is not a start that died. */
    if (s->guard)
        guard_finished(s->guard, &l->batch.t[i]);
    if (life_move(l, &l->batch, i, LIFE_HELD)) {
        if (s->held_next_ms == 0)
            s->held_next_ms = s->clock.ops->now_ms(s->clock.ctx) + 250;
        return 0;
    }
    (*requeued)++;
    if (s->consume.ops->nack(s->consume.ctx, l->batch.m[i].env.delivery_tag, true) != 0)
        return -1;
    life_move(l, &l->batch, i, LIFE_REQUEUED);
    return 0;
}

int settle_batch(settle_t *s)
{
    life_t *l = s->life;
    life_list_t *B = &l->batch;
    int from = 0, requeued = 0;
    bool gap = false;

    for (int i = 0; i < B->n; i++)
        settle_route(s, i);
    int round = settle_republish(s, B, LIFE_COPY);
    int i;
    for (i = 0; i < B->n; i++) {
        life_msg_t *m = &B->m[i];
        settle_report(s, i);
        if (m->state == LIFE_ACK || m->state == LIFE_COPIED)
            continue;
        if (settle_ack_run(s, from, i, gap) != 0)
            return -1;
        from = i + 1;
        if (m->state == LIFE_DEFERRED) {
            gap = true; /* the batch was cut short: it runs in the next; no ack passes it */
        } else if (m->state == LIFE_NACK) {
            if (s->consume.ops->nack(s->consume.ctx, m->env.delivery_tag, false) != 0)
                return -1;
            life_move(l, B, i, LIFE_SETTLED);
        } else if (settle_hold(s, i, &requeued) != 0) {
            return -1;
        }
    }
    if (settle_ack_run(s, from, i, gap) != 0)
        return -1;
    if (round < 0 && requeued == 0) {
        s->pub_fail_streak++;
        uint64_t now = s->clock.ops->now_ms(s->clock.ctx);
        log_warn("queue %s: republishing failed %d time(s) in a row: %d message(s) held, their "
                 "copies tried again from %llu ms on; other messages go on",
                 s->q->name, s->pub_fail_streak, l->held.n,
                 (unsigned long long)(s->held_next_ms > now ? s->held_next_ms - now : 0));
    } else if (round < 0) {
        /*
         * The held list is full and the broker still will not take the copies
         * (queue full, alarm, gone): those originals went back to the queue.
         * Never drop them; slow the round trip down instead, so that a broken
         * dead letter queue is not a hot loop.
         */
        int delay = 250 << (s->pub_fail_streak < 6 ? s->pub_fail_streak : 6);
        /* Heartbeats are not answered while paused: stay under the broker's limit. */
        if (s->heartbeat > 0 && delay > s->heartbeat * 500)
            delay = s->heartbeat * 500;
        s->pub_fail_streak++;
        log_warn("queue %s: republishing failed %d time(s) in a row with %d message(s) held: "
                 "requeueing %d and pausing %d ms",
                 s->q->name, s->pub_fail_streak, l->held.n, requeued, delay);
        s->clock.ops->pause(s->clock.ctx, delay);
    } else if (round > 0) {
        s->pub_fail_streak = 0;
    }
    return 0;
}

void settle_clear_batch(settle_t *s)
{
    life_t *l = s->life;
    life_list_t *B = &l->batch;
    int k = 0;
    for (int i = 0; i < B->n; i++) {
        life_msg_t *m = &B->m[i];
        if (m->state != LIFE_DEFERRED) {
            if (m->state != LIFE_GONE)
                amqp_destroy_envelope(&m->env);
            life_move(l, B, i, LIFE_FREE);
            continue;
        }
        life_move(l, B, i, LIFE_BATCH);
        life_place(B, i, k++);
    }
    B->n = k;
}
