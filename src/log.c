/* log.c: leveled logging to stderr lines or to the systemd journal with structured fields. */
#include "log.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <systemd/sd-journal.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"

#define LOG_TEXT_MAX 2048 /* longest text (and stderr line); longer text is cut */
#define LOG_FIELDS_MAX 12
#define LOG_IDENT "idemd"
#define LOG_FIELD_MAX 1024 /* longest value of one IDEMD_* field */
#define LOG_JOURNAL_SOCKET "/run/systemd/journal/socket"

static log_level_t log_max = LOG_LEVEL_INFO;
static char log_ctx[64] = "main";
static int log_target = -1; /* -1: not resolved yet; else LOG_TARGET_STDERR or _JOURNAL */
static log_journal_fn_t log_journal_writer = sd_journal_sendv;
static log_sink_t *log_sink;
static log_tap_fn log_tap;
static void *log_tap_ctx;

static const char *log_names[8] = {
    [LOG_LEVEL_ERROR] = "error",
    [LOG_LEVEL_WARNING] = "warning",
    [LOG_LEVEL_INFO] = "info",
    [LOG_LEVEL_DEBUG] = "debug",
};

static const char *log_target_names[] = {
    [LOG_TARGET_AUTO] = "auto",
    [LOG_TARGET_STDERR] = "stderr",
    [LOG_TARGET_JOURNAL] = "journal",
};

/* Structured fields of one message; NULL members are not sent. */
typedef struct log_fields {
    const char *queue;
    const char *consumer;
    const char *msg_id;
    size_t msg_id_len;
    const char *handler;
    const char *outcome;
    const char *trace_id; /* TRACE_ID= and SPAN_ID=, as the OpenTelemetry journald mapping */
    const char *span_id;
} log_fields_t;

/* One journal record under construction: "NAME=value" strings packed into buf. */
typedef struct log_record {
    struct iovec iov[LOG_FIELDS_MAX];
    int n;
    size_t used;
    char buf[LOG_TEXT_MAX + 6144]; /* MESSAGE, 5 capped fields and the small ones fit */
} log_record_t;

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

bool log_enabled(log_level_t level)
{
    return level <= log_max;
}

void log_set_context(const char *ctx)
{
    snprintf(log_ctx, sizeof(log_ctx), "%s", ctx);
}

int log_target_parse(const char *name)
{
    for (int i = 0; i < (int)(sizeof(log_target_names) / sizeof(log_target_names[0])); i++)
        if (strcasecmp(name, log_target_names[i]) == 0)
            return i;
    return -1;
}

