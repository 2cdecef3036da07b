/* conf.c: idemd's settings table and the one loader, validator, printer and freer that walk it. */
#include "conf.h"

#include <arpa/inet.h>
#include <errno.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"

/*
 * Every setting is described once, in conf_defs below. The table drives
 * loading (type checks, ranges, defaults, the FILE:LINE messages), the
 * rejection of unknown names, conf_dump, conf_free, the reference in
 * docs/configuration.md (conf_reference), the sample conf/idemd.conf
 * (conf_sample, with the examples in conf_examples) and the reload rules
 * (CONF_F_NO_RELOAD).
 */

typedef enum conf_type {
    CONF_T_STRING,    /* char *; min..max is the length in bytes (max 0: no limit) */
    CONF_T_INT,       /* int in min..max */
    CONF_T_BOOL,      /* bool */
    CONF_T_ENUM,      /* int, the value of one of enums[] */
    CONF_T_INT_ARRAY, /* int * at off, count at off_n; each element in min..max */
    CONF_T_STR_ARRAY, /* char ** at off, count at off_n; each element min..max bytes */
    CONF_T_FILE,      /* char * at off, read from the named file; excludes setting "peer" */
    CONF_T_ARGS,      /* conf_arg_t * at off, count at off_n: a group of strings and integers */
    CONF_T_GROUP,     /* a group whose settings are section "sub", stored at base + off */
    CONF_T_LIST,      /* a list of groups of section "sub": array at off, count at off_n */
    CONF_T_RAW,       /* a group kept as a config_setting_t pointer and not checked */
} conf_type_t;

#define CONF_F_REQUIRED 0x01  /* no default: the setting must be present */
#define CONF_F_SECRET 0x02    /* masked as "***" by conf_dump */
#define CONF_F_NO_RELOAD 0x04 /* a change needs a restart */
#define CONF_F_IDENT 0x08     /* [A-Za-z0-9_]+ only: the value is interpolated into SQL */
#define CONF_F_READABLE 0x10  /* STRING: names a file that must be readable at load time */
#define CONF_F_BY_HOSTS 0x20  /* not used when the section's "hosts" list is not empty */

#define CONF_PATH_MAX 512
#define CONF_SECRET_MAX 4096

typedef struct conf_enum {
    const char *name;
    int value;
} conf_enum_t;

typedef struct conf_def {
    const char *section; /* the group this setting belongs to (see conf_sections) */
    const char *name;
    conf_type_t type;
    size_t off;   /* in the section's struct */
    size_t off_n; /* INT_ARRAY, ARGS, LIST: the int count */
    unsigned flags;
    const char *def;          /* default as written in the file; NULL: unset */
    long long min, max;       /* see conf_type_t; LIST: min element count */
    const conf_enum_t *enums; /* ENUM, NULL-terminated */
    const char *sub;          /* GROUP, LIST: section of the contents; FILE: the peer setting */
    size_t elem_size;         /* LIST */
    const char *def_doc;      /* reference only: the default when def is NULL */
    const char *help;         /* one line for the reference */
} conf_def_t;

typedef struct conf_ctx {
    conf_t *conf; /* receives warnings */
    const char *path;
    const char *dir; /* of path, for files named by @include; NULL: the current one */
    char *err;
    size_t errlen;
} conf_ctx_t;

typedef int (*conf_check_fn)(conf_ctx_t *ctx, const config_setting_t *grp, void *base,
                             const char *path);

typedef struct conf_section {
    const char *name;
    const char *title; /* where it sits in the file, for the reference */
    const char *intro;
    conf_check_fn check; /* cross-setting rules, after the section's settings loaded */
} conf_section_t;

static const conf_enum_t conf_log_levels[] = {
    {"error", LOG_LEVEL_ERROR},
    {"warning", LOG_LEVEL_WARNING},
    {"info", LOG_LEVEL_INFO},
    {"debug", LOG_LEVEL_DEBUG},
    {NULL, 0},
};

static const conf_enum_t conf_dedups[] = {
    {"table", CONF_DEDUP_TABLE},
    {"none", CONF_DEDUP_NONE},
    {NULL, 0},
};

#define CONF_STRING(sec, nm, st, fld, fl, d, lo, hi, dd, h)                                        \
    {                                                                                              \
        .section = sec, .name = nm, .type = CONF_T_STRING, .off = offsetof(st, fld), .flags = fl,  \
        .def = d, .min = lo, .max = hi, .def_doc = dd, .help = h                                   \
    }
#define CONF_INT(sec, nm, st, fld, fl, d, lo, hi, h)                                               \
    {                                                                                              \
        .section = sec, .name = nm, .type = CONF_T_INT, .off = offsetof(st, fld), .flags = fl,     \
        .def = d, .min = lo, .max = hi, .help = h                                                  \
    }
#define CONF_BOOL(sec, nm, st, fld, fl, d, h)                                                      \
    {                                                                                              \
        .section = sec, .name = nm, .type = CONF_T_BOOL, .off = offsetof(st, fld), .flags = fl,    \
        .def = d, .help = h                                                                        \
    }
#define CONF_ENUM(sec, nm, st, fld, fl, d, en, h)                                                  \
    {                                                                                              \
        .section = sec, .name = nm, .type = CONF_T_ENUM, .off = offsetof(st, fld), .flags = fl,    \
        .def = d, .enums = en, .help = h                                                           \
    }
#define CONF_INT_ARRAY(sec, nm, st, fld, nfld, fl, lo, hi, d, h)                                   \
    {                                                                                              \
        .section = sec, .name = nm, .type = CONF_T_INT_ARRAY, .off = offsetof(st, fld),            \
        .off_n = offsetof(st, nfld), .flags = fl, .def = d, .min = lo, .max = hi, .help = h        \
    }
#define CONF_STR_ARRAY(sec, nm, st, fld, nfld, fl, lo, hi, dd, h)                                  \
    {                                                                                              \
        .section = sec, .name = nm, .type = CONF_T_STR_ARRAY, .off = offsetof(st, fld),            \
        .off_n = offsetof(st, nfld), .flags = fl, .min = lo, .max = hi, .def_doc = dd, .help = h   \
    }
#define CONF_FILE(sec, nm, st, fld, fl, peer, h)                                                   \
    {                                                                                              \
        .section = sec, .name = nm, .type = CONF_T_FILE, .off = offsetof(st, fld), .flags = fl,    \
        .sub = peer, .def_doc = "none", .help = h                                                  \
    }
#define CONF_ARGS(sec, nm, st, fld, nfld, fl, h)                                                   \
    {                                                                                              \
        .section = sec, .name = nm, .type = CONF_T_ARGS, .off = offsetof(st, fld),                 \
        .off_n = offsetof(st, nfld), .flags = fl, .def_doc = "none", .help = h                     \
    }
#define CONF_GROUP(sec, nm, offset, subsec, h)                                                     \
    {                                                                                              \
        .section = sec, .name = nm, .type = CONF_T_GROUP, .off = offset, .sub = subsec, .help = h  \
    }
#define CONF_LIST(sec, nm, st, fld, nfld, elem, subsec, fl, lo, dd, h)                             \
    {                                                                                              \
        .section = sec, .name = nm, .type = CONF_T_LIST, .off = offsetof(st, fld),                 \
        .off_n = offsetof(st, nfld), .elem_size = sizeof(elem), .sub = subsec, .flags = fl,        \
        .min = lo, .def_doc = dd, .help = h                                                        \
    }
#define CONF_RAW(sec, nm, st, fld, fl, h)                                                          \
    {                                                                                              \
        .section = sec, .name = nm, .type = CONF_T_RAW, .off = offsetof(st, fld), .flags = fl,     \
        .def_doc = "none", .help = h                                                               \
    }

#define RQ CONF_F_REQUIRED
#define NR CONF_F_NO_RELOAD
#define SE CONF_F_SECRET

