/* outbox.h: the transactional outbox: onward messages written in the handler's transaction, sent
 * after COMMIT.
 */
#ifndef IDEMD_OUTBOX_H
#define IDEMD_OUTBOX_H

#include "amqp_compat.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../include/idemd/handler.h"
#include "db.h"
#include "db_port.h"
#include "mq.h"
#include "port.h"

#define OUTBOX_TABLE "idemd_outbox"
#define OUTBOX_ID_MAX 255
#define OUTBOX_HEADERS_MAX 64 /* headers per onward message */

typedef struct outbox outbox_t;

/* The consumer's outbox by state (metrics, idemctl). */
typedef struct outbox_depth {
    long long rows;      /* all */
    long long retrying;  /* refused at least once, attempts left */
    long long exhausted; /* attempts used up, not dead-lettered (no dead_letter_queue) */
    double oldest_s;     /* age of the oldest row; 0 when none */
} outbox_depth_t;

/* One outbox row as read whole: every pointer is borrowed from the database ops until their next
 * fetch, commit or rollback. */
typedef struct outbox_msg {
    unsigned long long id;
    const char *msg_id, *exchange, *routing_key, *content_type, *source_id;
    size_t msg_id_len, exchange_len, routing_key_len, content_type_len, source_len;
    const unsigned char *headers; /* outbox_encode_headers' bytes; NULL when none */
    size_t headers_len;
    const char *body;
    size_t body_len;
    unsigned attempts;  /* refused sends before this one */
    long long failed_s; /* the first refused send (Unix seconds), 0 when none */
    /* The trace context captured at publish() (sql/011's columns): NULL when none. Sent as the
     * headers of the same names unless the row's headers have them already. */
    const char *traceparent, *tracestate, *baggage;
    size_t traceparent_len, tracestate_len, baggage_len;
} outbox_msg_t;

/*
 * An outbox on the table behind ops (ctx: owned when ops->close is set).
 * NULL when out of memory (logged). Free with outbox_close.
 */
outbox_t *outbox_new_ops(const db_outbox_ops_t *ops, void *ctx);

/* The ctx given to outbox_new_ops (the real implementation's own state). */
void *outbox_ops_ctx(const outbox_t *o);

/* The outbox layer of the database port over MySQL (outbox_io.c): its calls are on the context
 * outbox_new makes. */
extern const db_outbox_ops_t outbox_io_ops;

/*
 * A worker's outbox on db (borrowed; call outbox_rebind after a
 * reconnect), through ops (borrowed, outlives the outbox: outbox_io_ops,
 * as the worker's database port holds it). Returns NULL when out of
 * memory (logged). Free with outbox_close.
 */
outbox_t *outbox_new(db_t *db, const db_outbox_ops_t *ops);

/* The connection changed: statements are prepared again on db. */
void outbox_rebind(outbox_t *o, db_t *db);

/* Free o; NULL is fine. */
void outbox_close(outbox_t *o);

/* The trace context an onward message takes from its source; each NULL when none. */
typedef struct outbox_trace {
    const char *traceparent; /* the onward message's own (a child span), NUL-terminated */
    const char *state;       /* the source's tracestate */
    size_t state_len;
    const char *baggage; /* the source's baggage */
    size_t baggage_len;
} outbox_trace_t;

/*
 * Write one onward message of the source message (source_id) into the
 * outbox, inside the open transaction: p is copied. seq is its index among
 * the source's onward messages (0, 1, ...), which makes the default
 * message id. tr (NULL: none) is the trace context to send it with: a
 * header of the same name among p's headers wins (with its own
 * traceparent, the source's tracestate is left out too). It goes into
 * sql/011's columns, or into the headers when the table lacks them.
 * Returns 0, or -1 with the reason in err.
 */
int outbox_add(outbox_t *o, const char *source_id, size_t source_len, unsigned seq,
               const idemd_publish_t *p, const outbox_trace_t *tr, char *err, size_t errlen);

/* How a worker's outbox treats onward messages the broker refuses (outbox_set_policy). */
typedef struct outbox_policy {
    const char *queue;        /* the source queue (borrowed): dead letters name it */
    const char *dlq;          /* its dead_letter_queue (borrowed), or NULL / "" for none */
    unsigned max_attempts;    /* daemon.outbox_max_attempts */
    int backoff_ms;           /* daemon.outbox_backoff_ms: doubled per refusal, 5 min at most */
    const unsigned char *key; /* COPIES_KEY_LEN bytes (borrowed): signs the dead letters */
} outbox_policy_t;

/* Set (copy) the policy; the strings and key it points to must outlive o. */
void outbox_set_policy(outbox_t *o, const outbox_policy_t *pol);

/*
 * Publish with confirms on pub (the publishing port; the clock's wall time
 * dates dead letters), in id order, the outbox rows of the k
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
int outbox_relay(outbox_t *o, const port_publish_t *pub, const port_clock_t *clock,
                 const char *const *src, const size_t *src_len, int k, int grace_s, int slices);

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
