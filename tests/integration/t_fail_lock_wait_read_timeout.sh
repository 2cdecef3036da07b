# t_fail_lock_wait_read_timeout: read_timeout (4 s) below the server's lock wait (50 s): a held record key costs that message a retry, not the worker.
source "$H_ROOT/tests/chaos/lib.sh"
db=t_fail_lock_wait_rt
q=t_fail_lockrt.q
h_new_db "$db"
c_fresh_queues "$q" "$q.dlq" "$q.retry.200"
{
    h_conf_common "$db" | sed 's/read_timeout = 30/read_timeout = 4/'
    cat <<CONF
queues = ( { name = "$q"; handler = "$H_TEST_PLUGINS/counter.so"; workers = 1; prefetch = 10; batch_size = 10;
             batch_wait_ms = 1000; max_attempts = 5; retry_delays_ms = [ 200 ]; } );
CONF
} >idemd.conf
h_daemon_start idemd.conf idemd.log

c_hold_key "$db" "$q" C
out=$(printf 'C\tgood\nD\tgood\n' | h_mq publish -r "$q")
h_assert_eq "$out" "published 2 confirmed 2" "publisher"
h_wait_log idemd.log "outcome=retry queue=$q id=C .*lock wait timeout" 1 30
h_wait_sql "SELECT COUNT(*) FROM effects WHERE msg_id = 'D'" 1 10
c_release_key
h_wait_sql "SELECT GROUP_CONCAT(CONCAT(msg_id, ':', n) ORDER BY msg_id) FROM effects" "C:1,D:1" 30
h_wait_depth "$q" 0 10
h_assert_eq "$(h_count_log idemd.log "exited with code|error 2013")" 0 "worker exits and read timeouts"
h_wait_log idemd.log "lock wait 2 s \(read_timeout 4 s\)" 1 5
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"
echo "t_fail_lock_wait_read_timeout: ok"
