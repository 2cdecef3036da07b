/* worker_int.h: the worker process's own context (worker_t), shared by the worker's files:
 * worker.c (the process and its loop) over step.c, then worker_conn, worker_txn, worker_handler,
 * worker_order, worker_sweep and worker_ops, all over worker_base. Not for other modules.
 */
#ifndef IDEMD_WORKER_INT_H
#define IDEMD_WORKER_INT_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include "clock.h"
#include "batch.h"
#include "chores.h"
#include "conf.h"
#include "db.h"
#include "guard.h"
#include "life.h"
#include "mq.h"
#include "order.h"
#include "order_batch.h"
#include "outbox.h"
#include "plugin.h"
#include "copies.h"
#include "settle.h"
#include "slot.h"
#include "stall.h"
#include "step.h"
#include "txn.h"

#define WORKER_MAX_HEADERS 64
#define WORKER_BATCH_SCRATCH 2048 /* header strings of one message for handle_batch */
#define WORKER_DRAIN_MS 5000      /* stopping: the longest it runs what it already received */

/* One message as the handler sees it, with the buffers its strings point into. */
typedef struct worker_hmsg {
    idemd_message_t msg;
    char exchange[256], rkey[256], ctype[256], uid[256], appid[256];
    idemd_header_t headers[WORKER_MAX_HEADERS];
    char *trace_text; /* tracestate and baggage, NUL-terminated (grown as needed; owned) */
    size_t trace_cap;
} worker_hmsg_t;

/* One worker process's context, on worker_main's stack for the process's life. */
typedef struct worker {
    /* The process (worker.c). */
    const conf_t *conf;
    const conf_queue_t *q;
    int index;
    const idemd_handler_t *h;
    worker_slot_t *slot;
    char name[160]; /* "<queue>#<index>": log context, and in connection names */
    void *state;    /* the handler's, from its init */
    bool state_live;
    bool noted;      /* the predecessor's crash note was counted (worker_h_note) */
    bool ended;      /* a handler ended idemd's transaction: hold the queue (worker_loop) */
    chores_t chores; /* retention, reconcile and the sweeper, between batches */
    /* Connections (worker_conn.c) and the ports on them (worker_ops.c). */
    db_t *db;
    mq_t *mq;
    mq_t *pub;       /* republishing connection, opened when first needed */
    bool pub_failed; /* the last round failed: declare our queues again first */
    uint64_t next_pub_service_ms;
    uint64_t db_used_ms;       /* when the database connection last ran a batch */
    copies_keys_t copies_keys; /* k[0] signs our own headers; all of them check */
    uint64_t keys_read_ms;     /* when copies_keys were read (worker_reread_keys) */
    int keys_reread_ms;        /* how often: COPIES_KEY_REREAD_MS, or the test knob */
    int undecodable_streak;    /* requeued undecodable ones in a row (no dead-lettering) */
    uint64_t first_read_us; /* CLOCK_MONOTONIC µs the batch's first delivery was read; 0: none */
    uint64_t settle_us;     /* ... the settling of the batch began (the ack stage) */
    port_consume_t consume;
    port_publish_t pub_port;
    port_clock_t clock;
    /* The step and the modules it runs (step.c). */
    life_t life;      /* the batch (life.batch) and the held list (life.held) */
    batch_t bt;       /* collecting the batch */
    settle_t st;      /* settling it with the broker */
    guard_t guard;    /* the crash-loop guard */
    step_t step;      /* one iteration over all of them */
    outbox_t *outbox; /* onward messages (host->publish) */
    const char **ids; /* scratch for the set-based record calls, order keys and the relay */
    size_t *id_lens;
    /* The database port's table, filled once (worker_wire): worker_txn_ops (its order op NULL
     * unless the queue is ordered), the guard's, worker_order_db_ops and outbox_io_ops. */
    db_ops_t db_ops;
    /* The handler calls (worker_handler.c). */
    struct {
        int cur;            /* the message handle() runs on */
        worker_hmsg_t one;  /* ... as the handler sees it */
        char scratch[8192]; /* its header strings */
        /* For handle_batch (only when the plugin has one and batch_handler is on). */
        worker_hmsg_t *bmsg;
        const idemd_message_t **bptr;
        int *bidx; /* the batch index of each handle_batch message */
        char *bscratch, *berr;
    } hx;
    stall_t *stall;    /* handler_timeout's watchdog (NULL: plain alarm()) */
    trace_rng_t rng;   /* span ids: seeded from getrandom at start */
    order_batch_t ord; /* an ordered queue's batch keys (order_batch.c; keys NULL: unordered) */
#ifdef IDEMD_TESTING
    int crash_before_relay; /* IDEMD_TEST_CRASH_BEFORE_RELAY=N: die before the Nth relay, twice
                             * per worker slot (test builds) */
#endif
} worker_t;

