/* sim_ports.c: the simulator's fake of each of the worker's three ports (port.h): the consuming
 * connection and the publishing channel on the simulated broker, and the simulated clock.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "delivery.h"
#include "outbox.h"
#include "port.h"
#include "copies.h"
#include "sim.h"

/* ---------- AMQP properties: deep copies into a pool ---------- */

static void bytes_into(amqp_pool_t *pool, amqp_bytes_t *b)
{
    amqp_bytes_t out = {0, NULL};
    if (b->len == 0) {
        *b = out;
        return;
    }
    amqp_pool_alloc_bytes(pool, b->len, &out);
    if (out.bytes == NULL) {
        sim_violation("memory: a pool allocation failed");
        b->len = 0;
        b->bytes = NULL;
        return;
    }
    memcpy(out.bytes, b->bytes, b->len);
    *b = out;
}

/* *out = a copy of p whose bytes and headers live in pool. */
static void props_clone(const amqp_basic_properties_t *p, amqp_basic_properties_t *out,
                        amqp_pool_t *pool)
{
    *out = *p;
    amqp_bytes_t *f[] = {&out->content_type, &out->content_encoding, &out->correlation_id,
                         &out->reply_to,     &out->expiration,       &out->message_id,
                         &out->type,         &out->user_id,          &out->app_id,
                         &out->cluster_id};
    for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++)
        bytes_into(pool, f[i]);
    out->headers.num_entries = 0;
    out->headers.entries = NULL;
    if ((p->_flags & AMQP_BASIC_HEADERS_FLAG) &&
        amqp_table_clone(&p->headers, &out->headers, pool) != AMQP_STATUS_OK)
        sim_violation("memory: amqp_table_clone failed");
}

static amqp_pool_t *pool_new(void)
{
    amqp_pool_t *pool = malloc(sizeof(*pool));
    if (pool == NULL) {
        fprintf(stderr, "sim: out of memory\n");
        abort();
    }
    init_amqp_pool(pool, 1024);
    return pool;
}

/* The publisher's original: message_id m<id>, persistent. */
void sim_props_original(sim_bmsg_t *m)
{
    char id[16];
    amqp_basic_properties_t p;
    memset(&p, 0, sizeof(p));
    snprintf(id, sizeof(id), "m%d", m->id);
    p._flags = AMQP_BASIC_MESSAGE_ID_FLAG | AMQP_BASIC_DELIVERY_MODE_FLAG;
    p.message_id = amqp_cstring_bytes(id);
    p.delivery_mode = 2;
    /* An ordered queue's key (order_key = "header:k"). */
    char key[16];
    amqp_table_entry_t e;
    if (sim.o.ordered) {
        snprintf(key, sizeof(key), "k%d", sim.truth[m->id].key);
        e.key = amqp_cstring_bytes("k");
        e.value.kind = AMQP_FIELD_KIND_UTF8;
        e.value.value.bytes = amqp_cstring_bytes(key);
        p.headers.entries = &e;
        p.headers.num_entries = 1;
        p._flags |= AMQP_BASIC_HEADERS_FLAG;
    }
    m->pool = pool_new();
    props_clone(&p, &m->props, m->pool);
}

