# t_sqlh_boundary: the transaction is idemd's: --check-config refuses SQL-handler statements that would end it (COMMIT, an executable comment, DDL, SET autocommit, START TRANSACTION behind a comment, LOCK TABLES) naming file, line and index; a CALL of a procedure returning two result sets runs and commits once per message; a value the server would store changed (0.005 into DECIMAL(12,2): its note 1265; 1e90: past DECIMAL(65)) dead-letters the message naming the parameter and the reason, leaving the table unchanged (19.99 into BIGINT, rounded by both servers without a warning, is pinned as the documented limit); a duplicate on a unique key follows on_duplicate; a procedure that commits or turns autocommit on is refused by the server inside idemd's XA branch: nothing of its message is committed, the message is retried, then dead-lettered.
source "$H_ROOT/tests/chaos/lib.sh"
db=t_sqlh_bound
qc=t_sqlh_bound.call
qw=t_sqlh_bound.warn
qd=t_sqlh_bound.dup
qo=t_sqlh_bound.dupok
qe=t_sqlh_bound.end
h_new_db "$db"
c_fresh_queues "$qc" "$qc.dlq" "$qw" "$qw.dlq" "$qd" "$qd.dlq" "$qo" "$qo.dlq" "$qe" "$qe.dlq"
h_sql "CREATE TABLE ledger (entry_id VARCHAR(64) PRIMARY KEY, account VARCHAR(32) NOT NULL, amount DECIMAL(12,2) NOT NULL)"
h_sql "CREATE TABLE balance (account VARCHAR(32) PRIMARY KEY, amount DECIMAL(12,2) NOT NULL, n INT NOT NULL DEFAULT 0)"
h_sql "INSERT INTO balance VALUES ('p', 0, 0), ('d', 0, 0), ('o', 0, 0), ('e', 0, 0)"
h_sql "CREATE TABLE vals (entry_id VARCHAR(64) PRIMARY KEY, d DECIMAL(12,2) NULL, b BIGINT NULL, h DECIMAL(65,0) NULL)"
h_sql "CREATE TABLE refs (id INT AUTO_INCREMENT PRIMARY KEY, ref VARCHAR(64) NOT NULL, UNIQUE KEY uref (ref))"
# Two result sets, then the CALL's own status.
h_sql "DELIMITER //
CREATE PROCEDURE post(IN e VARCHAR(64), IN amt DECIMAL(12,2))
BEGIN
  INSERT INTO ledger (entry_id, account, amount) VALUES (e, 'p', amt);
  SELECT COUNT(*) AS n FROM ledger;
  SELECT e AS entry, amt AS amount;
END //"
# A procedure that ends the transaction from inside, which no check of the text can see.
h_sql "DELIMITER //
CREATE PROCEDURE endit(IN e VARCHAR(64), IN how VARCHAR(16))
BEGIN
  INSERT INTO ledger (entry_id, account, amount) VALUES (e, 'e', 1);
  IF how = 'commit' THEN COMMIT; END IF;
  IF how = 'auto' THEN SET autocommit = 1; END IF;
END //"

