/* json_body.h: the one reader of message bodies as JSON: checks a body against I-JSON (RFC 7493)
 * once and finds the value at a path (docs/sql-handler.md, "The body as JSON").
 */
#ifndef IDEMD_JSON_BODY_H
#define IDEMD_JSON_BODY_H

#include <stdbool.h>
#include <stddef.h>

/* Nesting the reader follows (the root value is depth 0); a deeper body is refused. */
#define JSON_BODY_DEPTH_MAX 64

/* One step of a path: a member name, an array index, or both ("items.0" is either). */
typedef struct json_body_seg {
    const char *name; /* not NUL-terminated; borrowed from the path's owner */
    size_t len;
    long index;   /* the step read as an array index, or -1: names only */
    bool bracket; /* written [N]: an index only, never a name */
} json_body_seg_t;

/* A growable byte buffer (decoded strings); zero it to start, json_body_buf_free at the end.
 * p is NUL-terminated once anything was put in it. */
typedef struct json_body_buf {
    char *p;
    size_t len, cap;
} json_body_buf_t;

/* What a checked value is, by its first byte. */
typedef enum json_body_kind {
    JSON_BODY_STRING,
    JSON_BODY_NUMBER,
    JSON_BODY_TRUE,
    JSON_BODY_FALSE,
    JSON_BODY_NULL,
    JSON_BODY_OBJECT,
    JSON_BODY_ARRAY,
} json_body_kind_t;

/*
 * Check body (len bytes, not NUL-terminated, borrowed for the call) and find the value at
 * segs[0..n_segs) (n_segs 0: the whole body). 1 with the value's bytes at body[*start, *end),
 * 0 when the body is good and the path absent, -1 when the body is refused, with the reason in
 * err ("body is not JSON: ... at byte N" or "body is not I-JSON: ..."). The rules are
 * docs/sql-handler.md's: RFC 8259 grammar, nesting at most JSON_BODY_DEPTH_MAX, white space only
 * after the value, no duplicate member names at any depth (compared decoded), valid UTF-8, no
 * lone surrogate escapes, no U+0000 in a member name. Pure.
 */
int json_body_find(const char *body, size_t len, const json_body_seg_t *segs, int n_segs,
                   size_t *start, size_t *end, char *err, size_t errlen)
    __attribute__((warn_unused_result));

/* The kind of a value json_body_find returned (s: its first byte). */
json_body_kind_t json_body_kind(const char *s);

/* Whether a checked number's text s[0..n) is an integer (no fraction, no exponent). */
bool json_body_is_integer(const char *s, size_t n);

/*
 * Decode a checked string value s[0..n) (quotes included) into out (emptied first; the caller
 * owns out). 0, or -1 with the reason in err when it holds U+0000 (a C string or a MySQL text
 * value cannot carry it: the message is refused) or memory ran out.
 */
int json_body_string(const char *s, size_t n, json_body_buf_t *out, char *err, size_t errlen)
    __attribute__((warn_unused_result));

/* Free what b holds; b itself is the caller's. NULL is fine. */
void json_body_buf_free(json_body_buf_t *b);

#endif
