/* guard.h: the crash-loop guard: count the starts and crashes of redelivered messages, and stop
 * running the handler on a message that keeps killing its worker.
 */
#ifndef IDEMD_GUARD_H
#define IDEMD_GUARD_H

#include <stdbool.h>
#include <stddef.h>

#include "life.h"
#include "txn.h"

/* Starts past max_attempts, without confirmed crashes, before the guard gives up (guard_check). */
#define GUARD_UNCONFIRMED 10

typedef struct guard {
    const db_guard_ops_t *ops;
    void *ctx;
    int max_attempts;
    bool dedup_table; /* dedup = "table": a committed record makes a redelivery a duplicate */
    /* Workers consuming this queue with this consumer in this instance (queue workers): how far
     * the crash count can pass max_attempts when they race (see guard_check). */
    int workers;
} guard_t;

/*
 * Before a batch: check a suspect (redelivered) message t (m: its
 * delivery), which runs alone. A committed record makes it DUPLICATE; else
 * its start is counted (t->counted) and it goes REJECT without running
 * when its confirmed crashes reached max_attempts, or its starts passed
 * max_attempts + GUARD_UNCONFIRMED. Others are left alone. 0, or -1 when
 * the database failed.
 */
int guard_check(const guard_t *g, const life_msg_t *m, txn_msg_t *t)
    __attribute__((warn_unused_result));

/*
 * What a worker that died left in its slot (the caller copies it from the
 * shared slot and clears the note after a 0 return): whether it died in
 * the handler, on which message id, whether that start was counted, whose
 * consumer it was, and the signal that ended it (0: an exit).
 */
typedef struct guard_note {
    bool in_handler;
    bool counted;
    const char *id;
    size_t id_len;
    const char *consumer;
    int exit_signal;
} guard_note_t;

/*
 * At a worker's start: confirm its predecessor's crash in the handler (the
 * note) when it was the handler's doing (not a kill from outside) and the
 * same consumer's. 0, or -1 when the database failed.
 */
int guard_count_crash(const guard_t *g, const guard_note_t *note, const char *consumer)
    __attribute__((warn_unused_result));

/*
 * A counted run of t finished in this process (its handler returned: retry
 * or reject; or, on an ordered queue, it only waited for its key), and its
 * delivery goes back to the broker unacked, waits on the held list, or waits
 * in a delay queue: its start is not one "without finishing", take it back,
 * so that a message requeued because the held list is full is never
 * dead-lettered as "started N times". Clears t->counted. Failure is logged
 * and ignored (the count only errs on the safe side).
 */
void guard_finished(const guard_t *g, txn_msg_t *t);

#endif
