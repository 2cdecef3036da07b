/* test_conf.c: unit test of conf.c: defaults, every validation message with its FILE:LINE, dump. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <errno.h>
#include <ftw.h>
#include <libgen.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "conf.h"
#include "log.h"

static int t_n;
static int t_failed;
static char t_dir[PATH_MAX];  /* scratch directory, removed at exit */
static char t_root[PATH_MAX]; /* the repository root */

static bool ok(bool cond, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static bool ok(bool cond, const char *fmt, ...)
{
    va_list ap;
    printf("%sok %d - ", cond ? "" : "not ", ++t_n);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    if (!cond)
        t_failed++;
    return cond;
}

/* Write text to t_dir/name; returns the path (static buffer per call site is
 * not needed: callers copy it). */
static const char *write_file(const char *name, const char *text)
{
    static char path[PATH_MAX + 64];
    snprintf(path, sizeof(path), "%s/%s", t_dir, name);
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "cannot write %s: %s\n", path, strerror(errno));
        exit(2);
    }
    fputs(text, f);
    fclose(f);
    return path;
}

/* 1-based line of the first occurrence of needle in text; 0 if absent. */
static int line_of(const char *text, const char *needle)
{
    const char *p = strstr(text, needle);
    if (!p)
        return 0;
    int line = 1;
    for (const char *c = text; c < p; c++)
        line += *c == '\n';
    return line;
}

static char *read_all(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
        fwrite(chunk, 1, n, m);
    fclose(m);
    fclose(f);
    return buf;
}

static conf_t *load_text(const char *text, char *err, size_t errlen)
{
    conf_t *c = NULL;
    if (conf_load(write_file("t.conf", text), &c, err, errlen) < 0)
        return NULL;
    return c;
}

/* Load text (expected to succeed) and report the failure as a test line. */
static conf_t *must_load(const char *desc, const char *text)
{
    char err[512];
    conf_t *c = load_text(text, err, sizeof(err));
    if (!c) {
        ok(false, "%s loads", desc);
        printf("# error: %s\n", err);
    }
    return c;
}

/*
 * Load text and expect exactly "PATH:LINE: msg", LINE being the line of
 * needle in text (needle NULL: no line, "PATH: msg").
 */
static void expect_error(const char *desc, const char *text, const char *needle, const char *msg)
{
    char path[PATH_MAX + 64], err[1024], want[2 * PATH_MAX];
    conf_t *c = (conf_t *)0x1;
    snprintf(path, sizeof(path), "%s", write_file("t.conf", text));
    int rc = conf_load(path, &c, err, sizeof(err));
    if (needle)
        snprintf(want, sizeof(want), "%s:%d: %s", path, line_of(text, needle), msg);
    else
        snprintf(want, sizeof(want), "%s: %s", path, msg);
    if (needle && line_of(text, needle) == 0) {
        ok(false, "%s (test bug: \"%s\" not in text)", desc, needle);
        return;
    }
    bool good = rc == -1 && c == NULL && strcmp(err, want) == 0;
    if (!ok(good, "%s", desc)) {
        printf("# want: %s\n#  got: rc=%d out=%s err=%s\n", want, rc, c ? "set" : "NULL", err);
        if (rc == 0)
            conf_free(c);
    }
}

/* Pieces of small configs. */
#define DB "database = { database = \"t\"; };\n"
#define Q_OPEN "queues = (\n  { name = \"q1\"; handler = \"h.so\";\n"
#define Q_CLOSE "  }\n);\n"
#define Q1(extra) Q_OPEN extra Q_CLOSE

static void test_defaults(void)
{
    const char *text = "database = { database = \"shop\"; };\n"
                       "queues = ( { name = \"orders.pay\"; handler = \"plugins/op.so\"; } );\n";
    conf_t *c = must_load("minimal inline config", text);
    if (!c)
        return;
    ok(strcmp(c->path, write_file("t.conf", text)) == 0, "path kept");
    ok(c->log_level == LOG_LEVEL_INFO, "daemon.log_level default info (6)");
    ok(c->shutdown_timeout == 30, "daemon.shutdown_timeout default 30");
    ok(c->reconcile_interval == 0, "daemon.reconcile_interval default 0");
    ok(strcmp(c->broker.host, "127.0.0.1") == 0, "broker.host default");
    ok(c->broker.port == 5672, "broker.port default 5672");
    ok(strcmp(c->broker.vhost, "/") == 0, "broker.vhost default /");
    ok(strcmp(c->broker.user, "guest") == 0, "broker.user default guest");
    ok(strcmp(c->broker.password, "guest") == 0, "broker.password default guest");
    ok(c->broker.heartbeat == 30, "broker.heartbeat default 30");
    ok(strcmp(c->database.host, "127.0.0.1") == 0, "database.host default");
    ok(c->database.port == 3306, "database.port default 3306");
    ok(c->database.socket == NULL, "database.socket default unset");
    ok(strcmp(c->database.user, "idemd") == 0, "database.user default idemd");
    ok(c->database.password == NULL, "database.password default unset");
    ok(strcmp(c->database.database, "shop") == 0, "database.database read");
    ok(strcmp(c->database.record_table, "msg_id_record") == 0, "database.record_table default");
    ok(c->database.connect_timeout == 5 && c->database.read_timeout == 30 &&
           c->database.write_timeout == 30,
       "database timeouts default 5/30/30");
    ok(c->n_queues == 1, "one queue");
    conf_queue_t *q = &c->queues[0];
    ok(strcmp(q->name, "orders.pay") == 0, "queue name read");
    char want_handler[PATH_MAX + 64];
    snprintf(want_handler, sizeof(want_handler), "%s/plugins/op.so", t_dir);
    ok(strcmp(q->handler, want_handler) == 0,
       "a relative handler path is taken from the config file's directory, made absolute");
    ok(q->consumer && strcmp(q->consumer, "orders.pay") == 0, "consumer defaults to the name");
    ok(q->prefetch == 1000, "prefetch default 1000");
    ok(q->workers == CONF_WORKERS_AUTO && q->workers_min == 1 &&
           q->workers_max == CONF_WORKERS_AUTO,
       "workers default \"auto\", workers_min 1, workers_max \"auto\"");
    ok(c->db_connection_budget == CONF_WORKERS_AUTO, "db_connection_budget default \"auto\"");
    ok(q->dedup == CONF_DEDUP_TABLE, "dedup default table");
    ok(q->id_header == NULL, "id_header default unset (message_id property)");
    ok(q->batch_size == 500 && q->batch_wait_ms == 0, "batch_size 500, batch_wait_ms 0");
    ok(q->max_attempts == 5, "max_attempts default 5");
    ok(q->n_retry_delays == 3 && q->retry_delays_ms[0] == 1000 && q->retry_delays_ms[1] == 10000 &&
           q->retry_delays_ms[2] == 60000,
       "retry_delays_ms default [1000, 10000, 60000]");
    ok(q->handler_timeout == 30, "handler_timeout default 30");
    ok(q->declare && q->durable && q->quorum && q->quorum_default,
       "declare: enabled, durable, quorum by default");
    ok(q->dead_letter_queue && strcmp(q->dead_letter_queue, "orders.pay.dlq") == 0,
       "dead_letter_queue default: the name + .dlq");
    ok(q->args == NULL && q->n_args == 0, "no arguments");
    ok(q->bindings == NULL && q->n_bindings == 0, "no bindings");
    ok(q->settings == NULL, "no settings group");
    ok(q->line == 2, "queue line is the line of its group (2, got %d)", q->line);
    conf_free(c);
}

static void test_values(void)
{
    const char *text =
        "daemon = { log_level = \"debug\"; shutdown_timeout = 3600;\n"
        "  reconcile_interval = 60; };\n"
        "broker = { host = \"mq\"; port = 5673; vhost = \"v\"; user = \"u\";\n"
        "  password = \"p\"; heartbeat = 0; };\n"
        "database = { socket = \"/run/m.sock\"; user = \"du\"; password = \"dp\";\n"
        "  database = \"d\"; record_table = \"Rec_1\"; connect_timeout = 1;\n"
        "  read_timeout = 3600; write_timeout = 7; };\n"
        "queues = (\n"
        "  { name = \"a\"; handler = \"/x/a.so\"; consumer = \"ns\"; prefetch = 1;\n"
        "    workers = 64; dedup = \"none\"; id_header = \"x-msg-id\";\n"
        "    batch_size = 1000; batch_wait_ms = 10000; max_attempts = 1000;\n"
        "    retry_delays_ms = [ 1000, 10000, 86400000 ]; handler_timeout = 3600;\n"
        "    declare = { enabled = false; durable = true; quorum = true;\n"
        "      dead_letter_queue = \"a.dlq\";\n"
        "      arguments = { x-max-length = 100000; x-overflow = \"reject-publish\";\n"
        "                    x-big = 5000000000L; };\n"
        "      bindings = ( { exchange = \"ex\"; routing_key = \"rk\"; },\n"
        "                   { exchange = \"ex2\"; } ); };\n"
        "  },\n"
        "  { name = \"b\"; handler = \"b.so\"; prefetch = 65535;\n"
        "    retry_delays_ms = ( 1 ); }\n"
        ");\n";
    conf_t *c = must_load("config with every setting", text);
    if (!c)
        return;
    ok(c->log_level == LOG_LEVEL_DEBUG, "log_level debug = 7");
    ok(c->shutdown_timeout == 3600 && c->reconcile_interval == 60, "daemon ints read");
    ok(strcmp(c->broker.host, "mq") == 0 && c->broker.port == 5673 &&
           strcmp(c->broker.vhost, "v") == 0 && strcmp(c->broker.user, "u") == 0 &&
           strcmp(c->broker.password, "p") == 0 && c->broker.heartbeat == 0,
       "broker settings read");
    ok(strcmp(c->database.socket, "/run/m.sock") == 0 && strcmp(c->database.user, "du") == 0 &&
           strcmp(c->database.password, "dp") == 0 &&
           strcmp(c->database.record_table, "Rec_1") == 0,
       "database strings read");
    ok(c->database.connect_timeout == 1 && c->database.read_timeout == 3600 &&
           c->database.write_timeout == 7,
       "database timeouts read");
    ok(c->n_queues == 2, "two queues");
    conf_queue_t *a = &c->queues[0], *b = &c->queues[1];
    ok(strcmp(a->consumer, "ns") == 0, "explicit consumer kept");
    ok(a->prefetch == 1 && a->workers == 64 && a->dedup == CONF_DEDUP_NONE, "a: ints, dedup none");
    ok(strcmp(a->id_header, "x-msg-id") == 0, "id_header read");
    ok(a->batch_size == 1000 && a->batch_wait_ms == 10000 && a->max_attempts == 1000 &&
           a->handler_timeout == 3600,
       "a: batch/attempts/timeout at their maxima");
    ok(a->n_retry_delays == 3 && a->retry_delays_ms[0] == 1000 && a->retry_delays_ms[1] == 10000 &&
           a->retry_delays_ms[2] == 86400000,
       "retry_delays_ms array read");
    ok(!a->declare && a->durable && a->quorum, "declare booleans read");
    ok(strcmp(a->dead_letter_queue, "a.dlq") == 0, "dead_letter_queue read");
    ok(a->n_args == 3 && strcmp(a->args[0].key, "x-max-length") == 0 && a->args[0].is_int &&
           a->args[0].ival == 100000 && a->args[0].sval == NULL,
       "integer argument");
    ok(a->n_args == 3 && strcmp(a->args[1].key, "x-overflow") == 0 && !a->args[1].is_int &&
           strcmp(a->args[1].sval, "reject-publish") == 0,
       "string argument");
    ok(a->n_args == 3 && a->args[2].is_int && a->args[2].ival == 5000000000LL,
       "64-bit integer argument");
    ok(a->n_bindings == 2 && strcmp(a->bindings[0].exchange, "ex") == 0 &&
           strcmp(a->bindings[0].routing_key, "rk") == 0,
       "binding read");
    ok(a->n_bindings == 2 && strcmp(a->bindings[1].exchange, "ex2") == 0 &&
           strcmp(a->bindings[1].routing_key, "") == 0,
       "binding routing_key defaults to \"\"");
    ok(a->line == 9 && b->line == 20, "queue lines 9 and 20 (got %d, %d)", a->line, b->line);
    ok(strcmp(b->consumer, "b") == 0 && b->prefetch == 65535, "b: consumer default, prefetch max");
    ok(b->n_retry_delays == 1 && b->retry_delays_ms[0] == 1, "retry_delays_ms as a list ( )");
    ok(b->declare && b->durable && b->quorum && b->quorum_default,
       "b: declare defaults with no declare group (quorum, by default)");
    conf_free(c);

    static const struct {
        const char *name;
        int level;
    } levels[] = {{"error", 3}, {"warning", 4}, {"info", 6}, {"debug", 7}};
    for (size_t i = 0; i < sizeof(levels) / sizeof(levels[0]); i++) {
        char t[256];
        snprintf(t, sizeof(t), "daemon = { log_level = \"%s\"; };\n" DB Q1(""), levels[i].name);
        c = must_load(levels[i].name, t);
        ok(c && c->log_level == levels[i].level, "log_level \"%s\" = %d", levels[i].name,
           levels[i].level);
        conf_free(c);
    }
}