/* Parse a whole decimal number without sign or spaces; 0, or -1 if s is anything else. */
static int log_parse_u64(const char *s, size_t len, unsigned long long *out)
{
    unsigned long long v = 0;
    if (len == 0 || len > 20)
        return -1;
    for (size_t i = 0; i < len; i++) {
        if (!isdigit((unsigned char)s[i]))
            return -1;
        unsigned d = (unsigned)(s[i] - '0');
        if (v > (~0ULL - d) / 10)
            return -1; /* overflow */
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

bool log_journal_stream_matches(const char *journal_stream, unsigned long long dev,
                                unsigned long long ino)
{
    unsigned long long d, i;
    const char *colon;
    if (journal_stream == NULL)
        return false;
    colon = strchr(journal_stream, ':');
    if (colon == NULL)
        return false;
    if (log_parse_u64(journal_stream, (size_t)(colon - journal_stream), &d) != 0 ||
        log_parse_u64(colon + 1, strlen(colon + 1), &i) != 0)
        return false;
    return d == dev && i == ino;
}

log_target_t log_target_resolve(log_target_t requested, const char *journal_stream, int fd)
{
    struct stat st;
    if (requested == LOG_TARGET_STDERR || requested == LOG_TARGET_JOURNAL)
        return requested;
    if (journal_stream == NULL || fstat(fd, &st) != 0)
        return LOG_TARGET_STDERR;
    return log_journal_stream_matches(journal_stream, (unsigned long long)st.st_dev,
                                      (unsigned long long)st.st_ino)
               ? LOG_TARGET_JOURNAL
               : LOG_TARGET_STDERR;
}

void log_set_target(log_target_t target)
{
    log_target = log_target_resolve(target, getenv("JOURNAL_STREAM"), STDERR_FILENO);
    /* sd_journal_sendv() reports success when journald's socket is missing: check first. */
    if (log_target == LOG_TARGET_JOURNAL && log_journal_writer == sd_journal_sendv &&
        access(LOG_JOURNAL_SOCKET, F_OK) != 0) {
        log_target = LOG_TARGET_STDERR;
        if (target == LOG_TARGET_JOURNAL)
            log_warn("journal logging requested, but %s is not there: logging to stderr",
                     LOG_JOURNAL_SOCKET);
    }
}

log_target_t log_get_target(void)
{
    if (log_target < 0) {
        const char *env = getenv("IDEMD_LOG_TARGET");
        int t = env && *env ? log_target_parse(env) : LOG_TARGET_AUTO;
        log_set_target(t < 0 ? LOG_TARGET_AUTO : (log_target_t)t);
        if (t < 0)
            log_warn("IDEMD_LOG_TARGET=\"%s\" is not auto, stderr or journal: using auto (%s)", env,
                     log_target_names[log_target]);
    }
    return (log_target_t)log_target;
}

void log_set_journal_writer(log_journal_fn_t fn)
{
    log_journal_writer = fn ? fn : sd_journal_sendv;
}

/*
 * Append "NAME=value" to the record, with len bytes of value (any bytes: the
 * iovec carries the length), cut at max; skipped when value is NULL.
 */
static void log_record_add_n(log_record_t *r, const char *name, const char *value, size_t len,
                             size_t max)
{
    size_t room = sizeof(r->buf) - r->used, nlen = strlen(name);
    if (value == NULL || r->n == LOG_FIELDS_MAX || room < nlen + 2)
        return;
    if (len > max)
        len = max;
    if (len > room - nlen - 2)
        len = room - nlen - 2;
    char *p = r->buf + r->used;
    memcpy(p, name, nlen);
    p[nlen] = '=';
    memcpy(p + nlen + 1, value, len);
    p[nlen + 1 + len] = '\0';
    r->iov[r->n].iov_base = p;
    r->iov[r->n].iov_len = nlen + 1 + len;
    r->n++;
    r->used += nlen + len + 2;
}

/* log_record_add_n() of a NUL-terminated value. */
static void log_record_add(log_record_t *r, const char *name, const char *value, int max)
{
    if (value != NULL)
        log_record_add_n(r, name, value, strnlen(value, (size_t)max), (size_t)max);
}

const char *log_quote(const char *s, size_t len, char *out, size_t outlen)
{
    static const char hex[] = "0123456789abcdef";
    bool bare = len > 0;
    size_t o = 0;
    if (outlen == 0)
        return out;
    for (size_t i = 0; i < len && bare; i++) {
        unsigned char c = (unsigned char)s[i];
        bare = c > 0x20 && c < 0x7f && c != '=' && c != '"' && c != '\\';
    }
    if (bare && len < outlen) {
        memcpy(out, s, len);
        out[len] = '\0';
        return out;
    }
    if (outlen < 8) {
        out[0] = '\0';
        return out;
    }
    out[o++] = '"';
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[5];
        size_t need;
        if (c == '"' || c == '\\')
            need = 2, esc[0] = '\\', esc[1] = (char)c;
        else if (c == '\n' || c == '\r' || c == '\t')
            need = 2, esc[0] = '\\', esc[1] = c == '\n' ? 'n' : c == '\r' ? 'r' : 't';
        else if (c < 0x20 || c >= 0x7f)
            need = 4, esc[0] = '\\', esc[1] = 'x', esc[2] = hex[c >> 4], esc[3] = hex[c & 15];
        else
            need = 1, esc[0] = (char)c;
        /* room for this, then '...' if more may follow, the quote and the NUL */
        if (o + need + (i + 1 < len ? 3 : 0) + 2 > outlen) {
            memcpy(out + o, "...", 3);
            o += 3;
            break;
        }
        memcpy(out + o, esc, need);
        o += need;
    }
    out[o++] = '"';
    out[o] = '\0';
    return out;
}

const char *log_quote_str(const char *s, char *out, size_t outlen)
{
    return log_quote(s ? s : "", s ? strlen(s) : 0, out, outlen);
}

/*
 * The code point of the valid UTF-8 sequence at s (n bytes left) into *cp:
 * its length, or 0 when the bytes there are not valid UTF-8 (overlong,
 * surrogate, above U+10FFFF, cut short).
 */
static size_t log_utf8(const unsigned char *s, size_t n, unsigned *cp)
{
    unsigned c = s[0], v, min;
    size_t need;
    if (c >= 0xc2 && c <= 0xdf)
        need = 2, v = c & 0x1f, min = 0x80;
    else if (c >= 0xe0 && c <= 0xef)
        need = 3, v = c & 0x0f, min = 0x800;
    else if (c >= 0xf0 && c <= 0xf4)
        need = 4, v = c & 0x07, min = 0x10000;
    else
        return 0;
    if (n < need)
        return 0;
    for (size_t i = 1; i < need; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        v = (v << 6) | (s[i] & 0x3f);
    }
    if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff))
        return 0;
    *cp = v;
    return need;
}

