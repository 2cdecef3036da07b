/* sqlh.c: the built-in SQL handler (handler = "sql"): prepares the queue's statements once per
 * connection, binds each message's values exactly, runs them, checks affected rows, maps server
 * errors to verdicts and writes the onward messages to the outbox.
 */
#include "sqlh.h"

#include <mysql.h>
#include <mysqld_error.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "db.h"
#include "db_warn.h"
#include "sqlh_param.h"

/* Server error numbers not every client library names (MariaDB and MySQL each have their own). */
#define SQLH_ER_CHECK_MYSQL 3819   /* ER_CHECK_CONSTRAINT_VIOLATED */
#define SQLH_ER_CHECK_MARIADB 4025 /* ER_CONSTRAINT_FAILED */
#define SQLH_ER_JSON_TEXT 3140     /* MySQL: invalid JSON text */
#define SQLH_ER_JSON_MARIADB 4038  /* MariaDB: syntax error in JSON text */

typedef struct sqlh_stmt {
    const conf_sql_stmt_t *c;
    MYSQL_STMT *st;
    int n;
    sqlh_src_t *src;
    sqlh_buf_t *buf;
    MYSQL_BIND *bind;
    long long *ival;
    unsigned long *len;
    bool bound; /* bind given to st: the client library keeps a copy, read at each execute */
    bool has_expect;
    sqlh_expect_t expect;
} sqlh_stmt_t;

typedef struct sqlh_pub {
    const conf_sql_pub_t *c;
    sqlh_src_t body;
    sqlh_buf_t body_buf;
    char num[24];
    sqlh_src_t *hsrc;
    sqlh_buf_t *hbuf;
    idemd_header_t *hdr;
} sqlh_pub_t;

/* One per worker and connection: made by init(), freed by fini(). */
typedef struct sqlh_state {
    const idemd_host_t *host;
    const conf_queue_t *q;
    sqlh_stmt_t *s;
    int n;
    sqlh_pub_t *p;
    int np;
} sqlh_state_t;

bool sqlh_is(const conf_queue_t *q)
{
    return q->handler != NULL && strcmp(q->handler, "sql") == 0;
}

const idemd_settings_t *sqlh_settings(const conf_queue_t *q)
{
    return sqlh_is(q) ? (const idemd_settings_t *)q : (const idemd_settings_t *)q->settings;
}

static void sqlh_fini(void *state)
{
    sqlh_state_t *st = state;

    if (st == NULL)
        return;
    for (int k = 0; st->s && k < st->q->n_sql; k++) {
        sqlh_stmt_t *s = &st->s[k];
        /* mysql_stmt_close only frees memory when the connection is already gone. */
        if (s->st)
            mysql_stmt_close(s->st);
        for (int i = 0; i < s->n; i++) {
            sqlh_src_free(&s->src[i]);
            sqlh_buf_free(&s->buf[i]);
        }
        free(s->src);
        free(s->buf);
        free(s->bind);
        free(s->ival);
        free(s->len);
    }
    for (int k = 0; st->p && k < st->q->n_publish; k++) {
        sqlh_pub_t *p = &st->p[k];
        sqlh_src_free(&p->body);
        sqlh_buf_free(&p->body_buf);
        for (int i = 0; p->hsrc && i < p->c->n_headers; i++) {
            sqlh_src_free(&p->hsrc[i]);
            sqlh_buf_free(&p->hbuf[i]);
        }
        free(p->hsrc);
        free(p->hbuf);
        free(p->hdr);
    }
    free(st->s);
    free(st->p);
    free(st);
}

