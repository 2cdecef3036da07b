/* fuzz_delivery.c: libFuzzer target: AMQP basic properties decoded from wire bytes (as rabbitmq-c
 * does for a broker's content header), then idemd's id extraction and header flattening. */
#include "../../src/amqp_compat.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "delivery.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Every byte of [p, p + n) is readable (ASan checks it). */
static unsigned fuzz_touch(const void *p, size_t n)
{
    unsigned sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += ((const unsigned char *)p)[i];
    return sum;
}

/* delivery_id with id_header, checking what it promises. */
static void fuzz_id(const amqp_basic_properties_t *p, const char *id_header)
{
    char id[DELIVERY_ID_MAX + 1], err[256], shown[4 * DELIVERY_ID_MAX + 8];
    size_t len = 9999;

    memset(err, 'x', sizeof(err));
    if (delivery_id(p, id_header, id, &len, err, sizeof(err)) == 0) {
        if (len == 0 || len > DELIVERY_ID_MAX || id[len] != '\0')
            abort();
        delivery_id_printable(id, len, shown, sizeof(shown));
    } else if (memchr(err, '\0', sizeof(err)) == NULL || err[0] == '\0') {
        abort();
    }
    (void)delivery_header_int(p, id_header ? id_header : "x-attempt");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    amqp_pool_t pool;
    amqp_bytes_t encoded = {size, (void *)data};
    void *decoded = NULL;
    volatile unsigned sink = 0;

    init_amqp_pool(&pool, 4096);
    if (amqp_decode_properties(AMQP_BASIC_CLASS, &pool, encoded, &decoded) == 0 &&
        decoded != NULL) {
        const amqp_basic_properties_t *p = decoded;
        idemd_header_t hs[16];
        char scratch[512], name[300];

        fuzz_id(p, NULL);
        fuzz_id(p, "x-id");
        if ((p->_flags & AMQP_BASIC_HEADERS_FLAG) && p->headers.num_entries > 0) {
            /* A header that exists, so the header paths are reached. */
            amqp_bytes_t k = p->headers.entries[p->headers.num_entries - 1].key;
            size_t n = k.len < sizeof(name) - 1 ? k.len : sizeof(name) - 1;
            memcpy(name, k.bytes, n);
            name[n] = '\0';
            fuzz_id(p, name);
        }
        int deep = delivery_too_deep(p);
        if (deep < -1 ||
            deep >= ((p->_flags & AMQP_BASIC_HEADERS_FLAG) ? p->headers.num_entries : 0))
            abort();
        size_t n = delivery_headers(p, hs, 16, scratch, sizeof(scratch));
        if (n > 16)
            abort();
        for (size_t i = 0; i < n; i++) {
            sink += fuzz_touch(hs[i].key, strlen(hs[i].key));
            if (hs[i].type == IDEMD_HEADER_STRING)
                sink += fuzz_touch(hs[i].str, hs[i].len);
        }
    }
    empty_amqp_pool(&pool);
    (void)sink;
    return 0;
}
