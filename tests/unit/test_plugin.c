/* test_plugin.c: unit tests of the plugin loader and host table; with a database, of the plugins
 * too. */

/*
 * Run from the repository root after `make check-build`. Prints TAP lines and
 * exits 1 if any test failed.
 *
 * The loader and host tests need nothing else. The plugin tests (order_pay.so
 * and counter.so against a real server) run when IDEMD_TEST_DB_SOCKET names a
 * MariaDB/MySQL socket (user IDEMD_TEST_DB_USER, default root; password
 * IDEMD_TEST_DB_PASSWORD, default none); they create and drop their own
 * database. Without it they are reported as skipped.
 */
#include "plugin.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <libconfig.h>
#include <mysql.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "log.h"
#include "tap.h"

#ifndef IDEMD_TEST_BUILD
#define IDEMD_TEST_BUILD "build"
#endif
#define TP IDEMD_TEST_BUILD "/tests/plugins/" /* build-asan under SANITIZE=1 */
#define ORDER_PAY IDEMD_TEST_BUILD "/plugins/order_pay.so"

static int has(const char *s, const char *sub)
{
    return s != NULL && strstr(s, sub) != NULL;
}

/* Loads path expecting a refusal whose message contains every string in want (NULL-ended). */
static void t_refused(const char *path, const char *what, const char *const *want)
{
    char err[512] = "";
    plugin_t *p = (plugin_t *)&p; /* must come back NULL */
    int rc = plugin_load(path, &p, err, sizeof(err));
    int good = rc == -1 && p == NULL;

    for (int i = 0; want[i] != NULL; i++)
        good = good && has(err, want[i]);
    ok_got(good, err, "%s is refused and the message says so", what);
    if (rc == 0)
        plugin_free(p);
}

/* plugin_check of path expecting a refusal whose message contains every string in want. */
static void t_refused_check(const char *path, const char *what, const char *const *want)
{
    char err[512] = "", name[64] = "untouched";
    int good = plugin_check(path, name, sizeof(name), err, sizeof(err)) == -1 && name[0] == '\0';

    for (int i = 0; want[i] != NULL; i++)
        good = good && has(err, want[i]);
    ok_got(good, err, "%s is refused and the message says so", what);
}

static void test_loader(void)
{
    char err[512] = "";
    char ours[32], theirs[32];
    plugin_t *p = NULL, *q = NULL;

    err[0] = '\0';
    ok_got(plugin_load(TP "counter.so", &p, err, sizeof(err)) == 0 && p != NULL, err,
           "counter.so loads");
    if (p != NULL) {
        ok_got(strcmp(p->path, TP "counter.so") == 0 && p->dl != NULL && p->handler != NULL &&
                   strcmp(p->handler->name, "counter") == 0 && p->handler->init != NULL &&
                   p->handler->handle != NULL && p->handler->fini != NULL &&
                   p->handler->abi_major == IDEMD_HANDLER_ABI_MAJOR,
               NULL, "counter.so: path copied, name and callbacks as exported");
        ok_got(plugin_load(TP "counter.so", &q, err, sizeof(err)) == 0 && q != NULL &&
                   q->handler == p->handler,
               err, "the same file loads a second time (shared by dlopen)");
        plugin_free(q);
        ok_got(strcmp(p->handler->name, "counter") == 0, NULL,
               "freeing one of two loads leaves the other usable");
        plugin_free(p);
    }

    /* A plugin built for 1.0 loads on a 1.1 host; the host fills fields it never reads. */
    err[0] = '\0';
    p = NULL;
    ok_got(plugin_load(TP "minor0.so", &p, err, sizeof(err)) == 0 && p != NULL &&
               p->handler->abi_minor == 0,
           err, "minor0.so (built for 1.0) loads on a %d.%d host", IDEMD_HANDLER_ABI_MAJOR,
           IDEMD_HANDLER_ABI_MINOR);
    if (p != NULL) {
        idemd_message_t msg = {.msg_id = "m", .queue = "q", .user_id = "u", .app_id = "a"};
        char why[64] = "";
        ok_got(p->handler->handle(NULL, NULL, &msg, why, sizeof(why)) == IDEMD_RESULT_OK, why,
               "minor0.so handles a 1.1 message");
        plugin_free(p);
    }
    ok_got(IDEMD_HANDLER_ABI_MINOR >= 1 &&
               offsetof(idemd_message_t, app_id) > offsetof(idemd_message_t, consumer),
           NULL, "ABI 1.1: user_id and app_id are appended after the 1.0 fields");
    ok_got(IDEMD_HANDLER_ABI_MINOR >= 4 &&
               offsetof(idemd_message_t, traceparent) > offsetof(idemd_message_t, app_id) &&
               offsetof(idemd_message_t, span_id) < offsetof(idemd_message_t, timestamp),
           NULL, "ABI 1.4: the trace context is appended after the 1.1 fields");
    ok_got(IDEMD_HANDLER_ABI_MINOR >= 5 &&
               offsetof(idemd_message_t, has_timestamp) + sizeof(int) <= sizeof(idemd_message_t) &&
               offsetof(idemd_message_t, has_timestamp) + sizeof(int) + sizeof(void *) >
                   sizeof(idemd_message_t),
           NULL, "ABI 1.5: timestamp and has_timestamp are appended after the trace context");

    snprintf(ours, sizeof(ours), "(idemd speaks %d.%d)", IDEMD_HANDLER_ABI_MAJOR,
             IDEMD_HANDLER_ABI_MINOR);
    t_refused(
        TP "wrong_abi.so", "wrong_abi.so (major 99)",
        (const char *const[]){TP "wrong_abi.so", "handler ABI 99.0 is not supported", ours, NULL});
    snprintf(theirs, sizeof(theirs), "handler ABI %d.%d ", IDEMD_HANDLER_ABI_MAJOR,
             IDEMD_HANDLER_ABI_MINOR + 1);
    t_refused(TP "newer_minor.so", "newer_minor.so (minor newer than ours)",
              (const char *const[]){TP "newer_minor.so", theirs, ours, NULL});
    t_refused(TP "no_symbol.so", "no_symbol.so (no idemd_handler symbol)",
              (const char *const[]){TP "no_symbol.so", "\"" IDEMD_HANDLER_SYMBOL "\"", NULL});
    t_refused(TP "no_name.so", "no_name.so (empty name)",
              (const char *const[]){TP "no_name.so", "empty name", NULL});
    t_refused(TP "no_handle.so", "no_handle.so (no handle())",
              (const char *const[]){TP "no_handle.so", "no handle()", NULL});

    t_refused(TP "does_not_exist.so", "a nonexistent path",
              (const char *const[]){
                  TP "does_not_exist.so: cannot load handler: No such file or directory", NULL});
    /* The refusal carries what dlopen itself says (less the file name, said once already). */
    t_refused(TP "calls_log_msg.so", "calls_log_msg.so (calls idemd's log_msg, not the host's)",
              (const char *const[]){TP "calls_log_msg.so: cannot load handler: ",
                                    "undefined symbol: log_msg", "host table", NULL});
    t_refused("", "an empty path", (const char *const[]){"empty", NULL});
    t_refused("/etc/hostname", "a file that is not a shared object",
              (const char *const[]){"/etc/hostname: cannot load handler", NULL});

    /* A bare file name means the file in the working directory, not a library search. */
    int here = open(".", O_RDONLY | O_DIRECTORY);
    p = NULL;
    if (here >= 0 && chdir(TP) == 0) {
        err[0] = '\0';
        ok_got(plugin_load("counter.so", &p, err, sizeof(err)) == 0, err,
               "a bare file name loads from the working directory");
        plugin_free(p);
        ok_got(fchdir(here) == 0, strerror(errno), "back to the repository root");
    } else {
        ok_got(0, strerror(errno), "chdir to " TP);
    }
    if (here >= 0)
        close(here);

    char tiny[16];
    memset(tiny, 'x', sizeof(tiny));
    p = NULL;
    ok_got(plugin_load(TP "wrong_abi.so", &p, tiny, sizeof(tiny)) == -1 &&
               memchr(tiny, '\0', sizeof(tiny)) != NULL,
           NULL, "a short error buffer is truncated and terminated");
    plugin_free(NULL);
    ok_got(1, NULL, "plugin_free(NULL) is fine");
}