/* The envelope of delivery d, as amqp_consume_message fills it (amqp_destroy_envelope frees). */
static void envelope_build(const sim_delivery_t *d, amqp_envelope_t *env)
{
    memset(env, 0, sizeof(*env));
    init_amqp_pool(&env->message.pool, 1024);
    env->delivery_tag = d->tag;
    env->redelivered = d->m.redelivered;
    env->exchange = amqp_bytes_malloc_dup(amqp_cstring_bytes("x"));
    env->routing_key = amqp_bytes_malloc_dup(amqp_cstring_bytes("orders"));
    env->consumer_tag = amqp_bytes_malloc_dup(amqp_cstring_bytes("sim"));
    env->message.body = amqp_bytes_malloc_dup(amqp_cstring_bytes("{\"amount\": 1}"));
    amqp_basic_properties_t *p = &env->message.properties;
    if (d->m.pool)
        props_clone(&d->m.props, p, &env->message.pool);
    if (sim.o.quorum && d->m.dcount > 0) {
        /* A quorum queue's x-delivery-count, beside the headers it was published with. */
        int n = (p->_flags & AMQP_BASIC_HEADERS_FLAG) ? p->headers.num_entries : 0;
        amqp_table_entry_t *e = amqp_pool_alloc(&env->message.pool, sizeof(*e) * (size_t)(n + 1));
        if (e == NULL) {
            sim_violation("memory: a pool allocation failed");
            return;
        }
        if (n)
            memcpy(e, p->headers.entries, sizeof(*e) * (size_t)n);
        e[n].key = amqp_cstring_bytes("x-delivery-count");
        e[n].value.kind = AMQP_FIELD_KIND_I64;
        e[n].value.value.i64 = d->m.dcount;
        p->headers.entries = e;
        p->headers.num_entries = n + 1;
        p->_flags |= AMQP_BASIC_HEADERS_FLAG;
    }
}

/* ---------- the consuming connection (port_consume_t) ---------- */

static mq_status_t b_next(void *ctx, const struct timeval *timeout, size_t max_body,
                          amqp_envelope_t *env, uint64_t *dropped)
{
    sim_delivery_t d;
    (void)ctx;
    (void)timeout;
    (void)max_body;
    *dropped = 0;
    if (!sim_mq_next(&d))
        return MQ_TIMEOUT;
    envelope_build(&d, env);
    return MQ_OK;
}

static int b_ack(void *ctx, uint64_t tag, bool multiple)
{
    (void)ctx;
    return sim_mq_ack(tag, multiple);
}

static int b_nack(void *ctx, uint64_t tag, bool requeue)
{
    (void)ctx;
    return sim_mq_nack(tag, requeue);
}

/* basic.cancel: the broker delivers nothing more on this channel (what it sent stays unacked). */
static int c_cancel(void *ctx)
{
    (void)ctx;
    sim_maybe_die("basic.cancel");
    sim_mq.cancelled = true;
    sim_log("broker: consumer cancelled (%d unacked)", sim_mq.n_unacked);
    return 0;
}

const port_consume_ops_t sim_consume_ops = {
    .next = b_next,
    .ack = b_ack,
    .nack = b_nack,
    .cancel = c_cancel,
};

/* ---------- the publishing channel (port_publish_t) ---------- */

/* Both publishers share it, as in the worker: settle.c's retry and dead-letter copies (message
 * id "m<N>") and the outbox relay's onward messages ("orders:m<N>:<row>") and their dead
 * letters. */

/* The round's copies: which row each is, and whether it is that row's dead letter. */
static struct {
    int id, row;
    bool dead;
} sent[SIM_ROUND];
static int n_sent;

static int p_open(void *ctx)
{
    (void)ctx;
    if (!sim_mq.pub_open) {
        sim_mq.pub_open = true;
        sim_mq.pub_seq = 0;
    }
    return 0;
}

static bool p_blocked(void *ctx)
{
    (void)ctx;
    return false;
}

static void p_round_begin(void *ctx)
{
    (void)ctx;
    sim_pub_begin();
    n_sent = 0;
}

