/* txn_result.c: what a handler's result, a batch handler's verdicts, or a statement's error does
 * to a pass of the batch transaction (txn.c).
 */
#include "txn_result.h"

#include <stdio.h>

#include "db.h"
#include "delivery.h"
#include "log.h"
#include "txn_state.h"

#ifdef IDEMD_TESTING
bool txn_test_no_fallback = false;
#endif

/*
 * idemd's statement where failed with err because of what the handler of
 * the message that ran last did (DB_ERR_HANDLER): that message is to blame.
 * Its reason (kept when its handler had failed it already) and the log say
 * what happened and what to fix. BLAME, or FATAL when no handler ran.
 */
static txn_pass_t txn_blame_note(txn_t *t, unsigned err, const char *where)
{
    const char *text = t->ops->error_text ? t->ops->error_text(t->ctx) : NULL;
    char pid[96];
    if (t->last_ran < 0)
        return TXN_PASS_FATAL;
    txn_msg_t *m = &t->m[t->last_ran];
    t->blame = t->last_ran;
    log_warn("id=%s: its handler wrote to a table whose storage engine cannot roll back: the "
             "server refused idemd's %s (error %u: %.200s). That write is not undone with the "
             "message, so exactly-once cannot hold for that table: the message is rejected "
             "(dead-lettered, not retried: a retry would write it again), the rest of the batch "
             "is redone without it, the worker carries on. Fix the handler's table: ALTER TABLE "
             "... ENGINE=InnoDB (docs/plugins.md)",
             delivery_id_printable(m->id, m->id_len, pid, sizeof(pid)), where, err,
             text ? text : "no message");
    if (m->state == TXN_HANDLED)
        txn_why(m,
                "handler wrote to a table that cannot roll back: idemd's %s failed with error "
                "%u: %.200s. That write stays whatever becomes of the message (exactly-once "
                "cannot hold for it): move the table to InnoDB, then replay",
                where, err, text ? text : "no message");
    return TXN_PASS_BLAME;
}

/* What an error number means for the open transaction. */
txn_pass_t txn_lost(txn_t *t, unsigned err, const char *where)
{
    switch (db_classify(err)) {
    case DB_ERR_DEADLOCK:
    case DB_ERR_TX_LOST:
    case DB_ERR_LOCK_TIMEOUT: /* rolled back: at most the whole transaction, so redo it all */
        snprintf(t->lost_why, sizeof(t->lost_why), "error %u at %s", err, where);
        return TXN_PASS_REDO;
    case DB_ERR_HANDLER:
        return txn_blame_note(t, err, where);
    default:
        return TXN_PASS_FATAL; /* connection lost, or nothing we know how to recover from */
    }
}

/*
 * Apply the handler's result r on recorded message m, err being the connection's last error
 * number after the call: OK makes m HANDLED and clears its attempts row in the transaction
 * (DONE); a lost connection is FATAL; a deadlock victim goes back to NEW and the transaction is
 * redone (REDO); any other verdict makes m RETRY or REJECT (FAILED: the caller rolls it back).
 */
txn_pass_t txn_result(txn_t *t, txn_msg_t *m, idemd_result_t r, unsigned err)
{
    m->reason[sizeof(m->reason) - 1] = '\0';
    db_status_t st = db_classify(err);
    if (st == DB_ERR_CONNECTION)
        return TXN_PASS_FATAL;
    if (r == IDEMD_RESULT_OK) {
        txn_move(m, TXN_HANDLED);
        if (m->counted && (err = t->ops->clear_attempts(t->ctx, m)) != 0)
            return txn_lost(t, err, "clearing the attempts row");
        return TXN_PASS_DONE; /* a transaction lost under it shows at RELEASE SAVEPOINT */
    }
    if (st == DB_ERR_DEADLOCK) {
        /* A victim, not a failure: the whole transaction went; redo it with this message. */
        txn_move(m, TXN_NEW);
        snprintf(t->lost_why, sizeof(t->lost_why), "error %u under the handler", err);
        return TXN_PASS_REDO;
    }
    txn_verdict(m, r);
    return TXN_PASS_FAILED;
}

/* Run the handler on recorded message i and apply its result (txn_result). */
txn_pass_t txn_handle(txn_t *t, int i)
{
    unsigned err = 0;
    t->last_ran = i;
    idemd_result_t r = t->ops->handle(t->ctx, i, &t->m[i], &err);
    return txn_result(t, &t->m[i], r, err);
}

/* The batch handler on the recorded list[0..k-1]: HANDLED; verdicts and AGAIN; or FALLBACK when
 * the call failed as a whole. */
txn_pass_t txn_bulk_handle(txn_t *t, txn_msg_t **list, int k, idemd_result_t *r)
{
    unsigned err = 0;
    bool failed = false;
    t->batch_calls++;
    for (int j = 0; j < k; j++)
        list[j]->reason[0] = '\0';
    int rc = t->ops->handle_many(t->ctx, list, k, r, &err);
    db_status_t st = db_classify(err);
    if (st == DB_ERR_CONNECTION)
        return TXN_PASS_FATAL;
    if (st == DB_ERR_DEADLOCK) {
        snprintf(t->lost_why, sizeof(t->lost_why), "error %u under the batch handler", err);
        return TXN_PASS_REDO;
    }
#ifdef IDEMD_TESTING
    if (rc != 0 && txn_test_no_fallback) {
        /* The old handling (txn.h): the innocent are retried with the guilty. */
        char why[sizeof(list[0]->reason)];
        snprintf(why, sizeof(why), "%s", list[0]->reason[0] ? list[0]->reason : "batch failed");
        for (int j = 0; j < k; j++) {
            txn_move(list[j], TXN_RETRY);
            txn_why(list[j], "batch handler failed: %.400s", why);
        }
        return TXN_PASS_AGAIN;
    }
#endif
    if (rc != 0) {
        /* A failure of the call as a whole names no culprit: retrying them all together would
         * dead-letter the innocent with the guilty. Each runs alone through handle(), and only
         * the one at fault gets its verdict. */
        log_info("batch of %d: handle_batch failed (%.400s): running its messages one by one", k,
                 list[0]->reason[0] ? list[0]->reason : "no reason given");
        for (int j = 0; j < k; j++)
            list[j]->reason[0] = '\0';
        return TXN_PASS_FALLBACK;
    }
    for (int j = 0; j < k; j++)
        failed |= r[j] != IDEMD_RESULT_OK;
    /* Some verdicts not OK: the pass is run again without those; the others stay RECORDED
     * until the rollback makes them NEW, their attempts rows untouched. */
    for (int j = 0; j < k; j++) {
        if (failed && r[j] == IDEMD_RESULT_OK)
            continue;
        txn_pass_t p = txn_result(t, list[j], r[j], 0);
        if (p != TXN_PASS_DONE && p != TXN_PASS_FAILED)
            return p;
    }
    return failed ? TXN_PASS_AGAIN : TXN_PASS_DONE;
}
