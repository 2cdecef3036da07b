/* life.h: a delivery's life in a worker, from receipt to settled: its states and the one mover.
 */
#ifndef IDEMD_LIFE_H
#define IDEMD_LIFE_H

#include "amqp_compat.h"
#include <stdbool.h>
#include <stdint.h>
#include <sys/time.h>

#include "mq.h"
#include "trace.h"
#include "txn.h"

/*
 * Where one delivery stands. Only life_move() writes it (and life_place,
 * which leaves the slot a delivery moved out of FREE; tests/lint-states
 * fails on any other write). While it is
 * LIFE_BATCH the transaction protocol owns it (txn_state_t in its txn_msg_t
 * says where inside); past the transaction the states below say what is
 * left to do with the broker.
 *
 *   FREE --received--> BATCH --txn cut short (TXN_ROUTE_DEFER)--> DEFERRED --next batch--> BATCH
 *   BATCH --committed / duplicate--> ACK --ack--> SETTLED
 *   BATCH --no dead letter queue--> NACK --nack, no requeue--> SETTLED
 *   BATCH --retry / dead-letter--> COPY --published--> COPYING --confirmed--> COPIED
 *   COPIED --ack--> SETTLED
 *   COPY --not published (no connection, blocked)--> REFUSED
 *   COPYING --nack, return, channel close, timeout--> REFUSED
 *   REFUSED --held list has room--> HELD (the batch's slot becomes GONE)
 *   REFUSED --held list full--> REQUEUED (nack with requeue)
 *   HELD --timer: published again--> COPYING (still on the held list)
 *   any unsettled --connection or database lost--> RELEASED (the broker requeues it)
 *
 * One word for each: DEFERRED is never started (the batch was cut short;
 * it runs in the next batch); HELD is finished, but the broker refused its
 * copy (kept unacked on the held list, its copy tried again); an ordered
 * queue's message whose key is taken WAITs (TXN_WAIT, a txn state: it goes
 * COPY to the first delay queue). docs/lifecycle.md has the glossary.
 */
typedef enum life_state {
    LIFE_FREE = 0, /* no delivery here (or its envelope is owned elsewhere) */
    LIFE_BATCH,    /* received into the batch (or carried to the next): the transaction owns it */
    LIFE_DEFERRED, /* not started: the batch was cut short; runs in the next batch */
    LIFE_ACK,      /* committed or duplicate: to be acked */
    LIFE_NACK,     /* to dead-letter without a dead letter queue: nack without requeue */
    LIFE_COPY,     /* to retry or dead-letter: its copy is to be published (route says where) */
    LIFE_COPYING,  /* its copy is in the publishing round (copy_index) */
    LIFE_COPIED,   /* the broker confirmed its copy: to be acked */
    LIFE_REFUSED,  /* its copy was refused or not sent: to hold or to requeue */
    LIFE_HELD,     /* on the held list: unacked, its copy published again on a timer */
    LIFE_GONE,     /* a batch slot whose delivery moved to the held list */
    LIFE_SETTLED,  /* acked, or nacked without requeue: done */
    LIFE_REQUEUED, /* nacked with requeue (held list full): done here, comes back */
    LIFE_RELEASED, /* given up unacked (lost connection): the broker requeues it */
    LIFE_N_STATES
} life_state_t;

/* One delivery as the worker keeps it beside its protocol half (txn_msg_t). */
typedef struct life_msg {
    life_state_t state;
    amqp_envelope_t env;
    bool suspect;      /* redelivered: the worker that had it may have died on it */
    bool no_id;        /* dedup = "none" without an id: the guard keys it by its body */
    bool trusted;      /* its idemd-* headers carry our signature (copies_trusted) */
    txn_route_t route; /* where it goes once the transaction is over (set leaving BATCH) */
    unsigned pub_seq;  /* onward messages it sent in the current handler call */
    int copy_index;    /* its copy's place in the publishing round while COPYING, else -1 */
    uint64_t dropped;  /* its body was over max_body_bytes: its size (the body was not kept) */
    trace_ctx_t trace; /* its W3C trace context (points into env's headers) */
} life_msg_t;

/*
 * The two lists a delivery can be on: the batch (with the carried delivery
 * at index cap, past the batch) and the held list. Entries and their
 * protocol halves share an index: m[i] goes with t[i].
 */
typedef struct life_list {
    life_msg_t *m;
    txn_msg_t *t;
    int n, cap;
} life_list_t;

typedef struct life {
    life_list_t batch;             /* the batch being run; batch.m[batch.cap] is the carry slot */
    life_list_t held;              /* copies refused by the broker, kept unacked */
    uint64_t moves[LIFE_N_STATES]; /* how often each state was entered (tests, simulator) */
} life_t;

/*
 * Allocate a life for batches of batch_cap and a held list of held_cap
 * (both at least 1). 0, or -1 (out of memory; l is left empty). Free with
 * life_free.
 */
int life_init(life_t *l, int batch_cap, int held_cap) __attribute__((warn_unused_result));

/* Free the lists (envelopes still owned are the caller's to destroy first, see life_release). */
void life_free(life_t *l);

/*
 * The one door. Move the delivery at index i of list (l->batch or
 * l->held) to state to; aborts on a transition the life does not have.
 * Moving a batch entry to LIFE_HELD appends a copy of it (and its txn
 * half) to the held list and leaves the batch slot LIFE_GONE; the held
 * list's owner then owns the envelope. Returns false (nothing moved) only
 * for a batch entry to LIFE_HELD when the held list is full. Entries of the
 * held list that reach LIFE_SETTLED or LIFE_RELEASED are removed by
 * life_prune.
 */
bool life_move(life_t *l, life_list_t *list, int i, life_state_t to);

/*
 * Put entry from of list at index to (whose entry must be FREE), leaving
 * from FREE: a change of place, not of state (the carry into the batch,
 * DEFERRED deliveries to the front).
 */
void life_place(life_list_t *list, int from, int to);

/* Whether state s still needs something from the broker (an ack or nack): its envelope is live. */
bool life_unsettled(life_state_t s);

/* Drop the held list's finished entries (SETTLED, RELEASED), destroying their envelopes. */
void life_prune(life_t *l);

/*
 * Give up every delivery of l (the connection or database is lost): each
 * unsettled one goes RELEASED (the broker requeues it) and its envelope is
 * destroyed; batch and carry and held list end empty.
 */
void life_release(life_t *l);

/* The state's name for logs and the simulator's traces. */
const char *life_state_name(life_state_t s);

#endif