/* Prepare statement k of st on db. 0, or -1 with "statement K: ..." in err. */
static int sqlh_prepare(sqlh_state_t *st, MYSQL *db, int k, char *err, size_t errlen)
{
    sqlh_stmt_t *s = &st->s[k];
    const conf_sql_stmt_t *c = &st->q->sql[k];
    char why[400];

    s->c = c;
    s->n = c->n_params;
    if (s->n > 0 && ((s->src = calloc((size_t)s->n, sizeof(*s->src))) == NULL ||
                     (s->buf = calloc((size_t)s->n, sizeof(*s->buf))) == NULL ||
                     (s->bind = calloc((size_t)s->n, sizeof(*s->bind))) == NULL ||
                     (s->ival = calloc((size_t)s->n, sizeof(*s->ival))) == NULL ||
                     (s->len = calloc((size_t)s->n, sizeof(*s->len))) == NULL)) {
        snprintf(err, errlen, "statement %d: out of memory", k + 1);
        return -1;
    }
    for (int i = 0; i < s->n; i++)
        if (sqlh_src_parse(c->params[i], &s->src[i], why, sizeof(why)) != 0) {
            snprintf(err, errlen, "statement %d: params.[%d]: %s", k + 1, i, why);
            return -1;
        }
    if (c->expect) {
        if (sqlh_expect_parse(c->expect, &s->expect, why, sizeof(why)) != 0) {
            snprintf(err, errlen, "statement %d: expect: %s", k + 1, why);
            return -1;
        }
        s->has_expect = true;
    }
    if ((s->st = mysql_stmt_init(db)) == NULL) {
        snprintf(err, errlen, "statement %d: mysql error %u: %s", k + 1, mysql_errno(db),
                 mysql_error(db));
        return -1;
    }
    if (mysql_stmt_prepare(s->st, c->statement, (unsigned long)strlen(c->statement)) != 0) {
        snprintf(err, errlen, "statement %d: the server refused it: mysql error %u: %s", k + 1,
                 mysql_stmt_errno(s->st), mysql_stmt_error(s->st));
        return -1;
    }
    unsigned long ph = mysql_stmt_param_count(s->st);
    if (ph != (unsigned long)s->n) {
        snprintf(err, errlen,
                 "statement %d has %lu placeholder%s (?) but params lists %d source%s: give one "
                 "source per placeholder, in order",
                 k + 1, ph, ph == 1 ? "" : "s", s->n, s->n == 1 ? "" : "s");
        return -1;
    }
    return 0;
}

/* Onward message k of st: its sources parsed. 0, or -1 with err. */
static int sqlh_prepare_pub(sqlh_state_t *st, int k, char *err, size_t errlen)
{
    sqlh_pub_t *p = &st->p[k];
    const conf_sql_pub_t *c = &st->q->publish[k];
    char why[400];

    p->c = c;
    if (sqlh_src_parse(c->body, &p->body, why, sizeof(why)) != 0) {
        snprintf(err, errlen, "publish %d: body: %s", k + 1, why);
        return -1;
    }
    if (c->n_headers == 0)
        return 0;
    if ((p->hsrc = calloc((size_t)c->n_headers, sizeof(*p->hsrc))) == NULL ||
        (p->hbuf = calloc((size_t)c->n_headers, sizeof(*p->hbuf))) == NULL ||
        (p->hdr = calloc((size_t)c->n_headers, sizeof(*p->hdr))) == NULL) {
        snprintf(err, errlen, "publish %d: out of memory", k + 1);
        return -1;
    }
    for (int i = 0; i < c->n_headers; i++)
        if (c->headers[i].is_int || c->headers[i].sval == NULL ||
            sqlh_src_parse(c->headers[i].sval, &p->hsrc[i], why, sizeof(why)) != 0) {
            snprintf(err, errlen, "publish %d: headers.%s: %s", k + 1, c->headers[i].key,
                     c->headers[i].is_int ? "must be a source string" : why);
            return -1;
        }
    return 0;
}

/* Parse and prepare everything of queue q on db into a new state. 0, or -1 with err. */
static int sqlh_open(const idemd_host_t *host, const conf_queue_t *q, MYSQL *db, sqlh_state_t **out,
                     char *err, size_t errlen)
{
    sqlh_state_t *st = calloc(1, sizeof(*st));

    *out = NULL;
    if (st == NULL)
        goto oom;
    st->host = host;
    st->q = q;
    if ((q->n_sql > 0 && (st->s = calloc((size_t)q->n_sql, sizeof(*st->s))) == NULL) ||
        (q->n_publish > 0 && (st->p = calloc((size_t)q->n_publish, sizeof(*st->p))) == NULL))
        goto oom;
    for (int k = 0; k < q->n_sql; k++)
        if (sqlh_prepare(st, db, k, err, errlen) != 0)
            goto fail;
    for (int k = 0; k < q->n_publish; k++)
        if (sqlh_prepare_pub(st, k, err, errlen) != 0)
            goto fail;
    st->n = q->n_sql;
    st->np = q->n_publish;
    *out = st;
    return 0;
oom:
    snprintf(err, errlen, "out of memory");
fail:
    sqlh_fini(st);
    return -1;
}

