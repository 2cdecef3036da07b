/* fuzz_sqlh_param.c: libFuzzer target: the SQL handler's parameter sources (sqlh_src_parse,
 * sqlh_expect_parse) and JSON-to-parameter conversion (sqlh_value): never reads outside its
 * input, and what it binds is well formed (an integer's digits, a number's text, bytes inside
 * the body or its own buffer). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sqlh_param.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Whether s[0..n) is a JSON number's text. */
static int fuzz_number(const char *s, size_t n)
{
    if (n == 0)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!strchr("0123456789-+.eE", s[i]) || s[i] == '\0')
            return 0;
    return 1;
}

/* The input is a source, '\n', then the body. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nl = memchr(data, '\n', size);
    size_t slen = nl ? (size_t)(nl - data) : size;
    char *text = malloc(slen + 1);
    size_t blen = nl ? size - slen - 1 : 0;
    char *body = malloc(blen ? blen : 1); /* exactly blen bytes: ASan sees a read past it */
    sqlh_src_t src;
    sqlh_expect_t e;
    sqlh_buf_t buf = {0};
    sqlh_val_t v;
    char err[512];

    if (text == NULL || body == NULL)
        abort();
    memcpy(text, data, slen);
    text[slen] = '\0';
    if (blen)
        memcpy(body, nl + 1, blen);
    if (sqlh_expect_parse(text, &e, err, sizeof(err)) == 0 && e.lo > e.hi)
        abort();
    idemd_header_t h = {"h", IDEMD_HEADER_STRING, body, blen, 0};
    idemd_message_t m;
    memset(&m, 0, sizeof(m));
    m.msg_id = "id";
    m.msg_id_len = 2;
    m.body = body;
    m.body_len = blen;
    m.exchange = "";
    m.routing_key = "rk";
    m.content_type = "";
    m.headers = &h;
    m.n_headers = 1;
    /* A JSON path on its own against the body, and the source as written. */
    if (sqlh_src_parse(text, &src, err, sizeof(err)) == 0) {
        if (sqlh_value(&src, &m, &buf, &v, err, sizeof(err)) == 0) {
            const char *b = body, *p = buf.p;
            int in_body = v.s >= b && v.s + v.len <= b + blen;
            int in_buf = p && v.s >= p && v.s + v.len <= p + buf.len;
            int in_src = src.arg && v.s >= src.arg && v.s + v.len <= src.arg + strlen(src.arg);
            switch (v.kind) {
            case SQLH_VAL_NULL:
            case SQLH_VAL_INT:
                break;
            case SQLH_VAL_DECIMAL:
                if (!in_body || !fuzz_number(v.s, v.len) || sqlh_decimal_int_digits(v.s, v.len) < 0)
                    abort();
                break;
            case SQLH_VAL_TEXT:
            case SQLH_VAL_BLOB:
                if (v.len > 0 && !in_body && !in_buf && !in_src && v.s != m.msg_id &&
                    v.s != m.routing_key)
                    abort();
                break;
            }
        } else if (err[0] == '\0') {
            abort(); /* a failure always says why */
        }
        sqlh_src_free(&src);
    }
    sqlh_buf_free(&buf);
    free(text);
    free(body);
    return 0;
}
