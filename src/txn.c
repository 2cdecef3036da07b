/* txn.c: the batch transaction protocol: record, handler, savepoints, commit, and each message's
 * fate.
 */
#include "txn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db.h"
#include "log.h"
#include "txn_result.h"
#include "txn_state.h"

/* Open a pass's transaction (db_txn_ops_t.begin; without it the first statement opens it). */
static unsigned txn_begin(txn_t *t)
{
    return t->ops->begin ? t->ops->begin(t->ctx) : 0;
}

/* Commit or roll back the open transaction. */
static unsigned txn_end(txn_t *t, bool commit)
{
    return t->ops->end ? t->ops->end(t->ctx, commit)
                       : t->ops->exec(t->ctx, commit ? "COMMIT" : "ROLLBACK");
}

/*
 * Whether the pass's first savepoint can be left out: in an XA branch the server refuses
 * whatever would end the transaction, and a branch it rolled back (a deadlock, a lock wait
 * timeout with innodb_rollback_on_timeout) refuses every later statement and its end, so a
 * RELEASE of that savepoint would tell nothing the branch does not. Two statements fewer a
 * batch. Where the transaction is only checked, a handler's statements after a rollback
 * would run in a new transaction: only the gone savepoint shows it.
 */
static bool txn_branch(const txn_t *t)
{
    return t->ops->held && t->ops->held(t->ctx);
}

/* Roll back to message i's savepoint after it failed. */
static txn_pass_t txn_undo(txn_t *t, int i)
{
    char sql[48];
    snprintf(sql, sizeof(sql), "ROLLBACK TO SAVEPOINT m%d", i);
    unsigned err = t->ops->exec(t->ctx, sql);
    /* 1305: the savepoint is gone, and with it the transaction (e.g. 1205 with
     * innodb_rollback_on_timeout = ON): what came before must be redone. */
    return err ? txn_lost(t, err, "ROLLBACK TO SAVEPOINT") : TXN_PASS_DONE;
}

/* Ordered queues: message i's key rows at step (db_txn_ops_t.order); DONE, or what the error means.
 * Whatever it wrote is to be committed: *handled. */
static txn_pass_t txn_order(txn_t *t, int i, txn_order_step_t step, bool *wait, bool *handled)
{
    bool w = false;
    unsigned err;
    if (t->ops->order == NULL)
        return TXN_PASS_DONE;
    if ((err = t->ops->order(t->ctx, i, &t->m[i], step, &w)) != 0)
        return txn_lost(t, err, "the order key's rows");
    if (wait)
        *wait = w;
    *handled = true;
    return TXN_PASS_DONE;
}

/*
 * Ordered queues: message i's key is blocked by another message: undo its
 * record and append it to the key's waiters, which is committed with the
 * batch (it goes to the delay queue to wait, not as an attempt).
 */
static txn_pass_t txn_wait(txn_t *t, int i, bool *handled)
{
    txn_msg_t *m = &t->m[i];
    txn_move(m, TXN_WAIT);
    txn_why(m, "waiting: an earlier message of its order key is not done (not an attempt)");
    txn_pass_t p = txn_undo(t, i);
    return p == TXN_PASS_DONE ? txn_order(t, i, TXN_ORDER_WAIT, NULL, handled) : p;
}

/*
 * Record, then handle message i inside the open transaction. lone: the only message of the
 * pass, in a branch, unordered (txn_pass): no savepoint, and a failure is undone by the
 * pass's ROLLBACK (nothing else is handled).
 */
