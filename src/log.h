/* log.h: leveled logging to stderr or the systemd journal, with a per-process context. */
#ifndef IDEMD_LOG_H
#define IDEMD_LOG_H

#include <stdarg.h>
#include <stdbool.h>
#include <sys/uio.h>

typedef enum log_level {
    LOG_LEVEL_ERROR = 3,
    LOG_LEVEL_WARNING = 4,
    LOG_LEVEL_INFO = 6,
    LOG_LEVEL_DEBUG = 7,
} log_level_t;

/* Where lines go. AUTO: the journal when stderr is connected to it, else stderr. */
typedef enum log_target {
    LOG_TARGET_AUTO = 0,
    LOG_TARGET_STDERR = 1,
    LOG_TARGET_JOURNAL = 2,
} log_target_t;

/* Set the most verbose level that is printed (default INFO). */
void log_set_level(log_level_t level);
/* Parse "error", "warning", "info", "debug"; -1 if unknown. */
int log_level_parse(const char *name);
/* True if a message of this level would be written. */
bool log_enabled(log_level_t level);
/* Context printed on every line of this process, e.g. "orders#1"; copied. */
void log_set_context(const char *ctx);

/*
 * Choose the target. AUTO is resolved at once against the current stderr
 * (call it again after redirecting fd 2); STDERR and JOURNAL force one.
 * Until this is called, the first message resolves the environment variable
 * IDEMD_LOG_TARGET ("auto", "stderr", "journal"; unset or unknown = auto).
 * A forked child inherits the decision.
 */
void log_set_target(log_target_t target);
/* The target in force: LOG_TARGET_STDERR or LOG_TARGET_JOURNAL (resolves it if need be). */
log_target_t log_get_target(void);
/* Parse "auto", "stderr", "journal" (any case); -1 if unknown. */
int log_target_parse(const char *name);

/*
 * The journal detection, as sd_journal_stream_fd(3) documents it for
 * services: JOURNAL_STREAM holds "DEVICE:INODE" (decimal) of the stream
 * systemd connected to stdout/stderr; fd is ours only if fstat(fd) has that
 * st_dev and st_ino. Pure: journal_stream is the variable's value or NULL.
 */
bool log_journal_stream_matches(const char *journal_stream, unsigned long long dev,
                                unsigned long long ino);
/*
 * Resolve a requested target: STDERR and JOURNAL stay; AUTO becomes JOURNAL
 * when fd is open and log_journal_stream_matches() says so, else STDERR.
 */
log_target_t log_target_resolve(log_target_t requested, const char *journal_stream, int fd);

/*
 * The last error or warning of a process, kept where another process can
 * read it (shared memory): idemd's status endpoint shows each queue's.
 * One writer at a time (the worker, or the supervisor once the worker is
 * gone); seq is odd while a write is under way.
 */
#define LOG_SINK_TEXT 400
typedef struct log_sink {
    unsigned long long seq;
    long long when_us; /* CLOCK_REALTIME microseconds; 0: nothing yet */
    int level;         /* log_level_t */
    char text[LOG_SINK_TEXT];
} log_sink_t;

/* From now on, copy every error and warning this process logs into sink (borrowed; NULL: stop). */
void log_set_sink(log_sink_t *sink);
/* Put text into sink as of now (the writer's side of log_set_sink). */
void log_sink_put(log_sink_t *sink, log_level_t level, const char *text);
/* Copy sink into *out consistently (retrying a torn read); false if it never held anything. */
bool log_sink_get(const log_sink_t *sink, log_sink_t *out);

/*
 * From now on, also hand every line this process logs to fn on ctx, whatever
 * its level (DEBUG too, printed or not): idemctl try shows what a handler
 * logged. text is the line as printed, borrowed for the call; fn must not
 * log. NULL: stop.
 */
typedef void (*log_tap_fn)(void *ctx, log_level_t level, const char *text);
void log_set_tap(log_tap_fn fn, void *ctx);