/* Threads of this process, from /proc/self/status; -1 when unknown. */
static int t_threads(void)
{
    char line[256];
    int n = -1;
    FILE *f = fopen("/proc/self/status", "r");

    if (f == NULL)
        return -1;
    while (fgets(line, sizeof(line), f) != NULL)
        if (sscanf(line, "Threads: %d", &n) == 1)
            break;
    fclose(f);
    return n;
}

/* The loader runs in a child: its constructors leave no trace in the caller. */
static void test_check(void)
{
    char err[512] = "", name[64] = "", marker[] = "/tmp/test_plugin_marker.XXXXXX", buf[256];
    int fd = mkstemp(marker);
    ssize_t n;

    ok_got(plugin_check(TP "counter.so", name, sizeof(name), err, sizeof(err)) == 0 &&
               strcmp(name, "counter") == 0,
           err, "plugin_check: counter.so passes and its name comes back");
    t_refused_check(TP "wrong_abi.so", "plugin_check: wrong_abi.so",
                    (const char *const[]){TP "wrong_abi.so", "handler ABI 99.0", NULL});
    t_refused_check(
        TP "calls_log_msg.so", "plugin_check: calls_log_msg.so",
        (const char *const[]){TP "calls_log_msg.so", "undefined symbol: log_msg", NULL});
    t_refused_check("", "plugin_check: an empty path", (const char *const[]){"empty", NULL});

    if (!ok_got(fd >= 0, strerror(errno), "marker file"))
        return;
    setenv("IDEMD_TEST_MARKER", marker, 1);
    err[0] = '\0';
    ok_got(plugin_check(TP "ctor.so", name, sizeof(name), err, sizeof(err)) == 0 &&
               strcmp(name, "ctor") == 0,
           err, "plugin_check: ctor.so (a constructor that starts a thread) passes");
    n = pread(fd, buf, sizeof(buf) - 1, 0);
    buf[n > 0 ? n : 0] = '\0';
    buf[strcspn(buf, "\n")] = '\0';
    ok_got(n > 0 && atoi(buf) > 0 && atoi(buf) != (int)getpid(), buf,
           "the constructor ran in another process (pid %s), not in ours (%d)", buf, (int)getpid());
    ok_got(t_threads() == 1, NULL, "we are still single-threaded (%d)", t_threads());
    ok_got(dlopen(TP "ctor.so", RTLD_NOW | RTLD_NOLOAD) == NULL, NULL,
           "ctor.so is not loaded in our process");
    setenv("IDEMD_TEST_CTOR_ABORT", "1", 1);
    t_refused_check(TP "ctor.so", "plugin_check: a constructor that aborts",
                    (const char *const[]){TP "ctor.so", "killed the checker", "Abort", NULL});
    unsetenv("IDEMD_TEST_CTOR_ABORT");
    unsetenv("IDEMD_TEST_MARKER");
    close(fd);
    unlink(marker);
}

