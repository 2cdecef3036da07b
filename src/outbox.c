/* outbox.c: the transactional outbox: onward messages written in the handler's transaction, sent
 * after COMMIT.
 */
#include "outbox.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "copies.h"

#define OUTBOX_CONFIRM_MS 15000
#define OUTBOX_SLICE_ROWS 500                    /* rows read and sent at a time */
#define OUTBOX_SLICE_BYTES (16ULL * 1024 * 1024) /* body and header bytes read at a time */
#define OUTBOX_BACKOFF_MAX_MS 300000LL           /* the longest wait between refused sends */

struct outbox {
    outbox_policy_t pol;
    const db_outbox_ops_t *db; /* the outbox table */
    void *ctx;                 /* db's */
    /* A slice's rows, allocated on the first relay and kept: OUTBOX_SLICE_ROWS of each, and of
     * ids three times (due ids, their sizes, ids to delete). */
    struct outbox_row *rows;
    outbox_msg_t *msgs;
    unsigned long long *ids;
};

outbox_t *outbox_new_ops(const db_outbox_ops_t *ops, void *ctx)
{
    outbox_t *o = calloc(1, sizeof(*o));
    if (o == NULL) {
        log_error("outbox: out of memory");
        return NULL;
    }
    o->db = ops;
    o->ctx = ctx;
    return o;
}

void *outbox_ops_ctx(const outbox_t *o)
{
    return o->ctx;
}

void outbox_set_policy(outbox_t *o, const outbox_policy_t *pol)
{
    o->pol = *pol;
    if (o->pol.max_attempts < 1)
        o->pol.max_attempts = 1;
    if (o->pol.backoff_ms < 1)
        o->pol.backoff_ms = 1;
}

