# t_fail_guard_instance_kill: max_attempts = 1: runs cut short twice by kill -9 of the whole daemon are not a crash loop (the third run commits the message once, nothing is dead-lettered); a handler crash still is (dead-lettered after one).
source "$H_ROOT/tests/chaos/lib.sh"
db=t_fail_guard_ikill
q=t_guard_ikill.q
h_new_db "$db"
c_fresh_queues "$q" "$q.dlq" "$q.retry.200"
{
    h_conf_common "$db"
    cat <<CONF
queues = ( { name = "$q"; handler = "$H_TEST_PLUGINS/counter.so"; workers = 1; max_attempts = 1;
             retry_delays_ms = [ 200 ]; settings = { sleep_ms = 3000; }; } );
CONF
} >idemd.conf
h_daemon_start idemd.conf idemd.log
out=$(printf 'k1\tbody\n' | h_mq publish -r "$q")
h_assert_eq "$out" "published 1 confirmed 1" "publisher"

# Inside the handler: its transaction holds k1's record while counter.so sleeps 3 s before
# its effect. Round r kills the daemon there; the redelivered runs count their starts first.
for round in 1 2; do
    h_wait_sql "SELECT (SELECT COUNT(*) FROM information_schema.innodb_trx WHERE trx_rows_modified >= 1),
                       (SELECT COALESCE(MAX(attempts), 0) FROM idemd_attempt)" $'1\t'$((round - 1)) 30
    h_daemon_kill9
    h_daemon_start idemd.conf idemd.log
done
h_wait_sql "SELECT COUNT(*), MAX(n) FROM effects WHERE queue = '$q'" $'1\t1' 30
h_wait_depth "$q" 0 10
h_assert_eq "$(h_depth "$q.dlq")" 0 "dead letters after two instance kills"
h_assert_eq "$(h_count_log idemd.log "handler crashed")" 0 "'handler crashed' lines"
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM idemd_attempt")" 0 "attempt rows left (cleared by the commit)"

# A handler that kills its worker: one crash, confirmed by its successor, and max_attempts = 1
# dead-letters the message at its redelivery without running it again.
out=$(printf 's1\tsegv\n' | h_mq publish -r "$q")
h_assert_eq "$out" "published 1 confirmed 1" "publisher (segv)"
h_wait_depth "$q.dlq" 1 60
h_assert_eq "$(h_count_log idemd.log "worker $q#0 \(pid [0-9]+\) killed by signal 11")" 1 "crashes"
h_assert_eq "$(h_sql "SELECT attempts, crashes FROM idemd_attempt WHERE msg_id = 's1'")" $'2\t1' \
    "s1's starts (the crashed one, the refused one) and crashes"
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"
c_dead_letter "$q.dlq" s1 segv "handler crashed: its worker died in the handler 1 times"
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM effects WHERE msg_id = 's1'")" 0 "effects of s1"
echo "t_fail_guard_instance_kill: ok"
