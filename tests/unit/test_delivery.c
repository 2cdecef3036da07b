/* test_delivery.c: unit tests of dedup id extraction, header flattening and id printing. */
#include <stdio.h>
#include <string.h>

#include "delivery.h"
#include "tap.h"

static amqp_table_entry_t t_entries[8];

static void t_props(amqp_basic_properties_t *p, const char *msg_id)
{
    memset(p, 0, sizeof(*p));
    if (msg_id) {
        p->_flags |= AMQP_BASIC_MESSAGE_ID_FLAG;
        p->message_id = amqp_cstring_bytes(msg_id);
    }
}

static void t_header(amqp_basic_properties_t *p, const char *key, amqp_field_value_t v)
{
    int i = p->headers.num_entries++;
    p->_flags |= AMQP_BASIC_HEADERS_FLAG;
    t_entries[i].key = amqp_cstring_bytes(key);
    t_entries[i].value = v;
    p->headers.entries = t_entries;
}

/* Integer id headers: within 0..INT64_MAX, or refused (never changed). */
static void t_ids(void)
{
    amqp_basic_properties_t p;
    amqp_field_value_t v;
    char id[DELIVERY_ID_MAX + 1], err[256];
    size_t len = 0;
    amqp_table_entry_t saved[8];

    memcpy(saved, t_entries, sizeof(saved));
    t_props(&p, NULL);
    v.kind = AMQP_FIELD_KIND_I64;
    v.value.i64 = 9223372036854775807LL;
    t_header(&p, "x-id", v);
    ok(delivery_id(&p, "x-id", id, &len, err, sizeof(err)) == 0 &&
           strcmp(id, "9223372036854775807") == 0,
       "i64 id INT64_MAX is taken as is");
    t_entries[0].value.value.i64 = 0;
    ok(delivery_id(&p, "x-id", id, &len, err, sizeof(err)) == 0 && strcmp(id, "0") == 0,
       "i64 id 0 is taken");
    t_entries[0].value.value.i64 = -1; /* what RabbitMQ 4.x makes of u64 2^64-1 */
    ok(delivery_id(&p, "x-id", id, &len, err, sizeof(err)) == -1 &&
           strstr(err, "is -1, negative") && strstr(err, "within 0..9223372036854775807"),
       "i64 id -1 is refused, saying why");
    t_entries[0].value.kind = AMQP_FIELD_KIND_I8;
    t_entries[0].value.value.i8 = -7;
    ok(delivery_id(&p, "x-id", id, &len, err, sizeof(err)) == -1 && strstr(err, "negative"),
       "i8 id -7 is refused");
    t_entries[0].value.kind = AMQP_FIELD_KIND_U64;
    t_entries[0].value.value.u64 = 18446744073709551615ULL;
    ok(delivery_id(&p, "x-id", id, &len, err, sizeof(err)) == -1 &&
           strstr(err, "is 18446744073709551615, above 9223372036854775807") &&
           strstr(err, "as -1"),
       "u64 id 2^64-1 is refused, saying RabbitMQ 4.x would make it -1");
    t_entries[0].value.value.u64 = 9223372036854775808ULL;
    ok(delivery_id(&p, "x-id", id, &len, err, sizeof(err)) == -1 && strstr(err, "above"),
       "u64 id 2^63 is refused");
    t_entries[0].value.value.u64 = 9223372036854775807ULL;
    ok(delivery_id(&p, "x-id", id, &len, err, sizeof(err)) == 0 &&
           strcmp(id, "9223372036854775807") == 0,
       "u64 id 2^63-1 is taken");
    t_entries[0].value.kind = AMQP_FIELD_KIND_TIMESTAMP;
    t_entries[0].value.value.u64 = 18446744073709551615ULL;
    ok(delivery_id(&p, "x-id", id, &len, err, sizeof(err)) == -1 && strstr(err, "above"),
       "timestamp id above INT64_MAX is refused");
    t_entries[0].value.kind = AMQP_FIELD_KIND_U32;
    t_entries[0].value.value.u32 = 4000000000U;
    ok(delivery_id(&p, "x-id", id, &len, err, sizeof(err)) == 0 && strcmp(id, "4000000000") == 0,
       "u32 id is taken");
    memcpy(t_entries, saved, sizeof(saved));
}

/* A table value nested depth levels deep (innermost {"leaf": "bottom"}), from pool nodes. */
static amqp_field_value_t t_nested(amqp_table_entry_t *nodes, int depth)
{
    amqp_field_value_t v;
    nodes[0].key = amqp_cstring_bytes("leaf");
    nodes[0].value.kind = AMQP_FIELD_KIND_UTF8;
    nodes[0].value.value.bytes = amqp_cstring_bytes("bottom");
    amqp_table_t t = {1, &nodes[0]};
    for (int i = 1; i < depth; i++) {
        nodes[i].key = amqp_cstring_bytes("n");
        nodes[i].value.kind = AMQP_FIELD_KIND_TABLE;
        nodes[i].value.value.table = t;
        t.entries = &nodes[i];
    }
    v.kind = AMQP_FIELD_KIND_TABLE;
    v.value.table = t;
    return v;
}

