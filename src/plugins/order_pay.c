/* order_pay.c: handler plugin that marks an order paid for each {"orderId": N} payment message. */

/*
 * Effect, inside idemd's transaction (prepared once per connection in init):
 *   UPDATE <table> SET status = 2, pay_time = NOW(), pay_count = pay_count + 1
 *   WHERE id = ? AND status = 1
 * "AND status = 1" is the business guard; settings.guard = false drops it,
 * which is only good as the negative control in tests (pay_count then counts
 * every delivery that reached the handler).
 *
 * Outcomes:
 * - the UPDATE changed a row: OK.
 * - it changed nothing: a SELECT says why. Order already paid (status 2): OK,
 *   nothing to do. No such order, or a status other than 1 or 2: REJECT, so
 *   the payment waits in the dead-letter queue for a person instead of being
 *   acked and forgotten.
 * - the body is not {"orderId": <positive integer>}, or is over 64 KiB:
 *   REJECT with the reason.
 *   The body is read by idemd's one JSON reader through host->body_value
 *   (ABI 1.6; docs/sql-handler.md, "The body as JSON"), the reader the SQL
 *   handler and order_key use: RFC 8259 with nothing but white space after
 *   the value, and a duplicate member name at any depth ({"orderId": 1,
 *   "orderId": 2}), invalid UTF-8, a lone surrogate or U+0000 in a member
 *   name refuses the body with the reader's reason ("body is not JSON: ..."
 *   or "body is not I-JSON: ..."). init() refuses a host older than 1.6.
 *   orderId may also be a JSON string of decimal digits ("1001"), because
 *   producers in JavaScript cannot send integers above 2^53 as numbers.
 *   Floats (1001.0, 1e3) are refused: they may have lost digits already.
 *   So are 0, negatives, strings of anything but canonical digits, values
 *   above INT64_MAX, and a value whose text is over 63 bytes (the reader's
 *   reason).
 * - any MySQL error: RETRY with "mysql error NNNN: text".
 *
 * Settings: table (default "orders", [A-Za-z0-9_]{1,64}), guard (default true),
 * paid_exchange (unset: none) and paid_routing_key (default "order.paid"):
 * with paid_exchange, each payment that marks an order paid also sends
 * {"orderId": N} there through idemd's transactional outbox (host ABI 1.3),
 * so the onward message exists if and only if the payment commits.
 * log_table (unset: none): every payment the handler accepts (verdict OK)
 * also gets a row INSERT INTO <log_table> (order_id, msg_id) VALUES (?, ?):
 * a second prepared statement per message in handle(), one multi-row INSERT
 * per batch in handle_batch(). It is what a typical two-statement handler
 * costs; `make bench` measures it (schema: bench/order_pay_log.sql).
 */
#include <idemd/handler.h>

#include <errno.h>
#include <inttypes.h>
#include <mysql.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ORDER_PAY_MAX_BODY 65536 /* bytes: a larger body is refused unparsed */

#define ORDER_PAY_TABLE_MAX 64
#define ORDER_STATUS_UNPAID 1
#define ORDER_STATUS_PAID 2
#define STR_(x) #x
#define STR(x) STR_(x)

/* One per worker and connection: made by init(), freed by fini(). */
typedef struct order_pay_state {
    const idemd_host_t *host;
    MYSQL *db;          /* the connection the statements belong to */
    MYSQL_STMT *update; /* the payment */
    MYSQL_STMT *status; /* SELECT status: run only when the UPDATE changed nothing */
    MYSQL_STMT *log;    /* INSERT INTO log_table, or NULL without settings.log_table */
    MYSQL_BIND log_param[2];
    unsigned long log_msg_id_len;
    char log_table[ORDER_PAY_TABLE_MAX + 1];
    long long order_id; /* the parameter of both statements */
    int order_status;   /* the result of the SELECT */
    /* MYSQL_BIND.is_null points to my_bool in Connector/C, bool in libmysqlclient. */
    __typeof__(*((MYSQL_BIND *)0)->is_null) status_null;
    char table[ORDER_PAY_TABLE_MAX + 1];
    int guard;                 /* settings.guard */
    const char *paid_exchange; /* settings.paid_exchange, or NULL */
    const char *paid_rkey;     /* settings.paid_routing_key */
    char *sql;                 /* handle_batch's statements, grown as needed */
    size_t sql_size;
    long long *ids; /* handle_batch: each message's orderId (0: rejected), then the distinct ones */
    size_t ids_size;
    char *log_sql; /* handle_batch's log INSERT, grown as needed */
    size_t log_sql_size;
} order_pay_state_t;

