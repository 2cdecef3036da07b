/* db_open.c: connecting to the MySQL/MariaDB server: TLS, the host list and failover, version and
 * session checks, whether it takes idemd's writes (db_gr.c), how its transaction ends (db_txn.c).
 */
#include "db.h"

#include <errmsg.h>
#include <mysqld_error.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "db_int.h"
#include "delivery.h"
#include "log.h"
#include "version.h"

/*
 * The two client libraries (docs/compat.md). MariaDB Connector/C defines
 * LIBMARIADB in its mysql.h; Oracle's libmysqlclient does not. Their
 * boolean options take my_bool (char) and bool respectively.
 */
#ifdef LIBMARIADB
#include <mariadb_version.h>
typedef my_bool db_opt_bool_t;
#else
typedef bool db_opt_bool_t;
#endif

/* Prepare the record insert for this connection. Returns 0 or -1 (logged). */
static int db_prepare_record(db_t *db, const char *table)
{
    char sql[256];
    snprintf(sql, sizeof(sql), "INSERT INTO `%s` (consumer, msg_id) VALUES (?, ?)", table);
    db->record_stmt = db_prepare_key_stmt(db, sql);
    return db->record_stmt ? 0 : -1;
}

/* "host:port", "socket PATH", with " (TLS)" when TLS is on: for logs. */
static const char *db_where(const conf_database_t *cfg, char *buf, size_t len)
{
    if (cfg->socket)
        snprintf(buf, len, "socket %s", cfg->socket);
    else
        snprintf(buf, len, "%s:%d%s", cfg->host, cfg->port, cfg->tls.enabled ? " (TLS)" : "");
    return buf;
}

/*
 * TLS options from cfg->tls. TCP even for "localhost", TLS 1.2 or newer.
 * With tls.enabled = false, no TLS on either library: Oracle's
 * libmysqlclient would otherwise negotiate it on its own (its default SSL
 * mode is PREFERRED). 0, or -1 after logging.
 */
#ifdef LIBMARIADB
#if MARIADB_PACKAGE_VERSION_ID >= 30400
/*
 * Connector/C 3.4 checks the server's host name whenever it checks the
 * chain, and MYSQL_OPT_SSL_VERIFY_SERVER_CERT = 0 does not turn that off
 * alone (Debian 13: "Hostname verification failed" with it off and a CA
 * set). With tls.verify_server_cert = false and a ca_file, idemd promises
 * the chain checked and the host name not: this verification callback
 * (MARIADB_OPT_TLS_VERIFICATION_CALLBACK, 3.4+) replaces the library's and
 * accepts the server when OpenSSL verified its chain against ca_file during
 * the handshake (the library's handshake callback records every error and
 * goes on, so the verify result holds the last one). The library hands its
 * MARIADB_TLS, whose public fields start data, pvio, ssl (ma_tls.h, which
 * needs headers Debian does not ship): the prefix is declared here.
 * 0 accepts, 1 refuses.
 */
struct db_ma_tls_prefix {
    void *data;
    void *pvio;
    SSL *ssl;
};

static int db_tls_chain_only(void *ctls, unsigned int flags)
{
    const struct db_ma_tls_prefix *t = ctls;
    X509 *cert;
    (void)flags;
    if (t == NULL || t->ssl == NULL || (cert = SSL_get1_peer_certificate(t->ssl)) == NULL)
        return 1;
    X509_free(cert);
    return SSL_get_verify_result(t->ssl) == X509_V_OK ? 0 : 1;
}
#endif

/* Connector/C: enforce, verify as tls.* says, an empty key passphrase so that an encrypted key
 * fails instead of OpenSSL prompting. */
