/* copies.c: building the copies idemd republishes: retry tiers and dead letters with reason
 * headers.
 */
#include "copies.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

/* Whether a header key equals name. */
static int copies_key_is(amqp_bytes_t key, const char *name)
{
    size_t n = strlen(name);
    return key.len == n && memcmp(key.bytes, name, n) == 0;
}

/* Whether a header key starts with prefix. */
static int copies_key_starts(amqp_bytes_t key, const char *prefix)
{
    size_t n = strlen(prefix);
    return key.len >= n && memcmp(key.bytes, prefix, n) == 0;
}

bool copies_is_idemd_header(amqp_bytes_t key)
{
    static const char prefix[] = "idemd-";
    size_t n = sizeof(prefix) - 1;
    return key.len >= n && strncasecmp((const char *)key.bytes, prefix, n) == 0 &&
           !copies_key_is(key, COPIES_H_PUB_US);
}

/*
 * Headers the copy must not carry over: the broker's, and every idemd-*
 * one, whoever set it: a list of the names idemd sets would let through
 * those it reads elsewhere (idemd-onward made a dead letter pass for an
 * onward message) and those it will read one day.
 */
static int copies_dropped(amqp_bytes_t key)
{
    return copies_key_is(key, "x-death") || copies_key_starts(key, "x-first-death-") ||
           copies_key_starts(key, "x-last-death-") || copies_key_is(key, "x-delivery-count") ||
           copies_is_idemd_header(key);
}

/* A header of the original, or NULL. */
static const amqp_field_value_t *copies_find(const amqp_basic_properties_t *p, const char *name)
{
    if (!(p->_flags & AMQP_BASIC_HEADERS_FLAG))
        return NULL;
    for (int i = 0; i < p->headers.num_entries; i++)
        if (copies_key_is(p->headers.entries[i].key, name))
            return &p->headers.entries[i].value;
    return NULL;
}

/* A string header of the original into *out; false when absent or not a string. */
static bool copies_str(const amqp_basic_properties_t *p, const char *name, amqp_bytes_t *out)
{
    const amqp_field_value_t *v = copies_find(p, name);
    if (v == NULL || (v->kind != AMQP_FIELD_KIND_UTF8 && v->kind != AMQP_FIELD_KIND_BYTES))
        return false;
    *out = v->value.bytes;
    return true;
}

/* An integer header of the original; -1 when absent or not an integer. */
static long long copies_int(const amqp_basic_properties_t *p, const char *name)
{
    const amqp_field_value_t *v = copies_find(p, name);
    if (v == NULL)
        return -1;
    switch (v->kind) {
    case AMQP_FIELD_KIND_I8:
        return v->value.i8;
    case AMQP_FIELD_KIND_U8:
        return v->value.u8;
    case AMQP_FIELD_KIND_I16:
        return v->value.i16;
    case AMQP_FIELD_KIND_U16:
        return v->value.u16;
    case AMQP_FIELD_KIND_I32:
        return v->value.i32;
    case AMQP_FIELD_KIND_U32:
        return v->value.u32;
    case AMQP_FIELD_KIND_I64:
        return v->value.i64;
    case AMQP_FIELD_KIND_U64:
        return v->value.u64 > (uint64_t)INT64_MAX ? -1 : (long long)v->value.u64;
    default:
        return -1;
    }
}

/* Append one length-prefixed field at buf + *off, so that fields cannot run into each other. */
static void copies_mac_field(unsigned char *buf, size_t *off, const void *data, size_t len)
{
    for (int i = 0; i < 8; i++)
        buf[(*off)++] = (unsigned char)((uint64_t)len >> (8 * i));
    if (len)
        memcpy(buf + *off, data, len);
    *off += len;
}

/*
 * The signature of idemd's headers on a copy: hex HMAC-SHA256 under key of
 * the queue, the message id, attempts, first failure and original route.
 * Writes COPIES_SIG_HEX + 1 bytes into out. 0, or -1 when out of memory.
 */
