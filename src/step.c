/* step.c: one iteration of a worker over its ports (crash note, held copies, collect, guard, order
 * keys, transaction, outbox relay, settle, release): what worker.c loops on and the simulator runs.
 */
#include "step.h"

#include <string.h>

#include "log.h"

uint64_t step_limit_ms(int heartbeat_s)
{
    return heartbeat_s > 0 ? (uint64_t)heartbeat_s * 500 : 0;
}

/* The step ends on a loss: say where. Returns st. */
static step_status_t step_lost(step_t *s, step_status_t st, const char *why)
{
    s->why = why;
    return st;
}

/*
 * Right after COMMIT: publish the onward messages of the batch's committed
 * messages, with confirms, and delete their rows. A failure leaves them to
 * the sweeper; the batch is settled either way.
 */
static void step_relay(step_t *s)
{
    const life_t *l = s->life;
    int k = 0;

    for (int i = 0; i < l->batch.n; i++) {
        if (l->batch.t[i].state != TXN_COMMITTED)
            continue;
        s->ids[k] = l->batch.t[i].id;
        s->id_lens[k++] = l->batch.t[i].id_len;
    }
    if (k == 0)
        return;
    if (s->hooks->before_relay)
        s->hooks->before_relay(s->hooks_ctx);
    if (s->pub.ops->open(s->pub.ctx) != 0 || s->pub.ops->blocked(s->pub.ctx)) {
        log_warn("outbox: no usable republishing connection: onward messages wait for the "
                 "sweeper");
        return;
    }
    int n =
        outbox_relay(s->outbox, &s->pub, &s->clock, s->ids, s->id_lens, k, 0, STEP_RELAY_SLICES);
    if (n >= 0) {
        log_debug("outbox: sent %d onward message(s)", n);
        return;
    }
    log_warn("outbox: onward messages not all sent (%s): the sweeper sends them later",
             n == -1 ? "database" : "broker");
    if (n == -2)
        s->pub.ops->close(s->pub.ctx);
}

/* The batch's transaction as the step runs it (t is overwritten). */
static void step_txn_init(step_t *s, txn_t *t)
{
    life_t *l = s->life;

    memset(t, 0, sizeof(*t));
    t->ops = &s->db.ops->txn;
    t->ctx = s->db.ctx;
    t->clock = s->clock;
    t->record = s->record;
    /* One record INSERT per batch; per-message savepoints only after a failure, and for a
     * minute after handlers were too slow to finish a batch within the limit that way. An
     * ordered queue goes message by message: each one's key is looked at before it runs. */
    t->bulk = s->bulk && s->clock.ops->now_ms(s->clock.ctx) >= s->bulk_off_until_ms;
    t->batch = s->batch;
    t->look_first = s->look_first;
    if (s->hooks->order_keys)
        t->seq = s->hooks->order_keys(s->hooks_ctx);
    /* No heartbeat is answered while a batch runs: settle well within the broker's limit. */
    t->limit_ms = s->limit_ms;
    t->m = l->batch.t;
    t->n = l->batch.n;
    s->outbox_used = false;
}

/*
 * The batch's transaction (txn.c) after the crash guard, then the outbox
 * relay of what it committed. STEP_RAN when every message that ran has
 * its outcome; STEP_LOST_DB when the database cannot be trusted (nothing
 * may be acked: the broker redelivers, the record decides).
 */
