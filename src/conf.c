/* conf.c: idemd's settings table: every setting, its type, default, bounds and check (conf_file.c
 * loads a file by walking it). */
#include "conf.h"
#include "conf_int.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "trust.h"

/*
 * Every setting is described once, in conf_defs below. The table drives
 * loading (type checks, ranges, defaults, the FILE:LINE messages), the
 * rejection of unknown names, conf_dump, conf_free, the reference in
 * docs/configuration.md (conf_reference), the sample conf/idemd.conf
 * (conf_sample, with the examples in conf_examples) and the reload rules
 * (CONF_F_NO_RELOAD). The code that walks it: conf_load.c (loading),
 * conf_check.c and conf_check_conn.c (rules across settings, the section
 * checks named below), conf_show.c (dump, reference, sample), conf_reload.c (what a reload
 * changes), conf_file.c (a file loaded and freed); conf_int.h is what they
 * share.
 */

static const conf_enum_t conf_log_levels[] = {
    {"error", LOG_LEVEL_ERROR},
    {"warning", LOG_LEVEL_WARNING},
    {"info", LOG_LEVEL_INFO},
    {"debug", LOG_LEVEL_DEBUG},
    {NULL, 0},
};

/* Words an integer setting of workers takes instead of a number (the value stored). */
static const conf_enum_t conf_auto[] = {
    {"auto", CONF_WORKERS_AUTO},
    {NULL, 0},
};

static const conf_enum_t conf_dedups[] = {
    {"table", CONF_DEDUP_TABLE},
    {"none", CONF_DEDUP_NONE},
    {NULL, 0},
};

static const conf_enum_t conf_txns[] = {
    {"xa", CONF_TXN_XA},
    {"checked", CONF_TXN_CHECKED},
    {NULL, 0},
};

static const conf_enum_t conf_sql_verdicts[] = {
    {"reject", CONF_SQL_REJECT},
    {"retry", CONF_SQL_RETRY},
    {"ok", CONF_SQL_OK},
    {NULL, 0},
};

static const conf_enum_t conf_sql_dups[] = {
    {"reject", CONF_SQL_REJECT},
    {"ok", CONF_SQL_OK},
    {NULL, 0},
};

