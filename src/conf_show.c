/* conf_show.c: what the table prints: the effective configuration, the reference, the sample. */
#include "conf.h"
#include "conf_int.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------- */
/* Printing */

static const char *conf_enum_name(const conf_enum_t *e, int value)
{
    for (; e->name; e++)
        if (e->value == value)
            return e->name;
    return "?";
}

static void conf_print_string(FILE *out, const char *s)
{
    fputc('"', out);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"':
            fputs("\\\"", out);
            break;
        case '\\':
            fputs("\\\\", out);
            break;
        case '\n':
            fputs("\\n", out);
            break;
        case '\r':
            fputs("\\r", out);
            break;
        case '\t':
            fputs("\\t", out);
            break;
        case '\f':
            fputs("\\f", out);
            break;
        default:
            if (*p < 0x20 || *p == 0x7f)
                fprintf(out, "\\x%02X", *p);
            else
                fputc(*p, out);
        }
    }
    fputc('"', out);
}

static void conf_print_int64(FILE *out, long long v)
{
    if (v < INT_MIN || v > INT_MAX)
        fprintf(out, "%lldL", v);
    else
        fprintf(out, "%lld", v);
}

/* Shortest form that reads back as the same double, always with a '.' or
 * an exponent so that libconfig parses it as a float again. */
static void conf_print_float(FILE *out, double v)
{
    char buf[64];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof(buf), "%.*g", prec, v);
        if (strtod(buf, NULL) == v)
            break;
    }
    if (!strpbrk(buf, ".eEn"))
        strcat(buf, ".0");
    fputs(buf, out);
}

/* Plugin settings are not ours to know; names that look secret are masked. */
static bool conf_name_is_secret(const char *name)
{
    static const char *const words[] = {"password", "passwd", "secret", "token", NULL};
    for (int i = 0; name && words[i]; i++)
        if (strcasestr(name, words[i]))
            return true;
    return false;
}

static void conf_dump_value(const config_setting_t *s, int depth, bool mask, FILE *out);

static void conf_dump_members(const config_setting_t *g, int depth, bool mask, FILE *out)
{
    int n = config_setting_length(g);
    for (int i = 0; i < n; i++) {
        const config_setting_t *m = config_setting_get_elem(g, (unsigned)i);
        fprintf(out, "%*s%s = ", depth * 4, "", config_setting_name(m));
        conf_dump_value(m, depth, mask || conf_name_is_secret(config_setting_name(m)), out);
        fputs(";\n", out);
    }
}

static void conf_dump_value(const config_setting_t *s, int depth, bool mask, FILE *out)
{
    int t = config_setting_type(s);
    if (mask && t != CONFIG_TYPE_GROUP && t != CONFIG_TYPE_LIST && t != CONFIG_TYPE_ARRAY) {
        fputs("\"***\"", out);
        return;
    }
    switch (t) {
    case CONFIG_TYPE_INT:
    case CONFIG_TYPE_INT64:
        conf_print_int64(out, config_setting_get_int64(s));
        break;
    case CONFIG_TYPE_FLOAT:
        conf_print_float(out, config_setting_get_float(s));
        break;
    case CONFIG_TYPE_STRING:
        conf_print_string(out, config_setting_get_string(s));
        break;
    case CONFIG_TYPE_BOOL:
        fputs(config_setting_get_bool(s) ? "true" : "false", out);
        break;
    case CONFIG_TYPE_ARRAY:
    case CONFIG_TYPE_LIST: {
        int n = config_setting_length(s);
        fputs(t == CONFIG_TYPE_ARRAY ? "[ " : "( ", out);
        for (int i = 0; i < n; i++) {
            if (i)
                fputs(", ", out);
            conf_dump_value(config_setting_get_elem(s, (unsigned)i), depth, mask, out);
        }
        fputs(t == CONFIG_TYPE_ARRAY ? " ]" : " )", out);
        break;
    }
    case CONFIG_TYPE_GROUP:
        fputs("{\n", out);
        conf_dump_members(s, depth + 1, mask, out);
        fprintf(out, "%*s}", depth * 4, "");
        break;
    }
}

