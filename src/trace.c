/* trace.c: W3C Trace Context (traceparent, tracestate) and W3C Baggage: parsing, validation and
 * child spans.
 */
#include "trace.h"

#include <string.h>

static bool trace_ows(char c)
{
    return c == ' ' || c == '\t';
}

/* Drop spaces and tabs at both ends of s[0..*len). */
static const char *trace_trim(const char *s, size_t *len)
{
    while (*len > 0 && trace_ows(s[0]))
        s++, (*len)--;
    while (*len > 0 && trace_ows(s[*len - 1]))
        (*len)--;
    return s;
}

static bool trace_lchex(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
}

/* Whether s[0..n) is lowercase hex and, with zero_ok false, not all zeros. */
static bool trace_hex(const char *s, size_t n, bool zero_ok)
{
    bool nonzero = false;
    for (size_t i = 0; i < n; i++) {
        if (!trace_lchex(s[i]))
            return false;
        nonzero |= s[i] != '0';
    }
    return zero_ok || nonzero;
}

static unsigned trace_hexval(char c)
{
    return c <= '9' ? (unsigned)(c - '0') : (unsigned)(c - 'a' + 10);
}

int trace_parent_parse(const char *s, size_t len, trace_parent_t *out)
{
    if (s == NULL)
        return -1;
    s = trace_trim(s, &len);
    if (len < TRACE_PARENT_LEN || !trace_hex(s, 2, true) || s[2] != '-')
        return -1;
    if (s[0] == 'f' && s[1] == 'f')
        return -1; /* version 255 is invalid */
    bool v00 = s[0] == '0' && s[1] == '0';
    if (v00 && len != TRACE_PARENT_LEN)
        return -1;
    /* A higher version: its first 55 characters in the 00 layout, then nothing or '-'. */
    if (!v00 && len > TRACE_PARENT_LEN && s[TRACE_PARENT_LEN] != '-')
        return -1;
    if (!trace_hex(s + 3, TRACE_ID_HEX, false) || s[35] != '-' ||
        !trace_hex(s + 36, TRACE_SPAN_HEX, false) || s[52] != '-' || !trace_hex(s + 53, 2, true))
        return -1;
    memcpy(out->trace_id, s + 3, TRACE_ID_HEX);
    out->trace_id[TRACE_ID_HEX] = '\0';
    memcpy(out->parent_id, s + 36, TRACE_SPAN_HEX);
    out->parent_id[TRACE_SPAN_HEX] = '\0';
    out->flags = (unsigned char)(trace_hexval(s[53]) << 4 | trace_hexval(s[54]));
    return 0;
}

static bool trace_lcalpha(char c)
{
    return c >= 'a' && c <= 'z';
}

static bool trace_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* lcalpha / DIGIT / "_" / "-" / "*" / "/": the characters of a tracestate key after its first. */
static bool trace_keychar(char c)
{
    return trace_lcalpha(c) || trace_digit(c) || c == '_' || c == '-' || c == '*' || c == '/';
}

/* Whether k[0..n) is a tracestate key: simple-key, or tenant-id "@" system-id. */
static bool trace_state_key(const char *k, size_t n)
{
    const char *at = memchr(k, '@', n);
    if (at == NULL) {
        if (n < 1 || n > 256 || !trace_lcalpha(k[0]))
            return false;
        for (size_t i = 1; i < n; i++)
            if (!trace_keychar(k[i]))
                return false;
        return true;
    }
    size_t tn = (size_t)(at - k), sn = n - tn - 1;
    if (tn < 1 || tn > 241 || sn < 1 || sn > 14)
        return false;
    if (!trace_lcalpha(k[0]) && !trace_digit(k[0]))
        return false;
    for (size_t i = 1; i < tn; i++)
        if (!trace_keychar(k[i]))
            return false;
    if (!trace_lcalpha(at[1]))
        return false;
    for (size_t i = 1; i < sn; i++)
        if (!trace_keychar(at[1 + i]))
            return false;
    return true;
}

/* Whether v[0..n) is a tracestate value: 1..256 of %x20-2B / %x2D-3C / %x3E-7E, not ending in
 * a space. */
static bool trace_state_value(const char *v, size_t n)
{
    if (n < 1 || n > 256 || v[n - 1] == ' ')
        return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)v[i];
        if (c < 0x20 || c > 0x7e || c == ',' || c == '=')
            return false;
    }
    return true;
}

bool trace_state_valid(const char *s, size_t len)
{
    const char *keys[TRACE_STATE_MEMBERS];
    size_t klen[TRACE_STATE_MEMBERS];
    int members = 0;

    if (s == NULL || len > TRACE_STATE_MAX)
        return false;
    size_t i = 0;
    for (;;) {
        size_t end = i;
        while (end < len && s[end] != ',')
            end++;
        size_t n = end - i;
        const char *m = trace_trim(s + i, &n);
        if (n > 0) { /* an empty member (only spaces) is allowed and ignored */
            const char *eq = memchr(m, '=', n);
            if (eq == NULL || members == TRACE_STATE_MEMBERS)
                return false;
            size_t kn = (size_t)(eq - m);
            if (!trace_state_key(m, kn) || !trace_state_value(eq + 1, n - kn - 1))
                return false;
            for (int j = 0; j < members; j++)
                if (klen[j] == kn && memcmp(keys[j], m, kn) == 0)
                    return false; /* a key may appear once */
            keys[members] = m;
            klen[members++] = kn;
        }
        if (end == len)
            break;
        i = end + 1;
    }
    return true;
}

