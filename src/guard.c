/* guard.c: the crash-loop guard: count the starts and crashes of redelivered messages, and stop
 * running the handler on a message that keeps killing its worker.
 */
#include "guard.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "delivery.h"
#include "log.h"

/*
 * Crash-loop guard for a suspect (redelivered) message, which always runs
 * alone. Two counts in idemd_attempt decide:
 * - crashes: runs that ended with the worker dying in the handler by the
 *   handler's fault (a signal such as SIGSEGV or SIGABRT, handler_timeout,
 *   an exit() in the handler), confirmed by the successor that found the
 *   crash note in its slot with the supervisor's exit signal
 *   (guard_count_crash). At max_attempts the message is dead-lettered
 *   without running the handler again.
 * - starts: every start of a suspect run, counted durably before it
 *   begins. Runs cut short by anything else (the whole instance killed, a
 *   lost connection or database, kill -9 of the worker, the OOM killer)
 *   leave a start but no crash; only past max_attempts +
 *   GUARD_UNCONFIRMED such starts is the message dead-lettered, which
 *   bounds a loop that no successor sees (a message that takes down its
 *   whole instance, or its worker by memory).
 * The crash limit is exact with one worker, and at most workers - 1 over
 * with more: a crash is confirmed by the successor of the worker that died,
 * and meanwhile the broker may hand the message to another worker, whose
 * guard does not see that crash yet. Each worker slot holds at most one
 * unconfirmed crash (its successor counts it before it consumes), so no
 * more than workers - 1 runs can start on counts that are short.
 */
int guard_check(const guard_t *g, const life_msg_t *m, txn_msg_t *t)
{
    bool found = false;
    long long crashes = 0;
    if (!m->suspect || t->state != TXN_NEW)
        return 0;
    /* A copy of a message committed before (its ack was lost, then redelivered again and
     * again) is a duplicate, not a crash: it must not use up attempts. */
    if (g->dedup_table) {
        if (g->ops->find_record(g->ctx, t->id, t->id_len, &found) != 0)
            return -1;
        if (found) {
            txn_move(t, TXN_DUPLICATE);
            return 0;
        }
    }
    long long starts = g->ops->bump(g->ctx, t->id, t->id_len, &crashes);
    if (starts < 0)
        return -1;
    t->counted = true;
    if ((unsigned long long)crashes + 1 > t->attempt)
        t->attempt = (unsigned)crashes + 1;
    bool crashed = crashes >= g->max_attempts;
    if (crashed || starts > (long long)g->max_attempts + GUARD_UNCONFIRMED) {
        t->attempt = (unsigned)starts - 1; /* handler runs so far: this one will not run it */
        txn_move(t, TXN_REJECT);
        if (crashed)
            snprintf(t->reason, sizeof(t->reason),
                     "handler crashed: its worker died in the handler %lld times (a signal, "
                     "handler_timeout or exit; limit %d, at most %d over with %d workers racing: "
                     "a crash is counted by its worker's successor); started %lld times; not run "
                     "again",
                     crashes, g->max_attempts, g->workers > 1 ? g->workers - 1 : 0,
                     g->workers > 1 ? g->workers : 1, starts - 1);
        else
            snprintf(t->reason, sizeof(t->reason),
                     "handler started %lld times without finishing, %lld of them crashes seen by "
                     "idemd (the others cut short by a kill of the whole instance or of the "
                     "worker, a lost connection or the OOM killer); not run again",
                     starts - 1, crashes);
    }
    return 0;
}

/*
 * A worker that died inside a handler left the message's id in its slot,
 * and the supervisor the signal that ended it: confirm that crash for the
 * crash-loop guard when it was the handler's doing, so that a message that
 * kills its worker is dead-lettered after max_attempts crashes.
 */
int guard_count_crash(const guard_t *g, const guard_note_t *note, const char *consumer)
{
    char pid[96];
    int sig = note->exit_signal;
    if (!note->in_handler)
        return 0;
    delivery_id_printable(note->id, note->id_len, pid, sizeof(pid));
    /* Killed from outside (kill -9, SIGTERM past shutdown_timeout, the OOM killer) while in the
     * handler: not confirmed as the message's fault; its next runs are still counted as starts. */
    if (sig == SIGKILL || sig == SIGTERM || sig == SIGINT || sig == SIGHUP || sig == SIGQUIT) {
        log_info("the previous worker was killed (signal %d) in the handler on message id=%s: "
                 "not counted as a crash",
                 sig, pid);
    } else if (strcmp(note->consumer, consumer) == 0) {
        long long n = g->ops->crash(g->ctx, note->id, note->id_len, !note->counted);
        if (n < 0)
            return -1;
        log_warn("the previous worker died in the handler on message id=%s (%s): crash %lld "
                 "counted",
                 pid, sig ? strsignal(sig) : "exit", n);
    }
    return 0;
}

void guard_finished(const guard_t *g, txn_msg_t *t)
{
    char pid[96];
    if (!t->counted || (t->state != TXN_RETRY && t->state != TXN_REJECT && t->state != TXN_WAIT))
        return;
    t->counted = false;
    if (g->ops->unstart(g->ctx, t->id, t->id_len) != 0)
        log_warn("crash guard: a finished start of message id=%s stays counted (see above)",
                 delivery_id_printable(t->id, t->id_len, pid, sizeof(pid)));
}
