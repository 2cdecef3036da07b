/* outbox_io.c: the outbox's real I/O: the outbox table in MySQL/MariaDB (db_outbox_ops_t, and the
 * INSERT of outbox_add).
 */
#include "outbox.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mysqld_error.h>

#include "log.h"

/* The MySQL side of one outbox (outbox_ops_ctx). */
typedef struct outbox_io {
    db_t *db;
    bool legacy;     /* the table lacks sql/009's columns: no attempts, no backoff */
    bool no_trace;   /* the table lacks sql/011's columns: the context goes into headers */
    MYSQL_STMT *add; /* INSERT of one row, prepared on first use */
    unsigned char hdr[8192];
    char *sql; /* SELECT / DELETE text, grown as needed */
    size_t sql_size;
    MYSQL_RES *res; /* the rows of the last fetch: outbox_msg_t point into it */
} outbox_io_t;

outbox_t *outbox_new(db_t *db, const db_outbox_ops_t *ops)
{
    outbox_io_t *io = calloc(1, sizeof(*io));
    outbox_t *o;
    if (io == NULL) {
        log_error("outbox: out of memory");
        return NULL;
    }
    io->db = db;
    if ((o = outbox_new_ops(ops, io)) == NULL)
        free(io);
    return o;
}

void outbox_rebind(outbox_t *o, db_t *db)
{
    outbox_io_t *io = outbox_ops_ctx(o);
    if (io->res)
        mysql_free_result(io->res);
    io->res = NULL;
    if (io->add)
        mysql_stmt_close(io->add);
    io->add = NULL;
    io->db = db;
}

static void outbox_io_close(void *ctx)
{
    outbox_io_t *io = ctx;
    if (io->res)
        mysql_free_result(io->res);
    if (io->add)
        mysql_stmt_close(io->add);
    free(io->sql);
    free(io);
}

/* Say once that sql/011 is missing: from now on the trace context goes into the headers. */
static void outbox_no_trace(outbox_io_t *o)
{
    if (o->no_trace)
        return;
    o->no_trace = true;
    log_error("outbox: table " OUTBOX_TABLE " has no traceparent column: apply "
              "sql/011_idemd_outbox_trace.sql; until then an onward message's trace context is "
              "kept among its headers");
}

/* Prepare the INSERT of a row on first use (with sql/011's columns when the table has them).
 * 0, or -1 with err. */
static int outbox_prepare(outbox_io_t *o, char *err, size_t errlen)
{
    static const char sql[] =
        "INSERT INTO " OUTBOX_TABLE " (consumer, source_id, msg_id, exchange, routing_key, "
        "content_type, headers, body) VALUES (?, ?, ?, ?, ?, ?, ?, ?)";
    static const char sql_trace[] =
        "INSERT INTO " OUTBOX_TABLE " (consumer, source_id, msg_id, exchange, routing_key, "
        "content_type, headers, body, traceparent, tracestate, baggage) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";
    if (o->add)
        return 0;
    for (;;) {
        const char *q = o->no_trace ? sql : sql_trace;
        if ((o->add = mysql_stmt_init(o->db->my)) != NULL &&
            mysql_stmt_prepare(o->add, q, strlen(q)) == 0)
            return 0;
        if (o->add && mysql_stmt_errno(o->add) == ER_BAD_FIELD_ERROR && !o->no_trace) {
            mysql_stmt_close(o->add);
            o->add = NULL;
            outbox_no_trace(o);
            continue;
        }
        break;
    }
    snprintf(err, errlen,
             "outbox: cannot prepare the INSERT (is %s missing? apply "
             "sql/005_idemd_outbox.sql): %s",
             OUTBOX_TABLE, o->add ? mysql_stmt_error(o->add) : mysql_error(o->db->my));
    if (o->add)
        mysql_stmt_close(o->add);
    o->add = NULL;
    return -1;
}

/* Whether h[0..n) has a header named key. */
static bool outbox_own_header(const idemd_header_t *h, size_t n, const char *key)
{
    for (size_t i = 0; i < n; i++)
        if (h[i].key && strcmp(h[i].key, key) == 0)
            return true;
    return false;
}

