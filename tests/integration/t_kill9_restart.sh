# t_kill9_restart: kill -9 the supervisor and its workers twice mid-run; after restarts every effect exactly once.
db=t_kill9
q=t_kill9.q
h_new_db "$db"
{
    h_conf_common "$db"
    cat <<CONF
queues = ( { name = "$q"; handler = "$H_TEST_PLUGINS/counter.so"; prefetch = 50; workers = 2;
             settings = { sleep_ms = 2; }; } );
CONF
} >idemd.conf
h_daemon_start idemd.conf idemd.log

out=$(h_gen k 1 5000 | h_mq publish -r "$q")
h_assert_eq "$out" "published 5000 confirmed 5000" "publisher"

records() { h_sql "SELECT COUNT(*) FROM msg_id_record WHERE consumer = '$q'"; }
for at in 1000 3000; do
    h_wait_sql "SELECT COUNT(*) >= $at FROM msg_id_record WHERE consumer = '$q'" 1 120
    pids=$(h_daemon_pids | tr '\n' ' ')
    h_daemon_kill9
    n=$(records)
    echo "killed -9 $pids with $n records committed"
    for p in $pids; do
        ! kill -0 "$p" 2>/dev/null || h_fail "process $p survived kill -9"
    done
    ((n < 5000)) || h_fail "all 5000 were done before the kill at $at: nothing was tested (raise sleep_ms)"
    h_daemon_start idemd.conf idemd.log
done

h_wait_sql "SELECT COUNT(*) FROM msg_id_record WHERE consumer = '$q'" 5000 180
h_wait_sql "SELECT COUNT(*), SUM(n), MAX(n) FROM effects WHERE queue = '$q'" $'5000\t5000\t1' 30
h_wait_depth "$q" 0 30
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"

h_assert_eq "$(h_sql "SELECT COUNT(*), SUM(n), MAX(n) FROM effects WHERE queue = '$q'")" \
    $'5000\t5000\t1' "effects after stop"
h_assert_eq "$(records)" 5000 "record rows"
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM effects e LEFT JOIN msg_id_record r
                      ON r.consumer = e.queue AND r.msg_id = e.msg_id WHERE r.id IS NULL")" 0 \
    "effects without a record"
h_assert_eq "$(h_depth "$q")" 0 "queue depth after stop"
echo "t_kill9_restart: ok ($(h_count_log idemd.log "outcome=duplicate queue=$q ") duplicates absorbed)"
