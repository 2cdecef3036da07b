/* db_gr.c: whether a server just connected takes idemd's writes: read-only or not, a MySQL Group
 * Replication primary or not (and where the primary is), the group's consistency level.
 */
#include <mysqld_error.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "db.h"
#include "db_int.h"
#include "log.h"

/* The one statement that reads the group: every member, and which row is this server. */
#define DB_GR_MEMBERS                                                                              \
    "SELECT MEMBER_HOST, MEMBER_PORT, MEMBER_STATE, MEMBER_ROLE, MEMBER_ID = @@server_uuid "       \
    "FROM performance_schema.replication_group_members"

/* An error of the last statement that loses the connection (then -1), or any other (0). */
static int db_gr_lost(db_t *db, const char *where, const char *what)
{
    char qe[600];
    unsigned e = mysql_errno(db->my);
    if (db_classify(e) != DB_ERR_CONNECTION)
        return 0;
    log_error("database %s: %s: error %u: %s", where, what, e,
              log_quote_str(mysql_error(db->my), qe, sizeof(qe)));
    return -1;
}

/*
 * Read the group's members. Sets gr->running when this server is a member
 * of a running group (its row is there and not OFFLINE), its own state and
 * role, and the address of an ONLINE PRIMARY other than itself. A server
 * without the plugin (no @@group_replication_group_name: MariaDB, or MySQL
 * without it) is not asked; one whose user may not read the table is not
 * taken for a member (said once: the read-only check still keeps idemd off
 * a secondary). 0, or -1 when the connection was lost (logged).
 */
static int db_gr_members(db_t *db, const char *where, db_gr_t *gr)
{
    static bool told;
    MYSQL_RES *res = NULL;
    MYSQL_ROW row;
    char qe[600];

    memset(gr, 0, sizeof(*gr));
    /* Any user may read a variable; performance_schema needs a grant: ask it only of a server
     * with the plugin. */
    if (mysql_query(db->my, "SELECT @@global.group_replication_group_name") != 0)
        return db_gr_lost(db, where, "reading @@group_replication_group_name");
    if ((res = mysql_store_result(db->my)) != NULL)
        mysql_free_result(res);
    res = NULL;
    if (mysql_query(db->my, DB_GR_MEMBERS) != 0 || (res = mysql_store_result(db->my)) == NULL) {
        if (db_gr_lost(db, where, "reading performance_schema.replication_group_members") != 0)
            return -1;
        if (mysql_errno(db->my) != ER_NO_SUCH_TABLE && !told) {
            told = true;
            log_warn("database %s: cannot read performance_schema.replication_group_members "
                     "(%s): a Group Replication primary is then found by read_only alone; "
                     "grant SELECT on it to idemd's user",
                     where, log_quote_str(mysql_error(db->my), qe, sizeof(qe)));
        }
        return 0;
    }
    while ((row = mysql_fetch_row(res)) != NULL) {
        bool self = row[4] && strcmp(row[4], "1") == 0;
        bool online = row[2] && strcmp(row[2], "ONLINE") == 0;
        bool primary = row[3] && strcmp(row[3], "PRIMARY") == 0;
        gr->members++;
        gr->online += online;
        if (self) {
            gr->running = row[2] && strcmp(row[2], "OFFLINE") != 0 && row[2][0] != '\0';
            snprintf(gr->state, sizeof(gr->state), "%s", row[2] ? row[2] : "?");
            snprintf(gr->role, sizeof(gr->role), "%s", row[3] && row[3][0] ? row[3] : "none");
        } else if (online && primary && row[0]) {
            snprintf(gr->primary, sizeof(gr->primary), "%s:%s", row[0], row[1] ? row[1] : "3306");
        }
    }
    mysql_free_result(res);
    return 0;
}

/*
 * @@read_only and (MySQL) @@super_read_only: *ro is set when either is on,
 * naming it in which. 0, or -1 when the connection was lost (logged); a
 * value that cannot be read is taken as writable.
 */
static int db_gr_read_only(db_t *db, const char *where, bool *ro, const char **which)
{
    static const char *q[] = {"SELECT @@global.read_only, @@global.super_read_only",
                              "SELECT @@global.read_only, 0"}; /* MariaDB: no super_read_only */
    MYSQL_RES *res = NULL;
    MYSQL_ROW row;

    *ro = false;
    *which = "";
    for (size_t i = 0; i < sizeof(q) / sizeof(q[0]) && res == NULL; i++) {
        if (mysql_query(db->my, q[i]) == 0)
            res = mysql_store_result(db->my);
        else if (db_gr_lost(db, where, "reading @@read_only") != 0)
            return -1;
        else if (mysql_errno(db->my) != ER_UNKNOWN_SYSTEM_VARIABLE)
            break;
    }
    if (res == NULL)
        return 0;
    if ((row = mysql_fetch_row(res)) != NULL) {
        if (row[1] && strcmp(row[1], "1") == 0)
            *which = "super_read_only";
        else if (row[0] && strcmp(row[0], "1") == 0)
            *which = "read_only";
        *ro = (*which)[0] != '\0';
    }
    mysql_free_result(res);
    return 0;
}