static void test_range_errors(void)
{
    expect_error("prefetch -1", DB Q1("    prefetch = -1;\n"), "prefetch",
                 "queues.[0].prefetch: must be between 1 and 65535 (got -1)");
    expect_error("prefetch 65536", DB Q1("    prefetch = 65536;\n"), "prefetch",
                 "queues.[0].prefetch: must be between 1 and 65535 (got 65536)");
    expect_error("workers 0", DB Q1("    workers = 0;\n"), "workers",
                 "queues.[0].workers: must be between 1 and 64 (got 0)");
    expect_error("workers 65", DB Q1("    workers = 65;\n"), "workers",
                 "queues.[0].workers: must be between 1 and 64 (got 65)");
    expect_error("workers a word", DB Q1("    workers = \"many\";\n"), "workers",
                 "queues.[0].workers: must be an integer between 1 and 64 or \"auto\" (got "
                 "\"many\")");
    expect_error("workers a float", DB Q1("    workers = 2.5;\n"), "workers",
                 "queues.[0].workers: must be an integer between 1 and 64 or \"auto\" (got a "
                 "float)");
    expect_error("workers_max 0", DB Q1("    workers_max = 0;\n"), "workers_max",
                 "queues.[0].workers_max: must be between 1 and 64 (got 0)");
    expect_error("workers_min over workers_max",
                 DB Q1("    workers_min = 5;\n    workers_max = 4;\n"), "workers_min",
                 "queues.[0].workers_min: 5 is more than workers_max = 4");
    expect_error("db_connection_budget 0", "daemon = { db_connection_budget = 0; };\n" DB Q1(""),
                 "db_connection_budget",
                 "daemon.db_connection_budget: must be between 1 and 100000 (got 0)");
    expect_error("batch_size 0", DB Q1("    batch_size = 0;\n"), "batch_size",
                 "queues.[0].batch_size: must be between 1 and 1000 (got 0)");
    expect_error("batch_size 1001", DB Q1("    batch_size = 1001;\n"), "batch_size",
                 "queues.[0].batch_size: must be between 1 and 1000 (got 1001)");
    expect_error("batch_wait_ms -1", DB Q1("    batch_wait_ms = -1;\n"), "batch_wait_ms",
                 "queues.[0].batch_wait_ms: must be between 0 and 10000 (got -1)");
    expect_error("batch_wait_ms 10001", DB Q1("    batch_wait_ms = 10001;\n"), "batch_wait_ms",
                 "queues.[0].batch_wait_ms: must be between 0 and 10000 (got 10001)");
    expect_error("max_attempts 0", DB Q1("    max_attempts = 0;\n"), "max_attempts",
                 "queues.[0].max_attempts: must be between 1 and 1000 (got 0)");
    expect_error("max_attempts 1001", DB Q1("    max_attempts = 1001;\n"), "max_attempts",
                 "queues.[0].max_attempts: must be between 1 and 1000 (got 1001)");
    expect_error("handler_timeout 3601", DB Q1("    handler_timeout = 3601;\n"), "handler_timeout",
                 "queues.[0].handler_timeout: must be between 0 and 3600 (got 3601)");
    expect_error("retry_delays_ms element 0, on its own line",
                 DB Q1("    retry_delays_ms = [ 1000,\n      0 ];\n"), "0 ]",
                 "queues.[0].retry_delays_ms.[1]: must be between 1 and 86400000 (got 0)");
    expect_error("retry_delays_ms element too big", DB Q1("    retry_delays_ms = [ 86400001 ];\n"),
                 "retry_delays_ms",
                 "queues.[0].retry_delays_ms.[0]: must be between 1 and 86400000 (got 86400001)");
    expect_error("retry_delays_ms list with a string",
                 DB Q1("    retry_delays_ms = ( 5, \"x\" );\n"), "retry_delays_ms",
                 "queues.[0].retry_delays_ms.[1]: must be an integer (got a string)");
    expect_error("second queue's prefetch",
                 DB "queues = ( { name = \"a\"; handler = \"a.so\"; },\n"
                    "  { name = \"b\"; handler = \"b.so\";\n    prefetch = 0; } );\n",
                 "prefetch", "queues.[1].prefetch: must be between 1 and 65535 (got 0)");
    expect_error("heartbeat 3601", "broker = { heartbeat = 3601; };\n" DB Q1(""), "heartbeat",
                 "broker.heartbeat: must be between 0 and 3600 (got 3601)");
    expect_error("heartbeat -1", "broker = { heartbeat = -1; };\n" DB Q1(""), "heartbeat",
                 "broker.heartbeat: must be between 0 and 3600 (got -1)");
    expect_error("broker.port 0", "broker = {\n  port = 0;\n};\n" DB Q1(""), "port",
                 "broker.port: must be between 1 and 65535 (got 0)");
    expect_error("database.port 65536",
                 "database = { database = \"t\";\n  port = 65536; };\n" Q1(""), "port",
                 "database.port: must be between 1 and 65535 (got 65536)");
    expect_error("connect_timeout 0",
                 "database = { database = \"t\";\n  connect_timeout = 0; };\n" Q1(""),
                 "connect_timeout", "database.connect_timeout: must be between 1 and 3600 (got 0)");
    expect_error("read_timeout 3601",
                 "database = { database = \"t\";\n  read_timeout = 3601; };\n" Q1(""),
                 "read_timeout", "database.read_timeout: must be between 1 and 3600 (got 3601)");
    expect_error("write_timeout 0",
                 "database = { database = \"t\";\n  write_timeout = 0; };\n" Q1(""),
                 "write_timeout", "database.write_timeout: must be between 1 and 3600 (got 0)");
    expect_error("shutdown_timeout 0", "daemon = { shutdown_timeout = 0; };\n" DB Q1(""),
                 "shutdown_timeout", "daemon.shutdown_timeout: must be between 1 and 3600 (got 0)");
    expect_error("reconcile_interval -5", "daemon = { reconcile_interval = -5; };\n" DB Q1(""),
                 "reconcile_interval",
                 "daemon.reconcile_interval: must be between 0 and 86400 (got -5)");
    expect_error("64-bit value out of range", DB Q1("    prefetch = 5000000000L;\n"), "prefetch",
                 "queues.[0].prefetch: must be between 1 and 65535 (got 5000000000)");
}

static void test_type_errors(void)
{
    expect_error("log_level unknown", "\ndaemon = { log_level = \"verbose\"; };\n" DB Q1(""),
                 "log_level",
                 "daemon.log_level: must be one of error, warning, info, debug (got \"verbose\")");
    expect_error("log_level not a string", "daemon = { log_level = 7; };\n" DB Q1(""), "log_level",
                 "daemon.log_level: must be one of error, warning, info, debug (got an integer)");
    expect_error("dedup unknown", DB Q1("    dedup = \"maybe\";\n"), "dedup",
                 "queues.[0].dedup: must be one of table, none (got \"maybe\")");
    expect_error("prefetch as a string", DB Q1("    prefetch = \"200\";\n"), "prefetch",
                 "queues.[0].prefetch: must be an integer (got a string)");
    expect_error("prefetch as a float", DB Q1("    prefetch = 2.5;\n"), "prefetch",
                 "queues.[0].prefetch: must be an integer (got a float)");
    expect_error("durable as an integer", DB Q1("    declare = {\n      durable = 1; };\n"),
                 "durable", "queues.[0].declare.durable: must be true or false (got an integer)");
    expect_error("host as an integer", "broker = { host = 5; };\n" DB Q1(""), "host",
                 "broker.host: must be a string (got an integer)");
    expect_error("retry_delays_ms scalar", DB Q1("    retry_delays_ms = 5;\n"), "retry_delays_ms",
                 "queues.[0].retry_delays_ms: must be an array of integers like [ 1000, 10000 ] "
                 "(got an integer)");
    expect_error(
        "argument is a float", DB Q1("    declare = { arguments = {\n      x-ttl = 1.5; }; };\n"),
        "x-ttl",
        "queues.[0].declare.arguments.x-ttl: must be a string or an integer (got a float)");
    expect_error(
        "argument is a boolean",
        DB Q1("    declare = { arguments = {\n      x-single-active-consumer = true; }; };\n"),
        "x-single",
        "queues.[0].declare.arguments.x-single-active-consumer: "
        "must be a string or an integer (got a boolean)");
    expect_error(
        "arguments not a group", DB Q1("    declare = { arguments = ( 1 ); };\n"), "arguments",
        "queues.[0].declare.arguments: must be a group { name = value; ... } (got a list)");
    expect_error("bindings is a group",
                 DB Q1("    declare = { bindings = { exchange = \"e\"; }; };\n"), "bindings",
                 "queues.[0].declare.bindings: must be a list ( { ... }, ... ) (got a group)");
    expect_error("binding is a string", DB Q1("    declare = { bindings = ( \"e\" ); };\n"),
                 "bindings",
                 "queues.[0].declare.bindings.[0]: must be a group { ... } (got a string)");
    expect_error("queues is a group", DB "queues = { name = \"a\"; };\n", "queues",
                 "queues: must be a list ( { ... }, ... ) (got a group)");
    expect_error("queue is a string", DB "queues = ( \"a\" );\n", "queues",
                 "queues.[0]: must be a group { ... } (got a string)");
    expect_error("declare not a group", DB Q1("    declare = true;\n"), "declare",
                 "queues.[0].declare: must be a group { ... } (got a boolean)");
    expect_error("settings not a group", DB Q1("    settings = \"x\";\n"), "settings",
                 "queues.[0].settings: must be a group { ... } (got a string)");
    expect_error("broker not a group", "broker = 1;\n" DB Q1(""), "broker",
                 "broker: must be a group { ... } (got an integer)");
}

