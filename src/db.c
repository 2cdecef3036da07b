/* db.c: the MySQL/MariaDB connection once open: prepared key statements, the consumer, statements,
 * closing.
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
 * Prepare a statement whose two parameters are (consumer, msg_id), bound to
 * db's buffers. Returns the statement, or NULL (logged).
 */
MYSQL_STMT *db_prepare_key_stmt(db_t *db, const char *sql)
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
    char qe[600];
    log_error("database: cannot prepare '%s': %s", sql,
              log_quote_str(stmt ? mysql_stmt_error(stmt) : mysql_error(db->my), qe, sizeof(qe)));
    if (stmt)
        mysql_stmt_close(stmt);
    return NULL;
}

/* Execute a (consumer, msg_id) statement for id. Returns the classified status (logged). */
db_status_t db_key_exec(db_t *db, MYSQL_STMT *stmt, const char *what, const char *id, size_t len)
{
    char pid[96], qe[600];
    memcpy(db->id_buf, id, len);
    db->id_len = (unsigned long)len;
    if (mysql_stmt_execute(stmt) == 0)
        return DB_OK;
    unsigned int err = mysql_stmt_errno(stmt);
    db_status_t st = db_classify(err);
    db->last_errno = err;
    if (st != DB_DUPLICATE)
        log_error("database: %s id=%s: error %u: %s", what,
                  delivery_id_printable(id, len, pid, sizeof(pid)), err,
                  log_quote_str(mysql_stmt_error(stmt), qe, sizeof(qe)));
    return st;
}

int db_set_consumer(db_t *db, const char *consumer)
{
    size_t n = strlen(consumer);
    if (n >= sizeof(db->consumer)) {
        log_error("database: consumer name '%s' is longer than %zu bytes", consumer,
                  sizeof(db->consumer) - 1);
        return -1;
    }
    memcpy(db->consumer, consumer, n);
    db->consumer_len = (unsigned long)n;
    return 0;
}

void db_close(db_t *db)
{
    if (db == NULL)
        return;
    if (db->record_stmt)
        mysql_stmt_close(db->record_stmt);
    if (db->bump_stmt)
        mysql_stmt_close(db->bump_stmt);
    if (db->crash_stmt)
        mysql_stmt_close(db->crash_stmt);
    if (db->start_stmt)
        mysql_stmt_close(db->start_stmt);
    if (db->unstart_stmt)
        mysql_stmt_close(db->unstart_stmt);
    if (db->clear_stmt)
        mysql_stmt_close(db->clear_stmt);
    if (db->my)
        mysql_close(db->my);
    free(db->sql);
    free(db->ord);
    free(db);
}

db_status_t db_exec(db_t *db, const char *sql)
{
    if (mysql_real_query(db->my, sql, strlen(sql)) == 0)
        return DB_OK;
    unsigned int err = mysql_errno(db->my);
    db_status_t st = db_classify(err);
    db->last_errno = err;
    char qe[600];
    log_error("database: '%s': error %u: %s", sql, err,
              log_quote_str(mysql_error(db->my), qe, sizeof(qe)));
    return st;
}
