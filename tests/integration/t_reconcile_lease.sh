# t_reconcile_lease: two idemd instances on one database run reconcile() one at a time, once per interval; when one stops, the other takes over, under load too.
db=t_reconcile_lease
q=t_reconcile_lease.q
total=2400 # 16 s of load at 150 messages/s in the second part
h_new_db "$db"
{
    h_conf_common "$db" | sed 's/shutdown_timeout = 30;/shutdown_timeout = 30; reconcile_interval = 1;/'
    cat <<CONF
queues = ( { name = "$q"; handler = "$H_TEST_PLUGINS/counter.so"; workers = 2; prefetch = 50;
             settings = { reconcile_sleep_ms = 1500; }; } );
CONF
} >idemd.conf
grep -q 'reconcile_interval = 1;' idemd.conf || h_fail "could not set reconcile_interval"
runs() { h_sql "SELECT COUNT(*) FROM reconcile_runs"; }
# Pairs of committed runs that overlap in time.
overlaps()
{
    h_sql "SELECT COUNT(*) FROM reconcile_runs a JOIN reconcile_runs b
           ON a.id < b.id AND a.started_at < b.ended_at AND b.started_at < a.ended_at"
}
# Runs that started less than the interval (1 s, less the lease's millisecond rounding) after the one before ended.
too_soon()
{
    h_sql "SELECT COUNT(*) FROM (SELECT started_at, LAG(ended_at) OVER (ORDER BY started_at) AS prev
           FROM reconcile_runs) t WHERE prev IS NOT NULL AND started_at < prev + INTERVAL 990000 MICROSECOND"
}
pid_of_run() { h_sql "SELECT pid FROM reconcile_runs WHERE id = $1"; }

# Two instances with the same configuration: A, then B.
h_daemon_start idemd.conf a.log
a=$H_DAEMON_PID
a_workers=" $(pgrep -g "$a" | tr '\n' ' ')"
h_daemon_start idemd.conf b.log
b=$H_DAEMON_PID
b_workers=" $(pgrep -g "$b" | tr '\n' ' ')"
h_wait_sql "SELECT COUNT(*) >= 6 FROM reconcile_runs" 1 60
h_assert_eq "$(overlaps)" 0 "overlapping reconcile runs while both instances ran"
h_assert_eq "$(too_soon)" 0 "runs closer together than reconcile_interval"
first=$(pid_of_run "$(h_sql "SELECT MIN(id) FROM reconcile_runs")")
[[ "$a_workers " == *" $first "* ]] || h_fail "the first run (pid $first) was not by instance A (workers$a_workers)"

# Stop A (a run in flight finishes and commits first); B goes on alone, under load.
H_DAEMON_PID=$a
h_daemon_stop || h_fail "instance A exited with status $? on SIGTERM"
after=$(h_sql "SELECT COALESCE(MAX(id), 0) FROM reconcile_runs")
h_gen r 1 $total | h_mq publish -r "$q" --rate 150 >pub.txt 2>pub.err &
pub=$!
h_wait_sql "SELECT COUNT(*) >= 3 FROM reconcile_runs WHERE id > $after" 1 30
kill -0 "$pub" 2>/dev/null || h_fail "the load ended before B's runs: nothing proven under load"
for id in $(h_sql "SELECT id FROM reconcile_runs WHERE id > $after"); do
    p=$(pid_of_run "$id")
    [[ "$b_workers " == *" $p "* ]] || h_fail "run $id after A stopped was by pid $p, not by B (workers$b_workers)"
done
wait "$pub" || h_fail "publisher failed: $(cat pub.err)"
h_assert_eq "$(cat pub.txt)" "published $total confirmed $total" "publisher"
h_wait_sql "SELECT COUNT(*), MAX(n) FROM effects" "$total	1" 60
H_DAEMON_PID=$b
h_daemon_stop || h_fail "instance B exited with status $? on SIGTERM"

echo "reconcile runs: $(runs), by pid: $(h_sql "SELECT pid, COUNT(*) FROM reconcile_runs GROUP BY pid" | tr '\n\t' '; ')"
h_assert_eq "$(overlaps)" 0 "overlapping reconcile runs"
h_assert_eq "$(too_soon)" 0 "runs closer together than reconcile_interval"
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM reconcile_runs WHERE ended_at IS NULL")" 0 "unfinished runs committed"
# The lease's last owner is one of B's workers, named by host, pid, start time and worker.
owner=$(h_sql "SELECT owner FROM idemd_lease WHERE name = 'reconcile:$q'")
[[ "$owner" =~ ^[^:]+:([0-9]+):[0-9]+:$q#[01]$ ]] || h_fail "lease owner '$owner'"
[[ "$b_workers " == *" ${BASH_REMATCH[1]} "* ]] || h_fail "lease owner '$owner' is not one of B's workers"
h_assert_eq "$(h_count_log a.log 'reconcile failed|rolled back')" 0 "failed runs in A"
h_assert_eq "$(h_count_log b.log 'reconcile failed|rolled back')" 0 "failed runs in B"
echo "t_reconcile_lease: ok"