/* Settings RabbitMQ would refuse at every worker start, or that lose messages. */
static void test_declare_rules(void)
{
    char text[2048], name[256];
    expect_error("durable = false with the default dead letter queue",
                 DB Q1("    declare = {\n      durable = false; };\n"), "durable",
                 "queues.[0].declare.durable: false cannot be used with a dead letter queue "
                 "(\"q1.dlq\"): idemd declares its dead letter queue durable, and RabbitMQ "
                 "refuses to declare it again as transient; set durable = true, or "
                 "dead_letter_queue = \"\" for none");
    expect_error("durable = false with quorum = true",
                 DB Q1("    declare = { quorum = true; dead_letter_queue = \"\";\n"
                       "      durable = false; };\n"),
                 "durable",
                 "queues.[0].declare.durable: false cannot be used with quorum = true: RabbitMQ "
                 "declares quorum queues durable only");
    conf_t *c = must_load("durable = false without a dead letter queue",
                          DB Q1("    declare = { durable = false; dead_letter_queue = \"\"; };\n"));
    ok(c && !c->queues[0].durable, "durable = false read");
    conf_free(c);

    /* 236 bytes + ".retry.60000" = 248 is fine; 244 + ".retry.10000" = 256 is not. */
    memset(name, 'n', sizeof(name));
    snprintf(text, sizeof(text),
             DB "queues = ( { handler = \"h\"; consumer = \"c\";\n"
                "  name = \"%.236s\"; } );\n",
             name);
    c = must_load("a name whose delay queues are 248 bytes", text);
    conf_free(c);
    snprintf(text, sizeof(text),
             DB "queues = ( { handler = \"h\"; consumer = \"c\";\n"
                "  name = \"%.244s\"; } );\n",
             name);
    name[244] = '\0';
    char want[1024];
    snprintf(want, sizeof(want),
             "queues.[0].name: the delay queue \"%s.retry.10000\" would be 256 bytes long, "
             "more than RabbitMQ's 255: shorten the queue name or set retry_delays_ms = [ ]",
             name);
    expect_error("a name whose default delay queue passes 255 bytes", text, "name", want);
    snprintf(text, sizeof(text),
             DB "queues = ( { handler = \"h\"; consumer = \"c\";\n"
                "  name = \"%s\";\n  retry_delays_ms = [ 5, 86400000 ]; } );\n",
             name);
    snprintf(want, sizeof(want),
             "queues.[0].retry_delays_ms: the delay queue \"%s.retry.86400000\" would be 259 "
             "bytes long, more than RabbitMQ's 255: shorten the queue name or set "
             "retry_delays_ms = [ ]",
             name);
    expect_error("a delay tier whose queue name passes 255 bytes", text, "retry_delays_ms", want);
    snprintf(text, sizeof(text),
             DB "queues = ( { handler = \"h\"; consumer = \"c\";\n"
                "  name = \"%s\"; retry_delays_ms = [ ];\n"
                "  declare = { dead_letter_queue = \"\"; }; } );\n",
             name);
    c = must_load("a long name without delay tiers", text);
    conf_free(c);

    expect_error("a length limit with the default overflow",
                 DB Q1("    declare = { arguments = {\n      x-max-length = 1000; }; };\n"),
                 "x-max-length",
                 "queues.[0].declare.arguments.x-max-length: a length limit with x-overflow "
                 "\"drop-head\" (the default) makes the broker drop the oldest messages, "
                 "unprocessed, when the queue is full: set x-overflow = \"reject-publish\"");
    expect_error("a byte limit with drop-head, quorum",
                 DB Q1("    declare = { quorum = true; arguments = { x-overflow = \"drop-head\";\n"
                       "      x-max-length-bytes = 1000000; }; };\n"),
                 "x-max-length-bytes",
                 "queues.[0].declare.arguments.x-max-length-bytes: a length limit with "
                 "x-overflow \"drop-head\" (the default) makes the broker drop the oldest "
                 "messages, unprocessed, when the queue is full: set x-overflow = "
                 "\"reject-publish\"");
    expect_error("a length limit on a classic queue with delay tiers",
                 DB Q1("    declare = { quorum = false; arguments = {\n"
                       "      x-overflow = \"reject-publish\";\n"
                       "      x-max-length = 1000; }; };\n"),
                 "x-max-length",
                 "queues.[0].declare.arguments.x-max-length: with classic queues the delay "
                 "queues dead-letter back to this queue without confirms, so a retried message "
                 "whose delay expires while the queue is full is lost: set declare.quorum = true "
                 "(an at-least-once hop) or retry_delays_ms = [ ]");
    expect_error("reject-publish-dlx on a quorum queue",
                 DB Q1("    declare = { quorum = true; arguments = {\n"
                       "      x-overflow = \"reject-publish-dlx\"; }; };\n"),
                 "x-overflow",
                 "queues.[0].declare.arguments.x-overflow: quorum queues take only \"drop-head\" "
                 "or \"reject-publish\"; use \"reject-publish\"");
    expect_error("x-overflow as an integer",
                 DB Q1("    declare = { arguments = {\n      x-overflow = 1; }; };\n"),
                 "x-overflow",
                 "queues.[0].declare.arguments.x-overflow: must be a string: \"reject-publish\" "
                 "(or \"drop-head\", refused with a length limit)");
    c = must_load("a length limit with reject-publish on a quorum queue",
                  DB Q1("    declare = { quorum = true; arguments = { x-max-length = 1000;\n"
                        "      x-overflow = \"reject-publish\"; }; };\n"));
    conf_free(c);
    c = must_load("a length limit with reject-publish, classic, no delay tiers",
                  DB Q1("    retry_delays_ms = [ ];\n"
                        "    declare = { quorum = false; arguments = { x-max-length-bytes = 1000;\n"
                        "      x-overflow = \"reject-publish\"; }; };\n"));
    conf_free(c);

    /* What a classic queue risks is said, not refused. */
    char note[1024];
    c = must_load("the minimal queue: quorum by default", DB Q1(""));
    ok(c && c->queues[0].quorum && c->queues[0].quorum_default &&
           conf_queue_risk(c, 0, note, sizeof(note)) == 0,
       "the minimal queue: a quorum queue by default, nothing to say");
    conf_free(c);
    c = must_load("durable = false: classic by default",
                  DB Q1("    declare = { durable = false; dead_letter_queue = \"\"; };\n"));
    ok(c && !c->queues[0].quorum && c->queues[0].quorum_default,
       "durable = false and quorum unset: a classic queue");
    conf_free(c);
    c = must_load("x-max-priority: classic by default",
                  DB Q1("    declare = { arguments = { x-max-priority = 5; }; };\n"));
    ok(c && !c->queues[0].quorum, "a classic-only argument and quorum unset: a classic queue");
    conf_free(c);
    c = must_load("quorum = true, explicit", DB Q1("    declare = { quorum = true; };\n"));
    ok(c && c->queues[0].quorum && !c->queues[0].quorum_default,
       "quorum = true set: not the default (an existing classic queue is an error)");
    conf_free(c);
    expect_error("durable = false with quorum = true set",
                 DB Q1("    declare = { durable = false; quorum = true;\n"
                       "      dead_letter_queue = \"\"; };\n"),
                 "durable",
                 "queues.[0].declare.durable: false cannot be used with quorum = true: RabbitMQ "
                 "declares quorum queues durable only");
    c = must_load("classic queue with delay tiers", DB Q1("    declare = { quorum = false; };\n"));
    ok(c && conf_queue_risk(c, 0, note, sizeof(note)) == 1 &&
           strstr(note, ":3: queues.[0].declare.quorum: false: queue 'q1' is a classic queue") &&
           strstr(note, "(an at-most-once hop)"),
       "classic queue with delay tiers: the at-most-once hop is named");
    conf_free(c);
    c = must_load("quorum queue", DB Q1("    declare = { quorum = true; };\n"));
    ok(c && conf_queue_risk(c, 0, note, sizeof(note)) == 0, "quorum queue: nothing to say");
    conf_free(c);
    c = must_load("classic queue without delay tiers",
                  DB Q1("    retry_delays_ms = [ ];\n    declare = { quorum = false; };\n"));
    ok(c && conf_queue_risk(c, 0, note, sizeof(note)) == 0, "no delay tiers: nothing to say");
    conf_free(c);
}

static void test_required(void)
{
    expect_error("database.database missing: line of the database group",
                 "\ndatabase = {\n  user = \"x\";\n};\n" Q1(""), "database = {",
                 "database.database: required setting is missing");
    expect_error("no database group at all: no line to give", Q1(""), NULL,
                 "database.database: required setting is missing");
    expect_error("database.database empty", "database = { database = \"\"; };\n" Q1(""), "database",
                 "database.database: must not be empty");
    expect_error("queues missing", DB, NULL, "queues: required setting is missing");
    expect_error("queues empty", DB "\nqueues = ( );\n", "queues",
                 "queues: must hold at least 1 group");
    expect_error("queue name missing: line of the queue group",
                 DB "queues = (\n  { handler = \"h.so\"; }\n);\n", "{ handler",
                 "queues.[0].name: required setting is missing");
    expect_error("queue handler missing",
                 DB
                 "queues = (\n  { name = \"a\"; handler = \"a.so\"; },\n  { name = \"b\"; }\n);\n",
                 "{ name = \"b\"", "queues.[1].handler: required setting is missing");
    expect_error("queue name empty", DB "queues = ( { name = \"\"; handler = \"h\"; } );\n", "name",
                 "queues.[0].name: must not be empty");
    expect_error("binding without exchange",
                 DB Q1("    declare = { bindings = (\n      { routing_key = \"k\"; } ); };\n"),
                 "{ routing_key",
                 "queues.[0].declare.bindings.[0].exchange: "
                 "required setting is missing");
    expect_error(
        "duplicate queue names",
        DB "queues = (\n  { name = \"a\"; handler = \"h\"; },\n  { name = \"b\"; handler = "
           "\"h\"; },\n  { handler = \"h\";\n    name = \"a\"; }\n);\n",
        "    name = \"a\"", "queues.[2].name: duplicate queue name \"a\" (first at line 3)");
    expect_error(
        "record_table with SQL in it",
        "database = { database = \"t\";\n  record_table = \"t; DROP TABLE x\"; };\n" Q1(""),
        "record_table",
        "database.record_table: may contain only letters, digits and '_' "
        "(got \"t; DROP TABLE x\")");
    expect_error("record_table with a dot",
                 "database = { database = \"t\";\n  record_table = \"db.t\"; };\n" Q1(""),
                 "record_table",
                 "database.record_table: may contain only letters, digits and '_' "
                 "(got \"db.t\")");
    expect_error("record_table empty",
                 "database = { database = \"t\";\n  record_table = \"\"; };\n" Q1(""),
                 "record_table", "database.record_table: must not be empty");
    expect_error("id_header empty", DB Q1("    id_header = \"\";\n"), "id_header",
                 "queues.[0].id_header: must not be empty");
    char long_name[300], text[600];
    memset(long_name, 'n', 129);
    long_name[129] = '\0';
    snprintf(text, sizeof(text), DB Q1("    consumer = \"%s\";\n"), long_name);
    expect_error("consumer longer than 128 bytes", text, "consumer",
                 "queues.[0].consumer: must be at most 128 bytes long (got 129)");
    snprintf(text, sizeof(text), DB "queues = (\n  { handler = \"h\";\n    name = \"%s\"; }\n);\n",
             long_name);
    expect_error("queue name too long for the default consumer", text, "name",
                 "queues.[0].consumer: the default (the queue name) is longer than 128 bytes: "
                 "set it");
    expect_error("dead_letter_queue equal to the name",
                 DB Q1("    declare = {\n      dead_letter_queue = \"q1\"; };\n"), "dead_letter",
                 "queues.[0].declare.dead_letter_queue: must differ from the queue's name");
    expect_error("x-queue-type in arguments",
                 DB Q1("    declare = { arguments = {\n      x-queue-type = \"quorum\"; }; };\n"),
                 "x-queue-type",
                 "queues.[0].declare.arguments.x-queue-type: set declare.quorum instead");
    {
        conf_t *c2 = must_load("empty dead_letter_queue turns it off",
                               DB Q1("    declare = { dead_letter_queue = \"\"; };\n"));
        ok(c2 && c2->queues[0].dead_letter_queue == NULL, "dead_letter_queue \"\" is off");
        conf_free(c2);
        c2 = must_load("retry_delays_ms = [] means no delay tiers",
                       DB Q1("    retry_delays_ms = [ ];\n"));
        ok(c2 && c2->queues[0].n_retry_delays == 0, "retry_delays_ms [] has no tiers");
        conf_free(c2);
    }
    test_declare_rules();
    conf_t *c = must_load("x-dead-letter-exchange without dead_letter_queue",
                          DB Q1("    declare = { arguments = { x-dead-letter-exchange = \"dlx\"; "
                                "}; };\n"));
    ok(c && c->queues[0].n_args == 1, "x-dead-letter-exchange alone is allowed");
    conf_free(c);
    c = must_load("two queues sharing a consumer",
                  DB "queues = ( { name = \"a\"; handler = \"h\"; consumer = \"x\"; },\n"
                     "  { name = \"b\"; handler = \"h\"; consumer = \"x\"; } );\n");
    ok(c && c->n_queues == 2, "a shared consumer is allowed");
    conf_free(c);
}

static void test_unknown(void)
{
    expect_error("unknown top-level group, with a hint", "brokr = { host = \"x\"; };\n" DB Q1(""),
                 "brokr", "brokr: unknown setting (did you mean \"broker\"?)");
    expect_error("unknown in daemon", "daemon = {\n  loglevel = \"info\"; };\n" DB Q1(""),
                 "loglevel", "daemon.loglevel: unknown setting (did you mean \"log_level\"?)");
    expect_error("unknown in broker", "broker = {\n  hots = \"x\"; };\n" DB Q1(""), "hots",
                 "broker.hots: unknown setting (did you mean \"hosts\"?)");
    expect_error("unknown in database",
                 "database = { database = \"t\";\n  pasword = \"x\"; };\n" Q1(""), "pasword",
                 "database.pasword: unknown setting (did you mean \"password\"?)");
    expect_error("unknown in a queue, no close name", DB Q1("    prefetch_count = 5;\n"),
                 "prefetch_count", "queues.[0].prefetch_count: unknown setting");
    expect_error("unknown in declare", DB Q1("    declare = {\n      durabel = true; };\n"),
                 "durabel",
                 "queues.[0].declare.durabel: unknown setting (did you mean \"durable\"?)");
    expect_error("unknown in a binding",
                 DB Q1("    declare = { bindings = ( { exchange = \"e\";\n      routingkey = "
                       "\"k\"; } ); };\n"),
                 "routingkey",
                 "queues.[0].declare.bindings.[0].routingkey: unknown setting "
                 "(did you mean \"routing_key\"?)");
}

static void test_settings_passthrough(void)
{
    const char *text = DB Q1("    settings = {\n      table = \"orders\"; guard = false;\n"
                             "      anything_goes = 5; nested = { x = [ 1, 2 ]; }; };\n");
    conf_t *c = must_load("plugin settings with names idemd does not know", text);
    if (!c)
        return;
    const config_setting_t *s = c->queues[0].settings;
    const char *table = NULL;
    int guard = -1, any = 0;
    ok(s != NULL, "settings pointer kept");
    ok(s && config_setting_lookup_string(s, "table", &table) && strcmp(table, "orders") == 0,
       "settings.table readable through the pointer");
    ok(s && config_setting_lookup_bool(s, "guard", &guard) && guard == 0, "settings.guard read");
    ok(s && config_setting_lookup_int(s, "anything_goes", &any) && any == 5,
       "unknown plugin setting passed through");
    const config_setting_t *x = s ? config_setting_lookup((config_setting_t *)s, "nested.x") : NULL;
    ok(x && config_setting_length(x) == 2, "nested plugin group passed through");
    ok(s && config_setting_source_line(s) == (unsigned)line_of(text, "settings"),
       "settings line kept for the plugin's own messages");
    conf_free(c);
}

