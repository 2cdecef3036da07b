/* worker_int.h: the worker process's own context (worker_t), shared by worker.c (the loop),
 * worker_conn.c (connections), worker_txn.c (the batch transaction and the handler calls) and
 * worker_ops.c (the broker and database behind the ops tables). Not for other modules.
 */
#ifndef IDEMD_WORKER_INT_H
#define IDEMD_WORKER_INT_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include "batch.h"
#include "chores.h"
#include "conf.h"
#include "db.h"
#include "guard.h"
#include "life.h"
#include "mq.h"
#include "order.h"
#include "outbox.h"
#include "plugin.h"
#include "relay.h"
#include "settle.h"
#include "stall.h"
#include "txn.h"
#include "worker.h"

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
/* An ordered queue's batch entry: its key (order_key), found afresh for every batch. */
typedef struct worker_okey {
    bool has;     /* it has a key and an id: its key's rows follow it */
    bool free;    /* this pass's check found its key free: its commit has no row to move */
    bool blocked; /* blocked at the pass's start, or written since: look before it runs */
    size_t len;
    char key[ORDER_KEY_MAX + 1];
} worker_okey_t;

typedef struct worker {
    const conf_t *conf;
    const conf_queue_t *q;
    int index;
    const idemd_handler_t *h;
    worker_slot_t *slot;
    db_t *db;
    mq_t *mq;
    mq_t *pub;       /* republishing connection, opened when first needed */
    bool pub_failed; /* the last round failed: declare our queues again first */
    char name[160];  /* "<queue>#<index>": log context, and in connection names */
    void *state;
    bool state_live;
    life_t life;      /* the batch (life.batch) and the held list (life.held) */
    batch_t bt;       /* collecting the batch */
    settle_t st;      /* settling it with the broker */
    guard_t guard;    /* the crash-loop guard */
    const char **ids; /* scratch for the set-based record calls */
    size_t *id_lens;
    uint64_t db_used_ms;        /* when the database connection last ran a batch */
    uint64_t bulk_off_until_ms; /* no set-based pass before this (slow handlers) */
    bool draining;              /* stopping: consumer cancelled, running what already came */
    uint64_t drain_until_ms;    /* ... until then at most (worker_go_on) */
    outbox_t *outbox;           /* onward messages (host->publish) */
    bool outbox_used;           /* a handler published during this batch */
    int cur;                    /* the message handle() runs on */
    int *bidx;                  /* the batch index of each handle_batch message */
    int crash_before_relay;     /* test only: IDEMD_TEST_CRASH_BEFORE_RELAY=N: die before the
                                 * Nth relay, twice per worker slot */
    worker_hmsg_t one;          /* the message handle() runs on */
    char scratch[8192];
    /* For handle_batch (only when the plugin has one and batch_handler is on). */
    worker_hmsg_t *bmsg;
    const idemd_message_t **bptr;
    char *bscratch, *berr;
    chores_t chores; /* retention and reconcile, between batches */
    uint64_t next_pub_service_ms;
    relay_keys_t relay_keys; /* k[0] signs our own headers; all of them check */
    uint64_t keys_read_ms;   /* when relay_keys were read (worker_reread_keys) */
    int keys_reread_ms;      /* how often: RELAY_KEY_REREAD_MS, or the test knob */
    int undecodable_streak;  /* requeued undecodable ones in a row (no dead-lettering) */
    stall_t *stall;          /* handler_timeout's watchdog (NULL: plain alarm()) */
    trace_rng_t rng;         /* span ids: seeded from getrandom at start */
    worker_okey_t *okeys;    /* order_key: each batch entry's key (NULL: unordered queue) */
    int *obidx;              /* order_blocked's scratch: batch index of each key asked about */
    bool *oblocked;          /* ... and its answer */
    int *oseq;               /* the order a batch's messages run in: by key (worker_order_seq) */
} worker_t;

/* Set by SIGTERM / SIGINT (or a dead supervisor): finish the batch and exit. */
extern volatile sig_atomic_t worker_stop;

/* worker.c: the loop's helpers. */
uint64_t worker_now_ms(void); /* CLOCK_MONOTONIC */
uint64_t worker_now_us(void);
/* Show progress, and follow a log level changed by a reload (the supervisor's slot field). */
void worker_progress(worker_t *w);
void worker_set_state(worker_t *w, worker_state_t st);
void worker_count(uint64_t *counter); /* one more, relaxed atomic */
/* The worker exits because it lost what (WORKER_LOST_*): noted in the slot. Returns
 * WORKER_EXIT_TEMPFAIL. */
int worker_lose(worker_t *w, worker_lost_t what);
/* Connected to what; counts a reconnect when the slot says the last run lost it. */
void worker_connected(worker_t *w, worker_lost_t what);
/* Sleep up to ms, waking early on stop; keeps showing progress while it waits. */
void worker_pause(worker_t *w, int ms);
/* Give up the batch, the carried delivery and the held list: unacked, the broker requeues them. */
void worker_release(worker_t *w);

/* worker_conn.c: connections to the database and the broker (the comments above each function
 * there say more). */
int worker_connect_db(worker_t *w);      /* 0, or an exit code */
int worker_connect_mq(worker_t *w);      /* 0, or an exit code */
int worker_open_publisher(worker_t *w);  /* 0, or -1 (logged) */
int worker_ready_publisher(worker_t *w); /* 0, or -1: none usable for the outbox */
void worker_service_pub(worker_t *w);
int worker_check_db(worker_t *w); /* 0, or -1: the database cannot be reached */
void worker_reread_keys(worker_t *w);
int worker_undecodable(worker_t *w); /* 0, or an exit code */

/* worker_txn.c: the batch transaction, the handler calls and the outbox. */
int worker_transact(worker_t *w); /* 0, or -1: the database cannot be trusted */
int worker_publish(void *ctx, MYSQL *db, const idemd_message_t *src, const idemd_publish_t *p,
                   char *err, size_t errlen);
int worker_sweep_peek(void *arg); /* the sweeper's look: 1 rows, 0 none, -1 database failed */
int worker_sweep(void *arg);      /* a chore: 0, or -1 when the database failed */

/* worker_ops.c: wire batch.c, settle.c and guard.c to this worker's broker and database. */
void worker_wire(worker_t *w);

#endif