/* Whether a terminal may act on code point cp instead of showing it. */
static bool log_cp_unsafe(unsigned cp)
{
    return (cp >= 0x80 && cp <= 0x9f) || cp == 0x2028 || cp == 0x2029 ||
           (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069);
}

size_t log_escape(const char *s, size_t len, unsigned flags, char *out, size_t outlen)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *p = (const unsigned char *)s;
    size_t o = 0, i = 0;

    if (outlen == 0)
        return 0;
    while (i < len) {
        unsigned c = p[i], cp = 0;
        char esc[8];
        size_t need = 0, take = 1, seq = 0;
        if (c == '\\' && (flags & LOG_ESC_BACKSLASH)) {
            esc[need++] = '\\', esc[need++] = '\\';
        } else if (c == '\n' || c == '\r' || c == '\t') {
            esc[need++] = '\\', esc[need++] = c == '\n' ? 'n' : c == '\r' ? 'r' : 't';
        } else if (c >= 0x20 && c < 0x7f) {
            esc[need++] = (char)c;
        } else if (c >= 0x80 && (seq = log_utf8(p + i, len - i, &cp)) > 0 && !log_cp_unsafe(cp)) {
            memcpy(esc, p + i, seq);
            need = take = seq;
        } else if (seq > 0) {
            need = (size_t)snprintf(esc, sizeof(esc), "\\u%04x", cp);
            take = seq;
        } else {
            esc[0] = '\\', esc[1] = 'x', esc[2] = hex[c >> 4], esc[3] = hex[c & 15];
            need = 4;
        }
        if (o + need + 1 > outlen)
            break;
        memcpy(out + o, esc, need);
        o += need;
        i += take;
    }
    out[o] = '\0';
    return o;
}

/*
 * Copy text to out (LOG_TEXT_MAX bytes) through log_escape (without
 * LOG_ESC_BACKSLASH: log_quote's quoted values already carry theirs), so
 * that nothing a server or a handler said can start a line of its own or
 * steer a terminal.
 */
static void log_text_clean(const char *text, char *out)
{
    (void)log_escape(text, strlen(text), 0, out, LOG_TEXT_MAX);
}

/* Send text to the journal; 0, or a negative errno when it could not be sent. */
static int log_write_journal(log_level_t level, const char *text, const log_fields_t *f)
{
    log_record_t r;
    char prio[4], msg[LOG_TEXT_MAX + 80];
    r.n = 0;
    r.used = 0;
    snprintf(prio, sizeof(prio), "%d", (int)level);
    /* journalctl shows MESSAGE alone: keep the context in it. */
    snprintf(msg, sizeof(msg), "%s: %s", log_ctx, text);
    log_record_add(&r, "MESSAGE", msg, (int)sizeof(msg));
    log_record_add(&r, "PRIORITY", prio, 4);
    log_record_add(&r, "SYSLOG_IDENTIFIER", LOG_IDENT, 16);
    log_record_add(&r, "IDEMD_CONTEXT", log_ctx, (int)sizeof(log_ctx));
    if (f) {
        log_record_add(&r, "IDEMD_QUEUE", f->queue, LOG_FIELD_MAX);
        log_record_add(&r, "IDEMD_CONSUMER", f->consumer, LOG_FIELD_MAX);
        log_record_add_n(&r, "IDEMD_MSG_ID", f->msg_id, f->msg_id_len, LOG_FIELD_MAX);
        log_record_add(&r, "IDEMD_HANDLER", f->handler, LOG_FIELD_MAX);
        log_record_add(&r, "IDEMD_OUTCOME", f->outcome, LOG_FIELD_MAX);
        if (f->trace_id && *f->trace_id)
            log_record_add(&r, "TRACE_ID", f->trace_id, 64);
        if (f->span_id && *f->span_id)
            log_record_add(&r, "SPAN_ID", f->span_id, 32);
    }
    return log_journal_writer(r.iov, r.n);
}

