/* sim_life.c: the worker's real batch collection, crash guard and settle (batch.c, guard.c,
 * settle.c, life.c) wired to the simulated broker and database through their ops tables, as
 * worker.c wires them to mq.c and db.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batch.h"
#include "delivery.h"
#include "guard.h"
#include "life.h"
#include "metrics.h"
#include "pubround.h"
#include "relay.h"
#include "settle.h"
#include "sim.h"

/* One worker process's modules (worker_t's life, batch, settle and guard). */
typedef struct sim_worker {
    life_t life;
    batch_t bt;
    settle_t st;
    guard_t guard;
    uint64_t bulk_off_until_ms;
} sim_worker_t;

static sim_worker_t workers[SIM_WORKERS];
static conf_queue_t q; /* the queue's settings, the same for every worker */
static relay_keys_t keys;
static metrics_counters_t counters;
static int delays[1] = {1000};

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
static void original_props(sim_bmsg_t *m)
{
    char id[16];
    amqp_basic_properties_t p;
    memset(&p, 0, sizeof(p));
    snprintf(id, sizeof(id), "m%d", m->id);
    p._flags = AMQP_BASIC_MESSAGE_ID_FLAG | AMQP_BASIC_DELIVERY_MODE_FLAG;
    p.message_id = amqp_cstring_bytes(id);
    p.delivery_mode = 2;
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

/* ---------- the broker ops (life_broker_ops_t) ---------- */

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

static int b_pub_open(void *ctx)
{
    (void)ctx;
    if (!sim_mq.pub_open) {
        sim_mq.pub_open = true;
        sim_mq.pub_seq = 0;
    }
    return 0;
}

static bool b_false(void *ctx)
{
    (void)ctx;
    return false;
}

static void b_round_begin(void *ctx)
{
    (void)ctx;
    sim_pub_begin();
}

/* A copy from settle.c: what it carries decides what the broker keeps of it. */
static int b_publish(void *ctx, const char *exchange, const char *routing_key,
                     const amqp_basic_properties_t *props, amqp_bytes_t body)
{
    sim_bmsg_t m;
    char id[TXN_ID_MAX + 1], err[128];
    size_t len = 0;
    unsigned attempts = 0;
    (void)ctx;
    (void)exchange;
    (void)body;
    sim_maybe_die("basic.publish");
    memset(&m, 0, sizeof(m));
    m.row = -1;
    if (delivery_id(props, q.id_header, id, &len, err, sizeof(err)) != 0) {
        sim_violation("a copy without a message id: %s", err);
        return -1;
    }
    m.id = atoi(id + 1);
    if (relay_trusted(props, &keys, q.name, id, len, &attempts))
        m.attempts = attempts;
    else
        sim_violation("copy of m%d: its idemd-* headers do not verify", m.id);
    for (int i = 0; (props->_flags & AMQP_BASIC_HEADERS_FLAG) && i < props->headers.num_entries;
         i++) {
        const amqp_table_entry_t *e = &props->headers.entries[i];
        if (e->key.len == strlen(RELAY_H_ERROR) &&
            memcmp(e->key.bytes, RELAY_H_ERROR, e->key.len) == 0 &&
            e->value.kind == AMQP_FIELD_KIND_UTF8)
            snprintf(m.reason, sizeof(m.reason), "%.*s",
                     (int)(e->value.value.bytes.len < 150 ? e->value.value.bytes.len : 150),
                     (const char *)e->value.value.bytes.bytes);
    }
    sim_queue_t target = SQ_DELAY;
    if (q.dead_letter_queue && strcmp(routing_key, q.dead_letter_queue) == 0)
        target = SQ_DLQ;
    else if (strcmp(routing_key, q.name) == 0)
        target = SQ_MAIN;
    m.ready_ms = sim.now_ms + (uint64_t)delays[0];
    m.pool = pool_new();
    props_clone(props, &m.props, m.pool);
    return sim_pub_publish(target, &m);
}

static int b_wait(void *ctx, int timeout_ms)
{
    (void)ctx;
    (void)timeout_ms;
    return sim_pub_wait();
}

static bool b_round_ok(void *ctx, int i)
{
    (void)ctx;
    return sim_pub_ok(i);
}

static bool b_round_returned(void *ctx, int i)
{
    (void)ctx;
    return sim_pub_returned(i);
}

static const char *b_round_why(void *ctx, int i)
{
    (void)ctx;
    return sim_pub_why(i);
}

static bool b_pub_usable(void *ctx)
{
    (void)ctx;
    return sim_mq.pub_open;
}

static void b_pub_close(void *ctx)
{
    (void)ctx;
    sim_pub_close();
}

static uint64_t b_max_message(void *ctx)
{
    (void)ctx;
    return 0;
}

static uint64_t b_now(void *ctx)
{
    (void)ctx;
    return sim.now_ms;
}

static uint64_t b_wall(void *ctx)
{
    (void)ctx;
    return 1700000000000ULL + sim.now_ms;
}

static void b_pause(void *ctx, int ms)
{
    (void)ctx;
    sim.now_ms += (uint64_t)ms;
}

static const life_broker_ops_t sim_broker_ops = {
    .next = b_next,
    .ack = b_ack,
    .nack = b_nack,
    .pub_open = b_pub_open,
    .pub_blocked = b_false,
    .round_begin = b_round_begin,
    .publish = b_publish,
    .wait_confirms = b_wait,
    .round_ok = b_round_ok,
    .round_returned = b_round_returned,
    .round_why = b_round_why,
    .pub_usable = b_pub_usable,
    .pub_restore = b_pub_open,
    .pub_close = b_pub_close,
    .max_message = b_max_message,
    .now_ms = b_now,
    .wall_ms = b_wall,
    .pause = b_pause,
};

/* ---------- the guard's database (guard_ops_t) ---------- */

static int g_id(const char *id, size_t len)
{
    (void)len;
    return atoi(id + 1);
}

static int g_find(void *ctx, const char *id, size_t len, bool *found)
{
    (void)ctx;
    return sim_db_find(g_id(id, len), found) == 0 ? 0 : -1;
}

static long long g_bump(void *ctx, const char *id, size_t len, long long *crashes)
{
    (void)ctx;
    return sim_db_bump(g_id(id, len), crashes);
}

static long long g_crash(void *ctx, const char *id, size_t len, bool add_start)
{
    (void)ctx;
    return sim_db_crash(g_id(id, len), add_start);
}

static int g_unstart(void *ctx, const char *id, size_t len)
{
    (void)ctx;
    return sim_db_unstart(g_id(id, len)) == 0 ? 0 : -1;
}

static const guard_ops_t sim_guard_ops = {g_find, g_bump, g_crash, g_unstart};

/* ---------- the worker ---------- */

/* Wire the modules for a new process of worker k (worker_wire). */
static void life_wire(int k)
{
    sim_worker_t *x = &workers[k];
    x->guard = (guard_t){.ops = &sim_guard_ops,
                         .ctx = NULL,
                         .max_attempts = q.max_attempts,
                         .dedup_table = true,
                         .workers = sim.o.workers};
    memset(&x->bt, 0, sizeof(x->bt));
    x->bt.q = &q;
    x->bt.ops = &sim_broker_ops;
    x->bt.life = &x->life;
    x->bt.batch_max = sim.o.batch_size;
    x->bt.keys = &keys;
    x->bt.returns_guard = sim.o.quorum && sim.o.rmq4 && sim.o.has_dlq;
    x->st = (settle_t){.q = &q,
                       .handler = "sim",
                       .ops = &sim_broker_ops,
                       .guard = &x->guard,
                       .key = keys.k[0],
                       .c = &counters,
                       .heartbeat = 4,
                       .life = &x->life};
    x->bulk_off_until_ms = 0;
}

void sim_life_begin(void)
{
    memset(&q, 0, sizeof(q));
    q.name = "orders";
    q.consumer = "orders";
    q.prefetch = sim.o.prefetch;
    q.workers = sim.o.workers;
    q.dedup = CONF_DEDUP_TABLE;
    q.batch_size = sim.o.batch_size;
    q.batch_handler = sim.o.batch_handler;
    q.max_body_bytes = 1 << 20;
    q.max_batch_bytes = 16 << 20;
    q.max_attempts = sim.o.max_attempts;
    q.retry_delays_ms = delays;
    q.n_retry_delays = 1;
    q.handler_timeout = sim.o.handler_timeout_ms / 1000;
    q.quorum = sim.o.quorum;
    q.dead_letter_queue = sim.o.has_dlq ? "orders.dlq" : NULL;
    memset(&keys, 0, sizeof(keys));
    keys.n = 1;
    for (int i = 0; i < RELAY_KEY_LEN; i++)
        keys.k[0][i] = (unsigned char)sim_rng_next(&sim.rng);
    for (int k = 0; k < sim.o.workers; k++) {
        if (life_init(&workers[k].life, sim.o.batch_size, sim.o.max_held) != 0) {
            fprintf(stderr, "sim: out of memory\n");
            abort();
        }
        life_wire(k);
    }
    /* The publisher's messages carry their properties. */
    for (int i = 0; i < sim_mq.qn[SQ_MAIN]; i++)
        original_props(&sim_mq.q[SQ_MAIN][i]);
}

void sim_life_end(void)
{
    for (int k = 0; k < sim.o.workers; k++) {
        life_release(&workers[k].life);
        life_free(&workers[k].life);
    }
}

void sim_life_die(void)
{
    life_release(&workers[sim.cur].life);
    life_wire(sim.cur);
}

int sim_life_batch_ids(int *ids, int max)
{
    const life_t *l = &workers[sim.cur].life;
    int n = 0;
    for (int i = 0; i < l->batch.n && n < max; i++)
        if (l->batch.m[i].state != LIFE_FREE && l->batch.m[i].state != LIFE_GONE)
            ids[n++] = atoi(l->batch.t[i].id + 1);
    return n;
}

int sim_life_held(int k)
{
    return workers[k].life.held.n;
}

int sim_life_batch_n(int k)
{
    return workers[k].life.batch.n;
}

bool sim_life_idle(int k)
{
    const sim_worker_t *x = &workers[k];
    return x->life.batch.n == 0 && x->life.held.n == 0 && !x->bt.has_carry;
}

uint64_t sim_life_held_next_ms(int k)
{
    return workers[k].st.held_next_ms;
}

bool sim_life_step(void)
{
    sim_worker_t *x = &workers[sim.cur];
    life_t *life = &x->life;
    if (sim_slot_pending_start()) {
        char id[16];
        snprintf(id, sizeof(id), "m%d", sim_slot.crash_id);
        guard_note_t note = {.in_handler = sim_slot.in_handler,
                             .counted = sim_slot.crash_counted,
                             .id = id,
                             .id_len = strlen(id),
                             .consumer = q.consumer,
                             .exit_signal = sim_slot.exit_signal};
        if (guard_count_crash(&x->guard, &note, q.consumer) != 0)
            sim_die(0, "database lost counting a crash");
        sim_slot.in_handler = false;
        sim_slot_started();
    }
    if (settle_retry_held(&x->st) != 0 || batch_collect(&x->bt) != 0)
        sim_die(0, "broker lost");
    if (life->batch.n == 0) {
        sim_relay(); /* worker_sweep: every due row */
        return life->held.n > 0;
    }
    for (int i = 0; i < life->batch.n; i++)
        if (guard_check(&x->guard, &life->batch.m[i], &life->batch.t[i]) != 0)
            sim_die(0, "database lost in the crash guard");
    txn_t t;
    memset(&t, 0, sizeof(t));
    t.ops = &sim_txn_ops;
    t.record = true;
    t.bulk = sim.o.bulk && sim.now_ms >= x->bulk_off_until_ms;
    t.batch = sim.o.batch_handler;
    t.limit_ms = 2000;
    t.m = life->batch.t;
    t.n = life->batch.n;
    if (txn_run(&t) != TXN_DONE)
        sim_die(0, "the database cannot be trusted (TXN_FATAL)");
    if (t.too_slow)
        x->bulk_off_until_ms = sim.now_ms + 60000;
    sim_after_txn(life->batch.t, life->batch.n);
    /* worker_relay: the committed messages' outbox rows, right after their COMMIT. */
    int committed[SIM_BATCH], k = 0;
    for (int i = 0; i < life->batch.n && k < SIM_BATCH; i++)
        if (life->batch.t[i].state == TXN_COMMITTED)
            committed[k++] = sim_id_of(&life->batch.t[i]);
    if (settle_batch(&x->st) != 0)
        sim_die(0, "consuming channel failed");
    settle_release(&x->st);
    sim_relay_sources(committed, k);
    return true;
}
