/* copies.h: building the copies idemd republishes: retry tiers and dead letters with reason
 * headers.
 */
#ifndef IDEMD_COPIES_H
#define IDEMD_COPIES_H

#include "amqp_compat.h"
#include <stdbool.h>
#include <stdint.h>

#include "conf.h"

/* Header names idemd owns (RabbitMQ 4 ignores client-set x- headers). */
#define COPIES_H_ATTEMPTS "idemd-attempts"           /* int: attempts made so far */
#define COPIES_H_ERROR "idemd-error"                 /* last error text */
#define COPIES_H_FIRST_FAILURE "idemd-first-failure" /* ISO 8601 UTC */
#define COPIES_H_LAST_FAILURE "idemd-last-failure"   /* ISO 8601 UTC */
#define COPIES_H_EXCHANGE "idemd-original-exchange"
#define COPIES_H_ROUTING_KEY "idemd-original-routing-key"
#define COPIES_H_QUEUE "idemd-queue" /* the queue whose handler failed */
#define COPIES_H_SIG "idemd-sig"     /* hex HMAC-SHA256 of the headers above (copies_trusted) */
#define COPIES_H_BODY_DROPPED "idemd-body-dropped" /* int: size of a body over max_body_bytes */
/* Dead letters of onward messages (outbox.c): int 1 (copies_onward_queue), and the source's id. */
#define COPIES_H_ONWARD "idemd-onward"
#define COPIES_H_ONWARD_SOURCE "idemd-onward-source"
/* Set by idemd on a copy some of whose original headers did not fit (copies_copy_init). */
#define COPIES_H_HEADERS_DROPPED "idemd-headers-dropped"
/* The one idemd-* header a publisher sets: its publish time (docs/monitoring.md). */
#define COPIES_H_PUB_US "idemd-pub-us"

/*
 * Whether a header name is in idemd's namespace: it starts with "idemd-"
 * in any case (AMQP header names are bytes; compared lowercased), and is
 * not COPIES_H_PUB_US. No copy, dead letter or onward message idemd
 * publishes carries such a header from its original or its handler:
 * idemd sets its own.
 */
bool copies_is_idemd_header(amqp_bytes_t key);

/* The frame size idemd negotiates (mq.c), and room kept for our own headers. */
#define COPIES_FRAME_MAX 131072
#define COPIES_RESERVE 4096
/*
 * How deep a header of a copy may nest tables and arrays (the headers table
 * itself is level 0): newer rabbitmq-c releases refuse to decode deeper ones,
 * so a consumer of the copy built with them could not read it.
 */
#define COPIES_DEPTH_MAX 100

#define COPIES_KEY_LEN 32 /* bytes of the installation's key (db_copies_keys) */
#define COPIES_KEYS_MAX 3 /* keys held at once: the signing one and two accepted */
/* How often a worker reads the keys again, so that a rotation needs no restart. */
#define COPIES_KEY_REREAD_MS 30000
#define COPIES_SIG_HEX 64        /* hex digits of a signature */
#define COPIES_MAX_ATTEMPTS 1000 /* the most max_attempts allows */

/*
 * The installation's keys (table idemd_key, sql/007 and sql/010): k[0] signs
 * and verifies (row id 1); k[1..n-1] only verify (a key being staged, or
 * the one a rotation replaced). n is 1..COPIES_KEYS_MAX.
 */
typedef struct copies_keys {
    int n;
    unsigned char k[COPIES_KEYS_MAX][COPIES_KEY_LEN];
} copies_keys_t;

/* A copy of a delivery, ready for mq_publish. Borrows from the envelope. */
typedef struct copies_copy {
    amqp_basic_properties_t props;
    amqp_table_entry_t *entries; /* owned */
    char now[64];
    char error[512];
    char sig[COPIES_SIG_HEX + 1];
} copies_copy_t;

