/* db_txn.c: idemd's transaction on a connection: an XA branch where the server refuses whatever
 * would end it, else a plain one whose end idemd sees in the server-status flags.
 */
#include <stdio.h>
#include <string.h>

#include "db.h"
#include "log.h"

/* XA START with an id no other open branch on the server has: the session's id and a count. */
static db_status_t db_xa_start(db_t *db)
{
    snprintf(db->xid, sizeof(db->xid), "'idemd.%lu.%llu'", mysql_thread_id(db->my), ++db->xa_seq);
    char sql[96];
    snprintf(sql, sizeof(sql), "XA START %s", db->xid);
    if (mysql_real_query(db->my, sql, strlen(sql)) == 0) {
        db->xa_open = true;
        return DB_OK;
    }
    db->last_errno = mysql_errno(db->my);
    return db_classify(db->last_errno);
}

/*
 * Probe whether the server runs idemd's transaction as an XA branch (sets
 * db->boundary): every server idemd supports does, but a Galera node is
 * checked instead (its XA support differs by version, and a branch is not
 * what its certification is tested with). 0, or -1 when the connection
 * was lost (logged).
 */
int db_txn_probe(db_t *db, const conf_database_t *cfg, const char *where)
{
    db->boundary = DB_BOUNDARY_CHECK;
    db->xa_open = false;
    if (cfg->transaction == CONF_TXN_CHECKED) {
        log_info("database %s: idemd's transaction is checked after each handler call "
                 "(transaction = \"checked\")",
                 where);
        return 0;
    }
    if (db->galera) {
        log_info("database %s: idemd's transaction is checked after each handler call (Galera: "
                 "no XA)",
                 where);
        return 0;
    }
    db_status_t st = db_xa_start(db);
    if (st == DB_OK) {
        db->boundary = DB_BOUNDARY_XA;
        st = db_end(db, false);
    }
    if (st == DB_ERR_CONNECTION) {
        log_error("database %s: lost while probing XA: %s", where, mysql_error(db->my));
        return -1;
    }
    if (db->boundary == DB_BOUNDARY_XA)
        log_debug("database %s: idemd's transaction is an XA branch: the server refuses what "
                  "would end it",
                  where);
    else
        log_warn("database %s: the server refused XA START (error %u: %s): idemd's transaction "
                 "is checked after each handler call instead (docs/failures.md)",
                 where, db->last_errno, mysql_error(db->my));
    return 0;
}

db_status_t db_begin(db_t *db)
{
    /* A read before the batch (the crash guard's look-up) opened a plain transaction: an XA
     * branch cannot start inside one (1400). It wrote nothing of the batch's: end it. */
    if (db->my->server_status & SERVER_STATUS_IN_TRANS) {
        db_status_t st = db_exec(db, "COMMIT");
        if (st != DB_OK)
            return st;
    }
    if (db->boundary != DB_BOUNDARY_XA)
        return db_exec(db, "START TRANSACTION");
    db_status_t st = db_xa_start(db);
    if (st == DB_OK)
        return DB_OK;
    if (db->last_errno == DB_ER_XAER_OUTSIDE && db_exec(db, "COMMIT") == DB_OK)
        st = db_xa_start(db);
    if (st != DB_OK)
        log_error("database: XA START: error %u: %s", db->last_errno, mysql_error(db->my));
    return st;
}

/* Roll back the branch whatever its state (ACTIVE, IDLE, or rolled back by the server after a
 * deadlock, 1614); DB_OK, or the connection's loss. */
static db_status_t db_xa_rollback(db_t *db)
{
    char sql[96];
    snprintf(sql, sizeof(sql), "XA END %s", db->xid);
    if (mysql_real_query(db->my, sql, strlen(sql)) != 0 &&
        db_classify(mysql_errno(db->my)) == DB_ERR_CONNECTION)
        goto lost;
    snprintf(sql, sizeof(sql), "XA ROLLBACK %s", db->xid);
    if (mysql_real_query(db->my, sql, strlen(sql)) != 0) {
        if (db_classify(mysql_errno(db->my)) == DB_ERR_CONNECTION)
            goto lost;
        /* 1397: the server let it go already. Whatever else, no branch may stay open. */
        if (mysql_errno(db->my) != DB_ER_XAER_NOTA)
            log_warn("database: XA ROLLBACK %s: error %u: %s", db->xid, mysql_errno(db->my),
                     mysql_error(db->my));
    }
    db->xa_open = false;
    return DB_OK;
lost:
    db->last_errno = mysql_errno(db->my);
    db->xa_open = false; /* the server rolls an unprepared branch back with the session */
    log_error("database: rolling back %s: error %u: %s", db->xid, db->last_errno,
              mysql_error(db->my));
    return DB_ERR_CONNECTION;
}

db_status_t db_end(db_t *db, bool commit)
{
    db_status_t st;
    char sql[96];

    if (!db->xa_open) {
        st = db_exec(db, commit ? "COMMIT" : "ROLLBACK");
        goto done;
    }
    if (!commit) {
        st = db_xa_rollback(db);
        goto done;
    }
    snprintf(sql, sizeof(sql), "XA END %s", db->xid);
    if ((st = db_exec(db, sql)) != DB_OK) {
        /* Refused (a deadlock rolled the branch back, 1614): nothing is committed. */
        if (st != DB_ERR_CONNECTION)
            (void)db_xa_rollback(db);
        db->xa_open = false;
        goto done;
    }
    snprintf(sql, sizeof(sql), "XA COMMIT %s ONE PHASE", db->xid);
    st = db_exec(db, sql); /* a lost reply leaves the outcome unknown, as COMMIT's would */
    if (st != DB_OK && st != DB_ERR_CONNECTION)
        (void)db_xa_rollback(db);
    db->xa_open = false;
done:
    /* A handler that turned autocommit on outside a branch (check mode) gets it off again:
     * idemd's next statements must not commit one by one. */
    if (st == DB_OK && (db->my->server_status & SERVER_STATUS_AUTOCOMMIT) &&
        mysql_autocommit(db->my, 0) != 0)
        st = db_classify(mysql_errno(db->my));
    return st;
}

db_boundary_t db_boundary(const db_t *db, unsigned err)
{
    if (err == DB_ER_XAER_RMFAIL || err == DB_ER_XAER_OUTSIDE)
        return DB_BOUNDARY_REFUSED;
    unsigned s = db->my->server_status;
    if ((s & SERVER_STATUS_IN_TRANS) == 0 || (s & SERVER_STATUS_AUTOCOMMIT) != 0)
        return DB_BOUNDARY_ENDED;
    return DB_BOUNDARY_HELD;
}

db_status_t db_commit(db_t *db)
{
    return db->xa_open ? db_end(db, true) : db_exec(db, "COMMIT");
}

db_status_t db_rollback(db_t *db)
{
    return db->xa_open ? db_end(db, false) : db_exec(db, "ROLLBACK");
}
