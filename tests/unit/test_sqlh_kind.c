/* test_sqlh_kind.c: unit tests of which statements the SQL handler may run: the allowed kinds,
 * and every spelling of a statement that would end idemd's transaction. */
#include <string.h>

#include "sqlh_kind.h"
#include "tap.h"

static char why[512];

/* Whether sql is allowed. */
static bool allowed(const char *sql)
{
    why[0] = '\0';
    return sqlh_kind_check(sql, why, sizeof(why)) == 0;
}

/* Whether sql is refused with a reason holding want. */
static bool refused(const char *sql, const char *want)
{
    return !allowed(sql) && strstr(why, want) != NULL;
}

int main(void)
{
    const char *good[] = {
        "INSERT INTO t VALUES (?)",
        "insert into t values (?)",
        "  \n\tUPDATE t SET a = ? WHERE b = ?",
        "replace into t values (?)",
        "DELETE FROM t WHERE id = ?",
        "SELECT id FROM t WHERE id = ? FOR UPDATE",
        "select /*+ MAX_EXECUTION_TIME(1000) */ id from t",
        "CALL post(?, ?)",
        "WITH x AS (SELECT 1) SELECT * FROM x",
        "VALUES ROW(1)",
        "TABLE t",
        "DO RELEASE_LOCK('x')",
        "(SELECT 1) UNION (SELECT 2)",
        "-- note\nINSERT INTO t VALUES (1)",
        "# note\nINSERT INTO t VALUES (1)",
        "/* note */ INSERT INTO t VALUES (1)",
        "INSERT INTO t VALUES ('/*!COMMIT*/')",
        "INSERT INTO t VALUES ('a;COMMIT')",
        "INSERT INTO t VALUES (\"it''s; /*!x*/\")",
        "INSERT INTO t VALUES ('it''s'); ",
        "INSERT INTO t VALUES (1);  -- end\n",
        "INSERT INTO t VALUES (1 --1)",
        "INSERT INTO `we;ird` VALUES (1)",
        NULL,
    };
    for (int i = 0; good[i]; i++)
        ok(allowed(good[i]), "allowed: %s (%s)", good[i], why);

    struct {
        const char *sql, *want;
    } bad[] = {
        {"COMMIT", " (COMMIT) would end idemd's transaction: not allowed in a handler"},
        {"commit work", "(commit) would end"},
        {"  Commit", "(Commit) would end"},
        {"ROLLBACK", "(ROLLBACK) would end"},
        {"ROLLBACK TO SAVEPOINT m1", "(ROLLBACK) would end"},
        {"SAVEPOINT x", "(SAVEPOINT) would end"},
        {"RELEASE SAVEPOINT m1", "(RELEASE) would end"},
        {"BEGIN", "(BEGIN) would end"},
        {"begin work", "(begin) would end"},
        {"  -- x\n START TRANSACTION", "(START) would end"},
        {"# x\nSTART TRANSACTION", "(START) would end"},
        {"/* x */ start transaction", "(start) would end"},
        {"/* a */ -- b\n # c\n /* d */ COMMIT", "(COMMIT) would end"},
        {"XA END 'x'", "(XA) would end"},
        {"SET autocommit=1", "(SET) would end"},
        {"SET @@autocommit = 1", "(SET) would end"},
        {"set session autocommit = 1", "(set) would end"},
        {"SET TRANSACTION ISOLATION LEVEL SERIALIZABLE", "(SET) would end"},
        {"SET PASSWORD = 'x'", "(SET) would end"},
        {"LOCK TABLES t WRITE", "(LOCK) would end"},
        {"unlock tables", "(unlock) would end"},
        {"create table x (a int)", "(create) would end"},
        {"CREATE TEMPORARY TABLE x (a int)", "(CREATE) would end"},
        {"DROP TEMPORARY TABLE x", "(DROP) would end"},
        {"ALTER TABLE t ADD c INT", "(ALTER) would end"},
        {"RENAME TABLE a TO b", "(RENAME) would end"},
        {"TRUNCATE t", "(TRUNCATE) would end"},
        {"GRANT ALL ON *.* TO x", "(GRANT) would end"},
        {"REVOKE ALL ON *.* FROM x", "(REVOKE) would end"},
        {"ANALYZE TABLE t", "(ANALYZE) would end"},
        {"OPTIMIZE TABLE t", "(OPTIMIZE) would end"},
        {"REPAIR TABLE t", "(REPAIR) would end"},
        {"CHECK TABLE t", "(CHECK) would end"},
        {"CHECKSUM TABLE t", "(CHECKSUM) would end"},
        {"FLUSH TABLES", "(FLUSH) would end"},
        {"RESET MASTER", "(RESET) would end"},
        {"LOAD DATA INFILE 'x' INTO TABLE t", "(LOAD) would end"},
        {"LOAD INDEX INTO CACHE t", "(LOAD) would end"},
        {"CACHE INDEX t IN c", "(CACHE) would end"},
        {"INSTALL PLUGIN x SONAME 'x.so'", "(INSTALL) would end"},
        {"UNINSTALL PLUGIN x", "(UNINSTALL) would end"},
        {"CHANGE MASTER TO MASTER_HOST='x'", "(CHANGE) would end"},
        {"CHANGE REPLICATION SOURCE TO SOURCE_HOST='x'", "(CHANGE) would end"},
        {"START REPLICA", "(START) would end"},
        {"STOP SLAVE", "(STOP) would end"},
        {"SHUTDOWN", "(SHUTDOWN) would end"},
        {"KILL 5", "(KILL) would end"},
        {"HANDLER t OPEN", "(HANDLER) would end"},
        {"SHOW TABLES", "(SHOW) is not allowed in a handler"},
        {"EXPLAIN SELECT 1", "(EXPLAIN) is not allowed"},
        {"PREPARE s FROM 'COMMIT'", "(PREPARE) is not allowed"},
        {"EXECUTE s", "(EXECUTE) is not allowed"},
        {"/*!COMMIT*/", "executable comments are not allowed in a handler statement"},
        {"/*!50700 COMMIT */", "executable comments are not allowed"},
        {"/*M! COMMIT */", "executable comments are not allowed"},
        {"/*M!100500 COMMIT */", "executable comments are not allowed"},
        {"INSERT INTO t VALUES (1) /*!, (2) */", "executable comments are not allowed"},
        {"SELECT 1 /*!; COMMIT */", "executable comments are not allowed"},
        {"INSERT INTO t VALUES ('a\\'') /*!COMMIT*/", "executable comments are not allowed"},
        {"INSERT INTO t VALUES (1); COMMIT", "a second statement after ';'"},
        {"INSERT INTO t VALUES (1);\n-- x\nCOMMIT", "a second statement after ';'"},
        {"INSERT INTO t VALUES ('a;b'); DROP TABLE t", "a second statement after ';'"},
        {"SELECT 1 /* never closed", "a comment that never ends"},
        {"", "is empty"},
        {"  -- only a comment\n", "is empty"},
        {"((", "is empty"},
        {"--x", "does not start with a keyword"},
        {NULL, NULL},
    };
    for (int i = 0; bad[i].sql; i++)
        ok(refused(bad[i].sql, bad[i].want), "refused: %s (got '%s', want '%s')", bad[i].sql, why,
           bad[i].want);
    return done();
}
