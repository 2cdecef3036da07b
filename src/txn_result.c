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
    if (t->last_ran < 0) {
        log_error("batch of %d: error %u at %s before any handler ran: the batch goes back to "
                  "the broker",
                  t->n, err, where);
        return TXN_PASS_FATAL;
    }
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

/*
 * A handler ended idemd's transaction (committed or rolled back what came
 * before, the dedup records with it) where the server could not refuse it:
 * nothing of the batch may be acked or redone, for a redelivery would find
 * its record and pass for a duplicate. The run is FATAL and says so
 * (t->ended): the worker holds the queue. m: the message whose handler did
 * it (NULL: a batch handler).
 */
static txn_pass_t txn_ended(txn_t *t, const txn_msg_t *m, const char *what)
{
    char pid[96];
    t->ended = true;
    t->ended_at = m ? (int)(m - t->m) : -1;
    if (m)
        snprintf(t->ended_why, sizeof(t->ended_why),
                 "the handler of id=%s ended idemd's transaction (%s)",
                 delivery_id_printable(m->id, m->id_len, pid, sizeof(pid)), what);
    else
        snprintf(t->ended_why, sizeof(t->ended_why),
                 "the batch handler ended idemd's transaction (%s)", what);
    snprintf(t->lost_why, sizeof(t->lost_why), "a handler ended the transaction");
    log_error("%s: what it did before is committed without its message's outcome, so this "
              "batch is neither acked nor redone; the queue is held. Fix the handler (it must "
              "not COMMIT, ROLLBACK, run DDL or any statement that ends a transaction: "
              "docs/plugins.md), reconcile that message's effects by hand, then reload",
              t->ended_why);
    return TXN_PASS_FATAL;
}

/* Whether the transaction a savepoint vanished from was committed, not rolled back: a
 * message it recorded has a committed record. Unknown (no record to look at) counts as
 * committed: holding the queue is the safe reading. */
static bool txn_was_committed(txn_t *t)
{
    if (!t->record || t->ops->find_records == NULL)
        return true;
    for (int i = 0; i < t->n; i++) {
        txn_msg_t *m = &t->m[i];
        bool found = false;
        if (m->state != TXN_RECORDED && m->state != TXN_HANDLED)
            continue;
        if (t->ops->find_records(t->ctx, &m, 1, &found) != 0)
            return true;
        return found;
    }
    return true;
}

/*
 * The handler's statement lost the database session (a lost connection, a
 * primary demoted or leaving: db_classify's DB_ERR_CONNECTION). Said here,
 * where idemd first sees it, with the handler's own words (said, borrowed;
 * may be ""): FATAL, nothing is counted against the message.
 */
static txn_pass_t txn_session_lost(const txn_t *t, unsigned err, const char *said)
{
    log_error("batch of %d: the database session was lost under the handler (error %u%s%.300s): "
              "the batch is given back, no attempt counted",
              t->n, err, said[0] ? ": " : "", said);
    return TXN_PASS_FATAL;
}

/* What an error number means for the open transaction. */
txn_pass_t txn_lost(txn_t *t, unsigned err, const char *where)
{
    db_status_t st = db_classify(err);
    /* Where the server cannot refuse an end, a savepoint gone under a handler may be a
     * COMMIT of the handler's: the records tell. */
    if (st == DB_ERR_TX_LOST && (t->last_ran >= 0 || t->batch_calls > 0) && t->ops->held &&
        !t->ops->held(t->ctx) && txn_was_committed(t))
        return txn_ended(t, t->last_ran >= 0 ? &t->m[t->last_ran] : NULL,
                         "a savepoint was gone at idemd's next statement, and a record of the "
                         "batch committed");
    switch (st) {
    case DB_ERR_DEADLOCK:
    case DB_ERR_TX_LOST:
    case DB_ERR_LOCK_TIMEOUT: /* rolled back: at most the whole transaction, so redo it all */
        snprintf(t->lost_why, sizeof(t->lost_why), "error %u at %s", err, where);
        return TXN_PASS_REDO;
    case DB_ERR_HANDLER:
        return txn_blame_note(t, err, where);
    default:
        /* Connection lost (its statement said so), or nothing we know how to recover from. */
        if (st != DB_ERR_CONNECTION)
            log_error("batch of %d: error %u at %s: the transaction's outcome is not known; the "
                      "batch goes back to the broker and the records decide",
                      t->n, err, where);
        return TXN_PASS_FATAL;
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
        return txn_session_lost(t, err, m->reason);
    if (st == DB_ERR_ENDED) {
        if (txn_was_committed(t))
            return txn_ended(t, m, "the server-status flags show no open transaction after it");
        /* A ROLLBACK of the handler's: nothing was committed. It failed; the rest is redone. */
        txn_why(m, "the handler ended idemd's transaction with a rollback (nothing was "
                   "committed): it must not end the transaction");
        txn_verdict(m, IDEMD_RESULT_RETRY);
        return TXN_PASS_AGAIN;
    }
    if (st == DB_ERR_REFUSED) {
        /* Nothing was committed: the message failed, its own reason kept when it gave one. */
        const char *text = t->ops->error_text ? t->ops->error_text(t->ctx) : NULL;
        t->refused++;
        if (m->reason[0]) {
            char said[sizeof(m->reason)];
            snprintf(said, sizeof(said), "%s", m->reason);
            txn_why(m,
                    "the handler tried to end idemd's transaction: the server refused it and "
                    "nothing of this message was kept (error %u). The handler said: %.300s",
                    err, said);
        } else {
            txn_why(m,
                    "the handler tried to end idemd's transaction (COMMIT, ROLLBACK, DDL or "
                    "another statement that commits): the server refused it and nothing of this "
                    "message was kept (error %u: %.120s)",
                    err, text ? text : "no message");
        }
        txn_verdict(m, r == IDEMD_RESULT_REJECT ? r : IDEMD_RESULT_RETRY);
        return TXN_PASS_FAILED;
    }
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
        return txn_session_lost(t, err, "");
    if (st == DB_ERR_ENDED && txn_was_committed(t))
        return txn_ended(t, NULL, "the server-status flags show no open transaction after it");
    /* Refused, or ended by a rollback: which message's call did it shows one by one. */
    if (st == DB_ERR_REFUSED || st == DB_ERR_ENDED)
        return TXN_PASS_FALLBACK;
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