static int sqlh_init(const idemd_host_t *host, const idemd_settings_t *settings, MYSQL *db,
                     void **state, char *err, size_t errlen)
{
    const conf_queue_t *q = (const conf_queue_t *)settings;
    sqlh_state_t *st;

    *state = NULL;
    if (q == NULL || !sqlh_is(q)) {
        snprintf(err, errlen, "the SQL handler needs its queue (sqlh_settings)");
        return -1;
    }
    if (sqlh_open(host, q, db, &st, err, errlen) != 0)
        return -1;
    *state = st;
    return 0;
}

/* idemctl try -v: log each bound value (sqlh_show_values). Off in the daemon. */
static bool sqlh_values_shown;

void sqlh_show_values(bool on)
{
    sqlh_values_shown = on;
}

/* With sqlh_show_values on, a debug line per bound value: its source, value and how it is
 * bound. */
static void sqlh_log_value(const sqlh_state_t *st, int k, int i, const char *src,
                           const sqlh_val_t *v)
{
    if (!sqlh_values_shown)
        return;
    int n = v->len > 80 ? 80 : (int)v->len;
    const char *more = v->len > 80 ? "..." : "";
    switch (v->kind) {
    case SQLH_VAL_NULL:
        st->host->log(IDEMD_LOG_DEBUG, "statement %d: params.[%d] (%s) = NULL", k + 1, i, src);
        break;
    case SQLH_VAL_INT:
        st->host->log(IDEMD_LOG_DEBUG, "statement %d: params.[%d] (%s) = %lld (integer)", k + 1, i,
                      src, v->i);
        break;
    case SQLH_VAL_TEXT:
        st->host->log(IDEMD_LOG_DEBUG, "statement %d: params.[%d] (%s) = '%.*s%s' (text)", k + 1, i,
                      src, n, v->s, more);
        break;
    case SQLH_VAL_DECIMAL:
        st->host->log(IDEMD_LOG_DEBUG, "statement %d: params.[%d] (%s) = %.*s%s (exact decimal)",
                      k + 1, i, src, n, v->s, more);
        break;
    case SQLH_VAL_BLOB:
        st->host->log(IDEMD_LOG_DEBUG, "statement %d: params.[%d] (%s) = %zu bytes (binary)", k + 1,
                      i, src, v->len);
        break;
    }
}

/* Bind v into b (with ival and len as its storage). */
static void sqlh_bind(MYSQL_BIND *b, const sqlh_val_t *v, long long *ival, unsigned long *len)
{
    memset(b, 0, sizeof(*b));
    switch (v->kind) {
    case SQLH_VAL_NULL:
        b->buffer_type = MYSQL_TYPE_NULL;
        return;
    case SQLH_VAL_INT:
        *ival = v->i;
        b->buffer_type = MYSQL_TYPE_LONGLONG;
        b->buffer = ival;
        return;
    case SQLH_VAL_TEXT:
        b->buffer_type = MYSQL_TYPE_STRING;
        break;
    case SQLH_VAL_DECIMAL:
        /* The digits as written: the server reads them as an exact DECIMAL, never a double. */
        b->buffer_type = MYSQL_TYPE_NEWDECIMAL;
        break;
    case SQLH_VAL_BLOB:
        b->buffer_type = MYSQL_TYPE_BLOB;
        break;
    }
    *len = (unsigned long)v->len;
    b->buffer = (void *)v->s;
    b->buffer_length = (unsigned long)v->len;
    b->length = len;
}

/* Whether a server error is about the message's data (retrying cannot help): dead-letter. */
static bool sqlh_data_error(unsigned e)
{
    switch (e) {
    case ER_BAD_NULL_ERROR:                  /* 1048: NULL into NOT NULL */
    case ER_WARN_DATA_OUT_OF_RANGE:          /* 1264 */
    case WARN_DATA_TRUNCATED:                /* 1265 */
    case ER_TRUNCATED_WRONG_VALUE:           /* 1292 */
    case ER_TRUNCATED_WRONG_VALUE_FOR_FIELD: /* 1366: incorrect value */
    case ER_DATA_TOO_LONG:                   /* 1406 */
    case ER_DATA_OUT_OF_RANGE:               /* 1690 */
    case ER_DIVISION_BY_ZERO:                /* 1365 */
    case ER_WRONG_VALUE_FOR_TYPE:            /* 1411 */
    case ER_ROW_IS_REFERENCED:               /* 1217 */
    case ER_NO_REFERENCED_ROW:               /* 1216 */
    case ER_ROW_IS_REFERENCED_2:             /* 1451 */
    case ER_NO_REFERENCED_ROW_2:             /* 1452 */
    case ER_WARN_NULL_TO_NOTNULL:            /* 1263 */
    case SQLH_ER_CHECK_MYSQL:
    case SQLH_ER_CHECK_MARIADB:
    case SQLH_ER_JSON_TEXT:
    case SQLH_ER_JSON_MARIADB:
        return true;
    default:
        return false;
    }
}

