# t_fail_lock_wait_rollback: innodb_rollback_on_timeout = ON: a lock wait timeout on C's record in batch [A, B, C] must not cost A's and B's effects (they were acked on an empty COMMIT).
source "$H_ROOT/tests/chaos/lib.sh"
db=t_fail_lock_wait_rollback
q=t_fail_lockrb.q
# A private server: innodb_rollback_on_timeout cannot be changed at run time.
h_db_private "$H_CASE_DIR/mysql" --innodb-rollback-on-timeout=ON --innodb-lock-wait-timeout=2 ||
    h_fail "private database server did not start"
h_new_db "$db"
c_fresh_queues "$q" "$q.dlq" "$q.retry.200"
{
    h_conf_common "$db"
    cat <<CONF
queues = ( { name = "$q"; handler = "$H_TEST_PLUGINS/counter.so"; workers = 1; prefetch = 10; batch_size = 10;
             batch_wait_ms = 1500; max_attempts = 5; retry_delays_ms = [ 200 ]; } );
CONF
} >idemd.conf
h_daemon_start idemd.conf idemd.log

# Another transaction holds C's record key until we end it.
c_hold_key "$db" "$q" C
out=$(printf 'A\tgood\nB\tgood\nC\tgood\n' | h_mq publish -r "$q")
h_assert_eq "$out" "published 3 confirmed 3" "publisher"

h_wait_log idemd.log "outcome=retry queue=$q id=C .*lock wait timeout" 1 30
c_release_key
h_wait_sql "SELECT GROUP_CONCAT(CONCAT(msg_id, ':', n) ORDER BY msg_id) FROM effects" "A:1,B:1,C:1" 30
h_assert_eq "$(h_sql "SELECT GROUP_CONCAT(msg_id ORDER BY msg_id) FROM msg_id_record")" "A,B,C" "records"
h_wait_depth "$q" 0 10
h_assert_eq "$(h_depth "$q.dlq")" 0 "dead letters"
h_assert_eq "$(h_count_log idemd.log "exited with code")" 0 "worker exits"
# idemd read the setting the protocol depends on, and said so.
h_wait_log idemd.log "innodb_rollback_on_timeout ON" 1 5
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"
echo "t_fail_lock_wait_rollback: ok"
