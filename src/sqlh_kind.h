/* sqlh_kind.h: which SQL statements a handler may run inside idemd's transaction (pure text
 * rules, no server). */
#ifndef IDEMD_SQLH_KIND_H
#define IDEMD_SQLH_KIND_H

#include <stddef.h>

/*
 * Whether sql may be one of the SQL handler's statements. Its first keyword, after whitespace,
 * comments ("-- ", "#", slash-star) and opening parentheses, must be one of SELECT, INSERT,
 * REPLACE, UPDATE, DELETE, CALL, WITH, VALUES, TABLE or DO; no executable comment
 * (slash-star-bang, slash-star-M-bang) may appear anywhere outside string literals; nothing but
 * comments may follow a ';'. Literals are read both with and without backslash escapes, and
 * either reading finding a fault refuses. Returns 0; or -1 with the reason in why (len bytes),
 * written to follow "statement N", e.g. " (COMMIT) would end idemd's transaction: not allowed in a
 * handler". sql is only read.
 */
int sqlh_kind_check(const char *sql, char *why, size_t len) __attribute__((warn_unused_result));

#endif
