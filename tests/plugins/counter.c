/* counter.c: test handler that counts its effects per (queue, msg_id) and misbehaves on request. */

/*
 * Each handled message runs
 *   INSERT INTO <table>(queue, msg_id, n) VALUES(?, ?, 1) ON DUPLICATE KEY UPDATE n = n + 1
 * inside idemd's transaction, so after a test n must be 1 for every id whose
 * message was acked: n > 1 means an effect was committed twice. The effect is
 * written before the body is looked at, so a crash, hang or RETRY always
 * happens with an uncommitted effect in the open transaction.
 *
 * Bodies: "reject" -> REJECT; "retry" -> RETRY every time; "retry-once" ->
 * RETRY on the first attempt only (attempt 1 and not redelivered; attempt
 * counts retries that come back through delay queues, where the broker's
 * redelivered flag is false again); "segv" -> SIGSEGV; "abort" -> abort();
 * "hang" -> never returns; "skip" -> OK without any SQL (no effect);
 * a body starting with "big-reject:" -> REJECT, "big-retry:" -> RETRY every
 * time (large bodies from badpub --body TEXT --body-size N);
 * "reject-until-fixed" -> REJECT until a row named 'fixed' is in counter_flags
 * (tests/schema.sql: a test "fixes the handler" by inserting it), then OK;
 * "reject-echo:TEXT" -> REJECT with TEXT (any bytes, up to a NUL) as the reason,
 * to test that a handler's reason cannot forge a log line; "load-local" -> LOAD DATA
 * LOCAL INFILE '/etc/hostname' INTO TABLE load_local: OK if the client sent the file,
 * REJECT with the error if it refused; "whoami" -> REJECT with "whoami user_id=U
 * app_id=A" (ABI 1.1 fields); "trace" -> OK after writing the message's
 * trace context (ABI 1.4 fields) into trace_seen (tests/schema.sql), "trace-retry"
 * -> the same, then RETRY every time (the row is rolled back). Ending idemd's transaction,
 * after the effect: "commit-then-retry" -> COMMIT (its error ignored), then RETRY;
 * "commit-then-ok" -> COMMIT (ignored), then OK; "rollback-then-ok" -> ROLLBACK (ignored), then
 * OK; "commit" -> COMMIT, RETRY with the error if
 * it fails; "ddl" -> CREATE TABLE ddl_made (ignored), then OK; "autocommit" ->
 * mysql_autocommit(db, 1) (ignored), then OK. Anything else -> OK.
 *
 * Settings: table (default "effects", [A-Za-z0-9_]+), sleep_ms (default 0:
 * sleep before each message, to make batches and shutdowns observable),
 * reconcile_sleep_ms (default 0: how long each reconcile() takes), reconcile_commit
 * (default 0: 1 makes reconcile() end with a COMMIT, its error ignored), hold_file (default
 * none: while that file exists, each message first waits for it to go, at most hold_ms, default
 * 1500: a test holds a batch open until the broker is in the state it wants, whatever the time
 * that takes, and lets it go at once).
 *
 * reconcile() records each run in reconcile_runs (tests/schema.sql): the
 * worker's pid, and the database's clock when it started and when it ended
 * (after the sleep), inside idemd's reconcile transaction, so only runs that
 * idemd committed appear.
 */
#include <idemd/handler.h>

#include <errno.h>
#include <mysql.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define COUNTER_TABLE_MAX 64

typedef struct counter_state {
    MYSQL *db;
    MYSQL_STMT *insert;
    long long sleep_ms;
    long long reconcile_sleep_ms;
    long long reconcile_commit;
    const char *hold_file; /* the host's string, valid until fini() */
    long long hold_ms;
} counter_state_t;

