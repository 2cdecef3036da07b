/* conf_file.c: a configuration file loaded (read by conf_text.c, parsed, walked by conf_load.c)
 * and freed. */
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

static void conf_drop_connections(conf_t *conf);

#if LIBCONFIG_VER_MAJOR > 1 || (LIBCONFIG_VER_MAJOR == 1 && LIBCONFIG_VER_MINOR >= 7)
/* conf_text.c expands every @include itself, after its checks: libconfig opens no file. */
static const char **conf_no_include(config_t *lc, const char *dir, const char *path,
                                    const char **error)
{
    (void)lc;
    (void)dir;
    (void)path;
    *error = "@include left to libconfig (idemd expands them)";
    return NULL;
}
#endif

/*
 * Parse t's text into conf's tree; each setting then names the file and line it came from,
 * and conf owns the file names. 0, or -1 with "FILE:LINE: WHY" in err.
 */
static int conf_parse(conf_t *conf, conf_text_t *t, char *err, size_t errlen)
{
#if LIBCONFIG_VER_MAJOR > 1 || (LIBCONFIG_VER_MAJOR == 1 && LIBCONFIG_VER_MINOR >= 7)
    config_set_include_func(&conf->lc, conf_no_include);
#endif
    if (!config_read_string(&conf->lc, t->buf)) {
        const char *file;
        int line;
        conf_text_where(t, config_error_line(&conf->lc), &file, &line);
        if (err && errlen)
            snprintf(err, errlen, "%s:%d: %s", file, line, config_error_text(&conf->lc));
        return -1;
    }
    conf_text_fix(t, config_root_setting(&conf->lc));
    conf->sources = conf_text_take_files(t, &conf->n_sources);
    return 0;
}

/*
 * The config file picks the handlers idemd runs and the servers it trusts with passwords and
 * messages (and with handler = "sql", the SQL run with idemd's credentials): like a plugin
 * (trust.c), it and every file it @includes may be changed by root and the user we run as
 * only. conf_text.c opens each once, checks it on that descriptor and reads it from there.
 */
int conf_load(const char *path, conf_t **out, char *err, size_t errlen)
{
    conf_ctx_t ctx = {.path = path, .err = err, .errlen = errlen};
    conf_text_t text;
    conf_t *conf = NULL;

    *out = NULL;
    memset(&text, 0, sizeof(text));
    if (err && errlen)
        err[0] = '\0';
    if (!(conf = calloc(1, sizeof(*conf)))) {
        if (err && errlen)
            snprintf(err, errlen, "%s: out of memory", path);
        return -1;
    }
    ctx.conf = conf;
    config_init(&conf->lc);
    if (!(conf->path = strdup(path))) {
        if (err && errlen)
            snprintf(err, errlen, "%s: out of memory", path);
        goto fail;
    }
    if (conf_text_read(&text, path, err, errlen) != 0 || conf_parse(conf, &text, err, errlen) != 0)
        goto fail;
    conf_text_free(&text);
    if (conf_load_section(&ctx, "root", config_root_setting(&conf->lc), NULL, conf, "") < 0)
        goto fail;
    conf_drop_connections(conf);
    *out = conf;
    return 0;

fail:
    conf_text_free(&text);
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
    for (int i = 0; i < conf->n_sources; i++)
        free(conf->sources[i]);
    free(conf->sources);
    free(conf);
}
