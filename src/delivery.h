/* delivery.h: turning an AMQP delivery into what the worker and the handler need (id, headers). */
#ifndef IDEMD_DELIVERY_H
#define IDEMD_DELIVERY_H

#include "amqp_compat.h"
#include <stdbool.h>
#include <stddef.h>

#include "../include/idemd/handler.h"

/* Longest id the record table's msg_id column holds (VARBINARY(255)). */
#define DELIVERY_ID_MAX 255
/*
 * How deep header values may nest tables and arrays (a header's own value is
 * at depth 0): rabbitmq-c 0.14+ refuses to decode a delivery with a value
 * deeper than this (TABLE_DEPTH_LIMIT in its amqp_table.c); 0.11 decodes it.
 */
#define DELIVERY_DEPTH_MAX 100

/*
 * Extract the dedup id of a message: the message_id property when id_header
 * is NULL, else that application header (string, or integer as decimal).
 * An integer id must be within 0..INT64_MAX: RabbitMQ 4.x delivers an
 * unsigned one above INT64_MAX as a negative one, so both are refused
 * rather than changed. On success returns 0, copies the id into out
 * (DELIVERY_ID_MAX + 1 bytes, NUL-terminated; the id itself may contain any
 * bytes) and sets *len. On failure returns -1 and writes the reason ("no
 * message_id property", "id is 300 bytes, longer than 255", ...) into err.
 */
int delivery_id(const amqp_basic_properties_t *props, const char *id_header, char *out, size_t *len,
                char *err, size_t errlen) __attribute__((warn_unused_result));

/*
 * The index of the first application header of props that nests deeper than
 * DELIVERY_DEPTH_MAX, or -1 when none does. Recurses at most
 * DELIVERY_DEPTH_MAX + 1 levels, however deep the headers go.
 */
int delivery_too_deep(const amqp_basic_properties_t *props);

/*
 * Flatten the application headers into an array for the handler. Returns
 * the number of entries written (at most max). Keys and string values point
 * into props (NUL-terminated copies go into scratch, scratch_len bytes; an
 * entry that does not fit is skipped). Never fails.
 */
size_t delivery_headers(const amqp_basic_properties_t *props, idemd_header_t *out, size_t max,
                        char *scratch, size_t scratch_len);

/*
 * A string header's bytes (longstr or bytes): true and *s, *len pointing
 * into props (not NUL-terminated); false when absent or of another type.
 */
bool delivery_header_str(const amqp_basic_properties_t *props, const char *name, const char **s,
                         size_t *len);

/* An integer header's value; -1 when absent or not an integer. */
long long delivery_header_int(const amqp_basic_properties_t *props, const char *name);

/*
 * An id as one logfmt value for a log line (log_quote()): bare when it is
 * plain printable ASCII, else quoted with '"', '\\' and control bytes
 * escaped, so that an id like 'a outcome=ok' cannot forge a field; cut
 * with "..." to fit out (outlen bytes). Returns out.
 */
const char *delivery_id_printable(const char *id, size_t len, char *out, size_t outlen);

#endif
