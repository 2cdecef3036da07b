/* sqlh_param.c: the SQL handler's parameter sources, parsed from the config, and the exact value
 * each gives for a message (a strict JSON walker over the body's own text: numbers keep their
 * digits). Pure: no database, no broker; unit-tested and fuzzed.
 */
#include "sqlh_param.h"

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* json-c would turn 0.10 into a double and 2^63 into a saturated int64: the walker below reads
 * the text itself, so a number binds with the digits the producer wrote. */

static const struct {
    const char *name;
    sqlh_src_kind_t kind;
} sqlh_msg_fields[] = {
    {"id", SQLH_SRC_MSG_ID},
    {"routing_key", SQLH_SRC_ROUTING_KEY},
    {"exchange", SQLH_SRC_EXCHANGE},
    {"timestamp", SQLH_SRC_TIMESTAMP},
    {"content_type", SQLH_SRC_CONTENT_TYPE},
};

void sqlh_buf_free(sqlh_buf_t *b)
{
    if (b == NULL)
        return;
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}

void sqlh_src_free(sqlh_src_t *s)
{
    if (s == NULL)
        return;
    free(s->arg);
    s->arg = NULL;
}

/* Split s->arg (a json path) into segments: names between dots, [N] indexes. 0 or -1 (err). */
static int sqlh_path_split(sqlh_src_t *s, char *err, size_t errlen)
{
    const char *p = s->arg;

    s->n_segs = 0;
    if (*p == '\0') {
        snprintf(err, errlen, "json: needs a path (json:field or json:a.b[0])");
        return -1;
    }
    while (*p) {
        sqlh_seg_t g = {p, 0, -1, false};
        if (*p == '[') {
            char *end;
            errno = 0;
            long v = strtol(p + 1, &end, 10);
            if (p[1] < '0' || p[1] > '9' || *end != ']' || errno != 0 || v > INT_MAX) {
                snprintf(err, errlen, "json:%s: [ must hold an array index (digits) and a ]",
                         s->arg);
                return -1;
            }
            g.name = p + 1;
            g.len = (size_t)(end - p - 1);
            g.index = v;
            g.bracket = true;
            p = end + 1;
        } else {
            g.len = strcspn(p, ".[");
            if (g.len == 0) {
                snprintf(err, errlen, "json:%s: an empty field name", s->arg);
                return -1;
            }
            if (strspn(p, "0123456789") == g.len && g.len < 10)
                g.index = strtol(p, NULL, 10);
            p += g.len;
        }
        if (s->n_segs == SQLH_PATH_SEGS) {
            snprintf(err, errlen, "json:%s: more than %d steps", s->arg, SQLH_PATH_SEGS);
            return -1;
        }
        s->segs[s->n_segs++] = g;
        if (*p == '.') {
            p++;
            if (*p == '\0' || *p == '.' || *p == '[') {
                snprintf(err, errlen, "json:%s: an empty field name", s->arg);
                return -1;
            }
        } else if (*p != '\0' && *p != '[') {
            snprintf(err, errlen, "json:%s: expected . or [ after ]", s->arg);
            return -1;
        }
    }
    return 0;
}

