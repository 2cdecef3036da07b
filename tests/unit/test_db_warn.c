/* test_db_warn.c: unit tests of db_warn.c's pure part: which warning codes mean a stored value
 * differs from the one sent, and the column a warning names (SHOW WARNINGS itself is tested
 * against the servers, t_sqlh_boundary). */
#include <string.h>

#include "db_warn.h"
#include "tap.h"

int main(void)
{
    const unsigned changed[] = {1048, 1261, 1262, 1263, 1264, 1265, 1292,
                                1366, 1367, 1406, 1411, 1916, 1918, 0};
    const unsigned kept[] = {1003, 1062, 1105, 1287, 1329, 1592, 1681, 3170, 0};
    char col[65];

    for (int i = 0; changed[i]; i++)
        ok(db_warn_changes_value(changed[i]), "%u changes a value", changed[i]);
    for (int i = 0; kept[i]; i++)
        ok(!db_warn_changes_value(kept[i]), "%u does not change a value", kept[i]);
    ok(db_warn_column("Data truncated for column 'amount' at row 1", col, sizeof(col)) == 0 &&
           strcmp(col, "amount") == 0,
       "1265 names the column amount (%s)", col);
    ok(db_warn_column("Out of range value for column 'big' at row 1", col, sizeof(col)) == 0 &&
           strcmp(col, "big") == 0,
       "1264 names the column big");
    ok(db_warn_column("Got overflow when converting '1e90' to DECIMAL. Value truncated", col,
                      sizeof(col)) == -1,
       "1916 names no column");
    ok(db_warn_column("for column '' at row 1", col, sizeof(col)) == -1, "an empty name is none");
    ok(db_warn_column("for column 'abc", col, sizeof(col)) == -1, "an unclosed name is none");
    return done();
}
