/* conf_load.c: the table-driven loader; its errors name the file, the line and the setting. */
#include "conf.h"
#include "conf_int.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---------------------------------------------------------------------- */
/* Errors and names */

/* The file that holds setting at (the main file for NULL), as a path that
 * can be opened; *line is its line, 0 when unknown. */
void conf_source(const conf_ctx_t *ctx, const config_setting_t *at, char *buf, size_t len,
                 int *line)
{
    const char *file = at ? config_setting_source_file(at) : NULL;
    *line = at ? (int)config_setting_source_line(at) : 0;
    /* Each setting names its file as conf_text.c opened it (conf_text_fix). */
    snprintf(buf, len, "%s", file ? file : ctx->path);
}

static void conf_format(const conf_ctx_t *ctx, const config_setting_t *at, const char *setting,
                        const char *problem, char *out, size_t outlen)
{
    char file[PATH_MAX + 8];
    int line;
    conf_source(ctx, at, file, sizeof(file), &line);
    if (line > 0)
        snprintf(out, outlen, "%s:%d: %s: %s", file, line, setting, problem);
    else
        snprintf(out, outlen, "%s: %s: %s", file, setting, problem);
}

/* Write "FILE:LINE: SETTING: PROBLEM" into ctx->err; the line is that of
 * setting "at" (no line when at is the root). Returns -1. */