int sqlh_src_parse(const char *text, sqlh_src_t *out, char *err, size_t errlen)
{
    size_t n;
    const char *arg = NULL;

    memset(out, 0, sizeof(*out));
    if (text == NULL) {
        snprintf(err, errlen, "a parameter source must be a string");
        return -1;
    }
    n = strlen(text);
    if (strncmp(text, "const:", 6) == 0) {
        /* The constant is taken as written, a final ? included. */
        out->kind = SQLH_SRC_CONST;
        if ((out->arg = strdup(text + 6)) == NULL)
            goto oom;
        return 0;
    }
    if (n > 0 && text[n - 1] == '?') {
        out->optional = true;
        n--;
    }
    if (n > SQLH_PATH_MAX + 7) {
        snprintf(err, errlen, "source \"%.40s...\" is too long (%d bytes at most)", text,
                 SQLH_PATH_MAX + 7);
        return -1;
    }
    if (n == 4 && strncmp(text, "body", 4) == 0) {
        out->kind = SQLH_SRC_BODY;
        return 0;
    }
    if (n > 4 && strncmp(text, "msg:", 4) == 0) {
        for (size_t i = 0; i < sizeof(sqlh_msg_fields) / sizeof(sqlh_msg_fields[0]); i++)
            if (strlen(sqlh_msg_fields[i].name) == n - 4 &&
                strncmp(text + 4, sqlh_msg_fields[i].name, n - 4) == 0) {
                out->kind = sqlh_msg_fields[i].kind;
                return 0;
            }
        snprintf(err, errlen,
                 "unknown source \"%s\" (msg: takes id, routing_key, exchange, timestamp or "
                 "content_type)",
                 text);
        return -1;
    }
    if (n >= 5 && strncmp(text, "json:", 5) == 0) {
        out->kind = SQLH_SRC_JSON;
        arg = text + 5;
    } else if (n >= 7 && strncmp(text, "header:", 7) == 0) {
        out->kind = SQLH_SRC_HEADER;
        arg = text + 7;
    } else {
        snprintf(err, errlen,
                 "unknown source \"%s\" (expected json:PATH, header:NAME, msg:id, "
                 "msg:routing_key, msg:exchange, msg:timestamp, msg:content_type, body or "
                 "const:TEXT, with ? at the end for optional)",
                 text);
        return -1;
    }
    if ((out->arg = strndup(arg, n - (size_t)(arg - text))) == NULL)
        goto oom;
    if (out->kind == SQLH_SRC_HEADER && out->arg[0] == '\0') {
        snprintf(err, errlen, "header: needs a header name (header:NAME)");
        goto fail;
    }
    if (out->kind == SQLH_SRC_JSON && sqlh_path_split(out, err, errlen) != 0)
        goto fail;
    return 0;

oom:
    snprintf(err, errlen, "out of memory");
fail:
    sqlh_src_free(out);
    return -1;
}

/* ---------- the JSON walker ---------- */

typedef struct sqlh_js {
    const char *b;
    size_t n, pos;
    const sqlh_src_t *src;
    /* The target: found when the walk reached the end of the path on it. */
    bool found;
    size_t start, end;
    char *err;
    size_t errlen;
} sqlh_js_t;

static int sqlh_js_bad(sqlh_js_t *j, const char *what)
{
    snprintf(j->err, j->errlen, "body is not JSON: %s at byte %zu", what, j->pos);
    return -1;
}

static void sqlh_js_ws(sqlh_js_t *j)
{
    while (j->pos < j->n && (j->b[j->pos] == ' ' || j->b[j->pos] == '\t' || j->b[j->pos] == '\n' ||
                             j->b[j->pos] == '\r'))
        j->pos++;
}

static int sqlh_hex4(const char *p, unsigned *v)
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

/* Append n bytes to buf (grown). 0 or -1. */
static int sqlh_buf_put(sqlh_buf_t *buf, const char *s, size_t n)
{
    if (buf->len + n + 1 > buf->cap) {
        size_t cap = buf->cap ? buf->cap : 64;
        while (cap < buf->len + n + 1)
            cap *= 2;
        char *p = realloc(buf->p, cap);
        if (p == NULL)
            return -1;
        buf->p = p;
        buf->cap = cap;
    }
    memcpy(buf->p + buf->len, s, n);
    buf->len += n;
    buf->p[buf->len] = '\0';
    return 0;
}

static int sqlh_utf8(sqlh_buf_t *buf, unsigned cp)
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
    return sqlh_buf_put(buf, u, k);
}

/*
 * The string at j->pos (on its opening quote): checked, and with out decoded into out
 * (emptied first). Leaves j->pos after the closing quote. 0 or -1 (err).
 */