static txn_pass_t txn_one(txn_t *t, int i, bool *handled, bool lone)
{
    txn_msg_t *m = &t->m[i];
    char sql[48];
    unsigned err;
    bool wait = false;
    txn_pass_t p;

    if (!lone) {
        snprintf(sql, sizeof(sql), "SAVEPOINT m%d", i);
        if ((err = t->ops->exec(t->ctx, sql)) != 0)
            return txn_lost(t, err, "SAVEPOINT");
    }
    if (t->record && (err = t->ops->record(t->ctx, m)) != 0) {
        switch (db_classify(err)) {
        case DB_DUPLICATE: /* only the statement was rolled back */
            txn_move(m, TXN_DUPLICATE);
            /* Committed before: should its key still wait on it, it waits no more. */
            return txn_order(t, i, TXN_ORDER_DONE, NULL, handled);
        case DB_ERR_LOCK_TIMEOUT:
            /* Another transaction holds the key. The server may have rolled
             * back only the statement or (innodb_rollback_on_timeout) all of
             * ours: the savepoint tells which. */
            t->lock_waits++;
            txn_move(m, TXN_RETRY);
            txn_why(m, "lock wait timeout on the dedup key: another transaction holds it");
            if (lone)
                return TXN_PASS_DONE;
            p = txn_undo(t, i);
            return p == TXN_PASS_DONE ? txn_order(t, i, TXN_ORDER_FAILED, NULL, handled) : p;
        default:
            return txn_lost(t, err, "record INSERT");
        }
    }
    txn_move(m, TXN_RECORDED);
    if ((p = txn_order(t, i, TXN_ORDER_CHECK, &wait, handled)) != TXN_PASS_DONE)
        return p;
    if (wait)
        return txn_wait(t, i, handled);
    p = txn_handle(t, i);
    if (p == TXN_PASS_DONE) {
        *handled = true;
        return txn_order(t, i, TXN_ORDER_DONE, NULL, handled);
    }
    if (p == TXN_PASS_FAILED && lone)
        return TXN_PASS_DONE; /* the pass's ROLLBACK undoes it */
    if (p != TXN_PASS_FAILED)
        return p;
    /* Rolled back to its savepoint first, so that the key's new rows stay. */
    p = txn_undo(t, i);
    return p == TXN_PASS_DONE ? txn_order(t, i, TXN_ORDER_FAILED, NULL, handled) : p;
}

/*
 * End a pass: ROLLBACK when nothing was handled; else RELEASE the pass's
 * first savepoint (sp; NULL: none, txn_branch) and COMMIT, and the handled messages are committed
 * (a dry run: ROLLBACK instead, and they stay HANDLED).
 * The savepoint is gone if the transaction was lost under a handler that
 * carried on (its later statements would run in a new transaction).
 */
static txn_pass_t txn_finish(txn_t *t, bool handled, const char *sp)
{
    char sql[48];
    unsigned err;

    if (!handled)
        return txn_end(t, false) ? TXN_PASS_FATAL : TXN_PASS_DONE;
    /* One more savepoint: it fails (1178) if the last handler wrote to a table that cannot
     * roll back, as the next message's would have; then that message is to blame. */
    if (t->last_ran >= 0 && (err = t->ops->exec(t->ctx, "SAVEPOINT e")) != 0)
        return txn_lost(t, err, "SAVEPOINT");
    if (sp) {
        snprintf(sql, sizeof(sql), "RELEASE SAVEPOINT %s", sp);
        if ((err = t->ops->exec(t->ctx, sql)) != 0)
            return txn_lost(t, err, "RELEASE SAVEPOINT");
    }
    if (t->dry_run) { /* idemctl try: everything above ran as it would; nothing is kept */
        if (t->dry_peek)
            t->dry_peek(t->ctx);
        return txn_end(t, false) ? TXN_PASS_FATAL : TXN_PASS_DONE;
    }
    if ((err = txn_end(t, true)) != 0)
        /* Galera reports a certification conflict at COMMIT as 1213, a branch the server
         * rolled back says so (1613, 1614, 1402): nothing committed. Anything else leaves
         * the outcome unknown: redelivery and the record decide. */
        return db_classify(err) == DB_ERR_DEADLOCK ||
                       (db_classify(err) == DB_ERR_TX_LOST && txn_branch(t))
                   ? txn_lost(t, err, "COMMIT")
                   : TXN_PASS_FATAL;
    t->committed = true;
    for (int i = 0; i < t->n; i++)
        if (t->m[i].state == TXN_HANDLED)
            txn_move(&t->m[i], TXN_COMMITTED);
    return TXN_PASS_DONE;
}

