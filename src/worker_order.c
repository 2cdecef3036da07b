/* worker_order.c: an ordered queue in a worker: its batch's key rows (order_batch.c) over order.c's
 * tables on the worker's database, as the transaction's order op and the step's order_keys hook.
 */
#include "worker_int.h"

/* db_order_ops_t over order.c, on the worker's connection. */
static unsigned worker_o_blocked(void *ctx, const char *const *keys, const size_t *lens, int n,
                                 bool *blocked)
{
    return order_blocked(((worker_t *)ctx)->db, keys, lens, n, blocked);
}

static unsigned worker_o_check(void *ctx, const char *key, size_t klen, const char *id,
                               size_t idlen, order_place_t *place)
{
    return order_check(((worker_t *)ctx)->db, key, klen, id, idlen, place);
}

static unsigned worker_o_wait(void *ctx, const char *key, size_t klen, const char *id, size_t idlen)
{
    return order_wait(((worker_t *)ctx)->db, key, klen, id, idlen);
}

static unsigned worker_o_block(void *ctx, const char *key, size_t klen, const char *id,
                               size_t idlen)
{
    return order_block(((worker_t *)ctx)->db, key, klen, id, idlen);
}

static unsigned worker_o_done(void *ctx, const char *key, size_t klen, const char *id, size_t idlen,
                              bool hold)
{
    return order_done(((worker_t *)ctx)->db, key, klen, id, idlen, hold);
}

const db_order_ops_t worker_order_db_ops = {
    .blocked = worker_o_blocked,
    .check = worker_o_check,
    .wait = worker_o_wait,
    .block = worker_o_block,
    .done = worker_o_done,
};

unsigned worker_op_order(void *ctx, int i, txn_msg_t *t, txn_order_step_t step, bool *wait)
{
    worker_t *w = ctx;
    return order_batch_op(&w->ord, i, t, step, wait);
}

const int *worker_order_keys(worker_t *w)
{
    order_batch_keys(&w->ord);
    return order_batch_seq(&w->ord);
}
