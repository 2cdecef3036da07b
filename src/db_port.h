/* db_port.h: the database port: one table of the database's calls, in four layers (the batch
 * transaction, the crash guard, an ordered queue's key tables, the outbox), filled once from the
 * real database by the worker (worker_ops.c) and once from fakes by the simulator (tests/sim).
 */
#ifndef IDEMD_DB_PORT_H
#define IDEMD_DB_PORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../include/idemd/handler.h"
#include "txn_state.h"

struct outbox_msg;   /* outbox.h */
struct outbox_depth; /* outbox.h */

/* Where a message stands towards its key's block. */
typedef enum order_place {
    ORDER_FREE = 0, /* the key is not blocked: handle it */
    ORDER_HEAD,     /* the key is blocked and this message is its head: handle it */
    ORDER_WAIT,     /* the key is blocked by another message: it waits */
} order_place_t;

/* The steps of an ordered queue's message at which db_txn_ops_t.order is called. */
typedef enum txn_order_step {
    TXN_ORDER_PASS,   /* a pass begins (i = -1, m = NULL): lock the batch's blocked keys at once */
    TXN_ORDER_CHECK,  /* recorded, before the handler: lock the key; *wait: it must wait */
    TXN_ORDER_WAIT,   /* it waits (rolled back to its savepoint): append it to the waiters */
    TXN_ORDER_DONE,   /* handled ok, or a duplicate: its key moves on if it was the head */
    TXN_ORDER_FAILED, /* RETRY or REJECT: block the key on it (retry) or release it or hold the key
                         (dead) */
} txn_order_step_t;

/*
 * The transaction layer: the database as the batch protocol (txn.c) sees it,
 * with the handler calls made inside its transaction. Each call returns 0 or the MySQL
 * error number it ended with; the implementation logs. ctx is the caller's.
 */
typedef struct db_txn_ops {
    /* SAVEPOINT, ROLLBACK TO SAVEPOINT, RELEASE SAVEPOINT, COMMIT, ROLLBACK. */
    unsigned (*exec)(void *ctx, const char *sql);
    /* INSERT the message's dedup record. */
    unsigned (*record)(void *ctx, const txn_msg_t *m);
    /* DELETE the message's attempts row (crash-guard count). */
    unsigned (*clear_attempts)(void *ctx, const txn_msg_t *m);
    /*
     * Run the handler on message i of the batch. Writes a reason into
     * m->reason on RETRY / REJECT; sets *err to the connection's last error
     * number after the call (0 when the handler's last statement worked).
     */
    idemd_result_t (*handle)(void *ctx, int i, txn_msg_t *m, unsigned *err);
    /* Set-based path (NULL: never taken). INSERT the records of ms[0..k-1] in one statement. */
    unsigned (*record_many)(void *ctx, txn_msg_t *const *ms, int k);
    /* Which of ms[0..k-1] have a committed record: sets found[j]. One SELECT. */
    unsigned (*find_records)(void *ctx, txn_msg_t *const *ms, int k, bool *found);
    /*
     * The handler's handle_batch on ms[0..k-1] (set-based pass only): a
     * verdict for each into r[j], a reason into ms[j]->reason when it is
     * not OK; *err as for handle. Returns 0, or -1 when the call failed as
     * a whole (reason in ms[0]->reason, logged): the pass is then rolled
     * back and every message runs alone through handle().
     */
    int (*handle_many)(void *ctx, txn_msg_t *const *ms, int k, idemd_result_t *r, unsigned *err);
    /*
     * Ordered queues (NULL: unordered): the key's rows for message i at
     * step, in the open transaction; 0 or the error number. Idempotent: a
     * redone pass calls it again for every message that failed before it,
     * in batch order. Only the per-message pass calls it (t->bulk must be
     * false).
     */
    unsigned (*order)(void *ctx, int i, txn_msg_t *m, txn_order_step_t step, bool *wait);
    /* The server's message for the statement that failed last (NULL: not known); borrowed
     * until the next call. For reasons and logs only. */
    const char *(*error_text)(void *ctx);
    /*
     * idemd's transaction (NULL: exec's SQL, the first statement opening it).
     * begin opens a pass's transaction; end commits it or rolls it back; both
     * 0 or the error number. held says whether the server refuses whatever
     * would end it (an XA branch) or an end is only seen afterwards: a
     * savepoint gone under a handler is then a transaction the handler ended.
     */
    unsigned (*begin)(void *ctx);
    unsigned (*end)(void *ctx, bool commit);
    bool (*held)(void *ctx);
} db_txn_ops_t;

