/* minor0.c: a test plugin that says it was built for ABI 1.0, which every 1.x idemd must load. */
#include <idemd/handler.h>

/* Reads only the 1.0 fields of the message, as a plugin built then would. */
static idemd_result_t minor0_handle(void *state, struct st_mysql *db, const idemd_message_t *msg,
                                    char *err, size_t errlen)
{
    (void)state;
    (void)db;
    (void)err;
    (void)errlen;
    return msg->msg_id != NULL && msg->queue != NULL ? IDEMD_RESULT_OK : IDEMD_RESULT_REJECT;
}

const idemd_handler_t idemd_handler = {
    .abi_major = 1,
    .abi_minor = 0,
    .name = "minor0",
    .handle = minor0_handle,
};