int conf_error(conf_ctx_t *ctx, const config_setting_t *at, const char *setting, const char *fmt,
               ...)
{
    char problem[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(problem, sizeof(problem), fmt, ap);
    va_end(ap);
    if (!ctx->err || ctx->errlen == 0)
        return -1;
    conf_format(ctx, at, setting, problem, ctx->err, ctx->errlen);
    return -1;
}

/* Add "FILE:LINE: SETTING: PROBLEM" to the loaded conf's warnings. 0, or -1
 * (error set) when out of memory. */
int conf_warn(conf_ctx_t *ctx, const config_setting_t *at, const char *setting, const char *fmt,
              ...)
{
    char problem[1024], line[CONF_PATH_MAX + PATH_MAX + 1100];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(problem, sizeof(problem), fmt, ap);
    va_end(ap);
    conf_format(ctx, at, setting, problem, line, sizeof(line));
    conf_t *conf = ctx->conf;
    char **w = realloc(conf->warnings, (size_t)(conf->n_warnings + 1) * sizeof(*w));
    if (!w)
        return conf_error(ctx, at, setting, "out of memory");
    conf->warnings = w;
    if (!(w[conf->n_warnings] = strdup(line)))
        return conf_error(ctx, at, setting, "out of memory");
    conf->n_warnings++;
    return 0;
}

static const char *conf_type_name(const config_setting_t *s)
{
    switch (config_setting_type(s)) {
    case CONFIG_TYPE_GROUP:
        return "a group";
    case CONFIG_TYPE_INT:
    case CONFIG_TYPE_INT64:
        return "an integer";
    case CONFIG_TYPE_FLOAT:
        return "a float";
    case CONFIG_TYPE_STRING:
        return "a string";
    case CONFIG_TYPE_BOOL:
        return "a boolean";
    case CONFIG_TYPE_ARRAY:
        return "an array";
    case CONFIG_TYPE_LIST:
        return "a list";
    }
    return "of unknown type";
}

static bool conf_is_int(const config_setting_t *s)
{
    int t = config_setting_type(s);
    return t == CONFIG_TYPE_INT || t == CONFIG_TYPE_INT64;
}

/* Setting paths in libconfig's syntax: "queues.[0].declare.bindings.[1]";
 * an absurdly deep one is cut and ends in "...". */
static void conf_path_mark_cut(char *buf, int n)
{
    if (n < 0 || n >= CONF_PATH_MAX)
        memcpy(buf + CONF_PATH_MAX - 4, "...", 4);
}

void conf_path(char *buf, const char *parent, const char *name)
{
    int n;
    if (parent[0])
        n = snprintf(buf, CONF_PATH_MAX, "%s.%s", parent, name);
    else
        n = snprintf(buf, CONF_PATH_MAX, "%s", name);
    conf_path_mark_cut(buf, n);
}

void conf_path_index(char *buf, const char *parent, int i)
{
    conf_path_mark_cut(buf, snprintf(buf, CONF_PATH_MAX, "%s.[%d]", parent, i));
}

/* Edit distance, capped: enough to suggest "host" for "hots". */
static int conf_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    int row[65];
    if (la > 64 || lb > 64)
        return 99;
    for (size_t j = 0; j <= lb; j++)
        row[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int up = row[j];
            int best = diag + (a[i - 1] != b[j - 1]);
            if (row[j] + 1 < best)
                best = row[j] + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

static const char *conf_suggest(const char *section, const char *name)
{
    const char *best = NULL;
    int best_d = 3; /* at most 2 edits */
    for (const conf_def_t *d = conf_defs; d->name; d++) {
        if (strcmp(d->section, section) != 0)
            continue;
        int dist = conf_distance(name, d->name);
        if (dist < best_d) {
            best_d = dist;
            best = d->name;
        }
    }
    return best;
}

/* ---------------------------------------------------------------------- */
/* Loading one setting */

int conf_set_string(conf_ctx_t *ctx, const config_setting_t *at, const char *sp, char **field,
                    const char *value)
{
    char *copy = NULL;
    if (value && !(copy = strdup(value)))
        return conf_error(ctx, at, sp, "out of memory");
    free(*field);
    *field = copy;
    return 0;
}

static int conf_check_string(conf_ctx_t *ctx, const conf_def_t *d, const config_setting_t *s,
                             const char *sp, const char *v)
{
    size_t len = strlen(v);
    if (d->min > 0 && len < (size_t)d->min) {
        if (d->min == 1)
            return conf_error(ctx, s, sp, "must not be empty");
        return conf_error(ctx, s, sp, "must be at least %lld bytes long (got %zu)", d->min, len);
    }
    if (d->max > 0 && len > (size_t)d->max)
        return conf_error(ctx, s, sp, "must be at most %lld bytes long (got %zu)", d->max, len);
    if (d->flags & CONF_F_IDENT) {
        for (const char *p = v; *p; p++) {
            bool ok = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                      (*p >= '0' && *p <= '9') || *p == '_';
            if (!ok)
                return conf_error(ctx, s, sp,
                                  "may contain only letters, digits and '_' (got \"%s\")", v);
        }
    }
    return 0;
}

/* A file named by a setting must open for reading now, so that a typo or a
 * permission problem shows at startup and not at the first connection. */
static int conf_check_readable(conf_ctx_t *ctx, const config_setting_t *s, const char *sp,
                               const char *file)
{
    struct stat st;
    int fd = open(file, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0)
        return conf_error(ctx, s, sp, "cannot open \"%s\": %s", file, strerror(errno));
    int rc = fstat(fd, &st);
    close(fd);
    if (rc == 0 && S_ISDIR(st.st_mode))
        return conf_error(ctx, s, sp, "\"%s\" is a directory", file);
    return 0;
}

static int conf_get_int(conf_ctx_t *ctx, const config_setting_t *s, const char *sp, long long min,
                        long long max, int *out)
{
    if (!conf_is_int(s))
        return conf_error(ctx, s, sp, "must be an integer (got %s)", conf_type_name(s));
    long long v = config_setting_get_int64(s);
    if (v < min || v > max)
        return conf_error(ctx, s, sp, "must be between %lld and %lld (got %lld)", min, max, v);
    *out = (int)v;
    return 0;
}

static int conf_enum_lookup(const conf_enum_t *e, const char *name)
{
    for (; e->name; e++)
        if (strcasecmp(e->name, name) == 0)
            return e->value;
    return -1;
}

static int conf_enum_error(conf_ctx_t *ctx, const conf_def_t *d, const config_setting_t *s,
                           const char *sp)
{
    char names[256] = "";
    size_t used = 0;
    for (const conf_enum_t *e = d->enums; e->name; e++) {
        int n = snprintf(names + used, sizeof(names) - used, "%s%s", used ? ", " : "", e->name);
        if (n < 0 || (size_t)n >= sizeof(names) - used)
            break;
        used += (size_t)n;
    }
    if (config_setting_type(s) == CONFIG_TYPE_STRING)
        return conf_error(ctx, s, sp, "must be one of %s (got \"%s\")", names,
                          config_setting_get_string(s));
    return conf_error(ctx, s, sp, "must be one of %s (got %s)", names, conf_type_name(s));
}

#define CONF_TOKEN_MIN 16 /* bytes of a bearer token at least */

/*
 * A bearer token must stay the service's (and its readers'): a mode that lets others read or
 * use it, or the group change it, is refused, not warned about, since the token is the only
 * thing between the listener and anyone who can reach it. A group may read it (root:idemd
 * 0640), as for password files. It must be long enough not to be guessed, and fit in an
 * Authorization header as RFC 6750's b64token: letters, digits, -._~+/ then '=' padding.
 */
static int conf_check_token(conf_ctx_t *ctx, const config_setting_t *s, const char *sp,
                            const char *file, const struct stat *st, const char *tok, size_t len)
{
    size_t i = 0;
    if (st->st_mode & 0027)
        return conf_error(ctx, s, sp,
                          "\"%s\" holds the metrics bearer token and %s (mode %04o): chmod g-w,o= "
                          "it",
                          file,
                          (st->st_mode & 0007) ? "others may use it" : "its group may change it",
                          (unsigned)(st->st_mode & 07777));
    if (len < CONF_TOKEN_MIN)
        return conf_error(ctx, s, sp,
                          "\"%s\" holds %zu bytes: a bearer token needs at least %d (e.g. "
                          "`openssl rand -hex 32`)",
                          file, len, CONF_TOKEN_MIN);
    while (i < len && (((tok[i] | 0x20) >= 'a' && (tok[i] | 0x20) <= 'z') ||
                       (tok[i] >= '0' && tok[i] <= '9') || strchr("-._~+/", tok[i])))
        i++;
    while (i < len && tok[i] == '=')
        i++;
    if (i < len)
        return conf_error(ctx, s, sp,
                          "\"%s\": byte %zu is not allowed in a bearer token (letters, digits, "
                          "-._~+/, then = at the end)",
                          file, i + 1);
    return 0;
}

/* Read a secret from a file: the whole content, trailing CR/LF removed.
 * On success *field owns a new string (the old one is freed). */
int conf_read_secret(conf_ctx_t *ctx, const config_setting_t *s, const char *sp, const char *file,
                     conf_secret_kind_t kind, char **field)
{
    char buf[CONF_SECRET_MAX + 1];
    size_t len = 0;
    int rc = -1;
    struct stat st;
    int fd = open(file, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0)
        return conf_error(ctx, s, sp, "cannot open \"%s\": %s", file, strerror(errno));
    if (fstat(fd, &st) != 0) {
        conf_error(ctx, s, sp, "cannot stat \"%s\": %s", file, strerror(errno));
        goto fail;
    }
    for (;;) {
        ssize_t n = read(fd, buf + len, sizeof(buf) - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            conf_error(ctx, s, sp, "cannot read \"%s\": %s", file, strerror(errno));
            goto fail;
        }
        if (n == 0)
            break;
        len += (size_t)n;
        if (len == sizeof(buf)) {
            conf_error(ctx, s, sp, "\"%s\" is larger than %d bytes", file, CONF_SECRET_MAX);
            goto fail;
        }
    }
    while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == '\r'))
        len--;
    if (len == 0) {
        conf_error(ctx, s, sp, "\"%s\" is empty", file);
        goto fail;
    }
    if (memchr(buf, '\0', len)) {
        conf_error(ctx, s, sp, "\"%s\" contains a NUL byte", file);
        goto fail;
    }
    buf[len] = '\0';
    if (kind == CONF_SECRET_TOKEN && conf_check_token(ctx, s, sp, file, &st, buf, len) < 0)
        goto fail;
    rc = conf_set_string(ctx, s, sp, field, buf);
    /* A group may be how the service account reads it (root:idemd 0640); others never. */
    if (rc == 0 && kind == CONF_SECRET_PASSWORD && (st.st_mode & S_IROTH))
        rc = conf_warn(ctx, s, sp,
                       "\"%s\" holds a password and is readable by every user (mode %04o): "
                       "chmod o= it",
                       file, (unsigned)(st.st_mode & 07777));
fail:
    explicit_bzero(buf, sizeof(buf));
    close(fd);
    return rc;
}