static int db_set_tls_lib(MYSQL *my, const conf_database_tls_t *t)
{
    db_opt_bool_t on = 1, verify = t->verify_server_cert ? 1 : 0;
    int bad = 0;

    bad |= mysql_options(my, MYSQL_OPT_SSL_ENFORCE, &on);
    bad |= mysql_options(my, MYSQL_OPT_SSL_VERIFY_SERVER_CERT, &verify);
    bad |= mysql_options(my, MARIADB_OPT_TLS_PASSPHRASE, "");
#if MARIADB_PACKAGE_VERSION_ID >= 30400
    if (t->ca_file && !t->verify_server_cert) {
        verify = 1; /* the library then calls the callback, which checks the chain only */
        bad |= mysql_options(my, MYSQL_OPT_SSL_VERIFY_SERVER_CERT, &verify);
        bad |= mysql_optionsv(my, MARIADB_OPT_TLS_VERIFICATION_CALLBACK, (void *)db_tls_chain_only);
    }
#endif
    return bad;
}

/* Connector/C with TLS off: nothing to set (it starts TLS only when asked). */
static int db_set_no_tls(MYSQL *my)
{
    (void)my;
    return 0;
}
#else
/*
 * libmysqlclient: one SSL mode says it all. VERIFY_IDENTITY checks chain
 * and host name, VERIFY_CA the chain against ca_file only, REQUIRED
 * encrypts without checking. Without ca_file the chain is checked against
 * OpenSSL's default CA directory (the system's store), as Connector/C does.
 */
static int db_set_tls_lib(MYSQL *my, const conf_database_tls_t *t)
{
    unsigned int mode = t->verify_server_cert ? SSL_MODE_VERIFY_IDENTITY
                        : t->ca_file          ? SSL_MODE_VERIFY_CA
                                              : SSL_MODE_REQUIRED;
    int bad = mysql_options(my, MYSQL_OPT_SSL_MODE, &mode);
    if (t->verify_server_cert && !t->ca_file)
        bad |= mysql_options(my, MYSQL_OPT_SSL_CAPATH, X509_get_default_cert_dir());
    return bad;
}

static int db_set_no_tls(MYSQL *my)
{
    unsigned int mode = SSL_MODE_DISABLED;
    return mysql_options(my, MYSQL_OPT_SSL_MODE, &mode);
}
#endif

static int db_set_tls(MYSQL *my, const conf_database_t *cfg, const char *where)
{
    const conf_database_tls_t *t = &cfg->tls;
    unsigned int proto = MYSQL_PROTOCOL_TCP;
    int bad = 0;

    if (!t->enabled) {
        if (db_set_no_tls(my) != 0) {
            log_error("database %s: the client library refused to turn TLS off", where);
            return -1;
        }
        return 0;
    }
    bad |= mysql_options(my, MYSQL_OPT_PROTOCOL, &proto);
    bad |= db_set_tls_lib(my, t);
    bad |= mysql_options(my, MYSQL_OPT_TLS_VERSION, "TLSv1.2,TLSv1.3");
    if (t->ca_file)
        bad |= mysql_options(my, MYSQL_OPT_SSL_CA, t->ca_file);
    if (t->cert_file) {
        bad |= mysql_options(my, MYSQL_OPT_SSL_CERT, t->cert_file);
        bad |= mysql_options(my, MYSQL_OPT_SSL_KEY, t->key_file);
    }
    if (bad) {
        log_error("database %s: TLS: the client library refused a TLS option (built without "
                  "TLS?)",
                  where);
        return -1;
    }
    return 0;
}

/*
 * The options every connection gets: timeouts (read and write as given),
 * no LOAD DATA LOCAL (a hostile server would read our files), utf8mb4,
 * TCP unless a socket is named, the server's RSA key on request. Never a
 * silent reconnect: idemd reconnects itself (a library reconnect
 * mid-transaction would run the rest in autocommit). Connector/C is told
 * so; libmysqlclient reconnects only when asked and warns on stderr when
 * the option is set at all (deprecated in 8.0.34), so it is left alone.
 */