/*
 * A running group's consistency: EVENTUAL lets a new primary answer before
 * it applied the old one's backlog, so a record committed there just
 * before a failover could be read as missing. Raised on this session to
 * BEFORE_ON_PRIMARY_FAILOVER (the default from 8.4); when the server
 * refuses that, the session is kept only with
 * cfg->group_replication_allow_eventual. Called with no transaction open.
 * 0; -1 when the connection was lost (logged); DB_OPEN_REFUSED with the
 * reason in refused (or logged when refused is NULL).
 */
static int db_gr_consistency(db_t *db, const conf_database_t *cfg, const char *where, db_gr_t *gr,
                             char *refused, size_t refused_len)
{
    MYSQL_RES *res = NULL;
    MYSQL_ROW row;
    char qe[600];

    snprintf(gr->consistency, sizeof(gr->consistency), "?");
    if (mysql_query(db->my, "SELECT @@SESSION.group_replication_consistency") == 0 &&
        (res = mysql_store_result(db->my)) != NULL && (row = mysql_fetch_row(res)) != NULL &&
        row[0])
        snprintf(gr->consistency, sizeof(gr->consistency), "%s", row[0]);
    if (res)
        mysql_free_result(res);
    if (db_gr_lost(db, where, "reading @@group_replication_consistency") != 0)
        return -1;
    if (mysql_query(db->my, "ROLLBACK") != 0)
        return db_gr_lost(db, where, "ROLLBACK") != 0 ? -1 : 0;
    if (strcasecmp(gr->consistency, "EVENTUAL") != 0 && strcmp(gr->consistency, "0") != 0)
        return 0;
    if (mysql_query(db->my, "SET SESSION group_replication_consistency = "
                            "'BEFORE_ON_PRIMARY_FAILOVER'") == 0) {
        log_info("database %s: group_replication_consistency EVENTUAL raised to "
                 "BEFORE_ON_PRIMARY_FAILOVER on idemd's session (a new primary applies the old "
                 "one's transactions before it answers)",
                 where);
        snprintf(gr->consistency, sizeof(gr->consistency), "BEFORE_ON_PRIMARY_FAILOVER");
        return 0;
    }
    if (db_gr_lost(db, where, "SET SESSION group_replication_consistency") != 0)
        return -1;
    log_quote_str(mysql_error(db->my), qe, sizeof(qe));
    if (cfg->group_replication_allow_eventual) {
        log_warn("database %s: group_replication_consistency is EVENTUAL and the server refused "
                 "BEFORE_ON_PRIMARY_FAILOVER (%s); going on because "
                 "database.group_replication_allow_eventual is true: after a failover a record "
                 "or a handler's row may be read stale until the new primary caught up",
                 where, qe);
        return 0;
    }
    if (refused)
        snprintf(refused, refused_len,
                 "database %s: group_replication_consistency is EVENTUAL and the server refused "
                 "BEFORE_ON_PRIMARY_FAILOVER on idemd's session (%s): set it on the group "
                 "(SET PERSIST group_replication_consistency = 'BEFORE_ON_PRIMARY_FAILOVER'), "
                 "or allow database.group_replication_allow_eventual = true",
                 where, qe);
    else
        log_error("database %s: group_replication_consistency is EVENTUAL and the server refused "
                  "BEFORE_ON_PRIMARY_FAILOVER (%s); set database.group_replication_allow_eventual "
                  "= true to connect anyway",
                  where, qe);
    return DB_OPEN_REFUSED;
}

int db_gr_check(db_t *db, const conf_database_t *cfg, const char *where, db_gr_t *gr, char *refused,
                size_t refused_len)
{
    const char *which;
    bool ro;
    int rc;

    if (db_gr_members(db, where, gr) != 0 || db_gr_read_only(db, where, &ro, &which) != 0)
        return -1;
    if (mysql_query(db->my, "ROLLBACK") != 0 && db_gr_lost(db, where, "ROLLBACK") != 0)
        return -1; /* the SELECTs opened a transaction (autocommit is off) */
    if (gr->running && (strcmp(gr->role, "PRIMARY") != 0 || strcmp(gr->state, "ONLINE") != 0)) {
        log_info("database %s: a Group Replication %s member (%s), not the primary%s%s: not "
                 "writing here",
                 where, gr->role, gr->state, gr->primary[0] ? "; the primary is " : "",
                 gr->primary);
        return DB_GR_ELSEWHERE;
    }
    if (ro) {
        log_info("database %s: the server is read-only (%s = ON)%s: not writing here", where, which,
                 gr->running ? " though the group calls it its primary" : "");
        return DB_GR_ELSEWHERE;
    }
    if (!gr->running)
        return 0;
    if ((rc = db_gr_consistency(db, cfg, where, gr, refused, refused_len)) != 0)
        return rc;
    log_info("database %s: the Group Replication primary (%d of %d members ONLINE), consistency "
             "%s",
             where, gr->online, gr->members, gr->consistency);
    return 0;
}
