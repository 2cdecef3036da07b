/* mq.h: one AMQP connection with one channel (rabbitmq-c): declare, consume, ack, publish. */
#ifndef IDEMD_MQ_H
#define IDEMD_MQ_H

#include "amqp_compat.h"
#include <stdbool.h>
#include <stdint.h>
#include <sys/time.h>

#include "conf.h"
#include "pubround.h"

#define MQ_CHANNEL 1
#define MQ_OPEN_MS 10000 /* TCP (and TLS) connect */
#define MQ_RPC_MS 15000  /* login handshake, and each RPC (declare, channel.open, close...) */
#define MQ_SEND_MS 10000 /* one publish's socket writes */
#define MQ_BLOCKED_MS 1000
/*
 * Every copy idemd publishes carries this header: its publish sequence
 * number on the channel, so that a basic.return (which has no delivery tag)
 * names the very copy it answers.
 */
#define MQ_H_PUBLISH "idemd-publish-seq"
#define MQ_TAG_ENTRIES 72 /* header entries copied on the stack when tagging a publish */
#define MQ_WHY_MAX 400    /* why a copy was refused, in the broker's words */
#define MQ_OPEN_REFUSED                                                                            \
    (-2) /* mq_open: the broker is older than idemd supports */ /* after connection.blocked, wait  \
                                                                   this long for pending confirms  \
                                                                 */

typedef enum mq_status {
    MQ_OK = 0,
    MQ_TIMEOUT = 1,   /* no delivery within the timeout */
    MQ_CANCELLED = 2, /* the broker cancelled our consumer (queue deleted) */
    /* A delivery whose properties the library cannot decode (rabbitmq-c 0.14+ refuses
     * headers nested deeper than 100 levels): only its delivery tag and route are known.
     * The connection can still send (acks, reject) but never read again: mq_close it. */
    MQ_UNDECODABLE = 3,
    MQ_ERR_CLOSED = -1 /* connection or channel unusable: discard this mq_t */
} mq_status_t;

/* Called while a publisher waits (every 200 ms at least), so its owner can show progress. */
typedef void (*mq_tick_fn)(void *arg);

typedef struct mq {
    amqp_connection_state_t conn;
    bool channel_open;
    bool blocked; /* the broker sent connection.blocked (resource alarm), not yet unblocked */
    bool broken;  /* a wait timed out or the socket failed: close without the AMQP handshake */
    mq_tick_fn tick;
    void *tick_arg;
    uint64_t next_keepalive_ms;
    char where[160]; /* "host:port vhost" for logs */
    /* The last failed RPC: "what: reason" (e.g. the broker's close text). */
    char error[400];
    bool quiet; /* log failed RPCs at debug level only: the caller reports error */
    bool deaf;  /* a frame could not be decoded: the library's input is stuck, sending works */
    bool tls;
    /* mq_declare: the queue dead-letters what is rejected (x-dead-letter-exchange as idemd
     * declared it), or it exists without idemd's dead-letter arguments (declared as before). */
    bool dead_letters;
    bool dead_letter_fallback;
    int broker_major;    /* the broker's major version (server property "version"); 0: unknown */
    bool limit_unsure;   /* a quorum queue mq_declare declared kept the broker's delivery limit */
    bool strategy_noted; /* logged that a dead letter queue kept an older x-dead-letter-strategy */
    /* Set by the caller: a queue to be declared as a quorum queue that exists as a classic one
     * is declared again as classic (declare.quorum was left to its default), and counted. */
    bool keep_classic;
    int n_kept_classic;     /* how many queues were kept classic so */
    char kept_classic[800]; /* their names, quoted, ", " between ("..." past the room) */
    uint64_t max_message;   /* the broker's max message size, learned from a refusal; 0: unknown */
    bool confirms;          /* the channel is in confirm mode (a publisher) */
    char ctag[256];         /* our consumer's tag (mq_consume), "" when not consuming */
    /* Publishing side (confirm mode): the copies of the current round. */
    uint64_t pub_seq; /* last publish sequence number */
    pubround_t round;
    /* A basic.return whose content header has not come yet (mq_returned). */
    bool returning;
    int ret_code;
    char ret_text[MQ_WHY_MAX / 2];
    char ret_exchange[256], ret_key[256];
} mq_t;

