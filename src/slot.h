/* slot.h: what a worker process and its supervisor share: the slot in shared memory, exit codes.
 */
#ifndef IDEMD_SLOT_H
#define IDEMD_SLOT_H

#include <stdint.h>

#include "log.h"
#include "metrics.h"

typedef enum worker_state {
    WORKER_STATE_STARTING = 0,
    WORKER_STATE_WAITING_DB = 1,
    WORKER_STATE_CONNECTING = 2,
    WORKER_STATE_CONSUMING = 3,
    WORKER_STATE_STOPPING = 4,
} worker_state_t;

/*
 * What a worker and its supervisor share, in shared memory. The worker
 * writes state, progress, counters and latencies (relaxed atomics: no
 * invariants between fields); the supervisor reads them for readiness,
 * status and the watchdog. The supervisor writes the daemon settings a
 * reload may change (log_level, reconcile_interval); the worker follows
 * them without a restart. error is the worker's only non-atomic field: the
 * supervisor empties it before the fork and reads it after the exit.
 */
#define WORKER_ERROR_MAX 400

typedef struct worker_slot {
    int state;            /* worker_state_t */
    int consumed;         /* 1 once this run got as far as consuming (zeroed before the fork) */
    uint64_t progress_ms; /* CLOCK_MONOTONIC ms of the last loop iteration */
    metrics_counters_t c; /* what it did, for STATUS= and /metrics */
    int reconciling;      /* 1 while the handler's reconcile() runs (its SIGALRM is that limit) */
    /* Publish-to-commit latency of committed messages that carry the integer
     * header idemd-pub-us (publisher's CLOCK_REALTIME in microseconds). */
    uint64_t lat[METRICS_LAT_BUCKETS]; /* metrics_lat_bucket */
    /* The same fine histogram of each stage's time (metrics_stage_t), for the exit summary. */
    uint64_t stage_lat[METRICS_STAGES][METRICS_LAT_BUCKETS];
    /* Crash note: while in_handler is 1 the worker is inside the handler on
     * the message crash_id (crash_counted: its start is counted already).
     * A worker that finds it set at start succeeds one that died there: when
     * crash_consumer is its own and exit_signal says the handler did it, it
     * counts the crash (and the start, unless counted) for the guard. */
    int in_handler;
    int crash_counted;
    /* spawn_gen: set by the supervisor before each start of a worker in this slot; crash_gen:
     * the spawn_gen of the worker that wrote the crash note (its exit signal is the one that
     * counts). A generation, not a pid: a successor may get its predecessor's pid again. */
    uint32_t spawn_gen;
    uint32_t crash_gen;
    uint32_t crash_id_len;
    char crash_id[256];
    char crash_consumer[129];
#ifdef IDEMD_TESTING
    int test_crashes; /* IDEMD_TEST_CRASH_BEFORE_RELAY deaths of this slot so far (test builds) */
#endif
    /* The outbox as the last sweep saw it (metrics): rows, age of the oldest in
     * microseconds, and when (CLOCK_MONOTONIC ms; 0 = never swept here). */
    int64_t outbox_rows, outbox_oldest_us;
    int64_t outbox_retrying, outbox_exhausted; /* rows refused before; rows out of attempts */
    uint64_t outbox_seen_ms;
    /* Set by the supervisor at reap: the signal that ended the worker that wrote a pending
     * crash note (crash_gen), else the last worker's, or 0. A successor killed before it
     * counted the note does not overwrite it, so the crash is still counted. */
    int exit_signal;
    /* Set by the supervisor: this run only counts the crash note a retiring worker left (it
     * died in its handler while draining), then drains and exits (sup_reap, worker_loop). */
    int note_only;
    int log_level;          /* set by the supervisor: log_level_t in effect */
    int reconcile_interval; /* set by the supervisor: daemon.reconcile_interval in effect */
    /* Why the worker exits with WORKER_EXIT_CONFIG after a failed
     * declaration (the broker's reason) or on a server too old; the
     * supervisor logs it once. error_kind: worker_error_t. */
    char error[WORKER_ERROR_MAX];
    int error_kind;
    /* What the worker lost before it exited with WORKER_EXIT_TEMPFAIL
     * (worker_lost_t); the next run counts a reconnect when it connects. */
    int lost;
    /* 1 once a worker of this slot warned that its queue exists without idemd's
     * dead-letter arguments (mq_declare fell back): the warning is given once. */
    int dlx_warned;
    /* 1 once a worker of this slot warned that its queue (or a delay or dead letter queue of it)
     * exists as a classic queue and was kept so (declare.quorum left to its default). */
    int classic_warned;
    /* For workers = "auto" (sup_auto.c): microseconds spent on batches (busy) and waiting for
     * a batch's first delivery (idle), and when the current one of each began
     * (CLOCK_MONOTONIC us; 0 = not in one), so that a long batch counts while it runs. */
    uint64_t busy_us, idle_us, busy_since_us, idle_since_us;
    int db_max_connections; /* the server's max_connections as the worker read it; 0: unknown */
    /* The last error or warning about this slot's workers: written by the
     * worker (log_set_sink), and by the supervisor about a worker that is
     * gone (its exit); read by the status endpoint. */
    log_sink_t last_error;
} worker_slot_t;

/* What kind of refusal a slot's error is (the supervisor words and paces it by this). */
typedef enum worker_error {
    WORKER_ERROR_DECLARE = 0, /* a declaration, or a table the worker needs */
    WORKER_ERROR_SERVER = 1,  /* the broker or database is older than idemd supports */
    WORKER_ERROR_ENDED = 2,   /* a handler ended idemd's transaction where the server could not
                               * refuse it: the queue is held until a reload */
} worker_error_t;

typedef enum worker_lost {
    WORKER_LOST_NONE = 0,
    WORKER_LOST_BROKER = 1,
    WORKER_LOST_DATABASE = 2,
} worker_lost_t;

/* Exit codes of a worker process. */
#define WORKER_EXIT_STOPPED 0   /* asked to stop, clean */
#define WORKER_EXIT_TEMPFAIL 75 /* lost broker or database: restart after a pause */
#define WORKER_EXIT_CONFIG                                                                         \
    78 /* cannot work with this configuration (plugin init, declare,                               \
          a server older than idemd supports) */

#endif
