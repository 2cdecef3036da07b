/* settle.h: past COMMIT: each delivery of a batch acked, copied (retry tier or dead letter queue)
 * then acked, held, or requeued; the held list's copies tried again.
 */
#ifndef IDEMD_SETTLE_H
#define IDEMD_SETTLE_H

#include <stdint.h>

#include "conf.h"
#include "guard.h"
#include "life.h"
#include "port.h"
#include "metrics.h"

#define SETTLE_CONFIRM_MS 15000 /* a round's wait for the broker to confirm its copies, in all */

typedef struct settle {
    const conf_queue_t *q;
    const char *handler;    /* the handler's name, for logs */
    port_consume_t consume; /* ack, nack */
    port_publish_t pub;     /* the copies */
    port_clock_t clock;
    const guard_t *guard;     /* takes back the starts of held and requeued deliveries */
    const unsigned char *key; /* signs the copies' idemd-* headers (COPIES_KEY_LEN bytes) */
    metrics_counters_t *c;    /* counted into with relaxed atomics */
    int heartbeat;            /* broker.heartbeat (s): caps the pause after requeueing */
    life_t *life;
    /* What the rounds so far learned. */
    int pub_fail_streak;   /* failed rounds of batches in a row */
    int held_streak;       /* failed rounds of the held list in a row */
    uint64_t held_next_ms; /* when the held list's copies are tried again (0: none held) */
    uint64_t max_message;  /* the broker's max message size once a copy was refused for it */
} settle_t;

/*
 * Settle every delivery of the finished batch (l->batch) with the broker,
 * in tag order: route each, publish the copies in one round, ack what is
 * done (one multiple-ack when nothing is held), nack to the broker's DLX
 * without a dead letter queue, hold a refused copy's original (requeue it
 * when the held list is full, then pause). Deliveries left DEFERRED (the
 * batch was cut short) are left in the batch. Logs and counts each
 * outcome. 0, or -1 when the consuming channel failed.
 */
int settle_batch(settle_t *s) __attribute__((warn_unused_result));

/*
 * When their time has come, publish the held list's copies again; ack
 * each one confirmed, keep the others with a growing delay. 0, or -1 when
 * the consuming channel failed.
 */
int settle_retry_held(settle_t *s) __attribute__((warn_unused_result));

/*
 * After settle_batch: free the settled deliveries and move the DEFERRED
 * ones to the front of the batch, back in LIFE_BATCH, for the next batch.
 */
void settle_clear_batch(settle_t *s);

#endif