int copies_sign(const unsigned char *key, const char *queue, const char *id, size_t id_len,
                uint64_t attempts, amqp_bytes_t first, amqp_bytes_t exchange, amqp_bytes_t rkey,
                char *out)
{
    static const char tag[] = "idemd-sig-v1";
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned int mac_len = 0;
    char num[24];
    size_t off = 0;
    int n = snprintf(num, sizeof(num), "%llu", (unsigned long long)attempts);
    size_t total = 7 * 8 + sizeof(tag) + strlen(queue) + id_len + (size_t)n + first.len +
                   exchange.len + rkey.len;
    unsigned char *buf = malloc(total);

    if (buf == NULL)
        return -1;
    copies_mac_field(buf, &off, tag, sizeof(tag) - 1);
    copies_mac_field(buf, &off, queue, strlen(queue));
    copies_mac_field(buf, &off, id, id_len);
    copies_mac_field(buf, &off, num, (size_t)n);
    copies_mac_field(buf, &off, first.bytes, first.len);
    copies_mac_field(buf, &off, exchange.bytes, exchange.len);
    copies_mac_field(buf, &off, rkey.bytes, rkey.len);
    unsigned char *r = HMAC(EVP_sha256(), key, COPIES_KEY_LEN, buf, off, mac, &mac_len);
    free(buf);
    if (r == NULL || mac_len * 2 != COPIES_SIG_HEX)
        return -1;
    for (unsigned i = 0; i < mac_len; i++)
        snprintf(out + 2 * i, 3, "%02x", mac[i]);
    return 0;
}

void copies_iso_time(uint64_t ms, char *out, size_t len)
{
    time_t secs = (time_t)(ms / 1000);
    struct tm tm;
    gmtime_r(&secs, &tm);
    snprintf(out, len, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
             tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(ms % 1000));
}

const char *copies_onward_queue(const char *source_queue, char *buf, size_t len)
{
    int n = snprintf(buf, len, "onward:%s", source_queue);
    return n < 0 || (size_t)n >= len ? NULL : buf;
}

bool copies_trusted(const amqp_basic_properties_t *p, const copies_keys_t *keys, const char *queue,
                    const char *id, size_t id_len, unsigned *attempts)
{
    amqp_bytes_t first, exchange, rkey, sig;
    char want[COPIES_SIG_HEX + 1];
    long long n = copies_int(p, COPIES_H_ATTEMPTS);

    if (n < 0 || n > COPIES_MAX_ATTEMPTS || !copies_str(p, COPIES_H_SIG, &sig) ||
        sig.len != COPIES_SIG_HEX || !copies_str(p, COPIES_H_FIRST_FAILURE, &first) ||
        !copies_str(p, COPIES_H_EXCHANGE, &exchange) || !copies_str(p, COPIES_H_ROUTING_KEY, &rkey))
        return false;
    /* Every key is tried, also after a match: the time taken does not tell which one. */
    bool ok = false;
    for (int i = 0; i < keys->n && i < COPIES_KEYS_MAX; i++)
        if (copies_sign(keys->k[i], queue, id, id_len, (uint64_t)n, first, exchange, rkey, want) ==
                0 &&
            CRYPTO_memcmp(want, sig.bytes, COPIES_SIG_HEX) == 0)
            ok = true;
    if (!ok)
        return false;
    *attempts = (unsigned)n;
    return true;
}

static void copies_set_str(amqp_table_entry_t *e, const char *key, amqp_bytes_t value)
{
    e->key = amqp_cstring_bytes(key);
    e->value.kind = AMQP_FIELD_KIND_UTF8;
    e->value.value.bytes = value;
}

static size_t copies_value_size(const amqp_field_value_t *v, int depth);

/*
 * Encoded size of a field table, an upper estimate; SIZE_MAX when it nests
 * deeper than COPIES_DEPTH_MAX (depth counts the tables and arrays around it).
 */
