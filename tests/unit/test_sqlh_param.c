/* test_sqlh_param.c: unit tests of the SQL handler's parameter sources: parsing them, and the
 * exact value each gives for a message (integers, decimals as written, strings, absent fields).
 */
#include <stdio.h>
#include <string.h>

#include "sqlh_param.h"
#include "tap.h"

static char err[512];
static sqlh_src_t src; /* the last source: a value may point into it (const:) */

/* The value of source text for a message with body (and header X-Id = "abc", X-N = 7). 0 or -1
 * as sqlh_value; *v and buf as it leaves them. */
static int value_of(const char *text, const char *body, sqlh_val_t *v, sqlh_buf_t *buf)
{
    static idemd_header_t h[2] = {{"X-Id", IDEMD_HEADER_STRING, "abc", 3, 0},
                                  {"X-N", IDEMD_HEADER_INT, NULL, 0, 7}};
    idemd_message_t m;
    memset(&m, 0, sizeof(m));
    m.msg_id = "m-1";
    m.msg_id_len = 3;
    m.body = body;
    m.body_len = strlen(body);
    m.exchange = "";
    m.routing_key = "rk";
    m.content_type = "";
    m.headers = h;
    m.n_headers = 2;
    m.timestamp = 1700000000;
    m.has_timestamp = 1;
    err[0] = '\0';
    sqlh_src_free(&src);
    if (sqlh_src_parse(text, &src, err, sizeof(err)) != 0)
        return -2;
    return sqlh_value(&src, &m, buf, v, err, sizeof(err));
}

static bool is_text(const sqlh_val_t *v, sqlh_val_kind_t kind, const char *want)
{
    return v->kind == kind && v->len == strlen(want) && memcmp(v->s, want, v->len) == 0;
}