/* Set by SIGTERM / SIGINT (or a dead supervisor): finish the batch and exit. */
extern volatile sig_atomic_t worker_stop;

/* worker_base.c: what the worker files share. */
/* Show progress, and follow a log level changed by a reload (the supervisor's slot field). */
void worker_progress(worker_t *w);
void worker_set_state(worker_t *w, worker_state_t st);
void worker_count(uint64_t *counter); /* one more, relaxed atomic */
/* us microseconds spent in stage: idemd_stage_seconds and the slot's fine histogram. */
void worker_stage(worker_t *w, metrics_stage_t stage, uint64_t us);
/* The stage that began at t0 (clock_mono_us) ends now. */
void worker_stage_since(worker_t *w, metrics_stage_t stage, uint64_t t0);
/* The worker exits because it lost what (WORKER_LOST_*): noted in the slot. Returns
 * WORKER_EXIT_TEMPFAIL. */
int worker_lose(worker_t *w, worker_lost_t what);
/* Connected to what; counts a reconnect when the slot says the last run lost it. */
void worker_connected(worker_t *w, worker_lost_t what);
/* Sleep up to ms, waking early on stop; keeps showing progress while it waits. */
void worker_pause(worker_t *w, int ms);
/* Give up the batch, the carried delivery and the held list: unacked, the broker requeues them. */
void worker_give_back(worker_t *w);

/* worker_conn.c: connections to the database and the broker (the comments above each function
 * there say more). */
int worker_connect_db(worker_t *w); /* 0, or an exit code */
/*
 * Start idemd's side and the handler on w->db, just opened: the outbox, the
 * relay keys, the crash guard's table, the order tables, then the handler's
 * init. The one path for the daemon's worker (daemon true) and idemctl try
 * (daemon false: the keys are read, never created, and their absence only
 * noted, as a dry run signs nothing; no crash guard, no counters). Returns 0,
 * or WORKER_EXIT_CONFIG / WORKER_EXIT_TEMPFAIL with the reason in err.
 */
int worker_db_start(worker_t *w, bool daemon, char *err, size_t errlen);
int worker_connect_mq(worker_t *w);     /* 0, or an exit code */
int worker_open_publisher(worker_t *w); /* 0, or -1 (logged) */
void worker_service_pub(worker_t *w);
int worker_check_db(worker_t *w); /* 0, or -1: the database cannot be reached */
int worker_reconnect_db(worker_t *w, const char *when); /* 0, or -1: likewise */
void worker_reread_keys(worker_t *w);
int worker_undecodable(worker_t *w); /* 0, or an exit code */

/* worker_txn.c: the transaction ops step.c runs; their order op is for an ordered queue only
 * (worker_txn_wire leaves it out of w->db_ops.txn for the others); the step put together on them.
 */
extern const db_txn_ops_t worker_txn_ops;
void worker_txn_wire(worker_t *w, const step_hooks_t *hooks);

/* worker_handler.c: the handler calls behind db_txn_ops_t.handle / handle_many, and host->publish.
 */
idemd_result_t worker_op_handle(void *ctx, int i, txn_msg_t *t, unsigned *err);
int worker_op_handle_many(void *ctx, txn_msg_t *const *ms, int k, idemd_result_t *r, unsigned *err);
int worker_publish(void *ctx, MYSQL *db, const idemd_message_t *src, const idemd_publish_t *p,
                   char *err, size_t errlen);

/* worker_order.c: an ordered queue's key rows (db_txn_ops_t.order over order_batch.c and order.c)
 * and its batch's keys and running order (step_hooks_t.order_keys). */
extern const db_order_ops_t worker_order_db_ops;
const int *worker_order_keys(worker_t *w);
unsigned worker_op_order(void *ctx, int i, txn_msg_t *t, txn_order_step_t step, bool *wait);

/* worker_sweep.c: the outbox sweeper, a chore. */
int worker_sweep_peek(void *arg); /* the sweeper's look: 1 rows, 0 none, -1 database failed */
int worker_sweep(void *arg);      /* 0, or -1 when the database failed */

/* worker_ops.c: the ports' real adapters; wire batch.c, settle.c and guard.c to them and to the
 * database. */
void worker_wire(worker_t *w);

#endif
