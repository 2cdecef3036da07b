/* version.c: parse server version strings and hold them against the oldest versions idemd runs on.
 */
#include "version.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Read at most 6 digits at *s into *n and move *s past them. 0, or -1 without a digit. */
static int version_number(const char **s, int *n)
{
    int k = 0, v = 0;
    while (isdigit((unsigned char)**s)) {
        if (++k > 6)
            return -1;
        v = v * 10 + (**s - '0');
        (*s)++;
    }
    if (k == 0)
        return -1;
    *n = v;
    return 0;
}

int version_parse(const char *s, version_t *v)
{
    version_t r = {0, 0, -1};

    if (s == NULL || version_number(&s, &r.major) != 0 || *s++ != '.' ||
        version_number(&s, &r.minor) != 0 || r.major == 0)
        return -1;
    if (*s == '.') {
        s++;
        if (version_number(&s, &r.patch) != 0)
            r.patch = -1; /* "8.0.mysql_aurora...": major.minor only */
    }
    *v = r;
    return 0;
}

int version_cmp(const version_t *a, const version_t *b)
{
    if (a->major != b->major)
        return a->major < b->major ? -1 : 1;
    if (a->minor != b->minor)
        return a->minor < b->minor ? -1 : 1;
    if (a->patch != b->patch)
        return a->patch < b->patch ? -1 : 1;
    return 0;
}

const char *version_server_name(version_server_t server)
{
    switch (server) {
    case VERSION_RABBITMQ:
        return "RabbitMQ";
    case VERSION_MARIADB:
        return "MariaDB";
    case VERSION_MYSQL:
        return "MySQL";
    }
    return "?";
}

version_server_t version_db_flavour(const char *server_info)
{
    return server_info && strcasestr(server_info, "mariadb") ? VERSION_MARIADB : VERSION_MYSQL;
}

void version_minimum(version_server_t server, version_t *min)
{
    static const version_t builtin[] = {VERSION_MIN_RABBITMQ, VERSION_MIN_MARIADB,
                                        VERSION_MIN_MYSQL};

    *min = builtin[server];
#ifdef IDEMD_TESTING
    static const char *const env[] = {"IDEMD_TEST_MIN_RABBITMQ", "IDEMD_TEST_MIN_MARIADB",
                                      "IDEMD_TEST_MIN_MYSQL"};
    version_t raised;
    /* Test hook: raises only (see version.h). */
    if (version_parse(getenv(env[server]), &raised) == 0 && raised.patch >= 0 &&
        version_cmp(&raised, min) > 0)
        *min = raised;
#endif
}

/* Copy at most 64 bytes of s into buf, printable ASCII only (a server's string goes to logs). */
static const char *version_printable(const char *s, char *buf, size_t len)
{
    size_t o = 0;
    for (; s && *s && o + 1 < len && o < 64; s++)
        buf[o++] = (*s >= 0x20 && *s < 0x7f && *s != '"' && *s != '\\') ? *s : '?';
    buf[o] = '\0';
    return buf;
}

version_verdict_t version_check(version_server_t server, const char *reported, const version_t *min,
                                char *msg, size_t len)
{
    const char *name = version_server_name(server), *s = reported;
    char shown[80];
    version_t v;

    msg[0] = '\0';
    /* Older MariaDB servers put "5.5.5-" before their version for old replication clients. */
    if (server == VERSION_MARIADB && s && strncmp(s, "5.5.5-", 6) == 0)
        s += 6;
    if (version_parse(s, &v) != 0) {
        snprintf(msg, len,
                 "%s reports %s%s%s, not a version idemd can read: going on without the check "
                 "(idemd needs %d.%d.%d or newer)",
                 name, reported ? "version \"" : "no version",
                 version_printable(reported, shown, sizeof(shown)), reported ? "\"" : "",
                 min->major, min->minor, min->patch);
        return VERSION_UNKNOWN;
    }
    if (v.patch < 0 && v.major == min->major && v.minor == min->minor && min->patch > 0) {
        snprintf(msg, len,
                 "%s reports version \"%s\", without the patch release idemd needs to compare "
                 "with %d.%d.%d: going on without the check",
                 name, version_printable(reported, shown, sizeof(shown)), min->major, min->minor,
                 min->patch);
        return VERSION_UNKNOWN;
    }
    if (v.patch < 0)
        v.patch = 0;
    if (version_cmp(&v, min) < 0) {
        snprintf(msg, len,
                 "%s %d.%d.%d is older than %d.%d.%d, the oldest idemd supports: upgrade the "
                 "server (docs/compat.md)",
                 name, v.major, v.minor, v.patch, min->major, min->minor, min->patch);
        return VERSION_TOO_OLD;
    }
    return VERSION_OK;
}