static void test_passwords(void)
{
    char pw[PATH_MAX + 64], text[PATH_MAX * 2 + 256];
    conf_t *c;

    snprintf(pw, sizeof(pw), "%s", write_file("amqp.pw", "s3cr\"et\n"));
    snprintf(text, sizeof(text), "broker = { password_file = \"%s\"; };\n" DB Q1(""), pw);
    c = must_load("broker.password_file", text);
    ok(c && strcmp(c->broker.password, "s3cr\"et") == 0, "password_file read, newline stripped");
    conf_free(c);

    snprintf(pw, sizeof(pw), "%s", write_file("db.pw", "dbpass\r\n\n"));
    snprintf(text, sizeof(text),
             "database = { database = \"t\"; password_file = \"%s\"; };\n" Q1(""), pw);
    c = must_load("database.password_file", text);
    ok(c && strcmp(c->database.password, "dbpass") == 0, "CR/LF at the end stripped");
    conf_free(c);

    snprintf(pw, sizeof(pw), "%s", write_file("inner.pw", "a b\nc\n"));
    snprintf(text, sizeof(text),
             "database = { database = \"t\"; password_file = \"%s\"; };\n" Q1(""), pw);
    c = must_load("password with an inner newline", text);
    ok(c && strcmp(c->database.password, "a b\nc") == 0, "only trailing newlines stripped");
    conf_free(c);

    char msg[PATH_MAX + 256];
    snprintf(text, sizeof(text),
             "database = { database = \"t\";\n  password_file = \"%s/nope.pw\"; };\n" Q1(""),
             t_dir);
    snprintf(msg, sizeof(msg),
             "database.password_file: cannot open \"%s/nope.pw\": No such file or directory",
             t_dir);
    expect_error("password_file missing: path and errno text", text, "password_file", msg);

    snprintf(text, sizeof(text),
             "database = { database = \"t\";\n  password_file = \"%s\"; };\n" Q1(""), t_dir);
    snprintf(msg, sizeof(msg), "database.password_file: cannot read \"%s\": Is a directory", t_dir);
    expect_error("password_file is a directory", text, "password_file", msg);

    snprintf(pw, sizeof(pw), "%s", write_file("empty.pw", "\n"));
    snprintf(text, sizeof(text), "broker = {\n  password_file = \"%s\"; };\n" DB Q1(""), pw);
    snprintf(msg, sizeof(msg), "broker.password_file: \"%s\" is empty", pw);
    expect_error("password_file empty", text, "password_file", msg);

    snprintf(text, sizeof(text),
             "broker = {\n  password = \"x\";\n  password_file = \"%s\"; };\n" DB Q1(""), pw);
    expect_error("password and password_file together", text, "password_file",
                 "broker.password_file: cannot be used together with password (line 2)");
}

/* Write text to t_dir/name with the given mode (chmod: fopen keeps an old mode). */
static const char *write_file_mode(const char *name, const char *text, mode_t mode)
{
    const char *path = write_file(name, text);
    if (chmod(path, mode) != 0) {
        fprintf(stderr, "chmod %s: %s\n", path, strerror(errno));
        exit(2);
    }
    return path;
}

/* Load path and expect it to load with exactly the warnings listed (NULL-terminated,
 * each compared in full). */
static void expect_warnings(const char *desc, const char *path, const char *const *want)
{
    char err[1024];
    conf_t *c = NULL;
    int n = 0;
    if (conf_load(path, &c, err, sizeof(err)) != 0) {
        ok(false, "%s: loads", desc);
        printf("# error: %s\n", err);
        return;
    }
    while (want[n])
        n++;
    bool good = c->n_warnings == n;
    for (int i = 0; good && i < n; i++)
        good = strcmp(c->warnings[i], want[i]) == 0;
    if (!ok(good, "%s", desc)) {
        for (int i = 0; i < n; i++)
            printf("# want: %s\n", want[i]);
        for (int i = 0; i < c->n_warnings; i++)
            printf("#  got: %s\n", c->warnings[i]);
    }
    conf_free(c);
}

static void test_tls(void)
{
    char ca[PATH_MAX + 64], crt[PATH_MAX + 64], key[PATH_MAX + 64], text[8 * PATH_MAX];
    char msg[3 * PATH_MAX];
    conf_t *c;

    /* Defaults: off, with every check on once it is turned on. */
    c = must_load("config without tls groups", DB Q1(""));
    if (c) {
        const conf_broker_tls_t *b = &c->broker.tls;
        const conf_database_tls_t *d = &c->database.tls;
        ok(!b->enabled && !b->ca_file && !b->cert_file && !b->key_file && b->verify_peer &&
               b->verify_hostname,
           "broker.tls defaults: off, no files, verify_peer and verify_hostname true");
        ok(!d->enabled && !d->ca_file && !d->cert_file && !d->key_file && d->verify_server_cert,
           "database.tls defaults: off, no files, verify_server_cert true");
        ok(c->broker.port == 5672, "broker.port stays 5672 (TLS does not change it)");
        ok(c->n_warnings == 0 && c->warnings == NULL, "no warnings");
        conf_free(c);
    }

    snprintf(ca, sizeof(ca), "%s", write_file("ca.pem", "ca\n"));
    snprintf(crt, sizeof(crt), "%s", write_file("crt.pem", "crt\n"));
    snprintf(key, sizeof(key), "%s", write_file_mode("key.pem", "key\n", 0600));
    snprintf(text, sizeof(text),
             "broker = { port = 5671;\n"
             "  tls = { enabled = true; ca_file = \"%s\"; cert_file = \"%s\";\n"
             "          key_file = \"%s\"; }; };\n"
             "database = { database = \"t\"; host = \"db.example\";\n"
             "  tls = { enabled = true; ca_file = \"%s\"; cert_file = \"%s\";\n"
             "          key_file = \"%s\"; }; };\n" Q1(""),
             ca, crt, key, ca, crt, key);
    c = must_load("both tls groups with every file", text);
    if (c) {
        const conf_broker_tls_t *b = &c->broker.tls;
        const conf_database_tls_t *d = &c->database.tls;
        ok(b->enabled && strcmp(b->ca_file, ca) == 0 && strcmp(b->cert_file, crt) == 0 &&
               strcmp(b->key_file, key) == 0 && b->verify_peer && b->verify_hostname,
           "broker.tls read");
        ok(d->enabled && strcmp(d->ca_file, ca) == 0 && strcmp(d->cert_file, crt) == 0 &&
               strcmp(d->key_file, key) == 0 && d->verify_server_cert,
           "database.tls read");
        ok(c->n_warnings == 0, "no warnings for a key file only its owner reads (got %d)",
           c->n_warnings);
        char *buf = NULL;
        size_t len = 0;
        FILE *m = open_memstream(&buf, &len);
        conf_dump(c, m);
        fclose(m);
        char want[2 * PATH_MAX];
        snprintf(want, sizeof(want), "ca_file = \"%s\";", ca);
        ok(strstr(buf, "tls = {") && strstr(buf, want) && strstr(buf, "verify_server_cert = true;"),
           "dump shows the tls groups");
        free(buf);
        conf_free(c);
    }

    /* The sample config writes tls groups with enabled = false and the checks at their
     * defaults: that is not a sign of a forgotten enabled. */
    snprintf(text, sizeof(text),
             "broker = { tls = { enabled = false; verify_peer = true; verify_hostname = true; }; "
             "};\n"
             "database = { database = \"t\"; socket = \"/s\";\n"
             "  tls = { enabled = false; verify_server_cert = true; }; };\n" Q1(""));
    c = must_load("tls off with the checks at their defaults (and a socket)", text);
    ok(c && !c->broker.tls.enabled && c->broker.tls.verify_peer && c->n_warnings == 0,
       "verify flags read; no warnings while tls is off on loopback");
    conf_free(c);

    /* TLS is never off by accident: a file or a check turned off, without enabled = true. */
    snprintf(text, sizeof(text),
             "broker = { port = 5671;\n  tls = {\n    ca_file = \"%s\"; }; };\n" DB Q1(""), ca);
    expect_error("broker.tls.ca_file set, enabled forgotten", text, "ca_file",
                 "broker.tls.ca_file: set, but tls.enabled is not set (default false): the "
                 "connection would be plain text; set tls.enabled = true, or remove the setting");
    snprintf(text, sizeof(text),
             "database = { database = \"t\"; host = \"db.example\";\n  tls = { enabled = false;\n"
             "    cert_file = \"%s\"; key_file = \"%s\"; }; };\n" Q1(""),
             crt, key);
    expect_error("database.tls.cert_file set with enabled = false", text, "cert_file",
                 "database.tls.cert_file: set, but tls.enabled is false: the connection would be "
                 "plain text; set tls.enabled = true, or remove the setting");
    expect_error("broker.tls.verify_peer = false with enabled = false",
                 "broker = { tls = { enabled = false;\n  verify_peer = false; }; };\n" DB Q1(""),
                 "verify_peer",
                 "broker.tls.verify_peer: set, but tls.enabled is false: the connection would be "
                 "plain text; set tls.enabled = true, or remove the setting");
    expect_error(
        "database.tls.verify_server_cert = false, enabled forgotten",
        "database = { database = \"t\"; tls = {\n  verify_server_cert = false; }; };\n" Q1(""),
        "verify_server_cert",
        "database.tls.verify_server_cert: set, but tls.enabled is not set (default "
        "false): the connection would be plain text; set tls.enabled = true, or remove "
        "the setting");

    snprintf(text, sizeof(text),
             "database = { database = \"t\"; tls = { enabled = true; }; };\n" Q1(""));
    c = must_load("database.tls without ca_file (system CA store)", text);
    ok(c && c->database.tls.enabled && !c->database.tls.ca_file, "database ca_file optional");
    conf_free(c);

    /* Errors. */
    snprintf(text, sizeof(text),
             "broker = { tls = {\n  ca_file = \"%s/nope.pem\"; }; };\n" DB Q1(""), t_dir);
    snprintf(msg, sizeof(msg),
             "broker.tls.ca_file: cannot open \"%s/nope.pem\": No such file or directory", t_dir);
    expect_error("broker.tls.ca_file missing (checked even while tls is off)", text, "ca_file",
                 msg);

    snprintf(text, sizeof(text),
             "database = { database = \"t\";\n  tls = { enabled = true;\n"
             "    cert_file = \"%s\"; key_file = \"%s\"; }; };\n" Q1(""),
             t_dir, key);
    snprintf(msg, sizeof(msg), "database.tls.cert_file: \"%s\" is a directory", t_dir);
    expect_error("database.tls.cert_file is a directory", text, "cert_file", msg);

    snprintf(text, sizeof(text),
             "database = { database = \"t\";\n  tls = { enabled = true;\n"
             "    key_file = \"%s/gone.key\"; }; };\n" Q1(""),
             t_dir);
    snprintf(msg, sizeof(msg),
             "database.tls.key_file: cannot open \"%s/gone.key\": No such file or directory",
             t_dir);
    expect_error("database.tls.key_file missing", text, "key_file", msg);

    snprintf(text, sizeof(text),
             "broker = { tls = { enabled = true; ca_file = \"%s\";\n"
             "    cert_file = \"%s\"; }; };\n" DB Q1(""),
             ca, crt);
    expect_error("broker cert_file without key_file", text, "cert_file",
                 "broker.tls.cert_file: needs key_file too");

    snprintf(text, sizeof(text),
             "database = { database = \"t\"; tls = {\n    key_file = \"%s\"; }; };\n" Q1(""), key);
    expect_error("database key_file without cert_file (even while off)", text, "key_file",
                 "database.tls.key_file: needs cert_file too");

    expect_error("broker tls on, verify_peer on, no ca_file",
                 "broker = { port = 5671;\n  tls = { enabled = true; }; };\n" DB Q1(""), "tls =",
                 "broker.tls.ca_file: required when verify_peer is true (rabbitmq-c does not read "
                 "the system's CA store)");

    expect_error("database tls with a socket",
                 "database = { database = \"t\";\n  socket = \"/run/m.sock\";\n"
                 "  tls = {\n    enabled = true; }; };\n" Q1(""),
                 "enabled",
                 "database.tls.enabled: cannot be used with socket (line 2): TLS runs over TCP to "
                 "host:port");

    expect_error("misspelt tls setting", "broker = { tls = {\n  ca_fiel = \"x\"; }; };\n" DB Q1(""),
                 "ca_fiel", "broker.tls.ca_fiel: unknown setting (did you mean \"ca_file\"?)");
    expect_error("tls.enabled not a boolean",
                 "database = { database = \"t\"; tls = {\n  enabled = \"yes\"; }; };\n" Q1(""),
                 "enabled", "database.tls.enabled: must be true or false (got a string)");
    expect_error("tls not a group", "broker = {\n  tls = true; };\n" DB Q1(""), "tls",
                 "broker.tls: must be a group { ... } (got a boolean)");
    expect_error("empty ca_file", "broker = { tls = {\n  ca_file = \"\"; }; };\n" DB Q1(""),
                 "ca_file", "broker.tls.ca_file: must not be empty");

    /* Warnings about weakened TLS. */
    snprintf(text, sizeof(text),
             "broker = { tls = { enabled = true; ca_file = \"%s\"; }; };\n" DB Q1(""), ca);
    char path[PATH_MAX + 64];
    snprintf(path, sizeof(path), "%s", write_file_mode("w1.conf", text, 0600));
    snprintf(msg, sizeof(msg),
             "%s:1: broker.port: 5672 is the plain AMQP port but tls.enabled is true; a "
             "broker's TLS listener is usually on 5671",
             path);
    expect_warnings("tls on the plain AMQP port", path, (const char *const[]){msg, NULL});

    snprintf(text, sizeof(text),
             "broker = { port = 5671; tls = { enabled = true; ca_file = \"%s\";\n"
             "  verify_peer = false;\n  verify_hostname = false; }; };\n"
             "database = { database = \"t\"; tls = { enabled = true;\n"
             "  verify_server_cert = false; }; };\n" Q1(""),
             ca);
    snprintf(path, sizeof(path), "%s", write_file_mode("w2.conf", text, 0600));
    char w1[3 * PATH_MAX], w2[3 * PATH_MAX], w3[3 * PATH_MAX];
    snprintf(w1, sizeof(w1),
             "%s:2: broker.tls.verify_peer: false: any certificate is accepted, so anyone on the "
             "path can pose as the broker",
             path);
    snprintf(w2, sizeof(w2),
             "%s:3: broker.tls.verify_hostname: false: a certificate issued to any other name is "
             "accepted",
             path);
    snprintf(w3, sizeof(w3),
             "%s:5: database.tls.verify_server_cert: false and no ca_file: the server's "
             "certificate is not checked at all, so anyone on the path can pose as the server",
             path);
    expect_warnings("checks turned off are warned about", path,
                    (const char *const[]){w1, w2, w3, NULL});

    snprintf(text, sizeof(text),
             "database = { database = \"t\"; tls = { enabled = true; ca_file = \"%s\";\n"
             "  verify_server_cert = false; }; };\n" Q1(""),
             ca);
    snprintf(path, sizeof(path), "%s", write_file_mode("w3.conf", text, 0600));
    snprintf(w1, sizeof(w1),
             "%s:2: database.tls.verify_server_cert: false: the chain is still checked against "
             "ca_file, but a certificate issued to any other name is accepted",
             path);
    expect_warnings("verify_server_cert off with a ca_file", path, (const char *const[]){w1, NULL});

    /* A private key readable by everyone; a group may read it. */
    write_file_mode("key.pem", "key\n", 0644);
    snprintf(text, sizeof(text),
             "broker = { port = 5671; tls = { enabled = true; ca_file = \"%s\";\n"
             "  cert_file = \"%s\"; key_file = \"%s\"; }; };\n" DB Q1(""),
             ca, crt, key);
    snprintf(path, sizeof(path), "%s", write_file_mode("w4.conf", text, 0600));
    snprintf(w1, sizeof(w1),
             "%s:2: broker.tls.key_file: \"%s\" is readable by every user (mode 0644): chmod o= "
             "it",
             path, key);
    expect_warnings("world-readable key_file", path, (const char *const[]){w1, NULL});
    write_file_mode("key.pem", "key\n", 0640);
    expect_warnings("group-readable key_file: no warning", path, (const char *const[]){NULL});
    write_file_mode("key.pem", "key\n", 0600);
}

