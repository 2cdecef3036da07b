/* conf.h: idemd's configuration: one settings table, loading and validation of a libconfig file. */
#ifndef IDEMD_CONF_H
#define IDEMD_CONF_H

#include <libconfig.h>
#include <stdbool.h>
#include <stdio.h>
#include <sys/socket.h>

/*
 * What each field holds. Defaults, ranges and reload rules are written in one
 * place only, the settings table in conf.c (docs/configuration.md is made from it).
 */

/* workers, workers_max, db_connection_budget = "auto" (the numbers start at 1). */
#define CONF_WORKERS_AUTO 0

typedef enum conf_dedup {
    CONF_DEDUP_TABLE = 0, /* record the id in the record table */
    CONF_DEDUP_NONE = 1,  /* handler is idempotent by business state */
} conf_dedup_t;

/* order_dead_letter: what dead-lettering the head of a blocked key does (docs/ordering.md). */
typedef enum conf_order_dl {
    CONF_ORDER_DL_RELEASE = 0, /* the next waiter becomes the head */
    CONF_ORDER_DL_HOLD,        /* the key stays blocked until an operator releases it */
} conf_order_dl_t;

typedef struct conf_binding {
    char *exchange;
    char *routing_key;
} conf_binding_t;

/* A queue argument (x-arguments of queue.declare): a string or an integer. */
typedef struct conf_arg {
    char *key;
    bool is_int;
    long long ival;
    char *sval;
} conf_arg_t;

/* The SQL handler (handler = "sql", docs/sql-handler.md): what a statement's failure becomes. */
typedef enum conf_sql_verdict {
    CONF_SQL_REJECT = 0, /* dead-letter the message */
    CONF_SQL_RETRY,      /* retry it later */
    CONF_SQL_OK,         /* carry on as if it had matched */
} conf_sql_verdict_t;

/* One statement of sql = ( ... ). */
typedef struct conf_sql_stmt {
    char *statement; /* SQL with ? placeholders */
    char **params;   /* one source per placeholder (sqlh_param.h) */
    int n_params;
    char *expect;     /* affected-row rule "N", "A..B", ">=N"; NULL: any */
    int on_mismatch;  /* conf_sql_verdict_t when expect does not hold */
    int on_duplicate; /* CONF_SQL_REJECT or CONF_SQL_OK on a duplicate key */
    char *reason;     /* the business reason of a mismatch ("out of stock"); NULL: none */
    int line;         /* of its group in the file */
} conf_sql_stmt_t;

/* One onward message of publish = ( ... ). */
typedef struct conf_sql_pub {
    char *exchange;      /* "" = the default exchange */
    char *routing_key;   /* as written */
    char *body;          /* "body" or "json:PATH" */
    char *content_type;  /* NULL: none */
    conf_arg_t *headers; /* name = "source" each */
    int n_headers;
    int line;
} conf_sql_pub_t;

typedef struct conf_queue {
    char *name;           /* the queue to consume */
    char *handler;        /* absolute path of the handler .so */
    char *consumer;       /* dedup namespace (the queue name unless set) */
    int prefetch;         /* basic.qos per worker */
    int workers;          /* processes for this queue; CONF_WORKERS_AUTO: adaptive */
    int workers_min;      /* auto: fewest (and the number started) */
    int workers_max;      /* auto: most; CONF_WORKERS_AUTO: from the CPUs (sup_auto.c) */
    conf_dedup_t dedup;   /* "table" | "none" */
    char *id_header;      /* NULL: AMQP message_id property; else header name */
    int batch_size;       /* most messages per transaction */
    int batch_wait_ms;    /* most time to wait to fill a batch */
    bool batch_handler;   /* use the plugin's handle_batch when it has one */
    int max_body_bytes;   /* larger bodies are dropped and dead-lettered */
    int max_batch_bytes;  /* most body bytes per batch */
    int max_attempts;     /* attempts at a message before dead-lettering */
    int *retry_delays_ms; /* delay tiers in ms; NULL when none */
    int n_retry_delays;
    int handler_timeout;       /* seconds; 0 = no limit */
    int record_retention_days; /* 0 = keep records forever */
    char *order_key;           /* "header:NAME" or "json:PATH"; NULL or "": unordered */
    conf_order_dl_t order_dead_letter;
    bool single_active_consumer; /* declare with x-single-active-consumer */
    bool declare;                /* declare.enabled: declare the queue at startup */
    bool durable;                /* declare the queue durable */
    bool quorum;                 /* x-queue-type=quorum */
    bool quorum_default;         /* quorum was not set: an existing classic queue is kept */
    bool dead_letter_policy;     /* the broker dead-letters its rejects (a policy) */
    char *dead_letter_queue;     /* declared and wired as the DLX target; NULL: none */
    conf_arg_t *args;            /* declare.arguments */
    int n_args;
    conf_binding_t *bindings; /* declare.bindings */
    int n_bindings;
    const config_setting_t *settings; /* handler's "settings" group or NULL; owned by conf */
    conf_sql_stmt_t *sql;             /* handler = "sql": its statements, in order */
    int n_sql;
    conf_sql_pub_t *publish; /* handler = "sql": its onward messages */
    int n_publish;
    int line; /* line of the queue's group in the file */
} conf_queue_t;