/* An array's default is written as in the file, "[ 1000, 10000 ]"; none: empty. */
static int conf_default_int_array(conf_ctx_t *ctx, const conf_def_t *d,
                                  const config_setting_t *anchor, void *base, const char *sp)
{
    int n = 0;
    const char *p;
    if (!d->def)
        return 0;
    for (p = d->def; *p; p++)
        n += *p >= '0' && *p <= '9' && (p == d->def || p[-1] < '0' || p[-1] > '9');
    if (n == 0)
        return 0;
    int *arr = calloc((size_t)n, sizeof(int));
    if (!arr)
        return conf_error(ctx, anchor, sp, "out of memory");
    p = d->def;
    for (int i = 0; i < n; i++) {
        p += strcspn(p, "0123456789");
        arr[i] = (int)strtol(p, (char **)&p, 10);
    }
    *CONF_AT(base, d->off, int *) = arr;
    *CONF_AT(base, d->off_n, int) = n;
    return 0;
}

static int conf_load_default(conf_ctx_t *ctx, const conf_def_t *d, const config_setting_t *anchor,
                             void *base, const char *sp)
{
    switch (d->type) {
    case CONF_T_STRING:
        return conf_set_string(ctx, anchor, sp, CONF_AT(base, d->off, char *), d->def);
    case CONF_T_INT:
        if (d->def && d->enums && conf_enum_lookup(d->enums, d->def) >= 0)
            *CONF_AT(base, d->off, int) = conf_enum_lookup(d->enums, d->def);
        else
            *CONF_AT(base, d->off, int) = d->def ? atoi(d->def) : 0;
        return 0;
    case CONF_T_BOOL:
        *CONF_AT(base, d->off, bool) = d->def && strcmp(d->def, "true") == 0;
        return 0;
    case CONF_T_ENUM:
        *CONF_AT(base, d->off, int) = d->def ? conf_enum_lookup(d->enums, d->def) : 0;
        return 0;
    case CONF_T_GROUP:
        /* An absent group: its settings take their defaults; a required one
         * inside is reported at the line of the enclosing group. */
        return conf_load_section(ctx, d->sub, NULL, anchor, CONF_AT(base, d->off, char), sp);
    case CONF_T_INT_ARRAY:
        return conf_default_int_array(ctx, d, anchor, base, sp);
    case CONF_T_FILE:      /* the peer's default stands */
    case CONF_T_STR_ARRAY: /* empty */
    case CONF_T_ARGS:      /* empty */
    case CONF_T_LIST:      /* empty */
    case CONF_T_RAW:       /* NULL */
        return 0;
    }
    return 0;
}