/*
 * Fill c from env: same properties and body, persistent; the broker's
 * death and delivery-count headers dropped (a copy that carried x-death
 * through the same delay queue twice would be dropped by the broker as a
 * cycle); idemd's headers set: attempts, error, first failure (kept from an
 * earlier copy when trusted), last failure = now_ms (CLOCK_REALTIME),
 * original exchange and routing key (kept from an earlier copy when
 * trusted), queue, and idemd-sig: their signature under key (COPIES_KEY_LEN
 * bytes) bound to queue and the message id. trusted says the original's
 * headers passed copies_trusted. Every idemd-* header of the original
 * (copies_is_idemd_header: also ones idemd does not know, such as a forged
 * idemd-onward) is left out, then idemd's own are set; of a trusted
 * original (idemd's own earlier copy) the values above are read back
 * first, and idemd-headers-dropped carried over. The id header
 * (id_header; NULL when the id is the message_id property) is kept first;
 * every other original header is kept in order while it nests no deeper
 * than COPIES_DEPTH_MAX and fits in one frame beside ours. When any was
 * left out, idemd-headers-dropped is set. The expiration and user_id
 * properties are dropped. c borrows env, which must outlive it. Returns 0,
 * or -1 when out of memory. Free with copies_copy_free.
 */
int copies_copy_init(copies_copy_t *c, const amqp_envelope_t *env, const char *queue,
                     const char *id_header, const char *id, size_t id_len, bool trusted,
                     const unsigned char *key, unsigned attempts, const char *error,
                     uint64_t now_ms) __attribute__((warn_unused_result));

/*
 * Whether the idemd headers of a delivery (attempts, first failure,
 * original route) were put there by idemd: they carry a signature made by
 * copies_copy_init (or copies_sign) under one of keys for this queue and
 * message id. When true, *attempts is the attempts made so far
 * (0..COPIES_MAX_ATTEMPTS). A publisher's own idemd-* headers are not
 * believed. For a dead onward message, queue is copies_onward_queue's
 * string and id its message_id property.
 */
bool copies_trusted(const amqp_basic_properties_t *p, const copies_keys_t *keys, const char *queue,
                    const char *id, size_t id_len, unsigned *attempts);

/*
 * The signature idemd puts in idemd-sig: hex HMAC-SHA256 under key
 * (COPIES_KEY_LEN bytes) of queue, the message id, attempts (the value of
 * idemd-attempts), first failure (idemd-first-failure) and the original
 * route (idemd-original-exchange, idemd-original-routing-key). Writes
 * COPIES_SIG_HEX + 1 bytes (NUL-terminated hex) into out. Borrows all.
 * Returns 0, or -1 when out of memory. copies_trusted checks what this
 * makes when the same queue string and id are given. *attempts may be 0: the
 * waiting copy of an ordered queue's message (docs/ordering.md) is no attempt.
 */
int copies_sign(const unsigned char *key, const char *queue, const char *id, size_t id_len,
                uint64_t attempts, amqp_bytes_t first, amqp_bytes_t exchange, amqp_bytes_t rkey,
                char *out) __attribute__((warn_unused_result));

/*
 * The queue string a dead onward message's signature is bound to:
 * "onward:" then source_queue (the queue whose handler sent it), written
 * into buf (len bytes). A letter with idemd-onward = 1 is signed with it
 * and the message_id property as id, so it can never pass for a copy of a
 * delivery of that queue. Returns buf, or NULL when it does not fit.
 */
const char *copies_onward_queue(const char *source_queue, char *buf, size_t len);

/*
 * Mark c as the copy of a message whose body (size bytes, over
 * max_body_bytes) was not kept: the copy goes out with an empty body and
 * the header idemd-body-dropped = size. Call once, after copies_copy_init.
 */
void copies_copy_body_dropped(copies_copy_t *c, uint64_t size);

void copies_copy_free(copies_copy_t *c);

/* ms (CLOCK_REALTIME milliseconds) as ISO 8601 UTC with milliseconds, into out. */
void copies_iso_time(uint64_t ms, char *out, size_t len);

/*
 * Name of the delay queue for a message that failed its attempt-th attempt
 * (1-based): tier min(attempt, n) - 1 of q->retry_delays_ms, named
 * "<queue>.retry.<ms>". Writes it into buf and the delay into *delay_ms.
 * Returns buf, or NULL when the queue has no tiers (retry at once).
 */
const char *copies_delay_queue(const conf_queue_t *q, unsigned attempt, char *buf, size_t len,
                               int *delay_ms);

#endif