/*
 * Read what every statement of st may have left unread on the connection (a result set, the
 * further results of a CALL), then ping: 0 when the connection answers in step again (its last
 * error is then cleared, so the worker does not take it for lost), -1 when it does not.
 */
static int sqlh_resync(sqlh_state_t *st, MYSQL *db)
{
    for (int k = 0; k < st->n; k++) {
        MYSQL_STMT *m = st->s[k].st;
        if (m == NULL)
            continue;
        mysql_stmt_free_result(m);
        while (mysql_stmt_next_result(m) == 0)
            if (mysql_stmt_field_count(m) > 0 && mysql_stmt_store_result(m) == 0)
                mysql_stmt_free_result(m);
    }
    return mysql_ping(db) == 0 ? 0 : -1;
}

/*
 * Statement k failed on execute: its verdict by error class, the reason in err. *dup_ok when
 * the error is a duplicate key the statement takes as 0 rows (on_duplicate = "ok").
 */
static idemd_result_t sqlh_failed(sqlh_state_t *st, MYSQL *db, int k, bool *dup_ok, char *err,
                                  size_t errlen)
{
    const sqlh_stmt_t *s = &st->s[k];
    unsigned e = mysql_stmt_errno(s->st);
    char text[512];

    snprintf(text, sizeof(text), "%s", mysql_stmt_error(s->st));
    *dup_ok = false;
    if (db_duplicate_key(e)) {
        if (s->c->on_duplicate == CONF_SQL_OK) {
            *dup_ok = true;
            return IDEMD_RESULT_OK;
        }
        snprintf(err, errlen, "statement %d: duplicate key, not retried: mysql error %u: %s", k + 1,
                 e, text);
        return IDEMD_RESULT_REJECT;
    }
    if (e == ER_XAER_RMFAIL) {
        /* 1399: inside an XA transaction the server refuses COMMIT, DDL and the like. */
        snprintf(err, errlen, "statement %d would end the transaction: %s", k + 1, text);
        return IDEMD_RESULT_RETRY;
    }
    if (e == CR_COMMANDS_OUT_OF_SYNC) {
        /* A result left unread, not a lost connection: read what is pending. Should the
         * connection still be out of step, its error stays and the worker reconnects. */
        int in_step = sqlh_resync(st, db);
        snprintf(err, errlen,
                 "statement %d: commands out of sync (a result was left unread%s): mysql error "
                 "%u: %s",
                 k + 1, in_step == 0 ? ", now read" : ", the connection is replaced", e, text);
        return IDEMD_RESULT_RETRY;
    }
    switch (db_classify(e)) {
    case DB_ERR_DEADLOCK:
    case DB_ERR_LOCK_TIMEOUT: /* 1205, and MySQL's NOWAIT refusal 3572 */
        snprintf(err, errlen, "statement %d: lock conflict, retried: mysql error %u: %s", k + 1, e,
                 text);
        return IDEMD_RESULT_RETRY;
    case DB_ERR_CONNECTION:
        /* The worker sees the connection's error and reconnects; nothing is dead-lettered. */
        snprintf(err, errlen, "statement %d: connection lost: mysql error %u: %s", k + 1, e, text);
        return IDEMD_RESULT_RETRY;
    default:
        break;
    }
    if (sqlh_data_error(e)) {
        snprintf(err, errlen, "statement %d: data error, not retried: mysql error %u: %s", k + 1, e,
                 text);
        return IDEMD_RESULT_REJECT;
    }
    snprintf(err, errlen, "statement %d: mysql error %u: %s", k + 1, e, text);
    return IDEMD_RESULT_RETRY;
}