/* A copy from settle.c: what it carries decides what the broker keeps of it. */
static int copy_publish(const char *routing_key, const amqp_basic_properties_t *props)
{
    sim_bmsg_t m;
    char id[TXN_ID_MAX + 1], err[128];
    size_t len = 0;
    unsigned attempts = 0;
    sim_maybe_die("basic.publish");
    memset(&m, 0, sizeof(m));
    m.row = -1;
    if (delivery_id(props, sim_q.id_header, id, &len, err, sizeof(err)) != 0) {
        sim_violation("a copy without a message id: %s", err);
        return -1;
    }
    m.id = atoi(id + 1);
    if (copies_trusted(props, &sim_keys, sim_q.name, id, len, &attempts))
        m.attempts = attempts;
    else
        sim_violation("copy of m%d: its idemd-* headers do not verify", m.id);
    for (int i = 0; (props->_flags & AMQP_BASIC_HEADERS_FLAG) && i < props->headers.num_entries;
         i++) {
        const amqp_table_entry_t *e = &props->headers.entries[i];
        if (e->key.len == strlen(COPIES_H_ERROR) &&
            memcmp(e->key.bytes, COPIES_H_ERROR, e->key.len) == 0 &&
            e->value.kind == AMQP_FIELD_KIND_UTF8)
            snprintf(m.reason, sizeof(m.reason), "%.*s",
                     (int)(e->value.value.bytes.len < 150 ? e->value.value.bytes.len : 150),
                     (const char *)e->value.value.bytes.bytes);
    }
    sim_queue_t target = SQ_DELAY;
    if (sim_q.dead_letter_queue && strcmp(routing_key, sim_q.dead_letter_queue) == 0)
        target = SQ_DLQ;
    else if (strcmp(routing_key, sim_q.name) == 0)
        target = SQ_MAIN;
    m.ready_ms = sim.now_ms + (uint64_t)sim_q.retry_delays_ms[0];
    m.pool = pool_new();
    props_clone(props, &m.props, m.pool);
    return sim_pub_publish(target, &m);
}

/* The value of header k in props, or an empty string. */
static amqp_bytes_t header(const amqp_basic_properties_t *props, const char *k)
{
    for (int i = 0; (props->_flags & AMQP_BASIC_HEADERS_FLAG) && i < props->headers.num_entries;
         i++) {
        const amqp_table_entry_t *e = &props->headers.entries[i];
        if (e->key.len == strlen(k) && memcmp(e->key.bytes, k, e->key.len) == 0 &&
            e->value.kind == AMQP_FIELD_KIND_UTF8)
            return e->value.value.bytes;
    }
    return amqp_empty_bytes;
}

static int row_publish(const char *routing_key, const amqp_basic_properties_t *props)
{
    sim_bmsg_t c;
    int id = -1, r = -1;
    memset(&c, 0, sizeof(c)); /* no properties kept: sim_pub_publish takes the death chance */
    if (sscanf((const char *)props->message_id.bytes, "orders:m%d:%d", &id, &r) != 2 || id < 0 ||
        id >= sim.o.n_msgs || r < 0 || r >= SIM_ROWS) {
        sim_violation("outbox: an onward message with an unknown id");
        return -1;
    }
    sim_truth_t *tr = &sim.truth[id];
    c.id = id;
    c.row = r;
    bool dead = strcmp(routing_key, "downstream") != 0;
    if (dead) {
        /* Invariant 3: only a row refused max_attempts times is dead-lettered, with its reason,
         * to the source queue's dead letter queue. */
        amqp_bytes_t why = header(props, COPIES_H_ERROR);
        if (!sim.o.has_dlq || strcmp(routing_key, "orders.dlq") != 0)
            sim_violation("outbox row %d of m%d dead-lettered to '%s'", r, id, routing_key);
        if (sim_db.row_attempts[id][r] + 1 < (unsigned)sim.o.ob_max_attempts)
            sim_violation("outbox row %d of m%d dead-lettered after %u refusals (max %d)", r, id,
                          sim_db.row_attempts[id][r] + 1, sim.o.ob_max_attempts);
        if (why.len == 0)
            sim_violation("outbox row %d of m%d dead-lettered without a reason", r, id);
        snprintf(c.reason, sizeof(c.reason), "%.*s", (int)(why.len < 150 ? why.len : 150),
                 (const char *)why.bytes);
    } else {
        /* Invariant 3: a confirmed row goes again only when its DELETE was lost. */
        if (tr->row_confirmed[r]) {
            if (!tr->row_may_resend[r])
                sim_violation("outbox row %d of m%d re-sent after the broker confirmed it", r, id);
            tr->row_may_resend[r] = false;
            tr->row_confirmed[r] = false; /* until this send is confirmed */
            tr->row_resends[r]++;
        }
        tr->row_sends[r]++;
    }
    int idx = sim_pub_publish(dead ? SQ_DLQ : SQ_DOWN, &c);
    if (idx >= 0 && idx < SIM_ROUND) {
        while (n_sent <= idx)
            sent[n_sent++].row = -1;
        sent[idx].id = id;
        sent[idx].row = r;
        sent[idx].dead = dead;
    }
    return idx;
}

