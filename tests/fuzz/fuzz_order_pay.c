/* fuzz_order_pay.c: libFuzzer target: order_pay's body parser (no database), built from the
 * plugin's own source so the code under test is the shipped one, reading bodies through the
 * host's real body_value (plugin_host.c, json_body.c). */
#include "../../src/plugins/order_pay.c"

#include "json_body.h"
#include "plugin.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const idemd_host_t host = {
        .abi_major = IDEMD_HANDLER_ABI_MAJOR,
        .abi_minor = IDEMD_HANDLER_ABI_MINOR,
        .body_value = plugin_host_body_value,
    };
    idemd_message_t msg;
    char err[256], why[256];
    long long id = 0;
    size_t start, end;

    memset(&msg, 0, sizeof(msg));
    msg.body = (const char *)data;
    msg.body_len = size;
    memset(err, 'x', sizeof(err));
    if (order_pay_parse_body(&host, &msg, &id, err, sizeof(err)) == 0) {
        if (id <= 0)
            abort(); /* only positive ids are accepted */
        /* The one reader: a body order_pay takes is one the reader takes whole. */
        if (json_body_find(msg.body, size, NULL, 0, &start, &end, why, sizeof(why)) != 1)
            abort();
    } else if (memchr(err, '\0', sizeof(err)) == NULL || err[0] == '\0') {
        abort(); /* a rejection always has a reason */
    }
    return 0;
}
