/* pubround.h: one publishing round's bookkeeping (confirms, nacks, returns), with no connection. */
#ifndef IDEMD_PUBROUND_H
#define IDEMD_PUBROUND_H

#include <stdbool.h>
#include <stdint.h>

#define PUBROUND_WHY_MAX 400 /* why a copy was refused, in the broker's words */

/* Where a copy of the round stands. Only pubround.c writes it. */
typedef enum pubround_state {
    PUBROUND_PENDING, /* published, neither acked nor nacked yet */
    PUBROUND_ACKED,   /* basic.ack and no basic.return: the broker has it in a queue */
    PUBROUND_REFUSED  /* basic.nack, returned then acked, or given up (pubround_finish) */
} pubround_state_t;

/* One publish of the round and what the broker said of it. */
typedef struct pubround_copy {
    uint64_t seq;      /* its publish sequence number on the channel (the confirm's tag) */
    char *exchange;    /* owned */
    char *routing_key; /* owned */
    bool quiet;        /* its refusal is expected (the publisher's probe): not logged */
    bool returned;     /* its basic.return came: its ack means "refused" */
    pubround_state_t state;
    char why[PUBROUND_WHY_MAX]; /* refused (or returned): the broker's words */
} pubround_copy_t;

/*
 * The copies of the current round, in publishing order: a copy's index in
 * copies is the index mq_publish returns. Embed it (zeroed, or
 * pubround_init) and free with pubround_free.
 */
typedef struct pubround {
    pubround_copy_t *copies;
    int n, cap;
    const char *where;                     /* borrowed, for logs ("host:port vhost"); may be NULL */
    char closed_why[PUBROUND_WHY_MAX / 2]; /* the channel was closed in this round: why */
} pubround_t;

#ifdef IDEMD_TESTING
/*
 * TEST BUILDS ONLY (-DIDEMD_TESTING): put back the matching of returns that
 * issue 19 fixed (a basic.return marks every pending copy of the round with
 * the same routing key, whatever its exchange and header). Default false;
 * only ever set by unit tests and the simulator (tests/sim), to show they
 * catch that bug. The release binaries do not have it.
 */
extern bool pubround_test_match_by_key;
#endif

/* An empty round; where (borrowed, may be NULL) names the connection in logs. */
void pubround_init(pubround_t *pr, const char *where);

/* Start a new round: forget every copy and the channel's close reason. */
void pubround_begin(pubround_t *pr);

/* Free what the round holds (the pubround_t itself is the caller's); it is then empty. */
void pubround_free(pubround_t *pr);

/*
 * Add a pending copy with publish sequence number seq (exchange and
 * routing_key are copied). quiet: do not log its refusal. Returns its index
 * in the round, or -1 when out of memory (not logged: the caller says what
 * it was publishing).
 */
int pubround_add(pubround_t *pr, uint64_t seq, const char *exchange, const char *routing_key,
                 bool quiet) __attribute__((warn_unused_result));

/* The copy just added was never sent (its publish failed): forget it. */
void pubround_drop_last(pubround_t *pr);

/*
 * basic.ack with delivery tag tag (multiple: every seq <= tag): the pending
 * copies it covers become acked, or refused when a basic.return came for
 * them (logged, unless quiet).
 */
void pubround_ack(pubround_t *pr, uint64_t tag, bool multiple);

/* basic.nack: the pending copies it covers are refused ("refused by the broker (basic.nack)"). */
void pubround_nack(pubround_t *pr, uint64_t tag, bool multiple);

/*
 * A basic.return (code, text) for exchange / routing_key, whose content
 * header carried MQ_H_PUBLISH = seq (-1: no such header). It marks the copy
 * it answers as returned: the pending copy with that seq; without a seq,
 * the first pending, not yet returned copy with the same exchange and
 * routing key (the broker returns in publishing order). A return that
 * matches nothing (a copy of an earlier round) is ignored. Returns the
 * index of the copy marked, or -1.
 */
int pubround_return(pubround_t *pr, long long seq, const char *exchange, const char *routing_key,
                    int code, const char *text);

/*
 * The channel was closed during the round (why: "channel closed by the
 * broker: 404 NOT_FOUND - ..."; kept, cut to PUBROUND_WHY_MAX / 2): every
 * copy still pending can never be confirmed and is refused with "not
 * confirmed: <why>".
 */
void pubround_channel_closed(pubround_t *pr, const char *why);

/*
 * End the wait for confirms: every copy still pending is refused with "not
 * confirmed" (": <why>" of a channel close). Returns 0 when every copy was
 * acked, else -1.
 */
int pubround_finish(pubround_t *pr);

/* How many copies of the round are still pending. */
int pubround_pending(const pubround_t *pr);

/* Whether copy index was acked by the broker (false for an index not in the round). */
bool pubround_ok(const pubround_t *pr, int index);

/* Whether copy index came back with basic.return (routed to no queue). */
bool pubround_returned(const pubround_t *pr, int index);

/*
 * Why copy index was not acked ("not published" for an index not in the
 * round, "not confirmed" while pending without a reason); NULL when it was
 * acked. Valid until the next pubround_begin.
 */
const char *pubround_why(const pubround_t *pr, int index);

#endif
