/* conf_reload.c: what differs between two loaded configurations, for a reload. */
#include "conf.h"
#include "conf_int.h"

#include <string.h>

/* ---------------------------------------------------------------------- */
/* Comparing two loaded configurations (reload) */

static bool conf_setting_differs(const config_setting_t *a, const config_setting_t *b)
{
    if (!a || !b)
        return a != b;
    if (config_setting_type(a) != config_setting_type(b))
        return true;
    const char *na = config_setting_name(a), *nb = config_setting_name(b);
    if ((na == NULL) != (nb == NULL) || (na && strcmp(na, nb) != 0))
        return true;
    switch (config_setting_type(a)) {
    case CONFIG_TYPE_INT:
        return config_setting_get_int(a) != config_setting_get_int(b);
    case CONFIG_TYPE_INT64:
        return config_setting_get_int64(a) != config_setting_get_int64(b);
    case CONFIG_TYPE_FLOAT:
        return config_setting_get_float(a) != config_setting_get_float(b);
    case CONFIG_TYPE_BOOL:
        return config_setting_get_bool(a) != config_setting_get_bool(b);
    case CONFIG_TYPE_STRING:
        return strcmp(config_setting_get_string(a), config_setting_get_string(b)) != 0;
    default: {
        int n = config_setting_length(a);
        if (n != config_setting_length(b))
            return true;
        for (int i = 0; i < n; i++)
            if (conf_setting_differs(config_setting_get_elem(a, (unsigned)i),
                                     config_setting_get_elem(b, (unsigned)i)))
                return true;
        return false;
    }
    }
}

static bool conf_str_differs(const char *a, const char *b)
{
    if (!a || !b)
        return a != b;
    return strcmp(a, b) != 0;
}

/* Walk one section of the table over two structs; name the first difference in what. */
static bool conf_section_differs(const char *section, const void *a, const void *b,
                                 const char *path, char *what, size_t len)
{
    char sp[CONF_PATH_MAX];
    for (const conf_def_t *d = conf_defs; d->name; d++) {
        bool diff = false;
        if (strcmp(d->section, section) != 0)
            continue;
        conf_path(sp, path, d->name);
        switch (d->type) {
        case CONF_T_STRING:
            diff = conf_str_differs(*CONF_AT(a, d->off, char *), *CONF_AT(b, d->off, char *));
            break;
        case CONF_T_INT:
        case CONF_T_ENUM:
            diff = *CONF_AT(a, d->off, int) != *CONF_AT(b, d->off, int);
            break;
        case CONF_T_BOOL:
            diff = *CONF_AT(a, d->off, bool) != *CONF_AT(b, d->off, bool);
            break;
        case CONF_T_INT_ARRAY: {
            int n = *CONF_AT(a, d->off_n, int);
            diff = n != *CONF_AT(b, d->off_n, int) ||
                   (n > 0 && memcmp(*CONF_AT(a, d->off, int *), *CONF_AT(b, d->off, int *),
                                    sizeof(int) * (size_t)n) != 0);
            break;
        }
        case CONF_T_STR_ARRAY: {
            int n = *CONF_AT(a, d->off_n, int);
            char **x = *CONF_AT(a, d->off, char **), **y = *CONF_AT(b, d->off, char **);
            diff = n != *CONF_AT(b, d->off_n, int);
            for (int i = 0; !diff && i < n; i++)
                diff = strcmp(x[i], y[i]) != 0;
            break;
        }
        case CONF_T_ARGS: {
            int n = *CONF_AT(a, d->off_n, int);
            const conf_arg_t *x = *CONF_AT(a, d->off, conf_arg_t *);
            const conf_arg_t *y = *CONF_AT(b, d->off, conf_arg_t *);
            diff = n != *CONF_AT(b, d->off_n, int);
            for (int i = 0; !diff && i < n; i++)
                diff = strcmp(x[i].key, y[i].key) != 0 || x[i].is_int != y[i].is_int ||
                       x[i].ival != y[i].ival || conf_str_differs(x[i].sval, y[i].sval);
            break;
        }
        case CONF_T_GROUP:
            if (conf_section_differs(d->sub, CONF_AT(a, d->off, char), CONF_AT(b, d->off, char), sp,
                                     what, len))
                return true;
            break;
        case CONF_T_LIST: {
            int n = *CONF_AT(a, d->off_n, int);
            const char *x = *CONF_AT(a, d->off, char *), *y = *CONF_AT(b, d->off, char *);
            diff = n != *CONF_AT(b, d->off_n, int);
            for (int i = 0; !diff && i < n; i++)
                if (conf_section_differs(d->sub, x + (size_t)i * d->elem_size,
                                         y + (size_t)i * d->elem_size, sp, what, len))
                    return true;
            break;
        }
        case CONF_T_RAW:
            diff = conf_setting_differs(*CONF_AT(a, d->off, const config_setting_t *),
                                        *CONF_AT(b, d->off, const config_setting_t *));
            break;
        case CONF_T_FILE:
            break; /* its value lives in the peer setting, compared there */
        }
        if (diff) {
            snprintf(what, len, "%s", sp);
            return true;
        }
    }
    return false;
}

bool conf_connections_differ(const conf_t *a, const conf_t *b, char *what, size_t len)
{
    return conf_section_differs("broker", &a->broker, &b->broker, "broker", what, len) ||
           conf_section_differs("database", &a->database, &b->database, "database", what, len);
}

bool conf_queue_differs(const conf_queue_t *a, const conf_queue_t *b, char *what, size_t len)
{
    char path[300];
    snprintf(path, sizeof(path), "queues.%s", a->name);
    if (conf_section_differs("queue", a, b, path, what, len))
        return true;
    /* "declare" is a GROUP at offset 0 of the queue: walked above. */
    return false;
}