/*
 * Read every result statement s returned: a SELECT's rows, or a CALL's result sets and its
 * final status, so that the connection is never left out of sync. *rows: the first result
 * set's row count, else the affected rows. 0, or -1 on an error (the statement's).
 */
static int sqlh_results(sqlh_stmt_t *s, unsigned long long *rows)
{
    bool first = true;
    int rc;

    *rows = 0;
    do {
        if (mysql_stmt_field_count(s->st) > 0) {
            if (mysql_stmt_store_result(s->st) != 0)
                return -1;
            if (first)
                *rows = (unsigned long long)mysql_stmt_num_rows(s->st);
            mysql_stmt_free_result(s->st);
            first = false;
        } else if (first) {
            *rows = (unsigned long long)mysql_stmt_affected_rows(s->st);
            first = false;
        }
    } while ((rc = mysql_stmt_next_result(s->st)) == 0);
    return rc > 0 ? -1 : 0;
}

/*
 * Whether the statement just run ended idemd's transaction (a procedure's COMMIT, DDL, autocommit
 * turned on): the server's status says autocommit, or no transaction where there was one.
 * The reason in err. Autocommit is turned off again, so that idemd's next statements run in a
 * transaction as before; should that fail, the connection's error makes the worker reconnect.
 */
static bool sqlh_ended(MYSQL *db, bool was_in, int k, char *err, size_t errlen)
{
    unsigned ss = db->server_status;

    if (ss & SERVER_STATUS_AUTOCOMMIT) {
        bool off = mysql_autocommit(db, 0) == 0;
        snprintf(err, errlen, "statement %d would end the transaction (it turned autocommit on%s)",
                 k + 1, off ? "; turned off again" : "");
    } else if (was_in && !(ss & SERVER_STATUS_IN_TRANS))
        snprintf(err, errlen,
                 "statement %d would end the transaction (the server reports none open after it)",
                 k + 1);
    else
        return false;
    return true;
}

/*
 * After statement k ran: when the server stored a value other than the one bound (its
 * warnings), the reject and its reason in err, naming the parameter whose source names the
 * column when one does; RETRY when the warnings cannot be read; else OK.
 */
static idemd_result_t sqlh_warned(const sqlh_stmt_t *s, MYSQL *db, int k, char *err, size_t errlen)
{
    char why[512], col[65];
    int w = db_value_warnings(db, why, sizeof(why));

    if (w == 0)
        return IDEMD_RESULT_OK;
    if (w < 0) {
        snprintf(err, errlen, "statement %d: %s", k + 1, why);
        return IDEMD_RESULT_RETRY;
    }
    if (db_warn_column(why, col, sizeof(col)) == 0)
        for (int i = 0; i < s->n; i++) {
            const char *p = s->c->params[i];
            size_t pl = strlen(p), cl = strlen(col);
            if (pl > 0 && p[pl - 1] == '?')
                pl--;
            if (pl > cl && strncasecmp(p + pl - cl, col, cl) == 0 &&
                (p[pl - cl - 1] == ':' || p[pl - cl - 1] == '.')) {
                snprintf(err, errlen,
                         "statement %d: params.[%d] (%s): the value stored would differ from the "
                         "one sent, not retried: %s",
                         k + 1, i, p, why);
                return IDEMD_RESULT_REJECT;
            }
        }
    snprintf(err, errlen,
             "statement %d: a value stored would differ from the one sent, not retried: %s", k + 1,
             why);
    return IDEMD_RESULT_REJECT;
}