/*
 * The guard layer: the database as the crash guard (guard.c) sees it (table idemd_attempt, one row
 * per consumer and message id). Each call commits on its own, outside any batch transaction;
 * failures are logged by the implementation (worker_ops.c wraps db.h). ctx is the caller's.
 */
typedef struct db_guard_ops {
    /* Whether id has a committed dedup record: 0 with *found, or -1. */
    int (*find_record)(void *ctx, const char *id, size_t len, bool *found);
    /* Count one more start: the starts after it, and the crashes so far in *crashes; or -1. */
    long long (*bump)(void *ctx, const char *id, size_t len, long long *crashes);
    /* Count one confirmed crash (with add_start also one start): the crashes after it, or -1. */
    long long (*crash)(void *ctx, const char *id, size_t len, bool add_start);
    /* Take back one counted start (never below 0): 0, or -1. */
    int (*unstart)(void *ctx, const char *id, size_t len);
} db_guard_ops_t;

/*
 * The order layer: the key tables as order.h's calls (for order_batch.c), on a context instead of a
 * connection: order.c over the worker's database in the daemon (worker_order.c), a fake table in
 * the simulator (tests/sim). Each returns 0 or the MySQL error number.
 */
typedef struct db_order_ops {
    unsigned (*blocked)(void *ctx, const char *const *keys, const size_t *lens, int n,
                        bool *blocked);
    unsigned (*check)(void *ctx, const char *key, size_t klen, const char *id, size_t idlen,
                      order_place_t *place);
    unsigned (*wait)(void *ctx, const char *key, size_t klen, const char *id, size_t idlen);
    unsigned (*block)(void *ctx, const char *key, size_t klen, const char *id, size_t idlen);
    unsigned (*done)(void *ctx, const char *key, size_t klen, const char *id, size_t idlen,
                     bool hold);
} db_order_ops_t;

/*
 * The outbox layer: the outbox table as the relay (outbox.c) sees it. Calls are on ctx; each logs
 * its own failure and returns 0, -1 when the connection is lost (the caller reconnects) or -2 for
 * another failure. Reads and writes of a relay slice are one transaction, ended by commit or
 * rollback. The real implementation is MySQL (outbox_io.c); the simulator passes fakes.
 */
typedef struct db_outbox_ops {
    /* Ids and body+header sizes of at most limit rows due to be sent, oldest first: the rows of
     * the k sources src[0..k-1], or with k = -1 those older than grace_s seconds; rows waiting
     * out a backoff are left out. Their number in *got. */
    int (*due)(void *ctx, const char *const *src, const size_t *src_len, int k, int grace_s,
               int limit, unsigned long long *ids, unsigned long long *sizes, int *got);
    /* The rows of ids[0..n-1] whole, in id order, into out; their number (rows gone meanwhile
     * are missing) in *got. */
    int (*fetch)(void *ctx, const unsigned long long *ids, int n, struct outbox_msg *out, int *got);
    int (*remove)(void *ctx, const unsigned long long *ids, int n); /* delete sent rows */
    /* Count a refused send of row id: attempts + 1, next try in wait_ms, last error why. */
    int (*refuse)(void *ctx, unsigned long long id, long long wait_ms, const char *why);
    int (*commit)(void *ctx);
    void (*rollback)(void *ctx);
    /* The table lacks sql/009's columns: no attempts, no backoff, no dead letters. */
    bool (*legacy)(void *ctx);
    int (*depth)(void *ctx, unsigned max_attempts, struct outbox_depth *d); /* 0 or -1 */
    void (*close)(void *ctx); /* free ctx (outbox_close); NULL: not owned */
} db_outbox_ops_t;

/*
 * The database port: each module takes its layer (txn_t, guard_t,
 * order_batch_t, outbox_t) from the one table. A layer's calls are on the
 * context the module is given with it.
 */
typedef struct db_ops {
    db_txn_ops_t txn;       /* the batch transaction (txn.c, through step.c) */
    db_guard_ops_t guard;   /* idemd_attempt and the dedup records (guard.c) */
    db_order_ops_t order;   /* the key tables (order_batch.c); txn.order NULL: unordered */
    db_outbox_ops_t outbox; /* the outbox table (outbox.c), on its own context */
} db_ops_t;

/* A database port: its table and the context its calls are on. */
typedef struct db_port {
    const db_ops_t *ops;
    void *ctx;
} db_port_t;

#endif