/* cp src dst with mode; 0 or -1. */
static int t_copy(const char *src, const char *dst, mode_t mode)
{
    char buf[65536];
    int in = open(src, O_RDONLY), out = open(dst, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ssize_t n;
    int rc = in >= 0 && out >= 0 ? 0 : -1;

    while (rc == 0 && (n = read(in, buf, sizeof(buf))) > 0)
        if (write(out, buf, (size_t)n) != n)
            rc = -1;
    if (in >= 0)
        close(in);
    if (out >= 0 && fchmod(out, mode) != 0)
        rc = -1;
    if (out >= 0)
        close(out);
    return rc;
}

/* Who may write the file or a directory above it decides whether it loads at all. */
static void test_permissions(void)
{
    char dir[] = "/tmp/test_plugin_perm.XXXXXX", so[128], sub[128], subso[160];

    if (!ok_got(mkdtemp(dir) != NULL, strerror(errno), "temp directory under /tmp"))
        return;
    snprintf(so, sizeof(so), "%s/counter.so", dir);
    snprintf(sub, sizeof(sub), "%s/sub", dir);
    snprintf(subso, sizeof(subso), "%s/counter.so", sub);
    if (!ok_got(t_copy(TP "counter.so", so, 0644) == 0 && mkdir(sub, 0755) == 0 &&
                    t_copy(TP "counter.so", subso, 0755) == 0,
                strerror(errno), "copies of counter.so"))
        goto done;

    plugin_t *p = NULL;
    char err[512] = "";
    ok_got(plugin_load(so, &p, err, sizeof(err)) == 0, err,
           "a 0644 plugin in a 0700 directory under /tmp (sticky, root's) loads");
    plugin_free(p);
    chmod(so, 0664);
    t_refused(so, "a group-writable plugin",
              (const char *const[]){so, "refused", "writable by group (mode 0664)", NULL});
    t_refused_check(so, "plugin_check: a group-writable plugin",
                    (const char *const[]){so, "writable by group", NULL});
    chmod(so, 0646);
    t_refused(so, "a plugin writable by others",
              (const char *const[]){so, "writable by others", NULL});
    chmod(so, 0644);
    chmod(dir, 0770);
    t_refused(subso, "a plugin below a group-writable directory",
              (const char *const[]){subso, "directory", dir, "writable by group", NULL});
    chmod(dir, 0777);
    t_refused(subso, "a plugin below a world-writable directory that is not sticky",
              (const char *const[]){subso, "directory", dir, "writable by others", NULL});
    chmod(dir, 01777);
    p = NULL;
    err[0] = '\0';
    ok_got(plugin_load(subso, &p, err, sizeof(err)) == 0, err,
           "a world-writable sticky directory of root's or ours is accepted (like /tmp) when "
           "what is on the path in it is ours");
    plugin_free(p);
    if (geteuid() == 0) {
        ok_got(chown(sub, 12345, 12345) == 0, strerror(errno),
               "chown the subdirectory to uid 12345");
        t_refused(subso, "a directory of another user in a world-writable sticky one",
                  (const char *const[]){subso, sub, "owned by uid 12345",
                                        "that others may write to", NULL});
        ok_got(chown(sub, 0, 0) == 0, strerror(errno), "chown the subdirectory back");
        chmod(dir, 0700);
        ok_got(chown(so, 12345, 12345) == 0, strerror(errno), "chown the copy to uid 12345");
        t_refused(so, "a plugin owned by another user",
                  (const char *const[]){so, "owned by uid 12345", "not by root or", NULL});
        ok_got(chown(so, 0, 0) == 0 && chown(sub, 12345, 12345) == 0, strerror(errno),
               "chown the subdirectory to uid 12345");
        t_refused(subso, "a plugin in a directory owned by another user",
                  (const char *const[]){subso, "directory", sub, "owned by uid 12345", NULL});
    } else {
        skip("ownership checks", "not running as root");
    }
done:
    unlink(subso);
    rmdir(sub);
    unlink(so);
    chmod(dir, 0700);
    rmdir(dir);
}

static const char *settings_text = "settings = {\n"
                                   "  table = \"orders\";\n"
                                   "  n = 42;\n"
                                   "  neg = -7;\n"
                                   "  big = 5000000000L;\n"
                                   "  on = true;\n"
                                   "  off = false;\n"
                                   "  ratio = 1.5;\n"
                                   "  list = [1, 2];\n"
                                   "  sub = { x = 1; };\n"
                                   "};\n";

static void test_host_settings(void)
{
    const idemd_host_t *h = plugin_host();
    config_t cfg;
    const idemd_settings_t *s;
    const idemd_settings_t *not_group;
    const char *str;
    long long ll;
    int b;

    ok_got(h == plugin_host() && h->abi_major == IDEMD_HANDLER_ABI_MAJOR &&
               h->abi_minor == IDEMD_HANDLER_ABI_MINOR && h->log != NULL &&
               h->setting_string != NULL && h->setting_int != NULL && h->setting_bool != NULL,
           NULL, "plugin_host: one static table with our ABI and every service set");

    config_init(&cfg);
    if (!ok_got(config_read_string(&cfg, settings_text) == CONFIG_TRUE, config_error_text(&cfg),
                "settings group parses")) {
        config_destroy(&cfg);
        return;
    }
    s = (const idemd_settings_t *)config_lookup(&cfg, "settings");
    not_group = (const idemd_settings_t *)config_lookup(&cfg, "settings.n");

    str = NULL;
    ok_got(h->setting_string(s, "table", &str) == 0 && str != NULL && strcmp(str, "orders") == 0,
           str, "setting_string finds a string");
    str = "untouched";
    ok_got(h->setting_string(s, "n", &str) == -1 && strcmp(str, "untouched") == 0, str,
           "setting_string: an int is the wrong type, out untouched");
    ok_got(h->setting_string(s, "missing", &str) == -1 && strcmp(str, "untouched") == 0, str,
           "setting_string: missing, out untouched");
    ok_got(h->setting_string(NULL, "table", &str) == -1 && strcmp(str, "untouched") == 0, str,
           "setting_string: NULL group is -1");

    ll = 1234;
    ok_got(h->setting_int(s, "n", &ll) == 0 && ll == 42, NULL, "setting_int finds an int");
    ok_got(h->setting_int(s, "neg", &ll) == 0 && ll == -7, NULL, "setting_int: negative");
    ok_got(h->setting_int(s, "big", &ll) == 0 && ll == 5000000000LL, NULL,
           "setting_int: a 64-bit int");
    ll = 1234;
    ok_got(h->setting_int(s, "ratio", &ll) == -1 && ll == 1234, NULL,
           "setting_int: a float is the wrong type, out untouched");
    ok_got(h->setting_int(s, "table", &ll) == -1 && h->setting_int(s, "on", &ll) == -1 &&
               h->setting_int(s, "list", &ll) == -1 && h->setting_int(s, "missing", &ll) == -1 &&
               ll == 1234,
           NULL, "setting_int: string, bool, list, missing are -1");
    ok_got(h->setting_int(NULL, "n", &ll) == -1 && ll == 1234, NULL,
           "setting_int: NULL group is -1");

    b = 7;
    ok_got(h->setting_bool(s, "on", &b) == 0 && b == 1, NULL, "setting_bool: true is 1");
    ok_got(h->setting_bool(s, "off", &b) == 0 && b == 0, NULL, "setting_bool: false is 0");
    b = 7;
    ok_got(h->setting_bool(s, "n", &b) == -1 && h->setting_bool(s, "table", &b) == -1 &&
               h->setting_bool(s, "missing", &b) == -1 && b == 7,
           NULL, "setting_bool: int, string, missing are -1, out untouched");
    ok_got(h->setting_bool(NULL, "on", &b) == -1 && b == 7, NULL, "setting_bool: NULL group is -1");

    ok_got(h->setting_int(not_group, "n", &ll) == -1 && h->setting_int(s, "sub.x", &ll) == -1 &&
               h->setting_int(s, NULL, &ll) == -1 && ll == 1234,
           NULL, "names are members of the group only: no paths, no non-group settings");
    config_destroy(&cfg);
}

/* Runs the host's log service with stderr sent to a file; returns what was written (static). */
static const char *capture_host_log(void)
{
    static char buf[4096];
    const idemd_host_t *h = plugin_host();
    char path[] = "/tmp/test_plugin_log.XXXXXX";
    int fd = mkstemp(path);
    int saved = dup(STDERR_FILENO);
    ssize_t n;

    buf[0] = '\0';
    if (fd < 0 || saved < 0)
        return buf;
    unlink(path);
    fflush(stderr);
    dup2(fd, STDERR_FILENO);
    log_set_level(LOG_LEVEL_INFO);
    h->log(IDEMD_LOG_INFO, "hello %d from a plugin", 42);
    h->log(IDEMD_LOG_DEBUG, "hidden at info");
    h->log(IDEMD_LOG_WARNING, "careful");
    h->log(IDEMD_LOG_ERROR, "broken");
    h->log((idemd_log_level_t)99, "odd level %s", "above debug");
    h->log((idemd_log_level_t)0, "odd level %s", "below error");
    h->log((idemd_log_level_t)5, "odd level %s", "between");
    dup2(saved, STDERR_FILENO);
    close(saved);
    n = pread(fd, buf, sizeof(buf) - 1, 0);
    buf[n > 0 ? n : 0] = '\0';
    close(fd);
    return buf;
}

static void test_host_log(void)
{
    const char *out = capture_host_log();

    ok_got(has(out, " info: hello 42 from a plugin\n"), out, "log: info line formatted by log.c");
    ok_got(!has(out, "hidden at info"), out, "log: debug is dropped at level info");
    ok_got(has(out, " warning: careful\n") && has(out, " error: broken\n"), out,
           "log: warning and error levels map to log.c's");
    ok_got(!has(out, "above debug") && has(out, " error: odd level below error\n") &&
               has(out, " warning: odd level between\n"),
           out, "log: unknown levels are clamped, not passed through");
}

/* ---- plugins against a real database ---- */

/* This run's database ("idemd_test_plugin_PID"); new connections select it once it is set. */
static char t_dbname[64];

static MYSQL *db_connect(void)
{
    const char *sock = getenv("IDEMD_TEST_DB_SOCKET");
    const char *user = getenv("IDEMD_TEST_DB_USER");
    const char *pw = getenv("IDEMD_TEST_DB_PASSWORD");
    MYSQL *db = mysql_init(NULL);

    if (db == NULL)
        return NULL;
    if (mysql_real_connect(db, NULL, user ? user : "root", pw, t_dbname[0] ? t_dbname : NULL, 0,
                           sock, CLIENT_MULTI_STATEMENTS) == NULL) {
        printf("# connect: %s\n", mysql_error(db));
        mysql_close(db);
        return NULL;
    }
    return db;
}

/* Runs one or more statements, discarding results; 0 or the error number. */
static unsigned db_exec(MYSQL *db, const char *sql)
{
    int st;

    if (mysql_real_query(db, sql, (unsigned long)strlen(sql)) != 0)
        return mysql_errno(db);
    do {
        MYSQL_RES *r = mysql_store_result(db);
        if (r != NULL)
            mysql_free_result(r);
        else if (mysql_errno(db) != 0)
            return mysql_errno(db);
        st = mysql_next_result(db);
    } while (st == 0);
    return st > 0 ? mysql_errno(db) : 0;
}

/* The first column of the first row as a number; -1 for no row, -2 on error. */
static long long db_value(MYSQL *db, const char *sql)
{
    MYSQL_RES *r;
    MYSQL_ROW row;
    long long v = -1;

    if (mysql_real_query(db, sql, (unsigned long)strlen(sql)) != 0 ||
        (r = mysql_store_result(db)) == NULL)
        return -2;
    row = mysql_fetch_row(r);
    if (row != NULL && row[0] != NULL)
        v = atoll(row[0]);
    mysql_free_result(r);
    return v;
}

static unsigned db_apply_file(MYSQL *db, const char *path)
{
    FILE *f = fopen(path, "r");
    char *sql;
    long n;
    unsigned rc;

    if (f == NULL)
        return 1;
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    rewind(f);
    sql = calloc(1, (size_t)n + 1);
    if (sql == NULL || fread(sql, 1, (size_t)n, f) != (size_t)n) {
        free(sql);
        fclose(f);
        return 1;
    }
    fclose(f);
    rc = db_exec(db, sql);
    free(sql);
    return rc;
}

static idemd_message_t msg_make(const char *id, const void *body, size_t len)
{
    idemd_message_t m;

    memset(&m, 0, sizeof(m));
    m.msg_id = id;
    m.msg_id_len = strlen(id);
    m.body = body;
    m.body_len = len;
    m.exchange = "";
    m.routing_key = "test";
    m.content_type = "";
    m.attempt = 1;
    m.queue = "q.test";
    m.consumer = "q.test";
    return m;
}

/* A plugin with its state on one connection, as a worker holds it. */
typedef struct loaded {
    plugin_t *p;
    void *state;
    config_t cfg;
} loaded_t;

static int loaded_init(loaded_t *l, const char *path, const char *settings, MYSQL *db, char *err,
                       size_t errlen)
{
    const idemd_settings_t *s = NULL;

    memset(l, 0, sizeof(*l));
    config_init(&l->cfg);
    if (settings != NULL) {
        if (config_read_string(&l->cfg, settings) != CONFIG_TRUE) {
            snprintf(err, errlen, "settings: %s", config_error_text(&l->cfg));
            return -1;
        }
        s = (const idemd_settings_t *)config_lookup(&l->cfg, "settings");
    }
    if (plugin_load(path, &l->p, err, errlen) != 0)
        return -1;
    return l->p->handler->init(plugin_host(), s, db, &l->state, err, errlen);
}

static void loaded_free(loaded_t *l)
{
    if (l->p != NULL && l->state != NULL)
        l->p->handler->fini(l->state);
    l->state = NULL;
    plugin_free(l->p);
    l->p = NULL;
    config_destroy(&l->cfg);
}

static idemd_result_t run(loaded_t *l, MYSQL *db, const char *id, const void *body, size_t len,
                          char *err, size_t errlen)
{
    idemd_message_t m = msg_make(id, body, len);

    err[0] = '\0';
    return l->p->handler->handle(l->state, db, &m, err, errlen);
}

#define RUN_S(l, db, body, err) run((l), (db), "m", (body), strlen(body), (err), sizeof(err))

static const char *result_name(idemd_result_t r)
{
    return r == IDEMD_RESULT_OK ? "OK" : r == IDEMD_RESULT_RETRY ? "RETRY" : "REJECT";
}

static void t_body(loaded_t *l, MYSQL *db, const char *body, size_t len, idemd_result_t want,
                   const char *reason)
{
    char err[256], diag[400], label[48];
    idemd_result_t r = run(l, db, "m", body, len, err, sizeof(err));
    size_t n;

    /* The body as a printable label: control bytes would break the TAP line. */
    for (n = 0; n < len && n < sizeof(label) - 1; n++)
        label[n] = (unsigned char)body[n] < 0x20 ? '.' : body[n];
    label[n] = '\0';
    snprintf(diag, sizeof(diag), "%s \"%s\"", result_name(r), err);
    ok_got(r == want && (reason == NULL || has(err, reason)), diag, "order_pay: '%s' -> %s %s",
           label, result_name(want), reason ? reason : "");
}

/* lit is a string literal; its length comes from sizeof, so embedded NULs count. */
#define T_BODY(l, db, lit, want, reason) t_body((l), (db), (lit), sizeof(lit) - 1, (want), (reason))

static void test_order_pay(MYSQL *db)
{
    char err[256];
    loaded_t l;
    idemd_result_t r;

    db_exec(db, "INSERT INTO orders(id, status) VALUES (1, 1), (2, 2), (3, 3), (4, 1), (5, 1), "
                "(9223372036854775807, 1)");
    ok_got(loaded_init(&l, ORDER_PAY, NULL, db, err, sizeof(err)) == 0, err,
           "order_pay: init with no settings (table orders, guard on)");
    if (l.state == NULL) {
        loaded_free(&l);
        return;
    }
    db_exec(db, "BEGIN");
    r = RUN_S(&l, db, "{\"orderId\": 1}", err);
    ok_got(r == IDEMD_RESULT_OK &&
               db_value(db, "SELECT pay_count * 10 + status FROM orders WHERE id = 1") == 12 &&
               db_value(db, "SELECT pay_time IS NOT NULL FROM orders WHERE id = 1") == 1,
           err, "order_pay: pays an unpaid order (status 2, pay_count 1, pay_time set)");
    db_exec(db, "COMMIT");

    T_BODY(&l, db, "{\"orderId\": 1}", IDEMD_RESULT_OK, NULL);
    ok_got(db_value(db, "SELECT pay_count FROM orders WHERE id = 1") == 1, NULL,
           "order_pay: the guard keeps a second payment from changing the order");
    T_BODY(&l, db, "{\"orderId\": \"2\"}", IDEMD_RESULT_OK, NULL);
    T_BODY(&l, db, " {\"orderId\":4, \"amount\": 1.5, \"x\": [1,{}]}\n", IDEMD_RESULT_OK, NULL);
    T_BODY(&l, db, "{\"orderId\":9223372036854775807}", IDEMD_RESULT_OK, NULL);
    T_BODY(&l, db, "{\"orderId\":\"5\"}", IDEMD_RESULT_OK, NULL);
    ok_got(
        db_value(db, "SELECT SUM(pay_count) FROM orders WHERE id IN (4, 5, 9223372036854775807)") ==
            3,
        NULL, "order_pay: extra fields, string ids and the largest BIGINT all pay");
    db_exec(db, "ROLLBACK");

    T_BODY(&l, db, "{\"orderId\": 3}", IDEMD_RESULT_REJECT, "order 3 has status 3");
    T_BODY(&l, db, "{\"orderId\": 999}", IDEMD_RESULT_REJECT, "order 999 does not exist");
    T_BODY(&l, db, "", IDEMD_RESULT_REJECT, "empty body");
    T_BODY(&l, db, "   ", IDEMD_RESULT_REJECT, "not JSON");
    T_BODY(&l, db, "orderId=1", IDEMD_RESULT_REJECT, "not JSON");
    T_BODY(&l, db, "{\"orderId\": 1", IDEMD_RESULT_REJECT, "not JSON");
    T_BODY(&l, db, "{\"orderId\": 1} {\"orderId\": 2}", IDEMD_RESULT_REJECT,
           "body is not JSON: text after the value at byte 15");
    T_BODY(&l, db, "{\"orderId\": 1}\0", IDEMD_RESULT_REJECT, "text after the value");
    T_BODY(&l, db, "{\"order\0Id\": 1}", IDEMD_RESULT_REJECT, "body is not JSON");
    /* idemd's one reader: json-c took the last orderId; a duplicate now refuses the body. */
    T_BODY(&l, db, "{\"orderId\": 1, \"orderId\": 2}", IDEMD_RESULT_REJECT,
           "body is not I-JSON: duplicate member \"orderId\" at $");
    T_BODY(&l, db, "{\"orderId\": 1, \"x\": {\"a\": 1, \"a\": 1}}", IDEMD_RESULT_REJECT,
           "body is not I-JSON: duplicate member \"a\" at $.x");
    T_BODY(&l, db, "{\"orderId\": 1, \"x\": \"\xff\"}", IDEMD_RESULT_REJECT,
           "body is not I-JSON: invalid UTF-8");
    T_BODY(&l, db, "{\"orderId\": 1, \"x\": \"\\ud800\"}", IDEMD_RESULT_REJECT,
           "body is not I-JSON");
    T_BODY(&l, db, "{'orderId': 1}", IDEMD_RESULT_REJECT, "body is not JSON");
    T_BODY(&l, db, "{\"orderId\": 1,}", IDEMD_RESULT_REJECT, "body is not JSON");
    T_BODY(&l, db, "1001", IDEMD_RESULT_REJECT, "not a JSON object (got number");
    T_BODY(&l, db, "[1001]", IDEMD_RESULT_REJECT, "not a JSON object (got array");
    T_BODY(&l, db, "\"1001\"", IDEMD_RESULT_REJECT, "not a JSON object (got string");
    T_BODY(&l, db, "{}", IDEMD_RESULT_REJECT, "orderId missing");
    T_BODY(&l, db, "{\"orderid\": 1}", IDEMD_RESULT_REJECT, "orderId missing");
    T_BODY(&l, db, "{\"orderId\": null}", IDEMD_RESULT_REJECT,
           "not a positive integer (got 'null'");
    T_BODY(&l, db, "{\"orderId\": 1.5}", IDEMD_RESULT_REJECT, "not a positive integer (got '1.5'");
    T_BODY(&l, db, "{\"orderId\": 1.0}", IDEMD_RESULT_REJECT, "not a positive integer (got '1.0'");
    T_BODY(&l, db, "{\"orderId\": 1e3}", IDEMD_RESULT_REJECT, "not a positive integer (got '1e3'");
    T_BODY(&l, db, "{\"orderId\": true}", IDEMD_RESULT_REJECT,
           "not a positive integer (got 'true'");
    T_BODY(&l, db, "{\"orderId\": [1]}", IDEMD_RESULT_REJECT, "not a positive integer (got '[1]'");
    T_BODY(&l, db, "{\"orderId\": \"a\\nb\"}", IDEMD_RESULT_REJECT,
           "not a positive integer (got 'a?b'");
    T_BODY(&l, db, "{\"orderId\": 0}", IDEMD_RESULT_REJECT, "must be positive (got 0)");
    T_BODY(&l, db, "{\"orderId\": -5}", IDEMD_RESULT_REJECT, "must be positive (got -5)");
    T_BODY(&l, db, "{\"orderId\": 9223372036854775808}", IDEMD_RESULT_REJECT, "out of range");
    T_BODY(&l, db, "{\"orderId\": 99999999999999999999999}", IDEMD_RESULT_REJECT, "out of range");
    T_BODY(&l, db, "{\"orderId\": \"9223372036854775808\"}", IDEMD_RESULT_REJECT, "out of range");
    T_BODY(&l, db, "{\"orderId\": \"12x\"}", IDEMD_RESULT_REJECT,
           "not a positive integer (got '12x'");
    T_BODY(&l, db, "{\"orderId\": \"-1\"}", IDEMD_RESULT_REJECT, "must be positive (got -1)");
    T_BODY(&l, db, "{\"orderId\": \"007\"}", IDEMD_RESULT_REJECT,
           "not a positive integer (got '007'");
    T_BODY(&l, db, "{\"orderId\": \" 7\"}", IDEMD_RESULT_REJECT,
           "not a positive integer (got ' 7'");
    T_BODY(&l, db, "{\"orderId\": \"\"}", IDEMD_RESULT_REJECT, "not a positive integer (got ''");
    T_BODY(&l, db, "{\"orderId\": \"0\"}", IDEMD_RESULT_REJECT, "must be positive (got 0)");

    /* A row lock held elsewhere: the UPDATE times out and the message must come back. */
    MYSQL *other = db_connect();
    if (other != NULL &&
        db_exec(other, "BEGIN; SELECT * FROM orders WHERE id = 4 FOR UPDATE") == 0) {
        db_exec(db, "SET SESSION innodb_lock_wait_timeout = 1");
        db_exec(db, "BEGIN");
        r = RUN_S(&l, db, "{\"orderId\": 4}", err);
        ok_got(r == IDEMD_RESULT_RETRY && has(err, "mysql error 1205: Lock wait timeout"), err,
               "order_pay: a MySQL error is RETRY with \"mysql error NNNN: text\"");
        db_exec(db, "ROLLBACK");
        r = RUN_S(&l, db, "{\"orderId\": 999}", err);
        ok_got(r == IDEMD_RESULT_REJECT, err, "order_pay: statements still usable after the error");
    } else {
        ok_got(0, other ? mysql_error(other) : "no connection", "second connection holds a lock");
    }
    if (other != NULL)
        mysql_close(other);

    ok_got(run(&l, (MYSQL *)&l, "m", "{\"orderId\": 1}", 14, err, sizeof(err)) ==
                   IDEMD_RESULT_RETRY &&
               has(err, "another connection"),
           err, "order_pay: a connection other than init()'s is refused with RETRY");
    loaded_free(&l);

    /* Unguarded: the negative control counts every payment. */
    ok_got(loaded_init(&l, ORDER_PAY, "settings = { table = \"orders\"; guard = false; };", db, err,
                       sizeof(err)) == 0,
           err, "order_pay: init with guard = false");
    if (l.state != NULL) {
        RUN_S(&l, db, "{\"orderId\": 1}", err);
        RUN_S(&l, db, "{\"orderId\": 1}", err);
        db_exec(db, "COMMIT");
        ok_got(db_value(db, "SELECT pay_count FROM orders WHERE id = 1") == 3, NULL,
               "order_pay: guard = false applies every payment (pay_count 3)");
        T_BODY(&l, db, "{\"orderId\": 999}", IDEMD_RESULT_REJECT, "does not exist");
        db_exec(db, "ROLLBACK");
    }
    loaded_free(&l);

    ok_got(loaded_init(&l, ORDER_PAY, "settings = { table = \"orders`; DROP TABLE x; --\"; };", db,
                       err, sizeof(err)) == -1 &&
               has(err, "settings.table") && l.state == NULL,
           err, "order_pay: a table name that is not an identifier is refused by init");
    loaded_free(&l);
    ok_got(loaded_init(&l, ORDER_PAY, "settings = { table = \"no_such_table\"; };", db, err,
                       sizeof(err)) == -1 &&
               has(err, "mysql error 1146") && l.state == NULL,
           err, "order_pay: a missing table fails init with the MySQL error");
    loaded_free(&l);
}

/* After a reconnect the host runs fini() on the old state and init() on the new connection. */
static void test_order_pay_reconnect(void)
{
    const char *path = ORDER_PAY;
    char err[256];
    loaded_t l;
    MYSQL *a = db_connect(), *b = db_connect();

    if (a == NULL || b == NULL) {
        ok_got(0, NULL, "%s: two connections", path);
        goto done;
    }
    if (!ok_got(loaded_init(&l, path, NULL, a, err, sizeof(err)) == 0, err, "%s: init on conn A",
                path)) {
        loaded_free(&l);
        goto done;
    }
    mysql_close(a); /* the connection dies before fini() runs */
    a = NULL;
    l.p->handler->fini(l.state);
    l.state = NULL;
    ok_got(l.p->handler->init(plugin_host(), NULL, b, &l.state, err, sizeof(err)) == 0, err,
           "%s: fini after the connection is gone, then init on conn B", path);
    db_exec(b, "BEGIN");
    ok_got(l.state != NULL &&
               run(&l, b, "r", "{\"orderId\": 5}", 14, err, sizeof(err)) == IDEMD_RESULT_OK,
           err, "%s: handles on the new connection", path);
    db_exec(b, "ROLLBACK");
    loaded_free(&l);
done:
    if (a != NULL)
        mysql_close(a);
    if (b != NULL)
        mysql_close(b);
}

/* Runs body through counter.so in a child with its own connection; returns its wait status. */
static int counter_child(const char *body, int kill_after_ms)
{
    pid_t pid = fork();
    int status = 0;

    if (pid < 0)
        return -1;
    if (pid == 0) {
        char err[256];
        loaded_t l;
        MYSQL *db = db_connect();
        if (db == NULL || loaded_init(&l, TP "counter.so", NULL, db, err, sizeof(err)) != 0)
            _exit(100);
        db_exec(db, "BEGIN");
        run(&l, db, "child", body, strlen(body), err, sizeof(err));
        _exit(0);
    }
    if (kill_after_ms > 0) {
        usleep((useconds_t)kill_after_ms * 1000);
        if (waitpid(pid, &status, WNOHANG) != 0)
            return status;
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        return -2; /* still running when killed: it hung */
    }
    waitpid(pid, &status, 0);
    return status;
}

static double now_ms(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return tv.tv_sec * 1000.0 + tv.tv_usec / 1000.0;
}

static void test_counter(MYSQL *db)
{
    char err[256];
    loaded_t l;
    idemd_message_t m;
    int st;

    ok_got(loaded_init(&l, TP "counter.so", NULL, db, err, sizeof(err)) == 0, err,
           "counter: init with defaults (table effects)");
    if (l.state == NULL) {
        loaded_free(&l);
        return;
    }
    db_exec(db, "BEGIN");
    ok_got(run(&l, db, "a", "x", 1, err, sizeof(err)) == IDEMD_RESULT_OK &&
               run(&l, db, "a", "x", 1, err, sizeof(err)) == IDEMD_RESULT_OK &&
               run(&l, db, "b", "x", 1, err, sizeof(err)) == IDEMD_RESULT_OK,
           err, "counter: plain bodies are OK");
    db_exec(db, "COMMIT");
    ok_got(db_value(db, "SELECT n FROM effects WHERE queue = 'q.test' AND msg_id = 'a'") == 2 &&
               db_value(db, "SELECT n FROM effects WHERE msg_id = 'b'") == 1,
           NULL, "counter: counts effects per (queue, msg_id)");

    ok_got(run(&l, db, "r", "reject", 6, err, sizeof(err)) == IDEMD_RESULT_REJECT &&
               strcmp(err, "test reject") == 0,
           err, "counter: \"reject\" is REJECT \"test reject\"");
    ok_got(run(&l, db, "r", "retry", 5, err, sizeof(err)) == IDEMD_RESULT_RETRY, err,
           "counter: \"retry\" is RETRY");
    ok_got(run(&l, db, "r", "rejected", 8, err, sizeof(err)) == IDEMD_RESULT_OK, err,
           "counter: bodies must match exactly");
    m = msg_make("r1", "retry-once", 10);
    ok_got(l.p->handler->handle(l.state, db, &m, err, sizeof(err)) == IDEMD_RESULT_RETRY, err,
           "counter: \"retry-once\" first attempt is RETRY");
    m.redelivered = 1;
    ok_got(l.p->handler->handle(l.state, db, &m, err, sizeof(err)) == IDEMD_RESULT_OK, err,
           "counter: \"retry-once\" redelivered is OK");
    m.redelivered = 0;
    m.attempt = 2;
    ok_got(l.p->handler->handle(l.state, db, &m, err, sizeof(err)) == IDEMD_RESULT_OK, err,
           "counter: \"retry-once\" attempt 2 is OK");
    db_exec(db, "ROLLBACK");
    loaded_free(&l);

    /* A sanitizer build catches the SIGSEGV itself and exits non-zero instead. */
    st = counter_child("segv", 0);
    ok_got(st > 0 && ((WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV) ||
                      (WIFEXITED(st) && WEXITSTATUS(st) != 0 && WEXITSTATUS(st) != 100)),
           NULL, "counter: \"segv\" dies by SIGSEGV");
    st = counter_child("abort", 0);
    ok_got(st > 0 && WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT, NULL, "counter: \"abort\" aborts");
    st = counter_child("hang", 1500);
    ok_got(st == -2, NULL, "counter: \"hang\" does not return");
    ok_got(db_value(db, "SELECT COUNT(*) FROM effects WHERE msg_id = 'child'") == 0, NULL,
           "counter: effects of crashed handlers were never committed");

    ok_got(loaded_init(&l, TP "counter.so", "settings = { table = \"effects2\"; sleep_ms = 200; };",
                       db, err, sizeof(err)) == 0,
           err, "counter: init with table and sleep_ms");
    if (l.state != NULL) {
        double t0 = now_ms();
        ok_got(run(&l, db, "s", "x", 1, err, sizeof(err)) == IDEMD_RESULT_OK &&
                   now_ms() - t0 >= 190,
               err, "counter: sleep_ms sleeps before the effect");
        ok_got(db_value(db, "SELECT n FROM effects2 WHERE msg_id = 's'") == 1, NULL,
               "counter: writes to settings.table");
        db_exec(db, "ROLLBACK");
    }
    loaded_free(&l);
    ok_got(loaded_init(&l, TP "counter.so", "settings = { table = \"effects x\"; };", db, err,
                       sizeof(err)) == -1 &&
               has(err, "settings.table"),
           err, "counter: a table name that is not an identifier is refused");
    loaded_free(&l);
    ok_got(loaded_init(&l, TP "counter.so", "settings = { sleep_ms = -1; };", db, err,
                       sizeof(err)) == -1 &&
               has(err, "sleep_ms"),
           err, "counter: a negative sleep_ms is refused");
    loaded_free(&l);
}

static const char *effects_sql =
    "CREATE TABLE IF NOT EXISTS %s(queue VARCHAR(128) NOT NULL, msg_id VARBINARY(255) NOT NULL, "
    "n INT NOT NULL, PRIMARY KEY(queue, msg_id)) ENGINE=InnoDB";

/* ABI 1.6: host->body_value reads the body with idemd's one JSON reader. */
static void test_host_body_value(void)
{
    const idemd_host_t *h = plugin_host();
    idemd_message_t m = {0};
    char out[16], err[256];
    const char *b;

    ok_got(h->abi_minor >= 6 && h->body_value != NULL && h->value_check != NULL, NULL,
           "ABI 1.6: the host offers value_check and body_value");
    b = "{\"order\": {\"id\": 42, \"sku\": \"a\\u00e9\", \"lines\": [{\"q\": 2}]}, \"t\": true}";
    m.body = b;
    m.body_len = strlen(b);
    ok_got(h->body_value(&m, "order.id", out, sizeof(out), err, sizeof(err)) == 1 &&
               strcmp(out, "42") == 0,
           out, "body_value: a nested number, as written");
    ok_got(h->body_value(&m, "order.sku", out, sizeof(out), err, sizeof(err)) == 1 &&
               strcmp(out, "a\xc3\xa9") == 0,
           out, "body_value: a string, decoded");
    ok_got(h->body_value(&m, "order.lines.0.q", out, sizeof(out), err, sizeof(err)) == 1 &&
               strcmp(out, "2") == 0,
           out, "body_value: through an array index");
    ok_got(h->body_value(&m, "t", out, sizeof(out), err, sizeof(err)) == 1 &&
               strcmp(out, "true") == 0,
           out, "body_value: true as the word");
    ok_got(h->body_value(&m, "order.missing", out, sizeof(out), err, sizeof(err)) == 0, NULL,
           "body_value: an absent path is 0");
    ok_got(h->body_value(&m, "order", out, sizeof(out), err, sizeof(err)) == -1 &&
               strstr(err, "more than 15 fit") != NULL,
           err, "body_value: a value longer than out is refused");
    ok_got(h->body_value(&m, "order..id", out, sizeof(out), err, sizeof(err)) == -1, err,
           "body_value: an empty step is refused");
    /* The reader's rules: the SQL handler and order_key read these the same way. */
    b = "{\"a\": \"good\", \"a\\u0000x\": \"evil\"}";
    m.body = b;
    m.body_len = strlen(b);
    ok_got(h->body_value(&m, "a", out, sizeof(out), err, sizeof(err)) == -1, err,
           "body_value: U+0000 in a member name refuses the body");
    b = "{\"a\": {\"b\": 1}, \"a\": {\"b\": 2}}";
    m.body = b;
    m.body_len = strlen(b);
    ok_got(h->body_value(&m, "a.b", out, sizeof(out), err, sizeof(err)) == -1 &&
               strstr(err, "duplicate") != NULL,
           err, "body_value: a duplicate parent refuses the body");
    b = "{\"a\": \"\xff\xfe\"}";
    m.body = b;
    m.body_len = strlen(b);
    ok_got(h->body_value(&m, "a", out, sizeof(out), err, sizeof(err)) == -1, err,
           "body_value: invalid UTF-8 refuses the body");
}

/* The shipped plugins read bodies through body_value: a host older than 1.6 is refused at init,
 * before they touch the database (so none is needed here). */
static void test_shipped_need_1_6(void)
{
    static const char *paths[] = {ORDER_PAY, IDEMD_TEST_BUILD "/plugins/trade_sync.so"};
    idemd_host_t old = *plugin_host();
    char err[256];

    old.abi_minor = 5;
    old.body_value = NULL;
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
        plugin_t *p = NULL;
        void *state = (void *)1;
        err[0] = '\0';
        if (!ok_got(plugin_load(paths[i], &p, err, sizeof(err)) == 0, err, "%s loads", paths[i]))
            continue;
        ok_got(p->handler->abi_minor == IDEMD_HANDLER_ABI_MINOR &&
                   p->handler->init(&old, NULL, NULL, &state, err, sizeof(err)) == -1 &&
                   state == NULL && has(err, "host ABI 1.6 (body_value)") && has(err, "has 1.5"),
               err, "%s: built for 1.%u, refuses a 1.5 host at init", p->handler->name,
               IDEMD_HANDLER_ABI_MINOR);
        plugin_free(p);
    }
}

