/* fuzz_trace.c: libFuzzer target: W3C trace context and baggage parsing (trace_ctx_read,
 * trace_child): never reads outside its input, and what it accepts is well formed. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "trace.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Whether s is n lowercase hex digits and a NUL. */
static int fuzz_lchex(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return 0;
    return s[n] == '\0';
}

/* A copy of part (exactly len bytes, so that ASan sees a read past the end). */
static char *fuzz_part(const uint8_t *p, size_t len)
{
    char *c = malloc(len ? len : 1);
    if (c == NULL)
        abort();
    if (len)
        memcpy(c, p, len);
    return c;
}

/* The input is traceparent, tracestate and baggage separated by '\n'. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t start[3] = {0, 0, 0}, len[3] = {0, 0, 0};
    int k = 0;
    for (size_t i = 0; i <= size && k < 3; i++)
        if (i == size || (data[i] == '\n' && k < 2)) {
            len[k] = i - start[k];
            if (++k < 3)
                start[k] = i + 1;
        }
    char *tp = fuzz_part(data + start[0], len[0]);
    char *ts = fuzz_part(data + start[1], k > 1 ? len[1] : 0);
    char *bg = fuzz_part(data + start[2], k > 2 ? len[2] : 0);
    trace_ctx_t c;
    char child[TRACE_PARENT_LEN + 1];
    trace_ctx_read(&c, tp, len[0], ts, k > 1 ? len[1] : 0, bg, k > 2 ? len[2] : 0, size);
    if (c.has) {
        if (!fuzz_lchex(c.trace_id, 32) || !fuzz_lchex(c.span_id, 16) ||
            !fuzz_lchex(c.parent_id, 16) || strlen(c.traceparent) != TRACE_PARENT_LEN)
            abort();
        if (!trace_child(&c, 7, child) || strlen(child) != TRACE_PARENT_LEN ||
            memcmp(child + 3, c.trace_id, 32) != 0)
            abort();
        trace_parent_t p;
        if (trace_parent_parse(c.traceparent, TRACE_PARENT_LEN, &p) != 0)
            abort(); /* what it keeps parses again */
    } else if (c.state || c.trace_id[0] || c.span_id[0]) {
        abort(); /* no tracestate without a traceparent */
    }
    if (c.state && (c.state < ts || c.state + c.state_len > ts + len[1] ||
                    !trace_state_valid(c.state, c.state_len)))
        abort();
    if (c.baggage && (c.baggage < bg || c.baggage + c.baggage_len > bg + len[2] ||
                      c.baggage_len > TRACE_BAGGAGE_MAX))
        abort();
    free(tp);
    free(ts);
    free(bg);
    return 0;
}
