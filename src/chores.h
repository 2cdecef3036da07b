/* chores.h: work a worker does between batches: retention and reconcile, one runner at a time.
 */
#ifndef IDEMD_CHORES_H
#define IDEMD_CHORES_H

#include <stdbool.h>
#include <stdint.h>

#include "conf.h"
#include "db.h"
#include "plugin.h"
#include "slot.h"

/*
 * A chore is guarded by a lease row in idemd_lease (sql/004_idemd_lease.sql):
 * only the owner named in the row may run it until expires_at, and nobody
 * starts it before due_at. Claims are conditional UPDATEs committed on their
 * own, so they work across instances and across Galera nodes.
 */
typedef struct chores_lease {
    char name[300];     /* "retention:<consumer>" or "reconcile:<queue>" */
    char esc_name[601]; /* name escaped for SQL */
    bool row_ok;        /* its row is known to exist */
    bool held;          /* our last claim succeeded and we have not let it go */
    uint64_t next_ms;   /* CLOCK_MONOTONIC ms before which we do not look at it */
} chores_lease_t;

/* One worker's chores. Everything in it is private to chores.c. */
typedef struct chores {
    const conf_t *conf;
    const conf_queue_t *q;
    worker_slot_t *slot;
    db_t *db;
    const idemd_handler_t *h;
    void *state;
    char owner[256];     /* "<host>:<pid>:<start ms>:<queue>#<n>", unique per worker process */
    char esc_owner[513]; /* owner escaped for SQL */
    chores_lease_t retention;
    chores_lease_t reconcile;
    chores_lease_t sweep; /* "outbox:<consumer>" */
    int (*sweep_peek)(void *arg);
    int (*sweep_fn)(void *arg);
    void *sweep_arg;
    bool run_open;      /* a retention run was started and is not finished */
    int run_phase;      /* 0: records, 1: crash counts, 2: done */
    int run_slices;     /* slices the run took so far */
    long long run_rows; /* rows deleted by the run so far */
    uint64_t run_start_ms;
    /* The worker's busy and idle time (slot) when the last slice began, and that slice's
     * length: whether the worker was busy meanwhile (chores_busy). */
    uint64_t mark_busy_us, mark_idle_us, last_slice_us;
} chores_t;

/*
 * Set c up for one worker. Everything passed is borrowed and must outlive c;
 * db must be connected, state is the handler's state on it; name is the
 * worker's "<queue>#<n>". Needs no freeing.
 */
void chores_init(chores_t *c, const conf_t *conf, const conf_queue_t *q, const char *name,
                 worker_slot_t *slot, db_t *db, const idemd_handler_t *h, void *state);

/*
 * The worker reconnected in place: go on with the same owner, leases and
 * turns on the new connection db and the handler's new state (borrowed, as
 * in chores_init). A lease held when the old connection died is still ours
 * in the table: the next claim renews it instead of waiting for it to run
 * out.
 */
void chores_rebind(chores_t *c, db_t *db, void *state);

/*
 * Add the outbox sweeper: every few seconds, peek(arg) looks whether the
 * outbox holds any row (1), none (0), or the database connection was lost
 * (-1); only with rows does fn(arg), under the sweeper's own lease, send
 * those their workers left behind. fn returns 0, or -1 when the connection
 * was lost. The peek is one read and no commit: an empty outbox (the usual
 * case) costs the consuming worker no lease transactions (two redo-log
 * flushes) every few seconds.
 */
void chores_set_sweep(chores_t *c, int (*peek)(void *arg), int (*fn)(void *arg), void *arg);

/*
 * Call between batches, with no transaction open. Does whatever is due and
 * whose lease this worker gets: a slice of retention (at most about a
 * second of DELETEs, one commit each, a second apart; about 100 ms and at
 * most a tenth of the time while the worker is busy: it spent more time on
 * batches than waiting for them since the last slice) and a reconcile run
 * (the handler's hook under reconcile_timeout: SIGALRM kills the worker
 * past it). Returns 0 (chores that fail for another reason are logged and
 * tried again later), or -1 when the database connection was lost (logged).
 */
int chores_tick(chores_t *c) __attribute__((warn_unused_result));

/* The pause after a retention slice of took_ms (see chores_tick). */
uint64_t chores_slice_gap_ms(bool busy, uint64_t took_ms);

/* Whether a worker that spent busy_us on batches (the last slice's slice_us among them: it ran
 * between batches) and idle_us waiting for them since the last slice was busy: more on batches. */
bool chores_busy(uint64_t busy_us, uint64_t idle_us, uint64_t slice_us);

#endif