static const conf_def_t conf_defs[] = {
    /* The top level: the five groups and nothing else. */
    CONF_GROUP("root", "daemon", 0, "daemon", "process-wide settings"),
    CONF_GROUP("root", "broker", offsetof(conf_t, broker), "broker",
               "the RabbitMQ connection (each worker opens its own)"),
    CONF_GROUP("root", "database", offsetof(conf_t, database), "database",
               "the MySQL/MariaDB connection (each worker opens its own)"),
    CONF_GROUP("root", "metrics", offsetof(conf_t, metrics), "metrics",
               "the Prometheus endpoint (docs/monitoring.md); off unless `listen` is set"),
    CONF_LIST("root", "queues", conf_t, queues, n_queues, conf_queue_t, "queue", RQ, 1, NULL,
              "the queues to consume: a list `( { ... }, { ... } )`, at least one"),

    CONF_ENUM("daemon", "log_level", conf_t, log_level, 0, "info", conf_log_levels,
              "most verbose level written to stderr (`--log-level` overrides it)"),
    CONF_INT("daemon", "shutdown_timeout", conf_t, shutdown_timeout, 0, "30", 1, 3600,
             "seconds a worker gets after SIGTERM to finish its transaction before it is killed"),
    CONF_INT("daemon", "reconcile_interval", conf_t, reconcile_interval, 0, "0", 0, 86400,
             "seconds between calls of a handler's `reconcile()`; 0 = never"),
    CONF_INT("daemon", "reconcile_timeout", conf_t, reconcile_timeout, 0, "30", 1, 3600,
             "seconds one `reconcile()` call may take before its worker is killed"),
    CONF_INT("daemon", "outbox_grace", conf_t, outbox_grace, 0, "30", 1, 3600,
             "seconds an outbox row is left to the worker that wrote it before the sweeper "
             "sends it"),
    CONF_INT("daemon", "outbox_max_attempts", conf_t, outbox_max_attempts, 0, "16", 1, 1000,
             "sends of an onward message the broker refuses (unroutable, exchange missing, "
             "nack) before it is dead-lettered to its source queue's `dead_letter_queue`; "
             "16 with the default backoff is about 40 minutes"),
    CONF_INT("daemon", "outbox_backoff_ms", conf_t, outbox_backoff_ms, 0, "1000", 10, 300000,
             "wait after an onward message's first refused send; doubled after each, at most "
             "5 minutes"),

    CONF_STRING("broker", "host", conf_broker_t, host, NR | CONF_F_BY_HOSTS, "127.0.0.1", 1, 255,
                NULL, "host name or address of RabbitMQ"),
    CONF_INT("broker", "port", conf_broker_t, port, NR, "5672", 1, 65535,
             "AMQP port; a TLS listener (`tls.enabled`) is usually on 5671"),
    CONF_STR_ARRAY("broker", "hosts", conf_broker_t, hosts, n_hosts, NR, 1, 300, "none (`host`)",
                   "cluster nodes `[ \"host:port\", ... ]` (`port` when a node names none); each "
                   "worker tries them in its own rotated order and moves to the next on failure; "
                   "excludes `host`"),
    CONF_STRING("broker", "vhost", conf_broker_t, vhost, NR, "/", 1, 255, NULL, "virtual host"),
    CONF_STRING("broker", "user", conf_broker_t, user, NR, "guest", 1, 0, NULL, "user name"),
    CONF_STRING("broker", "password", conf_broker_t, password, NR | SE, "guest", 0, 0, NULL,
                "password; prefer `password_file`"),
    CONF_FILE("broker", "password_file", conf_broker_t, password, NR | SE, "password",
              "file holding the password (trailing newlines removed); excludes `password`"),
    CONF_INT(
        "broker", "heartbeat", conf_broker_t, heartbeat, NR, "30", 0, 3600,
        "AMQP heartbeat in seconds, for the consuming and the republishing connections; 0 = off"),
    CONF_GROUP("broker", "tls", offsetof(conf_broker_t, tls), "broker_tls",
               "TLS to the broker (docs/tls.md)"),

    CONF_BOOL("broker_tls", "enabled", conf_broker_tls_t, enabled, NR, "false",
              "connect with TLS 1.2 or newer; also set `port` to the broker's TLS listener "
              "(usually 5671)"),
    CONF_STRING("broker_tls", "ca_file", conf_broker_tls_t, ca_file, NR | CONF_F_READABLE, NULL, 1,
                PATH_MAX - 1, "none",
                "PEM file of the CA certificates the broker's certificate must chain to; "
                "required when `enabled` and `verify_peer` are true (the system's CA store is "
                "not read)"),
    CONF_STRING("broker_tls", "cert_file", conf_broker_tls_t, cert_file, NR | CONF_F_READABLE, NULL,
                1, PATH_MAX - 1, "none",
                "client certificate (PEM, may be followed by its chain) for brokers that ask "
                "for one; needs `key_file`"),
    CONF_STRING("broker_tls", "key_file", conf_broker_tls_t, key_file, NR | CONF_F_READABLE, NULL,
                1, PATH_MAX - 1, "none",
                "private key of `cert_file` (PEM, not encrypted); needs `cert_file`"),
    CONF_BOOL("broker_tls", "verify_peer", conf_broker_tls_t, verify_peer, NR, "true",
              "refuse a broker certificate that does not chain to `ca_file` or is not valid now"),
    CONF_BOOL("broker_tls", "verify_hostname", conf_broker_tls_t, verify_hostname, NR, "true",
              "refuse a broker certificate whose DNS names (or, without any, its CN) do not "
              "match `host`"),

    CONF_STRING("database", "host", conf_database_t, host, NR | CONF_F_BY_HOSTS, "127.0.0.1", 1,
                255, NULL, "server host name or address; not used when `socket` is set"),
    CONF_INT("database", "port", conf_database_t, port, NR, "3306", 1, 65535,
             "server TCP port; not used when `socket` is set"),
    CONF_STR_ARRAY("database", "hosts", conf_database_t, hosts, n_hosts, NR, 1, 300,
                   "none (`host`)",
                   "cluster nodes (e.g. Galera) `[ \"host:port\", ... ]` (`port` when a node "
                   "names none); each worker tries them in its own rotated order and moves to the "
                   "next on failure; excludes `host` and `socket`"),
    CONF_STRING("database", "socket", conf_database_t, socket, NR, NULL, 1, 107, "none (TCP)",
                "unix socket path; when set, host and port are ignored"),
    CONF_STRING("database", "user", conf_database_t, user, NR, "idemd", 1, 0, NULL, "user name"),
    CONF_STRING("database", "password", conf_database_t, password, NR | SE, NULL, 0, 0, "none",
                "password; prefer `password_file`"),
    CONF_FILE("database", "password_file", conf_database_t, password, NR | SE, "password",
              "file holding the password (trailing newlines removed); excludes `password`"),
    CONF_STRING("database", "database", conf_database_t, database, NR | RQ, NULL, 1, 64, NULL,
                "schema that holds the record table and the handlers' tables"),
    CONF_STRING("database", "record_table", conf_database_t, record_table, NR | CONF_F_IDENT,
                "msg_id_record", 1, 64, NULL,
                "dedup record table (see sql/001_msg_id_record.sql); interpolated into SQL"),
    CONF_INT("database", "connect_timeout", conf_database_t, connect_timeout, NR, "5", 1, 3600,
             "seconds to wait for a connection"),
    CONF_INT("database", "read_timeout", conf_database_t, read_timeout, NR, "30", 1, 3600,
             "seconds to wait for a reply; a lost reply to COMMIT is resolved after reconnecting"),
    CONF_INT("database", "write_timeout", conf_database_t, write_timeout, NR, "30", 1, 3600,
             "seconds to wait for a write to the server"),
    CONF_INT("database", "galera_max_batch", conf_database_t, galera_max_batch, NR, "100", 0, 1000,
             "on a Galera node (`wsrep_on`), at most this many messages per batch transaction "
             "whatever a queue's `batch_size` says; 0 = no cap (docs/scaling.md: larger batches "
             "made Galera nodes vote themselves inconsistent after a view change)"),
    CONF_GROUP("database", "tls", offsetof(conf_database_t, tls), "database_tls",
               "TLS to the database server (docs/tls.md)"),

    CONF_BOOL("database_tls", "enabled", conf_database_tls_t, enabled, NR, "false",
              "connect with TLS over TCP and refuse a connection without it; excludes `socket`"),
    CONF_STRING("database_tls", "ca_file", conf_database_tls_t, ca_file, NR | CONF_F_READABLE, NULL,
                1, PATH_MAX - 1, "none (system CA store)",
                "PEM file of the CA certificates the server's certificate must chain to; when "
                "set, the chain is checked whatever `verify_server_cert` says"),
    CONF_STRING("database_tls", "cert_file", conf_database_tls_t, cert_file, NR | CONF_F_READABLE,
                NULL, 1, PATH_MAX - 1, "none",
                "client certificate (PEM) for accounts that `REQUIRE X509`; needs `key_file`"),
    CONF_STRING("database_tls", "key_file", conf_database_tls_t, key_file, NR | CONF_F_READABLE,
                NULL, 1, PATH_MAX - 1, "none",
                "private key of `cert_file` (PEM, not encrypted); needs `cert_file`"),
    CONF_BOOL("database_tls", "verify_server_cert", conf_database_tls_t, verify_server_cert, NR,
              "true",
              "refuse a server certificate that does not match `host` (DNS name or IP address) "
              "or, without `ca_file`, does not chain to the system's CA store"),

    CONF_STRING("metrics", "listen", conf_metrics_t, listen, 0, NULL, 1, 64, "none (off)",
                "`\"ADDR:PORT\"` (IPv6: `\"[ADDR]:PORT\"`, numeric) where the supervisor serves "
                "`/metrics` and `/status` over plain HTTP: keep it on loopback or a trusted "
                "network, and set `token_file`"),
    CONF_STRING("metrics", "token_file", conf_metrics_t, token_file, CONF_F_READABLE, NULL, 1,
                PATH_MAX - 1, "none (no authentication)",
                "file holding a bearer token (trailing newlines removed; at least 16 bytes of "
                "letters, digits, `-._~+/`, then `=` padding) that every request must send as "
                "`Authorization: Bearer TOKEN`, else 401; refused when others may read it or "
                "its group write it. Read again on reload; `idemctl status` sends it"),

    CONF_STRING("queue", "name", conf_queue_t, name, NR | RQ, NULL, 1, 255, NULL,
                "queue to consume; unique in the file"),
    CONF_STRING("queue", "handler", conf_queue_t, handler, NR | RQ, NULL, 1, PATH_MAX - 1, NULL,
                "path of the handler plugin (.so); a relative path is taken from the directory "
                "of the config file that holds it"),
    CONF_STRING("queue", "consumer", conf_queue_t, consumer, NR, NULL, 1, 128, "the queue name",
                "dedup namespace: the `consumer` column of the record table"),
    CONF_INT("queue", "prefetch", conf_queue_t, prefetch, 0, "1000", 1, 65535,
             "unacknowledged deliveries per worker (basic.qos)"),
    CONF_INT("queue", "workers", conf_queue_t, workers, 0, "1", 1, 64,
             "worker processes, each with its own AMQP and database connection"),
    CONF_ENUM("queue", "dedup", conf_queue_t, dedup, NR, "table", conf_dedups,
              "`table`: record each id in the record table; `none`: the handler is idempotent "
              "by itself"),
    CONF_STRING("queue", "id_header", conf_queue_t, id_header, NR, NULL, 1, 255,
                "the message_id property", "application header that carries the message id"),
    CONF_INT("queue", "batch_size", conf_queue_t, batch_size, 0, "500", 1, 1000,
             "most messages per transaction (group commit, a savepoint each); 1 = one "
             "transaction per message"),
    CONF_INT("queue", "batch_wait_ms", conf_queue_t, batch_wait_ms, 0, "0", 0, 10000,
             "milliseconds to wait for more deliveries once one arrived; 0 = take what is "
             "already received (batches grow with load)"),
    CONF_BOOL("queue", "batch_handler", conf_queue_t, batch_handler, 0, "true",
              "call the handler's handle_batch (ABI 1.2) once per batch when it has one; false = "
              "handle() per message"),
    CONF_INT("queue", "max_body_bytes", conf_queue_t, max_body_bytes, 0, "1048576", 1, 1073741824,
             "largest message body the handler is given; a larger one is read off the "
             "connection and discarded without being held, then dead-lettered without its body "
             "(header `idemd-body-dropped` = its size) and never retried"),
    CONF_INT("queue", "max_batch_bytes", conf_queue_t, max_batch_bytes, 0, "16777216", 1,
             2147483647,
             "most body bytes in one batch: a batch stops growing before the next message "
             "would pass it (that message starts the next batch); one message always runs"),
    CONF_INT("queue", "max_attempts", conf_queue_t, max_attempts, 0, "5", 1, 1000,
             "attempts at one message (handler retries and crashes) before it is dead-lettered"),
    CONF_INT_ARRAY("queue", "retry_delays_ms", conf_queue_t, retry_delays_ms, n_retry_delays, NR, 1,
                   86400000, "[ 1000, 10000, 60000 ]",
                   "delay tiers in milliseconds for retried messages (one delay queue "
                   "`<name>.retry.<ms>` each; the last repeats); `[]`: republish to the queue's "
                   "tail at once"),
    CONF_INT("queue", "handler_timeout", conf_queue_t, handler_timeout, 0, "30", 0, 3600,
             "seconds one handler call may run its own code before the worker is killed (a "
             "crash); time spent waiting for a lock in the database does not count; 0 = no "
             "limit. Keep it under half of the unit's WatchdogSec"),
    CONF_INT("queue", "record_retention_days", conf_queue_t, record_retention_days, 0, "0", 0,
             36500,
             "delete this queue's dedup records (and crash counts) older than this many days, "
             "hourly; 0 = keep them forever. Must exceed the longest time a copy of a message "
             "can still arrive"),
    CONF_GROUP("queue", "declare", 0, "declare", "what to declare at startup"),
    CONF_RAW("queue", "settings", conf_queue_t, settings, 0,
             "group handed to the handler as is; idemd does not check it"),

    CONF_BOOL("declare", "enabled", conf_queue_t, declare, NR, "true",
              "declare the queue, its dead letter queue and bindings at startup; false: they "
              "must exist"),
    CONF_BOOL("declare", "durable", conf_queue_t, durable, NR, "true",
              "durable queue; false needs `dead_letter_queue = \"\"` and `quorum = false`"),
    CONF_BOOL("declare", "quorum", conf_queue_t, quorum, NR, "false",
              "quorum queue (`x-queue-type = \"quorum\"`, RabbitMQ 3.10+); its delay queues and "
              "dead letter queue are quorum queues too, and the delay hop back to it is "
              "at-least-once. false: classic queues, and a retried message whose delay expires "
              "while the queue is full, missing or unreachable is lost"),
    CONF_STRING("declare", "dead_letter_queue", conf_queue_t, dead_letter_queue, NR, NULL, 0, 255,
                "the queue name + `.dlq`",
                "queue idemd publishes rejected and exhausted messages to (with reason headers, "
                "confirmed before the original is acked); always declared; `\"\"`: none, "
                "rejected messages are basic.reject'ed (broker DLX or dropped)"),
    CONF_BOOL("declare", "dead_letter_policy", conf_queue_t, dead_letter_policy, NR, "false",
              "true: the queue dead-letters what is rejected into its dead letter queue by a "
              "broker policy (or arguments idemd did not declare), so idemd may reject there a "
              "delivery it cannot decode (headers nested deeper than 100 levels); idemd "
              "declares that itself for a new queue. false: unless idemd declared it so, such "
              "a delivery is requeued, and the queue stops at it"),
    CONF_ARGS("declare", "arguments", conf_queue_t, args, n_args, NR,
              "more x-arguments of queue.declare; each value a string or an integer. A length "
              "limit (`x-max-length`, `x-max-length-bytes`) needs `x-overflow = "
              "\"reject-publish\"`, and with classic queues `retry_delays_ms = [ ]`"),
    CONF_LIST("declare", "bindings", conf_queue_t, bindings, n_bindings, conf_binding_t, "binding",
              NR, 0, "none", "bindings to add: a list of groups"),

    CONF_STRING("binding", "exchange", conf_binding_t, exchange, NR | RQ, NULL, 1, 255, NULL,
                "exchange to bind the queue to (it must exist)"),
    CONF_STRING("binding", "routing_key", conf_binding_t, routing_key, NR, "", 0, 255, NULL,
                "binding key"),
    {.name = NULL},
};

#undef RQ
#undef NR
#undef SE

static int conf_check_root(conf_ctx_t *ctx, const config_setting_t *grp, void *base,
                           const char *path);
static int conf_check_broker(conf_ctx_t *ctx, const config_setting_t *grp, void *base,
                             const char *path);
static int conf_check_broker_tls(conf_ctx_t *ctx, const config_setting_t *grp, void *base,
                                 const char *path);
static int conf_check_database(conf_ctx_t *ctx, const config_setting_t *grp, void *base,
                               const char *path);
static int conf_check_database_tls(conf_ctx_t *ctx, const config_setting_t *grp, void *base,
                                   const char *path);
static int conf_check_metrics(conf_ctx_t *ctx, const config_setting_t *grp, void *base,
                              const char *path);
static int conf_check_queue(conf_ctx_t *ctx, const config_setting_t *grp, void *base,
                            const char *path);
static int conf_check_declare(conf_ctx_t *ctx, const config_setting_t *grp, void *base,
                              const char *path);

static const conf_section_t conf_sections[] = {
    {"root", "Top level", "The file holds these five settings and nothing else.", conf_check_root},
    {"daemon", "daemon", "Optional.", NULL},
    {"broker", "broker", "Optional: every setting has a default.", conf_check_broker},
    {"broker_tls", "broker.tls",
     "Optional; off by default. With `enabled = true` and `verify_peer = true`, `ca_file` is "
     "required.",
     conf_check_broker_tls},
    {"database", "database", "Required: `database` has no default.", conf_check_database},
    {"database_tls", "database.tls", "Optional; off by default.", conf_check_database_tls},
    {"metrics", "metrics", "Optional; off by default.", conf_check_metrics},
    {"queue", "queues.[N]", "One group per queue; queue names must be unique.", conf_check_queue},
    {"declare", "queues.[N].declare", "Optional.", conf_check_declare},
    {"binding", "queues.[N].declare.bindings.[N]", "One group per binding.", NULL},
    {NULL, NULL, NULL, NULL},
};

#define CONF_AT(base, off, type) ((type *)(void *)((char *)(base) + (off)))
#define CONF_CAT(base, off, type) ((const type *)(const void *)((const char *)(base) + (off)))

/* ---------------------------------------------------------------------- */
/* Errors and names */

/* The file that holds setting at (the main file for NULL), as a path that
 * can be opened; *line is its line, 0 when unknown. */
static void conf_source(const conf_ctx_t *ctx, const config_setting_t *at, char *buf, size_t len,
                        int *line)
{
    const char *file = at ? config_setting_source_file(at) : NULL;
    *line = at ? (int)config_setting_source_line(at) : 0;
    if (!file)
        file = ctx->path;
    /* libconfig names an @include file as written; say where it was found. */
    const char *dir = "", *sep = "";
    if (ctx->dir && file[0] != '/' && strcmp(file, ctx->path) != 0) {
        dir = ctx->dir;
        sep = dir[strlen(dir) - 1] == '/' ? "" : "/";
    }
    snprintf(buf, len, "%s%s%s", dir, sep, file);
}