static size_t copies_table_size(const amqp_table_t *t, int depth)
{
    size_t n = 4;
    if (depth > COPIES_DEPTH_MAX)
        return SIZE_MAX;
    for (int i = 0; i < t->num_entries; i++) {
        size_t v = copies_value_size(&t->entries[i].value, depth);
        if (v == SIZE_MAX)
            return SIZE_MAX;
        n += 1 + t->entries[i].key.len + v;
    }
    return n;
}

static size_t copies_value_size(const amqp_field_value_t *v, int depth)
{
    switch (v->kind) {
    case AMQP_FIELD_KIND_UTF8:
    case AMQP_FIELD_KIND_BYTES:
        return 1 + 4 + v->value.bytes.len;
    case AMQP_FIELD_KIND_TABLE: {
        size_t t = copies_table_size(&v->value.table, depth + 1);
        return t == SIZE_MAX ? t : 1 + t;
    }
    case AMQP_FIELD_KIND_ARRAY: {
        size_t n = 1 + 4;
        if (depth + 1 > COPIES_DEPTH_MAX)
            return SIZE_MAX;
        for (int i = 0; i < v->value.array.num_entries; i++) {
            size_t e = copies_value_size(&v->value.array.entries[i], depth + 1);
            if (e == SIZE_MAX)
                return SIZE_MAX;
            n += e;
        }
        return n;
    }
    default:
        return 1 + 9; /* numbers, booleans, decimals, timestamps, void */
    }
}

/* Encoded size of one header entry; SIZE_MAX when its value nests too deep. */
static size_t copies_entry_size(const amqp_table_entry_t *e)
{
    size_t v = copies_value_size(&e->value, 0);
    return v == SIZE_MAX ? v : 1 + e->key.len + v;
}

/* Whether entry e is the queue's id header (NULL id_header: the id is a property). */
static bool copies_is_id(const amqp_table_entry_t *e, const char *id_header)
{
    return id_header != NULL && copies_key_is(e->key, id_header);
}

/*
 * Copy the original headers the copy keeps into out (room for all of them):
 * the id header first, then the others in order, each while it nests no
 * deeper than COPIES_DEPTH_MAX and fits in one frame beside idemd's own
 * (rabbitmq-c sends the publish method before it finds out that the header
 * frame does not fit, which breaks the channel). Sets *dropped when any was
 * left out. Returns how many were kept.
 */
static int copies_keep_headers(const amqp_basic_properties_t *p, const char *id_header,
                               amqp_table_entry_t *out, bool *dropped)
{
    size_t budget = COPIES_FRAME_MAX - COPIES_RESERVE - 4;
    int n = 0;

    *dropped = false;
    if (!(p->_flags & AMQP_BASIC_HEADERS_FLAG))
        return 0;
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < p->headers.num_entries; i++) {
            const amqp_table_entry_t *e = &p->headers.entries[i];
            if (copies_dropped(e->key) || copies_is_id(e, id_header) != (pass == 0))
                continue;
            size_t sz = copies_entry_size(e);
            if (sz == SIZE_MAX || sz > budget) {
                *dropped = true;
                continue;
            }
            budget -= sz;
            out[n++] = *e;
        }
    }
    return n;
}

