/* wrong_abi.c: a test plugin that claims handler ABI 99.0, which idemd must refuse to load. */
#include <idemd/handler.h>

static idemd_result_t wrong_abi_handle(void *state, struct st_mysql *db, const idemd_message_t *msg,
                                       char *err, size_t errlen)
{
    (void)state;
    (void)db;
    (void)msg;
    (void)err;
    (void)errlen;
    return IDEMD_RESULT_OK;
}

const idemd_handler_t idemd_handler = {
    .abi_major = 99,
    .abi_minor = 0,
    .name = "wrong_abi",
    .handle = wrong_abi_handle,
};
