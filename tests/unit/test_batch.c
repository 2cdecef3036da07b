/* test_batch.c: unit tests of collecting and settling batches together (batch.c, settle.c): a
 * delivery carried past a cut-short batch is never acked before it runs.
 *
 * The broker is a fake consume port: a list of deliveries handed out in tag order, and a record
 * of what its acks covered (a multiple ack covers every delivered, unacked tag up to its own, as
 * RabbitMQ does). The "worker" between collect and settle commits entries or leaves them not
 * started, as a batch cut short by handler_timeout's half-heartbeat rule does.
 *
 * This is the carry_ack case the simulation found on an old worker loop (docs/simulation.md):
 * with deliveries left over from a cut-short batch and one in the carry slot, collecting more
 * deliveries behind the carried one made the next batch's multiple ack cover it, unrun.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batch.h"
#include "life.h"
#include "log.h"
#include "metrics.h"
#include "settle.h"
#include "tap.h"

#define T_MAX 16

/* The fake broker. */
static struct {
    int n, next;             /* deliveries in the queue; the next one to hand out */
    uint64_t tag[T_MAX];     /* delivery tags, rising */
    bool redelivered[T_MAX]; /* a suspect: runs alone */
    bool delivered[T_MAX], acked[T_MAX], run[T_MAX];
    int acks, multiple_acks;
    bool acked_unrun; /* an ack covered a delivery that never ran */
} fb;

static int fb_index(uint64_t tag)
{
    for (int i = 0; i < fb.n; i++)
        if (fb.tag[i] == tag)
            return i;
    return -1;
}

static mq_status_t fb_next(void *ctx, const struct timeval *tv, size_t max_body,
                           amqp_envelope_t *env, uint64_t *dropped)
{
    char id[32];
    (void)ctx, (void)tv, (void)max_body;
    *dropped = 0;
    if (fb.next >= fb.n)
        return MQ_TIMEOUT;
    int i = fb.next++;
    memset(env, 0, sizeof(*env));
    env->delivery_tag = fb.tag[i];
    env->redelivered = fb.redelivered[i];
    snprintf(id, sizeof(id), "m%llu", (unsigned long long)fb.tag[i]);
    env->message.properties._flags = AMQP_BASIC_MESSAGE_ID_FLAG;
    env->message.properties.message_id = amqp_bytes_malloc_dup(amqp_cstring_bytes(id));
    env->message.body = amqp_bytes_malloc_dup(amqp_cstring_bytes("{}"));
    fb.delivered[i] = true;
    return MQ_OK;
}

static int fb_ack(void *ctx, uint64_t tag, bool multiple)
{
    (void)ctx;
    fb.acks++;
    fb.multiple_acks += multiple;
    for (int i = 0; i < fb.n; i++) {
        if (!fb.delivered[i] || fb.acked[i] || (multiple ? fb.tag[i] > tag : fb.tag[i] != tag))
            continue;
        fb.acked[i] = true;
        if (!fb.run[i]) {
            fb.acked_unrun = true;
            diag("tag %llu acked (by %s ack of %llu) but never run", (unsigned long long)fb.tag[i],
                 multiple ? "a multiple" : "an", (unsigned long long)tag);
        }
    }
    return 0;
}

static int fb_nack(void *ctx, uint64_t tag, bool requeue)
{
    (void)ctx, (void)tag, (void)requeue;
    return 0;
}

static int fb_cancel(void *ctx)
{
    (void)ctx;
    return 0;
}

static const port_consume_ops_t fb_ops = {fb_next, fb_ack, fb_nack, fb_cancel};

static uint64_t clk_now(void *ctx)
{
    (void)ctx;
    return 1000;
}

static void clk_pause(void *ctx, int ms)
{
    (void)ctx, (void)ms;
}

static const port_clock_ops_t clk_ops = {.now_ms = clk_now, .wall_ms = clk_now, .pause = clk_pause};

/* Settle never publishes here (no copies): a publish port that fails if it is asked to. */
static int pub_open(void *ctx)
{
    (void)ctx;
    return -1;
}

static bool pub_blocked(void *ctx)
{
    (void)ctx;
    return false;
}

static void pub_round_begin(void *ctx)
{
    (void)ctx;
}

static int pub_publish(void *ctx, const char *x, const char *rk, const amqp_basic_properties_t *p,
                       amqp_bytes_t b)
{
    (void)ctx, (void)x, (void)rk, (void)p, (void)b;
    return -1;
}

static int pub_wait(void *ctx, int ms)
{
    (void)ctx, (void)ms;
    return -1;
}

static bool pub_round_no(void *ctx, int i)
{
    (void)ctx, (void)i;
    return false;
}

static const char *pub_why(void *ctx, int i)
{
    (void)ctx, (void)i;
    return "no broker here";
}