static int conf_load_int_array(conf_ctx_t *ctx, const conf_def_t *d, const config_setting_t *s,
                               void *base, const char *sp)
{
    int t = config_setting_type(s);
    if (t != CONFIG_TYPE_ARRAY && t != CONFIG_TYPE_LIST)
        return conf_error(ctx, s, sp, "must be an array of integers like [ 1000, 10000 ] (got %s)",
                          conf_type_name(s));
    int n = config_setting_length(s);
    int **arr = CONF_AT(base, d->off, int *);
    if (n == 0)
        return 0;
    if (!(*arr = calloc((size_t)n, sizeof(int))))
        return conf_error(ctx, s, sp, "out of memory");
    *CONF_AT(base, d->off_n, int) = n;
    for (int i = 0; i < n; i++) {
        char ep[CONF_PATH_MAX];
        conf_path_index(ep, sp, i);
        if (conf_get_int(ctx, config_setting_get_elem(s, (unsigned)i), ep, d->min, d->max,
                         &(*arr)[i]) < 0)
            return -1;
    }
    return 0;
}

static int conf_load_str_array(conf_ctx_t *ctx, const conf_def_t *d, const config_setting_t *s,
                               void *base, const char *sp)
{
    int t = config_setting_type(s);
    if (t != CONFIG_TYPE_ARRAY && t != CONFIG_TYPE_LIST)
        return conf_error(ctx, s, sp, "must be an array of strings like [ \"a\", \"b\" ] (got %s)",
                          conf_type_name(s));
    int n = config_setting_length(s);
    char ***arr = CONF_AT(base, d->off, char **);
    if (n == 0)
        return 0;
    if (!(*arr = calloc((size_t)n, sizeof(char *))))
        return conf_error(ctx, s, sp, "out of memory");
    *CONF_AT(base, d->off_n, int) = n;
    for (int i = 0; i < n; i++) {
        const config_setting_t *e = config_setting_get_elem(s, (unsigned)i);
        char ep[CONF_PATH_MAX];
        conf_path_index(ep, sp, i);
        if (config_setting_type(e) != CONFIG_TYPE_STRING)
            return conf_error(ctx, e, ep, "must be a string (got %s)", conf_type_name(e));
        if (conf_check_string(ctx, d, e, ep, config_setting_get_string(e)) < 0 ||
            conf_set_string(ctx, e, ep, &(*arr)[i], config_setting_get_string(e)) < 0)
            return -1;
    }
    return 0;
}