/* Now on the batch's clock, in ms (0 without one: batches are never cut short). */
static uint64_t txn_now_ms(const txn_t *t)
{
    return t->clock.ops ? t->clock.ops->now_ms(t->clock.ctx) : 0;
}

/*
 * One pass: every NEW message in order, then COMMIT or ROLLBACK. An ordered
 * queue's pass opens with savepoint "o" (its key rows may be all it
 * writes), and writes the key rows of the messages that failed before it
 * (crash guard, no key, an earlier pass) where they stand in the batch.
 */
static txn_pass_t txn_pass(txn_t *t)
{
    bool handled = false;
    int first = -1, fresh = 0;
    uint64_t start = txn_now_ms(t);
    txn_pass_t p;
    unsigned err;

    t->last_ran = -1;
    for (int i = 0; i < t->n; i++)
        fresh += t->m[i].state == TXN_NEW;
    bool lone = fresh == 1 && !t->ops->order && txn_branch(t);
    if ((err = txn_begin(t)) != 0)
        return txn_lost(t, err, "the transaction's start");
    if (t->ops->order && (err = t->ops->exec(t->ctx, "SAVEPOINT o")) != 0)
        return txn_lost(t, err, "SAVEPOINT");
    if (t->ops->order) {
        bool unused;
        if ((err = t->ops->order(t->ctx, -1, NULL, TXN_ORDER_PASS, &unused)) != 0)
            return txn_lost(t, err, "the order keys' rows");
    }
    for (int j = 0; j < t->n; j++) {
        int i = t->seq ? t->seq[j] : j;
        txn_state_t s = t->m[i].state;
        if (t->ops->order && (s == TXN_RETRY || s == TXN_REJECT) &&
            (p = txn_order(t, i, TXN_ORDER_FAILED, NULL, &handled)) != TXN_PASS_DONE)
            return p;
        if (s != TXN_NEW || t->cut_short)
            continue; /* past the cut an ordered queue still writes the failed ones' rows */
        if (first >= 0 && t->limit_ms && t->clock.ops && txn_now_ms(t) - start >= t->limit_ms) {
            t->cut_short = true; /* the rest stay NEW: the caller keeps them for later */
            if (!t->ops->order)
                break;
            continue;
        }
        if (first < 0)
            first = i;
        if ((p = txn_one(t, i, &handled, lone)) != TXN_PASS_DONE)
            return p;
    }
    char sp[16];
    if (t->ops->order)
        snprintf(sp, sizeof(sp), "o");
    else
        snprintf(sp, sizeof(sp), "m%d", first);
    return txn_finish(t, handled, lone ? NULL : sp);
}

/* Whether message i's id appeared on an earlier NEW message of the batch. */
static bool txn_repeat(const txn_t *t, int i)
{
    const txn_msg_t *m = &t->m[i];
    for (int j = 0; j < i; j++)
        if (t->m[j].state == TXN_RECORDED && t->m[j].id_len == m->id_len &&
            memcmp(t->m[j].id, m->id, m->id_len) == 0)
            return true;
    return false;
}

/*
 * The set-based pass: every NEW message recorded with one INSERT, handled
 * without savepoints, one COMMIT. Any message that does not end ok makes it
 * FALLBACK (that message keeps its verdict when the handler gave one).
 */