static int sqlh_js_string(sqlh_js_t *j, sqlh_buf_t *out)
{
    if (out)
        out->len = 0;
    j->pos++;
    size_t run = j->pos;
    while (j->pos < j->n) {
        unsigned char c = (unsigned char)j->b[j->pos];
        if (c == '"') {
            if (out && (sqlh_buf_put(out, j->b + run, j->pos - run) != 0))
                return sqlh_js_bad(j, "out of memory");
            j->pos++;
            return 0;
        }
        if (c < 0x20)
            return sqlh_js_bad(j, "a control character in a string");
        if (c != '\\') {
            j->pos++;
            continue;
        }
        if (out && sqlh_buf_put(out, j->b + run, j->pos - run) != 0)
            return sqlh_js_bad(j, "out of memory");
        if (j->pos + 1 >= j->n)
            break;
        char e = j->b[j->pos + 1];
        const char *map = strchr("\"\"\\\\//b\bf\fn\nr\rt\t", e);
        if (e != 'u') {
            if (e == '\0' || map == NULL || ((map - "\"\"\\\\//b\bf\fn\nr\rt\t") & 1))
                return sqlh_js_bad(j, "an unknown escape in a string");
            if (out && sqlh_buf_put(out, map + 1, 1) != 0)
                return sqlh_js_bad(j, "out of memory");
            j->pos += 2;
        } else {
            unsigned cp, lo;
            if (j->pos + 6 > j->n || sqlh_hex4(j->b + j->pos + 2, &cp) != 0)
                return sqlh_js_bad(j, "a bad \\u escape");
            j->pos += 6;
            if (cp >= 0xDC00 && cp <= 0xDFFF)
                return sqlh_js_bad(j, "a lone low surrogate");
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                if (j->pos + 6 > j->n || j->b[j->pos] != '\\' || j->b[j->pos + 1] != 'u' ||
                    sqlh_hex4(j->b + j->pos + 2, &lo) != 0 || lo < 0xDC00 || lo > 0xDFFF)
                    return sqlh_js_bad(j, "a high surrogate without its low surrogate");
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                j->pos += 6;
            }
            if (out && sqlh_utf8(out, cp) != 0)
                return sqlh_js_bad(j, "out of memory");
        }
        run = j->pos;
    }
    return sqlh_js_bad(j, "an unterminated string");
}

static bool sqlh_digit(const sqlh_js_t *j)
{
    return j->pos < j->n && j->b[j->pos] >= '0' && j->b[j->pos] <= '9';
}

/* The number at j->pos: checked; *integer when it has no fraction and no exponent. */
static int sqlh_js_number(sqlh_js_t *j, bool *integer)
{
    *integer = true;
    if (j->b[j->pos] == '-')
        j->pos++;
    if (!sqlh_digit(j))
        return sqlh_js_bad(j, "a number without digits");
    if (j->b[j->pos] == '0')
        j->pos++;
    else
        while (sqlh_digit(j))
            j->pos++;
    if (j->pos < j->n && j->b[j->pos] == '.') {
        *integer = false;
        j->pos++;
        if (!sqlh_digit(j))
            return sqlh_js_bad(j, "a fraction without digits");
        while (sqlh_digit(j))
            j->pos++;
    }
    if (j->pos < j->n && (j->b[j->pos] == 'e' || j->b[j->pos] == 'E')) {
        *integer = false;
        j->pos++;
        if (j->pos < j->n && (j->b[j->pos] == '+' || j->b[j->pos] == '-'))
            j->pos++;
        if (!sqlh_digit(j))
            return sqlh_js_bad(j, "an exponent without digits");
        while (sqlh_digit(j))
            j->pos++;
    }
    return 0;
}

static int sqlh_js_value(sqlh_js_t *j, int depth, int matched);

/* Whether key (raw, between quotes at [ks, ke)) is the name of segment g. */
static bool sqlh_key_is(const sqlh_js_t *j, size_t ks, size_t ke, const sqlh_seg_t *g,
                        sqlh_buf_t *tmp)
{
    if (g->bracket)
        return false;
    if (memchr(j->b + ks, '\\', ke - ks) == NULL)
        return ke - ks == g->len && memcmp(j->b + ks, g->name, g->len) == 0;
    /* An escaped key: compare its decoded text. */
    sqlh_js_t k = {j->b, ke + 1, ks - 1, NULL, false, 0, 0, NULL, 0};
    char e[8];
    k.err = e;
    k.errlen = sizeof(e);
    return sqlh_js_string(&k, tmp) == 0 && tmp->len == g->len &&
           memcmp(tmp->p, g->name, g->len) == 0;
}