static void conf_dump_section(const char *section, const void *base, int depth, FILE *out)
{
    int ind = depth * 4;
    for (const conf_def_t *d = conf_defs; d->name; d++) {
        if (strcmp(d->section, section) != 0 || d->type == CONF_T_FILE)
            continue;
        switch (d->type) {
        case CONF_T_STRING: {
            const char *v = *CONF_CAT(base, d->off, char *);
            const conf_def_t *hosts = conf_find(section, "hosts");
            if ((d->flags & CONF_F_BY_HOSTS) && hosts && *CONF_CAT(base, hosts->off_n, int) > 0) {
                fprintf(out, "%*s# %s: not used: hosts is set\n", ind, "", d->name);
                break;
            }
            if (!v) {
                fprintf(out, "%*s# %s: not set\n", ind, "", d->name);
                break;
            }
            fprintf(out, "%*s%s = ", ind, "", d->name);
            conf_print_string(out, (d->flags & CONF_F_SECRET) ? "***" : v);
            fputs(";\n", out);
            break;
        }
        case CONF_T_INT: {
            int v = *CONF_CAT(base, d->off, int);
            if (d->enums && (v < d->min || v > d->max))
                fprintf(out, "%*s%s = \"%s\";\n", ind, "", d->name, conf_enum_name(d->enums, v));
            else
                fprintf(out, "%*s%s = %d;\n", ind, "", d->name, v);
            break;
        }
        case CONF_T_BOOL:
            fprintf(out, "%*s%s = %s;\n", ind, "", d->name,
                    *CONF_CAT(base, d->off, bool) ? "true" : "false");
            break;
        case CONF_T_ENUM:
            fprintf(out, "%*s%s = \"%s\";\n", ind, "", d->name,
                    conf_enum_name(d->enums, *CONF_CAT(base, d->off, int)));
            break;
        case CONF_T_INT_ARRAY: {
            const int *a = *CONF_CAT(base, d->off, int *);
            int n = *CONF_CAT(base, d->off_n, int);
            fprintf(out, "%*s%s = [", ind, "", d->name);
            for (int i = 0; i < n; i++)
                fprintf(out, "%s %d", i ? "," : "", a[i]);
            fputs(" ];\n", out);
            break;
        }
        case CONF_T_STR_ARRAY: {
            const char *const *a = *CONF_CAT(base, d->off, char *const *);
            int n = *CONF_CAT(base, d->off_n, int);
            fprintf(out, "%*s%s = [", ind, "", d->name);
            for (int i = 0; i < n; i++) {
                fputs(i ? ", " : " ", out);
                conf_print_string(out, a[i]);
            }
            fputs(" ];\n", out);
            break;
        }
        case CONF_T_ARGS: {
            const conf_arg_t *a = *CONF_CAT(base, d->off, conf_arg_t *);
            int n = *CONF_CAT(base, d->off_n, int);
            fprintf(out, "%*s%s = {%s", ind, "", d->name, n ? "\n" : " ");
            for (int i = 0; i < n; i++) {
                fprintf(out, "%*s%s = ", ind + 4, "", a[i].key);
                if (a[i].is_int)
                    conf_print_int64(out, a[i].ival);
                else
                    conf_print_string(out, a[i].sval);
                fputs(";\n", out);
            }
            fprintf(out, "%*s};\n", n ? ind : 0, "");
            break;
        }
        case CONF_T_GROUP:
            fprintf(out, "%*s%s = {\n", ind, "", d->name);
            conf_dump_section(d->sub, CONF_CAT(base, d->off, char), depth + 1, out);
            fprintf(out, "%*s};\n", ind, "");
            break;
        case CONF_T_LIST: {
            const char *arr = *CONF_CAT(base, d->off, char *);
            int n = *CONF_CAT(base, d->off_n, int);
            fprintf(out, "%*s%s = (%s", ind, "", d->name, n ? "\n" : " ");
            for (int i = 0; i < n; i++) {
                fprintf(out, "%*s{\n", ind + 4, "");
                conf_dump_section(d->sub, arr + (size_t)i * d->elem_size, depth + 2, out);
                fprintf(out, "%*s}%s\n", ind + 4, "", i + 1 < n ? "," : "");
            }
            fprintf(out, "%*s);\n", n ? ind : 0, "");
            break;
        }
        case CONF_T_RAW: {
            const config_setting_t *s = *CONF_CAT(base, d->off, config_setting_t *);
            if (!s) {
                fprintf(out, "%*s# %s: not set\n", ind, "", d->name);
                break;
            }
            fprintf(out, "%*s%s = ", ind, "", d->name);
            conf_dump_value(s, depth, false, out);
            fputs(";\n", out);
            break;
        }
        case CONF_T_FILE:
            break;
        }
    }
}

