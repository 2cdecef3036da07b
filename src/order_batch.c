/* order_batch.c: an ordered queue's batch: each entry's key, the order its messages run in, and
 * their key rows at each step of the transaction, over the key tables' ops (db_order_ops_t).
 */
#include "order_batch.h"

#include <stdlib.h>
#include <string.h>

#ifdef IDEMD_TESTING
bool order_batch_test_stale_free = false;
#endif

int order_batch_init(order_batch_t *ob, int cap)
{
    size_t n = cap > 0 ? (size_t)cap : 1;
    ob->keys = calloc(n, sizeof(*ob->keys));
    ob->bidx = calloc(n, sizeof(*ob->bidx));
    ob->blocked = calloc(n, sizeof(*ob->blocked));
    ob->kp = calloc(n, sizeof(*ob->kp));
    ob->klen = calloc(n, sizeof(*ob->klen));
    ob->seq = calloc(n, sizeof(*ob->seq));
    if (!ob->keys || !ob->bidx || !ob->blocked || !ob->kp || !ob->klen || !ob->seq)
        return -1;
    return 0;
}

void order_batch_free(order_batch_t *ob)
{
    free(ob->keys);
    free(ob->bidx);
    free(ob->blocked);
    free(ob->kp);
    free(ob->klen);
    free(ob->seq);
    ob->keys = NULL;
    ob->bidx = NULL;
    ob->blocked = NULL;
    ob->kp = NULL;
    ob->klen = NULL;
    ob->seq = NULL;
}

/* A pass begins: one locked read of which of the batch's keys are blocked (order_blocked). */
static unsigned order_batch_pass(order_batch_t *ob)
{
    int n = 0;
    for (int i = 0; i < ob->life->batch.n; i++) {
        ob->keys[i].blocked = false;
        if (!ob->keys[i].has)
            continue;
        ob->kp[n] = ob->keys[i].key;
        ob->klen[n] = ob->keys[i].len;
        ob->bidx[n++] = i;
    }
    unsigned err = ob->ops->blocked(ob->ctx, ob->kp, ob->klen, n, ob->blocked);
    for (int j = 0; err == 0 && j < n; j++)
        ob->keys[ob->bidx[j]].blocked = ob->blocked[j];
    return err;
}

/* The key of k may be written now: every message of the batch with that key looks at it. */
static void order_batch_touched(order_batch_t *ob, const order_okey_t *k)
{
#ifdef IDEMD_TESTING
    if (order_batch_test_stale_free)
        return;
#endif
    for (int i = 0; i < ob->life->batch.n; i++) {
        order_okey_t *o = &ob->keys[i];
        if (o->has && o->len == k->len && memcmp(o->key, k->key, k->len) == 0)
            o->blocked = true;
    }
}

/*
 * An ordered queue's key rows for message i at step (db_txn_ops_t.order,
 * order.h). A message without a key (none found, or no id) has none.
 */
unsigned order_batch_op(order_batch_t *ob, int i, txn_msg_t *t, txn_order_step_t step, bool *wait)
{
    order_okey_t *k = i >= 0 ? &ob->keys[i] : NULL;
    const conf_queue_t *q = ob->q;
    order_place_t place = ORDER_FREE;
    unsigned err = 0;

    *wait = false;
    if (step == TXN_ORDER_PASS)
        return order_batch_pass(ob);
    if (!k->has)
        return 0;
    /* What follows may write the key's rows: the batch's later messages of it look. */
    if (step == TXN_ORDER_WAIT || step == TXN_ORDER_FAILED ||
        (step == TXN_ORDER_DONE && !(k->free && t->state == TXN_HANDLED)))
        order_batch_touched(ob, k);
    switch (step) {
    case TXN_ORDER_PASS:
        break;
    case TXN_ORDER_CHECK:
        if (!k->blocked) { /* free at the pass's start, and nothing wrote it since */
            k->free = true;
            return 0;
        }
        err = ob->ops->check(ob->ctx, k->key, k->len, t->id, t->id_len, &place);
        *wait = place == ORDER_WAIT;
        k->free = err == 0 && place == ORDER_FREE;
        break;
    case TXN_ORDER_WAIT:
        err = ob->ops->wait(ob->ctx, k->key, k->len, t->id, t->id_len);
        break;
    case TXN_ORDER_DONE:
        /* Free at its check, and the only consumer (workers = 1, single active consumer):
         * nothing blocked the key since. A duplicate had no check: it looks. */
        if (!(k->free && t->state == TXN_HANDLED))
            err = ob->ops->done(ob->ctx, k->key, k->len, t->id, t->id_len, false);
        break;
    case TXN_ORDER_FAILED:
        if (txn_route(t, q->max_attempts, q->dead_letter_queue != NULL) == TXN_ROUTE_DELAY)
            err = ob->ops->block(ob->ctx, k->key, k->len, t->id, t->id_len);
        else
            err = ob->ops->done(ob->ctx, k->key, k->len, t->id, t->id_len,
                                q->order_dead_letter == CONF_ORDER_DL_HOLD);
        break;
    }
    return err;
}

void order_batch_keys(order_batch_t *ob)
{
    const life_t *l = ob->life;
    for (int i = 0; i < l->batch.n; i++) {
        const life_msg_t *m = &l->batch.m[i];
        txn_msg_t *t = &l->batch.t[i];
        order_okey_t *k = &ob->keys[i];
        char why[sizeof(t->reason)];
        k->has = false;
        k->free = false;
        if (m->no_id || t->id_len == 0)
            continue;
        if (order_key_of(ob->q->order_key, &m->env.message.properties, m->env.message.body, k->key,
                         &k->len, why, sizeof(why)) == 0) {
            k->has = true;
        } else if (t->state == TXN_NEW) {
            txn_move(t, TXN_REJECT);
            memcpy(t->reason, why, sizeof(why));
        }
    }
}

/* Keyless entries first, then by key, byte for byte; equal keys in batch order. */
static int order_batch_cmp(const void *a, const void *b)
{
    const order_okey_t *x = *(const order_okey_t *const *)a, *y = *(const order_okey_t *const *)b;
    int c = (int)x->has - (int)y->has;
    if (c == 0 && x->has) {
        c = memcmp(x->key, y->key, x->len < y->len ? x->len : y->len);
        if (c == 0)
            c = x->len < y->len ? -1 : x->len > y->len;
    }
    return c != 0 ? c : (x > y) - (x < y);
}

/*
 * Key by key, in the keys' byte order: rows a handler writes per key, and
 * the key rows, are then locked in one order by every ordered queue, so two
 * queues whose messages share keys do not deadlock on them (docs/ordering.md,
 * tests/chaos/order_pair). Settling keeps delivery order.
 */
const int *order_batch_seq(order_batch_t *ob)
{
    int n = ob->life->batch.n;
    const order_okey_t *p[n > 0 ? n : 1];

    for (int i = 0; i < n; i++)
        p[i] = &ob->keys[i];
    qsort(p, (size_t)n, sizeof(p[0]), order_batch_cmp);
    for (int j = 0; j < n; j++)
        ob->seq[j] = (int)(p[j] - ob->keys);
    return ob->seq;
}