int main(void)
{
    sqlh_val_t v;
    sqlh_buf_t buf = {0};
    sqlh_src_t s;
    sqlh_expect_t e;

    /* Parsing the sources. */
    ok(sqlh_src_parse("json:a.b[2].c", &s, err, sizeof(err)) == 0 && s.kind == SQLH_SRC_JSON &&
           s.n_segs == 4 && s.segs[2].bracket && s.segs[2].index == 2 && !s.optional,
       "json:a.b[2].c has four steps, the third an index");
    sqlh_src_free(&s);
    ok(sqlh_src_parse("json:note?", &s, err, sizeof(err)) == 0 && s.optional &&
           strcmp(s.arg, "note") == 0,
       "a final ? makes a source optional");
    sqlh_src_free(&s);
    ok(sqlh_src_parse("const:a?b?", &s, err, sizeof(err)) == 0 && !s.optional &&
           strcmp(s.arg, "a?b?") == 0,
       "const: keeps its text as written, ? included");
    sqlh_src_free(&s);
    ok(sqlh_src_parse("msg:time", &s, err, sizeof(err)) == -1 && strstr(err, "msg:time"),
       "an unknown msg: field is refused, named: %s", err);
    ok(sqlh_src_parse("jsn:a", &s, err, sizeof(err)) == -1 && strstr(err, "unknown source"),
       "an unknown source kind is refused: %s", err);
    ok(sqlh_src_parse("json:a..b", &s, err, sizeof(err)) == -1, "json:a..b is refused");
    ok(sqlh_src_parse("json:a[x]", &s, err, sizeof(err)) == -1, "json:a[x] is refused");
    ok(sqlh_src_parse("json:", &s, err, sizeof(err)) == -1, "json: without a path is refused");
    ok(sqlh_src_parse("json:$.price", &s, err, sizeof(err)) == -1 && strstr(err, "a JSONPath") &&
           strstr(err, "write json:price"),
       "json:$.price (JSONPath) is refused with the right spelling: %s", err);
    ok(sqlh_src_parse("json:$[0].sku", &s, err, sizeof(err)) == -1 &&
           strstr(err, "write json:[0].sku"),
       "json:$[0].sku is refused with the right spelling: %s", err);
    ok(sqlh_src_parse("header:", &s, err, sizeof(err)) == -1, "header: without a name is refused");

    /* Exact values from JSON. */
    ok(value_of("json:id", "{\"id\": 9007199254740993}", &v, &buf) == 0 && v.kind == SQLH_VAL_INT &&
           v.i == 9007199254740993LL,
       "2^53+1 binds as that 64-bit integer");
    ok(value_of("json:id", "{\"id\": 9223372036854775807}", &v, &buf) == 0 &&
           v.kind == SQLH_VAL_INT && v.i == 9223372036854775807LL,
       "a 19-digit INT64_MAX binds as an integer");
    ok(value_of("json:id", "{\"id\": -9223372036854775808}", &v, &buf) == 0 &&
           v.kind == SQLH_VAL_INT && v.i == (-9223372036854775807LL - 1),
       "INT64_MIN binds as an integer");
    ok(value_of("json:id", "{\"id\": 9223372036854775808}", &v, &buf) == 0 &&
           is_text(&v, SQLH_VAL_DECIMAL, "9223372036854775808"),
       "an integer past 64 bits binds as its digits (DECIMAL)");
    ok(value_of("json:amount", "{\"amount\": 0.10}", &v, &buf) == 0 &&
           is_text(&v, SQLH_VAL_DECIMAL, "0.10"),
       "0.10 binds as the text 0.10, never a double");
    ok(value_of("json:amount", "{\"amount\":-1.5E+3 }", &v, &buf) == 0 &&
           is_text(&v, SQLH_VAL_DECIMAL, "-1.5E+3"),
       "an exponent binds as its source text");
    ok(value_of("json:s", "{\"s\": \"a\\\"b\\\\c\\n\\u00e9\\ud83d\\ude00\"}", &v, &buf) == 0 &&
           is_text(&v, SQLH_VAL_TEXT, "a\"b\\c\n\xc3\xa9\xf0\x9f\x98\x80"),
       "string escapes are decoded (\\u00e9 and a surrogate pair to UTF-8)");
    ok(value_of("json:t", "{\"t\": true}", &v, &buf) == 0 && v.kind == SQLH_VAL_INT && v.i == 1,
       "true binds as 1");
    ok(value_of("json:t", "{\"t\": false}", &v, &buf) == 0 && v.kind == SQLH_VAL_INT && v.i == 0,
       "false binds as 0");
    ok(value_of("json:t", "{\"t\": null}", &v, &buf) == 0 && v.kind == SQLH_VAL_NULL,
       "null binds as NULL");
    ok(value_of("json:o", "{\"o\": {\"x\": [1, 2.50]} }", &v, &buf) == 0 &&
           is_text(&v, SQLH_VAL_TEXT, "{\"x\": [1, 2.50]}"),
       "an object binds as its JSON text");
    ok(value_of("json:items[1].sku", "{\"items\": [{\"sku\": \"a\"}, {\"sku\": \"b\"}]}", &v,
                &buf) == 0 &&
           is_text(&v, SQLH_VAL_TEXT, "b"),
       "items[1].sku reaches into an array");
    ok(value_of("json:items.1.sku", "{\"items\": [{\"sku\": \"a\"}, {\"sku\": \"b\"}]}", &v,
                &buf) == 0 &&
           is_text(&v, SQLH_VAL_TEXT, "b"),
       "items.1.sku (order_key's dot syntax) does too");
    ok(value_of("json:a\\u0062", "{\"a\\u0062\": 1}", &v, &buf) == -1,
       "a path is matched against decoded names (json:a\\u0062 is not the key ab)");
    ok(value_of("json:ab", "{\"a\\u0062\": 5}", &v, &buf) == 0 && v.kind == SQLH_VAL_INT &&
           v.i == 5,
       "an escaped key matches its decoded name");
    ok(value_of("json:a", "{\"a\": 1, \"a\": 2}", &v, &buf) == -1 &&
           strstr(err, "body is not I-JSON: duplicate member \"a\" at $"),
       "a repeated key rejects the body (I-JSON): %s", err);
    ok(value_of("json:a", "{\"a\": \"x\\u0000y\"}", &v, &buf) == -1 && strstr(err, "json:a") &&
           strstr(err, "U+0000"),
       "a string parameter holding U+0000 is refused: %s", err);
    ok(value_of("json:a", "{\"a\": \"ok\", \"b\": \"\\u0000\"}", &v, &buf) == 0 &&
           is_text(&v, SQLH_VAL_TEXT, "ok"),
       "U+0000 in a string not taken is fine");

    /* Absent, optional, bad JSON. */
    ok(value_of("json:account", "{\"amount\": 1}", &v, &buf) == -1 && strstr(err, "json:account") &&
           strstr(err, "missing"),
       "a missing required field names its path: %s", err);
    ok(value_of("json:note?", "{\"amount\": 1}", &v, &buf) == 0 && v.kind == SQLH_VAL_NULL,
       "a missing optional field is NULL");
    ok(value_of("json:a.b", "{\"a\": 5}", &v, &buf) == -1, "a path through a number is absent");
    ok(value_of("json:a", "{\"a\": 1} x", &v, &buf) == -1 && strstr(err, "not JSON"),
       "text after the value: not JSON (%s)", err);
    ok(value_of("json:a", "{\"a\": 01}", &v, &buf) == -1, "a leading zero is not JSON");
    ok(value_of("json:a", "{\"a\": 1.}", &v, &buf) == -1, "1. is not JSON");
    ok(value_of("json:a", "{'a': 1}", &v, &buf) == -1, "single quotes are not JSON");
    ok(value_of("json:a", "{\"a\": \"\\ud800\"}", &v, &buf) == -1, "a lone surrogate is refused");
    ok(value_of("json:a", "", &v, &buf) == -1 && strstr(err, "empty"), "an empty body: %s", err);
    char deep[400];
    memset(deep, '[', 200);
    memset(deep + 200, ']', 199);
    deep[399] = '\0';
    ok(value_of("json:a", deep, &v, &buf) == -1 && strstr(err, "deep"), "nesting past %d: %s",
       SQLH_JSON_DEPTH_MAX, err);

    /* The other sources. */
    ok(value_of("msg:id", "x", &v, &buf) == 0 && is_text(&v, SQLH_VAL_TEXT, "m-1"), "msg:id");
    ok(value_of("msg:routing_key", "x", &v, &buf) == 0 && is_text(&v, SQLH_VAL_TEXT, "rk"),
       "msg:routing_key");
    ok(value_of("msg:exchange", "x", &v, &buf) == 0 && is_text(&v, SQLH_VAL_TEXT, ""),
       "msg:exchange is \"\" for the default exchange");
    ok(value_of("msg:timestamp", "x", &v, &buf) == 0 && v.kind == SQLH_VAL_INT && v.i == 1700000000,
       "msg:timestamp is an integer");
    ok(value_of("msg:content_type", "x", &v, &buf) == -1 && strstr(err, "content_type"),
       "a message without content_type: %s", err);
    ok(value_of("msg:content_type?", "x", &v, &buf) == 0 && v.kind == SQLH_VAL_NULL,
       "msg:content_type? is NULL then");
    ok(value_of("body", "{\"raw\": 1}", &v, &buf) == 0 &&
           is_text(&v, SQLH_VAL_BLOB, "{\"raw\": 1}"),
       "body binds the raw bytes");
    ok(value_of("header:X-Id", "x", &v, &buf) == 0 && is_text(&v, SQLH_VAL_TEXT, "abc"),
       "a string header");
    ok(value_of("header:X-N", "x", &v, &buf) == 0 && v.kind == SQLH_VAL_INT && v.i == 7,
       "an integer header");
    ok(value_of("header:X-None", "x", &v, &buf) == -1 && strstr(err, "header:X-None"),
       "a missing header: %s", err);
    ok(value_of("const:EUR", "x", &v, &buf) == 0 && is_text(&v, SQLH_VAL_TEXT, "EUR"), "const:");

    /* Affected-row rules. */
    ok(sqlh_expect_parse("1", &e, err, sizeof(err)) == 0 && e.lo == 1 && e.hi == 1, "\"1\"");
    ok(sqlh_expect_parse("0..2", &e, err, sizeof(err)) == 0 && e.lo == 0 && e.hi == 2, "\"0..2\"");
    ok(sqlh_expect_parse(">=3", &e, err, sizeof(err)) == 0 && e.lo == 3 && e.hi == ~0ULL,
       "\">=3\"");
    ok(sqlh_expect_parse("2..1", &e, err, sizeof(err)) == -1, "\"2..1\" is refused");
    ok(sqlh_expect_parse("one", &e, err, sizeof(err)) == -1 && strstr(err, "affected-row"),
       "\"one\" is refused: %s", err);
    ok(sqlh_expect_parse("", &e, err, sizeof(err)) == -1, "\"\" is refused");
    sqlh_buf_free(&buf);
    sqlh_src_free(&src);
    /* Integer digits of a number's text, for the DECIMAL(65) limit. */
    {
        const struct {
            const char *n;
            long d;
        } dg[] = {{"0", 0},
                  {"-0.0", 0},
                  {"0.005", 0},
                  {"19.99", 2},
                  {"-120", 3},
                  {"1e90", 91},
                  {"1E+2", 3},
                  {"1.5e-1", 0},
                  {"12.5e3", 5},
                  {"0.005e5", 3},
                  {"00012", 2},
                  {"1e-90", 0},
                  {"1e99999999999", 100001},
                  {"99999999999999999999999999999999999999999999999999999999999999999", 65},
                  {NULL, 0}};
        for (int i = 0; dg[i].n; i++) {
            long got = sqlh_decimal_int_digits(dg[i].n, strlen(dg[i].n));
            /* An exponent too long to read counts as huge: any count past 100000. */
            ok(got == dg[i].d || (dg[i].d > 100000 && got > 100000),
               "integer digits of %s: %ld (want %ld)", dg[i].n, got, dg[i].d);
        }
    }
    return done();
}
