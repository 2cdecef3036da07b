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

#endif
