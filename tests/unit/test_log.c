/* test_log.c: unit tests of log levels, filtering, the journal decision and the journal fields. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "log.h"
#include "tap.h"

/* ---- stderr capture ---- */

static int t_saved_stderr = -1, t_capture_fd = -1;

static void t_capture_begin(void)
{
    char path[] = "/tmp/test_log.XXXXXX";
    t_capture_fd = mkstemp(path);
    if (t_capture_fd < 0) {
        perror("mkstemp");
        exit(1);
    }
    unlink(path);
    fflush(stderr);
    t_saved_stderr = dup(STDERR_FILENO);
    dup2(t_capture_fd, STDERR_FILENO);
}

/* Stop capturing; returns what was written to stderr (static buffer). */
static const char *t_capture_end(void)
{
    static char buf[16384];
    ssize_t n;
    dup2(t_saved_stderr, STDERR_FILENO);
    close(t_saved_stderr);
    n = pread(t_capture_fd, buf, sizeof(buf) - 1, 0);
    buf[n > 0 ? n : 0] = '\0';
    close(t_capture_fd);
    return buf;
}

static int t_lines(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

/* ---- a fake journal writer that records the last message's fields ---- */

static char t_fields[16][2200];
static size_t t_lens[16];
static int t_nfields, t_journal_calls, t_journal_rc;

static int t_journal(const struct iovec *iov, int n)
{
    t_journal_calls++;
    t_nfields = 0;
    for (int i = 0; i < n && i < 16; i++) {
        size_t len =
            iov[i].iov_len < sizeof(t_fields[0]) - 1 ? iov[i].iov_len : sizeof(t_fields[0]) - 1;
        memcpy(t_fields[i], iov[i].iov_base, len);
        t_fields[i][len] = '\0';
        t_lens[i] = len;
        t_nfields++;
    }
    return t_journal_rc;
}

/* The value of field NAME in the last journal message, or NULL. */
static const char *t_field(const char *name)
{
    size_t len = strlen(name);
    for (int i = 0; i < t_nfields; i++)
        if (strncmp(t_fields[i], name, len) == 0 && t_fields[i][len] == '=')
            return t_fields[i] + len + 1;
    return NULL;
}

/* The length of field NAME's value in the last journal message, or -1. */
static long t_field_len(const char *name)
{
    size_t len = strlen(name);
    for (int i = 0; i < t_nfields; i++)
        if (strncmp(t_fields[i], name, len) == 0 && t_fields[i][len] == '=')
            return (long)(t_lens[i] - len - 1);
    return -1;
}

static int t_field_is(const char *name, const char *value)
{
    const char *v = t_field(name);
    return v != NULL && strcmp(v, value) == 0;
}

static void test_levels(void)
{
    ok(log_level_parse("error") == LOG_LEVEL_ERROR &&
           log_level_parse("warning") == LOG_LEVEL_WARNING &&
           log_level_parse("info") == LOG_LEVEL_INFO && log_level_parse("debug") == LOG_LEVEL_DEBUG,
       "level names parse to syslog priorities");
    ok(log_level_parse("DEBUG") == LOG_LEVEL_DEBUG && log_level_parse("Info") == 6,
       "level names are matched without regard to case");
    ok(log_level_parse("warn") == -1 && log_level_parse("") == -1 &&
           log_level_parse("notice") == -1 && log_level_parse("info ") == -1,
       "unknown level names give -1");
    log_set_level(LOG_LEVEL_WARNING);
    ok(log_enabled(LOG_LEVEL_ERROR) && log_enabled(LOG_LEVEL_WARNING) &&
           !log_enabled(LOG_LEVEL_INFO) && !log_enabled(LOG_LEVEL_DEBUG),
       "log_enabled follows the level");
    ok(log_target_parse("auto") == LOG_TARGET_AUTO &&
           log_target_parse("STDERR") == LOG_TARGET_STDERR &&
           log_target_parse("journal") == LOG_TARGET_JOURNAL && log_target_parse("syslog") == -1 &&
           log_target_parse("") == -1,
       "log targets parse");
}

static void test_stderr_format(void)
{
    const char *out;

    log_set_target(LOG_TARGET_STDERR);
    log_set_context("orders.pay#1");
    log_set_level(LOG_LEVEL_INFO);
    t_capture_begin();
    log_info("hello %d", 42);
    log_debug("hidden at info");
    log_warn("careful");
    log_error("broken");
    log_fields(LOG_LEVEL_INFO, "orders.pay", "orders", "id-7", "order_pay", "ok",
               "outcome=%s queue=%s id=%s", "ok", "orders.pay", "id-7");
    log_fields(LOG_LEVEL_DEBUG, "q", NULL, NULL, NULL, "ok", "hidden fields");
    out = t_capture_end();
    printf("# captured:\n# %.*s\n", (int)strcspn(out, "\n"), out);

    int y, mo, d, h, mi, s, ms, pid, used = 0;
    char ctx[64], lvl[16];
    int n = sscanf(out, "%4d-%2d-%2d %2d:%2d:%2d.%3d [%d] %63s %15[a-z]: %n", &y, &mo, &d, &h, &mi,
                   &s, &ms, &pid, ctx, lvl, &used);
    ok(n == 10 && pid == (int)getpid() && strcmp(ctx, "orders.pay#1") == 0 &&
           strcmp(lvl, "info") == 0 && strncmp(out + used, "hello 42\n", 9) == 0,
       "stderr line: 'DATE TIME.ms [pid] context level: text'");
    ok(t_lines(out) == 4, "stderr: debug lines are dropped at level info (4 of 6 written)");
    ok(strstr(out, " orders.pay#1 warning: careful\n") &&
           strstr(out, " orders.pay#1 error: broken\n"),
       "stderr: warning and error lines");
    ok(strstr(out, " orders.pay#1 info: outcome=ok queue=orders.pay id=id-7\n") != NULL &&
           strstr(out, "IDEMD_") == NULL && strstr(out, "order_pay") == NULL,
       "stderr: log_fields writes only its text, in the log_msg format");

    /* A very long message is cut, but stays one line. */
    static char big[5000];
    memset(big, 'x', sizeof(big) - 1);
    t_capture_begin();
    log_info("%s", big);
    out = t_capture_end();
    ok(t_lines(out) == 1 && strlen(out) <= 2048 && out[strlen(out) - 1] == '\n',
       "stderr: an over-long message is cut to one line of at most 2048 bytes");
}

static void test_quote(void)
{
    char out[64];
    ok(strcmp(log_quote("id-7", 4, out, sizeof(out)), "id-7") == 0 &&
           strcmp(log_quote_str("a.b:c/d", out, sizeof(out)), "a.b:c/d") == 0,
       "quote: plain printable values stay bare");
    ok(strcmp(log_quote_str("o-1 outcome=ok tag=7", out, sizeof(out)),
              "\"o-1 outcome=ok tag=7\"") == 0,
       "quote: a value with spaces and '=' is quoted");
    ok(strcmp(log_quote_str("a=b", out, sizeof(out)), "\"a=b\"") == 0 &&
           strcmp(log_quote_str("", out, sizeof(out)), "\"\"") == 0 &&
           strcmp(log_quote_str(NULL, out, sizeof(out)), "\"\"") == 0,
       "quote: '=' alone, the empty value and NULL are quoted");
    ok(strcmp(log_quote("x\"y\\z", 5, out, sizeof(out)), "\"x\\\"y\\\\z\"") == 0,
       "quote: quotes and backslashes are backslashed");
    ok(strcmp(log_quote("a\nb\rc\td\x01\x00\x1b\xff", 11, out, sizeof(out)),
              "\"a\\nb\\rc\\td\\x01\\x00\\x1b\\xff\"") == 0,
       "quote: control bytes, NUL and non-ASCII are escaped");
    char big[300];
    memset(big, ' ', sizeof(big));
    log_quote(big, sizeof(big), out, sizeof(out));
    ok(strlen(out) == sizeof(out) - 1 && strcmp(out + strlen(out) - 4, "...\"") == 0,
       "quote: a long value is cut to fit, ending in ...\"");
    memset(big, '\n', sizeof(big));
    log_quote(big, sizeof(big), out, sizeof(out));
    ok(strlen(out) < sizeof(out) && strcmp(out + strlen(out) - 4, "...\"") == 0 &&
           strchr(out, '\n') == NULL,
       "quote: a cut never splits an escape");
    ok(strcmp(log_quote("abc", 3, out, 3), "") == 0 && strcmp(log_quote("a b", 3, out, 7), "") == 0,
       "quote: too small a buffer gives \"\" (never overflows)");
}

/* Count the key=value fields of a line the way a logfmt reader does: key=bare or key="..." */
static int t_logfmt_count(const char *line, const char *key, const char *value)
{
    int n = 0;
    size_t klen = strlen(key);
    const char *p = line;
    while (*p && *p != '\n') {
        while (*p == ' ')
            p++;
        const char *start = p;
        const char *eq = NULL;
        while (*p && *p != ' ' && *p != '\n' && *p != '=')
            p++;
        if (*p == '=')
            eq = p++;
        const char *v = p;
        size_t vlen;
        if (*p == '"') {
            for (p++; *p && *p != '"' && *p != '\n'; p++)
                if (*p == '\\' && p[1])
                    p++;
            if (*p == '"')
                p++;
            vlen = (size_t)(p - v);
        } else {
            while (*p && *p != ' ' && *p != '\n')
                p++;
            vlen = (size_t)(p - v);
        }
        if (eq && (size_t)(eq - start) == klen && strncmp(start, key, klen) == 0 &&
            (value == NULL || (strlen(value) == vlen && strncmp(v, value, vlen) == 0)))
            n++;
    }
    return n;
}

static void test_forging(void)
{
    const char *out;
    char qid[96], qr[256];
    static const char id[] = "o-1 outcome=ok tag=7";
    static const char reason[] = "bad\n2026-11-29 10:00:00.000 [1] q#1 info: outcome=ok id=x";

    log_set_target(LOG_TARGET_STDERR);
    log_set_level(LOG_LEVEL_INFO);
    log_set_context("q#1");
    t_capture_begin();
    log_fields_id(LOG_LEVEL_WARNING, "q", "c", id, strlen(id), "h", "reject",
                  "outcome=%s queue=%s id=%s reason=%s", "reject", "q",
                  log_quote(id, strlen(id), qid, sizeof(qid)),
                  log_quote_str(reason, qr, sizeof(qr)));
    out = t_capture_end();
    printf("# %s", out);
    ok(t_lines(out) == 1, "forging: an outcome line with a hostile id and reason is one line");
    ok(t_logfmt_count(out, "outcome", NULL) == 1 && t_logfmt_count(out, "outcome", "reject") == 1 &&
           t_logfmt_count(out, "tag", NULL) == 0,
       "forging: a logfmt reader sees one outcome field, the real one");
    ok(strstr(out, " id=\"o-1 outcome=ok tag=7\" ") != NULL &&
           strstr(out, "reason=\"bad\\n2026-11-29") != NULL,
       "forging: the id and the reason are quoted and escaped");

    /* The net under every line: a raw newline from anywhere (a server's error text) is escaped. */
    t_capture_begin();
    log_error("database: error 1: %s", "line one\nforged error: line two\r\x1b[2J");
    out = t_capture_end();
    ok(t_lines(out) == 1 && strstr(out, "line one\\nforged error: line two\\r\\x1b[2J\n") != NULL,
       "forging: control bytes in any text are escaped: one line per event");

    /* The journal keeps the raw id bytes (binary-safe), and MESSAGE is the escaped text. */
    static const char bin[] = "a\nb\0c";
    log_set_journal_writer(t_journal);
    log_set_target(LOG_TARGET_JOURNAL);
    t_capture_begin();
    log_fields_id(LOG_LEVEL_WARNING, "q", "c", bin, sizeof(bin) - 1, "h", "reject", "reason=%s",
                  "x\ny");
    out = t_capture_end();
    ok(out[0] == '\0' && t_nfields == 9 && t_field_len("IDEMD_MSG_ID") == 5 &&
           memcmp(t_field("IDEMD_MSG_ID"), bin, 5) == 0 && t_field_is("IDEMD_OUTCOME", "reject") &&
           t_field_is("MESSAGE", "q#1: reason=x\\ny"),
       "journal: IDEMD_MSG_ID carries the id's bytes (newline, NUL) as they are");
    log_fields_id(LOG_LEVEL_WARNING, "q", "c", NULL, 0, "h", "reject", "no id");
    ok(t_nfields == 8 && t_field("IDEMD_MSG_ID") == NULL, "journal: no id, no IDEMD_MSG_ID");
    log_fields_trace(LOG_LEVEL_WARNING, "q", "c", "m", 1, "h", "reject",
                     "0af7651916cd43dd8448eb211c80319c", "00f067aa0ba902b7", "traced");
    ok(t_nfields == 11 && t_field_is("TRACE_ID", "0af7651916cd43dd8448eb211c80319c") &&
           t_field_is("SPAN_ID", "00f067aa0ba902b7"),
       "journal: a message's trace context as TRACE_ID= and SPAN_ID=");
    log_fields_trace(LOG_LEVEL_WARNING, "q", "c", "m", 1, "h", "reject", "", NULL, "untraced");
    ok(t_nfields == 9 && t_field("TRACE_ID") == NULL && t_field("SPAN_ID") == NULL,
       "journal: no trace context, no TRACE_ID or SPAN_ID");
    log_set_journal_writer(NULL);
    log_set_target(LOG_TARGET_STDERR);
}

static void test_journal_stream(void)
{
    char env[64];
    struct stat st;
    char path[] = "/tmp/test_log_js.XXXXXX";
    int fd = mkstemp(path);
    int sv[2];

    unlink(path);
    ok(fd >= 0 && fstat(fd, &st) == 0, "temp file for the journal stream checks");
    unsigned long long dev = (unsigned long long)st.st_dev, ino = (unsigned long long)st.st_ino;

    snprintf(env, sizeof(env), "%llu:%llu", dev, ino);
    ok(log_journal_stream_matches(env, dev, ino), "JOURNAL_STREAM DEV:INO matches");
    ok(!log_journal_stream_matches(env, dev, ino + 1) &&
           !log_journal_stream_matches(env, dev + 1, ino),
       "another device or inode does not match");
    ok(!log_journal_stream_matches(NULL, dev, ino) && !log_journal_stream_matches("", 0, 0),
       "unset or empty JOURNAL_STREAM does not match");
    static const char *bad[] = {
        "12",     "12:",    ":34",    "12:34:56", "-1:34", "12:-34",
        " 12:34", "12:34 ", "+12:34", "0x1:2",    "12;34", "18446744073709551616:1",
        "a:b",    "1 :2",
    };
    int all_bad = 1;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        unsigned long long d = 12, n = 34;
        if (strcmp(bad[i], "18446744073709551616:1") == 0)
            d = 0, n = 1;
        if (log_journal_stream_matches(bad[i], d, n)) {
            printf("# '%s' matched\n", bad[i]);
            all_bad = 0;
        }
    }
    ok(all_bad, "malformed JOURNAL_STREAM values never match (sign, spaces, overflow, "
                "missing parts)");
    ok(log_journal_stream_matches("18446744073709551615:0", ~0ULL, 0),
       "the largest 64-bit device number parses");

    ok(log_target_resolve(LOG_TARGET_AUTO, env, fd) == LOG_TARGET_JOURNAL,
       "auto: stderr whose dev:ino equal JOURNAL_STREAM goes to the journal");
    snprintf(env, sizeof(env), "%llu:%llu", dev, ino + 1);
    ok(log_target_resolve(LOG_TARGET_AUTO, env, fd) == LOG_TARGET_STDERR,
       "auto: JOURNAL_STREAM of another stream (stderr redirected) keeps stderr");
    ok(log_target_resolve(LOG_TARGET_AUTO, NULL, fd) == LOG_TARGET_STDERR,
       "auto: no JOURNAL_STREAM keeps stderr");
    snprintf(env, sizeof(env), "%llu:%llu", dev, ino);
    close(fd);
    ok(log_target_resolve(LOG_TARGET_AUTO, env, fd) == LOG_TARGET_STDERR,
       "auto: a closed fd keeps stderr");
    ok(log_target_resolve(LOG_TARGET_JOURNAL, NULL, fd) == LOG_TARGET_JOURNAL &&
           log_target_resolve(LOG_TARGET_STDERR, env, fd) == LOG_TARGET_STDERR,
       "forced targets are kept whatever JOURNAL_STREAM says");

    /* What systemd really connects: a stream socket. */
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0 && fstat(sv[0], &st) == 0) {
        snprintf(env, sizeof(env), "%llu:%llu", (unsigned long long)st.st_dev,
                 (unsigned long long)st.st_ino);
        ok(log_target_resolve(LOG_TARGET_AUTO, env, sv[0]) == LOG_TARGET_JOURNAL &&
               log_target_resolve(LOG_TARGET_AUTO, env, sv[1]) == LOG_TARGET_STDERR,
           "auto: a socket is recognised by its own inode only");
        close(sv[0]);
        close(sv[1]);
    } else {
        ok(0, "socketpair");
    }

    /* The process-wide decision reads JOURNAL_STREAM against fd 2 (the fake writer stands
     * in for journald, whose socket log_set_target() would look for otherwise). */
    log_set_journal_writer(t_journal);
    t_capture_begin();
    if (fstat(STDERR_FILENO, &st) == 0) {
        snprintf(env, sizeof(env), "%llu:%llu", (unsigned long long)st.st_dev,
                 (unsigned long long)st.st_ino);
        setenv("JOURNAL_STREAM", env, 1);
    }
    log_set_target(LOG_TARGET_AUTO);
    log_target_t in_journal = log_get_target();
    unsetenv("JOURNAL_STREAM");
    log_set_target(LOG_TARGET_AUTO);
    log_target_t without = log_get_target();
    t_capture_end();
    log_set_journal_writer(NULL);
    ok(in_journal == LOG_TARGET_JOURNAL && without == LOG_TARGET_STDERR,
       "log_set_target(AUTO) decides from JOURNAL_STREAM and the current fd 2");
}