static void db_set_common(MYSQL *my, const conf_database_t *cfg, unsigned rw_timeout, bool tcp)
{
    unsigned int t = (unsigned)cfg->connect_timeout, no_local = 0, proto = MYSQL_PROTOCOL_TCP;

    mysql_options(my, MYSQL_OPT_CONNECT_TIMEOUT, &t);
    t = rw_timeout ? rw_timeout : (unsigned)cfg->read_timeout;
    mysql_options(my, MYSQL_OPT_READ_TIMEOUT, &t);
    t = rw_timeout ? rw_timeout : (unsigned)cfg->write_timeout;
    mysql_options(my, MYSQL_OPT_WRITE_TIMEOUT, &t);
#ifdef LIBMARIADB
    db_opt_bool_t off = 0;
    mysql_options(my, MYSQL_OPT_RECONNECT, &off);
#endif
    /* (Both libraries read this option as an unsigned int.) */
    mysql_options(my, MYSQL_OPT_LOCAL_INFILE, &no_local);
    mysql_options(my, MYSQL_SET_CHARSET_NAME, "utf8mb4");
    if (tcp) /* the libraries take host "localhost" as their default unix socket */
        mysql_options(my, MYSQL_OPT_PROTOCOL, &proto);
#ifndef LIBMARIADB
    if (cfg->get_server_public_key) {
        db_opt_bool_t on = true;
        mysql_options(my, MYSQL_OPT_GET_SERVER_PUBLIC_KEY, &on);
    }
#endif
}

/* The session's TLS version as the server reports it (Ssl_version: both servers, both
 * libraries), in buf; "?" when it cannot be read. Leaves no transaction open. */
static const char *db_tls_version(MYSQL *my, char *buf, size_t len)
{
    MYSQL_RES *res = NULL;
    MYSQL_ROW row;

    snprintf(buf, len, "?");
    if (mysql_query(my, "SHOW SESSION STATUS LIKE 'Ssl_version'") == 0 &&
        (res = mysql_store_result(my)) != NULL && (row = mysql_fetch_row(res)) != NULL && row[1])
        snprintf(buf, len, "%s", row[1]);
    if (res)
        mysql_free_result(res);
    return buf;
}

/* After connecting with tls.enabled: refuse a session that is not encrypted
 * (Connector/C carries on in plain text when the server offers no TLS and
 * verify_server_cert is off). 0 or -1 (logged). */
static int db_check_tls(db_t *db, const conf_database_t *cfg, const char *where)
{
    const char *cipher, *version;
    char vbuf[32];

    if (!cfg->tls.enabled)
        return 0;
    if ((cipher = mysql_get_ssl_cipher(db->my)) == NULL) {
        log_error("database %s: TLS: the server did not start TLS (it offers none?); refusing "
                  "the unencrypted session because tls.enabled is true",
                  where);
        return -1;
    }
    version = db_tls_version(db->my, vbuf, sizeof(vbuf));
    log_debug("database %s: TLS %s, cipher %s, server certificate %s", where, version, cipher,
              cfg->tls.verify_server_cert ? "verified (chain and host name)"
              : cfg->tls.ca_file          ? "chain verified, host name not checked"
                                          : "NOT verified");
    return 0;
}

/*
 * Hold the server's version (mysql_get_server_info: MariaDB or MySQL by
 * its text) against the oldest idemd supports. 0; or -1 when it is older:
 * the reason goes to refused (the caller reports it), or is logged when
 * refused is NULL. A version we cannot read is warned about and used.
 */
static int db_check_version(db_t *db, const char *where, char *refused, size_t refused_len)
{
    const char *info = mysql_get_server_info(db->my);
    version_server_t flavour = version_db_flavour(info);
    char msg[400], qv[200];
    version_t min;

    version_minimum(flavour, &min);
    switch (version_check(flavour, info, &min, msg, sizeof(msg))) {
    case VERSION_OK:
        log_debug("database %s: %s %s", where, version_server_name(flavour),
                  log_quote_str(info, qv, sizeof(qv)));
        return 0;
    case VERSION_UNKNOWN:
        log_warn("database %s: %s", where, msg);
        return 0;
    case VERSION_TOO_OLD:
        break;
    }
    if (refused)
        snprintf(refused, refused_len, "database %s: %s", where, msg);
    else
        log_error("database %s: %s", where, msg);
    return -1;
}

/*
 * Read and log the server settings the protocol depends on, and keep the
 * session's lock waits well under the client's read timeout: a record
 * INSERT waiting for another transaction's key must end as 1205 (that
 * message is retried), not as a 2013 read timeout (the worker dies and its
 * whole prefetch comes back). 0, or -1 (logged).
 */
