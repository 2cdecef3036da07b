/* plugin.c: loads handler plugins with dlopen, checks their ABI, and provides the host services
 * table. */
#include "plugin.h"
#include "clock.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <libconfig.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "trust.h"

/* dlerror()'s text without its leading "FILE: " when FILE is the one we name already. */
static const char *plugin_dlerror(const char *file)
{
    const char *why = dlerror();
    size_t n = strlen(file);

    if (why == NULL)
        return "unknown dlopen error";
    if (strncmp(why, file, n) == 0 && why[n] == ':' && why[n + 1] == ' ')
        return why + n + 2;
    return why;
}

/*
 * Opens the plugin at path for dlopen: its real path resolved, then opened
 * by trust_open (every directory on the way and the file safe from other
 * users, checked on the descriptors it opens). Returns the descriptor (the
 * caller closes it after dlopen of /proc/self/fd/N, so what was checked is
 * what is loaded, with no path left to swap), or -1 with err set.
 */
static int plugin_open(const char *path, char *err, size_t errlen)
{
    char real[PATH_MAX];
    struct stat st;
    int fd = -1;

    if (realpath(path, real) == NULL) {
        snprintf(err, errlen, "%s: cannot load handler: %s", path, strerror(errno));
        goto fail;
    }
    if (stat(real, &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s: cannot load handler: %s is not a regular file", path, real);
        goto fail;
    }
    fd = trust_open(path, real, "a plugin", NULL, 0, err, errlen);
fail:
    return fd;
}

/*
 * The rule for what the loader accepts is in handler.h: same major, minor
 * not newer. Only abi_major and abi_minor are read before the major is
 * known to match, because the layout of the rest belongs to that major.
 *
 * The file is the one plugin_open checked, loaded through its descriptor: a
 * bare name means the file in the working directory, never a library path
 * search.
 */
int plugin_load(const char *path, plugin_t **out, char *err, size_t errlen)
{
    plugin_t *p = NULL;
    char fdpath[32];
    const idemd_handler_t *h;
    int fd = -1;

    *out = NULL;
    if (path == NULL || path[0] == '\0') {
        snprintf(err, errlen, "handler path is empty (expected the path of a .so file)");
        goto fail;
    }
    if ((fd = plugin_open(path, err, errlen)) < 0)
        goto fail;
    p = calloc(1, sizeof(*p));
    if (p == NULL || (p->path = strdup(path)) == NULL) {
        snprintf(err, errlen, "%s: out of memory", path);
        goto fail;
    }

    snprintf(fdpath, sizeof(fdpath), "/proc/self/fd/%d", fd);
    p->dl = dlopen(fdpath, RTLD_NOW | RTLD_LOCAL);
    close(fd);
    fd = -1;
    if (p->dl == NULL) {
        const char *why = plugin_dlerror(fdpath);
        /* "undefined symbol: log_msg": a plugin that calls idemd's own functions. */
        snprintf(err, errlen, "%s: cannot load handler: %s%s", path, why,
                 strstr(why, "undefined symbol") ? " (idemd exports no symbols: a plugin reaches "
                                                   "idemd only through the host table given to "
                                                   "init())"
                                                 : "");
        goto fail;
    }

    /* A symbol's value may legitimately be NULL, so dlerror() is what says "absent". */
    (void)dlerror();
    h = dlsym(p->dl, IDEMD_HANDLER_SYMBOL);
    if (h == NULL) {
        snprintf(err, errlen,
                 "%s: not an idemd handler: it exports no \"%s\" symbol (expected an "
                 "idemd_handler_t from <idemd/handler.h>)",
                 path, IDEMD_HANDLER_SYMBOL);
        goto fail;
    }
    if (h->abi_major != IDEMD_HANDLER_ABI_MAJOR || h->abi_minor > IDEMD_HANDLER_ABI_MINOR) {
        snprintf(err, errlen, "%s: handler ABI %u.%u is not supported (idemd speaks %d.%d)", path,
                 h->abi_major, h->abi_minor, IDEMD_HANDLER_ABI_MAJOR, IDEMD_HANDLER_ABI_MINOR);
        goto fail;
    }
    if (h->name == NULL || h->name[0] == '\0') {
        snprintf(err, errlen, "%s: handler has %s name (expected a non-empty string in .name)",
                 path, h->name == NULL ? "a NULL" : "an empty");
        goto fail;
    }
    if (h->handle == NULL) {
        snprintf(err, errlen,
                 "%s: handler \"%s\" has no handle() callback (expected non-NULL .handle)", path,
                 h->name);
        goto fail;
    }

    p->handler = h;
    *out = p;
    return 0;

fail:
    if (fd >= 0)
        close(fd);
    plugin_free(p);
    return -1;
}

/* In the child of plugin_check: load, write "0NAME" or "1ERROR" and a NUL to fd, exit. */
static void plugin_check_child(const char *path, int fd) __attribute__((noreturn));
static void plugin_check_child(const char *path, int fd)
{
    char msg[1024];
    plugin_t *p = NULL;
    sigset_t none;

    /* Nothing of the supervisor's reaches the plugin: no other descriptor, default signals. */
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    if (fd != 3) {
        if (dup2(fd, 3) < 0)
            _exit(120);
        fd = 3;
    }
    closefrom(4);
    msg[0] = '0';
    if (plugin_load(path, &p, msg + 1, sizeof(msg) - 1) != 0)
        msg[0] = '1';
    else
        snprintf(msg + 1, sizeof(msg) - 1, "%s", p->handler->name);
    size_t n = strlen(msg) + 1, off = 0;
    while (off < n) {
        ssize_t w = write(fd, msg + off, n - off);
        if (w <= 0)
            _exit(121);
        off += (size_t)w;
    }
    /* No dlclose, no exit(): the plugin's destructors and atexit handlers need not run. */
    _exit(0);
}

int plugin_check(const char *path, char *name, size_t namelen, char *err, size_t errlen)
{
    char buf[1024];
    size_t got = 0;
    int fds[2] = {-1, -1};
    int status = 0, rc = -1;
    pid_t pid = -1;
    uint64_t deadline = clock_mono_ms() + PLUGIN_CHECK_TIMEOUT_MS;
    bool timed_out = false;

    if (name != NULL && namelen > 0)
        name[0] = '\0';
    if (path == NULL || path[0] == '\0') {
        snprintf(err, errlen, "handler path is empty (expected the path of a .so file)");
        return -1;
    }
    if (pipe2(fds, O_CLOEXEC) != 0) {
        snprintf(err, errlen, "%s: cannot check handler: pipe: %s", path, strerror(errno));
        goto done;
    }
    fflush(NULL); /* the child must not write our buffered output a second time */
    pid = fork();
    if (pid < 0) {
        snprintf(err, errlen, "%s: cannot check handler: fork: %s", path, strerror(errno));
        goto done;
    }
    if (pid == 0) {
        close(fds[0]);
        plugin_check_child(path, fds[1]);
    }
    close(fds[1]);
    fds[1] = -1;
    for (;;) {
        int64_t left = (int64_t)(deadline - clock_mono_ms());
        if (clock_mono_ms() >= deadline) {
            timed_out = true;
            break;
        }
        struct pollfd pfd = {fds[0], POLLIN, 0};
        int r = poll(&pfd, 1, (int)left);
        if (r < 0 && errno == EINTR)
            continue;
        if (r == 0) {
            timed_out = true;
            break;
        }
        ssize_t n = read(fds[0], buf + got, sizeof(buf) - 1 - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
        /* Done at the NUL: a process the plugin forked may hold the pipe open. */
        if (got == sizeof(buf) - 1 || memchr(buf, '\0', got) != NULL)
            break;
    }
    buf[got] = '\0';
    if (timed_out)
        kill(pid, SIGKILL);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (timed_out) {
        snprintf(err, errlen, "%s: cannot load handler: still loading after %d s (killed)", path,
                 PLUGIN_CHECK_TIMEOUT_MS / 1000);
    } else if (WIFSIGNALED(status)) {
        snprintf(err, errlen, "%s: cannot load handler: loading it killed the checker (%s)", path,
                 strsignal(WTERMSIG(status)));
    } else if (got > 0 && buf[0] == '1') {
        snprintf(err, errlen, "%s", buf + 1);
    } else if (got > 1 && buf[0] == '0' && WIFEXITED(status) && WEXITSTATUS(status) == 0) {
        if (name != NULL && namelen > 0)
            snprintf(name, namelen, "%s", buf + 1);
        rc = 0;
    } else {
        snprintf(err, errlen, "%s: cannot load handler: the checker exited with status %d", path,
                 WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    }
done:
    if (fds[0] >= 0)
        close(fds[0]);
    if (fds[1] >= 0)
        close(fds[1]);
    return rc;
}

/* Closes the object: every pointer taken from p->handler is invalid afterwards. */
void plugin_free(plugin_t *p)
{
    if (p == NULL)
        return;
    if (p->dl != NULL)
        dlclose(p->dl);
    free(p->path);
    free(p);
}

static void plugin_host_log(idemd_log_level_t level, const char *fmt, ...)
{
    log_level_t l;
    va_list ap;

    /* The plugin's level is untrusted input: clamp it to a level log.c knows. */
    if (level <= IDEMD_LOG_ERROR)
        l = LOG_LEVEL_ERROR;
    else if (level < IDEMD_LOG_INFO)
        l = LOG_LEVEL_WARNING;
    else if (level < IDEMD_LOG_DEBUG)
        l = LOG_LEVEL_INFO;
    else
        l = LOG_LEVEL_DEBUG;
    va_start(ap, fmt);
    log_vmsg(l, fmt, ap);
    va_end(ap);
}

/* idemd_settings_t is the queue's libconfig "settings" group; NULL when the queue has none. */
static const config_setting_t *plugin_setting(const idemd_settings_t *s, const char *name, int type)
{
    const config_setting_t *group = (const config_setting_t *)s;
    const config_setting_t *m;

    if (group == NULL || name == NULL || !config_setting_is_group(group))
        return NULL;
    m = config_setting_get_member(group, name);
    if (m == NULL)
        return NULL;
    if (config_setting_type(m) == type)
        return m;
    if (type == CONFIG_TYPE_INT && config_setting_type(m) == CONFIG_TYPE_INT64)
        return m;
    return NULL;
}

static int plugin_setting_string(const idemd_settings_t *s, const char *name, const char **out)
{
    const config_setting_t *m = plugin_setting(s, name, CONFIG_TYPE_STRING);

    if (m == NULL || out == NULL)
        return -1;
    *out = config_setting_get_string(m);
    return 0;
}

static int plugin_setting_int(const idemd_settings_t *s, const char *name, long long *out)
{
    const config_setting_t *m = plugin_setting(s, name, CONFIG_TYPE_INT);

    if (m == NULL || out == NULL)
        return -1;
    *out = config_setting_get_int64(m);
    return 0;
}

static int plugin_setting_bool(const idemd_settings_t *s, const char *name, int *out)
{
    const config_setting_t *m = plugin_setting(s, name, CONFIG_TYPE_BOOL);

    if (m == NULL || out == NULL)
        return -1;
    *out = config_setting_get_bool(m) ? 1 : 0;
    return 0;
}

static plugin_publish_fn plugin_publisher;
static void *plugin_publisher_ctx;

void plugin_set_publisher(plugin_publish_fn fn, void *ctx)
{
    plugin_publisher = fn;
    plugin_publisher_ctx = ctx;
}

static int plugin_publish(MYSQL *db, const idemd_message_t *source, const idemd_publish_t *p,
                          char *err, size_t errlen)
{
    if (plugin_publisher == NULL || source == NULL || p == NULL) {
        snprintf(err, errlen, "publish: only from handle() or handle_batch(), with its message");
        return -1;
    }
    return plugin_publisher(plugin_publisher_ctx, db, source, p, err, errlen);
}

static const idemd_host_t plugin_host_table = {
    .abi_major = IDEMD_HANDLER_ABI_MAJOR,
    .abi_minor = IDEMD_HANDLER_ABI_MINOR,
    .log = plugin_host_log,
    .setting_string = plugin_setting_string,
    .setting_int = plugin_setting_int,
    .setting_bool = plugin_setting_bool,
    .publish = plugin_publish,
    .value_check = plugin_host_value_check,
    .body_value = plugin_host_body_value,
};

const idemd_host_t *plugin_host(void)
{
    return &plugin_host_table;
}
