/* outbox.c: the transactional outbox: onward messages written in the handler's transaction, sent
 * after COMMIT.
 */
#include "outbox.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mysqld_error.h>
#include <time.h>

#include "log.h"
#include "relay.h"

#define OUTBOX_CONFIRM_MS 15000
#define OUTBOX_SLICE_ROWS 500                    /* rows read and sent at a time */
#define OUTBOX_SLICE_BYTES (16ULL * 1024 * 1024) /* body and header bytes read at a time */
#define OUTBOX_BACKOFF_MAX_MS 300000LL           /* the longest wait between refused sends */

struct outbox {
    db_t *db;
    outbox_policy_t pol;
    bool legacy;     /* the table lacks sql/009's columns: no attempts, no backoff */
    MYSQL_STMT *add; /* INSERT of one row, prepared on first use */
    unsigned char hdr[8192];
    char *sql; /* SELECT / DELETE text, grown as needed */
    size_t sql_size;
};

outbox_t *outbox_new(db_t *db)
{
    outbox_t *o = calloc(1, sizeof(*o));
    if (o == NULL) {
        log_error("outbox: out of memory");
        return NULL;
    }
    o->db = db;
    return o;
}

void outbox_set_policy(outbox_t *o, const outbox_policy_t *pol)
{
    o->pol = *pol;
    if (o->pol.max_attempts < 1)
        o->pol.max_attempts = 1;
    if (o->pol.backoff_ms < 1)
        o->pol.backoff_ms = 1;
}

void outbox_rebind(outbox_t *o, db_t *db)
{
    if (o->add)
        mysql_stmt_close(o->add);
    o->add = NULL;
    o->db = db;
}

void outbox_close(outbox_t *o)
{
    if (o == NULL)
        return;
    if (o->add)
        mysql_stmt_close(o->add);
    free(o->sql);
    free(o);
}

/*
 * Append consumer to out with '%' and ':' as %25 and %3A, so that the first ':' of an id
 * ends the consumer ("svc" + "a:1" and "svc:a" + "1" differ). Names without either keep
 * their ids of before. Returns the length written, or outlen when it does not fit.
 */
static size_t outbox_escape_consumer(const char *consumer, char *out, size_t outlen)
{
    size_t n = 0;
    for (const char *c = consumer; *c; c++) {
        const char *esc = *c == '%' ? "%25" : *c == ':' ? "%3A" : NULL;
        size_t k = esc ? 3 : 1;
        if (n + k >= outlen)
            return outlen;
        if (esc)
            memcpy(out + n, esc, k);
        else
            out[n] = *c;
        n += k;
    }
    out[n] = '\0';
    return n;
}

size_t outbox_msg_id(const char *consumer, const char *source_id, size_t source_len, unsigned seq,
                     char *out, size_t outlen)
{
    size_t cl = strlen(consumer);
    char ec[OUTBOX_ID_MAX + 1];
    size_t el = outbox_escape_consumer(consumer, ec, sizeof(ec));
    bool readable = el < sizeof(ec);
    for (size_t i = 0; i < source_len; i++)
        if (source_id[i] < 0x21 || source_id[i] > 0x7e)
            readable = false;
    if (readable && el + source_len + 12 < outlen && el + source_len + 12 <= OUTBOX_ID_MAX) {
        int n = snprintf(out, outlen, "%s:%.*s:%u", ec, (int)source_len, source_id, seq);
        return n > 0 ? (size_t)n : 0;
    }
    /* Two FNV-1a 64 hashes with different offsets: 128 bits of the inputs. */
    uint64_t h1 = 14695981039346656037ULL, h2 = 0x84222325cbf29ce4ULL;
    const unsigned char *parts[2] = {(const unsigned char *)consumer,
                                     (const unsigned char *)source_id};
    size_t lens[2] = {cl + 1, source_len}; /* the NUL keeps ("ab","c") apart from ("a","bc") */
    for (int p = 0; p < 2; p++)
        for (size_t i = 0; i < lens[p]; i++) {
            h1 = (h1 ^ parts[p][i]) * 1099511628211ULL;
            h2 = (h2 ^ parts[p][i]) * 1099511628211ULL;
        }
    int n = snprintf(out, outlen, "idemd-ob-%016llx%016llx:%u", (unsigned long long)h1,
                     (unsigned long long)h2, seq);
    return n > 0 ? (size_t)n : 0;
}

