/* sim_mq.c: the simulated broker: queues, prefetch, acks and nacks, redelivery after a close,
 * a delay tier and dead-lettering, quorum delivery limits, and a confirm-mode publisher whose
 * copies may be returned, nacked or lost with the channel.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pubround.h"
#include "sim.h"

sim_mq_t sim_mq;

#define SIM_DELIVERY_LIMIT 20 /* RabbitMQ 4.x quorum queues: the default delivery-limit */

void sim_bmsg_free(sim_bmsg_t *m)
{
    if (m->pool == NULL)
        return;
    empty_amqp_pool(m->pool);
    free(m->pool);
    m->pool = NULL;
}

void sim_mq_reset(void)
{
    for (int q = 0; q < SQ_N; q++)
        for (int i = 0; i < sim_mq.qn[q]; i++)
            sim_bmsg_free(&sim_mq.q[q][i]);
    for (int i = 0; i < sim_mq.n_unacked; i++)
        sim_bmsg_free(&sim_mq.unacked[i].m);
    memset(&sim_mq, 0, sizeof(sim_mq));
    sim_mq.next_tag = 1;
}

static const char *mq_qname(sim_queue_t q)
{
    static const char *names[SQ_N] = {"main", "delay", "dlq", "broker-dlx", "downstream"};
    return names[q];
}

void sim_mq_put(sim_queue_t q, const sim_bmsg_t *m)
{
    if (sim_mq.qn[q] >= SIM_QCAP) {
        sim_violation("memory: queue %s passed %d messages", mq_qname(q), SIM_QCAP);
        sim_bmsg_free((sim_bmsg_t *)m);
        return;
    }
    sim_mq.q[q][sim_mq.qn[q]++] = *m;
}

/* Put m back at the head of SQ_MAIN (a classic queue's requeue keeps its place). */
static void mq_put_head(const sim_bmsg_t *m)
{
    if (sim_mq.qn[SQ_MAIN] >= SIM_QCAP) {
        sim_violation("memory: queue main passed %d messages", SIM_QCAP);
        return;
    }
    memmove(&sim_mq.q[SQ_MAIN][1], &sim_mq.q[SQ_MAIN][0],
            (size_t)sim_mq.qn[SQ_MAIN] * sizeof(sim_bmsg_t));
    sim_mq.q[SQ_MAIN][0] = *m;
    sim_mq.qn[SQ_MAIN]++;
}

/* A delivery comes back to the queue (nack with requeue, or its channel closed). */
static void mq_return(sim_bmsg_t m)
{
    m.redelivered = true;
    if (sim.o.quorum) {
        m.dcount++;
        if (m.dcount > sim.truth[m.id].max_dcount)
            sim.truth[m.id].max_dcount = m.dcount;
        if (sim.o.rmq4 && m.dcount >= SIM_DELIVERY_LIMIT) {
            /* 4.x: past the delivery limit the broker dead-letters it (the queue has idemd's
             * dead-letter arguments) or, without them, drops it. */
            if (sim.o.has_dlq) {
                snprintf(m.reason, sizeof(m.reason), "delivery_limit (x-delivery-count %d)",
                         m.dcount);
                sim_log("broker: m%d dead-lettered by the delivery limit", m.id);
                sim_mq_put(SQ_BDLX, &m);
            } else {
                sim_log("broker: m%d dropped by the delivery limit", m.id);
                sim_mq.dropped++;
                sim_bmsg_free(&m);
            }
            return;
        }
        sim_mq_put(SQ_MAIN, &m); /* a quorum queue's return goes to the back */
        return;
    }
    mq_put_head(&m);
}

bool sim_mq_next(sim_delivery_t *d)
{
    if (sim_mq.n_unacked >= sim.o.prefetch || sim_mq.qn[SQ_MAIN] == 0 || sim_mq.cancelled)
        return false;
    d->m = sim_mq.q[SQ_MAIN][0];
    memmove(&sim_mq.q[SQ_MAIN][0], &sim_mq.q[SQ_MAIN][1],
            (size_t)--sim_mq.qn[SQ_MAIN] * sizeof(sim_bmsg_t));
    d->tag = sim_mq.next_tag++;
    /* --bug auto_ack: a consumer with no_ack; the broker keeps the tag (settling it is harmless)
     * but will not give the message back. */
    d->auto_acked = sim.bug.auto_ack && sim.o.dedup_none;
    sim_mq.unacked[sim_mq.n_unacked++] = *d;
    sim_log("broker: deliver m%d tag=%llu%s dcount=%d attempts=%u", d->m.id,
            (unsigned long long)d->tag, d->m.redelivered ? " redelivered" : "", d->m.dcount,
            d->m.attempts);
    return true;
}