/*
 * Connect, log in (advertising consumer_cancel_notify, and the
 * connection_name "idemd <owner> consumer" that the broker shows
 * operators), open channel MQ_CHANNEL. owner is only read during the call.
 * With cfg->hosts, the nodes are tried once each, from hosts[start %
 * n_hosts] on, the first that answers wins (workers pass their index so
 * they spread). The broker's version is checked against the oldest idemd
 * supports (src/version.h). Returns 0 and a new mq_t in *out (free with
 * mq_close); -1 after logging why; or MQ_OPEN_REFUSED when every node is
 * older than that minimum: the reason is then in refused (refused_len
 * bytes; the caller reports it), or logged when refused is NULL.
 */
int mq_open(const conf_broker_t *cfg, const char *owner, int start, char *refused,
            size_t refused_len, mq_t **out) __attribute__((warn_unused_result));

/*
 * Open a connection for republishing ("idemd <owner> republisher"): the
 * configured heartbeat (keep it serviced with mq_service), channel in confirm
 * mode, then one probe publish (mandatory, to a queue name the broker
 * reserves, so it is returned and stored nowhere) that tells whether the
 * broker blocks publishing: see mq_blocked. tick (may be NULL) is called with
 * arg between the steps and while waiting. Every step is bounded (MQ_OPEN_MS,
 * MQ_RPC_MS). Same ownership as mq_open; a refused version is logged and
 * returns -1 (the consumer's mq_open reports it).
 */
int mq_open_publisher(const conf_broker_t *cfg, const char *owner, int start, mq_tick_fn tick,
                      void *arg, mq_t **out) __attribute__((warn_unused_result));

/* Whether the broker blocks this connection's publishes (a resource alarm). */
bool mq_blocked(const mq_t *mq);

/*
 * Handle what the broker sent a publishing connection meanwhile
 * (connection.blocked / unblocked, close) without waiting, and send a
 * heartbeat when one is due. 0, or -1 when the connection is unusable
 * (logged; close it).
 */
int mq_service(mq_t *mq) __attribute__((warn_unused_result));

/*
 * Send a heartbeat frame on a connection whose deliveries are not being read
 * (at most one a second; nothing when heartbeats are off), so that a long
 * wait elsewhere does not make the broker close it.
 */
void mq_keepalive(mq_t *mq);

/* Start a round of publishes whose confirms are tracked one by one. */
void mq_round_begin(mq_t *mq);

/*
 * Publish a persistent, mandatory message through the default exchange to
 * routing_key, as the next copy of the round. props is copied by the
 * library. The socket writes are bounded by MQ_SEND_MS: a broker that stops
 * reading (a resource alarm, a stalled network) gets the socket shut down
 * (then the mq_t is broken). Refused while the connection is blocked.
 * Returns the copy's index in the round, or -1 (logged).
 */
int mq_publish(mq_t *mq, const char *routing_key, const amqp_basic_properties_t *props,
               amqp_bytes_t body) __attribute__((warn_unused_result));

/*
 * The same through exchange ("" is the default exchange). A copy the
 * exchange routes nowhere comes back as returned (refused).
 */
int mq_publish_to(mq_t *mq, const char *exchange, const char *routing_key,
                  const amqp_basic_properties_t *props, amqp_bytes_t body)
    __attribute__((warn_unused_result));

/*
 * Wait until the broker settled every copy of the round: acked, or refused
 * (nack, or returned as unroutable); at most timeout_ms in all, and at most
 * MQ_BLOCKED_MS once the broker blocked the connection. Calls the tick
 * while it waits. Returns 0 when all were acked; -1 when any was refused,
 * or on a timeout or a broken connection (logged; then every unsettled copy
 * counts as refused and this mq_t should be closed: a copy left unconfirmed
 * must not reach its queue later).
 */
int mq_wait_confirms(mq_t *mq, int timeout_ms) __attribute__((warn_unused_result));

/* Whether copy index of the round was acked by the broker. */
bool mq_round_ok(const mq_t *mq, int index);

/*
 * Why copy index of the round was not acked, in the broker's words
 * ("unroutable: returned by the broker: 312 NO_ROUTE", "refused by the
 * broker (basic.nack)", "not confirmed: channel closed by the broker: 404
 * NOT_FOUND - no exchange ..."); NULL when it was acked. Valid until the
 * next mq_round_begin.
 */
const char *mq_round_why(const mq_t *mq, int index);

/* Whether copy index came back with basic.return (routed to no queue). */
bool mq_round_returned(const mq_t *mq, int index);

