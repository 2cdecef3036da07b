/* order_batch.h: an ordered queue's batch: each entry's key, the order its messages run in, and
 * their key rows at each step of the transaction (db_txn_ops_t.order) over the key tables' ops.
 */
#ifndef IDEMD_ORDER_BATCH_H
#define IDEMD_ORDER_BATCH_H

#include <stdbool.h>
#include <stddef.h>

#include "conf.h"
#include "life.h"
#include "order.h"
#include "txn.h"

/* A batch entry's key (order_key), found afresh for every batch. */
typedef struct order_okey {
    bool has;     /* it has a key and an id: its key's rows follow it */
    bool free;    /* this pass's check found its key free: its commit has no row to move */
    bool blocked; /* blocked at the pass's start, or written since: look before it runs */
    size_t len;
    char key[ORDER_KEY_MAX + 1];
} order_okey_t;

typedef struct order_batch {
    const db_order_ops_t *ops;
    void *ctx;
    const conf_queue_t *q; /* order_key, max_attempts, dead_letter_queue, order_dead_letter */
    const life_t *life;    /* the batch whose keys these are */
    /* cap entries each (order_batch_init). */
    order_okey_t *keys; /* each batch entry's key */
    int *bidx;          /* the pass's read: batch index of each key asked about */
    bool *blocked;      /* ... and its answer */
    const char **kp;    /* ... the keys asked about */
    size_t *klen;       /* ... and their lengths */
    int *seq;           /* the order a batch's messages run in: by key (order_batch_seq) */
} order_batch_t;

/* Room for batches of cap entries (ops, ctx, q and life are the caller's to set): 0, or -1
 * (out of memory; order_batch_free frees what was taken). */
int order_batch_init(order_batch_t *ob, int cap) __attribute__((warn_unused_result));
/* Free what order_batch_init took (NULL arrays are fine). */
void order_batch_free(order_batch_t *ob);

/*
 * Find each batch entry's key afresh (entries move between batches). One
 * without it is bad input: moved to TXN_REJECT with the reason, never
 * handled, never dropped.
 */
void order_batch_keys(order_batch_t *ob);

/* The order the batch runs in (txn_t.seq): keyless entries first, then key by key in the keys'
 * byte order, a key's own messages in delivery order. Owned by ob; after order_batch_keys. */
const int *order_batch_seq(order_batch_t *ob);

/* db_txn_ops_t.order for entry i of the batch, over ob's key tables. */
unsigned order_batch_op(order_batch_t *ob, int i, txn_msg_t *t, txn_order_step_t step, bool *wait);

#ifdef IDEMD_TESTING
/* Test builds only (the simulator's --bug stale_free): a later message of a key that an earlier
 * one of the batch blocked trusts the pass's first read (free) and runs past it. */
extern bool order_batch_test_stale_free;
#endif

#endif