static txn_pass_t txn_bulk_pass(txn_t *t, txn_msg_t **list, bool *found, idemd_result_t *r)
{
    int k = 0;
    unsigned err;
    bool handled = false;

    t->last_ran = -1;
    for (int i = 0; i < t->n; i++) {
        if (t->m[i].state != TXN_NEW)
            continue;
        if (t->record && txn_repeat(t, i)) {
            txn_move(&t->m[i], TXN_DUPLICATE); /* its first copy's record is ours */
            continue;
        }
        txn_move(&t->m[i], TXN_RECORDED); /* provisional until the INSERT succeeds */
        list[k++] = &t->m[i];
    }
    if ((err = txn_begin(t)) != 0)
        return txn_lost(t, err, "the transaction's start");
    bool branch = txn_branch(t);
    if (!branch && (err = t->ops->exec(t->ctx, "SAVEPOINT b")) != 0)
        return txn_lost(t, err, "SAVEPOINT");
    if (k > 0 && t->record && t->look_first) {
        /* Looking first: the INSERT takes only the ids not committed yet (one committed
         * meanwhile by another transaction still makes it fail, below). */
        if ((err = t->ops->find_records(t->ctx, list, k, found)) != 0)
            return txn_lost(t, err, "record SELECT");
        int kept = 0;
        for (int j = 0; j < k; j++) {
            if (!found[j]) {
                list[kept++] = list[j];
                continue;
            }
            txn_move(list[j], TXN_NEW); /* then a duplicate: states only move one step */
            txn_move(list[j], TXN_DUPLICATE);
        }
        if (kept < k)
            t->found_dups = true;
        k = kept;
    }
    if (k > 0 && t->record && (err = t->ops->record_many(t->ctx, list, k)) != 0) {
        if (db_classify(err) != DB_DUPLICATE)
            return db_classify(err) == DB_ERR_LOCK_TIMEOUT ? TXN_PASS_FALLBACK
                                                           : txn_lost(t, err, "record INSERT");
        /* Some ids were committed before (or under the lookup). The INSERT's duplicate checks
         * hold shared locks on those keys and the gaps before them until the transaction
         * ends: kept through a lookup, a second INSERT and the handlers, two such
         * transactions deadlock inserting into each other's gaps (MariaDB 10.11 at 9,986
         * msgs/s: 2 to 10 deadlocks a 4-second run, each batch redone and the next ones
         * waiting). So the transaction is undone at once and the pass runs again, looking
         * first. Ids that other workers keep committing under each lookup: when the INSERT
         * clashes again after three lookups, message by message. */
        t->found_dups = true;
        return ++t->clashes > 3 ? TXN_PASS_FALLBACK : TXN_PASS_LOOK;
    }
    /* A repeat whose first copy turned out to be committed already is that one's duplicate
     * too; it stays DUPLICATE either way. */
    if (t->batch && t->ops->handle_many && k > 0) {
        txn_pass_t p = txn_bulk_handle(t, list, k, r);
        if (p != TXN_PASS_DONE)
            return p;
        handled = true;
        k = 0; /* every message is handled */
    }
    uint64_t start = txn_now_ms(t);
    for (int j = 0; j < k; j++) {
        txn_msg_t *m = list[j];
        int i = (int)(m - t->m);
        /* Past the limit, the records of the rest cannot be committed without them: go the
         * per-message way, which commits what it did and keeps the rest. */
        if (j > 0 && t->limit_ms && t->clock.ops && txn_now_ms(t) - start >= t->limit_ms) {
            t->too_slow = true;
            return TXN_PASS_FALLBACK;
        }
        txn_pass_t p = txn_handle(t, i);
        if (p != TXN_PASS_DONE)
            return p == TXN_PASS_FAILED ? TXN_PASS_FALLBACK : p;
        handled = true;
    }
    /* Handlers ran without savepoints between them: when one of them wrote to a table that
     * cannot roll back (1178 here), only the message-by-message way finds which. */
    if (handled && (err = t->ops->exec(t->ctx, "SAVEPOINT e")) != 0)
        return db_classify(err) == DB_ERR_HANDLER ? TXN_PASS_FALLBACK
                                                  : txn_lost(t, err, "SAVEPOINT");
    t->last_ran = -1; /* checked: txn_finish need not */
    return txn_finish(t, handled, branch ? NULL : "b");
}

