/* calls_log_msg.c: a test plugin that calls idemd's own log_msg() instead of the host table, which
 * must fail to load: idemd exports no symbols. */
#include <idemd/handler.h>

/* idemd's internal logger (src/log.h), declared here as a careless plugin would. */
void log_msg(int level, const char *fmt, ...);

static idemd_result_t calls_log_msg_handle(void *state, struct st_mysql *db,
                                           const idemd_message_t *msg, char *err, size_t errlen)
{
    (void)state;
    (void)db;
    (void)err;
    (void)errlen;
    log_msg(6, "handling %s", msg->msg_id);
    return IDEMD_RESULT_OK;
}

const idemd_handler_t idemd_handler = {
    .abi_major = IDEMD_HANDLER_ABI_MAJOR,
    .abi_minor = IDEMD_HANDLER_ABI_MINOR,
    .name = "calls_log_msg",
    .handle = calls_log_msg_handle,
};
