/* fuzz_printable.c: libFuzzer target: the escaping of ids for logs (delivery_id_printable, a
 * logfmt value): the output is terminated, fits, holds printable ASCII only, and decodes back. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "delivery.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int fuzz_hex(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/*
 * How many bytes of id the inside of a quoted value out[0..n) stands for
 * (escapes \" \\ \n \r \t \xNN, other bytes as they are), or -1 when it is
 * not a prefix of id or not such an escaping.
 */
static long fuzz_decode(const char *out, size_t n, const char *id, size_t len)
{
    size_t o = 0, in = 0;

    while (o < n) {
        int c = (unsigned char)out[o];
        size_t step = 1;
        if (c == '"')
            return -1; /* a bare quote inside the value would end it */
        if (c == '\\') {
            if (o + 1 >= n)
                return -1;
            step = 2;
            switch (out[o + 1]) {
            case '"':
            case '\\':
                c = out[o + 1];
                break;
            case 'n':
                c = '\n';
                break;
            case 'r':
                c = '\r';
                break;
            case 't':
                c = '\t';
                break;
            case 'x':
                if (o + 3 >= n || fuzz_hex(out[o + 2]) < 0 || fuzz_hex(out[o + 3]) < 0)
                    return -1;
                c = fuzz_hex(out[o + 2]) * 16 + fuzz_hex(out[o + 3]);
                step = 4;
                break;
            default:
                return -1;
            }
        }
        if (in >= len || (unsigned char)id[in] != c)
            return -1;
        in++;
        o += step;
    }
    return (long)in;
}

/* The first byte chooses the output size (0..255); the rest is the id. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *out;
    size_t outlen, len;

    if (size == 0)
        return 0;
    outlen = data[0];
    len = size - 1;
    const char *id = (const char *)data + 1;
    /* Exactly outlen bytes, so that ASan sees a write past the end. */
    out = malloc(outlen ? outlen : 1);
    if (out == NULL)
        abort();
    if (delivery_id_printable(id, len, out, outlen) != out)
        abort();
    if (outlen == 0)
        goto done;
    size_t n = strnlen(out, outlen);
    if (n == outlen)
        abort(); /* not terminated within outlen */
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)out[i] < 0x20 || (unsigned char)out[i] >= 0x7f)
            abort();
    if (n > 0 && out[0] != '"') {
        /* Bare: the id itself, with nothing a logfmt reader would split or unescape. */
        if (n != len || memcmp(out, id, len) != 0)
            abort();
        for (size_t i = 0; i < n; i++)
            if (out[i] == ' ' || out[i] == '=' || out[i] == '\\')
                abort();
        goto done;
    }
    if (outlen < 8)
        goto done;
    /* Quoted: it decodes back to the whole input, or to a shorter prefix and "...". */
    if (n < 2 || out[n - 1] != '"')
        abort();
    const char *in = out + 1;
    size_t m = n - 2;
    if (fuzz_decode(in, m, id, len) != (long)len &&
        !(m >= 3 && memcmp(in + m - 3, "...", 3) == 0 && fuzz_decode(in, m - 3, id, len) >= 0 &&
          fuzz_decode(in, m - 3, id, len) < (long)len))
        abort();
done:
    free(out);
    return 0;
}