/*
 * The value at j->pos, checked to its end. matched: how many path segments led here (-1: off
 * the path). When all did, the value is the target: its span is kept (a later duplicate key
 * wins, as in json-c).
 */
static int sqlh_js_value(sqlh_js_t *j, int depth, int matched)
{
    bool integer;
    size_t start;

    sqlh_js_ws(j);
    if (j->pos >= j->n)
        return sqlh_js_bad(j, "the body ends where a value should start");
    if (depth > SQLH_JSON_DEPTH_MAX)
        return sqlh_js_bad(j, "nested too deep");
    start = j->pos;
    const sqlh_seg_t *g = matched >= 0 && matched < j->src->n_segs ? &j->src->segs[matched] : NULL;
    char c = j->b[j->pos];
    if (c == '{') {
        sqlh_buf_t tmp = {0};
        j->pos++;
        sqlh_js_ws(j);
        if (j->pos < j->n && j->b[j->pos] == '}') {
            j->pos++;
            goto done;
        }
        for (;;) {
            sqlh_js_ws(j);
            if (j->pos >= j->n || j->b[j->pos] != '"') {
                sqlh_buf_free(&tmp);
                return sqlh_js_bad(j, "expected a member name");
            }
            size_t ks = j->pos + 1;
            if (sqlh_js_string(j, NULL) != 0) {
                sqlh_buf_free(&tmp);
                return -1;
            }
            size_t ke = j->pos - 1;
            sqlh_js_ws(j);
            if (j->pos >= j->n || j->b[j->pos] != ':') {
                sqlh_buf_free(&tmp);
                return sqlh_js_bad(j, "expected : after a member name");
            }
            j->pos++;
            int m = g && sqlh_key_is(j, ks, ke, g, &tmp) ? matched + 1 : -1;
            if (sqlh_js_value(j, depth + 1, m) != 0) {
                sqlh_buf_free(&tmp);
                return -1;
            }
            sqlh_js_ws(j);
            if (j->pos < j->n && j->b[j->pos] == ',') {
                j->pos++;
                continue;
            }
            if (j->pos < j->n && j->b[j->pos] == '}') {
                j->pos++;
                break;
            }
            sqlh_buf_free(&tmp);
            return sqlh_js_bad(j, "expected , or } in an object");
        }
        sqlh_buf_free(&tmp);
    } else if (c == '[') {
        long idx = 0;
        j->pos++;
        sqlh_js_ws(j);
        if (j->pos < j->n && j->b[j->pos] == ']') {
            j->pos++;
            goto done;
        }
        for (;; idx++) {
            int m = g && g->index == idx ? matched + 1 : -1;
            if (sqlh_js_value(j, depth + 1, m) != 0)
                return -1;
            sqlh_js_ws(j);
            if (j->pos < j->n && j->b[j->pos] == ',') {
                j->pos++;
                continue;
            }
            if (j->pos < j->n && j->b[j->pos] == ']') {
                j->pos++;
                break;
            }
            return sqlh_js_bad(j, "expected , or ] in an array");
        }
    } else if (c == '"') {
        if (sqlh_js_string(j, NULL) != 0)
            return -1;
    } else if (c == '-' || (c >= '0' && c <= '9')) {
        if (sqlh_js_number(j, &integer) != 0)
            return -1;
    } else {
        static const char *const words[] = {"true", "false", "null"};
        size_t k;
        for (k = 0; k < 3; k++) {
            size_t wl = strlen(words[k]);
            if (j->n - j->pos >= wl && memcmp(j->b + j->pos, words[k], wl) == 0) {
                j->pos += wl;
                break;
            }
        }
        if (k == 3)
            return sqlh_js_bad(j, "an unexpected character");
    }
done:
    if (matched == j->src->n_segs) {
        j->found = true;
        j->start = start;
        j->end = j->pos;
    }
    return 0;
}