/* broker.tls: AMQP over TLS (rabbitmq-c's OpenSSL socket, TLS 1.2 or newer). */
typedef struct conf_broker_tls {
    bool enabled;         /* connect with TLS */
    char *ca_file;        /* PEM CA bundle the broker's certificate must chain to */
    char *cert_file;      /* client certificate (PEM chain) or NULL; needs key_file */
    char *key_file;       /* client key (unencrypted PEM) or NULL; needs cert_file */
    bool verify_peer;     /* check the chain against ca_file */
    bool verify_hostname; /* check host against the certificate's names */
} conf_broker_tls_t;

/* database.tls: MySQL protocol TLS (Connector/C). */
typedef struct conf_database_tls {
    bool enabled;            /* connect with TLS; a connection without it fails */
    char *ca_file;           /* PEM CA bundle or NULL (the system's CA store) */
    char *cert_file;         /* client certificate or NULL; needs key_file */
    char *key_file;          /* client key or NULL; needs cert_file */
    bool verify_server_cert; /* check the chain and the host name */
} conf_database_tls_t;

typedef struct conf_broker {
    char *host;   /* host name or address of the broker */
    int port;     /* AMQP port (also of hosts entries that name none) */
    char **hosts; /* "host[:port]" each, or NULL: host and port */
    int n_hosts;
    char *vhost;    /* virtual host */
    char *user;     /* user name */
    char *password; /* from password or password_file */
    int heartbeat;  /* seconds; 0 = off */
    conf_broker_tls_t tls;
} conf_broker_t;

/* database.transaction: how idemd keeps its transaction whole (db_txn.c). */
typedef enum conf_txn {
    CONF_TXN_XA = 0,      /* an XA branch, where the server refuses what would end it */
    CONF_TXN_CHECKED = 1, /* START TRANSACTION; an end is seen after the fact, the queue held */
} conf_txn_t;

typedef struct conf_database {
    char *host;   /* server host name or address; ignored when socket is set */
    int port;     /* TCP port (also of hosts entries that name none) */
    char **hosts; /* "host[:port]" each, or NULL: host and port (or socket) */
    int n_hosts;
    char *socket;               /* unix socket path or NULL */
    char *user;                 /* user name */
    char *password;             /* from password or password_file; may be NULL */
    char *database;             /* schema of the record table and the handlers' tables */
    char *record_table;         /* dedup record table; [A-Za-z0-9_] only (in SQL) */
    int connect_timeout;        /* seconds */
    int read_timeout;           /* seconds */
    int write_timeout;          /* seconds */
    int galera_max_batch;       /* Galera: messages per transaction at most; 0 = no cap */
    conf_txn_t transaction;     /* how idemd's transaction is kept whole: XA or checked */
    bool get_server_public_key; /* libmysqlclient: ask a MySQL server for its RSA key */
    bool group_replication_allow_eventual; /* GR: connect though EVENTUAL cannot be raised */
    conf_database_tls_t tls;
} conf_database_t;

