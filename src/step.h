/* step.h: one iteration of a worker over its ports: the daemon's loop (worker.c) and the simulator
 * (tests/sim) both run it.
 */
#ifndef IDEMD_STEP_H
#define IDEMD_STEP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "batch.h"
#include "guard.h"
#include "life.h"
#include "outbox.h"
#include "port.h"
#include "settle.h"
#include "txn.h"

#define STEP_RELAY_SLICES 1000 /* outbox slices after a COMMIT: all the batch's rows */

/*
 * What the host does around the step (process concerns: the slot,
 * counters, the database's liveness). Each entry may be NULL; calls are on
 * the step's hooks_ctx.
 */
typedef struct step_hooks {
    /* A dead predecessor's crash note, handed to the crash guard before anything runs: true
     * with *note filled, or false (none). noted: it was counted (clear it). */
    bool (*note)(void *ctx, guard_note_t *note);
    void (*noted)(void *ctx);
    /* Collecting a batch begins (wait: for its first delivery, idle time) and ends. */
    void (*collecting)(void *ctx, bool wait);
    void (*collected)(void *ctx, int n);
    /* A batch was collected and is about to run: count it, check the database. 0, or -1
     * (the database cannot be reached). */
    int (*batch)(void *ctx);
    /* An ordered queue: find each batch entry's key afresh, and return the order the batch's
     * messages run in (a permutation of 0..n-1, txn_t.seq; NULL: delivery order). NULL hook:
     * unordered. */
    const int *(*order_keys)(void *ctx);
    /* The transaction ran (st: as txn_run returned). */
    void (*transacted)(void *ctx, const txn_t *t, txn_status_t st);
    /* Right before the outbox relay of a COMMIT (test builds' fault injection). */
    void (*before_relay)(void *ctx);
    /* The batch's settling with the broker begins (settling), and it was settled (settled:
     * before its deliveries are let go). */
    void (*settling)(void *ctx);
    void (*settled)(void *ctx);
} step_hooks_t;

/* The result of one step. */
typedef enum step_status {
    STEP_IDLE = 0,         /* no batch was run */
    STEP_RAN = 1,          /* a batch was run and settled */
    STEP_LOST_DB = -1,     /* the database failed or cannot be trusted: why says where */
    STEP_LOST_BROKER = -2, /* the broker's consuming channel failed: why says where */
} step_status_t;

typedef struct step {
    life_t *life;   /* the batch and the held list */
    batch_t *bt;    /* collecting (its consume and clock ports) */
    settle_t *st;   /* settling (its consume, publish and clock ports) */
    guard_t *guard; /* the crash guard */
    /* The database port: the transaction runs on its txn layer (with the handler calls). */
    db_port_t db;
    bool record;       /* dedup = "table" */
    bool bulk;         /* the set-based pass may be tried (not an ordered queue) */
    bool batch;        /* ... with handle_batch */
    uint64_t limit_ms; /* stop starting handlers after this long (step_limit_ms) */
    /* The outbox relay right after a COMMIT. */
    outbox_t *outbox;
    port_publish_t pub;
    port_clock_t clock;
    bool outbox_used; /* a handler published during this batch (host->publish sets it) */
    const char **ids; /* scratch of life->batch.cap entries */
    size_t *id_lens;
    const step_hooks_t *hooks;
    void *hooks_ctx;
    /* Kept from step to step. */
    uint64_t bulk_off_until_ms; /* no set-based pass before this (handlers were too slow) */
    bool look_first;            /* the last set-based pass found ids recorded already */
    bool draining;              /* stopping: consumer cancelled, running what already came */
    uint64_t drain_until_ms;    /* ... until then at most (step_drain) */
    const char *why;            /* what a STEP_LOST_* lost, for the log */
} step_t;

/* The longest a batch may start handlers: half the broker's heartbeat (none answered while a
 * batch runs); 0 (no limit) without a heartbeat. */
uint64_t step_limit_ms(int heartbeat_s);

/*
 * One iteration: the crash note, the held list's copies due again, collect
 * a batch, the crash guard, an ordered queue's keys, the transaction, the
 * outbox relay of what it committed, settle with the broker, let the
 * deliveries go. On STEP_LOST_* the caller gives up its deliveries
 * (life_release) and exits: the broker redelivers, the record decides.
 */
step_status_t step_run(step_t *s) __attribute__((warn_unused_result));

/*
 * The transaction part of a step alone, as a dry run (idemctl try): the
 * batch already in life->batch runs through txn_run with the step's ops and
 * settings (set-based pass, handle_batch, an ordered queue's key order),
 * record INSERTs only when record is true, and ends in ROLLBACK where COMMIT
 * would be (txn_t.dry_run; peek, NULL or called on db.ctx just before it).
 * No crash guard, no outbox relay, no settling: nothing is acked or sent.
 * The outcome is in t (overwritten) and in each message's state.
 */
txn_status_t step_try(step_t *s, bool record, void (*peek)(void *ctx), txn_t *t)
    __attribute__((warn_unused_result));

/*
 * Whether a stopping worker (SIGTERM: shutdown, reload, the autoscaler
 * retiring it) runs one more step. It does not hand back the deliveries the
 * broker already sent it: those would come back redelivered, and a
 * redelivered message runs alone, one transaction each. The first call
 * cancels its consumer (nothing new comes after cancel-ok) and starts a
 * drain of drain_ms; then it goes on while it holds deliveries (its batch,
 * the carried one, or pending: received, not collected yet) and the drain
 * time lasts. false: stop; what is left goes back unacked (life_release).
 * pending (NULL: none) is asked after the cancel, whose round trip may read
 * more deliveries in.
 */
bool step_drain(step_t *s, uint64_t drain_ms, bool (*pending)(void *ctx), void *ctx);

#endif
