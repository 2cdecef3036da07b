/* txn.h: the batch transaction protocol: record, handler, savepoints, commit, and each message's
 * fate.
 */
#ifndef IDEMD_TXN_H
#define IDEMD_TXN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../include/idemd/handler.h"
#include "port.h"
#include "txn_state.h"

#define TXN_REDO_MAX 5 /* a batch whose transaction is lost is redone this many times */

/* The steps of an ordered queue's message at which txn_ops_t.order is called. */
typedef enum txn_order_step {
    TXN_ORDER_PASS,   /* a pass begins (i = -1, m = NULL): lock the batch's blocked keys at once */
    TXN_ORDER_CHECK,  /* recorded, before the handler: lock the key; *wait: it must wait */
    TXN_ORDER_WAIT,   /* it waits (rolled back to its savepoint): append it to the waiters */
    TXN_ORDER_DONE,   /* handled ok, or a duplicate: its key moves on if it was the head */
    TXN_ORDER_FAILED, /* RETRY or REJECT: block the key on it (retry) or release/hold (dead) */
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
} txn_ops_t;

typedef struct txn {
    const txn_ops_t *ops;
    void *ctx;
    port_clock_t clock; /* its now_ms cuts batches short (ops NULL: never) */
    bool record;        /* dedup = "table": insert a record for each message */
    bool bulk;          /* try the set-based pass first (needs record_many and find_records) */
    bool batch;         /* in that pass, call handle_many once instead of handle per message */
    uint64_t limit_ms;  /* stop starting handlers after this long (0: no limit) */
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
    bool cut_short;    /* limit_ms passed: some messages are left TXN_NEW (route HOLD) */
    char lost_why[96]; /* what lost the transaction the last time */
    int blamed;        /* messages rejected because their handler left the transaction
                        * unable to take a savepoint (1178: a table that cannot roll back) */
    /* Inside a pass (txn.c only): the message whose handler ran last (-1: none yet), and
     * the one an error of the handler's making is blamed on. */
    int last_ran;
    int blame;
} txn_t;

typedef enum txn_status {
    TXN_DONE = 0,   /* every message that ran has a final state */
    TXN_FATAL = -1, /* the connection cannot be trusted: outcome unknown, ack nothing */
} txn_status_t;

/*
 * Run the batch t->m[0..n-1] in one transaction (messages already REJECT
 * are skipped). With t->bulk, first the set-based way: one multi-row
 * record INSERT (ids already committed are found with one SELECT and left
 * out; an id repeated in the batch is its first copy's duplicate), the
 * handlers without savepoints (or one handle_many call with t->batch), one
 * COMMIT. The first message that fails rolls that back; the batch then
 * runs the per-message way without it (with t->batch: the set-based way
 * again, without the messages whose verdict was not OK):
 * per message a SAVEPOINT, the record INSERT (when t->record),
 * the handler; a message that fails is rolled back to its savepoint; then
 * one COMMIT (or ROLLBACK when nothing was handled). A lost transaction
 * (1213, 1305, a savepoint gone) is rolled back and redone up to
 * TXN_REDO_MAX times without the messages that already failed. After the
 * handlers, a last SAVEPOINT checks that the transaction can still take
 * one: a handler that wrote to a table which cannot roll back (1178, at
 * that check or at the next message's SAVEPOINT) makes its message REJECT
 * (the handler's failure, the server's message in its reason), and the
 * pass is rolled back and redone without it (set-based: message by
 * message, to find it); the connection is not blamed. After
 * TXN_DONE no message is RECORDED or HANDLED; NEW ones were never started
 * (cut short). After TXN_FATAL nothing may be acked.
 */
txn_status_t txn_run(txn_t *t) __attribute__((warn_unused_result));

#ifdef IDEMD_TESTING
/*
 * Test builds only (-DIDEMD_TESTING; default false): put back the old handling of a
 * handle_batch call that fails as a whole, where every message of the batch is retried
 * together and none runs alone through handle(), so a test can show the bug is found.
 */
extern bool txn_test_no_fallback;
#endif

#endif