static void conf_format(const conf_ctx_t *ctx, const config_setting_t *at, const char *setting,
                        const char *problem, char *out, size_t outlen)
{
    char file[PATH_MAX + 8];
    int line;
    conf_source(ctx, at, file, sizeof(file), &line);
    if (line > 0)
        snprintf(out, outlen, "%s:%d: %s: %s", file, line, setting, problem);
    else
        snprintf(out, outlen, "%s: %s: %s", file, setting, problem);
}

/* Write "FILE:LINE: SETTING: PROBLEM" into ctx->err; the line is that of
 * setting "at" (no line when at is the root). Returns -1. */
static int conf_error(conf_ctx_t *ctx, const config_setting_t *at, const char *setting,
                      const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static int conf_error(conf_ctx_t *ctx, const config_setting_t *at, const char *setting,
                      const char *fmt, ...)
{
    char problem[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(problem, sizeof(problem), fmt, ap);
    va_end(ap);
    if (!ctx->err || ctx->errlen == 0)
        return -1;
    conf_format(ctx, at, setting, problem, ctx->err, ctx->errlen);
    return -1;
}

/* Add "FILE:LINE: SETTING: PROBLEM" to the loaded conf's warnings. 0, or -1
 * (error set) when out of memory. */
static int conf_warn(conf_ctx_t *ctx, const config_setting_t *at, const char *setting,
                     const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static int conf_warn(conf_ctx_t *ctx, const config_setting_t *at, const char *setting,
                     const char *fmt, ...)
{
    char problem[1024], line[CONF_PATH_MAX + PATH_MAX + 1100];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(problem, sizeof(problem), fmt, ap);
    va_end(ap);
    conf_format(ctx, at, setting, problem, line, sizeof(line));
    conf_t *conf = ctx->conf;
    char **w = realloc(conf->warnings, (size_t)(conf->n_warnings + 1) * sizeof(*w));
    if (!w)
        return conf_error(ctx, at, setting, "out of memory");
    conf->warnings = w;
    if (!(w[conf->n_warnings] = strdup(line)))
        return conf_error(ctx, at, setting, "out of memory");
    conf->n_warnings++;
    return 0;
}

static const char *conf_type_name(const config_setting_t *s)
{
    switch (config_setting_type(s)) {
    case CONFIG_TYPE_GROUP:
        return "a group";
    case CONFIG_TYPE_INT:
    case CONFIG_TYPE_INT64:
        return "an integer";
    case CONFIG_TYPE_FLOAT:
        return "a float";
    case CONFIG_TYPE_STRING:
        return "a string";
    case CONFIG_TYPE_BOOL:
        return "a boolean";
    case CONFIG_TYPE_ARRAY:
        return "an array";
    case CONFIG_TYPE_LIST:
        return "a list";
    }
    return "of unknown type";
}

static bool conf_is_int(const config_setting_t *s)
{
    int t = config_setting_type(s);
    return t == CONFIG_TYPE_INT || t == CONFIG_TYPE_INT64;
}

/* Setting paths in libconfig's syntax: "queues.[0].declare.bindings.[1]";
 * an absurdly deep one is cut and ends in "...". */
static void conf_path_mark_cut(char *buf, int n)
{
    if (n < 0 || n >= CONF_PATH_MAX)
        memcpy(buf + CONF_PATH_MAX - 4, "...", 4);
}

static void conf_path(char *buf, const char *parent, const char *name)
{
    int n;
    if (parent[0])
        n = snprintf(buf, CONF_PATH_MAX, "%s.%s", parent, name);
    else
        n = snprintf(buf, CONF_PATH_MAX, "%s", name);
    conf_path_mark_cut(buf, n);
}

static void conf_path_index(char *buf, const char *parent, int i)
{
    conf_path_mark_cut(buf, snprintf(buf, CONF_PATH_MAX, "%s.[%d]", parent, i));
}

static const conf_def_t *conf_find(const char *section, const char *name)
{
    for (const conf_def_t *d = conf_defs; d->name; d++)
        if (strcmp(d->section, section) == 0 && strcmp(d->name, name) == 0)
            return d;
    return NULL;
}

static const conf_section_t *conf_section(const char *name)
{
    for (const conf_section_t *s = conf_sections; s->name; s++)
        if (strcmp(s->name, name) == 0)
            return s;
    return NULL;
}

/* Edit distance, capped: enough to suggest "host" for "hots". */
static int conf_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    int row[65];
    if (la > 64 || lb > 64)
        return 99;
    for (size_t j = 0; j <= lb; j++)
        row[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int up = row[j];
            int best = diag + (a[i - 1] != b[j - 1]);
            if (row[j] + 1 < best)
                best = row[j] + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

static const char *conf_suggest(const char *section, const char *name)
{
    const char *best = NULL;
    int best_d = 3; /* at most 2 edits */
    for (const conf_def_t *d = conf_defs; d->name; d++) {
        if (strcmp(d->section, section) != 0)
            continue;
        int dist = conf_distance(name, d->name);
        if (dist < best_d) {
            best_d = dist;
            best = d->name;
        }
    }
    return best;
}

/* ---------------------------------------------------------------------- */
/* Loading one setting */

static int conf_set_string(conf_ctx_t *ctx, const config_setting_t *at, const char *sp,
                           char **field, const char *value)
{
    char *copy = NULL;
    if (value && !(copy = strdup(value)))
        return conf_error(ctx, at, sp, "out of memory");
    free(*field);
    *field = copy;
    return 0;
}

static int conf_check_string(conf_ctx_t *ctx, const conf_def_t *d, const config_setting_t *s,
                             const char *sp, const char *v)
{
    size_t len = strlen(v);
    if (d->min > 0 && len < (size_t)d->min) {
        if (d->min == 1)
            return conf_error(ctx, s, sp, "must not be empty");
        return conf_error(ctx, s, sp, "must be at least %lld bytes long (got %zu)", d->min, len);
    }
    if (d->max > 0 && len > (size_t)d->max)
        return conf_error(ctx, s, sp, "must be at most %lld bytes long (got %zu)", d->max, len);
    if (d->flags & CONF_F_IDENT) {
        for (const char *p = v; *p; p++) {
            bool ok = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                      (*p >= '0' && *p <= '9') || *p == '_';
            if (!ok)
                return conf_error(ctx, s, sp,
                                  "may contain only letters, digits and '_' (got \"%s\")", v);
        }
    }
    return 0;
}

/* A file named by a setting must open for reading now, so that a typo or a
 * permission problem shows at startup and not at the first connection. */
static int conf_check_readable(conf_ctx_t *ctx, const config_setting_t *s, const char *sp,
                               const char *file)
{
    struct stat st;
    int fd = open(file, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0)
        return conf_error(ctx, s, sp, "cannot open \"%s\": %s", file, strerror(errno));
    int rc = fstat(fd, &st);
    close(fd);
    if (rc == 0 && S_ISDIR(st.st_mode))
        return conf_error(ctx, s, sp, "\"%s\" is a directory", file);
    return 0;
}

static int conf_get_int(conf_ctx_t *ctx, const config_setting_t *s, const char *sp, long long min,
                        long long max, int *out)
{
    if (!conf_is_int(s))
        return conf_error(ctx, s, sp, "must be an integer (got %s)", conf_type_name(s));
    long long v = config_setting_get_int64(s);
    if (v < min || v > max)
        return conf_error(ctx, s, sp, "must be between %lld and %lld (got %lld)", min, max, v);
    *out = (int)v;
    return 0;
}

static int conf_enum_lookup(const conf_enum_t *e, const char *name)
{
    for (; e->name; e++)
        if (strcasecmp(e->name, name) == 0)
            return e->value;
    return -1;
}

static const char *conf_enum_name(const conf_enum_t *e, int value)
{
    for (; e->name; e++)
        if (e->value == value)
            return e->name;
    return "?";
}

static int conf_enum_error(conf_ctx_t *ctx, const conf_def_t *d, const config_setting_t *s,
                           const char *sp)
{
    char names[256] = "";
    size_t used = 0;
    for (const conf_enum_t *e = d->enums; e->name; e++) {
        int n = snprintf(names + used, sizeof(names) - used, "%s%s", used ? ", " : "", e->name);
        if (n < 0 || (size_t)n >= sizeof(names) - used)
            break;
        used += (size_t)n;
    }
    if (config_setting_type(s) == CONFIG_TYPE_STRING)
        return conf_error(ctx, s, sp, "must be one of %s (got \"%s\")", names,
                          config_setting_get_string(s));
    return conf_error(ctx, s, sp, "must be one of %s (got %s)", names, conf_type_name(s));
}

/* What a secret file holds; the kinds differ in what they ask of the file. */
typedef enum conf_secret_kind {
    CONF_SECRET_PASSWORD, /* a mode every user may read is warned about */
    CONF_SECRET_TOKEN,    /* metrics.token_file: see conf_check_token */
} conf_secret_kind_t;

#define CONF_TOKEN_MIN 16 /* bytes of a bearer token at least */

/*
 * A bearer token must stay the service's (and its readers'): a mode that lets others read or
 * use it, or the group change it, is refused, not warned about, since the token is the only
 * thing between the listener and anyone who can reach it. A group may read it (root:idemd
 * 0640), as for password files. It must be long enough not to be guessed, and fit in an
 * Authorization header as RFC 6750's b64token: letters, digits, -._~+/ then '=' padding.
 */
static int conf_check_token(conf_ctx_t *ctx, const config_setting_t *s, const char *sp,
                            const char *file, const struct stat *st, const char *tok, size_t len)
{
    size_t i = 0;
    if (st->st_mode & 0027)
        return conf_error(ctx, s, sp,
                          "\"%s\" holds the metrics bearer token and %s (mode %04o): chmod g-w,o= "
                          "it",
                          file,
                          (st->st_mode & 0007) ? "others may use it" : "its group may change it",
                          (unsigned)(st->st_mode & 07777));
    if (len < CONF_TOKEN_MIN)
        return conf_error(ctx, s, sp,
                          "\"%s\" holds %zu bytes: a bearer token needs at least %d (e.g. "
                          "`openssl rand -hex 32`)",
                          file, len, CONF_TOKEN_MIN);
    while (i < len && (((tok[i] | 0x20) >= 'a' && (tok[i] | 0x20) <= 'z') ||
                       (tok[i] >= '0' && tok[i] <= '9') || strchr("-._~+/", tok[i])))
        i++;
    while (i < len && tok[i] == '=')
        i++;
    if (i < len)
        return conf_error(ctx, s, sp,
                          "\"%s\": byte %zu is not allowed in a bearer token (letters, digits, "
                          "-._~+/, then = at the end)",
                          file, i + 1);
    return 0;
}

/* Read a secret from a file: the whole content, trailing CR/LF removed.
 * On success *field owns a new string (the old one is freed). */
static int conf_read_secret(conf_ctx_t *ctx, const config_setting_t *s, const char *sp,
                            const char *file, conf_secret_kind_t kind, char **field)
{
    char buf[CONF_SECRET_MAX + 1];
    size_t len = 0;
    int rc = -1;
    struct stat st;
    int fd = open(file, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0)
        return conf_error(ctx, s, sp, "cannot open \"%s\": %s", file, strerror(errno));
    if (fstat(fd, &st) != 0) {
        conf_error(ctx, s, sp, "cannot stat \"%s\": %s", file, strerror(errno));
        goto fail;
    }
    for (;;) {
        ssize_t n = read(fd, buf + len, sizeof(buf) - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            conf_error(ctx, s, sp, "cannot read \"%s\": %s", file, strerror(errno));
            goto fail;
        }
        if (n == 0)
            break;
        len += (size_t)n;
        if (len == sizeof(buf)) {
            conf_error(ctx, s, sp, "\"%s\" is larger than %d bytes", file, CONF_SECRET_MAX);
            goto fail;
        }
    }
    while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == '\r'))
        len--;
    if (len == 0) {
        conf_error(ctx, s, sp, "\"%s\" is empty", file);
        goto fail;
    }
    if (memchr(buf, '\0', len)) {
        conf_error(ctx, s, sp, "\"%s\" contains a NUL byte", file);
        goto fail;
    }
    buf[len] = '\0';
    if (kind == CONF_SECRET_TOKEN && conf_check_token(ctx, s, sp, file, &st, buf, len) < 0)
        goto fail;
    rc = conf_set_string(ctx, s, sp, field, buf);
    /* A group may be how the service account reads it (root:idemd 0640); others never. */
    if (rc == 0 && kind == CONF_SECRET_PASSWORD && (st.st_mode & S_IROTH))
        rc = conf_warn(ctx, s, sp,
                       "\"%s\" holds a password and is readable by every user (mode %04o): "
                       "chmod o= it",
                       file, (unsigned)(st.st_mode & 07777));
fail:
    explicit_bzero(buf, sizeof(buf));
    close(fd);
    return rc;
}

static int conf_load_section(conf_ctx_t *ctx, const char *section, const config_setting_t *grp,
                             const config_setting_t *anchor, void *base, const char *path);

/* An array's default is written as in the file, "[ 1000, 10000 ]"; none: empty. */
static int conf_default_int_array(conf_ctx_t *ctx, const conf_def_t *d,
                                  const config_setting_t *anchor, void *base, const char *sp)
{
    int n = 0;
    const char *p;
    if (!d->def)
        return 0;
    for (p = d->def; *p; p++)
        n += *p >= '0' && *p <= '9' && (p == d->def || p[-1] < '0' || p[-1] > '9');
    if (n == 0)
        return 0;
    int *arr = calloc((size_t)n, sizeof(int));
    if (!arr)
        return conf_error(ctx, anchor, sp, "out of memory");
    p = d->def;
    for (int i = 0; i < n; i++) {
        p += strcspn(p, "0123456789");
        arr[i] = (int)strtol(p, (char **)&p, 10);
    }
    *CONF_AT(base, d->off, int *) = arr;
    *CONF_AT(base, d->off_n, int) = n;
    return 0;
}

static int conf_load_default(conf_ctx_t *ctx, const conf_def_t *d, const config_setting_t *anchor,
                             void *base, const char *sp)
{
    switch (d->type) {
    case CONF_T_STRING:
        return conf_set_string(ctx, anchor, sp, CONF_AT(base, d->off, char *), d->def);
    case CONF_T_INT:
        *CONF_AT(base, d->off, int) = d->def ? atoi(d->def) : 0;
        return 0;
    case CONF_T_BOOL:
        *CONF_AT(base, d->off, bool) = d->def && strcmp(d->def, "true") == 0;
        return 0;
    case CONF_T_ENUM:
        *CONF_AT(base, d->off, int) = d->def ? conf_enum_lookup(d->enums, d->def) : 0;
        return 0;
    case CONF_T_GROUP:
        /* An absent group: its settings take their defaults; a required one
         * inside is reported at the line of the enclosing group. */
        return conf_load_section(ctx, d->sub, NULL, anchor, CONF_AT(base, d->off, char), sp);
    case CONF_T_INT_ARRAY:
        return conf_default_int_array(ctx, d, anchor, base, sp);
    case CONF_T_FILE:      /* the peer's default stands */
    case CONF_T_STR_ARRAY: /* empty */
    case CONF_T_ARGS:      /* empty */
    case CONF_T_LIST:      /* empty */
    case CONF_T_RAW:       /* NULL */
        return 0;
    }
    return 0;
}

static int conf_load_int_array(conf_ctx_t *ctx, const conf_def_t *d, const config_setting_t *s,
                               void *base, const char *sp)
{
    int t = config_setting_type(s);
    if (t != CONFIG_TYPE_ARRAY && t != CONFIG_TYPE_LIST)
        return conf_error(ctx, s, sp, "must be an array of integers like [ 1000, 10000 ] (got %s)",
                          conf_type_name(s));
    int n = config_setting_length(s);
    int **arr = CONF_AT(base, d->off, int *);
    if (n == 0)
        return 0;
    if (!(*arr = calloc((size_t)n, sizeof(int))))
        return conf_error(ctx, s, sp, "out of memory");
    *CONF_AT(base, d->off_n, int) = n;
    for (int i = 0; i < n; i++) {
        char ep[CONF_PATH_MAX];
        conf_path_index(ep, sp, i);
        if (conf_get_int(ctx, config_setting_get_elem(s, (unsigned)i), ep, d->min, d->max,
                         &(*arr)[i]) < 0)
            return -1;
    }
    return 0;
}

static int conf_load_str_array(conf_ctx_t *ctx, const conf_def_t *d, const config_setting_t *s,
                               void *base, const char *sp)
{
    int t = config_setting_type(s);
    if (t != CONFIG_TYPE_ARRAY && t != CONFIG_TYPE_LIST)
        return conf_error(ctx, s, sp, "must be an array of strings like [ \"a\", \"b\" ] (got %s)",
                          conf_type_name(s));
    int n = config_setting_length(s);
    char ***arr = CONF_AT(base, d->off, char **);
    if (n == 0)
        return 0;
    if (!(*arr = calloc((size_t)n, sizeof(char *))))
        return conf_error(ctx, s, sp, "out of memory");
    *CONF_AT(base, d->off_n, int) = n;
    for (int i = 0; i < n; i++) {
        const config_setting_t *e = config_setting_get_elem(s, (unsigned)i);
        char ep[CONF_PATH_MAX];
        conf_path_index(ep, sp, i);
        if (config_setting_type(e) != CONFIG_TYPE_STRING)
            return conf_error(ctx, e, ep, "must be a string (got %s)", conf_type_name(e));
        if (conf_check_string(ctx, d, e, ep, config_setting_get_string(e)) < 0 ||
            conf_set_string(ctx, e, ep, &(*arr)[i], config_setting_get_string(e)) < 0)
            return -1;
    }
    return 0;
}

static int conf_load_args(conf_ctx_t *ctx, const conf_def_t *d, const config_setting_t *s,
                          void *base, const char *sp)
{
    if (config_setting_type(s) != CONFIG_TYPE_GROUP)
        return conf_error(ctx, s, sp, "must be a group { name = value; ... } (got %s)",
                          conf_type_name(s));
    int n = config_setting_length(s);
    conf_arg_t **arr = CONF_AT(base, d->off, conf_arg_t *);
    if (n == 0)
        return 0;
    if (!(*arr = calloc((size_t)n, sizeof(conf_arg_t))))
        return conf_error(ctx, s, sp, "out of memory");
    *CONF_AT(base, d->off_n, int) = n;
    for (int i = 0; i < n; i++) {
        const config_setting_t *e = config_setting_get_elem(s, (unsigned)i);
        conf_arg_t *a = &(*arr)[i];
        char ep[CONF_PATH_MAX];
        conf_path(ep, sp, config_setting_name(e));
        if (conf_set_string(ctx, e, ep, &a->key, config_setting_name(e)) < 0)
            return -1;
        if (conf_is_int(e)) {
            a->is_int = true;
            a->ival = config_setting_get_int64(e);
        } else if (config_setting_type(e) == CONFIG_TYPE_STRING) {
            if (conf_set_string(ctx, e, ep, &a->sval, config_setting_get_string(e)) < 0)
                return -1;
        } else {
            return conf_error(ctx, e, ep, "must be a string or an integer (got %s)",
                              conf_type_name(e));
        }
    }
    return 0;
}

static int conf_load_list(conf_ctx_t *ctx, const conf_def_t *d, const config_setting_t *s,
                          void *base, const char *sp)
{
    if (config_setting_type(s) != CONFIG_TYPE_LIST)
        return conf_error(ctx, s, sp, "must be a list ( { ... }, ... ) (got %s)",
                          conf_type_name(s));
    int n = config_setting_length(s);
    if (n < d->min)
        return conf_error(ctx, s, sp, "must hold at least %lld group%s", d->min,
                          d->min == 1 ? "" : "s");
    if (n == 0)
        return 0;
    char **arr = CONF_AT(base, d->off, char *);
    if (!(*arr = calloc((size_t)n, d->elem_size)))
        return conf_error(ctx, s, sp, "out of memory");
    *CONF_AT(base, d->off_n, int) = n;
    for (int i = 0; i < n; i++) {
        const config_setting_t *e = config_setting_get_elem(s, (unsigned)i);
        char ep[CONF_PATH_MAX];
        conf_path_index(ep, sp, i);
        if (config_setting_type(e) != CONFIG_TYPE_GROUP)
            return conf_error(ctx, e, ep, "must be a group { ... } (got %s)", conf_type_name(e));
        if (conf_load_section(ctx, d->sub, e, e, *arr + (size_t)i * d->elem_size, ep) < 0)
            return -1;
    }
    return 0;
}

/* Load setting d from s (NULL: absent) into base. parent is the group that
 * holds (or should hold) it, for the line of "required" errors. */
static int conf_load_one(conf_ctx_t *ctx, const conf_def_t *d, const config_setting_t *s,
                         const config_setting_t *parent, void *base, const char *sp)
{
    int v = 0;

    if (!s) {
        if (d->flags & CONF_F_REQUIRED)
            return conf_error(ctx, parent, sp, "required setting is missing");
        return conf_load_default(ctx, d, parent, base, sp);
    }

    switch (d->type) {
    case CONF_T_STRING:
        if (config_setting_type(s) != CONFIG_TYPE_STRING)
            return conf_error(ctx, s, sp, "must be a string (got %s)", conf_type_name(s));
        if (conf_check_string(ctx, d, s, sp, config_setting_get_string(s)) < 0)
            return -1;
        if ((d->flags & CONF_F_READABLE) &&
            conf_check_readable(ctx, s, sp, config_setting_get_string(s)) < 0)
            return -1;
        return conf_set_string(ctx, s, sp, CONF_AT(base, d->off, char *),
                               config_setting_get_string(s));
    case CONF_T_INT:
        if (conf_get_int(ctx, s, sp, d->min, d->max, &v) < 0)
            return -1;
        *CONF_AT(base, d->off, int) = v;
        return 0;
    case CONF_T_BOOL:
        if (config_setting_type(s) != CONFIG_TYPE_BOOL)
            return conf_error(ctx, s, sp, "must be true or false (got %s)", conf_type_name(s));
        *CONF_AT(base, d->off, bool) = config_setting_get_bool(s) != 0;
        return 0;
    case CONF_T_ENUM:
        if (config_setting_type(s) != CONFIG_TYPE_STRING ||
            (v = conf_enum_lookup(d->enums, config_setting_get_string(s))) < 0)
            return conf_enum_error(ctx, d, s, sp);
        *CONF_AT(base, d->off, int) = v;
        return 0;
    case CONF_T_INT_ARRAY:
        return conf_load_int_array(ctx, d, s, base, sp);
    case CONF_T_STR_ARRAY:
        return conf_load_str_array(ctx, d, s, base, sp);
    case CONF_T_FILE: {
        const config_setting_t *peer = config_setting_get_member(parent, d->sub);
        if (peer)
            return conf_error(ctx, s, sp, "cannot be used together with %s (line %d)", d->sub,
                              (int)config_setting_source_line(peer));
        if (config_setting_type(s) != CONFIG_TYPE_STRING)
            return conf_error(ctx, s, sp, "must be a string (got %s)", conf_type_name(s));
        const char *file = config_setting_get_string(s);
        if (!file[0])
            return conf_error(ctx, s, sp, "must not be empty");
        return conf_read_secret(ctx, s, sp, file, CONF_SECRET_PASSWORD,
                                CONF_AT(base, d->off, char *));
    }
    case CONF_T_ARGS:
        return conf_load_args(ctx, d, s, base, sp);
    case CONF_T_GROUP:
        if (config_setting_type(s) != CONFIG_TYPE_GROUP)
            return conf_error(ctx, s, sp, "must be a group { ... } (got %s)", conf_type_name(s));
        return conf_load_section(ctx, d->sub, s, s, CONF_AT(base, d->off, char), sp);
    case CONF_T_LIST:
        return conf_load_list(ctx, d, s, base, sp);
    case CONF_T_RAW:
        if (config_setting_type(s) != CONFIG_TYPE_GROUP)
            return conf_error(ctx, s, sp, "must be a group { ... } (got %s)", conf_type_name(s));
        *CONF_AT(base, d->off, const config_setting_t *) = s;
        return 0;
    }
    return 0;
}

/* Load the settings of one section from grp (NULL: absent, all defaults)
 * into base; anchor gives the line for errors about missing settings. */
static int conf_load_section(conf_ctx_t *ctx, const char *section, const config_setting_t *grp,
                             const config_setting_t *anchor, void *base, const char *path)
{
    char sp[CONF_PATH_MAX];

    /* A misspelt name would otherwise silently leave its default in force. */
    if (grp) {
        int n = config_setting_length(grp);
        for (int i = 0; i < n; i++) {
            const config_setting_t *s = config_setting_get_elem(grp, (unsigned)i);
            const char *name = config_setting_name(s);
            if (conf_find(section, name))
                continue;
            conf_path(sp, path, name);
            const char *hint = conf_suggest(section, name);
            if (hint)
                return conf_error(ctx, s, sp, "unknown setting (did you mean \"%s\"?)", hint);
            return conf_error(ctx, s, sp, "unknown setting");
        }
    }

    for (const conf_def_t *d = conf_defs; d->name; d++) {
        if (strcmp(d->section, section) != 0)
            continue;
        conf_path(sp, path, d->name);
        const config_setting_t *s = grp ? config_setting_get_member(grp, d->name) : NULL;
        if (conf_load_one(ctx, d, s, grp ? grp : anchor, base, sp) < 0)
            return -1;
    }

    const conf_section_t *sec = conf_section(section);
    if (sec && sec->check)
        return sec->check(ctx, grp ? grp : anchor, base, path);
    return 0;
}

/* ---------------------------------------------------------------------- */
/* Rules across settings */

static int conf_check_root(conf_ctx_t *ctx, const config_setting_t *grp, void *base,
                           const char *path)
{
    conf_t *conf = base;
    const config_setting_t *list = config_setting_get_member(grp, "queues");
    (void)path;

    for (int i = 1; i < conf->n_queues; i++) {
        for (int j = 0; j < i; j++) {
            if (strcmp(conf->queues[i].name, conf->queues[j].name) != 0)
                continue;
            char sp[CONF_PATH_MAX];
            snprintf(sp, sizeof(sp), "queues.[%d].name", i);
            const config_setting_t *s = config_setting_get_elem(list, (unsigned)i);
            return conf_error(ctx, config_setting_get_member(s, "name"), sp,
                              "duplicate queue name \"%s\" (first at line %d)",
                              conf->queues[i].name, conf->queues[j].line);
        }
    }
    return 0;
}

/*
 * A relative handler path is taken from the directory of the file that
 * holds the setting, made absolute (the working directory of a service is
 * nobody's choice), so that logs and checks name the file that is loaded.
 */
static int conf_absolute_handler(conf_ctx_t *ctx, const config_setting_t *grp, const char *path,
                                 conf_queue_t *q)
{
    const config_setting_t *at = config_setting_get_member(grp, "handler");
    char sp[CONF_PATH_MAX], file[PATH_MAX + 8], cwd[PATH_MAX], full[3 * PATH_MAX];
    int line;

    if (q->handler == NULL || q->handler[0] == '/')
        return 0;
    conf_path(sp, path, "handler");
    conf_source(ctx, at, file, sizeof(file), &line);
    char *slash = strrchr(file, '/');
    const char *dir = ".";
    if (slash == file)
        dir = "/";
    else if (slash) {
        *slash = '\0';
        dir = file;
    }
    if (dir[0] == '/')
        snprintf(full, sizeof(full), "%s%s%s", dir, strcmp(dir, "/") ? "/" : "", q->handler);
    else if (getcwd(cwd, sizeof(cwd)) == NULL)
        return conf_error(ctx, at, sp, "cannot resolve the relative path \"%s\": getcwd: %s",
                          q->handler, strerror(errno));
    else if (strcmp(dir, ".") == 0)
        snprintf(full, sizeof(full), "%s%s%s", cwd, strcmp(cwd, "/") ? "/" : "", q->handler);
    else
        snprintf(full, sizeof(full), "%s%s%s/%s", cwd, strcmp(cwd, "/") ? "/" : "", dir,
                 q->handler);
    if (strlen(full) >= PATH_MAX)
        return conf_error(ctx, at, sp,
                          "\"%s\" taken from the config file's directory is %zu "
                          "bytes long, more than %d",
                          q->handler, strlen(full), PATH_MAX - 1);
    return conf_set_string(ctx, at, sp, &q->handler, full);
}

/* metrics.token_file: the token read (conf_read_secret checks it); metrics.listen: a numeric
 * address and a port, parsed for the supervisor. */
static int conf_check_metrics(conf_ctx_t *ctx, const config_setting_t *grp, void *base,
                              const char *path)
{
    conf_metrics_t *m = base;
    char host[70], sp[CONF_PATH_MAX];
    const char *colon, *h = m->listen;
    size_t hlen;
    char *end;

    if (m->token_file) {
        conf_path(sp, path, "token_file");
        if (conf_read_secret(ctx, config_setting_get_member(grp, "token_file"), sp, m->token_file,
                             CONF_SECRET_TOKEN, &m->token) < 0)
            return -1;
    }
    if (m->listen == NULL)
        return 0;
    conf_path(sp, path, "listen");
    const config_setting_t *at = config_setting_get_member(grp, "listen");
    colon = strrchr(m->listen, ':');
    if (colon == NULL)
        return conf_error(ctx, at, sp, "\"%s\" has no port: write \"ADDR:PORT\"", m->listen);
    hlen = (size_t)(colon - m->listen);
    if (h[0] == '[') {
        if (hlen < 2 || h[hlen - 1] != ']')
            return conf_error(ctx, at, sp, "\"%s\": an IPv6 address is written \"[ADDR]:PORT\"",
                              m->listen);
        h++;
        hlen -= 2;
    }
    snprintf(host, sizeof(host), "%.*s", (int)hlen, h);
    errno = 0;
    long port = strtol(colon + 1, &end, 10);
    if (colon[1] == '\0' || *end || errno || port < 1 || port > 65535)
        return conf_error(ctx, at, sp, "\"%s\": the port must be a number in 1..65535", m->listen);
    memset(&m->addr, 0, sizeof(m->addr));
    struct sockaddr_in *v4 = (struct sockaddr_in *)(void *)&m->addr;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)(void *)&m->addr;
    if (m->listen[0] != '[' && inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)port);
    } else if (m->listen[0] == '[' && inet_pton(AF_INET6, host, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((uint16_t)port);
    } else {
        return conf_error(ctx, at, sp,
                          "\"%s\": the address must be numeric, e.g. \"127.0.0.1:9187\" or "
                          "\"[::1]:9187\"",
                          m->listen);
    }
    return 0;
}

