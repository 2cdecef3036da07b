/* db_warn.c: reads a statement's warnings to tell whether a value was stored other than sent. */
#include "db_warn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool db_warn_changes_value(unsigned code)
{
    switch (code) {
    case 1048: /* ER_BAD_NULL_ERROR: NULL into NOT NULL, the column's default stored */
    case 1261: /* ER_WARN_TOO_FEW_RECORDS */
    case 1262: /* ER_WARN_TOO_MANY_RECORDS: row truncated */
    case 1263: /* ER_WARN_NULL_TO_NOTNULL */
    case 1264: /* ER_WARN_DATA_OUT_OF_RANGE */
    case 1265: /* WARN_DATA_TRUNCATED (also the note of a decimal rounded to the column's scale) */
    case 1292: /* ER_TRUNCATED_WRONG_VALUE */
    case 1366: /* ER_TRUNCATED_WRONG_VALUE_FOR_FIELD */
    case 1367: /* ER_ILLEGAL_VALUE_FOR_TYPE */
    case 1406: /* ER_DATA_TOO_LONG */
    case 1411: /* ER_WRONG_VALUE_FOR_TYPE */
    case 1916: /* ER_DATA_OVERFLOW: "Got overflow when converting ... Value truncated" */
    case 1918: /* ER_BAD_DATA (MariaDB): "Encountered illegal value ... when converting" */
        return true;
    default:
        return false;
    }
}

int db_warn_column(const char *text, char *col, size_t len)
{
    const char *p = strstr(text, "column '");
    const char *e;

    if (p == NULL || len == 0)
        return -1;
    p += strlen("column '");
    if ((e = strchr(p, '\'')) == NULL || e == p)
        return -1;
    snprintf(col, len, "%.*s", (int)(e - p), p);
    return 0;
}

int db_value_warnings(MYSQL *my, char *why, size_t len)
{
    MYSQL_RES *res = NULL;
    MYSQL_ROW row;
    int rc = 0;

    if (mysql_warning_count(my) == 0)
        return 0;
    if (mysql_query(my, "SHOW WARNINGS") != 0 || (res = mysql_store_result(my)) == NULL) {
        snprintf(why, len, "reading its warnings: mysql error %u: %s", mysql_errno(my),
                 mysql_error(my));
        return -1;
    }
    /* Level, Code, Message */
    while (rc == 0 && mysql_num_fields(res) >= 3 && (row = mysql_fetch_row(res)) != NULL) {
        unsigned code = row[1] ? (unsigned)strtoul(row[1], NULL, 10) : 0;
        if (db_warn_changes_value(code)) {
            snprintf(why, len, "%s %u: %s", row[0] ? row[0] : "Warning", code,
                     row[2] ? row[2] : "");
            rc = 1;
        }
    }
    mysql_free_result(res);
    return rc;
}