static int conf_load_args(conf_ctx_t *ctx, const conf_def_t *d, const config_setting_t *s,
                          void *base, const char *sp)
{
    if (config_setting_type(s) != CONFIG_TYPE_GROUP)
        return conf_error(ctx, s, sp, "must be a group { name = value; ... } (got %s)",
                          conf_type_name(s));
    int n = config_setting_length(s);
    conf_arg_t **arr = CONF_AT(base, d->off, conf_arg_t *);
    if (n == 0)
        return 0;
    if (!(*arr = calloc((size_t)n, sizeof(conf_arg_t))))
        return conf_error(ctx, s, sp, "out of memory");
    *CONF_AT(base, d->off_n, int) = n;
    for (int i = 0; i < n; i++) {
        const config_setting_t *e = config_setting_get_elem(s, (unsigned)i);
        conf_arg_t *a = &(*arr)[i];
        char ep[CONF_PATH_MAX];
        conf_path(ep, sp, config_setting_name(e));
        if (conf_set_string(ctx, e, ep, &a->key, config_setting_name(e)) < 0)
            return -1;
        if (conf_is_int(e)) {
            a->is_int = true;
            a->ival = config_setting_get_int64(e);
        } else if (config_setting_type(e) == CONFIG_TYPE_STRING) {
            if (conf_set_string(ctx, e, ep, &a->sval, config_setting_get_string(e)) < 0)
                return -1;
        } else {
            return conf_error(ctx, e, ep, "must be a string or an integer (got %s)",
                              conf_type_name(e));
        }
    }
    return 0;
}

static int conf_load_list(conf_ctx_t *ctx, const conf_def_t *d, const config_setting_t *s,
                          void *base, const char *sp)
{
    if (config_setting_type(s) != CONFIG_TYPE_LIST)
        return conf_error(ctx, s, sp, "must be a list ( { ... }, ... ) (got %s)",
                          conf_type_name(s));
    int n = config_setting_length(s);
    if (n < d->min)
        return conf_error(ctx, s, sp, "must hold at least %lld group%s", d->min,
                          d->min == 1 ? "" : "s");
    if (n == 0)
        return 0;
    char **arr = CONF_AT(base, d->off, char *);
    if (!(*arr = calloc((size_t)n, d->elem_size)))
        return conf_error(ctx, s, sp, "out of memory");
    *CONF_AT(base, d->off_n, int) = n;
    for (int i = 0; i < n; i++) {
        const config_setting_t *e = config_setting_get_elem(s, (unsigned)i);
        char ep[CONF_PATH_MAX];
        conf_path_index(ep, sp, i);
        if (config_setting_type(e) != CONFIG_TYPE_GROUP)
            return conf_error(ctx, e, ep, "must be a group { ... } (got %s)", conf_type_name(e));
        if (conf_load_section(ctx, d->sub, e, e, *arr + (size_t)i * d->elem_size, ep) < 0)
            return -1;
    }
    return 0;
}

/* Load setting d from s (NULL: absent) into base. parent is the group that
 * holds (or should hold) it, for the line of "required" errors. */
