# t_fail_graceful_backlog: max_attempts = 1 and a backlog: three SIGTERM/restart cycles cost no attempt; nothing is dead-lettered, every effect once.
source "$H_ROOT/tests/chaos/lib.sh"
db=t_fail_graceful_backlog
q=t_fail_gback.q
h_new_db "$db"
c_fresh_queues "$q" "$q.dlq"
{
    h_conf_common "$db"
    cat <<CONF
queues = ( { name = "$q"; handler = "$H_TEST_PLUGINS/counter.so"; workers = 1; prefetch = 200; batch_size = 20;
             max_attempts = 1; settings = { sleep_ms = 2; }; } );
CONF
} >idemd.conf
for cycle in 1 2 3; do
    h_daemon_start idemd.conf idemd.log
    if ((cycle == 1)); then
        h_gen g 1 1500 | h_mq publish -r "$q" >pub.txt
        h_assert_eq "$(cat pub.txt)" "published 1500 confirmed 1500" "publisher"
    fi
    want=$((cycle * 200))
    deadline=$((SECONDS + 60))
    while (($(h_sql "SELECT COUNT(*) FROM effects") < want)); do
        ((SECONDS < deadline)) || h_fail "cycle $cycle: fewer than $want effects after 60 s"
        sleep 0.1
    done
    h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM (cycle $cycle)"
done
h_daemon_start idemd.conf idemd.log
h_wait_sql "SELECT COUNT(*), SUM(n), MAX(n) FROM effects" $'1500\t1500\t1' 90
h_wait_depth "$q" 0 10
h_assert_eq "$(h_depth "$q.dlq")" 0 "dead-lettered messages"
h_assert_eq "$(h_count_log idemd.log "handler crashed")" 0 "'handler crashed' lines"
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"
echo "t_fail_graceful_backlog: ok"