int outbox_encode_headers(const idemd_header_t *h, size_t n, unsigned char *out, size_t cap,
                          size_t *len)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        size_t kl = strlen(h[i].key);
        size_t vl = h[i].type == IDEMD_HEADER_STRING ? h[i].len : 8;
        if (h[i].type != IDEMD_HEADER_STRING && h[i].type != IDEMD_HEADER_INT)
            return -1;
        if (kl > 255 || vl > 0xffffff || o + 1 + 1 + kl + 3 + vl > cap)
            return -1;
        out[o++] = (unsigned char)h[i].type;
        out[o++] = (unsigned char)kl;
        memcpy(out + o, h[i].key, kl);
        o += kl;
        out[o++] = (unsigned char)(vl >> 16);
        out[o++] = (unsigned char)(vl >> 8);
        out[o++] = (unsigned char)vl;
        if (h[i].type == IDEMD_HEADER_STRING) {
            if (vl)
                memcpy(out + o, h[i].str, vl);
        } else {
            uint64_t v = (uint64_t)h[i].i;
            for (int b = 0; b < 8; b++)
                out[o + (size_t)b] = (unsigned char)(v >> (56 - 8 * b));
        }
        o += vl;
    }
    *len = o;
    return 0;
}

int outbox_decode_headers(const unsigned char *buf, size_t len, amqp_table_entry_t *out, size_t max)
{
    size_t o = 0, n = 0;
    while (o < len) {
        if (n == max || len - o < 2)
            return -1;
        int type = buf[o++];
        size_t kl = buf[o++];
        if (len - o < kl + 3)
            return -1;
        out[n].key.bytes = (void *)(buf + o);
        out[n].key.len = kl;
        o += kl;
        size_t vl = ((size_t)buf[o] << 16) | ((size_t)buf[o + 1] << 8) | buf[o + 2];
        o += 3;
        if (len - o < vl)
            return -1;
        if (type == IDEMD_HEADER_STRING) {
            out[n].value.kind = AMQP_FIELD_KIND_UTF8;
            out[n].value.value.bytes.bytes = (void *)(buf + o);
            out[n].value.value.bytes.len = vl;
        } else if (type == IDEMD_HEADER_INT && vl == 8) {
            uint64_t v = 0;
            for (int b = 0; b < 8; b++)
                v = (v << 8) | buf[o + (size_t)b];
            out[n].value.kind = AMQP_FIELD_KIND_I64;
            out[n].value.value.i64 = (int64_t)v;
        } else {
            return -1;
        }
        o += vl;
        n++;
    }
    return (int)n;
}

/* Prepare the INSERT of a row on first use. 0, or -1 with err. */
static int outbox_prepare(outbox_t *o, char *err, size_t errlen)
{
    static const char sql[] =
        "INSERT INTO " OUTBOX_TABLE " (consumer, source_id, msg_id, exchange, routing_key, "
        "content_type, headers, body) VALUES (?, ?, ?, ?, ?, ?, ?, ?)";
    if (o->add)
        return 0;
    if ((o->add = mysql_stmt_init(o->db->my)) == NULL ||
        mysql_stmt_prepare(o->add, sql, sizeof(sql) - 1) != 0) {
        snprintf(err, errlen,
                 "outbox: cannot prepare the INSERT (is %s missing? apply "
                 "sql/005_idemd_outbox.sql): %s",
                 OUTBOX_TABLE, o->add ? mysql_stmt_error(o->add) : mysql_error(o->db->my));
        if (o->add)
            mysql_stmt_close(o->add);
        o->add = NULL;
        return -1;
    }
    return 0;
}

static void outbox_bind(MYSQL_BIND *b, const void *p, unsigned long *len, bool null)
{
    b->buffer_type = MYSQL_TYPE_BLOB;
    b->buffer = (void *)p;
    b->buffer_length = *len;
    b->length = len;
    b->is_null_value = null;
}