static step_status_t step_transact(step_t *s)
{
    const step_hooks_t *h = s->hooks;
    life_t *l = s->life;
    txn_t t;
    int deferred = 0;

    for (int i = 0; i < l->batch.n; i++)
        if (guard_check(s->guard, &l->batch.m[i], &l->batch.t[i]) != 0)
            return step_lost(s, STEP_LOST_DB, "database lost in the crash guard");
    step_txn_init(s, &t);
    txn_status_t st = txn_run(&t);
    if (h->transacted)
        h->transacted(s->hooks_ctx, &t, st);
    if (st != TXN_DONE)
        return step_lost(s, STEP_LOST_DB, "the database cannot be trusted (TXN_FATAL)");
    if (t.committed && s->outbox_used)
        step_relay(s);
    s->look_first = t.found_dups;
    if (t.too_slow) {
        s->bulk_off_until_ms = s->clock.ops->now_ms(s->clock.ctx) + 60000;
        log_info("handlers ran past %llu ms in a set-based batch: message by message for a "
                 "minute",
                 (unsigned long long)t.limit_ms);
    }
    if (t.batch_calls || t.fell_back)
        log_debug("batch of %d: handle_batch called %d time(s)%s", l->batch.n, t.batch_calls,
                  t.fell_back ? ", then message by message" : "");
    for (int i = 0; i < l->batch.n; i++) {
        deferred += l->batch.t[i].state == TXN_NEW;
        /* A redelivered message that only waited for its key never started its handler. */
        if (l->batch.t[i].state == TXN_WAIT)
            guard_finished(s->guard, &l->batch.t[i]);
    }
    if (t.cut_short)
        log_debug("batch of %d ran past %llu ms: settling %d, deferring %d to the next", l->batch.n,
                  (unsigned long long)t.limit_ms, l->batch.n - deferred, deferred);
    return STEP_RAN;
}

step_status_t step_run(step_t *s)
{
    const step_hooks_t *h = s->hooks;
    life_t *l = s->life;
    guard_note_t note;
    step_status_t st;

    s->why = NULL;
    if (h->note && h->note(s->hooks_ctx, &note)) {
        if (guard_count_crash(s->guard, &note, s->bt->q->consumer) != 0)
            return step_lost(s, STEP_LOST_DB, "database lost counting a crash");
        if (h->noted)
            h->noted(s->hooks_ctx);
    }
    if (h->collecting)
        h->collecting(s->hooks_ctx, l->batch.n == 0 && !s->bt->has_carry);
    int rc = settle_retry_held(s->st) != 0 || batch_collect(s->bt) != 0 ? -1 : 0;
    if (h->collected)
        h->collected(s->hooks_ctx, l->batch.n);
    if (rc != 0)
        return step_lost(s, STEP_LOST_BROKER, "broker lost");
    if (l->batch.n == 0)
        return STEP_IDLE;
    if (h->batch && h->batch(s->hooks_ctx) != 0)
        return step_lost(s, STEP_LOST_DB, "database lost before the batch");
    if ((st = step_transact(s)) != STEP_RAN)
        return st;
    if (h->settling)
        h->settling(s->hooks_ctx);
    if (settle_batch(s->st) != 0)
        return step_lost(s, STEP_LOST_BROKER, "consuming channel failed");
    if (h->settled)
        h->settled(s->hooks_ctx);
    settle_clear_batch(s->st);
    return STEP_RAN;
}

txn_status_t step_try(step_t *s, bool record, void (*peek)(void *ctx), txn_t *t)
{
    step_txn_init(s, t);
    t->record = record;
    t->dry_run = true;
    t->dry_peek = peek;
    return txn_run(t);
}

bool step_drain(step_t *s, uint64_t drain_ms, bool (*pending)(void *ctx), void *ctx)
{
    uint64_t now = s->clock.ops->now_ms(s->clock.ctx);
    if (!s->draining) {
        s->draining = true;
        s->drain_until_ms = now + drain_ms;
        s->bt->no_wait = true;
        if (s->bt->consume.ops->cancel(s->bt->consume.ctx) != 0)
            return false;
        log_debug("stopping: consumer cancelled, running the deliveries already received");
    }
    bool on_hand = s->life->batch.n > 0 || s->bt->has_carry || (pending && pending(ctx));
    if (on_hand && now >= s->drain_until_ms) {
        log_info("stopping: deliveries not run within the drain time go back to the queue");
        return false;
    }
    return on_hand;
}