/* Take delivery tag out of the unacked list into *m; false when the channel has no such tag. */
static bool mq_take(uint64_t tag, sim_bmsg_t *m)
{
    for (int i = 0; i < sim_mq.n_unacked; i++) {
        if (sim_mq.unacked[i].tag != tag)
            continue;
        *m = sim_mq.unacked[i].m;
        memmove(&sim_mq.unacked[i], &sim_mq.unacked[i + 1],
                (size_t)(sim_mq.n_unacked - i - 1) * sizeof(sim_delivery_t));
        sim_mq.n_unacked--;
        return true;
    }
    /* RabbitMQ closes the channel: 406 PRECONDITION_FAILED - unknown delivery tag. */
    sim_violation("settle of unknown delivery tag %llu (acked twice?)", (unsigned long long)tag);
    return false;
}

int sim_mq_ack(uint64_t tag, bool multiple)
{
    sim_bmsg_t m;
    sim_maybe_die("basic.ack");
    if (!multiple) {
        if (!mq_take(tag, &m))
            return -1;
        sim_log("broker: ack tag=%llu (m%d)", (unsigned long long)tag, m.id);
        sim_bmsg_free(&m);
        sim_on_ack(m.id);
        return 0;
    }
    sim_delivery_t gone[SIM_PREFETCH];
    int k = 0, n = 0;
    for (int i = 0; i < sim_mq.n_unacked; i++) {
        if (sim_mq.unacked[i].tag > tag)
            sim_mq.unacked[k++] = sim_mq.unacked[i];
        else
            gone[n++] = sim_mq.unacked[i];
    }
    sim_mq.n_unacked = k;
    if (n == 0) {
        sim_violation("multiple ack up to tag %llu settles nothing", (unsigned long long)tag);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        sim_log("broker: ack tag=%llu (m%d, multiple up to %llu)", (unsigned long long)gone[i].tag,
                gone[i].m.id, (unsigned long long)tag);
        sim_bmsg_free(&gone[i].m);
        sim_on_ack(gone[i].m.id);
    }
    return 0;
}

int sim_mq_nack(uint64_t tag, bool requeue)
{
    sim_bmsg_t m;
    sim_maybe_die("basic.nack");
    if (!mq_take(tag, &m))
        return -1;
    sim_log("broker: nack tag=%llu (m%d)%s", (unsigned long long)tag, m.id,
            requeue ? " requeue" : "");
    if (requeue) {
        mq_return(m);
        return 0;
    }
    snprintf(m.reason, sizeof(m.reason), "rejected (basic.nack without requeue)");
    sim_mq_put(SQ_BDLX, &m);
    return 0;
}

void sim_mq_close_consumer(void)
{
    int forgot[SIM_PREFETCH], n_forgot = 0;
    /* Requeued in tag order; a classic queue puts them back at the head in that order. */
    for (int i = sim.o.quorum ? 0 : sim_mq.n_unacked - 1;
         sim.o.quorum ? i < sim_mq.n_unacked : i >= 0; i += sim.o.quorum ? 1 : -1) {
        if (!sim_mq.unacked[i].auto_acked) {
            mq_return(sim_mq.unacked[i].m);
            continue;
        }
        forgot[n_forgot++] = sim_mq.unacked[i].m.id;
        sim_bmsg_free(&sim_mq.unacked[i].m);
    }
    if (sim_mq.n_unacked)
        sim_log("broker: consumer closed: %d unacked requeued", sim_mq.n_unacked - n_forgot);
    sim_mq.n_unacked = 0;
    sim_mq.next_tag = 1;
    sim_mq.cancelled = false; /* a new connection consumes again */
    /* What no_ack let go is acked for good: invariants 1 and 2 look at what is left. */
    for (int i = 0; i < n_forgot; i++) {
        sim_log("broker: m%d was consumed with no_ack: not requeued", forgot[i]);
        sim_on_ack(forgot[i]);
    }
}

uint64_t sim_mq_tick(void)
{
    uint64_t next = 0;
    int k = 0;
    for (int i = 0; i < sim_mq.qn[SQ_DELAY]; i++) {
        sim_bmsg_t *m = &sim_mq.q[SQ_DELAY][i];
        if (m->ready_ms <= sim.now_ms) {
            /* The TTL expired: dead-lettered back to the work queue, not redelivered. */
            sim_log("broker: m%d back from the delay tier", m->id);
            sim.truth[m->id].arrivals++;
            sim_mq_put(SQ_MAIN, m);
            continue;
        }
        if (next == 0 || m->ready_ms < next)
            next = m->ready_ms;
        sim_mq.q[SQ_DELAY][k++] = *m;
    }
    sim_mq.qn[SQ_DELAY] = k;
    return next;
}

int sim_mq_count(int id)
{
    int n = 0;
    for (int q = SQ_MAIN; q <= SQ_DELAY; q++)
        for (int i = 0; i < sim_mq.qn[q]; i++)
            n += sim_mq.q[q][i].id == id;
    for (int i = 0; i < sim_mq.n_unacked; i++)
        n += sim_mq.unacked[i].m.id == id;
    return n + sim_other_unacked(id);
}

