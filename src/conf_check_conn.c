/* conf_check_conn.c: the rules on the broker and database groups: hosts, TLS, passwords, key files.
 */
#include "conf.h"
#include "conf_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---------------------------------------------------------------------- */
/* The connections' groups */

/* A password written in the config file is as secret as the file: say so
 * when group or others may read the file that holds it. */
static int conf_check_inline_password(conf_ctx_t *ctx, const config_setting_t *grp,
                                      const char *path)
{
    const config_setting_t *s = grp ? config_setting_get_member(grp, "password") : NULL;
    char file[PATH_MAX + 8], sp[CONF_PATH_MAX];
    struct stat st;
    int line;

    if (!s)
        return 0;
    conf_source(ctx, s, file, sizeof(file), &line);
    if (stat(file, &st) != 0 || (st.st_mode & 077) == 0)
        return 0;
    conf_path(sp, path, "password");
    return conf_warn(ctx, s, sp,
                     "\"%s\" holds a password and is readable by %s (mode %04o): use "
                     "password_file, or chmod go= the file",
                     file, (st.st_mode & 007) ? "others" : "its group",
                     (unsigned)(st.st_mode & 07777));
}

/* A private key file readable by every user is worth a warning (a group,
 * like Debian's ssl-cert, is a common and deliberate setup). */
static int conf_check_key_mode(conf_ctx_t *ctx, const config_setting_t *grp, const char *path,
                               const char *key_file)
{
    char sp[CONF_PATH_MAX];
    struct stat st;
    if (!key_file || stat(key_file, &st) != 0 || (st.st_mode & S_IROTH) == 0)
        return 0;
    conf_path(sp, path, "key_file");
    return conf_warn(ctx, config_setting_get_member(grp, "key_file"), sp,
                     "\"%s\" is readable by every user (mode %04o): chmod o= it", key_file,
                     (unsigned)(st.st_mode & 07777));
}

/* cert_file and key_file come as a pair. */
static int conf_check_key_pair(conf_ctx_t *ctx, const config_setting_t *grp, const char *path,
                               const char *cert_file, const char *key_file)
{
    char sp[CONF_PATH_MAX];
    if (cert_file && !key_file) {
        conf_path(sp, path, "cert_file");
        return conf_error(ctx, config_setting_get_member(grp, "cert_file"), sp,
                          "needs key_file too");
    }
    if (key_file && !cert_file) {
        conf_path(sp, path, "key_file");
        return conf_error(ctx, config_setting_get_member(grp, "key_file"), sp,
                          "needs cert_file too");
    }
    return 0;
}

/* Warn that a TLS check is turned off, at the line of setting name (or of the group). */
static int conf_warn_check_off(conf_ctx_t *ctx, const config_setting_t *grp,
                               const config_setting_t *own, const char *path, const char *name,
                               const char *why)
{
    char sp[CONF_PATH_MAX];
    conf_path(sp, path, name);
    return conf_warn(ctx, own ? config_setting_get_member(own, name) : grp, sp, "%s", why);
}

/* grp is the group itself, or its parent when the group is absent. */
static const config_setting_t *conf_own_group(const config_setting_t *grp, const char *name)
{
    const char *gname = grp ? config_setting_name(grp) : NULL;
    return gname && strcmp(gname, name) == 0 ? grp : NULL;
}

/*
 * True for a host that never leaves this machine: "localhost" (and names
 * under .localhost), 127.0.0.0/8, ::1 and ::ffff:127.0.0.0/104. Names are
 * not resolved: any other name counts as remote.
 */
static bool conf_host_is_loopback(const char *host)
{
    struct in_addr a4;
    struct in6_addr a6;
    size_t n = host ? strlen(host) : 0;
    if (n == 0)
        return false;
    if (strcasecmp(host, "localhost") == 0 ||
        (n > 10 && strcasecmp(host + n - 10, ".localhost") == 0))
        return true;
    if (inet_pton(AF_INET, host, &a4) == 1)
        return (ntohl(a4.s_addr) >> 24) == 127;
    if (inet_pton(AF_INET6, host, &a6) == 1)
        return IN6_IS_ADDR_LOOPBACK(&a6) || (IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127);
    return false;
}

/*
 * Warn that a connection to a remote host would be plain text (at host's
 * line, or the group's): host, or each entry of hosts[0..n-1] when set.
 */