int outbox_add(outbox_t *o, const char *source_id, size_t source_len, unsigned seq,
               const idemd_publish_t *p, char *err, size_t errlen)
{
    char id[OUTBOX_ID_MAX + 1];
    size_t hlen = 0, idl;
    const char *ct = p->content_type ? p->content_type : "";
    MYSQL_BIND b[8];
    unsigned long l[8];

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
    if (outbox_prepare(o, err, errlen) != 0)
        return -1;
    memset(b, 0, sizeof(b));
    l[0] = o->db->consumer_len;
    l[1] = (unsigned long)source_len;
    l[2] = (unsigned long)idl;
    l[3] = (unsigned long)strlen(p->exchange);
    l[4] = (unsigned long)strlen(p->routing_key);
    l[5] = (unsigned long)strlen(ct);
    l[6] = (unsigned long)hlen;
    l[7] = (unsigned long)p->body_len;
    outbox_bind(&b[0], o->db->consumer, &l[0], false);
    outbox_bind(&b[1], source_id, &l[1], false);
    outbox_bind(&b[2], id, &l[2], false);
    outbox_bind(&b[3], p->exchange, &l[3], false);
    outbox_bind(&b[4], p->routing_key, &l[4], false);
    outbox_bind(&b[5], ct, &l[5], false);
    outbox_bind(&b[6], o->hdr, &l[6], hlen == 0);
    outbox_bind(&b[7], p->body ? p->body : "", &l[7], false);
    if (mysql_stmt_bind_param(o->add, b) != 0 || mysql_stmt_execute(o->add) != 0) {
        snprintf(err, errlen, "publish: mysql error %u: %s", mysql_stmt_errno(o->add),
                 mysql_stmt_error(o->add));
        return -1;
    }
    return 0;
}

/* Make room for need bytes of SQL text. 0, or -1 (logged). */
static int outbox_room(outbox_t *o, size_t need)
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

/*
 * The first query of a slice (see outbox_relay): ids and sizes of the rows
 * to send, at most limit, oldest first; rows waiting out their backoff are
 * left out. 0, or -1.
 */
