/* metrics.h: Prometheus metrics: the workers' shared counters, and the supervisor's HTTP endpoint.
 */
#ifndef IDEMD_METRICS_H
#define IDEMD_METRICS_H

#include <stdint.h>
#include <stdbool.h>
#include <stdio.h>

#include <sys/socket.h>

#include "log.h"

/*
 * Histogram bounds (the Prometheus `le` values, in the unit of the counter:
 * messages or microseconds). Each histogram keeps one counter per bound
 * plus one for everything above the last; the exposition makes them
 * cumulative.
 */
#define METRICS_BATCH_BOUNDS                                                                       \
    {                                                                                              \
        1, 2, 5, 10, 20, 50, 100, 200, 500, 1000                                                   \
    }
#define METRICS_BATCH_N 10
#define METRICS_HANDLER_BOUNDS                                                                     \
    {                                                                                              \
        500, 1000, 2500, 5000, 10000, 25000, 50000, 100000, 250000, 500000, 1000000, 2500000,      \
            5000000, 10000000                                                                      \
    }
#define METRICS_HANDLER_N 14
#define METRICS_LATENCY_BOUNDS                                                                     \
    {                                                                                              \
        1000, 2500, 5000, 10000, 25000, 50000, 100000, 250000, 500000, 1000000, 2500000, 5000000,  \
            10000000, 30000000, 60000000, 300000000                                                \
    }
#define METRICS_LATENCY_N 16
/* The stages of idemd_stage_seconds, in microseconds. */
#define METRICS_STAGE_BOUNDS                                                                       \
    {                                                                                              \
        50, 100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000, 100000, 250000, 500000, 1000000, \
            2500000, 10000000                                                                      \
    }
#define METRICS_STAGE_N 16

/*
 * Where a message's time goes (idemd_stage_seconds{stage=...}): wait, from the publisher's
 * idemd-pub-us stamp to idemd reading the delivery (per stamped message); collect, from a
 * batch's first delivery read to the batch taken (per batch); insert, one record INSERT
 * statement (per statement: one per batch in the set-based pass); handler, one handler call;
 * commit, the COMMIT (XA END + XA COMMIT on an XA branch; per commit); ack, settling the batch
 * with the broker (acks, nacks, copies; per batch).
 */
typedef enum metrics_stage {
    METRICS_STAGE_WAIT = 0,
    METRICS_STAGE_COLLECT,
    METRICS_STAGE_BEGIN,
    METRICS_STAGE_INSERT,
    METRICS_STAGE_HANDLER,
    METRICS_STAGE_COMMIT,
    METRICS_STAGE_ACK,
    METRICS_STAGES
} metrics_stage_t;

/* The stage's label value ("wait", "collect", ...). */
const char *metrics_stage_name(metrics_stage_t stage);

/* The fine histogram of publish-to-commit latency each worker keeps in its slot for the
 * summary at exit: bucket b holds values in [2^(b/4), 2^((b+1)/4)) microseconds. */
#define METRICS_LAT_BUCKETS 128

/* Bucket index of a latency in microseconds. */
int metrics_lat_bucket(uint64_t us);
/* Lower bound in microseconds of a bucket. */
uint64_t metrics_lat_bucket_floor(int bucket);
/* Value below which a fraction q of the total samples of hist[METRICS_LAT_BUCKETS] fall, in
 * microseconds. */
uint64_t metrics_lat_quantile(const uint64_t *hist, uint64_t total, double q);

/* Where a copy goes: the kinds of idemd_*_copies_total. */
enum { METRICS_COPY_RETRY = 0, METRICS_COPY_DEAD_LETTER = 1, METRICS_COPY_KINDS };
/* What became of it. */
enum { METRICS_COPY_PUBLISHED = 0, METRICS_COPY_REFUSED = 1, METRICS_COPY_OUTCOMES };

/*
 * An OpenMetrics exemplar of one histogram bucket: the trace of the newest
 * observation that fell into it. Written by one worker, under seq (odd while
 * a write is under way); only uint64_t fields.
 */