/* A broker or database host off this machine without TLS: a warning naming the host line. */
static void test_plain_remote(void)
{
    char text[1024], path[PATH_MAX + 64], w1[3 * PATH_MAX], w2[3 * PATH_MAX];
    snprintf(text, sizeof(text),
             "broker = {\n  host = \"mq.example\"; };\n"
             "database = { database = \"t\";\n  host = \"10.0.0.5\"; };\n" Q1(""));
    snprintf(path, sizeof(path), "%s", write_file_mode("plain.conf", text, 0600));
    snprintf(w1, sizeof(w1),
             "%s:2: broker.host: \"mq.example\" is not a loopback address and tls.enabled is "
             "false: the broker password and every message cross the network in plain text",
             path);
    snprintf(w2, sizeof(w2),
             "%s:4: database.host: \"10.0.0.5\" is not a loopback address and tls.enabled is "
             "false: the database password, the handlers' statements and their data cross the "
             "network in plain text",
             path);
    expect_warnings("remote hosts without TLS", path, (const char *const[]){w1, w2, NULL});

    static const char *const loopback[] = {"localhost", "LocalHost", "db.localhost",    "127.0.0.1",
                                           "127.1.2.3", "::1",       "::ffff:127.0.0.1"};
    for (size_t i = 0; i < sizeof(loopback) / sizeof(loopback[0]); i++) {
        char desc[128];
        snprintf(
            text, sizeof(text),
            "broker = { host = \"%s\"; };\ndatabase = { database = \"t\"; host = \"%s\"; };\n" Q1(
                ""),
            loopback[i], loopback[i]);
        snprintf(path, sizeof(path), "%s", write_file_mode("plain.conf", text, 0600));
        snprintf(desc, sizeof(desc), "loopback host %s: no warning", loopback[i]);
        expect_warnings(desc, path, (const char *const[]){NULL});
    }
    static const char *const remote[] = {"128.0.0.1", "mylocalhost", "::2", "192.168.1.1"};
    for (size_t i = 0; i < sizeof(remote) / sizeof(remote[0]); i++) {
        char desc[128];
        snprintf(text, sizeof(text), "broker = { host = \"%s\"; };\n" DB Q1(""), remote[i]);
        snprintf(path, sizeof(path), "%s", write_file_mode("plain.conf", text, 0600));
        snprintf(w1, sizeof(w1),
                 "%s:1: broker.host: \"%s\" is not a loopback address and tls.enabled is false: "
                 "the broker password and every message cross the network in plain text",
                 path, remote[i]);
        snprintf(desc, sizeof(desc), "remote host %s: a warning", remote[i]);
        expect_warnings(desc, path, (const char *const[]){w1, NULL});
    }
    /* A unix socket never crosses the network, whatever host says. */
    path[0] = '\0';
    snprintf(
        path, sizeof(path), "%s",
        write_file_mode(
            "plain.conf",
            "database = { database = \"t\"; host = \"db.example\"; socket = \"/s\"; };\n" Q1(""),
            0600));
    expect_warnings("database socket with a remote host: no warning", path,
                    (const char *const[]){NULL});
}

/* A password written in the config file, by the file's mode. */
/* metrics.listen: off by default; a numeric address and port, parsed; bad ones name the line. */
static void test_metrics(void)
{
    conf_t *c = must_load("no metrics group", DB Q1(""));
    if (c) {
        ok(c->metrics.listen == NULL, "metrics are off by default");
        conf_free(c);
    }
    c = must_load("metrics on loopback", DB "metrics = { listen = \"127.0.0.1:9187\"; };\n" Q1(""));
    if (c) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)(const void *)&c->metrics.addr;
        ok(a->sin_family == AF_INET && ntohs(a->sin_port) == 9187 &&
               ntohl(a->sin_addr.s_addr) == 0x7f000001,
           "metrics.listen \"127.0.0.1:9187\" is parsed");
        conf_free(c);
    }
    c = must_load("metrics on IPv6 loopback",
                  DB "metrics = { listen = \"[::1]:9187\"; };\n" Q1(""));
    if (c) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)(const void *)&c->metrics.addr;
        ok(a->sin6_family == AF_INET6 && ntohs(a->sin6_port) == 9187 &&
               IN6_IS_ADDR_LOOPBACK(&a->sin6_addr),
           "metrics.listen \"[::1]:9187\" is parsed");
        conf_free(c);
    }
    const char *no_port = DB "metrics = {\n  listen = \"127.0.0.1\";\n};\n" Q1("");
    expect_error("metrics.listen without a port", no_port,
                 "listen =", "metrics.listen: \"127.0.0.1\" has no port: write \"ADDR:PORT\"");
    const char *bad_port = DB "metrics = {\n  listen = \"127.0.0.1:70000\";\n};\n" Q1("");
    expect_error("metrics.listen with a port out of range", bad_port, "listen =",
                 "metrics.listen: \"127.0.0.1:70000\": the port must be a number in 1..65535");
    const char *name = DB "metrics = {\n  listen = \"localhost:9187\";\n};\n" Q1("");
    expect_error("metrics.listen with a host name", name, "listen =",
                 "metrics.listen: \"localhost:9187\": the address must be numeric, e.g. "
                 "\"127.0.0.1:9187\" or \"[::1]:9187\"");
    const char *v6 = DB "metrics = {\n  listen = \"::1:9187\";\n};\n" Q1("");
    expect_error("metrics.listen with IPv6 unbracketed", v6, "listen =",
                 "metrics.listen: \"::1:9187\": the address must be numeric, e.g. "
                 "\"127.0.0.1:9187\" or \"[::1]:9187\"");

    /* Not loopback and no token: refused unless allow_unauthenticated says it is meant. */
    static const char *const open_addrs[] = {"0.0.0.0:9187", "[::]:9187", "192.0.2.7:9187",
                                             "[::ffff:10.0.0.1]:9187"};
    for (size_t i = 0; i < sizeof(open_addrs) / sizeof(open_addrs[0]); i++) {
        char text[512], msg[768], desc[128];
        snprintf(text, sizeof(text), DB "metrics = {\n  listen = \"%s\";\n};\n" Q1(""),
                 open_addrs[i]);
        snprintf(msg, sizeof(msg),
                 "metrics.listen: \"%s\" is not a loopback address and token_file is not set: "
                 "anyone who can reach it would read /metrics and /status (pid, counters, the "
                 "last warning text); set metrics.token_file (docs/monitoring.md), listen on "
                 "127.0.0.1, or set metrics.allow_unauthenticated = true",
                 open_addrs[i]);
        snprintf(desc, sizeof(desc), "metrics.listen %s without a token is refused", open_addrs[i]);
        expect_error(desc, text, "listen =", msg);
    }
    c = must_load("metrics on 127.9.9.9 without a token",
                  DB "metrics = { listen = \"127.9.9.9:9187\"; };\n" Q1(""));
    if (c) {
        bool any = false;
        for (int i = 0; i < c->n_warnings; i++)
            any = any || strstr(c->warnings[i], "metrics.") != NULL;
        ok(!any, "a loopback listener without a token: no warning about it");
        conf_free(c);
    }
    c = must_load("metrics on [::ffff:127.0.0.1] without a token",
                  DB "metrics = { listen = \"[::ffff:127.0.0.1]:9187\"; };\n" Q1(""));
    conf_free(c);
    c = must_load("metrics on 0.0.0.0 with allow_unauthenticated",
                  DB "metrics = { listen = \"0.0.0.0:9187\";\n"
                     "  allow_unauthenticated = true; };\n" Q1(""));
    if (c) {
        bool found = false;
        for (int i = 0; i < c->n_warnings; i++)
            found = found || strstr(c->warnings[i],
                                    ":3: metrics.allow_unauthenticated: true: \"0.0.0.0:9187\" "
                                    "is not a loopback address and serves /metrics and /status "
                                    "without a token") != NULL;
        ok(c->metrics.allow_unauthenticated && found,
           "allow_unauthenticated = true loads, with a warning at its line");
        conf_free(c);
    }
}