static int db_session(db_t *db, const conf_database_t *cfg, const char *where)
{
    static const char *q[] = {
        "SELECT @@innodb_lock_wait_timeout, @@innodb_rollback_on_timeout, @@tx_isolation, "
        "@@autocommit, @@wait_timeout, @@max_connections",
        "SELECT @@innodb_lock_wait_timeout, @@innodb_rollback_on_timeout, "
        "@@transaction_isolation, @@autocommit, @@wait_timeout, @@max_connections", /* MySQL 8 */
    };
    MYSQL_RES *res = NULL;
    MYSQL_ROW row = NULL;
    char sql[96];
    long lock_wait, want = cfg->read_timeout / 2 > 0 ? cfg->read_timeout / 2 : 1;

    for (size_t i = 0; i < sizeof(q) / sizeof(q[0]) && res == NULL; i++) {
        if (mysql_query(db->my, q[i]) == 0)
            res = mysql_store_result(db->my);
        else if (mysql_errno(db->my) != ER_UNKNOWN_SYSTEM_VARIABLE)
            break; /* not a name MySQL 8 spells otherwise (1047 on a non-Primary Galera node) */
    }
    if (res == NULL || (row = mysql_fetch_row(res)) == NULL || !row[0] || !row[2]) {
        log_error("database %s: cannot read the server's settings: %s", where, mysql_error(db->my));
        goto fail;
    }
    lock_wait = atol(row[0]);
    db->max_connections = row[5] ? atoi(row[5]) : 0; /* for workers = "auto" */
    bool rot = row[1] && (atoi(row[1]) == 1 || strcasecmp(row[1], "ON") == 0);
    if (lock_wait > want) {
        snprintf(sql, sizeof(sql), "SET SESSION innodb_lock_wait_timeout = %ld", want);
        if (mysql_query(db->my, sql) != 0) {
            log_error("database %s: '%s': %s", where, sql, mysql_error(db->my));
            goto fail;
        }
        lock_wait = want;
    }
    log_info("database %s: isolation %s, autocommit %s, innodb_rollback_on_timeout %s, lock "
             "wait %ld s (read_timeout %d s), wait_timeout %s s",
             where, row[2], row[3] ? row[3] : "?", rot ? "ON" : "OFF", lock_wait, cfg->read_timeout,
             row[4] ? row[4] : "?");
    if (strcmp(row[2], "READ-COMMITTED") != 0)
        log_warn("database %s: isolation is %s, not READ-COMMITTED", where, row[2]);
    mysql_free_result(res);
    res = NULL;
    /* A Galera node (MariaDB Galera Cluster, Percona XtraDB Cluster); MySQL has no such
     * variable: not one. */
    db->galera = false;
    if (mysql_query(db->my, "SELECT @@wsrep_on") == 0 && (res = mysql_store_result(db->my))) {
        if ((row = mysql_fetch_row(res)) != NULL && row[0] &&
            (strcmp(row[0], "1") == 0 || strcasecmp(row[0], "ON") == 0))
            db->galera = true;
        mysql_free_result(res);
        res = NULL;
    }
    if (db->galera)
        log_info("database %s: a Galera node (wsrep_on)", where);
    /* The SELECT opened a transaction (autocommit is off): end it. */
    if (mysql_query(db->my, "ROLLBACK") != 0) {
        log_error("database %s: ROLLBACK: %s", where, mysql_error(db->my));
        return -1;
    }
    return 0;
fail:
    if (res)
        mysql_free_result(res);
    return -1;
}

/*
 * Connect to the one server cfg names (host, port or socket). See db_open;
 * besides its returns, DB_GR_ELSEWHERE when the server takes no writes
 * (read-only, or a Group Replication member that is not the primary: gr
 * then says where the primary is, when the group knows).
 */