void conf_dump(const conf_t *conf, FILE *out)
{
    fprintf(out, "# effective configuration of %s (secrets masked)\n", conf->path);
    conf_dump_section("root", conf, 0, out);
}

static const char *conf_doc_type(const conf_def_t *d)
{
    switch (d->type) {
    case CONF_T_STRING:
        return (d->flags & CONF_F_READABLE) ? "string (path)" : "string";
    case CONF_T_INT:
        return d->enums ? "integer or string" : "integer";
    case CONF_T_BOOL:
        return "boolean";
    case CONF_T_ENUM:
        return "string (enum)";
    case CONF_T_INT_ARRAY:
        return "array of integers";
    case CONF_T_STR_ARRAY:
        return "array of strings";
    case CONF_T_FILE:
        return "string (path)";
    case CONF_T_ARGS:
        return "group";
    case CONF_T_GROUP:
        return "group";
    case CONF_T_LIST:
        return "list of groups";
    case CONF_T_RAW:
        return "group (free-form)";
    }
    return "?";
}

static void conf_doc_default(const conf_def_t *d, FILE *out)
{
    if (d->flags & CONF_F_REQUIRED)
        fputs("required", out);
    else if (d->def && (d->type == CONF_T_STRING || d->type == CONF_T_ENUM ||
                        (d->enums && !(d->def[0] >= '0' && d->def[0] <= '9'))))
        fprintf(out, "`\"%s\"`", d->def);
    else if (d->def)
        fprintf(out, "`%s`", d->def);
    else if (d->def_doc)
        fputs(d->def_doc, out);
}

static void conf_doc_range(const conf_def_t *d, FILE *out)
{
    switch (d->type) {
    case CONF_T_STRING:
        if (d->flags & CONF_F_READABLE) {
            fputs("readable file", out);
            break;
        }
        if (d->flags & CONF_F_IDENT)
            fputs("`[A-Za-z0-9_]`, ", out);
        if (d->max > 0)
            fprintf(out, "%lld..%lld bytes", d->min, d->max);
        else if (d->min > 0)
            fputs("not empty", out);
        break;
    case CONF_T_INT:
        fprintf(out, "%lld..%lld", d->min, d->max);
        for (const conf_enum_t *e = d->enums; e && e->name; e++)
            fprintf(out, ", `\"%s\"`", e->name);
        break;
    case CONF_T_ENUM:
        for (const conf_enum_t *e = d->enums; e->name; e++)
            fprintf(out, "%s`%s`", e == d->enums ? "" : ", ", e->name);
        break;
    case CONF_T_INT_ARRAY:
        fprintf(out, "each %lld..%lld", d->min, d->max);
        break;
    case CONF_T_STR_ARRAY:
        fprintf(out, "each %lld..%lld bytes", d->min, d->max);
        break;
    case CONF_T_FILE:
        fputs("readable file", out);
        break;
    case CONF_T_LIST:
        if (d->min > 0)
            fprintf(out, "at least %lld", d->min);
        break;
    case CONF_T_BOOL:
    case CONF_T_ARGS:
    case CONF_T_GROUP:
    case CONF_T_RAW:
        break;
    }
}

