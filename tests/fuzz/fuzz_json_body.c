/* fuzz_json_body.c: libFuzzer target: the body reader (json_body.c) against jansson, an
 * independent strict parser, on accept/reject and on the value found at a path. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "json_body.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/*
 * jansson with JSON_REJECT_DUPLICATES (names compared decoded, as ours), JSON_DECODE_ANY (a
 * scalar body) and JSON_ALLOW_NUL (U+0000 in values; in names it refuses, as ours). The
 * deliberate differences, not compared:
 * - nesting: ours stops at JSON_BODY_DEPTH_MAX (64), jansson at 2048;
 * - numbers: jansson refuses an integer past 64 bits and a real past a double ("too big
 *   integer", "real number overflow"); ours keeps their text (an exact DECIMAL).
 * - U+0000 in a string value: the body is good in both; ours refuses the string only when it is
 *   taken (json_body_string), checked below against the NUL in jansson's string.
 * - a raw NUL byte: never JSON to ours; jansson 2.14 skips one right after a number or a literal
 *   ("[1\0]", "-5\0" load), so a body with a raw NUL byte that jansson takes is not compared.
 */
#define FUZZ_FLAGS (JSON_REJECT_DUPLICATES | JSON_DECODE_ANY | JSON_ALLOW_NUL)
#define FUZZ_SEGS 16

/* A step of digits (under 10 of them) as an array index, else -1. */
static long fuzz_index(const char *p, size_t l)
{
    long idx = l > 0 && l < 10 ? 0 : -1;
    for (size_t j = 0; j < l && idx >= 0; j++)
        idx = p[j] >= '0' && p[j] <= '9' ? idx * 10 + (p[j] - '0') : -1;
    return idx;
}

/* The path text p[0..n) (dots between steps; a step of digits is an index too) into segs. */
static int fuzz_path(const char *p, size_t n, json_body_seg_t *segs)
{
    int k = 0;
    size_t i = 0;

    if (n == 0)
        return 0;
    for (;;) {
        size_t l = 0;
        while (i + l < n && p[i + l] != '.')
            l++;
        segs[k++] = (json_body_seg_t){p + i, l, fuzz_index(p + i, l), false};
        i += l;
        if (i >= n || k == FUZZ_SEGS)
            return k;
        i++; /* the dot; a final one makes an empty last step */
    }
}

/* jansson's value at segs, or NULL (borrowed from root). */
static json_t *fuzz_at(json_t *v, const json_body_seg_t *segs, int n)
{
    for (int i = 0; i < n && v != NULL; i++) {
        if (json_is_object(v))
            v = json_object_getn(v, segs[i].name, segs[i].len);
        else if (json_is_array(v) && segs[i].index >= 0)
            v = json_array_get(v, (size_t)segs[i].index);
        else
            v = NULL;
    }
    return v;
}

/* A difference jansson has by design (above), judged from its error and the body. */
static bool fuzz_excused(const char *ours, const json_error_t *jerr, bool jansson_ok,
                         const char *body, size_t len)
{
    if (strstr(ours, "nested too deep"))
        return true;
    if (jansson_ok && len > 0 && memchr(body, '\0', len) != NULL)
        return true;
    return !jansson_ok && (strstr(jerr->text, "too big") || strstr(jerr->text, "overflow"));
}

/* The value we found at [s, e) is jansson's v, and a string decodes to the same bytes. */
static void fuzz_same_value(const char *s, size_t n, json_t *v)
{
    json_error_t jerr;
    json_t *mine = json_loadb(s, n, FUZZ_FLAGS, &jerr);
    json_body_buf_t buf = {0};
    char err[256];

    if (mine == NULL) {
        if (!strstr(jerr.text, "too big") && !strstr(jerr.text, "overflow"))
            abort(); /* our span is not a JSON value */
    } else if (!json_equal(mine, v)) {
        abort();
    }
    json_decref(mine);
    if (json_is_string(v)) {
        int r = json_body_string(s, n, &buf, err, sizeof(err));
        size_t jl = json_string_length(v);
        bool has_nul = memchr(json_string_value(v), '\0', jl) != NULL;
        if ((r != 0) != has_nul)
            abort(); /* U+0000 refused exactly when the string holds it */
        if (r == 0 && (buf.len != jl || (jl && memcmp(buf.p, json_string_value(v), jl) != 0)))
            abort();
    }
    json_body_buf_free(&buf);
}

/* The input is a path, '\n', then the body. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nl = memchr(data, '\n', size);
    size_t plen = nl ? (size_t)(nl - data) : 0;
    size_t blen = nl ? size - plen - 1 : size;
    char *body = malloc(blen ? blen : 1); /* exactly blen bytes: ASan sees a read past it */
    json_body_seg_t segs[FUZZ_SEGS];
    json_error_t jerr;
    char err[512] = "";
    size_t s = 0, e = 0;

    if (body == NULL)
        abort();
    if (blen)
        memcpy(body, nl ? nl + 1 : data, blen);
    int n = fuzz_path((const char *)data, plen, segs);
    int r = json_body_find(body, blen, segs, n, &s, &e, err, sizeof(err));
    json_t *root = json_loadb(body, blen, FUZZ_FLAGS, &jerr);
    if (r < 0 && err[0] == '\0')
        abort(); /* a refusal always says why */
    if ((r >= 0) != (root != NULL) && !fuzz_excused(err, &jerr, root != NULL, body, blen))
        abort();
    if (r >= 0 && root != NULL) {
        json_t *v = fuzz_at(root, segs, n);
        if ((r == 1) != (v != NULL))
            abort();
        if (r == 1 && (e <= s || e > blen))
            abort();
        if (r == 1)
            fuzz_same_value(body + s, e - s, v);
    }
    json_decref(root);
    free(body);
    return 0;
}