static int conf_check_queue(conf_ctx_t *ctx, const config_setting_t *grp, void *base,
                            const char *path)
{
    conf_queue_t *q = base;
    char sp[CONF_PATH_MAX];

    q->line = (int)config_setting_source_line(grp);
    if (conf_absolute_handler(ctx, grp, path, q) != 0)
        return -1;
    /* RabbitMQ refuses longer queue names: a worker would fail to declare the tier for ever. */
    for (int i = 0; i < q->n_retry_delays; i++) {
        char tier[300];
        int n = snprintf(tier, sizeof(tier), "%s.retry.%d", q->name, q->retry_delays_ms[i]);
        if (n <= 255)
            continue;
        const config_setting_t *at = config_setting_get_member(grp, "retry_delays_ms");
        conf_path(sp, path, at ? "retry_delays_ms" : "name");
        return conf_error(ctx, at ? at : config_setting_get_member(grp, "name"), sp,
                          "the delay queue \"%s.retry.%d\" would be %d bytes long, more than "
                          "RabbitMQ's 255: shorten the queue name or set retry_delays_ms = [ ]",
                          q->name, q->retry_delays_ms[i], n);
    }
    conf_path(sp, path, "consumer");
    if (!q->consumer) {
        if (strlen(q->name) > 128)
            return conf_error(ctx, config_setting_get_member(grp, "name"), sp,
                              "the default (the queue name) is longer than 128 bytes: set it");
        return conf_set_string(ctx, grp, sp, &q->consumer, q->name);
    }
    return 0;
}

