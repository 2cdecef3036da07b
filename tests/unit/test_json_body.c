/* test_json_body.c: unit tests of the one reader of message bodies (json_body.c): I-JSON's
 * rules (duplicates at any depth, compared decoded; UTF-8; surrogates; U+0000) and paths.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_body.h"
#include "tap.h"

static char err[512];
static char got[512]; /* the value found, as its JSON text */

/* Find path (dots between names; a step of digits is an index too) in body. As json_body_find;
 * the value's text in got. */
static int find(const char *body, size_t len, const char *path)
{
    json_body_seg_t segs[16];
    int n = 0;
    size_t s = 0, e = 0;

    for (const char *p = path; p && *p && n < 16; n++) {
        const char *dot = strchr(p, '.');
        size_t l = dot ? (size_t)(dot - p) : strlen(p);
        long idx = -1;
        if (l > 0 && strspn(p, "0123456789") >= l)
            idx = strtol(p, NULL, 10);
        segs[n] = (json_body_seg_t){p, l, idx, false};
        p = dot ? dot + 1 : NULL;
    }
    err[0] = got[0] = '\0';
    int r = json_body_find(body, len, segs, n, &s, &e, err, sizeof(err));
    if (r == 1)
        snprintf(got, sizeof(got), "%.*s", (int)(e - s), body + s);
    return r;
}

static int find_s(const char *body, const char *path)
{
    return find(body, strlen(body), path);
}

/* The decoded string at path, into out; 0 or -1 as json_body_string (-2: not found). */
static int string_at(const char *body, const char *path, json_body_buf_t *out)
{
    if (find_s(body, path) != 1)
        return -2;
    return json_body_string(got, strlen(got), out, err, sizeof(err));
}

static bool refused(const char *body, size_t len, const char *want)
{
    return find(body, len, "a") == -1 && strstr(err, want) != NULL;
}