long sqlh_decimal_int_digits(const char *s, size_t len)
{
    size_t i = 0;
    long ip = 0, frac0 = 0, e = 0;
    bool nonzero = false, in_frac = false, neg_e = false;

    if (i < len && s[i] == '-')
        i++;
    for (; i < len && s[i] != 'e' && s[i] != 'E'; i++) {
        if (s[i] == '.')
            in_frac = true;
        else if (s[i] != '0')
            nonzero = true;
        if (s[i] == '.')
            continue;
        if (!in_frac && nonzero)
            ip++; /* leading zeros are not counted */
        else if (in_frac && !nonzero)
            frac0++; /* zeros between the point and the first significant digit */
    }
    if (!nonzero)
        return 0;
    if (i < len) {
        i++;
        if (i < len && (s[i] == '+' || s[i] == '-'))
            neg_e = s[i++] == '-';
        for (; i < len && e <= 100000; i++)
            e = e * 10 + (s[i] - '0');
        if (neg_e)
            e = -e;
    }
    /* 12.5e3: 2 + 3; 0.005e5: the first significant digit is the 3rd after the point: 5 - 2. */
    long d = ip > 0 ? ip + e : e - frac0;
    return d > 0 ? d : 0;
}

/* The value of the JSON text [s, e) (checked already) into out. 0 or -1 (err). */
static int sqlh_json_convert(const sqlh_src_t *src, const char *s, size_t len, sqlh_buf_t *buf,
                             sqlh_val_t *out, char *err, size_t errlen)
{
    sqlh_js_t j = {s, len, 0, src, false, 0, 0, err, errlen};
    bool integer;

    out->s = s;
    out->len = len;
    switch (s[0]) {
    case '"':
        if (sqlh_js_string(&j, buf) != 0)
            return -1;
        out->kind = SQLH_VAL_TEXT;
        out->s = buf->p ? buf->p : "";
        out->len = buf->len;
        return 0;
    case 't':
    case 'f':
        out->kind = SQLH_VAL_INT;
        out->i = s[0] == 't';
        return 0;
    case 'n':
        out->kind = SQLH_VAL_NULL;
        return 0;
    case '{':
    case '[':
        out->kind = SQLH_VAL_TEXT; /* the JSON text as the producer wrote it */
        return 0;
    default:
        if (sqlh_js_number(&j, &integer) != 0)
            return -1;
        out->kind = SQLH_VAL_DECIMAL;
        if (integer && len <= 20) {
            char num[24], *end;
            memcpy(num, s, len);
            num[len] = '\0';
            errno = 0;
            long long v = strtoll(num, &end, 10);
            if (errno == 0 && *end == '\0') {
                out->kind = SQLH_VAL_INT;
                out->i = v;
            }
        }
        /* An integer past 64 bits stays text: DECIMAL(65) holds it exactly. */
        return 0;
    }
}

int sqlh_json_at(const sqlh_src_t *src, const char *body, size_t len, sqlh_buf_t *buf,
                 sqlh_val_t *out, char *err, size_t errlen)
{
    sqlh_js_t j = {body, len, 0, src, false, 0, 0, err, errlen};

    if (len == 0) {
        snprintf(err, errlen, "body is not JSON: it is empty");
        return -1;
    }
    if (sqlh_js_value(&j, 0, 0) != 0)
        return -1;
    sqlh_js_ws(&j);
    if (j.pos != len)
        return sqlh_js_bad(&j, "text after the value");
    if (!j.found)
        return 0;
    return sqlh_json_convert(src, body + j.start, j.end - j.start, buf, out, err, errlen) == 0 ? 1
                                                                                               : -1;
}

/* The header name of msg, or NULL. */
static const idemd_header_t *sqlh_header(const idemd_message_t *msg, const char *name)
{
    for (size_t i = 0; i < msg->n_headers; i++)
        if (msg->headers[i].key && strcmp(msg->headers[i].key, name) == 0)
            return &msg->headers[i];
    return NULL;
}

static void sqlh_text(sqlh_val_t *out, const char *s, size_t len)
{
    out->kind = SQLH_VAL_TEXT;
    out->s = s;
    out->len = len;
}

