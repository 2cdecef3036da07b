/* plugin.c: loads handler plugins with dlopen, checks their ABI, and provides the host services
 * table. */
#include "plugin.h"

#include <dlfcn.h>
#include <libconfig.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

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
 * The rule for what the loader accepts is in handler.h: same major, minor
 * not newer. Only abi_major and abi_minor are read before the major is
 * known to match, because the layout of the rest belongs to that major.
 *
 * The path is used as a file path: a name without a '/' gets "./" in front,
 * so that dlopen loads the file the error messages name instead of
 * searching the library path for it.
 */
int plugin_load(const char *path, plugin_t **out, char *err, size_t errlen)
{
    plugin_t *p = NULL;
    char *dlpath = NULL;
    const idemd_handler_t *h;

    *out = NULL;
    if (path == NULL || path[0] == '\0') {
        snprintf(err, errlen, "handler path is empty (expected the path of a .so file)");
        goto fail;
    }
    p = calloc(1, sizeof(*p));
    if (p == NULL || (p->path = strdup(path)) == NULL) {
        snprintf(err, errlen, "%s: out of memory", path);
        goto fail;
    }
    if (strchr(path, '/') == NULL) {
        size_t n = strlen(path) + 3;
        dlpath = malloc(n);
        if (dlpath == NULL) {
            snprintf(err, errlen, "%s: out of memory", path);
            goto fail;
        }
        snprintf(dlpath, n, "./%s", path);
    }

    p->dl = dlopen(dlpath ? dlpath : path, RTLD_NOW | RTLD_LOCAL);
    if (p->dl == NULL) {
        snprintf(err, errlen, "%s: cannot load handler: %s", path,
                 plugin_dlerror(dlpath ? dlpath : path));
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
    free(dlpath);
    *out = p;
    return 0;

fail:
    free(dlpath);
    plugin_free(p);
    return -1;
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

static int plugin_publish(struct st_mysql *db, const idemd_message_t *source,
                          const idemd_publish_t *p, char *err, size_t errlen)
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
};

const idemd_host_t *plugin_host(void)
{
    return &plugin_host_table;
}