static void test_journal_fields(void)
{
    const char *out;
    char ctx[64];

    log_set_journal_writer(t_journal);
    log_set_target(LOG_TARGET_JOURNAL);
    log_set_level(LOG_LEVEL_INFO);
    log_set_context("orders.pay#0");
    snprintf(ctx, sizeof(ctx), "%d", LOG_LEVEL_WARNING);

    t_journal_rc = 0;
    t_journal_calls = 0;
    t_capture_begin();
    log_fields(LOG_LEVEL_WARNING, "orders.pay", "orders", "id-9", "order_pay", "reject",
               "outcome=%s id=%s reason=%s", "reject", "id-9", "bad json");
    out = t_capture_end();
    ok(t_journal_calls == 1 && out[0] == '\0', "journal: one record, nothing on stderr");
    ok(t_field_is("PRIORITY", ctx) &&
           t_field_is("MESSAGE", "orders.pay#0: outcome=reject id=id-9 reason=bad json"),
       "journal: PRIORITY is the syslog level, MESSAGE is 'context: text'");
    ok(t_field_is("SYSLOG_IDENTIFIER", "idemd") && t_field_is("IDEMD_CONTEXT", "orders.pay#0"),
       "journal: SYSLOG_IDENTIFIER=idemd and IDEMD_CONTEXT");
    ok(t_field_is("IDEMD_QUEUE", "orders.pay") && t_field_is("IDEMD_CONSUMER", "orders") &&
           t_field_is("IDEMD_MSG_ID", "id-9") && t_field_is("IDEMD_HANDLER", "order_pay") &&
           t_field_is("IDEMD_OUTCOME", "reject"),
       "journal: IDEMD_QUEUE, _CONSUMER, _MSG_ID, _HANDLER, _OUTCOME");
    ok(t_nfields == 9, "journal: exactly 9 fields for a full log_fields call");

    log_fields(LOG_LEVEL_INFO, "q1", NULL, NULL, NULL, "ok", "partial");
    ok(t_nfields == 6 && t_field_is("IDEMD_QUEUE", "q1") && t_field_is("IDEMD_OUTCOME", "ok") &&
           t_field("IDEMD_MSG_ID") == NULL && t_field("IDEMD_CONSUMER") == NULL &&
           t_field("IDEMD_HANDLER") == NULL,
       "journal: NULL fields are left out");

    log_info("plain %s", "message");
    ok(t_nfields == 4 && t_field_is("MESSAGE", "orders.pay#0: plain message") &&
           t_field_is("PRIORITY", "6") && t_field("IDEMD_QUEUE") == NULL,
       "journal: log_msg sends MESSAGE, PRIORITY and the identifiers only");

    t_journal_calls = 0;
    log_debug("hidden");
    log_fields(LOG_LEVEL_DEBUG, "q", NULL, NULL, NULL, "ok", "hidden");
    ok(t_journal_calls == 0, "journal: the level filter applies before sending");

    static char big[5000];
    memset(big, 'y', sizeof(big) - 1);
    log_fields(LOG_LEVEL_ERROR, big, big, big, big, big, "%s", big);
    ok(t_nfields == 9 && strlen(t_field("MESSAGE")) >= 2000 &&
           strlen(t_field("IDEMD_MSG_ID")) == 1024 && strlen(t_field("IDEMD_OUTCOME")) == 1024 &&
           t_field_is("PRIORITY", "3") && t_field_is("IDEMD_CONTEXT", "orders.pay#0"),
       "journal: over-long values are cut, the fixed fields survive");

    t_journal_rc = -111; /* ECONNREFUSED: journald gone */
    t_capture_begin();
    log_fields(LOG_LEVEL_ERROR, "q", NULL, NULL, NULL, "retry", "journal is down");
    out = t_capture_end();
    ok(strstr(out, " orders.pay#0 error: journal is down\n") != NULL && t_lines(out) == 1,
       "journal: a failed send falls back to the stderr line");

    /* The real writer: sd_journal_sendv() says 0 when journald's socket is missing, so
     * forcing the journal without journald must fall back to stderr, with a warning. */
    log_set_journal_writer(NULL);
    if (access("/run/systemd/journal/socket", F_OK) != 0) {
        t_capture_begin();
        log_set_target(LOG_TARGET_JOURNAL);
        log_target_t t = log_get_target();
        log_error("no journald here");
        out = t_capture_end();
        ok(t == LOG_TARGET_STDERR && strstr(out, " error: no journald here\n") != NULL &&
               strstr(out, " warning: journal logging requested, but ") != NULL,
           "journal forced without journald: a warning, then lines go to stderr");
    } else {
        skip("journal: a failed send falls back to stderr",
             "journald socket present: fallback not tested");
    }
    log_set_target(LOG_TARGET_STDERR);
}

