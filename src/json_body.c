/* json_body.c: the one reader of message bodies as JSON: a strict walker over the body's own text
 * that checks I-JSON (RFC 7493) once and finds the value at a path. */
#include "json_body.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* json-c and the SQL handler's old walker read one body two ways (a later duplicate won in one,
 * an earlier one in the other; names were cut at U+0000 in one only): every reader of a body now
 * goes through this file, and what either could read differently is refused. */

/* A member name of an open object: its decoded bytes in the walk's names buffer. */
typedef struct jb_name {
    size_t off, len;
} jb_name_t;

/* Where the walk stands at one depth, for messages: a member (ent[at]) or an element (at). */
typedef struct jb_step {
    bool member;
    size_t at;
} jb_step_t;

typedef struct jb_walk {
    const char *b;
    size_t n, pos;
    const json_body_seg_t *segs;
    int n_segs;
    bool found; /* the walk reached the end of the path: the value is at [start, end) */
    size_t start, end;
    json_body_buf_t names; /* decoded names of the open objects' members, object after object */
    jb_name_t *ent;
    size_t n_ent, cap_ent;
    jb_step_t path[JSON_BODY_DEPTH_MAX + 1];
    char *err;
    size_t errlen;
} jb_walk_t;

void json_body_buf_free(json_body_buf_t *b)
{
    if (b == NULL)
        return;
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}

/* A syntax error (RFC 8259) at the walk's position: -1 with the reason in err. */
static int jb_bad(jb_walk_t *w, const char *what)
{
    snprintf(w->err, w->errlen, "body is not JSON: %s at byte %zu", what, w->pos);
    return -1;
}

