/* descriptor.c: one test plugin built once per variant (TEST_VARIANTS in the Makefile), each
 * with an idemd_handler descriptor that is old, wrong, or missing in one way.
 *
 * The variant's name comes as TP_VARIANT ("minor0", "wrong_abi", ...); its -D flags:
 *   TP_ABI_MAJOR, TP_ABI_MINOR  the ABI the descriptor claims (default: the host's)
 *   TP_EMPTY_NAME               the handler's name is "" (default: TP_VARIANT)
 *   TP_NO_HANDLE                no handle() callback
 *   TP_SYMBOL                   the symbol's name (default idemd_handler)
 *   TP_CALLS_LOG_MSG            handle() calls idemd's own log_msg(), which a plugin cannot reach
 */
#include <idemd/handler.h>

#ifndef TP_ABI_MAJOR
#define TP_ABI_MAJOR IDEMD_HANDLER_ABI_MAJOR
#endif
#ifndef TP_ABI_MINOR
#define TP_ABI_MINOR IDEMD_HANDLER_ABI_MINOR
#endif
#ifndef TP_SYMBOL
#define TP_SYMBOL idemd_handler
#endif

#ifdef TP_CALLS_LOG_MSG
/* idemd's internal logger (src/log.h), declared here as a careless plugin would. */
void log_msg(int level, const char *fmt, ...);
#endif

#ifndef TP_NO_HANDLE
/* Reads only the 1.0 fields of the message, as a plugin built then would. */
static idemd_result_t tp_handle(void *state, MYSQL *db, const idemd_message_t *msg, char *err,
                                size_t errlen)
{
    (void)state;
    (void)db;
    (void)err;
    (void)errlen;
#ifdef TP_CALLS_LOG_MSG
    log_msg(6, "handling %s", msg->msg_id);
#endif
    return msg->msg_id != NULL && msg->queue != NULL ? IDEMD_RESULT_OK : IDEMD_RESULT_REJECT;
}
#endif

const idemd_handler_t TP_SYMBOL = {
    .abi_major = TP_ABI_MAJOR,
    .abi_minor = TP_ABI_MINOR,
#ifdef TP_EMPTY_NAME
    .name = "",
#else
    .name = TP_VARIANT,
#endif
#ifndef TP_NO_HANDLE
    .handle = tp_handle,
#endif
};