/* The classic line: "2026-11-29 10:00:00.123 [pid] context level: text\n", one write. */
static void log_write_stderr(log_level_t level, const char *text)
{
    char line[LOG_TEXT_MAX];
    uint64_t us = clock_wall_us();
    time_t sec = (time_t)(us / 1000000);
    struct tm tm;
    localtime_r(&sec, &tm);
    int n = snprintf(line, sizeof(line), "%04d-%02d-%02d %02d:%02d:%02d.%03d [%d] %s %s: %s",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                     (int)(us % 1000000 / 1000), (int)getpid(), log_ctx,
                     log_names[level] ? log_names[level] : "?", text);
    if (n < 0)
        return;
    size_t len = (size_t)n;
    if (len > sizeof(line) - 2)
        len = sizeof(line) - 2;
    line[len++] = '\n';
    /* One write per line so lines of concurrent workers never interleave. */
    (void)!write(STDERR_FILENO, line, len);
}

void log_set_sink(log_sink_t *sink)
{
    log_sink = sink;
}

void log_set_tap(log_tap_fn fn, void *ctx)
{
    log_tap = fn;
    log_tap_ctx = ctx;
}

void log_sink_put(log_sink_t *sink, log_level_t level, const char *text)
{
    uint64_t now_us = clock_wall_us();
    unsigned long long seq = __atomic_load_n(&sink->seq, __ATOMIC_RELAXED);
    __atomic_store_n(&sink->seq, seq | 1, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    sink->when_us = (long long)now_us;
    sink->level = level;
    snprintf(sink->text, sizeof(sink->text), "%s", text);
    __atomic_store_n(&sink->seq, (seq | 1) + 1, __ATOMIC_RELEASE);
}

bool log_sink_get(const log_sink_t *sink, log_sink_t *out)
{
    for (int tries = 0; tries < 100; tries++) {
        unsigned long long a = __atomic_load_n(&sink->seq, __ATOMIC_ACQUIRE);
        if (a & 1)
            continue;
        memcpy(out, (const void *)sink, sizeof(*out));
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (__atomic_load_n(&sink->seq, __ATOMIC_RELAXED) == a) {
            out->text[sizeof(out->text) - 1] = '\0';
            return out->when_us != 0;
        }
    }
    memset(out, 0, sizeof(*out));
    return false;
}

static void log_emit(log_level_t level, const log_fields_t *f, const char *fmt, va_list ap)
{
    char raw[LOG_TEXT_MAX], text[LOG_TEXT_MAX];
    int saved = errno; /* callers may log strerror(errno) and then look at errno again */
    if ((unsigned)level >= 8 || (level > log_max && log_tap == NULL))
        return;
    vsnprintf(raw, sizeof(raw), fmt, ap);
    log_text_clean(raw, text);
    if (log_tap)
        log_tap(log_tap_ctx, level, text);
    if (level > log_max) {
        errno = saved;
        return;
    }
    if (log_get_target() != LOG_TARGET_JOURNAL || log_write_journal(level, text, f) < 0)
        log_write_stderr(level, text);
    if (log_sink && level <= LOG_LEVEL_WARNING)
        log_sink_put(log_sink, level, text);
    errno = saved;
}

void log_vmsg(log_level_t level, const char *fmt, va_list ap)
{
    log_emit(level, NULL, fmt, ap);
}

void log_msg(log_level_t level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    log_emit(level, NULL, fmt, ap);
    va_end(ap);
}

void log_vfields(log_level_t level, const char *queue, const char *consumer, const char *msg_id,
                 const char *handler, const char *outcome, const char *fmt, va_list ap)
{
    log_fields_t f = {queue,   consumer, msg_id, msg_id ? strlen(msg_id) : 0,
                      handler, outcome,  NULL,   NULL};
    log_emit(level, &f, fmt, ap);
}

void log_fields_id(log_level_t level, const char *queue, const char *consumer, const char *id,
                   size_t id_len, const char *handler, const char *outcome, const char *fmt, ...)
{
    log_fields_t f = {queue, consumer, id, id_len, handler, outcome, NULL, NULL};
    va_list ap;
    va_start(ap, fmt);
    log_emit(level, &f, fmt, ap);
    va_end(ap);
}

void log_fields_trace(log_level_t level, const char *queue, const char *consumer, const char *id,
                      size_t id_len, const char *handler, const char *outcome, const char *trace_id,
                      const char *span_id, const char *fmt, ...)
{
    log_fields_t f = {queue, consumer, id, id_len, handler, outcome, trace_id, span_id};
    va_list ap;
    va_start(ap, fmt);
    log_emit(level, &f, fmt, ap);
    va_end(ap);
}

void log_fields(log_level_t level, const char *queue, const char *consumer, const char *msg_id,
                const char *handler, const char *outcome, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    log_vfields(level, queue, consumer, msg_id, handler, outcome, fmt, ap);
    va_end(ap);
}
