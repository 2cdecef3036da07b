# t_fail_declare_refused: the broker refuses a queue's declaration (406, it exists with other arguments): the reason is logged once, STATUS= shows it, restarts back off, the other queue works, and the queue recovers once fixed.
#
# NOTIFY_SOCKET points at notifysock (tests/tools/notifysock.c, see t_systemd_notify), which
# prints "EPOCH.USEC pid=PID TEXT" for each datagram the daemon sends.
db=t_fail_declare_refused
qbad=t_fail_declare_refused.bad
qok=t_fail_declare_refused.ok
h_new_db "$db"

h_notify_wrapper
h_notify_start notify.log
trap h_notify_stop EXIT

# The queue exists with x-dead-letter-* arguments; idemd declares it without: 406.
h_mq declare "$qbad" --dlq "$qbad.theirs"
{
    H_LOG_LEVEL=info h_conf_common "$db"
    cat <<CONF
queues = ( { name = "$qbad"; handler = "$H_TEST_PLUGINS/counter.so"; workers = 1; },
           { name = "$qok"; handler = "$H_TEST_PLUGINS/counter.so"; workers = 1; } );
CONF
} >idemd.conf
# READY=1 comes although qbad does not consume: the other queue works.
IDEMD=$PWD/idemd-notify h_daemon_start idemd.conf idemd.log
h_wait_log notify.log ' READY=1$' 1 10 || h_fail "no READY=1"
grep -q "ready: 2 queues, 1 workers consuming; 1 not: their queue's declaration failed" idemd.log ||
    h_fail "the ready line does not count the worker whose declaration failed"

# Six exits, each refused the same way: the waits between them are at least
# 0.1+0.2+0.4+0.8+1.6 s (half of 200 ms doubling; jitter takes up to half).
exits="worker $qbad#0 \(pid [0-9]+\) exited with code 78"
h_wait_log idemd.log "$exits" 6 60 || h_fail "fewer than 6 exits of $qbad#0"
mapfile -t ex < <(grep -E -- "$exits" idemd.log)
t1=$(h_log_epoch "${ex[0]}")
t6=$(h_log_epoch "${ex[5]}")
awk -v a="$t1" -v b="$t6" 'BEGIN { exit !(b - a >= 3.0) }' ||
    h_fail "6 exits within $t1..$t6: no backoff between restarts"
h_assert_eq "$(h_count_log idemd.log 'PRECONDITION_FAILED')" 1 "lines with the broker's reason"
grep -qE "error: queue '$qbad': declaring queue '$qbad': channel closed by broker: 406 \"PRECONDITION_FAILED - inequivalent arg 'x-dead-letter-exchange'" idemd.log ||
    h_fail "the broker's reason is not logged as an error naming the queue"
h_wait_log notify.log "STATUS=.*; $qbad: 0/1 up, 0 ok, 0 failed, declare failed: declaring queue '$qbad': .*406 \"?PRECONDITION_FAILED" 1 15 ||
    h_fail "STATUS= does not show $qbad's declaration failure"

# The other queue processes its messages meanwhile.
h_assert_eq "$(h_gen k 1 20 | h_mq publish -r "$qok")" "published 20 confirmed 20" "publisher (ok)"
h_wait_sql "SELECT COUNT(*) FROM effects WHERE queue = '$qok'" 20 30

# Fixed: the queue is made again as idemd declares it; a backlog gathers until the worker's next
# start (backoff at most 30 s) takes it.
h_mq delete "$qbad"
h_mq declare "$qbad"
h_assert_eq "$(h_gen b 1 30 | h_mq publish -r "$qbad")" "published 30 confirmed 30" "publisher (backlog)"
h_wait_sql "SELECT COUNT(*) FROM effects WHERE queue = '$qbad'" 30 90
h_wait_log idemd.log "worker $qbad#0 declared its queues: consuming" 1 10 || h_fail "no recovery logged"
h_wait_log notify.log "STATUS=2/2 workers consuming; .*; $qbad: 1/1 up, 30 ok, 0 failed; $qok: " 1 15 ||
    h_fail "STATUS= still shows the failure after the recovery"
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"
h_assert_eq "$(h_count_log idemd.log 'PRECONDITION_FAILED')" 1 "lines with the broker's reason"
h_assert_eq "$(h_sql "SELECT COUNT(*), MAX(n) FROM effects WHERE queue = '$qbad'")" $'30\t1' "qbad effects"
h_assert_eq "$(h_sql "SELECT COUNT(*), MAX(n) FROM effects WHERE queue = '$qok'")" $'20\t1' "qok effects"
h_assert_eq "$(h_depth "$qbad")" 0 "qbad drained"
echo "t_fail_declare_refused: ok"
