/* worker_ops.c: the real adapters of the three ports (consume and publish on mq.h, the clock) and
 * the database (db.h) behind the crash guard's ops (guard_ops_t).
 */
#include "worker_int.h"
#include "clock.h"

#include <time.h>

/* ---------- the consuming connection (port_consume_t): w->mq ---------- */

static mq_status_t worker_c_next(void *ctx, const struct timeval *tv, size_t max_body,
                                 amqp_envelope_t *env, uint64_t *dropped)
{
    worker_t *w = ctx;
    return mq_next(w->mq, tv, max_body, env, dropped);
}

static int worker_c_ack(void *ctx, uint64_t tag, bool multiple)
{
    worker_t *w = ctx;
    return mq_ack(w->mq, tag, multiple);
}

static int worker_c_nack(void *ctx, uint64_t tag, bool requeue)
{
    worker_t *w = ctx;
    return mq_nack(w->mq, tag, requeue);
}

static int worker_c_cancel(void *ctx)
{
    worker_t *w = ctx;
    return w->mq == NULL ? -1 : mq_cancel(w->mq);
}

static const port_consume_ops_t worker_consume_ops = {
    .next = worker_c_next,
    .ack = worker_c_ack,
    .nack = worker_c_nack,
    .cancel = worker_c_cancel,
};

/* ---------- the publishing channel (port_publish_t): w->pub, opened when first needed ----------
 */

/* A publishing connection lost while idle is replaced; a new one declares after a failure. */
static int worker_p_open(void *ctx)
{
    worker_t *w = ctx;
    if (w->pub && mq_service(w->pub) != 0) {
        mq_close(w->pub);
        w->pub = NULL;
    }
    return w->pub == NULL ? worker_open_publisher(w) : 0;
}

static bool worker_p_blocked(void *ctx)
{
    worker_t *w = ctx;
    return mq_blocked(w->pub);
}

static void worker_p_round_begin(void *ctx)
{
    worker_t *w = ctx;
    mq_round_begin(w->pub);
}

static int worker_p_publish(void *ctx, const char *exchange, const char *routing_key,
                            const amqp_basic_properties_t *props, amqp_bytes_t body)
{
    worker_t *w = ctx;
    return mq_publish_to(w->pub, exchange, routing_key, props, body);
}

static int worker_p_wait_confirms(void *ctx, int timeout_ms)
{
    worker_t *w = ctx;
    return mq_wait_confirms(w->pub, timeout_ms);
}

static bool worker_p_round_ok(void *ctx, int i)
{
    worker_t *w = ctx;
    return i >= 0 && w->pub && mq_round_ok(w->pub, i);
}

static bool worker_p_round_returned(void *ctx, int i)
{
    worker_t *w = ctx;
    return i >= 0 && w->pub && mq_round_returned(w->pub, i);
}

static const char *worker_p_round_why(void *ctx, int i)
{
    worker_t *w = ctx;
    return i >= 0 && w->pub ? mq_round_why(w->pub, i) : "no publishing connection";
}

static bool worker_p_usable(void *ctx)
{
    worker_t *w = ctx;
    return w->pub && mq_channel_usable(w->pub);
}

static bool worker_p_broken(void *ctx)
{
    worker_t *w = ctx;
    return w->pub == NULL || w->pub->broken;
}

static int worker_p_restore(void *ctx)
{
    worker_t *w = ctx;
    return w->pub ? mq_channel_restore(w->pub) : -1;
}

static void worker_p_close(void *ctx)
{
    worker_t *w = ctx;
    mq_close(w->pub);
    w->pub = NULL;
    w->pub_failed = true;
}

static uint64_t worker_p_max_message(void *ctx)
{
    worker_t *w = ctx;
    return w->pub ? w->pub->max_message : 0;
}

static const port_publish_ops_t worker_publish_ops = {
    .open = worker_p_open,
    .blocked = worker_p_blocked,
    .round_begin = worker_p_round_begin,
    .publish = worker_p_publish,
    .wait_confirms = worker_p_wait_confirms,
    .round_ok = worker_p_round_ok,
    .round_returned = worker_p_round_returned,
    .round_why = worker_p_round_why,
    .usable = worker_p_usable,
    .broken = worker_p_broken,
    .restore = worker_p_restore,
    .close = worker_p_close,
    .max_message = worker_p_max_message,
};

/* ---------- the clock (port_clock_t) ---------- */

static void worker_k_pause(void *ctx, int ms)
{
    worker_pause(ctx, ms);
}

static const port_clock_ops_t worker_clock_ops = {
    .now_ms = clock_port_mono_ms,
    .now_us = clock_port_mono_us,
    .wall_ms = clock_port_wall_ms,
    .pause = worker_k_pause,
};

/* The database for the crash guard (guard_ops_t): idemd_attempt through db.h. */
static int worker_g_find_record(void *ctx, const char *id, size_t len, bool *found)
{
    worker_t *w = ctx;
    return db_find_records(w->db, &id, &len, 1, found) == DB_OK ? 0 : -1;
}

static long long worker_g_bump(void *ctx, const char *id, size_t len, long long *crashes)
{
    worker_t *w = ctx;
    return db_attempt_bump(w->db, id, len, crashes);
}

static long long worker_g_crash(void *ctx, const char *id, size_t len, bool add_start)
{
    worker_t *w = ctx;
    return db_attempt_crash(w->db, id, len, add_start);
}

static int worker_g_unstart(void *ctx, const char *id, size_t len)
{
    worker_t *w = ctx;
    return db_attempt_unstart(w->db, id, len);
}

static const guard_ops_t worker_guard_ops = {
    .find_record = worker_g_find_record,
    .bump = worker_g_bump,
    .crash = worker_g_crash,
    .unstart = worker_g_unstart,
};

/* Wire the batch, settle and guard modules to this worker (its life, broker and database). */
void worker_wire(worker_t *w)
{
    w->guard = (guard_t){.ops = &worker_guard_ops,
                         .ctx = w,
                         .max_attempts = w->q->max_attempts,
                         .dedup_table = w->q->dedup == CONF_DEDUP_TABLE,
                         .workers = w->q->workers};
    w->consume = (port_consume_t){&worker_consume_ops, w};
    w->pub_port = (port_publish_t){&worker_publish_ops, w};
    w->clock = (port_clock_t){&worker_clock_ops, w};
    w->bt.q = w->q;
    w->bt.consume = w->consume;
    w->bt.clock = w->clock;
    w->bt.life = &w->life;
    w->bt.keys = &w->copies_keys;
    w->st = (settle_t){.q = w->q,
                       .handler = w->h->name,
                       .consume = w->consume,
                       .pub = w->pub_port,
                       .clock = w->clock,
                       .guard = &w->guard,
                       .key = w->copies_keys.k[0],
                       .c = &w->slot->c,
                       .heartbeat = w->conf->broker.heartbeat,
                       .life = &w->life};
}