void log_msg(log_level_t level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void log_vmsg(log_level_t level, const char *fmt, va_list ap);

/*
 * A message with structured fields. In the journal, each non-NULL argument
 * becomes a field (IDEMD_QUEUE=, IDEMD_CONSUMER=, IDEMD_MSG_ID=,
 * IDEMD_HANDLER=, IDEMD_OUTCOME=) next to PRIORITY=, MESSAGE=,
 * SYSLOG_IDENTIFIER= and IDEMD_CONTEXT=; NULL ones are left out. On stderr
 * only the formatted text is written, in exactly the line log_msg() writes.
 * All strings are borrowed for the call. Values that came from a message, a
 * handler or a server belong in the text through log_quote().
 */
void log_fields(log_level_t level, const char *queue, const char *consumer, const char *msg_id,
                const char *handler, const char *outcome, const char *fmt, ...)
    __attribute__((format(printf, 7, 8)));
void log_vfields(log_level_t level, const char *queue, const char *consumer, const char *msg_id,
                 const char *handler, const char *outcome, const char *fmt, va_list ap);

/*
 * As log_fields(), with the message id given as id_len bytes of any value
 * (NULL: no id field). The journal field IDEMD_MSG_ID carries those bytes
 * as they are (journald's native protocol is binary-safe); the text should
 * show the id through log_quote().
 */
void log_fields_id(log_level_t level, const char *queue, const char *consumer, const char *id,
                   size_t id_len, const char *handler, const char *outcome, const char *fmt, ...)
    __attribute__((format(printf, 8, 9)));

/*
 * As log_fields_id(), with the W3C trace context of the message: trace_id
 * and span_id become the journal fields TRACE_ID= and SPAN_ID= (NULL or
 * "": left out). The text should carry them as trace_id=... span_id=...
 */
void log_fields_trace(log_level_t level, const char *queue, const char *consumer, const char *id,
                      size_t id_len, const char *handler, const char *outcome, const char *trace_id,
                      const char *span_id, const char *fmt, ...)
    __attribute__((format(printf, 10, 11)));

/*
 * Render len bytes of s as one logfmt value in out (outlen bytes, always
 * NUL-terminated when outlen > 0): as they are when they are non-empty
 * printable ASCII without space, '=', '"' or '\\'; else in double quotes,
 * with '"' and '\\' backslashed, \n \r \t, and every other byte outside
 * printable ASCII as \xNN. A value that does not fit is cut and ends in
 * "..." (inside the quotes). Needs outlen >= 8 for anything but "".
 * Returns out, so that it can stand as a printf argument.
 */
const char *log_quote(const char *s, size_t len, char *out, size_t outlen);
/* log_quote() of a NUL-terminated string; NULL is shown as "". */
const char *log_quote_str(const char *s, char *out, size_t outlen);

/* log_escape: a backslash as two, so that an escape in the output is never a field's own text. */
#define LOG_ESC_BACKSLASH 1u
/*
 * The one function that makes bytes nobody vouched for safe to show on a
 * terminal or in a log line: len bytes of s into out (outlen bytes, always
 * NUL-terminated when outlen > 0). \n, \r and \t become "\n", "\r", "\t";
 * every other byte below 0x20, DEL and each byte of invalid UTF-8 "\xNN";
 * the C1 controls U+0080..U+009F (which some terminals obey as ESC [ and
 * the like), the bidirectional overrides and isolates (U+202A..U+202E,
 * U+2066..U+2069) and the line and paragraph separators (U+2028, U+2029)
 * "\uNNNN"; valid UTF-8 otherwise as it is. With LOG_ESC_BACKSLASH a
 * backslash becomes two. Output that does not fit is cut before an
 * escape, never inside one. At most 4 * len + 1 bytes are needed. Returns
 * the length written.
 */
size_t log_escape(const char *s, size_t len, unsigned flags, char *out, size_t outlen);

/*
 * For tests: replace the journal writer (sd_journal_sendv) by fn, which gets
 * the fields as "NAME=value" iovecs and returns 0 or a negative errno (on
 * failure the line goes to stderr instead). NULL restores sd_journal_sendv.
 */
typedef int (*log_journal_fn_t)(const struct iovec *iov, int n);
void log_set_journal_writer(log_journal_fn_t fn);

#define log_error(...) log_msg(LOG_LEVEL_ERROR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_LEVEL_WARNING, __VA_ARGS__)
#define log_info(...) log_msg(LOG_LEVEL_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_LEVEL_DEBUG, __VA_ARGS__)

#endif