void conf_reference(FILE *out)
{
    for (const conf_section_t *sec = conf_sections; sec->name; sec++) {
        fprintf(out, "### %s\n\n%s\n\n", sec->title, sec->intro);
        fputs("| setting | type | default | range | reload | meaning |\n", out);
        fputs("|---|---|---|---|---|---|\n", out);
        for (const conf_def_t *d = conf_defs; d->name; d++) {
            if (strcmp(d->section, sec->name) != 0)
                continue;
            bool container = d->type == CONF_T_GROUP || d->type == CONF_T_LIST;
            fprintf(out, "| `%s` | %s | ", d->name, conf_doc_type(d));
            conf_doc_default(d, out);
            fputs(" | ", out);
            conf_doc_range(d, out);
            fprintf(out, " | %s | %s |\n",
                    container ? "per setting"
                              : ((d->flags & CONF_F_NO_RELOAD) ? "restart" : "reload"),
                    d->help);
        }
        fputs("\n", out);
    }
}

/* ---------------------------------------------------------------------- */
/* The sample configuration (conf/idemd.conf) */

/* Example values for settings without a default; live ones are written as
 * settings, the others as comments. */
typedef struct conf_example {
    const char *section, *name, *value;
    bool live;
} conf_example_t;

static const conf_example_t conf_examples[] = {
    {"broker", "password_file", "\"/etc/idemd/amqp.pw\"", false},
    {"broker_tls", "ca_file", "\"/etc/idemd/tls/broker-ca.pem\"", false},
    {"broker_tls", "cert_file", "\"/etc/idemd/tls/client.pem\"", false},
    {"broker_tls", "key_file", "\"/etc/idemd/tls/client.key\"", false},
    {"broker", "hosts", "[ \"rabbit1:5672\", \"rabbit2:5672\", \"rabbit3:5672\" ]", false},
    {"database", "hosts", "[ \"db1:3306\", \"db2:3306\", \"db3:3306\" ]", false},
    {"database", "socket", "\"/run/mysqld/mysqld.sock\"", false},
    {"database", "password", "\"secret\"", false},
    {"database", "password_file", "\"/etc/idemd/db.pw\"", false},
    {"database", "database", "\"idemd\"", true},
    {"database_tls", "ca_file", "\"/etc/idemd/tls/db-ca.pem\"", false},
    {"database_tls", "cert_file", "\"/etc/idemd/tls/client.pem\"", false},
    {"database_tls", "key_file", "\"/etc/idemd/tls/client.key\"", false},
    {"metrics", "listen", "\"127.0.0.1:9187\"", false},
    {"metrics", "token_file", "\"/etc/idemd/metrics.token\"", false},
    {"queue", "name", "\"orders.pay\"", true},
    {"queue", "handler", "\"/usr/local/lib/idemd/plugins/order_pay.so\"", true},
    {"queue", "consumer", "\"orders.pay\"", false},
    {"queue", "id_header", "\"x-msg-id\"", false},
    {"queue", "settings", "{ table = \"orders\"; guard = true; }", true},
    {"declare", "dead_letter_queue", "\"orders.pay.dlq\"", false},
    {"declare", "arguments", "{ x-max-priority = 10; }", false},
    {"declare", "bindings", "( { exchange = \"pay.topic\"; routing_key = \"pay.success\"; } )",
     false},
    {NULL, NULL, NULL, false},
};

/* The example of setting d, or NULL. */
static const conf_example_t *conf_example(const conf_def_t *d)
{
    for (const conf_example_t *e = conf_examples; e->name; e++)
        if (strcmp(e->section, d->section) == 0 && strcmp(e->name, d->name) == 0)
            return e;
    return NULL;
}

/* Write text as "# " comment lines at indent, wrapped before column 100, without backticks. */
static void conf_sample_comment(FILE *out, int ind, const char *text)
{
    const int width = 100 - ind - 2;
    char plain[1024];
    size_t w = 0;
    for (const char *c = text; *c && w < sizeof(plain) - 1; c++)
        if (*c != '`')
            plain[w++] = *c;
    plain[w] = '\0';
    const char *p = plain;
    while (*p) {
        int n = 0, cut = -1;
        while (*p == ' ')
            p++;
        while (p[n] && n < width) {
            if (p[n] == ' ')
                cut = n;
            n++;
        }
        if (p[n] && p[n] != ' ' && cut > 0)
            n = cut;
        fprintf(out, "%*s# %.*s\n", ind, "", n, p);
        p += n;
    }
}

