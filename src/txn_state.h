/* txn_state.h: one message's state in a batch: the moves (txn_move, txn_route and
 * txn_outcome_name are declared in txn.h) and the verdict helpers the transaction uses.
 */
#ifndef IDEMD_TXN_STATE_H
#define IDEMD_TXN_STATE_H

#include "txn.h"

/* Set m's reason (printf-style), keeping it NUL-terminated. */
void txn_why(txn_msg_t *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Give message m the verdict r (not OK): RETRY or REJECT, with a default reason when the
 * handler gave none; an unknown r is a REJECT that says so. */
void txn_verdict(txn_msg_t *m, idemd_result_t r);

#endif
