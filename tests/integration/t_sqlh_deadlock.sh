# t_sqlh_deadlock: a SQL handler's statement chosen as a deadlock victim is retried, not dead-lettered: another session locks row 2 then row 1 while the handler holds row 1 and waits for row 2; the handler's transaction is redone and both its updates land once.
source "$H_ROOT/tests/chaos/lib.sh"
db=t_sqlh_deadlock
q=t_sqlh_deadlock.in
h_new_db "$db"
c_fresh_queues "$q" "$q.dlq" "$q.retry.100"
h_sql "CREATE TABLE acct (id INT PRIMARY KEY, n INT NOT NULL)"
h_sql "INSERT INTO acct VALUES (1, 0), (2, 0)"
# The other session's weight: InnoDB rolls back the transaction that changed fewer rows.
h_sql "CREATE TABLE heavy (id INT PRIMARY KEY)"
{
    h_conf_common "$db"
    cat <<CONF
queues = (
  { name = "$q"; handler = "sql"; workers = 1; batch_size = 1; max_attempts = 2; retry_delays_ms = [ 100 ];
    sql = ( { statement = "UPDATE acct SET n = n + 1 WHERE id = ?"; params = [ "json:first" ]; expect = "1"; },
            { statement = "UPDATE acct SET n = n + 10 WHERE id = ?"; params = [ "json:second" ]; expect = "1"; } ); }
);
CONF
} >idemd.conf
h_daemon_start idemd.conf idemd.log
# The other session, one statement at a time through a pipe.
mkfifo other.in
h_mysql "$db" <other.in >other.out 2>&1 &
other=$!
exec 7>other.in
echo "SET SESSION innodb_lock_wait_timeout = 60; BEGIN;" >&7
echo "INSERT INTO heavy SELECT seq FROM $(h_seq 200);" >&7
echo "UPDATE acct SET n = n + 100 WHERE id = 2;" >&7
h_wait_sql "SELECT COUNT(*) FROM information_schema.INNODB_TRX WHERE trx_rows_modified >= 200" 1 30
printf 'd1\t{"first": 1, "second": 2}\n' | h_mq publish -r "$q" >/dev/null || h_fail "publish"
# The handler holds row 1 and waits for row 2; now the other session asks for row 1.
h_wait_sql "SELECT COUNT(*) FROM information_schema.INNODB_TRX WHERE trx_state = 'LOCK WAIT'" 1 30
echo "UPDATE acct SET n = n + 100 WHERE id = 1;" >&7
h_wait_log idemd.log 'transaction lost \(error 1213' 1 30 || h_fail "the handler was not the deadlock victim"
echo "COMMIT;" >&7
exec 7>&-
wait "$other" || h_fail "the other session failed: $(cat other.out)"
h_wait_sql "SELECT GROUP_CONCAT(n ORDER BY id) FROM acct" "101,110" 30
h_wait_depth "$q" 0 30
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"
h_assert_eq "$(h_sql "SELECT GROUP_CONCAT(n ORDER BY id) FROM acct")" "101,110" "both sessions' updates, each once"
h_assert_eq "$(h_depth "$q.dlq")" 0 "dead letters"
h_assert_eq "$(h_count_log idemd.log 'outcome=reject')" 0 "rejects"
echo "t_sqlh_deadlock: ok"
