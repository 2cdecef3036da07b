/* handler.h: the ABI between idemd and its handler plugins (the one installed header). */
#ifndef IDEMD_HANDLER_H
#define IDEMD_HANDLER_H

#include <stddef.h>
#include <stdint.h>

/* <mysql.h> of the client library the plugin builds against, where the include path has it
 * (see idemd_db_t below). */
#if defined(__has_include) && !defined(IDEMD_NO_MYSQL_H)
#if __has_include(<mysql.h>)
#include <mysql.h>
#define IDEMD_HAVE_MYSQL_H 1
#elif __has_include(<mysql/mysql.h>)
#include <mysql/mysql.h>
#define IDEMD_HAVE_MYSQL_H 1
#elif __has_include(<mariadb/mysql.h>)
#include <mariadb/mysql.h>
#define IDEMD_HAVE_MYSQL_H 1
#endif
#endif

#ifdef __cplusplus
extern "C" {
#endif

/*
 * A plugin is a shared object that exports one symbol, IDEMD_HANDLER_SYMBOL,
 * of type idemd_handler_t. idemd refuses a plugin whose abi_major differs
 * from the host's or whose abi_minor is newer than the host's.
 *
 * Compatibility rules: within one major version, structs only grow at the
 * end and new fields are read only when the other side's minor says they
 * exist. A plugin built for 1.0 keeps loading on every 1.x host.
 *
 * Minor versions: 1.1 appended user_id and app_id to idemd_message_t (the
 * host allocates the message and always fills them; a 1.0 plugin never
 * reads them); 1.2 appended handle_batch to idemd_handler_t (read only
 * from plugins that say abi_minor >= 2); 1.3 appended publish to
 * idemd_host_t (the transactional outbox; check host->abi_minor >= 3);
 * 1.4 appended the W3C trace context (traceparent, tracestate, baggage,
 * trace_id, span_id) to idemd_message_t (read them only when
 * host->abi_minor >= 4); 1.5 appended timestamp and has_timestamp (the
 * AMQP timestamp property) to idemd_message_t (host->abi_minor >= 5);
 * 1.6 appended value_check and body_value to idemd_host_t (host->abi_minor
 * >= 6).
 */
#define IDEMD_HANDLER_ABI_MAJOR 1
#define IDEMD_HANDLER_ABI_MINOR 6
#define IDEMD_HANDLER_SYMBOL "idemd_handler"

/*
 * The database connection handed to a handler: MYSQL from <mysql.h>, of
 * whichever client library the plugin builds against (MariaDB Connector/C
 * names the struct st_mysql, Oracle's libmysqlclient names it MYSQL), so
 * a handler declares its functions with MYSQL * and needs no casts. The
 * header includes <mysql.h> when the include path has it (pkg-config
 * --cflags libmariadb or mysqlclient), else <mysql/mysql.h> or
 * <mariadb/mysql.h>; without any, idemd_db_t is MariaDB's struct
 * st_mysql, as in every release before. Define IDEMD_NO_MYSQL_H to skip
 * the include (the plugin then includes its <mysql.h> first). Only the
 * pointer crosses the ABI: a plugin built against either library loads in
 * a host built against the same one.
 */
#ifdef IDEMD_HAVE_MYSQL_H
typedef MYSQL idemd_db_t;
#else
typedef struct st_mysql idemd_db_t;
#endif

/* What the handler decided for one message. */
typedef enum idemd_result {
    IDEMD_RESULT_OK = 0,     /* commit the effects, ack the message */
    IDEMD_RESULT_RETRY = 1,  /* roll back; the message comes back later */
    IDEMD_RESULT_REJECT = 2, /* roll back; dead-letter, never retried */
} idemd_result_t;

typedef enum idemd_log_level {
    IDEMD_LOG_ERROR = 3,
    IDEMD_LOG_WARNING = 4,
    IDEMD_LOG_INFO = 6,
    IDEMD_LOG_DEBUG = 7,
} idemd_log_level_t;

typedef enum idemd_header_type {
    IDEMD_HEADER_STRING = 0, /* str/len hold the bytes (not NUL-terminated) */
    IDEMD_HEADER_INT = 1,    /* i holds the value (any AMQP integer type) */
    IDEMD_HEADER_OTHER = 2,  /* tables, arrays, floats, ...: not decoded */
} idemd_header_type_t;

/* One AMQP header (application header table entry). */
typedef struct idemd_header {
    const char *key; /* NUL-terminated */
    idemd_header_type_t type;
    const char *str;
    size_t len;
    int64_t i;
} idemd_header_t;

/*
 * One message as the handler sees it. Everything is borrowed for the
 * duration of the handle() call only: copy what must outlive it.
 * Strings are NUL-terminated unless a length is given.
 */
typedef struct idemd_message {
    const char *msg_id; /* the dedup id (from message_id or a header) */
    size_t msg_id_len;
    const void *body;
    size_t body_len;
    const char *exchange;
    const char *routing_key;
    const char *content_type; /* "" when absent */
    int redelivered;          /* broker hint only: never use it for dedup */
    unsigned attempt;         /* 1 for the first delivery idemd saw */
    const idemd_header_t *headers;
    size_t n_headers;
    const char *queue;    /* queue name */
    const char *consumer; /* dedup namespace of the queue */
    /* ABI 1.1: the user_id and app_id properties, "" when absent. RabbitMQ
     * checks user_id against the publishing connection's user (a message
     * with another user_id is refused), so it names who published; app_id
     * is whatever the publisher says. */
    const char *user_id;
    const char *app_id;
    /* ABI 1.4 (read only when host->abi_minor >= 4): the message's W3C trace
     * context, each "" when absent or malformed (never an error).
     * traceparent is the incoming header (version 00 form); tracestate only
     * with a valid traceparent; baggage on its own. trace_id is the
     * traceparent's; span_id is idemd's processing span for this delivery
     * (new per delivery, a child of the traceparent's parent-id; the span
     * id in idemd's log lines). "" for both without a traceparent. */
    const char *traceparent;
    const char *tracestate;
    const char *baggage;
    const char *trace_id;
    const char *span_id;
    /* ABI 1.5 (read only when host->abi_minor >= 5): the AMQP timestamp
     * property in seconds since the epoch, when has_timestamp is 1. */
    int64_t timestamp;
    int has_timestamp;
} idemd_message_t;

/* The handler's settings group from the queue's "settings" in the config. */
typedef struct idemd_settings idemd_settings_t;

/*
 * An onward message for the host's publish() (ABI 1.3). Everything is
 * copied by publish(); nothing is kept.
 */
typedef struct idemd_publish {
    const char *exchange;    /* "" = the default exchange */
    const char *routing_key; /* NUL-terminated */
    const void *body;
    size_t body_len;
    const char *content_type;      /* NULL or "" = none */
    const idemd_header_t *headers; /* STRING and INT entries are sent; others are refused */
    size_t n_headers;
    const char
        *msg_id; /* NULL = derived from (consumer, source id, index): the same on redelivery */
    size_t msg_id_len;
} idemd_publish_t;

/*
 * Services the host offers to plugins, so that a plugin never links
 * against idemd's own symbols. Only grows by appending.
 */
typedef struct idemd_host {
    unsigned abi_major;
    unsigned abi_minor;
    void (*log)(idemd_log_level_t level, const char *fmt, ...)
        __attribute__((format(printf, 2, 3)));
    /* Settings lookups: 0 when found with the right type, -1 otherwise
     * (out untouched). Strings stay valid until fini(). */
    int (*setting_string)(const idemd_settings_t *s, const char *name, const char **out);
    int (*setting_int)(const idemd_settings_t *s, const char *name, long long *out);
    int (*setting_bool)(const idemd_settings_t *s, const char *name, int *out);
    /*
     * ABI 1.3 (check host->abi_minor >= 3 before calling): send an onward
     * message through the transactional outbox. Callable from handle() and
     * handle_batch() only, with their db and the message being handled as
     * source. It writes a row into idemd_outbox inside the open
     * transaction, so the message is sent if and only if the handler's
     * effects commit; idemd publishes it with confirms right after COMMIT
     * (or, if the worker died first, a sweeper does). Messages of one source
     * are sent in the order of the calls. Returns 0, or -1 with a reason in
     * err: then answer RETRY (the row may be half written).
     */
    int (*publish)(idemd_db_t *db, const idemd_message_t *source, const idemd_publish_t *p,
                   char *err, size_t errlen);
    /*
     * ABI 1.6 (check host->abi_minor >= 6): after a statement on db, did
     * the server store a value other than the one sent? Its warnings and
     * notes say so (1264 out of range, 1265 truncated or rounded, 1292 and
     * 1366 incorrect value, 1406 too long, 1916 overflow, ...: the list in
     * docs/plugins.md), and neither server fails the statement for all of
     * them, even in strict mode (0.005 into DECIMAL(12,2) stores 0.01 with a
     * note). Free when the statement reported none (no round trip); else one
     * SHOW WARNINGS on db, which leaves the transaction alone. Returns 0
     * when no value was changed; 1 with the server's text in why: answer
     * REJECT (the same value would be changed again); -1 when the warnings
     * could not be read (why says why): answer RETRY.
     */
    int (*value_check)(idemd_db_t *db, char *why, size_t whylen);
    /*
     * ABI 1.6: the value at path (member names and array indexes joined by
     * dots: "orderId", "order.lines.0.sku") in msg's body, read as JSON by
     * idemd's one reader, the one the SQL handler and order_key use
     * (docs/sql-handler.md, "The body as JSON": RFC 8259, a duplicate
     * member name at any depth, invalid UTF-8 or a lone surrogate refuses
     * the body). Returns 1 with the value as text in out (outlen bytes,
     * NUL-terminated): a string decoded, a number as written, true, false
     * or null as those words, an object or array as its JSON text; 0 when
     * the body is good JSON without that path; -1 with the reason in err
     * when the body is refused, the path is malformed, the string holds
     * U+0000 or the value does not fit in out: answer REJECT.
     */
    int (*body_value)(const idemd_message_t *msg, const char *path, char *out, size_t outlen,
                      char *err, size_t errlen);
} idemd_host_t;

/*
 * The exported symbol. init() runs in each worker after its database
 * connection is up, and again after every database reconnect (fini() of
 * the old state first), so statements prepared in init() stay valid.
 * handle() runs inside an open transaction on db: it must not COMMIT,
 * ROLLBACK or change autocommit. On RETRY or REJECT it writes a reason
 * into err (errlen bytes, NUL-terminated). reconcile(), if set, runs every
 * reconcile_interval seconds in its own transaction (0 = OK to commit), in
 * one worker of all idemd instances on the database at a time; past
 * reconcile_timeout seconds its worker is killed and the transaction rolled
 * back.
 *
 * handle_batch() (ABI 1.2, optional; read only when abi_minor >= 2) handles
 * msgs[0..n-1] at once, inside the same open transaction, after idemd has
 * recorded all their ids: set-based SQL (one UPDATE ... WHERE id IN (...))
 * instead of one statement per message. It writes a verdict for every
 * message into verdicts[i] and, for a verdict other than OK, a reason into
 * errors + i * errlen (NUL-terminated). It returns 0, or -1 when the call
 * as a whole failed (the reason in errors[0 .. errlen-1] is logged): idemd
 * then rolls the transaction back and runs every message of the batch
 * alone through handle(), so only the message at fault gets a failing
 * verdict. When any verdict is not OK, idemd rolls the
 * transaction back and calls handle_batch again without those messages, so
 * the effects of a failing message are never committed. Rules: no effects
 * outside db; verdicts must depend only on the messages and the database.
 * handle() stays required: idemd calls it for a batch of one, for
 * redelivered messages (they run alone), after a failed set-based pass or
 * handle_batch call, and when the queue sets batch_handler = false.
 */
typedef struct idemd_handler {
    unsigned abi_major; /* IDEMD_HANDLER_ABI_MAJOR */
    unsigned abi_minor; /* IDEMD_HANDLER_ABI_MINOR */
    const char *name;
    int (*init)(const idemd_host_t *host, const idemd_settings_t *settings, idemd_db_t *db,
                void **state, char *err, size_t errlen);
    idemd_result_t (*handle)(void *state, idemd_db_t *db, const idemd_message_t *msg, char *err,
                             size_t errlen);
    void (*fini)(void *state);
    int (*reconcile)(void *state, idemd_db_t *db, char *err, size_t errlen);
    /* ABI 1.2: */
    int (*handle_batch)(void *state, idemd_db_t *db, const idemd_message_t *const *msgs, size_t n,
                        idemd_result_t *verdicts, char *errors, size_t errlen);
    void *reserved[7]; /* zero: room to grow */
} idemd_handler_t;

#ifdef __cplusplus
}
#endif
#endif
