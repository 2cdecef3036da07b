/* conf_file.c: a configuration file loaded (trusted, includes checked, walked by conf_load.c) and
 * freed. */
#include "conf.h"
#include "conf_int.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "trust.h"

static void conf_drop_connections(conf_t *conf);

/*
 * The config file picks the handlers idemd runs and the servers it trusts with passwords and
 * messages: like a plugin (trust.c), it may be changed by root and the user we run as only.
 * file as the caller names it; 0, or -1 with "FILE: refused: WHY: FIX" in err.
 */
static int conf_trust_file(const char *file, char *err, size_t errlen)
{
    char real[PATH_MAX], why[1024];
    if (realpath(file, real) == NULL)
        snprintf(why, sizeof(why), "%s: cannot resolve: %s", file, strerror(errno));
    else if (trust_check(file, real, "a config file", why, sizeof(why)) == 0)
        return 0;
    if (err && errlen)
        snprintf(err, errlen, "%s", why);
    return -1;
}

/*
 * The same for every file @include brought in, from the settings under s: each setting names
 * its source; seen[] holds the names checked so far (libconfig keeps one copy of each), n of
 * them (seen NULL: none yet). Returns the new n, or -1 with the error set.
 */
static int conf_trust_includes(conf_ctx_t *ctx, const config_setting_t *s, const char **seen, int n)
{
    const char *mine[16];
    const char *file = config_setting_source_file(s);
    if (seen == NULL)
        seen = mine;
    if (file && strcmp(file, ctx->path) != 0) {
        bool known = false;
        for (int i = 0; i < n && !known; i++)
            known = seen[i] == file;
        if (!known) {
            char full[PATH_MAX + 8];
            int line;
            conf_source(ctx, s, full, sizeof(full), &line);
            if (conf_trust_file(full, ctx->err, ctx->errlen) != 0)
                return -1;
            if (n < 16)
                seen[n++] = file;
        }
    }
    if (!config_setting_is_aggregate(s))
        return n;
    for (int i = 0; i < config_setting_length(s); i++) {
        n = conf_trust_includes(ctx, config_setting_get_elem(s, (unsigned)i), seen, n);
        if (n < 0)
            return -1;
    }
    return n;
}