static int counter_valid_table(const char *t)
{
    size_t n = strlen(t);

    if (n == 0 || n > COUNTER_TABLE_MAX)
        return 0;
    return strspn(t, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_") == n;
}

static void counter_fini(void *state)
{
    counter_state_t *st = state;

    if (st == NULL)
        return;
    /* Safe after the connection died too: the client library only frees then. */
    if (st->insert != NULL)
        mysql_stmt_close(st->insert);
    free(st);
}

static int counter_init(const idemd_host_t *host, const idemd_settings_t *settings, MYSQL *db,
                        void **state, char *err, size_t errlen)
{
    counter_state_t *st = NULL;
    const char *table = "effects";
    char sql[256];

    *state = NULL;
    (void)host->setting_string(settings, "table", &table);
    if (!counter_valid_table(table)) {
        snprintf(err, errlen,
                 "settings.table \"%s\" is not a plain table name ([A-Za-z0-9_]{1,%d})", table,
                 COUNTER_TABLE_MAX);
        goto fail;
    }
    st = calloc(1, sizeof(*st));
    if (st == NULL) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    st->db = db;
    (void)host->setting_int(settings, "sleep_ms", &st->sleep_ms);
    if (st->sleep_ms < 0) {
        snprintf(err, errlen, "settings.sleep_ms is %lld (expected >= 0)", st->sleep_ms);
        goto fail;
    }
    st->hold_ms = 1500;
    (void)host->setting_string(settings, "hold_file", &st->hold_file);
    (void)host->setting_int(settings, "hold_ms", &st->hold_ms);
    if (st->hold_ms < 0) {
        snprintf(err, errlen, "settings.hold_ms is %lld (expected >= 0)", st->hold_ms);
        goto fail;
    }
    (void)host->setting_int(settings, "reconcile_sleep_ms", &st->reconcile_sleep_ms);
    (void)host->setting_int(settings, "reconcile_commit", &st->reconcile_commit);
    if (st->reconcile_sleep_ms < 0) {
        snprintf(err, errlen, "settings.reconcile_sleep_ms is %lld (expected >= 0)",
                 st->reconcile_sleep_ms);
        goto fail;
    }
    snprintf(sql, sizeof(sql),
             "INSERT INTO `%s`(queue, msg_id, n) VALUES(?, ?, 1) ON DUPLICATE KEY UPDATE n = n + 1",
             table);
    st->insert = mysql_stmt_init(db);
    if (st->insert == NULL) {
        snprintf(err, errlen, "mysql error %u: %s", mysql_errno(db), mysql_error(db));
        goto fail;
    }
    if (mysql_stmt_prepare(st->insert, sql, (unsigned long)strlen(sql)) != 0) {
        snprintf(err, errlen, "preparing the INSERT into `%s`: mysql error %u: %s", table,
                 mysql_stmt_errno(st->insert), mysql_stmt_error(st->insert));
        goto fail;
    }
    *state = st;
    return 0;

fail:
    counter_fini(st);
    return -1;
}

static int counter_body_is(const idemd_message_t *msg, const char *word)
{
    size_t n = strlen(word);

    return msg->body_len == n && memcmp(msg->body, word, n) == 0;
}

/* Whether the test has "fixed the handler": a row 'fixed' in counter_flags. Errors count as
 * not fixed. */
static int counter_fixed(MYSQL *db)
{
    MYSQL_RES *res;
    MYSQL_ROW row;
    int fixed = 0;

    if (mysql_query(db, "SELECT COUNT(*) FROM counter_flags WHERE name = 'fixed'") != 0 ||
        (res = mysql_store_result(db)) == NULL)
        return 0;
    if ((row = mysql_fetch_row(res)) != NULL && row[0] != NULL)
        fixed = atoi(row[0]) > 0;
    mysql_free_result(res);
    return fixed;
}

static void counter_sleep_ms(long long ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};

    /* Keep sleeping through signals: idemd finishes the current message on SIGTERM. */
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* Wait while the hold file exists, at most hold_ms, in 20 ms steps. */
static void counter_hold(const counter_state_t *st)
{
    long long waited = 0;

    if (st->hold_file == NULL)
        return;
    while (waited < st->hold_ms && access(st->hold_file, F_OK) == 0) {
        counter_sleep_ms(20);
        waited += 20;
    }
}

/* Write msg's trace context (ABI 1.4) into trace_seen. 0, or -1 with err. */
static int counter_trace_seen(MYSQL *db, const idemd_message_t *msg, char *err, size_t errlen)
{
    const char *v[] = {msg->traceparent, msg->tracestate, msg->baggage, msg->trace_id,
                       msg->span_id};
    char sql[2 * (512 + 5 * 8192) + 300], *o = sql;
    size_t idl = msg->msg_id_len < 255 ? msg->msg_id_len : 255;
    o += sprintf(o, "INSERT INTO trace_seen (msg_id, traceparent, tracestate, baggage, trace_id, "
                    "span_id) VALUES ('");
    o += mysql_real_escape_string(db, o, msg->msg_id, (unsigned long)idl);
    for (int i = 0; i < 5; i++) {
        size_t n = strnlen(v[i], 8192);
        o += sprintf(o, "', '");
        o += mysql_real_escape_string(db, o, v[i], (unsigned long)n);
    }
    strcpy(o, "')");
    if (mysql_query(db, sql) != 0) {
        snprintf(err, errlen, "trace_seen: %s", mysql_error(db));
        return -1;
    }
    return 0;
}

static idemd_result_t counter_handle(void *state, MYSQL *db, const idemd_message_t *msg, char *err,
                                     size_t errlen)
{
    counter_state_t *st = state;
    MYSQL_BIND b[2];
    unsigned long queue_len = (unsigned long)strlen(msg->queue);
    unsigned long id_len = (unsigned long)msg->msg_id_len;

    if (db != st->db) {
        snprintf(err, errlen, "handler state was prepared on another connection");
        return IDEMD_RESULT_RETRY;
    }
    counter_hold(st);
    if (st->sleep_ms > 0)
        counter_sleep_ms(st->sleep_ms);
    if (counter_body_is(msg, "skip"))
        return IDEMD_RESULT_OK; /* a filter: not for us, no SQL at all */

    memset(b, 0, sizeof(b));
    b[0].buffer_type = MYSQL_TYPE_STRING;
    b[0].buffer = (void *)msg->queue;
    b[0].buffer_length = queue_len;
    b[0].length = &queue_len;
    b[1].buffer_type = MYSQL_TYPE_BLOB;
    b[1].buffer = (void *)msg->msg_id;
    b[1].buffer_length = id_len;
    b[1].length = &id_len;
    if (mysql_stmt_bind_param(st->insert, b) != 0 || mysql_stmt_execute(st->insert) != 0) {
        snprintf(err, errlen, "mysql error %u: %s", mysql_stmt_errno(st->insert),
                 mysql_stmt_error(st->insert));
        return IDEMD_RESULT_RETRY;
    }

    if (counter_body_is(msg, "commit")) {
        if (mysql_query(db, "COMMIT") != 0) {
            snprintf(err, errlen, "mysql error %u: %s", mysql_errno(db), mysql_error(db));
            return IDEMD_RESULT_RETRY;
        }
        return IDEMD_RESULT_OK;
    }
    if (counter_body_is(msg, "rollback-then-ok")) {
        (void)mysql_query(db, "ROLLBACK");
        return IDEMD_RESULT_OK;
    }
    if (counter_body_is(msg, "commit-then-retry") || counter_body_is(msg, "commit-then-ok")) {
        (void)mysql_query(db, "COMMIT");
        if (counter_body_is(msg, "commit-then-ok"))
            return IDEMD_RESULT_OK;
        snprintf(err, errlen, "test commit-then-retry");
        return IDEMD_RESULT_RETRY;
    }
    if (counter_body_is(msg, "ddl")) {
        (void)mysql_query(db, "CREATE TABLE ddl_made (i INT)");
        return IDEMD_RESULT_OK;
    }
    if (counter_body_is(msg, "autocommit")) {
        (void)mysql_autocommit(db, 1);
        return IDEMD_RESULT_OK;
    }
    if (counter_body_is(msg, "whoami")) { /* ABI 1.1: who published, in the reason */
        snprintf(err, errlen, "whoami user_id=%s app_id=%s", msg->user_id, msg->app_id);
        return IDEMD_RESULT_REJECT;
    }
    if (counter_body_is(msg, "trace") || counter_body_is(msg, "trace-retry")) {
        if (counter_trace_seen(db, msg, err, errlen) != 0)
            return IDEMD_RESULT_RETRY;
        if (counter_body_is(msg, "trace-retry")) {
            snprintf(err, errlen, "test trace-retry");
            return IDEMD_RESULT_RETRY;
        }
        return IDEMD_RESULT_OK;
    }
    if (counter_body_is(msg, "reject")) {
        snprintf(err, errlen, "test reject");
        return IDEMD_RESULT_REJECT;
    }
    if (counter_body_is(msg, "reject-until-fixed") && !counter_fixed(db)) {
        snprintf(err, errlen, "test reject-until-fixed");
        return IDEMD_RESULT_REJECT;
    }
    if (msg->body_len >= 12 && memcmp(msg->body, "reject-echo:", 12) == 0) {
        snprintf(err, errlen, "%.*s", (int)(msg->body_len - 12), (const char *)msg->body + 12);
        return IDEMD_RESULT_REJECT;
    }
    if (counter_body_is(msg, "load-local")) {
        if (mysql_query(db, "LOAD DATA LOCAL INFILE '/etc/hostname' INTO TABLE load_local") != 0) {
            snprintf(err, errlen, "mysql error %u: %s", mysql_errno(db), mysql_error(db));
            return IDEMD_RESULT_REJECT;
        }
        return IDEMD_RESULT_OK;
    }
    if (msg->body_len >= 11 && memcmp(msg->body, "big-reject:", 11) == 0) {
        snprintf(err, errlen, "test big-reject");
        return IDEMD_RESULT_REJECT;
    }
    if (msg->body_len >= 10 && memcmp(msg->body, "big-retry:", 10) == 0) {
        snprintf(err, errlen, "test big-retry");
        return IDEMD_RESULT_RETRY;
    }
    if (counter_body_is(msg, "retry")) {
        snprintf(err, errlen, "test retry");
        return IDEMD_RESULT_RETRY;
    }
    if (counter_body_is(msg, "retry-once") && !msg->redelivered && msg->attempt <= 1) {
        snprintf(err, errlen, "test retry-once");
        return IDEMD_RESULT_RETRY;
    }
    if (counter_body_is(msg, "segv")) {
        raise(SIGSEGV);
        abort(); /* only if a SIGSEGV handler returned: still never report OK */
    }
    if (counter_body_is(msg, "abort"))
        abort();
    if (counter_body_is(msg, "hang"))
        for (;;)
            pause();
    return IDEMD_RESULT_OK;
}

static int counter_reconcile(void *state, MYSQL *db, char *err, size_t errlen)
{
    counter_state_t *st = state;
    char sql[128];

    snprintf(sql, sizeof(sql), "INSERT INTO reconcile_runs (pid, started_at) VALUES (%d, NOW(6))",
             (int)getpid());
    if (mysql_query(db, sql) != 0)
        goto fail;
    if (st->reconcile_sleep_ms > 0)
        counter_sleep_ms(st->reconcile_sleep_ms);
    if (mysql_query(db,
                    "UPDATE reconcile_runs SET ended_at = NOW(6) WHERE id = LAST_INSERT_ID()") != 0)
        goto fail;
    if (st->reconcile_commit)
        (void)mysql_query(db, "COMMIT");
    return 0;
fail:
    snprintf(err, errlen, "mysql error %u: %s", mysql_errno(db), mysql_error(db));
    return -1;
}

const idemd_handler_t idemd_handler = {
    .abi_major = IDEMD_HANDLER_ABI_MAJOR,
    .abi_minor = IDEMD_HANDLER_ABI_MINOR,
    .name = "counter",
    .init = counter_init,
    .handle = counter_handle,
    .fini = counter_fini,
    .reconcile = counter_reconcile,
};