/*
 * After the broker closed the channel of a publishing connection (a
 * refused publish: mq_wait_confirms returned -1 and the connection is not
 * broken), open it again in confirm mode; this starts a new round. 0, or
 * -1 (logged; close this mq_t).
 */
int mq_channel_restore(mq_t *mq) __attribute__((warn_unused_result));

/* Whether the channel is open (false after the broker closed it). */
bool mq_channel_usable(const mq_t *mq);

/*
 * Declare a queue with a message TTL that dead-letters back to target (a
 * delay tier). quorum: a quorum queue whose dead-lettering is at-least-once
 * (RabbitMQ 3.10+); else a classic queue, whose dead-lettering is not
 * confirmed. 0 or -1 (logged).
 */
int mq_declare_delay(mq_t *mq, const char *name, int ttl_ms, const char *target, bool durable,
                     bool quorum) __attribute__((warn_unused_result));

/*
 * Declare a queue for dead letters, quorum or classic as above; a quorum one
 * without x-dead-letter-strategy (it has no dead-letter exchange), unless it
 * exists with it (an older idemd's: logged once per connection). Every
 * quorum queue idemd declares gets no delivery limit (mq_limit_args). 0 or
 * -1 (logged).
 */
int mq_declare_plain(mq_t *mq, const char *name, bool durable, bool quorum)
    __attribute__((warn_unused_result));

/*
 * Close channel and connection (unacked deliveries return to their queues) and
 * free; NULL ok. A broken connection is only reset: no close handshake to wait for.
 * A deaf one is sent connection.close and read to its end without decoding, so
 * that the acks and rejects sent before reach the broker (see mq_close_deaf).
 */
void mq_close(mq_t *mq);

/*
 * Declare the queue, its dead-letter queue and bindings as configured. With a
 * dead letter queue, the queue itself is declared to dead-letter into it
 * (x-dead-letter-exchange "", x-dead-letter-routing-key; on a quorum queue
 * at-least-once), so that a delivery idemd cannot decode can be rejected there
 * (mq->dead_letters). On RabbitMQ 4.x a quorum queue gets x-delivery-limit -1
 * (no limit). A queue that exists without either group of arguments (406) is
 * declared again without it: mq->dead_letter_fallback, or mq->limit_unsure
 * (logged with the remedy). 0 or -1 (logged).
 */
int mq_declare(mq_t *mq, const conf_queue_t *q) __attribute__((warn_unused_result));

/* basic.qos(prefetch) then basic.consume with manual acks. 0 or -1 (logged). */
int mq_consume(mq_t *mq, const char *queue, int prefetch) __attribute__((warn_unused_result));

/*
 * Stop consuming without giving anything back: basic.cancel, and wait for
 * cancel-ok. The broker sends cancel-ok after the last delivery to this
 * consumer, so every delivery it sent is then held by the library and still
 * comes out of mq_next (mq_pending tells whether one may); no new one comes.
 * 0, or -1 (not consuming, or the broker did not answer: logged).
 */
int mq_cancel(mq_t *mq) __attribute__((warn_unused_result));

/* Whether the library holds input not yet read through mq_next (after mq_cancel: deliveries). */
bool mq_pending(const mq_t *mq);

/*
 * Wait up to timeout for the next delivery (NULL timeout: block). On MQ_OK
 * *env holds it (the caller destroys it with amqp_destroy_envelope). On
 * MQ_UNDECODABLE *env holds its tag, exchange and routing key only (destroy
 * it too), and mq is deaf. A body
 * over max_body bytes is read and discarded frame by frame, never held
 * whole: env's body is then empty and *dropped its size (else 0). Other
 * frames (cancel, close, heartbeats) are handled here; errors are logged.
 */
mq_status_t mq_next(mq_t *mq, const struct timeval *timeout, size_t max_body, amqp_envelope_t *env,
                    uint64_t *dropped);

/* Frame-level acknowledgements: 0 or -1 (logged; the channel is then unusable). */
int mq_ack(mq_t *mq, uint64_t tag, bool multiple) __attribute__((warn_unused_result));
int mq_nack(mq_t *mq, uint64_t tag, bool requeue) __attribute__((warn_unused_result));

/* Text of an RPC reply for logs: "ok", a library error or a server close reason. */
const char *mq_reply_text(amqp_rpc_reply_t r, char *buf, size_t len);

#endif