static void outbox_bind(MYSQL_BIND *b, const void *p, unsigned long *len, bool null)
{
    b->buffer_type = MYSQL_TYPE_BLOB;
    b->buffer = (void *)p;
    b->buffer_length = *len;
    b->length = len;
    b->is_null_value = null;
    /* libmysqlclient reads only *is_null (NULL there: never null, so a NULL column got '');
     * libmariadb falls back to is_null_value. Point it there for both. */
    b->is_null = &b->is_null_value;
}

int outbox_add(outbox_t *ob, const char *source_id, size_t source_len, unsigned seq,
               const idemd_publish_t *p, const outbox_trace_t *tr, char *err, size_t errlen)
{
    char id[OUTBOX_ID_MAX + 1];
    size_t hlen = 0, idl;
    const char *ct = p->content_type ? p->content_type : "";
    outbox_io_t *o = outbox_ops_ctx(ob);
    MYSQL_BIND b[11];
    unsigned long l[11];
    outbox_trace_t t = {0};

    if (p->exchange == NULL || p->routing_key == NULL || strlen(p->exchange) > 255 ||
        strlen(p->routing_key) > 255 || strlen(ct) > 255 || (p->body == NULL && p->body_len)) {
        snprintf(err, errlen,
                 "publish: exchange, routing key and content type must be strings "
                 "of at most 255 bytes");
        return -1;
    }
    if (p->msg_id) {
        if (p->msg_id_len == 0 || p->msg_id_len > OUTBOX_ID_MAX) {
            snprintf(err, errlen, "publish: msg_id must be 1..%d bytes", OUTBOX_ID_MAX);
            return -1;
        }
        memcpy(id, p->msg_id, p->msg_id_len);
        idl = p->msg_id_len;
    } else {
        idl = outbox_msg_id(o->db->consumer, source_id, source_len, seq, id, sizeof(id));
    }
    if (p->n_headers > OUTBOX_HEADERS_MAX ||
        outbox_encode_headers(p->headers, p->n_headers, o->hdr, sizeof(o->hdr), &hlen) != 0) {
        snprintf(err, errlen,
                 "publish: headers must be at most %d string or integer entries "
                 "in %zu bytes",
                 OUTBOX_HEADERS_MAX, sizeof(o->hdr));
        return -1;
    }
    /* The handler's own headers win: its traceparent starts its own context (no tracestate of
     * the source's with it), its tracestate or baggage replaces the source's. */
    if (tr) {
        t = *tr;
        if (outbox_own_header(p->headers, p->n_headers, "traceparent"))
            t.traceparent = NULL, t.state = NULL;
        if (outbox_own_header(p->headers, p->n_headers, "tracestate"))
            t.state = NULL;
        if (outbox_own_header(p->headers, p->n_headers, "baggage"))
            t.baggage = NULL;
        if (t.traceparent && !*t.traceparent)
            t.traceparent = NULL;
    }
    if (outbox_prepare(o, err, errlen) != 0)
        return -1;
    if (o->no_trace) { /* before sql/011: the context rides among the headers */
        idemd_header_t th[3];
        size_t n = 0, more = 0;
        if (t.traceparent)
            th[n++] = (idemd_header_t){"traceparent", IDEMD_HEADER_STRING, t.traceparent,
                                       strlen(t.traceparent), 0};
        if (t.state)
            th[n++] = (idemd_header_t){"tracestate", IDEMD_HEADER_STRING, t.state, t.state_len, 0};
        if (t.baggage)
            th[n++] = (idemd_header_t){"baggage", IDEMD_HEADER_STRING, t.baggage, t.baggage_len, 0};
        if (n > 0 &&
            (p->n_headers + n > OUTBOX_HEADERS_MAX ||
             outbox_encode_headers(th, n, o->hdr + hlen, sizeof(o->hdr) - hlen, &more) != 0)) {
            snprintf(err, errlen,
                     "publish: no room for the trace context among the headers (at most %d "
                     "entries in %zu bytes; apply sql/011_idemd_outbox_trace.sql)",
                     OUTBOX_HEADERS_MAX, sizeof(o->hdr));
            return -1;
        }
        hlen += more;
    }
    memset(b, 0, sizeof(b));
    l[0] = o->db->consumer_len;
    l[1] = (unsigned long)source_len;
    l[2] = (unsigned long)idl;
    l[3] = (unsigned long)strlen(p->exchange);
    l[4] = (unsigned long)strlen(p->routing_key);
    l[5] = (unsigned long)strlen(ct);
    l[6] = (unsigned long)hlen;
    l[7] = (unsigned long)p->body_len;
    l[8] = t.traceparent ? (unsigned long)strlen(t.traceparent) : 0;
    l[9] = (unsigned long)t.state_len;
    l[10] = (unsigned long)t.baggage_len;
    outbox_bind(&b[0], o->db->consumer, &l[0], false);
    outbox_bind(&b[1], source_id, &l[1], false);
    outbox_bind(&b[2], id, &l[2], false);
    outbox_bind(&b[3], p->exchange, &l[3], false);
    outbox_bind(&b[4], p->routing_key, &l[4], false);
    outbox_bind(&b[5], ct, &l[5], false);
    outbox_bind(&b[6], o->hdr, &l[6], hlen == 0);
    outbox_bind(&b[7], p->body ? p->body : "", &l[7], false);
    outbox_bind(&b[8], t.traceparent ? t.traceparent : "", &l[8], t.traceparent == NULL);
    outbox_bind(&b[9], t.state ? t.state : "", &l[9], t.state == NULL);
    outbox_bind(&b[10], t.baggage ? t.baggage : "", &l[10], t.baggage == NULL);
    if (mysql_stmt_bind_param(o->add, b) != 0 || mysql_stmt_execute(o->add) != 0) {
        snprintf(err, errlen, "publish: mysql error %u: %s", mysql_stmt_errno(o->add),
                 mysql_stmt_error(o->add));
        return -1;
    }
    return 0;
}

