# t_fail_graceful_stop: SIGTERM mid-run: workers cancel their consumers, run and ack what they already received, exit 0 in time, nothing committed is left unacked, nothing is left both unacked and undone; a restart finishes exactly once.
source "$H_ROOT/tests/chaos/lib.sh"
db=t_fail_graceful_stop
q=t_fail_graceful.q
total=2000
shutdown_timeout=10
mport=$(h_free_port 31000 2000)
h_new_db "$db"
c_fresh_queues "$q" "$q.dlq"
{
    h_conf_common "$db" | sed "s/shutdown_timeout = [0-9]*/shutdown_timeout = $shutdown_timeout/"
    cat <<CONF
metrics = { listen = "127.0.0.1:$mport"; };
queues = ( { name = "$q"; handler = "$H_TEST_PLUGINS/counter.so"; workers = 2; prefetch = 100;
             batch_size = 50; settings = { sleep_ms = 5; }; } );
CONF
} >idemd.conf
grep -q "shutdown_timeout = $shutdown_timeout;" idemd.conf || h_fail "could not set shutdown_timeout"
h_mq declare "$q" # published before the first start
out=$(h_gen g 1 $total | h_mq publish -r "$q")
h_assert_eq "$out" "published $total confirmed $total" "publisher"

# Three runs, each stopped by SIGTERM at a different point; a fourth finishes.
run=0
# Each run is stopped once it has done 200 more. After SIGTERM a worker finishes its batch and
# runs what it holds (the drain: up to its prefetch of 100), so each stop leaves room for that.
for _ in 1 2 3; do
    run=$((run + 1))
    at=$(($(h_sql "SELECT COUNT(*) FROM msg_id_record") + 200))
    h_daemon_start idemd.conf run$run.log
    h_wait_sql "SELECT COUNT(*) >= $at FROM msg_id_record" 1 60
    pid=$H_DAEMON_PID
    t0=$(date +%s%N)
    kill -TERM "$pid"
    while kill -0 "$pid" 2>/dev/null && (($(date +%s%N) - t0 < (shutdown_timeout + 5) * 1000000000)); do
        sleep 0.05
    done
    kill -0 "$pid" 2>/dev/null && h_fail "run $run: idemd still running $((shutdown_timeout + 5)) s after SIGTERM"
    stop_ms=$((($(date +%s%N) - t0) / 1000000))
    rc=0
    wait "$pid" || rc=$?
    h_assert_eq "$rc" 0 "run $run: exit status after SIGTERM"
    pgrep -g "$pid" >/dev/null && h_fail "run $run: workers outlived the supervisor"
    rm -f "$H_DIR/daemons/$pid"
    H_DAEMON_PID=
    ((stop_ms < shutdown_timeout * 1000)) ||
        h_fail "run $run: stopping took $stop_ms ms, shutdown_timeout is $shutdown_timeout s"

    done1=$(h_sql "SELECT COUNT(*) FROM msg_id_record")
    ((done1 < total)) || h_fail "run $run: all $total were done before SIGTERM: nothing was tested"
    depth1=$(h_depth "$q")
    # Every message is either committed and acked, or back in the queue: none both, none neither.
    h_assert_eq "$((done1 + depth1))" "$total" "run $run: committed ($done1) + ready ($depth1) after the stop"
    h_assert_eq "$(h_sql "SELECT COUNT(*), COALESCE(MAX(n), 1) FROM effects")" "$done1"$'\t1' \
        "run $run: effects after the stop"
    errors=$(c_errors run$run.log)
    [[ -z "$errors" ]] || h_fail "run $run logged errors: $errors"
    h_assert_eq "$(h_count_log run$run.log "shutdown_timeout reached")" 0 "run $run: workers killed at shutdown_timeout"
    h_assert_eq "$(h_count_log run$run.log "drained: exited with code 0")" 2 "run $run: workers that drained cleanly"
    h_assert_eq "$(h_count_log run$run.log "main info: stopped")" 1 "run $run: supervisor's stop line"
    h_assert_eq "$(h_count_log run$run.log "not run within the drain time")" 0 "run $run: deliveries given back"
    echo "run $run: stopped in $stop_ms ms with $done1 of $total done"
done

h_daemon_start idemd.conf run4.log
h_wait_sql "SELECT COUNT(*) FROM msg_id_record" "$total" 60
h_wait_sql "SELECT COUNT(*), SUM(n), MAX(n) FROM effects" "$total"$'\t'"$total"$'\t1' 30
h_wait_depth "$q" 0 30
# The stops gave nothing back: what a worker had received it ran (drain), so no delivery
# came back redelivered (a redelivered one runs alone, as a crash suspect).
redelivered=$(curl -sS --max-time 5 "http://127.0.0.1:$mport/metrics" |
    awk -v q="$q" '$1 == "idemd_redelivered_total{queue=\"" q "\"}" { print $2 }')
h_assert_eq "$redelivered" 0 "deliveries redelivered to the last run"
h_daemon_stop || h_fail "idemd exited with status $? on the last SIGTERM"
h_assert_eq "$(h_count_log run4.log "outcome=duplicate ")" 0 "duplicates in the last run"
h_assert_eq "$(h_sql "SELECT COUNT(*), SUM(n), MAX(n) FROM effects")" "$total"$'\t'"$total"$'\t1' "effects at the end"
h_assert_eq "$(h_depth "$q")" 0 "depth at the end"
echo "t_fail_graceful_stop: ok"
