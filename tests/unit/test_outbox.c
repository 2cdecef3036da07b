/* test_outbox.c: unit tests of the outbox's pure parts: onward message ids and the header encoding.
 */
#include <stdio.h>
#include <string.h>

#include "outbox.h"
#include "tap.h"

int main(void)
{
    char a[OUTBOX_ID_MAX + 1], b[OUTBOX_ID_MAX + 1], big[300];
    size_t la, lb;

    la = outbox_msg_id("orders", "pay-1", 5, 0, a, sizeof(a));
    ok(la == strlen("orders:pay-1:0") && strcmp(a, "orders:pay-1:0") == 0,
       "a printable source id gives a readable onward id");
    lb = outbox_msg_id("orders", "pay-1", 5, 0, b, sizeof(b));
    ok(la == lb && memcmp(a, b, la) == 0, "the same source and index give the same id");
    outbox_msg_id("orders", "pay-1", 5, 1, b, sizeof(b));
    ok(strcmp(a, b) != 0, "another index gives another id");
    outbox_msg_id("orders", "pay 1", 5, 0, a, sizeof(a));
    ok(strncmp(a, "idemd-ob-", 9) == 0, "an id with a space is hashed");
    outbox_msg_id("ab", "c\x01", 2, 0, a, sizeof(a));
    outbox_msg_id("a", "bc\x01", 3, 0, b, sizeof(b));
    ok(strcmp(a, b) != 0, "consumer and source id are kept apart in the hash");
    outbox_msg_id("svc", "a:1", 3, 0, a, sizeof(a));
    outbox_msg_id("svc:a", "1", 1, 0, b, sizeof(b));
    ok(strcmp(a, b) != 0, "consumer 'svc' + source 'a:1' and 'svc:a' + '1' differ");
    ok(strcmp(a, "svc:a:1:0") == 0 && strcmp(b, "svc%3Aa:1:0") == 0,
       "a ':' in the consumer is escaped, one in the source id is not");
    outbox_msg_id("svc%3Aa", "1", 1, 0, a, sizeof(a));
    ok(strcmp(a, "svc%253Aa:1:0") == 0 && strcmp(a, b) != 0,
       "a '%%' in the consumer is escaped too, so an escaped-looking name stays apart");
    outbox_msg_id("a", "b:1", 3, 2, a, sizeof(a));
    outbox_msg_id("a:b", "1", 1, 2, b, sizeof(b));
    ok(strcmp(a, b) != 0, "the same holds for every index");
    memset(big, ':', 120);
    big[120] = '\0';
    la = outbox_msg_id(big, "s", 1, 0, a, sizeof(a));
    ok(la <= OUTBOX_ID_MAX && strncmp(a, "idemd-ob-", 9) == 0,
       "a consumer too long once escaped is hashed");
    memset(big, 'x', sizeof(big));
    la = outbox_msg_id("orders", big, 255, 7, a, sizeof(a));
    ok(la <= OUTBOX_ID_MAX && strncmp(a, "idemd-ob-", 9) == 0,
       "a long source id is hashed to fit 255 bytes");

    idemd_header_t h[3] = {
        {.key = "trace", .type = IDEMD_HEADER_STRING, .str = "a\0b", .len = 3},
        {.key = "n", .type = IDEMD_HEADER_INT, .i = -42},
        {.key = "empty", .type = IDEMD_HEADER_STRING, .str = "", .len = 0},
    };
    unsigned char buf[256];
    size_t len = 0;
    amqp_table_entry_t e[4];
    ok(outbox_encode_headers(h, 3, buf, sizeof(buf), &len) == 0 && len > 0,
       "string and integer headers encode");
    int n = outbox_decode_headers(buf, len, e, 4);
    ok(n == 3 && e[0].key.len == 5 && memcmp(e[0].key.bytes, "trace", 5) == 0 &&
           e[0].value.kind == AMQP_FIELD_KIND_UTF8 && e[0].value.value.bytes.len == 3 &&
           memcmp(e[0].value.value.bytes.bytes, "a\0b", 3) == 0 &&
           e[1].value.kind == AMQP_FIELD_KIND_I64 && e[1].value.value.i64 == -42 &&
           e[2].value.value.bytes.len == 0,
       "they decode to the same entries (binary-safe values, negative integers)");
    ok(outbox_decode_headers(buf, len - 1, e, 4) == -1, "a truncated encoding is refused");
    ok(outbox_decode_headers(buf, len, e, 2) == -1, "more entries than room is refused");
    idemd_header_t other = {.key = "f", .type = IDEMD_HEADER_OTHER};
    ok(outbox_encode_headers(&other, 1, buf, sizeof(buf), &len) == -1,
       "a header of another type is refused");
    ok(outbox_encode_headers(h, 3, buf, 8, &len) == -1, "too little room is refused");

    return done();
}
