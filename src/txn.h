/* txn.h: the batch transaction protocol: record, handler, savepoints, commit, and each message's
 * fate.
 */
#ifndef IDEMD_TXN_H
#define IDEMD_TXN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../include/idemd/handler.h"
#include "txn_types.h"

#define TXN_REDO_MAX 5 /* a batch whose transaction is lost is redone this many times */

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
 * (cut short). After TXN_FATAL nothing may be acked. With t->dry_run nothing
 * is ever committed: see txn_t.dry_run.
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