/* Run statement k for msg on db. OK, or a verdict with the reason in err. */
static idemd_result_t sqlh_exec(sqlh_state_t *st, MYSQL *db, int k, const idemd_message_t *msg,
                                char *err, size_t errlen)
{
    sqlh_stmt_t *s = &st->s[k];
    char why[400];
    sqlh_val_t v;
    MYSQL_BIND nb;
    unsigned long long rows;
    bool dup_ok = false, ran;
    idemd_result_t r = IDEMD_RESULT_OK;

    for (int i = 0; i < s->n; i++) {
        if (sqlh_value(&s->src[i], msg, &s->buf[i], &v, why, sizeof(why)) != 0) {
            snprintf(err, errlen, "statement %d: %s", k + 1, why);
            return IDEMD_RESULT_REJECT;
        }
        /* Past 65 digits no column holds it, and a server may cap it without a word (MySQL
         * 9.7 does; MariaDB warns 1916). */
        if (v.kind == SQLH_VAL_DECIMAL &&
            sqlh_decimal_int_digits(v.s, v.len) > SQLH_DECIMAL_DIGITS) {
            snprintf(err, errlen,
                     "statement %d: params.[%d] (%s): the number %.*s%s has more integer digits "
                     "than a DECIMAL holds (%d): the server would store another value",
                     k + 1, i, s->c->params[i], (int)(v.len > 40 ? 40 : v.len), v.s,
                     v.len > 40 ? "..." : "", SQLH_DECIMAL_DIGITS);
            return IDEMD_RESULT_REJECT;
        }
        /* The value goes to ival and len, which the library reads at execute; the bind itself
         * (type, buffer, length) is given again only when it changed, as a plugin binding its
         * statement once would: a new bind makes the next execute send the types again.
         * Marked unbound at once, so that a return before the bind below leaves no stale
         * copy in the library for the next message. */
        sqlh_bind(&nb, &v, &s->ival[i], &s->len[i]);
        if (memcmp(&nb, &s->bind[i], sizeof(nb)) != 0) {
            s->bind[i] = nb;
            s->bound = false;
        }
        sqlh_log_value(st, k, i, s->c->params[i], &v);
    }
    bool was_in = (db->server_status & SERVER_STATUS_IN_TRANS) != 0;
    if (s->n > 0 && !s->bound)
        s->bound = mysql_stmt_bind_param(s->st, s->bind) == 0;
    ran = (s->n == 0 || s->bound) && mysql_stmt_execute(s->st) == 0 && sqlh_results(s, &rows) == 0;
    if (!ran) {
        r = sqlh_failed(st, db, k, &dup_ok, err, errlen);
        rows = 0;
    }
    /* A procedure that committed, or a statement that turned autocommit on, may have failed
     * after ending the transaction, or not failed at all: the server's status tells. */
    if (mysql_errno(db) != CR_COMMANDS_OUT_OF_SYNC && sqlh_ended(db, was_in, k, err, errlen))
        return IDEMD_RESULT_RETRY;
    if (!ran && !dup_ok)
        return r;
    if (ran && (r = sqlh_warned(s, db, k, err, errlen)) != IDEMD_RESULT_OK)
        return r;
    /* idemctl try shows these lines: keep the text. */
    st->host->log(IDEMD_LOG_DEBUG, "statement %d affected %llu row(s)", k + 1, rows);
    if (!s->has_expect || (rows >= s->expect.lo && rows <= s->expect.hi))
        return IDEMD_RESULT_OK;
    if (s->c->on_mismatch == CONF_SQL_OK)
        return IDEMD_RESULT_OK;
    snprintf(err, errlen, "%s%sstatement %d affected %llu row%s, expected %s",
             s->c->reason ? s->c->reason : "", s->c->reason ? ": " : "", k + 1, rows,
             rows == 1 ? "" : "s", s->c->expect);
    return s->c->on_mismatch == CONF_SQL_RETRY ? IDEMD_RESULT_RETRY : IDEMD_RESULT_REJECT;
}

/* The bytes of v for a body or a header (an integer as decimal text in num). */
static void sqlh_bytes(const sqlh_val_t *v, char *num, size_t numlen, const void **b, size_t *n)
{
    if (v->kind == SQLH_VAL_INT) {
        snprintf(num, numlen, "%lld", v->i);
        *b = num;
        *n = strlen(num);
    } else if (v->kind == SQLH_VAL_NULL) {
        *b = "";
        *n = 0;
    } else {
        *b = v->s;
        *n = v->len;
    }
}