static const conf_enum_t conf_order_dls[] = {
    {"release", CONF_ORDER_DL_RELEASE},
    {"hold", CONF_ORDER_DL_HOLD},
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
#define CONF_INT_OR(sec, nm, st, fld, fl, d, lo, hi, words, h)                                     \
    {                                                                                              \
        .section = sec, .name = nm, .type = CONF_T_INT, .off = offsetof(st, fld), .flags = fl,     \
        .def = d, .min = lo, .max = hi, .enums = words, .help = h                                  \
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

const conf_def_t conf_defs[] = {
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
    CONF_INT_OR("daemon", "db_connection_budget", conf_t, db_connection_budget, 0, "auto", 1,
                100000, conf_auto,
                "database connections the workers of all queues may hold together (one each); "
                "`workers = \"auto\"` adds none past it; `\"auto\"`: half the server's "
                "`max_connections`, as the workers read it when they connect"),
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
                   "next on failure or when the server is read-only; of a MySQL Group "
                   "Replication group, the members: only the `PRIMARY` is kept "
                   "(docs/scaling.md); excludes `host` and `socket`"),
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
    CONF_ENUM("database", "transaction", conf_database_t, transaction, NR, "xa", conf_txns,
              "how idemd keeps its transaction whole: `xa` runs it as an XA branch, where the "
              "server refuses COMMIT, DDL and anything else that would end it (a Galera node, "
              "or a server that refuses XA START, is checked instead, said at connect); "
              "`checked` never uses XA (e.g. behind a proxy that does not pass it): an end is "
              "seen after the handler call and the queue is held (docs/failures.md)"),
    CONF_INT("database", "galera_max_batch", conf_database_t, galera_max_batch, NR, "100", 0, 1000,
             "on a Galera node (`wsrep_on`), at most this many messages per batch transaction "
             "whatever a queue's `batch_size` says; 0 = no cap (docs/scaling.md: larger batches "
             "made Galera nodes vote themselves inconsistent after a view change)"),
    CONF_BOOL("database", "group_replication_allow_eventual", conf_database_t,
              group_replication_allow_eventual, NR, "false",
              "MySQL Group Replication with `group_replication_consistency = EVENTUAL`, which "
              "lets a new primary answer before it applied the old one's transactions (a stale "
              "read after a failover): idemd sets `BEFORE_ON_PRIMARY_FAILOVER` on its sessions, "
              "and when the server refuses that, connects anyway only with this `true`; "
              "otherwise the queue is held with the reason (docs/scaling.md)"),
    CONF_BOOL("database", "get_server_public_key", conf_database_t, get_server_public_key, NR,
              "false",
              "MySQL's `caching_sha2_password` without TLS: let the client library ask the server "
              "for its RSA key to send the password (a first login after a restart or `FLUSH "
              "PRIVILEGES` needs TLS or this; the key is not verified, so prefer `tls.enabled`); "
              "takes effect with libmysqlclient (MariaDB Connector/C asks on its own)"),
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
                "network; an address that is not loopback needs `token_file` (or "
                "`allow_unauthenticated = true`)"),
    CONF_STRING("metrics", "token_file", conf_metrics_t, token_file, CONF_F_READABLE, NULL, 1,
                PATH_MAX - 1, "none (no authentication)",
                "file holding a bearer token (trailing newlines removed; at least 16 bytes of "
                "letters, digits, `-._~+/`, then `=` padding) that every request must send as "
                "`Authorization: Bearer TOKEN`, else 401; refused when others may read it or "
                "its group write it. Read again on reload; `idemctl status` sends it"),
    CONF_BOOL("metrics", "allow_unauthenticated", conf_metrics_t, allow_unauthenticated, 0, "false",
              "serve a `listen` address that is not loopback (e.g. `0.0.0.0`) without "
              "`token_file`: anyone who reaches it reads `/status` (pid, counters, the last "
              "warning text, which may quote database errors). false: such a `listen` is a "
              "configuration error; loopback addresses need neither"),

    CONF_STRING("queue", "name", conf_queue_t, name, NR | RQ, NULL, 1, 255, NULL,
                "queue to consume; unique in the file"),
    CONF_STRING("queue", "handler", conf_queue_t, handler, NR | RQ, NULL, 1, PATH_MAX - 1, NULL,
                "path of the handler plugin (.so); a relative path is taken from the directory "
                "of the config file that holds it; `\"sql\"`: the built-in SQL handler, which "
                "runs the queue's `sql` statements (docs/sql-handler.md; a plugin file named "
                "sql is written `\"./sql\"`)"),
    CONF_STRING("queue", "consumer", conf_queue_t, consumer, NR, NULL, 1, 128, "the queue name",
                "dedup namespace: the `consumer` column of the record table"),
    CONF_INT("queue", "prefetch", conf_queue_t, prefetch, 0, "1000", 1, 65535,
             "unacknowledged deliveries per worker (basic.qos)"),
    CONF_INT_OR("queue", "workers", conf_queue_t, workers, 0, "auto", 1, 64, conf_auto,
                "worker processes, each with its own AMQP and database connection; `\"auto\"`: "
                "between `workers_min` and `workers_max`, added while the backlog stays and "
                "throughput grows, removed when idle (docs/performance.md); a number: that many"),
    CONF_INT("queue", "workers_min", conf_queue_t, workers_min, 0, "1", 1, 64,
             "with `workers = \"auto\"`: fewest workers; it starts 2, or this many if more"),
    CONF_INT_OR("queue", "workers_max", conf_queue_t, workers_max, 0, "auto", 1, 64, conf_auto,
                "with `workers = \"auto\"`: most workers; `\"auto\"`: 2 x online CPUs, at most "
                "16; all queues together also stay within `daemon.db_connection_budget`"),
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
    CONF_STRING("queue", "order_key", conf_queue_t, order_key, NR, "", 0, 255, "`\"\"` (unordered)",
                "per-key ordering (docs/ordering.md): `\"header:NAME\"` (an application "
                "header) or `\"json:PATH\"` (a field of the JSON body, `a.b` for nested); "
                "messages of one key are handled in publish order, a retried one blocks the "
                "later ones of its key; a message without the key is dead-lettered. Needs "
                "`workers = 1` (`\"auto\"` means 1 here) and `dedup = \"table\"`"),
    CONF_ENUM("queue", "order_dead_letter", conf_queue_t, order_dead_letter, 0, "release",
              conf_order_dls,
              "with `order_key`: dead-lettering the message a key waits on `release`s the key "
              "(its next message goes on), or `hold`s it blocked until `idemctl order release` "
              "or a replay of that dead letter"),
    CONF_GROUP("queue", "declare", 0, "declare", "what to declare at startup"),
    CONF_RAW("queue", "settings", conf_queue_t, settings, 0,
             "group handed to the handler as is; idemd does not check it"),
    CONF_LIST("queue", "sql", conf_queue_t, sql, n_sql, conf_sql_stmt_t, "sql", NR, 0, "none",
              "with `handler = \"sql\"` (and only then, at least one): the statements run for "
              "each message, in order, in its transaction (docs/sql-handler.md)"),
    CONF_LIST("queue", "publish", conf_queue_t, publish, n_publish, conf_sql_pub_t, "sql_publish",
              NR, 0, "none",
              "with `handler = \"sql\"`: onward messages written to the outbox in the "
              "message's transaction after its statements succeed (docs/sql-handler.md)"),

    CONF_BOOL("declare", "enabled", conf_queue_t, declare, NR, "true",
              "declare the queue, its dead letter queue and bindings at startup; false: they "
              "must exist"),
    CONF_BOOL("declare", "durable", conf_queue_t, durable, NR, "true",
              "durable queue; false needs `dead_letter_queue = \"\"`, and `quorum` then defaults "
              "to false"),
    CONF_BOOL("declare", "quorum", conf_queue_t, quorum, NR, "true",
              "quorum queue (`x-queue-type = \"quorum\"`, RabbitMQ 3.10+); its delay queues and "
              "dead letter queue are quorum queues too, and the delay hop back to it is "
              "at-least-once. Left unset, a queue that already exists as a classic queue is kept "
              "so (warned once: docs/rabbitmq.md), and `durable = false` or a classic-only "
              "argument (`x-max-priority`, `x-queue-mode`, `x-queue-version`) makes it false. "
              "false: classic queues, and a retried message whose delay expires while the queue "
              "is full, missing or unreachable is lost"),
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
    CONF_BOOL("declare", "single_active_consumer", conf_queue_t, single_active_consumer, NR,
              "false",
              "declare the queue with `x-single-active-consumer`: one consumer of all instances "
              "gets its messages, the others stand by (ordering across instances, "
              "docs/ordering.md); an existing queue cannot change it: declare a new one"),
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

    CONF_STRING(
        "sql", "statement", conf_sql_stmt_t, statement, NR | RQ, NULL, 1, 65535, NULL,
        "one SQL statement with `?` placeholders, prepared once per connection; checked "
        "against the database by `--check-config`, at start and on reload; it starts with "
        "SELECT, INSERT, REPLACE, UPDATE, DELETE, CALL, WITH, VALUES, TABLE or DO, holds no "
        "executable comment and no second statement (docs/sql-handler.md)"),
    CONF_STR_ARRAY("sql", "params", conf_sql_stmt_t, params, n_params, NR, 1, 262, "`[ ]`",
                   "one source per placeholder, in order: `json:PATH`, `header:NAME`, `msg:id`, "
                   "`msg:routing_key`, `msg:exchange`, `msg:timestamp`, `msg:content_type`, "
                   "`body`, `const:TEXT`; a final `?` makes it optional (absent: NULL)"),
    CONF_STRING("sql", "expect", conf_sql_stmt_t, expect, NR, NULL, 1, 64, "none (any count)",
                "affected rows the statement must report: `\"N\"`, `\"A..B\"` or `\">=N\"`"),
    CONF_ENUM("sql", "on_mismatch", conf_sql_stmt_t, on_mismatch, NR, "reject", conf_sql_verdicts,
              "when `expect` does not hold: `reject` (dead-letter), `retry` or `ok` (carry on)"),
    CONF_ENUM("sql", "on_duplicate", conf_sql_stmt_t, on_duplicate, NR, "reject", conf_sql_dups,
              "a duplicate key error: `reject` (dead-letter with the server's message) or `ok` "
              "(the statement counts as 0 rows and the next one runs)"),
    CONF_STRING("sql", "reason", conf_sql_stmt_t, reason, NR, NULL, 1, 200, "none",
                "what a mismatch of `expect` means for the business (`\"out of stock\"`): it "
                "leads the dead letter's or retry's reason, before the row counts"),

    CONF_STRING("sql_publish", "exchange", conf_sql_pub_t, exchange, NR, "", 0, 255, NULL,
                "exchange of the onward message; `\"\"`: the default exchange"),
    CONF_STRING("sql_publish", "routing_key", conf_sql_pub_t, routing_key, NR | RQ, NULL, 0, 255,
                NULL, "routing key, as written"),
    CONF_STRING("sql_publish", "body", conf_sql_pub_t, body, NR, "body", 1, 262, NULL,
                "`\"body\"` (the message's own) or `\"json:PATH\"` (that value of its JSON body: "
                "a string's text, else the JSON text)"),
    CONF_STRING("sql_publish", "content_type", conf_sql_pub_t, content_type, NR, NULL, 1, 255,
                "none", "content_type property of the onward message"),
    CONF_ARGS("sql_publish", "headers", conf_sql_pub_t, headers, n_headers, NR,
              "headers `{ NAME = \"SOURCE\"; }`, each a parameter source as in `params` (an "
              "optional one that is absent is left out)"),
    {.name = NULL},
};

#undef RQ
#undef NR
#undef SE

const conf_section_t conf_sections[] = {
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
    {"sql", "queues.[N].sql.[N]",
     "One group per statement of a queue with `handler = \"sql\"` (docs/sql-handler.md).",
     conf_check_sql},
    {"sql_publish", "queues.[N].publish.[N]",
     "One group per onward message of a queue with `handler = \"sql\"`.", conf_check_sql_publish},
    {NULL, NULL, NULL, NULL},
};

const conf_def_t *conf_find(const char *section, const char *name)
{
    for (const conf_def_t *d = conf_defs; d->name; d++)
        if (strcmp(d->section, section) == 0 && strcmp(d->name, name) == 0)
            return d;
    return NULL;
}

const conf_section_t *conf_section(const char *name)
{
    for (const conf_section_t *s = conf_sections; s->name; s++)
        if (strcmp(s->name, name) == 0)
            return s;
    return NULL;
}
