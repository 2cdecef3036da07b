# t_fail_quorum: a quorum queue: exactly once, a "retry" message dead-lettered after max_attempts, and nothing lost to the crash guard across restarts.
source "$H_ROOT/tests/chaos/lib.sh"
db=t_fail_quorum
q=t_fail_quorum.q
dlq=$q.dlq
h_new_db "$db"
c_fresh_queues "$q" "$dlq" "$q.retry.100"
{
    h_conf_common "$db"
    cat <<CONF
queues = ( { name = "$q"; handler = "$H_TEST_PLUGINS/counter.so"; workers = 2; prefetch = 300;
             max_attempts = 3; retry_delays_ms = [ 100 ];
             declare = { quorum = true; }; settings = { sleep_ms = 5; }; } );
CONF
} >idemd.conf
h_daemon_start idemd.conf run1.log
grep -qE "^${q}[[:space:]]+quorum" <<<"$(h_rabbitmqctl list_queues name type)" || h_fail "$q is not a quorum queue"

# 1. Exactly once, and a message that always asks to retry ends in the DLQ after 3 attempts.
out=$({ h_gen a 1 500; printf 'r1\tretry\n'; h_gen a 501 1000; } | h_mq publish -r "$q")
h_assert_eq "$out" "published 1001 confirmed 1001" "publisher"
h_wait_sql "SELECT COUNT(*), SUM(n), MAX(n) FROM effects" $'1000\t1000\t1' 60
h_wait_depth "$dlq" 1 30
h_mq get "$dlq" >dlq1.txt
cat dlq1.txt
line=$(cat dlq1.txt)
h_assert_eq "$(cut -f1,2 <<<"$line")" $'r1\tretry' "dead letter"
h_assert_eq "$(c_hdr "$line" idemd-attempts)" 3 "idemd-attempts"
[[ "$(c_hdr "$line" idemd-error)" == *"gave up after 3 attempts"* ]] ||
    h_fail "idemd-error '$(c_hdr "$line" idemd-error)' lacks 'gave up after 3 attempts'"
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM msg_id_record WHERE msg_id = 'r1'")" 0 "record of r1"
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM effects WHERE msg_id = 'r1'")" 0 "effects of r1"
h_wait_depth "$q" 0 10

# 2. Deploys: idemd stopped cleanly (SIGTERM) three times while it works through a backlog.
# The unstarted deliveries in each worker's prefetch go back to the quorum queue, which
# counts every return in x-delivery-count; none of them ever reached a handler.
out=$(h_gen b 1 3000 | h_mq publish -r "$q")
h_assert_eq "$out" "published 3000 confirmed 3000" "publisher (backlog)"
for run in 2 3 4; do
    [[ $run == 2 ]] || h_daemon_start idemd.conf run$run.log
    sleep 1
    h_daemon_stop || c_soft_fail "idemd exited with status $? on SIGTERM (run $run)"
    echo "after run $run: $(h_sql "SELECT COUNT(*) FROM effects WHERE msg_id LIKE 'b%'") of 3000 done"
done
h_daemon_start idemd.conf run5.log
h_wait_depth "$q" 0 90 || c_soft_fail "$q not drained"
# Settled: every backlog message either has its effect or sits in the DLQ.
deadline=$((SECONDS + 60))
until (($(h_sql "SELECT COUNT(*) FROM effects WHERE msg_id LIKE 'b%'") + $(h_depth "$dlq") >= 3000)); do
    ((SECONDS < deadline)) || { c_soft_fail "backlog not settled in 60 s"; break; }
    sleep 0.5
done
h_daemon_alive || c_soft_fail "idemd died"
h_daemon_stop || c_soft_fail "idemd exited with status $? on SIGTERM"
c_soft_eq "$(h_sql "SELECT COUNT(*), COALESCE(SUM(n), 0), COALESCE(MAX(n), 0) FROM effects WHERE msg_id LIKE 'b%'")" \
    $'3000\t3000\t1' "effects of the backlog after three clean restarts"
never_run=$(cat run*.log | grep -cE "outcome=reject queue=$q id=b[0-9]+ .*reason=\"handler crashed") || true
c_soft_eq "$never_run" 0 "backlog messages dead-lettered as 'handler crashed'"
c_soft_eq "$(h_depth "$dlq")" 0 "dead letters of the backlog"
if [[ "$never_run" != 0 ]]; then
    ex=$(grep -h -m 1 -E "outcome=reject queue=$q id=b[0-9]+ .*reason=\"handler crashed" run5.log |
        sed 's/.* id=\([^ ]*\) .*/\1/')
    echo "every log line about $ex (it never reached a handler before being dead-lettered):"
    grep -h "id=$ex " run*.log || true
    echo "its attempt row: $(h_sql "SELECT attempts FROM idemd_attempt WHERE msg_id = '$ex'")"
fi
c_soft_done
echo "t_fail_quorum: ok"
