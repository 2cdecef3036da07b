# t_kill9_restart: kill -9 the supervisor and its workers twice mid-run; after restarts every effect exactly once.
# Two queues: group commit (default batch_size) and one transaction per message.
db=t_kill9
q=t_kill9.q
q1=t_kill9.b1
h_new_db "$db"
{
    h_conf_common "$db"
    cat <<CONF
queues = (
  { name = "$q"; handler = "$H_TEST_PLUGINS/counter.so"; prefetch = 50; workers = 2;
    settings = { sleep_ms = 2; }; },
  { name = "$q1"; handler = "$H_TEST_PLUGINS/counter.so"; prefetch = 50; workers = 2; batch_size = 1;
    settings = { sleep_ms = 2; }; }
);
CONF
} >idemd.conf
h_daemon_start idemd.conf idemd.log

for queue in "$q" "$q1"; do
    out=$(h_gen k 1 5000 | h_mq publish -r "$queue")
    h_assert_eq "$out" "published 5000 confirmed 5000" "publisher to $queue"
done

records() { h_sql "SELECT COUNT(*) FROM msg_id_record"; }
for at in 2000 6000; do
    h_wait_sql "SELECT COUNT(*) >= $at FROM msg_id_record" 1 120
    pids=$(h_daemon_pids | tr '\n' ' ')
    h_daemon_kill9
    n=$(records)
    echo "killed -9 $pids with $n records committed"
    for p in $pids; do
        ! kill -0 "$p" 2>/dev/null || h_fail "process $p survived kill -9"
    done
    ((n < 10000)) || h_fail "all 10000 were done before the kill at $at: nothing was tested (raise sleep_ms)"
    h_daemon_start idemd.conf idemd.log
done

for queue in "$q" "$q1"; do
    h_wait_sql "SELECT COUNT(*) FROM msg_id_record WHERE consumer = '$queue'" 5000 180
    h_wait_sql "SELECT COUNT(*), SUM(n), MAX(n) FROM effects WHERE queue = '$queue'" $'5000\t5000\t1' 30
    h_wait_depth "$queue" 0 30
done
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"

for queue in "$q" "$q1"; do
    h_assert_eq "$(h_sql "SELECT COUNT(*), SUM(n), MAX(n) FROM effects WHERE queue = '$queue'")" \
        $'5000\t5000\t1' "$queue: effects after stop"
    h_assert_eq "$(h_sql "SELECT COUNT(*) FROM msg_id_record WHERE consumer = '$queue'")" 5000 \
        "$queue: record rows"
    h_assert_eq "$(h_depth "$queue")" 0 "$queue: depth after stop"
done
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM effects e LEFT JOIN msg_id_record r
                      ON r.consumer = e.queue AND r.msg_id = e.msg_id WHERE r.id IS NULL")" 0 \
    "effects without a record"
echo "t_kill9_restart: ok ($(h_count_log idemd.log "outcome=duplicate queue=") duplicates absorbed)"