/* metrics: the Prometheus endpoint (docs/monitoring.md). */
typedef struct conf_metrics {
    char *listen;                 /* "ADDR:PORT", "[ADDR]:PORT", or NULL: off */
    struct sockaddr_storage addr; /* listen parsed (when set) */
    char *token_file;             /* file holding the bearer token, or NULL: none */
    char *token;                  /* its content, read at load (owned; wiped by conf_free) */
    bool allow_unauthenticated;   /* a non-loopback listen without token_file is meant */
} conf_metrics_t;

typedef struct conf {
    char *path;
    int log_level;            /* log_level_t; daemon.log_level */
    int shutdown_timeout;     /* seconds; daemon.shutdown_timeout */
    int reconcile_interval;   /* seconds; daemon.reconcile_interval; 0 = off */
    int reconcile_timeout;    /* seconds; daemon.reconcile_timeout */
    int db_connection_budget; /* workers of all queues at most; CONF_WORKERS_AUTO: server's */
    int outbox_grace;         /* seconds; daemon.outbox_grace */
    int outbox_max_attempts;  /* daemon.outbox_max_attempts */
    int outbox_backoff_ms;    /* daemon.outbox_backoff_ms */
    conf_broker_t broker;
    conf_database_t database;
    conf_metrics_t metrics;
    conf_queue_t *queues;
    int n_queues;
    config_t lc;    /* the parsed tree, kept for handler settings (broker and database removed) */
    char **sources; /* the files read (main, then @include), which lc's settings name; owned */
    int n_sources;
    /* Problems that do not stop loading (e.g. a password in a file others
     * can read), "FILE:LINE: SETTING: PROBLEM" each; owned by conf. conf_load
     * logs nothing: the caller prints them (log_warn) once logging is set up. */
    char **warnings;
    int n_warnings;
} conf_t;

/*
 * Read and validate a config file. On success returns 0 and *out owns a new
 * conf_t (free with conf_free); (*out)->warnings lists what deserves a
 * warning but did not stop loading. On failure returns -1, *out is NULL, and
 * err holds "FILE:LINE: SETTING: PROBLEM" (nothing is logged). Does not
 * connect anywhere and does not load plugins; files named by TLS settings
 * are opened once to check that they are readable.
 */
int conf_load(const char *path, conf_t **out, char *err, size_t errlen)
    __attribute__((warn_unused_result));

/* Free a conf_t and everything it owns, zeroing its passwords and every string of
 * the parsed tree (handler settings too) first; NULL is fine. */
void conf_free(conf_t *conf);

/*
 * Reload support: whether the broker or database settings differ, or one
 * queue's settings (its handler's settings group included). On true, what
 * names the first differing setting, e.g. "queues.orders.prefetch".
 */
bool conf_connections_differ(const conf_t *a, const conf_t *b, char *what, size_t len);
bool conf_queue_differs(const conf_queue_t *a, const conf_queue_t *b, char *what, size_t len);

/*
 * Split an endpoint "host", "host:port" or "[ipv6]:port" of a hosts list:
 * host (NUL-terminated, hostlen bytes at most) and port (def_port when it
 * names none). 0, or -1 when spec is malformed or the host too long.
 */
int conf_endpoint(const char *spec, int def_port, char *host, size_t hostlen, int *port)
    __attribute__((warn_unused_result));

/* Print the effective configuration (passwords masked) in libconfig syntax. */
void conf_dump(const conf_t *conf, FILE *out);

/*
 * Print the settings reference (markdown: one table per group, with type,
 * default, range, reload rule and meaning) generated from the settings
 * table; docs/configuration.md embeds it and tests/unit/test_conf.c checks
 * that it is current.
 */
void conf_reference(FILE *out);

/*
 * Print the sample configuration (conf/idemd.conf) generated from the
 * settings table: every setting with its help, range and default, and an
 * example value for settings without a default. tests/unit/test_conf.c
 * checks that conf/idemd.conf is current.
 */
void conf_sample(FILE *out);

/*
 * What queue i of conf risks that its settings cannot rule out: with
 * classic queues, the broker's unconfirmed dead-lettering from the delay
 * queues back to the work queue. Returns 1 and writes "FILE:LINE: SETTING:
 * PROBLEM" into buf, or 0 when there is nothing to say.
 */
int conf_queue_risk(const conf_t *conf, int i, char *buf, size_t len);

#endif