/* Write onward message k for msg to the outbox. OK, or a verdict with the reason in err. */
static idemd_result_t sqlh_publish(sqlh_state_t *st, MYSQL *db, int k, const idemd_message_t *msg,
                                   char *err, size_t errlen)
{
    sqlh_pub_t *p = &st->p[k];
    idemd_publish_t pub;
    sqlh_val_t v;
    char why[400];
    size_t nh = 0;

    memset(&pub, 0, sizeof(pub));
    if (sqlh_value(&p->body, msg, &p->body_buf, &v, why, sizeof(why)) != 0) {
        snprintf(err, errlen, "publish %d: body: %s", k + 1, why);
        return IDEMD_RESULT_REJECT;
    }
    sqlh_bytes(&v, p->num, sizeof(p->num), &pub.body, &pub.body_len);
    for (int i = 0; i < p->c->n_headers; i++) {
        idemd_header_t *h = &p->hdr[nh];
        if (sqlh_value(&p->hsrc[i], msg, &p->hbuf[i], &v, why, sizeof(why)) != 0) {
            snprintf(err, errlen, "publish %d: header %s: %s", k + 1, p->c->headers[i].key, why);
            return IDEMD_RESULT_REJECT;
        }
        if (v.kind == SQLH_VAL_NULL)
            continue; /* optional and absent: left out */
        memset(h, 0, sizeof(*h));
        h->key = p->c->headers[i].key;
        if (v.kind == SQLH_VAL_INT) {
            h->type = IDEMD_HEADER_INT;
            h->i = v.i;
        } else {
            h->type = IDEMD_HEADER_STRING;
            h->str = v.s;
            h->len = v.len;
        }
        nh++;
    }
    pub.exchange = p->c->exchange ? p->c->exchange : "";
    pub.routing_key = p->c->routing_key;
    pub.content_type = p->c->content_type;
    pub.headers = p->hdr;
    pub.n_headers = nh;
    if (st->host->publish(db, msg, &pub, why, sizeof(why)) != 0) {
        snprintf(err, errlen, "publish %d: %s", k + 1, why);
        return IDEMD_RESULT_RETRY;
    }
    return IDEMD_RESULT_OK;
}

static idemd_result_t sqlh_handle(void *state, MYSQL *db, const idemd_message_t *msg, char *err,
                                  size_t errlen)
{
    sqlh_state_t *st = state;
    idemd_result_t r = IDEMD_RESULT_OK;

    for (int k = 0; k < st->n && r == IDEMD_RESULT_OK; k++)
        r = sqlh_exec(st, db, k, msg, err, errlen);
    for (int k = 0; k < st->np && r == IDEMD_RESULT_OK; k++)
        r = sqlh_publish(st, db, k, msg, err, errlen);
    return r;
}

/* No handle_batch: idemd runs handle() for each message of a batch in the batch's transaction
 * (without savepoints on the set-based pass), each with its own verdict. */
static const idemd_handler_t sqlh_descriptor = {
    .abi_major = IDEMD_HANDLER_ABI_MAJOR,
    .abi_minor = IDEMD_HANDLER_ABI_MINOR,
    .name = "sql",
    .init = sqlh_init,
    .handle = sqlh_handle,
    .fini = sqlh_fini,
};

const idemd_handler_t *sqlh_handler(void)
{
    return &sqlh_descriptor;
}

int sqlh_check(const conf_t *conf, int qi, char *err, size_t errlen)
{
    const conf_queue_t *q = &conf->queues[qi];
    db_t *db = NULL;
    sqlh_state_t *st = NULL;
    char why[1024], refused[512] = "";
    int rc = -1;

    refused[0] = '\0';
    int o = db_open(&conf->database, q->consumer, false, 0, refused, sizeof(refused), &db);
    if (o != 0) {
        snprintf(err, errlen,
                 "%s:%d: queues.[%d].sql: cannot check the statements: the database is not "
                 "reachable%s%s",
                 conf->path, q->line, qi, refused[0] ? ": " : " (see the log)", refused);
        return -2;
    }
    /* The state's errors say "statement K: ..."; point at that statement's line. */
    if (sqlh_open(NULL, q, db->my, &st, why, sizeof(why)) != 0) {
        int k = 0;
        if (sscanf(why, "statement %d", &k) == 1 && k >= 1 && k <= q->n_sql)
            snprintf(err, errlen, "%s:%d: queues.[%d].sql.[%d].statement: %s", conf->path,
                     q->sql[k - 1].line, qi, k - 1, why);
        else if (sscanf(why, "publish %d", &k) == 1 && k >= 1 && k <= q->n_publish)
            snprintf(err, errlen, "%s:%d: queues.[%d].publish.[%d]: %s", conf->path,
                     q->publish[k - 1].line, qi, k - 1, why);
        else
            snprintf(err, errlen, "%s:%d: queues.[%d].sql: %s", conf->path, q->line, qi, why);
        goto done;
    }
    rc = 0;
done:
    sqlh_fini(st);
    (void)db_rollback(db);
    db_close(db);
    return rc;
}