/* Make room for need bytes of SQL text. 0, or -1 (logged). */
static int outbox_room(outbox_io_t *o, size_t need)
{
    if (need <= o->sql_size)
        return 0;
    char *p = realloc(o->sql, need);
    if (p == NULL) {
        log_error("outbox: out of memory for a statement of %zu bytes", need);
        return -1;
    }
    o->sql = p;
    o->sql_size = need;
    return 0;
}

/* Run sql on the connection; 0, or -1 (logged with what). */
static int outbox_exec(outbox_io_t *o, const char *sql, const char *what)
{
    if (mysql_query(o->db->my, sql) == 0)
        return 0;
    log_error("outbox: %s: error %u: %s", what, mysql_errno(o->db->my), mysql_error(o->db->my));
    return -1;
}

/* -1 when the connection failed (the caller reconnects), else -2. */
static int outbox_db_rc(outbox_io_t *o)
{
    return db_classify(mysql_errno(o->db->my)) == DB_ERR_CONNECTION ? -1 : -2;
}

static void outbox_free_res(outbox_io_t *o)
{
    if (o->res)
        mysql_free_result(o->res);
    o->res = NULL;
}

/*
 * The first query of a slice (see outbox_relay): ids and sizes of the rows
 * to send, at most limit, oldest first; rows waiting out their backoff are
 * left out. 0, or -1.
 */
static int outbox_select_sql(outbox_io_t *o, const char *const *src, const size_t *src_len, int k,
                             int grace_s, int limit)
{
    size_t need = 512 + 2 * o->db->consumer_len;
    for (int j = 0; j < k; j++)
        need += 2 * src_len[j] + 8;
    if (outbox_room(o, need) != 0)
        return -1;
    char *s = o->sql + sprintf(o->sql, "SELECT id, LENGTH(body) + COALESCE(LENGTH(headers), 0) "
                                       "FROM " OUTBOX_TABLE " WHERE consumer = ");
    s = db_hex_literal(s, o->db->consumer, o->db->consumer_len);
    if (k >= 0) {
        s += sprintf(s, " AND source_id IN (");
        for (int j = 0; j < k; j++) {
            if (j)
                s += sprintf(s, ", ");
            s = db_hex_literal(s, src[j], src_len[j]);
        }
        s += sprintf(s, ")");
    } else {
        s += sprintf(s, " AND created_at < NOW(3) - INTERVAL %d SECOND", grace_s);
    }
    if (!o->legacy)
        s += sprintf(s, " AND (next_at IS NULL OR next_at <= NOW(3))");
    sprintf(s, " ORDER BY id LIMIT %d", limit);
    return 0;
}

/* db_outbox_ops_t.due: the first query of a slice; falls back to the columns of before sql/009
 * once, when they are missing. */