/* Queue names as RabbitMQ takes them, and none in the signing domain of onward messages. */
static void test_queue_names(void)
{
    expect_error("a queue named amq.*",
                 DB "queues = (\n  { handler = \"h.so\";\n    name = \"amq.q\"; }\n);\n", "name =",
                 "queues.[0].name: the queue name \"amq.q\" starts with \"amq.\", which RabbitMQ "
                 "keeps for itself (it refuses to declare such a queue): choose another name");
    expect_error("a queue named onward:*",
                 DB "queues = (\n  { handler = \"h.so\";\n    name = \"onward:q\"; }\n);\n",
                 "name =",
                 "queues.[0].name: \"onward:q\" starts with \"onward:\", which idemd keeps for the "
                 "dead letters of onward messages (their signatures name \"onward:QUEUE\"): "
                 "choose another name");
    expect_error("a queue name that is not UTF-8",
                 DB "queues = (\n  { handler = \"h.so\";\n    name = \"q\xed\xa0\x80\"; }\n);\n",
                 "name =",
                 "queues.[0].name: the queue name: byte 2 is not valid UTF-8: RabbitMQ takes "
                 "UTF-8 queue names");
    expect_error("a queue name with a control byte",
                 DB "queues = (\n  { handler = \"h.so\";\n    name = \"q\x7f\"; }\n);\n",
                 "name =", "queues.[0].name: the queue name: byte 2 is a control character (0x7f)");
    expect_error("a dead letter queue named amq.*",
                 DB Q1("    declare = {\n      dead_letter_queue = \"amq.d\"; };\n"),
                 "dead_letter_queue",
                 "queues.[0].declare.dead_letter_queue: the dead letter queue \"amq.d\" starts "
                 "with \"amq.\", which RabbitMQ keeps for itself (it refuses to declare such a "
                 "queue): choose another name");
    conf_t *c = must_load("UTF-8 and inner onward:/amq. in a queue name", DB
                          "queues = ( { handler = \"h.so\"; name = \"caf\xc3\xa9.onward:amq.x\"; "
                          "} );\n");
    conf_free(c);
}

/* An ordered queue with workers = "auto" runs one worker: other explicit bounds are warned
 * about at their line, and the effective value is 1. */
static void test_order_overrides(void)
{
    conf_t *c = must_load("an ordered queue with workers_max = 4",
                          DB Q1("    order_key = \"header:k\";\n    workers_max = 4;\n"));
    if (c) {
        bool found = false;
        for (int i = 0; i < c->n_warnings; i++)
            found = found || strstr(c->warnings[i],
                                    ":5: queues.[0].workers_max: 4 is not used: the queue has "
                                    "order_key = \"header:k\", so workers = \"auto\" runs 1 "
                                    "worker per instance") != NULL;
        ok(found && c->queues[0].workers == 1 && c->queues[0].workers_max == 1 &&
               c->queues[0].workers_min == 1,
           "workers_max = 4 on an ordered queue: a warning at its line, effective 1");
        conf_free(c);
    }
}

static char *dump_to_string(const conf_t *c);

/* metrics.token_file: read and kept; a mode others may use, a short token or a byte that
 * cannot go in an Authorization header is an error naming the file and the setting. */
static void test_metrics_token(void)
{
    char tok[PATH_MAX + 64], text[2 * PATH_MAX], msg[3 * PATH_MAX];
    static const char good[] = "0123456789abcdefABCDEF-._~+/==";
    snprintf(tok, sizeof(tok), "%s",
             write_file_mode("token", "0123456789abcdefABCDEF-._~+/==\n", 0640));
    snprintf(text, sizeof(text),
             DB "metrics = {\n  listen = \"127.0.0.1:9187\";\n  token_file = \"%s\";\n};\n" Q1(""),
             tok);
    conf_t *c = must_load("metrics.token_file, mode 0640", text);
    if (c) {
        ok(c->metrics.token && strcmp(c->metrics.token, good) == 0,
           "the token is the file's content without its newline");
        char *d = dump_to_string(c);
        ok(d && strstr(d, "token_file = ") && !strstr(d, "0123456789abcdef"),
           "the dump names the token file, not the token");
        free(d);
        conf_free(c);
    }
    c = must_load("no metrics.token_file",
                  DB "metrics = { listen = \"127.0.0.1:9187\"; };\n" Q1(""));
    if (c) {
        ok(c->metrics.token == NULL, "no token unless token_file is set");
        conf_free(c);
    }

    write_file_mode("token", "0123456789abcdefABCDEF\n", 0644);
    snprintf(msg, sizeof(msg),
             "metrics.token_file: \"%s\" holds the metrics bearer token and others may use it "
             "(mode 0644): chmod g-w,o= it",
             tok);
    expect_error("a world-readable token file", text, "token_file", msg);
    write_file_mode("token", "0123456789abcdefABCDEF\n", 0660);
    snprintf(msg, sizeof(msg),
             "metrics.token_file: \"%s\" holds the metrics bearer token and its group may change "
             "it (mode 0660): chmod g-w,o= it",
             tok);
    expect_error("a group-writable token file", text, "token_file", msg);
    write_file_mode("token", "0123456789abcde\n", 0600);
    snprintf(msg, sizeof(msg),
             "metrics.token_file: \"%s\" holds 15 bytes: a bearer token needs at least 16 (e.g. "
             "`openssl rand -hex 32`)",
             tok);
    expect_error("a token of 15 bytes", text, "token_file", msg);
    write_file_mode("token", "0123456789abcdef ghij\n", 0600);
    snprintf(msg, sizeof(msg),
             "metrics.token_file: \"%s\": byte 17 is not allowed in a bearer token (letters, "
             "digits, -._~+/, then = at the end)",
             tok);
    expect_error("a token with a space", text, "token_file", msg);
    write_file_mode("token", "0123456789abcdef=g\n", 0600);
    snprintf(msg, sizeof(msg),
             "metrics.token_file: \"%s\": byte 18 is not allowed in a bearer token (letters, "
             "digits, -._~+/, then = at the end)",
             tok);
    expect_error("a token with a byte after its padding", text, "token_file", msg);
    unlink(tok);
    snprintf(msg, sizeof(msg), "metrics.token_file: cannot open \"%s\": No such file or directory",
             tok);
    expect_error("a missing token file", text, "token_file", msg);
}

static void test_password_permissions(void)
{
    const char *text = "broker = {\n  password = \"amqp\"; };\n"
                       "database = { database = \"t\";\n  password = \"db\"; };\n" Q1("");
    char w1[3 * PATH_MAX], w2[3 * PATH_MAX];
    const char *path = write_file_mode("perm.conf", text, 0640);

    snprintf(w1, sizeof(w1),
             "%s:2: broker.password: \"%s\" holds a password and is readable by its group (mode "
             "0640): use password_file, or chmod go= the file",
             path, path);
    snprintf(w2, sizeof(w2),
             "%s:4: database.password: \"%s\" holds a password and is readable by its group "
             "(mode 0640): use password_file, or chmod go= the file",
             path, path);
    expect_warnings("inline passwords in a group-readable file", path,
                    (const char *const[]){w1, w2, NULL});

    write_file_mode("perm.conf", text, 0604);
    snprintf(w1, sizeof(w1),
             "%s:2: broker.password: \"%s\" holds a password and is readable by others (mode "
             "0604): use password_file, or chmod go= the file",
             path, path);
    snprintf(w2, sizeof(w2),
             "%s:4: database.password: \"%s\" holds a password and is readable by others (mode "
             "0604): use password_file, or chmod go= the file",
             path, path);
    expect_warnings("inline passwords in a world-readable file", path,
                    (const char *const[]){w1, w2, NULL});

    write_file_mode("perm.conf", text, 0600);
    expect_warnings("inline passwords in a 0600 file: no warning", path,
                    (const char *const[]){NULL});

    /* password_file (and the default broker password) are not in the file. */
    char pw[PATH_MAX + 64], text2[2 * PATH_MAX];
    snprintf(pw, sizeof(pw), "%s", write_file_mode("perm.pw", "x\n", 0600));
    snprintf(text2, sizeof(text2),
             "database = { database = \"t\"; password_file = \"%s\"; };\n" Q1(""), pw);
    path = write_file_mode("perm.conf", text2, 0644);
    expect_warnings("password_file in a 0644 file: no warning", path, (const char *const[]){NULL});

    /* A password_file readable by every user warns at its line; a group may read it
     * (root:idemd 0640 is how a service account reads its file). */
    chmod(pw, 0644);
    path = write_file_mode("perm.conf", text2, 0600);
    snprintf(w1, sizeof(w1),
             "%s:1: database.password_file: \"%s\" holds a password and is readable by every "
             "user (mode 0644): chmod o= it",
             path, pw);
    expect_warnings("world-readable password_file", path, (const char *const[]){w1, NULL});
    chmod(pw, 0640);
    expect_warnings("group-readable password_file: no warning", path, (const char *const[]){NULL});
    chmod(pw, 0600);

    /* The parsed tree keeps only what handlers read: no password stays in it. */
    conf_t *c = must_load("inline passwords, for the tree",
                          "broker = { password = \"amqp-secret\"; };\n"
                          "database = { database = \"t\"; password = \"db-secret\"; };\n" Q1(
                              "settings = { table = \"x\"; };"));
    if (c) {
        ok(config_lookup(&c->lc, "broker") == NULL && config_lookup(&c->lc, "database") == NULL &&
               strcmp(c->broker.password, "amqp-secret") == 0 &&
               strcmp(c->database.password, "db-secret") == 0 && c->queues[0].settings != NULL &&
               config_setting_get_member(c->queues[0].settings, "table") != NULL,
           "broker and database groups leave the parsed tree; conf keeps the passwords and the "
           "handler settings stay");
        conf_free(c);
    }

    /* The warning names the included file that holds the password. */
    const char *inc =
        write_file_mode("perm-inc.conf", "broker = {\n  password = \"p\"; };\n", 0644);
    char inc_path[PATH_MAX + 64];
    snprintf(inc_path, sizeof(inc_path), "%s", inc);
    path = write_file_mode("perm.conf", "@include \"perm-inc.conf\"\n" DB Q1(""), 0600);
    snprintf(w1, sizeof(w1),
             "%s:2: broker.password: \"%s\" holds a password and is readable by others (mode "
             "0644): use password_file, or chmod go= the file",
             inc_path, inc_path);
    expect_warnings("inline password in a readable @include file", path,
                    (const char *const[]){w1, NULL});
}

static void test_file_errors(void)
{
    char path[PATH_MAX + 64], err[1024], want[2 * PATH_MAX];
    conf_t *c = (conf_t *)0x1;

    snprintf(path, sizeof(path), "%s/absent.conf", t_dir);
    snprintf(want, sizeof(want), "%s: cannot open: No such file or directory", path);
    int rc = conf_load(path, &c, err, sizeof(err));
    ok(rc == -1 && c == NULL && strcmp(err, want) == 0, "missing file: %s", err);

    expect_error("syntax error with its line",
                 "daemon = {\n  log_level = \"info\";\n  shutdown_timeout = ;\n};\n",
                 "shutdown_timeout", "syntax error");
    expect_error("duplicate setting", DB "database = { database = \"u\"; };\n" Q1(""),
                 "database = { database = \"u\"", "duplicate setting name");

    /* An error in an included file names that file (relative to the includer). */
    write_file("inc.conf", "daemon = {\n  workers = 3; };\n");
    const char *main_text = "@include \"inc.conf\"\n" DB Q1("");
    snprintf(path, sizeof(path), "%s", write_file("main.conf", main_text));
    snprintf(want, sizeof(want), "%s/inc.conf:2: daemon.workers: unknown setting", t_dir);
    c = (conf_t *)0x1;
    rc = conf_load(path, &c, err, sizeof(err));
    ok(rc == -1 && c == NULL && strcmp(err, want) == 0, "error in an @include file names it");
    if (strcmp(err, want) != 0)
        printf("# want: %s\n#  got: %s\n", want, err);

    /* A small buffer is truncated, not overrun; no buffer at all is fine. */
    char small[16];
    memset(small, 'X', sizeof(small));
    c = load_text(DB Q1("    prefetch = 0;\n"), small, 8);
    ok(c == NULL && strlen(small) == 7 && small[8] == 'X', "error truncated to errlen");
    c = load_text(DB Q1("    prefetch = 0;\n"), NULL, 0);
    ok(c == NULL, "NULL error buffer accepted");
    conf_free(NULL);
    ok(true, "conf_free(NULL) is a no-op");
}

/* Load path and expect exactly the error want. */
static void expect_load_error(const char *desc, const char *path, const char *want)
{
    char err[2048];
    conf_t *c = (conf_t *)0x1;
    int rc = conf_load(path, &c, err, sizeof(err));
    if (!ok(rc == -1 && c == NULL && strcmp(err, want) == 0, "%s", desc))
        printf("# want: %s\n#  got: rc=%d err=%s\n", want, rc, err);
    if (rc == 0)
        conf_free(c);
}

/* Each file is read once, from the descriptor it was checked on: conf_text.c expands @include
 * itself, so lines, checks and what counts as a directive must match libconfig's. */
