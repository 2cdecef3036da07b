# t_fail_db_stall: a handler held up by LOCK TABLES or FLUSH TABLES WITH READ LOCK for 5x handler_timeout is not killed or counted as a crash: nothing dead-lettered, every message applied once after the unlock.
source "$H_ROOT/tests/chaos/lib.sh"
db=t_fail_db_stall
qa=t_fail_db_stall.a # dedup table: the record INSERT comes before the handler
qb=t_fail_db_stall.b # dedup none: the handler's INSERT is the first write
hold=10              # seconds the other session holds its lock; handler_timeout is 2
h_new_db "$db"
c_fresh_queues "$qa" "$qa.dlq" "$qb" "$qb.dlq"
# A TCP account without the PROCESS privilege: the second phase looks at the handler's session
# over TCP (database.hosts), seeing only this account's sessions.
h_mysql -e "CREATE USER IF NOT EXISTS 'stall'@'127.0.0.1' IDENTIFIED BY 'stall';
            GRANT ALL ON \`$db\`.* TO 'stall'@'127.0.0.1'" || h_fail "cannot create the TCP user"
queues()
{
    cat <<CONF
queues = (
  { name = "$qa"; handler = "$H_TEST_PLUGINS/counter.so"; workers = 1; handler_timeout = 2; max_attempts = 2;
    batch_size = 20; batch_wait_ms = 20; },
  { name = "$qb"; handler = "$H_TEST_PLUGINS/counter.so"; workers = 1; handler_timeout = 2; max_attempts = 2;
    batch_size = 20; batch_wait_ms = 20; dedup = "none"; }
);
CONF
}
{
    h_conf_common "$db"
    queues
} >idemd.conf
{
    h_conf_common "$db" | sed "s|socket = \"$MYSQL_SOCK\"; user = \"root\"|hosts = [ \"127.0.0.1:$MYSQL_PORT\" ]; user = \"stall\"; password = \"stall\"; get_server_public_key = true|"
    queues
} >idemd-tcp.conf
grep -q 'user = "stall"' idemd-tcp.conf || h_fail "the TCP configuration was not written"
h_daemon_start idemd.conf idemd.log

# stall_phase NAME LOCK_SQL PREFIX_A PREFIX_B EXPECTED_ROWS: another session takes LOCK_SQL and
# keeps it $hold s while messages arrive on both queues, 50 before and 50 after a worker's
# statement is seen waiting for it; then every message must be applied once.
stall_phase()
{
    local name=$1 lock=$2 pa=$3 pb=$4 rows=$5 out holder
    h_mysql "$db" -e "$lock; SELECT SLEEP($hold); UNLOCK TABLES" >/dev/null &
    holder=$!
    h_wait_sql "SELECT COUNT(*) FROM information_schema.processlist WHERE info = 'SELECT SLEEP($hold)'" 1 10
    out=$(h_gen "$pa" 1 50 | h_mq publish -r "$qa")
    h_assert_eq "$out" "published 50 confirmed 50" "$name: publisher $qa"
    out=$(h_gen "$pb" 1 50 | h_mq publish -r "$qb")
    h_assert_eq "$out" "published 50 confirmed 50" "$name: publisher $qb"
    h_wait_sql "SELECT COUNT(*) > 0 FROM information_schema.processlist WHERE state LIKE 'Waiting for %'" 1 10
    kill -0 "$holder" 2>/dev/null || h_fail "$name: the lock was released before a worker was seen waiting"
    out=$(h_gen "$pa" 51 100 | h_mq publish -r "$qa")
    h_assert_eq "$out" "published 50 confirmed 50" "$name: publisher $qa"
    out=$(h_gen "$pb" 51 100 | h_mq publish -r "$qb")
    h_assert_eq "$out" "published 50 confirmed 50" "$name: publisher $qb"
    wait "$holder" || h_fail "$name: the session holding the lock failed"
    h_wait_sql "SELECT COUNT(*), SUM(n), MAX(n) FROM effects" "$rows"$'\t'"$rows"$'\t1' 60
    h_wait_depth "$qa" 0 20
    h_wait_depth "$qb" 0 20
}

stall_phase "LOCK TABLES" "LOCK TABLES effects WRITE" a b 200
h_daemon_alive || h_fail "idemd died"
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"
h_daemon_start idemd-tcp.conf idemd.log
stall_phase "FTWRL" "FLUSH TABLES WITH READ LOCK" c d 400
h_daemon_alive || h_fail "idemd died"

h_assert_eq "$(h_depth "$qa.dlq")" 0 "dead letters of $qa"
h_assert_eq "$(h_depth "$qb.dlq")" 0 "dead letters of $qb"
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM effects WHERE queue = '$qa'")" 200 "effects of $qa"
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM effects WHERE queue = '$qb'")" 200 "effects of $qb"
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM msg_id_record")" 200 "record rows of $qa"
h_assert_eq "$(h_count_log idemd.log "killed: handler ran longer|crash [0-9]+ counted|handler crashed")" 0 \
    "handler timeouts and crashes"
h_assert_eq "$(h_count_log idemd.log "outcome=(reject|retry)")" 0 "rejected or retried messages"
h_wait_log idemd.log "handler waits on the database: Waiting for table metadata lock for [0-9]+ s; not counted as a crash" 1 1
h_wait_log idemd.log "handler waits on the database: Waiting for (global read|backup) lock" 1 1
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"
echo "t_fail_db_stall: ok"