/* RFC 7230 tchar. */
static bool trace_tchar(char c)
{
    switch (c) {
    case '!':
    case '#':
    case '$':
    case '%':
    case '&':
    case '\'':
    case '*':
    case '+':
    case '-':
    case '.':
    case '^':
    case '_':
    case '`':
    case '|':
    case '~':
        return true;
    default:
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || trace_digit(c);
    }
}

/* W3C Baggage baggage-octet: %x21 / %x23-2B / %x2D-3A / %x3C-5B / %x5D-7E. */
static bool trace_bagchar(char ch)
{
    unsigned char c = (unsigned char)ch;
    return c >= 0x21 && c <= 0x7e && c != '"' && c != ',' && c != ';' && c != '\\';
}

/* Whether p[0..n) (trimmed) is key OWS "=" OWS value, or with key_alone a bare key. */
static bool trace_bag_pair(const char *p, size_t n, bool key_alone)
{
    p = trace_trim(p, &n);
    const char *eq = memchr(p, '=', n);
    size_t kn = eq ? (size_t)(eq - p) : n;
    const char *k = p;
    size_t kl = kn;
    k = trace_trim(k, &kl);
    if (kl == 0 || (eq == NULL && !key_alone))
        return false;
    for (size_t i = 0; i < kl; i++)
        if (!trace_tchar(k[i]))
            return false;
    if (eq == NULL)
        return true;
    size_t vl = n - kn - 1;
    const char *v = trace_trim(eq + 1, &vl);
    for (size_t i = 0; i < vl; i++)
        if (!trace_bagchar(v[i]))
            return false;
    return true;
}

bool trace_baggage_valid(const char *s, size_t len)
{
    int members = 0;
    if (s == NULL || len > TRACE_BAGGAGE_MAX)
        return false;
    size_t i = 0;
    for (;;) {
        size_t end = i;
        while (end < len && s[end] != ',')
            end++;
        if (++members > TRACE_BAGGAGE_MEMBERS)
            return false;
        /* member = pair *( ";" property ), property = pair / key */
        size_t j = i;
        bool first = true;
        for (;;) {
            size_t pe = j;
            while (pe < end && s[pe] != ';')
                pe++;
            if (!trace_bag_pair(s + j, pe - j, !first))
                return false;
            first = false;
            if (pe == end)
                break;
            j = pe + 1;
        }
        if (end == len)
            break;
        i = end + 1;
    }
    return true;
}

void trace_span_id(uint64_t r, char out[TRACE_SPAN_HEX + 1])
{
    static const char hex[] = "0123456789abcdef";
    if (r == 0)
        r = 1;
    /* By hand, not snprintf: this runs for every traced delivery and onward message. */
    for (int i = TRACE_SPAN_HEX - 1; i >= 0; i--, r >>= 4)
        out[i] = hex[r & 15];
    out[TRACE_SPAN_HEX] = '\0';
}

void trace_parent_format(const char *trace_id, const char *span_id, unsigned char flags,
                         char out[TRACE_PARENT_LEN + 1])
{
    static const char hex[] = "0123456789abcdef";
    memcpy(out, "00-", 3);
    memcpy(out + 3, trace_id, TRACE_ID_HEX);
    out[35] = '-';
    memcpy(out + 36, span_id, TRACE_SPAN_HEX);
    out[52] = '-';
    out[53] = hex[flags >> 4];
    out[54] = hex[flags & 15];
    out[TRACE_PARENT_LEN] = '\0';
}

void trace_ctx_read(trace_ctx_t *c, const char *tp, size_t tp_len, const char *ts, size_t ts_len,
                    const char *bg, size_t bg_len, uint64_t span_random)
{
    trace_parent_t p;
    memset(c, 0, sizeof(*c));
    if (tp != NULL && trace_parent_parse(tp, tp_len, &p) == 0) {
        c->has = true;
        memcpy(c->trace_id, p.trace_id, sizeof(c->trace_id));
        memcpy(c->parent_id, p.parent_id, sizeof(c->parent_id));
        c->flags = p.flags;
        trace_span_id(span_random, c->span_id);
        trace_parent_format(p.trace_id, p.parent_id, p.flags, c->traceparent);
        if (ts != NULL) {
            size_t n = ts_len;
            const char *t = trace_trim(ts, &n);
            if (n > 0 && trace_state_valid(t, n)) {
                c->state = t;
                c->state_len = n;
            }
        }
    }
    if (bg != NULL) {
        size_t n = bg_len;
        const char *b = trace_trim(bg, &n);
        if (n > 0 && trace_baggage_valid(b, n)) {
            c->baggage = b;
            c->baggage_len = n;
        }
    }
}

bool trace_child(const trace_ctx_t *c, uint64_t span_random, char out[TRACE_PARENT_LEN + 1])
{
    char span[TRACE_SPAN_HEX + 1];
    out[0] = '\0';
    if (!c->has)
        return false;
    /* The new span (sending the message) is a child of the processing span; it is the parent
     * the receiver sees. */
    trace_span_id(span_random, span);
    trace_parent_format(c->trace_id, span, c->flags, out);
    return true;
}

uint64_t trace_rng_next(trace_rng_t *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