static int outbox_select_sql(outbox_t *o, const char *const *src, const size_t *src_len, int k,
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

/*
 * The properties of row's onward message into props (persistent, its
 * message id, content type and headers, decoded into hdr, which holds
 * OUTBOX_HEADERS_MAX entries and must outlive props). Returns the number of
 * headers.
 */
static int outbox_props(MYSQL_ROW row, const unsigned long *len, amqp_basic_properties_t *props,
                        amqp_table_entry_t *hdr)
{
    int nh = 0;

    memset(props, 0, sizeof(*props));
    props->_flags = AMQP_BASIC_DELIVERY_MODE_FLAG | AMQP_BASIC_MESSAGE_ID_FLAG;
    props->delivery_mode = AMQP_DELIVERY_PERSISTENT;
    props->message_id.bytes = row[1];
    props->message_id.len = len[1];
    if (len[4] > 0) {
        props->_flags |= AMQP_BASIC_CONTENT_TYPE_FLAG;
        props->content_type.bytes = row[4];
        props->content_type.len = len[4];
    }
    if (row[5] && len[5] > 0) {
        nh = outbox_decode_headers((const unsigned char *)row[5], len[5], hdr, OUTBOX_HEADERS_MAX);
        if (nh < 0) {
            log_error("outbox: row %s: headers do not decode: sent without them", row[0]);
            nh = 0;
        }
    }
    if (nh > 0) {
        props->_flags |= AMQP_BASIC_HEADERS_FLAG;
        props->headers.num_entries = nh;
        props->headers.entries = hdr;
    }
    return nh;
}

/* Publish row as an onward message (persistent, mandatory). Its copy index, or -1. */
static int outbox_send(mq_t *pub, MYSQL_ROW row, const unsigned long *len)
{
    amqp_basic_properties_t props;
    amqp_table_entry_t hdr[OUTBOX_HEADERS_MAX];
    char exchange[256], rkey[256];

    outbox_props(row, len, &props, hdr);
    snprintf(exchange, sizeof(exchange), "%.*s", (int)len[2], row[2]);
    snprintf(rkey, sizeof(rkey), "%.*s", (int)len[3], row[3]);
    amqp_bytes_t body = {len[6], row[6]};
    return mq_publish_to(pub, exchange, rkey, &props, body);
}

int outbox_depth(outbox_t *o, outbox_depth_t *d)
{
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
                     o->pol.max_attempts, o->pol.max_attempts);
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

/* Run sql on the connection; 0, or -1 (logged with what). */
static int outbox_exec(outbox_t *o, const char *sql, const char *what)
{
    if (mysql_query(o->db->my, sql) == 0)
        return 0;
    log_error("outbox: %s: error %u: %s", what, mysql_errno(o->db->my), mysql_error(o->db->my));
    return -1;
}

/* -1 when the connection failed (the caller reconnects), else -2. */
static int outbox_db_rc(outbox_t *o)
{
    return db_classify(mysql_errno(o->db->my)) == DB_ERR_CONNECTION ? -1 : -2;
}

/* One row of a slice and what became of it. */
typedef struct outbox_row {
    unsigned long long id;
    unsigned attempts;  /* refused sends before this one */
    long long failed_s; /* the first refused send (Unix seconds), 0 when none */
    enum { OUTBOX_LEFT, OUTBOX_SENT, OUTBOX_REFUSED, OUTBOX_DEAD } state;
    char why[MQ_WHY_MAX]; /* OUTBOX_REFUSED: the broker's words */
} outbox_row_t;

/*
 * The ids of the first rows of the metadata result res whose sizes add up
 * to at most OUTBOX_SLICE_BYTES (the first row always). Their number, or -1.
 */
static int outbox_pick(MYSQL_RES *res, outbox_row_t *rows, int cap)
{
    MYSQL_ROW r;
    unsigned long long bytes = 0;
    int n = 0;
    while (n < cap && (r = mysql_fetch_row(res)) != NULL) {
        unsigned long long size = r[1] ? strtoull(r[1], NULL, 10) : 0;
        if (n > 0 && bytes + size > OUTBOX_SLICE_BYTES)
            break;
        bytes += size;
        memset(&rows[n], 0, sizeof(rows[n]));
        rows[n++].id = strtoull(r[0], NULL, 10);
    }
    return n;
}

/* The second query of a slice: the rows of ids rows[0..n-1] whole. 0, or -1. */
static int outbox_fetch_sql(outbox_t *o, const outbox_row_t *rows, int n)
{
    if (outbox_room(o, 512 + (size_t)n * 22) != 0)
        return -1;
    char *s =
        o->sql + sprintf(o->sql,
                         "SELECT id, msg_id, exchange, routing_key, content_type, headers, "
                         "body, source_id, %s FROM " OUTBOX_TABLE " WHERE id IN (",
                         o->legacy ? "0, 0" : "attempts, COALESCE(UNIX_TIMESTAMP(failed_at), 0)");
    for (int i = 0; i < n; i++)
        s += sprintf(s, "%s%llu", i ? ", " : "", rows[i].id);
    sprintf(s, ") ORDER BY id");
    return 0;
}

/*
 * The dead letter of an onward message that used up its attempts: the row's
 * message with reason headers, to the source queue's dead-letter queue. Its
 * copy index, or -1.
 */
static int outbox_dead_letter(outbox_t *o, mq_t *pub, MYSQL_ROW row, const unsigned long *len,
                              const outbox_row_t *r, uint64_t now_ms)
{
    amqp_basic_properties_t props;
    amqp_table_entry_t hdr[OUTBOX_HEADERS_MAX + 12];
    char first[64], last[64], sig[RELAY_SIG_HEX + 1], queue[300], error[MQ_WHY_MAX + 300];
    uint64_t attempts = r->attempts + 1;
    bool big = pub->max_message && len[6] + RELAY_RESERVE > pub->max_message;
    int nh = outbox_props(row, len, &props, hdr);

    props._flags |= AMQP_BASIC_HEADERS_FLAG;
    relay_iso_time(r->failed_s ? (uint64_t)r->failed_s * 1000 : now_ms, first, sizeof(first));
    relay_iso_time(now_ms, last, sizeof(last));
    if (relay_onward_queue(o->pol.queue, queue, sizeof(queue)) == NULL)
        return -1;
    snprintf(error, sizeof(error),
             "onward message not delivered after %llu attempts to exchange '%.*s' routing key "
             "'%.*s': %s",
             (unsigned long long)attempts, (int)len[2], row[2], (int)len[3], row[3], r->why);
    amqp_bytes_t ex = {len[2], row[2]}, rk = {len[3], row[3]};
    if (relay_sign(o->pol.key, queue, row[1], len[1], attempts, amqp_cstring_bytes(first), ex, rk,
                   sig) != 0)
        return -1;
#define OUTBOX_STR(k, v)                                                                           \
    do {                                                                                           \
        hdr[nh].key = amqp_cstring_bytes(k);                                                       \
        hdr[nh].value.kind = AMQP_FIELD_KIND_UTF8;                                                 \
        hdr[nh++].value.value.bytes = (v);                                                         \
    } while (0)
#define OUTBOX_INT(k, v)                                                                           \
    do {                                                                                           \
        hdr[nh].key = amqp_cstring_bytes(k);                                                       \
        hdr[nh].value.kind = AMQP_FIELD_KIND_I64;                                                  \
        hdr[nh++].value.value.i64 = (int64_t)(v);                                                  \
    } while (0)
    OUTBOX_INT(RELAY_H_ONWARD, 1);
    OUTBOX_INT(RELAY_H_ATTEMPTS, attempts);
    OUTBOX_STR(RELAY_H_ERROR, amqp_cstring_bytes(error));
    OUTBOX_STR(RELAY_H_FIRST_FAILURE, amqp_cstring_bytes(first));
    OUTBOX_STR(RELAY_H_LAST_FAILURE, amqp_cstring_bytes(last));
    OUTBOX_STR(RELAY_H_EXCHANGE, ex);
    OUTBOX_STR(RELAY_H_ROUTING_KEY, rk);
    OUTBOX_STR(RELAY_H_QUEUE, amqp_cstring_bytes((char *)o->pol.queue));
    OUTBOX_STR(RELAY_H_ONWARD_SOURCE, ((amqp_bytes_t){len[7], row[7]}));
    OUTBOX_STR(RELAY_H_SIG, amqp_cstring_bytes(sig));
    if (big)
        OUTBOX_INT(RELAY_H_BODY_DROPPED, len[6]);
#undef OUTBOX_STR
#undef OUTBOX_INT
    props.headers.num_entries = nh;
    props.headers.entries = hdr;
    amqp_bytes_t body = big ? amqp_empty_bytes : (amqp_bytes_t){len[6], row[6]};
    return mq_publish_to(pub, "", o->pol.dlq, &props, body);
}

/* Whether a body of len bytes is over the broker's max message size as pub learned it; then r says
 * so. */
static bool outbox_too_big(const mq_t *pub, unsigned long len, outbox_row_t *r)
{
    if (pub->max_message == 0 || len + RELAY_RESERVE <= pub->max_message)
        return false;
    r->state = OUTBOX_REFUSED;
    snprintf(r->why, sizeof(r->why),
             "a body of %lu bytes is over the broker's max message size (%llu bytes)", len,
             (unsigned long long)pub->max_message);
    return true;
}

/*
 * Publish the rows of the fetched result res (rows[0..n-1], in id order)
 * and note in each what became of it. A publish the broker closed the
 * channel for is found by sending the unconfirmed rows again one at a
 * time, so that it costs only itself. Rows used up get their dead letter.
 * 0, or -1 when the connection is lost (the rows not settled stay LEFT).
 */
static int outbox_send_slice(outbox_t *o, mq_t *pub, MYSQL_RES *res, outbox_row_t *rows, int n)
{
    MYSQL_ROW row;
    int *copy = calloc((size_t)n, sizeof(*copy));
    int rc = -1, dead = 0;
    uint64_t now_ms;
    struct timespec ts;

    if (copy == NULL)
        return -1;
    clock_gettime(CLOCK_REALTIME, &ts);
    now_ms = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
    mq_round_begin(pub);
    for (int i = 0; i < n; i++) {
        copy[i] = -1;
        if ((row = mysql_fetch_row(res)) == NULL)
            break;
        const unsigned long *len = mysql_fetch_lengths(res);
        rows[i].attempts = (unsigned)strtoul(row[8], NULL, 10);
        rows[i].failed_s = strtoll(row[9], NULL, 10);
        if (outbox_too_big(pub, len[6], &rows[i]))
            continue;
        if (!mq_channel_usable(pub) || (copy[i] = outbox_send(pub, row, len)) < 0)
            break;
    }
    if (mq_wait_confirms(pub, OUTBOX_CONFIRM_MS) != 0 && mq_channel_usable(pub))
        log_warn("outbox: the broker refused some onward messages: they wait and are sent again");
    bool closed = !mq_channel_usable(pub) && !pub->broken;
    for (int i = 0; i < n; i++) {
        if (copy[i] < 0)
            continue;
        const char *why = mq_round_why(pub, copy[i]);
        if (why == NULL)
            rows[i].state = OUTBOX_SENT;
        else if (mq_round_returned(pub, copy[i]) || strncmp(why, "refused", 7) == 0) {
            rows[i].state = OUTBOX_REFUSED;
            snprintf(rows[i].why, sizeof(rows[i].why), "%s", why);
        }
    }
    /* The broker closed the channel for one of them: find it, one row at a time. */
    if (closed) {
        log_warn("outbox: the broker closed the channel during a round: sending its unconfirmed "
                 "rows one at a time");
        mysql_data_seek(res, 0);
        for (int i = 0; i < n && (row = mysql_fetch_row(res)) != NULL; i++) {
            if (rows[i].state != OUTBOX_LEFT)
                continue;
            if (mq_channel_restore(pub) != 0)
                goto done;
            if (outbox_too_big(pub, mysql_fetch_lengths(res)[6], &rows[i]))
                continue;
            mq_round_begin(pub);
            int c = outbox_send(pub, row, mysql_fetch_lengths(res));
            if (c < 0)
                goto done;
            if (mq_wait_confirms(pub, OUTBOX_CONFIRM_MS) != 0)
                log_debug("outbox: row %llu alone: not confirmed", rows[i].id);
            const char *why = mq_round_why(pub, c);
            if (why == NULL) {
                rows[i].state = OUTBOX_SENT;
            } else if (pub->broken) {
                goto done;
            } else {
                rows[i].state = OUTBOX_REFUSED;
                snprintf(rows[i].why, sizeof(rows[i].why), "%s", why);
            }
        }
        if (mq_channel_restore(pub) != 0)
            goto done;
    }
    /* Dead letters for the rows that used up their attempts: confirmed before they go. */
    if (o->pol.dlq && o->pol.dlq[0] && !o->legacy) {
        mq_round_begin(pub);
        mysql_data_seek(res, 0);
        for (int i = 0; i < n && (row = mysql_fetch_row(res)) != NULL; i++) {
            copy[i] = -1;
            if (rows[i].state != OUTBOX_REFUSED || rows[i].attempts + 1 < o->pol.max_attempts)
                continue;
            copy[i] = outbox_dead_letter(o, pub, row, mysql_fetch_lengths(res), &rows[i], now_ms);
            if (copy[i] < 0)
                break;
            dead++;
        }
        if (dead > 0 && mq_wait_confirms(pub, OUTBOX_CONFIRM_MS) != 0)
            log_error("outbox: dead letters to %s not all confirmed: their rows stay", o->pol.dlq);
        for (int i = 0; i < n; i++)
            if (copy[i] >= 0 && mq_round_ok(pub, copy[i]))
                rows[i].state = OUTBOX_DEAD;
    }
    rc = 0;
done:
    free(copy);
    return pub->broken || !mq_channel_usable(pub) ? -1 : rc;
}

/*
 * Write what became of the slice's rows: delete the sent and dead-lettered
 * ones, count a refusal on the others (attempts, backoff, last error), then
 * COMMIT. 0, or -1 / -2 as outbox_relay.
 */
static int outbox_settle(outbox_t *o, const outbox_row_t *rows, int n)
{
    int del = 0;
    if (outbox_room(o, 1024 + (size_t)n * 22 + 2 * MQ_WHY_MAX) != 0)
        return -2;
    char *s = o->sql + sprintf(o->sql, "DELETE FROM " OUTBOX_TABLE " WHERE id IN (");
    for (int i = 0; i < n; i++)
        if (rows[i].state == OUTBOX_SENT || rows[i].state == OUTBOX_DEAD)
            s += sprintf(s, "%s%llu", del++ ? ", " : "", rows[i].id);
    strcpy(s, ")");
    if (del > 0 && outbox_exec(o, o->sql, "deleting sent rows") != 0)
        return outbox_db_rc(o);
    for (int i = 0; i < n && !o->legacy; i++) {
        const outbox_row_t *r = &rows[i];
        if (r->state == OUTBOX_DEAD)
            log_error("outbox: onward message (row %llu) dead-lettered to %s after %u refused "
                      "sends, last: %s",
                      r->id, o->pol.dlq, r->attempts + 1, r->why);
        if (r->state != OUTBOX_REFUSED)
            continue;
        long long wait = o->pol.backoff_ms;
        for (unsigned a = 0; a < r->attempts && wait < OUTBOX_BACKOFF_MAX_MS; a++)
            wait *= 2;
        if (wait > OUTBOX_BACKOFF_MAX_MS)
            wait = OUTBOX_BACKOFF_MAX_MS;
        s = o->sql + sprintf(o->sql,
                             "UPDATE " OUTBOX_TABLE " SET attempts = LEAST(attempts + 1, 1000000), "
                             "next_at = NOW(3) + INTERVAL %lld MICROSECOND, failed_at = "
                             "COALESCE(failed_at, NOW(3)), last_error = ",
                             wait * 1000);
        s = db_hex_literal(s, r->why, strnlen(r->why, 512));
        sprintf(s, " WHERE id = %llu", r->id);
        if (outbox_exec(o, o->sql, "counting a refused send") != 0)
            return outbox_db_rc(o);
        if (r->attempts + 1 >= o->pol.max_attempts)
            log_error("outbox: onward message (row %llu) refused %u times, last: %s; %s", r->id,
                      r->attempts + 1, r->why,
                      o->pol.dlq && o->pol.dlq[0]
                          ? "its dead letter was not confirmed: it is tried again"
                          : "the queue has no dead_letter_queue: it stays in the outbox");
        else
            log_warn("outbox: onward message (row %llu) refused (attempt %u of %u): %s; next try "
                     "in %lld ms",
                     r->id, r->attempts + 1, o->pol.max_attempts, r->why, wait);
    }
    if (mysql_commit(o->db->my) != 0) {
        log_error("outbox: commit: error %u: %s", mysql_errno(o->db->my), mysql_error(o->db->my));
        return outbox_db_rc(o);
    }
    return 0;
}

/*
 * The first query of a slice into *out; falls back to the columns of before
 * sql/009 once, when they are missing. 0, or -1 / -2 as outbox_relay.
 */
static int outbox_query_slice(outbox_t *o, const char *const *src, const size_t *src_len, int k,
                              int grace_s, int limit, MYSQL_RES **out)
{
    for (;;) {
        if (outbox_select_sql(o, src, src_len, k, grace_s, limit) != 0)
            return -2;
        if (mysql_query(o->db->my, o->sql) == 0 && (*out = mysql_store_result(o->db->my)) != NULL)
            return 0;
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
}

int outbox_relay(outbox_t *o, mq_t *pub, const char *const *src, const size_t *src_len, int k,
                 int grace_s, int slices)
{
    MYSQL_RES *meta = NULL, *res = NULL;
    outbox_row_t *rows = calloc(OUTBOX_SLICE_ROWS, sizeof(*rows));
    int sent = 0, rc = -2;

    if (rows == NULL) {
        log_error("outbox: out of memory");
        return -2;
    }
    for (int slice = 0; slice < slices; slice++) {
        if ((rc = outbox_query_slice(o, src, src_len, k, grace_s, OUTBOX_SLICE_ROWS, &meta)) != 0)
            goto done;
        int got = (int)mysql_num_rows(meta);
        int n = outbox_pick(meta, rows, OUTBOX_SLICE_ROWS);
        mysql_free_result(meta);
        meta = NULL;
        if (n <= 0) {
            rc = 0;
            break;
        }
        if (outbox_fetch_sql(o, rows, n) != 0) {
            rc = -2;
            goto done;
        }
        if (mysql_query(o->db->my, o->sql) != 0 || (res = mysql_store_result(o->db->my)) == NULL) {
            log_error("outbox: reading rows: error %u: %s", mysql_errno(o->db->my),
                      mysql_error(o->db->my));
            rc = outbox_db_rc(o);
            goto done;
        }
        n = (int)mysql_num_rows(res) < n ? (int)mysql_num_rows(res) : n; /* gone meanwhile */
        int lost = outbox_send_slice(o, pub, res, rows, n);
        mysql_free_result(res);
        res = NULL;
        if ((rc = outbox_settle(o, rows, n)) != 0)
            goto done;
        int settled = 0;
        for (int i = 0; i < n; i++) {
            sent += rows[i].state == OUTBOX_SENT;
            settled += rows[i].state == OUTBOX_SENT || rows[i].state == OUTBOX_DEAD;
        }
        if (lost != 0) {
            rc = -2;
            goto done;
        }
        if (o->legacy && settled < n)
            break; /* refused rows are not marked: the next slice would read them again */
        if (got < OUTBOX_SLICE_ROWS && n == got) {
            rc = 0;
            break; /* that was the last slice */
        }
    }
    rc = 0;
done:
    if (meta)
        mysql_free_result(meta);
    if (res)
        mysql_free_result(res);
    free(rows);
    if (rc != 0)
        (void)mysql_rollback(o->db->my); /* end the read transaction */
    return rc == 0 ? sent : rc;
}