/* ---------- the publishing side: the broker's truth, then idemd's view of the round ----------
 * idemd's view is the real src/pubround.c, fed the frames the broker sends: basic.return with
 * the idemd-publish-seq header, then basic.ack or basic.nack. With the match_by_key switch it
 * matches returns by routing key alone, as before issue 19. */
static pubround_t round;

static const char *mq_key(sim_queue_t q)
{
    static const char *keys[SQ_N] = {"orders", "orders.delay.1", "orders.dlq", "", "downstream"};
    return keys[q];
}

void sim_pub_begin(void)
{
    pubround_begin(&round);
    sim_mq.n_sent = 0;
    if (!sim_mq.pub_open) {
        sim_mq.pub_open = true;
        sim_mq.pub_seq = 0; /* a new channel: confirm mode again, sequence from 1 */
    }
}

void sim_pub_close(void)
{
    sim_mq.pub_open = false;
}

int sim_pub_publish(sim_queue_t target, const sim_bmsg_t *m)
{
    if (m->pool == NULL)
        sim_maybe_die("basic.publish"); /* with properties, the caller took its chance first */
    if (!sim_mq.pub_open || sim_mq.n_sent >= SIM_ROUND) {
        sim_bmsg_free((sim_bmsg_t *)m);
        return -1;
    }
    sim_copy_t *c = &sim_mq.sent[sim_mq.n_sent++];
    memset(c, 0, sizeof(*c));
    c->seq = ++sim_mq.pub_seq;
    c->target = target;
    c->m = *m;
    /* The broker decides now: refused (queue full with reject-publish), unroutable (its queue
     * deleted at this moment and declared again later), or routed. */
    if (sim_fault(sim.o.pm_nack)) {
        c->nacked = true;
    } else if (sim_fault(sim.o.pm_unroutable)) {
        c->returned = true;
    } else {
        c->routed = true;
        sim_mq_put(target, m);
    }
    if (!c->routed)
        sim_bmsg_free((sim_bmsg_t *)m); /* the broker did not keep it */
    c->m.pool = NULL;                   /* the truth's copy owns nothing */
    sim_log("publisher: seq=%llu m%d%s -> %s: %s", (unsigned long long)c->seq, m->id,
            m->row >= 0 ? (m->row == 0   ? " row 0"
                           : m->row == 1 ? " row 1"
                                         : " row 2+")
                        : "",
            mq_qname(target),
            c->nacked     ? "nacked"
            : c->returned ? "returned (unroutable)"
                          : "routed");
    int idx = pubround_add(&round, c->seq, "", mq_key(target), false);
    if (idx < 0)
        sim_violation("memory: pubround_add failed");
    return idx;
}

int sim_pub_wait(void)
{
    /* The broker answers in publishing order: a return before its ack. The channel may close
     * part way (then what is not confirmed yet is not ok: a copy that arrived anyway is a
     * duplicate the record absorbs). */
    int close_at =
        sim_fault(sim.o.pm_close) ? (int)sim_rng_below(&sim.rng, (unsigned)sim_mq.n_sent) : -1;
    for (int i = 0; i < sim_mq.n_sent; i++) {
        sim_copy_t *c = &sim_mq.sent[i];
        if (i == close_at || !sim_mq.pub_open) {
            sim_log("publisher: channel closed by the broker with %d copies unconfirmed",
                    sim_mq.n_sent - i);
            sim_mq.pub_open = false;
            pubround_channel_closed(&round, "channel closed by the broker: 320 (simulated)");
            (void)pubround_finish(&round);
            return -1;
        }
        sim_maybe_die("waiting for confirms");
        if (c->returned)
            (void)pubround_return(&round, (long long)c->seq, "", mq_key(c->target), 312,
                                  "NO_ROUTE");
        if (c->nacked)
            pubround_nack(&round, c->seq, false);
        else
            pubround_ack(&round, c->seq, false);
    }
    (void)pubround_finish(&round);
    /* Invariant 3 (copies): a copy the broker routed and confirmed must count as ok, or its
     * original is copied again (duplicate copies downstream). */
    for (int i = 0; i < sim_mq.n_sent; i++)
        if (sim_mq.sent[i].routed && !pubround_ok(&round, i))
            sim_violation("copy seq=%llu of m%d was routed and confirmed by the broker but "
                          "counted refused (%s): its original will be copied again",
                          (unsigned long long)sim_mq.sent[i].seq, sim_mq.sent[i].m.id,
                          pubround_why(&round, i));
    return 0;
}

bool sim_pub_ok(int i)
{
    return i >= 0 && pubround_ok(&round, i);
}

bool sim_pub_returned(int i)
{
    return pubround_returned(&round, i);
}

const char *sim_pub_why(int i)
{
    return pubround_why(&round, i);
}

void sim_pub_free(void)
{
    pubround_free(&round);
}