# --check-config: the second statement of a queue is each refused kind in turn.
conf()
{
    h_conf_common "$db"
    cat <<CONF
queues = (
  { name = "$qc"; handler = "sql"; workers = 1;
    sql = (
      { statement = "INSERT INTO ledger (entry_id, account, amount) VALUES (?, 'x', 1)"; params = [ "msg:id" ]; },
      { statement = "$1"; } # second
    ); }
);
CONF
}
line=$(conf x | grep -n '# second' | cut -d: -f1)
check()
{
    local rc=0
    "$IDEMD" "${H_ALLOW_ROOT[@]}" --check-config -c idemd.conf >check.out 2>&1 || rc=$?
    echo "$rc"
}
refuse()
{
    local stmt=$1 want=$2 out
    conf "$stmt" >idemd.conf
    chmod go= idemd.conf
    h_assert_eq "$(check)" 1 "--check-config on '$stmt'"
    out=$(cat check.out)
    want="idemd.conf:$line: queues.[0].sql.[1].statement: statement 2$want"
    [[ "$out" == *"$want"* ]] || h_fail "'$stmt': got '$out', expected it to hold '$want'"
}
refuse "COMMIT" " (COMMIT) would end idemd's transaction: not allowed in a handler"
refuse "/*!COMMIT*/" ": executable comments are not allowed in a handler statement"
refuse "SELECT 1 /*M!100500 ; COMMIT */" ": executable comments are not allowed in a handler statement"
refuse "create table x (a int)" " (create) would end idemd's transaction"
refuse "SET autocommit=1" " (SET) would end idemd's transaction"
refuse "  -- x\\n START TRANSACTION" " (START) would end idemd's transaction"
refuse "LOCK TABLES ledger WRITE" " (LOCK) would end idemd's transaction"
refuse "SELECT 1; COMMIT" ": a second statement after ';'"
conf "/* fine */ SELECT 1" >idemd.conf
h_assert_eq "$(check)" 0 "--check-config on a commented SELECT ($(cat check.out))"

# The running cases, one daemon.
{
    h_conf_common "$db"
    cat <<CONF
queues = (
  { name = "$qc"; handler = "sql"; workers = 1; max_attempts = 3; retry_delays_ms = [ 100 ];
    sql = ( { statement = "CALL post(?, ?)"; params = [ "msg:id", "json:amount" ]; expect = "1"; },
            { statement = "UPDATE balance SET amount = amount + ?, n = n + 1 WHERE account = 'p'";
              params = [ "json:amount" ]; expect = "1"; } ); },
  { name = "$qw"; handler = "sql"; workers = 1; max_attempts = 3; retry_delays_ms = [ 100 ];
    sql = ( { statement = "INSERT INTO vals (entry_id, d, b, h) VALUES (?, ?, ?, ?)";
              params = [ "msg:id", "json:d?", "json:b?", "json:h?" ]; } ); },
  { name = "$qd"; handler = "sql"; workers = 1; max_attempts = 3; retry_delays_ms = [ 100 ];
    sql = ( { statement = "INSERT INTO refs (ref) VALUES (?)"; params = [ "json:ref" ]; },
            { statement = "UPDATE balance SET n = n + 1 WHERE account = 'd'"; expect = "1"; } ); },
  { name = "$qo"; handler = "sql"; workers = 1; max_attempts = 3; retry_delays_ms = [ 100 ];
    sql = ( { statement = "INSERT INTO refs (ref) VALUES (?)"; params = [ "json:ref" ];
              on_duplicate = "ok"; expect = "0..1"; },
            { statement = "UPDATE balance SET n = n + 1 WHERE account = 'o'"; expect = "1"; } ); },
  { name = "$qe"; handler = "sql"; workers = 1; batch_size = 1; max_attempts = 3; retry_delays_ms = [ 100 ];
    sql = ( { statement = "CALL endit(?, ?)"; params = [ "msg:id", "json:how" ]; },
            { statement = "UPDATE balance SET n = n + 1 WHERE account = ?"; params = [ "json:acct" ];
              expect = "1"; } ); }
);
CONF
} >idemd.conf
h_daemon_start idemd.conf idemd.log
printf 'c1\t{"amount": 1.25}\nc2\t{"amount": 2.50}\nc3\t{"amount": 0.25}\n' | h_mq publish -r "$qc" >/dev/null
printf 'w1\t{"d": 0.005}\nw2\t{"b": 19.99}\nw3\t{"h": 1e90}\nwok\t{"d": 1.25, "b": 7, "h": 12}\n' |
    h_mq publish -r "$qw" >/dev/null
printf 'd1\t{"ref": "r1"}\nd2\t{"ref": "r1"}\n' | h_mq publish -r "$qd" >/dev/null
h_wait_sql "SELECT n FROM balance WHERE account = 'd'" 1 60
printf 'o1\t{"ref": "r1"}\no2\t{"ref": "r2"}\n' | h_mq publish -r "$qo" >/dev/null
printf 'e1\t{"how": "commit", "acct": "e"}\ne2\t{"how": "auto", "acct": "e"}\ne3\t{"how": "none", "acct": "zz"}\n' |
    h_mq publish -r "$qe" >/dev/null
