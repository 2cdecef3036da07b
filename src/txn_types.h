/* txn_types.h: the batch transaction's ops and the state of one run (txn_t), below the code
 * that runs it (txn.c, txn_result.c); txn.h adds txn_run.
 */
#ifndef IDEMD_TXN_TYPES_H
#define IDEMD_TXN_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../include/idemd/handler.h"
#include "db_port.h"
#include "port.h"
#include "txn_state.h"

typedef struct txn {
    const db_txn_ops_t *ops;
    void *ctx;
    port_clock_t clock; /* its now_ms cuts batches short (ops NULL: never) */
    bool record;        /* dedup = "table": insert a record for each message */
    bool bulk;          /* try the set-based pass first (needs record_many and find_records) */
    bool batch;         /* in that pass, call handle_many once instead of handle per message */
    /* In that pass, look up which ids are recorded already before the record INSERT (the
     * caller sets it when the last batch held such ids: an INSERT that meets one fails and
     * is redone without them, which costs the server more than the lookup). */
    bool look_first;
    uint64_t limit_ms; /* stop starting handlers after this long (0: no limit) */
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
    bool found_dups;   /* the set-based pass found ids recorded already (next: look_first) */
    int clashes;       /* set-based passes whose record INSERT met recorded ids */
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
