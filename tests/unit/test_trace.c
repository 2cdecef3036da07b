/* test_trace.c: unit tests of W3C Trace Context and Baggage parsing (spec vectors, malformed ones
 * too) and of child spans.
 */
#include <stdio.h>
#include <string.h>

#include "tap.h"
#include "trace.h"

#define TP_OK "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

static bool tp_valid(const char *s)
{
    trace_parent_t p;
    return trace_parent_parse(s, strlen(s), &p) == 0;
}

static bool ts_valid(const char *s)
{
    return trace_state_valid(s, strlen(s));
}

static bool bg_valid(const char *s)
{
    return trace_baggage_valid(s, strlen(s));
}

static void t_traceparent(void)
{
    trace_parent_t p;
    ok(trace_parent_parse(TP_OK, strlen(TP_OK), &p) == 0 &&
           strcmp(p.trace_id, "0af7651916cd43dd8448eb211c80319c") == 0 &&
           strcmp(p.parent_id, "b7ad6b7169203331") == 0 && p.flags == 1,
       "the spec's example parses: trace-id, parent-id, sampled");
    ok(tp_valid("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"), "not sampled");
    ok(tp_valid("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-ff"),
       "unknown flag bits are accepted (and kept)");
    ok(tp_valid(" \t" TP_OK " "), "spaces and tabs around the value are ignored");
    ok(!tp_valid("00-00000000000000000000000000000000-b7ad6b7169203331-01"),
       "all-zero trace-id is invalid");
    ok(!tp_valid("00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01"),
       "all-zero parent-id is invalid");
    ok(!tp_valid("00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-01"),
       "uppercase hex is invalid");
    ok(!tp_valid("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-0X"),
       "non-hex flags are invalid");
    ok(!tp_valid("ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
       "version ff is invalid");
    ok(!tp_valid("0g-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
       "a non-hex version is invalid");
    ok(!tp_valid(TP_OK "-extra"), "version 00 longer than 55 characters is invalid");
    ok(!tp_valid("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-1"),
       "shorter than 55 is invalid");
    ok(!tp_valid("00_0af7651916cd43dd8448eb211c80319c_b7ad6b7169203331_01"),
       "wrong delimiters are invalid");
    ok(!tp_valid("00-0af7651916cd43dd8448eb211c80319c-b7ad6b716920333-01x"),
       "a short parent-id is invalid");
    ok(!tp_valid("00-0af7651916cd43dd8448eb211c8031-9cb7ad6b7169203331-01"),
       "a short trace-id is invalid");
    ok(!tp_valid(""), "empty is invalid");
    ok(trace_parent_parse(NULL, 0, &p) != 0, "NULL is absent");
    ok(tp_valid("cc-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
       "a future version with exactly 55 characters is read");
    ok(tp_valid("cc-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-what-the-future-holds"),
       "a future version may go on after a '-'");
    ok(!tp_valid("cc-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01.what"),
       "a future version must go on with '-'");
    ok(!tp_valid("cc-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-0"),
       "a future version shorter than 55 is invalid");
    char nul[] = TP_OK;
    nul[20] = '\0';
    ok(trace_parent_parse(nul, sizeof(nul) - 1, &p) != 0, "a NUL inside is invalid");
}

static void t_tracestate(void)
{
    char buf[TRACE_STATE_MAX + 64];
    ok(ts_valid("congo=t61rcWkgMzE"), "one member");
    ok(ts_valid("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"), "two members");
    ok(ts_valid(" rojo=1 ,\tcongo=2 "), "spaces and tabs around members");
    ok(ts_valid("rojo=1,,congo=2"), "an empty member is allowed");
    ok(ts_valid("fw529a3039@dt=1,0tenant@sys-1=2"),
       "multi-tenant keys (tenant may start with a digit)");
    ok(ts_valid("a=b c d"), "spaces inside a value");
    ok(ts_valid("k_-*/9=1"), "every key character");
    ok(!ts_valid("rojo=1,rojo=2"), "a repeated key drops the whole tracestate");
    ok(!ts_valid("Rojo=1"), "an uppercase key is invalid");
    ok(!ts_valid("1rojo=1"), "a simple key must start with a letter");
    ok(!ts_valid("rojo"), "a member without '=' is invalid");
    ok(!ts_valid("rojo="), "an empty value is invalid");
    ok(!ts_valid("=1"), "an empty key is invalid");
    ok(!ts_valid("rojo=a=b"), "'=' in a value is invalid");
    ok(!ts_valid("rojo=\x01"), "a control byte in a value is invalid");
    ok(!ts_valid("t@=1") && !ts_valid("@s=1") && !ts_valid("t@Sys=1") &&
           !ts_valid("t@abcdefghijklmno=1"),
       "bad tenant@system keys");
    ok(!ts_valid("a@b@c=1"), "two '@' are invalid");
    /* 32 members pass, 33 do not */
    size_t o = 0;
    for (int i = 0; i < 33; i++)
        o += (size_t)sprintf(buf + o, "%sk%d=v", i ? "," : "", i);
    ok(!ts_valid(buf), "33 members are too many");
    *strrchr(buf, ',') = '\0';
    ok(ts_valid(buf), "32 members are fine");
    /* key of 256 characters passes, 257 does not; value of 256 passes, 257 does not */
    memset(buf, 'a', 256);
    strcpy(buf + 256, "=1");
    ok(ts_valid(buf), "a key of 256 characters");
    memset(buf, 'a', 257);
    strcpy(buf + 257, "=1");
    ok(!ts_valid(buf), "a key of 257 characters is invalid");
    strcpy(buf, "k=");
    memset(buf + 2, 'v', 256);
    buf[258] = '\0';
    ok(ts_valid(buf), "a value of 256 characters");
    strcpy(buf + 258, "v");
    ok(!ts_valid(buf), "a value of 257 characters is invalid");
    ok(!trace_state_valid(NULL, 0), "NULL is absent");
}

static void t_baggage(void)
{
    static char buf[TRACE_BAGGAGE_MAX + 64];
    ok(bg_valid("key1=value1,key2=value2"), "two members");
    ok(bg_valid("key1 = value1, key2 = value2"), "spaces around '=' and ','");
    ok(bg_valid("key1=value1;property1;property2, key2 = value2, key3=value3; "
                "propertyKey=propertyValue"),
       "the spec's example with properties");
    ok(bg_valid("userId=alice%20smith"), "a percent-encoded value");
    ok(bg_valid("k="), "an empty value");
    ok(!bg_valid("key1"), "a member without '=' is invalid");
    ok(!bg_valid("=value"), "an empty key is invalid");
    ok(!bg_valid("key1=val ue"), "a space inside a value is invalid");
    ok(!bg_valid("key1=\"quoted\""), "a '\"' in a value is invalid");
    ok(!bg_valid("k=v,"), "an empty member is invalid");
    ok(!bg_valid("k(=v"), "a key that is not a token is invalid");
    ok(!bg_valid("k=v;=p"), "a property with an empty key is invalid");
    size_t o = 0;
    for (int i = 0; i < 181; i++)
        o += (size_t)sprintf(buf + o, "%sk%d=v", i ? "," : "", i);
    ok(!bg_valid(buf), "181 members are too many");
    *strrchr(buf, ',') = '\0';
    ok(bg_valid(buf), "180 members are fine");
    strcpy(buf, "k=");
    memset(buf + 2, 'v', TRACE_BAGGAGE_MAX - 2);
    buf[TRACE_BAGGAGE_MAX] = '\0';
    ok(bg_valid(buf), "8192 bytes are fine");
    strcpy(buf + TRACE_BAGGAGE_MAX, "v");
    ok(!bg_valid(buf), "8193 bytes are too many");
    ok(!trace_baggage_valid(NULL, 0), "NULL is absent");
}

static void t_ctx(void)
{
    trace_ctx_t c;
    char child[TRACE_PARENT_LEN + 1];
    const char *ts = "rojo=1,congo=2", *bg = "k=v";

    trace_ctx_read(&c, TP_OK, strlen(TP_OK), ts, strlen(ts), bg, strlen(bg), 0x1234);
    ok(c.has && strcmp(c.trace_id, "0af7651916cd43dd8448eb211c80319c") == 0 &&
           strcmp(c.parent_id, "b7ad6b7169203331") == 0 &&
           strcmp(c.span_id, "0000000000001234") == 0 && strcmp(c.traceparent, TP_OK) == 0,
       "a context: trace, incoming parent, our processing span");
    ok(c.state == ts && c.state_len == strlen(ts) && c.baggage == bg && c.baggage_len == 3,
       "tracestate and baggage point into the headers");
    ok(trace_child(&c, 0xabcdef, child) &&
           strcmp(child, "00-0af7651916cd43dd8448eb211c80319c-0000000000abcdef-01") == 0,
       "a child: same trace, new span id, flags kept");

    trace_ctx_read(&c, "00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-01", 55, ts,
                   strlen(ts), bg, strlen(bg), 1);
    ok(!c.has && c.trace_id[0] == '\0' && c.span_id[0] == '\0' && c.state == NULL &&
           c.baggage == bg,
       "a malformed traceparent: no context, no tracestate; baggage stands alone");
    ok(!trace_child(&c, 1, child) && child[0] == '\0', "no child without a context");

    trace_ctx_read(&c, TP_OK, strlen(TP_OK), "rojo=1,rojo=2", 13, "bad", 3, 1);
    ok(c.has && c.state == NULL && c.baggage == NULL,
       "an invalid tracestate and baggage are dropped, the traceparent stays");

    trace_ctx_read(&c, "cc-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-more", 60, NULL, 0,
                   NULL, 0, 1);
    ok(c.has && strcmp(c.traceparent, TP_OK) == 0, "a future version is kept in version 00 form");

    trace_ctx_read(&c, TP_OK, strlen(TP_OK), NULL, 0, NULL, 0, 0);
    ok(strcmp(c.span_id, "0000000000000001") == 0, "a span id is never all zeros");
}

static void t_rng(void)
{
    trace_rng_t a = {42}, b = {42}, c = {43};
    uint64_t x = trace_rng_next(&a), y = trace_rng_next(&b), z = trace_rng_next(&c);
    ok(x == y && x != z && trace_rng_next(&a) != x, "the generator: seeded, and moves on");
}

int main(void)
{
    t_traceparent();
    t_tracestate();
    t_baggage();
    t_ctx();
    t_rng();
    return done();
}
