/* db_warn.h: whether the last statement on a connection stored a value other than the one sent
 * (its warnings and notes), for the SQL handler and any handler helper. */
#ifndef IDEMD_DB_WARN_H
#define IDEMD_DB_WARN_H

#include <mysql.h>
#include <stdbool.h>
#include <stddef.h>

/* Whether a warning or note code means the stored value differs from the one sent: out of
 * range (1264), truncated or rounded (1265), incorrect value (1292, 1366, 1367), too long
 * (1406), overflow on conversion (1916), illegal value (1918), NULL made a default (1048, 1263),
 * column count (1261, 1262), wrong value for type (1411). */
bool db_warn_changes_value(unsigned code);

/*
 * After a statement on my: when the server reported warnings or notes (mysql_warning_count; 0
 * costs nothing, no round trip), read SHOW WARNINGS on the same connection (it leaves the open
 * transaction alone). Returns 0 when none of them means a value was changed; 1 with the first
 * such one in why ("Note 1265: Data truncated for column 'amount' at row 1"; len bytes); -1 with
 * the reason in why when the warnings cannot be read (mysql_errno(my) then says why, e.g. a lost
 * connection). my stays the caller's; nothing is logged.
 */
int db_value_warnings(MYSQL *my, char *why, size_t len) __attribute__((warn_unused_result));

/*
 * The column a warning's text names ("... for column 'amount' at row 1"): copied into col (len
 * bytes) and 0; -1 when the text names none.
 */
int db_warn_column(const char *text, char *col, size_t len);

#endif
