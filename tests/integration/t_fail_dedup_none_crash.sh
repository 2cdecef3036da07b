# t_fail_dedup_none_crash: dedup = "none": a message without an id that kills its worker is dead-lettered after max_attempts, not run for ever.
source "$H_ROOT/tests/chaos/lib.sh"
db=t_fail_dedup_none_crash
q=t_fail_dncrash.q
h_new_db "$db"
c_fresh_queues "$q" "$q.dlq"
{
    h_conf_common "$db"
    cat <<CONF
queues = ( { name = "$q"; handler = "$H_TEST_PLUGINS/counter.so"; workers = 1; dedup = "none"; max_attempts = 2; } );
CONF
} >idemd.conf
h_daemon_start idemd.conf idemd.log
{ h_gen n 1 50; printf -- '-\tsegv\n'; h_gen n 51 100; } | h_mq publish -r "$q" >pub.txt
h_assert_eq "$(cat pub.txt)" "published 101 confirmed 101" "publisher"
h_wait_depth "$q.dlq" 1 60
h_wait_sql "SELECT COUNT(*), SUM(n) FROM effects WHERE msg_id LIKE 'n%'" $'100\t100' 30
h_wait_depth "$q" 0 10
h_assert_eq "$(h_count_log idemd.log "killed by signal 11")" 2 "crashes (max_attempts = 2)"
h_wait_log idemd.log "outcome=reject queue=$q .*reason=\"handler crashed" 1 5
h_daemon_alive || h_fail "idemd died"
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"
echo "t_fail_dedup_none_crash: ok"