static int conf_warn_plain(conf_ctx_t *ctx, const config_setting_t *own, const char *path,
                           const char *host, char *const *hosts, int n, const char *what)
{
    char sp[CONF_PATH_MAX], hp[CONF_PATH_MAX], name[256];
    int port;
    if (n > 0) {
        const config_setting_t *list = own ? config_setting_get_member(own, "hosts") : NULL;
        for (int i = 0; i < n; i++) {
            if (conf_endpoint(hosts[i], 1, name, sizeof(name), &port) != 0 ||
                conf_host_is_loopback(name))
                continue;
            conf_path(hp, path, "hosts");
            conf_path_index(sp, hp, i);
            if (conf_warn(ctx, list ? config_setting_get_elem(list, (unsigned)i) : own, sp,
                          "\"%s\" is not a loopback address and tls.enabled is false: %s cross "
                          "the network in plain text",
                          name, what) < 0)
                return -1;
        }
        return 0;
    }
    const config_setting_t *at = own ? config_setting_get_member(own, "host") : NULL;
    if (conf_host_is_loopback(host))
        return 0;
    conf_path(sp, path, "host");
    return conf_warn(ctx, at ? at : own, sp,
                     "\"%s\" is not a loopback address and tls.enabled is false: %s cross the "
                     "network in plain text",
                     host, what);
}

/*
 * TLS is never off by accident: with tls.enabled false (or absent), a tls
 * setting that only means something with TLS on - a file, or a check turned
 * off - is an error at its line. Settings left at their defaults (the
 * sample config's verify_* = true) are fine.
 */
static int conf_check_tls_off(conf_ctx_t *ctx, const config_setting_t *own, const char *path)
{
    char sp[CONF_PATH_MAX];
    const config_setting_t *en = own ? config_setting_get_member(own, "enabled") : NULL;
    int n = own ? config_setting_length(own) : 0;
    for (int i = 0; i < n; i++) {
        const config_setting_t *m = config_setting_get_elem(own, (unsigned)i);
        const char *name = config_setting_name(m);
        if (!name || strcmp(name, "enabled") == 0)
            continue;
        if (config_setting_type(m) == CONFIG_TYPE_BOOL && config_setting_get_bool(m))
            continue;
        conf_path(sp, path, name);
        return conf_error(ctx, m, sp,
                          "set, but tls.enabled is %s: the connection would be plain text; set "
                          "tls.enabled = true, or remove the setting",
                          en ? "false" : "not set (default false)");
    }
    return 0;
}

int conf_endpoint(const char *spec, int def_port, char *host, size_t hostlen, int *port)
{
    const char *h = spec, *colon, *end;
    size_t n;

    if (spec[0] == '[') { /* "[::1]:5672" */
        h = spec + 1;
        if ((end = strchr(h, ']')) == NULL || (end[1] != '\0' && end[1] != ':'))
            return -1;
        colon = end[1] == ':' ? end + 1 : NULL;
    } else {
        colon = strchr(spec, ':');
        if (colon && strchr(colon + 1, ':'))
            return -1; /* a bare IPv6 address: brackets tell its port apart */
        end = colon ? colon : spec + strlen(spec);
    }
    n = (size_t)(end - h);
    if (n == 0 || n >= hostlen)
        return -1;
    *port = def_port;
    if (colon) {
        char *ep;
        errno = 0;
        long v = strtol(colon + 1, &ep, 10);
        if (colon[1] < '0' || colon[1] > '9' || *ep || errno || v < 1 || v > 65535)
            return -1;
        *port = (int)v;
    }
    memcpy(host, h, n);
    host[n] = '\0';
    return 0;
}

/*
 * Rules for a hosts list in group own (NULL: absent): each element an
 * endpoint, and none of the settings it excludes (excl, NULL-terminated)
 * beside it. 0, or -1 with the error set.
 */
static int conf_check_hosts(conf_ctx_t *ctx, const config_setting_t *own, const char *path,
                            char *const *hosts, int n, const char *const *excl)
{
    const config_setting_t *list = own ? config_setting_get_member(own, "hosts") : NULL;
    char hp[CONF_PATH_MAX], sp[CONF_PATH_MAX], host[256];
    int port;

    if (!list || n == 0)
        return 0;
    for (int i = 0; i < n; i++) {
        if (conf_endpoint(hosts[i], 1, host, sizeof(host), &port) == 0)
            continue;
        conf_path(hp, path, "hosts");
        conf_path_index(sp, hp, i);
        return conf_error(ctx, config_setting_get_elem(list, (unsigned)i), sp,
                          "must be \"host\" or \"host:port\" (IPv6: \"[addr]:port\"), port "
                          "1..65535 (got \"%s\")",
                          hosts[i]);
    }
    for (; *excl; excl++) {
        const config_setting_t *x = config_setting_get_member(own, *excl);
        if (!x)
            continue;
        conf_path(sp, path, "hosts");
        return conf_error(ctx, list, sp, "cannot be used together with %s (line %d)", *excl,
                          (int)config_setting_source_line(x));
    }
    return 0;
}