/* A password written in the config file is as secret as the file: say so
 * when group or others may read the file that holds it. */
static int conf_check_inline_password(conf_ctx_t *ctx, const config_setting_t *grp,
                                      const char *path)
{
    const config_setting_t *s = grp ? config_setting_get_member(grp, "password") : NULL;
    char file[PATH_MAX + 8], sp[CONF_PATH_MAX];
    struct stat st;
    int line;

    if (!s)
        return 0;
    conf_source(ctx, s, file, sizeof(file), &line);
    if (stat(file, &st) != 0 || (st.st_mode & 077) == 0)
        return 0;
    conf_path(sp, path, "password");
    return conf_warn(ctx, s, sp,
                     "\"%s\" holds a password and is readable by %s (mode %04o): use "
                     "password_file, or chmod go= the file",
                     file, (st.st_mode & 007) ? "others" : "its group",
                     (unsigned)(st.st_mode & 07777));
}

/* A private key file readable by every user is worth a warning (a group,
 * like Debian's ssl-cert, is a common and deliberate setup). */
static int conf_check_key_mode(conf_ctx_t *ctx, const config_setting_t *grp, const char *path,
                               const char *key_file)
{
    char sp[CONF_PATH_MAX];
    struct stat st;
    if (!key_file || stat(key_file, &st) != 0 || (st.st_mode & S_IROTH) == 0)
        return 0;
    conf_path(sp, path, "key_file");
    return conf_warn(ctx, config_setting_get_member(grp, "key_file"), sp,
                     "\"%s\" is readable by every user (mode %04o): chmod o= it", key_file,
                     (unsigned)(st.st_mode & 07777));
}

/* cert_file and key_file come as a pair. */
static int conf_check_key_pair(conf_ctx_t *ctx, const config_setting_t *grp, const char *path,
                               const char *cert_file, const char *key_file)
{
    char sp[CONF_PATH_MAX];
    if (cert_file && !key_file) {
        conf_path(sp, path, "cert_file");
        return conf_error(ctx, config_setting_get_member(grp, "cert_file"), sp,
                          "needs key_file too");
    }
    if (key_file && !cert_file) {
        conf_path(sp, path, "key_file");
        return conf_error(ctx, config_setting_get_member(grp, "key_file"), sp,
                          "needs cert_file too");
    }
    return 0;
}

/* Warn that a TLS check is turned off, at the line of setting name (or of the group). */
static int conf_warn_check_off(conf_ctx_t *ctx, const config_setting_t *grp,
                               const config_setting_t *own, const char *path, const char *name,
                               const char *why)
{
    char sp[CONF_PATH_MAX];
    conf_path(sp, path, name);
    return conf_warn(ctx, own ? config_setting_get_member(own, name) : grp, sp, "%s", why);
}

/* grp is the group itself, or its parent when the group is absent. */
static const config_setting_t *conf_own_group(const config_setting_t *grp, const char *name)
{
    const char *gname = grp ? config_setting_name(grp) : NULL;
    return gname && strcmp(gname, name) == 0 ? grp : NULL;
}

/*
 * True for a host that never leaves this machine: "localhost" (and names
 * under .localhost), 127.0.0.0/8, ::1 and ::ffff:127.0.0.0/104. Names are
 * not resolved: any other name counts as remote.
 */
static bool conf_host_is_loopback(const char *host)
{
    struct in_addr a4;
    struct in6_addr a6;
    size_t n = host ? strlen(host) : 0;
    if (n == 0)
        return false;
    if (strcasecmp(host, "localhost") == 0 ||
        (n > 10 && strcasecmp(host + n - 10, ".localhost") == 0))
        return true;
    if (inet_pton(AF_INET, host, &a4) == 1)
        return (ntohl(a4.s_addr) >> 24) == 127;
    if (inet_pton(AF_INET6, host, &a6) == 1)
        return IN6_IS_ADDR_LOOPBACK(&a6) || (IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127);
    return false;
}

/*
 * Warn that a connection to a remote host would be plain text (at host's
 * line, or the group's): host, or each entry of hosts[0..n-1] when set.
 */
static int conf_warn_plain(conf_ctx_t *ctx, const config_setting_t *own, const char *path,
                           const char *host, char *const *hosts, int n, const char *what)
{
    char sp[CONF_PATH_MAX], hp[CONF_PATH_MAX], name[256];
    int port;
    if (n > 0) {
        const config_setting_t *list = own ? config_setting_get_member(own, "hosts") : NULL;
        for (int i = 0; i < n; i++) {
            if (conf_endpoint(hosts[i], 1, name, sizeof(name), &port) != 0 ||
                conf_host_is_loopback(name))
                continue;
            conf_path(hp, path, "hosts");
            conf_path_index(sp, hp, i);
            if (conf_warn(ctx, list ? config_setting_get_elem(list, (unsigned)i) : own, sp,
                          "\"%s\" is not a loopback address and tls.enabled is false: %s cross "
                          "the network in plain text",
                          name, what) < 0)
                return -1;
        }
        return 0;
    }
    const config_setting_t *at = own ? config_setting_get_member(own, "host") : NULL;
    if (conf_host_is_loopback(host))
        return 0;
    conf_path(sp, path, "host");
    return conf_warn(ctx, at ? at : own, sp,
                     "\"%s\" is not a loopback address and tls.enabled is false: %s cross the "
                     "network in plain text",
                     host, what);
}

/*
 * TLS is never off by accident: with tls.enabled false (or absent), a tls
 * setting that only means something with TLS on - a file, or a check turned
 * off - is an error at its line. Settings left at their defaults (the
 * sample config's verify_* = true) are fine.
 */
static int conf_check_tls_off(conf_ctx_t *ctx, const config_setting_t *own, const char *path)
{
    char sp[CONF_PATH_MAX];
    const config_setting_t *en = own ? config_setting_get_member(own, "enabled") : NULL;
    int n = own ? config_setting_length(own) : 0;
    for (int i = 0; i < n; i++) {
        const config_setting_t *m = config_setting_get_elem(own, (unsigned)i);
        const char *name = config_setting_name(m);
        if (!name || strcmp(name, "enabled") == 0)
            continue;
        if (config_setting_type(m) == CONFIG_TYPE_BOOL && config_setting_get_bool(m))
            continue;
        conf_path(sp, path, name);
        return conf_error(ctx, m, sp,
                          "set, but tls.enabled is %s: the connection would be plain text; set "
                          "tls.enabled = true, or remove the setting",
                          en ? "false" : "not set (default false)");
    }
    return 0;
}

int conf_endpoint(const char *spec, int def_port, char *host, size_t hostlen, int *port)
{
    const char *h = spec, *colon, *end;
    size_t n;

    if (spec[0] == '[') { /* "[::1]:5672" */
        h = spec + 1;
        if ((end = strchr(h, ']')) == NULL || (end[1] != '\0' && end[1] != ':'))
            return -1;
        colon = end[1] == ':' ? end + 1 : NULL;
    } else {
        colon = strchr(spec, ':');
        if (colon && strchr(colon + 1, ':'))
            return -1; /* a bare IPv6 address: brackets tell its port apart */
        end = colon ? colon : spec + strlen(spec);
    }
    n = (size_t)(end - h);
    if (n == 0 || n >= hostlen)
        return -1;
    *port = def_port;
    if (colon) {
        char *ep;
        errno = 0;
        long v = strtol(colon + 1, &ep, 10);
        if (colon[1] < '0' || colon[1] > '9' || *ep || errno || v < 1 || v > 65535)
            return -1;
        *port = (int)v;
    }
    memcpy(host, h, n);
    host[n] = '\0';
    return 0;
}

/*
 * Rules for a hosts list in group own (NULL: absent): each element an
 * endpoint, and none of the settings it excludes (excl, NULL-terminated)
 * beside it. 0, or -1 with the error set.
 */
static int conf_check_hosts(conf_ctx_t *ctx, const config_setting_t *own, const char *path,
                            char *const *hosts, int n, const char *const *excl)
{
    const config_setting_t *list = own ? config_setting_get_member(own, "hosts") : NULL;
    char hp[CONF_PATH_MAX], sp[CONF_PATH_MAX], host[256];
    int port;

    if (!list || n == 0)
        return 0;
    for (int i = 0; i < n; i++) {
        if (conf_endpoint(hosts[i], 1, host, sizeof(host), &port) == 0)
            continue;
        conf_path(hp, path, "hosts");
        conf_path_index(sp, hp, i);
        return conf_error(ctx, config_setting_get_elem(list, (unsigned)i), sp,
                          "must be \"host\" or \"host:port\" (IPv6: \"[addr]:port\"), port "
                          "1..65535 (got \"%s\")",
                          hosts[i]);
    }
    for (; *excl; excl++) {
        const config_setting_t *x = config_setting_get_member(own, *excl);
        if (!x)
            continue;
        conf_path(sp, path, "hosts");
        return conf_error(ctx, list, sp, "cannot be used together with %s (line %d)", *excl,
                          (int)config_setting_source_line(x));
    }
    return 0;
}