int main(void)
{
    json_body_buf_t buf = {0};

    /* Paths on good bodies. */
    ok(find_s("{\"a\":{\"b\":[1,{\"c\":\"x\"}]}}", "a.b.1.c") == 1 && strcmp(got, "\"x\"") == 0,
       "a nested path through an array: %s", got);
    ok(find_s("{\"a\":{\"b\":1}}", "a.c") == 0, "an absent member: 0");
    ok(find_s("{\"a\":5}", "a.b") == 0, "a path through a number is absent");
    ok(find_s("[1,2]", "") == 1 && strcmp(got, "[1,2]") == 0, "no steps: the whole body");
    ok(find_s("{\"a\": 0.10 }\n", "a") == 1 && strcmp(got, "0.10") == 0,
       "a number's text as written, white space after the body");
    ok(json_body_is_integer("-12", 3) && !json_body_is_integer("1e3", 3) &&
           !json_body_is_integer("1.0", 3),
       "integers: no fraction, no exponent");

    /* Duplicates, at any depth, compared after unescaping. */
    ok(find_s("{\"a\":1,\"a\":2}", "a") == -1 &&
           strcmp(err, "body is not I-JSON: duplicate member \"a\" at $") == 0,
       "a duplicate at the top: %s", err);
    ok(find_s("{\"x\":{\"y\":[{\"k\":1,\"k\":1}]}}", "a") == -1 &&
           strstr(err, "duplicate member \"k\" at $.x.y[0]"),
       "a duplicate deep, off the path, is found and placed: %s", err);
    ok(find_s("{\"a\":1,\"\\u0061\":2}", "a") == -1 && strstr(err, "duplicate member \"a\""),
       "\"a\" and \"\\u0061\" are one name: %s", err);
    ok(find_s("{\"\\/\":1,\"/\":2}", "a") == -1 && strstr(err, "duplicate member \"/\""),
       "\"\\/\" and \"/\" are one name: %s", err);
    ok(find_s("{\"a\":{\"b\":\"old\"},\"a\":{\"b\":\"new\"}}", "a.b") == -1 &&
           strstr(err, "duplicate member \"a\" at $"),
       "a duplicate parent with a nested path rejects, whichever copy holds it: %s", err);
    ok(find_s("{\"a\":{\"b\":\"old\"},\"a\":{\"c\":1}}", "a.b") == -1,
       "a duplicate parent whose later copy lacks the field rejects too");
    ok(find_s("{\"a\":1,\"b\":{\"a\":2},\"c\":[{\"a\":3},{\"a\":4}]}", "b.a") == 1 &&
           strcmp(got, "2") == 0,
       "one name in different objects is no duplicate");
    ok(find_s("{\"ab\":1,\"a\":2,\"a\\u0000\":3}", "a") == -1 && strstr(err, "U+0000"),
       "names differing after U+0000 are refused for the U+0000: %s", err);

    /* U+0000: in a name it refuses the body; in a value only when that value is taken. */
    ok(find_s("{\"a\":\"good\",\"a\\u0000x\":\"evil\"}", "a") == -1 &&
           strstr(err, "body is not I-JSON: a member name holds U+0000") &&
           strstr(err, "$.a\\x00x"),
       "a member name with U+0000 refuses the body: %s", err);
    ok(find_s("{\"a\":\"x\",\"b\":\"\\u0000\"}", "a") == 1, "U+0000 in a value keeps the body");
    ok(string_at("{\"a\":\"x\\u0000y\"}", "a", &buf) == -1 && strstr(err, "U+0000"),
       "U+0000 in a value taken as a string is refused: %s", err);
    ok(string_at("{\"a\":\"\\u00e9\\ud83d\\ude00\\n\"}", "a", &buf) == 0 &&
           strcmp(buf.p, "\xc3\xa9\xf0\x9f\x98\x80\n") == 0,
       "escapes and a surrogate pair decode to UTF-8");
    ok(string_at("{\"a\":\"\"}", "a", &buf) == 0 && buf.len == 0, "an empty string decodes");

    /* Invalid UTF-8 and surrogates. */
    ok(refused("{\"a\":\"\xc0\xaf\"}", 9, "invalid UTF-8 at byte 6"), "an overlong: %s", err);
    ok(refused("{\"a\":\"\xe0\x80\xaf\"}", 10, "invalid UTF-8"), "a 3-byte overlong");
    ok(refused("{\"a\":\"\xed\xa0\x80\"}", 10, "invalid UTF-8"), "a surrogate in UTF-8");
    ok(refused("{\"a\":\"\xf4\x90\x80\x80\"}", 11, "invalid UTF-8"), "past U+10FFFF");
    ok(refused("{\"a\":\"\xe2\x82\"}", 9, "invalid UTF-8"), "a truncated sequence");
    ok(refused("{\"a\":\"\x80\"}", 8, "invalid UTF-8"), "a lone continuation byte");
    ok(refused("{\"\xff\":1}", 6, "invalid UTF-8"), "invalid UTF-8 in a name");
    ok(find_s("{\"a\":\"\xe2\x82\xac\xf0\x9f\x98\x80\"}", "a") == 1, "valid UTF-8 is kept");
    ok(refused("{\"a\":\"\\ud800\"}", 13, "a high surrogate \\uD800 without its low"),
       "a lone high surrogate: %s", err);
    ok(refused("{\"a\":\"\\udc00\\ud800\"}", 19, "a lone low surrogate \\uDC00"),
       "misordered surrogates: %s", err);
    ok(refused("{\"a\":\"\\ud800\\u0041\"}", 19, "without its low surrogate"),
       "a high surrogate before a non-surrogate");

    /* RFC 8259 grammar, depth, trailing text. */
    ok(refused("{\"a\":01}", 8, "body is not JSON"), "a leading zero");
    ok(refused("{\"a\":1.}", 8, "fraction"), "1.");
    ok(refused("{\"a\":-}", 7, "without digits"), "a bare minus");
    ok(refused("{\"a\":.5}", 8, "unexpected"), ".5");
    ok(refused("{\"a\":1e}", 8, "exponent"), "1e");
    ok(refused("{\"a\":1} x", 9, "text after the value"), "text after the value");
    ok(refused("{\"a\":1,}", 8, "expected a member name"), "a trailing comma");
    ok(refused("{\"a\":\"\t\"}", 9, "control character"), "a raw tab in a string");
    ok(refused("", 0, "empty"), "an empty body");
    ok(refused("{\"a\":1}\0", 8, "text after"), "a NUL byte after the value");
    char deep[200];
    memset(deep, '[', 65);
    memset(deep + 65, ']', 65);
    ok(find(deep, 130, "") == 1, "65 nested arrays (depth %d) are read", JSON_BODY_DEPTH_MAX);
    memset(deep, '[', 66);
    memset(deep + 66, ']', 66);
    ok(find(deep, 132, "") == -1 && strstr(err, "too deep"), "66 are refused: %s", err);

    json_body_buf_free(&buf);
    return done();
}