static int outbox_io_due(void *ctx, const char *const *src, const size_t *src_len, int k,
                         int grace_s, int limit, unsigned long long *ids, unsigned long long *sizes,
                         int *got)
{
    outbox_io_t *o = ctx;
    MYSQL_RES *res = NULL;
    MYSQL_ROW r;
    *got = 0;
    for (;;) {
        if (outbox_select_sql(o, src, src_len, k, grace_s, limit) != 0)
            return -2;
        if (mysql_query(o->db->my, o->sql) == 0 && (res = mysql_store_result(o->db->my)) != NULL)
            break;
        if (mysql_errno(o->db->my) != ER_BAD_FIELD_ERROR || o->legacy) {
            log_error("outbox: reading rows: error %u: %s", mysql_errno(o->db->my),
                      mysql_error(o->db->my));
            return outbox_db_rc(o);
        }
        log_error("outbox: table " OUTBOX_TABLE " has no attempts column: apply "
                  "sql/009_idemd_outbox_attempts.sql; until then an onward message the broker "
                  "refuses is sent again every sweep, never dead-lettered");
        o->legacy = true;
    }
    while (*got < limit && (r = mysql_fetch_row(res)) != NULL) {
        ids[*got] = strtoull(r[0], NULL, 10);
        sizes[(*got)++] = r[1] ? strtoull(r[1], NULL, 10) : 0;
    }
    mysql_free_result(res);
    return 0;
}

/* db_outbox_ops_t.fetch: the second query of a slice, the rows whole. */
static int outbox_io_fetch(void *ctx, const unsigned long long *ids, int n, outbox_msg_t *out,
                           int *got)
{
    outbox_io_t *o = ctx;
    MYSQL_ROW row;
    *got = 0;
    outbox_free_res(o);
    if (outbox_room(o, 512 + (size_t)n * 22) != 0)
        return -2;
    for (;;) {
        char *s = o->sql +
                  sprintf(o->sql,
                          "SELECT id, msg_id, exchange, routing_key, content_type, headers, "
                          "body, source_id, %s, %s FROM " OUTBOX_TABLE " WHERE id IN (",
                          o->legacy ? "0, 0" : "attempts, COALESCE(UNIX_TIMESTAMP(failed_at), 0)",
                          o->no_trace ? "NULL, NULL, NULL" : "traceparent, tracestate, baggage");
        for (int i = 0; i < n; i++)
            s += sprintf(s, "%s%llu", i ? ", " : "", ids[i]);
        sprintf(s, ") ORDER BY id");
        if (mysql_query(o->db->my, o->sql) == 0 && (o->res = mysql_store_result(o->db->my)) != NULL)
            break;
        if (mysql_errno(o->db->my) == ER_BAD_FIELD_ERROR && !o->no_trace) {
            outbox_no_trace(o);
            continue;
        }
        log_error("outbox: reading rows: error %u: %s", mysql_errno(o->db->my),
                  mysql_error(o->db->my));
        return outbox_db_rc(o);
    }
    while (*got < n && (row = mysql_fetch_row(o->res)) != NULL) {
        const unsigned long *len = mysql_fetch_lengths(o->res);
        outbox_msg_t *m = &out[(*got)++];
        memset(m, 0, sizeof(*m));
        m->id = strtoull(row[0], NULL, 10);
        m->msg_id = row[1];
        m->msg_id_len = len[1];
        m->exchange = row[2];
        m->exchange_len = len[2];
        m->routing_key = row[3];
        m->routing_key_len = len[3];
        m->content_type = row[4];
        m->content_type_len = len[4];
        m->headers = (const unsigned char *)row[5];
        m->headers_len = row[5] ? len[5] : 0;
        m->body = row[6];
        m->body_len = len[6];
        m->source_id = row[7];
        m->source_len = len[7];
        m->attempts = (unsigned)strtoul(row[8], NULL, 10);
        m->failed_s = strtoll(row[9], NULL, 10);
        m->traceparent = row[10];
        m->traceparent_len = row[10] ? len[10] : 0;
        m->tracestate = row[11];
        m->tracestate_len = row[11] ? len[11] : 0;
        m->baggage = row[12];
        m->baggage_len = row[12] ? len[12] : 0;
    }
    return 0;
}

