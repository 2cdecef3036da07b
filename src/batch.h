/* batch.h: collecting a batch of deliveries from the consuming connection, and what each delivery
 * says about itself (id, attempt, suspect, refused before it runs).
 */
#ifndef IDEMD_BATCH_H
#define IDEMD_BATCH_H

#include <stdbool.h>
#include <stdint.h>

#include "conf.h"
#include "life.h"
#include "port.h"
#include "copies.h"
#include "trace.h"

/*
 * Returns (x-delivery-count) after which a message of a quorum queue whose
 * delivery limit idemd could not turn off is dead-lettered by idemd, before
 * RabbitMQ 4's default limit of 20 deletes it (batch_accept).
 */
#define BATCH_RETURNS_MAX 15

typedef struct batch {
    const conf_queue_t *q;
    port_consume_t consume;    /* next */
    port_clock_t clock;        /* now_ms */
    life_t *life;              /* the batch is life->batch; the carry slot its entry [cap] */
    int batch_max;             /* at most this many (<= life->batch.cap) */
    const copies_keys_t *keys; /* check our signature on idemd-* headers */
    bool returns_guard;        /* the queue may have a broker delivery limit: BATCH_RETURNS_MAX */
    trace_rng_t *rng;          /* processing span ids (NULL: a fixed sequence) */
    bool has_carry;            /* a delivery is in the carry slot for the next batch */
    bool no_wait;              /* draining: a batch's first delivery is not waited for */
    /* A delivery the connection could not decode (MQ_UNDECODABLE): the batch before it is
     * settled first, then the worker rejects or requeues it and reconnects. */
    bool undecodable;
    uint64_t undecodable_tag;
    char undecodable_route[600]; /* "exchange=... routing_key=..." for the log */
} batch_t;

/*
 * Take one batch into life->batch (the first delivery waits up to 1 s;
 * with DEFERRED deliveries left from a cut-short batch, none). A suspect
 * delivery runs alone; one that would pass max_batch_bytes starts the next
 * batch (carried). Returns 0, or -1 when the broker failed.
 */
int batch_collect(batch_t *b) __attribute__((warn_unused_result));

/*
 * Prepare a received delivery m (with its protocol half t): its id (a bad
 * one makes it REJECT at once), attempt number, suspect and trusted flags,
 * its trace context (traceparent, tracestate, baggage; a new processing span),
 * and the refusals before it runs (too deep headers, body dropped, returned
 * too often, over max_body_bytes).
 */
void batch_accept(const batch_t *b, life_msg_t *m, txn_msg_t *t);

#endif