/* Undo a pass: ROLLBACK, and every message the pass had not settled is NEW again. */
static txn_pass_t txn_restart(txn_t *t)
{
    unsigned err = txn_end(t, false); /* may report the 1213 again */
    if (err && db_classify(err) == DB_ERR_CONNECTION)
        return TXN_PASS_FATAL;
    t->cut_short = false;
    for (int i = 0; i < t->n; i++) {
        txn_msg_t *m = &t->m[i];
        /* A waiter looks at its key again: the key's rows of this pass are gone too. */
        if (m->state == TXN_RECORDED || m->state == TXN_HANDLED || m->state == TXN_DUPLICATE ||
            m->state == TXN_WAIT)
            txn_move(m, TXN_NEW);
    }
    return TXN_PASS_DONE;
}

txn_status_t txn_run(txn_t *t)
{
    t->redos = 0;
    t->lock_waits = 0;
    t->committed = false;
    t->cut_short = false;
    t->lost_why[0] = '\0';
    t->fell_back = false;
    t->found_dups = false;
    t->clashes = 0;
    t->too_slow = false;
    t->blamed = 0;
    t->refused = 0;
    t->ended = false;
    t->ended_at = -1;
    t->ended_why[0] = '\0';
    t->last_ran = -1;
    int fresh = 0;
    for (int i = 0; i < t->n; i++)
        fresh += t->m[i].state == TXN_NEW;
    /* The set-based pass has no time limit: only for batches that are not cut short. */
    bool bulk = t->bulk && !t->ops->order && fresh > 1 &&
                (!t->record || (t->ops->record_many && t->ops->find_records));
    txn_msg_t *list[bulk ? t->n : 1];
    bool found[bulk ? t->n : 1];
    idemd_result_t verdicts[bulk ? t->n : 1];
    t->batch_calls = 0;
    for (;;) {
        txn_pass_t p = bulk ? txn_bulk_pass(t, list, found, verdicts) : txn_pass(t);
        if (p == TXN_PASS_DONE)
            return TXN_DONE;
        if (p == TXN_PASS_FATAL)
            return TXN_FATAL;
        /* Set-based, several handlers ran without savepoints between them: which one broke
         * the transaction shows only message by message. */
        if (p == TXN_PASS_BLAME && bulk)
            p = TXN_PASS_FALLBACK;
        /* Lost, or falling back: nothing of this pass survives. */
        if (txn_restart(t) != TXN_PASS_DONE)
            return TXN_FATAL;
        if (p == TXN_PASS_BLAME) {
            /* Rejected and left out. One its own handler had failed already stays as it is
             * and runs no more either: each blame takes one message out of the passes to
             * come, so this ends (the bound is a guard). */
            txn_msg_t *m = &t->m[t->blame];
            if (m->state == TXN_NEW)
                txn_move(m, TXN_REJECT);
            if (++t->blamed > 2 * t->n)
                return TXN_FATAL;
            continue;
        }
        if (p == TXN_PASS_FALLBACK) {
            bulk = false;
            t->fell_back = true;
            continue;
        }
        if (p == TXN_PASS_AGAIN)
            continue; /* every round leaves out at least one message: bounded by n */
        if (p == TXN_PASS_LOOK) {
            t->look_first = true; /* for this batch's passes; the caller sets it per batch */
            continue;             /* bounded by t->clashes */
        }
        t->redos++;
        if (t->redos < TXN_REDO_MAX) {
            log_info("batch of %d: transaction lost (%s): redoing (pass %d)", t->n, t->lost_why,
                     t->redos + 1);
            continue;
        }
        /* An ordered queue's retries need their key rows committed, which just failed: give
         * the batch back to the broker instead (its messages come back in order). */
        if (t->ops->order) {
            log_warn("batch of %d: transaction lost %d times in a row (last: %s): ordered "
                     "queue, the broker redelivers it",
                     t->n, TXN_REDO_MAX, t->lost_why);
            return TXN_FATAL;
        }
        for (int i = 0; i < t->n; i++) {
            if (t->m[i].state != TXN_NEW)
                continue;
            txn_move(&t->m[i], TXN_RETRY);
            txn_why(&t->m[i], "transaction lost %d times in a row (last: %s)", TXN_REDO_MAX,
                    t->lost_why);
        }
        return TXN_DONE;
    }
}
