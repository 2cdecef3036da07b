/* test_db.c: unit tests of db_classify, the reading of server error numbers from either client
 * library. */
#include <errmsg.h>
#include <mysqld_error.h>

#include "db.h"
#include "tap.h"

int main(void)
{
    ok(db_classify(0) == DB_OK, "0: ok");
    ok(db_classify(1062) == DB_DUPLICATE, "1062 duplicate key: duplicate");
    ok(db_classify(1213) == DB_ERR_DEADLOCK, "1213 deadlock: redo the transaction");
    ok(db_classify(1205) == DB_ERR_LOCK_TIMEOUT, "1205 lock wait timeout");
    ok(db_classify(3572) == DB_ERR_LOCK_TIMEOUT,
       "3572 MySQL's NOWAIT refusal: a lock wait timeout (MariaDB reports it as 1205)");
    ok(db_classify(1305) == DB_ERR_TX_LOST, "1305 savepoint gone: the transaction was lost");
    ok(db_classify(1178) == DB_ERR_HANDLER,
       "1178 no SAVEPOINT (a handler wrote a table that cannot roll back): the handler's doing");
    ok(db_classify(2006) == DB_ERR_CONNECTION, "2006 server gone: connection");
    ok(db_classify(2013) == DB_ERR_CONNECTION, "2013 lost during query: connection");
    ok(db_classify(2055) == DB_ERR_CONNECTION, "2055 lost (extended): connection");
    ok(db_classify(1927) == DB_ERR_CONNECTION, "1927 MariaDB's connection killed: connection");
    ok(db_classify(4031) == DB_ERR_CONNECTION,
       "4031 MySQL's idle disconnect (ER_CLIENT_INTERACTION_TIMEOUT): connection");
    ok(db_classify(1053) == DB_ERR_CONNECTION, "1053 server shutdown: connection");
    ok(db_classify(2014) == DB_ERR_CONNECTION, "2014 commands out of sync: connection");
    /* A server that takes no writes, and MySQL Group Replication. */
    ok(db_classify(1290) == DB_ERR_CONNECTION,
       "1290 read_only / super_read_only (a secondary, a demoted primary): reconnect to the "
       "primary, nothing counted");
    ok(db_classify(3101) == DB_ERR_DEADLOCK,
       "3101 certification rolled back at COMMIT: redo, like a deadlock");
    ok(db_classify(3100) == DB_ERR_CONNECTION,
       "3100 replication hook error (a member leaving): reconnect; the record decides a COMMIT");
    ok(db_classify(3781) == DB_ERR_CONNECTION && db_classify(3782) == DB_ERR_CONNECTION &&
           db_classify(3783) == DB_ERR_CONNECTION,
       "3781..3783 a held statement given up on a new primary: reconnect");
    ok(db_classify(3796) == DB_ERR_CONNECTION, "3796 member not ONLINE: reconnect");
    ok(db_classify(3797) == DB_ERR_OTHER && db_classify(3099) == DB_ERR_OTHER &&
           db_classify(3780) == DB_ERR_OTHER && db_classify(3784) == DB_ERR_OTHER,
       "their neighbours 3099, 3780, 3784, 3797: other");
    ok(db_classify(3819) == DB_ERR_OTHER, "3819 MySQL's CHECK constraint: a data error, other");
    ok(db_classify(4025) == DB_ERR_OTHER, "4025 MariaDB's CHECK constraint: other");
    ok(db_classify(1146) == DB_ERR_OTHER, "1146 no such table: other");
    ok(db_duplicate_key(1062) && db_duplicate_key(1022) && db_duplicate_key(1169) &&
           db_duplicate_key(1586),
       "1062, 1022, 1169, 1586: a unique key holds the value (the SQL handler's on_duplicate)");
    ok(!db_duplicate_key(0) && !db_duplicate_key(1205) && !db_duplicate_key(1452) &&
           !db_duplicate_key(3572),
       "0, 1205, 1452, 3572: not duplicates");
    /* The names each library's headers give agree with the numbers above. */
    ok(ER_DUP_ENTRY == 1062 && ER_LOCK_DEADLOCK == 1213 && ER_LOCK_WAIT_TIMEOUT == 1205 &&
           ER_DUP_KEY == 1022 && ER_DUP_UNIQUE == 1169 && ER_DUP_ENTRY_WITH_KEY_NAME == 1586 &&
           CR_SERVER_GONE_ERROR == 2006 && CR_SERVER_LOST == 2013 &&
           ER_OPTION_PREVENTS_STATEMENT == DB_ER_READ_ONLY,
       "the client library's headers name the same numbers");
#ifdef LIBMARIADB
    ok(ER_CONNECTION_KILLED == DB_ER_CONNECTION_KILLED,
       "Connector/C's ER_CONNECTION_KILLED is 1927");
#else
    ok(ER_CLIENT_INTERACTION_TIMEOUT == DB_ER_IDLE_DISCONNECT,
       "libmysqlclient's ER_CLIENT_INTERACTION_TIMEOUT is 4031");
    ok(ER_LOCK_NOWAIT == DB_ER_LOCK_NOWAIT, "libmysqlclient's ER_LOCK_NOWAIT is 3572");
    ok(ER_RUN_HOOK_ERROR == DB_ER_GR_HOOK &&
           ER_TRANSACTION_ROLLBACK_DURING_COMMIT == DB_ER_GR_ROLLBACK &&
           ER_GR_HOLD_WAIT_TIMEOUT == DB_ER_GR_HOLD_TIMEOUT &&
           ER_GR_HOLD_KILLED == DB_ER_GR_HOLD_KILLED &&
           ER_GR_HOLD_MEMBER_STATUS_ERROR == DB_ER_GR_HOLD_MEMBER &&
           ER_GRP_TRX_CONSISTENCY_NOT_ALLOWED == DB_ER_GR_NOT_ONLINE,
       "libmysqlclient names Group Replication's 3100, 3101, 3781..3783 and 3796 so");
#endif
    return done();
}
