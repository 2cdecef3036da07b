/* txn_result.h: what a handler's result, a batch handler's verdicts, or a statement's error does
 * to a pass of the batch transaction; shared by txn.c and txn_result.c only.
 */
#ifndef IDEMD_TXN_RESULT_H
#define IDEMD_TXN_RESULT_H

#include "txn_types.h"

/* What one pass of the transaction ended with. */
typedef enum txn_pass {
    TXN_PASS_DONE,     /* committed or rolled back; every state final */
    TXN_PASS_REDO,     /* the transaction is gone: roll back, run the NEW ones again */
    TXN_PASS_FATAL,    /* the connection cannot be trusted */
    TXN_PASS_FALLBACK, /* set-based pass: roll back, run the NEW ones message by message */
    TXN_PASS_AGAIN,    /* set-based pass: roll back, run it again without the failed ones */
    TXN_PASS_LOOK,     /* set-based pass: its record INSERT met recorded ids: roll back (which
                        * frees the locks the INSERT took on them), run it again looking first */
    TXN_PASS_FAILED,   /* txn_result: the verdict was not OK; the caller rolls the message back */
    TXN_PASS_BLAME,    /* the last handler broke the transaction (t->blame, its reason set):
                        * roll back, reject that message, run the NEW ones again */
} txn_pass_t;

/* What an error number err at where means for the open transaction: REDO (why in t->lost_why),
 * BLAME (an error of the last handler's making: t->blame), or FATAL. */
txn_pass_t txn_lost(txn_t *t, unsigned err, const char *where);

/*
 * Apply the handler's result r on recorded message m, err being the connection's last error
 * number after the call: OK makes m HANDLED and clears its attempts row in the transaction
 * (DONE); a lost connection is FATAL; a deadlock victim goes back to NEW and the transaction is
 * redone (REDO); any other verdict makes m RETRY or REJECT (FAILED: the caller rolls it back).
 */
txn_pass_t txn_result(txn_t *t, txn_msg_t *m, idemd_result_t r, unsigned err);

/* Run the handler on recorded message i and apply its result (txn_result). */
txn_pass_t txn_handle(txn_t *t, int i);

/* The batch handler on the recorded list[0..k-1] (verdicts into r): HANDLED; verdicts and
 * AGAIN; or FALLBACK when the call failed as a whole. */
txn_pass_t txn_bulk_handle(txn_t *t, txn_msg_t **list, int k, idemd_result_t *r);

#endif
