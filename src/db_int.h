/* db_int.h: what db.c shares with db_sql.c; not part of db.h's API. */
#ifndef IDEMD_DB_INT_H
#define IDEMD_DB_INT_H

#include "db.h"

/*
 * Prepare a statement whose two parameters are (consumer, msg_id), bound to
 * db's buffers. Returns the statement (the caller closes it), or NULL (logged).
 */
MYSQL_STMT *db_prepare_key_stmt(db_t *db, const char *sql);

/* Execute a (consumer, msg_id) statement for id (borrowed). Returns the classified status
 * (logged, but for DB_DUPLICATE). */
db_status_t db_key_exec(db_t *db, MYSQL_STMT *stmt, const char *what, const char *id, size_t len);

/* db_gr.c: what a server just connected is to idemd's writes. */
typedef struct db_gr {
    bool running;         /* this server is a member of a running Group Replication group */
    int members, online;  /* the group's members, and how many are ONLINE */
    char state[24];       /* this member's MEMBER_STATE (ONLINE, RECOVERING, ...) */
    char role[24];        /* its MEMBER_ROLE (PRIMARY, SECONDARY) */
    char primary[300];    /* "host:port" of another member that is the ONLINE PRIMARY, or "" */
    char consistency[40]; /* the session's group_replication_consistency */
} db_gr_t;

#define DB_GR_ELSEWHERE 1 /* db_gr_check: connected, but idemd must not write here */

/*
 * After connecting (autocommit off, no transaction open): may idemd write
 * on this server? Not when it is read-only (read_only or super_read_only),
 * nor when it is a Group Replication member other than the ONLINE PRIMARY
 * (gr->primary then names the primary when the group knows one). On a
 * primary whose group runs with consistency EVENTUAL, the session is raised
 * to BEFORE_ON_PRIMARY_FAILOVER, or refused unless
 * cfg->group_replication_allow_eventual. Leaves no transaction open.
 * Returns 0 (write here); DB_GR_ELSEWHERE (logged at info); -1 when the
 * connection was lost (logged); DB_OPEN_REFUSED with the reason in refused
 * (logged when refused is NULL).
 */
int db_gr_check(db_t *db, const conf_database_t *cfg, const char *where, db_gr_t *gr, char *refused,
                size_t refused_len) __attribute__((warn_unused_result));

#endif