static int db_open_one(const conf_database_t *cfg, const char *consumer, bool record, char *refused,
                       size_t refused_len, db_gr_t *gr, db_t **out)
{
    char where[300], qe[600];
    db_t *db = calloc(1, sizeof(*db));
    int rc = -1, w;

    *out = NULL;
    if (db == NULL || (db->my = mysql_init(NULL)) == NULL) {
        log_error("database: out of memory");
        goto fail;
    }
    db_set_common(db->my, cfg, 0, cfg->socket == NULL);
    mysql_options(db->my, MYSQL_INIT_COMMAND,
                  "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED");
    db_where(cfg, where, sizeof(where));
    if (db_set_tls(db->my, cfg, where) != 0)
        goto fail;
    if (mysql_real_connect(db->my, cfg->socket ? NULL : cfg->host, cfg->user, cfg->password,
                           cfg->database, cfg->socket ? 0 : (unsigned)cfg->port, cfg->socket,
                           0) == NULL) {
        if (cfg->tls.enabled && mysql_errno(db->my) == CR_SSL_CONNECTION_ERROR)
            log_error("database %s: TLS: cannot connect as %s: %s (tls.ca_file %s, "
                      "tls.verify_server_cert %s)",
                      where, cfg->user, log_quote_str(mysql_error(db->my), qe, sizeof(qe)),
                      cfg->tls.ca_file ? cfg->tls.ca_file : "none: the system's CA store",
                      cfg->tls.verify_server_cert ? "true" : "false");
        else if (!cfg->tls.enabled && !cfg->socket && !cfg->get_server_public_key &&
                 mysql_errno(db->my) == CR_AUTH_PLUGIN_ERR)
            /* MySQL's caching_sha2_password sends a password over plain TCP only encrypted
             * with the server's RSA key, once the server forgot the account's last login
             * (a restart, FLUSH PRIVILEGES). */
            log_error("database %s: cannot connect as %s: %s (the account's authentication "
                      "plugin needs a secure connection for a password: set database.tls "
                      "(docs/tls.md), connect over database.socket, or allow "
                      "database.get_server_public_key = true)",
                      where, cfg->user, log_quote_str(mysql_error(db->my), qe, sizeof(qe)));
        else
            log_error("database %s: cannot connect as %s: %s", where, cfg->user,
                      log_quote_str(mysql_error(db->my), qe, sizeof(qe)));
        goto fail;
    }
    /* Connector/C keeps a copy of the password in the handle (for a reconnect we
     * never let it do): wipe it. */
    if (db->my->passwd)
        explicit_bzero(db->my->passwd, strlen(db->my->passwd));
    snprintf(db->host, sizeof(db->host), "%s", cfg->socket || !cfg->host ? "" : cfg->host);
    db->port = cfg->socket ? 0 : (unsigned)cfg->port;
    if (db_check_tls(db, cfg, where) != 0)
        goto fail;
    if (db_check_version(db, where, refused, refused_len) != 0) {
        rc = DB_OPEN_REFUSED;
        goto fail;
    }
    if (mysql_autocommit(db->my, 0) != 0) {
        log_error("database: cannot turn autocommit off: %s", mysql_error(db->my));
        goto fail;
    }
    if (db_session(db, cfg, where) != 0)
        goto fail;
    if ((w = db_gr_check(db, cfg, where, gr, refused, refused_len)) != 0) {
        rc = w;
        goto fail;
    }
    if (db_txn_probe(db, cfg, where) != 0)
        goto fail;
    if (consumer != NULL) {
        size_t n = strlen(consumer);
        if (n >= sizeof(db->consumer)) {
            log_error("database: consumer name '%s' is longer than %zu bytes", consumer,
                      sizeof(db->consumer) - 1);
            goto fail;
        }
        memcpy(db->consumer, consumer, n);
        db->consumer_len = (unsigned long)n;
        snprintf(db->record_table, sizeof(db->record_table), "%s", cfg->record_table);
        if (record && db_prepare_record(db, cfg->record_table) != 0)
            goto fail;
    }
    *out = db;
    return 0;
fail:
    db_close(db);
    return rc;
}

/* The index of the hosts entry that names the server at "host:port" (a Group Replication
 * member's MEMBER_HOST and MEMBER_PORT), or -1. */
static int db_host_index(const conf_database_t *cfg, const char *addr)
{
    char want[256], host[256];
    int want_port, port;

    if (addr[0] == '\0' || conf_endpoint(addr, cfg->port, want, sizeof(want), &want_port) != 0)
        return -1;
    for (int i = 0; i < cfg->n_hosts; i++)
        if (conf_endpoint(cfg->hosts[i], cfg->port, host, sizeof(host), &port) == 0 &&
            port == want_port && strcasecmp(host, want) == 0)
            return i;
    return -1;
}