static void test_env_target(void)
{
    /* IDEMD_LOG_TARGET is read by the first message when no target was set: run in a child. */
    static const struct {
        const char *env;
        log_target_t want;
        int warns;
    } cases[] = {
        {"journal", LOG_TARGET_JOURNAL, 0},
        {"stderr", LOG_TARGET_STDERR, 0},
        {"auto", LOG_TARGET_STDERR, 0},
        {"bogus", LOG_TARGET_STDERR, 1},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int p[2];
        char buf[512] = "";
        if (pipe(p) != 0)
            break;
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            dup2(p[1], STDERR_FILENO);
            unsetenv("JOURNAL_STREAM");
            setenv("IDEMD_LOG_TARGET", cases[i].env, 1);
            /* log_target was set by the parent before fork: this child re-runs from scratch. */
            execl("/proc/self/exe", "test_log", "--env-child", (char *)NULL);
            _exit(127);
        }
        close(p[1]);
        ssize_t n = read(p[0], buf, sizeof(buf) - 1);
        buf[n > 0 ? n : 0] = '\0';
        close(p[0]);
        int status = 0;
        waitpid(pid, &status, 0);
        char what[160];
        snprintf(what, sizeof(what), "IDEMD_LOG_TARGET=%s resolves to %s%s", cases[i].env,
                 cases[i].want == LOG_TARGET_JOURNAL ? "journal" : "stderr",
                 cases[i].warns ? " with a warning" : "");
        int got = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        ok(got == (int)cases[i].want &&
               (strstr(buf, "IDEMD_LOG_TARGET=\"bogus\" is not") != NULL) == cases[i].warns,
           "%s", what);
    }
}