int conf_load(const char *path, conf_t **out, char *err, size_t errlen)
{
    conf_ctx_t ctx = {.path = path, .err = err, .errlen = errlen};
    conf_t *conf = NULL;
    char *dir = NULL;

    *out = NULL;
    if (err && errlen)
        err[0] = '\0';
    if (!(conf = calloc(1, sizeof(*conf)))) {
        if (err && errlen)
            snprintf(err, errlen, "%s: out of memory", path);
        return -1;
    }
    ctx.conf = conf;
    config_init(&conf->lc);
    if (!(conf->path = strdup(path)))
        goto oom;

    /* @include paths are relative to the including file's directory. */
    if (!(dir = strdup(path)))
        goto oom;
    char *slash = strrchr(dir, '/');
    if (slash) {
        slash[slash == dir ? 1 : 0] = '\0';
        config_set_include_dir(&conf->lc, dir);
        ctx.dir = dir;
    }

    /* libconfig only says "file I/O error": ask the system why. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        if (err && errlen)
            snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        goto fail;
    }
    close(fd);
    if (conf_trust_file(path, err, errlen) != 0)
        goto fail;
    if (!config_read_file(&conf->lc, path)) {
        if (err && errlen) {
            const char *file = config_error_file(&conf->lc);
            if (config_error_type(&conf->lc) == CONFIG_ERR_FILE_IO || !file)
                snprintf(err, errlen, "%s: %s", file ? file : path, config_error_text(&conf->lc));
            else
                snprintf(err, errlen, "%s:%d: %s", file, config_error_line(&conf->lc),
                         config_error_text(&conf->lc));
        }
        goto fail;
    }
    if (conf_trust_includes(&ctx, config_root_setting(&conf->lc), NULL, 0) < 0 ||
        conf_load_section(&ctx, "root", config_root_setting(&conf->lc), NULL, conf, "") < 0)
        goto fail;
    conf_drop_connections(conf);
    free(dir);
    *out = conf;
    return 0;

oom:
    if (err && errlen)
        snprintf(err, errlen, "%s: out of memory", path);
fail:
    free(dir);
    conf_free(conf);
    return -1;
}

static void conf_free_section(const char *section, void *base)
{
    for (const conf_def_t *d = conf_defs; d->name; d++) {
        if (strcmp(d->section, section) != 0)
            continue;
        switch (d->type) {
        case CONF_T_STRING: /* a FILE setting shares its peer's field */
            if ((d->flags & CONF_F_SECRET) && *CONF_AT(base, d->off, char *))
                explicit_bzero(*CONF_AT(base, d->off, char *),
                               strlen(*CONF_AT(base, d->off, char *)));
            free(*CONF_AT(base, d->off, char *));
            break;
        case CONF_T_INT_ARRAY:
            free(*CONF_AT(base, d->off, int *));
            break;
        case CONF_T_STR_ARRAY: {
            char **a = *CONF_AT(base, d->off, char **);
            int n = *CONF_AT(base, d->off_n, int);
            for (int i = 0; i < n; i++)
                free(a[i]);
            free(a);
            break;
        }
        case CONF_T_ARGS: {
            conf_arg_t *a = *CONF_AT(base, d->off, conf_arg_t *);
            int n = *CONF_AT(base, d->off_n, int);
            for (int i = 0; i < n; i++) {
                free(a[i].key);
                free(a[i].sval);
            }
            free(a);
            break;
        }
        case CONF_T_GROUP:
            conf_free_section(d->sub, CONF_AT(base, d->off, char));
            break;
        case CONF_T_LIST: {
            char *arr = *CONF_AT(base, d->off, char *);
            int n = *CONF_AT(base, d->off_n, int);
            for (int i = 0; i < n; i++)
                conf_free_section(d->sub, arr + (size_t)i * d->elem_size);
            free(arr);
            break;
        }
        case CONF_T_INT:
        case CONF_T_BOOL:
        case CONF_T_ENUM:
        case CONF_T_FILE:
        case CONF_T_RAW:
            break;
        }
    }
}

/*
 * Overwrite every string value under s (passwords, and secrets in handler
 * settings) with zeros, before the tree is freed. The strings belong to
 * libconfig; their lengths stay, so the tree still frees cleanly.
 */
static void conf_wipe_tree(config_setting_t *s)
{
    if (s == NULL)
        return;
    if (config_setting_type(s) == CONFIG_TYPE_STRING) {
        char *v = (char *)config_setting_get_string(s);
        if (v)
            explicit_bzero(v, strlen(v));
        return;
    }
    if (!config_setting_is_aggregate(s))
        return;
    for (int i = 0; i < config_setting_length(s); i++)
        conf_wipe_tree(config_setting_get_elem(s, (unsigned)i));
}

/*
 * The parsed tree is kept only for the handlers' settings groups: the
 * broker and database groups (passwords) are wiped and removed from it as
 * soon as conf holds their values.
 */
static void conf_drop_connections(conf_t *conf)
{
    config_setting_t *root = config_root_setting(&conf->lc);
    static const char *const groups[] = {"broker", "database"};
    for (size_t i = 0; i < sizeof(groups) / sizeof(groups[0]); i++) {
        config_setting_t *g = config_setting_get_member(root, groups[i]);
        if (g == NULL)
            continue;
        conf_wipe_tree(g);
        config_setting_remove(root, groups[i]);
    }
}

void conf_free(conf_t *conf)
{
    if (!conf)
        return;
    conf_free_section("root", conf);
    if (conf->metrics.token) {
        explicit_bzero(conf->metrics.token, strlen(conf->metrics.token));
        free(conf->metrics.token);
    }
    for (int i = 0; i < conf->n_warnings; i++)
        free(conf->warnings[i]);
    free(conf->warnings);
    free(conf->path);
    conf_wipe_tree(config_root_setting(&conf->lc));
    config_destroy(&conf->lc);
    free(conf);
}