static int conf_check_broker(conf_ctx_t *ctx, const config_setting_t *grp, void *base,
                             const char *path)
{
    static const char *const excl[] = {"host", NULL};
    conf_broker_t *b = base;
    char sp[CONF_PATH_MAX];

    if (conf_check_inline_password(ctx, conf_own_group(grp, "broker"), path) < 0 ||
        conf_check_hosts(ctx, conf_own_group(grp, "broker"), path, b->hosts, b->n_hosts, excl) < 0)
        return -1;
    if (b->tls.enabled && b->port == 5672) {
        const config_setting_t *port = grp ? config_setting_get_member(grp, "port") : NULL;
        conf_path(sp, path, "port");
        return conf_warn(ctx, port ? port : grp, sp,
                         "5672 is the plain AMQP port but tls.enabled is true; a broker's TLS "
                         "listener is usually on 5671");
    }
    if (!b->tls.enabled)
        return conf_warn_plain(ctx, conf_own_group(grp, "broker"), path, b->host, b->hosts,
                               b->n_hosts, "the broker password and every message");
    return 0;
}

static int conf_check_broker_tls(conf_ctx_t *ctx, const config_setting_t *grp, void *base,
                                 const char *path)
{
    conf_broker_tls_t *t = base;
    const config_setting_t *own = conf_own_group(grp, "tls");
    char sp[CONF_PATH_MAX];

    if (conf_check_key_pair(ctx, grp, path, t->cert_file, t->key_file) < 0)
        return -1;
    if (!t->enabled)
        return conf_check_tls_off(ctx, own, path);
    if (t->verify_peer && !t->ca_file) {
        conf_path(sp, path, "ca_file");
        return conf_error(ctx, grp, sp,
                          "required when verify_peer is true (rabbitmq-c does not read the "
                          "system's CA store)");
    }
    if (conf_check_key_mode(ctx, own, path, t->key_file) < 0)
        return -1;
    if (!t->verify_peer &&
        conf_warn_check_off(ctx, grp, own, path, "verify_peer",
                            "false: any certificate is accepted, so anyone on the path can pose "
                            "as the broker") < 0)
        return -1;
    if (!t->verify_hostname &&
        conf_warn_check_off(ctx, grp, own, path, "verify_hostname",
                            "false: a certificate issued to any other name is accepted") < 0)
        return -1;
    return 0;
}

static int conf_check_database(conf_ctx_t *ctx, const config_setting_t *grp, void *base,
                               const char *path)
{
    static const char *const excl[] = {"host", "socket", NULL};
    conf_database_t *db = base;
    const config_setting_t *own = conf_own_group(grp, "database");
    char sp[CONF_PATH_MAX];

    if (conf_check_inline_password(ctx, own, path) < 0 ||
        conf_check_hosts(ctx, own, path, db->hosts, db->n_hosts, excl) < 0)
        return -1;
    if (db->tls.enabled && db->socket) {
        const config_setting_t *tls = own ? config_setting_get_member(own, "tls") : NULL;
        const config_setting_t *en = tls ? config_setting_get_member(tls, "enabled") : NULL;
        conf_path(sp, path, "tls.enabled");
        return conf_error(
            ctx, en ? en : grp, sp,
            "cannot be used with socket (line %d): TLS runs over TCP to host:port",
            (int)config_setting_source_line(config_setting_get_member(own, "socket")));
    }
    if (!db->socket && !db->tls.enabled)
        return conf_warn_plain(ctx, own, path, db->host, db->hosts, db->n_hosts,
                               "the database password, the handlers' statements and their data");
    return 0;
}

static int conf_check_database_tls(conf_ctx_t *ctx, const config_setting_t *grp, void *base,
                                   const char *path)
{
    conf_database_tls_t *t = base;
    const config_setting_t *own = conf_own_group(grp, "tls");

    if (conf_check_key_pair(ctx, grp, path, t->cert_file, t->key_file) < 0)
        return -1;
    if (!t->enabled)
        return conf_check_tls_off(ctx, own, path);
    if (conf_check_key_mode(ctx, own, path, t->key_file) < 0)
        return -1;
    if (!t->verify_server_cert)
        return conf_warn_check_off(
            ctx, grp, own, path, "verify_server_cert",
            t->ca_file ? "false: the chain is still checked against ca_file, but a certificate "
                         "issued to any other name is accepted"
                       : "false and no ca_file: the server's certificate is not checked at all, "
                         "so anyone on the path can pose as the server");
    return 0;
}

/* q's declare.arguments entry named key, or NULL; borrowed from q. */
static const conf_arg_t *conf_arg_find(const conf_queue_t *q, const char *key)
{
    for (int i = 0; i < q->n_args; i++)
        if (strcmp(q->args[i].key, key) == 0)
            return &q->args[i];
    return NULL;
}

/*
 * Why argument a of q's declare.arguments would lose messages, or NULL. A
 * full queue either drops its oldest messages (drop-head, the default) or
 * refuses new ones (reject-publish): idemd's own copies are confirmed and
 * survive a refusal, but a classic delay tier dead-letters back without
 * confirms, so a copy whose delay expires while the queue is full is lost.
 */
static const char *conf_overflow_risk(const conf_queue_t *q, const conf_arg_t *a)
{
    const conf_arg_t *ov = conf_arg_find(q, "x-overflow");
    bool limit = conf_arg_find(q, "x-max-length") || conf_arg_find(q, "x-max-length-bytes");
    const char *mode = ov && !ov->is_int ? ov->sval : NULL;

    if (a == ov && ov->is_int)
        return "must be a string: \"reject-publish\" (or \"drop-head\", refused with a length "
               "limit)";
    if (a == ov && q->quorum && mode && strcmp(mode, "drop-head") != 0 &&
        strcmp(mode, "reject-publish") != 0)
        return "quorum queues take only \"drop-head\" or \"reject-publish\"; use "
               "\"reject-publish\"";
    if (!limit ||
        (strcmp(a->key, "x-max-length") != 0 && strcmp(a->key, "x-max-length-bytes") != 0))
        return NULL;
    if (!mode || strcmp(mode, "drop-head") == 0)
        return "a length limit with x-overflow \"drop-head\" (the default) makes the broker drop "
               "the oldest messages, unprocessed, when the queue is full: set x-overflow = "
               "\"reject-publish\"";
    if (!q->quorum && q->n_retry_delays > 0)
        return "with classic queues the delay queues dead-letter back to this queue without "
               "confirms, so a retried message whose delay expires while the queue is full is "
               "lost: set declare.quorum = true (an at-least-once hop) or retry_delays_ms = [ ]";
    return NULL;
}

/* The dead letter wiring is ours: arguments must not fight it. */
static int conf_check_declare(conf_ctx_t *ctx, const config_setting_t *grp, void *base,
                              const char *path)
{
    conf_queue_t *q = base;
    char sp[CONF_PATH_MAX];
    const config_setting_t *args = NULL;

    /* grp is the queue's group when "declare" is absent (then no arguments). */
    const char *gname = config_setting_name(grp);
    if (gname && strcmp(gname, "declare") == 0)
        args = config_setting_get_member(grp, "arguments");

    if (q->dead_letter_queue == NULL) {
        char dlq[300];
        snprintf(dlq, sizeof(dlq), "%s.dlq", q->name);
        conf_path(sp, path, "dead_letter_queue");
        if (strlen(dlq) > 255)
            return conf_error(ctx, grp, sp,
                              "the default (the queue name + \".dlq\") is longer than 255 bytes: "
                              "set it");
        if (conf_set_string(ctx, grp, sp, &q->dead_letter_queue, dlq) != 0)
            return -1;
    } else if (q->dead_letter_queue[0] == '\0') {
        free(q->dead_letter_queue); /* "" turns our dead letter queue off */
        q->dead_letter_queue = NULL;
    }
    if (q->dead_letter_queue && strcmp(q->dead_letter_queue, q->name) == 0) {
        conf_path(sp, path, "dead_letter_queue");
        return conf_error(ctx, config_setting_get_member(grp, "dead_letter_queue"), sp,
                          "must differ from the queue's name");
    }
    /* Each worker would fail to declare the queues and be restarted for ever. */
    if (!q->durable && (q->quorum || q->dead_letter_queue)) {
        conf_path(sp, path, "durable");
        if (q->quorum)
            return conf_error(ctx, config_setting_get_member(grp, "durable"), sp,
                              "false cannot be used with quorum = true: RabbitMQ declares quorum "
                              "queues durable only");
        return conf_error(ctx, config_setting_get_member(grp, "durable"), sp,
                          "false cannot be used with a dead letter queue (\"%s\"): idemd "
                          "declares its dead letter queue durable, and RabbitMQ refuses to "
                          "declare it again as transient; set durable = true, or "
                          "dead_letter_queue = \"\" for none",
                          q->dead_letter_queue);
    }
    for (int i = 0; i < q->n_args; i++) {
        const char *key = q->args[i].key;
        const char *why = NULL;
        if (strcmp(key, "x-queue-type") == 0)
            why = "set declare.quorum instead";
        else
            why = conf_overflow_risk(q, &q->args[i]);
        if (!why)
            continue;
        char ap[CONF_PATH_MAX];
        conf_path(ap, path, "arguments");
        conf_path(sp, ap, key);
        return conf_error(ctx, args ? config_setting_get_member(args, key) : grp, sp, "%s", why);
    }
    return 0;
}

/* ---------------------------------------------------------------------- */
/* Public API */

static void conf_drop_connections(conf_t *conf);

int conf_load(const char *path, conf_t **out, char *err, size_t errlen)
{
    conf_ctx_t ctx = {.path = path, .err = err, .errlen = errlen};
    conf_t *conf = NULL;
    char *dir = NULL;

    *out = NULL;
    if (err && errlen)
        err[0] = '\0';
    if (!(conf = calloc(1, sizeof(*conf)))) {
        if (err && errlen)
            snprintf(err, errlen, "%s: out of memory", path);
        return -1;
    }
    ctx.conf = conf;
    config_init(&conf->lc);
    if (!(conf->path = strdup(path)))
        goto oom;

    /* @include paths are relative to the including file's directory. */
    if (!(dir = strdup(path)))
        goto oom;
    char *slash = strrchr(dir, '/');
    if (slash) {
        slash[slash == dir ? 1 : 0] = '\0';
        config_set_include_dir(&conf->lc, dir);
        ctx.dir = dir;
    }

    /* libconfig only says "file I/O error": ask the system why. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        if (err && errlen)
            snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        goto fail;
    }
    close(fd);
    if (!config_read_file(&conf->lc, path)) {
        if (err && errlen) {
            const char *file = config_error_file(&conf->lc);
            if (config_error_type(&conf->lc) == CONFIG_ERR_FILE_IO || !file)
                snprintf(err, errlen, "%s: %s", file ? file : path, config_error_text(&conf->lc));
            else
                snprintf(err, errlen, "%s:%d: %s", file, config_error_line(&conf->lc),
                         config_error_text(&conf->lc));
        }
        goto fail;
    }
    if (conf_load_section(&ctx, "root", config_root_setting(&conf->lc), NULL, conf, "") < 0)
        goto fail;
    conf_drop_connections(conf);
    free(dir);
    *out = conf;
    return 0;

oom:
    if (err && errlen)
        snprintf(err, errlen, "%s: out of memory", path);
fail:
    free(dir);
    conf_free(conf);
    return -1;
}

static void conf_free_section(const char *section, void *base)
{
    for (const conf_def_t *d = conf_defs; d->name; d++) {
        if (strcmp(d->section, section) != 0)
            continue;
        switch (d->type) {
        case CONF_T_STRING: /* a FILE setting shares its peer's field */
            if ((d->flags & CONF_F_SECRET) && *CONF_AT(base, d->off, char *))
                explicit_bzero(*CONF_AT(base, d->off, char *),
                               strlen(*CONF_AT(base, d->off, char *)));
            free(*CONF_AT(base, d->off, char *));
            break;
        case CONF_T_INT_ARRAY:
            free(*CONF_AT(base, d->off, int *));
            break;
        case CONF_T_STR_ARRAY: {
            char **a = *CONF_AT(base, d->off, char **);
            int n = *CONF_AT(base, d->off_n, int);
            for (int i = 0; i < n; i++)
                free(a[i]);
            free(a);
            break;
        }
        case CONF_T_ARGS: {
            conf_arg_t *a = *CONF_AT(base, d->off, conf_arg_t *);
            int n = *CONF_AT(base, d->off_n, int);
            for (int i = 0; i < n; i++) {
                free(a[i].key);
                free(a[i].sval);
            }
            free(a);
            break;
        }
        case CONF_T_GROUP:
            conf_free_section(d->sub, CONF_AT(base, d->off, char));
            break;
        case CONF_T_LIST: {
            char *arr = *CONF_AT(base, d->off, char *);
            int n = *CONF_AT(base, d->off_n, int);
            for (int i = 0; i < n; i++)
                conf_free_section(d->sub, arr + (size_t)i * d->elem_size);
            free(arr);
            break;
        }
        case CONF_T_INT:
        case CONF_T_BOOL:
        case CONF_T_ENUM:
        case CONF_T_FILE:
        case CONF_T_RAW:
            break;
        }
    }
}

