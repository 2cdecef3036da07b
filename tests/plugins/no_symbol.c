/* no_symbol.c: a test shared object that exports no idemd_handler symbol, which idemd must refuse.
 */
#include <idemd/handler.h>

/* A near miss, so the test shows that only the exact symbol name counts. */
const idemd_handler_t idemd_handler_v1 = {
    .abi_major = IDEMD_HANDLER_ABI_MAJOR,
    .abi_minor = IDEMD_HANDLER_ABI_MINOR,
    .name = "no_symbol",
};
