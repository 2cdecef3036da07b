/* delivery.c: dedup id extraction, header flattening and safe printing of ids for logs. */
#include "delivery.h"

#include "log.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* Find an application header by name; NULL when absent. */
static const amqp_field_value_t *delivery_header_find(const amqp_basic_properties_t *props,
                                                      const char *name)
{
    if (!(props->_flags & AMQP_BASIC_HEADERS_FLAG))
        return NULL;
    size_t nlen = strlen(name);
    for (int i = 0; i < props->headers.num_entries; i++) {
        const amqp_table_entry_t *e = &props->headers.entries[i];
        if (e->key.len == nlen && memcmp(e->key.bytes, name, nlen) == 0)
            return &e->value;
    }
    return NULL;
}

/* Integer value of a field; returns 0 and sets *out, or -1 if not an integer kind. */
static int delivery_field_int(const amqp_field_value_t *v, int64_t *out)
{
    switch (v->kind) {
    case AMQP_FIELD_KIND_I8:
        *out = v->value.i8;
        return 0;
    case AMQP_FIELD_KIND_U8:
        *out = v->value.u8;
        return 0;
    case AMQP_FIELD_KIND_I16:
        *out = v->value.i16;
        return 0;
    case AMQP_FIELD_KIND_U16:
        *out = v->value.u16;
        return 0;
    case AMQP_FIELD_KIND_I32:
        *out = v->value.i32;
        return 0;
    case AMQP_FIELD_KIND_U32:
        *out = v->value.u32;
        return 0;
    case AMQP_FIELD_KIND_I64:
        *out = v->value.i64;
        return 0;
    case AMQP_FIELD_KIND_U64:
        if (v->value.u64 > INT64_MAX)
            return -1;
        *out = (int64_t)v->value.u64;
        return 0;
    case AMQP_FIELD_KIND_TIMESTAMP:
        *out = (int64_t)v->value.u64;
        return 0;
    default:
        return -1;
    }
}

int delivery_id(const amqp_basic_properties_t *props, const char *id_header, char *out, size_t *len,
                char *err, size_t errlen)
{
    const void *bytes = NULL;
    size_t n = 0;
    char num[32];

    if (id_header == NULL) {
        if (!(props->_flags & AMQP_BASIC_MESSAGE_ID_FLAG)) {
            snprintf(err, errlen, "no message_id property");
            return -1;
        }
        bytes = props->message_id.bytes;
        n = props->message_id.len;
    } else {
        const amqp_field_value_t *v = delivery_header_find(props, id_header);
        int64_t i;
        if (v == NULL) {
            snprintf(err, errlen, "no id header '%s'", id_header);
            return -1;
        }
        if (v->kind == AMQP_FIELD_KIND_UTF8 || v->kind == AMQP_FIELD_KIND_BYTES) {
            bytes = v->value.bytes.bytes;
            n = v->value.bytes.len;
        } else if ((v->kind == AMQP_FIELD_KIND_U64 || v->kind == AMQP_FIELD_KIND_TIMESTAMP) &&
                   v->value.u64 > INT64_MAX) {
            snprintf(err, errlen,
                     "id header '%s' is %" PRIu64 ", above %" PRId64 ": integer ids must be "
                     "within 0..%" PRId64 " (RabbitMQ 4.x would deliver it as %" PRId64 ")",
                     id_header, v->value.u64, INT64_MAX, INT64_MAX, (int64_t)v->value.u64);
            return -1;
        } else if (delivery_field_int(v, &i) == 0) {
            if (i < 0) {
                snprintf(err, errlen,
                         "id header '%s' is %" PRId64 ", negative: integer ids must be within "
                         "0..%" PRId64 " (RabbitMQ 4.x delivers an unsigned 64-bit id above "
                         "that as a negative one)",
                         id_header, i, INT64_MAX);
                return -1;
            }
            n = (size_t)snprintf(num, sizeof(num), "%" PRId64, i);
            bytes = num;
        } else {
            snprintf(err, errlen, "id header '%s' has type '%c', not a string or integer",
                     id_header, (char)v->kind);
            return -1;
        }
    }
    if (n == 0) {
        snprintf(err, errlen, "id is empty");
        return -1;
    }
    if (n > DELIVERY_ID_MAX) {
        snprintf(err, errlen, "id is %zu bytes, longer than %d", n, DELIVERY_ID_MAX);
        return -1;
    }
    memcpy(out, bytes, n);
    out[n] = '\0';
    *len = n;
    return 0;
}

