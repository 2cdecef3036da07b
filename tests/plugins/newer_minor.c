/* newer_minor.c: a test plugin built for a newer minor ABI than idemd's (host minor + 1), which
 * idemd must refuse. */
#include <idemd/handler.h>

static idemd_result_t newer_minor_handle(void *state, struct st_mysql *db,
                                         const idemd_message_t *msg, char *err, size_t errlen)
{
    (void)state;
    (void)db;
    (void)msg;
    (void)err;
    (void)errlen;
    return IDEMD_RESULT_OK;
}

const idemd_handler_t idemd_handler = {
    .abi_major = IDEMD_HANDLER_ABI_MAJOR,
    .abi_minor = IDEMD_HANDLER_ABI_MINOR + 1,
    .name = "newer_minor",
    .handle = newer_minor_handle,
};