typedef struct metrics_exemplar {
    uint64_t seq;
    uint64_t trace_hi, trace_lo; /* the trace id's 16 bytes */
    uint64_t span;               /* the processing span's id */
    uint64_t value_us;
    uint64_t when_ms; /* CLOCK_REALTIME; 0: none yet */
} metrics_exemplar_t;

/*
 * One worker's counters, in its slot of shared memory: written only by the
 * worker (relaxed atomic adds, no allocation), read by the supervisor.
 * Only uint64_t fields, so that metrics_counters_add can walk it as an
 * array. They survive the worker's restarts; the supervisor folds them into
 * its queue's totals when the slot is given up.
 */
typedef struct metrics_counters {
    uint64_t n_ok, n_duplicate, n_retry, n_reject, n_batches, n_commits;
    uint64_t n_redos;      /* transactions lost (deadlock, certification, savepoint) and redone */
    uint64_t n_lock_waits; /* records that timed out waiting for another transaction */
    uint64_t n_copies[METRICS_COPY_KINDS][METRICS_COPY_OUTCOMES];
    uint64_t n_db_reconnects;  /* database connections opened again after one was lost */
    uint64_t n_mq_reconnects;  /* broker connections opened again after one was lost */
    uint64_t n_retention_rows; /* rows deleted by retention */
    uint64_t n_reconcile_runs, n_reconcile_failures;
    uint64_t n_redelivered; /* deliveries that came redelivered: each ran alone */
    uint64_t batch[METRICS_BATCH_N + 1], batch_sum;          /* messages per batch */
    uint64_t handler[METRICS_HANDLER_N + 1], handler_sum_us; /* one handler call */
    uint64_t latency[METRICS_LATENCY_N + 1], latency_sum_us; /* publish to commit */
    uint64_t stage[METRICS_STAGES][METRICS_STAGE_N + 1];     /* metrics_stage_t */
    uint64_t stage_sum_us[METRICS_STAGES];
    /* Not counters: the newest traced handler call per bucket of handler (exemplars). Last. */
    metrics_exemplar_t handler_ex[METRICS_HANDLER_N + 1];
} metrics_counters_t;