/* Copy bytes into scratch as a NUL-terminated string; NULL when it does not fit. */
static const char *delivery_scratch_dup(const void *bytes, size_t len, char **scratch, size_t *left)
{
    if (len + 1 > *left)
        return NULL;
    char *s = *scratch;
    memcpy(s, bytes, len);
    s[len] = '\0';
    *scratch += len + 1;
    *left -= len + 1;
    return s;
}

size_t delivery_headers(const amqp_basic_properties_t *props, idemd_header_t *out, size_t max,
                        char *scratch, size_t scratch_len)
{
    size_t n = 0;
    if (!(props->_flags & AMQP_BASIC_HEADERS_FLAG))
        return 0;
    for (int i = 0; i < props->headers.num_entries && n < max; i++) {
        const amqp_table_entry_t *e = &props->headers.entries[i];
        idemd_header_t *h = &out[n];
        memset(h, 0, sizeof(*h));
        h->key = delivery_scratch_dup(e->key.bytes, e->key.len, &scratch, &scratch_len);
        if (h->key == NULL)
            continue;
        if (e->value.kind == AMQP_FIELD_KIND_UTF8 || e->value.kind == AMQP_FIELD_KIND_BYTES) {
            h->type = IDEMD_HEADER_STRING;
            h->str = e->value.value.bytes.bytes;
            h->len = e->value.value.bytes.len;
            if (h->str == NULL)
                h->str = "";
        } else if (delivery_field_int(&e->value, &h->i) == 0) {
            h->type = IDEMD_HEADER_INT;
        } else {
            h->type = IDEMD_HEADER_OTHER;
        }
        n++;
    }
    return n;
}

bool delivery_header_str(const amqp_basic_properties_t *props, const char *name, const char **s,
                         size_t *len)
{
    const amqp_field_value_t *v = delivery_header_find(props, name);
    if (v == NULL || (v->kind != AMQP_FIELD_KIND_UTF8 && v->kind != AMQP_FIELD_KIND_BYTES))
        return false;
    *s = v->value.bytes.bytes ? v->value.bytes.bytes : "";
    *len = v->value.bytes.len;
    return true;
}

long long delivery_header_int(const amqp_basic_properties_t *props, const char *name)
{
    const amqp_field_value_t *v = delivery_header_find(props, name);
    int64_t i;
    if (v == NULL || delivery_field_int(v, &i) != 0)
        return -1;
    return i;
}

const char *delivery_id_printable(const char *id, size_t len, char *out, size_t outlen)
{
    return log_quote(id, len, out, outlen);
}

/* Whether v, at depth (the headers' own values are at 0), nests no deeper than the limit. */
static bool delivery_value_fits(const amqp_field_value_t *v, int depth)
{
    if (depth > DELIVERY_DEPTH_MAX)
        return false;
    if (v->kind == AMQP_FIELD_KIND_TABLE) {
        for (int i = 0; i < v->value.table.num_entries; i++)
            if (!delivery_value_fits(&v->value.table.entries[i].value, depth + 1))
                return false;
    } else if (v->kind == AMQP_FIELD_KIND_ARRAY) {
        for (int i = 0; i < v->value.array.num_entries; i++)
            if (!delivery_value_fits(&v->value.array.entries[i], depth + 1))
                return false;
    }
    return true;
}

int delivery_too_deep(const amqp_basic_properties_t *props)
{
    if (!(props->_flags & AMQP_BASIC_HEADERS_FLAG))
        return -1;
    for (int i = 0; i < props->headers.num_entries; i++)
        if (!delivery_value_fits(&props->headers.entries[i].value, 0))
            return i;
    return -1;
}
