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

/*
 * Publish with confirms on pub, in id order, the outbox rows of the k
 * sources src[0..k-1] (right after their COMMIT), or with k = -1 the rows
 * older than grace_s seconds (the sweeper), at most limit of them; delete
 * the rows the broker confirmed and COMMIT. Returns the number of messages
 * sent, -1 when the database failed (connection: the caller reconnects),
 * -2 when the broker did not take them all (the rest stay for later).
 */
int outbox_relay(outbox_t *o, mq_t *pub, const char *const *src, const size_t *src_len, int k,
                 int grace_s, int limit);

/*
 * How many rows the consumer has in the outbox and the age in seconds of
 * the oldest (0 when none), for the metrics. 0, or -1 (logged).
 */
int outbox_depth(outbox_t *o, long long *rows, double *oldest_s);

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
