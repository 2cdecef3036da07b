# t_reconcile_timeout: a reconcile() that outlasts reconcile_timeout is killed and rolled back; its lease keeps others off until it expires; messages flow meanwhile.
db=t_reconcile_timeout
q=t_reconcile_timeout.q
h_new_db "$db"
{
    h_conf_common "$db" |
        sed 's/shutdown_timeout = 30;/shutdown_timeout = 30; reconcile_interval = 1; reconcile_timeout = 1;/'
    cat <<CONF
queues = ( { name = "$q"; handler = "$H_TEST_PLUGINS/counter.so"; workers = 1; settings = { reconcile_sleep_ms = 5000; }; } );
CONF
} >idemd.conf
grep -q 'reconcile_timeout = 1;' idemd.conf || h_fail "could not set reconcile_timeout"
h_daemon_start idemd.conf idemd.log
h_wait_log idemd.log "worker $q#0 \(pid [0-9]+\) killed: reconcile\(\) ran longer than reconcile_timeout = 1 s" 1 20
killed=$(grep -oE "worker $q#0 \(pid [0-9]+\) killed: reconcile" idemd.log | grep -oE '[0-9]+' | tail -n 1)
owner=$(h_sql "SELECT owner FROM idemd_lease WHERE name = 'reconcile:$q'")
[[ "$owner" == *":$killed:"* ]] || h_fail "lease owner '$owner' is not the killed worker $killed"
# The restarted worker consumes; the dead worker's lease (reconcile_timeout + 30 s) keeps reconcile off.
h_gen m 1 200 | h_mq publish -r "$q" >/dev/null
h_wait_sql "SELECT COUNT(*), MAX(n) FROM effects" $'200\t1' 30
h_assert_eq "$(h_count_log idemd.log 'killed: reconcile')" 1 "reconcile kills while the lease holds"
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM reconcile_runs")" 0 "committed runs of a killed reconcile"
h_assert_eq "$(h_sql "SELECT owner FROM idemd_lease WHERE name = 'reconcile:$q'")" "$owner" "lease owner"
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"
echo "t_reconcile_timeout: ok"