static void test_with_db(void)
{
    MYSQL *db;
    char sql[512];

    if (getenv("IDEMD_TEST_DB_SOCKET") == NULL) {
        skip("plugins against a database", "IDEMD_TEST_DB_SOCKET is not set");
        return;
    }
    db = db_connect();
    if (!ok_got(db != NULL, NULL, "connect to the test database server"))
        return;
    snprintf(sql, sizeof(sql), "CREATE DATABASE idemd_test_plugin_%d; USE idemd_test_plugin_%d",
             (int)getpid(), (int)getpid());
    if (!ok_got(db_exec(db, sql) == 0, mysql_error(db), "create database idemd_test_plugin_%d",
                (int)getpid())) {
        mysql_close(db);
        return;
    }
    snprintf(t_dbname, sizeof(t_dbname), "idemd_test_plugin_%d", (int)getpid());
    ok_got(db_apply_file(db, "sql/001_msg_id_record.sql") == 0 &&
               db_apply_file(db, "sql/002_orders.sql") == 0,
           mysql_error(db), "sql/001 and sql/002 apply");
    ok_got(db_apply_file(db, "sql/001_msg_id_record.sql") == 0 &&
               db_apply_file(db, "sql/002_orders.sql") == 0,
           mysql_error(db), "sql/001 and sql/002 apply a second time");
    ok_got(db_value(db, "SELECT COUNT(*) FROM orders") == 0 &&
               db_value(db, "SELECT COUNT(*) FROM msg_id_record") == 0,
           NULL, "the schema files insert no rows");
    snprintf(sql, sizeof(sql), effects_sql, "effects");
    db_exec(db, sql);
    snprintf(sql, sizeof(sql), effects_sql, "effects2");
    db_exec(db, sql);
    db_exec(db, "SET autocommit = 0");

    /* ABI 1.6: host->value_check sees the note of a value the server rounded. */
    {
        const idemd_host_t *h = plugin_host();
        char why[256];
        db_exec(db, "CREATE TABLE vc (d DECIMAL(12,2))");
        db_exec(db, "INSERT INTO vc VALUES (1.25)");
        ok_got(h->value_check(db, why, sizeof(why)) == 0, why, "value_check: an exact value is 0");
        db_exec(db, "INSERT INTO vc VALUES (0.005)");
        ok_got(h->value_check(db, why, sizeof(why)) == 1 && strstr(why, "1265") != NULL, why,
               "value_check: 0.005 into DECIMAL(12,2) (stored 0.01) is 1, with the server's note");
        db_exec(db, "ROLLBACK");
    }
    test_order_pay(db);
    test_order_pay_reconnect();
    test_counter(db);

    snprintf(sql, sizeof(sql), "ROLLBACK; DROP DATABASE %s", t_dbname);
    ok_got(db_exec(db, sql) == 0, mysql_error(db), "drop database %s", t_dbname);
    mysql_close(db);
}

int main(void)
{
    log_set_context("test_plugin");
    test_loader();
    test_check();
    test_permissions();
    test_host_settings();
    test_host_log();
    test_host_body_value();
    test_shipped_need_1_6();
    test_with_db();
    mysql_library_end();
    return done();
}
