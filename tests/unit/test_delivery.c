/* test_delivery.c: unit tests of dedup id extraction, header flattening and id printing. */
#include <stdio.h>
#include <string.h>

#include "delivery.h"

static int t_n, t_failed;

static void t_check(int ok, const char *what)
{
    t_n++;
    if (!ok)
        t_failed++;
    printf("%sok %d - %s\n", ok ? "" : "not ", t_n, what);
}

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

int main(void)
{
    amqp_basic_properties_t p;
    amqp_field_value_t v;
    char id[DELIVERY_ID_MAX + 1], err[256], big[400];
    size_t len = 0;

    t_props(&p, "order-1001");
    t_check(delivery_id(&p, NULL, id, &len, err, sizeof(err)) == 0 && len == 10 &&
                strcmp(id, "order-1001") == 0,
            "message_id property is the id");

    t_props(&p, NULL);
    t_check(delivery_id(&p, NULL, id, &len, err, sizeof(err)) == -1 &&
                strstr(err, "no message_id") != NULL,
            "missing message_id is refused with a reason");

    t_props(&p, "");
    t_check(delivery_id(&p, NULL, id, &len, err, sizeof(err)) == -1 && strstr(err, "empty"),
            "empty id is refused");

    memset(big, 'a', sizeof(big));
    big[255] = '\0';
    t_props(&p, big);
    t_check(delivery_id(&p, NULL, id, &len, err, sizeof(err)) == 0 && len == 255,
            "id of exactly 255 bytes is accepted");
    big[255] = 'a';
    big[256] = '\0';
    t_props(&p, big);
    t_check(delivery_id(&p, NULL, id, &len, err, sizeof(err)) == -1 && strstr(err, "256 bytes"),
            "id of 256 bytes is refused, naming its length");

    t_props(&p, "ignored");
    v.kind = AMQP_FIELD_KIND_UTF8;
    v.value.bytes = amqp_cstring_bytes("hdr-7");
    t_header(&p, "x-msg-id", v);
    t_check(delivery_id(&p, "x-msg-id", id, &len, err, sizeof(err)) == 0 &&
                strcmp(id, "hdr-7") == 0,
            "id from a string header when id_header is set");
    t_check(delivery_id(&p, "x-other", id, &len, err, sizeof(err)) == -1 &&
                strstr(err, "x-other") != NULL,
            "absent id header is refused, naming the header");

    t_props(&p, NULL);
    v.kind = AMQP_FIELD_KIND_I64;
    v.value.i64 = -42;
    t_header(&p, "n", v);
    t_check(delivery_id(&p, "n", id, &len, err, sizeof(err)) == 0 && strcmp(id, "-42") == 0,
            "integer id header is formatted in decimal");
    t_check(delivery_header_int(&p, "n") == -42, "delivery_header_int reads integers");
    v.kind = AMQP_FIELD_KIND_F64;
    v.value.f64 = 1.5;
    t_header(&p, "f", v);
    t_check(delivery_id(&p, "f", id, &len, err, sizeof(err)) == -1 && strstr(err, "type"),
            "float id header is refused with its type");
    t_check(delivery_header_int(&p, "f") == -1, "delivery_header_int ignores non-integers");

    idemd_header_t hs[4];
    char scratch[64];
    size_t n = delivery_headers(&p, hs, 4, scratch, sizeof(scratch));
    t_check(n == 2 && strcmp(hs[0].key, "n") == 0 && hs[0].type == IDEMD_HEADER_INT &&
                hs[0].i == -42 && hs[1].type == IDEMD_HEADER_OTHER,
            "headers are flattened with their types");
    n = delivery_headers(&p, hs, 1, scratch, sizeof(scratch));
    t_check(n == 1, "header flattening respects the array size");

    char out[32];
    delivery_id_printable("a\x01\\b", 4, out, sizeof(out));
    t_check(strcmp(out, "\"a\\x01\\\\b\"") == 0, "non-printable id bytes are escaped (quoted)");
    delivery_id_printable(big, 256, out, sizeof(out));
    t_check(strlen(out) < sizeof(out) && strstr(out, "...") != NULL,
            "long ids are truncated with ...");

    return t_failed ? 1 : 0;
}