static void test_includes(void)
{
    char path[PATH_MAX + 64], want[5 * PATH_MAX], dir[PATH_MAX + 64];
    conf_t *c;

    /* Lines after an include are the including file's; a queue from an include keeps its line. */
    write_file("q.inc", "# the queues\n" Q1(""));
    const char *main_text = DB "@include \"q.inc\" # and a comment\n"
                               "daemon = {\n  shutdown_timeout = 0; };\n";
    snprintf(path, sizeof(path), "%s", write_file("m1.conf", main_text));
    snprintf(want, sizeof(want),
             "%s:%d: daemon.shutdown_timeout: must be between 1 and 3600 (got 0)", path,
             line_of(main_text, "shutdown_timeout"));
    expect_load_error("an error after an @include names the including file's own line", path, want);
    /* The line libconfig gives the queue read from a file of its own, against via @include. */
    snprintf(path, sizeof(path), "%s", write_file("q.conf", DB "# the queues\n" Q1("")));
    c = NULL;
    char err[1024];
    int alone = conf_load(path, &c, err, sizeof(err)) == 0 ? c->queues[0].line : -1;
    conf_free(c);
    main_text = DB "@include \"q.inc\"\n";
    snprintf(path, sizeof(path), "%s", write_file("m2.conf", main_text));
    c = NULL;
    int rc = conf_load(path, &c, err, sizeof(err));
    ok(rc == 0 && c->n_queues == 1 && c->queues[0].line == alone - 1,
       "a queue from an @include keeps its line there (%d, alone %d - 1): %s",
       c ? c->queues[0].line : -1, alone, rc == 0 ? "" : err);
    if (c) {
        const config_setting_t *q = config_lookup(&c->lc, "queues");
        snprintf(want, sizeof(want), "%s/q.inc", t_dir);
        ok(q && config_setting_source_file(q) && strcmp(config_setting_source_file(q), want) == 0,
           "its settings name the included file");
    }
    conf_free(c);

    /* A syntax error in an include: that file and its line. */
    write_file("syntax.inc", "a = 1;\n\nb = ;\n");
    snprintf(path, sizeof(path), "%s", write_file("m3.conf", DB "@include \"syntax.inc\"\n"));
    snprintf(want, sizeof(want), "%s/syntax.inc:3: syntax error", t_dir);
    expect_load_error("a syntax error in an @include names that file and line", path, want);

    /* Not a directive where libconfig's scanner sees none: in a comment, in a string, not at
     * the start of its line. */
    main_text = DB "/* a comment\n@include \"absent.inc\"\n*/\n"
                   "queues = ( { name = \"q\"; handler = \"h.so\"; settings = { note = \"a\n"
                   "@include \\\"absent.inc\\\"\"; }; } );\n";
    snprintf(path, sizeof(path), "%s", write_file("m4.conf", main_text));
    c = NULL;
    const char *note = NULL;
    ok(conf_load(path, &c, err, sizeof(err)) == 0 && c->n_queues == 1 &&
           config_setting_lookup_string(c->queues[0].settings, "note", &note) &&
           strcmp(note, "a\n@include \"absent.inc\"") == 0,
       "@include in a comment or a string is text: %s", c ? "" : err);
    conf_free(c);
    snprintf(path, sizeof(path), "%s",
             write_file("m5.conf", DB "@include \"q.inc\" @include \"q.inc\"\n"));
    snprintf(want, sizeof(want), "%s:2: syntax error", path);
    expect_load_error("a second @include on the line of the first is no directive", path, want);

    /* Relative names are in the main file's directory, at any depth, as libconfig's include_dir. */
    snprintf(dir, sizeof(dir), "%s/inc", t_dir);
    mkdir(dir, 0755);
    write_file("inc/outer.inc", "@include \"q.inc\"\n");
    snprintf(path, sizeof(path), "%s", write_file("m6.conf", DB "@include \"inc/outer.inc\"\n"));
    c = NULL;
    ok(conf_load(path, &c, err, sizeof(err)) == 0 && c->n_queues == 1,
       "a nested @include is found beside the main file: %s", c ? "" : err);
    conf_free(c);
    snprintf(path, sizeof(path), "%s", write_file("loop.conf", "@include \"loop.conf\"\n"));
    snprintf(want, sizeof(want), "%s:1: @include \"loop.conf\": nested more than 10 deep", path);
    expect_load_error("an @include loop ends", path, want);

    /* An include is checked before a byte of it is parsed: a group-writable one with a syntax
     * error is refused, naming the line that includes it. */
    const char *bad = write_file_mode("bad.inc", "x = ;\n", 0664);
    char bad_path[PATH_MAX + 64];
    snprintf(bad_path, sizeof(bad_path), "%s", bad);
    snprintf(path, sizeof(path), "%s", write_file("m7.conf", DB "@include \"bad.inc\"\n"));
    snprintf(want, sizeof(want),
             "%s:2: @include: %s: refused: %s is writable by group (mode 0664): a config file "
             "must be writable by its owner only: chmod go-w %s",
             path, bad_path, bad_path, bad_path);
    expect_load_error("an untrusted @include is refused before it is read", path, want);

    /* A directory on the path that its group may write: refused, naming it. */
    snprintf(dir, sizeof(dir), "%s/gw", t_dir);
    mkdir(dir, 0755);
    chmod(dir, 0775);
    snprintf(path, sizeof(path), "%s", write_file("gw/idemd.conf", DB Q1("")));
    snprintf(want, sizeof(want),
             "%s: refused: directory %s is writable by group (mode 0775): every directory above "
             "a config file must be writable by its owner only (or sticky, like /tmp, with what "
             "is on the path in it owned by root or the user this runs as): chmod go-w %s",
             path, dir, dir);
    expect_load_error("a group-writable directory above the file is refused", path, want);
    chmod(dir, 0755);
    c = NULL;
    ok(conf_load(path, &c, err, sizeof(err)) == 0, "... and accepted once fixed: %s", c ? "" : err);
    conf_free(c);

    /* A FIFO is no config file: refused, without waiting for a writer. */
    snprintf(dir, sizeof(dir), "%s/pipe.inc", t_dir);
    if (mkfifo(dir, 0644) != 0)
        printf("# mkfifo %s: %s\n", dir, strerror(errno));
    snprintf(path, sizeof(path), "%s", write_file("m8.conf", DB "@include \"pipe.inc\"\n"));
    snprintf(want, sizeof(want), "%s:2: @include: %s: refused: %s is not a regular file", path, dir,
             dir);
    expect_load_error("an @include of a FIFO is refused", path, want);
}

static char *dump_to_string(const conf_t *c)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    conf_dump(c, m);
    fclose(m);
    return buf;
}

static void test_dump(void)
{
    char pw[PATH_MAX + 64], text[PATH_MAX * 2 + 1024];
    snprintf(pw, sizeof(pw), "%s", write_file("dump.pw", "hunter2\n"));
    snprintf(
        text, sizeof(text),
        "broker = { password = \"amqp-secret\"; };\n"
        "database = { database = \"t\"; password_file = \"%s\"; };\n"
        "queues = ( { name = \"q\\\"1\"; handler = \"h.so\"; retry_delays_ms = [ 5, 6 ];\n"
        "  declare = { dead_letter_queue = \"q.dlq\";\n"
        "    arguments = { x-max-priority = 10; x-big = 5000000000L; x-mode = \"lazy\"; };\n"
        "    bindings = ( { exchange = \"e\"; routing_key = \"k\"; }, { exchange = \"f\"; } ); };\n"
        "  settings = { table = \"orders\"; db_password = \"plugin-secret\"; ratio = 0.25;\n"
        "    big = 1e300; list = ( 1, \"two\", { three = 3; } ); arr = [ true, false ]; };\n"
        "}, { name = \"r\"; handler = \"r.so\"; workers = 3; workers_max = \"Auto\"; } );\n",
        pw);
    conf_t *c = must_load("config to dump", text);
    if (!c)
        return;
    char *d1 = dump_to_string(c);
    ok(c->queues[0].workers == CONF_WORKERS_AUTO && c->queues[1].workers == 3 &&
           c->queues[1].workers_max == CONF_WORKERS_AUTO,
       "workers: \"auto\" by default, a number, and the word in any case");
    ok(strstr(d1, "workers = \"auto\";") && strstr(d1, "workers = 3;") &&
           strstr(d1, "workers_max = \"auto\";") && strstr(d1, "db_connection_budget = \"auto\";"),
       "dump: \"auto\" as a word, a number as a number");
    ok(strstr(d1, "password = \"***\";") != NULL, "passwords masked as \"***\"");
    ok(!strstr(d1, "amqp-secret") && !strstr(d1, "hunter2"), "no password text in the dump");
    ok(!strstr(d1, "plugin-secret") && strstr(d1, "db_password = \"***\";"),
       "plugin setting named like a password masked");
    ok(strstr(d1, "log_level = \"info\";") && strstr(d1, "prefetch = 1000;") &&
           strstr(d1, "consumer = \"r\";"),
       "defaults appear in the dump");
    ok(strstr(d1, "# socket: not set") != NULL, "unset settings shown as comments");
    ok(strstr(d1, "name = \"q\\\"1\";") != NULL, "strings escaped");

    /* The dump is a valid config that loads to the same settings. */
    char err[1024];
    conf_t *c2 = NULL;
    int rc = conf_load(write_file("dump.conf", d1), &c2, err, sizeof(err));
    ok(rc == 0, "dump loads again%s%s", rc ? ": " : "", rc ? err : "");
    if (rc == 0) {
        char *d2 = dump_to_string(c2);
        /* Skip the first line: it names the file. */
        ok(strcmp(strchr(d1, '\n'), strchr(d2, '\n')) == 0, "dump of the dump is identical");
        ok(c2->queues[0].args[1].ival == 5000000000LL && c2->queues[0].n_bindings == 2 &&
               c2->queues[0].n_retry_delays == 2,
           "64-bit argument, bindings and delays survive the round trip");
        double ratio = 0;
        ok(config_setting_lookup_float(c2->queues[0].settings, "ratio", &ratio) && ratio == 0.25,
           "plugin float survives the round trip");
        free(d2);
        conf_free(c2);
    }
    free(d1);
    conf_free(c);
}

/* handler = "sql": its statements and onward messages load, dump and reload; where they may be. */
static void test_sql(void)
{
    const char *good = DB
        "queues = (\n  { name = \"q1\"; handler = \"sql\";\n"
        "    sql = ( { statement = \"INSERT INTO t (a, b) VALUES (?, ?)\";\n"
        "              params = [ \"json:a.b[0]\", \"msg:id\" ]; expect = \">=1\"; on_mismatch = "
        "\"retry\"; },\n"
        "            { statement = \"DO 1\"; on_duplicate = \"ok\"; } );\n"
        "    publish = ( { routing_key = \"k\"; body = \"json:x\";\n"
        "                  headers = { h = \"header:x?\"; }; } ); }\n);\n";
    conf_t *c = must_load("a SQL handler queue", good);
    if (!c)
        return;
    const conf_queue_t *q = &c->queues[0];
    ok(strcmp(q->handler, "sql") == 0, "handler = \"sql\" is not taken as a file (got %s)",
       q->handler);
    ok(q->n_sql == 2 && q->sql[0].n_params == 2 &&
           strcmp(q->sql[0].params[0], "json:a.b[0]") == 0 &&
           strcmp(q->sql[0].expect, ">=1") == 0 && q->sql[0].on_mismatch == CONF_SQL_RETRY &&
           q->sql[0].on_duplicate == CONF_SQL_REJECT && q->sql[1].n_params == 0 &&
           q->sql[1].expect == NULL && q->sql[1].on_duplicate == CONF_SQL_OK,
       "statements, params, expect and the verdicts load");
    ok(q->sql[0].line == line_of(good, "{ statement = \"INSERT") &&
           q->sql[1].line == line_of(good, "{ statement = \"DO 1"),
       "each statement knows its line (%d, %d)", q->sql[0].line, q->sql[1].line);
    ok(q->n_publish == 1 && strcmp(q->publish[0].exchange, "") == 0 &&
           strcmp(q->publish[0].body, "json:x") == 0 && q->publish[0].n_headers == 1 &&
           strcmp(q->publish[0].headers[0].sval, "header:x?") == 0,
       "onward messages load, exchange \"\" by default");
    char *d1 = dump_to_string(c), err[1024];
    conf_t *c2 = NULL;
    int rc = conf_load(write_file("sqldump.conf", d1), &c2, err, sizeof(err));
    ok(rc == 0, "the dump of a SQL handler queue loads again%s%s", rc ? ": " : "", rc ? err : "");
    if (rc == 0) {
        char *d2 = dump_to_string(c2);
        ok(strcmp(strchr(d1, '\n'), strchr(d2, '\n')) == 0, "its dump of the dump is identical");
        free(d2);
        conf_free(c2);
    }
    free(d1);
    conf_free(c);

#define SQLQ(extra) DB "queues = (\n  { name = \"q1\"; handler = \"sql\";\n" extra "  }\n);\n"
    expect_error("handler = \"sql\" without statements", SQLQ(""), "handler = \"sql\"",
                 "queues.[0].sql: handler = \"sql\" needs a list of statements: sql = ( { "
                 "statement = \"...\"; params = [ ... ]; } )");
    expect_error("statements on a plugin queue",
                 DB Q1("    sql = ( { statement = \"DO 1\"; } );\n"), "sql = (",
                 "queues.[0].sql: only a queue with handler = \"sql\" runs statements and onward "
                 "messages from the config (this one's handler is h.so)");
    expect_error("an unknown source",
                 SQLQ("    sql = ( { statement = \"DO ?\";\n"
                      "              params = [ \"jsn:a\" ]; } );\n"),
                 "\"jsn:a\"",
                 "queues.[0].sql.[0].params.[0]: unknown source \"jsn:a\" (expected json:PATH, "
                 "header:NAME, msg:id, msg:routing_key, msg:exchange, msg:timestamp, "
                 "msg:content_type, body or const:TEXT, with ? at the end for optional)");
    expect_error(
        "a malformed expect",
        SQLQ("    sql = ( { statement = \"DO 1\";\n              expect = \"1..x\"; } );\n"),
        "expect =",
        "queues.[0].sql.[0].expect: \"1..x\" is not an affected-row rule (expected "
        "\"N\", \"A..B\" with A <= B, or \">=N\")");
    expect_error("a statement that would end idemd's transaction, on the second statement's line",
                 SQLQ("    sql = ( { statement = \"DO 1\"; },\n"
                      "            { statement = \"  -- x\\n commit\"; } );\n"),
                 "commit",
                 "queues.[0].sql.[1].statement: statement 2 (commit) would end idemd's "
                 "transaction: not allowed in a handler");
    expect_error("an executable comment",
                 SQLQ("    sql = ( { statement = \"SELECT 1 /*!50700 ; COMMIT */\"; } );\n"),
                 "SELECT 1",
                 "queues.[0].sql.[0].statement: statement 1: executable comments are not allowed "
                 "in a handler statement (their text runs as SQL on some servers and versions)");
    expect_error("an unknown on_mismatch",
                 SQLQ("    sql = ( { statement = \"DO 1\"; on_mismatch = \"skip\"; } );\n"),
                 "on_mismatch",
                 "queues.[0].sql.[0].on_mismatch: must be one of reject, retry, ok (got \"skip\")");
    expect_error("a statement without its text",
                 SQLQ("    sql = ( { params = [ \"msg:id\" ]; } );\n"), "{ params",
                 "queues.[0].sql.[0].statement: required setting is missing");
    expect_error("an onward body that is not a body source",
                 SQLQ("    sql = ( { statement = \"DO 1\"; } );\n"
                      "    publish = ( { routing_key = \"k\"; body = \"msg:id\"; } );\n"),
                 "body = ",
                 "queues.[0].publish.[0].body: must be \"body\" or \"json:PATH\" (got "
                 "\"msg:id\")");
    expect_error("an integer header",
                 SQLQ("    sql = ( { statement = \"DO 1\"; } );\n"
                      "    publish = ( { routing_key = \"k\";\n"
                      "                  headers = { n = 5; }; } );\n"),
                 "n = 5",
                 "queues.[0].publish.[0].headers.n: must be a source string such as "
                 "\"json:PATH\" or \"const:TEXT\" (an integer constant is written "
                 "\"const:5\")");
    expect_error("settings on a SQL handler queue",
                 SQLQ("    sql = ( { statement = \"DO 1\"; } );\n    settings = { a = 1; };\n"),
                 "settings",
                 "queues.[0].settings: the SQL handler takes no settings group: its "
                 "statements are in sql = ( ... )");
#undef SQLQ
}

