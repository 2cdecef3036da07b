/* autoscale.h: how many workers a queue with workers = "auto" should run (pure logic, no I/O). */
#ifndef IDEMD_AUTOSCALE_H
#define IDEMD_AUTOSCALE_H

#include <stdbool.h>
#include <stdint.h>

/* Every this often the supervisor feeds one sample per auto queue. */
#define AUTOSCALE_INTERVAL_MS 500
/* Mean busy fraction of the workers at or above which the queue counts as saturated. */
#define AUTOSCALE_HOT 0.85
/* Saturated intervals in a row before a worker is added. */
#define AUTOSCALE_HOT_INTERVALS 2
/* Throughput must grow by this fraction with an added worker, else it is taken back. */
#define AUTOSCALE_MIN_GAIN 0.10
/* After a worker is taken back: no addition for this long. */
#define AUTOSCALE_HOLD_MS 60000
/* Idle intervals in a row before a worker is removed (see autoscale_feed): 5 s. */
#define AUTOSCALE_COLD_INTERVALS 10
/*
 * Workers a queue starts with (if its cap and workers_min allow): one worker
 * spends most of a per-message batch waiting on database round trips and
 * leaves a CPU idle; an idle second one is retired after
 * AUTOSCALE_COLD_INTERVALS.
 */
#define AUTOSCALE_START 2
/* Removed only when the others would be at most this busy without it. */
#define AUTOSCALE_COLD 0.5

/*
 * What the workers of one queue did in one interval: deltas of their
 * counters, summed over the workers that consumed during it.
 */
typedef struct autoscale_sample {
    uint64_t now_ms;  /* CLOCK_MONOTONIC at the end of the interval */
    uint64_t dt_ms;   /* length of the interval */
    int consuming;    /* workers of the queue consuming now */
    uint64_t done;    /* messages finished (acked, dead-lettered, retried) */
    uint64_t busy_us; /* time spent on batches */
    uint64_t idle_us; /* time spent waiting for a first delivery */
} autoscale_sample_t;

typedef enum autoscale_step {
    AUTOSCALE_KEEP = 0,
    AUTOSCALE_UP = 1,   /* start one more worker */
    AUTOSCALE_DOWN = 2, /* retire one worker */
} autoscale_step_t;

typedef struct autoscale {
    int min, max;           /* bounds; max may change (autoscale_set_max) */
    int target;             /* the count the queue should run */
    int hot;                /* saturated intervals in a row */
    int cold;               /* idle intervals in a row */
    double hot_rate_sum;    /* msgs/s summed over the saturated streak */
    bool probing;           /* a worker was added: judge it once every worker consumes */
    int settle;             /* full intervals still to skip before the judgement */
    double base_rate;       /* msgs/s before the addition */
    uint64_t hold_until_ms; /* no addition before */
    double rate, busy;      /* of the last interval: msgs/s and mean busy fraction */
    char why[200];          /* the reason of the last UP or DOWN, for the log */
} autoscale_t;

/* How many workers to start with: AUTOSCALE_START within min..max. */
int autoscale_start_count(int min, int max);
/* Start at autoscale_start_count (min clamped to 1..max). The caller owns a; nothing to free. */
void autoscale_init(autoscale_t *a, int min, int max);
/* A new cap (connection budget, reload); target is not changed here: see autoscale_feed. */
void autoscale_set_max(autoscale_t *a, int max);
/*
 * One interval's sample. Returns what to do; a->target is already
 * changed accordingly and a->why says why. A target above max is brought
 * down one per call.
 */
autoscale_step_t autoscale_feed(autoscale_t *a, const autoscale_sample_t *s);

#endif