void outbox_close(outbox_t *o)
{
    if (o == NULL)
        return;
    if (o->db->close)
        o->db->close(o->ctx);
    free(o->rows);
    free(o->msgs);
    free(o->ids);
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

/* Whether hdr[0..n) has a header named key. */
static bool outbox_has_header(const amqp_table_entry_t *hdr, int n, const char *key)
{
    size_t kl = strlen(key);
    for (int i = 0; i < n; i++)
        if (hdr[i].key.len == kl && memcmp(hdr[i].key.bytes, key, kl) == 0)
            return true;
    return false;
}

/*
 * Append the row's trace context (traceparent, tracestate, baggage) to
 * hdr[0..n) as string headers, each only when the row's own headers lack
 * it (the handler's wins). hdr has room for OUTBOX_HEADERS_MAX + 3. The
 * new count.
 */
static int outbox_trace_headers(const outbox_msg_t *m, amqp_table_entry_t *hdr, int n)
{
    const char *keys[3] = {"traceparent", "tracestate", "baggage"};
    const char *vals[3] = {m->traceparent, m->tracestate, m->baggage};
    size_t lens[3] = {m->traceparent_len, m->tracestate_len, m->baggage_len};
    int own = n;
    for (int k = 0; k < 3; k++) {
        if (vals[k] == NULL || lens[k] == 0 || outbox_has_header(hdr, own, keys[k]))
            continue;
        hdr[n].key = amqp_cstring_bytes(keys[k]);
        hdr[n].value.kind = AMQP_FIELD_KIND_UTF8;
        hdr[n].value.value.bytes.bytes = (void *)vals[k];
        hdr[n++].value.value.bytes.len = lens[k];
    }
    return n;
}

/*
 * The properties of m's onward message into props (persistent, its
 * message id, content type and headers, decoded into hdr, which holds
 * OUTBOX_HEADERS_MAX + 3 entries and must outlive props, then its trace
 * context). Returns the number of headers.
 */
static int outbox_props(const outbox_msg_t *m, amqp_basic_properties_t *props,
                        amqp_table_entry_t *hdr)
{
    int nh = 0;

    memset(props, 0, sizeof(*props));
    props->_flags = AMQP_BASIC_DELIVERY_MODE_FLAG | AMQP_BASIC_MESSAGE_ID_FLAG;
    props->delivery_mode = AMQP_DELIVERY_PERSISTENT;
    props->message_id.bytes = (void *)m->msg_id;
    props->message_id.len = m->msg_id_len;
    if (m->content_type_len > 0) {
        props->_flags |= AMQP_BASIC_CONTENT_TYPE_FLAG;
        props->content_type.bytes = (void *)m->content_type;
        props->content_type.len = m->content_type_len;
    }
    if (m->headers && m->headers_len > 0) {
        nh = outbox_decode_headers(m->headers, m->headers_len, hdr, OUTBOX_HEADERS_MAX);
        if (nh < 0) {
            log_error("outbox: row %llu: headers do not decode: sent without them", m->id);
            nh = 0;
        }
        /* idemd-* headers are idemd's to set (a handler that passes its message's headers
         * on would pass a publisher's forged ones): left out, as from every copy. */
        int kept = 0;
        for (int i = 0; i < nh; i++)
            if (!copies_is_idemd_header(hdr[i].key))
                hdr[kept++] = hdr[i];
        nh = kept;
    }
    nh = outbox_trace_headers(m, hdr, nh);
    if (nh > 0) {
        props->_flags |= AMQP_BASIC_HEADERS_FLAG;
        props->headers.num_entries = nh;
        props->headers.entries = hdr;
    }
    return nh;
}

/* Publish m as an onward message (persistent, mandatory). Its copy index, or -1. */
static int outbox_send(const port_publish_ops_t *mq, void *mc, const outbox_msg_t *m)
{
    amqp_basic_properties_t props;
    amqp_table_entry_t hdr[OUTBOX_HEADERS_MAX + 3];
    char exchange[256], rkey[256];

    outbox_props(m, &props, hdr);
    snprintf(exchange, sizeof(exchange), "%.*s", (int)m->exchange_len, m->exchange);
    snprintf(rkey, sizeof(rkey), "%.*s", (int)m->routing_key_len, m->routing_key);
    amqp_bytes_t body = {m->body_len, (void *)m->body};
    return mq->publish(mc, exchange, rkey, &props, body);
}

int outbox_depth(outbox_t *o, outbox_depth_t *d)
{
    return o->db->depth(o->ctx, o->pol.max_attempts, d);
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
 * Of the n due rows (ids, sizes), the first whose sizes add up to at most
 * OUTBOX_SLICE_BYTES (the first row always), into rows. Their number.
 */
static int outbox_pick(const unsigned long long *ids, const unsigned long long *sizes, int n,
                       outbox_row_t *rows)
{
    unsigned long long bytes = 0;
    int k = 0;
    while (k < n) {
        if (k > 0 && bytes + sizes[k] > OUTBOX_SLICE_BYTES)
            break;
        bytes += sizes[k];
        memset(&rows[k], 0, sizeof(rows[k]));
        rows[k].id = ids[k];
        k++;
    }
    return k;
}

/*
 * The dead letter of an onward message that used up its attempts: the row's
 * message with reason headers, to the source queue's dead-letter queue. Its
 * copy index, or -1.
 */
static int outbox_dead_letter(outbox_t *o, const port_publish_ops_t *mq, void *mc,
                              const outbox_msg_t *m, const outbox_row_t *r, uint64_t now_ms)
{
    amqp_basic_properties_t props;
    amqp_table_entry_t hdr[OUTBOX_HEADERS_MAX + 3 + 12];
    char first[64], last[64], sig[COPIES_SIG_HEX + 1], queue[300], error[MQ_WHY_MAX + 300];
    uint64_t attempts = r->attempts + 1;
    uint64_t max_message = mq->max_message(mc);
    bool big = max_message && m->body_len + COPIES_RESERVE > max_message;
    int nh = outbox_props(m, &props, hdr);

    props._flags |= AMQP_BASIC_HEADERS_FLAG;
    copies_iso_time(r->failed_s ? (uint64_t)r->failed_s * 1000 : now_ms, first, sizeof(first));
    copies_iso_time(now_ms, last, sizeof(last));
    if (copies_onward_queue(o->pol.queue, queue, sizeof(queue)) == NULL)
        return -1;
    snprintf(error, sizeof(error),
             "onward message not delivered after %llu attempts to exchange '%.*s' routing key "
             "'%.*s': %s",
             (unsigned long long)attempts, (int)m->exchange_len, m->exchange,
             (int)m->routing_key_len, m->routing_key, r->why);
    amqp_bytes_t ex = {m->exchange_len, (void *)m->exchange};
    amqp_bytes_t rk = {m->routing_key_len, (void *)m->routing_key};
    if (copies_sign(o->pol.key, queue, m->msg_id, m->msg_id_len, attempts,
                    amqp_cstring_bytes(first), ex, rk, sig) != 0)
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
    OUTBOX_INT(COPIES_H_ONWARD, 1);
    OUTBOX_INT(COPIES_H_ATTEMPTS, attempts);
    OUTBOX_STR(COPIES_H_ERROR, amqp_cstring_bytes(error));
    OUTBOX_STR(COPIES_H_FIRST_FAILURE, amqp_cstring_bytes(first));
    OUTBOX_STR(COPIES_H_LAST_FAILURE, amqp_cstring_bytes(last));
    OUTBOX_STR(COPIES_H_EXCHANGE, ex);
    OUTBOX_STR(COPIES_H_ROUTING_KEY, rk);
    OUTBOX_STR(COPIES_H_QUEUE, amqp_cstring_bytes((char *)o->pol.queue));
    OUTBOX_STR(COPIES_H_ONWARD_SOURCE, ((amqp_bytes_t){m->source_len, (void *)m->source_id}));
    OUTBOX_STR(COPIES_H_SIG, amqp_cstring_bytes(sig));
    if (big)
        OUTBOX_INT(COPIES_H_BODY_DROPPED, m->body_len);
#undef OUTBOX_STR
#undef OUTBOX_INT
    props.headers.num_entries = nh;
    props.headers.entries = hdr;
    amqp_bytes_t body = big ? amqp_empty_bytes : (amqp_bytes_t){m->body_len, (void *)m->body};
    return mq->publish(mc, "", o->pol.dlq, &props, body);
}

/* Whether a body of len bytes is over the broker's max message size as the channel learned it;
 * then r says so. */
static bool outbox_too_big(const port_publish_ops_t *mq, void *mc, size_t len, outbox_row_t *r)
{
    uint64_t max_message = mq->max_message(mc);
    if (max_message == 0 || len + COPIES_RESERVE <= max_message)
        return false;
    r->state = OUTBOX_REFUSED;
    snprintf(r->why, sizeof(r->why),
             "a body of %zu bytes is over the broker's max message size (%llu bytes)", len,
             (unsigned long long)max_message);
    return true;
}

/*
 * Publish the fetched rows msgs[0..n-1] (rows[0..n-1], in id order) and
 * note in each what became of it. A publish the broker closed the channel
 * for is found by sending the unconfirmed rows again one at a time, so
 * that it costs only itself. Rows used up get their dead letter. 0, or -1
 * when the connection is lost (the rows not settled stay LEFT).
 */
static int outbox_send_slice(outbox_t *o, const port_publish_ops_t *mq, void *mc, uint64_t now_ms,
                             const outbox_msg_t *msgs, outbox_row_t *rows, int n)
{
    int *copy = calloc((size_t)n, sizeof(*copy));
    int rc = -1, dead = 0;

    if (copy == NULL)
        return -1;
    for (int i = 0; i < n; i++) {
        rows[i].attempts = msgs[i].attempts;
        rows[i].failed_s = msgs[i].failed_s;
    }
    /* Every slot is -1 before a round: a loop that stops early leaves none of the later rows
     * pointing at another row's copy (which would settle them by its fate). */
    for (int i = 0; i < n; i++)
        copy[i] = -1;
    mq->round_begin(mc);
    for (int i = 0; i < n; i++) {
        if (outbox_too_big(mq, mc, msgs[i].body_len, &rows[i]))
            continue;
        if (!mq->usable(mc) || (copy[i] = outbox_send(mq, mc, &msgs[i])) < 0)
            break;
    }
    if (mq->wait_confirms(mc, OUTBOX_CONFIRM_MS) != 0 && mq->usable(mc))
        log_warn("outbox: the broker refused some onward messages: they wait and are sent again");
    bool closed = !mq->usable(mc) && !mq->broken(mc);
    for (int i = 0; i < n; i++) {
        if (copy[i] < 0)
            continue;
        const char *why = mq->round_why(mc, copy[i]);
        if (why == NULL)
            rows[i].state = OUTBOX_SENT;
        else if (mq->round_returned(mc, copy[i]) || strncmp(why, "refused", 7) == 0) {
            rows[i].state = OUTBOX_REFUSED;
            snprintf(rows[i].why, sizeof(rows[i].why), "%s", why);
        }
    }
    /* The broker closed the channel for one of them: find it, one row at a time. */
    if (closed) {
        log_warn("outbox: the broker closed the channel during a round: sending its unconfirmed "
                 "rows one at a time");
        for (int i = 0; i < n; i++) {
            if (rows[i].state != OUTBOX_LEFT)
                continue;
            if (mq->restore(mc) != 0)
                goto done;
            if (outbox_too_big(mq, mc, msgs[i].body_len, &rows[i]))
                continue;
            mq->round_begin(mc);
            int c = outbox_send(mq, mc, &msgs[i]);
            if (c < 0)
                goto done;
            if (mq->wait_confirms(mc, OUTBOX_CONFIRM_MS) != 0)
                log_debug("outbox: row %llu alone: not confirmed", rows[i].id);
            const char *why = mq->round_why(mc, c);
            if (why == NULL) {
                rows[i].state = OUTBOX_SENT;
            } else if (mq->broken(mc)) {
                goto done;
            } else {
                rows[i].state = OUTBOX_REFUSED;
                snprintf(rows[i].why, sizeof(rows[i].why), "%s", why);
            }
        }
        if (mq->restore(mc) != 0)
            goto done;
    }
    /* Dead letters for the rows that used up their attempts: confirmed before they go. */
    if (o->pol.dlq && o->pol.dlq[0] && !o->db->legacy(o->ctx)) {
        for (int i = 0; i < n; i++)
            copy[i] = -1;
        mq->round_begin(mc);
        for (int i = 0; i < n; i++) {
            if (rows[i].state != OUTBOX_REFUSED || rows[i].attempts + 1 < o->pol.max_attempts)
                continue;
            copy[i] = outbox_dead_letter(o, mq, mc, &msgs[i], &rows[i], now_ms);
            if (copy[i] < 0)
                break;
            dead++;
        }
        if (dead > 0 && mq->wait_confirms(mc, OUTBOX_CONFIRM_MS) != 0)
            log_error("outbox: dead letters to %s not all confirmed: their rows stay", o->pol.dlq);
        for (int i = 0; i < n; i++)
            if (copy[i] >= 0 && mq->round_ok(mc, copy[i]))
                rows[i].state = OUTBOX_DEAD;
    }
    rc = 0;
done:
    free(copy);
    return mq->broken(mc) || !mq->usable(mc) ? -1 : rc;
}

/*
 * Write what became of the slice's rows: delete the sent and dead-lettered
 * ones (their ids gathered in del, room for n), count a refusal on the
 * others (attempts, backoff, last error), then COMMIT. 0, or -1 / -2 as
 * outbox_relay.
 */
static int outbox_settle(outbox_t *o, const outbox_row_t *rows, unsigned long long *del, int n)
{
    int nd = 0, rc;
    for (int i = 0; i < n; i++)
        if (rows[i].state == OUTBOX_SENT || rows[i].state == OUTBOX_DEAD)
            del[nd++] = rows[i].id;
    if (nd > 0 && (rc = o->db->remove(o->ctx, del, nd)) != 0)
        return rc;
    bool legacy = o->db->legacy(o->ctx);
    for (int i = 0; i < n && !legacy; i++) {
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
        if ((rc = o->db->refuse(o->ctx, r->id, wait, r->why)) != 0)
            return rc;
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
    return o->db->commit(o->ctx);
}

int outbox_relay(outbox_t *o, const port_publish_t *pub, const port_clock_t *clock,
                 const char *const *src, const size_t *src_len, int k, int grace_s, int slices)
{
    const port_publish_ops_t *mq = pub->ops;
    void *mc = pub->ctx;
    int sent = 0, rc = -2;

    if (o->rows == NULL)
        o->rows = calloc(OUTBOX_SLICE_ROWS, sizeof(*o->rows));
    if (o->msgs == NULL)
        o->msgs = calloc(OUTBOX_SLICE_ROWS, sizeof(*o->msgs));
    if (o->ids == NULL)
        o->ids = calloc(3 * OUTBOX_SLICE_ROWS, sizeof(*o->ids));
    if (o->rows == NULL || o->msgs == NULL || o->ids == NULL) {
        log_error("outbox: out of memory");
        return -2;
    }
    outbox_row_t *rows = o->rows;
    outbox_msg_t *msgs = o->msgs;
    unsigned long long *ids = o->ids, *sizes = ids + OUTBOX_SLICE_ROWS,
                       *del = ids + 2 * OUTBOX_SLICE_ROWS;
    for (int slice = 0; slice < slices; slice++) {
        int got = 0, have = 0;
        if ((rc = o->db->due(o->ctx, src, src_len, k, grace_s, OUTBOX_SLICE_ROWS, ids, sizes,
                             &got)) != 0)
            goto done;
        int n = outbox_pick(ids, sizes, got, rows);
        if (n <= 0) {
            rc = 0;
            break;
        }
        if ((rc = o->db->fetch(o->ctx, ids, n, msgs, &have)) != 0)
            goto done;
        /* A row gone meanwhile (another worker's relay sent it) is missing from msgs: each
         * row is the one fetched, never the picked id at the same place, so a refused row is
         * never deleted in the name of a sent one. */
        n = have < n ? have : n;
        for (int i = 0; i < n; i++)
            rows[i].id = msgs[i].id;
        int lost = outbox_send_slice(o, mq, mc, clock->ops->wall_ms(clock->ctx), msgs, rows, n);
        if ((rc = outbox_settle(o, rows, del, n)) != 0)
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
        if (o->db->legacy(o->ctx) && settled < n)
            break; /* refused rows are not marked: the next slice would read them again */
        if (got < OUTBOX_SLICE_ROWS && n == got) {
            rc = 0;
            break; /* that was the last slice */
        }
    }
    rc = 0;
done:
    if (rc != 0)
        o->db->rollback(o->ctx); /* end the read transaction */
    return rc == 0 ? sent : rc;
}
