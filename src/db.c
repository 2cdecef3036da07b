/* db.c: the worker's MySQL/MariaDB connection: connect, dedup record insert, transaction control.
 */
#include "db.h"

#include <errmsg.h>
#include <mysqld_error.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "delivery.h"
#include "log.h"

db_status_t db_classify(unsigned int err)
{
    switch (err) {
    case 0:
        return DB_OK;
    case ER_DUP_ENTRY:
        return DB_DUPLICATE;
    case ER_LOCK_DEADLOCK:
        return DB_ERR_DEADLOCK;
    case ER_LOCK_WAIT_TIMEOUT:
        return DB_ERR_LOCK_TIMEOUT;
    case ER_SP_DOES_NOT_EXIST:
        return DB_ERR_TX_LOST; /* 1305: SAVEPOINT does not exist */
    case CR_SERVER_GONE_ERROR:
    case CR_SERVER_LOST:
    case CR_CONNECTION_ERROR:
    case CR_CONN_HOST_ERROR:
    case CR_SERVER_LOST_EXTENDED:
    case ER_CONNECTION_KILLED:
    case ER_SERVER_SHUTDOWN:
    case CR_COMMANDS_OUT_OF_SYNC:
        return DB_ERR_CONNECTION;
    default:
        return DB_ERR_OTHER;
    }
}

/*
 * Prepare a statement whose two parameters are (consumer, msg_id), bound to
 * db's buffers. Returns the statement, or NULL (logged).
 */
static MYSQL_STMT *db_prepare_key_stmt(db_t *db, const char *sql)
{
    MYSQL_BIND bind[2];
    MYSQL_STMT *stmt = mysql_stmt_init(db->my);
    if (stmt == NULL)
        goto fail;
    if (mysql_stmt_prepare(stmt, sql, strlen(sql)) != 0)
        goto fail;
    memset(bind, 0, sizeof(bind));
    bind[0].buffer_type = MYSQL_TYPE_BLOB;
    bind[0].buffer = db->consumer;
    bind[0].buffer_length = sizeof(db->consumer);
    bind[0].length = &db->consumer_len;
    bind[1].buffer_type = MYSQL_TYPE_BLOB;
    bind[1].buffer = db->id_buf;
    bind[1].buffer_length = sizeof(db->id_buf);
    bind[1].length = &db->id_len;
    if (mysql_stmt_bind_param(stmt, bind) != 0)
        goto fail;
    return stmt;
fail:
    log_error("database: cannot prepare '%s': %s", sql,
              stmt ? mysql_stmt_error(stmt) : mysql_error(db->my));
    if (stmt)
        mysql_stmt_close(stmt);
    return NULL;
}

/* Prepare the record insert for this connection. Returns 0 or -1 (logged). */
static int db_prepare_record(db_t *db, const char *table)
{
    char sql[256];
    snprintf(sql, sizeof(sql), "INSERT INTO `%s` (consumer, msg_id) VALUES (?, ?)", table);
    db->record_stmt = db_prepare_key_stmt(db, sql);
    return db->record_stmt ? 0 : -1;
}

/* Execute a (consumer, msg_id) statement for id. Returns the classified status (logged). */
static db_status_t db_key_exec(db_t *db, MYSQL_STMT *stmt, const char *what, const char *id,
                               size_t len)
{
    char pid[96];
    memcpy(db->id_buf, id, len);
    db->id_len = (unsigned long)len;
    if (mysql_stmt_execute(stmt) == 0)
        return DB_OK;
    unsigned int err = mysql_stmt_errno(stmt);
    db_status_t st = db_classify(err);
    if (st != DB_DUPLICATE)
        log_error("database: %s id '%s': error %u: %s", what,
                  delivery_id_printable(id, len, pid, sizeof(pid)), err, mysql_stmt_error(stmt));
    return st;
}

long long db_attempt_bump(db_t *db, const char *id, size_t len)
{
    /* LAST_INSERT_ID(expr) hands the new count back without a SELECT. */
    if (db->bump_stmt == NULL &&
        (db->bump_stmt = db_prepare_key_stmt(
             db, "INSERT INTO " DB_ATTEMPT_TABLE " (consumer, msg_id, attempts) VALUES (?, ?, 1) "
                 "ON DUPLICATE KEY UPDATE attempts = LAST_INSERT_ID(attempts + 1)")) == NULL)
        return -1;
    if (db_key_exec(db, db->bump_stmt, "counting an attempt of", id, len) != DB_OK)
        return -1;
    my_ulonglong n = mysql_stmt_insert_id(db->bump_stmt);
    if (db_commit(db) != DB_OK)
        return -1;
    return n == 0 ? 1 : (long long)n;
}