static int p_publish(void *ctx, const char *exchange, const char *routing_key,
                     const amqp_basic_properties_t *props, amqp_bytes_t body)
{
    (void)ctx;
    (void)exchange;
    (void)body;
    if ((props->_flags & AMQP_BASIC_MESSAGE_ID_FLAG) && props->message_id.len > 7 &&
        memcmp(props->message_id.bytes, "orders:", 7) == 0)
        return row_publish(routing_key, props);
    return copy_publish(routing_key, props);
}

static int p_wait(void *ctx, int timeout_ms)
{
    (void)ctx;
    (void)timeout_ms;
    int rc = sim_pub_wait();
    for (int i = 0; i < n_sent; i++) {
        if (sent[i].row < 0 || !sim_pub_ok(i))
            continue;
        sim_truth_t *tr = &sim.truth[sent[i].id];
        if (sent[i].dead) {
            tr->row_dead[sent[i].row]++;
        } else {
            tr->row_confirmed[sent[i].row] = true;
            tr->row_delivered[sent[i].row] = true;
        }
    }
    return rc;
}

static bool p_ok(void *ctx, int i)
{
    (void)ctx;
    return sim_pub_ok(i);
}

static bool p_returned(void *ctx, int i)
{
    (void)ctx;
    return sim_pub_returned(i);
}

static const char *p_why(void *ctx, int i)
{
    (void)ctx;
    return sim_pub_why(i);
}

static bool p_usable(void *ctx)
{
    (void)ctx;
    return sim_mq.pub_open;
}

static bool p_broken(void *ctx)
{
    (void)ctx;
    return false; /* a lost connection is a death of the worker here */
}

static int p_restore(void *ctx)
{
    (void)ctx;
    sim_maybe_die("channel.open (outbox)");
    sim_mq.pub_open = true;
    sim_mq.pub_seq = 0;
    return 0;
}

static void p_close(void *ctx)
{
    (void)ctx;
    sim_pub_close();
}

static uint64_t p_max_message(void *ctx)
{
    (void)ctx;
    return 0;
}

const port_publish_ops_t sim_publish_ops = {
    .open = p_open,
    .blocked = p_blocked,
    .round_begin = p_round_begin,
    .publish = p_publish,
    .wait_confirms = p_wait,
    .round_ok = p_ok,
    .round_returned = p_returned,
    .round_why = p_why,
    .usable = p_usable,
    .broken = p_broken,
    .restore = p_restore,
    .close = p_close,
    .max_message = p_max_message,
};

/* ---------- the clock (port_clock_t) ---------- */

static uint64_t k_now(void *ctx)
{
    (void)ctx;
    return sim.now_ms;
}

static uint64_t k_now_us(void *ctx)
{
    (void)ctx;
    return sim.now_ms * 1000;
}

static uint64_t k_wall(void *ctx)
{
    (void)ctx;
    return 1700000000000ULL + sim.now_ms;
}

static void k_pause(void *ctx, int ms)
{
    (void)ctx;
    sim.now_ms += (uint64_t)ms;
}

const port_clock_ops_t sim_clock_ops = {
    .now_ms = k_now,
    .now_us = k_now_us,
    .wall_ms = k_wall,
    .pause = k_pause,
};
