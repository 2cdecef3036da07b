/* worker_order.c: an ordered queue's batch in a worker: each entry's key (order_key), and its key
 * rows as the transaction's order op (txn_ops_t.order over order.h).
 */
#include "worker_int.h"

#include <stdlib.h>
#include <string.h>

/* A pass begins: one locked read of which of the batch's keys are blocked (order_blocked). */
static unsigned worker_order_pass(worker_t *w)
{
    int n = 0;
    for (int i = 0; i < w->life.batch.n; i++) {
        w->ord.keys[i].blocked = false;
        if (!w->ord.keys[i].has)
            continue;
        w->ids[n] = w->ord.keys[i].key;
        w->id_lens[n] = w->ord.keys[i].len;
        w->ord.bidx[n++] = i;
    }
    unsigned err = order_blocked(w->db, w->ids, w->id_lens, n, w->ord.blocked);
    for (int j = 0; err == 0 && j < n; j++)
        w->ord.keys[w->ord.bidx[j]].blocked = w->ord.blocked[j];
    return err;
}

/* The key of k may be written now: every message of the batch with that key looks at it. */
static void worker_order_touched(worker_t *w, const worker_okey_t *k)
{
    for (int i = 0; i < w->life.batch.n; i++) {
        worker_okey_t *o = &w->ord.keys[i];
        if (o->has && o->len == k->len && memcmp(o->key, k->key, k->len) == 0)
            o->blocked = true;
    }
}

/*
 * An ordered queue's key rows for message i at step (txn_ops_t.order,
 * order.h). A message without a key (none found, or no id) has none.
 */
unsigned worker_op_order(void *ctx, int i, txn_msg_t *t, txn_order_step_t step, bool *wait)
{
    worker_t *w = ctx;
    worker_okey_t *k = &w->ord.keys[i];
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

/*
 * An ordered queue: find each batch entry's key afresh (entries move
 * between batches). One without it is bad input: dead-lettered with the
 * reason, never handled, never dropped.
 */
void worker_order_keys(worker_t *w)
{
    for (int i = 0; i < w->life.batch.n; i++) {
        life_msg_t *m = &w->life.batch.m[i];
        txn_msg_t *t = &w->life.batch.t[i];
        worker_okey_t *k = &w->ord.keys[i];
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
 * tests/chaos/order_pair). Settling keeps delivery order. Fills and returns
 * w->ord.seq (after worker_order_keys).
 */
const int *worker_order_seq(worker_t *w)
{
    int n = w->life.batch.n;
    const worker_okey_t *p[n > 0 ? n : 1];

    for (int i = 0; i < n; i++)
        p[i] = &w->ord.keys[i];
    qsort(p, (size_t)n, sizeof(p[0]), worker_okey_cmp);
    for (int j = 0; j < n; j++)
        w->ord.seq[j] = (int)(p[j] - w->ord.keys);
    return w->ord.seq;
}
