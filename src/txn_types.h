/* txn_types.h: the batch transaction's ops and the state of one run (txn_t), below the code
 * that runs it (txn.c, txn_result.c); txn.h adds txn_run.
 */
#ifndef IDEMD_TXN_TYPES_H
#define IDEMD_TXN_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../include/idemd/handler.h"
#include "port.h"
#include "txn_state.h"

/* The steps of an ordered queue's message at which txn_ops_t.order is called. */
typedef enum txn_order_step {
    TXN_ORDER_PASS,   /* a pass begins (i = -1, m = NULL): lock the batch's blocked keys at once */
    TXN_ORDER_CHECK,  /* recorded, before the handler: lock the key; *wait: it must wait */
    TXN_ORDER_WAIT,   /* it waits (rolled back to its savepoint): append it to the waiters */
    TXN_ORDER_DONE,   /* handled ok, or a duplicate: its key moves on if it was the head */
    TXN_ORDER_FAILED, /* RETRY or REJECT: block the key on it (retry) or release it or hold the key
                         (dead) */
} txn_order_step_t;

/*
 * The database as the protocol sees it. Each call returns 0 or the MySQL
 * error number it ended with; the implementation logs. ctx is the caller's.
 */
typedef struct txn_ops {
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
} txn_ops_t;

typedef struct txn {
    const txn_ops_t *ops;
    void *ctx;
    port_clock_t clock; /* its now_ms cuts batches short (ops NULL: never) */
    bool record;        /* dedup = "table": insert a record for each message */
    bool bulk;          /* try the set-based pass first (needs record_many and find_records) */
    bool batch;         /* in that pass, call handle_many once instead of handle per message */
    uint64_t limit_ms;  /* stop starting handlers after this long (0: no limit) */
    /* A dry run (idemctl try): ROLLBACK where COMMIT would be, after the same savepoint
     * checks; dry_peek (NULL: none) is called on ctx in the still open transaction right
     * before that ROLLBACK, to read back what the handlers wrote. */
    bool dry_run;
    void (*dry_peek)(void *ctx);
    txn_msg_t *m;
    int n;
    const int *seq; /* the per-message pass takes m[seq[0]], m[seq[1]], ... (a permutation of
                     * 0..n-1; NULL: 0..n-1). Borrowed. */
    /* What the last txn_run did (for logs and counters). */
    int redos;         /* transactions lost and redone */
    int lock_waits;    /* records that timed out waiting for another transaction */
    bool fell_back;    /* the set-based pass gave way to the per-message one */
    bool too_slow;     /* ... because the handlers ran past limit_ms: skip it for a while */
    int batch_calls;   /* handle_many calls (more than one: some verdicts were not OK) */
    bool committed;    /* a COMMIT succeeded */
    bool cut_short;    /* limit_ms passed: some messages are left TXN_NEW (route DEFER) */
    char lost_why[96]; /* what lost the transaction the last time */
    int blamed;        /* messages rejected because their handler left the transaction
                        * unable to take a savepoint (1178: a table that cannot roll back) */
    int refused;       /* handler calls that tried to end the transaction, refused by the server */
    bool ended;        /* a handler ended the transaction (not refused: TXN_FATAL); why in
                        * ended_why, the message in ended_at */
    int ended_at;
    char ended_why[256];
    /* Inside a pass (txn.c only): the message whose handler ran last (-1: none yet), and
     * the one an error of the handler's making is blamed on. */
    int last_ran;
    int blame;
} txn_t;

#endif
