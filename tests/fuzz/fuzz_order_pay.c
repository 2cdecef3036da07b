/* fuzz_order_pay.c: libFuzzer target: order_pay's body parser (no database), built from the
 * plugin's own source so the code under test is the shipped one. */
#include "../../src/plugins/order_pay.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static json_tokener *tok;
    char err[256];
    long long id = 0;

    if (tok == NULL && (tok = json_tokener_new()) == NULL)
        abort();
    memset(err, 'x', sizeof(err));
    if (order_pay_parse_body(tok, (const char *)data, size, &id, err, sizeof(err)) == 0) {
        if (id <= 0)
            abort(); /* only positive ids are accepted */
    } else if (memchr(err, '\0', sizeof(err)) == NULL || err[0] == '\0') {
        abort(); /* a rejection always has a reason */
    }
    return 0;
}