static void root_path(char *buf, size_t len, const char *rel)
{
    snprintf(buf, len, "%s/%s", t_root, rel);
}

/* The dump without its first line (the path) and without the queues' "settings" group. */
static char *dump_comparable(const conf_t *c)
{
    char *d = dump_to_string(c);
    char *body = d ? strchr(d, '\n') : NULL;
    char *out = body ? strdup(body + 1) : NULL;
    free(d);
    char *s = out ? strstr(out, "        settings = {\n") : NULL;
    if (s) {
        char *end = strstr(s, "\n        };\n");
        if (end)
            memmove(s, end + 12, strlen(end + 12) + 1);
    } else if (out && (s = strstr(out, "        # settings: not set\n"))) {
        memmove(s, s + 28, strlen(s + 28) + 1);
    }
    return out;
}

/*
 * Independent of the generator: conf/idemd.conf loads to the same effective
 * configuration as a file with only the required settings (same values), so
 * every value it shows is the loader's default.
 */
/* broker.hosts and database.hosts: endpoints, exclusions, the dump. */
static void test_hosts(void)
{
    conf_t *c = must_load(
        "hosts lists",
        "broker = { hosts = [ \"r1:5673\", \"r2\", \"[::1]:5674\" ]; port = 5699; };\n"
        "database = { database = \"t\"; hosts = [ \"d1:3307\", \"d2:3308\" ]; };\n" Q1(""));
    if (c) {
        char host[256];
        int port = 0;
        ok(c->broker.n_hosts == 3 && c->database.n_hosts == 2, "hosts loaded");
        ok(conf_endpoint(c->broker.hosts[0], c->broker.port, host, sizeof(host), &port) == 0 &&
               strcmp(host, "r1") == 0 && port == 5673,
           "host:port split");
        ok(conf_endpoint(c->broker.hosts[1], c->broker.port, host, sizeof(host), &port) == 0 &&
               strcmp(host, "r2") == 0 && port == 5699,
           "a host without a port takes port");
        ok(conf_endpoint(c->broker.hosts[2], c->broker.port, host, sizeof(host), &port) == 0 &&
               strcmp(host, "::1") == 0 && port == 5674,
           "[ipv6]:port split");
        char *d = dump_to_string(c);
        ok(strstr(d, "hosts = [ \"r1:5673\", \"r2\", \"[::1]:5674\" ];") &&
               strstr(d, "# host: not used: hosts is set"),
           "dump shows hosts, and host as unused");
        conf_t *c2 = NULL;
        char err[1024];
        int rc = conf_load(write_file("dump.conf", d), &c2, err, sizeof(err));
        ok(rc == 0 && c2->broker.n_hosts == 3 && strcmp(c2->database.hosts[1], "d2:3308") == 0,
           "a dump with hosts loads again%s%s", rc ? ": " : "", rc ? err : "");
        bool same = c2 != NULL;
        for (int i = 0; same && i < 3; i++)
            same = strcmp(c->broker.hosts[i], c2->broker.hosts[i]) == 0;
        ok(same, "and has the same hosts");
        conf_free(c2);
        free(d);
        conf_free(c);
    }
    expect_error("malformed broker.hosts entry",
                 "broker = {\n  hosts = [ \"r1:5672\",\n \"r2:99999\" ]; };\n" DB Q1(""), "99999",
                 "broker.hosts.[1]: must be \"host\" or \"host:port\" (IPv6: \"[addr]:port\"), "
                 "port 1..65535 (got \"r2:99999\")");
    expect_error("bare IPv6 in database.hosts",
                 "database = { database = \"t\";\n  hosts = [ \"::1\" ]; };\n" Q1(""), "::1",
                 "database.hosts.[0]: must be \"host\" or \"host:port\" (IPv6: \"[addr]:port\"), "
                 "port 1..65535 (got \"::1\")");
    expect_error("broker.hosts with host",
                 "broker = { host = \"a\";\n  hosts = [ \"b\" ]; };\n" DB Q1(""), "hosts",
                 "broker.hosts: cannot be used together with host (line 1)");
    expect_error(
        "database.hosts with socket",
        "database = { database = \"t\"; socket = \"/s\";\n  hosts = [ \"b\" ]; };\n" Q1(""),
        "hosts", "database.hosts: cannot be used together with socket (line 1)");
    expect_error("hosts of numbers", "broker = {\n  hosts = [ 1, 2 ]; };\n" DB Q1(""), "hosts",
                 "broker.hosts.[0]: must be a string (got an integer)");
}

static void test_sample_effective(void)
{
    char path[PATH_MAX + 64], err[1024];
    conf_t *full = NULL, *bare = NULL;

    root_path(path, sizeof(path), "conf/idemd.conf");
    if (conf_load(path, &full, err, sizeof(err)) != 0) {
        ok(false, "conf/idemd.conf loads: %s", err);
        return;
    }
    bare = must_load("required settings only",
                     "database = { database = \"idemd\"; };\n"
                     "queues = ( { name = \"orders.pay\";\n"
                     "  handler = \"/usr/local/lib/idemd/plugins/order_pay.so\"; } );\n");
    char *a = dump_comparable(full), *b = bare ? dump_comparable(bare) : NULL;
    if (!ok(a && b && strcmp(a, b) == 0, "every value conf/idemd.conf sets is the default"))
        printf("# conf/idemd.conf:\n%s# defaults:\n%s", a ? a : "", b ? b : "");
    free(a);
    free(b);
    conf_free(full);
    conf_free(bare);
}

static void test_samples(void)
{
    char path[PATH_MAX + 64], err[1024];
    conf_t *c = NULL;

    root_path(path, sizeof(path), "conf/idemd.conf");
    int rc = conf_load(path, &c, err, sizeof(err));
    if (!ok(rc == 0, "conf/idemd.conf loads"))
        printf("# %s\n", err);
    if (rc == 0) {
        const char *table = NULL;
        ok(c->n_queues == 1 &&
               strcmp(c->queues[0].handler, "/usr/local/lib/idemd/plugins/order_pay.so") == 0,
           "idemd.conf uses the installed order_pay plugin");
        ok(c->queues[0].settings &&
               config_setting_lookup_string(c->queues[0].settings, "table", &table) &&
               strcmp(table, "orders") == 0,
           "idemd.conf passes settings.table to the plugin");
        conf_free(c);
    }
    c = NULL;
    root_path(path, sizeof(path), "conf/minimal.conf");
    rc = conf_load(path, &c, err, sizeof(err));
    if (!ok(rc == 0, "conf/minimal.conf loads"))
        printf("# %s\n", err);
    conf_free(c);

    /* conf/idemd.conf is generated from the table, so its values are the defaults. */
    char *sample = NULL;
    size_t slen = 0;
    FILE *sm = open_memstream(&sample, &slen);
    conf_sample(sm);
    fclose(sm);
    root_path(path, sizeof(path), "conf/idemd.conf");
    char *file = read_all(path);
    if (!ok(file && strcmp(file, sample) == 0, "conf/idemd.conf is the sample generated from the "
                                               "settings table"))
        printf("# regenerate with: build/tests/unit/test_conf --sample >conf/idemd.conf\n");
    free(file);
    free(sample);
    test_sample_effective();

    /* The README shows conf/minimal.conf as it is. */
    root_path(path, sizeof(path), "conf/minimal.conf");
    char *minimal = read_all(path);
    root_path(path, sizeof(path), "README.md");
    char *readme = read_all(path);
    char *block = NULL;
    if (minimal && asprintf(&block, "```\n%s```\n", minimal) < 0)
        block = NULL;
    ok(readme && block && strstr(readme, block),
       "README.md shows conf/minimal.conf verbatim in a code block");
    free(block);
    free(readme);
    free(minimal);

    /* docs/configuration.md embeds the reference generated from the table. */
    char *ref = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&ref, &len);
    conf_reference(m);
    fclose(m);
    root_path(path, sizeof(path), "docs/configuration.md");
    char *doc = read_all(path);
    if (!ok(doc && strstr(doc, ref), "docs/configuration.md holds the current reference"))
        printf("# regenerate with: build/tests/unit/test_conf --reference\n");
    free(doc);
    free(ref);
}

static void find_root(const char *argv0)
{
    char exe[PATH_MAX];
    if (access("conf/idemd.conf", R_OK) == 0 && getcwd(t_root, sizeof(t_root)))
        return;
    /* Run from elsewhere: the binary is ROOT/build/tests/unit/test_conf. */
    snprintf(exe, sizeof(exe), "%s", argv0);
    snprintf(t_root, sizeof(t_root), "%s/../../..", dirname(exe));
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    remove(path); /* what cannot go stays in the temp dir */
    return 0;
}

/* Remove t_dir and everything the tests wrote in it. */
static void remove_dir(void)
{
    nftw(t_dir, remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--reference") == 0) {
        conf_reference(stdout);
        return 0;
    }
    if (argc > 1 && strcmp(argv[1], "--sample") == 0) {
        conf_sample(stdout);
        return 0;
    }
    find_root(argv[0]);
    const char *tmp = getenv("TMPDIR");
    snprintf(t_dir, sizeof(t_dir), "%s/test_conf.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(t_dir)) {
        fprintf(stderr, "mkdtemp: %s\n", strerror(errno));
        return 2;
    }

    test_defaults();
    test_values();
    test_range_errors();
    test_type_errors();
    test_required();
    test_unknown();
    test_hosts();
    test_settings_passthrough();
    test_passwords();
    test_tls();
    test_plain_remote();
    test_metrics();
    test_metrics_token();
    test_queue_names();
    test_order_overrides();
    test_password_permissions();
    test_file_errors();
    test_includes();
    test_dump();
    test_sql();
    test_samples();

    remove_dir();
    printf("# %d tests, %d failed\n", t_n, t_failed);
    return t_failed ? 1 : 0;
}