/*
 * Overwrite every string value under s (passwords, and secrets in handler
 * settings) with zeros, before the tree is freed. The strings belong to
 * libconfig; their lengths stay, so the tree still frees cleanly.
 */
static void conf_wipe_tree(config_setting_t *s)
{
    if (s == NULL)
        return;
    if (config_setting_type(s) == CONFIG_TYPE_STRING) {
        char *v = (char *)config_setting_get_string(s);
        if (v)
            explicit_bzero(v, strlen(v));
        return;
    }
    if (!config_setting_is_aggregate(s))
        return;
    for (int i = 0; i < config_setting_length(s); i++)
        conf_wipe_tree(config_setting_get_elem(s, (unsigned)i));
}

/*
 * The parsed tree is kept only for the handlers' settings groups: the
 * broker and database groups (passwords) are wiped and removed from it as
 * soon as conf holds their values.
 */
static void conf_drop_connections(conf_t *conf)
{
    config_setting_t *root = config_root_setting(&conf->lc);
    static const char *const groups[] = {"broker", "database"};
    for (size_t i = 0; i < sizeof(groups) / sizeof(groups[0]); i++) {
        config_setting_t *g = config_setting_get_member(root, groups[i]);
        if (g == NULL)
            continue;
        conf_wipe_tree(g);
        config_setting_remove(root, groups[i]);
    }
}

void conf_free(conf_t *conf)
{
    if (!conf)
        return;
    conf_free_section("root", conf);
    if (conf->metrics.token) {
        explicit_bzero(conf->metrics.token, strlen(conf->metrics.token));
        free(conf->metrics.token);
    }
    for (int i = 0; i < conf->n_warnings; i++)
        free(conf->warnings[i]);
    free(conf->warnings);
    free(conf->path);
    conf_wipe_tree(config_root_setting(&conf->lc));
    config_destroy(&conf->lc);
    free(conf);
}

/* ---------------------------------------------------------------------- */
/* Printing */

static void conf_print_string(FILE *out, const char *s)
{
    fputc('"', out);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"':
            fputs("\\\"", out);
            break;
        case '\\':
            fputs("\\\\", out);
            break;
        case '\n':
            fputs("\\n", out);
            break;
        case '\r':
            fputs("\\r", out);
            break;
        case '\t':
            fputs("\\t", out);
            break;
        case '\f':
            fputs("\\f", out);
            break;
        default:
            if (*p < 0x20 || *p == 0x7f)
                fprintf(out, "\\x%02X", *p);
            else
                fputc(*p, out);
        }
    }
    fputc('"', out);
}

static void conf_print_int64(FILE *out, long long v)
{
    if (v < INT_MIN || v > INT_MAX)
        fprintf(out, "%lldL", v);
    else
        fprintf(out, "%lld", v);
}

/* Shortest form that reads back as the same double, always with a '.' or
 * an exponent so that libconfig parses it as a float again. */
static void conf_print_float(FILE *out, double v)
{
    char buf[64];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof(buf), "%.*g", prec, v);
        if (strtod(buf, NULL) == v)
            break;
    }
    if (!strpbrk(buf, ".eEn"))
        strcat(buf, ".0");
    fputs(buf, out);
}

/* Plugin settings are not ours to know; names that look secret are masked. */
static bool conf_name_is_secret(const char *name)
{
    static const char *const words[] = {"password", "passwd", "secret", "token", NULL};
    for (int i = 0; name && words[i]; i++)
        if (strcasestr(name, words[i]))
            return true;
    return false;
}

static void conf_dump_value(const config_setting_t *s, int depth, bool mask, FILE *out);

static void conf_dump_members(const config_setting_t *g, int depth, bool mask, FILE *out)
{
    int n = config_setting_length(g);
    for (int i = 0; i < n; i++) {
        const config_setting_t *m = config_setting_get_elem(g, (unsigned)i);
        fprintf(out, "%*s%s = ", depth * 4, "", config_setting_name(m));
        conf_dump_value(m, depth, mask || conf_name_is_secret(config_setting_name(m)), out);
        fputs(";\n", out);
    }
}

static void conf_dump_value(const config_setting_t *s, int depth, bool mask, FILE *out)
{
    int t = config_setting_type(s);
    if (mask && t != CONFIG_TYPE_GROUP && t != CONFIG_TYPE_LIST && t != CONFIG_TYPE_ARRAY) {
        fputs("\"***\"", out);
        return;
    }
    switch (t) {
    case CONFIG_TYPE_INT:
    case CONFIG_TYPE_INT64:
        conf_print_int64(out, config_setting_get_int64(s));
        break;
    case CONFIG_TYPE_FLOAT:
        conf_print_float(out, config_setting_get_float(s));
        break;
    case CONFIG_TYPE_STRING:
        conf_print_string(out, config_setting_get_string(s));
        break;
    case CONFIG_TYPE_BOOL:
        fputs(config_setting_get_bool(s) ? "true" : "false", out);
        break;
    case CONFIG_TYPE_ARRAY:
    case CONFIG_TYPE_LIST: {
        int n = config_setting_length(s);
        fputs(t == CONFIG_TYPE_ARRAY ? "[ " : "( ", out);
        for (int i = 0; i < n; i++) {
            if (i)
                fputs(", ", out);
            conf_dump_value(config_setting_get_elem(s, (unsigned)i), depth, mask, out);
        }
        fputs(t == CONFIG_TYPE_ARRAY ? " ]" : " )", out);
        break;
    }
    case CONFIG_TYPE_GROUP:
        fputs("{\n", out);
        conf_dump_members(s, depth + 1, mask, out);
        fprintf(out, "%*s}", depth * 4, "");
        break;
    }
}

static void conf_dump_section(const char *section, const void *base, int depth, FILE *out)
{
    int ind = depth * 4;
    for (const conf_def_t *d = conf_defs; d->name; d++) {
        if (strcmp(d->section, section) != 0 || d->type == CONF_T_FILE)
            continue;
        switch (d->type) {
        case CONF_T_STRING: {
            const char *v = *CONF_CAT(base, d->off, char *);
            const conf_def_t *hosts = conf_find(section, "hosts");
            if ((d->flags & CONF_F_BY_HOSTS) && hosts && *CONF_CAT(base, hosts->off_n, int) > 0) {
                fprintf(out, "%*s# %s: not used: hosts is set\n", ind, "", d->name);
                break;
            }
            if (!v) {
                fprintf(out, "%*s# %s: not set\n", ind, "", d->name);
                break;
            }
            fprintf(out, "%*s%s = ", ind, "", d->name);
            conf_print_string(out, (d->flags & CONF_F_SECRET) ? "***" : v);
            fputs(";\n", out);
            break;
        }
        case CONF_T_INT:
            fprintf(out, "%*s%s = %d;\n", ind, "", d->name, *CONF_CAT(base, d->off, int));
            break;
        case CONF_T_BOOL:
            fprintf(out, "%*s%s = %s;\n", ind, "", d->name,
                    *CONF_CAT(base, d->off, bool) ? "true" : "false");
            break;
        case CONF_T_ENUM:
            fprintf(out, "%*s%s = \"%s\";\n", ind, "", d->name,
                    conf_enum_name(d->enums, *CONF_CAT(base, d->off, int)));
            break;
        case CONF_T_INT_ARRAY: {
            const int *a = *CONF_CAT(base, d->off, int *);
            int n = *CONF_CAT(base, d->off_n, int);
            fprintf(out, "%*s%s = [", ind, "", d->name);
            for (int i = 0; i < n; i++)
                fprintf(out, "%s %d", i ? "," : "", a[i]);
            fputs(" ];\n", out);
            break;
        }
        case CONF_T_STR_ARRAY: {
            const char *const *a = *CONF_CAT(base, d->off, char *const *);
            int n = *CONF_CAT(base, d->off_n, int);
            fprintf(out, "%*s%s = [", ind, "", d->name);
            for (int i = 0; i < n; i++) {
                fputs(i ? ", " : " ", out);
                conf_print_string(out, a[i]);
            }
            fputs(" ];\n", out);
            break;
        }
        case CONF_T_ARGS: {
            const conf_arg_t *a = *CONF_CAT(base, d->off, conf_arg_t *);
            int n = *CONF_CAT(base, d->off_n, int);
            fprintf(out, "%*s%s = {%s", ind, "", d->name, n ? "\n" : " ");
            for (int i = 0; i < n; i++) {
                fprintf(out, "%*s%s = ", ind + 4, "", a[i].key);
                if (a[i].is_int)
                    conf_print_int64(out, a[i].ival);
                else
                    conf_print_string(out, a[i].sval);
                fputs(";\n", out);
            }
            fprintf(out, "%*s};\n", n ? ind : 0, "");
            break;
        }
        case CONF_T_GROUP:
            fprintf(out, "%*s%s = {\n", ind, "", d->name);
            conf_dump_section(d->sub, CONF_CAT(base, d->off, char), depth + 1, out);
            fprintf(out, "%*s};\n", ind, "");
            break;
        case CONF_T_LIST: {
            const char *arr = *CONF_CAT(base, d->off, char *);
            int n = *CONF_CAT(base, d->off_n, int);
            fprintf(out, "%*s%s = (%s", ind, "", d->name, n ? "\n" : " ");
            for (int i = 0; i < n; i++) {
                fprintf(out, "%*s{\n", ind + 4, "");
                conf_dump_section(d->sub, arr + (size_t)i * d->elem_size, depth + 2, out);
                fprintf(out, "%*s}%s\n", ind + 4, "", i + 1 < n ? "," : "");
            }
            fprintf(out, "%*s);\n", n ? ind : 0, "");
            break;
        }
        case CONF_T_RAW: {
            const config_setting_t *s = *CONF_CAT(base, d->off, config_setting_t *);
            if (!s) {
                fprintf(out, "%*s# %s: not set\n", ind, "", d->name);
                break;
            }
            fprintf(out, "%*s%s = ", ind, "", d->name);
            conf_dump_value(s, depth, false, out);
            fputs(";\n", out);
            break;
        }
        case CONF_T_FILE:
            break;
        }
    }
}

void conf_dump(const conf_t *conf, FILE *out)
{
    fprintf(out, "# effective configuration of %s (secrets masked)\n", conf->path);
    conf_dump_section("root", conf, 0, out);
}

static const char *conf_doc_type(const conf_def_t *d)
{
    switch (d->type) {
    case CONF_T_STRING:
        return (d->flags & CONF_F_READABLE) ? "string (path)" : "string";
    case CONF_T_INT:
        return "integer";
    case CONF_T_BOOL:
        return "boolean";
    case CONF_T_ENUM:
        return "string (enum)";
    case CONF_T_INT_ARRAY:
        return "array of integers";
    case CONF_T_STR_ARRAY:
        return "array of strings";
    case CONF_T_FILE:
        return "string (path)";
    case CONF_T_ARGS:
        return "group";
    case CONF_T_GROUP:
        return "group";
    case CONF_T_LIST:
        return "list of groups";
    case CONF_T_RAW:
        return "group (free-form)";
    }
    return "?";
}

static void conf_doc_default(const conf_def_t *d, FILE *out)
{
    if (d->flags & CONF_F_REQUIRED)
        fputs("required", out);
    else if (d->def && (d->type == CONF_T_STRING || d->type == CONF_T_ENUM))
        fprintf(out, "`\"%s\"`", d->def);
    else if (d->def)
        fprintf(out, "`%s`", d->def);
    else if (d->def_doc)
        fputs(d->def_doc, out);
}

static void conf_doc_range(const conf_def_t *d, FILE *out)
{
    switch (d->type) {
    case CONF_T_STRING:
        if (d->flags & CONF_F_READABLE) {
            fputs("readable file", out);
            break;
        }
        if (d->flags & CONF_F_IDENT)
            fputs("`[A-Za-z0-9_]`, ", out);
        if (d->max > 0)
            fprintf(out, "%lld..%lld bytes", d->min, d->max);
        else if (d->min > 0)
            fputs("not empty", out);
        break;
    case CONF_T_INT:
        fprintf(out, "%lld..%lld", d->min, d->max);
        break;
    case CONF_T_ENUM:
        for (const conf_enum_t *e = d->enums; e->name; e++)
            fprintf(out, "%s`%s`", e == d->enums ? "" : ", ", e->name);
        break;
    case CONF_T_INT_ARRAY:
        fprintf(out, "each %lld..%lld", d->min, d->max);
        break;
    case CONF_T_STR_ARRAY:
        fprintf(out, "each %lld..%lld bytes", d->min, d->max);
        break;
    case CONF_T_FILE:
        fputs("readable file", out);
        break;
    case CONF_T_LIST:
        if (d->min > 0)
            fprintf(out, "at least %lld", d->min);
        break;
    case CONF_T_BOOL:
    case CONF_T_ARGS:
    case CONF_T_GROUP:
    case CONF_T_RAW:
        break;
    }
}

void conf_reference(FILE *out)
{
    for (const conf_section_t *sec = conf_sections; sec->name; sec++) {
        fprintf(out, "### %s\n\n%s\n\n", sec->title, sec->intro);
        fputs("| setting | type | default | range | reload | meaning |\n", out);
        fputs("|---|---|---|---|---|---|\n", out);
        for (const conf_def_t *d = conf_defs; d->name; d++) {
            if (strcmp(d->section, sec->name) != 0)
                continue;
            bool container = d->type == CONF_T_GROUP || d->type == CONF_T_LIST;
            fprintf(out, "| `%s` | %s | ", d->name, conf_doc_type(d));
            conf_doc_default(d, out);
            fputs(" | ", out);
            conf_doc_range(d, out);
            fprintf(out, " | %s | %s |\n",
                    container ? "per setting"
                              : ((d->flags & CONF_F_NO_RELOAD) ? "restart" : "reload"),
                    d->help);
        }
        fputs("\n", out);
    }
}

