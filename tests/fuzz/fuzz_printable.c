/* fuzz_printable.c: libFuzzer target: the escaping of ids for logs (delivery_id_printable): the
 * output is terminated, fits, holds printable ASCII only, and decodes back to the input. */
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

/* How many bytes of id the escaped text out[0..n) stands for, or -1 when it is not a prefix. */
static long fuzz_decode(const char *out, size_t n, const char *id, size_t len)
{
    size_t o = 0, in = 0;

    while (o < n) {
        int c = (unsigned char)out[o];
        size_t step = 1;
        if (c == '\\') {
            if (o + 3 >= n || out[o + 1] != 'x' || fuzz_hex(out[o + 2]) < 0 ||
                fuzz_hex(out[o + 3]) < 0)
                return -1;
            c = fuzz_hex(out[o + 2]) * 16 + fuzz_hex(out[o + 3]);
            step = 4;
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
    if (outlen < 8)
        goto done;
    /* It decodes back to the whole input, or to a shorter prefix followed by "...". */
    if (fuzz_decode(out, n, id, len) != (long)len &&
        !(n >= 3 && memcmp(out + n - 3, "...", 3) == 0 && fuzz_decode(out, n - 3, id, len) >= 0 &&
          fuzz_decode(out, n - 3, id, len) < (long)len))
        abort();
done:
    free(out);
    return 0;
}
