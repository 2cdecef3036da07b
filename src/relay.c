/* relay.c: building the copies idemd republishes: retry tiers and dead letters with reason headers.
 */
#include "relay.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Whether a header key equals name. */
static int relay_key_is(amqp_bytes_t key, const char *name)
{
    size_t n = strlen(name);
    return key.len == n && memcmp(key.bytes, name, n) == 0;
}

/* Whether a header key starts with prefix. */
static int relay_key_starts(amqp_bytes_t key, const char *prefix)
{
    size_t n = strlen(prefix);
    return key.len >= n && memcmp(key.bytes, prefix, n) == 0;
}

/* Headers the copy must not carry over: the broker's and our own (rewritten). */
static int relay_dropped(amqp_bytes_t key)
{
    return relay_key_is(key, "x-death") || relay_key_starts(key, "x-first-death-") ||
           relay_key_starts(key, "x-last-death-") || relay_key_is(key, "x-delivery-count") ||
           relay_key_is(key, RELAY_H_ATTEMPTS) || relay_key_is(key, RELAY_H_ERROR) ||
           relay_key_is(key, RELAY_H_LAST_FAILURE) || relay_key_is(key, RELAY_H_QUEUE);
}

/* Whether the first n entries hold a header called name. */
static bool relay_find(const amqp_table_entry_t *e, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (relay_key_is(e[i].key, name))
            return true;
    return false;
}

static void relay_set_str(amqp_table_entry_t *e, const char *key, amqp_bytes_t value)
{
    e->key = amqp_cstring_bytes(key);
    e->value.kind = AMQP_FIELD_KIND_UTF8;
    e->value.value.bytes = value;
}

static size_t relay_value_size(const amqp_field_value_t *v, int depth);

/*
 * Encoded size of a field table, an upper estimate; SIZE_MAX when it nests
 * deeper than RELAY_DEPTH_MAX (depth counts the tables and arrays around it).
 */
static size_t relay_table_size(const amqp_table_t *t, int depth)
{
    size_t n = 4;
    if (depth > RELAY_DEPTH_MAX)
        return SIZE_MAX;
    for (int i = 0; i < t->num_entries; i++) {
        size_t v = relay_value_size(&t->entries[i].value, depth);
        if (v == SIZE_MAX)
            return SIZE_MAX;
        n += 1 + t->entries[i].key.len + v;
    }
    return n;
}

