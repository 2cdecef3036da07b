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
           relay_key_is(key, RELAY_H_LAST_FAILURE) || relay_key_is(key, RELAY_H_QUEUE) ||
           relay_key_is(key, RELAY_H_BODY_DROPPED);
}

/* Find a string header of the original; NULL when absent. */
static const amqp_field_value_t *relay_find(const amqp_basic_properties_t *p, const char *name)
{
    if (!(p->_flags & AMQP_BASIC_HEADERS_FLAG))
        return NULL;
    for (int i = 0; i < p->headers.num_entries; i++)
        if (relay_key_is(p->headers.entries[i].key, name))
            return &p->headers.entries[i].value;
    return NULL;
}

static void relay_set_str(amqp_table_entry_t *e, const char *key, amqp_bytes_t value)
{
    e->key = amqp_cstring_bytes(key);
    e->value.kind = AMQP_FIELD_KIND_UTF8;
    e->value.value.bytes = value;
}

static size_t relay_value_size(const amqp_field_value_t *v, int depth);

/* Encoded size of a field table, an upper estimate; SIZE_MAX when nested absurdly deep. */
static size_t relay_table_size(const amqp_table_t *t, int depth)
{
    size_t n = 4;
    if (depth > 100000) /* deeper than the decoder that built it would go */
        return SIZE_MAX;
    for (int i = 0; i < t->num_entries; i++) {
        size_t v = relay_value_size(&t->entries[i].value, depth + 1);
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
        size_t t = relay_table_size(&v->value.table, depth);
        return t == SIZE_MAX ? t : 1 + t;
    }
    case AMQP_FIELD_KIND_ARRAY: {
        size_t n = 1 + 4;
        if (depth > 100000) /* deeper than the decoder that built it would go */
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

/*
 * Whether the original headers fit in the copy's header frame beside ours
 * (rabbitmq-c sends the publish method before it finds out that the header
 * frame does not fit, which breaks the channel).
 */
static bool relay_headers_fit(const amqp_basic_properties_t *p)
{
    if (!(p->_flags & AMQP_BASIC_HEADERS_FLAG))
        return true;
    size_t n = relay_table_size(&p->headers, 0);
    return n != SIZE_MAX && n + RELAY_RESERVE <= RELAY_FRAME_MAX;
}

int relay_copy_init(relay_copy_t *c, const amqp_envelope_t *env, const char *queue,
                    unsigned attempts, const char *error, uint64_t now_ms)
{
    const amqp_basic_properties_t *p = &env->message.properties;
    int n_orig = (p->_flags & AMQP_BASIC_HEADERS_FLAG) ? p->headers.num_entries : 0;
    int n = 0;
    struct tm tm;
    time_t secs = (time_t)(now_ms / 1000);

    memset(c, 0, sizeof(*c));
    c->entries = calloc((size_t)n_orig + 10, sizeof(*c->entries));
    if (c->entries == NULL)
        return -1;
    bool keep_headers = relay_headers_fit(p);
    c->props = *p;
    c->props._flags |= AMQP_BASIC_DELIVERY_MODE_FLAG | AMQP_BASIC_HEADERS_FLAG;
    c->props.delivery_mode = 2;
    /* A per-message TTL would expire the copy in its delay or dead letter queue, and the
     * broker refuses a user_id that is not the publishing connection's user. */
    c->props._flags &= ~(amqp_flags_t)(AMQP_BASIC_EXPIRATION_FLAG | AMQP_BASIC_USER_ID_FLAG);
    for (int i = 0; keep_headers && i < n_orig; i++)
        if (!relay_dropped(p->headers.entries[i].key))
            c->entries[n++] = p->headers.entries[i];
    if (!keep_headers && n_orig > 0) {
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
    /* First failure and the original route survive every later copy. */
    if (!relay_find(p, RELAY_H_FIRST_FAILURE))
        relay_set_str(&c->entries[n++], RELAY_H_FIRST_FAILURE, amqp_cstring_bytes(c->now));
    if (!relay_find(p, RELAY_H_EXCHANGE))
        relay_set_str(&c->entries[n++], RELAY_H_EXCHANGE, env->exchange);
    if (!relay_find(p, RELAY_H_ROUTING_KEY))
        relay_set_str(&c->entries[n++], RELAY_H_ROUTING_KEY, env->routing_key);
    c->props.headers.num_entries = n;
    c->props.headers.entries = c->entries;
    return 0;
}

void relay_copy_body_dropped(relay_copy_t *c, uint64_t size)
{
    amqp_table_entry_t *e = &c->entries[c->props.headers.num_entries++];
    e->key = amqp_cstring_bytes(RELAY_H_BODY_DROPPED);
    e->value.kind = AMQP_FIELD_KIND_I64;
    e->value.value.i64 = (int64_t)size;
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