static void conf_sample_section(FILE *out, const char *section, int depth);

/*
 * One setting of the sample at depth: its help, range and default as a
 * comment, then the setting with its default (a group or the required list
 * recursively), or its example, commented out unless it is required or live.
 */
static void conf_sample_setting(FILE *out, const conf_def_t *d, int depth)
{
    int ind = depth * 4;
    const conf_example_t *ex = conf_example(d);
    bool required = d->flags & CONF_F_REQUIRED;
    char *help = NULL, *range = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&range, &len);

    if (m) {
        conf_doc_range(d, m);
        fclose(m);
    }
    m = open_memstream(&help, &len);
    if (m) {
        fputs(d->help, m);
        if (range && range[0])
            fprintf(m, " [%s]", range);
        if (required)
            fputs(" (required)", m);
        else if (!d->def && d->def_doc && strcmp(d->def_doc, "none") != 0)
            fprintf(m, " (default: %s)", d->def_doc);
        if (d->def && ex)
            fprintf(m, "; e.g. %s = %s;", d->name, ex->value);
        fclose(m);
    }
    conf_sample_comment(out, ind, help ? help : d->help);
    free(help);
    free(range);

    switch (d->type) {
    case CONF_T_GROUP:
        fprintf(out, "%*s%s = {\n", ind, "", d->name);
        conf_sample_section(out, d->sub, depth + 1);
        fprintf(out, "%*s};\n", ind, "");
        return;
    case CONF_T_LIST:
        if (!required)
            break;
        fprintf(out, "%*s%s = (\n%*s{\n", ind, "", d->name, ind + 4, "");
        conf_sample_section(out, d->sub, depth + 2);
        fprintf(out, "%*s}\n%*s);\n", ind + 4, "", ind, "");
        return;
    default:
        break;
    }
    if (d->def && (d->type == CONF_T_STRING || d->type == CONF_T_ENUM ||
                   (d->enums && !(d->def[0] >= '0' && d->def[0] <= '9')))) {
        fprintf(out, "%*s%s = ", ind, "", d->name);
        conf_print_string(out, d->def);
        fputs(";\n", out);
    } else if (d->def) {
        fprintf(out, "%*s%s = %s;\n", ind, "", d->name, d->def);
    } else if (d->type == CONF_T_ARGS || d->type == CONF_T_LIST) {
        if (ex)
            fprintf(out, "%*s# %s = %s;\n", ind, "", d->name, ex->value);
        fprintf(out, "%*s%s = %s;\n", ind, "", d->name, d->type == CONF_T_ARGS ? "{ }" : "( )");
    } else if (ex) {
        fprintf(out, "%*s%s%s = %s;\n", ind, "", ex->live || required ? "" : "# ", d->name,
                ex->value);
    }
}

/* Every setting of section; top-level groups are separated by a blank line. */
static void conf_sample_section(FILE *out, const char *section, int depth)
{
    for (const conf_def_t *d = conf_defs; d->name; d++) {
        if (strcmp(d->section, section) != 0)
            continue;
        if (depth == 0 && d != conf_defs)
            fputc('\n', out);
        conf_sample_setting(out, d, depth);
    }
}

void conf_sample(FILE *out)
{
    fputs("# idemd.conf: a full sample configuration; every setting is shown with its default.\n"
          "#\n"
          "# Generated from the settings table in src/conf.c; do not edit by hand, run\n"
          "#   build/tests/unit/test_conf --sample >conf/idemd.conf\n"
          "# Syntax: libconfig (groups { }, lists ( ), arrays [ ], \"strings\", settings end with "
          "';').\n"
          "# Reference: docs/configuration.md. Check a file without starting: idemd -c FILE "
          "--check-config\n"
          "# Unknown settings are errors, so a typo cannot pass silently; only a queue's "
          "\"settings\"\n"
          "# group is left to its handler. A setting written as a comment has no default; the "
          "value\n"
          "# shown is an example. Ranges are in [ ].\n"
          "\n",
          out);
    conf_sample_section(out, "root", 0);
}
