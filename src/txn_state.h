/* txn_state.h: one message's state in a batch: its states, the moves, where it goes, and the
 * verdict helpers the transaction uses (txn_state.c).
 */
#ifndef IDEMD_TXN_STATE_H
#define IDEMD_TXN_STATE_H

#include <stdbool.h>
#include <stddef.h>

#include "../include/idemd/handler.h"

#define TXN_ID_MAX 255

/*
 * Where one message of a batch stands. Only txn_move() writes it
 * (tests/lint-states fails on any other write; batch_accept initialises it
 * NEW); every
 * other fact (is it acked? does it need a copy?) is derived from it.
 *
 *   NEW --record--> RECORDED --handler ok--> HANDLED --COMMIT--> COMMITTED
 *    |                 |                        |
 *    |                 +--retry/reject--> RETRY / REJECT (rolled back to its savepoint)
 *    +--1062--> DUPLICATE      +--1205 on the record--> RETRY
 *   RECORDED, HANDLED, DUPLICATE --transaction lost (1213, 1305)--> NEW (redo)
 *   NEW, RECORDED, HANDLED --redone TXN_REDO_MAX times--> RETRY
 *   NEW --bad id, crash guard, no order key--> REJECT (before the transaction)
 *   RECORDED --its key is blocked by another message (ordered queue)--> WAIT --lost--> NEW
 *   HANDLED --idemd's next SAVEPOINT fails by its handler's doing (1178)--> NEW (rolled back)
 *     --> REJECT, and the pass is redone without it
 *   A dry run (txn_t.dry_run, idemctl try) ends in ROLLBACK where COMMIT would be: its
 *   handled messages stay HANDLED (rolled back, never COMMITTED).
 */
typedef enum txn_state {
    TXN_NEW = 0,   /* not run yet in this pass of the transaction */
    TXN_RECORDED,  /* its record is in the open transaction; the handler runs next */
    TXN_HANDLED,   /* the handler said ok: its effects are in the open transaction */
    TXN_COMMITTED, /* handled, and the COMMIT succeeded: ack */
    TXN_DUPLICATE, /* another committed transaction holds its record: ack, never handled */
    TXN_RETRY,     /* rolled back; try again later */
    TXN_REJECT,    /* rolled back or never run; dead-letter */
    TXN_WAIT,      /* ordered queue: its key waits on another message; to the delay queue, not
                    * an attempt (docs/ordering.md) */
    TXN_N_STATES
} txn_state_t;

/* Where a message goes once the transaction is over. */
typedef enum txn_route {
    TXN_ROUTE_ACK = 0, /* committed or duplicate: ack */
    TXN_ROUTE_DELAY,   /* copy to a delay tier (or the queue's tail), then ack */
    TXN_ROUTE_DLQ,     /* copy to the dead letter queue, then ack */
    TXN_ROUTE_BROKER,  /* no dead letter queue: basic.nack without requeue */
    TXN_ROUTE_DEFER,   /* not run yet (the batch was cut short): defer it to the next one */
} txn_route_t;

typedef struct txn_msg {
    txn_state_t state;
    char id[TXN_ID_MAX + 1];
    size_t id_len;
    unsigned attempt; /* this attempt's number, 1-based */
    bool counted;     /* an attempts row exists for it: delete it with the effects */
    char reason[512]; /* why it is RETRY or REJECT */
} txn_msg_t;

/* Move m to state to; aborts on a transition the protocol does not have. */
void txn_move(txn_msg_t *m, txn_state_t to);

/* Where m goes: retries past max_attempts and rejects go to the dead letter queue if any. */
txn_route_t txn_route(const txn_msg_t *m, int max_attempts, bool has_dlq);

/* The outcome's name for logs: "ok", "duplicate", "retry", "reject", "wait", "pending". */
const char *txn_outcome_name(txn_state_t s);

/* Set m's reason (printf-style), keeping it NUL-terminated. */
void txn_why(txn_msg_t *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Give message m the verdict r (not OK): RETRY or REJECT, with a default reason when the
 * handler gave none; an unknown r is a REJECT that says so. */
void txn_verdict(txn_msg_t *m, idemd_result_t r);

#endif
