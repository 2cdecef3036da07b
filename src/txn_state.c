/* txn_state.c: one message's state in a batch: the moves the protocol allows, its route and
 * outcome name, and the verdicts a handler gives it.
 */
#include "txn_state.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "log.h"

/* Which state may follow which: one row per old state. */
static const bool txn_next[TXN_N_STATES][TXN_N_STATES] = {
    [TXN_NEW] =
        {[TXN_RECORDED] = true, [TXN_DUPLICATE] = true, [TXN_RETRY] = true, [TXN_REJECT] = true},
    [TXN_RECORDED] = {[TXN_HANDLED] = true,
                      [TXN_RETRY] = true,
                      [TXN_REJECT] = true,
                      [TXN_NEW] = true,
                      [TXN_WAIT] = true},
    [TXN_HANDLED] = {[TXN_COMMITTED] = true, [TXN_NEW] = true},
    [TXN_DUPLICATE] = {[TXN_NEW] = true},
    [TXN_WAIT] = {[TXN_NEW] = true},
};

static const char *txn_names[TXN_N_STATES] = {
    [TXN_NEW] = "pending",   [TXN_RECORDED] = "pending",    [TXN_HANDLED] = "pending",
    [TXN_COMMITTED] = "ok",  [TXN_DUPLICATE] = "duplicate", [TXN_RETRY] = "retry",
    [TXN_REJECT] = "reject", [TXN_WAIT] = "wait",
};

void txn_move(txn_msg_t *m, txn_state_t to)
{
    if ((unsigned)m->state >= TXN_N_STATES || (unsigned)to >= TXN_N_STATES ||
        !txn_next[m->state][to]) {
        log_error("txn: message in state %d cannot move to state %d", (int)m->state, (int)to);
        abort();
    }
    m->state = to;
}

const char *txn_outcome_name(txn_state_t s)
{
    return (unsigned)s < TXN_N_STATES ? txn_names[s] : "?";
}

txn_route_t txn_route(const txn_msg_t *m, int max_attempts, bool has_dlq)
{
    switch (m->state) {
    case TXN_COMMITTED:
    case TXN_DUPLICATE:
        return TXN_ROUTE_ACK;
    case TXN_RETRY:
        if (m->attempt < (unsigned)max_attempts)
            return TXN_ROUTE_DELAY;
        return has_dlq ? TXN_ROUTE_DLQ : TXN_ROUTE_BROKER;
    case TXN_REJECT:
        return has_dlq ? TXN_ROUTE_DLQ : TXN_ROUTE_BROKER;
    case TXN_WAIT:
        return TXN_ROUTE_DELAY; /* never an attempt, never dead-lettered */
    default:
        return TXN_ROUTE_DEFER;
    }
}

/* Set m's reason (printf-style), keeping it NUL-terminated. */
void txn_why(txn_msg_t *m, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->reason, sizeof(m->reason), fmt, ap);
    va_end(ap);
}

/* Give message m the verdict r (not OK) with a default reason. */
void txn_verdict(txn_msg_t *m, idemd_result_t r)
{
    if (r == IDEMD_RESULT_RETRY) {
        txn_move(m, TXN_RETRY);
        if (!m->reason[0])
            txn_why(m, "handler asked to retry");
    } else {
        txn_move(m, TXN_REJECT);
        if (r != IDEMD_RESULT_REJECT)
            txn_why(m, "handler returned unknown result %d", (int)r);
        else if (!m->reason[0])
            txn_why(m, "handler rejected the message");
    }
}