/* The sink keeps the newest error or warning only, cut to its size; info and debug pass by. */
static void test_sink(void)
{
    log_sink_t sink, got;
    char longtext[1000];
    memset(&sink, 0, sizeof(sink));
    ok(!log_sink_get(&sink, &got), "sink: empty at first");
    log_set_level(LOG_LEVEL_DEBUG);
    log_set_target(LOG_TARGET_STDERR);
    log_set_sink(&sink);
    t_capture_begin();
    log_msg(LOG_LEVEL_WARNING, "first %d", 1);
    log_msg(LOG_LEVEL_ERROR, "second %s", "problem");
    log_msg(LOG_LEVEL_INFO, "not a problem");
    log_msg(LOG_LEVEL_DEBUG, "nor this");
    (void)t_capture_end();
    ok(log_sink_get(&sink, &got) && strcmp(got.text, "second problem") == 0 &&
           got.level == LOG_LEVEL_ERROR && got.when_us > 0 && (got.seq & 1) == 0,
       "sink: the newest error, with its level and time; info and debug not kept");
    memset(longtext, 'x', sizeof(longtext) - 1);
    longtext[sizeof(longtext) - 1] = '\0';
    t_capture_begin();
    log_msg(LOG_LEVEL_WARNING, "%s", longtext);
    log_set_sink(NULL);
    log_msg(LOG_LEVEL_ERROR, "after the sink was taken away");
    (void)t_capture_end();
    ok(log_sink_get(&sink, &got) && strlen(got.text) == LOG_SINK_TEXT - 1 &&
           got.level == LOG_LEVEL_WARNING,
       "sink: long text cut to its size; nothing kept once unset");
    log_set_level(LOG_LEVEL_INFO);
}

