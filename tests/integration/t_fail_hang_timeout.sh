# t_fail_hang_timeout: a handler that hangs is killed after handler_timeout, counted as a crash and dead-lettered after max_attempts; the rest exactly once.
source "$H_ROOT/tests/chaos/lib.sh"
db=t_fail_hang_timeout
q=t_fail_hang.q
dlq=$q.dlq
h_new_db "$db"
c_fresh_queues "$q" "$dlq"
{
    h_conf_common "$db"
    cat <<CONF
queues = ( { name = "$q"; handler = "$H_TEST_PLUGINS/counter.so"; workers = 1; handler_timeout = 2; max_attempts = 2;
             batch_size = 100; batch_wait_ms = 20; } );
CONF
} >idemd.conf
h_daemon_start idemd.conf idemd.log

{ h_gen m 1 50; printf 'stuck\thang\n'; h_gen m 51 100; } >msgs.txt
t0=$SECONDS
out=$(h_mq publish -r "$q" <msgs.txt)
h_assert_eq "$out" "published 101 confirmed 101" "publisher"

h_wait_depth "$dlq" 1 40
secs=$((SECONDS - t0))
h_wait_sql "SELECT COUNT(*), SUM(n), MAX(n) FROM effects WHERE queue = '$q'" $'100\t100\t1' 30
h_wait_depth "$q" 0 10
h_daemon_alive || h_fail "idemd died"

# Two starts of "stuck", each ended by SIGALRM after 2 s; then dead-lettered without a third.
kills=$(h_count_log idemd.log "worker $q#0 \(pid [0-9]+\) killed: handler ran longer than handler_timeout = 2 s")
h_assert_eq "$kills" 2 "workers killed by the handler timeout"
((secs >= 4)) || h_fail "dead-lettered after $secs s: two 2-second timeouts cannot have happened"
h_wait_log idemd.log "outcome=reject queue=$q id=stuck .*then=\"dead-lettered to $dlq\" reason=\"handler crashed" 1 5
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM effects WHERE msg_id = 'stuck'")" 0 "effects of stuck"
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM msg_id_record")" 100 "record rows"
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM msg_id_record WHERE msg_id = 'stuck'")" 0 "record of stuck"

h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"
c_dead_letter "$dlq" stuck hang "handler crashed"
h_assert_eq "$(c_hdr "$C_DL_LINE" idemd-queue)" "$q" "idemd-queue"
echo "t_fail_hang_timeout: ok (dead-lettered after $secs s)"
