/* log.c: leveled logging to stderr with timestamp, pid and a per-process context. */
#include "log.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static log_level_t log_max = LOG_LEVEL_INFO;
static char log_ctx[64] = "main";

static const char *log_names[8] = {
    [LOG_LEVEL_ERROR] = "error",
    [LOG_LEVEL_WARNING] = "warning",
    [LOG_LEVEL_INFO] = "info",
    [LOG_LEVEL_DEBUG] = "debug",
};

void log_set_level(log_level_t level)
{
    log_max = level;
}

int log_level_parse(const char *name)
{
    for (int i = 0; i < 8; i++)
        if (log_names[i] && strcasecmp(name, log_names[i]) == 0)
            return i;
    return -1;
}

void log_set_context(const char *ctx)
{
    snprintf(log_ctx, sizeof(log_ctx), "%s", ctx);
}

void log_vmsg(log_level_t level, const char *fmt, va_list ap)
{
    if (level > log_max)
        return;
    char line[2048];
    struct timeval tv;
    struct tm tm;
    gettimeofday(&tv, NULL);
    localtime_r(&tv.tv_sec, &tm);
    int n = snprintf(
        line, sizeof(line), "%04d-%02d-%02d %02d:%02d:%02d.%03d [%d] %s %s: ", tm.tm_year + 1900,
        tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(tv.tv_usec / 1000),
        (int)getpid(), log_ctx, log_names[level] ? log_names[level] : "?");
    if (n < 0)
        return;
    if ((size_t)n < sizeof(line))
        vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
    size_t len = strlen(line);
    if (len > sizeof(line) - 2)
        len = sizeof(line) - 2;
    line[len++] = '\n';
    /* One write per line so lines of concurrent workers never interleave. */
    (void)!write(STDERR_FILENO, line, len);
}

void log_msg(log_level_t level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    log_vmsg(level, fmt, ap);
    va_end(ap);
}