/* log_set_tap: every line reaches the tap, DEBUG too when not printed; only printed ones print. */
static int tap_lines;
static char tap_last[256];
static int tap_last_level;
static void t_tap(void *ctx, log_level_t level, const char *text)
{
    (void)ctx;
    tap_lines++;
    tap_last_level = level;
    snprintf(tap_last, sizeof(tap_last), "%s", text);
}

static void test_tap(void)
{
    log_set_level(LOG_LEVEL_WARNING);
    log_set_tap(t_tap, NULL);
    t_capture_begin();
    log_msg(LOG_LEVEL_DEBUG, "statement %d affected %d row(s)", 1, 1);
    const char *quiet = t_capture_end();
    ok(tap_lines == 1 && tap_last_level == LOG_LEVEL_DEBUG &&
           strcmp(tap_last, "statement 1 affected 1 row(s)") == 0 && quiet[0] == '\0',
       "tap: a DEBUG line below the level reaches the tap, not stderr");
    t_capture_begin();
    log_msg(LOG_LEVEL_ERROR, "bad\x1b[2J");
    const char *loud = t_capture_end();
    ok(tap_lines == 2 && strcmp(tap_last, "bad\\x1b[2J") == 0 && strstr(loud, "bad") != NULL,
       "tap: a printed line reaches both, escaped as printed");
    log_set_tap(NULL, NULL);
    log_msg(LOG_LEVEL_DEBUG, "after");
    ok(tap_lines == 2, "tap: nothing once unset");
    log_set_level(LOG_LEVEL_INFO);
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "--env-child") == 0) {
        log_set_journal_writer(t_journal); /* never the real journal */
        return (int)log_get_target();
    }
    test_levels();
    test_stderr_format();
    test_quote();
    test_forging();
    test_journal_stream();
    test_journal_fields();
    test_env_target();
    test_sink();
    test_tap();
    return done();
}