/* ---------------------------------------------------------------------- */
/* Comparing two loaded configurations (reload) */

static bool conf_setting_differs(const config_setting_t *a, const config_setting_t *b)
{
    if (!a || !b)
        return a != b;
    if (config_setting_type(a) != config_setting_type(b))
        return true;
    const char *na = config_setting_name(a), *nb = config_setting_name(b);
    if ((na == NULL) != (nb == NULL) || (na && strcmp(na, nb) != 0))
        return true;
    switch (config_setting_type(a)) {
    case CONFIG_TYPE_INT:
        return config_setting_get_int(a) != config_setting_get_int(b);
    case CONFIG_TYPE_INT64:
        return config_setting_get_int64(a) != config_setting_get_int64(b);
    case CONFIG_TYPE_FLOAT:
        return config_setting_get_float(a) != config_setting_get_float(b);
    case CONFIG_TYPE_BOOL:
        return config_setting_get_bool(a) != config_setting_get_bool(b);
    case CONFIG_TYPE_STRING:
        return strcmp(config_setting_get_string(a), config_setting_get_string(b)) != 0;
    default: {
        int n = config_setting_length(a);
        if (n != config_setting_length(b))
            return true;
        for (int i = 0; i < n; i++)
            if (conf_setting_differs(config_setting_get_elem(a, (unsigned)i),
                                     config_setting_get_elem(b, (unsigned)i)))
                return true;
        return false;
    }
    }
}

static bool conf_str_differs(const char *a, const char *b)
{
    if (!a || !b)
        return a != b;
    return strcmp(a, b) != 0;
}

/* Walk one section of the table over two structs; name the first difference in what. */
static bool conf_section_differs(const char *section, const void *a, const void *b,
                                 const char *path, char *what, size_t len)
{
    char sp[CONF_PATH_MAX];
    for (const conf_def_t *d = conf_defs; d->name; d++) {
        bool diff = false;
        if (strcmp(d->section, section) != 0)
            continue;
        conf_path(sp, path, d->name);
        switch (d->type) {
        case CONF_T_STRING:
            diff = conf_str_differs(*CONF_AT(a, d->off, char *), *CONF_AT(b, d->off, char *));
            break;
        case CONF_T_INT:
        case CONF_T_ENUM:
            diff = *CONF_AT(a, d->off, int) != *CONF_AT(b, d->off, int);
            break;
        case CONF_T_BOOL:
            diff = *CONF_AT(a, d->off, bool) != *CONF_AT(b, d->off, bool);
            break;
        case CONF_T_INT_ARRAY: {
            int n = *CONF_AT(a, d->off_n, int);
            diff = n != *CONF_AT(b, d->off_n, int) ||
                   (n > 0 && memcmp(*CONF_AT(a, d->off, int *), *CONF_AT(b, d->off, int *),
                                    sizeof(int) * (size_t)n) != 0);
            break;
        }
        case CONF_T_STR_ARRAY: {
            int n = *CONF_AT(a, d->off_n, int);
            char **x = *CONF_AT(a, d->off, char **), **y = *CONF_AT(b, d->off, char **);
            diff = n != *CONF_AT(b, d->off_n, int);
            for (int i = 0; !diff && i < n; i++)
                diff = strcmp(x[i], y[i]) != 0;
            break;
        }
        case CONF_T_ARGS: {
            int n = *CONF_AT(a, d->off_n, int);
            const conf_arg_t *x = *CONF_AT(a, d->off, conf_arg_t *);
            const conf_arg_t *y = *CONF_AT(b, d->off, conf_arg_t *);
            diff = n != *CONF_AT(b, d->off_n, int);
            for (int i = 0; !diff && i < n; i++)
                diff = strcmp(x[i].key, y[i].key) != 0 || x[i].is_int != y[i].is_int ||
                       x[i].ival != y[i].ival || conf_str_differs(x[i].sval, y[i].sval);
            break;
        }
        case CONF_T_GROUP:
            if (conf_section_differs(d->sub, CONF_AT(a, d->off, char), CONF_AT(b, d->off, char), sp,
                                     what, len))
                return true;
            break;
        case CONF_T_LIST: {
            int n = *CONF_AT(a, d->off_n, int);
            const char *x = *CONF_AT(a, d->off, char *), *y = *CONF_AT(b, d->off, char *);
            diff = n != *CONF_AT(b, d->off_n, int);
            for (int i = 0; !diff && i < n; i++)
                if (conf_section_differs(d->sub, x + (size_t)i * d->elem_size,
                                         y + (size_t)i * d->elem_size, sp, what, len))
                    return true;
            break;
        }
        case CONF_T_RAW:
            diff = conf_setting_differs(*CONF_AT(a, d->off, const config_setting_t *),
                                        *CONF_AT(b, d->off, const config_setting_t *));
            break;
        case CONF_T_FILE:
            break; /* its value lives in the peer setting, compared there */
        }
        if (diff) {
            snprintf(what, len, "%s", sp);
            return true;
        }
    }
    return false;
}

bool conf_connections_differ(const conf_t *a, const conf_t *b, char *what, size_t len)
{
    return conf_section_differs("broker", &a->broker, &b->broker, "broker", what, len) ||
           conf_section_differs("database", &a->database, &b->database, "database", what, len);
}

bool conf_queue_differs(const conf_queue_t *a, const conf_queue_t *b, char *what, size_t len)
{
    char path[300];
    snprintf(path, sizeof(path), "queues.%s", a->name);
    if (conf_section_differs("queue", a, b, path, what, len))
        return true;
    /* "declare" is a GROUP at offset 0 of the queue: walked above. */
    return false;
}

/* ---------------------------------------------------------------------- */
/* What a loaded queue's settings put at risk */

int conf_queue_risk(const conf_t *conf, int i, char *buf, size_t len)
{
    const conf_queue_t *q = &conf->queues[i];
    if (q->quorum || q->n_retry_delays == 0)
        return 0;
    snprintf(buf, len,
             "%s:%d: queues.[%d].declare.quorum: false: queue '%s' is a classic queue, so are its "
             "delay queues (%s.retry.%d ...), and the broker moves a retried message back from "
             "them without confirms: it is lost if '%s' is full, deleted or unreachable when "
             "the delay expires (an at-most-once hop). quorum = true makes the hop at-least-once",
             conf->path, q->line, i, q->name, q->name, q->retry_delays_ms[0], q->name);
    return 1;
}

/* ---------------------------------------------------------------------- */
/* The sample configuration (conf/idemd.conf) */

/* Example values for settings without a default; live ones are written as
 * settings, the others as comments. */
typedef struct conf_example {
    const char *section, *name, *value;
    bool live;
} conf_example_t;

static const conf_example_t conf_examples[] = {
    {"broker", "password_file", "\"/etc/idemd/amqp.pw\"", false},
    {"broker_tls", "ca_file", "\"/etc/idemd/tls/broker-ca.pem\"", false},
    {"broker_tls", "cert_file", "\"/etc/idemd/tls/client.pem\"", false},
    {"broker_tls", "key_file", "\"/etc/idemd/tls/client.key\"", false},
    {"broker", "hosts", "[ \"rabbit1:5672\", \"rabbit2:5672\", \"rabbit3:5672\" ]", false},
    {"database", "hosts", "[ \"db1:3306\", \"db2:3306\", \"db3:3306\" ]", false},
    {"database", "socket", "\"/run/mysqld/mysqld.sock\"", false},
    {"database", "password", "\"secret\"", false},
    {"database", "password_file", "\"/etc/idemd/db.pw\"", false},
    {"database", "database", "\"idemd\"", true},
    {"database_tls", "ca_file", "\"/etc/idemd/tls/db-ca.pem\"", false},
    {"database_tls", "cert_file", "\"/etc/idemd/tls/client.pem\"", false},
    {"database_tls", "key_file", "\"/etc/idemd/tls/client.key\"", false},
    {"metrics", "listen", "\"127.0.0.1:9187\"", false},
    {"metrics", "token_file", "\"/etc/idemd/metrics.token\"", false},
    {"queue", "name", "\"orders.pay\"", true},
    {"queue", "handler", "\"/usr/local/lib/idemd/plugins/order_pay.so\"", true},
    {"queue", "consumer", "\"orders.pay\"", false},
    {"queue", "id_header", "\"x-msg-id\"", false},
    {"queue", "settings", "{ table = \"orders\"; guard = true; }", true},
    {"declare", "dead_letter_queue", "\"orders.pay.dlq\"", false},
    {"declare", "arguments", "{ x-max-priority = 10; }", false},
    {"declare", "bindings", "( { exchange = \"pay.topic\"; routing_key = \"pay.success\"; } )",
     false},
    {NULL, NULL, NULL, false},
};

/* The example of setting d, or NULL. */
static const conf_example_t *conf_example(const conf_def_t *d)
{
    for (const conf_example_t *e = conf_examples; e->name; e++)
        if (strcmp(e->section, d->section) == 0 && strcmp(e->name, d->name) == 0)
            return e;
    return NULL;
}

/* Write text as "# " comment lines at indent, wrapped before column 100, without backticks. */
static void conf_sample_comment(FILE *out, int ind, const char *text)
{
    const int width = 100 - ind - 2;
    char plain[1024];
    size_t w = 0;
    for (const char *c = text; *c && w < sizeof(plain) - 1; c++)
        if (*c != '`')
            plain[w++] = *c;
    plain[w] = '\0';
    const char *p = plain;
    while (*p) {
        int n = 0, cut = -1;
        while (*p == ' ')
            p++;
        while (p[n] && n < width) {
            if (p[n] == ' ')
                cut = n;
            n++;
        }
        if (p[n] && p[n] != ' ' && cut > 0)
            n = cut;
        fprintf(out, "%*s# %.*s\n", ind, "", n, p);
        p += n;
    }
}

static void conf_sample_section(FILE *out, const char *section, int depth);

/*
 * One setting of the sample at depth: its help, range and default as a
 * comment, then the setting with its default (a group or the required list
 * recursively), or its example, commented out unless it is required or live.
 */
static void conf_sample_setting(FILE *out, const conf_def_t *d, int depth)
{
    int ind = depth * 4;
    const conf_example_t *ex = conf_example(d);
    bool required = d->flags & CONF_F_REQUIRED;
    char *help = NULL, *range = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&range, &len);

    if (m) {
        conf_doc_range(d, m);
        fclose(m);
    }
    m = open_memstream(&help, &len);
    if (m) {
        fputs(d->help, m);
        if (range && range[0])
            fprintf(m, " [%s]", range);
        if (required)
            fputs(" (required)", m);
        else if (!d->def && d->def_doc && strcmp(d->def_doc, "none") != 0)
            fprintf(m, " (default: %s)", d->def_doc);
        if (d->def && ex)
            fprintf(m, "; e.g. %s = %s;", d->name, ex->value);
        fclose(m);
    }
    conf_sample_comment(out, ind, help ? help : d->help);
    free(help);
    free(range);

    switch (d->type) {
    case CONF_T_GROUP:
        fprintf(out, "%*s%s = {\n", ind, "", d->name);
        conf_sample_section(out, d->sub, depth + 1);
        fprintf(out, "%*s};\n", ind, "");
        return;
    case CONF_T_LIST:
        if (!required)
            break;
        fprintf(out, "%*s%s = (\n%*s{\n", ind, "", d->name, ind + 4, "");
        conf_sample_section(out, d->sub, depth + 2);
        fprintf(out, "%*s}\n%*s);\n", ind + 4, "", ind, "");
        return;
    default:
        break;
    }
    if (d->def && (d->type == CONF_T_STRING || d->type == CONF_T_ENUM)) {
        fprintf(out, "%*s%s = ", ind, "", d->name);
        conf_print_string(out, d->def);
        fputs(";\n", out);
    } else if (d->def) {
        fprintf(out, "%*s%s = %s;\n", ind, "", d->name, d->def);
    } else if (d->type == CONF_T_ARGS || d->type == CONF_T_LIST) {
        if (ex)
            fprintf(out, "%*s# %s = %s;\n", ind, "", d->name, ex->value);
        fprintf(out, "%*s%s = %s;\n", ind, "", d->name, d->type == CONF_T_ARGS ? "{ }" : "( )");
    } else if (ex) {
        fprintf(out, "%*s%s%s = %s;\n", ind, "", ex->live || required ? "" : "# ", d->name,
                ex->value);
    }
}

/* Every setting of section; top-level groups are separated by a blank line. */
static void conf_sample_section(FILE *out, const char *section, int depth)
{
    for (const conf_def_t *d = conf_defs; d->name; d++) {
        if (strcmp(d->section, section) != 0)
            continue;
        if (depth == 0 && d != conf_defs)
            fputc('\n', out);
        conf_sample_setting(out, d, depth);
    }
}

void conf_sample(FILE *out)
{
    fputs("# idemd.conf: a full sample configuration; every setting is shown with its default.\n"
          "#\n"
          "# Generated from the settings table in src/conf.c; do not edit by hand, run\n"
          "#   build/tests/unit/test_conf --sample >conf/idemd.conf\n"
          "# Syntax: libconfig (groups { }, lists ( ), arrays [ ], \"strings\", settings end with "
          "';').\n"
          "# Reference: docs/configuration.md. Check a file without starting: idemd -c FILE "
          "--check-config\n"
          "# Unknown settings are errors, so a typo cannot pass silently; only a queue's "
          "\"settings\"\n"
          "# group is left to its handler. A setting written as a comment has no default; the "
          "value\n"
          "# shown is an example. Ranges are in [ ].\n"
          "\n",
          out);
    conf_sample_section(out, "root", 0);
}
