/* no_handle.c: a test plugin whose handler has no handle() callback, which idemd must refuse. */
#include <idemd/handler.h>

const idemd_handler_t idemd_handler = {
    .abi_major = IDEMD_HANDLER_ABI_MAJOR,
    .abi_minor = IDEMD_HANDLER_ABI_MINOR,
    .name = "no_handle",
};