static size_t relay_value_size(const amqp_field_value_t *v, int depth)
{
    switch (v->kind) {
    case AMQP_FIELD_KIND_UTF8:
    case AMQP_FIELD_KIND_BYTES:
        return 1 + 4 + v->value.bytes.len;
    case AMQP_FIELD_KIND_TABLE: {
        size_t t = relay_table_size(&v->value.table, depth + 1);
        return t == SIZE_MAX ? t : 1 + t;
    }
    case AMQP_FIELD_KIND_ARRAY: {
        size_t n = 1 + 4;
        if (depth + 1 > RELAY_DEPTH_MAX)
            return SIZE_MAX;
        for (int i = 0; i < v->value.array.num_entries; i++) {
            size_t e = relay_value_size(&v->value.array.entries[i], depth + 1);
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
static size_t relay_entry_size(const amqp_table_entry_t *e)
{
    size_t v = relay_value_size(&e->value, 0);
    return v == SIZE_MAX ? v : 1 + e->key.len + v;
}

/* Whether entry e is the queue's id header (NULL id_header: the id is a property). */
static bool relay_is_id(const amqp_table_entry_t *e, const char *id_header)
{
    return id_header != NULL && relay_key_is(e->key, id_header);
}

/*
 * Copy the original headers the copy keeps into out (room for all of them):
 * the id header first, then the others in order, each while it nests no
 * deeper than RELAY_DEPTH_MAX and fits in one frame beside idemd's own
 * (rabbitmq-c sends the publish method before it finds out that the header
 * frame does not fit, which breaks the channel). Sets *dropped when any was
 * left out. Returns how many were kept.
 */
static int relay_keep_headers(const amqp_basic_properties_t *p, const char *id_header,
                              amqp_table_entry_t *out, bool *dropped)
{
    size_t budget = RELAY_FRAME_MAX - RELAY_RESERVE - 4;
    int n = 0;

    *dropped = false;
    if (!(p->_flags & AMQP_BASIC_HEADERS_FLAG))
        return 0;
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < p->headers.num_entries; i++) {
            const amqp_table_entry_t *e = &p->headers.entries[i];
            if (relay_dropped(e->key) || relay_is_id(e, id_header) != (pass == 0))
                continue;
            size_t sz = relay_entry_size(e);
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

int relay_copy_init(relay_copy_t *c, const amqp_envelope_t *env, const char *queue,
                    const char *id_header, unsigned attempts, const char *error, uint64_t now_ms)
{
    const amqp_basic_properties_t *p = &env->message.properties;
    int n_orig = (p->_flags & AMQP_BASIC_HEADERS_FLAG) ? p->headers.num_entries : 0;
    int n;
    bool dropped;
    struct tm tm;
    time_t secs = (time_t)(now_ms / 1000);

    memset(c, 0, sizeof(*c));
    c->entries = calloc((size_t)n_orig + 9, sizeof(*c->entries));
    if (c->entries == NULL)
        return -1;
    c->props = *p;
    c->props._flags |= AMQP_BASIC_DELIVERY_MODE_FLAG | AMQP_BASIC_HEADERS_FLAG;
    c->props.delivery_mode = 2;
    /* A per-message TTL would expire the copy in its delay or dead letter queue, and the
     * broker refuses a user_id that is not the publishing connection's user. */
    c->props._flags &= ~(amqp_flags_t)(AMQP_BASIC_EXPIRATION_FLAG | AMQP_BASIC_USER_ID_FLAG);
    n = relay_keep_headers(p, id_header, c->entries, &dropped);
    if (dropped) {
        c->entries[n].key = amqp_cstring_bytes("idemd-headers-dropped");
        c->entries[n].value.kind = AMQP_FIELD_KIND_BOOLEAN;
        c->entries[n++].value.value.boolean = 1;
    }

    gmtime_r(&secs, &tm);
    snprintf(c->now, sizeof(c->now), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
             tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(now_ms % 1000));
    snprintf(c->error, sizeof(c->error), "%.*s", (int)sizeof(c->error) - 1, error ? error : "");

    c->entries[n].key = amqp_cstring_bytes(RELAY_H_ATTEMPTS);
    c->entries[n].value.kind = AMQP_FIELD_KIND_I64;
    c->entries[n++].value.value.i64 = attempts;
    relay_set_str(&c->entries[n++], RELAY_H_ERROR, amqp_cstring_bytes(c->error));
    relay_set_str(&c->entries[n++], RELAY_H_LAST_FAILURE, amqp_cstring_bytes(c->now));
    relay_set_str(&c->entries[n++], RELAY_H_QUEUE, amqp_cstring_bytes(queue));
    /* First failure and the original route survive every later copy (unless dropped above). */
    if (!relay_find(c->entries, n, RELAY_H_FIRST_FAILURE))
        relay_set_str(&c->entries[n++], RELAY_H_FIRST_FAILURE, amqp_cstring_bytes(c->now));
    if (!relay_find(c->entries, n, RELAY_H_EXCHANGE))
        relay_set_str(&c->entries[n++], RELAY_H_EXCHANGE, env->exchange);
    if (!relay_find(c->entries, n, RELAY_H_ROUTING_KEY))
        relay_set_str(&c->entries[n++], RELAY_H_ROUTING_KEY, env->routing_key);
    c->props.headers.num_entries = n;
    c->props.headers.entries = c->entries;
    return 0;
}

void relay_copy_free(relay_copy_t *c)
{
    if (c == NULL)
        return;
    free(c->entries);
    c->entries = NULL;
}

const char *relay_delay_queue(const conf_queue_t *q, unsigned attempt, char *buf, size_t len,
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