static int order_pay_valid_table(const char *t)
{
    size_t n = strlen(t);

    if (n == 0 || n > ORDER_PAY_TABLE_MAX)
        return 0;
    return strspn(t, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_") == n;
}

static void order_pay_fini(void *state)
{
    order_pay_state_t *st = state;

    if (st == NULL)
        return;
    /* mysql_stmt_close only frees memory when the connection is already gone. */
    if (st->update != NULL)
        mysql_stmt_close(st->update);
    if (st->status != NULL)
        mysql_stmt_close(st->status);
    if (st->log != NULL)
        mysql_stmt_close(st->log);
    free(st->sql);
    free(st->ids);
    free(st->log_sql);
    free(st);
}

/* Prepare sql on st->db into *out with st->order_id bound as its one parameter. */
static int order_pay_prepare(order_pay_state_t *st, const char *sql, MYSQL_STMT **out, char *err,
                             size_t errlen)
{
    MYSQL_BIND param;

    *out = mysql_stmt_init(st->db);
    if (*out == NULL) {
        snprintf(err, errlen, "mysql error %u: %s", mysql_errno(st->db), mysql_error(st->db));
        return -1;
    }
    memset(&param, 0, sizeof(param));
    param.buffer_type = MYSQL_TYPE_LONGLONG;
    param.buffer = &st->order_id;
    if (mysql_stmt_prepare(*out, sql, (unsigned long)strlen(sql)) != 0 ||
        mysql_stmt_bind_param(*out, &param) != 0) {
        snprintf(err, errlen, "preparing \"%s\": mysql error %u: %s", sql, mysql_stmt_errno(*out),
                 mysql_stmt_error(*out));
        return -1;
    }
    return 0;
}

/* Prepare the log INSERT on st->db: order_id and msg_id, bound to st (msg_id set per call). */
static int order_pay_prepare_log(order_pay_state_t *st, const char *log_table, char *err,
                                 size_t errlen)
{
    char sql[160];

    snprintf(st->log_table, sizeof(st->log_table), "%s", log_table);
    snprintf(sql, sizeof(sql), "INSERT INTO `%s` (order_id, msg_id) VALUES (?, ?)", log_table);
    st->log = mysql_stmt_init(st->db);
    if (st->log == NULL) {
        snprintf(err, errlen, "mysql error %u: %s", mysql_errno(st->db), mysql_error(st->db));
        return -1;
    }
    memset(st->log_param, 0, sizeof(st->log_param));
    st->log_param[0].buffer_type = MYSQL_TYPE_LONGLONG;
    st->log_param[0].buffer = &st->order_id;
    st->log_param[1].buffer_type = MYSQL_TYPE_STRING;
    st->log_param[1].length = &st->log_msg_id_len;
    if (mysql_stmt_prepare(st->log, sql, (unsigned long)strlen(sql)) != 0) {
        snprintf(err, errlen, "preparing \"%s\": mysql error %u: %s", sql,
                 mysql_stmt_errno(st->log), mysql_stmt_error(st->log));
        return -1;
    }
    return 0;
}

/* After an OK payment of st->order_id by msg: its log row, if settings.log_table. */
static idemd_result_t order_pay_log_one(order_pay_state_t *st, const idemd_message_t *msg,
                                        char *err, size_t errlen)
{
    if (st->log == NULL)
        return IDEMD_RESULT_OK;
    /* The message's id lives only for this call: bind it afresh each time. */
    st->log_param[1].buffer = (void *)msg->msg_id;
    st->log_param[1].buffer_length = (unsigned long)msg->msg_id_len;
    st->log_msg_id_len = (unsigned long)msg->msg_id_len;
    if (mysql_stmt_bind_param(st->log, st->log_param) != 0 || mysql_stmt_execute(st->log) != 0) {
        snprintf(err, errlen, "mysql error %u: %s", mysql_stmt_errno(st->log),
                 mysql_stmt_error(st->log));
        return IDEMD_RESULT_RETRY;
    }
    return IDEMD_RESULT_OK;
}

static int order_pay_init(const idemd_host_t *host, const idemd_settings_t *settings, MYSQL *db,
                          void **state, char *err, size_t errlen)
{
    order_pay_state_t *st = NULL;
    const char *table = "orders", *log_table = NULL;
    int guard = 1;
    char sql[256];
    MYSQL_BIND res;

    *state = NULL;
    (void)host->setting_string(settings, "table", &table);
    (void)host->setting_bool(settings, "guard", &guard);
    (void)host->setting_string(settings, "log_table", &log_table);
    if (!order_pay_valid_table(table)) {
        snprintf(err, errlen,
                 "settings.table \"%s\" is not a plain table name ([A-Za-z0-9_]{1,%d})", table,
                 ORDER_PAY_TABLE_MAX);
        goto fail;
    }
    if (log_table != NULL && !order_pay_valid_table(log_table)) {
        snprintf(err, errlen,
                 "settings.log_table \"%s\" is not a plain table name ([A-Za-z0-9_]{1,%d})",
                 log_table, ORDER_PAY_TABLE_MAX);
        goto fail;
    }
    /* Bodies are read by the host's one JSON reader (ABI 1.6), never by a parser of our own. */
    if (host->abi_minor < 6 || host->body_value == NULL) {
        snprintf(err, errlen,
                 "order_pay needs an idemd with host ABI 1.6 (body_value); this one "
                 "has 1.%u",
                 host->abi_minor);
        goto fail;
    }
    st = calloc(1, sizeof(*st));
    if (st == NULL) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    st->host = host;
    st->db = db;
    st->guard = guard;
    st->paid_rkey = "order.paid";
    (void)host->setting_string(settings, "paid_routing_key", &st->paid_rkey);
    if (host->setting_string(settings, "paid_exchange", &st->paid_exchange) == 0 &&
        host->publish == NULL) {
        snprintf(err, errlen, "settings.paid_exchange needs an idemd with host ABI 1.3 (outbox)");
        goto fail;
    }
    snprintf(st->table, sizeof(st->table), "%s", table);

    snprintf(sql, sizeof(sql),
             "UPDATE `%s` SET status = %d, pay_time = NOW(), pay_count = pay_count + 1 "
             "WHERE id = ?%s",
             table, ORDER_STATUS_PAID, guard ? " AND status = " STR(ORDER_STATUS_UNPAID) : "");
    if (order_pay_prepare(st, sql, &st->update, err, errlen) != 0)
        goto fail;
    snprintf(sql, sizeof(sql), "SELECT status FROM `%s` WHERE id = ?", table);
    if (order_pay_prepare(st, sql, &st->status, err, errlen) != 0)
        goto fail;
    memset(&res, 0, sizeof(res));
    res.buffer_type = MYSQL_TYPE_LONG;
    res.buffer = &st->order_status;
    res.is_null = &st->status_null;
    if (mysql_stmt_bind_result(st->status, &res) != 0) {
        snprintf(err, errlen, "binding the status column: mysql error %u: %s",
                 mysql_stmt_errno(st->status), mysql_stmt_error(st->status));
        goto fail;
    }
    if (log_table != NULL && order_pay_prepare_log(st, log_table, err, errlen) != 0)
        goto fail;

    if (!guard)
        host->log(IDEMD_LOG_WARNING,
                  "order_pay: guard = false: payments to `%s` skip the status check (test only)",
                  table);
    *state = st;
    return 0;

fail:
    order_pay_fini(st);
    return -1;
}

/* What a body the reader accepted is, by its first byte past white space. */
static const char *order_pay_kind(const char *body, size_t len)
{
    size_t i = 0;

    while (i < len && (body[i] == ' ' || body[i] == '\t' || body[i] == '\n' || body[i] == '\r'))
        i++;
    switch (i < len ? body[i] : '\0') {
    case '{':
        return "object";
    case '[':
        return "array";
    case '"':
        return "string";
    case 't':
    case 'f':
        return "boolean";
    case 'n':
        return "null";
    default:
        return "number";
    }
}

/*
 * The orderId of one body, or -1 with the reason in err (the message is
 * rejected). The body is read by the host's body_value (idemd's one JSON
 * reader), so a body the SQL handler or order_key would refuse is refused
 * here with the same reason. Needs no database: the fuzz target
 * tests/fuzz/fuzz_order_pay.c calls it with a host of its own.
 */
static int order_pay_parse_body(const idemd_host_t *host, const idemd_message_t *msg, long long *id,
                                char *err, size_t errlen)
{
    char v[64], shown[24];
    size_t n, i;
    int r;

    if (msg->body_len == 0) {
        snprintf(err, errlen, "empty body (expected {\"orderId\": N})");
        return -1;
    }
    /* A payment is a few dozen bytes: a larger body is no payment, whatever it holds. */
    if (msg->body_len > ORDER_PAY_MAX_BODY) {
        snprintf(err, errlen, "body of %zu bytes is over %d bytes: too large to be a payment",
                 msg->body_len, ORDER_PAY_MAX_BODY);
        return -1;
    }
    r = host->body_value(msg, "orderId", v, sizeof(v), err, errlen);
    if (r < 0)
        return -1;
    if (r == 0) {
        const char *kind = order_pay_kind(msg->body, msg->body_len);
        if (strcmp(kind, "object") == 0)
            snprintf(err, errlen, "orderId missing (expected {\"orderId\": N})");
        else
            snprintf(err, errlen, "body is not a JSON object (got %s; expected {\"orderId\": N})",
                     kind);
        return -1;
    }
    /* v is the value's text: a number as written or a string decoded ("1001" and 1001 read the
     * same, as both are accepted). A canonical positive decimal of at most 19 digits pays. */
    n = strlen(v);
    if (n > 0 && v[0] >= '1' && v[0] <= '9' && strspn(v, "0123456789") == n) {
        char *end;
        errno = 0;
        long long x = strtoll(v, &end, 10);
        if (n > 19 || errno != 0 || *end != '\0') {
            snprintf(err, errlen, "orderId is out of range (more than %" PRId64 ")", INT64_MAX);
            return -1;
        }
        *id = x;
        return 0;
    }
    if (strcmp(v, "0") == 0 ||
        (v[0] == '-' && v[1] >= '0' && v[1] <= '9' && strspn(v + 1, "0123456789") == n - 1)) {
        snprintf(err, errlen, "orderId must be positive (got %.22s)", v);
        return -1;
    }
    /* The text may be anything a producer sent: show a printable start of it only. */
    for (i = 0; i < n && i < sizeof(shown) - 1; i++)
        shown[i] = v[i] >= 0x20 && v[i] < 0x7f ? v[i] : '?';
    shown[i] = '\0';
    snprintf(err, errlen, "orderId is not a positive integer (got '%s'%s; expected N or \"N\")",
             shown, n > i ? "..." : "");
    return -1;
}

/* Why the UPDATE changed nothing: decides the outcome. */
static idemd_result_t order_pay_explain(order_pay_state_t *st, char *err, size_t errlen)
{
    idemd_result_t r;
    int f;

    if (mysql_stmt_execute(st->status) != 0 || mysql_stmt_store_result(st->status) != 0)
        goto db_error;
    f = mysql_stmt_fetch(st->status);
    if (f == 1)
        goto db_error;
    if (f == MYSQL_NO_DATA) {
        snprintf(err, errlen, "order %lld does not exist in `%s`", st->order_id, st->table);
        r = IDEMD_RESULT_REJECT;
    } else if (!st->status_null && st->order_status == ORDER_STATUS_PAID) {
        st->host->log(IDEMD_LOG_DEBUG, "order_pay: order %lld was already paid", st->order_id);
        r = IDEMD_RESULT_OK;
    } else if (!st->status_null && st->order_status == ORDER_STATUS_UNPAID) {
        /* Not expected: the UPDATE's row lock should have kept it. Try again later. */
        snprintf(err, errlen, "order %lld is unpaid but the UPDATE changed nothing", st->order_id);
        r = IDEMD_RESULT_RETRY;
    } else {
        snprintf(err, errlen, "order %lld has status %d (expected %d unpaid or %d paid)",
                 st->order_id, st->status_null ? -1 : st->order_status, ORDER_STATUS_UNPAID,
                 ORDER_STATUS_PAID);
        r = IDEMD_RESULT_REJECT;
    }
    mysql_stmt_free_result(st->status);
    return r;

db_error:
    snprintf(err, errlen, "mysql error %u: %s", mysql_stmt_errno(st->status),
             mysql_stmt_error(st->status));
    mysql_stmt_free_result(st->status);
    return IDEMD_RESULT_RETRY;
}

/* Send order.paid {"orderId": id} for the payment src through the outbox. 0, or -1 with err. */
static int order_pay_emit(order_pay_state_t *st, MYSQL *db, const idemd_message_t *src,
                          long long id, char *err, size_t errlen)
{
    char body[64];
    idemd_publish_t p;

    if (st->paid_exchange == NULL)
        return 0;
    memset(&p, 0, sizeof(p));
    p.exchange = st->paid_exchange;
    p.routing_key = st->paid_rkey;
    p.body = body;
    p.body_len = (size_t)snprintf(body, sizeof(body), "{\"orderId\": %lld}", id);
    p.content_type = "application/json";
    return st->host->publish(db, src, &p, err, errlen);
}

static idemd_result_t order_pay_handle(void *state, MYSQL *db, const idemd_message_t *msg,
                                       char *err, size_t errlen)
{
    order_pay_state_t *st = state;
    long long id;
    my_ulonglong changed;
    idemd_result_t r;

    if (db != st->db) {
        snprintf(err, errlen, "handler state was prepared on another connection");
        return IDEMD_RESULT_RETRY;
    }
    if (order_pay_parse_body(st->host, msg, &id, err, errlen) != 0)
        return IDEMD_RESULT_REJECT;
    st->order_id = id;
    if (mysql_stmt_execute(st->update) != 0) {
        snprintf(err, errlen, "mysql error %u: %s", mysql_stmt_errno(st->update),
                 mysql_stmt_error(st->update));
        return IDEMD_RESULT_RETRY;
    }
    changed = mysql_stmt_affected_rows(st->update);
    if (changed > 0 && changed != (my_ulonglong)-1)
        r = order_pay_emit(st, db, msg, id, err, errlen) == 0 ? IDEMD_RESULT_OK
                                                              : IDEMD_RESULT_RETRY;
    else
        r = order_pay_explain(st, err, errlen);
    return r == IDEMD_RESULT_OK ? order_pay_log_one(st, msg, err, errlen) : r;
}

static int order_pay_cmp(const void *a, const void *b)
{
    long long x = *(const long long *)a, y = *(const long long *)b;
    return x < y ? -1 : x > y;
}

/* Room for n orderIds three times and a statement about them: 0, or -1. */
static int order_pay_room(order_pay_state_t *st, size_t n)
{
    size_t sql = 256 + n * 96; /* " WHEN id THEN count" and ", id" per order */
    if (3 * n > st->ids_size) {
        long long *p = realloc(st->ids, 3 * n * sizeof(*p));
        if (p == NULL)
            return -1;
        st->ids = p;
        st->ids_size = 3 * n;
    }
    if (sql > st->sql_size) {
        char *p = realloc(st->sql, sql);
        if (p == NULL)
            return -1;
        st->sql = p;
        st->sql_size = sql;
    }
    return 0;
}

/* Append " (a, b, ...)" of the k distinct ids to the statement at o. Returns the new end. */
static char *order_pay_in_list(char *o, const long long *d, size_t k)
{
    *o++ = '(';
    for (size_t j = 0; j < k; j++)
        o += sprintf(o, "%s%lld", j ? ", " : "", d[j]);
    *o++ = ')';
    *o = '\0';
    return o;
}

/*
 * Verdicts from the orders' statuses after the UPDATE (as order_pay_explain
 * does for one): paid -> OK; missing or another status -> REJECT. 0, or -1
 * on a MySQL error (reason in errors).
 */
static int order_pay_statuses(order_pay_state_t *st, MYSQL *db, const long long *d, size_t k,
                              size_t n, idemd_result_t *verdicts, char *errors, size_t errlen)
{
    MYSQL_RES *res;
    MYSQL_ROW row;
    char *o = st->sql + sprintf(st->sql, "SELECT id, status FROM `%s` WHERE id IN ", st->table);
    order_pay_in_list(o, d, k);
    if (mysql_query(db, st->sql) != 0 || (res = mysql_store_result(db)) == NULL) {
        snprintf(errors, errlen, "mysql error %u: %s", mysql_errno(db), mysql_error(db));
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        if (st->ids[i] > 0)
            verdicts[i] = IDEMD_RESULT_REJECT; /* until its row says otherwise */
    while ((row = mysql_fetch_row(res)) != NULL) {
        long long id = strtoll(row[0], NULL, 10);
        int status = row[1] ? atoi(row[1]) : -1;
        for (size_t i = 0; i < n; i++) {
            if (st->ids[i] != id)
                continue;
            char *e = errors + i * errlen;
            if (status == ORDER_STATUS_PAID) {
                verdicts[i] = IDEMD_RESULT_OK;
            } else if (status == ORDER_STATUS_UNPAID) {
                verdicts[i] = IDEMD_RESULT_RETRY;
                snprintf(e, errlen, "order %lld is unpaid but the UPDATE changed nothing", id);
            } else {
                snprintf(e, errlen, "order %lld has status %d (expected %d unpaid or %d paid)", id,
                         status, ORDER_STATUS_UNPAID, ORDER_STATUS_PAID);
            }
        }
    }
    mysql_free_result(res);
    for (size_t i = 0; i < n; i++)
        if (st->ids[i] > 0 && verdicts[i] == IDEMD_RESULT_REJECT && !errors[i * errlen])
            snprintf(errors + i * errlen, errlen, "order %lld does not exist in `%s`", st->ids[i],
                     st->table);
    return 0;
}

/*
 * Before the batch's UPDATE: lock the orders that are still unpaid (one
 * SELECT ... FOR UPDATE) and send order.paid once for each, from the first
 * message that pays it (with guard = false, from every message, as
 * handle() would). 0, or -1 with the reason in errors.
 */
static int order_pay_batch_emit(order_pay_state_t *st, MYSQL *db,
                                const idemd_message_t *const *msgs, size_t n, const long long *d,
                                size_t u, char *errors, size_t errlen)
{
    MYSQL_RES *res;
    MYSQL_ROW row;
    long long *unpaid = st->ids + n + u; /* after the distinct ids: room for u more */
    size_t k = 0;

    char *o = st->sql + sprintf(st->sql, "SELECT id FROM `%s` WHERE id IN ", st->table);
    o = order_pay_in_list(o, d, u);
    sprintf(o, " AND status = %d FOR UPDATE", ORDER_STATUS_UNPAID);
    if (mysql_query(db, st->sql) != 0 || (res = mysql_store_result(db)) == NULL) {
        snprintf(errors, errlen, "mysql error %u: %s", mysql_errno(db), mysql_error(db));
        return -1;
    }
    while ((row = mysql_fetch_row(res)) != NULL && k < u)
        unpaid[k++] = strtoll(row[0], NULL, 10);
    mysql_free_result(res);
    for (size_t i = 0; i < n; i++) {
        if (st->ids[i] <= 0)
            continue;
        int pays = !st->guard;
        for (size_t j = 0; j < k && !pays; j++)
            if (unpaid[j] == st->ids[i]) {
                pays = 1;
                unpaid[j] = 0; /* only its first payment in the batch pays it */
            }
        if (pays && order_pay_emit(st, db, msgs[i], st->ids[i], errors, errlen) != 0)
            return -1;
    }
    return 0;
}

/*
 * The log rows of the batch's OK payments (settings.log_table): one
 * multi-row INSERT. 0, or -1 with the reason in errors.
 */
static int order_pay_log_batch(order_pay_state_t *st, MYSQL *db, const idemd_message_t *const *msgs,
                               size_t n, const idemd_result_t *verdicts, char *errors,
                               size_t errlen)
{
    size_t need = 64 + strlen(st->log_table), rows = 0;
    char *o;

    if (st->log == NULL)
        return 0;
    for (size_t i = 0; i < n; i++)
        need += 2 * msgs[i]->msg_id_len + 40; /* ", (id, 'escaped')" */
    if (need > st->log_sql_size) {
        char *p = realloc(st->log_sql, need);
        if (p == NULL) {
            snprintf(errors, errlen, "out of memory");
            return -1;
        }
        st->log_sql = p;
        st->log_sql_size = need;
    }
    o = st->log_sql +
        sprintf(st->log_sql, "INSERT INTO `%s` (order_id, msg_id) VALUES ", st->log_table);
    for (size_t i = 0; i < n; i++) {
        if (verdicts[i] != IDEMD_RESULT_OK || st->ids[i] <= 0)
            continue;
        o += sprintf(o, "%s(%lld, '", rows++ ? ", " : "", st->ids[i]);
        o += mysql_real_escape_string(db, o, msgs[i]->msg_id, (unsigned long)msgs[i]->msg_id_len);
        *o++ = '\'';
        *o++ = ')';
        *o = '\0';
    }
    if (rows == 0)
        return 0;
    if (mysql_real_query(db, st->log_sql, (unsigned long)(o - st->log_sql)) != 0) {
        snprintf(errors, errlen, "mysql error %u: %s", mysql_errno(db), mysql_error(db));
        return -1;
    }
    return 0;
}

/*
 * The set-based payment (ABI 1.2): one UPDATE ... WHERE id IN (...) for the
 * whole batch. When it changed fewer rows than there are orders, one SELECT
 * of their statuses gives each message its verdict. With guard = false each
 * order's pay_count grows by the number of its messages in the batch, as
 * handle() would do one by one.
 */
static int order_pay_handle_batch(void *state, MYSQL *db, const idemd_message_t *const *msgs,
                                  size_t n, idemd_result_t *verdicts, char *errors, size_t errlen)
{
    order_pay_state_t *st = state;
    size_t k = 0;

    if (db != st->db) {
        snprintf(errors, errlen, "handler state was prepared on another connection");
        return -1;
    }
    if (order_pay_room(st, n) != 0) {
        snprintf(errors, errlen, "out of memory");
        return -1;
    }
    long long *d = st->ids + n; /* the distinct orderIds, sorted */
    for (size_t i = 0; i < n; i++) {
        verdicts[i] = IDEMD_RESULT_OK;
        if (order_pay_parse_body(st->host, msgs[i], &st->ids[i], errors + i * errlen, errlen) !=
            0) {
            verdicts[i] = IDEMD_RESULT_REJECT;
            st->ids[i] = 0;
            continue;
        }
        d[k++] = st->ids[i];
    }
    if (k == 0)
        return 0;
    qsort(d, k, sizeof(*d), order_pay_cmp);
    size_t u = 0;
    for (size_t j = 0; j < k; j++)
        if (u == 0 || d[j] != d[u - 1])
            d[u++] = d[j];
    if (st->paid_exchange && order_pay_batch_emit(st, db, msgs, n, d, u, errors, errlen) != 0)
        return -1;
    char *o = st->sql + sprintf(st->sql,
                                "UPDATE `%s` SET status = %d, pay_time = NOW(), pay_count = "
                                "pay_count + ",
                                st->table, ORDER_STATUS_PAID);
    if (st->guard || u == k) {
        o += sprintf(o, "1");
    } else {
        o += sprintf(o, "CASE id");
        for (size_t j = 0; j < u; j++) {
            long long c = 0;
            for (size_t i = 0; i < n; i++)
                c += st->ids[i] == d[j];
            o += sprintf(o, " WHEN %lld THEN %lld", d[j], c);
        }
        o += sprintf(o, " END");
    }
    o += sprintf(o, " WHERE id IN ");
    o = order_pay_in_list(o, d, u);
    if (st->guard)
        sprintf(o, " AND status = %d", ORDER_STATUS_UNPAID);
    if (mysql_query(db, st->sql) != 0) {
        snprintf(errors, errlen, "mysql error %u: %s", mysql_errno(db), mysql_error(db));
        return -1;
    }
    my_ulonglong changed = mysql_affected_rows(db);
    if (changed != (my_ulonglong)u &&
        order_pay_statuses(st, db, d, u, n, verdicts, errors, errlen) != 0)
        return -1;
    return order_pay_log_batch(st, db, msgs, n, verdicts, errors, errlen);
}

const idemd_handler_t idemd_handler = {
    .abi_major = IDEMD_HANDLER_ABI_MAJOR,
    .abi_minor = IDEMD_HANDLER_ABI_MINOR,
    .name = "order_pay",
    .init = order_pay_init,
    .handle = order_pay_handle,
    .fini = order_pay_fini,
    .handle_batch = order_pay_handle_batch,
};
