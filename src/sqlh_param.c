/* sqlh_param.c: the SQL handler's parameter sources, parsed from the config, and the exact value
 * each gives for a message (the body read by json_body.c, the one reader of bodies: numbers
 * keep their digits). Pure: no database, no broker; unit-tested and fuzzed.
 */
#include "sqlh_param.h"

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* json-c would turn 0.10 into a double and 2^63 into a saturated int64: json_body.c reads the
 * text itself, so a number binds with the digits the producer wrote. */

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
    json_body_buf_free(b);
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
    /* JSONPath's root ($.price, $[0]) is the most common wrong spelling: every message would
     * miss it (a member named "$" is refused with it). Say what to write instead. */
    if (p[0] == '$' && (p[1] == '\0' || p[1] == '.' || p[1] == '[')) {
        snprintf(err, errlen,
                 "json:%s: a JSONPath; idemd's paths start at the body's top level without $: "
                 "write json:%s",
                 s->arg,
                 p[1] == '.'   ? p + 2
                 : p[1] == '[' ? p + 1
                               : "field");
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

/* ---------- values from the JSON body (json_body.c reads it) ---------- */

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

/* The value of the JSON text [s, s + len) (checked already) into out. 0 or -1 (err). */
static int sqlh_json_convert(const sqlh_src_t *src, const char *s, size_t len, sqlh_buf_t *buf,
                             sqlh_val_t *out, char *err, size_t errlen)
{
    char why[200];

    out->s = s;
    out->len = len;
    switch (json_body_kind(s)) {
    case JSON_BODY_STRING:
        if (json_body_string(s, len, buf, why, sizeof(why)) != 0) {
            snprintf(err, errlen, "parameter json:%s: %s", src->arg, why);
            return -1;
        }
        out->kind = SQLH_VAL_TEXT;
        out->s = buf->p ? buf->p : "";
        out->len = buf->len;
        return 0;
    case JSON_BODY_TRUE:
    case JSON_BODY_FALSE:
        out->kind = SQLH_VAL_INT;
        out->i = s[0] == 't';
        return 0;
    case JSON_BODY_NULL:
        out->kind = SQLH_VAL_NULL;
        return 0;
    case JSON_BODY_OBJECT:
    case JSON_BODY_ARRAY:
        out->kind = SQLH_VAL_TEXT; /* the JSON text as the producer wrote it */
        return 0;
    case JSON_BODY_NUMBER:
        break;
    }
    out->kind = SQLH_VAL_DECIMAL;
    if (json_body_is_integer(s, len) && len <= 20) {
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

int sqlh_json_at(const sqlh_src_t *src, const char *body, size_t len, sqlh_buf_t *buf,
                 sqlh_val_t *out, char *err, size_t errlen)
{
    size_t start, end;
    int r = json_body_find(body, len, src->segs, src->n_segs, &start, &end, err, errlen);

    if (r <= 0)
        return r;
    return sqlh_json_convert(src, body + start, end - start, buf, out, err, errlen) == 0 ? 1 : -1;
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