int sqlh_value(const sqlh_src_t *src, const idemd_message_t *msg, sqlh_buf_t *buf, sqlh_val_t *out,
               char *err, size_t errlen)
{
    const char *what = NULL; /* set when the value is absent */
    const idemd_header_t *h;
    int r;

    memset(out, 0, sizeof(*out));
    switch (src->kind) {
    case SQLH_SRC_JSON:
        r = sqlh_json_at(src, msg->body, msg->body_len, buf, out, err, errlen);
        if (r < 0)
            return -1;
        if (r == 0)
            what = "no such field in the JSON body";
        break;
    case SQLH_SRC_HEADER:
        h = sqlh_header(msg, src->arg);
        if (h == NULL) {
            what = "no such header";
        } else if (h->type == IDEMD_HEADER_STRING) {
            sqlh_text(out, h->str ? h->str : "", h->len);
        } else if (h->type == IDEMD_HEADER_INT) {
            out->kind = SQLH_VAL_INT;
            out->i = h->i;
        } else {
            snprintf(err, errlen,
                     "parameter header:%s: the header is not a string or an integer (a table, "
                     "array or float is not bound)",
                     src->arg);
            return -1;
        }
        break;
    case SQLH_SRC_MSG_ID:
        if (msg->msg_id_len == 0)
            what = "the message has no id";
        else
            sqlh_text(out, msg->msg_id, msg->msg_id_len);
        break;
    case SQLH_SRC_ROUTING_KEY:
        sqlh_text(out, msg->routing_key ? msg->routing_key : "",
                  msg->routing_key ? strlen(msg->routing_key) : 0);
        break;
    case SQLH_SRC_EXCHANGE:
        sqlh_text(out, msg->exchange ? msg->exchange : "",
                  msg->exchange ? strlen(msg->exchange) : 0);
        break;
    case SQLH_SRC_TIMESTAMP:
        if (!msg->has_timestamp) {
            what = "the message has no timestamp property";
        } else {
            out->kind = SQLH_VAL_INT;
            out->i = msg->timestamp;
        }
        break;
    case SQLH_SRC_CONTENT_TYPE:
        if (msg->content_type == NULL || msg->content_type[0] == '\0')
            what = "the message has no content_type property";
        else
            sqlh_text(out, msg->content_type, strlen(msg->content_type));
        break;
    case SQLH_SRC_BODY:
        out->kind = SQLH_VAL_BLOB;
        out->s = msg->body_len ? msg->body : "";
        out->len = msg->body_len;
        break;
    case SQLH_SRC_CONST:
        sqlh_text(out, src->arg, strlen(src->arg));
        break;
    }
    if (what == NULL)
        return 0;
    if (src->optional) {
        out->kind = SQLH_VAL_NULL;
        return 0;
    }
    snprintf(err, errlen, "required parameter %s%s missing: %s",
             src->kind == SQLH_SRC_JSON     ? "json:"
             : src->kind == SQLH_SRC_HEADER ? "header:"
                                            : "msg:",
             src->arg                          ? src->arg
             : src->kind == SQLH_SRC_MSG_ID    ? "id"
             : src->kind == SQLH_SRC_TIMESTAMP ? "timestamp"
                                               : "content_type",
             what);
    return -1;
}

/* A decimal count at *p (advanced past it). 0 or -1. */
static int sqlh_count(const char **p, unsigned long long *v)
{
    char *end;
    if (**p < '0' || **p > '9')
        return -1;
    errno = 0;
    *v = strtoull(*p, &end, 10);
    if (errno != 0)
        return -1;
    *p = end;
    return 0;
}

int sqlh_expect_parse(const char *text, sqlh_expect_t *out, char *err, size_t errlen)
{
    const char *p = text;

    if (strncmp(p, ">=", 2) == 0) {
        p += 2;
        if (sqlh_count(&p, &out->lo) != 0 || *p != '\0')
            goto bad;
        out->hi = ULLONG_MAX;
        return 0;
    }
    if (sqlh_count(&p, &out->lo) != 0)
        goto bad;
    out->hi = out->lo;
    if (strncmp(p, "..", 2) == 0) {
        p += 2;
        if (sqlh_count(&p, &out->hi) != 0 || out->hi < out->lo)
            goto bad;
    }
    if (*p == '\0')
        return 0;
bad:
    snprintf(err, errlen,
             "\"%s\" is not an affected-row rule (expected \"N\", \"A..B\" with A <= B, or "
             "\">=N\")",
             text);
    return -1;
}