static const port_publish_ops_t pub_ops = {.open = pub_open,
                                           .blocked = pub_blocked,
                                           .round_begin = pub_round_begin,
                                           .publish = pub_publish,
                                           .wait_confirms = pub_wait,
                                           .round_ok = pub_round_no,
                                           .round_returned = pub_round_no,
                                           .round_why = pub_why};

/*
 * Run the collected batch as a worker would: the first `run` entries commit,
 * the rest are left not started (the batch was cut short). Then settle it
 * and clear it for the next.
 */
static int t_run_and_settle(settle_t *s, int run)
{
    life_list_t *B = &s->life->batch;
    for (int i = 0; i < B->n; i++) {
        if (i < run) {
            int k = fb_index(B->m[i].env.delivery_tag);
            if (k >= 0)
                fb.run[k] = true;
            txn_move(&B->t[i], TXN_RECORDED);
            txn_move(&B->t[i], TXN_HANDLED);
            txn_move(&B->t[i], TXN_COMMITTED);
        }
    }
    int rc = settle_batch(s);
    settle_clear_batch(s);
    return rc;
}

/* The tags of the batch, "1 2 3", into out. */
static const char *t_tags(const life_list_t *B, char *out, size_t len)
{
    size_t o = 0;
    out[0] = '\0';
    for (int i = 0; i < B->n && o < len; i++)
        o += (size_t)snprintf(out + o, len - o, "%s%llu", i ? " " : "",
                              (unsigned long long)B->m[i].env.delivery_tag);
    return out;
}

static void t_carry_not_acked(void)
{
    static conf_queue_t q = {.name = "orders",
                             .consumer = "orders",
                             .batch_size = 4,
                             .max_body_bytes = 1 << 20,
                             .max_batch_bytes = 16 << 20,
                             .max_attempts = 3,
                             .dedup = CONF_DEDUP_TABLE};
    static copies_keys_t keys = {.n = 1};
    static metrics_counters_t counters;
    life_t life;
    char tags[64];

    memset(&fb, 0, sizeof(fb));
    for (int i = 0; i < 8; i++)
        fb.tag[i] = (uint64_t)i + 1;
    fb.n = 8;
    fb.redelivered[3] = true; /* tag 4: a suspect, which runs alone, so it is carried */
    if (life_init(&life, q.batch_size, 4) != 0) {
        printf("Bail out! life_init failed\n");
        exit(1);
    }
    batch_t b = {.q = &q,
                 .consume = {&fb_ops, NULL},
                 .clock = {&clk_ops, NULL},
                 .life = &life,
                 .batch_max = q.batch_size,
                 .keys = &keys,
                 .no_wait = true};
    settle_t s = {.q = &q,
                  .handler = "test",
                  .consume = {&fb_ops, NULL},
                  .pub = {&pub_ops, NULL},
                  .clock = {&clk_ops, NULL},
                  .key = keys.k[0],
                  .c = &counters,
                  .heartbeat = 30,
                  .life = &life};

    ok(batch_collect(&b) == 0, "first batch collected");
    is_int(life.batch.n, 3, "it stops before the suspect: %s",
           t_tags(&life.batch, tags, sizeof(tags)));
    ok(b.has_carry && life.batch.m[life.batch.cap].env.delivery_tag == 4,
       "the suspect (tag 4) is carried to a batch of its own");
    ok(t_run_and_settle(&s, 1) == 0, "the batch is cut short after its first message and settled");
    is_int(life.batch.n, 2, "two deliveries left not started for the next batch");

    ok(batch_collect(&b) == 0, "second batch collected");
    is_int(life.batch.n, 2,
           "with a delivery carried, it takes nothing behind it (%s; next handed out: tag %llu)",
           t_tags(&life.batch, tags, sizeof(tags)), (unsigned long long)fb.tag[fb.next]);
    ok(b.has_carry, "the carried delivery is still carried");
    ok(t_run_and_settle(&s, 2) == 0, "second batch runs and is settled");
    ok(!fb.acked[3], "the carried delivery is not acked by the batch before it");

    ok(batch_collect(&b) == 0, "third batch collected");
    ok(life.batch.n == 1 && life.batch.m[0].env.delivery_tag == 4 && !b.has_carry,
       "it is the carried suspect, alone");
    ok(t_run_and_settle(&s, 1) == 0, "it runs and is settled");
    ok(batch_collect(&b) == 0 && t_run_and_settle(&s, life.batch.n) == 0,
       "the rest is collected and settled");
    bool all = true;
    for (int i = 0; i < fb.n; i++)
        all &= fb.acked[i] && fb.run[i];
    ok(all, "every delivery ran and was acked");
    ok(!fb.acked_unrun, "no ack covered a delivery before it ran (%d acks, %d multiple)", fb.acks,
       fb.multiple_acks);
    life_release(&life);
    life_free(&life);
}

int main(void)
{
    log_set_level(LOG_LEVEL_ERROR);
    t_carry_not_acked();
    return done();
}
