/* log.h: leveled logging to stderr (and later the journal), with a per-process context. */
#ifndef IDEMD_LOG_H
#define IDEMD_LOG_H

#include <stdarg.h>

typedef enum log_level {
    LOG_LEVEL_ERROR = 3,
    LOG_LEVEL_WARNING = 4,
    LOG_LEVEL_INFO = 6,
    LOG_LEVEL_DEBUG = 7,
} log_level_t;

/* Set the most verbose level that is printed (default INFO). */
void log_set_level(log_level_t level);
/* Parse "error", "warning", "info", "debug"; -1 if unknown. */
int log_level_parse(const char *name);
/* Context printed on every line of this process, e.g. "orders#1"; copied. */
void log_set_context(const char *ctx);

void log_msg(log_level_t level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void log_vmsg(log_level_t level, const char *fmt, va_list ap);

#define log_error(...) log_msg(LOG_LEVEL_ERROR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_LEVEL_WARNING, __VA_ARGS__)
#define log_info(...) log_msg(LOG_LEVEL_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_LEVEL_DEBUG, __VA_ARGS__)

#endif
