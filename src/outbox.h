/* outbox.h: the transactional outbox: onward messages written in the handler's transaction, sent
 * after COMMIT.
 */
#ifndef IDEMD_OUTBOX_H
#define IDEMD_OUTBOX_H

#include "amqp_compat.h"
#include <stdbool.h>
#include <stddef.h>

#include "../include/idemd/handler.h"
#include "db.h"
#include "mq.h"

#define OUTBOX_TABLE "idemd_outbox"
#define OUTBOX_ID_MAX 255
#define OUTBOX_HEADERS_MAX 64 /* headers per onward message */

typedef struct outbox outbox_t;

/*
 * A worker's outbox on db (borrowed; call outbox_rebind after a
 * reconnect). Returns NULL when out of memory (logged). Free with
 * outbox_close.
 */
outbox_t *outbox_new(db_t *db);

/* The connection changed: statements are prepared again on db. */
void outbox_rebind(outbox_t *o, db_t *db);

/* Free o; NULL is fine. */
void outbox_close(outbox_t *o);

/*
 * Write one onward message of the source message (source_id) into the
 * outbox, inside the open transaction: p is copied. seq is its index among
 * the source's onward messages (0, 1, ...), which makes the default
 * message id. Returns 0, or -1 with the reason in err.
 */
int outbox_add(outbox_t *o, const char *source_id, size_t source_len, unsigned seq,
               const idemd_publish_t *p, char *err, size_t errlen);

/* How a worker's outbox treats onward messages the broker refuses (outbox_set_policy). */
typedef struct outbox_policy {
    const char *queue;        /* the source queue (borrowed): dead letters name it */
    const char *dlq;          /* its dead_letter_queue (borrowed), or NULL / "" for none */
    unsigned max_attempts;    /* daemon.outbox_max_attempts */
    int backoff_ms;           /* daemon.outbox_backoff_ms: doubled per refusal, 5 min at most */
    const unsigned char *key; /* RELAY_KEY_LEN bytes (borrowed): signs the dead letters */
} outbox_policy_t;

/* Set (copy) the policy; the strings and key it points to must outlive o. */
void outbox_set_policy(outbox_t *o, const outbox_policy_t *pol);

/*
 * Publish with confirms on pub, in id order, the outbox rows of the k
 * sources src[0..k-1] (right after their COMMIT), or with k = -1 the rows
 * older than grace_s seconds (the sweeper); rows waiting out a backoff are
 * left for later. Rows are read in slices of at most 500 rows and 16 MiB,
 * at most slices of them. Per slice: delete the rows the broker confirmed;
 * a row it refused (returned as unroutable, nack, a closed channel, a body
 * over its max message size) costs only itself: its attempts grow and it
 * waits out its backoff; after max_attempts it is dead-lettered to the
 * source queue's dead-letter queue with the reason (confirmed first, then
 * deleted); then COMMIT. Returns the number of messages sent, -1 when the
 * database failed (connection: the caller reconnects), -2 when the
 * broker's connection is lost or another failure left rows unsettled
 * (they stay for later).
 */
int outbox_relay(outbox_t *o, mq_t *pub, const char *const *src, const size_t *src_len, int k,
                 int grace_s, int slices);

/* The consumer's outbox by state (metrics, idemctl). */
typedef struct outbox_depth {
    long long rows;      /* all */
    long long retrying;  /* refused at least once, attempts left */
    long long exhausted; /* attempts used up, not dead-lettered (no dead_letter_queue) */
    double oldest_s;     /* age of the oldest row; 0 when none */
} outbox_depth_t;

/* The consumer's outbox rows by state into *d. 0, or -1 (logged). */
int outbox_depth(outbox_t *o, outbox_depth_t *d);

/*
 * The default id of a source's seq-th onward message: "<consumer>:<source
 * id>:<seq>" with '%' and ':' of the consumer written %25 and %3A, when the
 * source id is printable and it all fits, else "idemd-ob-" and a hash. The
 * consumer ends at the first ':' and seq starts after the last, so no two
 * inputs share an id. The same inputs give the same id, so a redelivered
 * or replayed source message sends the same ids and the next consumer's
 * dedup absorbs them.
 */
size_t outbox_msg_id(const char *consumer, const char *source_id, size_t source_len, unsigned seq,
                     char *out, size_t outlen);

/*
 * Headers to bytes (STRING and INT entries; -1 for another type or when out
 * is too small) and back. Decoding points keys and values into buf, which
 * must outlive out; it returns the number of entries or -1 when buf is not
 * such an encoding.
 */
int outbox_encode_headers(const idemd_header_t *h, size_t n, unsigned char *out, size_t cap,
                          size_t *len);
int outbox_decode_headers(const unsigned char *buf, size_t len, amqp_table_entry_t *out,
                          size_t max);

#endif