int db_open(const conf_database_t *cfg, const char *consumer, bool record, int start, char *refused,
            size_t refused_len, db_t **out)
{
    int n = cfg->n_hosts > 0 ? cfg->n_hosts : 1, n_refused = 0, n_elsewhere = 0, rc, next = -1;
    bool tried[n];
    db_gr_t gr;

    *out = NULL;
    if (cfg->n_hosts == 0) {
        if ((rc = db_open_one(cfg, consumer, record, refused, refused_len, &gr, out)) !=
            DB_GR_ELSEWHERE)
            return rc;
        log_error("database: the one server configured takes no writes now; for a Group "
                  "Replication group list its members in database.hosts, and idemd keeps to "
                  "the primary");
        return DB_OPEN_NO_PRIMARY;
    }
    memset(tried, 0, sizeof(tried));
    start = start < 0 ? 0 : start % n;
    for (int k = 0; k < n; k++) {
        conf_database_t one = *cfg;
        /* The primary a secondary named, when it is one of ours, else the next in turn. */
        int i = next >= 0 && !tried[next] ? next : (start + k) % n;
        for (int j = 0; tried[i] && j < n; j++)
            i = (i + 1) % n;
        tried[i] = true;
        const char *spec = cfg->hosts[i];
        char host[256];
        if (conf_endpoint(spec, cfg->port, host, sizeof(host), &one.port) != 0) {
            log_error("database: malformed hosts entry \"%s\"", spec);
            continue;
        }
        one.host = host;
        one.socket = NULL;
        rc = db_open_one(&one, consumer, record, refused, refused_len, &gr, out);
        if (rc == 0)
            return 0;
        n_refused += rc == DB_OPEN_REFUSED;
        n_elsewhere += rc == DB_GR_ELSEWHERE;
        next = rc == DB_GR_ELSEWHERE ? db_host_index(cfg, gr.primary) : -1;
        if (k + 1 < n)
            log_info("database: trying the %s of %d hosts",
                     next >= 0 && !tried[next] ? "primary" : "next", n);
    }
    /* Every server answered, and those that take writes were refused (too old, or a Group
     * Replication primary with a consistency idemd may not use). */
    if (n_refused > 0 && n_refused + n_elsewhere == n)
        return DB_OPEN_REFUSED;
    /* Some servers down, some refused: a temporary failure, but say why the refused ones were
     * not used. */
    if (n_refused > 0 && refused)
        log_error("%s", refused);
    if (n_elsewhere > 0) {
        log_warn("database: no writable primary among the %d hosts (%d took no writes)", n,
                 n_elsewhere);
        return DB_OPEN_NO_PRIMARY;
    }
    return -1;
}

MYSQL *db_probe_open(const db_t *db, const conf_database_t *cfg, char *err, size_t errlen)
{
    MYSQL *my = mysql_init(NULL);
    bool tcp = db->host[0] != '\0';
    char where[300];

    if (my == NULL) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    db_set_common(my, cfg, DB_PROBE_TIMEOUT, tcp);
    snprintf(where, sizeof(where), "%s:%u", tcp ? db->host : "socket", db->port);
    if (db_set_tls(my, cfg, where) != 0) {
        snprintf(err, errlen, "TLS options refused");
        goto fail;
    }
    if (mysql_real_connect(my, tcp ? db->host : NULL, cfg->user, cfg->password, cfg->database,
                           tcp ? db->port : 0, tcp ? NULL : cfg->socket, 0) == NULL) {
        snprintf(err, errlen, "cannot connect: %s", mysql_error(my));
        goto fail;
    }
    if (my->passwd)
        explicit_bzero(my->passwd, strlen(my->passwd));
    if (cfg->tls.enabled && mysql_get_ssl_cipher(my) == NULL) {
        snprintf(err, errlen, "the server did not start TLS");
        goto fail;
    }
    return my;
fail:
    if (my)
        mysql_close(my);
    return NULL;
}