h_wait_sql "SELECT n FROM balance WHERE account = 'p'" 3 60
h_wait_depth "$qw.dlq" 2 60
h_wait_depth "$qd.dlq" 1 60
h_wait_sql "SELECT n FROM balance WHERE account = 'o'" 2 60
h_wait_sql "SELECT COUNT(*) FROM vals" 2 30
h_wait_depth "$qe.dlq" 3 60
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"

h_assert_eq "$(h_sql "SELECT GROUP_CONCAT(entry_id ORDER BY entry_id) FROM ledger WHERE account = 'p'")" "c1,c2,c3" "the CALL's rows, once each"
h_assert_eq "$(h_sql "SELECT amount, n FROM balance WHERE account = 'p'")" $'4.00\t3' "the statement after the CALL ran once per message"
h_assert_eq "$(h_depth "$qc.dlq")" 0 "dead letters of the CALL queue"
h_assert_eq "$(h_count_log idemd.log "out of sync")" 0 "commands out of sync in the log"

# 19.99 into BIGINT: both servers round a DECIMAL into an integer column to 20 without a warning
# or a note (docs/sql-handler.md says so); a change that catches it updates this line.
h_assert_eq "$(h_sql "SELECT entry_id, d, b, h FROM vals ORDER BY entry_id")" $'w2\tNULL\t20\tNULL\nwok\t1.25\t7\t12' \
    "vals: nothing of w1 (0.005) nor w3 (1e90)"
h_mq get "$qw.dlq" -n 2 >dlq.txt
# The server's note: MariaDB and MySQL both round 0.005 to 0.01 with Note 1265.
c_expect_reason dlq.txt w1 "statement 1: params.[1] (json:d?): the value stored would differ from the one sent, not retried: Note 1265: Data truncated for column 'd'"
# Past DECIMAL(65): MySQL caps it silently, MariaDB with Warning 1916; idemd refuses it first.
c_expect_reason dlq.txt w3 "statement 1: params.[3] (json:h?): the number 1e90 has more integer digits than a DECIMAL holds (65)"
h_assert_eq "$(h_count_log idemd.log "outcome=retry queue=$qw ")" 0 "retries (a changed value is the data's fault)"

h_mq get "$qd.dlq" -n 1 >dlq.txt
c_expect_reason dlq.txt d2 "statement 1: duplicate key, not retried: mysql error 1062"
h_assert_eq "$(h_depth "$qo.dlq")" 0 "dead letters of the on_duplicate = ok queue"
h_assert_eq "$(h_sql "SELECT GROUP_CONCAT(ref ORDER BY ref) FROM refs")" "r1,r2" "refs: one row per ref"
# The procedures that would have ended the transaction: inside idemd's XA branch the server
# refused their COMMIT and SET autocommit = 1 (1399), so nothing of e1 or e2 was committed, no
# record either: each was retried, then dead-lettered saying so (never acked as a duplicate).
h_mq get "$qe.dlq" -n 3 >dlq.txt
c_expect_reason dlq.txt e1 "statement 1 would end the transaction"
c_expect_reason dlq.txt e2 "statement 1 would end the transaction"
c_expect_reason dlq.txt e3 "statement 2 affected 0 rows, expected 1"
h_assert_eq "$(h_count_log idemd.log "outcome=duplicate queue=$qe ")" 0 "e messages acked as duplicates"
h_assert_eq "$(h_count_log idemd.log "outcome=retry queue=$qe id=e[12] .*then=\"retry scheduled\"")" 4 "retries of e1 and e2"
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM ledger WHERE entry_id IN ('e1', 'e2', 'e3')")" 0 "the procedures' rows, rolled back"
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM msg_id_record WHERE consumer = '$qe'")" 0 "records of the e messages"
h_assert_eq "$(h_sql "SELECT n FROM balance WHERE account = 'e'")" 0 "statement 2 never ran for e1, e2"
echo "t_sqlh_boundary: ok"