/* Add one observation v to a histogram of n bounds (a relaxed atomic add each). Its bucket. */
static inline int metrics_observe(uint64_t *buckets, uint64_t *sum, const uint64_t *bounds, int n,
                                  uint64_t v)
{
    int b = 0;
    while (b < n && v > bounds[b])
        b++;
    __atomic_add_fetch(&buckets[b], 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(sum, v, __ATOMIC_RELAXED);
    return b;
}

/* One observation in c's histogram of messages per batch, of handler call durations (its
 * bucket, for the exemplar), or of publish-to-commit latency. Relaxed atomic adds. */
void metrics_observe_batch(metrics_counters_t *c, uint64_t messages);
int metrics_observe_handler(metrics_counters_t *c, uint64_t us);
void metrics_observe_latency(metrics_counters_t *c, uint64_t us);
/* One observation of us microseconds spent in stage (relaxed atomic adds). Its bucket. */
int metrics_observe_stage(metrics_counters_t *c, metrics_stage_t stage, uint64_t us);

/*
 * Note an observation of value_us at when_ms (CLOCK_REALTIME) of the trace
 * trace_id (32 hex digits) and span span_id (16) as ex's exemplar. The only
 * writer of ex. Ids that are not hex leave ex as it was.
 */
void metrics_exemplar_put(metrics_exemplar_t *ex, const char *trace_id, const char *span_id,
                          uint64_t value_us, uint64_t when_ms);

/* to += from, counter by counter (relaxed atomic loads of from); of the exemplars the newer
 * one (a write under way in from is skipped). */
void metrics_counters_add(metrics_counters_t *to, const metrics_counters_t *from);

/* Worker restarts by how the previous run ended (the outcome label). */
typedef enum metrics_exit {
    METRICS_EXIT_CRASH = 0, /* killed by a signal, or exited without saying why */
    METRICS_EXIT_TIMEOUT,   /* handler_timeout or reconcile_timeout (SIGALRM) */
    METRICS_EXIT_BROKER,    /* lost the broker */
    METRICS_EXIT_DATABASE,  /* lost the database */
    METRICS_EXIT_CONFIG,    /* configuration, declaration, handler init or server version refused */
    METRICS_EXIT_KINDS
} metrics_exit_t;

/* What the exposition shows of one queue; the supervisor fills it at each scrape. */
typedef struct metrics_queue {
    const char *name;
    metrics_counters_t c;
    uint64_t restarts[METRICS_EXIT_KINDS];
    int workers;           /* the count the queue runs now: configured, or chosen by "auto" */
    int workers_max;       /* most it may run (workers_max and the budget); = workers if fixed */
    int autoscaled;        /* 1: workers = "auto" (an int: it is a gauge) */
    int consuming;         /* running and consuming */
    int connecting;        /* running, not consuming yet (starting, waiting for the database) */
    int restarting;        /* not running: waiting out the restart backoff */
    int draining;          /* retired by a reload, finishing */
    double progress_age_s; /* longest time a current worker has gone without progress */
    bool outbox_known;     /* a worker of the queue swept the outbox (handlers that publish) */
    long long outbox_rows; /* as the newest sweep saw it */
    long long outbox_retrying, outbox_exhausted; /* of them: refused before; out of attempts */
    double outbox_oldest_s;
    log_sink_t last_error; /* the newest error or warning about the queue's workers */
} metrics_queue_t;

/*
 * Write the Prometheus text exposition (format 0.0.4) of queues[0..n-1] to
 * out, with idemd_build_info for version.
 */
void metrics_render(FILE *out, const metrics_queue_t *queues, int n, const char *version);

/*
 * The same as OpenMetrics text 1.0.0 (asked for with Accept:
 * application/openmetrics-text): counter families named without _total,
 * the handler duration's buckets with exemplars (trace_id, span_id), and
 * "# EOF" at the end.
 */
void metrics_render_openmetrics(FILE *out, const metrics_queue_t *queues, int n,
                                const char *version);

/*
 * The status document of queues[0..n-1] (JSON, one line and a newline):
 * version, pid, and per queue its workers by state, progress age, messages
 * by outcome, commits, restarts by cause and last_error (null, or time,
 * age_seconds, level, text). Returns a malloc'd string (the caller frees
 * it), or NULL when out of memory.
 */
char *metrics_status_json(const metrics_queue_t *queues, int n, const char *version);

/*
 * Point *out at n queue views for a scrape; the array and its strings
 * stay the collector's (valid until its next call). Called from
 * metrics_serve.
 */
typedef void (*metrics_collect_fn)(void *ctx, metrics_queue_t **out, int *n);

typedef struct metrics_server metrics_server_t;

/*
 * Listen on addr (as conf.c parsed metrics.listen) without a thread:
 * the caller polls metrics_fd() and calls metrics_serve() when it is
 * readable (and at least every second, for timeouts). GET /metrics and
 * GET /status answer with collect's view; everything else is 404. At most
 * 16 connections, 4 per client address; a request must end within 5 s of
 * its connection's start or previous answer. listen is addr as written,
 * for the log. Returns NULL on error (logged). The caller's forked
 * children call metrics_forget_fds.
 */
metrics_server_t *metrics_start(const struct sockaddr_storage *addr, const char *listen,
                                metrics_collect_fn collect, void *ctx, const char *version);

/*
 * Require "Authorization: Bearer TOKEN" on every request from now on (401 with
 * WWW-Authenticate otherwise); NULL: no authentication, as after metrics_start. Only a digest
 * of token is kept; the caller keeps token. NULL s is fine.
 */
void metrics_set_token(metrics_server_t *s, const char *token);

/* One descriptor to poll for input; -1 when s is NULL. */
int metrics_fd(const metrics_server_t *s);

/* Accept, read and answer whatever is ready; never blocks. NULL is fine. */
void metrics_serve(metrics_server_t *s);

/*
 * In a child forked from the process that runs s: close the child's copies
 * of s's descriptors (close only, so the parent's listener and connections
 * go on unaffected). A forked worker does not exec, so close-on-exec alone
 * would leave them open in it for its lifetime. s is not usable afterwards
 * in the child (not freed: the child never stops it).
 */
void metrics_forget_fds(metrics_server_t *s);

/* Stop listening and free s; NULL is fine. */
void metrics_stop(metrics_server_t *s);

#endif