int conf_check_broker(conf_ctx_t *ctx, const config_setting_t *grp, void *base, const char *path)
{
    static const char *const excl[] = {"host", NULL};
    conf_broker_t *b = base;
    char sp[CONF_PATH_MAX];

    if (conf_check_inline_password(ctx, conf_own_group(grp, "broker"), path) < 0 ||
        conf_check_hosts(ctx, conf_own_group(grp, "broker"), path, b->hosts, b->n_hosts, excl) < 0)
        return -1;
    if (b->tls.enabled && b->port == 5672) {
        const config_setting_t *port = grp ? config_setting_get_member(grp, "port") : NULL;
        conf_path(sp, path, "port");
        return conf_warn(ctx, port ? port : grp, sp,
                         "5672 is the plain AMQP port but tls.enabled is true; a broker's TLS "
                         "listener is usually on 5671");
    }
    if (!b->tls.enabled)
        return conf_warn_plain(ctx, conf_own_group(grp, "broker"), path, b->host, b->hosts,
                               b->n_hosts, "the broker password and every message");
    return 0;
}

int conf_check_broker_tls(conf_ctx_t *ctx, const config_setting_t *grp, void *base,
                          const char *path)
{
    conf_broker_tls_t *t = base;
    const config_setting_t *own = conf_own_group(grp, "tls");
    char sp[CONF_PATH_MAX];

    if (conf_check_key_pair(ctx, grp, path, t->cert_file, t->key_file) < 0)
        return -1;
    if (!t->enabled)
        return conf_check_tls_off(ctx, own, path);
    if (t->verify_peer && !t->ca_file) {
        conf_path(sp, path, "ca_file");
        return conf_error(ctx, grp, sp,
                          "required when verify_peer is true (rabbitmq-c does not read the "
                          "system's CA store)");
    }
    if (conf_check_key_mode(ctx, own, path, t->key_file) < 0)
        return -1;
    if (!t->verify_peer &&
        conf_warn_check_off(ctx, grp, own, path, "verify_peer",
                            "false: any certificate is accepted, so anyone on the path can pose "
                            "as the broker") < 0)
        return -1;
    if (!t->verify_hostname &&
        conf_warn_check_off(ctx, grp, own, path, "verify_hostname",
                            "false: a certificate issued to any other name is accepted") < 0)
        return -1;
    return 0;
}

int conf_check_database(conf_ctx_t *ctx, const config_setting_t *grp, void *base, const char *path)
{
    static const char *const excl[] = {"host", "socket", NULL};
    conf_database_t *db = base;
    const config_setting_t *own = conf_own_group(grp, "database");
    char sp[CONF_PATH_MAX];

    if (conf_check_inline_password(ctx, own, path) < 0 ||
        conf_check_hosts(ctx, own, path, db->hosts, db->n_hosts, excl) < 0)
        return -1;
    if (db->tls.enabled && db->socket) {
        const config_setting_t *tls = own ? config_setting_get_member(own, "tls") : NULL;
        const config_setting_t *en = tls ? config_setting_get_member(tls, "enabled") : NULL;
        conf_path(sp, path, "tls.enabled");
        return conf_error(
            ctx, en ? en : grp, sp,
            "cannot be used with socket (line %d): TLS runs over TCP to host:port",
            (int)config_setting_source_line(config_setting_get_member(own, "socket")));
    }
    if (!db->socket && !db->tls.enabled)
        return conf_warn_plain(ctx, own, path, db->host, db->hosts, db->n_hosts,
                               "the database password, the handlers' statements and their data");
    return 0;
}

int conf_check_database_tls(conf_ctx_t *ctx, const config_setting_t *grp, void *base,
                            const char *path)
{
    conf_database_tls_t *t = base;
    const config_setting_t *own = conf_own_group(grp, "tls");

    if (conf_check_key_pair(ctx, grp, path, t->cert_file, t->key_file) < 0)
        return -1;
    if (!t->enabled)
        return conf_check_tls_off(ctx, own, path);
    if (conf_check_key_mode(ctx, own, path, t->key_file) < 0)
        return -1;
    if (!t->verify_server_cert)
        return conf_warn_check_off(
            ctx, grp, own, path, "verify_server_cert",
            t->ca_file ? "false: the chain is still checked against ca_file, but a certificate "
                         "issued to any other name is accepted"
                       : "false and no ca_file: the server's certificate is not checked at all, "
                         "so anyone on the path can pose as the server");
    return 0;
}