/* db_outbox_ops_t.remove: DELETE the rows of ids[0..n-1]. */
static int outbox_io_remove(void *ctx, const unsigned long long *ids, int n)
{
    outbox_io_t *o = ctx;
    if (outbox_room(o, 1024 + (size_t)n * 22) != 0)
        return -2;
    char *s = o->sql + sprintf(o->sql, "DELETE FROM " OUTBOX_TABLE " WHERE id IN (");
    for (int i = 0; i < n; i++)
        s += sprintf(s, "%s%llu", i ? ", " : "", ids[i]);
    strcpy(s, ")");
    if (outbox_exec(o, o->sql, "deleting sent rows") != 0)
        return outbox_db_rc(o);
    return 0;
}

/* db_outbox_ops_t.refuse: count a refused send (attempts, backoff, last error). */
static int outbox_io_refuse(void *ctx, unsigned long long id, long long wait_ms, const char *why)
{
    outbox_io_t *o = ctx;
    if (outbox_room(o, 1024 + 2 * MQ_WHY_MAX) != 0)
        return -2;
    char *s =
        o->sql + sprintf(o->sql,
                         "UPDATE " OUTBOX_TABLE " SET attempts = LEAST(attempts + 1, 1000000), "
                         "next_at = NOW(3) + INTERVAL %lld MICROSECOND, failed_at = "
                         "COALESCE(failed_at, NOW(3)), last_error = ",
                         wait_ms * 1000);
    s = db_hex_literal(s, why, strnlen(why, 512));
    sprintf(s, " WHERE id = %llu", id);
    if (outbox_exec(o, o->sql, "counting a refused send") != 0)
        return outbox_db_rc(o);
    return 0;
}

static int outbox_io_commit(void *ctx)
{
    outbox_io_t *o = ctx;
    outbox_free_res(o);
    if (mysql_commit(o->db->my) != 0) {
        log_error("outbox: commit: error %u: %s", mysql_errno(o->db->my), mysql_error(o->db->my));
        return outbox_db_rc(o);
    }
    return 0;
}

static void outbox_io_rollback(void *ctx)
{
    outbox_io_t *o = ctx;
    outbox_free_res(o);
    (void)mysql_rollback(o->db->my); /* end the read transaction */
}

static bool outbox_io_legacy(void *ctx)
{
    outbox_io_t *o = ctx;
    return o->legacy;
}

/* db_outbox_ops_t.depth: the consumer's rows by state. */
static int outbox_io_depth(void *ctx, unsigned max_attempts, outbox_depth_t *d)
{
    outbox_io_t *o = ctx;
    MYSQL_RES *res;
    MYSQL_ROW row;
    memset(d, 0, sizeof(*d));
    if (outbox_room(o, 512 + 2 * o->db->consumer_len) != 0)
        return -1;
    char *s = o->sql;
    if (o->legacy)
        s += sprintf(s, "SELECT COUNT(*), 0, 0, ");
    else
        s += sprintf(s,
                     "SELECT COUNT(*), COALESCE(SUM(attempts > 0 AND attempts < %d), 0), "
                     "COALESCE(SUM(attempts >= %d), 0), ",
                     max_attempts, max_attempts);
    s += sprintf(
        s, "COALESCE(TIMESTAMPDIFF(MICROSECOND, MIN(created_at), NOW(3)), 0) FROM " OUTBOX_TABLE
           " WHERE consumer = ");
    db_hex_literal(s, o->db->consumer, o->db->consumer_len);
    if (mysql_query(o->db->my, o->sql) != 0 || (res = mysql_store_result(o->db->my)) == NULL) {
        log_error("outbox: counting rows: error %u: %s", mysql_errno(o->db->my),
                  mysql_error(o->db->my));
        return -1;
    }
    row = mysql_fetch_row(res);
    if (row && row[0] && row[1] && row[2] && row[3]) {
        d->rows = atoll(row[0]);
        d->retrying = atoll(row[1]);
        d->exhausted = atoll(row[2]);
        d->oldest_s = (double)atoll(row[3]) / 1e6;
    }
    mysql_free_result(res);
    (void)mysql_rollback(o->db->my); /* end the read transaction */
    return 0;
}

const db_outbox_ops_t outbox_io_ops = {
    .due = outbox_io_due,
    .fetch = outbox_io_fetch,
    .remove = outbox_io_remove,
    .refuse = outbox_io_refuse,
    .commit = outbox_io_commit,
    .rollback = outbox_io_rollback,
    .legacy = outbox_io_legacy,
    .depth = outbox_io_depth,
    .close = outbox_io_close,
};