db_status_t db_attempt_clear(db_t *db, const char *id, size_t len)
{
    if (db->clear_stmt == NULL &&
        (db->clear_stmt = db_prepare_key_stmt(db, "DELETE FROM " DB_ATTEMPT_TABLE
                                                  " WHERE consumer = ? AND msg_id = ?")) == NULL)
        return DB_ERR_OTHER;
    return db_key_exec(db, db->clear_stmt, "clearing attempts of", id, len);
}

int db_open(const conf_database_t *cfg, const char *consumer, bool record, db_t **out)
{
    db_t *db = calloc(1, sizeof(*db));
    unsigned int t;
    my_bool off = 0;

    *out = NULL;
    if (db == NULL || (db->my = mysql_init(NULL)) == NULL) {
        log_error("database: out of memory");
        goto fail;
    }
    t = (unsigned)cfg->connect_timeout;
    mysql_options(db->my, MYSQL_OPT_CONNECT_TIMEOUT, &t);
    t = (unsigned)cfg->read_timeout;
    mysql_options(db->my, MYSQL_OPT_READ_TIMEOUT, &t);
    t = (unsigned)cfg->write_timeout;
    mysql_options(db->my, MYSQL_OPT_WRITE_TIMEOUT, &t);
    /* A silent reconnect mid-transaction would run the rest in autocommit. */
    mysql_options(db->my, MYSQL_OPT_RECONNECT, &off);
    mysql_options(db->my, MYSQL_SET_CHARSET_NAME, "utf8mb4");
    mysql_options(db->my, MYSQL_INIT_COMMAND,
                  "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED");
    if (mysql_real_connect(db->my, cfg->socket ? NULL : cfg->host, cfg->user, cfg->password,
                           cfg->database, cfg->socket ? 0 : (unsigned)cfg->port, cfg->socket,
                           0) == NULL) {
        log_error("database: cannot connect to %s%s%s as %s: %s",
                  cfg->socket ? cfg->socket : cfg->host, cfg->socket ? "" : ":",
                  cfg->socket ? "" : "port", cfg->user, mysql_error(db->my));
        goto fail;
    }
    if (mysql_autocommit(db->my, 0) != 0) {
        log_error("database: cannot turn autocommit off: %s", mysql_error(db->my));
        goto fail;
    }
    if (consumer != NULL) {
        size_t n = strlen(consumer);
        if (n >= sizeof(db->consumer)) {
            log_error("database: consumer name '%s' is longer than %zu bytes", consumer,
                      sizeof(db->consumer) - 1);
            goto fail;
        }
        memcpy(db->consumer, consumer, n);
        db->consumer_len = (unsigned long)n;
        if (record && db_prepare_record(db, cfg->record_table) != 0)
            goto fail;
    }
    *out = db;
    return 0;
fail:
    db_close(db);
    return -1;
}

void db_close(db_t *db)
{
    if (db == NULL)
        return;
    if (db->record_stmt)
        mysql_stmt_close(db->record_stmt);
    if (db->bump_stmt)
        mysql_stmt_close(db->bump_stmt);
    if (db->clear_stmt)
        mysql_stmt_close(db->clear_stmt);
    if (db->my)
        mysql_close(db->my);
    free(db);
}

db_status_t db_record(db_t *db, const char *id, size_t len)
{
    return db_key_exec(db, db->record_stmt, "recording", id, len);
}

db_status_t db_exec(db_t *db, const char *sql)
{
    if (mysql_real_query(db->my, sql, strlen(sql)) == 0)
        return DB_OK;
    unsigned int err = mysql_errno(db->my);
    db_status_t st = db_classify(err);
    log_error("database: '%s': error %u: %s", sql, err, mysql_error(db->my));
    return st;
}

db_status_t db_commit(db_t *db)
{
    return db_exec(db, "COMMIT");
}

db_status_t db_rollback(db_t *db)
{
    return db_exec(db, "ROLLBACK");
}

bool db_in_transaction(const db_t *db)
{
    unsigned int status = 0;
    if (mariadb_get_infov(db->my, MARIADB_CONNECTION_SERVER_STATUS, &status) != 0)
        return false;
    return (status & SERVER_STATUS_IN_TRANS) != 0;
}