/* A JSON text that I-JSON refuses: -1 with the reason in err. */
static int jb_strict(jb_walk_t *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int jb_strict(jb_walk_t *w, const char *fmt, ...)
{
    va_list ap;
    int k = snprintf(w->err, w->errlen, "body is not I-JSON: ");
    va_start(ap, fmt);
    if (k >= 0 && (size_t)k < w->errlen)
        vsnprintf(w->err + k, w->errlen - (size_t)k, fmt, ap);
    va_end(ap);
    return -1;
}

static int jb_oom(jb_walk_t *w)
{
    snprintf(w->err, w->errlen, "out of memory reading the body");
    return -1;
}

static void jb_ws(jb_walk_t *w)
{
    while (w->pos < w->n && (w->b[w->pos] == ' ' || w->b[w->pos] == '\t' || w->b[w->pos] == '\n' ||
                             w->b[w->pos] == '\r'))
        w->pos++;
}

/* Append n bytes to out (grown, kept NUL-terminated); out NULL: nothing. 0 or -1 (err). */
static int jb_put(jb_walk_t *w, json_body_buf_t *out, const char *s, size_t n)
{
    if (out == NULL)
        return 0;
    if (out->len + n + 1 > out->cap) {
        size_t cap = out->cap ? out->cap : 64;
        while (cap < out->len + n + 1)
            cap *= 2;
        char *p = realloc(out->p, cap);
        if (p == NULL)
            return jb_oom(w);
        out->p = p;
        out->cap = cap;
    }
    if (n > 0)
        memcpy(out->p + out->len, s, n);
    out->len += n;
    out->p[out->len] = '\0';
    return 0;
}

/* Code point cp (a scalar value) as UTF-8 into out. */
static int jb_put_cp(jb_walk_t *w, json_body_buf_t *out, unsigned cp)
{
    char u[4];
    size_t k;
    if (cp < 0x80) {
        u[0] = (char)cp;
        k = 1;
    } else if (cp < 0x800) {
        u[0] = (char)(0xC0 | (cp >> 6));
        u[1] = (char)(0x80 | (cp & 0x3F));
        k = 2;
    } else if (cp < 0x10000) {
        u[0] = (char)(0xE0 | (cp >> 12));
        u[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[2] = (char)(0x80 | (cp & 0x3F));
        k = 3;
    } else {
        u[0] = (char)(0xF0 | (cp >> 18));
        u[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        u[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[3] = (char)(0x80 | (cp & 0x3F));
        k = 4;
    }
    return jb_put(w, out, u, k);
}

static int jb_hex4(const char *p, unsigned *v)
{
    *v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        *v <<= 4;
        if (c >= '0' && c <= '9')
            *v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            *v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            *v |= (unsigned)(c - 'A' + 10);
        else
            return -1;
    }
    return 0;
}

/*
 * The length of the UTF-8 sequence at w->pos (a byte >= 0x80), or 0 when it is not one
 * (RFC 3629: no overlongs, no surrogates D800..DFFF, nothing past U+10FFFF, not truncated).
 */
static size_t jb_utf8_len(const jb_walk_t *w)
{
    const unsigned char *p = (const unsigned char *)w->b + w->pos;
    size_t left = w->n - w->pos, k;
    unsigned c = p[0], lo = 0x80, hi = 0xBF;

    if (c >= 0xC2 && c <= 0xDF) {
        k = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        k = 3;
        lo = c == 0xE0 ? 0xA0 : 0x80;
        hi = c == 0xED ? 0x9F : 0xBF;
    } else if (c >= 0xF0 && c <= 0xF4) {
        k = 4;
        lo = c == 0xF0 ? 0x90 : 0x80;
        hi = c == 0xF4 ? 0x8F : 0xBF;
    } else {
        return 0;
    }
    if (left < k || p[1] < lo || p[1] > hi)
        return 0;
    for (size_t i = 2; i < k; i++)
        if ((p[i] & 0xC0) != 0x80)
            return 0;
    return k;
}

/* The escape at w->pos (on its backslash): decoded into out; *nul set for U+0000. 0 or -1. */
static int jb_escape(jb_walk_t *w, json_body_buf_t *out, bool *nul)
{
    static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
    size_t at = w->pos;
    unsigned cp, lo;

    if (w->pos + 1 >= w->n) {
        w->pos = w->n;
        return jb_bad(w, "an unterminated string");
    }
    char e = w->b[w->pos + 1];
    const char *m = e != '\0' ? strchr(from, e) : NULL;
    if (m != NULL) {
        w->pos += 2;
        return jb_put(w, out, &to[m - from], 1);
    }
    if (e != 'u')
        return jb_bad(w, "an unknown escape in a string");
    if (w->pos + 6 > w->n || jb_hex4(w->b + w->pos + 2, &cp) != 0)
        return jb_bad(w, "a bad \\u escape");
    w->pos += 6;
    if (cp >= 0xDC00 && cp <= 0xDFFF)
        return jb_strict(w, "a lone low surrogate \\u%04X at byte %zu", cp, at);
    if (cp >= 0xD800 && cp <= 0xDBFF) {
        if (w->pos + 6 > w->n || w->b[w->pos] != '\\' || w->b[w->pos + 1] != 'u' ||
            jb_hex4(w->b + w->pos + 2, &lo) != 0 || lo < 0xDC00 || lo > 0xDFFF)
            return jb_strict(w, "a high surrogate \\u%04X without its low surrogate at byte %zu",
                             cp, at);
        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        w->pos += 6;
    }
    if (cp == 0)
        *nul = true;
    return out ? jb_put_cp(w, out, cp) : 0;
}

/*
 * The string at w->pos (on its opening quote): checked, and decoded onto the end of out when out
 * is not NULL; *nul: it holds U+0000. Leaves w->pos after the closing quote. 0 or -1 (err).
 */
static int jb_string(jb_walk_t *w, json_body_buf_t *out, bool *nul)
{
    size_t run = ++w->pos;

    *nul = false;
    while (w->pos < w->n) {
        unsigned char c = (unsigned char)w->b[w->pos];
        if (c == '"') {
            if (jb_put(w, out, w->b + run, w->pos - run) != 0)
                return -1;
            w->pos++;
            return 0;
        }
        if (c < 0x20)
            return jb_bad(w, "a control character in a string");
        if (c >= 0x80) {
            size_t k = jb_utf8_len(w);
            if (k == 0)
                return jb_strict(w, "invalid UTF-8 at byte %zu", w->pos);
            w->pos += k;
            continue;
        }
        if (c != '\\') {
            w->pos++;
            continue;
        }
        if (jb_put(w, out, w->b + run, w->pos - run) != 0 || jb_escape(w, out, nul) != 0)
            return -1;
        run = w->pos;
    }
    return jb_bad(w, "an unterminated string");
}

static bool jb_digit(const jb_walk_t *w)
{
    return w->pos < w->n && w->b[w->pos] >= '0' && w->b[w->pos] <= '9';
}

/* The number at w->pos, by RFC 8259's grammar (no leading zeros, no bare dot). 0 or -1. */
static int jb_number(jb_walk_t *w)
{
    if (w->b[w->pos] == '-')
        w->pos++;
    if (!jb_digit(w))
        return jb_bad(w, "a number without digits");
    if (w->b[w->pos] == '0')
        w->pos++;
    else
        while (jb_digit(w))
            w->pos++;
    if (w->pos < w->n && w->b[w->pos] == '.') {
        w->pos++;
        if (!jb_digit(w))
            return jb_bad(w, "a fraction without digits");
        while (jb_digit(w))
            w->pos++;
    }
    if (w->pos < w->n && (w->b[w->pos] == 'e' || w->b[w->pos] == 'E')) {
        w->pos++;
        if (w->pos < w->n && (w->b[w->pos] == '+' || w->b[w->pos] == '-'))
            w->pos++;
        if (!jb_digit(w))
            return jb_bad(w, "an exponent without digits");
        while (jb_digit(w))
            w->pos++;
    }
    return 0;
}

/* Name bytes s[0..n) for a message into o (at *k, cap bytes): printable ASCII as is, the rest
 * as \xHH, at most 40 bytes of it. */
static void jb_print_name(char *o, size_t cap, size_t *k, const char *s, size_t n)
{
    for (size_t i = 0; i < n && *k + 8 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        if (i == 40) {
            *k += (size_t)snprintf(o + *k, cap - *k, "...");
            break;
        }
        if (c >= 0x20 && c < 0x7F && c != '"' && c != '\\')
            o[(*k)++] = (char)c;
        else
            *k += (size_t)snprintf(o + *k, cap - *k, "\\x%02X", c);
    }
    o[*k] = '\0';
}

/* The path of the container at depth ("$", "$.a[2].b") into o (cap bytes). */
static void jb_where(const jb_walk_t *w, int depth, char *o, size_t cap)
{
    size_t k = (size_t)snprintf(o, cap, "$");
    for (int d = 0; d < depth && k + 24 < cap; d++) {
        const jb_step_t *s = &w->path[d];
        if (s->member) {
            const jb_name_t *nm = &w->ent[s->at];
            o[k++] = '.';
            jb_print_name(o, cap, &k, w->names.p + nm->off, nm->len);
        } else {
            k += (size_t)snprintf(o + k, cap - k, "[%zu]", s->at);
        }
    }
}

/* The member name at w->pos: decoded onto names, its entry pushed, U+0000 refused. 0 or -1. */
static int jb_name(jb_walk_t *w, int depth)
{
    size_t off = w->names.len;
    bool nul;
    char where[160];

    if (jb_string(w, &w->names, &nul) != 0)
        return -1;
    if (w->n_ent == w->cap_ent) {
        size_t cap = w->cap_ent ? w->cap_ent * 2 : 16;
        jb_name_t *p = realloc(w->ent, cap * sizeof(*p));
        if (p == NULL)
            return jb_oom(w);
        w->ent = p;
        w->cap_ent = cap;
    }
    w->ent[w->n_ent] = (jb_name_t){off, w->names.len - off};
    w->path[depth] = (jb_step_t){true, w->n_ent};
    w->n_ent++;
    if (!nul)
        return 0;
    jb_where(w, depth + 1, where, sizeof(where));
    return jb_strict(w, "a member name holds U+0000 (\\u0000) at %s", where);
}

static int jb_name_cmp(const void *a, const void *b, void *names)
{
    const jb_name_t *x = a, *y = b;
    size_t n = x->len < y->len ? x->len : y->len;
    int c = n ? memcmp((const char *)names + x->off, (const char *)names + y->off, n) : 0;
    return c != 0 ? c : (x->len > y->len) - (x->len < y->len);
}

/* The names of the object at depth (entries from base on) are unique. 0 or -1 (err). */
static int jb_unique(jb_walk_t *w, size_t base, int depth)
{
    size_t n = w->n_ent - base;
    char where[160], name[200];
    size_t k = 0;

    if (n < 2)
        return 0;
    qsort_r(w->ent + base, n, sizeof(jb_name_t), jb_name_cmp, w->names.p);
    for (size_t i = base + 1; i < w->n_ent; i++) {
        if (jb_name_cmp(&w->ent[i - 1], &w->ent[i], w->names.p) != 0)
            continue;
        jb_print_name(name, sizeof(name), &k, w->names.p + w->ent[i].off, w->ent[i].len);
        jb_where(w, depth, where, sizeof(where));
        return jb_strict(w, "duplicate member \"%s\" at %s", name, where);
    }
    return 0;
}

static int jb_value(jb_walk_t *w, int depth, int matched);

/* The path step the value at matched steps would be checked against, or NULL (off the path). */
static const json_body_seg_t *jb_seg(const jb_walk_t *w, int matched)
{
    return matched >= 0 && matched < w->n_segs ? &w->segs[matched] : NULL;
}

/* Whether the name just pushed is step g's. */
static bool jb_name_is(const jb_walk_t *w, const json_body_seg_t *g)
{
    const jb_name_t *nm = &w->ent[w->n_ent - 1];
    if (g == NULL || g->bracket || nm->len != g->len)
        return false;
    return g->len == 0 || memcmp(w->names.p + nm->off, g->name, g->len) == 0;
}

/* The object at w->pos (at depth, matched steps of the path led here): checked. 0 or -1. */
static int jb_object(jb_walk_t *w, int depth, int matched)
{
    const json_body_seg_t *g = jb_seg(w, matched);
    size_t base = w->n_ent, names_base = w->names.len;
    int rc = -1;

    w->pos++;
    jb_ws(w);
    if (w->pos < w->n && w->b[w->pos] == '}') {
        w->pos++;
        return 0;
    }
    for (;;) {
        jb_ws(w);
        if (w->pos >= w->n || w->b[w->pos] != '"') {
            jb_bad(w, "expected a member name");
            goto fail;
        }
        if (jb_name(w, depth) != 0)
            goto fail;
        jb_ws(w);
        if (w->pos >= w->n || w->b[w->pos] != ':') {
            jb_bad(w, "expected : after a member name");
            goto fail;
        }
        w->pos++;
        if (jb_value(w, depth + 1, jb_name_is(w, g) ? matched + 1 : -1) != 0)
            goto fail;
        jb_ws(w);
        if (w->pos < w->n && w->b[w->pos] == ',') {
            w->pos++;
            continue;
        }
        if (w->pos < w->n && w->b[w->pos] == '}') {
            w->pos++;
            break;
        }
        jb_bad(w, "expected , or } in an object");
        goto fail;
    }
    rc = jb_unique(w, base, depth);
fail:
    w->n_ent = base;
    w->names.len = names_base;
    return rc;
}

/* The array at w->pos: checked. 0 or -1. */
static int jb_array(jb_walk_t *w, int depth, int matched)
{
    const json_body_seg_t *g = jb_seg(w, matched);

    w->pos++;
    jb_ws(w);
    if (w->pos < w->n && w->b[w->pos] == ']') {
        w->pos++;
        return 0;
    }
    for (long idx = 0;; idx++) {
        w->path[depth] = (jb_step_t){false, (size_t)idx};
        if (jb_value(w, depth + 1, g && g->index == idx ? matched + 1 : -1) != 0)
            return -1;
        jb_ws(w);
        if (w->pos < w->n && w->b[w->pos] == ',') {
            w->pos++;
            continue;
        }
        if (w->pos < w->n && w->b[w->pos] == ']') {
            w->pos++;
            return 0;
        }
        return jb_bad(w, "expected , or ] in an array");
    }
}

/* true, false or null at w->pos. 0 or -1. */
static int jb_word(jb_walk_t *w)
{
    static const char *const words[] = {"true", "false", "null"};
    for (size_t k = 0; k < 3; k++) {
        size_t wl = strlen(words[k]);
        if (w->n - w->pos >= wl && memcmp(w->b + w->pos, words[k], wl) == 0) {
            w->pos += wl;
            return 0;
        }
    }
    return jb_bad(w, "an unexpected character");
}

/*
 * The value at w->pos, checked to its end. matched: how many path steps led here (-1: off the
 * path); when all did, it is the target and its span is kept.
 */
static int jb_value(jb_walk_t *w, int depth, int matched)
{
    size_t start;
    bool nul;
    int rc;

    jb_ws(w);
    if (w->pos >= w->n)
        return jb_bad(w, "the body ends where a value should start");
    if (depth > JSON_BODY_DEPTH_MAX)
        return jb_bad(w, "nested too deep");
    start = w->pos;
    switch (w->b[w->pos]) {
    case '{':
        rc = jb_object(w, depth, matched);
        break;
    case '[':
        rc = jb_array(w, depth, matched);
        break;
    case '"':
        rc = jb_string(w, NULL, &nul);
        break;
    case '-':
    case '0' ... '9':
        rc = jb_number(w);
        break;
    default:
        rc = jb_word(w);
        break;
    }
    if (rc == 0 && matched == w->n_segs) {
        w->found = true;
        w->start = start;
        w->end = w->pos;
    }
    return rc;
}

int json_body_find(const char *body, size_t len, const json_body_seg_t *segs, int n_segs,
                   size_t *start, size_t *end, char *err, size_t errlen)
{
    jb_walk_t w;
    int rc = -1;

    memset(&w, 0, sizeof(w));
    w.b = body;
    w.n = len;
    w.segs = segs;
    w.n_segs = n_segs;
    w.err = err;
    w.errlen = errlen;
    if (len == 0) {
        snprintf(err, errlen, "body is not JSON: it is empty");
        return -1;
    }
    if (jb_value(&w, 0, 0) != 0)
        goto fail;
    jb_ws(&w);
    if (w.pos != len) {
        jb_bad(&w, "text after the value");
        goto fail;
    }
    rc = w.found ? 1 : 0;
    if (w.found) {
        *start = w.start;
        *end = w.end;
    }
fail:
    json_body_buf_free(&w.names);
    free(w.ent);
    return rc;
}

json_body_kind_t json_body_kind(const char *s)
{
    switch (s[0]) {
    case '"':
        return JSON_BODY_STRING;
    case 't':
        return JSON_BODY_TRUE;
    case 'f':
        return JSON_BODY_FALSE;
    case 'n':
        return JSON_BODY_NULL;
    case '{':
        return JSON_BODY_OBJECT;
    case '[':
        return JSON_BODY_ARRAY;
    default:
        return JSON_BODY_NUMBER;
    }
}

bool json_body_is_integer(const char *s, size_t n)
{
    return memchr(s, '.', n) == NULL && memchr(s, 'e', n) == NULL && memchr(s, 'E', n) == NULL;
}

int json_body_string(const char *s, size_t n, json_body_buf_t *out, char *err, size_t errlen)
{
    jb_walk_t w;
    bool nul;

    memset(&w, 0, sizeof(w));
    w.b = s;
    w.n = n;
    w.err = err;
    w.errlen = errlen;
    out->len = 0;
    if (n == 0 || s[0] != '"')
        return jb_bad(&w, "expected a string");
    if (jb_string(&w, out, &nul) != 0)
        return -1;
    if (nul) {
        snprintf(err, errlen,
                 "the string holds U+0000 (\\u0000), which a key or a parameter cannot carry");
        return -1;
    }
    return 0;
}
