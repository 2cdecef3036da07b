# t_long_batch_heartbeat: a batch of slow handler calls longer than the heartbeat limit is settled in parts: no lost connection, no redone work.
source "$H_ROOT/tests/chaos/lib.sh"
db=t_long_batch_heartbeat
q=t_long_batch.q
h_new_db "$db"
c_fresh_queues "$q" "$q.dlq"
{
    h_conf_common "$db" | sed 's/heartbeat = 30/heartbeat = 2/'
    cat <<CONF
queues = ( { name = "$q"; handler = "$H_TEST_PLUGINS/counter.so"; workers = 1; prefetch = 40; batch_size = 20;
             batch_wait_ms = 500; settings = { sleep_ms = 300; }; } );
CONF
} >idemd.conf
h_daemon_start idemd.conf idemd.log
h_gen l 1 40 | h_mq publish -r "$q" >pub.txt
h_assert_eq "$(cat pub.txt)" "published 40 confirmed 40" "publisher"
h_wait_sql "SELECT COUNT(*), SUM(n), MAX(n) FROM effects" $'40\t40\t1' 60
h_wait_depth "$q" 0 10
h_assert_eq "$(h_count_log idemd.log "exited with code|heartbeat|connection closed|outcome=duplicate")" 0 \
    "lost connections and redone messages"
h_wait_log idemd.log "ran past 1000 ms: settling" 1 5
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"
echo "t_long_batch_heartbeat: ok"
