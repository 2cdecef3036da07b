/* conf.h: idemd's configuration: one settings table, loading and validation of a libconfig file. */
#ifndef IDEMD_CONF_H
#define IDEMD_CONF_H

#include <libconfig.h>
#include <stdbool.h>
#include <stdio.h>

typedef enum conf_dedup {
    CONF_DEDUP_TABLE = 0, /* record the id in the record table (default) */
    CONF_DEDUP_NONE = 1,  /* handler is idempotent by business state */
} conf_dedup_t;

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

typedef struct conf_queue {
    char *name;           /* required */
    char *handler;        /* required: path of the handler .so */
    char *consumer;       /* dedup namespace; default: name */
    int prefetch;         /* basic.qos per worker; default 200 */
    int workers;          /* processes for this queue; default 1 */
    conf_dedup_t dedup;   /* "table" | "none" */
    char *id_header;      /* NULL: AMQP message_id property; else header name */
    int batch_size;       /* messages per transaction; default 1 */
    int batch_wait_ms;    /* max wait to fill a batch; default 0 */
    int max_attempts;     /* deliveries before dead-lettering; default 5 */
    int *retry_delays_ms; /* delay tiers; may be NULL */
    int n_retry_delays;
    int handler_timeout;     /* seconds; 0 = none; default 0 */
    bool declare;            /* declare the queue at startup; default true */
    bool durable;            /* default true */
    bool quorum;             /* x-queue-type=quorum; default false */
    char *dead_letter_queue; /* optional: declared and wired as the DLX target */
    conf_arg_t *args;        /* declare.arguments */
    int n_args;
    conf_binding_t *bindings; /* declare.bindings */
    int n_bindings;
    const config_setting_t *settings; /* handler's "settings" group or NULL; owned by conf */
    int line;                         /* line of the queue's group in the file */
} conf_queue_t;

typedef struct conf_broker {
    char *host;     /* default "127.0.0.1" */
    int port;       /* default 5672 */
    char *vhost;    /* default "/" */
    char *user;     /* default "guest" */
    char *password; /* from password or password_file; default "guest" */
    int heartbeat;  /* seconds; default 30; 0 = off */
} conf_broker_t;

typedef struct conf_database {
    char *host;          /* default "127.0.0.1"; ignored when socket is set */
    int port;            /* default 3306 */
    char *socket;        /* unix socket path or NULL */
    char *user;          /* default "idemd" */
    char *password;      /* from password or password_file; may be NULL */
    char *database;      /* required */
    char *record_table;  /* default "msg_id_record" */
    int connect_timeout; /* seconds; default 5 */
    int read_timeout;    /* seconds; default 30 */
    int write_timeout;   /* seconds; default 30 */
} conf_database_t;

typedef struct conf {
    char *path;
    int log_level;          /* log_level_t; daemon.log_level, default "info" */
    int shutdown_timeout;   /* seconds; daemon.shutdown_timeout, default 30 */
    int reconcile_interval; /* seconds; daemon.reconcile_interval, default 0 = off */
    conf_broker_t broker;
    conf_database_t database;
    conf_queue_t *queues;
    int n_queues;
    config_t lc; /* the parsed tree, kept for handler settings */
} conf_t;

/*
 * Read and validate a config file. On success returns 0 and *out owns a new
 * conf_t (free with conf_free). On failure returns -1, *out is NULL, and err
 * holds "FILE:LINE: SETTING: PROBLEM" (nothing is logged). Does not connect
 * anywhere and does not load plugins.
 */
int conf_load(const char *path, conf_t **out, char *err, size_t errlen)
    __attribute__((warn_unused_result));

/* Free a conf_t and everything it owns; NULL is fine. */
void conf_free(conf_t *conf);

/* Print the effective configuration (passwords masked) in libconfig syntax. */
void conf_dump(const conf_t *conf, FILE *out);

/*
 * Print the settings reference (markdown: one table per group, with type,
 * default, range, reload rule and meaning) generated from the settings
 * table; docs/configuration.md embeds it and tests/unit/test_conf.c checks
 * that it is current.
 */
void conf_reference(FILE *out);

#endif
