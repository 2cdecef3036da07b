/* outbox.c: the transactional outbox: onward messages written in the handler's transaction, sent
 * after COMMIT.
 */
#include "outbox.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

#define OUTBOX_CONFIRM_MS 15000

struct outbox {
    db_t *db;
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

/* The SELECT of the rows to send (see outbox_relay). 0, or -1. */
static int outbox_select_sql(outbox_t *o, const char *const *src, const size_t *src_len, int k,
                             int grace_s, int limit)
{
    size_t need = 512 + 2 * o->db->consumer_len;
    for (int j = 0; j < k; j++)
        need += 2 * src_len[j] + 8;
    if (outbox_room(o, need) != 0)
        return -1;
    char *s =
        o->sql + sprintf(o->sql, "SELECT id, msg_id, exchange, routing_key, content_type, headers, "
                                 "body FROM " OUTBOX_TABLE " WHERE consumer = ");
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
    sprintf(s, " ORDER BY id LIMIT %d", limit);
    return 0;
}

/* Publish row as an onward message (persistent, mandatory). Its copy index, or -1. */
static int outbox_send(mq_t *pub, MYSQL_ROW row, const unsigned long *len)
{
    amqp_basic_properties_t props;
    amqp_table_entry_t hdr[OUTBOX_HEADERS_MAX];
    char exchange[256], rkey[256];
    int nh = 0;

    memset(&props, 0, sizeof(props));
    props._flags = AMQP_BASIC_DELIVERY_MODE_FLAG | AMQP_BASIC_MESSAGE_ID_FLAG;
    props.delivery_mode = AMQP_DELIVERY_PERSISTENT;
    props.message_id.bytes = row[1];
    props.message_id.len = len[1];
    if (len[4] > 0) {
        props._flags |= AMQP_BASIC_CONTENT_TYPE_FLAG;
        props.content_type.bytes = row[4];
        props.content_type.len = len[4];
    }
    if (row[5] && len[5] > 0) {
        nh = outbox_decode_headers((const unsigned char *)row[5], len[5], hdr, OUTBOX_HEADERS_MAX);
        if (nh < 0) {
            log_error("outbox: row %s: headers do not decode: sent without them", row[0]);
            nh = 0;
        }
        if (nh > 0) {
            props._flags |= AMQP_BASIC_HEADERS_FLAG;
            props.headers.num_entries = nh;
            props.headers.entries = hdr;
        }
    }
    snprintf(exchange, sizeof(exchange), "%.*s", (int)len[2], row[2]);
    snprintf(rkey, sizeof(rkey), "%.*s", (int)len[3], row[3]);
    amqp_bytes_t body = {len[6], row[6]};
    return mq_publish_to(pub, exchange, rkey, &props, body);
}

int outbox_depth(outbox_t *o, long long *rows, double *oldest_s)
{
    MYSQL_RES *res;
    MYSQL_ROW row;
    if (outbox_room(o, 256 + 2 * o->db->consumer_len) != 0)
        return -1;
    char *s = o->sql + sprintf(o->sql, "SELECT COUNT(*), COALESCE(TIMESTAMPDIFF(MICROSECOND, "
                                       "MIN(created_at), NOW(3)), 0) FROM " OUTBOX_TABLE
                                       " WHERE consumer = ");
    db_hex_literal(s, o->db->consumer, o->db->consumer_len);
    if (mysql_query(o->db->my, o->sql) != 0 || (res = mysql_store_result(o->db->my)) == NULL) {
        log_error("outbox: counting rows: error %u: %s", mysql_errno(o->db->my),
                  mysql_error(o->db->my));
        return -1;
    }
    row = mysql_fetch_row(res);
    *rows = row && row[0] ? atoll(row[0]) : 0;
    *oldest_s = row && row[1] ? (double)atoll(row[1]) / 1e6 : 0.0;
    mysql_free_result(res);
    (void)mysql_rollback(o->db->my); /* end the read transaction */
    return 0;
}

int outbox_relay(outbox_t *o, mq_t *pub, const char *const *src, const size_t *src_len, int k,
                 int grace_s, int limit)
{
    MYSQL_RES *res = NULL;
    MYSQL_ROW row;
    int sent = 0, n = 0, rc = -2;
    unsigned long long *ids = NULL;
    int *copy = NULL;

    if (outbox_select_sql(o, src, src_len, k, grace_s, limit) != 0)
        return -1;
    if (mysql_query(o->db->my, o->sql) != 0 || (res = mysql_store_result(o->db->my)) == NULL) {
        log_error("outbox: reading rows: error %u: %s", mysql_errno(o->db->my),
                  mysql_error(o->db->my));
        rc = db_classify(mysql_errno(o->db->my)) == DB_ERR_CONNECTION ? -1 : -2;
        goto done;
    }
    n = (int)mysql_num_rows(res);
    if (n == 0) {
        rc = 0;
        goto done;
    }
    ids = calloc((size_t)n, sizeof(*ids));
    copy = calloc((size_t)n, sizeof(*copy));
    if (ids == NULL || copy == NULL)
        goto done;
    mq_round_begin(pub);
    for (int i = 0; (row = mysql_fetch_row(res)) != NULL; i++) {
        ids[i] = strtoull(row[0], NULL, 10);
        copy[i] = outbox_send(pub, row, mysql_fetch_lengths(res));
        if (copy[i] < 0) {
            n = i; /* the rest stay for later, in order */
            break;
        }
    }
    if (n > 0 && mq_wait_confirms(pub, OUTBOX_CONFIRM_MS) != 0)
        log_warn("outbox: the broker did not confirm every onward message: the rest stay");
    /* Delete what the broker confirmed; a row whose message got through unconfirmed
     * is sent again later, and the next consumer's dedup absorbs it. */
    if (outbox_room(o, 128 + (size_t)n * 22) != 0)
        goto done;
    char *s = o->sql + sprintf(o->sql, "DELETE FROM " OUTBOX_TABLE " WHERE id IN (");
    for (int i = 0; i < n; i++) {
        if (!mq_round_ok(pub, copy[i]))
            continue;
        s += sprintf(s, "%s%llu", sent ? ", " : "", ids[i]);
        sent++;
    }
    strcpy(s, ")");
    rc = sent == n && n == (int)mysql_num_rows(res) ? 0 : -2;
    if (sent > 0 && (mysql_query(o->db->my, o->sql) != 0 || mysql_commit(o->db->my) != 0)) {
        log_error("outbox: deleting sent rows: error %u: %s", mysql_errno(o->db->my),
                  mysql_error(o->db->my));
        rc = db_classify(mysql_errno(o->db->my)) == DB_ERR_CONNECTION ? -1 : -2;
        goto done;
    }
    if (rc == 0)
        rc = sent;
done:
    if (res)
        mysql_free_result(res);
    free(ids);
    free(copy);
    if (rc < 0 || sent == 0)
        (void)mysql_rollback(o->db->my); /* end the read transaction */
    return rc;
}