int copies_copy_init(copies_copy_t *c, const amqp_envelope_t *env, const char *queue,
                     const char *id_header, const char *id, size_t id_len, bool trusted,
                     const unsigned char *key, unsigned attempts, const char *error,
                     uint64_t now_ms)
{
    amqp_bytes_t first, exchange, rkey;
    const amqp_basic_properties_t *p = &env->message.properties;
    int n_orig = (p->_flags & AMQP_BASIC_HEADERS_FLAG) ? p->headers.num_entries : 0;
    int n;
    bool dropped;

    memset(c, 0, sizeof(*c));
    c->entries = calloc((size_t)n_orig + 11, sizeof(*c->entries));
    if (c->entries == NULL)
        return -1;
    c->props = *p;
    c->props._flags |= AMQP_BASIC_DELIVERY_MODE_FLAG | AMQP_BASIC_HEADERS_FLAG;
    c->props.delivery_mode = 2;
    /* A per-message TTL would expire the copy in its delay or dead letter queue, and the
     * broker refuses a user_id that is not the publishing connection's user. */
    c->props._flags &= ~(amqp_flags_t)(AMQP_BASIC_EXPIRATION_FLAG | AMQP_BASIC_USER_ID_FLAG);
    n = copies_keep_headers(p, id_header, c->entries, &dropped);
    /* A copy of idemd's own earlier copy that lost headers says so still. */
    if (dropped || (trusted && copies_find(p, COPIES_H_HEADERS_DROPPED) != NULL)) {
        c->entries[n].key = amqp_cstring_bytes(COPIES_H_HEADERS_DROPPED);
        c->entries[n].value.kind = AMQP_FIELD_KIND_BOOLEAN;
        c->entries[n++].value.value.boolean = 1;
    }

    copies_iso_time(now_ms, c->now, sizeof(c->now));
    snprintf(c->error, sizeof(c->error), "%.*s", (int)sizeof(c->error) - 1, error ? error : "");

    c->entries[n].key = amqp_cstring_bytes(COPIES_H_ATTEMPTS);
    c->entries[n].value.kind = AMQP_FIELD_KIND_I64;
    c->entries[n++].value.value.i64 = attempts;
    copies_set_str(&c->entries[n++], COPIES_H_ERROR, amqp_cstring_bytes(c->error));
    copies_set_str(&c->entries[n++], COPIES_H_LAST_FAILURE, amqp_cstring_bytes(c->now));
    copies_set_str(&c->entries[n++], COPIES_H_QUEUE, amqp_cstring_bytes(queue));
    /* First failure and the original route survive every later copy, when they are ours. */
    if (!trusted || !copies_str(p, COPIES_H_FIRST_FAILURE, &first))
        first = amqp_cstring_bytes(c->now);
    if (!trusted || !copies_str(p, COPIES_H_EXCHANGE, &exchange))
        exchange = env->exchange;
    if (!trusted || !copies_str(p, COPIES_H_ROUTING_KEY, &rkey))
        rkey = env->routing_key;
    copies_set_str(&c->entries[n++], COPIES_H_FIRST_FAILURE, first);
    copies_set_str(&c->entries[n++], COPIES_H_EXCHANGE, exchange);
    copies_set_str(&c->entries[n++], COPIES_H_ROUTING_KEY, rkey);
    if (copies_sign(key, queue, id, id_len, attempts, first, exchange, rkey, c->sig) != 0) {
        free(c->entries);
        c->entries = NULL;
        return -1;
    }
    copies_set_str(&c->entries[n++], COPIES_H_SIG, amqp_cstring_bytes(c->sig));
    c->props.headers.num_entries = n;
    c->props.headers.entries = c->entries;
    return 0;
}

void copies_copy_body_dropped(copies_copy_t *c, uint64_t size)
{
    amqp_table_entry_t *e = &c->entries[c->props.headers.num_entries++];
    e->key = amqp_cstring_bytes(COPIES_H_BODY_DROPPED);
    e->value.kind = AMQP_FIELD_KIND_I64;
    e->value.value.i64 = (int64_t)size;
}

void copies_copy_free(copies_copy_t *c)
{
    if (c == NULL)
        return;
    free(c->entries);
    c->entries = NULL;
}

const char *copies_delay_queue(const conf_queue_t *q, unsigned attempt, char *buf, size_t len,
                               int *delay_ms)
{
    if (q->n_retry_delays <= 0)
        return NULL;
    unsigned tier = attempt == 0 ? 0 : attempt - 1;
    if (tier >= (unsigned)q->n_retry_delays)
        tier = (unsigned)q->n_retry_delays - 1;
    *delay_ms = q->retry_delays_ms[tier];
    snprintf(buf, len, "%s.retry.%d", q->name, *delay_ms);
    return buf;
}
