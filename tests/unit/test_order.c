/* test_order.c: unit tests of an ordered queue's key (order_key_of): headers, JSON fields, and
 * every way a message can be without its key.
 */
#include <stdio.h>
#include <string.h>

#include "log.h"
#include "order.h"
#include "tap.h"

/* db.c's calls in order.c, never reached here. */
char *db_hex_literal(char *s, const void *b, size_t len)
{
    (void)b;
    (void)len;
    return s;
}

db_status_t db_commit(db_t *db)
{
    (void)db;
    return DB_OK;
}

static char key[ORDER_KEY_MAX + 1], why[512];
static size_t len;

/* The key of a message with body and at most one header name = value (string, or int when
 * is_int). 0 or -1 as order_key_of. */
static int key_of(const char *spec, const char *body, const char *hname, const char *hval,
                  long long ival, int is_int)
{
    amqp_basic_properties_t p;
    amqp_table_entry_t e;
    memset(&p, 0, sizeof(p));
    if (hname) {
        e.key = amqp_cstring_bytes(hname);
        if (is_int) {
            e.value.kind = AMQP_FIELD_KIND_I64;
            e.value.value.i64 = ival;
        } else {
            e.value.kind = AMQP_FIELD_KIND_UTF8;
            e.value.value.bytes = amqp_cstring_bytes(hval);
        }
        p._flags = AMQP_BASIC_HEADERS_FLAG;
        p.headers.num_entries = 1;
        p.headers.entries = &e;
    }
    why[0] = '\0';
    memset(key, 0, sizeof(key));
    return order_key_of(spec, &p, amqp_cstring_bytes(body), key, &len, why, sizeof(why));
}

static int has(const char *want)
{
    return len == strlen(want) && memcmp(key, want, len) == 0;
}

int main(void)
{
    log_set_level(LOG_LEVEL_ERROR);
    ok(key_of("header:k", "", "k", "A-1", 0, 0) == 0 && has("A-1"), "header: a string");
    ok(key_of("header:k", "", "k", NULL, 42, 1) == 0 && has("42"), "header: an integer");
    ok(key_of("header:k", "", "other", "x", 0, 0) == -1 && strstr(why, "bad input") &&
           strstr(why, "order_key header:k"),
       "header: missing, bad input with the setting named (%s)", why);
    ok(key_of("header:k", "", "k", "", 0, 0) == -1 && strstr(why, "empty"),
       "header: empty is no key (%s)", why);
    ok(key_of("json:order.id", "{\"order\":{\"id\":\"B7\"},\"n\":1}", NULL, NULL, 0, 0) == 0 &&
           has("B7"),
       "json: a nested string");
    ok(key_of("json:id", "{\"id\":7}", NULL, NULL, 0, 0) == 0 && has("7"), "json: a number");
    ok(key_of("json:id", "{\"id\":true}", NULL, NULL, 0, 0) == 0 && has("true"), "json: a boolean");
    ok(key_of("json:id", "{\"id\":\"x\"}\n", NULL, NULL, 0, 0) == 0 && has("x"),
       "json: a trailing newline is fine");
    ok(key_of("json:id", "{\"id\":\"x\"} junk", NULL, NULL, 0, 0) == -1 &&
           strstr(why, "text after the value"),
       "json: text after the value (%s)", why);
    ok(key_of("json:id", "not json", NULL, NULL, 0, 0) == -1 && strstr(why, "body is not JSON"),
       "json: not JSON (%s)", why);
    ok(key_of("json:id", "", NULL, NULL, 0, 0) == -1 && strstr(why, "empty"),
       "json: an empty body (%s)", why);
    ok(key_of("json:order.id", "{\"order\":{}}", NULL, NULL, 0, 0) == -1 &&
           strstr(why, "no field order.id"),
       "json: field missing (%s)", why);
    ok(key_of("json:order.id", "{\"order\":5}", NULL, NULL, 0, 0) == -1 &&
           strstr(why, "no field order.id"),
       "json: a path through a number (%s)", why);
    ok(key_of("json:id", "{\"id\":null}", NULL, NULL, 0, 0) == -1 && strstr(why, "not a string"),
       "json: null is no key (%s)", why);
    ok(key_of("json:id", "{\"id\":[1]}", NULL, NULL, 0, 0) == -1 && strstr(why, "not a string"),
       "json: an array is no key (%s)", why);
    ok(key_of("json:id", "[1,2]", NULL, NULL, 0, 0) == -1 && strstr(why, "no field id"),
       "json: the body is not an object (%s)", why);
    char big[400];
    snprintf(big, sizeof(big), "{\"id\":\"%0300d\"}", 0);
    ok(key_of("json:id", big, NULL, NULL, 0, 0) == -1 && strstr(why, "300 bytes"),
       "json: a key over 255 bytes (%s)", why);
    /* The body is read by json_body.c, as the SQL handler reads it (I-JSON). */
    ok(key_of("json:a", "{\"a\":\"good\",\"a\\u0000x\":\"evil\"}", NULL, NULL, 0, 0) == -1 &&
           strstr(why, "body is not I-JSON: a member name holds U+0000"),
       "json: a member name with U+0000 rejects the body (%s)", why);
    ok(key_of("json:a.b", "{\"a\":{\"b\":\"old\"},\"a\":{\"b\":\"new\"}}", NULL, NULL, 0, 0) ==
               -1 &&
           strstr(why, "duplicate member \"a\" at $"),
       "json: a duplicate parent rejects the body (%s)", why);
    ok(key_of("json:id", "{\"id\":\"k\\u0000\"}", NULL, NULL, 0, 0) == -1 && strstr(why, "U+0000"),
       "json: a key holding U+0000 is refused (%s)", why);
    ok(key_of("json:id", "{\"id\":\"\xc0\xaf\"}", NULL, NULL, 0, 0) == -1 &&
           strstr(why, "invalid UTF-8"),
       "json: invalid UTF-8 rejects the body (%s)", why);
    ok(key_of("json:id", "{\"id\":\"k\\u00e9\"}", NULL, NULL, 0, 0) == 0 && has("k\xc3\xa9"),
       "json: an escaped key is decoded");
    ok(key_of("json:id", "{\"id\":1.50}", NULL, NULL, 0, 0) == 0 && has("1.50"),
       "json: a number is its text as written");
    return done();
}