/* Depth as rabbitmq-c 0.14+ counts it: 100 levels decode, 101 do not. */
static void t_depth(void)
{
    static amqp_table_entry_t nodes[10000];
    amqp_field_value_t arr_el[2];
    amqp_basic_properties_t p;
    amqp_field_value_t v;
    amqp_table_entry_t saved[8];

    memcpy(saved, t_entries, sizeof(saved));
    t_props(&p, "m");
    ok(delivery_too_deep(&p) == -1, "no headers: not too deep");
    v.kind = AMQP_FIELD_KIND_UTF8;
    v.value.bytes = amqp_cstring_bytes("x");
    t_header(&p, "plain", v);
    t_header(&p, "deep", t_nested(nodes, 99));
    ok(delivery_too_deep(&p) == -1, "a header nested 99 levels is fine");
    t_entries[1].value = t_nested(nodes, 100);
    ok(delivery_too_deep(&p) == -1, "a header nested 100 levels is fine");
    t_entries[1].value = t_nested(nodes, 101);
    ok(delivery_too_deep(&p) == 1, "a header nested 101 levels is too deep, and named");
    t_entries[1].value = t_nested(nodes, 10000);
    ok(delivery_too_deep(&p) == 1, "a header nested 10,000 levels is too deep");
    /* An array adds a level too: an array holding a 100-deep table is 101 deep. */
    arr_el[0] = t_nested(nodes, 100);
    t_entries[1].value.kind = AMQP_FIELD_KIND_ARRAY;
    t_entries[1].value.value.array.num_entries = 1;
    t_entries[1].value.value.array.entries = arr_el;
    ok(delivery_too_deep(&p) == 1, "an array around a 100-deep table is too deep");
    arr_el[0] = t_nested(nodes, 99);
    ok(delivery_too_deep(&p) == -1, "an array around a 99-deep table is fine");
    memcpy(t_entries, saved, sizeof(saved));
}

int main(void)
{
    amqp_basic_properties_t p;
    amqp_field_value_t v;
    char id[DELIVERY_ID_MAX + 1], err[256], big[400];
    size_t len = 0;

    t_props(&p, "order-1001");
    ok(delivery_id(&p, NULL, id, &len, err, sizeof(err)) == 0 && len == 10 &&
           strcmp(id, "order-1001") == 0,
       "message_id property is the id");

    t_props(&p, NULL);
    ok(delivery_id(&p, NULL, id, &len, err, sizeof(err)) == -1 &&
           strstr(err, "no message_id") != NULL,
       "missing message_id is refused with a reason");

    t_props(&p, "");
    ok(delivery_id(&p, NULL, id, &len, err, sizeof(err)) == -1 && strstr(err, "empty"),
       "empty id is refused");

    memset(big, 'a', sizeof(big));
    big[255] = '\0';
    t_props(&p, big);
    ok(delivery_id(&p, NULL, id, &len, err, sizeof(err)) == 0 && len == 255,
       "id of exactly 255 bytes is accepted");
    big[255] = 'a';
    big[256] = '\0';
    t_props(&p, big);
    ok(delivery_id(&p, NULL, id, &len, err, sizeof(err)) == -1 && strstr(err, "256 bytes"),
       "id of 256 bytes is refused, naming its length");

    t_props(&p, "ignored");
    v.kind = AMQP_FIELD_KIND_UTF8;
    v.value.bytes = amqp_cstring_bytes("hdr-7");
    t_header(&p, "x-msg-id", v);
    ok(delivery_id(&p, "x-msg-id", id, &len, err, sizeof(err)) == 0 && strcmp(id, "hdr-7") == 0,
       "id from a string header when id_header is set");
    ok(delivery_id(&p, "x-other", id, &len, err, sizeof(err)) == -1 &&
           strstr(err, "x-other") != NULL,
       "absent id header is refused, naming the header");

    t_props(&p, NULL);
    v.kind = AMQP_FIELD_KIND_I64;
    v.value.i64 = -42;
    t_header(&p, "n", v);
    ok(delivery_id(&p, "n", id, &len, err, sizeof(err)) == -1 && strstr(err, "negative") &&
           strstr(err, "within 0..9223372036854775807"),
       "negative integer id header is refused, saying why");
    ok(delivery_header_int(&p, "n") == -42, "delivery_header_int reads integers");
    t_ids();
    v.kind = AMQP_FIELD_KIND_F64;
    v.value.f64 = 1.5;
    t_header(&p, "f", v);
    ok(delivery_id(&p, "f", id, &len, err, sizeof(err)) == -1 && strstr(err, "type"),
       "float id header is refused with its type");
    ok(delivery_header_int(&p, "f") == -1, "delivery_header_int ignores non-integers");

    idemd_header_t hs[4];
    char scratch[64];
    size_t n = delivery_headers(&p, hs, 4, scratch, sizeof(scratch));
    ok(n == 2 && strcmp(hs[0].key, "n") == 0 && hs[0].type == IDEMD_HEADER_INT && hs[0].i == -42 &&
           hs[1].type == IDEMD_HEADER_OTHER,
       "headers are flattened with their types");
    n = delivery_headers(&p, hs, 1, scratch, sizeof(scratch));
    ok(n == 1, "header flattening respects the array size");

    char out[32];
    delivery_id_printable("a\x01\\b", 4, out, sizeof(out));
    ok(strcmp(out, "\"a\\x01\\\\b\"") == 0, "non-printable id bytes are escaped (quoted)");
    delivery_id_printable(big, 256, out, sizeof(out));
    ok(strlen(out) < sizeof(out) && strstr(out, "...") != NULL, "long ids are truncated with ...");

    t_depth();
    return done();
}