static int conf_load_one(conf_ctx_t *ctx, const conf_def_t *d, const config_setting_t *s,
                         const config_setting_t *parent, void *base, const char *sp)
{
    int v = 0;

    if (!s) {
        if (d->flags & CONF_F_REQUIRED)
            return conf_error(ctx, parent, sp, "required setting is missing");
        return conf_load_default(ctx, d, parent, base, sp);
    }

    switch (d->type) {
    case CONF_T_STRING:
        if (config_setting_type(s) != CONFIG_TYPE_STRING)
            return conf_error(ctx, s, sp, "must be a string (got %s)", conf_type_name(s));
        if (conf_check_string(ctx, d, s, sp, config_setting_get_string(s)) < 0)
            return -1;
        if ((d->flags & CONF_F_READABLE) &&
            conf_check_readable(ctx, s, sp, config_setting_get_string(s)) < 0)
            return -1;
        return conf_set_string(ctx, s, sp, CONF_AT(base, d->off, char *),
                               config_setting_get_string(s));
    case CONF_T_INT:
        if (d->enums && config_setting_type(s) == CONFIG_TYPE_STRING) {
            if ((v = conf_enum_lookup(d->enums, config_setting_get_string(s))) < 0)
                return conf_error(ctx, s, sp,
                                  "must be an integer between %lld and %lld or \"%s\" "
                                  "(got \"%s\")",
                                  d->min, d->max, d->enums[0].name, config_setting_get_string(s));
            *CONF_AT(base, d->off, int) = v;
            return 0;
        }
        if (d->enums && !conf_is_int(s))
            return conf_error(ctx, s, sp,
                              "must be an integer between %lld and %lld or \"%s\" "
                              "(got %s)",
                              d->min, d->max, d->enums[0].name, conf_type_name(s));
        if (conf_get_int(ctx, s, sp, d->min, d->max, &v) < 0)
            return -1;
        *CONF_AT(base, d->off, int) = v;
        return 0;
    case CONF_T_BOOL:
        if (config_setting_type(s) != CONFIG_TYPE_BOOL)
            return conf_error(ctx, s, sp, "must be true or false (got %s)", conf_type_name(s));
        *CONF_AT(base, d->off, bool) = config_setting_get_bool(s) != 0;
        return 0;
    case CONF_T_ENUM:
        if (config_setting_type(s) != CONFIG_TYPE_STRING ||
            (v = conf_enum_lookup(d->enums, config_setting_get_string(s))) < 0)
            return conf_enum_error(ctx, d, s, sp);
        *CONF_AT(base, d->off, int) = v;
        return 0;
    case CONF_T_INT_ARRAY:
        return conf_load_int_array(ctx, d, s, base, sp);
    case CONF_T_STR_ARRAY:
        return conf_load_str_array(ctx, d, s, base, sp);
    case CONF_T_FILE: {
        const config_setting_t *peer = config_setting_get_member(parent, d->sub);
        if (peer)
            return conf_error(ctx, s, sp, "cannot be used together with %s (line %d)", d->sub,
                              (int)config_setting_source_line(peer));
        if (config_setting_type(s) != CONFIG_TYPE_STRING)
            return conf_error(ctx, s, sp, "must be a string (got %s)", conf_type_name(s));
        const char *file = config_setting_get_string(s);
        if (!file[0])
            return conf_error(ctx, s, sp, "must not be empty");
        return conf_read_secret(ctx, s, sp, file, CONF_SECRET_PASSWORD,
                                CONF_AT(base, d->off, char *));
    }
    case CONF_T_ARGS:
        return conf_load_args(ctx, d, s, base, sp);
    case CONF_T_GROUP:
        if (config_setting_type(s) != CONFIG_TYPE_GROUP)
            return conf_error(ctx, s, sp, "must be a group { ... } (got %s)", conf_type_name(s));
        return conf_load_section(ctx, d->sub, s, s, CONF_AT(base, d->off, char), sp);
    case CONF_T_LIST:
        return conf_load_list(ctx, d, s, base, sp);
    case CONF_T_RAW:
        if (config_setting_type(s) != CONFIG_TYPE_GROUP)
            return conf_error(ctx, s, sp, "must be a group { ... } (got %s)", conf_type_name(s));
        *CONF_AT(base, d->off, const config_setting_t *) = s;
        return 0;
    }
    return 0;
}

/* Load the settings of one section from grp (NULL: absent, all defaults)
 * into base; anchor gives the line for errors about missing settings. */
int conf_load_section(conf_ctx_t *ctx, const char *section, const config_setting_t *grp,
                      const config_setting_t *anchor, void *base, const char *path)
{
    char sp[CONF_PATH_MAX];

    /* A misspelt name would otherwise silently leave its default in force. */
    if (grp) {
        int n = config_setting_length(grp);
        for (int i = 0; i < n; i++) {
            const config_setting_t *s = config_setting_get_elem(grp, (unsigned)i);
            const char *name = config_setting_name(s);
            if (conf_find(section, name))
                continue;
            conf_path(sp, path, name);
            const char *hint = conf_suggest(section, name);
            if (hint)
                return conf_error(ctx, s, sp, "unknown setting (did you mean \"%s\"?)", hint);
            return conf_error(ctx, s, sp, "unknown setting");
        }
    }

    for (const conf_def_t *d = conf_defs; d->name; d++) {
        if (strcmp(d->section, section) != 0)
            continue;
        conf_path(sp, path, d->name);
        const config_setting_t *s = grp ? config_setting_get_member(grp, d->name) : NULL;
        if (conf_load_one(ctx, d, s, grp ? grp : anchor, base, sp) < 0)
            return -1;
    }

    const conf_section_t *sec = conf_section(section);
    if (sec && sec->check)
        return sec->check(ctx, grp ? grp : anchor, base, path);
    return 0;
}
